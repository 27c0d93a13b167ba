/*
 * boft.c — eager twin of BOFT (ALGORITHMS.md §2.5, §7), following lycoris-lora 4.1.3's torch
 * bodies (functional diff_weight / bypass_forward_diff, merge and bypass alike): R is built in
 * fp32 (cayley_f32.h: Q0 and the constraint in T, the blocks' dtype; identity, inverse and
 * product in fp32), X (W̄ for merge, y0 as channel rows for bypass) is cast to fp32, every op
 * below is fp32 (rounded to fp32), and the result is rounded once to T:
 *
 *   X_0 = X;  per stage i = 0 … M−1:
 *     N_i = R_i                              (m = 1)
 *     N_i = R_i·m + (1 − m)·I                (m ≠ 1: the multiplier folded into every stage)
 *     X_{i+1} = P_iᵀ · blockdiag(N_{i,k}) · P_i · X_i     (blocks untransposed; fp32 accumulation)
 *   Y' = X_M ⊙ ρ  (when rescaled);  Δ = Y' − X;  Y = rnd_T(Δ + X)
 *
 * (4.1.3 returns Δ from the functional body; merge adds W back in fp32 before the cast to the
 * adapter dtype, bypass adds y0 and returns fp32 — both are rnd_T((Y' − X) + X) here.)
 *
 * Backward is autograd's chain of the same ops in fp32: G_ρ = rnd_T(Σ GY ⊙ X_M) per row,
 * G = GY ⊙ ρ, then per stage in reverse (Ŵ = P_i X_i, Ĝ = P_i G): G_N = Ĝ_k Ŵ_kᵀ,
 * G_R = G_N (·m when m ≠ 1), G ← P_iᵀ blockdiag(N_kᵀ) Ĝ; the Cayley adjoint over all stages;
 * GX = rnd_T(GY + rnd_T(G − GY)) (the input's fp32 gradient from the chain and from "− X",
 * cast to T, plus GY reaching y0 through `y0 + Δ`).
 */
#include <string.h>

#include "cayley_f32.h"

/* π_i(t): inside each chunk of 2h rows (h = 2^i·b/2) the two halves are interleaved */
static int64_t perm(int64_t stage, int64_t b, int64_t t) {
    int64_t h = ((int64_t)1 << stage) * (b / 2);
    int64_t c = t / (2 * h), r = t % (2 * h), gamma = r / h, eta = r % h;
    return c * 2 * h + 2 * eta + gamma;
}

/* Dst = P_i Src (Dst[π(t)] = Src[t]) */
static void permute_rows(const eg_adapter *ea, int64_t stage, const float *Src, int64_t n, float *Dst) {
    for (int64_t t = 0; t < ea->O; t++)
        memcpy(Dst + perm(stage, ea->c->dims.bs, t) * n, Src + t * n, sizeof(float) * (size_t)n);
}

/* Dst = P_iᵀ Src (Dst[t] = Src[π(t)]) */
static void unpermute_rows(const eg_adapter *ea, int64_t stage, const float *Src, int64_t n, float *Dst) {
    for (int64_t t = 0; t < ea->O; t++)
        memcpy(Dst + t * n, Src + perm(stage, ea->c->dims.bs, t) * n, sizeof(float) * (size_t)n);
}

/* Z = blockdiag(N_k)·V, or blockdiag(N_kᵀ)·V; fp32 accumulation */
static void apply_blocks(const eg_adapter *ea, const float *Ni, bool transposed, const float *V, int64_t n, float *Z) {
    int64_t nb = ea->c->dims.nb, b = ea->c->dims.bs, nn = b * b;
    for (int64_t k = 0; k < nb; k++)
        for (int64_t mu = 0; mu < b; mu++)
            for (int64_t j = 0; j < n; j++) {
                float s = 0.0f;
                for (int64_t nu = 0; nu < b; nu++) {
                    float e = transposed ? Ni[k * nn + nu * b + mu] : Ni[k * nn + mu * b + nu];
                    s += e * V[(k * b + nu) * n + j];
                }
                Z[(k * b + mu) * n + j] = s;
            }
}

static float rho(const eg_adapter *ea, int64_t o) { return ea->t[LYCO_RESCALE] ? ea->t[LYCO_RESCALE][o] : 1.0f; }

/* the Cayley state and the per-stage operators N (stages·nb·b·b, fp32) */
static bool build(const eg_adapter *ea, eg_cayley *cy, float **Nout) {
    const lyco_dims *d = &ea->c->dims;
    int64_t nblk = d->stages * d->nb, b = d->bs, nn = b * b;
    double m = ea->c->m;
    float mf = (float)m, one_m = (float)(1.0 - m);
    if (!eg_cayley_fwd(ea, cy, ea->t[LYCO_OFT_BLOCKS], nblk, b, ea->c->a->constraint)) return false;
    if (m == 1.0) {
        *Nout = cy->R;
        return true;
    }
    float *N = eg_alloc(ea, nblk * nn);
    if (!N) return false;
    for (int64_t k = 0; k < nblk; k++)
        for (int64_t a = 0; a < b; a++)
            for (int64_t c = 0; c < b; c++) {
                int64_t i = k * nn + a * b + c;
                N[i] = cy->R[i] * mf + one_m * (a == c ? 1.0f : 0.0f);
            }
    *Nout = N;
    return true;
}

