/*
 * full.c — fused CPU kernels of Full / native fine-tuning stored as a difference (ALGORITHMS.md
 * §2.9): ΔW̄ = diff (O × I/g·K, W's shape), Δb = diff_b (O; 0 when absent). No scale, σs, masks.
 *
 * merge through the shared driver (merge.c; forward in its streaming form, one pass over W, diff
 *   and W''): W'' = W + m·diff, b'' = b + m·diff_b via the bias hooks; backward G_diff = m·∂L/∂W'' (the driver's G, stored row by row as it streams: each row
 *   block belongs to one thread), G_diff_b = m·∂L/∂b''.
 * bypass (linear): Δ = x·(m·diff)ᵀ + m·diff_b.
 *   forward, per tile of TB tokens: y = y0 + m·diff_b, then += x·(m·D_blk)ᵀ for row blocks of OB
 *     outputs (diff rounded to the compute dtype and scaled by m as each block is loaded;
 *     cpu_gemm_nt): x and y0 read once, y written once.
 *   backward pass 1, per token tile: dx = dy·(m·diff) (row blocks, cpu_gemm_nn), dy0 = dy
 *     (0 for DELTA_ONLY);
 *   backward pass 2, per row block of OB outputs (owned by one thread, no partials):
 *     G_diff[blk] = m·Σ_tiles dy[:, blk]ᵀ·x (cpu_gemm_tn), G_diff_b[blk] = m·Σ_t dy[t, blk].
 * Conv bypass (grouped convs included) goes through E = m·diff built by the merge driver
 * (dense_bypass.c).
 *
 * Extra memory: merge: the driver's row blocks (+ O for the bias); bypass per thread:
 * forward TB·I + OB·I + TB·O floats, backward max(TB·O + OB·I + TB·I, TB·OB + TB·I + OB·I + OB).
 */
#include <stdio.h>
#include <stdlib.h>

#include "cpu.h"
#include "stream.h"

#define TB 64
#define WBLK_FLOATS 65536

typedef struct {
    const lyco_call *c;
    int64_t O, IK;
    cpu_view dv;      /* diff, rows O */
    cpu_view gv;      /* its gradient (when wanted) */
    bool want_g;
} full_t;

static void full_init(const lyco_call *c, full_t *s) {
    memset(s, 0, sizeof *s);
    s->c = c;
    cpu_view_init(&s->dv, c->a->tensor[LYCO_DIFF], 1);
    s->O = s->dv.rows;
    s->IK = s->dv.cols;
    s->want_g = lyco_call_wants(c, LYCO_DIFF);
    if (s->want_g) cpu_view_init(&s->gv, c->g->grad[LYCO_DIFF], 1);
}

/* ---- merge: the ΔW̄ row generator and the bias hooks ---- */

static void rows(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, float *out) {
    (void)W;
    const full_t *s = dl->state;
    for (int64_t r = 0; r < nr; r++) cpu_load(&s->dv, o0 + r, 0, s->IK, s->c->dt.compute, out + r * s->IK);
}

/* ΔW̄'s row o for the streaming driver (stream.h): diff's row rounded to the compute dtype, read in
   place when compact, else loaded into the scratch row */
static void span(const cpu_delta *dl, int64_t o, float *scratch, cpu_span *sp) {
    const full_t *s = dl->state;
    if (s->dv.fast) {
        *sp = (cpu_span){.x = CPU_SPAN_ROW, .src = s->dv.base + o * s->dv.rs * (int64_t)s->dv.es, .src_dt = s->dv.dt,
                         .src_T = s->c->dt.compute, .period = s->IK};
        return;
    }
    cpu_load(&s->dv, o, 0, s->IK, s->c->dt.compute, scratch);
    *sp = (cpu_span){.x = CPU_SPAN_CYCLE, .vec = scratch, .period = s->IK};
}

static void rows_bwd(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, const float *G, int tid) {
    (void)W;
    (void)tid;
    const full_t *s = dl->state;
    if (!s->want_g) return;
    for (int64_t r = 0; r < nr; r++) cpu_store(&s->gv, o0 + r, 0, s->IK, G + r * s->IK);
}

static lyco_status finish_bwd(const cpu_delta *dl) {
    (void)dl;
    return LYCO_OK;
}

static void bias(const cpu_delta *dl, float *db) {
    const full_t *s = dl->state;
    const DLTensor *t = s->c->a->tensor[LYCO_DIFF_B];
    if (t) cpu_load_all(t, s->c->dt.compute, db);
    else memset(db, 0, sizeof(float) * (size_t)s->O);
}

