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
#include <string.h>

#include "cuda/oft.cuh"

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
    const i64 tabn = a->M * a->O;
    const size_t tabb = (sizeof(int) * (size_t)tabn + 255) / 256 * 256;
    const size_t gb = *smem == 0 ? sizeof(float) * (size_t)(*grid * P->bufsz) : 0;
    if ((rc = lk_scratch_alloc(mem, tabb + gb, st))) return rc;
    P->tab = (const int *)*mem;
    P->gbuf = gb ? (float *)((char *)*mem + tabb) : NULL;
    i64 tg = cdiv(tabn, NT);
    k_boft_tab<<<(unsigned)(tg > 65536 ? 65536 : tg), NT, 0, st>>>((int *)*mem, a->M, a->O, a->bs);
    LK_LAUNCHED("boft stage table");
    return LYCO_OK;
}

extern "C" int lk_boft_fwd(const lk_oft_args *a, const lk_device *dev, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
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
    LK_CHECK(cudaFuncSetAttribute(k_boft_bwd, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
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

extern "C" int lk_boft_bwd(const lk_oft_args *a, const lk_device *dev, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
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
