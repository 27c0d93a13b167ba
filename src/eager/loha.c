/*
 * loha.c — eager twin of LoHa (ALGORITHMS.md §2.2), following lycoris-lora 4.1.3's op order
 * (the module on its torch path: HadaWeight / HadaWeightTucker custom autograd functions):
 *
 * product: γ = rnd(s) (a 0-dim tensor of the adapter dtype, here T)
 *          plain : R_t = rnd(A_t·B_t)
 *          Tucker: P_t = rnd(T_t ×_j B_t) (the einsum's first factor), R_t = rnd(A_tᵀ·P_t)
 *          ΔW_P = rnd(rnd(R_1 ⊙ R_2) · γ)
 * merge:   → rnd(· ⊙ q_rows) → (cast) → rnd(· × σs)                 (get_weight, then forward)
 *          compat (upstream get_merged_weight): → rnd(· ⊙ q_rows) → rnd(· × f32(s)), no σs
 *          eager.c then: W'' = rnd(W + rnd(ΔW·m)), E = rnd(W'' − W)
 * bypass:  linear, no Tucker, no rank mask (4.1.3's functional path, golden README):
 *              γ' = rnd(s·m) (one 0-dim tensor), ΔW' = rnd(rnd(R_1 ⊙ R_2) · γ'),
 *              Δ = rnd(rnd(x·ΔW'ᵀ) · σs)
 *          otherwise (conv, Tucker or rank mask): the materialised merge ΔW (with q and σs),
 *              E = rnd(ΔW·m), Δ = rnd(op(x, E))
 * backward: upstream's custom backward, recomputing the products: Gs = rnd(G·γ),
 *          plain : T = rnd(Gs ⊙ R_2): G_A1 = rnd(T·B1ᵀ), G_B1 = rnd(A1ᵀ·T); likewise term 2 with R_1
 *          Tucker (4.1.3, adjoint fixed): G_W = rnd(Gs ⊙ R_t̄), G_A_t = rnd(P_t·G_Wᵀ),
 *              G_P = rnd(A_t·G_W), G_B_t = rnd(Σ_{i,κ} T_t·G_P), G_T_t = rnd(Σ_c G_P·B_t)
 *          σs (LYCO_SCALAR), autograd's broadcast-multiply backward: rnd(Σ rnd(G ⊙ v)), v the
 *          tensor σs multiplies (products rounded to T, one fp32 sum, one rounding; this matches
 *          torch bit for bit, plain eg_dot does not); the mask and the Python-float multiplies
 *          chain as rnd(G·c).
 * Every intermediate is rounded to the compute dtype T; products accumulate in fp32.
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
    const float *a, *b, *t; /* A_t, B_t, T_t (T_t NULL unless Tucker) */
    lyco_slot sa, sb, st;
    int64_t r;
} term;

static term term_of(const eg_adapter *ea, int which) {
    term tm;
    tm.sa = which ? LYCO_HADA_W2_A : LYCO_HADA_W1_A;
    tm.sb = which ? LYCO_HADA_W2_B : LYCO_HADA_W1_B;
    tm.st = which ? LYCO_HADA_T2 : LYCO_HADA_T1;
    tm.a = ea->t[tm.sa];
    tm.b = ea->t[tm.sb];
    tm.t = ea->t[tm.st];
    tm.r = which ? ea->c->dims.r2 : ea->c->dims.r;
    return tm;
}

static bool is_tucker(const eg_adapter *ea) { return ea->c->dims.tucker; }

/* γ = rnd_T(s): torch.tensor(python float, dtype) converts through float. */
static float gamma_of(const eg_adapter *ea, double s) { return eg_rnd((float)s, ea->T); }

/* Tucker: P[i, c, κ] = rnd(Σ_j T[i,j,κ] · B[j,c])   (r × I·K) */
static void tucker_core_b(const eg_adapter *ea, const term *tm, float *P) {
    const lyco_dims *d = &ea->c->dims;
    int64_t r = tm->r;
    for (int64_t i = 0; i < r; i++)
        for (int64_t c = 0; c < d->I; c++)
            for (int64_t k = 0; k < d->K; k++) {
                float s = 0;
                for (int64_t j = 0; j < r; j++) s += tm->t[(i * r + j) * d->K + k] * tm->b[j * d->I + c];
                P[(i * d->I + c) * d->K + k] = eg_rnd(s, ea->T);
            }
}

