/*
 * bench_cpu.c — `lyco bench` on the host (backend cpu by default; eager/ref time those instead):
 * accuracy, time, floor and the PyTorch-CPU peer side by side in one table (BENCH.md §1–§5, §7).
 *
 * A run, in order:
 *   1. ceilings, first, in the same process: a STREAM-style fp32 triad a[i] = b[i] + s·c[i] over
 *      all threads (three arrays of max(4·LLC, 64 MiB) each, best of 10; bytes = 3·n·4, i.e. b and
 *      c read and a written; the write-allocate read of a is NOT counted, STREAM's convention, so
 *      the figure is what a kernel that reads 2 and writes 1 stream sees), and the fp32 GEMM rate
 *      of the library's own micro-kernel (cpu_gemm_nn, 1024³, 32-row panels over all threads, best
 *      of 5); when the torch peer runs, torch.mm's fp32 rate at the same thread count as well: the
 *      floor uses the better ("the best sgemm available");
 *   2. rows = (family, direction, shape, dtype row): ULP of the backend under test and of the
 *      eager twin against the fp64 oracle through lyco_check_one at a proxy shape the oracle can
 *      afford (O' ≤ 256 keeping the family's block geometry, T' ≤ 64, same I and rank), then the
 *      time of one call at the full shape: a warm-up call, then 2 rounds of [lyco block, torch
 *      block] (BENCH.md §3: the arms interleave), each block a warm-up call and k timed calls,
 *      each timed call preceded by a read-only sweep over 2·LLC that evicts the operands (so the
 *      DRAM floor is the relevant one); median and minimum over the 2k calls;
 *   3. floor = max(min_bytes / triad, flops / sgemm): min_bytes = every tensor the direction reads,
 *      once, plus every output, once, each in its own dtype; flops = 2 × the useful multiply-adds
 *      (row_flops: recomputation a kernel chooses to do is not counted);
 *   4. a summary per family × direction (geomean of time/floor and of the speed-up over torch,
 *      against the targets of issue 6), then a thread-scaling table: the bf16 rows again at 1, 2,
 *      …, all threads, both arms (torch.set_num_threads / omp_set_num_threads: src/cpu takes
 *      omp_get_max_threads()).
 * Shapes: linear layers (and LayerNorm for Norm) of BENCH.md §4; the default set is one merge and
 * one bypass shape so that the whole run takes under two minutes on 2 cores; --full runs the §4
 * linear sweep with every dtype row, skipping rows whose operands would not fit in memory.
 * The peer: tools/bench_torch_cpu.py (upstream LyCORIS's functional formulas in torch eager),
 * spawned once and driven over two pipes (one JSON request line, one JSON reply line); the
 * interpreter is $LYCO_TORCH_PYTHON, else python3.
 * Extra memory: the operands of one row at a time, the triad arrays (freed before the rows), a
 * 2·LLC flush buffer; the peer holds its own copy of one row's operands in its process.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli.h"
#include "cpu/cpu.h"

/* ------------------------------------------------------------------ small helpers */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v in place; returns the median. */
static double median_sorted(double *v, int n) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof(double), cmp_dbl);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

static int max_threads(void) {
#ifdef _OPENMP
    return omp_get_num_procs();
#else
    return 1;
#endif
}

/* Last-level cache in bytes (sysfs; 32 MiB when unknown). */
static size_t llc_bytes(void) {
    size_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], buf[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            double v = strtod(buf, &end);
            size_t b = (size_t)(v * (*end == 'M' ? 1048576.0 : *end == 'K' ? 1024.0 : 1.0));
            if (b > best) best = b;
        }
        fclose(f);
    }
    return best ? best : (size_t)32 << 20;
}

static double phys_mem_bytes(void) { return (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE); }

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            char *v = strchr(line, ':') + 2;
            v[strcspn(v, "\n")] = 0;
            snprintf(buf, n, "%s", v);
            break;
        }
    fclose(f);
}

/* First line of a shell command's output ("" when it fails). */
static void command_line(const char *cmd, char *buf, size_t n) {
    buf[0] = 0;
    FILE *p = popen(cmd, "r");
    if (!p) return;
    if (fgets(buf, (int)n, p)) buf[strcspn(buf, "\n")] = 0;
    pclose(p);
}

/* ------------------------------------------------------------------ big operands */

/* A compact host tensor of the bench (the case builders fill element by element, too slow for
   16M-element operands; these fill with uniform(−1, 1) \ {0} in a tight loop). */
typedef struct {
    DLTensor t;
    int64_t shape[4];
    void *p;
} btensor;

static size_t bt_bytes(const btensor *b) { return b->p ? (size_t)lyco_numel(&b->t) * lyco_dtype_size(lyco_dtype_of(&b->t)) : 0; }

