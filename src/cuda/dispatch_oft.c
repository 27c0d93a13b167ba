/*
 * dispatch_oft.c — the CUDA dispatch shared by Diag-OFT and BOFT (ALGORITHMS.md §2.4, §2.5; see
 * dispatch_oft.h): builds kern_oft.h's lk_oft_args from a validated call and runs the family's
 * launcher for the direction, as the fused CPU kernels define them (src/cpu/diag_oft.c, boft.c):
 *   merge fwd : X = W̄ → Y = out (DELTA: ΔW = W'' − W; WEIGHT: W''; UNMERGE is refused upstream)
 *   merge bwd : X = W̄, GY = d_out → ∂B, ∂ρ
 *   bypass fwd: X = y0 (bias included) → Y = y (DELTA_ONLY: y = y' − y0)
 *   bypass bwd: X = y0, GY = dy → dy0, ∂B, ∂ρ; dx = 0 (the adapter path does not read x)
 * Operands: W-shaped tensors as O × (I·K) views (rows = channels); linear activations as
 * tokens × O views (channels are the columns); conv activations as N × O × positions (the
 * spatial dims must collapse to one stride). The blocks tensor and its gradient keep one stride
 * per dim (any layout). Module dropout never reaches here (backend.c handles it).
 */
#include <string.h>

#include "cuda/dispatch_oft.h"

static bool is_bypass(const lyco_call *c) { return c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD; }

/* The blocks tensor (or its gradient) t: nb×bs×bs (Diag-OFT) or M×nb×b×b (BOFT), any strides. */
static void blk_view(const DLTensor *t, lk_blk *v) {
    memset(v, 0, sizeof *v);
    if (!t) return;
    int off = 4 - t->ndim;   /* Diag-OFT: no stage dim (stride 0) */
    for (int d = 0; d < t->ndim && d + off < 4; d++) v->st[d + off] = lyco_stride(t, d);
    lyco_dtype dt = lyco_dtype_of(t);
    v->p = (const char *)t->data + t->byte_offset;
    v->dt = (int32_t)dt;
    if ((uintptr_t)v->p % lyco_dtype_size(dt)) v->flags = LK_UNALIGNED;
}

/* The channel-row view of an X-shaped operand t; false when its dims do not collapse. */
static bool rows_view(const lyco_call *c, const DLTensor *t, lk_rows *v) {
    memset(v, 0, sizeof *v);
    v->SP = 1;
    if (!t) return true;
    lk_view m;
    if (!is_bypass(c)) {               /* W̄: O × (I·K) */
        if (!lk_mk_view(t, 1, &m)) return false;
        v->sc = m.s0;
        v->sn = m.s1;
    } else if (c->a->layer.kind != LYCO_LAYER_CONV) {   /* tokens × O */
        if (!lk_mk_view(t, lk_last_split(t), &m)) return false;
        v->sc = m.s1;
        v->sn = m.s0;
    } else {                           /* N × O × positions: dims 2.. collapse to one stride */
        const DLTensor sub = {.data = t->data, .device = t->device, .ndim = t->ndim - 1, .dtype = t->dtype,
                              .shape = t->shape + 1, .strides = t->strides ? t->strides + 1 : NULL, .byte_offset = t->byte_offset};
        if (!lk_mk_view(&sub, 1, &m)) return false;
        v->sn = lyco_stride(t, 0);
        v->sc = m.s0;
        v->sp = m.s1;
        v->SP = c->sp_out_n > 0 ? c->sp_out_n : 1;
    }
    v->p = m.p;
    v->dt = m.dt;
    v->flags = m.flags & LK_UNALIGNED;
    return true;
}

typedef struct {
    const DLTensor *t;
    const char *name;
    lk_rows *v;
} rows_req;

static lyco_status rows_views(const lyco_call *c, const rows_req *rq, int n, char *why, size_t why_len) {
    for (int i = 0; i < n; i++)
        if (!rows_view(c, rq[i].t, rq[i].v)) return lk_decline(why, why_len, "%s has strides whose dims do not collapse to the channel-row layout", rq[i].name);
    return LYCO_OK;
}

static const DLTensor *grad_if(const lyco_call *c, lyco_slot s) { return lyco_call_wants(c, s) ? c->g->grad[s] : NULL; }

/* dx = 0 (bypass backward) */
static lyco_status zero_dx(const lyco_call *c, void *st, char *why, size_t why_len) {
    if (!c->dx) return LYCO_OK;
    lk_view v;
    if (!lk_mk_view(c->dx, lk_last_split(c->dx), &v)) return lk_decline(why, why_len, "dx has strides whose dims do not collapse to a matrix");
    return (lyco_status)lk_copy_round(&v, NULL, (int32_t)c->dt.compute, st);
}

