/*
 * dense.c — the fp32 GEMMs of the fused CPU paths (row-major, strided by lda/ldb/ldc):
 *   cpu_gemm_nn  C[M×N] (+)= A[M×K]·B[K×N]      cpu_gemm_tn  C (+)= A[K×M]ᵀ·B[K×N]
 *   cpu_gemm_nt  C[M×N] (+)= A[M×K]·B[N×K]ᵀ
 * C never aliases A or B; A and B are only read.
 *
 * Paths, chosen from the shape only (never from the thread count; path_of):
 *  - blocked (BLIS-style, without K blocking): N in blocks of up to PACK_FLOATS/K columns, M in
 *    blocks whose A slice stays in L2; a 6×16 register-blocked micro-kernel (12 ymm accumulators,
 *    two B vectors, one broadcast) runs over the whole K and reads A in place by broadcasts (any
 *    layout: nn/nt rows, tn columns). B is either packed into K × 16 k-major panels, zero-padded
 *    (PACKED_B: nn/tn when B is large and read by enough rows; nt never, see NT_DOT_K), or read
 *    in place with its row stride, the partial last 16 columns by
 *    the small kernel (DIRECT_B).
 *  - small: unblocked 4×24 / mr×16 register blocks (nn/tn, B read in place) for tiny products,
 *    K < 8 (C traffic dominates) and M ≤ 4 (the merge driver's 4-row blocks: packing would cost as
 *    much as the product); 3×4 dot-product blocks over K (nt with K ≥ NT_DOT_K).
 * Summation order (gemm_kern.h): nn and tn: acc = 0, one FMA chain over k = 0…K−1, then + C
 *   when accumulating, on every path; nt: 8 k-lanes, a fixed tree, the chained tail, then + C. Each element depends on its row of op(A), column of op(B), K and C only: not
 *   on M, N, how the caller splits them, or the thread count (tested: sub-block calls and 1 vs
 *   2 threads bitwise equal on random shapes). FMAs are explicit (intrinsics), so this holds at
 *   any optimisation level; the portable build multiplies and adds (no FMA).
 * Threads: called inside a parallel region (every caller in src/cpu is), a GEMM runs on the
 *   calling thread; called outside one with ≥ 4·10⁶ multiply-adds on the blocked path, it splits
 *   N (or M when N is narrower) into contiguous 16-column (6-row) aligned ranges over the OpenMP
 *   threads, each C element computed by one thread as serially.
 * Extra memory: one packing buffer per thread, max(PACK_FLOATS, 16·K, DOT_JG·K) floats (≥ 512 KB),
 *   made on the thread's first blocked GEMM (or v4 nt with K ≥ 64: its column pairs), grown when
 *   a larger K needs it, freed at thread exit (pthread key destructor). No other state. Out of memory: the small path (rounding may then differ).
 *
 * The kernels (gemm_kern.h) are GCC vector types (8 fp32 lanes), compiled twice: for x86-64-v3
 * (AVX2 + FMA, under a target pragma; see gemm_kern.h for why not target_clones) and portable,
 * picked per call by cpu_have_v3() (isa.h, the dispatch shared with view.c and loha.c; AVX-512
 * machines run the v3 code).
 */
#include <pthread.h>
#include <stdlib.h>

#include "cpu.h"
#include "isa.h"

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

/* ---- blocking (32 KB L1d or more, 512 KB L2 or more per core) ---- */
#define MR 6            /* micro-tile rows: 12 accumulators + 2 B vectors + 1 broadcast = 15 registers */
#define NR 32           /* the widest micro-tile (v4: two 16-lane vectors; v3 and portable: 16 columns,
                           GNR in gemm_kern.h): thread ranges and packing buffers are sized by it */
#define PACK_FLOATS 131072   /* packed B block: 512 KB (L2), K × (a multiple of NR) columns */
/* nt always takes the dot products (8 k-lanes, fixed tree): the packed, single-chain path for
   K < 64 lost accuracy — DyLoRA conv merge_bwd fp16+fp32adapter at 23.3 ULP against 4.7 before and
   a budget of 20.8 (lyco check --seed 1795998142190422; ctest check_cpu_nt_regression) */
#define NT_DOT_K 1
#define DOT_JG 32       /* dot_nt: B rows per group (32 × K floats, L2) */

/* op(X)(r, c) = p[r·rs + c·cs] */
typedef struct {
    const float *p;
    int64_t rs, cs;
} mat;

enum { PATH_SMALL, PATH_DIRECT_B, PATH_PACKED_B };

typedef float v8 __attribute__((vector_size(32)));
typedef int32_t vi8 __attribute__((vector_size(32)));
typedef float v16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));

/* ---- the per-thread packing buffer ---- */
static pthread_key_t pack_key;
static pthread_once_t pack_once = PTHREAD_ONCE_INIT;
static bool pack_key_ok;
static _Thread_local float *pack_buf;
static _Thread_local int64_t pack_cap;

static void pack_free(void *p) { free(p); }
static void pack_key_init(void) { pack_key_ok = pthread_key_create(&pack_key, pack_free) == 0; }

/* This thread's buffer of max(PACK_FLOATS, need) floats or more, 64-byte aligned, kept for the
   thread's next GEMMs and freed at its exit; *cap gets its size. NULL when out of memory (the
   caller then takes the small path). */
