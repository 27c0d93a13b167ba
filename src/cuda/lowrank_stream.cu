/*
 * lowrank_stream.cu — lk_expand's streaming kernel: out = epi(base, rowc · P·Q) with every output
 * element loaded, merged and stored by the thread whose tensor-core accumulator holds it, without
 * a shared-memory round trip (kern_lowrank.h has the formula; lowrank.cu's k_expand is the general
 * kernel this one stands in for on the common layouts).
 *
 * Why: k_expand stages the base tile and the result tile through shared memory and lives for one
 * 64×128 tile; the H200 profile showed it issue-bound at 17–33% of DRAM bandwidth (docs/kernels.md),
 * 2.6–3.9× the floor on LoRA merge forward. Here the only traffic is the stream itself:
 *
 *   - columns are permuted inside each 32-column group so that a thread's accumulators
 *     (mma.sync m16n8k16: rows g and g+8, columns 2t, 2t+1 of each of 4 n8 tiles j) are the 8
 *     consecutive columns 8t … 8t+7 of the group: tile j's column 2t'+e is column 8t' + 2j + e.
 *     The permutation is applied when Q is loaded (B fragment column g ↔ column 8·(g>>1) + 2j +
 *     (g&1)), so base and out move as one 16-byte load and one 16-byte store per thread and row;
 *   - a warp owns 32 columns; its B fragments (Q restricted to them, r × 32, permuted) stay in
 *     registers while it walks down the rows; A fragments (P's rows) come straight from global
 *     memory as 32-bit pairs (L1 hits: the block's 4 warps read the same rows);
 *   - the next step's base and P are loaded before the current step is multiplied and stored;
 *   - the grid is persistent (SMs × resident blocks); block b takes the b-th equal slice of the
 *     (column strip, row step) sequence, so every SM gets the same number of steps (no partial
 *     last wave), and reloads its B fragments when its slice crosses into the next strip.
 *
 * Taken when (lk_expand_stream_fits): 16-bit CT; P (or, p_split, fp32 P such as bypass
 * backward's gh, split into nsplit<CT> parts in registers at use), Q, base and out in CT; out
 * (and base) row-major with 16-byte rows (LK_VEC, any N: the last chunk of a row is
 * element-wise); DoRA only per output row (its statistics pass writes one Σ V² partial per row
 * and 32-column warp group: lk_expand_stat_tiles). Everything else runs k_expand. In place
 * (out = base) is safe: each element is read, then written, by one thread.
 *
 * Registers per thread: B fragments 8·KS (KS = r/16 rounded up: 1, 2, 4, 8), A fragments 4·MT·KS
 * (fp32 P: 8·MT·KS) twice (current and next), base 8·MT twice, accumulators 16·MT; MT = 2 row
 * tiles per step for KS ≤ 2 (CT P), else 1. Extra memory: none (stats mode: the partials the caller allocates).
 * Deterministic: fixed summation order per element (k order inside the mma), no atomics.
 *
 * STATUS: opt-in (LYCO_CUDA_LOWRANK_STREAM=1 routes the expand, the row reduction and the column
 * reduction here; by default lowrank.cu's staged kernels run). Correct on the H200 (check --algo
 * locon,dylora 672/0 with these kernels as the default, 4c49d4f) but slower there, bf16, µs, this
 * file vs the staged kernels in the same run: merge fwd 4096² r32 57.1 vs 43.9, 11008×4096 r32
 * 150.9 vs 107.6, 4096² r128 125.3 (staged, previous session's run D: 63.7); merge bwd 107.3 vs 82.1; bypass fwd 8192 tok 195.7 vs
 * 178.7; bypass bwd 504.6 vs 449.5; DoRA merge 115.3 vs 122.2 (run-to-run noise ~15%). Nsight
 * Compute (expand, 4096² r32): 119–146 registers → 25% occupancy (4 warps per scheduler), 23% of
 * DRAM bandwidth, ~530 issued instructions per 2 KB step before the byte-pointer interior path.
 * Registers hold both the in-flight loads and the fragments, so in-flight bytes per SM stay
 * ~32–48 KB; the next step is a per-thread cp.async ring in shared memory (in-flight bytes
 * bounded by 228 KB of shared memory instead of the register file) with P staged once per
 * block slice. LYCO_CUDA_XS_BLOCKS_PER_SM=n caps the resident blocks per SM (experiments).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kern_lowrank.h"
#include "cuda/merge_ep.cuh"

namespace {

const int XW = 4;        /* warps per block */
const int XT = XW * 32;  /* threads per block */
const int XN = XW * 32;  /* columns per strip (one 32-column group per warp) */

template <typename CT> __device__ __forceinline__ float lo16(unsigned u);
template <typename CT> __device__ __forceinline__ float hi16(unsigned u);
template <> __device__ __forceinline__ float lo16<bf16_t>(unsigned u) { return __uint_as_float(u << 16); }
template <> __device__ __forceinline__ float hi16<bf16_t>(unsigned u) { return __uint_as_float(u & 0xffff0000u); }
template <> __device__ __forceinline__ float lo16<f16_t>(unsigned u) { return __half2float(__ushort_as_half((unsigned short)(u & 0xffffu))); }
template <> __device__ __forceinline__ float hi16<f16_t>(unsigned u) { return __half2float(__ushort_as_half((unsigned short)(u >> 16))); }

/* RN(a) in the low half, RN(b) in the high half */
template <typename CT> __device__ __forceinline__ unsigned pack2(float a, float b);
template <> __device__ __forceinline__ unsigned pack2<bf16_t>(float a, float b) {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *(unsigned *)&v;
}
template <> __device__ __forceinline__ unsigned pack2<f16_t>(float a, float b) {
    __half2 v = __floats2half2_rn(a, b);
    return *(unsigned *)&v;
}

