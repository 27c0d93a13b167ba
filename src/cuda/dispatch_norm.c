/*
 * dispatch_norm.c — Norm (train_norm; ALGORITHMS.md §2.10) on the CUDA backend:
 * Δγ = q ⊙ w_norm, Δβ = q ⊙ b_norm (q = LYCO_RANK_MASK over channels, exact; absent = 1;
 * Δβ = 0 without b_norm). Launches kern_simple.h's kernels, stream-ordered:
 *
 *   merge fwd   γ'' = γ ⊕ m·q·w_norm, β'' = β ⊕ m·q·b_norm   (lk_ew_merge on 1 × C views)
 *   merge bwd   G_w_norm = m·q·∂L/∂γ'',  G_b_norm = m·q·∂L/∂β'' (0 when ∂L/∂β'' is not given)
 *   bypass fwd  y = y0 + x̂ ⊙ (m·Δγ) + m·Δβ                   (norm.cu, one block per group)
 *   bypass bwd  dx, dy0 (norm.cu), then G_w_norm = m·q·Σ dy·x̂, G_b_norm = m·q·Σ dy per channel
 *               (lk_chan_sum over the group statistics norm.cu leaves in scratch: 2 floats
 *               per normalisation group)
 */
#include <string.h>

#include "cuda/dispatch_simple.h"

/* out = W ⊕ m·(D ⊙ q) over 1 × C views (W, D NULL: 0). */
static lyco_status ew(const lyco_call *c, const DLTensor *W, const DLTensor *D, DLTensor *out, const char *name, int mode,
                      void *st, char *why, size_t why_len) {
    lk_ew_args e;
    memset(&e, 0, sizeof e);
    lk_view_req rq[4] = {{mode == LYCO_MERGE_DELTA ? NULL : W, "gamma or beta", 0, &e.W},
                         {D, "w_norm, b_norm or its gradient", 0, &e.D},
                         {c->a->tensor[LYCO_RANK_MASK], "rank_mask", 0, &e.vec},
                         {out, name, 0, &e.out}};
    lyco_status rc = lk_views(rq, 4, why, why_len);
    if (rc) return rc;
    e.vec_exact = 1;
    e.K = 1;
    e.mode = mode;
    e.ct = (int32_t)c->dt.compute;
    e.m = c->m;
    return (lyco_status)lk_ew_merge(&e, st);
}

static lyco_status merge_fwd(const lyco_call *c, void *st, char *why, size_t why_len) {
    int mode = (int)c->merge->mode;
    lyco_status rc = ew(c, c->merge->weight, c->a->tensor[LYCO_W_NORM], c->out, "out", mode, st, why, why_len);
    if (rc || !c->out_bias) return rc;
    return ew(c, c->merge->bias, c->a->tensor[LYCO_B_NORM], c->out_bias, "out_bias", mode, st, why, why_len);
}

static lyco_status merge_bwd(const lyco_call *c, void *st, char *why, size_t why_len) {
    lyco_status rc = LYCO_OK;
    if (lyco_call_wants(c, LYCO_W_NORM))
        rc = ew(c, NULL, c->d_out, c->g->grad[LYCO_W_NORM], "grad w_norm", LYCO_MERGE_DELTA, st, why, why_len);
    if (!rc && lyco_call_wants(c, LYCO_B_NORM))
        rc = ew(c, NULL, c->d_out_bias, c->g->grad[LYCO_B_NORM], "grad b_norm", LYCO_MERGE_DELTA, st, why, why_len);
    return rc;
}

