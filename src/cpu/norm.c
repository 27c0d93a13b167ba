/*
 * norm.c — fused CPU kernels of Norm (train_norm; ALGORITHMS.md §2.10): LayerNorm / GroupNorm
 * weight and bias deltas  Δγ = q ⊙ w_norm,  Δβ = q ⊙ b_norm  (q = the channel mask, exact;
 * Δβ = 0 without b_norm).
 *
 * merge: γ'' = γ + m·Δγ streamed as one row of C (stream.c, w_norm and an fp32 mask read in place),
 *   β'' = β + m·Δβ through merge.c's bias merge; backward G_w_norm = q ⊙ (m·G), G_b_norm =
 *   q ⊙ (m·Gb), G and Gb rounded to the compute dtype as loaded — vector loops over chunks of the
 *   stack: a call allocates nothing unless w_norm or the mask has an unusual layout (a small merge
 *   is mostly its fixed cost; the row driver spent ~7 ns an element on 1-column rows).
 * bypass: y = y0 + x̂ ⊙ (m·Δγ) + m·Δβ per channel, x̂ = (x − μ)·rstd, rstd = 1/√(σ² + ε) with the
 *   biased variance, statistics in fp32 (8-lane partial sums, two passes over the group in cache):
 *     LayerNorm: one group per token (x is tokens × C, channels contiguous);
 *     GroupNorm: one group per (n, g): C/groups channel rows × spatial positions of x (N, C, …).
 *   One pass: each group is loaded once (x, y0), normalised in cache and y stored once.
 *   LayerNorm rows with compact views run norm_kern.h (x86-64-v3 and up): the same operations in
 *   the same order with the loads, conversions and stores in registers (bitwise the group loops'
 *   values); GroupNorm, strided views and LYCO_CPU_ISA=base take the group loops. The kernel
 *   software-prefetches the thread's next two rows (x, y0 / dy, and y / dx for writing) while it
 *   computes the current two: a token row is too short for the hardware prefetchers.
 * backward, per group (h = dy·m·Δγ[c]; the group sums in 8 lanes and a fixed tree, so the order is
 *   set by the shape, not the threads):  dx = rstd·(h − mean(h) − x̂·mean(h·x̂)),
 *   G_w_norm[c] += m·q[c]·Σ dy·x̂,  G_b_norm[c] += m·q[c]·Σ dy  (partials per fixed run of groups,
 *   cpu_runs: combined in run order, independent of the thread count), dy0 = dy (0 for DELTA_ONLY).
 *
 * Extra memory: merge: none (2·C floats when w_norm is strided or the mask is not a compact fp32
 * vector; the bias merge O floats twice); bypass: 4·C floats of per-channel
 * factors, per thread 3 buffers of one group (LayerNorm C, GroupNorm C/groups·spatial floats)
 * and, backward, 2·C floats of partials per run (at most CPU_RUNS).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu.h"
#include "isa.h"
#include "stream.h"

#define CHUNK 256   /* floats per stack chunk of the C-vector loops */

typedef struct {
    const lyco_call *c;
    int64_t C;
    float *q;        /* mask (C), exact; 1 when absent */
    float *wn, *bn;  /* w_norm, b_norm (C, compute dtype); bn = 0 when absent */
} norm_t;

static void norm_free(norm_t *s) {
    free(s->q);
    free(s->wn);
    free(s->bn);
}

static lyco_status norm_prepare(const lyco_call *c, norm_t *s) {
    memset(s, 0, sizeof *s);
    s->c = c;
    s->C = c->dims.O;
    size_t n = (size_t)s->C + 1;
    s->q = malloc(sizeof(float) * n);
    s->wn = malloc(sizeof(float) * n);
    s->bn = calloc(n, sizeof(float));
    if (!s->q || !s->wn || !s->bn) return lyco_fail(LYCO_ERR_NOMEM, "cpu norm: out of memory");
    const DLTensor *mask = c->a->tensor[LYCO_RANK_MASK];
    if (mask) cpu_load_all(mask, lyco_dtype_of(mask), s->q);
    else
        for (int64_t i = 0; i < s->C; i++) s->q[i] = 1.0f;
    cpu_load_all(c->a->tensor[LYCO_W_NORM], c->dt.compute, s->wn);
    if (c->a->tensor[LYCO_B_NORM]) cpu_load_all(c->a->tensor[LYCO_B_NORM], c->dt.compute, s->bn);
    return LYCO_OK;
}

