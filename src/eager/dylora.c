/*
 * dylora.c — eager twin of DyLoRA (ALGORITHMS.md §2.8), training semantics, following
 * lycoris-lora 4.1.3's `make_weight` / `bypass_forward_diff`. With ρ = dyl_blocks·bs active ranks,
 * D_s = the first ρ rows of lora_down (ρ × I·K) and U_s = the first ρ columns of lora_up (O × ρ):
 *
 * merge:  ΔW̄ = rnd(U_s · rnd(D_s · f32(s)))      (the scale multiplies the stacked down first)
 *         eager.c then applies W'' = rnd(W + rnd(ΔW̄ · m)). Upstream folds m into that scale
 *         (`down * (gamma * m)`, one rounding); the eg_algo contract (delta without m) gives an
 *         extra rounding of ΔW̄ · m when m ≠ 1 (exact at m = 1).
 * bypass: h = rnd(op(x, D_s))  (the layer's conv geometry, r = ρ outputs),
 *         u = rnd(conv1x1(h, U_s)),  Δ = rnd(rnd(u · f32(s)) · f32(m))   (`… * gamma * scale`)
 *
 * Backward is autograd's chain of the same ops, each result rounded to T. Blocks before t* are
 * detached upstream and blocks after it unused: only block t* (ranks lo … hi−1) gets a gradient,
 * every other element of U and D stays 0.
 *   merge:  G_U[:, lo:hi] = rnd(G · rnd(D_s·s)ᵀ)[:, lo:hi],  G_D[lo:hi] = rnd(rnd(U_sᵀ · G)[lo:hi] · s)
 *   bypass: gu = rnd(rnd(dy · m) · s),  G_U = wgrad(h, gu)[:, lo:hi],  gh = rnd(U_sᵀ-conv(gu)),
 *           G_D = wgrad(x, gh)[lo:hi],  dx = rnd(opᵀ(gh, D_s))
 */
#include <string.h>

#include "eager.h"

typedef struct {
    int64_t r, rho, lo, hi;
} dyl_ranks;

static void ranks(const eg_adapter *ea, dyl_ranks *k) {
    const lyco_dims *d = &ea->c->dims;
    k->r = d->r;
    k->rho = d->dyl_blocks * d->dyl_bs;
    k->lo = (d->dyl_blocks - 1) * d->dyl_bs;
    k->hi = k->rho;
}

/* U_s (O × ρ) compact from U (O × r) */
static float *up_active(const eg_adapter *ea, const dyl_ranks *k) {
    float *Us = eg_alloc(ea, ea->O * k->rho);
    if (!Us) return NULL;
    const float *U = ea->t[LYCO_LORA_UP];
    for (int64_t o = 0; o < ea->O; o++) memcpy(&Us[o * k->rho], &U[o * k->r], sizeof(float) * (size_t)k->rho);
    return Us;
}

/* Ds = rnd(D_s · f32(s)) (ρ × IK) */
static float *down_scaled(const eg_adapter *ea, const dyl_ranks *k) {
    int64_t n = k->rho * ea->IK;
    float *Ds = eg_alloc(ea, n);
    if (!Ds) return NULL;
    memcpy(Ds, ea->t[LYCO_LORA_DOWN], sizeof(float) * (size_t)n);
    eg_scale(Ds, n, ea->c->s, ea->T);
    return Ds;
}

static void delta(const eg_adapter *ea, const float *W, float *dW) {
    (void)W;
    dyl_ranks k;
    ranks(ea, &k);
    float *Us = up_active(ea, &k), *Ds = down_scaled(ea, &k);
    if (!Us || !Ds) return;
    eg_gemm(false, false, ea->O, ea->IK, k.rho, Us, Ds, dW, ea->T);
}

static void delta_bwd(eg_adapter *ea, const float *W, const float *G) {
    (void)W;
    dyl_ranks k;
    ranks(ea, &k);
    lyco_dtype T = ea->T;
    int64_t O = ea->O, IK = ea->IK;
    const float *U = ea->t[LYCO_LORA_UP];
    if (ea->g[LYCO_LORA_UP]) {
        float *Ds = down_scaled(ea, &k);
        if (!Ds) return;
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = k.lo; i < k.hi; i++) {
                float s = 0.0f;
                for (int64_t j = 0; j < IK; j++) s += G[o * IK + j] * Ds[i * IK + j];
                ea->g[LYCO_LORA_UP][o * k.r + i] = eg_rnd(s, T);
            }
    }
    if (ea->g[LYCO_LORA_DOWN]) {
        float sf = (float)ea->c->s;
        for (int64_t i = k.lo; i < k.hi; i++)
            for (int64_t j = 0; j < IK; j++) {
                float s = 0.0f;
                for (int64_t o = 0; o < O; o++) s += U[o * k.r + i] * G[o * IK + j];
                ea->g[LYCO_LORA_DOWN][i * IK + j] = eg_rnd(eg_rnd(s, T) * sf, T);
            }
    }
}

