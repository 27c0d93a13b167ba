/*
 * lokr_kern.h — the fp64 row-product kernel of lokr.c's small matrix products (dmm), written once
 * and included by lokr.c once per instruction set: KN(name) gives each inclusion its own names
 * (name_v3 under `#pragma GCC target("arch=x86-64-v3")` with fp-contract off, name_base for the
 * portable build), as dense.c does with gemm_kern.h (isa.h). Not a public header.
 *
 * C[M×N] = A·B with C's row i starting at 0 and taking the terms k = 0, 1, …, Kd−1 in order, 16
 * (then 8) columns at a time in vector registers (B row-major with row stride bk, contiguous columns):
 * every element the operations of the dot form Σ_k A[i,k]·B[k,j], a product then a sum (no FMA
 * in either copy) — bitwise the same on every x86-64 and as the scalar loops it replaced.
 * Expects from the includer: KN, the lk4d vector type (4 doubles), <string.h>.
 */

static void KN(dmm_rows)(int64_t M, int64_t N, int64_t Kd, const double *A, int64_t ai, int64_t ak, const double *B,
                         int64_t bk, double *restrict C) {
    for (int64_t i = 0; i < M; i++) {
        double *c = C + i * N;
        int64_t j0 = 0;
        for (; j0 + 16 <= N; j0 += 16) {   /* four independent add chains (one add latency each k) */
            lk4d a0 = {0.0, 0.0, 0.0, 0.0}, a1 = a0, a2 = a0, a3 = a0, v0, v1, v2, v3;
            for (int64_t k = 0; k < Kd; k++) {
                double f = A[i * ai + k * ak];
                const double *b = B + k * bk + j0;
                memcpy(&v0, b, sizeof v0);
                memcpy(&v1, b + 4, sizeof v1);
                memcpy(&v2, b + 8, sizeof v2);
                memcpy(&v3, b + 12, sizeof v3);
                a0 = a0 + f * v0;
                a1 = a1 + f * v1;
                a2 = a2 + f * v2;
                a3 = a3 + f * v3;
            }
            memcpy(c + j0, &a0, sizeof a0);
            memcpy(c + j0 + 4, &a1, sizeof a1);
            memcpy(c + j0 + 8, &a2, sizeof a2);
            memcpy(c + j0 + 12, &a3, sizeof a3);
        }
        for (; j0 + 8 <= N; j0 += 8) {
            lk4d a0 = {0.0, 0.0, 0.0, 0.0}, a1 = a0, v0, v1;
            for (int64_t k = 0; k < Kd; k++) {
                double f = A[i * ai + k * ak];
                memcpy(&v0, B + k * bk + j0, sizeof v0);
                memcpy(&v1, B + k * bk + j0 + 4, sizeof v1);
                a0 = a0 + f * v0;
                a1 = a1 + f * v1;
            }
            memcpy(c + j0, &a0, sizeof a0);
            memcpy(c + j0 + 4, &a1, sizeof a1);
        }
        for (int64_t j = j0; j < N; j++) {
            double acc = 0.0;
            for (int64_t k = 0; k < Kd; k++) acc = acc + A[i * ai + k * ak] * B[k * bk + j];
            c[j] = acc;
        }
    }
}
