/*
 * lokr.c — eager twin of LoKr (ALGORITHMS.md §2.3), following lycoris-lora 4.1.3's op order
 * (module on its torch path; golden README for the bypass orders):
 *
 * factors: W1 = w1, or rnd(w1_a·w1_b)
 *          W2 = w2, or rnd(w2_a·w2_b) (b × d·K), or Tucker by the einsum's left-to-right order
 *          "t, w2_a, w2_b": T' = rnd(Σ_i t2[i,j,κ]·w2_a[i,p]), W2 = rnd(Σ_j T'[j,p,κ]·w2_b[j,q])
 *          (r = 1: torch evaluates those size-1 contractions as broadcast multiplies, so their
 *          backward sums T-rounded products)
 * merge:   K0 = rnd(W1 ⊗ W2) (one multiply per element) → rnd(K0 · f32(s)) (skipped when s == 1)
 *          → rnd(· ⊙ q_rows) → (cast) → rnd(· × σs)
 *          compat (upstream get_merged_weight): → rnd(· ⊙ q_rows) → rnd(· × f32(s)), no σs
 *          eager.c then: W'' = rnd(W + rnd(ΔW·m)), E = rnd(W'' − W)
 * bypass (no ΔW): x regrouped as (tokens·c) × d (× spatial), input group p = channels p·d…p·d+d−1
 *          linear: Z = rnd(Xg·W2ᵀ)  (decomposed: rnd(rnd(Xg·w2_bᵀ)·w2_aᵀ))
 *          conv:   Z = rnd(conv(Xg, W2; σ, π, δ))
 *                  plain decomposed: rnd(conv1x1(rnd(conv(Xg, w2_b as r×d×k; σ, π, δ)), w2_a))
 *                  Tucker: rnd(conv1x1(rnd(conv(rnd(conv1x1(Xg, w2_b)), t2; σ, π, δ)), w2_aᵀ))
 *          Y[n, i·b+j] = rnd(Σ_p W1[i,p]·Z[n·c+p, j])
 *          linear: rnd(rnd(Y · f32(s·m)) · σs)            (functional kron_bypass, then × σs)
 *          conv:   rnd(rnd(rnd(Y · f32(s)) · f32(m)) · σs)  (module, left to right)
 * backward: autograd's chain of the same ops, each gradient rounded to T. The Kronecker product
 *          is torch's broadcast multiply, so its gradients are rnd(Σ rnd(G ⊙ other)) (fp32 sum of
 *          T-rounded products); matmuls/convs accumulate in fp32 and round once; σs's gradient is
 *          the same broadcast-multiply backward, rnd(Σ rnd(G ⊙ value before σs)).
 */
#include <string.h>

#include "eager.h"

/* σs's gradient, as autograd computes a tensor × 0-dim tensor's backward: the products rounded to
   T (grad ⊙ other, materialised), then one fp32 sum, rounded once. */
static float sigma_grad(const float *g, const float *v, int64_t n, lyco_dtype T) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += eg_rnd(g[i] * v[i], T);
    return eg_rnd(s, T);
}

typedef struct {
    const float *W1, *W2; /* a × c, b × d·K */
    float *Tp;            /* Tucker: T' (r × b × K), else NULL */
} factors;

/* T'[j, p, κ] = rnd(Σ_i t2[i,j,κ] · w2_a[i,p])   (r × b × K) */
static void tucker_core_a(const eg_adapter *ea, float *Tp) {
    const lyco_dims *d = &ea->c->dims;
    const float *T = ea->t[LYCO_LOKR_T2], *A = ea->t[LYCO_LOKR_W2_A];
    int64_t r = d->r, b = d->lk_b, K = d->K;
    for (int64_t j = 0; j < r; j++)
        for (int64_t p = 0; p < b; p++)
            for (int64_t k = 0; k < K; k++) {
                float s = 0;
                for (int64_t i = 0; i < r; i++) s += T[(i * r + j) * K + k] * A[i * b + p];
                Tp[(j * b + p) * K + k] = eg_rnd(s, ea->T);
            }
}

