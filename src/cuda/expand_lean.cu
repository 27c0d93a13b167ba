/*
 * expand_lean.cu — the common case of lowrank.cu's expand with every run-time decision made at
 * compile time: out[M×N] = merge(base, c_m·(P·Q)) (LoRA / LoCon merge forward, LoHa's Hadamard
 * pair (P·Q) ⊙ (P2·Q2), bypass forward's y = y0 + c·h·Uᵀ with Q given N×r), where
 *   - base (if any), out, P, Q (and P2, Q2) are all in the 16-bit compute dtype CT;
 *   - every view is row-major with 16-byte aligned rows (LK_VEC) (any M, N and rank: a 16-byte
 *     chunk across a right edge copies its in-range elements and zero-fills the rest);
 *   - P in one part (not fp32 scratch split into parts); DoRA (its statistics launch and its
 *     merge launch, lk_expand_merge) with a base and Q not transposed.
 * Formulas, roundings and results are lowrank.cu's k_expand's, bit for bit (same products by
 * mma.sync m16n8k16 with fp32 accumulators over the same k order, same epilogue
 * out = RN_CT(merge_elem(w, acc·rowc, mode, mf)), merge_elem as merge_ep.cuh, the same DoRA
 * statistics code, expand_tile.cuh).
 *
 * Why a second kernel (H200 profile of k_expand, LoRA merge 4096² r32 bf16, docs/kernels.md
 * "seventh session"): 44 thread-instructions per output element, 48% of issue slots busy with
 * 42% of the warps' stall time waiting for instruction fetch (the general kernel inlines every
 * dtype, stride, DoRA and stats path), DRAM 20% busy — issue- and fetch-bound, not memory-bound.
 * Here the tile is the same (64×128 of out, 8 warps as 2×4 of 32×32), but the loads are
 * unconditional 16-byte cp.async (zero-fill outside the matrix), the merge mode, base presence,
 * DoRA and Hadamard pair are template parameters, the epilogue works on packed pairs in place in
 * the base tile, and the store is one 16-byte store per chunk. The first lean version (one tile
 * per block, 4 blocks per SM) cut the row from 44.1 to 30.9 µs (ncu: 12.7 M instructions instead
 * of 22.9 M, DRAM 41%, L2 75%, 1.97 TB/s): each block still waited for its base tile with nothing
 * else in flight. So the kernel is persistent: block b takes tiles b, b + G, … (G = blocks that
 * fit, from the occupancy calculator × SMs) and, with two stages, issues tile i+1's loads before
 * it multiplies, merges and stores tile i — twice the bytes in flight per block.
 *
 * In the plain merge of one product (EPI 0 without the Hadamard pair: LoRA / LoCon / DyLoRA merge,
 * the bypass forward's y0 + h·Uᵀ; lean_breg) the base tile does not take cp.async and the kernel
 * is not persistent: a block per tile, one stage; each thread loads its four 16-byte base chunks into registers (lean_fetch_tile) before the operands'
 * cp.async and puts them into the stage (lean_put) before the product, and the other resident
 * blocks cover the wait. The stream probe measured a 64×128 tile through registers, a block per
 * tile, at 3.43–3.57 TB/s (8192–11008 × 4096) against 2.63–2.66 for the persistent two-stage
 * cp.async pattern (docs/kernels.md, eighteenth session). A persistent version fetching the next
 * tile into registers during this one needed 123 registers (2 blocks per SM) and was slower.
 *
 * Shared memory (dynamic), one stage: base/out tile 64×136 CT (17 KB), P 64×(RP+8), Q RP×136 or
 * 128×(RP+8), with the Hadamard pair P2, Q2 again: RP 32 → 31 KB (45 KB with the pair), RP 128 →
 * 68 KB; two stages when one is ≤ 48 KB (3 blocks per SM at RP 32), else one. Rank tile 128
 * without a base, DoRA, statistics or the pair: 128-row tiles (lean_big_ok below), 104 KB. No other memory.
 * Deterministic (each element's arithmetic is fixed; tiles are independent).
 * LYCO_CUDA_EXPAND_GENERAL=1 sends every call to k_expand (A/B).
 */
