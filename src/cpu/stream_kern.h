/*
 * stream_kern.h — one row of a streaming merge (stream.c), in registers: for each element j
 *     w = RN_T(W[j])    x = w, RN_T(src[j]), vec[j − run start] or one value
 *     δ = x·s (s: none, the run's scale, or s[j])
 *     o = w + ms·δ | w − ms·δ | ms·δ | 0   (ms = m·σs)      out[j] = RN_out(o)
 * loaded, computed and stored one vector at a time (W, the source and the output are read or
 * written once; nothing is staged in memory), the row cut into runs of g->period columns.
 *
 * Included by stream.c once per ISA (isa.h): KN(name) = name_v4 under `#pragma GCC
 * target("arch=x86-64-v4")` with CK_V4 (16 lanes; a run's tail through masked loads and stores),
 * name_v3 under "arch=x86-64-v3" with CK_V3 (8 lanes; the tail through zero-padded stack vectors),
 * both with fp-contract off: a product and a sum stay two roundings, so every copy gives the
 * portable path's bits. The conversions are cvt_lanes.h's (bit-identical to src/core/convert.c).
 * The loop branches on the row's form (dtypes, source, scale, mode); KN(seg) gives the common forms
 * loops of their own, in which those branches are constants. seg_t, seg_x, seg_scale and seg_op
 * (stream.c) must be declared before the inclusion. Not a public header; no memory beyond a few
 * stack vectors.
 */

#include "cvt_lanes.h"
#include "lane_io.h"

/* The form of a row: what the loop branches on. Built from constants where KN(seg) specialises
   (the compiler then drops the branches), from the row's values otherwise. */
typedef struct {
    lyco_dtype wdt, xdt, xT, odt, T;
    seg_x xk;
    seg_scale sk;
    seg_op op;
} KN(sk_form);

/* m ≤ SK_N elements: W at w (NULL: not read), the source at x, the scales at sv (SEG_S_LANES),
   the output at out; sb the run's scale (SEG_S_RUN), xb the one value of x, ms = m·σs */
CK_AI void KN(sk_step)(const KN(sk_form) f, const char *w, const char *x, const float *sv, SK_V sb, SK_V xb, SK_V ms, char *out,
                       int64_t m) {
    SK_V wv = w ? KN(vin)(w, f.wdt, f.T, m) : SK_ZERO();
    SK_V xv = f.xk == SEG_X_W ? wv : f.xk == SEG_X_MEM ? KN(vin)(x, f.xdt, f.xT, m) : xb;
    SK_V d = f.sk == SEG_S_NONE ? xv : SK_MUL(xv, f.sk == SEG_S_RUN ? sb : KN(vin)((const char *)sv, LYCO_F32, LYCO_F32, m));
    SK_V o;
    switch (f.op) {
    case SEG_WEIGHT: o = SK_ADD(wv, SK_MUL(ms, d)); break;
    case SEG_UNMERGE: o = SK_SUB(wv, SK_MUL(ms, d)); break;
    case SEG_DELTA: o = SK_MUL(ms, d); break;
    default: o = SK_ZERO(); break;
    }
    KN(vout)(out, f.odt, o, m);
}

/* The row (n elements) of form f, in runs of g->period columns. */
CK_AI void KN(sk_row)(const seg_t *g, int64_t n, const KN(sk_form) f) {
    int64_t wes = KN(vsize)(f.wdt), xes = KN(vsize)(f.xdt), oes = KN(vsize)(f.odt), P = g->period;
    SK_V ms = SK_SET1(g->ms), xb = SK_SET1(g->xb), sb = ms;
    for (int64_t j0 = 0, r = 0; j0 < n; j0 += P, r++) {
        int64_t len = n - j0 < P ? n - j0 : P;
        if (f.sk == SEG_S_RUN) sb = SK_SET1(g->sr[r]);
        const char *w = g->w ? g->w + j0 * wes : NULL;
        const char *x = f.xk == SEG_X_MEM ? g->x + (g->x_cycles ? 0 : j0 * xes) : NULL;
        const float *sv = f.sk == SEG_S_LANES ? g->sv + j0 : NULL;
        char *out = g->out + j0 * oes;
        int64_t j = 0;
        for (; j + SK_N <= len; j += SK_N)
            KN(sk_step)(f, w ? w + j * wes : NULL, x ? x + j * xes : NULL, sv ? sv + j : NULL, sb, xb, ms, out + j * oes, SK_N);
        if (j < len)
            KN(sk_step)(f, w ? w + j * wes : NULL, x ? x + j * xes : NULL, sv ? sv + j : NULL, sb, xb, ms, out + j * oes, len - j);
    }
}

/* The merge-weight rows of IA3 (x = W, a scale per run), Full (x from memory, no scale) and LoKr
   (x a cycled fp32 vector, a scale per run) with W and the output in one dtype D (a constant
   after inlining): false when the row has another form. */
CK_AI bool KN(sk_hot)(const seg_t *g, int64_t n, const KN(sk_form) f, const lyco_dtype D) {
    if (f.xk == SEG_X_W && f.sk == SEG_S_RUN)
        KN(sk_row)(g, n, (KN(sk_form)){D, LYCO_F32, LYCO_F32, D, f.T, SEG_X_W, SEG_S_RUN, SEG_WEIGHT});
    else if (f.xk == SEG_X_MEM && f.sk == SEG_S_NONE && f.xdt == D)
        KN(sk_row)(g, n, (KN(sk_form)){D, D, f.xT, D, f.T, SEG_X_MEM, SEG_S_NONE, SEG_WEIGHT});
    else if (f.xk == SEG_X_MEM && f.sk == SEG_S_RUN && f.xdt == LYCO_F32 && f.xT == LYCO_F32)
        KN(sk_row)(g, n, (KN(sk_form)){D, LYCO_F32, LYCO_F32, D, f.T, SEG_X_MEM, SEG_S_RUN, SEG_WEIGHT});
    else
        return false;
    return true;
}

/* one row: the common forms get loops of their own, the rest the general loop */
static void KN(seg)(const seg_t *g, int64_t n) {
    KN(sk_form) f = {g->wdt, g->xdt, g->xT, g->odt, g->T, g->xk, g->s_kind, g->op};
    if (f.op == SEG_WEIGHT && g->w && f.wdt == f.odt) {
        if (f.wdt == LYCO_BF16 ? KN(sk_hot)(g, n, f, LYCO_BF16)
            : f.wdt == LYCO_F16 ? KN(sk_hot)(g, n, f, LYCO_F16)
                                : KN(sk_hot)(g, n, f, LYCO_F32))
            return;
    }
    KN(sk_row)(g, n, f);
}

#include "lane_io_end.h"
