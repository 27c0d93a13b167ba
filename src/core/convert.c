/*
 * convert.c — fp32 <-> fp16/bf16 conversions (NUMERICS.md §3.4–3.5) and rounding of fp64 values
 * directly to a storage dtype (no double rounding through fp32, NUMERICS.md §2.3).
 *
 * All conversions are integer code on the bit patterns: round to nearest even, NaN kept quiet
 * with its sign, subnormals kept (no FTZ/DAZ), independent of the FPU's modes.
 */
#include <math.h>
#include <string.h>

#include "core.h"

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t lyco_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

uint16_t lyco_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);                      /* inf */
    if (a >= 0x38800000u) {                                                         /* normal */
        a -= 0x38000000u;
        a += 0xfffu + ((a >> 13) & 1u);
        return (uint16_t)(sign | (a >> 13));
    }
    if (a < 0x33000000u) return sign; /* below 2^-25 (and the 2^-25 tie) → ±0 */
    /* subnormal: 24-bit significand shifted right by 126 − exp with round/sticky RNE */
    {
        uint32_t exp = a >> 23;
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp; /* 14..24 */
        uint32_t half = 1u << (shift - 1);
        uint32_t rest = mant & ((1u << shift) - 1u);
        uint32_t q = mant >> shift;
        if (rest > half || (rest == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
}

float lyco_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

float lyco_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1fu) return bits_f32(sign | 0x7f800000u | (mant << 13)); /* inf / NaN */
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        /* subnormal: normalise */
        int e = -1;
        do { mant <<= 1; e++; } while (!(mant & 0x400u));
        mant &= 0x3ffu;
        return bits_f32(sign | ((uint32_t)(112 - e) << 23) | (mant << 13));
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

int lyco_dtype_precision(lyco_dtype d) { return d == LYCO_F16 ? 11 : d == LYCO_BF16 ? 8 : 24; }
int lyco_dtype_emin(lyco_dtype d) { return d == LYCO_F16 ? -14 : -126; }
double lyco_dtype_max(lyco_dtype d) {
    return d == LYCO_F16 ? 65504.0 : d == LYCO_BF16 ? 0x1.fep127 : (double)0x1.fffffep127f;
}

/* RN_T(v) computed in fp64: scale by the ulp (a power of two, exact), rint (RNE), scale back. */
double lyco_round_f64(double v, lyco_dtype d) {
    if (isnan(v) || isinf(v) || v == 0.0) return v;
    int ex;
    frexp(v, &ex);                      /* |v| in [2^(ex-1), 2^ex) */
    int e = ex - 1;
    int emin = lyco_dtype_emin(d);
    int q = (e > emin ? e : emin) - lyco_dtype_precision(d) + 1;
    double r = ldexp(rint(ldexp(v, -q)), q);
    if (fabs(r) > lyco_dtype_max(d)) return copysign(INFINITY, v);
    return r;
}

float lyco_round_f32(float v, lyco_dtype d) {
    switch (d) {
    case LYCO_F16: return lyco_f16_to_f32(lyco_f32_to_f16(v));
    case LYCO_BF16: return lyco_bf16_to_f32(lyco_f32_to_bf16(v));
    default: return v;
    }
}

double lyco_ulp(double r, lyco_dtype d) {
    int p = lyco_dtype_precision(d), emin = lyco_dtype_emin(d);
    if (r == 0.0 || !isfinite(r)) return ldexp(1.0, emin - p + 1);
    int ex;
    frexp(r, &ex);
    int e = ex - 1;
    return ldexp(1.0, (e > emin ? e : emin) - p + 1);
}

size_t lyco_dtype_size(lyco_dtype d) { return d == LYCO_F32 ? 4 : 2; }

float lyco_load_f32(const void *p, lyco_dtype d) {
    uint16_t h;
    float f;
    switch (d) {
    case LYCO_F16: memcpy(&h, p, 2); return lyco_f16_to_f32(h);
    case LYCO_BF16: memcpy(&h, p, 2); return lyco_bf16_to_f32(h);
    default: memcpy(&f, p, 4); return f;
    }
}

void lyco_store_f32(void *p, lyco_dtype d, float v) {
    uint16_t h;
    switch (d) {
    case LYCO_F16: h = lyco_f32_to_f16(v); memcpy(p, &h, 2); break;
    case LYCO_BF16: h = lyco_f32_to_bf16(v); memcpy(p, &h, 2); break;
    default: memcpy(p, &v, 4); break;
    }
}

void lyco_store_f64(void *p, lyco_dtype d, double v) {
    if (isnan(v)) { lyco_store_f32(p, d, (float)v); return; }
    /* the rounded value is exactly representable in T, so the narrowing below is exact */
    lyco_store_f32(p, d, (float)lyco_round_f64(v, d));
}
