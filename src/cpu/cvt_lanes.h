/*
 * cvt_lanes.h — fp32 <-> bf16/fp16 conversions of one vector register, bit-identical to
 * src/core/convert.c (the rules are cvt_kern.h's opening comment): 8 lanes (__m256) when CK_V3 is
 * defined, 16 lanes (__m512, names ending in 16) when CK_V4 is. Included by the ISA copies of
 * cvt_kern.h (view.c) and stream_kern.h (stream.c) under their `#pragma GCC target`, with
 * KN(name) naming the copy, and by rot_kern.h (rot.c). Not a public header; no state, no memory.
 */

#ifndef CK_AI
#define CK_AI static inline __attribute__((always_inline))
#endif

/* ---- 8 lanes (x86-64-v3: AVX2 + F16C) ---- */
#ifdef CK_V3
CK_AI __m256 KN(ld_bf16)(const void *p) {
    __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

CK_AI __m256 KN(ld_f16)(const void *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    __m256 f = _mm256_cvtph_ps(h);
    __m256i em = _mm256_and_si256(_mm256_cvtepu16_epi32(h), _mm256_set1_epi32(0x7fff));
    __m256i nan = _mm256_cmpgt_epi32(em, _mm256_set1_epi32(0x7c00));
    __m256i quiet = _mm256_cmpeq_epi32(_mm256_and_si256(em, _mm256_set1_epi32(0x200)), _mm256_set1_epi32(0x200));
    __m256i fix = _mm256_and_si256(_mm256_andnot_si256(quiet, nan), _mm256_set1_epi32(0x00400000));
    return _mm256_castsi256_ps(_mm256_andnot_si256(fix, _mm256_castps_si256(f)));
}

/* the bf16 pattern of each lane, in the low 16 bits of a 32-bit lane */
CK_AI __m256i KN(bf16_bits)(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), _mm256_and_si256(hi, _mm256_set1_epi32(1))), 16);
    __m256i nanv = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(r, nanv, isnan);
}

CK_AI void KN(st_bf16)(void *p, __m256 v) {
    __m256i r = KN(bf16_bits)(v);
    __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);  /* r0..r3 | r4..r7 */
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(pk));
}

CK_AI void KN(st_f16)(void *p, __m256 v) { _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }

