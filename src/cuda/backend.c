/*
 * backend.c — entry of the CUDA backend: lyco_cuda_run checks a validated call, then hands it to
 * the family's dispatcher (dispatch_<family>.c, see backend.h), on the context's stream (NULL =
 * the per-thread default stream), without synchronising the host.
 *
 * What it does before a dispatcher runs:
 *   - requires every tensor of the call on the current CUDA device (the module mask, which
 *     decides which work runs, stays on the host; validate.c enforces that);
 *   - resolves the module mask for every algorithm: a dropped adapter writes W'' = W (or 0),
 *     bias'' = bias (or 0), y = y0 (or 0), dy0 = dy (0 when y is Δ alone), zero gradients,
 *     through one elementwise kernel.
 * It also holds the helpers every dispatcher uses: 2-D strided views of call tensors (a tensor
 * whose dims do not collapse to two strides is declined with its name) and lk_decline.
 * Families without a dispatcher return LYCO_ERR_UNSUPPORTED with `why` filled (the api layer
 * reports it).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda/backend.h"

lyco_status lk_decline(char *why, size_t why_len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
    return LYCO_ERR_UNSUPPORTED;
}

/* Dims [a, b) as one (size, stride); false when they do not collapse. */
static bool collapse(const DLTensor *t, int a, int b, int64_t *n, int64_t *st) {
    int64_t size = 1, stride = 1, expect = -1;
    bool first = true;
    for (int d = b - 1; d >= a; d--) {
        int64_t sh = t->shape[d];
        size *= sh;
        if (sh == 1) continue;
        int64_t sd = lyco_stride(t, d);
        if (first) {
            stride = sd;
            expect = sd * sh;
            first = false;
        } else {
            if (sd != expect) return false;
            expect *= sh;
        }
    }
    *n = size;
    *st = stride;
    return true;
}

/* The view of t with dims [0, split) as rows and [split, ndim) as columns. */
bool lk_mk_view(const DLTensor *t, int split, lk_view *v) {
    memset(v, 0, sizeof *v);
    if (!t) return true;
    if (split > t->ndim) split = t->ndim;
    if (!collapse(t, 0, split, &v->rows, &v->s0) || !collapse(t, split, t->ndim, &v->cols, &v->s1)) return false;
    lyco_dtype d = lyco_dtype_of(t);
    size_t es = lyco_dtype_size(d);
    v->p = (const char *)t->data + t->byte_offset;
    v->dt = (int32_t)d;
    if (v->cols <= 1) v->s1 = 1;
    uintptr_t addr = (uintptr_t)v->p;
    if (addr % es) v->flags |= LK_UNALIGNED;
    else if (v->s1 == 1 && addr % 16 == 0 && (v->rows <= 1 || (v->s0 * (int64_t)es) % 16 == 0)) v->flags |= LK_VEC;
    return true;
}

static lyco_status on_device(const DLTensor *t, const char *name, int dev) {
    if (!t) return LYCO_OK;
    if (t->device.device_type != kDLCUDA)
        return lyco_fail(LYCO_ERR_DEVICE, "cuda: %s is a host tensor; the cuda backend takes device tensors (copy it to the GPU, or use backend cpu)", name);
    if (t->device.device_id != dev)
        return lyco_fail(LYCO_ERR_DEVICE, "cuda: %s is on cuda:%d but the current device is cuda:%d; expected the current device",
                         name, (int)t->device.device_id, dev);
    return LYCO_OK;
}

/* Builds the views; a tensor that does not collapse is declined by name. */
lyco_status lk_views(lk_view_req *rq, int n, char *why, size_t why_len) {
    for (int i = 0; i < n; i++)
        if (!lk_mk_view(rq[i].t, rq[i].split, rq[i].v))
            return lk_decline(why, why_len, "%s has strides whose dims do not collapse to a matrix", rq[i].name);
    return LYCO_OK;
}

int lk_last_split(const DLTensor *t) { return t ? t->ndim - 1 : 0; }

lyco_status lk_fill_locon(const lyco_call *c, lk_locon *L, lk_view_req *rq, int *nrq) {
    const lyco_adapter *a = c->a;
    memset(L, 0, sizeof *L);
    L->ct = (int32_t)c->dt.compute;
    L->O = c->dims.O;
    L->K = c->dims.K;
    L->IK = c->dims.I * c->dims.K;
    L->r = c->dims.r;
    L->s = c->s;
    L->m = c->m;
    rq[(*nrq)++] = (lk_view_req){a->tensor[LYCO_LORA_UP], "lora_up", 1, &L->U};
    rq[(*nrq)++] = (lk_view_req){a->tensor[LYCO_LORA_DOWN], "lora_down", 1, &L->D};
    rq[(*nrq)++] = (lk_view_req){a->tensor[LYCO_RANK_MASK], "rank_mask", 0, &L->mask};
    rq[(*nrq)++] = (lk_view_req){a->tensor[LYCO_SCALAR], "scalar", 0, &L->sigma};
    return LYCO_OK;
}

