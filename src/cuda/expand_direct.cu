/*
 * expand_direct.cu — the plain merges of lowrank.cu's expand with the base never staged as a tile:
 *   out[m, n] = epi(base[m, n], rowc_m · (P·Q)[m, n])           (LoRA / LoCon / DyLoRA merge
 *                                                                 forward, bypass forward's
 *                                                                 y = y0 + c·h·Uᵀ with Q given N×r)
 *   out[m, n] = epi(base[m, n], rowc_m · (P·Q)[m, n]·(P2·Q2)[m, n])  (LoHa's Hadamard pair)
 * with epi one of expand_lean.cu's EPI 0 (fmaf(±mf, d, w)), 1 (fmaf(±mf, d, 0): no base) and
 * 2 (mf·d: ΔW only), d = acc·rowc_m, rowc and mf as kern_lowrank.h defines them. Calls: every
 * operand in the 16-bit compute dtype CT, row-major with 16-byte aligned rows (LK_VEC), P in one
 * part, no DoRA, no statistics, rank ≤ 32 (the pair: ≤ 16); anything else stays on
 * expand_lean.cu / k_expand. Any M, N, r (edges zero-filled, the right edge's last chunk stored
 * element by element).
 *
 * The layout. mma.sync m16n8k16's accumulator gives lane (g = lane / 4, c = lane % 4) the columns
 * 2c, 2c + 1 of an 8-column n-tile in rows g and g + 8. A warp owns 64 columns as eight n-tiles and
 * maps n-tile q's column 2c + e to physical column 16c + 2q + e, so each lane holds 16 consecutive
 * columns of rows g and g + 8 — two 16-byte chunks of base and of out per row, in the registers
 * where its accumulators are: no base tile, no epilogue through shared memory, no block barrier.
 * A warp instruction then covers whole 128-byte lines of 8 rows (its lanes' first or second chunks,
 * through L1): with 32 columns per warp (8 rows × 64 bytes per instruction) the same kernel streamed
 * at 1.6–1.7 TB/s, and tools/stream_probe.cu measured the patterns alone on the H200 (8192×4096
 * bf16, read + write): contiguous 16-byte chunks 3.54 TB/s (cudaMemcpy 3.48), 8 rows × 128 B 2.92,
 * 8 rows × 64 B 1.68, a 64×128 tile through shared memory per block 2.21. Q's columns (the B
 * operand) are loaded in the same order once per warp and kept in registers over all of the
 * block's rows. Inside each k-step of 16 the lane's k indices 2c, 2c+1, 2c+8, 2c+9 are taken from
 * physical 4c…4c+3 in both A and B (the same 16 products per step; steps in order), so a lane's A
 * fragment of one row and step is one 8-byte chunk of P.
 *
 * Why (H200, LoRA merge 4096² r32 bf16, docs/kernels.md "seventh session"): expand_lean.cu stages
 * the base tile and P, Q through shared memory for the whole block and stays instruction-bound at
 * 28.9 µs against a 16 µs floor (17 M warp-instructions, 63 % issue slots). Here a lane's work per
 * 16 output elements is 2 base chunks, 2·S P chunks, 4·S HMMA, 16 unpacks, 32 FMUL/FFMA, 8 packs and
 * 2 stores.
 *
 * Memory parallelism without registers: each lane copies its own chunks (base rows g, g + 8; its P
 * chunks) with cp.async into its own slots of a DS-stage ring in shared memory and reads back only
 * what it copied (cp.async.wait_group makes a thread's own copies visible to it: no barrier), DS − 1
 * = 2 row groups ahead. Shared memory per block: 3 · NT · (64 + 16·S·(1 + HD)) bytes (S = 2, no
 * pair: 72 KB); ≤ 128 registers, 2 blocks per SM. Blocks: (column blocks of 512) × gy; block (bx, by) takes
 * the 16-row groups by, by + gy, … (gy from the occupancy, so that every block is resident and the
 * largest share is as small as it can be). Deterministic: each element's arithmetic is fixed.
 * LYCO_CUDA_EXPAND_DIRECT=0 leaves every call to expand_lean.cu (A/B); LYCO_CUDA_EXPAND_GENERAL=1
 * sends every call to k_expand, as before.
 */
