/*
 * ia3.c — fused CPU kernels of (IA)³ (ALGORITHMS.md §2.6): one vector w (D = O on outputs, D = I
 * on inputs; shape (D) or (1, D, 1, …)) scales the layer along one axis; the effective factor is
 * f = 1 + m·w. W̄ is O × I/g·K (output mode takes grouped convs; input mode has g = 1).
 *
 * merge forward through the streaming driver (stream.h: m, modes, module dropout; one pass):
 *   ΔW̄[o, j] = W̄[o, j]·w[o]  (output)   or   W̄[o, c·K+κ]·w[c]  (input)
 * merge backward, one streaming pass over ∂L/∂W'' and W (merge_bwd below; dropped or DoRA: the
 *   driver): G_w[o] = Σ_j G[o, j]·W̄[o, j]  or  G_w[c] = Σ_{o,κ} G[o, c·K+κ]·W̄[o, c·K+κ]
 *   (G = m·∂L/∂W''), summed in an order fixed by the shape (not the thread count).
 * bypass, output mode (linear and conv; a row map on y0, bias included, one elementwise pass):
 *   y = y0 ⊙ (1 + m·w)   (DELTA_ONLY: y0 ⊙ (m·w));   dy0 = dy ⊙ the same factor,
 *   G_w[o] = m·Σ dy·y0 over tokens and positions, dx = 0.
 * bypass, input mode (linear): Δ = (x ⊙ (m·w))·Wᵀ. Per tile of TB tokens, x' = x ⊙ (m·w) is
 *   formed in cache and multiplied by W in row blocks of OB outputs (W rounded to the compute
 *   dtype as each block is loaded; cpu_gemm_nt): y = y0 + x'·Wᵀ, x and y0 read once, y written
 *   once. Backward per tile: g' = dy·W (row blocks, cpu_gemm_nn), dx = g' ⊙ (m·w),
 *   G_w[i] = m·Σ_t g'[t, i]·x[t, i] (partials per fixed run of token blocks), dy0 = dy (0 for
 *   DELTA_ONLY). Every G_w partial belongs to a fixed run (cpu_runs: rows, token blocks, the merge
 *   driver's groups) and the runs are added in order: G_w does not depend on the thread count.
 * Conv bypass in input mode goes through E = W'' − W built by the merge driver (dense_bypass.c).
 * Register kernels (ia3_kern.h, x86-64-v4 / v3): the output-mode bypass rows of linear layers and
 * the output-mode merge backward's row dots, on compact rows, straight from the tensors — the
 * portable loops' operations in the same order (bitwise the same); conv, strided views and
 * LYCO_CPU_ISA=base take the row loops through fp32 buffers.
 *
 * Extra memory: w (D floats); merge: the streaming driver's IK floats per thread and, backward,
 * CPU_RUNS·D floats (G_w in the first D); bypass out: one row per thread;
 * bypass in: per thread TB·I (x') + OB·I (a W block) + TB·O (the y / dy tile) + TB·I (g');
 * backward partials D floats per run.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cpu.h"
#include "isa.h"
#include "stream.h"

#define TB 64
#define WBLK_FLOATS 65536

typedef struct {
    const lyco_call *c;
    int64_t O, I, K, IK, D;
    bool on_input;
    float *w;      /* D values, rounded to the compute dtype */
    int nt;
    float *gw;     /* CPU_RUNS × D partials: one per fixed run of rows / token blocks (cpu_runs) */
} ia3_t;

static void ia3_free(ia3_t *s) {
    free(s->w);
    free(s->gw);
}

