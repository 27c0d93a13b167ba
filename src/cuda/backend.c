/*
 * backend.c — entry of the CUDA backend (placeholder until the kernels land): declines every
 * case with its reason.
 */
#include <stdio.h>

#include "api/api.h"

lyco_status lyco_cuda_run(const lyco_call *c, void *stream, char *why, size_t why_len) {
    (void)stream;
    snprintf(why, why_len, "no CUDA kernel for %s %s yet", lyco_algo_name(c->a->algo), lyco_direction_name(c->dir));
    return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: %s", why);
}
