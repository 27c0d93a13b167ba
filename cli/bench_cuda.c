/*
 * bench_cuda.c — `lyco bench --backend cuda`: accuracy and device time of every fused GPU family
 * in one table (BENCH.md), rows built from the shared case machinery (src/check), so any
 * algorithm the case builders know can be a row.
 *
 *   - ceilings first, in the same run: device-to-device copy bandwidth (1 GiB, bytes read +
 *     written / time) and a bf16 GEMM (8192³, fp32 accumulation, cublasGemmEx; cuBLAS is loaded
 *     with dlopen, so nothing links it — without it the floor is the memory floor alone);
 *   - per row (family, direction, shape, dtype row): accuracy of the backend and of the eager
 *     twin against the fp64 oracle at a proxy shape the CPU oracle affords (O' = min(O, 256),
 *     T' = min(T, 64), conv: N = 1 and spatial ≤ 16); device time with CUDA events on the
 *     per-thread stream around one call: 3 warm-up calls, then --reps timed calls alternating
 *     between 2 input sets, each after a 128 MiB memset that flushes the 50 MB L2; median and
 *     minimum; peak extra device memory = the high-water mark of the stream-ordered pool (the
 *     only place the kernels allocate scratch) during one call;
 *   - floor = max(min_bytes / copy_bw, flops / gemm_rate): min_bytes reads every input the
 *     direction needs once and writes every output once, in their own dtypes; flops = useful
 *     multiply-adds × 2 (0 for elementwise families);
 *   - determinism: the row's call run twice on the same inputs, outputs compared bit for bit;
 *   - summary: geometric mean of time/floor per family and direction (all dtype rows | bf16);
 *   - --first-call: per family, a fresh process (this binary, re-executed) times CUDA context
 *     creation, the first call of a shape, the second call, and the first call of a new shape
 *     (wall clock, synchronised): lyco compiles every kernel ahead of time, so the first call
 *     should cost about what the second does plus module loading.
 * Ranks 8/32/128 sweep the bf16 rows; the mixed dtype rows run at the item's rank (conversions
 * cost the same at every rank). --quick: the item's rank and bf16 rows only; --algo FAMILIES (lora, dora, lora-conv, ia3, full, glora,
 * dylora, norm, loha, lokr, diag-oft, boft), --dir, --dtypes filter the rows. --csv FILE, --json FILE write the rows too.
 */
#ifdef LYCO_HAVE_CUDA
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <unistd.h>

#include "check/check.h"
#include "cli.h"
#include "cuda/stage.h"

int lyco_bench_cuda(const lyco_check_opts *co, const char *csv_path, const char *json_path, int reps, bool quick,
                    bool first_call, int first_call_child_idx);

#define BCK(call)                                                                              \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "lyco bench: %s failed: %s\n", #call, cudaGetErrorString(e_));     \
            return -1;                                                                         \
        }                                                                                      \
    } while (0)

enum { NSETS = 2 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(const double *v, int n) {
    double *s = malloc(sizeof(double) * (size_t)n);
    if (!s || n <= 0) {
        free(s);
        return NAN;
    }
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

/* ---- ceilings ---- */
static int event_ms(cudaEvent_t e0, cudaEvent_t e1, double *ms) {
    float f = 0;
    BCK(cudaEventSynchronize(e1));
    BCK(cudaEventElapsedTime(&f, e0, e1));
    *ms = f;
    return 0;
}

static int copy_bandwidth(double *bw) {
    size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0, e1;
    BCK(cudaMalloc(&a, bytes));
    BCK(cudaMalloc(&b, bytes));
    BCK(cudaMemset(a, 1, bytes));
    BCK(cudaEventCreate(&e0));
    BCK(cudaEventCreate(&e1));
    double t[12];
    for (int i = 0; i < 14; i++) {
        BCK(cudaEventRecord(e0, cudaStreamPerThread));
        BCK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, cudaStreamPerThread));
        BCK(cudaEventRecord(e1, cudaStreamPerThread));
        double ms;
        if (event_ms(e0, e1, &ms)) return -1;
        if (i >= 2) t[i - 2] = ms;
    }
    *bw = 2.0 * (double)bytes / (median_of(t, 12) * 1e-3);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return 0;
}

typedef cublasStatus_t (*pf_create)(cublasHandle_t *);
typedef cublasStatus_t (*pf_destroy)(cublasHandle_t);
typedef cublasStatus_t (*pf_stream)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*pf_gemmex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                    const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

