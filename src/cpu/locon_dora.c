/*
 * locon_dora.c — LoRA/LoCon with DoRA (ALGORITHMS.md §1.6, §2.1) in bypass on linear layers,
 * fused: ΔW and W'' are never built. Called by locon.c with its prepared factors.
 *
 * Notation: x N×I, W O×I, D r×I, Ū O×r (U with s and the rank mask q_i folded in), σs;
 * ΔW = σs·Ū·D, V = W + ΔW, ‖V‖ per kept index (rows o: wd_on_out; columns i: input axis),
 * n = ‖V‖ + ε, c = m·(d/n − 1) + 1, a = c − 1 = m·(d − n)/n (formed from d − n, not from c).
 * E = W'' − W = a⊙W + c⊙ΔW (row- or column-scaled), so the bypass delta Δ = x·Eᵀ is
 *
 *   out axis: Δ = a⊙(x·Wᵀ) + c⊙(σs·h·Ūᵀ),        h  = x·Dᵀ                   (⊙ over columns o of Δ)
 *   in axis : Δ = (x⊙a)·Wᵀ + σs·hc·Ūᵀ,            hc = x·(D⊙c)ᵀ               (⊙ over columns i of x)
 *
 * each computed per token tile as ONE product [x·(1 or a) | h or hc] · [(a or 1)⊙W | σs·(c or 1)⊙Ū]ᵀ
 * (K = I + r) over row blocks of W. The norms come from the factors, not from V:
 *
 *   out axis: ‖V_o‖² = ‖W_o‖² + 2σs·Ū_o·(W·Dᵀ)_o + σs²·Ū_oᵀ(D·Dᵀ)Ū_o
 *   in axis : ‖V_i‖² = ‖W_:i‖² + 2σs·D_:i·(Ūᵀ·W)_:i + σs²·D_:iᵀ(ŪᵀŪ)D_:i
 *
 * (the three terms in fp64 from fp32 products; one pass over W gives W·Dᵀ or Ūᵀ·W and the squares).
 * Backward, g = dy, dc = ∂L/∂c per kept index, γ = −m·d·dc/(n²·‖V‖) (= ∂L/∂‖V‖ / ‖V‖; 0 where
 * ‖V‖ = 0), ∂L/∂V = γ⊙V, ∂L/∂d = m·dc/n:
 *
 *   out axis: dc_o = Σ_n g[n,o]·(x·Wᵀ + σs·h·Ūᵀ)[n,o];  dx = (g⊙a)·W + σs·e·D, e = (g⊙c)·Ū;
 *             T = (g⊙c)ᵀ·h + γ⊙(W·Dᵀ + σs·Ū·D·Dᵀ);  G_D = σs·(eᵀ·x + (γ⊙Ū)ᵀ·W + σs·((γ⊙Ū)ᵀŪ)·D)
 *   in axis : Q = g·W, R = σs·e·D, e = g·Ū;  dc_i = Σ_n x[n,i]·(Q + R)[n,i];  dx = a⊙(Q + R) + R;
 *             T = gᵀ·hc + W·(D⊙γ)ᵀ + σs·Ū·(D·(D⊙γ)ᵀ);  G_D = σs·(c⊙(eᵀ·x) + γ⊙(Ūᵀ·W + σs·ŪᵀŪ·D))
 *
 * with ∂L/∂Ū = σs·T and ∂L/∂σs = ⟨T, Ū⟩ (locon.c chains Ū to U through s and q_i). Every fp32
 * operand is rounded to the compute dtype as loaded; sums in fp32 (norm terms and ⟨T, Ū⟩ in fp64).
 * Passes over W: forward 1 + one per token tile (W blocks reloaded per tile, as full.c does);
 * backward 2 + one per tile. Partials (dc, T, eᵀx) belong to fixed runs of tiles, and (γ⊙Ū)ᵀ·W /
 * Ūᵀ·W to fixed runs of W blocks, combined in run order: results do not depend on the thread count.
 *
 * Extra memory: per kept index 6 numbers; W·Dᵀ or Ūᵀ·W and the r×r products; per thread
 * TB·(2I + 2O + 2r) + OB·(I + r) floats; per run (≤ CPU_RUNS_BIG) O·r + r·I + O (or I) floats.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"

#define TB 64
#define WBLK_FLOATS 65536

typedef struct {
    const lyco_call *c;
    int64_t N, O, I, r, kept, OB;
    bool out_axis;
    const float *D, *U;      /* D r×I, Ū O×r (s, q_i folded) */
    float sig;               /* σs */
    double m, eps;
    cpu_view wv;             /* W, rows O */
    float *d;                /* dora_scale (kept) */
    double *norm, *n;        /* ‖V‖ and ‖V‖ + ε (kept) */
    float *a, *cf;           /* c − 1 and c (kept) */
    float *WD;               /* out axis: W·Dᵀ (O×r) */
    float *UW;               /* in axis: Ūᵀ·W (r×I) */
    float *RR;               /* out axis D·Dᵀ, in axis ŪᵀŪ (r×r) */
    float *Ds;               /* the down factor of the tile product: D (out) or D⊙c (in), r×I */
    double *w2;              /* Σ W² per kept index */
} dora_bp;