static bool get_factors(const eg_adapter *ea, factors *f) {
    const lyco_dims *d = &ea->c->dims;
    int64_t a = d->lk_a, b = d->lk_b, c = d->lk_c, D = d->lk_d, K = d->K, dK = D * K, r = d->r;
    lyco_dtype T = ea->T;
    f->Tp = NULL;
    if (d->lk_w1_full) {
        f->W1 = ea->t[LYCO_LOKR_W1];
    } else {
        float *W1 = eg_alloc(ea, a * c);
        if (!W1) return false;
        eg_gemm(false, false, a, c, r, ea->t[LYCO_LOKR_W1_A], ea->t[LYCO_LOKR_W1_B], W1, T);
        f->W1 = W1;
    }
    if (d->lk_w2_full) {
        f->W2 = ea->t[LYCO_LOKR_W2];
        return true;
    }
    float *W2 = eg_alloc(ea, b * dK);
    if (!W2) return false;
    f->W2 = W2;
    if (!d->tucker) {
        eg_gemm(false, false, b, dK, r, ea->t[LYCO_LOKR_W2_A], ea->t[LYCO_LOKR_W2_B], W2, T);
        return true;
    }
    f->Tp = eg_alloc(ea, r * b * K);
    if (!f->Tp) return false;
    tucker_core_a(ea, f->Tp);
    const float *B = ea->t[LYCO_LOKR_W2_B];
    for (int64_t p = 0; p < b; p++)
        for (int64_t q = 0; q < D; q++)
            for (int64_t k = 0; k < K; k++) {
                float s = 0;
                for (int64_t j = 0; j < r; j++) s += f->Tp[(j * b + p) * K + k] * B[j * D + q];
                W2[(p * D + q) * K + k] = eg_rnd(s, T);
            }
    return true;
}

static void apply_row_mask(const eg_adapter *ea, float *m) {
    const float *q = ea->t[LYCO_RANK_MASK];
    if (!q) return;
    for (int64_t o = 0; o < ea->O; o++)
        for (int64_t j = 0; j < ea->IK; j++) m[o * ea->IK + j] = eg_rnd(m[o * ea->IK + j] * q[o], ea->T);
}

/* rnd(W1 ⊗ W2), then × s (skipped at s == 1) and the row mask: ΔW̄ before σs / the compat × s */
static bool masked_delta(const eg_adapter *ea, factors *f, float *dW) {
    const lyco_dims *d = &ea->c->dims;
    int64_t a = d->lk_a, b = d->lk_b, c = d->lk_c, dK = d->lk_d * d->K, IK = ea->IK;
    if (!get_factors(ea, f)) return false;
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++)
            for (int64_t p = 0; p < c; p++) {
                float w1 = f->W1[i * c + p];
                float *row = &dW[(i * b + j) * IK + p * dK];
                for (int64_t n = 0; n < dK; n++) row[n] = eg_rnd(w1 * f->W2[j * dK + n], ea->T);
            }
    if (ea->c->s != 1.0) eg_scale(dW, ea->O * IK, ea->c->s, ea->T);
    apply_row_mask(ea, dW);
    return true;
}

static void delta(const eg_adapter *ea, const float *W, float *dW) {
    (void)W;
    int64_t N = ea->O * ea->IK;
    factors f;
    if (!masked_delta(ea, &f, dW)) return;
    if (ea->compat) eg_scale(dW, N, ea->c->s, ea->T);
    else if (ea->has_sigma) eg_scale(dW, N, ea->sigma, ea->T);
}

/* G_w1a/G_w1b (or G_w1) from G_W1 (a × c) */
static void w1_bwd(eg_adapter *ea, const float *GW1) {
    const lyco_dims *d = &ea->c->dims;
    int64_t a = d->lk_a, c = d->lk_c, r = d->r;
    if (d->lk_w1_full) {
        if (ea->g[LYCO_LOKR_W1]) memcpy(ea->g[LYCO_LOKR_W1], GW1, sizeof(float) * (size_t)(a * c));
        return;
    }
    if (ea->g[LYCO_LOKR_W1_A]) eg_gemm(false, true, a, r, c, GW1, ea->t[LYCO_LOKR_W1_B], ea->g[LYCO_LOKR_W1_A], ea->T);
    if (ea->g[LYCO_LOKR_W1_B]) eg_gemm(true, false, r, c, a, ea->t[LYCO_LOKR_W1_A], GW1, ea->g[LYCO_LOKR_W1_B], ea->T);
}

