/*
 * merge.c — `lyco merge BASE ADAPTER[:MULT] [ADAPTER[:MULT] …] -o OUT [options]`: bakes adapters
 * into a safetensors checkpoint (FORMATS.md §2; docs/merge.md).
 *
 * Plan first, write second: every input is opened and fully validated (strict parser), every
 * adapter module is mapped to its base tensor (src/io/adapter_file.c) and bound to it with the
 * library's shape rules, output identity (same inode as an input is refused) and free space are
 * checked — all before the output is created. Then the base is streamed tensor by tensor in file
 * order: an untouched tensor is copied (or converted to --dtype) in 16 MiB chunks read with
 * pread; a touched tensor is read whole, widened to an fp32 work buffer, every module that maps
 * to it is merged in turn by lyco_merge_fwd (adapter tensors widened to fp32 too, as upstream's
 * merge script does, so any dtype mix works and the result is rounded once), then rounded to the
 * output dtype and checked for NaN/Inf that were not in the base. Output goes through the
 * streaming writer (temp file in the target directory, fsync, rename, directory fsync) or the
 * sharded writer (index written last), then is re-opened with the strict parser, compared with
 * the plan, and a sample of merged tensors is recomputed with the fp64 oracle.
 *
 * Memory: the largest touched tensor T (elements) costs its input bytes + 4·T (fp32 work) + its
 * output bytes (e.g. 8·T bytes for fp16 in and out, four times the tensor), plus 2 × 16 MiB of
 * copy buffers, plus the adapters (mapped read-only) — independent of the checkpoint's size.
 *
 * Resume (sharded output): a manifest `<prefix>.lyco-manifest.json` in the output directory
 * records the inputs' identities, the options and each committed shard's size and FNV-1a-64;
 * a rerun with the same inputs and options verifies and skips those shards.
 *
 * Exit codes: cli/exit_codes.h (0 ok, 2 usage, 3 bad input, 4 I/O, 5 NaN/Inf, 6 interrupted).
 * Test hooks (FORMATS.md §2.6): LYCO_MERGE_KILL_AFTER=N raises SIGKILL (or the signal number in
 * LYCO_MERGE_KILL_SIGNAL) in this process after N tensors are written; LYCO_MERGE_FAULT=OP:N:ERRNO
 * (OP one of write, fsync, close, rename, dirsync) makes the writer's Nth such call fail with ERRNO.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#ifdef LYCO_HAVE_CUDA
#include "cuda/stage.h"
#endif
#include "cli.h"
#include "core/core.h"
#include "cpu/cpu.h"
#include "exit_codes.h"
#include "io/adapter_file.h"
#include "io/shards.h"

#ifndef LYCO_GIT_COMMIT
#define LYCO_GIT_COMMIT "unknown"
#endif

#define CHUNK_BYTES (16u << 20)
#define VERIFY_SAMPLES 1

/* ---- options ---- */
typedef enum { PROG_AUTO, PROG_TTY, PROG_JSON, PROG_NONE } prog_mode;

typedef struct {
    char *path;
    double mult;
    lyco_af_file *af;
    lyco_af_target *t;
} adapter_in;

typedef struct {
    const char *base_path, *out_path;
    adapter_in *ad;
    int nad;
    int out_dtype;            /* -1: each tensor keeps its dtype; else a lyco_st_dtype */
    bool upstream_scale, unmerge, skip_unmatched, allow_nonfinite, no_verify, restart;
    bool cuda;                 /* --backend cuda: each merge runs on the GPU (tensors copied there and back) */
    prog_mode progress;
    uint64_t shard_bytes;     /* 0: one output file */
} opts;

static int usage(FILE *f) {
    fprintf(f,
            "usage: lyco merge BASE ADAPTER[:MULT] [ADAPTER[:MULT] ...] -o OUT [options]\n"
            "  BASE                 a .safetensors checkpoint, or a sharded *.safetensors.index.json\n"
            "  ADAPTER[:MULT]       a LyCORIS/kohya adapter file, with its multiplier (default 1)\n"
            "  -o, --output OUT     output file (or directory, with --shard-size)\n"
            "  --dtype fp16|bf16|fp32|keep   output dtype of float tensors (default keep)\n"
            "  --backend cpu|cuda   where the merges run (default cpu; cuda copies each touched tensor\n"
            "                       and its adapters to the current GPU and back)\n"
            "  --upstream-scale     LoHa/LoKr: upstream merge scale s² and no scalar (ALGORITHMS.md §8 #1)\n"
            "  --unmerge            subtract the adapters instead (W − m·ΔW; additive algorithms only)\n"
            "  --shard-size BYTES   sharded output (HF layout, index last) with this many data bytes\n"
            "                       per shard at most (suffixes K, M, G); resumable\n"
            "  --restart            sharded: ignore a manifest from an earlier run with other inputs\n"
            "  --skip-unmatched     merge what maps; report (not refuse) modules that match nothing\n"
            "  --allow-nonfinite    write NaN/Inf produced by the merge instead of failing (exit 5)\n"
            "  --no-verify          skip the re-read of the output\n"
            "  --progress[=tty|json|none]    progress on stderr (default: on a terminal only)\n"
            "exit status: 0 ok, 2 usage, 3 invalid input, 4 I/O failure, 5 NaN/Inf produced,\n"
            "             6 interrupted (temp files removed)\n");
    return f == stderr ? LYCO_EXIT_USAGE : LYCO_EXIT_OK;
}

static bool parse_size(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v <= 0) return false;
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'i') end++;
    if (*end) return false;
    *out = (uint64_t)(v * mul);
    return *out > 0;
}

/* "path:1.5" → path and 1.5; a suffix that is not a whole number keeps the colon in the path. */
static bool parse_adapter(const char *arg, adapter_in *a) {
    const char *c = strrchr(arg, ':');
    a->mult = 1.0;
    if (c && c[1]) {
        char *end;
        errno = 0;
        double v = strtod(c + 1, &end);
        if (!*end && !errno && end != c + 1) {
            if (!isfinite(v)) return false;
            a->mult = v;
            a->path = strndup(arg, (size_t)(c - arg));
            return a->path != NULL;
        }
    }
    a->path = strdup(arg);
    return a->path != NULL;
}