static void bp_free(dora_bp *s) {
    free(s->d);
    free(s->norm);
    free(s->n);
    free(s->a);
    free(s->cf);
    free(s->WD);
    free(s->UW);
    free(s->RR);
    free(s->Ds);
    free(s->w2);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* rows [o0, o0 + nr) of W into dst (row pitch ld), rounded to the compute dtype */
static void load_w(const dora_bp *s, int64_t o0, int64_t nr, float *dst, int64_t ld) {
    for (int64_t j = 0; j < nr; j++) cpu_load(&s->wv, o0 + j, 0, s->I, s->c->dt.compute, dst + j * ld);
}

/* Σ W² per kept index, and W·Dᵀ (out axis, rows owned by their block) or Ūᵀ·W (in axis, fixed runs
   of W blocks summed in run order) */
static lyco_status w_stats(dora_bp *s) {
    int64_t O = s->O, I = s->I, r = s->r, OB = s->OB, nb = (O + OB - 1) / OB;
    int nt = cpu_threads();
    float *work = calloc((size_t)nt * (size_t)(OB * I) + 1, sizeof(float));
    if (!work) return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    if (s->out_axis) {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            float *Wb = work + (size_t)cpu_thread_id() * (size_t)(OB * I);
            int64_t o0 = b * OB, nr = min64(OB, O - o0);
            load_w(s, o0, nr, Wb, I);
            cpu_gemm_nt(nr, r, I, Wb, I, s->D, I, s->WD + o0 * r, r, false);
            for (int64_t j = 0; j < nr; j++) {
                double acc = 0;
                for (int64_t i = 0; i < I; i++) acc += (double)Wb[j * I + i] * Wb[j * I + i];
                s->w2[o0 + j] = acc;
            }
        }
        free(work);
        return LYCO_OK;
    }
    int runs = cpu_runs(nb, CPU_RUNS_BIG);
    float *part = calloc((size_t)runs * (size_t)(r * I) + 1, sizeof(float));
    double *sq = calloc((size_t)runs * (size_t)I + 1, sizeof(double));
    if (!part || !sq) {
        free(work);
        free(part);
        free(sq);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < runs; k++) {
        float *Wb = work + (size_t)cpu_thread_id() * (size_t)(OB * I), *pk = part + (size_t)k * (size_t)(r * I);
        double *sk = sq + (size_t)k * (size_t)I;
        for (int64_t b = cpu_run_start(nb, runs, k); b < cpu_run_start(nb, runs, k + 1); b++) {
            int64_t o0 = b * OB, nr = min64(OB, O - o0);
            load_w(s, o0, nr, Wb, I);
            cpu_gemm_tn(r, I, nr, s->U + o0 * r, r, Wb, I, pk, I, true);
            for (int64_t j = 0; j < nr; j++)
                for (int64_t i = 0; i < I; i++) sk[i] += (double)Wb[j * I + i] * Wb[j * I + i];
        }
    }
    for (int k = 0; k < runs; k++) {
        for (int64_t n = 0; n < r * I; n++) s->UW[n] += part[(size_t)k * (size_t)(r * I) + n];
        for (int64_t i = 0; i < I; i++) s->w2[i] += sq[(size_t)k * (size_t)I + i];
    }
    free(work);
    free(part);
    free(sq);
    return LYCO_OK;
}

