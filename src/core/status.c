/*
 * status.c — status names and the thread-local last-error text. Nothing here prints.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core.h"

static _Thread_local char last_error[1024];

/* Formatted into a local buffer first: a caller may pass lyco_last_error() itself as an argument
   (wrapping an inner error with context), and vsnprintf must not read what it is writing. */
lyco_status lyco_fail(lyco_status s, const char *fmt, ...) {
    char text[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    memcpy(last_error, text, sizeof last_error);
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
