/*
 * lokr.c — fused CPU kernels of LoKr (ALGORITHMS.md §2.3): ΔW̄ = s'·q_o·(W1 ⊗ W2).
 *
 * Shapes (operands rounded to the compute dtype as they are loaded). The halves are small, so they
 * and their gradient chains are formed in fp64 (negligible cost) and rounded once to fp32:
 *   W1 (a × c)  = lokr_w1, or w1_a (a×r) · w1_b (r×c)
 *   W2 (b × dK) = lokr_w2, or w2_a (b×r) · w2_b (r×dK), or Tucker: P[i, q·K+κ] = Σ_l t2[i,l,κ]·w2_b[l,q]
 *                 (r × dK), W2 = w2_aᵀ·P (w2_a r×b)
 *   O = a·b, I = c·d, dK = d·K; row o = i·b + j, column p·dK + n:
 *   ΔW̄[i·b+j, p·dK+n] = ρ_o·W1[i,p]·W2[j,n],  ρ_o = s'·q_o (s' = s, or s² with
 *   LYCO_FLAG_UPSTREAM_MERGE_SCALE in merge — the driver then skips σs; q_o the output-row mask).
 *
 * merge fwd : the streaming driver (stream.h; DoRA: the row-block driver) asks for pieces of a
 *             row: for every p, the run rnd(ρ_o·W1[i,p])·W2[j,:] (one multiply per element) —
 *             ΔW is never formed whole; the driver (merge.c) applies m, σs, DoRA and the modes,
 *             one pass over W and W''.
 * merge bwd : without DoRA and without a σs gradient, LoKr's own loop (merge_bwd_rows: the driver's
 *             runs and scaling, the same sums); else the driver with rows_bwd. Then per row o of
 *             G = ∂L/∂ΔW̄ (viewed as c × dK), one pass over the row (lokr_bwd_kern.h: G read once,
 *             straight from the caller's bf16/fp16/fp32 tensor, each loaded vector feeding both sums):
 *             v = G_o·W2[j,:]ᵀ (c dots), G_W1[i,:] += ρ_o·v (fp64 partial, a·c);
 *             G_W2[j,:] += (ρ_o·W1[i,:])·G_o (fp32 partial, b·dK); partials per fixed run, reduced in run order, then
 *             chained into the factors in fp64:
 *             G_w1a = G_W1·w1_bᵀ, G_w1b = w1_aᵀ·G_W1; G_w2a = G_W2·w2_bᵀ, G_w2b = w2_aᵀ·G_W2;
 *             Tucker: G_w2a = P·G_W2ᵀ, G_P = w2_a·G_W2, G_w2b[l,q] = Σ_{i,κ} t2[i,l,κ]·G_P[i,q·K+κ],
 *             G_t2[i,l,κ] = Σ_q G_P[i,q·K+κ]·w2_b[l,q].
 * bypass fwd (linear, no ΔW): per tile of TB tokens, x viewed as (tokens·c) × d:
 *             H = X_g·W2ᵀ ((TB·c) × b, one plain GEMM with W2ᵀ built once: the nt form took
 *             length-d dot products per element), then per token Y_t = W̃1·H_t (a × b) with
 *             W̃1 = rnd(s·m·σs·W1), which is exactly y's row (index i·b + j): y = y0 + Y.
 * bypass bwd (linear): per tile: H recomputed; G_W1raw += dy_t·H_tᵀ (per token, a × c, fp64
 *             partial; H_t transposed first, so a plain GEMM); G_H_t = W̃1ᵀ·dy_t (c × b); G_W2 += G_Hᵀ·X_g (b × d); dx = G_H·W2.
 *             Then G_W1 = s·m·σs·G_W1raw and the factor chain above. G_σs (only when asked) =
 *             s·m·Σ_{t,p,j} (W1ᵀ·dy_t)[p,j]·(X_g·W2ᵀ)[t,p,j] evaluated in fp64 from the fp64 halves
 *             (vectorised lanes over j): this sum cancels, and the fp32 rounding of W2 and of H
 *             would dominate it; cost ≈ one more H + G_H pass in fp64.
 * Conv bypass (with or without DoRA) and DoRA in bypass on linear layers: dense_bypass.c, through
 * E = W'' − W built by the merge driver from this file's row generator.
 *
 * Extra memory: fp64 factors and halves (2·(a·c + b·dK) + r·(a + c + b + 2·dK) + r²K doubles),
 * fp32 W1, W2; per slot (max(threads, runs): the backward's partials belong to fixed runs — the
 * merge driver's groups, or runs of token blocks — so they do not depend on the thread count) the
 * gradient partials (a·c doubles + b·dK floats) and max(18·c, a·c) floats; merge_bwd_rows one G row (I·K floats)
 * per thread;
 * bypass: W2ᵀ (b·dK floats); per thread one tile TB·(I + c·b + O) (fwd) or TB·(2·I + 3·c·b + O)
 * (bwd) floats, and 16·max(TB·c, a, b) floats for gemm16;
 * G_σs: d·b + 3·b doubles per run.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cpu.h"
#include "isa.h"
#include "stream.h"

#define TB 32   /* bypass: tokens per tile */

typedef struct {
    const lyco_call *c;
    int64_t a, b, cc, d, K, dK, IK, O, r;
    double *W1d, *W2d;              /* the halves in fp64: a × c, b × dK */
    double *w1a, *w1b, *w2a, *w2b;  /* factors (NULL when that half is full) */
    double *t2, *P;                 /* Tucker: t2 (r×r×K), P (r × dK) */
    double *rho;                    /* O: s'·q_o */
    float *W1, *W2;                 /* rnd(W1), rnd(W2) */
    float *W2T;                     /* bypass: rnd(W2)ᵀ (dK × b) */
    double *gW1;                    /* partials np × (a·c) */
    float *gW2;                     /* partials np × (b·dK) */
    float *scr;                     /* per slot: 2·c (merge bwd) or a·c (bypass bwd) floats */
    int64_t scr_n;
    int nt;
    int runs;                       /* merge backward: the driver's fixed runs (cpu_delta.groups) */
    int np;                         /* partial / scratch slots: max(nt, runs), one per run in use
                                       (so the sums do not depend on the thread count) */
} lokr_t;

