/*
 * test_policy.c — the dtype policy of NUMERICS.md §1: every row of the §1 case table, in both
 * output modes (`promote`, `base`), checked
 *
 *   (a) directly through lyco_policy_resolve (operands listed as the api layer lists them: the
 *       base tensor first — y0, else x; W for merge — then the other inputs, then the factors);
 *   (b) through the public API with a tiny LoCon adapter (linear 8→6, rank 2, 3 tokens) on the
 *       ref backend: lyco_resolve_dtypes gives compute/output dtypes; lyco_bypass_fwd /
 *       lyco_bypass_bwd and lyco_merge_fwd / lyco_merge_bwd accept outputs of exactly those dtypes
 *       (output = promotion of every operand, or the base tensor's dtype; gradients in each leaf's
 *       dtype: adapter grads = adapter dtype, dx = x's, dy0 = y0's), reject an output or gradient
 *       of any other dtype with LYCO_ERR_DTYPE naming it and the expected dtype, and write the
 *       exact result (data are small multiples of 1/2, so every product, sum and rounding in any
 *       of the three dtypes is exact and the fp64 answer is bit-exact);
 *   (c) fp16 together with bf16 anywhere — x vs adapter, factor vs factor, y0 vs x, dy vs x,
 *       W vs adapter and d_out vs W in merge — is LYCO_ERR_DTYPE with a message naming both
 *       operands and their dtypes and "no common 16-bit type", from every verb and from
 *       lyco_resolve_dtypes; masks are not part of the policy (an fp16 mask in a bf16 call is fine);
 *   (d) mode names: lyco_ctx_set_output_mode_name / _fp32_mode_name / _backend_name (and the
 *       parse functions) with an unknown name → LYCO_ERR_INVALID listing the valid names, and a
 *       bad LYCO_BACKEND environment variable makes lyco_ctx_create fail the same way.
 *
 * Prints one line per check and ends with "N passed, M failed"; exits non-zero on failure.
 * Random data from LYCO_SEED (printed) or the clock.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "lyco.h"

static int passed, failed;

static void report(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%-4s ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) passed++;
    else failed++;
}

static bool has(const char *msg, const char *sub) { return sub == NULL || strstr(msg, sub) != NULL; }

/* ---------------------------------------------------------------------------------------------
 * Small host tensors of any of the three dtypes (values set/read as doubles, exact here)
 * ------------------------------------------------------------------------------------------- */
#define NT 3  /* tokens */
#define NI 8  /* in features */
#define NO 6  /* out features */
#define NR 2  /* rank */

typedef struct {
    unsigned char buf[4 * 64];
    int64_t shape[2];
    DLTensor t;
} tens;

static void tens_make(tens *T, lyco_dtype d, int64_t r, int64_t c) {
    memset(T->buf, 0, sizeof T->buf);
    T->shape[0] = r;
    T->shape[1] = c;
    T->t = lyco_host_tensor(T->buf, d, 2, T->shape);
}
static lyco_dtype tdt(const tens *T) {
    return T->t.dtype.code == kDLBfloat ? LYCO_BF16 : T->t.dtype.bits == 16 ? LYCO_F16 : LYCO_F32;
}
static int64_t tn(const tens *T) { return T->shape[0] * T->shape[1]; }
static void tset(tens *T, int64_t i, double v) {
    float f = (float)v;
    uint16_t h;
    switch (tdt(T)) {
    case LYCO_F16: h = lyco_f32_to_f16(f); memcpy(T->buf + 2 * i, &h, 2); break;
    case LYCO_BF16: h = lyco_f32_to_bf16(f); memcpy(T->buf + 2 * i, &h, 2); break;
    default: memcpy(T->buf + 4 * i, &f, 4); break;
    }
}
static double tget(const tens *T, int64_t i) {
    uint16_t h;
    float f;
    switch (tdt(T)) {
    case LYCO_F16: memcpy(&h, T->buf + 2 * i, 2); return lyco_f16_to_f32(h);
    case LYCO_BF16: memcpy(&h, T->buf + 2 * i, 2); return lyco_bf16_to_f32(h);
    default: memcpy(&f, T->buf + 4 * i, 4); return f;
    }
}
/* Random multiples of 1/2 in [-1, 1]: exact in every dtype, and every sum below stays exact. */
static void tfill(tens *T, lyco_rng *rng) {
    for (int64_t i = 0; i < tn(T); i++) tset(T, i, (double)((int64_t)(lyco_rng_uniform(rng) * 5.0) - 2) * 0.5);
}
/* Write a sentinel the result can never be, to be sure the verb wrote every element. */
static void tpoison(tens *T) {
    for (int64_t i = 0; i < tn(T); i++) tset(T, i, 1000.0);
}
/* Exactly equal to an fp64 array (every value here is exact in every dtype). */
static bool tequal(const tens *T, const double *want, char *why, size_t n) {
    for (int64_t i = 0; i < tn(T); i++)
        if (tget(T, i) != want[i]) {
            snprintf(why, n, "element %lld is %g, expected %g", (long long)i, tget(T, i), want[i]);
            return false;
        }
    return true;
}

static const char *dn(lyco_dtype d) { return lyco_dtype_name(d); }

/* ---------------------------------------------------------------------------------------------
 * The case table (NUMERICS.md §1): x (or W) dtype, adapter dtype, y0 dtype (-1 = no y0), and the
 * expected compute / promote-mode output / base-mode output dtypes.
 * ------------------------------------------------------------------------------------------- */
