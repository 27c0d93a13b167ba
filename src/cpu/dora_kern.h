/*
 * dora_kern.h — DoRA per output row in the merge driver (merge.c), in registers: for rows o of a
 * block, with δ the generator's ΔW̄ row (fp32, σs and m not applied) and w = RN_T(W[o, ·]),
 *
 *   KN(dora_sums)     V_j = w_j + σs·δ_j (float; stored over δ), Σ_j V_j² and (backward)
 *                     Σ_j g_j·V_j, g = RN_gT(G[o, ·]), in double over merge.c's 8 lanes (lane
 *                     j mod 8, each a chain in j order), then its fixed tree
 *                     ((0+1)+(2+3))+((4+5)+(6+7)) — for up to 4 rows at once, so that the four
 *                     rows' add chains overlap (one row's chains are latency-bound)
 *   KN(dora_fwd_row)  out_j = RN_out(V_j·coef)  or, DELTA, RN_out(V_j·coef − w_j)
 *   KN(dora_bwd_row)  x_j = g_j·coef − (t·V_j)/nrm, RN_T(x_j) unless G is exact, then ·σs
 *                     unless σs = 1: the fp32 rows ∂L/∂ΔW̄ handed to the generator's rows_bwd
 *
 * Memory: W and G (and the output) stream from DRAM in 4-row interleaved passes, each row too
 * short for the hardware prefetcher to follow; the passes prefetch, element for element, the rows
 * that come next (dora_row_t.pw, .pg: the next 4-row group; KN(dora_fwd_row)'s po: the next
 * block's output row, for writing). Without it the forward ran ~25 % slower after a cache sweep.
 *
 * These are merge.c's row_sums / dora_row_out / dora_row_grad / cpu_round operations in the same
 * order (fp-contract off: each product and sum rounds by itself), on rows read straight from the
 * caller's tensors (cvt_lanes.h vin / vout), so no fp32 copy of W or G is staged. The double
 * sums use FMA: a product of two floats is exact in double (48 significant bits; no overflow or
 * underflow from float operands), so fma(v, v, a) rounds once, as v·v + a does — the same bits.
 * A partial last vector has zero lanes past its end, which add +0 to lanes that can never hold −0
 * (each starts at +0): the same values as adding nothing.
 *
 * Included by merge.c once per ISA (isa_each.h): KN(name) = name_v4 (16 lanes: one zmm of 8
 * doubles per sum and row) or name_v3 (8 lanes: two ymm of 4 doubles per sum and row).
 * dora_row_t (merge.c) must be declared before the inclusion. Not a public header; no memory
 * beyond a few stack vectors.
 */

#include "cvt_lanes.h"
#include "lane_io.h"

#ifdef CK_V4
typedef struct {
    __m512d a;
} KN(dsum);
CK_AI void KN(dsum_zero)(KN(dsum) *s) { s->a = _mm512_setzero_pd(); }
/* s += x·y for the 8 lanes of x, y (lanes j..j+7 of the row, then j+8..j+15: the chain order) */
CK_AI void KN(dsum_acc)(KN(dsum) *s, __m512 x, __m512 y) {
    s->a = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), _mm512_cvtps_pd(_mm512_castps512_ps256(y)), s->a);
    s->a = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1)), _mm512_cvtps_pd(_mm512_extractf32x8_ps(y, 1)), s->a);
}
CK_AI void KN(dsum_lanes)(const KN(dsum) *s, double *l) { _mm512_storeu_pd(l, s->a); }
#else
typedef struct {
    __m256d a0, a1;   /* lanes 0–3, 4–7 */
} KN(dsum);
CK_AI void KN(dsum_zero)(KN(dsum) *s) { s->a0 = s->a1 = _mm256_setzero_pd(); }
CK_AI void KN(dsum_acc)(KN(dsum) *s, __m256 x, __m256 y) {
    s->a0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), _mm256_cvtps_pd(_mm256_castps256_ps128(y)), s->a0);
    s->a1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(y, 1)), s->a1);
}
CK_AI void KN(dsum_lanes)(const KN(dsum) *s, double *l) {
    _mm256_storeu_pd(l, s->a0);
    _mm256_storeu_pd(l + 4, s->a1);
}
#endif

