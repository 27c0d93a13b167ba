/*
 * glora.c — fused CPU kernels of GLoRA (ALGORITHMS.md §2.7), lyco's semantics (s·m·σs once):
 *
 *   ΔW̄[o, c·K+κ] = s·( Σ_i B1[o,i]·B2[i, c·K+κ] + Σ_j P[o,j,κ]·A2[j,c] ),  P[o,j,κ] = Σ_c' W[o,c',κ]·A1[c',j]
 *
 * merge fwd : ΔW̄ rows generated per row block from W's rows (needs_w) and fed to the shared
 *             driver (m, σs, modes): two small products per block, never the whole ΔW.
 * merge bwd : Γ rows → G_B1 rows (row-local), G_B2 += B1ᵀΓ, G_A2 += Pᵀ-form, G_A1 += Wᵀ·(Γ A2ᵀ)
 *             (per-thread partials, reduced in thread order).
 * bypass (linear): y = y0 + s·m·σs·( (rnd_T(x·A2ᵀ)⊙q_a·A1ᵀ)·Wᵀ + rnd_T(x·B2ᵀ)⊙q_b·B1ᵀ ) per token tile —
 *             the A path goes through the base weight (one full GEMM with W per tile, which
 *             upstream's base(x + A x) also pays); the rank activations are rounded to the compute
 *             dtype like the eager chain. Backward per tile: g = dy·s·m·σs; ∂ax = g·W, ∂hb = g·B1,
 *             ∂ha = ∂ax·A1 (masked); G_B1 += gᵀhb, G_A1 += ∂axᵀha, G_A2 += ∂haᵀx, G_B2 += ∂hbᵀx,
 *             dx = ∂ha·A2 + ∂hb·B2. Conv bypass, a dropped module and σs's bypass gradient go
 *             through E = W'' − W built by the merge driver (dense_bypass.c); the bypass's rank
 *             masks (on the rank activations) are folded into the factors there: A1 ← A1·diag(q_a),
 *             B1 ← B1·diag(q_b) (exact in fp32 for 16-bit CT), and the driver's gradients of those
 *             products are scaled back, G_A1 ← G_A1'·diag(q_a), G_B1 ← G_B1'·diag(q_b).
 * Extra memory: per thread the row-block scratch of the driver; per slot (max(threads, runs): merge
 * backward's partials belong to the driver's fixed runs, so they do not depend on the thread count;
 * the bypass backward's to the threads) r·(I·K) + 2·I·r + O·r gradient partials.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"

#define TB 32

typedef struct {
    const lyco_call *c;
    int64_t O, I, K, r, IK;
    float *A1, *A2, *B1, *B2;     /* I×r, r×I, O×r, r×IK (rounded to the compute dtype) */
    float *gB2, *gA2, *gA1;       /* partials per slot (merge: the driver's run; bypass: the thread) */
    float *gB1;                   /* O×r per slot (merge: rows owned, slot 0; bypass: partials) */
    int nt;
    int runs;                     /* merge backward: the driver's fixed runs (cpu_delta.groups) */
    int np;                       /* partial slots: max(nt, runs) */
    bool fold;                    /* dense bypass with rank masks: A1, B1 hold A1·diag(q_a), B1·diag(q_b) */
} glora_t;

static void glora_free(glora_t *g) {
    free(g->A1); free(g->A2); free(g->B1); free(g->B2);
    free(g->gB2); free(g->gA2); free(g->gA1); free(g->gB1);
}

static float qmask(const lyco_call *c, lyco_slot s, int64_t i) {
    const DLTensor *q = c->a->tensor[s];
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    return q && bypass ? lyco_load_f32(lyco_elem_at(q, i), lyco_dtype_of(q)) : 1.0f;
}

/* v (n × r, row-major) ← v·diag(q) with q the bypass rank mask in slot s */
static void scale_cols(const lyco_call *c, lyco_slot s, float *v, int64_t n, int64_t r) {
    for (int64_t j = 0; j < r; j++) {
        float q = qmask(c, s, j);
        for (int64_t i = 0; i < n; i++) v[i * r + j] *= q;
    }
}

