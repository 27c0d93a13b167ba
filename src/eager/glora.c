/*
 * glora.c — eager twin of GLoRA (ALGORITHMS.md §2.7, C semantics: s·m·σs once; lycoris-lora
 * 4.1.3 fixed the bypass s² of §8 #4), following upstream's torch bodies.
 *
 * merge (`make_weight`: `(wb + w_wa2) * self.scale * self.scalar`):
 *         wb = rnd(B1 · B2) (O × I·K),  P = rnd(W ×_in A1) (P[o,j,κ] = Σ_c W[o,c,κ]·A1[c,j]),
 *         wa = rnd(P ×_j A2) (wa[o,c,κ] = Σ_j P[o,j,κ]·A2[j,c]),
 *         ΔW̄ = rnd(rnd(rnd(wb + wa) · f32(s)) · σs);  eager.c: W'' = rnd(W + rnd(ΔW̄ · m)).
 *         No masks in merge (the validator rejects them).
 * bypass: γ = rnd(rnd(σs · f32(s)) · f32(m))  (`self.scalar * self.scale * multiplier`, a 0-dim
 *         tensor; σs = 1 without use_scalar, so s itself is rounded to T), applied once per path
 *         on the rank activations (where upstream applies its scale):
 *           A: ha = rnd(rnd(conv1x1(x, A2)) · γ) → rnd(ha ⊙ q_a) → a = rnd(conv1x1(ha, A1))
 *              (x's grid; linear: x·A2ᵀ, ·A1ᵀ)
 *           B: hb = rnd(rnd(conv(x, B2; the layer's σ, π, δ)) · γ) → rnd(hb ⊙ q_b)
 *              → b = rnd(conv1x1(hb, B1))  (y's grid)
 *         Upstream returns base(x + a) + b; lyco returns the adapter's part alone,
 *           Δ = rnd(rnd(op(a, W)) + b),
 *         and eager.c adds it to y0 (upstream rounds x + a, then base's output with its bias,
 *         then + b: the same ops grouped differently).
 *
 * Backward is autograd's chain of the same ops, each result rounded to T; a broadcast product's
 * gradient is the elementwise product rounded to T, summed in fp32 and rounded:
 *   merge:  G_σs = rnd(Σ rnd(G ⊙ rnd(rnd(wb + wa)·s))),  Γ = rnd(rnd(G · σs) · s),
 *           G_B1 = rnd(Γ B2ᵀ), G_B2 = rnd(B1ᵀ Γ), G_A2 = rnd(Pᵀ Γ) (over o, κ),
 *           G_P = rnd(Γ ×_c A2ᵀ), G_A1 = rnd(W ×_{o,κ} G_P)
 *   bypass: G_a = rnd(opᵀ(dy, W)); G_A1 = wgrad(ha, G_a); G_ha = rnd(dgrad(G_a, A1)) ⊙ q_a;
 *           G_γ += rnd(Σ rnd(G_ha ⊙ ha0)); G_ha0 = rnd(G_ha · γ); G_A2 = wgrad(x, G_ha0);
 *           the B path alike from dy; dx = rnd(dgrad_A + dgrad_B) (the base path excluded);
 *           G_σs = rnd(rnd(G_γ · m) · s).
 */
#include <string.h>

#include "eager.h"

/* Σ rnd(a ⊙ b) in fp32, rounded: the gradient of a broadcast 0-dim factor */
static float dot_rp(const float *a, const float *b, int64_t n, lyco_dtype T) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += eg_rnd(a[i] * b[i], T);
    return eg_rnd(s, T);
}

/* ---- merge ---- */

/* P[o,j,κ] = rnd(Σ_c W[o,c,κ]·A1[c,j])  (O × r × K) */
static void w_times_a1(const eg_adapter *ea, const float *W, float *P) {
    const lyco_dims *d = &ea->c->dims;
    const float *A1 = ea->t[LYCO_GLORA_A1];
    int64_t r = d->r, K = d->K, I = d->I, IK = ea->IK;
    for (int64_t o = 0; o < d->O; o++)
        for (int64_t j = 0; j < r; j++)
            for (int64_t k = 0; k < K; k++) {
                float s = 0.0f;
                for (int64_t c = 0; c < I; c++) s += W[o * IK + c * K + k] * A1[c * r + j];
                P[(o * r + j) * K + k] = eg_rnd(s, ea->T);
            }
}

