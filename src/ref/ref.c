/*
 * ref.c — the oracle's generic verbs (see ref.h): load operands into fp64, compose the
 * algorithm's pieces into merge fwd/bwd and bypass fwd/bwd, apply the multiplier, σs, DoRA, the
 * module mask and the bias delta, and round each output once to its dtype.
 *
 * Extra memory: fp64 copies of every operand and output (this is the oracle, not a kernel).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "ref.h"

static const ref_algo *algo_of(lyco_algo a) {
    switch (a) {
    case LYCO_ALGO_LOCON: return &ref_locon;
    case LYCO_ALGO_LOHA: return &ref_loha;
    case LYCO_ALGO_LOKR: return &ref_lokr;
    case LYCO_ALGO_DIAG_OFT: return &ref_diag_oft;
    case LYCO_ALGO_BOFT: return &ref_boft;
    case LYCO_ALGO_IA3: return &ref_ia3;
    case LYCO_ALGO_GLORA: return &ref_glora;
    case LYCO_ALGO_DYLORA: return &ref_dylora;
    case LYCO_ALGO_FULL: return &ref_full;
    case LYCO_ALGO_NORM: return &ref_norm;
    default: return NULL;
    }
}

/* ---- a small arena so every exit path frees everything ---- */
typedef ref_arena arena;

static double *alloc_d(arena *ar, int64_t n) {
    if (ar->n >= 256) { ar->failed = true; return NULL; }
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!p) ar->failed = true;
    else ar->p[ar->n++] = p;
    return p;
}
double *ref_alloc(const ref_adapter *ra, int64_t n) { return alloc_d(ra->arena, n); }

static void arena_free(arena *ar) {
    for (int i = 0; i < ar->n; i++) free(ar->p[i]);
    ar->n = 0;
}

static double *load(arena *ar, const DLTensor *t, lyco_dtype through) {
    if (!t) return NULL;
    double *p = alloc_d(ar, lyco_numel(t));
    if (p) lyco_gather_f64(t, through, p);
    return p;
}

/* An input: io's fp64 values when given, else the tensor's values rounded to `through`. */
static double *input(arena *ar, const ref_adapter *ra, ref_input which, const DLTensor *t, lyco_dtype through) {
    if (!t) return NULL;
    if (ra->io && ra->io->in[which]) {
        int64_t n = lyco_numel(t);
        double *p = alloc_d(ar, n);
        if (p) memcpy(p, ra->io->in[which], sizeof(double) * (size_t)n);
        return p;
    }
    return load(ar, t, through);
}

/* An output: captured into io when asked, else rounded once into the tensor. */
static void emit(const ref_adapter *ra, ref_output which, DLTensor *t, const double *v) {
    if (!t) return;
    if (ra->io) {
        if (ra->io->out[which]) memcpy(ra->io->out[which], v, sizeof(double) * (size_t)lyco_numel(t));
        return;
    }
    lyco_scatter_f64(t, v);
}

static bool is_mask(int s) { return s == LYCO_RANK_MASK || s == LYCO_RANK_MASK_B || s == LYCO_MODULE_MASK; }

static void load_adapter(arena *ar, const lyco_call *c, ref_adapter *ra, ref_f64_io *io) {
    memset(ra, 0, sizeof *ra);
    ra->c = c;
    ra->arena = ar;
    ra->io = io;
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        const DLTensor *t = c->a->tensor[s];
        if (!t) continue;
        ra->n[s] = lyco_numel(t);
        if (io && io->slot[s]) {
            ra->t[s] = alloc_d(ar, ra->n[s]);
            if (ra->t[s]) memcpy(ra->t[s], io->slot[s], sizeof(double) * (size_t)ra->n[s]);
        } else {
            ra->t[s] = load(ar, t, is_mask(s) ? lyco_dtype_of(t) : c->dt.compute);
        }
        if (c->g && c->g->grad[s]) ra->g[s] = alloc_d(ar, ra->n[s]);
    }
    ra->sigma = ra->t[LYCO_SCALAR] ? ra->t[LYCO_SCALAR][0] : 1.0;
    ra->bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    ra->compat = !ra->bypass && (c->a->flags & LYCO_FLAG_UPSTREAM_MERGE_SCALE) &&
                 (c->a->algo == LYCO_ALGO_LOHA || c->a->algo == LYCO_ALGO_LOKR);
    ra->O = c->dims.O;
    ra->IK = c->a->layer.kind == LYCO_LAYER_NORM ? 1 : c->dims.I * c->dims.K;
    if (c->a->layer.kind == LYCO_LAYER_CONV) ra->IK = c->dims.I / c->a->layer.groups * c->dims.K;
}

