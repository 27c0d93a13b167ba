/*
 * dora_bypass.c — DoRA in bypass (ALGORITHMS.md §1.6, §1.4: y = y0 + x·(W'' − W)ᵀ) for the
 * algorithms whose ΔW has no low-rank factored form (LoHa, LoKr), linear layers. LoCon has its own
 * factored path (locon_dora.c), which never builds ΔW; here the merge driver builds
 * E = W'' − W once, in fp32 (delta mode: ΔW̄ rows generated in cache, the DoRA norms and scale as
 * a merge computes them — the same values as merge_fwd), and the bypass is two GEMMs against it:
 *
 *   forward : y = y0 + x·Eᵀ                                  (per tile of TB tokens, rows of E in blocks)
 *   backward: dx = dy·E;  ∂L/∂W'' = dyᵀ·x (per block of E's rows, one thread each, tokens in order);
 *             the adapter gradients (and σs's, dora_scale's) from the merge driver's backward
 *             given ∂L/∂W'' — DoRA's chain rule exactly as merge_bwd applies it.
 *
 * The merge calls see the bypass call as a merge of the same adapter (merge weight = the bypass's
 * base W, mode delta, output E in fp32) with upstream's merge-scale flag cleared (bypass has no
 * such compatibility mode). Every operand is rounded to the compute dtype as loaded; sums in fp32.
 *
 * Extra memory: E and, backward, ∂L/∂W'' (O·I floats each); per thread TB·(I + O) + OB·I floats.
 */
#include <stdlib.h>

#include "cpu.h"

#define TB 64
#define WBLK_FLOATS 65536

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* the bypass call seen as a merge: mode delta, base W = the bypass's weight, out / d_out fp32 */
static void as_merge(const lyco_call *c, lyco_direction dir, lyco_adapter *a2, lyco_merge_args *ma, lyco_call *mc) {
    *a2 = *c->a;
    a2->flags &= ~LYCO_FLAG_UPSTREAM_MERGE_SCALE;
    memset(ma, 0, sizeof *ma);
    ma->weight = c->bypass->weight;
    ma->mode = LYCO_MERGE_DELTA;
    *mc = *c;
    mc->dir = dir;
    mc->a = a2;
    mc->merge = ma;
    mc->out = NULL;
    mc->out_bias = NULL;
    mc->d_out = NULL;
    mc->d_out_bias = NULL;
}

/* E = W'' − W (O × I, fp32, compact) */
static lyco_status build_E(const lyco_call *c, const cpu_delta *dl, float *E) {
    int64_t shape[2] = {c->dims.O, c->dims.I};
    DLTensor Et = lyco_host_tensor(E, LYCO_F32, 2, shape);
    lyco_adapter a2;
    lyco_merge_args ma;
    lyco_call mc;
    as_merge(c, LYCO_DIR_MERGE_FWD, &a2, &ma, &mc);
    mc.out = &Et;
    mc.g = NULL;
    cpu_delta d2 = *dl;
    d2.c = &mc;
    return cpu_merge_fwd(&mc, &d2);
}

static lyco_status fwd(const lyco_call *c, const float *E) {
    const lyco_bypass_args *b = c->bypass;
    lyco_dtype T = c->dt.compute;
    int64_t N = c->tokens, I = c->dims.I, O = c->dims.O, ntiles = (N + TB - 1) / TB;
    bool add = b->y0 && !(b->flags & LYCO_BYPASS_DELTA_ONLY);
    cpu_view xv, y0v, yv;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&yv, c->y, c->y->ndim - 1);
    if (add) cpu_view_init(&y0v, b->y0, b->y0->ndim - 1);
    int64_t per = TB * (I + O);
    float *work = calloc((size_t)cpu_threads() * (size_t)per + 1, sizeof(float));
    if (!work) return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
#pragma omp parallel for schedule(static)
    for (int64_t tile = 0; tile < ntiles; tile++) {
        float *x = work + (size_t)cpu_thread_id() * (size_t)per, *y = x + TB * I;
        int64_t t0 = tile * TB, nt = min64(TB, N - t0);
        for (int64_t t = 0; t < nt; t++) cpu_load(&xv, t0 + t, 0, I, T, x + t * I);
        if (add)
            for (int64_t t = 0; t < nt; t++) cpu_load(&y0v, t0 + t, 0, O, T, y + t * O);
        cpu_gemm_nt(nt, O, I, x, I, E, I, y, O, add);
        for (int64_t t = 0; t < nt; t++) cpu_store(&yv, t0 + t, 0, O, y + t * O);
    }
    free(work);
    return LYCO_OK;
}

