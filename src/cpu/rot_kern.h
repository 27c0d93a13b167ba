/*
 * rot_kern.h — the kernels of rot.c (the OFT family's block products; formulas, order and the
 * in-place rule in rot.h), written once and included by rot.c once per ISA (isa.h, isa_each.h):
 * KN(name) = name_v4 with CK_V4 (16-lane zmm vectors, 16 rows a register block, 12 tokens),
 * name_v3 with CK_V3 (8-lane ymm, 12 rows, 8 tokens), name_base (GCC vectors of 8 lanes, no FMA
 * instruction: a product and a sum, as dense.c's portable copy; 8 rows, 4 tokens).
 *
 * Channel-major: per column vector (the last one partial: masked lanes), per register block of
 * ≤ RK_RB output rows, one accumulator per row; per k one vector of input row k is loaded
 * (converted from bf16/fp16, or rounded from fp32 through T, in registers: cvt_lanes.h's
 * KN(vin)) and feeds one FMA per row with the block's scalar A(i, k) broadcast. The epilogue
 * values of all rows are formed before any is stored (in place is safe in one register block).
 * Token-major: per block and 16 (8) channels, per group of ≤ RK_RT tokens, one accumulator per
 * token; per k one vector of Op's row k feeds one FMA per token with x[t, k] broadcast from the
 * fp32 tile. Register counts and row counts are constants per instantiation (switches on the
 * count), so the accumulators stay in registers. G_N (v4 only): dense.c's column-pair dot blocks
 * on rows by pointer, the lane tree in registers.
 * Expects from rot.c: KN, CK_AI, rot.h, <immintrin.h> on x86-64; fp-contract off.
 */

#if defined(CK_V4) || defined(CK_V3)
#include "cvt_lanes.h"
#define RK_N CK_N
typedef CK_VEC KN(rk_v);
#ifdef CK_V4
#define RK_RB 16
#define RK_RB2 12
#define RK_RT 12
CK_AI KN(rk_v) KN(rk_fma)(KN(rk_v) a, KN(rk_v) b, KN(rk_v) c) { return _mm512_fmadd_ps(a, b, c); }
CK_AI KN(rk_v) KN(rk_set1)(float x) { return _mm512_set1_ps(x); }
#else
#define RK_RB 12
#define RK_RB2 6
#define RK_RT 8
CK_AI KN(rk_v) KN(rk_fma)(KN(rk_v) a, KN(rk_v) b, KN(rk_v) c) { return _mm256_fmadd_ps(a, b, c); }
CK_AI KN(rk_v) KN(rk_set1)(float x) { return _mm256_set1_ps(x); }
#endif
CK_AI KN(rk_v) KN(rk_ld)(const void *p, lyco_dtype dt, lyco_dtype T, int64_t m) { return KN(vin)(p, dt, T, m); }
CK_AI void KN(rk_st)(void *p, lyco_dtype dt, KN(rk_v) v, int64_t m) { KN(vout)(p, dt, v, m); }
#else
#define RK_N 8
#define RK_RB 8
#define RK_RB2 0
#define RK_RT 4
typedef float KN(rk_v) __attribute__((vector_size(32)));
CK_AI KN(rk_v) KN(rk_fma)(KN(rk_v) a, KN(rk_v) b, KN(rk_v) c) { return a * b + c; }
CK_AI KN(rk_v) KN(rk_set1)(float x) { return (KN(rk_v)){0} + x; }
/* the first m lanes of p (lanes past m zero): the conversions of src/core, element by element */
CK_AI KN(rk_v) KN(rk_ld)(const void *p, lyco_dtype dt, lyco_dtype T, int64_t m) {
    KN(rk_v) v = {0};
    size_t es = lyco_dtype_size(dt);
    for (int64_t l = 0; l < m; l++) v[l] = dt == LYCO_F32 ? lyco_round_f32(lyco_load_f32((const char *)p + l * es, dt), T)
                                                          : lyco_load_f32((const char *)p + l * es, dt);
    return v;
}
CK_AI void KN(rk_st)(void *p, lyco_dtype dt, KN(rk_v) v, int64_t m) {
    size_t es = lyco_dtype_size(dt);
    for (int64_t l = 0; l < m; l++) lyco_store_f32((char *)p + l * es, dt, v[l]);
}
#endif
CK_AI KN(rk_v) KN(rk_zero)(void) { return KN(rk_set1)(0.0f); }
CK_AI int64_t KN(rk_nk)(const cpu_rot *r) { return r->nk ? r->nk : r->bs; }
CK_AI int64_t KN(rk_es)(lyco_dtype dt) { return dt == LYCO_F32 ? 4 : 2; }

