/*
 * loha_kern.h — LoHa's fp64 ΔW̄ generator (gen: rectangles of λ·ρ_o·R_1⊙R_2 in 4 × 4 register
 * blocks) and the fp64 dot of G with ΔW̄ rows (dot_rows_d, for G_σs), written once and included by
 * loha.c once per ISA (isa.h): KN(name) = name_v3 under `#pragma GCC target("arch=x86-64-v3")`,
 * name_base for the portable build (both DL = 4 fp64 lanes), and the generator alone again as
 * name_v4 under "arch=x86-64-v4" with DL = 8 lanes (4 × 8 blocks; every element is the same
 * chain of operations at any lane count, so v4's ΔW̄ is bitwise v3's; dot_rows_d sums across
 * lanes and stays 4-lane). Not a public header.
 *
 * Why (docs/bench-cpu.md, "Streaming merges"): as a target_clones (CPU_HOT) function GCC 12 built
 * the 4-lane fp64 vector code of the inlined helpers from 128-bit halves — each B̄ load as two
 * vcvtps2pd xmm + vinsertf128, each coefficient broadcast as vpermpd from one ymm load — which
 * bounded the k loop by shuffles, not by its 4 FMAs. Under the pragma (and with the widening
 * written as _mm256_cvtps_pd, LK_V3): one vcvtps2pd ymm per load and vbroadcastsd from memory. Same operations, same FMA contraction (the v3 copy fuses
 * `a += c·v` as the v3 clone did; the portable copy has no FMA, as the default clone had): the
 * values are bitwise those of the clones.
 * gen32 / block4f: the same generator in fp32 (VF: 2·DL fp32 lanes; coefficients λ·ρ_o·Ā_1 rounded
 * once to fp32) for a merge forward into a 16-bit output without DoRA (loha.c's rule).
 * Expects from loha.c: loha_t, term_t, VD / VFH (DL fp64 / fp32 lanes), VF (2·DL fp32 lanes), DL,
 * cpu_thread_id(). Shapes, tiling and memory: see loha.c.
 */


/* DL floats widened to fp64 (exact): one vcvtps2pd ymm (zmm) in the v3 (v4) build (GCC lowers
   the generic __builtin_convertvector to two 128-bit halves even there) */
static inline __attribute__((always_inline)) VD KN(ld4f)(const float *p) {
#if defined(LK_V3) && DL == 8
    return (VD)_mm512_cvtps_pd(_mm256_loadu_ps(p));
#elif defined(LK_V3)
    return (VD)_mm256_cvtps_pd(_mm_loadu_ps(p));
#else
    VFH v;
    memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, VD);
#endif
}
static inline __attribute__((always_inline)) VD KN(bc4)(double a) {
#if DL == 8
    return (VD){a, a, a, a, a, a, a, a};
#else
    return (VD){a, a, a, a};
#endif
}

/* Coefficients of up to 4 rows o0 … o0+rb, interleaved c[k·4 + i] (rows past rb are zero):
   c1 = λ·ρ_o·Ā_1[o,k], c2 = Ā_2[o,k], in fp64. */
static inline __attribute__((always_inline)) void KN(coefs)(const loha_t *s, int64_t o0, int64_t rb, double lambda, double *c1,
                                                        double *c2) {
    const term_t *t1 = &s->t[0], *t2 = &s->t[1];
    for (int64_t i = 0; i < 4; i++) {
        double f = i < rb ? lambda * s->rhod[o0 + i] : 0.0;
        for (int64_t k = 0; k < t1->r; k++) c1[k * 4 + i] = i < rb ? f * t1->A[(o0 + i) * t1->r + k] : 0.0;
        for (int64_t k = 0; k < t2->r; k++) c2[k * 4 + i] = i < rb ? t2->A[(o0 + i) * t2->r + k] : 0.0;
    }
}

/* The 4 × DL block at columns j … j+DL−1 of those rows: p[i] = (Σ_k c1·B̄_1[k, j…])·(Σ_k c2·B̄_2[k, j…]),
   fp64 register accumulators (8 of them), B̄ converted as it is loaded. */
