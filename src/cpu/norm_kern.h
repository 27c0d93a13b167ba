/*
 * norm_kern.h — one LayerNorm group (a token row of C channels, compact in x, y0, y, dy, dx, dy0)
 * of Norm's bypass (norm.c) with the loads, stores and conversions in registers, 8 lanes:
 *   stats:    x = RN_T(x row) (kept in xs), μ = Σ₈ x / C, d = x − μ, rstd = 1/√(Σ₈ d² / C + ε)
 *   forward:  y = (y0 or 0) + ((d·rstd)·γ' + β')
 *   backward: h = d·rstd, g = RN_T(dy) (dy0 = g when asked), pw += g·h, pb += g,
 *             a₀ = Σ₈ g·γ', a₁ = Σ₈ (g·γ')·h, dx = rstd·((g·γ' − a₀/C) − h·(a₁/C))
 * Σ₈ is norm.c's sum: lane j mod 8, each lane a chain in j order, then the fixed tree8; a row's
 * last C mod 8 elements go to the first lanes one by one (scalar, as norm.c). Every product and
 * sum is norm.c's portable loops' operation in the same order with fp-contract off, so the values
 * are bitwise the portable path's.
 *
 * Included by norm.c once per ISA through isa_each.h: the x86-64-v3 copy (KN(name) = name_v3,
 * __m256) — AVX-512 machines run it too (the 8-lane sums set the width). norm_row_t (norm.c) must
 * be declared before the inclusion. Scratch: xs, xh, gs of C floats each (the caller's). Not a
 * public header.
 */

#include "cvt_lanes.h"
#include "lane_io.h"