static void bt_free(btensor *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static bool bt_make(btensor *b, lyco_dtype d, int ndim, const int64_t *shape, lyco_rng *rng) {
    memset(b, 0, sizeof *b);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (b->shape[i] = shape[i]);
    size_t es = lyco_dtype_size(d), bytes = (size_t)n * es;
    b->p = malloc(bytes ? bytes : 16);
    if (!b->p) return false;
    b->t.data = b->p;
    b->t.device.device_type = kDLCPU;
    b->t.ndim = ndim;
    b->t.dtype = lyco_dl_dtype(d);
    b->t.shape = b->shape;
    for (int64_t i = 0; i < n; i++) {
        float v = (float)((int64_t)(lyco_rng_next(rng) >> 40) - (1 << 23) + 0.5) * 0x1p-23f;
        if (d == LYCO_F32) {
            ((float *)b->p)[i] = v;
        } else {
            uint16_t h = d == LYCO_BF16 ? lyco_f32_to_bf16(v) : lyco_f32_to_f16(v);
            memcpy((char *)b->p + 2 * i, &h, 2);
        }
    }
    return true;
}

/* ------------------------------------------------------------------ families and shapes */

typedef struct {
    const char *name;   /* label of the family in the table */
    lyco_algo algo;
    uint32_t opts;      /* CASE_* of the case */
    bool merge_only;    /* only the merge directions */
} family;

static const family families[] = {
    {"locon", LYCO_ALGO_LOCON, 0, false},  {"loha", LYCO_ALGO_LOHA, 0, false},     {"lokr", LYCO_ALGO_LOKR, 0, false},
    {"diag_oft", LYCO_ALGO_DIAG_OFT, 0, false}, {"boft", LYCO_ALGO_BOFT, 0, false}, {"ia3", LYCO_ALGO_IA3, 0, false},
    {"glora", LYCO_ALGO_GLORA, 0, false},  {"dylora", LYCO_ALGO_DYLORA, 0, false}, {"full", LYCO_ALGO_FULL, 0, false},
    {"norm", LYCO_ALGO_NORM, 0, false},    {"dora", LYCO_ALGO_LOCON, CASE_DORA_OUT, false},
};
#define NFAM ((int)(sizeof families / sizeof families[0]))

typedef struct {
    bool merge;
    int64_t O, I, T, r;   /* r: rank; OFT/BOFT/LoKr take their block/factor from it (see case_for) */
    bool short_set;       /* part of the default set */
} bshape;

/* ALGORITHMS.md §1.9: (m, n/m), m ≤ n/m. */
static void factorization(int64_t n, int64_t f, int64_t *lo, int64_t *hi) {
    if (f > 0 && n % f == 0) {
        *lo = f < n / f ? f : n / f;
        *hi = n / *lo;
        return;
    }
    if (f < 0) f = n;
    int64_t m = 1, q = n;
    while (m < q) {
        int64_t m2 = m + 1;
        while (n % m2) m2++;
        if (m2 > f) break;
        m = m2;
        q = n / m2;
    }
    *lo = m < q ? m : q;
    *hi = n / *lo;
}

/* ALGORITHMS.md §1.9: the largest even b ≤ f with n/b a power of two (0 when none). */
static int64_t power2_block(int64_t n, int64_t f) {
    int64_t best = 0;
    for (int64_t b = 2; b <= f && b <= n; b += 2)
        if (n % b == 0 && ((n / b) & (n / b - 1)) == 0) best = b;
    return best;
}

static int64_t pow2_floor(int64_t v) {
    int64_t p = 1;
    while (p * 2 <= v) p *= 2;
    return p;
}

/* The case of family f at shape s (full size) and at its proxy (oracle-affordable) size. */
static bool case_for(const family *f, const bshape *s, bool proxy, lyco_case *c) {
    memset(c, 0, sizeof *c);
    c->name = f->name;
    c->algo = f->algo;
    c->kind = f->algo == LYCO_ALGO_NORM ? LYCO_LAYER_NORM : LYCO_LAYER_LINEAR;
    c->O = s->O;
    c->I = f->algo == LYCO_ALGO_NORM ? s->O : s->I;
    c->tokens = s->merge ? 16 : s->T;
    c->rank = s->r;
    c->opts = f->opts;
    c->alpha = 16;
    int64_t cap = 256;
    switch (f->algo) {
    case LYCO_ALGO_LOKR: { /* factor 16: W1 a×c full, W2 = w2_a·w2_b unless r ≥ max(b, d)/2 */
        int64_t a, b, cc, d;
        factorization(s->O, 16, &a, &b);
        factorization(c->I, 16, &cc, &d);
        c->extra[0] = a;
        c->extra[1] = cc;
        if (2 * s->r < (b > d ? b : d)) c->opts |= CASE_W2_LOWRANK;
        if (proxy) c->O = a * (b < cap / a ? b : (cap / a > 0 ? cap / a : 1));
        break;
    }
    case LYCO_ALGO_DIAG_OFT: { /* block 16 (factorization(O, 16)) */
        int64_t bs, nb;
        factorization(s->O, 16, &bs, &nb);
        c->rank = bs;
        if (proxy) c->O = bs * (nb < cap / bs ? nb : (cap / bs > 0 ? cap / bs : 1));
        break;
    }
    case LYCO_ALGO_BOFT: { /* power2factorization(O, 16), the full butterfly */
        int64_t b = power2_block(s->O, 16);
        if (!b) return false;
        c->rank = b;
        if (proxy) c->O = b * pow2_floor(s->O / b < cap / b ? s->O / b : (cap / b > 0 ? cap / b : 1));
        break;
    }
    case LYCO_ALGO_DYLORA:
        c->extra[0] = 4;                /* block size 4, every block active */
        c->extra[1] = s->r / 4;
        break;
    case LYCO_ALGO_NORM:
        break;
    default:
        if (proxy && c->O > cap) c->O = cap;
        break;
    }
    if (proxy) {
        if (f->algo == LYCO_ALGO_NORM) c->I = c->O;
        if (c->tokens > 64) c->tokens = 64;
    }
    return true;
}

static const char *dir_short(lyco_direction d) {
    static const char *n[] = {"merge_fwd", "merge_bwd", "bypass_fwd", "bypass_bwd"};
    return n[d];
}

/* ------------------------------------------------------------------ per-family traits */

/* Does the direction read the base weight W (beyond merge forward, which always writes W'')? */
static bool reads_W(const lyco_case *c, lyco_direction d) {
    if (d == LYCO_DIR_MERGE_FWD) return true;
    if (d == LYCO_DIR_MERGE_BWD)
        return (c->opts & CASE_DORA_OUT) || c->algo == LYCO_ALGO_DIAG_OFT || c->algo == LYCO_ALGO_BOFT ||
               c->algo == LYCO_ALGO_IA3 || c->algo == LYCO_ALGO_GLORA;
    return c->algo == LYCO_ALGO_GLORA || (c->opts & CASE_DORA_OUT); /* DoRA in bypass: x·Wᵀ and W's norms */
}

/* OFT, BOFT and IA3 (output mode) act on y0: it is an input of both bypass directions, the
   backward returns dy0 and no dx, and x is not read. */
static bool acts_on_y0(const lyco_case *c) {
    return c->algo == LYCO_ALGO_DIAG_OFT || c->algo == LYCO_ALGO_BOFT || c->algo == LYCO_ALGO_IA3;
}

/* 2 × the useful multiply-adds of a direction (what any implementation must compute; a kernel's
   own recomputation is not counted). */
static double row_flops(const lyco_case *c, lyco_direction d) {
    double O = (double)c->O, I = (double)c->I, T = (double)c->tokens, r = (double)c->rank;
    bool merge = d == LYCO_DIR_MERGE_FWD || d == LYCO_DIR_MERGE_BWD, bwd = d == LYCO_DIR_MERGE_BWD || d == LYCO_DIR_BYPASS_BWD;
    double mac = 0;
    switch (c->algo) {
    case LYCO_ALGO_LOCON:
    case LYCO_ALGO_DYLORA:
        mac = merge ? O * I * r : T * r * (I + O);
        if (c->opts & CASE_DORA_OUT) mac += merge ? O * I : T * O * I + O * I * r; /* row norms; bypass: x·Wᵀ, W·Dᵀ */
        mac *= bwd ? 2 : 1;
        break;
    case LYCO_ALGO_LOHA: /* two rank-r products (forward), six in the backward; bypass adds op(x, ΔW) */
        mac = (bwd ? 6 : 2) * O * I * r + (merge ? 0 : (bwd ? 2 : 1) * T * O * I);
        break;
    case LYCO_ALGO_LOKR: {
        double a = (double)c->extra[0], cc = (double)c->extra[1], b = O / a, dd = I / cc;
        bool lr = c->opts & CASE_W2_LOWRANK;
        double w2 = lr ? b * dd * r : 0; /* w2_a·w2_b */
        if (merge) {
            mac = bwd ? 2 * O * I + 3 * w2 : O * I + w2;
        } else {
            double h = lr ? fmin(T * I * b, T * (I * r + cc * r * b)) : T * I * b;
            mac = (h + T * O * cc) * (bwd ? 2 : 1);
        }
        break;
    }
    case LYCO_ALGO_DIAG_OFT:
        mac = (merge ? O * I : T * O) * r * (bwd ? 2 : 1);
        break;
    case LYCO_ALGO_BOFT: {
        double nb = O / r, M = 1;
        while (pow(2.0, M - 1) < nb) M++;
        mac = (merge ? O * I : T * O) * r * M * (bwd ? 3 : 1); /* the backward needs each stage's input once */
        break;
    }
    case LYCO_ALGO_IA3:
        mac = (merge ? O * I : T * O) * (bwd && !merge ? 2 : 1);
        break;
    case LYCO_ALGO_GLORA:
        mac = merge ? (bwd ? 6 : 3) * O * I * r : T * (O * I + (bwd ? 6 : 3) * I * r + (bwd ? 2 : 1) * O * r);
        break;
    case LYCO_ALGO_FULL:
        mac = merge ? O * I : (bwd ? 2 : 1) * T * O * I;
        break;
    case LYCO_ALGO_NORM:
        mac = merge ? O : (bwd ? 8 : 4) * T * O;
        break;
    default:
        break;
    }
    return 2 * mac;
}

/* ------------------------------------------------------------------ operands of one row */

typedef struct {
    case_adapter ca;
    btensor W, x, y0, dy, out, dx, dy0, grad[LYCO_SLOT_COUNT];
    lyco_grads g;
    lyco_merge_args m;
    lyco_bypass_args b;
    lyco_dtypes dt;
    double min_bytes;
} operands;

static void ops_free(operands *o) {
    case_adapter_free(&o->ca);
    btensor *ts[] = {&o->W, &o->x, &o->y0, &o->dy, &o->out, &o->dx, &o->dy0};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) bt_free(ts[i]);
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) bt_free(&o->grad[s]);
}

static bool is_mask_slot(int s) { return s == LYCO_RANK_MASK || s == LYCO_RANK_MASK_B || s == LYCO_MODULE_MASK; }