static inline __attribute__((always_inline)) void KN(block4)(const loha_t *s, int64_t j, const double *c1, const double *c2,
                                                         VD *p) {
    const term_t *t1 = &s->t[0], *t2 = &s->t[1];
    int64_t IK = s->IK;
    VD a0 = KN(bc4)(0), a1 = KN(bc4)(0), a2 = KN(bc4)(0), a3 = KN(bc4)(0), b0 = KN(bc4)(0), b1 = KN(bc4)(0), b2 = KN(bc4)(0), b3 = KN(bc4)(0);
    for (int64_t k = 0; k < t1->r; k++) {
        VD v = KN(ld4f)(t1->B + k * IK + j);
        const double *c = c1 + k * 4;
        a0 += KN(bc4)(c[0]) * v;
        a1 += KN(bc4)(c[1]) * v;
        a2 += KN(bc4)(c[2]) * v;
        a3 += KN(bc4)(c[3]) * v;
    }
    for (int64_t k = 0; k < t2->r; k++) {
        VD v = KN(ld4f)(t2->B + k * IK + j);
        const double *c = c2 + k * 4;
        b0 += KN(bc4)(c[0]) * v;
        b1 += KN(bc4)(c[1]) * v;
        b2 += KN(bc4)(c[2]) * v;
        b3 += KN(bc4)(c[3]) * v;
    }
    p[0] = a0 * b0;
    p[1] = a1 * b1;
    p[2] = a2 * b2;
    p[3] = a3 * b3;
}

/* The 4 × 2·DL block at columns j … j+2·DL−1: 8 accumulators per term (block4's 4 leave the FMA
   units idle half the time on their 4-cycle chains); every element the same chain as block4's. */
static inline __attribute__((always_inline)) void KN(block4x2)(const loha_t *s, int64_t j, const double *c1, const double *c2,
                                                           VD *p) {
    const term_t *t1 = &s->t[0], *t2 = &s->t[1];
    int64_t IK = s->IK;
    VD a[4][2], b[4][2];
    for (int i = 0; i < 4; i++) a[i][0] = a[i][1] = b[i][0] = b[i][1] = KN(bc4)(0);
    for (int64_t k = 0; k < t1->r; k++) {
        VD v0 = KN(ld4f)(t1->B + k * IK + j), v1 = KN(ld4f)(t1->B + k * IK + j + DL);
        const double *c = c1 + k * 4;
        for (int i = 0; i < 4; i++) {
            VD ci = KN(bc4)(c[i]);
            a[i][0] += ci * v0;
            a[i][1] += ci * v1;
        }
    }
    for (int64_t k = 0; k < t2->r; k++) {
        VD v0 = KN(ld4f)(t2->B + k * IK + j), v1 = KN(ld4f)(t2->B + k * IK + j + DL);
        const double *c = c2 + k * 4;
        for (int i = 0; i < 4; i++) {
            VD ci = KN(bc4)(c[i]);
            b[i][0] += ci * v0;
            b[i][1] += ci * v1;
        }
    }
    for (int i = 0; i < 4; i++) {
        p[2 * i] = a[i][0] * b[i][0];
        p[2 * i + 1] = a[i][1] * b[i][1];
    }
}

/* One element (row slot i of the coefficients, column j), scalar fp64: the column tails. */
static inline __attribute__((always_inline)) double KN(elem_d)(const loha_t *s, int64_t i, int64_t j, const double *c1,
                                                           const double *c2) {
    const term_t *t1 = &s->t[0], *t2 = &s->t[1];
    double x1 = 0.0, x2 = 0.0;
    for (int64_t k = 0; k < t1->r; k++) x1 += c1[k * 4 + i] * (double)t1->B[k * s->IK + j];
    for (int64_t k = 0; k < t2->r; k++) x2 += c2[k * 4 + i] * (double)t2->B[k * s->IK + j];
    return x1 * x2;
}

/* Merge forward (s->pf): rows o … o+rb−1 of W and of the output, columns j … j+n−1, prefetched
   (W to read, the output to write), the lines they overlap; the driver uses them after this call. */
static inline __attribute__((always_inline)) void KN(pf_cols)(const loha_t *s, int64_t o, int64_t rb, int64_t j, int64_t n) {
    if (!s->pf) return;
    const cpu_view *w = &s->pfw, *q = &s->pfo;
    for (int64_t i = 0; i < rb; i++) {
        const char *a = w->base + ((o + i) * w->rs + j) * (int64_t)w->es, *e = a + n * (int64_t)w->es;
        for (uintptr_t l = (uintptr_t)a & ~(uintptr_t)63; l < (uintptr_t)e; l += 64) __builtin_prefetch((const void *)l, 0, 3);
        a = q->base + ((o + i) * q->rs + j) * (int64_t)q->es;
        e = a + n * (int64_t)q->es;
        for (uintptr_t l = (uintptr_t)a & ~(uintptr_t)63; l < (uintptr_t)e; l += 64) __builtin_prefetch((const void *)l, 1, 3);
    }
}

