/*
 * loha.c — fused CPU kernels of LoHa (ALGORITHMS.md §2.2): ΔW̄ = s'·q_o·(R_1 ⊙ R_2).
 *
 * Shapes (fp32 compact copies, operands rounded to the compute dtype as they are loaded):
 *   per term t = 1, 2 (ranks r_1 = dims.r, r_2 = dims.r2):
 *     Ā_t (O × r_t)  = A_t (plain), or A_tᵀ (Tucker: A_t is r_t × O)
 *     B̄_t (r_t × IK) = B_t (plain), or P_t[i, c·K+κ] = Σ_j T_t[i,j,κ]·B_t[j,c] (Tucker, formed once
 *                      in fp64, rounded once)
 *     R_t = Ā_t · B̄_t   (O × IK; never formed whole)
 *   ρ_o = s'·q_o (O): s' = s, or s² with LYCO_FLAG_UPSTREAM_MERGE_SCALE in merge (the driver then
 *         skips σs); q_o the output-row rank mask (merge and bypass alike, §1.7).
 *
 * Generator: a rectangle λ·ΔW̄[o0:o0+nr, j0:j0+nc] (λ = 1 in merge, m·σs in bypass) in 4 × 4
 *   register blocks: per block 8 fp64 vector accumulators (4 rows × 2 terms) over k, B̄_t converted
 *   as loaded, coefficients λ·ρ_o·Ā_1 and Ā_2 in fp64, the Hadamard product in registers, one
 *   rounding per element on the way out. fp64 because ΔW̄ is a product of two sums with heavy-tailed
 *   elements: fp32 sums left the largest elements 3–4 u off (17 ULP of the RMS against a 12.7
 *   budget); the cost is O·IK·(r_1+r_2) fp64 FMAs per pass (3072², r = 16: ~70 ms on 2 cores, merge
 *   fwd), small next to the bypass GEMMs.
 * merge fwd : rows of ΔW̄ from the generator, fed to the shared driver (merge.c: m, σs, DoRA, modes).
 * merge bwd : G = ∂L/∂(ΔW̄ rows); per RMAX × CW chunk: R_1, R_2 recomputed (fp32 GEMMs, cpu_gemm_*),
 *             G_R1 = G·ρ ⊙ R_2,
 *             G_R2 = G·ρ ⊙ R_1; G_Ā_t rows += G_Rt · B̄_tᵀ (rows owned by the block),
 *             G_B̄_t += Ā_t[rows]ᵀ · G_Rt (partials per fixed run of row blocks — the driver's groups,
 *             at most CPU_RUNS_BIG — reduced in run order: independent of the thread count; the bypass
 *             backward's likewise per fixed run of row blocks).
 *             Tucker (the correct adjoint): G_A_t = (G_Ā_t)ᵀ, G_P_t = G_B̄_t,
 *             G_B_t[j,c] = Σ_{i,κ} T_t[i,j,κ]·G_P_t[i,c·K+κ], G_T_t[i,j,κ] = Σ_c G_P_t[i,c·K+κ]·B_t[j,c].
 * bypass fwd (linear): LoHa has no cheap factorised form here, so ΔW tiles are generated on the fly:
 *             per block of OB output rows (a thread's unit), E = m·σs·ΔW̄[rows] (OB × I) is made
 *             once in the thread's cache, then y[:, rows] = y0[:, rows] + x·Eᵀ for all tokens in
 *             TB-token tiles. Tiling rule: ΔW is generated exactly once; x is streamed once per row
 *             block (O/OB passes over x, each element loaded feeds 2·OB flops; the TB × I tile and
 *             the OB × I block stay in L2 for I up to ~4096).
 * bypass bwd (linear): pass 1 (parameter grads), per block of OB rows: G_E = dy[:, rows]ᵀ·x over all
 *             tokens (OB × I, the block's rows only, never the whole gradient), then
 *             G_ΔW̄ rows = m·σs·G_E chained exactly as merge bwd; G_σs = m·⟨G_E, ΔW̄ rows⟩ with the
 *             block's ΔW̄ rows regenerated in fp64 and summed in fp64 (only when asked: the fp32
 *             rounding of ΔW̄ would dominate this cancelling sum; cost O·I·(r_1+r_2) fp64 FMAs);
 *             pass 2 (dx), per block of CB input columns: E[:, cols]ᵀ (CB × O) generated once, then
 *             dx[:, cols] = dy·E[:, cols] for all tokens as dot products over O (cpu_gemm_nt: 8-lane
 *             partial sums, so the O-long reduction stays within budget; dy streamed once per block).
 *             No cross-thread reduction touches x- or dx-sized data.
 * Conv bypass (with or without DoRA) and DoRA in bypass on linear layers: dense_bypass.c, through
 * E = W'' − W built by the merge driver from this file's row generator.
 *
 * Extra memory: Ā_t, B̄_t (O·(r_1+r_2) + (r_1+r_2)·IK floats in the calling thread's kept block,
 * kept.c: held after the call for the thread's next one; Tucker also B_t, T_t), ρ (O);
 * per thread 4·(r_1+r_2) generator doubles; bwd: 3·RMAX·CW floats per thread, G_Ā_t (O·(r_1+r_2))
 * and G_B̄_t partials (max(nt, runs)·(r_1+r_2)·IK); bypass per thread OB·I + TB·(I + OB) (fwd and
 * pass 1), pass 2 O·CB + TB·(O + CB).
 */
