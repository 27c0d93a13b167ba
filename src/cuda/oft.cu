/*
 * oft.cu — Diag-OFT (ALGORITHMS.md §2.4) on the GPU, all four directions, and the OFT family's
 * shared Cayley transform (oft.cuh). Semantics, formulas and roundings are those of the fused CPU
 * kernels (src/cpu/diag_oft.c, cayley.c): per block k of bs channel rows of X (merge: W̄,
 * bypass: y0 with channels as rows; kern_oft.h),
 *   Y_k = ρ_k ⊙ (M_kᵀ X_k)                                  (merge WEIGHT, bypass y)
 *   Y_k − X_k = ρ_k ⊙ ((M_k − I)ᵀ X_k) + (ρ_k − 1) ⊙ X_k     (merge DELTA, bypass DELTA_ONLY)
 * backward, G'' = ρ ⊙ GY:  G_ρ[o] = Σ_j GY[o,j]·(MᵀX)[o,j];  G_M_k = X_k·G''_kᵀ;
 *   G_R = m·G_M (⊙ D);  G_B = Cayley adjoint;  bypass dy0_k = M_k·G''_k (delta-only:
 *   (M_k − I)·G''_k + (ρ_k − 1) ⊙ dy_k).  X, GY and ρ are rounded to the compute dtype on load.
 *
 * Cayley (once per call, oft.cuh): with a constraint k_cay_part (‖Q0_k‖² per block, fp64) → k_sum_d2d
 * (one block, fixed order); then k_cay_fwd (one CUDA block per OFT block, forming Q0 itself when
 * there is no constraint: Gauss–Jordan — by one warp with rows in registers for bs ≤ 32 — plus
 * one refinement of A and of R − I with double residuals, in shared memory) writes A, R − I, M
 * and M − I. Adjoint: k_cay_bwd1 (G_Q = 2·Aᵀ·G_R·Aᵀ in double, per-block ⟨G_Q, Q0⟩) → k_sum_d2d →
 * k_cay_bwd2 (constraint, skew part, rounded once into ∂L/∂B).
 *
 * Passes, by shape (each with LYCO_CUDA_* switches for A/B; H200 times in docs/kernels.md):
 *  - bs 8/16/32, row-major 16-bit W with 16-byte aligned rows (merge): forward k_doft_fwd_staged
 *    (Y_k = Op_kᵀ·X_k as a small GEMM, 8×8 outputs per thread, cp.async tile ring); backward
 *    (bs 16/32, no ∂L/∂X) k_doft_h: one reduction H_k = X_k·GY_kᵀ gives G_M = ρ ⊙ H and
 *    G_ρ = Σ_ν M ⊙ H.
 *  - bs 16/32, channel-fast 16-bit y0 / dy with 16-byte aligned blocks (linear bypass): forward
 *    k_doft_fwd_cf, backward k_doft_bwd_cf (token tiles widened once into channel-major fp32
 *    tiles; 4×4 outputs per thread; the backward's H reduction as the merge's).
 *  - bs 8/16/32, any other layout (conv, strided, unaligned, fp32 activations): the column
 *    kernels k_doft_fwd_cols / k_doft_bwd_cols (a thread owns whole columns of one block in
 *    registers; 16-byte vectors for channel-contiguous operands).
 *  - other block sizes: the tile kernels below (k_doft_fwd / k_doft_bwd).
 * Every forward output is the same ν-ordered fmaf chain and epilogue in all three (bitwise); the
 * backward's reductions differ in grouping only (deterministic, no atomics anywhere).
 *
 * Tile kernels (bs ≤ 64): a row tile is g = ⌊64/bs⌋ whole blocks (R = g·bs ≤ 64 rows; blocks
 * never straddle tiles, so a tile needs only its own rows of X), a column tile 64 columns. The
 * tile's block-diagonal operator sits in shared memory as a dense R×R matrix C[ν][μ] (only its
 * diagonal blocks are read); 256 threads × 4×4 outputs, each a fixed-order fp32 sum over the
 * row's own block. Tiles are staged in shared memory (coalesced along whichever of channels /
 * columns is contiguous) and stored from there.
 *   forward : grid (column tiles, row tiles), 33 KB static shared memory.
 *   backward: grid (S splits, row tiles); split s walks column tiles s, s+S, …, keeps G_M (4×4
 *             per thread) and G_ρ in registers, writes them to its own partial slice (no atomics);
 *             oft_sum_grad / oft_sum_rho add the S slices in order. 5 tiles of dynamic shared
 *             memory (83 KB). dy0 is stored per tile.
 * Extra memory: the Cayley state (oft.cuh) + S·(nb·bs² + O) floats of partials (backward; S
 * splits of the columns, ≤ 8M floats).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/oft.cuh"

/* ============================================================================================
 * Cayley transform
 * ========================================================================================== */

__device__ __forceinline__ float blk_ct(const lk_blk &B, i64 nb, i64 k, i64 r, i64 c, int ct) {
    return round_to(ld_elem(blk_addr(B, k / nb, k % nb, r, c), B.dt, B.flags & LK_UNALIGNED), ct);
}

/* Q0 = B − Bᵀ per block (B rounded to CT), part[k] = ‖Q0_k‖²_F in fp64 (the constraint scales all of
   R − I by κc/ν: an fp32 norm's error is a systematic relative error on every element of ΔW —
   the CPU's fp32 chain reached 19.8 ULP on a delta merge, budget 15.2) */
__global__ __launch_bounds__(NT) void k_cay_part(lk_blk B, int ct, i64 nb, i64 n, float *Q0, double *part) {
    __shared__ double red[NT];
    const i64 k = blockIdx.x, nn = n * n;
    double acc = 0.0;
    for (i64 e = threadIdx.x; e < nn; e += NT) {
        i64 a = e / n, b = e % n;
        float q = blk_ct(B, nb, k, a, b, ct) - blk_ct(B, nb, k, b, a, ct);
        Q0[k * nn + e] = q;
        acc += (double)q * (double)q;
    }
    double s = block_sum_d(acc, red);
    if (threadIdx.x == 0) part[k] = s;
}
__global__ __launch_bounds__(NT) void k_sum_d2d(const double *in, i64 n, double *out) {
    __shared__ double red[NT];
    double acc = 0.0;
    for (i64 i = threadIdx.x; i < n; i += NT) acc += in[i];
    double s = block_sum_d(acc, red);
    if (threadIdx.x == 0) out[0] = s;
}

struct cay_scale {
    bool active;
    double scale; /* κc/ν (1 when inactive): Q = RN_f32(Q0·scale), one rounding */
    double q0norm, nu;
};
__device__ __forceinline__ cay_scale cay_scale_of(const double *stat, double kc) {
    cay_scale c;
    c.q0norm = kc > 0.0 ? sqrt(stat[0]) : 0.0;   /* stat[0] is computed only under a constraint */
    c.nu = c.q0norm + 1e-8;
    c.active = kc > 0.0 && c.nu > kc;
    c.scale = c.active ? kc / c.nu : 1.0;
    return c;
}

/* For every element e = (a, b) of an n×n result the block's threads own, four at a time:
   acc = init(a, b, e); acc = step(acc, L[a·n + j], R[j·n + b]) for j = 0 … n − 1; fin(e, acc).
   Each element's chain is the same j-ordered sequence as one element at a time (bitwise); the
   four chains of a thread are in flight together (one at a time, each j waited for its shared-
   memory loads and the previous FMA: the Cayley kernel's products were latency-bound, H200). */
template <typename T, class Init, class Step, class Fin>
__device__ __forceinline__ void cay_prod4(int n, const float *L, const float *R, Init init, Step step, Fin fin) {
    const int nn = n * n, bd = (int)blockDim.x;
    for (int e0 = threadIdx.x; e0 < nn; e0 += 4 * bd) {
        int a[4], b[4];
        T acc[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int e = e0 + q * bd < nn ? e0 + q * bd : e0; /* past the end: a copy of e0, not stored */
            a[q] = e / n;
            b[q] = e % n;
            acc[q] = init(a[q], b[q], e);
        }
        for (int j = 0; j < n; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[q] = step(acc[q], L[a[q] * n + j], R[j * n + b[q]]);
#pragma unroll
        for (int q = 0; q < 4; q++)
            if (e0 + q * bd < nn) fin(e0 + q * bd, acc[q]);
    }
}

/* Y += A·E (n×n, fp32 sums; T scratch). All threads; ends synchronised. */
__device__ void cay_refine(int n, const float *A, const float *E, float *T, float *Y) {
    const int nn = n * n;
    cay_prod4<float>(
        n, A, E, [](int, int, int) { return 0.0f; }, [](float s, float l, float r) { return fmaf(l, r, s); },
        [&](int e, float s) { T[e] = s; });
    __syncthreads();
    for (int e = threadIdx.x; e < nn; e += blockDim.x) Y[e] += T[e];
    __syncthreads();
}

/* Gauss–Jordan with partial pivoting for n ≤ 32 by one warp, rows in registers (lane r holds
   row r of X and of A, padded to 32 with identity rows, which never win a pivot search and are
   never modified). Pivoting is implicit: rows stay in their lanes, pos[lane] is the row's
   position in the explicit algorithm (swapping positions col and piv), and the search takes the
   lowest position among the largest |X[·][col]| of positions ≥ col — the explicit serial scan's
   choice; at the end each row moves to its position. Every value equals the explicit
   swap → scale → eliminate sequence's (k_cay_fwd's block loop), including skipped zero factors.
   X, A: n×n row-major in shared memory; A is written, X is left reduced. */
__device__ void cay_gj_warp(int n, float *X, float *A) {
    const int lane = threadIdx.x & 31;
    float x[32], a[32];
#pragma unroll
    for (int c = 0; c < 32; c++) {
        x[c] = lane < n && c < n ? X[lane * n + c] : (c == lane ? 1.0f : 0.0f);
        a[c] = c == lane ? 1.0f : 0.0f;
    }
    int pos = lane;
    /* the column loop stays rolled (fully unrolled it is ~20k instructions run once per block:
       instruction-fetch bound, 96 µs), so x[col] is picked by a select chain */
#pragma unroll 1
    for (int col = 0; col < n; col++) {
        float xc = x[0];
#pragma unroll
        for (int c = 1; c < 32; c++) xc = c == col ? x[c] : xc;
        const bool cand = pos >= col && lane < n && !isnan(xc);   /* NaN: never a pivot */
        float best = cand ? fabsf(xc) : -1.0f;
        int bp = cand ? pos : 64, bl = lane;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, o);
            const int op = __shfl_xor_sync(0xffffffffu, bp, o), ol = __shfl_xor_sync(0xffffffffu, bl, o);
            if (ob > best || (ob == best && op < bp)) { best = ob; bp = op; bl = ol; }
        }
        /* bl: the pivot row's lane (all lanes agree: a total order); no candidate (NaNs): position col */
        if (bp == 64) {
            const unsigned at = __ballot_sync(0xffffffffu, pos == col);
            bl = __ffs(at) - 1;
        }
        const int ppos = __shfl_sync(0xffffffffu, pos, bl);
        if (pos == col) pos = ppos;
        if (lane == bl) pos = col;
        const float inv = 1.0f / __shfl_sync(0xffffffffu, xc, bl);
        if (lane == bl)
#pragma unroll
            for (int c = 0; c < 32; c++) {
                x[c] *= inv;
                a[c] *= inv;
            }
        const float f = lane == bl ? 0.0f : xc;
#pragma unroll
        for (int c = 0; c < 32; c++) {
            const float px = __shfl_sync(0xffffffffu, x[c], bl), pa = __shfl_sync(0xffffffffu, a[c], bl);
            if (f != 0.0f) {
                x[c] = fmaf(-f, px, x[c]);
                a[c] = fmaf(-f, pa, a[c]);
            }
        }
    }
    /* row at position p goes to row p of X and A */
    if (lane < n)
#pragma unroll
        for (int c = 0; c < 32; c++)
            if (c < n) {
                X[pos * n + c] = x[c];
                A[pos * n + c] = a[c];
            }
    __syncwarp();
}

/* One CUDA block per OFT block k: A = (I − Q)^{-1}, R − I, and the family's operators. Without a
   constraint (κc ≤ 0) Q0 = B − Bᵀ is formed here (and stored for the adjoint) instead of by
   k_cay_part, whose norm only the constraint needs. */