#define RK_16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

/* ---- channel-major ---- */

/* What the k loop branches on; constants where KN(rot_rows) specialises. */
typedef struct {
    lyco_dtype sdt, T;
    bool add;
    bool inl;   /* the ADD epilogue in registers (BOFT's fp32 forms only: keeps the other copies small) */
} KN(rk_form);

/* input row k, columns [j, j + m) */
CK_AI KN(rk_v) KN(rk_in)(const cpu_rot *r, const KN(rk_form) f, int64_t k, int64_t j, int64_t m) {
    KN(rk_v) x = KN(rk_ld)(r->src[k] + j * KN(rk_es)(f.sdt), f.sdt, f.T, m);
    if (f.add) x = x + KN(rk_ld)(r->add[k] + j, LYCO_F32, LYCO_F32, m);
    return x;
}

/* the output value of row i from its sum (rot.h's modes) */
CK_AI KN(rk_v) KN(rk_epi)(const cpu_rot *r, const KN(rk_form) f, int64_t i, int64_t j, int64_t m, KN(rk_v) acc) {
    switch (r->mode) {
    case CPU_ROT_SET:
        if (r->rho) acc = acc * KN(rk_set1)(r->rho[i]);
        return acc;
    case CPU_ROT_DELTA: {
        float p = r->rho ? r->rho[i] : 1.0f;
        return KN(rk_set1)(p) * acc + KN(rk_set1)(p - 1.0f) * KN(rk_in)(r, f, i, j, m);
    }
    default: return KN(rk_ld)(r->base[i] + j, LYCO_F32, LYCO_F32, m) + acc;
    }
}

/* the epilogue of rows [i0, i0 + mr): every value formed, then every row stored (one copy per
   ISA, out of the specialised loops: the rows' sums pass through the stack; inlined per form it
   doubled the object for ~3% of a merge) */
static void KN(rk_finish)(const cpu_rot *r, int64_t i0, int mr, int64_t j, int64_t m, KN(rk_v) *acc) {
    KN(rk_form) f = {r->sdt, r->T, r->add != NULL, false};
    int64_t oes = r->mode == CPU_ROT_ADD ? 4 : KN(rk_es)(r->odt);
    lyco_dtype odt = r->mode == CPU_ROT_ADD ? LYCO_F32 : r->odt;
    for (int p = 0; p < mr; p++) acc[p] = KN(rk_epi)(r, f, i0 + p, j, m, acc[p]);
    for (int p = 0; p < mr; p++) KN(rk_st)(r->dst[i0 + p] + j * oes, odt, acc[p], m);
}

