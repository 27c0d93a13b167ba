/*
 * dense_bypass.c — DoRA in bypass on the CUDA backend for the algorithms without a factored
 * DoRA-bypass kernel: LoHa and LoKr (linear and conv) and LoCon on conv layers
 * (ALGORITHMS.md §1.6: y = y0 + op(x, W'' − W)). The CPU twin is src/cpu/dense_bypass.c; the
 * linear LoCon form that never builds ΔW is dora_bypass.cu.
 *
 * The call is replayed as a merge of the same adapter through the family's own dispatcher (merge
 * weight = the bypass's W, mode delta, upstream's merge-scale flag cleared), which writes
 * E = W'' − W (O × I·K, fp32 scratch; DoRA's norms and scale applied as a merge applies them);
 * then conv_direct.cu's products through the base layer's op, with E used as stored (E_exact):
 *
 *   forward : y = y0 + op(x, E)                      (lk_conv_fwd; x, y0 rounded to CT as loaded)
 *   backward: dx = opᵀ(dy, E)                        (lk_conv_dgrad)
 *             ∂L/∂W'' = opW(x, dy)  (fp32 scratch)   (lk_conv_wgrad)
 *             the adapter gradients (σs's and dora_scale's too): the family's merge backward
 *             given ∂L/∂W'', run with compute dtype fp32 on copies of the adapter tensors (and W)
 *             rounded to the call's compute dtype CT — so every operand has its CT value while
 *             neither ∂L/∂W'' (an fp32 intermediate of ours, not a caller tensor) nor DoRA's ∂L/∂V
 *             is rounded to CT (with CT's rounding points the fp32-adapter rows would be at 1e5
 *             ULP; the CPU's cpu_delta.g_exact does the same). Copies are made only of fp32
 *             tensors under a 16-bit CT (16-bit ones already hold CT values).
 *   dy0 = dy (DELTA_ONLY: 0).
 *
 * Not here: LoCon's bypass rank mask (it masks rank activations, which a merge of the adapter
 * cannot express — declined by dispatch_locon.c), Tucker LoCon with DoRA (no merge kernel).
 * Extra memory (stream-ordered scratch, freed before return): E (O·I·K floats); backward also
 * ∂L/∂W'' (O·I·K floats) and the rounded copies (their element counts).
 * conv_direct.cu runs on CUDA cores (FFMA); these rows are small in the models that use them.
 */
#include <string.h>

#include "cuda/dispatch_simple.h"

#define MAXD 8 /* dims of a tensor the rounded copies take (DLPack tensors here have at most 5) */

typedef lyco_status (*lk_family_run)(const lyco_call *, const lk_device *, void *, char *, size_t);

/* A dense fp32 device tensor over scratch p with the given shape (strides NULL: contiguous). */
static DLTensor dev_f32(void *p, int32_t ndim, int64_t *shape, DLDevice on) {
    DLTensor t = lyco_host_tensor(p, LYCO_F32, ndim, shape);
    t.device = on;
    return t;
}

/* The scratch held by one call, freed in one place. */
typedef struct {
    void *p[LYCO_SLOT_COUNT + 3];
    int n;
    void *st;
} scratch_set;

static lyco_status scratch(scratch_set *s, size_t floats, float **out) {
    void *p = NULL;
    lyco_status rc = (lyco_status)lk_scratch_alloc(&p, sizeof(float) * (floats > 0 ? floats : 1), s->st);
    if (rc) return rc;
    s->p[s->n++] = p;
    *out = p;
    return LYCO_OK;
}

static lyco_status scratch_free_all(scratch_set *s, lyco_status rc) {
    for (int i = 0; i < s->n; i++) {
        lyco_status rf = (lyco_status)lk_scratch_free(s->p[i], s->st);
        if (!rc) rc = rf;
    }
    s->n = 0;
    return rc;
}

