/*
 * locon_dora.c — LoRA/LoCon with DoRA (ALGORITHMS.md §1.6, §2.1) in bypass, linear and conv layers,
 * fused: ΔW and W'' are never built. Called by locon.c with its prepared factors.
 *
 * Notation: the layer's rows X are tokens (linear: x N×I) or, per image, output positions with
 * their im2col columns (conv: Xt, IK = I·K columns, kernel offset fastest); W O×IK, D r×IK, Ū O×r
 * (U with s and the rank mask q_i folded in), σs; ΔW = σs·Ū·D, V = W + ΔW, ‖V‖ per kept index
 * (rows o: wd_on_out; input channels c — the K columns j = c·K + κ — otherwise), n = ‖V‖ + ε,
 * c = m·(d/n − 1) + 1, a = c − 1 = m·(d − n)/n (formed from d − n, not from c); on the input
 * axis a_j, c_j are the values of column j's channel. E = W'' − W = a⊙W + c⊙ΔW, so Δ = X·Eᵀ is
 *
 *   out axis: Δ = a⊙(X·Wᵀ) + c⊙(σs·h·Ūᵀ),        h  = X·Dᵀ                   (⊙ over columns o of Δ)
 *   in axis : Δ = (X⊙a)·Wᵀ + σs·hc·Ūᵀ,            hc = X·(D⊙c)ᵀ               (⊙ over columns j of X)
 *
 * each computed per tile of rows as ONE product [X·(1 or a) | h or hc] · [(a or 1)⊙W | σs·(c or 1)⊙Ū]ᵀ
 * (K = IK + r) over row blocks of W. The norms come from the factors, not from V:
 *
 *   out axis: ‖V_o‖² = ‖W_o‖² + 2σs·Ū_o·(W·Dᵀ)_o + σs²·Ū_oᵀ(D·Dᵀ)Ū_o
 *   in axis : ‖V_c‖² = Σ_{j of c} ‖W_:j‖² + 2σs·D_:j·(Ūᵀ·W)_:j + σs²·D_:jᵀ(ŪᵀŪ)D_:j
 *
 * (the terms in fp64 from fp32 products; one pass over W gives W·Dᵀ or Ūᵀ·W and the squares).
 * Backward, g = dy (rows as X), dc = ∂L/∂c per kept index, γ = −m·d·dc/(n²·‖V‖) (= ∂L/∂‖V‖ / ‖V‖;
 * 0 where ‖V‖ = 0), ∂L/∂V = γ⊙V, ∂L/∂d = m·dc/n:
 *
 *   out axis: dc_o = Σ_rows g[·,o]·(X·Wᵀ + σs·h·Ūᵀ)[·,o];  dX = (g⊙a)·W + σs·e·D, e = (g⊙c)·Ū;
 *             T = (g⊙c)ᵀ·h + γ⊙(W·Dᵀ + σs·Ū·D·Dᵀ);  G_D = σs·(eᵀ·X + (γ⊙Ū)ᵀ·W + σs·((γ⊙Ū)ᵀŪ)·D)
 *   in axis : Q = g·W, R = σs·e·D, e = g·Ū;  dc_c = Σ_{j of c} Σ_rows X[·,j]·(Q + R)[·,j];  dX = a⊙(Q + R) + R;
 *             T = gᵀ·hc + W·(D⊙γ)ᵀ + σs·Ū·(D·(D⊙γ)ᵀ);  G_D = σs·(c⊙(eᵀ·X) + γ⊙(Ūᵀ·W + σs·ŪᵀŪ·D))
 *
 * with ∂L/∂Ū = σs·T and ∂L/∂σs = ⟨T, Ū⟩ (locon.c chains Ū to U through s and q_i); conv dX goes back
 * to dx through col2im. Every fp32 operand is rounded to the compute dtype as loaded; sums in fp32
 * (norm terms and ⟨T, Ū⟩ in fp64). Passes over W: forward 1 + one per tile (W blocks reloaded per
 * tile, as full.c does); backward 2 + one per tile. Partials (dc, T, eᵀX, conv dx images) belong to
 * fixed runs of tiles, and (γ⊙Ū)ᵀ·W / Ūᵀ·W to fixed runs of W blocks, combined in run order:
 * results do not depend on the thread count.
 *
 * Extra memory: per kept index 6 numbers (+ 3 per column on the input axis); W·Dᵀ or Ūᵀ·W and the
 * r×r products; per thread TB·(2·IK + 2·O + 2r + OB) + OB·(IK + r) floats; per run (≤ CPU_RUNS_BIG)
 * O·r + r·IK + IK floats; conv: one fp32 image, and per run one dx image in the backward.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "im2col.h"

#define TB 64
#define WBLK_FLOATS 65536

typedef struct {
    const lyco_call *c;
    int64_t O, IK, K, r, kept, OB;
    bool out_axis, conv;
    conv_geo g;              /* conv layers */
    const float *D, *U;      /* D r×IK, Ū O×r (s, q_i folded) */
    float sig;               /* σs */
    double m, eps;
    cpu_view wv;             /* W, rows O */
    float *d;                /* dora_scale (kept) */
    double *norm, *n;        /* ‖V‖ and ‖V‖ + ε (kept) */
    float *a, *cf;           /* c − 1 and c (kept) */
    float *acol, *ccol;      /* in axis: a and c of each column's channel (IK) */
    float *WD;               /* out axis: W·Dᵀ (O×r) */
    float *UW;               /* in axis: Ūᵀ·W (r×IK) */
    float *RR;               /* out axis D·Dᵀ, in axis ŪᵀŪ (r×r) */
    float *Ds;               /* the down factor of the tile product: D (out) or D⊙c (in), r×IK */
    double *w2;              /* Σ W² per row (out) or per column (in) */
} dora_bp;

