/*
 * compose.c — CUDA paths composed from the families' own kernels, run at fp32 compute over
 * copies of the operands rounded to the call's compute dtype CT (so every operand has its CT value
 * while the fp32 intermediates between the pieces are not rounded again):
 *
 * 1. DoRA in bypass for the algorithms without a factored DoRA-bypass kernel — LoHa and LoKr
 *    (linear and conv) and LoCon on conv layers, Tucker included (ALGORITHMS.md §1.6:
 *    y = y0 + op(x, W'' − W)). The CPU twin is src/cpu/dense_bypass.c; the linear LoCon form that
 *    never builds ΔW is dora_bypass.cu. The call is replayed as a merge of the same adapter through
 *    the family's own dispatcher (merge weight = the bypass's W, mode delta, upstream's merge-scale
 *    flag cleared), which writes E = W'' − W (O × I·K, fp32 scratch; DoRA's norms and scale applied
 *    as a merge applies them); then the products through the base layer's op (x, y0, dy rounded
 *    to CT as loaded, E used as stored):
 *      forward : y = y0 + op(x, E)
 *      backward: dx = opᵀ(dy, E),  ∂L/∂W'' = opW(x, dy)  (fp32 scratch)
 *    Linear layers with bf16 compute: gemm.cu's tensor-core product (mma.sync), E as 2 bf16 pieces
 *    (3 when the output is fp32) whose sum is E to 2^-16 (2^-24) relative, the partial products
 *    chained in fp32 (lk_gemm's base_f32); ∂L/∂W'' = dyᵀ·x in one product (x, dy exact in CT).
 *    Conv layers, fp16 and fp32 compute (and LYCO_CUDA_DENSE_FFMA=1): conv_direct.cu's CUDA-core
 *    products (E_exact).
 *                the adapter gradients (σs's and dora_scale's too): the family's merge backward
 *                given ∂L/∂W'' — neither ∂L/∂W'' (an fp32 intermediate of ours, not a caller tensor)
 *                nor DoRA's ∂L/∂V rounded to CT (with CT's rounding points the fp32-adapter rows
 *                would be at 1e5 ULP; the CPU's cpu_delta.g_exact does the same);
 *      dy0 = dy (DELTA_ONLY: 0).
 *    LoCon's bypass rank mask q (it masks the rank activations, which a merge's output-row mask
 *    cannot say) is folded into up's columns, Ū = RN_CT(up)·q (exact in fp32 for 16-bit CT), and
 *    up's gradient scaled back by q.
 * 2. Tucker LoCon with DoRA in the merge directions: P = M ×₂ D (r × I·K, fp32, locon_conv.cu's
 *    lkc_tucker_p), then the plain LoCon DoRA merge (lowrank.cu) with down := P; backward: that
 *    merge's backward with down's gradient G_P into fp32 scratch, chained to d_mid and d_down
 *    (lkc_tucker_chain). The DoRA merge backward's ∂L/∂V is then not rounded to CT (a rounding
 *    point of eager's chain, NUMERICS.md §1.6: here nearer the oracle).
 *
 * The prepared adapter (prepare()): copies, rounded to CT, of the fp32 tensors (W and ∂L/∂W'' too)
 * under a 16-bit CT (16-bit ones already hold CT values); none when CT is fp32.
 * Extra memory (stream-ordered scratch, freed before return): the copies (their element counts);
 * 1: E (O·I·K floats), backward also ∂L/∂W'' (O·I·K floats) and, with a mask, up's gradient;
 *    tensor-core route: the pieces (O·I bf16 each), R (O·I floats), two chain buffers (tokens·max(O, I)
 *    floats each);
 * 2: P and, backward, G_P (r·I·K floats each).
 * Every product costs 2·tokens·O·I·K flops a direction (W'' − W is full-rank under DoRA).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/dispatch_simple.h"
#include "cuda/kern_gemm.h"
#include "cuda/kern_conv.h"

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
    void *p[LYCO_SLOT_COUNT + 16];
    int n;
    void *st;
} scratch_set;

static lyco_status scratch(scratch_set *s, size_t floats, float **out) {
    void *p = NULL;
    *out = NULL;
    if (s->n == (int)(sizeof s->p / sizeof s->p[0])) return lyco_fail(LYCO_ERR_BACKEND, "cuda compose: more scratch blocks than planned");
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

/* copy: fresh fp32 scratch of t's shape, contiguous (shape storage: shp, MAXD entries). */
static lyco_status scratch_like(const DLTensor *t, scratch_set *s, int64_t *shp, DLTensor *copy) {
    float *p = NULL;
    lyco_status rc = scratch(s, (size_t)lyco_numel(t), &p);
    if (rc) return rc;
    for (int d = 0; d < t->ndim; d++) shp[d] = t->shape[d];
    *copy = dev_f32(p, t->ndim, shp, t->device);
    return LYCO_OK;
}