static float mask_at(const lyco_call *c, int64_t i) {
    const DLTensor *q = c->a->tensor[LYCO_RANK_MASK];
    return q ? lyco_load_f32(lyco_elem_at(q, i), lyco_dtype_of(q)) : 1.0f;
}

static float *alloc_f(int64_t n) { return calloc((size_t)(n > 0 ? n : 0) + 1, sizeof(float)); }
static double *alloc_d(int64_t n) { return calloc((size_t)(n > 0 ? n : 0) + 1, sizeof(double)); }

/* ---- dmm's row products, once per ISA (lokr_kern.h; every copy without FMA: the same bits) ---- */
#ifdef CPU_V4
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v4")
#pragma GCC optimize("fp-contract=off")
typedef double lkd_v4 __attribute__((vector_size(64)));
#define lkd lkd_v4
#define LKD 8
#define KN(name) name##_v4
#include "lokr_kern.h"
#undef KN
#undef LKD
#undef lkd
#pragma GCC pop_options
#endif
#ifdef CPU_V3
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v3")
#pragma GCC optimize("fp-contract=off")
typedef double lkd_v3 __attribute__((vector_size(32)));
#define lkd lkd_v3
#define LKD 4
#define KN(name) name##_v3
#include "lokr_kern.h"
#undef KN
#undef LKD
#undef lkd
#pragma GCC pop_options
#endif
typedef double lkd_base __attribute__((vector_size(32)));
#define lkd lkd_base
#define LKD 4
#define KN(name) name##_base
#include "lokr_kern.h"
#undef KN
#undef LKD
#undef lkd

static void dmm_rows(int64_t M, int64_t N, int64_t Kd, const double *A, int64_t ai, int64_t ak, const double *B, int64_t bk,
                     double *restrict C) {
#ifdef CPU_V4
    if (cpu_isa() >= 2) dmm_rows_v4(M, N, Kd, A, ai, ak, B, bk, C);
    else
#endif
#ifdef CPU_V3
    if (cpu_have_v3()) dmm_rows_v3(M, N, Kd, A, ai, ak, B, bk, C);
    else
#endif
        dmm_rows_base(M, N, Kd, A, ai, ak, B, bk, C);
}

/* C[M×N] = Σ_k A[i·ai + k·ak] · B[k·bk + j·bj]   (fp64, small matrices only; C aliases neither).
   Row by row (lokr_kern.h): each element the operations of the dot form in its order, bit for
   bit, the inner loop over contiguous j in vector registers (the dot form was one latency-bound
   chain per element, ~18% of a LoKr merge backward at 1280²). B with bj ≠ 1 is first copied to
   k-major rows (the dot form when that copy cannot be allocated). Serial: splitting the rows over the threads
   (tried for the 1280² merge backward's three 80×80×32 products, ~15 µs) added three fork-joins,
   and on a shared core each one waits for a descheduled thread. */
static void dmm(int64_t M, int64_t N, int64_t Kd, const double *A, int64_t ai, int64_t ak, const double *B, int64_t bk,
                int64_t bj, double *restrict C) {
    double *Bt = bj == 1 ? NULL : malloc(sizeof(double) * (size_t)(Kd * N + 1));
    if (bj != 1 && !Bt) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0.0;
                for (int64_t k = 0; k < Kd; k++) acc += A[i * ai + k * ak] * B[k * bk + j * bj];
                C[i * N + j] = acc;
            }
        return;
    }
    if (Bt) {
        for (int64_t k = 0; k < Kd; k++)
            for (int64_t j = 0; j < N; j++) Bt[k * N + j] = B[k * bk + j * bj];
        B = Bt;
        bk = N;
    }
    dmm_rows(M, N, Kd, A, ai, ak, B, bk, C);
    free(Bt);
}

/* A tensor through the compute dtype into fp64 (NULL on allocation failure). */
static double *load_d(const lyco_call *c, lyco_slot sl, int64_t n) {
    double *d = alloc_d(n);
    float *f = alloc_f(n);
    if (d && f) {
        cpu_load_all(c->a->tensor[sl], c->dt.compute, f);
        for (int64_t i = 0; i < n; i++) d[i] = f[i];
    }
    free(f);
    if (!f) {
        free(d);
        return NULL;
    }
    return d;
}

/* fp64 values rounded once into t (through the fp32 staging buffer f, n floats) */
static void store_d(DLTensor *t, const double *v, int64_t n, float *f) {
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    cpu_store_all(t, f);
}

static void lokr_free(lokr_t *s) {
    free(s->W1d);
    free(s->W2d);
    free(s->w1a);
    free(s->w1b);
    free(s->w2a);
    free(s->w2b);
    free(s->t2);
    free(s->P);
    free(s->rho);
    free(s->W1);
    free(s->W2);
    free(s->W2T);
    free(s->gW1);
    free(s->gW2);
    free(s->scr);
}

