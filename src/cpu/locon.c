/*
 * locon.c — fused CPU kernels of LoRA / LoCon (ALGORITHMS.md §2.1).
 *
 * Shared precomputation (fp32, compact; operands rounded to the compute dtype first):
 *   P  = D (r × I·K)   or, Tucker, P[i, c, κ] = Σ_j M[i,j,κ] · D[j,c]   (conv(conv1x1(x,D),M) = conv(x,P))
 *   Ū  = U ⊙ q_i · s (O × r)   (q_i: the rank mask, bypass only; q_o, the merge row mask, is applied
 *                               to Ū's rows)
 * merge fwd : ΔW̄ rows = Ū_rows · P, fed to the shared driver (merge.c: m, σs, DoRA, modes)
 * merge bwd : G_Ū = Γ · Pᵀ (row-local), G_P = Ūᵀ · Γ (per-thread partials over row blocks),
 *             then Tucker: G_M[i,j,κ] = Σ_c G_P[i,c,κ] D[j,c], G_D[j,c] = Σ_{i,κ} M[i,j,κ] G_P[i,c,κ]
 * bypass fwd (linear): per tile of TB tokens: h = rnd_T(x · Pᵀ) (the eager chain's rounding point,
 *             NUMERICS.md §1.6), y = y0 + h · (Ū·m·σs)ᵀ — ΔW never exists; x, y0 read once, y written once
 * bypass bwd (linear): per tile: h recomputed; gh = dy · (Ū·m·σs) computed once and used twice:
 *             dx = gh · P and G_P += ghᵀ · x; G_Ū += dyᵀ · h; G_σs = ⟨G_Ūraw, Ū·m⟩ at the end.
 * Conv bypass takes the eager twin for now (the path report says so).
 *
 * Extra memory: P and Ū (r·I·K + O·r floats); per thread one tile (TB × (I + O + 2r) floats) and
 * the gradient partials (r·I·K + O·r floats).
 */
#include <stdio.h>
#include <stdlib.h>

#include "cpu.h"

#define TB 32

typedef struct {
    const lyco_call *c;
    int64_t O, r, IK;
    float *P, *U;        /* P (r×IK), Ū (O×r, masks and s folded in) */
    float *Uraw;         /* U as rounded (O×r), for the Tucker/σs chains */
    float *D, *M;        /* Tucker: D (r×I), M (r×r×K) */
    float *gU, *gP;      /* per-thread partials: nt × (O×r), nt × (r×IK) */
    int nt;
} locon_t;

static void locon_free(locon_t *s) {
    free(s->P);
    free(s->U);
    free(s->Uraw);
    free(s->D);
    free(s->M);
    free(s->gU);
    free(s->gP);
}

static float mask_at(const lyco_call *c, int64_t i) {
    const DLTensor *q = c->a->tensor[LYCO_RANK_MASK];
    return q ? lyco_load_f32(lyco_elem_at(q, i), lyco_dtype_of(q)) : 1.0f;
}

static lyco_status locon_prepare(const lyco_call *c, locon_t *s, bool grads) {
    memset(s, 0, sizeof *s);
    const lyco_dims *d = &c->dims;
    lyco_dtype T = c->dt.compute;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    s->c = c;
    s->O = d->O;
    s->r = d->r;
    s->IK = d->I * d->K;
    s->nt = cpu_threads();
    s->P = calloc((size_t)(s->r * s->IK + 1), sizeof(float));
    s->U = calloc((size_t)(s->O * s->r + 1), sizeof(float));
    s->Uraw = calloc((size_t)(s->O * s->r + 1), sizeof(float));
    if (!s->P || !s->U || !s->Uraw) return lyco_fail(LYCO_ERR_NOMEM, "cpu locon: out of memory");
    cpu_load_all(c->a->tensor[LYCO_LORA_UP], T, s->Uraw);
    if (d->tucker) {
        s->D = calloc((size_t)(s->r * d->I + 1), sizeof(float));
        s->M = calloc((size_t)(s->r * s->r * d->K + 1), sizeof(float));
        if (!s->D || !s->M) return lyco_fail(LYCO_ERR_NOMEM, "cpu locon: out of memory");
        cpu_load_all(c->a->tensor[LYCO_LORA_DOWN], T, s->D);
        cpu_load_all(c->a->tensor[LYCO_LORA_MID], T, s->M);
        for (int64_t i = 0; i < s->r; i++)
            for (int64_t ch = 0; ch < d->I; ch++)
                for (int64_t k = 0; k < d->K; k++) {
                    float acc = 0.0f;
                    for (int64_t j = 0; j < s->r; j++) acc += s->M[(i * s->r + j) * d->K + k] * s->D[j * d->I + ch];
                    s->P[(i * d->I + ch) * d->K + k] = acc;
                }
    } else {
        cpu_load_all(c->a->tensor[LYCO_LORA_DOWN], T, s->P);
    }
    float sc = (float)c->s;
    for (int64_t o = 0; o < s->O; o++)
        for (int64_t i = 0; i < s->r; i++)
            s->U[o * s->r + i] = s->Uraw[o * s->r + i] * sc * (bypass ? mask_at(c, i) : mask_at(c, o));
    if (grads) {
        s->gU = calloc((size_t)s->nt * (size_t)(s->O * s->r) + 1, sizeof(float));
        s->gP = calloc((size_t)s->nt * (size_t)(s->r * s->IK) + 1, sizeof(float));
        if (!s->gU || !s->gP) return lyco_fail(LYCO_ERR_NOMEM, "cpu locon: out of memory for gradient partials");
    }
    return LYCO_OK;
}