__global__ __launch_bounds__(NT) void k_cay_fwd(oft_cay s, int family, float m, lk_view mask, lk_blk B, int ct) {
    extern __shared__ float sm[];
    const int n = (int)s.n, nn = n * n;
    float *Q = sm, *X = Q + nn, *A = X + nn, *Rk = A + nn, *T = Rk + nn, *f = T + nn;
    __shared__ int piv_s;
    __shared__ float inv_s;
    const i64 k = blockIdx.x;
    const cay_scale cs = cay_scale_of(s.stat, s.kc);
    const float *Q0k = s.Q0 + k * nn;
    const bool form_q0 = !(s.kc > 0.0);
    /* four elements per thread at a time, their global loads issued together */
    const int bd = (int)blockDim.x;
    for (int e0 = threadIdx.x; e0 < nn; e0 += 4 * bd) {
        float q[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int e = e0 + u * bd < nn ? e0 + u * bd : e0, a = e / n, b = e % n;
            if (form_q0) q[u] = blk_ct(B, s.nb, k, a, b, ct) - blk_ct(B, s.nb, k, b, a, ct);
            else q[u] = cs.active ? (float)((double)Q0k[e] * cs.scale) : Q0k[e];
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int e = e0 + u * bd, a = e / n, b = e % n;
            if (e >= nn) break;
            if (form_q0) s.Q0[k * nn + e] = q[u];
            Q[e] = q[u];
            X[e] = (a == b ? 1.0f : 0.0f) - q[u];
            A[e] = a == b ? 1.0f : 0.0f;
        }
    }
    __syncthreads();
    /* Gauss–Jordan with partial pivoting on X = I − Q, A ← X^{-1}; three barriers per column:
       (1) warp 0 finds the pivot (the first row of largest |X[r][col]|, as a serial scan would)
       and its reciprocal; (2) the swap of rows col and piv fused with the scaling of the new
       pivot row, and the elimination factors f[r] (read before anything is written); (3) the
       elimination. Every value is the one the plain sequence swap → scale → eliminate gives. */
    if (n <= 32) {   /* one warp, rows in registers */
        if (threadIdx.x < 32) cay_gj_warp(n, X, A);
        __syncthreads();
    } else for (int col = 0; col < n; col++) {
        if (threadIdx.x < 32) {
            float best = -1.0f;
            int bi = n;
            for (int r = col + (int)threadIdx.x; r < n; r += 32) {
                const float v = fabsf(X[r * n + col]);
                if (v > best) { best = v; bi = r; }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ob = __shfl_xor_sync(0xffffffffu, best, o);
                const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                if (ob > best || (ob == best && oi < bi)) { best = ob; bi = oi; }
            }
            if (threadIdx.x == 0) {
                const int piv = bi < n ? bi : col;   /* NaN column: keep col, as the serial scan */
                piv_s = piv;
                inv_s = 1.0f / X[piv * n + col];
            }
        }
        __syncthreads();
        const int piv = piv_s;
        const float inv = inv_s;
        for (int c = threadIdx.x; c < n; c += blockDim.x) {
            const float xc = X[col * n + c], xp = X[piv * n + c], ac = A[col * n + c], ap = A[piv * n + c];
            X[piv * n + c] = xc;
            A[piv * n + c] = ac;   /* piv == col: both pairs of writes hit one element; the second wins */
            X[col * n + c] = xp * inv;
            A[col * n + c] = ap * inv;
            if (c == col) f[piv] = piv == col ? 0.0f : xc;
        }
        for (int r = threadIdx.x; r < n; r += blockDim.x)
            if (r != col && r != piv) f[r] = X[r * n + col];
        if (threadIdx.x == 0 && piv != col) f[col] = 0.0f;
        __syncthreads();
        for (int e = threadIdx.x; e < nn; e += blockDim.x) {
            const int r = e / n, c = e % n;
            const float fr = f[r];
            if (fr == 0.0f) continue;
            X[e] = fmaf(-fr, X[col * n + c], X[e]);
            A[e] = fmaf(-fr, A[col * n + c], A[e]);
        }
        __syncthreads();
    }
    /* refinement: E = I − A + Q·A (double), A ← A + A·E (the double sums r += q·a contract to
       one fma per term, as written here) */
    const auto dstep = [](double r, float l, float rr) { return fma((double)l, (double)rr, r); };
    const auto to_x = [&](int e, double r) { X[e] = (float)r; };
    cay_prod4<double>(n, Q, A, [&](int a, int b, int e) { return (a == b ? 1.0 : 0.0) - (double)A[e]; }, dstep, to_x);
    __syncthreads();
    cay_refine(n, A, X, T, A);
    /* R − I = 2·A·Q, refined with r = 2Q − (I − Q)·(R − I) */
    cay_prod4<float>(
        n, A, Q, [](int, int, int) { return 0.0f; }, [](float s, float l, float r) { return fmaf(l, r, s); },
        [&](int e, float acc) { Rk[e] = 2.0f * acc; });
    __syncthreads();
    cay_prod4<double>(n, Q, Rk, [&](int, int, int e) { return 2.0 * (double)Q[e] - (double)Rk[e]; }, dstep, to_x);
    __syncthreads();
    cay_refine(n, A, X, T, Rk);
    for (int e = threadIdx.x; e < nn; e += blockDim.x) {
        const i64 i = k * nn + e;
        const int a = e / n, b = e % n;
        const float rm1 = Rk[e];
        s.A[i] = A[e];
        s.Rm1[i] = rm1;
        if (family == OFT_FAM_DIAG) {
            float mm;
            if (mask.p) {
                float d = vload(mask, 0, i);
                mm = a == b ? m * ((1.0f + rm1) * d - 1.0f) : m * rm1 * d;
            } else {
                mm = m * rm1;
            }
            s.Op2[i] = mm;
            s.Op1[i] = mm + (a == b ? 1.0f : 0.0f);
        } else {
            s.Op1[i] = m == 1.0f ? rm1 : m * rm1;
        }
    }
}

/* G_Q_k = 2·A_kᵀ·G_R_k·A_kᵀ (double) and dot[k] = ⟨G_Q_k, Q0_k⟩. Shared: T (double), G_R (float)
   and A (float, row pitch n + 1: the second product reads A[b][j] with b along the lanes, which
   at pitch n would put a warp's 32 reads in one bank). */
__global__ __launch_bounds__(NT) void k_cay_bwd1(oft_cay s, const float *GR, double *GQ, double *dot) {
    extern __shared__ double smd[];
    const int n = (int)s.n, nn = n * n, pa = n + 1;
    double *T = smd;
    float *G = (float *)(T + nn), *A = G + nn;
    __shared__ double red[NT];
    const i64 k = blockIdx.x;
    for (int e = threadIdx.x; e < nn; e += NT) {
        A[(e / n) * pa + e % n] = s.A[k * nn + e];
        G[e] = GR[k * nn + e];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < nn; e += NT) { /* T = Aᵀ·G_R */
        int a = e / n, b = e % n;
        double acc = 0.0;
        for (int j = 0; j < n; j++) acc += (double)A[j * pa + a] * (double)G[j * n + b];
        T[e] = acc;
    }
    __syncthreads();
    double d = 0.0;
    for (int e = threadIdx.x; e < nn; e += NT) { /* G_Q = 2·T·Aᵀ */
        int a = e / n, b = e % n;
        double acc = 0.0;
        for (int j = 0; j < n; j++) acc += T[a * n + j] * (double)A[b * pa + j];
        GQ[k * nn + e] = 2.0 * acc;
        d += 2.0 * acc * (double)s.Q0[k * nn + e];
    }
    double tot = block_sum_d(d, red);
    if (threadIdx.x == 0) dot[k] = tot;
}

/* G_Q0 (constraint), G_B = G_Q0 − G_Q0ᵀ rounded once into gB. Grid-stride over all elements. */
__global__ __launch_bounds__(NT) void k_cay_bwd2(oft_cay s, const double *GQ, lk_blk gB) {
    const cay_scale cs = cay_scale_of(s.stat, s.kc);
    const double dot = s.stat[1];
    const double sc = cs.active ? s.kc / cs.nu : 1.0;
    const double c2 = cs.active && cs.q0norm > 0.0 ? s.kc / (cs.nu * cs.nu) * dot / cs.q0norm : 0.0;
    const i64 n = s.n, nn = s.nn, tot = s.nblk * nn;
    for (i64 i = (i64)blockIdx.x * NT + threadIdx.x; i < tot; i += (i64)gridDim.x * NT) {
        const i64 k = i / nn, e = i % nn, a = e / n, b = e % n, t = k * nn + b * n + a;
        double ga = GQ[i], gb = GQ[t];
        if (cs.active) {
            ga = sc * ga - c2 * (double)s.Q0[i];
            gb = sc * gb - c2 * (double)s.Q0[t];
        }
        st_elem((char *)blk_addr(gB, k / s.nb, k % s.nb, a, b), gB.dt, gB.flags & LK_UNALIGNED, (float)(ga - gb));
    }
}

static i64 grid_for(i64 n) {
    i64 b = cdiv(n, NT);
    if (b < 1) b = 1;
    return b > 65536 ? 65536 : b;
}

int oft_cay_free(oft_cay *s, cudaStream_t st) {
    int rc = lk_scratch_free(s->mem, st);
    s->mem = NULL;
    return rc;
}

int oft_cay_fwd(oft_cay *s, const lk_oft_args *a, int family, cudaStream_t st) {
    memset(s, 0, sizeof *s);
    s->nb = a->nb;
    s->nblk = a->M * a->nb;
    s->n = a->bs;
    s->nn = a->bs * a->bs;
    s->kc = a->kc;
    if (s->n < 1 || s->n > LK_OFT_MAX_BS || s->nblk < 1 || s->nblk > 0x7fffffff)
        return lyco_fail(LYCO_ERR_BACKEND, "cuda oft: %lld blocks of %lld×%lld are outside the Cayley kernel's range",
                         (long long)s->nblk, (long long)s->n, (long long)s->n);
    const i64 all = s->nblk * s->nn;
    size_t bytes = sizeof(double) * (size_t)(2 + s->nblk) + sizeof(float) * (size_t)(5 * all);
    int rc = lk_scratch_alloc(&s->mem, bytes, st);
    if (rc) return rc;
    s->stat = (double *)s->mem;
    s->part = s->stat + 2;
    s->Q0 = (float *)(s->part + s->nblk);
    s->A = s->Q0 + all;
    s->Rm1 = s->A + all;
    s->Op1 = s->Rm1 + all;
    s->Op2 = s->Op1 + all;
    if (s->kc > 0.0) {
        k_cay_part<<<(unsigned)s->nblk, NT, 0, st>>>(a->B, a->ct, s->nb, s->n, s->Q0, s->part);
        LK_LAUNCHED("oft cayley partial norms");
        k_sum_d2d<<<1, NT, 0, st>>>(s->part, s->nblk, s->stat);
        LK_LAUNCHED("oft cayley norm");
    }
    const int smem = (int)(sizeof(float) * (size_t)(5 * s->nn + s->n));
    LK_SMEM_OPTIN(smem, k_cay_fwd);
    lk_view mask = family == OFT_FAM_DIAG ? a->mask : lk_view{};
    /* 128 threads when there are more blocks than two per SM (BOFT's M·nb): 92 registers × 256
       threads allow 2 resident CUDA blocks per SM, 128 threads 5 (LYCO_CUDA_CAY_THREADS forces) */
    int nthr = s->nblk > 264 ? 128 : NT;
    const char *ev = getenv("LYCO_CUDA_CAY_THREADS");
    if (ev && (atoi(ev) == 128 || atoi(ev) == 256)) nthr = atoi(ev);
    k_cay_fwd<<<(unsigned)s->nblk, nthr, smem, st>>>(*s, family, (float)a->m, mask, a->B, a->ct);
    LK_LAUNCHED("oft cayley transform");
    return LYCO_OK;
}

