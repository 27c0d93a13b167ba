/*
 * boft.c — fused CPU kernels of BOFT (ALGORITHMS.md §2.5): a butterfly of M block-diagonal
 * rotations acting on the O channel rows of X (merge: X = W̄, O × I·K; bypass: X = y0 with
 * channels as rows, O × tokens·spatial, bias included).
 *
 * Once per call, in fp32 (cayley.h): R_{i,k} = Cayley(B_{i,k} − B_{i,k}ᵀ), the norm constraint
 * over all M·nb blocks; N_{i,k} = m·R_{i,k} + (1−m)·I, kept as N − I = m·(R − I).
 * Stage i (h = 2^i·b/2) gathers, for its block k, the b rows t_ν = π_i^{-1}(k·b + ν) where a
 * permuted position s = c·2h + 2η + γ comes from row t = c·2h + γ·h + η (index arithmetic,
 * tabulated once per call: M·O indices), and applies N_{i,k} (untransposed) to them:
 *   X_{i+1}[t_μ] = Σ_ν N_{i,k}[μ, ν]·X_i[t_ν],   Y = ρ ⊙ X_M
 * The forward runs in delta form, Δ_{i+1}[t] = Δ_i[t] + (N − I)·(X_0 + Δ_i)[t], so W'' − W =
 * ρ ⊙ Δ_M + (ρ − 1) ⊙ X_0 (merge DELTA, bypass DELTA_ONLY) keeps its accuracy near R = I.
 * Backward (GY = ∂L/∂Y): G_ρ[o] = Σ_j GY·X_M; G = ρ ⊙ GY; stages in reverse, per block:
 *   Ĝ = G[t], Ŵ = X_i[t]:  G_N_{i,k} += Ĝ·Ŵᵀ,  G[t] ← N_{i,k}ᵀ·Ĝ   (G tracked as GY + ΔG)
 * then G_R = m·G_N and the Cayley adjoint. Bypass: dy0 = G (delta-only: G − dy = ΔG), dx = 0.
 *
 * A stage's block runs through rot.h's kernel (the b rows' sums in registers, N's scalars
 * broadcast): forward in place on Δ's rows, reading X0 + Δ as it goes (b ≤ the kernel's register
 * block; past it the rows are gathered first); the backward's replay and its ΔG update from the
 * gathered rows. The same sums as the gather / GEMM / scatter-add it replaced, in the same order.
 *
 * Tiling: a tile is all O rows × tw columns (merge: W's columns; bypass: tokens, or positions of
 * one image for conv); all M stages run on the tile in cache, then it is stored once (in place is
 * fine; stages 0…lo−1 run chunk by chunk over rows that stay in L2, chunk_stages: the same sums).
 * The backward's G_N products go through rot.h's cpu_rot_gn on x86-64-v4 (X_i's rows read in place,
 * cpu_gemm_nt's bits), else through a gather and cpu_gemm_nt. The backward keeps the M + 1 stage
 * inputs of its ONE tile instead of replaying the prefixes (M·(M−1)/2 extra stage applications). Tile width: the buffers of one tile within
 * 512K floats (2 MB) forward, 2M floats (8 MB, L3) backward, at most 256 columns, rounded down
 * to a multiple of 32 from 64 on: wide enough for the small G_N products to run at speed (8
 * columns made the backward 3.6× slower; O = 1280, M = 8 at 2 MB gave 37 columns and twice the
 * time of 128). Tiles are spread over threads; the gradients of N
 * and ρ go to partials per fixed run of tiles (≤ CPU_RUNS_BIG runs, from the shape only), added in
 * run order: the same bits at any thread count.
 *
 * Extra memory: Cayley state, N − I and its transposed blocks (5·M·nb·b² floats), the index table (M·O), ρ (O); per
 * thread, forward 2·O·tw + 2·b·tw floats, backward (M + 3)·O·tw + 2·b·tw floats (≤ 8 MB + 2·b·tw), and 4·b
 * row pointers; backward, per run the partials (M·nb·b² + O floats, ≤ CPU_RUNS_BIG runs and
 * ≤ CPU_RUN_FLOATS floats in all) and the gradients once more.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cayley.h"
#include "rot.h"

#define TILE_FLOATS 524288       /* forward: 2 MB of tile buffers per thread */
#define EPI_ROWS 16              /* forward: rows per group of the ρ epilogue and the store */
#define CHUNK_BYTES 262144       /* the rows of a chunk of stages (chunk_stages; L2): 128 KB – 1 MB timed the same */
#define BWD_CHUNK_ARRAYS 6       /* backward chunks: GY, ΔG and X_i of (up to) four stages */
#define TILE_FLOATS_BWD 2097152  /* backward: 8 MB (narrower tiles ran the per-block G_N products and
                                    gathers at K = 37 columns for O = 1280, M = 8: 2x the time) */

