/*
 * dense_bypass.c — bypass through a built E = W'' − W, for the algorithms whose ΔW has no low-rank
 * factored form: LoHa and LoKr conv bypass, with or without DoRA, and their DoRA in bypass on linear
 * layers; Full conv bypass (with diff_b: + m·diff_b, and m·Σ dy for its gradient), IA3 input-mode
 * conv bypass, GLoRA conv bypass without rank masks (ALGORITHMS.md §1.4, §1.6: y = y0 + op(x, W'' − W)). LoCon has its own factored
 * paths (locon.c, locon_dora.c), which never build ΔW. The merge driver builds E once, in fp32
 * (delta mode: ΔW̄ rows generated in cache, m, σs and DoRA's norms and scale as a merge applies them —
 * the same values as merge_fwd), and the bypass is GEMMs against it:
 *
 *   linear  forward : y = y0 + x·Eᵀ                            (per tile of TB tokens)
 *           backward: dx = dy·E;  ∂L/∂W'' = dyᵀ·x              (per block of OB rows of E, tokens in order)
 *   conv    forward : yᵀ = y0ᵀ + E·Xtᵀ per image and tile of TB output positions (Xt: im2col rows)
 *           backward: dXt = dyᵀ-tile·E, col2im into the run's image (runs of tiles, added in run order);
 *                     ∂L/∂W'' = Σ dy-rows·Xt (per block of OB rows of E: images and tiles in order)
 *   then the adapter gradients (σs's and dora_scale's too) from the merge driver's backward given
 *   ∂L/∂W'' — with cpu_delta.g_exact: that G is an fp32 intermediate, not a caller tensor, so
 *   neither G nor DoRA's ∂L/∂V is rounded to the compute dtype (merge_bwd's rounding points would
 *   put the fp32-adapter rows at 1e5 ULP).
 *
 * The merge calls see the bypass call as a merge of the same adapter (merge weight = the bypass's
 * base W, mode delta, output E in fp32) with upstream's merge-scale flag cleared (bypass has no
 * such compatibility mode). Every operand is rounded to the compute dtype as loaded; sums in fp32.
 * Results do not depend on the thread count (every sum has a fixed owner and order).
 *
 * Extra memory: E and, backward, ∂L/∂W'' (O·I·K floats each); backward x and dy in fp32 (their
 * element counts); per thread TB·(I·K + O) floats (+ OB·… blocks); conv: one fp32 image forward,
 * runs × one image for dx.
 */
#include <stdlib.h>

#include "cpu.h"
#include "im2col.h"

#define TB 64
#define WBLK_FLOATS 65536

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* columns of E: I/groups·K (grouped conv: Full only), I·K, or I */
static int64_t e_cols(const lyco_call *c) {
    int64_t groups = c->a->layer.kind == LYCO_LAYER_CONV && c->a->layer.groups > 1 ? c->a->layer.groups : 1;
    return c->dims.I / groups * c->dims.K;
}

/* The merge driver on the bypass call seen as a merge, with the fp32 buffer buf (O × e_cols) as
   its output E = W'' − W (forward) or as ∂L/∂W'' (backward: the adapter gradients; g_exact — that G
   is an fp32 intermediate of ours, so no rounding point of the merge backward applies). */
static lyco_status through_merge(const lyco_call *c, const cpu_delta *dl, lyco_direction dir, float *buf) {
    int64_t shape[2] = {c->dims.O, e_cols(c)};
    DLTensor t = lyco_host_tensor(buf, LYCO_F32, 2, shape);
    lyco_adapter a2 = *c->a;
    a2.flags &= ~LYCO_FLAG_UPSTREAM_MERGE_SCALE;
    lyco_merge_args ma;
    memset(&ma, 0, sizeof ma);
    ma.weight = c->bypass->weight;
    ma.mode = LYCO_MERGE_DELTA;
    lyco_call mc = *c;
    mc.dir = dir;
    mc.a = &a2;
    mc.merge = &ma;
    mc.out = dir == LYCO_DIR_MERGE_FWD ? &t : NULL;
    mc.d_out = dir == LYCO_DIR_MERGE_BWD ? &t : NULL;
    mc.out_bias = NULL;
    mc.d_out_bias = NULL;
    if (dir == LYCO_DIR_MERGE_FWD) mc.g = NULL;
    cpu_delta d2 = *dl;
    d2.c = &mc;
    d2.g_exact = dir == LYCO_DIR_MERGE_BWD;
    return dir == LYCO_DIR_MERGE_FWD ? cpu_merge_fwd(&mc, &d2) : cpu_merge_bwd(&mc, &d2);
}

