/*
 * ia3_kern.h — one token row of IA3's output-mode bypass on a linear layer (ia3.c) in registers:
 * for each of the row's n = O elements j
 *     v = RN_T(src[j])                   src = y0 (forward) or dy (backward)
 *     acc[j] += v·RN_T(a[j])             backward with G_w wanted: a = y0, acc the run's fp32
 *                                        partial of G_w/m (a product, then a sum)
 *     out[j] = RN_out(v·fac[j])          y (forward) or dy0 (backward); fac = 1 + m·w or m·w
 * loaded, computed and stored one vector at a time (cvt_lanes.h vin / vout): the row is read once, nothing is
 * staged. These are ia3.c's portable row loops' operations in the same order (fp-contract off:
 * the products and sums stay two roundings), so every copy gives the same bits.
 *
 * KN(ia3_dot): the merge backward's row dot (output mode) Σ_j (m·RN_T(G[o, j]))·RN_T(W[o, j]) in
 * ia3.c's 16 lanes (lane j mod 16, each a chain in j order), straight from the tensors.
 *
 * Included by ia3.c once per ISA (isa_each.h): KN(name) = name_v4 (16 lanes) or name_v3 (8 lanes).
 * ia3_row_t (ia3.c) must be declared before the inclusion. Not a public header; no memory beyond
 * a few stack vectors.
 */

#include "cvt_lanes.h"
#include "lane_io.h"

/* m ≤ SK_N elements at offset j of the row, the dtypes constants where KN(ia3_row) specialises */
CK_AI void KN(ia3_step)(const ia3_row_t *r, lyco_dtype sdt, lyco_dtype adt, lyco_dtype odt, int64_t j, int64_t m) {
    SK_V v = KN(vin)(r->src + j * KN(vsize)(sdt), sdt, r->T, m);
    if (r->a) {
        SK_V av = KN(vin)(r->a + j * KN(vsize)(adt), adt, r->T, m);
        SK_V s = KN(vin)((const char *)(r->acc + j), LYCO_F32, LYCO_F32, m);
        KN(vout)((char *)(r->acc + j), LYCO_F32, SK_ADD(s, SK_MUL(v, av)), m);
    }
    if (r->out) KN(vout)(r->out + j * KN(vsize)(odt), odt, SK_MUL(v, KN(vin)((const char *)(r->fac + j), LYCO_F32, LYCO_F32, m)), m);
}

CK_AI void KN(ia3_row_form)(const ia3_row_t *r, lyco_dtype sdt, lyco_dtype adt, lyco_dtype odt) {
    int64_t j = 0;
    for (; j + SK_N <= r->n; j += SK_N) KN(ia3_step)(r, sdt, adt, odt, j, SK_N);
    if (j < r->n) KN(ia3_step)(r, sdt, adt, odt, j, r->n - j);
}

/* the row; every tensor in one dtype (the common case) gets a loop of its own */
static void KN(ia3_row)(const ia3_row_t *r) {
    lyco_dtype d = r->sdt;
    bool one = (!r->a || r->adt == d) && (!r->out || r->odt == d);
    if (one && d == LYCO_BF16) KN(ia3_row_form)(r, LYCO_BF16, LYCO_BF16, LYCO_BF16);
    else if (one && d == LYCO_F16) KN(ia3_row_form)(r, LYCO_F16, LYCO_F16, LYCO_F16);
    else if (one && d == LYCO_F32) KN(ia3_row_form)(r, LYCO_F32, LYCO_F32, LYCO_F32);
    else KN(ia3_row_form)(r, r->sdt, r->adt, r->odt);
}

/* ---- merge backward, output mode: one row's dot in 16 fixed lanes ---- */

/* acc[l] += (m·RN_T(g[j]))·RN_T(w[j]) for j ≡ l (mod 16), j < n: ia3.c's dot16 over a whole row,
   the 16 lanes as one zmm (v4) or two ymm (v3); a partial vector adds to its first lanes only */
CK_AI void KN(dot_step)(const char *g, lyco_dtype gdt, const char *w, lyco_dtype wdt, lyco_dtype T, SK_V m, SK_V *acc,
                        int64_t cnt) {
    SK_V p = SK_MUL(SK_MUL(m, KN(vin)(g, gdt, T, cnt)), KN(vin)(w, wdt, T, cnt));
#ifdef CK_V4
    *acc = _mm512_mask_add_ps(*acc, (__mmask16)((1u << cnt) - 1u), *acc, p);
#else
    __m256 sum = SK_ADD(*acc, p);
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    *acc = _mm256_blendv_ps(*acc, sum, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)cnt), lane)));
#endif
}

CK_AI void KN(dot_form)(const char *g, lyco_dtype gdt, const char *w, lyco_dtype wdt, lyco_dtype T, float m, int64_t n,
                        float *acc) {
    enum { V = 16 / SK_N };   /* vectors per 16 lanes */
    SK_V a[V], mv = SK_SET1(m);
    for (int v = 0; v < V; v++) a[v] = KN(vin)((const char *)(acc + v * SK_N), LYCO_F32, LYCO_F32, SK_N);
    int64_t ge = KN(vsize)(gdt), we = KN(vsize)(wdt), j = 0;
    for (; j + 16 <= n; j += 16)
        for (int v = 0; v < V; v++) KN(dot_step)(g + (j + v * SK_N) * ge, gdt, w + (j + v * SK_N) * we, wdt, T, mv, &a[v], SK_N);
    for (int v = 0; j < n; v++, j += SK_N) {
        int64_t cnt = n - j < SK_N ? n - j : SK_N;
        KN(dot_step)(g + j * ge, gdt, w + j * we, wdt, T, mv, &a[v], cnt);
    }
    for (int v = 0; v < V; v++) KN(vout)((char *)(acc + v * SK_N), LYCO_F32, a[v], SK_N);
}

/* the dot of a row of G and W (n elements, compact), added to acc[16]; G and W in one dtype (the
   common case) get a loop of their own */
static void KN(ia3_dot)(const char *g, lyco_dtype gdt, const char *w, lyco_dtype wdt, lyco_dtype T, float m, int64_t n, float *acc) {
    if (gdt == wdt && gdt == LYCO_BF16) KN(dot_form)(g, LYCO_BF16, w, LYCO_BF16, T, m, n, acc);
    else if (gdt == wdt && gdt == LYCO_F16) KN(dot_form)(g, LYCO_F16, w, LYCO_F16, T, m, n, acc);
    else if (gdt == wdt && gdt == LYCO_F32) KN(dot_form)(g, LYCO_F32, w, LYCO_F32, T, m, n, acc);
    else KN(dot_form)(g, gdt, w, wdt, T, m, n, acc);
}

#include "lane_io_end.h"