/* copy = RN_ct(t) in fp32, t's shape, contiguous (shape storage: shp, MAXD entries). */
static lyco_status rounded_copy(const DLTensor *t, const char *name, int ct, scratch_set *s, int64_t *shp, DLTensor *copy,
                                char *why, size_t why_len) {
    lyco_status rc = scratch_like(t, s, shp, copy);
    if (rc) return rc;
    /* any split at which both views collapse (the copy is contiguous: every split does) */
    int splits[4] = {t->ndim - 1, 1, 0, t->ndim};
    for (int i = 0; i < 4; i++) {
        lk_view v;
        if (splits[i] >= 0 && splits[i] <= t->ndim && lk_mk_view(t, splits[i], &v))
            return lk_copy_or_zero(copy, name, t, splits[i], ct, s->st, why, why_len);
    }
    return lk_decline(why, why_len, "%s has strides whose dims do not collapse to a matrix", name);
}

static void at_fp32(const lyco_call *c, lyco_call *mc);

/* The bypass call seen as a merge of adapter a in direction dir: out (forward, E) or d_out
   (backward, ∂L/∂W''), both fp32 O × I·K, at fp32 compute (a holds CT values: prepare()). */
static lyco_call as_merge(const lyco_call *c, const lyco_adapter *a, const DLTensor *W, const lyco_grads *g, lyco_merge_args *ma,
                          lyco_direction dir, DLTensor *buf) {
    memset(ma, 0, sizeof *ma);
    ma->weight = W;
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
    mc.g = dir == LYCO_DIR_MERGE_BWD ? g : NULL;
    at_fp32(c, &mc);
    return mc;
}

/* The adapter a composed call reads: every fp32 tensor under a 16-bit CT (and W, and G = ∂L/∂W''
   of a merge backward) replaced by a copy rounded to CT; for a bypass, LoCon's rank mask q (on the
   rank activations) folded into up's columns, Ū = RN_CT(up)·q (an exact product in fp32 for
   16-bit CT), the mask slot cleared. */
typedef struct {
    lyco_adapter a;
    const DLTensor *W, *G;
    DLTensor cp[LYCO_SLOT_COUNT + 2];
    int64_t shp[LYCO_SLOT_COUNT + 2][MAXD];
    const DLTensor *fold_q;   /* the folded mask (up's gradient is scaled by it), or NULL */
} prepared;

/* out = RN_out(RN_ct(src)·q[column]) over views split at 1 (q exact; ct fp32: src used as stored) */
static lyco_status scale_columns(const DLTensor *out, const DLTensor *src, const DLTensor *q, int ct, void *st, char *why, size_t why_len) {
    lk_ew_args e;
    memset(&e, 0, sizeof e);
    lk_view_req rq[3] = {{src, "lora_up", 1, &e.D}, {q, "rank_mask", 0, &e.vec}, {out, "grad lora_up", 1, &e.out}};
    lyco_status rc = lk_views(rq, 3, why, why_len);
    if (rc) return rc;
    e.vec_exact = 1;
    e.K = 1;
    e.mode = LYCO_MERGE_DELTA;
    e.ct = (int32_t)ct;
    e.m = 1.0;
    return (lyco_status)lk_ew_merge(&e, st);
}

