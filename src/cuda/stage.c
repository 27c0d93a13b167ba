/*
 * stage.c — device mirrors of host tensors (see stage.h). Synchronous copies: for tests and
 * the bench, never on a kernel path.
 */
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "core/core.h"
#include "cuda/kern.h"
#include "cuda/stage.h"

#define STAGE_CHECK(call)                                                                                          \
    do {                                                                                                           \
        cudaError_t e_ = (call);                                                                                   \
        if (e_ != cudaSuccess) return lyco_fail(LYCO_ERR_BACKEND, "cuda: %s failed: %s", #call, cudaGetErrorString(e_)); \
    } while (0)

lyco_status lyco_stage_in(lyco_stage *s, const DLTensor *host, bool copy) {
    memset(s, 0, sizeof *s);
    if (!host) return LYCO_OK;
    size_t es = lyco_dtype_size(lyco_dtype_of(host));
    int64_t mn = 0, mx = 0;
    bool empty = lyco_numel(host) == 0;
    for (int i = 0; i < host->ndim && !empty; i++) {
        int64_t e = (host->shape[i] - 1) * lyco_stride(host, i);
        if (e < 0) mn += e;
        else mx += e;
    }
    char *base = (char *)host->data + host->byte_offset;
    s->span_host = base + mn * (int64_t)es;
    s->bytes = empty ? 0 : (size_t)(mx - mn + 1) * es;
    int dev = 0;
    STAGE_CHECK(cudaGetDevice(&dev));
    STAGE_CHECK(cudaMalloc(&s->alloc, s->bytes + 512));
    s->span_dev = (char *)s->alloc + 256 + ((uintptr_t)s->span_host % 256);
    if (copy && s->bytes) STAGE_CHECK(cudaMemcpy(s->span_dev, s->span_host, s->bytes, cudaMemcpyHostToDevice));
    s->t = *host;
    s->t.data = s->span_dev - mn * (int64_t)es;
    s->t.byte_offset = 0;
    s->t.device.device_type = kDLCUDA;
    s->t.device.device_id = dev;
    return LYCO_OK;
}

lyco_status lyco_stage_out(const lyco_stage *s) {
    if (!s->alloc || !s->bytes) return LYCO_OK;
    STAGE_CHECK(cudaMemcpy(s->span_host, s->span_dev, s->bytes, cudaMemcpyDeviceToHost));
    return LYCO_OK;
}

void lyco_stage_free(lyco_stage *s) {
    if (s->alloc) cudaFree(s->alloc);
    memset(s, 0, sizeof *s);
}

lyco_status lyco_stage_sync(void) {
    STAGE_CHECK(cudaDeviceSynchronize());
    STAGE_CHECK(cudaGetLastError());
    return LYCO_OK;
}

lyco_status lyco_stage_fill(DLTensor *dev, uint64_t seed, double scale) {
    return (lyco_status)lk_fill_uniform((char *)dev->data + dev->byte_offset, (int32_t)lyco_dtype_of(dev), lyco_numel(dev), seed, scale);
}