/* copy = RN_ct(t) in fp32, t's shape, contiguous (shape storage: shp, LYCO_MAX_DIMS entries). */
static lyco_status rounded_copy(const DLTensor *t, const char *name, int ct, scratch_set *s, int64_t *shp, DLTensor *copy,
                                char *why, size_t why_len) {
    float *p;
    lyco_status rc = scratch(s, (size_t)lyco_numel(t), &p);
    if (rc) return rc;
    for (int d = 0; d < t->ndim; d++) shp[d] = t->shape[d];
    *copy = dev_f32(p, t->ndim, shp, t->device);
    /* any split at which both views collapse (the copy is contiguous: every split does) */
    int splits[4] = {t->ndim - 1, 1, 0, t->ndim};
    for (int i = 0; i < 4; i++) {
        lk_view v;
        if (splits[i] >= 0 && splits[i] <= t->ndim && lk_mk_view(t, splits[i], &v))
            return lk_copy_or_zero(copy, name, t, splits[i], ct, s->st, why, why_len);
    }
    return lk_decline(why, why_len, "%s has strides whose dims do not collapse to a matrix", name);
}

/* The bypass call seen as a merge of its adapter in direction dir: out (forward, E) or d_out
   (backward, ∂L/∂W''), both fp32 O × I·K. */
static lyco_call as_merge(const lyco_call *c, const lyco_adapter *a, lyco_merge_args *ma, lyco_direction dir, DLTensor *buf) {
    memset(ma, 0, sizeof *ma);
    ma->weight = c->bypass->weight;
    ma->mode = LYCO_MERGE_DELTA;
    lyco_call mc = *c;
    mc.dir = dir;
    mc.a = a;
    mc.merge = ma;
    mc.out = dir == LYCO_DIR_MERGE_FWD ? buf : NULL;
    mc.d_out = dir == LYCO_DIR_MERGE_BWD ? buf : NULL;
    mc.out_bias = NULL;
    mc.d_out_bias = NULL;
    mc.bypass = NULL;
    mc.y = mc.dx = mc.dy0 = NULL;
    mc.dy = NULL;
    if (dir == LYCO_DIR_MERGE_FWD) mc.g = NULL;
    return mc;
}

/* E = W'' − W into fresh scratch (fp32 O × I·K), through the family's merge forward. */
static lyco_status build_E(const lyco_call *c, const lk_device *dev, lk_family_run run, scratch_set *s, int64_t *shp, DLTensor *E,
                           char *why, size_t why_len) {
    float *p;
    shp[0] = c->dims.O;
    shp[1] = c->dims.I * c->dims.K;
    lyco_status rc = scratch(s, (size_t)(shp[0] * shp[1]), &p);
    if (rc) return rc;
    *E = dev_f32(p, 2, shp, c->bypass->x->device);
    lyco_adapter a2 = *c->a;
    a2.flags &= ~LYCO_FLAG_UPSTREAM_MERGE_SCALE;
    lyco_merge_args ma;
    lyco_call mc = as_merge(c, &a2, &ma, LYCO_DIR_MERGE_FWD, E);
    return run(&mc, dev, s->st, why, why_len);
}

/* The family's merge backward from G = ∂L/∂W'' (fp32), compute dtype fp32 over CT-rounded copies. */
static lyco_status merge_bwd_from(const lyco_call *c, const lk_device *dev, lk_family_run run, scratch_set *s, DLTensor *G,
                                  char *why, size_t why_len) {
    int ct = (int)c->dt.compute;
    bool narrow = c->dt.compute != LYCO_F32;
    lyco_adapter a2 = *c->a;
    a2.flags &= ~LYCO_FLAG_UPSTREAM_MERGE_SCALE;
    int64_t shp[LYCO_SLOT_COUNT + 1][MAXD];
    DLTensor cp[LYCO_SLOT_COUNT + 1];
    lyco_status rc;
    for (int k = 0; k < LYCO_SLOT_COUNT && narrow; k++) {
        const DLTensor *t = a2.tensor[k];
        if (k == LYCO_MODULE_MASK || !t || lyco_dtype_of(t) != LYCO_F32 || lyco_numel(t) == 0 || t->ndim > MAXD) continue;
        if ((rc = rounded_copy(t, lyco_slot_name((lyco_slot)k), ct, s, shp[k], &cp[k], why, why_len))) return rc;
        a2.tensor[k] = &cp[k];
    }
    lyco_merge_args ma;
    lyco_call mc = as_merge(c, &a2, &ma, LYCO_DIR_MERGE_BWD, G);
    const DLTensor *W = c->bypass->weight;
    if (narrow && W && lyco_dtype_of(W) == LYCO_F32 && W->ndim <= MAXD) {
        if ((rc = rounded_copy(W, "W", ct, s, shp[LYCO_SLOT_COUNT], &cp[LYCO_SLOT_COUNT], why, why_len))) return rc;
        ma.weight = &cp[LYCO_SLOT_COUNT];
    }
    mc.dt.compute = LYCO_F32;
    return run(&mc, dev, s->st, why, why_len);
}

