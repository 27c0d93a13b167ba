/*
 * ia3_kern.h — one token row of IA3's output-mode bypass on a linear layer (ia3.c) in registers:
 * for each of the row's n = O elements j
 *     v = RN_T(src[j])                   src = y0 (forward) or dy (backward)
 *     acc[j] += v·RN_T(a[j])             backward with G_w wanted: a = y0, acc the run's fp32
 *                                        partial of G_w/m (a product, then a sum)
 *     out[j] = RN_out(v·fac[j])          y (forward) or dy0 (backward); fac = 1 + m·w or m·w
 * loaded, computed and stored one vector at a time (lane_io.h): the row is read once, nothing is
 * staged. These are ia3.c's portable row loops' operations in the same order (fp-contract off:
 * the products and sums stay two roundings), so every copy gives the same bits.
 *
 * Included by ia3.c once per ISA (isa_each.h): KN(name) = name_v4 (16 lanes) or name_v3 (8 lanes).
 * ia3_row_t (ia3.c) must be declared before the inclusion. Not a public header; no memory beyond
 * a few stack vectors.
 */

#include "cvt_lanes.h"
#include "lane_io.h"

/* m ≤ SK_N elements at offset j of the row, the dtypes constants where KN(ia3_row) specialises */
CK_AI void KN(ia3_step)(const ia3_row_t *r, lyco_dtype sdt, lyco_dtype adt, lyco_dtype odt, int64_t j, int64_t m) {
    SK_V v = KN(sk_in)(r->src + j * KN(sk_size)(sdt), sdt, r->T, m);
    if (r->a) {
        SK_V av = KN(sk_in)(r->a + j * KN(sk_size)(adt), adt, r->T, m);
        SK_V s = KN(sk_in)((const char *)(r->acc + j), LYCO_F32, LYCO_F32, m);
        KN(sk_out)((char *)(r->acc + j), LYCO_F32, SK_ADD(s, SK_MUL(v, av)), m);
    }
    if (r->out) KN(sk_out)(r->out + j * KN(sk_size)(odt), odt, SK_MUL(v, KN(sk_in)((const char *)(r->fac + j), LYCO_F32, LYCO_F32, m)), m);
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

#undef SK_N
#undef SK_V
#undef SK_SET1
#undef SK_ZERO
#undef SK_MUL
#undef SK_ADD
#undef SK_SUB