/* Bits of element (r, c) of a view already in the 16-bit CT (exact). */
__device__ __forceinline__ unsigned ld_bits(const lk_view &v, i64 r, i64 c) { return f_to_bits(vload(v, r, c), v.dt); }

/* Elements (m, k), (m, k+1) of P packed (k even; zero past r). pairs: P row-major with 4-byte pairs. */
__device__ __forceinline__ unsigned ld_apair(const lk_view &P, i64 m, int k, int r, bool pairs) {
    if (k >= r) return 0u;
    if (pairs && k + 1 < r) return *(const unsigned *)vaddr(P, m, k);
    return ld_bits(P, m, k) | (k + 1 < r ? ld_bits(P, m, k + 1) << 16 : 0u);
}

struct xs_args {
    lk_expand_args a;
    i64 strips, steps; /* column strips of XN, row steps of 16·MT per strip */
    int pairs;         /* P row-major with aligned pairs */
    int kfull;         /* pairs and r even: interior steps load P pairs and base without row/column guards */
};

/* PS: P is fp32 (bypass backward's gh) entering the products as nsplit<CT> parts, split at use. */
template <int KS, int MT, bool PS> struct xs_step {
    unsigned a[PS ? 1 : MT][PS ? 1 : KS][4];  /* CT pairs */
    float2 af[PS ? MT : 1][PS ? KS : 1][4];   /* fp32 pairs */
    uint4 w[MT][2];
};

/* Elements (m, k), (m, k+1) of fp32 P (k even; zero past r). */
__device__ __forceinline__ float2 ld_fpair(const lk_view &P, i64 m, int k, int r, bool pairs) {
    if (k >= r) return make_float2(0.0f, 0.0f);
    if (pairs && k + 1 < r) return *(const float2 *)vaddr(P, m, k);
    return make_float2(vload(P, m, k), k + 1 < r ? vload(P, m, k + 1) : 0.0f);
}

/* The A fragments and base chunks of row step `st` of strip `sp` for this thread. */
template <typename CT, int KS, int MT, bool PS>
__device__ __forceinline__ void xs_load(const xs_args &x, i64 sp, i64 st, xs_step<KS, MT, PS> &s) {
    const lk_expand_args &a = x.a;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const i64 col = sp * XN + (threadIdx.x >> 5) * 32 + 8 * t;
    const int r = (int)a.r;
    if (x.kfull && (st + 1) * 16 * MT <= a.M && col + 8 <= a.N) {
        /* interior step: byte pointers, no guards */
        const i64 m = st * 16 * MT + g;
        const int pes = PS ? 4 : 2;
        const char *pp = (const char *)a.P.p + (m * a.P.s0 + 2 * t) * pes;
        const i64 prow = a.P.s0 * pes;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int ks = 0; ks < KS; ks++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int k = ks * 16 + 2 * t + 8 * (e >> 1); /* r even: k, k+1 both in or both out */
                    const char *q = pp + (mt * 16 + 8 * (e & 1)) * prow + (ks * 16 + 8 * (e >> 1)) * pes;
                    if (PS) s.af[PS ? mt : 0][PS ? ks : 0][e] = k < r ? *(const float2 *)q : make_float2(0.0f, 0.0f);
                    else s.a[PS ? 0 : mt][PS ? 0 : ks][e] = k < r ? *(const unsigned *)q : 0u;
                }
        const char *pw = (const char *)a.base.p + (m * a.base.s0 + col) * 2;
        const i64 wrow = a.base.s0 * 2;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                s.w[mt][h] = a.base.p ? __ldcs((const uint4 *)(pw + (mt * 16 + 8 * h) * wrow)) : make_uint4(0u, 0u, 0u, 0u);
        return;
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const i64 m = st * 16 * MT + mt * 16 + g;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            const int k = ks * 16 + 2 * t;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const i64 me = m + 8 * (e & 1);
                const int ke = k + 8 * (e >> 1);
                if (PS) s.af[PS ? mt : 0][PS ? ks : 0][e] = me < a.M ? ld_fpair(a.P, me, ke, r, x.pairs) : make_float2(0.0f, 0.0f);
                else s.a[PS ? 0 : mt][PS ? 0 : ks][e] = me < a.M ? ld_apair(a.P, me, ke, r, x.pairs) : 0u;
            }
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const i64 row = m + 8 * h;
            uint4 w = make_uint4(0u, 0u, 0u, 0u);
            if (a.base.p && row < a.M && col < a.N) {
                if (col + 8 <= a.N) {
                    w = __ldcs((const uint4 *)vaddr(a.base, row, col));
                } else {
                    unsigned e[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
                    for (int c = 0; c < 8 && col + c < a.N; c++) e[c] = ld_bits(a.base, row, col + c);
                    w = make_uint4(e[0] | e[1] << 16, e[2] | e[3] << 16, e[4] | e[5] << 16, e[6] | e[7] << 16);
                }
            }
            s.w[mt][h] = w;
        }
    }
}

/* B fragments of strip sp for this warp's 32 columns, permuted (see the header). */
template <int KS, bool QT> __device__ __forceinline__ void xs_load_b(const xs_args &x, i64 sp, unsigned (&b)[KS][4][2]) {
    const lk_expand_args &a = x.a;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int r = (int)a.r;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const i64 n = sp * XN + (threadIdx.x >> 5) * 32 + 8 * (g >> 1) + 2 * j + (g & 1);
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
#pragma unroll
            for (int hk = 0; hk < 2; hk++) {
                const int k = ks * 16 + 2 * t + 8 * hk;
                unsigned v = 0u;
                if (n < a.N && k < r) {
                    v = QT ? ld_bits(a.Q, n, k) : ld_bits(a.Q, k, n);
                    if (k + 1 < r) v |= (QT ? ld_bits(a.Q, n, k + 1) : ld_bits(a.Q, k + 1, n)) << 16;
                }
                b[ks][j][hk] = v;
            }
    }
}

