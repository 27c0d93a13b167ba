/*
 * locon.c — fp64 oracle of LoRA / LoCon (ALGORITHMS.md §2.1), plain and Tucker.
 *
 *   plain : ΔW̄[o, j] = s · q_o · Σ_i U[o,i] · q_i · D[i, j]          (j over I·K)
 *   Tucker: ΔW[o, c, κ] = s · q_o · Σ_{i,j} U[o,i] · q_i · M[i,j,κ] · D[j,c]
 *
 * q_o = the output-row mask (merge only), q_i = the rank mask (bypass only: it masks the rank
 * activations h before the up projection, i.e. U's columns). Shapes: D r×(I·K) (plain) or r×I
 * (Tucker), M r×r×K, U O×r. σs and the multiplier are applied by ref.c.
 */
#include "ref.h"

static double row_mask(const ref_adapter *ra, int64_t o) { return ra->bypass ? 1.0 : ref_mask(ra, LYCO_RANK_MASK, o); }
static double rank_mask(const ref_adapter *ra, int64_t i) { return ra->bypass ? ref_mask(ra, LYCO_RANK_MASK, i) : 1.0; }

/* U' = U · diag(q_i) (O×r) */
static void masked_up(const ref_adapter *ra, double *Um) {
    int64_t r = ra->c->dims.r;
    for (int64_t o = 0; o < ra->O; o++)
        for (int64_t i = 0; i < r; i++) Um[o * r + i] = ra->t[LYCO_LORA_UP][o * r + i] * rank_mask(ra, i);
}

/* Tucker core contracted with D: P[i, c, κ] = Σ_j M[i,j,κ] D[j,c]   (r × I·K) */
static void tucker_core_down(const ref_adapter *ra, double *P) {
    const lyco_dims *d = &ra->c->dims;
    const double *M = ra->t[LYCO_LORA_MID], *D = ra->t[LYCO_LORA_DOWN];
    for (int64_t i = 0; i < d->r; i++)
        for (int64_t c = 0; c < d->I; c++)
            for (int64_t k = 0; k < d->K; k++) {
                double s = 0;
                for (int64_t j = 0; j < d->r; j++) s += M[(i * d->r + j) * d->K + k] * D[j * d->I + c];
                P[(i * d->I + c) * d->K + k] = s;
            }
}

static void delta(const ref_adapter *ra, const double *W, double *dW) {
    (void)W;
    const lyco_dims *d = &ra->c->dims;
    double *Um = ref_alloc(ra, d->O * d->r);
    if (!Um) return;
    masked_up(ra, Um);
    if (d->tucker) {
        double *P = ref_alloc(ra, d->r * ra->IK);
    if (!P) return;
        tucker_core_down(ra, P);
        ref_gemm(false, false, d->O, ra->IK, d->r, Um, P, dW, false);
    } else {
        ref_gemm(false, false, d->O, ra->IK, d->r, Um, ra->t[LYCO_LORA_DOWN], dW, false);
    }
    for (int64_t o = 0; o < d->O; o++)
        for (int64_t j = 0; j < ra->IK; j++) dW[o * ra->IK + j] *= ra->c->s * row_mask(ra, o);
}

static void delta_bwd(ref_adapter *ra, const double *W, const double *G) {
    (void)W;
    const lyco_dims *d = &ra->c->dims;
    int64_t IK = ra->IK, r = d->r;
    double *Gm = ref_alloc(ra, d->O * IK);
    if (!Gm) return;
    for (int64_t o = 0; o < d->O; o++)
        for (int64_t j = 0; j < IK; j++) Gm[o * IK + j] = G[o * IK + j] * ra->c->s * row_mask(ra, o);
    double *Um = ref_alloc(ra, d->O * r);
    if (!Um) return;
    masked_up(ra, Um);
    /* the right factor: D (plain) or P = M ×_j D (Tucker) */
    double *P = ref_alloc(ra, r * IK);
    if (!P) return;
    const double *R = ra->t[LYCO_LORA_DOWN];
    if (d->tucker) { tucker_core_down(ra, P); R = P; }
    if (ra->g[LYCO_LORA_UP]) {
        double *GU = ref_alloc(ra, d->O * r);
    if (!GU) return;
        ref_gemm(false, true, d->O, r, IK, Gm, R, GU, false);      /* Gm · Rᵀ */
        for (int64_t o = 0; o < d->O; o++)
            for (int64_t i = 0; i < r; i++) ra->g[LYCO_LORA_UP][o * r + i] += GU[o * r + i] * rank_mask(ra, i);
    }
    if (!ra->g[LYCO_LORA_DOWN] && !ra->g[LYCO_LORA_MID]) return;
    double *GR = ref_alloc(ra, r * IK);
    if (!GR) return;
    ref_gemm(true, false, r, IK, d->O, Um, Gm, GR, false);          /* U'ᵀ · Gm: ∂L/∂R */
    if (!d->tucker) {
        for (int64_t n = 0; n < r * IK; n++) ra->g[LYCO_LORA_DOWN][n] += GR[n];
        return;
    }
    const double *M = ra->t[LYCO_LORA_MID], *D = ra->t[LYCO_LORA_DOWN];
    /* P[i,c,κ] = Σ_j M[i,j,κ] D[j,c]:  G_M[i,j,κ] = Σ_c GR[i,c,κ] D[j,c];  G_D[j,c] = Σ_{i,κ} M[i,j,κ] GR[i,c,κ] */
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < r; j++)
            for (int64_t k = 0; k < d->K; k++) {
                double sm = 0;
                for (int64_t c = 0; c < d->I; c++) sm += GR[(i * d->I + c) * d->K + k] * D[j * d->I + c];
                if (ra->g[LYCO_LORA_MID]) ra->g[LYCO_LORA_MID][(i * r + j) * d->K + k] += sm;
            }
    if (ra->g[LYCO_LORA_DOWN])
        for (int64_t j = 0; j < r; j++)
            for (int64_t c = 0; c < d->I; c++) {
                double sd = 0;
                for (int64_t i = 0; i < r; i++)
                    for (int64_t k = 0; k < d->K; k++) sd += M[(i * r + j) * d->K + k] * GR[(i * d->I + c) * d->K + k];
                ra->g[LYCO_LORA_DOWN][j * d->I + c] += sd;
            }
}

const ref_algo ref_locon = {.delta = delta, .delta_bwd = delta_bwd, .uses_sigma = true};
