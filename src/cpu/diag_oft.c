/*
 * diag_oft.c — fused CPU kernels of Diag-OFT (ALGORITHMS.md §2.4): a block-diagonal rotation of
 * the O channel rows of X (merge: X = W̄, O × I·K; bypass: X = y0 with channels as rows,
 * O × tokens·spatial — the whole output, bias included).
 *
 * Once per call, in fp32 (cayley.h): R_k = Cayley(B_k − B_kᵀ) with the all-blocks norm
 * constraint, then (D = the merge-only dropout mask, already /(1−p))
 *   M_k = m·R_k + (1−m)·I,  or  M_k = (m·R_k) ⊙ D_k − m·I + I,   and  M_k − I (kept separately).
 * forward, per block k of bs rows (blocks act transposed, as upstream's einsum):
 *   Y_k = ρ_k ⊙ (M_kᵀ X_k)                                   merge WEIGHT, bypass y
 *   Y_k − X_k = ρ_k ⊙ ((M_k − I)ᵀ X_k) + (ρ_k − 1) ⊙ X_k      merge DELTA, bypass DELTA_ONLY
 *   (the delta form keeps the accuracy of W'' − W when R is near I)
 * backward, with GY = ∂L/∂Y and G'' = ρ ⊙ GY:
 *   G_ρ[o] = Σ_j GY[o, j]·(Mᵀ X)[o, j];   G_M_k = X_k·G''_kᵀ;   G_R_k = m·G_M_k (⊙ D_k)
 *   G_B = the Cayley adjoint of G_R (fp32);   bypass: dy0_k = M_k·G''_k (delta-only:
 *   (M_k − I)·G''_k + (ρ_k − 1) ⊙ dy_k), dx = 0 (the adapter path does not read x).
 *
 * Tiling: a tile is a group of whole blocks (≥ 16 rows) × a column range (merge: W's columns;
 * bypass: tokens, or positions of one image for conv), ≤ 16K floats per buffer. Each output
 * tile depends only on its own input tile: X is streamed once and Y written once (in place is
 * fine: W → out, y0 → y). Forward tiles are spread over threads (static; the linear bypass's are
 * whole token rows where the layer has ≤ 1024 channels, token_geometry_fwd). Backward: the
 * gradients of M and ρ are sums over a group's tiles, taken in fixed runs of tiles per group (a
 * function of the shape only), one partial per run, added in run order: independent of the thread
 * count (oft_backward; the runs go to whichever thread is free). The linear bypass's dy0
 * multiplies by the transposed blocks (Mᵀ, built once); its products run in rot.h's kernels with
 * cpu_gemm_tn's / cpu_gemm_nn's bits. Inputs are prefetched a tile (and a row) ahead: cold rows of
 * a few KB each were ~40 % of the flushed backward.
 *
 * Extra memory: the Cayley state and M, M − I (5·nb·bs² floats), ρ (O); per thread 4 tile
 * buffers (≤ 64K floats) and 2·bs + tw row pointers; backward, G_M and G_ρ (nb·bs² + O floats), the run partials
 * (runs·gl·(bs² + bs) floats, runs ≤ CPU_RUNS, ≤ CPU_RUNS_BIG·(nb·bs² + O) and ≤ CPU_RUN_FLOATS
 * floats in all; gl blocks per group) and, linear bypass with dy0, the transposed blocks (nb·bs² floats).
 */
#include <stdio.h>
#include <stdlib.h>

#include "cayley.h"
#include "rot.h"

#define ROWS_MIN 16
#define TILE_FLOATS 16384

typedef struct {
    const lyco_call *c;
    int64_t O, nb, bs, nn;
    cpu_cayley cy;
    float *M, *Mm;      /* M and M − I (nb·bs·bs) */
    float *rho;         /* ρ (O) or NULL (= 1) */
    float *D;           /* merge dropout mask (nb·bs·bs) or NULL */
    int nt;
    float *gM, *grho;   /* the gradients of M (nb·bs·bs) and ρ (O), before the Cayley adjoint */
    int64_t g, tw;      /* blocks per row group, tile width */
    float *work;        /* per-thread tile buffers */
    int64_t wsz;        /* floats per thread in work */
    char **ptr;         /* per-thread row pointers of rot.h's calls (np each) */
    int64_t np;         /* 2·bs + the token-major backward tile's tokens */
} oft_t;

static void oft_free(oft_t *s) {
    cpu_cayley_free(&s->cy);
    free(s->M);
    free(s->Mm);
    free(s->rho);
    free(s->D);
    free(s->gM);
    free(s->grho);
    free(s->work);
    free(s->ptr);
}

static void token_geometry(const oft_t *s, int64_t *gl, int64_t *tw);