static lyco_status lokr_prepare(const lyco_call *c, lokr_t *s, bool grads) {
    memset(s, 0, sizeof *s);
    const lyco_dims *dm = &c->dims;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    bool compat = !bypass && (c->a->flags & LYCO_FLAG_UPSTREAM_MERGE_SCALE);
    s->c = c;
    s->a = dm->lk_a;
    s->b = dm->lk_b;
    s->cc = dm->lk_c;
    s->d = dm->lk_d;
    s->K = dm->K;
    s->dK = s->d * s->K;
    s->IK = s->cc * s->dK;
    s->O = dm->O;
    s->r = dm->r;
    s->nt = cpu_threads();
    int64_t a = s->a, b = s->b, cc = s->cc, d = s->d, K = s->K, dK = s->dK, r = s->r;
    s->W1 = alloc_f(a * cc);
    s->W2 = alloc_f(b * dK);
    s->rho = alloc_d(s->O);
    if (!s->W1 || !s->W2 || !s->rho) return lyco_fail(LYCO_ERR_NOMEM, "cpu lokr: out of memory");
    if (dm->lk_w1_full) {
        s->W1d = load_d(c, LYCO_LOKR_W1, a * cc);
    } else {
        s->w1a = load_d(c, LYCO_LOKR_W1_A, a * r);
        s->w1b = load_d(c, LYCO_LOKR_W1_B, r * cc);
        s->W1d = alloc_d(a * cc);
        if (s->w1a && s->w1b && s->W1d) dmm(a, cc, r, s->w1a, r, 1, s->w1b, cc, 1, s->W1d);
    }
    if (!s->W1d) return lyco_fail(LYCO_ERR_NOMEM, "cpu lokr: out of memory");
    if (dm->lk_w2_full) {
        s->W2d = load_d(c, LYCO_LOKR_W2, b * dK);
    } else if (dm->tucker) {
        s->w2a = load_d(c, LYCO_LOKR_W2_A, r * b);
        s->w2b = load_d(c, LYCO_LOKR_W2_B, r * d);
        s->t2 = load_d(c, LYCO_LOKR_T2, r * r * K);
        s->P = alloc_d(r * dK);
        s->W2d = alloc_d(b * dK);
        if (!s->w2a || !s->w2b || !s->t2 || !s->P || !s->W2d) return lyco_fail(LYCO_ERR_NOMEM, "cpu lokr: out of memory");
        for (int64_t i = 0; i < r; i++) /* P[i, q·K+κ] = Σ_l t2[i,l,κ]·w2_b[l,q] */
            for (int64_t q = 0; q < d; q++)
                for (int64_t k = 0; k < K; k++) {
                    double acc = 0.0;
                    for (int64_t l = 0; l < r; l++) acc += s->t2[(i * r + l) * K + k] * s->w2b[l * d + q];
                    s->P[i * dK + q * K + k] = acc;
                }
        dmm(b, dK, r, s->w2a, 1, b, s->P, dK, 1, s->W2d);                  /* W2 = w2_aᵀ·P */
    } else {
        s->w2a = load_d(c, LYCO_LOKR_W2_A, b * r);
        s->w2b = load_d(c, LYCO_LOKR_W2_B, r * dK);
        s->W2d = alloc_d(b * dK);
        if (s->w2a && s->w2b && s->W2d) dmm(b, dK, r, s->w2a, r, 1, s->w2b, dK, 1, s->W2d);
    }
    if (!s->W2d || (!dm->lk_w2_full && (!s->w2a || !s->w2b))) return lyco_fail(LYCO_ERR_NOMEM, "cpu lokr: out of memory");
    for (int64_t n = 0; n < a * cc; n++) s->W1[n] = (float)s->W1d[n];
    for (int64_t n = 0; n < b * dK; n++) s->W2[n] = (float)s->W2d[n];
    if (bypass) { /* H = X_g·W2ᵀ as a plain product (the nt form took length-d dot products per element) */
        s->W2T = alloc_f(b * dK);
        if (!s->W2T) return lyco_fail(LYCO_ERR_NOMEM, "cpu lokr: out of memory");
        for (int64_t j = 0; j < b; j++)
            for (int64_t n = 0; n < dK; n++) s->W2T[n * b + j] = s->W2[j * dK + n];
    }
    double sp = compat ? c->s * c->s : c->s;
    for (int64_t o = 0; o < s->O; o++) s->rho[o] = sp * (bypass ? 1.0 : (double)mask_at(c, o));
    if (grads) {
        int64_t per_run = 2 * a * cc + b * dK, cap = CPU_RUN_FLOATS / (per_run > 0 ? per_run : 1);
        s->runs = cpu_runs(CPU_RUNS_BIG, cap < CPU_RUNS_BIG ? cap : CPU_RUNS_BIG);
        s->np = s->nt > s->runs ? s->nt : s->runs;
        s->gW1 = alloc_d((int64_t)s->np * a * cc);
        s->gW2 = alloc_f((int64_t)s->np * b * dK);
        s->scr_n = 18 * cc;   /* merge bwd rows (also under the dense bypass): w, v and the kernel's 16·c dots */
        if (bypass && a * cc > s->scr_n) s->scr_n = a * cc;   /* linear bypass bwd: one a × c product */
        s->scr = alloc_f((int64_t)s->np * s->scr_n);
        if (!s->gW1 || !s->gW2 || !s->scr) return lyco_fail(LYCO_ERR_NOMEM, "cpu lokr: out of memory for gradient partials");
    }
    return LYCO_OK;
}

#define LK_RED_BLOCK 2048   /* elements per task of the partials' reduction */

/* G1 (n1 doubles) and G2 (n2) = the sum of the np partial slots, in slot order, each element by
   one thread (blocks of LK_RED_BLOCK elements over the threads: the same bits at any count) */