/* S = rnd(wb + wa), then rnd(S · s): the delta before σs (P filled when W is present) */
static void pre_sigma(const eg_adapter *ea, const float *W, float *P, float *out) {
    const lyco_dims *d = &ea->c->dims;
    lyco_dtype T = ea->T;
    int64_t O = d->O, r = d->r, K = d->K, I = d->I, IK = ea->IK;
    eg_gemm(false, false, O, IK, r, ea->t[LYCO_GLORA_B1], ea->t[LYCO_GLORA_B2], out, T);
    if (W) {
        const float *A2 = ea->t[LYCO_GLORA_A2];
        w_times_a1(ea, W, P);
        for (int64_t o = 0; o < O; o++)
            for (int64_t c = 0; c < I; c++)
                for (int64_t k = 0; k < K; k++) {
                    float s = 0.0f;
                    for (int64_t j = 0; j < r; j++) s += P[(o * r + j) * K + k] * A2[j * I + c];
                    float *v = &out[o * IK + c * K + k];
                    *v = eg_rnd(*v + eg_rnd(s, T), T);
                }
    }
    eg_scale(out, O * IK, ea->c->s, T);
}

static void delta(const eg_adapter *ea, const float *W, float *dW) {
    const lyco_dims *d = &ea->c->dims;
    float *P = eg_alloc(ea, d->O * d->r * d->K);
    if (!P) return;
    pre_sigma(ea, W, P, dW);
    if (ea->has_sigma) eg_scale(dW, ea->O * ea->IK, ea->sigma, ea->T);
}

static void delta_bwd(eg_adapter *ea, const float *W, const float *G) {
    const lyco_dims *d = &ea->c->dims;
    lyco_dtype T = ea->T;
    int64_t O = d->O, r = d->r, K = d->K, I = d->I, IK = ea->IK, N = O * IK;
    const float *B1 = ea->t[LYCO_GLORA_B1], *B2 = ea->t[LYCO_GLORA_B2], *A2 = ea->t[LYCO_GLORA_A2];
    float *P = eg_alloc(ea, O * r * K), *pre = eg_alloc(ea, N), *g = eg_alloc(ea, N);
    if (!P || !pre || !g) return;
    pre_sigma(ea, W, P, pre);                       /* also fills P = W ×_in A1 */
    memcpy(g, G, sizeof(float) * (size_t)N);
    if (ea->has_sigma) {
        if (ea->g[LYCO_SCALAR]) ea->g[LYCO_SCALAR][0] = dot_rp(g, pre, N, T);
        eg_scale(g, N, ea->sigma, T);               /* backward of × σs */
    }
    eg_scale(g, N, ea->c->s, T);                    /* backward of × s: Γ */
    if (ea->g[LYCO_GLORA_B1]) eg_gemm(false, true, O, r, IK, g, B2, ea->g[LYCO_GLORA_B1], T);
    if (ea->g[LYCO_GLORA_B2]) eg_gemm(true, false, r, IK, O, B1, g, ea->g[LYCO_GLORA_B2], T);
    if (!W) return;
    if (ea->g[LYCO_GLORA_A2])
        for (int64_t j = 0; j < r; j++)
            for (int64_t c = 0; c < I; c++) {
                float s = 0.0f;
                for (int64_t o = 0; o < O; o++)
                    for (int64_t k = 0; k < K; k++) s += P[(o * r + j) * K + k] * g[o * IK + c * K + k];
                ea->g[LYCO_GLORA_A2][j * I + c] = eg_rnd(s, T);
            }
    if (ea->g[LYCO_GLORA_A1]) {
        float *GP = eg_alloc(ea, O * r * K);
        if (!GP) return;
        for (int64_t o = 0; o < O; o++)
            for (int64_t j = 0; j < r; j++)
                for (int64_t k = 0; k < K; k++) {
                    float s = 0.0f;
                    for (int64_t c = 0; c < I; c++) s += g[o * IK + c * K + k] * A2[j * I + c];
                    GP[(o * r + j) * K + k] = eg_rnd(s, T);
                }
        for (int64_t c = 0; c < I; c++)
            for (int64_t j = 0; j < r; j++) {
                float s = 0.0f;
                for (int64_t o = 0; o < O; o++)
                    for (int64_t k = 0; k < K; k++) s += W[o * IK + c * K + k] * GP[(o * r + j) * K + k];
                ea->g[LYCO_GLORA_A1][c * r + j] = eg_rnd(s, T);
            }
    }
}

