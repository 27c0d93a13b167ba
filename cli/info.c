/*
 * info.c — `lyco info FILE [--json]`: describes an adapter file. Per module: the algorithm
 * detected from its keys, its rank / factors / blocks, Tucker and DoRA, the base weight's O and
 * I·K as the tensors say, alpha and the scale a loader gives it (ALGORITHMS.md §1.2), dtypes and
 * parameter count; then totals per algorithm, and every key no module uses (with the reason).
 * Everything is read from the tensors (src/io/adapter_file.c); metadata is only echoed.
 * Exit status: 0, 2 usage, 3 invalid file, 4 I/O (cli/exit_codes.h).
 */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "exit_codes.h"
#include "io/adapter_file.h"

static int usage(FILE *f) {
    fprintf(f, "usage: lyco info FILE [--json]\n"
               "  describe an adapter file: per module the algorithm, rank/factors/blocks, alpha and\n"
               "  scale, dtypes and parameter count, plus totals; --json prints one JSON object.\n");
    return f == stderr ? LYCO_EXIT_USAGE : LYCO_EXIT_OK;
}

/* "F32,BF16" */
static void dtypes_str(uint32_t mask, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int d = 0; d < LYCO_ST_DTYPE_COUNT && o < n; d++)
        if (mask & (1u << d)) o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? "," : "", lyco_st_dtype_name((lyco_st_dtype)d));
}

/* The algorithm-specific structure in a few words: "r=8 tucker", "W1 4x8 W2 80x40 r=8", … */
static void structure_str(const lyco_af_module *m, char *buf, size_t n) {
    int o = 0;
    switch (m->algo) {
    case LYCO_ALGO_LOCON: case LYCO_ALGO_GLORA: o = snprintf(buf, n, "r=%lld", (long long)m->rank); break;
    case LYCO_ALGO_LOHA: o = snprintf(buf, n, "r=%lld/%lld", (long long)m->rank, (long long)m->rank2); break;
    case LYCO_ALGO_LOKR:
        o = snprintf(buf, n, "W1 %lldx%lld W2 %lldx%lld %s", (long long)m->lk_a, (long long)m->lk_c, (long long)m->lk_b,
                     (long long)m->lk_dk, m->rank ? "" : "full");
        if (m->rank) o += snprintf(buf + o, n - (size_t)o, "r=%lld", (long long)m->rank);
        break;
    case LYCO_ALGO_DIAG_OFT: o = snprintf(buf, n, "%lld blocks of %lld", (long long)m->nb, (long long)m->bs); break;
    case LYCO_ALGO_BOFT:
        o = snprintf(buf, n, "%lld stages x %lld blocks of %lld", (long long)m->stages, (long long)m->nb, (long long)m->bs);
        break;
    case LYCO_ALGO_IA3: o = snprintf(buf, n, "%s", m->ia3_on_input ? "on input" : "on output"); break;
    case LYCO_ALGO_FULL: o = snprintf(buf, n, "%s", m->slot[LYCO_DIFF_B] ? "diff+diff_b" : "diff"); break;
    case LYCO_ALGO_NORM: o = snprintf(buf, n, "%s", m->slot[LYCO_B_NORM] ? "w_norm+b_norm" : "w_norm"); break;
    default: o = snprintf(buf, n, "-"); break;
    }
    if (m->tucker && o < (int)n) o += snprintf(buf + o, n - (size_t)o, " tucker");
    if (m->dora && o < (int)n) snprintf(buf + o, n - (size_t)o, " dora");
}

static json_t *num_or_null(double v) { return isnan(v) ? json_null() : json_real(v); }
static json_t *dim_or_null(int64_t v) { return v < 0 ? json_null() : json_integer(v); }

static json_t *module_json(const lyco_af_module *m) {
    char dt[128];
    dtypes_str(m->dtype_mask, dt, sizeof dt);
    json_t *o = json_object(), *k = json_array();
    for (int i = 0; i < m->kdims && m->kdims > 0; i++) json_array_append_new(k, dim_or_null(m->kernel[i]));
    json_object_set_new(o, "name", json_string(m->name));
    json_object_set_new(o, "algo", json_string(lyco_algo_name(m->algo)));
    json_object_set_new(o, "rank", json_integer(m->rank));
    if (m->algo == LYCO_ALGO_LOHA) json_object_set_new(o, "rank2", json_integer(m->rank2));
    json_object_set_new(o, "tucker", json_boolean(m->tucker));
    json_object_set_new(o, "dora", json_boolean(m->dora));
    json_object_set_new(o, "out_features", dim_or_null(m->out_dim));
    json_object_set_new(o, "in_features", dim_or_null(m->in_dim));
    json_object_set_new(o, "in_times_kernel", dim_or_null(m->cols));
    json_object_set_new(o, "kernel", m->kdims >= 0 ? k : json_null());
    if (m->kdims < 0) json_decref(k);
    if (m->algo == LYCO_ALGO_LOKR)
        json_object_set_new(o, "lokr", json_pack("{s:I,s:I,s:I,s:I}", "a", (json_int_t)m->lk_a, "c", (json_int_t)m->lk_c,
                                                 "b", (json_int_t)m->lk_b, "d_times_kernel", (json_int_t)m->lk_dk));
    if (m->algo == LYCO_ALGO_DIAG_OFT || m->algo == LYCO_ALGO_BOFT)
        json_object_set_new(o, "blocks", json_pack("{s:I,s:I,s:I}", "stages", (json_int_t)m->stages, "count", (json_int_t)m->nb,
                                                   "size", (json_int_t)m->bs));
    if (m->algo == LYCO_ALGO_IA3) json_object_set_new(o, "on_input", json_boolean(m->ia3_on_input));
    json_object_set_new(o, "alpha", num_or_null(m->alpha));
    json_object_set_new(o, "scale", num_or_null(lyco_af_scale(m)));
    json_object_set_new(o, "dtypes", json_string(dt));
    json_object_set_new(o, "params", json_integer(m->params));
    return o;
}

