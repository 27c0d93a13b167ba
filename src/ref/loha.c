/*
 * loha.c — fp64 oracle of LoHa (ALGORITHMS.md §2.2): the Hadamard product of two low-rank
 * matrices, plain and Tucker.
 *
 *   plain : R_t = A_t · B_t                                         (O × I·K, t = 1, 2)
 *   Tucker: P_t[i, c, κ] = Σ_j T_t[i,j,κ] · B_t[j,c]                 (r_t × I·K)
 *           R_t[o, c, κ] = Σ_i A_t[i,o] · P_t[i,c,κ]   i.e. R_t = A_tᵀ · P_t   (= Tk(T_t, A_t, B_t))
 *   ΔW̄[o, n] = s' · q_o · R_1[o,n] · R_2[o,n]
 *
 * s' = s (lyco's default: s once, like upstream's forward and bypass), or s² with the
 * upstream-merge-scale flag in merge (ra->compat; ALGORITHMS.md §8 #1 — ref.c then skips σs).
 * q_o = the output-row rank-dropout mask (LoHa: merge and bypass alike, §1.7). σs and the
 * multiplier are applied by ref.c.
 *
 * Shapes (compact row-major fp64 copies in ra->t): plain A_t O×r_t (or O×r_t×1…), B_t r_t×(I·K)
 * (or r_t×I×k: the same memory); Tucker A_t r_t×O, B_t r_t×I, T_t r_t×r_t×k. r_1 = dims.r,
 * r_2 = dims.r2 (the two ranks may differ).
 *
 * Backward (G = ∂L/∂ΔW̄, Gs = s'·q_o·G):
 *   G_R1 = Gs ⊙ R_2,  G_R2 = Gs ⊙ R_1
 *   plain : G_A = G_R · Bᵀ,  G_B = Aᵀ · G_R
 *   Tucker (the correct adjoint, not upstream's swapped P_1/P_2, §8 #3):
 *           G_A[i,o] = Σ_n P[i,n] · G_R[o,n]          (G_A = P · G_Rᵀ)
 *           G_P      = A · G_R                        (r × I·K)
 *           G_B[j,c] = Σ_{i,κ} T[i,j,κ] · G_P[i,c,κ]
 *           G_T[i,j,κ] = Σ_c G_P[i,c,κ] · B[j,c]
 */
#include "ref.h"

typedef struct {
    lyco_slot a, b, t;   /* slots of A_t, B_t, T_t */
    int64_t r;           /* rank of this term */
} term;

static term term_of(const ref_adapter *ra, int which) {
    term tm;
    tm.a = which ? LYCO_HADA_W2_A : LYCO_HADA_W1_A;
    tm.b = which ? LYCO_HADA_W2_B : LYCO_HADA_W1_B;
    tm.t = which ? LYCO_HADA_T2 : LYCO_HADA_T1;
    tm.r = which ? ra->c->dims.r2 : ra->c->dims.r;
    return tm;
}

static double scale_of(const ref_adapter *ra) { return ra->compat ? ra->c->s * ra->c->s : ra->c->s; }

/* P[i, c, κ] = Σ_j T[i,j,κ] · B[j,c]   (r × I·K) */
static void tucker_core_b(const ref_adapter *ra, const term *tm, double *P) {
    const lyco_dims *d = &ra->c->dims;
    const double *T = ra->t[tm->t], *B = ra->t[tm->b];
    int64_t r = tm->r;
    for (int64_t i = 0; i < r; i++)
        for (int64_t c = 0; c < d->I; c++)
            for (int64_t k = 0; k < d->K; k++) {
                double s = 0;
                for (int64_t j = 0; j < r; j++) s += T[(i * r + j) * d->K + k] * B[j * d->I + c];
                P[(i * d->I + c) * d->K + k] = s;
            }
}

/* R = A·B (plain) or Aᵀ·P (Tucker; P filled when given, r × I·K), O × I·K. */
static void term_product(const ref_adapter *ra, const term *tm, double *R, double *P) {
    const lyco_dims *d = &ra->c->dims;
    if (!d->tucker) {
        ref_gemm(false, false, d->O, ra->IK, tm->r, ra->t[tm->a], ra->t[tm->b], R, false);
        return;
    }
    tucker_core_b(ra, tm, P);
    ref_gemm(true, false, d->O, ra->IK, tm->r, ra->t[tm->a], P, R, false);
}

static double row_mask(const ref_adapter *ra, int64_t o) { return ref_mask(ra, LYCO_RANK_MASK, o); }