#include <stdio.h>
#include <stdlib.h>

#include "cpu.h"
#include "isa.h"

#define RMAX 8   /* merge bwd: rows per chunk */
#define CW 256   /* merge bwd: columns per chunk */
#define OB 32    /* bypass: output rows per block (at most) */
#define TB 32    /* bypass: tokens per tile */
#define CB 32    /* bypass bwd dx pass: input columns per block */

typedef struct {
    int64_t r;
    lyco_slot sa, sb, st;
    float *A;       /* Ā: O × r */
    float *B;       /* B̄: r × IK */
    float *Braw;    /* Tucker: B_t (r × I) */
    float *T;       /* Tucker: T_t (r × r × K) */
    float *gA;      /* O × r */
    float *gB;      /* nt × r × IK partials */
} term_t;

typedef struct {
    const lyco_call *c;
    int64_t O, I, K, IK;
    term_t t[2];
    float *fac;     /* Ā_t and B̄_t of both terms in one block (cpu_kept_get: reused by the thread's next call) */
    float *rho;     /* O: s'·q_o */
    double *rhod;   /* O: s'·q_o in fp64 */
    float *scr;     /* np × 3·RMAX·CW (merge bwd) */
    double *dscr;   /* nt × dscr_n: the fp64 generator's coefficients 4·(r_1 + r_2) */
    int64_t dscr_n;
    int nt;
    int runs;       /* merge backward: the driver's fixed runs of row blocks (cpu_delta.groups) */
    int np;         /* gradient partial and scratch slots: max(nt, runs) */
    bool gen32;     /* merge forward into a 16-bit output without DoRA: gen takes the fp32 generator */
    bool pf;        /* merge forward, W and the output in compact rows: gen prefetches the rows it makes */
    cpu_view pfw, pfo;   /* their views */
} loha_t;

static float mask_at(const lyco_call *c, int64_t i) {
    const DLTensor *q = c->a->tensor[LYCO_RANK_MASK];
    return q ? lyco_load_f32(lyco_elem_at(q, i), lyco_dtype_of(q)) : 1.0f;
}

static float *alloc_f(int64_t n) { return calloc((size_t)(n > 0 ? n : 0) + 1, sizeof(float)); }

static void loha_free(loha_t *s) {
    for (int w = 0; w < 2; w++) {
        term_t *t = &s->t[w];
        free(t->Braw);
        free(t->T);
        free(t->gA);
        free(t->gB);
    }
    cpu_kept_put(s->fac);
    free(s->rho);
    free(s->rhod);
    free(s->dscr);
    free(s->scr);
}

/* Ā_t (O × r_t) and B̄_t (r_t × IK) of both terms as one block (written whole by the loads in
   loha_prepare, so only the slack floats are zeroed): one kept block per thread instead of four mallocs whose frees
   trimmed the heap and cost ~130 page faults a call (kept.c). */
static int64_t pad16(int64_t n) { return (n + 15) & ~(int64_t)15; }