static void bp_free(dora_bp *s) {
    free(s->d);
    free(s->norm);
    free(s->n);
    free(s->a);
    free(s->cf);
    free(s->acol);
    free(s->ccol);
    free(s->WD);
    free(s->UW);
    free(s->RR);
    free(s->Ds);
    free(s->w2);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* rows [o0, o0 + nr) of W into dst (row pitch ld), rounded to the compute dtype */
static void load_w(const dora_bp *s, int64_t o0, int64_t nr, float *dst, int64_t ld) {
    for (int64_t j = 0; j < nr; j++) cpu_load(&s->wv, o0 + j, 0, s->IK, s->c->dt.compute, dst + j * ld);
}

/* Σ W² per row (out) or per column (in), and W·Dᵀ (out axis, rows owned by their block) or Ūᵀ·W
   (in axis, fixed runs of W blocks summed in run order) */
static lyco_status w_stats(dora_bp *s) {
    int64_t O = s->O, IK = s->IK, r = s->r, OB = s->OB, nb = (O + OB - 1) / OB;
    int nt = cpu_threads();
    float *work = calloc((size_t)nt * (size_t)(OB * IK) + 1, sizeof(float));
    if (!work) return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    if (s->out_axis) {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            float *Wb = work + (size_t)cpu_thread_id() * (size_t)(OB * IK);
            int64_t o0 = b * OB, nr = min64(OB, O - o0);
            load_w(s, o0, nr, Wb, IK);
            cpu_gemm_nt(nr, r, IK, Wb, IK, s->D, IK, s->WD + o0 * r, r, false);
            for (int64_t j = 0; j < nr; j++) {
                double acc = 0;
                for (int64_t i = 0; i < IK; i++) acc += (double)Wb[j * IK + i] * Wb[j * IK + i];
                s->w2[o0 + j] = acc;
            }
        }
        free(work);
        return LYCO_OK;
    }
    int runs = cpu_runs(nb, CPU_RUNS_BIG);
    float *part = calloc((size_t)runs * (size_t)(r * IK) + 1, sizeof(float));
    double *sq = calloc((size_t)runs * (size_t)IK + 1, sizeof(double));
    if (!part || !sq) {
        free(work);
        free(part);
        free(sq);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < runs; k++) {
        float *Wb = work + (size_t)cpu_thread_id() * (size_t)(OB * IK), *pk = part + (size_t)k * (size_t)(r * IK);
        double *sk = sq + (size_t)k * (size_t)IK;
        for (int64_t b = cpu_run_start(nb, runs, k); b < cpu_run_start(nb, runs, k + 1); b++) {
            int64_t o0 = b * OB, nr = min64(OB, O - o0);
            load_w(s, o0, nr, Wb, IK);
            cpu_gemm_tn(r, IK, nr, s->U + o0 * r, r, Wb, IK, pk, IK, true);
            for (int64_t j = 0; j < nr; j++)
                for (int64_t i = 0; i < IK; i++) sk[i] += (double)Wb[j * IK + i] * Wb[j * IK + i];
        }
    }
    for (int k = 0; k < runs; k++) {
        for (int64_t n = 0; n < r * IK; n++) s->UW[n] += part[(size_t)k * (size_t)(r * IK) + n];
        for (int64_t i = 0; i < IK; i++) s->w2[i] += sq[(size_t)k * (size_t)IK + i];
    }
    free(work);
    free(part);
    free(sq);
    return LYCO_OK;
}