void lk_fill_dora(const lyco_call *c, lk_dora *dr, lk_view_req *rq, int *nrq) {
    memset(dr, 0, sizeof *dr);
    if (!c->dims.dora) return;
    const DLTensor *d = c->a->tensor[LYCO_DORA_SCALE];
    dr->on = 1;
    dr->on_out = c->dims.dora_on_out ? 1 : 0;
    dr->eps = ldexp(1.0, 1 - lyco_dtype_precision(lyco_dtype_of(d)));
    rq[(*nrq)++] = (lk_view_req){d, "dora_scale", 0, &dr->d};
    if (lyco_call_wants(c, LYCO_DORA_SCALE)) rq[(*nrq)++] = (lk_view_req){c->g->grad[LYCO_DORA_SCALE], "grad dora_scale", 0, &dr->grad_d};
}

/* Every gradient the call wants, set to zero (module dropout). */
static lyco_status zero_grads(const lyco_call *c, int ct, void *st, char *why, size_t why_len) {
    if (!c->g) return LYCO_OK;
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        DLTensor *gt = c->g->grad[s];
        if (!gt || lyco_numel(gt) == 0) continue;
        lk_view v;
        if (!lk_mk_view(gt, 0, &v)) return lk_decline(why, why_len, "grad %s has strides whose dims do not collapse", lyco_slot_name((lyco_slot)s));
        lyco_status rc = (lyco_status)lk_copy_round(&v, NULL, ct, st);
        if (rc) return rc;
    }
    return LYCO_OK;
}

lyco_status lk_run_dropped(const lyco_call *c, void *st, char *why, size_t why_len) {
    int ct = (int)c->dt.compute;
    lk_view dst, src;
    lyco_status rc = LYCO_OK;
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD: {
        const DLTensor *W = c->merge->mode == LYCO_MERGE_DELTA ? NULL : c->merge->weight;
        if (!lk_mk_view(c->out, 1, &dst) || !lk_mk_view(W, 1, &src)) return lk_decline(why, why_len, "%s has strides whose dims do not collapse", "out or W");
        if ((rc = (lyco_status)lk_copy_round(&dst, W ? &src : NULL, ct, st))) return rc;
        if (!c->out_bias) return LYCO_OK;
        const DLTensor *b = c->merge->mode == LYCO_MERGE_DELTA ? NULL : c->merge->bias;
        if (!lk_mk_view(c->out_bias, 0, &dst) || !lk_mk_view(b, 0, &src)) return lk_decline(why, why_len, "%s has strides whose dims do not collapse", "out_bias or bias");
        return (lyco_status)lk_copy_round(&dst, b ? &src : NULL, ct, st);
    }
    case LYCO_DIR_MERGE_BWD: return zero_grads(c, ct, st, why, why_len);
    case LYCO_DIR_BYPASS_FWD: {
        const DLTensor *y0 = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? NULL : c->bypass->y0;
        if (!lk_mk_view(c->y, lk_last_split(c->y), &dst) || !lk_mk_view(y0, lk_last_split(y0), &src))
            return lk_decline(why, why_len, "%s has strides whose dims do not collapse", "y or y0");
        return (lyco_status)lk_copy_round(&dst, y0 ? &src : NULL, ct, st);
    }
    default:
        if (c->dx) {
            if (!lk_mk_view(c->dx, lk_last_split(c->dx), &dst)) return lk_decline(why, why_len, "%s has strides whose dims do not collapse", "dx");
            if ((rc = (lyco_status)lk_copy_round(&dst, NULL, ct, st))) return rc;
        }
        if (c->dy0) { /* y = y0 (+ nothing): dy0 = dy; y = Δ alone (DELTA_ONLY): dy0 = 0 */
            bool delta_only = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) != 0;
            if (!lk_mk_view(c->dy0, lk_last_split(c->dy0), &dst) || !lk_mk_view(c->dy, lk_last_split(c->dy), &src))
                return lk_decline(why, why_len, "%s has strides whose dims do not collapse", "dy or dy0");
            if ((rc = (lyco_status)lk_copy_round(&dst, delta_only ? NULL : &src, ct, st))) return rc;
        }
        return zero_grads(c, ct, st, why, why_len);
    }
}

