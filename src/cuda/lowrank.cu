/*
 * lowrank.cu — the streaming kernels behind LoRA/LoCon on the GPU for ranks ≤ 128 (ALGORITHMS.md
 * §2.1, §1.6; NUMERICS.md §1): merge forward (plain and DoRA), merge backward's two reductions,
 * linear bypass forward and backward. Interface and formulas: kern_lowrank.h. Every big operand
 * (W, Γ, x, y0, dy) is read in its own dtype and rounded to the compute dtype CT in shared memory;
 * products run on the tensor cores (mma.sync m16n8k16, fp32 accumulators) for 16-bit CT and on
 * FFMA for fp32 CT; fp32 scratch operands (gh) enter 16-bit products as nsplit<CT> exact parts;
 * outputs are rounded once.
 *
 * Why these and not locon.cu's pipelined kernels (H200 profile, docs/kernels.md): those give
 * one block a long serial walk (all column tiles of 64 rows; all of I then all of O for a
 * 32-token tile) — 256–512 blocks at ~23% occupancy, 16% of DRAM bandwidth. Here every block
 * owns one output tile (expand) or one fixed range of the reduced axis (reductions) and lives
 * briefly, so several blocks per SM keep their loads in flight.
 *
 * expand (merge forward: P = lora_up O×r, Q = lora_down r×IK, base = W; bypass forward's second
 * product: P = h T×r, Q = lora_upᵀ, base = y0; bypass backward's dx: P = gh in parts, Q = lora_down,
 * no base): a block owns a 64×128 tile of out. It issues, with cp.async, its P rows (64×RP) and
 * Q columns (RP×128, or 128×RP transposed) as one group and the base tile (64×128) as a second,
 * so the product starts while the base tile is still in flight; operands not already in CT are
 * converted in shared memory (raw_operand). 8 warps as 2×4, each a 32×32 piece (MI 2, NI 4). The
 * epilogue reads base from shared memory at the accumulator positions (conflict-free: row pitch
 * 136 halfwords), applies merge_elem (plain or DoRA), writes the rounded result into a shared
 * tile (aliasing the operand buffers when they are big enough), and the block stores it with
 * coalesced 16-byte stores (element-wise at the edges and for unaligned or strided out). Any
 * strides and alignment are correct (raw_issue's element-wise fallback); row-major 16-byte-aligned
 * views take the fast paths. In place (out = base) is safe: a block reads its whole base tile
 * before it writes the same tile.
 *   Shared memory (bf16 W/out, bf16 factors): RP 16 → 42 KB, 32 → 45 KB, 64 → 52 KB,
 *   128 → 70 KB (+ conversion buffers for factors whose dtype is not CT).
 *   DoRA: a first launch in stats mode writes per-tile partial Σ V² (per row: one partial per
 *   128-column tile; per column: one per 64-row tile), lk_dora_finish_parts sums them in a fixed
 *   order into the statistics, a second launch applies them. W is read twice, out written once.
 *
 * reduce (part[z][m][i] = Σ_{k in range z} A[m,k]·B[i,k]; bypass forward h = x·Dᵀ, bypass backward
 * g = dy·U (B staged K-major, dy0 = RN(dy) written from the staged dy tiles) and h, merge backward
 * Γ·Dᵀ): a block owns 64 rows × one range of k (a multiple of 64 wide, so no 64-column step
 * straddles two ranges) and streams 64-column tiles of A and B through common.cuh's cp.async
 * pipeline (S stages), 8 warps as 4×2. Finalised in a fixed order z = 0, 1, …: hfin (mask, round
 * to CT: h exactly as NUMERICS.md §1.6 asks), bwd_fin (gh = RN_CT(c·q·g) stored in CT, as the
 * eager chain stores it, h, the σs partials) or locon.cu's k_fin_dup (d_up).
 * column reduction (part[z][n][i] = Σ_{m in range z} A[m,n]·B[m,i]; merge backward d_down = Uᵀ·Γ,
 * bypass backward d_up = dyᵀ·h and d_down = ghᵀ·x): a block owns 128 columns × the rank over one
 * range of rows; colfin applies coef·σ' and writes either orientation.
 * Split counts target LYCO_CUDA_LR_BLOCKS_PER_SM (3) blocks per SM, at least 4 steps of 64 per
 * block; they depend only on the shape and the SM count. Extra memory (stream-ordered scratch):
 * the fp32 partials (Z × rows × RP) and h (T × RP, CT).
 *
 * Deterministic: no atomics; tile shapes and split counts depend only on the shape and device.
 * Every-operand-in-CT, row-major calls take reduce_lean.cu's / expand_lean.cu's kernels.
 * A/B: LYCO_CUDA_LOWRANK_LEGACY=1 sends these calls back to locon.cu's kernels (locon.cu).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/expand_tile.cuh"

namespace {

const int EM = EX_M; /* expand tile rows */
const int EN = EX_N; /* expand tile columns */
const int RM = 64;   /* reduce tile rows (tokens) */
const int RK = 64;   /* reduce k step */

/* ---------------------------------------------------------------------------------------------
 * expand
 * ------------------------------------------------------------------------------------------- */
struct ex_layout {
    int w, p, q, bp, bq, p2, q2, bp2, bq2, o, total;
};

/* the rank tile covers both ranks of a Hadamard pair */
__host__ __device__ inline i64 ex_rank(const lk_expand_args *a) { return a->P2.p && a->r2 > a->r ? a->r2 : a->r; }

/* wdt / odt = -1: no base / no output tile (stats mode); p2dt = -1: no Hadamard pair (else P2 M×r2
   and Q2 r2×N, one part each, not transposed). */