/* Σ_p X[p]·(Y[p] + Σ_q RR[p,q]·X[q]) over the r ranks, X and Y read with stride sx, sy (fp64) */
static double norm_terms(const dora_bp *s, const float *X, int64_t sx, const float *Y, int64_t sy) {
    double cross = 0, quad = 0;
    for (int64_t p = 0; p < s->r; p++) {
        double t = 0;
        for (int64_t q = 0; q < s->r; q++) t += (double)s->RR[p * s->r + q] * X[q * sx];
        cross += (double)X[p * sx] * Y[p * sy];
        quad += (double)X[p * sx] * t;
    }
    return 2.0 * s->sig * cross + (double)s->sig * s->sig * quad;
}

/* ‖V‖, n, a, c per kept index from the factored norm; Ds = D (out) or D⊙c (in) */
static void coefficients(dora_bp *s) {
    int64_t r = s->r, IK = s->IK, K = s->K;
    for (int64_t k = 0; k < s->kept; k++) {
        double n2 = 0;
        if (s->out_axis) n2 = s->w2[k] + norm_terms(s, s->U + k * r, 1, s->WD + k * r, 1);
        else
            for (int64_t j = k * K; j < (k + 1) * K; j++) n2 += s->w2[j] + norm_terms(s, s->D + j, IK, s->UW + j, IK);
        double nrm = sqrt(n2 > 0 ? n2 : 0);
        double n = nrm + s->eps;
        double a = s->m * ((double)s->d[k] - n) / n;
        s->norm[k] = nrm;
        s->n[k] = n;
        s->a[k] = (float)a;
        s->cf[k] = (float)(1.0 + a);
    }
    if (!s->out_axis)
        for (int64_t j = 0; j < IK; j++) {
            s->acol[j] = s->a[j / K];
            s->ccol[j] = s->cf[j / K];
        }
    for (int64_t p = 0; p < r; p++)
        for (int64_t j = 0; j < IK; j++) s->Ds[p * IK + j] = s->D[p * IK + j] * (s->out_axis ? 1.0f : s->ccol[j]);
}

static lyco_status bp_init(const lyco_call *c, const float *D, const float *U, int64_t r, dora_bp *s) {
    memset(s, 0, sizeof *s);
    s->c = c;
    s->O = c->dims.O;
    s->K = c->dims.K;
    s->IK = c->dims.I * c->dims.K;
    s->r = r;
    s->conv = c->a->layer.kind == LYCO_LAYER_CONV;
    if (s->conv) conv_geo_init(c, r, &s->g);
    s->out_axis = c->dims.dora_on_out;
    s->kept = s->out_axis ? s->O : c->dims.I;
    s->D = D;
    s->U = U;
    s->sig = cpu_sigma(c);
    s->m = c->m;
    s->OB = WBLK_FLOATS / (s->IK + r);
    if (s->OB < 1) s->OB = 1;
    if (s->OB > s->O) s->OB = s->O > 0 ? s->O : 1;
    const DLTensor *dt = c->a->tensor[LYCO_DORA_SCALE];
    s->eps = ldexp(1.0, 1 - lyco_dtype_precision(lyco_dtype_of(dt)));
    cpu_view_init(&s->wv, c->bypass->weight, 1);
    size_t kp = (size_t)s->kept + 1, cols = (size_t)s->IK + 1;
    s->d = calloc(kp, sizeof(float));
    s->norm = calloc(kp, sizeof(double));
    s->n = calloc(kp, sizeof(double));
    s->a = calloc(kp, sizeof(float));
    s->cf = calloc(kp, sizeof(float));
    s->w2 = calloc(s->out_axis ? kp : cols, sizeof(double));
    s->RR = calloc((size_t)(r * r) + 1, sizeof(float));
    s->Ds = calloc((size_t)(r * s->IK) + 1, sizeof(float));
    if (s->out_axis) {
        s->WD = calloc((size_t)(s->O * r) + 1, sizeof(float));
    } else {
        s->UW = calloc((size_t)(r * s->IK) + 1, sizeof(float));
        s->acol = calloc(cols, sizeof(float));
        s->ccol = calloc(cols, sizeof(float));
    }
    if (!s->d || !s->norm || !s->n || !s->a || !s->cf || !s->w2 || !s->RR || !s->Ds ||
        (s->out_axis ? !s->WD : (!s->UW || !s->acol || !s->ccol)))
        return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    cpu_load_all(dt, c->dt.compute, s->d);
    if (s->out_axis) cpu_gemm_nt(r, r, s->IK, D, s->IK, D, s->IK, s->RR, r, false); /* D·Dᵀ */
    else cpu_gemm_tn(r, r, s->O, U, r, U, r, s->RR, r, false);                      /* ŪᵀŪ */
    lyco_status st = w_stats(s);
    if (st) return st;
    coefficients(s);
    return LYCO_OK;
}

