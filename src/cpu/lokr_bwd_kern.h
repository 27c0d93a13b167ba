/*
 * lokr_bwd_kern.h — one row of LoKr's merge backward (lokr.c), in one pass over the row of G.
 * The row (c segments of dK values: column p·dK + n) is loaded through the compute dtype T and
 * scaled by m, then σs (each product skipped when its factor is 1, each rounded to fp32: merge.c's
 * order), and every loaded vector feeds both sums at once:
 *     v[p]    = Σ_n x[p·dK + n]·w2[n]      (p < c)
 *     gw2[n] += Σ_p w[p]·x[p·dK + n]       (a chain over p from 0, then + the partial)
 * G is read once, straight from the caller's tensor (bf16, fp16 or fp32), converted in registers.
 *
 * Summation order (the same in the v4 and v3 copies, so both give the same bits): vectors of 16
 * logical lanes; v[p]'s lane L takes the columns n ≡ L (mod 16) in increasing n as one FMA chain,
 * then the 16 lanes are added in a fixed tree (L with L+8, then +4, +2, +1). The columns go in
 * blocks of up to 8 vectors (one block when dK ≤ 128), whose G_W2 accumulators stay in registers over p; the dot of
 * segment p carries over the blocks in dv (c vectors of 16 floats, the caller's scratch). Lanes
 * past dK are loaded as zeros (masked loads in v4, a zero-padded stack copy in v3) and stored
 * masked, so they add nothing.
 *
 * Included by lokr.c once per ISA (isa.h): KN(name) = name_v4 under `#pragma GCC
 * target("arch=x86-64-v4")` with CK_V4 (one 16-lane register), name_v3 under "arch=x86-64-v3"
 * with CK_V3 (two 8-lane registers), name_base without either (GCC vectors, no FMA instruction:
 * its bits differ; fp32 rows only, lokr.c stages the row). lk_row and lk_rows must be declared before the
 * inclusion (lk_rows too). Not a public header; no memory.
 */

#include "cvt_lanes.h"

#ifdef CK_V4
typedef __m512 KN(lb16);
CK_AI KN(lb16) KN(lb_zero)(void) { return _mm512_setzero_ps(); }
CK_AI KN(lb16) KN(lb_set1)(float x) { return _mm512_set1_ps(x); }
CK_AI KN(lb16) KN(lb_mul)(KN(lb16) a, KN(lb16) b) { return _mm512_mul_ps(a, b); }
CK_AI KN(lb16) KN(lb_add)(KN(lb16) a, KN(lb16) b) { return _mm512_add_ps(a, b); }
CK_AI KN(lb16) KN(lb_fma)(KN(lb16) a, KN(lb16) b, KN(lb16) c) { return _mm512_fmadd_ps(a, b, c); }

/* the first m ≤ 16 values of `dt` at p as fp32 (lanes past m zero), fp32 rounded through T */
CK_AI KN(lb16) KN(lb_ld)(const char *p, lyco_dtype dt, lyco_dtype T, int64_t m) {
    __mmask16 k = (__mmask16)((1u << m) - 1u);
    if (dt != LYCO_F32) {
        __m256i h = m == 16 ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(k, p);
        return dt == LYCO_BF16 ? KN(bf16_widen16)(h) : KN(f16_widen16)(h);
    }
    __m512 v = m == 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
    return T == LYCO_F32 ? v : KN(rnd16)(v, T);
}

CK_AI void KN(lb_st)(float *p, KN(lb16) v, int64_t m) {
    if (m == 16) _mm512_storeu_ps(p, v);
    else _mm512_mask_storeu_ps(p, (__mmask16)((1u << m) - 1u), v);
}