/* RN_T(v) as fp32 (T = bf16 or fp16); a narrowed NaN is quiet, so widening it back needs no fix */
CK_AI __m256 KN(rnd8)(__m256 v, lyco_dtype T) {
    if (T == LYCO_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(KN(bf16_bits)(v), 16));
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
#endif

#ifdef CK_V4
/* ---- 16 lanes (x86-64-v4: AVX-512 F/BW/DQ/VL): the same operations, compares into masks ---- */
/* 16 bf16 / fp16 patterns (a register, so that masked loads share the conversion) as fp32 */
CK_AI __m512 KN(bf16_widen16)(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

/* vcvtph2ps quiets a signalling NaN; convert.c keeps it: bit 22 cleared again on those lanes */
CK_AI __m512 KN(f16_widen16)(__m256i h) {
    __m512i f = _mm512_castps_si512(_mm512_cvtph_ps(h));
    __m512i em = _mm512_and_si512(_mm512_cvtepu16_epi32(h), _mm512_set1_epi32(0x7fff));
    __mmask16 nan = _mm512_cmpgt_epi32_mask(em, _mm512_set1_epi32(0x7c00));
    __mmask16 quiet = _mm512_test_epi32_mask(em, _mm512_set1_epi32(0x200));
    return _mm512_castsi512_ps(_mm512_mask_andnot_epi32(f, nan & (__mmask16)~quiet, _mm512_set1_epi32(0x00400000), f));
}

/* the bf16 pattern of each lane in the low 16 bits of a 32-bit lane: integer RNE, NaN quieted */
CK_AI __m512i KN(bf16_bits16)(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
    __mmask16 isnan = _mm512_fpclass_ps_mask(v, 0x81);   /* quiet (0x01) or signalling (0x80) NaN */
    return _mm512_mask_or_epi32(r, isnan, hi, _mm512_set1_epi32(0x40));
}

/* the 16 values as bf16 / fp16 patterns (vcvtps2ph with the immediate RNE, as the 8-lane form) */
CK_AI __m256i KN(bf16_pack16)(__m512 v) { return _mm512_cvtepi32_epi16(KN(bf16_bits16)(v)); }
CK_AI __m256i KN(f16_pack16)(__m512 v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }

/* RN_T(v) as fp32 (T = bf16 or fp16) */
CK_AI __m512 KN(rnd16)(__m512 v, lyco_dtype T) {
    if (T == LYCO_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(KN(bf16_bits16)(v), 16));
    return _mm512_cvtph_ps(KN(f16_pack16)(v));
}
#endif

/* ---- one vector of the copy's width (CK_N lanes: 16 in the v4 copy, 8 in the v3 copy; CK_VEC its
   type) of any dtype, whole or the first m lanes: the loads and stores of stream_kern.h and
   rot_kern.h ---- */
#if defined(CK_V4) || defined(CK_V3)
#undef CK_N
#undef CK_VEC
#ifdef CK_V4
#define CK_N 16
#define CK_VEC __m512
#else
#define CK_N 8
#define CK_VEC __m256
#endif

CK_AI int64_t KN(vsize)(lyco_dtype dt) { return dt == LYCO_F32 ? 4 : 2; }

/* The first m ≤ CK_N values of `dt` at p as fp32 (lanes past m zero), rounded through T (fp32
   sources only: a 16-bit value is exact in fp32 and the policy never mixes fp16 with bf16);
   m = CK_N is the plain load. */
CK_AI CK_VEC KN(vin)(const char *p, lyco_dtype dt, lyco_dtype T, int64_t m) {
#ifdef CK_V4
    __mmask16 k = (__mmask16)((1u << m) - 1u);
    CK_VEC v;
    if (dt != LYCO_F32) {
        __m256i h = m == CK_N ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(k, p);
        return dt == LYCO_BF16 ? KN(bf16_widen16)(h) : KN(f16_widen16)(h);
    }
    v = m == CK_N ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
    return T == LYCO_F32 ? v : KN(rnd16)(v, T);
#else
    _Alignas(32) char t[CK_N * 4] = {0};
    if (m < CK_N) p = memcpy(t, p, (size_t)(m * KN(vsize)(dt)));
    if (dt == LYCO_BF16) return KN(ld_bf16)(p);
    if (dt == LYCO_F16) return KN(ld_f16)(p);
    CK_VEC v = _mm256_loadu_ps((const float *)p);
    return T == LYCO_F32 ? v : KN(rnd8)(v, T);
#endif
}

/* the first m ≤ CK_N lanes of v stored at p as `dt` */
CK_AI void KN(vout)(char *p, lyco_dtype dt, CK_VEC v, int64_t m) {
#ifdef CK_V4
    __mmask16 k = (__mmask16)((1u << m) - 1u);
    if (dt == LYCO_F32) {
        if (m == CK_N) _mm512_storeu_ps(p, v);
        else _mm512_mask_storeu_ps(p, k, v);
        return;
    }
    __m256i h = dt == LYCO_BF16 ? KN(bf16_pack16)(v) : KN(f16_pack16)(v);
    if (m == CK_N) _mm256_storeu_si256((__m256i *)p, h);
    else _mm256_mask_storeu_epi16(p, k, h);
#else
    _Alignas(32) char t[CK_N * 4];
    char *q = m == CK_N ? p : t;
    if (dt == LYCO_BF16) KN(st_bf16)(q, v);
    else if (dt == LYCO_F16) KN(st_f16)(q, v);
    else _mm256_storeu_ps((float *)q, v);
    if (m < CK_N) memcpy(p, t, (size_t)(m * KN(vsize)(dt)));
#endif
}
#endif