/* The tile's left operand A = [X⊙(1 or a) | X·Dsᵀ] (nt × (IK + r)) from its rows X (nt × IK). */
static void tile_left(const dora_bp *s, const float *X, int64_t nt, float *A) {
    int64_t IK = s->IK, r = s->r, K = IK + r;
    cpu_gemm_nt(nt, r, IK, X, IK, s->Ds, IK, A + IK, K, false);
    for (int64_t t = 0; t < nt; t++)
        for (int64_t i = 0; i < IK; i++) A[t * K + i] = X[t * IK + i] * (s->out_axis ? 1.0f : s->acol[i]);
}

/* Rows [o0, o0 + nr) of the right operand B = [(a or 1)⊙W | σs·(c or 1)⊙Ū] ((nr) × (IK + r)); with
   unscaled, [W | σs·Ū] (the backward's X·Wᵀ + σs·h·Ūᵀ) */
static void block_right(const dora_bp *s, int64_t o0, int64_t nr, bool unscaled, float *B) {
    int64_t IK = s->IK, r = s->r, K = IK + r;
    load_w(s, o0, nr, B, K);
    for (int64_t j = 0; j < nr; j++) {
        int64_t o = o0 + j;
        float wsc = s->out_axis && !unscaled ? s->a[o] : 1.0f, usc = s->sig * (s->out_axis && !unscaled ? s->cf[o] : 1.0f);
        if (wsc != 1.0f)
            for (int64_t i = 0; i < IK; i++) B[j * K + i] *= wsc;
        for (int64_t p = 0; p < r; p++) B[j * K + IK + p] = usc * s->U[o * r + p];
    }
}

/* y (nt × O, holding y0 when add) += the tile's Δ, from its rows X; wk: TB·(IK + r) + OB·(IK + r) */
static void fwd_tile(const dora_bp *s, const float *X, int64_t nt, bool add, float *y, float *wk) {
    int64_t O = s->O, K = s->IK + s->r, OB = s->OB;
    float *A = wk, *B = A + TB * K;
    tile_left(s, X, nt, A);
    for (int64_t o0 = 0; o0 < O; o0 += OB) {
        int64_t nr = min64(OB, O - o0);
        block_right(s, o0, nr, false, B);
        cpu_gemm_nt(nt, nr, K, A, K, B, K, y + o0, O, add);
    }
}

/* out (cols × rows) = in (rows × cols)ᵀ */
static void transpose(const float *in, int64_t rows, int64_t cols, float *out) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) out[j * rows + i] = in[i * cols + j];
}

