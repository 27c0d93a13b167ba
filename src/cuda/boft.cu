/*
 * boft.cu — BOFT (ALGORITHMS.md §2.5) on the GPU, all four directions; semantics and roundings of
 * the fused CPU kernels (src/cpu/boft.c). The butterfly of M block-diagonal rotations acts on the
 * O channel rows of X (merge: W̄; bypass: y0 with channels as rows; kern_oft.h).
 *
 * Once per call (oft.cuh): R_{i,k} = Cayley(B_{i,k} − B_{i,k}ᵀ) for all M·nb blocks (one norm
 * constraint over the whole tensor), N − I = m·(R − I); the stage index table
 * tab[i·O + p] = π_i^{-1}(p) (h = 2^i·⌊b/2⌋, p = c·2h + 2η + γ comes from row c·2h + γ·h + η).
 * Stage i, block k (ν, μ < b, t_ν = tab[i·O + k·b + ν]):
 *   X_{i+1}[t_μ] = X_i[t_μ] + Σ_ν (N − I)_{i,k}[μ, ν]·X_i[t_ν]
 * forward (delta form, as the CPU): Δ_{i+1}[t] = Δ_i[t] + (N − I)·(X_0 + Δ_i)[t];
 *   Y = ρ ⊙ (X_0 + Δ_M)  or, delta, ρ ⊙ Δ_M + (ρ − 1) ⊙ X_0.
 * backward (GY = ∂L/∂Y; G tracked as GY + ΔG, ΔG starting at (ρ − 1) ⊙ GY):
 *   G_ρ[o] = Σ_j GY·X_M;  stages in reverse: Ĝ = G[t], Ŵ = X_i[t]:  G_N_{i,k} += Ĝ·Ŵᵀ,
 *   ΔG[t] += (N − I)ᵀ·Ĝ;  then G_R = m·G_N and the Cayley adjoint; GX = ΔG (+ GY unless delta).
 *
 * STAGE-GROUP KERNELS (the default; boft_group.cu): several stages per launch in shared memory
 * for block sizes 2, 4, 8, 16, 32, 64 (see that file). The kernels below run what they do not
 * take (b 6, 10, …), and everything when LYCO_CUDA_BOFT_STAGEWISE=1 (A/B runs).
 *
 * STAGE-PER-LAUNCH KERNELS (k_bs_*; the fallback). Columns are independent, so the columns go in
 * chunks of CC (a multiple of BS_CT = 64) held as fp32 [O][CC] scratch buffers, and each stage is
 * ONE launch over the chunk (the launch boundary is the grid-wide barrier the stage's gather
 * needs). A CUDA block of a stage owns (block k: b rows t_0..t_{b−1}) × (64 columns): it gathers
 * the b rows (coalesced 64-float row segments, x = A + D), holds N_{i,k} − I (or its transpose)
 * in shared memory, computes its b × 64 outputs with fp32 fmaf in registers (8 warps × up to 8
 * rows, 2 columns per lane; per output the same κ-ordered fmaf chain and roundings as the legacy
 * kernels and the CPU path) and writes them to the other ping-pong buffer.
 *   forward, per chunk: k_bs_load (X → X_0, rounded to the compute dtype; transposed through
 *     shared memory when X is channel-fast), M stage launches Δ_{i+1} = Δ_i + (N − I)(X_0 + Δ_i),
 *     k_bs_store (ρ / delta epilogue, output rounding); when X / Y have contiguous columns (merge)
 *     the load is fused into stage 0 and the epilogue into stage M − 1 (bs_io), saving two
 *     launches and two passes per chunk. CC: 3·O·CC floats ≤ 6M (24 MB, L2-resident).
 *   backward, per chunk: load GY (and ΔG = (ρ − 1)·GY) and X_0; M plain stages storing every X_i
 *     (the CPU backward's X_{i+1} = X_i + (N − I)X_i); k_bs_rho (G_ρ partial per row from X_M, one
 *     warp per row, fixed shuffle tree); M transposed stages in reverse ΔG ← ΔG + (N − I)ᵀ(GY + ΔG)
 *     that also write the block-gradient partial Ĝ·Ŵᵀ of their 64 columns (Ŵ = X_i[t] from the
 *     stored stage input); k_bs_store (GX); k_bs_gn (partials summed over the chunk's column
 *     tiles in double, across chunks in chunk order). CC: the chunk scratch within 16M floats.
 *   Expected (H200, 4096², b 32, M 4, bf16): a stage launch moves ~3 chunk buffers through L2 and
 *   does 2·b·O·CC flops (≈ 3–5 µs at CC 512); merge fwd ≈ 8 chunks × 6 launches ≈ 0.2–0.3 ms
 *   plus the Cayley transform (was 7.97 ms), merge bwd ≈ 11 chunks × 13 launches ≈ 0.5–0.8 ms
 *   (was 19.8 ms), bypass (8192 columns) about twice those.
 *   Extra memory: table M·O ints; forward 3·O·CC floats; backward (3 + M + 1)·O·CC floats (X_i
 *   only when ∂L/∂B or ∂L/∂ρ is wanted), M·nb·b²·CC/64 partial floats, nch·O G_ρ partials,
 *   M·nb·b² doubles + floats; all stream-ordered, ≤ ~64 MB of chunk scratch.
 *   Deterministic, no atomics. LYCO_CUDA_BOFT_LEGACY=1 selects the legacy kernels below (A/B).
 *
 * LEGACY KERNELS (k_boft_fwd / k_boft_bwd / k_boft_gn).
 * Tiling: a tile is all O rows × tw columns, held in fp32 buffers of O × (tw + 1) floats (forward
 * X_0, Δ, U; backward X_i, U, GY, ΔG); every stage of the tile runs in place there (U holds a
 * stage's products between two barriers, since a stage's blocks gather rows that others write).
 * The buffers are dynamic shared memory (tw up to 32 within the device's opt-in limit) or, when
 * O is too large for even one column, a global scratch slice per CUDA block (tw = 8).
 * Forward: one kernel, G CUDA blocks walking the column tiles (tile = blockIdx.x + n·G).
 * Backward, per column chunk of CC columns (CC a multiple of tw, 2·M·O·CC ≤ 32M floats):
 *   k_boft_bwd (one kernel for all M stages): per tile a forward sweep X_{i+1} = X_i + (N − I)·X_i
 *   (the CPU backward's form) that stores each stage's gathered input Ŵ_i, G_ρ from X_M, then the
 *   backward sweep that stores each stage's gathered Ĝ_i and updates ΔG, then GX. Ŵ_i / Ĝ_i go
 *   to a chunk-sized staging area rather than being replayed: G_N is a reduction over all
 *   columns, and with O rows per tile (tw is 1–3 columns at O = 4096) accumulating it per tile
 *   would read-modify-write M·nb·b² partials per few columns;
 *   k_boft_gn: one CUDA block per (i, k) contracts the chunk's Ŵ_i, Ĝ_i blocks (b×b entries,
 *   fp32 steps of 32 columns summed in double, across chunks in chunk order).
 *   G_ρ: one partial row per (chunk, CUDA block), summed in order (oft_sum_rho). Deterministic,
 *   no atomics.
 * Work per thread: outputs (p, c) with c fastest (broadcast reads of N and the table).
 * Extra memory: Cayley state (oft.cuh), M·O ints (table); backward 2·M·O·CC floats of staging,
 * M·nb·b² doubles + floats, chunks·S·O floats of G_ρ partials; global-buffer path
 * G·nbuf·O·(tw + 1) floats.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/boft_group.cuh"

#define BTW_MAX 32       /* max columns per tile (shared buffers) */
#define BTW_GLOBAL 8     /* columns per tile with global buffers */