/* bf16 GEMM rate (FLOP/s) through cuBLAS, or 0 when cuBLAS cannot be loaded (why says so). */
static int gemm_rate(double *rate, char *why, size_t wl) {
    *rate = 0;
    void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcublas.so.12", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, wl, "cuBLAS not loadable (%s): floor from bandwidth only", dlerror());
        return 0;
    }
    pf_create create = NULL;
    pf_destroy destroy = NULL;
    pf_stream setstream = NULL;
    pf_gemmex gemm = NULL;
    /* POSIX dlsym returns void*; a function pointer of the same size is the documented use */
    *(void **)&create = dlsym(lib, "cublasCreate_v2");
    *(void **)&destroy = dlsym(lib, "cublasDestroy_v2");
    *(void **)&setstream = dlsym(lib, "cublasSetStream_v2");
    *(void **)&gemm = dlsym(lib, "cublasGemmEx");
    cublasHandle_t h;
    if (!create || !destroy || !setstream || !gemm || create(&h) != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, wl, "cuBLAS unusable (no cublasGemmEx or cublasCreate failed): floor from bandwidth only");
        return 0;
    }
    setstream(h, cudaStreamPerThread);
    const int N = 8192;
    size_t bytes = (size_t)N * N * 2;
    void *A = NULL, *B = NULL, *C = NULL;
    BCK(cudaMalloc(&A, bytes));
    BCK(cudaMalloc(&B, bytes));
    BCK(cudaMalloc(&C, bytes));
    DLTensor t = {0};
    int64_t sh[1] = {(int64_t)N * N};
    t.ndim = 1;
    t.shape = sh;
    t.dtype = lyco_dl_dtype(LYCO_BF16);
    t.device.device_type = kDLCUDA;
    t.data = A;
    if (lyco_stage_fill(&t, 11, 1.0)) return -1;
    t.data = B;
    if (lyco_stage_fill(&t, 12, 1.0)) return -1;
    float alpha = 1.0f, beta = 0.0f;
    cudaEvent_t e0, e1;
    BCK(cudaEventCreate(&e0));
    BCK(cudaEventCreate(&e1));
    double ts[10];
    for (int i = 0; i < 13; i++) {
        BCK(cudaEventRecord(e0, cudaStreamPerThread));
        cublasStatus_t s = gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &alpha, A, CUDA_R_16BF, N, B, CUDA_R_16BF, N, &beta, C,
                                CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        BCK(cudaEventRecord(e1, cudaStreamPerThread));
        if (s != CUBLAS_STATUS_SUCCESS) {
            snprintf(why, wl, "cublasGemmEx failed (%d): floor from bandwidth only", (int)s);
            return 0;
        }
        double ms;
        if (event_ms(e0, e1, &ms)) return -1;
        if (i >= 3) ts[i - 3] = ms;
    }
    *rate = 2.0 * (double)N * N * N / (median_of(ts, 10) * 1e-3);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    destroy(h);
    return 0;
}

/* ---- the rows ---- */
#define K1 {1, 1, 1}
typedef struct {
    const char *family;  /* the summary groups rows by family */
    lyco_case c;
    unsigned dirs;       /* bit d: direction d */
    bool sweep_rank;     /* rows at ranks 8, 32, 128 (else the case's rank) */
    bool mixed;          /* also the mixed dtype rows */
    bool first_call;     /* a row of --first-call's table (its forward direction) */
} bench_item;

#define MERGE ((1u << LYCO_DIR_MERGE_FWD) | (1u << LYCO_DIR_MERGE_BWD))
#define BYPASS ((1u << LYCO_DIR_BYPASS_FWD) | (1u << LYCO_DIR_BYPASS_BWD))
#define LIN(nm, al, o, i, r, t, op) {.name = nm, .algo = al, .O = o, .I = i, .rank = r, .tokens = t, .alpha = 16, .opts = op}