#define NONE (-1)
typedef struct {
    const char *row;
    int x, ad, y0;
    lyco_dtype compute, out_promote, out_base;
} row;

static const row rows[] = {
    {"bf16 | bf16 (the common case)", LYCO_BF16, LYCO_BF16, NONE, LYCO_BF16, LYCO_BF16, LYCO_BF16},
    {"bf16 | bf16, y0 bf16", LYCO_BF16, LYCO_BF16, LYCO_BF16, LYCO_BF16, LYCO_BF16, LYCO_BF16},
    {"fp16 | fp16", LYCO_F16, LYCO_F16, NONE, LYCO_F16, LYCO_F16, LYCO_F16},
    {"fp16 | fp16, y0 fp16", LYCO_F16, LYCO_F16, LYCO_F16, LYCO_F16, LYCO_F16, LYCO_F16},
    {"fp32 | fp32", LYCO_F32, LYCO_F32, NONE, LYCO_F32, LYCO_F32, LYCO_F32},
    {"fp32 | fp32, y0 fp32", LYCO_F32, LYCO_F32, LYCO_F32, LYCO_F32, LYCO_F32, LYCO_F32},
    {"bf16 | fp32 master adapter", LYCO_BF16, LYCO_F32, NONE, LYCO_BF16, LYCO_F32, LYCO_BF16},
    {"bf16 | fp32 master adapter, y0 bf16", LYCO_BF16, LYCO_F32, LYCO_BF16, LYCO_BF16, LYCO_F32, LYCO_BF16},
    {"fp16 | fp32", LYCO_F16, LYCO_F32, NONE, LYCO_F16, LYCO_F32, LYCO_F16},
    {"fp16 | fp32, y0 fp16", LYCO_F16, LYCO_F32, LYCO_F16, LYCO_F16, LYCO_F32, LYCO_F16},
    {"fp32 (autocast x) | bf16, y0 bf16", LYCO_F32, LYCO_BF16, LYCO_BF16, LYCO_BF16, LYCO_F32, LYCO_BF16},
    {"fp32 (autocast x) | bf16, no y0", LYCO_F32, LYCO_BF16, NONE, LYCO_BF16, LYCO_F32, LYCO_F32},
    {"fp32 (autocast x) | bf16, y0 fp32", LYCO_F32, LYCO_BF16, LYCO_F32, LYCO_BF16, LYCO_F32, LYCO_F32},
    {"fp32 | fp16, y0 fp16", LYCO_F32, LYCO_F16, LYCO_F16, LYCO_F16, LYCO_F32, LYCO_F16},
    {"fp32 | fp16, no y0", LYCO_F32, LYCO_F16, NONE, LYCO_F16, LYCO_F32, LYCO_F32},
};
#define NROWS ((int)(sizeof rows / sizeof rows[0]))

static const lyco_output_mode modes[2] = {LYCO_OUTPUT_PROMOTE, LYCO_OUTPUT_BASE};
static const char *const mode_names[2] = {"promote", "base"};

/* A dtype other than d (for "wrong dtype" outputs): cycles through the other two. */
static lyco_dtype other(lyco_dtype d, int k) { return (lyco_dtype)((d + 1 + k) % 3); }

/* ---------------------------------------------------------------------------------------------
 * (a) lyco_policy_resolve directly
 * ------------------------------------------------------------------------------------------- */