static lyco_status ia3_prepare(const lyco_call *c, ia3_t *s, bool grads) {
    memset(s, 0, sizeof *s);
    const lyco_layer *l = &c->a->layer;
    s->c = c;
    s->O = c->dims.O;
    s->I = c->dims.I;
    s->K = c->dims.K;
    s->IK = (l->kind == LYCO_LAYER_CONV ? c->dims.I / l->groups : c->dims.I) * c->dims.K;
    s->on_input = c->a->ia3_on_input != 0;
    s->D = s->on_input ? s->I : s->O;
    s->nt = cpu_threads();
    s->w = malloc(sizeof(float) * (size_t)(s->D + 1));
    if (!s->w) return lyco_fail(LYCO_ERR_NOMEM, "cpu ia3: out of memory");
    cpu_load_all(c->a->tensor[LYCO_IA3_WEIGHT], c->dt.compute, s->w);
    if (grads) {
        s->gw = calloc((size_t)CPU_RUNS * (size_t)s->D + 1, sizeof(float));
        if (!s->gw) return lyco_fail(LYCO_ERR_NOMEM, "cpu ia3: out of memory for gradient partials");
    }
    return LYCO_OK;
}

/* Sums the partials (run order: independent of the thread count), scales by `scale` and stores G_w
   if wanted. */
static void store_gw(const ia3_t *s, float scale) {
    const lyco_call *c = s->c;
    for (int t = 1; t < CPU_RUNS; t++)
        for (int64_t i = 0; i < s->D; i++) s->gw[i] += s->gw[(size_t)t * (size_t)s->D + i];
    for (int64_t i = 0; i < s->D; i++) s->gw[i] *= scale;
    if (lyco_call_wants(c, LYCO_IA3_WEIGHT)) cpu_store_all(c->g->grad[LYCO_IA3_WEIGHT], s->gw);
}

/* ---- merge: the ΔW̄ row generator ---- */

static void rows(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, float *out) {
    const ia3_t *s = dl->state;
    for (int64_t r = 0; r < nr; r++) {
        const float *wr = W + r * s->IK;
        float *orow = out + r * s->IK;
        if (s->on_input)
            for (int64_t j = 0; j < s->IK; j++) orow[j] = wr[j] * s->w[j / s->K];
        else {
            float f = s->w[o0 + r];
            for (int64_t j = 0; j < s->IK; j++) orow[j] = wr[j] * f;
        }
    }
}

/* ΔW̄'s row o for the streaming driver (stream.h): the products of rows(), W̄·w[o] over the row
   or W̄·w[c] over runs of one input channel (K columns) */
static void span(const cpu_delta *dl, int64_t o, float *scratch, cpu_span *sp) {
    (void)scratch;
    const ia3_t *s = dl->state;
    *sp = (cpu_span){.x = CPU_SPAN_W, .s = s->on_input ? s->w : s->w + o, .period = s->on_input ? s->K : s->IK};
}

/* run: the driver's fixed run of row blocks (cpu_delta.groups = CPU_RUNS) */
static void rows_bwd(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, const float *G, int run) {
    const ia3_t *s = dl->state;
    float *gw = s->gw + (size_t)run * (size_t)s->D;
    for (int64_t r = 0; r < nr; r++) {
        const float *wr = W + r * s->IK, *g = G + r * s->IK;
        if (s->on_input) {
            for (int64_t j = 0; j < s->IK; j++) gw[j / s->K] += g[j] * wr[j];
        } else {
            float acc = 0.0f;
            for (int64_t j = 0; j < s->IK; j++) acc += g[j] * wr[j];
            gw[o0 + r] += acc;
        }
    }
}

static lyco_status finish_bwd(const cpu_delta *dl) {
    store_gw(dl->state, 1.0f);
    return LYCO_OK;
}

/* ---- the register kernels (ia3_kern.h): output-mode bypass rows, merge backward row dots ---- */

/* One token row for ia3_kern.h (linear layers, compact rows): v = RN_T(src), acc += v·RN_T(a)
   (a non-NULL), out = RN_out(v·fac) (out non-NULL); n = O elements. */
typedef struct {
    const char *src, *a;
    char *out;
    lyco_dtype sdt, adt, odt, T;
    const float *fac;
    float *acc;
    int64_t n;
} ia3_row_t;

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#define ISA_EACH_HEADER "ia3_kern.h"
#define ISA_EACH_V4 1
#include "isa_each.h"
#pragma GCC pop_options

