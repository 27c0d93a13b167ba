/*
 * bench.c — `lyco bench`: accuracy and time in one table (BENCH.md).
 *
 * Host backends (default cpu; eager, ref): lyco_bench_host in bench_cpu.c — ceilings (triad,
 * sgemm), rows with floors, the PyTorch-CPU peer, summary, thread scaling (docs/bench-cpu.md).
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

static int bench_usage(FILE *f) {
    fprintf(f,
            "usage: lyco bench [options]\n"
            "  --backend cpu|eager|ref|cuda  what to time (default cpu)\n"
            "  --algo LIST --dir LIST --dtypes LIST --seed N   filters and data seed, as in lyco check\n"
            "  --quick           fewer rows (host: bf16 only, shorter timing blocks)\n"
            "  --reps N          timed calls per row (host: per arm; default adaptive; cuda: >= 20)\n"
            "  --csv FILE --json FILE   write the rows\n"
            "host backends (docs/bench-cpu.md):\n"
            "  --full            the BENCH.md section 4 linear sweep with every dtype row (long)\n"
            "  --threads LIST    thread counts of the scaling table (default 1,2,all)\n"
            "  --no-peer         skip the PyTorch arm; --no-scaling  skip the thread-scaling table\n"
            "  --out DIR         csv + json + PNG plots (matplotlib in the peer's python) into DIR\n"
            "  peer: $LYCO_TORCH_PYTHON (default python3) runs tools/bench_torch_cpu.py\n"
            "cuda: --first-call  first-call latency in a fresh process\n");
    return f == stderr ? 2 : 0;
}

int lyco_cmd_bench(int argc, char **argv) {
    /* bench-only options are taken out before the shared check options are parsed */
    char **rest = malloc(sizeof(char *) * (size_t)(argc + 1));
    if (!rest) return 2;
    int n = 0;
    const char *csv = NULL, *json = NULL;
    int reps = 30;
    bool quick = false, first_call = false, reps_given = false;
    int first_child = -1;
    lyco_bench_opts hb; /* host-bench options (bench_cpu.c) */
    memset(&hb, 0, sizeof hb);
    for (int i = 0; i < argc; i++) {
        if (i > 0 && (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))) {
            free(rest);
            return bench_usage(stdout);
        } else if (i > 0 && (!strcmp(argv[i], "--out") || !strcmp(argv[i], "--threads")) && i + 1 < argc) {
            if (!strcmp(argv[i], "--out")) hb.out = argv[i + 1];
            else hb.threads = argv[i + 1];
            i++;
        } else if (i > 0 && (!strcmp(argv[i], "--full") || !strcmp(argv[i], "--no-peer") || !strcmp(argv[i], "--no-scaling"))) {
            hb.full |= !strcmp(argv[i], "--full");
            hb.no_peer |= !strcmp(argv[i], "--no-peer");
            hb.no_scaling |= !strcmp(argv[i], "--no-scaling");
        } else if (i > 0 && (!strcmp(argv[i], "--csv") || !strcmp(argv[i], "--json") || !strcmp(argv[i], "--reps")) && i + 1 < argc) {
            if (!strcmp(argv[i], "--csv")) csv = argv[i + 1];
            else if (!strcmp(argv[i], "--json")) json = argv[i + 1];
            else {
                reps = atoi(argv[i + 1]);
                reps_given = true;
            }
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
    hb.csv = csv;
    hb.json = json;
    hb.quick = quick;
    hb.reps = reps_given && reps > 0 ? reps : 0;
    if (reps < 20) reps = 20;
#ifdef LYCO_HAVE_CUDA
    if (o.backend == LYCO_BACKEND_CUDA) return lyco_bench_cuda(&o, csv, json, reps, quick, first_call, first_child);
#endif
    (void)first_call;
    (void)first_child;
    return lyco_bench_host(&o, &hb);
}