static float *pack_buffer(int64_t need, int64_t *cap) {
    if (need < PACK_FLOATS) need = PACK_FLOATS;
    if (pack_buf && pack_cap >= need) {
        *cap = pack_cap;
        return pack_buf;
    }
    pthread_once(&pack_once, pack_key_init);
    if (!pack_key_ok) return NULL;
    size_t bytes = ((size_t)need * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes);
    if (!p) return NULL;
    if (pthread_setspecific(pack_key, p) != 0) {
        free(p);
        return NULL;
    }
    free(pack_buf);
    pack_buf = p;
    pack_cap = need;
    *cap = need;
    return p;
}

/* ---- the kernels, once per ISA ---- */
#ifdef CPU_V4
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v4")
#define KN(name) name##_v4
#define GK_FMA 1
#define VF v16
#define VI vi16
#define VL 16
#include "gemm_kern.h"
#undef VL
#undef VI
#undef VF
#undef GK_FMA
#undef KN
#pragma GCC pop_options
#endif
#define VF v8
#define VI vi8
#define VL 8
#ifdef CPU_V3
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v3")
#define KN(name) name##_v3
#define GK_FMA 1
#include "gemm_kern.h"
#undef GK_FMA
#undef KN
#pragma GCC pop_options
#endif
#define KN(name) name##_base
#include "gemm_kern.h"
#undef KN
#undef VL
#undef VI
#undef VF

static void gemm_part(int path, int64_t i0, int64_t m, int64_t j0, int64_t n, int64_t K, mat A, mat B, float *C, int64_t ldc,
                      bool accumulate, float *buf, int64_t cap) {
    CPU_DISPATCH(gemm_part, path, i0, m, j0, n, K, A, B, C, ldc, accumulate, buf, cap);
}

/* ---- the choice of path and the threads ---- */

/* The path, measured on the callers' shapes (docs/bench-cpu.md, "GEMM rewrite"). b_rows: op(B)
   has contiguous rows (nn, tn): every path sums alike, so the choice is free: tiny products,
   K < 8 (the C traffic dominates) and M ≤ 4 (the merge driver's row blocks: packing B would cost
   as much as the product) take axpy_form; B is packed when it is large and read by enough rows,
   else read in place. nt: from K alone, since the two nt paths sum differently (see gemm_kern.h). */
static int path_of(int64_t M, int64_t N, int64_t K, bool b_rows) {
    if (!b_rows) return K < NT_DOT_K ? PATH_PACKED_B : PATH_SMALL;
    if (M * N * K < 4096 || K < 8 || M <= 4) return PATH_SMALL;
    return M >= 16 && K * N >= 32768 ? PATH_PACKED_B : PATH_DIRECT_B;
}

/* C[M×N] (+)= op(A)·op(B). Outside a parallel region and with enough work the blocked path is
   split over the threads: N in NR-aligned ranges (M in MR-aligned ranges when N is narrower);
   each C element is computed by one thread in the same order as serially. */
static void gemm(int64_t M, int64_t N, int64_t K, mat A, mat B, float *C, int64_t ldc, bool accumulate) {
    if (M <= 0 || N <= 0) return;
    int path = path_of(M, N, K, B.cs == 1);
    int64_t need = path == PATH_PACKED_B ? K * NR : 0, cap = 0;
    float *buf = path == PATH_SMALL || K < 1 ? NULL : pack_buffer(need, &cap);
    int nt = 1;
#ifdef _OPENMP
    if (buf && !omp_in_parallel() && (double)M * (double)N * (double)K >= 4e6) nt = omp_get_max_threads();
#endif
    bool split_n = N >= M || N >= (int64_t)nt * 4 * NR;
    int64_t units = split_n ? (N + NR - 1) / NR : (M + MR - 1) / MR;
    if (units < nt) nt = (int)units;
    if (nt <= 1) {
        gemm_part(path, 0, M, 0, N, K, A, B, C, ldc, accumulate, buf, cap);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), n_t = omp_get_num_threads();
        int64_t u0 = units * t / n_t, u1 = units * (t + 1) / n_t, my_cap = cap;
        /* NULL (out of memory): this range on the small path */
        float *mine = t == 0 ? buf : pack_buffer(need, &my_cap);
        if (split_n) {
            int64_t j0 = u0 * NR, j1 = u1 * NR < N ? u1 * NR : N;
            if (j1 > j0) gemm_part(path, 0, M, j0, j1 - j0, K, A, B, C, ldc, accumulate, mine, my_cap);
        } else {
            int64_t i0 = u0 * MR, i1 = u1 * MR < M ? u1 * MR : M;
            if (i1 > i0) gemm_part(path, i0, i1 - i0, 0, N, K, A, B, C, ldc, accumulate, mine, my_cap);
        }
    }
#endif
}

void cpu_gemm_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, bool accumulate) {
    gemm(M, N, K, (mat){A, lda, 1}, (mat){B, ldb, 1}, C, ldc, accumulate);
}

void cpu_gemm_tn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, bool accumulate) {
    gemm(M, N, K, (mat){A, 1, lda}, (mat){B, ldb, 1}, C, ldc, accumulate);
}

void cpu_gemm_nt(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, bool accumulate) {
    gemm(M, N, K, (mat){A, lda, 1}, (mat){B, 1, ldb}, C, ldc, accumulate);
}
