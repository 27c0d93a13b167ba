/*
 * expand_lean.cu — the common case of lowrank.cu's expand with every run-time decision made at
 * compile time: out[M×N] = merge(base, c_m·(P·Q)) (LoRA / LoCon merge forward, LoHa's Hadamard
 * pair (P·Q) ⊙ (P2·Q2), bypass forward's y = y0 + c·h·Uᵀ with Q given N×r), where
 *   - base (if any), out, P, Q (and P2, Q2) are all in the 16-bit compute dtype CT;
 *   - every view is row-major with 16-byte aligned rows (LK_VEC), N and the rank's row lengths
 *     are multiples of 8 elements (so every 16-byte chunk is whole or wholly outside);
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
 * Here the tile is the same (64×128 of out, 8 warps as 2×4 of 32×32, one tile per block, the
 * operands as one cp.async group and the base tile as a second so the product overlaps the base's
 * flight), but the loads are unconditional 16-byte cp.async (zero-fill outside the matrix),
 * the merge mode, base presence and Hadamard pair are template parameters, the epilogue works
 * on packed pairs in place in the base tile, and the store is one 16-byte store per chunk.
 *
 * Shared memory (dynamic): base/out tile 64×136 CT (17 KB), P 64×(RP+8), Q RP×136 or 128×(RP+8),
 * and with the Hadamard pair P2, Q2 again: RP 32 → 31 KB (45 KB with the pair), RP 128 → 68 KB.
 * No other memory. Deterministic. LYCO_CUDA_EXPAND_GENERAL=1 sends every call to k_expand (A/B).
 */
#include <stdlib.h>

#include "cuda/expand_tile.cuh"