__host__ __device__ inline ex_layout ex_plan(int RP, bool qt, int npp, int ct, int wdt, int pdt, int qdt, int odt,
                                            int p2dt = -1, int q2dt = -1) {
    ex_layout l;
    int off = 0;
    l.w = off;
    off += wdt >= 0 ? raw_bytes(EM, EN, wdt) : 0;
    const int in0 = off;
    l.p = off;
    off += raw_bytes(EM, RP, pdt);
    l.q = off;
    off += qt ? raw_bytes(EN, RP, qdt) : raw_bytes(RP, EN, qdt);
    l.bp = off;
    off += conv_bytes(EM, RP, pdt, npp, ct);
    l.bq = off;
    off += qt ? conv_bytes(EN, RP, qdt, 1, ct) : conv_bytes(RP, EN, qdt, 1, ct);
    l.p2 = l.q2 = l.bp2 = l.bq2 = off;
    if (p2dt >= 0) {
        l.p2 = off;
        off += raw_bytes(EM, RP, p2dt);
        l.q2 = off;
        off += raw_bytes(RP, EN, q2dt);
        l.bp2 = off;
        off += conv_bytes(EM, RP, p2dt, 1, ct);
        l.bq2 = off;
        off += conv_bytes(RP, EN, q2dt, 1, ct);
    }
    const int ob = odt >= 0 ? raw_bytes(EM, EN, odt) : 0;
    if (ob <= off - in0) {
        l.o = in0; /* the result tile reuses the operand buffers (written after the product) */
    } else {
        l.o = off;
        off += ob;
    }
    l.total = off;
    return l;
}

/* w = RN_CT(base) from a raw stage tile, for ex_tile_stats */
template <typename CT> struct raw_w {
    const char *s;
    int pitch, dt;
    __device__ float operator()(int r, int c) const { return rnd_ct<CT>(raw_get(s, pitch, dt, r, c)); }
};

/* The result of one accumulator pair (columns col, col+1 of row) from base values w[2]. */
template <typename CT>
__device__ __forceinline__ void ex_pair(const lk_expand_args &a, const float (&acc)[4], int h, float rc, float mf, int row, int col,
                                        const float (&w)[2], float (&v)[2]) {
#pragma unroll
    for (int c = 0; c < 2; c++) {
        const float *s3 = NULL;
        if (a.dora.on) {
            const i64 o = (i64)blockIdx.x * EM + row, j = (i64)blockIdx.y * EN + col + c;
            s3 = a.st + 3 * ((o < a.M && j < a.N) ? dora_kept(a.dora, o, j, a.K) : 0);
        }
        v[c] = merge_elem(w[c], acc[2 * h + c] * rc, a.mode, mf, a.dora.on != 0, s3);
    }
}

/* Epilogue, base (if any) and out both in the 16-bit CT: pairs move as 32-bit words, no rounding
   of w (already CT), one packed RNE conversion per pair. */
template <typename CT>
__device__ __forceinline__ void ex_epi_same(const lk_expand_args &a, const float (&acc)[2][4][4], const char *sW, char *sO,
                                            const float *rowc, float mf, int m0, int n0) {
    const int p = EN + 8; /* raw_pitch of a 16-bit tile */
    const bool hasB = a.base.p != NULL;
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = acc_row(m0, mi, 2 * h);
            const float rc = rowc[row];
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int col = acc_col(n0, ni, 0);
                float w[2] = {0.0f, 0.0f}, v[2];
                if (hasB) {
                    const unsigned u = *(const unsigned *)(sW + (row * p + col) * 2);
                    w[0] = bits16_to_f(u & 0xffffu, ct_of<CT>::dt);
                    w[1] = bits16_to_f(u >> 16, ct_of<CT>::dt);
                }
                ex_pair<CT>(a, acc[mi][ni], h, rc, mf, row, col, w, v);
                *(unsigned *)(sO + (row * p + col) * 2) = f_to_bits(v[0], ct_of<CT>::dt) | (f_to_bits(v[1], ct_of<CT>::dt) << 16);
            }
        }
}

/* Epilogue, any dtypes: w = RN_CT(base), out rounded once to its dtype. */
template <typename CT>
__device__ __forceinline__ void ex_epi_any(const lk_expand_args &a, const float (&acc)[2][4][4], const char *sW, int wdt, char *sO,
                                           int odt, const float *rowc, float mf, int m0, int n0) {
    const int pw = wdt >= 0 ? raw_pitch(EN, wdt) : 0, po = raw_pitch(EN, odt);
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = acc_row(m0, mi, 2 * h);
            const float rc = rowc[row];
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int col = acc_col(n0, ni, 0);
                float w[2] = {0.0f, 0.0f}, v[2];
                if (wdt >= 0) {
                    w[0] = rnd_ct<CT>(raw_get(sW, pw, wdt, row, col));
                    w[1] = rnd_ct<CT>(raw_get(sW, pw, wdt, row, col + 1));
                }
                ex_pair<CT>(a, acc[mi][ni], h, rc, mf, row, col, w, v);
                if (odt == DT_F32) *(float2 *)(sO + (row * po + col) * 4) = make_float2(v[0], v[1]);
                else *(unsigned *)(sO + (row * po + col) * 2) = f_to_bits(v[0], odt) | (f_to_bits(v[1], odt) << 16);
            }
        }
}

/* The result tile (already rounded, pitch po elements of ES bytes) to out: 16-byte stores where the
   view allows, element-wise at the edges and for strided or unaligned out. */
template <int ES> __device__ __forceinline__ void ex_store(const lk_view &out, const char *sO, int po) {
    const int epc = 16 / ES, cpr = EN / epc;
    const i64 mb = (i64)blockIdx.x * EM, nb = (i64)blockIdx.y * EN;
    const bool vec = (out.flags & LK_VEC) != 0;
    for (int q = threadIdx.x; q < EM * cpr; q += NT) {
        const int rr = q / cpr, cc = (q % cpr) * epc;
        const i64 o = mb + rr, j = nb + cc;
        if (o >= out.rows || j >= out.cols) continue;
        const char *src = sO + (rr * po + cc) * ES;
        if (vec && j + epc <= out.cols) {
            *(uint4 *)vaddr(out, o, j) = *(const uint4 *)src;
        } else {
            for (int e = 0; e < epc && j + e < out.cols; e++)
                vstore(out, o, j + e, ES == 4 ? ((const float *)src)[e] : bits16_to_f(((const unsigned short *)src)[e], out.dt));
        }
    }
}

