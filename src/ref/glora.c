/*
 * glora.c — fp64 oracle of GLoRA (ALGORITHMS.md §2.7).
 *
 *   ΔW̄[o, c·K+κ] = s · ( Σ_i B1[o,i]·q_b[i]·B2[i, c·K+κ]                       (B path)
 *                      + Σ_j P[o,j,κ]·q_a[j]·A2[j,c] ),                          (A path)
 *   P[o,j,κ] = Σ_{c'} W[o,c',κ]·A1[c',j]                      (W ×_in A1, per kernel position)
 *
 * i.e. ΔW = s·(B1 diag(q_b) B2 + W ×_in (A1 diag(q_a) A2)). The bypass this equals is
 * y = base(x + s·m·σs·A1 q_a A2 x) + s·m·σs·B1 q_b B2 x (ALGORITHMS.md §2.7 "C"): s, m and σs
 * appear once (upstream's bypass applies s² and drops σs, §8 #4). σs and m are applied by ref.c.
 *
 * Masks (bypass only; the validator rejects them in merge): q_a = LYCO_RANK_MASK on the A-path
 * rank, q_b = LYCO_RANK_MASK_B on the B-path rank, both r values taken as given (0/1 or
 * pre-scaled); absent = 1. Upstream's inverted keep semantics is the caller's business.
 *
 * Gradients, Γ = s·G with G = ∂L/∂ΔW̄ (m·σs already applied by ref.c):
 *   G_B1[o,i]  = q_b[i]·Σ_j Γ[o,j]·B2[i,j]          G_B2[i,j] = q_b[i]·Σ_o B1[o,i]·Γ[o,j]
 *   G_A2[j,c]  = q_a[j]·Σ_{o,κ} P[o,j,κ]·Γ[o,c,κ]
 *   G_P[o,j,κ] = q_a[j]·Σ_c A2[j,c]·Γ[o,c,κ]         G_A1[c',j] = Σ_{o,κ} W[o,c',κ]·G_P[o,j,κ]
 *
 * Shapes (compact): A1 I×r, A2 r×I, B1 O×r (1×1 kernel dims dropped), B2 r×(I·K); W O×(I·K)
 * (groups = 1, enforced by shapes.c). W is required in every direction (validate.c); a NULL W
 * drops the A path.
 */
#include "ref.h"

static double qa(const ref_adapter *ra, int64_t j) { return ra->bypass ? ref_mask(ra, LYCO_RANK_MASK, j) : 1.0; }
static double qb(const ref_adapter *ra, int64_t i) { return ra->bypass ? ref_mask(ra, LYCO_RANK_MASK_B, i) : 1.0; }

/* P[o,j,κ] = Σ_c W[o,c,κ]·A1[c,j]   (O × r × K) */
static void w_times_a1(const ref_adapter *ra, const double *W, double *P) {
    const lyco_dims *d = &ra->c->dims;
    const double *A1 = ra->t[LYCO_GLORA_A1];
    int64_t r = d->r, K = d->K, I = d->I, IK = ra->IK;
    for (int64_t o = 0; o < d->O; o++)
        for (int64_t j = 0; j < r; j++)
            for (int64_t k = 0; k < K; k++) {
                double s = 0.0;
                for (int64_t c = 0; c < I; c++) s += W[o * IK + c * K + k] * A1[c * r + j];
                P[(o * r + j) * K + k] = s;
            }
}

static void delta(const ref_adapter *ra, const double *W, double *dW) {
    const lyco_dims *d = &ra->c->dims;
    int64_t O = d->O, r = d->r, K = d->K, I = d->I, IK = ra->IK;
    const double *B1 = ra->t[LYCO_GLORA_B1], *B2 = ra->t[LYCO_GLORA_B2], *A2 = ra->t[LYCO_GLORA_A2];
    double *Bm = ref_alloc(ra, O * r);
    if (!Bm) return;
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < r; i++) Bm[o * r + i] = B1[o * r + i] * qb(ra, i);
    ref_gemm(false, false, O, IK, r, Bm, B2, dW, false);
    if (W) {
        double *P = ref_alloc(ra, O * r * K);
        if (!P) return;
        w_times_a1(ra, W, P);
        for (int64_t o = 0; o < O; o++)
            for (int64_t c = 0; c < I; c++)
                for (int64_t k = 0; k < K; k++) {
                    double s = 0.0;
                    for (int64_t j = 0; j < r; j++) s += P[(o * r + j) * K + k] * qa(ra, j) * A2[j * I + c];
                    dW[o * IK + c * K + k] += s;
                }
    }
    for (int64_t n = 0; n < O * IK; n++) dW[n] *= ra->c->s;
}

static void delta_bwd(ref_adapter *ra, const double *W, const double *G) {
    const lyco_dims *d = &ra->c->dims;
    int64_t O = d->O, r = d->r, K = d->K, I = d->I, IK = ra->IK;
    const double *B1 = ra->t[LYCO_GLORA_B1], *B2 = ra->t[LYCO_GLORA_B2], *A2 = ra->t[LYCO_GLORA_A2];
    double *Gs = ref_alloc(ra, O * IK);
    if (!Gs) return;
    for (int64_t n = 0; n < O * IK; n++) Gs[n] = G[n] * ra->c->s;

    /* B path */
    if (ra->g[LYCO_GLORA_B1])
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < r; i++) {
                double s = 0.0;
                for (int64_t j = 0; j < IK; j++) s += Gs[o * IK + j] * B2[i * IK + j];
                ra->g[LYCO_GLORA_B1][o * r + i] += qb(ra, i) * s;
            }
    if (ra->g[LYCO_GLORA_B2])
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < IK; j++) {
                double s = 0.0;
                for (int64_t o = 0; o < O; o++) s += B1[o * r + i] * Gs[o * IK + j];
                ra->g[LYCO_GLORA_B2][i * IK + j] += qb(ra, i) * s;
            }

    /* A path */
    if (!W || (!ra->g[LYCO_GLORA_A1] && !ra->g[LYCO_GLORA_A2])) return;
    if (ra->g[LYCO_GLORA_A2]) {
        double *P = ref_alloc(ra, O * r * K);
        if (!P) return;
        w_times_a1(ra, W, P);
        for (int64_t j = 0; j < r; j++)
            for (int64_t c = 0; c < I; c++) {
                double s = 0.0;
                for (int64_t o = 0; o < O; o++)
                    for (int64_t k = 0; k < K; k++) s += P[(o * r + j) * K + k] * Gs[o * IK + c * K + k];
                ra->g[LYCO_GLORA_A2][j * I + c] += qa(ra, j) * s;
            }
    }
    if (ra->g[LYCO_GLORA_A1]) {
        double *GP = ref_alloc(ra, O * r * K);
        if (!GP) return;
        for (int64_t o = 0; o < O; o++)
            for (int64_t j = 0; j < r; j++)
                for (int64_t k = 0; k < K; k++) {
                    double s = 0.0;
                    for (int64_t c = 0; c < I; c++) s += A2[j * I + c] * Gs[o * IK + c * K + k];
                    GP[(o * r + j) * K + k] = qa(ra, j) * s;
                }
        for (int64_t c = 0; c < I; c++)
            for (int64_t j = 0; j < r; j++) {
                double s = 0.0;
                for (int64_t o = 0; o < O; o++)
                    for (int64_t k = 0; k < K; k++) s += W[o * IK + c * K + k] * GP[(o * r + j) * K + k];
                ra->g[LYCO_GLORA_A1][c * r + j] += s;
            }
    }
}

const ref_algo ref_glora = {.delta = delta, .delta_bwd = delta_bwd, .uses_sigma = true};