static bool fac_block(loha_t *s, int64_t r1, int64_t r2) {
    int64_t r[2] = {r1, r2}, n = 0;
    for (int w = 0; w < 2; w++) n += pad16(s->O * r[w] + 1) + pad16(r[w] * s->IK + 1);
    s->fac = cpu_kept_get((size_t)n);
    if (!s->fac) return false;
    float *p = s->fac;   /* each array 64-byte aligned (as the block), then at least one float of slack, zero as alloc_f's */
    for (int w = 0; w < 2; w++) {
        s->t[w].r = r[w];
        s->t[w].A = p;
        p[s->O * r[w]] = 0.0f;
        p += pad16(s->O * r[w] + 1);
        s->t[w].B = p;
        p[r[w] * s->IK] = 0.0f;
        p += pad16(r[w] * s->IK + 1);
    }
    return true;
}

/* A merge forward's generator prefetches the W and output rows of the block it makes (merge.c's
   driver reads W and writes the output right after, row by row: 2.5–5 KB rows from DRAM, which
   stalled the driver's loads — ~25 % of the generator's time at 1280², r32, cache swept). Compact
   rows only (cpu_view fast); not for DoRA (the driver's kernels prefetch their own). */
static void prefetch_views(const lyco_call *c, loha_t *s) {
    if (c->dir != LYCO_DIR_MERGE_FWD || c->dims.dora || !c->merge->weight || !c->out) return;
    cpu_view_init(&s->pfw, c->merge->weight, 1);
    cpu_view_init(&s->pfo, c->out, 1);
    s->pf = s->pfw.fast && s->pfo.fast;
}

static lyco_status loha_prepare(const lyco_call *c, loha_t *s, bool grads) {
    memset(s, 0, sizeof *s);
    const lyco_dims *d = &c->dims;
    lyco_dtype T = c->dt.compute;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    bool compat = !bypass && (c->a->flags & LYCO_FLAG_UPSTREAM_MERGE_SCALE);
    s->c = c;
    s->O = d->O;
    s->I = d->I;
    s->K = d->K;
    s->IK = d->I * d->K;
    s->nt = cpu_threads();
    /* merge backward's G_B̄ partials per fixed run (independent of the thread count), at most
       2^24 floats of them */
    int64_t per_run = (d->r + (d->r2 > 0 ? d->r2 : d->r)) * s->IK, cap = CPU_RUN_FLOATS / (per_run > 0 ? per_run : 1);
    s->runs = cpu_runs(CPU_RUNS_BIG, cap < CPU_RUNS_BIG ? cap : CPU_RUNS_BIG);
    s->np = s->nt > s->runs ? s->nt : s->runs;
    /* A merge forward into a 16-bit output without DoRA generates ΔW̄ in fp32 (~1e-7 relative
       against the output's half-ULP of 2^-9 / 2^-12; 2·DL lanes and no conversions: about half the
       fp64 generator's time). fp32 outputs and DoRA (whose norms sum the elements) keep fp64. */
    s->gen32 = c->dir == LYCO_DIR_MERGE_FWD && !d->dora && c->out && lyco_dtype_of(c->out) != LYCO_F32;
    prefetch_views(c, s);
    s->rho = alloc_f(s->O);
    s->rhod = calloc((size_t)s->O + 1, sizeof(double));
    s->dscr_n = 4 * (d->r + (d->r2 > 0 ? d->r2 : d->r));
    s->dscr = calloc((size_t)s->nt * (size_t)s->dscr_n + 1, sizeof(double));
    s->scr = alloc_f((int64_t)s->np * 3 * RMAX * CW);
    if (!s->rho || !s->rhod || !s->dscr || !s->scr) return lyco_fail(LYCO_ERR_NOMEM, "cpu loha: out of memory");
    if (!fac_block(s, d->r, d->r2 > 0 ? d->r2 : d->r)) return lyco_fail(LYCO_ERR_NOMEM, "cpu loha: out of memory");
    for (int w = 0; w < 2; w++) {
        term_t *t = &s->t[w];
        t->sa = w ? LYCO_HADA_W2_A : LYCO_HADA_W1_A;
        t->sb = w ? LYCO_HADA_W2_B : LYCO_HADA_W1_B;
        t->st = w ? LYCO_HADA_T2 : LYCO_HADA_T1;
        int64_t r = t->r;
        if (!d->tucker) {
            cpu_load_all(c->a->tensor[t->sa], T, t->A);
            cpu_load_all(c->a->tensor[t->sb], T, t->B);
        } else {
            float *At = alloc_f(r * s->O);
            t->Braw = alloc_f(r * s->I);
            t->T = alloc_f(r * r * s->K);
            if (!At || !t->Braw || !t->T) {
                free(At);
                return lyco_fail(LYCO_ERR_NOMEM, "cpu loha: out of memory");
            }
            cpu_load_all(c->a->tensor[t->sa], T, At);
            cpu_load_all(c->a->tensor[t->sb], T, t->Braw);
            cpu_load_all(c->a->tensor[t->st], T, t->T);
            for (int64_t i = 0; i < r; i++)
                for (int64_t o = 0; o < s->O; o++) t->A[o * r + i] = At[i * s->O + o];
            free(At);
            /* P[i, c·K+κ] = Σ_j T[i,j,κ]·B[j,c] */
            int64_t I = s->I, K = s->K;
            for (int64_t i = 0; i < r; i++)
                for (int64_t ch = 0; ch < I; ch++)
                    for (int64_t k = 0; k < K; k++) {
                        double acc = 0.0; /* small (r²·I·K): fp64, rounded once */
                        for (int64_t j = 0; j < r; j++) acc += (double)t->T[(i * r + j) * K + k] * t->Braw[j * I + ch];
                        t->B[i * s->IK + ch * K + k] = (float)acc;
                    }
        }
        if (grads) {
            t->gA = alloc_f(s->O * r);
            t->gB = alloc_f((int64_t)s->np * r * s->IK);
            if (!t->gA || !t->gB) return lyco_fail(LYCO_ERR_NOMEM, "cpu loha: out of memory for gradient partials");
        }
    }
    double sp = compat ? c->s * c->s : c->s;
    for (int64_t o = 0; o < s->O; o++) {
        s->rhod[o] = sp * (double)mask_at(c, o);
        s->rho[o] = (float)s->rhod[o];
    }
    return LYCO_OK;
}