/* Builds every tensor the direction takes at the full shape, and counts min_bytes. */
static lyco_status ops_build(const lyco_case *c, lyco_direction d, const lyco_dtype_row *row, lyco_ctx *ctx, uint64_t seed,
                             operands *o) {
    memset(o, 0, sizeof *o);
    lyco_rng rng;
    lyco_rng_seed(&rng, seed);
    bool bypass = d == LYCO_DIR_BYPASS_FWD || d == LYCO_DIR_BYPASS_BWD, norm = c->algo == LYCO_ALGO_NORM;
    if (!case_build_adapter(c, row->adapter, bypass, &rng, &o->ca)) return lyco_fail(LYCO_ERR_NOMEM, "bench: cannot build the adapter of %s", c->name);
    for (int s = 0; s < LYCO_SLOT_COUNT; s++)
        if (o->ca.has[s] && !is_mask_slot(s)) o->min_bytes += (double)lyco_numel(&o->ca.slot[s].t) * (double)lyco_dtype_size(row->adapter);
    int64_t wsh[2] = {c->O, c->I}, xsh[2] = {c->tokens, c->I}, ysh[2] = {c->tokens, c->O};
    int wnd = norm ? 1 : 2;
    bool W = reads_W(c, d) || (!bypass && !norm), y0 = bypass && (d == LYCO_DIR_BYPASS_FWD || acts_on_y0(c));
    if (W && !bt_make(&o->W, row->base, wnd, wsh, &rng)) return LYCO_ERR_NOMEM;
    if (reads_W(c, d)) o->min_bytes += (double)bt_bytes(&o->W);
    if (bypass) {
        if (!bt_make(&o->x, row->base, 2, xsh, &rng) || (y0 && !bt_make(&o->y0, row->base, 2, ysh, &rng))) return LYCO_ERR_NOMEM;
        if (!acts_on_y0(c)) o->min_bytes += (double)bt_bytes(&o->x);
        o->min_bytes += (double)bt_bytes(&o->y0);
        o->b = (lyco_bypass_args){&o->x.t, y0 ? &o->y0.t : NULL, W ? &o->W.t : NULL, 0};
    } else {
        o->m = (lyco_merge_args){W ? &o->W.t : NULL, NULL, d == LYCO_DIR_MERGE_FWD ? LYCO_MERGE_WEIGHT : LYCO_MERGE_DELTA};
    }
    lyco_status st = lyco_resolve_dtypes(ctx, &o->ca.a, W ? &o->W.t : NULL, bypass ? &o->x.t : NULL, y0 ? &o->y0.t : NULL, &o->dt);
    if (st) return st;
    lyco_dtype od = o->dt.output;
    bool ok = true;
    switch (d) {
    case LYCO_DIR_MERGE_FWD: ok = bt_make(&o->out, od, wnd, wsh, &rng); break;
    case LYCO_DIR_MERGE_BWD: ok = bt_make(&o->dy, od, wnd, wsh, &rng); break;
    case LYCO_DIR_BYPASS_FWD: ok = bt_make(&o->out, od, 2, ysh, &rng); break;
    default:
        ok = bt_make(&o->dy, od, 2, ysh, &rng) &&
             (acts_on_y0(c) ? bt_make(&o->dy0, row->base, 2, ysh, &rng) : bt_make(&o->dx, row->base, 2, xsh, &rng));
        break;
    }
    if (!ok) return LYCO_ERR_NOMEM;
    o->min_bytes += (double)(bt_bytes(&o->out) + bt_bytes(&o->dy) + bt_bytes(&o->dx) + bt_bytes(&o->dy0));
    if (d == LYCO_DIR_MERGE_BWD || d == LYCO_DIR_BYPASS_BWD)
        for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
            if (!o->ca.has[s] || is_mask_slot(s)) continue;
            const DLTensor *t = &o->ca.slot[s].t;
            if (!bt_make(&o->grad[s], lyco_dtype_of(t), t->ndim, t->shape, &rng)) return LYCO_ERR_NOMEM;
            o->g.grad[s] = &o->grad[s].t;
            o->min_bytes += (double)bt_bytes(&o->grad[s]);
        }
    return LYCO_OK;
}

static lyco_status ops_run(lyco_ctx *ctx, lyco_direction d, operands *o) {
    switch (d) {
    case LYCO_DIR_MERGE_FWD: return lyco_merge_fwd(ctx, &o->out.t, NULL, &o->ca.a, &o->m);
    case LYCO_DIR_MERGE_BWD: return lyco_merge_bwd(ctx, &o->g, &o->ca.a, &o->m, &o->dy.t, NULL);
    case LYCO_DIR_BYPASS_FWD: return lyco_bypass_fwd(ctx, &o->out.t, &o->ca.a, &o->b);
    default: return lyco_bypass_bwd(ctx, &o->g, o->dx.p ? &o->dx.t : NULL, o->dy0.p ? &o->dy0.t : NULL, &o->ca.a, &o->b, &o->dy.t);
    }
}

/* ------------------------------------------------------------------ cache eviction */

typedef struct {
    float *buf;
    size_t n;
    volatile float sink;
} flusher;

/* Reads 2·LLC bytes (clean lines: no write-back lands in the next timed call). */
static void flush_cache(flusher *f) {
    float s = 0;
    const float *b = f->buf;
    int64_t n = (int64_t)f->n;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (int64_t i = 0; i < n; i += 16) s += b[i];
    f->sink = s;
}

/* ------------------------------------------------------------------ ceilings */

/* STREAM triad, fp32, over all threads; bytes/s (3 arrays × n × 4 per pass). */
static double triad_bandwidth(size_t llc, size_t *array_bytes) {
    size_t n = 4 * llc / sizeof(float);
    if (n < ((size_t)64 << 20) / sizeof(float)) n = ((size_t)64 << 20) / sizeof(float);
    double cap = phys_mem_bytes() / 16.0 / sizeof(float);
    if ((double)n > cap) n = (size_t)cap;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)), *c = malloc(n * sizeof(float));
    double best = 0;
    if (a && b && c) {
        int64_t N = (int64_t)n;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N; i++) {   /* first touch by the thread that streams it */
            a[i] = 0.0f;
            b[i] = 1.0f + (float)(i & 7);
            c[i] = 2.0f - (float)(i & 3);
        }
        const float s = 3.0f;
        for (int rep = 0; rep < 10; rep++) {
            double t0 = now_s();
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < N; i++) a[i] = b[i] + s * c[i];
            double t = now_s() - t0;
            if (t > 0 && 3.0 * (double)n * sizeof(float) / t > best) best = 3.0 * (double)n * sizeof(float) / t;
        }
    }
    free(a);
    free(b);
    free(c);
    *array_bytes = n * sizeof(float);
    return best;
}

/* fp32 GEMM rate (FLOP/s) of the library's micro-kernel, 1024³, 32-row panels over the threads. */
static double sgemm_rate(void) {
    const int64_t N = 1024, P = 32;
    float *A = malloc(sizeof(float) * (size_t)(N * N)), *B = malloc(sizeof(float) * (size_t)(N * N)), *C = malloc(sizeof(float) * (size_t)(N * N));
    double best = 0;
    if (A && B && C) {
        for (int64_t i = 0; i < N * N; i++) {
            A[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
            B[i] = (float)((i * 5) % 11) * 0.1f - 0.5f;
        }
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now_s();
#pragma omp parallel for schedule(static)
            for (int64_t p = 0; p < N / P; p++) cpu_gemm_nn(P, N, N, A + p * P * N, N, B, N, C + p * P * N, N, false);
            double t = now_s() - t0;
            if (t > 0 && 2.0 * (double)N * N * N / t > best) best = 2.0 * (double)N * N * N / t;
        }
    }
    free(A);
    free(B);
    free(C);
    return best;
}

/* Median cost (s) of an empty parallel region over all threads, 21 back to back: a few µs on an
   idle machine; a scheduler slice (ms) when another process keeps a core busy, and then every
   all-thread timing of the run carries that cost per parallel region. */