/* ---- bypass ---- */

/* a 1×1 conv I → O with the layer's batch, on x's grid (y_grid = false) or y's grid */
static void geom_1x1(const eg_adapter *ea, int64_t I, int64_t O, bool y_grid, eg_geom *g) {
    eg_geom_from_call(ea->c, g);
    g->I = I;
    g->O = O;
    g->groups = 1;
    for (int i = 0; i < 3; i++) {
        if (y_grid) g->in[i] = g->out[i];
        else g->out[i] = g->in[i];
        g->k[i] = g->stride[i] = g->dil[i] = 1;
        g->pad[i] = 0;
    }
}

/* B2: I → r with the layer's kernel, stride, padding and dilation */
static void geom_b2(const eg_adapter *ea, eg_geom *g) {
    eg_geom_from_call(ea->c, g);
    g->O = ea->c->dims.r;
    g->groups = 1;
}

typedef struct {
    eg_geom a2, a1, b2, b1;
    int64_t nha, nhb, nx, ny;
    float gamma;
} glora_bp;

static void bp_init(const eg_adapter *ea, glora_bp *b) {
    const lyco_call *c = ea->c;
    int64_t r = c->dims.r, I = c->dims.I, O = c->dims.O;
    geom_1x1(ea, I, r, false, &b->a2);
    geom_1x1(ea, r, I, false, &b->a1);
    geom_b2(ea, &b->b2);
    geom_1x1(ea, r, O, true, &b->b1);
    b->nha = c->tokens * r * c->sp_in_n;
    b->nhb = c->tokens * r * c->sp_out_n;
    b->nx = c->tokens * I * c->sp_in_n;
    b->ny = c->tokens * O * c->sp_out_n;
    b->gamma = eg_rnd(eg_rnd(ea->sigma * (float)c->s, ea->T) * (float)c->m, ea->T);
}

/* h ⊙ q along the rank (channel) axis of an N × r × sp activation */
static void rank_mask(const eg_adapter *ea, lyco_slot slot, float *h, int64_t sp) {
    const float *q = ea->t[slot];
    if (!q) return;
    int64_t r = ea->c->dims.r;
    for (int64_t n = 0; n < ea->c->tokens; n++)
        for (int64_t i = 0; i < r; i++)
            for (int64_t p = 0; p < sp; p++) {
                float *v = &h[(n * r + i) * sp + p];
                *v = eg_rnd(*v * q[i], ea->T);
            }
}

/* h0 = rnd(conv(x, down)), h = rnd(h0 · γ) ⊙ q */
static void rank_act(const eg_adapter *ea, const glora_bp *b, const eg_geom *g, lyco_slot down, lyco_slot mask,
                     const float *x, float *h0, float *h, int64_t n, int64_t sp) {
    eg_conv_fwd(g, x, ea->t[down], h0, ea->T);
    memcpy(h, h0, sizeof(float) * (size_t)n);
    eg_scale(h, n, b->gamma, ea->T);
    rank_mask(ea, mask, h, sp);
}

static void bypass_fwd(const eg_adapter *ea, const float *x, const float *W, float *delta_out) {
    const lyco_call *c = ea->c;
    glora_bp b;
    bp_init(ea, &b);
    float *ha0 = eg_alloc(ea, b.nha), *ha = eg_alloc(ea, b.nha), *a = eg_alloc(ea, b.nx);
    float *hb0 = eg_alloc(ea, b.nhb), *hb = eg_alloc(ea, b.nhb), *bt = eg_alloc(ea, b.ny);
    if (!ha0 || !ha || !a || !hb0 || !hb || !bt) return;
    if (W) {
        rank_act(ea, &b, &b.a2, LYCO_GLORA_A2, LYCO_RANK_MASK, x, ha0, ha, b.nha, c->sp_in_n);
        eg_conv_fwd(&b.a1, ha, ea->t[LYCO_GLORA_A1], a, ea->T);
        eg_op_fwd(c, a, W, delta_out, ea->T);
    }
    rank_act(ea, &b, &b.b2, LYCO_GLORA_B2, LYCO_RANK_MASK_B, x, hb0, hb, b.nhb, c->sp_out_n);
    eg_conv_fwd(&b.b1, hb, ea->t[LYCO_GLORA_B1], bt, ea->T);
    eg_add(delta_out, bt, delta_out, b.ny, ea->T);
}