static const bench_item items[] = {
    {"lora", LIN("4096x4096", LYCO_ALGO_LOCON, 4096, 4096, 32, 0, 0), MERGE, true, true, true},
    {"lora", LIN("11008x4096", LYCO_ALGO_LOCON, 11008, 4096, 32, 0, 0), MERGE, true, true, false},
    {"lora", LIN("8192tok 4096x4096", LYCO_ALGO_LOCON, 4096, 4096, 32, 8192, 0), BYPASS, true, true, true},
    {"lora", LIN("16384tok 3072x3072", LYCO_ALGO_LOCON, 3072, 3072, 32, 16384, 0), BYPASS, true, true, false},
    {"dora", LIN("4096x4096", LYCO_ALGO_LOCON, 4096, 4096, 32, 0, CASE_DORA_OUT), MERGE, false, true, true},
    {"dora", LIN("11008x4096", LYCO_ALGO_LOCON, 11008, 4096, 32, 0, CASE_DORA_OUT), MERGE, false, false, false},
    /* DoRA in bypass (dora_bypass.cu): x·Wᵀ again plus the factored norms */
    {"dora", LIN("2048tok 4096x4096", LYCO_ALGO_LOCON, 4096, 4096, 32, 2048, CASE_DORA_OUT), BYPASS, false, false, false},
    /* DoRA in bypass through E = W'' − W (dense_bypass.c: the family's merge, then FFMA products) */
    {"dora-dense", LIN("LoHa 2048tok 4096x4096", LYCO_ALGO_LOHA, 4096, 4096, 16, 2048, CASE_DORA_OUT), BYPASS, false, false, false},
    {"dora-dense", {.name = "LoKr 2048tok 4096x4096 f8", .algo = LYCO_ALGO_LOKR, .O = 4096, .I = 4096, .rank = 16, .alpha = 16,
                    .tokens = 2048, .extra = {8, 8}, .opts = CASE_W2_LOWRANK | CASE_DORA_OUT},
     BYPASS, false, false, false},
    {"lora-conv",
     {.name = "3x3 640ch 64x64 n2", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 640, .I = 640,
      .k = {3, 3, 1}, .stride = K1, .pad = {1, 1, 0}, .dil = K1, .rank = 32, .tokens = 2, .spatial = {64, 64, 1}, .alpha = 16},
     MERGE | BYPASS, false, true, true},
    {"lora-conv",
     {.name = "3x3 320ch 128x128 n2", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 320, .I = 320,
      .k = {3, 3, 1}, .stride = K1, .pad = {1, 1, 0}, .dil = K1, .rank = 16, .tokens = 2, .spatial = {128, 128, 1}, .alpha = 8},
     BYPASS, false, false, false},
    {"ia3", LIN("8192tok 4096x4096 out", LYCO_ALGO_IA3, 4096, 4096, 0, 8192, 0), BYPASS, false, true, true},
    {"ia3", LIN("4096x4096", LYCO_ALGO_IA3, 4096, 4096, 0, 0, 0), MERGE, false, false, false},
    {"full", LIN("4096x4096", LYCO_ALGO_FULL, 4096, 4096, 0, 0, CASE_BIAS), MERGE, false, true, false},
    {"glora", LIN("4096x4096", LYCO_ALGO_GLORA, 4096, 4096, 8, 0, 0), MERGE, false, true, false},
    {"glora", LIN("8192tok 4096x4096", LYCO_ALGO_GLORA, 4096, 4096, 8, 8192, 0), BYPASS, false, false, false},
    {"dylora",
     {.name = "4096x4096", .algo = LYCO_ALGO_DYLORA, .O = 4096, .I = 4096, .rank = 32, .alpha = 16, .extra = {4, 3}},
     MERGE, false, false, false},
    {"dylora",
     {.name = "8192tok 4096x4096", .algo = LYCO_ALGO_DYLORA, .O = 4096, .I = 4096, .rank = 32, .tokens = 8192, .alpha = 16,
      .extra = {4, 3}},
     BYPASS, false, false, false},
    {"loha", LIN("4096x4096", LYCO_ALGO_LOHA, 4096, 4096, 16, 0, 0), MERGE, false, true, false},
    {"loha", LIN("8192tok 4096x4096", LYCO_ALGO_LOHA, 4096, 4096, 16, 8192, 0), BYPASS, false, false, false},
    {"lokr", {.name = "4096x4096 f8 w2 r16", .algo = LYCO_ALGO_LOKR, .O = 4096, .I = 4096, .rank = 16, .alpha = 16,
              .extra = {8, 8}, .opts = CASE_W2_LOWRANK},
     MERGE, false, true, false},
    {"lokr", {.name = "4096x4096 64x64 full", .algo = LYCO_ALGO_LOKR, .O = 4096, .I = 4096, .extra = {64, 64}}, MERGE, false,
     false, false},
    {"lokr", {.name = "8192tok 4096x4096 f8 w2 r16", .algo = LYCO_ALGO_LOKR, .O = 4096, .I = 4096, .rank = 16, .alpha = 16,
              .tokens = 8192, .extra = {8, 8}, .opts = CASE_W2_LOWRANK},
     BYPASS, false, false, false},
    {"diag-oft", LIN("4096x4096 b32", LYCO_ALGO_DIAG_OFT, 4096, 4096, 32, 0, 0), MERGE, false, true, false},
    {"diag-oft", LIN("8192tok 4096x4096 b32", LYCO_ALGO_DIAG_OFT, 4096, 4096, 32, 8192, 0), BYPASS, false, false, false},
    {"boft", {.name = "4096x4096 b32 m4", .algo = LYCO_ALGO_BOFT, .O = 4096, .I = 4096, .rank = 32, .extra = {4}}, MERGE,
     false, true, false},
    {"boft", {.name = "8192tok 4096x4096 b32 m4", .algo = LYCO_ALGO_BOFT, .O = 4096, .I = 4096, .rank = 32, .tokens = 8192,
              .extra = {4}},
     BYPASS, false, false, false},
    {"norm", {.name = "8192tok C4096", .algo = LYCO_ALGO_NORM, .kind = LYCO_LAYER_NORM, .O = 4096, .I = 4096, .tokens = 8192,
              .opts = CASE_BIAS},
     MERGE | BYPASS, false, false, false},
};