/* rows [i0, i0 + mr) × columns [j, j + m): mr ≤ RK_RB accumulators (a constant after inlining) */
CK_AI void KN(rk_block)(const int mr, const KN(rk_form) f, const cpu_rot *r, int64_t i0, int64_t j, int64_t m) {
#define RK_DECL(p) KN(rk_v) a##p = KN(rk_zero)();
    RK_16(RK_DECL)
#undef RK_DECL
    const float *a = r->A + i0 * r->ai;
    int64_t ai = r->ai, nk = KN(rk_nk)(r);
    for (int64_t k = 0; k < nk; k++) {
        KN(rk_v) x = KN(rk_in)(r, f, k, j, m);
        const float *ak = a + k * r->ak;
#define RK_STEP(p) if (mr > p) a##p = KN(rk_fma)(KN(rk_set1)(ak[p * ai]), x, a##p);
        RK_16(RK_STEP)
#undef RK_STEP
    }
    if (f.inl && r->mode == CPU_ROT_ADD) { /* BOFT's stage update, in registers (a fifth of the stage as a call) */
#define RK_ADD(p) if (mr > p) a##p = KN(rk_ld)(r->base[i0 + p] + j, LYCO_F32, LYCO_F32, m) + a##p;
        RK_16(RK_ADD)
#undef RK_ADD
#define RK_STORE(p) if (mr > p) KN(rk_st)(r->dst[i0 + p] + j * 4, LYCO_F32, a##p, m);
        RK_16(RK_STORE)
#undef RK_STORE
        return;
    }
    KN(rk_v) acc[16];
#define RK_SAVE(p) if (mr > p) acc[p] = a##p;
    RK_16(RK_SAVE)
#undef RK_SAVE
    KN(rk_finish)(r, i0, mr, j, m, acc);
}

/* The in-register ADD form (BOFT) for a whole block of mr = bs ≤ RK_RB2 rows × two full column
   vectors [j, j + 2·RK_N): each broadcast of A(i, k) feeds two FMAs (one per vector), so a k step
   is 2 vector inputs, mr broadcasts and 2·mr FMAs (one vector a step was bound by the loads and
   the address arithmetic of its broadcasts: ~1.2 cycles an FMA). Every sum the same as rk_block's.
   No software prefetch: BOFT's rows are fp32 tile rows of ≤ 256 columns in cache (with it, the
   same time). */
CK_AI void KN(rk_block2)(const int mr, const KN(rk_form) f, const cpu_rot *r, int64_t j) {
#define RK_DECL(p) KN(rk_v) a##p = KN(rk_zero)(), b##p = KN(rk_zero)();
    RK_16(RK_DECL)
#undef RK_DECL
    const float *a = r->A;
    const int64_t ak = r->ak;   /* A(i, k) at a[i + k·ak]: ai = 1 (the caller checks) */
    for (int k = 0; k < mr; k++) {
        KN(rk_v) x = KN(rk_in)(r, f, k, j, RK_N), y = KN(rk_in)(r, f, k, j + RK_N, RK_N);
        const float *ap = a + k * ak;
#define RK_STEP(p) if (mr > p) { KN(rk_v) c = KN(rk_set1)(ap[p]); a##p = KN(rk_fma)(c, x, a##p); b##p = KN(rk_fma)(c, y, b##p); }
        RK_16(RK_STEP)
#undef RK_STEP
    }
#define RK_ADD(p) if (mr > p) { a##p = KN(rk_ld)(r->base[p] + j, LYCO_F32, LYCO_F32, RK_N) + a##p; \
                                b##p = KN(rk_ld)(r->base[p] + j + RK_N, LYCO_F32, LYCO_F32, RK_N) + b##p; }
    RK_16(RK_ADD)
#undef RK_ADD
    char *d[16];   /* the row pointers read before the stores (char stores alias r->dst) */
#define RK_DST(p) if (mr > p) d[p] = r->dst[p] + j * 4;
    RK_16(RK_DST)
#undef RK_DST
#define RK_STORE(p) if (mr > p) { KN(rk_st)(d[p], LYCO_F32, a##p, RK_N); KN(rk_st)(d[p] + RK_N * 4, LYCO_F32, b##p, RK_N); }
    RK_16(RK_STORE)
#undef RK_STORE
}

