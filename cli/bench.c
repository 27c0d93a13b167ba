/*
 * bench.c — `lyco bench`: accuracy and time in one table (BENCH.md). For now the CPU rows of the
 * quick case set; the GPU rows and the measured floors join as the backends land.
 */
#include <stdio.h>

#include "check/check.h"
#include "cli.h"

int lyco_parse_check_opts(int argc, char **argv, lyco_check_opts *o);

int lyco_cmd_bench(int argc, char **argv) {
    lyco_check_opts o;
    int rc = lyco_parse_check_opts(argc, argv, &o);
    if (rc >= 0) return rc;
    printf("lyco bench: backend %s, seed %llu\n", lyco_backend_name(o.backend), (unsigned long long)o.seed);
    int ran = 0;
    int fails = lyco_check_run(&o, stdout, &ran);
    printf("%d passed, %d failed\n", ran - fails, fails);
    return fails ? 1 : 0;
}