static void store_grads(const ref_adapter *ra) {
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        if (!ra->g[s]) continue;
        if (ra->io) {
            if (ra->io->grad[s]) memcpy(ra->io->grad[s], ra->g[s], sizeof(double) * (size_t)ra->n[s]);
        } else {
            lyco_scatter_f64(ra->c->g->grad[s], ra->g[s]);
        }
    }
}

static bool sigma_applies(const ref_algo *al, const ref_adapter *ra) { return al->uses_sigma && !ra->compat; }

/* ---- DoRA (ALGORITHMS.md §1.6) ---- */
typedef struct {
    double *norm;   /* ‖V‖ per kept index (no ε) */
    double *c;      /* the factor applied */
    int64_t kept;
} dora_state;

static double dora_eps(const lyco_call *c) {
    lyco_dtype d = lyco_dtype_of(c->a->tensor[LYCO_DORA_SCALE]);
    return ldexp(1.0, 1 - lyco_dtype_precision(d));
}

/* index of the kept axis for element (o, j) of V (O × IK) */
static int64_t dora_index(const lyco_call *c, int64_t o, int64_t j) {
    return c->dims.dora_on_out ? o : j / c->dims.K;
}

/* W'' = V ⊙ c with V = W + dW; fills st. */
static void dora_fwd(arena *ar, const ref_adapter *ra, const double *W, const double *dW, double *Wpp, dora_state *st) {
    const lyco_call *c = ra->c;
    int64_t O = ra->O, IK = ra->IK;
    st->kept = c->dims.dora_on_out ? O : c->dims.I;
    st->norm = alloc_d(ar, st->kept);
    st->c = alloc_d(ar, st->kept);
    if (ar->failed) return;
    for (int64_t o = 0; o < O; o++)
        for (int64_t j = 0; j < IK; j++) {
            double v = W[o * IK + j] + dW[o * IK + j];
            st->norm[dora_index(c, o, j)] += v * v;
        }
    double eps = dora_eps(c);
    const double *d = ra->t[LYCO_DORA_SCALE];
    for (int64_t k = 0; k < st->kept; k++) {
        st->norm[k] = sqrt(st->norm[k]);
        double f = d[k] / (st->norm[k] + eps);
        if (c->m != 1.0) f = c->m * (f - 1.0) + 1.0;
        st->c[k] = f;
    }
    for (int64_t o = 0; o < O; o++)
        for (int64_t j = 0; j < IK; j++) Wpp[o * IK + j] = (W[o * IK + j] + dW[o * IK + j]) * st->c[dora_index(c, o, j)];
}

/* G = ∂L/∂W''  →  GV = ∂L/∂V (written into GV), dora_scale's gradient accumulated. */
static void dora_bwd(arena *ar, ref_adapter *ra, const double *W, const double *dW, const dora_state *st,
                     const double *G, double *GV) {
    const lyco_call *c = ra->c;
    int64_t O = ra->O, IK = ra->IK;
    double *S = alloc_d(ar, st->kept);
    if (ar->failed) return;
    for (int64_t o = 0; o < O; o++)
        for (int64_t j = 0; j < IK; j++) S[dora_index(c, o, j)] += G[o * IK + j] * (W[o * IK + j] + dW[o * IK + j]);
    double eps = dora_eps(c);
    const double *d = ra->t[LYCO_DORA_SCALE];
    for (int64_t o = 0; o < O; o++)
        for (int64_t j = 0; j < IK; j++) {
            int64_t k = dora_index(c, o, j);
            double n = st->norm[k] + eps, v = W[o * IK + j] + dW[o * IK + j];
            GV[o * IK + j] = G[o * IK + j] * st->c[k] - (c->m * d[k] / (n * n)) * S[k] * v / st->norm[k];
        }
    if (ra->g[LYCO_DORA_SCALE])
        for (int64_t k = 0; k < st->kept; k++) ra->g[LYCO_DORA_SCALE][k] += c->m / (st->norm[k] + eps) * S[k];
}

/* ---- additive chain: E = W'' − W and its backward ---- */