/* ---- merge: γ and β are vectors of C; no driver rows, no state arrays ---- */

/* v[k] ← q[o0 + k]·v[k] for k < n (q from the mask in its own dtype; no mask: q = 1, v as is) */
static void mask_chunk(const lyco_call *c, int64_t o0, int64_t n, float *v) {
    const DLTensor *mask = c->a->tensor[LYCO_RANK_MASK];
    if (!mask) return;
    float q[CHUNK];
    cpu_view qv;
    cpu_view_init(&qv, mask, 0);
    cpu_load(&qv, 0, o0, n, qv.dt, q);
    for (int64_t k = 0; k < n; k++) v[k] = q[k] * v[k];
}

/* dst = q ⊙ (f·RN_T(src)), chunk by chunk through the stack (any layout of either tensor; f = 1
   skipped: x·1 = x); the merge backward of w_norm / b_norm and the bias delta of the forward */
static void masked_copy(const lyco_call *c, DLTensor *dst, const DLTensor *src, lyco_dtype T, float f, bool scale, float *out) {
    cpu_view sv, dv;
    cpu_view_init(&sv, src, 0);
    if (dst) cpu_view_init(&dv, dst, 0);
    float v[CHUNK];
    for (int64_t o0 = 0; o0 < sv.cols; o0 += CHUNK) {
        int64_t n = sv.cols - o0 < CHUNK ? sv.cols - o0 : CHUNK;
        float *w = out ? out + o0 : v;
        cpu_load(&sv, 0, o0, n, T, w);
        if (scale)
            for (int64_t k = 0; k < n; k++) w[k] *= f;
        mask_chunk(c, o0, n, w);
        if (dst) cpu_store(&dv, 0, o0, n, w);
    }
}

/* Δβ̄ = q ⊙ b_norm for the driver's bias merge (O floats; validation gives out_bias only with b_norm) */
static void bias(const cpu_delta *dl, float *db) {
    const lyco_call *c = dl->c;
    masked_copy(c, NULL, c->a->tensor[LYCO_B_NORM], c->dt.compute, 1.0f, false, db);
}

/* γ'' = γ ⊕ m·(q ⊙ w_norm) as one streamed row of C: w_norm read in place when compact (rounded
   to T as it is loaded), q in place when it is a compact fp32 vector; other layouts through an
   fp32 copy. No other state. */
static lyco_status merge_fwd(const lyco_call *c, const cpu_delta *dl) {
    const DLTensor *wn = c->a->tensor[LYCO_W_NORM], *mask = c->a->tensor[LYCO_RANK_MASK];
    int64_t C = c->dims.O;
    cpu_view wv, qv;
    cpu_view_init(&wv, wn, 0);
    if (mask) cpu_view_init(&qv, mask, 0);
    bool copy_w = !wv.fast, copy_q = mask && !(qv.fast && qv.dt == LYCO_F32);
    float *buf = NULL;
    if (copy_w || copy_q) {
        buf = malloc(sizeof(float) * (size_t)(2 * C + 1));
        if (!buf) return lyco_fail(LYCO_ERR_NOMEM, "cpu norm: out of memory");
    }
    cpu_span sp = {.x = CPU_SPAN_ROW, .src = wv.base, .src_dt = wv.dt, .src_T = c->dt.compute, .period = 1};
    if (copy_w) {
        cpu_load(&wv, 0, 0, C, c->dt.compute, buf);
        sp.src = buf;
        sp.src_dt = sp.src_T = LYCO_F32;
    }
    if (mask) sp.s = copy_q ? buf + C : (const float *)qv.base;
    if (copy_q) cpu_load(&qv, 0, 0, C, qv.dt, buf + C);
    lyco_status st = cpu_merge_fwd_stream_flat(c, dl, &sp);
    free(buf);
    return st;
}