static lyco_status glora_prepare(const lyco_call *c, glora_t *g, bool grads, bool fold) {
    memset(g, 0, sizeof *g);
    g->fold = fold;
    const lyco_dims *d = &c->dims;
    lyco_dtype T = c->dt.compute;
    g->c = c;
    g->O = d->O, g->I = d->I, g->K = d->K, g->r = d->r, g->IK = d->I * d->K;
    g->nt = cpu_threads();
    g->A1 = calloc((size_t)(g->I * g->r + 1), sizeof(float));
    g->A2 = calloc((size_t)(g->r * g->I + 1), sizeof(float));
    g->B1 = calloc((size_t)(g->O * g->r + 1), sizeof(float));
    g->B2 = calloc((size_t)(g->r * g->IK + 1), sizeof(float));
    if (!g->A1 || !g->A2 || !g->B1 || !g->B2) return lyco_fail(LYCO_ERR_NOMEM, "cpu glora: out of memory");
    cpu_load_all(c->a->tensor[LYCO_GLORA_A1], T, g->A1);
    cpu_load_all(c->a->tensor[LYCO_GLORA_A2], T, g->A2);
    cpu_load_all(c->a->tensor[LYCO_GLORA_B1], T, g->B1);
    cpu_load_all(c->a->tensor[LYCO_GLORA_B2], T, g->B2);
    if (fold) { /* q_a on the A path's rank activations, q_b on the B path's: in A1's and B1's columns
                   (products of CT values: exact in fp32 for 16-bit CT) */
        scale_cols(c, LYCO_RANK_MASK, g->A1, g->I, g->r);
        scale_cols(c, LYCO_RANK_MASK_B, g->B1, g->O, g->r);
    }
    if (grads) {
        /* merge backward: partials per fixed run of the driver (independent of the thread count),
           at most CPU_RUN_FLOATS floats of them; the bypass backward's per thread */
        int64_t per_run = g->r * (g->IK + 2 * g->I), cap = CPU_RUN_FLOATS / (per_run > 0 ? per_run : 1);
        g->runs = cpu_runs(CPU_RUNS_BIG, cap < CPU_RUNS_BIG ? cap : CPU_RUNS_BIG);
        g->np = g->nt > g->runs ? g->nt : g->runs;
        size_t nt = (size_t)g->np;
        g->gB2 = calloc(nt * (size_t)(g->r * g->IK) + 1, sizeof(float));
        g->gA2 = calloc(nt * (size_t)(g->r * g->I) + 1, sizeof(float));
        g->gA1 = calloc(nt * (size_t)(g->I * g->r) + 1, sizeof(float));
        g->gB1 = calloc(nt * (size_t)(g->O * g->r) + 1, sizeof(float));
        if (!g->gB2 || !g->gA2 || !g->gA1 || !g->gB1) return lyco_fail(LYCO_ERR_NOMEM, "cpu glora: out of memory for gradient partials");
    }
    return LYCO_OK;
}

/* P rows: P[r][j][κ] = Σ_c W[r][c·K+κ]·A1[c][j] for nr rows (nr × r × K).
   Linear (K = 1): P = W_rows · A1 in one GEMM; conv: per row, P_row (r × K) = A1ᵀ · W_row (I × K). */
static void w_a1(const glora_t *g, int64_t nr, const float *W, float *P) {
    int64_t r = g->r, I = g->I, K = g->K, IK = g->IK;
    if (K == 1) {
        cpu_gemm_nn(nr, r, I, W, IK, g->A1, r, P, r, false);
        return;
    }
    for (int64_t row = 0; row < nr; row++) cpu_gemm_tn(r, K, I, g->A1, r, W + row * IK, K, P + row * r * K, K, false);
}

/* out rows (nr × I·K, holding B1·B2) ← s·(out + A-path), the A-path being
   out[r][c·K+κ] += Σ_j P[r][j][κ]·A2[j][c]: linear one GEMM, conv per row A2ᵀ · P_row. */
static void rows(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, float *out) {
    const glora_t *g = dl->state;
    int64_t r = g->r, I = g->I, K = g->K, IK = g->IK;
    float s = (float)g->c->s;
    cpu_gemm_nn(nr, IK, r, g->B1 + o0 * r, r, g->B2, IK, out, IK, false);
    float *P = malloc(sizeof(float) * (size_t)(nr * r * K + 1));
    if (!P) { /* the driver cannot fail from here: poison rather than return a wrong ΔW */
        for (int64_t n = 0; n < nr * IK; n++) out[n] = NAN;
        return;
    }
    w_a1(g, nr, W, P);
    if (K == 1) cpu_gemm_nn(nr, I, r, P, r, g->A2, I, out, IK, true);
    else
        for (int64_t row = 0; row < nr; row++) cpu_gemm_tn(I, K, r, g->A2, I, P + row * r * K, K, out + row * IK, K, true);
    for (int64_t n = 0; n < nr * IK; n++) out[n] *= s;
    free(P);
}