static int parse_opts(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->out_dtype = -1;
    o->ad = calloc((size_t)argc, sizeof *o->ad);
    if (!o->ad) { fprintf(stderr, "lyco merge: out of memory\n"); return LYCO_EXIT_INTERNAL; }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout);
        if (!strcmp(a, "--upstream-scale")) o->upstream_scale = true;
        else if (!strcmp(a, "--unmerge")) o->unmerge = true;
        else if (!strcmp(a, "--skip-unmatched")) o->skip_unmatched = true;
        else if (!strcmp(a, "--allow-nonfinite")) o->allow_nonfinite = true;
        else if (!strcmp(a, "--no-verify")) o->no_verify = true;
        else if (!strcmp(a, "--restart")) o->restart = true;
        else if (!strcmp(a, "--progress") || !strcmp(a, "--progress=tty")) o->progress = PROG_TTY;
        else if (!strcmp(a, "--progress=json")) o->progress = PROG_JSON;
        else if (!strcmp(a, "--progress=none") || !strcmp(a, "--quiet")) o->progress = PROG_NONE;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--dtype") || !strcmp(a, "--backend") ||
                 !strcmp(a, "--shard-size")) {
            if (!v) { fprintf(stderr, "lyco merge: option %s needs a value\n", a); return usage(stderr); }
            i++;
            if (!strcmp(a, "-o") || !strcmp(a, "--output")) o->out_path = v;
            else if (!strcmp(a, "--dtype")) {
                if (!strcmp(v, "fp16") || !strcmp(v, "f16")) o->out_dtype = LYCO_ST_F16;
                else if (!strcmp(v, "bf16")) o->out_dtype = LYCO_ST_BF16;
                else if (!strcmp(v, "fp32") || !strcmp(v, "f32")) o->out_dtype = LYCO_ST_F32;
                else if (!strcmp(v, "keep")) o->out_dtype = -1;
                else { fprintf(stderr, "lyco merge: --dtype is \"%s\"; expected fp16, bf16, fp32 or keep\n", v); return LYCO_EXIT_USAGE; }
            } else if (!strcmp(a, "--backend")) {
                if (!strcmp(v, "cuda")) {
#ifdef LYCO_HAVE_CUDA
                    o->cuda = true;
#else
                    fprintf(stderr, "lyco merge: --backend is \"cuda\" but this lyco was built without CUDA (no nvcc at build time); expected cpu\n");
                    return LYCO_EXIT_USAGE;
#endif
                } else if (strcmp(v, "cpu")) {
                    fprintf(stderr, "lyco merge: --backend is \"%s\"; expected cpu or cuda\n", v);
                    return LYCO_EXIT_USAGE;
                }
            } else if (!parse_size(v, &o->shard_bytes)) {
                fprintf(stderr, "lyco merge: --shard-size is \"%s\"; expected a positive size such as 2G, 500M or 1000000\n", v);
                return LYCO_EXIT_USAGE;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "lyco merge: unknown option %s\n", a);
            return usage(stderr);
        } else if (!o->base_path) o->base_path = a;
        else if (!parse_adapter(a, &o->ad[o->nad++])) {
            fprintf(stderr, "lyco merge: adapter argument \"%s\": the multiplier is not a finite number\n", a);
            return LYCO_EXIT_USAGE;
        }
    }
    if (!o->base_path || !o->nad || !o->out_path) {
        fprintf(stderr, "lyco merge: %s\n", !o->base_path ? "BASE is missing" : !o->nad ? "no ADAPTER given" : "-o OUT is missing");
        return usage(stderr);
    }
    return -1;
}

/* ---- signals and the kill hook ---- */
static volatile sig_atomic_t g_stop;
static void on_signal(int s) { g_stop = s; }

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) || sigaction(SIGTERM, &sa, NULL)) perror("lyco merge: sigaction");
}

static int64_t g_kill_after = -1;
static int g_kill_signal = SIGKILL;

/* LYCO_MERGE_FAULT=OP:N:ERRNO → lyco_st_fault_inject; false on a malformed value. */
static bool arm_fault(const char *v) {
    static const char *const ops[LYCO_ST_FAULT_COUNT] = {"write", "fsync", "close", "rename", "dirsync"};
    const char *c1 = strchr(v, ':');
    if (!c1) return false;
    long long n;
    int err;
    if (sscanf(c1 + 1, "%lld:%d", &n, &err) != 2 || n < 1 || err < 1) return false;
    for (int op = 0; op < LYCO_ST_FAULT_COUNT; op++)
        if ((size_t)(c1 - v) == strlen(ops[op]) && !strncmp(v, ops[op], (size_t)(c1 - v))) {
            lyco_st_fault_inject((lyco_st_fault_op)op, n, err);
            return true;
        }
    return false;
}

/* ---- progress (stderr, ≤ 10 updates/s) ---- */
typedef struct {
    prog_mode mode;
    double t0, last;
    uint64_t bytes_total, bytes_done;
    int64_t n_total, n_done;
} progress;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void progress_tick(progress *p, bool final) {
    if (p->mode == PROG_NONE) return;
    double t = now_s();
    if (!final && t - p->last < 0.1) return;
    p->last = t;
    double el = t - p->t0, rate = el > 0 ? (double)p->bytes_done / el : 0;
    double eta = rate > 0 ? (double)(p->bytes_total - p->bytes_done) / rate : -1;
    if (p->mode == PROG_JSON)
        fprintf(stderr, "{\"event\":\"%s\",\"tensors_done\":%lld,\"tensors_total\":%lld,\"bytes_done\":%llu,\"bytes_total\":%llu,"
                        "\"elapsed_s\":%.3f,\"rate_bytes_per_s\":%.0f,\"eta_s\":%.1f}\n",
                final ? "done" : "progress", (long long)p->n_done, (long long)p->n_total, (unsigned long long)p->bytes_done,
                (unsigned long long)p->bytes_total, el, rate, final ? 0.0 : eta);
    else
        fprintf(stderr, "\r[%lld/%lld tensors] %.2f/%.2f GiB  %.1f MiB/s  ETA %.0fs   %s", (long long)p->n_done, (long long)p->n_total,
                (double)p->bytes_done / 1073741824.0, (double)p->bytes_total / 1073741824.0, rate / 1048576.0, eta < 0 ? 0 : eta,
                final ? "\n" : "");
    fflush(stderr);
}

/* ---- dtype helpers ---- */
static bool is_float16_32(lyco_st_dtype d) { return d == LYCO_ST_F16 || d == LYCO_ST_BF16 || d == LYCO_ST_F32; }
static lyco_dtype to_lyco(lyco_st_dtype d) { return d == LYCO_ST_F16 ? LYCO_F16 : d == LYCO_ST_BF16 ? LYCO_BF16 : LYCO_F32; }

/* Bulk conversions: the fused CPU backend's vectorised converters (bit-identical to
   src/core/convert.c's lyco_f16/bf16 conversions; AVX2/AVX-512 clones picked at load time). */
static void widen_f32(const void *src, lyco_st_dtype d, float *dst, int64_t n) { cpu_cvt_in(src, to_lyco(d), LYCO_F32, dst, n); }
static void narrow_f32(const float *src, lyco_st_dtype d, void *dst, int64_t n) { cpu_cvt_out(src, dst, to_lyco(d), n); }

static int64_t count_nonfinite(const float *v, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += !isfinite(v[i]);
    return c;
}

static int64_t count_nonfinite_st(const void *p, lyco_st_dtype d, int64_t n) {
    const uint16_t *h = p;
    int64_t c = 0;
    if (d == LYCO_ST_F32) return count_nonfinite(p, n);
    uint16_t mask = d == LYCO_ST_F16 ? 0x7c00 : 0x7f80;
    for (int64_t i = 0; i < n; i++) c += (h[i] & mask) == mask;
    return c;
}

/* ---- the plan ---- */
typedef struct {
    int64_t base;       /* base tensor index */
    int ad;             /* adapter index */
    int64_t tgt;        /* target index in that adapter */
    bool bias;          /* the module's bias change, on the base bias */
} hit;

static int cmp_hit(const void *pa, const void *pb) {
    const hit *a = pa, *b = pb;
    if (a->base != b->base) return a->base < b->base ? -1 : 1;
    if (a->ad != b->ad) return a->ad < b->ad ? -1 : 1;
    return (a->tgt > b->tgt) - (a->tgt < b->tgt);
}