int oft_cay_bwd(const oft_cay *s, const lk_oft_args *a, const float *GR, cudaStream_t st) {
    const i64 all = s->nblk * s->nn;
    void *mem = NULL;
    int rc = lk_scratch_alloc(&mem, sizeof(double) * (size_t)(all + s->nblk), st);
    if (rc) return rc;
    double *GQ = (double *)mem, *dot = GQ + all;
    const int smem = (int)(sizeof(double) * (size_t)s->nn + sizeof(float) * (size_t)(2 * s->nn + s->n));
    cudaError_t e = cudaFuncSetAttribute(k_cay_bwd1, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess) {
        k_cay_bwd1<<<(unsigned)s->nblk, NT, smem, st>>>(*s, GR, GQ, dot);
        k_sum_d2d<<<1, NT, 0, st>>>(dot, s->nblk, s->stat + 1);
        k_cay_bwd2<<<(unsigned)grid_for(all), NT, 0, st>>>(*s, GQ, a->gB);
        e = cudaGetLastError();
    }
    rc = lk_scratch_free(mem, st);
    if (e != cudaSuccess)
        return lyco_fail(LYCO_ERR_BACKEND, "cuda: oft cayley adjoint failed: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    return rc;
}

/* ============================================================================================
 * fixed-order partial sums
 * ========================================================================================== */

__global__ __launch_bounds__(NT) void k_sum_grad(const float *part, i64 S, i64 n, float m, lk_view mask, float *GR) {
    for (i64 i = (i64)blockIdx.x * NT + threadIdx.x; i < n; i += (i64)gridDim.x * NT) {
        double acc = 0.0;
        for (i64 s = 0; s < S; s++) acc += (double)part[s * n + i];
        float g = (float)acc;
        GR[i] = mask.p ? m * g * vload(mask, 0, i) : m * g;
    }
}

__global__ __launch_bounds__(NT) void k_sum_rho(const float *part, i64 S, i64 O, lk_view grho) {
    for (i64 o = (i64)blockIdx.x * NT + threadIdx.x; o < O; o += (i64)gridDim.x * NT) {
        double acc = 0.0;
        for (i64 s = 0; s < S; s++) acc += (double)part[s * O + o];
        vstore(grho, 0, o, (float)acc);
    }
}

int oft_sum_grad(const float *part, i64 S, i64 n, double m, const lk_view *mask, float *GR, cudaStream_t st) {
    k_sum_grad<<<(unsigned)grid_for(n), NT, 0, st>>>(part, S, n, (float)m, mask ? *mask : lk_view{}, GR);
    LK_LAUNCHED("oft gradient sum");
    return LYCO_OK;
}

int oft_sum_rho(const float *part, i64 S, i64 O, const lk_view *grho, cudaStream_t st) {
    k_sum_rho<<<(unsigned)grid_for(O), NT, 0, st>>>(part, S, O, *grho);
    LK_LAUNCHED("oft rescale gradient sum");
    return LYCO_OK;
}

/* ============================================================================================
 * Diag-OFT passes
 * ========================================================================================== */

#define DR 64            /* max rows of a tile */
#define DTW 64           /* columns of a tile */
#define DLD (DTW + 1)    /* row pitch of the shared tiles (DR == DTW, so one pitch serves both) */
#define DTILE (DR * DLD)

typedef struct {
    lk_oft_args a;
    const float *Mf, *Mm;   /* M, M − I (nb·bs·bs) */
    i64 g, ntc;             /* blocks per row tile, column tiles */
} doft_k;

struct doft_tile {
    i64 k0, kb, o0, nr;     /* first block, blocks, first row, rows */
};
__device__ __forceinline__ doft_tile doft_tile_of(const doft_k &P, i64 rt) {
    doft_tile t;
    t.k0 = rt * P.g;
    t.kb = P.a.nb - t.k0 < P.g ? P.a.nb - t.k0 : P.g;
    t.o0 = t.k0 * P.a.bs;
    t.nr = t.kb * P.a.bs;
    return t;
}

/* S[rr][cc] = RN_CT(v(o0 + rr, j0 + cc)), 0 outside nr × w */
__device__ void tile_in(float *S, const lk_rows &v, i64 o0, i64 nr, i64 j0, i64 w, int ct) {
    const bool chfast = v.sc == 1;
    for (int idx = threadIdx.x; idx < DR * DTW; idx += NT) {
        const int rr = chfast ? idx % DR : idx / DTW, cc = chfast ? idx / DR : idx % DTW;
        S[rr * DLD + cc] = rr < nr && cc < w ? round_to(rows_load(v, o0 + rr, j0 + cc), ct) : 0.0f;
    }
}
__device__ void tile_out(const float *S, const lk_rows &v, i64 o0, i64 nr, i64 j0, i64 w) {
    const bool chfast = v.sc == 1;
    for (int idx = threadIdx.x; idx < DR * DTW; idx += NT) {
        const int rr = chfast ? idx % DR : idx / DTW, cc = chfast ? idx / DR : idx % DTW;
        if (rr < nr && cc < w) rows_store(v, o0 + rr, j0 + cc, S[rr * DLD + cc]);
    }
}
/* C[ν][μ] (tile coordinates) = Op_k[ν][μ] for the tile's blocks; other entries are never read */
__device__ void op_in(float *C, const float *Op, const doft_tile &t, i64 bs) {
    const i64 nn = bs * bs, tot = t.kb * nn;
    for (i64 e = threadIdx.x; e < tot; e += NT) {
        const i64 kk = e / nn, rem = e % nn, a = rem / bs, b = rem % bs;
        C[(kk * bs + a) * DLD + kk * bs + b] = Op[t.k0 * nn + e];
    }
}

/* The forward's epilogue for one output (every forward kernel): delta ρ·acc + (ρ − 1)·x, else ρ·acc,
   or acc when there is no ρ. */
__device__ __forceinline__ float doft_epi(const lk_oft_args &a, float pr, float acc, float x) {
    return a.delta ? fmaf(pr, acc, (pr - 1.0f) * x) : (a.rho.p ? pr * acc : acc);
}

/* Y = rows(X) (delta: rows(X) − X); grid (column tiles, row tiles) */
__global__ __launch_bounds__(NT) void k_doft_fwd(doft_k P) {
    __shared__ float Cs[DTILE], Xs[DTILE];
    const lk_oft_args &a = P.a;
    const doft_tile t = doft_tile_of(P, blockIdx.y);
    const i64 j0 = (i64)blockIdx.x * DTW, w = a.ncol - j0 < DTW ? a.ncol - j0 : DTW, bs = a.bs;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    op_in(Cs, a.delta ? P.Mm : P.Mf, t, bs);
    tile_in(Xs, a.X, t.o0, t.nr, j0, w, a.ct);
    __syncthreads();
    float acc[4][4];
#pragma unroll
    for (int p = 0; p < 4; p++) {
#pragma unroll
        for (int q = 0; q < 4; q++) acc[p][q] = 0.0f;
        const int r = ty + 16 * p;
        if (r >= t.nr) continue;
        const int lo = (int)((r / bs) * bs);
        for (int kc = lo; kc < lo + bs; kc++) {
            const float c = Cs[kc * DLD + r];
#pragma unroll
            for (int q = 0; q < 4; q++) acc[p][q] = fmaf(c, Xs[kc * DLD + tx + 16 * q], acc[p][q]);
        }
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < 4; p++) {
        const int r = ty + 16 * p;
        if (r >= t.nr) continue;
        const float pr = rho_ct(a.rho, t.o0 + r, a.ct);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int c = tx + 16 * q;
            Xs[r * DLD + c] = doft_epi(a, pr, acc[p][q], Xs[r * DLD + c]);
        }
    }
    __syncthreads();
    tile_out(Xs, a.Y, t.o0, t.nr, j0, w);
}

/* ---------------------------------------------------------------------------------------------
 * Column kernels (bs ∈ {8, 16, 32}): a thread owns one column j of one block k and keeps the
 * block's bs inputs and bs outputs in registers; the block's operator (bs×bs fp32) sits in shared
 * memory and is read as warp-wide broadcast float4s (every lane of a CUDA block works on the same
 * block k). Per output the same ν-ordered fmaf chain and epilogue as k_doft_fwd (bitwise equal).
 * No tile staging: the loads are per element (lanes along j: coalesced for row-major W; for the
 * channel-fast y0 each thread reads bs contiguous channels), so every layout takes the same code.
 * ------------------------------------------------------------------------------------------- */
#define DC_NT 128        /* threads (columns) of a column-kernel block */

/* columns per CUDA block: DC_NT × passes, passes chosen for ≥ ~4 blocks per SM */
static i64 doft_col_passes(i64 ncol, i64 nb, int sms) {
    i64 want = 4 * (i64)(sms > 0 ? sms : 132);
    i64 p = ncol * nb / (DC_NT * (want > 0 ? want : 1));
    return p < 1 ? 1 : p > 8 ? 8 : p;
}

/* True when v's B channels of every column are contiguous and 16-byte aligned (the channel-fast
   y0 / dy of a linear bypass): the column kernels then move them as 16-byte vectors. */
__host__ __device__ static inline bool col_vec_ok(const lk_rows &v, int B) {
    if (!v.p || v.sc != 1 || v.SP != 1 || (v.flags & LK_UNALIGNED)) return false;
    const long long es = v.dt == DT_F32 ? 4 : 2;
    return ((unsigned long long)(uintptr_t)v.p % 16 == 0) && (v.sn * es) % 16 == 0 && (B * es) % 16 == 0;
}

/* x[ν] = RN_CT(v(o0 + ν, j)); vec: col_vec_ok(v) */
template <int B>
__device__ __forceinline__ void col_in(float (&x)[B], const lk_rows &v, i64 o0, i64 j, int ct, bool vec) {
    const char *p = rows_addr(v, o0, j);
    if (vec && v.dt == DT_F32) {
#pragma unroll
        for (int q = 0; q < B / 4; q++) {
            const float4 f = ((const float4 *)p)[q];
            x[4 * q] = round_to(f.x, ct);
            x[4 * q + 1] = round_to(f.y, ct);
            x[4 * q + 2] = round_to(f.z, ct);
            x[4 * q + 3] = round_to(f.w, ct);
        }
    } else if (vec) {
#pragma unroll
        for (int q = 0; q < B / 8; q++) {
            const uint4 u = ((const uint4 *)p)[q];
            const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int h = 0; h < 4; h++) {
                x[8 * q + 2 * h] = round_to(bits16_to_f(w[h] & 0xffffu, v.dt), ct);
                x[8 * q + 2 * h + 1] = round_to(bits16_to_f(w[h] >> 16, v.dt), ct);
            }
        }
    } else {
        const i64 step = v.sc * (i64)dt_size(v.dt);
        const bool un = v.flags & LK_UNALIGNED;
#pragma unroll
        for (int nu = 0; nu < B; nu++) x[nu] = round_to(ld_elem(p + nu * step, v.dt, un), ct);
    }
}

/* v(o0 + μ, j) = RN_dt(y[μ]); vec: col_vec_ok(v) */
template <int B> __device__ __forceinline__ void col_out(const lk_rows &v, i64 o0, i64 j, const float (&y)[B], bool vec) {
    char *p = (char *)rows_addr(v, o0, j);
    if (vec && v.dt == DT_F32) {
#pragma unroll
        for (int q = 0; q < B / 4; q++) ((float4 *)p)[q] = make_float4(y[4 * q], y[4 * q + 1], y[4 * q + 2], y[4 * q + 3]);
    } else if (vec) {
#pragma unroll
        for (int q = 0; q < B / 8; q++) {
            unsigned w[4];
#pragma unroll
            for (int h = 0; h < 4; h++) w[h] = f_to_bits(y[8 * q + 2 * h], v.dt) | (f_to_bits(y[8 * q + 2 * h + 1], v.dt) << 16);
            ((uint4 *)p)[q] = make_uint4(w[0], w[1], w[2], w[3]);
        }
    } else {
        const i64 step = v.sc * (i64)dt_size(v.dt);
        const bool un = v.flags & LK_UNALIGNED;
#pragma unroll
        for (int mu = 0; mu < B; mu++) st_elem(p + mu * step, v.dt, un, y[mu]);
    }
}

/* acc[c][μ] = Σ_ν Op[ν][μ]·x[c][ν] for NJ columns at once (each Op float4 serves NJ columns) */
template <int B, int NJ>
__device__ __forceinline__ void col_apply_n(float (&acc)[NJ][B], const float *Op, const float (&x)[NJ][B]) {
#pragma unroll
    for (int c = 0; c < NJ; c++)
#pragma unroll
        for (int mu = 0; mu < B; mu++) acc[c][mu] = 0.0f;
#pragma unroll
    for (int nu = 0; nu < B; nu++) {
        const float4 *row = (const float4 *)(Op + nu * B);
#pragma unroll
        for (int q = 0; q < B / 4; q++) {
            const float4 o = row[q];
#pragma unroll
            for (int c = 0; c < NJ; c++) {
                acc[c][4 * q] = fmaf(o.x, x[c][nu], acc[c][4 * q]);
                acc[c][4 * q + 1] = fmaf(o.y, x[c][nu], acc[c][4 * q + 1]);
                acc[c][4 * q + 2] = fmaf(o.z, x[c][nu], acc[c][4 * q + 2]);
                acc[c][4 * q + 3] = fmaf(o.w, x[c][nu], acc[c][4 * q + 3]);
            }
        }
    }
}

/* acc[μ] = Σ_ν Op[ν][μ]·x[ν] (ν ascending, fmaf from 0): col_apply_n for one column */
template <int B> __device__ __forceinline__ void col_apply(float (&acc)[B], const float *Op, const float (&x)[B]) {
    col_apply_n<B, 1>(reinterpret_cast<float (&)[1][B]>(acc), Op, reinterpret_cast<const float (&)[1][B]>(x));
}

/* True when two adjacent columns of v are one aligned 32-bit word per row (row-major 16-bit W). */
__host__ __device__ static inline bool col_pair_ok(const lk_rows &v) {
    return v.p && v.sn == 1 && v.SP == 1 && v.dt != DT_F32 && !(v.flags & LK_UNALIGNED) &&
           (unsigned long long)(uintptr_t)v.p % 4 == 0 && v.sc % 2 == 0;
}

/* x0[ν], x1[ν] = RN_CT(v(o0 + ν, j)), RN_CT(v(o0 + ν, j + 1)); col_pair_ok(v), j even */
template <int B>
__device__ __forceinline__ void col_in_pair(float (&x0)[B], float (&x1)[B], const lk_rows &v, i64 o0, i64 j, int ct) {
    const char *p = rows_addr(v, o0, j);
    const i64 step = v.sc * 2;
#pragma unroll
    for (int nu = 0; nu < B; nu++) {
        const unsigned u = *(const unsigned *)(p + nu * step);
        x0[nu] = round_to(bits16_to_f(u & 0xffffu, v.dt), ct);
        x1[nu] = round_to(bits16_to_f(u >> 16, v.dt), ct);
    }
}
template <int B> __device__ __forceinline__ void col_out_pair(const lk_rows &v, i64 o0, i64 j, const float (&y0)[B], const float (&y1)[B]) {
    char *p = (char *)rows_addr(v, o0, j);
    const i64 step = v.sc * 2;
#pragma unroll
    for (int mu = 0; mu < B; mu++) *(unsigned *)(p + mu * step) = f_to_bits(y0[mu], v.dt) | (f_to_bits(y1[mu], v.dt) << 16);
}

/* Forward; grid (column groups of DC_NT·NJ·passes, blocks k); a thread owns NJ columns of one
   block: with pair (NJ = 2, X and Y col_pair_ok) the adjacent columns 2t, 2t + 1 of the pass
   (one 32-bit word per row), otherwise t, t + DC_NT, … (lanes on consecutive columns). */