/* The kept-index statistics of (row, col) for DoRA (per output row: the row's). */
__device__ __forceinline__ const float *xs_st(const lk_expand_args &a, i64 row) { return a.st + 3 * (row < a.M ? row : 0); }

/* Multiply one step and merge/store it (or, stats mode, write its per-row Σ V² partials). */
/* The A fragment of part p of fp32 pairs (p = 0: RN_CT(v); 1: RN_CT(v − part 0); 2: the rest). */
template <typename CT> __device__ __forceinline__ float split_part(float v, int p) {
    float h = rnd_ct<CT>(v);
    if (p == 0) return h;
    v -= h;
    h = rnd_ct<CT>(v);
    if (p == 1) return h;
    return rnd_ct<CT>(v - h);
}

template <typename CT, int KS, int MT, bool PS>
__device__ __forceinline__ void xs_mma(float (&acc)[4][4], const xs_step<KS, MT, PS> &s, int mt, const unsigned (&b)[KS][4][2]) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        if (PS) {
#pragma unroll
            for (int p = nsplit<CT>::n - 1; p >= 0; p--) {
                unsigned a[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float2 f = s.af[PS ? mt : 0][PS ? ks : 0][e];
                    a[e] = pack2<CT>(split_part<CT>(f.x, p), split_part<CT>(f.y, p));
                }
#pragma unroll
                for (int j = 0; j < 4; j++) mma16816<CT>(acc[j], a, b[ks][j]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) mma16816<CT>(acc[j], s.a[PS ? 0 : mt][PS ? 0 : ks], b[ks][j]);
        }
    }
}

template <typename CT, int KS, int MT, bool PS, bool DORA>
__device__ __forceinline__ void xs_step_out(const xs_args &x, i64 sp, i64 st, const xs_step<KS, MT, PS> &s,
                                            const unsigned (&b)[KS][4][2], float rs, float mf) {
    const lk_expand_args &a = x.a;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    const i64 col = sp * XN + warp * 32 + 8 * t;
    const bool stats = DORA && a.stat_part != NULL;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float acc[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
        xs_mma<CT, KS, MT, PS>(acc, s, mt, b);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const i64 row = st * 16 * MT + mt * 16 + g + 8 * h;
            const float rc = row < a.M ? rs * vget(a.rowmask, row, 1.0f) : 0.0f;
            const unsigned wv[4] = {s.w[mt][h].x, s.w[mt][h].y, s.w[mt][h].z, s.w[mt][h].w};
            const float *s3 = DORA && !stats ? xs_st(a, row) : NULL;
            if (stats) {
                float ss = 0.0f;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const float v0 = lo16<CT>(wv[j]) + acc[j][2 * h] * rc, v1 = hi16<CT>(wv[j]) + acc[j][2 * h + 1] * rc;
                    ss = fmaf(v0, v0, ss);
                    ss = fmaf(v1, v1, ss);
                }
                ss += __shfl_xor_sync(0xffffffffu, ss, 1);
                ss += __shfl_xor_sync(0xffffffffu, ss, 2);
                if (t == 0 && row < a.M) a.stat_part[(sp * XW + warp) * a.M + row] = ss;
                continue;
            }
            unsigned o[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float v0 = merge_elem(lo16<CT>(wv[j]), acc[j][2 * h] * rc, a.mode, mf, DORA, s3);
                const float v1 = merge_elem(hi16<CT>(wv[j]), acc[j][2 * h + 1] * rc, a.mode, mf, DORA, s3);
                o[j] = pack2<CT>(v0, v1);
            }
            if (row >= a.M || col >= a.N) continue;
            if (col + 8 <= a.N) {
                __stcs((uint4 *)((char *)a.out.p + (row * a.out.s0 + col) * 2), make_uint4(o[0], o[1], o[2], o[3]));
            } else {
                for (int c = 0; c < 8 && col + c < a.N; c++)
                    vstore(a.out, row, col + c, (c & 1) ? hi16<CT>(o[c >> 1]) : lo16<CT>(o[c >> 1]));
            }
        }
    }
}

__device__ __forceinline__ void xs_advance(i64 &sp, i64 &st, i64 steps) {
    if (++st == steps) {
        st = 0;
        sp++;
    }
}

