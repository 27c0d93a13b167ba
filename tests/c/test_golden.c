/*
 * test_golden.c — lyco's fp64 oracle (ref backend) against golden vectors computed by the
 * upstream Python package lycoris-lora 4.1.3 (tests/golden/make_golden.py, README.md there;
 * fixtures in tests/data/golden/<algo>_<variant>_{fp32,bf16}.safetensors, one case per file:
 * adapter slots under lyco's slot names, W b x y0 G gy [Gb], and upstream's merge_fwd,
 * merge_fwd_b, merge_bwd.<slot>, merge_y, bypass_fwd, bypass_bwd.<slot>, bypass_bwd.x).
 *
 * For every file the adapter is rebuilt from the tensors and the metadata (algo, layer geometry,
 * alpha, multiplier, constraint, wd_on_out, on_input, DyLoRA rank), and the oracle runs
 * merge_fwd (LYCO_MERGE_WEIGHT), merge_bwd (d_out = G, d_out_bias = Gb), bypass_fwd (x, y0) and
 * bypass_bwd (dy = gy). The oracle sees exactly the fixture's values, widened to fp32 (bf16
 * values are exact in fp32; dora_scale keeps its own dtype because DoRA's ε is the machine
 * epsilon of dtype(dora_scale)), so its fp32 outputs are the fp64 result rounded once: the
 * reference. Upstream's tensor is scored against it with lyco_score_f64 in the fixture's dtype
 * (the hybrid rule: every element within 0.5·ulp(r_i) + budget·ulp(rms)). Budgets:
 *   bf16 files  8 ULP of bf16 relative to RMS (upstream rounds every intermediate in bf16, an
 *               eager-like chain; its OFT/BOFT bypass returns fp32 there, but from bf16-rounded
 *               intermediates, so it is scored in bf16 too);
 *   fp32 files 64 ULP of fp32 relative to RMS (upstream's fp32 chain still rounds
 *               intermediates).
 *
 * Where lyco departs from upstream on purpose (ALGORITHMS.md §8), the documented difference is
 * asserted instead of equality:
 *   §8 #1  LoHa/LoKr merge: upstream W'' = W + m·s²·ΔW0. With LYCO_FLAG_UPSTREAM_MERGE_SCALE the
 *          oracle must match merge_fwd and merge_bwd; lyco's default (s once) must differ from
 *          merge_fwd (unless s = 1), upstream's ΔW must equal s × lyco's default ΔW, upstream's
 *          gradients s × lyco's default gradients, and lyco's default merge must reproduce
 *          upstream's own merge-mode forward merge_y (which uses s once).
 *   §8 #5, #7, #8  OFT/BOFT/IA3-out bypass acts on y0 including its bias, as upstream does:
 *          lyco matches bypass_fwd; it must differ from merge_y; and map(y0) − map(b) + b (the
 *          bias-excluded form, computed from lyco's bypass of a y0 made of b) must match merge_y.
 *   §8 #13 DoRA in bypass: upstream silently ignores DoRA; lyco applies it (merge-equivalent).
 *          Upstream's bypass outputs are compared with lyco's bypass without dora_scale; lyco's
 *          DoRA bypass must differ from upstream's bypass_fwd and match merge_y.
 * Other comparisons: merge_y against y0 + op(x, W''−W) (+ bias delta) from lyco's merge delta
 * (Norm: lyco's Norm bypass, which is upstream's NormModule.forward; Full: also lyco's Full
 * bypass, which upstream lacks). bypass_bwd.x: lyco's dx is the adapter path only, so the test
 * adds the base layer's input gradient opᵀ(dy0, W) (linear Wᵀ·dy0, conv a transposed conv),
 * with dy0 from lyco (dy for additive algorithms, the mapped gradient for OFT/BOFT/IA3-out).
 * Outputs upstream could not produce (Full/Norm/DyLoRA bypass, DyLoRA merge_y) are absent and
 * reported as skip; an oracle still returning LYCO_ERR_UNSUPPORTED is reported as skip too. An
 * upstream output tensor that no comparison used is a failure.
 *
 * Usage: test_golden DIR     (DIR = tests/data/golden)
 * Prints "ok|FAIL|skip <file> <output> <ulp> <budget> <note>" per comparison (ulp = the hybrid
 * score; budget ">B" means the values must differ by more than B; those "must differ" checks are
 * scored on the adapter's contribution, W''−W or y−y0, so that a small ΔW cannot hide the
 * difference under the RMS of W or y) and ends with
 * "N passed, M failed"; exit status 1 on any failure.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "io/safetensors.h"

#define BUDGET_BF16 8.0
#define BUDGET_FP32 64.0
#define LN_EPS 1e-5 /* torch.nn.LayerNorm default; the fixtures use LayerNorm(12) */

static int n_pass, n_fail, n_skip;
static lyco_ctx *ctx;

/* ---- a per-fixture allocation pool ---- */
typedef struct {
    void **p;
    int n, cap;
    bool failed;
} pool;

static void *pool_alloc(pool *pl, size_t bytes) {
    if (pl->n == pl->cap) {
        int cap = pl->cap ? 2 * pl->cap : 64;
        void **np = realloc(pl->p, sizeof(void *) * (size_t)cap);
        if (!np) { pl->failed = true; return NULL; }
        pl->p = np;
        pl->cap = cap;
    }
    void *q = calloc(1, bytes ? bytes : 1);
    if (!q) { pl->failed = true; return NULL; }
    pl->p[pl->n++] = q;
    return q;
}

