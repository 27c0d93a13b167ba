/*
 * locon.c — fused CPU kernels of LoRA / LoCon (ALGORITHMS.md §2.1).
 *
 * Shared precomputation (fp32, compact; operands rounded to the compute dtype first):
 *   P  = D (r × I·K)   or, Tucker, P[i, c, κ] = Σ_j M[i,j,κ] · D[j,c]   (conv(conv1x1(x,D),M) = conv(x,P))
 *   Ū  = U ⊙ q_i · s (O × r)   (q_i: the rank mask, bypass only; q_o, the merge row mask, is applied
 *                               to Ū's rows)
 * merge fwd : ΔW̄ rows = Ū_rows · P, fed to the shared driver (merge.c: m, σs, DoRA, modes)
 * merge bwd : G_Ū = Γ · Pᵀ (row-local), G_P = Ūᵀ · Γ over blocks of MERGE_BWD_ROWS rows (K = 32
 *             per pass over the G_P partial, not 4), partials per fixed run of blocks (GROUPS, the
 *             driver's `groups`), then Tucker: G_M[i,j,κ] = Σ_c G_P[i,c,κ] D[j,c], G_D[j,c] = Σ_{i,κ} M[i,j,κ] G_P[i,c,κ]
 * Every gradient partial (merge and bypass) belongs to a fixed run of row blocks or token tiles
 * (at most GROUPS runs, set by the shape), summed in order by one thread and combined in run
 * order: the gradients do not depend on the thread count (tested at 1, 2, 3 threads).
 * bypass fwd (linear): per tile of TB tokens: h = rnd_T(x · Pᵀ) (the eager chain's rounding point,
 *             NUMERICS.md §1.6), y = y0 + h · (Ū·m·σs)ᵀ — ΔW never exists; x, y0 read once, y written once;
 *             the second product is nn against Ū'ᵀ = (Ū·m·σs)ᵀ (r × O, made once per call), so it runs
 *             on 6×16 register tiles, one FMA chain over r then + y0 (dense.c's nn order)
 * bypass bwd (linear): per tile: h recomputed; gh = rnd_T(dy · (Ū·m·σs)) (stored in T as the eager
 *             chain stores it, §1.6) computed once and used twice:
 *             dx = gh · P and G_P += ghᵀ · x; G_Ū += dyᵀ · h; G_σs = ⟨G_Ūraw, Ū·m⟩ at the end.
 * DyLoRA (ALGORITHMS.md §2.8) is the same computation over the active ranks only (r = t·bs
 * of the stored r_total, s = α/t resolved by the api layer); its gradients go to block t* alone
 * (the frozen blocks' gradients are written as zeros).
 * bypass (conv, plain and Tucker — Tucker's 1×1 down then k×k mid is one k×k conv with P):
 *             per image and tile of TP output positions: the im2col rows Xt (TP × I·K) from a
 *             cached fp32 copy of the image, hᵀ = rnd_T(P · Xtᵀ) (r × TP), yᵀ = y0ᵀ + Ū'·hᵀ;
 *             backward: ghᵀ = rnd_T(Ū'ᵀ·dyᵀ) once, G_P += ghᵀ·Xt, G_Ū += dyᵀ·h, dXt = gh·P scattered
 *             back (col2im) into a per-thread fp32 image, reduced in thread order.
 * DoRA in bypass (linear and conv, Tucker included through P): locon_dora.c, from P and Ū
 * (y = y0 + a⊙(x·Wᵀ) + c⊙(σs·h·Ūᵀ), the norms from W·Pᵀ and P·Pᵀ).
 *
 * Extra memory: P and Ū (r·I·K + O·r floats); per thread one tile (TB × (I + O + 2r) floats);
 * per run (≤ GROUPS, fewer when PART_FLOATS would be exceeded) the gradient partials (r·I·K + O·r
 * floats; conv with dx: + one fp32 input image); bypass fwd: Ū'ᵀ (O·r floats).
 */
#include <stdio.h>
#include <stdlib.h>

#include "cpu.h"
#include "im2col.h"

#define TB 32
#define TP 64
/* Gradient partials: at most GROUPS fixed runs of row blocks (merge) or token tiles (bypass), each
   run summed in order by one thread, the runs combined in run order — set by the shape alone, so
   the gradients do not depend on the thread count. PART_FLOATS bounds the partials' memory. */
