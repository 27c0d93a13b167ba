/*
 * kern_glora.h — the plain-C interface of GLoRA's CUDA kernels (glora.cu), used by
 * dispatch_glora.c. Operands are kern.h's 2-D strided views; GLoRA's factors (ALGORITHMS.md §2.7):
 *   A1 I×r, A2 r×I, B1 O×r, B2 r×(I·K), W O×(I·K) (column j = c·K + κ), K kernel positions
 *   (1 for linear); bypass activations x N×I×sp_in, y / y0 / dy N×O×sp_out (kern.h's lk_act; linear:
 *   N = tokens, no spatial dims).
 * Scalars: s (scale), m (multiplier), σs on the device (p NULL = 1, rounded to the compute dtype).
 * Rank masks q_a (1×r, on the A path) and q_b (1×r, on the B path): bypass only, p NULL = 1.
 */
#ifndef LYCO_CUDA_KERN_GLORA_H
#define LYCO_CUDA_KERN_GLORA_H

#include "cuda/kern.h"

#ifdef __cplusplus
extern "C" {
#endif


typedef struct {
    int32_t ct;               /* compute dtype */
    int64_t O, I, K, r, T;    /* T: tokens (bypass; conv: the batch N) */
    lk_geo geo;               /* bypass */
    lk_view A1, A2, B1, B2;
    lk_view qa, qb;           /* bypass rank masks (1×r); p NULL = none */
    lk_view sigma;            /* σs (1×1); p NULL = 1 */
    double s, m;
    int32_t mode;             /* merge forward: lyco_merge_mode */
    lk_view W;                /* base weight O×(I·K) */
    lk_view out;              /* merge forward: W'' or ΔW */
    lk_view G;                /* merge backward: ∂L/∂W'' (O×I·K) */
    lk_act x, y, y0;          /* bypass: x (N×I×sp_in), y, y0 (N×O×sp_out; y0 p NULL = write Δ alone) */
    lk_act dy, dx, dy0;       /* bypass backward (dx / dy0 p NULL = not wanted) */
    int32_t dy0_zero;         /* y0 given with LYCO_BYPASS_DELTA_ONLY: y did not read y0, dy0 = 0 */
    lk_view gA1, gA2, gB1, gB2, gsigma;  /* gradients (p NULL = not wanted) */
} lk_glora_args;

/* dev: linear layers at bf16 / fp32 compute take lowrank.cu's kernels (glora.cu's header) for the
   merges and the bypass forward */
int lk_glora_merge_fwd(const lk_glora_args *a, const lk_device *dev, void *stream);
int lk_glora_merge_bwd(const lk_glora_args *a, const lk_device *dev, void *stream);
int lk_glora_bypass_fwd(const lk_glora_args *a, const lk_device *dev, void *stream);
int lk_glora_bypass_bwd(const lk_glora_args *a, const lk_device *dev, void *stream);

#ifdef __cplusplus
}
#endif
#endif
