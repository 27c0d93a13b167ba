/*
 * diag_oft.c — fp64 oracle of Diag-OFT (ALGORITHMS.md §2.4): a block-diagonal rotation of the
 * O rows of X (merge: the rows of W̄, n = I·K columns; bypass: y0 with channels as rows, n =
 * tokens × spatial).
 *
 *   R_k = Cayley(B_k) with the norm constraint κc over all blocks        (cayley.h)
 *   M_k = m·R_k + (1−m)·I                                 (no mask)
 *   M_k = (m·R_k) ⊙ D_k − m·I + I                         (rank-dropout mask D, merge only)
 *   Y[k·bs+μ, j] = ρ[k·bs+μ] · Σ_ν M_k[ν, μ] · X[k·bs+ν, j]   i.e. Y_k = ρ_k ⊙ (M_kᵀ X_k)
 *
 * The blocks act transposed (M_kᵀ), as upstream's einsum does [run]; BOFT applies its blocks
 * untransposed. ρ = rescale (1 when absent). D already contains the 1/(1−p) scaling.
 *
 * Backward, with GY = ∂L/∂Y and G'' = ρ ⊙ GY:
 *   G_ρ[o]      = Σ_j GY[o, j] · (Mᵀ X)[o, j]
 *   G_M_k[ν, μ] = Σ_j X[k·bs+ν, j] · G''[k·bs+μ, j]
 *   G_R_k       = m · G_M_k (⊙ D_k)
 *   G_B         = the Cayley adjoint of G_R (cayley.h; through the constraint when active)
 *   GX_k        = M_k · G''_k
 *
 * Shapes: oft_blocks nb×bs×bs (nb·bs = O), rescale O (or O×1…), mask nb·bs·bs.
 */
#include "cayley.h"
#include "ref.h"

/* The Cayley state and M (nb·bs·bs) of the call; false when out of memory. */
static bool oft_matrices(const ref_adapter *ra, ref_cayley *cy, double **Mout) {
    const lyco_dims *d = &ra->c->dims;
    int64_t nb = d->nb, bs = d->bs, nn = bs * bs;
    double m = ra->c->m;
    double *mem = ref_alloc(ra, ref_cayley_size(nb, bs));
    double *M = ref_alloc(ra, nb * nn);
    if (!mem || !M) return false;
    ref_cayley_fwd(cy, mem, nb, bs, ra->t[LYCO_OFT_BLOCKS], ra->c->a->constraint);
    const double *D = ra->bypass ? NULL : ra->t[LYCO_RANK_MASK];
    for (int64_t k = 0; k < nb; k++)
        for (int64_t a = 0; a < bs; a++)
            for (int64_t b = 0; b < bs; b++) {
                int64_t i = k * nn + a * bs + b;
                double eye = a == b ? 1.0 : 0.0;
                M[i] = D ? (m * cy->R[i]) * D[i] - m * eye + eye : m * cy->R[i] + (1.0 - m) * eye;
            }
    *Mout = M;
    return true;
}

/* Z = Mᵀ X per block (before the rescale). */
static void apply_mt(const ref_adapter *ra, const double *M, const double *X, int64_t n, double *Z) {
    int64_t nb = ra->c->dims.nb, bs = ra->c->dims.bs, nn = bs * bs;
    for (int64_t k = 0; k < nb; k++)
        for (int64_t mu = 0; mu < bs; mu++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0.0;
                for (int64_t nu = 0; nu < bs; nu++) s += M[k * nn + nu * bs + mu] * X[(k * bs + nu) * n + j];
                Z[(k * bs + mu) * n + j] = s;
            }
}

static double rho(const ref_adapter *ra, int64_t o) { return ra->t[LYCO_RESCALE] ? ra->t[LYCO_RESCALE][o] : 1.0; }

static void rows(const ref_adapter *ra, const double *X, int64_t n, double *Y) {
    ref_cayley cy;
    double *M;
    if (!oft_matrices(ra, &cy, &M)) return;
    apply_mt(ra, M, X, n, Y);
    for (int64_t o = 0; o < ra->O; o++)
        for (int64_t j = 0; j < n; j++) Y[o * n + j] *= rho(ra, o);
}

static void rows_bwd(ref_adapter *ra, const double *X, const double *GY, int64_t n, double *GX) {
    const lyco_dims *d = &ra->c->dims;
    int64_t nb = d->nb, bs = d->bs, nn = bs * bs, O = ra->O;
    double m = ra->c->m;
    ref_cayley cy;
    double *M;
    if (!oft_matrices(ra, &cy, &M)) return;

    /* G'' = ρ ⊙ GY */
    double *G2 = ref_alloc(ra, O * n);
    if (!G2) return;
    for (int64_t o = 0; o < O; o++)
        for (int64_t j = 0; j < n; j++) G2[o * n + j] = rho(ra, o) * GY[o * n + j];

    if (ra->g[LYCO_RESCALE]) {
        double *Z = ref_alloc(ra, O * n);
        if (!Z) return;
        apply_mt(ra, M, X, n, Z);
        for (int64_t o = 0; o < O; o++) {
            double s = 0.0;
            for (int64_t j = 0; j < n; j++) s += GY[o * n + j] * Z[o * n + j];
            ra->g[LYCO_RESCALE][o] += s;
        }
    }

    if (ra->g[LYCO_OFT_BLOCKS]) {
        const double *D = ra->bypass ? NULL : ra->t[LYCO_RANK_MASK];
        double *GR = ref_alloc(ra, nb * nn);
        if (!GR) return;
        for (int64_t k = 0; k < nb; k++)
            for (int64_t nu = 0; nu < bs; nu++)
                for (int64_t mu = 0; mu < bs; mu++) {
                    double s = 0.0;   /* G_M_k[ν, μ] */
                    for (int64_t j = 0; j < n; j++) s += X[(k * bs + nu) * n + j] * G2[(k * bs + mu) * n + j];
                    int64_t i = k * nn + nu * bs + mu;
                    GR[i] = D ? m * s * D[i] : m * s;
                }
        ref_note_skew_cancel(ra, ref_cayley_bwd(&cy, GR, ra->g[LYCO_OFT_BLOCKS]));
    }

    if (GX)   /* GX_k = M_k · G''_k */
        for (int64_t k = 0; k < nb; k++)
            for (int64_t nu = 0; nu < bs; nu++)
                for (int64_t j = 0; j < n; j++) {
                    double s = 0.0;
                    for (int64_t mu = 0; mu < bs; mu++) s += M[k * nn + nu * bs + mu] * G2[(k * bs + mu) * n + j];
                    GX[(k * bs + nu) * n + j] = s;
                }
}

const ref_algo ref_diag_oft = {.rows = rows, .rows_bwd = rows_bwd};