typedef struct {
    const lyco_call *c;
    int64_t O, nb, b, nn, M, blk;   /* blk = nb·b·b floats per stage */
    cpu_cayley cy;
    float *Nm;          /* N − I (M·nb·b·b) */
    float *NmT;         /* its blocks transposed (the forward's broadcasts then run along a row) */
    float *rho;         /* ρ (O) or NULL */
    int64_t *idx;       /* idx[i·O + k·b + ν] = π_i^{-1}(k·b + ν) */
    int nt;
    float *gN, *grho;   /* the gradients of N − I and ρ (the runs' partials added) */
    int64_t tw;
    float *work;
    int64_t wsz;
    char **ptr;         /* per-thread row pointers of rot.h's calls (4·b) */
} boft_t;

static void boft_free(boft_t *s) {
    cpu_cayley_free(&s->cy);
    free(s->Nm);
    free(s->NmT);
    free(s->rho);
    free(s->idx);
    free(s->gN);
    free(s->grho);
    free(s->work);
    free(s->ptr);
}

static lyco_status boft_prepare(const lyco_call *c, boft_t *s, bool grads) {
    memset(s, 0, sizeof *s);
    lyco_dtype T = c->dt.compute;
    s->c = c;
    s->O = c->dims.O;
    s->nb = c->dims.nb;
    s->b = c->dims.bs;
    s->M = c->dims.stages;
    s->nn = s->b * s->b;
    s->blk = s->nb * s->nn;
    s->nt = cpu_threads();
    int64_t all = s->M * s->blk;
    float *B = malloc(sizeof(float) * (size_t)(all + 1));
    s->Nm = malloc(sizeof(float) * (size_t)(all + 1));
    s->NmT = malloc(sizeof(float) * (size_t)(all + 1));
    s->idx = malloc(sizeof(int64_t) * (size_t)(s->M * s->O + 1));
    if (!B || !s->Nm || !s->NmT || !s->idx) {
        free(B);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu boft: out of memory");
    }
    cpu_load_all(c->a->tensor[LYCO_OFT_BLOCKS], T, B);
    lyco_status st = cpu_cayley_fwd(&s->cy, B, s->M * s->nb, s->b, c->a->constraint);
    free(B);
    if (st) return st;
    float m = (float)c->m;
    for (int64_t i = 0; i < all; i++) s->Nm[i] = c->m == 1.0 ? s->cy.Rm1[i] : m * s->cy.Rm1[i];
    for (int64_t k = 0; k < s->M * s->nb; k++)
        for (int64_t a = 0; a < s->b; a++)
            for (int64_t q = 0; q < s->b; q++) s->NmT[k * s->nn + q * s->b + a] = s->Nm[k * s->nn + a * s->b + q];
    for (int64_t i = 0; i < s->M; i++) {
        int64_t h = ((int64_t)1 << i) * (s->b / 2);
        for (int64_t p = 0; p < s->O; p++) {   /* p = k·b + ν, a position of the permuted vector */
            int64_t ch = p / (2 * h), r = p % (2 * h), eta = r / 2, gamma = r % 2;
            s->idx[i * s->O + p] = ch * 2 * h + gamma * h + eta;
        }
    }
    if (c->a->tensor[LYCO_RESCALE]) {
        s->rho = malloc(sizeof(float) * (size_t)(s->O + 1));
        if (!s->rho) return lyco_fail(LYCO_ERR_NOMEM, "cpu boft: out of memory");
        cpu_load_all(c->a->tensor[LYCO_RESCALE], T, s->rho);
    }
    if (grads) {
        s->gN = calloc((size_t)all + 1, sizeof(float));
        s->grho = calloc((size_t)s->O + 1, sizeof(float));
        if (!s->gN || !s->grho) return lyco_fail(LYCO_ERR_NOMEM, "cpu boft: out of memory for gradient partials");
    }
    /* tile width: the buffers of one tile (forward 2·O rows in 2 MB, backward (M+3)·O rows in
       8 MB), at most 256 columns, a multiple of 32 from 64 on (rot.h's two-vector steps) */
    int64_t rows = grads ? (s->M + 3) * s->O : 2 * s->O;
    s->tw = (grads ? TILE_FLOATS_BWD : TILE_FLOATS) / rows;
    if (s->tw > 256) s->tw = 256;
    if (s->tw >= 64) s->tw &= ~(int64_t)31;
    if (s->tw < 4) s->tw = 4;
    s->wsz = rows * s->tw + 2 * s->b * s->tw + s->O;
    s->work = malloc(sizeof(float) * (size_t)s->nt * (size_t)s->wsz + 1);
    s->ptr = malloc(sizeof(char *) * (size_t)(4 * s->nt * s->b + 1));
    if (!s->work || !s->ptr) return lyco_fail(LYCO_ERR_NOMEM, "cpu boft: out of memory for tile buffers");
    return LYCO_OK;
}