/* a product inside a fp32 sum, rounded to T first when the op is a broadcast multiply */
static inline float prod(float a, float b, bool rounded, lyco_dtype T) { return rounded ? eg_rnd(a * b, T) : a * b; }

/* factor gradients of W2 from G_W2 (b × d·K), merge path (autograd of the matmul / einsum) */
static void w2_bwd(eg_adapter *ea, const factors *f, const float *GW2) {
    const lyco_dims *d = &ea->c->dims;
    int64_t b = d->lk_b, D = d->lk_d, K = d->K, dK = D * K, r = d->r;
    lyco_dtype T = ea->T;
    if (d->lk_w2_full) {
        if (ea->g[LYCO_LOKR_W2]) memcpy(ea->g[LYCO_LOKR_W2], GW2, sizeof(float) * (size_t)(b * dK));
        return;
    }
    if (!d->tucker) {
        if (ea->g[LYCO_LOKR_W2_A]) eg_gemm(false, true, b, r, dK, GW2, ea->t[LYCO_LOKR_W2_B], ea->g[LYCO_LOKR_W2_A], T);
        if (ea->g[LYCO_LOKR_W2_B]) eg_gemm(true, false, r, dK, b, ea->t[LYCO_LOKR_W2_A], GW2, ea->g[LYCO_LOKR_W2_B], T);
        return;
    }
    /* W2[p,q,κ] = Σ_j T'[j,p,κ] B[j,q];  T'[j,p,κ] = Σ_i t2[i,j,κ] A[i,p] */
    const float *A = ea->t[LYCO_LOKR_W2_A], *B = ea->t[LYCO_LOKR_W2_B], *Tc = ea->t[LYCO_LOKR_T2];
    float *GB = ea->g[LYCO_LOKR_W2_B], *GA = ea->g[LYCO_LOKR_W2_A], *GT = ea->g[LYCO_LOKR_T2];
    /* r = 1: every contraction of the einsum is over a size-1 index, which torch evaluates as a
       broadcast multiply; its backward then sums T-rounded products (checked against torch) */
    bool rp = r == 1;
    if (GB)
        for (int64_t j = 0; j < r; j++)
            for (int64_t q = 0; q < D; q++) {
                float s = 0;
                for (int64_t p = 0; p < b; p++)
                    for (int64_t k = 0; k < K; k++) s += prod(f->Tp[(j * b + p) * K + k], GW2[(p * D + q) * K + k], rp, T);
                GB[j * D + q] = eg_rnd(s, T);
            }
    if (!GA && !GT) return;
    float *GTp = eg_alloc(ea, r * b * K);
    if (!GTp) return;
    for (int64_t j = 0; j < r; j++)
        for (int64_t p = 0; p < b; p++)
            for (int64_t k = 0; k < K; k++) {
                float s = 0;
                for (int64_t q = 0; q < D; q++) s += prod(GW2[(p * D + q) * K + k], B[j * D + q], rp, T);
                GTp[(j * b + p) * K + k] = eg_rnd(s, T);
            }
    if (GT)
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < r; j++)
                for (int64_t k = 0; k < K; k++) {
                    float s = 0;
                    for (int64_t p = 0; p < b; p++) s += prod(GTp[(j * b + p) * K + k], A[i * b + p], rp, T);
                    GT[(i * r + j) * K + k] = eg_rnd(s, T);
                }
    if (GA)
        for (int64_t i = 0; i < r; i++)
            for (int64_t p = 0; p < b; p++) {
                float s = 0;
                for (int64_t j = 0; j < r; j++)
                    for (int64_t k = 0; k < K; k++) s += prod(Tc[(i * r + j) * K + k], GTp[(j * b + p) * K + k], rp, T);
                GA[i * b + p] = eg_rnd(s, T);
            }
}