/* Every tensor of the call on the current device. */
static lyco_status check_devices(const lyco_call *c) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return lyco_fail(LYCO_ERR_BACKEND, "cuda: cudaGetDevice failed: %s", cudaGetErrorString(e));
    lyco_status st;
    for (int s = 0; s < LYCO_SLOT_COUNT; s++)
        if (s != LYCO_MODULE_MASK && (st = on_device(c->a->tensor[s], lyco_slot_name((lyco_slot)s), dev))) return st;
    if (c->g)
        for (int s = 0; s < LYCO_SLOT_COUNT; s++)
            if ((st = on_device(c->g->grad[s], "a gradient", dev))) return st;
    const DLTensor *ts[] = {c->out, c->out_bias, c->d_out, c->d_out_bias, c->y, c->dy, c->dx, c->dy0,
                            c->merge ? c->merge->weight : NULL, c->merge ? c->merge->bias : NULL,
                            c->bypass ? c->bypass->x : NULL, c->bypass ? c->bypass->y0 : NULL, c->bypass ? c->bypass->weight : NULL};
    const char *names[] = {"out", "out_bias", "d_out", "d_out_bias", "y", "dy", "dx", "dy0", "W", "bias", "x", "y0", "W"};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        if ((st = on_device(ts[i], names[i], dev))) return st;
    return LYCO_OK;
}

lyco_status lyco_cuda_run(const lyco_call *c, void *stream, char *why, size_t why_len) {
    void *st = stream ? stream : (void *)cudaStreamPerThread;
    lyco_status rc = check_devices(c);
    if (rc) return rc;
    if (c->dropped) return lk_run_dropped(c, st, why, why_len);
    lk_device dev;
    if ((rc = (lyco_status)lk_device_query(&dev))) return rc;
    switch (c->a->algo) {
    case LYCO_ALGO_LOCON: return lk_run_locon(c, &dev, st, why, why_len);
    case LYCO_ALGO_IA3: return lk_run_ia3(c, &dev, st, why, why_len);
    case LYCO_ALGO_FULL: return lk_run_full(c, &dev, st, why, why_len);
    case LYCO_ALGO_NORM: return lk_run_norm(c, &dev, st, why, why_len);
    case LYCO_ALGO_GLORA: return lk_run_glora(c, &dev, st, why, why_len);
    case LYCO_ALGO_DYLORA: return lk_run_dylora(c, &dev, st, why, why_len);
    case LYCO_ALGO_LOHA: return lk_run_loha(c, &dev, st, why, why_len);
    case LYCO_ALGO_LOKR: return lk_run_lokr(c, &dev, st, why, why_len);
    case LYCO_ALGO_DIAG_OFT: return lk_run_diag_oft(c, &dev, st, why, why_len);
    case LYCO_ALGO_BOFT: return lk_run_boft(c, &dev, st, why, why_len);
    default: break;
    }
    return lk_decline(why, why_len, "no CUDA kernel for %s %s yet", lyco_algo_name(c->a->algo), lyco_direction_name(c->dir));
}

/* The activation view of t (N×C×spatial; linear: tokens×features); false when the spatial dims
   (or, linear, the leading token dims) do not collapse to one stride. t NULL: zeroed. */
bool lk_act_view(const lyco_call *c, const DLTensor *t, lk_act *v) {
    memset(v, 0, sizeof *v);
    if (!t) return true;
    lk_view m;
    if (c->a->layer.kind != LYCO_LAYER_CONV) { /* tokens × features */
        if (!lk_mk_view(t, lk_last_split(t), &m)) return false;
        v->sn = m.s0;
        v->sc = m.s1;
    } else { /* dims 0, 1 single; spatial dims [2, ndim) collapse as the columns of a 2-split view */
        const DLTensor sub = {.data = t->data, .device = t->device, .ndim = t->ndim - 1, .dtype = t->dtype,
                              .shape = t->shape + 1, .strides = t->strides ? t->strides + 1 : NULL, .byte_offset = t->byte_offset};
        if (!lk_mk_view(&sub, 1, &m)) return false;
        int64_t cs = 1;
        for (int d = 1; d < t->ndim; d++) cs *= t->shape[d];
        v->sn = t->strides ? t->strides[0] : cs;
        v->sc = m.s0;
        v->sp = m.s1;
    }
    v->p = m.p;
    v->dt = m.dt;
    v->flags = m.flags & LK_UNALIGNED;
    return true;
}

void lk_fill_geo(const lyco_call *c, lk_geo *g) {
    const lyco_layer *l = &c->a->layer;
    memset(g, 0, sizeof *g);
    g->spin = g->spout = 1;
    if (l->kind != LYCO_LAYER_CONV) return;
    g->nd = l->conv_dims;
    for (int d = 0; d < g->nd; d++) {
        g->in[d] = c->sp_in[d];
        g->out[d] = c->sp_out[d];
        g->k[d] = l->kernel[d];
        g->st[d] = l->stride[d];
        g->pad[d] = l->padding[d];
        g->dil[d] = l->dilation[d];
    }
    g->spin = c->sp_in_n;
    g->spout = c->sp_out_n;
}

lyco_status lk_act_views(const lyco_call *c, const lk_act_req *rq, int n, char *why, size_t why_len) {
    for (int i = 0; i < n; i++)
        if (!lk_act_view(c, rq[i].t, rq[i].v)) return lk_decline(why, why_len, "%s has strides whose spatial dims do not collapse", rq[i].name);
    return LYCO_OK;
}
