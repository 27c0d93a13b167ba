/*
 * kern_oft.h — the plain-C interface of the OFT family's CUDA kernels (oft.cu: Diag-OFT and the
 * shared Cayley transform; boft.cu: BOFT), used by dispatch_diag_oft.c and dispatch_boft.c.
 *
 * Both families act on the O channel rows of one operand X (ALGORITHMS.md §2.4, §2.5):
 *   merge : X = W̄ (O × I·K, the weight flattened), columns = I·K;
 *   bypass: X = y0 (bias included) with channels as rows; columns = tokens (linear) or
 *           N·positions (conv, column j = n·SP + p).
 * Every X-shaped operand (W, out, d_out; y0, y, dy, dy0) is an lk_rows: element (o, j) at byte
 *   p + (o·sc + (j / SP)·sn + (j % SP)·sp)·elem_size          (SP = 1: p + (o·sc + j·sn)·es)
 * The blocks tensor B (Diag-OFT nb×bs×bs, BOFT M×nb×b×b) and its gradient are lk_blk views with
 * one stride per dim (any layout). ρ, its gradient and the merge dropout mask are 1×n lk_views.
 * Semantics and rounding follow the fused CPU kernels (src/cpu/diag_oft.c, boft.c, cayley.c).
 */
#ifndef LYCO_CUDA_KERN_OFT_H
#define LYCO_CUDA_KERN_OFT_H

#include "cuda/kern.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest block size the in-kernel Cayley solve (shared memory) and the tiles handle. */
#define LK_OFT_MAX_BS 64

typedef struct {
    const void *p;           /* NULL = absent */
    int64_t sc, sn, sp, SP;  /* strides in elements (channel, sample/column, position); SP ≥ 1 */
    int32_t dt, flags;       /* lyco_dtype, LK_UNALIGNED */
} lk_rows;

typedef struct {
    const void *p;           /* NULL = absent / not wanted */
    int64_t st[4];           /* strides in elements of (stage, block, row, col); stage 0 for Diag-OFT */
    int32_t dt, flags;
} lk_blk;

typedef struct {
    int32_t ct;              /* compute dtype */
    int64_t O, nb, bs, M;    /* M: BOFT stages (1 for Diag-OFT) */
    int64_t ncol;            /* columns of the rows layout */
    double kc;               /* constraint κc (≤ 0: off) */
    double m;                /* multiplier */
    lk_blk B, gB;            /* blocks; ∂L/∂B (p NULL = not wanted) */
    lk_view rho, grho;       /* ρ (1×O, p NULL = none); ∂L/∂ρ (p NULL = not wanted) */
    lk_view mask;            /* Diag-OFT merge dropout mask (1×nb·bs·bs, already /(1−p)); p NULL = none */
    lk_rows X, Y;            /* forward: X (W or y0) → Y (out or y) */
    lk_rows GY, GX;          /* backward: X, ∂L/∂Y → ∂L/∂X (p NULL = not wanted) */
    int32_t delta;           /* 1: Y = rows(X) − X (merge DELTA, bypass DELTA_ONLY) */
} lk_oft_args;

int lk_diag_oft_fwd(const lk_oft_args *a, const lk_device *dev, void *stream);
int lk_diag_oft_bwd(const lk_oft_args *a, const lk_device *dev, void *stream);
int lk_boft_fwd(const lk_oft_args *a, const lk_device *dev, void *stream);
int lk_boft_bwd(const lk_oft_args *a, const lk_device *dev, void *stream);

#ifdef __cplusplus
}
#endif
#endif