#include <stdlib.h>

#include "cuda/expand_tile.cuh"

namespace {

const int LM = EX_M;      /* tile rows (64) */
const int LN = EX_N;      /* tile columns (128) */
const int LNP = LN + 8;   /* row pitch of the base/out and r×N tiles (halfwords) */

/* One stage: the tile's base/out, DoRA backward's g tile (GT), P, Q (, P2, Q2). Host and device
   read the same sizes (lean_bytes). Two stages (the next tile's loads in flight during this tile's
   product, epilogue and stores) while that still leaves room for 3 blocks per SM on the H200 (2
   with the g tile); one stage beyond. */
__host__ __device__ constexpr int lean_off_p(bool gt, int tm = LM) { return tm * LNP * 2 * (gt ? 2 : 1); }
__host__ __device__ constexpr int lean_bytes(int rp, bool qt, bool hd, bool gt, int tm = LM) {
    return lean_off_p(gt, tm) + tm * (rp + 8) * 2 + (qt ? LN * (rp + 8) : rp * LNP) * 2 + (hd ? tm * (rp + 8) * 2 + rp * LNP * 2 : 0);
}
__host__ __device__ constexpr int lean_stages(int bytes, bool gt) { return bytes <= (gt ? 56 : 48) * 1024 ? 2 : 1; }

template <int RP, bool QT, bool HD, bool GT, int TM = LM> struct lean_layout {
    static const int G = TM * LNP * 2; /* after the base tile */
    static const int P = lean_off_p(GT, TM);
    static const int Q = P + TM * (RP + 8) * 2;
    static const int P2 = Q + (QT ? LN * (RP + 8) : RP * LNP) * 2;
    static const int Q2 = P2 + (HD ? TM * (RP + 8) * 2 : 0);
    static const int BYTES = lean_bytes(RP, QT, HD, GT, TM);
    static const int STAGES = lean_stages(BYTES, GT);
};

/* Tile rows (TM): 64, or 128 for rank tile 128 in the persistent epilogues without a base (EPI 1,
   2: bypass backward's dx = gh·D, ΔW alone). Why (H200 Nsight Compute, LoRA bypass 8192 tok ×
   4096² r128 bf16, docs/kernels.md session 32): the rank-128 expand ran at 71 % of L2 throughput
   and 34 % of DRAM — each 64 × 128 tile of out re-read 48 KB of P and Q from L2 for 16 KB of base.
   128 rows halve Q's re-reads per output byte; warps 2 × 4 of 64 × 32 (MI = 4) read 6 fragments per
   16 mma instead of 4 per 8. Each element's sum is the same k16 sequence through the same mma and
   its epilogue the same: the same bits. 123–128 registers, 104 KB: two blocks per SM. Measured
   (ncu, same call): dx 77.0 → 70.1 µs; the plain merge with its base through registers (EPI 0:
   merge forward, bypass forward's y0 + h·Uᵀ) did not move (37.7 → 39.5, 94.2 → 96.1, 70.7 → 71.5,
   107.6 → 106.4 µs: two blocks of 8 warps per SM instead of three), so it keeps 64 rows; rank tile
   64 keeps 64 rows too (unmeasured). LYCO_CUDA_EXPAND_BIG=0: 64-row tiles (A/B). */
template <int EPI, bool HD> struct lean_big_ok {
    static const bool ON = (EPI == 1 || EPI == 2) && !HD;
};

template <typename CT> __device__ __forceinline__ float lo16(unsigned u) { return bits16_to_f(u & 0xffffu, ct_of<CT>::dt); }
template <typename CT> __device__ __forceinline__ float hi16(unsigned u) { return bits16_to_f(u >> 16, ct_of<CT>::dt); }

/* The epilogues (EPI): 0 fmaf(±mf, dw, w) (base read), 1 fmaf(±mf, dw, 0) (modes 0 and 2 without a
   base, as k_expand's w = 0), 2 mf·dw (mode 1) — merge_elem without DoRA, the sign of mf − for
   mode 2; 3 merge_elem with DoRA (statistics st per kept index); 4 DoRA's statistics mode
   (ex_tile_stats, no output); DoRA's backward, with a g tile (GT): 5 the statistics with Σ g·V,
   6 out = GV = dora_gv(g, w, dw) (rounded to CT). */
template <int EPI> struct lean_epi {
    static const bool GT = EPI >= 5;                                  /* g tile loaded */
    static const bool BASE = EPI == 0 || EPI >= 3;                   /* base tile loaded */
    static const bool STATS = EPI == 4 || EPI == 5;                  /* no output, partials */
};
/* The plain merge (EPI 0) of one product: the base through registers, a block per tile (above).
   Measured slower with the Hadamard pair (LoHa merge 4096² r16: 30.6 → 34.4 µs with 126
   registers; 34.1 µs on 32-row tiles with 57) and for DoRA's modes (11008×4096: 160–163 →
   171–186 µs), so those keep the persistent kernel. */
template <int EPI, bool HD> struct lean_breg {
    static const bool ON = EPI == 0 && !HD;
};
template <int EPI> __device__ __forceinline__ float lean_merge(float w, float dw, float mf) {
    return EPI == 0 ? fmaf(mf, dw, w) : EPI == 1 ? fmaf(mf, dw, 0.0f) : mf * dw;
}

template <typename CT> struct lean_w { /* w of the base tile in shared memory (already CT) */
    const char *s;
    __device__ float operator()(int r, int c) const { return bits16_to_f(((const unsigned short *)s)[r * LNP + c], ct_of<CT>::dt); }
};

/* The DoRA statistics of the tile's rows (wd_on_out) or columns, staged in shared memory next to
   rowc: sd[e][q] = st[3·kept + e] for tile row / column q (an index outside the matrix reads kept
   index 0, whose element is never stored). Read from global memory per element they made the
   DoRA epilogues run at half the plain merge's bandwidth (H200, 11008×4096: merge 137 µs against
   69 for the same bytes without DoRA). */
__device__ __forceinline__ void lean_dora_stage(const lk_expand_args &a, float (*sd)[LN], i64 mb, i64 nb) {
    const int q = (int)threadIdx.x;
    if (q >= (a.dora.on_out ? LM : LN)) return;
    i64 k = 0;
    if (a.dora.on_out) k = mb + q < a.M ? mb + q : 0;
    else k = nb + q < a.N ? (nb + q) / a.K : 0;
#pragma unroll
    for (int e = 0; e < 3; e++) sd[e][q] = a.st[3 * k + e];
}

/* merge_elem with DoRA (EPI 3), or DoRA's GV (EPI 6, g given), for tile element (row, col) */
template <int EPI>
__device__ __forceinline__ float lean_dora(const lk_expand_args &a, const float (*sd)[LN], float g, float w, float dw, int row, int col) {
    const int q = a.dora.on_out ? row : col;
    const float s3[3] = {sd[0][q], sd[1][q], sd[2][q]};
    return EPI == 6 ? dora_gv(g, w, dw, s3, a.ct) : merge_elem(w, dw, a.mode, 0.0f, true, s3);
}

/* Issue tile (tm, tn)'s loads into stage st as one cp.async group (operands first, then the base). */
template <int RP, bool QT, bool HD, int EPI, int TM>
__device__ __forceinline__ void lean_load(const lk_expand_args &a, char *st, int tm, int tn) {
    typedef lean_layout<RP, QT, HD, lean_epi<EPI>::GT, TM> L;
    const i64 mb = (i64)tm * TM, nb = (i64)tn * LN;
    lean_issue<TM, RP>(st + L::P, a.P, mb, 0);
    if (QT) lean_issue<LN, RP>(st + L::Q, a.Q, nb, 0);
    else lean_issue<RP, LN>(st + L::Q, a.Q, 0, nb);
    if (HD) {
        lean_issue<TM, RP>(st + L::P2, a.P2, mb, 0);
        lean_issue<RP, LN>(st + L::Q2, a.Q2, 0, nb);
    }
    if (lean_epi<EPI>::BASE && !lean_breg<EPI, HD>::ON) lean_issue<TM, LN>(st, a.base, mb, nb);
    if (lean_epi<EPI>::GT) lean_issue<TM, LN>(st + L::G, a.G, mb, nb);
}

/* The base tile's chunks of this thread into registers (lean_fetch, common.cuh): a tile wholly
   inside the view takes one pointer and a fixed row step (4 loads, few registers: the general
   path's per-chunk 64-bit addresses and edge tests took the kernel from 64 to 123 registers); a
   tile across an edge takes lean_fetch. */
template <int TM>
__device__ __forceinline__ void lean_fetch_tile(uint4 (&reg)[lean_chunks<TM, LN>::N], const lk_view &v, i64 mb, i64 nb) {
    const int cpr = LN / 8;
    static_assert(NT % cpr == 0, "lean_fetch_tile: whole rows per pass");
    if (mb + TM <= v.rows && nb + LN <= v.cols) {
        const i64 pitch = v.s0 * 2;
        const char *p = (const char *)v.p + (mb * v.s0 + nb) * 2 + (i64)(threadIdx.x / cpr) * pitch + (threadIdx.x % cpr) * 16;
#pragma unroll
        for (int k = 0; k < lean_chunks<TM, LN>::N; k++) reg[k] = *(const uint4 *)(p + k * (NT / cpr) * pitch);
    } else {
        lean_fetch<TM, LN>(reg, v, mb, nb);
    }
}

/* Persistent: block b takes tiles b, b + G, b + 2G, … (G = gridDim.x; tile t = (t / tiles_n,
   t % tiles_n)); with two stages the next tile's loads fly while this one is multiplied, merged
   and stored. Each tile: wait for its group, product, epilogue in place in its base buffer,
   16-byte stores from there; a barrier before its stage is loaded again. */
template <typename CT, int RP, bool QT, bool HD, int EPI, int TM = LM>
__global__ __launch_bounds__(NT) void k_expand_lean(lk_expand_args a, int tiles_n, int tiles) {
    typedef lean_layout<RP, QT, HD, lean_epi<EPI>::GT, TM> L;
    static_assert(TM == LM || lean_big_ok<EPI, HD>::ON, "k_expand_lean: 128-row tiles only for EPI 1-2, one product");
    const int S = lean_breg<EPI, HD>::ON ? 1 : L::STAGES;
    const int MI = TM / 32; /* warps 2 × 4, each (TM/2) × 32 */
    extern __shared__ __align__(16) char dsm[];
    __shared__ float rowc[TM];
    __shared__ float sdora[EPI == 3 || EPI == 6 ? 3 : 1][LN]; /* DoRA statistics of the tile (lean_dora_stage) */
    const bool hasB = lean_epi<EPI>::BASE;
    const int G = (int)gridDim.x;
    const float sig = sigma_ct<CT>(a.sigma);
    const float rs = (float)a.row_scale * (a.sig_in_row ? sig : 1.0f);
    const float mf0 = (float)a.mult * (a.sig_in_mult ? sig : 1.0f), mf = a.mode == 2 ? -mf0 : mf0;
    const int dt = ct_of<CT>::dt;
    const int warp = threadIdx.x >> 5, m0 = (warp & 1) * (TM / 2), n0 = (warp >> 1) * 32;
    const int kk = (int)((a.r + 15) / 16 * 16), kk2 = HD ? (int)((a.r2 + 15) / 16 * 16) : 0;

    int t = (int)blockIdx.x;
    if (S == 2 && t < tiles) lean_load<RP, QT, HD, EPI, TM>(a, dsm, t / tiles_n, t % tiles_n);
    cp_commit();
    for (int i = 0; t < tiles; t += G, i++) {
        char *st = dsm + (S == 2 ? (i & 1) * L::BYTES : 0);
        const int tm = t / tiles_n, tn = t % tiles_n;
        const i64 mb = (i64)tm * TM, nb = (i64)tn * LN;
        uint4 breg[lean_chunks<TM, LN>::N]; /* lean_breg: this thread's base chunks of the tile */
        if constexpr (lean_breg<EPI, HD>::ON) lean_fetch_tile<TM>(breg, a.base, mb, nb);
        if (S == 1) lean_load<RP, QT, HD, EPI, TM>(a, dsm, tm, tn); /* this tile (the stage is free: barrier below) */
        else if (t + G < tiles) lean_load<RP, QT, HD, EPI, TM>(a, dsm + ((i + 1) & 1) * L::BYTES, (t + G) / tiles_n, (t + G) % tiles_n);
        cp_commit();
        if constexpr (lean_breg<EPI, HD>::ON) lean_put<TM, LN>(st, breg); /* waits for the loads; the stage is free (barrier below) */
        if (threadIdx.x < TM) {
            const i64 m = mb + threadIdx.x;
            rowc[threadIdx.x] = m < a.M ? rs * vget(a.rowmask, m, 1.0f) : 0.0f;
        }
        if (EPI == 3 || EPI == 6) lean_dora_stage(a, sdora, mb, nb);
        if (S == 2) cp_wait(1);
        else cp_wait(0);
        __syncthreads(); /* tile t's operands, base and rowc are visible */

        float acc[MI][4][4];
        acc_zero(acc);
        warp_mma_ldm<CT, MI, 4, false, !QT>::run(acc, (const CT *)(st + L::P), RP + 8, (const CT *)(st + L::Q), QT ? RP + 8 : LNP,
                                            m0, n0, kk);
        if (HD) {
            float acc2[2][4][4];
            acc_zero(acc2);
            warp_mma_ldm<CT, 2, 4, false, true>::run(acc2, (const CT *)(st + L::P2), RP + 8, (const CT *)(st + L::Q2), LNP, m0, n0, kk2);
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[mi][ni][e] *= acc2[mi][ni][e];
        }
        if constexpr (lean_epi<EPI>::STATS) {
            __syncthreads(); /* every warp's product done: P's and Q's buffers hold the reduction */
            ex_tile_stats<EPI == 5>(a, acc, lean_w<CT>{st}, lean_w<CT>{st + L::G}, rowc, (float *)(st + L::P), m0, n0, (i64)tm, (i64)tn);
        } else {
            /* epilogue in place: each accumulator pair's base pair is read and overwritten by its owner */
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int row = acc_row(m0, mi, 2 * h);
                    const float rc = rowc[row];
#pragma unroll
                    for (int ni = 0; ni < 4; ni++) {
                        const int col = acc_col(n0, ni, 0);
                        unsigned *p = (unsigned *)(st + (row * LNP + col) * 2);
                        const unsigned u = hasB ? *p : 0u;
                        const unsigned ug = EPI == 6 ? *(const unsigned *)(st + L::G + (row * LNP + col) * 2) : 0u;
                        const float d0 = acc[mi][ni][2 * h] * rc, d1 = acc[mi][ni][2 * h + 1] * rc;
                        const float v0 = EPI >= 3 ? lean_dora<EPI>(a, sdora, lo16<CT>(ug), lo16<CT>(u), d0, row, col)
                                                  : lean_merge<EPI>(lo16<CT>(u), d0, mf);
                        const float v1 = EPI >= 3 ? lean_dora<EPI>(a, sdora, hi16<CT>(ug), hi16<CT>(u), d1, row, col + 1)
                                                  : lean_merge<EPI>(hi16<CT>(u), d1, mf);
                        *p = f_to_bits(v0, dt) | (f_to_bits(v1, dt) << 16);
                    }
                }
            __syncthreads();
            lean_store<TM, LN>(st, a.out, mb, nb);
        }
        __syncthreads(); /* stage and rowc free for the next loads */
    }
    cp_wait(0);
}