/* Xs[i] = input of stage i (Xs[0] = X), Xs[M] = the butterfly's output; Xs is (M+1)·O·n */
static bool forward_stages(const eg_adapter *ea, const float *N, const float *X, int64_t n, float *Xs) {
    const lyco_dims *d = &ea->c->dims;
    int64_t On = ea->O * n, blk = d->nb * d->bs * d->bs;
    float *Wh = eg_alloc(ea, On), *Z = eg_alloc(ea, On);
    if (!Wh || !Z) return false;
    memcpy(Xs, X, sizeof(float) * (size_t)On);
    for (int64_t i = 0; i < d->stages; i++) {
        permute_rows(ea, i, Xs + i * On, n, Wh);
        apply_blocks(ea, N + i * blk, false, Wh, n, Z);
        unpermute_rows(ea, i, Z, n, Xs + (i + 1) * On);
    }
    return true;
}

static void rows(const eg_adapter *ea, const float *X, int64_t n, float *Y) {
    const lyco_dims *d = &ea->c->dims;
    int64_t On = ea->O * n;
    bool rs = ea->t[LYCO_RESCALE] != NULL;
    eg_cayley cy;
    float *N;
    if (!build(ea, &cy, &N)) return;
    float *Xs = eg_alloc(ea, (d->stages + 1) * On);
    if (!Xs || !forward_stages(ea, N, X, n, Xs)) return;
    const float *XM = Xs + d->stages * On;
    for (int64_t o = 0; o < ea->O; o++) {
        float r = rho(ea, o);
        for (int64_t j = 0; j < n; j++) {
            int64_t i = o * n + j;
            float y = rs ? XM[i] * r : XM[i];
            float delta = y - X[i];
            Y[i] = eg_rnd(delta + X[i], ea->T);
        }
    }
}

static void rows_bwd(eg_adapter *ea, const float *X, const float *GY, int64_t n, float *GX) {
    const lyco_dims *d = &ea->c->dims;
    lyco_dtype T = ea->T;
    int64_t O = ea->O, On = O * n, nb = d->nb, b = d->bs, nn = b * b, blk = nb * nn;
    float mf = (float)ea->c->m;
    bool rs = ea->t[LYCO_RESCALE] != NULL;
    eg_cayley cy;
    float *N;
    if (!build(ea, &cy, &N)) return;
    float *Xs = eg_alloc(ea, (d->stages + 1) * On), *G = eg_alloc(ea, On), *Gh = eg_alloc(ea, On),
          *Wh = eg_alloc(ea, On), *Z = eg_alloc(ea, On), *GR = eg_alloc(ea, d->stages * blk);
    if (!Xs || !G || !Gh || !Wh || !Z || !GR) return;
    if (!forward_stages(ea, N, X, n, Xs)) return;

    /* Y' = X_M ⊙ ρ */
    const float *XM = Xs + d->stages * On;
    for (int64_t o = 0; o < O; o++) {
        float r = rho(ea, o), s = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            G[o * n + j] = rs ? GY[o * n + j] * r : GY[o * n + j];
            s += GY[o * n + j] * XM[o * n + j];
        }
        if (ea->g[LYCO_RESCALE]) ea->g[LYCO_RESCALE][o] = eg_rnd(s, T);
    }

    /* stages in reverse: G holds ∂L/∂X_{i+1} on entry, ∂L/∂X_i on exit */
    for (int64_t i = d->stages - 1; i >= 0; i--) {
        permute_rows(ea, i, Xs + i * On, n, Wh);   /* Ŵ = P_i X_i */
        permute_rows(ea, i, G, n, Gh);             /* Ĝ = P_i G_{i+1} */
        if (ea->g[LYCO_OFT_BLOCKS])
            for (int64_t k = 0; k < nb; k++)
                for (int64_t mu = 0; mu < b; mu++)
                    for (int64_t nu = 0; nu < b; nu++) {
                        float s = 0.0f;   /* G_N_{i,k}[μ, ν] */
                        for (int64_t j = 0; j < n; j++) s += Gh[(k * b + mu) * n + j] * Wh[(k * b + nu) * n + j];
                        GR[i * blk + k * nn + mu * b + nu] = ea->c->m == 1.0 ? s : s * mf;
                    }
        apply_blocks(ea, N + i * blk, true, Gh, n, Z);   /* blockdiag(Nᵀ) Ĝ */
        unpermute_rows(ea, i, Z, n, G);                  /* P_iᵀ (…) */
    }
    if (ea->g[LYCO_OFT_BLOCKS] && !eg_cayley_bwd(ea, &cy, GR, ea->g[LYCO_OFT_BLOCKS])) return;
    if (GX)
        for (int64_t i = 0; i < On; i++) {
            float gx32 = G[i] - GY[i];   /* the chain's gradient and the "− X" term, in fp32 */
            GX[i] = eg_rnd(GY[i] + eg_rnd(gx32, T), T);
        }
}

const eg_algo eg_boft = {.rows = rows, .rows_bwd = rows_bwd};
