/*
 * boft_group.cu — BOFT (ALGORITHMS.md §2.5) with SEVERAL butterfly stages per launch ("stage
 * groups") in shared memory; forward (merge / bypass, delta form) and backward. Semantics, per-
 * output fmaf order and roundings are those of boft.cu's stage-per-launch kernels (k_bs_stage)
 * and src/cpu/boft.c, so the forward results are bitwise those of k_bs_stage.
 *
 * GEOMETRY. b = 2·hb, O = nb·b rows, row r = q·hb + u (u < hb, q < 2nb). Stage i's block k holds
 * the b rows whose q differ only in bit i: ν = 2u + γ comes from row (q with bit i = γ)·hb + u,
 * and k = q with bit i deleted ((q >> (i+1)) << i | q mod 2^i). (From π_i: t = c·2h + γh + η,
 * h = 2^i·hb, η = (q mod 2^i)·hb + u; checked on the host against k_boft_tab's formula for
 * b ∈ {2,4,6,8,10,16,32,64}, nb ≤ 256, every M and every stage range launched here.) So stages
 * i0..i1−1 only mix rows whose q agree outside bits [i0, i1). A CUDA block owns a SUPER-GROUP
 * of GSr = min(GS, O) rows = 2^lb values of a local index L (rows l = L·hb + u) and CW columns:
 * L's bits [0, a) are q's bits [0, a), L's bits [a, lb) are q's bits [i0, i0 + lb − a), with
 * a = min(lb − s, i0), s = i1 − i0 ≤ lb; the super-group id sg supplies q's other bits
 * ([a, i0) and [i0 + lb − a, log2 2nb)). In local terms stage i is the butterfly stage on
 * local bit j = a + i − i0: local block kk has its γ-half at L = kk with bit j inserted = γ.
 * (i0 = 0: a super-group is GSr consecutive rows; otherwise runs of 2^a·hb consecutive rows.)
 *
 * STAGE (in place in shared memory, fp32, pitch CW + 1 floats): thread = lane (columns lane +
 * 32·cc, cc < C = CW/32) × T tasks, task = (local block kk, R consecutive outputs μ); per input κ
 * (ascending) it reads x[κ] = A[κ] + D[κ] (A absent: D[κ]) for its C columns and (N − I)ᵀ's
 * row κ once, as broadcast float4s from shared memory (Ns[kk][κ][μ]: the operator pre-arranged once per call, forward NF[κ][μ] = (N−I)[μ][κ],
 * backward NB = (N − I) itself, whose row κ is (N − I)ᵀ's column), accumulating R outputs by
 * fmaf from 0 — the κ-ordered chain of k_bs_stage; barrier; D[t_μ] += acc; barrier. The next
 * stage's operator is fetched by cp.async between the two barriers (forward).
 * Compile-time b (B ∈ {2,4,8,16,32,64}); R = min(B, 16), T = 16/R; forward 256 rows × CW = 32
 * columns (C = 1), backward 128 rows × 32 columns: 16·C outputs per thread. The forward also
 * exists as 128 rows × 64 columns (C = 2: each broadcast float4 of N feeds two columns, written
 * against a shared-memory-return bound); on the H200 (2026-11-30, 4096², b 32, M 4, bf16) it
 * was slower: 196·10⁶ element-stages per µs against 269·10⁶ at C = 1, and its
 * 3-stage launches need a second, single-stage launch (75·10⁶/µs) where 256 rows hold all four
 * stages — merge forward 640–730 µs against 484. BG_CWF / BG_GS_FWD select it.
 *
 * FORWARD (k_bg_fwd, BG_GS_FWD rows × BG_CWF columns, lb = log2(GSr/hb) stages per launch at most; nL = ⌈M/lb⌉ launches,
 * stages split evenly): each launch recomputes X_0 = RN_ct(X) from the input, loads Δ from the
 * fp32 scratch [O][CC] (0 in the first launch), runs its stages Δ ← Δ + (N − I)(X_0 + Δ) and
 * stores Δ in place (different CUDA blocks own disjoint rows × columns) or, in the last launch,
 * Y = ρ ⊙ (X_0 + Δ) (delta: ρ ⊙ Δ + (ρ − 1) ⊙ X_0), rounded once. One launch when M ≤ lb (no
 * scratch at all). Loads / stores: columns fastest, rows fastest when the operand is channel-
 * fast (bypass y0 / y), one dtype branch outside the loops, the generic lk_rows path for
 * position-split (conv), unaligned operands.
 *   b 16 (lb 4): M 9 → 3 launches; b 8 (lb 5): M 10 → 2; b 32 (lb 3): M 4 → 2; b 64: lb 2.
 *   Cost per output and stage ≈ b FMAs + b·(3/R + 1/8) + ~4 other instructions (~1.4
 *   instructions per FMA vs ~13 before); shared-memory returns per κ and task ≈ 8–16 (N) + 4 (x)
 *   lane-cycles for 32 FMAs per lane. H200 estimate, 4096², b 16, M 9, bf16: 2.4 G FMAs at
 *   ~40–60% of the fp32 FMA rate ≈ 0.11–0.17 ms, 3 launches moving 32 MB of X each and 64 MB of
 *   Δ per boundary (≈ 90 µs of DRAM time, overlapped with the arithmetic): merge fwd ≈ 0.15–0.25
 *   ms + the Cayley transform; bypass (8192 tokens) about twice. Shared memory 2·128·65·4 +
 *   128·b·4 bytes (b 16: 73 KB, 3 CUDA blocks per SM; b 64: 97 KB, 2).
 *
 * BACKWARD (GS 128, lb = log2(GSr/hb), same even split into nL launches). Per column chunk:
 *   1. (∂L/∂B or ∂L/∂ρ wanted, nL > 1) forward launches 0..nL−2 in the plain form
 *      X_{i+1} = X_i + (N − I)X_i (the CPU backward's), storing each launch's end X_{i1} as the
 *      next launch's start in scratch (the forward kernel with Din = the previous boundary);
 *   2. backward launches nL−1 … 0 (k_bg_bwd): load GY (RN_ct), ΔG (scratch; (ρ − 1)·GY in the
 *      first), X_{i0} (scratch boundary or RN_ct(X)); stages i1−1 … i0 in reverse, each: X_i by
 *      REPLAYING the forward from the nearest stored input at or below i — X_{i0}, or (s ≥ 3, when
 *      a fifth buffer keeps 2 CUDA blocks per SM) the checkpoint X_cp, cp = i0 + ⌊s/2⌋, computed
 *      once per tile — in a work buffer (s = 3: 2 extra stage applications, s = 5: 6, instead of
 *      s(s−1)/2 = 3 / 10 without the checkpoint or s shared buffers), the block-gradient
 *      partial G_N_{i,k} += Ĝ·Ŵᵀ (Ĝ = GY + ΔG, Ŵ = X_i gathered; thread = an R1×R2 tile of one
 *      block's b² entries, the 32 columns in order, fmaf from 0, then added to the CUDA block's
 *      own partial in global memory: gpart[(i·nb + k)·P + p][μ·b + ν], p = the column split) and the transposed stage
 *      ΔG ← ΔG + (N − I)ᵀ(GY + ΔG); then ΔG to scratch or, in launch 0, GX = ΔG (+ GY unless
 *      delta). The launch ending at M also replays X_M and writes G_ρ's per-(row, 32 columns)
 *      partial Σ_c GY·X_M (fixed order).
 *   A CUDA block = (super-group, column split p of P) walks its column tiles p, p + P, … so the
 *   partials are P·M·nb·b² floats (read-modify-written in tile and chunk order; P: one wave of
 *   2 CUDA blocks per SM over the super-groups, reduced to the fewest splits with the same tiles
 *   per block, capped by a 16M-float budget); then GR = m·Σ_p partial in double (fixed
 *   order), G_ρ = Σ over tiles in order (oft_sum_rho), the Cayley adjoint. Deterministic, no
 *   atomics. With ∂L/∂B, Ĝ = GY + ΔG is formed once per stage in its own tile (Gh) where 2
 *   CUDA blocks per SM still fit, so the G_N partial reads one value per μ (it is bound by
 *   shared-memory returns: R1 + R2 loads per R1·R2 FMAs) and the transposed stage one per κ.
 *   Shared memory (4 + Gh + Cs)·128·33·4 + 128·b·4 bytes (b 16: 74–108 KB).
 *   Cost ≈ the plain forward pass (the stages of launches 0..nL−2) + the replays + s transposed
 *   stages + s G_N partials (≈ 1.5 stages) per launch: b 16 M 9 (lb 4, 3 launches of 3):
 *   6 + 6 + 9 + 13.5 ≈ 35 stage units vs the forward's 9; b 8 M 10 (lb 5, 2 of 5): 5 + 12 + 10
 *   + 15 ≈ 42 → merge bwd ≈ 0.6–1 ms, bypass (8192 tokens) about twice (estimates).
 *
 * Extra memory (stream-ordered): NF (and NB) M·nb·b² floats; forward Δ scratch O·CC floats
 * (nL > 1; CC: the columns in the fewest chunks within 16M floats, split evenly); backward
 * (nL − 1) boundaries + ΔG, O·CC floats each (within 16M floats), P·M·nb·b² partials,
 * ⌈ncol/32⌉·O G_ρ partials, M·nb·b² floats of GR.
 *
 * NOT TAKEN (boft.cu runs the stage-per-launch kernels): b not a power of two (6, 10, …),
 * zero columns, shared memory above the device's opt-in limit, LYCO_CUDA_BOFT_STAGEWISE=1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/boft_group.cuh"

#define BG_CW 32                     /* columns per CUDA block, backward (one per lane); chunk unit */
#define BG_CWF 32                    /* columns per CUDA block, forward (one per lane; see the header) */
#define BG_LD 33                     /* backward shared row pitch (floats): CW + 1, conflict-free */
#define BG_GS_FWD 256                /* rows per CUDA block, forward */
#define BG_GS_BWD 128                /* rows per CUDA block, backward */
#define BG_BUDGET ((i64)16 << 20)    /* floats of chunk scratch */

