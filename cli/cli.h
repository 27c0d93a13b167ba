/* cli.h — the subcommands of `lyco` (one file each). Each returns the process exit code. */
#ifndef LYCO_CLI_H
#define LYCO_CLI_H
#include <stdbool.h>

#include "check/check.h"

int lyco_cmd_check(int argc, char **argv);
int lyco_cmd_bench(int argc, char **argv);
int lyco_cmd_info(int argc, char **argv);
int lyco_cmd_merge(int argc, char **argv);

/* Options of `lyco bench` beyond the shared check options (cli/bench.c parses them). */
typedef struct {
    const char *csv, *json;   /* row files (NULL = none) */
    const char *out;          /* folder for csv + json + PNG plots (NULL = none) */
    const char *threads;      /* thread counts of the scaling table, "1,2,16" (NULL = 1, 2, all) */
    int reps;                 /* repeats per arm and row (0 = adaptive) */
    bool quick, full, no_peer, no_scaling;
} lyco_bench_opts;

/* The host bench (cli/bench_cpu.c): ceilings, rows with floors, the PyTorch-CPU peer, summary,
   thread scaling. Returns 0, 1 when a row failed to run or missed its accuracy budget, 2 on a
   setup error. */
int lyco_bench_host(const lyco_check_opts *co, const lyco_bench_opts *bo);
#endif