/* Views and geometry of a bypass call. */
static lyco_status norm_args(const lyco_call *c, lk_norm_args *n, char *why, size_t why_len) {
    const lyco_bypass_args *b = c->bypass;
    const lyco_layer *l = &c->a->layer;
    bool fwd = c->dir == LYCO_DIR_BYPASS_FWD;
    const DLTensor *y0 = fwd && !(b->flags & LYCO_BYPASS_DELTA_ONLY) ? b->y0 : NULL;
    memset(n, 0, sizeof *n);
    lk_view_req rq[9] = {{b->x, "x", lk_act_split(c, b->x), &n->x},
                         {y0, "y0", lk_act_split(c, y0), &n->y0},
                         {c->y, "y", lk_act_split(c, c->y), &n->y},
                         {c->dy, "dy", lk_act_split(c, c->dy), &n->dy},
                         {c->dx, "dx", lk_act_split(c, c->dx), &n->dx},
                         {c->dy0, "dy0", lk_act_split(c, c->dy0), &n->dy0},
                         {c->a->tensor[LYCO_W_NORM], "w_norm", 0, &n->wn},
                         {c->a->tensor[LYCO_B_NORM], "b_norm", 0, &n->bn},
                         {c->a->tensor[LYCO_RANK_MASK], "rank_mask", 0, &n->q}};
    lyco_status rc = lk_views(rq, 9, why, why_len);
    if (rc) return rc;
    n->group = l->norm_kind == LYCO_NORM_GROUP;
    n->C = c->dims.O;
    n->cg = n->group ? n->C / l->norm_groups : n->C;
    n->ngroups = n->group ? n->x.rows / n->cg : n->x.rows;
    n->delta_only = (b->flags & LYCO_BYPASS_DELTA_ONLY) ? 1 : 0;
    n->ct = (int32_t)c->dt.compute;
    n->m = c->m;
    n->eps = l->norm_eps;
    if (!n->group && n->x.cols != n->C)
        return lk_decline(why, why_len, "LayerNorm x has %lld features in its last dims; expected C = %lld", (long long)n->x.cols, (long long)n->C);
    return LYCO_OK;
}

/* G = m·q·Σ dy·(x̂ or 1) per channel. */
static lyco_status param_grad(const lyco_call *c, const lk_norm_args *n, lyco_slot slot, const char *name, void *st,
                              char *why, size_t why_len) {
    lk_chan_args s;
    memset(&s, 0, sizeof s);
    lk_view_req rq[1] = {{c->g->grad[slot], name, 0, &s.out}};
    lyco_status rc = lk_views(rq, 1, why, why_len);
    if (rc) return rc;
    s.A = n->dy;
    if (slot == LYCO_W_NORM) {
        s.B = n->x;
        s.stats = n->stats;
        s.rows_per_stat = n->group ? n->cg : 1;
    }
    s.by_col = !n->group;
    s.K = 1;
    s.nch = n->C;
    s.vec = n->q;
    s.scale = c->m;
    s.ct = n->ct;
    return (lyco_status)lk_chan_sum(&s, st);
}

static lyco_status bypass_bwd(const lyco_call *c, void *st, char *why, size_t why_len) {
    lk_norm_args n;
    lyco_status rc = norm_args(c, &n, why, why_len);
    if (rc) return rc;
    bool ww = lyco_call_wants(c, LYCO_W_NORM), wb = lyco_call_wants(c, LYCO_B_NORM);
    void *stats = NULL;
    if (ww && (rc = (lyco_status)lk_scratch_alloc(&stats, sizeof(float) * 2 * (size_t)(n.ngroups > 0 ? n.ngroups : 1), st))) return rc;
    n.stats = stats;
    rc = (lyco_status)lk_norm_bwd(&n, st);
    if (!rc && ww) rc = param_grad(c, &n, LYCO_W_NORM, "grad w_norm", st, why, why_len);
    if (!rc && wb) rc = param_grad(c, &n, LYCO_B_NORM, "grad b_norm", st, why, why_len);
    lyco_status rf = (lyco_status)lk_scratch_free(stats, st);
    return rc ? rc : rf;
}

lyco_status lk_run_norm(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    (void)dev;
    if (c->a->layer.kind != LYCO_LAYER_NORM) return lk_decline(why, why_len, "Norm needs a norm layer (LayerNorm or GroupNorm)");
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD: return merge_fwd(c, st, why, why_len);
    case LYCO_DIR_MERGE_BWD: return merge_bwd(c, st, why, why_len);
    case LYCO_DIR_BYPASS_FWD: {
        lk_norm_args n;
        lyco_status rc = norm_args(c, &n, why, why_len);
        return rc ? rc : (lyco_status)lk_norm_fwd(&n, st);
    }
    default: return bypass_bwd(c, st, why, why_len);
    }
}