/* ‖V‖, n, a, c per kept index from the factored norm; Ds = D (out) or D⊙c (in) */
static void coefficients(dora_bp *s) {
    int64_t r = s->r, I = s->I;
    double sg = s->sig;
    for (int64_t k = 0; k < s->kept; k++) {
        double cross = 0, quad = 0;
        for (int64_t p = 0; p < r; p++) {
            double vp = s->out_axis ? s->U[k * r + p] : s->D[p * I + k];
            cross += vp * (s->out_axis ? s->WD[k * r + p] : s->UW[p * I + k]);
            double t = 0;
            for (int64_t q = 0; q < r; q++) t += (double)s->RR[p * r + q] * (s->out_axis ? s->U[k * r + q] : s->D[q * I + k]);
            quad += vp * t;
        }
        double n2 = s->w2[k] + 2.0 * sg * cross + sg * sg * quad;
        double nrm = sqrt(n2 > 0 ? n2 : 0);
        double n = nrm + s->eps;
        double a = s->m * ((double)s->d[k] - n) / n;
        s->norm[k] = nrm;
        s->n[k] = n;
        s->a[k] = (float)a;
        s->cf[k] = (float)(1.0 + a);
    }
    for (int64_t p = 0; p < r; p++)
        for (int64_t i = 0; i < I; i++) s->Ds[p * I + i] = s->D[p * I + i] * (s->out_axis ? 1.0f : s->cf[i]);
}

static lyco_status bp_init(const lyco_call *c, const float *D, const float *U, int64_t r, dora_bp *s) {
    memset(s, 0, sizeof *s);
    s->c = c;
    s->N = c->tokens;
    s->O = c->dims.O;
    s->I = c->dims.I;
    s->r = r;
    s->out_axis = c->dims.dora_on_out;
    s->kept = s->out_axis ? s->O : s->I;
    s->D = D;
    s->U = U;
    s->sig = cpu_sigma(c);
    s->m = c->m;
    s->OB = WBLK_FLOATS / (s->I + r);
    if (s->OB < 1) s->OB = 1;
    if (s->OB > s->O) s->OB = s->O > 0 ? s->O : 1;
    const DLTensor *dt = c->a->tensor[LYCO_DORA_SCALE];
    s->eps = ldexp(1.0, 1 - lyco_dtype_precision(lyco_dtype_of(dt)));
    cpu_view_init(&s->wv, c->bypass->weight, 1);
    size_t kp = (size_t)s->kept + 1;
    s->d = calloc(kp, sizeof(float));
    s->norm = calloc(kp, sizeof(double));
    s->n = calloc(kp, sizeof(double));
    s->a = calloc(kp, sizeof(float));
    s->cf = calloc(kp, sizeof(float));
    s->w2 = calloc(kp, sizeof(double));
    s->RR = calloc((size_t)(r * r) + 1, sizeof(float));
    s->Ds = calloc((size_t)(r * s->I) + 1, sizeof(float));
    if (s->out_axis) s->WD = calloc((size_t)(s->O * r) + 1, sizeof(float));
    else s->UW = calloc((size_t)(r * s->I) + 1, sizeof(float));
    if (!s->d || !s->norm || !s->n || !s->a || !s->cf || !s->w2 || !s->RR || !s->Ds || (!s->WD && !s->UW))
        return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    cpu_load_all(dt, c->dt.compute, s->d);
    if (s->out_axis) cpu_gemm_nt(r, r, s->I, D, s->I, D, s->I, s->RR, r, false); /* D·Dᵀ */
    else cpu_gemm_tn(r, r, s->O, U, r, U, r, s->RR, r, false);                    /* ŪᵀŪ */
    lyco_status st = w_stats(s);
    if (st) return st;
    coefficients(s);
    return LYCO_OK;
}