/* ---- merge: the ΔW̄ row generator ---- */

static void rows(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, float *out) {
    (void)W;
    const locon_t *s = dl->state;
    cpu_gemm_nn(nr, s->IK, s->r, s->U + o0 * s->r, s->r, s->P, s->IK, out, s->IK, false);
}

static void rows_bwd(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, const float *G, int tid) {
    (void)W;
    const locon_t *s = dl->state;
    /* G_Ū rows are owned by this block; G_P accumulates in this thread's partial */
    cpu_gemm_nt(nr, s->r, s->IK, G, s->IK, s->P, s->IK, s->gU + o0 * s->r, s->r, false);
    cpu_gemm_tn(s->r, s->IK, nr, s->U + o0 * s->r, s->r, G, s->IK, s->gP + (size_t)tid * (size_t)(s->r * s->IK), s->IK, true);
}

/* Reduces the G_P partials (thread order), chains G_Ū and G_P to the slots, stores them. */
static lyco_status store_grads(const locon_t *s, const float *gU_total, bool bypass) {
    const lyco_call *c = s->c;
    const lyco_dims *d = &c->dims;
    int64_t nP = s->r * s->IK;
    float *gP = s->gP;
    for (int t = 1; t < s->nt; t++)
        for (int64_t n = 0; n < nP; n++) gP[n] += s->gP[(size_t)t * (size_t)nP + n];
    if (c->g->grad[LYCO_LORA_UP]) {
        float *gu = malloc(sizeof(float) * (size_t)(s->O * s->r + 1));
        if (!gu) return lyco_fail(LYCO_ERR_NOMEM, "cpu locon: out of memory");
        float sc = (float)c->s;
        for (int64_t o = 0; o < s->O; o++)
            for (int64_t i = 0; i < s->r; i++)
                gu[o * s->r + i] = gU_total[o * s->r + i] * sc * (bypass ? mask_at(c, i) : mask_at(c, o));
        cpu_store_all(c->g->grad[LYCO_LORA_UP], gu);
        free(gu);
    }
    if (!d->tucker) {
        if (c->g->grad[LYCO_LORA_DOWN]) cpu_store_all(c->g->grad[LYCO_LORA_DOWN], gP);
        return LYCO_OK;
    }
    float *gM = calloc((size_t)(s->r * s->r * d->K + 1), sizeof(float)), *gD = calloc((size_t)(s->r * d->I + 1), sizeof(float));
    if (!gM || !gD) {
        free(gM);
        free(gD);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu locon: out of memory");
    }
    for (int64_t i = 0; i < s->r; i++)
        for (int64_t j = 0; j < s->r; j++)
            for (int64_t k = 0; k < d->K; k++) {
                float acc = 0.0f;
                for (int64_t ch = 0; ch < d->I; ch++) acc += gP[(i * d->I + ch) * d->K + k] * s->D[j * d->I + ch];
                gM[(i * s->r + j) * d->K + k] = acc;
            }
    for (int64_t j = 0; j < s->r; j++)
        for (int64_t ch = 0; ch < d->I; ch++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < s->r; i++)
                for (int64_t k = 0; k < d->K; k++) acc += s->M[(i * s->r + j) * d->K + k] * gP[(i * d->I + ch) * d->K + k];
            gD[j * d->I + ch] = acc;
        }
    if (c->g->grad[LYCO_LORA_MID]) cpu_store_all(c->g->grad[LYCO_LORA_MID], gM);
    if (c->g->grad[LYCO_LORA_DOWN]) cpu_store_all(c->g->grad[LYCO_LORA_DOWN], gD);
    free(gM);
    free(gD);
    return LYCO_OK;
}

static lyco_status finish_bwd(const cpu_delta *dl) {
    const locon_t *s = dl->state;
    return store_grads(s, s->gU, false);
}