#define GROUPS CPU_RUNS_BIG
#define PART_FLOATS ((int64_t)1 << 24)
/* merge backward: rows per block (G_P += Ūᵀ·Γ then takes K = this many rows per pass over G_P) */
#define MERGE_BWD_ROWS 32

typedef struct {
    const lyco_call *c;
    int64_t O, r, IK;
    int64_t r_total;     /* ranks stored in the tensors (DyLoRA: more than the active r) */
    int64_t g_first;     /* first rank that receives gradients (DyLoRA: block t*; else 0) */
    float *P, *U;        /* P (r×IK), Ū (O×r, masks and s folded in) */
    float *Uraw;         /* U as rounded (O×r), for the Tucker/σs chains */
    float *D, *M;        /* Tucker: D (r×I), M (r×r×K) */
    float *gU, *gP;      /* partials: nparts × (O×r) (bypass; merge: one O×r), nparts × (r×IK) */
    int nt;              /* threads (per-thread scratch) */
    int nparts;          /* gradient partials: fixed runs of blocks (GROUPS, parts_of) */
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

/* number of fixed runs for `units` blocks/tiles whose partials take `per` floats each (≥ 1) */
static int parts_of(int64_t units, int64_t per) {
    int64_t cap = PART_FLOATS / (per > 0 ? per : 1);
    return cpu_runs(units, cap < GROUPS ? cap : GROUPS);
}

/* merge backward: rows per block — MERGE_BWD_ROWS, fewer for long rows (the driver's scratch is
   3 blocks per thread) */
static int64_t merge_bwd_rows(int64_t IK) {
    int64_t rb = 65536 / (IK > 0 ? IK : 1);
    return rb > MERGE_BWD_ROWS ? MERGE_BWD_ROWS : rb < 4 ? 4 : rb;
}

/* the token tiles of a bypass backward (conv: per image) and the per-run floats of its partials */
static void bypass_units(const lyco_call *c, const locon_t *s, int64_t *units, int64_t *per) {
    if (c->a->layer.kind == LYCO_LAYER_CONV) {
        *units = (c->sp_out_n + TP - 1) / TP;
        *per = s->r * s->IK + s->O * s->r + (c->dx ? c->dims.I * c->sp_in_n : 0);
    } else {
        *units = (c->tokens + TB - 1) / TB;
        *per = s->r * s->IK + s->O * s->r;
    }
}

static lyco_status locon_prepare(const lyco_call *c, locon_t *s, bool grads) {
    memset(s, 0, sizeof *s);
    const lyco_dims *d = &c->dims;
    lyco_dtype T = c->dt.compute;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    s->c = c;
    s->O = d->O;
    s->r = d->r;
    s->r_total = d->r;
    if (c->a->algo == LYCO_ALGO_DYLORA) {
        s->r = d->dyl_bs * d->dyl_blocks;
        s->g_first = s->r - d->dyl_bs;
    }
    s->IK = d->I * d->K;
    s->nt = cpu_threads();
    s->P = calloc((size_t)(s->r * s->IK + 1), sizeof(float));
    s->U = calloc((size_t)(s->O * s->r + 1), sizeof(float));
    s->Uraw = calloc((size_t)(s->O * s->r + 1), sizeof(float));
    if (!s->P || !s->U || !s->Uraw) return lyco_fail(LYCO_ERR_NOMEM, "cpu locon: out of memory");
    if (s->r == s->r_total) {
        cpu_load_all(c->a->tensor[LYCO_LORA_UP], T, s->Uraw);
    } else { /* the active columns of U and rows of D only */
        cpu_view uv;
        cpu_view_init(&uv, c->a->tensor[LYCO_LORA_UP], 1);
        for (int64_t o = 0; o < s->O; o++) cpu_load(&uv, o, 0, s->r, T, s->Uraw + o * s->r);
    }
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
        cpu_view dv;
        cpu_view_init(&dv, c->a->tensor[LYCO_LORA_DOWN], 1);
        for (int64_t i = 0; i < s->r; i++) cpu_load(&dv, i, 0, s->IK, T, s->P + i * s->IK);
    }
    float sc = (float)c->s;
    for (int64_t o = 0; o < s->O; o++)
        for (int64_t i = 0; i < s->r; i++)
            s->U[o * s->r + i] = s->Uraw[o * s->r + i] * sc * (bypass ? mask_at(c, i) : mask_at(c, o));
    if (grads) {
        bool merge = c->dir == LYCO_DIR_MERGE_BWD;
        int64_t units, per;
        if (merge) {
            int64_t rb = merge_bwd_rows(s->IK);
            units = (s->O + rb - 1) / rb;
            per = s->r * s->IK;
        } else {
            bypass_units(c, s, &units, &per);
        }
        s->nparts = parts_of(units, per);
        s->gU = calloc((size_t)(merge ? 1 : s->nparts) * (size_t)(s->O * s->r) + 1, sizeof(float));
        /* merge: each run zeroes its own partial at its first block (rows_bwd), in the parallel pass */
        size_t nP = (size_t)s->nparts * (size_t)(s->r * s->IK) + 1;
        s->gP = merge ? malloc(sizeof(float) * nP) : calloc(nP, sizeof(float));
        if (!s->gU || !s->gP) return lyco_fail(LYCO_ERR_NOMEM, "cpu locon: out of memory for gradient partials");
    }
    return LYCO_OK;
}