static lyco_status oft_prepare(const lyco_call *c, oft_t *s, bool grads) {
    memset(s, 0, sizeof *s);
    lyco_dtype T = c->dt.compute;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    s->c = c;
    s->O = c->dims.O;
    s->nb = c->dims.nb;
    s->bs = c->dims.bs;
    s->nn = s->bs * s->bs;
    s->nt = cpu_threads();
    int64_t all = s->nb * s->nn;
    float *B = malloc(sizeof(float) * (size_t)(all + 1));
    s->M = malloc(sizeof(float) * (size_t)(all + 1));
    s->Mm = malloc(sizeof(float) * (size_t)(all + 1));
    if (!B || !s->M || !s->Mm) {
        free(B);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu diag_oft: out of memory");
    }
    cpu_load_all(c->a->tensor[LYCO_OFT_BLOCKS], T, B);
    lyco_status st = cpu_cayley_fwd(&s->cy, B, s->nb, s->bs, c->a->constraint);
    free(B);
    if (st) return st;
    const DLTensor *mask = bypass ? NULL : c->a->tensor[LYCO_RANK_MASK];
    if (mask) {
        s->D = malloc(sizeof(float) * (size_t)(all + 1));
        if (!s->D) return lyco_fail(LYCO_ERR_NOMEM, "cpu diag_oft: out of memory");
        cpu_load_all(mask, lyco_dtype_of(mask), s->D);
    }
    float m = (float)c->m;
    for (int64_t k = 0; k < s->nb; k++)
        for (int64_t a = 0; a < s->bs; a++)
            for (int64_t b = 0; b < s->bs; b++) {
                int64_t i = k * s->nn + a * s->bs + b;
                float rm1 = s->cy.Rm1[i];
                float mm;   /* M − I */
                if (s->D) mm = a == b ? m * ((1.0f + rm1) * s->D[i] - 1.0f) : m * rm1 * s->D[i];
                else mm = m * rm1;
                s->Mm[i] = mm;
                s->M[i] = mm + (a == b ? 1.0f : 0.0f);
            }
    if (c->a->tensor[LYCO_RESCALE]) {
        s->rho = malloc(sizeof(float) * (size_t)(s->O + 1));
        if (!s->rho) return lyco_fail(LYCO_ERR_NOMEM, "cpu diag_oft: out of memory");
        cpu_load_all(c->a->tensor[LYCO_RESCALE], T, s->rho);
    }
    if (grads) {
        s->gM = calloc((size_t)all + 1, sizeof(float));
        s->grho = calloc((size_t)s->O + 1, sizeof(float));
        if (!s->gM || !s->grho) return lyco_fail(LYCO_ERR_NOMEM, "cpu diag_oft: out of memory for gradient partials");
    }
    s->g = s->bs >= ROWS_MIN ? 1 : (ROWS_MIN + s->bs - 1) / s->bs;
    if (s->g > s->nb) s->g = s->nb;
    int64_t nr = s->g * s->bs;
    s->tw = TILE_FLOATS / nr;
    if (s->tw < 8) s->tw = 8;
    s->wsz = 4 * nr * s->tw + nr;
    if (s->wsz < 4 * TILE_FLOATS) s->wsz = 4 * TILE_FLOATS;   /* the token-major tiles (linear bypass) */
    s->work = malloc(sizeof(float) * (size_t)s->nt * (size_t)s->wsz + 1);
    int64_t gl, tw;
    token_geometry(s, &gl, &tw);
    s->np = 2 * s->bs + tw;
    s->ptr = malloc(sizeof(char *) * (size_t)(s->nt * s->np + 1));
    if (!s->work || !s->ptr) return lyco_fail(LYCO_ERR_NOMEM, "cpu diag_oft: out of memory for tile buffers");
    return LYCO_OK;
}

static float rho_at(const oft_t *s, int64_t o) { return s->rho ? s->rho[o] : 1.0f; }

/* the calling thread's row pointers (s->np) */
static char **thread_ptrs(const oft_t *s) { return s->ptr + (size_t)cpu_thread_id() * (size_t)s->np; }

/* Rows [r0, r0 + n) × columns [c0, c0 + nc) of a compact view towards L2, a cache line at a time
   (the next tile's, while this one is computed). */
static void prefetch_rows(const cpu_view *v, int64_t r0, int64_t n, int64_t c0, int64_t nc) {
    if (!v->fast) return;
    for (int64_t r = r0; r < r0 + n; r++) {
        const char *p = v->base + (r * v->rs + c0) * (int64_t)v->es, *e = p + nc * (int64_t)v->es;
        for (; p < e; p += 64) __builtin_prefetch(p, 0, 2);
    }
}

/* Channel rows [o0, o0 + nr) × columns [j0, j0 + w) of a merge or conv tensor towards L2 (compact
   views; the rows' column runs are contiguous). */
static void prefetch_tile(const cpu_oft_io *io, int64_t o0, int64_t nr, int64_t j0, int64_t w) {
    for (int64_t r = o0; r < o0 + nr; r++) {
        const char *p = cpu_oft_row(io, r, j0);
        if (!p) return;
        for (const char *e = p + w * (int64_t)io->v.es; p < e; p += 64) __builtin_prefetch(p, 0, 2);
    }
}

/* cpu_oft_load (X = nr channel rows × w columns), and where the rows lie in place the row
   LOAD_AHEAD on prefetched as each converts: a cold 1280² merge backward, 1 thread, ~1.33 →
   ~1.0 ms (the rows, 2 KB each, each began with misses the hardware prefetchers took a while to
   follow; 1 row ahead ~1.05, 2 ~1.0). */