static void delta_bwd(eg_adapter *ea, const float *W, const float *G) {
    (void)W;
    const lyco_dims *d = &ea->c->dims;
    int64_t a = d->lk_a, b = d->lk_b, c = d->lk_c, dK = d->lk_d * d->K, IK = ea->IK, N = ea->O * IK;
    lyco_dtype T = ea->T;
    float *g = eg_alloc(ea, N), *pre = eg_alloc(ea, N);
    if (!g || !pre) return;
    factors f;
    if (!masked_delta(ea, &f, pre)) return;
    memcpy(g, G, sizeof(float) * (size_t)N);
    if (ea->compat) {
        eg_scale(g, N, ea->c->s, T);        /* backward of the second × s; no σs */
    } else if (ea->has_sigma) {
        if (ea->g[LYCO_SCALAR]) ea->g[LYCO_SCALAR][0] = sigma_grad(g, pre, N, T);
        eg_scale(g, N, ea->sigma, T);
    }
    apply_row_mask(ea, g);
    if (ea->c->s != 1.0) eg_scale(g, N, ea->c->s, T);
    /* kron backward: broadcast-multiply gradients, summed in fp32 over T-rounded products */
    float *GW1 = eg_alloc(ea, a * c), *GW2 = eg_alloc(ea, b * dK);
    if (!GW1 || !GW2) return;
    for (int64_t i = 0; i < a; i++)
        for (int64_t p = 0; p < c; p++) {
            float s = 0;
            for (int64_t j = 0; j < b; j++)
                for (int64_t n = 0; n < dK; n++) s += eg_rnd(g[(i * b + j) * IK + p * dK + n] * f.W2[j * dK + n], T);
            GW1[i * c + p] = eg_rnd(s, T);
        }
    for (int64_t j = 0; j < b; j++)
        for (int64_t n = 0; n < dK; n++) {
            float s = 0;
            for (int64_t i = 0; i < a; i++)
                for (int64_t p = 0; p < c; p++) s += eg_rnd(g[(i * b + j) * IK + p * dK + n] * f.W1[i * c + p], T);
            GW2[j * dK + n] = eg_rnd(s, T);
        }
    w1_bwd(ea, GW1);
    w2_bwd(ea, &f, GW2);
}

/* ---- bypass ---- */

/* geometry on the regrouped input: N·c samples of d channels */
static void geom_layer(const eg_adapter *ea, int64_t I, int64_t O, eg_geom *g) {
    eg_geom_from_call(ea->c, g);
    g->N = ea->c->tokens * ea->c->dims.lk_c;
    g->I = I;
    g->O = O;
    g->groups = 1;
}

/* 1×1, stride 1, no padding, on x's grid (in_grid) or on y's grid */
static void geom_1x1(const eg_adapter *ea, int64_t I, int64_t O, bool in_grid, eg_geom *g) {
    geom_layer(ea, I, O, g);
    for (int i = 0; i < 3; i++) {
        if (in_grid) g->out[i] = g->in[i];
        else g->in[i] = g->out[i];
        g->k[i] = g->stride[i] = g->dil[i] = 1;
        g->pad[i] = 0;
    }
}

typedef struct {
    factors f;
    float *w2aT;   /* Tucker: w2_aᵀ (b × r) */
    float *Ha, *Ht;/* rank activations (decomposed W2): Ha after w2_b, Ht after t2 (Tucker) */
    float *Z;      /* (N·c) × b × sp_out */
} bp_state;

static bool is_conv(const eg_adapter *ea) { return ea->c->a->layer.kind == LYCO_LAYER_CONV; }

