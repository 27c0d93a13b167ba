/*
 * norm.c — fused CPU kernels of Norm (train_norm; ALGORITHMS.md §2.10): LayerNorm / GroupNorm
 * weight and bias deltas  Δγ = q ⊙ w_norm,  Δβ = q ⊙ b_norm  (q = the channel mask, exact;
 * Δβ = 0 without b_norm).
 *
 * merge through the shared driver (merge.c, C rows × 1 column; forward streamed as one row of C,
 * stream.c):
 *   γ'' = γ + m·Δγ, β'' = β + m·Δβ (bias hooks); backward G_w_norm = q ⊙ G, G_b_norm = q ⊙ Gb (the driver applies m).
 * bypass: y = y0 + x̂ ⊙ (m·Δγ) + m·Δβ per channel, x̂ = (x − μ)·rstd, rstd = 1/√(σ² + ε) with the
 *   biased variance, statistics in fp32 (8-lane partial sums, two passes over the group in cache):
 *     LayerNorm: one group per token (x is tokens × C, channels contiguous);
 *     GroupNorm: one group per (n, g): C/groups channel rows × spatial positions of x (N, C, …).
 *   One pass: each group is loaded once (x, y0), normalised in cache and y stored once.
 * backward, per group (h = dy·m·Δγ[c]; the group sums in 8 lanes and a fixed tree, so the order is
 *   set by the shape, not the threads):  dx = rstd·(h − mean(h) − x̂·mean(h·x̂)),
 *   G_w_norm[c] += m·q[c]·Σ dy·x̂,  G_b_norm[c] += m·q[c]·Σ dy  (partials per fixed run of groups,
 *   cpu_runs: combined in run order, independent of the thread count), dy0 = dy (0 for DELTA_ONLY).
 *
 * Extra memory: merge: the driver's row blocks + C floats; bypass: 4·C floats of per-channel
 * factors, per thread 3 buffers of one group (LayerNorm C, GroupNorm C/groups·spatial floats)
 * and, backward, 2·C floats of partials per run (at most CPU_RUNS).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu.h"
#include "stream.h"

typedef struct {
    const lyco_call *c;
    int64_t C;
    float *q;        /* mask (C), exact; 1 when absent */
    float *wn, *bn;  /* w_norm, b_norm (C, compute dtype); bn = 0 when absent */
    float *gw;       /* merge backward: G_w_norm (C) */
} norm_t;

static void norm_free(norm_t *s) {
    free(s->q);
    free(s->wn);
    free(s->bn);
    free(s->gw);
}

static lyco_status norm_prepare(const lyco_call *c, norm_t *s) {
    memset(s, 0, sizeof *s);
    s->c = c;
    s->C = c->dims.O;
    size_t n = (size_t)s->C + 1;
    s->q = malloc(sizeof(float) * n);
    s->wn = malloc(sizeof(float) * n);
    s->bn = calloc(n, sizeof(float));
    s->gw = calloc(n, sizeof(float));
    if (!s->q || !s->wn || !s->bn || !s->gw) return lyco_fail(LYCO_ERR_NOMEM, "cpu norm: out of memory");
    const DLTensor *mask = c->a->tensor[LYCO_RANK_MASK];
    if (mask) cpu_load_all(mask, lyco_dtype_of(mask), s->q);
    else
        for (int64_t i = 0; i < s->C; i++) s->q[i] = 1.0f;
    cpu_load_all(c->a->tensor[LYCO_W_NORM], c->dt.compute, s->wn);
    if (c->a->tensor[LYCO_B_NORM]) cpu_load_all(c->a->tensor[LYCO_B_NORM], c->dt.compute, s->bn);
    return LYCO_OK;
}

/* ---- merge ---- */

static void rows(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, float *out) {
    (void)W;
    const norm_t *s = dl->state;
    for (int64_t r = 0; r < nr; r++) out[r] = s->q[o0 + r] * s->wn[o0 + r];
}

/* ΔW̄ for the streaming driver (stream.h), γ as one row of C: δ_c = w_norm[c]·q[c] */
static cpu_span flat_span(const norm_t *s) {
    return (cpu_span){.x = CPU_SPAN_ROW, .src = s->wn, .src_dt = LYCO_F32, .src_T = LYCO_F32, .s = s->q, .period = 1};
}