template <int B, int NJ>
__global__ __launch_bounds__(DC_NT) void k_doft_fwd_cols(doft_k P, int passes, int vin, int vout, int pair) {
    __shared__ __align__(16) float Ops[B * B];
    __shared__ float rs[B];
    const lk_oft_args &a = P.a;
    const i64 k = blockIdx.y, o0 = k * B;
    const float *Op = (a.delta ? P.Mm : P.Mf) + k * B * B;
    for (int e = threadIdx.x; e < B * B; e += DC_NT) Ops[e] = Op[e];
    for (int r = threadIdx.x; r < B; r += DC_NT) rs[r] = rho_ct(a.rho, o0 + r, a.ct);
    __syncthreads();
    for (int ps = 0; ps < passes; ps++) {
        const i64 base = ((i64)blockIdx.x * passes + ps) * DC_NT * NJ;
        const i64 j0 = pair ? base + 2 * (i64)threadIdx.x : base + threadIdx.x, dj = pair ? 1 : DC_NT;
        if (j0 >= a.ncol) return;
        const bool both = NJ == 2 && pair && j0 + 1 < a.ncol;
        float x[NJ][B], acc[NJ][B];
        if (both) {
            col_in_pair<B>(x[0], x[NJ - 1], a.X, o0, j0, a.ct);
        } else {
#pragma unroll
            for (int c = 0; c < NJ; c++) {
                const i64 j = j0 + c * dj;
                if (j < a.ncol) col_in<B>(x[c], a.X, o0, j, a.ct, vin);
                else
#pragma unroll
                    for (int nu = 0; nu < B; nu++) x[c][nu] = 0.0f;
            }
        }
        col_apply_n<B, NJ>(acc, Ops, x);
#pragma unroll
        for (int c = 0; c < NJ; c++)
#pragma unroll
            for (int mu = 0; mu < B; mu++) {
                const float pr = rs[mu];
                acc[c][mu] = doft_epi(a, pr, acc[c][mu], x[c][mu]);
            }
        if (both) {
            col_out_pair<B>(a.Y, o0, j0, acc[0], acc[NJ - 1]);
        } else {
#pragma unroll
            for (int c = 0; c < NJ; c++) {
                const i64 j = j0 + c * dj;
                if (j < a.ncol) col_out<B>(a.Y, o0, j, acc[c], vout);
            }
        }
    }
}

template <int B, int NJ> static int doft_fwd_cols_nj(const doft_k *P, const lk_device *dev, cudaStream_t st) {
    const int pair = NJ == 2 && col_pair_ok(P->a.X) && col_pair_ok(P->a.Y);
    const i64 passes = doft_col_passes(cdiv(P->a.ncol, NJ), P->a.nb, dev ? dev->sms : 0);
    const i64 gx = cdiv(P->a.ncol, DC_NT * NJ * passes);
    k_doft_fwd_cols<B, NJ><<<dim3((unsigned)gx, (unsigned)P->a.nb), DC_NT, 0, st>>>(*P, (int)passes, col_vec_ok(P->a.X, B),
                                                                                  col_vec_ok(P->a.Y, B), pair);
    LK_LAUNCHED("diag-oft forward (column kernel)");
    return LYCO_OK;
}

/* columns per thread: 2 (LYCO_CUDA_OFT_NJ=1 selects 1, for A/B) */
/* ---------------------------------------------------------------------------------------------
 * Staged forward for row-major 16-bit X with 16-byte aligned rows (merge's W̄), as a small GEMM
 * per block k: Y_k = Op_kᵀ·X_k (B × B times B × ncol). A CUDA block owns block k's B rows over a
 * run of tiles of TC = 8192/B columns, fetched by cp.async into a two-stage ring (the next tile in
 * flight while this one is computed). A thread owns an 8 × 8 output tile (rows μ0..μ0+7, columns
 * c0..c0+7): per ν one 16-byte read of x (eight 16-bit values, widened; X's values are exact in
 * the compute dtype, which is X's own or fp32) and two float4 reads of Op — 0.25 shared-memory
 * floats per FMA, which keeps the FMA pipe the limit (the one-column kernels read one Op float
 * per 1–2 FMAs and were bound by shared-memory bandwidth: 88–150 µs at 4096², B 32). Per output
 * the same ν-ordered fmaf chain and epilogue as k_doft_fwd (bitwise). Shared memory: 32 KB of
 * ring + B² floats.
 * ------------------------------------------------------------------------------------------- */
__host__ __device__ static inline bool doft_staged_ok(const lk_rows &v) {
    return v.p && v.sn == 1 && v.SP == 1 && v.dt != DT_F32 && !(v.flags & LK_UNALIGNED) &&
           (unsigned long long)(uintptr_t)v.p % 16 == 0 && (v.sc * 2) % 16 == 0;
}

/* channel-fast 16-bit operand with 16-byte aligned blocks of B channels (the bypass's y0 / dy) */
__host__ __device__ static inline bool doft_cf_ok(const lk_rows &v, int B) {
    return col_vec_ok(v, B) && v.dt != DT_F32;
}

/* cp.async of the tile (columns j0 .. j0 + TC − 1) of rows o0 .. o0 + B − 1 into dst (B rows of
   pitch PT 16-bit values), zero-filled past ncol; the caller commits */
template <int B, int TC, int PT = TC, int NTH = DC_NT>   /* NTH: the block's threads */
__device__ __forceinline__ void rows_issue(unsigned short *dst, const lk_rows &v, i64 o0, i64 j0, i64 ncol) {
    constexpr int CH = TC / 8, N = B * CH;   /* 16-byte chunks per row, per tile */
#pragma unroll
    for (int q = 0; q < (N + NTH - 1) / NTH; q++) {
        const int e = q * NTH + threadIdx.x;
        if (N % NTH != 0 && e >= N) break;
        const int r = e / CH, c = (e % CH) * 8;
        const i64 j = j0 + c, left = ncol - j;
        const int bytes = left >= 8 ? 16 : left > 0 ? (int)left * 2 : 0;
        cp_async16(dst + r * PT + c, bytes > 0 ? rows_addr(v, o0 + r, j) : (const char *)v.p, bytes);
    }
}

/* eight 16-bit values (one uint4) widened to fp32 */
__device__ __forceinline__ void widen8(float (&x)[8], uint4 u, int dt) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int h = 0; h < 4; h++) {
        x[2 * h] = bits16_to_f(w[h] & 0xffffu, dt);
        x[2 * h + 1] = bits16_to_f(w[h] >> 16, dt);
    }
}

template <int B> __global__ __launch_bounds__(DC_NT, 3) void k_doft_fwd_staged(doft_k P, int tiles, int vout) {
    constexpr int TC = 8192 / B, G = B / 8;   /* columns per tile; 8-row groups */
    __shared__ __align__(16) float Ops[B * B];
    __shared__ __align__(16) unsigned short Xs[2][B * TC];
    __shared__ float rs[B];
    const lk_oft_args &a = P.a;
    const i64 k = blockIdx.y, o0 = k * B, t0 = (i64)blockIdx.x * tiles, ntile = cdiv(a.ncol, TC);
    const i64 nt = ntile - t0 < tiles ? ntile - t0 : tiles;
    rows_issue<B, TC>(Xs[0], a.X, o0, t0 * TC, a.ncol);
    cp_commit();
    const float *Op = (a.delta ? P.Mm : P.Mf) + k * B * B;
    for (int e = threadIdx.x; e < B * B; e += DC_NT) Ops[e] = Op[e];
    const int g = threadIdx.x % G, mu0 = 8 * g, c0 = 8 * (threadIdx.x / G), dt = a.X.dt;
    for (int r = threadIdx.x; r < B; r += DC_NT) rs[r] = rho_ct(a.rho, o0 + r, a.ct);
    for (i64 it = 0; it < nt; it++) {
        if (it + 1 < nt) {
            rows_issue<B, TC>(Xs[(it + 1) & 1], a.X, o0, (t0 + it + 1) * TC, a.ncol);
            cp_commit();
            cp_wait(1);
        } else {
            cp_wait(0);
        }
        __syncthreads();
        const unsigned short *xs = Xs[it & 1];
        float acc[8][8];   /* [μ − μ0][column − c0] */
#pragma unroll
        for (int m = 0; m < 8; m++)
#pragma unroll
            for (int c = 0; c < 8; c++) acc[m][c] = 0.0f;
#pragma unroll 2
        for (int nu = 0; nu < B; nu++) {
            float x[8];
            widen8(x, *(const uint4 *)(xs + nu * TC + c0), dt);
            const float4 oa = *(const float4 *)(Ops + nu * B + mu0), ob = *(const float4 *)(Ops + nu * B + mu0 + 4);
            const float o[8] = {oa.x, oa.y, oa.z, oa.w, ob.x, ob.y, ob.z, ob.w};
#pragma unroll
            for (int m = 0; m < 8; m++)
#pragma unroll
                for (int c = 0; c < 8; c++) acc[m][c] = fmaf(o[m], x[c], acc[m][c]);
        }
        const i64 j = (t0 + it) * TC + c0;
#pragma unroll
        for (int m = 0; m < 8; m++) {
            float x[8];
            widen8(x, *(const uint4 *)(xs + (mu0 + m) * TC + c0), dt);
            const float pr = rs[mu0 + m];
#pragma unroll
            for (int c = 0; c < 8; c++)
                acc[m][c] = doft_epi(a, pr, acc[m][c], x[c]);
            char *yp = (char *)rows_addr(a.Y, o0 + mu0 + m, j < a.ncol ? j : 0);
            if (vout && j + 8 <= a.ncol) {
                unsigned w[4];
#pragma unroll
                for (int h = 0; h < 4; h++) w[h] = f_to_bits(acc[m][2 * h], a.Y.dt) | (f_to_bits(acc[m][2 * h + 1], a.Y.dt) << 16);
                *(uint4 *)yp = make_uint4(w[0], w[1], w[2], w[3]);
            } else {
                const i64 step = a.Y.sn * (i64)dt_size(a.Y.dt);
#pragma unroll
                for (int c = 0; c < 8; c++)
                    if (j + c < a.ncol) st_elem(yp + c * step, a.Y.dt, a.Y.flags & LK_UNALIGNED, acc[m][c]);
            }
        }
        __syncthreads();   /* this stage is refilled by the next iteration's issue */
    }
}

template <int B> static int doft_fwd_staged_launch(const doft_k *P, const lk_device *dev, cudaStream_t st) {
    const i64 TC = 8192 / B, ntile = cdiv(P->a.ncol, TC);
    i64 tiles = ntile * P->a.nb / (4 * (i64)(dev && dev->sms > 0 ? dev->sms : 132));   /* ≥ ~4 blocks per SM */
    if (tiles < 1) tiles = 1;
    if (tiles > 8) tiles = 8;
    const i64 gx = cdiv(ntile, tiles);
    k_doft_fwd_staged<B><<<dim3((unsigned)gx, (unsigned)P->a.nb), DC_NT, 0, st>>>(*P, (int)tiles, doft_staged_ok(P->a.Y) /* 8 columns = one 16-byte store */);
    LK_LAUNCHED("diag-oft forward (staged kernel)");
    return LYCO_OK;
}

/* ---------------------------------------------------------------------------------------------
 * The same forward on the tensor cores, for bf16 X and a 16-bit Y (row-major, 16-byte aligned
 * rows) at B = 16 or 32: Y_k = Op_kᵀ·X_k with Op_k (fp32) in three bf16 parts P0 + P1 + P2
 * (P0 = RN(Op), P1 = RN(Op − P0), P2 = RN(Op − P0 − P1): Op to ~2⁻²⁴ relative) and X exact in
 * bf16, so each part's products are exact and the fp32 accumulators (mma.sync m16n8k16, parts
 * smallest first) carry fp32-level sums — far below a 16-bit output's rounding, where the FFMA
 * kernel above is bound by its 2·B FFMA per output (H200, 4096², B 32: 79 µs against ~14 µs of
 * bytes). A CUDA block owns block k's B rows over a run of tiles of TC = 256 columns (cp.async
 * ring, DT_S stages: the next two tiles in flight); warp w the tile's columns 32w … 32w + 31: it
 * multiplies, applies the epilogue (ρ, delta) to its accumulators, writes the results over its own
 * columns of the staged X tile (each element read, as x for the delta, by the thread that
 * overwrites it) and stores them from there in 16-byte chunks. Per output the results differ from
 * the FFMA chain's in the last fp32 bits only (the chains are regrouped), not in kind.
 * Shared memory (dynamic): 3 × B × 264 bf16 (ring: two tiles in flight while one is computed) +
 * 3 × B × (B + 8) bf16 (parts) + B floats.
 * LYCO_CUDA_OFT_TC=0 keeps the FFMA kernel (A/B).
 * ------------------------------------------------------------------------------------------- */
#define DT_TC 256          /* columns per tile */
#define DT_PT (DT_TC + 8)  /* ring row pitch (halfwords): ldmatrix rows in distinct bank groups */
#define DT_S 3             /* ring stages: two tiles in flight while one is computed */

/* Op_k (fp32 B × B, [ν][μ]) into three bf16 parts at Opp + p·B·PA ([ν][μ], pitch PA) */
template <int B, int PA> __device__ __forceinline__ void doft_parts(unsigned short *Opp, const float *Op) {
    for (int e = threadIdx.x; e < B * B; e += NT) {
        const int i = (e / B) * PA + e % B;
        const float v = Op[e], p0 = round_to(v, DT_BF16), r1 = v - p0, p1 = round_to(r1, DT_BF16);
        Opp[i] = (unsigned short)f_to_bits(p0, DT_BF16);
        Opp[B * PA + i] = (unsigned short)f_to_bits(p1, DT_BF16);
        Opp[2 * B * PA + i] = (unsigned short)f_to_bits(r1 - p1, DT_BF16);
    }
}

/* The ring's dynamic shared memory: DT_S stages of `stage` halfwords, the three parts, ρ. */
__host__ __device__ constexpr int doft_tc_bytes(int stage, int B) { return DT_S * stage * 2 + 3 * B * (B + 8) * 2 + B * 4; }