static double fork_join_latency(void) {
    double t[21];
    volatile int sink = 0;
    for (int i = 0; i < 21; i++) {
        double t0 = now_s();
#pragma omp parallel
        {
#pragma omp atomic
            sink += 1;
        }
        t[i] = now_s() - t0;
    }
    (void)sink;
    return median_sorted(t, 21);
}

/* ------------------------------------------------------------------ the torch peer */

typedef struct {
    pid_t pid;
    FILE *to, *from;
    bool ok;
    char why[320];
    char version[48];
    double sgemm;    /* torch.mm fp32 FLOP/s at all threads */
} peer;

static void peer_stop(peer *p) {
    if (p->to) fclose(p->to);
    if (p->from) fclose(p->from);
    if (p->pid > 0) waitpid(p->pid, NULL, 0);
    p->to = p->from = NULL;
    p->pid = 0;
    p->ok = false;
}

/* Sends one request line; reads one reply line as JSON (NULL, with why set and the peer
   stopped, when the peer died or answered garbage). timeout_s bounds the wait. */
static json_t *peer_ask(peer *p, const char *req, double timeout_s) {
    if (!p->ok) return NULL;
    if (fprintf(p->to, "%s\n", req) < 0 || fflush(p->to)) {
        snprintf(p->why, sizeof p->why, "peer: the torch process closed its input");
        peer_stop(p);
        return NULL;
    }
    struct pollfd pf = {fileno(p->from), POLLIN, 0};
    int pr = poll(&pf, 1, (int)(timeout_s * 1000));
    char *line = NULL;
    size_t cap = 0;
    if (pr <= 0 || getline(&line, &cap, p->from) < 0) {
        snprintf(p->why, sizeof p->why, "peer: no reply from the torch process (%s)", pr == 0 ? "timed out" : "it exited");
        free(line);
        if (pr == 0 && p->pid > 0) kill(p->pid, SIGTERM);
        peer_stop(p);
        return NULL;
    }
    json_error_t err;
    json_t *j = json_loads(line, 0, &err);
    free(line);
    if (!j || !json_is_object(j)) {
        snprintf(p->why, sizeof p->why, "peer: unreadable reply (%s)", err.text);
        json_decref(j);
        peer_stop(p);
        return NULL;
    }
    return j;
}

/* tools/bench_torch_cpu.py next to this source tree (or $LYCO_TORCH_SCRIPT). */
static void peer_script(char *buf, size_t n) {
    const char *env = getenv("LYCO_TORCH_SCRIPT");
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        return;
    }
    const char *src = __FILE__, *cli = strstr(src, "cli/bench_cpu.c");
    if (cli && access(src, F_OK) == 0) snprintf(buf, n, "%.*stools/bench_torch_cpu.py", (int)(cli - src), src);
    else snprintf(buf, n, "tools/bench_torch_cpu.py");
}

static const char *peer_python(void) {
    const char *py = getenv("LYCO_TORCH_PYTHON");
    return py && *py ? py : "python3";
}

static bool peer_start(peer *p, int threads, size_t flush_bytes) {
    memset(p, 0, sizeof *p);
    char script[1024];
    peer_script(script, sizeof script);
    const char *py = peer_python();
    int in[2], out[2];
    if (pipe(in) || pipe(out)) {
        snprintf(p->why, sizeof p->why, "peer: pipe failed: %s", strerror(errno));
        return false;
    }
    fflush(stdout);
    p->pid = fork();
    if (p->pid < 0) {
        snprintf(p->why, sizeof p->why, "peer: fork failed: %s", strerror(errno));
        return false;
    }
    if (p->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        execlp(py, py, script, "--serve", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->to = fdopen(in[1], "w");
    p->from = fdopen(out[0], "r");
    if (!p->to || !p->from) {
        snprintf(p->why, sizeof p->why, "peer: fdopen failed");
        peer_stop(p);
        return false;
    }
    p->ok = true;
    char req[128];
    snprintf(req, sizeof req, "{\"op\": \"hello\", \"threads\": %d, \"flush_bytes\": %zu}", threads, flush_bytes);
    json_t *j = peer_ask(p, req, 120);
    if (!j) {
        snprintf(p->why, sizeof p->why,
                 "peer: torch not installed for %s (make bench installs it into .venv-bench; or pip install torch "
                 "--index-url https://download.pytorch.org/whl/cpu and set LYCO_TORCH_PYTHON)", py);
        return false;
    }
    const char *err = json_string_value(json_object_get(j, "error"));
    if (err) {
        snprintf(p->why, sizeof p->why, "peer: %s (python: %s; pip install torch --index-url https://download.pytorch.org/whl/cpu)", err, py);
        json_decref(j);
        peer_stop(p);
        return false;
    }
    snprintf(p->version, sizeof p->version, "%s", json_string_value(json_object_get(j, "torch")) ? json_string_value(json_object_get(j, "torch")) : "?");
    p->sgemm = json_number_value(json_object_get(j, "sgemm_flops"));
    json_decref(j);
    return true;
}

/* Describes the row to the peer; false (with why) when it declines or fails. */
static bool peer_setup(peer *p, int id, const family *f, const lyco_case *c, lyco_direction d, const lyco_dtype_row *row,
                       char *why, size_t wn) {
    char req[512];
    snprintf(req, sizeof req,
             "{\"op\": \"setup\", \"id\": %d, \"family\": \"%s\", \"dir\": \"%s\", \"O\": %lld, \"I\": %lld, \"T\": %lld, "
             "\"r\": %lld, \"a\": %lld, \"c\": %lld, \"w2_lowrank\": %d, \"dyl_bs\": %lld, \"alpha\": %g, \"base\": \"%s\", "
             "\"adapter\": \"%s\"}",
             id, f->name, dir_short(d), (long long)c->O, (long long)c->I, (long long)c->tokens, (long long)c->rank,
             (long long)c->extra[0], (long long)c->extra[1], (c->opts & CASE_W2_LOWRANK) ? 1 : 0, (long long)c->extra[0],
             c->alpha, row->base == LYCO_F32 ? "fp32" : row->base == LYCO_BF16 ? "bf16" : "fp16",
             row->adapter == LYCO_F32 ? "fp32" : row->adapter == LYCO_BF16 ? "bf16" : "fp16");
    json_t *j = peer_ask(p, req, 300);
    if (!j) {
        snprintf(why, wn, "%s", p->why);
        return false;
    }
    const char *err = json_string_value(json_object_get(j, "error"));
    if (err) snprintf(why, wn, "%s", err);
    json_decref(j);
    return !err;
}

/* Up to k timed calls of the row on the peer, as many as fit in budget_s (at least one), each
   after its own cache sweep; appends µs to t; returns how many. A first call longer than
   PEER_CAP_S is the block's only sample and sets *slow (no further block for the row). */
#define PEER_CAP_S 0.25
static int peer_time(peer *p, int id, int threads, int k, double budget_s, double *t, bool *slow) {
    char req[200];
    snprintf(req, sizeof req, "{\"op\": \"time\", \"id\": %d, \"threads\": %d, \"reps\": %d, \"budget_s\": %.3f, \"cap_s\": %.3f}", id,
             threads, k, budget_s, PEER_CAP_S);
    json_t *j = peer_ask(p, req, 600);
    if (!j) return 0;
    json_t *us = json_object_get(j, "us");
    int n = 0;
    for (size_t i = 0; json_is_array(us) && i < json_array_size(us) && n < k; i++) t[n++] = json_number_value(json_array_get(us, i));
    *slow = json_is_true(json_object_get(j, "slow"));
    json_decref(j);
    return n;
}

static void peer_free_row(peer *p, int id) {
    char req[64];
    snprintf(req, sizeof req, "{\"op\": \"free\", \"id\": %d}", id);
    json_decref(peer_ask(p, req, 60));
}

/* ------------------------------------------------------------------ one row */

typedef struct {
    const family *f;
    lyco_direction dir;
    char shape[48], dtypes[20], path[200];
    int threads;
    double ulp_fused, ulp_eager, med_us, min_us, floor_us, gbs, gflops, torch_us, bytes, flops;
    double peak_extra_mib;  /* RSS high-water rise over the row's first call (-1 unknown) */
    bool pass, ran, acc_ran;
    char torch_why[320];
    char acc_detail[300];   /* which output missed its accuracy budget, and by how much */
} row_result;

typedef struct {
    double bw, rate;       /* ceilings used by the floor */
    flusher fl;
    peer *pe;
    int block;             /* timed calls per arm per block (0 = adaptive) */
    double budget_s;       /* adaptive: seconds per lyco block */
} bench_env;

static void shape_label(const lyco_case *c, lyco_direction d, char *buf, size_t n) {
    bool merge = d == LYCO_DIR_MERGE_FWD || d == LYCO_DIR_MERGE_BWD;
    char tail[32] = "";
    switch (c->algo) {
    case LYCO_ALGO_DIAG_OFT: snprintf(tail, sizeof tail, " b%lld", (long long)c->rank); break;
    case LYCO_ALGO_BOFT: snprintf(tail, sizeof tail, " b%lld", (long long)c->rank); break;
    case LYCO_ALGO_IA3:
    case LYCO_ALGO_FULL:
    case LYCO_ALGO_NORM: break;
    case LYCO_ALGO_LOKR: snprintf(tail, sizeof tail, " f16 r%lld", (long long)c->rank); break;
    default: snprintf(tail, sizeof tail, " r%lld", (long long)c->rank); break;
    }
    if (c->algo == LYCO_ALGO_NORM) {
        if (merge) snprintf(buf, n, "C%lld", (long long)c->O);
        else snprintf(buf, n, "%lldtok C%lld", (long long)c->tokens, (long long)c->O);
    } else if (merge) {
        snprintf(buf, n, "%lldx%lld%s", (long long)c->O, (long long)c->I, tail);
    } else {
        snprintf(buf, n, "%lldtok %lldx%lld%s", (long long)c->tokens, (long long)c->O, (long long)c->I, tail);
    }
}

/* A "VmRSS:"-style field of /proc/self/status in KiB (-1 when unreadable). */
static long status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl)) v = strtol(line + kl, NULL, 10);
    if (f) fclose(f);
    return v;
}