/* Backward of one rank path from gh (∂L/∂h after the mask is undone): G_γ part, G_down, dx part */
static float path_bwd(eg_adapter *ea, const glora_bp *b, const eg_geom *g, lyco_slot down, lyco_slot mask, const float *x,
                      const float *h0, float *gh, int64_t n, int64_t sp, float *dxp) {
    lyco_dtype T = ea->T;
    rank_mask(ea, mask, gh, sp);
    float gg = ea->has_sigma && ea->g[LYCO_SCALAR] ? dot_rp(gh, h0, n, T) : 0.0f;
    eg_scale(gh, n, b->gamma, T);
    if (ea->g[down]) eg_conv_wgrad(g, x, gh, ea->g[down], T);
    if (dxp) eg_conv_dgrad(g, gh, ea->t[down], dxp, T);
    return gg;
}

static void bypass_bwd(eg_adapter *ea, const float *x, const float *W, const float *dy, float *dx) {
    const lyco_call *c = ea->c;
    lyco_dtype T = ea->T;
    glora_bp b;
    bp_init(ea, &b);
    float *ha0 = eg_alloc(ea, b.nha), *ha = eg_alloc(ea, b.nha), *ga = eg_alloc(ea, b.nx), *gha = eg_alloc(ea, b.nha);
    float *hb0 = eg_alloc(ea, b.nhb), *hb = eg_alloc(ea, b.nhb), *ghb = eg_alloc(ea, b.nhb);
    float *dxa = eg_alloc(ea, b.nx), *dxb = eg_alloc(ea, b.nx);
    if (!ha0 || !ha || !ga || !gha || !hb0 || !hb || !ghb || !dxa || !dxb) return;
    float gg = 0.0f;
    if (W) { /* A path: Δ ∋ op(a, W), a = conv1x1(ha, A1) */
        rank_act(ea, &b, &b.a2, LYCO_GLORA_A2, LYCO_RANK_MASK, x, ha0, ha, b.nha, c->sp_in_n);
        eg_op_dgrad(c, dy, W, ga, T);
        if (ea->g[LYCO_GLORA_A1]) eg_conv_wgrad(&b.a1, ha, ga, ea->g[LYCO_GLORA_A1], T);
        eg_conv_dgrad(&b.a1, ga, ea->t[LYCO_GLORA_A1], gha, T);
        gg = path_bwd(ea, &b, &b.a2, LYCO_GLORA_A2, LYCO_RANK_MASK, x, ha0, gha, b.nha, c->sp_in_n, dxa);
    }
    /* B path: Δ ∋ b = conv1x1(hb, B1) */
    rank_act(ea, &b, &b.b2, LYCO_GLORA_B2, LYCO_RANK_MASK_B, x, hb0, hb, b.nhb, c->sp_out_n);
    if (ea->g[LYCO_GLORA_B1]) eg_conv_wgrad(&b.b1, hb, dy, ea->g[LYCO_GLORA_B1], T);
    eg_conv_dgrad(&b.b1, dy, ea->t[LYCO_GLORA_B1], ghb, T);
    float ggb = path_bwd(ea, &b, &b.b2, LYCO_GLORA_B2, LYCO_RANK_MASK_B, x, hb0, ghb, b.nhb, c->sp_out_n, dxb);
    if (dx) eg_add(dxa, dxb, dx, b.nx, T);
    if (ea->has_sigma && ea->g[LYCO_SCALAR]) {
        float gs = eg_rnd(gg + ggb, T);                      /* γ's two uses accumulate */
        gs = eg_rnd(gs * (float)c->m, T);                    /* through × m */
        ea->g[LYCO_SCALAR][0] = eg_rnd(gs * (float)c->s, T); /* through σs × s */
    }
}

const eg_algo eg_glora = {.delta = delta, .delta_bwd = delta_bwd, .bypass_fwd = bypass_fwd, .bypass_bwd = bypass_bwd};