/* out[rr·ldo + jj] = rnd(λ·ρ_o·R_1[o,j]·R_2[o,j]) for o = o0+rr < o0+nr, j = j0+jj < j0+nc (trans:
   out[jj·ldo + rr]): the two r-term sums, the Hadamard product and every scale factor in fp64, one
   rounding per element; 4 × DL register blocks. */
static void KN(gen32)(const loha_t *s, int64_t o0, int64_t nr, double lambda, float *out);

static void KN(gen)(const loha_t *s, int64_t o0, int64_t nr, int64_t j0, int64_t nc, double lambda, float *out, int64_t ldo,
                bool trans) {
    if (s->gen32 && !trans && j0 == 0 && nc == s->IK && ldo == s->IK) { /* whole rows of a 16-bit merge output */
        KN(gen32)(s, o0, nr, lambda, out);
        return;
    }
    double *c1 = s->dscr + (size_t)cpu_thread_id() * (size_t)s->dscr_n, *c2 = c1 + 4 * s->t[0].r;
    for (int64_t r0 = 0; r0 < nr; r0 += 4) {
        int64_t rb = nr - r0 < 4 ? nr - r0 : 4;
        KN(coefs)(s, o0 + r0, rb, lambda, c1, c2);
        int64_t jj = 0;
        for (; jj + 2 * DL <= nc; jj += 2 * DL) {
            VD p[8];
            KN(pf_cols)(s, o0 + r0, rb, j0 + jj, 2 * DL);
            KN(block4x2)(s, j0 + jj, c1, c2, p);
            for (int64_t i = 0; i < rb; i++)
                for (int h = 0; h < 2; h++)
                    for (int q = 0; q < DL; q++) {
                        float v = (float)p[2 * i + h][q];
                        if (trans) out[(jj + h * DL + q) * ldo + r0 + i] = v;
                        else out[(r0 + i) * ldo + jj + h * DL + q] = v;
                    }
        }
        for (; jj + DL <= nc; jj += DL) {
            VD p[4];
            KN(block4)(s, j0 + jj, c1, c2, p);
            for (int64_t i = 0; i < rb; i++)
                for (int q = 0; q < DL; q++) {
                    float v = (float)p[i][q];
                    if (trans) out[(jj + q) * ldo + r0 + i] = v;
                    else out[(r0 + i) * ldo + jj + q] = v;
                }
        }
        for (; jj < nc; jj++)
            for (int64_t i = 0; i < rb; i++) {
                float v = (float)KN(elem_d)(s, i, j0 + jj, c1, c2);
                if (trans) out[jj * ldo + r0 + i] = v;
                else out[(r0 + i) * ldo + jj] = v;
            }
    }
}