/* R = rnd(A·B) (plain) or rnd(Aᵀ·P) with P = rnd(T ×_j B) (Tucker; P is r × I·K scratch). */
static void term_product(const eg_adapter *ea, const term *tm, float *R, float *P) {
    const lyco_dims *d = &ea->c->dims;
    if (!is_tucker(ea)) {
        eg_gemm(false, false, d->O, ea->IK, tm->r, tm->a, tm->b, R, ea->T);
        return;
    }
    tucker_core_b(ea, tm, P);
    eg_gemm(true, false, d->O, ea->IK, tm->r, tm->a, P, R, ea->T);
}

static int64_t max_r(const eg_adapter *ea) {
    return ea->c->dims.r > ea->c->dims.r2 ? ea->c->dims.r : ea->c->dims.r2;
}

/* dW = rnd(rnd(R_1 ⊙ R_2) · γ) */
static void hada(const eg_adapter *ea, float gam, float *dW) {
    int64_t N = ea->O * ea->IK;
    term t1 = term_of(ea, 0), t2 = term_of(ea, 1);
    float *R2 = eg_alloc(ea, N), *P = is_tucker(ea) ? eg_alloc(ea, max_r(ea) * ea->IK) : NULL;
    if (!R2 || (is_tucker(ea) && !P)) return;
    term_product(ea, &t1, dW, P);
    term_product(ea, &t2, R2, P);
    eg_mul(dW, R2, dW, N, ea->T);
    eg_scale(dW, N, gam, ea->T);
}

static void apply_row_mask(const eg_adapter *ea, float *m) {
    const float *q = ea->t[LYCO_RANK_MASK];
    if (!q) return;
    for (int64_t o = 0; o < ea->O; o++)
        for (int64_t j = 0; j < ea->IK; j++) m[o * ea->IK + j] = eg_rnd(m[o * ea->IK + j] * q[o], ea->T);
}

/* ΔW̄ after the mask, before σs (or the compat × s) */
static void masked_delta(const eg_adapter *ea, float *dW) {
    hada(ea, gamma_of(ea, ea->c->s), dW);
    apply_row_mask(ea, dW);
}

static void delta(const eg_adapter *ea, const float *W, float *dW) {
    (void)W;
    int64_t N = ea->O * ea->IK;
    masked_delta(ea, dW);
    if (ea->compat) eg_scale(dW, N, ea->c->s, ea->T);
    else if (ea->has_sigma) eg_scale(dW, N, ea->sigma, ea->T);
}

/* One term's factor gradients from GW = rnd(Gs ⊙ R_other) (O × I·K). */
static void term_bwd(eg_adapter *ea, const term *tm, const float *GW) {
    const lyco_dims *d = &ea->c->dims;
    lyco_dtype T = ea->T;
    int64_t IK = ea->IK, r = tm->r, O = d->O;
    float *GA = ea->g[tm->sa], *GB = ea->g[tm->sb];
    if (!is_tucker(ea)) {
        if (GA) eg_gemm(false, true, O, r, IK, GW, tm->b, GA, T);   /* T·Bᵀ */
        if (GB) eg_gemm(true, false, r, IK, O, tm->a, GW, GB, T);   /* Aᵀ·T */
        return;
    }
    float *GT = ea->g[tm->st];
    if (GA) {
        float *P = eg_alloc(ea, r * IK);
        if (!P) return;
        tucker_core_b(ea, tm, P);
        eg_gemm(false, true, r, O, IK, P, GW, GA, T);               /* P·G_Wᵀ (r × O) */
    }
    if (!GB && !GT) return;
    float *GP = eg_alloc(ea, r * IK);
    if (!GP) return;
    eg_gemm(false, false, r, IK, O, tm->a, GW, GP, T);              /* A·G_W (r × I·K) */
    if (GB)
        for (int64_t j = 0; j < r; j++)
            for (int64_t c = 0; c < d->I; c++) {
                float s = 0;
                for (int64_t i = 0; i < r; i++)
                    for (int64_t k = 0; k < d->K; k++) s += tm->t[(i * r + j) * d->K + k] * GP[(i * d->I + c) * d->K + k];
                GB[j * d->I + c] = eg_rnd(s, T);
            }
    if (GT)
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < r; j++)
                for (int64_t k = 0; k < d->K; k++) {
                    float s = 0;
                    for (int64_t c = 0; c < d->I; c++) s += GP[(i * d->I + c) * d->K + k] * tm->b[j * d->I + c];
                    GT[(i * r + j) * d->K + k] = eg_rnd(s, T);
                }
}

