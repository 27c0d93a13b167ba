/*
 * ia3.c — eager twin of (IA)³ (ALGORITHMS.md §2.6), following lycoris-lora 4.1.3's torch bodies
 * (`_ia3_weight`, `_ia3_scale`): the factor is f = rnd(rnd(w · f32(m)) + 1) (`w·mult + 1`), and
 *
 * merge (both modes, as a row map on W̄ so that W'' is upstream's one product, not W + ΔW·m):
 *         W''[o, j] = rnd(W̄[o, j] · f[o])            (output mode)
 *         W''[o, c·K+κ] = rnd(W̄[o, c·K+κ] · f[c])    (input mode)
 *         eager.c then forms E = rnd(W'' − W).
 * bypass, output mode (row map on y0, bias included as upstream does): y = rnd(y0 ⊙ f).
 * bypass, input mode: upstream runs base(rnd(x ⊙ f)); lyco returns the adapter's part alone, so
 *         the chain is g = rnd(w · f32(m)) (`w·mult + 0`, the diff form), xs = rnd(x ⊙ g) on x's
 *         channel axis, Δ = rnd(op(xs, W)) (no bias); eager.c adds it to y0 (one more rounding
 *         than upstream's single GEMM on x ⊙ f).
 *
 * Backward is autograd's chain of the same ops, each result rounded to T: a broadcast product's
 * gradient is the elementwise product rounded to T, then summed (fp32) over the broadcast axes and
 * rounded; the `+ 1` passes it through; `× m` gives rnd(· f32(m)).
 *   merge:          G_w = rnd(rnd(Σ rnd(G ⊙ W)) · m)    (G = ∂L/∂W'')
 *   bypass out:     G_w = rnd(rnd(Σ rnd(dy ⊙ y0)) · m),  dy0 = rnd(dy ⊙ f)
 *   bypass in:      G_xs = rnd(opᵀ(dy, W)),  dx = rnd(G_xs ⊙ g),  G_w = rnd(rnd(Σ rnd(G_xs ⊙ x)) · m)
 */
#include "eager.h"

/* f[d] = rnd(rnd(w[d]·m) + 1) (diff = false) or g[d] = rnd(w[d]·m) (diff = true) */
static float factor(const eg_adapter *ea, int64_t d, bool diff) {
    float g = eg_rnd(ea->t[LYCO_IA3_WEIGHT][d] * (float)ea->c->m, ea->T);
    return diff ? g : eg_rnd(g + 1.0f, ea->T);
}

/* Index into w of column j of row o of X (merge: X = W̄, O × IK; bypass out: y0 rows). */
static int64_t w_index(const eg_adapter *ea, int64_t o, int64_t j) {
    return ea->c->a->ia3_on_input ? j / ea->c->dims.K : o;
}

static void rows(const eg_adapter *ea, const float *X, int64_t n, float *Y) {
    for (int64_t o = 0; o < ea->O; o++)
        for (int64_t j = 0; j < n; j++) Y[o * n + j] = eg_rnd(X[o * n + j] * factor(ea, w_index(ea, o, j), false), ea->T);
}

static void rows_bwd(eg_adapter *ea, const float *X, const float *GY, int64_t n, float *GX) {
    lyco_dtype T = ea->T;
    float *gw = ea->g[LYCO_IA3_WEIGHT], *acc = NULL;
    int64_t D = ea->n[LYCO_IA3_WEIGHT];
    if (gw) {
        acc = eg_alloc(ea, D);
        if (!acc) return;
    }
    for (int64_t o = 0; o < ea->O; o++)
        for (int64_t j = 0; j < n; j++) {
            int64_t d = w_index(ea, o, j), i = o * n + j;
            if (acc) acc[d] += eg_rnd(GY[i] * X[i], T);
            if (GX) GX[i] = eg_rnd(GY[i] * factor(ea, d, false), T);
        }
    if (gw)
        for (int64_t d = 0; d < D; d++) gw[d] = eg_rnd(eg_rnd(acc[d], T) * (float)ea->c->m, T);
}

/* x (tokens × I × sp_in): xs = rnd(x ⊙ g) on the channel axis */
static void scale_input(const eg_adapter *ea, const float *x, float *xs) {
    const lyco_call *c = ea->c;
    int64_t I = c->dims.I, sp = c->sp_in_n;
    for (int64_t t = 0; t < c->tokens; t++)
        for (int64_t i = 0; i < I; i++) {
            float g = factor(ea, i, true);
            for (int64_t p = 0; p < sp; p++) {
                int64_t k = (t * I + i) * sp + p;
                xs[k] = eg_rnd(x[k] * g, ea->T);
            }
        }
}

static void bypass_fwd(const eg_adapter *ea, const float *x, const float *W, float *delta) {
    const lyco_call *c = ea->c;
    int64_t nx = c->tokens * c->dims.I * c->sp_in_n;
    float *xs = eg_alloc(ea, nx);
    if (!xs || !W) return;
    scale_input(ea, x, xs);
    eg_op_fwd(c, xs, W, delta, ea->T);
}

static void bypass_bwd(eg_adapter *ea, const float *x, const float *W, const float *dy, float *dx) {
    const lyco_call *c = ea->c;
    lyco_dtype T = ea->T;
    int64_t I = c->dims.I, sp = c->sp_in_n, nx = c->tokens * I * sp;
    float *gxs = eg_alloc(ea, nx), *gw = ea->g[LYCO_IA3_WEIGHT], *acc = eg_alloc(ea, I);
    if (!gxs || !acc || !W) return;
    eg_op_dgrad(c, dy, W, gxs, T);
    for (int64_t t = 0; t < c->tokens; t++)
        for (int64_t i = 0; i < I; i++) {
            float g = factor(ea, i, true);
            for (int64_t p = 0; p < sp; p++) {
                int64_t k = (t * I + i) * sp + p;
                if (dx) dx[k] = eg_rnd(gxs[k] * g, T);
                acc[i] += eg_rnd(gxs[k] * x[k], T);
            }
        }
    if (gw)
        for (int64_t i = 0; i < I; i++) gw[i] = eg_rnd(eg_rnd(acc[i], T) * (float)c->m, T);
}

const eg_algo eg_ia3 = {.rows = rows, .rows_bwd = rows_bwd, .bypass_fwd = bypass_fwd, .bypass_bwd = bypass_bwd};