/* Resets the RSS high-water mark (VmHWM) to the current RSS; false when the kernel refuses. */
static bool reset_hwm(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* The accuracy half of a row: lyco_check_one at the proxy shape. */
static void row_accuracy(const family *f, const bshape *s, lyco_direction d, const lyco_dtype_row *row, const lyco_check_opts *co,
                         row_result *r) {
    lyco_case pc;
    r->ulp_fused = r->ulp_eager = NAN;
    if (!case_for(f, s, true, &pc)) return;
    lyco_check_opts o = *co;
    o.mode = LYCO_OUTPUT_PROMOTE;
    lyco_check_result cr;
    if (lyco_check_one(&pc, d, row, &o, &cr) != LYCO_OK) return;
    r->acc_ran = true;
    r->ulp_fused = cr.backend.max_ulp;
    r->ulp_eager = cr.eager_ok ? cr.eager.max_ulp : NAN;
    r->pass = cr.pass;
    snprintf(r->acc_detail, sizeof r->acc_detail, "%s", cr.pass ? "" : cr.detail);
}

/* k timed lyco calls, each after a cache sweep (a warm-up call first unless the call is long
   enough that waking the threads is noise); appends µs to t. */
static int lyco_block(lyco_ctx *ctx, lyco_direction d, operands *o, bench_env *env, int k, bool warm, double *t) {
    if (warm && ops_run(ctx, d, o)) return -1;
    for (int i = 0; i < k; i++) {
        flush_cache(&env->fl);
        double t0 = now_s();
        lyco_status st = ops_run(ctx, d, o);
        t[i] = 1e6 * (now_s() - t0);
        if (st) return -1;
    }
    return k;
}

/* The timing half of a row at `threads`: operands at the full shape, then 2 rounds of
   [lyco block, torch block]. */
static int row_time(const family *f, const lyco_case *c, lyco_direction d, const lyco_dtype_row *row, const lyco_check_opts *co,
                    bench_env *env, int threads, int peer_id, bool use_peer, row_result *r) {
    lyco_ctx *ctx = NULL;
    if (lyco_ctx_create(&ctx) || lyco_ctx_set_backend(ctx, co->backend)) {
        lyco_ctx_destroy(ctx);
        return -1;
    }
    set_threads(threads);
    r->threads = threads;
    operands o;
    lyco_status st = ops_build(c, d, row, ctx, co->seed * 1000003u + (uint64_t)peer_id, &o);
    enum { MAXREP = 64 };
    double tl[2 * MAXREP], tt[2 * MAXREP];
    int nl = 0, nt = 0;
    if (!st) {
        /* first call: threads and pages warm; its RSS high-water rise is the call's peak extra
           memory (scratch that the allocator already held from earlier rows shows as 0) */
        bool hwm = reset_hwm();
        long rss0 = status_kib("VmRSS:");
        double t0 = now_s();
        st = ops_run(ctx, d, &o);
        double first = now_s() - t0;
        long hw = status_kib("VmHWM:");
        r->peak_extra_mib = hwm && rss0 >= 0 && hw >= rss0 ? (double)(hw - rss0) / 1024.0 : -1.0;
        int k = env->block;
        if (k <= 0) k = (int)(env->budget_s / (first + 0.004) + 0.5);
        k = k < 2 ? 2 : k > MAXREP ? MAXREP : k;
        bool warm = first < 0.05, slow = false;
        bool peer_row = use_peer && env->pe && env->pe->ok;
        if (peer_row && !peer_setup(env->pe, peer_id, f, c, d, row, r->torch_why, sizeof r->torch_why)) peer_row = false;
        for (int round = 0; round < 2 && !st; round++) {
            int got = lyco_block(ctx, d, &o, env, k, warm, tl + nl);
            if (got < 0) { st = LYCO_ERR_UNSUPPORTED; break; }
            nl += got;
            if (peer_row && !slow) {
                int pt = peer_time(env->pe, peer_id, threads, k, env->block > 0 ? 1e6 : 2 * env->budget_s, tt + nt, &slow);
                if (pt == 0 && !env->pe->ok) { snprintf(r->torch_why, sizeof r->torch_why, "%s", env->pe->why); peer_row = false; }
                nt += pt;
            }
        }
        if (peer_row) peer_free_row(env->pe, peer_id);
    }
    if (st) {
        snprintf(r->path, sizeof r->path, "%s: %s", lyco_status_name(st), lyco_last_error());
    } else {
        lyco_path p;
        lyco_ctx_last_path(ctx, &p);
        snprintf(r->path, sizeof r->path, "%s%s%s", lyco_path_name(p.kind), p.why[0] ? ": " : "", p.why);
        r->ran = true;
        r->med_us = median_sorted(tl, nl);
        r->min_us = tl[0];
        r->torch_us = nt ? median_sorted(tt, nt) : NAN;
        r->bytes = o.min_bytes;
        r->flops = row_flops(c, d);
        double fb = o.min_bytes / env->bw, ff = env->rate > 0 ? r->flops / env->rate : 0;
        r->floor_us = 1e6 * (fb > ff ? fb : ff);
        r->gbs = o.min_bytes / (r->med_us * 1e-6) / 1e9;
        r->gflops = r->flops / (r->med_us * 1e-6) / 1e9;
    }
    ops_free(&o);
    lyco_ctx_destroy(ctx);
    return st ? 1 : 0;
}

/* ------------------------------------------------------------------ shape sets */

static const bshape short_shapes[] = {
    {true, 1280, 1280, 0, 32, true},       /* SDXL attention 1280², rank 32 */
    {false, 640, 640, 1024, 32, true},     /* SDXL attention 640² at 1024 tokens, rank 32 (1280² here
                                              made the run 3 min: torch's bf16 autograd takes ~4.5 s
                                              per bypass_bwd call of LoHa/GLoRA/Full at 1280²) */
};

/* BENCH.md §4, linear: merges of every listed layer at rank 32; bypass at 77 / 1024 / 4096 tokens
   through 640², 1280², 3072², 4096²; plus the odd 1000×999 rank 7. */
static int full_shapes(bshape *out, int cap) {
    static const int64_t lin[][2] = {{640, 640},   {1280, 1280},  {5120, 1280}, {1280, 5120},  {3072, 3072},
                                     {12288, 3072}, {4096, 4096}, {11008, 4096}, {4096, 11008}, {14336, 4096}};
    static const int64_t tok[] = {77, 1024, 4096}, byp[][2] = {{640, 640}, {1280, 1280}, {3072, 3072}, {4096, 4096}};
    int n = 0;
    for (size_t i = 0; i < sizeof lin / sizeof lin[0] && n < cap; i++)
        out[n++] = (bshape){true, lin[i][0], lin[i][1], 0, 32, lin[i][0] == 1280 && lin[i][1] == 1280};
    for (size_t t = 0; t < sizeof tok / sizeof tok[0]; t++)
        for (size_t i = 0; i < sizeof byp / sizeof byp[0] && n < cap; i++)
            out[n++] = (bshape){false, byp[i][0], byp[i][1], tok[t], 32, tok[t] == 1024 && byp[i][0] == 640};
    if (n + 2 <= cap) {
        out[n++] = (bshape){true, 1000, 999, 0, 7, false};
        out[n++] = (bshape){false, 1000, 999, 77, 7, false};
    }
    return n;
}

/* ------------------------------------------------------------------ output */

static bool matches(const char *filter, const char *name) {
    if (!filter || !*filter) return true;
    const char *p = filter;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n && p[n - 1] == '*' ? !strncmp(p, name, n - 1) : (strlen(name) == n && !strncmp(p, name, n))) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static bool is_merge(lyco_direction d) { return d == LYCO_DIR_MERGE_FWD || d == LYCO_DIR_MERGE_BWD; }

static void print_header_row(void) {
    printf("%-8s %-10s %-24s %-16s | %8s %8s | %9s %9s | %9s %6s | %6s %7s | %7s | %9s %6s | %s\n", "algo", "dir", "shape", "dtypes",
           "ulp_fus", "ulp_eag", "med_us", "min_us", "floor_us", "t/fl", "GB/s", "GFLOP/s", "xmem_MiB", "torch_us", "xtorch", "path");
}

static void print_row(const row_result *r) {
    char tor[24] = "        -", spd[16] = "     -";
    if (!isnan(r->torch_us)) {
        snprintf(tor, sizeof tor, "%9.0f", r->torch_us);
        snprintf(spd, sizeof spd, "%6.2f", r->torch_us / r->med_us);
    }
    if (!r->ran) {
        printf("%-8s %-10s %-24s %-16s | %8.4g %8.4g | did not run: %s\n", r->f->name, dir_short(r->dir), r->shape, r->dtypes, r->ulp_fused,
               r->ulp_eager, r->path);
        return;
    }
    const bool over = r->acc_ran && !r->pass;
    printf("%-8s %-10s %-24s %-16s | %8.4g %8.4g | %9.0f %9.0f | %9.0f %6.2f | %6.1f %7.1f | %7.1f | %s %s | %s%s%s%s%s%s%s\n", r->f->name,
           dir_short(r->dir), r->shape, r->dtypes, r->ulp_fused, r->ulp_eager, r->med_us, r->min_us, r->floor_us, r->med_us / r->floor_us, r->gbs,
           r->gflops, r->peak_extra_mib, tor, spd, r->path, over ? " (ulp over budget" : "", over && r->acc_detail[0] ? ": " : "",
           over ? r->acc_detail : "", over ? ")" : "", r->torch_why[0] ? "; torch: " : "", r->torch_why);
}

static double nan_neg(double v) { return isnan(v) ? -1.0 : v; }

static void csv_row(FILE *f, const row_result *r) {
    fprintf(f, "%s,%s,%s,%s,%d,%.4f,%.4f,%.2f,%.2f,%.2f,%.4f,%.0f,%.0f,%.2f,%.2f,%.2f,%.4f,\"%s\",%d,%.2f\n", r->f->name, dir_short(r->dir), r->shape,
            r->dtypes, r->threads, nan_neg(r->ulp_fused), nan_neg(r->ulp_eager), r->med_us, r->min_us, r->floor_us,
            r->floor_us > 0 ? r->med_us / r->floor_us : -1.0, r->bytes, r->flops, r->gbs, r->gflops, nan_neg(r->torch_us),
            isnan(r->torch_us) ? -1.0 : r->torch_us / r->med_us, r->path, r->pass, r->peak_extra_mib);
}

static json_t *json_row(const row_result *r) {
    json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:s,s:b,s:b,s:s}", "algo", r->f->name, "dir",
                     dir_short(r->dir), "shape", r->shape, "dtypes", r->dtypes, "threads", r->threads, "ulp_fused", nan_neg(r->ulp_fused),
                     "ulp_eager", nan_neg(r->ulp_eager), "time_med_us", r->med_us, "time_min_us", r->min_us, "floor_us", r->floor_us,
                     "time_over_floor", r->floor_us > 0 ? r->med_us / r->floor_us : -1.0, "min_bytes", r->bytes, "flops", r->flops, "gb_s",
                     r->gbs, "gflop_s", r->gflops, "torch_med_us", nan_neg(r->torch_us), "speedup_vs_torch",
                     isnan(r->torch_us) ? -1.0 : r->torch_us / r->med_us, "path", r->path, "pass", r->pass, "ran", r->ran, "torch_note",
                     r->torch_why);
    if (j) json_object_set_new(j, "peak_extra_mib", json_real(r->peak_extra_mib));
    return j;
}

