/*
 * eager.c — the eager twin's verbs (see eager.h): load operands rounded to the compute dtype T,
 * compose the algorithm's eager pieces the way upstream's module code chains them
 * (ALGORITHMS.md §1.3: W'' = W + rnd(ΔW·m), E = W'' − W; the DoRA chain of §1.6), and store the
 * T-valued results into the output dtypes. Backward follows autograd's chain of the same ops.
 *
 * Extra memory: float copies of every operand and output (this is a baseline, not a kernel).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "eager.h"

static const eg_algo *algo_of(lyco_algo a) {
    switch (a) {
    case LYCO_ALGO_LOCON: return &eg_locon;
    case LYCO_ALGO_LOHA: return &eg_loha;
    case LYCO_ALGO_LOKR: return &eg_lokr;
    case LYCO_ALGO_DIAG_OFT: return &eg_diag_oft;
    case LYCO_ALGO_BOFT: return &eg_boft;
    case LYCO_ALGO_IA3: return &eg_ia3;
    case LYCO_ALGO_GLORA: return &eg_glora;
    case LYCO_ALGO_DYLORA: return &eg_dylora;
    case LYCO_ALGO_FULL: return &eg_full;
    case LYCO_ALGO_NORM: return &eg_norm;
    default: return NULL;
    }
}

static float *alloc_f(eg_arena *ar, int64_t n) {
    if (ar->n >= 256) { ar->failed = true; return NULL; }
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!p) ar->failed = true;
    else ar->p[ar->n++] = p;
    return p;
}
float *eg_alloc(const eg_adapter *ea, int64_t n) { return alloc_f(ea->arena, n); }

static float *load(eg_arena *ar, const DLTensor *t, lyco_dtype through) {
    if (!t) return NULL;
    float *p = alloc_f(ar, lyco_numel(t));
    if (p) lyco_gather_f32(t, through, p);
    return p;
}

static bool is_mask(int s) { return s == LYCO_RANK_MASK || s == LYCO_RANK_MASK_B || s == LYCO_MODULE_MASK; }

static void load_adapter(eg_arena *ar, const lyco_call *c, eg_adapter *ea) {
    memset(ea, 0, sizeof *ea);
    ea->c = c;
    ea->arena = ar;
    ea->T = c->dt.compute;
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        const DLTensor *t = c->a->tensor[s];
        if (!t) continue;
        ea->t[s] = load(ar, t, is_mask(s) ? lyco_dtype_of(t) : ea->T);
        ea->n[s] = lyco_numel(t);
        if (c->g && c->g->grad[s]) ea->g[s] = alloc_f(ar, ea->n[s]);
    }
    ea->has_sigma = ea->t[LYCO_SCALAR] != NULL;
    ea->sigma = ea->has_sigma ? ea->t[LYCO_SCALAR][0] : 1.0f;
    ea->bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    ea->compat = !ea->bypass && (c->a->flags & LYCO_FLAG_UPSTREAM_MERGE_SCALE) &&
                 (c->a->algo == LYCO_ALGO_LOHA || c->a->algo == LYCO_ALGO_LOKR);
    ea->O = c->dims.O;
    ea->IK = c->a->layer.kind == LYCO_LAYER_NORM ? 1 : c->dims.I * c->dims.K;
    if (c->a->layer.kind == LYCO_LAYER_CONV) ea->IK = c->dims.I / c->a->layer.groups * c->dims.K;
}

static void store_grads(const eg_adapter *ea) {
    for (int s = 0; s < LYCO_SLOT_COUNT; s++)
        if (ea->g[s]) lyco_scatter_f32(ea->c->g->grad[s], ea->g[s]);
}

/* ---- DoRA chain (ALGORITHMS.md §1.6), every op rounded to T ---- */
typedef struct {
    float *V, *norm, *n, *c;
    int64_t kept;
} eg_dora;

static int64_t dora_index(const lyco_call *c, int64_t o, int64_t j) { return c->dims.dora_on_out ? o : j / c->dims.K; }