/* Stage range of one launch and the super-group layout (see the header). */
typedef struct {
    int i0, i1;   /* stages [i0, i1) */
    int a, lb;    /* low local bits taken from q's bits [0, a); log2(GSr / hb) */
    int lgs;      /* log2(GSr) */
    int ntile;    /* column tiles of the chunk */
} bg_geo;

typedef struct {
    const float *NF, *NB;   /* operators, forward [κ][μ] / backward [μ][ν] per (i, k) */
    lk_rows X, Y, GY, GX;
    lk_view rho;
    int nb, ct, delta, M;
    i64 O, ld, j0, cn;      /* scratch pitch, chunk's first column, chunk's columns */
} bg_k;

/* The CUDA block's super-group and column tile. */
typedef struct {
    int sg, qfix, c0, w, gsr;
} bg_blk;

template <int B, int GS> struct bg_shape {
    static const int HB = B / 2;
    static const int LHB = B == 2 ? 0 : B == 4 ? 1 : B == 8 ? 2 : B == 16 ? 3 : B == 32 ? 4 : 5;
    static const int R = B < GS / 8 ? B : GS / 8;   /* outputs of a task */
    static const int SEG = B / R;                   /* tasks per block */
    static const int T = GS / (8 * R);              /* tasks per thread */
    static const int E = GS * B / NT;               /* G_N entries per thread */
    static const int R1 = E >= 16 ? 4 : E >= 4 ? 2 : 1;
    static const int R2 = E / R1;
    static const int SUB = (B / R1) * (B / R2);     /* G_N thread tiles per block */
};

__device__ __forceinline__ int bg_qfix(const bg_geo &g, int sg) {
    const int lo = g.i0 - g.a;
    return ((sg & ((1 << lo) - 1)) << g.a) | ((sg >> lo) << (g.i0 + g.lb - g.a));
}
/* q of local index L */
__device__ __forceinline__ int bg_q(const bg_geo &g, int qfix, int L) {
    return qfix | (L & ((1 << g.a) - 1)) | ((L >> g.a) << g.i0);
}
/* global row of local row l */
template <int LHB> __device__ __forceinline__ int bg_row(const bg_geo &g, int qfix, int l) {
    return (bg_q(g, qfix, l >> LHB) << LHB) | (l & ((1 << LHB) - 1));
}
/* local L of block kk's γ-half at local bit j */
__device__ __forceinline__ int bg_lq(int kk, int gam, int j) {
    return ((kk >> j) << (j + 1)) | (gam << j) | (kk & ((1 << j) - 1));
}
/* global block index of local block kk at stage i */
__device__ __forceinline__ int bg_kglob(const bg_geo &g, int qfix, int kk, int i) {
    const int q0 = bg_q(g, qfix, bg_lq(kk, 0, g.a + i - g.i0));
    return ((q0 >> (i + 1)) << i) | (q0 & ((1 << i) - 1));
}

template <int CW> __device__ __forceinline__ bg_blk bg_block(const bg_geo &g, int sg, int tile, i64 cn) {
    bg_blk k;
    k.sg = sg;
    k.qfix = bg_qfix(g, sg);
    k.c0 = tile * CW;
    k.w = (int)(cn - k.c0 < CW ? cn - k.c0 : CW);
    k.gsr = 1 << g.lgs;
    return k;
}

/* ---- global ↔ shared tiles ---- */

/* dst[l][c] (pitch CW + 1) = RN_ct(v(row(l), j0 + c0 + c)) for c < w, 0 for the padding
   columns. DT: the operand's dtype (fast: SP 1, aligned), -1: the generic lk_rows path. */