static char *view_row(const cpu_view *v, int64_t r) { return v->base + r * v->rs * (int64_t)v->es; }

typedef void (*ia3_row_fn)(const ia3_row_t *r);
typedef void (*ia3_dot_fn)(const char *g, lyco_dtype gdt, const char *w, lyco_dtype wdt, lyco_dtype T, float m, int64_t n, float *acc);

/* the register kernels of this CPU's level, or NULL (portable build, LYCO_CPU_ISA=base: the row
   loops below) */
static ia3_row_fn row_kernel(void) {
#ifdef CPU_V3
    int isa = cpu_isa();
    if (isa >= 2) return ia3_row_v4;
    if (isa == 1) return ia3_row_v3;
#endif
    return NULL;
}
static ia3_dot_fn dot_kernel(void) {
#ifdef CPU_V3
    int isa = cpu_isa();
    if (isa >= 2) return ia3_dot_v4;
    if (isa == 1) return ia3_dot_v3;
#endif
    return NULL;
}

/* ---- merge backward, streaming (not dropped, no DoRA; else the driver) ----
   G_w = Σ (m·rnd(G))·rnd(W) over the elements of each w entry, G = ∂L/∂W'': the driver's
   per-element products, summed in an order fixed by the shape alone (independent of the thread
   count). Output mode: one row per w entry, 16 lanes by column index mod 16 across the row, then
   a fixed tree; rows static over the threads. Input mode: each channel sums its K columns over
   the rows in order (one accumulator per channel, 1-lane chains vectorised across channels);
   channel ranges static over the threads. G and W read once, in pieces of PIECE floats. */

#define PIECE 1024

static float tree16(const float *a) {
    return (((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))) +
           (((a[8] + a[9]) + (a[10] + a[11])) + ((a[12] + a[13]) + (a[14] + a[15])));
}

/* acc[j mod 16] += (m·g[j])·w[j] for j in [0, n); n a multiple of 16 except at a row's end */
static void dot16(const float *g, const float *w, int64_t n, float m, float *acc) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++) acc[l] += (m * g[j + l]) * w[j + l];
    for (int l = 0; j < n; j++, l++) acc[l] += (m * g[j]) * w[j];
}

static void bwd_rows(const lyco_call *c, const ia3_t *s, const cpu_view *gv, const cpu_view *wv, float *gw) {
    lyco_dtype T = c->dt.compute;
    float m = (float)c->m;
    int64_t IK = s->IK;
    ia3_dot_fn kern = gv->fast && wv->fast ? dot_kernel() : NULL;   /* compact rows: straight from the tensors */
#pragma omp parallel
    {
        float g[PIECE], w[PIECE], acc[16];
#pragma omp for schedule(static)
        for (int64_t o = 0; o < s->O; o++) {
            memset(acc, 0, sizeof acc);
            if (kern) kern(view_row(gv, o), gv->dt, view_row(wv, o), wv->dt, T, m, IK, acc);
            else for (int64_t j0 = 0; j0 < IK; j0 += PIECE) {
                int64_t n = IK - j0 < PIECE ? IK - j0 : PIECE;
                cpu_load(gv, o, j0, n, T, g);
                cpu_load(wv, o, j0, n, T, w);
                dot16(g, w, n, m, acc);
            }
            gw[o] = tree16(acc);
        }
    }
}

