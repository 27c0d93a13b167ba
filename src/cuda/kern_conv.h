/*
 * kern_conv.h — plain-C interface between dispatch_locon.c and locon_conv.cu: LoCon on conv
 * layers in bypass (forward, backward; plain and Tucker) and Tucker LoCon (lora_mid) in the
 * merge directions (ALGORITHMS.md §1.1, §1.4, §2.1).
 *
 * Activations (x, y, y0, dy, dx, dy0) are N × C × spatial (1 to 3 dims) with any strides: each is
 * described by its own element strides per axis (lkc_act), so strided and unaligned tensors need
 * no collapse. Adapter tensors and merge operands use kern.h's 2-D views: U O×r, D r×(I·K)
 * (plain) or r×I (Tucker), M r×(r·K) (element (a, b·K + κ)), W/out/G O×(I·K).
 * Unused spatial dims have size 1, kernel 1, stride 1, padding 0, dilation 1.
 */
#ifndef LYCO_CUDA_KERN_CONV_H
#define LYCO_CUDA_KERN_CONV_H

#include <stdint.h>

#include "cuda/kern.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Conv geometry of the layer (the adapter's spatial conv uses the layer's stride/padding/dilation). */
typedef struct {
    int64_t in[3], out[3], k[3], st[3], pad[3], dil[3];
    int64_t sin, sout;   /* products of in[] / out[] */
} lkc_geom;

/* An activation N × C × spatial: element (n, c, q0, q1, q2) at
   p + (n·sn + c·sc + q0·ss[0] + q1·ss[1] + q2·ss[2])·elem_size. p NULL = absent. */
typedef struct {
    const void *p;
    int64_t sn, sc, ss[3];
    int32_t dt;          /* lyco_dtype */
    int32_t unal;        /* p is not a multiple of the element size */
} lkc_act;

typedef struct {
    lk_locon L;          /* U, D, mask (q on the r channels of h), σs, s, m; L.IK = I·K */
    lk_view M;           /* Tucker core r × (r·K); p NULL = plain LoCon */
    int64_t I;           /* input channels */
    lkc_geom g;
    int64_t N;           /* images */
} lkc_conv;

typedef struct {
    lkc_conv C;
    lkc_act x, y0, y;    /* y0 absent = write Δ alone */
} lkc_bypass_fwd_args;

typedef struct {
    lkc_conv C;
    lkc_act x, dy, dx, dy0;   /* dx / dy0 absent = not wanted */
    int32_t dy0_zero;         /* DELTA_ONLY: y does not read y0, dy0 = 0 */
    lk_view gU, gD, gM, gsigma;
} lkc_bypass_bwd_args;

typedef struct {
    lkc_conv C;          /* geometry unused */
    lk_view W, out;      /* W may be absent in delta mode */
    int32_t mode;        /* lyco_merge_mode */
} lkc_tmerge_fwd_args;

typedef struct {
    lkc_conv C;
    lk_view G;           /* ∂L/∂W'' (O × I·K) */
    lk_view gU, gD, gM, gsigma;
} lkc_tmerge_bwd_args;

/* Tucker's pieces for compositions (tucker_dora.c): P = M ×₂ D (r × I·K, fp32: P[a, c·K+κ] =
   Σ_b RN_CT(M[a,b,κ])·RN_CT(D[b,c]), the Tucker kernels' own reading), and the chain of a given
   G_P (r × I·K, fp32) to d_mid / d_down (either absent = not wanted). C.L.ct is CT. */
typedef struct {
    lkc_conv C;
    float *P;
} lkc_tucker_p_args;
typedef struct {
    lkc_conv C;
    const float *Gp;
    lk_view gD, gM;
} lkc_tucker_chain_args;

/* Launchers (locon_conv.cu); stream is a cudaStream_t; no host synchronisation. */
int lkc_conv_bypass_fwd(const lkc_bypass_fwd_args *a, void *stream);
int lkc_conv_bypass_bwd(const lkc_bypass_bwd_args *a, void *stream);
int lkc_tucker_merge_fwd(const lkc_tmerge_fwd_args *a, void *stream);
int lkc_tucker_merge_bwd(const lkc_tmerge_bwd_args *a, void *stream);
int lkc_tucker_p(const lkc_tucker_p_args *a, void *stream);
int lkc_tucker_chain(const lkc_tucker_chain_args *a, void *stream);

#ifdef __cplusplus
}
#endif
#endif
