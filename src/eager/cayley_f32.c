/*
 * cayley_f32.c — the OFT/BOFT eager twins' Cayley transform and its adjoint (formulas, op order
 * and rounding points in cayley_f32.h). The Q0/constraint ops round to T like upstream's tensor
 * ops in the blocks' dtype; the identity, the inverse and the product are plain fp32 arithmetic
 * (built with -ffp-contract=off, so each float operation rounds once to fp32).
 */
#include <math.h>
#include <string.h>

#include "cayley_f32.h"

/* X = A^{-1} (n×n, fp32) by Gauss–Jordan elimination with partial pivoting on [A | I].
   A is overwritten. I − Q with Q skew-symmetric is never singular (|eigenvalues| ≥ 1). */
static void invert_f32(int64_t n, float *A, float *X) {
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++) X[a * n + b] = a == b ? 1.0f : 0.0f;
    for (int64_t c = 0; c < n; c++) {
        int64_t p = c;
        for (int64_t a = c + 1; a < n; a++)
            if (fabsf(A[a * n + c]) > fabsf(A[p * n + c])) p = a;
        if (p != c)
            for (int64_t b = 0; b < n; b++) {
                float t = A[c * n + b];
                A[c * n + b] = A[p * n + b];
                A[p * n + b] = t;
                t = X[c * n + b];
                X[c * n + b] = X[p * n + b];
                X[p * n + b] = t;
            }
        float piv = A[c * n + c];
        for (int64_t b = 0; b < n; b++) {
            A[c * n + b] /= piv;
            X[c * n + b] /= piv;
        }
        for (int64_t a = 0; a < n; a++) {
            if (a == c) continue;
            float f = A[a * n + c];
            if (f == 0.0f) continue;
            for (int64_t b = 0; b < n; b++) {
                A[a * n + b] -= f * A[c * n + b];
                X[a * n + b] -= f * X[c * n + b];
            }
        }
    }
}

/* C = op(A)·op(B) for n×n fp32 blocks, fp32 accumulation, no rounding beyond fp32 */
static void mm_f32(int64_t n, bool ta, const float *A, bool tb, const float *B, float *C) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (int64_t k = 0; k < n; k++) s += (ta ? A[k * n + i] : A[i * n + k]) * (tb ? B[j * n + k] : B[k * n + j]);
            C[i * n + j] = s;
        }
}

bool eg_cayley_fwd(const eg_adapter *ea, eg_cayley *cy, const float *B, int64_t nblk, int64_t n, double kc) {
    lyco_dtype T = ea->T;
    int64_t nn = n * n, all = nblk * nn;
    memset(cy, 0, sizeof *cy);
    cy->nblk = nblk;
    cy->n = n;
    cy->T = T;
    cy->kc = kc;
    cy->Q0 = eg_alloc(ea, all);
    cy->A = eg_alloc(ea, all);
    cy->Q = eg_alloc(ea, all);
    cy->Ap = eg_alloc(ea, all);
    cy->inv = eg_alloc(ea, all);
    cy->R = eg_alloc(ea, all);
    float *Am = eg_alloc(ea, nn);
    if (!cy->Q0 || !cy->A || !cy->Q || !cy->Ap || !cy->inv || !cy->R || !Am) return false;

    /* Q0 = B − Bᵀ in T */
    for (int64_t k = 0; k < nblk; k++)
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++)
                cy->Q0[k * nn + a * n + b] = eg_rnd(B[k * nn + a * n + b] - B[k * nn + b * n + a], T);

    /* the norm constraint, one norm over all blocks, ops in T */
    memcpy(cy->Q, cy->Q0, sizeof(float) * (size_t)all);
    if (kc > 0.0) {
        float ss = 0.0f;
        for (int64_t i = 0; i < all; i++) ss += cy->Q0[i] * cy->Q0[i];
        cy->qn = eg_rnd(sqrtf(ss), T);
        cy->qn2 = eg_rnd(cy->qn + (float)1e-8, T);
        cy->active = cy->qn2 > eg_rnd((float)kc, T);
        if (cy->active)
            for (int64_t i = 0; i < all; i++) {
                cy->A[i] = eg_rnd(cy->Q0[i] * (float)kc, T);
                cy->Q[i] = eg_rnd(cy->A[i] / cy->qn2, T);
            }
    }

    /* R = (I + Q)(I − Q)^{-1}, fp32 */
    for (int64_t k = 0; k < nblk; k++) {
        const float *Qk = cy->Q + k * nn;
        float *Apk = cy->Ap + k * nn;
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++) {
                float eye = a == b ? 1.0f : 0.0f;
                Apk[a * n + b] = eye + Qk[a * n + b];
                Am[a * n + b] = eye - Qk[a * n + b];
            }
        invert_f32(n, Am, cy->inv + k * nn);
        mm_f32(n, false, Apk, false, cy->inv + k * nn, cy->R + k * nn);
    }
    return true;
}

bool eg_cayley_bwd(const eg_adapter *ea, const eg_cayley *cy, const float *GR, float *GB) {
    lyco_dtype T = cy->T;
    int64_t n = cy->n, nn = n * n, all = cy->nblk * nn;
    float *GQ = eg_alloc(ea, all), *GAp = eg_alloc(ea, nn), *Ginv = eg_alloc(ea, nn), *T1 = eg_alloc(ea, nn),
          *nGAm = eg_alloc(ea, nn);
    if (!GQ || !GAp || !Ginv || !T1 || !nGAm) return false;

    /* through R = Ap·inv, inv = Am^{-1}, Ap = I + Q, Am = I − Q */
    for (int64_t k = 0; k < cy->nblk; k++) {
        const float *Gk = GR + k * nn, *ik = cy->inv + k * nn, *Apk = cy->Ap + k * nn;
        mm_f32(n, false, Gk, true, ik, GAp);       /* G_Ap = G_R · invᵀ */
        mm_f32(n, true, Apk, false, Gk, Ginv);     /* G_inv = Apᵀ · G_R */
        mm_f32(n, false, Ginv, true, ik, T1);      /* G_inv · invᵀ */
        mm_f32(n, true, ik, false, T1, nGAm);      /* invᵀ · (…) = −G_Am */
        for (int64_t i = 0; i < nn; i++) GQ[k * nn + i] = eg_rnd(eg_rnd(GAp[i], T) + eg_rnd(nGAm[i], T), T);
    }

    /* through Q = rnd(rnd(Q0·κc) / qn2), qn2 = qn + 1e-8, qn = ‖Q0‖ */
    if (cy->active) {
        float kcf = (float)cy->kc, gsum = 0.0f;
        for (int64_t i = 0; i < all; i++) {
            float t = eg_rnd(eg_rnd(cy->A[i] / cy->qn2, T) / cy->qn2, T);
            gsum += eg_rnd(-GQ[i] * t, T);
        }
        float gqn2 = eg_rnd(gsum, T);
        for (int64_t i = 0; i < all; i++) {
            float ga = eg_rnd(GQ[i] / cy->qn2, T);
            /* the norm's backward: (Q0 / qn) · G_qn, two roundings (0 at qn = 0) */
            float gn = cy->qn == 0.0f ? 0.0f : eg_rnd(eg_rnd(cy->Q0[i] / cy->qn, T) * gqn2, T);
            GQ[i] = eg_rnd(eg_rnd(ga * kcf, T) + gn, T);
        }
    }

    /* Q0 = B − Bᵀ */
    for (int64_t k = 0; k < cy->nblk; k++)
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++)
                GB[k * nn + a * n + b] = eg_rnd(GQ[k * nn + a * n + b] - GQ[k * nn + b * n + a], T);
    return true;
}