static void rows_bwd(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, const float *G, int tid) {
    (void)W;
    (void)tid;
    const norm_t *s = dl->state;
    for (int64_t r = 0; r < nr; r++) s->gw[o0 + r] = s->q[o0 + r] * G[r];   /* rows are owned by this block */
}

static lyco_status finish_bwd(const cpu_delta *dl) {
    const norm_t *s = dl->state;
    if (lyco_call_wants(s->c, LYCO_W_NORM)) cpu_store_all(s->c->g->grad[LYCO_W_NORM], s->gw);
    return LYCO_OK;
}

static void bias(const cpu_delta *dl, float *db) {
    const norm_t *s = dl->state;
    for (int64_t o = 0; o < s->C; o++) db[o] = s->q[o] * s->bn[o];
}

static lyco_status bias_bwd(const cpu_delta *dl, const float *Gb) {
    const norm_t *s = dl->state;
    if (!lyco_call_wants(s->c, LYCO_B_NORM)) return LYCO_OK;
    float *g = malloc(sizeof(float) * (size_t)(s->C + 1));
    if (!g) return lyco_fail(LYCO_ERR_NOMEM, "cpu norm: out of memory");
    for (int64_t o = 0; o < s->C; o++) g[o] = s->q[o] * Gb[o];
    cpu_store_all(s->c->g->grad[LYCO_B_NORM], g);
    free(g);
    return LYCO_OK;
}

/* ---- small whole-tensor helpers ---- */

/* dst = rnd_T(src) (same shape), or 0 when src is NULL; row by row. */
static lyco_status copy_or_zero(DLTensor *dst, const DLTensor *src, lyco_dtype T) {
    cpu_view dv, sv;
    int split = dst->ndim > 0 ? dst->ndim - 1 : 0;
    cpu_view_init(&dv, dst, split);
    if (src) cpu_view_init(&sv, src, split);
    float *row = calloc((size_t)dv.cols + 1, sizeof(float));
    if (!row) return lyco_fail(LYCO_ERR_NOMEM, "cpu norm: out of memory");
    for (int64_t r = 0; r < dv.rows; r++) {
        if (src) cpu_load(&sv, r, 0, dv.cols, T, row);
        cpu_store(&dv, r, 0, dv.cols, row);
    }
    free(row);
    return LYCO_OK;
}

/* Module dropped in bypass: Δ = 0, so y = y0 (or 0), dx = 0, dy0 = dy (or 0), gradients 0. */
static lyco_status bypass_dropped(const lyco_call *c) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *b = c->bypass;
    bool delta = b->flags & LYCO_BYPASS_DELTA_ONLY;
    if (c->dir == LYCO_DIR_BYPASS_FWD) return copy_or_zero(c->y, delta ? NULL : b->y0, T);
    lyco_status st = LYCO_OK;
    if (c->dx) st = copy_or_zero(c->dx, NULL, T);
    if (!st && c->dy0) st = copy_or_zero(c->dy0, delta ? NULL : c->dy, T);
    for (int sl = 0; sl < LYCO_SLOT_COUNT && !st; sl++)
        if (lyco_call_wants(c, (lyco_slot)sl)) st = copy_or_zero(c->g->grad[sl], NULL, T);
    return st;
}

/* ---- bypass ---- */

/* Normalisation groups as rows × cols of a view: LayerNorm 1 × C (channel = column),
   GroupNorm cg × sp (channel = c0 + row). */
typedef struct {
    bool group;
    int split;
    int64_t ngroups, nrows, ncols, groups, cg;
} norm_geom;

static void geom(const lyco_call *c, norm_geom *g) {
    const lyco_layer *l = &c->a->layer;
    int64_t C = c->dims.O;
    memset(g, 0, sizeof *g);
    g->group = l->norm_kind == LYCO_NORM_GROUP;
    if (g->group) {
        g->groups = l->norm_groups;
        g->cg = C / g->groups;
        g->split = 2;
        g->ngroups = c->tokens * g->groups;
        g->nrows = g->cg;
        g->ncols = c->sp_in_n;
    } else {
        g->groups = 1;
        g->cg = C;
        g->split = c->bypass->x->ndim - 1;
        g->ngroups = c->tokens;
        g->nrows = 1;
        g->ncols = C;
    }
}