typedef double v4d __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

typedef double v8d __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));

/* ---- the generator kernels, once per ISA (isa.h, loha_kern.h) ---- */
#ifdef CPU_V4
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v4")
#define KN(name) name##_v4
#define LK_V3 1
#define VD v8d
#define VFH v8f
#define VF v16f
#define DL 8
#include "loha_kern.h"
#undef DL
#undef VF
#undef VFH
#undef VD
#undef LK_V3
#undef KN
#pragma GCC pop_options
#endif
#define VD v4d
#define VFH v4f
#define VF v8f
#define DL 4
#ifdef CPU_V3
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v3")
#define KN(name) name##_v3
#define LK_V3 1
#include "loha_kern.h"
#undef LK_V3
#undef KN
#pragma GCC pop_options
#endif
#define KN(name) name##_base
#include "loha_kern.h"
#undef KN
#undef DL
#undef VF
#undef VFH
#undef VD

static void gen(const loha_t *s, int64_t o0, int64_t nr, int64_t j0, int64_t nc, double lambda, float *out, int64_t ldo,
                bool trans) {
    CPU_DISPATCH(gen, s, o0, nr, j0, nc, lambda, out, ldo, trans);
}

static double dot_rows_d(const loha_t *s, int64_t o0, int64_t nr, const float *G) {
#ifdef CPU_V3
    if (cpu_have_v3()) return dot_rows_d_v3(s, o0, nr, G);
#endif
    return dot_rows_d_base(s, o0, nr, G);
}

/* G (nr × IK) = ∂L/∂(ΔW̄ rows o0…); G_Ā rows (owned) and the G_B̄ partials of slot `tid` (merge: the
   driver's run; bypass: the thread). */
