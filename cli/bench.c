/*
 * bench.c — `lyco bench`: accuracy and time in one table (BENCH.md).
 *
 * Host backends (default): the quick case set through the check runner (one call per row).
 *
 * --backend cuda: the LoRA rows of BENCH.md §4 — merge 4096×4096 and 11008×4096, bypass
 * 8192 tokens × 4096² and 16384 × 3072², ranks 8/32/128, dtype rows bf16, bf16+fp32adapter and
 * fp32+bf16adapter, forward and backward (72 rows; --quick: rank 32, bf16 only).
 *   - ceilings first, in the same run: device-to-device copy bandwidth (1 GiB cudaMemcpy, bytes
 *     read + written / time) and a bf16 GEMM (8192³, fp32 accumulation, cublasGemmEx; cuBLAS is
 *     loaded at run time with dlopen, so neither the library nor this command links it — without
 *     it the floor is the memory floor alone, and the header says so);
 *   - per row: accuracy of the fused kernel and of the eager twin against the fp64 oracle (the
 *     check machinery, at a proxy shape the CPU oracle can afford: O' = min(O, 256), T' =
 *     min(T, 64), same I and r); device time with CUDA events on the call's stream: 3 warm-up
 *     calls, then --reps (default 30) timed calls, each on the next of 4 rotating input sets and
 *     after a 128 MiB memset that flushes the 50 MB L2; median and minimum;
 *   - floor = max(min_bytes / copy_bw, flops / gemm_rate), min_bytes = every input read once and
 *     every output written once (BENCH.md §2), flops = the useful multiply-adds × 2;
 *   - columns: algo dir shape dtypes | ulp_max fused, eager | time_med time_min (µs) | floor |
 *     time/floor | GB/s (min_bytes / time_med) | det (the row's op run twice on the same inputs
 *     gives bit-identical outputs) | path; then the geometric mean of time/floor per family and
 *     direction. --csv FILE / --json FILE also write the rows; --reps N (≥ 20).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check.h"
#include "cli.h"

#ifdef LYCO_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include "cuda/stage.h"
#endif

int lyco_parse_check_opts(int argc, char **argv, lyco_check_opts *o);

#ifdef LYCO_HAVE_CUDA

#define BCK(call)                                                                              \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "lyco bench: %s failed: %s\n", #call, cudaGetErrorString(e_));     \
            return -1;                                                                         \
        }                                                                                      \
    } while (0)

enum { NSETS = 4 };

typedef struct {
    const char *csv, *json;
    int reps;
    bool quick;
} bench_opts;

typedef struct {
    DLTensor t;
    int64_t shape[2];
    void *p;
} dbuf;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(const double *v, int n) {
    double *s = malloc(sizeof(double) * (size_t)n);
    if (!s) return NAN;
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

static int dbuf_make(dbuf *b, lyco_dtype d, int64_t rows, int64_t cols, uint64_t seed) {
    memset(b, 0, sizeof *b);
    int dev = 0;
    BCK(cudaGetDevice(&dev));
    b->shape[0] = rows;
    b->shape[1] = cols;
    size_t bytes = (size_t)(rows * cols) * lyco_dtype_size(d);
    BCK(cudaMalloc(&b->p, bytes ? bytes : 16));
    b->t.data = b->p;
    b->t.device.device_type = kDLCUDA;
    b->t.device.device_id = dev;
    b->t.ndim = 2;
    b->t.dtype = lyco_dl_dtype(d);
    b->t.shape = b->shape;
    if (seed && lyco_stage_fill(&b->t, seed, 1.0)) {
        fprintf(stderr, "lyco bench: fill failed: %s\n", lyco_last_error());
        return -1;
    }
    return 0;
}

static void dbuf_free(dbuf *b) {
    if (b->p) cudaFree(b->p);
    memset(b, 0, sizeof *b);
}

static size_t dbytes(const dbuf *b) { return b->p ? (size_t)(b->shape[0] * b->shape[1]) * lyco_dtype_size(lyco_dtype_of(&b->t)) : 0; }

/* ---- ceilings ---- */
static int time_events(cudaEvent_t e0, cudaEvent_t e1, double *ms) {
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
        if (time_events(e0, e1, &ms)) return -1;
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
    if (!create || !destroy || !setstream || !gemm) {
        snprintf(why, wl, "cuBLAS lacks cublasGemmEx: floor from bandwidth only");
        return 0;
    }
    cublasHandle_t h;
    if (create(&h) != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, wl, "cublasCreate failed: floor from bandwidth only");
        return 0;
    }
    setstream(h, cudaStreamPerThread);
    const int N = 8192;
    dbuf A, B, C;
    if (dbuf_make(&A, LYCO_BF16, N, N, 11) || dbuf_make(&B, LYCO_BF16, N, N, 12) || dbuf_make(&C, LYCO_BF16, N, N, 0)) return -1;
    float alpha = 1.0f, beta = 0.0f;
    cudaEvent_t e0, e1;
    BCK(cudaEventCreate(&e0));
    BCK(cudaEventCreate(&e1));
    double t[10];
    for (int i = 0; i < 13; i++) {
        BCK(cudaEventRecord(e0, cudaStreamPerThread));
        cublasStatus_t s = gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &alpha, A.p, CUDA_R_16BF, N, B.p, CUDA_R_16BF, N, &beta, C.p,
                                CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        BCK(cudaEventRecord(e1, cudaStreamPerThread));
        if (s != CUBLAS_STATUS_SUCCESS) {
            snprintf(why, wl, "cublasGemmEx failed (%d): floor from bandwidth only", (int)s);
            return 0;
        }
        double ms;
        if (time_events(e0, e1, &ms)) return -1;
        if (i >= 3) t[i - 3] = ms;
    }
    *rate = 2.0 * (double)N * N * N / (median_of(t, 10) * 1e-3);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    dbuf_free(&A);
    dbuf_free(&B);
    dbuf_free(&C);
    destroy(h);
    return 0;
}

