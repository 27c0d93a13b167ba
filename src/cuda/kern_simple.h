/*
 * kern_simple.h — kernel arguments and launchers of the CUDA backend's memory-bound families
 * (IA3, Full, Norm; ALGORITHMS.md §2.6, §2.9, §2.10), shared by dispatch_ia3.c, dispatch_full.c,
 * dispatch_norm.c and the kernels in ew.cu (elementwise merge/scale, per-channel reductions),
 * conv_direct.cu (the plain products of IA3 input-mode and Full bypass) and norm.cu.
 *
 * Views are kern.h's lk_view (2-D strided, any dtype/alignment). Every loaded operand is rounded
 * to the compute dtype ct in registers (NUMERICS.md §1.2) unless the struct says it is exact
 * (masks, fp32 scratch); accumulation is fp32; every output is rounded once to its own dtype.
 * Launchers are stream-ordered (no host synchronisation) and return lyco_status.
 */
#ifndef LYCO_CUDA_KERN_SIMPLE_H
#define LYCO_CUDA_KERN_SIMPLE_H

#include <stdint.h>

#include "cuda/kern.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elementwise merge over an R×C matrix `out` (8 columns per thread, 16-byte access where LK_VEC):
 *   d(r,c)   = (src_is_W ? W(r,c) : D(r,c), 0 when D is absent) · (vec ? vec(idx) : 1)
 *              idx = vec_on_rows ? r % vec_mod : c / K;   vec rounded to ct unless vec_exact
 *   e        = m · d
 *   out(r,c) = mode WEIGHT: W + e;  DELTA: e;  UNMERGE: W − e   (W absent: 0)
 * Serves IA3 merge (d = W·w), Full merge (d = diff), Norm merge (d = w_norm·q, 1×C), the bias
 * deltas, the plain gradient copies of merge backward (DELTA mode, D = ∂L/∂W''), and IA3's
 * output-mode row map y = y0 + m·(y0·w) (= y0·(1 + m·w)) and dy0 = dy·(1 + m·w).
 * out may alias W (in-place): every element is read and written by the same thread. */
typedef struct {
    lk_view W, D, vec, out;
    int32_t src_is_W, vec_on_rows, vec_exact, mode, ct;
    int64_t K, vec_mod;
    double m;
} lk_ew_args;
int lk_ew_merge(const lk_ew_args *a, void *stream);

/* Per-channel sums, deterministic (fixed-shape fp32 partials in stream-ordered scratch, then a
 * fixed-order finalise):
 *   out[ch] = scale · (vec ? vec[ch] (exact) : 1) · Σ_{(r,c) of channel ch} A(r,c)·B(r,c)
 * by_col: channel of (r, c) = c / K (columns; LayerNorm, linear activations, IA3 input merge);
 * else:   channel of (r, c) = r % nch (rows; conv activations (N·C)×sp, IA3 output merge).
 * B absent = 1. With stats: B(r,c) = (B(r,c) − mu)·rstd, (mu, rstd) = stats[2·(r / rows_per_stat)].
 * A_exact: A is an fp32 intermediate, not rounded to ct. */
typedef struct {
    lk_view A, B;
    const float *stats;
    int64_t rows_per_stat;
    int32_t by_col, A_exact, ct;
    int64_t K, nch;
    lk_view out, vec;
    double scale;
    /* Optional, by_col with K = 1 and A not exact: in the same pass over A, also
       map_out(r,c) = a ⊕ map_m·(a·RN_ct(map_vec[c])), a = RN_ct(A(r,c)), ⊕ by map_mode (lk_ew_merge's
       modes; map_vec absent = 1) — IA3 output mode's dy0 beside its weight gradient. */
    lk_view map_out, map_vec;
    int32_t map_mode;
    double map_m;
} lk_chan_args;
int lk_chan_sum(const lk_chan_args *a, void *stream);

/* Conv (or linear: nd = 0) geometry of the base layer. */
typedef struct {
    int32_t nd;
    int64_t N, I, O, groups;
    int64_t in[3], out[3], k[3], st[3], pad[3], dil[3];
    int64_t spin, spout, K;
} lk_conv_geom;

/* Plain products through the base layer's op with a weight-shaped E (O × I/g·K):
 *   fwd:   y = y0 (absent: 0) + m·op(x, E ⊙ vec) + m·bias            (vec over input channels)
 *   dgrad: G' = opᵀ(dy, E);  dx = m·vec[c]·G'  (vec absent: 1);  gp = G' (fp32 scratch, x-shaped)
 *   wgrad: gE = m·opW(x, dy)
 * x / y / dy / dx views: linear tokens × features, conv (N·channels) × spatial. Every operand is
 * rounded to ct as loaded, except E when E_exact (an fp32 intermediate of ours: dense_bypass.c). */
typedef struct {
    lk_conv_geom g;
    lk_view x, E, vec, bias, y0, y, dy, dx, gE;
    float *gp;
    double m;
    int32_t ct;
    int32_t E_exact;
} lk_conv_args;
int lk_conv_fwd(const lk_conv_args *a, void *stream);
int lk_conv_dgrad(const lk_conv_args *a, void *stream);
int lk_conv_wgrad(const lk_conv_args *a, void *stream);

/* Norm bypass (LayerNorm: views tokens × C, one group per row; GroupNorm: views (N·C) × sp,
 * group k = rows k·cg … k·cg + cg − 1):
 *   fwd: y = y0 (absent: 0) + x̂ ⊙ (m·q·w_norm) + m·q·b_norm
 *   bwd: dx = rstd·(h − mean(h) − x̂·mean(h·x̂)), h = dy·m·q·w_norm;  dy0 = dy (delta_only: 0);
 *        stats (2 floats per group: mu, rstd) written when non-NULL, for the parameter sums. */
typedef struct {
    lk_view x, y0, y, dy, dx, dy0, wn, bn, q;
    int32_t group, delta_only, ct;
    int64_t C, cg, ngroups;
    double m, eps;
    float *stats;
} lk_norm_args;
int lk_norm_fwd(const lk_norm_args *a, void *stream);
int lk_norm_bwd(const lk_norm_args *a, void *stream);

#ifdef __cplusplus
}
#endif
#endif