typedef struct {
    opts *o;
    lyco_st_model *base;
    int64_t nbase;
    lyco_af_base_tensor *bt;
    hit *hits;
    int64_t nhits;
    int64_t *first_hit;       /* per base tensor: index into hits, or -1 */
    lyco_st_entry *entries;   /* the output plan, one per base tensor */
    char **meta;              /* key, value, …, NULL */
    int64_t touched;
    uint64_t out_bytes;       /* data bytes of the output */
    lyco_ctx *ctx;
    int kick_fd;              /* read-only fd of the output temp: write-back started early, or -1 */
    uint64_t kick_bytes;      /* bytes written since the last start */
    /* buffers */
    void *rbuf, *obuf;
    float *work;
    size_t rcap, ocap, wcap;
} plan;

static const lyco_af_module *hit_module(const plan *p, const hit *h) {
    const adapter_in *a = &p->o->ad[h->ad];
    return lyco_af_get(a->af, a->t[h->tgt].module);
}

static uint32_t merge_flags(const opts *o) { return o->upstream_scale ? LYCO_FLAG_UPSTREAM_MERGE_SCALE : 0; }

/* Output dtype of a base tensor. */
static lyco_st_dtype out_dtype_of(const opts *o, lyco_st_dtype d) {
    return o->out_dtype >= 0 && is_float16_32(d) ? (lyco_st_dtype)o->out_dtype : d;
}

static int fail_input(const char *what) {
    fprintf(stderr, "lyco merge: %s\n", what);
    return LYCO_EXIT_INPUT;
}

/* Opens the inputs, maps and binds every module (binding is the library's full shape check). */
static int build_plan(plan *p) {
    opts *o = p->o;
    lyco_status st = lyco_st_model_open(o->base_path, &p->base);
    if (st) {
        fprintf(stderr, "lyco merge: base: %s\n", lyco_last_error());
        return lyco_exit_for_status(st);
    }
    p->nbase = lyco_st_model_count(p->base);
    p->bt = calloc((size_t)(p->nbase ? p->nbase : 1), sizeof *p->bt);
    p->first_hit = malloc(sizeof *p->first_hit * (size_t)(p->nbase ? p->nbase : 1));
    if (!p->bt || !p->first_hit) return fail_input("out of memory");
    for (int64_t i = 0; i < p->nbase; i++) {
        const lyco_st_tensor *t = lyco_st_model_get(p->base, i);
        p->bt[i] = (lyco_af_base_tensor){t->name, t->ndim, t->shape};
        p->first_hit[i] = -1;
    }
    int64_t cap = 0, problems = 0;
    for (int a = 0; a < o->nad; a++) {
        adapter_in *ad = &o->ad[a];
        if ((st = lyco_af_open(ad->path, &ad->af))) {
            fprintf(stderr, "lyco merge: adapter: %s\n", lyco_last_error());
            return lyco_exit_for_status(st);
        }
        int64_t nm = lyco_af_count(ad->af);
        for (int64_t u = 0; u < lyco_af_unused_count(ad->af); u++)
            fprintf(stderr, "lyco merge: %s: key %s matched nothing: %s\n", ad->path, lyco_af_unused_key(ad->af, u), lyco_af_unused_why(ad->af, u));
        ad->t = calloc((size_t)(nm ? nm : 1), sizeof *ad->t);
        if (!ad->t) return fail_input("out of memory");
        if ((st = lyco_af_map(ad->af, p->bt, p->nbase, ad->t))) return fail_input(lyco_last_error());
        cap += 2 * nm;
    }
    p->hits = malloc(sizeof *p->hits * (size_t)(cap ? cap : 1));
    if (!p->hits) return fail_input("out of memory");
    for (int a = 0; a < o->nad; a++) {
        adapter_in *ad = &o->ad[a];
        for (int64_t i = 0; i < lyco_af_count(ad->af); i++) {
            lyco_af_target *t = &ad->t[i];
            const lyco_af_module *m = lyco_af_get(ad->af, t->module);
            if (t->problem != LYCO_AF_MAPPED) {
                fprintf(stderr, "lyco merge: %s: module %s (%s): %s\n", ad->path, m->name, lyco_algo_name(m->algo), t->why);
                problems++;
                continue;
            }
            const lyco_st_tensor *bw = lyco_st_model_get(p->base, t->weight);
            if (!is_float16_32(bw->dtype)) {
                fprintf(stderr, "lyco merge: %s: module %s: base tensor %s is %s; expected F16, BF16 or F32 to merge into\n", ad->path,
                        m->name, bw->name, bw->dtype_name);
                problems++;
                continue;
            }
            if (o->unmerge && (m->dora || m->algo == LYCO_ALGO_DIAG_OFT || m->algo == LYCO_ALGO_BOFT)) {
                fprintf(stderr, "lyco merge: %s: module %s (%s%s) is not additive; --unmerge cannot remove it\n", ad->path, m->name,
                        lyco_algo_name(m->algo), m->dora ? " with DoRA" : "");
                problems++;
                continue;
            }
            int64_t slice[2] = {t->rows, bw->ndim == 2 ? bw->shape[1] : 0};
            lyco_af_bound b;
            st = lyco_af_bind(m, t->rows ? 2 : bw->ndim, t->rows ? slice : bw->shape, ad->mult, merge_flags(o), false, &b);
            if (st) {
                fprintf(stderr, "lyco merge: %s: %s\n", ad->path, lyco_last_error());
                problems++;
                continue;
            }
            lyco_af_unbind(&b);
            if (t->bias >= 0 && !is_float16_32(lyco_st_model_get(p->base, t->bias)->dtype)) {
                fprintf(stderr, "lyco merge: %s: module %s: base bias %s is %s; expected F16, BF16 or F32\n", ad->path, m->name,
                        lyco_st_model_get(p->base, t->bias)->name, lyco_st_model_get(p->base, t->bias)->dtype_name);
                problems++;
                continue;   /* neither half: a module is merged whole or not at all */
            }
            p->hits[p->nhits++] = (hit){t->weight, a, i, false};
            if (t->bias >= 0) p->hits[p->nhits++] = (hit){t->bias, a, i, true};
        }
    }
    if (problems && !o->skip_unmatched) {
        fprintf(stderr, "lyco merge: %lld module(s) cannot be merged (listed above); nothing was written "
                        "(--skip-unmatched merges the rest)\n", (long long)problems);
        return LYCO_EXIT_INPUT;
    }
    if (!p->nhits) return fail_input("no adapter module maps to a base tensor; nothing to merge, nothing was written");
    qsort(p->hits, (size_t)p->nhits, sizeof *p->hits, cmp_hit);
    for (int64_t h = p->nhits - 1; h >= 0; h--) p->first_hit[p->hits[h].base] = h;
    p->entries = calloc((size_t)(p->nbase ? p->nbase : 1), sizeof *p->entries);
    if (!p->entries) return fail_input("out of memory");
    for (int64_t i = 0; i < p->nbase; i++) {
        const lyco_st_tensor *t = lyco_st_model_get(p->base, i);
        lyco_st_dtype d = out_dtype_of(o, t->dtype);
        uint64_t nb = t->nbytes / (uint64_t)(lyco_st_dtype_bits(t->dtype) / 8 ? lyco_st_dtype_bits(t->dtype) / 8 : 1) *
                      (uint64_t)(lyco_st_dtype_bits(d) / 8);
        if (d == t->dtype) nb = t->nbytes;
        p->entries[i] = (lyco_st_entry){t->name, d, t->ndim, t->shape, NULL, nb};
        p->out_bytes += nb;
        p->touched += p->first_hit[i] >= 0;
    }
    return -1;
}

