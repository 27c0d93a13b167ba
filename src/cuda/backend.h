/*
 * backend.h — what the CUDA backend's per-family dispatchers (dispatch_<family>.c) share with
 * backend.c: strided 2-D views of call tensors (kern.h's lk_view), the decline helper, the
 * module-dropout path, the fill helpers for the LoCon/DoRA argument structs, and the activation
 * views and conv geometry (kern.h's lk_act / lk_geo) of the GLoRA, LoHa and LoKr dispatchers.
 *
 * Flow: lyco_cuda_run (backend.c) checks that every tensor is on the current device, handles a
 * dropped module (lk_run_dropped, any algorithm), queries the device, then calls the family's
 * lk_run_<family>. A dispatcher either launches its kernels (stream-ordered, no host sync) and
 * returns LYCO_OK / an error, or returns lk_decline(…) with the reason, which the api layer turns
 * into the eager fallback and the path report.
 */
#ifndef LYCO_CUDA_BACKEND_H
#define LYCO_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "api/api.h"
#include "cuda/kern.h"

/* A tensor to view: dims [0, split) become rows, [split, ndim) columns. t NULL → empty view. */
typedef struct {
    const DLTensor *t;
    const char *name;
    int split;
    lk_view *v;
} lk_view_req;

/* Writes the reason into why and returns LYCO_ERR_UNSUPPORTED. */
lyco_status lk_decline(char *why, size_t why_len, const char *fmt, ...) LYCO_PRINTF(3, 4);
/* The view of t (t NULL: zeroed view); false when its dims do not collapse to two strides. */
bool lk_mk_view(const DLTensor *t, int split, lk_view *v);
/* Builds every requested view; a tensor that does not collapse is declined by name. */
lyco_status lk_views(lk_view_req *rq, int n, char *why, size_t why_len);
/* ndim − 1 (activations: every leading dim is a token), 0 for NULL. */
int lk_last_split(const DLTensor *t);
/* LoCon factors/scalars of the call into L; appends their view requests to rq. */
lyco_status lk_fill_locon(const lyco_call *c, lk_locon *L, lk_view_req *rq, int *nrq);
/* DoRA's parameters (dr->on = 0 without DoRA); appends view requests. */
void lk_fill_dora(const lyco_call *c, lk_dora *dr, lk_view_req *rq, int *nrq);
/* Module dropout: W'' = W (or 0), bias'' = bias (or 0), y = y0 (or 0), dy0 = dy, zero grads. */
lyco_status lk_run_dropped(const lyco_call *c, void *st, char *why, size_t why_len);

/* The activation view of t (N×C×spatial; linear: tokens×features); false when the spatial dims
   (or, linear, the leading token dims) do not collapse to one stride. t NULL: zeroed. */
bool lk_act_view(const lyco_call *c, const DLTensor *t, lk_act *v);
/* The layer's conv geometry (nd = 0 for linear). */
void lk_fill_geo(const lyco_call *c, lk_geo *g);
/* An activation to view; lk_act_views declines, by name, one whose dims do not collapse. */
typedef struct {
    const DLTensor *t;
    const char *name;
    lk_act *v;
} lk_act_req;
lyco_status lk_act_views(const lyco_call *c, const lk_act_req *rq, int n, char *why, size_t why_len);

/* Family dispatchers (one file each). */
lyco_status lk_run_locon(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len);
lyco_status lk_run_ia3(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len);
lyco_status lk_run_full(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len);
lyco_status lk_run_norm(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len);
lyco_status lk_run_glora(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len);
lyco_status lk_run_dylora(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len);
lyco_status lk_run_loha(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len);
lyco_status lk_run_lokr(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len);
lyco_status lk_run_diag_oft(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len);
lyco_status lk_run_boft(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len);

#endif
