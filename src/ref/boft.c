/*
 * boft.c — fp64 oracle of BOFT (ALGORITHMS.md §2.5): a butterfly product of block-diagonal
 * rotations acting on the O rows of X (merge: the rows of W̄, n = I·K; bypass: y0 with channels
 * as rows, n = tokens × spatial).
 *
 *   R_{i,k} = Cayley(B_{i,k}), the norm constraint over the whole M×nb×b×b tensor   (cayley.h)
 *   N_{i,k} = m·R_{i,k} + (1−m)·I                   (per stage; N = R when m = 1)
 *   stage i (h_i = 2^i·b/2, chunks of 2h_i rows): a row index t = c·2h_i + γ·h_i + η
 *             (γ ∈ {0,1}, η < h_i) moves to π_i(t) = c·2h_i + 2η + γ, i.e. (P_i v)[π_i(t)] = v[t]
 *   S_i     = P_iᵀ · blockdiag(N_{i,0}, …, N_{i,nb−1}) · P_i        (blocks untransposed)
 *   Y       = ρ ⊙ (S_{M−1} ⋯ S_1 S_0 · X)           (stage 0 first; ρ = rescale, 1 when absent)
 *
 * M = dims.stages ≤ log2(nb)+1 (the first M stages; the last possible one mixes all O rows).
 *
 * Backward, stage by stage in reverse, with X_i the input of stage i (kept from the forward:
 * (M+1)·O·n doubles; this is the oracle, clarity first), G_M = ρ ⊙ GY and G_{i} = ∂L/∂X_i:
 *   G_ρ[o]      = Σ_j GY[o, j] · X_M[o, j]
 *   Ŵ = P_i X_i, Ĝ = P_i G_{i+1}, per block k:
 *   G_N_{i,k}   = Ĝ_k · Ŵ_kᵀ,   G_R_{i,k} = m · G_N_{i,k}
 *   G_i         = P_iᵀ · blockdiag(N_{i,k}ᵀ) · Ĝ
 *   G_B         = the Cayley adjoint of G_R over all stages and blocks;  GX = G_0
 *
 * Shapes: oft_blocks M×nb×b×b (nb a power of two, b even, nb·b = O), rescale O (or O×1…).
 * No dropout: BOFT ignores rank_dropout.
 */
#include <string.h>

#include "cayley.h"
#include "ref.h"

/* π_i(t) for block size b */
static int64_t perm(int64_t stage, int64_t b, int64_t t) {
    int64_t h = ((int64_t)1 << stage) * (b / 2);
    int64_t c = t / (2 * h), r = t % (2 * h), gamma = r / h, eta = r % h;
    return c * 2 * h + 2 * eta + gamma;
}

/* Dst = P_i Src (rows moved: Dst[π(t)] = Src[t]) */
static void permute_rows(const ref_adapter *ra, int64_t stage, const double *Src, int64_t n, double *Dst) {
    for (int64_t t = 0; t < ra->O; t++)
        memcpy(Dst + perm(stage, ra->c->dims.bs, t) * n, Src + t * n, sizeof(double) * (size_t)n);
}

/* Dst = P_iᵀ Src (Dst[t] = Src[π(t)]) */
static void unpermute_rows(const ref_adapter *ra, int64_t stage, const double *Src, int64_t n, double *Dst) {
    for (int64_t t = 0; t < ra->O; t++)
        memcpy(Dst + t * n, Src + perm(stage, ra->c->dims.bs, t) * n, sizeof(double) * (size_t)n);
}

/* Z = blockdiag(N_{i,k}) · V (transposed: blockdiag(N_{i,k}ᵀ) · V), V and Z O×n. */
static void apply_blocks(const ref_adapter *ra, const double *Ni, bool transposed, const double *V, int64_t n, double *Z) {
    int64_t nb = ra->c->dims.nb, b = ra->c->dims.bs, nn = b * b;
    for (int64_t k = 0; k < nb; k++)
        for (int64_t mu = 0; mu < b; mu++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0.0;
                for (int64_t nu = 0; nu < b; nu++) {
                    double e = transposed ? Ni[k * nn + nu * b + mu] : Ni[k * nn + mu * b + nu];
                    s += e * V[(k * b + nu) * n + j];
                }
                Z[(k * b + mu) * n + j] = s;
            }
}

/* The Cayley state and N (stages·nb·b·b); false when out of memory. */
static bool boft_matrices(const ref_adapter *ra, ref_cayley *cy, double **Nout) {
    const lyco_dims *d = &ra->c->dims;
    int64_t nblk = d->stages * d->nb, b = d->bs, nn = b * b;
    double m = ra->c->m;
    double *mem = ref_alloc(ra, ref_cayley_size(nblk, b));
    double *N = ref_alloc(ra, nblk * nn);
    if (!mem || !N) return false;
    ref_cayley_fwd(cy, mem, nblk, b, ra->t[LYCO_OFT_BLOCKS], ra->c->a->constraint);
    for (int64_t k = 0; k < nblk; k++)
        for (int64_t a = 0; a < b; a++)
            for (int64_t c = 0; c < b; c++) {
                int64_t i = k * nn + a * b + c;
                N[i] = m == 1.0 ? cy->R[i] : m * cy->R[i] + (1.0 - m) * (a == c ? 1.0 : 0.0);
            }
    *Nout = N;
    return true;
}

