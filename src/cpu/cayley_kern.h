/*
 * cayley_kern.h — the per-block kernels of cayley.c (the fp32 Cayley transform with one step of
 * iterative refinement, and its fp64 adjoint; formulas in cayley.h), written once and included by
 * cayley.c once per instruction set: KN(name) gives each inclusion its own names (name_v3 under
 * `#pragma GCC target("arch=x86-64-v3")` with fp-contract off, name_base for the portable build),
 * as dense.c does with gemm_kern.h (isa.h). Not a public header.
 *
 * Shapes: one block of n×n, compact row-major. The n×n products go row by row: for row a, t[b]
 * starts at its initial value and takes the terms j = 0, 1, …, n−1 in order, 16 (then 8)
 * columns at a time in vector registers (independent add chains) — every element sees exactly
 * the operations of the dot-product form
 * Σ_j A[a,j]·B[j,b] (the dot form was one latency-bound chain per element: ~1.2 ms of Cayley per
 * call for 80 blocks of 16). No FMA: the v3 copy is compiled with fp-contract off and the
 * products are written as a·b + c, so both copies round a·b and the sum separately — bitwise the
 * same results on every x86-64, and the same as before the vectorisation.
 * Expects from the includer: KN, the lk8f / lk4d vector types, <math.h>, <string.h>.
 */

/* X = (I − Q)^{-1} by Gauss–Jordan with partial pivoting on M = I − Q (overwritten). */
static void KN(invert)(int64_t n, float *restrict M, float *restrict X) {
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++) X[a * n + b] = a == b ? 1.0f : 0.0f;
    for (int64_t col = 0; col < n; col++) {
        int64_t piv = col;
        for (int64_t r = col + 1; r < n; r++)
            if (fabsf(M[r * n + col]) > fabsf(M[piv * n + col])) piv = r;
        if (piv != col)
            for (int64_t k = 0; k < n; k++) {
                float t = M[col * n + k];
                M[col * n + k] = M[piv * n + k];
                M[piv * n + k] = t;
                t = X[col * n + k];
                X[col * n + k] = X[piv * n + k];
                X[piv * n + k] = t;
            }
        float inv = 1.0f / M[col * n + col];
        for (int64_t k = 0; k < n; k++) {
            M[col * n + k] *= inv;
            X[col * n + k] *= inv;
        }
        const float *mc = M + col * n, *xc = X + col * n;
        for (int64_t r = 0; r < n; r++) {
            if (r == col) continue;
            float f = M[r * n + col];
            if (f == 0.0f) continue;
            float *mr = M + r * n, *xr = X + r * n;
            for (int64_t k = 0; k < n; k++) {
                mr[k] -= f * mc[k];
                xr[k] -= f * xc[k];
            }
        }
    }
}

/* t[b] += Σ_j x[j]·B[j·n + b], j in order (fp32) */
static void KN(rowmul_f)(int64_t n, const float *x, const float *B, float *restrict t) {
    int64_t b0 = 0;
    for (; b0 + 16 <= n; b0 += 16) {   /* two independent add chains */
        lk8f a0, a1, v0, v1;
        memcpy(&a0, t + b0, sizeof a0);
        memcpy(&a1, t + b0 + 8, sizeof a1);
        for (int64_t j = 0; j < n; j++) {
            memcpy(&v0, B + j * n + b0, sizeof v0);
            memcpy(&v1, B + j * n + b0 + 8, sizeof v1);
            a0 = a0 + x[j] * v0;
            a1 = a1 + x[j] * v1;
        }
        memcpy(t + b0, &a0, sizeof a0);
        memcpy(t + b0 + 8, &a1, sizeof a1);
    }
    for (; b0 + 8 <= n; b0 += 8) {
        lk8f acc, v;
        memcpy(&acc, t + b0, sizeof acc);
        for (int64_t j = 0; j < n; j++) {
            memcpy(&v, B + j * n + b0, sizeof v);
            acc = acc + x[j] * v;
        }
        memcpy(t + b0, &acc, sizeof acc);
    }
    for (int64_t b = b0; b < n; b++)
        for (int64_t j = 0; j < n; j++) t[b] += x[j] * B[j * n + b];
}

