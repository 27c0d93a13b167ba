/*
 * merge_ep.cuh — the merge-side epilogue shared by every additive algorithm (LoCon now; LoHa and
 * LoKr plug in their ΔW tile producer, see locon_delta.cuh), and DoRA (ALGORITHMS.md §1.6).
 *
 * Inputs of the epilogue, per element (o, j) of W̄ (O × I·K): w = RN_CT(W[o, j]) and
 * dw = the producer's fp32 dW (s, σs, row mask applied; not m). All arithmetic is fp32, rounded
 * once to the output dtype.
 *
 *   plain:  E = m·dw;  out = w + E (weight), E (delta), w − E (unmerge)        [one FMA]
 *   DoRA:   V = w + dw,  n_k = ‖V‖_k + ε,  f_k = d_k / n_k  (m ≠ 1: f_k = 1 + m·(d_k − n_k)/n_k)
 *           out = V·f_k (weight),  E = w·(f_k − 1) + dw·f_k (delta; the cancellation-free form)
 *
 * k = o (norm per output row) or j / K (per input channel, kernel positions folded in).
 *
 * DoRA statistics, two passes, deterministic, no atomics:
 *   pass 1 (templated on the producer): per row (out axis: block = 32 rows, sweeping a chunk of
 *     the columns in 64-wide tiles) or per column (in axis: block = 32 columns, sweeping a chunk
 *     of the rows in 64-high tiles) — partial Σ V² and, backward, Σ G·V per chunk, in fp32 with a
 *     fixed reduction order. The swept axis is split into Z chunks (grid.y; dora_split: ≥ 512
 *     blocks where the shape allows, a function of the shape only) — one block per 32 rows left a
 *     4096-row LoHa layer with 128 blocks on 132 SMs, latency-bound (545 µs of the H200's LoHa
 *     DoRA bypass forward);
 *   pass 2 (dora.cu, lk_dora_finish_parts): per kept index k, sums the Z partials and the K
 *     columns of a channel in order and writes st[k] = {f_k, f_k − 1, γ_k} with γ_k = m·d_k·S_k / (n_k²·‖V‖_k), and
 *     ∂L/∂d_k = m·S_k / n_k.
 * Backward source (GV = ∂L/∂V, what the LoCon backward contracts with its factors):
 *   GV = RN_CT(g·f_k − γ_k·V)   (g = RN_CT(∂L/∂W''); rounded as the eager chain stores it)
 * The only cached values are these per-index fp32 statistics (3 floats per kept index, plus
 * 2·Z fp32 partial sums per row or column) in scratch: dora_ws_floats.
 */
#ifndef LYCO_CUDA_MERGE_EP_CUH
#define LYCO_CUDA_MERGE_EP_CUH

#include "cuda/common.cuh"

extern "C" int lk_dora_finish(const lk_dora *dr, const float *ss, const float *sg, int64_t kept, int64_t per,
                              double m, int32_t ct, float *stats, void *stream);
extern "C" int lk_dora_finish_parts(const lk_dora *dr, const float *ss, const float *sg, int64_t nparts, int64_t n, int64_t kept,
                                    int64_t per, double m, int32_t ct, float *stats, void *stream);

__device__ __forceinline__ i64 dora_kept(const lk_dora &dr, i64 o, i64 j, i64 K) { return dr.on_out ? o : j / K; }

/* One output element of the merge forward. st: the DoRA statistics of its kept index. */
__device__ __forceinline__ float merge_elem(float w, float dw, int mode, float mf, bool dora, const float *st) {
    if (dora) {
        if (mode == 0) return (w + dw) * st[0];
        return fmaf(w, st[1], dw * st[0]);
    }
    if (mode == 0) return fmaf(mf, dw, w);
    if (mode == 1) return mf * dw;
    return fmaf(-mf, dw, w);
}

/* The statistics of kept index k from s2 = Σ V² (dora.cu's k_dora_finish, dora_slab.cu's one-pass
   merge): ‖V‖ = sqrt(s2), n = ‖V‖ + ε, d = RN_CT(dora_scale[k]), f = d / n, f − 1 = (d − n) / n,
   and with m ≠ 1: f − 1 = m·(f − 1), f = 1 + (f − 1). */