static lyco_status dora_fwd(dora_bp *s) {
    const lyco_call *c = s->c;
    const lyco_bypass_args *b = c->bypass;
    lyco_dtype T = c->dt.compute;
    int64_t IK = s->IK, O = s->O, K = IK + s->r, OB = s->OB;
    bool add = b->y0 && !(b->flags & LYCO_BYPASS_DELTA_ONLY);
    cpu_view xv, y0v, yv;
    int split = s->conv ? 2 : b->x->ndim - 1; /* conv: (N·C) × spatial rows */
    cpu_view_init(&xv, b->x, split);
    cpu_view_init(&yv, c->y, s->conv ? 2 : c->y->ndim - 1);
    if (add) cpu_view_init(&y0v, b->y0, s->conv ? 2 : b->y0->ndim - 1);
    int64_t per = TB * IK + TB * K + OB * K + 2 * TB * O;
    float *work = calloc((size_t)cpu_threads() * (size_t)per + 1, sizeof(float));
    float *img = s->conv ? malloc(sizeof(float) * (size_t)(s->g.I * s->g.sin + 1)) : NULL;
    if (!work || (s->conv && !img)) {
        free(work);
        free(img);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    }
    if (!s->conv) {
        int64_t N = c->tokens, ntiles = (N + TB - 1) / TB;
#pragma omp parallel for schedule(static)
        for (int64_t tile = 0; tile < ntiles; tile++) {
            float *X = work + (size_t)cpu_thread_id() * (size_t)per, *y = X + TB * IK, *wk = y + 2 * TB * O;
            int64_t t0 = tile * TB, nt = min64(TB, N - t0);
            for (int64_t t = 0; t < nt; t++) cpu_load(&xv, t0 + t, 0, IK, T, X + t * IK);
            if (add)
                for (int64_t t = 0; t < nt; t++) cpu_load(&y0v, t0 + t, 0, O, T, y + t * O);
            fwd_tile(s, X, nt, add, y, wk);
            for (int64_t t = 0; t < nt; t++) cpu_store(&yv, t0 + t, 0, O, y + t * O);
        }
    } else {
        const conv_geo *g = &s->g;
        int64_t ntiles = (g->sout + TB - 1) / TB;
        for (int64_t n = 0; n < c->tokens; n++) {
            for (int64_t ch = 0; ch < g->I; ch++) cpu_load(&xv, n * g->I + ch, 0, g->sin, T, img + ch * g->sin);
#pragma omp parallel for schedule(static)
            for (int64_t tile = 0; tile < ntiles; tile++) {
                float *X = work + (size_t)cpu_thread_id() * (size_t)per, *y = X + TB * IK, *yT = y + TB * O, *wk = yT + TB * O;
                int64_t p0 = tile * TB, np = min64(TB, g->sout - p0);
                im2col(g, img, p0, np, X);
                if (add) {
                    for (int64_t o = 0; o < O; o++) cpu_load(&y0v, n * O + o, p0, np, T, yT + o * np);
                    transpose(yT, O, np, y);
                }
                fwd_tile(s, X, np, add, y, wk);
                transpose(y, np, O, yT);
                for (int64_t o = 0; o < O; o++) cpu_store(&yv, n * O + o, p0, np, yT + o * np);
            }
        }
    }
    free(work);
    free(img);
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

/* One tile of the backward from its rows X (nt × IK) and G = dy (nt × O): dX (nt × IK) into Q, and
   the run's partials dc (per row o, or per column j on the input axis), T (without the γ term) and
   eᵀX (σs inside). wk: TB·(IK + r) + OB·(IK + r) + TB·O + TB·r + TB·IK + TB·OB floats. */
static void bwd_tile(const dora_bp *s, const float *X, const float *G, int64_t nt, float *wk, float *Q, float *dc, float *T,
                     float *eX) {
    int64_t IK = s->IK, O = s->O, r = s->r, K = IK + r, OB = s->OB;
    float *A = wk, *B = A + TB * K, *Gs = B + OB * K, *e = Gs + TB * O, *R = e + TB * r, *zp = R + TB * IK;
    tile_left(s, X, nt, A);
    if (s->out_axis) {
        for (int64_t t = 0; t < nt; t++)
            for (int64_t o = 0; o < O; o++) Gs[t * O + o] = G[t * O + o] * s->cf[o];   /* g⊙c */
        cpu_gemm_nn(nt, r, O, Gs, O, s->U, r, e, r, false);                           /* e = (g⊙c)·Ū */
        cpu_gemm_tn(O, r, nt, Gs, O, A + IK, K, T, r, true);                          /* T += (g⊙c)ᵀ·h */
        for (int64_t t = 0; t < nt; t++)
            for (int64_t o = 0; o < O; o++) Gs[t * O + o] = G[t * O + o] * s->a[o];    /* g⊙a */
        for (int64_t t = 0; t < nt * r; t++) e[t] *= s->sig;
        cpu_gemm_nn(nt, IK, r, e, r, s->D, IK, Q, IK, false);                         /* dX = σs·e·D … */
        for (int64_t o0 = 0; o0 < O; o0 += OB) {
            int64_t nr = min64(OB, O - o0);
            block_right(s, o0, nr, true, B);                                           /* [W | σs·Ū] */
            cpu_gemm_nt(nt, nr, K, A, K, B, K, zp, OB, false);                         /* X·Wᵀ + σs·h·Ūᵀ */
            for (int64_t j = 0; j < nr; j++) {
                float acc = 0.0f;
                for (int64_t t = 0; t < nt; t++) acc += G[t * O + o0 + j] * zp[t * OB + j];
                dc[o0 + j] += acc;
            }
            cpu_gemm_nn(nt, IK, nr, Gs + o0, O, B, K, Q, IK, true);                    /* … + (g⊙a)·W */
        }
        cpu_gemm_tn(r, IK, nt, e, r, X, IK, eX, IK, true);                             /* eX += σs·eᵀ·X */
        return;
    }
    cpu_gemm_nn(nt, r, O, G, O, s->U, r, e, r, false);                                 /* e = g·Ū */
    cpu_gemm_tn(O, r, nt, G, O, A + IK, K, T, r, true);                                /* T += gᵀ·hc */
    for (int64_t t = 0; t < nt * r; t++) e[t] *= s->sig;
    cpu_gemm_nn(nt, IK, r, e, r, s->D, IK, R, IK, false);                              /* R = σs·e·D */
    memcpy(Q, R, sizeof(float) * (size_t)(nt * IK));
    for (int64_t o0 = 0; o0 < O; o0 += OB) {
        int64_t nr = min64(OB, O - o0);
        load_w(s, o0, nr, B, IK);
        cpu_gemm_nn(nt, IK, nr, G + o0, O, B, IK, Q, IK, true);                        /* Q + R */
    }
    for (int64_t i = 0; i < IK; i++) {
        float acc = 0.0f;
        for (int64_t t = 0; t < nt; t++) acc += X[t * IK + i] * Q[t * IK + i];
        dc[i] += acc;
    }
    for (int64_t t = 0; t < nt; t++)
        for (int64_t i = 0; i < IK; i++) Q[t * IK + i] = s->acol[i] * Q[t * IK + i] + R[t * IK + i];
    cpu_gemm_tn(r, IK, nt, e, r, X, IK, eX, IK, true);                                 /* eX += σs·eᵀ·X */
}

/* The γ terms that need W once more: out axis G_D += σs·(γ⊙Ū)ᵀ·W (fixed runs of W blocks),
   in axis T += W·(D⊙γ)ᵀ (rows owned by their block); gcol: γ per row (out) or per column (in). */
static lyco_status gamma_w_pass(const dora_bp *s, const float *gcol, float *T, float *gD) {
    int64_t O = s->O, IK = s->IK, r = s->r, OB = s->OB, nb = (O + OB - 1) / OB;
    float *work = calloc((size_t)cpu_threads() * (size_t)(OB * IK) + 1, sizeof(float));
    float *Uc = calloc((size_t)(s->out_axis ? O * r : r * IK) + 1, sizeof(float));
    if (!work || !Uc) {
        free(work);
        free(Uc);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    }
    if (!s->out_axis) {
        for (int64_t p = 0; p < r; p++)
            for (int64_t i = 0; i < IK; i++) Uc[p * IK + i] = s->D[p * IK + i] * gcol[i];      /* D⊙γ */
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            float *Wb = work + (size_t)cpu_thread_id() * (size_t)(OB * IK);
            int64_t o0 = b * OB, nr = min64(OB, O - o0);
            load_w(s, o0, nr, Wb, IK);
            cpu_gemm_nt(nr, r, IK, Wb, IK, Uc, IK, T + o0 * r, r, true);
        }
        free(work);
        free(Uc);
        return LYCO_OK;
    }
    for (int64_t o = 0; o < O; o++)
        for (int64_t p = 0; p < r; p++) Uc[o * r + p] = s->sig * gcol[o] * s->U[o * r + p];    /* σs·γ⊙Ū */
    int runs = cpu_runs(nb, CPU_RUNS_BIG);
    float *part = calloc((size_t)runs * (size_t)(r * IK) + 1, sizeof(float));
    if (!part) {
        free(work);
        free(Uc);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < runs; k++) {
        float *Wb = work + (size_t)cpu_thread_id() * (size_t)(OB * IK), *pk = part + (size_t)k * (size_t)(r * IK);
        for (int64_t b = cpu_run_start(nb, runs, k); b < cpu_run_start(nb, runs, k + 1); b++) {
            int64_t o0 = b * OB, nr = min64(OB, O - o0);
            load_w(s, o0, nr, Wb, IK);
            cpu_gemm_tn(r, IK, nr, Uc + o0 * r, r, Wb, IK, pk, IK, true);
        }
    }
    for (int k = 0; k < runs; k++)
        for (int64_t n = 0; n < r * IK; n++) gD[n] += part[(size_t)k * (size_t)(r * IK) + n];
    free(part);
    free(work);
    free(Uc);
    return LYCO_OK;
}