template <typename CT, int KS, int MT, bool QT, bool PS, bool DORA> __global__ __launch_bounds__(XT) void k_expand_stream(xs_args x) {
    const lk_expand_args &a = x.a;
    const i64 total = x.strips * x.steps;
    const i64 s0 = total * blockIdx.x / gridDim.x, s1 = total * (blockIdx.x + 1) / gridDim.x;
    if (s0 >= s1) return;
    const float sig = sigma_ct<CT>(a.sigma);
    const float rs = (float)a.row_scale * (a.sig_in_row ? sig : 1.0f);
    const float mf = (float)a.mult * (a.sig_in_mult ? sig : 1.0f);
    unsigned b[KS][4][2];
    i64 bsp = -1;
    /* two step buffers used in turn (no copies, which would wait for the loads): while one step
       is multiplied and stored, the next one's loads are in flight */
    xs_step<KS, MT, PS> A, B;
    i64 spA = s0 / x.steps, stA = s0 % x.steps, spB = spA, stB = stA;
    xs_advance(spB, stB, x.steps);
    xs_load<CT, KS, MT, PS>(x, spA, stA, A);
    if (s0 + 1 < s1) xs_load<CT, KS, MT, PS>(x, spB, stB, B);
    for (i64 q = s0; q < s1; q += 2) {
        if (spA != bsp) {
            xs_load_b<KS, QT>(x, spA, b);
            bsp = spA;
        }
        xs_step_out<CT, KS, MT, PS, DORA>(x, spA, stA, A, b, rs, mf);
        if (q + 2 < s1) {
            spA = spB;
            stA = stB;
            xs_advance(spA, stA, x.steps);
            xs_load<CT, KS, MT, PS>(x, spA, stA, A);
        }
        if (q + 1 >= s1) break;
        if (spB != bsp) {
            xs_load_b<KS, QT>(x, spB, b);
            bsp = spB;
        }
        xs_step_out<CT, KS, MT, PS, DORA>(x, spB, stB, B, b, rs, mf);
        if (q + 3 < s1) {
            spB = spA;
            stB = stA;
            xs_advance(spB, stB, x.steps);
            xs_load<CT, KS, MT, PS>(x, spB, stB, B);
        }
    }
}

template <int KS, bool PS> struct xs_mt { static const int v = KS <= 2 && !PS ? 2 : 1; };

/* Resident blocks per SM for the persistent grid (occupancy API; LYCO_CUDA_XS_BLOCKS_PER_SM caps it). */
template <typename K> int xs_blocks(K kern, const lk_device *dev, int *blocks) {
    int per = 0;
    LK_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kern, XT, 0));
    const char *e = getenv("LYCO_CUDA_XS_BLOCKS_PER_SM");
    const int cap = e ? atoi(e) : 0;
    if (cap > 0 && cap < per) per = cap;
    if (per < 1) per = 1;
    *blocks = per * dev->sms;
    return LYCO_OK;
}

template <typename CT, int KS, bool QT, bool PS, bool DORA> int xs_launch(const lk_expand_args *a, const lk_device *dev, cudaStream_t s) {
    const int MT = xs_mt<KS, PS>::v;
    xs_args x;
    x.a = *a;
    x.strips = cdiv(a->N, XN);
    x.steps = cdiv(a->M, 16 * MT);
    const int pb = PS ? 8 : 4; /* bytes of a pair */
    x.pairs = a->P.s1 == 1 && !(a->P.flags & LK_UNALIGNED) && ((uintptr_t)a->P.p % pb) == 0 && (a->P.s0 % 2) == 0;
    x.kfull = x.pairs && a->r % 2 == 0;
    int blocks = 0;
    int rc = xs_blocks(k_expand_stream<CT, KS, MT, QT, PS, DORA>, dev, &blocks);
    if (rc) return rc;
    const i64 total = x.strips * x.steps;
    if (total < blocks) blocks = (int)total;
    k_expand_stream<CT, KS, MT, QT, PS, DORA><<<blocks, XT, 0, s>>>(x);
    LK_LAUNCHED("expand_stream");
    return LYCO_OK;
}

template <typename CT, bool QT, bool PS, bool DORA> int xs_launch_rp(const lk_expand_args *a, const lk_device *dev, cudaStream_t s) {
    switch (lk_reduce_rank_tile(a->r)) {
    case 16: return xs_launch<CT, 1, QT, PS, DORA>(a, dev, s);
    case 32: return xs_launch<CT, 2, QT, PS, DORA>(a, dev, s);
    case 64: return xs_launch<CT, 4, QT, PS, DORA>(a, dev, s);
    default:
        if constexpr (PS) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: streaming expand of fp32 parts beyond rank 64");
        else return xs_launch<CT, 8, QT, PS, DORA>(a, dev, s);
    }
}

/* The instances: merge (Q r×N; DoRA or not), bypass forward (Q given transposed), bypass backward's
   dx (fp32 P in parts). */
template <typename CT> int xs_launch_ct(const lk_expand_args *a, const lk_device *dev, cudaStream_t s) {
    if (a->q_t) return xs_launch_rp<CT, true, false, false>(a, dev, s);
    if (a->p_split) return xs_launch_rp<CT, false, true, false>(a, dev, s);
    return a->dora.on ? xs_launch_rp<CT, false, false, true>(a, dev, s) : xs_launch_rp<CT, false, false, false>(a, dev, s);
}

bool row_major_vec(const lk_view &v) { return v.s1 == 1 && (v.flags & LK_VEC) != 0; }

/* Opt-in (LYCO_CUDA_LOWRANK_STREAM=1): measured slower than lowrank.cu's staged kernels (see the header). */
bool stream_on() { return getenv("LYCO_CUDA_LOWRANK_STREAM") != NULL; }

/* ---------------------------------------------------------------------------------------------
 * reduce: part[z][m][i] = Σ_{k ∈ range z} RN_CT(A[m, k]) · B[i, k]  (B r×K in CT, i < RP)
 *
 * The summation index is permuted inside each 32-wide k chunk so that a thread's A fragments
 * for both k16 steps are the 8 consecutive elements 8t … 8t+7 of its rows g and g+8 (slot
 * 2t + 8h + e of step s ↔ k offset 8t + 4s + 2h + e): one 16-byte load per row and chunk (two
 * for fp32 A, rounded to CT in registers), and the same permutation on B (one 16-byte load per
 * n8 tile). A block's 4 warps own 32 rows each and walk the same k range z chunk by chunk (so
 * their B loads hit L1), two chunk buffers in turn (chunk c+1 in flight while c is multiplied),
 * and write their own rows' partials. copyA (bypass backward's dy0 = RN(dy), in CT): every A element is loaded by
 * exactly one thread, which also stores it there.
 * ------------------------------------------------------------------------------------------- */