/* ---- rows ---- */
typedef struct {
    bool merge;
    const char *shape;
    int64_t O, I, T, r;
} bench_shape;

typedef struct {
    char dir[12], shape[24], dtypes[20], path[64];
    double ulp_fused, ulp_eager, med_us, min_us, floor_us, gbs;
    bool pass, det;
} bench_result;

/* One set of operands of a row (device). */
typedef struct {
    dbuf W, U, D, out, G, gU, gD, x, y0, y, dy, dx, dy0;
} bench_set;

static void set_free(bench_set *s) {
    dbuf *all[] = {&s->W, &s->U, &s->D, &s->out, &s->G, &s->gU, &s->gD, &s->x, &s->y0, &s->y, &s->dy, &s->dx, &s->dy0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dbuf_free(all[i]);
}

/* Allocates and fills one set; returns the bytes the row moves at minimum. */
static int set_make(bench_set *s, const bench_shape *sh, lyco_direction dir, const lyco_dtype_row *row, lyco_dtype out,
                    uint64_t seed, size_t *min_bytes) {
    memset(s, 0, sizeof *s);
    lyco_dtype A = row->adapter, B = row->base;
    int64_t O = sh->O, I = sh->I, T = sh->T, r = sh->r;
    if (dbuf_make(&s->U, A, O, r, seed + 1) || dbuf_make(&s->D, A, r, I, seed + 2)) return -1;
    size_t b = dbytes(&s->U) + dbytes(&s->D);
    switch (dir) {
    case LYCO_DIR_MERGE_FWD:
        if (dbuf_make(&s->W, B, O, I, seed + 3) || dbuf_make(&s->out, out, O, I, 0)) return -1;
        b += dbytes(&s->W) + dbytes(&s->out);
        break;
    case LYCO_DIR_MERGE_BWD:
        if (dbuf_make(&s->G, out, O, I, seed + 4) || dbuf_make(&s->gU, A, O, r, 0) || dbuf_make(&s->gD, A, r, I, 0)) return -1;
        b += dbytes(&s->G) + dbytes(&s->gU) + dbytes(&s->gD);
        break;
    case LYCO_DIR_BYPASS_FWD:
        if (dbuf_make(&s->x, B, T, I, seed + 5) || dbuf_make(&s->y0, B, T, O, seed + 6) || dbuf_make(&s->y, out, T, O, 0)) return -1;
        b += dbytes(&s->x) + dbytes(&s->y0) + dbytes(&s->y);
        break;
    default:
        if (dbuf_make(&s->x, B, T, I, seed + 5) || dbuf_make(&s->y0, B, T, O, 0) || dbuf_make(&s->dy, out, T, O, seed + 7) ||
            dbuf_make(&s->dx, B, T, I, 0) || dbuf_make(&s->dy0, B, T, O, 0) || dbuf_make(&s->gU, A, O, r, 0) ||
            dbuf_make(&s->gD, A, r, I, 0))
            return -1;
        b += dbytes(&s->x) + dbytes(&s->dy) + dbytes(&s->dx) + dbytes(&s->dy0) + dbytes(&s->gU) + dbytes(&s->gD);
        break;
    }
    *min_bytes = b;
    return 0;
}

static lyco_status run_set(lyco_ctx *ctx, lyco_direction dir, bench_set *s, lyco_adapter *a) {
    a->tensor[LYCO_LORA_UP] = &s->U.t;
    a->tensor[LYCO_LORA_DOWN] = &s->D.t;
    lyco_grads g;
    memset(&g, 0, sizeof g);
    g.grad[LYCO_LORA_UP] = s->gU.p ? &s->gU.t : NULL;
    g.grad[LYCO_LORA_DOWN] = s->gD.p ? &s->gD.t : NULL;
    switch (dir) {
    case LYCO_DIR_MERGE_FWD: {
        lyco_merge_args m = {&s->W.t, NULL, LYCO_MERGE_WEIGHT};
        return lyco_merge_fwd(ctx, &s->out.t, NULL, a, &m);
    }
    case LYCO_DIR_MERGE_BWD: {
        lyco_merge_args m = {NULL, NULL, LYCO_MERGE_DELTA};
        return lyco_merge_bwd(ctx, &g, a, &m, &s->G.t, NULL);
    }
    case LYCO_DIR_BYPASS_FWD: {
        lyco_bypass_args b = {&s->x.t, &s->y0.t, NULL, 0};
        return lyco_bypass_fwd(ctx, &s->y.t, a, &b);
    }
    default: {
        lyco_bypass_args b = {&s->x.t, &s->y0.t, NULL, 0};
        return lyco_bypass_bwd(ctx, &g, &s->dx.t, &s->dy0.t, a, &b, &s->dy.t);
    }
    }
}

/* FNV-1a over the bytes of every output of the set (host copies). */
static int hash_outputs(bench_set *s, uint64_t *h) {
    dbuf *outs[] = {&s->out, &s->y, &s->dx, &s->dy0, &s->gU, &s->gD};
    *h = 1469598103934665603ull;
    BCK(cudaDeviceSynchronize());
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
        size_t n = dbytes(outs[i]);
        if (!n) continue;
        unsigned char *buf = malloc(n);
        if (!buf) return -1;
        if (cudaMemcpy(buf, outs[i]->p, n, cudaMemcpyDeviceToHost) != cudaSuccess) {
            free(buf);
            return -1;
        }
        for (size_t k = 0; k < n; k++) *h = (*h ^ buf[k]) * 1099511628211ull;
        free(buf);
    }
    return 0;
}

