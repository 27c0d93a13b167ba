/*
 * dispatch_simple.h — host helpers shared by the IA3, Full and Norm dispatchers
 * (dispatch_ia3.c, dispatch_full.c, dispatch_norm.c; kernels in kern_simple.h), and the dense
 * DoRA-bypass and Tucker-DoRA compositions the LoHa, LoKr and LoCon dispatchers share (compose.c).
 */
#ifndef LYCO_CUDA_DISPATCH_SIMPLE_H
#define LYCO_CUDA_DISPATCH_SIMPLE_H

#include "cuda/backend.h"
#include "cuda/kern_simple.h"

/* Split of an activation-shaped tensor (x, y, y0, dy, dx, dy0): channels-first layouts (conv,
   GroupNorm) view as (N·C) × spatial (split 2), the rest as tokens × features (split ndim − 1). */
int lk_act_split(const lyco_call *c, const DLTensor *t);
/* The base layer's geometry (linear: nd = 0 and unit spatial sizes). */
void lk_conv_geom_of(const lyco_call *c, lk_conv_geom *g);
/* A compact (row-major, contiguous) rows × cols view of device scratch of dtype dt; 16-byte
   access (LK_VEC) when p is 16-byte aligned (or NULL: a view for planning) and rows are whole
   16-byte units. lk_f32_view: the same for fp32. */
lk_view lk_compact_view(void *p, int64_t rows, int64_t cols, lyco_dtype dt);
lk_view lk_f32_view(float *p, int64_t rows, int64_t cols);
/* dst = RN_dst(RN_ct(src)), or 0 when src is NULL; both viewed with dst's split (lk_ew_merge). */
lyco_status lk_copy_or_zero(const DLTensor *dst, const char *name, const DLTensor *src, int split, int ct, void *st,
                            char *why, size_t why_len);
/* compose.c: DoRA in bypass through E = W'' − W built by the family's own merge (LoHa, LoKr, LoCon
   on conv layers and with Tucker; run: the family's dispatcher, replayed on the call seen as a
   merge), and Tucker LoCon with DoRA in the merge directions. */
lyco_status lk_bypass_dense(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len,
                            lyco_status (*run)(const lyco_call *, const lk_device *, void *, char *, size_t));
lyco_status lk_tucker_dora_merge(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len);

#endif