template <int LHB, int CW, int DT>
__device__ void bg_ld_rows_t(float *dst, const lk_rows &v, const bg_geo &g, const bg_blk &k, i64 j0, int ct) {
    const bool rf = v.sc == 1;
    const int n = k.gsr * CW;
#pragma unroll 4
    for (int idx = threadIdx.x; idx < n; idx += NT) {
        const int l = rf ? idx & (k.gsr - 1) : idx / CW;
        const int c = rf ? idx >> g.lgs : idx & (CW - 1);
        float x = 0.0f;
        if (c < k.w) {
            const int r = bg_row<LHB>(g, k.qfix, l);
            const i64 j = j0 + k.c0 + c;
            if (DT < 0) {
                x = rows_load(v, r, j);
            } else {
                const char *p = (const char *)v.p + ((i64)r * v.sc + j * v.sn) * (DT == DT_F32 ? 4 : 2);
                x = ld_elem(p, DT, false);
            }
            x = round_to(x, ct);
        }
        dst[l * (CW + 1) + c] = x;
    }
}

template <int LHB, int CW>
__device__ void bg_ld_rows(float *dst, const lk_rows &v, const bg_geo &g, const bg_blk &k, i64 j0, int ct) {
    if (v.SP != 1 || (v.flags & LK_UNALIGNED)) bg_ld_rows_t<LHB, CW, -1>(dst, v, g, k, j0, ct);
    else if (v.dt == DT_F32) bg_ld_rows_t<LHB, CW, DT_F32>(dst, v, g, k, j0, ct);
    else if (v.dt == DT_BF16) bg_ld_rows_t<LHB, CW, DT_BF16>(dst, v, g, k, j0, ct);
    else bg_ld_rows_t<LHB, CW, DT_F16>(dst, v, g, k, j0, ct);
}

enum { BG_EP_FWD = 0, BG_EP_BWD = 1 };

/* Epilogue into Y at (row(l), j0 + c0 + c), c < w, rounded once to Y's dtype, from x = X[l][c],
   d = D[l][c]: forward Y = ρ ⊙ (x + d) (delta: ρ ⊙ d + (ρ − 1) ⊙ x); backward Y = d (+ x unless
   delta). */
template <int LHB, int CW, int DT>
__device__ void bg_st_rows_t(const lk_rows &v, const bg_geo &g, const bg_blk &k, const bg_k &P, int ep, const float *X,
                             const float *D) {
    const bool rf = v.sc == 1;
    const int n = k.gsr * CW;
#pragma unroll 4
    for (int idx = threadIdx.x; idx < n; idx += NT) {
        const int l = rf ? idx & (k.gsr - 1) : idx / CW;
        const int c = rf ? idx >> g.lgs : idx & (CW - 1);
        if (c >= k.w) continue;
        const int r = bg_row<LHB>(g, k.qfix, l);
        const float x = X[l * (CW + 1) + c], d = D[l * (CW + 1) + c];
        float y;
        if (ep == BG_EP_BWD) {
            y = P.delta ? d : d + x;
        } else {
            const float pr = rho_ct(P.rho, r, P.ct);
            y = P.delta ? fmaf(pr, d, (pr - 1.0f) * x) : pr * (x + d);
        }
        const i64 j = P.j0 + k.c0 + c;
        if (DT < 0) {
            rows_store(v, r, j, y);
        } else {
            char *p = (char *)v.p + ((i64)r * v.sc + j * v.sn) * (DT == DT_F32 ? 4 : 2);
            st_elem(p, DT, false, y);
        }
    }
}

template <int LHB, int CW>
__device__ void bg_st_rows(const lk_rows &v, const bg_geo &g, const bg_blk &k, const bg_k &P, int ep, const float *X,
                           const float *D) {
    if (v.SP != 1 || (v.flags & LK_UNALIGNED)) bg_st_rows_t<LHB, CW, -1>(v, g, k, P, ep, X, D);
    else if (v.dt == DT_F32) bg_st_rows_t<LHB, CW, DT_F32>(v, g, k, P, ep, X, D);
    else if (v.dt == DT_BF16) bg_st_rows_t<LHB, CW, DT_BF16>(v, g, k, P, ep, X, D);
    else bg_st_rows_t<LHB, CW, DT_F16>(v, g, k, P, ep, X, D);
}

/* fp32 chunk scratch [O][ld] (columns c0 + c) ↔ shared tile (pitch CW + 1); src NULL: zeros. */
template <int LHB, int CW>
__device__ void bg_ld_scr(float *dst, const float *src, i64 ld, const bg_geo &g, const bg_blk &k) {
#pragma unroll 4
    for (int idx = threadIdx.x; idx < k.gsr * CW; idx += NT) {
        const int l = idx / CW, c = idx & (CW - 1);
        dst[l * (CW + 1) + c] = src && c < k.w ? src[(i64)bg_row<LHB>(g, k.qfix, l) * ld + k.c0 + c] : 0.0f;
    }
}
template <int LHB, int CW>
__device__ void bg_st_scr(float *dst, const float *src, i64 ld, const bg_geo &g, const bg_blk &k) {
#pragma unroll 4
    for (int idx = threadIdx.x; idx < k.gsr * CW; idx += NT) {
        const int l = idx / CW, c = idx & (CW - 1);
        if (c < k.w) dst[(i64)bg_row<LHB>(g, k.qfix, l) * ld + k.c0 + c] = src[l * (CW + 1) + c];
    }
}

/* dst = src (element-wise over a backward tile; every thread its own elements) */
__device__ __forceinline__ void bg_copy(float *dst, const float *src, const bg_blk &k) {
    for (int idx = threadIdx.x; idx < k.gsr * BG_LD; idx += NT) dst[idx] = src[idx];
}

/* ---- the stage ---- */

/* Ns[kk][·] = src[(i·nb + k_kk)·b²..] for the super-group's blocks at stage i (cp.async; commits,
   does not wait). */
template <int B>
__device__ void bg_fill(float *Ns, const float *src, const bg_geo &g, const bg_blk &k, int i, int nb) {
    const int per = B * B / 4, n = (k.gsr / B) * per;
    for (int e = threadIdx.x; e < n; e += NT) {
        const int kk = e / per, off = (e % per) * 4;
        const i64 kg = bg_kglob(g, k.qfix, kk, i);
        cp_async16(Ns + kk * B * B + off, src + ((i64)i * nb + kg) * (B * B) + off, 16);
    }
    cp_commit();
}

template <int B> __device__ __forceinline__ void bg_fill_sync(float *Ns, const float *src, const bg_geo &g, const bg_blk &k, int i, int nb) {
    bg_fill<B>(Ns, src, g, k, i, nb);
    cp_wait(0);
    __syncthreads();
}