/* first view row of group k, and the channel of its row 0 */
static int64_t group_row(const norm_geom *g, int64_t C, int64_t k, int64_t *c0) {
    if (!g->group) {
        *c0 = 0;
        return k;
    }
    int64_t n = k / g->groups, gi = k % g->groups;
    *c0 = gi * g->cg;
    return n * C + gi * g->cg;
}

static float sum8(const float *v, int64_t n) {
    float a[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) a[l] += v[i + l];
    for (int l = 0; i < n; i++, l++) a[l] += v[i];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* mean and rstd of the group in x (len floats); d = x − μ written into d */
static void stats(const float *x, int64_t len, float eps, float *d, float *mu, float *rstd) {
    float m = sum8(x, len) / (float)len;
    for (int64_t i = 0; i < len; i++) d[i] = x[i] - m;
    float a[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= len; i += 8)
        for (int l = 0; l < 8; l++) a[l] += d[i + l] * d[i + l];
    for (int l = 0; i < len; i++, l++) a[l] += d[i] * d[i];
    float var = (((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))) / (float)len;
    *mu = m;
    *rstd = 1.0f / sqrtf(var + eps);
}

static lyco_status bypass_fwd(const lyco_call *c, const norm_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *b = c->bypass;
    norm_geom g;
    geom(c, &g);
    bool add = b->y0 && !(b->flags & LYCO_BYPASS_DELTA_ONLY);
    cpu_view xv, y0v, yv;
    cpu_view_init(&xv, b->x, g.split);
    cpu_view_init(&yv, c->y, g.split);
    if (add) cpu_view_init(&y0v, b->y0, g.split);
    int64_t C = s->C, len = g.nrows * g.ncols;
    float m = (float)c->m, eps = (float)c->a->layer.norm_eps;
    int nth = cpu_threads();
    float *fac = malloc(sizeof(float) * (size_t)(2 * C + 1)), *work = malloc(sizeof(float) * (size_t)nth * (size_t)(3 * len) + 1);
    if (!fac || !work) {
        free(fac);
        free(work);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu norm bypass: out of memory");
    }
    float *gam = fac, *bet = fac + C;
    for (int64_t o = 0; o < C; o++) {
        gam[o] = m * (s->q[o] * s->wn[o]);
        bet[o] = m * (s->q[o] * s->bn[o]);
    }
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < g.ngroups; k++) {
        float *x = work + (size_t)cpu_thread_id() * (size_t)(3 * len), *d = x + len, *y = d + len;
        int64_t c0, r0 = group_row(&g, C, k, &c0);
        for (int64_t r = 0; r < g.nrows; r++) {
            cpu_load(&xv, r0 + r, 0, g.ncols, T, x + r * g.ncols);
            if (add) cpu_load(&y0v, r0 + r, 0, g.ncols, T, y + r * g.ncols);
        }
        float mu, rstd;
        stats(x, len, eps, d, &mu, &rstd);
        for (int64_t r = 0; r < g.nrows; r++) {
            float *yr = y + r * g.ncols;
            const float *dr = d + r * g.ncols;
            if (g.group) {
                float ga = gam[c0 + r] * rstd, be = bet[c0 + r];
                for (int64_t j = 0; j < g.ncols; j++) yr[j] = (add ? yr[j] : 0.0f) + (dr[j] * ga + be);
            } else {
                for (int64_t j = 0; j < g.ncols; j++) yr[j] = (add ? yr[j] : 0.0f) + (dr[j] * rstd * gam[j] + bet[j]);
            }
            cpu_store(&yv, r0 + r, 0, g.ncols, yr);
        }
    }
    free(fac);
    free(work);
    return LYCO_OK;
}