static lyco_status fwd(const lyco_call *c, const float *E) {
    const lyco_bypass_args *b = c->bypass;
    lyco_dtype T = c->dt.compute;
    int64_t N = c->tokens, I = c->dims.I, O = c->dims.O, ntiles = (N + TB - 1) / TB;
    bool add = b->y0 && !(b->flags & LYCO_BYPASS_DELTA_ONLY);
    cpu_view xv, y0v, yv;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&yv, c->y, c->y->ndim - 1);
    if (add) cpu_view_init(&y0v, b->y0, b->y0->ndim - 1);
    int64_t per = TB * (I + O);
    float *work = calloc((size_t)cpu_threads() * (size_t)per + 1, sizeof(float));
    if (!work) return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
#pragma omp parallel for schedule(static)
    for (int64_t tile = 0; tile < ntiles; tile++) {
        float *x = work + (size_t)cpu_thread_id() * (size_t)per, *y = x + TB * I;
        int64_t t0 = tile * TB, nt = min64(TB, N - t0);
        for (int64_t t = 0; t < nt; t++) cpu_load(&xv, t0 + t, 0, I, T, x + t * I);
        if (add)
            for (int64_t t = 0; t < nt; t++) cpu_load(&y0v, t0 + t, 0, O, T, y + t * O);
        cpu_gemm_nt(nt, O, I, x, I, E, I, y, O, add);
        for (int64_t t = 0; t < nt; t++) cpu_store(&yv, t0 + t, 0, O, y + t * O);
    }
    free(work);
    return LYCO_OK;
}

static lyco_status bwd(const lyco_call *c, const cpu_delta *dl, const float *E) {
    const lyco_bypass_args *b = c->bypass;
    lyco_dtype T = c->dt.compute;
    int64_t N = c->tokens, I = c->dims.I, O = c->dims.O, ntiles = (N + TB - 1) / TB;
    int64_t OB = WBLK_FLOATS / (I > 0 ? I : 1), nb;
    if (OB < 1) OB = 1;
    nb = (O + OB - 1) / OB;
    bool delta_only = b->flags & LYCO_BYPASS_DELTA_ONLY;
    cpu_view xv, dyv, dxv, dy0v;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&dyv, c->dy, c->dy->ndim - 1);
    if (c->dx) cpu_view_init(&dxv, c->dx, c->dx->ndim - 1);
    if (c->dy0 && !delta_only) cpu_view_init(&dy0v, c->dy0, c->dy0->ndim - 1);
    if (c->dy0 && delta_only) cpu_zero_all(c->dy0); /* y = Δ(x) alone does not read y0 */
    /* x and dy in fp32 once (every block of ∂L/∂W'' reads all tokens) */
    float *X = malloc(sizeof(float) * (size_t)(N * I + 1)), *G = malloc(sizeof(float) * (size_t)(N * O + 1));
    float *GE = calloc((size_t)(O * I) + 1, sizeof(float)), *dx = malloc(sizeof(float) * ((size_t)cpu_threads() * (size_t)(TB * I) + 1));
    lyco_status st = LYCO_OK;
    if (!X || !G || !GE || !dx) {
        st = lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
        goto done;
    }
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; t++) {
        cpu_load(&xv, t, 0, I, T, X + t * I);
        cpu_load(&dyv, t, 0, O, T, G + t * O);
        if (c->dy0 && !delta_only) cpu_store(&dy0v, t, 0, O, G + t * O);
    }
    if (c->dx) {
#pragma omp parallel for schedule(static)
        for (int64_t tile = 0; tile < ntiles; tile++) {
            float *d = dx + (size_t)cpu_thread_id() * (size_t)(TB * I);
            int64_t t0 = tile * TB, nt = min64(TB, N - t0);
            cpu_gemm_nn(nt, I, O, G + t0 * O, O, E, I, d, I, false);  /* dx = dy·E */
            for (int64_t t = 0; t < nt; t++) cpu_store(&dxv, t0 + t, 0, I, d + t * I);
        }
    }
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nb; blk++) {                            /* ∂L/∂W'' = dyᵀ·x */
        int64_t o0 = blk * OB, nr = min64(OB, O - o0);
        for (int64_t t0 = 0; t0 < N; t0 += TB)
            cpu_gemm_tn(nr, I, min64(TB, N - t0), G + t0 * O + o0, O, X + t0 * I, I, GE + o0 * I, I, t0 > 0);
    }
    if (c->g) st = through_merge(c, dl, LYCO_DIR_MERGE_BWD, GE);