/* acc[cc][r] = fmaf(n[r], x[cc], acc[cc][r]), n read once as float4 / float2 broadcasts */
template <int R, int C> __device__ __forceinline__ void bg_fma_row(float (&acc)[C][R], const float *n, const float (&x)[C]) {
    if (R % 4 == 0) {
#pragma unroll
        for (int r = 0; r < R; r += 4) {
            const float4 v = *(const float4 *)(n + r);
#pragma unroll
            for (int cc = 0; cc < C; cc++) {
                acc[cc][r] = fmaf(v.x, x[cc], acc[cc][r]);
                acc[cc][r + 1] = fmaf(v.y, x[cc], acc[cc][r + 1]);
                acc[cc][r + 2] = fmaf(v.z, x[cc], acc[cc][r + 2]);
                acc[cc][r + 3] = fmaf(v.w, x[cc], acc[cc][r + 3]);
            }
        }
    } else {
#pragma unroll
        for (int r = 0; r < R; r += 2) {
            const float2 v = *(const float2 *)(n + r);
#pragma unroll
            for (int cc = 0; cc < C; cc++) {
                acc[cc][r] = fmaf(v.x, x[cc], acc[cc][r]);
                acc[cc][r + 1] = fmaf(v.y, x[cc], acc[cc][r + 1]);
            }
        }
    }
}

/* One stage on the tile (CW columns, pitch CW + 1; lane owns columns lane + 32·cc, cc < CW/32),
   local bit j, operator in Ns (Ns[kk][κ][out]):
     D[t_out] += Σ_κ Ns[kk][κ][out]·x[t_κ],  x = A + Xs (ADD) or Xs (Xs = D, or Ĝ = GY + ΔG),
   κ ascending, fmaf from 0 (k_bs_stage's chain). Starts after a barrier that made Ns and the
   tile visible; ends with one. nsrc: the operator fetched into Ns for stage ni between the two
   barriers (NULL: none). */
template <int B, int GS, int CW, bool ADD>
__device__ void bg_stage(float *Ns, const float *A, const float *Xs, float *D, int j, int nblk, const float *nsrc, int ni,
                         const bg_geo &g, const bg_blk &k, int nb) {
    typedef bg_shape<B, GS> S;
    const int C = CW / 32, LD = CW + 1;
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    float acc[S::T][C][S::R];
    int b0[S::T], b1[S::T];
#pragma unroll
    for (int t = 0; t < S::T; t++) {
        const int tau = t * 8 + wp, kk = tau / S::SEG, seg = tau % S::SEG;
        b0[t] = bg_lq(kk, 0, j) << S::LHB;
        b1[t] = bg_lq(kk, 1, j) << S::LHB;
#pragma unroll
        for (int cc = 0; cc < C; cc++)
#pragma unroll
            for (int r = 0; r < S::R; r++) acc[t][cc][r] = 0.0f;
        if (kk < nblk) {
            const float *nk = Ns + kk * B * B + seg * S::R;
#pragma unroll
            for (int kap = 0; kap < B; kap++) {
                const int row = ((kap & 1) ? b1[t] : b0[t]) + (kap >> 1);
                float x[C];
#pragma unroll
                for (int cc = 0; cc < C; cc++) {
                    x[cc] = Xs[row * LD + lane + 32 * cc];
                    if (ADD) x[cc] = A[row * LD + lane + 32 * cc] + x[cc];
                }
                bg_fma_row<S::R, C>(acc[t], nk + kap * B, x);
            }
        }
    }
    __syncthreads();
    if (nsrc) bg_fill<B>(Ns, nsrc, g, k, ni, nb);
#pragma unroll
    for (int t = 0; t < S::T; t++) {
        const int tau = t * 8 + wp, kk = tau / S::SEG, seg = tau % S::SEG;
        if (kk < nblk) {
#pragma unroll
            for (int r = 0; r < S::R; r++) {
                const int mu = seg * S::R + r, row = ((mu & 1) ? b1[t] : b0[t]) + (mu >> 1);
#pragma unroll
                for (int cc = 0; cc < C; cc++) D[row * LD + lane + 32 * cc] += acc[t][cc][r];
            }
        }
    }
    if (nsrc) cp_wait(0);
    __syncthreads();
}

/* ---- forward ---- */

/* One launch: stages [g.i0, g.i1) on (super-group, 32 columns). plain 0 (the forward's delta
   form): X0s = RN_ct(X), Ds = Din or 0, Δ ← Δ + (N − I)(X_0 + Δ), then Δ → Dout, or (Dout
   NULL) the epilogue into Y. plain 1 (the backward's stage inputs): Ds = Din or RN_ct(X),
   X ← X + (N − I)X, then → Dout. Shared: X0s, Ds (GS × 33), Ns (GS·b). */
template <int B>
__global__ __launch_bounds__(NT) void k_bg_fwd(bg_k P, bg_geo g, const float *Din, float *Dout, int plain) {
    typedef bg_shape<B, BG_GS_FWD> S;
    extern __shared__ float sm[];
    float *X0s = sm, *Ds = X0s + BG_GS_FWD * (BG_CWF + 1), *Ns = Ds + BG_GS_FWD * (BG_CWF + 1);
    const bg_blk k = bg_block<BG_CWF>(g, (int)(blockIdx.x / g.ntile), (int)(blockIdx.x % g.ntile), P.cn);
    const int nblk = k.gsr / B;
    bg_fill<B>(Ns, P.NF, g, k, g.i0, P.nb);
    if (!plain) bg_ld_rows<S::LHB, BG_CWF>(X0s, P.X, g, k, P.j0, P.ct);
    if (Din || !plain) bg_ld_scr<S::LHB, BG_CWF>(Ds, Din, P.ld, g, k);
    else bg_ld_rows<S::LHB, BG_CWF>(Ds, P.X, g, k, P.j0, P.ct);
    cp_wait(0);
    __syncthreads();
    for (int i = g.i0; i < g.i1; i++) {
        const float *nsrc = i + 1 < g.i1 ? P.NF : NULL;
        const int j = g.a + i - g.i0;
        if (plain) bg_stage<B, BG_GS_FWD, BG_CWF, false>(Ns, NULL, Ds, Ds, j, nblk, nsrc, i + 1, g, k, P.nb);
        else bg_stage<B, BG_GS_FWD, BG_CWF, true>(Ns, X0s, Ds, Ds, j, nblk, nsrc, i + 1, g, k, P.nb);
    }
    if (Dout) bg_st_scr<S::LHB, BG_CWF>(Dout, Ds, P.ld, g, k);
    else bg_st_rows<S::LHB, BG_CWF>(P.Y, g, k, P, BG_EP_FWD, X0s, Ds);
}

/* NF[(ik)·b² + κ·b + μ] = Nm[(ik)·b² + μ·b + κ] (when NF), NB = Nm (when NB); e < n = M·nb·b². */
__global__ __launch_bounds__(NT) void k_bg_prep(const float *Nm, float *NF, float *NB, i64 n, int b) {
    const i64 e = (i64)blockIdx.x * NT + threadIdx.x;
    if (e >= n) return;
    const i64 nn = (i64)b * b, base = e / nn * nn, r = e % nn;
    if (NF) NF[e] = Nm[base + (r % b) * b + r / b];
    if (NB) NB[e] = Nm[e];
}

/* ---- backward ---- */

