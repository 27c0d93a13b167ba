/*
 * api.h — internals of the api layer: the context struct, validation, and the backends' entry
 * points. The api layer is the only one that knows every backend.
 */
#ifndef LYCO_API_H
#define LYCO_API_H

#include "core/call.h"

struct lyco_ctx {
    lyco_backend backend;
    lyco_output_mode output_mode;
    lyco_fp32_mode fp32_mode;
    void *stream;
    lyco_path path;
};

/* Validates a request and fills `c` (dims, dtypes, scale, geometry). Every failure names the
   argument, what it was and what was expected. */
lyco_status lyco_validate(const lyco_ctx *ctx, lyco_call *c);

/* Per-algorithm shape rules (shapes.c): check the adapter's tensors against the layer and derive
   the algorithm's dimensions and scale. */
lyco_status lyco_shapes_check(const lyco_adapter *a, lyco_dims *d, double *scale);

/* Backends. Each returns LYCO_ERR_UNSUPPORTED with `why` filled when it declines a case. */
lyco_status lyco_ref_run(const lyco_call *c);
lyco_status lyco_eager_run(const lyco_call *c);
lyco_status lyco_cpu_run(const lyco_call *c, char *why, size_t why_len);
/* CUDA backend (src/cuda/, built when nvcc is found): runs on the context's stream; device
   tensors must all live on the current device. */
lyco_status lyco_cuda_run(const lyco_call *c, void *stream, char *why, size_t why_len);
/* The CUDA backend's fallback (src/cuda/eager_staged.c): the eager twin on host copies of the
   call's device tensors, results copied back; synchronises the stream. */
lyco_status lyco_cuda_eager_staged(const lyco_call *c, void *stream);

#endif
