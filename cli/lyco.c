/*
 * lyco.c — the `lyco` command: dispatches to the subcommands (one file each under cli/).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: lyco <command> [options]\n"
            "  check   run the case table against the fp64 oracle (accuracy, PASS/FAIL)\n"
            "  bench   accuracy and time in one table\n"
            "  info    describe an adapter file\n"
            "  merge   merge adapters into a checkpoint\n"
            "run `lyco <command> --help` for a command's options.\n");
    return f == stderr ? 2 : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage(stderr);
    const char *cmd = argv[1];
    if (!strcmp(cmd, "check")) return lyco_cmd_check(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return lyco_cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return lyco_cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "merge")) return lyco_cmd_merge(argc - 1, argv + 1);
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) return usage(stdout);
    fprintf(stderr, "lyco: unknown command \"%s\"\n", cmd);
    return usage(stderr);
}
