/*
 * locon.c — eager twin of LoRA / LoCon (ALGORITHMS.md §2.1), following upstream's op order:
 *
 * merge:  ΔW_P = rnd(U·D)  (Tucker: rnd(rnd(M ×_i Uᵀ) ×_j D), contracting with U first)
 *         → rnd(· ⊙ q_rows) → rnd(· × σs) → (cast) → rnd(· × s);   W'' = rnd(W + rnd(ΔW·m))
 * bypass: h = rnd(conv(x, D; σ, π, δ))  (Tucker: rnd(conv(rnd(conv1x1(x, D)), M; σ, π, δ)))
 *         → rnd(h ⊙ q_rank) → u = rnd(conv1x1(h, U)) → rnd(rnd(u · f32(s·m)) · σs)
 *         (the order lycoris-lora 4.1.3 uses, confirmed bit-exactly on its bf16 golden vectors;
 *         ALGORITHMS.md §2.1 describes the 3.2 order ((u·σs)·s)·m)
 * Linear layers are the same ops with no spatial dims. Backward is autograd's chain of the same
 * ops, each gradient rounded to T.
 */
#include <string.h>

#include "eager.h"

/* geometry of the down conv (x → h: I → r, the layer's kernel) or a 1×1 conv on y's grid */
static void geom_down(const eg_adapter *ea, bool tucker_first, eg_geom *g) {
    const lyco_call *c = ea->c;
    eg_geom_from_call(c, g);
    g->O = c->dims.r;
    g->groups = 1;
    if (tucker_first) { /* 1×1, stride 1, on x's grid */
        for (int i = 0; i < 3; i++) {
            g->out[i] = g->in[i];
            g->k[i] = g->stride[i] = g->dil[i] = 1;
            g->pad[i] = 0;
        }
    }
}

static void geom_mid(const eg_adapter *ea, eg_geom *g) { /* r → r with the layer's kernel */
    geom_down(ea, false, g);
    g->I = ea->c->dims.r;
}

static void geom_up(const eg_adapter *ea, eg_geom *g) { /* r → O, 1×1 on y's grid */
    const lyco_call *c = ea->c;
    eg_geom_from_call(c, g);
    g->I = c->dims.r;
    g->groups = 1;
    for (int i = 0; i < 3; i++) {
        g->in[i] = g->out[i];
        g->k[i] = g->stride[i] = g->dil[i] = 1;
        g->pad[i] = 0;
    }
}

/* U as ΔW's product sees it. In bypass the rank mask scales U's columns (q_i, ALGORITHMS.md §2.1:
   it masks h before the up projection), rounded to T as rnd(h ⊙ q) is; in merge U itself (the
   mask then scales ΔW's rows, apply_row_mask). Only DoRA in bypass builds ΔW there. */
static const float *up_factor(const eg_adapter *ea) {
    const float *U = ea->t[LYCO_LORA_UP], *q = ea->t[LYCO_RANK_MASK];
    if (!ea->bypass || !q) return U;
    int64_t O = ea->O, r = ea->c->dims.r;
    float *Um = eg_alloc(ea, O * r);
    if (!Um) return NULL;
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < r; i++) Um[o * r + i] = eg_rnd(U[o * r + i] * q[i], ea->T);
    return Um;
}

/* P1[o, j, κ] = rnd(Σ_i U[o,i] M[i,j,κ])  (O × r × K) */
static void tucker_up_mid(const eg_adapter *ea, float *P1) {
    const lyco_dims *d = &ea->c->dims;
    const float *U = up_factor(ea), *M = ea->t[LYCO_LORA_MID];
    if (!U) return;
    for (int64_t o = 0; o < d->O; o++)
        for (int64_t j = 0; j < d->r; j++)
            for (int64_t k = 0; k < d->K; k++) {
                float s = 0;
                for (int64_t i = 0; i < d->r; i++) s += U[o * d->r + i] * M[(i * d->r + j) * d->K + k];
                P1[(o * d->r + j) * d->K + k] = eg_rnd(s, ea->T);
            }
}

