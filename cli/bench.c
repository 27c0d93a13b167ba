/*
 * bench.c — `lyco bench`: accuracy and time in one table (BENCH.md).
 *
 * Host backends (default): the quick case set through the check runner (one call per row).
 *
 * --backend cuda: the GPU bench of bench_cuda.c (every fused family, ceilings, floors, device
 * time, first-call latency with --first-call).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check.h"
#include "cli.h"

int lyco_parse_check_opts(int argc, char **argv, lyco_check_opts *o);
#ifdef LYCO_HAVE_CUDA
/* bench_cuda.c */
int lyco_bench_cuda(const lyco_check_opts *co, const char *csv_path, const char *json_path, int reps, bool quick,
                    bool first_call, int first_call_child_idx);
#endif

int lyco_cmd_bench(int argc, char **argv) {
    /* bench-only options are taken out before the shared check options are parsed */
    char **rest = malloc(sizeof(char *) * (size_t)(argc + 1));
    if (!rest) return 2;
    int n = 0;
    const char *csv = NULL, *json = NULL;
    int reps = 30;
    bool quick = false, first_call = false;
    int first_child = -1;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && (!strcmp(argv[i], "--csv") || !strcmp(argv[i], "--json") || !strcmp(argv[i], "--reps")) && i + 1 < argc) {
            if (!strcmp(argv[i], "--csv")) csv = argv[i + 1];
            else if (!strcmp(argv[i], "--json")) json = argv[i + 1];
            else reps = atoi(argv[i + 1]);
            i++;
        } else if (i > 0 && !strcmp(argv[i], "--quick")) {
            quick = true;
        } else if (i > 0 && !strcmp(argv[i], "--first-call")) {
            first_call = true;
        } else if (i > 0 && !strcmp(argv[i], "--first-call-child") && i + 1 < argc) {
            first_child = atoi(argv[++i]);
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
    if (o.backend == LYCO_BACKEND_CUDA) return lyco_bench_cuda(&o, csv, json, reps, quick, first_call, first_child);
#endif
    (void)first_call;
    (void)first_child;
    (void)csv;
    (void)json;
    (void)quick;
    printf("lyco bench: backend %s, seed %llu\n", lyco_backend_name(o.backend), (unsigned long long)o.seed);
    int ran = 0;
    int fails = lyco_check_run(&o, stdout, &ran);
    printf("%d passed, %d failed\n", ran - fails, fails);
    return fails ? 1 : 0;
}