/* ---- merge: the ΔW̄ row generator ---- */

/* in 4-row products: dense.c's few-row path reads P in place (from 16 rows on it would pack P per
   call); every element is the same chain whatever the split */
static void rows(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, float *out) {
    (void)W;
    const locon_t *s = dl->state;
    for (int64_t i = 0; i < nr; i += 4)
        cpu_gemm_nn(nr - i < 4 ? nr - i : 4, s->IK, s->r, s->U + (o0 + i) * s->r, s->r, s->P, s->IK, out + i * s->IK, s->IK, false);
}

static void rows_bwd(const cpu_delta *dl, int64_t o0, int64_t nr, const float *W, const float *G, int part) {
    (void)W;
    const locon_t *s = dl->state;
    /* G_Ū rows are owned by this block; G_P accumulates in its run's partial (the driver's groups),
       zeroed here at the run's first block */
    int64_t rb = merge_bwd_rows(s->IK);
    float *gP = s->gP + (size_t)part * (size_t)(s->r * s->IK);
    if (o0 / rb == cpu_run_start((s->O + rb - 1) / rb, s->nparts, part)) memset(gP, 0, sizeof(float) * (size_t)(s->r * s->IK));
    cpu_gemm_nt(nr, s->r, s->IK, G, s->IK, s->P, s->IK, s->gU + o0 * s->r, s->r, false);
    cpu_gemm_tn(s->r, s->IK, nr, s->U + o0 * s->r, s->r, G, s->IK, gP, s->IK, true);
}