const int RW = 4;  /* warps per reduce block */
const int RMT = 2; /* m16 tiles per warp */

template <int NI> struct rs_chunk {
    uint4 x[RMT][2];
    uint4 d[NI];
};

/* 8 elements (row, k..k+7) of a view as CT pairs (zero past kend; k a multiple of 8). */
template <typename CT, bool F32>
__device__ __forceinline__ uint4 rs_load8(const lk_view &v, i64 row, i64 k, i64 kend) {
    if (k + 8 <= kend) { /* row-major (s1 = 1): the element size is the template's */
        const char *p = (const char *)v.p + (row * v.s0 + k) * (F32 ? 4 : 2);
        if (!F32) return *(const uint4 *)p;
        const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 16);
        return make_uint4(pack2<CT>(a.x, a.y), pack2<CT>(a.z, a.w), pack2<CT>(b.x, b.y), pack2<CT>(b.z, b.w));
    }
    float e[8];
#pragma unroll
    for (int c = 0; c < 8; c++) e[c] = k + c < kend ? vload(v, row, k + c) : 0.0f;
    return make_uint4(pack2<CT>(e[0], e[1]), pack2<CT>(e[2], e[3]), pack2<CT>(e[4], e[5]), pack2<CT>(e[6], e[7]));
}

template <typename CT, int NI, bool AF32>
__device__ __forceinline__ void rs_load(const lk_view &A, const lk_view &B, const lk_view &copyA, i64 M, i64 r, i64 m0, i64 k,
                                        i64 kend, rs_chunk<NI> &c) {
    const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
    for (int mt = 0; mt < RMT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const i64 row = m0 + mt * 16 + g + 8 * h;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (row < M && k < kend) {
                v = rs_load8<CT, AF32>(A, row, k, kend);
                if (copyA.p) {
                    if (k + 8 <= kend) {
                        *(uint4 *)((char *)copyA.p + (row * copyA.s0 + k) * 2) = v;
                    } else {
                        const unsigned w[4] = {v.x, v.y, v.z, v.w};
                        for (int e = 0; k + e < kend; e++) vstore(copyA, row, k + e, (e & 1) ? hi16<CT>(w[e >> 1]) : lo16<CT>(w[e >> 1]));
                    }
                }
            }
            c.x[mt][h] = v;
        }
#pragma unroll
    for (int j = 0; j < NI; j++) {
        const i64 n = j * 8 + g;
        c.d[j] = n < r && k < kend ? rs_load8<CT, false>(B, n, k, kend) : make_uint4(0u, 0u, 0u, 0u);
    }
}

template <typename CT, int NI> __device__ __forceinline__ void rs_mma(float (&acc)[RMT][NI][4], const rs_chunk<NI> &c) {
#pragma unroll
    for (int s = 0; s < 2; s++) {
#pragma unroll
        for (int mt = 0; mt < RMT; mt++) {
            const unsigned x0[4] = {c.x[mt][0].x, c.x[mt][0].y, c.x[mt][0].z, c.x[mt][0].w};
            const unsigned x1[4] = {c.x[mt][1].x, c.x[mt][1].y, c.x[mt][1].z, c.x[mt][1].w};
            const unsigned a[4] = {x0[2 * s], x1[2 * s], x0[2 * s + 1], x1[2 * s + 1]};
#pragma unroll
            for (int j = 0; j < NI; j++) {
                const unsigned d[4] = {c.d[j].x, c.d[j].y, c.d[j].z, c.d[j].w};
                const unsigned b[2] = {d[2 * s], d[2 * s + 1]};
                mma16816<CT>(acc[mt][j], a, b);
            }
        }
    }
}

template <typename CT, int NI, bool AF32>
__global__ __launch_bounds__(RW * 32) void k_reduce_stream(lk_view A, lk_view B, lk_view copyA, i64 M, i64 K, i64 r, i64 kper,
                                                           float *part) {
    const int RPn = NI * 8;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const i64 m0 = ((i64)blockIdx.x * RW + warp) * 16 * RMT, z = blockIdx.y;
    const i64 kb0 = z * kper, kb1 = kb0 + kper < K ? kb0 + kper : K;
    const i64 nc = kb1 > kb0 ? cdiv(kb1 - kb0, 32) : 0;
    float acc[RMT][NI][4];
    acc_zero(acc);
    rs_chunk<NI> c0, c1; /* used in turn, no copies (see k_expand_stream) */
    if (nc > 0) rs_load<CT, NI, AF32>(A, B, copyA, M, r, m0, kb0 + 8 * t, kb1, c0);
    if (nc > 1) rs_load<CT, NI, AF32>(A, B, copyA, M, r, m0, kb0 + 32 + 8 * t, kb1, c1);
    for (i64 c = 0; c < nc; c += 2) {
        rs_mma<CT, NI>(acc, c0);
        if (c + 2 < nc) rs_load<CT, NI, AF32>(A, B, copyA, M, r, m0, kb0 + (c + 2) * 32 + 8 * t, kb1, c0);
        if (c + 1 >= nc) break;
        rs_mma<CT, NI>(acc, c1);
        if (c + 3 < nc) rs_load<CT, NI, AF32>(A, B, copyA, M, r, m0, kb0 + (c + 3) * 32 + 8 * t, kb1, c1);
    }
#pragma unroll
    for (int mt = 0; mt < RMT; mt++)
#pragma unroll
        for (int j = 0; j < NI; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const i64 m = m0 + mt * 16 + g + 8 * h;
                if (m < M) *(float2 *)(part + (z * M + m) * RPn + j * 8 + 2 * t) = make_float2(acc[mt][j][2 * h], acc[mt][j][2 * h + 1]);
            }
}