#define LOAD_AHEAD 2
static void load_rows(const cpu_oft_io *io, int64_t o0, int64_t nr, int64_t j0, int64_t w, lyco_dtype T, float *X, float *tmp) {
    if (!cpu_oft_row(io, o0, j0)) {
        cpu_oft_load(io, o0, nr, j0, w, T, X, tmp);
        return;
    }
    for (int64_t r = 0; r < nr; r++) {
        if (r + LOAD_AHEAD < nr) prefetch_tile(io, o0 + r + LOAD_AHEAD, 1, j0, w);
        cpu_oft_load(io, o0 + r, 1, j0, w, T, X + r * w, tmp);
    }
}

/* Token rows [t0, t0 + w) × channels [o0, o0 + nc) into X (w × nc, fp32 rounded through T), the
   token LOAD_AHEAD on prefetched as each converts. */
static void load_tokens(const cpu_view *v, int64_t t0, int64_t w, int64_t o0, int64_t nc, lyco_dtype T, float *X) {
    for (int64_t t = 0; t < w; t++) {
        if (t + LOAD_AHEAD < w) prefetch_rows(v, t0 + t + LOAD_AHEAD, 1, o0, nc);
        cpu_load(v, t0 + t, o0, nc, T, X + t * nc);
    }
}

/* Token-major tiles (the backward's: its gradient sums follow them): groups of gl blocks spanning
   ≥ 256 channels where the layer has them, tw tokens per tile (≤ TILE_FLOATS floats). */
static void token_geometry(const oft_t *s, int64_t *gl, int64_t *tw) {
    int64_t g = (256 + s->bs - 1) / s->bs;
    if (g < s->g) g = s->g;
    if (g > s->nb) g = s->nb;
    *gl = g;
    *tw = TILE_FLOATS / (g * s->bs);
    if (*tw < 1) *tw = 1;
}

/* The forward's token-major tiles (no sums across tiles: any split gives the same bits): whole
   token rows up to TOK_ROW_MAX channels, else groups of about 256 channels of equal size, so the
   tiles are equal units of work for the static schedule (256-channel groups left a 640-channel
   layer's third group half-size: 24 and 16 tiles' work on 2 threads); a tile ≤ TOK_FWD_FLOATS
   (its fp32 copy stays in L1 while the kernel broadcasts from it), tw a multiple of TOK_TW_STEP
   tokens (the v4 kernel's register group) where it is that large. A tile of whole rows is one
   contiguous run of the tensor, a stream the prefetchers follow. 640 channels, 1024 tokens, cold,
   2 threads: 24-token tiles 204–212 µs, 12 172–180, 16 or 18 180–188, 6 or 8 179–185. */
#define TOK_ROW_MAX 1024
#define TOK_FWD_FLOATS 8192
#define TOK_TW_STEP 12
static void token_geometry_fwd(const oft_t *s, int64_t *gl, int64_t *tw) {
    int64_t ng = s->nb * s->bs <= TOK_ROW_MAX ? 1 : (s->nb * s->bs + 255) / 256;
    int64_t g = (s->nb + ng - 1) / ng;
    if (g < s->g) g = s->g;
    if (g > s->nb) g = s->nb;
    *gl = g;
    *tw = TOK_FWD_FLOATS / (g * s->bs);
    if (*tw >= TOK_TW_STEP) *tw -= *tw % TOK_TW_STEP;
    if (*tw < 1) *tw = 1;
}

/* Linear bypass, token-major: a token's channels are contiguous in y0, and block k maps a token's
   row x_k (1 × bs) to x_k·M_k (the transpose of M_kᵀ x_k) — so a tile of w tokens × a group of
   blocks is loaded as it lies (fp32, rounded), multiplied block by block with the epilogue in
   registers (rot.h, cpu_rot_tokens) and stored as it lies, straight into y when y is compact:
   no transposition. Groups span ≥ 256 channels where the layer has them. */
