/*
 * view.c — rows of any DLTensor to and from fp32, with conversions in registers.
 *
 * The conversions are bit-identical to src/core/convert.c: RNE, NaN kept quiet with its sign (and
 * the payload bits that fit), subnormals kept, overflow to ±Inf at 65520 (fp16). The loops over
 * contiguous runs (cvt_kern.h) are compiled twice under the shared ISA dispatch (isa.h): 8-lane
 * AVX2/F16C intrinsics for x86-64-v3 CPUs, and the branch-free scalar code below (selects, so it
 * vectorises) for the portable build and the tails. 16-bit data may be unaligned. Non-compact
 * layouts take a per-element path.
 */
#include <stdlib.h>

#include "cpu.h"
#include "isa.h"

static inline float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float bf16_f32(uint16_t h) { return bits_f((uint32_t)h << 16); }

static inline uint16_t f32_bf16(float f) {
    uint32_t u = f_bits(f);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? nan : r);
}

static inline float f16_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t normal = (em << 13) + 0x38000000u;             /* rebias 15 → 127 */
    uint32_t infnan = (em << 13) | 0x7f800000u;
    float sub = (float)em * 0x1p-24f;                        /* exact: em < 2^10 */
    uint32_t r = em >= 0x7c00u ? infnan : normal;
    return em < 0x400u ? bits_f(f_bits(sub) | sign) : bits_f(r | sign);
}

static inline uint16_t f32_f16(float f) {
    uint32_t u = f_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    /* normal range: rebias and round the 13 dropped bits to nearest even */
    uint32_t n = a - 0x38000000u;
    uint32_t normal = (n + 0xfffu + ((n >> 13) & 1u)) >> 13;
    /* subnormal range: let the FPU round (|f| + 0.5 aligns the binary point at 2^-24; RNE) */
    float s = bits_f(a) + 0.5f;
    uint32_t sub = f_bits(s) - 0x3f000000u;
    uint32_t r = a < 0x38800000u ? sub : normal;
    r = a >= 0x477ff000u ? 0x7c00u : r;
    r = a > 0x7f800000u ? (0x7e00u | ((a >> 13) & 0x3ffu)) : r;
    return (uint16_t)(r | sign);
}

/* ---- the conversion loops, once per ISA (isa.h, cvt_kern.h) ---- */
#define ISA_EACH_HEADER "cvt_kern.h"
#define ISA_EACH_BASE 1
#include "isa_each.h"

void cpu_round(float *v, int64_t n, lyco_dtype T) {
#ifdef CPU_V3
    if (cpu_have_v3()) {
        round_v3(v, n, T);
        return;
    }
#endif
    round_base(v, n, T);
}

void cpu_cvt_in(const void *src, lyco_dtype sd, lyco_dtype through, float *dst, int64_t n) {
    if (n <= 0) return;
#ifdef CPU_V3
    if (cpu_have_v3()) {
        cvt_in_v3(src, sd, through, dst, n);
        return;
    }
#endif
    cvt_in_base(src, sd, through, dst, n);
}

void cpu_cvt_out(const float *src, void *dst, lyco_dtype dd, int64_t n) {
    if (n <= 0) return;
#ifdef CPU_V3
    if (cpu_have_v3()) {
        cvt_out_v3(src, dst, dd, n);
        return;
    }
#endif
    cvt_out_base(src, dst, dd, n);
}

void cpu_view_init(cpu_view *v, const DLTensor *t, int split) {
    memset(v, 0, sizeof *v);
    v->t = t;
    v->dt = lyco_dtype_of(t);
    v->es = lyco_dtype_size(v->dt);
    v->split = split;
    v->rows = 1;
    v->cols = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (i < split) v->rows *= t->shape[i];
        else v->cols *= t->shape[i];
    }
    v->base = (char *)t->data + t->byte_offset;
    /* fast: the column dims are compact and the row dims collapse to one stride */
    bool ok = true;
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= split; i--) {
        if (t->shape[i] != 1 && lyco_stride(t, i) != expect) ok = false;
        expect *= t->shape[i];
    }
    int64_t rs = -1;
    for (int i = split - 1; i >= 0 && ok; i--) {
        if (t->shape[i] == 1) continue;
        int64_t s = lyco_stride(t, i);
        if (rs < 0) { rs = s; expect = s * t->shape[i]; }
        else if (s != expect) ok = false;
        else expect = s * t->shape[i];
    }
    v->fast = ok;
    v->rs = rs < 0 ? v->cols : rs;
}

/* element offset (in elements) of (r, c) for the slow path */
static int64_t offset_of(const cpu_view *v, int64_t r, int64_t c) {
    const DLTensor *t = v->t;
    int64_t off = 0;
    for (int i = t->ndim - 1; i >= 0; i--) {
        int64_t *idx = i < v->split ? &r : &c;
        int64_t n = t->shape[i];
        if (n == 0) return 0;
        off += (*idx % n) * lyco_stride(t, i);
        *idx /= n;
    }
    return off;
}

void cpu_load(const cpu_view *v, int64_t r, int64_t c0, int64_t n, lyco_dtype through, float *dst) {
    if (n <= 0) return;
    if (v->fast) {
        cpu_cvt_in(v->base + (r * v->rs + c0) * (int64_t)v->es, v->dt, through, dst, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float f = lyco_load_f32(v->base + offset_of(v, r, c0 + i) * (int64_t)v->es, v->dt);
        dst[i] = lyco_round_f32(f, through);
    }
}

void cpu_store(const cpu_view *v, int64_t r, int64_t c0, int64_t n, const float *src) {
    if (n <= 0) return;
    if (v->fast) {
        cpu_cvt_out(src, v->base + (r * v->rs + c0) * (int64_t)v->es, v->dt, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) lyco_store_f32(v->base + offset_of(v, r, c0 + i) * (int64_t)v->es, v->dt, src[i]);
}

/* A whole tensor as one run when it is compact (one conversion call), else row by row. */
static bool compact(const cpu_view *v) { return v->fast && (v->rows <= 1 || v->rs == v->cols); }

void cpu_load_all(const DLTensor *t, lyco_dtype through, float *dst) {
    cpu_view v;
    cpu_view_init(&v, t, t->ndim > 0 ? 1 : 0);
    if (compact(&v)) {
        cpu_load(&v, 0, 0, v.rows * v.cols, through, dst);
        return;
    }
    for (int64_t r = 0; r < v.rows; r++) cpu_load(&v, r, 0, v.cols, through, dst + r * v.cols);
}

void cpu_store_all(DLTensor *t, const float *src) {
    cpu_view v;
    cpu_view_init(&v, t, t->ndim > 0 ? 1 : 0);
    if (compact(&v)) {
        cpu_store(&v, 0, 0, v.rows * v.cols, src);
        return;
    }
    for (int64_t r = 0; r < v.rows; r++) cpu_store(&v, r, 0, v.cols, src + r * v.cols);
}

void cpu_zero_all(DLTensor *t) {
    for (int64_t i = 0; i < lyco_numel(t); i++) lyco_store_f32(lyco_elem_at(t, i), lyco_dtype_of(t), 0.0f);
}

void cpu_zero_rows(const cpu_view *v, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        if (v->fast) {
            memset(v->base + r * v->rs * (int64_t)v->es, 0, (size_t)v->cols * v->es);
            continue;
        }
        for (int64_t i = 0; i < v->cols; i++) lyco_store_f32(v->base + offset_of(v, r, i) * (int64_t)v->es, v->dt, 0.0f);
    }
}