/* Backward of rows(): Gs = s·G; B1/B2 gradients; the A-path through P = W×A1:
   gA2[j][c] += Σ P[r][j][κ]·Gs[r][c·K+κ];  GP[r][j][κ] = Σ_c A2[j][c]·Gs[r][c·K+κ];
   gA1[c][j] += Σ W[r][c·K+κ]·GP[r][j][κ]  — GEMMs over the block (linear) or per row (conv). */
static void rows_bwd(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, const float *G, int tid) {
    const glora_t *g = dl->state;
    float s = (float)g->c->s;
    int64_t r = g->r, I = g->I, K = g->K, IK = g->IK;
    float *Gs = malloc(sizeof(float) * (size_t)(nr * IK + 1)), *P = malloc(sizeof(float) * (size_t)(nr * r * K + 1));
    float *GP = malloc(sizeof(float) * (size_t)(nr * r * K + 1));
    float *gA2 = g->gA2 + (size_t)tid * (size_t)(r * I), *gA1 = g->gA1 + (size_t)tid * (size_t)(I * r);
    if (!Gs || !P || !GP) { /* the driver cannot fail from here: poison this thread's partials */
        for (int64_t n = 0; n < r * I; n++) gA2[n] = NAN;
        free(Gs); free(P); free(GP);
        return;
    }
    for (int64_t n = 0; n < nr * IK; n++) Gs[n] = s * G[n];
    cpu_gemm_nt(nr, r, IK, Gs, IK, g->B2, IK, g->gB1 + o0 * r, r, false);                       /* G_B1 rows */
    cpu_gemm_tn(r, IK, nr, g->B1 + o0 * r, r, Gs, IK, g->gB2 + (size_t)tid * (size_t)(r * IK), IK, true); /* G_B2 */
    w_a1(g, nr, W, P);
    if (K == 1) {
        cpu_gemm_tn(r, I, nr, P, r, Gs, IK, gA2, I, true);
        cpu_gemm_nt(nr, r, I, Gs, IK, g->A2, I, GP, r, false);
        cpu_gemm_tn(I, r, nr, W, IK, GP, r, gA1, r, true);
    } else {
        for (int64_t row = 0; row < nr; row++) {
            const float *Pr = P + row * r * K, *Gr = Gs + row * IK, *Wr = W + row * IK;
            float *GPr = GP + row * r * K;
            cpu_gemm_nt(r, I, K, Pr, K, Gr, K, gA2, I, true);
            cpu_gemm_nn(r, K, I, g->A2, I, Gr, K, GPr, K, false);
            cpu_gemm_nt(I, r, K, Wr, K, GPr, K, gA1, r, true);
        }
    }
    free(Gs);
    free(P);
    free(GP);
}

static void reduce(float *p, int nt, size_t n) {
    for (int t = 1; t < nt; t++)
        for (size_t i = 0; i < n; i++) p[i] += p[(size_t)t * n + i];
}

static lyco_status store(const glora_t *g) {
    const lyco_call *c = g->c;
    reduce(g->gB1, g->np, (size_t)(g->O * g->r));
    reduce(g->gB2, g->np, (size_t)(g->r * g->IK));
    reduce(g->gA2, g->np, (size_t)(g->r * g->I));
    reduce(g->gA1, g->np, (size_t)(g->I * g->r));
    if (g->fold) { /* the driver's gradients are those of A1·diag(q_a), B1·diag(q_b) */
        scale_cols(c, LYCO_RANK_MASK, g->gA1, g->I, g->r);
        scale_cols(c, LYCO_RANK_MASK_B, g->gB1, g->O, g->r);
    }
    if (c->g->grad[LYCO_GLORA_B1]) cpu_store_all(c->g->grad[LYCO_GLORA_B1], g->gB1);
    if (c->g->grad[LYCO_GLORA_B2]) cpu_store_all(c->g->grad[LYCO_GLORA_B2], g->gB2);
    if (c->g->grad[LYCO_GLORA_A2]) cpu_store_all(c->g->grad[LYCO_GLORA_A2], g->gA2);
    if (c->g->grad[LYCO_GLORA_A1]) cpu_store_all(c->g->grad[LYCO_GLORA_A1], g->gA1);
    return LYCO_OK;
}