static void bwd_channels(const lyco_call *c, const ia3_t *s, const cpu_view *gv, const cpu_view *wv, float *gw) {
    lyco_dtype T = c->dt.compute;
    float m = (float)c->m;
    int64_t K = s->K, D = s->D;
    /* channel pieces of ≤ PIECE columns: about 4 per thread when there are enough channels */
    int64_t pc = (D + 4 * (int64_t)s->nt - 1) / (4 * (int64_t)s->nt);
    if (pc < 16) pc = 16;
    if (pc * K > PIECE) pc = PIECE / K > 0 ? PIECE / K : 1;
    int64_t npc = (D + pc - 1) / pc;
#pragma omp parallel
    {
        float g[PIECE], w[PIECE];
#pragma omp for schedule(static)
        for (int64_t p = 0; p < npc; p++) {
            int64_t c0 = p * pc, nc = D - c0 < pc ? D - c0 : pc;
            float *acc = gw + c0;
            memset(acc, 0, sizeof(float) * (size_t)nc);
            /* a channel wider than a piece (K > PIECE) is summed in PIECE-column steps */
            int64_t ncol = nc * K, step = ncol < PIECE ? ncol : PIECE;
            for (int64_t o = 0; o < s->O; o++)
                for (int64_t q0 = 0; q0 < ncol; q0 += step) {
                    int64_t n = ncol - q0 < step ? ncol - q0 : step;
                    cpu_load(gv, o, c0 * K + q0, n, T, g);
                    cpu_load(wv, o, c0 * K + q0, n, T, w);
                    if (K == 1)
                        for (int64_t j = 0; j < n; j++) acc[q0 + j] += (m * g[j]) * w[j];
                    else
                        for (int64_t j = 0; j < n; j++) acc[(q0 + j) / K] += (m * g[j]) * w[j];
                }
        }
    }
}

static lyco_status merge_bwd(const lyco_call *c, ia3_t *s) {
    if (!lyco_call_wants(c, LYCO_IA3_WEIGHT)) return LYCO_OK;
    cpu_view gv, wv;
    cpu_view_init(&gv, c->d_out, 1);
    cpu_view_init(&wv, c->merge->weight, 1);
    if (s->O > 0 && s->IK > 0) {
        if (s->on_input) bwd_channels(c, s, &gv, &wv, s->gw);
        else bwd_rows(c, s, &gv, &wv, s->gw);
    } else {
        memset(s->gw, 0, sizeof(float) * (size_t)s->D);
    }
    cpu_store_all(c->g->grad[LYCO_IA3_WEIGHT], s->gw);
    return LYCO_OK;
}

/* ---- bypass, output mode: y = y0 ⊙ factor, elementwise ---- */

/* What the rows of one call share: views (linear: rows = tokens, cols = O; conv: rows = (n, o),
   cols = positions), the factors, whether rows go through the register kernel. */
typedef struct {
    const lyco_call *c;
    const ia3_t *s;
    cpu_view y0v, yv, dyv, dy0v, dxv;
    const float *fac;
    float *work;          /* per thread 2·cols floats (the portable rows) */
    bool fwd, conv, want_g, has_dx;
    ia3_row_fn kern;      /* NULL: the portable rows */
} out_job;

/* row r through the register kernel */
static void row_kern(const out_job *j, int64_t r, float *gw) {
    const lyco_call *c = j->c;
    ia3_row_t k = {.T = c->dt.compute, .fac = j->fac, .n = j->y0v.cols};
    if (j->fwd) {
        k.src = view_row(&j->y0v, r), k.sdt = j->y0v.dt;
        k.out = view_row(&j->yv, r), k.odt = j->yv.dt;
    } else {
        k.src = view_row(&j->dyv, r), k.sdt = j->dyv.dt;
        if (j->want_g) k.a = view_row(&j->y0v, r), k.adt = j->y0v.dt, k.acc = gw;
        if (c->dy0) k.out = view_row(&j->dy0v, r), k.odt = j->dy0v.dt;
    }
    j->kern(&k);
}

