/*
 * dispatch_ia3.c — IA3 on the CUDA backend (ALGORITHMS.md): turns a validated call into kernel
 * arguments and launches them. Placeholder: declines every direction until the kernels land.
 */
#include "cuda/backend.h"

lyco_status lk_run_ia3(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    (void)dev;
    (void)st;
    return lk_decline(why, why_len, "no CUDA kernel for %s %s yet", lyco_algo_name(c->a->algo), lyco_direction_name(c->dir));
}