CPU_HOT
static void grad_rows(const loha_t *s, int64_t o0, int64_t nr, const float *G, int tid) {
    const term_t *t1 = &s->t[0], *t2 = &s->t[1];
    int64_t IK = s->IK;
    float *R1 = s->scr + (size_t)tid * 3 * RMAX * CW, *R2 = R1 + RMAX * CW, *GR = R2 + RMAX * CW;
    float *gB1 = t1->gB + (size_t)tid * (size_t)(t1->r * IK), *gB2 = t2->gB + (size_t)tid * (size_t)(t2->r * IK);
    for (int64_t g0 = 0; g0 < nr; g0 += RMAX) {
        int64_t gr = nr - g0 < RMAX ? nr - g0 : RMAX, o = o0 + g0;
        for (int64_t c0 = 0; c0 < IK; c0 += CW) {
            int64_t cw = IK - c0 < CW ? IK - c0 : CW;
            bool acc = c0 > 0;
            cpu_gemm_nn(gr, cw, t1->r, t1->A + o * t1->r, t1->r, t1->B + c0, IK, R1, CW, false);
            cpu_gemm_nn(gr, cw, t2->r, t2->A + o * t2->r, t2->r, t2->B + c0, IK, R2, CW, false);
            /* term 1: G_R1 = G·ρ ⊙ R_2 */
            for (int64_t rr = 0; rr < gr; rr++) {
                float f = s->rho[o + rr];
                const float *g = G + (g0 + rr) * IK + c0, *r2 = R2 + rr * CW;
                float *gr1 = GR + rr * CW;
                for (int64_t j = 0; j < cw; j++) gr1[j] = g[j] * f * r2[j];
            }
            cpu_gemm_nt(gr, t1->r, cw, GR, CW, t1->B + c0, IK, t1->gA + o * t1->r, t1->r, acc);
            cpu_gemm_tn(t1->r, cw, gr, t1->A + o * t1->r, t1->r, GR, CW, gB1 + c0, IK, true);
            /* term 2: G_R2 = G·ρ ⊙ R_1 */
            for (int64_t rr = 0; rr < gr; rr++) {
                float f = s->rho[o + rr];
                const float *g = G + (g0 + rr) * IK + c0, *r1 = R1 + rr * CW;
                float *gr2 = GR + rr * CW;
                for (int64_t j = 0; j < cw; j++) gr2[j] = g[j] * f * r1[j];
            }
            cpu_gemm_nt(gr, t2->r, cw, GR, CW, t2->B + c0, IK, t2->gA + o * t2->r, t2->r, acc);
            cpu_gemm_tn(t2->r, cw, gr, t2->A + o * t2->r, t2->r, GR, CW, gB2 + c0, IK, true);
        }
    }
}

/* Reduces the G_B̄ partials in slot order, chains (Tucker) and stores every wanted gradient. */
static lyco_status store_grads(const loha_t *s) {
    const lyco_call *c = s->c;
    if (!c->g) return LYCO_OK;
    int64_t IK = s->IK, I = s->I, K = s->K, O = s->O;
    for (int w = 0; w < 2; w++) {
        const term_t *t = &s->t[w];
        int64_t r = t->r, nB = r * IK;
        float *gB = t->gB;
        for (int th = 1; th < s->np; th++)
            for (int64_t n = 0; n < nB; n++) gB[n] += t->gB[(size_t)th * (size_t)nB + n];
        if (!c->dims.tucker) {
            if (c->g->grad[t->sa]) cpu_store_all(c->g->grad[t->sa], t->gA);
            if (c->g->grad[t->sb]) cpu_store_all(c->g->grad[t->sb], gB);
            continue;
        }
        float *tmp = alloc_f(r * (O > r * K ? O : r * K) + r * I);
        if (!tmp) return lyco_fail(LYCO_ERR_NOMEM, "cpu loha: out of memory");
        if (c->g->grad[t->sa]) { /* G_A = G_Āᵀ (r × O) */
            for (int64_t i = 0; i < r; i++)
                for (int64_t o = 0; o < O; o++) tmp[i * O + o] = t->gA[o * r + i];
            cpu_store_all(c->g->grad[t->sa], tmp);
        }
        if (c->g->grad[t->st]) { /* G_T[i,j,κ] = Σ_c G_P[i,c·K+κ]·B[j,c] */
            for (int64_t i = 0; i < r; i++)
                for (int64_t j = 0; j < r; j++)
                    for (int64_t k = 0; k < K; k++) {
                        float acc = 0.0f;
                        for (int64_t ch = 0; ch < I; ch++) acc += gB[i * IK + ch * K + k] * t->Braw[j * I + ch];
                        tmp[(i * r + j) * K + k] = acc;
                    }
            cpu_store_all(c->g->grad[t->st], tmp);
        }
        if (c->g->grad[t->sb]) { /* G_B[j,c] = Σ_{i,κ} T[i,j,κ]·G_P[i,c·K+κ] */
            for (int64_t j = 0; j < r; j++)
                for (int64_t ch = 0; ch < I; ch++) {
                    float acc = 0.0f;
                    for (int64_t i = 0; i < r; i++)
                        for (int64_t k = 0; k < K; k++) acc += t->T[(i * r + j) * K + k] * gB[i * IK + ch * K + k];
                    tmp[j * I + ch] = acc;
                }
            cpu_store_all(c->g->grad[t->sb], tmp);
        }
        free(tmp);
    }
    return LYCO_OK;
}

