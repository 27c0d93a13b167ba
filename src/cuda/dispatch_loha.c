/*
 * dispatch_loha.c — LoHa (ALGORITHMS.md §2.2) on the CUDA backend: turns a validated call into
 * kern_loha.h's argument struct and launches loha.cu's / loha_bypass.cu's kernels: all four
 * directions, linear and conv (groups = 1; ΔW̄ flattened to O × I·K), plain and Tucker, any
 * ranks (the two terms may differ), the output-row rank mask, σs, the multiplier, the upstream
 * s² merge scale (LYCO_FLAG_UPSTREAM_MERGE_SCALE: s' = s², σs dropped and its gradient 0, merge
 * directions only), DoRA on both axes in the merge directions.
 * Views: Ā_t = hada_w*_a (O × r) or, Tucker, the transposed view of the r × O factor (its
 * gradient likewise); B̄_t = hada_w*_b as r × (everything after dim 0); Tucker cores r × (r·k).
 * Bypass activations as N × C × spatial views (linear: tokens × features), dy0 = RN(dy) (or 0
 * when y0 was given with LYCO_BYPASS_DELTA_ONLY) through lk_copy_round.
 * Forms: bf16 linear bypass where lk_loha_fs_tc_wanted's rule favours it: loha_fs.cu's
 * face-splitting form on the tensor cores. 16-bit compute, not Tucker, ranks ≤ 128: loha_tc.cu's
 * tensor-core merge forward and backward and (linear) bypass forward and backward. Otherwise: loha_fs.cu's face-splitting
 * where lk_loha_fs_wanted's rule favours it (every row of the case table; the bench shape), else
 * loha_bypass.cu's ΔW tiles; LYCO_CUDA_LOHA_LEGACY=1 forces the ΔW-tile path (the first
 * H200-verified one) everywhere.
 * Declines, with the reason: DoRA in the bypass directions (the API question is open for every
 * family), norm layers, grouped conv, operands whose dims do not collapse to the views above.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/backend.h"
#include "cuda/dispatch_simple.h"
#include "cuda/kern_loha.h"

static const DLTensor *want(const lyco_call *c, lyco_slot s) { return lyco_call_wants(c, s) ? c->g->grad[s] : NULL; }

/* v viewed transposed (rows ↔ columns); the 16-byte vector flag no longer holds. */
static void transpose(lk_view *v) {
    int64_t t = v->s0;
    v->s0 = v->s1;
    v->s1 = t;
    t = v->rows;
    v->rows = v->cols;
    v->cols = t;
    v->flags &= LK_UNALIGNED;
}

/* LYCO_CUDA_LOHA_LEGACY=1: the bypass takes the ΔW-tile path (loha_bypass.cu) at every shape. */
static bool legacy(void) {
    const char *e = getenv("LYCO_CUDA_LOHA_LEGACY");
    return e && e[0] == '1';
}

/* Face-splitting (loha_fs.cu) where its rule favours it, unless the legacy path is forced. */
static bool use_fs(const lk_loha_args *a) { return !a->legacy && lk_loha_fs_wanted(a); }

static bool is_bypass(const lyco_call *c) { return c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD; }