static float rho_at(const boft_t *s, int64_t o) { return s->rho ? s->rho[o] : 1.0f; }

/* Gathers rows t of (A [+ B]) (each w wide) into V (b × w). (CPU_HOT: the ISA clones; as a
   baseline SSE loop the backward's gathers were ~15 % of its time) */
CPU_HOT
static void gather(const int64_t *t, int64_t b, int64_t w, const float *A, const float *B, float *V) {
    for (int64_t n = 0; n < b; n++) {
        const float *a = A + t[n] * w;
        float *v = V + n * w;
        if (B) {
            const float *bb = B + t[n] * w;
            for (int64_t j = 0; j < w; j++) v[j] = a[j] + bb[j];
        } else {
            memcpy(v, a, sizeof(float) * (size_t)w);
        }
    }
}

/* Rows t of D (each w wide) = rows t of Bs + Pᵀ·(rows t of S [+ rows t of D]) (rot.h, ADD) for a
   b×b block P: NmT's for N − I, Nm's for (N − I)ᵀ (the scalars of one output row then lie along
   P's column). Bs = NULL: D itself (D += …). With add (BOFT's X0 + Δ read from the rows it
   updates) the block runs in place, which needs b ≤ cpu_rot_rows_max(); past it V (b × w) holds
   the gathered sums. S = NULL: the input rows are V's, gathered by the caller. ptr: 4·b pointers. */
static void stage_block(const boft_t *s, const float *P, const int64_t *t, int64_t w, const float *S, bool add,
                        const float *Bs, float *D, float *V, char **ptr) {
    int64_t b = s->b;
    bool direct = S && (!add || b <= cpu_rot_rows_max());
    if (S && !direct) gather(t, b, w, S, D, V);
    if (!Bs) Bs = D;
    for (int64_t n = 0; n < b; n++) {
        ptr[n] = (char *)(direct ? S + t[n] * w : V + n * w);
        ptr[b + n] = (char *)(D + t[n] * w);
        ptr[2 * b + n] = (char *)(D + t[n] * w);
        ptr[3 * b + n] = (char *)(Bs + t[n] * w);
    }
    cpu_rot r = {.bs = b, .A = P, .ai = 1, .ak = b, .src = (const char *const *)ptr,
                 .sdt = LYCO_F32, .T = LYCO_F32, .add = direct && add ? (const float *const *)(ptr + b) : NULL,
                 .dst = ptr + 2 * b, .odt = LYCO_F32, .base = (const float *const *)(ptr + 3 * b), .mode = CPU_ROT_ADD};
    cpu_rot_rows(&r, w);
}

/* The stages that stay within chunks of rows: stage i's blocks lie in runs of 2^i·b rows, so
   stages 0…lo−1 can run chunk by chunk over b·2^(lo−1) rows (2^(lo−1) blocks) — a chunk's rows
   of the arrays the stages touch (arrays of them: forward X0 and Δ; backward GY, ΔG and X_i of
   the chunked stages) then stay in L2 across those stages instead of streaming the whole tile per
   stage. The largest lo whose chunk fits CHUNK_BYTES (and whose block count divides nb). */