/* Reduces the G_P partials (thread order), chains G_Ū and G_P to the slots, stores them. */
static lyco_status store_grads(const locon_t *s, const float *gU_total, bool bypass) {
    const lyco_call *c = s->c;
    const lyco_dims *d = &c->dims;
    int64_t nP = s->r * s->IK;
    float *gP = s->gP;
    for (int t = 1; t < s->nparts; t++)
        for (int64_t n = 0; n < nP; n++) gP[n] += s->gP[(size_t)t * (size_t)nP + n];
    int64_t rt = s->r_total;
    if (c->g->grad[LYCO_LORA_UP]) {
        float *gu = calloc((size_t)(s->O * rt + 1), sizeof(float));
        if (!gu) return lyco_fail(LYCO_ERR_NOMEM, "cpu locon: out of memory");
        float sc = (float)c->s;
        for (int64_t o = 0; o < s->O; o++)
            for (int64_t i = s->g_first; i < s->r; i++)
                gu[o * rt + i] = gU_total[o * s->r + i] * sc * (bypass ? mask_at(c, i) : mask_at(c, o));
        cpu_store_all(c->g->grad[LYCO_LORA_UP], gu);
        free(gu);
    }
    if (!d->tucker) {
        if (c->g->grad[LYCO_LORA_DOWN]) {
            if (rt != s->r || s->g_first) { /* DyLoRA: rows of block t* only */
                float *gd = calloc((size_t)(rt * s->IK + 1), sizeof(float));
                if (!gd) return lyco_fail(LYCO_ERR_NOMEM, "cpu locon: out of memory");
                memcpy(gd + s->g_first * s->IK, gP + s->g_first * s->IK, sizeof(float) * (size_t)((s->r - s->g_first) * s->IK));
                cpu_store_all(c->g->grad[LYCO_LORA_DOWN], gd);
                free(gd);
            } else {
                cpu_store_all(c->g->grad[LYCO_LORA_DOWN], gP);
            }
        }
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
    /* Ū'ᵀ (r × O): y = h·Ū'ᵀ is then an nn product (one FMA chain over the r ranks per element,
       6×16 register tiles); as nt with K = r it was dot products of 4 vectors, each closed by a
       horizontal sum */
    float *Ut = malloc(sizeof(float) * (size_t)(O * r + 1));
    int64_t nblocks = (N + TB - 1) / TB;
    float *work = calloc((size_t)s->nt * (size_t)(TB * (I + O + r)) + 1, sizeof(float));
    if (!work || !Ut) {
        free(work);
        free(Ut);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu locon bypass: out of memory");
    }
    for (int64_t o = 0; o < O; o++)
        for (int64_t k = 0; k < r; k++) Ut[k * O + o] = s->U[o * r + k] * f;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        float *x = work + (size_t)cpu_thread_id() * (size_t)(TB * (I + O + r)), *h = x + TB * I, *y = h + TB * r;
        int64_t t0 = blk * TB, nt = N - t0 < TB ? N - t0 : TB;
        for (int64_t t = 0; t < nt; t++) cpu_load(&xv, t0 + t, 0, I, T, x + t * I);
        cpu_gemm_nt(nt, r, I, x, I, s->P, I, h, r, false);
        cpu_round(h, nt * r, T);
        if (add)
            for (int64_t t = 0; t < nt; t++) cpu_load(&y0v, t0 + t, 0, O, T, y + t * O);
        cpu_gemm_nn(nt, O, r, h, r, Ut, O, y, O, add);
        for (int64_t t = 0; t < nt; t++) cpu_store(&yv, t0 + t, 0, O, y + t * O);
    }
    free(work);
    free(Ut);
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
    int np = s->nparts;
#pragma omp parallel for schedule(static)
    for (int part = 0; part < np; part++) {
      float *x = work + (size_t)cpu_thread_id() * (size_t)(TB * (2 * I + O + 2 * r)), *dx = x + TB * I, *dy = dx + TB * I,
            *h = dy + TB * O, *gh = h + TB * r;
      float *gP = s->gP + (size_t)part * (size_t)(r * I), *gUp = s->gU + (size_t)part * (size_t)(O * r);
      for (int64_t blk = nblocks * part / np; blk < nblocks * (part + 1) / np; blk++) {
        int64_t t0 = blk * TB, nt = N - t0 < TB ? N - t0 : TB;
        for (int64_t t = 0; t < nt; t++) {
            cpu_load(&xv, t0 + t, 0, I, T, x + t * I);
            cpu_load(&dyv, t0 + t, 0, O, T, dy + t * O);
        }
        if (c->dy0 && !delta_only)
            for (int64_t t = 0; t < nt; t++) cpu_store(&dy0v, t0 + t, 0, O, dy + t * O);
        cpu_gemm_nt(nt, r, I, x, I, s->P, I, h, r, false);       /* h = rnd(x·Pᵀ), as forward */
        cpu_round(h, nt * r, T);
        cpu_gemm_nn(nt, r, O, dy, O, Uf, r, gh, r, false);       /* gh = rnd(dy · Ū·m·σs), once */
        cpu_round(gh, nt * r, T);                                /* stored in T, as eager (§1.6) */
        if (c->dx) {
            cpu_gemm_nn(nt, I, r, gh, r, s->P, I, dx, I, false);  /* dx = gh · P */
            for (int64_t t = 0; t < nt; t++) cpu_store(&dxv, t0 + t, 0, I, dx + t * I);
        }
        cpu_gemm_tn(r, I, nt, gh, r, x, I, gP, I, true);    /* G_P += ghᵀ·x */
        cpu_gemm_tn(O, r, nt, dy, O, h, r, gUp, r, true);   /* G_Ū += dyᵀ·h */
      }
    }
    /* reduce G_Ū partials (run order); G_σs = ⟨Σ dyᵀh, Ū·m⟩ (masks and s inside Ū) */
    float *gU = s->gU;
    for (int t = 1; t < s->nparts; t++)
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

/* ---- bypass, conv layers (im2col per tile of output positions) ---- */

static lyco_status conv_bypass_fwd(const lyco_call *c, locon_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *b = c->bypass;
    conv_geo g;
    conv_geo_init(c, s->r, &g);
    int64_t IK = g.I * g.K, O = g.O, r = g.r, ntiles = (g.sout + TP - 1) / TP;
    cpu_view xv, y0v, yv;
    cpu_view_init(&xv, b->x, 2);
    cpu_view_init(&yv, c->y, 2);
    bool add = b->y0 && !(b->flags & LYCO_BYPASS_DELTA_ONLY);
    if (add) cpu_view_init(&y0v, b->y0, 2);
    float f = (float)(c->m) * cpu_sigma(c);
    for (int64_t n = 0; n < O * r; n++) s->U[n] *= f;
    size_t per = (size_t)(TP * IK + r * TP + O * TP);
    float *img = malloc(sizeof(float) * (size_t)(g.I * g.sin + 1)), *work = malloc(sizeof(float) * ((size_t)s->nt * per + 1));
    if (!img || !work) {
        free(img);
        free(work);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu locon conv bypass: out of memory");
    }
    for (int64_t n = 0; n < c->tokens; n++) {
        for (int64_t ch = 0; ch < g.I; ch++) cpu_load(&xv, n * g.I + ch, 0, g.sin, T, img + ch * g.sin);
#pragma omp parallel for schedule(static)
        for (int64_t tile = 0; tile < ntiles; tile++) {
            float *Xt = work + (size_t)cpu_thread_id() * per, *hT = Xt + TP * IK, *yT = hT + r * TP;
            int64_t p0 = tile * TP, np = g.sout - p0 < TP ? g.sout - p0 : TP;
            im2col(&g, img, p0, np, Xt);
            cpu_gemm_nt(r, np, IK, s->P, IK, Xt, IK, hT, np, false);   /* hᵀ = P · Xtᵀ */
            cpu_round(hT, r * np, T);
            if (add)
                for (int64_t o = 0; o < O; o++) cpu_load(&y0v, n * O + o, p0, np, T, yT + o * np);
            cpu_gemm_nn(O, np, r, s->U, r, hT, np, yT, np, add);        /* yᵀ (+)= Ū'·hᵀ */
            for (int64_t o = 0; o < O; o++) cpu_store(&yv, n * O + o, p0, np, yT + o * np);
        }
    }
    free(img);
    free(work);
    return LYCO_OK;
}

static lyco_status conv_bypass_bwd(const lyco_call *c, locon_t *s) {
    lyco_dtype T = c->dt.compute;
    const lyco_bypass_args *b = c->bypass;
    conv_geo g;
    conv_geo_init(c, s->r, &g);
    int64_t IK = g.I * g.K, O = g.O, r = g.r, ntiles = (g.sout + TP - 1) / TP;
    cpu_view xv, dyv, dxv, dy0v;
    cpu_view_init(&xv, b->x, 2);
    cpu_view_init(&dyv, c->dy, 2);
    if (c->dx) cpu_view_init(&dxv, c->dx, 2);
    bool delta_only = b->flags & LYCO_BYPASS_DELTA_ONLY;
    if (c->dy0) cpu_view_init(&dy0v, c->dy0, 2);
    float f = (float)(c->m) * cpu_sigma(c);
    size_t per = (size_t)(2 * TP * IK + 2 * r * TP + O * TP);
    size_t imgn = (size_t)(g.I * g.sin);
    float *Uf = malloc(sizeof(float) * (size_t)(O * r + 1)), *img = malloc(sizeof(float) * (imgn + 1));
    int np = s->nparts;
    float *work = malloc(sizeof(float) * ((size_t)s->nt * per + 1)), *dimg = calloc((size_t)np * imgn + 1, sizeof(float));
    if (!Uf || !img || !work || !dimg) {
        free(Uf);
        free(img);
        free(work);
        free(dimg);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu locon conv bypass: out of memory");
    }
    for (int64_t n = 0; n < O * r; n++) Uf[n] = s->U[n] * f;
    for (int64_t n = 0; n < c->tokens; n++) {
        for (int64_t ch = 0; ch < g.I; ch++) cpu_load(&xv, n * g.I + ch, 0, g.sin, T, img + ch * g.sin);
        if (c->dx) memset(dimg, 0, sizeof(float) * (size_t)np * imgn);
#pragma omp parallel for schedule(static)
        for (int part = 0; part < np; part++) {
          float *Xt = work + (size_t)cpu_thread_id() * per, *dXt = Xt + TP * IK, *hT = dXt + TP * IK, *ghT = hT + r * TP,
                *dyT = ghT + r * TP;
          for (int64_t tile = ntiles * part / np; tile < ntiles * (part + 1) / np; tile++) {
            int64_t p0 = tile * TP, npos = g.sout - p0 < TP ? g.sout - p0 : TP;
            for (int64_t o = 0; o < O; o++) {
                cpu_load(&dyv, n * O + o, p0, npos, T, dyT + o * npos);
                if (c->dy0 && !delta_only) cpu_store(&dy0v, n * O + o, p0, npos, dyT + o * npos);
            }
            im2col(&g, img, p0, npos, Xt);
            cpu_gemm_nt(r, npos, IK, s->P, IK, Xt, IK, hT, npos, false);          /* hᵀ, as forward */
            cpu_round(hT, r * npos, T);
            cpu_gemm_tn(r, npos, O, Uf, r, dyT, npos, ghT, npos, false);          /* ghᵀ = Ū'ᵀ·dyᵀ, once */
            cpu_round(ghT, r * npos, T);                                          /* stored in T, as eager (§1.6) */
            cpu_gemm_nn(r, IK, npos, ghT, npos, Xt, IK, s->gP + (size_t)part * (size_t)(r * IK), IK, true); /* G_P += ghᵀ·Xt */
            cpu_gemm_nt(O, r, npos, dyT, npos, hT, npos, s->gU + (size_t)part * (size_t)(O * r), r, true);  /* G_Ū += dyᵀ·h */
            if (c->dx) {
                cpu_gemm_tn(npos, IK, r, ghT, npos, s->P, IK, dXt, IK, false);     /* dXt = gh·P */
                col2im_add(&g, dXt, p0, npos, dimg + (size_t)part * imgn);
            }
          }
        }
        if (c->dx) {
            for (int t = 1; t < np; t++)
                for (size_t i = 0; i < imgn; i++) dimg[i] += dimg[(size_t)t * imgn + i];
            for (int64_t ch = 0; ch < g.I; ch++) cpu_store(&dxv, n * g.I + ch, 0, g.sin, dimg + ch * g.sin);
        }
    }
    if (c->dy0 && delta_only)
        for (int64_t i = 0; i < lyco_numel(c->dy0); i++) lyco_store_f32(lyco_elem_at(c->dy0, i), lyco_dtype_of(c->dy0), 0.0f);
    float *gU = s->gU;
    for (int t = 1; t < np; t++)
        for (int64_t i = 0; i < O * r; i++) gU[i] += s->gU[(size_t)t * (size_t)(O * r) + i];
    lyco_status st = LYCO_OK;
    if (c->g && c->g->grad[LYCO_SCALAR]) {
        float acc = 0.0f;
        for (int64_t i = 0; i < O * r; i++) acc += gU[i] * s->U[i] * (float)c->m;
        cpu_store_all(c->g->grad[LYCO_SCALAR], &acc);
    }
    if (c->g) {
        for (int64_t i = 0; i < O * r; i++) gU[i] *= f;
        st = store_grads(s, gU, true);
    }
    free(Uf);
    free(img);
    free(work);
    free(dimg);
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
    (void)why; /* nothing declined */
    (void)why_len;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    if (bypass && c->dropped) {
        bypass_dropped(c);
        return LYCO_OK;
    }
    bool grads = c->dir == LYCO_DIR_MERGE_BWD || c->dir == LYCO_DIR_BYPASS_BWD;
    locon_t s;
    lyco_status st = locon_prepare(c, &s, grads);
    if (st == LYCO_OK) {
        cpu_delta dl = {.rows = rows, .rows_bwd = rows_bwd, .finish_bwd = finish_bwd, .c = c, .state = &s, .uses_sigma = true,
                        .rows_bwd_block = merge_bwd_rows(s.IK), .groups = s.nparts};
        switch (c->dir) {
        case LYCO_DIR_MERGE_FWD: st = cpu_merge_fwd(c, &dl); break;
        case LYCO_DIR_MERGE_BWD: st = cpu_merge_bwd(c, &dl); break;
        case LYCO_DIR_BYPASS_FWD:
        case LYCO_DIR_BYPASS_BWD:
            if (c->dims.dora) { /* locon_dora.c: ∂L/∂Ū into gU, ∂L/∂P into the first G_P partial */
                st = cpu_locon_dora_bypass(c, s.P, s.U, s.r, s.gU, s.gP);
                if (st == LYCO_OK && grads && c->g) st = store_grads(&s, s.gU, true);
            } else if (c->dir == LYCO_DIR_BYPASS_FWD) {
                st = c->a->layer.kind == LYCO_LAYER_CONV ? conv_bypass_fwd(c, &s) : bypass_fwd(c, &s);
            } else {
                st = c->a->layer.kind == LYCO_LAYER_CONV ? conv_bypass_bwd(c, &s) : bypass_bwd(c, &s);
            }
            break;
        default: break;
        }
    }
    locon_free(&s);
    return st;
}