static void oft_forward_tokens(oft_t *s, const cpu_oft_io *in, const cpu_oft_io *out, bool delta) {
    lyco_dtype T = s->c->dt.compute;
    int64_t gl, tw;
    token_geometry_fwd(s, &gl, &tw);
    int64_t ngroups = (s->nb + gl - 1) / gl, ntt = (in->n + tw - 1) / tw, total = ngroups * ntt;
    const float *Op = delta ? s->Mm : s->M;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < total; b++) {
        float *X = s->work + (size_t)cpu_thread_id() * (size_t)s->wsz, *Z = X + TILE_FLOATS;
        int64_t k0 = (b / ntt) * gl, kb = s->nb - k0 < gl ? s->nb - k0 : gl, o0 = k0 * s->bs, nc = kb * s->bs;
        int64_t t0 = (b % ntt) * tw, w = in->n - t0 < tw ? in->n - t0 : tw;
        load_tokens(&in->v, t0, w, o0, nc, T, X);
        if (b + 1 < total) {   /* the next tile (this thread's, but at the end of its range) */
            int64_t k1 = ((b + 1) / ntt) * gl, u0 = ((b + 1) % ntt) * tw;
            prefetch_rows(&in->v, u0, in->n - u0 < tw ? in->n - u0 : tw, k1 * s->bs, (s->nb - k1 < gl ? s->nb - k1 : gl) * s->bs);
        }
        bool direct = out->v.fast;
        cpu_rot_tok q = {.bs = s->bs, .nb = kb, .Op = Op + k0 * s->nn, .X = X,
                         .dst = direct ? out->v.base + (t0 * out->v.rs + o0) * (int64_t)out->v.es : (char *)Z,
                         .dstride = direct ? out->v.rs * (int64_t)out->v.es : nc * (int64_t)sizeof(float),
                         .odt = direct ? out->v.dt : LYCO_F32, .rho = s->rho ? s->rho + o0 : NULL,
                         .mode = delta ? CPU_ROT_DELTA : CPU_ROT_SET};
        cpu_rot_tokens(&q, w);
        if (!direct)
            for (int64_t t = 0; t < w; t++) cpu_store(&out->v, t0 + t, o0, nc, Z + t * nc);
    }
}

/* Block k through rot.h: rows k·bs… of src (sdt) to the same rows of dst (odt), w columns; the
   row pointers go in ptr (2·bs). */
static void rot_block(const oft_t *s, const float *Op, int64_t k, char **ptr, lyco_dtype sdt, lyco_dtype odt, bool delta,
                      int64_t w) {
    cpu_rot r = {.bs = s->bs, .A = Op + k * s->nn, .ai = 1, .ak = s->bs, .src = (const char *const *)ptr, .sdt = sdt, .T = s->c->dt.compute,
                 .dst = ptr + s->bs, .odt = odt, .rho = s->rho ? s->rho + k * s->bs : NULL,
                 .mode = delta ? CPU_ROT_DELTA : CPU_ROT_SET};
    cpu_rot_rows(&r, w);
}

/* Channel-major, in place in the caller's tensors (compact merge and conv views, bs ≤ the kernel's
   register block): a tile is one block × a column range, read once and written once. */
static void oft_forward_direct(oft_t *s, const cpu_oft_io *in, const cpu_oft_io *out, bool delta) {
    int64_t bs = s->bs, nct = cpu_oft_ntiles(in, s->tw), total = s->nb * nct;
    const float *Op = delta ? s->Mm : s->M;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < total; b++) {
        char **ptr = thread_ptrs(s);
        int64_t k = b / nct, j0, w;
        cpu_oft_tile(in, s->tw, b % nct, &j0, &w);
        for (int64_t i = 0; i < bs; i++) {
            ptr[i] = cpu_oft_row(in, k * bs + i, j0);
            ptr[bs + i] = cpu_oft_row(out, k * bs + i, j0);
        }
        rot_block(s, Op, k, ptr, in->v.dt, out->v.dt, delta, w);
    }
}

/* dst = rows(src) (delta: rows(src) − src) over all tiles */
static void oft_forward(oft_t *s, const DLTensor *src, DLTensor *dst, bool delta) {
    const lyco_call *c = s->c;
    lyco_dtype T = c->dt.compute;
    cpu_oft_io in, out;
    cpu_oft_io_init(&in, c, src);
    cpu_oft_io_init(&out, c, dst);
    if (in.kind == CPU_OFT_LINEAR && s->wsz >= 2 * TILE_FLOATS) {
        oft_forward_tokens(s, &in, &out, delta);
        return;
    }
    if (cpu_oft_row(&in, 0, 0) && cpu_oft_row(&out, 0, 0) && s->bs <= cpu_rot_rows_max()) {
        oft_forward_direct(s, &in, &out, delta);
        return;
    }
    /* staged: the tile in fp32 (strided views, linear tiles, blocks past the register block) */
    int64_t bs = s->bs, ngroups = (s->nb + s->g - 1) / s->g, nct = cpu_oft_ntiles(&in, s->tw), total = ngroups * nct;
    const float *Op = delta ? s->Mm : s->M;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < total; b++) {
        float *X = s->work + (size_t)cpu_thread_id() * (size_t)s->wsz, *Z = X + s->g * bs * s->tw, *tmp = X + 4 * s->g * bs * s->tw;
        char **ptr = thread_ptrs(s);
        int64_t k0 = (b / nct) * s->g, kb = s->nb - k0 < s->g ? s->nb - k0 : s->g, o0 = k0 * bs, nr = kb * bs, j0, w;
        cpu_oft_tile(&in, s->tw, b % nct, &j0, &w);
        cpu_oft_load(&in, o0, nr, j0, w, T, X, tmp);
        for (int64_t kk = 0; kk < kb; kk++) {
            for (int64_t i = 0; i < bs; i++) {
                ptr[i] = (char *)(X + (kk * bs + i) * w);
                ptr[bs + i] = (char *)(Z + (kk * bs + i) * w);
            }
            rot_block(s, Op, k0 + kk, ptr, LYCO_F32, LYCO_F32, delta, w);
        }
        cpu_oft_store(&out, o0, nr, j0, w, Z, tmp);
    }
}

