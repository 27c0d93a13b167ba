/*
 * eager_staged.c — the CUDA backend's fallback for a case it declines: the eager twin (src/eager/,
 * PyTorch's rounding chain, fp32 accumulation) run on host copies of the call's device tensors.
 * Results are identical to the eager backend on host tensors; the cost is two copies of every
 * operand's memory and a stream synchronisation, so the path report says "staged through host".
 * A GPU-resident eager twin (cuBLAS + elementwise kernels) would remove the copies; until it
 * exists this keeps every call answerable instead of failing.
 *
 * Exactness with aliased or interleaved views: every tensor of the call (adapter slots, inputs,
 * outputs, gradients) is turned into the device byte span it covers; overlapping spans are
 * merged into one region and each region is copied to ONE host buffer, so views that share
 * memory on the device (in-place out = W, y = y0, strided views interleaved in one allocation)
 * share it on the host too. After the eager twin has written its outputs, each region that holds
 * an output is copied back whole: its other bytes are the copies just read, so only the
 * outputs' elements change. Copies are ordered on the call's stream, which is synchronised
 * before the host reads and after the write-back.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda/backend.h"

enum { MAX_T = 2 * LYCO_SLOT_COUNT + 16 };

typedef struct {
    uintptr_t lo, hi;   /* device byte span [lo, hi) */
    char *host;         /* host copy of the span (malloc'd + pad) */
    void *alloc;
    bool dirty;         /* holds an output: copy back */
} region;

typedef struct {
    const DLTensor *dev;  /* the device tensor */
    DLTensor host;        /* its host mirror (shape/strides shared with dev) */
    uintptr_t lo, hi;
    int region;
    bool output;
} mirror;

typedef struct {
    mirror m[MAX_T];
    int n;
    region r[MAX_T];
    int nr;
} staged;

/* Registers t (device); returns its mirror index, or -1 for NULL/host tensors. */
static int add(staged *s, const DLTensor *t, bool output) {
    if (!t || t->device.device_type != kDLCUDA) return -1;
    for (int i = 0; i < s->n; i++)
        if (s->m[i].dev == t) {
            s->m[i].output |= output;
            return i;
        }
    mirror *m = &s->m[s->n];
    memset(m, 0, sizeof *m);
    m->dev = t;
    m->output = output;
    size_t es = lyco_dtype_size(lyco_dtype_of(t));
    int64_t mn = 0, mx = 0;
    bool empty = lyco_numel(t) == 0;
    for (int i = 0; i < t->ndim && !empty; i++) {
        int64_t e = (t->shape[i] - 1) * lyco_stride(t, i);
        if (e < 0) mn += e;
        else mx += e;
    }
    uintptr_t base = (uintptr_t)t->data + t->byte_offset;
    m->lo = base + (uintptr_t)(mn * (int64_t)es);
    m->hi = empty ? m->lo : base + (uintptr_t)((mx + 1) * (int64_t)es);
    return s->n++;
}

/* Merges overlapping spans into regions (each mirror's region index set). */
static void make_regions(staged *s) {
    s->nr = 0;
    for (int i = 0; i < s->n; i++) s->m[i].region = -1;
    for (int i = 0; i < s->n; i++) {
        if (s->m[i].region >= 0) continue;
        region *r = &s->r[s->nr];
        memset(r, 0, sizeof *r);
        r->lo = s->m[i].lo;
        r->hi = s->m[i].hi;
        s->m[i].region = s->nr;
        for (bool grew = true; grew;) {   /* absorb every span touching the region */
            grew = false;
            for (int j = 0; j < s->n; j++) {
                if (s->m[j].region >= 0 || s->m[j].hi <= r->lo || s->m[j].lo >= r->hi) continue;
                if (s->m[j].lo < r->lo) r->lo = s->m[j].lo;
                if (s->m[j].hi > r->hi) r->hi = s->m[j].hi;
                s->m[j].region = s->nr;
                grew = true;
            }
        }
        s->nr++;
    }
    for (int i = 0; i < s->n; i++)
        if (s->m[i].output) s->r[s->m[i].region].dirty = true;
}

static void release(staged *s) {
    for (int i = 0; i < s->nr; i++) free(s->r[i].alloc);
    s->nr = 0;
}

#define SCHECK(call)                                                                                                  \
    do {                                                                                                              \
        cudaError_t e_ = (call);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                      \
            release(s);                                                                                               \
            return lyco_fail(LYCO_ERR_BACKEND, "cuda eager fallback: %s failed: %s", #call, cudaGetErrorString(e_)); \
        }                                                                                                             \
    } while (0)