#include <stdlib.h>

#include "cuda/common.cuh"
#include "cuda/kern_lowrank.h"

namespace {

const int NQ = 8;              /* n-tiles per warp */
const int DW = 8 * NQ;         /* columns per warp (64) */
const int DB = DW * (NT / 32); /* columns per block (512) */

__device__ __forceinline__ void cp_async8(void *smem, const void *gmem, int src_bytes) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}

/* Stage count and bytes per stage (per block) for rank tile S (k-steps) and the pair. */
__host__ __device__ constexpr int dx_stages(int) { return 3; }
__host__ __device__ constexpr int dx_pchunks(int S, bool hd) { return 2 * S * (hd ? 2 : 1); } /* 8-byte P chunks per lane */
__host__ __device__ constexpr int dx_stage_bytes(int S, bool hd) { return NT * (64 + 8 * dx_pchunks(S, hd)); }

/* The lane's 8-byte chunk (row, k…k+3) of a 16-bit M×r view (zero past r or M). */
__device__ __forceinline__ void dx_issue_p(char *dst, const lk_view &v, i64 r, i64 row, int k) {
    const int rest = (int)(r - k);
    const bool in = row < v.rows && rest > 0;
    cp_async8(dst, in ? (const char *)v.p + (row * v.s0 + k) * 2 : (const char *)v.p, in ? (rest >= 4 ? 8 : rest * 2) : 0);
}

/* The lane's 16-byte chunk (row, col…col+7) of a 16-bit view (zero outside), through L1 (.ca): the
   lane's second chunk is the other half of the same 32-byte sectors. */
__device__ __forceinline__ void dx_issue_w(char *dst, const lk_view &v, i64 row, i64 col) {
    const i64 rest = v.cols - col;
    const bool in = row < v.rows && rest > 0;
    const unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa),
                 "l"(in ? (const char *)v.p + (row * v.s0 + col) * 2 : (const char *)v.p), "r"(in ? (rest >= 8 ? 16 : (int)rest * 2) : 0));
}

/* B fragments of the warp's 64 columns (lane: g, c): b[s][q] holds k = 16s + 4c … 16s + 4c + 3 of
   column n = col0 + 16·(g / 2) + 2q + g % 2, from Q r×N (QT false) or Qt N×r (QT true); zero past
   r or N. */
template <int S, bool QT>
__device__ __forceinline__ void dx_load_b(unsigned (&b)[S][NQ][2], const lk_view &Q, i64 r, i64 N, i64 col0, int g, int c) {
#pragma unroll
    for (int q = 0; q < NQ; q++) {
        const i64 n = col0 + 16 * (g >> 1) + 2 * q + (g & 1);
#pragma unroll
        for (int s = 0; s < S; s++) {
            unsigned h[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const i64 k = 16 * s + 4 * c + e;
                const bool in = n < N && k < r;
                h[e] = in ? (unsigned)*(const unsigned short *)((const char *)Q.p + (QT ? n * Q.s0 + k : k * Q.s0 + n) * 2) : 0u;
            }
            b[s][q][0] = h[0] | (h[1] << 16);
            b[s][q][1] = h[2] | (h[3] << 16);
        }
    }
}