/* row r through fp32 row buffers (any layout, conv, the portable build); gw: the run's partial */
static void row_portable(const out_job *j, int64_t r, float *gw) {
    const lyco_call *c = j->c;
    lyco_dtype T = c->dt.compute;
    int64_t C = j->y0v.cols, O = j->s->O;
    float *a = j->work + (size_t)cpu_thread_id() * (size_t)(2 * C), *g = a + C;
    const float *fac = j->fac;
    if (j->fwd) {
        cpu_load(&j->y0v, r, 0, C, T, a);
        if (j->conv)
            for (int64_t q = 0; q < C; q++) a[q] *= fac[r % O];
        else
            for (int64_t q = 0; q < C; q++) a[q] *= fac[q];
        cpu_store(&j->yv, r, 0, C, a);
        return;
    }
    cpu_load(&j->dyv, r, 0, C, T, g);
    if (j->want_g) {
        cpu_load(&j->y0v, r, 0, C, T, a);
        if (j->conv) {
            float acc = 0.0f;
            for (int64_t q = 0; q < C; q++) acc += g[q] * a[q];
            gw[r % O] += acc;
        } else {
            for (int64_t q = 0; q < C; q++) gw[q] += g[q] * a[q];
        }
    }
    if (c->dy0) {
        if (j->conv)
            for (int64_t q = 0; q < C; q++) g[q] *= fac[r % O];
        else
            for (int64_t q = 0; q < C; q++) g[q] *= fac[q];
        cpu_store(&j->dy0v, r, 0, C, g);
    }
}

/* y = y0 ⊙ fac (forward); dy0 = dy ⊙ fac, G_w = m·Σ dy·y0, dx = 0 (backward): one pass over
   fixed runs of rows (G_w partials per run), dx's rows zeroed by the same runs */
static lyco_status bypass_out(const lyco_call *c, ia3_t *s) {
    const lyco_bypass_args *b = c->bypass;
    bool delta = b->flags & LYCO_BYPASS_DELTA_ONLY;
    out_job j = {.c = c, .s = s, .fwd = c->dir == LYCO_DIR_BYPASS_FWD, .conv = c->a->layer.kind == LYCO_LAYER_CONV};
    int64_t O = s->O;
    float m = (float)c->m;
    float *fac = malloc(sizeof(float) * (size_t)(O + 1));
    if (!fac) return lyco_fail(LYCO_ERR_NOMEM, "cpu ia3: out of memory");
    for (int64_t o = 0; o < O; o++) fac[o] = delta ? m * s->w[o] : 1.0f + m * s->w[o];
    j.fac = fac;
    int split = j.conv ? 2 : b->y0->ndim - 1;
    cpu_view_init(&j.y0v, b->y0, split);
    if (j.fwd) cpu_view_init(&j.yv, c->y, split);
    else cpu_view_init(&j.dyv, c->dy, split);
    if (!j.fwd && c->dy0) cpu_view_init(&j.dy0v, c->dy0, split);
    j.has_dx = !j.fwd && c->dx;
    if (j.has_dx) cpu_view_init(&j.dxv, c->dx, c->dx->ndim > 0 ? c->dx->ndim - 1 : 0);
    j.want_g = !j.fwd && lyco_call_wants(c, LYCO_IA3_WEIGHT);
    bool fast = !j.conv && (j.fwd ? j.y0v.fast && j.yv.fast
                                  : j.dyv.fast && (!j.want_g || j.y0v.fast) && (!c->dy0 || j.dy0v.fast));
    j.kern = fast ? row_kernel() : NULL;
    int64_t R = j.y0v.rows, C = j.y0v.cols;
    float *work = j.kern ? NULL : malloc(sizeof(float) * (size_t)s->nt * (size_t)(2 * C) + 1);
    if (!j.kern && !work) {
        free(fac);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu ia3: out of memory");
    }
    j.work = work;
    const int runs = cpu_runs(R, CPU_RUNS);
#pragma omp parallel for schedule(static)
    for (int run = 0; run < runs; run++) {
        float *gw = j.want_g ? s->gw + (size_t)run * (size_t)O : NULL;
        for (int64_t r = cpu_run_start(R, runs, run); r < cpu_run_start(R, runs, run + 1); r++) {
            if (j.kern) row_kern(&j, r, gw);
            else row_portable(&j, r, gw);
        }
        if (j.has_dx) cpu_zero_rows(&j.dxv, cpu_run_start(j.dxv.rows, runs, run), cpu_run_start(j.dxv.rows, runs, run + 1));
    }
    if (j.want_g) store_gw(s, m);
    free(fac);
    free(work);
    return LYCO_OK;
}