template <int B> __global__ __launch_bounds__(NT, 3) void k_doft_fwd_tc(doft_k P, int tiles) {
    constexpr int PA = B + 8, MI = B / 16, ST = B * DT_PT;
    extern __shared__ __align__(16) unsigned short dsm_oft[];
    unsigned short *Xs = dsm_oft, *Opp = Xs + DT_S * ST;
    float *rs = (float *)(Opp + 3 * B * PA);
    const lk_oft_args &a = P.a;
    const i64 k = blockIdx.y, o0 = k * B, t0 = (i64)blockIdx.x * tiles, ntile = cdiv(a.ncol, DT_TC);
    const i64 nt = ntile - t0 < tiles ? ntile - t0 : tiles;
    for (int st = 0; st < DT_S - 1; st++) {
        if (st < nt) rows_issue<B, DT_TC, DT_PT, NT>(Xs + st * ST, a.X, o0, (t0 + st) * DT_TC, a.ncol);
        cp_commit();
    }
    doft_parts<B, PA>(Opp, (a.delta ? P.Mm : P.Mf) + k * B * B);
    for (int r = threadIdx.x; r < B; r += NT) rs[r] = rho_ct(a.rho, o0 + r, a.ct);
    const int lane = threadIdx.x & 31, n0 = (threadIdx.x >> 5) * 32;
    for (i64 it = 0; it < nt; it++) {
        cp_wait(DT_S - 2);
        __syncthreads();   /* tile it landed; every thread is done with tile it − 1's stage */
        if (it + DT_S - 1 < nt) rows_issue<B, DT_TC, DT_PT, NT>(Xs + ((it + DT_S - 1) % DT_S) * ST, a.X, o0, (t0 + it + DT_S - 1) * DT_TC, a.ncol);
        cp_commit();
        unsigned short *xs = Xs + (it % DT_S) * ST;
        float acc[MI][4][4];
        acc_zero(acc);
#pragma unroll 1
        for (int p = 2; p >= 0; p--)
            warp_mma_ldm<bf16_t, MI, 4, true, true>::run(acc, (const bf16_t *)(Opp + p * B * PA), PA, (const bf16_t *)xs, DT_PT, 0, n0, B);
        __syncwarp();
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int h = 0; h < 2; h++) {   /* the pair (e = 2h, 2h + 1): one row, two columns */
                    const int mu = acc_row(0, mi, 2 * h), c = acc_col(n0, ni, 2 * h);
                    unsigned *w = (unsigned *)(xs + mu * DT_PT + c);
                    const unsigned xw = *w;
                    const float pr = rs[mu], y0 = doft_epi(a, pr, acc[mi][ni][2 * h], bits16_to_f(xw & 0xffffu, DT_BF16)),
                                y1 = doft_epi(a, pr, acc[mi][ni][2 * h + 1], bits16_to_f(xw >> 16, DT_BF16));
                    *w = f_to_bits(y0, a.Y.dt) | (f_to_bits(y1, a.Y.dt) << 16);
                }
        __syncwarp();
        const i64 jw = (t0 + it) * DT_TC + n0;
#pragma unroll
        for (int q = 0; q < B / 8; q++) {   /* B rows × 4 chunks of 8 columns over the 32 lanes */
            const int row = (lane >> 2) + 8 * q, c = (lane & 3) * 8;
            const i64 j = jw + c;
            const unsigned short *src = xs + row * DT_PT + n0 + c;
            if (j + 8 <= a.ncol) {
                *(uint4 *)rows_addr(a.Y, o0 + row, j) = *(const uint4 *)src;
            } else {
                for (int e = 0; e < 8 && j + e < a.ncol; e++)
                    *(unsigned short *)rows_addr(a.Y, o0 + row, j + e) = src[e];
            }
        }
    }
    cp_wait(0);
}

/* The tensor-core forward takes: B 16 or 32, bf16 X, a 16-bit Y, both row-major with 16-byte
   aligned rows, not turned off. */
static bool doft_tc_ok(const lk_oft_args *a) {
    return (a->bs == 16 || a->bs == 32) && a->X.dt == DT_BF16 && doft_staged_ok(a->X) && doft_staged_ok(a->Y) &&
           lk_env_int("LYCO_CUDA_OFT_TC", 1) != 0;
}

template <int B> static int doft_fwd_tc_launch(const doft_k *P, const lk_device *dev, cudaStream_t st) {
    const i64 ntile = cdiv(P->a.ncol, DT_TC);
    i64 tiles = ntile * P->a.nb / (4 * (i64)(dev && dev->sms > 0 ? dev->sms : 132));   /* ≥ ~4 blocks per SM */
    if (tiles < 1) tiles = 1;
    if (tiles > 8) tiles = 8;
    const i64 gx = cdiv(ntile, tiles);
    const int bytes = doft_tc_bytes(B * DT_PT, B);
    LK_SMEM_OPTIN(bytes, k_doft_fwd_tc<B>);
    k_doft_fwd_tc<B><<<dim3((unsigned)gx, (unsigned)P->a.nb), NT, bytes, st>>>(*P, (int)tiles);
    LK_LAUNCHED("diag-oft forward (tensor-core kernel)");
    return LYCO_OK;
}

/* Row-major 16-bit aligned X: the staged kernel (LYCO_CUDA_OFT_STAGED=0: the register-column
   kernel, for A/B); otherwise the register-column kernel, two adjacent columns per thread when X
   and Y pair, else one (the channel-fast y0 of a bypass: measured faster at one, 140 vs 266 µs).
   LYCO_CUDA_OFT_NJ=1/2 forces the columns per thread (A/B). */
template <int B> static int doft_fwd_cols_launch(const doft_k *P, const lk_device *dev, cudaStream_t st) {
    if ((B == 16 || B == 32) && doft_tc_ok(&P->a)) return doft_fwd_tc_launch<(B == 8 ? 16 : B)>(P, dev, st);
    if (doft_staged_ok(P->a.X) && lk_env_int("LYCO_CUDA_OFT_STAGED", 1) != 0) return doft_fwd_staged_launch<B>(P, dev, st);
    const int pair = col_pair_ok(P->a.X) && col_pair_ok(P->a.Y);
    const int nj = lk_env_int("LYCO_CUDA_OFT_NJ", pair ? 2 : 1);
    return nj == 1 ? doft_fwd_cols_nj<B, 1>(P, dev, st) : doft_fwd_cols_nj<B, 2>(P, dev, st);
}

/* The column kernels' range: bs 8, 16 or 32, nb within the grid's y, columns within its x. */
static bool doft_cols_take(const lk_oft_args *a) {
    static int generic = -1;
    if (generic < 0) {
        const char *e = getenv("LYCO_CUDA_OFT_GENERIC");
        generic = e && *e && strcmp(e, "0") != 0;
    }
    return !generic && (a->bs == 8 || a->bs == 16 || a->bs == 32) && a->nb <= 65535 && a->ncol / DC_NT < 0x7fffffff;
}

/* acc[ν] = Σ_μ Op[ν][μ]·g[μ] (μ ascending, fmaf from 0) */
template <int B> __device__ __forceinline__ float col_dot(const float *Op, int nu, const float (&g)[B]) {
    const float4 *row = (const float4 *)(Op + nu * B);
    float v = 0.0f;
#pragma unroll
    for (int q = 0; q < B / 4; q++) {
        const float4 c = row[q];
        v = fmaf(c.x, g[4 * q], v);
        v = fmaf(c.y, g[4 * q + 1], v);
        v = fmaf(c.z, g[4 * q + 2], v);
        v = fmaf(c.w, g[4 * q + 3], v);
    }
    return v;
}

/* Backward; grid (S column groups of DC_NT·passes, blocks k). Per thread and column, with
   G'' = ρ ⊙ GY: z = MᵀX and G_ρ[μ] += GY[μ]·z[μ] (registers, summed over the block's threads in
   order at the end); GX[ν] = Σ_μ Op[ν][μ]·G''[μ] (+ (ρ − 1)·GY, delta); and, for G_M, X and G''
   staged per pass in shared memory ([column][row], pitch B + 4) where threads own 8 outputs
   (ν, μ0..μ0+7) of G_M over one of H = 1024/B² column groups, summed over the passes in
   registers and over the groups in order at the end. gpart: S × nb·B², rpart: S × O. */