static void pool_free(pool *pl) {
    for (int i = 0; i < pl->n; i++) free(pl->p[i]);
    free(pl->p);
    memset(pl, 0, sizeof *pl);
}

/* ---- one fixture ---- */
typedef struct {
    const char *file;
    lyco_st_file *st;
    bool *used;                 /* per tensor index: fetched by a comparison */
    pool pl;
    lyco_dtype dt;              /* the fixture's dtype: every comparison is scored in it */
    lyco_algo algo;
    bool conv, norm, hada, rowmap, dora, has_bias_delta;
    int64_t O, I;
    int64_t k[2], stride[2], pad[2], dil[2];
    double s;                   /* upstream's scale (metadata), NaN if none */
    lyco_adapter a;
    DLTensor *W, *b, *x, *y0, *G, *gy, *Gb;   /* fp32 copies for the oracle */
    double *W64, *b64, *x64, *y064;           /* exact values for the test's own arithmetic */
} fx;

static const char *meta(const fx *f, const char *key) {
    const char *v = lyco_st_metadata(f->st, key);
    return v ? v : "";
}

static double meta_num(const fx *f, const char *key) {
    const char *v = meta(f, key);
    return *v ? strtod(v, NULL) : NAN;
}

/* "3,3" → {3, 3}; false when malformed */
static bool meta_pair(const fx *f, const char *key, int64_t out[2]) {
    return sscanf(meta(f, key), "%lld,%lld", (long long *)&out[0], (long long *)&out[1]) == 2;
}

/* ---- reporting ---- */
static double budget_of(lyco_dtype T) { return T == LYCO_F32 ? BUDGET_FP32 : BUDGET_BF16; }

/* expect_differ: the assertion is that the values differ by more than the budget. */
static void compare(const fx *f, const char *output, const double *y, const double *r, int64_t n, lyco_dtype Ty,
                    bool expect_differ, const char *note) {
    lyco_dtype T = f->dt;
    lyco_score sc;
    lyco_score_f64(y, r, n, 0, T, &sc);
    double budget = budget_of(T);
    bool within = lyco_score_pass(&sc, budget);
    bool ok = expect_differ ? (!within && sc.bad_class == 0) : within;
    printf("%s %s %s %.2f %s%g %s%s%s\n", ok ? "ok" : "FAIL", f->file, output, sc.max_excess, expect_differ ? ">" : "", budget,
           note, Ty != T ? " [upstream returns fp32 here; scored in the fixture's bf16]" : "",
           sc.bad_class ? " [NaN/Inf or class mismatch]" : "");
    if (ok) n_pass++;
    else n_fail++;
}

static void fail_line(const fx *f, const char *output, const char *why) {
    printf("FAIL %s %s - - %s\n", f->file, output, why);
    n_fail++;
}

static void skip_line(const fx *f, const char *output, const char *why) {
    printf("skip %s %s - - %s\n", f->file, output, why);
    n_skip++;
}

/* An oracle status: OK, or one skip/FAIL line per output that depends on it. */
static bool oracle_ok(const fx *f, lyco_status st, const char *const *outputs, int nout) {
    if (st == LYCO_OK) return true;
    char why[400];
    snprintf(why, sizeof why, "oracle %s: %s", lyco_status_name(st), lyco_last_error());
    for (int i = 0; i < nout; i++) {
        if (st == LYCO_ERR_UNSUPPORTED) skip_line(f, outputs[i], why);
        else fail_line(f, outputs[i], why);
    }
    return false;
}

/* ---- tensors ---- */
typedef struct {
    DLTensor t;
    int64_t shape[8];
} owned;

static DLTensor *new_tensor(fx *f, lyco_dtype d, int32_t ndim, const int64_t *shape) {
    owned *o = pool_alloc(&f->pl, sizeof *o);
    if (!o || ndim > 8) return NULL;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (o->shape[i] = shape[i]);
    void *data = pool_alloc(&f->pl, (size_t)n * lyco_dtype_size(d));
    if (!data) return NULL;
    o->t = lyco_host_tensor(data, d, ndim, o->shape);
    return &o->t;
}

static DLTensor *new_like(fx *f, const DLTensor *like, lyco_dtype d) { return new_tensor(f, d, like->ndim, like->shape); }

static double *to_f64(fx *f, const DLTensor *t) {
    double *p = pool_alloc(&f->pl, sizeof(double) * (size_t)lyco_numel(t));
    if (p) lyco_gather_f64(t, lyco_dtype_of(t), p);
    return p;
}

static double *alloc_f64(fx *f, int64_t n) { return pool_alloc(&f->pl, sizeof(double) * (size_t)n); }

/* A "must differ" assertion scored on the adapter's contribution: y − base against r − base
   (base = W for merges, y0 for bypasses), so the ULPs are relative to the RMS of the delta,
   where the documented difference lives, not to the RMS of W'' or y. */