static void reduce_partials(const lokr_t *s, int64_t n1, int64_t n2, double *G1, double *G2) {
    const int64_t n = n1 + n2, nb = (n + LK_RED_BLOCK - 1) / LK_RED_BLOCK;
#pragma omp parallel for schedule(static) if (nb > 1)
    for (int64_t bi = 0; bi < nb; bi++) {
        const int64_t e0 = bi * LK_RED_BLOCK, e1 = e0 + LK_RED_BLOCK < n ? e0 + LK_RED_BLOCK : n;
        const int64_t a0 = e0 < n1 ? e0 : n1, a1 = e1 < n1 ? e1 : n1;     /* [a0, a1) of G1 */
        const int64_t b0 = (e0 > n1 ? e0 : n1) - n1, b1 = (e1 > n1 ? e1 : n1) - n1; /* [b0, b1) of G2 */
        for (int th = 0; th < s->np; th++) {
            const double *p1 = s->gW1 + (size_t)th * (size_t)n1;
            const float *p2 = s->gW2 + (size_t)th * (size_t)n2;
            for (int64_t e = a0; e < a1; e++) G1[e] += p1[e];
            for (int64_t e = b0; e < b1; e++) G2[e] += p2[e];
        }
    }
}

/* W1's gradients from G_W1 (a × c): itself, or G_w1a = G_W1·w1_bᵀ and G_w1b = w1_aᵀ·G_W1 (tmp: a·r +
   r·c doubles, stage: as many floats) */
static void w1_grads(const lokr_t *s, const double *G1, double *tmp, float *stage) {
    DLTensor *const *g = s->c->g->grad;
    int64_t a = s->a, cc = s->cc, r = s->r;
    if (s->c->dims.lk_w1_full) {
        if (g[LYCO_LOKR_W1]) store_d(g[LYCO_LOKR_W1], G1, a * cc, stage);
        return;
    }
    if (g[LYCO_LOKR_W1_A]) {
        dmm(a, r, cc, G1, cc, 1, s->w1b, 1, cc, tmp);
        store_d(g[LYCO_LOKR_W1_A], tmp, a * r, stage);
    }
    if (g[LYCO_LOKR_W1_B]) {
        dmm(r, cc, a, s->w1a, 1, r, G1, cc, 1, tmp + a * r);
        store_d(g[LYCO_LOKR_W1_B], tmp + a * r, r * cc, stage + a * r);
    }
}

/* W2's first factor from G_W2 (b × dK): G_w2a = G_W2·w2_bᵀ (b × r), or under Tucker P·G_W2ᵀ (r × b);
   the full half's G_W2 itself (tmp, stage: b·r) */
static void w2a_grads(const lokr_t *s, const double *G2, double *tmp, float *stage) {
    DLTensor *const *g = s->c->g->grad;
    int64_t b = s->b, dK = s->dK, r = s->r;
    if (s->c->dims.lk_w2_full) {
        if (g[LYCO_LOKR_W2]) store_d(g[LYCO_LOKR_W2], G2, b * dK, stage);
        return;
    }
    if (!g[LYCO_LOKR_W2_A]) return;
    if (s->c->dims.tucker) dmm(r, b, dK, s->P, dK, 1, G2, 1, dK, tmp);
    else dmm(b, r, dK, G2, dK, 1, s->w2b, 1, dK, tmp);
    store_d(g[LYCO_LOKR_W2_A], tmp, b * r, stage);
}

/* W2's other factors from G_W2: G_w2b = w2_aᵀ·G_W2 (r × dK); under Tucker G_P = w2_a·G_W2 (r × dK),
   G_t2[i,l,κ] = Σ_q G_P[i,q·K+κ]·w2_b[l,q], G_w2b[l,q] = Σ_{i,κ} t2[i,l,κ]·G_P[i,q·K+κ] (tmp: 2·r·dK +
   r·r·K + r·d doubles, stage: r·r·K + r·d floats at most) */
static void w2b_grads(const lokr_t *s, const double *G2, double *tmp, float *stage) {
    DLTensor *const *g = s->c->g->grad;
    int64_t b = s->b, d = s->d, K = s->K, dK = s->dK, r = s->r;
    if (s->c->dims.lk_w2_full) return;
    if (!s->c->dims.tucker) {
        if (g[LYCO_LOKR_W2_B]) {
            dmm(r, dK, b, s->w2a, 1, r, G2, dK, 1, tmp);
            store_d(g[LYCO_LOKR_W2_B], tmp, r * dK, stage);
        }
        return;
    }
    if (!g[LYCO_LOKR_W2_B] && !g[LYCO_LOKR_T2]) return;
    double *GP = tmp, *out = tmp + r * dK;
    dmm(r, dK, b, s->w2a, b, 1, G2, dK, 1, GP);
    if (g[LYCO_LOKR_T2]) {
        for (int64_t i = 0; i < r; i++)
            for (int64_t l = 0; l < r; l++)
                for (int64_t k = 0; k < K; k++) {
                    double acc = 0.0;
                    for (int64_t q = 0; q < d; q++) acc += GP[i * dK + q * K + k] * s->w2b[l * d + q];
                    out[(i * r + l) * K + k] = acc;
                }
        store_d(g[LYCO_LOKR_T2], out, r * r * K, stage);
    }
    if (g[LYCO_LOKR_W2_B]) {
        for (int64_t l = 0; l < r; l++)
            for (int64_t q = 0; q < d; q++) {
                double acc = 0.0;
                for (int64_t i = 0; i < r; i++)
                    for (int64_t k = 0; k < K; k++) acc += s->t2[(i * r + l) * K + k] * GP[i * dK + q * K + k];
                out[l * d + q] = acc;
            }
        store_d(g[LYCO_LOKR_W2_B], out, r * d, stage);
    }
}

/* Reduces the partials in slot order (fp64) and chains G_W1 (a × c, scaled by g1) and G_W2
   (b × dK) into the factors' gradients, stored once in their leaf dtypes. The three chains (W1's,
   W2's first factor, W2's others) are independent and run as parallel sections, each with its own
   slices of tmp and stage (each product by one thread in its fixed order: the same bits). */