static int64_t chunk_stages(const boft_t *s, int64_t w, int64_t arrays) {
    int64_t lo = 1;
    while (lo < s->M && s->nb % ((int64_t)1 << lo) == 0 && (s->b << lo) * w * arrays * (int64_t)sizeof(float) <= CHUNK_BYTES)
        lo++;
    return lo;
}

/* The forward's output rows in place on Δ (O rows of w): ρ·Δ + (ρ − 1)·X0 (delta), else
   ρ·(X0 + Δ); ρ = 1 without rho. (CPU_HOT: the ISA clones — as a baseline SSE loop it was ~4 % of
   a merge forward; fp-contract off, so the products and the sum round separately in every clone,
   as the baseline build, without FMA, always did: the same bits.) */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
CPU_HOT
static void rho_rows(const float *rho, int64_t O, int64_t w, const float *X0, float *Dl, bool delta) {
    for (int64_t o = 0; o < O; o++) {
        float p = rho ? rho[o] : 1.0f, p1 = p - 1.0f, *d = Dl + o * w;
        const float *x = X0 + o * w;
        if (delta)
            for (int64_t j = 0; j < w; j++) d[j] = p * d[j] + p1 * x[j];
        else
            for (int64_t j = 0; j < w; j++) d[j] = p * (x[j] + d[j]);
    }
}
#pragma GCC pop_options

/* The next tile's rows fetched towards L2 while this tile's stages run (merge and conv tiles: a
   row's w columns are a short run 2 KB+ from the next, which the hardware prefetchers picked up
   late — the loads and stores of a tile were ~17 % of a cold merge at 1 thread). A few rows after
   each block of the last stage to run (per = ⌈O / nb⌉; spread over all stages instead: the same
   time), the input rows for reading (two tensors: the backward's), the output rows for writing;
   linear tiles (one contiguous run) and strided views: nothing. */
typedef struct {
    const cpu_oft_io *in, *in2, *out;   /* NULL: none */
    int64_t j0, w, row, per;
} tile_ahead;

static void ahead_rows(const cpu_oft_io *io, int64_t r0, int64_t r1, int64_t j0, int64_t w, int rw) {
    for (int64_t r = r0; r < r1; r++) {
        const char *p = cpu_oft_row(io, r, j0);
        if (!p) return;
        for (int64_t off = 0; off < w * (int64_t)io->v.es; off += 64) {
            if (rw) __builtin_prefetch(p + off, 1, 2);
            else __builtin_prefetch(p + off, 0, 2);
        }
    }
}

static void ahead_step(tile_ahead *a) {
    if (!a->in || a->row >= a->in->O) return;
    int64_t r1 = a->row + a->per < a->in->O ? a->row + a->per : a->in->O;
    ahead_rows(a->in, a->row, r1, a->j0, a->w, 0);
    if (a->in2) ahead_rows(a->in2, a->row, r1, a->j0, a->w, 0);
    if (a->out) ahead_rows(a->out, a->row, r1, a->j0, a->w, 1);
    a->row = r1;
}

/* Δ after all M stages (Δ_{i+1} = Δ_i + (N − I)·(X0 + Δ_i) per block): stages 0…lo−1 chunk by
   chunk, the rest over the whole tile. Every row's sums are those of the stage-by-stage order
   (a stage's blocks are independent; a chunk holds all its rows' inputs): the same bits. */
static void forward_stages(const boft_t *s, const float *X0, float *Dl, int64_t w, float *V, char **ptr, tile_ahead *a) {
    int64_t O = s->O, b = s->b, lo = chunk_stages(s, w, 2), kc = (int64_t)1 << (lo - 1);
    for (int64_t c0 = 0; c0 < s->nb; c0 += kc)
        for (int64_t i = 0; i < lo; i++)
            for (int64_t k = c0; k < c0 + kc; k++) {
                stage_block(s, s->NmT + i * s->blk + k * s->nn, s->idx + i * O + k * b, w, X0, true, NULL, Dl, V, ptr);
                if (i == s->M - 1) ahead_step(a);
            }
    for (int64_t i = lo; i < s->M; i++)
        for (int64_t k = 0; k < s->nb; k++) {
            stage_block(s, s->NmT + i * s->blk + k * s->nn, s->idx + i * O + k * b, w, X0, true, NULL, Dl, V, ptr);
            if (i == s->M - 1) ahead_step(a);
        }
}