static lyco_status bias_bwd(const cpu_delta *dl, const float *Gb) {
    const full_t *s = dl->state;
    if (lyco_call_wants(s->c, LYCO_DIFF_B)) cpu_store_all(s->c->g->grad[LYCO_DIFF_B], Gb);
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
    if (!row) return lyco_fail(LYCO_ERR_NOMEM, "cpu full: out of memory");
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

/* ---- bypass, linear layers ---- */

static int64_t out_block(int64_t O, int64_t I) {
    int64_t ob = WBLK_FLOATS / (I > 0 ? I : 1);
    if (ob < 4) ob = 4;
    return ob > O ? O : ob;
}

/* m·diff_b (O floats, zero when absent) */
static float *bias_term(const lyco_call *c, int64_t O) {
    float *db = calloc((size_t)O + 1, sizeof(float));
    if (!db) return NULL;
    const DLTensor *t = c->a->tensor[LYCO_DIFF_B];
    if (t) {
        cpu_load_all(t, c->dt.compute, db);
        for (int64_t o = 0; o < O; o++) db[o] *= (float)c->m;
    }
    return db;
}

static lyco_status bypass_fwd(const lyco_call *c, const full_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *b = c->bypass;
    int64_t N = c->tokens, I = s->IK, O = s->O, OB = out_block(O, I);
    bool add = b->y0 && !(b->flags & LYCO_BYPASS_DELTA_ONLY);
    cpu_view xv, y0v, yv;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&yv, c->y, c->y->ndim - 1);
    if (add) cpu_view_init(&y0v, b->y0, b->y0->ndim - 1);
    float m = (float)c->m;
    int nth = cpu_threads();
    int64_t per = TB * I + OB * I + TB * O;
    float *db = bias_term(c, O), *work = malloc(sizeof(float) * (size_t)nth * (size_t)per + 1);
    if (!db || !work) {
        free(db);
        free(work);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu full bypass: out of memory");
    }
    int64_t nblocks = (N + TB - 1) / TB;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        float *x = work + (size_t)cpu_thread_id() * (size_t)per, *Db = x + TB * I, *y = Db + OB * I;
        int64_t t0 = blk * TB, nt = N - t0 < TB ? N - t0 : TB;
        for (int64_t t = 0; t < nt; t++) {
            float *yr = y + t * O;
            cpu_load(&xv, t0 + t, 0, I, T, x + t * I);
            if (add) {
                cpu_load(&y0v, t0 + t, 0, O, T, yr);
                for (int64_t o = 0; o < O; o++) yr[o] += db[o];
            } else {
                memcpy(yr, db, sizeof(float) * (size_t)O);
            }
        }
        for (int64_t o0 = 0; o0 < O; o0 += OB) {
            int64_t ob = O - o0 < OB ? O - o0 : OB;
            for (int64_t r = 0; r < ob; r++) {
                float *dr = Db + r * I;
                cpu_load(&s->dv, o0 + r, 0, I, T, dr);
                for (int64_t i = 0; i < I; i++) dr[i] *= m;
            }
            cpu_gemm_nt(nt, ob, I, x, I, Db, I, y + o0, O, true);
        }
        for (int64_t t = 0; t < nt; t++) cpu_store(&yv, t0 + t, 0, O, y + t * O);
    }
    free(db);
    free(work);
    return LYCO_OK;
}