static void compare_delta_differ(fx *f, const char *output, const double *y, const double *r, const double *base, int64_t n,
                                 lyco_dtype Ty, const char *note) {
    double *dy = alloc_f64(f, n), *dr = alloc_f64(f, n);
    if (!dy || !dr) { fail_line(f, output, "out of memory"); return; }
    for (int64_t i = 0; i < n; i++) {
        dy[i] = y[i] - base[i];
        dr[i] = r[i] - base[i];
    }
    compare(f, output, dy, dr, n, Ty, true, note);
}

/* The fixture tensor `name` as a view (NULL when absent). Marks it used. */
static bool view_of(fx *f, const char *name, DLTensor *out) {
    const lyco_st_tensor *t = lyco_st_find(f->st, name);
    if (!t) return false;
    for (int64_t i = 0; i < lyco_st_count(f->st); i++)
        if (lyco_st_get(f->st, i) == t) f->used[i] = true;
    return lyco_st_tensor_view(t, out) == LYCO_OK;
}

/* An owned compact copy of fixture tensor `name` in dtype `as` (exact widening), or NULL. */
static DLTensor *copy_as(fx *f, const char *name, lyco_dtype as) {
    DLTensor v;
    if (!view_of(f, name, &v)) return NULL;
    DLTensor *t = new_like(f, &v, as);
    double *tmp = to_f64(f, &v);
    if (!t || !tmp) return NULL;
    lyco_scatter_f64(t, tmp);
    return t;
}

/* Upstream's tensor `name`: exact fp64 values, element count and dtype; NULL when absent. */
static double *upstream(fx *f, const char *name, int64_t *n, lyco_dtype *T) {
    DLTensor v;
    if (!view_of(f, name, &v)) return NULL;
    *n = lyco_numel(&v);
    *T = lyco_dtype_of(&v);
    return to_f64(f, &v);
}

/* ---- the base layer's op in fp64 (test side): y = op(x, w) without bias, and its dgrad ---- */
static void op_fwd(const fx *f, const double *x, const double *w, double *y) {
    if (!f->conv) {
        int64_t T = lyco_numel(f->x) / f->I;
        for (int64_t t = 0; t < T; t++)
            for (int64_t o = 0; o < f->O; o++) {
                double s = 0;
                for (int64_t i = 0; i < f->I; i++) s += x[t * f->I + i] * w[o * f->I + i];
                y[t * f->O + o] = s;
            }
        return;
    }
    int64_t N = f->x->shape[0], C = f->I, H = f->x->shape[2], Wd = f->x->shape[3];
    int64_t Ho = f->y0->shape[2], Wo = f->y0->shape[3], KH = f->k[0], KW = f->k[1];
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < f->O; o++)
            for (int64_t oh = 0; oh < Ho; oh++)
                for (int64_t ow = 0; ow < Wo; ow++) {
                    double s = 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t kh = 0; kh < KH; kh++)
                            for (int64_t kw = 0; kw < KW; kw++) {
                                int64_t ih = oh * f->stride[0] - f->pad[0] + kh * f->dil[0];
                                int64_t iw = ow * f->stride[1] - f->pad[1] + kw * f->dil[1];
                                if (ih < 0 || ih >= H || iw < 0 || iw >= Wd) continue;
                                s += x[((n * C + c) * H + ih) * Wd + iw] * w[((o * C + c) * KH + kh) * KW + kw];
                            }
                    y[((n * f->O + o) * Ho + oh) * Wo + ow] = s;
                }
}

static void op_dgrad(const fx *f, const double *dy, const double *w, double *dx) {
    int64_t nx = lyco_numel(f->x);
    memset(dx, 0, sizeof(double) * (size_t)nx);
    if (!f->conv) {
        int64_t T = nx / f->I;
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < f->I; i++) {
                double s = 0;
                for (int64_t o = 0; o < f->O; o++) s += dy[t * f->O + o] * w[o * f->I + i];
                dx[t * f->I + i] = s;
            }
        return;
    }
    int64_t N = f->x->shape[0], C = f->I, H = f->x->shape[2], Wd = f->x->shape[3];
    int64_t Ho = f->y0->shape[2], Wo = f->y0->shape[3], KH = f->k[0], KW = f->k[1];
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < f->O; o++)
            for (int64_t oh = 0; oh < Ho; oh++)
                for (int64_t ow = 0; ow < Wo; ow++) {
                    double g = dy[((n * f->O + o) * Ho + oh) * Wo + ow];
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t kh = 0; kh < KH; kh++)
                            for (int64_t kw = 0; kw < KW; kw++) {
                                int64_t ih = oh * f->stride[0] - f->pad[0] + kh * f->dil[0];
                                int64_t iw = ow * f->stride[1] - f->pad[1] + kw * f->dil[1];
                                if (ih < 0 || ih >= H || iw < 0 || iw >= Wd) continue;
                                dx[((n * C + c) * H + ih) * Wd + iw] += g * w[((o * C + c) * KH + kh) * KW + kw];
                            }
                }
}

/* Per-channel vector v (O) broadcast over a y-shaped array: channel = last dim (linear) or
   dim 1 (conv). */
static void add_channel(const fx *f, const double *v, double scale, double *y) {
    int64_t ny = lyco_numel(f->y0);
    int64_t sp = f->conv ? f->y0->shape[2] * f->y0->shape[3] : 1;
    for (int64_t i = 0; i < ny; i++) y[i] += scale * v[(i / sp) % f->O];
}