/* ---- backward ----
   Tiles are numbered group-major (group of gl blocks, then column/token tile). The gradients of M
   and ρ are sums over a group's tiles: each group's tiles are cut into R fixed runs (R from the
   shape only: at most CPU_RUNS units and CPU_RUN_FLOATS partial floats in all), a run is walked in
   order by one thread into its own partial (its group's gl·bs² + gl·bs floats; all partials
   together at most CPU_RUNS_BIG full-size gradients), and the partials
   are added in run order — the gradients do not depend on the thread count (cpu.h, cpu_runs). */
typedef struct {
    const cpu_oft_io *xin, *gin, *gout;
    bool delta, want_rho, want_b, token;
    const float *Op;        /* M, or M − I (delta) */
    const float *OpT;       /* token-major dy0: Op's blocks transposed (NULL otherwise) */
    int64_t gl, nct, tw;    /* blocks per group, tiles per group, tile width (columns / tokens) */
} bwd_geo;

/* The inputs of backward tile (grp, tile) towards L2: issued a tile ahead (the loads of a cold
   tile were ~40 % of a flushed merge backward, its rows a few KB each, too short for the
   hardware prefetchers to ramp up). */
static void tile_bwd_prefetch(const oft_t *s, const bwd_geo *q, int64_t grp, int64_t tile) {
    int64_t k0 = grp * q->gl, kb = s->nb - k0 < q->gl ? s->nb - k0 : q->gl, o0 = k0 * s->bs, nr = kb * s->bs;
    bool x = q->want_rho || q->want_b;
    if (q->token) {
        int64_t t0 = tile * q->tw, w = q->xin->n - t0 < q->tw ? q->xin->n - t0 : q->tw;
        prefetch_rows(&q->gin->v, t0, w, o0, nr);
        if (x) prefetch_rows(&q->xin->v, t0, w, o0, nr);
        return;
    }
    int64_t j0, w;
    cpu_oft_tile(q->xin, q->tw, tile, &j0, &w);
    prefetch_tile(q->gin, o0, nr, j0, w);
    if (x) prefetch_tile(q->xin, o0, nr, j0, w);
}

/* X·Op per block, for the kb blocks of Op over w tokens of a token-major fp32 tile (ld kb·bs), the
   sums in chains of kc terms (0: one): rot.h's token kernel with the bits of cpu_gemm_nn called per
   chunk of kc terms (a chain from 0, then + the chunks before), stored as odt (token t at dst +
   t·dstride bytes) — an fp32 tile, or the caller's tensor with cpu_store's values. */
static void tokens_times(const oft_t *s, const float *Op, int64_t kb, const float *X, int64_t w, int64_t kc, char *dst,
                         int64_t dstride, lyco_dtype odt) {
    cpu_rot_tok r = {.bs = s->bs, .nb = kb, .Op = Op, .X = X, .dst = dst, .dstride = dstride, .odt = odt, .mode = CPU_ROT_SET, .kc = kc};
    cpu_rot_tokens(&r, w);
}

/* C (bs × bs) += X_kᵀ·G_k over w tokens of token-major fp32 tiles (ld floats; X, G at the block's
   first channel): rot.h's row kernel with one input row per token and A(i, t) = X[t, i] — the
   sums in registers, cpu_gemm_tn's order and bits (a chain from 0 over the tokens, then + C_old). */
static void gram_block(const oft_t *s, const float *X, const float *G, int64_t ld, int64_t w, float *C) {
    int64_t bs = s->bs;
    char **src = thread_ptrs(s), **dst = src + w;
    for (int64_t t = 0; t < w; t++) src[t] = (char *)(G + t * ld);
    for (int64_t i = 0; i < bs; i++) dst[i] = (char *)(C + i * bs);
    cpu_rot r = {.bs = bs, .nk = w, .A = X, .ai = 1, .ak = ld, .src = (const char *const *)src, .sdt = LYCO_F32,
                 .T = LYCO_F32, .dst = dst, .odt = LYCO_F32, .base = (const float *const *)dst, .mode = CPU_ROT_ADD};
    cpu_rot_rows(&r, bs);
}

/* One token-major tile (w tokens × the group's channels, as they lie): with G'' = ρ ⊙ GY,
   G_ρ[o] += Σ_t GY[t,o]·(x·M)[t,o];  G_M_k += X_kᵀ·G''_k (bs × bs);  dy0_k = G''_k·(M_k)ᵀ
   (delta: the (M_k − I) form plus (ρ − 1) ⊙ GY) — the transposes of the channel-major formulas. */