CK_AI double KN(dsum_tree)(const KN(dsum) *s) {
    double a[8];
    KN(dsum_lanes)(s, a);
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* m ≤ SK_N elements at offset j of NR rows (NR, the dtypes: constants after inlining) */
CK_AI void KN(sums_step)(const int NR, const dora_row_t *rw, lyco_dtype wdt, lyco_dtype gdt, lyco_dtype T, lyco_dtype gT,
                         SK_V s, bool bwd, int64_t j, int64_t m, KN(dsum) *ss, KN(dsum) *sg) {
    for (int r = 0; r < NR; r++) {
        /* the same columns of the rows that come next (pw, pg: NULL at the end, or W in scratch) */
        if (rw[r].pw) __builtin_prefetch(rw[r].pw + j * KN(vsize)(wdt), 0, 3);
        if (bwd && rw[r].pg) __builtin_prefetch(rw[r].pg + j * KN(vsize)(gdt), 0, 3);
        SK_V w = KN(vin)(rw[r].w + j * KN(vsize)(wdt), wdt, T, m);
        SK_V d = KN(vin)((const char *)(rw[r].v + j), LYCO_F32, LYCO_F32, m);
        SK_V v = SK_ADD(w, SK_MUL(s, d));
        KN(vout)((char *)(rw[r].v + j), LYCO_F32, v, m);
        KN(dsum_acc)(&ss[r], v, v);
        if (bwd) KN(dsum_acc)(&sg[r], KN(vin)(rw[r].g + j * KN(vsize)(gdt), gdt, gT, m), v);
    }
}

CK_AI void KN(sums_form)(const int NR, const dora_row_t *rw, lyco_dtype wdt, lyco_dtype gdt, lyco_dtype T, lyco_dtype gT, float sig,
                         bool bwd, int64_t n, double *ss, double *sg) {
    KN(dsum) a[4], b[4];
    for (int r = 0; r < NR; r++) {
        KN(dsum_zero)(&a[r]);
        KN(dsum_zero)(&b[r]);
    }
    SK_V s = SK_SET1(sig);
    int64_t j = 0;
    for (; j + SK_N <= n; j += SK_N) KN(sums_step)(NR, rw, wdt, gdt, T, gT, s, bwd, j, SK_N, a, b);
    if (j < n) KN(sums_step)(NR, rw, wdt, gdt, T, gT, s, bwd, j, n - j, a, b);
    for (int r = 0; r < NR; r++) {
        ss[r] = KN(dsum_tree)(&a[r]);
        if (bwd) sg[r] = KN(dsum_tree)(&b[r]);
    }
}

CK_AI void KN(sums_nr)(int nr, const dora_row_t *rw, lyco_dtype wdt, lyco_dtype gdt, lyco_dtype T, lyco_dtype gT, float sig, bool bwd,
                       int64_t n, double *ss, double *sg) {
    switch (nr) {
    case 4: KN(sums_form)(4, rw, wdt, gdt, T, gT, sig, bwd, n, ss, sg); break;
    case 3: KN(sums_form)(3, rw, wdt, gdt, T, gT, sig, bwd, n, ss, sg); break;
    case 2: KN(sums_form)(2, rw, wdt, gdt, T, gT, sig, bwd, n, ss, sg); break;
    default: KN(sums_form)(1, rw, wdt, gdt, T, gT, sig, bwd, n, ss, sg); break;
    }
}

/* The sums of nr ≤ 4 rows (rw[r].g NULL: forward, sg unused); V stored over rw[r].v. The dtype
   combinations of the policy's rows (W, G and the compute dtype T: one 16-bit type, fp32, or fp32
   tensors rounded to a 16-bit T) get loops of their own, every dtype a constant in them. */
static void KN(dora_sums)(int nr, const dora_row_t *rw, lyco_dtype wdt, lyco_dtype gdt, lyco_dtype T, lyco_dtype gT, float sig,
                          int64_t n, double *ss, double *sg) {
    bool bwd = rw[0].g != NULL;
    if (!bwd) gdt = wdt, gT = T;
#define DORA_SUMS_CASE(W_, G_, T_, GT_)                                                                                  \
    if (wdt == W_ && gdt == G_ && T == T_ && gT == GT_) {                                                                \
        if (bwd) KN(sums_nr)(nr, rw, W_, G_, T_, GT_, sig, true, n, ss, sg);                                             \
        else KN(sums_nr)(nr, rw, W_, G_, T_, GT_, sig, false, n, ss, sg);                                                \
        return;                                                                                                          \
    }
    DORA_SUMS_CASE(LYCO_BF16, LYCO_BF16, LYCO_BF16, LYCO_BF16)
    DORA_SUMS_CASE(LYCO_F32, LYCO_F32, LYCO_F32, LYCO_F32)
    DORA_SUMS_CASE(LYCO_BF16, LYCO_F32, LYCO_BF16, LYCO_BF16)
    DORA_SUMS_CASE(LYCO_F32, LYCO_F32, LYCO_BF16, LYCO_BF16)
    DORA_SUMS_CASE(LYCO_F16, LYCO_F16, LYCO_F16, LYCO_F16)
    DORA_SUMS_CASE(LYCO_F16, LYCO_F32, LYCO_F16, LYCO_F16)
    DORA_SUMS_CASE(LYCO_F32, LYCO_F32, LYCO_F16, LYCO_F16)
#undef DORA_SUMS_CASE
    KN(sums_nr)(nr, rw, wdt, gdt, T, gT, sig, bwd, n, ss, sg);
}

/* ---- forward: one output row ---- */

CK_AI void KN(fwd_form)(int64_t n, const float *v, float coef, const char *w, lyco_dtype wdt, lyco_dtype T, char *out,
                        lyco_dtype odt, char *po) {
    SK_V c = SK_SET1(coef);
    for (int64_t j = 0; j < n; j += SK_N) {
        int64_t m = n - j < SK_N ? n - j : SK_N;
        if (po) __builtin_prefetch(po + j * KN(vsize)(odt), 1, 3);
        SK_V o = SK_MUL(KN(vin)((const char *)(v + j), LYCO_F32, LYCO_F32, m), c);
        if (w) o = SK_SUB(o, KN(vin)(w + j * KN(vsize)(wdt), wdt, T, m));
        KN(vout)(out + j * KN(vsize)(odt), odt, o, m);
    }
}

/* out = RN_out(V·coef), minus w (DELTA: w non-NULL); the plain modes' output dtypes get loops
   of their own */
static void KN(dora_fwd_row)(int64_t n, const float *v, float coef, const char *w, lyco_dtype wdt, lyco_dtype T, char *out,
                             lyco_dtype odt, char *po) {
    if (!w && odt == LYCO_BF16) KN(fwd_form)(n, v, coef, NULL, wdt, T, out, LYCO_BF16, po);
    else if (!w && odt == LYCO_F16) KN(fwd_form)(n, v, coef, NULL, wdt, T, out, LYCO_F16, po);
    else if (!w && odt == LYCO_F32) KN(fwd_form)(n, v, coef, NULL, wdt, T, out, LYCO_F32, po);
    else KN(fwd_form)(n, v, coef, w, wdt, T, out, odt, po);
}

/* ---- backward: one row of ∂L/∂ΔW̄ ---- */

CK_AI void KN(bwd_form)(int64_t n, const char *g, lyco_dtype gdt, lyco_dtype gT, const float *v, float coef, float t, float nrm,
                        lyco_dtype RT, float sig, float *out) {
    SK_V c = SK_SET1(coef), tv = SK_SET1(t), nv = SK_SET1(nrm), s = SK_SET1(sig);
    for (int64_t j = 0; j < n; j += SK_N) {
        int64_t m = n - j < SK_N ? n - j : SK_N;
        SK_V gv = KN(vin)(g + j * KN(vsize)(gdt), gdt, gT, m);
        SK_V vv = KN(vin)((const char *)(v + j), LYCO_F32, LYCO_F32, m);
#ifdef CK_V4
        SK_V x = SK_SUB(SK_MUL(gv, c), _mm512_div_ps(SK_MUL(tv, vv), nv));
        if (RT != LYCO_F32) x = KN(rnd16)(x, RT);
#else
        SK_V x = SK_SUB(SK_MUL(gv, c), _mm256_div_ps(SK_MUL(tv, vv), nv));
        if (RT != LYCO_F32) x = KN(rnd8)(x, RT);
#endif
        if (sig != 1.0f) x = SK_MUL(x, s);
        KN(vout)((char *)(out + j), LYCO_F32, x, m);
    }
}

/* out = (RN_RT(g·coef − (t·V)/nrm))·σs; RT = fp32: no rounding (exact G); σs = 1: no product.
   The policy's combinations (G in T, or fp32 rounded to T; or exact) get loops of their own. */
static void KN(dora_bwd_row)(int64_t n, const char *g, lyco_dtype gdt, lyco_dtype gT, const float *v, float coef, float t, float nrm,
                             lyco_dtype RT, float sig, float *out) {
#define DORA_BWD_CASE(G_, GT_, RT_)                                                                                      \
    if (gdt == G_ && gT == GT_ && RT == RT_) {                                                                           \
        KN(bwd_form)(n, g, G_, GT_, v, coef, t, nrm, RT_, sig, out);                                                     \
        return;                                                                                                          \
    }
    DORA_BWD_CASE(LYCO_BF16, LYCO_BF16, LYCO_BF16)
    DORA_BWD_CASE(LYCO_F32, LYCO_F32, LYCO_F32)
    DORA_BWD_CASE(LYCO_F32, LYCO_BF16, LYCO_BF16)
    DORA_BWD_CASE(LYCO_F16, LYCO_F16, LYCO_F16)
    DORA_BWD_CASE(LYCO_F32, LYCO_F16, LYCO_F16)
#undef DORA_BWD_CASE
    KN(bwd_form)(n, g, gdt, gT, v, coef, t, nrm, RT, sig, out);
}

#include "lane_io_end.h"