/* ---- oracle calls (ref backend) ---- */
static lyco_status oracle_merge_fwd(fx *f, const lyco_adapter *a, lyco_merge_mode mode, double **out, double **outb) {
    lyco_dtypes dt;
    lyco_status st = lyco_resolve_dtypes(ctx, a, f->W, NULL, NULL, &dt);
    if (st) return st;
    DLTensor *o = new_like(f, f->W, dt.output);
    DLTensor *ob = f->has_bias_delta ? new_like(f, f->b, dt.output) : NULL;
    if (!o || (f->has_bias_delta && !ob)) return LYCO_ERR_NOMEM;
    lyco_merge_args in = {f->W, f->has_bias_delta ? f->b : NULL, mode};
    if ((st = lyco_merge_fwd(ctx, o, ob, a, &in))) return st;
    *out = to_f64(f, o);
    if (outb) *outb = ob ? to_f64(f, ob) : NULL;
    return LYCO_OK;
}

static bool is_mask(int s) { return s == LYCO_RANK_MASK || s == LYCO_RANK_MASK_B || s == LYCO_MODULE_MASK; }

/* Gradient outputs for every present (non-mask) slot, in the slot's dtype. */
static bool make_grads(fx *f, const lyco_adapter *a, lyco_grads *g) {
    memset(g, 0, sizeof *g);
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        if (!a->tensor[s] || is_mask(s)) continue;
        g->grad[s] = new_like(f, a->tensor[s], lyco_dtype_of(a->tensor[s]));
        if (!g->grad[s]) return false;
    }
    return true;
}

static void grads_f64(fx *f, const lyco_grads *g, double *out[LYCO_SLOT_COUNT]) {
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) out[s] = g->grad[s] ? to_f64(f, g->grad[s]) : NULL;
}

static lyco_status oracle_merge_bwd(fx *f, const lyco_adapter *a, double *grad[LYCO_SLOT_COUNT]) {
    lyco_grads g;
    if (!make_grads(f, a, &g)) return LYCO_ERR_NOMEM;
    lyco_merge_args in = {f->W, f->has_bias_delta ? f->b : NULL, LYCO_MERGE_WEIGHT};
    lyco_status st = lyco_merge_bwd(ctx, &g, a, &in, f->G, f->has_bias_delta ? f->Gb : NULL);
    if (st) return st;
    grads_f64(f, &g, grad);
    return LYCO_OK;
}

static lyco_status oracle_bypass_fwd(fx *f, const lyco_adapter *a, const DLTensor *y0, double **y) {
    const DLTensor *w = f->norm ? NULL : f->W;
    lyco_dtypes dt;
    lyco_status st = lyco_resolve_dtypes(ctx, a, w, f->x, y0, &dt);
    if (st) return st;
    DLTensor *out = new_like(f, f->y0, dt.output);
    if (!out) return LYCO_ERR_NOMEM;
    lyco_bypass_args in = {f->x, y0, w, 0};
    if ((st = lyco_bypass_fwd(ctx, out, a, &in))) return st;
    *y = to_f64(f, out);
    return LYCO_OK;
}

static lyco_status oracle_bypass_bwd(fx *f, const lyco_adapter *a, double *grad[LYCO_SLOT_COUNT], double **dx, double **dy0) {
    lyco_grads g;
    if (!make_grads(f, a, &g)) return LYCO_ERR_NOMEM;
    DLTensor *tdx = new_like(f, f->x, lyco_dtype_of(f->x)), *tdy0 = new_like(f, f->y0, lyco_dtype_of(f->y0));
    if (!tdx || !tdy0) return LYCO_ERR_NOMEM;
    lyco_bypass_args in = {f->x, f->y0, f->norm ? NULL : f->W, 0};
    lyco_status st = lyco_bypass_bwd(ctx, &g, tdx, tdy0, a, &in, f->gy);
    if (st) return st;
    grads_f64(f, &g, grad);
    *dx = to_f64(f, tdx);
    *dy0 = to_f64(f, tdy0);
    return LYCO_OK;
}