/* dW (σs applied) from the algorithm; E = W'' − W (multiplier, DoRA applied). */
static void additive_effective(arena *ar, const ref_algo *al, const ref_adapter *ra, const double *W,
                               double *dW, double *E, dora_state *ds) {
    int64_t n = ra->O * ra->IK;
    al->delta(ra, W, dW);
    if (sigma_applies(al, ra))
        for (int64_t i = 0; i < n; i++) dW[i] *= ra->sigma;
    if (ra->c->dims.dora) {
        double *Wpp = alloc_d(ar, n);
        if (ar->failed) return;
        dora_fwd(ar, ra, W, dW, Wpp, ds);
        for (int64_t i = 0; i < n; i++) E[i] = Wpp[i] - W[i];
    } else {
        for (int64_t i = 0; i < n; i++) E[i] = ra->c->m * dW[i];
    }
}

/* G = ∂L/∂W'' → parameter gradients. dW is the σs-scaled delta from additive_effective. */
static void additive_backward(arena *ar, const ref_algo *al, ref_adapter *ra, const double *W,
                              const double *dW, const dora_state *ds, const double *G) {
    int64_t n = ra->O * ra->IK;
    double *GdW = alloc_d(ar, n);
    if (ar->failed) return;
    if (ra->c->dims.dora) dora_bwd(ar, ra, W, dW, ds, G, GdW);
    else
        for (int64_t i = 0; i < n; i++) GdW[i] = ra->c->m * G[i];
    if (sigma_applies(al, ra)) {
        if (ra->g[LYCO_SCALAR]) {
            double acc = 0;
            /* ⟨∂L/∂(σs·ΔW), ΔW⟩ with ΔW = dW/σs, written without dividing by σs */
            double *raw = alloc_d(ar, n);
            if (ar->failed) return;
            al->delta(ra, W, raw);
            double abs_acc = 0;
            for (int64_t i = 0; i < n; i++) {
                acc += GdW[i] * raw[i];
                abs_acc += fabs(GdW[i] * raw[i]);
            }
            ra->g[LYCO_SCALAR][0] += acc;
            if (ra->io) ra->io->scalar_abs += abs_acc;
        }
        for (int64_t i = 0; i < n; i++) GdW[i] *= ra->sigma;
    }
    al->delta_bwd(ra, W, GdW);
}

/* ---- verbs ---- */

static lyco_status merge_fwd(arena *ar, const ref_algo *al, ref_adapter *ra) {
    const lyco_call *c = ra->c;
    lyco_merge_mode mode = c->merge->mode;
    int64_t n = ra->O * ra->IK;
    double *W = input(ar, ra, REF_IN_W, c->merge->weight, c->dt.compute);
    double *out = alloc_d(ar, n), *E = alloc_d(ar, n), *dW = alloc_d(ar, n);
    if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref merge_fwd: out of memory");
    dora_state ds = {0};
    if (c->dropped) {
        /* E stays zero */
    } else if (al->delta) {
        additive_effective(ar, al, ra, W, dW, E, &ds);
    } else {
        al->rows(ra, W, ra->IK, out);
        for (int64_t i = 0; i < n; i++) E[i] = out[i] - W[i];
    }
    if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref merge_fwd: out of memory");
    for (int64_t i = 0; i < n; i++) {
        double w = W ? W[i] : 0.0;
        out[i] = mode == LYCO_MERGE_DELTA ? E[i] : mode == LYCO_MERGE_UNMERGE ? w - E[i] : w + E[i];
    }
    emit(ra, REF_OUT_MAIN, c->out, out);
    if (c->out_bias) {
        double *b = input(ar, ra, REF_IN_BIAS, c->merge->bias, c->dt.compute), *db = alloc_d(ar, ra->O);
        if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref merge_fwd: out of memory");
        if (!c->dropped) al->bias_delta(ra, db);
        for (int64_t o = 0; o < ra->O; o++) {
            double e = c->m * db[o], bb = b ? b[o] : 0.0;
            db[o] = mode == LYCO_MERGE_DELTA ? e : mode == LYCO_MERGE_UNMERGE ? bb - e : bb + e;
        }
        emit(ra, REF_OUT_BIAS, c->out_bias, db);
    }
    return LYCO_OK;
}