/* ---- provenance (__metadata__) ---- */
static char *file_json(const char *role, const char *path, double mult, int64_t modules) {
    struct stat sb;
    const char *b = strrchr(path, '/');
    json_t *o = json_pack("{s:s,s:s,s:I}", "role", role, "file", b ? b + 1 : path, "size",
                          (json_int_t)(stat(path, &sb) == 0 ? sb.st_size : -1));
    if (!o) return NULL;
    if (modules >= 0) {
        json_object_set_new(o, "multiplier", json_real(mult));
        json_object_set_new(o, "modules", json_integer(modules));
    }
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(o);
    return s;
}

static int build_meta(plan *p) {
    opts *o = p->o;
    const lyco_st_file *f0 = lyco_st_model_shard(p->base, 0);
    int64_t nm0 = f0 ? lyco_st_metadata_count(f0) : 0;
    json_t *inputs = json_array();
    char *s = file_json("base", o->base_path, 1, -1);
    json_t *algos = json_object();
    if (s) json_array_append_new(inputs, json_loads(s, 0, NULL));
    free(s);
    int64_t merged = 0;
    for (int a = 0; a < o->nad; a++) {
        int64_t n = 0;
        for (int64_t i = 0; i < lyco_af_count(o->ad[a].af); i++)
            if (o->ad[a].t[i].problem == LYCO_AF_MAPPED) {
                n++;
                json_object_set_new(algos, lyco_algo_name(lyco_af_get(o->ad[a].af, i)->algo), json_true());
            }
        merged += n;
        s = file_json("adapter", o->ad[a].path, o->ad[a].mult, n);
        if (s) json_array_append_new(inputs, json_loads(s, 0, NULL));
        free(s);
    }
    char algo_list[256] = "";
    const char *k;
    json_t *v;
    json_object_foreach(algos, k, v) {
        size_t l = strlen(algo_list);
        snprintf(algo_list + l, sizeof algo_list - l, "%s%s", l ? "," : "", k);
    }
    json_decref(algos);
    char *in_s = json_dumps(inputs, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(inputs);
    json_t *opt = json_pack("{s:s,s:b,s:b,s:s,s:s}", "dtype", o->out_dtype < 0 ? "keep" : lyco_st_dtype_name((lyco_st_dtype)o->out_dtype),
                            "unmerge", o->unmerge, "upstream_scale", o->upstream_scale, "backend", o->cuda ? "cuda" : "cpu",
                            "precision", "fp32 work buffer, adapters widened to fp32, one rounding to the output dtype");
    char *opt_s = json_dumps(opt, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(opt);
    char merged_s[32], ver[64];
    snprintf(merged_s, sizeof merged_s, "%lld", (long long)merged);
    snprintf(ver, sizeof ver, "lyco merge %s", lyco_version());
    const char *ours[][2] = {
        {"lyco.tool", ver}, {"lyco.commit", LYCO_GIT_COMMIT}, {"lyco.inputs", in_s ? in_s : "[]"},
        {"lyco.options", opt_s ? opt_s : "{}"}, {"lyco.adapter_types", algo_list}, {"lyco.modules_merged", merged_s},
    };
    const int n_ours = (int)(sizeof ours / sizeof ours[0]);
    p->meta = calloc((size_t)(2 * (nm0 + n_ours) + 1), sizeof *p->meta);
    int q = 0;
    bool ok = p->meta != NULL;
    for (int64_t i = 0; ok && i < nm0; i++) {
        const char *key = lyco_st_metadata_key(f0, i);
        if (!strncmp(key, "lyco.", 5)) continue;   /* a merge of a merge: ours replace the old ones */
        ok = (p->meta[q++] = strdup(key)) && (p->meta[q++] = strdup(lyco_st_metadata_value(f0, i)));
    }
    for (int i = 0; ok && i < n_ours; i++) ok = (p->meta[q++] = strdup(ours[i][0])) && (p->meta[q++] = strdup(ours[i][1]));
    free(in_s);
    free(opt_s);
    if (!ok) return fail_input("out of memory");
    return -1;
}

/* ---- output writer: one file or shards ---- */
typedef struct {
    lyco_st_writer *one;
    lyco_st_shard_writer *sh;
} out_writer;

static lyco_status ow_put_chunk(out_writer *w, int64_t i, const void *d, uint64_t n) {
    return w->one ? lyco_st_writer_put_chunk(w->one, i, d, n) : lyco_st_shard_writer_put_chunk(w->sh, i, d, n);
}
static lyco_status ow_commit(out_writer *w) {
    lyco_status st = w->one ? lyco_st_writer_commit(w->one) : lyco_st_shard_writer_commit(w->sh);
    w->one = NULL;
    w->sh = NULL;
    return st;
}
static void ow_abort(out_writer *w) {
    if (w->one) lyco_st_writer_abort(w->one);
    if (w->sh) lyco_st_shard_writer_abort(w->sh);
    w->one = NULL;
    w->sh = NULL;
}

/* ---- identity and space checks (FORMATS.md §2.2) ---- */
static bool same_file(const struct stat *a, uint64_t dev, uint64_t ino) { return (uint64_t)a->st_dev == dev && (uint64_t)a->st_ino == ino; }

static int check_output_identity(const plan *p, const char *out_file) {
    struct stat so;
    if (stat(out_file, &so) != 0) return -1;   /* does not exist yet: nothing to collide with */
    for (int64_t k = 0; k < lyco_st_model_shard_count(p->base); k++) {
        uint64_t dev, ino;
        lyco_st_identity(lyco_st_model_shard(p->base, k), &dev, &ino);
        if (same_file(&so, dev, ino)) {
            fprintf(stderr, "lyco merge: output %s is the base file %s (same inode); refusing to overwrite an input\n", out_file,
                    lyco_st_path(lyco_st_model_shard(p->base, k)));
            return LYCO_EXIT_USAGE;
        }
    }
    struct stat si;
    if (stat(p->o->base_path, &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
        fprintf(stderr, "lyco merge: output %s is the base %s (same inode); refusing to overwrite an input\n", out_file, p->o->base_path);
        return LYCO_EXIT_USAGE;
    }
    for (int a = 0; a < p->o->nad; a++) {
        uint64_t dev, ino;
        lyco_st_identity(lyco_af_st(p->o->ad[a].af), &dev, &ino);
        if (same_file(&so, dev, ino)) {
            fprintf(stderr, "lyco merge: output %s is the adapter %s (same inode); refusing to overwrite an input\n", out_file, p->o->ad[a].path);
            return LYCO_EXIT_USAGE;
        }
    }
    return -1;
}

/* The directory a path lives in ("." for a bare name). */
static void dir_of(const char *path, char *dir, size_t n) {
    const char *s = strrchr(path, '/');
    if (!s) snprintf(dir, n, ".");
    else if (s == path) snprintf(dir, n, "/");
    else snprintf(dir, n, "%.*s", (int)(s - path), path);
}

static int check_space(const char *dir, uint64_t need) {
    struct statvfs v;
    if (statvfs(dir, &v) != 0) {
        fprintf(stderr, "lyco merge: statvfs(\"%s\"): %s\n", dir, strerror(errno));
        return LYCO_EXIT_IO;
    }
    uint64_t avail = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
    if (avail < need) {
        fprintf(stderr, "lyco merge: %s has %llu bytes free; the output needs %llu; nothing was written\n", dir,
                (unsigned long long)avail, (unsigned long long)need);
        return LYCO_EXIT_IO;
    }
    return -1;
}

/* ---- streaming ---- */
static bool grow(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    void *b = realloc(*buf, need);
    if (!b) return false;
    *buf = b;
    *cap = need;
    return true;
}

/* Untouched tensor: copied in chunks (converted when the output dtype differs). */
static lyco_status copy_tensor(plan *p, out_writer *w, int64_t i, progress *pg) {
    const lyco_st_tensor *t = lyco_st_model_get(p->base, i);
    lyco_st_dtype od = p->entries[i].dtype;
    size_t ies = (size_t)lyco_st_dtype_bits(t->dtype) / 8, oes = (size_t)lyco_st_dtype_bits(od) / 8;
    if (!ies) ies = 1;
    uint64_t step = CHUNK_BYTES / 4 * 4;
    if (!grow(&p->rbuf, &p->rcap, step) || (od != t->dtype && (!grow(&p->obuf, &p->ocap, step / ies * oes) ||
                                                               !grow((void **)&p->work, &p->wcap, step / ies * sizeof(float)))))
        return lyco_fail(LYCO_ERR_NOMEM, "out of memory for the copy buffers");
    lyco_status st;
    for (uint64_t off = 0; off < t->nbytes; off += step) {
        uint64_t n = t->nbytes - off < step ? t->nbytes - off : step;
        if ((st = lyco_st_read(t, off, p->rbuf, n))) return st;
        if (od == t->dtype) st = ow_put_chunk(w, i, p->rbuf, n);
        else {
            int64_t cnt = (int64_t)(n / ies);
            widen_f32(p->rbuf, t->dtype, p->work, cnt);
            narrow_f32(p->work, od, p->obuf, cnt);
            st = ow_put_chunk(w, i, p->obuf, (uint64_t)cnt * oes);
        }
        if (st) return st;
        pg->bytes_done += n;
        progress_tick(pg, false);
        if (g_stop) return LYCO_OK;
    }
    return LYCO_OK;
}

#ifdef LYCO_HAVE_CUDA
/* --backend cuda: W (host, fp32) and the adapter's tensors mirrored to the current device, merged
   there in place, W copied back (synchronous; the module mask stays on the host). */
static lyco_status merge_on_device(lyco_ctx *ctx, DLTensor *W, const lyco_adapter *a, lyco_merge_mode mode) {
    lyco_stage sw, sa[LYCO_SLOT_COUNT];
    memset(sa, 0, sizeof sa);
    lyco_adapter da = *a;
    lyco_status st = lyco_stage_in(&sw, W, true);
    for (int k = 0; k < LYCO_SLOT_COUNT && !st; k++) {
        if (!a->tensor[k] || k == LYCO_MODULE_MASK) continue;
        if (!(st = lyco_stage_in(&sa[k], a->tensor[k], true))) da.tensor[k] = &sa[k].t;
    }
    if (!st) {
        lyco_merge_args args = {&sw.t, NULL, mode};
        st = lyco_merge_fwd(ctx, &sw.t, NULL, &da, &args);
    }
    if (!st) st = lyco_stage_sync();
    if (!st) st = lyco_stage_out(&sw);
    lyco_stage_free(&sw);
    for (int k = 0; k < LYCO_SLOT_COUNT; k++) lyco_stage_free(&sa[k]);
    return st;
}
#endif

/* Merges every hit of base tensor i into `work` (fp32, the tensor's values). */
/* on_device: the merges run on the GPU (--backend cuda); the verification's oracle recompute
   always runs on the host (the ref backend takes host tensors only). */
static lyco_status apply_hits(plan *p, lyco_ctx *ctx, int64_t i, float *work, bool on_device) {
    (void)on_device; /* read only in a CUDA build */
    const lyco_st_tensor *t = lyco_st_model_get(p->base, i);
    lyco_status st = LYCO_OK;
    for (int64_t h = p->first_hit[i]; h >= 0 && h < p->nhits && p->hits[h].base == i && !st; h++) {
        const hit *x = &p->hits[h];
        const adapter_in *ad = &p->o->ad[x->ad];
        const lyco_af_target *tg = &ad->t[x->tgt];
        const lyco_af_module *m = hit_module(p, x);
        lyco_af_bound b;
        int64_t shape[5], ndim = t->ndim;
        memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        float *data = work;
        if (x->bias) {
            st = lyco_af_bind_bias(m, ad->mult, merge_flags(p->o), &b);
            ndim = 2;
            shape[0] = t->shape[0];
            shape[1] = 1;
        } else {
            if (tg->rows) {
                ndim = 2;
                data = work + tg->row0 * t->shape[1];
                shape[0] = tg->rows;
            }
            st = lyco_af_bind(m, (int32_t)ndim, shape, ad->mult, merge_flags(p->o), true, &b);
        }
        if (st) return st;
        DLTensor W = lyco_host_tensor(data, LYCO_F32, (int32_t)ndim, shape);
        lyco_merge_args args = {&W, NULL, p->o->unmerge ? LYCO_MERGE_UNMERGE : LYCO_MERGE_WEIGHT};
#ifdef LYCO_HAVE_CUDA
        if (on_device) st = merge_on_device(ctx, &W, &b.a, args.mode);
        else
#endif
            st = lyco_merge_fwd(ctx, &W, NULL, &b.a, &args);
        if (st) st = lyco_fail(st, "merging %s (%s) of %s into %s: %s", m->name, lyco_algo_name(m->algo), ad->path, t->name, lyco_last_error());
        lyco_af_unbind(&b);
    }
    return st;
}

/* Touched tensor: read whole, widen to fp32, merge, round once, check, write. */
static lyco_status merge_tensor(plan *p, out_writer *w, int64_t i, progress *pg) {
    const lyco_st_tensor *t = lyco_st_model_get(p->base, i);
    lyco_st_dtype od = p->entries[i].dtype;
    int64_t n = (int64_t)(t->nbytes / ((uint64_t)lyco_st_dtype_bits(t->dtype) / 8));
    if (!grow(&p->rbuf, &p->rcap, t->nbytes) || !grow((void **)&p->work, &p->wcap, sizeof(float) * (size_t)n) ||
        !grow(&p->obuf, &p->ocap, p->entries[i].nbytes))
        return lyco_fail(LYCO_ERR_NOMEM, "out of memory for tensor %s (%lld elements)", t->name, (long long)n);
    lyco_status st = lyco_st_read(t, 0, p->rbuf, t->nbytes);
    if (st) return st;
    widen_f32(p->rbuf, t->dtype, p->work, n);
    int64_t bad_in = count_nonfinite(p->work, n);
    if ((st = apply_hits(p, p->ctx, i, p->work, p->o->cuda))) return st;
    narrow_f32(p->work, od, p->obuf, n);
    int64_t bad_out = count_nonfinite_st(p->obuf, od, n);
    if (bad_out > bad_in && !p->o->allow_nonfinite)
        return lyco_fail(LYCO_ERR_NUMERIC, "merging into %s produced %lld NaN/Inf value(s) in %s (the base had %lld); nothing was written "
                                           "(--allow-nonfinite writes them)",
                         t->name, (long long)(bad_out - bad_in), lyco_st_dtype_name(od), (long long)bad_in);
    if ((st = ow_put_chunk(w, i, p->obuf, p->entries[i].nbytes))) return st;
    pg->bytes_done += t->nbytes;
    return LYCO_OK;
}

/* Starts write-back of what was written so far, every 64 MiB (posix_fadvise DONTNEED on the
   output temp: dirty pages are queued for writing, clean ones dropped from the cache), so the
   disk works while the next tensors are merged instead of all at the final fsync. Durability
   still comes from the writer's fsync; this only changes when the writing happens. */
static void kick_writeback(plan *p, uint64_t bytes) {
    p->kick_bytes += bytes;
    if (p->kick_fd < 0 || p->kick_bytes < (64u << 20)) return;
    p->kick_bytes = 0;
    (void)posix_fadvise(p->kick_fd, 0, 0, POSIX_FADV_DONTNEED);   /* advisory: failure is harmless */
}

static int stream_all(plan *p, out_writer *w, const bool *skip) {
    progress pg = {.mode = p->o->progress, .t0 = now_s(), .n_total = p->nbase};
    if (pg.mode == PROG_AUTO) pg.mode = isatty(2) ? PROG_TTY : PROG_NONE;
    for (int64_t i = 0; i < p->nbase; i++) pg.bytes_total += lyco_st_model_get(p->base, i)->nbytes;
    for (int64_t i = 0; i < p->nbase; i++) {
        if (skip && skip[i]) {
            pg.bytes_done += lyco_st_model_get(p->base, i)->nbytes;
            pg.n_done++;
            continue;
        }
        lyco_status st = p->first_hit[i] >= 0 ? merge_tensor(p, w, i, &pg) : copy_tensor(p, w, i, &pg);
        if (st) {
            fprintf(stderr, "%slyco merge: %s\n", pg.mode == PROG_TTY ? "\n" : "", lyco_last_error());
            return lyco_exit_for_status(st);
        }
        if (g_stop) {
            fprintf(stderr, "%slyco merge: interrupted by signal %d; temp files removed, nothing replaced\n", pg.mode == PROG_TTY ? "\n" : "",
                    (int)g_stop);
            return LYCO_EXIT_INTERRUPTED;
        }
        pg.n_done++;
        progress_tick(&pg, false);
        kick_writeback(p, p->entries[i].nbytes);
        if (g_kill_after >= 0 && pg.n_done >= g_kill_after) raise(g_kill_signal);
    }
    progress_tick(&pg, true);
    return -1;
}

/* ---- verification: strict re-read, plan comparison, sampled recompute with the oracle ---- */
static lyco_status recompute_ref(plan *p, int64_t i, float *ref) {
    const lyco_st_tensor *t = lyco_st_model_get(p->base, i);
    int64_t n = (int64_t)(t->nbytes / ((uint64_t)lyco_st_dtype_bits(t->dtype) / 8));
    void *raw = malloc(t->nbytes ? t->nbytes : 1);
    if (!raw) return lyco_fail(LYCO_ERR_NOMEM, "out of memory (verification)");
    lyco_status st = lyco_st_read(t, 0, raw, t->nbytes);
    if (!st) widen_f32(raw, t->dtype, ref, n);
    free(raw);
    lyco_ctx *ref_ctx = NULL;
    if (!st) st = lyco_ctx_create(&ref_ctx);
    if (!st) st = lyco_ctx_set_backend(ref_ctx, LYCO_BACKEND_REF);
    if (!st) st = apply_hits(p, ref_ctx, i, ref, false);
    lyco_ctx_destroy(ref_ctx);
    return st;
}

static int verify(plan *p, const char *path) {
    lyco_st_model *m = NULL;
    lyco_status st = lyco_st_model_open(path, &m);
    if (st) {
        fprintf(stderr, "lyco merge: verification: the written output does not open: %s\n", lyco_last_error());
        return LYCO_EXIT_IO;
    }
    int rc = -1;
    if (lyco_st_model_count(m) != p->nbase) {
        fprintf(stderr, "lyco merge: verification: %s has %lld tensors; the plan has %lld\n", path, (long long)lyco_st_model_count(m),
                (long long)p->nbase);
        rc = LYCO_EXIT_IO;
    }
    for (int64_t i = 0; i < p->nbase && rc < 0; i++) {
        const lyco_st_entry *e = &p->entries[i];
        const lyco_st_tensor *t = lyco_st_model_find(m, e->name);
        bool ok = t && t->dtype == e->dtype && t->ndim == e->ndim && t->nbytes == e->nbytes;
        for (int d = 0; ok && d < e->ndim; d++) ok = t->shape[d] == e->shape[d];
        if (!ok) {
            fprintf(stderr, "lyco merge: verification: tensor %s in %s differs from the plan (missing, dtype or shape)\n", e->name, path);
            rc = LYCO_EXIT_IO;
        }
    }
    /* the VERIFY_SAMPLES smallest touched tensors, recomputed with the fp64 oracle */
    int64_t pick[VERIFY_SAMPLES] = {0};
    int np = 0;
    for (int64_t i = 0; i < p->nbase; i++) {
        if (p->first_hit[i] < 0) continue;
        int64_t sz = (int64_t)lyco_st_model_get(p->base, i)->nbytes;
        if (np < VERIFY_SAMPLES) pick[np++] = i;
        else {
            int worst = 0;
            for (int k = 1; k < np; k++)
                if (lyco_st_model_get(p->base, pick[k])->nbytes > lyco_st_model_get(p->base, pick[worst])->nbytes) worst = k;
            if ((int64_t)lyco_st_model_get(p->base, pick[worst])->nbytes > sz) pick[worst] = i;
        }
    }
    for (int k = 0; k < np && rc < 0; k++) {
        const lyco_st_entry *e = &p->entries[pick[k]];
        const lyco_st_tensor *t = lyco_st_model_find(m, e->name);
        int64_t n = (int64_t)(e->nbytes / ((uint64_t)lyco_st_dtype_bits(e->dtype) / 8));
        float *ref = malloc(sizeof(float) * (size_t)(n ? n : 1)), *got = malloc(sizeof(float) * (size_t)(n ? n : 1));
        void *raw = malloc(e->nbytes ? e->nbytes : 1);
        double *r64 = malloc(sizeof(double) * (size_t)(n ? n : 1)), *y64 = malloc(sizeof(double) * (size_t)(n ? n : 1));
        if (!ref || !got || !raw || !r64 || !y64) st = lyco_fail(LYCO_ERR_NOMEM, "out of memory (verification)");
        else st = recompute_ref(p, pick[k], ref);
        if (!st) st = lyco_st_read(t, 0, raw, e->nbytes);
        if (!st) {
            widen_f32(raw, e->dtype, got, n);
            lyco_dtype T = to_lyco(e->dtype);
            for (int64_t j = 0; j < n; j++) {
                r64[j] = lyco_round_f64(ref[j], T);
                y64[j] = got[j];
            }
            lyco_score sc;
            lyco_score_f64(y64, r64, n, 0, T, &sc);
            /* a wrong scale, tensor or slice is off by far more than this; rounding is not */
            if (!lyco_score_pass(&sc, 64.0) || sc.bad_class) {
                fprintf(stderr, "lyco merge: verification: %s differs from the fp64 oracle's merge by %.1f ulp (%lld non-finite mismatches)\n",
                        e->name, sc.max_excess, (long long)sc.bad_class);
                rc = LYCO_EXIT_NUMERIC;
            }
        } else {
            fprintf(stderr, "lyco merge: verification: %s\n", lyco_last_error());
            rc = lyco_exit_for_status(st);
        }
        free(ref);
        free(got);
        free(raw);
        free(r64);
        free(y64);
    }
    lyco_st_model_close(m);
    return rc;
}

/* ---- sharded output and resume (FORMATS.md §2.3) ---- */
static uint64_t fnv1a_file(const char *path, bool *ok) {
    uint64_t h = 1469598103934665603ull;
    *ok = false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    static unsigned char buf[1 << 20];
    ssize_t r;
    while ((r = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < r; i++) h = (h ^ buf[i]) * 1099511628211ull;
    *ok = r == 0;
    if (close(fd) != 0) *ok = false;
    return h;
}

/* The manifest's identity part: inputs (path, size, mtime, inode) and options. */
static json_t *run_identity(const plan *p) {
    json_t *in = json_array();
    const opts *o = p->o;
    const char *paths[64];
    int np = 0;
    paths[np++] = o->base_path;
    for (int a = 0; a < o->nad && np < 64; a++) paths[np++] = o->ad[a].path;
    for (int k = 0; k < np; k++) {
        struct stat sb;
        if (stat(paths[k], &sb) != 0) continue;
        json_array_append_new(in, json_pack("{s:s,s:I,s:I,s:I,s:I}", "path", paths[k], "size", (json_int_t)sb.st_size, "mtime_s",
                                            (json_int_t)sb.st_mtim.tv_sec, "mtime_ns", (json_int_t)sb.st_mtim.tv_nsec, "inode",
                                            (json_int_t)sb.st_ino));
    }
    json_t *mults = json_array();
    for (int a = 0; a < o->nad; a++) json_array_append_new(mults, json_real(o->ad[a].mult));
    return json_pack("{s:s,s:o,s:{s:i,s:b,s:b,s:I,s:o}}", "tool", lyco_version(), "inputs", in, "options", "dtype", o->out_dtype,
                     "unmerge", o->unmerge, "upstream_scale", o->upstream_scale, "shard_size", (json_int_t)o->shard_bytes, "multipliers", mults);
}

static int write_manifest(const char *path, json_t *ident, json_t *shards) {
    json_t *root = json_pack("{s:O,s:O}", "run", ident, "shards", shards);
    char *s = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (!s) return LYCO_EXIT_INTERNAL;
    lyco_status st = lyco_st_write_text_atomic(path, s, strlen(s), 0);
    free(s);
    if (st) {
        fprintf(stderr, "lyco merge: manifest: %s\n", lyco_last_error());
        return LYCO_EXIT_IO;
    }
    return -1;
}

static int run_sharded(plan *p) {
    const opts *o = p->o;
    const char *dir = o->out_path;
    struct stat sd;
    if (stat(dir, &sd) != 0 && mkdir(dir, 0777) != 0) {
        fprintf(stderr, "lyco merge: cannot create the output directory %s: %s\n", dir, strerror(errno));
        return LYCO_EXIT_IO;
    }
    if (stat(dir, &sd) != 0 || !S_ISDIR(sd.st_mode)) {
        fprintf(stderr, "lyco merge: -o %s: expected a directory with --shard-size\n", dir);
        return LYCO_EXIT_USAGE;
    }
    for (int64_t k = 0; k < lyco_st_model_shard_count(p->base); k++) {
        char bd[4096];
        struct stat sb;
        dir_of(lyco_st_path(lyco_st_model_shard(p->base, k)), bd, sizeof bd);
        if (stat(bd, &sb) == 0 && sb.st_dev == sd.st_dev && sb.st_ino == sd.st_ino) {
            fprintf(stderr, "lyco merge: the output directory %s holds the base checkpoint; choose another directory\n", dir);
            return LYCO_EXIT_USAGE;
        }
    }
    lyco_st_shard_writer *w = NULL;
    lyco_status st = lyco_st_shard_writer_open(&w, dir, "model", p->entries, p->nbase, (const char *const *)p->meta, o->shard_bytes, 0);
    if (st) {
        fprintf(stderr, "lyco merge: %s\n", lyco_last_error());
        return lyco_exit_for_status(st);
    }
    char mpath[4200], ipath[4200];
    snprintf(mpath, sizeof mpath, "%s/model.lyco-manifest.json", dir);
    snprintf(ipath, sizeof ipath, "%s/%s", dir, lyco_st_shard_writer_index_name(w));
    int rc = check_output_identity(p, ipath);
    int64_t nsh = lyco_st_shard_writer_shard_count(w);
    for (int64_t k = 0; k < nsh && rc < 0; k++) {   /* a shard name that is an input (hard link) */
        char spath[4200];
        snprintf(spath, sizeof spath, "%s/%s", dir, lyco_st_shard_writer_shard_name(w, k));
        rc = check_output_identity(p, spath);
    }
    if (rc < 0) rc = check_space(dir, p->out_bytes);
    bool *skip = calloc((size_t)(p->nbase ? p->nbase : 1), sizeof *skip), *sh_done = calloc((size_t)nsh, sizeof *sh_done);
    json_t *ident = run_identity(p), *shards = json_object();
    if (!skip || !sh_done || !ident || !shards) rc = LYCO_EXIT_INTERNAL;
    /* resume: an earlier manifest with the same run identity */
    json_t *old = rc < 0 ? json_load_file(mpath, 0, NULL) : NULL;
    if (old) {
        if (!json_equal(json_object_get(old, "run"), ident) && !o->restart) {
            fprintf(stderr, "lyco merge: %s belongs to a run with other inputs or options; refusing to mix (--restart starts over)\n", mpath);
            rc = LYCO_EXIT_USAGE;
        } else if (json_equal(json_object_get(old, "run"), ident)) {
            int64_t kept = 0;
            for (int64_t k = 0; k < nsh && rc < 0; k++) {
                const char *name = lyco_st_shard_writer_shard_name(w, k);
                json_t *rec = json_object_get(json_object_get(old, "shards"), name);
                char spath[4200];
                snprintf(spath, sizeof spath, "%s/%s", dir, name);
                bool ok;
                uint64_t h = rec ? fnv1a_file(spath, &ok) : 0;
                char hs[32];
                snprintf(hs, sizeof hs, "%016llx", (unsigned long long)h);
                if (!rec || !ok || strcmp(json_string_value(json_object_get(rec, "fnv1a64")) ? json_string_value(json_object_get(rec, "fnv1a64")) : "", hs))
                    continue;
                if (lyco_st_shard_writer_skip(w, k)) continue;
                sh_done[k] = true;
                kept++;
                json_object_set(shards, name, rec);
                for (int64_t i = 0; i < p->nbase; i++)
                    if (lyco_st_shard_writer_shard_of(w, i) == k) skip[i] = true;
            }
            if (kept) fprintf(stderr, "lyco merge: resuming: %lld of %lld shards verified by hash and kept\n", (long long)kept, (long long)nsh);
        }
        json_decref(old);
    }
    int64_t removed = 0;
    for (int64_t k = 0; k < nsh && rc < 0; k++)
        if (lyco_st_remove_stale_temps(dir, lyco_st_shard_writer_shard_name(w, k), &removed)) break;
    if (rc < 0) rc = write_manifest(mpath, ident, shards);
    out_writer ow = {NULL, w};
    /* stream, recording each shard in the manifest as it commits */
    if (rc < 0) {
        progress pg = {.mode = o->progress, .t0 = now_s(), .n_total = p->nbase};
        if (pg.mode == PROG_AUTO) pg.mode = isatty(2) ? PROG_TTY : PROG_NONE;
        for (int64_t i = 0; i < p->nbase; i++) pg.bytes_total += lyco_st_model_get(p->base, i)->nbytes;
        for (int64_t i = 0; i < p->nbase && rc < 0; i++) {
            if (skip[i]) {
                pg.bytes_done += lyco_st_model_get(p->base, i)->nbytes;
                pg.n_done++;
                continue;
            }
            st = p->first_hit[i] >= 0 ? merge_tensor(p, &ow, i, &pg) : copy_tensor(p, &ow, i, &pg);
            if (st) {
                fprintf(stderr, "%slyco merge: %s\n", pg.mode == PROG_TTY ? "\n" : "", lyco_last_error());
                rc = lyco_exit_for_status(st);
                break;
            }
            if (g_stop) {
                fprintf(stderr, "\nlyco merge: interrupted by signal %d; temp files removed, committed shards and the manifest kept\n", (int)g_stop);
                rc = LYCO_EXIT_INTERRUPTED;
                break;
            }
            pg.n_done++;
            progress_tick(&pg, false);
            int64_t k = lyco_st_shard_writer_shard_of(w, i);
            if (k >= 0 && !sh_done[k] && lyco_st_shard_writer_shard_done(w, k)) {
                sh_done[k] = true;
                const char *name = lyco_st_shard_writer_shard_name(w, k);
                char spath[4200], hs[32];
                snprintf(spath, sizeof spath, "%s/%s", dir, name);
                bool ok;
                uint64_t h = fnv1a_file(spath, &ok);
                snprintf(hs, sizeof hs, "%016llx", (unsigned long long)h);
                if (!ok) {
                    fprintf(stderr, "lyco merge: cannot re-read shard %s to hash it\n", spath);
                    rc = LYCO_EXIT_IO;
                    break;
                }
                json_object_set_new(shards, name, json_pack("{s:s}", "fnv1a64", hs));
                rc = write_manifest(mpath, ident, shards);
            }
            if (g_kill_after >= 0 && pg.n_done >= g_kill_after) raise(g_kill_signal);
        }
        if (rc < 0) progress_tick(&pg, true);
    }
    if (rc < 0) {
        st = ow_commit(&ow);
        if (st) {
            fprintf(stderr, "lyco merge: %s\n", lyco_last_error());
            rc = lyco_exit_for_status(st);
        }
    } else ow_abort(&ow);
    if (rc < 0 && !o->no_verify) rc = verify(p, ipath);
    json_decref(ident);
    json_decref(shards);
    free(skip);
    free(sh_done);
    return rc;
}

static int run_single(plan *p) {
    int rc = check_output_identity(p, p->o->out_path);
    if (rc >= 0) return rc;
    uint64_t hdr = 0, fsize = 0;
    lyco_status st = lyco_st_layout(p->entries, p->nbase, (const char *const *)p->meta, &hdr, &fsize);
    if (st) {
        fprintf(stderr, "lyco merge: %s\n", lyco_last_error());
        return lyco_exit_for_status(st);
    }
    char dir[4096];
    dir_of(p->o->out_path, dir, sizeof dir);
    if ((rc = check_space(dir, fsize)) >= 0) return rc;
    const char *slash = strrchr(p->o->out_path, '/');
    int64_t removed = 0;
    if (lyco_st_remove_stale_temps(dir, slash ? slash + 1 : p->o->out_path, &removed) == LYCO_OK && removed)
        fprintf(stderr, "lyco merge: removed %lld stale temp file(s) of an interrupted run\n", (long long)removed);
    out_writer w = {NULL, NULL};
    st = lyco_st_writer_open(&w.one, p->o->out_path, p->entries, p->nbase, (const char *const *)p->meta, 0);
    if (st) {
        fprintf(stderr, "lyco merge: %s\n", lyco_last_error());
        return lyco_exit_for_status(st);
    }
    p->kick_fd = open(lyco_st_writer_temp_path(w.one), O_RDONLY | O_CLOEXEC);
    rc = stream_all(p, &w, NULL);
    if (p->kick_fd >= 0 && close(p->kick_fd) != 0) perror("lyco merge: close");
    p->kick_fd = -1;
    if (rc >= 0) {
        ow_abort(&w);
        return rc;
    }
    if ((st = ow_commit(&w))) {
        fprintf(stderr, "lyco merge: %s\n", lyco_last_error());
        return lyco_exit_for_status(st);
    }
    return p->o->no_verify ? -1 : verify(p, p->o->out_path);
}

static void free_plan(plan *p) {
    for (int a = 0; a < p->o->nad; a++) {
        lyco_af_close(p->o->ad[a].af);
        free(p->o->ad[a].t);
        free(p->o->ad[a].path);
    }
    free(p->o->ad);
    for (char **m = p->meta; m && *m; m++) free(*m);
    free(p->meta);
    free(p->entries);
    free(p->hits);
    free(p->first_hit);
    free(p->bt);
    free(p->rbuf);
    free(p->obuf);
    free(p->work);
    lyco_ctx_destroy(p->ctx);
    lyco_st_model_close(p->base);
}

int lyco_cmd_merge(int argc, char **argv) {
    opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc >= 0) {
        for (int a = 0; a < o.nad; a++) free(o.ad[a].path);
        free(o.ad);
        return rc;
    }
    const char *ka = getenv("LYCO_MERGE_KILL_AFTER");
    g_kill_after = ka && *ka ? strtoll(ka, NULL, 10) : -1;
    const char *ks = getenv("LYCO_MERGE_KILL_SIGNAL"), *fault = getenv("LYCO_MERGE_FAULT");
    if (ks && *ks) g_kill_signal = atoi(ks);
    if (fault && *fault && !arm_fault(fault)) {
        fprintf(stderr, "lyco merge: LYCO_MERGE_FAULT is \"%s\"; expected OP:N:ERRNO with OP write|fsync|close|rename|dirsync\n", fault);
        return LYCO_EXIT_USAGE;
    }
    install_signals();
    plan p;
    memset(&p, 0, sizeof p);
    p.o = &o;
    p.kick_fd = -1;
    rc = build_plan(&p);
    if (rc < 0) rc = build_meta(&p);
    if (rc < 0) {
        lyco_status st = lyco_ctx_create(&p.ctx);
        if (!st) st = lyco_ctx_set_backend(p.ctx, o.cuda ? LYCO_BACKEND_CUDA : LYCO_BACKEND_CPU);
#ifdef LYCO_HAVE_CUDA
        if (!st && o.cuda) st = lyco_stage_sync(); /* a usable GPU, before anything is written */
#endif
        if (st) {
            fprintf(stderr, "lyco merge: %s\n", lyco_last_error());
            rc = LYCO_EXIT_INTERNAL;
        }
    }
    if (rc < 0) rc = o.shard_bytes ? run_sharded(&p) : run_single(&p);
    if (rc < 0) {
        fprintf(stderr, "lyco merge: wrote %s: %lld tensors (%lld merged), %llu data bytes\n", o.out_path, (long long)p.nbase,
                (long long)p.touched, (unsigned long long)p.out_bytes);
        rc = LYCO_EXIT_OK;
    }
    free_plan(&p);
    return rc;
}