/* down: x → h (I → ρ, the layer's geometry); up: h → u (ρ → O, 1×1 on y's grid) */
static void geom_down(const eg_adapter *ea, const dyl_ranks *k, eg_geom *g) {
    eg_geom_from_call(ea->c, g);
    g->O = k->rho;
    g->groups = 1;
}

static void geom_up(const eg_adapter *ea, const dyl_ranks *k, eg_geom *g) {
    eg_geom_from_call(ea->c, g);
    g->I = k->rho;
    g->groups = 1;
    for (int i = 0; i < 3; i++) {
        g->in[i] = g->out[i];
        g->k[i] = g->stride[i] = g->dil[i] = 1;
        g->pad[i] = 0;
    }
}

static void bypass_fwd(const eg_adapter *ea, const float *x, const float *W, float *delta_out) {
    (void)W;
    const lyco_call *c = ea->c;
    dyl_ranks k;
    ranks(ea, &k);
    int64_t nh = c->tokens * k.rho * c->sp_out_n, ny = c->tokens * ea->O * c->sp_out_n;
    float *h = eg_alloc(ea, nh), *Us = up_active(ea, &k);
    if (!h || !Us) return;
    eg_geom g;
    geom_down(ea, &k, &g);
    eg_conv_fwd(&g, x, ea->t[LYCO_LORA_DOWN], h, ea->T);
    geom_up(ea, &k, &g);
    eg_conv_fwd(&g, h, Us, delta_out, ea->T);
    eg_scale(delta_out, ny, c->s, ea->T);
    eg_scale(delta_out, ny, c->m, ea->T);
}

static void bypass_bwd(eg_adapter *ea, const float *x, const float *W, const float *dy, float *dx) {
    (void)W;
    const lyco_call *c = ea->c;
    lyco_dtype T = ea->T;
    dyl_ranks k;
    ranks(ea, &k);
    int64_t O = ea->O, IK = ea->IK, nh = c->tokens * k.rho * c->sp_out_n, ny = c->tokens * O * c->sp_out_n;
    float *h = eg_alloc(ea, nh), *gh = eg_alloc(ea, nh), *gu = eg_alloc(ea, ny), *Us = up_active(ea, &k);
    float *gUs = eg_alloc(ea, O * k.rho), *gDs = eg_alloc(ea, k.rho * IK);
    if (!h || !gh || !gu || !Us || !gUs || !gDs) return;
    eg_geom gd, gup;
    geom_down(ea, &k, &gd);
    geom_up(ea, &k, &gup);
    eg_conv_fwd(&gd, x, ea->t[LYCO_LORA_DOWN], h, T);
    memcpy(gu, dy, sizeof(float) * (size_t)ny);
    eg_scale(gu, ny, c->m, T);                      /* backward of × m */
    eg_scale(gu, ny, c->s, T);                      /* backward of × s */
    if (ea->g[LYCO_LORA_UP]) {
        eg_conv_wgrad(&gup, h, gu, gUs, T);
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = k.lo; i < k.hi; i++) ea->g[LYCO_LORA_UP][o * k.r + i] = gUs[o * k.rho + i];
    }
    eg_conv_dgrad(&gup, gu, Us, gh, T);
    if (ea->g[LYCO_LORA_DOWN]) {
        eg_conv_wgrad(&gd, x, gh, gDs, T);
        memcpy(&ea->g[LYCO_LORA_DOWN][k.lo * IK], &gDs[k.lo * IK], sizeof(float) * (size_t)((k.hi - k.lo) * IK));
    }
    if (dx) eg_conv_dgrad(&gd, gh, ea->t[LYCO_LORA_DOWN], dx, T);
}

const eg_algo eg_dylora = {.delta = delta, .delta_bwd = delta_bwd, .bypass_fwd = bypass_fwd, .bypass_bwd = bypass_bwd};