done:
    free(X);
    free(G);
    free(GE);
    free(dx);
    return st;
}

/* ---- conv layers: im2col rows per image and tile of output positions ---- */

/* The layer's geometry with the channels of one group (Full on a grouped conv: E is O × I/g·K; group
   k's outputs [k·O/g, (k+1)·O/g) read input channels [k·I/g, (k+1)·I/g)); groups = 1 otherwise. */
static int64_t conv_groups(const lyco_call *c, conv_geo *g) {
    int64_t groups = c->a->layer.groups > 1 ? c->a->layer.groups : 1;
    conv_geo_init(c, 0, g);
    g->I /= groups;
    g->O /= groups;
    return groups;
}

/* m·Δb (O floats) of an algorithm with a bias delta (Full's diff_b), or NULL (none / out of memory: *st) */
static float *bias_delta(const lyco_call *c, const cpu_delta *dl, lyco_status *st) {
    *st = LYCO_OK;
    if (!dl->bias || c->dropped) return NULL;
    float *db = malloc(sizeof(float) * (size_t)(c->dims.O + 1));
    if (!db) {
        *st = lyco_fail(LYCO_ERR_NOMEM, "cpu bypass: out of memory");
        return NULL;
    }
    dl->bias(dl, db);
    for (int64_t o = 0; o < c->dims.O; o++) db[o] *= (float)c->m;
    return db;
}

static lyco_status conv_fwd(const lyco_call *c, const cpu_delta *dl, const float *E) {
    const lyco_bypass_args *b = c->bypass;
    lyco_dtype T = c->dt.compute;
    conv_geo g;
    int64_t groups = conv_groups(c, &g), Ig = g.I, Og = g.O, I = Ig * groups;
    int64_t IK = g.I * g.K, O = Og * groups, ntiles = (g.sout + TB - 1) / TB;
    bool add = b->y0 && !(b->flags & LYCO_BYPASS_DELTA_ONLY);
    cpu_view xv, y0v, yv;
    cpu_view_init(&xv, b->x, 2);
    cpu_view_init(&yv, c->y, 2);
    if (add) cpu_view_init(&y0v, b->y0, 2);
    int64_t per = TB * IK + O * TB;
    lyco_status st;
    float *db = bias_delta(c, dl, &st);
    if (st) return st;
    float *img = malloc(sizeof(float) * (size_t)(I * g.sin + 1)), *work = malloc(sizeof(float) * ((size_t)cpu_threads() * (size_t)per + 1));
    if (!img || !work) {
        free(img);
        free(work);
        free(db);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu conv bypass: out of memory");
    }
    for (int64_t n = 0; n < c->tokens; n++) {
        for (int64_t ch = 0; ch < I; ch++) cpu_load(&xv, n * I + ch, 0, g.sin, T, img + ch * g.sin);
#pragma omp parallel for schedule(static)
        for (int64_t tile = 0; tile < ntiles; tile++) {
            float *Xt = work + (size_t)cpu_thread_id() * (size_t)per, *yT = Xt + TB * IK;
            int64_t p0 = tile * TB, np = min64(TB, g.sout - p0);
            if (add)
                for (int64_t o = 0; o < O; o++) cpu_load(&y0v, n * O + o, p0, np, T, yT + o * np);
            for (int64_t k = 0; k < groups; k++) { /* yᵀ (+)= E·Xtᵀ, group by group */
                im2col(&g, img + k * Ig * g.sin, p0, np, Xt);
                cpu_gemm_nt(Og, np, IK, E + k * Og * IK, IK, Xt, IK, yT + k * Og * np, np, add);
            }
            if (db)
                for (int64_t o = 0; o < O; o++)
                    for (int64_t p = 0; p < np; p++) yT[o * np + p] += db[o];
            for (int64_t o = 0; o < O; o++) cpu_store(&yv, n * O + o, p0, np, yT + o * np);
        }
    }
    free(img);
    free(work);
    free(db);
    return LYCO_OK;
}