static lyco_status bwd(const lyco_call *c, const cpu_delta *dl, const float *E) {
    const lyco_bypass_args *b = c->bypass;
    lyco_dtype T = c->dt.compute;
    int64_t N = c->tokens, I = c->dims.I, O = c->dims.O, ntiles = (N + TB - 1) / TB;
    int64_t OB = WBLK_FLOATS / (I > 0 ? I : 1), nb;
    if (OB < 1) OB = 1;
    nb = (O + OB - 1) / OB;
    bool delta_only = b->flags & LYCO_BYPASS_DELTA_ONLY;
    cpu_view xv, dyv, dxv, dy0v;
    cpu_view_init(&xv, b->x, b->x->ndim - 1);
    cpu_view_init(&dyv, c->dy, c->dy->ndim - 1);
    if (c->dx) cpu_view_init(&dxv, c->dx, c->dx->ndim - 1);
    if (c->dy0 && !delta_only) cpu_view_init(&dy0v, c->dy0, c->dy0->ndim - 1);
    if (c->dy0 && delta_only) /* y = Δ(x) alone does not read y0 */
        for (int64_t i = 0; i < lyco_numel(c->dy0); i++) lyco_store_f32(lyco_elem_at(c->dy0, i), lyco_dtype_of(c->dy0), 0.0f);
    /* x and dy in fp32 once (every block of ∂L/∂W'' reads all tokens) */
    float *X = malloc(sizeof(float) * (size_t)(N * I + 1)), *G = malloc(sizeof(float) * (size_t)(N * O + 1));
    float *GE = calloc((size_t)(O * I) + 1, sizeof(float)), *dx = malloc(sizeof(float) * ((size_t)cpu_threads() * (size_t)(TB * I) + 1));
    lyco_status st = LYCO_OK;
    if (!X || !G || !GE || !dx) {
        st = lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory");
        goto done;
    }
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; t++) {
        cpu_load(&xv, t, 0, I, T, X + t * I);
        cpu_load(&dyv, t, 0, O, T, G + t * O);
        if (c->dy0 && !delta_only) cpu_store(&dy0v, t, 0, O, G + t * O);
    }
    if (c->dx) {
#pragma omp parallel for schedule(static)
        for (int64_t tile = 0; tile < ntiles; tile++) {
            float *d = dx + (size_t)cpu_thread_id() * (size_t)(TB * I);
            int64_t t0 = tile * TB, nt = min64(TB, N - t0);
            cpu_gemm_nn(nt, I, O, G + t0 * O, O, E, I, d, I, false);  /* dx = dy·E */
            for (int64_t t = 0; t < nt; t++) cpu_store(&dxv, t0 + t, 0, I, d + t * I);
        }
    }
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nb; blk++) {                            /* ∂L/∂W'' = dyᵀ·x */
        int64_t o0 = blk * OB, nr = min64(OB, O - o0);
        for (int64_t t0 = 0; t0 < N; t0 += TB)
            cpu_gemm_tn(nr, I, min64(TB, N - t0), G + t0 * O + o0, O, X + t0 * I, I, GE + o0 * I, I, t0 > 0);
    }
    if (c->g) {
        int64_t shape[2] = {O, I};
        DLTensor Gt = lyco_host_tensor(GE, LYCO_F32, 2, shape);
        lyco_adapter a2;
        lyco_merge_args ma;
        lyco_call mc;
        as_merge(c, LYCO_DIR_MERGE_BWD, &a2, &ma, &mc);
        mc.d_out = &Gt;
        cpu_delta d2 = *dl;
        d2.c = &mc;
        d2.g_exact = true; /* ∂L/∂W'' is ours, in fp32: no rounding point of the merge backward applies */
        st = cpu_merge_bwd(&mc, &d2);
    }
done:
    free(X);
    free(G);
    free(GE);
    free(dx);
    return st;
}

lyco_status cpu_dora_bypass_dense(const lyco_call *c, const cpu_delta *dl) {
    float *E = malloc(sizeof(float) * (size_t)(c->dims.O * c->dims.I + 1));
    if (!E) return lyco_fail(LYCO_ERR_NOMEM, "cpu DoRA bypass: out of memory for W'' − W (%lld × %lld floats)",
                             (long long)c->dims.O, (long long)c->dims.I);
    lyco_status st = build_E(c, dl, E);
    if (st == LYCO_OK) st = c->dir == LYCO_DIR_BYPASS_FWD ? fwd(c, E) : bwd(c, dl, E);
    free(E);
    return st;
}