/* ---- bypass, linear layers ---- */

static lyco_status bypass_fwd(const lyco_call *c, locon_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *b = c->bypass;
    int64_t N = c->tokens, I = c->dims.I, O = s->O, r = s->r;
    cpu_view xv, y0v, yv;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&yv, c->y, c->y->ndim - 1);
    bool add = b->y0 && !(b->flags & LYCO_BYPASS_DELTA_ONLY);
    if (add) cpu_view_init(&y0v, b->y0, b->y0->ndim - 1);
    float f = (float)(c->m) * cpu_sigma(c);
    for (int64_t n = 0; n < O * r; n++) s->U[n] *= f;
    int64_t nblocks = (N + TB - 1) / TB;
    float *work = calloc((size_t)s->nt * (size_t)(TB * (I + O + r)) + 1, sizeof(float));
    if (!work) return lyco_fail(LYCO_ERR_NOMEM, "cpu locon bypass: out of memory");
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        float *x = work + (size_t)cpu_thread_id() * (size_t)(TB * (I + O + r)), *h = x + TB * I, *y = h + TB * r;
        int64_t t0 = blk * TB, nt = N - t0 < TB ? N - t0 : TB;
        for (int64_t t = 0; t < nt; t++) cpu_load(&xv, t0 + t, 0, I, T, x + t * I);
        cpu_gemm_nt(nt, r, I, x, I, s->P, I, h, r, false);
        cpu_round(h, nt * r, T);
        if (add)
            for (int64_t t = 0; t < nt; t++) cpu_load(&y0v, t0 + t, 0, O, T, y + t * O);
        cpu_gemm_nt(nt, O, r, h, r, s->U, r, y, O, add);
        for (int64_t t = 0; t < nt; t++) cpu_store(&yv, t0 + t, 0, O, y + t * O);
    }
    free(work);
    return LYCO_OK;
}

static lyco_status bypass_bwd(const lyco_call *c, locon_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *b = c->bypass;
    int64_t N = c->tokens, I = c->dims.I, O = s->O, r = s->r;
    cpu_view xv, dyv, dxv, dy0v;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&dyv, c->dy, c->dy->ndim - 1);
    if (c->dx) cpu_view_init(&dxv, c->dx, c->dx->ndim - 1);
    if (c->dy0) cpu_view_init(&dy0v, c->dy0, c->dy0->ndim - 1);
    float f = (float)(c->m) * cpu_sigma(c);
    bool delta_only = b->flags & LYCO_BYPASS_DELTA_ONLY;
    if (c->dy0 && delta_only) /* y = Δ(x) alone does not read y0 */
        for (int64_t i = 0; i < lyco_numel(c->dy0); i++) lyco_store_f32(lyco_elem_at(c->dy0, i), lyco_dtype_of(c->dy0), 0.0f);
    float *Uf = malloc(sizeof(float) * (size_t)(O * r + 1));
    float *work = calloc((size_t)s->nt * (size_t)(TB * (2 * I + O + 2 * r)) + 1, sizeof(float));
    if (!Uf || !work) {
        free(Uf);
        free(work);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu locon bypass: out of memory");
    }
    for (int64_t n = 0; n < O * r; n++) Uf[n] = s->U[n] * f;
    int64_t nblocks = (N + TB - 1) / TB;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int tid = cpu_thread_id();
        float *x = work + (size_t)tid * (size_t)(TB * (2 * I + O + 2 * r)), *dx = x + TB * I, *dy = dx + TB * I, *h = dy + TB * O, *gh = h + TB * r;
        int64_t t0 = blk * TB, nt = N - t0 < TB ? N - t0 : TB;
        for (int64_t t = 0; t < nt; t++) {
            cpu_load(&xv, t0 + t, 0, I, T, x + t * I);
            cpu_load(&dyv, t0 + t, 0, O, T, dy + t * O);
        }
        if (c->dy0 && !delta_only)
            for (int64_t t = 0; t < nt; t++) cpu_store(&dy0v, t0 + t, 0, O, dy + t * O);
        cpu_gemm_nt(nt, r, I, x, I, s->P, I, h, r, false);       /* h = rnd(x·Pᵀ), as forward */
        cpu_round(h, nt * r, T);
        cpu_gemm_nn(nt, r, O, dy, O, Uf, r, gh, r, false);       /* gh = dy · Ū·m·σs, once */
        if (c->dx) {
            cpu_gemm_nn(nt, I, r, gh, r, s->P, I, dx, I, false);  /* dx = gh · P */
            for (int64_t t = 0; t < nt; t++) cpu_store(&dxv, t0 + t, 0, I, dx + t * I);
        }
        cpu_gemm_tn(r, I, nt, gh, r, x, I, s->gP + (size_t)tid * (size_t)(r * I), I, true);  /* G_P += ghᵀ·x */
        cpu_gemm_tn(O, r, nt, dy, O, h, r, s->gU + (size_t)tid * (size_t)(O * r), r, true);  /* G_Ū += dyᵀ·h */
    }
    /* reduce G_Ū partials; G_σs = ⟨Σ dyᵀh, Ū·m⟩ (masks and s inside Ū) */
    float *gU = s->gU;
    for (int t = 1; t < s->nt; t++)
        for (int64_t n = 0; n < O * r; n++) gU[n] += s->gU[(size_t)t * (size_t)(O * r) + n];
    lyco_status st = LYCO_OK;
    if (c->g && c->g->grad[LYCO_SCALAR]) {
        float acc = 0.0f;
        for (int64_t n = 0; n < O * r; n++) acc += gU[n] * s->U[n] * (float)c->m;
        cpu_store_all(c->g->grad[LYCO_SCALAR], &acc);
    }
    if (c->g) {
        /* ∂L/∂(U·q·s) = gU·m·σs; store_grads applies s and q */
        for (int64_t n = 0; n < O * r; n++) gU[n] *= f;
        st = store_grads(s, gU, true);
    }
    free(Uf);
    free(work);
    return st;
}

