/*
 * lane_io.h — the vector arithmetic of the row kernels that convert in registers (stream_kern.h,
 * ia3_kern.h, norm_kern.h), at the copy's width: SK_V is __m512 (SK_N = 16 lanes) with CK_V4,
 * __m256 (8 lanes) with CK_V3; SK_SET1 / SK_ZERO / SK_MUL / SK_ADD / SK_SUB as the intrinsics
 * (no FMA: the includers compile with fp-contract off, so a product and a sum stay two roundings).
 * Loads and stores of any dtype are cvt_lanes.h's KN(vin) / KN(vout) (whole vectors or the first
 * m lanes). Included after cvt_lanes.h under the includer's `#pragma GCC target`; the includer
 * includes lane_io_end.h (which #undefs the SK_ macros) at its end. Not a public header; no include guard; no memory.
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