static lyco_status store_grads(const lokr_t *s, double g1) {
    int64_t a = s->a, b = s->b, cc = s->cc, d = s->d, K = s->K, dK = s->dK, r = s->r, n1 = a * cc, n2 = b * dK;
    int64_t t1 = a * r + r * cc, t2a = b * r, t2b = 2 * r * dK + r * r * K + r * d;
    if (t1 < n1) t1 = n1;   /* stage slices hold the full halves' stores too */
    if (t2a < n2) t2a = n2;
    double *G1 = alloc_d(n1), *G2 = alloc_d(n2), *tmp = alloc_d(t1 + t2a + t2b);
    float *stage = alloc_f(t1 + t2a + t2b);
    if (!G1 || !G2 || !tmp || !stage) {
        free(G1);
        free(G2);
        free(tmp);
        free(stage);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu lokr: out of memory");
    }
    reduce_partials(s, n1, n2, G1, G2);
    for (int64_t n = 0; n < n1; n++) G1[n] *= g1;
#pragma omp parallel sections
    {
#pragma omp section
        w1_grads(s, G1, tmp, stage);
#pragma omp section
        w2a_grads(s, G2, tmp + t1, stage + t1);
#pragma omp section
        w2b_grads(s, G2, tmp + t1 + t2a, stage + t1 + t2a);
    }
    free(G1);
    free(G2);
    free(tmp);
    free(stage);
    return LYCO_OK;
}

/* ---- merge: the driver's callbacks ---- */

CPU_HOT
static void rows(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, float *out) {
    (void)W;
    const lokr_t *s = dl->state;
    int64_t b = s->b, cc = s->cc, dK = s->dK, IK = s->IK;
    for (int64_t rr = 0; rr < nr; rr++) {
        int64_t o = o0 + rr, i = o / b, j = o % b;
        const float *w2 = s->W2 + j * dK;
        for (int64_t p = 0; p < cc; p++) {
            float w = (float)(s->rho[o] * s->W1d[i * cc + p]), *dst = out + rr * IK + p * dK;
            for (int64_t n = 0; n < dK; n++) dst[n] = w * w2[n];
        }
    }
}

/* ΔW̄'s row o for the streaming driver (stream.h): the products of rows(), W2[j,:] scaled by
   w_p = (float)(ρ_o·W1[i,p]) over the run of one p (dK columns); the c scales in the scratch row */
static void span(const cpu_delta *dl, int64_t o, float *scratch, cpu_span *sp) {
    const lokr_t *s = dl->state;
    int64_t cc = s->cc, i = o / s->b, j = o % s->b;
    for (int64_t p = 0; p < cc; p++) scratch[p] = (float)(s->rho[o] * s->W1d[i * cc + p]);
    *sp = (cpu_span){.x = CPU_SPAN_CYCLE, .vec = s->W2 + j * s->dK, .s = scratch, .period = s->dK};
}

/* ---- merge backward: rows of G in one pass (lokr_bwd_kern.h, once per ISA) ---- */
typedef struct {
    const char *g;          /* the row of G: c segments of dK values of dtype gdt */
    lyco_dtype gdt, T;      /* its dtype, and the compute dtype it is loaded through */
    float m, sig;           /* then × m, × σs (each skipped when 1) */
    int64_t cc, dK;
    const float *w2;        /* W2[j,:] */
    const float *w;         /* w[p] = (float)(ρ_o·W1[i,p]) */
    float *v;               /* out: v[p] = ⟨G_o segment p, W2[j,:]⟩ */
    float *gw2;             /* G_W2[j,:] partial, accumulated */
    float *dv;              /* scratch: 16·c floats */
} lk_row;

/* Rows [o0, o1) of G into one run's partials: G_W1 += ρ_o·v (fp64), G_W2[j,:] += Σ_p w[p]·g_p. */
typedef struct {
    const char *g;          /* row o0; row o at g + (o − o0)·stride bytes */
    int64_t stride;
    lyco_dtype gdt, T;
    float m, sig;
    int64_t b, cc, dK;
    const float *W2;        /* b × dK */
    const double *W1d, *rho;
    double *gW1;            /* the run's partials: a × c, b × dK */
    float *gW2;
    float *w, *v, *dv;      /* scratch: c, c and 16·c floats */
} lk_rows;

#define ISA_EACH_HEADER "lokr_bwd_kern.h"
#define ISA_EACH_V4 1
#define ISA_EACH_BASE 1
#include "isa_each.h"

/* Whether a lane copy (v3 or v4) runs: it reads 16-bit and strided-scaled rows itself; the
   portable copy takes fp32 rows already rounded and scaled. */
static bool lk_lanes(void) {
#ifdef CPU_V3
    return cpu_have_v3();
#else
    return false;
#endif
}

static void lk_bwd_rows(const lk_rows *R, int64_t o0, int64_t o1) {
    CPU_DISPATCH(lk_bwd_rows, R, o0, o1);
}

/* rows [o0, o1) of G (row o0 at g, `stride` bytes apart, of dtype gdt, loaded through T and
   scaled by m, σs) into run `part`'s partials */
static void lokr_rows_bwd(const lokr_t *s, int64_t o0, int64_t o1, const void *g, int64_t stride, lyco_dtype gdt, lyco_dtype T,
                          float m, float sig, int part) {
    int64_t cc = s->cc;
    float *w = s->scr + (size_t)part * (size_t)s->scr_n;
    lk_rows R = {.g = g, .stride = stride, .gdt = gdt, .T = T, .m = m, .sig = sig, .b = s->b, .cc = cc, .dK = s->dK,
                 .W2 = s->W2, .W1d = s->W1d, .rho = s->rho, .gW1 = s->gW1 + (size_t)part * (size_t)(s->a * cc),
                 .gW2 = s->gW2 + (size_t)part * (size_t)(s->b * s->dK), .w = w, .v = w + cc, .dv = w + 2 * cc};
    lk_bwd_rows(&R, o0, o1);
}