/* ΔW before the mask/σs/s: the plain or Tucker product */
static void product(const eg_adapter *ea, float *dW) {
    const lyco_dims *d = &ea->c->dims;
    lyco_dtype T = ea->T;
    if (!d->tucker) {
        const float *U = up_factor(ea);
        if (U) eg_gemm(false, false, d->O, ea->IK, d->r, U, ea->t[LYCO_LORA_DOWN], dW, T);
        return;
    }
    float *P1 = eg_alloc(ea, d->O * d->r * d->K);
    if (!P1) return;
    tucker_up_mid(ea, P1);
    const float *D = ea->t[LYCO_LORA_DOWN];
    for (int64_t o = 0; o < d->O; o++)
        for (int64_t c = 0; c < d->I; c++)
            for (int64_t k = 0; k < d->K; k++) {
                float s = 0;
                for (int64_t j = 0; j < d->r; j++) s += P1[(o * d->r + j) * d->K + k] * D[j * d->I + c];
                dW[(o * d->I + c) * d->K + k] = eg_rnd(s, T);
            }
}

static void apply_row_mask(const eg_adapter *ea, float *m) {
    if (!ea->t[LYCO_RANK_MASK] || ea->bypass) return; /* bypass: the mask is on U's columns (up_factor) */
    for (int64_t o = 0; o < ea->O; o++)
        for (int64_t j = 0; j < ea->IK; j++) m[o * ea->IK + j] = eg_rnd(m[o * ea->IK + j] * ea->t[LYCO_RANK_MASK][o], ea->T);
}

static void delta(const eg_adapter *ea, const float *W, float *dW) {
    (void)W;
    int64_t N = ea->O * ea->IK;
    product(ea, dW);
    apply_row_mask(ea, dW);
    if (ea->has_sigma) eg_scale(dW, N, ea->sigma, ea->T);
    eg_scale(dW, N, ea->c->s, ea->T);
}

/* backward of up_factor's U ⊙ q (bypass with a rank mask): G_U ← rnd(G_U ⊙ q) */
static void up_mask_bwd(eg_adapter *ea) {
    const float *q = ea->t[LYCO_RANK_MASK];
    float *gU = ea->g[LYCO_LORA_UP];
    if (!ea->bypass || !q || !gU) return;
    int64_t r = ea->c->dims.r;
    for (int64_t o = 0; o < ea->O; o++)
        for (int64_t i = 0; i < r; i++) gU[o * r + i] = eg_rnd(gU[o * r + i] * q[i], ea->T);
}