static void tile_bwd_tokens(const oft_t *s, const bwd_geo *q, int64_t grp, int64_t tile, float *pM, float *pR) {
    lyco_dtype T = s->c->dt.compute;
    float *X = s->work + (size_t)cpu_thread_id() * (size_t)s->wsz, *GY = X + TILE_FLOATS, *G2 = GY + TILE_FLOATS, *Z = G2 + TILE_FLOATS;
    int64_t bs = s->bs, k0 = grp * q->gl, kb = s->nb - k0 < q->gl ? s->nb - k0 : q->gl, o0 = k0 * bs, nc = kb * bs;
    int64_t t0 = tile * q->tw, w = q->xin->n - t0 < q->tw ? q->xin->n - t0 : q->tw;
    load_tokens(&q->gin->v, t0, w, o0, nc, T, GY);
    if (q->want_rho || q->want_b) load_tokens(&q->xin->v, t0, w, o0, nc, T, X);
    if (q->want_rho) {
        tokens_times(s, s->M + k0 * s->nn, kb, X, w, 0, (char *)Z, nc * (int64_t)sizeof(float), LYCO_F32);
        /* each channel's sum over the tile's tokens in double, added to the run's partial once:
           one fp32 chain over the tokens cancelled past the fp32 budget (case
           diag_oft_linear_bs16_strided_unaligned_active, fp32, seed 224309689: 38.8 ULP against
           37.1, eager 21.4) */
        for (int64_t r = 0; r < nc; r++) {
            double acc = 0.0;
            for (int64_t t = 0; t < w; t++) acc += (double)GY[t * nc + r] * (double)Z[t * nc + r];
            pR[r] += (float)acc;
        }
    }
    if (s->rho)
        for (int64_t t = 0; t < w; t++)
            for (int64_t r = 0; r < nc; r++) G2[t * nc + r] = s->rho[o0 + r] * GY[t * nc + r];
    else
        G2 = GY;   /* ρ = 1: G'' = GY */
    if (q->want_b)
        for (int64_t kk = 0; kk < kb; kk++) gram_block(s, X + kk * bs, G2 + kk * bs, nc, w, pM + kk * s->nn);
    if (q->gout) {
        /* G''_k·Op_kᵀ as plain products with the transposed blocks (the nt form took dot products
           of length bs per element: ~40% of the call at 640², block 16), over k in chunks of 8
           (each a chain from 0, then added: about the accuracy of the nt form's 8 lanes; one
           chain of 32 doubled the fp32 rows' ULP at block 32) */
        const cpu_view *gv = &q->gout->v;
        if (!q->delta && gv->fast) {   /* straight into dy0 */
            tokens_times(s, q->OpT + k0 * s->nn, kb, G2, w, 8, gv->base + (t0 * gv->rs + o0) * (int64_t)gv->es,
                         gv->rs * (int64_t)gv->es, gv->dt);
            return;
        }
        tokens_times(s, q->OpT + k0 * s->nn, kb, G2, w, 8, (char *)Z, nc * (int64_t)sizeof(float), LYCO_F32);
        if (q->delta)
            for (int64_t t = 0; t < w; t++)
                for (int64_t r = 0; r < nc; r++) Z[t * nc + r] += (rho_at(s, o0 + r) - 1.0f) * GY[t * nc + r];
        for (int64_t t = 0; t < w; t++) cpu_store(gv, t0 + t, o0, nc, Z + t * nc);
    }
}

/* Σ_j a[j]·b[j] in 8 lanes (lane q takes j ≡ q mod 8 over the whole groups of 8, in order), a fixed
   tree, then the chained tail: G_ρ's row sums run over up to 1024 columns, and one fp32 chain
   put the bs16 I = 1000 merge_bwd bf16+fp32adapter row at 62 ULP against a budget of 57 (seed
   1796033956434536). The ISA clones contract a·b + c into FMAs where the ISA has them. */