static double row_flops(const bench_shape *sh, lyco_direction dir) {
    double O = (double)sh->O, I = (double)sh->I, T = (double)sh->T, r = (double)sh->r;
    switch (dir) {
    case LYCO_DIR_MERGE_FWD: return 2.0 * O * I * r;
    case LYCO_DIR_MERGE_BWD: return 4.0 * O * I * r;
    case LYCO_DIR_BYPASS_FWD: return 2.0 * T * r * (I + O);
    default: return 2.0 * T * r * (2.0 * I + 2.0 * O);
    }
}

static int bench_row(const bench_shape *sh, lyco_direction dir, const lyco_dtype_row *row, const lyco_check_opts *co,
                     const bench_opts *bo, double bw, double rate, bench_result *res) {
    memset(res, 0, sizeof *res);
    snprintf(res->dir, sizeof res->dir, "%s", lyco_direction_name(dir));
    snprintf(res->shape, sizeof res->shape, "%s r%lld", sh->shape, (long long)sh->r);
    snprintf(res->dtypes, sizeof res->dtypes, "%s", row->name);

    /* accuracy at the proxy shape, through the check machinery (oracle + eager twin) */
    lyco_case pc;
    memset(&pc, 0, sizeof pc);
    pc.name = "bench_proxy";
    pc.algo = LYCO_ALGO_LOCON;
    pc.kind = LYCO_LAYER_LINEAR;
    pc.O = sh->O < 256 ? sh->O : 256;
    pc.I = sh->I;
    pc.rank = sh->r;
    pc.tokens = sh->merge ? 16 : (sh->T < 64 ? sh->T : 64);
    pc.alpha = 16;
    lyco_check_opts o = *co;
    o.backend = LYCO_BACKEND_CUDA;
    o.mode = LYCO_OUTPUT_PROMOTE;
    lyco_check_result cr;
    if (lyco_check_one(&pc, dir, row, &o, &cr) == LYCO_OK) {
        res->ulp_fused = cr.backend.max_ulp;
        res->ulp_eager = cr.eager_ok ? cr.eager.max_ulp : NAN;
        res->pass = cr.pass;
    } else {
        res->ulp_fused = res->ulp_eager = NAN;
    }

    /* timing at the full shape */
    lyco_ctx *ctx = NULL;
    if (lyco_ctx_create(&ctx) || lyco_ctx_set_backend(ctx, LYCO_BACKEND_CUDA)) return -1;
    lyco_adapter a;
    lyco_adapter_init(&a, LYCO_ALGO_LOCON);
    lyco_layer_linear(&a.layer, sh->O, sh->I);
    a.alpha = 16;
    bench_set sets[NSETS];
    memset(sets, 0, sizeof sets);
    size_t min_bytes = 0;
    int rc = 0;
    /* output dtype from the policy, through the public API */
    {
        bench_set probe;
        if (set_make(&probe, sh, LYCO_DIR_MERGE_FWD, row, LYCO_F32, 0, &min_bytes) == 0) {
            lyco_dtypes dt;
            a.tensor[LYCO_LORA_UP] = &probe.U.t;
            a.tensor[LYCO_LORA_DOWN] = &probe.D.t;
            DLTensor base = probe.W.t;
            DLTensor xt = base;
            if (lyco_resolve_dtypes(ctx, &a, sh->merge ? &base : NULL, sh->merge ? NULL : &xt, sh->merge ? NULL : &xt, &dt)) rc = -1;
            set_free(&probe);
            for (int k = 0; k < NSETS && !rc; k++)
                if (set_make(&sets[k], sh, dir, row, dt.output, co->seed * 977 + (uint64_t)k * 31 + 1, &min_bytes)) rc = -1;
        } else {
            rc = -1;
        }
    }
    void *flush = NULL;
    size_t flush_bytes = (size_t)128 << 20;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double *t = calloc((size_t)bo->reps, sizeof(double));
    if (!rc && (cudaMalloc(&flush, flush_bytes) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
                cudaEventCreate(&e1) != cudaSuccess || !t))
        rc = -1;
    for (int i = 0; !rc && i < 3 + bo->reps; i++) {
        bench_set *s = &sets[i % NSETS];
        cudaMemsetAsync(flush, i & 0xff, flush_bytes, cudaStreamPerThread);
        cudaEventRecord(e0, cudaStreamPerThread);
        lyco_status st = run_set(ctx, dir, s, &a);
        cudaEventRecord(e1, cudaStreamPerThread);
        if (st) {
            snprintf(res->path, sizeof res->path, "%s", lyco_status_name(st));
            fprintf(stderr, "lyco bench: %s %s %s: %s\n", res->dir, res->shape, res->dtypes, lyco_last_error());
            rc = 1;
            break;
        }
        double ms;
        if (time_events(e0, e1, &ms)) rc = -1;
        else if (i >= 3) t[i - 3] = ms;
    }
    if (!rc) {
        /* determinism: the same inputs twice, outputs compared bit for bit */
        uint64_t h1 = 0, h2 = 1;
        if (run_set(ctx, dir, &sets[0], &a) || hash_outputs(&sets[0], &h1) || run_set(ctx, dir, &sets[0], &a) ||
            hash_outputs(&sets[0], &h2))
            rc = -1;
        res->det = h1 == h2;
    }
    if (!rc) {
        lyco_path p;
        lyco_ctx_last_path(ctx, &p);
        snprintf(res->path, sizeof res->path, "%s", lyco_path_name(p.kind));
        res->med_us = 1e3 * median_of(t, bo->reps);
        res->min_us = 1e9;
        for (int i = 0; i < bo->reps; i++) res->min_us = fmin(res->min_us, 1e3 * t[i]);
        double fb = (double)min_bytes / bw, ff = rate > 0 ? row_flops(sh, dir) / rate : 0;
        res->floor_us = 1e6 * (fb > ff ? fb : ff);
        res->gbs = (double)min_bytes / (res->med_us * 1e-6) / 1e9;
    }
    free(t);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (flush) cudaFree(flush);
    for (int k = 0; k < NSETS; k++) set_free(&sets[k]);
    lyco_ctx_destroy(ctx);
    return rc < 0 ? -1 : 0;
}