static lyco_status prepare(const lyco_call *c, const DLTensor *W, const DLTensor *G, bool bypass, scratch_set *s, prepared *p,
                           char *why, size_t why_len) {
    int ct = (int)c->dt.compute;
    bool narrow = c->dt.compute != LYCO_F32;
    lyco_status rc;
    p->a = *c->a;
    if (bypass) p->a.flags &= ~LYCO_FLAG_UPSTREAM_MERGE_SCALE; /* bypass has no such compatibility mode */
    p->W = W;
    p->G = G;
    p->fold_q = bypass && c->a->algo == LYCO_ALGO_LOCON ? c->a->tensor[LYCO_RANK_MASK] : NULL;
    for (int k = 0; k < LYCO_SLOT_COUNT + 2; k++) {
        const DLTensor *t = k < LYCO_SLOT_COUNT ? p->a.tensor[k] : k == LYCO_SLOT_COUNT ? p->W : p->G;
        bool fold = p->fold_q && k == LYCO_LORA_UP;
        if (k == LYCO_MODULE_MASK || !t || lyco_numel(t) == 0 || t->ndim > MAXD) continue;
        if (!fold && (!narrow || lyco_dtype_of(t) != LYCO_F32)) continue;
        const char *name = k < LYCO_SLOT_COUNT ? lyco_slot_name((lyco_slot)k) : k == LYCO_SLOT_COUNT ? "W" : "d_out";
        if (fold) rc = scratch_like(t, s, p->shp[k], &p->cp[k]);   /* Ū = RN_CT(up)·q in one pass */
        if (fold && !rc) rc = scale_columns(&p->cp[k], t, p->fold_q, ct, s->st, why, why_len);
        if (!fold) rc = rounded_copy(t, name, ct, s, p->shp[k], &p->cp[k], why, why_len);
        if (rc) return rc;
        if (k < LYCO_SLOT_COUNT) p->a.tensor[k] = &p->cp[k];
        else if (k == LYCO_SLOT_COUNT) p->W = &p->cp[k];
        else p->G = &p->cp[k];
    }
    if (p->fold_q) p->a.tensor[LYCO_RANK_MASK] = NULL;
    return LYCO_OK;
}

/* A composed call runs at fp32 compute (its operands hold CT values: prepare()). */
static void at_fp32(const lyco_call *c, lyco_call *mc) {
    if (c->dt.compute != LYCO_F32) mc->fp32_mode = LYCO_FP32_FULL; /* TF32 is an opt-in of fp32-compute calls only */
    mc->dt.compute = LYCO_F32;
}

/* E = W'' − W into fresh scratch (fp32 O × I·K), through the family's merge forward. */
static lyco_status build_E(const lyco_call *c, const lk_device *dev, lk_family_run run, const prepared *p, scratch_set *s, int64_t *shp,
                           DLTensor *E, char *why, size_t why_len) {
    float *buf = NULL;
    shp[0] = c->dims.O;
    shp[1] = c->dims.I * c->dims.K;
    lyco_status rc = scratch(s, (size_t)(shp[0] * shp[1]), &buf);
    if (rc) return rc;
    *E = dev_f32(buf, 2, shp, c->bypass->x->device);
    lyco_merge_args ma;
    lyco_call mc = as_merge(c, &p->a, p->W, NULL, &ma, LYCO_DIR_MERGE_FWD, E);
    return run(&mc, dev, s->st, why, why_len);
}

/* The adapter gradients from G = ∂L/∂W'' (fp32) through the family's merge backward; with a folded
   mask, up's gradient lands in fp32 scratch first and is scaled by q into the caller's tensor. */
static lyco_status merge_bwd_from(const lyco_call *c, const lk_device *dev, lk_family_run run, const prepared *p, scratch_set *s,
                                  DLTensor *G, char *why, size_t why_len) {
    lyco_grads g2 = *c->g;
    DLTensor gu;
    int64_t shp[MAXD];
    const DLTensor *gU = c->g->grad[LYCO_LORA_UP];
    lyco_status rc;
    if (p->fold_q && gU) {
        float *buf = NULL;
        if (gU->ndim > MAXD) return lk_decline(why, why_len, "grad lora_up has %d dims (at most %d)", (int)gU->ndim, MAXD);
        if ((rc = scratch(s, (size_t)lyco_numel(gU), &buf))) return rc;
        for (int d = 0; d < gU->ndim; d++) shp[d] = gU->shape[d];
        gu = dev_f32(buf, gU->ndim, shp, gU->device);
        g2.grad[LYCO_LORA_UP] = &gu;
    }
    lyco_merge_args ma;
    lyco_call mc = as_merge(c, &p->a, p->W, &g2, &ma, LYCO_DIR_MERGE_BWD, G);
    if ((rc = run(&mc, dev, s->st, why, why_len))) return rc;
    if (p->fold_q && gU) return scale_columns(gU, &gu, p->fold_q, LYCO_F32, s->st, why, why_len);
    return LYCO_OK;
}