static lyco_status merge_bwd(arena *ar, const ref_algo *al, ref_adapter *ra) {
    const lyco_call *c = ra->c;
    int64_t n = ra->O * ra->IK;
    double *W = input(ar, ra, REF_IN_W, c->merge->weight, c->dt.compute);
    double *G = input(ar, ra, REF_IN_DOUT, c->d_out, c->dt.compute);
    double *E = alloc_d(ar, n), *dW = alloc_d(ar, n);
    if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref merge_bwd: out of memory");
    if (!c->dropped) {
        if (al->delta) {
            dora_state ds = {0};
            additive_effective(ar, al, ra, W, dW, E, &ds);
            if (!ar->failed) additive_backward(ar, al, ra, W, dW, &ds, G);
        } else {
            al->rows_bwd(ra, W, G, ra->IK, NULL);
        }
        if (c->d_out_bias && al->bias_delta_bwd) {
            double *Gb = input(ar, ra, REF_IN_DOUT_BIAS, c->d_out_bias, c->dt.compute);
            if (Gb) {
                for (int64_t o = 0; o < ra->O; o++) Gb[o] *= c->m;
                al->bias_delta_bwd(ra, Gb);
            }
        }
    }
    if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref merge_bwd: out of memory");
    store_grads(ra);
    return LYCO_OK;
}

/* Does this bypass act on y0 rows (OFT, BOFT, IA3 on outputs)? */
static bool bypass_is_rowmap(const lyco_call *c) {
    lyco_algo a = c->a->algo;
    return a == LYCO_ALGO_DIAG_OFT || a == LYCO_ALGO_BOFT || (a == LYCO_ALGO_IA3 && !c->a->ia3_on_input);
}

static int64_t y_numel(const lyco_call *c) {
    if (c->a->layer.kind == LYCO_LAYER_NORM) return lyco_numel(c->bypass->x);
    return c->tokens * c->dims.O * c->sp_out_n;
}

/* Adds the bias delta (O, per channel) to a y-shaped array. */
static void add_bias_rows(const lyco_call *c, const double *db, double scale, double *y) {
    int64_t O = c->dims.O, sp = c->sp_out_n;
    for (int64_t t = 0; t < c->tokens; t++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t p = 0; p < sp; p++) y[(t * O + o) * sp + p] += scale * db[o];
}

/* Δ (y-shaped) of the bypass forward. */
static lyco_status bypass_delta(arena *ar, const ref_algo *al, ref_adapter *ra, double *delta) {
    const lyco_call *c = ra->c;
    int64_t ny = y_numel(c);
    if (c->dropped) return LYCO_OK;
    if (al->bypass_fwd) {
        double *x = input(ar, ra, REF_IN_X, c->bypass->x, c->dt.compute);
        if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass: out of memory");
        al->bypass_fwd(ra, x, delta);
        return LYCO_OK;
    }
    if (bypass_is_rowmap(c)) {
        double *y0 = input(ar, ra, REF_IN_Y0, c->bypass->y0, c->dt.compute);
        double *r0 = alloc_d(ar, ny), *r1 = alloc_d(ar, ny);
        if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass: out of memory");
        ref_to_rows(c, y0, r0);
        al->rows(ra, r0, ny / ra->O, r1);
        for (int64_t i = 0; i < ny; i++) r1[i] -= r0[i];
        ref_from_rows(c, r1, delta);
        return LYCO_OK;
    }
    int64_t n = ra->O * ra->IK;
    double *W = input(ar, ra, REF_IN_W, c->bypass->weight, c->dt.compute);
    double *x = input(ar, ra, REF_IN_X, c->bypass->x, c->dt.compute);
    double *dW = alloc_d(ar, n), *E = alloc_d(ar, n);
    if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass: out of memory");
    dora_state ds = {0};
    additive_effective(ar, al, ra, W, dW, E, &ds);
    if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass: out of memory");
    ref_conv_geom g;
    ref_conv_geom_from_call(c, &g);
    ref_conv_fwd(&g, x, E, delta);
    if (al->bias_delta) {
        double *db = alloc_d(ar, ra->O);
        if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass: out of memory");
        al->bias_delta(ra, db);
        add_bias_rows(c, db, c->m, delta);
    }
    return LYCO_OK;
}

static lyco_status bypass_fwd(arena *ar, const ref_algo *al, ref_adapter *ra) {
    const lyco_call *c = ra->c;
    int64_t ny = y_numel(c);
    double *delta = alloc_d(ar, ny);
    if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass_fwd: out of memory");
    lyco_status st = bypass_delta(ar, al, ra, delta);
    if (st) return st;
    if (c->bypass->y0 && !(c->bypass->flags & LYCO_BYPASS_DELTA_ONLY)) {
        double *y0 = input(ar, ra, REF_IN_Y0, c->bypass->y0, c->dt.compute);
        if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass_fwd: out of memory");
        for (int64_t i = 0; i < ny; i++) delta[i] += y0[i];
    }
    emit(ra, REF_OUT_MAIN, c->y, delta);
    return LYCO_OK;
}