template <int B>
__global__ __launch_bounds__(DC_NT) void k_doft_bwd_cols(doft_k P, int passes, int want_b, int want_rho, float *gpart,
                                                       float *rpart, int vx, int vgy, int vgx) {
    constexpr int XP = B + 4, NO = B * B / 8, H = DC_NT / NO, CH = DC_NT / H;
    __shared__ __align__(16) float Om[B * B], Oc[B * B], Xs[DC_NT * XP], Gs[DC_NT * XP];
    __shared__ float rs[B];
    const lk_oft_args &a = P.a;
    const i64 k = blockIdx.y, o0 = k * B;
    const int t = threadIdx.x;
    const bool want_gx = a.GX.p != NULL;
    for (int e = t; e < B * B; e += DC_NT) {
        Om[e] = P.Mf[k * B * B + e];
        Oc[e] = (a.delta ? P.Mm : P.Mf)[k * B * B + e];
    }
    for (int r = t; r < B; r += DC_NT) rs[r] = rho_ct(a.rho, o0 + r, a.ct);
    __syncthreads();
    const int gh = t / NO, gw = t % NO, gnu = gw / (B / 8), gmu = (gw % (B / 8)) * 8;
    float racc[B], gacc[8];
#pragma unroll
    for (int mu = 0; mu < B; mu++) racc[mu] = 0.0f;
#pragma unroll
    for (int q = 0; q < 8; q++) gacc[q] = 0.0f;
    for (int ps = 0; ps < passes; ps++) {
        const i64 j = ((i64)blockIdx.x * passes + ps) * DC_NT + t;
        float g[B];
        if (j < a.ncol) {
            float z[B];
            if (want_b || want_rho) {
                float x[B];
                col_in<B>(x, a.X, o0, j, a.ct, vx);
                if (want_b)
#pragma unroll
                    for (int q = 0; q < B / 4; q++)
                        *(float4 *)(Xs + t * XP + 4 * q) = make_float4(x[4 * q], x[4 * q + 1], x[4 * q + 2], x[4 * q + 3]);
                if (want_rho) col_apply<B>(z, Om, x);
            }
            col_in<B>(g, a.GY, o0, j, a.ct, vgy);
#pragma unroll
            for (int mu = 0; mu < B; mu++) {
                if (want_rho) racc[mu] = fmaf(g[mu], z[mu], racc[mu]);
                g[mu] = rs[mu] * g[mu];
            }
            if (want_b)
#pragma unroll
                for (int q = 0; q < B / 4; q++)
                    *(float4 *)(Gs + t * XP + 4 * q) = make_float4(g[4 * q], g[4 * q + 1], g[4 * q + 2], g[4 * q + 3]);
            if (want_gx)   /* eight rows at a time (registers) */
#pragma unroll
                for (int q = 0; q < B / 8; q++) {
                    float gx[8];
#pragma unroll
                    for (int e = 0; e < 8; e++) gx[e] = col_dot<B>(Oc, 8 * q + e, g);
                    if (a.delta) {
                        float gy[8];
                        col_in<8>(gy, a.GY, o0 + 8 * q, j, a.ct, vgy);
#pragma unroll
                        for (int e = 0; e < 8; e++) gx[e] = fmaf(rs[8 * q + e] - 1.0f, gy[e], gx[e]);
                    }
                    col_out<8>(a.GX, o0 + 8 * q, j, gx, vgx);
                }
        } else if (want_b) {
#pragma unroll
            for (int q = 0; q < B / 4; q++) {
                *(float4 *)(Xs + t * XP + 4 * q) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                *(float4 *)(Gs + t * XP + 4 * q) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
        if (want_b) {   /* G_M[ν][μ] += Σ_c X[ν][c]·G''[μ][c] over this pass's columns of group gh */
            __syncthreads();
            for (int c = gh * CH; c < (gh + 1) * CH; c++) {
                const float xv = Xs[c * XP + gnu];
                const float4 g0 = *(const float4 *)(Gs + c * XP + gmu), g1 = *(const float4 *)(Gs + c * XP + gmu + 4);
                gacc[0] = fmaf(xv, g0.x, gacc[0]);
                gacc[1] = fmaf(xv, g0.y, gacc[1]);
                gacc[2] = fmaf(xv, g0.z, gacc[2]);
                gacc[3] = fmaf(xv, g0.w, gacc[3]);
                gacc[4] = fmaf(xv, g1.x, gacc[4]);
                gacc[5] = fmaf(xv, g1.y, gacc[5]);
                gacc[6] = fmaf(xv, g1.z, gacc[6]);
                gacc[7] = fmaf(xv, g1.w, gacc[7]);
            }
            __syncthreads();
        }
    }
    if (want_rho) {   /* Σ over the block's threads, in thread order */
#pragma unroll
        for (int mu = 0; mu < B; mu++) Xs[t * XP + mu] = racc[mu];
        __syncthreads();
        if (t < B) {
            float v = 0.0f;
            for (int u = 0; u < DC_NT; u++) v += Xs[u * XP + t];
            rpart[blockIdx.x * a.O + o0 + t] = v;
        }
        __syncthreads();
    }
    if (want_b) {     /* Σ over the H column groups, in order */
        float *gp = gpart + (i64)blockIdx.x * a.nb * B * B + k * B * B;
        if (H == 1) {
#pragma unroll
            for (int q = 0; q < 8; q++) gp[gnu * B + gmu + q] = gacc[q];
        } else {
#pragma unroll
            for (int q = 0; q < 8; q++) Gs[t * 8 + q] = gacc[q];
            __syncthreads();
            for (int e = t; e < NO * 8; e += DC_NT) {
                float v = 0.0f;
                for (int h = 0; h < H; h++) v += Gs[(h * NO) * 8 + e];
                const int w = e / 8, q = e % 8;
                gp[(w / (B / 8)) * B + (w % (B / 8)) * 8 + q] = v;
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Staged backward without ∂L/∂X (merge: W̄ and d_out row-major 16-bit with aligned rows), B 16 or
 * 32. Both gradients come from one reduction per block k, H_k = X_k·GY_kᵀ (B × B over all
 * columns): G_M[ν][μ] = ρ[μ]·H[ν][μ] (G'' = ρ ⊙ GY) and G_ρ[μ] = Σ_ν M[ν][μ]·H[ν][μ]
 * (= Σ_c GY[μ][c]·(MᵀX)[μ][c]) — half the FMAs of forming MᵀX per element, and the FMAs run
 * from registers: a thread owns a 4 × 4 set of H (rows strided by B/4) over one of H column
 * slices of each tile and reads eight columns of its 4 + 4 rows per 16-byte load (one
 * shared-memory byte per FMA).
 * Grid (S splits of the columns, nb); tiles of DH_TC columns of X and GY by cp.async into a
 * two-stage ring (row pitch DH_TC + 8 16-bit values: the eight rows a warp reads at one column
 * offset fall in distinct banks). Each split writes its partials gpart[s] = ρ ⊙ H_s and
 * rpart[s] = Σ_ν M ⊙ H_s (the halves of a block added in slice order); oft_sum_grad / oft_sum_rho
 * add the splits in order, as for the other kernels. Deterministic, no atomics.
 * ------------------------------------------------------------------------------------------- */
#define DH_TC 128

/* Hs = Σ over the NS slices (in slice order) of each thread's 4 × 4 set of H, rows
   gn + i·B/4, columns gm + j·B/4; all threads; ends synchronised */
template <int B, int NS>
__device__ __forceinline__ void dh_combine(float *Hs, int h, int gn, int gm, const float (&acc)[4][4]) {
    for (int hh = 0; hh < NS; hh++) {
        if (h == hh)
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    float *hp = Hs + (gn + i * (B / 4)) * B + gm + j * (B / 4);
                    *hp = hh == 0 ? acc[i][j] : *hp + acc[i][j];
                }
        __syncthreads();
    }
}

/* This split's partials from the block's H (shared, complete): gpart[s] = ρ ⊙ H, rpart[s] = Σ_ν M ⊙ H */
template <int B>
__device__ __forceinline__ void dh_finish(const doft_k &P, const float *Hs, i64 k, int want_b, int want_rho, float *gpart,
                                          float *rpart) {
    const lk_oft_args &a = P.a;
    const i64 o0 = k * B;
    if (want_b) {
        float *gp = gpart + (i64)blockIdx.x * a.nb * B * B + k * B * B;
        for (int e = threadIdx.x; e < B * B; e += DC_NT) gp[e] = rho_ct(a.rho, o0 + e % B, a.ct) * Hs[e];
    }
    if (want_rho)
        for (int mu = threadIdx.x; mu < B; mu += DC_NT) {
            const float *Mk = P.Mf + k * B * B;
            float v = 0.0f;
            for (int nu = 0; nu < B; nu++) v = fmaf(Mk[nu * B + mu], Hs[nu * B + mu], v);
            rpart[blockIdx.x * a.O + o0 + mu] = v;
        }
}

template <int B> __global__ __launch_bounds__(DC_NT) void k_doft_h(doft_k P, int tiles, int want_b, int want_rho,
                                                                   float *gpart, float *rpart) {
    constexpr int TC = DH_TC, PT = TC + 8, THR = (B / 4) * (B / 4), H = DC_NT / THR, SL = TC / H;
    static_assert(SL % 8 == 0, "column slices of whole 16-byte chunks");
    __shared__ __align__(16) unsigned short Xs[2][B * PT], Ys[2][B * PT];
    __shared__ float Hs[B * B];
    const lk_oft_args &a = P.a;
    const i64 k = blockIdx.y, o0 = k * B, t0 = (i64)blockIdx.x * tiles, ntile = cdiv(a.ncol, TC);
    const i64 nt = ntile - t0 < tiles ? ntile - t0 : tiles;
    rows_issue<B, TC, TC + 8>(Xs[0], a.X, o0, t0 * TC, a.ncol);
    rows_issue<B, TC, TC + 8>(Ys[0], a.GY, o0, t0 * TC, a.ncol);
    cp_commit();
    /* rows ν = gν + i·B/4, μ = gμ + j·B/4: the rows a warp reads at one offset are consecutive
       (distinct banks at pitch PT) */
    const int h = threadIdx.x / THR, w = threadIdx.x % THR, gn = w / (B / 4), gm = w % (B / 4);
    const int dx = a.X.dt, dy = a.GY.dt;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (i64 it = 0; it < nt; it++) {
        if (it + 1 < nt) {
            rows_issue<B, TC, TC + 8>(Xs[(it + 1) & 1], a.X, o0, (t0 + it + 1) * TC, a.ncol);
            rows_issue<B, TC, TC + 8>(Ys[(it + 1) & 1], a.GY, o0, (t0 + it + 1) * TC, a.ncol);
            cp_commit();
            cp_wait(1);
        } else {
            cp_wait(0);
        }
        __syncthreads();
        const unsigned short *xs = Xs[it & 1], *ys = Ys[it & 1];
#pragma unroll 1
        for (int c = h * SL; c < (h + 1) * SL; c += 8) {
            float xv[4][8], yv[4][8];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                widen8(xv[i], *(const uint4 *)(xs + (gn + i * (B / 4)) * PT + c), dx);
                widen8(yv[i], *(const uint4 *)(ys + (gm + i * (B / 4)) * PT + c), dy);
            }
#pragma unroll
            for (int e = 0; e < 8; e++)
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) acc[i][j] = fmaf(xv[i][e], yv[j][e], acc[i][j]);
        }
        __syncthreads();   /* this stage is refilled by the next iteration's issue */
    }
    /* the slices' partials added in slice order, then the two gradient partials of this split */
    dh_combine<B, H>(Hs, h, gn, gm, acc);
    dh_finish<B>(P, Hs, k, want_b, want_rho, gpart, rpart);
}

/* ---------------------------------------------------------------------------------------------
 * Bypass backward for channel-fast y0 / dy / dy0 (token rows of O contiguous 16-bit channels,
 * 16-byte aligned), B 16 or 32, in one kernel. Grid (S splits of the tokens, nb); tiles of
 * TT = 2048/B tokens of y0 and dy by cp.async into a two-stage ring, widened once per tile into
 * fp32 channel-major tiles xT[ν][t], gT[μ][t] (pitch TT + 4). Per tile:
 *   dy0[t][ν] = Σ_μ (M or M − I)[ν][μ]·ρ[μ]·dy[t][μ] (+ (ρ[ν] − 1)·dy[t][ν], delta): a thread
 *     owns 4 channels × 4 tokens, one float4 of the ρ-scaled transposed operator and one of gT
 *     per 16 FMAs (ρ folded into the operator: the product order differs from the column
 *     kernel's (ρ·dy)·M by one rounding);
 *   H += Σ_t y0[t][ν]·dy[t][μ]: a thread owns a 4 × 4 set of H (rows strided by B/4) over one
 *     of (128/(B/4)²) token slices; G_M and G_ρ from H as k_doft_h (dh_finish).
 * Shared memory: 2 × 2 raw tiles (16 KB) + 2 fp32 tiles + the operator, ~38 KB.
 * ------------------------------------------------------------------------------------------- */
template <int B, int TT = 2048 / B>
__device__ __forceinline__ void dcf_issue(unsigned short *dst, const lk_rows &v, i64 o0, i64 t0, i64 ncol) {
    constexpr int CH = B / 8, N = TT * CH;
#pragma unroll
    for (int q = 0; q < N / DC_NT; q++) {
        const int e = q * DC_NT + threadIdx.x;
        const int t = e / CH, c = (e % CH) * 8;
        const bool in = t0 + t < ncol;
        cp_async16(dst + t * B + c, in ? rows_addr(v, o0 + c, t0 + t) : (const char *)v.p, in ? 16 : 0);
    }
}

/* Channel-fast tile helpers (k_doft_bwd_cf, k_doft_fwd_cf). */
/* dst[c][t] (pitch PF) = the raw tile's token rows widened to fp32: lanes on consecutive tokens */
template <int B, int TT, int PF>
__device__ __forceinline__ void cf_widen_t(float *dst, const unsigned short *raw, int dt) {
#pragma unroll
    for (int q = 0; q < TT * B / 8 / DC_NT; q++) {
        const int e = q * DC_NT + threadIdx.x, t = e % TT, c = (e / TT) * 8;
        float v[8];
        widen8(v, *(const uint4 *)(raw + t * B + c), dt);
#pragma unroll
        for (int i = 0; i < 8; i++) dst[(c + i) * PF + t] = v[i];
    }
}
/* acc[i][j] = Σ_k A[k·B + r0 + i]·XT[k·PF + t0 + j], k ascending, fmaf from 0 */
template <int B, int PF>
__device__ __forceinline__ void cf_gemm4(float (&acc)[4][4], const float *A, const float *XT, int r0, int t0) {
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
#pragma unroll 4
    for (int k = 0; k < B; k++) {
        const float4 o = *(const float4 *)(A + k * B + r0), x = *(const float4 *)(XT + k * PF + t0);
        const float ov[4] = {o.x, o.y, o.z, o.w}, xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] = fmaf(ov[i], xv[j], acc[i][j]);
    }
}
/* v(o0 + i, t + j) = RN(acc[i][j]) for the tokens t + j < ncol; vec: 16-bit, 8-byte stores */
__device__ __forceinline__ void cf_store4(const lk_rows &v, i64 o0, i64 t, i64 ncol, const float (&acc)[4][4], bool vec) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (t + j >= ncol) break;
        char *p = (char *)rows_addr(v, o0, t + j);
        if (vec) {
            *(uint2 *)p = make_uint2(f_to_bits(acc[0][j], v.dt) | (f_to_bits(acc[1][j], v.dt) << 16),
                                     f_to_bits(acc[2][j], v.dt) | (f_to_bits(acc[3][j], v.dt) << 16));
        } else {
            const i64 step = v.sc * (i64)dt_size(v.dt);
#pragma unroll
            for (int i = 0; i < 4; i++) st_elem(p + i * step, v.dt, v.flags & LK_UNALIGNED, acc[i][j]);
        }
    }
}

template <int B> __global__ __launch_bounds__(DC_NT) void k_doft_bwd_cf(doft_k P, int tiles, int want_b, int want_rho,
                                                                        float *gpart, float *rpart, int vgx) {
    constexpr int TT = 2048 / B, PF = TT + 4, THR = (B / 4) * (B / 4), HS = DC_NT / THR, SL = TT / HS;
    static_assert(TT * B / 8 == 2 * DC_NT && SL % 4 == 0, "tile shape");
    __shared__ __align__(16) unsigned short Xr[2][TT * B], Yr[2][TT * B];
    __shared__ __align__(16) float xT[B * PF], gT[B * PF], OpS[B * B], Hs[B * B];
    __shared__ float rs[B];
    const lk_oft_args &a = P.a;
    const i64 k = blockIdx.y, o0 = k * B, t0 = (i64)blockIdx.x * tiles, ntile = cdiv(a.ncol, TT);
    const i64 nt = ntile - t0 < tiles ? ntile - t0 : tiles;
    const bool want_gx = a.GX.p != NULL, want_h = want_b || want_rho;
    dcf_issue<B>(Xr[0], a.X, o0, t0 * TT, a.ncol);
    dcf_issue<B>(Yr[0], a.GY, o0, t0 * TT, a.ncol);
    cp_commit();
    for (int r = threadIdx.x; r < B; r += DC_NT) rs[r] = rho_ct(a.rho, o0 + r, a.ct);
    __syncthreads();
    const float *Cop = (a.delta ? P.Mm : P.Mf) + k * B * B;
    for (int e = threadIdx.x; e < B * B; e += DC_NT) {   /* OpS[μ][ν] = Cop[ν][μ]·ρ[μ] */
        const int mu = e / B, nu = e % B;
        OpS[e] = Cop[nu * B + mu] * rs[mu];
    }
    const int h = threadIdx.x / THR, w = threadIdx.x % THR, gn = w / (B / 4), gm = w % (B / 4);
    const int xg = threadIdx.x % (B / 4), tg = threadIdx.x / (B / 4), nu0 = 4 * xg, tt0 = 4 * tg;
    const int dx = a.X.dt, dy = a.GY.dt;
    float hacc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) hacc[i][j] = 0.0f;
    for (i64 it = 0; it < nt; it++) {
        if (it + 1 < nt) {
            dcf_issue<B>(Xr[(it + 1) & 1], a.X, o0, (t0 + it + 1) * TT, a.ncol);
            dcf_issue<B>(Yr[(it + 1) & 1], a.GY, o0, (t0 + it + 1) * TT, a.ncol);
            cp_commit();
            cp_wait(1);
        } else {
            cp_wait(0);
        }
        __syncthreads();
        if (want_h) cf_widen_t<B, TT, PF>(xT, Xr[it & 1], dx);
        cf_widen_t<B, TT, PF>(gT, Yr[it & 1], dy);
        __syncthreads();
        const i64 tb = (t0 + it) * TT;
        if (want_gx) {
            float acc[4][4];   /* [ν − ν0][t − t0] */
            cf_gemm4<B, PF>(acc, OpS, gT, nu0, tt0);
            if (a.delta)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float4 g = *(const float4 *)(gT + (nu0 + i) * PF + tt0);
                    const float gv[4] = {g.x, g.y, g.z, g.w}, p1 = rs[nu0 + i] - 1.0f;
#pragma unroll
                    for (int j = 0; j < 4; j++) acc[i][j] = fmaf(p1, gv[j], acc[i][j]);
                }
            cf_store4(a.GX, o0 + nu0, tb + tt0, a.ncol, acc, vgx);
        }
        if (want_h)