static void delta(const ref_adapter *ra, const double *W, double *dW) {
    (void)W;
    const lyco_dims *d = &ra->c->dims;
    int64_t IK = ra->IK;
    term t1 = term_of(ra, 0), t2 = term_of(ra, 1);
    double *R2 = ref_alloc(ra, d->O * IK);
    double *P = d->tucker ? ref_alloc(ra, (t1.r > t2.r ? t1.r : t2.r) * IK) : NULL;
    if (!R2 || (d->tucker && !P)) return;
    term_product(ra, &t1, dW, P);
    term_product(ra, &t2, R2, P);
    double s = scale_of(ra);
    for (int64_t o = 0; o < d->O; o++) {
        double f = s * row_mask(ra, o);
        for (int64_t n = 0; n < IK; n++) dW[o * IK + n] *= R2[o * IK + n] * f;
    }
}

/* Given G_R (O × I·K) of one term, accumulate the gradients of its factors. */
static void term_bwd(ref_adapter *ra, const term *tm, const double *GR) {
    const lyco_dims *d = &ra->c->dims;
    int64_t IK = ra->IK, r = tm->r, O = d->O;
    double *GA = ra->g[tm->a], *GB = ra->g[tm->b];
    if (!d->tucker) {
        if (GA) ref_gemm(false, true, O, r, IK, GR, ra->t[tm->b], GA, true);   /* G_R · Bᵀ */
        if (GB) ref_gemm(true, false, r, IK, O, ra->t[tm->a], GR, GB, true);   /* Aᵀ · G_R */
        return;
    }
    double *GT = ra->g[tm->t];
    if (GA) {
        double *P = ref_alloc(ra, r * IK);
        if (!P) return;
        tucker_core_b(ra, tm, P);
        ref_gemm(false, true, r, O, IK, P, GR, GA, true);                     /* P · G_Rᵀ */
    }
    if (!GB && !GT) return;
    double *GP = ref_alloc(ra, r * IK);
    if (!GP) return;
    ref_gemm(false, false, r, IK, O, ra->t[tm->a], GR, GP, false);             /* A · G_R */
    const double *T = ra->t[tm->t], *B = ra->t[tm->b];
    if (GT)
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < r; j++)
                for (int64_t k = 0; k < d->K; k++) {
                    double s = 0;
                    for (int64_t c = 0; c < d->I; c++) s += GP[(i * d->I + c) * d->K + k] * B[j * d->I + c];
                    GT[(i * r + j) * d->K + k] += s;
                }
    if (GB)
        for (int64_t j = 0; j < r; j++)
            for (int64_t c = 0; c < d->I; c++) {
                double s = 0;
                for (int64_t i = 0; i < r; i++)
                    for (int64_t k = 0; k < d->K; k++) s += T[(i * r + j) * d->K + k] * GP[(i * d->I + c) * d->K + k];
                GB[j * d->I + c] += s;
            }
}

static void delta_bwd(ref_adapter *ra, const double *W, const double *G) {
    (void)W;
    const lyco_dims *d = &ra->c->dims;
    int64_t IK = ra->IK, n = d->O * IK;
    term t1 = term_of(ra, 0), t2 = term_of(ra, 1);
    double *R1 = ref_alloc(ra, n), *R2 = ref_alloc(ra, n), *GR = ref_alloc(ra, n);
    double *P = d->tucker ? ref_alloc(ra, (t1.r > t2.r ? t1.r : t2.r) * IK) : NULL;
    if (!R1 || !R2 || !GR || (d->tucker && !P)) return;
    term_product(ra, &t1, R1, P);
    term_product(ra, &t2, R2, P);
    double s = scale_of(ra);
    /* term 1: G_R1 = Gs ⊙ R_2 */
    for (int64_t o = 0; o < d->O; o++) {
        double f = s * row_mask(ra, o);
        for (int64_t j = 0; j < IK; j++) GR[o * IK + j] = G[o * IK + j] * f * R2[o * IK + j];
    }
    term_bwd(ra, &t1, GR);
    /* term 2: G_R2 = Gs ⊙ R_1 */
    for (int64_t o = 0; o < d->O; o++) {
        double f = s * row_mask(ra, o);
        for (int64_t j = 0; j < IK; j++) GR[o * IK + j] = G[o * IK + j] * f * R1[o * IK + j];
    }
    term_bwd(ra, &t2, GR);
}

const ref_algo ref_loha = {.delta = delta, .delta_bwd = delta_bwd, .uses_sigma = true};