/* W = src (the stage input X_from) advanced by stages [from, upto) (plain form). Ends
   synchronised when it ran a stage; otherwise the caller's next barrier orders the copy. */
template <int B>
__device__ void bg_replay(float *W, const float *src, int from, int upto, float *Ns, const bg_geo &g, const bg_blk &k,
                          const bg_k &P) {
    bg_copy(W, src, k);
    for (int i = from; i < upto; i++) {
        bg_fill_sync<B>(Ns, P.NF, g, k, i, P.nb);
        bg_stage<B, BG_GS_BWD, BG_CW, false>(Ns, NULL, W, W, g.a + i - g.i0, k.gsr / B, NULL, 0, g, k, P.nb);
    }
}

/* Block-gradient partial of stage i (local bit j) over the tile's columns, added to the CUDA
   block's own partial: gp[((i·nb + k)·np + p)·b² + μ·b + ν] += Σ_{c<w} Ĝ[t_μ][c]·Ŵ[t_ν][c]
   (Ĝ = Gh (GH) or GY + ΔG; Ŵ = W = X_i; columns in order, fmaf from 0). Thread = an R1×R2 tile of one
   local block's entries. Reads shared memory only (no barrier). */
template <int B, bool GH>
__device__ void bg_gn(const float *Gh, const float *GYs, const float *DGs, const float *Ws, int i, float *gpart, int np, int p,
                      const bg_geo &g, const bg_blk &k, const bg_k &P) {
    typedef bg_shape<B, BG_GS_BWD> S;
    const int kk = threadIdx.x / S::SUB, rem = threadIdx.x % S::SUB;
    if (kk >= k.gsr / B) return;
    const int mu0 = rem / (B / S::R2) * S::R1, nu0 = rem % (B / S::R2) * S::R2, j = g.a + i - g.i0;
    const int b0 = bg_lq(kk, 0, j) << S::LHB, b1 = bg_lq(kk, 1, j) << S::LHB;
    int rm[S::R1], rn[S::R2];
#pragma unroll
    for (int r = 0; r < S::R1; r++) rm[r] = ((((mu0 + r) & 1) ? b1 : b0) + ((mu0 + r) >> 1)) * BG_LD;
#pragma unroll
    for (int r = 0; r < S::R2; r++) rn[r] = ((((nu0 + r) & 1) ? b1 : b0) + ((nu0 + r) >> 1)) * BG_LD;
    float *gp = gpart + (((i64)i * P.nb + bg_kglob(g, k.qfix, kk, i)) * np + p) * (B * B) + mu0 * B + nu0;
    float acc[S::R1][S::R2];
#pragma unroll
    for (int r = 0; r < S::R1; r++)
#pragma unroll
        for (int q = 0; q < S::R2; q++) acc[r][q] = 0.0f;
#pragma unroll 4
    for (int c = 0; c < k.w; c++) {
        float gv[S::R1], wv[S::R2];
#pragma unroll
        for (int r = 0; r < S::R1; r++) gv[r] = GH ? Gh[rm[r] + c] : GYs[rm[r] + c] + DGs[rm[r] + c];
#pragma unroll
        for (int q = 0; q < S::R2; q++) wv[q] = Ws[rn[q] + c];
#pragma unroll
        for (int r = 0; r < S::R1; r++)
#pragma unroll
            for (int q = 0; q < S::R2; q++) acc[r][q] = fmaf(gv[r], wv[q], acc[r][q]);
    }
#pragma unroll
    for (int r = 0; r < S::R1; r++)
#pragma unroll
        for (int q = 0; q < S::R2; q++) gp[r * B + q] += acc[r][q];
}

/* rpart[(j0/32 + tile)·O + row] = Σ_{c<w} GY·XM per row (columns in order, fmaf from 0). */
template <int LHB>
__device__ void bg_rho_part(const float *GYs, const float *XM, float *rpart, int tile, const bg_geo &g, const bg_blk &k,
                            const bg_k &P) {
    for (int l = threadIdx.x; l < k.gsr; l += NT) {
        float acc = 0.0f;
        for (int c = 0; c < k.w; c++) acc = fmaf(GYs[l * BG_LD + c], XM[l * BG_LD + c], acc);
        rpart[(P.j0 / BG_CW + tile) * P.O + bg_row<LHB>(g, k.qfix, l)] = acc;
    }
}

/* One backward launch over stages [g.i0, g.i1) (see the header): CUDA block = (super-group,
   column split p of np) walking the tiles p, p + np, …. Xin: X_{i0} (NULL: RN_ct(X)); DGin: ΔG
   (NULL in the launch ending at M: (ρ − 1)·GY); DGout: ΔG out (NULL: GX epilogue when wanted).
   Stage inputs X_i (∂L/∂B) are replayed from X_{i0} (X0s) or, with use_cp (s ≥ 3), from the
   checkpoint X_cp (Cs), cp = i0 + ⌊s/2⌋: s = 5 replays 6 stages instead of 10, s = 3 2 instead
   of 3. With use_gh (∂L/∂B, where it fits), Ĝ = GY + ΔG is formed once per stage in Gh (the
   G_N partial then reads 1 value per μ instead of 2 and an add; the transposed stage reads Gh). Shared: GYs, DGs, X0s,
   Ws (GS × 33), Ns (GS·b), Gh (GS × 33, use_gh), Cs (GS × 33, use_cp). */
