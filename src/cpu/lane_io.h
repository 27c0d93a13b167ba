/*
 * lane_io.h — one vector of any storage dtype in and out of fp32 lanes, for the row kernels that
 * convert in registers (stream_kern.h, ia3_kern.h): SK_V is __m512 (16 lanes) with CK_V4, __m256
 * (8 lanes) with CK_V3; KN(sk_in) loads the first m ≤ SK_N values (lanes past m zero) rounded
 * through T, KN(sk_out) stores the first m lanes in a dtype, both through cvt_lanes.h's
 * conversions (bit-identical to src/core/convert.c); a partial vector through masked loads and
 * stores (v4) or a zero-padded stack vector (v3). Included after cvt_lanes.h under the includer's
 * `#pragma GCC target`, with KN(name) naming the copy; the includer #undefs the SK_ macros at its
 * end. Not a public header; no include guard (one inclusion per ISA copy); no memory.
 */

#ifdef CK_V4
#define SK_N 16
#define SK_V __m512
#define SK_SET1(x) _mm512_set1_ps(x)
#define SK_ZERO() _mm512_setzero_ps()
#define SK_MUL(a, b) _mm512_mul_ps(a, b)
#define SK_ADD(a, b) _mm512_add_ps(a, b)
#define SK_SUB(a, b) _mm512_sub_ps(a, b)
#else
#define SK_N 8
#define SK_V __m256
#define SK_SET1(x) _mm256_set1_ps(x)
#define SK_ZERO() _mm256_setzero_ps()
#define SK_MUL(a, b) _mm256_mul_ps(a, b)
#define SK_ADD(a, b) _mm256_add_ps(a, b)
#define SK_SUB(a, b) _mm256_sub_ps(a, b)
#endif

CK_AI int64_t KN(sk_size)(lyco_dtype dt) { return dt == LYCO_F32 ? 4 : 2; }

/* The first m ≤ SK_N values of `dt` at p as fp32 (lanes past m zero), rounded through T (fp32
   sources only: a 16-bit value is exact in fp32 and the policy never mixes fp16 with bf16);
   m = SK_N is the plain load. */
CK_AI SK_V KN(sk_in)(const char *p, lyco_dtype dt, lyco_dtype T, int64_t m) {
#ifdef CK_V4
    __mmask16 k = (__mmask16)((1u << m) - 1u);
    SK_V v;
    if (dt != LYCO_F32) {
        __m256i h = m == SK_N ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(k, p);
        return dt == LYCO_BF16 ? KN(bf16_widen16)(h) : KN(f16_widen16)(h);
    }
    v = m == SK_N ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
    return T == LYCO_F32 ? v : KN(rnd16)(v, T);
#else
    _Alignas(32) char t[SK_N * 4] = {0};
    if (m < SK_N) p = memcpy(t, p, (size_t)(m * KN(sk_size)(dt)));
    if (dt == LYCO_BF16) return KN(ld_bf16)(p);
    if (dt == LYCO_F16) return KN(ld_f16)(p);
    SK_V v = _mm256_loadu_ps((const float *)p);
    return T == LYCO_F32 ? v : KN(rnd8)(v, T);
#endif
}

/* the first m ≤ SK_N lanes of v stored at p as `dt` */
CK_AI void KN(sk_out)(char *p, lyco_dtype dt, SK_V v, int64_t m) {
#ifdef CK_V4
    __mmask16 k = (__mmask16)((1u << m) - 1u);
    if (dt == LYCO_F32) {
        if (m == SK_N) _mm512_storeu_ps(p, v);
        else _mm512_mask_storeu_ps(p, k, v);
        return;
    }
    __m256i h = dt == LYCO_BF16 ? KN(bf16_pack16)(v) : KN(f16_pack16)(v);
    if (m == SK_N) _mm256_storeu_si256((__m256i *)p, h);
    else _mm256_mask_storeu_epi16(p, k, h);
#else
    _Alignas(32) char t[SK_N * 4];
    char *q = m == SK_N ? p : t;
    if (dt == LYCO_BF16) KN(st_bf16)(q, v);
    else if (dt == LYCO_F16) KN(st_f16)(q, v);
    else _mm256_storeu_ps((float *)q, v);
    if (m < SK_N) memcpy(p, t, (size_t)(m * KN(sk_size)(dt)));
#endif
}