static bool wants_any_grad(const lyco_call *c) {
    for (int k = 0; c->g && k < LYCO_SLOT_COUNT; k++)
        if (c->g->grad[k]) return true;
    return false;
}

/* ---- the products with E on the tensor cores (linear layers, bf16 compute; gemm.cu) ---- */

/* out = W − D (mode UNMERGE) or D (W absent, mode DELTA), fp32 arithmetic, rounded once to out's dtype. */
static lyco_status ew_exact(lk_view W, lk_view D, lk_view out, void *st) {
    lk_ew_args e;
    memset(&e, 0, sizeof e);
    e.W = W;
    e.D = D;
    e.out = out;
    e.K = 1;
    e.mode = W.p ? LYCO_MERGE_UNMERGE : LYCO_MERGE_DELTA;
    e.ct = (int32_t)LYCO_F32;
    e.m = 1.0;
    return (lyco_status)lk_ew_merge(&e, st);
}

/* E (fp32 O × I) as n ≤ 3 bf16 pieces whose sum is E to ~2^-8n relative: E1 = RN(E), R = E − E1
   (exact in fp32), E2 = RN(R), E3 = RN(R − E2). */
static lyco_status split_E(lk_view E, int n, scratch_set *s, lk_view *pc) {
    int64_t O = E.rows, I = E.cols;
    float *buf = NULL, *R = NULL;
    lyco_status rc;
    for (int i = 0; i < n; i++) {
        if ((rc = scratch(s, (size_t)(O * I + 1) / 2 + 8, &buf))) return rc;
        pc[i] = lk_compact_view(buf, O, I, LYCO_BF16);
    }
    if ((rc = ew_exact((lk_view){0}, E, pc[0], s->st))) return rc;
    if (n < 2) return LYCO_OK;
    if ((rc = scratch(s, (size_t)(O * I), &R))) return rc;
    lk_view Rv = lk_f32_view(R, O, I);
    if ((rc = ew_exact(E, pc[0], Rv, s->st)) || (rc = ew_exact((lk_view){0}, Rv, pc[1], s->st))) return rc;
    return n < 3 ? LYCO_OK : ew_exact(Rv, pc[1], pc[2], s->st);
}

/* out = RN_out(RN_CT(base) + Σ_i A·B_iᵀ), the pieces smallest first, chained in fp32 through S0/S1
   (M × N fp32 scratch each; base p NULL = none). */
static lyco_status tc_chain(const lk_device *dev, void *st, lk_gemm_args g, const lk_view *B, int n, lk_view base, lk_view out,
                            float *S0, float *S1) {
    lk_view S[2] = {lk_f32_view(S0, g.M, g.N), lk_f32_view(S1, g.M, g.N)};
    lyco_status rc;
    for (int i = n - 1; i >= 0; i--) {
        g.B = B[i];
        g.base = i == n - 1 ? base : S[(n - 2 - i) & 1];
        g.base_f32 = i == n - 1 ? 0 : 1;
        g.out = i == 0 ? out : S[(n - 1 - i) & 1];
        if ((rc = (lyco_status)lk_gemm(&g, dev, st))) return rc;
    }
    return LYCO_OK;
}

/* Whether the linear products go to the tensor cores: bf16 compute, every product within gemm.cu's
   limits (LYCO_CUDA_DENSE_FFMA=1: never, the CUDA-core products of conv_direct.cu instead). */
static bool tc_route(const lyco_call *c, const lk_device *dev, const lk_conv_args *v) {
    const char *ffma = getenv("LYCO_CUDA_DENSE_FFMA");
    if ((ffma && ffma[0] == '1') || c->a->layer.kind == LYCO_LAYER_CONV || c->dt.compute != LYCO_BF16) return false;
    int64_t T = c->tokens, O = v->E.rows, I = v->E.cols;
    lk_view pb = lk_compact_view(NULL, O, I, LYCO_BF16);
    if (c->dir == LYCO_DIR_BYPASS_FWD) {
        lk_gemm_args f = lk_gemm_product(LYCO_BF16, v->x, 0, pb, 0, T, O, I);
        return lk_gemm_fits(&f, dev);
    }
    lk_gemm_args d = lk_gemm_product(LYCO_BF16, v->dy, 0, pb, 1, T, I, O), w = lk_gemm_product(LYCO_BF16, v->dy, 1, v->x, 1, O, I, T);
    return lk_gemm_fits(&d, dev) && lk_gemm_fits(&w, dev);
}