/* The tile's left operand A = [x⊙(1 or a) | x·Dsᵀ] (nt × (I + r)); x is also kept unscaled in X. */
static void tile_left(const dora_bp *s, const cpu_view *xv, int64_t t0, int64_t nt, float *X, float *A) {
    int64_t I = s->I, r = s->r, K = I + r;
    for (int64_t t = 0; t < nt; t++) cpu_load(xv, t0 + t, 0, I, s->c->dt.compute, X + t * I);
    cpu_gemm_nt(nt, r, I, X, I, s->Ds, I, A + I, K, false);
    for (int64_t t = 0; t < nt; t++)
        for (int64_t i = 0; i < I; i++) A[t * K + i] = X[t * I + i] * (s->out_axis ? 1.0f : s->a[i]);
}

/* Rows [o0, o0 + nr) of the right operand B = [(a or 1)⊙W | σs·(c or 1)⊙Ū] ((nr) × (I + r)); with
   unscaled, [W | σs·Ū] (the backward's x·Wᵀ + σs·h·Ūᵀ) */
static void block_right(const dora_bp *s, int64_t o0, int64_t nr, bool unscaled, float *B) {
    int64_t I = s->I, r = s->r, K = I + r;
    load_w(s, o0, nr, B, K);
    for (int64_t j = 0; j < nr; j++) {
        int64_t o = o0 + j;
        float wsc = s->out_axis && !unscaled ? s->a[o] : 1.0f, usc = s->sig * (s->out_axis && !unscaled ? s->cf[o] : 1.0f);
        if (wsc != 1.0f)
            for (int64_t i = 0; i < I; i++) B[j * K + i] *= wsc;
        for (int64_t p = 0; p < r; p++) B[j * K + I + p] = usc * s->U[o * r + p];
    }
}

static lyco_status dora_fwd(dora_bp *s) {
    const lyco_call *c = s->c;
    const lyco_bypass_args *b = c->bypass;
    int64_t N = s->N, I = s->I, O = s->O, r = s->r, K = I + r, OB = s->OB;
    cpu_view xv, y0v, yv;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&yv, c->y, c->y->ndim - 1);
    bool add = b->y0 && !(b->flags & LYCO_BYPASS_DELTA_ONLY);
    if (add) cpu_view_init(&y0v, b->y0, b->y0->ndim - 1);
    int64_t per = TB * I + TB * K + OB * K + TB * O;
    float *work = calloc((size_t)cpu_threads() * (size_t)per + 1, sizeof(float));
    if (!work) return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    int64_t ntiles = (N + TB - 1) / TB;
#pragma omp parallel for schedule(static)
    for (int64_t tile = 0; tile < ntiles; tile++) {
        float *X = work + (size_t)cpu_thread_id() * (size_t)per, *A = X + TB * I, *B = A + TB * K, *y = B + OB * K;
        int64_t t0 = tile * TB, nt = min64(TB, N - t0);
        tile_left(s, &xv, t0, nt, X, A);
        if (add)
            for (int64_t t = 0; t < nt; t++) cpu_load(&y0v, t0 + t, 0, O, c->dt.compute, y + t * O);
        for (int64_t o0 = 0; o0 < O; o0 += OB) {
            int64_t nr = min64(OB, O - o0);
            block_right(s, o0, nr, false, B);
            cpu_gemm_nt(nt, nr, K, A, K, B, K, y + o0, O, add);
        }
        for (int64_t t = 0; t < nt; t++) cpu_store(&yv, t0 + t, 0, O, y + t * O);
    }
    free(work);
    return LYCO_OK;
}