static void rows_bwd(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, const float *G, int tid) {
    (void)W;
    const lokr_t *s = dl->state;
    lokr_rows_bwd(s, o0, o0 + nr, G, s->IK * (int64_t)sizeof(float), LYCO_F32, LYCO_F32, 1.0f, 1.0f, tid);
}

static lyco_status finish_bwd(const cpu_delta *dl) {
    const lokr_t *s = dl->state;
    if (!s->c->g) return LYCO_OK;
    return store_grads(s, 1.0);
}

/* g[j] *= m, then *= σ when σ ≠ 1: the driver's scaling of a G row (merge.c bwd_block), as it
   rounds it; a factor 1 is skipped (x·1 = x). */
CPU_HOT
static void scale_row(float *g, int64_t n, float m, float sig) {
    if (m != 1.0f)
        for (int64_t j = 0; j < n; j++) g[j] *= m;
    if (sig != 1.0f)
        for (int64_t j = 0; j < n; j++) g[j] *= sig;
}

#define LOKR_RB 4   /* merge.c's row block (RB): the same fixed runs of rows, so the same sums */

/* Merge backward without DoRA and without a gradient for σs: merge.c's cpu_merge_bwd reduced to what
   LoKr needs — per row of G, loaded through the compute dtype, scaled by m (and σs), one pass of
   lk_bwd_row; the runs of row blocks of the driver (cpu_delta.groups), so the partials do not
   depend on the thread count, and the same sums as the driver's path through rows_bwd. A lane copy
   reads a row with contiguous columns straight from G; otherwise (strides, the portable copy) the
   row is staged in fp32 first. Skips the driver's per-thread row-block buffers and its
   multiply-by-m pass over G when m = 1. */
static lyco_status merge_bwd_rows(const lyco_call *c, lokr_t *s) {
    bool compat = c->a->flags & LYCO_FLAG_UPSTREAM_MERGE_SCALE;
    float m = (float)c->m, sig = compat ? 1.0f : cpu_sigma(c);
    lyco_dtype T = c->dt.compute;
    int64_t IK = s->IK, nblocks = (s->O + LOKR_RB - 1) / LOKR_RB;
    int runs = s->runs;
    cpu_view gv;
    cpu_view_init(&gv, c->d_out, 1);
    bool direct = gv.fast && lk_lanes();
    float *rowbuf = direct ? NULL : alloc_f((int64_t)s->nt * IK);
    if (!direct && !rowbuf) return lyco_fail(LYCO_ERR_NOMEM, "cpu lokr merge_bwd: out of memory for %lld-column rows", (long long)IK);
#pragma omp parallel for schedule(dynamic)   /* a run to whichever thread is free: on a shared core a
                                               descheduled thread held its static half of the runs */
    for (int g = 0; g < runs; g++) {
        float *grow = direct ? NULL : rowbuf + (size_t)cpu_thread_id() * (size_t)IK;
        int64_t o0 = cpu_run_start(nblocks, runs, g) * LOKR_RB, o1 = cpu_run_start(nblocks, runs, g + 1) * LOKR_RB;
        if (o1 > s->O) o1 = s->O;
        if (direct) {
            int64_t stride = gv.rs * (int64_t)gv.es;
            lokr_rows_bwd(s, o0, o1, gv.base + o0 * stride, stride, gv.dt, T, m, sig, g);
            continue;
        }
        for (int64_t o = o0; o < o1; o++) {
            cpu_load(&gv, o, 0, IK, T, grow);
            scale_row(grow, IK, m, sig);
            lokr_rows_bwd(s, o, o + 1, grow, 0, LYCO_F32, LYCO_F32, 1.0f, 1.0f, g);
        }
    }
    free(rowbuf);
    return c->g ? store_grads(s, 1.0) : LYCO_OK;
}

/* ---- bypass, linear layers ---- */

/* C (+)= op(A)·B through cpu_gemm_nn / cpu_gemm_tn, for N not a multiple of 16. dense.c runs a
   partial last group of < 16 columns through one accumulator chain per row (FMA-latency bound:
   ~40% of the GEMM time of the 640² bypass, b = d = 40). Here the last 16 columns go as one full
   panel into tmp (M × 16 floats), overlapping the previous panel, and only the missing columns are
   taken from it: every element is the same chain over k (dense.c: its order depends on K only),
   then + C_old when accumulating — bitwise what the plain call gives. */
static void gemm16(bool tn, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                   float *C, int64_t ldc, bool accumulate, float *tmp) {
    void (*g)(int64_t, int64_t, int64_t, const float *, int64_t, const float *, int64_t, float *, int64_t, bool) =
        tn ? cpu_gemm_tn : cpu_gemm_nn;
    int64_t N16 = N & ~(int64_t)15;
    if (N < 16 || N16 == N) {
        g(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
        return;
    }
    g(M, N16, K, A, lda, B, ldb, C, ldc, accumulate);
    g(M, 16, K, A, lda, B + (N - 16), ldb, tmp, 16, false);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = N16; j < N; j++) {
            float v = tmp[i * 16 + j - (N - 16)];
            C[i * ldc + j] = accumulate ? C[i * ldc + j] + v : v;
        }
}

