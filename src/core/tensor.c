/*
 * tensor.c — DLTensor views: dtype mapping, element addressing with any strides (NULL strides =
 * compact row-major; unaligned data allowed: every access goes through memcpy), overlap tests,
 * and gather/scatter between a view and a compact fp64/fp32 array.
 */
#include <stdio.h>
#include <string.h>

#include "core.h"

lyco_dtype lyco_dtype_of(const DLTensor *t) {
    DLDataType d = t->dtype;
    if (d.lanes != 1) return LYCO_DTYPE_INVALID;
    if (d.code == kDLFloat && d.bits == 16) return LYCO_F16;
    if (d.code == kDLFloat && d.bits == 32) return LYCO_F32;
    if (d.code == kDLBfloat && d.bits == 16) return LYCO_BF16;
    return LYCO_DTYPE_INVALID;
}

void lyco_describe_dl_dtype(DLDataType t, char *buf, size_t n) {
    const char *kind = t.code == kDLFloat ? "fp" : t.code == kDLBfloat ? "bf" :
                       t.code == kDLInt ? "int" : t.code == kDLUInt ? "uint" : "code?";
    if (t.lanes != 1) snprintf(buf, n, "%s%u x%u", kind, t.bits, t.lanes);
    else snprintf(buf, n, "%s%u", kind, t.bits);
}

const char *lyco_dtype_name(lyco_dtype d) {
    switch (d) {
    case LYCO_F16: return "fp16";
    case LYCO_BF16: return "bf16";
    case LYCO_F32: return "fp32";
    default: return "invalid";
    }
}

DLDataType lyco_dl_dtype(lyco_dtype d) {
    DLDataType t;
    t.code = d == LYCO_BF16 ? kDLBfloat : kDLFloat;
    t.bits = d == LYCO_F32 ? 32 : 16;
    t.lanes = 1;
    return t;
}

DLTensor lyco_host_tensor(void *data, lyco_dtype d, int32_t ndim, int64_t *shape) {
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.device.device_id = 0;
    t.ndim = ndim;
    t.dtype = lyco_dl_dtype(d);
    t.shape = shape;
    t.strides = NULL;
    t.byte_offset = 0;
    return t;
}

int64_t lyco_numel(const DLTensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

int64_t lyco_stride(const DLTensor *t, int dim) {
    if (t->strides) return t->strides[dim];
    int64_t s = 1;
    for (int i = dim + 1; i < t->ndim; i++) s *= t->shape[i];
    return s;
}

static size_t elem_size(const DLTensor *t) { return (size_t)((t->dtype.bits * t->dtype.lanes + 7) / 8); }

void *lyco_elem_addr(const DLTensor *t, const int64_t *idx) {
    int64_t off = 0;
    for (int i = 0; i < t->ndim; i++) off += idx[i] * lyco_stride(t, i);
    return (char *)t->data + t->byte_offset + off * (int64_t)elem_size(t);
}

void *lyco_elem_at(const DLTensor *t, int64_t linear) {
    int64_t off = 0;
    for (int i = t->ndim - 1; i >= 0; i--) {
        int64_t n = t->shape[i];
        if (n > 0) {
            off += (linear % n) * lyco_stride(t, i);
            linear /= n;
        }
    }
    return (char *)t->data + t->byte_offset + off * (int64_t)elem_size(t);
}

bool lyco_is_compact(const DLTensor *t) {
    if (!t->strides) return true;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

/* Byte span [lo, hi) covered by a view (conservative: extremes of the strided box). */
static void byte_span(const DLTensor *t, uintptr_t *lo, uintptr_t *hi) {
    int64_t mn = 0, mx = 0;
    if (lyco_numel(t) == 0) {
        *lo = *hi = (uintptr_t)t->data + t->byte_offset;
        return;
    }
    for (int i = 0; i < t->ndim; i++) {
        int64_t e = (t->shape[i] - 1) * lyco_stride(t, i);
        if (e < 0) mn += e; else mx += e;
    }
    uintptr_t base = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    *lo = base + (uintptr_t)(mn * (int64_t)elem_size(t));
    *hi = base + (uintptr_t)((mx + 1) * (int64_t)elem_size(t));
}

bool lyco_tensors_overlap(const DLTensor *a, const DLTensor *b) {
    if (!a || !b || !a->data || !b->data) return false;
    /* pinned host memory (kDLCUDAHost) shares the CPU's address space */
    bool ha = a->device.device_type == kDLCPU || a->device.device_type == kDLCUDAHost;
    bool hb = b->device.device_type == kDLCPU || b->device.device_type == kDLCUDAHost;
    if (ha != hb) return false;
    if (!ha && (a->device.device_type != b->device.device_type || a->device.device_id != b->device.device_id))
        return false;
    uintptr_t alo, ahi, blo, bhi;
    byte_span(a, &alo, &ahi);
    byte_span(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

bool lyco_tensors_same_view(const DLTensor *a, const DLTensor *b) {
    if ((char *)a->data + a->byte_offset != (char *)b->data + b->byte_offset) return false;
    if (a->ndim != b->ndim || a->dtype.code != b->dtype.code || a->dtype.bits != b->dtype.bits)
        return false;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] != b->shape[i]) return false;
        if (a->shape[i] > 1 && lyco_stride(a, i) != lyco_stride(b, i)) return false;
    }
    return true;
}

void lyco_shape_str(const DLTensor *t, char *buf, size_t n) {
    size_t used = 0;
    used += (size_t)snprintf(buf + used, n - used, "[");
    for (int i = 0; i < t->ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

void lyco_gather_f64(const DLTensor *t, lyco_dtype through, double *dst) {
    lyco_dtype d = lyco_dtype_of(t);
    int64_t n = lyco_numel(t);
    for (int64_t i = 0; i < n; i++) dst[i] = (double)lyco_round_f32(lyco_load_f32(lyco_elem_at(t, i), d), through);
}

void lyco_gather_f32(const DLTensor *t, lyco_dtype through, float *dst) {
    lyco_dtype d = lyco_dtype_of(t);
    int64_t n = lyco_numel(t);
    for (int64_t i = 0; i < n; i++) dst[i] = lyco_round_f32(lyco_load_f32(lyco_elem_at(t, i), d), through);
}

void lyco_scatter_f64(DLTensor *t, const double *src) {
    lyco_dtype d = lyco_dtype_of(t);
    int64_t n = lyco_numel(t);
    for (int64_t i = 0; i < n; i++) lyco_store_f64(lyco_elem_at(t, i), d, src[i]);
}

void lyco_scatter_f32(DLTensor *t, const float *src) {
    lyco_dtype d = lyco_dtype_of(t);
    int64_t n = lyco_numel(t);
    for (int64_t i = 0; i < n; i++) lyco_store_f32(lyco_elem_at(t, i), d, src[i]);
}