bool lean_general_forced() {
    const char *v = getenv("LYCO_CUDA_EXPAND_GENERAL");
    return v && *v && *v != '0';
}

/* Blocks per SM the kernel can hold (the occupancy calculator, once per instantiation). */
template <typename CT, int RP, bool QT, bool HD, int EPI, int TM> int lean_blocks_per_sm(int bytes) {
    static int cached = 0;
    if (cached > 0) return cached;
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k_expand_lean<CT, RP, QT, HD, EPI, TM>, NT, bytes) != cudaSuccess || n < 1) {
        (void)cudaGetLastError();
        n = 1;
    }
    cached = n;
    return n;
}

template <typename CT, int RP, bool QT, bool HD, int EPI, int TM>
int lean_launch_tm(const lk_expand_args *a, const lk_device *dev, cudaStream_t s) {
    typedef lean_layout<RP, QT, HD, lean_epi<EPI>::GT, TM> L;
    const bool breg = lean_breg<EPI, HD>::ON;
    const int bytes = (breg ? 1 : L::STAGES) * L::BYTES;
    LK_SMEM_OPTIN(bytes, k_expand_lean<CT, RP, QT, HD, EPI, TM>);
    const i64 tiles_n = cdiv(a->N, (i64)LN), tiles = cdiv(a->M, (i64)TM) * tiles_n;
    i64 grid = breg ? tiles : (i64)lean_blocks_per_sm<CT, RP, QT, HD, EPI, TM>(bytes) * dev->sms; /* lean_breg: a block per tile */
    if (grid > tiles) grid = tiles;
    k_expand_lean<CT, RP, QT, HD, EPI, TM><<<(unsigned)grid, NT, bytes, s>>>(*a, (int)tiles_n, (int)tiles);
    LK_LAUNCHED("expand_lean");
    return LYCO_OK;
}