template <int B>
__global__ __launch_bounds__(NT, B >= 8 ? 2 : 1) void k_bg_bwd(bg_k P, bg_geo g, const float *Xin, const float *DGin,
                                                             float *DGout, float *gpart, int np, float *rpart, int want_b,
                                                             int want_rho, int use_cp, int use_gh) {
    typedef bg_shape<B, BG_GS_BWD> S;
    extern __shared__ float sm[];
    float *GYs = sm, *DGs = GYs + BG_GS_BWD * BG_LD, *X0s = DGs + BG_GS_BWD * BG_LD, *Ws = X0s + BG_GS_BWD * BG_LD;
    float *Ns = Ws + BG_GS_BWD * BG_LD, *Gh = Ns + BG_GS_BWD * B, *Cs = Gh + (use_gh ? BG_GS_BWD * BG_LD : 0);
    const int nsg = (int)(P.O >> g.lgs), sg = (int)(blockIdx.x % nsg), p = (int)(blockIdx.x / nsg);
    const bool last = g.i1 == P.M, rp = want_rho && last;
    const int cp = use_cp ? g.i0 + (g.i1 - g.i0) / 2 : g.i0;
    for (int tile = p; tile < g.ntile; tile += np) {
        const bg_blk k = bg_block<BG_CW>(g, sg, tile, P.cn);
        bg_ld_rows<S::LHB, BG_CW>(GYs, P.GY, g, k, P.j0, P.ct);
        if (want_b || rp) {
            if (Xin) bg_ld_scr<S::LHB, BG_CW>(X0s, Xin, P.ld, g, k);
            else bg_ld_rows<S::LHB, BG_CW>(X0s, P.X, g, k, P.j0, P.ct);
        }
        if (!last) bg_ld_scr<S::LHB, BG_CW>(DGs, DGin, P.ld, g, k);
        __syncthreads();
        if (use_cp && (want_b || rp)) bg_replay<B>(Cs, X0s, g.i0, cp, Ns, g, k, P);
        if (rp) {   /* X_M into DGs (free until ΔG is initialised below), then G_ρ's partial */
            bg_replay<B>(DGs, use_cp ? Cs : X0s, cp, g.i1, Ns, g, k, P);
            bg_rho_part<S::LHB>(GYs, DGs, rpart, tile, g, k, P);
            __syncthreads();
        }
        if (last)
            for (int idx = threadIdx.x; idx < k.gsr * BG_LD; idx += NT) {
                const int l = idx / BG_LD;
                DGs[idx] = (rho_ct(P.rho, bg_row<S::LHB>(g, k.qfix, l), P.ct) - 1.0f) * GYs[idx];
            }
        for (int i = g.i1 - 1; i >= g.i0; i--) {
            const float *W = NULL;
            if (want_b) {   /* X_i: the nearest stored input at or below i, advanced in Ws */
                const bool fromc = use_cp && i >= cp;
                const int from = fromc ? cp : g.i0;
                W = fromc ? Cs : X0s;
                if (i > from) {
                    bg_replay<B>(Ws, W, from, i, Ns, g, k, P);
                    W = Ws;
                }
            }
            if (use_gh)   /* Ĝ (every thread its own elements; the barrier below publishes it) */
                for (int idx = threadIdx.x; idx < k.gsr * BG_LD; idx += NT) Gh[idx] = GYs[idx] + DGs[idx];
            bg_fill_sync<B>(Ns, P.NB, g, k, i, P.nb);
            if (use_gh) bg_gn<B, true>(Gh, GYs, DGs, W, i, gpart, np, p, g, k, P);
            else if (want_b) bg_gn<B, false>(Gh, GYs, DGs, W, i, gpart, np, p, g, k, P);
            if (use_gh) {
                bg_stage<B, BG_GS_BWD, BG_CW, false>(Ns, NULL, Gh, DGs, g.a + i - g.i0, k.gsr / B, NULL, 0, g, k, P.nb);
            } else {
                bg_stage<B, BG_GS_BWD, BG_CW, true>(Ns, GYs, DGs, DGs, g.a + i - g.i0, k.gsr / B, NULL, 0, g, k, P.nb);
            }
        }
        if (DGout) bg_st_scr<S::LHB, BG_CW>(DGout, DGs, P.ld, g, k);
        else if (P.GX.p) bg_st_rows<S::LHB, BG_CW>(P.GX, g, k, P, BG_EP_BWD, GYs, DGs);
        __syncthreads();
    }
}

/* GR[e] = m·(float)Σ_p (double)gpart[((e / nn)·np + p)·nn + e % nn], p in order; e < n. */
__global__ __launch_bounds__(NT) void k_bg_gsum(const float *gpart, int np, i64 n, i64 nn, float m, float *GR) {
    const i64 e = (i64)blockIdx.x * NT + threadIdx.x;
    if (e >= n) return;
    const float *g = gpart + (e / nn) * np * nn + e % nn;
    double v = 0.0;
    for (int p = 0; p < np; p++) v += (double)g[(i64)p * nn];
    GR[e] = m * (float)v;
}

/* ---- host ---- */

static int bg_lg2(i64 v) {
    int r = 0;
    while (((i64)1 << r) < v) r++;
    return r;
}

static bool bg_pow2_b(i64 b) { return b == 2 || b == 4 || b == 8 || b == 16 || b == 32 || b == 64; }

static bool bg_stagewise_env(void) {
    const char *e = getenv("LYCO_CUDA_BOFT_STAGEWISE");
    return e && e[0] == '1';
}

/* Dynamic shared memory: forward (bwd 0) or backward with `extra` tiles beyond GYs, DGs, X0s, Ws
   (Gh with ∂L/∂B, Cs with the checkpoint). */
static size_t bg_smem(int bwd, i64 b, int extra) {
    return bwd ? sizeof(float) * (size_t)((4 + extra) * BG_GS_BWD * BG_LD + BG_GS_BWD * b)
               : sizeof(float) * (size_t)(2 * BG_GS_FWD * (BG_CWF + 1) + BG_GS_FWD * b);
}

/* True when 2 backward CUDA blocks with `extra` additional tiles fit in an SM's shared memory
   (the per-block opt-in limit plus the 1 KB the runtime reserves per block). */
static bool bg_two_fit(const lk_device *dev, i64 b, int extra) {
    const size_t lim = dev && dev->smem_optin > 0 ? (size_t)dev->smem_optin : 0;
    return 2 * (bg_smem(1, b, extra) + 1024) <= lim + 1024;
}

/* log2 of the local q range of a super-group of GS rows: stages per launch at most */
static int bg_lb(const lk_oft_args *a, int GS) {
    const i64 gsr = a->O < GS ? a->O : GS;
    return bg_lg2(gsr / (a->bs / 2));
}

bool bg_takes(const lk_oft_args *a, const lk_device *dev, int bwd, const char **why) {
    const char *w = NULL;
    const size_t lim = dev && dev->smem_optin > 0 ? (size_t)dev->smem_optin : 48 * 1024;
    if (bg_stagewise_env()) w = "LYCO_CUDA_BOFT_STAGEWISE=1";
    else if (!bg_pow2_b(a->bs)) w = "block size not a power of two";
    else if (a->ncol <= 0) w = "no columns";
    else if (bg_smem(bwd, a->bs, 0) > lim) w = "shared memory above the device's opt-in limit";
    else if (bg_lb(a, bwd ? BG_GS_BWD : BG_GS_FWD) < 1) w = "fewer than 2 half-blocks per super-group";
    if (why) *why = w;
    return w == NULL;
}

/* The j-th of nL launches over M stages (even split), for super-groups of GS rows × CW columns. */
static bg_geo bg_launch_geo(const lk_oft_args *a, int GS, int CW, int nL, int jl, i64 cn) {
    const int M = (int)a->M, base = M / nL, rem = M % nL;
    bg_geo g;
    g.i0 = jl * base + (jl < rem ? jl : rem);
    g.i1 = g.i0 + base + (jl < rem ? 1 : 0);
    g.lb = bg_lb(a, GS);
    g.lgs = bg_lg2(a->O < GS ? a->O : GS);
    const int e = g.lb - (g.i1 - g.i0);
    g.a = e < g.i0 ? e : g.i0;
    g.ntile = (int)cdiv(cn, CW);
    return g;
}

static int bg_grid(i64 blocks, unsigned *g) {
    if (blocks > 0x7fffffff)
        return lyco_fail(LYCO_ERR_BACKEND, "cuda boft: %lld CUDA blocks exceed the grid", (long long)blocks);
    *g = (unsigned)blocks;
    return LYCO_OK;
}