static void zero_all(const lyco_call *c) {
    if (!c->g) return;
    for (int sl = 0; sl < LYCO_SLOT_COUNT; sl++) {
        DLTensor *g = c->g->grad[sl];
        if (!g) continue;
        for (int64_t i = 0; i < lyco_numel(g); i++) lyco_store_f32(lyco_elem_at(g, i), lyco_dtype_of(g), 0.0f);
    }
}

/* Module dropped in bypass: Δ = 0, so y = y0 (or 0), dx = 0, dy0 = dy, gradients 0. */
static void bypass_dropped(const lyco_call *c) {
    const lyco_bypass_args *b = c->bypass;
    if (c->dir == LYCO_DIR_BYPASS_FWD) {
        bool add = b->y0 && !(b->flags & LYCO_BYPASS_DELTA_ONLY);
        int64_t n = lyco_numel(c->y);
        for (int64_t i = 0; i < n; i++)
            lyco_store_f32(lyco_elem_at(c->y, i), lyco_dtype_of(c->y),
                           add ? lyco_round_f32(lyco_load_f32(lyco_elem_at(b->y0, i), lyco_dtype_of(b->y0)), c->dt.compute) : 0.0f);
        return;
    }
    if (c->dx)
        for (int64_t i = 0; i < lyco_numel(c->dx); i++) lyco_store_f32(lyco_elem_at(c->dx, i), lyco_dtype_of(c->dx), 0.0f);
    bool delta_only = b->flags & LYCO_BYPASS_DELTA_ONLY;
    if (c->dy0)
        for (int64_t i = 0; i < lyco_numel(c->dy0); i++)
            lyco_store_f32(lyco_elem_at(c->dy0, i), lyco_dtype_of(c->dy0),
                           delta_only ? 0.0f : lyco_round_f32(lyco_load_f32(lyco_elem_at(c->dy, i), lyco_dtype_of(c->dy)), c->dt.compute));
    zero_all(c);
}

lyco_status cpu_locon(const lyco_call *c, char *why, size_t why_len) {
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    if (bypass && c->a->layer.kind == LYCO_LAYER_CONV) {
        snprintf(why, why_len, "cpu: locon conv bypass has no fused CPU kernel yet");
        return LYCO_ERR_UNSUPPORTED;
    }
    if (bypass && c->dims.dora) {
        snprintf(why, why_len, "cpu: DoRA bypass has no fused CPU kernel yet");
        return LYCO_ERR_UNSUPPORTED;
    }
    if (bypass && c->dropped) {
        bypass_dropped(c);
        return LYCO_OK;
    }
    bool grads = c->dir == LYCO_DIR_MERGE_BWD || c->dir == LYCO_DIR_BYPASS_BWD;
    locon_t s;
    lyco_status st = locon_prepare(c, &s, grads);
    if (st == LYCO_OK) {
        cpu_delta dl = {.rows = rows, .rows_bwd = rows_bwd, .finish_bwd = finish_bwd, .c = c, .state = &s, .uses_sigma = true};
        switch (c->dir) {
        case LYCO_DIR_MERGE_FWD: st = cpu_merge_fwd(c, &dl); break;
        case LYCO_DIR_MERGE_BWD: st = cpu_merge_bwd(c, &dl); break;
        case LYCO_DIR_BYPASS_FWD: st = bypass_fwd(c, &s); break;
        default: st = bypass_bwd(c, &s); break;
        }
    }
    locon_free(&s);
    return st;
}