/* ---- merge: the driver's callbacks ---- */

static void rows(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, float *out) {
    (void)W;
    const loha_t *s = dl->state;
    gen(s, o0, nr, 0, s->IK, 1.0, out, s->IK, false);
}

static void rows_bwd(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, const float *G, int tid) {
    (void)W;
    grad_rows(dl->state, o0, nr, G, tid);
}

static lyco_status finish_bwd(const cpu_delta *dl) { return store_grads(dl->state); }

/* ---- bypass, linear layers ---- */

/* rows per block: at most OB, fewer when that leaves threads idle (the sums do not depend on it) */
static int64_t row_block(int64_t O, int nt) {
    int64_t ob = (O + nt - 1) / nt;
    ob = (ob + 3) & ~(int64_t)3;
    return ob < 4 ? 4 : ob > OB ? OB : ob;
}

static lyco_status bypass_fwd(const lyco_call *c, loha_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *b = c->bypass;
    int64_t N = c->tokens, I = s->I, O = s->O, ob = row_block(O, s->nt), nblocks = (O + ob - 1) / ob;
    cpu_view xv, y0v, yv;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&yv, c->y, c->y->ndim - 1);
    bool add = b->y0 && !(b->flags & LYCO_BYPASS_DELTA_ONLY);
    if (add) cpu_view_init(&y0v, b->y0, b->y0->ndim - 1);
    double lambda = c->m * (double)cpu_sigma(c);
    size_t per = (size_t)(ob * I + TB * I + TB * ob);
    float *work = alloc_f((int64_t)s->nt * (int64_t)per);
    if (!work) return lyco_fail(LYCO_ERR_NOMEM, "cpu loha bypass: out of memory");
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        float *E = work + (size_t)cpu_thread_id() * per, *x = E + ob * I, *y = x + TB * I;
        int64_t o0 = blk * ob, nr = O - o0 < ob ? O - o0 : ob;
        gen(s, o0, nr, 0, I, lambda, E, I, false);
        for (int64_t t0 = 0; t0 < N; t0 += TB) {
            int64_t nt = N - t0 < TB ? N - t0 : TB;
            for (int64_t t = 0; t < nt; t++) cpu_load(&xv, t0 + t, 0, I, T, x + t * I);
            if (add)
                for (int64_t t = 0; t < nt; t++) cpu_load(&y0v, t0 + t, o0, nr, T, y + t * nr);
            cpu_gemm_nt(nt, nr, I, x, I, E, I, y, nr, add);
            for (int64_t t = 0; t < nt; t++) cpu_store(&yv, t0 + t, o0, nr, y + t * nr);
        }
    }
    free(work);
    return LYCO_OK;
}

static bool wants_any(const lyco_call *c) {
    if (!c->g) return false;
    for (int sl = 0; sl < LYCO_SLOT_COUNT; sl++)
        if (c->g->grad[sl]) return true;
    return false;
}

