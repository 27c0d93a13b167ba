/*
 * full.c — eager twin of Full / "diff" storage (ALGORITHMS.md §2.9), following lycoris-lora
 * 4.1.3's torch body for a loaded diff (`add_scaled(W, diff, m)` = W + diff·m, and the same for
 * the bias):
 *
 * merge:  ΔW̄ = diff, bias delta = diff_b (0 without it); eager.c applies the multiplier and the
 *         sums: W'' = rnd(W + rnd(diff · f32(m))), b'' = rnd(b + rnd(diff_b · f32(m))).
 * bypass (upstream has none; lyco's is the merged layer's extra output):
 *         E = rnd(diff · f32(m)),  Δ = rnd(rnd(op(x, E)) + rnd(diff_b · f32(m)))  (bias broadcast
 *         over tokens and positions); eager.c adds it to y0.
 *
 * Backward is autograd's chain of the same ops, each result rounded to T:
 *   merge:  G_diff = G (eager.c hands rnd(∂L/∂W'' · m)), G_diff_b = Gb (rnd(∂L/∂b'' · m))
 *   bypass: dx = rnd(opᵀ(dy, E)),  G_diff = rnd(rnd(wgrad(x, dy)) · m),
 *           G_diff_b = rnd(rnd(Σ_{tokens, positions} dy) · m)
 */
#include <string.h>

#include "eager.h"

static void delta(const eg_adapter *ea, const float *W, float *dW) {
    (void)W;
    memcpy(dW, ea->t[LYCO_DIFF], sizeof(float) * (size_t)(ea->O * ea->IK));
}

static void delta_bwd(eg_adapter *ea, const float *W, const float *G) {
    (void)W;
    if (ea->g[LYCO_DIFF]) memcpy(ea->g[LYCO_DIFF], G, sizeof(float) * (size_t)(ea->O * ea->IK));
}

static void bias_delta(const eg_adapter *ea, float *db) {
    const float *b = ea->t[LYCO_DIFF_B];
    for (int64_t o = 0; o < ea->O; o++) db[o] = b ? b[o] : 0.0f;
}

static void bias_delta_bwd(eg_adapter *ea, const float *Gb) {
    if (ea->g[LYCO_DIFF_B]) memcpy(ea->g[LYCO_DIFF_B], Gb, sizeof(float) * (size_t)ea->O);
}

/* E = rnd(diff · m) */
static float *scaled_diff(const eg_adapter *ea) {
    int64_t N = ea->O * ea->IK;
    float *E = eg_alloc(ea, N);
    if (!E) return NULL;
    memcpy(E, ea->t[LYCO_DIFF], sizeof(float) * (size_t)N);
    eg_scale(E, N, ea->c->m, ea->T);
    return E;
}

static void bypass_fwd(const eg_adapter *ea, const float *x, const float *W, float *delta_out) {
    (void)W;
    const lyco_call *c = ea->c;
    lyco_dtype T = ea->T;
    float *E = scaled_diff(ea);
    if (!E) return;
    eg_op_fwd(c, x, E, delta_out, T);
    const float *b = ea->t[LYCO_DIFF_B];
    if (!b) return;
    int64_t O = ea->O, sp = c->sp_out_n;
    float mf = (float)c->m;
    for (int64_t t = 0; t < c->tokens; t++)
        for (int64_t o = 0; o < O; o++) {
            float bm = eg_rnd(b[o] * mf, T);
            for (int64_t p = 0; p < sp; p++) {
                float *v = &delta_out[(t * O + o) * sp + p];
                *v = eg_rnd(*v + bm, T);
            }
        }
}

static void bypass_bwd(eg_adapter *ea, const float *x, const float *W, const float *dy, float *dx) {
    (void)W;
    const lyco_call *c = ea->c;
    lyco_dtype T = ea->T;
    int64_t O = ea->O, sp = c->sp_out_n;
    if (dx) {
        float *E = scaled_diff(ea);
        if (!E) return;
        eg_op_dgrad(c, dy, E, dx, T);
    }
    if (ea->g[LYCO_DIFF]) {
        eg_op_wgrad(c, x, dy, ea->g[LYCO_DIFF], T);
        eg_scale(ea->g[LYCO_DIFF], O * ea->IK, c->m, T);
    }
    float *gb = ea->g[LYCO_DIFF_B];
    if (gb) {
        float *acc = eg_alloc(ea, O);
        if (!acc) return;
        for (int64_t t = 0; t < c->tokens; t++)
            for (int64_t o = 0; o < O; o++)
                for (int64_t p = 0; p < sp; p++) acc[o] += dy[(t * O + o) * sp + p];
        for (int64_t o = 0; o < O; o++) gb[o] = eg_rnd(eg_rnd(acc[o], T) * (float)c->m, T);
    }
}

const eg_algo eg_full = {.delta = delta, .delta_bwd = delta_bwd, .bias_delta = bias_delta, .bias_delta_bwd = bias_delta_bwd,
                         .bypass_fwd = bypass_fwd, .bypass_bwd = bypass_bwd};