typedef struct {
    lk_oft_args a;
    const float *Nm;     /* N − I, M·nb·b·b */
    const int *tab;      /* M·O stage index table */
    i64 tw, ld, ntc;     /* columns per tile, buffer pitch (tw + 1), column tiles */
    float *gbuf;         /* global buffers (NULL: dynamic shared memory) */
    i64 bufsz;           /* floats of one block's buffers */
} boft_k;

__global__ __launch_bounds__(NT) void k_boft_tab(int *tab, i64 M, i64 O, i64 b) {
    const i64 tot = M * O;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < tot; idx += (i64)gridDim.x * NT) {
        const i64 i = idx / O, p = idx % O, h = ((i64)1 << i) * (b / 2);
        const i64 ch = p / (2 * h), r = p % (2 * h);
        tab[idx] = (int)(ch * 2 * h + (r % 2) * h + r / 2);
    }
}

/* buf[o][c] = RN_CT(v(o, j0 + c)) for all O rows, c < w */
__device__ void btile_in(float *buf, const boft_k &P, const lk_rows &v, i64 j0, int w) {
    const i64 O = P.a.O, n = O * w;
    const bool chfast = v.sc == 1;
    for (i64 idx = threadIdx.x; idx < n; idx += NT) {
        const i64 o = chfast ? idx % O : idx / w;
        const int c = (int)(chfast ? idx / O : idx % w);
        buf[o * P.ld + c] = round_to(rows_load(v, o, j0 + c), P.a.ct);
    }
}

/* Stage i on the tile: Xd[t] += (N − I)·(Xa + Xd)[t] per block (Xa NULL: Xd[t] += (N − I)·Xd[t]).
   Ends synchronised. */
__device__ void bstage(const boft_k &P, i64 i, const float *Xa, float *Xd, float *U, int w) {
    const i64 O = P.a.O, b = P.a.bs, nn = b * b, n = O * w, ld = P.ld;
    const float *N = P.Nm + i * P.a.nb * nn;
    const int *tb = P.tab + i * O;
    for (i64 idx = threadIdx.x; idx < n; idx += NT) {
        const i64 p = idx / w, k = p / b, mu = p % b;
        const int c = (int)(idx % w);
        const float *Nr = N + k * nn + mu * b;
        const int *tk = tb + k * b;
        float acc = 0.0f;
        for (i64 nu = 0; nu < b; nu++) {
            const i64 t = tk[nu];
            const float x = Xa ? Xa[t * ld + c] + Xd[t * ld + c] : Xd[t * ld + c];
            acc = fmaf(Nr[nu], x, acc);
        }
        U[p * ld + c] = acc;
    }
    __syncthreads();
    for (i64 idx = threadIdx.x; idx < n; idx += NT) {
        const i64 p = idx / w;
        const int c = (int)(idx % w);
        Xd[(i64)tb[p] * ld + c] += U[p * ld + c];
    }
    __syncthreads();
}

__device__ __forceinline__ float *bbufs(const boft_k &P, float *sm) { return P.gbuf ? P.gbuf + (i64)blockIdx.x * P.bufsz : sm; }

__global__ __launch_bounds__(NT) void k_boft_fwd(boft_k P) {
    extern __shared__ float sm[];
    const lk_oft_args &a = P.a;
    const i64 O = a.O, ld = P.ld, OL = O * ld;
    float *X0 = bbufs(P, sm), *D = X0 + OL, *U = D + OL;
    for (i64 tile = blockIdx.x; tile < P.ntc; tile += gridDim.x) {
        const i64 j0 = tile * P.tw;
        const int w = (int)(a.ncol - j0 < P.tw ? a.ncol - j0 : P.tw);
        btile_in(X0, P, a.X, j0, w);
        for (i64 idx = threadIdx.x; idx < OL; idx += NT) D[idx] = 0.0f;
        __syncthreads();
        for (i64 i = 0; i < a.M; i++) bstage(P, i, X0, D, U, w);
        const bool chfast = a.Y.sc == 1;
        for (i64 idx = threadIdx.x; idx < O * w; idx += NT) {
            const i64 o = chfast ? idx % O : idx / w;
            const int c = (int)(chfast ? idx / O : idx % w);
            const float pr = rho_ct(a.rho, o, a.ct), x = X0[o * ld + c], d = D[o * ld + c];
            rows_store(a.Y, o, j0 + c, a.delta ? fmaf(pr, d, (pr - 1.0f) * x) : pr * (x + d));
        }
        __syncthreads();
    }
}

/* Backward pass over the column tiles of one chunk [c0, c0 + cn) (grid S; block s takes tiles
   s, s + S, …). Per tile: the forward sweep X_{i+1} = X_i + (N − I)·X_i from X_0, storing each
   stage's gathered input Ŵ_i into Wst (want_b); G_ρ from X_M; the backward sweep storing each
   stage's gathered Ĝ_i into Gst (want_b) and updating ΔG; GX. Wst / Gst: [M][O][CC] floats, row
   p = k·b + ν of stage i, column = tile column − c0. rpart: S × O, block s owns row s. */