template <typename CT> __device__ __forceinline__ float dx_lo(unsigned u) {
    return ct_of<CT>::dt == DT_BF16 ? __uint_as_float(u << 16) : __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
}
template <typename CT> __device__ __forceinline__ float dx_hi(unsigned u) {
    return ct_of<CT>::dt == DT_BF16 ? __uint_as_float(u & 0xffff0000u) : __half2float(__ushort_as_half((unsigned short)(u >> 16)));
}
/* RN_CT of (lo, hi), packed (one cvt for the pair) */
template <typename CT> __device__ __forceinline__ unsigned dx_pack(float lo, float hi) {
    unsigned w;
    if (ct_of<CT>::dt == DT_BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}

template <int EPI> __device__ __forceinline__ float dx_merge(float w, float d, float mf) {
    return EPI == 0 ? fmaf(mf, d, w) : EPI == 1 ? fmaf(mf, d, 0.0f) : mf * d;
}

/* Issue row group grp's copies (the lane's base chunks of rows g, g + 8; its P (, P2) chunks) into
   ring stage st, as one cp.async group (an empty group past the end keeps the count). */
template <int S, bool HD, int EPI>
__device__ __forceinline__ void dx_issue(char *ring, int st, const lk_expand_args &a, i64 grp, i64 ngroups, i64 colw, int g, int c) {
    if (grp < ngroups) {
        const int tid = (int)threadIdx.x;
        char *wst = ring + st * dx_stage_bytes(S, HD);
        char *pst = wst + NT * 64;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const i64 row = grp * 16 + g + 8 * h;
            if (EPI == 0)
#pragma unroll
                for (int j = 0; j < 2; j++) dx_issue_w(wst + ((2 * h + j) * NT + tid) * 16, a.base, row, colw + 8 * j);
#pragma unroll
            for (int s = 0; s < S; s++) {
                dx_issue_p(pst + ((h * S + s) * NT + tid) * 8, a.P, a.r, row, 16 * s + 4 * c);
                if (HD) dx_issue_p(pst + (((2 + h) * S + s) * NT + tid) * 8, a.P2, a.r2, row, 16 * s + 4 * c);
            }
        }
    }
    cp_commit();
}