/* Xs[i] = input of stage i, Xs[M] = output before the rescale (Xs: (M+1)·O·n); tmp: 2·O·n. */
static void forward_stages(const ref_adapter *ra, const double *N, const double *X, int64_t n, double *Xs, double *tmp) {
    const lyco_dims *d = &ra->c->dims;
    int64_t On = ra->O * n, blk = d->nb * d->bs * d->bs;
    double *Wh = tmp, *Z = tmp + On;
    memcpy(Xs, X, sizeof(double) * (size_t)On);
    for (int64_t i = 0; i < d->stages; i++) {
        permute_rows(ra, i, Xs + i * On, n, Wh);
        apply_blocks(ra, N + i * blk, false, Wh, n, Z);
        unpermute_rows(ra, i, Z, n, Xs + (i + 1) * On);
    }
}

static double rho(const ref_adapter *ra, int64_t o) { return ra->t[LYCO_RESCALE] ? ra->t[LYCO_RESCALE][o] : 1.0; }

static void rows(const ref_adapter *ra, const double *X, int64_t n, double *Y) {
    const lyco_dims *d = &ra->c->dims;
    int64_t On = ra->O * n;
    ref_cayley cy;
    double *N;
    if (!boft_matrices(ra, &cy, &N)) return;
    double *Xs = ref_alloc(ra, (d->stages + 1) * On), *tmp = ref_alloc(ra, 2 * On);
    if (!Xs || !tmp) return;
    forward_stages(ra, N, X, n, Xs, tmp);
    const double *XM = Xs + d->stages * On;
    for (int64_t o = 0; o < ra->O; o++)
        for (int64_t j = 0; j < n; j++) Y[o * n + j] = rho(ra, o) * XM[o * n + j];
}

static void rows_bwd(ref_adapter *ra, const double *X, const double *GY, int64_t n, double *GX) {
    const lyco_dims *d = &ra->c->dims;
    int64_t O = ra->O, On = O * n, nb = d->nb, b = d->bs, nn = b * b, blk = nb * nn;
    double m = ra->c->m;
    ref_cayley cy;
    double *N;
    if (!boft_matrices(ra, &cy, &N)) return;
    double *Xs = ref_alloc(ra, (d->stages + 1) * On), *tmp = ref_alloc(ra, 2 * On);
    double *G = ref_alloc(ra, On), *Gh = ref_alloc(ra, On), *Wh = ref_alloc(ra, On), *Z = ref_alloc(ra, On);
    double *GR = ref_alloc(ra, d->stages * blk);
    if (!Xs || !tmp || !G || !Gh || !Wh || !Z || !GR) return;
    forward_stages(ra, N, X, n, Xs, tmp);

    /* the rescale: Y = ρ ⊙ X_M */
    const double *XM = Xs + d->stages * On;
    for (int64_t o = 0; o < O; o++) {
        double s = 0.0;
        for (int64_t j = 0; j < n; j++) {
            G[o * n + j] = rho(ra, o) * GY[o * n + j];
            s += GY[o * n + j] * XM[o * n + j];
        }
        if (ra->g[LYCO_RESCALE]) ra->g[LYCO_RESCALE][o] += s;
    }

    /* stages in reverse: G holds ∂L/∂X_{i+1} on entry, ∂L/∂X_i on exit */
    for (int64_t i = d->stages - 1; i >= 0; i--) {
        permute_rows(ra, i, Xs + i * On, n, Wh);   /* Ŵ = P_i X_i */
        permute_rows(ra, i, G, n, Gh);             /* Ĝ = P_i G_{i+1} */
        for (int64_t k = 0; k < nb; k++)
            for (int64_t mu = 0; mu < b; mu++)
                for (int64_t nu = 0; nu < b; nu++) {
                    double s = 0.0;   /* G_N_{i,k}[μ, ν] */
                    for (int64_t j = 0; j < n; j++) s += Gh[(k * b + mu) * n + j] * Wh[(k * b + nu) * n + j];
                    GR[i * blk + k * nn + mu * b + nu] = m * s;
                }
        apply_blocks(ra, N + i * blk, true, Gh, n, Z);   /* blockdiag(Nᵀ) Ĝ */
        unpermute_rows(ra, i, Z, n, G);                  /* G_i = P_iᵀ (…) */
    }
    if (ra->g[LYCO_OFT_BLOCKS]) ref_note_skew_cancel(ra, ref_cayley_bwd(&cy, GR, ra->g[LYCO_OFT_BLOCKS]));
    if (GX) memcpy(GX, G, sizeof(double) * (size_t)On);
}

const ref_algo ref_boft = {.rows = rows, .rows_bwd = rows_bwd};