/* Is name in the comma-separated list (NULL or empty: everything)? */
static bool listed(const char *list, const char *name) {
    if (!list || !*list) return true;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && !strncmp(p, name, n)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static const lyco_dtype_row *row_named(const char *name) {
    for (int k = 0; k < lyco_dtype_row_count; k++)
        if (!strcmp(lyco_dtype_rows[k].name, name)) return &lyco_dtype_rows[k];
    return NULL;
}

static double family_flops(const lyco_case *c, lyco_direction d);

/* Useful multiply-adds × 2 of a row (0: elementwise / memory-bound families). DoRA in bypass adds
   the product with the base weight (y = y0 + a⊙(x·Wᵀ) + c⊙Δ(x): W'' − W is full-rank). */
static double row_flops(const lyco_case *c, lyco_direction d) {
    double f = family_flops(c, d);
    bool dora = c->opts & (CASE_DORA_OUT | CASE_DORA_IN), bypass = d == LYCO_DIR_BYPASS_FWD || d == LYCO_DIR_BYPASS_BWD;
    if (!dora || !bypass || c->algo == LYCO_ALGO_LOCON) return f; /* LoCon's formula counts it */
    double P = (double)c->tokens * (c->kind == LYCO_LAYER_CONV ? case_spatial_positions(c) : 1.0);
    return f + (d == LYCO_DIR_BYPASS_FWD ? 2.0 : 4.0) * P * (double)c->I * case_kernel_positions(c) * (double)c->O;
}

static double family_flops(const lyco_case *c, lyco_direction d) {
    double K = case_kernel_positions(c);
    double O = (double)c->O, IK = (double)c->I * K, r = (double)c->rank;
    double P = (double)(c->tokens ? c->tokens : 0);
    if (c->kind == LYCO_LAYER_CONV) P *= case_spatial_positions(c);
    if (c->algo == LYCO_ALGO_DYLORA) r = (double)(c->extra[0] * (c->extra[1] + 1));
    switch (c->algo) {
    case LYCO_ALGO_LOCON:
    case LYCO_ALGO_DYLORA:
        switch (d) {
        case LYCO_DIR_MERGE_FWD: return 2.0 * O * IK * r;
        case LYCO_DIR_MERGE_BWD: return 4.0 * O * IK * r;
        case LYCO_DIR_BYPASS_FWD: return 2.0 * P * r * (IK + O) + ((c->opts & CASE_DORA_OUT) ? 2.0 * P * IK * O : 0);
        default: return 4.0 * P * r * (IK + O) + ((c->opts & CASE_DORA_OUT) ? 4.0 * P * IK * O : 0);
        }
    case LYCO_ALGO_LOHA: /* ΔW = (u1·d1)∘(u2·d2): two rank-r products; bypass through the r² face-splitting form */
        switch (d) {
        case LYCO_DIR_MERGE_FWD: return 4.0 * O * IK * r;
        case LYCO_DIR_MERGE_BWD: return 8.0 * O * IK * r;
        case LYCO_DIR_BYPASS_FWD: return 2.0 * P * r * r * (IK + O);
        default: return 4.0 * P * r * r * (IK + O);
        }
    case LYCO_ALGO_LOKR: { /* y = W1·X·W2ᵀ per token (X: c×d·K): b·c·(d·K + a) multiply-adds */
        double a = (double)c->extra[0], cc = (double)c->extra[1], b = O / a, dd = IK / cc;
        double per_tok = b * cc * (dd + a);
        switch (d) {
        case LYCO_DIR_MERGE_FWD: return 2.0 * O * IK; /* one multiply per ΔW element */
        case LYCO_DIR_MERGE_BWD: return 4.0 * O * IK;
        case LYCO_DIR_BYPASS_FWD: return 2.0 * P * per_tok;
        default: return 4.0 * P * per_tok;
        }
    }
    case LYCO_ALGO_DIAG_OFT:
    case LYCO_ALGO_BOFT: { /* m block-diagonal b×b stages on W (merge) or on y0 (bypass) */
        double m = c->algo == LYCO_ALGO_BOFT ? (double)case_boft_stages(c) : 1.0;
        switch (d) {
        case LYCO_DIR_MERGE_FWD: return 2.0 * m * O * IK * r;
        case LYCO_DIR_MERGE_BWD: return 4.0 * m * O * IK * r;
        case LYCO_DIR_BYPASS_FWD: return 2.0 * m * P * O * r;
        default: return 4.0 * m * P * O * r;
        }
    }
    case LYCO_ALGO_GLORA: /* ΔW = W·A1·A2 + B1·B2: W·A1 plus a rank-2r product; bypass: W·A1 once, then the
                             rank activations x·A2ᵀ, x·B2ᵀ and their products with P and B1 per token */
        switch (d) {
        case LYCO_DIR_MERGE_FWD: return 2.0 * O * IK * r + 4.0 * O * IK * r;
        case LYCO_DIR_MERGE_BWD: return 4.0 * O * IK * r + 8.0 * O * IK * r;
        case LYCO_DIR_BYPASS_FWD: return 2.0 * O * IK * r + 4.0 * P * r * (IK + O);
        default: return 4.0 * O * IK * r + 8.0 * P * r * (IK + O);
        }
    default: return 0;
    }
}

typedef struct {
    double ulp_fused, ulp_eager, budget, med_us, min_us, floor_us, gbs, extra_mib;
    bool pass, det;
    char path[200];
} row_result;

/* The accuracy proxy of a case: the same algorithm and options at a size the fp64 oracle affords. */
static lyco_case proxy_of(const lyco_case *c) {
    lyco_case p = *c;
    p.name = "bench_proxy";
    if (p.kind != LYCO_LAYER_NORM && p.O > 256) p.O = 256;
    if (p.kind == LYCO_LAYER_CONV) {
        p.tokens = 1;
        for (int i = 0; i < 2; i++)
            if (p.spatial[i] > 16) p.spatial[i] = 16;
    } else if (p.tokens > 64) {
        p.tokens = 64;
    }
    if (!p.tokens) p.tokens = 16;
    return p;
}

/* LYCO_BENCH_GRAPH=0: plain calls timed instead of graph replays */
static bool bench_graphs(void) {
    const char *e = getenv("LYCO_BENCH_GRAPH");
    return !(e && e[0] == '0');
}

static int time_row(const lyco_case *c, lyco_direction dir, const lyco_dtype_row *row, uint64_t seed, int reps, double bw,
                    double rate, row_result *res) {
    lyco_prepared *set[NSETS] = {0};
    lyco_ctx *ctx = NULL;
    void *flush = NULL;
    size_t flush_bytes = (size_t)128 << 20;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double *t = calloc((size_t)reps, sizeof(double));
    int rc = 0;
    if (!t || lyco_ctx_create(&ctx) || lyco_ctx_set_backend(ctx, LYCO_BACKEND_CUDA)) rc = -1;
    for (int k = 0; k < NSETS && !rc; k++) {
        if (lyco_prepare(c, dir, row, LYCO_OUTPUT_PROMOTE, seed * 977 + (uint64_t)k * 31 + 1, &set[k]) ||
            lyco_prepared_to_device(set[k])) {
            fprintf(stderr, "lyco bench: cannot prepare %s %s: %s\n", c->name, lyco_direction_name(dir), lyco_last_error());
            rc = -1;
        }
        if (!rc && dir == LYCO_DIR_MERGE_FWD) lyco_prepared_set_merge_mode(set[k], LYCO_MERGE_WEIGHT);
    }
    if (!rc && (cudaMalloc(&flush, flush_bytes) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
                cudaEventCreate(&e1) != cudaSuccess))
        rc = -1;
    cudaMemPool_t pool = NULL;
    if (!rc && cudaDeviceGetDefaultMemPool(&pool, 0) != cudaSuccess) pool = NULL;
    res->extra_mib = 0;
    /* Device time (BENCH.md §3): each set's call is captured once into a CUDA graph (after a plain
       warm-up call, which also gives the peak extra memory) and the graph is replayed, so the time
       is the device's alone — the peers' method; around a plain call the events also count the
       host's enqueue wherever it outlasts the flush (measured: 25–55 µs on the conv rows, session
       34). LYCO_BENCH_GRAPH=0, or a call that cannot be captured, times plain calls (the row's
       path then says "[events]"). */
    cudaGraphExec_t gexec[NSETS] = {0};
    bool graphs = bench_graphs();
    for (int k = 0; graphs && k < NSETS && !rc; k++) {
        if (k == 0 && pool) {
            unsigned long long zero = 0;
            cudaStreamSynchronize(cudaStreamPerThread);
            cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero);
        }
        if (lyco_prepared_invoke(ctx, set[k]) || cudaStreamSynchronize(cudaStreamPerThread) != cudaSuccess) {
            rc = -1;
            break;
        }
        if (k == 0 && pool) {
            unsigned long long high = 0;
            cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high);
            res->extra_mib = (double)high / 1048576.0;
        }
        cudaGraph_t graph = NULL;
        lyco_status st = LYCO_ERR_BACKEND;
        cudaError_t ce = cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal);
        if (ce == cudaSuccess) {
            st = lyco_prepared_invoke(ctx, set[k]);
            ce = cudaStreamEndCapture(cudaStreamPerThread, &graph);
        }
        if (st || ce != cudaSuccess || cudaGraphInstantiate(&gexec[k], graph, 0) != cudaSuccess) {
            fprintf(stderr, "lyco bench: %s %s %s: graph capture failed (%s); timing plain calls\n", c->name,
                    lyco_direction_name(dir), row->name, st ? lyco_last_error() : cudaGetErrorString(ce));
            (void)cudaGetLastError();
            for (int j = 0; j <= k; j++)
                if (gexec[j]) cudaGraphExecDestroy(gexec[j]), gexec[j] = NULL;
            graphs = false;
        }
        if (graph) cudaGraphDestroy(graph);
    }
    for (int i = 0; !rc && i < 3 + reps; i++) {
        if (cudaMemsetAsync(flush, i & 0xff, flush_bytes, cudaStreamPerThread) != cudaSuccess) rc = -1;
        if (pool && i == 2 && !graphs) {   /* peak extra memory of one call: the pool's high-water mark */
            cudaStreamSynchronize(cudaStreamPerThread);
            unsigned long long zero = 0; /* cuuint64_t */
            cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero);
        }
        cudaEventRecord(e0, cudaStreamPerThread);
        lyco_status st = LYCO_OK;
        if (gexec[i % NSETS]) {
            if (cudaGraphLaunch(gexec[i % NSETS], cudaStreamPerThread) != cudaSuccess) rc = -1;
        } else {
            st = lyco_prepared_invoke(ctx, set[i % NSETS]);
        }
        cudaEventRecord(e1, cudaStreamPerThread);
        if (st) {
            snprintf(res->path, sizeof res->path, "%s: %s", lyco_status_name(st), lyco_last_error());
            rc = 1;
            break;
        }
        double ms;
        if (event_ms(e0, e1, &ms)) rc = -1;
        else if (i >= 3) t[i - 3] = ms;
        if (pool && i == 2 && !graphs) {
            unsigned long long high = 0;
            cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high);
            res->extra_mib = (double)high / 1048576.0;
        }
    }
    if (!rc) {
        lyco_path p;
        lyco_ctx_last_path(ctx, &p);
        snprintf(res->path, sizeof res->path, "%s%s%s%s", lyco_path_name(p.kind), p.why[0] ? ": " : "", p.why, graphs ? "" : " [events]");
        uint64_t h1 = 0, h2 = 1;
        if (lyco_prepared_invoke(ctx, set[0]) || lyco_prepared_output_hash(set[0], &h1) || lyco_prepared_invoke(ctx, set[0]) ||
            lyco_prepared_output_hash(set[0], &h2))
            rc = -1;
        res->det = h1 == h2;
    }
    if (!rc) {
        size_t min_bytes = lyco_prepared_min_bytes(set[0]);
        res->med_us = 1e3 * median_of(t, reps);
        res->min_us = 1e9;
        for (int i = 0; i < reps; i++) res->min_us = fmin(res->min_us, 1e3 * t[i]);
        double fb = (double)min_bytes / bw, ff = rate > 0 ? row_flops(c, dir) / rate : 0;
        res->floor_us = 1e6 * (fb > ff ? fb : ff);
        res->gbs = (double)min_bytes / (res->med_us * 1e-6) / 1e9;
    }
    free(t);
    for (int k = 0; k < NSETS; k++)
        if (gexec[k]) cudaGraphExecDestroy(gexec[k]);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (flush) cudaFree(flush);
    for (int k = 0; k < NSETS; k++) lyco_prepared_free(set[k]);
    lyco_ctx_destroy(ctx);
    return rc;
}