/* the input and output rows RK_AHEAD columns on, once per cache line of input (the bs rows are as
   many concurrent streams: more than the hardware prefetchers follow). A cold 1280² Diag-OFT
   merge, µs: 1 thread, 512 columns (the old distance) ~780 with bf16 rows, ~1130 with fp32; 64
   columns ~660 and ~780; 2 threads (min), bf16 512 columns 344–348, 64 columns 299–310, fp32 256
   columns 439–450, 64 columns 374 (the lines fetched far ahead, 16 rows × 2 streams of them, left
   L1 before their use; 32 columns was too short). */
#define RK_AHEAD 64
CK_AI void KN(rk_prefetch)(const cpu_rot *r, const KN(rk_form) f, int64_t j) {
    int64_t ies = KN(rk_es)(f.sdt), oes = r->mode == CPU_ROT_ADD ? 4 : KN(rk_es)(r->odt), ahead = j + RK_AHEAD;
    if (r->nk || (j * ies) % 64 >= RK_N * ies) return;   /* nk ≠ 0: short rows in cache (a backward tile) */
    for (int64_t k = 0; k < r->bs; k++) {
        __builtin_prefetch(r->src[k] + ahead * ies, 0, 3);
        __builtin_prefetch(r->dst[k] + ahead * oes, 1, 3);
    }
}

CK_AI void KN(rk_cols)(const cpu_rot *r, const KN(rk_form) f, int64_t w) {
    int64_t j = 0;
    if (f.inl && r->mode == CPU_ROT_ADD && r->bs <= RK_RB2 && r->ai == 1 && !r->nk)
        for (; j + 2 * RK_N <= w; j += 2 * RK_N) {
            switch (r->bs) {
#define RK_CASE(p) case p + 1: if (p < RK_RB2) KN(rk_block2)(p + 1, f, r, j); break;
                RK_16(RK_CASE)
#undef RK_CASE
            default: break;
            }
        }
    for (; j < w; j += RK_N) {
        int64_t m = w - j < RK_N ? w - j : RK_N;
        KN(rk_prefetch)(r, f, j);
        for (int64_t i0 = 0; i0 < r->bs; i0 += RK_RB) {
            int64_t mr = r->bs - i0 < RK_RB ? r->bs - i0 : RK_RB;
            switch (mr) {
#define RK_CASE(p) case p + 1: if (p < RK_RB) KN(rk_block)(p + 1, f, r, i0, j, m); break;
                RK_16(RK_CASE)
#undef RK_CASE
            default: break;
            }
        }
    }
}

/* the common forms get loops of their own (bf16, fp16, fp32 rows; BOFT's X0 + Δ and its backward's
   fp32 ADD rows, both with the epilogue in registers), the rest the
   general one (the portable copy: one loop) */
static void KN(rot_rows)(const cpu_rot *r, int64_t w) {
    KN(rk_form) f = {r->sdt, r->T, r->add != NULL, false};
#if defined(CK_V4) || defined(CK_V3)
    if (!f.add && f.sdt == LYCO_BF16) KN(rk_cols)(r, (KN(rk_form)){LYCO_BF16, LYCO_BF16, false, false}, w);
    else if (!f.add && f.sdt == LYCO_F16) KN(rk_cols)(r, (KN(rk_form)){LYCO_F16, LYCO_F16, false, false}, w);
    else if (f.sdt == LYCO_F32 && f.T == LYCO_F32 && f.add) KN(rk_cols)(r, (KN(rk_form)){LYCO_F32, LYCO_F32, true, true}, w);
    else if (f.sdt == LYCO_F32 && f.T == LYCO_F32 && r->mode == CPU_ROT_ADD) KN(rk_cols)(r, (KN(rk_form)){LYCO_F32, LYCO_F32, false, true}, w);
    else if (f.sdt == LYCO_F32 && f.T == LYCO_F32) KN(rk_cols)(r, (KN(rk_form)){LYCO_F32, LYCO_F32, false, false}, w);
    else KN(rk_cols)(r, f, w);
#else
    KN(rk_cols)(r, f, w);   /* the portable loads convert element by element anyway */
#endif
}

/* ---- token-major ---- */