static void direct_rows(void) {
    for (int i = 0; i < NROWS; i++) {
        const row *r = &rows[i];
        for (int m = 0; m < 2; m++) {
            /* bypass: base (y0 or x) first, then x, the factors */
            lyco_operand ops[4];
            int n = 0;
            if (r->y0 != NONE) ops[n++] = (lyco_operand){"y0", (lyco_dtype)r->y0};
            ops[n++] = (lyco_operand){"x", (lyco_dtype)r->x};
            ops[n++] = (lyco_operand){"lora_down", (lyco_dtype)r->ad};
            ops[n++] = (lyco_operand){"lora_up", (lyco_dtype)r->ad};
            lyco_dtypes dt = {LYCO_DTYPE_INVALID, LYCO_DTYPE_INVALID};
            lyco_status st = lyco_policy_resolve(ops, n, 0, modes[m], &dt);
            lyco_dtype want = m ? r->out_base : r->out_promote;
            report(st == LYCO_OK && dt.compute == r->compute && dt.output == want,
                   "policy_resolve  %-38s %-7s: compute %s output %s (expected %s, %s) %s", r->row, mode_names[m],
                   dn(dt.compute), dn(dt.output), dn(r->compute), dn(want), lyco_status_name(st));
            /* merge: W (x's dtype) is the base */
            lyco_operand mops[3] = {{"W", (lyco_dtype)r->x}, {"lora_down", (lyco_dtype)r->ad}, {"lora_up", (lyco_dtype)r->ad}};
            if (r->y0 == NONE) {
                st = lyco_policy_resolve(mops, 3, 0, modes[m], &dt);
                lyco_dtype mw = m ? (lyco_dtype)r->x : r->out_promote;
                report(st == LYCO_OK && dt.compute == r->compute && dt.output == mw,
                       "policy_resolve  merge W=%s | %s %-20s %-7s: compute %s output %s (expected %s, %s)", dn((lyco_dtype)r->x),
                       dn((lyco_dtype)r->ad), "", mode_names[m], dn(dt.compute), dn(dt.output), dn(r->compute), dn(mw));
            }
        }
    }
    /* base_index -1: `base` falls back to promote */
    lyco_operand ops[2] = {{"lora_down", LYCO_BF16}, {"lora_up", LYCO_F32}};
    lyco_dtypes dt;
    lyco_status st = lyco_policy_resolve(ops, 2, -1, LYCO_OUTPUT_BASE, &dt);
    report(st == LYCO_OK && dt.output == LYCO_F32 && dt.compute == LYCO_BF16,
           "policy_resolve with no base operand: base mode falls back to promote (output %s)", dn(dt.output));

    /* errors: fp16 with bf16, named by both operands */
    struct { lyco_operand ops[4]; int n; const char *a, *b; } errs[] = {
        {{{"x", LYCO_F16}, {"lora_down", LYCO_BF16}, {"lora_up", LYCO_BF16}}, 3, "x is fp16", "lora_down is bf16"},
        {{{"x", LYCO_BF16}, {"lora_down", LYCO_F16}, {"lora_up", LYCO_F16}}, 3, "x is bf16", "lora_down is fp16"},
        {{{"x", LYCO_F32}, {"lora_down", LYCO_F16}, {"lora_up", LYCO_BF16}}, 3, "lora_down is fp16", "lora_up is bf16"},
        {{{"y0", LYCO_BF16}, {"x", LYCO_F16}, {"lora_down", LYCO_F32}, {"lora_up", LYCO_F32}}, 4, "y0 is bf16", "x is fp16"},
        {{{"W", LYCO_BF16}, {"lora_down", LYCO_F32}, {"lora_up", LYCO_F16}}, 3, "W is bf16", "lora_up is fp16"},
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
        for (int m = 0; m < 2; m++) {
            st = lyco_policy_resolve(errs[i].ops, errs[i].n, 0, modes[m], &dt);
            const char *msg = lyco_last_error();
            report(st == LYCO_ERR_DTYPE && has(msg, errs[i].a) && has(msg, errs[i].b) && has(msg, "no common 16-bit type"),
                   "policy_resolve fp16 with bf16 (%s / %s, %s): %s \"%s\"", errs[i].a, errs[i].b, mode_names[m], lyco_status_name(st), msg);
        }
}

/* ---------------------------------------------------------------------------------------------
 * (b) through the public verbs
 * ------------------------------------------------------------------------------------------- */
typedef struct {
    tens x, y0, y, down, up, dy, dx, dy0, gdown, gup;
    tens W, out, dout;
    lyco_adapter a;
} problem;

static problem P; /* static: the DLTensors point into it */

static void make_problem(lyco_dtype xd, lyco_dtype ad, int y0d, lyco_rng *rng) {
    lyco_dtype yd = y0d == NONE ? LYCO_F32 : (lyco_dtype)y0d;
    tens_make(&P.x, xd, NT, NI);
    tens_make(&P.y0, yd, NT, NO);
    tens_make(&P.down, ad, NR, NI);
    tens_make(&P.up, ad, NO, NR);
    tens_make(&P.W, xd, NO, NI);
    tfill(&P.x, rng);
    tfill(&P.y0, rng);
    tfill(&P.down, rng);
    tfill(&P.up, rng);
    tfill(&P.W, rng);
    lyco_adapter_init(&P.a, LYCO_ALGO_LOCON);
    lyco_layer_linear(&P.a.layer, NO, NI);
    P.a.tensor[LYCO_LORA_DOWN] = &P.down.t;
    P.a.tensor[LYCO_LORA_UP] = &P.up.t;
    P.a.alpha = NR; /* s = 1 */
}

/* fp64 answers from the stored (exact) values */
static void ref_bypass(bool with_y0, double *y, double *h) {
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < NR; r++) {
            double s = 0;
            for (int i = 0; i < NI; i++) s += tget(&P.x, t * NI + i) * tget(&P.down, r * NI + i);
            h[t * NR + r] = s;
        }
    for (int t = 0; t < NT; t++)
        for (int o = 0; o < NO; o++) {
            double s = with_y0 ? tget(&P.y0, t * NO + o) : 0.0;
            for (int r = 0; r < NR; r++) s += tget(&P.up, o * NR + r) * h[t * NR + r];
            y[t * NO + o] = s;
        }
}
static void ref_bypass_bwd(double *gdown, double *gup, double *dx) {
    double h[NT * NR], y[NT * NO], g[NT * NR];
    ref_bypass(false, y, h);
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < NR; r++) {
            double s = 0;
            for (int o = 0; o < NO; o++) s += tget(&P.dy, t * NO + o) * tget(&P.up, o * NR + r);
            g[t * NR + r] = s;
        }
    for (int o = 0; o < NO; o++)
        for (int r = 0; r < NR; r++) {
            double s = 0;
            for (int t = 0; t < NT; t++) s += tget(&P.dy, t * NO + o) * h[t * NR + r];
            gup[o * NR + r] = s;
        }
    for (int r = 0; r < NR; r++)
        for (int i = 0; i < NI; i++) {
            double s = 0;
            for (int t = 0; t < NT; t++) s += g[t * NR + r] * tget(&P.x, t * NI + i);
            gdown[r * NI + i] = s;
        }
    for (int t = 0; t < NT; t++)
        for (int i = 0; i < NI; i++) {
            double s = 0;
            for (int r = 0; r < NR; r++) s += g[t * NR + r] * tget(&P.down, r * NI + i);
            dx[t * NI + i] = s;
        }
}