/* ---- building the adapter from the file ---- */
static bool build(fx *f) {
    char why[300];
    const char *algo = meta(f, "algo"), *layer = meta(f, "layer"), *dts = meta(f, "dtype");
    if (lyco_algo_from_name(algo, &f->algo)) {
        snprintf(why, sizeof why, "metadata algo \"%s\": %s", algo, lyco_last_error());
        fail_line(f, "setup", why);
        return false;
    }
    if (strcmp(dts, "fp32") && strcmp(dts, "bf16")) {
        snprintf(why, sizeof why, "metadata dtype \"%s\"; expected fp32 or bf16", dts);
        fail_line(f, "setup", why);
        return false;
    }
    f->dt = strcmp(dts, "fp32") ? LYCO_BF16 : LYCO_F32;
    f->O = (int64_t)meta_num(f, "O");
    f->I = (int64_t)meta_num(f, "I");
    lyco_adapter_init(&f->a, f->algo);
    if (!strcmp(layer, "linear")) {
        lyco_layer_linear(&f->a.layer, f->O, f->I);
    } else if (!strcmp(layer, "conv2d")) {
        f->conv = true;
        if (!meta_pair(f, "kernel", f->k) || !meta_pair(f, "stride", f->stride) || !meta_pair(f, "padding", f->pad) ||
            !meta_pair(f, "dilation", f->dil)) {
            fail_line(f, "setup", "conv2d metadata kernel/stride/padding/dilation missing or malformed");
            return false;
        }
        if (lyco_layer_conv(&f->a.layer, 2, f->O, f->I, f->k, f->stride, f->pad, f->dil, 1)) {
            fail_line(f, "setup", lyco_last_error());
            return false;
        }
    } else if (!strcmp(layer, "layernorm")) {
        f->norm = true;
        lyco_layer_norm(&f->a.layer, LYCO_NORM_LAYER, f->O, 1, LN_EPS);
    } else {
        snprintf(why, sizeof why, "metadata layer \"%s\"; expected linear, conv2d or layernorm", layer);
        fail_line(f, "setup", why);
        return false;
    }
    /* adapter slots: the tensors named like the slots, widened to fp32; dora_scale keeps its
       dtype (DoRA's ε is the epsilon of dtype(dora_scale)) */
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        if (is_mask(s) || s == LYCO_SCALAR) continue;
        const char *name = lyco_slot_name((lyco_slot)s);
        DLTensor v;
        if (!view_of(f, name, &v)) continue;
        f->a.tensor[s] = copy_as(f, name, s == LYCO_DORA_SCALE ? lyco_dtype_of(&v) : LYCO_F32);
        if (!f->a.tensor[s]) { fail_line(f, "setup", "out of memory"); return false; }
    }
    f->W = copy_as(f, "W", LYCO_F32);
    f->b = copy_as(f, "b", LYCO_F32);
    f->x = copy_as(f, "x", LYCO_F32);
    f->y0 = copy_as(f, "y0", LYCO_F32);
    f->G = copy_as(f, "G", LYCO_F32);
    f->gy = copy_as(f, "gy", LYCO_F32);
    f->Gb = copy_as(f, "Gb", LYCO_F32);
    if (!f->W || !f->b || !f->x || !f->y0 || !f->G || !f->gy) {
        fail_line(f, "setup", "a base tensor (W, b, x, y0, G, gy) is missing");
        return false;
    }
    f->W64 = to_f64(f, f->W);
    f->b64 = to_f64(f, f->b);
    f->x64 = to_f64(f, f->x);
    f->y064 = to_f64(f, f->y0);

    double alpha = meta_num(f, "alpha"), mult = meta_num(f, "multiplier"), kappa = meta_num(f, "constraint");
    f->a.alpha = alpha;                       /* NaN = absent */
    f->a.multiplier = isnan(mult) ? 1.0 : mult;
    f->s = meta_num(f, "scale");
    /* the OFT/BOFT modules multiply the constraint by O; lyco takes it already multiplied */
    if ((f->algo == LYCO_ALGO_DIAG_OFT || f->algo == LYCO_ALGO_BOFT) && kappa > 0) f->a.constraint = kappa * (double)f->O;
    const char *wd = meta(f, "wd_on_out");
    f->a.wd_on_out = *wd ? atoi(wd) : -1;
    f->a.ia3_on_input = !strcmp(meta(f, "on_input"), "1");
    if (f->algo == LYCO_ALGO_DYLORA) {
        /* get_merged_weight(rank=ρ): t = ceil(ρ/bs), blocks 0..t active (the notes say "ceil(ρ/bs)") */
        const char *p = strstr(meta(f, "notes"), "ceil(");
        long long rho = 0, bs = 0;
        if (!p || sscanf(p, "ceil(%lld/%lld)", &rho, &bs) != 2 || bs <= 0) {
            fail_line(f, "setup", "DyLoRA notes lack \"ceil(rank/block_size)\"");
            return false;
        }
        f->a.dylora_block_size = (int32_t)bs;
        f->a.dylora_active_blocks = (int32_t)((rho + bs - 1) / bs + 1);
    }
    f->hada = f->algo == LYCO_ALGO_LOHA || f->algo == LYCO_ALGO_LOKR;
    f->rowmap = f->algo == LYCO_ALGO_DIAG_OFT || f->algo == LYCO_ALGO_BOFT || (f->algo == LYCO_ALGO_IA3 && !f->a.ia3_on_input);
    f->dora = f->a.tensor[LYCO_DORA_SCALE] != NULL;
    f->has_bias_delta = (f->algo == LYCO_ALGO_FULL && f->a.tensor[LYCO_DIFF_B]) || (f->algo == LYCO_ALGO_NORM && f->a.tensor[LYCO_B_NORM]);
    if (f->has_bias_delta && !f->Gb) {
        fail_line(f, "setup", "a bias delta is present but Gb is missing");
        return false;
    }
    if (f->hada && !(f->s > 0)) {
        fail_line(f, "setup", "LoHa/LoKr fixture without metadata scale");
        return false;
    }
    if (f->pl.failed) { fail_line(f, "setup", "out of memory"); return false; }
    return true;
}

/* ---- the comparisons ---- */