static lyco_status bypass_bwd(const lyco_call *c, loha_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *b = c->bypass;
    int64_t N = c->tokens, I = s->I, O = s->O;
    int nth = s->nt;
    cpu_view xv, dyv, dxv, dy0v;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&dyv, c->dy, c->dy->ndim - 1);
    if (c->dx) cpu_view_init(&dxv, c->dx, c->dx->ndim - 1);
    if (c->dy0) cpu_view_init(&dy0v, c->dy0, c->dy0->ndim - 1);
    float sig = cpu_sigma(c), f = (float)(c->m * (double)sig);
    bool delta_only = b->flags & LYCO_BYPASS_DELTA_ONLY;
    lyco_status st = LYCO_OK;
    /* pass 1: parameter gradients, per block of output rows */
    if (wants_any(c)) {
        bool want_sig = c->g->grad[LYCO_SCALAR] != NULL;
        /* blocks and runs fixed by the shape (row_block for 16 nominal threads: OB rows from O ≥
           16·OB = 512, as up to 16 threads gave before), partials per run: G_B̄ and G_σs do not
           depend on the thread count */
        int64_t ob = row_block(O, 16), nblocks = (O + ob - 1) / ob;
        const int runs = cpu_runs(nblocks, s->runs);
        size_t per = (size_t)(ob * I + TB * I + TB * ob);
        float *work = alloc_f((int64_t)nth * (int64_t)per);
        double *gsig = calloc((size_t)runs, sizeof(double));
        if (!work || !gsig) {
            free(work);
            free(gsig);
            return lyco_fail(LYCO_ERR_NOMEM, "cpu loha bypass: out of memory");
        }
#pragma omp parallel for schedule(static)
        for (int run = 0; run < runs; run++)
        for (int64_t blk = cpu_run_start(nblocks, runs, run); blk < cpu_run_start(nblocks, runs, run + 1); blk++) {
            int tid = cpu_thread_id();
            float *GE = work + (size_t)tid * per, *x = GE + ob * I, *gy = x + TB * I;
            int64_t o0 = blk * ob, nr = O - o0 < ob ? O - o0 : ob;
            memset(GE, 0, sizeof(float) * (size_t)(nr * I));
            for (int64_t t0 = 0; t0 < N; t0 += TB) {
                int64_t nt = N - t0 < TB ? N - t0 : TB;
                for (int64_t t = 0; t < nt; t++) {
                    cpu_load(&xv, t0 + t, 0, I, T, x + t * I);
                    cpu_load(&dyv, t0 + t, o0, nr, T, gy + t * nr);
                }
                cpu_gemm_tn(nr, I, nt, gy, nr, x, I, GE, I, true);     /* G_E += dyᵀ·x */
            }
            if (want_sig) { /* G_σs = m·⟨G_E, ΔW̄ rows⟩ with the rows in fp64 (their fp32 rounding would
                               dominate a cancelling sum), summed in fp64 */
                gsig[run] += dot_rows_d(s, o0, nr, GE);
            }
            /* ∂L/∂ΔW̄ rows = m·σs·G_E */
            for (int64_t n = 0; n < nr * I; n++) GE[n] *= f;
            grad_rows(s, o0, nr, GE, run);
        }
        st = store_grads(s);
        if (st == LYCO_OK && want_sig) {
            double sum = 0.0;
            for (int th = 0; th < runs; th++) sum += gsig[th];
            float tot = (float)(sum * c->m);
            cpu_store_all(c->g->grad[LYCO_SCALAR], &tot);
        }
        free(work);
        free(gsig);
        if (st) return st;
    }
    /* pass 2: dx, per block of input columns */
    if (c->dx) {
        int64_t nblocks = (I + CB - 1) / CB;
        size_t per = (size_t)(O * CB + TB * O + TB * CB);
        float *work = alloc_f((int64_t)nth * (int64_t)per);
        if (!work) return lyco_fail(LYCO_ERR_NOMEM, "cpu loha bypass: out of memory");
#pragma omp parallel for schedule(static)
        for (int64_t blk = 0; blk < nblocks; blk++) {
            float *ET = work + (size_t)cpu_thread_id() * per, *gy = ET + O * CB, *dx = gy + TB * O;
            int64_t j0 = blk * CB, nc = I - j0 < CB ? I - j0 : CB;
            gen(s, 0, O, j0, nc, c->m * (double)sig, ET, O, true);                /* E[:, cols]ᵀ (nc × O) */
            for (int64_t t0 = 0; t0 < N; t0 += TB) {
                int64_t nt = N - t0 < TB ? N - t0 : TB;
                for (int64_t t = 0; t < nt; t++) cpu_load(&dyv, t0 + t, 0, O, T, gy + t * O);
                cpu_gemm_nt(nt, nc, O, gy, O, ET, O, dx, nc, false);   /* dx = dy·E[:, cols]: dots over O */
                for (int64_t t = 0; t < nt; t++) cpu_store(&dxv, t0 + t, j0, nc, dx + t * nc);
            }
        }
        free(work);
    }
    /* dy0 = dy (y = y0 + Δ), or 0 when y = Δ alone */
    if (c->dy0) {
        float *row = alloc_f((int64_t)nth * O);
        if (!row) return lyco_fail(LYCO_ERR_NOMEM, "cpu loha bypass: out of memory");
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < N; t++) {
            float *r = row + (size_t)cpu_thread_id() * (size_t)O;
            if (delta_only) memset(r, 0, sizeof(float) * (size_t)O);
            else cpu_load(&dyv, t, 0, O, T, r);
            cpu_store(&dy0v, t, 0, O, r);
        }
        free(row);
    }
    return st;
}

