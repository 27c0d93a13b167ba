/*
 * test_header_example.c — the usage example from the opening comment of include/lyco.h, compiled
 * verbatim as C11 (the text between BEGIN and END below is copied unchanged from lyco.h; its
 * first line, #include "lyco.h", is the include at the top of this file) and run:
 * it must return 0, its lyco_bypass_fwd must return LYCO_OK, and y must be finite and equal
 * y = (alpha/rank)·(x·downᵀ)·upᵀ (the example passes no y0) within fp32 accumulation error.
 *
 * The example never initialises x, down and up (reported to the lead: it computes on
 * indeterminate values). So that the run is deterministic and y is checkable, lyco_bypass_fwd is
 * routed through a spy (a macro defined only around the example) that fills x, down and up with
 * fixed values through the tensors the example built, then calls the real lyco_bypass_fwd and
 * records its status. The spy does not change what the example's code says.
 *
 * Prints one line per check and ends with "N passed, M failed"; exits non-zero on failure.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lyco.h"

static int passed, failed;

static void report(int ok, const char *what, const char *detail) {
    printf("%-4s %s%s%s\n", ok ? "ok" : "FAIL", what, detail[0] ? ": " : "", detail);
    if (ok) passed++;
    else failed++;
}

/* what the spy saw */
static int spy_calls;
static lyco_status spy_status = LYCO_STATUS_COUNT;
static char spy_error[512];
static float spy_y[8 * 32]; /* y as the example's call left it */
static float in_x[8 * 64], in_down[4 * 64], in_up[32 * 4];

static int64_t numel(const DLTensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static void fill(const DLTensor *t, int mul, int mod, float off, float scale) {
    float *p = (float *)((char *)t->data + t->byte_offset);
    for (int64_t i = 0; i < numel(t); i++) p[i] = ((float)((i * mul) % mod) - off) * scale;
}

static lyco_status spy_bypass_fwd(lyco_ctx *ctx, DLTensor *y, const lyco_adapter *a, const lyco_bypass_args *in) {
    spy_calls++;
    fill(in->x, 37, 17, 8.0f, 0.125f);
    fill(a->tensor[LYCO_LORA_DOWN], 13, 11, 5.0f, 0.0625f);
    fill(a->tensor[LYCO_LORA_UP], 7, 5, 2.0f, 0.25f);
    memcpy(in_x, in->x->data, sizeof in_x);
    memcpy(in_down, a->tensor[LYCO_LORA_DOWN]->data, sizeof in_down);
    memcpy(in_up, a->tensor[LYCO_LORA_UP]->data, sizeof in_up);
    spy_status = lyco_bypass_fwd(ctx, y, a, in);
    memcpy(spy_y, y->data, sizeof spy_y);
    snprintf(spy_error, sizeof spy_error, "%s", spy_status == LYCO_OK ? "" : lyco_last_error());
    return spy_status;
}

#define lyco_bypass_fwd spy_bypass_fwd
static int header_example(void) {
    /* ---- BEGIN: verbatim from include/lyco.h ---- */
    // The adapter term alone, Δ = (x · downᵀ) · upᵀ · (alpha/rank), of a LoRA on a 64→32
    // Linear, rank 4, for 8 tokens (pass y0 in lyco_bypass_args to get y = y0 + Δ).
    float x[8 * 64], down[4 * 64], up[32 * 4], y[8 * 32];
    for (int i = 0; i < 8 * 64; i++) x[i] = 0.01f * (float)(i % 7);
    for (int i = 0; i < 4 * 64; i++) down[i] = 0.01f * (float)(i % 5);
    for (int i = 0; i < 32 * 4; i++) up[i] = 0.01f * (float)(i % 3);
    int64_t sx[2] = {8, 64}, sd[2] = {4, 64}, su[2] = {32, 4}, sy[2] = {8, 32};
    DLTensor tx = lyco_host_tensor(x, LYCO_F32, 2, sx);
    DLTensor td = lyco_host_tensor(down, LYCO_F32, 2, sd);
    DLTensor tu = lyco_host_tensor(up, LYCO_F32, 2, su);
    DLTensor ty = lyco_host_tensor(y, LYCO_F32, 2, sy);
    lyco_adapter a;
    lyco_adapter_init(&a, LYCO_ALGO_LOCON);
    lyco_layer_linear(&a.layer, 32, 64);
    a.tensor[LYCO_LORA_DOWN] = &td;
    a.tensor[LYCO_LORA_UP] = &tu;
    a.alpha = 2.0;
    lyco_ctx *ctx = NULL;
    if (lyco_ctx_create(&ctx) != LYCO_OK) return 1;
    lyco_bypass_args in = {&tx, NULL, NULL, 0};      // x, y0, base weight, flags
    int rc = 0;
    if (lyco_bypass_fwd(ctx, &ty, &a, &in) != LYCO_OK) {
        fprintf(stderr, "lyco: %s\n", lyco_last_error());
        rc = 1;
    }
    lyco_ctx_destroy(ctx);
    return rc;
    /* ---- END ---- */
}
#undef lyco_bypass_fwd

int main(void) {
    static float y[8 * 32];
    char detail[800];
    int rc = header_example();
    memcpy(y, spy_y, sizeof spy_y);
    snprintf(detail, sizeof detail, "returned %d", rc);
    report(rc == 0, "the example returns 0", detail);
    snprintf(detail, sizeof detail, "%d call(s), %s %s", spy_calls, spy_status == LYCO_STATUS_COUNT ? "never called" : lyco_status_name(spy_status), spy_error);
    report(spy_calls == 1 && spy_status == LYCO_OK, "its lyco_bypass_fwd returns LYCO_OK", detail);
    int nonfinite = 0;
    for (int i = 0; i < 8 * 32; i++)
        if (!isfinite(y[i])) nonfinite++;
    snprintf(detail, sizeof detail, "%d of 256 not finite", nonfinite);
    report(nonfinite == 0, "y is finite", detail);
    /* y = (alpha / rank) · (x · downᵀ) · upᵀ, alpha 2, rank 4, in fp64 */
    double worst = 0;
    int nonzero = 0;
    for (int t = 0; t < 8; t++)
        for (int o = 0; o < 32; o++) {
            double r = 0, mag = 0;
            for (int k = 0; k < 4; k++) {
                double h = 0, hm = 0;
                for (int i = 0; i < 64; i++) {
                    h += (double)in_x[t * 64 + i] * in_down[k * 64 + i];
                    hm += fabs((double)in_x[t * 64 + i] * in_down[k * 64 + i]);
                }
                r += h * in_up[o * 4 + k];
                mag += hm * fabs((double)in_up[o * 4 + k]);
            }
            r *= 0.5, mag *= 0.5;
            if (r != 0) nonzero++;
            /* fp32 accumulation over 64 + 4 terms: far below 1e-5 of the magnitude sum */
            double e = fabs(y[t * 32 + o] - r) / (mag * 1e-5 + 1e-30);
            if (!(e <= worst)) worst = e;
        }
    snprintf(detail, sizeof detail, "max |y - ref| = %.3g x 1e-5 of sum|terms|, %d nonzero outputs", worst, nonzero);
    report(worst <= 1.0 && nonzero > 0, "y = (alpha/rank)(x downT) upT", detail);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