/* Stores dora_scale's gradient m·dc/n and returns γ (kept) in gam. */
static lyco_status finish_dc(const dora_bp *s, const float *dc, float *gam) {
    const lyco_call *c = s->c;
    float *gd = calloc((size_t)s->kept + 1, sizeof(float));
    if (!gd) return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    for (int64_t k = 0; k < s->kept; k++) {
        gd[k] = (float)(s->m * dc[k] / s->n[k]);
        gam[k] = s->norm[k] > 0 ? (float)(-s->m * s->d[k] * dc[k] / (s->n[k] * s->n[k] * s->norm[k])) : 0.0f;
    }
    if (lyco_call_wants(c, LYCO_DORA_SCALE)) cpu_store_all(c->g->grad[LYCO_DORA_SCALE], gd);
    free(gd);
    return LYCO_OK;
}

typedef struct {
    float *dc, *T, *eX;   /* runs × (kept, O·r, r·I) */
    int runs;
} bwd_parts;

/* One token tile of the backward: dx stored, dy0 stored, partials dc, T (without the γ term), eᵀx. */
static void bwd_tile(const dora_bp *s, const cpu_view *xv, const cpu_view *dyv, const cpu_view *dxv, const cpu_view *dy0v,
                     int64_t t0, int64_t nt, float *wk, float *dc, float *T, float *eX) {
    const lyco_call *c = s->c;
    int64_t I = s->I, O = s->O, r = s->r, K = I + r, OB = s->OB;
    float *X = wk, *A = X + TB * I, *B = A + TB * K, *G = B + OB * K, *Gs = G + TB * O, *e = Gs + TB * O, *Q = e + TB * r,
          *R = Q + TB * I, *zp = R + TB * I;
    lyco_dtype Tc = c->dt.compute;
    tile_left(s, xv, t0, nt, X, A);
    for (int64_t t = 0; t < nt; t++) cpu_load(dyv, t0 + t, 0, O, Tc, G + t * O);
    if (dy0v)
        for (int64_t t = 0; t < nt; t++) cpu_store(dy0v, t0 + t, 0, O, G + t * O);
    if (s->out_axis) {
        for (int64_t t = 0; t < nt; t++)
            for (int64_t o = 0; o < O; o++) Gs[t * O + o] = G[t * O + o] * s->cf[o];   /* g⊙c */
        cpu_gemm_nn(nt, r, O, Gs, O, s->U, r, e, r, false);                           /* e = (g⊙c)·Ū */
        cpu_gemm_tn(O, r, nt, Gs, O, A + I, K, T, r, true);                           /* T += (g⊙c)ᵀ·h */
        for (int64_t t = 0; t < nt; t++)
            for (int64_t o = 0; o < O; o++) Gs[t * O + o] = G[t * O + o] * s->a[o];    /* g⊙a */
        for (int64_t t = 0; t < nt * r; t++) e[t] *= s->sig;
        cpu_gemm_nn(nt, I, r, e, r, s->D, I, Q, I, false);                            /* dx = σs·e·D … */
        for (int64_t o0 = 0; o0 < O; o0 += OB) {
            int64_t nr = min64(OB, O - o0);
            block_right(s, o0, nr, true, B);                                           /* [W | σs·Ū] */
            cpu_gemm_nt(nt, nr, K, A, K, B, K, zp, OB, false);                         /* x·Wᵀ + σs·h·Ūᵀ */
            for (int64_t j = 0; j < nr; j++) {
                float acc = 0.0f;
                for (int64_t t = 0; t < nt; t++) acc += G[t * O + o0 + j] * zp[t * OB + j];
                dc[o0 + j] += acc;
            }
            cpu_gemm_nn(nt, I, nr, Gs + o0, O, B, K, Q, I, true);                      /* … + (g⊙a)·W */
        }
        if (dxv)
            for (int64_t t = 0; t < nt; t++) cpu_store(dxv, t0 + t, 0, I, Q + t * I);
        cpu_gemm_tn(r, I, nt, e, r, X, I, eX, I, true);                                /* eX += σs·eᵀ·x */
        return;
    }
    cpu_gemm_nn(nt, r, O, G, O, s->U, r, e, r, false);                                 /* e = g·Ū */
    cpu_gemm_tn(O, r, nt, G, O, A + I, K, T, r, true);                                 /* T += gᵀ·hc */
    for (int64_t t = 0; t < nt * r; t++) e[t] *= s->sig;
    cpu_gemm_nn(nt, I, r, e, r, s->D, I, R, I, false);                                 /* R = σs·e·D */
    memcpy(Q, R, sizeof(float) * (size_t)(nt * I));
    for (int64_t o0 = 0; o0 < O; o0 += OB) {
        int64_t nr = min64(OB, O - o0);
        load_w(s, o0, nr, B, I);
        cpu_gemm_nn(nt, I, nr, G + o0, O, B, I, Q, I, true);                           /* Q + R */
    }
    for (int64_t i = 0; i < I; i++) {
        float acc = 0.0f;
        for (int64_t t = 0; t < nt; t++) acc += X[t * I + i] * Q[t * I + i];
        dc[i] += acc;
    }
    if (dxv) {
        for (int64_t t = 0; t < nt; t++)
            for (int64_t i = 0; i < I; i++) Q[t * I + i] = s->a[i] * Q[t * I + i] + R[t * I + i];
        for (int64_t t = 0; t < nt; t++) cpu_store(dxv, t0 + t, 0, I, Q + t * I);
    }
    cpu_gemm_tn(r, I, nt, e, r, X, I, eX, I, true);                                    /* eX += σs·eᵀ·x */
}