/* HD: the Hadamard pair (LoHa): the product is (P·Q) ⊙ (P2·Q2), both in fp32 accumulators. */
template <typename CT, int RP, bool QT, int NPP, bool HD> __global__ __launch_bounds__(NT) void k_expand(lk_expand_args a) {
    extern __shared__ __align__(16) char dsm[];
    __shared__ float rowc[EM];
    __shared__ float red[4 * EM]; /* = 2 · EN */
    const bool hasB = a.base.p != NULL, stats = a.stat_part != NULL;
    const int wdt = hasB ? a.base.dt : -1, odt = stats ? -1 : a.out.dt;
    const ex_layout ly = ex_plan(RP, QT, NPP, ct_of<CT>::dt, wdt, a.P.dt, a.Q.dt, odt, HD ? a.P2.dt : -1, HD ? a.Q2.dt : -1);
    char *sW = dsm + ly.w, *sP = dsm + ly.p, *sQ = dsm + ly.q, *sO = dsm + ly.o;
    const i64 mb = (i64)blockIdx.x * EM, nb = (i64)blockIdx.y * EN;

    /* operands (group 1), then the base tile (group 2): the product overlaps the base's flight */
    raw_issue<EM, RP>(sP, a.P, mb, 0);
    if (QT) raw_issue<EN, RP>(sQ, a.Q, nb, 0);
    else raw_issue<RP, EN>(sQ, a.Q, 0, nb);
    if (HD) {
        raw_issue<EM, RP>(dsm + ly.p2, a.P2, mb, 0);
        raw_issue<RP, EN>(dsm + ly.q2, a.Q2, 0, nb);
    }
    cp_commit();
    if (hasB) raw_issue<EM, EN>(sW, a.base, mb, nb);
    cp_commit();
    const float sig = sigma_ct<CT>(a.sigma);
    const float rs = (float)a.row_scale * (a.sig_in_row ? sig : 1.0f);
    for (int i = threadIdx.x; i < EM; i += NT) {
        const i64 m = mb + i;
        rowc[i] = m < a.M ? rs * vget(a.rowmask, m, 1.0f) : 0.0f;
    }
    cp_wait(1);
    __syncthreads();
    CT *pp[3], *qp[3], *pp2[3], *qp2[3];
    int ldp, ldq, ldp2 = 0, ldq2 = 0;
    const int np = raw_operand<CT, EM, RP>(sP, a.P.dt, NPP, (CT *)(dsm + ly.bp), pp, &ldp);
    if (QT) raw_operand<CT, EN, RP>(sQ, a.Q.dt, 1, (CT *)(dsm + ly.bq), qp, &ldq);
    else raw_operand<CT, RP, EN>(sQ, a.Q.dt, 1, (CT *)(dsm + ly.bq), qp, &ldq);
    if (HD) {
        raw_operand<CT, EM, RP>(dsm + ly.p2, a.P2.dt, 1, (CT *)(dsm + ly.bp2), pp2, &ldp2);
        raw_operand<CT, RP, EN>(dsm + ly.q2, a.Q2.dt, 1, (CT *)(dsm + ly.bq2), qp2, &ldq2);
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, m0 = (warp & 1) * 32, n0 = (warp >> 1) * 32;
    float acc[2][4][4];
    acc_zero(acc);
    const int kk = sizeof(CT) == 2 ? (int)((a.r + 15) / 16 * 16) : (int)a.r;
    for (int pi = np - 1; pi >= 0; pi--) warp_mma_ldm<CT, 2, 4, false, !QT>::run(acc, pp[pi], ldp, qp[0], ldq, m0, n0, kk);
    if (HD) {
        float acc2[2][4][4];
        acc_zero(acc2);
        const int kk2 = sizeof(CT) == 2 ? (int)((a.r2 + 15) / 16 * 16) : (int)a.r2;
        warp_mma_ldm<CT, 2, 4, false, true>::run(acc2, pp2[0], ldp2, qp2[0], ldq2, m0, n0, kk2);
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mi][ni][e] *= acc2[mi][ni][e];
    }
    cp_wait(0);
    __syncthreads(); /* base tile visible; operand buffers free for the result tile */
    const int pw = hasB ? raw_pitch(EN, wdt) : 0;
    if (stats) {
        ex_tile_stats<false>(a, acc, raw_w<CT>{sW, pw, a.base.dt}, raw_w<CT>{sW, pw, a.base.dt}, rowc, red, m0, n0, (i64)blockIdx.x,
                             (i64)blockIdx.y);
        return;
    }
    const float mf = (float)a.mult * (a.sig_in_mult ? sig : 1.0f);
    const int po = raw_pitch(EN, odt);
    if (sizeof(CT) == 2 && (!hasB || wdt == ct_of<CT>::dt) && odt == ct_of<CT>::dt) ex_epi_same<CT>(a, acc, sW, sO, rowc, mf, m0, n0);
    else ex_epi_any<CT>(a, acc, sW, wdt, sO, odt, rowc, mf, m0, n0);
    __syncthreads();
    if (odt == DT_F32) ex_store<4>(a.out, sO, po);
    else ex_store<2>(a.out, sO, po);
}

template <typename CT, int RP, bool QT, int NPP> ex_layout ex_layout_of(const lk_expand_args *a) {
    const bool hd = a->P2.p != NULL;
    return ex_plan(RP, QT, NPP, ct_of<CT>::dt, a->base.p ? a->base.dt : -1, a->P.dt, a->Q.dt, a->stat_part ? -1 : a->out.dt,
                   hd ? a->P2.dt : -1, hd ? a->Q2.dt : -1);
}

template <typename CT, int RP, bool QT, int NPP, bool HD> int ex_launch(const lk_expand_args *a, cudaStream_t s) {
    const int bytes = ex_layout_of<CT, RP, QT, NPP>(a).total;
    /* the opt-in is needed once static + dynamic shared memory passes 48 KB (k_expand has 1.25 KB static) */
    LK_SMEM_OPTIN(bytes, k_expand<CT, RP, QT, NPP, HD>);
    const dim3 grid((unsigned)cdiv(a->M, EM), (unsigned)cdiv(a->N, EN));
    k_expand<CT, RP, QT, NPP, HD><<<grid, NT, bytes, s>>>(*a);
    LK_LAUNCHED("expand");
    return LYCO_OK;
}

/* P in nsplit<CT> parts (p_split: fp32 scratch such as bypass backward's gh) only with Q r×N; the
   Hadamard pair (16-bit CT only) only with one part and Q r×N. */
template <typename CT, int RP, bool QT> int ex_bytes_np(const lk_expand_args *a) {
    if constexpr (!QT) {
        if (a->p_split) return ex_layout_of<CT, RP, QT, nsplit<CT>::n>(a).total;
    }
    return ex_layout_of<CT, RP, QT, 1>(a).total;
}