/* ---- bypass, input mode (linear) ---- */

static int64_t out_block(const ia3_t *s) {
    int64_t ob = WBLK_FLOATS / (s->I > 0 ? s->I : 1);
    if (ob < 4) ob = 4;
    return ob > s->O ? s->O : ob;
}

static lyco_status bypass_in_fwd(const lyco_call *c, ia3_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *b = c->bypass;
    int64_t N = c->tokens, I = s->I, O = s->O, OB = out_block(s);
    bool add = b->y0 && !(b->flags & LYCO_BYPASS_DELTA_ONLY);
    cpu_view xv, wv, y0v, yv;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&wv, b->weight, 1);
    cpu_view_init(&yv, c->y, c->y->ndim - 1);
    if (add) cpu_view_init(&y0v, b->y0, b->y0->ndim - 1);
    float m = (float)c->m;
    float *mw = malloc(sizeof(float) * (size_t)(I + 1));
    int64_t per = TB * I + OB * I + TB * O;
    float *work = malloc(sizeof(float) * (size_t)s->nt * (size_t)per + 1);
    if (!mw || !work) {
        free(mw);
        free(work);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu ia3 bypass: out of memory");
    }
    for (int64_t i = 0; i < I; i++) mw[i] = m * s->w[i];
    int64_t nblocks = (N + TB - 1) / TB;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        float *x = work + (size_t)cpu_thread_id() * (size_t)per, *Wb = x + TB * I, *y = Wb + OB * I;
        int64_t t0 = blk * TB, nt = N - t0 < TB ? N - t0 : TB;
        for (int64_t t = 0; t < nt; t++) {
            float *xr = x + t * I;
            cpu_load(&xv, t0 + t, 0, I, T, xr);
            for (int64_t i = 0; i < I; i++) xr[i] *= mw[i];
            if (add) cpu_load(&y0v, t0 + t, 0, O, T, y + t * O);
        }
        for (int64_t o0 = 0; o0 < O; o0 += OB) {
            int64_t ob = O - o0 < OB ? O - o0 : OB;
            for (int64_t r = 0; r < ob; r++) cpu_load(&wv, o0 + r, 0, I, T, Wb + r * I);
            cpu_gemm_nt(nt, ob, I, x, I, Wb, I, y + o0, O, add);
        }
        for (int64_t t = 0; t < nt; t++) cpu_store(&yv, t0 + t, 0, O, y + t * O);
    }
    free(mw);
    free(work);
    return LYCO_OK;
}

static lyco_status bypass_in_bwd(const lyco_call *c, ia3_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *b = c->bypass;
    int64_t N = c->tokens, I = s->I, O = s->O, OB = out_block(s);
    bool delta = b->flags & LYCO_BYPASS_DELTA_ONLY, want_g = lyco_call_wants(c, LYCO_IA3_WEIGHT);
    cpu_view xv, wv, dyv, dxv, dy0v;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&wv, b->weight, 1);
    cpu_view_init(&dyv, c->dy, c->dy->ndim - 1);
    if (c->dx) cpu_view_init(&dxv, c->dx, c->dx->ndim - 1);
    if (c->dy0) cpu_view_init(&dy0v, c->dy0, c->dy0->ndim - 1);
    float m = (float)c->m;
    float *mw = malloc(sizeof(float) * (size_t)(I + 1));
    int64_t per = 2 * TB * I + OB * I + TB * O + O;
    float *work = malloc(sizeof(float) * (size_t)s->nt * (size_t)per + 1);
    if (!mw || !work) {
        free(mw);
        free(work);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu ia3 bypass: out of memory");
    }
    for (int64_t i = 0; i < I; i++) mw[i] = m * s->w[i];
    bool need_g = c->dx || want_g;
    int64_t nblocks = (N + TB - 1) / TB;
    const int runs = cpu_runs(nblocks, CPU_RUNS);
