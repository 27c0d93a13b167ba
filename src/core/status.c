/*
 * status.c — status names and the thread-local last-error text. Nothing here prints.
 */
#include <stdarg.h>
#include <stdio.h>

#include "core.h"

static _Thread_local char last_error[1024];

lyco_status lyco_fail(lyco_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

void lyco_clear_error(void) { last_error[0] = '\0'; }

const char *lyco_last_error(void) { return last_error; }

const char *lyco_status_name(lyco_status s) {
    static const char *const names[LYCO_STATUS_COUNT] = {
        "LYCO_OK",           "LYCO_ERR_NULL",    "LYCO_ERR_INVALID",     "LYCO_ERR_SHAPE",
        "LYCO_ERR_DTYPE",    "LYCO_ERR_DEVICE",  "LYCO_ERR_ALIAS",       "LYCO_ERR_UNSUPPORTED",
        "LYCO_ERR_NOMEM",    "LYCO_ERR_BACKEND", "LYCO_ERR_IO",          "LYCO_ERR_FORMAT",
        "LYCO_ERR_NUMERIC",
    };
    if ((int)s < 0 || s >= LYCO_STATUS_COUNT) return "LYCO_UNKNOWN_STATUS";
    return names[s];
}

const char *lyco_version(void) { return "0.1.0"; }