__global__ __launch_bounds__(NT) void k_boft_bwd(boft_k P, i64 c0, i64 cn, i64 CC, int want_b, int want_rho, float *Wst,
                                                 float *Gst, float *rpart) {
    extern __shared__ float sm[];
    const lk_oft_args &a = P.a;
    const i64 O = a.O, b = a.bs, nn = b * b, ld = P.ld, OL = O * ld, blk = a.nb * nn, s = blockIdx.x;
    float *Xi = bbufs(P, sm), *U = Xi + OL, *GY = U + OL, *DG = GY + OL;
    float *rp = rpart + s * O;
    const bool need_x = want_b || want_rho, want_gx = a.GX.p != NULL;
    const i64 ntile = cdiv(cn, P.tw);
    if (want_rho)
        for (i64 o = threadIdx.x; o < O; o += NT) rp[o] = 0.0f;
    for (i64 tile = s; tile < ntile; tile += gridDim.x) {
        const i64 jc = tile * P.tw, j0 = c0 + jc;
        const int w = (int)(cn - jc < P.tw ? cn - jc : P.tw);
        btile_in(GY, P, a.GY, j0, w);
        if (need_x) btile_in(Xi, P, a.X, j0, w);
        __syncthreads();
        if (need_x)
            for (i64 i = 0; i < a.M; i++) {
                if (want_b) {
                    const int *tb = P.tab + i * O;
                    float *dst = Wst + i * O * CC + jc;
                    for (i64 idx = threadIdx.x; idx < O * w; idx += NT) {
                        const i64 p = idx / w;
                        const int c = (int)(idx % w);
                        dst[p * CC + c] = Xi[(i64)tb[p] * ld + c];
                    }
                }
                bstage(P, i, NULL, Xi, U, w);
            }
        if (want_rho)   /* G_ρ[o] += Σ_c GY·X_M */
            for (i64 o = threadIdx.x; o < O; o += NT) {
                float acc = 0.0f;
                for (int c = 0; c < w; c++) acc = fmaf(GY[o * ld + c], Xi[o * ld + c], acc);
                rp[o] += acc;
            }
        for (i64 idx = threadIdx.x; idx < O * w; idx += NT) {
            const i64 o = idx / w;
            const int c = (int)(idx % w);
            DG[o * ld + c] = (rho_ct(a.rho, o, a.ct) - 1.0f) * GY[o * ld + c];
        }
        __syncthreads();
        for (i64 i = a.M - 1; i >= 0; i--) {
            const int *tb = P.tab + i * O;
            const float *N = P.Nm + i * blk;
            if (want_b) {   /* Ĝ_i[p] = G[t_p] */
                float *dst = Gst + i * O * CC + jc;
                for (i64 idx = threadIdx.x; idx < O * w; idx += NT) {
                    const i64 p = idx / w, t = tb[p];
                    const int c = (int)(idx % w);
                    dst[p * CC + c] = GY[t * ld + c] + DG[t * ld + c];
                }
            }
            /* U[k·b + ν] = Σ_μ (N − I)[μ][ν]·Ĝ[μ] */
            for (i64 idx = threadIdx.x; idx < O * w; idx += NT) {
                const i64 p = idx / w, k = p / b, nu = p % b;
                const int c = (int)(idx % w);
                const float *Nc = N + k * nn + nu;
                const int *tk = tb + k * b;
                float acc = 0.0f;
                for (i64 mu = 0; mu < b; mu++) {
                    const i64 t = tk[mu];
                    acc = fmaf(Nc[mu * b], GY[t * ld + c] + DG[t * ld + c], acc);
                }
                U[p * ld + c] = acc;
            }
            __syncthreads();
            for (i64 idx = threadIdx.x; idx < O * w; idx += NT) {
                const i64 p = idx / w;
                const int c = (int)(idx % w);
                DG[(i64)tb[p] * ld + c] += U[p * ld + c];
            }
            __syncthreads();
        }
        if (want_gx) {
            const bool chfast = a.GX.sc == 1;
            for (i64 idx = threadIdx.x; idx < O * w; idx += NT) {
                const i64 o = chfast ? idx % O : idx / w;
                const int c = (int)(chfast ? idx / O : idx % w);
                const float g = DG[o * ld + c];
                rows_store(a.GX, o, j0 + c, a.delta ? g : g + GY[o * ld + c]);
            }
        }
        __syncthreads();
    }
}

#define GNC 32   /* columns per step of the G_N contraction */

/* G_N_{i,k}[μ][ν] += Σ_{c < cn} Ĝ_i[k·b + μ][c]·Ŵ_i[k·b + ν][c] for one chunk; one CUDA block per
   (i, k), entries e = μ·b + ν (≤ 16 per thread), fp32 steps of GNC columns summed in double across
   steps and chunks (GNd; first: assigned). last: GR = m·(float)GNd. */