template <typename CT, int RP, bool QT> int ex_launch_np(const lk_expand_args *a, cudaStream_t s) {
    if constexpr (!QT) {
        if (a->p_split) return ex_launch<CT, RP, QT, nsplit<CT>::n, false>(a, s);
        if constexpr (sizeof(CT) == 2) {
            if (a->P2.p) return ex_launch<CT, RP, QT, 1, true>(a, s);
        }
    }
    return ex_launch<CT, RP, QT, 1, false>(a, s);
}

template <typename CT, bool QT> int ex_bytes_rp(const lk_expand_args *a, i64 rp) {
    switch (rp) {
    case 16: return ex_bytes_np<CT, 16, QT>(a);
    case 32: return ex_bytes_np<CT, 32, QT>(a);
    case 64: return ex_bytes_np<CT, 64, QT>(a);
    default: return ex_bytes_np<CT, 128, QT>(a);
    }
}

template <typename CT, bool QT> int ex_launch_rp(const lk_expand_args *a, cudaStream_t s) {
    switch (lk_reduce_rank_tile(ex_rank(a))) {
    case 16: return ex_launch_np<CT, 16, QT>(a, s);
    case 32: return ex_launch_np<CT, 32, QT>(a, s);
    case 64: return ex_launch_np<CT, 64, QT>(a, s);
    default: return ex_launch_np<CT, 128, QT>(a, s);
    }
}

template <typename CT> int ex_bytes_ct(const lk_expand_args *a) {
    const i64 rp = lk_reduce_rank_tile(ex_rank(a));
    return a->q_t ? ex_bytes_rp<CT, true>(a, rp) : ex_bytes_rp<CT, false>(a, rp);
}

/* ---------------------------------------------------------------------------------------------
 * reduce and hfin
 * ------------------------------------------------------------------------------------------- */
struct rd_layout {
    int ba, bb, st, stage, total;
};
/* kmaj: B staged K-major (a K×r view such as lora_up for dy·U), else r×K (lora_down). */
__host__ __device__ inline rd_layout rd_plan(int RP, bool kmaj, int ct, int adt, int bdt, int S) {
    rd_layout l;
    int off = 0;
    l.ba = off;
    off += conv_bytes(RM, RK, adt, 1, ct);
    l.bb = off;
    off += kmaj ? conv_bytes(RK, RP, bdt, 1, ct) : conv_bytes(RP, RK, bdt, 1, ct);
    l.st = off;
    l.stage = kmaj ? pipe_stage_bytes(RM, RK, adt, RK, RP, bdt) : pipe_stage_bytes(RM, RK, adt, RP, RK, bdt);
    off += S * l.stage;
    l.total = off;
    return l;
}

template <typename CT, int RP, bool KMAJ>
__global__ __launch_bounds__(NT) void k_reduce(lk_view A, lk_view B, lk_view copyA, i64 M, i64 K, i64 kper, int S, float *part) {
    const int NI = RP / 16;
    extern __shared__ __align__(16) char dsm[];
    const rd_layout ly = rd_plan(RP, KMAJ, ct_of<CT>::dt, A.dt, B.dt, S);
    const i64 mb = (i64)blockIdx.x * RM, z = blockIdx.y, k0 = z * kper;
    const i64 ke = k0 + kper < K ? k0 + kper : K;
    const int nk = ke > k0 ? (int)cdiv(ke - k0, RK) : 0;
    const int warp = threadIdx.x >> 5, m0 = (warp & 3) * 16, n0 = (warp >> 2) * (RP / 2);
    float acc[1][NI][4];
    acc_zero(acc);
    const pipe_op PA = {A, mb, k0, 0, RK, 1};
    const pipe_op PB = KMAJ ? pipe_op{B, k0, 0, RK, 0, 1} : pipe_op{B, 0, k0, 0, RK, 1};
    piped_mma<CT, RM, RK, KMAJ ? RK : RP, KMAJ ? RP : RK, false, KMAJ, 1, NI>(acc, PA, PB, nk, S, dsm + ly.st, (CT *)(dsm + ly.ba),
                                                                            (CT *)(dsm + ly.bb), m0, n0, copyA, copyA.p != NULL);
#pragma unroll
    for (int ni = 0; ni < NI; ni++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const i64 m = mb + acc_row(m0, 0, e);
            if (m < M) part[(z * M + m) * RP + acc_col(n0, ni, e)] = acc[0][ni][e];
        }
}

template <typename CT>
__global__ __launch_bounds__(NT) void k_hfin(const float *part, int Z, i64 M, i64 RP, i64 r, lk_view mask, CT *h) {
    const i64 n = M * RP;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n; idx += (i64)gridDim.x * NT) {
        const i64 i = idx % RP;
        float s = 0.0f;
        for (int z = 0; z < Z; z++) s += part[(i64)z * n + idx];
        const float q = i < r ? vget(mask, i, 1.0f) : 0.0f;
        h[idx] = ct_of<CT>::from(q * s);
    }
}

/* The deepest S ≤ 4 that lets three blocks share a multiprocessor, else two, else one. */
int rd_stages(const lk_device *dev, int fixed, int stage) {
    for (int per = 3; per >= 1; per--)
        for (int S = 4; S >= 2; S--) {
            const int b = fixed + S * stage;
            if (b <= dev->smem_optin && b <= dev->smem_sm / per - 1024) return S;
        }
    return 0;
}

/* Split count and range for an M×K reduction: about three blocks per SM, at least 4 steps of 64
   per block, ranges a multiple of 64 wide (a function of the shape and SM count only). */
/* Blocks per SM the split reductions aim for (3; LYCO_CUDA_LR_BLOCKS_PER_SM=1..32 overrides it, for
   the bench's experiments: more blocks shorten the tail of the last wave but add fp32 partials). */
int lr_blocks_per_sm() {
    const char *v = getenv("LYCO_CUDA_LR_BLOCKS_PER_SM");
    const int x = v && *v ? atoi(v) : 3;
    return x >= 1 && x <= 32 ? x : 3;
}

void rd_split(i64 M, i64 K, const lk_device *dev, i64 *Z, i64 *kper) {
    const i64 mt = cdiv(M, RM);
    i64 z = cdiv(lr_blocks_per_sm() * (i64)dev->sms, mt);
    const i64 zmax = K > 0 ? cdiv(K, 4 * RK) : 1;
    if (z > zmax) z = zmax;
    if (z > 64) z = 64;
    if (z < 1) z = 1;
    *kper = K > 0 ? cdiv(cdiv(K, z), RK) * RK : RK;
    *Z = K > 0 ? cdiv(K, *kper) : 1;
}

