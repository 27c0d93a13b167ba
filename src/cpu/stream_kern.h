/*
 * stream_kern.h — one segment of a streaming merge row (stream.c), in registers: for each element
 *     w = RN_T(W[j])   x = w, RN_T(src[j]), vec[j] or one value   δ = x·s (s: none, one value or
 *     s[j])   o = w + ms·δ | w − ms·δ | ms·δ | 0   (ms = m·σs)   out[j] = RN_out(o)
 * loaded, computed and stored one vector at a time (W, the source and the output are read or
 * written once; nothing is staged in memory). Included by stream.c once per ISA (isa.h): KN(name)
 * = name_v4 under `#pragma GCC target("arch=x86-64-v4")` with CK_V4 (16 lanes), name_v3 under
 * "arch=x86-64-v3" with CK_V3 (8 lanes), both with fp-contract off — a product and a sum stay
 * two roundings, so every copy gives the portable path's bits. The conversions are cvt_lanes.h's
 * (bit-identical to src/core/convert.c). The n mod lanes tail goes through zero-padded stack
 * vectors (no scalar conversion code). seg_t (stream.c) must be declared before the inclusion.
 * Not a public header. No memory beyond three stack vectors.
 */

#include "cvt_lanes.h"

#ifdef CK_V4
#define SK_N 16
#define SK_V __m512
#define SK_LDPS(p) _mm512_loadu_ps(p)
#define SK_STPS(p, v) _mm512_storeu_ps((float *)(p), v)
#define SK_SET1(x) _mm512_set1_ps(x)
#define SK_ZERO() _mm512_setzero_ps()
#define SK_MUL(a, b) _mm512_mul_ps(a, b)
#define SK_ADD(a, b) _mm512_add_ps(a, b)
#define SK_SUB(a, b) _mm512_sub_ps(a, b)
#define SK_LD_BF16(p) KN(ld_bf16_16)(p)
#define SK_LD_F16(p) KN(ld_f16_16)(p)
#define SK_RND(v, T) KN(rnd16)(v, T)
#define SK_ST_BF16(p, v) _mm256_storeu_si256((__m256i *)(p), KN(bf16_pack16)(v))
#define SK_ST_F16(p, v) _mm256_storeu_si256((__m256i *)(p), KN(f16_pack16)(v))
#else
#define SK_N 8
#define SK_V __m256
#define SK_LDPS(p) _mm256_loadu_ps(p)
#define SK_STPS(p, v) _mm256_storeu_ps((float *)(p), v)
#define SK_SET1(x) _mm256_set1_ps(x)
#define SK_ZERO() _mm256_setzero_ps()
#define SK_MUL(a, b) _mm256_mul_ps(a, b)
#define SK_ADD(a, b) _mm256_add_ps(a, b)
#define SK_SUB(a, b) _mm256_sub_ps(a, b)
#define SK_LD_BF16(p) KN(ld_bf16)(p)
#define SK_LD_F16(p) KN(ld_f16)(p)
#define SK_RND(v, T) KN(rnd8)(v, T)
#define SK_ST_BF16(p, v) KN(st_bf16)(p, v)
#define SK_ST_F16(p, v) KN(st_f16)(p, v)
#endif

/* one vector of `dt` values at p as fp32, rounded through T (fp32 sources only: a 16-bit value is
   exact in fp32 and the policy never mixes fp16 with bf16) */
CK_AI SK_V KN(sk_in)(const char *p, lyco_dtype dt, lyco_dtype T) {
    if (dt == LYCO_BF16) return SK_LD_BF16(p);
    if (dt == LYCO_F16) return SK_LD_F16(p);
    SK_V v = SK_LDPS((const float *)p);
    return T == LYCO_F32 ? v : SK_RND(v, T);
}

CK_AI void KN(sk_out)(char *p, lyco_dtype dt, SK_V v) {
    if (dt == LYCO_BF16) SK_ST_BF16(p, v);
    else if (dt == LYCO_F16) SK_ST_F16(p, v);
    else SK_STPS(p, v);
}

/* elements [j, j + SK_N) of the segment */
CK_AI void KN(sk_step)(const seg_t *g, int64_t j) {
    SK_V w = g->w ? KN(sk_in)(g->w + j * g->wes, g->wdt, g->T) : SK_ZERO();
    SK_V x = g->x_is_w ? w : g->x ? KN(sk_in)(g->x + j * g->xes, g->xdt, g->xT) : SK_SET1(g->xb);
    SK_V d = g->s_kind == SEG_S_NONE ? x : SK_MUL(x, g->s_kind == SEG_S_ONE ? SK_SET1(g->sb) : SK_LDPS(g->sv + j));
    SK_V o;
    switch (g->op) {
    case SEG_WEIGHT: o = SK_ADD(w, SK_MUL(SK_SET1(g->ms), d)); break;
    case SEG_UNMERGE: o = SK_SUB(w, SK_MUL(SK_SET1(g->ms), d)); break;
    case SEG_DELTA: o = SK_MUL(SK_SET1(g->ms), d); break;
    default: o = SK_ZERO(); break;
    }
    KN(sk_out)(g->out + j * g->oes, g->odt, o);
}

static void KN(seg)(const seg_t *g, int64_t n) {
    int64_t j = 0;
    for (; j + SK_N <= n; j += SK_N) KN(sk_step)(g, j);
    if (j == n) return;
    /* the tail: the operands copied into zeroed vectors, one step, the live lanes copied out */
    _Alignas(64) char wb[SK_N * 4] = {0}, xb[SK_N * 4] = {0}, ob[SK_N * 4];
    _Alignas(64) float sb[SK_N] = {0};
    int64_t m = n - j;
    seg_t t = *g;
    if (g->w) t.w = memcpy(wb, g->w + j * g->wes, (size_t)(m * g->wes));
    if (g->x) t.x = memcpy(xb, g->x + j * g->xes, (size_t)(m * g->xes));
    if (g->s_kind == SEG_S_LANES) t.sv = memcpy(sb, g->sv + j, (size_t)m * sizeof(float));
    t.out = ob;
    KN(sk_step)(&t, 0);
    memcpy(g->out + j * g->oes, ob, (size_t)(m * g->oes));
}

#undef SK_N
#undef SK_V
#undef SK_LDPS
#undef SK_STPS
#undef SK_SET1
#undef SK_ZERO
#undef SK_MUL
#undef SK_ADD
#undef SK_SUB
#undef SK_LD_BF16
#undef SK_LD_F16
#undef SK_RND
#undef SK_ST_BF16
#undef SK_ST_F16