/* number of bf16 pieces of E a product feeding out needs: 2 for a 16-bit out (2^-16 ≪ its ULP), else 3 */
static int pieces_for(lk_view out) { return out.dt == (int32_t)LYCO_F32 ? 3 : 2; }

/* y = y0 + x·Eᵀ, dx = dy·E, ∂L/∂W'' = dyᵀ·x on the tensor cores (E in bf16 pieces; x, dy, y0
   rounded to CT as staged). gE: fp32 O × I, p NULL = not wanted. */
static lyco_status tc_products(const lyco_call *c, const lk_device *dev, scratch_set *s, lk_view E, const lk_view *xv,
                               const lk_view *y0, const lk_view *y, const lk_view *dy, const lk_view *dx, lk_view gE) {
    int64_t T = c->tokens, O = E.rows, I = E.cols, wide = O > I ? O : I;
    lk_view pc[3];
    float *S0 = NULL, *S1 = NULL;
    lyco_status rc;
    const lk_view none = {0};
    bool fwd = c->dir == LYCO_DIR_BYPASS_FWD;
    const lk_view *out = fwd ? y : dx;
    if (out->p) {
        int n = pieces_for(*out);
        if ((rc = split_E(E, n, s, pc)) || (rc = scratch(s, (size_t)(T * wide), &S0)) || (rc = scratch(s, (size_t)(T * wide), &S1)))
            return rc;
        lk_gemm_args g = fwd ? lk_gemm_product(LYCO_BF16, *xv, 0, pc[0], 0, T, O, I) : lk_gemm_product(LYCO_BF16, *dy, 0, pc[0], 1, T, I, O);
        if ((rc = tc_chain(dev, s->st, g, pc, n, fwd ? *y0 : none, *out, S0, S1))) return rc;
    }
    if (fwd || !gE.p) return LYCO_OK;
    lk_gemm_args w = lk_gemm_product(LYCO_BF16, *dy, 1, *xv, 1, O, I, T);
    w.out = gE;
    return (lyco_status)lk_gemm(&w, dev, s->st);
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
    prepared p;
    int64_t eshp[2], gshp[2];
    DLTensor E, G;
    if ((rc = prepare(c, b->weight, NULL, true, &s, &p, why, why_len)) || (rc = build_E(c, dev, run, &p, &s, eshp, &E, why, why_len))) return scratch_free_all(&s, rc);
    lk_conv_args v;
    memset(&v, 0, sizeof v);
    lk_conv_geom_of(c, &v.g);
    v.E = lk_f32_view(E.data, eshp[0], eshp[1]);
    v.E_exact = 1;
    v.m = 1.0;
    v.ct = (int32_t)ct;
    const DLTensor *y0 = fwd && !delta_only ? b->y0 : NULL;
    lk_view_req rq[5] = {{b->x, "x", lk_act_split(c, b->x), &v.x},
                         {y0, "y0", lk_act_split(c, y0), &v.y0},
                         {fwd ? c->y : NULL, "y", lk_act_split(c, c->y), &v.y},
                         {fwd ? NULL : c->dy, "dy", lk_act_split(c, c->dy), &v.dy},
                         {fwd ? NULL : c->dx, "dx", lk_act_split(c, c->dx), &v.dx}};
    if ((rc = lk_views(rq, 5, why, why_len))) return scratch_free_all(&s, rc);
    bool tc = tc_route(c, dev, &v);
    float *gp = NULL;
    if (!fwd && wants_any_grad(c)) {
        gshp[0] = eshp[0];
        gshp[1] = eshp[1];
        if ((rc = scratch(&s, (size_t)(gshp[0] * gshp[1]), &gp))) return scratch_free_all(&s, rc);
        G = dev_f32(gp, 2, gshp, b->x->device);
        v.gE = lk_f32_view(gp, gshp[0], gshp[1]);
    }
    if (tc) rc = tc_products(c, dev, &s, v.E, &v.x, &v.y0, &v.y, &v.dy, &v.dx, v.gE);
    else if (fwd) rc = (lyco_status)lk_conv_fwd(&v, st);
    else if (!(rc = (lyco_status)lk_conv_dgrad(&v, st))) rc = (lyco_status)lk_conv_wgrad(&v, st);
    if (rc || fwd || !gp) return scratch_free_all(&s, rc);
    return scratch_free_all(&s, merge_bwd_from(c, dev, run, &p, &s, &G, why, why_len));
}