/* merge_fwd (and merge_fwd_b); LoHa/LoKr: the §8 #1 assertions. */
static void check_merge_fwd(fx *f) {
    int64_t n, nb = 0;
    lyco_dtype T, Tb = LYCO_F32;
    double *up = upstream(f, "merge_fwd", &n, &T), *upb = upstream(f, "merge_fwd_b", &nb, &Tb);
    if (!up) { skip_line(f, "merge_fwd", "not produced upstream (see notes)"); return; }
    double *out = NULL, *outb = NULL;
    static const char *const names[] = {"merge_fwd", "merge_fwd_b"};
    if (!f->hada) {
        if (!oracle_ok(f, oracle_merge_fwd(f, &f->a, LYCO_MERGE_WEIGHT, &out, &outb), names, upb ? 2 : 1)) return;
        compare(f, "merge_fwd", up, out, n, T, false, "W'' = upstream get_merged_weight");
        if (upb) {
            if (outb) compare(f, "merge_fwd_b", upb, outb, nb, Tb, false, "b'' = upstream merged bias");
            else fail_line(f, "merge_fwd_b", "lyco produced no merged bias");
        }
        return;
    }
    /* §8 #1: upstream merges LoHa/LoKr with s² and without σs */
    lyco_adapter compat = f->a;
    compat.flags |= LYCO_FLAG_UPSTREAM_MERGE_SCALE;
    if (!oracle_ok(f, oracle_merge_fwd(f, &compat, LYCO_MERGE_WEIGHT, &out, NULL), names, 1)) return;
    compare(f, "merge_fwd", up, out, n, T, false, "with LYCO_FLAG_UPSTREAM_MERGE_SCALE (s², no σs: §8 #1)");
    double *def = NULL, *delta = NULL;
    static const char *const dnames[] = {"merge_fwd:default"};
    if (!oracle_ok(f, oracle_merge_fwd(f, &f->a, LYCO_MERGE_WEIGHT, &def, NULL), dnames, 1) ||
        !oracle_ok(f, oracle_merge_fwd(f, &f->a, LYCO_MERGE_DELTA, &delta, NULL), dnames, 1))
        return;
    char note[200];
    if (f->s != 1.0) {
        snprintf(note, sizeof note, "§8 #1 documented difference (scored on W''−W): lyco default applies s once (s = %g), upstream s²", f->s);
        compare_delta_differ(f, "merge_fwd:default", up, def, f->W64, n, T, note);
    } else {
        compare(f, "merge_fwd:default", up, def, n, T, false, "s = 1: s² = s, so lyco's default equals upstream here");
    }
    double *pred = alloc_f64(f, n);
    if (!pred) { fail_line(f, "merge_fwd:upstream=W+s*default_delta", "out of memory"); return; }
    for (int64_t i = 0; i < n; i++) pred[i] = f->W64[i] + f->s * delta[i];
    snprintf(note, sizeof note, "§8 #1: upstream W''−W = s × lyco's default ΔW (s = %g)", f->s);
    compare(f, "merge_fwd:upstream=W+s*default_delta", up, pred, n, T, false, note);
}

/* merge_y: upstream's merge-mode forward against lyco's merge delta (Norm: lyco's bypass). */
static void check_merge_y(fx *f) {
    int64_t n;
    lyco_dtype T;
    double *up = upstream(f, "merge_y", &n, &T);
    if (!up) { skip_line(f, "merge_y", "not produced upstream (see notes)"); return; }
    static const char *const names[] = {"merge_y"};
    double *y = NULL;
    if (f->norm) {
        if (!oracle_ok(f, oracle_bypass_fwd(f, &f->a, f->y0, &y), names, 1)) return;
        compare(f, "merge_y", up, y, n, T, false, "lyco Norm bypass y0 + N(x)⊙mΔγ + mΔβ = upstream NormModule.forward");
        return;
    }
    double *E = NULL, *Eb = NULL;
    if (!oracle_ok(f, oracle_merge_fwd(f, &f->a, LYCO_MERGE_DELTA, &E, &Eb), names, 1)) return;
    y = alloc_f64(f, n);
    if (!y) { fail_line(f, "merge_y", "out of memory"); return; }
    op_fwd(f, f->x64, E, y);
    for (int64_t i = 0; i < n; i++) y[i] += f->y064[i];
    if (Eb) add_channel(f, Eb, 1.0, y);
    compare(f, "merge_y", up, y, n, T, false,
            f->hada ? "y0 + op(x, W''−W) from lyco's DEFAULT merge (s once) = upstream merge-mode forward (§8 #1)"
                    : "y0 + op(x, W''−W) (+ bias delta) from lyco's merge");
    if (f->algo == LYCO_ALGO_FULL) {
        static const char *const bn[] = {"bypass_fwd:lyco_vs_merge_y"};
        double *yb = NULL;
        if (!oracle_ok(f, oracle_bypass_fwd(f, &f->a, f->y0, &yb), bn, 1)) return;
        compare(f, "bypass_fwd:lyco_vs_merge_y", up, yb, n, T, false, "upstream Full has no bypass; lyco's equals its forward");
    }
}