static void zero_tensor(DLTensor *t) {
    int64_t n = lyco_numel(t);
    for (int64_t i = 0; i < n; i++) lyco_store_f32(lyco_elem_at(t, i), lyco_dtype_of(t), 0.0f);
}

/* Module dropped in bypass: Δ = 0, so y = y0 (or 0), dx = 0, dy0 = dy (or 0), gradients 0. */
static void bypass_dropped(const lyco_call *c) {
    const lyco_bypass_args *b = c->bypass;
    bool delta_only = b->flags & LYCO_BYPASS_DELTA_ONLY;
    if (c->dir == LYCO_DIR_BYPASS_FWD) {
        bool add = b->y0 && !delta_only;
        int64_t n = lyco_numel(c->y);
        for (int64_t i = 0; i < n; i++)
            lyco_store_f32(lyco_elem_at(c->y, i), lyco_dtype_of(c->y),
                           add ? lyco_round_f32(lyco_load_f32(lyco_elem_at(b->y0, i), lyco_dtype_of(b->y0)), c->dt.compute) : 0.0f);
        return;
    }
    if (c->dx) zero_tensor(c->dx);
    if (c->dy0)
        for (int64_t i = 0; i < lyco_numel(c->dy0); i++)
            lyco_store_f32(lyco_elem_at(c->dy0, i), lyco_dtype_of(c->dy0),
                           delta_only ? 0.0f : lyco_round_f32(lyco_load_f32(lyco_elem_at(c->dy, i), lyco_dtype_of(c->dy)), c->dt.compute));
    if (c->g)
        for (int sl = 0; sl < LYCO_SLOT_COUNT; sl++)
            if (c->g->grad[sl]) zero_tensor(c->g->grad[sl]);
}

lyco_status cpu_loha(const lyco_call *c, char *why, size_t why_len) {
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    if (c->a->layer.kind == LYCO_LAYER_CONV && c->a->layer.groups != 1) {
        snprintf(why, why_len, "cpu: loha with grouped conv (groups = %lld) has no fused CPU kernel", (long long)c->a->layer.groups);
        return LYCO_ERR_UNSUPPORTED;
    }
    if (bypass && c->dropped) {
        bypass_dropped(c);
        return LYCO_OK;
    }
    bool grads = c->dir == LYCO_DIR_MERGE_BWD || c->dir == LYCO_DIR_BYPASS_BWD;
    bool dense = c->dims.dora || c->a->layer.kind == LYCO_LAYER_CONV; /* bypass through E = W'' − W */
    loha_t s;
    lyco_status st = loha_prepare(c, &s, grads);
    if (st == LYCO_OK) {
        cpu_delta dl = {.rows = rows, .rows_bwd = rows_bwd, .finish_bwd = finish_bwd, .c = c, .state = &s, .uses_sigma = true,
                        .groups = s.runs};
        switch (c->dir) {
        case LYCO_DIR_MERGE_FWD: st = cpu_merge_fwd(c, &dl); break;
        case LYCO_DIR_MERGE_BWD: st = cpu_merge_bwd(c, &dl); break;
        case LYCO_DIR_BYPASS_FWD: st = dense ? cpu_bypass_dense(c, &dl) : bypass_fwd(c, &s); break;
        default: st = dense ? cpu_bypass_dense(c, &dl) : bypass_bwd(c, &s); break;
        }
    }
    loha_free(&s);
    return st;
}