struct dora_fk {
    float nrm, n, d, f, fm1;
};
__device__ __forceinline__ dora_fk dora_f_of(const lk_dora &dr, float s2, i64 k, float mf, int m_is_one, int ct) {
    dora_fk r;
    r.nrm = sqrtf(s2);
    r.n = r.nrm + (float)dr.eps;
    r.d = round_to(vload(dr.d, 0, k), ct);
    r.f = r.d / r.n;
    r.fm1 = (r.d - r.n) / r.n;
    if (!m_is_one) {
        r.fm1 = mf * r.fm1;
        r.f = 1.0f + r.fm1;
    }
    return r;
}

/* ∂L/∂V for one element (g, w already in CT), rounded to the compute dtype ct: the eager chain
   stores this gradient in the storage dtype before its contractions with the factors, and so do
   the fused kernels (NUMERICS.md §1.6; docs/numerics.md lists the rounding points). */
__device__ __forceinline__ float dora_gv(float g, float w, float dw, const float *st, int ct) {
    float V = w + dw;
    return round_to(fmaf(g, st[0], -st[2] * V), ct);
}

/* Split of pass 1's swept axis: blocks along the other axis, tiles (64 wide) along the swept one;
   returns the tiles per chunk (Z = ⌈tiles / per⌉ chunks). */
static inline i64 dora_split(i64 blocks, i64 tiles) {
    i64 z = cdiv(512, blocks > 0 ? blocks : 1);
    if (z > cdiv(tiles, 2)) z = cdiv(tiles, 2);
    if (z > 64) z = 64;
    if (z < 1) z = 1;
    return cdiv(tiles > 0 ? tiles : 1, z);
}
/* pass 1's geometry for an O × IK layer: n sums per chunk, Z chunks of per tiles */
struct dora_plan {
    i64 n, kept, per_tiles, Z;
};
static inline dora_plan dora_plan_of(i64 O, i64 IK, i64 K, bool on_out) {
    dora_plan p;
    p.n = on_out ? O : IK;
    p.kept = on_out ? O : IK / K;
    const i64 tiles = on_out ? cdiv(IK, 64) : cdiv(O, 64);
    p.per_tiles = dora_split(cdiv(p.n, 32), tiles);
    p.Z = cdiv(tiles > 0 ? tiles : 1, p.per_tiles);
    return p;
}
/* scratch floats of dora_stats: 2·Z partial sums per row / column, 3 statistics per kept index */
static inline i64 dora_ws_floats(i64 O, i64 IK, i64 K, bool on_out) {
    const dora_plan p = dora_plan_of(O, IK, K, on_out);
    return 2 * p.Z * p.n + 3 * p.kept;
}

/* ---- pass 1: Σ V² (and Σ G·V) per row, over columns [blockIdx.y·jper, …) ---- */
template <typename CT, template <typename, int, int, int> class PROD>
__global__ __launch_bounds__(NT) void k_dora_rows(typename PROD<CT, 32, 64, 2>::args_t A, lk_view W, lk_view G, i64 jper,
                                                  float *ss_out, float *sg_out) {
    typedef PROD<CT, 32, 64, 2> P;
    __shared__ __align__(16) char smem[P::SMEM_IN > P::SMEM_C ? P::SMEM_IN : P::SMEM_C];
    __shared__ float rowc[32];
    CT *sU = (CT *)smem, *sD = (CT *)(smem + P::SMEM_U);
    float *Cs = (float *)smem;
    const i64 o0 = (i64)blockIdx.x * 32;
    const int rr = threadIdx.x / 8, cc = (threadIdx.x % 8) * 8;
    const float sig = sigma_ct<CT>(A.sigma);
    float ss = 0.0f, sg = 0.0f;
    const i64 jb = (i64)blockIdx.y * jper, je = jb + jper < A.IK ? jb + jper : A.IK;
    ss_out += (i64)blockIdx.y * A.O;
    if (sg_out) sg_out += (i64)blockIdx.y * A.O;
    for (i64 j0 = jb; j0 < je; j0 += 64) {
        float w[8], g[8];
        vload8(w, W, o0 + rr, j0 + cc);
        if (G.p) vload8(g, G, o0 + rr, j0 + cc);
        P::run(A, o0, j0, sU, sD, Cs, rowc, sig);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            float V = rnd_ct<CT>(w[e]) + Cs[rr * P::LDC + cc + e];
            ss = fmaf(V, V, ss);
            if (G.p) sg = fmaf(rnd_ct<CT>(g[e]), V, sg);
        }
    }
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) {
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
        sg += __shfl_xor_sync(0xffffffffu, sg, o);
    }
    if ((threadIdx.x & 7) == 0 && o0 + rr < A.O) {
        ss_out[o0 + rr] = ss;
        if (sg_out) sg_out[o0 + rr] = sg;
    }
}