/* Upstream's custom backward of rnd(rnd(R_1 ⊙ R_2)·γ): G = ∂L/∂(that product), modified in place. */
static void hada_bwd(eg_adapter *ea, float *G, float gam) {
    int64_t N = ea->O * ea->IK;
    lyco_dtype T = ea->T;
    term t1 = term_of(ea, 0), t2 = term_of(ea, 1);
    float *R = eg_alloc(ea, N), *GW = eg_alloc(ea, N), *P = is_tucker(ea) ? eg_alloc(ea, max_r(ea) * ea->IK) : NULL;
    if (!R || !GW || (is_tucker(ea) && !P)) return;
    eg_scale(G, N, gam, T);                 /* Gs = rnd(G·γ) */
    term_product(ea, &t2, R, P);            /* R_2 */
    eg_mul(R, G, GW, N, T);
    term_bwd(ea, &t1, GW);
    term_product(ea, &t1, R, P);            /* R_1 */
    eg_mul(R, G, GW, N, T);
    term_bwd(ea, &t2, GW);
}

static void delta_bwd(eg_adapter *ea, const float *W, const float *G) {
    (void)W;
    int64_t N = ea->O * ea->IK;
    lyco_dtype T = ea->T;
    float *g = eg_alloc(ea, N);
    if (!g) return;
    memcpy(g, G, sizeof(float) * (size_t)N);
    if (ea->compat) {
        eg_scale(g, N, ea->c->s, T);        /* backward of the second × s; no σs */
    } else if (ea->has_sigma) {
        if (ea->g[LYCO_SCALAR]) {
            float *pre = eg_alloc(ea, N);
            if (!pre) return;
            masked_delta(ea, pre);
            ea->g[LYCO_SCALAR][0] = sigma_grad(g, pre, N, T);
        }
        eg_scale(g, N, ea->sigma, T);       /* backward of × σs */
    }
    apply_row_mask(ea, g);
    hada_bwd(ea, g, gamma_of(ea, ea->c->s));
}

/* 4.1.3 takes the functional path (γ' = rnd(s·m), then × σs) for a linear layer without Tucker
   and without rank dropout; everything else materialises the merge ΔW (with σs), then × m. */
static bool functional_bypass(const eg_adapter *ea) {
    return ea->c->a->layer.kind == LYCO_LAYER_LINEAR && !is_tucker(ea) && !ea->t[LYCO_RANK_MASK];
}

/* The weight the bypass convolves/multiplies x with. */
static void bypass_weight(const eg_adapter *ea, const float *W, float *E) {
    if (functional_bypass(ea)) {
        hada(ea, gamma_of(ea, ea->c->s * ea->c->m), E);
        return;
    }
    delta(ea, W, E);
    eg_scale(E, ea->O * ea->IK, ea->c->m, ea->T);
}

static void bypass_fwd(const eg_adapter *ea, const float *x, const float *W, float *delta_out) {
    const lyco_call *c = ea->c;
    int64_t ny = c->tokens * c->dims.O * c->sp_out_n;
    float *E = eg_alloc(ea, ea->O * ea->IK);
    if (!E) return;
    bypass_weight(ea, W, E);
    eg_op_fwd(c, x, E, delta_out, ea->T);
    if (functional_bypass(ea) && ea->has_sigma) eg_scale(delta_out, ny, ea->sigma, ea->T);
}

static void bypass_bwd(eg_adapter *ea, const float *x, const float *W, const float *dy, float *dx) {
    const lyco_call *c = ea->c;
    lyco_dtype T = ea->T;
    int64_t N = ea->O * ea->IK, ny = c->tokens * c->dims.O * c->sp_out_n;
    float *E = eg_alloc(ea, N), *g = eg_alloc(ea, ny), *GE = eg_alloc(ea, N);
    if (!E || !g || !GE) return;
    bypass_weight(ea, W, E);
    memcpy(g, dy, sizeof(float) * (size_t)ny);
    bool func = functional_bypass(ea);
    if (func && ea->has_sigma) {            /* Δ = rnd(y1 · σs), y1 = op(x, ΔW') */
        if (ea->g[LYCO_SCALAR]) {
            float *y1 = eg_alloc(ea, ny);
            if (!y1) return;
            eg_op_fwd(c, x, E, y1, T);
            ea->g[LYCO_SCALAR][0] = sigma_grad(g, y1, ny, T);
        }
        eg_scale(g, ny, ea->sigma, T);
    }
    if (dx) eg_op_dgrad(c, g, E, dx, T);
    eg_op_wgrad(c, x, g, GE, T);
    if (func) {
        hada_bwd(ea, GE, gamma_of(ea, c->s * c->m));
        return;
    }
    eg_scale(GE, N, c->m, T);               /* backward of × m, then the merge chain */
    delta_bwd(ea, W, GE);
}

const eg_algo eg_loha = {.delta = delta, .delta_bwd = delta_bwd, .bypass_fwd = bypass_fwd, .bypass_bwd = bypass_bwd};