#pragma unroll 2
            for (int t = h * SL; t < (h + 1) * SL; t += 4) {
                float xv[4][4], yv[4][4];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float4 x = *(const float4 *)(xT + (gn + i * (B / 4)) * PF + t);
                    const float4 y = *(const float4 *)(gT + (gm + i * (B / 4)) * PF + t);
                    xv[i][0] = x.x, xv[i][1] = x.y, xv[i][2] = x.z, xv[i][3] = x.w;
                    yv[i][0] = y.x, yv[i][1] = y.y, yv[i][2] = y.z, yv[i][3] = y.w;
                }
#pragma unroll
                for (int e = 0; e < 4; e++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
#pragma unroll
                        for (int j = 0; j < 4; j++) hacc[i][j] = fmaf(xv[i][e], yv[j][e], hacc[i][j]);
            }
        __syncthreads();   /* raw stage refilled and fp32 tiles rewritten next iteration */
    }
    if (!want_h) return;
    dh_combine<B, HS>(Hs, h, gn, gm, hacc);
    dh_finish<B>(P, Hs, k, want_b, want_rho, gpart, rpart);
}

/* Bypass forward for channel-fast 16-bit y0 (B 16 or 32): tiles of TT = 2048/B tokens by cp.async
   into a two-stage ring, widened once per tile into a channel-major fp32 tile xT[ν][t]; a thread
   owns 4 outputs μ × 4 tokens, one float4 of Op's row ν and one of xT per 16 FMAs. Per output the
   same ν-ordered fmaf chain and epilogue as the column kernel (bitwise). Grid (token splits, nb). */
template <int B, int TT> __global__ __launch_bounds__(DC_NT) void k_doft_fwd_cf(doft_k P, int tiles, int vy) {
    constexpr int PF = TT + 4;
    __shared__ __align__(16) unsigned short Xr[2][TT * B];
    __shared__ __align__(16) float xT[B * PF], Ops[B * B];
    __shared__ float rs[B];
    const lk_oft_args &a = P.a;
    const i64 k = blockIdx.y, o0 = k * B, t0 = (i64)blockIdx.x * tiles, ntile = cdiv(a.ncol, TT);
    const i64 nt = ntile - t0 < tiles ? ntile - t0 : tiles;
    dcf_issue<B, TT>(Xr[0], a.X, o0, t0 * TT, a.ncol);
    cp_commit();
    const float *Op = (a.delta ? P.Mm : P.Mf) + k * B * B;
    for (int e = threadIdx.x; e < B * B; e += DC_NT) Ops[e] = Op[e];
    for (int r = threadIdx.x; r < B; r += DC_NT) rs[r] = rho_ct(a.rho, o0 + r, a.ct);
    const int dx = a.X.dt;
    for (i64 it = 0; it < nt; it++) {
        if (it + 1 < nt) {
            dcf_issue<B, TT>(Xr[(it + 1) & 1], a.X, o0, (t0 + it + 1) * TT, a.ncol);
            cp_commit();
            cp_wait(1);
        } else {
            cp_wait(0);
        }
        __syncthreads();
        cf_widen_t<B, TT, PF>(xT, Xr[it & 1], dx);
        __syncthreads();
#pragma unroll 1
        for (int sub = 0; sub < TT * B / 16 / DC_NT; sub++) {   /* 4 × 4 output sets per thread */
            const int w = sub * DC_NT + threadIdx.x, mu0 = 4 * (w % (B / 4)), tt0 = 4 * (w / (B / 4));
            float acc[4][4];   /* [μ − μ0][t − t0] */
            cf_gemm4<B, PF>(acc, Ops, xT, mu0, tt0);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float4 x = *(const float4 *)(xT + (mu0 + i) * PF + tt0);
                const float xv[4] = {x.x, x.y, x.z, x.w}, pr = rs[mu0 + i];
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = doft_epi(a, pr, acc[i][j], xv[j]);
            }
            cf_store4(a.Y, o0 + mu0, (t0 + it) * TT + tt0, a.ncol, acc, vy);
        }
        __syncthreads();   /* raw stage refilled and xT rewritten next iteration */
    }
}

/* tokens per tile: 4096/B (H200, 8192 tokens × 4096, B 32, bf16: 197–204 µs per call against
   201–241 at 2048/B, which LYCO_CUDA_OFT_TT=1 selects, and 219–220 for the column kernel) */
template <int B, int TT> static int doft_fwd_cf_tt(const doft_k *P, const lk_device *dev, cudaStream_t st) {
    const i64 ntile = cdiv(P->a.ncol, TT);
    i64 tiles = ntile * P->a.nb / (4 * (i64)(dev && dev->sms > 0 ? dev->sms : 132));   /* ≥ ~4 blocks per SM */
    if (tiles < 1) tiles = 1;
    if (tiles > 0x7fffffff) return lyco_fail(LYCO_ERR_BACKEND, "cuda diag-oft: %lld tokens exceed the bypass kernel", (long long)P->a.ncol);
    const int vy = col_vec_ok(P->a.Y, B) && P->a.Y.dt != DT_F32;
    k_doft_fwd_cf<B, TT><<<dim3((unsigned)cdiv(ntile, tiles), (unsigned)P->a.nb), DC_NT, 0, st>>>(*P, (int)tiles, vy);
    LK_LAUNCHED("diag-oft bypass forward (channel-fast kernel)");
    return LYCO_OK;
}
template <int B> static int doft_fwd_cf_launch(const doft_k *P, const lk_device *dev, cudaStream_t st) {
    return lk_env_int("LYCO_CUDA_OFT_TT", 2) == 1 ? doft_fwd_cf_tt<B, 2048 / B>(P, dev, st) : doft_fwd_cf_tt<B, 4096 / B>(P, dev, st);
}

/* The channel-fast bypass forward on the tensor cores (bf16 y0, 16-bit y, B 16 or 32; the merge's
   k_doft_fwd_tc with the roles turned): per token tile of DT_TT tokens, Y_tile (tokens × μ) =
   X_tile (tokens × ν) · Op_k (ν × μ), Op_k in three bf16 parts [ν][μ] (k-major B operand), X by
   cp.async into rows of pitch B + 8 (one token's B channels, 16-byte chunks); warp w owns tokens
   32w … 32w + 31 (MI = 2 m16 tiles) × the B channels (NI = B/8), writes its results over its own
   rows of the staged tile and stores them from there, 16 bytes per chunk. Two CUDA blocks per SM
   (90 registers); held to 78 for three, the bypass forward measured 183.5 µs in another H200 run
   than the 160.6 of two — but this version measured 157–189 µs across runs, so the choice is open
   (a same-run A/B is owed). LYCO_CUDA_OFT_TC=0 keeps k_doft_fwd_cf (A/B). */
#define DT_TT 256   /* tokens per tile */
template <int B> __global__ __launch_bounds__(NT, 2) void k_doft_fwd_cf_tc(doft_k P, int tiles) {
    constexpr int PA = B + 8, NI = B / 8, CH = B / 8, ST = DT_TT * PA;
    extern __shared__ __align__(16) unsigned short dsm_oft[];
    unsigned short *Xs = dsm_oft, *Opp = Xs + DT_S * ST;
    float *rs = (float *)(Opp + 3 * B * PA);
    const lk_oft_args &a = P.a;
    const i64 k = blockIdx.y, o0 = k * B, t0 = (i64)blockIdx.x * tiles, ntile = cdiv(a.ncol, DT_TT);
    const i64 nt = ntile - t0 < tiles ? ntile - t0 : tiles;
    const auto issue = [&](unsigned short *dst, i64 tb) {   /* DT_TT token rows of B channels */
#pragma unroll
        for (int q = 0; q < DT_TT * CH / NT; q++) {
            const int e = q * NT + threadIdx.x, t = e / CH, c = (e % CH) * 8;
            const bool in = tb + t < a.ncol;
            cp_async16(dst + t * PA + c, in ? rows_addr(a.X, o0 + c, tb + t) : (const char *)a.X.p, in ? 16 : 0);
        }
    };
    for (int st = 0; st < DT_S - 1; st++) {
        if (st < nt) issue(Xs + st * ST, (t0 + st) * DT_TT);
        cp_commit();
    }
    doft_parts<B, PA>(Opp, (a.delta ? P.Mm : P.Mf) + k * B * B);
    for (int r = threadIdx.x; r < B; r += NT) rs[r] = rho_ct(a.rho, o0 + r, a.ct);
    const int lane = threadIdx.x & 31, m0 = (threadIdx.x >> 5) * 32;
    for (i64 it = 0; it < nt; it++) {
        cp_wait(DT_S - 2);
        __syncthreads();   /* tile it landed; every thread is done with tile it − 1's stage */
        if (it + DT_S - 1 < nt) issue(Xs + ((it + DT_S - 1) % DT_S) * ST, (t0 + it + DT_S - 1) * DT_TT);
        cp_commit();
        unsigned short *xs = Xs + (it % DT_S) * ST;
        float acc[2][NI][4];
        acc_zero(acc);
#pragma unroll 1
        for (int p = 2; p >= 0; p--)
            warp_mma_ldm<bf16_t, 2, NI, false, true>::run(acc, (const bf16_t *)xs, PA, (const bf16_t *)(Opp + p * B * PA), PA, m0, 0, B);
        __syncwarp();
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < NI; ni++)
#pragma unroll
                for (int h = 0; h < 2; h++) {   /* (e = 2h, 2h + 1): one token, channels μ, μ + 1 */
                    const int t = acc_row(m0, mi, 2 * h), mu = acc_col(0, ni, 2 * h);
                    unsigned *w = (unsigned *)(xs + t * PA + mu);
                    const unsigned xw = *w;
                    const float y0 = doft_epi(a, rs[mu], acc[mi][ni][2 * h], bits16_to_f(xw & 0xffffu, DT_BF16)),
                                y1 = doft_epi(a, rs[mu + 1], acc[mi][ni][2 * h + 1], bits16_to_f(xw >> 16, DT_BF16));
                    *w = f_to_bits(y0, a.Y.dt) | (f_to_bits(y1, a.Y.dt) << 16);
                }
        __syncwarp();
        const i64 tb = (t0 + it) * DT_TT + m0;
#pragma unroll
        for (int q = 0; q < CH; q++) {   /* the warp's 32 tokens × CH chunks */
            const int e = q * 32 + lane, t = e / CH, c = (e % CH) * 8;
            if (tb + t < a.ncol) *(uint4 *)rows_addr(a.Y, o0 + c, tb + t) = *(const uint4 *)(xs + (m0 + t) * PA + c);
        }
    }
    cp_wait(0);
}

/* The channel-fast tensor-core forward takes: bf16 y0 and a 16-bit y, both channel-fast with
   16-byte aligned blocks of B channels, not turned off. */
static bool doft_cf_tc_ok(const lk_oft_args *a) {
    return a->X.dt == DT_BF16 && doft_cf_ok(a->X, (int)a->bs) && doft_cf_ok(a->Y, (int)a->bs) &&
           lk_env_int("LYCO_CUDA_OFT_TC", 1) != 0;
}

template <int B> static int doft_fwd_cf_tc_launch(const doft_k *P, const lk_device *dev, cudaStream_t st) {
    const i64 ntile = cdiv(P->a.ncol, DT_TT);
    i64 tiles = ntile * P->a.nb / (4 * (i64)(dev && dev->sms > 0 ? dev->sms : 132));   /* ≥ ~4 blocks per SM */
    if (tiles < 1) tiles = 1;
    if (tiles > 8) tiles = 8;
    const int bytes = doft_tc_bytes(DT_TT * (B + 8), B);
    LK_SMEM_OPTIN(bytes, k_doft_fwd_cf_tc<B>);
    k_doft_fwd_cf_tc<B><<<dim3((unsigned)cdiv(ntile, tiles), (unsigned)P->a.nb), NT, bytes, st>>>(*P, (int)tiles);
    LK_LAUNCHED("diag-oft bypass forward (channel-fast tensor-core kernel)");
    return LYCO_OK;
}