/* ---- pass 1: Σ V² (and Σ G·V) per column, over rows [blockIdx.y·oper, …) ---- */
template <typename CT, template <typename, int, int, int> class PROD>
__global__ __launch_bounds__(NT) void k_dora_cols(typename PROD<CT, 64, 32, 4>::args_t A, lk_view W, lk_view G, i64 oper,
                                                  float *ss_out, float *sg_out) {
    typedef PROD<CT, 64, 32, 4> P;
    __shared__ __align__(16) char smem[P::SMEM_IN > P::SMEM_C ? P::SMEM_IN : P::SMEM_C];
    __shared__ float rowc[64];
    __shared__ float red[2][8][32];
    CT *sU = (CT *)smem, *sD = (CT *)(smem + P::SMEM_U);
    float *Cs = (float *)smem;
    const i64 j0 = (i64)blockIdx.x * 32;
    const int col = threadIdx.x % 32, rg = threadIdx.x / 32;
    const i64 j = j0 + col;
    const float sig = sigma_ct<CT>(A.sigma);
    float ss = 0.0f, sg = 0.0f;
    const i64 ob = (i64)blockIdx.y * oper, oe = ob + oper < A.O ? ob + oper : A.O;
    ss_out += (i64)blockIdx.y * A.IK;
    if (sg_out) sg_out += (i64)blockIdx.y * A.IK;
    for (i64 o0 = ob; o0 < oe; o0 += 64) {
        float w[8], g[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            i64 o = o0 + rg + 8 * k;
            bool in = o < A.O && j < A.IK;
            w[k] = in ? vload(W, o, j) : 0.0f;
            g[k] = in && G.p ? vload(G, o, j) : 0.0f;
        }
        P::run(A, o0, j0, sU, sD, Cs, rowc, sig);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float V = rnd_ct<CT>(w[k]) + Cs[(rg + 8 * k) * P::LDC + col];
            ss = fmaf(V, V, ss);
            sg = fmaf(rnd_ct<CT>(g[k]), V, sg);
        }
    }
    red[0][rg][col] = ss;
    red[1][rg][col] = sg;
    __syncthreads();
    if (threadIdx.x < 32 && j < A.IK) {
        float a = 0.0f, b = 0.0f;
        for (int k = 0; k < 8; k++) {
            a += red[0][k][threadIdx.x];
            b += red[1][k][threadIdx.x];
        }
        ss_out[j] = a;
        if (sg_out) sg_out[j] = b;
    }
}

/* Host: both passes. ws must hold dora_ws_floats(A.O, A.IK, A.K, dr.on_out) floats.
   On return *st (inside ws) holds the statistics. */
template <typename CT, template <typename, int, int, int> class PROD>
static int dora_stats(const typename PROD<CT, 32, 64, 2>::args_t &A, const lk_dora &dr, const lk_view &W,
                      const lk_view &G, float *ws, float **st, cudaStream_t stream) {
    const dora_plan p = dora_plan_of(A.O, A.IK, A.K, dr.on_out);
    float *ss = ws, *sg = G.p ? ws + p.Z * p.n : NULL;
    *st = ws + 2 * p.Z * p.n;
    if (dr.on_out) {
        k_dora_rows<CT, PROD><<<dim3((unsigned)cdiv(A.O, 32), (unsigned)p.Z), NT, 0, stream>>>(A, W, G, 64 * p.per_tiles, ss, sg);
        LK_LAUNCHED("dora_rows");
    } else {
        k_dora_cols<CT, PROD><<<dim3((unsigned)cdiv(A.IK, 32), (unsigned)p.Z), NT, 0, stream>>>(A, W, G, 64 * p.per_tiles, ss, sg);
        LK_LAUNCHED("dora_cols");
    }
    return lk_dora_finish_parts(&dr, ss, sg, p.Z, p.n, p.kept, dr.on_out ? 1 : A.K, A.m, A.ct, *st, stream);
}

#endif