static lyco_status bypass_fwd(const lyco_call *c, lokr_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *bp = c->bypass;
    int64_t N = c->tokens, I = c->dims.I, O = s->O, a = s->a, b = s->b, cc = s->cc, d = s->d;
    cpu_view xv, y0v, yv;
    cpu_view_init(&xv, bp->x, bp->x->ndim - 1);
    cpu_view_init(&yv, c->y, c->y->ndim - 1);
    bool add = bp->y0 && !(bp->flags & LYCO_BYPASS_DELTA_ONLY);
    if (add) cpu_view_init(&y0v, bp->y0, bp->y0->ndim - 1);
    double f = c->s * c->m * (double)cpu_sigma(c);
    for (int64_t n = 0; n < a * cc; n++) s->W1[n] = (float)(s->W1d[n] * f); /* W̃1 */
    int64_t mmax = TB * cc > a ? TB * cc : a;   /* the most rows of a gemm16 call */
    size_t per = (size_t)(TB * (I + cc * b + O) + 16 * mmax);
    float *work = alloc_f((int64_t)s->nt * (int64_t)per);
    if (!work) return lyco_fail(LYCO_ERR_NOMEM, "cpu lokr bypass: out of memory");
    int64_t nblocks = (N + TB - 1) / TB;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        float *x = work + (size_t)cpu_thread_id() * per, *H = x + TB * I, *y = H + TB * cc * b, *t16 = y + TB * O;
        int64_t t0 = blk * TB, nt = N - t0 < TB ? N - t0 : TB;
        for (int64_t t = 0; t < nt; t++) cpu_load(&xv, t0 + t, 0, I, T, x + t * I);
        if (add)
            for (int64_t t = 0; t < nt; t++) cpu_load(&y0v, t0 + t, 0, O, T, y + t * O);
        gemm16(false, nt * cc, b, d, x, d, s->W2T, b, H, b, false, t16);                   /* H = X_g·W2ᵀ */
        for (int64_t t = 0; t < nt; t++) gemm16(false, a, b, cc, s->W1, cc, H + t * cc * b, b, y + t * O, b, add, t16); /* Y = W̃1·H_t */
        for (int64_t t = 0; t < nt; t++) cpu_store(&yv, t0 + t, 0, O, y + t * O);
    }
    free(work);
    return LYCO_OK;
}

static lyco_status bypass_bwd(const lyco_call *c, lokr_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *bp = c->bypass;
    int64_t N = c->tokens, I = c->dims.I, O = s->O, a = s->a, b = s->b, cc = s->cc, d = s->d;
    cpu_view xv, dyv, dxv, dy0v;
    cpu_view_init(&xv, bp->x, bp->x->ndim - 1);
    cpu_view_init(&dyv, c->dy, c->dy->ndim - 1);
    if (c->dx) cpu_view_init(&dxv, c->dx, c->dx->ndim - 1);
    if (c->dy0) cpu_view_init(&dy0v, c->dy0, c->dy0->ndim - 1);
    bool delta_only = bp->flags & LYCO_BYPASS_DELTA_ONLY;
    bool want_sig = c->g && c->g->grad[LYCO_SCALAR];
    double f = c->s * c->m * (double)cpu_sigma(c);
    float *W1s = alloc_f(a * cc), *zero = alloc_f(O);
    int64_t mmax = TB * cc > a ? TB * cc : a;   /* the most rows of a gemm16 call */
    if (b > mmax) mmax = b;
    size_t per = (size_t)(TB * (2 * I + 3 * cc * b + O) + 16 * mmax);
    float *work = alloc_f((int64_t)s->nt * (int64_t)per);
    /* partials (G_W1, G_W2, G_σs lanes) per fixed run of token blocks: independent of the thread count */
    const int64_t nblocks = (N + TB - 1) / TB;
    const int runs = cpu_runs(nblocks, s->runs);
    double *sd = want_sig ? alloc_d((int64_t)runs * 3 * b) : NULL, *W2T = want_sig ? alloc_d(d * b) : NULL;
    if (!W1s || !zero || !work || (want_sig && (!sd || !W2T))) {
        free(W1s);
        free(zero);
        free(work);
        free(sd);
        free(W2T);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu lokr bypass: out of memory");
    }
    for (int64_t n = 0; n < a * cc; n++) W1s[n] = (float)(s->W1d[n] * f);
    if (want_sig)
        for (int64_t q = 0; q < d; q++)
            for (int64_t jj = 0; jj < b; jj++) W2T[q * b + jj] = s->W2d[jj * d + q];
#pragma omp parallel for schedule(static)
    for (int run = 0; run < runs; run++)
    for (int64_t blk = cpu_run_start(nblocks, runs, run); blk < cpu_run_start(nblocks, runs, run + 1); blk++) {
        int tid = cpu_thread_id();
        float *x = work + (size_t)tid * per, *dx = x + TB * I, *H = dx + TB * I, *GH = H + TB * cc * b, *dy = GH + TB * cc * b;
        float *HT = dy + TB * O;   /* one token's H_tᵀ (b × c) */
        float *t16 = HT + TB * cc * b;   /* gemm16's M × 16 */
        float *g1 = s->scr + (size_t)run * (size_t)s->scr_n, *gW2 = s->gW2 + (size_t)run * (size_t)(b * d);
        double *gW1 = s->gW1 + (size_t)run * (size_t)(a * cc);
        int64_t t0 = blk * TB, nt = N - t0 < TB ? N - t0 : TB;
        for (int64_t t = 0; t < nt; t++) {
            cpu_load(&xv, t0 + t, 0, I, T, x + t * I);
            cpu_load(&dyv, t0 + t, 0, O, T, dy + t * O);
        }
        if (c->dy0) /* y = y0 + Δ: dy0 = dy; y = Δ alone: 0 */
            for (int64_t t = 0; t < nt; t++) cpu_store(&dy0v, t0 + t, 0, O, delta_only ? zero : dy + t * O);
        gemm16(false, nt * cc, b, d, x, d, s->W2T, b, H, b, false, t16);                        /* H = X_g·W2ᵀ */
        for (int64_t t = 0; t < nt; t++) {
            const float *Ht = H + t * cc * b;                                                    /* dy_t·H_tᵀ, through */
            for (int64_t p = 0; p < cc; p++)                                                     /* H_tᵀ: a plain product */
                for (int64_t jj = 0; jj < b; jj++) HT[jj * cc + p] = Ht[p * b + jj];
            gemm16(false, a, cc, b, dy + t * O, b, HT, cc, g1, cc, false, t16);
            for (int64_t n = 0; n < a * cc; n++) gW1[n] += g1[n];
            gemm16(true, cc, b, a, W1s, cc, dy + t * O, b, GH + t * cc * b, b, false, t16);      /* G_H_t = W̃1ᵀ·dy_t */
        }
        gemm16(true, b, d, nt * cc, GH, b, x, d, gW2, d, true, t16);                            /* G_W2 += G_Hᵀ·X_g */
        if (want_sig) { /* G_σs = s·m·Σ_{t,p,j} (W1ᵀ·dy_t)[p,j]·(X_g·W2ᵀ)[t,p,j], all in fp64 */
            double *hd = sd + (size_t)run * (size_t)(3 * b), *gd = hd + b, *av = gd + b;
            for (int64_t t = 0; t < nt; t++)
                for (int64_t p = 0; p < cc; p++) {
                    const float *xr = x + t * I + p * d, *dr = dy + t * O;
                    for (int64_t jj = 0; jj < b; jj++) hd[jj] = gd[jj] = 0.0;
                    for (int64_t q = 0; q < d; q++) {
                        double xq = xr[q];
                        const double *w = W2T + q * b;
                        for (int64_t jj = 0; jj < b; jj++) hd[jj] += xq * w[jj];
                    }
                    for (int64_t i = 0; i < a; i++) {
                        double w = s->W1d[i * cc + p];
                        const float *g = dr + i * b;
                        for (int64_t jj = 0; jj < b; jj++) gd[jj] += w * (double)g[jj];
                    }
                    for (int64_t jj = 0; jj < b; jj++) av[jj] += gd[jj] * hd[jj];
                }
        }
        if (c->dx) {
            gemm16(false, nt * cc, d, b, GH, b, s->W2, d, dx, d, false, t16);                    /* dx = G_H·W2 */
            for (int64_t t = 0; t < nt; t++) cpu_store(&dxv, t0 + t, 0, I, dx + t * I);
        }
    }
    lyco_status st = LYCO_OK;
    if (want_sig) {
        double sum = 0.0; /* per-run lane sums, in run order */
        for (int th = 0; th < runs; th++)
            for (int64_t jj = 0; jj < b; jj++) sum += sd[(size_t)th * (size_t)(3 * b) + 2 * b + jj];
        float tot = (float)(sum * c->s * c->m);
        cpu_store_all(c->g->grad[LYCO_SCALAR], &tot);
    }
    if (c->g) st = store_grads(s, f);
    free(work);
    free(W1s);
    free(zero);
    free(sd);
    free(W2T);
    return st;
}

