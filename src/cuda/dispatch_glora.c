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

lyco_status lk_run_glora(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
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
        return (lyco_status)lk_glora_merge_fwd(&g, dev, st);
    case LYCO_DIR_MERGE_BWD:
        rq[n++] = (lk_view_req){c->d_out, "d_out", 1, &g.G};
        fill_grads(c, &g, rq, &n);
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        if (!g.gA1.p && !g.gA2.p && !g.gB1.p && !g.gB2.p && !g.gsigma.p) return LYCO_OK;
        return (lyco_status)lk_glora_merge_bwd(&g, dev, st);
    case LYCO_DIR_BYPASS_FWD: {
        const DLTensor *y0 = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? NULL : c->bypass->y0;
        lk_act_req ar[] = {{c->bypass->x, "x", &g.x}, {y0, "y0", &g.y0}, {c->y, "y", &g.y}};
        lk_fill_geo(c, &g.geo);
        if ((rc = lk_views(rq, n, why, why_len)) || (rc = lk_act_views(c, ar, 3, why, why_len))) return rc;
        return (lyco_status)lk_glora_bypass_fwd(&g, dev, st);
    }
    default: {
        lk_act_req ar[] = {{c->bypass->x, "x", &g.x}, {c->dy, "dy", &g.dy}, {c->dx, "dx", &g.dx}, {c->dy0, "dy0", &g.dy0}};
        g.dy0_zero = c->bypass->y0 && (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? 1 : 0;
        lk_fill_geo(c, &g.geo);
        fill_grads(c, &g, rq, &n);
        if ((rc = lk_views(rq, n, why, why_len)) || (rc = lk_act_views(c, ar, 4, why, why_len))) return rc;
        return (lyco_status)lk_glora_bypass_bwd(&g, dev, st);
    }
    }
}