CPU_HOT
static float dot_lanes(const float *a, const float *b, int64_t n) {
    float l[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, t = 0.0f;
    int64_t n8 = n & ~(int64_t)7;
    for (int64_t j = 0; j < n8; j += 8)
        for (int q = 0; q < 8; q++) l[q] += a[j + q] * b[j + q];
    for (int64_t j = n8; j < n; j++) t += a[j] * b[j];
    return (((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))) + t;
}

/* One channel-major tile (the group's rows × a column range): the formulas of the file header. */
static void tile_bwd_rows(const oft_t *s, const bwd_geo *q, int64_t grp, int64_t tile, float *pM, float *pR) {
    lyco_dtype T = s->c->dt.compute;
    int64_t bs = s->bs, k0 = grp * q->gl, kb = s->nb - k0 < q->gl ? s->nb - k0 : q->gl, o0 = k0 * bs, nr = kb * bs, j0, w;
    int64_t tsz = q->gl * bs * q->tw;
    float *X = s->work + (size_t)cpu_thread_id() * (size_t)s->wsz, *GY = X + tsz, *G2 = GY + tsz, *Z = G2 + tsz, *tmp = Z + tsz;
    cpu_oft_tile(q->xin, q->tw, tile, &j0, &w);
    load_rows(q->gin, o0, nr, j0, w, T, GY, tmp);
    if (q->want_rho || q->want_b) load_rows(q->xin, o0, nr, j0, w, T, X, tmp);
    if (q->want_rho) {
        for (int64_t kk = 0; kk < kb; kk++)
            cpu_gemm_tn(bs, w, bs, s->M + (k0 + kk) * s->nn, bs, X + kk * bs * w, w, Z + kk * bs * w, w, false);
        for (int64_t r = 0; r < nr; r++) pR[r] += dot_lanes(GY + r * w, Z + r * w, w);
    }
    if (s->rho)
        for (int64_t r = 0; r < nr; r++) {
            float p = s->rho[o0 + r];
            for (int64_t j = 0; j < w; j++) G2[r * w + j] = p * GY[r * w + j];
        }
    else
        G2 = GY;   /* ρ = 1: G'' = GY */
    if (q->want_b)
        for (int64_t kk = 0; kk < kb; kk++) cpu_gemm_nt(bs, bs, w, X + kk * bs * w, w, G2 + kk * bs * w, w, pM + kk * s->nn, bs, true);
    if (q->gout) {
        for (int64_t kk = 0; kk < kb; kk++)
            cpu_gemm_nn(bs, w, bs, q->Op + (k0 + kk) * s->nn, bs, G2 + kk * bs * w, w, Z + kk * bs * w, w, false);
        if (q->delta)
            for (int64_t r = 0; r < nr; r++) {
                float p1 = rho_at(s, o0 + r) - 1.0f;
                for (int64_t j = 0; j < w; j++) Z[r * w + j] += p1 * GY[r * w + j];
            }
        cpu_oft_store(q->gout, o0, nr, j0, w, Z, tmp);
    }
}

/* Gradients from GY = ∂L/∂rows(X); GX (may be NULL) = ∂L/∂X (delta: minus GY). */
static lyco_status oft_backward(oft_t *s, const DLTensor *Xt, const DLTensor *GYt, DLTensor *GXt, bool delta) {
    const lyco_call *c = s->c;
    cpu_oft_io xin, gin, gout;
    cpu_oft_io_init(&xin, c, Xt);
    cpu_oft_io_init(&gin, c, GYt);
    if (GXt) cpu_oft_io_init(&gout, c, GXt);
    int64_t all = s->nb * s->nn;
    bwd_geo q = {.xin = &xin, .gin = &gin, .gout = GXt ? &gout : NULL, .delta = delta,
                 .want_rho = s->rho && lyco_call_wants(c, LYCO_RESCALE), .want_b = lyco_call_wants(c, LYCO_OFT_BLOCKS),
                 .token = xin.kind == CPU_OFT_LINEAR && s->wsz >= 4 * TILE_FLOATS, .Op = delta ? s->Mm : s->M};
    if (q.token) {
        token_geometry(s, &q.gl, &q.tw);
        q.nct = (xin.n + q.tw - 1) / q.tw;
    } else {
        q.gl = s->g;
        q.tw = s->tw;
        q.nct = cpu_oft_ntiles(&xin, s->tw);
    }
    int64_t ngroups = (s->nb + q.gl - 1) / q.gl, slot = q.gl * s->nn + q.gl * s->bs;
    /* partial floats in all ≤ CPU_RUNS_BIG full-size gradients and ≤ CPU_RUN_FLOATS (cpu.h's rule for
       matrix-sized partials; 48 runs of 4352 floats at 640², block 16, cost ~3% of the call in memset) */
    int64_t budget = CPU_RUNS_BIG * (all + s->O) < CPU_RUN_FLOATS ? CPU_RUNS_BIG * (all + s->O) : CPU_RUN_FLOATS;
    int64_t cap = budget / (ngroups * slot > 0 ? ngroups * slot : 1), R = CPU_RUNS / (ngroups > 0 ? ngroups : 1);
    if (R > cap) R = cap;
    R = cpu_runs(q.nct, R);   /* runs per group: 1 ≤ R ≤ tiles per group */
    int64_t units = ngroups * R;
    float *part = calloc((size_t)(units * slot) + 1, sizeof(float)), *OpT = NULL;
    if (q.token && q.gout) OpT = malloc(sizeof(float) * (size_t)(all + 1));
    if (!part || (q.token && q.gout && !OpT)) {
        free(part);
        free(OpT);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu diag_oft: out of memory for gradient partials");
    }
    if (OpT)
        for (int64_t k = 0; k < s->nb; k++)
            for (int64_t a = 0; a < s->bs; a++)
                for (int64_t b = 0; b < s->bs; b++) OpT[k * s->nn + b * s->bs + a] = q.Op[k * s->nn + a * s->bs + b];
    q.OpT = OpT;
    /* a unit to whichever thread is free (units differ in size: a layer's last group may be narrower;
       each unit has its own partial, so the sums do not depend on who runs it) */
#pragma omp parallel for schedule(dynamic)
    for (int64_t u = 0; u < units; u++) {
        int64_t grp = u / R, r = u % R, tend = cpu_run_start(q.nct, (int)R, (int)r + 1);
        float *pM = part + u * slot, *pR = pM + q.gl * s->nn;
        for (int64_t t = cpu_run_start(q.nct, (int)R, (int)r); t < tend; t++) {
            if (t + 1 < tend) tile_bwd_prefetch(s, &q, grp, t + 1);
            else if (u + 1 < units) tile_bwd_prefetch(s, &q, (u + 1) / R, cpu_run_start(q.nct, (int)R, (int)((u + 1) % R)));
            if (q.token) tile_bwd_tokens(s, &q, grp, t, pM, pR);
            else tile_bwd_rows(s, &q, grp, t, pM, pR);
        }
    }
    /* the partials of each group, in run order */
    for (int64_t grp = 0; grp < ngroups; grp++) {
        int64_t k0 = grp * q.gl, kb = s->nb - k0 < q.gl ? s->nb - k0 : q.gl;
        for (int64_t r = 0; r < R; r++) {
            const float *pM = part + (grp * R + r) * slot, *pR = pM + q.gl * s->nn;
            for (int64_t i = 0; i < kb * s->nn; i++) s->gM[k0 * s->nn + i] += pM[i];
            for (int64_t i = 0; i < kb * s->bs; i++) s->grho[k0 * s->bs + i] += pR[i];
        }
    }
    free(part);
    free(OpT);
    if (q.want_rho) cpu_store_all(c->g->grad[LYCO_RESCALE], s->grho);
    if (q.want_b) {
        float m = (float)c->m;
        for (int64_t i = 0; i < all; i++) s->gM[i] = s->D ? m * s->gM[i] * s->D[i] : m * s->gM[i];
        float *GB = malloc(sizeof(float) * (size_t)(all + 1));
        if (!GB) return lyco_fail(LYCO_ERR_NOMEM, "cpu diag_oft: out of memory");
        lyco_status st = cpu_cayley_bwd(&s->cy, s->gM, GB);
        if (st == LYCO_OK) cpu_store_all(c->g->grad[LYCO_OFT_BLOCKS], GB);
        free(GB);
        return st;
    }
    return LYCO_OK;
}

/* ---- small whole-tensor helpers ---- */

/* dst = rnd_T(src) (same shape), or 0 when src is NULL; row by row. */
static lyco_status copy_or_zero(DLTensor *dst, const DLTensor *src, lyco_dtype T) {
    cpu_view dv, sv;
    int split = dst->ndim > 0 ? dst->ndim - 1 : 0;
    cpu_view_init(&dv, dst, split);
    if (src) cpu_view_init(&sv, src, split);
    float *row = calloc((size_t)dv.cols + 1, sizeof(float));
    if (!row) return lyco_fail(LYCO_ERR_NOMEM, "cpu diag_oft: out of memory");
    for (int64_t r = 0; r < dv.rows; r++) {
        if (src) cpu_load(&sv, r, 0, dv.cols, T, row);
        cpu_store(&dv, r, 0, dv.cols, row);
    }
    free(row);
    return LYCO_OK;
}

static lyco_status zero_grads(const lyco_call *c) {
    lyco_status st = LYCO_OK;
    for (int sl = 0; sl < LYCO_SLOT_COUNT && !st; sl++)
        if (lyco_call_wants(c, (lyco_slot)sl)) st = copy_or_zero(c->g->grad[sl], NULL, LYCO_F32);
    return st;
}

/* Module dropped: the rotation is the identity (W'' = W, y = y0), gradients are 0. */
static lyco_status run_dropped(const lyco_call *c) {
    lyco_dtype T = c->dt.compute;
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD: return copy_or_zero(c->out, c->merge->mode == LYCO_MERGE_DELTA ? NULL : c->merge->weight, T);
    case LYCO_DIR_MERGE_BWD: return zero_grads(c);
    case LYCO_DIR_BYPASS_FWD: {
        bool delta = c->bypass->flags & LYCO_BYPASS_DELTA_ONLY;
        return copy_or_zero(c->y, delta ? NULL : c->bypass->y0, T);
    }
    default: {
        bool delta = c->bypass->flags & LYCO_BYPASS_DELTA_ONLY;
        lyco_status st = LYCO_OK;
        if (c->dx) st = copy_or_zero(c->dx, NULL, T);
        if (!st && c->dy0) st = copy_or_zero(c->dy0, delta ? NULL : c->dy, T);
        if (!st) st = zero_grads(c);
        return st;
    }
    }
}

lyco_status cpu_diag_oft(const lyco_call *c, char *why, size_t why_len) {
    (void)why;
    (void)why_len;
    if (c->dropped) return run_dropped(c);
    bool grads = c->dir == LYCO_DIR_MERGE_BWD || c->dir == LYCO_DIR_BYPASS_BWD;
    oft_t s;
    lyco_status st = oft_prepare(c, &s, grads);
    if (st == LYCO_OK) {
        bool delta_only = c->bypass && (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY);
        switch (c->dir) {
        case LYCO_DIR_MERGE_FWD: oft_forward(&s, c->merge->weight, c->out, c->merge->mode == LYCO_MERGE_DELTA); break;
        case LYCO_DIR_MERGE_BWD: st = oft_backward(&s, c->merge->weight, c->d_out, NULL, false); break;
        case LYCO_DIR_BYPASS_FWD: oft_forward(&s, c->bypass->y0, c->y, delta_only); break;
        default:
            if (c->dx) st = copy_or_zero(c->dx, NULL, LYCO_F32);
            if (!st) st = oft_backward(&s, c->bypass->y0, c->dy, c->dy0, delta_only);
            break;
        }
    }
    oft_free(&s);
    return st;
}