/* Factors and scalars into a->L; requests appended to rq. */
static void fill_factors(const lyco_call *c, lk_loha_args *a, lk_view_req *rq, int *n) {
    const lyco_adapter *ad = c->a;
    lk_loha *L = &a->L;
    bool compat = !is_bypass(c) && (ad->flags & LYCO_FLAG_UPSTREAM_MERGE_SCALE);
    L->ct = (int32_t)c->dt.compute;
    L->O = c->dims.O;
    L->I = c->dims.I;
    L->K = c->dims.K;
    L->IK = c->dims.I * c->dims.K;
    L->r1 = c->dims.r;
    L->r2 = c->dims.r2 > 0 ? c->dims.r2 : c->dims.r;
    L->tucker = c->dims.tucker ? 1 : 0;
    L->s = compat ? c->s * c->s : c->s;
    L->m = c->m;
    a->sigma_zero = compat ? 1 : 0;
    rq[(*n)++] = (lk_view_req){ad->tensor[LYCO_HADA_W1_A], "hada_w1_a", 1, &L->A1};
    rq[(*n)++] = (lk_view_req){ad->tensor[LYCO_HADA_W2_A], "hada_w2_a", 1, &L->A2};
    rq[(*n)++] = (lk_view_req){ad->tensor[LYCO_HADA_W1_B], "hada_w1_b", 1, &L->B1};
    rq[(*n)++] = (lk_view_req){ad->tensor[LYCO_HADA_W2_B], "hada_w2_b", 1, &L->B2};
    rq[(*n)++] = (lk_view_req){L->tucker ? ad->tensor[LYCO_HADA_T1] : NULL, "hada_t1", 1, &L->T1};
    rq[(*n)++] = (lk_view_req){L->tucker ? ad->tensor[LYCO_HADA_T2] : NULL, "hada_t2", 1, &L->T2};
    rq[(*n)++] = (lk_view_req){ad->tensor[LYCO_RANK_MASK], "rank_mask", 0, &L->mask};
    rq[(*n)++] = (lk_view_req){compat ? NULL : ad->tensor[LYCO_SCALAR], "scalar", 0, &L->sigma};
}

static void fill_grads(const lyco_call *c, lk_loha_args *a, lk_view_req *rq, int *n) {
    rq[(*n)++] = (lk_view_req){want(c, LYCO_HADA_W1_A), "grad hada_w1_a", 1, &a->gA1};
    rq[(*n)++] = (lk_view_req){want(c, LYCO_HADA_W2_A), "grad hada_w2_a", 1, &a->gA2};
    rq[(*n)++] = (lk_view_req){want(c, LYCO_HADA_W1_B), "grad hada_w1_b", 1, &a->gB1};
    rq[(*n)++] = (lk_view_req){want(c, LYCO_HADA_W2_B), "grad hada_w2_b", 1, &a->gB2};
    rq[(*n)++] = (lk_view_req){a->L.tucker ? want(c, LYCO_HADA_T1) : NULL, "grad hada_t1", 1, &a->gT1};
    rq[(*n)++] = (lk_view_req){a->L.tucker ? want(c, LYCO_HADA_T2) : NULL, "grad hada_t2", 1, &a->gT2};
    rq[(*n)++] = (lk_view_req){want(c, LYCO_SCALAR), "grad scalar", 0, &a->gsigma};
}

/* After lk_views: Tucker's A factors (and their gradients) seen as O × r. */
static void orient(lk_loha_args *a) {
    if (!a->L.tucker) return;
    transpose(&a->L.A1);
    transpose(&a->L.A2);
    if (a->gA1.p) transpose(&a->gA1);
    if (a->gA2.p) transpose(&a->gA2);
}

static bool any_grad(const lk_loha_args *a) {
    return a->gA1.p || a->gA2.p || a->gB1.p || a->gB2.p || a->gT1.p || a->gT2.p || a->gsigma.p || a->dora.grad_d.p;
}

/* dy0 = RN(dy), or 0 when y did not read y0 (LYCO_BYPASS_DELTA_ONLY). */
static lyco_status write_dy0(const lyco_call *c, int ct, void *st, char *why, size_t why_len) {
    if (!c->dy0) return LYCO_OK;
    bool delta_only = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) != 0;
    lk_view dst, src;
    if (!lk_mk_view(c->dy0, lk_last_split(c->dy0), &dst) || !lk_mk_view(c->dy, lk_last_split(c->dy), &src))
        return lk_decline(why, why_len, "%s has strides whose dims do not collapse", "dy or dy0");
    return (lyco_status)lk_copy_round(&dst, delta_only ? NULL : &src, ct, st);
}