static int bench_cuda(const lyco_check_opts *co, const bench_opts *bo) {
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
    double bw = 0, rate = 0;
    char why[160] = "";
    if (copy_bandwidth(&bw) || gemm_rate(&rate, why, sizeof why)) return 2;
    printf("ceilings: copy %.0f GB/s (read + write), bf16 GEMM %.0f TFLOP/s%s%s\n", bw / 1e9, rate / 1e12, why[0] ? "; " : "", why);
    printf("timing: CUDA events, 3 warm-up + %d repeats (median, min), %d rotating input sets, 128 MiB L2 flush before each;"
           " ulp: max RMS-normalised ULP vs the fp64 oracle at O' = min(O, 256), T' = min(T, 64)\n",
           bo->reps, NSETS);

    static const bench_shape shapes[] = {
        {true, "4096x4096", 4096, 4096, 0, 0},
        {true, "11008x4096", 11008, 4096, 0, 0},
        {false, "8192tok 4096x4096", 4096, 4096, 8192, 0},
        {false, "16384tok 3072x3072", 3072, 3072, 16384, 0},
    };
    static const int64_t ranks[] = {8, 32, 128};
    static const char *rows[] = {"bf16", "bf16+fp32adapter", "fp32+bf16adapter"};
    FILE *csv = bo->csv ? fopen(bo->csv, "w") : NULL, *json = bo->json ? fopen(bo->json, "w") : NULL;
    if ((bo->csv && !csv) || (bo->json && !json)) {
        fprintf(stderr, "lyco bench: cannot open the --csv/--json file\n");
        return 2;
    }
    if (csv) fprintf(csv, "algo,dir,shape,dtypes,ulp_fused,ulp_eager,time_med_us,time_min_us,floor_us,time_over_floor,gb_s,deterministic,path,pass\n");
    if (json) fprintf(json, "{\"device\": \"%s\", \"copy_gb_s\": %.1f, \"gemm_tflop_s\": %.1f, \"rows\": [\n", prop.name, bw / 1e9, rate / 1e12);
    printf("%-5s %-10s %-24s %-17s | %9s %9s | %9s %9s | %9s %6s | %7s | %-3s | %s\n", "algo", "dir", "shape", "dtypes", "ulp_fused",
           "ulp_eager", "med_us", "min_us", "floor_us", "t/fl", "GB/s", "det", "path");
    double lsum[4] = {0}, lsum_m[4] = {0};
    int lcnt[4] = {0}, lcnt_m[4] = {0}, fails = 0, nrow = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ri = 0; ri < 3; ri++)
            for (int di = 0; di < 3; di++) {
                if (bo->quick && (ranks[ri] != 32 || di != 0)) continue;
                bench_shape sh = shapes[si];
                sh.r = ranks[ri];
                const lyco_dtype_row *row = NULL;
                for (int k = 0; k < lyco_dtype_row_count; k++)
                    if (!strcmp(lyco_dtype_rows[k].name, rows[di])) row = &lyco_dtype_rows[k];
                if (!row) continue;
                for (int pass = 0; pass < 2; pass++) {
                    lyco_direction dir = sh.merge ? (pass ? LYCO_DIR_MERGE_BWD : LYCO_DIR_MERGE_FWD)
                                                  : (pass ? LYCO_DIR_BYPASS_BWD : LYCO_DIR_BYPASS_FWD);
                    bench_result r;
                    if (bench_row(&sh, dir, row, co, bo, bw, rate, &r) < 0) return 2;
                    double ratio = r.floor_us > 0 ? r.med_us / r.floor_us : NAN;
                    if (strcmp(r.path, "fused") != 0 || !r.pass || !r.det) fails++;
                    printf("%-5s %-10s %-24s %-17s | %9.3f %9.3f | %9.1f %9.1f | %9.1f %6.2f | %7.0f | %-3s | %s%s\n", "lora", r.dir,
                           r.shape, r.dtypes, r.ulp_fused, r.ulp_eager, r.med_us, r.min_us, r.floor_us, ratio, r.gbs, r.det ? "yes" : "NO",
                           r.path, r.pass ? "" : " (ulp over budget)");
                    fflush(stdout);
                    if (ratio > 0 && !strcmp(r.path, "fused")) {
                        lsum[dir] += log(ratio);
                        lcnt[dir]++;
                        if (!strcmp(rows[di], "bf16")) {
                            lsum_m[dir] += log(ratio);
                            lcnt_m[dir]++;
                        }
                    }
                    if (csv)
                        fprintf(csv, "lora,%s,%s,%s,%.4f,%.4f,%.2f,%.2f,%.2f,%.3f,%.1f,%d,%s,%d\n", r.dir, r.shape, r.dtypes, r.ulp_fused,
                                r.ulp_eager, r.med_us, r.min_us, r.floor_us, ratio, r.gbs, r.det, r.path, r.pass);
                    if (json)
                        fprintf(json,
                                "%s  {\"algo\": \"lora\", \"dir\": \"%s\", \"shape\": \"%s\", \"dtypes\": \"%s\", \"ulp_fused\": %.4f, "
                                "\"ulp_eager\": %.4f, \"time_med_us\": %.2f, \"time_min_us\": %.2f, \"floor_us\": %.2f, "
                                "\"time_over_floor\": %.3f, \"gb_s\": %.1f, \"deterministic\": %s, \"path\": \"%s\", \"pass\": %s}",
                                nrow ? ",\n" : "", r.dir, r.shape, r.dtypes, isnan(r.ulp_fused) ? -1.0 : r.ulp_fused,
                                isnan(r.ulp_eager) ? -1.0 : r.ulp_eager, r.med_us, r.min_us, r.floor_us, isnan(ratio) ? -1.0 : ratio, r.gbs,
                                r.det ? "true" : "false", r.path, r.pass ? "true" : "false");
                    nrow++;
                }
            }
    printf("geomean time/floor (all dtype rows | bf16 rows):\n");
    for (int d = 0; d < LYCO_DIR_COUNT; d++)
        if (lcnt[d])
            printf("  lora %-10s %6.2fx over %2d rows | %6.2fx over %2d rows\n", lyco_direction_name((lyco_direction)d), exp(lsum[d] / lcnt[d]),
                   lcnt[d], lcnt_m[d] ? exp(lsum_m[d] / lcnt_m[d]) : NAN, lcnt_m[d]);
    printf("%d rows, %d not fused, over the accuracy budget or not bitwise repeatable\n", nrow, fails);
    if (csv) fclose(csv);
    if (json) {
        fprintf(json, "\n]}\n");
        fclose(json);
    }
    return fails ? 1 : 0;
}
#endif