static void delta_bwd(eg_adapter *ea, const float *W, const float *G) {
    (void)W;
    const lyco_dims *d = &ea->c->dims;
    lyco_dtype T = ea->T;
    int64_t N = ea->O * ea->IK, IK = ea->IK, r = d->r;
    float *g = eg_alloc(ea, N), *pre = eg_alloc(ea, N);
    if (!g || !pre) return;
    memcpy(g, G, sizeof(float) * (size_t)N);
    eg_scale(g, N, ea->c->s, T);                    /* backward of × s */
    if (ea->has_sigma) {
        product(ea, pre);
        apply_row_mask(ea, pre);
        if (ea->g[LYCO_SCALAR]) ea->g[LYCO_SCALAR][0] = eg_dot(g, pre, N, T);
        eg_scale(g, N, ea->sigma, T);               /* backward of × σs */
    }
    apply_row_mask(ea, g);
    const float *D = ea->t[LYCO_LORA_DOWN], *U = up_factor(ea);
    if (!U) return;
    if (!d->tucker) {
        if (ea->g[LYCO_LORA_UP]) eg_gemm(false, true, d->O, r, IK, g, D, ea->g[LYCO_LORA_UP], T);
        if (ea->g[LYCO_LORA_DOWN]) eg_gemm(true, false, r, IK, d->O, U, g, ea->g[LYCO_LORA_DOWN], T);
        up_mask_bwd(ea);
        return;
    }
    /* ΔW[o,c,κ] = Σ_j P1[o,j,κ] D[j,c],  P1[o,j,κ] = Σ_i U[o,i] M[i,j,κ] */
    float *P1 = eg_alloc(ea, d->O * r * d->K), *GP1 = eg_alloc(ea, d->O * r * d->K);
    if (!P1 || !GP1) return;
    tucker_up_mid(ea, P1);
    for (int64_t o = 0; o < d->O; o++)
        for (int64_t j = 0; j < r; j++)
            for (int64_t k = 0; k < d->K; k++) {
                float s = 0;
                for (int64_t c = 0; c < d->I; c++) s += g[(o * d->I + c) * d->K + k] * D[j * d->I + c];
                GP1[(o * r + j) * d->K + k] = eg_rnd(s, T);
            }
    if (ea->g[LYCO_LORA_DOWN])
        for (int64_t j = 0; j < r; j++)
            for (int64_t c = 0; c < d->I; c++) {
                float s = 0;
                for (int64_t o = 0; o < d->O; o++)
                    for (int64_t k = 0; k < d->K; k++) s += P1[(o * r + j) * d->K + k] * g[(o * d->I + c) * d->K + k];
                ea->g[LYCO_LORA_DOWN][j * d->I + c] = eg_rnd(s, T);
            }
    const float *M = ea->t[LYCO_LORA_MID];
    if (ea->g[LYCO_LORA_MID])
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < r; j++)
                for (int64_t k = 0; k < d->K; k++) {
                    float s = 0;
                    for (int64_t o = 0; o < d->O; o++) s += U[o * r + i] * GP1[(o * r + j) * d->K + k];
                    ea->g[LYCO_LORA_MID][(i * r + j) * d->K + k] = eg_rnd(s, T);
                }
    if (ea->g[LYCO_LORA_UP])
        for (int64_t o = 0; o < d->O; o++)
            for (int64_t i = 0; i < r; i++) {
                float s = 0;
                for (int64_t j = 0; j < r; j++)
                    for (int64_t k = 0; k < d->K; k++) s += GP1[(o * r + j) * d->K + k] * M[(i * r + j) * d->K + k];
                ea->g[LYCO_LORA_UP][o * r + i] = eg_rnd(s, T);
            }
    up_mask_bwd(ea);
}

/* h (N × r × sp_out) from x, and h0 (Tucker's first 1×1 output, N × r × sp_in) */
static void rank_activations(const eg_adapter *ea, const float *x, float *h0, float *h) {
    eg_geom g;
    lyco_dtype T = ea->T;
    if (ea->c->dims.tucker) {
        geom_down(ea, true, &g);
        eg_conv_fwd(&g, x, ea->t[LYCO_LORA_DOWN], h0, T);
        geom_mid(ea, &g);
        eg_conv_fwd(&g, h0, ea->t[LYCO_LORA_MID], h, T);
    } else {
        geom_down(ea, false, &g);
        eg_conv_fwd(&g, x, ea->t[LYCO_LORA_DOWN], h, T);
    }
}

/* h ⊙ q along the rank (channel) axis */
static void rank_mask(const eg_adapter *ea, float *h) {
    const float *q = ea->t[LYCO_RANK_MASK];
    if (!q) return;
    int64_t r = ea->c->dims.r, sp = ea->c->sp_out_n;
    for (int64_t n = 0; n < ea->c->tokens; n++)
        for (int64_t i = 0; i < r; i++)
            for (int64_t p = 0; p < sp; p++) {
                float *v = &h[(n * r + i) * sp + p];
                *v = eg_rnd(*v * q[i], ea->T);
            }
}

