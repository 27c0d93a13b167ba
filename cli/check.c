/*
 * check.c — `lyco check [--backend B] [--algo A] [--dir D] [--dtypes R] [--mode promote|base]
 * [--tier quick|full] [--seed N] [--require-fused] [--hash]`: runs the shared case table against the
 * fp64 oracle and prints one row per case: max/mean ULP of the backend and of the eager twin, the
 * budget, PASS/FAIL and the path taken (--hash: and a 64-bit hash of the backend's output values,
 * for bitwise comparisons between runs, e.g. thread counts). Exit status 1 when any case fails, 2 on a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check.h"
#include "cli.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: lyco check [options]\n"
            "  --backend auto|ref|eager|cpu|cuda   backend under test (default: cpu)\n"
            "  --algo LIST        algorithms, comma-separated (locon,loha,…; prefix*)\n"
            "  --dir LIST         merge_fwd,merge_bwd,bypass_fwd,bypass_bwd\n"
            "  --dtypes LIST      dtype rows: bf16,fp16,fp32,bf16+fp32adapter,fp16+fp32adapter,\n"
            "                     fp32+bf16adapter,fp32+fp16adapter\n"
            "  --mode promote|base  output mode (default promote)\n"
            "  --tier quick|full  case set (default quick)\n"
            "  --seed N           data seed (default: LYCO_SEED or the clock; printed)\n"
            "  --require-fused    fail a case that fell back to the eager twin\n"
            "  --hash             append h=<64-bit hash of the backend's output values> to each row\n");
    return f == stderr ? 2 : 0;
}

/* Parses the options shared by check and bench; returns -1 on success, else an exit code. */
int lyco_parse_check_opts(int argc, char **argv, lyco_check_opts *o);
int lyco_parse_check_opts(int argc, char **argv, lyco_check_opts *o) {
    memset(o, 0, sizeof *o);
    o->backend = LYCO_BACKEND_CPU;
    o->seed = lyco_seed_from_env();
    lyco_ctx *tmp = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout);
        if (!strcmp(a, "--require-fused")) { o->require_fused = true; takes = false; }
        else if (!strcmp(a, "--hash")) { o->hash = true; takes = false; }
        else if (!strcmp(a, "--verbose")) { o->verbose = true; takes = false; }
        else if (!v) { fprintf(stderr, "lyco check: option %s needs a value\n", a); return usage(stderr); }
        else if (!strcmp(a, "--backend")) {
            if (lyco_ctx_create(&tmp) || lyco_ctx_set_backend_name(tmp, v)) {
                fprintf(stderr, "lyco check: %s\n", lyco_last_error());
                lyco_ctx_destroy(tmp);
                return 2;
            }
            o->backend = lyco_ctx_backend(tmp);
            lyco_ctx_destroy(tmp);
            tmp = NULL;
        } else if (!strcmp(a, "--algo")) o->algo = v;
        else if (!strcmp(a, "--dir")) o->dir = v;
        else if (!strcmp(a, "--dtypes")) o->dtypes = v;
        else if (!strcmp(a, "--mode")) {
            lyco_output_mode m;
            if (lyco_output_mode_parse(v, &m)) { fprintf(stderr, "lyco check: %s\n", lyco_last_error()); return 2; }
            o->mode = m;
        } else if (!strcmp(a, "--tier")) {
            if (!strcmp(v, "quick")) o->tier = 0;
            else if (!strcmp(v, "full")) o->tier = 1;
            else { fprintf(stderr, "lyco check: --tier is \"%s\"; expected quick or full\n", v); return 2; }
        } else if (!strcmp(a, "--seed")) {
            char *end;
            o->seed = strtoull(v, &end, 0);
            if (*end) { fprintf(stderr, "lyco check: --seed is \"%s\"; expected an integer\n", v); return 2; }
        } else {
            fprintf(stderr, "lyco check: unknown option %s\n", a);
            return usage(stderr);
        }
        if (takes) i++;
    }
    return -1;
}

int lyco_cmd_check(int argc, char **argv) {
    lyco_check_opts o;
    int rc = lyco_parse_check_opts(argc, argv, &o);
    if (rc >= 0) return rc;
    printf("lyco check: backend %s, mode %s, seed %llu (rerun with --seed %llu)\n", lyco_backend_name(o.backend),
           o.mode == LYCO_OUTPUT_BASE ? "base" : "promote", (unsigned long long)o.seed, (unsigned long long)o.seed);
    int ran = 0;
    int fails = lyco_check_run(&o, stdout, &ran);
    printf("%d passed, %d failed\n", ran - fails, fails);
    if (ran == 0) {
        fprintf(stderr, "lyco check: no case matched the filters\n");
        return 1;
    }
    return fails ? 1 : 0;
}