typedef struct {
    cpu_view xv, dyv, dxv, dy0v;
    bool dx, dy0;                  /* dx wanted; dy0 = dy wanted (not DELTA_ONLY) */
} bwd_io;

/* the per-thread scratch of a backward tile: X, G, dX (Q), a transposed block, bwd_tile's own */
static int64_t bwd_per(const dora_bp *s) {
    int64_t IK = s->IK, O = s->O, r = s->r, K = IK + r;
    return TB * IK + TB * O + TB * IK + TB * (IK > O ? IK : O) + TB * K + s->OB * K + TB * O + TB * r + TB * IK + TB * s->OB;
}

/* Linear layers: fixed runs of token tiles; run k's partials at part + k·pp. */
static void bwd_linear(const dora_bp *s, const bwd_io *io, float *work, int64_t per, float *part, int64_t pp, int runs) {
    const lyco_call *c = s->c;
    lyco_dtype Tc = c->dt.compute;
    int64_t N = c->tokens, IK = s->IK, O = s->O, dcn = s->out_axis ? O : IK, ntiles = (N + TB - 1) / TB;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < runs; k++) {
        float *X = work + (size_t)cpu_thread_id() * (size_t)per, *G = X + TB * IK, *Q = G + TB * O, *wk = Q + TB * IK + TB * (IK > O ? IK : O);
        float *pk = part + (size_t)k * (size_t)pp;
        for (int64_t tile = cpu_run_start(ntiles, runs, k); tile < cpu_run_start(ntiles, runs, k + 1); tile++) {
            int64_t t0 = tile * TB, nt = min64(TB, N - t0);
            for (int64_t t = 0; t < nt; t++) {
                cpu_load(&io->xv, t0 + t, 0, IK, Tc, X + t * IK);
                cpu_load(&io->dyv, t0 + t, 0, O, Tc, G + t * O);
                if (io->dy0) cpu_store(&io->dy0v, t0 + t, 0, O, G + t * O);
            }
            bwd_tile(s, X, G, nt, wk, Q, pk, pk + dcn, pk + dcn + O * s->r);
            if (io->dx)
                for (int64_t t = 0; t < nt; t++) cpu_store(&io->dxv, t0 + t, 0, IK, Q + t * IK);
        }
    }
}