/* Z (and the intermediates) from x */
static bool bp_inner(const eg_adapter *ea, const float *x, bp_state *st) {
    const lyco_call *c = ea->c;
    const lyco_dims *d = &c->dims;
    int64_t Nc = c->tokens * d->lk_c, b = d->lk_b, r = d->r, D = d->lk_d;
    lyco_dtype T = ea->T;
    memset(st, 0, sizeof *st);
    if (!get_factors(ea, &st->f)) return false;
    st->Z = eg_alloc(ea, Nc * b * c->sp_out_n);
    if (!st->Z) return false;
    eg_geom g;
    if (d->lk_w2_full) {
        geom_layer(ea, D, b, &g);
        eg_conv_fwd(&g, x, ea->t[LYCO_LOKR_W2], st->Z, T);
        return true;
    }
    if (!d->tucker) {
        st->Ha = eg_alloc(ea, Nc * r * c->sp_out_n);
        if (!st->Ha) return false;
        geom_layer(ea, D, r, &g);
        eg_conv_fwd(&g, x, ea->t[LYCO_LOKR_W2_B], st->Ha, T);
        geom_1x1(ea, r, b, false, &g);
        eg_conv_fwd(&g, st->Ha, ea->t[LYCO_LOKR_W2_A], st->Z, T);
        return true;
    }
    st->Ha = eg_alloc(ea, Nc * r * c->sp_in_n);
    st->Ht = eg_alloc(ea, Nc * r * c->sp_out_n);
    st->w2aT = eg_alloc(ea, b * r);
    if (!st->Ha || !st->Ht || !st->w2aT) return false;
    const float *A = ea->t[LYCO_LOKR_W2_A];
    for (int64_t l = 0; l < r; l++)
        for (int64_t j = 0; j < b; j++) st->w2aT[j * r + l] = A[l * b + j];
    geom_1x1(ea, D, r, true, &g);
    eg_conv_fwd(&g, x, ea->t[LYCO_LOKR_W2_B], st->Ha, T);
    geom_layer(ea, r, r, &g);
    eg_conv_fwd(&g, st->Ha, ea->t[LYCO_LOKR_T2], st->Ht, T);
    geom_1x1(ea, r, b, false, &g);
    eg_conv_fwd(&g, st->Ht, st->w2aT, st->Z, T);
    return true;
}

/* Y[n, i·b+j, s] = rnd(Σ_p W1[i,p] · Z[n·c+p, j, s]), then the scale chain up to σs */
static void bp_mix(const eg_adapter *ea, const bp_state *st, float *Y) {
    const lyco_call *c = ea->c;
    const lyco_dims *d = &c->dims;
    int64_t a = d->lk_a, cc = d->lk_c, bs = d->lk_b * c->sp_out_n, ny = c->tokens * d->O * c->sp_out_n;
    for (int64_t n = 0; n < c->tokens; n++) eg_gemm(false, false, a, bs, cc, st->f.W1, st->Z + n * cc * bs, Y + n * a * bs, ea->T);
    if (is_conv(ea)) {
        eg_scale(Y, ny, c->s, ea->T);
        eg_scale(Y, ny, c->m, ea->T);
    } else {
        eg_scale(Y, ny, c->s * c->m, ea->T);
    }
}

static void bypass_fwd(const eg_adapter *ea, const float *x, const float *W, float *delta_out) {
    (void)W;
    bp_state st;
    if (!bp_inner(ea, x, &st)) return;
    bp_mix(ea, &st, delta_out);
    if (ea->has_sigma) eg_scale(delta_out, ea->c->tokens * ea->O * ea->c->sp_out_n, ea->sigma, ea->T);
}