/* Chunk width: the columns in the fewest chunks with per_col·CC ≤ budget floats (per_col 0: no
   scratch) and at most 2^30 (the kernels' int column offsets), split evenly (a multiple of
   BG_CW, at least BG_CW). */
static i64 bg_chunk(i64 ncol, i64 per_col, i64 budget) {
    const i64 all = cdiv(ncol, BG_CW) * BG_CW, lim = (i64)1 << 30;
    i64 cc = per_col > 0 ? budget / per_col / BG_CW * BG_CW : all;
    if (cc > lim) cc = lim;
    if (cc < BG_CW) cc = BG_CW;
    if (cc >= all) return all;
    return cdiv(cdiv(all, cdiv(all, cc)), BG_CW) * BG_CW;
}

static void bg_args(bg_k *P, const lk_oft_args *a, const float *NF, const float *NB, i64 CC) {
    memset(P, 0, sizeof *P);
    P->NF = NF;
    P->NB = NB;
    P->X = a->X;
    P->Y = a->Y;
    P->GY = a->GY;
    P->GX = a->GX;
    P->rho = a->rho;
    P->nb = (int)a->nb;
    P->ct = a->ct;
    P->delta = a->delta;
    P->M = (int)a->M;
    P->O = a->O;
    P->ld = CC;
}

static int bg_prep(const float *Nm, float *NF, float *NB, const lk_oft_args *a, cudaStream_t st) {
    const i64 n = a->M * a->nb * a->bs * a->bs;
    unsigned g = 0;
    int rc = bg_grid(cdiv(n, NT), &g);
    if (rc) return rc;
    k_bg_prep<<<g, NT, 0, st>>>(Nm, NF, NB, n, (int)a->bs);
    LK_LAUNCHED("boft operator layouts");
    return LYCO_OK;
}

template <int B> static int bg_fwd_launch(const bg_k *P, const bg_geo *g, const float *Din, float *Dout, int plain, cudaStream_t st) {
    const i64 nsg = P->O >> g->lgs;
    unsigned grid = 0;
    int rc = bg_grid(nsg * g->ntile, &grid);
    if (rc || grid == 0) return rc;
    const size_t smem = bg_smem(0, B, 0);
    LK_SMEM_OPTIN(smem, k_bg_fwd<B>);
    k_bg_fwd<B><<<grid, NT, smem, st>>>(*P, *g, Din, Dout, plain);
    LK_LAUNCHED("boft stage group (forward)");
    return LYCO_OK;
}

static int bg_fwd_any(i64 b, const bg_k *P, const bg_geo *g, const float *Din, float *Dout, int plain, cudaStream_t st) {
    switch (b) {
    case 2: return bg_fwd_launch<2>(P, g, Din, Dout, plain, st);
    case 4: return bg_fwd_launch<4>(P, g, Din, Dout, plain, st);
    case 8: return bg_fwd_launch<8>(P, g, Din, Dout, plain, st);
    case 16: return bg_fwd_launch<16>(P, g, Din, Dout, plain, st);
    case 32: return bg_fwd_launch<32>(P, g, Din, Dout, plain, st);
    case 64: return bg_fwd_launch<64>(P, g, Din, Dout, plain, st);
    default: return lyco_fail(LYCO_ERR_BACKEND, "cuda boft: block size %lld has no stage-group kernel", (long long)b);
    }
}

/* Forward: per chunk of CC columns, nL launches; Δ in place in an fp32 [O][CC] scratch between
   them (none when nL = 1). */
int bg_fwd(const lk_oft_args *a, const lk_device *dev, cudaStream_t st) {
    (void)dev;
    const int lb = bg_lb(a, BG_GS_FWD), nL = (int)cdiv(a->M, lb);
    const i64 O = a->O, CC = bg_chunk(a->ncol, nL > 1 ? O : 0, BG_BUDGET), nop = a->M * a->nb * a->bs * a->bs;
    oft_cay cy;
    void *mem = NULL;
    int rc = oft_cay_fwd(&cy, a, OFT_FAM_BOFT, st);
    if (!rc) rc = lk_scratch_alloc(&mem, sizeof(float) * (size_t)(nop + (nL > 1 ? O * CC : 0)), st);
    if (!rc) {
        float *NF = (float *)mem, *D = nL > 1 ? NF + nop : NULL;
        bg_k P;
        bg_args(&P, a, NF, NULL, CC);
        rc = bg_prep(cy.Op1, NF, NULL, a, st);
        for (i64 j0 = 0; j0 < a->ncol && !rc; j0 += CC) {
            P.j0 = j0;
            P.cn = a->ncol - j0 < CC ? a->ncol - j0 : CC;
            for (int jl = 0; jl < nL && !rc; jl++) {
                const bg_geo g = bg_launch_geo(a, BG_GS_FWD, BG_CWF, nL, jl, P.cn);
                rc = bg_fwd_any(a->bs, &P, &g, jl ? D : NULL, jl + 1 < nL ? D : NULL, 0, st);
            }
        }
    }
    int rc2 = lk_scratch_free(mem, st), rc3 = oft_cay_free(&cy, st);
    return rc ? rc : rc2 ? rc2 : rc3;
}

/* use_cp: stage ranges of 3+ with X needed take the checkpoint buffer when it fits (cp_fits). */
template <int B>
static int bg_bwd_launch(const bg_k *P, const bg_geo *g, const float *Xin, const float *DGin, float *DGout, float *gpart,
                         int np, float *rpart, int want_b, int want_rho, int cp_fits, int use_gh, cudaStream_t st) {
    const i64 nsg = P->O >> g->lgs;
    unsigned grid = 0;
    int rc = bg_grid(nsg * np, &grid);
    if (rc || grid == 0) return rc;
    const int use_cp = cp_fits && g->i1 - g->i0 >= 3 && (want_b || (want_rho && g->i1 == P->M));
    const size_t smem = bg_smem(1, B, use_gh + use_cp);
    LK_SMEM_OPTIN(smem, k_bg_bwd<B>);
    k_bg_bwd<B><<<grid, NT, smem, st>>>(*P, *g, Xin, DGin, DGout, gpart, np, rpart, want_b, want_rho, use_cp, use_gh);
    LK_LAUNCHED("boft stage group (backward)");
    return LYCO_OK;
}