static lyco_status bypass_bwd(arena *ar, const ref_algo *al, ref_adapter *ra) {
    const lyco_call *c = ra->c;
    int64_t ny = y_numel(c), nx = lyco_numel(c->bypass->x);
    double *dy = input(ar, ra, REF_IN_DY, c->dy, c->dt.compute);
    double *dx = alloc_d(ar, nx), *dy0 = alloc_d(ar, ny);
    if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass_bwd: out of memory");
    bool delta_only = c->bypass->y0 && (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY);
    if (!delta_only) memcpy(dy0, dy, sizeof(double) * (size_t)ny); /* y = y0 + Δ; Δ alone: 0 */
    if (c->dropped) {
        /* no adapter: dx = 0, dy0 = dy, parameter gradients 0 */
    } else if (al->bypass_bwd) {
        double *x = input(ar, ra, REF_IN_X, c->bypass->x, c->dt.compute);
        if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass_bwd: out of memory");
        al->bypass_bwd(ra, x, dy, dx);
    } else if (bypass_is_rowmap(c)) {
        double *y0 = input(ar, ra, REF_IN_Y0, c->bypass->y0, c->dt.compute);
        double *r0 = alloc_d(ar, ny), *gr = alloc_d(ar, ny), *gx = alloc_d(ar, ny);
        if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass_bwd: out of memory");
        ref_to_rows(c, y0, r0);
        ref_to_rows(c, dy, gr);
        al->rows_bwd(ra, r0, gr, ny / ra->O, gx);
        ref_from_rows(c, gx, dy0);
        if (delta_only) /* y = rows(y0) − y0 */
            for (int64_t i = 0; i < ny; i++) dy0[i] -= dy[i];
    } else {
        int64_t n = ra->O * ra->IK;
        double *W = input(ar, ra, REF_IN_W, c->bypass->weight, c->dt.compute);
        double *x = input(ar, ra, REF_IN_X, c->bypass->x, c->dt.compute);
        double *dW = alloc_d(ar, n), *E = alloc_d(ar, n), *GE = alloc_d(ar, n);
        if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass_bwd: out of memory");
        dora_state ds = {0};
        additive_effective(ar, al, ra, W, dW, E, &ds);
        if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass_bwd: out of memory");
        ref_conv_geom g;
        ref_conv_geom_from_call(c, &g);
        ref_conv_dgrad(&g, dy, E, dx);
        ref_conv_wgrad(&g, x, dy, GE);
        additive_backward(ar, al, ra, W, dW, &ds, GE);
        if (al->bias_delta_bwd) {
            double *Gb = alloc_d(ar, ra->O);
            if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass_bwd: out of memory");
            int64_t O = ra->O, sp = c->sp_out_n;
            for (int64_t t = 0; t < c->tokens; t++)
                for (int64_t o = 0; o < O; o++)
                    for (int64_t p = 0; p < sp; p++) Gb[o] += c->m * dy[(t * O + o) * sp + p];
            al->bias_delta_bwd(ra, Gb);
        }
    }
    if (ar->failed) return lyco_fail(LYCO_ERR_NOMEM, "ref bypass_bwd: out of memory");
    emit(ra, REF_OUT_DX, c->dx, dx);
    emit(ra, REF_OUT_DY0, c->dy0, dy0);
    store_grads(ra);
    return LYCO_OK;
}

lyco_status lyco_ref_run(const lyco_call *c) { return lyco_ref_run_f64(c, NULL); }

lyco_status lyco_ref_run_f64(const lyco_call *c, ref_f64_io *io) {
    const ref_algo *al = algo_of(c->a->algo);
    if (!al || (!al->delta && !al->rows))
        return lyco_fail(LYCO_ERR_UNSUPPORTED, "ref: algorithm %s has no oracle", lyco_algo_name(c->a->algo));
    arena ar = {0};
    ref_adapter ra;
    load_adapter(&ar, c, &ra, io);
    lyco_status st;
    if (ar.failed) st = lyco_fail(LYCO_ERR_NOMEM, "ref: out of memory loading the adapter");
    else switch (c->dir) {
        case LYCO_DIR_MERGE_FWD: st = merge_fwd(&ar, al, &ra); break;
        case LYCO_DIR_MERGE_BWD: st = merge_bwd(&ar, al, &ra); break;
        case LYCO_DIR_BYPASS_FWD: st = bypass_fwd(&ar, al, &ra); break;
        default: st = bypass_bwd(&ar, al, &ra); break;
        }
    arena_free(&ar);
    return st;
}