template <typename CT, int NI, bool AF32>
int rs_launch(const lk_view *A, const lk_view *B, const lk_view *copyA, i64 M, i64 K, i64 r, float **part, i64 *Zout,
              const lk_device *dev, cudaStream_t s) {
    const int RPn = NI * 8;
    const i64 bx = cdiv(M, 16 * RMT * RW);
    int per = 0;
    LK_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_reduce_stream<CT, NI, AF32>, RW * 32, 0));
    if (per < 1) per = 1;
    /* enough k ranges to fill the resident blocks, each range ≥ 4 chunks of 32 */
    i64 Z = cdiv((i64)per * dev->sms, bx);
    const i64 zmax = K > 0 ? cdiv(K, 4 * 32) : 1;
    if (Z > zmax) Z = zmax;
    if (Z > 64) Z = 64;
    if (Z < 1) Z = 1;
    const i64 kper = K > 0 ? cdiv(cdiv(K, Z), 32) * 32 : 32;
    Z = K > 0 ? cdiv(K, kper) : 1;
    int rc = lk_scratch_alloc((void **)part, (size_t)(Z * M * RPn) * sizeof(float), s);
    if (rc) return rc;
    *Zout = Z;
    lk_view none;
    memset(&none, 0, sizeof none);
    k_reduce_stream<CT, NI, AF32><<<dim3((unsigned)bx, (unsigned)Z), RW * 32, 0, s>>>(*A, *B, copyA ? *copyA : none, M, K, r, kper, *part);
    LK_LAUNCHED("reduce_stream");
    return LYCO_OK;
}

/* ---------------------------------------------------------------------------------------------
 * column reduction: part[z][n][i] = Σ_{m ∈ range z} RN_CT(A[m, n]) · Bp[m, i]   (A M×N, the big
 * operand; B M×r, given to the kernel transposed as Bt[p][i][m], p < NPB parts of fp32 B)
 *
 * The mma's rows are A's columns: a thread loads 16 bytes of A (columns 8t … 8t+7 of its token
 * rows g and g+8), and movmatrix.trans turns each 32-bit pair q of such a load into the A
 * fragment of an 8×8 block — whose row c is column 8·(c>>1) + 2q + (c&1) of the warp's 32-column
 * group (a permutation of the output rows, undone when the partials are written). B comes from
 * the transposed copy as 32-bit token pairs. A block's 4 warps take the same 32 columns and
 * consecutive sub-ranges of the tokens of range z, and sum their accumulators in warp order
 * through shared memory.
 * ------------------------------------------------------------------------------------------- */
const int CW = 4; /* warps per column-reduction block */

__device__ __forceinline__ unsigned movtrans(unsigned v) {
    unsigned d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(v));
    return d;
}

template <int NI, int NPB> struct cs_step {
    uint4 x[2];          /* tokens m0+g, m0+8+g; columns 8t … 8t+7 (CT pairs) */
    unsigned b[NPB][NI][2];
};

template <typename CT, int NI, int NPB, bool AF32>
__device__ __forceinline__ void cs_load(const lk_view &A, const CT *Bt, i64 Mp, i64 M, i64 N, i64 r, i64 n0, i64 m0,
                                        cs_step<NI, NPB> &c) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const i64 col = n0 + 8 * t;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const i64 m = m0 + g + 8 * h;
        c.x[h] = m < M && col < N ? rs_load8<CT, AF32>(A, m, col, N) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int p = 0; p < NPB; p++)
#pragma unroll
        for (int j = 0; j < NI; j++) {
            const i64 i = j * 8 + g;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const i64 m = m0 + 8 * h + 2 * t; /* even; Bt rows are Mp ≥ M wide, zero past M */
                c.b[p][j][h] = i < r && m < M ? *(const unsigned *)(Bt + ((i64)p * r + i) * Mp + m) : 0u;
            }
        }
}

template <typename CT, int NI, int NPB>
__device__ __forceinline__ void cs_mma(float (&acc)[2][NI][4], const cs_step<NI, NPB> &c) {
    const unsigned x0[4] = {c.x[0].x, c.x[0].y, c.x[0].z, c.x[0].w};
    const unsigned x1[4] = {c.x[1].x, c.x[1].y, c.x[1].z, c.x[1].w};
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
        const unsigned a[4] = {movtrans(x0[2 * mt]), movtrans(x0[2 * mt + 1]), movtrans(x1[2 * mt]), movtrans(x1[2 * mt + 1])};
#pragma unroll
        for (int p = NPB - 1; p >= 0; p--)
#pragma unroll
            for (int j = 0; j < NI; j++) mma16816<CT>(acc[mt][j], a, c.b[p][j]);
    }
}

