/*
 * stage.h — device mirrors of host tensors, for tests and the bench (`lyco check --backend
 * cuda` stages every tensor of a run this way). A mirror keeps the host view's shape, strides,
 * dtype and misalignment (the data address modulo 256), so strided and unaligned cases reach
 * the kernels exactly as built on the host.
 */
#ifndef LYCO_CUDA_STAGE_H
#define LYCO_CUDA_STAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "lyco.h"

typedef struct {
    DLTensor t;          /* the device view (shape/strides point at the host view's arrays) */
    void *alloc;         /* cudaMalloc'd block */
    char *span_dev;      /* device address of the first byte the view covers */
    char *span_host;     /* host address of the same byte */
    size_t bytes;        /* bytes the view covers */
} lyco_stage;

/* Allocates a mirror of host (NULL: a zeroed lyco_stage) and copies its bytes when copy. */
lyco_status lyco_stage_in(lyco_stage *s, const DLTensor *host, bool copy);
/* Copies the mirror's bytes back over the host view's span (synchronous). */
lyco_status lyco_stage_out(const lyco_stage *s);
void lyco_stage_free(lyco_stage *s);
/* Fills a compact device tensor with uniform values in (-scale, scale), never 0 (bench inputs). */
lyco_status lyco_stage_fill(DLTensor *dev, uint64_t seed, double scale);
/* Waits for all work on the device (cudaDeviceSynchronize), reporting an asynchronous error. */
lyco_status lyco_stage_sync(void);

#endif