/* dst = rows(src) (delta: rows(src) − src) */
static void boft_forward(boft_t *s, const DLTensor *src, DLTensor *dst, bool delta) {
    const lyco_call *c = s->c;
    lyco_dtype T = c->dt.compute;
    cpu_oft_io in, out;
    cpu_oft_io_init(&in, c, src);
    cpu_oft_io_init(&out, c, dst);
    int64_t O = s->O, b = s->b, tw = s->tw, total = cpu_oft_ntiles(&in, tw);
    if (in.kind != CPU_OFT_CONV && total % s->nt) {
        /* a whole number of tiles per thread (1280 columns: 7 of 192 → 8 of 160); the forward's
           values do not depend on the tiling (every column's sums are its own) */
        int64_t want = (total + s->nt - 1) / s->nt * s->nt, w2 = (in.n + want - 1) / want;
        if (w2 >= 64) w2 = (w2 + 31) & ~(int64_t)31;
        if (w2 >= 4 && w2 <= tw) {
            tw = w2;
            total = cpu_oft_ntiles(&in, tw);
        }
    }
#pragma omp parallel for schedule(static)
    for (int64_t tile = 0; tile < total; tile++) {
        float *X0 = s->work + (size_t)cpu_thread_id() * (size_t)s->wsz, *Dl = X0 + O * tw, *V = Dl + O * tw, *tmp = V + 2 * b * tw;
        char **ptr = s->ptr + (size_t)cpu_thread_id() * (size_t)(4 * b);
        int64_t j0, w;
        cpu_oft_tile(&in, tw, tile, &j0, &w);
        cpu_oft_load(&in, 0, O, j0, w, T, X0, tmp);
        memset(Dl, 0, sizeof(float) * (size_t)(O * w));
        tile_ahead a = {0};
        if (tile + 1 < total && in.kind != CPU_OFT_LINEAR) {   /* the next tile (static schedule: this thread's, bar its last) */
            a = (tile_ahead){&in, NULL, out.v.base != in.v.base ? &out : NULL, 0, 0, 0, (O + s->nb - 1) / s->nb};
            cpu_oft_tile(&in, tw, tile + 1, &a.j0, &a.w);
        }
        forward_stages(s, X0, Dl, w, V, ptr, &a);
        for (int64_t o0 = 0; o0 < O; o0 += EPI_ROWS) {   /* each group stored while in L1 */
            int64_t nr = O - o0 < EPI_ROWS ? O - o0 : EPI_ROWS;
            rho_rows(s->rho ? s->rho + o0 : NULL, nr, w, X0 + o0 * w, Dl + o0 * w, delta);
            cpu_oft_store(&out, o0, nr, j0, w, Dl + o0 * w, tmp);
        }
    }
}

/* One backward tile's buffers (boft_backward): the M + 1 stage inputs Xs (O × w each), GY, ΔG,
   two b × w panels, the run's gN partial, the thread's row pointers. */
typedef struct {
    float *Xs, *GY, *DG, *V, *U, *gN;
    char **ptr;
    int64_t w;
    bool want_b;
} bwd_tile;

/* The replay of stage i's block k: X_{i+1}[t] = X_i[t] + (N − I)·X_i[t] */
static void replay_block(const boft_t *s, bwd_tile *q, int64_t i, int64_t k) {
    float *Xi = q->Xs + i * s->O * q->w;
    stage_block(s, s->NmT + i * s->blk + k * s->nn, s->idx + i * s->O + k * s->b, q->w, Xi, false, Xi, Xi + s->O * q->w,
                q->V, q->ptr);
}

