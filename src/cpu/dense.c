/*
 * dense.c — small fp32 GEMM kernels for the fused CPU paths (row-major, strided by lda/ldb/ldc).
 *
 * Register-blocked micro-kernels written with GCC vector types (8 fp32 lanes; the clones for
 * x86-64-v3/v4 use AVX2/AVX-512 + FMA, the baseline SSE2):
 *   nn / tn : 4 rows × 16 columns of C in 8 vector accumulators; per k two B vectors, four
 *             broadcast A scalars, eight FMAs (A read as A[i][k] for nn, A[k][i] for tn)
 *   nt      : 4 × 4 dot products with K contiguous in both operands, 16 vector accumulators
 *             reduced once at the end in a fixed order
 * Tails (rows, columns, K) take the same sums in scalar code. The summation order depends only on
 * the shapes, never on the thread count or the ISA clone (beyond FMA contraction).
 */
#include "cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

int cpu_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int cpu_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

typedef float v8 __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) v8 ld8(const float *p) { v8 v; memcpy(&v, p, sizeof v); return v; }
static inline __attribute__((always_inline)) void st8(float *p, v8 v) { memcpy(p, &v, sizeof v); }
static inline __attribute__((always_inline)) v8 bc8(float a) { return (v8){a, a, a, a, a, a, a, a}; }

/* C[M×N] (+)= op(A) · B with op(A)[i][k] = A[i·sa_i + k·sa_k] */
static inline __attribute__((always_inline)) void gemm_axpy_form(int64_t M, int64_t N, int64_t K, const float *A, int64_t sa_i, int64_t sa_k,
                                  const float *B, int64_t ldb, float *C, int64_t ldc, bool accumulate) {
    int64_t i = 0;
    for (; i + 4 <= M; i += 4) {
        int64_t j = 0;
        for (; j + 16 <= N; j += 16) {
            v8 c00 = bc8(0), c01 = bc8(0), c10 = bc8(0), c11 = bc8(0), c20 = bc8(0), c21 = bc8(0), c30 = bc8(0), c31 = bc8(0);
            for (int64_t k = 0; k < K; k++) {
                const float *b = B + k * ldb + j;
                v8 b0 = ld8(b), b1 = ld8(b + 8);
                const float *a = A + i * sa_i + k * sa_k;
                v8 a0 = bc8(a[0]), a1 = bc8(a[sa_i]), a2 = bc8(a[2 * sa_i]), a3 = bc8(a[3 * sa_i]);
                c00 += a0 * b0; c01 += a0 * b1;
                c10 += a1 * b0; c11 += a1 * b1;
                c20 += a2 * b0; c21 += a2 * b1;
                c30 += a3 * b0; c31 += a3 * b1;
            }
            float *c = C + i * ldc + j;
            if (accumulate) {
                c00 += ld8(c); c01 += ld8(c + 8);
                c10 += ld8(c + ldc); c11 += ld8(c + ldc + 8);
                c20 += ld8(c + 2 * ldc); c21 += ld8(c + 2 * ldc + 8);
                c30 += ld8(c + 3 * ldc); c31 += ld8(c + 3 * ldc + 8);
            }
            st8(c, c00); st8(c + 8, c01);
            st8(c + ldc, c10); st8(c + ldc + 8, c11);
            st8(c + 2 * ldc, c20); st8(c + 2 * ldc + 8, c21);
            st8(c + 3 * ldc, c30); st8(c + 3 * ldc + 8, c31);
        }
        for (; j < N; j++)
            for (int64_t ii = 0; ii < 4; ii++) {
                float s = 0.0f;
                for (int64_t k = 0; k < K; k++) s += A[(i + ii) * sa_i + k * sa_k] * B[k * ldb + j];
                C[(i + ii) * ldc + j] = accumulate ? C[(i + ii) * ldc + j] + s : s;
            }
    }
    for (; i < M; i++) {
        int64_t j = 0;
        for (; j + 8 <= N; j += 8) {
            v8 acc = bc8(0);
            for (int64_t k = 0; k < K; k++) acc += bc8(A[i * sa_i + k * sa_k]) * ld8(B + k * ldb + j);
            if (accumulate) acc += ld8(C + i * ldc + j);
            st8(C + i * ldc + j, acc);
        }
        for (; j < N; j++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++) s += A[i * sa_i + k * sa_k] * B[k * ldb + j];
            C[i * ldc + j] = accumulate ? C[i * ldc + j] + s : s;
        }
    }
}

CPU_HOT
void cpu_gemm_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, bool accumulate) {
    gemm_axpy_form(M, N, K, A, lda, 1, B, ldb, C, ldc, accumulate);
}

CPU_HOT
void cpu_gemm_tn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, bool accumulate) {
    gemm_axpy_form(M, N, K, A, 1, lda, B, ldb, C, ldc, accumulate);
}

static inline __attribute__((always_inline)) float hsum8(v8 v) {
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

static inline __attribute__((always_inline)) float dot_tail(const float *a, const float *b, int64_t k0, int64_t K) {
    float s = 0.0f;
    for (int64_t k = k0; k < K; k++) s += a[k] * b[k];
    return s;
}

CPU_HOT
void cpu_gemm_nt(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, bool accumulate) {
    int64_t K8 = K & ~(int64_t)7;
    int64_t i = 0;
    for (; i + 4 <= M; i += 4) {
        int64_t j = 0;
        for (; j + 4 <= N; j += 4) {
            v8 acc[4][4];
            for (int p = 0; p < 4; p++)
                for (int q = 0; q < 4; q++) acc[p][q] = bc8(0);
            for (int64_t k = 0; k < K8; k += 8) {
                v8 a[4], b[4];
                for (int p = 0; p < 4; p++) a[p] = ld8(A + (i + p) * lda + k);
                for (int q = 0; q < 4; q++) b[q] = ld8(B + (j + q) * ldb + k);
                for (int p = 0; p < 4; p++)
                    for (int q = 0; q < 4; q++) acc[p][q] += a[p] * b[q];
            }
            for (int p = 0; p < 4; p++)
                for (int q = 0; q < 4; q++) {
                    float s = hsum8(acc[p][q]) + dot_tail(A + (i + p) * lda, B + (j + q) * ldb, K8, K);
                    float *c = C + (i + p) * ldc + j + q;
                    *c = accumulate ? *c + s : s;
                }
        }
        for (; j < N; j++)
            for (int p = 0; p < 4; p++) {
                v8 acc = bc8(0);
                for (int64_t k = 0; k < K8; k += 8) acc += ld8(A + (i + p) * lda + k) * ld8(B + j * ldb + k);
                float s = hsum8(acc) + dot_tail(A + (i + p) * lda, B + j * ldb, K8, K);
                float *c = C + (i + p) * ldc + j;
                *c = accumulate ? *c + s : s;
            }
    }
    for (; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            v8 acc = bc8(0);
            for (int64_t k = 0; k < K8; k += 8) acc += ld8(A + i * lda + k) * ld8(B + j * ldb + k);
            float s = hsum8(acc) + dot_tail(A + i * lda, B + j * ldb, K8, K);
            float *c = C + i * ldc + j;
            *c = accumulate ? *c + s : s;
        }
}