lyco_status lk_run_oft(const lyco_call *c, const lk_oft_family *f, const lk_device *dev, void *st, char *why, size_t why_len) {
    const lyco_adapter *ad = c->a;
    if (ad->layer.kind != LYCO_LAYER_LINEAR && ad->layer.kind != LYCO_LAYER_CONV)
        return lk_decline(why, why_len, "%s on a norm layer has no CUDA kernel", f->family);
    if (c->dims.bs < 1 || c->dims.bs > LK_OFT_MAX_BS)
        return lk_decline(why, why_len, "%s block size %lld > %d: the in-kernel Cayley solve holds blocks of at most %d×%d in shared memory",
                          f->family, (long long)c->dims.bs, LK_OFT_MAX_BS, LK_OFT_MAX_BS, LK_OFT_MAX_BS);
    lk_oft_args a;
    memset(&a, 0, sizeof a);
    a.ct = (int32_t)c->dt.compute;
    a.O = c->dims.O;
    a.nb = c->dims.nb;
    a.bs = c->dims.bs;
    a.M = f->boft ? c->dims.stages : 1;
    a.kc = ad->constraint;
    a.m = c->m;
    const DLTensor *B = ad->tensor[LYCO_OFT_BLOCKS];
    if (!B || B->ndim != (f->boft ? 4 : 3)) return lk_decline(why, why_len, "%s blocks tensor of unexpected rank", f->family);
    blk_view(B, &a.B);
    blk_view(grad_if(c, LYCO_OFT_BLOCKS), &a.gB);
    lk_view_req rq[3];
    int n = 0;
    rq[n++] = (lk_view_req){ad->tensor[LYCO_RESCALE], "rescale", 0, &a.rho};
    rq[n++] = (lk_view_req){grad_if(c, LYCO_RESCALE), "grad rescale", 0, &a.grho};
    rq[n++] = (lk_view_req){!f->boft && !is_bypass(c) ? ad->tensor[LYCO_RANK_MASK] : NULL, "rank_mask", 0, &a.mask};
    lyco_status rc = lk_views(rq, n, why, why_len);
    if (rc) return rc;
    const DLTensor *W = is_bypass(c) ? NULL : c->merge->weight;
    if (!is_bypass(c) && !W) return lk_decline(why, why_len, "%s %s without the base weight W has no CUDA kernel", f->family, lyco_direction_name(c->dir));
    if (is_bypass(c) && !c->bypass->y0) return lk_decline(why, why_len, "%s bypass without y0 has no CUDA kernel (the rotation acts on y0)", f->family);
    if (is_bypass(c)) a.ncol = c->tokens * (ad->layer.kind == LYCO_LAYER_CONV ? c->sp_out_n : 1);
    else if (W->ndim >= 1) a.ncol = lyco_numel(W) / (W->shape[0] > 0 ? W->shape[0] : 1);
    bool delta_only = is_bypass(c) && (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY);
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD: {
        if (c->merge->mode != LYCO_MERGE_DELTA && c->merge->mode != LYCO_MERGE_WEIGHT)
            return lk_decline(why, why_len, "%s merge mode %d is not a rotation merge", f->family, (int)c->merge->mode);
        a.delta = c->merge->mode == LYCO_MERGE_DELTA;
        rows_req rr[] = {{W, "W", &a.X}, {c->out, "out", &a.Y}};
        if ((rc = rows_views(c, rr, 2, why, why_len))) return rc;
        return (lyco_status)f->fwd(&a, dev, st);
    }
    case LYCO_DIR_MERGE_BWD: {
        rows_req rr[] = {{W, "W", &a.X}, {c->d_out, "d_out", &a.GY}};
        if ((rc = rows_views(c, rr, 2, why, why_len))) return rc;
        return (lyco_status)f->bwd(&a, dev, st);
    }
    case LYCO_DIR_BYPASS_FWD: {
        a.delta = delta_only;
        rows_req rr[] = {{c->bypass->y0, "y0", &a.X}, {c->y, "y", &a.Y}};
        if ((rc = rows_views(c, rr, 2, why, why_len))) return rc;
        return (lyco_status)f->fwd(&a, dev, st);
    }
    default: {
        a.delta = delta_only;
        rows_req rr[] = {{c->bypass->y0, "y0", &a.X}, {c->dy, "dy", &a.GY}, {c->dy0, "dy0", &a.GX}};
        if ((rc = rows_views(c, rr, 3, why, why_len))) return rc;
        if ((rc = zero_dx(c, st, why, why_len))) return rc;
        return (lyco_status)f->bwd(&a, dev, st);
    }
    }
}