#if DL == 4
/* Σ_{rr,j} G[rr·IK + j]·ΔW̄[o0+rr, j], all in fp64 (G_σs: a cancelling sum, kept exact-ish). */
static double KN(dot_rows_d)(const loha_t *s, int64_t o0, int64_t nr, const float *G) {
    double *c1 = s->dscr + (size_t)cpu_thread_id() * (size_t)s->dscr_n, *c2 = c1 + 4 * s->t[0].r, tail = 0.0;
    int64_t IK = s->IK;
    VD acc = KN(bc4)(0);
    for (int64_t r0 = 0; r0 < nr; r0 += 4) {
        int64_t rb = nr - r0 < 4 ? nr - r0 : 4;
        KN(coefs)(s, o0 + r0, rb, 1.0, c1, c2);
        int64_t jj = 0;
        for (; jj + 4 <= IK; jj += 4) {
            VD p[4];
            KN(block4)(s, jj, c1, c2, p);
            for (int64_t i = 0; i < rb; i++) acc += KN(ld4f)(G + (r0 + i) * IK + jj) * p[i];
        }
        for (; jj < IK; jj++)
            for (int64_t i = 0; i < rb; i++) tail += (double)G[(r0 + i) * IK + jj] * KN(elem_d)(s, i, jj, c1, c2);
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + tail;
}
#endif

/* ---- fp32 generator: 4 × 2·FL register blocks (FL = 2·DL fp32 lanes), coefficients in fp32 ---- */
#define FL (2 * DL)
static inline __attribute__((always_inline)) VF KN(bcf)(float a) { return (VF){0} + a; }
static inline __attribute__((always_inline)) VF KN(ldf)(const float *p) {
    VF v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* c1 = RN32(λ·ρ_o·Ā_1[o,k]), c2 = Ā_2[o,k] for up to 4 rows, interleaved c[k·4 + i] */
static inline __attribute__((always_inline)) void KN(coefs32)(const loha_t *s, int64_t o0, int64_t rb, double lambda, float *c1,
                                                          float *c2) {
    const term_t *t1 = &s->t[0], *t2 = &s->t[1];
    for (int64_t i = 0; i < 4; i++) {
        double f = i < rb ? lambda * s->rhod[o0 + i] : 0.0;
        for (int64_t k = 0; k < t1->r; k++) c1[k * 4 + i] = i < rb ? (float)(f * t1->A[(o0 + i) * t1->r + k]) : 0.0f;
        for (int64_t k = 0; k < t2->r; k++) c2[k * 4 + i] = i < rb ? t2->A[(o0 + i) * t2->r + k] : 0.0f;
    }
}

/* The 4 × 2·FL block at columns j … j+2·FL−1: 8 accumulators per term, so the FMA chains
   (4-cycle latency, 2 units) keep both units busy — 4 chains stalled them every other cycle. */
static inline __attribute__((always_inline)) void KN(block4f)(const loha_t *s, int64_t j, const float *c1, const float *c2, VF *p) {
    const term_t *t1 = &s->t[0], *t2 = &s->t[1];
    int64_t IK = s->IK;
    VF a[4][2], b[4][2];
    for (int i = 0; i < 4; i++) a[i][0] = a[i][1] = b[i][0] = b[i][1] = KN(bcf)(0);
    for (int64_t k = 0; k < t1->r; k++) {
        VF v0 = KN(ldf)(t1->B + k * IK + j), v1 = KN(ldf)(t1->B + k * IK + j + FL);
        const float *c = c1 + k * 4;
        for (int i = 0; i < 4; i++) {
            VF ci = KN(bcf)(c[i]);
            a[i][0] += ci * v0;
            a[i][1] += ci * v1;
        }
    }
    for (int64_t k = 0; k < t2->r; k++) {
        VF v0 = KN(ldf)(t2->B + k * IK + j), v1 = KN(ldf)(t2->B + k * IK + j + FL);
        const float *c = c2 + k * 4;
        for (int i = 0; i < 4; i++) {
            VF ci = KN(bcf)(c[i]);
            b[i][0] += ci * v0;
            b[i][1] += ci * v1;
        }
    }
    for (int i = 0; i < 4; i++) {
        p[2 * i] = a[i][0] * b[i][0];
        p[2 * i + 1] = a[i][1] * b[i][1];
    }
}

/* rows o0 … o0+nr−1, all IK columns, out[rr·IK + j] (merge forward's row generator) */
static void KN(gen32)(const loha_t *s, int64_t o0, int64_t nr, double lambda, float *out) {
    float *c1 = (float *)(s->dscr + (size_t)cpu_thread_id() * (size_t)s->dscr_n), *c2 = c1 + 4 * s->t[0].r;
    const term_t *t1 = &s->t[0], *t2 = &s->t[1];
    int64_t IK = s->IK;
    for (int64_t r0 = 0; r0 < nr; r0 += 4) {
        int64_t rb = nr - r0 < 4 ? nr - r0 : 4;
        KN(coefs32)(s, o0 + r0, rb, lambda, c1, c2);
        int64_t j = 0;
        for (; j + 2 * FL <= IK; j += 2 * FL) {
            VF p[8];
            KN(pf_cols)(s, o0 + r0, rb, j, 2 * FL);
            KN(block4f)(s, j, c1, c2, p);
            for (int64_t i = 0; i < rb; i++) memcpy(out + (r0 + i) * IK + j, &p[2 * i], 2 * sizeof p[0]);
        }
        for (; j < IK; j++) /* the column tail, the same chain per element in scalars */
            for (int64_t i = 0; i < rb; i++) {
                float x1 = 0.0f, x2 = 0.0f;
                for (int64_t k = 0; k < t1->r; k++) x1 += c1[k * 4 + i] * t1->B[k * IK + j];
                for (int64_t k = 0; k < t2->r; k++) x2 += c2[k * 4 + i] * t2->B[k * IK + j];
                out[(r0 + i) * IK + j] = x1 * x2;
            }
    }
}
#undef FL
