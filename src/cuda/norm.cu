/*
 * norm.cu — Norm (train_norm) bypass on the CUDA backend (ALGORITHMS.md §2.10; formulas in
 * kern_simple.h, lk_norm_args):
 *
 *   fwd  y  = y0 + x̂ ⊙ (m·q·w_norm) + m·q·b_norm,  x̂ = (x − μ)·rstd, rstd = 1/√(σ² + ε)
 *   bwd  dx = rstd·(h − mean(h) − x̂·mean(h·x̂)),  h = dy·m·q·w_norm;  dy0 = dy (DELTA_ONLY: 0);
 *        (μ, rstd) per group into `stats` for the parameter sums (ew.cu, lk_chan_sum).
 *
 * Groups: LayerNorm — one token row of the tokens × C view (channel = column); GroupNorm — cg
 * consecutive rows of the (N·C) × sp view (channel = row mod C). One block per group
 * (grid-stride over groups); the group is read in 8-element chunks per thread (16-byte loads
 * where the view has LK_VEC) once per pass: mean, biased variance of (x − μ) (two passes, as the
 * oracle), then the output pass (re-reads hit L1/L2 for groups up to a few hundred KB).
 * Statistics and sums in fp32 with fixed-order block reductions (deterministic).
 * Extra memory: none (stats: 2 floats per group, allocated by the dispatcher).
 * Measured on the H200 (8192 tokens × C 4096, bf16): fwd 254 µs (5.3× the bench's floor), bwd
 * 550 µs. Tried at d5c913c: LayerNorm rows held in registers (x and dy read once, factors 8 at a
 * time, the same sums): 280 / 567 µs — slower: 100–128 registers leave 2 blocks (one row each) per
 * SM to hide a row's chain of load → two block reductions → output. Removed; next: several rows
 * per block (a warp or a few warps per row) so more rows are in flight.
 */
#include "cuda/common.cuh"
#include "cuda/kern_simple.h"

#define NORM_MAX_BLOCKS 65536

struct ngeo {
    i64 nrg, cpr, nchunks, len;
};

__device__ __forceinline__ ngeo norm_geo(const lk_norm_args &a) {
    ngeo g;
    g.nrg = a.group ? a.cg : 1;
    g.cpr = cdiv(a.x.cols, 8);
    g.nchunks = g.nrg * g.cpr;
    g.len = g.nrg * a.x.cols;
    return g;
}

__device__ __forceinline__ i64 norm_ch(const lk_norm_args &a, i64 r, i64 c) { return a.group ? r % a.C : c; }

/* m·q[ch]·w_norm[ch] and m·q[ch]·b_norm[ch] */
__device__ __forceinline__ float norm_gamma(const lk_norm_args &a, i64 ch) {
    return (float)a.m * (vget(a.q, ch, 1.0f) * round_to(vload(a.wn, 0, ch), a.ct));
}
__device__ __forceinline__ float norm_beta(const lk_norm_args &a, i64 ch) {
    return a.bn.p ? (float)a.m * (vget(a.q, ch, 1.0f) * round_to(vload(a.bn, 0, ch), a.ct)) : 0.0f;
}

/* Mean and rstd of group k (two passes), broadcast to every thread. */
__device__ void norm_stats(const lk_norm_args &a, const ngeo &g, i64 row0, float *red, float *bc, float &mu, float &rstd) {
    float s = 0.0f;
    for (i64 q = threadIdx.x; q < g.nchunks; q += NT) {
        const i64 r = row0 + q / g.cpr, c0 = (q % g.cpr) * 8;
        float x[8];
        vload8(x, a.x, r, c0);
#pragma unroll
        for (int e = 0; e < 8; e++)
            if (c0 + e < a.x.cols) s += round_to(x[e], a.ct);
    }
    s = block_sum(s, red);
    if (threadIdx.x == 0) bc[0] = s / (float)g.len;
    __syncthreads();
    mu = bc[0];
    float v = 0.0f;
    for (i64 q = threadIdx.x; q < g.nchunks; q += NT) {
        const i64 r = row0 + q / g.cpr, c0 = (q % g.cpr) * 8;
        float x[8];
        vload8(x, a.x, r, c0);
#pragma unroll
        for (int e = 0; e < 8; e++)
            if (c0 + e < a.x.cols) {
                float d = round_to(x[e], a.ct) - mu;
                v += d * d;
            }
    }
    v = block_sum(v, red);
    if (threadIdx.x == 0) bc[1] = 1.0f / sqrtf(v / (float)g.len + (float)a.eps);
    __syncthreads();
    rstd = bc[1];
}