/* 128-row tiles where lean_big_ok admits them at rank tile 128 and two blocks fit per SM (104 KB),
   unless LYCO_CUDA_EXPAND_BIG=0 */
template <typename CT, int RP, bool QT, bool HD, int EPI> int lean_launch(const lk_expand_args *a, const lk_device *dev, cudaStream_t s) {
    const int BIG = RP >= 128 && lean_big_ok<EPI, HD>::ON ? 2 * LM : LM; /* no 128-row instance elsewhere */
    if (BIG != LM && lk_env_int("LYCO_CUDA_EXPAND_BIG", 1) != 0 &&
        lean_layout<RP, QT, HD, lean_epi<EPI>::GT, BIG>::BYTES + 1024 <= dev->smem_sm / 2 &&
        lean_layout<RP, QT, HD, lean_epi<EPI>::GT, BIG>::BYTES <= dev->smem_optin)
        return lean_launch_tm<CT, RP, QT, HD, EPI, BIG>(a, dev, s);
    return lean_launch_tm<CT, RP, QT, HD, EPI, LM>(a, dev, s);
}

template <typename CT, int RP, bool QT, bool HD> int lean_mode(const lk_expand_args *a, const lk_device *dev, cudaStream_t s) {
    if constexpr (!QT && !HD) /* DoRA's backward modes (lean_rank_tile admits G only there) */
        if (a->G.p) return a->stat_part ? lean_launch<CT, RP, QT, HD, 5>(a, dev, s) : lean_launch<CT, RP, QT, HD, 6>(a, dev, s);
    if (a->stat_part) return lean_launch<CT, RP, QT, HD, 4>(a, dev, s);
    if (a->dora.on) return lean_launch<CT, RP, QT, HD, 3>(a, dev, s);
    if (a->mode == 1) return lean_launch<CT, RP, QT, HD, 2>(a, dev, s);
    return a->base.p ? lean_launch<CT, RP, QT, HD, 0>(a, dev, s) : lean_launch<CT, RP, QT, HD, 1>(a, dev, s);
}