/* The γ terms that need W once more: out axis G_D += σs·(γ⊙Ū)ᵀ·W (fixed runs of W blocks),
   in axis T += W·(D⊙γ)ᵀ (rows owned by their block). */
static lyco_status gamma_w_pass(const dora_bp *s, const float *gam, float *T, float *gD) {
    int64_t O = s->O, I = s->I, r = s->r, OB = s->OB, nb = (O + OB - 1) / OB;
    float *work = calloc((size_t)cpu_threads() * (size_t)(OB * I) + 1, sizeof(float));
    float *Uc = calloc((size_t)((s->out_axis ? O : r) * (s->out_axis ? r : I)) + 1, sizeof(float));
    if (!work || !Uc) {
        free(work);
        free(Uc);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    }
    if (!s->out_axis) {
        for (int64_t p = 0; p < r; p++)
            for (int64_t i = 0; i < I; i++) Uc[p * I + i] = s->D[p * I + i] * gam[i];       /* D⊙γ */
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            float *Wb = work + (size_t)cpu_thread_id() * (size_t)(OB * I);
            int64_t o0 = b * OB, nr = min64(OB, O - o0);
            load_w(s, o0, nr, Wb, I);
            cpu_gemm_nt(nr, r, I, Wb, I, Uc, I, T + o0 * r, r, true);
        }
        free(work);
        free(Uc);
        return LYCO_OK;
    }
    for (int64_t o = 0; o < O; o++)
        for (int64_t p = 0; p < r; p++) Uc[o * r + p] = s->sig * gam[o] * s->U[o * r + p];     /* σs·γ⊙Ū */
    int runs = cpu_runs(nb, CPU_RUNS_BIG);
    float *part = calloc((size_t)runs * (size_t)(r * I) + 1, sizeof(float));
    if (!part) {
        free(work);
        free(Uc);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < runs; k++) {
        float *Wb = work + (size_t)cpu_thread_id() * (size_t)(OB * I), *pk = part + (size_t)k * (size_t)(r * I);
        for (int64_t b = cpu_run_start(nb, runs, k); b < cpu_run_start(nb, runs, k + 1); b++) {
            int64_t o0 = b * OB, nr = min64(OB, O - o0);
            load_w(s, o0, nr, Wb, I);
            cpu_gemm_tn(r, I, nr, Uc + o0 * r, r, Wb, I, pk, I, true);
        }
    }
    for (int k = 0; k < runs; k++)
        for (int64_t n = 0; n < r * I; n++) gD[n] += part[(size_t)k * (size_t)(r * I) + n];
    free(part);
    free(work);
    free(Uc);
    return LYCO_OK;
}