static void zero_tensor(DLTensor *t) {
    int64_t n = lyco_numel(t);
    for (int64_t i = 0; i < n; i++) lyco_store_f32(lyco_elem_at(t, i), lyco_dtype_of(t), 0.0f);
}

/* Module dropped in bypass: Δ = 0, so y = y0 (or 0), dx = 0, dy0 = dy (or 0), gradients 0. */
static void bypass_dropped(const lyco_call *c) {
    const lyco_bypass_args *bp = c->bypass;
    bool delta_only = bp->flags & LYCO_BYPASS_DELTA_ONLY;
    if (c->dir == LYCO_DIR_BYPASS_FWD) {
        bool add = bp->y0 && !delta_only;
        int64_t n = lyco_numel(c->y);
        for (int64_t i = 0; i < n; i++)
            lyco_store_f32(lyco_elem_at(c->y, i), lyco_dtype_of(c->y),
                           add ? lyco_round_f32(lyco_load_f32(lyco_elem_at(bp->y0, i), lyco_dtype_of(bp->y0)), c->dt.compute) : 0.0f);
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

lyco_status cpu_lokr(const lyco_call *c, char *why, size_t why_len) {
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    if (c->a->layer.kind == LYCO_LAYER_CONV && c->a->layer.groups != 1) {
        snprintf(why, why_len, "cpu: lokr with grouped conv (groups = %lld) has no fused CPU kernel", (long long)c->a->layer.groups);
        return LYCO_ERR_UNSUPPORTED;
    }
    if (bypass && c->dropped) {
        bypass_dropped(c);
        return LYCO_OK;
    }
    bool grads = c->dir == LYCO_DIR_MERGE_BWD || c->dir == LYCO_DIR_BYPASS_BWD;
    bool dense = c->dims.dora || c->a->layer.kind == LYCO_LAYER_CONV; /* bypass through E = W'' − W */
    lokr_t s;
    lyco_status st = lokr_prepare(c, &s, grads);
    if (st == LYCO_OK) {
        cpu_delta dl = {.rows = rows, .rows_bwd = rows_bwd, .finish_bwd = finish_bwd, .c = c, .state = &s, .uses_sigma = true,
                        .groups = s.runs};
        switch (c->dir) {
        case LYCO_DIR_MERGE_FWD: st = cpu_merge_fwd_stream(c, &dl, span); break;
        case LYCO_DIR_MERGE_BWD: {
            bool sig_grad = c->g && c->g->grad[LYCO_SCALAR];   /* the driver writes it (0 under compat) */
            st = c->dims.dora || sig_grad || c->dropped ? cpu_merge_bwd(c, &dl) : merge_bwd_rows(c, &s);
            break;
        }
        case LYCO_DIR_BYPASS_FWD: st = dense ? cpu_bypass_dense(c, &dl) : bypass_fwd(c, &s); break;
        default: st = dense ? cpu_bypass_dense(c, &dl) : bypass_bwd(c, &s); break;
        }
    }
    lokr_free(&s);
    return st;
}