template <typename CT, int RP> int lean_rp(const lk_expand_args *a, const lk_device *dev, cudaStream_t s) {
    if (a->q_t) return lean_mode<CT, RP, true, false>(a, dev, s);
    return a->P2.p ? lean_mode<CT, RP, false, true>(a, dev, s) : lean_mode<CT, RP, false, false>(a, dev, s);
}

template <typename CT> int lean_ct(const lk_expand_args *a, i64 rp, const lk_device *dev, cudaStream_t s) {
    switch (rp) {
    case 16: return lean_rp<CT, 16>(a, dev, s);
    case 32: return lean_rp<CT, 32>(a, dev, s);
    case 64: return lean_rp<CT, 64>(a, dev, s);
    default: return lean_rp<CT, 128>(a, dev, s);
    }
}


/* The rank tile the lean kernel runs a call with, or 0 when the call is not its own. */
i64 lean_rank_tile(const lk_expand_args *a, const lk_device *dev) {
    const int ct = a->ct;
    if ((ct != DT_BF16 && ct != DT_F16) || lean_general_forced()) return 0;
    if (a->p_split || a->M <= 0 || a->N <= 0) return 0;
    const bool stats = a->stat_part != NULL, gt = a->G.p != NULL;
    if ((a->dora.on || stats) && (!a->base.p || a->q_t || (a->dora.on && !stats && !a->st))) return 0;
    const bool hd = a->P2.p != NULL;
    if (hd && (a->q_t || a->r2 < 1 || !ex_view_lean(a->P2, ct) || !ex_view_lean(a->Q2, ct))) return 0;
    if (gt && (hd || !a->dora.on || (stats && !a->stat_part_g) || !ex_view_lean(a->G, ct) || a->G.rows != a->M || a->G.cols != a->N))
        return 0;
    if (a->r < 1 || !ex_view_lean(a->P, ct) || !ex_view_lean(a->Q, ct)) return 0;
    if (a->base.p && !ex_view_lean(a->base, ct)) return 0;
    if (!stats && (!ex_view_lean(a->out, ct) || a->out.rows != a->M || a->out.cols != a->N)) return 0;
    if (a->mode < 0 || a->mode > 2) return 0;
    const i64 rp = lk_reduce_rank_tile(hd && a->r2 > a->r ? a->r2 : a->r);
    if (rp == 0 || cdiv(a->M, LM) * cdiv(a->N, LN) > (1LL << 30)) return 0; /* 32-bit tile indices */
    const int stage = lean_bytes((int)rp, a->q_t != 0, hd, gt);
    if (lean_stages(stage, gt) * stage + 1024 > dev->smem_optin) return 0; /* (lean_breg's one stage fits too) */
    return rp;
}

} // namespace

extern "C" int lk_expand_lean_fits(const lk_expand_args *a, const lk_device *dev) { return lean_rank_tile(a, dev) != 0; }

extern "C" int lk_expand_lean(const lk_expand_args *a, const lk_device *dev, void *stream, int *done) {
    const i64 rp = lean_rank_tile(a, dev);
    *done = rp != 0;
    if (rp == 0) return LYCO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    return a->ct == DT_BF16 ? lean_ct<bf16_t>(a, rp, dev, s) : lean_ct<f16_t>(a, rp, dev, s);
}