/* Gradients and GX; grid (S splits, row tiles). gpart: S × nb·bs², rpart: S × O. */
__global__ __launch_bounds__(NT) void k_doft_bwd(doft_k P, int want_b, int want_rho, float *gpart, float *rpart) {
    extern __shared__ float sm[];
    float *Cm = sm, *Cd = Cm + DTILE, *Xs = Cd + DTILE, *Gs = Xs + DTILE, *Ys = Gs + DTILE;
    __shared__ float rs[DR];
    const lk_oft_args &a = P.a;
    const doft_tile t = doft_tile_of(P, blockIdx.y);
    const i64 bs = a.bs, s = blockIdx.x, S = gridDim.x;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const bool want_gx = a.GX.p != NULL, need_x = want_b || want_rho;
    const float *Cop = a.delta ? Cd : Cm;
    op_in(Cm, P.Mf, t, bs);
    if (want_gx && a.delta) op_in(Cd, P.Mm, t, bs);
    for (int r = threadIdx.x; r < DR; r += NT) rs[r] = r < t.nr ? rho_ct(a.rho, t.o0 + r, a.ct) : 0.0f;
    float gacc[4][4], racc[4];
#pragma unroll
    for (int p = 0; p < 4; p++) {
        racc[p] = 0.0f;
#pragma unroll
        for (int q = 0; q < 4; q++) gacc[p][q] = 0.0f;
    }
    for (i64 ctile = s; ctile < P.ntc; ctile += S) {
        const i64 j0 = ctile * DTW, w = a.ncol - j0 < DTW ? a.ncol - j0 : DTW;
        tile_in(Ys, a.GY, t.o0, t.nr, j0, w, a.ct);
        if (need_x) tile_in(Xs, a.X, t.o0, t.nr, j0, w, a.ct);
        __syncthreads();
        for (int idx = threadIdx.x; idx < DTILE; idx += NT) Gs[idx] = rs[idx / DLD] * Ys[idx];
        __syncthreads();
        if (want_rho)   /* G_ρ[r] += Σ_c GY[r][c]·(MᵀX)[r][c] */
#pragma unroll
            for (int p = 0; p < 4; p++) {
                const int r = ty + 16 * p;
                if (r >= t.nr) continue;
                const int lo = (int)((r / bs) * bs);
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int c = tx + 16 * q;
                    float z = 0.0f;
                    for (int kc = lo; kc < lo + bs; kc++) z = fmaf(Cm[kc * DLD + r], Xs[kc * DLD + c], z);
                    racc[p] = fmaf(Ys[r * DLD + c], z, racc[p]);
                }
            }
        if (want_b)     /* G_M[ν][μ] += Σ_c X[ν][c]·G''[μ][c] */
#pragma unroll
            for (int p = 0; p < 4; p++) {
                const int kc = ty + 16 * p;
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int r = tx + 16 * q;
                    if (kc >= t.nr || r >= t.nr || kc / bs != r / bs) continue;
                    float acc = gacc[p][q];
                    for (int c = 0; c < w; c++) acc = fmaf(Xs[kc * DLD + c], Gs[r * DLD + c], acc);
                    gacc[p][q] = acc;
                }
            }
        float gx[4][4];
        if (want_gx)    /* GX[ν][c] = Σ_μ Op[ν][μ]·G''[μ][c] (+ (ρ − 1)·GY) */
#pragma unroll
            for (int p = 0; p < 4; p++) {
                const int kc = ty + 16 * p;
                const int lo = kc < t.nr ? (int)((kc / bs) * bs) : 0, hi = kc < t.nr ? lo + (int)bs : 0;
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int c = tx + 16 * q;
                    float v = 0.0f;
                    for (int r = lo; r < hi; r++) v = fmaf(Cop[kc * DLD + r], Gs[r * DLD + c], v);
                    if (a.delta && kc < t.nr) v = fmaf(rs[kc] - 1.0f, Ys[kc * DLD + c], v);
                    gx[p][q] = v;
                }
            }
        __syncthreads();
        if (want_gx) {
#pragma unroll
            for (int p = 0; p < 4; p++)
#pragma unroll
                for (int q = 0; q < 4; q++) Xs[(ty + 16 * p) * DLD + tx + 16 * q] = gx[p][q];
            __syncthreads();
            tile_out(Xs, a.GX, t.o0, t.nr, j0, w);
        }
        __syncthreads();
    }
    if (want_rho)
#pragma unroll
        for (int p = 0; p < 4; p++) {
            float v = racc[p];
#pragma unroll
            for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            const int r = ty + 16 * p;
            if (tx == 0 && r < t.nr) rpart[s * a.O + t.o0 + r] = v;
        }
    if (want_b) {
        const i64 nn = bs * bs;
#pragma unroll
        for (int p = 0; p < 4; p++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int kc = ty + 16 * p, r = tx + 16 * q;
                if (kc >= t.nr || r >= t.nr || kc / bs != r / bs) continue;
                const i64 kk = kc / bs;
                gpart[s * a.nb * nn + (t.k0 + kk) * nn + (kc - kk * bs) * bs + (r - kk * bs)] = gacc[p][q];
            }
    }
}

static void doft_setup(doft_k *P, const lk_oft_args *a, const oft_cay *cy) {
    memset(P, 0, sizeof *P);
    P->a = *a;
    P->Mf = cy->Op1;
    P->Mm = cy->Op2;
    P->g = a->bs >= DR ? 1 : DR / a->bs;
    if (P->g > a->nb) P->g = a->nb;
    P->ntc = cdiv(a->ncol, DTW);
}

static int doft_check(const lk_oft_args *a) {
    if (a->bs < 1 || a->bs > LK_OFT_MAX_BS || a->nb < 1 || a->M != 1)
        return lyco_fail(LYCO_ERR_BACKEND, "cuda diag-oft: block size %lld × %lld blocks outside the kernels' range",
                         (long long)a->bs, (long long)a->nb);
    return LYCO_OK;
}

extern "C" int lk_diag_oft_fwd(const lk_oft_args *a, const lk_device *dev, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    int rc = doft_check(a);
    if (rc || a->ncol == 0) return rc;
    oft_cay cy;
    if ((rc = oft_cay_fwd(&cy, a, OFT_FAM_DIAG, st))) {
        oft_cay_free(&cy, st);
        return rc;
    }
    doft_k P;
    doft_setup(&P, a, &cy);
    if (doft_cols_take(a) && (a->bs == 16 || a->bs == 32) && doft_cf_ok(a->X, (int)a->bs) &&
        lk_env_int("LYCO_CUDA_OFT_STAGED", 1) != 0) {   /* the channel-fast y0 of a linear bypass */
        if (doft_cf_tc_ok(a)) rc = a->bs == 16 ? doft_fwd_cf_tc_launch<16>(&P, dev, st) : doft_fwd_cf_tc_launch<32>(&P, dev, st);
        else rc = a->bs == 16 ? doft_fwd_cf_launch<16>(&P, dev, st) : doft_fwd_cf_launch<32>(&P, dev, st);
        int rc2 = oft_cay_free(&cy, st);
        return rc ? rc : rc2;
    }
    if (doft_cols_take(a)) {
        rc = a->bs == 8 ? doft_fwd_cols_launch<8>(&P, dev, st)
           : a->bs == 16 ? doft_fwd_cols_launch<16>(&P, dev, st)
                        : doft_fwd_cols_launch<32>(&P, dev, st);
        int rc2 = oft_cay_free(&cy, st);
        return rc ? rc : rc2;
    }
    const i64 nrt = cdiv(a->nb, P.g);
    if (nrt > 65535 || P.ntc > 0x7fffffff) {
        oft_cay_free(&cy, st);
        return lyco_fail(LYCO_ERR_BACKEND, "cuda diag-oft: %lld row tiles × %lld column tiles exceed the grid", (long long)nrt, (long long)P.ntc);
    }
    k_doft_fwd<<<dim3((unsigned)P.ntc, (unsigned)nrt), NT, 0, st>>>(P);
    cudaError_t e = cudaGetLastError();
    rc = oft_cay_free(&cy, st);
    if (e != cudaSuccess)
        return lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of diag-oft forward failed: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    return rc;
}

/* Tiles per split for the streaming backward kernels: ≥ ~4 CUDA blocks per SM, at most smax splits. */
static i64 doft_tiles_per_split(i64 ntile, i64 nb, const lk_device *dev, i64 smax) {
    i64 tiles = ntile * nb / (4 * (i64)(dev && dev->sms > 0 ? dev->sms : 132));
    if (tiles < 1) tiles = 1;
    if (cdiv(ntile, tiles) > smax) tiles = cdiv(ntile, smax > 0 ? smax : 1);
    return tiles;
}

/* The backward after the Cayley transform: one kernel writes S splits of partials (the kernel by
   shape, as the header lists), then their sums in order and the adjoint. */
static int doft_bwd_run(const lk_oft_args *a, const lk_device *dev, const oft_cay *cy, cudaStream_t st, void **mem) {
    enum { DB_ROWS, DB_CF, DB_COLS, DB_TILES };
    const bool want_b = a->gB.p != NULL, want_rho = a->grho.p != NULL && a->rho.p != NULL;
    doft_k P;
    doft_setup(&P, a, cy);
    const i64 nrt = cdiv(a->nb, P.g), nn = a->bs * a->bs, all = a->nb * nn;
    const i64 per = (want_b ? all : 0) + (want_rho ? a->O : 0), smax = per > 0 ? ((i64)8 << 20) / per : 1024;
    const int bs = (int)a->bs;
    const bool fast = doft_cols_take(a) && (bs == 16 || bs == 32) && lk_env_int("LYCO_CUDA_OFT_STAGED", 1) != 0;
    int kind;
    i64 steps, S;   /* tiles or passes per split; splits */
    if (fast && !a->GX.p && doft_staged_ok(a->X) && doft_staged_ok(a->GY)) {   /* merge: the H reduction */
        kind = DB_ROWS;
        const i64 ntile = cdiv(a->ncol, DH_TC);
        steps = doft_tiles_per_split(ntile, a->nb, dev, smax);
        S = cdiv(ntile, steps);
    } else if (fast && doft_cf_ok(a->X, bs) && doft_cf_ok(a->GY, bs)) {   /* linear bypass, channel-fast */
        kind = DB_CF;
        const i64 ntile = cdiv(a->ncol, 2048 / bs);
        steps = doft_tiles_per_split(ntile, a->nb, dev, smax);
        S = cdiv(ntile, steps);
    } else if (doft_cols_take(a)) {   /* column kernels: S = column groups */
        kind = DB_COLS;
        steps = doft_col_passes(a->ncol, a->nb, dev ? dev->sms : 0);
        const i64 need = cdiv(a->ncol, DC_NT * (smax > 0 ? smax : 1));
        if (steps < need) steps = need;
        if (steps > 0x7fffffff / DC_NT)
            return lyco_fail(LYCO_ERR_BACKEND, "cuda diag-oft: %lld columns exceed the column kernel", (long long)a->ncol);
        S = cdiv(a->ncol, DC_NT * steps);
    } else {   /* tile kernels: about 2 blocks per SM, at most one split per column tile */
        kind = DB_TILES;
        if (nrt > 65535) return lyco_fail(LYCO_ERR_BACKEND, "cuda diag-oft: %lld row tiles exceed the grid", (long long)nrt);
        steps = 1;
        S = cdiv(2 * (i64)(dev->sms > 0 ? dev->sms : 1), nrt);
        if (per > 0 && S > (8 << 20) / per) S = (8 << 20) / per;
        if (S > P.ntc) S = P.ntc;
        if (S > 1024) S = 1024;
        if (S < 1) S = 1;
    }
    if (steps > 0x7fffffff)
        return lyco_fail(LYCO_ERR_BACKEND, "cuda diag-oft: %lld columns exceed the backward kernels", (long long)a->ncol);
    const i64 gsz = want_b ? S * all : 0, rsz = want_rho ? S * a->O : 0;
    int rc = lk_scratch_alloc(mem, sizeof(float) * (size_t)(gsz + rsz + (want_b ? all : 0)), st);
    if (rc) return rc;
    float *gpart = (float *)*mem, *rpart = gpart + gsz, *GR = rpart + rsz;
    const dim3 grid((unsigned)S, (unsigned)(kind == DB_TILES ? nrt : a->nb));
    const int n = (int)steps;
    if (kind == DB_ROWS) {
        if (bs == 16) k_doft_h<16><<<grid, DC_NT, 0, st>>>(P, n, want_b, want_rho, gpart, rpart);
        else k_doft_h<32><<<grid, DC_NT, 0, st>>>(P, n, want_b, want_rho, gpart, rpart);
    } else if (kind == DB_CF) {
        const int vgx = a->GX.p && col_vec_ok(a->GX, bs) && a->GX.dt != DT_F32;
        if (bs == 16) k_doft_bwd_cf<16><<<grid, DC_NT, 0, st>>>(P, n, want_b, want_rho, gpart, rpart, vgx);
        else k_doft_bwd_cf<32><<<grid, DC_NT, 0, st>>>(P, n, want_b, want_rho, gpart, rpart, vgx);
    } else if (kind == DB_COLS) {
        const int vx = col_vec_ok(a->X, bs), vgy = col_vec_ok(a->GY, bs), vgx = col_vec_ok(a->GX, bs);
        if (bs == 8) k_doft_bwd_cols<8><<<grid, DC_NT, 0, st>>>(P, n, want_b, want_rho, gpart, rpart, vx, vgy, vgx);
        else if (bs == 16) k_doft_bwd_cols<16><<<grid, DC_NT, 0, st>>>(P, n, want_b, want_rho, gpart, rpart, vx, vgy, vgx);
        else k_doft_bwd_cols<32><<<grid, DC_NT, 0, st>>>(P, n, want_b, want_rho, gpart, rpart, vx, vgy, vgx);
    } else {
        const int smem = (int)(sizeof(float) * 5 * DTILE);
        LK_SMEM_OPTIN(smem, k_doft_bwd);
        k_doft_bwd<<<grid, NT, smem, st>>>(P, want_b, want_rho, gpart, rpart);
    }
    LK_LAUNCHED("diag-oft backward");
    if (want_rho && (rc = oft_sum_rho(rpart, S, a->O, &a->grho, st))) return rc;
    if (want_b) {
        if ((rc = oft_sum_grad(gpart, S, all, a->m, &a->mask, GR, st))) return rc;
        if ((rc = oft_cay_bwd(cy, a, GR, st))) return rc;
    }
    return LYCO_OK;
}

extern "C" int lk_diag_oft_bwd(const lk_oft_args *a, const lk_device *dev, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    int rc = doft_check(a);
    if (rc) return rc;
    if (!a->gB.p && !(a->grho.p && a->rho.p) && !a->GX.p) return LYCO_OK;
    oft_cay cy;
    void *mem = NULL;
    rc = oft_cay_fwd(&cy, a, OFT_FAM_DIAG, st);
    if (!rc) rc = doft_bwd_run(a, dev, &cy, st, &mem);
    int rc2 = lk_scratch_free(mem, st), rc3 = oft_cay_free(&cy, st);
    return rc ? rc : rc2 ? rc2 : rc3;
}