static int print_json(const char *path, const lyco_af_file *af, const int64_t *per_algo, const int64_t *params_algo, int64_t total) {
    json_t *root = json_object(), *mods = json_array(), *unused = json_array(), *by = json_object(), *meta = json_object();
    const lyco_st_file *st = lyco_af_st(af);
    for (int64_t i = 0; i < lyco_af_count(af); i++) json_array_append_new(mods, module_json(lyco_af_get(af, i)));
    for (int64_t i = 0; i < lyco_af_unused_count(af); i++)
        json_array_append_new(unused, json_pack("{s:s,s:s}", "key", lyco_af_unused_key(af, i), "why", lyco_af_unused_why(af, i)));
    for (int a = 0; a < LYCO_ALGO_COUNT; a++)
        if (per_algo[a])
            json_object_set_new(by, lyco_algo_name((lyco_algo)a), json_pack("{s:I,s:I}", "modules", (json_int_t)per_algo[a],
                                                                            "params", (json_int_t)params_algo[a]));
    for (int64_t i = 0; i < lyco_st_metadata_count(st); i++)
        json_object_set_new(meta, lyco_st_metadata_key(st, i), json_string(lyco_st_metadata_value(st, i)));
    json_object_set_new(root, "file", json_string(path));
    json_object_set_new(root, "size", json_integer((json_int_t)lyco_st_file_size(st)));
    json_object_set_new(root, "modules", mods);
    json_object_set_new(root, "totals", json_pack("{s:I,s:I,s:o}", "modules", (json_int_t)lyco_af_count(af), "params",
                                                  (json_int_t)total, "by_algo", by));
    json_object_set_new(root, "unused_keys", unused);
    json_object_set_new(root, "metadata", meta);
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (!s) { fprintf(stderr, "lyco info: out of memory\n"); return LYCO_EXIT_INTERNAL; }
    int rc = printf("%s\n", s) < 0 ? LYCO_EXIT_IO : LYCO_EXIT_OK;
    free(s);
    return rc;
}

static void print_text(const char *path, const lyco_af_file *af, const int64_t *per_algo, const int64_t *params_algo, int64_t total) {
    printf("%s: %lld modules, %lld parameters, %lld bytes\n", path, (long long)lyco_af_count(af), (long long)total,
           (long long)lyco_st_file_size(lyco_af_st(af)));
    printf("%-64s %-8s %-30s %8s %10s %6s %6s %-9s %10s\n", "module", "algo", "structure", "alpha", "scale", "O", "I*K", "dtypes", "params");
    for (int64_t i = 0; i < lyco_af_count(af); i++) {
        const lyco_af_module *m = lyco_af_get(af, i);
        char s[96], dt[96], al[32], sc[32];
        structure_str(m, s, sizeof s);
        dtypes_str(m->dtype_mask, dt, sizeof dt);
        snprintf(al, sizeof al, isnan(m->alpha) ? "-" : "%g", m->alpha);
        double scale = lyco_af_scale(m);
        snprintf(sc, sizeof sc, isnan(scale) ? "-" : "%.6g", scale);
        printf("%-64s %-8s %-30s %8s %10s %6lld %6lld %-9s %10lld\n", m->name, lyco_algo_name(m->algo), s, al, sc,
               (long long)m->out_dim, (long long)m->cols, dt, (long long)m->params);
    }
    printf("totals:");
    for (int a = 0; a < LYCO_ALGO_COUNT; a++)
        if (per_algo[a]) printf(" %s %lld modules (%lld params);", lyco_algo_name((lyco_algo)a), (long long)per_algo[a], (long long)params_algo[a]);
    printf(" all %lld modules, %lld params\n", (long long)lyco_af_count(af), (long long)total);
    for (int64_t i = 0; i < lyco_af_unused_count(af); i++)
        printf("unused key: %s (%s)\n", lyco_af_unused_key(af, i), lyco_af_unused_why(af, i));
}

int lyco_cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout);
        if (!strcmp(argv[i], "--json")) json = true;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "lyco info: unknown option %s\n", argv[i]);
            return usage(stderr);
        } else if (path) {
            fprintf(stderr, "lyco info: a second FILE \"%s\"; expected one\n", argv[i]);
            return usage(stderr);
        } else path = argv[i];
    }
    if (!path) return usage(stderr);
    lyco_af_file *af = NULL;
    lyco_status st = lyco_af_open(path, &af);
    if (st) {
        fprintf(stderr, "lyco info: %s\n", lyco_last_error());
        return lyco_exit_for_status(st);
    }
    int64_t per_algo[LYCO_ALGO_COUNT] = {0}, params_algo[LYCO_ALGO_COUNT] = {0}, total = 0;
    for (int64_t i = 0; i < lyco_af_count(af); i++) {
        const lyco_af_module *m = lyco_af_get(af, i);
        per_algo[m->algo]++;
        params_algo[m->algo] += m->params;
        total += m->params;
    }
    int rc = LYCO_EXIT_OK;
    if (json) rc = print_json(path, af, per_algo, params_algo, total);
    else print_text(path, af, per_algo, params_algo, total);
    lyco_af_close(af);
    if (fflush(stdout) != 0) rc = LYCO_EXIT_IO;
    return rc;
}
