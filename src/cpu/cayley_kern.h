/*
 * cayley_kern.h — the per-block kernels of cayley.c (the fp32 Cayley transform with one step of
 * iterative refinement, and its fp64 adjoint; formulas in cayley.h), written once and included by
 * cayley.c once per instruction set: KN(name) gives each inclusion its own names (name_v3 under
 * `#pragma GCC target("arch=x86-64-v3")` with fp-contract off, name_base for the portable build),
 * as dense.c does with gemm_kern.h (isa.h). Not a public header.
 *
 * Shapes: one block of n×n, compact row-major. The n×n products (fp32 T += X·B, fp64 the same)
 * take CK_RF (fp32) / CK_RD (fp64) rows per pass: for each row a, t[b] starts at its initial
 * value and takes the terms j = 0, 1, …, n−1 in order, 16 (then 8) fp32 or 8 fp64 columns at a
 * time in vector registers, the rows of a pass sharing each load of B — every element sees
 * exactly the operations of the dot-product form Σ_j A[a,j]·B[j,b] (the dot form was one
 * latency-bound chain per element: ~1.2 ms of Cayley per call for 80 blocks of 16; one row per
 * pass, two fp32 chains, was still latency-bound; with the row passes, the elimination's pivot
 * search in a register and its row updates without an overlap check, 80 blocks of 16 went from
 * ~150 to ~115 µs at 1 thread: docs/bench-cpu.md session 24, issue 6). No FMA: the v3 copy is
 * compiled with fp-contract off and the products are written as a·b + c, so both copies round
 * a·b and the sum separately — bitwise the same results on every x86-64, and the same as before
 * the vectorisation.
 * Expects from the includer: KN, CK_RF, CK_RD (rows per pass), the lk8f / lk4d vector types,
 * <math.h>, <string.h>.
 */

/* r[k] −= f·c[k], k < m (one row update of the elimination; restrict: the compiler vectorises it
   without an overlap check) */
static inline void KN(axpy)(int64_t m, float f, const float *restrict c, float *restrict r) {
    for (int64_t k = 0; k < m; k++) r[k] -= f * c[k];
}

/* X = (I − Q)^{-1} by Gauss–Jordan with partial pivoting on M = I − Q (overwritten). The pivot
   search keeps the largest |M[r, col]| so far in a register (the same strict >, so the
   same pivot, without a load in its compare chain). */
static void KN(invert)(int64_t n, float *restrict M, float *restrict X) {
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++) X[a * n + b] = a == b ? 1.0f : 0.0f;
    for (int64_t col = 0; col < n; col++) {
        int64_t piv = col;
        float best = fabsf(M[col * n + col]);
        for (int64_t r = col + 1; r < n; r++) {
            float v = fabsf(M[r * n + col]);
            if (v > best) {
                best = v;
                piv = r;
            }
        }
        if (piv != col) {
            for (int64_t k = 0; k < n; k++) {
                float t = M[col * n + k];
                M[col * n + k] = M[piv * n + k];
                M[piv * n + k] = t;
            }
            for (int64_t k = 0; k < n; k++) {
                float t = X[col * n + k];
                X[col * n + k] = X[piv * n + k];
                X[piv * n + k] = t;
            }
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
            KN(axpy)(n, f, mc, M + r * n);
            KN(axpy)(n, f, xc, X + r * n);
        }
    }
}

/* Rows [0, nr) of T (ld n) += X·B on the columns [b0, b0 + 8·nv) (fp32): t[b] takes the terms
   x[j]·B[j·n + b], j = 0, 1, …, n−1 in order; the nr rows share each load of B and run nr·nv
   independent add chains (one row's chains alone are latency-bound). nr ≤ CK_RF, nv ≤ 2. */
static inline __attribute__((always_inline)) void KN(cols_f)(int64_t n, int nr, int nv, int64_t b0, const float *X, const float *B, float *restrict T) {
    lk8f c[CK_RF][2], v[2];
    for (int r = 0; r < nr; r++)
        for (int q = 0; q < nv; q++) memcpy(&c[r][q], T + r * n + b0 + 8 * q, sizeof c[r][q]);
    for (int64_t j = 0; j < n; j++) {
        for (int q = 0; q < nv; q++) memcpy(&v[q], B + j * n + b0 + 8 * q, sizeof v[q]);
        for (int r = 0; r < nr; r++) {
            float x = X[r * n + j];
            for (int q = 0; q < nv; q++) c[r][q] = c[r][q] + x * v[q];
        }
    }
    for (int r = 0; r < nr; r++)
        for (int q = 0; q < nv; q++) memcpy(T + r * n + b0 + 8 * q, &c[r][q], sizeof c[r][q]);
}

