/*
 * lokr.c — fp64 oracle of LoKr (ALGORITHMS.md §2.3): the Kronecker product W1 ⊗ W2.
 *
 *   W1 (a × c)   = lokr_w1, or lokr_w1_a (a×r) · lokr_w1_b (r×c)
 *   W2 (b × d·K) = lokr_w2 (b×d×k, or b×(d·K): the same memory),
 *                  or lokr_w2_a (b×r) · lokr_w2_b (r×(d·K), or r×d×k)              (plain)
 *                  or Tk(t2, w2_a, w2_b): P[i,q,κ] = Σ_l t2[i,l,κ] · w2_b[l,q],
 *                     W2 = w2_aᵀ · P   with t2 r×r×k, w2_a r×b, w2_b r×d         (Tucker)
 *   ΔW[i·b + j, p·d + q, κ] = s' · q_{i·b+j} · W1[i,p] · W2[j,q,κ]
 *
 * In the flattened O × (I·K) layout the column of (input channel p·d+q, kernel offset κ) is
 * p·(d·K) + (q·K + κ), so ΔW̄ is exactly the matrix Kronecker product of W1 (a×c) and W2 viewed
 * as b × (d·K): ΔW̄[i·b+j, p·dK + n] = s'·q·W1[i,p]·W2[j,n]. O = a·b, I = c·d (dims.lk_*).
 *
 * s' = s as resolved by shapes.c (1 when both halves are full, unless the caller sets a scale),
 * or s² with the upstream-merge-scale flag in merge (ra->compat; §8 #1 — ref.c then skips σs).
 * q = the output-row rank-dropout mask (merge only; the validator rejects it in bypass). σs and
 * the multiplier are applied by ref.c.
 *
 * Backward (G = ∂L/∂ΔW̄, Gs = s'·q·G):
 *   G_W1[i,p] = Σ_{j,n} Gs[i·b+j, p·dK+n] · W2[j,n]
 *   G_W2[j,n] = Σ_{i,p} Gs[i·b+j, p·dK+n] · W1[i,p]
 *   W1 = w1_a·w1_b:  G_w1a = G_W1 · w1_bᵀ,  G_w1b = w1_aᵀ · G_W1
 *   W2 = w2_a·w2_b:  G_w2a = G_W2 · w2_bᵀ,  G_w2b = w2_aᵀ · G_W2
 *   W2 Tucker:       G_w2a = P · G_W2ᵀ (r×b),  G_P = w2_a · G_W2 (r × d·K),
 *                    G_w2b[l,q] = Σ_{i,κ} t2[i,l,κ] · G_P[i,q,κ],  G_t2[i,l,κ] = Σ_q G_P[i,q,κ] · w2_b[l,q]
 */
#include "ref.h"

static double scale_of(const ref_adapter *ra) { return ra->compat ? ra->c->s * ra->c->s : ra->c->s; }
static double row_mask(const ref_adapter *ra, int64_t o) { return ra->bypass ? 1.0 : ref_mask(ra, LYCO_RANK_MASK, o); }

/* Tucker: P[i, q, κ] = Σ_l t2[i,l,κ] · w2_b[l,q]   (r × d·K) */
static void tucker_core_b(const ref_adapter *ra, double *P) {
    const lyco_dims *d = &ra->c->dims;
    const double *T = ra->t[LYCO_LOKR_T2], *B = ra->t[LYCO_LOKR_W2_B];
    int64_t r = d->r, D = d->lk_d, K = d->K;
    for (int64_t i = 0; i < r; i++)
        for (int64_t q = 0; q < D; q++)
            for (int64_t k = 0; k < K; k++) {
                double s = 0;
                for (int64_t l = 0; l < r; l++) s += T[(i * r + l) * K + k] * B[l * D + q];
                P[(i * D + q) * K + k] = s;
            }
}

/* W1 (a × c) and W2 (b × d·K) into fresh scratch; false on allocation failure. */
static bool factors(const ref_adapter *ra, double **W1, double **W2) {
    const lyco_dims *d = &ra->c->dims;
    int64_t a = d->lk_a, b = d->lk_b, c = d->lk_c, dK = d->lk_d * d->K, r = d->r;
    if (d->lk_w1_full) {
        *W1 = ra->t[LYCO_LOKR_W1];
    } else {
        *W1 = ref_alloc(ra, a * c);
        if (!*W1) return false;
        ref_gemm(false, false, a, c, r, ra->t[LYCO_LOKR_W1_A], ra->t[LYCO_LOKR_W1_B], *W1, false);
    }
    if (d->lk_w2_full) {
        *W2 = ra->t[LYCO_LOKR_W2];
    } else {
        *W2 = ref_alloc(ra, b * dK);
        if (!*W2) return false;
        if (d->tucker) {
            double *P = ref_alloc(ra, r * dK);
            if (!P) return false;
            tucker_core_b(ra, P);
            ref_gemm(true, false, b, dK, r, ra->t[LYCO_LOKR_W2_A], P, *W2, false);
        } else {
            ref_gemm(false, false, b, dK, r, ra->t[LYCO_LOKR_W2_A], ra->t[LYCO_LOKR_W2_B], *W2, false);
        }
    }
    return true;
}