template <typename CT, int RP, bool KMAJ>
int reduce_launch(const lk_view *A, const lk_view *B, const lk_view *copyA, i64 M, i64 K, float **part, i64 *Zout,
                  const lk_device *dev, cudaStream_t s) {
    const int ct = ct_of<CT>::dt;
    const rd_layout l0 = rd_plan(RP, KMAJ, ct, A->dt, B->dt, 0);
    const int S = rd_stages(dev, l0.total, l0.stage);
    if (S < 2) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: the low-rank reduction does not fit in shared memory");
    const int bytes = rd_plan(RP, KMAJ, ct, A->dt, B->dt, S).total;
    LK_SMEM_OPTIN(bytes, k_reduce<CT, RP, KMAJ>);
    i64 Z, kper;
    rd_split(M, K, dev, &Z, &kper);
    int rc = lk_scratch_alloc((void **)part, (size_t)(Z * M * RP) * sizeof(float), s);
    if (rc) return rc; /* *part stays NULL */
    *Zout = Z;
    {   /* everything in CT, row-major: reduce_lean.cu (the same partials) */
        const int Sl = rd_stages(dev, 0, lk_reduce_lean_stage_bytes(RP, KMAJ, 0));
        int done = 0;
        int64_t zu = Z;
        rc = lk_reduce_lean(ct, A, B, KMAJ, copyA && copyA->p ? copyA : NULL, M, K, RP, kper, Z, Sl, *part, &zu, dev, s, &done);
        *Zout = zu;
        if (rc || done) return rc;
    }
    lk_view none;
    memset(&none, 0, sizeof none);
    k_reduce<CT, RP, KMAJ><<<dim3((unsigned)cdiv(M, RM), (unsigned)Z), NT, bytes, s>>>(*A, *B, copyA ? *copyA : none, M, K, kper, S, *part);
    LK_LAUNCHED("reduce");
    return LYCO_OK;
}

template <typename CT, bool KMAJ>
int reduce_ct(const lk_view *A, const lk_view *B, const lk_view *copyA, i64 M, i64 K, i64 rp, float **part, i64 *Z,
              const lk_device *dev, cudaStream_t s) {
    switch (rp) {
    case 16: return reduce_launch<CT, 16, KMAJ>(A, B, copyA, M, K, part, Z, dev, s);
    case 32: return reduce_launch<CT, 32, KMAJ>(A, B, copyA, M, K, part, Z, dev, s);
    case 64: return reduce_launch<CT, 64, KMAJ>(A, B, copyA, M, K, part, Z, dev, s);
    default: return reduce_launch<CT, 128, KMAJ>(A, B, copyA, M, K, part, Z, dev, s);
    }
}

/* bypass backward's per-token values from the two partial sets (g0 = dy·U, h0 = x·Dᵀ):
   gh = RN_CT(c·q·g0) stored in CT, h = RN_CT(q·h0), both with row pitch RPo (i ≥ rp: 0) — the two
   roundings of the eager chain (NUMERICS.md §1.6); σs partial per block Σ s·m·q·g0·h0 from the
   unrounded values (grid-stride with a fixed grid: deterministic). */
template <typename CT>
__global__ __launch_bounds__(NT) void k_bwd_fin(const float *pg, int Zg, const float *ph, int Zh, i64 M, i64 rp, i64 RPo, i64 r,
                                                lk_view mask, lk_view sigma, double smd, CT *gh, CT *h, float *sigpart) {
    __shared__ float red[NT / 32];
    const float sm = (float)smd, c = sm * sigma_ct<CT>(sigma);
    const i64 n = M * RPo;
    float sp = 0.0f;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n; idx += (i64)gridDim.x * NT) {
        const i64 t = idx / RPo, i = idx % RPo;
        float g0 = 0.0f, h0 = 0.0f;
        if (i < rp) {
            for (int z = 0; z < Zg; z++) g0 += pg[((i64)z * M + t) * rp + i];
            for (int z = 0; z < Zh; z++) h0 += ph[((i64)z * M + t) * rp + i];
        }
        const float q = i < r ? vget(mask, i, 1.0f) : 0.0f;
        gh[idx] = ct_of<CT>::from(c * q * g0);
        h[idx] = ct_of<CT>::from(q * h0);
        sp = fmaf(sm * q * g0, h0, sp);
    }
    if (sigpart) {
        const float tot = block_sum(sp, red);
        if (threadIdx.x == 0) sigpart[blockIdx.x] = tot;
    }
}

/* ---------------------------------------------------------------------------------------------
 * column reduction: part[z][n][i] = Σ_{m ∈ range z} RN_CT(A[m, n]) · B[m, i]  (A M×N big, B M×r
 * small, B in NPB CT parts when it is fp32 scratch such as gh); a block owns 128 columns × RP
 * over one range of rows (a multiple of 64), 8 warps as 4×2; colfin applies coef·σ' and rounds.
 * ------------------------------------------------------------------------------------------- */
const int CN = 128;  /* column-reduction tile columns */

__host__ __device__ inline rd_layout cr_plan(int RP, int npb, int ct, int adt, int bdt, int S) {
    rd_layout l;
    int off = 0;
    l.ba = off;
    off += conv_bytes(RK, CN, adt, 1, ct);
    l.bb = off;
    off += conv_bytes(RK, RP, bdt, npb, ct);
    l.st = off;
    l.stage = pipe_stage_bytes(RK, CN, adt, RK, RP, bdt);
    off += S * l.stage;
    l.total = off;
    return l;
}

template <typename CT, int RP, int NPB>
__global__ __launch_bounds__(NT) void k_colreduce(lk_view A, lk_view B, i64 M, i64 N, i64 mper, int S, float *part) {
    const int NI = RP / 16;
    extern __shared__ __align__(16) char dsm[];
    const rd_layout ly = cr_plan(RP, NPB, ct_of<CT>::dt, A.dt, B.dt, S);
    const i64 nb = (i64)blockIdx.x * CN, z = blockIdx.y, k0 = z * mper;
    const i64 ke = k0 + mper < M ? k0 + mper : M;
    const int nk = ke > k0 ? (int)cdiv(ke - k0, RK) : 0;
    const int warp = threadIdx.x >> 5, m0 = (warp & 3) * 32, n0 = (warp >> 2) * (RP / 2);
    float acc[2][NI][4];
    acc_zero(acc);
    const pipe_op PA = {A, k0, nb, RK, 0, 1}, PB = {B, k0, 0, RK, 0, NPB};
    piped_mma<CT, RK, CN, RK, RP, true, true, 2, NI>(acc, PA, PB, nk, S, dsm + ly.st, (CT *)(dsm + ly.ba), (CT *)(dsm + ly.bb),
                                                     m0, n0, A, false);
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const i64 n = nb + acc_row(m0, mi, e);
                if (n < N) part[(z * N + n) * RP + acc_col(n0, ni, e)] = acc[mi][ni][e];
            }
}

