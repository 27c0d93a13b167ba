/*
 * kern_lokr.h — the plain-C interface of LoKr's CUDA kernels (lokr.cu), used by dispatch_lokr.c.
 * LoKr (ALGORITHMS.md §2.3): ΔW̄[i·b+j, p·dK+n] = ρ_o·W1[i,p]·W2[j,n], O = a·b, I = c·d, dK = d·K.
 *
 * Operands are kern.h's 2-D strided views (split after dim 0):
 *   w1 a×c | w1a a×r, w1b r×c                                          (W1 full | low rank)
 *   w2 b×dK | w2a b×r, w2b r×dK | Tucker: w2a r×b, w2b r×d, t2 r×(r·K)   (W2 full | plain | Tucker)
 *   W, out, G: O×(I·K) (conv weights flattened, column p·dK + q·K + κ).
 * Bypass activations are kern_glora.h's lk_act: x N×I×sp_in, y / y0 / dy N×O×sp_out (linear:
 * N = tokens, no spatial dims).
 * Scalars: s (the resolved scale), m (multiplier), σs on the device (sigma p NULL = 1; the
 * dispatcher leaves it NULL with the upstream s² merge scale, compat = 1), output-row mask q_o
 * (merge only, 1×O).
 */
#ifndef LYCO_CUDA_KERN_LOKR_H
#define LYCO_CUDA_KERN_LOKR_H

#include "cuda/kern.h"
#include "cuda/kern_glora.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t ct;                          /* compute dtype */
    int64_t O, I, K, a, b, c, d, r, T;   /* T: tokens (bypass; conv: the batch N) */
    int32_t w1_full, w2_full, tucker;    /* which forms the halves take */
    int32_t compat;                      /* merge with LYCO_FLAG_UPSTREAM_MERGE_SCALE: s' = s², no σs */
    int32_t legacy;                      /* LYCO_CUDA_LOKR_LEGACY=1: the first (GPU-verified) kernels only */
    int32_t mb_scalar;                   /* LYCO_CUDA_LOKR_MB_SCALAR=1: merge backward without k_lokr_mb_vec */
    lk_view w1, w1a, w1b, w2, w2a, w2b, t2;
    lk_view mask;                        /* merge: q_o (1×O); p NULL = none */
    lk_view sigma;                       /* σs (1×1); p NULL = 1 */
    double s, m;
    lk_dora dora;                        /* merge directions only */
    int32_t mode;                        /* merge forward: lyco_merge_mode */
    lk_view W, out, G;                   /* merge: W (p NULL in delta mode without DoRA), out, ∂L/∂W'' */
    lk_geo geo;                          /* bypass (nd = 0: linear) */
    lk_act x, y, y0, dy, dx, dy0;        /* bypass; y0 p NULL = write Δ alone; dx / dy0 p NULL = not wanted */
    int32_t dy0_zero;                    /* y did not read y0 (LYCO_BYPASS_DELTA_ONLY): dy0 = 0 */
    lk_view gw1, gw1a, gw1b, gw2, gw2a, gw2b, gt2, gsigma;  /* gradients (p NULL = not wanted) */
} lk_lokr_args;

int lk_lokr_merge_fwd(const lk_lokr_args *a, const lk_device *dev, void *stream);
int lk_lokr_merge_bwd(const lk_lokr_args *a, const lk_device *dev, void *stream);
int lk_lokr_bypass_fwd(const lk_lokr_args *a, const lk_device *dev, void *stream);
int lk_lokr_bypass_bwd(const lk_lokr_args *a, const lk_device *dev, void *stream);

#ifdef __cplusplus
}
#endif
#endif