static lyco_status dora_bwd(dora_bp *s, float *gU, float *gD) {
    const lyco_call *c = s->c;
    const lyco_bypass_args *b = c->bypass;
    int64_t N = s->N, I = s->I, O = s->O, r = s->r, K = I + r, OB = s->OB, kept = s->kept;
    cpu_view xv, dyv, dxv, dy0v;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&dyv, c->dy, c->dy->ndim - 1);
    if (c->dx) cpu_view_init(&dxv, c->dx, c->dx->ndim - 1);
    bool delta_only = b->flags & LYCO_BYPASS_DELTA_ONLY;
    if (c->dy0 && !delta_only) cpu_view_init(&dy0v, c->dy0, c->dy0->ndim - 1);
    if (c->dy0 && delta_only) /* y = Δ(x) alone does not read y0 */
        for (int64_t i = 0; i < lyco_numel(c->dy0); i++) lyco_store_f32(lyco_elem_at(c->dy0, i), lyco_dtype_of(c->dy0), 0.0f);
    int64_t ntiles = (N + TB - 1) / TB;
    int runs = cpu_runs(ntiles, CPU_RUNS_BIG);
    int64_t per = TB * I + TB * K + OB * K + 2 * TB * O + TB * r + 2 * TB * I + TB * OB;
    int64_t pp = kept + O * r + r * I;
    float *work = calloc((size_t)cpu_threads() * (size_t)per + 1, sizeof(float));
    float *part = calloc((size_t)runs * (size_t)pp + 1, sizeof(float));
    float *gam = calloc((size_t)kept + 1, sizeof(float)), *aux = calloc((size_t)(r * (O > I ? O : I)) + 1, sizeof(float));
    lyco_status st = LYCO_OK;
    if (!work || !part || !gam || !aux) {
        st = lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
        goto done;
    }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < runs; k++) {
        float *wk = work + (size_t)cpu_thread_id() * (size_t)per, *pk = part + (size_t)k * (size_t)pp;
        for (int64_t tile = cpu_run_start(ntiles, runs, k); tile < cpu_run_start(ntiles, runs, k + 1); tile++) {
            int64_t t0 = tile * TB;
            bwd_tile(s, &xv, &dyv, c->dx ? &dxv : NULL, c->dy0 && !delta_only ? &dy0v : NULL, t0, min64(TB, N - t0), wk, pk,
                     pk + kept, pk + kept + O * r);
        }
    }
    /* run partials in run order: dc into part's first run, T into gU, eᵀx (σs inside) into gD */
    float *dc = part;
    memcpy(gU, part + kept, sizeof(float) * (size_t)(O * r));
    memcpy(gD, part + kept + O * r, sizeof(float) * (size_t)(r * I));
    for (int k = 1; k < runs; k++) {
        const float *pk = part + (size_t)k * (size_t)pp;
        for (int64_t n = 0; n < kept; n++) dc[n] += pk[n];
        for (int64_t n = 0; n < O * r; n++) gU[n] += pk[kept + n];
        for (int64_t n = 0; n < r * I; n++) gD[n] += pk[kept + O * r + n];
    }
    if ((st = finish_dc(s, dc, gam))) goto done;
    if (s->out_axis) {
        /* T += γ⊙(W·Dᵀ + σs·Ū·D·Dᵀ) */
        cpu_gemm_nn(O, r, r, s->U, r, s->RR, r, aux, r, false);
        for (int64_t o = 0; o < O; o++)
            for (int64_t p = 0; p < r; p++) gU[o * r + p] += gam[o] * (s->WD[o * r + p] + s->sig * aux[o * r + p]);
        /* G_D = σs·eᵀx (so far) + σs·(γ⊙Ū)ᵀ·W + σs²·((γ⊙Ū)ᵀŪ)·D */
        if ((st = gamma_w_pass(s, gam, gU, gD))) goto done;
        float *UgU = calloc((size_t)(r * r) + 1, sizeof(float)), *Ug = calloc((size_t)(O * r) + 1, sizeof(float));
        if (!UgU || !Ug) {
            free(UgU);
            free(Ug);
            st = lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
            goto done;
        }
        for (int64_t o = 0; o < O; o++)
            for (int64_t p = 0; p < r; p++) Ug[o * r + p] = s->sig * s->sig * gam[o] * s->U[o * r + p];
        cpu_gemm_tn(r, r, O, Ug, r, s->U, r, UgU, r, false);
        cpu_gemm_nn(r, I, r, UgU, r, s->D, I, gD, I, true);
        free(UgU);
        free(Ug);
    } else {
        /* T += W·(D⊙γ)ᵀ + σs·Ū·(D·(D⊙γ)ᵀ) */
        if ((st = gamma_w_pass(s, gam, gU, gD))) goto done;
        float *Dg = calloc((size_t)(r * I) + 1, sizeof(float)), *DDg = calloc((size_t)(r * r) + 1, sizeof(float));
        if (!Dg || !DDg) {
            free(Dg);
            free(DDg);
            st = lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
            goto done;
        }
        for (int64_t p = 0; p < r; p++)
            for (int64_t i = 0; i < I; i++) Dg[p * I + i] = s->sig * s->D[p * I + i] * gam[i];
        cpu_gemm_nt(r, r, I, s->D, I, Dg, I, DDg, r, false);
        cpu_gemm_nn(O, r, r, s->U, r, DDg, r, gU, r, true);
        free(Dg);
        free(DDg);
        /* G_D = σs·(c⊙(eᵀx) + γ⊙(Ūᵀ·W + σs·ŪᵀŪ·D)); gD holds σs·eᵀx */
        cpu_gemm_nn(r, I, r, s->RR, r, s->D, I, aux, I, false);
        for (int64_t p = 0; p < r; p++)
            for (int64_t i = 0; i < I; i++)
                gD[p * I + i] = s->cf[i] * gD[p * I + i] + s->sig * gam[i] * (s->UW[p * I + i] + s->sig * aux[p * I + i]);
    }
    /* ∂L/∂σs = ⟨T, Ū⟩, ∂L/∂Ū = σs·T */
    if (lyco_call_wants(c, LYCO_SCALAR)) {
        double acc = 0;
        for (int64_t n = 0; n < O * r; n++) acc += (double)gU[n] * s->U[n];
        float v = (float)acc;
        cpu_store_all(c->g->grad[LYCO_SCALAR], &v);
    }
    for (int64_t n = 0; n < O * r; n++) gU[n] *= s->sig;
done:
    free(work);
    free(part);
    free(gam);
    free(aux);
    return st;
}

lyco_status cpu_locon_dora_bypass(const lyco_call *c, const float *D, const float *U, int64_t r, float *gU, float *gD) {
    dora_bp s;
    lyco_status st = bp_init(c, D, U, r, &s);
    if (st == LYCO_OK) st = c->dir == LYCO_DIR_BYPASS_FWD ? dora_fwd(&s) : dora_bwd(&s, gU, gD);
    bp_free(&s);
    return st;
}
