/*
 * backend.c — entry of the CUDA backend: lyco_cuda_run dispatches a validated call per algorithm
 * and direction to the kernels (locon.cu, dora.cu, util.cu through kern.h), on the context's
 * stream (NULL = the per-thread default stream), without synchronising the host.
 *
 * What it does before a launch:
 *   - requires every tensor of the call on the current CUDA device (the module mask, which
 *     decides which work runs, stays on the host; validate.c enforces that);
 *   - turns each tensor into a 2-D strided view (kern.h): weights O×(I·K), factors, activations
 *     tokens×features, vectors 1×n; a tensor whose dims do not collapse to two strides is
 *     declined with its name;
 *   - resolves the module mask: a dropped adapter writes W'' = W (or 0), y = y0 (or 0),
 *     dy0 = dy, zero gradients, through one elementwise kernel.
 * Cases without a kernel yet return LYCO_ERR_UNSUPPORTED with `why` filled (the api layer
 * reports it): algorithms other than LoCon, Tucker LoCon, conv bypass, DoRA in bypass.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "api/api.h"
#include "cuda/kern.h"

static lyco_status decline(char *why, size_t why_len, const char *fmt, ...) LYCO_PRINTF(3, 4);
static lyco_status decline(char *why, size_t why_len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
    return LYCO_ERR_UNSUPPORTED;
}

static int64_t stride_of(const DLTensor *t, int d) {
    if (t->strides) return t->strides[d];
    int64_t s = 1;
    for (int i = d + 1; i < t->ndim; i++) s *= t->shape[i];
    return s;
}

/* Dims [a, b) as one (size, stride); false when they do not collapse. */
static bool collapse(const DLTensor *t, int a, int b, int64_t *n, int64_t *st) {
    int64_t size = 1, stride = 1, expect = -1;
    bool first = true;
    for (int d = b - 1; d >= a; d--) {
        int64_t sh = t->shape[d];
        size *= sh;
        if (sh == 1) continue;
        int64_t sd = stride_of(t, d);
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
static bool mk_view(const DLTensor *t, int split, lk_view *v) {
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

typedef struct {
    const DLTensor *t;
    const char *name;
    int split;      /* rows = dims [0, split) */
    lk_view *v;
} view_req;

/* Builds the views; a tensor that does not collapse is declined by name. */
static lyco_status views(view_req *rq, int n, char *why, size_t why_len) {
    for (int i = 0; i < n; i++)
        if (!mk_view(rq[i].t, rq[i].split, rq[i].v))
            return decline(why, why_len, "%s has strides whose dims do not collapse to a matrix", rq[i].name);
    return LYCO_OK;
}

static int last_split(const DLTensor *t) { return t ? t->ndim - 1 : 0; }

static lyco_status fill_locon(const lyco_call *c, lk_locon *L, view_req *rq, int *nrq) {
    const lyco_adapter *a = c->a;
    memset(L, 0, sizeof *L);
    L->ct = (int32_t)c->dt.compute;
    L->O = c->dims.O;
    L->K = c->dims.K;
    L->IK = c->dims.I * c->dims.K;
    L->r = c->dims.r;
    L->s = c->s;
    L->m = c->m;
    rq[(*nrq)++] = (view_req){a->tensor[LYCO_LORA_UP], "lora_up", 1, &L->U};
    rq[(*nrq)++] = (view_req){a->tensor[LYCO_LORA_DOWN], "lora_down", 1, &L->D};
    rq[(*nrq)++] = (view_req){a->tensor[LYCO_RANK_MASK], "rank_mask", 0, &L->mask};
    rq[(*nrq)++] = (view_req){a->tensor[LYCO_SCALAR], "scalar", 0, &L->sigma};
    return LYCO_OK;
}

static void fill_dora(const lyco_call *c, lk_dora *dr, view_req *rq, int *nrq) {
    memset(dr, 0, sizeof *dr);
    if (!c->dims.dora) return;
    const DLTensor *d = c->a->tensor[LYCO_DORA_SCALE];
    dr->on = 1;
    dr->on_out = c->dims.dora_on_out ? 1 : 0;
    dr->eps = ldexp(1.0, 1 - lyco_dtype_precision(lyco_dtype_of(d)));
    rq[(*nrq)++] = (view_req){d, "dora_scale", 0, &dr->d};
    if (lyco_call_wants(c, LYCO_DORA_SCALE)) rq[(*nrq)++] = (view_req){c->g->grad[LYCO_DORA_SCALE], "grad dora_scale", 0, &dr->grad_d};
}

/* Every gradient the call wants, set to zero (module dropout). */
static lyco_status zero_grads(const lyco_call *c, int ct, void *st, char *why, size_t why_len) {
    if (!c->g) return LYCO_OK;
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        DLTensor *gt = c->g->grad[s];
        if (!gt || lyco_numel(gt) == 0) continue;
        lk_view v;
        if (!mk_view(gt, 0, &v)) return decline(why, why_len, "grad %s has strides whose dims do not collapse", lyco_slot_name((lyco_slot)s));
        lyco_status rc = (lyco_status)lk_copy_round(&v, NULL, ct, st);
        if (rc) return rc;
    }
    return LYCO_OK;
}

static lyco_status run_dropped(const lyco_call *c, void *st, char *why, size_t why_len) {
    int ct = (int)c->dt.compute;
    lk_view dst, src;
    lyco_status rc = LYCO_OK;
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD: {
        const DLTensor *W = c->merge->mode == LYCO_MERGE_DELTA ? NULL : c->merge->weight;
        if (!mk_view(c->out, 1, &dst) || !mk_view(W, 1, &src)) return decline(why, why_len, "%s has strides whose dims do not collapse", "out or W");
        return (lyco_status)lk_copy_round(&dst, W ? &src : NULL, ct, st);
    }
    case LYCO_DIR_MERGE_BWD: return zero_grads(c, ct, st, why, why_len);
    case LYCO_DIR_BYPASS_FWD: {
        const DLTensor *y0 = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? NULL : c->bypass->y0;
        if (!mk_view(c->y, last_split(c->y), &dst) || !mk_view(y0, last_split(y0), &src))
            return decline(why, why_len, "%s has strides whose dims do not collapse", "y or y0");
        return (lyco_status)lk_copy_round(&dst, y0 ? &src : NULL, ct, st);
    }
    default:
        if (c->dx) {
            if (!mk_view(c->dx, last_split(c->dx), &dst)) return decline(why, why_len, "%s has strides whose dims do not collapse", "dx");
            if ((rc = (lyco_status)lk_copy_round(&dst, NULL, ct, st))) return rc;
        }
        if (c->dy0) {
            if (!mk_view(c->dy0, last_split(c->dy0), &dst) || !mk_view(c->dy, last_split(c->dy), &src))
                return decline(why, why_len, "%s has strides whose dims do not collapse", "dy or dy0");
            if ((rc = (lyco_status)lk_copy_round(&dst, &src, ct, st))) return rc;
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
    const lyco_adapter *a = c->a;
    void *st = stream ? stream : (void *)cudaStreamPerThread;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    if (a->algo != LYCO_ALGO_LOCON)
        return decline(why, why_len, "no CUDA kernel for %s %s yet", lyco_algo_name(a->algo), lyco_direction_name(c->dir));
    if (c->dims.tucker)
        return decline(why, why_len, "Tucker LoCon (lora_mid) %s has no CUDA kernel yet", lyco_direction_name(c->dir));
    if (a->layer.kind != LYCO_LAYER_LINEAR && a->layer.kind != LYCO_LAYER_CONV)
        return decline(why, why_len, "LoCon on a norm layer is not supported");
    if (bypass && a->layer.kind == LYCO_LAYER_CONV)
        return decline(why, why_len, "LoCon %s on a conv layer has no CUDA kernel yet (merge directions do)", lyco_direction_name(c->dir));
    if (bypass && c->dims.dora)
        return decline(why, why_len, "DoRA in %s has no CUDA kernel yet (merge directions do)", lyco_direction_name(c->dir));
    if (a->layer.kind == LYCO_LAYER_CONV && a->layer.groups != 1)
        return decline(why, why_len, "LoCon on a grouped conv is not supported");

    lyco_status rc = check_devices(c);
    if (rc) return rc;
    if (c->dropped) return run_dropped(c, st, why, why_len);

    lk_device dev;
    if ((rc = (lyco_status)lk_device_query(&dev))) return rc;
    view_req rq[24];
    int n = 0;
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD: {
        lk_merge_fwd_args m;
        memset(&m, 0, sizeof m);
        fill_locon(c, &m.L, rq, &n);
        fill_dora(c, &m.dora, rq, &n);
        m.mode = (int32_t)c->merge->mode;
        bool needW = c->merge->mode != LYCO_MERGE_DELTA || c->dims.dora;
        rq[n++] = (view_req){needW ? c->merge->weight : NULL, "W", 1, &m.W};
        rq[n++] = (view_req){c->out, "out", 1, &m.out};
        if ((rc = views(rq, n, why, why_len))) return rc;
        if (m.out.rows * m.out.cols == 0) return LYCO_OK;
        return (lyco_status)lk_locon_merge_fwd(&m, &dev, st);
    }
    case LYCO_DIR_MERGE_BWD: {
        lk_merge_bwd_args m;
        memset(&m, 0, sizeof m);
        fill_locon(c, &m.L, rq, &n);
        fill_dora(c, &m.dora, rq, &n);
        rq[n++] = (view_req){c->dims.dora ? c->merge->weight : NULL, "W", 1, &m.W};
        rq[n++] = (view_req){c->d_out, "d_out", 1, &m.G};
        rq[n++] = (view_req){lyco_call_wants(c, LYCO_LORA_UP) ? c->g->grad[LYCO_LORA_UP] : NULL, "grad lora_up", 1, &m.gU};
        rq[n++] = (view_req){lyco_call_wants(c, LYCO_LORA_DOWN) ? c->g->grad[LYCO_LORA_DOWN] : NULL, "grad lora_down", 1, &m.gD};
        rq[n++] = (view_req){lyco_call_wants(c, LYCO_SCALAR) ? c->g->grad[LYCO_SCALAR] : NULL, "grad scalar", 0, &m.gsigma};
        if ((rc = views(rq, n, why, why_len))) return rc;
        if (!m.gU.p && !m.gD.p && !m.gsigma.p && !m.dora.grad_d.p) return LYCO_OK;
        return (lyco_status)lk_locon_merge_bwd(&m, &dev, st);
    }
    case LYCO_DIR_BYPASS_FWD: {
        lk_bypass_fwd_args b;
        memset(&b, 0, sizeof b);
        fill_locon(c, &b.L, rq, &n);
        const DLTensor *y0 = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? NULL : c->bypass->y0;
        rq[n++] = (view_req){c->bypass->x, "x", last_split(c->bypass->x), &b.x};
        rq[n++] = (view_req){y0, "y0", last_split(y0), &b.y0};
        rq[n++] = (view_req){c->y, "y", last_split(c->y), &b.y};
        if ((rc = views(rq, n, why, why_len))) return rc;
        b.T = c->tokens;
        return (lyco_status)lk_locon_bypass_fwd(&b, &dev, st, why, why_len);
    }
    default: {
        lk_bypass_bwd_args b;
        memset(&b, 0, sizeof b);
        fill_locon(c, &b.L, rq, &n);
        rq[n++] = (view_req){c->bypass->x, "x", last_split(c->bypass->x), &b.x};
        rq[n++] = (view_req){c->dy, "dy", last_split(c->dy), &b.dy};
        rq[n++] = (view_req){c->dx, "dx", last_split(c->dx), &b.dx};
        rq[n++] = (view_req){c->dy0, "dy0", last_split(c->dy0), &b.dy0};
        rq[n++] = (view_req){lyco_call_wants(c, LYCO_LORA_UP) ? c->g->grad[LYCO_LORA_UP] : NULL, "grad lora_up", 1, &b.gU};
        rq[n++] = (view_req){lyco_call_wants(c, LYCO_LORA_DOWN) ? c->g->grad[LYCO_LORA_DOWN] : NULL, "grad lora_down", 1, &b.gD};
        rq[n++] = (view_req){lyco_call_wants(c, LYCO_SCALAR) ? c->g->grad[LYCO_SCALAR] : NULL, "grad scalar", 0, &b.gsigma};
        if ((rc = views(rq, n, why, why_len))) return rc;
        b.T = c->tokens;
        return (lyco_status)lk_locon_bypass_bwd(&b, &dev, st, why, why_len);
    }
    }
}