lyco_status lk_run_loha(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    const lyco_layer *l = &c->a->layer;
    if (l->kind != LYCO_LAYER_LINEAR && l->kind != LYCO_LAYER_CONV) return lk_decline(why, why_len, "LoHa on a norm layer is not supported");
    if (l->kind == LYCO_LAYER_CONV && l->groups != 1)
        return lk_decline(why, why_len, "LoHa on a grouped conv (groups = %lld) is not supported", (long long)l->groups);
    if (is_bypass(c) && c->dims.dora) return lk_bypass_dense(c, dev, st, why, why_len, lk_run_loha);
    lk_loha_args a;
    memset(&a, 0, sizeof a);
    lk_view_req rq[24];
    int n = 0;
    lyco_status rc;
    fill_factors(c, &a, rq, &n);
    a.legacy = legacy() ? 1 : 0;
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD:
        lk_fill_dora(c, &a.dora, rq, &n);
        a.mode = (int32_t)c->merge->mode;
        rq[n++] = (lk_view_req){c->merge->mode != LYCO_MERGE_DELTA || c->dims.dora ? c->merge->weight : NULL, "W", 1, &a.W};
        rq[n++] = (lk_view_req){c->out, "out", 1, &a.out};
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        orient(&a);
        return (lyco_status)lk_loha_merge_fwd(&a, dev, st);
    case LYCO_DIR_MERGE_BWD:
        lk_fill_dora(c, &a.dora, rq, &n);
        fill_grads(c, &a, rq, &n);
        rq[n++] = (lk_view_req){c->dims.dora ? c->merge->weight : NULL, "W", 1, &a.W};
        rq[n++] = (lk_view_req){c->d_out, "d_out", 1, &a.G};
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        orient(&a);
        if (!any_grad(&a)) return LYCO_OK;
        return (lyco_status)lk_loha_merge_bwd(&a, dev, st);
    case LYCO_DIR_BYPASS_FWD: {
        const DLTensor *y0 = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? NULL : c->bypass->y0;
        lk_act_req ar[] = {{c->bypass->x, "x", &a.x}, {y0, "y0", &a.y0}, {c->y, "y", &a.y}};
        a.T = c->tokens;
        lk_fill_geo(c, &a.geo);
        if ((rc = lk_views(rq, n, why, why_len)) || (rc = lk_act_views(c, ar, 3, why, why_len))) return rc;
        orient(&a);
        int done = 0;
        if (lk_loha_fs_tc_wanted(&a, dev)) return (lyco_status)lk_loha_fs_tc_bypass_fwd(&a, dev, st);
        if ((rc = (lyco_status)lk_loha_tc_bypass_fwd(&a, dev, st, &done)) || done) return rc;
        if (use_fs(&a)) return (lyco_status)lk_loha_fs_bypass_fwd(&a, st);
        return (lyco_status)lk_loha_bypass_fwd(&a, dev, st);
    }
    default: {
        lk_act_req ar[] = {{c->bypass->x, "x", &a.x}, {c->dy, "dy", &a.dy}, {c->dx, "dx", &a.dx}};
        a.T = c->tokens;
        lk_fill_geo(c, &a.geo);
        fill_grads(c, &a, rq, &n);
        if ((rc = lk_views(rq, n, why, why_len)) || (rc = lk_act_views(c, ar, 3, why, why_len))) return rc;
        orient(&a);
        if ((rc = write_dy0(c, a.L.ct, st, why, why_len))) return rc;
        int done = 0;
        if (lk_loha_fs_tc_wanted(&a, dev)) return (lyco_status)lk_loha_fs_tc_bypass_bwd(&a, dev, st);
        if ((rc = (lyco_status)lk_loha_tc_bypass_bwd(&a, dev, st, &done)) || done) return rc;
        if (use_fs(&a)) return (lyco_status)lk_loha_fs_bypass_bwd(&a, st);
        return (lyco_status)lk_loha_bypass_bwd(&a, dev, st);
    }
    }
}