/* Per family × direction: geomean time/floor and speed-up over torch against the issue-6
   targets; ULP fused ≤ eager + 1 on every row. Returns the number of (family, dir) misses. */
static int print_summary(const row_result *rs, int n, json_t *jsum) {
    printf("\nsummary (geometric means over the rows above; targets: merge t/fl <= 1.7, bypass t/fl <= 2, "
           "speed-up over torch >= 3 (merge) / >= 1.5 (bypass), ulp_fused <= ulp_eager + 1 on every row)\n");
    printf("(min/fl: the same geomean from each row's fastest call, a load-robust view on a shared machine)\n");
    printf("%-8s %-10s %4s | %7s %-4s | %7s | %7s %-4s | %-8s\n", "algo", "dir", "rows", "t/fl", "ok", "min/fl", "xtorch", "ok", "ulp rule");
    int miss = 0;
    for (int fi = 0; fi < NFAM; fi++)
        for (int d = 0; d < LYCO_DIR_COUNT; d++) {
            double lf = 0, ls = 0, lm = 0;
            int nf = 0, ns = 0, ulp_bad = 0, rows = 0;
            for (int i = 0; i < n; i++) {
                const row_result *r = &rs[i];
                if (r->f != &families[fi] || (int)r->dir != d) continue;
                rows++;
                if (r->ran && r->floor_us > 0) {
                    lf += log(r->med_us / r->floor_us);
                    lm += log(r->min_us / r->floor_us);
                    nf++;
                }
                if (r->ran && !isnan(r->torch_us)) { ls += log(r->torch_us / r->med_us); ns++; }
                if (r->acc_ran && !(r->ulp_fused <= (isnan(r->ulp_eager) ? INFINITY : r->ulp_eager) + 1.0)) ulp_bad++;
            }
            if (!rows) continue;
            double gf = nf ? exp(lf / nf) : NAN, gs = ns ? exp(ls / ns) : NAN, gm = nf ? exp(lm / nf) : NAN;
            bool m = is_merge((lyco_direction)d);
            bool okf = nf && gf <= (m ? 1.7 : 2.0), oks = ns && gs >= (m ? 3.0 : 1.5);
            miss += !okf + (ns && !oks) + (ulp_bad > 0);
            char sp[16] = "      -";
            if (ns) snprintf(sp, sizeof sp, "%7.2f", gs);
            printf("%-8s %-10s %4d | %7.2f %-4s | %7.2f | %s %-4s | %s\n", families[fi].name, dir_short((lyco_direction)d), rows, gf,
                   okf ? "yes" : "MISS", gm, sp, !ns ? "-" : oks ? "yes" : "MISS", ulp_bad ? "MISS" : "yes");
            json_array_append_new(jsum, json_pack("{s:s,s:s,s:i,s:f,s:f,s:f,s:i}", "algo", families[fi].name, "dir", dir_short((lyco_direction)d),
                                                  "rows", rows, "geomean_time_over_floor", nan_neg(gf), "geomean_min_over_floor", nan_neg(gm),
                                                  "geomean_speedup_vs_torch", nan_neg(gs), "ulp_rule_misses", ulp_bad));
        }
    return miss;
}