namespace {

const int LM = EX_M;      /* tile rows (64) */
const int LN = EX_N;      /* tile columns (128) */
const int LNP = LN + 8;   /* row pitch of the base/out and r×N tiles (halfwords) */

template <int RP, bool QT, bool HD> struct lean_layout {
    static const int P = LM * LNP * 2;                                    /* after the base tile */
    static const int Q = P + LM * (RP + 8) * 2;
    static const int P2 = Q + (QT ? LN * (RP + 8) : RP * LNP) * 2;
    static const int Q2 = P2 + (HD ? LM * (RP + 8) * 2 : 0);
    static const int BYTES = Q2 + (HD ? RP * LNP * 2 : 0);
};

/* An R×C tile (C a multiple of 8) of a 16-bit row-major view at (r0, c0) into shared memory with
   row pitch C + 8: one 16-byte cp.async per chunk, zero-filled where the chunk lies outside. */
template <int R, int C> __device__ __forceinline__ void lean_issue(char *dst, const lk_view &v, i64 r0, i64 c0) {
    const int cpr = C / 8;
#pragma unroll
    for (int q = threadIdx.x; q < R * cpr; q += NT) {
        const int rr = q / cpr, cc = (q % cpr) * 8;
        const i64 r = r0 + rr, c = c0 + cc;
        const bool in = r < v.rows && c < v.cols;
        cp_async16(dst + (rr * (C + 8) + cc) * 2, in ? (const char *)v.p + (r * v.s0 + c) * 2 : (const char *)v.p, in ? 16 : 0);
    }
}

template <typename CT> __device__ __forceinline__ float lo16(unsigned u) { return bits16_to_f(u & 0xffffu, ct_of<CT>::dt); }
template <typename CT> __device__ __forceinline__ float hi16(unsigned u) { return bits16_to_f(u >> 16, ct_of<CT>::dt); }

/* The epilogues (EPI): 0 fmaf(±mf, dw, w) (base read), 1 fmaf(±mf, dw, 0) (modes 0 and 2 without a
   base, as k_expand's w = 0), 2 mf·dw (mode 1) — merge_elem without DoRA, the sign of mf − for
   mode 2; 3 merge_elem with DoRA (statistics st per kept index); 4 DoRA's statistics mode
   (ex_tile_stats, no output). */
template <int EPI> __device__ __forceinline__ float lean_merge(float w, float dw, float mf) {
    return EPI == 0 ? fmaf(mf, dw, w) : EPI == 1 ? fmaf(mf, dw, 0.0f) : mf * dw;
}

template <typename CT> struct lean_w { /* w of the base tile in shared memory (already CT) */
    const char *s;
    __device__ float operator()(int r, int c) const { return bits16_to_f(((const unsigned short *)s)[r * LNP + c], ct_of<CT>::dt); }
};

/* merge_elem with DoRA for the pair (row, col), (row, col + 1) */
__device__ __forceinline__ float lean_dora(const lk_expand_args &a, float w, float dw, int row, int col) {
    const i64 o = (i64)blockIdx.x * LM + row, j = (i64)blockIdx.y * LN + col;
    const float *s3 = a.st + 3 * ((o < a.M && j < a.N) ? dora_kept(a.dora, o, j, a.K) : 0);
    return merge_elem(w, dw, a.mode, 0.0f, true, s3);
}

template <typename CT, int RP, bool QT, bool HD, int EPI> __global__ __launch_bounds__(NT) void k_expand_lean(lk_expand_args a) {
    typedef lean_layout<RP, QT, HD> L;
    extern __shared__ __align__(16) char dsm[];
    __shared__ float rowc[LM];
    const bool hasB = EPI == 0 || EPI >= 3;
    const i64 mb = (i64)blockIdx.x * LM, nb = (i64)blockIdx.y * LN;

    lean_issue<LM, RP>(dsm + L::P, a.P, mb, 0);
    if (QT) lean_issue<LN, RP>(dsm + L::Q, a.Q, nb, 0);
    else lean_issue<RP, LN>(dsm + L::Q, a.Q, 0, nb);
    if (HD) {
        lean_issue<LM, RP>(dsm + L::P2, a.P2, mb, 0);
        lean_issue<RP, LN>(dsm + L::Q2, a.Q2, 0, nb);
    }
    cp_commit();
    if (hasB) lean_issue<LM, LN>(dsm, a.base, mb, nb);
    cp_commit();
    const float sig = sigma_ct<CT>(a.sigma);
    const float rs = (float)a.row_scale * (a.sig_in_row ? sig : 1.0f);
    if (threadIdx.x < LM) {
        const i64 m = mb + threadIdx.x;
        rowc[threadIdx.x] = m < a.M ? rs * vget(a.rowmask, m, 1.0f) : 0.0f;
    }
    cp_wait(1);
    __syncthreads();

    const int warp = threadIdx.x >> 5, m0 = (warp & 1) * 32, n0 = (warp >> 1) * 32;
    float acc[2][4][4];
    acc_zero(acc);
    const int kk = (int)((a.r + 15) / 16 * 16);
    warp_mma<CT, 2, 4, false, !QT>::run(acc, (const CT *)(dsm + L::P), RP + 8, (const CT *)(dsm + L::Q), QT ? RP + 8 : LNP,
                                        m0, n0, kk);
    if (HD) {
        float acc2[2][4][4];
        acc_zero(acc2);
        const int kk2 = (int)((a.r2 + 15) / 16 * 16);
        warp_mma<CT, 2, 4, false, true>::run(acc2, (const CT *)(dsm + L::P2), RP + 8, (const CT *)(dsm + L::Q2), LNP, m0, n0, kk2);
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mi][ni][e] *= acc2[mi][ni][e];
    }
    cp_wait(0);
    __syncthreads(); /* the base tile is visible; P's buffer is free */
    if (EPI == 4) {
        ex_tile_stats(a, acc, lean_w<CT>{dsm}, rowc, (float *)(dsm + L::P), m0, n0);
        return;
    }

    /* epilogue in place: each accumulator pair's base pair is read and overwritten by its owner */
    const float mf0 = (float)a.mult * (a.sig_in_mult ? sig : 1.0f), mf = a.mode == 2 ? -mf0 : mf0;
    const int dt = ct_of<CT>::dt;
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = acc_row(m0, mi, 2 * h);
            const float rc = rowc[row];
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                unsigned *p = (unsigned *)(dsm + (row * LNP + acc_col(n0, ni, 0)) * 2);
                const unsigned u = hasB ? *p : 0u;
                const int col = acc_col(n0, ni, 0);
                const float d0 = acc[mi][ni][2 * h] * rc, d1 = acc[mi][ni][2 * h + 1] * rc;
                const float v0 = EPI == 3 ? lean_dora(a, lo16<CT>(u), d0, row, col) : lean_merge<EPI>(lo16<CT>(u), d0, mf);
                const float v1 = EPI == 3 ? lean_dora(a, hi16<CT>(u), d1, row, col + 1) : lean_merge<EPI>(hi16<CT>(u), d1, mf);
                *p = f_to_bits(v0, dt) | (f_to_bits(v1, dt) << 16);
            }
        }
    __syncthreads();

    const int cpr = LN / 8;