/* ---- 2. Tucker LoCon with DoRA, merge directions ---- */

/* The Tucker pieces of the prepared adapter: D (r × I), M (r × r·K) at CT values (ct fp32). */
static lyco_status tucker_conv(const lyco_call *c, const lyco_adapter *a, lkc_conv *C, char *why, size_t why_len) {
    memset(C, 0, sizeof *C);
    C->L.ct = (int32_t)LYCO_F32;
    C->L.O = c->dims.O;
    C->L.r = c->dims.r;
    C->L.K = c->dims.K;
    C->L.IK = c->dims.I * c->dims.K;
    C->I = c->dims.I;
    lk_view_req rq[2] = {{a->tensor[LYCO_LORA_DOWN], "lora_down", 1, &C->L.D}, {a->tensor[LYCO_LORA_MID], "lora_mid", 1, &C->M}};
    return lk_views(rq, 2, why, why_len);
}

lyco_status lk_tucker_dora_merge(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    bool bwd = c->dir == LYCO_DIR_MERGE_BWD;
    scratch_set s = {.n = 0, .st = st};
    prepared p;
    lkc_conv C;
    float *P = NULL, *gp = NULL;
    int64_t pshp[2] = {c->dims.r, c->dims.I * c->dims.K};
    lyco_status rc;
    if (bwd && !wants_any_grad(c)) return LYCO_OK;
    if ((rc = prepare(c, c->merge->weight, bwd ? c->d_out : NULL, false, &s, &p, why, why_len)) ||
        (rc = tucker_conv(c, &p.a, &C, why, why_len)) || (rc = scratch(&s, (size_t)(pshp[0] * pshp[1]), &P)))
        return scratch_free_all(&s, rc);
    lkc_tucker_p_args ta = {.C = C, .P = P};
    if ((rc = (lyco_status)lkc_tucker_p(&ta, st))) return scratch_free_all(&s, rc);
    /* the plain LoCon DoRA merge with down := P */
    DLTensor Pt = dev_f32(P, 2, pshp, c->a->tensor[LYCO_LORA_DOWN]->device), gPt;
    lyco_adapter a3 = p.a;
    a3.tensor[LYCO_LORA_DOWN] = &Pt;
    a3.tensor[LYCO_LORA_MID] = NULL;
    lyco_merge_args ma = *c->merge;
    ma.weight = p.W;
    lyco_call mc = *c;
    mc.a = &a3;
    mc.merge = &ma;
    mc.dims.tucker = false;
    at_fp32(c, &mc);
    const DLTensor *gD = c->g ? c->g->grad[LYCO_LORA_DOWN] : NULL, *gM = c->g ? c->g->grad[LYCO_LORA_MID] : NULL;
    lyco_grads g3;
    if (bwd) {
        mc.d_out = p.G;
        g3 = *c->g;
        g3.grad[LYCO_LORA_MID] = NULL;
        g3.grad[LYCO_LORA_DOWN] = NULL;
        if (gD || gM) {
            if ((rc = scratch(&s, (size_t)(pshp[0] * pshp[1]), &gp))) return scratch_free_all(&s, rc);
            gPt = dev_f32(gp, 2, pshp, Pt.device);
            g3.grad[LYCO_LORA_DOWN] = &gPt;
        }
        mc.g = &g3;
    }
    if ((rc = lk_run_locon(&mc, dev, st, why, why_len)) || !gp) return scratch_free_all(&s, rc);
    /* G_P → d_mid, d_down */
    lkc_tucker_chain_args ch = {.C = C, .Gp = gp};
    lk_view_req rq[2] = {{gD, "grad lora_down", 1, &ch.gD}, {gM, "grad lora_mid", 1, &ch.gM}};
    if (!(rc = lk_views(rq, 2, why, why_len))) rc = (lyco_status)lkc_tucker_chain(&ch, st);
    return scratch_free_all(&s, rc);
}