static lyco_status conv_bwd(const lyco_call *c, const cpu_delta *dl, const float *E) {
    const lyco_bypass_args *b = c->bypass;
    lyco_dtype T = c->dt.compute;
    conv_geo g;
    int64_t groups = conv_groups(c, &g), Ig = g.I, Og = g.O, I = Ig * groups;
    int64_t N = c->tokens, IK = g.I * g.K, O = Og * groups, ntiles = (g.sout + TB - 1) / TB;
    /* ∂L/∂W'' blocks (within one group): each re-runs im2col over every image, so take up to 64 rows
       per block (the im2col copies then cost ≤ 1/64 of the block's products), fewer to give every
       thread one */
    int64_t nt = cpu_threads(), OB = (O + nt - 1) / nt, bpg, nb;
    if (OB > 64) OB = 64;
    if (OB > Og) OB = Og;
    if (OB < 1) OB = 1;
    bpg = (Og + OB - 1) / OB;
    nb = bpg * groups;
    bool delta_only = b->flags & LYCO_BYPASS_DELTA_ONLY;
    cpu_view xv, dyv, dxv, dy0v;
    cpu_view_init(&xv, b->x, 2);
    cpu_view_init(&dyv, c->dy, 2);
    if (c->dx) cpu_view_init(&dxv, c->dx, 2);
    if (c->dy0 && !delta_only) cpu_view_init(&dy0v, c->dy0, 2);
    if (c->dy0 && delta_only) cpu_zero_all(c->dy0); /* y = Δ(x) alone does not read y0 */
    size_t imgn = (size_t)(I * g.sin), outn = (size_t)(O * g.sout);
    int runs = cpu_runs(ntiles, CPU_RUNS_BIG);
    /* x and dy of every image in fp32 once (each block of ∂L/∂W'' reads them all) */
    float *X = malloc(sizeof(float) * ((size_t)N * imgn + 1)), *G = malloc(sizeof(float) * ((size_t)N * outn + 1));
    float *GE = calloc((size_t)(O * IK) + 1, sizeof(float)), *work = malloc(sizeof(float) * ((size_t)cpu_threads() * (size_t)(2 * TB * IK) + 1));
    float *dimg = c->dx ? calloc((size_t)runs * imgn + 1, sizeof(float)) : NULL;
    lyco_status st = LYCO_OK;
    if (!X || !G || !GE || !work || (c->dx && !dimg)) {
        st = lyco_fail(LYCO_ERR_NOMEM, "cpu conv bypass: out of memory");
        goto done;
    }
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        for (int64_t ch = 0; ch < I; ch++) cpu_load(&xv, n * I + ch, 0, g.sin, T, X + (size_t)n * imgn + (size_t)(ch * g.sin));
        for (int64_t o = 0; o < O; o++) {
            float *gr = G + (size_t)n * outn + (size_t)(o * g.sout);
            cpu_load(&dyv, n * O + o, 0, g.sout, T, gr);
            if (c->dy0 && !delta_only) cpu_store(&dy0v, n * O + o, 0, g.sout, gr);
        }
    }
    for (int64_t n = 0; c->dx && n < N; n++) {                          /* dx: dXt = dyᵀ·E, col2im */
        memset(dimg, 0, sizeof(float) * (size_t)runs * imgn);
        const float *Gn = G + (size_t)n * outn;
#pragma omp parallel for schedule(static)
        for (int k = 0; k < runs; k++) {
            float *dXt = work + (size_t)cpu_thread_id() * (size_t)(2 * TB * IK);
            for (int64_t tile = cpu_run_start(ntiles, runs, k); tile < cpu_run_start(ntiles, runs, k + 1); tile++) {
                int64_t p0 = tile * TB, np = min64(TB, g.sout - p0);
                for (int64_t q = 0; q < groups; q++) {
                    cpu_gemm_tn(np, IK, Og, Gn + (size_t)(q * Og * g.sout) + p0, g.sout, E + q * Og * IK, IK, dXt, IK, false);
                    col2im_add(&g, dXt, p0, np, dimg + (size_t)k * imgn + (size_t)(q * Ig * g.sin));
                }
            }
        }
        for (int k = 1; k < runs; k++)
            for (size_t i = 0; i < imgn; i++) dimg[i] += dimg[(size_t)k * imgn + i];
        for (int64_t ch = 0; ch < I; ch++) cpu_store(&dxv, n * I + ch, 0, g.sin, dimg + ch * g.sin);
    }
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nb; blk++) {                            /* ∂L/∂W'' = Σ dy·Xt */
        float *Xt = work + (size_t)cpu_thread_id() * (size_t)(2 * TB * IK);
        int64_t q = blk / bpg, o0 = q * Og + (blk % bpg) * OB, nr = min64(OB, (q + 1) * Og - o0);
        bool first = true;
        for (int64_t n = 0; n < N; n++)
            for (int64_t p0 = 0; p0 < g.sout; p0 += TB) {
                int64_t np = min64(TB, g.sout - p0);
                im2col(&g, X + (size_t)n * imgn + (size_t)(q * Ig * g.sin), p0, np, Xt);
                cpu_gemm_nn(nr, IK, np, G + (size_t)n * outn + (size_t)(o0 * g.sout) + p0, g.sout, Xt, IK, GE + o0 * IK, IK, !first);
                first = false;
            }
    }
    if (c->g) st = through_merge(c, dl, LYCO_DIR_MERGE_BWD, GE);
    if (!st && c->g && dl->bias_bwd && !c->dropped) { /* m·∂L/∂b'' = m·Σ dy per channel, images and positions in order */
        float *Gb = malloc(sizeof(float) * (size_t)(O + 1));
        if (!Gb) {
            st = lyco_fail(LYCO_ERR_NOMEM, "cpu conv bypass: out of memory");
            goto done;
        }
        for (int64_t o = 0; o < O; o++) {
            double acc = 0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t p = 0; p < g.sout; p++) acc += G[(size_t)n * outn + (size_t)(o * g.sout + p)];
            Gb[o] = (float)(c->m * acc);
        }
        st = dl->bias_bwd(dl, Gb);
        free(Gb);
    }
done:
    free(X);
    free(G);
    free(GE);
    free(work);
    free(dimg);
    return st;
}

lyco_status cpu_bypass_dense(const lyco_call *c, const cpu_delta *dl) {
    int64_t IK = e_cols(c);
    float *E = malloc(sizeof(float) * (size_t)(c->dims.O * IK + 1));
    if (!E) return lyco_fail(LYCO_ERR_NOMEM, "cpu bypass: out of memory for W'' − W (%lld × %lld floats)", (long long)c->dims.O, (long long)IK);
    lyco_status st = through_merge(c, dl, LYCO_DIR_MERGE_FWD, E);
    bool conv = c->a->layer.kind == LYCO_LAYER_CONV;
    if (st == LYCO_OK) {
        if (c->dir == LYCO_DIR_BYPASS_FWD) st = conv ? conv_fwd(c, dl, E) : fwd(c, E);
        else st = conv ? conv_bwd(c, dl, E) : bwd(c, dl, E);
    }
    free(E);
    return st;
}