/* G_w_norm = q ⊙ (m·RN_T(G)), G_b_norm = q ⊙ (m·RN_T(Gb)) (0 without Gb); a dropped module: 0 */
static lyco_status merge_bwd(const lyco_call *c) {
    lyco_dtype T = c->dt.compute;
    float m = (float)c->m;
    static const lyco_slot slots[2] = {LYCO_W_NORM, LYCO_B_NORM};
    for (int i = 0; i < 2; i++) {
        if (!lyco_call_wants(c, slots[i])) continue;
        DLTensor *g = c->g->grad[slots[i]];
        const DLTensor *src = i == 0 ? c->d_out : c->d_out_bias;
        if (c->dropped || !src) cpu_zero_all(g);
        else masked_copy(c, g, src, T, m, i == 1 || m != 1.0f, NULL);   /* the bias path always scaled by m, as before */
    }
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

/* ---- LayerNorm rows in registers (norm_kern.h): compact token rows, x86-64-v3 and up ---- */

/* One token row (C channels) for the kernels: row pointers into the tensors and their dtypes;
   NULL for what the call does not read or write. */
typedef struct {
    const char *x, *y0, *g;       /* x; forward: y0 (NULL: none or DELTA_ONLY); backward: dy */
    char *y, *dx, *g0;            /* forward: y; backward: dx, dy0 (NULL: not written here) */
    lyco_dtype xdt, y0dt, gdt, ydt, dxdt, g0dt, T;
    const float *gam, *bet;       /* m·q·w_norm, m·q·b_norm */
    float *pw, *pb;               /* backward: the run's per-channel sums */
    float *xs, *xh, *gs;          /* scratch, C floats each */
    const char *pf_x, *pf_g;      /* a later row's x and y0 / dy: prefetched while this row computes (NULL: none) */
    char *pf_o;                   /* that row's y / dx: prefetched for writing (NULL: none) */
    int64_t C;
    float eps;
} norm_row_t;

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#define ISA_EACH_HEADER "norm_kern.h"
#define ISA_EACH_V4 1
#include "isa_each.h"
#pragma GCC pop_options

typedef void (*norm_row_fn)(const norm_row_t *r, int nr);

/* the kernel for a call (fwd: norm_fwd_row; else norm_bwd_row), or NULL: GroupNorm, a strided
   view, or the portable build / LYCO_CPU_ISA=base (the group loops below) */
static norm_row_fn row_kernel(const norm_geom *g, bool fwd, const cpu_view *const *views, int nv) {
    if (g->group) return NULL;
    for (int i = 0; i < nv; i++)
        if (views[i] && !views[i]->fast) return NULL;
#ifdef CPU_V3
    int isa = cpu_isa();
    if (isa >= 2) return fwd ? norm_fwd_row_v4 : norm_bwd_row_v4;
    if (isa == 1) return fwd ? norm_fwd_row_v3 : norm_bwd_row_v3;
#endif
    (void)fwd;
    return NULL;
}

static char *row_ptr(const cpu_view *v, int64_t r) { return v->base + r * v->rs * (int64_t)v->es; }

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
    float *fac = malloc(sizeof(float) * (size_t)(2 * C + 1)), *work = malloc(sizeof(float) * (size_t)nth * (size_t)(6 * len) + 1);
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
    const cpu_view *views[] = {&xv, &yv, add ? &y0v : NULL};
    norm_row_fn kern = row_kernel(&g, true, views, 3);
    /* the kernel takes the rows two at a time (norm_kern.h): pairs of rows, static over the threads */
    int64_t units = kern ? (g.ngroups + 1) / 2 : g.ngroups;
#pragma omp parallel for schedule(static)
    for (int64_t u = 0; u < units; u++) {
        float *x = work + (size_t)cpu_thread_id() * (size_t)(6 * len), *d = x + len, *y = d + len;
        if (kern) {
            norm_row_t r[2];
            int nr = 2 * u + 1 < g.ngroups ? 2 : 1;
            for (int q = 0; q < nr; q++) {
                int64_t k = 2 * u + q;
                r[q] = (norm_row_t){.x = row_ptr(&xv, k), .xdt = xv.dt, .y = row_ptr(&yv, k), .ydt = yv.dt, .T = T, .gam = gam, .bet = bet,
                                    .xs = x + q * 3 * len, .xh = d + q * 3 * len, .C = C, .eps = eps};
                if (add) r[q].y0 = row_ptr(&y0v, k), r[q].y0dt = y0v.dt;
                if (k + 2 < g.ngroups) {   /* the next unit's row: this thread's next (static schedule) */
                    r[q].pf_x = row_ptr(&xv, k + 2);
                    r[q].pf_o = row_ptr(&yv, k + 2);
                    if (add) r[q].pf_g = row_ptr(&y0v, k + 2);
                }
            }
            kern(r, nr);
            continue;
        }
        int64_t k = u;
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
    float *gam = malloc(sizeof(float) * (size_t)(C + 1)), *work = malloc(sizeof(float) * (size_t)nth * (size_t)(6 * b.len) + 1);
    float *part = calloc((size_t)runs * (size_t)(2 * C) + 1, sizeof(float));
    if (!gam || !work || !part) {
        free(gam);
        free(work);
        free(part);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu norm bypass: out of memory");
    }
    for (int64_t o = 0; o < C; o++) gam[o] = m * (s->q[o] * s->wn[o]);
    b.gam = gam;
    bool dy0_here = c->dy0 && !b.delta;
    const cpu_view *views[] = {&b.xv, &b.dyv, c->dx ? &b.dxv : NULL, dy0_here ? &b.dy0v : NULL};
    norm_row_fn kern = row_kernel(&b.g, false, views, 4);
    /* static: the runs are equal-sized, and a thread keeps neighbouring runs (its rows' prefetch
       chain); dynamic, 1 measured ~7 % slower at 2 threads (session 26); the bits do not depend on it */
#pragma omp parallel for schedule(static)
    for (int run = 0; run < runs; run++) {
        float *scratch = work + (size_t)cpu_thread_id() * (size_t)(6 * b.len);
        float *pw = part + (size_t)run * (size_t)(2 * C), *pb = pw + C;
        int64_t k0 = cpu_run_start(b.g.ngroups, runs, run), k1 = cpu_run_start(b.g.ngroups, runs, run + 1);
        for (int64_t k = k0; k < k1 && !kern; k++) bwd_group(&b, k, scratch, pw, pb);
        for (int64_t k = k0; k < k1 && kern; k += 2) {   /* the kernel: the run's rows two at a time */
            norm_row_t r[2];
            int nr = k + 1 < k1 ? 2 : 1;
            for (int q = 0; q < nr; q++) {
                float *sq = scratch + q * 3 * C;
                r[q] = (norm_row_t){.x = row_ptr(&b.xv, k + q), .xdt = b.xv.dt, .g = row_ptr(&b.dyv, k + q), .gdt = b.dyv.dt, .T = T,
                                    .gam = gam, .pw = pw, .pb = pb, .xs = sq, .xh = sq + C, .gs = sq + 2 * C, .C = C, .eps = b.eps};
                if (c->dx) r[q].dx = row_ptr(&b.dxv, k + q), r[q].dxdt = b.dxv.dt;
                if (dy0_here) r[q].g0 = row_ptr(&b.dy0v, k + q), r[q].g0dt = b.dy0v.dt;
                int64_t kn = k + q + 2;   /* the next two rows (past the run's end too: a run's first rows come prefetched) */
                if (kn < b.g.ngroups) {
                    r[q].pf_x = row_ptr(&b.xv, kn);
                    r[q].pf_g = row_ptr(&b.dyv, kn);
                    if (c->dx) r[q].pf_o = row_ptr(&b.dxv, kn);
                }
            }
            kern(r, nr);
        }
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
    cpu_delta dl = {.bias = bias, .c = c};
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD: return merge_fwd(c, &dl);
    case LYCO_DIR_MERGE_BWD: return merge_bwd(c);
    default: break;
    }
    if (c->dropped) return bypass_dropped(c);
    norm_t s;
    lyco_status st = norm_prepare(c, &s);
    if (st == LYCO_OK) st = c->dir == LYCO_DIR_BYPASS_FWD ? bypass_fwd(c, &s) : bypass_bwd(c, &s);
    norm_free(&s);
    return st;
}