/* merge_bwd.<slot>; LoHa/LoKr: compared under the compat flag, and upstream = s × default. */
static void check_merge_bwd(fx *f) {
    double *up[LYCO_SLOT_COUNT] = {0};
    int64_t n[LYCO_SLOT_COUNT] = {0};
    lyco_dtype T[LYCO_SLOT_COUNT] = {0};
    const char *names[LYCO_SLOT_COUNT];
    char namebuf[LYCO_SLOT_COUNT][48];
    int cnt = 0;
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        snprintf(namebuf[s], sizeof namebuf[s], "merge_bwd.%s", lyco_slot_name((lyco_slot)s));
        up[s] = upstream(f, namebuf[s], &n[s], &T[s]);
        if (up[s]) names[cnt++] = namebuf[s];
    }
    if (!cnt) { skip_line(f, "merge_bwd", "not produced upstream (see notes)"); return; }
    lyco_adapter a = f->a;
    if (f->hada) a.flags |= LYCO_FLAG_UPSTREAM_MERGE_SCALE;
    double *g[LYCO_SLOT_COUNT];
    if (!oracle_ok(f, oracle_merge_bwd(f, &a, g), names, cnt)) return;
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        if (!up[s]) continue;
        if (!g[s]) { fail_line(f, namebuf[s], "upstream has this gradient, lyco's adapter has no such slot"); continue; }
        compare(f, namebuf[s], up[s], g[s], n[s], T[s], false,
                f->hada ? "with LYCO_FLAG_UPSTREAM_MERGE_SCALE (s²: §8 #1)" : "∂sum(W''⊙G [+ b''⊙Gb])");
    }
    if (!f->hada) return;
    double *gd[LYCO_SLOT_COUNT];
    if (!oracle_ok(f, oracle_merge_bwd(f, &f->a, gd), names, cnt)) return;
    char note[160];
    snprintf(note, sizeof note, "§8 #1: upstream gradient = s × lyco's default gradient (s = %g)", f->s);
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        if (!up[s] || !gd[s]) continue;
        double *pred = alloc_f64(f, n[s]);
        if (!pred) { fail_line(f, namebuf[s], "out of memory"); continue; }
        for (int64_t i = 0; i < n[s]; i++) pred[i] = f->s * gd[s][i];
        char out[80];
        snprintf(out, sizeof out, "%.47s:=s*default", namebuf[s]);
        compare(f, out, up[s], pred, n[s], T[s], false, note);
    }
}

/* bypass_fwd, and the bias (§8 #5/#7/#8) and DoRA (§8 #13) documented differences. */
static void check_bypass_fwd(fx *f) {
    int64_t n, ny = 0;
    lyco_dtype T, Ty = LYCO_F32;
    double *up = upstream(f, "bypass_fwd", &n, &T);
    if (!up) { skip_line(f, "bypass_fwd", "not produced upstream (see notes)"); return; }
    double *my = upstream(f, "merge_y", &ny, &Ty);
    lyco_adapter a = f->a;
    if (f->dora) a.tensor[LYCO_DORA_SCALE] = NULL; /* upstream ignores DoRA in bypass (§8 #13) */
    static const char *const names[] = {"bypass_fwd"};
    double *y = NULL;
    if (!oracle_ok(f, oracle_bypass_fwd(f, &a, f->y0, &y), names, 1)) return;
    compare(f, "bypass_fwd", up, y, n, T, false,
            f->dora     ? "lyco without dora_scale: upstream ignores DoRA in bypass (§8 #13)"
            : f->rowmap ? "acts on y0 including its bias, as upstream does"
                        : "y0 + Δ(x)");
    if (f->dora) {
        static const char *const dn[] = {"bypass_fwd:lyco_dora"};
        double *yd = NULL;
        if (!oracle_ok(f, oracle_bypass_fwd(f, &f->a, f->y0, &yd), dn, 1)) return;
        compare_delta_differ(f, "bypass_fwd:lyco_dora_vs_upstream", up, yd, f->y064, n, T,
                             "§8 #13 documented difference (scored on y−y0): lyco applies DoRA in bypass, upstream silently drops it");
        if (my) compare(f, "bypass_fwd:lyco_dora_vs_merge_y", my, yd, ny, Ty, false, "§8 #13: lyco's DoRA bypass = upstream's merge-mode forward");
    }
    if (f->rowmap && my) {
        /* map(b): the bypass of a y0 whose every row is b (exact values) */
        DLTensor *yb = new_like(f, f->y0, LYCO_F32);
        double *bb = alloc_f64(f, lyco_numel(f->y0)), *mb = NULL;
        if (!yb || !bb) { fail_line(f, "bypass_fwd:bias_excluded_vs_merge_y", "out of memory"); return; }
        add_channel(f, f->b64, 1.0, bb);
        lyco_scatter_f64(yb, bb);
        static const char *const bn[] = {"bypass_fwd:bias_excluded_vs_merge_y"};
        if (!oracle_ok(f, oracle_bypass_fwd(f, &f->a, yb, &mb), bn, 1)) return;
        double *ex = alloc_f64(f, ny);
        if (!ex) { fail_line(f, bn[0], "out of memory"); return; }
        for (int64_t i = 0; i < ny; i++) ex[i] = y[i] - mb[i] + bb[i];
        const char *what = f->algo == LYCO_ALGO_IA3 ? "§8 #8: IA3-out bypass scales the bias" : f->algo == LYCO_ALGO_BOFT
                                                                                                  ? "§8 #7: BOFT bypass rotates the bias"
                                                                                                  : "§8 #5: Diag-OFT bypass rotates the bias";
        char note[200];
        snprintf(note, sizeof note, "%s (documented difference, scored on y−y0: bypass ≠ merge-mode forward)", what);
        compare_delta_differ(f, "bypass_fwd:vs_merge_y", my, y, f->y064, ny, Ty, note);
        snprintf(note, sizeof note, "%s: map(y0) − map(b) + b = upstream merge-mode forward", what);
        compare(f, "bypass_fwd:bias_excluded_vs_merge_y", my, ex, ny, Ty, false, note);
    }
}