#pragma omp parallel for schedule(static)
    for (int run = 0; run < runs; run++)
    for (int64_t blk = cpu_run_start(nblocks, runs, run); blk < cpu_run_start(nblocks, runs, run + 1); blk++) {
        int tid = cpu_thread_id();
        float *x = work + (size_t)tid * (size_t)per, *gp = x + TB * I, *Wb = gp + TB * I, *dy = Wb + OB * I, *zero = dy + TB * O;
        int64_t t0 = blk * TB, nt = N - t0 < TB ? N - t0 : TB;
        for (int64_t t = 0; t < nt; t++) cpu_load(&dyv, t0 + t, 0, O, T, dy + t * O);
        if (c->dy0) {
            if (delta) memset(zero, 0, sizeof(float) * (size_t)O);
            for (int64_t t = 0; t < nt; t++) cpu_store(&dy0v, t0 + t, 0, O, delta ? zero : dy + t * O);
        }
        if (!need_g) continue;
        for (int64_t o0 = 0; o0 < O; o0 += OB) {   /* g' = dy · W */
            int64_t ob = O - o0 < OB ? O - o0 : OB;
            for (int64_t r = 0; r < ob; r++) cpu_load(&wv, o0 + r, 0, I, T, Wb + r * I);
            cpu_gemm_nn(nt, I, ob, dy + o0, O, Wb, I, gp, I, o0 > 0);
        }
        if (want_g) {
            float *gw = s->gw + (size_t)run * (size_t)I;
            for (int64_t t = 0; t < nt; t++) {
                float *xr = x + t * I;
                const float *g = gp + t * I;
                cpu_load(&xv, t0 + t, 0, I, T, xr);
                for (int64_t i = 0; i < I; i++) gw[i] += g[i] * xr[i];
            }
        }
        if (c->dx)
            for (int64_t t = 0; t < nt; t++) {
                float *g = gp + t * I;
                for (int64_t i = 0; i < I; i++) g[i] *= mw[i];
                cpu_store(&dxv, t0 + t, 0, I, g);
            }
    }
    if (want_g) store_gw(s, m);
    free(mw);
    free(work);
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
    if (!row) return lyco_fail(LYCO_ERR_NOMEM, "cpu ia3: out of memory");
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

lyco_status cpu_ia3(const lyco_call *c, char *why, size_t why_len) {
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    bool on_input = c->a->ia3_on_input != 0;
    (void)why; /* nothing declined */
    (void)why_len;
    bool dense = bypass && on_input && c->a->layer.kind == LYCO_LAYER_CONV; /* through E = W'' − W */
    if (bypass && c->dropped) return bypass_dropped(c);
    bool grads = c->dir == LYCO_DIR_MERGE_BWD || c->dir == LYCO_DIR_BYPASS_BWD;
    ia3_t s;
    lyco_status st = ia3_prepare(c, &s, grads);
    if (st == LYCO_OK) {
        cpu_delta dl = {.rows = rows, .rows_bwd = rows_bwd, .finish_bwd = finish_bwd, .c = c, .state = &s, .needs_w = true,
                        .groups = CPU_RUNS};
        switch (c->dir) {
        case LYCO_DIR_MERGE_FWD: st = cpu_merge_fwd_stream(c, &dl, span); break;
        case LYCO_DIR_MERGE_BWD: st = c->dropped || c->dims.dora || !c->merge->weight ? cpu_merge_bwd(c, &dl) : merge_bwd(c, &s); break;
        case LYCO_DIR_BYPASS_FWD: st = dense ? cpu_bypass_dense(c, &dl) : on_input ? bypass_in_fwd(c, &s) : bypass_out(c, &s); break;
        default:
            if (dense) st = cpu_bypass_dense(c, &dl);
            else if (on_input) st = bypass_in_bwd(c, &s);
            else st = bypass_out(c, &s);   /* dx = 0 written by its runs */
            break;
        }
    }
    ia3_free(&s);
    return st;
}