static int bg_bwd_any(i64 b, const bg_k *P, const bg_geo *g, const float *Xin, const float *DGin, float *DGout, float *gpart,
                      int np, float *rpart, int want_b, int want_rho, int cp_fits, int use_gh, cudaStream_t st) {
    switch (b) {
    case 2: return bg_bwd_launch<2>(P, g, Xin, DGin, DGout, gpart, np, rpart, want_b, want_rho, cp_fits, use_gh, st);
    case 4: return bg_bwd_launch<4>(P, g, Xin, DGin, DGout, gpart, np, rpart, want_b, want_rho, cp_fits, use_gh, st);
    case 8: return bg_bwd_launch<8>(P, g, Xin, DGin, DGout, gpart, np, rpart, want_b, want_rho, cp_fits, use_gh, st);
    case 16: return bg_bwd_launch<16>(P, g, Xin, DGin, DGout, gpart, np, rpart, want_b, want_rho, cp_fits, use_gh, st);
    case 32: return bg_bwd_launch<32>(P, g, Xin, DGin, DGout, gpart, np, rpart, want_b, want_rho, cp_fits, use_gh, st);
    case 64: return bg_bwd_launch<64>(P, g, Xin, DGin, DGout, gpart, np, rpart, want_b, want_rho, cp_fits, use_gh, st);
    default: return lyco_fail(LYCO_ERR_BACKEND, "cuda boft: block size %lld has no stage-group kernel", (long long)b);
    }
}

/* Scratch of the backward (one allocation, carved in this order). */
typedef struct {
    float *NF, *NB, *gpart, *rpart, *GR, *DG, *Xb;
    int np;
    i64 CC;
} bg_bwd_mem;

static size_t bg_bwd_layout(const lk_oft_args *a, const lk_device *dev, int nL, bool need_x, bool want_b, bool want_rho,
                            bg_bwd_mem *S, char *base) {
    const i64 O = a->O, nop = a->M * a->nb * a->bs * a->bs, nxb = need_x && nL > 1 ? nL - 1 : 0;
    S->CC = bg_chunk(a->ncol, nL > 1 ? (nxb + 1) * O : 0, BG_BUDGET);
    const i64 nsg = O / (O < BG_GS_BWD ? O : BG_GS_BWD), ntile = S->CC / BG_CW, sms = dev && dev->sms > 0 ? dev->sms : 1;
    /* column splits: one wave of CUDA blocks (2 per SM; 1 for b ≤ 4, launch bounds), then as few
       splits as give the same tiles per block; partials within the budget */
    i64 np = (a->bs >= 8 ? 2 : 1) * sms / nsg, cap = BG_BUDGET / nop;
    if (np > cap) np = cap;
    if (np > ntile) np = ntile;
    if (np < 1) np = 1;
    S->np = (int)cdiv(ntile, cdiv(ntile, np));
    const i64 n[7] = {need_x ? nop : 0, nop, want_b ? S->np * nop : 0, want_rho ? cdiv(a->ncol, BG_CW) * O : 0,
                      want_b ? nop : 0, nL > 1 ? O * S->CC : 0, nxb * O * S->CC};
    float **dst[7] = {&S->NF, &S->NB, &S->gpart, &S->rpart, &S->GR, &S->DG, &S->Xb};
    size_t off = 0;
    for (int q = 0; q < 7; q++) {
        *dst[q] = n[q] && base ? (float *)(base + off) : NULL;
        off += ((size_t)n[q] * sizeof(float) + 255) / 256 * 256;
    }
    return off;
}

static int bg_zero(float *p, i64 n, cudaStream_t st) {
    LK_CHECK(cudaMemsetAsync(p, 0, sizeof(float) * (size_t)n, st));
    return LYCO_OK;
}

static int bg_gsum(const bg_bwd_mem *S, i64 nop, i64 nn, double m, cudaStream_t st) {
    unsigned g = 0;
    int rc = bg_grid(cdiv(nop, NT), &g);
    if (rc) return rc;
    k_bg_gsum<<<g, NT, 0, st>>>(S->gpart, S->np, nop, nn, (float)m, S->GR);
    LK_LAUNCHED("boft block gradient sum");
    return LYCO_OK;
}

/* Backward: per chunk, the plain forward launches storing the launch boundaries X_{i0} (when
   X is needed), then the backward launches in reverse (ΔG in place in scratch between them);
   then GR = m·Σ_p partials, the Cayley adjoint, G_ρ = Σ_tiles partials. */
int bg_bwd(const lk_oft_args *a, const lk_device *dev, cudaStream_t st) {
    const int want_b = a->gB.p != NULL, want_rho = a->grho.p != NULL && a->rho.p != NULL, need_x = want_b || want_rho;
    const int lb = bg_lb(a, BG_GS_BWD), nL = (int)cdiv(a->M, lb);
    const i64 O = a->O, nn = a->bs * a->bs, nop = a->M * a->nb * nn;
    /* Gh, then the checkpoint buffer, only where 2 CUDA blocks per SM keep fitting */
    const int use_gh = want_b && bg_two_fit(dev, a->bs, 1), cp_fits = bg_two_fit(dev, a->bs, use_gh + 1);
    bg_bwd_mem S;
    const size_t bytes = bg_bwd_layout(a, dev, nL, need_x, want_b, want_rho, &S, NULL);
    oft_cay cy;
    void *mem = NULL;
    int rc = oft_cay_fwd(&cy, a, OFT_FAM_BOFT, st);
    if (!rc) rc = lk_scratch_alloc(&mem, bytes, st);
    if (!rc) {
        bg_bwd_layout(a, dev, nL, need_x, want_b, want_rho, &S, (char *)mem);
        bg_k P;
        bg_args(&P, a, S.NF, S.NB, S.CC);
        rc = bg_prep(cy.Op1, S.NF, S.NB, a, st);
        if (!rc && want_b) rc = bg_zero(S.gpart, S.np * nop, st);
        for (i64 j0 = 0; j0 < a->ncol && !rc; j0 += S.CC) {
            P.j0 = j0;
            P.cn = a->ncol - j0 < S.CC ? a->ncol - j0 : S.CC;
            for (int jl = 0; need_x && jl + 1 < nL && !rc; jl++) {
                const bg_geo g = bg_launch_geo(a, BG_GS_FWD, BG_CWF, nL, jl, P.cn);
                rc = bg_fwd_any(a->bs, &P, &g, jl ? S.Xb + (jl - 1) * O * S.CC : NULL, S.Xb + jl * O * S.CC, 1, st);
            }
            for (int jl = nL - 1; jl >= 0 && !rc; jl--) {
                const bg_geo g = bg_launch_geo(a, BG_GS_BWD, BG_CW, nL, jl, P.cn);
                rc = bg_bwd_any(a->bs, &P, &g, need_x && jl ? S.Xb + (jl - 1) * O * S.CC : NULL, jl + 1 < nL ? S.DG : NULL,
                                jl ? S.DG : NULL, S.gpart, S.np, S.rpart, want_b, want_rho, cp_fits, use_gh, st);
            }
        }
        if (!rc && want_b) rc = bg_gsum(&S, nop, nn, a->m, st);
        if (!rc && want_b) rc = oft_cay_bwd(&cy, a, S.GR, st);
        if (!rc && want_rho) rc = oft_sum_rho(S.rpart, cdiv(a->ncol, BG_CW), O, &a->grho, st);
    }
    int rc2 = lk_scratch_free(mem, st), rc3 = oft_cay_free(&cy, st);
    return rc ? rc : rc2 ? rc2 : rc3;
}