/* ------------------------------------------------------------------ the run */

typedef struct {
    row_result *v;
    int n, cap;
} row_list;

static row_result *rows_add(row_list *l) {
    if (l->n == l->cap) {
        int nc = l->cap ? 2 * l->cap : 128;
        row_result *nv = realloc(l->v, sizeof *nv * (size_t)nc);
        if (!nv) return NULL;
        l->v = nv;
        l->cap = nc;
    }
    row_result *r = &l->v[l->n++];
    memset(r, 0, sizeof *r);
    r->torch_us = NAN;
    r->peak_extra_mib = -1;
    return r;
}

/* Thread counts of the scaling table: --threads LIST, else 1, 2, all (deduplicated, ascending). */
static int thread_list(const char *spec, int all, int *out, int cap) {
    int n = 0;
    if (spec && *spec) {
        for (const char *p = spec; *p && n < cap;) {
            int v = atoi(p);
            if (v > 0) out[n++] = v;
            const char *e = strchr(p, ',');
            if (!e) break;
            p = e + 1;
        }
    } else {
        int cand[3] = {1, 2, all};
        for (int i = 0; i < 3; i++) {
            bool dup = cand[i] > all;
            for (int j = 0; j < n; j++) dup |= out[j] == cand[i];
            if (!dup) out[n++] = cand[i];
        }
    }
    return n;
}

/* Operand bytes of a case with the widest dtypes, ×3 for the peer's autograd copies. */
static bool fits_in_memory(const lyco_case *c, lyco_direction d) {
    double e = 4.0, O = (double)c->O, I = (double)c->I, T = (double)c->tokens;
    double bytes = is_merge(d) ? 3 * O * I * e : (2 * T * I + 3 * T * O) * e;
    if (c->algo == LYCO_ALGO_FULL || c->algo == LYCO_ALGO_LOHA || c->algo == LYCO_ALGO_GLORA) bytes += 3 * O * I * e;
    return 3.0 * bytes < 0.6 * phys_mem_bytes();
}

static const char *default_rows[] = {"bf16", "fp32+bf16adapter", "bf16+fp32adapter"};

static const lyco_dtype_row *dtype_row(const char *name) {
    for (int k = 0; k < lyco_dtype_row_count; k++)
        if (!strcmp(lyco_dtype_rows[k].name, name)) return &lyco_dtype_rows[k];
    return NULL;
}