/* Rows [0, nr) of T += X·B (fp32, every column): 16 columns, then 8, then one at a time. */
static inline __attribute__((always_inline)) void KN(rows_f)(int64_t n, int nr, const float *X, const float *B, float *restrict T) {
    int64_t b0 = 0;
    for (; b0 + 16 <= n; b0 += 16) KN(cols_f)(n, nr, 2, b0, X, B, T);
    for (; b0 + 8 <= n; b0 += 8) KN(cols_f)(n, nr, 1, b0, X, B, T);
    for (int r = 0; r < nr; r++)
        for (int64_t b = b0; b < n; b++)
            for (int64_t j = 0; j < n; j++) T[r * n + b] += X[r * n + j] * B[j * n + b];
}

/* T += X·B (n×n, fp32), CK_RF rows per pass. */
static void KN(mul_f)(int64_t n, const float *X, const float *B, float *restrict T) {
    int64_t a = 0;
    for (; a + CK_RF <= n; a += CK_RF) KN(rows_f)(n, CK_RF, X + a * n, B, T + a * n);
    for (; a < n; a++) KN(rows_f)(n, 1, X + a * n, B, T + a * n);
}

/* the same in double: 8 columns as two 4-lane vectors, CK_RD rows per pass (GCC keeps these
   small accumulator arrays in registers; a 16-column pass of four vectors per row did not) */
static inline __attribute__((always_inline)) void KN(cols_d)(int64_t n, int nr, int64_t b0, const double *X, const double *B, double *restrict T) {
    lk4d c[CK_RD][2], v[2];
    for (int r = 0; r < nr; r++)
        for (int q = 0; q < 2; q++) memcpy(&c[r][q], T + r * n + b0 + 4 * q, sizeof c[r][q]);
    for (int64_t j = 0; j < n; j++) {
        for (int q = 0; q < 2; q++) memcpy(&v[q], B + j * n + b0 + 4 * q, sizeof v[q]);
        for (int r = 0; r < nr; r++) {
            double x = X[r * n + j];
            for (int q = 0; q < 2; q++) c[r][q] = c[r][q] + x * v[q];
        }
    }
    for (int r = 0; r < nr; r++)
        for (int q = 0; q < 2; q++) memcpy(T + r * n + b0 + 4 * q, &c[r][q], sizeof c[r][q]);
}

static inline __attribute__((always_inline)) void KN(rows_d)(int64_t n, int nr, const double *X, const double *B, double *restrict T) {
    int64_t b0 = 0;
    for (; b0 + 8 <= n; b0 += 8) KN(cols_d)(n, nr, b0, X, B, T);
    for (int r = 0; r < nr; r++)
        for (int64_t b = b0; b < n; b++)
            for (int64_t j = 0; j < n; j++) T[r * n + b] += X[r * n + j] * B[j * n + b];
}

static void KN(mul_d)(int64_t n, const double *X, const double *B, double *restrict T) {
    int64_t a = 0;
    for (; a + CK_RD <= n; a += CK_RD) KN(rows_d)(n, CK_RD, X + a * n, B, T + a * n);
    for (; a < n; a++) KN(rows_d)(n, 1, X + a * n, B, T + a * n);
}

/* T = A·B (fp32, from 0). */
static void KN(product)(int64_t n, const float *A, const float *B, float *restrict T) {
    for (int64_t i = 0; i < n * n; i++) T[i] = 0.0f;
    KN(mul_f)(n, A, B, T);
}

/* Y += A·E (n×n, fp32; Y may be A): T = A·E first (the refinement correction). */
static void KN(refine)(int64_t n, const float *A, const float *E, float *T, float *Y) {
    KN(product)(n, A, E, T);
    for (int64_t i = 0; i < n * n; i++) Y[i] += T[i];
}

/* Out = rnd_f32(base − X + Q·X) in double, base = I (two_q false) or 2Q (two_q): the refinement
   residuals I − (I − Q)·A = I − A + Q·A (X = A) and 2Q − (I − Q)·(R − I) (X = R − I).
   d: 3·nn doubles of scratch (X, Q and the residual in double). */