/* ---- first call in a fresh process ---- */
/* The idx-th item marked first_call, or NULL. */
static const bench_item *first_call_item(int idx) {
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++)
        if (items[i].first_call && idx-- == 0) return &items[i];
    return NULL;
}

/* Child side: prints "first-call <ctx_ms> <first_ms> <second_ms> <newshape_ms>". */
static int first_call_child(int idx) {
    const bench_item *it = idx >= 0 ? first_call_item(idx) : NULL;
    if (!it) return 2;
    lyco_direction dir = (it->dirs & (1u << LYCO_DIR_MERGE_FWD)) ? LYCO_DIR_MERGE_FWD : LYCO_DIR_BYPASS_FWD;
    const lyco_dtype_row *row = row_named("bf16");
    double t0 = now_ms();
    BCK(cudaFree(0));
    double t1 = now_ms();
    lyco_case c2 = it->c;
    c2.O -= 8;   /* a second, new shape */
    c2.rank = it->c.rank / 2 > 0 ? it->c.rank / 2 : 0;
    lyco_prepared *p = NULL, *q = NULL;
    lyco_ctx *ctx = NULL;
    if (lyco_ctx_create(&ctx) || lyco_ctx_set_backend(ctx, LYCO_BACKEND_CUDA) || lyco_prepare(&it->c, dir, row, LYCO_OUTPUT_PROMOTE, 5, &p) ||
        lyco_prepared_to_device(p) || lyco_prepare(&c2, dir, row, LYCO_OUTPUT_PROMOTE, 6, &q) || lyco_prepared_to_device(q)) {
        fprintf(stderr, "lyco bench: first-call setup failed: %s\n", lyco_last_error());
        return 1;
    }
    BCK(cudaDeviceSynchronize());
    double ts[4];
    lyco_prepared *order[3] = {p, p, q};
    for (int k = 0; k < 3; k++) {
        double a = now_ms();
        if (lyco_prepared_invoke(ctx, order[k])) {
            fprintf(stderr, "lyco bench: first-call run failed: %s\n", lyco_last_error());
            return 1;
        }
        BCK(cudaStreamSynchronize(cudaStreamPerThread));
        ts[k] = now_ms() - a;
    }
    lyco_path path;
    lyco_ctx_last_path(ctx, &path);
    printf("first-call %.3f %.3f %.3f %.3f %s\n", t1 - t0, ts[0], ts[1], ts[2], lyco_path_name(path.kind));
    lyco_prepared_free(p);
    lyco_prepared_free(q);
    lyco_ctx_destroy(ctx);
    return 0;
}

