/*
 * lokr_kern.h — the fp64 row-product kernel of lokr.c's small matrix products (dmm), written once
 * and included by lokr.c once per instruction set: KN(name) gives each inclusion its own names
 * (name_v4 under `#pragma GCC target("arch=x86-64-v4")`, name_v3 under "arch=x86-64-v3", both with
 * fp-contract off, name_base for the portable build), as dense.c does with gemm_kern.h (isa.h).
 * Not a public header.
 *
 * C[M×N] = A·B with C's row i starting at 0 and taking the terms k = 0, 1, …, Kd−1 in order, two
 * rows and 4·LKD columns at a time (eight independent add chains), then LKD columns, then single
 * columns, in vector registers (B row-major with row stride bk, contiguous columns): every element
 * the operations of the dot form Σ_k A[i,k]·B[k,j], a product then a sum (no FMA in any copy) —
 * bitwise the same on every x86-64, at any vector width, and as the scalar loops it replaced.
 * Expects from the includer: KN, the lkd vector type of LKD doubles, <string.h>.
 */

/* rows i and i+1 (two = false: row i only), columns [j0, j0 + 4·LKD) */
static inline __attribute__((always_inline)) void KN(dmm_block)(int64_t i, bool two, int64_t j0, int64_t N, int64_t Kd,
                                                                const double *A, int64_t ai, int64_t ak, const double *B,
                                                                int64_t bk, double *restrict C) {
    lkd a[4], c[4], v;
    for (int u = 0; u < 4; u++) a[u] = c[u] = (lkd){0};
    for (int64_t k = 0; k < Kd; k++) {
        double f = A[i * ai + k * ak], h = two ? A[(i + 1) * ai + k * ak] : 0.0;
        const double *b = B + k * bk + j0;
        for (int u = 0; u < 4; u++) {
            memcpy(&v, b + u * LKD, sizeof v);
            a[u] = a[u] + f * v;
            if (two) c[u] = c[u] + h * v;
        }
    }
    for (int u = 0; u < 4; u++) {
        memcpy(C + i * N + j0 + u * LKD, &a[u], sizeof v);
        if (two) memcpy(C + (i + 1) * N + j0 + u * LKD, &c[u], sizeof v);
    }
}

static void KN(dmm_rows)(int64_t M, int64_t N, int64_t Kd, const double *A, int64_t ai, int64_t ak, const double *B,
                         int64_t bk, double *restrict C) {
    int64_t N4 = N - N % (4 * LKD);
    for (int64_t j0 = 0; j0 < N4; j0 += 4 * LKD) {
        int64_t i = 0;
        for (; i + 2 <= M; i += 2) KN(dmm_block)(i, true, j0, N, Kd, A, ai, ak, B, bk, C);
        if (i < M) KN(dmm_block)(i, false, j0, N, Kd, A, ai, ak, B, bk, C);
    }
    for (int64_t i = 0; i < M; i++) {
        double *c = C + i * N;
        int64_t j0 = N4;
        for (; j0 + LKD <= N; j0 += LKD) {
            lkd a0 = {0}, v0;
            for (int64_t k = 0; k < Kd; k++) {
                memcpy(&v0, B + k * bk + j0, sizeof v0);
                a0 = a0 + A[i * ai + k * ak] * v0;
            }
            memcpy(c + j0, &a0, sizeof a0);
        }
        for (int64_t j = j0; j < N; j++) {
            double acc = 0.0;
            for (int64_t k = 0; k < Kd; k++) acc = acc + A[i * ai + k * ak] * B[k * bk + j];
            c[j] = acc;
        }
    }
}