CK_AI __m256 KN(lb_fold8)(KN(lb16) v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
#elif defined(CK_V3)
typedef struct {
    __m256 lo, hi;   /* lanes 0–7, 8–15 */
} KN(lb16);
CK_AI KN(lb16) KN(lb_zero)(void) { return (KN(lb16)){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
CK_AI KN(lb16) KN(lb_set1)(float x) { return (KN(lb16)){_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
CK_AI KN(lb16) KN(lb_mul)(KN(lb16) a, KN(lb16) b) { return (KN(lb16)){_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
CK_AI KN(lb16) KN(lb_add)(KN(lb16) a, KN(lb16) b) { return (KN(lb16)){_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
CK_AI KN(lb16) KN(lb_fma)(KN(lb16) a, KN(lb16) b, KN(lb16) c) {
    return (KN(lb16)){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}

CK_AI __m256 KN(lb_ld8)(const char *p, lyco_dtype dt, lyco_dtype T) {
    if (dt == LYCO_BF16) return KN(ld_bf16)(p);
    if (dt == LYCO_F16) return KN(ld_f16)(p);
    __m256 v = _mm256_loadu_ps((const float *)p);
    return T == LYCO_F32 ? v : KN(rnd8)(v, T);
}

CK_AI KN(lb16) KN(lb_ld)(const char *p, lyco_dtype dt, lyco_dtype T, int64_t m) {
    int64_t es = dt == LYCO_F32 ? 4 : 2;
    _Alignas(32) char t[64] = {0};
    if (m < 16) p = memcpy(t, p, (size_t)(m * es));
    return (KN(lb16)){KN(lb_ld8)(p, dt, T), KN(lb_ld8)(p + 8 * es, dt, T)};
}

CK_AI void KN(lb_st)(float *p, KN(lb16) v, int64_t m) {
    if (m == 16) {
        _mm256_storeu_ps(p, v.lo);
        _mm256_storeu_ps(p + 8, v.hi);
        return;
    }
    _Alignas(32) float t[16];
    _mm256_store_ps(t, v.lo);
    _mm256_store_ps(t + 8, v.hi);
    memcpy(p, t, (size_t)m * sizeof(float));
}

CK_AI __m256 KN(lb_fold8)(KN(lb16) v) { return _mm256_add_ps(v.lo, v.hi); }
#else
typedef float KN(lb16) __attribute__((vector_size(64)));
CK_AI KN(lb16) KN(lb_zero)(void) { return (KN(lb16)){0}; }
CK_AI KN(lb16) KN(lb_set1)(float x) { return (KN(lb16)){0} + x; }
CK_AI KN(lb16) KN(lb_mul)(KN(lb16) a, KN(lb16) b) { return a * b; }
CK_AI KN(lb16) KN(lb_add)(KN(lb16) a, KN(lb16) b) { return a + b; }
CK_AI KN(lb16) KN(lb_fma)(KN(lb16) a, KN(lb16) b, KN(lb16) c) { return a * b + c; }

/* fp32 rows only (the portable path stages and rounds the row first) */
CK_AI KN(lb16) KN(lb_ld)(const char *p, lyco_dtype dt, lyco_dtype T, int64_t m) {
    (void)dt;
    (void)T;
    KN(lb16) v = {0};
    memcpy(&v, p, (size_t)m * sizeof(float));
    return v;
}

CK_AI void KN(lb_st)(float *p, KN(lb16) v, int64_t m) { memcpy(p, &v, (size_t)m * sizeof(float)); }
#endif

/* the 16 lanes added in the fixed tree: L + (L+8), then +4, +2, +1 */
CK_AI float KN(lb_hsum)(KN(lb16) v) {
#if defined(CK_V4) || defined(CK_V3)
    __m256 h = KN(lb_fold8)(v);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
#else
    float h[8], q[4];
    for (int l = 0; l < 8; l++) h[l] = v[l] + v[l + 8];
    for (int l = 0; l < 4; l++) q[l] = h[l] + h[l + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
#endif
}

/* What the inner loop branches on; constants where KN(lb_row) specialises. */
typedef struct {
    lyco_dtype gdt, T;
    bool scale_m, scale_s;
} KN(lb_form);

/* vectors per column block: 2·LB_NV accumulators and W2 values in registers (v3: 4·LB_NV of 8 lanes, some spilled) */
#ifndef LB_NV
#define LB_NV 8
#endif

CK_AI KN(lb16) KN(lb_x)(const char *g, const KN(lb_form) f, KN(lb16) mv, KN(lb16) sv, int64_t m) {
    KN(lb16) x = KN(lb_ld)(g, f.gdt, f.T, m);
    if (f.scale_m) x = KN(lb_mul)(x, mv);
    if (f.scale_s) x = KN(lb_mul)(x, sv);
    return x;
}

/* Columns [n0, n0 + 16·nv) of every segment (nv ≤ LB_NV; the last vector has `last` ≤ 16 lanes). */
CK_AI void KN(lb_block)(const lk_row *r, const KN(lb_form) f, int64_t n0, int nv, int64_t last, float *dv) {
    int64_t es = f.gdt == LYCO_F32 ? 4 : 2, cc = r->cc, dK = r->dK;
    const char *g0 = r->g + n0 * es;   /* locals: the stores below may alias the row's fields */
    const float *w = r->w;
    float *gw2 = r->gw2 + n0;
    KN(lb16) w2v[LB_NV], acc[LB_NV], mv = KN(lb_set1)(r->m), sv = KN(lb_set1)(r->sig);
#pragma GCC unroll 8
    for (int u = 0; u < LB_NV; u++) {
        acc[u] = KN(lb_zero)();
        w2v[u] = u < nv ? KN(lb_ld)((const char *)(r->w2 + n0 + 16 * u), LYCO_F32, LYCO_F32, u == nv - 1 ? last : 16) : acc[u];
    }
    for (int64_t p = 0; p < cc; p++) {
        const char *g = g0 + p * dK * es;
        KN(lb16) wp = KN(lb_set1)(w[p]), d;
        memcpy(&d, dv + 16 * p, sizeof d);
#pragma GCC unroll 8
        for (int u = 0; u < LB_NV; u++)
            if (u < nv) {
                KN(lb16) x = KN(lb_x)(g + 16 * u * es, f, mv, sv, u == nv - 1 ? last : 16);
                d = KN(lb_fma)(x, w2v[u], d);
                acc[u] = KN(lb_fma)(wp, x, acc[u]);
            }
        memcpy(dv + 16 * p, &d, sizeof d);
    }
#pragma GCC unroll 8
    for (int u = 0; u < LB_NV; u++)
        if (u < nv) {
            int64_t m = u == nv - 1 ? last : 16;
            float *o = gw2 + 16 * u;
            KN(lb_st)(o, KN(lb_add)(KN(lb_ld)((const char *)o, LYCO_F32, LYCO_F32, m), acc[u]), m);
        }
}

CK_AI void KN(lb_row)(const lk_row *r, const KN(lb_form) f) {
    int64_t dK = r->dK, n0 = 0;
    KN(lb16) z = KN(lb_zero)();
    for (int64_t p = 0; p < r->cc; p++) memcpy(r->dv + 16 * p, &z, sizeof z);
    for (; n0 + 16 * LB_NV <= dK; n0 += 16 * LB_NV) KN(lb_block)(r, f, n0, LB_NV, 16, r->dv);
    if (n0 < dK) { /* the last block, with a constant vector count (the accumulators stay in registers) */
        int64_t rem = dK - n0, last = rem - 16 * ((rem - 1) / 16);
        switch ((rem + 15) / 16) {
        case 1: KN(lb_block)(r, f, n0, 1, last, r->dv); break;
        case 2: KN(lb_block)(r, f, n0, 2, last, r->dv); break;
        case 3: KN(lb_block)(r, f, n0, 3, last, r->dv); break;
        case 4: KN(lb_block)(r, f, n0, 4, last, r->dv); break;
        case 5: KN(lb_block)(r, f, n0, 5, last, r->dv); break;
        case 6: KN(lb_block)(r, f, n0, 6, last, r->dv); break;
        default: KN(lb_block)(r, f, n0, 7, last, r->dv); break;
        }
    }
    for (int64_t p = 0; p < r->cc; p++) {
        KN(lb16) d;
        memcpy(&d, r->dv + 16 * p, sizeof d);
        r->v[p] = KN(lb_hsum)(d);
    }
}

/* One row: the unscaled rows of each dtype get loops of their own, the rest the general one. */
CK_AI void KN(lk_bwd_row)(const lk_row *r) {
    KN(lb_form) f = {r->gdt, r->T, r->m != 1.0f, r->sig != 1.0f};
    if (f.scale_m || f.scale_s) KN(lb_row)(r, f);
    else if (f.gdt == LYCO_BF16) KN(lb_row)(r, (KN(lb_form)){LYCO_BF16, LYCO_BF16, false, false});
    else if (f.gdt == LYCO_F16) KN(lb_row)(r, (KN(lb_form)){LYCO_F16, LYCO_F16, false, false});
    else if (f.T == LYCO_F32) KN(lb_row)(r, (KN(lb_form)){LYCO_F32, LYCO_F32, false, false});
    else KN(lb_row)(r, f);
}

#ifndef LB_AHEAD
#define LB_AHEAD 8   /* rows of G prefetched ahead */
#endif

/* Rows [o0, o1) (o = i·b + j): w[p] = (float)(ρ_o·W1[i,p]), the row's pass, G_W1[i,:] += ρ_o·v. */
static void KN(lk_bwd_rows)(const lk_rows *R, int64_t o0, int64_t o1) {
    int64_t b = R->b, cc = R->cc, dK = R->dK, rowbytes = cc * dK * (R->gdt == LYCO_F32 ? 4 : 2);
    float *w = R->w, *v = R->v;
    for (int64_t o = o0; o < o1; o++) {
        int64_t i = o / b, j = o % b;
        const double *w1 = R->W1d + i * cc;
        double rho = R->rho[o];
        double *g1 = R->gW1 + i * cc;
        if (o + LB_AHEAD < o1) /* G's row LB_AHEAD rows on, into L1 (−3 to −6 % of the flushed call) */
            for (int64_t off = 0; off < rowbytes; off += 64) __builtin_prefetch(R->g + (o + LB_AHEAD - o0) * R->stride + off, 0, 3);
        for (int64_t p = 0; p < cc; p++) w[p] = (float)(rho * w1[p]);
        lk_row r = {.g = R->g + (o - o0) * R->stride, .gdt = R->gdt, .T = R->T, .m = R->m, .sig = R->sig, .cc = cc, .dK = dK,
                    .w2 = R->W2 + j * dK, .w = w, .v = v, .gw2 = R->gW2 + j * dK, .dv = R->dv};
        KN(lk_bwd_row)(&r);
        for (int64_t p = 0; p < cc; p++) g1[p] += rho * (double)v[p];
    }
}