static void dora_fwd(const eg_adapter *ea, const float *W, const float *dW, float *Wpp, eg_dora *st) {
    const lyco_call *c = ea->c;
    int64_t O = ea->O, IK = ea->IK, N = O * IK;
    lyco_dtype T = ea->T;
    st->kept = c->dims.dora_on_out ? O : c->dims.I;
    st->V = eg_alloc(ea, N);
    st->norm = eg_alloc(ea, st->kept);
    st->n = eg_alloc(ea, st->kept);
    st->c = eg_alloc(ea, st->kept);
    if (!st->V || !st->norm || !st->n || !st->c) return;
    eg_add(W, dW, st->V, N, T);                                   /* V = W + ΔW */
    for (int64_t i = 0; i < N; i++) st->norm[dora_index(c, i / IK, i % IK)] += st->V[i] * st->V[i];
    float eps = (float)ldexp(1.0, 1 - lyco_dtype_precision(lyco_dtype_of(c->a->tensor[LYCO_DORA_SCALE])));
    const float *d = ea->t[LYCO_DORA_SCALE];
    for (int64_t k = 0; k < st->kept; k++) {
        st->norm[k] = eg_rnd(sqrtf(st->norm[k]), T);                /* ‖V‖ (fp32 reduction) */
        st->n[k] = eg_rnd(st->norm[k] + eps, T);                    /* + ε */
        float f = eg_rnd(d[k] / st->n[k], T);                       /* d / n */
        if (c->m != 1.0) f = eg_rnd(eg_rnd(eg_rnd(f - 1.0f, T) * (float)c->m, T) + 1.0f, T);
        st->c[k] = f;
    }
    for (int64_t i = 0; i < N; i++) Wpp[i] = eg_rnd(st->V[i] * st->c[dora_index(c, i / IK, i % IK)], T);
}

/* G = ∂L/∂W'' → GV (∂L/∂V = ∂L/∂ΔW) and dora_scale's gradient, autograd-style roundings */
static void dora_bwd(eg_adapter *ea, const eg_dora *st, const float *G, float *GV) {
    const lyco_call *c = ea->c;
    int64_t O = ea->O, IK = ea->IK, N = O * IK;
    lyco_dtype T = ea->T;
    float *S = eg_alloc(ea, st->kept), *gc = eg_alloc(ea, st->kept), *gn = eg_alloc(ea, st->kept);
    if (!S || !gc || !gn) return;
    const float *d = ea->t[LYCO_DORA_SCALE];
    for (int64_t i = 0; i < N; i++) S[dora_index(c, i / IK, i % IK)] += G[i] * st->V[i];   /* ∂L/∂c = Σ G⊙V */
    for (int64_t k = 0; k < st->kept; k++) {
        float gck = eg_rnd(S[k], T);
        if (c->m != 1.0) gck = eg_rnd(gck * (float)c->m, T);                                 /* through m·(c−1)+1 */
        gc[k] = gck;
        /* c = d / n: ∂c/∂d = 1/n, ∂c/∂n = −d/n²; n = ‖V‖ + ε: ∂n/∂V = V/‖V‖ */
        if (ea->g[LYCO_DORA_SCALE]) ea->g[LYCO_DORA_SCALE][k] = eg_rnd(gck / st->n[k], T);
        gn[k] = eg_rnd(-eg_rnd(gck * eg_rnd(d[k] / eg_rnd(st->n[k] * st->n[k], T), T), T), T);
    }
    for (int64_t i = 0; i < N; i++) {
        int64_t k = dora_index(c, i / IK, i % IK);
        float direct = eg_rnd(G[i] * st->c[k], T);
        float via_norm = eg_rnd(gn[k] * eg_rnd(st->V[i] / st->norm[k], T), T);
        GV[i] = eg_rnd(direct + via_norm, T);
    }
}

/* ---- verbs ---- */

/* E = W'' − W (eager: W'' = W + rnd(ΔW·m) then E = rnd(W'' − W)); dora state kept for bwd. */
static void effective(const eg_algo *al, eg_adapter *ea, const float *W, float *dW, float *E, eg_dora *ds) {
    int64_t N = ea->O * ea->IK;
    lyco_dtype T = ea->T;
    al->delta(ea, W, dW);
    if (ea->arena->failed) return;
    if (ea->c->dims.dora) {
        float *Wpp = eg_alloc(ea, N);
        if (!Wpp) return;
        dora_fwd(ea, W, dW, Wpp, ds);
        eg_sub(Wpp, W, E, N, T);
        return;
    }
    memcpy(E, dW, sizeof(float) * (size_t)N);
    eg_scale(E, N, ea->c->m, T);
    if (W) {
        float *Wpp = eg_alloc(ea, N);
        if (!Wpp) return;
        eg_add(W, E, Wpp, N, T);
        eg_sub(Wpp, W, E, N, T);
    }
}

static void backward_from_E(const eg_algo *al, eg_adapter *ea, const float *W, const eg_dora *ds, const float *GE) {
    int64_t N = ea->O * ea->IK;
    float *GdW = eg_alloc(ea, N);
    if (!GdW) return;
    if (ea->c->dims.dora) dora_bwd(ea, ds, GE, GdW);
    else {
        memcpy(GdW, GE, sizeof(float) * (size_t)N);
        eg_scale(GdW, N, ea->c->m, ea->T);
    }
    if (!ea->arena->failed) al->delta_bwd(ea, W, GdW);
}

