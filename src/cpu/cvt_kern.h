/*
 * cvt_kern.h — the conversion loops of view.c (contiguous runs, fp32 <-> fp16/bf16/fp32, and the
 * in-place rounding cpu_round), written once and included by view.c once per ISA (isa.h):
 * KN(name) = name_v3 under `#pragma GCC target("arch=x86-64-v3")` with CK_V3 defined, name_base
 * for the portable build. Not a public header.
 *
 * Results are bit-identical to src/core/convert.c on every input (tests/c/test_cvt_paths.c; the
 * v3 lanes were also compared with convert.c on all 2^32 fp32 and all 2^16 16-bit patterns):
 *   bf16 -> fp32  the 16-bit shift (vpmovzxwd + vpslld)
 *   fp16 -> fp32  F16C vcvtph2ps, then the one difference put back: vcvtph2ps quiets a signalling
 *                 NaN (sets fp32 bit 22), convert.c keeps it signalling — lanes whose fp16
 *                 exponent is all ones, mantissa non-zero and quiet bit (0x200) clear get bit 22
 *                 cleared again
 *   fp32 -> bf16  integer RNE (u + 0x7fff + lsb) >> 16, NaN -> (u >> 16) | 0x40, selected by a
 *                 compare, packed to 16 bits (vpackusdw + vpermq)
 *   fp32 -> fp16  F16C vcvtps2ph with the immediate round-to-nearest-even (MXCSR not consulted):
 *                 RNE, subnormals kept, ≥ 65520 to ±Inf, NaN quieted with the top 10 payload bits
 *                 — exactly convert.c (checked on all 2^32 patterns)
 * The 8-lane helpers are cvt_lanes.h's (shared with stream_kern.h).
 * 8 lanes per step (unrolled to 16 where the loop is a plain stream), the n mod 8 tail through the
 * scalar helpers of view.c (bf16_f32, f32_bf16, f16_f32, f32_f16), which must be declared before
 * the inclusion. 16-bit data may be unaligned (loadu/storeu, memcpy in the tails); the portable
 * build is the scalar code in 256-element chunks (memcpy'd through a stack buffer, vectorisable).
 * No extra memory beyond that 512-byte buffer; no state.
 */

#ifdef CK_V3
#include "cvt_lanes.h"
#endif

/* v[i] = RN_T(v[i]) in place (T = fp32: nothing) */
static void KN(round)(float *v, int64_t n, lyco_dtype T) {
    if (T != LYCO_BF16 && T != LYCO_F16) return;
    int64_t i = 0;
#ifdef CK_V3
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(v + i, KN(rnd8)(_mm256_loadu_ps(v + i), T));
#endif
    if (T == LYCO_BF16)
        for (; i < n; i++) v[i] = bf16_f32(f32_bf16(v[i]));
    else
        for (; i < n; i++) v[i] = f16_f32(f32_f16(v[i]));
}

/* dst[i] = f32(src[i]) rounded through `through` (fp32 sources only: a 16-bit source is exact in
   fp32 and, the policy never mixing fp16 with bf16, `through` is fp32 or the source dtype then) */
static void KN(cvt_in)(const void *src, lyco_dtype sd, lyco_dtype through, float *dst, int64_t n) {
    if (sd == LYCO_F32) {
        memcpy(dst, src, (size_t)n * 4);
        if (through != LYCO_F32) KN(round)(dst, n, through);
        return;
    }
    const char *s = src;
    int64_t i = 0;
#ifdef CK_V3
    if (sd == LYCO_BF16) {
        for (; i + 16 <= n; i += 16) {
            _mm256_storeu_ps(dst + i, KN(ld_bf16)(s + 2 * i));
            _mm256_storeu_ps(dst + i + 8, KN(ld_bf16)(s + 2 * i + 16));
        }
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, KN(ld_bf16)(s + 2 * i));
    } else {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, KN(ld_f16)(s + 2 * i));
    }
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = sd == LYCO_BF16 ? bf16_f32(h) : f16_f32(h);
    }
#else
    uint16_t h[256];
    for (; i < n; i += 256) {
        int64_t m = n - i < 256 ? n - i : 256;
        memcpy(h, s + 2 * i, (size_t)m * 2);
        if (sd == LYCO_BF16)
            for (int64_t k = 0; k < m; k++) dst[i + k] = bf16_f32(h[k]);
        else
            for (int64_t k = 0; k < m; k++) dst[i + k] = f16_f32(h[k]);
    }
#endif
}

/* dst[i] = RN_dd(src[i]) stored as dd */
static void KN(cvt_out)(const float *src, void *dst, lyco_dtype dd, int64_t n) {
    if (dd == LYCO_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    char *d = dst;
    int64_t i = 0;
#ifdef CK_V3
    if (dd == LYCO_BF16) {
        for (; i + 16 <= n; i += 16) {
            KN(st_bf16)(d + 2 * i, _mm256_loadu_ps(src + i));
            KN(st_bf16)(d + 2 * i + 16, _mm256_loadu_ps(src + i + 8));
        }
        for (; i + 8 <= n; i += 8) KN(st_bf16)(d + 2 * i, _mm256_loadu_ps(src + i));
    } else {
        for (; i + 8 <= n; i += 8) KN(st_f16)(d + 2 * i, _mm256_loadu_ps(src + i));
    }
    for (; i < n; i++) {
        uint16_t h = dd == LYCO_BF16 ? f32_bf16(src[i]) : f32_f16(src[i]);
        memcpy(d + 2 * i, &h, 2);
    }
#else
    uint16_t h[256];
    for (; i < n; i += 256) {
        int64_t m = n - i < 256 ? n - i : 256;
        if (dd == LYCO_BF16)
            for (int64_t k = 0; k < m; k++) h[k] = f32_bf16(src[i + k]);
        else
            for (int64_t k = 0; k < m; k++) h[k] = f32_f16(src[i + k]);
        memcpy(d + 2 * i, h, (size_t)m * 2);
    }
#endif
}