/* bypass_bwd.<slot> and bypass_bwd.x (+ the base path, which lyco's dx excludes). */
static void check_bypass_bwd(fx *f) {
    double *up[LYCO_SLOT_COUNT] = {0}, *upx;
    int64_t n[LYCO_SLOT_COUNT] = {0}, nx = 0;
    lyco_dtype T[LYCO_SLOT_COUNT] = {0}, Tx = LYCO_F32;
    const char *names[LYCO_SLOT_COUNT + 1];
    char namebuf[LYCO_SLOT_COUNT][48];
    int cnt = 0;
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        snprintf(namebuf[s], sizeof namebuf[s], "bypass_bwd.%s", lyco_slot_name((lyco_slot)s));
        up[s] = upstream(f, namebuf[s], &n[s], &T[s]);
        if (up[s]) names[cnt++] = namebuf[s];
    }
    upx = upstream(f, "bypass_bwd.x", &nx, &Tx);
    if (upx) names[cnt++] = "bypass_bwd.x";
    if (!cnt) { skip_line(f, "bypass_bwd", "not produced upstream (see notes)"); return; }
    lyco_adapter a = f->a;
    if (f->dora) a.tensor[LYCO_DORA_SCALE] = NULL; /* upstream ignores DoRA in bypass (§8 #13) */
    double *g[LYCO_SLOT_COUNT], *dx = NULL, *dy0 = NULL;
    if (!oracle_ok(f, oracle_bypass_bwd(f, &a, g, &dx, &dy0), names, cnt)) return;
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        if (!up[s]) continue;
        if (!g[s]) { fail_line(f, namebuf[s], "upstream has this gradient, lyco's adapter has no such slot"); continue; }
        compare(f, namebuf[s], up[s], g[s], n[s], T[s], false, f->dora ? "∂sum(y⊙gy), lyco without dora_scale (§8 #13)" : "∂sum(y⊙gy)");
    }
    if (upx) {
        double *tot = alloc_f64(f, nx);
        if (!tot) { fail_line(f, "bypass_bwd.x", "out of memory"); return; }
        op_dgrad(f, dy0, f->W64, tot);
        for (int64_t i = 0; i < nx; i++) tot[i] += dx[i];
        compare(f, "bypass_bwd.x", upx, tot, nx, Tx, false,
                f->rowmap ? "lyco dx (0) + base path opᵀ(dy0, W), dy0 = lyco's mapped gradient"
                          : "lyco dx (adapter path) + base path opᵀ(gy, W)");
    }
}

static void run_fixture(const char *dir, const char *file) {
    fx f;
    memset(&f, 0, sizeof f);
    f.file = file;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    lyco_status st = lyco_st_open(path, &f.st);
    if (st) {
        fail_line(&f, "open", lyco_last_error());
        return;
    }
    int64_t nt = lyco_st_count(f.st);
    f.used = calloc((size_t)(nt > 0 ? nt : 1), sizeof(bool));
    if (!f.used) { fail_line(&f, "setup", "out of memory"); lyco_st_close(f.st); return; }
    if (build(&f)) {
        check_merge_fwd(&f);
        check_merge_y(&f);
        check_merge_bwd(&f);
        check_bypass_fwd(&f);
        check_bypass_bwd(&f);
        if (f.pl.failed) fail_line(&f, "setup", "out of memory during the checks");
        /* every upstream output must have been compared */
        for (int64_t i = 0; i < nt; i++) {
            const lyco_st_tensor *t = lyco_st_get(f.st, i);
            bool output = !strncmp(t->name, "merge_", 6) || !strncmp(t->name, "bypass_", 7);
            if (output && !f.used[i]) fail_line(&f, t->name, "upstream output not compared by this test");
        }
    }
    pool_free(&f.pl);
    free(f.used);
    lyco_st_close(f.st);
}

static int is_fixture(const struct dirent *e) {
    size_t n = strlen(e->d_name);
    return n > 12 && !strcmp(e->d_name + n - 12, ".safetensors");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR   (the golden fixtures, tests/data/golden)\n", argv[0]);
        return 2;
    }
    if (lyco_ctx_create(&ctx) || lyco_ctx_set_backend(ctx, LYCO_BACKEND_REF)) {
        fprintf(stderr, "lyco: %s\n", lyco_last_error());
        return 2;
    }
    struct dirent **list = NULL;
    int nf = scandir(argv[1], &list, is_fixture, alphasort);
    if (nf <= 0) {
        printf("FAIL %s - - - no *.safetensors fixtures found\n", argv[1]);
        n_fail++;
    }
    for (int i = 0; i < nf; i++) {
        run_fixture(argv[1], list[i]->d_name);
        free(list[i]);
    }
    free(list);
    lyco_ctx_destroy(ctx);
    printf("%d fixtures, %d skipped\n", nf > 0 ? nf : 0, n_skip);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
