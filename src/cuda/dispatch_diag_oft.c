/*
 * dispatch_diag_oft.c — Diag-OFT (ALGORITHMS.md §2.4) on the CUDA backend. Placeholder until the family's kernels land
 * (issue 5): declines every call, so the api layer runs the eager twin on host copies and the
 * path report says why.
 */
#include "cuda/backend.h"

lyco_status lk_run_diag_oft(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    (void)dev;
    (void)st;
    return lk_decline(why, why_len, "no CUDA kernel for %s %s yet", lyco_algo_name(c->a->algo), lyco_direction_name(c->dir));
}