static void KN(residual)(int64_t n, const float *Q, const float *X, bool two_q, double *restrict d, float *restrict Out) {
    int64_t nn = n * n;
    double *Xd = d, *Qd = d + nn, *acc = Qd + nn;
    for (int64_t i = 0; i < nn; i++) {
        Xd[i] = (double)X[i];
        Qd[i] = (double)Q[i];
    }
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++) acc[a * n + b] = (two_q ? 2.0 * Qd[a * n + b] : (a == b ? 1.0 : 0.0)) - Xd[a * n + b];
    KN(mul_d)(n, Qd, Xd, acc);
    for (int64_t i = 0; i < nn; i++) Out[i] = (float)acc[i];
}

/* One block forward: A = (I − Q)^{-1} and R − I = 2·A·Q, each refined once, from Q (n×n).
   Scratch: M, Tm (n² floats each), dsc (3·n² doubles). */
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
    for (int64_t i = 0; i < n * n; i++) T[i] = Ok[i] = 0.0;
    KN(mul_d)(n, At, Gd, T);                 /* T = Aᵀ·G_R */
    KN(mul_d)(n, T, At, Ok);                 /* G_Q = 2·T·Aᵀ */
    for (int64_t i = 0; i < n * n; i++) Ok[i] *= 2.0;
}

/* ---- eight blocks at once (n ≤ CAYLEY_BATCH_N; cayley.c): lane l of every vector is block l's
   element, matrices n×n of lk8f (two lk4d halves in double), row-major. Each function below is its one-block
   namesake above with every scalar operation done per lane, in the same order (pivots chosen per
   lane by the same strict >, the swap and the f = 0 skip as per-lane selects): bitwise the
   one-block results, without the one-block code's short loops, tails and branches (at n = 10 a
   block cost ~2600 cycles, a quarter of a BOFT bypass forward). ---- */
typedef int KN(lk8i) __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) lk8f KN(sel8)(KN(lk8i) m, lk8f a, lk8f b) {
    return (lk8f)(((KN(lk8i))a & m) | ((KN(lk8i))b & ~m));
}

static void KN(invert8)(int64_t n, lk8f *restrict M, lk8f *restrict X) {
    const lk8f one = (lk8f){0} + 1.0f, zero = (lk8f){0};
    const KN(lk8i) absm = (KN(lk8i)){0} + 0x7fffffff;
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++) X[a * n + b] = a == b ? one : zero;
    for (int64_t col = 0; col < n; col++) {
        KN(lk8i) piv = (KN(lk8i)){0} + (int)col;
        lk8f best = (lk8f)((KN(lk8i))M[col * n + col] & absm);
        for (int64_t r = col + 1; r < n; r++) {
            lk8f v = (lk8f)((KN(lk8i))M[r * n + col] & absm);
            KN(lk8i) gt = v > best;
            best = KN(sel8)(gt, v, best);
            piv = (gt & ((KN(lk8i)){0} + (int)r)) | (piv & ~gt);
        }
        for (int64_t r = col + 1; r < n; r++) {
            KN(lk8i) sw = piv == ((KN(lk8i)){0} + (int)r);
            int any = 0;
            for (int l = 0; l < 8; l++) any |= sw[l];
            if (!any) continue;
            for (int64_t k = 0; k < n; k++) {
                lk8f m1 = M[col * n + k], m2 = M[r * n + k], x1 = X[col * n + k], x2 = X[r * n + k];
                M[col * n + k] = KN(sel8)(sw, m2, m1);
                M[r * n + k] = KN(sel8)(sw, m1, m2);
                X[col * n + k] = KN(sel8)(sw, x2, x1);
                X[r * n + k] = KN(sel8)(sw, x1, x2);
            }
        }
        lk8f inv = one / M[col * n + col];
        for (int64_t k = 0; k < n; k++) {
            M[col * n + k] *= inv;
            X[col * n + k] *= inv;
        }
        const lk8f *mc = M + col * n, *xc = X + col * n;
        for (int64_t r = 0; r < n; r++) {
            if (r == col) continue;
            lk8f f = M[r * n + col];
            KN(lk8i) nz = f != zero;
            lk8f *mr = M + r * n, *xr = X + r * n;
            for (int64_t k = 0; k < n; k++) {
                mr[k] = KN(sel8)(nz, mr[k] - f * mc[k], mr[k]);
                xr[k] = KN(sel8)(nz, xr[k] - f * xc[k], xr[k]);
            }
        }
    }
}