/* the epilogue of tokens [t0, t0 + mt), channels [c0, c0 + m) of block kk (one copy per ISA) */
static void KN(rt_finish)(const cpu_rot_tok *q, int64_t t0, int mt, int64_t kk, int64_t c0, int64_t m, KN(rk_v) *acc) {
    int64_t bs = q->bs, nc = q->nb * bs, ch = kk * bs + c0, oes = KN(rk_es)(q->odt);
    const float *x = q->X + t0 * nc + ch;
    KN(rk_v) pv = q->rho ? KN(rk_ld)(q->rho + ch, LYCO_F32, LYCO_F32, m) : KN(rk_set1)(1.0f), p1 = pv - KN(rk_set1)(1.0f);
    for (int p = 0; p < mt; p++) {
        KN(rk_v) v = acc[p];
        char *d = q->dst + (t0 + p) * q->dstride + ch * oes;
        if (q->mode == CPU_ROT_DELTA) v = pv * v + p1 * KN(rk_ld)(x + p * nc, LYCO_F32, LYCO_F32, m);
        else if (q->rho) v = v * pv;
        KN(rk_st)(d, q->odt, v, m);
    }
}

/* tokens [t0, t0 + mt) × channels [c0, c0 + m) of block kk: mt ≤ RK_RT accumulators */
CK_AI void KN(rt_block)(const int mt, const cpu_rot_tok *q, int64_t t0, int64_t kk, int64_t c0, int64_t m) {
    int64_t bs = q->bs, nc = q->nb * bs;
    const float *x = q->X + t0 * nc + kk * bs, *op = q->Op + kk * bs * bs + c0;
#define RK_DECL(p) KN(rk_v) a##p, s##p = KN(rk_zero)();
    RK_16(RK_DECL)
#undef RK_DECL
    const int64_t kc = q->kc ? q->kc : bs;
    for (int64_t c = 0; c < bs; c += kc) {   /* chains of kc terms, each from 0, added in order */
#define RK_ZERO(p) a##p = KN(rk_zero)();
        RK_16(RK_ZERO)
#undef RK_ZERO
        for (int64_t k = c, ce = c + kc < bs ? c + kc : bs; k < ce; k++) {
            KN(rk_v) v = KN(rk_ld)(op + k * bs, LYCO_F32, LYCO_F32, m);
#define RK_STEP(p) if (mt > p) a##p = KN(rk_fma)(KN(rk_set1)(x[p * nc + k]), v, a##p);
            RK_16(RK_STEP)
#undef RK_STEP
        }
#define RK_SUM(p) if (mt > p) { if (c) s##p = a##p + s##p; else s##p = a##p; }
        RK_16(RK_SUM)
#undef RK_SUM
    }
    if (q->mode == CPU_ROT_SET && !q->rho) {   /* the plain form stored from registers */
        char *d = q->dst + t0 * q->dstride + (kk * bs + c0) * KN(rk_es)(q->odt);
#define RK_PUT(p) if (mt > p) KN(rk_st)(d + p * q->dstride, q->odt, s##p, m);
        RK_16(RK_PUT)
#undef RK_PUT
        return;
    }
    KN(rk_v) acc[16];
#define RK_SAVE(p) if (mt > p) acc[p] = s##p;
    RK_16(RK_SAVE)
#undef RK_SAVE
    KN(rt_finish)(q, t0, mt, kk, c0, m, acc);
}

static void KN(rot_tokens)(const cpu_rot_tok *q, int64_t w) {
    for (int64_t kk = 0; kk < q->nb; kk++)
        for (int64_t c0 = 0; c0 < q->bs; c0 += RK_N) {
            int64_t m = q->bs - c0 < RK_N ? q->bs - c0 : RK_N;
            for (int64_t t0 = 0; t0 < w; t0 += RK_RT) {
                int64_t mt = w - t0 < RK_RT ? w - t0 : RK_RT;
                switch (mt) {
#define RK_CASE(p) case p + 1: if (p < RK_RT) KN(rt_block)(p + 1, q, t0, kk, c0, m); break;
                    RK_16(RK_CASE)
#undef RK_CASE
                default: break;
                }
            }
        }
}