/* out(i, n) (transpose: out(n, i)) = coef·σ'·Σ_z part[z][n][i], i < r (σ' = RN_CT(σs) or 1) */
__global__ __launch_bounds__(NT) void k_colfin(const float *part, int Z, i64 N, i64 RP, i64 r, lk_view out, int transpose,
                                               float coef, lk_view sigma, int ct) {
    const float sig = sigma.p ? round_to(vload(sigma, 0, 0), ct) : 1.0f;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < N * r; idx += (i64)gridDim.x * NT) {
        const i64 n = idx / r, i = idx % r;
        float v = 0.0f;
        for (int z = 0; z < Z; z++) v += part[((i64)z * N + n) * RP + i];
        v = v * coef * sig;
        if (transpose) vstore(out, n, i, v);
        else vstore(out, i, n, v);
    }
}

int colfin_launch(const float *part, i64 Z, i64 N, i64 RP, i64 r, const lk_view *out, int transpose, float coef,
                  const lk_view *sigma, int ct, cudaStream_t s) {
    i64 blocks = cdiv(N * r, NT);
    if (blocks > 65535) blocks = 65535;
    k_colfin<<<(unsigned)(blocks > 0 ? blocks : 1), NT, 0, s>>>(part, (int)Z, N, RP, r, *out, transpose, coef, *sigma, ct);
    LK_LAUNCHED("colfin");
    return LYCO_OK;
}

template <typename CT, int RP, int NPB>
int colreduce_launch(const lk_view *A, const lk_view *B, i64 M, i64 N, i64 r, const lk_view *out, int transpose, float coef,
                     const lk_view *sigma, const lk_device *dev, cudaStream_t s) {
    const int ct = ct_of<CT>::dt;
    const rd_layout l0 = cr_plan(RP, NPB, ct, A->dt, B->dt, 0);
    const int S = rd_stages(dev, l0.total, l0.stage);
    if (S < 2) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: the column reduction does not fit in shared memory");
    const int bytes = cr_plan(RP, NPB, ct, A->dt, B->dt, S).total;
    LK_SMEM_OPTIN(bytes, k_colreduce<CT, RP, NPB>);
    /* split over rows: about three blocks per SM, at least 4 steps of 64 per block */
    const i64 nt = cdiv(N, CN);
    i64 Z = cdiv(lr_blocks_per_sm() * (i64)dev->sms, nt);
    const i64 zmax = M > 0 ? cdiv(M, 4 * RK) : 1;
    if (Z > zmax) Z = zmax;
    if (Z > 64) Z = 64;
    if (Z < 1) Z = 1;
    const i64 mper = M > 0 ? cdiv(cdiv(M, Z), RK) * RK : RK;
    Z = M > 0 ? cdiv(M, mper) : 1;
    float *part = NULL;
    int rc = lk_scratch_alloc((void **)&part, (size_t)(Z * N * RP) * sizeof(float), s);
    if (rc) return rc;
    int done = 0;
    if (NPB == 1) /* everything in CT, row-major: reduce_lean.cu (the same partials) */
        rc = lk_colreduce_lean(ct, A, B, M, N, RP, mper, Z, rd_stages(dev, 0, lk_reduce_lean_stage_bytes(RP, 0, 1)), part, dev, s, &done);
    if (rc == LYCO_OK && !done) {
        k_colreduce<CT, RP, NPB><<<dim3((unsigned)nt, (unsigned)Z), NT, bytes, s>>>(*A, *B, M, N, mper, S, part);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) rc = lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of colreduce failed: %s", cudaGetErrorString(e));
    }
    if (rc == LYCO_OK) rc = colfin_launch(part, Z, N, RP, r, out, transpose, coef, sigma, ct, s);
    int rf = lk_scratch_free(part, s);
    return rc ? rc : rf;
}

template <typename CT, int NPB>
int colreduce_np(const lk_view *A, const lk_view *B, i64 M, i64 N, i64 r, const lk_view *out, int transpose, float coef,
                 const lk_view *sigma, const lk_device *dev, cudaStream_t s) {
    switch (lk_reduce_rank_tile(r)) {
    case 16: return colreduce_launch<CT, 16, NPB>(A, B, M, N, r, out, transpose, coef, sigma, dev, s);
    case 32: return colreduce_launch<CT, 32, NPB>(A, B, M, N, r, out, transpose, coef, sigma, dev, s);
    case 64: return colreduce_launch<CT, 64, NPB>(A, B, M, N, r, out, transpose, coef, sigma, dev, s);
    default: return colreduce_launch<CT, 128, NPB>(A, B, M, N, r, out, transpose, coef, sigma, dev, s);
    }
}

template <typename CT>
int colreduce_ct(const lk_view *A, const lk_view *B, int b_split, i64 M, i64 N, i64 r, const lk_view *out, int transpose, float coef,
                 const lk_view *sigma, const lk_device *dev, cudaStream_t s) {
    return b_split ? colreduce_np<CT, nsplit<CT>::n>(A, B, M, N, r, out, transpose, coef, sigma, dev, s)
                   : colreduce_np<CT, 1>(A, B, M, N, r, out, transpose, coef, sigma, dev, s);
}

} // namespace

extern "C" int64_t lk_reduce_rank_tile(int64_t r) { return r <= 16 ? 16 : r <= 32 ? 32 : r <= 64 ? 64 : r <= 128 ? 128 : 0; }

static int expand_bytes(const lk_expand_args *a) {
    switch (a->ct) {
    case DT_BF16: return ex_bytes_ct<bf16_t>(a);
    case DT_F16: return ex_bytes_ct<f16_t>(a);
    default: return ex_bytes_ct<float>(a);
    }
}

