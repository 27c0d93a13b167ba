/*
 * cpu.c — entry of the fused CPU backend. Each algorithm's fused kernels live in
 * src/cpu/<algo>.c; until an algorithm has them, this entry declines the case with its reason
 * and the api layer runs the eager twin (counted as a fallback in the path report).
 */
#include <stdio.h>

#include "api/api.h"

lyco_status lyco_cpu_run(const lyco_call *c, char *why, size_t why_len) {
    snprintf(why, why_len, "cpu: no fused kernel for %s %s yet", lyco_algo_name(c->a->algo), lyco_direction_name(c->dir));
    return LYCO_ERR_UNSUPPORTED;
}