template <typename CT, int NI, int NPB, bool AF32>
__global__ __launch_bounds__(CW * 32) void k_colreduce_stream(lk_view A, const CT *Bt, i64 Mp, i64 M, i64 N, i64 r, i64 mper,
                                                              float *part) {
    const int RPn = NI * 8;
    __shared__ float red[CW][32][NI * 8];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const i64 n0 = (i64)blockIdx.x * 32, z = blockIdx.y;
    const i64 mb0 = z * mper, mb1 = mb0 + mper < M ? mb0 + mper : M;
    const i64 ns = mb1 > mb0 ? cdiv(mb1 - mb0, 16) : 0;
    const i64 q0 = ns * warp / CW, q1 = ns * (warp + 1) / CW;
    float acc[2][NI][4];
    acc_zero(acc);
    cs_step<NI, NPB> c0, c1; /* used in turn, no copies (see k_expand_stream) */
    if (q0 < q1) cs_load<CT, NI, NPB, AF32>(A, Bt, Mp, mb1, N, r, n0, mb0 + q0 * 16, c0);
    if (q0 + 1 < q1) cs_load<CT, NI, NPB, AF32>(A, Bt, Mp, mb1, N, r, n0, mb0 + (q0 + 1) * 16, c1);
    for (i64 q = q0; q < q1; q += 2) {
        cs_mma<CT, NI, NPB>(acc, c0);
        if (q + 2 < q1) cs_load<CT, NI, NPB, AF32>(A, Bt, Mp, mb1, N, r, n0, mb0 + (q + 2) * 16, c0);
        if (q + 1 >= q1) break;
        cs_mma<CT, NI, NPB>(acc, c1);
        if (q + 3 < q1) cs_load<CT, NI, NPB, AF32>(A, Bt, Mp, mb1, N, r, n0, mb0 + (q + 3) * 16, c1);
    }
    /* accumulator (mt, j, e): row c = g + 8(e>>1) of pair q = 2mt + (e>>1) → column 8(g>>1) + 2q + (g&1) */
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int j = 0; j < NI; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int q = 2 * mt + (e >> 1);
                red[warp][8 * (g >> 1) + 2 * q + (g & 1)][j * 8 + 2 * t + (e & 1)] = acc[mt][j][e];
            }
    __syncthreads();
    for (int idx = threadIdx.x; idx < 32 * RPn; idx += CW * 32) {
        const int cc = idx / RPn, i = idx % RPn;
        const i64 n = n0 + cc;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < CW; w++) v += red[w][cc][i];
        if (n < N) part[(z * N + n) * RPn + i] = v;
    }
}

/* Bt[p][i][m] = part p of B[m][i] (i < r; m < Mp, zero past M). */
template <typename CT, int NPB> __global__ __launch_bounds__(NT) void k_cs_transpose(lk_view B, i64 M, i64 Mp, i64 r, CT *Bt) {
    const i64 n = r * Mp;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n; idx += (i64)gridDim.x * NT) {
        const i64 i = idx / Mp, m = idx % Mp;
        const float v = m < M ? vload(B, m, i) : 0.0f;
#pragma unroll
        for (int p = 0; p < NPB; p++) Bt[(i64)p * n + idx] = ct_of<CT>::from(split_part<CT>(v, p));
    }
}

template <typename CT, int NI, int NPB, bool AF32>
int cs_launch(const lk_view *A, const lk_view *B, i64 M, i64 N, i64 r, float **part, i64 *Zout, const lk_device *dev, cudaStream_t s) {
    const int RPn = NI * 8;
    const i64 Mp = cdiv(M, 8) * 8, bx = cdiv(N, 32);
    int per = 0;
    LK_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_colreduce_stream<CT, NI, NPB, AF32>, CW * 32, 0));
    if (per < 1) per = 1;
    /* enough token ranges to fill the resident blocks, each ≥ 4 steps of 16 per warp */
    i64 Z = cdiv((i64)per * dev->sms, bx);
    const i64 zmax = M > 0 ? cdiv(M, 4 * 16 * CW) : 1;
    if (Z > zmax) Z = zmax;
    if (Z > 64) Z = 64;
    if (Z < 1) Z = 1;
    const i64 mper = M > 0 ? cdiv(cdiv(M, Z), 16) * 16 : 16;
    Z = M > 0 ? cdiv(M, mper) : 1;
    CT *bt = NULL;
    int rc = lk_scratch_alloc((void **)&bt, (size_t)(NPB * r * Mp) * sizeof(CT), s);
    if (rc) return rc;
    rc = lk_scratch_alloc((void **)part, (size_t)(Z * N * RPn) * sizeof(float), s);
    if (rc == LYCO_OK) {
        *Zout = Z;
        i64 tb = cdiv(r * Mp, NT);
        if (tb > 4096) tb = 4096;
        k_cs_transpose<CT, NPB><<<(unsigned)(tb > 0 ? tb : 1), NT, 0, s>>>(*B, M, Mp, r, bt);
        cudaError_t e = cudaGetLastError();
        if (e == cudaSuccess) {
            k_colreduce_stream<CT, NI, NPB, AF32><<<dim3((unsigned)bx, (unsigned)Z), CW * 32, 0, s>>>(*A, bt, Mp, M, N, r, mper, *part);
            e = cudaGetLastError();
        }
        if (e != cudaSuccess) rc = lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of colreduce_stream failed: %s", cudaGetErrorString(e));
    }
    const int rf = lk_scratch_free(bt, s);
    return rc ? rc : rf;
}

template <typename CT, int NPB, bool AF32>
int cs_launch_rp(const lk_view *A, const lk_view *B, i64 M, i64 N, i64 r, i64 rp, float **part, i64 *Z, const lk_device *dev,
                 cudaStream_t s) {
    return rp == 16 ? cs_launch<CT, 2, NPB, AF32>(A, B, M, N, r, part, Z, dev, s) : cs_launch<CT, 4, NPB, AF32>(A, B, M, N, r, part, Z, dev, s);
}

template <typename CT, bool AF32>
int cs_launch_np(const lk_view *A, const lk_view *B, int b_split, i64 M, i64 N, i64 r, i64 rp, float **part, i64 *Z,
                 const lk_device *dev, cudaStream_t s) {
    return b_split ? cs_launch_rp<CT, nsplit<CT>::n, AF32>(A, B, M, N, r, rp, part, Z, dev, s)
                   : cs_launch_rp<CT, 1, AF32>(A, B, M, N, r, rp, part, Z, dev, s);
}