extern "C" int lk_expand_fits(const lk_expand_args *a, const lk_device *dev) {
    if (a->r < 1 || lk_reduce_rank_tile(ex_rank(a)) == 0 || (a->p_split && a->q_t)) return 0;
    if (a->P2.p && (a->r2 < 1 || a->ct == DT_F32 || a->p_split || a->q_t)) return 0;
    if (cdiv(a->M, EM) > 2147483647LL || cdiv(a->N, EN) > 65535) return 0;
    return expand_bytes(a) <= dev->smem_optin;
}

extern "C" int64_t lk_expand_stat_tiles(const lk_expand_args *a) {
    return a->dora.on_out ? cdiv(a->N, EN) : cdiv(a->M, EM);
}

extern "C" int lk_expand(const lk_expand_args *a, const lk_device *dev, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (!lk_expand_fits(a, dev)) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: expand called outside its limits");
    if (a->M == 0 || a->N == 0) return LYCO_OK;
    int lean = 0;
    const int st = lk_expand_lean(a, dev, stream, &lean);
    if (st || lean) return st;
    if (a->G.p) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: DoRA's backward expand modes run on the lean kernel only");
    switch (a->ct) {
    case DT_BF16: return a->q_t ? ex_launch_rp<bf16_t, true>(a, s) : ex_launch_rp<bf16_t, false>(a, s);
    case DT_F16: return a->q_t ? ex_launch_rp<f16_t, true>(a, s) : ex_launch_rp<f16_t, false>(a, s);
    default: return a->q_t ? ex_launch_rp<float, true>(a, s) : ex_launch_rp<float, false>(a, s);
    }
}

/* A merge forward through the expand: one launch; with DoRA dora_slab.cu's one pass where it
   takes the call (sm_90+, norm per row, the lean kernel's views), else a statistics launch
   (per-tile Σ V² partials), lk_dora_finish_parts, then the merge with those statistics. */
extern "C" int lk_expand_merge(const lk_expand_args *e0, const lk_device *dev, void *stream) {
    if (!e0->dora.on) return lk_expand(e0, dev, stream);
    int slab = 0;
    const int rs = lk_dora_slab(e0, dev, stream, &slab); /* one pass on sm_90+ (dora_slab.cu) */
    if (rs || slab) return rs;
    cudaStream_t s = (cudaStream_t)stream;
    const lk_dora &dr = e0->dora;
    const i64 n = dr.on_out ? e0->M : e0->N, kept = dr.on_out ? e0->M : e0->N / e0->K;
    lk_expand_args st = *e0, e = *e0;
    memset(&st.out, 0, sizeof st.out);
    const i64 tiles = lk_expand_stat_tiles(&st);
    float *ws = NULL;
    int rc = lk_scratch_alloc((void **)&ws, (size_t)(tiles * n + 3 * kept) * sizeof(float), s);
    if (rc) return rc;
    st.stat_part = ws;
    rc = lk_expand(&st, dev, s);
    if (rc == LYCO_OK) rc = lk_dora_finish_parts(&dr, ws, NULL, tiles, n, kept, dr.on_out ? 1 : e0->K, e0->mult, e0->ct, ws + tiles * n, s);
    e.st = ws + tiles * n;
    if (rc == LYCO_OK) rc = lk_expand(&e, dev, s);
    const int rf = lk_scratch_free(ws, s);
    return rc ? rc : rf;
}

extern "C" int lk_dora_gv(const lk_expand_args *e0, const lk_view *G, lk_view *gv, const lk_device *dev, void *stream, int *done) {
    cudaStream_t s = (cudaStream_t)stream;
    *done = 0;
    gv->p = NULL;
    const lk_dora &dr = e0->dora;
    if (!dr.on || e0->M <= 0 || e0->N <= 0) return LYCO_OK;
    const i64 n = dr.on_out ? e0->M : e0->N, kept = dr.on_out ? e0->M : e0->N / e0->K;
    const int es = e0->ct == DT_F32 ? 4 : 2;
    const i64 pitch = cdiv(e0->N, 16 / es) * (16 / es); /* 16-byte rows */
    lk_expand_args st = *e0, e = *e0;
    memset(&st.out, 0, sizeof st.out);
    st.G = e.G = *G;
    const i64 tiles = lk_expand_stat_tiles(&st);
    float *ws = NULL;
    int rc = lk_scratch_alloc((void **)&ws, (size_t)(2 * tiles * n + 3 * kept) * sizeof(float), s);
    if (rc) return rc;
    st.stat_part = ws;
    st.stat_part_g = ws + tiles * n;
    e.st = ws + 2 * tiles * n;
    e.out = lk_view{(const void *)ws, pitch, 1, e0->M, e0->N, e0->ct, LK_VEC}; /* placeholder pointer for the check */
    if (!lk_expand_lean_fits(&st, dev) || !lk_expand_lean_fits(&e, dev)) return lk_scratch_free(ws, s);
    *done = 1;
    rc = lk_scratch_alloc((void **)&gv->p, (size_t)(e0->M * pitch * es), s);
    *gv = lk_view{gv->p, pitch, 1, e0->M, e0->N, e0->ct, LK_VEC};
    e.out = *gv;
    int lean = 0;
    if (rc == LYCO_OK) rc = lk_expand_lean(&st, dev, s, &lean);
    if (rc == LYCO_OK)
        rc = lk_dora_finish_parts(&dr, st.stat_part, st.stat_part_g, tiles, n, kept, dr.on_out ? 1 : e0->K, e0->mult, e0->ct, ws + 2 * tiles * n, s);
    if (rc == LYCO_OK) rc = lk_expand_lean(&e, dev, s, &lean);
    const int rf = lk_scratch_free(ws, s);
    return rc ? rc : rf;
}

static int reduce_parts(int32_t ct, const lk_view *A, const lk_view *B, int b_kmajor, const lk_view *copyA, int64_t M,
                        int64_t K, int64_t rp, float **part, i64 *Z, const lk_device *dev, cudaStream_t s) {
    *part = NULL;
    *Z = 0;
    if (cdiv(M, RM) > 2147483647LL) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: %lld rows exceed the reduction grid", (long long)M);
    switch (ct) {
    case DT_BF16: return b_kmajor ? reduce_ct<bf16_t, true>(A, B, copyA, M, K, rp, part, Z, dev, s)
                                  : reduce_ct<bf16_t, false>(A, B, copyA, M, K, rp, part, Z, dev, s);
    case DT_F16: return b_kmajor ? reduce_ct<f16_t, true>(A, B, copyA, M, K, rp, part, Z, dev, s)
                                 : reduce_ct<f16_t, false>(A, B, copyA, M, K, rp, part, Z, dev, s);
    default: return b_kmajor ? reduce_ct<float, true>(A, B, copyA, M, K, rp, part, Z, dev, s)
                             : reduce_ct<float, false>(A, B, copyA, M, K, rp, part, Z, dev, s);
    }
}