/* Copies every region to the host and points each mirror into its region's copy. */
static lyco_status to_host(staged *s, cudaStream_t st) {
    for (int i = 0; i < s->nr; i++) {
        region *r = &s->r[i];
        size_t bytes = (size_t)(r->hi - r->lo);
        /* same address modulo 64 as on the device, so alignment-dependent paths match */
        r->alloc = malloc(bytes + 128);
        if (!r->alloc) {
            release(s);
            return lyco_fail(LYCO_ERR_NOMEM, "cuda eager fallback: cannot allocate %zu bytes of host memory", bytes);
        }
        r->host = (char *)(((uintptr_t)r->alloc + 63) & ~(uintptr_t)63) + (r->lo % 64);
        if (bytes) SCHECK(cudaMemcpyAsync(r->host, (const void *)r->lo, bytes, cudaMemcpyDeviceToHost, st));
    }
    SCHECK(cudaStreamSynchronize(st));
    for (int i = 0; i < s->n; i++) {
        mirror *m = &s->m[i];
        const region *r = &s->r[m->region];
        m->host = *m->dev;
        m->host.data = r->host + ((uintptr_t)m->dev->data + m->dev->byte_offset - r->lo);
        m->host.byte_offset = 0;
        m->host.device.device_type = kDLCPU;
        m->host.device.device_id = 0;
    }
    return LYCO_OK;
}

static lyco_status to_device(staged *s, cudaStream_t st) {
    for (int i = 0; i < s->nr; i++) {
        region *r = &s->r[i];
        if (r->dirty && r->hi > r->lo) SCHECK(cudaMemcpyAsync((void *)r->lo, r->host, (size_t)(r->hi - r->lo), cudaMemcpyHostToDevice, st));
    }
    SCHECK(cudaStreamSynchronize(st));
    return LYCO_OK;
}

/* The host mirror of device tensor t (t itself when it is not a device tensor). */
static const DLTensor *h(const staged *s, const DLTensor *t) {
    for (int i = 0; t && i < s->n; i++)
        if (s->m[i].dev == t) return &s->m[i].host;
    return t;
}
static DLTensor *hw(staged *s, DLTensor *t) {
    for (int i = 0; t && i < s->n; i++)
        if (s->m[i].dev == t) return &s->m[i].host;
    return t;
}

lyco_status lyco_cuda_eager_staged(const lyco_call *c, void *stream) {
    cudaStream_t st = stream ? (cudaStream_t)stream : cudaStreamPerThread;
    staged *s = calloc(1, sizeof *s);
    if (!s) return lyco_fail(LYCO_ERR_NOMEM, "cuda eager fallback: out of memory");
    for (int k = 0; k < LYCO_SLOT_COUNT; k++) add(s, c->a->tensor[k], false);
    if (c->merge) {
        add(s, c->merge->weight, false);
        add(s, c->merge->bias, false);
    }
    if (c->bypass) {
        add(s, c->bypass->x, false);
        add(s, c->bypass->y0, false);
        add(s, c->bypass->weight, false);
    }
    add(s, c->d_out, false);
    add(s, c->d_out_bias, false);
    add(s, c->dy, false);
    add(s, c->out, true);
    add(s, c->out_bias, true);
    add(s, c->y, true);
    add(s, c->dx, true);
    add(s, c->dy0, true);
    if (c->g)
        for (int k = 0; k < LYCO_SLOT_COUNT; k++) add(s, c->g->grad[k], true);
    make_regions(s);
    lyco_status rc = to_host(s, st);
    if (rc) {
        free(s);
        return rc;
    }

    lyco_adapter a = *c->a;
    for (int k = 0; k < LYCO_SLOT_COUNT; k++) a.tensor[k] = h(s, c->a->tensor[k]);
    lyco_merge_args margs;
    lyco_bypass_args bargs;
    lyco_grads g;
    lyco_call hc = *c;
    hc.a = &a;
    if (c->merge) {
        margs = *c->merge;
        margs.weight = h(s, c->merge->weight);
        margs.bias = h(s, c->merge->bias);
        hc.merge = &margs;
    }
    if (c->bypass) {
        bargs = *c->bypass;
        bargs.x = h(s, c->bypass->x);
        bargs.y0 = h(s, c->bypass->y0);
        bargs.weight = h(s, c->bypass->weight);
        hc.bypass = &bargs;
    }
    if (c->g) {
        g = *c->g;
        for (int k = 0; k < LYCO_SLOT_COUNT; k++) g.grad[k] = hw(s, c->g->grad[k]);
        hc.g = &g;
    }
    hc.d_out = h(s, c->d_out);
    hc.d_out_bias = h(s, c->d_out_bias);
    hc.dy = h(s, c->dy);
    hc.out = hw(s, c->out);
    hc.out_bias = hw(s, c->out_bias);
    hc.y = hw(s, c->y);
    hc.dx = hw(s, c->dx);
    hc.dy0 = hw(s, c->dy0);

    rc = lyco_eager_run(&hc);
    if (rc == LYCO_OK) rc = to_device(s, st);
    release(s);
    free(s);
    return rc;
}