CK_AI float KN(nk_tree8)(const float *a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

/* The row's storage dtypes as constants where the callers specialise (one dtype for every
   tensor: the common case), its pointers and sizes as locals (stores through char * may alias the
   row struct: GCC would reload every field after each). */
typedef struct {
    lyco_dtype xdt, gdt, odt, y0dt;   /* x; dy (backward); y or dx; y0 */
} KN(nk_form);

/* m ≤ SK_N elements from j: xs = RN_T(x), and backward gs = RN_T(dy) (dy0 = gs where asked);
   returns the x vector */
CK_AI SK_V KN(nk_load_step)(const norm_row_t *r, const KN(nk_form) f, const char *gp, char *g0, int64_t j, int64_t m) {
    SK_V v = KN(sk_in)(r->x + j * KN(sk_size)(f.xdt), f.xdt, r->T, m);
    KN(sk_out)((char *)(r->xs + j), LYCO_F32, v, m);
    if (gp) {
        SK_V g = KN(sk_in)(gp + j * KN(sk_size)(f.gdt), f.gdt, r->T, m);
        KN(sk_out)((char *)(r->gs + j), LYCO_F32, g, m);
        if (g0) KN(sk_out)(g0 + j * KN(sk_size)(r->g0dt), r->g0dt, g, m);
    }
    return v;
}

/* the row loaded (nk_load_step); a = the 8 lanes of Σ xs */
CK_AI void KN(nk_load)(const norm_row_t *r, const KN(nk_form) f, float *a) {
    const char *gp = r->g;
    char *g0 = r->g0;
    int64_t C = r->C, j = 0;
    SK_V acc = SK_ZERO();
    for (; j + SK_N <= C; j += SK_N) acc = SK_ADD(acc, KN(nk_load_step)(r, f, gp, g0, j, SK_N));
    if (j < C) KN(nk_load_step)(r, f, gp, g0, j, C - j);
    _mm256_storeu_ps(a, acc);
    for (int64_t l = 0; j < C; j++, l++) a[l] += r->xs[j];
}

/* rstd of the row, xh = d = xs − μ */
CK_AI float KN(nk_stats)(const norm_row_t *r, const KN(nk_form) f) {
    int64_t C = r->C, C8 = C & ~(int64_t)7;
    const float *xs = r->xs;
    float *xh = r->xh, a[8];
    KN(nk_load)(r, f, a);
    float mu = KN(nk_tree8)(a) / (float)C;
    SK_V m = SK_SET1(mu), acc = SK_ZERO();
    for (int64_t j = 0; j < C8; j += SK_N) {
        SK_V d = SK_SUB(_mm256_loadu_ps(xs + j), m);
        _mm256_storeu_ps(xh + j, d);
        acc = SK_ADD(acc, SK_MUL(d, d));
    }
    _mm256_storeu_ps(a, acc);
    for (int64_t j = C8, l = 0; j < C; j++, l++) {
        float d = xs[j] - mu;
        xh[j] = d;
        a[l] += d * d;
    }
    float var = KN(nk_tree8)(a) / (float)C;
    return 1.0f / sqrtf(var + r->eps);
}

/* m ≤ SK_N elements of y from j */
CK_AI void KN(nk_fwd_step)(const norm_row_t *r, const KN(nk_form) f, const char *y0, char *y, SK_V rs, int64_t j, int64_t m) {
    SK_V d = KN(sk_in)((const char *)(r->xh + j), LYCO_F32, LYCO_F32, m);
    SK_V ga = KN(sk_in)((const char *)(r->gam + j), LYCO_F32, LYCO_F32, m), be = KN(sk_in)((const char *)(r->bet + j), LYCO_F32, LYCO_F32, m);
    SK_V base = y0 ? KN(sk_in)(y0 + j * KN(sk_size)(f.y0dt), f.y0dt, r->T, m) : SK_ZERO();
    KN(sk_out)(y + j * KN(sk_size)(f.odt), f.odt, SK_ADD(base, SK_ADD(SK_MUL(SK_MUL(d, rs), ga), be)), m);
}

CK_AI void KN(nk_fwd)(const norm_row_t *r, const KN(nk_form) f) {
    SK_V rs = SK_SET1(KN(nk_stats)(r, f));
    const char *y0 = r->y0;
    char *y = r->y;
    int64_t C = r->C, j = 0;
    for (; j + SK_N <= C; j += SK_N) KN(nk_fwd_step)(r, f, y0, y, rs, j, SK_N);
    if (j < C) KN(nk_fwd_step)(r, f, y0, y, rs, j, C - j);
}

/* m ≤ SK_N elements of dx from j */
CK_AI void KN(nk_dx_step)(const norm_row_t *r, const KN(nk_form) f, char *dx, SK_V rs, SK_V mh, SK_V mhx, int64_t j, int64_t m) {
    SK_V g = KN(sk_in)((const char *)(r->gs + j), LYCO_F32, LYCO_F32, m), h = KN(sk_in)((const char *)(r->xh + j), LYCO_F32, LYCO_F32, m);
    SK_V ga = KN(sk_in)((const char *)(r->gam + j), LYCO_F32, LYCO_F32, m);
    KN(sk_out)(dx + j * KN(sk_size)(f.odt), f.odt, SK_MUL(rs, SK_SUB(SK_SUB(SK_MUL(g, ga), mh), SK_MUL(h, mhx))), m);
}

/* the backward of the row: dx (when r->dx), the per-channel sums into pw / pb */
CK_AI void KN(nk_bwd)(const norm_row_t *r, const KN(nk_form) f) {
    float rstd = KN(nk_stats)(r, f);
    int64_t C = r->C, C8 = C & ~(int64_t)7;
    float *xh = r->xh, *pw = r->pw, *pb = r->pb;
    const float *gs = r->gs, *gam = r->gam;
    SK_V rs = SK_SET1(rstd), l0 = SK_ZERO(), l1 = SK_ZERO();
    for (int64_t j = 0; j < C8; j += SK_N) {
        SK_V h = SK_MUL(_mm256_loadu_ps(xh + j), rs), g = _mm256_loadu_ps(gs + j);
        SK_V gh = SK_MUL(g, _mm256_loadu_ps(gam + j));
        _mm256_storeu_ps(xh + j, h);
        _mm256_storeu_ps(pw + j, SK_ADD(_mm256_loadu_ps(pw + j), SK_MUL(g, h)));
        _mm256_storeu_ps(pb + j, SK_ADD(_mm256_loadu_ps(pb + j), g));
        l0 = SK_ADD(l0, gh);
        l1 = SK_ADD(l1, SK_MUL(gh, h));
    }
    float a0[8], a1[8];
    _mm256_storeu_ps(a0, l0);
    _mm256_storeu_ps(a1, l1);
    for (int64_t j = C8, l = 0; j < C; j++, l++) {
        float h = xh[j] * rstd, g = gs[j], gh = g * gam[j];
        xh[j] = h;
        pw[j] += g * h;
        pb[j] += g;
        a0[l] += gh;
        a1[l] += gh * h;
    }
    char *dx = r->dx;
    if (!dx) return;
    float s0 = 0.0f, s1 = 0.0f;
    s0 += KN(nk_tree8)(a0);
    s1 += KN(nk_tree8)(a1);
    SK_V mh = SK_SET1(s0 / (float)C), mhx = SK_SET1(s1 / (float)C);
    int64_t j = 0;
    for (; j + SK_N <= C; j += SK_N) KN(nk_dx_step)(r, f, dx, rs, mh, mhx, j, SK_N);
    if (j < C) KN(nk_dx_step)(r, f, dx, rs, mh, mhx, j, C - j);
}

/* the row's form: one dtype D for every tensor it touches, else the general loop */
CK_AI bool KN(nk_one)(const norm_row_t *r, bool fwd, lyco_dtype *d) {
    *d = r->xdt;
    if (fwd) return r->ydt == *d && (!r->y0 || r->y0dt == *d);
    return r->gdt == *d && (!r->dx || r->dxdt == *d);
}

static void KN(norm_fwd_row)(const norm_row_t *r) {
    lyco_dtype d;
    if (!KN(nk_one)(r, true, &d)) KN(nk_fwd)(r, (KN(nk_form)){r->xdt, r->gdt, r->ydt, r->y0dt});
    else if (d == LYCO_BF16) KN(nk_fwd)(r, (KN(nk_form)){LYCO_BF16, LYCO_BF16, LYCO_BF16, LYCO_BF16});
    else if (d == LYCO_F16) KN(nk_fwd)(r, (KN(nk_form)){LYCO_F16, LYCO_F16, LYCO_F16, LYCO_F16});
    else KN(nk_fwd)(r, (KN(nk_form)){LYCO_F32, LYCO_F32, LYCO_F32, LYCO_F32});
}

static void KN(norm_bwd_row)(const norm_row_t *r) {
    lyco_dtype d;
    if (!KN(nk_one)(r, false, &d)) KN(nk_bwd)(r, (KN(nk_form)){r->xdt, r->gdt, r->dxdt, r->y0dt});
    else if (d == LYCO_BF16) KN(nk_bwd)(r, (KN(nk_form)){LYCO_BF16, LYCO_BF16, LYCO_BF16, LYCO_BF16});
    else if (d == LYCO_F16) KN(nk_bwd)(r, (KN(nk_form)){LYCO_F16, LYCO_F16, LYCO_F16, LYCO_F16});
    else KN(nk_bwd)(r, (KN(nk_form)){LYCO_F32, LYCO_F32, LYCO_F32, LYCO_F32});
}

#undef SK_N
#undef SK_V
#undef SK_SET1
#undef SK_ZERO
#undef SK_MUL
#undef SK_ADD
#undef SK_SUB