/* T += X·B, every element's terms j = 0…n−1 in order (mul_f), a row of T at a time: the n
   elements of a row are independent chains (one element's chain alone is latency-bound) */
static void KN(mul8f)(int64_t n, const lk8f *X, const lk8f *B, lk8f *restrict T) {
    for (int64_t a = 0; a < n; a++) {
        lk8f *t = T + a * n;
        for (int64_t j = 0; j < n; j++) {
            lk8f x = X[a * n + j];
            const lk8f *bj = B + j * n;
            for (int64_t b = 0; b < n; b++) t[b] = t[b] + x * bj[b];
        }
    }
}

/* the fp64 products on two 4-lane halves (lanes 0–3 at [2i], 4–7 at [2i + 1]): GCC's 8-lane
   double vectors under the v3 target went through the stack */
static void KN(mul8d)(int64_t n, const lk4d *X, const lk4d *B, lk4d *restrict T) {
    for (int64_t a = 0; a < n; a++) {
        lk4d *t = T + 2 * a * n;
        for (int64_t j = 0; j < n; j++) {
            lk4d x0 = X[2 * (a * n + j)], x1 = X[2 * (a * n + j) + 1];
            const lk4d *bj = B + 2 * j * n;
            for (int64_t b = 0; b < n; b++) {
                t[2 * b] = t[2 * b] + x0 * bj[2 * b];
                t[2 * b + 1] = t[2 * b + 1] + x1 * bj[2 * b + 1];
            }
        }
    }
}

static void KN(product8)(int64_t n, const lk8f *A, const lk8f *B, lk8f *restrict T) {
    for (int64_t i = 0; i < n * n; i++) T[i] = (lk8f){0};
    KN(mul8f)(n, A, B, T);
}

static void KN(refine8)(int64_t n, const lk8f *A, const lk8f *E, lk8f *T, lk8f *Y) {
    KN(product8)(n, A, E, T);
    for (int64_t i = 0; i < n * n; i++) Y[i] += T[i];
}

static inline __attribute__((always_inline)) void KN(wide8)(lk8f v, lk4d *d) {
    d[0] = (lk4d){v[0], v[1], v[2], v[3]};
    d[1] = (lk4d){v[4], v[5], v[6], v[7]};
}

/* d: 6·n² lk4d (X, Q and the residual in double, two halves each) */
static void KN(residual8)(int64_t n, const lk8f *Q, const lk8f *X, bool two_q, lk4d *restrict d, lk8f *restrict Out) {
    int64_t nn = n * n;
    lk4d *Xd = d, *Qd = d + 2 * nn, *acc = Qd + 2 * nn;
    for (int64_t i = 0; i < nn; i++) {
        KN(wide8)(X[i], Xd + 2 * i);
        KN(wide8)(Q[i], Qd + 2 * i);
    }
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++)
            for (int h = 0; h < 2; h++) {
                int64_t i = 2 * (a * n + b) + h;
                acc[i] = (two_q ? 2.0 * Qd[i] : (lk4d){0} + (a == b ? 1.0 : 0.0)) - Xd[i];
            }
    KN(mul8d)(n, Qd, Xd, acc);
    for (int64_t i = 0; i < nn; i++) {
        lk4d lo = acc[2 * i], hi = acc[2 * i + 1];
        Out[i] = (lk8f){(float)lo[0], (float)lo[1], (float)lo[2], (float)lo[3], (float)hi[0], (float)hi[1], (float)hi[2], (float)hi[3]};
    }
}

/* block_fwd for eight blocks. Scratch: M, Tm (n² lk8f each), dsc (6·n² lk4d). */
static void KN(block_fwd8)(int64_t n, const lk8f *Q, lk8f *Ak, lk8f *Rk, lk8f *M, lk8f *Tm, lk4d *dsc) {
    int64_t nn = n * n;
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++) M[a * n + b] = (lk8f){0} + (a == b ? 1.0f : 0.0f) - Q[a * n + b];
    KN(invert8)(n, M, Ak);
    KN(residual8)(n, Q, Ak, false, dsc, M);
    KN(refine8)(n, Ak, M, Tm, Ak);
    KN(product8)(n, Ak, Q, Rk);
    for (int64_t i = 0; i < nn; i++) Rk[i] *= 2.0f;
    KN(residual8)(n, Q, Rk, true, dsc, M);
    KN(refine8)(n, Ak, M, Tm, Rk);
}