__global__ __launch_bounds__(NT) void k_norm_fwd(lk_norm_args a) {
    __shared__ float red[NT / 32], bc[2];
    const ngeo g = norm_geo(a);
    for (i64 k = blockIdx.x; k < a.ngroups; k += gridDim.x) {
        const i64 row0 = k * g.nrg;
        float mu, rstd;
        norm_stats(a, g, row0, red, bc, mu, rstd);
        for (i64 q = threadIdx.x; q < g.nchunks; q += NT) {
            const i64 r = row0 + q / g.cpr, c0 = (q % g.cpr) * 8;
            float x[8], y[8];
            vload8(x, a.x, r, c0);
            if (a.y0.p) vload8(y, a.y0, r, c0);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const i64 ch = norm_ch(a, r, c0 + e < a.x.cols ? c0 + e : 0);
                const float base = a.y0.p ? round_to(y[e], a.ct) : 0.0f;
                y[e] = base + ((round_to(x[e], a.ct) - mu) * rstd * norm_gamma(a, ch) + norm_beta(a, ch));
            }
            vstore8(a.y, r, c0, y);
        }
    }
}

__global__ __launch_bounds__(NT) void k_norm_bwd(lk_norm_args a) {
    __shared__ float red[NT / 32], bc[4];
    const ngeo g = norm_geo(a);
    for (i64 k = blockIdx.x; k < a.ngroups; k += gridDim.x) {
        const i64 row0 = k * g.nrg;
        float mu, rstd;
        norm_stats(a, g, row0, red, bc, mu, rstd);
        if (a.stats && threadIdx.x == 0) {
            a.stats[2 * k] = mu;
            a.stats[2 * k + 1] = rstd;
        }
        float sh = 0.0f, shx = 0.0f;
        for (i64 q = threadIdx.x; q < g.nchunks; q += NT) {
            const i64 r = row0 + q / g.cpr, c0 = (q % g.cpr) * 8;
            float x[8], d[8];
            vload8(x, a.x, r, c0);
            vload8(d, a.dy, r, c0);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float dr = round_to(d[e], a.ct);
                d[e] = a.delta_only ? 0.0f : dr;   /* dy0; the gradient through Δ always reads dy */
                if (c0 + e < a.x.cols) {
                    const float h = dr * norm_gamma(a, norm_ch(a, r, c0 + e));
                    const float xh = (round_to(x[e], a.ct) - mu) * rstd;
                    sh += h;
                    shx += h * xh;
                }
            }
            if (a.dy0.p) vstore8(a.dy0, r, c0, d);
        }
        sh = block_sum(sh, red);
        if (threadIdx.x == 0) bc[2] = sh / (float)g.len;
        shx = block_sum(shx, red);
        if (threadIdx.x == 0) bc[3] = shx / (float)g.len;
        __syncthreads();
        const float mh = bc[2], mhx = bc[3];
        if (!a.dx.p) continue;
        for (i64 q = threadIdx.x; q < g.nchunks; q += NT) {
            const i64 r = row0 + q / g.cpr, c0 = (q % g.cpr) * 8;
            float x[8], d[8], o[8];
            vload8(x, a.x, r, c0);
            vload8(d, a.dy, r, c0);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const i64 ch = norm_ch(a, r, c0 + e < a.x.cols ? c0 + e : 0);
                const float h = round_to(d[e], a.ct) * norm_gamma(a, ch);
                const float xh = (round_to(x[e], a.ct) - mu) * rstd;
                o[e] = rstd * (h - mh - xh * mhx);
            }
            vstore8(a.dx, r, c0, o);
        }
    }
}

static unsigned norm_blocks(i64 groups) { return (unsigned)(groups > NORM_MAX_BLOCKS ? NORM_MAX_BLOCKS : groups); }

extern "C" int lk_norm_fwd(const lk_norm_args *a, void *stream) {
    if (!a->y.p || a->ngroups == 0 || a->x.cols == 0) return LYCO_OK;
    k_norm_fwd<<<norm_blocks(a->ngroups), NT, 0, (cudaStream_t)stream>>>(*a);
    LK_LAUNCHED("norm_fwd");
    return LYCO_OK;
}

extern "C" int lk_norm_bwd(const lk_norm_args *a, void *stream) {
    if (a->ngroups == 0 || a->x.cols == 0) return LYCO_OK;
    k_norm_bwd<<<norm_blocks(a->ngroups), NT, 0, (cudaStream_t)stream>>>(*a);
    LK_LAUNCHED("norm_bwd");
    return LYCO_OK;
}