static bool rowmap_bypass(const lyco_call *c) {
    lyco_algo a = c->a->algo;
    return a == LYCO_ALGO_DIAG_OFT || a == LYCO_ALGO_BOFT || (a == LYCO_ALGO_IA3 && !c->a->ia3_on_input);
}

static int64_t y_numel(const lyco_call *c) {
    if (c->a->layer.kind == LYCO_LAYER_NORM) return lyco_numel(c->bypass->x);
    return c->tokens * c->dims.O * c->sp_out_n;
}

static lyco_status run(const eg_algo *al, eg_adapter *ea) {
    const lyco_call *c = ea->c;
    eg_arena *ar = ea->arena;
    lyco_dtype T = ea->T;
    int64_t N = ea->O * ea->IK;
    if (c->dir == LYCO_DIR_MERGE_FWD) {
        float *W = load(ar, c->merge->weight, T), *dW = alloc_f(ar, N), *E = alloc_f(ar, N), *out = alloc_f(ar, N);
        if (ar->failed) return LYCO_ERR_NOMEM;
        eg_dora ds = {0};
        if (c->dropped) {
        } else if (al->delta) effective(al, ea, W, dW, E, &ds);
        else {
            al->rows(ea, W, ea->IK, out);
            eg_sub(out, W, E, N, T);
        }
        if (ar->failed) return LYCO_ERR_NOMEM;
        lyco_merge_mode mode = c->merge->mode;
        /* row maps (OFT/BOFT) hand W'' over as computed (upstream's merge copies it), so WEIGHT
           mode keeps rows(W) instead of re-adding the rounded delta */
        bool rows_weight = !c->dropped && !al->delta && mode == LYCO_MERGE_WEIGHT;
        for (int64_t i = 0; i < N; i++) {
            float w = W ? W[i] : 0.0f;
            if (rows_weight) continue;
            out[i] = mode == LYCO_MERGE_DELTA ? E[i] : eg_rnd(mode == LYCO_MERGE_UNMERGE ? w - E[i] : w + E[i], T);
        }
        lyco_scatter_f32(c->out, out);
        if (c->out_bias) {
            float *b = load(ar, c->merge->bias, T), *db = alloc_f(ar, ea->O);
            if (ar->failed) return LYCO_ERR_NOMEM;
            if (!c->dropped) {
                al->bias_delta(ea, db);
                eg_scale(db, ea->O, c->m, T);
            }
            for (int64_t o = 0; o < ea->O; o++) {
                float bb = b ? b[o] : 0.0f;
                db[o] = mode == LYCO_MERGE_DELTA ? db[o] : eg_rnd(mode == LYCO_MERGE_UNMERGE ? bb - db[o] : bb + db[o], T);
            }
            lyco_scatter_f32(c->out_bias, db);
        }
        return LYCO_OK;
    }
    if (c->dir == LYCO_DIR_MERGE_BWD) {
        float *W = load(ar, c->merge->weight, T), *G = load(ar, c->d_out, T), *dW = alloc_f(ar, N), *E = alloc_f(ar, N);
        if (ar->failed) return LYCO_ERR_NOMEM;
        if (!c->dropped) {
            if (al->delta) {
                eg_dora ds = {0};
                effective(al, ea, W, dW, E, &ds);
                if (!ar->failed) backward_from_E(al, ea, W, &ds, G);
            } else {
                al->rows_bwd(ea, W, G, ea->IK, NULL);
            }
            if (c->d_out_bias && al->bias_delta_bwd) {
                float *Gb = load(ar, c->d_out_bias, T);
                if (Gb) {
                    eg_scale(Gb, ea->O, c->m, T);
                    al->bias_delta_bwd(ea, Gb);
                }
            }
        }
        if (ar->failed) return LYCO_ERR_NOMEM;
        store_grads(ea);
        return LYCO_OK;
    }
    int64_t ny = y_numel(c), nx = lyco_numel(c->bypass->x);
    float *x = load(ar, c->bypass->x, T), *y0 = load(ar, c->bypass->y0, T), *W = load(ar, c->bypass->weight, T);
    if (ar->failed) return LYCO_ERR_NOMEM;
    if (c->dir == LYCO_DIR_BYPASS_FWD) {
        float *delta = alloc_f(ar, ny), *y = alloc_f(ar, ny);
        if (ar->failed) return LYCO_ERR_NOMEM;
        bool whole = false; /* row maps produce the whole output y' */
        if (c->dropped) {
        } else if (rowmap_bypass(c)) {
            float *r0 = alloc_f(ar, ny), *r1 = alloc_f(ar, ny);
            if (ar->failed) return LYCO_ERR_NOMEM;
            eg_to_rows(c, y0, r0);
            al->rows(ea, r0, ny / ea->O, r1);
            eg_from_rows(c, r1, y);
            whole = true;
        } else if (al->bypass_fwd && !c->dims.dora) {
            al->bypass_fwd(ea, x, W, delta);
        } else {
            float *dW = alloc_f(ar, N), *E = alloc_f(ar, N);
            if (ar->failed) return LYCO_ERR_NOMEM;
            if (c->dims.dora) {
                eg_dora ds = {0};
                effective(al, ea, W, dW, E, &ds);
            } else {
                al->delta(ea, W, dW);
                memcpy(E, dW, sizeof(float) * (size_t)N);
                eg_scale(E, N, c->m, T);
            }
            if (ar->failed) return LYCO_ERR_NOMEM;
            eg_op_fwd(c, x, E, delta, T);
        }
        if (ar->failed) return LYCO_ERR_NOMEM;
        bool add_y0 = y0 && !(c->bypass->flags & LYCO_BYPASS_DELTA_ONLY);
        if (whole) {
            if (!add_y0) eg_sub(y, y0, y, ny, T);
        } else if (add_y0) {
            eg_add(y0, delta, y, ny, T);
        } else {
            memcpy(y, delta, sizeof(float) * (size_t)ny);
        }
        if (c->dropped && add_y0) memcpy(y, y0, sizeof(float) * (size_t)ny);
        lyco_scatter_f32(c->y, y);
        return LYCO_OK;
    }
    /* bypass backward */
    float *dy = load(ar, c->dy, T), *dx = alloc_f(ar, nx), *dy0 = alloc_f(ar, ny);
    if (ar->failed) return LYCO_ERR_NOMEM;
    /* y = y0 + Δ: ∂L/∂y0 = dy; Δ alone (LYCO_BYPASS_DELTA_ONLY): only the row maps read y0 */
    bool delta_only = c->bypass->flags & LYCO_BYPASS_DELTA_ONLY;
    if (!delta_only) memcpy(dy0, dy, sizeof(float) * (size_t)ny);
    if (c->dropped) {
    } else if (rowmap_bypass(c)) {
        float *r0 = alloc_f(ar, ny), *gr = alloc_f(ar, ny), *gx = alloc_f(ar, ny);
        if (ar->failed) return LYCO_ERR_NOMEM;
        eg_to_rows(c, y0, r0);
        eg_to_rows(c, dy, gr);
        al->rows_bwd(ea, r0, gr, ny / ea->O, gx);
        eg_from_rows(c, gx, dy0);
        if (delta_only) eg_sub(dy0, dy, dy0, ny, T);
    } else if (al->bypass_bwd && !c->dims.dora) {
        al->bypass_bwd(ea, x, W, dy, dx);
    } else {
        float *dW = alloc_f(ar, N), *E = alloc_f(ar, N), *GE = alloc_f(ar, N);
        if (ar->failed) return LYCO_ERR_NOMEM;
        eg_dora ds = {0};
        if (c->dims.dora) effective(al, ea, W, dW, E, &ds);
        else {
            al->delta(ea, W, dW);
            memcpy(E, dW, sizeof(float) * (size_t)N);
            eg_scale(E, N, c->m, T);
        }
        if (ar->failed) return LYCO_ERR_NOMEM;
        eg_op_dgrad(c, dy, E, dx, T);
        eg_op_wgrad(c, x, dy, GE, T);
        backward_from_E(al, ea, W, &ds, GE);
    }
    if (ar->failed) return LYCO_ERR_NOMEM;
    if (c->dx) lyco_scatter_f32(c->dx, dx);
    if (c->dy0) lyco_scatter_f32(c->dy0, dy0);
    store_grads(ea);
    return LYCO_OK;
}

lyco_status lyco_eager_run(const lyco_call *c) {
    const eg_algo *al = algo_of(c->a->algo);
    if (!al || (!al->delta && !al->rows))
        return lyco_fail(LYCO_ERR_UNSUPPORTED, "eager: algorithm %s has no eager twin yet", lyco_algo_name(c->a->algo));
    eg_arena ar = {0};
    eg_adapter ea;
    load_adapter(&ar, c, &ea);
    lyco_status st = ar.failed ? LYCO_ERR_NOMEM : run(al, &ea);
    for (int i = 0; i < ar.n; i++) free(ar.p[i]);
    if (st == LYCO_ERR_NOMEM) return lyco_fail(st, "eager %s %s: out of memory", lyco_algo_name(c->a->algo), lyco_direction_name(c->dir));
    return st;
}