/* Stage i's block k backwards: Ĝ = (GY + ΔG)[t], G_N += Ĝ·X_i[t]ᵀ, ΔG[t] += (N − I)ᵀ·Ĝ */
static void reverse_block(const boft_t *s, bwd_tile *q, int64_t i, int64_t k) {
    int64_t b = s->b, w = q->w;
    const int64_t *t = s->idx + i * s->O + k * b;
    gather(t, b, w, q->GY, q->DG, q->V);
    if (q->want_b) {   /* G_N += Ĝ·Ŵᵀ: X_i's rows in place (rot.h), else gathered for cpu_gemm_nt */
        const float **ar = (const float **)q->ptr, **br = ar + b, *Xi = q->Xs + i * s->O * w;
        float *gN = q->gN + i * s->blk + k * s->nn;
        for (int64_t n = 0; n < b; n++) {
            ar[n] = q->V + n * w;
            br[n] = Xi + t[n] * w;
        }
        if (!cpu_rot_gn(b, ar, br, w, gN)) {
            gather(t, b, w, Xi, NULL, q->U);
            cpu_gemm_nt(b, b, w, q->V, w, q->U, w, gN, b, true);
        }
    }
    stage_block(s, s->Nm + i * s->blk + k * s->nn, t, w, NULL, false, NULL, q->DG, q->V, q->ptr);
}

