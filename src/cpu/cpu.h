/*
 * cpu.h — internals of the fused CPU backend.
 *
 * Layout: cpu.c dispatches (algorithm, direction) to the per-algorithm files (src/cpu/<algo>.c);
 * view.c moves rows of any DLTensor (any strides, unaligned data) to and from fp32 with the
 * conversions done in registers (vectorisable, bit-identical to src/core/convert.c); merge.c is the
 * shared merge driver (W'' = W + m·σs·ΔW, the merge modes, the DoRA epilogue forward and backward)
 * that every additive algorithm plugs a ΔW row generator into; stream.c its one-pass form for the
 * elementwise generators (IA3, Full, LoKr, Norm).
 *
 * Hot loops are compiled for x86-64-v4 (AVX-512), x86-64-v3 (AVX2+FMA+F16C) and a portable
 * baseline, picked at load time (GCC target_clones / ifunc): one binary runs on any x86-64.
 * Threads: OpenMP, static schedules over output rows or tokens, so every output element is
 * computed by one thread in a fixed order (reductions across threads combine per-thread partials
 * in thread order: bitwise repeatable for a given thread count).
 */
#ifndef LYCO_CPU_H
#define LYCO_CPU_H

#include <string.h>

#include "core/call.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define CPU_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_HOT
#endif

/* ---- conversions of contiguous runs (dst/src may be unaligned for the 16-bit side) ---- */
/* dst[i] = f32(src[i]) rounded to `through` (pass the source dtype, or fp32, to skip rounding) */
void cpu_cvt_in(const void *src, lyco_dtype sd, lyco_dtype through, float *dst, int64_t n);
void cpu_cvt_out(const float *src, void *dst, lyco_dtype dd, int64_t n);
/* v[i] = RN_T(v[i]) in place */
void cpu_round(float *v, int64_t n, lyco_dtype T);

/* ---- a 2-D view of a tensor: rows = product of the first `split` dims, cols = the rest ---- */
typedef struct {
    const DLTensor *t;
    lyco_dtype dt;
    int64_t rows, cols;
    bool fast;          /* element (r, c) at base + (r·rs + c)·es */
    int64_t rs;
    char *base;
    size_t es;
    int split;
} cpu_view;
void cpu_view_init(cpu_view *v, const DLTensor *t, int split);
/* dst[0..n) = row r, cols [c0, c0+n), rounded through `through` */
void cpu_load(const cpu_view *v, int64_t r, int64_t c0, int64_t n, lyco_dtype through, float *dst);
void cpu_store(const cpu_view *v, int64_t r, int64_t c0, int64_t n, const float *src);
/* A whole tensor into a compact fp32 array (values rounded through `through`). */
void cpu_load_all(const DLTensor *t, lyco_dtype through, float *dst);
void cpu_store_all(DLTensor *t, const float *src);
/* Every element of t set to 0 (any dtype and strides). */
void cpu_zero_all(DLTensor *t);
/* Rows [r0, r1) of a view set to 0 (a compact row is one memset: 0 is all-zero bits in every dtype). */
void cpu_zero_rows(const cpu_view *v, int64_t r0, int64_t r1);

/* ---- small dense kernels (fp32, row-major, vectorised) ---- */
/* C[M×N] (+)= A[M×K] · B[K×N]; lda/ldb/ldc in elements */
void cpu_gemm_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, bool accumulate);
/* C[M×N] (+)= A[M×K] · B[N×K]ᵀ */
void cpu_gemm_nt(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, bool accumulate);
/* C[M×N] (+)= A[K×M]ᵀ · B[K×N] */
void cpu_gemm_tn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, bool accumulate);

/* ---- a reusable block per calling thread (kept.c) ---- */
/* n floats, uninitialised: this thread's kept block when free (64-byte aligned, grown as needed,
   never handed back to the allocator between calls), else malloc'd; NULL when out of memory. */
float *cpu_kept_get(size_t n);
/* Releases what cpu_kept_get returned (NULL: nothing). */
void cpu_kept_put(float *p);

/* ---- threads ---- */
int cpu_threads(void);
int cpu_thread_id(void);

/* Sums that do not depend on the thread count: `units` work items (rows, groups, tiles) in
   cpu_runs(units, cap) fixed contiguous runs — a function of the shape only — each walked in order
   by one thread into its own partial; the partials are then added in run order. Run k covers
   [cpu_run_start(units, runs, k), cpu_run_start(units, runs, k + 1)). */
#define CPU_RUNS 64
/* runs for partials of matrix size (r·IK and the like): each run costs its own zeroed partial and one
   more term in the final reduction — 64 made LoHa's / GLoRA's merge backward 3–4× slower on 2 cores */