template <typename CT, bool AF32>
int rs_launch_rp(const lk_view *A, const lk_view *B, const lk_view *copyA, i64 M, i64 K, i64 rp, float **part, i64 *Z,
                 const lk_device *dev, cudaStream_t s) {
    return rp == 16 ? rs_launch<CT, 2, AF32>(A, B, copyA, M, K, B->rows, part, Z, dev, s)
                    : rs_launch<CT, 4, AF32>(A, B, copyA, M, K, B->rows, part, Z, dev, s);
}

} // namespace

extern "C" int lk_expand_stream_fits(const lk_expand_args *a) {
    if (!stream_on()) return 0;
    const int ct = a->ct;
    if (ct != DT_BF16 && ct != DT_F16) return 0;
    if (a->r < 1 || lk_reduce_rank_tile(a->r) == 0) return 0;
    if (a->P.dt != (a->p_split ? DT_F32 : ct) || a->Q.dt != ct) return 0;
    if (a->p_split && (a->q_t || a->dora.on || a->r > 64)) return 0; /* r > 64 in parts: 255 registers, spills */
    if (a->dora.on && (!a->dora.on_out || a->q_t)) return 0;
    const bool stats = a->stat_part != NULL || a->out.p == NULL; /* out absent: the stats mode's args */
    if (stats && !a->dora.on) return 0;
    if (!stats && (a->out.dt != ct || !row_major_vec(a->out))) return 0;
    if (a->base.p && (a->base.dt != ct || !row_major_vec(a->base))) return 0;
    return 1;
}

extern "C" int64_t lk_expand_stream_stat_tiles(const lk_expand_args *a) { return cdiv(a->N, XN) * XW; }

extern "C" int lk_expand_stream(const lk_expand_args *a, const lk_device *dev, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (!lk_expand_stream_fits(a)) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: streaming expand called outside its limits");
    if (a->M == 0 || a->N == 0) return LYCO_OK;
    return a->ct == DT_BF16 ? xs_launch_ct<bf16_t>(a, dev, s) : xs_launch_ct<f16_t>(a, dev, s);
}

extern "C" int lk_reduce_stream_fits(int32_t ct, const lk_view *A, const lk_view *B, const lk_view *copyA, int64_t K, int64_t rp) {
    if (!stream_on()) return 0;
    if ((ct != DT_BF16 && ct != DT_F16) || (rp != 16 && rp != 32) || K % 8 != 0) return 0;
    if (!row_major_vec(*A) || (A->dt != ct && A->dt != DT_F32)) return 0;
    if (!row_major_vec(*B) || B->dt != ct || B->rows > rp || B->cols < K) return 0;
    if (copyA && copyA->p && (copyA->dt != ct || !row_major_vec(*copyA))) return 0;
    return 1;
}

extern "C" int lk_reduce_stream_parts(int32_t ct, const lk_view *A, const lk_view *B, const lk_view *copyA, int64_t M, int64_t K,
                                      int64_t rp, float **part, int64_t *Z, const lk_device *dev, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    *part = NULL;
    *Z = 0;
    if (!lk_reduce_stream_fits(ct, A, B, copyA, K, rp)) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: streaming reduction called outside its limits");
    if (cdiv(M, 16 * RMT * RW) > 2147483647LL) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: %lld rows exceed the reduction grid", (long long)M);
    const bool f32 = A->dt == DT_F32;
    i64 z = 0;
    int rc;
    if (ct == DT_BF16) rc = f32 ? rs_launch_rp<bf16_t, true>(A, B, copyA, M, K, rp, part, &z, dev, s)
                                : rs_launch_rp<bf16_t, false>(A, B, copyA, M, K, rp, part, &z, dev, s);
    else rc = f32 ? rs_launch_rp<f16_t, true>(A, B, copyA, M, K, rp, part, &z, dev, s)
                  : rs_launch_rp<f16_t, false>(A, B, copyA, M, K, rp, part, &z, dev, s);
    *Z = z;
    return rc;
}

extern "C" int lk_colreduce_stream_fits(int32_t ct, const lk_view *A, const lk_view *B, int b_split, int64_t rp) {
    if (!stream_on()) return 0;
    if ((ct != DT_BF16 && ct != DT_F16) || (rp != 16 && rp != 32)) return 0;
    if (!row_major_vec(*A) || (A->dt != ct && A->dt != DT_F32) || A->cols % 8 != 0) return 0;
    if (b_split ? B->dt != DT_F32 : B->dt != ct) return 0;
    return 1;
}

extern "C" int lk_colreduce_stream_parts(int32_t ct, const lk_view *A, const lk_view *B, int b_split, int64_t M, int64_t N, int64_t r,
                                         int64_t rp, float **part, int64_t *Z, const lk_device *dev, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    *part = NULL;
    *Z = 0;
    if (!lk_colreduce_stream_fits(ct, A, B, b_split, rp) || r > rp)
        return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: streaming column reduction called outside its limits");
    if (cdiv(N, 32) > 2147483647LL) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: %lld columns exceed the reduction grid", (long long)N);
    const bool f32 = A->dt == DT_F32;
    i64 z = 0;
    int rc;
    if (ct == DT_BF16) rc = f32 ? cs_launch_np<bf16_t, true>(A, B, b_split, M, N, r, rp, part, &z, dev, s)
                                : cs_launch_np<bf16_t, false>(A, B, b_split, M, N, r, rp, part, &z, dev, s);
    else rc = f32 ? cs_launch_np<f16_t, true>(A, B, b_split, M, N, r, rp, part, &z, dev, s)
                  : cs_launch_np<f16_t, false>(A, B, b_split, M, N, r, rp, part, &z, dev, s);
    *Z = z;
    return rc;
}