static lyco_status finish_bwd(const cpu_delta *dl) { return store(dl->state); }

/* ---- bypass, linear ---- */

static lyco_status bypass(const lyco_call *c, glora_t *g) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *b = c->bypass;
    bool fwd = c->dir == LYCO_DIR_BYPASS_FWD;
    int64_t N = c->tokens, I = g->I, O = g->O, r = g->r;
    float f = (float)(c->s * c->m) * cpu_sigma(c);
    float *W = malloc(sizeof(float) * (size_t)(O * I + 1));
    float *qa = malloc(sizeof(float) * (size_t)(r + 1)), *qb = malloc(sizeof(float) * (size_t)(r + 1));
    size_t per = (size_t)(TB * (3 * I + 2 * O + 4 * r));
    float *work = malloc(sizeof(float) * ((size_t)g->nt * per + 1));
    if (!W || !qa || !qb || !work) {
        free(W); free(qa); free(qb); free(work);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu glora bypass: out of memory");
    }
    cpu_load_all(b->weight, T, W);
    for (int64_t i = 0; i < r; i++) qa[i] = qmask(c, LYCO_RANK_MASK, i), qb[i] = qmask(c, LYCO_RANK_MASK_B, i);
    cpu_view xv, y0v, yv, dyv, dxv, dy0v;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    bool add = b->y0 && !(b->flags & LYCO_BYPASS_DELTA_ONLY);
    bool delta_only = b->flags & LYCO_BYPASS_DELTA_ONLY;
    if (fwd) {
        cpu_view_init(&yv, c->y, c->y->ndim - 1);
        if (add) cpu_view_init(&y0v, b->y0, b->y0->ndim - 1);
    } else {
        cpu_view_init(&dyv, c->dy, c->dy->ndim - 1);
        if (c->dx) cpu_view_init(&dxv, c->dx, c->dx->ndim - 1);
        if (c->dy0) cpu_view_init(&dy0v, c->dy0, c->dy0->ndim - 1);
    }
    int64_t nblocks = (N + TB - 1) / TB;
    /* backward partials per fixed run of token blocks (slot = run): independent of the thread count;
       forward: one run per block */
    const int runs = fwd ? cpu_runs(nblocks, nblocks) : cpu_runs(nblocks, g->runs);