#define CPU_RUNS_BIG 8
#define CPU_RUN_FLOATS ((int64_t)1 << 22)   /* and at most this many partial floats in all */
static inline int cpu_runs(int64_t units, int64_t cap) {
    int64_t n = units < cap ? units : cap;
    return n < 1 ? 1 : (int)n;
}
static inline int64_t cpu_run_start(int64_t units, int runs, int k) { return units * k / runs; }

/* ---- the shared merge driver (merge.c) ---- */
typedef struct cpu_delta cpu_delta;
struct cpu_delta {
    /* Rows [o0, o0+nr) of ΔW̄ (nr × IK, fp32): s and masks applied, σs and m not. */
    void (*rows)(const cpu_delta *d, int64_t o0, int64_t nr, const float *Wrows, float *out);
    /* Backward: G = ∂L/∂(rows of ΔW̄ as produced above), nr × IK; accumulate parameter gradients.
       `tid` indexes per-thread partials the generator allocated in prepare(). */
    void (*rows_bwd)(const cpu_delta *d, int64_t o0, int64_t nr, const float *Wrows, const float *G, int tid);
    /* Combine per-thread partials and store the gradients (single-threaded, after the pass). */
    lyco_status (*finish_bwd)(const cpu_delta *d);
    /* Bias delta (O values, multiplier excluded: Full diff_b, Norm b_norm), and its backward
       given m·∂L/∂b''. NULL when the algorithm has none. */
    void (*bias)(const cpu_delta *d, float *db);
    lyco_status (*bias_bwd)(const cpu_delta *d, const float *Gb);
    const lyco_call *c;
    void *state;            /* the algorithm's own data */
    bool needs_w;           /* rows() reads W's rows */
    bool uses_sigma;        /* multiply by σs (LoCon, LoHa, LoKr, GLoRA) */
    /* Backward only (0: the defaults). rows_bwd_block: rows per block (0: merge.c's RB). groups > 0:
       the driver runs the row blocks in `groups` fixed contiguous runs, one thread per run, and
       passes the run's index as rows_bwd's `tid` (the generator allocated `groups` partials), so
       the partials — and its own σs partials — do not depend on the thread count. */
    int64_t rows_bwd_block;
    int groups;
    /* Backward: G is an fp32 intermediate, not a caller tensor (dense_bypass.c's ∂L/∂W'' = dyᵀ·x):
       loaded as is, and DoRA's ∂L/∂V not rounded to the compute dtype either. */
    bool g_exact;
};
lyco_status cpu_merge_fwd(const lyco_call *c, const cpu_delta *d);
lyco_status cpu_merge_bwd(const lyco_call *c, const cpu_delta *d);
/* σs as a float (1 when absent), read as the policy rounds it. */
float cpu_sigma(const lyco_call *c);

/* ---- per-algorithm entries (src/cpu/<algo>.c); NULL `why` never: decline with a reason ---- */
typedef lyco_status (*cpu_entry)(const lyco_call *c, char *why, size_t why_len);
lyco_status cpu_locon(const lyco_call *c, char *why, size_t why_len);
lyco_status cpu_glora(const lyco_call *c, char *why, size_t why_len);
lyco_status cpu_diag_oft(const lyco_call *c, char *why, size_t why_len);
lyco_status cpu_boft(const lyco_call *c, char *why, size_t why_len);
lyco_status cpu_ia3(const lyco_call *c, char *why, size_t why_len);
lyco_status cpu_full(const lyco_call *c, char *why, size_t why_len);
lyco_status cpu_norm(const lyco_call *c, char *why, size_t why_len);
lyco_status cpu_loha(const lyco_call *c, char *why, size_t why_len);
lyco_status cpu_lokr(const lyco_call *c, char *why, size_t why_len);
/* LoCon + DoRA in bypass, linear or conv (locon_dora.c): D r×I·K (Tucker: P), Ū O×r (s, q_i folded).
   Backward: ∂L/∂Ū into gU (O×r), ∂L/∂D into gD (r×I·K); writes dx, dy0, ∂L/∂σs, ∂L/∂dora_scale. */
lyco_status cpu_locon_dora_bypass(const lyco_call *c, const float *D, const float *U, int64_t r, float *gU, float *gD);
/* Bypass through E = W'' − W built by the merge driver (dense_bypass.c): LoHa and LoKr conv bypass,
   and their DoRA in bypass on linear layers. */
lyco_status cpu_bypass_dense(const lyco_call *c, const cpu_delta *dl);

#endif