template <typename CT, int S, bool QT, bool HD, int EPI> __global__ __launch_bounds__(NT, 2) void k_expand_direct(lk_expand_args a, int gy, int var) {
    const int DS = dx_stages(S);
    extern __shared__ __align__(16) char ring[];
    const int lane = (int)threadIdx.x & 31, g = lane >> 2, c = lane & 3, tid = (int)threadIdx.x;
    const i64 col0 = (i64)blockIdx.x * DB + (threadIdx.x >> 5) * DW; /* the warp's first column */
    if (col0 >= a.N) return;                                            /* no block barrier below */
    const i64 colw = col0 + 16 * c;                                     /* the lane's first column */
    const i64 ngroups = (a.M + 15) / 16;

    const float sig = sigma_ct<CT>(a.sigma);
    const float rs = (float)a.row_scale * (a.sig_in_row ? sig : 1.0f);
    const float mf0 = (float)a.mult * (a.sig_in_mult ? sig : 1.0f), mf = a.mode == 2 ? -mf0 : mf0;

    unsigned b[S][NQ][2], b2[HD ? S : 1][NQ][2];
    dx_load_b<S, QT>(b, a.Q, a.r, a.N, col0, g, c);
    if (HD) dx_load_b<HD ? S : 1, false>(b2, a.Q2, a.r2, a.N, col0, g, c);

    /* var bit 0 (experiment): contiguous row ranges per block instead of strided groups */
    const i64 per = (ngroups + gy - 1) / gy;
    const i64 step = (var & 1) ? 1 : gy;
    i64 grp = (var & 1) ? (i64)blockIdx.y * per : (i64)blockIdx.y;
    const i64 gend = (var & 1) ? (grp + per < ngroups ? grp + per : ngroups) : ngroups;
#pragma unroll
    for (int i = 0; i < DS - 1; i++) dx_issue<S, HD, EPI>(ring, i, a, grp + (i64)i * step, gend, colw, g, c);
    for (int i = 0; grp < gend; grp += step, i++) {
        const int st = i % DS;
        dx_issue<S, HD, EPI>(ring, (i + DS - 1) % DS, a, grp + (i64)(DS - 1) * step, gend, colw, g, c);
        if (var & 4) cp_wait(0); /* experiment: nothing in flight during the math */
        else cp_wait(DS - 1);
        const char *wst = ring + st * dx_stage_bytes(S, HD);
        const char *pst = wst + NT * 64;

        float acc[NQ][4], acc2[HD ? NQ : 1][4];
#pragma unroll
        for (int q = 0; q < NQ; q++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                acc[q][e] = 0.0f;
                if (HD) acc2[q][e] = 0.0f;
            }
#pragma unroll
        for (int s = 0; s < S; s++) {
            const uint2 p0 = *(const uint2 *)(pst + ((0 * S + s) * NT + tid) * 8);
            const uint2 p1 = *(const uint2 *)(pst + ((1 * S + s) * NT + tid) * 8);
            const unsigned af[4] = {p0.x, p1.x, p0.y, p1.y};
#pragma unroll
            for (int q = 0; q < NQ; q++) mma16816<CT>(acc[q], af, b[s][q]);
            if (HD) {
                const uint2 r0 = *(const uint2 *)(pst + ((2 * S + s) * NT + tid) * 8);
                const uint2 r1 = *(const uint2 *)(pst + ((3 * S + s) * NT + tid) * 8);
                const unsigned af2[4] = {r0.x, r1.x, r0.y, r1.y};
#pragma unroll
                for (int q = 0; q < NQ; q++) mma16816<CT>(acc2[HD ? q : 0], af2, b2[HD ? s : 0][q]);
            }
        }
        if (HD)
#pragma unroll
            for (int q = 0; q < NQ; q++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[q][e] *= acc2[HD ? q : 0][e];

#pragma unroll
        for (int h = 0; h < 2; h++) {
            const i64 row = grp * 16 + g + 8 * h;
            if (row >= a.M) continue;
            const float rc = a.rowmask.p ? rs * vload(a.rowmask, 0, row) : rs;
            unsigned wv[NQ], o[NQ];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const uint4 w = EPI == 0 ? *(const uint4 *)(wst + ((2 * h + j) * NT + tid) * 16) : make_uint4(0u, 0u, 0u, 0u);
                wv[4 * j] = w.x, wv[4 * j + 1] = w.y, wv[4 * j + 2] = w.z, wv[4 * j + 3] = w.w;
            }
#pragma unroll
            for (int q = 0; q < NQ; q++) {
                const float d0 = acc[q][2 * h] * rc, d1 = acc[q][2 * h + 1] * rc;
                o[q] = dx_pack<CT>(dx_merge<EPI>(dx_lo<CT>(wv[q]), d0, mf), dx_merge<EPI>(dx_hi<CT>(wv[q]), d1, mf));
            }
            char *dst = (char *)a.out.p + (row * a.out.s0 + colw) * 2;
            if (colw + 16 <= a.N) {
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const uint4 v = make_uint4(o[4 * j], o[4 * j + 1], o[4 * j + 2], o[4 * j + 3]);
                    if (var & 2) *(uint4 *)(dst + 16 * j) = v; /* experiment: plain store */
                    else __stcs((uint4 *)(dst + 16 * j), v);
                }
            } else {
#pragma unroll
                for (int e = 0; e < 16; e++)
                    if (colw + e < a.N) ((unsigned short *)dst)[e] = (unsigned short)(o[e >> 1] >> (16 * (e & 1)));
            }
        }
    }
    cp_wait(0);
}

bool dx_view_ok(const lk_view &v, int ct) { return v.dt == ct && (v.flags & LK_VEC) && v.s1 == 1; }

bool dx_off() {
    const char *v = getenv("LYCO_CUDA_EXPAND_DIRECT"), *gen = getenv("LYCO_CUDA_EXPAND_GENERAL");
    return (v && *v == '0') || (gen && *gen && *gen != '0');
}