static void bypass_bwd(eg_adapter *ea, const float *x, const float *W, const float *dy, float *dx) {
    (void)W;
    const lyco_call *c = ea->c;
    const lyco_dims *d = &c->dims;
    lyco_dtype T = ea->T;
    int64_t a = d->lk_a, cc = d->lk_c, b = d->lk_b, r = d->r, D = d->lk_d, Nc = c->tokens * cc;
    int64_t bs = b * c->sp_out_n, ny = c->tokens * d->O * c->sp_out_n;
    bp_state st;
    if (!bp_inner(ea, x, &st)) return;
    float *g = eg_alloc(ea, ny), *GZ = eg_alloc(ea, Nc * bs), *GW1 = eg_alloc(ea, a * cc);
    if (!g || !GZ || !GW1) return;
    memcpy(g, dy, sizeof(float) * (size_t)ny);
    if (ea->has_sigma) {
        if (ea->g[LYCO_SCALAR]) {
            float *Y = eg_alloc(ea, ny);
            if (!Y) return;
            bp_mix(ea, &st, Y);
            ea->g[LYCO_SCALAR][0] = sigma_grad(g, Y, ny, T);
        }
        eg_scale(g, ny, ea->sigma, T);
    }
    if (is_conv(ea)) {
        eg_scale(g, ny, c->m, T);
        eg_scale(g, ny, c->s, T);
    } else {
        eg_scale(g, ny, c->s * c->m, T);
    }
    /* the W1 mix: G_W1 = Σ_n g_n · Z_nᵀ (one fp32 sum), G_Z_n = W1ᵀ · g_n */
    for (int64_t i = 0; i < a; i++)
        for (int64_t p = 0; p < cc; p++) {
            float s = 0;
            for (int64_t n = 0; n < c->tokens; n++) {
                const float *gi = g + (n * a + i) * bs, *zp = st.Z + (n * cc + p) * bs;
                for (int64_t m = 0; m < bs; m++) s += gi[m] * zp[m];
            }
            GW1[i * cc + p] = eg_rnd(s, T);
        }
    for (int64_t n = 0; n < c->tokens; n++) eg_gemm(true, false, cc, bs, a, st.f.W1, g + n * a * bs, GZ + n * cc * bs, T);
    w1_bwd(ea, GW1);
    eg_geom geo;
    if (d->lk_w2_full) {
        geom_layer(ea, D, b, &geo);
        if (ea->g[LYCO_LOKR_W2]) eg_conv_wgrad(&geo, x, GZ, ea->g[LYCO_LOKR_W2], T);
        if (dx) eg_conv_dgrad(&geo, GZ, ea->t[LYCO_LOKR_W2], dx, T);
        return;
    }
    if (!d->tucker) {
        float *GHa = eg_alloc(ea, Nc * r * c->sp_out_n);
        if (!GHa) return;
        geom_1x1(ea, r, b, false, &geo);
        if (ea->g[LYCO_LOKR_W2_A]) eg_conv_wgrad(&geo, st.Ha, GZ, ea->g[LYCO_LOKR_W2_A], T);
        eg_conv_dgrad(&geo, GZ, ea->t[LYCO_LOKR_W2_A], GHa, T);
        geom_layer(ea, D, r, &geo);
        if (ea->g[LYCO_LOKR_W2_B]) eg_conv_wgrad(&geo, x, GHa, ea->g[LYCO_LOKR_W2_B], T);
        if (dx) eg_conv_dgrad(&geo, GHa, ea->t[LYCO_LOKR_W2_B], dx, T);
        return;
    }
    float *GHt = eg_alloc(ea, Nc * r * c->sp_out_n), *GHa = eg_alloc(ea, Nc * r * c->sp_in_n);
    if (!GHt || !GHa) return;
    geom_1x1(ea, r, b, false, &geo);
    if (ea->g[LYCO_LOKR_W2_A]) {
        float *GaT = eg_alloc(ea, b * r);
        if (!GaT) return;
        eg_conv_wgrad(&geo, st.Ht, GZ, GaT, T);
        for (int64_t l = 0; l < r; l++)
            for (int64_t j = 0; j < b; j++) ea->g[LYCO_LOKR_W2_A][l * b + j] = GaT[j * r + l];
    }
    eg_conv_dgrad(&geo, GZ, st.w2aT, GHt, T);
    geom_layer(ea, r, r, &geo);
    if (ea->g[LYCO_LOKR_T2]) eg_conv_wgrad(&geo, st.Ha, GHt, ea->g[LYCO_LOKR_T2], T);
    eg_conv_dgrad(&geo, GHt, ea->t[LYCO_LOKR_T2], GHa, T);
    geom_1x1(ea, D, r, true, &geo);
    if (ea->g[LYCO_LOKR_W2_B]) eg_conv_wgrad(&geo, x, GHa, ea->g[LYCO_LOKR_W2_B], T);
    if (dx) eg_conv_dgrad(&geo, GHa, ea->t[LYCO_LOKR_W2_B], dx, T);
}

const eg_algo eg_lokr = {.delta = delta, .delta_bwd = delta_bwd, .bypass_fwd = bypass_fwd, .bypass_bwd = bypass_bwd};