static void verbs_row(const row *r, int m, lyco_ctx *ctx, lyco_rng *rng) {
    char name[96], why[160] = "";
    snprintf(name, sizeof name, "%s [%s]", r->row, mode_names[m]);
    make_problem((lyco_dtype)r->x, (lyco_dtype)r->ad, r->y0, rng);
    const DLTensor *y0 = r->y0 == NONE ? NULL : &P.y0.t;
    lyco_dtype want = m ? r->out_base : r->out_promote;

    lyco_dtypes dt = {LYCO_DTYPE_INVALID, LYCO_DTYPE_INVALID};
    lyco_status st = lyco_resolve_dtypes(ctx, &P.a, NULL, &P.x.t, y0, &dt);
    report(st == LYCO_OK && dt.compute == r->compute && dt.output == want, "resolve_dtypes  %-48s compute %s output %s (expected %s, %s)",
           name, dn(dt.compute), dn(dt.output), dn(r->compute), dn(want));

    /* bypass forward: y of the policy's dtype */
    lyco_bypass_args in = {&P.x.t, y0, NULL, 0};
    tens_make(&P.y, want, NT, NO);
    tpoison(&P.y);
    st = lyco_bypass_fwd(ctx, &P.y.t, &P.a, &in);
    double yr[NT * NO], h[NT * NR];
    ref_bypass(y0 != NULL, yr, h);
    bool ok = st == LYCO_OK && tequal(&P.y, yr, why, sizeof why);
    report(ok, "bypass_fwd      %-48s y %s: %s %s", name, dn(want), lyco_status_name(st), st ? lyco_last_error() : why);
    /* any other output dtype is refused */
    for (int k = 0; k < 2; k++) {
        lyco_dtype bad = other(want, k);
        tens_make(&P.y, bad, NT, NO);
        st = lyco_bypass_fwd(ctx, &P.y.t, &P.a, &in);
        char e1[32], e2[32];
        snprintf(e1, sizeof e1, "y is %s", dn(bad));
        snprintf(e2, sizeof e2, "expected %s", dn(want));
        const char *msg = lyco_last_error();
        report(st == LYCO_ERR_DTYPE && has(msg, e1) && has(msg, e2), "bypass_fwd      %-48s y %s refused: %s \"%s\"", name, dn(bad),
               lyco_status_name(st), msg);
    }

    /* bypass backward: dy in y's dtype; grads in each leaf's dtype */
    tens_make(&P.dy, want, NT, NO);
    tfill(&P.dy, rng);
    tens_make(&P.gdown, (lyco_dtype)r->ad, NR, NI);
    tens_make(&P.gup, (lyco_dtype)r->ad, NO, NR);
    tens_make(&P.dx, (lyco_dtype)r->x, NT, NI);
    tens_make(&P.dy0, r->y0 == NONE ? LYCO_F32 : (lyco_dtype)r->y0, NT, NO);
    tpoison(&P.gdown), tpoison(&P.gup), tpoison(&P.dx), tpoison(&P.dy0);
    lyco_grads g;
    memset(&g, 0, sizeof g);
    g.grad[LYCO_LORA_DOWN] = &P.gdown.t;
    g.grad[LYCO_LORA_UP] = &P.gup.t;
    DLTensor *dy0 = y0 ? &P.dy0.t : NULL;
    st = lyco_bypass_bwd(ctx, &g, &P.dx.t, dy0, &P.a, &in, &P.dy.t);
    double rgd[NR * NI], rgu[NO * NR], rdx[NT * NI], rdy0[NT * NO];
    ref_bypass_bwd(rgd, rgu, rdx);
    for (int i = 0; i < NT * NO; i++) rdy0[i] = tget(&P.dy, i);
    ok = st == LYCO_OK && tequal(&P.gdown, rgd, why, sizeof why) && tequal(&P.gup, rgu, why, sizeof why) &&
         tequal(&P.dx, rdx, why, sizeof why) && (!dy0 || tequal(&P.dy0, rdy0, why, sizeof why));
    report(ok, "bypass_bwd      %-48s grads %s, dx %s%s%s: %s %s", name, dn((lyco_dtype)r->ad), dn((lyco_dtype)r->x), dy0 ? ", dy0 " : "",
           dy0 ? dn((lyco_dtype)r->y0) : "", lyco_status_name(st), st ? lyco_last_error() : why);
    /* a gradient of the wrong dtype is refused, naming it */
    struct { tens *T; const char *label; lyco_dtype leaf; } gl[4] = {
        {&P.gup, "grad lora_up", (lyco_dtype)r->ad}, {&P.gdown, "grad lora_down", (lyco_dtype)r->ad},
        {&P.dx, "dx", (lyco_dtype)r->x}, {&P.dy0, "dy0", r->y0 == NONE ? LYCO_F32 : (lyco_dtype)r->y0}};
    for (int k = 0; k < (dy0 ? 4 : 3); k++) {
        lyco_dtype bad = other(gl[k].leaf, 0);
        gl[k].T->t.dtype = lyco_dl_dtype(bad);
        st = lyco_bypass_bwd(ctx, &g, &P.dx.t, dy0, &P.a, &in, &P.dy.t);
        gl[k].T->t.dtype = lyco_dl_dtype(gl[k].leaf);
        char e1[48], e2[32];
        snprintf(e1, sizeof e1, "%s is %s", gl[k].label, dn(bad));
        snprintf(e2, sizeof e2, "expected %s", dn(gl[k].leaf));
        const char *msg = lyco_last_error();
        report(st == LYCO_ERR_DTYPE && has(msg, e1) && has(msg, e2), "bypass_bwd      %-48s %s as %s refused: %s \"%s\"", name, gl[k].label,
               dn(bad), lyco_status_name(st), msg);
    }

    /* merge (rows without y0): W has x's dtype and is the base */
    if (r->y0 != NONE) return;
    lyco_dtype mw = m ? (lyco_dtype)r->x : r->out_promote;
    st = lyco_resolve_dtypes(ctx, &P.a, &P.W.t, NULL, NULL, &dt);
    report(st == LYCO_OK && dt.compute == r->compute && dt.output == mw, "resolve_dtypes  merge %-42s compute %s output %s (expected %s, %s)",
           name, dn(dt.compute), dn(dt.output), dn(r->compute), dn(mw));
    lyco_merge_args min = {&P.W.t, NULL, LYCO_MERGE_WEIGHT};
    tens_make(&P.out, mw, NO, NI);
    tpoison(&P.out);
    st = lyco_merge_fwd(ctx, &P.out.t, NULL, &P.a, &min);
    double wr[NO * NI];
    for (int o = 0; o < NO; o++)
        for (int i = 0; i < NI; i++) {
            double s = tget(&P.W, o * NI + i);
            for (int k = 0; k < NR; k++) s += tget(&P.up, o * NR + k) * tget(&P.down, k * NI + i);
            wr[o * NI + i] = s;
        }
    ok = st == LYCO_OK && tequal(&P.out, wr, why, sizeof why);
    report(ok, "merge_fwd       %-48s out %s: %s %s", name, dn(mw), lyco_status_name(st), st ? lyco_last_error() : why);
    lyco_dtype bad = other(mw, 1);
    tens_make(&P.out, bad, NO, NI);
    st = lyco_merge_fwd(ctx, &P.out.t, NULL, &P.a, &min);
    {
        char e1[32], e2[32];
        snprintf(e1, sizeof e1, "out is %s", dn(bad));
        snprintf(e2, sizeof e2, "expected %s", dn(mw));
        const char *msg = lyco_last_error();
        report(st == LYCO_ERR_DTYPE && has(msg, e1) && has(msg, e2), "merge_fwd       %-48s out %s refused: %s \"%s\"", name, dn(bad),
               lyco_status_name(st), msg);
    }
    /* merge backward: d_out in the output dtype; grads in the adapter's dtype */
    tens_make(&P.dout, mw, NO, NI);
    tfill(&P.dout, rng);
    tpoison(&P.gdown), tpoison(&P.gup);
    st = lyco_merge_bwd(ctx, &g, &P.a, &min, &P.dout.t, NULL);
    for (int o = 0; o < NO; o++)
        for (int k = 0; k < NR; k++) {
            double s = 0;
            for (int i = 0; i < NI; i++) s += tget(&P.dout, o * NI + i) * tget(&P.down, k * NI + i);
            rgu[o * NR + k] = s;
        }
    for (int k = 0; k < NR; k++)
        for (int i = 0; i < NI; i++) {
            double s = 0;
            for (int o = 0; o < NO; o++) s += tget(&P.up, o * NR + k) * tget(&P.dout, o * NI + i);
            rgd[k * NI + i] = s;
        }
    ok = st == LYCO_OK && tequal(&P.gdown, rgd, why, sizeof why) && tequal(&P.gup, rgu, why, sizeof why);
    report(ok, "merge_bwd       %-48s grads %s: %s %s", name, dn((lyco_dtype)r->ad), lyco_status_name(st), st ? lyco_last_error() : why);
    lyco_dtype gbad = other((lyco_dtype)r->ad, 1);
    P.gdown.t.dtype = lyco_dl_dtype(gbad);
    st = lyco_merge_bwd(ctx, &g, &P.a, &min, &P.dout.t, NULL);
    P.gdown.t.dtype = lyco_dl_dtype((lyco_dtype)r->ad);
    {
        char e1[48], e2[32];
        snprintf(e1, sizeof e1, "grad lora_down is %s", dn(gbad));
        snprintf(e2, sizeof e2, "expected %s", dn((lyco_dtype)r->ad));
        const char *msg = lyco_last_error();
        report(st == LYCO_ERR_DTYPE && has(msg, e1) && has(msg, e2), "merge_bwd       %-48s grad lora_down as %s refused: %s \"%s\"", name,
               dn(gbad), lyco_status_name(st), msg);
    }
}