#pragma unroll
    for (int q = threadIdx.x; q < LM * cpr; q += NT) {
        const int rr = q / cpr, cc = (q % cpr) * 8;
        const i64 o = mb + rr, j = nb + cc;
        if (o < a.out.rows && j < a.out.cols)
            *(uint4 *)((char *)a.out.p + (o * a.out.s0 + j) * 2) = *(const uint4 *)(dsm + (rr * LNP + cc) * 2);
    }
}

bool lean_view_ok(const lk_view &v, int ct) { return v.dt == ct && (v.flags & LK_VEC) && v.s1 == 1; }

bool lean_general_forced() {
    const char *v = getenv("LYCO_CUDA_EXPAND_GENERAL");
    return v && *v && *v != '0';
}

template <typename CT, int RP, bool QT, bool HD, int EPI> int lean_launch(const lk_expand_args *a, cudaStream_t s) {
    const int bytes = lean_layout<RP, QT, HD>::BYTES;
    if (bytes > 40 * 1024)
        LK_CHECK(cudaFuncSetAttribute(k_expand_lean<CT, RP, QT, HD, EPI>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    const dim3 grid((unsigned)cdiv(a->M, LM), (unsigned)cdiv(a->N, LN));
    k_expand_lean<CT, RP, QT, HD, EPI><<<grid, NT, bytes, s>>>(*a);
    LK_LAUNCHED("expand_lean");
    return LYCO_OK;
}

template <typename CT, int RP, bool QT, bool HD> int lean_mode(const lk_expand_args *a, cudaStream_t s) {
    if (a->stat_part) return lean_launch<CT, RP, QT, HD, 4>(a, s);
    if (a->dora.on) return lean_launch<CT, RP, QT, HD, 3>(a, s);
    if (a->mode == 1) return lean_launch<CT, RP, QT, HD, 2>(a, s);
    return a->base.p ? lean_launch<CT, RP, QT, HD, 0>(a, s) : lean_launch<CT, RP, QT, HD, 1>(a, s);
}

template <typename CT, int RP> int lean_rp(const lk_expand_args *a, cudaStream_t s) {
    if (a->q_t) return lean_mode<CT, RP, true, false>(a, s);
    return a->P2.p ? lean_mode<CT, RP, false, true>(a, s) : lean_mode<CT, RP, false, false>(a, s);
}

template <typename CT> int lean_ct(const lk_expand_args *a, i64 rp, cudaStream_t s) {
    switch (rp) {
    case 16: return lean_rp<CT, 16>(a, s);
    case 32: return lean_rp<CT, 32>(a, s);
    case 64: return lean_rp<CT, 64>(a, s);
    default: return lean_rp<CT, 128>(a, s);
    }
}

} // namespace

extern "C" int lk_expand_lean(const lk_expand_args *a, const lk_device *dev, void *stream, int *done) {
    *done = 0;
    const int ct = a->ct;
    if ((ct != DT_BF16 && ct != DT_F16) || lean_general_forced()) return LYCO_OK;
    if (a->p_split || a->M <= 0 || a->N <= 0 || a->N % 8) return LYCO_OK;
    const bool stats = a->stat_part != NULL;
    if ((a->dora.on || stats) && (!a->base.p || a->q_t || (a->dora.on && !stats && !a->st))) return LYCO_OK;
    const bool hd = a->P2.p != NULL;
    if (hd && (a->q_t || a->r2 < 1 || a->r2 % 8 || !lean_view_ok(a->P2, ct) || !lean_view_ok(a->Q2, ct))) return LYCO_OK;
    if (a->r < 1 || a->r % 8 || !lean_view_ok(a->P, ct) || !lean_view_ok(a->Q, ct)) return LYCO_OK;
    if (a->base.p && !lean_view_ok(a->base, ct)) return LYCO_OK;
    if (!stats && (!lean_view_ok(a->out, ct) || a->out.rows != a->M || a->out.cols != a->N)) return LYCO_OK;
    if (a->mode < 0 || a->mode > 2) return LYCO_OK;
    const i64 rp = lk_reduce_rank_tile(hd && a->r2 > a->r ? a->r2 : a->r);
    if (rp == 0 || cdiv(a->M, LM) > 2147483647LL || cdiv(a->N, LN) > 65535) return LYCO_OK;
    const i64 bytes = 2 * (LM * LNP + LM * (rp + 8) + (a->q_t ? LN * (rp + 8) : rp * LNP) + (hd ? LM * (rp + 8) + rp * LNP : 0));
    if (bytes + 1024 > dev->smem_optin) return LYCO_OK;
    *done = 1;
    cudaStream_t s = (cudaStream_t)stream;
    return ct == DT_BF16 ? lean_ct<bf16_t>(a, rp, s) : lean_ct<f16_t>(a, rp, s);
}
