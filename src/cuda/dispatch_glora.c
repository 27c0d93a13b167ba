/*
 * dispatch_glora.c — GLoRA (ALGORITHMS.md §2.7) on the CUDA backend: turns a validated call into
 * kern_glora.h's argument struct and launches glora.cu's kernels: all four directions on linear
 * and conv layers (W flattened to O×(I·K); bypass activations as N×C×spatial views whose spatial
 * dims collapse to one stride). Declines, with the reason: DoRA on GLoRA, grouped conv, norm
 * layers, activations whose spatial dims do not collapse.
 */
#include <string.h>

#include "cuda/backend.h"
#include "cuda/kern_glora.h"

static const DLTensor *grad_if(const lyco_call *c, lyco_slot s) { return lyco_call_wants(c, s) ? c->g->grad[s] : NULL; }

/* Factors, scalars and (bypass) masks; appends their view requests. */
static void fill_factors(const lyco_call *c, lk_glora_args *g, lk_view_req *rq, int *n) {
    const lyco_adapter *a = c->a;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    g->ct = (int32_t)c->dt.compute;
    g->O = c->dims.O;
    g->I = c->dims.I;
    g->K = c->dims.K;
    g->r = c->dims.r;
    g->T = c->tokens;
    g->s = c->s;
    g->m = c->m;
    rq[(*n)++] = (lk_view_req){a->tensor[LYCO_GLORA_A1], "a1", 1, &g->A1};
    rq[(*n)++] = (lk_view_req){a->tensor[LYCO_GLORA_A2], "a2", 1, &g->A2};
    rq[(*n)++] = (lk_view_req){a->tensor[LYCO_GLORA_B1], "b1", 1, &g->B1};
    rq[(*n)++] = (lk_view_req){a->tensor[LYCO_GLORA_B2], "b2", 1, &g->B2};
    rq[(*n)++] = (lk_view_req){a->tensor[LYCO_SCALAR], "scalar", 0, &g->sigma};
    rq[(*n)++] = (lk_view_req){bypass ? a->tensor[LYCO_RANK_MASK] : NULL, "rank_mask", 0, &g->qa};
    rq[(*n)++] = (lk_view_req){bypass ? a->tensor[LYCO_RANK_MASK_B] : NULL, "rank_mask_b", 0, &g->qb};
}

static void fill_grads(const lyco_call *c, lk_glora_args *g, lk_view_req *rq, int *n) {
    rq[(*n)++] = (lk_view_req){grad_if(c, LYCO_GLORA_A1), "grad a1", 1, &g->gA1};
    rq[(*n)++] = (lk_view_req){grad_if(c, LYCO_GLORA_A2), "grad a2", 1, &g->gA2};
    rq[(*n)++] = (lk_view_req){grad_if(c, LYCO_GLORA_B1), "grad b1", 1, &g->gB1};
    rq[(*n)++] = (lk_view_req){grad_if(c, LYCO_GLORA_B2), "grad b2", 1, &g->gB2};
    rq[(*n)++] = (lk_view_req){grad_if(c, LYCO_SCALAR), "grad scalar", 0, &g->gsigma};
}

/* The activation view of t (N×C×spatial; linear: tokens×features); false when the spatial dims
   (or, linear, the leading token dims) do not collapse to one stride. t NULL: zeroed. */
static bool act_view(const lyco_call *c, const DLTensor *t, lk_act *v) {
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

static void fill_geo(const lyco_call *c, lk_geo *g) {
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

typedef struct {
    const DLTensor *t;
    const char *name;
    lk_act *v;
} act_req;

static lyco_status act_views(const lyco_call *c, const act_req *rq, int n, char *why, size_t why_len) {
    for (int i = 0; i < n; i++)
        if (!act_view(c, rq[i].t, rq[i].v)) return lk_decline(why, why_len, "%s has strides whose spatial dims do not collapse", rq[i].name);
    return LYCO_OK;
}

lyco_status lk_run_glora(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    (void)dev;
    const lyco_layer *l = &c->a->layer;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    if (l->kind != LYCO_LAYER_LINEAR && l->kind != LYCO_LAYER_CONV) return lk_decline(why, why_len, "GLoRA on a norm layer is not supported");
    if (l->kind == LYCO_LAYER_CONV && l->groups != 1) return lk_decline(why, why_len, "GLoRA on a grouped conv is not supported");
    if (c->dims.dora) return lk_decline(why, why_len, "DoRA on GLoRA has no CUDA kernel");
    const DLTensor *W = bypass ? c->bypass->weight : c->merge->weight;
    if (!W) return lk_decline(why, why_len, "GLoRA %s without the base weight W has no CUDA kernel", lyco_direction_name(c->dir));
    lk_glora_args g;
    memset(&g, 0, sizeof g);
    lk_view_req rq[24];
    int n = 0;
    fill_factors(c, &g, rq, &n);
    rq[n++] = (lk_view_req){W, "W", 1, &g.W};
    lyco_status rc;
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD:
        g.mode = (int32_t)c->merge->mode;
        rq[n++] = (lk_view_req){c->out, "out", 1, &g.out};
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        return (lyco_status)lk_glora_merge_fwd(&g, st);
    case LYCO_DIR_MERGE_BWD:
        rq[n++] = (lk_view_req){c->d_out, "d_out", 1, &g.G};
        fill_grads(c, &g, rq, &n);
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        if (!g.gA1.p && !g.gA2.p && !g.gB1.p && !g.gB2.p && !g.gsigma.p) return LYCO_OK;
        return (lyco_status)lk_glora_merge_bwd(&g, st);
    case LYCO_DIR_BYPASS_FWD: {
        const DLTensor *y0 = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? NULL : c->bypass->y0;
        act_req ar[] = {{c->bypass->x, "x", &g.x}, {y0, "y0", &g.y0}, {c->y, "y", &g.y}};
        fill_geo(c, &g.geo);
        if ((rc = lk_views(rq, n, why, why_len)) || (rc = act_views(c, ar, 3, why, why_len))) return rc;
        return (lyco_status)lk_glora_bypass_fwd(&g, st);
    }
    default: {
        act_req ar[] = {{c->bypass->x, "x", &g.x}, {c->dy, "dy", &g.dy}, {c->dx, "dx", &g.dx}, {c->dy0, "dy0", &g.dy0}};
        g.dy0_zero = c->bypass->y0 && (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? 1 : 0;
        fill_geo(c, &g.geo);
        fill_grads(c, &g, rq, &n);
        if ((rc = lk_views(rq, n, why, why_len)) || (rc = act_views(c, ar, 4, why, why_len))) return rc;
        return (lyco_status)lk_glora_bypass_bwd(&g, st);
    }
    }
}
