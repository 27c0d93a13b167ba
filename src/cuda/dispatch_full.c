/*
 * dispatch_full.c — Full ("diff") on the CUDA backend (ALGORITHMS.md §2.9): ΔW̄ = diff
 * (O × I/g·K), Δb = diff_b (O; 0 when absent); no scale, σs or masks. Launches kern_simple.h's
 * kernels, stream-ordered:
 *
 *   merge fwd   out = W ⊕ m·diff, out_bias = b ⊕ m·diff_b      (lk_ew_merge, one pass each)
 *   merge bwd   G_diff = m·∂L/∂W'',  G_diff_b = m·∂L/∂b'' (0 when ∂L/∂b'' is not given)
 *   bypass fwd  y = y0 + m·op(x, diff) + m·diff_b              (conv_direct.cu; linear or conv,
 *               groups included)
 *   bypass bwd  dx = m·opᵀ(dy, diff), G_diff = m·opW(x, dy), G_diff_b = m·Σ dy per channel
 *               (lk_chan_sum), dy0 = dy (DELTA_ONLY: 0)
 */
#include <string.h>

#include "cuda/dispatch_simple.h"

/* out = W ⊕ m·D elementwise (W or D NULL: 0) over views of the given split. */
static lyco_status ew(const lyco_call *c, const DLTensor *W, const DLTensor *D, DLTensor *out, const char *name, int split,
                      int mode, void *st, char *why, size_t why_len) {
    lk_ew_args e;
    memset(&e, 0, sizeof e);
    lk_view_req rq[3] = {{mode == LYCO_MERGE_DELTA ? NULL : W, "W or bias", split, &e.W}, {D, "diff or diff_b", split, &e.D}, {out, name, split, &e.out}};
    lyco_status rc = lk_views(rq, 3, why, why_len);
    if (rc) return rc;
    e.K = 1;
    e.mode = mode;
    e.ct = (int32_t)c->dt.compute;
    e.m = c->m;
    return (lyco_status)lk_ew_merge(&e, st);
}

static lyco_status merge_fwd(const lyco_call *c, void *st, char *why, size_t why_len) {
    int mode = (int)c->merge->mode;
    lyco_status rc = ew(c, c->merge->weight, c->a->tensor[LYCO_DIFF], c->out, "out", 1, mode, st, why, why_len);
    if (rc || !c->out_bias) return rc;
    return ew(c, c->merge->bias, c->a->tensor[LYCO_DIFF_B], c->out_bias, "out_bias", 0, mode, st, why, why_len);
}

static lyco_status merge_bwd(const lyco_call *c, void *st, char *why, size_t why_len) {
    lyco_status rc = LYCO_OK;
    if (lyco_call_wants(c, LYCO_DIFF))
        rc = ew(c, NULL, c->d_out, c->g->grad[LYCO_DIFF], "grad diff", 1, LYCO_MERGE_DELTA, st, why, why_len);
    if (!rc && lyco_call_wants(c, LYCO_DIFF_B))
        rc = ew(c, NULL, c->d_out_bias, c->g->grad[LYCO_DIFF_B], "grad diff_b", 0, LYCO_MERGE_DELTA, st, why, why_len);
    return rc;
}

static lyco_status bypass_fwd(const lyco_call *c, void *st, char *why, size_t why_len) {
    const lyco_bypass_args *b = c->bypass;
    lk_conv_args v;
    memset(&v, 0, sizeof v);
    const DLTensor *y0 = (b->flags & LYCO_BYPASS_DELTA_ONLY) ? NULL : b->y0;
    lk_view_req rq[5] = {{b->x, "x", lk_act_split(c, b->x), &v.x},
                         {c->a->tensor[LYCO_DIFF], "diff", 1, &v.E},
                         {c->a->tensor[LYCO_DIFF_B], "diff_b", 0, &v.bias},
                         {y0, "y0", lk_act_split(c, y0), &v.y0},
                         {c->y, "y", lk_act_split(c, c->y), &v.y}};
    lyco_status rc = lk_views(rq, 5, why, why_len);
    if (rc) return rc;
    lk_conv_geom_of(c, &v.g);
    v.m = c->m;
    v.ct = (int32_t)c->dt.compute;
    return (lyco_status)lk_conv_fwd(&v, st);
}

static lyco_status bypass_bwd(const lyco_call *c, void *st, char *why, size_t why_len) {
    const lyco_bypass_args *b = c->bypass;
    int ct = (int)c->dt.compute;
    bool delta = b->flags & LYCO_BYPASS_DELTA_ONLY;
    lyco_status rc = lk_copy_or_zero(c->dy0, "dy0", delta ? NULL : c->dy, lk_act_split(c, c->dy0), ct, st, why, why_len);
    if (rc) return rc;
    lk_conv_args v;
    memset(&v, 0, sizeof v);
    lk_view_req rq[5] = {{b->x, "x", lk_act_split(c, b->x), &v.x},
                         {c->a->tensor[LYCO_DIFF], "diff", 1, &v.E},
                         {c->dy, "dy", lk_act_split(c, c->dy), &v.dy},
                         {c->dx, "dx", lk_act_split(c, c->dx), &v.dx},
                         {lyco_call_wants(c, LYCO_DIFF) ? c->g->grad[LYCO_DIFF] : NULL, "grad diff", 1, &v.gE}};
    if ((rc = lk_views(rq, 5, why, why_len))) return rc;
    lk_conv_geom_of(c, &v.g);
    v.m = c->m;
    v.ct = (int32_t)ct;
    if ((rc = (lyco_status)lk_conv_dgrad(&v, st)) || (rc = (lyco_status)lk_conv_wgrad(&v, st))) return rc;
    if (!lyco_call_wants(c, LYCO_DIFF_B)) return LYCO_OK;
    lk_chan_args s;
    memset(&s, 0, sizeof s);
    lk_view_req rb[1] = {{c->g->grad[LYCO_DIFF_B], "grad diff_b", 0, &s.out}};
    if ((rc = lk_views(rb, 1, why, why_len))) return rc;
    s.A = v.dy;
    s.by_col = c->a->layer.kind != LYCO_LAYER_CONV;
    s.K = 1;
    s.nch = c->dims.O;
    s.scale = c->m;
    s.ct = (int32_t)ct;
    return (lyco_status)lk_chan_sum(&s, st);
}

lyco_status lk_run_full(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    (void)dev;
    const lyco_layer *l = &c->a->layer;
    if (l->kind != LYCO_LAYER_LINEAR && l->kind != LYCO_LAYER_CONV) return lk_decline(why, why_len, "Full on a norm layer is not supported");
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD: return merge_fwd(c, st, why, why_len);
    case LYCO_DIR_MERGE_BWD: return merge_bwd(c, st, why, why_len);
    case LYCO_DIR_BYPASS_FWD: return bypass_fwd(c, st, why, why_len);
    default: return bypass_bwd(c, st, why, why_len);
    }
}
