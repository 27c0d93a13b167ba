/*
 * full.c — fp64 oracle of Full / native fine-tuning stored as a difference (ALGORITHMS.md §2.9).
 *
 *   ΔW̄ = diff            (O × IK, IK = I/g·K: grouped convs are fine, diff has W's shape)
 *   Δb  = diff_b          (O; 0 when diff_b is absent)
 *
 * so merge gives W'' = W + m·diff, b'' = b + m·diff_b (upstream's merge crashes with diff_b and
 * its non-diff path applies m², §8 #9: lyco does neither). Bypass (ref.c's generic path) is
 * Δ = op(x, m·diff) + m·diff_b, what the forward of the merged layer adds.
 *
 * Gradients: G_diff = G (ref.c hands ∂L/∂ΔW̄ with m already applied, i.e. m·∂L/∂W''), and
 * G_diff_b = Gb (m·∂L/∂b'', or m·Σ g over tokens and positions in bypass). No scale, σs or masks.
 */
#include <string.h>

#include "ref.h"

static void delta(const ref_adapter *ra, const double *W, double *dW) {
    (void)W;
    memcpy(dW, ra->t[LYCO_DIFF], sizeof(double) * (size_t)(ra->O * ra->IK));
}

static void delta_bwd(ref_adapter *ra, const double *W, const double *G) {
    (void)W;
    double *g = ra->g[LYCO_DIFF];
    if (!g) return;
    for (int64_t n = 0; n < ra->O * ra->IK; n++) g[n] += G[n];
}

static void bias_delta(const ref_adapter *ra, double *db) {
    const double *b = ra->t[LYCO_DIFF_B];
    for (int64_t o = 0; o < ra->O; o++) db[o] = b ? b[o] : 0.0;
}

static void bias_delta_bwd(ref_adapter *ra, const double *Gb) {
    double *g = ra->g[LYCO_DIFF_B];
    if (!g) return;
    for (int64_t o = 0; o < ra->O; o++) g[o] += Gb[o];
}

const ref_algo ref_full = {.delta = delta, .delta_bwd = delta_bwd, .bias_delta = bias_delta,
                           .bias_delta_bwd = bias_delta_bwd, .uses_sigma = false};