template <typename CT> static int hfin_launch(const float *part, i64 Z, i64 M, i64 rp, i64 r, const lk_view *mask, void *h, cudaStream_t s) {
    i64 blocks = cdiv(M * rp, NT);
    if (blocks > 65535) blocks = 65535;
    k_hfin<CT><<<(unsigned)blocks, NT, 0, s>>>(part, (int)Z, M, rp, r, *mask, (CT *)h);
    LK_LAUNCHED("hfin");
    return LYCO_OK;
}

extern "C" int lk_reduce_h(int32_t ct, const lk_view *A, const lk_view *B, const lk_view *mask, int64_t M, int64_t K,
                           int64_t r, void *h, int64_t rp, const lk_device *dev, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (M == 0) return LYCO_OK;
    float *part = NULL;
    i64 Z = 0;
    int rc = reduce_parts(ct, A, B, 0, NULL, M, K, rp, &part, &Z, dev, s);
    if (rc) return part ? (lk_scratch_free(part, s), rc) : rc;
    switch (ct) {
    case DT_BF16: rc = hfin_launch<bf16_t>(part, Z, M, rp, r, mask, h, s); break;
    case DT_F16: rc = hfin_launch<f16_t>(part, Z, M, rp, r, mask, h, s); break;
    default: rc = hfin_launch<float>(part, Z, M, rp, r, mask, h, s); break;
    }
    int rf = lk_scratch_free(part, s);
    return rc ? rc : rf;
}

template <typename CT>
static int bwd_fin_launch(const float *pg, i64 Zg, const float *ph, i64 Zh, i64 T, i64 rp, i64 RPo, const lk_locon *L, void *gh,
                          void *h, float *sigpart, i64 nblocks, cudaStream_t s) {
    k_bwd_fin<CT><<<(unsigned)nblocks, NT, 0, s>>>(pg, (int)Zg, ph, (int)Zh, T, rp, RPo, L->r, L->mask, L->sigma, L->s * L->m,
                                                   (CT *)gh, (CT *)h, sigpart);
    LK_LAUNCHED("bwd_fin");
    return LYCO_OK;
}

/* g partials of bypass backward: dy·U with U read K-major (dy0 written from the staged dy tiles). */
static int reduce_dy_u(const lk_locon *L, const lk_view *dy, const lk_view *dy0, i64 T, i64 rp, float **pg, i64 *Zg,
                       const lk_device *dev, cudaStream_t s) {
    return reduce_parts(L->ct, dy, &L->U, 1, dy0 && dy0->p ? dy0 : NULL, T, L->O, rp, pg, Zg, dev, s);
}

extern "C" int lk_reduce_bypass_bwd(const lk_locon *L, const lk_view *x, const lk_view *dy, const lk_view *dy0, int64_t T,
                                    void *gh, void *h, int64_t RPo, float *sigpart, int64_t nblocks, const lk_device *dev,
                                    void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    const i64 rp = lk_reduce_rank_tile(L->r);
    if (rp == 0 || rp > RPo || nblocks < 1 || nblocks > 65535) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: bypass backward reduction outside its limits");
    if (T == 0) return LYCO_OK;
    float *pg = NULL, *ph = NULL;
    i64 Zg = 0, Zh = 0;
    int rc = reduce_dy_u(L, dy, dy0, T, rp, &pg, &Zg, dev, s);
    if (rc == LYCO_OK) rc = reduce_parts(L->ct, x, &L->D, 0, NULL, T, L->IK, rp, &ph, &Zh, dev, s);
    if (rc == LYCO_OK) {
        switch (L->ct) {
        case DT_BF16: rc = bwd_fin_launch<bf16_t>(pg, Zg, ph, Zh, T, rp, RPo, L, gh, h, sigpart, nblocks, s); break;
        case DT_F16: rc = bwd_fin_launch<f16_t>(pg, Zg, ph, Zh, T, rp, RPo, L, gh, h, sigpart, nblocks, s); break;
        default: rc = bwd_fin_launch<float>(pg, Zg, ph, Zh, T, rp, RPo, L, gh, h, sigpart, nblocks, s); break;
        }
    }
    int rf1 = ph ? lk_scratch_free(ph, s) : LYCO_OK;
    int rf2 = pg ? lk_scratch_free(pg, s) : LYCO_OK;
    return rc ? rc : rf1 ? rf1 : rf2;
}

extern "C" int lk_colreduce(int32_t ct, const lk_view *A, const lk_view *B, int b_split, int64_t M, int64_t N, int64_t r,
                            const lk_view *out, int transpose, float coef, const lk_view *sigma, const lk_device *dev,
                            void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (lk_reduce_rank_tile(r) == 0 || cdiv(N, CN) > 2147483647LL) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: column reduction outside its limits");
    if (N == 0 || r == 0) return LYCO_OK;
    switch (ct) {
    case DT_BF16: return colreduce_ct<bf16_t>(A, B, b_split, M, N, r, out, transpose, coef, sigma, dev, s);
    case DT_F16: return colreduce_ct<f16_t>(A, B, b_split, M, N, r, out, transpose, coef, sigma, dev, s);
    default: return colreduce_ct<float>(A, B, b_split, M, N, r, out, transpose, coef, sigma, dev, s);
    }
}

extern "C" int lk_colfin(const float *part, int64_t Z, int64_t N, int64_t RP, int64_t r, const lk_view *out, int transpose,
                         float coef, const lk_view *sigma, int32_t ct, void *stream) {
    return colfin_launch(part, Z, N, RP, r, out, transpose, coef, sigma, ct, (cudaStream_t)stream);
}

extern "C" int lk_reduce_parts(int32_t ct, const lk_view *A, const lk_view *B, int b_kmajor, int64_t M, int64_t K, int64_t rp,
                               float **part, int64_t *Z, const lk_device *dev, void *stream) {
    i64 z = 0;
    int rc = reduce_parts(ct, A, B, b_kmajor, NULL, M, K, rp, part, &z, dev, (cudaStream_t)stream);
    *Z = z;
    return rc;
}