static float tree8(const float *a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

/* *sdh = Σ d[j]·h[j], *sd = Σ d[j]: 8 lanes (lane j mod 8), then a fixed tree — not one serial
   chain (which bound the backward at one add latency per element) */
static void dot_sum8(const float *d, const float *h, int64_t n, float *sdh, float *sd) {
    float a[8] = {0}, b[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) {
            a[l] += d[j + l] * h[j + l];
            b[l] += d[j + l];
        }
    for (int l = 0; j < n; j++, l++) {
        a[l] += d[j] * h[j];
        b[l] += d[j];
    }
    *sdh = tree8(a);
    *sd = tree8(b);
}

/* LayerNorm row: pw += dy·x̂, pb += dy (per channel), a[0] += Σ h, a[1] += Σ h·x̂ with h = dy·γ'
   (the two sums in 8 lanes, as dot_sum8) */
static void ln_partials(const float *dr, const float *hr, const float *gam, int64_t n, float *pw, float *pb, float *a) {
    float l0[8] = {0}, l1[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) {
            float d = dr[j + l], h = hr[j + l], gh = d * gam[j + l];
            pw[j + l] += d * h;
            pb[j + l] += d;
            l0[l] += gh;
            l1[l] += gh * h;
        }
    for (int l = 0; j < n; j++, l++) {
        float d = dr[j], h = hr[j], gh = d * gam[j];
        pw[j] += d * h;
        pb[j] += d;
        l0[l] += gh;
        l1[l] += gh * h;
    }
    a[0] += tree8(l0);
    a[1] += tree8(l1);
}

/* What one backward group needs (views, factors, shapes). */
typedef struct {
    const lyco_call *c;
    norm_geom g;
    cpu_view xv, dyv, dxv, dy0v;
    const float *gam;
    int64_t C, len;
    float eps;
    bool delta;
} norm_bwd_ctx;

/* Group k: dx (and dy0) written, the parameter sums added into pw / pb (C floats each); scratch
   3·len floats. */
static void bwd_group(const norm_bwd_ctx *b, int64_t k, float *scratch, float *pw, float *pb) {
    const lyco_call *c = b->c;
    const norm_geom *g = &b->g;
    lyco_dtype T = c->dt.compute;
    const float *gam = b->gam;
    int64_t len = b->len;
    float *x = scratch, *xh = x + len, *dy = xh + len;
    int64_t c0, r0 = group_row(g, b->C, k, &c0);
    for (int64_t r = 0; r < g->nrows; r++) {
        cpu_load(&b->xv, r0 + r, 0, g->ncols, T, x + r * g->ncols);
        cpu_load(&b->dyv, r0 + r, 0, g->ncols, T, dy + r * g->ncols);
    }
    if (c->dy0 && !b->delta)   /* DELTA_ONLY: dy0 = 0, written after the pass */
        for (int64_t r = 0; r < g->nrows; r++) cpu_store(&b->dy0v, r0 + r, 0, g->ncols, dy + r * g->ncols);
    float mu, rstd;
    stats(x, len, b->eps, xh, &mu, &rstd);
    for (int64_t i = 0; i < len; i++) xh[i] *= rstd;
    /* parameter sums, and mean(h), mean(h·x̂) with h = dy·γ' */
    float a[2] = {0.0f, 0.0f};
    for (int64_t r = 0; r < g->nrows; r++) {
        const float *dr = dy + r * g->ncols, *hr = xh + r * g->ncols;
        if (g->group) {
            int64_t ch = c0 + r;
            float sw, sb;
            dot_sum8(dr, hr, g->ncols, &sw, &sb);
            pw[ch] += sw;
            pb[ch] += sb;
            a[0] += gam[ch] * sb;
            a[1] += gam[ch] * sw;
        } else {
            ln_partials(dr, hr, gam, g->ncols, pw, pb, a);
        }
    }
    if (!c->dx) return;
    float mh = a[0] / (float)len, mhx = a[1] / (float)len;
    for (int64_t r = 0; r < g->nrows; r++) {
        float *out = x + r * g->ncols;   /* x is no longer needed */
        const float *dr = dy + r * g->ncols, *hr = xh + r * g->ncols;
        for (int64_t j = 0; j < g->ncols; j++) {
            float gm = g->group ? gam[c0 + r] : gam[j];
            out[j] = rstd * (dr[j] * gm - mh - hr[j] * mhx);
        }
        cpu_store(&b->dxv, r0 + r, 0, g->ncols, out);
    }
}

/* The parameter sums per fixed run of groups (cpu_runs: independent of the thread count), added in
   run order. */
static lyco_status bypass_bwd(const lyco_call *c, const norm_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *ba = c->bypass;
    norm_bwd_ctx b;
    memset(&b, 0, sizeof b);
    b.c = c;
    geom(c, &b.g);
    b.delta = ba->flags & LYCO_BYPASS_DELTA_ONLY;
    bool want_w = lyco_call_wants(c, LYCO_W_NORM), want_b = lyco_call_wants(c, LYCO_B_NORM);
    cpu_view_init(&b.xv, ba->x, b.g.split);
    cpu_view_init(&b.dyv, c->dy, b.g.split);
    if (c->dx) cpu_view_init(&b.dxv, c->dx, b.g.split);
    if (c->dy0) cpu_view_init(&b.dy0v, c->dy0, b.g.split);
    int64_t C = s->C;
    b.C = C;
    b.len = b.g.nrows * b.g.ncols;
    b.eps = (float)c->a->layer.norm_eps;
    float m = (float)c->m;
    int nth = cpu_threads(), runs = cpu_runs(b.g.ngroups, CPU_RUNS);
    float *gam = malloc(sizeof(float) * (size_t)(C + 1)), *work = malloc(sizeof(float) * (size_t)nth * (size_t)(3 * b.len) + 1);
    float *part = calloc((size_t)runs * (size_t)(2 * C) + 1, sizeof(float));
    if (!gam || !work || !part) {
        free(gam);
        free(work);
        free(part);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu norm bypass: out of memory");
    }
    for (int64_t o = 0; o < C; o++) gam[o] = m * (s->q[o] * s->wn[o]);
    b.gam = gam;
#pragma omp parallel for schedule(dynamic, 1)
    for (int run = 0; run < runs; run++) {
        float *scratch = work + (size_t)cpu_thread_id() * (size_t)(3 * b.len);
        float *pw = part + (size_t)run * (size_t)(2 * C), *pb = pw + C;
        for (int64_t k = cpu_run_start(b.g.ngroups, runs, run); k < cpu_run_start(b.g.ngroups, runs, run + 1); k++)
            bwd_group(&b, k, scratch, pw, pb);
    }
    lyco_status st = LYCO_OK;
    if (c->dy0 && b.delta) st = copy_or_zero(c->dy0, NULL, T);
    for (int t = 1; t < runs; t++)
        for (int64_t i = 0; i < 2 * C; i++) part[i] += part[(size_t)t * (size_t)(2 * C) + i];
    for (int64_t o = 0; o < C; o++) {
        float mq = m * s->q[o];
        part[o] *= mq;
        part[C + o] *= mq;
    }
    if (want_w) cpu_store_all(c->g->grad[LYCO_W_NORM], part);
    if (want_b) cpu_store_all(c->g->grad[LYCO_B_NORM], part + C);
    free(gam);
    free(work);
    free(part);
    return st;
}

lyco_status cpu_norm(const lyco_call *c, char *why, size_t why_len) {
    (void)why;
    (void)why_len;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    if (bypass && c->dropped) return bypass_dropped(c);
    norm_t s;
    lyco_status st = norm_prepare(c, &s);
    if (st == LYCO_OK) {
        cpu_delta dl = {.rows = rows, .rows_bwd = rows_bwd, .finish_bwd = finish_bwd, .bias = bias, .bias_bwd = bias_bwd, .c = c, .state = &s};
        switch (c->dir) {
        case LYCO_DIR_MERGE_FWD: {
            cpu_span sp = flat_span(&s);
            st = cpu_merge_fwd_stream_flat(c, &dl, &sp);
            break;
        }
        case LYCO_DIR_MERGE_BWD:
            st = cpu_merge_bwd(c, &dl);
            /* ∂L/∂β'' not given: G_b_norm = 0 */
            if (!st && !c->dropped && !c->d_out_bias && lyco_call_wants(c, LYCO_B_NORM))
                st = copy_or_zero(c->g->grad[LYCO_B_NORM], NULL, LYCO_F32);
            break;
        case LYCO_DIR_BYPASS_FWD: st = bypass_fwd(c, &s); break;
        default: st = bypass_bwd(c, &s); break;
        }
    }
    norm_free(&s);
    return st;
}