int lyco_cmd_bench(int argc, char **argv) {
    /* bench-only options are taken out before the shared check options are parsed */
    char **rest = malloc(sizeof(char *) * (size_t)(argc + 1));
    if (!rest) return 2;
    int n = 0;
    const char *csv = NULL, *json = NULL;
    int reps = 30;
    bool quick = false;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && (!strcmp(argv[i], "--csv") || !strcmp(argv[i], "--json") || !strcmp(argv[i], "--reps")) && i + 1 < argc) {
            if (!strcmp(argv[i], "--csv")) csv = argv[i + 1];
            else if (!strcmp(argv[i], "--json")) json = argv[i + 1];
            else reps = atoi(argv[i + 1]);
            i++;
        } else if (i > 0 && !strcmp(argv[i], "--quick")) {
            quick = true;
        } else {
            rest[n++] = argv[i];
        }
    }
    rest[n] = NULL;
    lyco_check_opts o;
    int rc = lyco_parse_check_opts(n, rest, &o);
    free(rest);
    if (rc >= 0) return rc;
    if (reps < 20) reps = 20;
#ifdef LYCO_HAVE_CUDA
    if (o.backend == LYCO_BACKEND_CUDA) {
        bench_opts bo = {csv, json, reps, quick};
        return bench_cuda(&o, &bo);
    }
#endif
    (void)csv;
    (void)json;
    (void)quick;
    printf("lyco bench: backend %s, seed %llu\n", lyco_backend_name(o.backend), (unsigned long long)o.seed);
    int ran = 0;
    int fails = lyco_check_run(&o, stdout, &ran);
    printf("%d passed, %d failed\n", ran - fails, fails);
    return fails ? 1 : 0;
}