/* Conv layers: per image, fixed runs of position tiles (the same runs in every image), dX through
   col2im into the run's image, the runs' images added in run order. */
static lyco_status bwd_conv(const dora_bp *s, const bwd_io *io, float *work, int64_t per, float *part, int64_t pp, int runs) {
    const lyco_call *c = s->c;
    const conv_geo *g = &s->g;
    lyco_dtype Tc = c->dt.compute;
    int64_t IK = s->IK, O = s->O, dcn = s->out_axis ? O : IK, ntiles = (g->sout + TB - 1) / TB;
    size_t imgn = (size_t)(g->I * g->sin);
    float *img = malloc(sizeof(float) * (imgn + 1)), *dimg = io->dx ? calloc((size_t)runs * imgn + 1, sizeof(float)) : NULL;
    if (!img || (io->dx && !dimg)) {
        free(img);
        free(dimg);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
    }
    for (int64_t n = 0; n < c->tokens; n++) {
        for (int64_t ch = 0; ch < g->I; ch++) cpu_load(&io->xv, n * g->I + ch, 0, g->sin, Tc, img + ch * g->sin);
        if (dimg) memset(dimg, 0, sizeof(float) * (size_t)runs * imgn);
#pragma omp parallel for schedule(static)
        for (int k = 0; k < runs; k++) {
            float *X = work + (size_t)cpu_thread_id() * (size_t)per, *G = X + TB * IK, *Q = G + TB * O, *tr = Q + TB * IK,
                  *wk = tr + TB * (IK > O ? IK : O);
            float *pk = part + (size_t)k * (size_t)pp;
            for (int64_t tile = cpu_run_start(ntiles, runs, k); tile < cpu_run_start(ntiles, runs, k + 1); tile++) {
                int64_t p0 = tile * TB, np = min64(TB, g->sout - p0);
                for (int64_t o = 0; o < O; o++) {
                    cpu_load(&io->dyv, n * O + o, p0, np, Tc, tr + o * np);
                    if (io->dy0) cpu_store(&io->dy0v, n * O + o, p0, np, tr + o * np);
                }
                transpose(tr, O, np, G);
                im2col(g, img, p0, np, X);
                bwd_tile(s, X, G, np, wk, Q, pk, pk + dcn, pk + dcn + O * s->r);
                if (dimg) col2im_add(g, Q, p0, np, dimg + (size_t)k * imgn);
            }
        }
        if (dimg) {
            for (int k = 1; k < runs; k++)
                for (size_t i = 0; i < imgn; i++) dimg[i] += dimg[(size_t)k * imgn + i];
            for (int64_t ch = 0; ch < g->I; ch++) cpu_store(&io->dxv, n * g->I + ch, 0, g->sin, dimg + ch * g->sin);
        }
    }
    free(img);
    free(dimg);
    return LYCO_OK;
}