static lyco_status boft_backward(boft_t *s, const DLTensor *Xt, const DLTensor *GYt, DLTensor *GXt, bool delta) {
    const lyco_call *c = s->c;
    lyco_dtype T = c->dt.compute;
    bool want_rho = s->rho && lyco_call_wants(c, LYCO_RESCALE), want_b = lyco_call_wants(c, LYCO_OFT_BLOCKS);
    cpu_oft_io xin, gin, gout;
    cpu_oft_io_init(&xin, c, Xt);
    cpu_oft_io_init(&gin, c, GYt);
    if (GXt) cpu_oft_io_init(&gout, c, GXt);
    int64_t O = s->O, b = s->b, tw = s->tw, Mst = s->M, all = Mst * s->blk, total = cpu_oft_ntiles(&xin, tw);
    /* the gradients' partials per fixed run of tiles (cpu.h: runs from the shape only), added in run
       order: independent of the thread count (per-thread partials were not: 7 rows of the full tier
       differed between 1 and 3 threads at every ISA level) */
    bool need_x = want_rho || want_b;
    int64_t slot = all + O, cap = CPU_RUN_FLOATS / slot;
    int R = cpu_runs(total, CPU_RUNS_BIG < cap ? CPU_RUNS_BIG : (cap > 0 ? cap : 1));
    float *part = calloc((size_t)(R * slot) + 1, sizeof(float));
    if (!part) return lyco_fail(LYCO_ERR_NOMEM, "cpu boft: out of memory for gradient partials");
#pragma omp parallel for schedule(static)
    for (int64_t u = 0; u < R; u++)
    for (int64_t tile = cpu_run_start(total, R, (int)u); tile < cpu_run_start(total, R, (int)u + 1); tile++) {
        int tid = cpu_thread_id();
        float *Xs = s->work + (size_t)tid * (size_t)s->wsz;      /* (M+1) stage inputs, O × w each */
        float *GY = Xs + (Mst + 1) * O * tw, *DG = GY + O * tw, *V = DG + O * tw, *U = V + b * tw, *tmp = U + b * tw;
        char **ptr = s->ptr + (size_t)tid * (size_t)(4 * b);
        float *gN = part + u * slot, *grho = gN + all;
        int64_t j0, w;
        cpu_oft_tile(&xin, tw, tile, &j0, &w);
        tile_ahead a = {0};
        if (tile + 1 < total && xin.kind != CPU_OFT_LINEAR) {   /* the next tile (static over runs: mostly this thread's) */
            a = (tile_ahead){&gin, need_x ? &xin : NULL, NULL, 0, 0, 0, (O + s->nb - 1) / s->nb};
            cpu_oft_tile(&xin, tw, tile + 1, &a.j0, &a.w);
        }
        int64_t Ow = O * w;
        cpu_oft_load(&gin, 0, O, j0, w, T, GY, tmp);
        bwd_tile q = {Xs, GY, DG, V, U, gN, ptr, w, want_b};
        int64_t lo = chunk_stages(s, w, BWD_CHUNK_ARRAYS), kc = (int64_t)1 << (lo - 1);
        if (need_x) {   /* stages 0…lo−1 chunk by chunk, then the rest (chunk_stages: the same values) */
            cpu_oft_load(&xin, 0, O, j0, w, T, Xs, tmp);
            for (int64_t c0 = 0; c0 < s->nb; c0 += kc)
                for (int64_t i = 0; i < lo; i++)
                    for (int64_t k = c0; k < c0 + kc; k++) replay_block(s, &q, i, k);
            for (int64_t i = lo; i < Mst; i++)
                for (int64_t k = 0; k < s->nb; k++) replay_block(s, &q, i, k);
        }
        if (want_rho) {
            const float *XM = Xs + Mst * Ow;
            for (int64_t o = 0; o < O; o++) {
                float acc = 0.0f;
                for (int64_t j = 0; j < w; j++) acc += GY[o * w + j] * XM[o * w + j];
                grho[o] += acc;
            }
        }
        /* G = GY + DG, starting from ρ ⊙ GY */
        for (int64_t o = 0; o < O; o++) {
            float p1 = rho_at(s, o) - 1.0f;
            for (int64_t j = 0; j < w; j++) DG[o * w + j] = p1 * GY[o * w + j];
        }
        for (int64_t i = Mst - 1; i >= lo; i--)   /* stages M−1…lo, then lo−1…0 chunk by chunk */
            for (int64_t k = 0; k < s->nb; k++) reverse_block(s, &q, i, k);
        for (int64_t c0 = 0; c0 < s->nb; c0 += kc)
            for (int64_t i = lo - 1; i >= 0; i--)
                for (int64_t k = c0; k < c0 + kc; k++) {
                    reverse_block(s, &q, i, k);
                    if (i == 0) ahead_step(&a);
                }
        if (GXt) {
            if (!delta)
                for (int64_t n = 0; n < Ow; n++) DG[n] += GY[n];
            cpu_oft_store(&gout, 0, O, j0, w, DG, tmp);
        }
    }
    for (int64_t u = 0; u < R; u++) {
        for (int64_t i = 0; i < all; i++) s->gN[i] += part[u * slot + i];
        for (int64_t o = 0; o < O; o++) s->grho[o] += part[u * slot + all + o];
    }
    free(part);
    if (want_rho) cpu_store_all(c->g->grad[LYCO_RESCALE], s->grho);
    if (want_b) {
        float m = (float)c->m;
        for (int64_t i = 0; i < all; i++) s->gN[i] *= m;
        float *GB = malloc(sizeof(float) * (size_t)(all + 1));
        if (!GB) return lyco_fail(LYCO_ERR_NOMEM, "cpu boft: out of memory");
        lyco_status st = cpu_cayley_bwd(&s->cy, s->gN, GB);
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
    if (!row) return lyco_fail(LYCO_ERR_NOMEM, "cpu boft: out of memory");
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

/* Module dropped: the butterfly is the identity (W'' = W, y = y0), gradients are 0. */
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

lyco_status cpu_boft(const lyco_call *c, char *why, size_t why_len) {
    (void)why;
    (void)why_len;
    if (c->dropped) return run_dropped(c);
    bool grads = c->dir == LYCO_DIR_MERGE_BWD || c->dir == LYCO_DIR_BYPASS_BWD;
    boft_t s;
    lyco_status st = boft_prepare(c, &s, grads);
    if (st == LYCO_OK) {
        bool delta_only = c->bypass && (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY);
        switch (c->dir) {
        case LYCO_DIR_MERGE_FWD: boft_forward(&s, c->merge->weight, c->out, c->merge->mode == LYCO_MERGE_DELTA); break;
        case LYCO_DIR_MERGE_BWD: st = boft_backward(&s, c->merge->weight, c->d_out, NULL, false); break;
        case LYCO_DIR_BYPASS_FWD: boft_forward(&s, c->bypass->y0, c->y, delta_only); break;
        default:
            if (c->dx) st = copy_or_zero(c->dx, NULL, LYCO_F32);
            if (!st) st = boft_backward(&s, c->bypass->y0, c->dy, c->dy0, delta_only);
            break;
        }
    }
    boft_free(&s);
    return st;
}