int lyco_bench_host(const lyco_check_opts *co, const lyco_bench_opts *bo) {
    signal(SIGPIPE, SIG_IGN);
    double t_start = now_s();
    int all = max_threads();
    char model[160], commit[64], date[64], cc[128];
    cpu_model(model, sizeof model);
    const char *envc = getenv("LYCO_GIT_COMMIT");
    if (envc && *envc) snprintf(commit, sizeof commit, "%s", envc);
    else command_line("git -C \"$(dirname \"" __FILE__ "\")\" rev-parse --short HEAD 2>/dev/null", commit, sizeof commit);
    command_line("date -u '+%Y-%m-%d %H:%M UTC'", date, sizeof date);
#ifdef __VERSION__
    snprintf(cc, sizeof cc, "cc %s", __VERSION__);
#else
    snprintf(cc, sizeof cc, "cc ?");
#endif
    size_t llc = llc_bytes();
    double load[3] = {0};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = load[1] = load[2] = -1;
        fclose(la);
    }
    printf("lyco bench: backend %s, %s, %d threads, LLC %zu MiB, %.0f GiB RAM; %s; commit %s; %s; load %.2f; seed %llu\n",
           lyco_backend_name(co->backend), model, all, llc >> 20, phys_mem_bytes() / 1073741824.0, cc, commit[0] ? commit : "?", date, load[0],
           (unsigned long long)co->seed);

    /* 1. ceilings */
    set_threads(all);
    size_t arr = 0;
    bench_env env;
    memset(&env, 0, sizeof env);
    env.bw = triad_bandwidth(llc, &arr);
    double own = sgemm_rate();
    peer pe;
    memset(&pe, 0, sizeof pe);
    if (bo->no_peer) snprintf(pe.why, sizeof pe.why, "peer: off (--no-peer)");
    else peer_start(&pe, all, 2 * llc);
    env.pe = pe.ok ? &pe : NULL;
    env.rate = own > pe.sgemm ? own : pe.sgemm;
    double fj = fork_join_latency();
    printf("ceilings (same run, %d threads): triad %.1f GB/s (a = b + s*c, fp32, 3 arrays x %zu MiB, best of 10; bytes = 3n*4, "
           "write-allocate not counted); sgemm %.1f GFLOP/s (lyco cpu_gemm_nn 1024^3)",
           all, env.bw / 1e9, arr >> 20, own / 1e9);
    if (pe.ok) printf(", torch.mm fp32 %.1f GFLOP/s; floor uses %.1f", pe.sgemm / 1e9, env.rate / 1e9);
    printf("\nfork-join of an empty %d-thread region: %.0f us (median of 21)%s\n", all, 1e6 * fj,
           fj > 1e-3 ? " -- ANOTHER PROCESS IS KEEPING A CORE BUSY: every all-thread time below carries this per parallel region" : "");
    if (!pe.ok) printf("%s\n", pe.why);
    if (pe.ok) printf("peer: torch %s CPU eager, upstream LyCORIS functional formulas (tools/bench_torch_cpu.py), %s\n", pe.version, peer_python());
    env.fl.n = 2 * llc / sizeof(float);
    env.fl.buf = malloc(env.fl.n * sizeof(float));
    if (!env.fl.buf || env.bw <= 0) {
        fprintf(stderr, "lyco bench: cannot allocate the ceiling/flush buffers\n");
        peer_stop(&pe);
        free(env.fl.buf);
        return 2;
    }
    for (size_t i = 0; i < env.fl.n; i++) env.fl.buf[i] = (float)(i & 15);
    env.block = bo->reps > 0 ? (bo->reps + 1) / 2 : 0;
    env.budget_s = bo->quick ? 0.015 : bo->full ? 0.2 : 0.025;
    printf("timing: per row, a warm-up call then 2 rounds of [lyco block, torch block] of k calls each (k from the warm-up time), "
           "a read-only sweep over %zu MiB before every timed call; median and min of the 2k; ulp: max RMS-normalised ULP vs the fp64 "
           "oracle at O' <= 256, T' <= 64 (same I, rank, block size)\n\n",
           (env.fl.n * sizeof(float)) >> 20);

    /* 2. rows */
    double t_rows = now_s();
    bshape shapes[64];
    int ns = 0;
    if (bo->full) ns = full_shapes(shapes, 64);
    else for (size_t i = 0; i < sizeof short_shapes / sizeof short_shapes[0]; i++) shapes[ns++] = short_shapes[i];
    row_list rl = {0}, sc = {0};
    int fails = 0, id = 0;
    print_header_row();
    for (int si = 0; si < ns; si++)
        for (int fi = 0; fi < NFAM; fi++)
            for (int d = 0; d < LYCO_DIR_COUNT; d++)
                for (int k = 0; k < (bo->full ? lyco_dtype_row_count : 3); k++) {
                    const family *f = &families[fi];
                    const bshape *s = &shapes[si];
                    const lyco_dtype_row *row = bo->full ? &lyco_dtype_rows[k] : dtype_row(default_rows[k]);
                    lyco_direction dir = (lyco_direction)d;
                    if (s->merge != is_merge(dir) || (f->merge_only && !is_merge(dir))) continue;
                    if (!matches(co->algo, f->name) || !matches(co->dir, dir_short(dir)) || !row || !matches(co->dtypes, row->name)) continue;
                    if (bo->quick && strcmp(row->name, "bf16")) continue;
                    lyco_case c;
                    if (!case_for(f, s, false, &c)) continue;
                    row_result *r = rows_add(&rl);
                    if (!r) return 2;
                    r->f = f;
                    r->dir = dir;
                    shape_label(&c, dir, r->shape, sizeof r->shape);
                    snprintf(r->dtypes, sizeof r->dtypes, "%s", row->name);
                    if (!fits_in_memory(&c, dir)) {
                        snprintf(r->path, sizeof r->path, "skipped: operands would not fit in memory");
                        print_row(r);
                        continue;
                    }
                    row_accuracy(f, s, dir, row, co, r);
                    if (row_time(f, &c, dir, row, co, &env, all, ++id, true, r) || (r->acc_ran && !r->pass)) fails++;
                    print_row(r);
                    fflush(stdout);
                }
    json_t *jsum = json_array();
    int miss = print_summary(rl.v, rl.n, jsum);

    /* 3. thread scaling: the bf16 rows of the short shapes, again at each other thread count */
    double t_scaling = now_s();
    int tl[8];
    int nt = bo->no_scaling ? 0 : thread_list(bo->threads, all, tl, 8);
    if (nt > 1 || (nt == 1 && tl[0] != all)) {
        printf("\nthread scaling (bf16 rows of the default shapes; median us, lyco then torch, speed-up over the first count in brackets;"
               " torch only where its call at all threads took < %.2f s)\n", PEER_CAP_S);
        printf("%-8s %-10s %-24s", "algo", "dir", "shape");
        for (int i = 0; i < nt; i++) printf(" | %3d thr: lyco        torch        ", tl[i]);
        printf("\n");
        for (int i = 0; i < rl.n; i++) {
            const row_result *base = &rl.v[i];
            if (!base->ran || strcmp(base->dtypes, "bf16")) continue;
            const bshape *s = NULL;
            for (int si = 0; si < ns; si++) {
                lyco_case c;
                char lab[48];
                if (shapes[si].short_set && shapes[si].merge == is_merge(base->dir) && case_for(base->f, &shapes[si], false, &c)) {
                    shape_label(&c, base->dir, lab, sizeof lab);
                    if (!strcmp(lab, base->shape)) s = &shapes[si];
                }
            }
            if (!s) continue;
            double one_l = NAN, one_t = NAN;
            printf("%-8s %-10s %-24s", base->f->name, dir_short(base->dir), base->shape);
            for (int ti = 0; ti < nt; ti++) {
                row_result tmp, *r = &tmp;
                if (tl[ti] == all) {
                    tmp = *base;
                } else {
                    r = rows_add(&sc);
                    if (!r) return 2;
                    r->f = base->f;
                    r->dir = base->dir;
                    snprintf(r->shape, sizeof r->shape, "%s", base->shape);
                    snprintf(r->dtypes, sizeof r->dtypes, "bf16");
                    r->ulp_fused = base->ulp_fused;
                    r->ulp_eager = base->ulp_eager;
                    r->pass = base->pass;
                    r->acc_ran = base->acc_ran;
                    lyco_case c;
                    case_for(base->f, s, false, &c);
                    /* the peer joins where its all-thread call was short (bf16 autograd can take seconds) */
                    row_time(base->f, &c, base->dir, dtype_row("bf16"), co, &env, tl[ti], ++id, base->torch_us < 1e6 * PEER_CAP_S, r);
                }
                if (ti == 0) { one_l = r->med_us; one_t = r->torch_us; }
                char tt[40] = "      -       ";
                if (!isnan(r->torch_us) && !isnan(one_t)) snprintf(tt, sizeof tt, "%7.0f (%4.2f)", r->torch_us, one_t / r->torch_us);
                else if (!isnan(r->torch_us)) snprintf(tt, sizeof tt, "%7.0f       ", r->torch_us);
                printf(" | %8.0f (%4.2f) %s", r->med_us, one_l / r->med_us, tt);
            }
            printf("\n");
            fflush(stdout);
        }
        set_threads(all);
    }

    /* 4. files */
    double t_files = now_s();
    char path[1200];
    const char *csvp = bo->csv, *jsonp = bo->json;
    char ocsv[1100], ojson[1100];
    if (bo->out) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", bo->out);
        if (system(cmd) != 0) fprintf(stderr, "lyco bench: cannot create %s\n", bo->out);
        snprintf(ocsv, sizeof ocsv, "%s/bench_cpu.csv", bo->out);
        snprintf(ojson, sizeof ojson, "%s/bench_cpu.json", bo->out);
        if (!csvp) csvp = ocsv;
        if (!jsonp) jsonp = ojson;
    }
    if (csvp) {
        FILE *f = fopen(csvp, "w");
        if (!f) fprintf(stderr, "lyco bench: cannot write %s\n", csvp);
        else {
            fprintf(f, "algo,dir,shape,dtypes,threads,ulp_fused,ulp_eager,time_med_us,time_min_us,floor_us,time_over_floor,min_bytes,flops,"
                       "gb_s,gflop_s,torch_med_us,speedup_vs_torch,path,pass,peak_extra_mib\n");
            for (int i = 0; i < rl.n; i++) csv_row(f, &rl.v[i]);
            for (int i = 0; i < sc.n; i++) csv_row(f, &sc.v[i]);
            fclose(f);
        }
    }
    if (jsonp) {
        json_t *root = json_pack("{s:s,s:s,s:i,s:s,s:s,s:s,s:f,s:f,s:f,s:f,s:s,s:o,s:[],s:[]}", "backend", lyco_backend_name(co->backend), "cpu",
                                 model, "threads", all, "commit", commit, "date", date, "compiler", cc, "load", load[0], "triad_gb_s",
                                 env.bw / 1e9, "sgemm_lyco_gflop_s", own / 1e9, "sgemm_torch_gflop_s", pe.ok ? pe.sgemm / 1e9 : -1.0,
                                 "torch", pe.ok ? pe.version : pe.why, "summary", jsum, "rows", "scaling");
        json_object_set_new(root, "fork_join_us", json_real(1e6 * fj));
        json_t *jr = json_object_get(root, "rows"), *js = json_object_get(root, "scaling");
        for (int i = 0; i < rl.n; i++) json_array_append_new(jr, json_row(&rl.v[i]));
        for (int i = 0; i < sc.n; i++) json_array_append_new(js, json_row(&sc.v[i]));
        if (json_dump_file(root, jsonp, JSON_INDENT(1))) fprintf(stderr, "lyco bench: cannot write %s\n", jsonp);
        json_decref(root);
        jsum = NULL;
    }
    json_decref(jsum);
    if (bo->out && jsonp) {
        char script[1024], cmd[3400];
        peer_script(script, sizeof script);
        snprintf(path, sizeof path, "%s", jsonp);
        snprintf(cmd, sizeof cmd, "'%s' '%s' --plot '%s' '%s'", peer_python(), script, path, bo->out);
        if (system(cmd) != 0) printf("plots: not written (the plot step needs matplotlib in %s)\n", peer_python());
    }
    peer_stop(&pe);
    free(env.fl.buf);
    printf("\n%d rows (%d thread-scaling), %d failed to run or missed the accuracy budget, %d family/direction targets missed; "
           "%.0f s (ceilings and peer start %.0f, rows %.0f, scaling %.0f, files %.0f)\n",
           rl.n, sc.n, fails, miss, now_s() - t_start, t_rows - t_start, t_scaling - t_rows, t_files - t_scaling, now_s() - t_files);
    free(rl.v);
    free(sc.v);
    return fails ? 1 : 0;
}