static lyco_status dora_bwd(dora_bp *s, float *gU, float *gD) {
    const lyco_call *c = s->c;
    const lyco_bypass_args *b = c->bypass;
    int64_t IK = s->IK, O = s->O, r = s->r, kept = s->kept, K = s->K, dcn = s->out_axis ? O : IK;
    bool delta_only = b->flags & LYCO_BYPASS_DELTA_ONLY;
    bwd_io io;
    memset(&io, 0, sizeof io);
    int split = s->conv ? 2 : -1;
    cpu_view_init(&io.xv, b->x, split < 0 ? b->x->ndim - 1 : split);
    cpu_view_init(&io.dyv, c->dy, split < 0 ? c->dy->ndim - 1 : split);
    io.dx = c->dx != NULL;
    if (io.dx) cpu_view_init(&io.dxv, c->dx, split < 0 ? c->dx->ndim - 1 : split);
    io.dy0 = c->dy0 && !delta_only;
    if (io.dy0) cpu_view_init(&io.dy0v, c->dy0, split < 0 ? c->dy0->ndim - 1 : split);
    if (c->dy0 && delta_only) cpu_zero_all(c->dy0); /* y = Δ(x) alone does not read y0 */
    int64_t units = s->conv ? (s->g.sout + TB - 1) / TB : (c->tokens + TB - 1) / TB;
    int runs = cpu_runs(units, CPU_RUNS_BIG);
    int64_t per = bwd_per(s), pp = dcn + O * r + r * IK;
    float *work = calloc((size_t)cpu_threads() * (size_t)per + 1, sizeof(float));
    float *part = calloc((size_t)runs * (size_t)pp + 1, sizeof(float));
    float *dc = calloc((size_t)kept + 1, sizeof(float)), *gam = calloc((size_t)kept + 1, sizeof(float));
    float *gcol = calloc((size_t)(s->out_axis ? O : IK) + 1, sizeof(float));
    int64_t rmax = r * (O > IK ? O : IK);
    float *aux = calloc((size_t)rmax + 1, sizeof(float)), *sq = calloc((size_t)(rmax + r * r) + 1, sizeof(float));
    lyco_status st = LYCO_OK;
    if (!work || !part || !dc || !gam || !gcol || !aux || !sq) {
        st = lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
        goto done;
    }
    if (s->conv) {
        if ((st = bwd_conv(s, &io, work, per, part, pp, runs))) goto done;
    } else {
        bwd_linear(s, &io, work, per, part, pp, runs);
    }
    /* run partials in run order: dc (per row, or per column then per channel), T into gU, eᵀX into gD */
    float *dcp = part;
    memcpy(gU, part + dcn, sizeof(float) * (size_t)(O * r));
    memcpy(gD, part + dcn + O * r, sizeof(float) * (size_t)(r * IK));
    for (int k = 1; k < runs; k++) {
        const float *pk = part + (size_t)k * (size_t)pp;
        for (int64_t n = 0; n < dcn; n++) dcp[n] += pk[n];
        for (int64_t n = 0; n < O * r; n++) gU[n] += pk[dcn + n];
        for (int64_t n = 0; n < r * IK; n++) gD[n] += pk[dcn + O * r + n];
    }
    for (int64_t n = 0; n < dcn; n++) dc[s->out_axis ? n : n / K] += dcp[n];
    if ((st = finish_dc(s, dc, gam))) goto done;
    for (int64_t n = 0; n < (s->out_axis ? O : IK); n++) gcol[n] = gam[s->out_axis ? n : n / K];
    if (s->out_axis) {
        /* T += γ⊙(W·Dᵀ + σs·Ū·D·Dᵀ) */
        cpu_gemm_nn(O, r, r, s->U, r, s->RR, r, aux, r, false);
        for (int64_t o = 0; o < O; o++)
            for (int64_t p = 0; p < r; p++) gU[o * r + p] += gcol[o] * (s->WD[o * r + p] + s->sig * aux[o * r + p]);
        /* G_D = σs·eᵀX (so far) + σs·(γ⊙Ū)ᵀ·W + σs²·((γ⊙Ū)ᵀŪ)·D */
        if ((st = gamma_w_pass(s, gcol, gU, gD))) goto done;
        float *Ug = sq, *UgU = sq + rmax;
        for (int64_t o = 0; o < O; o++)
            for (int64_t p = 0; p < r; p++) Ug[o * r + p] = s->sig * s->sig * gcol[o] * s->U[o * r + p];
        cpu_gemm_tn(r, r, O, Ug, r, s->U, r, UgU, r, false);
        cpu_gemm_nn(r, IK, r, UgU, r, s->D, IK, gD, IK, true);
    } else {
        /* T += W·(D⊙γ)ᵀ + σs·Ū·(D·(D⊙γ)ᵀ) */
        if ((st = gamma_w_pass(s, gcol, gU, gD))) goto done;
        float *Dg = sq, *DDg = sq + rmax;
        for (int64_t p = 0; p < r; p++)
            for (int64_t i = 0; i < IK; i++) Dg[p * IK + i] = s->sig * s->D[p * IK + i] * gcol[i];
        cpu_gemm_nt(r, r, IK, s->D, IK, Dg, IK, DDg, r, false);
        cpu_gemm_nn(O, r, r, s->U, r, DDg, r, gU, r, true);
        /* G_D = σs·(c⊙(eᵀX) + γ⊙(Ūᵀ·W + σs·ŪᵀŪ·D)); gD holds σs·eᵀX */
        cpu_gemm_nn(r, IK, r, s->RR, r, s->D, IK, aux, IK, false);
        for (int64_t p = 0; p < r; p++)
            for (int64_t i = 0; i < IK; i++)
                gD[p * IK + i] = s->ccol[i] * gD[p * IK + i] + s->sig * gcol[i] * (s->UW[p * IK + i] + s->sig * aux[p * IK + i]);
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
    free(dc);
    free(gam);
    free(gcol);
    free(aux);
    free(sq);
    return st;
}

lyco_status cpu_locon_dora_bypass(const lyco_call *c, const float *D, const float *U, int64_t r, float *gU, float *gD) {
    dora_bp s;
    lyco_status st = bp_init(c, D, U, r, &s);
    if (st == LYCO_OK) st = c->dir == LYCO_DIR_BYPASS_FWD ? dora_fwd(&s) : dora_bwd(&s, gU, gD);
    bp_free(&s);
    return st;
}
