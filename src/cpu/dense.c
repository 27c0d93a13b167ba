/*
 * dense.c — small fp32 GEMM kernels for the fused CPU paths (row-major, strided by lda/ldb/ldc).
 * Loops are shaped so the innermost one runs over contiguous memory (axpy form) or uses eight
 * fixed partial sums (dot form): both vectorise without reassociating anything at run time, so
 * results do not depend on the ISA the clone was built for beyond FMA contraction.
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

CPU_HOT
void cpu_gemm_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, bool accumulate) {
    for (int64_t i = 0; i < M; i++) {
        float *restrict c = C + i * ldc;
        if (!accumulate)
            for (int64_t j = 0; j < N; j++) c[j] = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            float a = A[i * lda + k];
            const float *restrict b = B + k * ldb;
            for (int64_t j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}

CPU_HOT
void cpu_gemm_nt(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, bool accumulate) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            const float *restrict a = A + i * lda, *restrict b = B + j * ldb;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int64_t k = 0;
            for (; k + 8 <= K; k += 8)
                for (int l = 0; l < 8; l++) acc[l] += a[k + l] * b[k + l];
            float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            for (; k < K; k++) s += a[k] * b[k];
            C[i * ldc + j] = accumulate ? C[i * ldc + j] + s : s;
        }
}

CPU_HOT
void cpu_gemm_tn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, bool accumulate) {
    if (!accumulate)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = 0.0f;
    for (int64_t k = 0; k < K; k++)
        for (int64_t i = 0; i < M; i++) {
            float a = A[k * lda + i];
            const float *restrict b = B + k * ldb;
            float *restrict c = C + i * ldc;
            for (int64_t j = 0; j < N; j++) c[j] += a * b[j];
        }
}