/* the same in double */
static void KN(rowmul_d)(int64_t n, const double *x, const double *B, double *restrict t) {
    int64_t b0 = 0;
    for (; b0 + 16 <= n; b0 += 16) {   /* four independent add chains */
        lk4d a[4], v;
        for (int q = 0; q < 4; q++) memcpy(&a[q], t + b0 + 4 * q, sizeof a[q]);
        for (int64_t j = 0; j < n; j++)
            for (int q = 0; q < 4; q++) {
                memcpy(&v, B + j * n + b0 + 4 * q, sizeof v);
                a[q] = a[q] + x[j] * v;
            }
        for (int q = 0; q < 4; q++) memcpy(t + b0 + 4 * q, &a[q], sizeof a[q]);
    }
    for (; b0 + 8 <= n; b0 += 8) {
        lk4d a0, a1, v0, v1;
        memcpy(&a0, t + b0, sizeof a0);
        memcpy(&a1, t + b0 + 4, sizeof a1);
        for (int64_t j = 0; j < n; j++) {
            memcpy(&v0, B + j * n + b0, sizeof v0);
            memcpy(&v1, B + j * n + b0 + 4, sizeof v1);
            a0 = a0 + x[j] * v0;
            a1 = a1 + x[j] * v1;
        }
        memcpy(t + b0, &a0, sizeof a0);
        memcpy(t + b0 + 4, &a1, sizeof a1);
    }
    for (int64_t b = b0; b < n; b++)
        for (int64_t j = 0; j < n; j++) t[b] += x[j] * B[j * n + b];
}

/* T = A·B (fp32, from 0). */
static void KN(product)(int64_t n, const float *A, const float *B, float *restrict T) {
    for (int64_t a = 0; a < n; a++) {
        for (int64_t b = 0; b < n; b++) T[a * n + b] = 0.0f;
        KN(rowmul_f)(n, A + a * n, B, T + a * n);
    }
}

/* Y += A·E (n×n, fp32; Y may be A): T = A·E first (the refinement correction). */
static void KN(refine)(int64_t n, const float *A, const float *E, float *T, float *Y) {
    KN(product)(n, A, E, T);
    for (int64_t i = 0; i < n * n; i++) Y[i] += T[i];
}

/* Out = rnd_f32(base − X + Q·X) in double, base = I (two_q false) or 2Q (two_q): the refinement
   residuals I − (I − Q)·A = I − A + Q·A (X = A) and 2Q − (I − Q)·(R − I) (X = R − I).
   d: 2·nn + n doubles of scratch (X and Q in double, one row). */
static void KN(residual)(int64_t n, const float *Q, const float *X, bool two_q, double *restrict d, float *restrict Out) {
    int64_t nn = n * n;
    double *Xd = d, *Qd = d + nn, *acc = Qd + nn;
    for (int64_t i = 0; i < nn; i++) {
        Xd[i] = (double)X[i];
        Qd[i] = (double)Q[i];
    }
    for (int64_t a = 0; a < n; a++) {
        for (int64_t b = 0; b < n; b++) acc[b] = (two_q ? 2.0 * Qd[a * n + b] : (a == b ? 1.0 : 0.0)) - Xd[a * n + b];
        KN(rowmul_d)(n, Qd + a * n, Xd, acc);
        for (int64_t b = 0; b < n; b++) Out[a * n + b] = (float)acc[b];
    }
}

/* One block forward: A = (I − Q)^{-1} and R − I = 2·A·Q, each refined once, from Q (n×n).
   Scratch: M, Tm (n² floats each), dsc (2·n² + n doubles). */
static void KN(block_fwd)(int64_t n, const float *Q, float *Ak, float *Rk, float *M, float *Tm, double *dsc) {
    int64_t nn = n * n;
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++) M[a * n + b] = (a == b ? 1.0f : 0.0f) - Q[a * n + b];
    KN(invert)(n, M, Ak);
    /* one refinement step: E = I − (I − Q)·A = I − A + Q·A, A ← A + A·E */
    KN(residual)(n, Q, Ak, false, dsc, M);
    KN(refine)(n, Ak, M, Tm, Ak);
    /* R − I = 2·A·Q, refined: r = 2Q − (I − Q)·(R − I), (R − I) ← (R − I) + A·r */
    KN(product)(n, Ak, Q, Rk);
    for (int64_t i = 0; i < nn; i++) Rk[i] *= 2.0f;
    KN(residual)(n, Q, Rk, true, dsc, M);
    KN(refine)(n, Ak, M, Tm, Rk);
}

/* One block of the adjoint: Ok = G_Q = 2·Aᵀ·G_R·Aᵀ in double. Scratch T, At, Gd: n² doubles each. */
static void KN(block_bwd)(int64_t n, const float *Ak, const float *Gk, double *Ok, double *T, double *At, double *Gd) {
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++) {
            At[a * n + b] = (double)Ak[b * n + a];
            Gd[a * n + b] = (double)Gk[a * n + b];
        }
    for (int64_t a = 0; a < n; a++) {        /* T = Aᵀ·G_R */
        for (int64_t b = 0; b < n; b++) T[a * n + b] = 0.0;
        KN(rowmul_d)(n, At + a * n, Gd, T + a * n);
    }
    for (int64_t a = 0; a < n; a++) {        /* G_Q = 2·T·Aᵀ */
        double *o = Ok + a * n;
        for (int64_t b = 0; b < n; b++) o[b] = 0.0;
        KN(rowmul_d)(n, T + a * n, At, o);
        for (int64_t b = 0; b < n; b++) o[b] *= 2.0;
    }
}