static bool wants_any_grad(const lyco_call *c) {
    for (int k = 0; c->g && k < LYCO_SLOT_COUNT; k++)
        if (c->g->grad[k]) return true;
    return false;
}

lyco_status lk_bypass_dense(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len, lk_family_run run) {
    const lyco_bypass_args *b = c->bypass;
    bool fwd = c->dir == LYCO_DIR_BYPASS_FWD, delta_only = b->flags & LYCO_BYPASS_DELTA_ONLY;
    int ct = (int)c->dt.compute;
    lyco_status rc;
    if (!fwd && (rc = lk_copy_or_zero(c->dy0, "dy0", delta_only ? NULL : c->dy, lk_act_split(c, c->dy0), ct, st, why, why_len)))
        return rc;
    if (fwd ? !c->y : (!c->dx && !wants_any_grad(c))) return LYCO_OK;
    scratch_set s = {.n = 0, .st = st};
    int64_t eshp[2], gshp[2];
    DLTensor E, G;
    if ((rc = build_E(c, dev, run, &s, eshp, &E, why, why_len))) return scratch_free_all(&s, rc);
    lk_conv_args v;
    memset(&v, 0, sizeof v);
    lk_conv_geom_of(c, &v.g);
    v.E = lk_f32_view(E.data, eshp[0], eshp[1]);
    v.E_exact = 1;
    v.m = 1.0;
    v.ct = (int32_t)ct;
    if (fwd) {
        const DLTensor *y0 = delta_only ? NULL : b->y0;
        lk_view_req rq[3] = {{b->x, "x", lk_act_split(c, b->x), &v.x}, {y0, "y0", lk_act_split(c, y0), &v.y0}, {c->y, "y", lk_act_split(c, c->y), &v.y}};
        if (!(rc = lk_views(rq, 3, why, why_len))) rc = (lyco_status)lk_conv_fwd(&v, st);
        return scratch_free_all(&s, rc);
    }
    lk_view_req rq[3] = {{b->x, "x", lk_act_split(c, b->x), &v.x}, {c->dy, "dy", lk_act_split(c, c->dy), &v.dy}, {c->dx, "dx", lk_act_split(c, c->dx), &v.dx}};
    if ((rc = lk_views(rq, 3, why, why_len)) || (rc = (lyco_status)lk_conv_dgrad(&v, st))) return scratch_free_all(&s, rc);
    if (!wants_any_grad(c)) return scratch_free_all(&s, LYCO_OK);
    float *gp;
    gshp[0] = eshp[0];
    gshp[1] = eshp[1];
    if ((rc = scratch(&s, (size_t)(gshp[0] * gshp[1]), &gp))) return scratch_free_all(&s, rc);
    G = dev_f32(gp, 2, gshp, b->x->device);
    v.gE = lk_f32_view(gp, gshp[0], gshp[1]);
    if ((rc = (lyco_status)lk_conv_wgrad(&v, st))) return scratch_free_all(&s, rc);
    return scratch_free_all(&s, merge_bwd_from(c, dev, run, &s, &G, why, why_len));
}