static void first_call_table(const char *self) {
    printf("\nfirst call in a fresh process (wall ms, synchronised; bf16; forward direction):\n");
    printf("%-10s %-24s | %9s %9s %9s %12s | %s\n", "family", "shape", "ctx_init", "first", "second", "new_shape", "path");
    for (int i = 0; first_call_item(i); i++) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "'%s' bench --backend cuda --first-call-child %d", self, i);
        FILE *f = popen(cmd, "r");
        char line[256] = "";
        double a = NAN, b = NAN, c = NAN, d = NAN;
        char path[32] = "?";
        if (f) {
            while (fgets(line, sizeof line, f))
                if (!strncmp(line, "first-call ", 11)) sscanf(line + 11, "%lf %lf %lf %lf %31s", &a, &b, &c, &d, path);
            pclose(f);
        }
        printf("%-10s %-24s | %9.1f %9.3f %9.3f %12.3f | %s\n", first_call_item(i)->family, first_call_item(i)->c.name, a, b, c, d, path);
    }
}

int lyco_bench_cuda(const lyco_check_opts *co, const char *csv_path, const char *json_path, int reps, bool quick,
                    bool first_call, int first_call_child_idx) {
    if (first_call_child_idx >= 0) return first_call_child(first_call_child_idx);
    struct cudaDeviceProp prop;
    int dev = 0, drv = 0, rtv = 0;
    BCK(cudaGetDevice(&dev));
    BCK(cudaGetDeviceProperties(&prop, dev));
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rtv);
    const char *commit = getenv("LYCO_GIT_COMMIT");
    printf("lyco bench: backend cuda, device %s (sm_%d%d, %d SMs, L2 %d MB), driver %d, runtime %d, commit %s, seed %llu\n",
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20, drv, rtv, commit ? commit : "?",
           (unsigned long long)co->seed);
    const bool graphs = bench_graphs();
    printf("timing: CUDA events around %s, L2 flushed between repeats\n",
           !graphs ? "each call (LYCO_BENCH_GRAPH=0: the host's enqueue counts where the device waits for it)"
                              : "a CUDA-graph replay of each call (device time; LYCO_BENCH_GRAPH=0 times plain calls)");
    double bw = 0, rate = 0;
    char why[160] = "";
    if (copy_bandwidth(&bw) || gemm_rate(&rate, why, sizeof why)) return 2;
    printf("ceilings: copy %.0f GB/s (read + write), bf16 GEMM %.0f TFLOP/s%s%s\n", bw / 1e9, rate / 1e12, why[0] ? "; " : "", why);
    printf("timing: CUDA events, 3 warm-up + %d repeats (median, min), %d alternating input sets, 128 MiB L2 flush before each;"
           " ulp: max RMS-normalised ULP vs the fp64 oracle (budget: NUMERICS.md's for the fused path; mixed rows count the policy's 16-bit rounding points in the output dtype's ULP) at a proxy shape (O' = min(O, 256), T' = min(T, 64), conv N = 1, "
           "spatial ≤ 16); extra = peak stream-ordered scratch of one call\n",
           reps, NSETS);
    FILE *csv = csv_path ? fopen(csv_path, "w") : NULL, *json = json_path ? fopen(json_path, "w") : NULL;
    if ((csv_path && !csv) || (json_path && !json)) {
        fprintf(stderr, "lyco bench: cannot open the --csv/--json file\n");
        return 2;
    }
    if (csv)
        fprintf(csv, "family,dir,shape,rank,dtypes,ulp_fused,ulp_eager,ulp_budget,time_med_us,time_min_us,floor_us,time_over_floor,gb_s,"
                     "extra_mib,deterministic,path,pass\n");
    if (json)
        fprintf(json, "{\"device\": \"%s\", \"copy_gb_s\": %.1f, \"gemm_tflop_s\": %.1f, \"timing\": \"%s\", \"rows\": [\n", prop.name,
                bw / 1e9, rate / 1e12, !graphs ? "events around each call" : "events around a CUDA-graph replay of each call");
    printf("%-9s %-10s %-26s %-17s | %9s %9s %9s | %9s %9s | %9s %6s | %6s %8s | %-3s | %s\n", "family", "dir", "shape", "dtypes", "ulp_fused",
           "ulp_eager", "budget", "med_us", "min_us", "floor_us", "t/fl", "GB/s", "extraMiB", "det", "path");
    enum { NFAM = 16 };
    const char *fam[NFAM];
    double lsum[NFAM][LYCO_DIR_COUNT][2];
    int lcnt[NFAM][LYCO_DIR_COUNT][2], nfam = 0;
    memset(lsum, 0, sizeof lsum);
    memset(lcnt, 0, sizeof lcnt);
    int fails = 0, nrow = 0;
    static const int64_t ranks[] = {8, 32, 128};
    static const char *rows[] = {"bf16", "bf16+fp32adapter", "fp32+bf16adapter"};
    for (size_t ii = 0; ii < sizeof items / sizeof items[0]; ii++) {
        const bench_item *it = &items[ii];
        if (!listed(co->algo, it->family)) continue;
        int fi = 0;
        while (fi < nfam && strcmp(fam[fi], it->family)) fi++;
        if (fi == nfam && nfam < NFAM) fam[nfam++] = it->family;
        for (int ri = 0; ri < (it->sweep_rank ? 3 : 1); ri++)
            for (int di = 0; di < (it->mixed ? 3 : 1); di++)
                for (int d = 0; d < LYCO_DIR_COUNT; d++) {
                    if (!(it->dirs & (1u << d)) || !listed(co->dir, lyco_direction_name((lyco_direction)d))) continue;
                    lyco_case c = it->c;
                    if (it->sweep_rank) c.rank = ranks[ri];
                    if (quick && (c.rank != it->c.rank || di != 0)) continue;
                    if (di != 0 && c.rank != it->c.rank) continue; /* mixed dtype rows at the item's rank only */
                    const lyco_dtype_row *row = row_named(rows[di]);
                    if (!row || !listed(co->dtypes, row->name)) continue;
                    lyco_direction dir = (lyco_direction)d;
                    row_result r;
                    memset(&r, 0, sizeof r);
                    lyco_case pc = proxy_of(&c);
                    lyco_check_opts o = *co;
                    o.backend = LYCO_BACKEND_CUDA;
                    o.mode = LYCO_OUTPUT_PROMOTE;
                    lyco_check_result cr;
                    r.ulp_fused = r.ulp_eager = r.budget = NAN;
                    if (lyco_check_one(&pc, dir, row, &o, &cr) == LYCO_OK) {
                        r.ulp_fused = cr.backend.max_ulp;
                        r.budget = cr.budget;
                        r.ulp_eager = cr.eager_ok ? cr.eager.max_ulp : NAN;
                        r.pass = cr.pass;
                    }
                    int trc = time_row(&c, dir, row, co->seed, reps, bw, rate, &r);
                    if (trc < 0) return 2;
                    bool fused = !strncmp(r.path, "fused", 5);
                    double ratio = r.floor_us > 0 ? r.med_us / r.floor_us : NAN;
                    if (!fused || !r.pass || !r.det || trc) fails++;
                    char shape[48];
                    snprintf(shape, sizeof shape, "%s%s%lld", c.name, c.rank ? " r" : "", (long long)c.rank);
                    if (!c.rank) snprintf(shape, sizeof shape, "%s", c.name);
                    printf("%-9s %-10s %-26s %-17s | %9.3f %9.3f %9.2f | %9.1f %9.1f | %9.1f %6.2f | %6.0f %8.1f | %-3s | %.60s%s\n", it->family,
                           lyco_direction_name(dir), shape, row->name, r.ulp_fused, r.ulp_eager, r.budget, r.med_us, r.min_us, r.floor_us, ratio, r.gbs,
                           r.extra_mib, r.det ? "yes" : "NO", r.path, r.pass ? "" : " (ulp over budget)");
                    fflush(stdout);
                    if (ratio > 0 && fused) {
                        lsum[fi][d][0] += log(ratio);
                        lcnt[fi][d][0]++;
                        if (di == 0) {
                            lsum[fi][d][1] += log(ratio);
                            lcnt[fi][d][1]++;
                        }
                    }
                    if (csv)
                        fprintf(csv, "%s,%s,%s,%lld,%s,%.4f,%.4f,%.4f,%.2f,%.2f,%.2f,%.3f,%.1f,%.2f,%d,\"%s\",%d\n", it->family,
                                lyco_direction_name(dir), c.name, (long long)c.rank, row->name, r.ulp_fused, r.ulp_eager, r.budget, r.med_us,
                                r.min_us, r.floor_us, ratio, r.gbs, r.extra_mib, r.det, r.path, r.pass);
                    if (json)
                        fprintf(json,
                                "%s  {\"family\": \"%s\", \"dir\": \"%s\", \"shape\": \"%s\", \"rank\": %lld, \"dtypes\": \"%s\", "
                                "\"ulp_fused\": %.4f, \"ulp_eager\": %.4f, \"ulp_budget\": %.4f, \"time_med_us\": %.2f, \"time_min_us\": %.2f, "
                                "\"floor_us\": %.2f, \"time_over_floor\": %.3f, \"gb_s\": %.1f, \"extra_mib\": %.2f, "
                                "\"deterministic\": %s, \"fused\": %s, \"pass\": %s}",
                                nrow ? ",\n" : "", it->family, lyco_direction_name(dir), c.name, (long long)c.rank, row->name,
                                isnan(r.ulp_fused) ? -1.0 : r.ulp_fused, isnan(r.ulp_eager) ? -1.0 : r.ulp_eager, isnan(r.budget) ? -1.0 : r.budget, r.med_us, r.min_us,
                                r.floor_us, isnan(ratio) ? -1.0 : ratio, r.gbs, r.extra_mib, r.det ? "true" : "false",
                                fused ? "true" : "false", r.pass ? "true" : "false");
                    nrow++;
                }
    }
    printf("\ngeomean time/floor per family and direction, fused rows (all dtype rows | bf16 rows):\n");
    for (int f = 0; f < nfam; f++)
        for (int d = 0; d < LYCO_DIR_COUNT; d++)
            if (lcnt[f][d][0])
                printf("  %-9s %-10s %6.2fx over %2d rows | %6.2fx over %2d rows\n", fam[f], lyco_direction_name((lyco_direction)d),
                       exp(lsum[f][d][0] / lcnt[f][d][0]), lcnt[f][d][0], lcnt[f][d][1] ? exp(lsum[f][d][1] / lcnt[f][d][1]) : NAN,
                       lcnt[f][d][1]);
    printf("%d rows, %d not fused, over the accuracy budget or not bitwise repeatable\n", nrow, fails);
    if (csv) fclose(csv);
    if (json) {
        fprintf(json, "\n]}\n");
        fclose(json);
    }
    if (first_call) {
        char self[1024];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
            self[n] = 0;
            first_call_table(self);
        }
    }
    return fails ? 1 : 0;
}
#else
typedef int lyco_bench_cuda_absent; /* a translation unit may not be empty (ISO C) */
#endif /* LYCO_HAVE_CUDA */