static void bypass_fwd(const eg_adapter *ea, const float *x, const float *W, float *delta_out) {
    (void)W;
    const lyco_call *c = ea->c;
    int64_t nh = c->tokens * c->dims.r * c->sp_out_n, nh0 = c->tokens * c->dims.r * c->sp_in_n;
    int64_t ny = c->tokens * c->dims.O * c->sp_out_n;
    float *h0 = eg_alloc(ea, nh0), *h = eg_alloc(ea, nh);
    if (!h0 || !h) return;
    rank_activations(ea, x, h0, h);
    rank_mask(ea, h);
    eg_geom g;
    geom_up(ea, &g);
    eg_conv_fwd(&g, h, ea->t[LYCO_LORA_UP], delta_out, ea->T);
    eg_scale(delta_out, ny, c->s * c->m, ea->T);
    if (ea->has_sigma) eg_scale(delta_out, ny, ea->sigma, ea->T);
}

static void bypass_bwd(eg_adapter *ea, const float *x, const float *W, const float *dy, float *dx) {
    (void)W;
    const lyco_call *c = ea->c;
    lyco_dtype T = ea->T;
    int64_t nh = c->tokens * c->dims.r * c->sp_out_n, nh0 = c->tokens * c->dims.r * c->sp_in_n;
    int64_t ny = c->tokens * c->dims.O * c->sp_out_n;
    float *h0 = eg_alloc(ea, nh0), *h = eg_alloc(ea, nh), *gu = eg_alloc(ea, ny), *gh = eg_alloc(ea, nh), *gh0 = eg_alloc(ea, nh0);
    if (!h0 || !h || !gu || !gh || !gh0) return;
    rank_activations(ea, x, h0, h);
    rank_mask(ea, h);
    eg_geom gup, gdown, gmid;
    geom_up(ea, &gup);
    memcpy(gu, dy, sizeof(float) * (size_t)ny);
    if (ea->has_sigma) {
        if (ea->g[LYCO_SCALAR]) {
            float *u = eg_alloc(ea, ny);
            if (!u) return;
            eg_conv_fwd(&gup, h, ea->t[LYCO_LORA_UP], u, T);
            eg_scale(u, ny, c->s * c->m, T);
            ea->g[LYCO_SCALAR][0] = eg_dot(gu, u, ny, T);
        }
        eg_scale(gu, ny, ea->sigma, T);
    }
    eg_scale(gu, ny, c->s * c->m, T);
    if (ea->g[LYCO_LORA_UP]) eg_conv_wgrad(&gup, h, gu, ea->g[LYCO_LORA_UP], T);
    eg_conv_dgrad(&gup, gu, ea->t[LYCO_LORA_UP], gh, T);
    rank_mask(ea, gh);
    if (c->dims.tucker) {
        geom_mid(ea, &gmid);
        if (ea->g[LYCO_LORA_MID]) eg_conv_wgrad(&gmid, h0, gh, ea->g[LYCO_LORA_MID], T);
        eg_conv_dgrad(&gmid, gh, ea->t[LYCO_LORA_MID], gh0, T);
        geom_down(ea, true, &gdown);
        if (ea->g[LYCO_LORA_DOWN]) eg_conv_wgrad(&gdown, x, gh0, ea->g[LYCO_LORA_DOWN], T);
        eg_conv_dgrad(&gdown, gh0, ea->t[LYCO_LORA_DOWN], dx, T);
    } else {
        geom_down(ea, false, &gdown);
        if (ea->g[LYCO_LORA_DOWN]) eg_conv_wgrad(&gdown, x, gh, ea->g[LYCO_LORA_DOWN], T);
        eg_conv_dgrad(&gdown, gh, ea->t[LYCO_LORA_DOWN], dx, T);
    }
}

const eg_algo eg_locon = {.delta = delta, .delta_bwd = delta_bwd, .bypass_fwd = bypass_fwd, .bypass_bwd = bypass_bwd};
