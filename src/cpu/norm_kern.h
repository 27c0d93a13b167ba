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
 * are bitwise the portable path's. The stats pass also prefetches the rows the caller names in
 * pf_x / pf_g / pf_o (the thread's next rows), a line per 64 bytes.
 *
 * Included by norm.c once per ISA through isa_each.h: x86-64-v4 (KN(name) = name_v4, the
 * elementwise passes in 16 lanes) and x86-64-v3 (name_v3, 8 lanes); the sums are 8 lanes in both. norm_row_t (norm.c) must
 * be declared before the inclusion. Scratch: xs, xh, gs of C floats each (the caller's). Not a
 * public header.
 */

#include "cvt_lanes.h"
#include "lane_io.h"

/* The sums run in 8 lanes (__m256) in every copy; the elementwise passes in SK_V (16 lanes in the
   v4 copy, 8 in v3). A 16-lane vector enters an 8-lane chain as its low half, then its high half:
   elements j … j+7, then j+8 … j+15, the chain's order. */
CK_AI __m256 KN(nk_add8)(__m256 acc, SK_V v) {
#ifdef CK_V4
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(v));
    return _mm256_add_ps(acc, _mm512_extractf32x8_ps(v, 1));
#else
    return _mm256_add_ps(acc, v);
#endif
}

CK_AI float KN(nk_tree8)(const float *a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

/* The rows' storage dtypes as constants where the callers specialise (one dtype for every
   tensor: the common case). Pointers and sizes are read into locals before the loops (stores
   through char * may alias the row structs: GCC would reload every field after each). */
typedef struct {
    lyco_dtype xdt, gdt, odt, y0dt;   /* x; dy (backward); y or dx; y0 */
} KN(nk_form);

/* NR ≤ 2 rows at once (two tokens of one run, or one): each pass's 8-lane sums are chains of
   dependent adds, one per 8 elements; two rows' chains are independent, so interleaving them
   keeps the adders busy. A row's values are those of the row alone; the rows' updates of the
   shared per-channel sums (pw, pb) happen in row order at every element, as one after the other. */
/* the pointers of one row's load pass (locals: see nk_form) */
typedef struct {
    const char *x, *g;
    char *g0;
    float *xs, *gs;
    lyco_dtype T, g0dt;
} KN(nk_in);

CK_AI KN(nk_in) KN(nk_in_of)(const norm_row_t *r) { return (KN(nk_in)){r->x, r->g, r->g0, r->xs, r->gs, r->T, r->g0dt}; }

/* m ≤ SK_N elements from j of a row: xs = RN_T(x), and backward gs = RN_T(dy) (dy0 = gs where
   asked); returns the x vector */
CK_AI SK_V KN(nk_load_step)(const KN(nk_in) r, const KN(nk_form) f, int64_t j, int64_t m) {
    SK_V v = KN(vin)(r.x + j * KN(vsize)(f.xdt), f.xdt, r.T, m);
    KN(vout)((char *)(r.xs + j), LYCO_F32, v, m);
    if (r.g) {
        SK_V g = KN(vin)(r.g + j * KN(vsize)(f.gdt), f.gdt, r.T, m);
        KN(vout)((char *)(r.gs + j), LYCO_F32, g, m);
        if (r.g0) KN(vout)(r.g0 + j * KN(vsize)(r.g0dt), r.g0dt, g, m);
    }
    return v;
}

/* Prefetch of a later row (r->pf_x, pf_g, pf_o), element j of it, once per 64-byte line (called at
   8-element steps): x and y0 / dy for reading, y / dx for writing. A token row (C·2 bytes at bf16)
   is too short for the hardware prefetchers to run ahead, so without it every row's load pass
   waited on DRAM. */
CK_AI void KN(nk_pf)(const char *p, int64_t es, int64_t j, bool write) {
    int64_t off = j * es;
    if (!p || (off & 63) >= 8 * es) return;
    if (write) __builtin_prefetch(p + off, 1, 3);
    else __builtin_prefetch(p + off, 0, 3);
}

/* rstd of each row (xs loaded, xh = d = xs − μ) */
CK_AI void KN(nk_stats)(const norm_row_t *r, int nr, const KN(nk_form) f, float *rstd) {
    int64_t C = r[0].C, C8 = C & ~(int64_t)7, j = 0;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    const KN(nk_in) in[2] = {KN(nk_in_of)(&r[0]), KN(nk_in_of)(&r[nr - 1])};
    for (; j + SK_N <= C; j += SK_N)
        for (int q = 0; q < nr; q++) acc[q] = KN(nk_add8)(acc[q], KN(nk_load_step)(in[q], f, j, SK_N));
    if (j < C)
        for (int q = 0; q < nr; q++) KN(nk_load_step)(in[q], f, j, C - j);
    for (; j + 8 <= C; j += 8)   /* a last full 8-block inside the partial vector (v4) */
        for (int q = 0; q < nr; q++) acc[q] = _mm256_add_ps(acc[q], _mm256_loadu_ps(r[q].xs + j));
    float mu[2], a[2][8];
    for (int q = 0; q < nr; q++) {
        _mm256_storeu_ps(a[q], acc[q]);
        for (int64_t i = C8, l = 0; i < C; i++, l++) a[q][l] += r[q].xs[i];
        mu[q] = KN(nk_tree8)(a[q]) / (float)C;
        acc[q] = _mm256_setzero_ps();
    }
    __m256 m[2] = {_mm256_set1_ps(mu[0]), _mm256_set1_ps(nr > 1 ? mu[1] : 0.0f)};
    int64_t esx = KN(vsize)(f.xdt), esg = KN(vsize)(r[0].g ? f.gdt : f.y0dt), eso = KN(vsize)(f.odt);
    for (j = 0; j < C8; j += 8)
        for (int q = 0; q < nr; q++) {
            KN(nk_pf)(r[q].pf_x, esx, j, false);
            KN(nk_pf)(r[q].pf_g, esg, j, false);
            KN(nk_pf)(r[q].pf_o, eso, j, true);
            __m256 d = _mm256_sub_ps(_mm256_loadu_ps(r[q].xs + j), m[q]);
            _mm256_storeu_ps(r[q].xh + j, d);
            acc[q] = _mm256_add_ps(acc[q], _mm256_mul_ps(d, d));
        }
    for (int q = 0; q < nr; q++) {
        _mm256_storeu_ps(a[q], acc[q]);
        for (int64_t i = C8, l = 0; i < C; i++, l++) {
            float d = r[q].xs[i] - mu[q];
            r[q].xh[i] = d;
            a[q][l] += d * d;
        }
        float var = KN(nk_tree8)(a[q]) / (float)C;
        rstd[q] = 1.0f / sqrtf(var + r[q].eps);
    }
}

/* the pointers of one row's output pass (locals: see nk_form) */
typedef struct {
    const float *xh, *gam, *bet;
    const char *y0;
    char *y;
    lyco_dtype T;
} KN(nk_out);

/* m ≤ SK_N elements of a row's y from j */
CK_AI void KN(nk_fwd_step)(const KN(nk_out) o, const KN(nk_form) f, SK_V rs, int64_t j, int64_t m) {
    SK_V d = KN(vin)((const char *)(o.xh + j), LYCO_F32, LYCO_F32, m);
    SK_V ga = KN(vin)((const char *)(o.gam + j), LYCO_F32, LYCO_F32, m), be = KN(vin)((const char *)(o.bet + j), LYCO_F32, LYCO_F32, m);
    SK_V base = o.y0 ? KN(vin)(o.y0 + j * KN(vsize)(f.y0dt), f.y0dt, o.T, m) : SK_ZERO();
    KN(vout)(o.y + j * KN(vsize)(f.odt), f.odt, SK_ADD(base, SK_ADD(SK_MUL(SK_MUL(d, rs), ga), be)), m);
}

CK_AI void KN(nk_fwd)(const norm_row_t *r, int nr, const KN(nk_form) f) {
    float rstd[2];
    KN(nk_stats)(r, nr, f, rstd);
    int64_t C = r[0].C;
    for (int q = 0; q < nr; q++) {
        SK_V rs = SK_SET1(rstd[q]);
        const KN(nk_out) o = {r[q].xh, r[q].gam, r[q].bet, r[q].y0, r[q].y, r[q].T};
        int64_t j = 0;
        for (; j + SK_N <= C; j += SK_N) KN(nk_fwd_step)(o, f, rs, j, SK_N);
        if (j < C) KN(nk_fwd_step)(o, f, rs, j, C - j);
    }
}

/* m ≤ SK_N elements of a row's dx from j (gs, xh: the row's scratch) */
CK_AI void KN(nk_dx_step)(const float *gs, const float *xh, const float *gam, char *dx, const KN(nk_form) f, SK_V rs, SK_V mh,
                          SK_V mhx, int64_t j, int64_t m) {
    SK_V g = KN(vin)((const char *)(gs + j), LYCO_F32, LYCO_F32, m), h = KN(vin)((const char *)(xh + j), LYCO_F32, LYCO_F32, m);
    SK_V ga = KN(vin)((const char *)(gam + j), LYCO_F32, LYCO_F32, m);
    KN(vout)(dx + j * KN(vsize)(f.odt), f.odt, SK_MUL(rs, SK_SUB(SK_SUB(SK_MUL(g, ga), mh), SK_MUL(h, mhx))), m);
}

/* the backward of the rows: dx (when asked), the per-channel sums into pw / pb (row order) */
CK_AI void KN(nk_bwd)(const norm_row_t *r, int nr, const KN(nk_form) f) {
    float rstd[2];
    KN(nk_stats)(r, nr, f, rstd);
    int64_t C = r[0].C, C8 = C & ~(int64_t)7;
    float *pw = r[0].pw, *pb = r[0].pb;
    const float *gam = r[0].gam;
    __m256 rs[2] = {_mm256_set1_ps(rstd[0]), _mm256_set1_ps(nr > 1 ? rstd[1] : 0.0f)};
    __m256 l0[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, l1[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    float *xq[2] = {r[0].xh, r[nr - 1].xh};   /* locals: the stores below may alias r[] */
    const float *gq[2] = {r[0].gs, r[nr - 1].gs};
    for (int64_t j = 0; j < C8; j += 8) {
        __m256 ga = _mm256_loadu_ps(gam + j), w = _mm256_loadu_ps(pw + j), b = _mm256_loadu_ps(pb + j);
        for (int q = 0; q < nr; q++) {
            __m256 h = _mm256_mul_ps(_mm256_loadu_ps(xq[q] + j), rs[q]), g = _mm256_loadu_ps(gq[q] + j), gh = _mm256_mul_ps(g, ga);
            _mm256_storeu_ps(xq[q] + j, h);
            w = _mm256_add_ps(w, _mm256_mul_ps(g, h));
            b = _mm256_add_ps(b, g);
            l0[q] = _mm256_add_ps(l0[q], gh);
            l1[q] = _mm256_add_ps(l1[q], _mm256_mul_ps(gh, h));
        }
        _mm256_storeu_ps(pw + j, w);
        _mm256_storeu_ps(pb + j, b);
    }
    float a0[2][8], a1[2][8];
    for (int q = 0; q < nr; q++) {
        _mm256_storeu_ps(a0[q], l0[q]);
        _mm256_storeu_ps(a1[q], l1[q]);
    }
    for (int64_t j = C8, l = 0; j < C; j++, l++)
        for (int q = 0; q < nr; q++) {
            float h = r[q].xh[j] * rstd[q], g = r[q].gs[j], gh = g * gam[j];
            r[q].xh[j] = h;
            pw[j] += g * h;
            pb[j] += g;
            a0[q][l] += gh;
            a1[q][l] += gh * h;
        }
    for (int q = 0; q < nr; q++) {
        if (!r[q].dx) continue;
        float s0 = 0.0f, s1 = 0.0f;
        s0 += KN(nk_tree8)(a0[q]);
        s1 += KN(nk_tree8)(a1[q]);
        SK_V mh = SK_SET1(s0 / (float)C), mhx = SK_SET1(s1 / (float)C), rsq = SK_SET1(rstd[q]);
        const float *gs = r[q].gs, *xh = r[q].xh;
        char *dx = r[q].dx;
        int64_t j = 0;
        for (; j + SK_N <= C; j += SK_N) KN(nk_dx_step)(gs, xh, gam, dx, f, rsq, mh, mhx, j, SK_N);
        if (j < C) KN(nk_dx_step)(gs, xh, gam, dx, f, rsq, mh, mhx, j, C - j);
    }
}

/* the rows' form: one dtype D for every tensor they touch, else the general loop */
CK_AI bool KN(nk_one)(const norm_row_t *r, bool fwd, lyco_dtype *d) {
    *d = r->xdt;
    if (fwd) return r->ydt == *d && (!r->y0 || r->y0dt == *d);
    return r->gdt == *d && (!r->dx || r->dxdt == *d);
}

/* nr (1 or 2) rows of one layout and dtypes (r[q] differ in their pointers only); one dtype for
   every tensor (the common case) gets loops of its own */
CK_AI void KN(nk_run)(const norm_row_t *r, int nr, bool fwd, const KN(nk_form) f) {
    if (fwd) {
        if (nr == 2) KN(nk_fwd)(r, 2, f);
        else KN(nk_fwd)(r, 1, f);
    } else {
        if (nr == 2) KN(nk_bwd)(r, 2, f);
        else KN(nk_bwd)(r, 1, f);
    }
}

CK_AI void KN(nk_dispatch)(const norm_row_t *r, int nr, bool fwd) {
    lyco_dtype d;
    if (!KN(nk_one)(r, fwd, &d)) KN(nk_run)(r, nr, fwd, (KN(nk_form)){r->xdt, r->gdt, fwd ? r->ydt : r->dxdt, r->y0dt});
    else if (d == LYCO_BF16) KN(nk_run)(r, nr, fwd, (KN(nk_form)){LYCO_BF16, LYCO_BF16, LYCO_BF16, LYCO_BF16});
    else if (d == LYCO_F16) KN(nk_run)(r, nr, fwd, (KN(nk_form)){LYCO_F16, LYCO_F16, LYCO_F16, LYCO_F16});
    else KN(nk_run)(r, nr, fwd, (KN(nk_form)){LYCO_F32, LYCO_F32, LYCO_F32, LYCO_F32});
}

static void KN(norm_fwd_row)(const norm_row_t *r, int nr) { KN(nk_dispatch)(r, nr, true); }
static void KN(norm_bwd_row)(const norm_row_t *r, int nr) { KN(nk_dispatch)(r, nr, false); }

#include "lane_io_end.h"