#pragma omp parallel for schedule(static)
    for (int run = 0; run < runs; run++)
    for (int64_t blk = cpu_run_start(nblocks, runs, run); blk < cpu_run_start(nblocks, runs, run + 1); blk++) {
        int tid = cpu_thread_id();
        float *x = work + (size_t)tid * per, *ax = x + TB * I, *gx = ax + TB * I, *y = gx + TB * I, *wy = y + TB * O;
        float *ha = wy + TB * O, *hb = ha + TB * r, *gha = hb + TB * r, *ghb = gha + TB * r;
        int64_t t0 = blk * TB, nt = N - t0 < TB ? N - t0 : TB;
        for (int64_t t = 0; t < nt; t++) cpu_load(&xv, t0 + t, 0, I, T, x + t * I);
        cpu_gemm_nt(nt, r, I, x, I, g->A2, I, ha, r, false);    /* ha = rnd(x·A2ᵀ) ⊙ q_a */
        cpu_gemm_nt(nt, r, I, x, I, g->B2, I, hb, r, false);    /* hb = rnd(x·B2ᵀ) ⊙ q_b */
        cpu_round(ha, nt * r, T);
        cpu_round(hb, nt * r, T);
        for (int64_t t = 0; t < nt; t++)
            for (int64_t i = 0; i < r; i++) ha[t * r + i] *= qa[i], hb[t * r + i] *= qb[i];
        cpu_gemm_nt(nt, I, r, ha, r, g->A1, r, ax, I, false);   /* ax = ha·A1ᵀ */
        if (fwd) {
            cpu_gemm_nt(nt, O, I, ax, I, W, I, y, O, false);        /* ax·Wᵀ */
            cpu_gemm_nt(nt, O, r, hb, r, g->B1, r, y, O, true);     /* + hb·B1ᵀ */
            if (add)
                for (int64_t t = 0; t < nt; t++) cpu_load(&y0v, t0 + t, 0, O, T, wy + t * O);
            for (int64_t n = 0; n < nt * O; n++) y[n] = (add ? wy[n] : 0.0f) + f * y[n];
            for (int64_t t = 0; t < nt; t++) cpu_store(&yv, t0 + t, 0, O, y + t * O);
            continue;
        }
        for (int64_t t = 0; t < nt; t++) cpu_load(&dyv, t0 + t, 0, O, T, y + t * O);
        if (c->dy0 && !delta_only)
            for (int64_t t = 0; t < nt; t++) cpu_store(&dy0v, t0 + t, 0, O, y + t * O);
        for (int64_t n = 0; n < nt * O; n++) y[n] *= f;           /* g = dy·s·m·σs */
        cpu_gemm_nn(nt, I, O, y, O, W, I, gx, I, false);           /* g·W: ∂L/∂ax */
        cpu_gemm_nn(nt, r, O, y, O, g->B1, r, ghb, r, false);      /* ∂L/∂hb */
        cpu_gemm_nn(nt, r, I, gx, I, g->A1, r, gha, r, false);     /* ∂L/∂ha */
        for (int64_t t = 0; t < nt; t++)
            for (int64_t i = 0; i < r; i++) gha[t * r + i] *= qa[i], ghb[t * r + i] *= qb[i];
        cpu_gemm_tn(O, r, nt, y, O, hb, r, g->gB1 + (size_t)run * (size_t)(O * r), r, true);
        cpu_gemm_tn(I, r, nt, gx, I, ha, r, g->gA1 + (size_t)run * (size_t)(I * r), r, true);
        cpu_gemm_tn(r, I, nt, gha, r, x, I, g->gA2 + (size_t)run * (size_t)(r * I), I, true);
        cpu_gemm_tn(r, I, nt, ghb, r, x, I, g->gB2 + (size_t)run * (size_t)(r * I), I, true);
        if (c->dx) {
            cpu_gemm_nn(nt, I, r, gha, r, g->A2, I, ax, I, false);
            cpu_gemm_nn(nt, I, r, ghb, r, g->B2, I, ax, I, true);
            for (int64_t t = 0; t < nt; t++) cpu_store(&dxv, t0 + t, 0, I, ax + t * I);
        }
    }
    lyco_status st = LYCO_OK;
    if (!fwd && c->dy0 && delta_only)
        for (int64_t i = 0; i < lyco_numel(c->dy0); i++) lyco_store_f32(lyco_elem_at(c->dy0, i), lyco_dtype_of(c->dy0), 0.0f);
    if (!fwd && c->g) st = store(g);
    free(W); free(qa); free(qb); free(work);
    return st;
}

lyco_status cpu_glora(const lyco_call *c, char *why, size_t why_len) {
    bool bypass_dir = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    (void)why;
    (void)why_len;
    /* conv, a dropped module, σs's gradient: through E = W'' − W (dense_bypass.c), the rank masks
       (which act on the rank activations) folded into A1's and B1's columns */
    bool dense = bypass_dir && (c->a->layer.kind == LYCO_LAYER_CONV || c->dropped || (c->dir == LYCO_DIR_BYPASS_BWD && c->a->tensor[LYCO_SCALAR]));
    bool fold = dense && (c->a->tensor[LYCO_RANK_MASK] || c->a->tensor[LYCO_RANK_MASK_B]);
    glora_t g;
    lyco_status st = glora_prepare(c, &g, c->dir == LYCO_DIR_MERGE_BWD || c->dir == LYCO_DIR_BYPASS_BWD, fold);
    if (st == LYCO_OK) {
        cpu_delta dl = {.rows = rows, .rows_bwd = rows_bwd, .finish_bwd = finish_bwd, .c = c, .state = &g, .needs_w = true, .uses_sigma = true,
                        .groups = g.runs};
        switch (c->dir) {
        case LYCO_DIR_MERGE_FWD: st = cpu_merge_fwd(c, &dl); break;
        case LYCO_DIR_MERGE_BWD: st = cpu_merge_bwd(c, &dl); break;
        default: st = dense ? cpu_bypass_dense(c, &dl) : bypass(c, &g); break;
        }
    }
    glora_free(&g);
    return st;
}