/* (c) fp16 together with bf16 anywhere, through every verb */
typedef struct {
    const char *what;
    lyco_dtype x, down, up;
    int y0;          /* NONE or a dtype */
    int dy;          /* NONE = the output dtype, or a dtype */
    const char *a, *b;
} mix;

static void mixed_16(lyco_ctx *ctx, lyco_rng *rng) {
    static const mix mixes[] = {
        {"x fp16, adapter bf16", LYCO_F16, LYCO_BF16, LYCO_BF16, NONE, NONE, "x is fp16", "lora_down is bf16"},
        {"x bf16, adapter fp16", LYCO_BF16, LYCO_F16, LYCO_F16, NONE, NONE, "x is bf16", "lora_down is fp16"},
        {"factor vs factor (down fp16, up bf16)", LYCO_F32, LYCO_F16, LYCO_BF16, NONE, NONE, "lora_down is fp16", "lora_up is bf16"},
        {"factor vs factor (down bf16, up fp16)", LYCO_F32, LYCO_BF16, LYCO_F16, NONE, NONE, "lora_down is bf16", "lora_up is fp16"},
        {"y0 bf16 vs x fp16", LYCO_F16, LYCO_F32, LYCO_F32, LYCO_BF16, NONE, "y0 is bf16", "x is fp16"},
        {"y0 fp16 vs adapter bf16 (x fp32)", LYCO_F32, LYCO_BF16, LYCO_BF16, LYCO_F16, NONE, "y0 is fp16", "lora_down is bf16"},
    };
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++) {
        const mix *mx = &mixes[i];
        for (int m = 0; m < 2; m++) {
            lyco_ctx_set_output_mode(ctx, modes[m]);
            make_problem(mx->x, mx->down, mx->y0, rng);
            tens_make(&P.up, mx->up, NO, NR);
            const DLTensor *y0 = mx->y0 == NONE ? NULL : &P.y0.t;
            lyco_bypass_args in = {&P.x.t, y0, NULL, 0};
            lyco_status st[4];
            char msgs[4][300];
            lyco_dtypes dt;
            st[0] = lyco_resolve_dtypes(ctx, &P.a, NULL, &P.x.t, y0, &dt);
            snprintf(msgs[0], sizeof msgs[0], "%s", lyco_last_error());
            tens_make(&P.y, LYCO_F32, NT, NO);
            st[1] = lyco_bypass_fwd(ctx, &P.y.t, &P.a, &in);
            snprintf(msgs[1], sizeof msgs[1], "%s", lyco_last_error());
            tens_make(&P.dy, LYCO_F32, NT, NO);
            lyco_grads g;
            memset(&g, 0, sizeof g);
            st[2] = lyco_bypass_bwd(ctx, &g, NULL, NULL, &P.a, &in, &P.dy.t);
            snprintf(msgs[2], sizeof msgs[2], "%s", lyco_last_error());
            static const char *const verb[3] = {"resolve_dtypes", "bypass_fwd", "bypass_bwd"};
            for (int v = 0; v < 3; v++)
                report(st[v] == LYCO_ERR_DTYPE && has(msgs[v], mx->a) && has(msgs[v], mx->b) && has(msgs[v], "no common 16-bit type"),
                       "%-15s %-40s [%s]: %s \"%s\"", verb[v], mx->what, mode_names[m], lyco_status_name(st[v]), msgs[v]);
        }
    }
    lyco_ctx_set_output_mode(ctx, LYCO_OUTPUT_PROMOTE);

    /* dy fp16 next to a bf16 call */
    make_problem(LYCO_BF16, LYCO_BF16, NONE, rng);
    lyco_bypass_args in = {&P.x.t, NULL, NULL, 0};
    tens_make(&P.dy, LYCO_F16, NT, NO);
    lyco_grads g;
    memset(&g, 0, sizeof g);
    lyco_status st = lyco_bypass_bwd(ctx, &g, NULL, NULL, &P.a, &in, &P.dy.t);
    const char *msg = lyco_last_error();
    report(st == LYCO_ERR_DTYPE && has(msg, "x is bf16") && has(msg, "dy is fp16") && has(msg, "no common 16-bit type"),
           "bypass_bwd      dy fp16 in a bf16 call: %s \"%s\"", lyco_status_name(st), msg);

    /* merge: W vs adapter, d_out vs W */
    for (int k = 0; k < 2; k++) {
        lyco_dtype wd = k ? LYCO_F16 : LYCO_BF16, adt = k ? LYCO_BF16 : LYCO_F16;
        make_problem(wd, adt, NONE, rng);
        lyco_merge_args min = {&P.W.t, NULL, LYCO_MERGE_WEIGHT};
        tens_make(&P.out, LYCO_F32, NO, NI);
        char e1[32], e2[32];
        snprintf(e1, sizeof e1, "W is %s", dn(wd));
        snprintf(e2, sizeof e2, "lora_down is %s", dn(adt));
        lyco_dtypes dt;
        st = lyco_resolve_dtypes(ctx, &P.a, &P.W.t, NULL, NULL, &dt);
        msg = lyco_last_error();
        report(st == LYCO_ERR_DTYPE && has(msg, e1) && has(msg, e2) && has(msg, "no common 16-bit type"),
               "resolve_dtypes  merge W %s, adapter %s: %s \"%s\"", dn(wd), dn(adt), lyco_status_name(st), msg);
        st = lyco_merge_fwd(ctx, &P.out.t, NULL, &P.a, &min);
        msg = lyco_last_error();
        report(st == LYCO_ERR_DTYPE && has(msg, e1) && has(msg, e2) && has(msg, "no common 16-bit type"),
               "merge_fwd       W %s, adapter %s: %s \"%s\"", dn(wd), dn(adt), lyco_status_name(st), msg);
        tens_make(&P.dout, LYCO_F32, NO, NI);
        st = lyco_merge_bwd(ctx, &g, &P.a, &min, &P.dout.t, NULL);
        msg = lyco_last_error();
        report(st == LYCO_ERR_DTYPE && has(msg, e1) && has(msg, e2) && has(msg, "no common 16-bit type"),
               "merge_bwd       W %s, adapter %s: %s \"%s\"", dn(wd), dn(adt), lyco_status_name(st), msg);
    }
    make_problem(LYCO_BF16, LYCO_F32, NONE, rng);
    lyco_merge_args min = {&P.W.t, NULL, LYCO_MERGE_WEIGHT};
    tens_make(&P.dout, LYCO_F16, NO, NI);
    st = lyco_merge_bwd(ctx, &g, &P.a, &min, &P.dout.t, NULL);
    msg = lyco_last_error();
    report(st == LYCO_ERR_DTYPE && has(msg, "W is bf16") && has(msg, "d_out is fp16") && has(msg, "no common 16-bit type"),
           "merge_bwd       d_out fp16 vs W bf16: %s \"%s\"", lyco_status_name(st), msg);

    /* masks are not part of the policy: an fp16 rank mask in an all-bf16 call is fine */
    make_problem(LYCO_BF16, LYCO_BF16, NONE, rng);
    tens mask;
    tens_make(&mask, LYCO_F16, 1, NR);
    tset(&mask, 0, 1.0), tset(&mask, 1, 1.0);
    P.a.tensor[LYCO_RANK_MASK] = &mask.t;
    tens_make(&P.y, LYCO_BF16, NT, NO);
    in = (lyco_bypass_args){&P.x.t, NULL, NULL, 0};
    st = lyco_bypass_fwd(ctx, &P.y.t, &P.a, &in);
    report(st == LYCO_OK, "bypass_fwd      fp16 rank_mask in a bf16 call is not a policy operand: %s %s", lyco_status_name(st),
           st ? lyco_last_error() : "");
}

