/*
 * test_gemm.c — the fp32 GEMMs of the fused CPU backend (src/cpu/dense.c, gemm_kern.h):
 * cpu_gemm_nn / _nt / _tn on random shapes (1…300 rows, 1…1100 columns, K 1…1400, padded
 * leading dimensions, accumulate or not), every path of path_of() reached (small, direct-B,
 * packed-B, dot-product nt, the threaded split of a top-level call):
 *   (a) each element within (K + 2)·u·Σ|a·b| (+|C|) of an fp64 reference, the padding columns of
 *       C untouched;
 *   (b) split invariance: the product computed as four sub-blocks (a random row split × a random
 *       column split, as the callers' tiles do) is bitwise equal to the whole call;
 *   (c) thread invariance: a top-level call with 1 and with 2 OpenMP threads, bitwise equal.
 * It prints the instruction-set level it ran (LYCO_CPU_ISA caps it) and a digest of every result:
 * tests/sh/gemm_isa.sh runs it at each level with one seed and compares the digests (nn/tn sum
 * in the same order on v3 and v4, and nt runs the same 8-lane dot products — v4's packed column
 * pairs hold the same chains — so theirs must be equal).
 * Random shapes and data from LYCO_SEED (printed) or the clock. Prints the counts and exits
 * non-zero on any mismatch. ~1 s.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/core.h"
#include "cpu/cpu.h"
#include "cpu/isa.h"

typedef void (*gemm_fn)(int64_t, int64_t, int64_t, const float *, int64_t, const float *, int64_t, float *, int64_t, bool);

static uint64_t rng;
static uint64_t rnd(void) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return rng >> 33;
}
static float rndf(void) { return (float)(rnd() % 65536) / 65536.0f - 0.5f; }

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

int main(int argc, char **argv) {
    int ntests = argc > 1 ? atoi(argv[1]) : 150;
    const uint64_t seed = lyco_seed_from_env();
    printf("test_gemm: seed %llu (LYCO_SEED=%llu to rerun)\n", (unsigned long long)seed, (unsigned long long)seed);
    rng = seed;
#ifdef CPU_V3
    static const char *const level[] = {"base", "v3", "v4"};
    printf("isa: %s\n", level[cpu_isa()]);
#else
    printf("isa: base\n");
#endif
    long bad_ref = 0, bad_split = 0, bad_thr = 0, elems = 0;
    uint64_t digest = 14695981039346656037ULL; /* FNV-1a over the nn, nt and tn results */
    for (int t = 0; t < ntests; t++) {
        int form = t % 3; /* 0 nn, 1 nt, 2 tn */
        int64_t M = 1 + (int64_t)(rnd() % (t % 7 == 0 ? 300 : 70)), N = 1 + (int64_t)(rnd() % (t % 5 == 0 ? 1100 : 90)),
                K = 1 + (int64_t)(rnd() % (t % 4 == 0 ? 1400 : 80));
        if (t % 11 == 0) M = 4, N = 1280, K = 32;     /* the merge driver's row blocks, rank 32 */
        if (t % 13 == 0) M = 32, N = 1280, K = 1280;  /* a token tile against a 1280² layer */
        bool acc = rnd() & 1;
        int64_t pad = (int64_t)(rnd() % 5);
        int64_t lda = (form == 2 ? M : K) + pad, ldb = (form == 1 ? K : N) + pad, ldc = N + pad;
        int64_t arows = form == 2 ? K : M, brows = form == 1 ? N : K;
        size_t csz = sizeof(float) * (size_t)(M * ldc);
        float *A = malloc(sizeof(float) * (size_t)(arows * lda)), *B = malloc(sizeof(float) * (size_t)(brows * ldb));
        float *C0 = malloc(csz), *C1 = malloc(csz), *C2 = malloc(csz), *C3 = malloc(csz);
        if (!A || !B || !C0 || !C1 || !C2 || !C3) {
            printf("FAIL out of memory\n");
            return 1;
        }
        for (int64_t i = 0; i < arows * lda; i++) A[i] = rndf();
        for (int64_t i = 0; i < brows * ldb; i++) B[i] = rndf();
        for (int64_t i = 0; i < M * ldc; i++) C0[i] = rndf();
        memcpy(C1, C0, csz);
        memcpy(C2, C0, csz);
        memcpy(C3, C0, csz);
        gemm_fn f = form == 0 ? cpu_gemm_nn : form == 1 ? cpu_gemm_nt : cpu_gemm_tn;
        set_threads(1);
        f(M, N, K, A, lda, B, ldb, C1, ldc, acc);
        set_threads(2);
        f(M, N, K, A, lda, B, ldb, C2, ldc, acc);
        int64_t i1 = (int64_t)(rnd() % (uint64_t)(M + 1)), j1 = (int64_t)(rnd() % (uint64_t)(N + 1));
        for (int q = 0; q < 4; q++) {
            int64_t r0 = q & 1 ? i1 : 0, r1 = q & 1 ? M : i1, c0 = q & 2 ? j1 : 0, c1 = q & 2 ? N : j1;
            if (r1 <= r0 || c1 <= c0) continue;
            const float *a = form == 2 ? A + r0 : A + r0 * lda, *b = form == 1 ? B + c0 * ldb : B + c0;
            f(r1 - r0, c1 - c0, K, a, lda, b, ldb, C3 + r0 * ldc + c0, ldc, acc);
        }
        for (int64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < N; j++) {
                int64_t x = i * ldc + j;
                elems++;
                {
                    uint32_t u;
                    memcpy(&u, &C1[x], sizeof u);
                    for (int byte = 0; byte < 4; byte++) digest = (digest ^ ((u >> (8 * byte)) & 0xffu)) * 1099511628211ULL;
                }
                if (memcmp(&C1[x], &C2[x], sizeof(float))) bad_thr++;
                if (memcmp(&C1[x], &C3[x], sizeof(float))) bad_split++;
                double r = acc ? C0[x] : 0.0, s = fabs(r);
                for (int64_t k = 0; k < K; k++) {
                    double av = form == 2 ? A[k * lda + i] : A[i * lda + k], bv = form == 1 ? B[j * ldb + k] : B[k * ldb + j];
                    r += av * bv;
                    s += fabs(av * bv);
                }
                if (!(fabs(C1[x] - r) <= 0x1p-24 * (double)(K + 2) * s)) bad_ref++;
            }
            for (int64_t j = N; j < ldc; j++)
                if (memcmp(&C1[i * ldc + j], &C0[i * ldc + j], sizeof(float)) || memcmp(&C2[i * ldc + j], &C0[i * ldc + j], sizeof(float)))
                    bad_ref++;
        }
        free(A);
        free(B);
        free(C0);
        free(C1);
        free(C2);
        free(C3);
    }
    printf("%s (a) error bound / padding: %ld bad of %ld elements\n", bad_ref ? "FAIL" : "ok", bad_ref, elems);
    printf("%s (b) sub-block calls bitwise equal to the whole call: %ld differ\n", bad_split ? "FAIL" : "ok", bad_split);
    printf("%s (c) 1 vs 2 threads bitwise equal: %ld differ\n", bad_thr ? "FAIL" : "ok", bad_thr);
    printf("nn/nt/tn digest: %016llx\n", (unsigned long long)digest);
    printf("%d shapes, %d passed, %d failed\n", ntests, (bad_ref == 0) + (bad_split == 0) + (bad_thr == 0),
           (bad_ref != 0) + (bad_split != 0) + (bad_thr != 0));
    return bad_ref || bad_split || bad_thr;
}