__global__ __launch_bounds__(NT) void k_boft_gn(const float *Wst, const float *Gst, i64 CC, i64 cn, i64 O, i64 b, i64 nb,
                                                int first, int last, float m, double *GNd, float *GR) {
    __shared__ float Gs[LK_OFT_MAX_BS * (GNC + 1)], Ws[LK_OFT_MAX_BS * (GNC + 1)];
    const i64 ik = blockIdx.x, i = ik / nb, k = ik % nb, nn = b * b;
    const float *Gr = Gst + (i * O + k * b) * CC, *Wr = Wst + (i * O + k * b) * CC;
    double acc[LK_OFT_MAX_BS * LK_OFT_MAX_BS / NT];
#pragma unroll
    for (int r = 0; r < LK_OFT_MAX_BS * LK_OFT_MAX_BS / NT; r++) acc[r] = 0.0;
    for (i64 c0 = 0; c0 < cn; c0 += GNC) {
        const int w = (int)(cn - c0 < GNC ? cn - c0 : GNC);
        for (i64 idx = threadIdx.x; idx < b * GNC; idx += NT) {
            const i64 r = idx / GNC;
            const int c = (int)(idx % GNC);
            Gs[r * (GNC + 1) + c] = c < w ? Gr[r * CC + c0 + c] : 0.0f;
            Ws[r * (GNC + 1) + c] = c < w ? Wr[r * CC + c0 + c] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < LK_OFT_MAX_BS * LK_OFT_MAX_BS / NT; r++) {
            const i64 e = threadIdx.x + (i64)r * NT;
            if (e >= nn) continue;
            const i64 mu = e / b, nu = e % b;
            float part = 0.0f;
            for (int c = 0; c < w; c++) part = fmaf(Gs[mu * (GNC + 1) + c], Ws[nu * (GNC + 1) + c], part);
            acc[r] += (double)part;
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < LK_OFT_MAX_BS * LK_OFT_MAX_BS / NT; r++) {
        const i64 e = threadIdx.x + (i64)r * NT;
        if (e >= nn) continue;
        const i64 g = ik * nn + e;
        const double v = (first ? 0.0 : GNd[g]) + acc[r];
        GNd[g] = v;
        if (last) GR[g] = m * (float)v;
    }
}

/* Tile width, buffer placement and grid for nbuf buffers of O rows. */
static void boft_tiles(boft_k *P, const lk_device *dev, int nbuf, i64 *grid, int *smem) {
    const i64 O = P->a.O;
    const i64 budget = (dev->smem_optin > 0 ? dev->smem_optin : 48 * 1024) - 1024;
    i64 tw = budget / ((i64)nbuf * 4 * O) - 1;
    if (tw > BTW_MAX) tw = BTW_MAX;
    P->gbuf = NULL;
    if (tw >= 1) {
        if (tw > P->a.ncol && P->a.ncol > 0) tw = P->a.ncol;
        P->tw = tw;
        P->ld = tw + 1;
        *smem = (int)(nbuf * 4 * O * P->ld);
    } else {
        P->tw = BTW_GLOBAL;
        P->ld = BTW_GLOBAL + 1;
        *smem = 0;
    }
    P->bufsz = nbuf * O * P->ld;
    P->ntc = cdiv(P->a.ncol, P->tw);
    i64 g = 2 * (i64)(dev->sms > 0 ? dev->sms : 1);
    if (g > P->ntc) g = P->ntc;
    if (*smem == 0 && g > (64 << 20) / P->bufsz) g = (64 << 20) / P->bufsz;
    if (g < 1) g = 1;
    *grid = g;
}

static int boft_check(const lk_oft_args *a) {
    if (a->bs < 2 || a->bs > LK_OFT_MAX_BS || a->nb < 1 || a->M < 1 || a->M > 30 || a->O != a->nb * a->bs ||
        a->M * a->O > 0x7fffffff || ((i64)1 << (a->M - 1)) * (a->bs / 2) * 2 > a->O)
        return lyco_fail(LYCO_ERR_BACKEND, "cuda boft: %lld stages of %lld blocks of %lld outside the kernels' range",
                         (long long)a->M, (long long)a->nb, (long long)a->bs);
    return LYCO_OK;
}

static size_t boft_tab_bytes(const lk_oft_args *a) { return (sizeof(int) * (size_t)(a->M * a->O) + 255) / 256 * 256; }

/* One allocation *mem: the stage index table (M·O ints, padded to 256 bytes) then `extra` bytes;
   launches the kernel that fills the table. */
static int boft_table(const lk_oft_args *a, size_t extra, void **mem, cudaStream_t st) {
    int rc = lk_scratch_alloc(mem, boft_tab_bytes(a) + extra, st);
    if (rc) return rc;
    const i64 tg = cdiv(a->M * a->O, NT);
    k_boft_tab<<<(unsigned)(tg > 65536 ? 65536 : tg), NT, 0, st>>>((int *)*mem, a->M, a->O, a->bs);
    LK_LAUNCHED("boft stage table");
    return LYCO_OK;
}

/* Cayley state, table and kernel parameters; mem receives the extra scratch (table + global buffers). */
static int boft_prepare(const lk_oft_args *a, const lk_device *dev, int nbuf, oft_cay *cy, boft_k *P, i64 *grid,
                        int *smem, void **mem, cudaStream_t st) {
    *mem = NULL;
    int rc = oft_cay_fwd(cy, a, OFT_FAM_BOFT, st);
    if (rc) return rc;
    memset(P, 0, sizeof *P);
    P->a = *a;
    P->Nm = cy->Op1;
    boft_tiles(P, dev, nbuf, grid, smem);
    const size_t tabb = boft_tab_bytes(a);
    const size_t gb = *smem == 0 ? sizeof(float) * (size_t)(*grid * P->bufsz) : 0;
    if ((rc = boft_table(a, gb, mem, st))) return rc;
    P->tab = (const int *)*mem;
    P->gbuf = gb ? (float *)((char *)*mem + tabb) : NULL;
    return LYCO_OK;
}

static int boft_fwd_legacy(const lk_oft_args *a, const lk_device *dev, cudaStream_t st) {
    int rc = boft_check(a);
    if (rc || a->ncol == 0) return rc;
    oft_cay cy;
    boft_k P;
    i64 grid = 1;
    int smem = 0;
    void *mem = NULL;
    rc = boft_prepare(a, dev, 3, &cy, &P, &grid, &smem, &mem, st);
    if (!rc) {
        cudaError_t e = cudaFuncSetAttribute(k_boft_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e == cudaSuccess) {
            k_boft_fwd<<<(unsigned)grid, NT, smem, st>>>(P);
            e = cudaGetLastError();
        }
        if (e != cudaSuccess)
            rc = lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of boft forward failed: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    }
    int rc2 = lk_scratch_free(mem, st), rc3 = oft_cay_free(&cy, st);
    return rc ? rc : rc2 ? rc2 : rc3;
}

/* Pass 1 chunk by chunk (columns [c0, c0 + CC)), each followed by the G_N contraction of its
   staged Ŵ / Ĝ; then the sums and the Cayley adjoint. CC: a multiple of the tile width with the
   staging (2·M·O·CC floats) within 32M floats. */
static int boft_bwd_run(const lk_oft_args *a, const oft_cay *cy, const boft_k *P, i64 grid, int smem, cudaStream_t st,
                        void **mem) {
    const bool want_b = a->gB.p != NULL, want_rho = a->grho.p != NULL && a->rho.p != NULL;
    const i64 all = a->M * a->nb * a->bs * a->bs, MO = a->M * a->O;
    i64 CC = P->ntc * P->tw;
    if (want_b) {
        i64 cap = ((i64)32 << 20) / (2 * MO) / P->tw * P->tw;
        if (cap < P->tw) cap = P->tw;
        if (CC > cap) CC = cap;
    }
    if (CC < 1) CC = 1;
    const i64 nch = a->ncol > 0 ? cdiv(a->ncol, CC) : 1;
    i64 S = cdiv(CC, P->tw) < grid ? cdiv(CC, P->tw) : grid;
    if (S < 1) S = 1;
    const i64 stg = want_b ? 2 * MO * CC : 0, rsz = want_rho ? nch * S * a->O : 0, gsz = want_b ? all : 0;
    const size_t bytes = sizeof(double) * (size_t)gsz + sizeof(float) * (size_t)(stg + rsz + gsz);
    int rc = lk_scratch_alloc(mem, bytes, st);
    if (rc) return rc;
    double *GNd = (double *)*mem;
    float *Wst = (float *)(GNd + gsz), *Gst = Wst + stg / 2, *rpart = Wst + stg, *GR = rpart + rsz;
    LK_SMEM_OPTIN(smem, k_boft_bwd);
    if (want_b && a->M * a->nb > 0x7fffffff) return lyco_fail(LYCO_ERR_BACKEND, "cuda boft: too many blocks for the grid");
    for (i64 q = 0; q < nch; q++) {
        const i64 c0 = q * CC, cn = a->ncol - c0 < CC ? a->ncol - c0 : CC;
        k_boft_bwd<<<(unsigned)S, NT, smem, st>>>(*P, c0, cn > 0 ? cn : 0, CC, want_b, want_rho, Wst, Gst,
                                                 want_rho ? rpart + q * S * a->O : rpart);
        LK_LAUNCHED("boft backward");
        if (want_b) {
            k_boft_gn<<<(unsigned)(a->M * a->nb), NT, 0, st>>>(Wst, Gst, CC, cn > 0 ? cn : 0, a->O, a->bs, a->nb, q == 0,
                                                             q == nch - 1, (float)a->m, GNd, GR);
            LK_LAUNCHED("boft block gradient contraction");
        }
    }
    if (want_rho && (rc = oft_sum_rho(rpart, nch * S, a->O, &a->grho, st))) return rc;
    if (want_b && (rc = oft_cay_bwd(cy, a, GR, st))) return rc;
    return LYCO_OK;
}

static int boft_bwd_legacy(const lk_oft_args *a, const lk_device *dev, cudaStream_t st) {
    int rc = boft_check(a);
    if (rc) return rc;
    if (!a->gB.p && !(a->grho.p && a->rho.p) && !a->GX.p) return LYCO_OK;
    oft_cay cy;
    boft_k P;
    i64 grid = 1;
    int smem = 0;
    void *mem = NULL, *mem2 = NULL;
    rc = boft_prepare(a, dev, 4, &cy, &P, &grid, &smem, &mem, st);
    if (!rc) rc = boft_bwd_run(a, &cy, &P, grid, smem, st, &mem2);
    int rc2 = lk_scratch_free(mem2, st), rc3 = lk_scratch_free(mem, st), rc4 = oft_cay_free(&cy, st);
    return rc ? rc : rc2 ? rc2 : rc3 ? rc3 : rc4;
}

/* =============================================================================================
 * Stage-per-launch kernels (the default; LYCO_CUDA_BOFT_LEGACY=1 selects the kernels above).
 * Columns in chunks of CC (a multiple of BS_CT) held as fp32 [O][CC] scratch buffers (pitch CC,
 * chunk-local columns); one launch per stage (the launch boundary is the grid-wide barrier the
 * stage's gather needs). A stage's CUDA block owns (block k of the stage) × (BS_CT columns).
 * ============================================================================================= */

#define BS_CT 64         /* columns per CUDA block of a stage (2 per lane) */
#define BS_TT 32         /* tile edge of the load / store kernels */

typedef struct {
    const float *Nm;     /* N − I, M·nb·b·b */
    const int *tab;      /* M·O stage index table */
    i64 O, nb, b;
    i64 ld, cn;          /* scratch pitch (CC), columns of this chunk */
} bs_k;

/* The forward's load / epilogue fused into its first / last stage (operands whose columns are
   contiguous: merge's W̄ and W''): in.p: x = RN_ct(in(t, j0 + c)), also written to X0w;
   out.p: out(t, j0 + c) = the epilogue of k_bs_store instead of the scratch store. */
typedef struct {
    lk_rows in, out;
    float *X0w;
    lk_view rho;
    i64 j0;
    int ct, delta;
} bs_io;

/* acc[rr][l] = Σ_{k < nk} A[r·ars + k]·B[k·bks + lane_l] (k ascending, fmaf), for rows
   r = warp + 8·rr < nrows and lanes lane_l = lane + 32·l < nlanes (nrows, nlanes ≤ 64). A is read
   as a warp broadcast, B with consecutive lanes. */
__device__ __forceinline__ void bs_mm(const float *A, int ars, const float *B, int bks, int nrows, int nk, int nlanes,
                                      float acc[8][2]) {
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
#pragma unroll
    for (int rr = 0; rr < 8; rr++) acc[rr][0] = acc[rr][1] = 0.0f;
    for (int k = 0; k < nk; k++) {
        const float b0 = lane < nlanes ? B[k * bks + lane] : 0.0f;
        const float b1 = lane + 32 < nlanes ? B[k * bks + lane + 32] : 0.0f;
#pragma unroll
        for (int rr = 0; rr < 8; rr++) {
            const int r = wp + 8 * rr;
            if (r < nrows) {
                const float av = A[r * ars + k];
                acc[rr][0] = fmaf(av, b0, acc[rr][0]);
                acc[rr][1] = fmaf(av, b1, acc[rr][1]);
            }
        }
    }
}

/* One stage on one (block k, column tile): with t_r = tab[i·O + k·b + r] and x = A + D (either may
   be NULL = 0),
     out[t_r][c] = D[t_r][c] + Σ_κ Nk[r][κ]·x[t_κ][c]      (trans: Nkᵀ, the backward's (N − I)ᵀ)
   which is the forward's Δ_{i+1} = Δ_i + (N − I)(X_0 + Δ_i), the plain X_{i+1} = X_i + (N − I)X_i
   (A NULL) and the backward's ΔG ← ΔG + (N − I)ᵀ(GY + ΔG) (A = GY), each sum in κ order as
   src/cpu/boft.c and the legacy kernels. Wx (the backward with ∂L/∂B): also the block-gradient
   partial gpart[(i·nb + k)·ntile + tile][μ·b + ν] = Σ_{c in tile} x[t_μ][c]·Wx[t_ν][c] (Ĝ·Ŵᵀ).
   Dynamic shared memory: t (b ints, padded to 64), Ns (b·b), Xs (b·BS_CT), Wt (BS_CT·(b + 1)). */
__global__ __launch_bounds__(NT) void k_bs_stage(bs_k P, i64 i, int trans, const float *A, const float *D, float *out,
                                                 const float *Wx, float *gpart, bs_io io) {
    extern __shared__ float sm[];
    const int b = (int)P.b, nn = b * b;
    const i64 ntile = cdiv(P.cn, BS_CT), k = (i64)blockIdx.x / ntile, tile = (i64)blockIdx.x % ntile;
    const i64 c0 = tile * BS_CT, ld = P.ld;
    const int w = (int)(P.cn - c0 < BS_CT ? P.cn - c0 : BS_CT);
    int *t = (int *)sm;
    float *Ns = sm + 64, *Xs = Ns + nn, *Wt = Xs + b * BS_CT;
    const float *Nk = P.Nm + (i * P.nb + k) * nn;
    for (int r = threadIdx.x; r < b; r += NT) t[r] = P.tab[i * P.O + k * b + r];
    for (int e = threadIdx.x; e < nn; e += NT) Ns[e] = trans ? Nk[(e % b) * b + e / b] : Nk[e];
    __syncthreads();
    for (int e = threadIdx.x; e < b * BS_CT; e += NT) {
        const int r = e / BS_CT, c = e % BS_CT;
        const i64 off = (i64)t[r] * ld + c0 + c;
        float x = 0.0f;
        if (c < w) {
            if (io.in.p) {
                x = round_to(rows_load(io.in, t[r], io.j0 + c0 + c), io.ct);
                io.X0w[off] = x;
            } else if (A) {
                x = A[off];
            }
            if (D) x = x + D[off];
        }
        Xs[e] = x;
        if (Wx && c < w) Wt[c * (b + 1) + r] = Wx[off];
    }
    __syncthreads();
    float acc[8][2];
    bs_mm(Ns, b, Xs, BS_CT, b, b, BS_CT, acc);
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
#pragma unroll
    for (int rr = 0; rr < 8; rr++) {
        const int r = wp + 8 * rr;
        if (r >= b) continue;
#pragma unroll
        for (int l = 0; l < 2; l++) {
            const int c = lane + 32 * l;
            if (c >= w) continue;
            const i64 off = (i64)t[r] * ld + c0 + c;
            const float v = (D ? D[off] : 0.0f) + acc[rr][l];
            if (io.out.p) {   /* A = X_0 (written above by this block when io.in.p) */
                const float x0 = A[off], pr = rho_ct(io.rho, t[r], io.ct);
                rows_store(io.out, t[r], io.j0 + c0 + c, io.delta ? fmaf(pr, v, (pr - 1.0f) * x0) : pr * (x0 + v));
            } else {
                out[off] = v;
            }
        }
    }
    if (!Wx) return;
    bs_mm(Xs, BS_CT, Wt, b + 1, b, w, b, acc);   /* rows μ, lanes ν, sum over the tile's columns */
    float *gp = gpart + ((i * P.nb + k) * ntile + tile) * nn;
#pragma unroll
    for (int rr = 0; rr < 8; rr++) {
        const int mu = wp + 8 * rr;
        if (mu >= b) continue;
#pragma unroll
        for (int l = 0; l < 2; l++) {
            const int nu = lane + 32 * l;
            if (nu < b) gp[mu * b + nu] = acc[rr][l];
        }
    }
}

/* Tile (blockIdx.x → 32 rows × 32 chunk columns) of the load / store kernels; false past the end. */
__device__ __forceinline__ void bs_tile(i64 cn, i64 *o0, i64 *c0) {
    const i64 nct = cdiv(cn, BS_TT);
    *o0 = (i64)blockIdx.x / nct * BS_TT;
    *c0 = (i64)blockIdx.x % nct * BS_TT;
}

/* dst[o][c] = RN_ct(v(o, j0 + c)) for the chunk (and dst2[o][c] = (ρ_ct[o] − 1)·dst[o][c] when
   dst2); transposed through shared memory when v is channel-fast so both sides stay coalesced. */
__global__ __launch_bounds__(NT) void k_bs_load(lk_rows v, i64 O, i64 j0, i64 cn, i64 ld, int ct, float *dst,
                                                lk_view rho, float *dst2) {
    __shared__ float sh[BS_TT][BS_TT + 1];
    i64 o0, c0;
    bs_tile(cn, &o0, &c0);
    const int tx = threadIdx.x % BS_TT, ty = threadIdx.x / BS_TT;
    const bool chfast = v.sc == 1;
    for (int q = ty; q < BS_TT; q += NT / BS_TT) {
        const int ro = chfast ? tx : q, rc = chfast ? q : tx;
        if (o0 + ro < O && c0 + rc < cn) sh[ro][rc] = round_to(rows_load(v, o0 + ro, j0 + c0 + rc), ct);
    }
    __syncthreads();
    for (int q = ty; q < BS_TT; q += NT / BS_TT) {
        const i64 o = o0 + q, c = c0 + tx;
        if (o >= O || c >= cn) continue;
        const float x = sh[q][tx];
        dst[o * ld + c] = x;
        if (dst2) dst2[o * ld + c] = (rho_ct(rho, o, ct) - 1.0f) * x;
    }
}

/* Chunk epilogue into Y at columns j0 + c. Forward (bwd 0): X = X_0, D = Δ_M,
   Y = ρ ⊙ (X + D) or, delta, ρ ⊙ D + (ρ − 1) ⊙ X. Backward (bwd 1): X = GY, D = ΔG,
   Y = ΔG (+ GY unless delta). Rounded once to Y's dtype; transposed like k_bs_load. */
__global__ __launch_bounds__(NT) void k_bs_store(lk_rows Y, i64 O, i64 j0, i64 cn, i64 ld, int ct, int bwd, int delta,
                                                 const float *X, const float *D, lk_view rho) {
    __shared__ float sh[BS_TT][BS_TT + 1];
    i64 o0, c0;
    bs_tile(cn, &o0, &c0);
    const int tx = threadIdx.x % BS_TT, ty = threadIdx.x / BS_TT;
    for (int q = ty; q < BS_TT; q += NT / BS_TT) {
        const i64 o = o0 + q, c = c0 + tx;
        if (o >= O || c >= cn) continue;
        const float x = X[o * ld + c], d = D[o * ld + c];
        float y;
        if (bwd) {
            y = delta ? d : d + x;
        } else {
            const float pr = rho_ct(rho, o, ct);
            y = delta ? fmaf(pr, d, (pr - 1.0f) * x) : pr * (x + d);
        }
        sh[q][tx] = y;
    }
    __syncthreads();
    const bool chfast = Y.sc == 1;
    for (int q = ty; q < BS_TT; q += NT / BS_TT) {
        const int ro = chfast ? tx : q, rc = chfast ? q : tx;
        if (o0 + ro < O && c0 + rc < cn) rows_store(Y, o0 + ro, j0 + c0 + rc, sh[ro][rc]);
    }
}

/* rp[o] = Σ_{c < cn} GY[o][c]·X[o][c]: one warp per row, lanes strided over the columns, then a
   fixed xor-shuffle tree (deterministic). */
__global__ __launch_bounds__(NT) void k_bs_rho(const float *GY, const float *X, i64 O, i64 cn, i64 ld, float *rp) {
    const i64 o = (i64)blockIdx.x * (NT / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (o >= O) return;
    float acc = 0.0f;
    for (i64 c = lane; c < cn; c += 32) acc = fmaf(GY[o * ld + c], X[o * ld + c], acc);
    for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
    if (lane == 0) rp[o] = acc;
}

/* GNd[e] (+)= Σ_tile gpart[(e / nn)·ntile + tile][e % nn] in double, tiles in order (first: assigned);
   last: GR = m·(float)GNd. e < all = M·nb·b². */
__global__ __launch_bounds__(NT) void k_bs_gn(const float *gpart, i64 ntile, i64 all, i64 nn, int first, int last,
                                              float m, double *GNd, float *GR) {
    const i64 e = (i64)blockIdx.x * NT + threadIdx.x;
    if (e >= all) return;
    const float *g = gpart + (e / nn) * ntile * nn + e % nn;
    double v = first ? 0.0 : GNd[e];
    for (i64 q = 0; q < ntile; q++) v += (double)g[q * nn];
    GNd[e] = v;
    if (last) GR[e] = m * (float)v;
}

/* ---- host side ---- */

static int bs_grid(i64 blocks, const char *what, unsigned *g) {
    if (blocks > 0x7fffffff)
        return lyco_fail(LYCO_ERR_BACKEND, "cuda boft: %lld CUDA blocks for the %s exceed the grid", (long long)blocks, what);
    *g = (unsigned)blocks;
    return LYCO_OK;
}

static size_t bs_stage_smem(i64 b, bool gn) { return sizeof(float) * (size_t)(64 + b * b + b * BS_CT + (gn ? BS_CT * (b + 1) : 0)); }

static int bs_stage(const bs_k *P, i64 i, int trans, const float *A, const float *D, float *out, const float *Wx,
                    float *gpart, const bs_io *io, cudaStream_t st) {
    bs_io none;
    memset(&none, 0, sizeof none);
    unsigned g = 0;
    int rc = bs_grid(P->nb * cdiv(P->cn, BS_CT), "boft stage", &g);
    if (rc || g == 0) return rc;
    k_bs_stage<<<g, NT, bs_stage_smem(P->b, Wx != NULL), st>>>(*P, i, trans, A, D, out, Wx, gpart, io ? *io : none);
    LK_LAUNCHED("boft stage");
    return LYCO_OK;
}

static int bs_load(const bs_k *P, const lk_rows *v, i64 j0, int ct, float *dst, const lk_view *rho, float *dst2,
                   cudaStream_t st) {
    unsigned g = 0;
    int rc = bs_grid(cdiv(P->O, BS_TT) * cdiv(P->cn, BS_TT), "boft load", &g);
    if (rc || g == 0) return rc;
    k_bs_load<<<g, NT, 0, st>>>(*v, P->O, j0, P->cn, P->ld, ct, dst, *rho, dst2);
    LK_LAUNCHED("boft chunk load");
    return LYCO_OK;
}

static int bs_store(const bs_k *P, const lk_oft_args *a, const lk_rows *Y, i64 j0, int bwd, const float *X, const float *D,
                    cudaStream_t st) {
    unsigned g = 0;
    int rc = bs_grid(cdiv(P->O, BS_TT) * cdiv(P->cn, BS_TT), "boft store", &g);
    if (rc || g == 0) return rc;
    k_bs_store<<<g, NT, 0, st>>>(*Y, P->O, j0, P->cn, P->ld, a->ct, bwd, a->delta, X, D, a->rho);
    LK_LAUNCHED("boft chunk store");
    return LYCO_OK;
}

/* Chunk width: the largest multiple of BS_CT with per64·(CC / BS_CT) + fixed ≤ budget floats, at
   least BS_CT, at most the columns rounded up to BS_CT. */
static i64 bs_chunk(i64 ncol, i64 per64, i64 budget) {
    i64 n = budget / (per64 > 0 ? per64 : 1);
    if (n < 1) n = 1;
    const i64 all = cdiv(ncol > 0 ? ncol : 1, BS_CT);
    return (n < all ? n : all) * BS_CT;
}

/* Cayley state, index table (in *mem, followed by `extra` bytes) and the stage kernel's shared memory. */
static int bs_setup(const lk_oft_args *a, oft_cay *cy, bs_k *P, i64 CC, size_t extra, void **mem, cudaStream_t st) {
    *mem = NULL;
    int rc = oft_cay_fwd(cy, a, OFT_FAM_BOFT, st);
    if (rc) return rc;
    memset(P, 0, sizeof *P);
    P->Nm = cy->Op1;
    P->O = a->O;
    P->nb = a->nb;
    P->b = a->bs;
    P->ld = CC;
    if ((rc = boft_table(a, extra, mem, st))) return rc;
    P->tab = (const int *)*mem;
    LK_SMEM_OPTIN(bs_stage_smem(a->bs, true), k_bs_stage);
    return LYCO_OK;
}

#define BS_FWD_BUDGET ((i64)6 << 20)    /* floats: 3 chunk buffers within ~24 MB (L2-resident) */
#define BS_BWD_BUDGET ((i64)16 << 20)   /* floats: backward chunk scratch within 64 MB */

/* Forward, per chunk: load X_0; M stage launches Δ_{i+1} = Δ_i + (N − I)(X_0 + Δ_i) (ping-pong);
   the epilogue. The load goes into stage 0 and the epilogue into stage M − 1 when X / Y have
   contiguous columns (bs_io). Scratch 3·O·CC floats. */
static int bs_fwd(const lk_oft_args *a, cudaStream_t st) {
    const i64 O = a->O, CC = bs_chunk(a->ncol, 3 * O * BS_CT, BS_FWD_BUDGET);
    oft_cay cy;
    bs_k P;
    void *mem = NULL;
    int rc = bs_setup(a, &cy, &P, CC, sizeof(float) * (size_t)(3 * O * CC), &mem, st);
    if (!rc) {
        float *X0 = (float *)((char *)mem + boft_tab_bytes(a)), *Db[2] = {X0 + O * CC, X0 + 2 * O * CC};
        const bool fin = a->X.SP == 1 && a->X.sn == 1, fout = a->Y.SP == 1 && a->Y.sn == 1;
        bs_io io;
        memset(&io, 0, sizeof io);
        io.in = a->X;
        io.out = a->Y;
        io.X0w = X0;
        io.rho = a->rho;
        io.ct = a->ct;
        io.delta = a->delta;
        for (i64 j0 = 0; j0 < a->ncol && !rc; j0 += CC) {
            P.cn = a->ncol - j0 < CC ? a->ncol - j0 : CC;
            const float *D = NULL;
            io.j0 = j0;
            if (!fin) rc = bs_load(&P, &a->X, j0, a->ct, X0, &a->rho, NULL, st);
            for (i64 i = 0; i < a->M && !rc; i++) {
                io.in.p = fin && i == 0 ? a->X.p : NULL;
                io.out.p = fout && i == a->M - 1 ? a->Y.p : NULL;
                rc = bs_stage(&P, i, 0, X0, D, Db[i & 1], NULL, NULL, &io, st);
                D = Db[i & 1];
            }
            if (!rc && !fout) rc = bs_store(&P, a, &a->Y, j0, 0, X0, D, st);
        }
    }
    int rc2 = lk_scratch_free(mem, st), rc3 = oft_cay_free(&cy, st);
    return rc ? rc : rc2 ? rc2 : rc3;
}

typedef struct {
    float *GYs, *DG[2], *Xs, *gpart, *rpart, *GR;
    double *GNd;
} bs_bwd_mem;

/* Backward of one chunk (columns [j0, j0 + P->cn)), chunk number q of nch. */
static int bs_bwd_chunk(const lk_oft_args *a, const bs_k *P, const bs_bwd_mem *S, i64 j0, i64 q, i64 nch, cudaStream_t st) {
    const bool want_b = a->gB.p != NULL, want_rho = a->grho.p != NULL && a->rho.p != NULL;
    const i64 OC = a->O * P->ld, nn = a->bs * a->bs, all = a->M * a->nb * nn;
    int rc = bs_load(P, &a->GY, j0, a->ct, S->GYs, &a->rho, S->DG[0], st);
    if (!rc && S->Xs) rc = bs_load(P, &a->X, j0, a->ct, S->Xs, &a->rho, NULL, st);
    for (i64 i = 0; i < a->M && S->Xs && !rc; i++) rc = bs_stage(P, i, 0, NULL, S->Xs + i * OC, S->Xs + (i + 1) * OC, NULL, NULL, NULL, st);
    if (rc) return rc;
    if (want_rho) {
        k_bs_rho<<<(unsigned)cdiv(a->O, NT / 32), NT, 0, st>>>(S->GYs, S->Xs + a->M * OC, a->O, P->cn, P->ld,
                                                              S->rpart + q * a->O);
        LK_LAUNCHED("boft rescale gradient");
    }
    int cur = 0;
    for (i64 i = a->M - 1; i >= 0 && !rc; i--, cur ^= 1)
        rc = bs_stage(P, i, 1, S->GYs, S->DG[cur], S->DG[cur ^ 1], want_b ? S->Xs + i * OC : NULL, S->gpart, NULL, st);
    if (!rc && a->GX.p) rc = bs_store(P, a, &a->GX, j0, 1, S->GYs, S->DG[cur], st);
    if (!rc && want_b) {
        k_bs_gn<<<(unsigned)cdiv(all, NT), NT, 0, st>>>(S->gpart, cdiv(P->cn, BS_CT), all, nn, q == 0, q == nch - 1,
                                                       (float)a->m, S->GNd, S->GR);
        LK_LAUNCHED("boft block gradient sum");
    }
    return rc;
}

/* Backward: chunk by chunk (G_N and G_ρ partials summed in chunk order), then the sums and the
   Cayley adjoint. Scratch per chunk: GY, ΔG ×2, X_0..X_M (when ∂L/∂B or ∂L/∂ρ is wanted),
   M·nb·b²·CC/BS_CT block-gradient partials; plus nch·O G_ρ partials, M·nb·b² doubles + floats. */
static int bs_bwd(const lk_oft_args *a, cudaStream_t st) {
    const bool want_b = a->gB.p != NULL, want_rho = a->grho.p != NULL && a->rho.p != NULL, need_x = want_b || want_rho;
    const i64 O = a->O, M = a->M, all = M * a->nb * a->bs * a->bs;
    const i64 per64 = BS_CT * O * (3 + (need_x ? M + 1 : 0)) + (want_b ? all : 0);
    const i64 CC = bs_chunk(a->ncol, per64, BS_BWD_BUDGET), nch = a->ncol > 0 ? cdiv(a->ncol, CC) : 1;
    const i64 nx = need_x ? (M + 1) * O * CC : 0, ng = want_b ? all * (CC / BS_CT) : 0, nr = want_rho ? nch * O : 0;
    const i64 nf = 3 * O * CC + nx + ng + nr + (want_b ? all : 0);
    oft_cay cy;
    bs_k P;
    void *mem = NULL;
    int rc = bs_setup(a, &cy, &P, CC, sizeof(double) * (size_t)(want_b ? all : 0) + sizeof(float) * (size_t)nf, &mem, st);
    if (!rc) {
        bs_bwd_mem S;
        S.GNd = (double *)((char *)mem + boft_tab_bytes(a));
        S.GYs = (float *)(S.GNd + (want_b ? all : 0));
        S.DG[0] = S.GYs + O * CC;
        S.DG[1] = S.DG[0] + O * CC;
        S.Xs = need_x ? S.DG[1] + O * CC : NULL;
        S.gpart = S.DG[1] + O * CC + nx;
        S.rpart = S.gpart + ng;
        S.GR = S.rpart + nr;
        for (i64 q = 0; q < nch && !rc; q++) {
            const i64 j0 = q * CC;
            P.cn = a->ncol - j0 < CC ? (a->ncol - j0 > 0 ? a->ncol - j0 : 0) : CC;
            rc = bs_bwd_chunk(a, &P, &S, j0, q, nch, st);
        }
        if (!rc && want_rho) rc = oft_sum_rho(S.rpart, nch, O, &a->grho, st);
        if (!rc && want_b) rc = oft_cay_bwd(&cy, a, S.GR, st);
    }
    int rc2 = lk_scratch_free(mem, st), rc3 = oft_cay_free(&cy, st);
    return rc ? rc : rc2 ? rc2 : rc3;
}

static bool boft_legacy(void) {
    const char *e = getenv("LYCO_CUDA_BOFT_LEGACY");
    return e && e[0] == '1';
}

/* The stage-group kernels (boft_group.cu) take power-of-two block sizes whose shared memory fits;
   everything else (b 6, 10, …; LYCO_CUDA_BOFT_STAGEWISE=1) runs the stage-per-launch kernels. */
extern "C" int lk_boft_fwd(const lk_oft_args *a, const lk_device *dev, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    if (boft_legacy()) return boft_fwd_legacy(a, dev, st);
    int rc = boft_check(a);
    if (rc || a->ncol == 0) return rc;
    if (bg_takes(a, dev, 0, NULL)) return bg_fwd(a, dev, st);
    return bs_fwd(a, st);
}

extern "C" int lk_boft_bwd(const lk_oft_args *a, const lk_device *dev, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    if (boft_legacy()) return boft_bwd_legacy(a, dev, st);
    int rc = boft_check(a);
    if (rc) return rc;
    if (!a->gB.p && !(a->grho.p && a->rho.p) && !a->GX.p) return LYCO_OK;
    if (bg_takes(a, dev, 1, NULL)) return bg_bwd(a, dev, st);
    return bs_bwd(a, st);
}