/* ---------------------------------------------------------------------------------------------
 * (d) names and the environment
 * ------------------------------------------------------------------------------------------- */
static void names(void) {
    lyco_ctx *ctx = NULL;
    unsetenv("LYCO_BACKEND");
    lyco_status st = lyco_ctx_create(&ctx);
    report(st == LYCO_OK && ctx, "ctx_create without LYCO_BACKEND: %s", lyco_status_name(st));
    if (!ctx) return;
    const char *msg;

    static const char *const bad[] = {"bogus", "Promote", "", "promote ", "bf16"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st = lyco_ctx_set_output_mode_name(ctx, bad[i]);
        msg = lyco_last_error();
        report(st == LYCO_ERR_INVALID && has(msg, "promote") && has(msg, "base"), "set_output_mode_name(\"%s\"): %s \"%s\"", bad[i],
               lyco_status_name(st), msg);
        st = lyco_ctx_set_fp32_mode_name(ctx, bad[i]);
        msg = lyco_last_error();
        report(st == LYCO_ERR_INVALID && has(msg, "fp32") && has(msg, "tf32"), "set_fp32_mode_name(\"%s\"): %s \"%s\"", bad[i],
               lyco_status_name(st), msg);
        st = lyco_ctx_set_backend_name(ctx, bad[i]);
        msg = lyco_last_error();
        report(st == LYCO_ERR_INVALID && has(msg, "auto") && has(msg, "ref") && has(msg, "eager") && has(msg, "cpu") && has(msg, "cuda"),
               "set_backend_name(\"%s\"): %s \"%s\"", bad[i], lyco_status_name(st), msg);
    }
    st = lyco_ctx_set_output_mode_name(ctx, NULL);
    msg = lyco_last_error();
    report(st == LYCO_ERR_INVALID && has(msg, "promote, base"), "set_output_mode_name(NULL): %s \"%s\"", lyco_status_name(st), msg);
    st = lyco_ctx_set_fp32_mode_name(ctx, NULL);
    msg = lyco_last_error();
    report(st == LYCO_ERR_INVALID && has(msg, "fp32, tf32"), "set_fp32_mode_name(NULL): %s \"%s\"", lyco_status_name(st), msg);
    st = lyco_ctx_set_backend_name(ctx, NULL);
    msg = lyco_last_error();
    report(st == LYCO_ERR_INVALID && has(msg, "auto, ref, eager, cpu, cuda"), "set_backend_name(NULL): %s \"%s\"", lyco_status_name(st), msg);

    /* the parse functions themselves */
    lyco_output_mode om = LYCO_OUTPUT_PROMOTE;
    lyco_fp32_mode fm = LYCO_FP32_FULL;
    st = lyco_output_mode_parse("bogus", &om);
    msg = lyco_last_error();
    report(st == LYCO_ERR_INVALID && has(msg, "bogus") && has(msg, "promote, base"), "output_mode_parse(\"bogus\"): %s \"%s\"",
           lyco_status_name(st), msg);
    st = lyco_fp32_mode_parse("tf64", &fm);
    msg = lyco_last_error();
    report(st == LYCO_ERR_INVALID && has(msg, "tf64") && has(msg, "fp32, tf32"), "fp32_mode_parse(\"tf64\"): %s \"%s\"", lyco_status_name(st), msg);
    report(lyco_output_mode_parse("base", &om) == LYCO_OK && om == LYCO_OUTPUT_BASE && lyco_output_mode_parse("promote", &om) == LYCO_OK &&
               om == LYCO_OUTPUT_PROMOTE && lyco_fp32_mode_parse("tf32", &fm) == LYCO_OK && fm == LYCO_FP32_TF32 &&
               lyco_fp32_mode_parse("fp32", &fm) == LYCO_OK && fm == LYCO_FP32_FULL,
           "output_mode_parse / fp32_mode_parse accept promote, base, fp32, tf32");

    /* valid names take effect */
    st = lyco_ctx_set_backend_name(ctx, "ref");
    report(st == LYCO_OK && lyco_ctx_backend(ctx) == LYCO_BACKEND_REF, "set_backend_name(\"ref\") selects ref");
    st = lyco_ctx_set_backend_name(ctx, "eager");
    report(st == LYCO_OK && lyco_ctx_backend(ctx) == LYCO_BACKEND_EAGER, "set_backend_name(\"eager\") selects eager");
    lyco_ctx_set_backend(ctx, LYCO_BACKEND_REF);
    {
        int64_t sx[2] = {NT, NI}, sd[2] = {NR, NI}, su[2] = {NO, NR};
        uint16_t xb[NT * NI] = {0};
        float d32[NR * NI] = {0}, u32[NO * NR] = {0};
        DLTensor tx = lyco_host_tensor(xb, LYCO_BF16, 2, sx), td = lyco_host_tensor(d32, LYCO_F32, 2, sd), tu = lyco_host_tensor(u32, LYCO_F32, 2, su);
        lyco_adapter a;
        lyco_adapter_init(&a, LYCO_ALGO_LOCON);
        lyco_layer_linear(&a.layer, NO, NI);
        a.tensor[LYCO_LORA_DOWN] = &td;
        a.tensor[LYCO_LORA_UP] = &tu;
        lyco_dtypes dt;
        bool ok = lyco_ctx_set_output_mode_name(ctx, "base") == LYCO_OK && lyco_resolve_dtypes(ctx, &a, NULL, &tx, NULL, &dt) == LYCO_OK &&
                  dt.output == LYCO_BF16;
        ok = ok && lyco_ctx_set_output_mode_name(ctx, "promote") == LYCO_OK && lyco_resolve_dtypes(ctx, &a, NULL, &tx, NULL, &dt) == LYCO_OK &&
             dt.output == LYCO_F32;
        report(ok, "set_output_mode_name(\"base\"/\"promote\") switches bf16 x + fp32 adapter between bf16 and fp32 output");
        report(lyco_ctx_set_fp32_mode_name(ctx, "tf32") == LYCO_OK && lyco_ctx_set_fp32_mode_name(ctx, "fp32") == LYCO_OK,
               "set_fp32_mode_name(\"tf32\"/\"fp32\") accepted");
    }
    /* a failed set leaves the context as it was */
    lyco_ctx_set_backend(ctx, LYCO_BACKEND_REF);
    lyco_ctx_set_backend_name(ctx, "nope");
    report(lyco_ctx_backend(ctx) == LYCO_BACKEND_REF, "a refused backend name leaves the backend unchanged (%s)", lyco_backend_name(lyco_ctx_backend(ctx)));
    lyco_ctx_destroy(ctx);

    /* the LYCO_BACKEND environment variable */
    static const char *const badenv[] = {"bogus", "REF", "gpu", "ref,cpu"};
    for (size_t i = 0; i < sizeof badenv / sizeof badenv[0]; i++) {
        setenv("LYCO_BACKEND", badenv[i], 1);
        static char sentinel;
        lyco_ctx *c2 = (lyco_ctx *)(void *)&sentinel; /* any non-NULL value: must be reset to NULL */
        st = lyco_ctx_create(&c2);
        msg = lyco_last_error();
        report(st == LYCO_ERR_INVALID && c2 == NULL && has(msg, "LYCO_BACKEND") && has(msg, badenv[i]) &&
                   has(msg, "auto, ref, eager, cpu, cuda"),
               "LYCO_BACKEND=\"%s\": ctx_create %s, ctx %s, \"%s\"", badenv[i], lyco_status_name(st), c2 ? "not NULL" : "NULL", msg);
        if (st == LYCO_OK && c2) lyco_ctx_destroy(c2);
    }
    setenv("LYCO_BACKEND", "ref", 1);
    lyco_ctx *c3 = NULL;
    st = lyco_ctx_create(&c3);
    report(st == LYCO_OK && c3 && lyco_ctx_backend(c3) == LYCO_BACKEND_REF, "LYCO_BACKEND=ref: ctx_create selects ref");
    lyco_ctx_destroy(c3);
    setenv("LYCO_BACKEND", "", 1);
    c3 = NULL;
    st = lyco_ctx_create(&c3);
    report(st == LYCO_OK && c3 && lyco_ctx_backend(c3) == LYCO_BACKEND_AUTO, "LYCO_BACKEND empty: auto");
    lyco_ctx_destroy(c3);
    unsetenv("LYCO_BACKEND");
}

int main(void) {
    uint64_t seed = lyco_seed_from_env();
    printf("test_policy: seed %llu (LYCO_SEED=%llu to rerun)\n", (unsigned long long)seed, (unsigned long long)seed);
    lyco_rng rng;
    lyco_rng_seed(&rng, seed);

    direct_rows();

    unsetenv("LYCO_BACKEND");
    lyco_ctx *ctx = NULL;
    if (lyco_ctx_create(&ctx) != LYCO_OK || lyco_ctx_set_backend(ctx, LYCO_BACKEND_REF) != LYCO_OK) {
        printf("FAIL cannot create a ref context: %s\n%d passed, %d failed\n", lyco_last_error(), passed, failed + 1);
        return 1;
    }
    for (int m = 0; m < 2; m++) {
        lyco_ctx_set_output_mode(ctx, modes[m]);
        for (int i = 0; i < NROWS; i++) verbs_row(&rows[i], m, ctx, &rng);
    }
    mixed_16(ctx, &rng);
    lyco_ctx_destroy(ctx);

    names();

    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
