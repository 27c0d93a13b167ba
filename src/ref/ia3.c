/*
 * ia3.c — fp64 oracle of (IA)³ (ALGORITHMS.md §2.6).
 *
 * One vector w scales the base weight along one axis; the effective factor is f = 1 + m·w.
 *
 *   output mode (default), w has O elements:
 *     merge  ΔW̄[o, j] = W̄[o, j] · w[o]                     (j over the I/g·K columns of row o)
 *     bypass y = y0 ⊙ f along the channel axis (a row map on y0: Y[o, :] = X[o, :] · (1 + m·w[o]);
 *            the bias inside y0 is scaled too, so bypass ≠ merge when the layer has a bias)
 *   input mode (ia3_on_input), w has I elements:
 *     merge  ΔW̄[o, c·K + κ] = W̄[o, c·K + κ] · w[c]         (every kernel position of channel c)
 *     bypass Δ = op(x ⊙ (m·w), W) = op(x, m·ΔW): additive, ref.c runs it through delta
 *
 * Gradients (G = ∂L/∂ΔW̄ as ref.c hands it, multiplier already applied):
 *   merge / input-mode bypass:  G_w[o] = Σ_j G[o,j]·W̄[o,j]   (output)
 *                               G_w[c] = Σ_{o,κ} G[o,c·K+κ]·W̄[o,c·K+κ]   (input)
 *   output-mode bypass (row map): G_w[o] = m · Σ_p GY[o,p]·X[o,p],  GX = GY ⊙ (1 + m·w)
 *
 * Shapes: w is (D) or (1, D, 1, …) — compact D values; W̄ is O × IK (ra->IK = I/g·K: output mode
 * accepts grouped convs, input mode needs groups = 1, enforced by shapes.c). No scale, no σs.
 * W is required in merge and input-mode bypass (validate.c); a NULL W gives ΔW = 0.
 */
#include "ref.h"

/* Index into w of column j of ΔW̄ row o. */
static int64_t w_index(const ref_adapter *ra, int64_t o, int64_t j) {
    return ra->c->a->ia3_on_input ? j / ra->c->dims.K : o;
}

static void delta(const ref_adapter *ra, const double *W, double *dW) {
    const double *w = ra->t[LYCO_IA3_WEIGHT];
    int64_t O = ra->O, IK = ra->IK;
    for (int64_t o = 0; o < O; o++)
        for (int64_t j = 0; j < IK; j++) dW[o * IK + j] = W ? W[o * IK + j] * w[w_index(ra, o, j)] : 0.0;
}

static void delta_bwd(ref_adapter *ra, const double *W, const double *G) {
    double *gw = ra->g[LYCO_IA3_WEIGHT];
    if (!gw || !W) return;
    int64_t O = ra->O, IK = ra->IK;
    for (int64_t o = 0; o < O; o++)
        for (int64_t j = 0; j < IK; j++) gw[w_index(ra, o, j)] += G[o * IK + j] * W[o * IK + j];
}

/* Output mode on y0 rows: Y[o, p] = X[o, p] · (1 + m·w[o]). */
static void rows(const ref_adapter *ra, const double *X, int64_t n, double *Y) {
    const double *w = ra->t[LYCO_IA3_WEIGHT];
    double m = ra->c->m;
    for (int64_t o = 0; o < ra->O; o++) {
        double f = 1.0 + m * w[o];
        for (int64_t p = 0; p < n; p++) Y[o * n + p] = X[o * n + p] * f;
    }
}

static void rows_bwd(ref_adapter *ra, const double *X, const double *GY, int64_t n, double *GX) {
    const double *w = ra->t[LYCO_IA3_WEIGHT];
    double *gw = ra->g[LYCO_IA3_WEIGHT], m = ra->c->m;
    for (int64_t o = 0; o < ra->O; o++) {
        double f = 1.0 + m * w[o], acc = 0.0;
        for (int64_t p = 0; p < n; p++) {
            acc += GY[o * n + p] * X[o * n + p];
            if (GX) GX[o * n + p] = GY[o * n + p] * f;
        }
        if (gw) gw[o] += m * acc;
    }
}

const ref_algo ref_ia3 = {.delta = delta, .delta_bwd = delta_bwd, .rows = rows, .rows_bwd = rows_bwd, .uses_sigma = false};