static lyco_status bypass_bwd(const lyco_call *c, const full_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *b = c->bypass;
    int64_t N = c->tokens, I = s->IK, O = s->O, OB = out_block(O, I);
    bool delta = b->flags & LYCO_BYPASS_DELTA_ONLY, want_b = lyco_call_wants(c, LYCO_DIFF_B);
    cpu_view xv, dyv, dxv, dy0v;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&dyv, c->dy, c->dy->ndim - 1);
    if (c->dx) cpu_view_init(&dxv, c->dx, c->dx->ndim - 1);
    if (c->dy0) cpu_view_init(&dy0v, c->dy0, c->dy0->ndim - 1);
    float m = (float)c->m;
    int nth = cpu_threads();
    int64_t per1 = TB * O + OB * I + TB * I + O, per2 = TB * OB + TB * I + OB * I + OB;
    int64_t per = per1 > per2 ? per1 : per2;
    float *work = malloc(sizeof(float) * (size_t)nth * (size_t)per + 1);
    if (!work) return lyco_fail(LYCO_ERR_NOMEM, "cpu full bypass: out of memory");
    int64_t nblocks = (N + TB - 1) / TB;
    /* pass 1: dx = dy·(m·diff), dy0 */
    if (c->dx || c->dy0) {
#pragma omp parallel for schedule(static)
        for (int64_t blk = 0; blk < nblocks; blk++) {
            float *dy = work + (size_t)cpu_thread_id() * (size_t)per, *Db = dy + TB * O, *dx = Db + OB * I, *zero = dx + TB * I;
            int64_t t0 = blk * TB, nt = N - t0 < TB ? N - t0 : TB;
            for (int64_t t = 0; t < nt; t++) cpu_load(&dyv, t0 + t, 0, O, T, dy + t * O);
            if (c->dy0) {
                if (delta) memset(zero, 0, sizeof(float) * (size_t)O);
                for (int64_t t = 0; t < nt; t++) cpu_store(&dy0v, t0 + t, 0, O, delta ? zero : dy + t * O);
            }
            if (!c->dx) continue;
            for (int64_t o0 = 0; o0 < O; o0 += OB) {
                int64_t ob = O - o0 < OB ? O - o0 : OB;
                for (int64_t r = 0; r < ob; r++) {
                    float *dr = Db + r * I;
                    cpu_load(&s->dv, o0 + r, 0, I, T, dr);
                    for (int64_t i = 0; i < I; i++) dr[i] *= m;
                }
                cpu_gemm_nn(nt, I, ob, dy + o0, O, Db, I, dx, I, o0 > 0);
            }
            for (int64_t t = 0; t < nt; t++) cpu_store(&dxv, t0 + t, 0, I, dx + t * I);
        }
    }
    /* pass 2: G_diff and G_diff_b per row block of outputs */
    cpu_view gbv;
    if (want_b) cpu_view_init(&gbv, c->g->grad[LYCO_DIFF_B], 0);   /* one row of O */
    if (s->want_g || want_b) {
        int64_t nob = (O + OB - 1) / OB;
#pragma omp parallel for schedule(static)
        for (int64_t ob_i = 0; ob_i < nob; ob_i++) {
            float *dyb = work + (size_t)cpu_thread_id() * (size_t)per, *x = dyb + TB * OB, *G = x + TB * I, *gb = G + OB * I;
            int64_t o0 = ob_i * OB, ob = O - o0 < OB ? O - o0 : OB;
            memset(gb, 0, sizeof(float) * (size_t)ob);
            for (int64_t blk = 0; blk < nblocks; blk++) {
                int64_t t0 = blk * TB, nt = N - t0 < TB ? N - t0 : TB;
                for (int64_t t = 0; t < nt; t++) {
                    const float *d = dyb + t * ob;
                    cpu_load(&dyv, t0 + t, o0, ob, T, dyb + t * ob);
                    for (int64_t o = 0; o < ob; o++) gb[o] += d[o];
                }
                if (s->want_g) {
                    for (int64_t t = 0; t < nt; t++) cpu_load(&xv, t0 + t, 0, I, T, x + t * I);
                    cpu_gemm_tn(ob, I, nt, dyb, ob, x, I, G, I, blk > 0);
                }
            }
            if (s->want_g) {
                if (nblocks == 0) memset(G, 0, sizeof(float) * (size_t)(ob * I));
                for (int64_t r = 0; r < ob; r++) {
                    float *g = G + r * I;
                    for (int64_t i = 0; i < I; i++) g[i] *= m;
                    cpu_store(&s->gv, o0 + r, 0, I, g);
                }
            }
            if (want_b) {
                for (int64_t o = 0; o < ob; o++) gb[o] *= m;
                cpu_store(&gbv, 0, o0, ob, gb);
            }
        }
    }
    free(work);
    return LYCO_OK;
}

lyco_status cpu_full(const lyco_call *c, char *why, size_t why_len) {
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    (void)why; /* nothing declined */
    (void)why_len;
    bool dense = bypass && c->a->layer.kind == LYCO_LAYER_CONV; /* through E = m·diff (dense_bypass.c) */
    if (bypass && c->dropped) return bypass_dropped(c);
    full_t s;
    full_init(c, &s);
    cpu_delta dl = {.rows = rows, .rows_bwd = rows_bwd, .finish_bwd = finish_bwd, .bias = bias, .bias_bwd = bias_bwd, .c = c, .state = &s};
    lyco_status st;
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD: st = cpu_merge_fwd_stream(c, &dl, span); break;
    case LYCO_DIR_MERGE_BWD:
        st = cpu_merge_bwd(c, &dl);
        /* ∂L/∂b'' not given: G_diff_b = 0 */
        if (!st && !c->dropped && !c->d_out_bias && lyco_call_wants(c, LYCO_DIFF_B))
            st = copy_or_zero(c->g->grad[LYCO_DIFF_B], NULL, LYCO_F32);
        break;
    case LYCO_DIR_BYPASS_FWD: st = dense ? cpu_bypass_dense(c, &dl) : bypass_fwd(c, &s); break;
    default: st = dense ? cpu_bypass_dense(c, &dl) : bypass_bwd(c, &s); break;
    }
    return st;
}
