/*
 * cayley.c — the Cayley transform with the norm constraint, and its adjoint (see cayley.h for
 * the formulas; ALGORITHMS.md §2.4). fp64, plain loops; built with -ffp-contract=off like the
 * rest of the oracle. Shapes: nblk blocks of n×n, compact row-major.
 */
#include <math.h>
#include <string.h>

#include "cayley.h"
#include "ref.h"

int64_t ref_cayley_size(int64_t nblk, int64_t n) { return 5 * nblk * n * n + 2 * n * n; }

void ref_cayley_fwd(ref_cayley *cy, double *mem, int64_t nblk, int64_t n, const double *B, double kc) {
    int64_t nn = n * n, all = nblk * nn;
    memset(cy, 0, sizeof *cy);
    cy->nblk = nblk;
    cy->n = n;
    cy->kc = kc;
    cy->Q0 = mem;
    cy->Q = mem + all;
    cy->R = mem + 2 * all;
    cy->Ainv = mem + 3 * all;
    cy->work = mem + 4 * all;

    /* Q0 = B − Bᵀ per block, and one Frobenius norm over all blocks */
    double ss = 0.0;
    for (int64_t k = 0; k < nblk; k++)
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++) {
                double q = B[k * nn + a * n + b] - B[k * nn + b * n + a];
                cy->Q0[k * nn + a * n + b] = q;
                ss += q * q;
            }
    cy->q0norm = sqrt(ss);
    double nu = cy->q0norm + 1e-8;
    cy->active = kc > 0.0 && nu > kc;
    cy->scale = cy->active ? kc / nu : 1.0;
    for (int64_t i = 0; i < all; i++) cy->Q[i] = cy->active ? cy->Q0[i] * cy->scale : cy->Q0[i];

    /* per block: Ainv = (I − Q)^{-1} by solving (I − Q)·X = I; R = (I + Q)·Ainv */
    double *A = cy->work + all, *X = A + nn;
    for (int64_t k = 0; k < nblk; k++) {
        const double *Qk = cy->Q + k * nn;
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++) {
                A[a * n + b] = (a == b ? 1.0 : 0.0) - Qk[a * n + b];
                X[a * n + b] = a == b ? 1.0 : 0.0;
            }
        ref_solve(n, A, X, n);
        memcpy(cy->Ainv + k * nn, X, sizeof(double) * (size_t)nn);
        double *Rk = cy->R + k * nn;
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++) {
                double s = 0.0;
                for (int64_t c = 0; c < n; c++) s += ((a == c ? 1.0 : 0.0) + Qk[a * n + c]) * X[c * n + b];
                Rk[a * n + b] = s;
            }
    }
}

double ref_cayley_bwd(const ref_cayley *cy, const double *GR, double *GB) {
    int64_t n = cy->n, nn = n * n, all = cy->nblk * nn;
    double *GQ = cy->work, *T = cy->work + all;

    /* G_Q_k = (I + R_k)ᵀ · G_R_k · Ainv_kᵀ */
    for (int64_t k = 0; k < cy->nblk; k++) {
        const double *Rk = cy->R + k * nn, *Gk = GR + k * nn, *Ak = cy->Ainv + k * nn;
        for (int64_t a = 0; a < n; a++)        /* T = (I + R)ᵀ G_R */
            for (int64_t b = 0; b < n; b++) {
                double s = 0.0;
                for (int64_t c = 0; c < n; c++) s += ((a == c ? 1.0 : 0.0) + Rk[c * n + a]) * Gk[c * n + b];
                T[a * n + b] = s;
            }
        for (int64_t a = 0; a < n; a++)        /* G_Q = T · Ainvᵀ */
            for (int64_t b = 0; b < n; b++) {
                double s = 0.0;
                for (int64_t c = 0; c < n; c++) s += T[a * n + c] * Ak[b * n + c];
                GQ[k * nn + a * n + b] = s;
            }
    }

    /* through the constraint: Q = κc·Q0/ν, ν = ‖Q0‖ + 1e-8 */
    if (cy->active) {
        double nu = cy->q0norm + 1e-8, dot = 0.0;
        for (int64_t i = 0; i < all; i++) dot += GQ[i] * cy->Q0[i];
        /* at Q0 = 0 the norm has no derivative; its term is 0·Q0 there */
        double c2 = cy->q0norm > 0.0 ? cy->kc / (nu * nu) * dot / cy->q0norm : 0.0;
        for (int64_t i = 0; i < all; i++) GQ[i] = cy->scale * GQ[i] - c2 * cy->Q0[i];
    }

    /* Q0 = B − Bᵀ; the off-diagonal differences cancel by sqrt(Σ(|g_ab| + |g_ba|)² / Σ(g_ab − g_ba)²) */
    double terms_sq = 0.0, diff_sq = 0.0;
    for (int64_t k = 0; k < cy->nblk; k++)
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++) {
                double g_ab = GQ[k * nn + a * n + b], g_ba = GQ[k * nn + b * n + a];
                GB[k * nn + a * n + b] += g_ab - g_ba;
                if (a != b) {
                    terms_sq += (fabs(g_ab) + fabs(g_ba)) * (fabs(g_ab) + fabs(g_ba));
                    diff_sq += (g_ab - g_ba) * (g_ab - g_ba);
                }
            }
    return diff_sq > 0.0 ? sqrt(terms_sq / diff_sq) : 1.0;
}