/* ---- token-major <-> channel-major tiles (the linear bypass's tile I/O: cayley.c) ---- */

#ifdef CK_V4
/* r[i] ← column i of the 16×16 matrix whose rows are r[0..15] */
CK_AI void KN(rk_tr)(__m512 *r) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);      /* rows i, i+1: lanes 0,0',1,1' per 128 */
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);  /* 2,2',3,3' */
    }
    for (int i = 0; i < 16; i += 4)
        for (int h = 0; h < 2; h++) {
            __m512d a = _mm512_castps_pd(t[i + h]), b = _mm512_castps_pd(t[i + 2 + h]);
            u[i + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));      /* column 4q + 2h of rows i..i+3 */
            u[i + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));  /* column 4q + 2h + 1 */
        }
    /* u[4g + c] holds, per 128-bit lane q, column 4q + c of rows 4g..4g+3 */
    for (int c = 0; c < 4; c++) {
        __m512 a0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), a1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
        __m512 b0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88), b1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
        r[c] = _mm512_shuffle_f32x4(a0, b0, 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(a0, b0, 0xdd);
        r[4 + c] = _mm512_shuffle_f32x4(a1, b1, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(a1, b1, 0xdd);
    }
}
#elif defined(CK_V3)
CK_AI void KN(rk_tr)(__m256 *r) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}
#else
CK_AI void KN(rk_tr)(KN(rk_v) *r) {
    for (int i = 0; i < RK_N; i++)
        for (int j = i + 1; j < RK_N; j++) {
            float x = r[i][j];
            r[i][j] = r[j][i];
            r[j][i] = x;
        }
}
#endif

/* X[c·ldx + t] = RN_T(src[t·ld + c]), t < nt, c < nc: RK_N × RK_N blocks through registers (the
   element-by-element transpose wrote X a column at a time, w floats apart: half a bypass) */
static void KN(rot_tr_in)(const char *src, int64_t ld, lyco_dtype sdt, lyco_dtype T, int64_t nt, int64_t nc, float *X, int64_t ldx) {
    int64_t es = KN(rk_es)(sdt);
    for (int64_t c0 = 0; c0 < nc; c0 += RK_N) {
        int64_t mc = nc - c0 < RK_N ? nc - c0 : RK_N;
        for (int64_t t0 = 0; t0 < nt; t0 += RK_N) {
            int64_t mt = nt - t0 < RK_N ? nt - t0 : RK_N;
            KN(rk_v) r[RK_N];
            for (int i = 0; i < RK_N; i++)
                r[i] = i < mt ? KN(rk_ld)(src + ((t0 + i) * ld + c0) * es, sdt, T, mc) : KN(rk_zero)();
            KN(rk_tr)(r);
            for (int c = 0; c < mc; c++) KN(rk_st)(X + (c0 + c) * ldx + t0, LYCO_F32, r[c], mt);
        }
    }
}

/* dst[t·ld + c] = X[c·ldx + t] as odt, t < nt, c < nc */
static void KN(rot_tr_out)(const float *X, int64_t ldx, int64_t nt, int64_t nc, char *dst, int64_t ld, lyco_dtype odt) {
    int64_t es = KN(rk_es)(odt);
    for (int64_t c0 = 0; c0 < nc; c0 += RK_N) {
        int64_t mc = nc - c0 < RK_N ? nc - c0 : RK_N;
        for (int64_t t0 = 0; t0 < nt; t0 += RK_N) {
            int64_t mt = nt - t0 < RK_N ? nt - t0 : RK_N;
            KN(rk_v) r[RK_N];
            for (int i = 0; i < RK_N; i++)
                r[i] = i < mc ? KN(rk_ld)(X + (c0 + i) * ldx + t0, LYCO_F32, LYCO_F32, mt) : KN(rk_zero)();
            KN(rk_tr)(r);
            for (int t = 0; t < mt; t++) KN(rk_st)(dst + ((t0 + t) * ld + c0) * es, odt, r[t], mc);
        }
    }
}