static void delta(const ref_adapter *ra, const double *W, double *dW) {
    (void)W;
    const lyco_dims *d = &ra->c->dims;
    int64_t a = d->lk_a, b = d->lk_b, c = d->lk_c, dK = d->lk_d * d->K, IK = ra->IK;
    double *W1, *W2;
    if (!factors(ra, &W1, &W2)) return;
    double s = scale_of(ra);
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++) {
            int64_t o = i * b + j;
            double f = s * row_mask(ra, o);
            for (int64_t p = 0; p < c; p++) {
                double w1 = W1[i * c + p] * f;
                for (int64_t n = 0; n < dK; n++) dW[o * IK + p * dK + n] = w1 * W2[j * dK + n];
            }
        }
}

static void delta_bwd(ref_adapter *ra, const double *W, const double *G) {
    (void)W;
    const lyco_dims *d = &ra->c->dims;
    int64_t a = d->lk_a, b = d->lk_b, c = d->lk_c, dK = d->lk_d * d->K, IK = ra->IK, r = d->r;
    double *W1, *W2;
    if (!factors(ra, &W1, &W2)) return;
    double *GW1 = ref_alloc(ra, a * c), *GW2 = ref_alloc(ra, b * dK);
    if (!GW1 || !GW2) return;
    double s = scale_of(ra);
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++) {
            int64_t o = i * b + j;
            double f = s * row_mask(ra, o);
            for (int64_t p = 0; p < c; p++) {
                double acc = 0;
                for (int64_t n = 0; n < dK; n++) {
                    double g = G[o * IK + p * dK + n] * f;
                    acc += g * W2[j * dK + n];
                    GW2[j * dK + n] += g * W1[i * c + p];
                }
                GW1[i * c + p] += acc;
            }
        }
    /* W1 */
    if (d->lk_w1_full) {
        if (ra->g[LYCO_LOKR_W1])
            for (int64_t n = 0; n < a * c; n++) ra->g[LYCO_LOKR_W1][n] += GW1[n];
    } else {
        if (ra->g[LYCO_LOKR_W1_A]) ref_gemm(false, true, a, r, c, GW1, ra->t[LYCO_LOKR_W1_B], ra->g[LYCO_LOKR_W1_A], true);
        if (ra->g[LYCO_LOKR_W1_B]) ref_gemm(true, false, r, c, a, ra->t[LYCO_LOKR_W1_A], GW1, ra->g[LYCO_LOKR_W1_B], true);
    }
    /* W2 */
    if (d->lk_w2_full) {
        if (ra->g[LYCO_LOKR_W2])
            for (int64_t n = 0; n < b * dK; n++) ra->g[LYCO_LOKR_W2][n] += GW2[n];
        return;
    }
    if (!d->tucker) {
        if (ra->g[LYCO_LOKR_W2_A]) ref_gemm(false, true, b, r, dK, GW2, ra->t[LYCO_LOKR_W2_B], ra->g[LYCO_LOKR_W2_A], true);
        if (ra->g[LYCO_LOKR_W2_B]) ref_gemm(true, false, r, dK, b, ra->t[LYCO_LOKR_W2_A], GW2, ra->g[LYCO_LOKR_W2_B], true);
        return;
    }
    double *GA = ra->g[LYCO_LOKR_W2_A], *GB = ra->g[LYCO_LOKR_W2_B], *GT = ra->g[LYCO_LOKR_T2];
    if (GA) {
        double *P = ref_alloc(ra, r * dK);
        if (!P) return;
        tucker_core_b(ra, P);
        ref_gemm(false, true, r, b, dK, P, GW2, GA, true);                       /* P · G_W2ᵀ */
    }
    if (!GB && !GT) return;
    double *GP = ref_alloc(ra, r * dK);
    if (!GP) return;
    ref_gemm(false, false, r, dK, b, ra->t[LYCO_LOKR_W2_A], GW2, GP, false);     /* w2_a · G_W2 */
    const double *T = ra->t[LYCO_LOKR_T2], *B = ra->t[LYCO_LOKR_W2_B];
    int64_t D = d->lk_d, K = d->K;
    if (GT)
        for (int64_t i = 0; i < r; i++)
            for (int64_t l = 0; l < r; l++)
                for (int64_t k = 0; k < K; k++) {
                    double sm = 0;
                    for (int64_t q = 0; q < D; q++) sm += GP[(i * D + q) * K + k] * B[l * D + q];
                    GT[(i * r + l) * K + k] += sm;
                }
    if (GB)
        for (int64_t l = 0; l < r; l++)
            for (int64_t q = 0; q < D; q++) {
                double sm = 0;
                for (int64_t i = 0; i < r; i++)
                    for (int64_t k = 0; k < K; k++) sm += T[(i * r + l) * K + k] * GP[(i * D + q) * K + k];
                GB[l * D + q] += sm;
            }
}

const ref_algo ref_lokr = {.delta = delta, .delta_bwd = delta_bwd, .uses_sigma = true};
