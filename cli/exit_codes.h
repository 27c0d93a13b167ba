/*
 * exit_codes.h — the exit statuses of `lyco merge` and `lyco info` (FORMATS.md §2.4), and the
 * mapping of a library status to one of them. Documented in docs/merge.md.
 */
#ifndef LYCO_CLI_EXIT_CODES_H
#define LYCO_CLI_EXIT_CODES_H

#include "lyco.h"

enum {
    LYCO_EXIT_OK = 0,
    LYCO_EXIT_USAGE = 2,        /* bad command line */
    LYCO_EXIT_INPUT = 3,        /* an input file is invalid, or does not fit the base */
    LYCO_EXIT_IO = 4,           /* reading or writing failed (disk full, fsync, rename, …) */
    LYCO_EXIT_NUMERIC = 5,      /* the merge produced NaN or Inf */
    LYCO_EXIT_INTERRUPTED = 6,  /* SIGINT/SIGTERM: temp files removed, resumable state kept */
    LYCO_EXIT_INTERNAL = 7      /* out of memory, or a library failure that is not the input's */
};

static inline int lyco_exit_for_status(lyco_status s) {
    switch (s) {
    case LYCO_OK: return LYCO_EXIT_OK;
    case LYCO_ERR_IO: return LYCO_EXIT_IO;
    case LYCO_ERR_NUMERIC: return LYCO_EXIT_NUMERIC;
    case LYCO_ERR_NOMEM: case LYCO_ERR_BACKEND: case LYCO_ERR_ALIAS: case LYCO_ERR_NULL: return LYCO_EXIT_INTERNAL;
    default: return LYCO_EXIT_INPUT;   /* FORMAT, SHAPE, DTYPE, INVALID, UNSUPPORTED, DEVICE */
    }
}

#endif