/* k-steps (1, 2, 4) the direct kernel runs a call with, or 0 when it is not its call. */
int dx_steps(const lk_expand_args *a) {
    const int ct = a->ct;
    if ((ct != DT_BF16 && ct != DT_F16) || dx_off()) return 0;
    if (a->p_split || a->M <= 0 || a->N <= 0 || a->dora.on || a->stat_part || a->G.p) return 0;
    if (a->mode < 0 || a->mode > 2) return 0;
    if (a->r < 1 || !dx_view_ok(a->P, ct) || !dx_view_ok(a->Q, ct)) return 0;
    const bool hd = a->P2.p != NULL;
    if (hd && (a->q_t || a->r2 < 1 || !dx_view_ok(a->P2, ct) || !dx_view_ok(a->Q2, ct))) return 0;
    if (a->base.p && (!dx_view_ok(a->base, ct) || a->base.rows != a->M || a->base.cols != a->N)) return 0;
    if (!dx_view_ok(a->out, ct) || a->out.rows != a->M || a->out.cols != a->N) return 0;
    if (a->P.rows < a->M || (hd && a->P2.rows < a->M)) return 0;
    const i64 r = hd && a->r2 > a->r ? a->r2 : a->r;
    if (r > (hd ? 16 : 32) || cdiv(a->N, DB) > 65535LL * 1024) return 0;
    return r <= 16 ? 1 : 2;
}

template <typename CT, int S, bool QT, bool HD, int EPI> int dx_launch(const lk_expand_args *a, const lk_device *dev, cudaStream_t s) {
    const int bytes = dx_stages(S) * dx_stage_bytes(S, HD);
    LK_SMEM_OPTIN(bytes, k_expand_direct<CT, S, QT, HD, EPI>);
    static int per_sm = 0; /* blocks per SM (the occupancy calculator, once per instantiation) */
    if (per_sm < 1) {
        int n = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k_expand_direct<CT, S, QT, HD, EPI>, NT, bytes) != cudaSuccess || n < 1) {
            (void)cudaGetLastError();
            n = 1;
        }
        per_sm = n;
    }
    const i64 gx = cdiv(a->N, DB), ngroups = cdiv(a->M, 16);
    /* as many row slices as keep every block resident, then the fewest with the same largest share */
    i64 gy = (i64)per_sm * dev->sms / gx;
    if (gy < 1) gy = 1;
    if (gy > ngroups) gy = ngroups;
    gy = cdiv(ngroups, cdiv(ngroups, gy));
    if (gy > 65535) gy = 65535;
    const char *ev = getenv("LYCO_CUDA_DX_VAR"); /* experiment switches (bits, see the kernel) */
    k_expand_direct<CT, S, QT, HD, EPI><<<dim3((unsigned)gx, (unsigned)gy), NT, bytes, s>>>(*a, (int)gy, ev ? atoi(ev) : 0);
    LK_LAUNCHED("expand_direct");
    return LYCO_OK;
}

template <typename CT, int S, bool QT, bool HD> int dx_mode(const lk_expand_args *a, const lk_device *dev, cudaStream_t s) {
    if (a->mode == 1) return dx_launch<CT, S, QT, HD, 2>(a, dev, s);
    return a->base.p ? dx_launch<CT, S, QT, HD, 0>(a, dev, s) : dx_launch<CT, S, QT, HD, 1>(a, dev, s);
}

template <typename CT, int S> int dx_shape(const lk_expand_args *a, const lk_device *dev, cudaStream_t s) {
    if (a->q_t) return dx_mode<CT, S, true, false>(a, dev, s);
    if constexpr (S == 1)
        if (a->P2.p) return dx_mode<CT, S, false, true>(a, dev, s);
    return dx_mode<CT, S, false, false>(a, dev, s);
}

template <typename CT> int dx_ct(const lk_expand_args *a, int S, const lk_device *dev, cudaStream_t s) {
    return S == 1 ? dx_shape<CT, 1>(a, dev, s) : dx_shape<CT, 2>(a, dev, s);
}

} // namespace

extern "C" int lk_expand_direct(const lk_expand_args *a, const lk_device *dev, void *stream, int *done) {
    const int S = dx_steps(a);
    *done = S != 0;
    if (S == 0) return LYCO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    return a->ct == DT_BF16 ? dx_ct<bf16_t>(a, S, dev, s) : dx_ct<f16_t>(a, S, dev, s);
}