#ifdef CK_V4
/* ---- BOFT's G_N products (rot.h cpu_rot_gn) ---- */

/* Σ_{k ≥ k0} a[k]·b[k] as dense.c's chained tail: from 0, one fused multiply-add per k */
CK_AI float KN(gn_tail)(const float *a, const float *b, int64_t k0, int64_t K) {
    float t = 0.0f;
    for (int64_t k = k0; k < K; k++) t = __builtin_fmaf(a[k], b[k], t);
    return t;
}

/* rows [p0, p0 + P) × column pairs [0, H) (P ≤ 4, H ≤ 6 constants after inlining): dense.c's
   dot_block2 per element — lanes 0–7 output (p, 2h)'s 8 k-lanes, 8–15 output (p, 2h+1)'s —, then
   the tree ((0+1)+(2+3))+((4+5)+(6+7)) of both halves at once in registers (lane i + lane i^1,
   + lane i^2, + the other 128-bit lane: the same additions, commuted), + the tail, + C */
CK_AI void KN(gn_block)(const int P, const int H, int64_t K, const float *const *a, const float *const *b, float *C, int64_t ldc) {
    int64_t K8 = K & ~(int64_t)7;
    __m512 acc[4][6];
    for (int p = 0; p < 4; p++)
        for (int h = 0; h < 6; h++) acc[p][h] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K8; k += 8) {
        __m512 av[4];
        for (int p = 0; p < P; p++) av[p] = _mm512_broadcast_f32x8(_mm256_loadu_ps(a[p] + k));
        for (int h = 0; h < H; h++) {
            __m512 bb = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(b[2 * h] + k)), _mm256_loadu_ps(b[2 * h + 1] + k), 1);
            for (int p = 0; p < P; p++) acc[p][h] = _mm512_fmadd_ps(av[p], bb, acc[p][h]);
        }
    }
    for (int p = 0; p < P; p++)
        for (int h = 0; h < H; h++) {
            __m512 v = acc[p][h];
            v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
            v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
            v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
            float s0 = _mm512_cvtss_f32(v), s1 = _mm_cvtss_f32(_mm512_extractf32x4_ps(v, 2));
            float *c = C + p * ldc + 2 * h;
            float t0 = s0 + KN(gn_tail)(a[p], b[2 * h], K8, K), t1 = s1 + KN(gn_tail)(a[p], b[2 * h + 1], K8, K);
            c[0] = c[0] + t0;
            c[1] = c[1] + t1;
        }
}

/* bs even, ≤ 12 (the caller checks) */
static void KN(rot_gn)(int64_t bs, const float *const *a, const float *const *b, int64_t w, float *C) {
    const int H = (int)(bs / 2);
    for (int64_t p0 = 0; p0 < bs; p0 += 4) {
        int P = bs - p0 < 4 ? (int)(bs - p0) : 4;
#define RK_GN(PP, HH) if (P == PP && H == HH) KN(gn_block)(PP, HH, w, a + p0, b, C + p0 * bs, bs);
#define RK_GN_H(PP) RK_GN(PP, 1) RK_GN(PP, 2) RK_GN(PP, 3) RK_GN(PP, 4) RK_GN(PP, 5) RK_GN(PP, 6)
        RK_GN_H(1) RK_GN_H(2) RK_GN_H(3) RK_GN_H(4)
#undef RK_GN_H
#undef RK_GN
    }
}
#endif

static int64_t KN(rot_rows_max)(void) { return RK_RB; }

#undef RK_16
#undef RK_N
#undef RK_RB
#undef RK_RB2
#undef RK_RT
#undef RK_AHEAD
