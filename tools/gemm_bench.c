/*
 * gemm_bench.c — stand-alone timing of cpu_gemm_nn / _nt / _tn (src/cpu/dense.c) at the shapes
 * the CPU families call them with (docs/bench-cpu.md, "GEMM rewrite"). Every OpenMP thread runs
 * its own operands back to back, as the callers do inside their parallel regions; per shape
 * best and median GFLOP/s (all threads together) over the timing windows, and the largest
 * relative error against an fp64 reference.
 *
 *   gcc -std=c11 -O3 -ffp-contract=fast -fopenmp -Wno-psabi -D_POSIX_C_SOURCE=200809L \
 *       -Iinclude -Isrc -Isrc/core -Isrc/cpu tools/gemm_bench.c src/cpu/dense.c -lm -o /tmp/gemm_bench
 *   OMP_NUM_THREADS=1 taskset -c 0 /tmp/gemm_bench 0 15      # 15 windows per shape
 *   ONLY=nt ... (shapes whose name contains the string); CPUTIME=1: thread CPU time instead of
 *   wall time (1 thread only; on a shared machine it removes the time-slicing, not the steal)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <stdbool.h>
#include <math.h>
#include <time.h>
#include <omp.h>
void cpu_gemm_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, bool accumulate);
void cpu_gemm_nt(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, bool accumulate);
void cpu_gemm_tn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, bool accumulate);
typedef void (*gfn)(int64_t, int64_t, int64_t, const float *, int64_t, const float *, int64_t, float *, int64_t, bool);
static double now(void) { struct timespec t; clock_gettime(getenv("CPUTIME") ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
typedef struct { const char *name; char f; int64_t M, N, K; bool acc; } shape;
static shape S[] = {
    {"lora merge_fwd nn", 'n', 4, 1280, 32, false},
    {"lora merge_bwd nt gU", 't', 4, 32, 1280, false},
    {"lora merge_bwd tn gP", 'T', 32, 1280, 4, true},
    {"bypass h=x.Pt nt", 't', 32, 32, 1280, false},
    {"bypass y=h.Ut nt", 't', 32, 1280, 32, false},
    {"bypass dx=gh.P nn", 'n', 32, 1280, 32, false},
    {"bypass gP+=ghT.x tn", 'T', 32, 1280, 32, true},
    {"bypass gU+=dyT.h tn", 'T', 1280, 32, 32, true},
    {"bypass gh=dy.Uf nn", 'n', 32, 32, 1280, false},
    {"full fwd nt 64x64x1280", 't', 64, 64, 1280, true},
    {"glora ax.Wt nt", 't', 32, 1280, 1280, false},
    {"full bwd nn 64x1280x64", 'n', 64, 1280, 64, true},
    {"full bwd tn 64x1280x64", 'T', 64, 1280, 64, true},
    {"sgemm ceiling nn 32x1024x1024", 'n', 32, 1024, 1024, false},
    {"oft nn 64x16x16", 'n', 64, 16, 16, false},
    {"oft tn 16x64x16", 'T', 16, 64, 16, false},
    {"boft nn 10x64x10", 'n', 10, 64, 10, false},
    {"loha merge nn 4x1280x32", 'n', 4, 1280, 32, false},
    {"loha bwd nn 8x256x32", 'n', 8, 256, 32, false},
    {"odd nt 13x37x29", 't', 13, 37, 29, true},
    {"odd nn 7x33x5", 'n', 7, 33, 5, true},
    {"pure nn 96x256x256", 'n', 96, 256, 256, false},
    {"pure nn 6x16x256", 'n', 6, 16, 256, false},
    {"pure nn 96x64x256", 'n', 96, 64, 256, false},
    {"pure nn 32x64x256", 'n', 32, 64, 256, false},
    {"tail8 nn 32x40x256", 'n', 32, 40, 256, false},
    {"tail8 tn 32x8x1280", 'T', 32, 8, 1280, true},
    {"tail8 nn 4x1288x64", 'n', 4, 1288, 64, false},
};
static void dims(const shape *s, int64_t *ar, int64_t *ac, int64_t *br, int64_t *bc) {
    /* stored shapes */
    if (s->f == 'n') { *ar = s->M; *ac = s->K; *br = s->K; *bc = s->N; }
    else if (s->f == 't') { *ar = s->M; *ac = s->K; *br = s->N; *bc = s->K; }
    else { *ar = s->K; *ac = s->M; *br = s->K; *bc = s->N; }
}
static gfn fn_of(char f) { return f == 'n' ? cpu_gemm_nn : f == 't' ? cpu_gemm_nt : cpu_gemm_tn; }
static float rnd(uint64_t *x) { *x = *x * 6364136223846793005ULL + 1442695040888963407ULL; return (float)((*x >> 40) & 0xffff) / 65536.0f - 0.5f; }
int main(int argc, char **argv) {
    const char *only = getenv("ONLY");
    int reps_outer = argc > 2 ? atoi(argv[2]) : 5;
    if (reps_outer > 32) reps_outer = 32;
    int nth = omp_get_max_threads();
    printf("threads %d\n", nth);
    for (size_t si = 0; si < sizeof S / sizeof S[0]; si++) {
        shape *s = &S[si];
        if (only && !strstr(s->name, only)) continue;
        int64_t ar, ac, br, bc; dims(s, &ar, &ac, &br, &bc);
        gfn f = fn_of(s->f);
        double flop = 2.0 * s->M * s->N * s->K;
        /* per-thread operands (as the callers: each thread its own C) */
        int64_t n_iter = (int64_t)(2e8 / (flop + 1e4)) + 1;
        double ts[64]; int nts = 0;
        double err = 0;
#pragma omp parallel
        {
            uint64_t seed = 1 + (uint64_t)omp_get_thread_num();
            float *A = malloc(sizeof(float) * ar * ac), *B = malloc(sizeof(float) * br * bc), *C = malloc(sizeof(float) * s->M * s->N), *C0 = malloc(sizeof(float) * s->M * s->N);
            for (int64_t i = 0; i < ar * ac; i++) A[i] = rnd(&seed);
            for (int64_t i = 0; i < br * bc; i++) B[i] = rnd(&seed);
            for (int64_t i = 0; i < s->M * s->N; i++) C0[i] = C[i] = rnd(&seed);
            /* correctness vs double */
            f(s->M, s->N, s->K, A, ac, B, bc, C, s->N, s->acc);
            double e = 0;
            for (int64_t i = 0; i < s->M; i++) for (int64_t j = 0; j < s->N; j++) {
                double r = s->acc ? C0[i * s->N + j] : 0, sa = s->acc ? fabs(r) : 0;
                for (int64_t k = 0; k < s->K; k++) {
                    double a = s->f == 'T' ? A[k * ac + i] : A[i * ac + k];
                    double b = s->f == 't' ? B[j * bc + k] : B[k * bc + j];
                    r += a * b; sa += fabs(a * b);
                }
                double d = fabs(C[i * s->N + j] - r) / (sa + 1e-30);
                if (d > e) e = d;
            }
#pragma omp critical
            if (e > err) err = e;
            for (int o = 0; o < reps_outer; o++) {
                double t0 = 0;
#pragma omp barrier
#pragma omp master
                t0 = now();
                for (int64_t it = 0; it < n_iter; it++) f(s->M, s->N, s->K, A, ac, B, bc, C, s->N, s->acc);
#pragma omp barrier
#pragma omp master
                ts[nts++] = now() - t0;
            }
            free(A); free(B); free(C); free(C0);
        }
        /* per-run: aggregate GFLOP/s = nth*n_iter*flop / t (t per thread) */
        double g[64]; for (int i = 0; i < nts; i++) g[i] = nth * n_iter * flop / ts[i] / 1e9; 
        for (int i = 0; i < nts; i++) for (int j = i + 1; j < nts; j++) if (g[j] > g[i]) { double x = g[i]; g[i] = g[j]; g[j] = x; }
        printf("%-32s %-4s GFLOP/s(all thr) max %6.1f med %6.1f  relerr %.2e\n", s->name, s->acc ? "acc" : "", g[0], g[nts / 2], err);
    }
    return 0;
}
