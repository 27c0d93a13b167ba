/*
 * glora.cu — GLoRA (ALGORITHMS.md §2.7, lyco's semantics: s·m·σs applied once) on the GPU:
 * all four directions for linear and conv layers (W flattened to O×(I·K), column j = c·K + κ;
 * bypass activations N×C×spatial, linear = no spatial dims).
 *
 *   ΔW[o, c·K+κ] = s·σs·( Σ_i B1[o,i]·B2[i, c·K+κ] + Σ_j P_κ[o,j]·A2[j,c] ),
 *   P_κ[o,j]     = Σ_c' W[o, c'·K+κ]·A1[c',j]                     (W ×_in A1, per kernel position)
 *
 * Per kernel position κ, ΔW's columns {c·K+κ} are one rank-2r product [B1 | P_κ]·[B2_κ ; A2]
 * (B2_κ = B2's columns c·K+κ): every step below is a small GEMM over strided views of the
 * operands, batched over κ (grid z) or summed over κ (the reduction's outer loop). One kernel
 * does them all (k_gemm): C = Σ_terms Σ_κ A_t·B_t, FFMA in fp32 from operands rounded to the
 * compute dtype CT in registers (fp32 scratch operands — P, the rank activations — are used as
 * they are, never rounded), with an epilogue that either stores coef·σs·acc (optionally
 * RN_CT(acc)·q first, the bypass rank activation) rounded once to the destination's dtype, or
 * applies the merge epilogue of merge_ep.cuh (out = w + m·dw | m·dw | w − m·dw, w = RN_CT(base)).
 *
 * merge fwd : P (fp32 scratch, K·O·r), then out_κ = merge(W_κ, s·σs·(B1·B2_κ + P_κ·A2)).
 * merge bwd : (Γ = RN_CT(∂L/∂W''), c = s·m·σs)
 *             G_B1 = c·Γ·B2ᵀ,  G_B2 = c·B1ᵀ·Γ,  G_A2 = c·Σ_κ P_κᵀ·Γ_κ,
 *             GP_κ = Γ_κ·A2ᵀ (fp32 scratch),  G_A1 = c·Σ_κ W_κᵀ·GP_κ,
 *             G_σs = s·m·(⟨B1, Γ·B2ᵀ⟩ + ⟨P, GP⟩).
 * bypass fwd (the A path's op(A1·A2·x, W) is reassociated through P: conv(hA, P) — the base
 *             weight's contraction over I is done once, on W, not per token):
 *             hA = RN_CT(x·A2ᵀ)⊙q_a (x's grid), hB = RN_CT(op(x, B2))⊙q_b (y's grid), rounded like
 *             the eager chain (NUMERICS.md §1.6);  y = y0 + s·m·σs·(Σ_κ im2col_κ(hA)·P_κᵀ + hB·B1ᵀ).
 * bypass bwd (g = RN_CT(dy), c = s·m·σs):
 *             gA = (Σ_κ gather_κ(g)·P_κ)⊙q_a,  gB = (g·B1)⊙q_b,  dx = c·(gA·A2 + Σ_κ gather_κ(gB)·B2_κ),
 *             G_A2 = c·gAᵀ·x,  G_B2_κ = c·gBᵀ·im2col_κ(x),  G_B1 = c·(gᵀ·hB)⊙q_b,
 *             G_A1 = c·Σ_κ W_κᵀ·Y_κ, Y_κ = (gᵀ·im2col_κ(hA))⊙q_a  (no N×I×spatial intermediate),
 *             G_σs = s·m·(⟨gA, hA⟩ + ⟨gB, hB⟩)  (hA, hB unmasked here);  dy0 = RN(dy), or 0 when
 *             y0 was given with LYCO_BYPASS_DELTA_ONLY.
 *             im2col_κ / gather_κ: operands read through the conv geometry (k_gemm's GK_IM2COL /
 *             GK_GATHER), never materialised; linear layers are the 1-position, K = 1 case.
 * Tiling: 64×64 output tiles, 256 threads × 4×4 accumulators, reduction in steps of 16 staged
 * through shared memory (fp32, ~8.5 KB); grid x = row tiles, y = column tiles, z = κ batch.
 * Accumulation: each step's 16 products are summed in fp32 (FFMA), the step partials are added
 * in fp64. P = W·A1 and the rank activations are reductions over I (1280+ terms) feeding a second
 * product: one fp32 running sum over I put the fp32-output rows ~40 ULP off (the sum's error
 * grows like √I·u relative); the two-level sum bounds it by the 16-term step.
 * Skinny products (few output tiles, long reduction: P = W·A1, the factor gradients) are split
 * over the reduction into S fp64 partials (S from the shape only: ≥ 512 blocks, ≥ 256 elements per
 * split), summed in split order by k_gemm_fin, which applies the same epilogue.
 * Linear layers at bf16 / fp32 compute, r ≤ 64: the merges take lowrank.cu's streaming kernels
 * instead (LoRA's; kern_lowrank.h), since ΔW = s·σs·[B1 | P]·[B2 ; A2] is a rank-2r LoRA product:
 *   merge fwd : P = W·A1 (row reduction, fp32 partials summed in order), Pcat = [RN_CT(B1) | P's
 *               3 bf16 parts] (O × 4r, every operand CT: the expand's lean kernel; r ≤ 32) with
 *               Qcat = [B2 ; A2 ; A2 ; A2], or for fp32 compute / bf16 with 32 < r ≤ 64 Pcat =
 *               [RN_CT(B1) | P] in fp32 (P entering as nsplit CT parts: P is never rounded to CT)
 *               with Qcat = [B2 ; A2]; then the expand with the merge epilogue.
 *   merge bwd : Γ·Qcatᵀ (one row reduction of Γ) → G_B1 = c·Γ·B2ᵀ and GP = Γ·A2ᵀ; P = W·A1;
 *               G_B2 = c·B1ᵀ·Γ, G_A2 = c·Pᵀ·Γ (P in parts), G_A1 = c·Wᵀ·GP (GP in parts): column
 *               reductions; G_σs by k_dot2 as below. At bf16 compute only when no gradient is fp32
 *               (two chained tensor-core reductions were too coarse for fp32 gradients: see
 *               lean_merge_bwd); fp32 compute runs the reductions in FFMA.
 *   bypass fwd (no rank masks): h' = RN_CT(x·qcatᵀ) with qcat = [B2 ; A2 ; A2 ; A2] (the rank
 *               activations, hA repeated per P part), then y = y0 + s·m·σs·h'·pcatᵀ: LoRA's bypass
 *               forward (lk_reduce_h, the expand with Q = pcat transposed). The generic kernel:
 *               2973 µs for 8192 tokens × 4096², r8 (53× the floor; 1334 µs in the output product).
 *   bypass bwd (no rank masks; at 16-bit compute only with 16-bit outputs): [gB | gA] = g·[B1 | P's
 *               parts] (one row reduction of dy), h = RN_CT(x·[B2 ; A2]ᵀ), dx by the expand, the
 *               factor gradients by column reductions (lean_bypass_bwd). The generic kernel: 7334 µs.
 *   The generic kernel took 818 / 1818 µs for a 4096² r8 merge forward / backward on the H200 (51× /
 *   114× the floor; ncu: 344 µs for P's split product, 477 µs for the merge product). fp16 keeps
 *   the generic kernel (a 2-part fp16 split of P loses its small part to fp16's subnormal range).
 *   LYCO_CUDA_GLORA_GENERIC=1 (read at each call) keeps every call on the generic kernel (A/B).
 *   Extra memory: O·2r floats + 2r·I CT values, and the reductions' fp32 partials.
 * Deterministic: each output element is a fixed-order sum; the σs dot products are one block's
 * fixed-order tree. No atomics, no host synchronisation.
 * Extra memory (fp32 scratch, stream-ordered): merge fwd K·O·r; merge bwd 2·K·O·r + O·r;
 * bypass fwd K·O·r + N·r·(sp_in + sp_out); bypass bwd 2·K·O·r + 2·N·r·(sp_in + sp_out); plus,
 * while a split product runs, its fp64 partials (S·Z·M·N doubles, S ≤ 64).
 */
#include <stdio.h>
#include <string.h>

#include "cuda/kern_glora.h"
#include "cuda/kern_lowrank.h"
#include "cuda/merge_ep.cuh"

#define GBM 64
#define GBN 64
#define GBK 16

/* Operand kinds. PLAIN: element (r, c) of a 2-stride view (+ z·zs + zz·zr). The activation
   kinds read an lk_act-shaped tensor whose rows are (n, p) = (row / SP, row % SP) and columns
   channels: ACT reads position p itself; IM2COL (rows over output positions) reads the input
   position p·σ − π + κ·δ of kernel offset κ (0 outside the input); GATHER (rows over input
   positions) reads the output position q with q·σ − π + κ·δ = p (0 when there is none). */
enum { GK_PLAIN = 0, GK_ACT, GK_IM2COL, GK_GATHER };

typedef struct {
    lk_view v;          /* PLAIN: the view; activation kinds: p, dt, flags */
    i64 zs, zr;         /* PLAIN: element offsets per batch / reduction index */
    int raw;            /* 1: fp32 scratch, used as is; 0: a tensor, rounded to CT */
    int kind, trans;    /* trans: the activation is used transposed (channels × positions) */
    int kz;             /* IM2COL / GATHER: κ = the batch index z (1) or the reduction index (0) */
    i64 sn, sc, sp, SP; /* activation strides; positions per sample of the row axis */
} gop;

typedef struct {
    int nt;                 /* terms (1 or 2) */
    gop A[2], B[2];         /* A_t M×Kd_t, B_t Kd_t×N */
    i64 Kd[2], ZR[2];       /* ZR: reduction over κ (1 = none) */
    i64 M, N;
    int ct;
    gop C, base;            /* output; merge epilogue base (p NULL = 0) */
    int mode;               /* −1: store coef·σs·v; ≥ 0: merge_elem mode */
    float coef, m;
    lk_view sigma, colq;    /* σs (p NULL = 1), per-column scale (p NULL = 1) */
    int rnd_first;          /* v = RN_CT(acc) before colq */
    lk_geo geo;
    i64 Z, kper;            /* batch count; split-K: reduction elements per split */
    double *part;           /* split-K partials S×Z×M×N (NULL: no split, epilogue in k_gemm) */
} ggemm;

/* The source position of IM2COL / GATHER for row position p and kernel offset kap; false: zero. */
__device__ __forceinline__ bool src_pos(const lk_geo &G, int kind, i64 p, i64 kap, i64 &q) {
    i64 c[3], kk[3];
    const int64_t *rowdim = kind == GK_IM2COL ? G.out : G.in, *srcdim = kind == GK_IM2COL ? G.in : G.out;
    for (int d = G.nd - 1; d >= 0; d--) {
        c[d] = p % rowdim[d];
        p /= rowdim[d];
        kk[d] = kap % G.k[d];
        kap /= G.k[d];
    }
    q = 0;
    for (int d = 0; d < G.nd; d++) {
        i64 t;
        if (kind == GK_IM2COL) {
            t = c[d] * G.st[d] - G.pad[d] + kk[d] * G.dil[d];
        } else {
            i64 u = c[d] + G.pad[d] - kk[d] * G.dil[d];
            if (u < 0 || u % G.st[d]) return false;
            t = u / G.st[d];
        }
        if (t < 0 || t >= srcdim[d]) return false;
        q = q * srcdim[d] + t;
    }
    return true;
}

/* Byte address of element (r, c) of operand o; NULL when an activation kind reads a zero. */
__device__ __forceinline__ const char *gaddr(const gop &o, const lk_geo &G, i64 z, i64 zz, i64 r, i64 c) {
    if (o.kind == GK_PLAIN) return (const char *)o.v.p + (z * o.zs + zz * o.zr + r * o.v.s0 + c * o.v.s1) * (i64)dt_size(o.v.dt);
    if (o.trans) {
        i64 t = r;
        r = c;
        c = t;
    }
    i64 n = r / o.SP, p = r % o.SP;
    if (o.kind != GK_ACT && !src_pos(G, o.kind, p, o.kz ? z : zz, p)) return NULL;
    return (const char *)o.v.p + (n * o.sn + c * o.sc + p * o.sp) * (i64)dt_size(o.v.dt);
}

__device__ __forceinline__ float gld(const gop &o, const lk_geo &G, i64 z, i64 zz, i64 r, i64 c, int ct) {
    const char *a = gaddr(o, G, z, zz, r, c);
    if (!a) return 0.0f;
    float v = ld_elem(a, o.v.dt, o.v.flags & LK_UNALIGNED);
    return o.raw ? v : round_to(v, ct);
}

/* The epilogue of element (z, mr, nc) of a product whose sum is acc. */
__device__ __forceinline__ void gemm_epi(const ggemm &g, i64 z, i64 mr, i64 nc, double acc) {
    const float scale = g.coef * (g.sigma.p ? round_to(vload(g.sigma, 0, 0), g.ct) : 1.0f);
    float v = g.rnd_first ? round_to((float)acc, g.ct) : (float)acc;
    if (g.colq.p) v *= vload(g.colq, 0, nc);
    float dw = v * scale;
    if (g.mode >= 0) {
        float w = g.base.v.p ? gld(g.base, g.geo, z, 0, mr, nc, g.ct) : 0.0f;
        dw = merge_elem(w, dw, g.mode, g.m, false, NULL);
    }
    st_elem((char *)gaddr(g.C, g.geo, z, 0, mr, nc), g.C.v.dt, g.C.v.flags & LK_UNALIGNED, dw);
}

__global__ __launch_bounds__(NT) void k_gemm(ggemm g) {
    __shared__ float As[GBK][GBM + 1];
    __shared__ float Bs[GBK][GBN + 1];
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const i64 m0 = (i64)blockIdx.x * GBM, n0 = (i64)blockIdx.y * GBN, z = blockIdx.z % g.Z, split = blockIdx.z / g.Z;
    double acc[4][4];   /* sum of the fp32 step partials (see the header) */
#pragma unroll
    for (int p = 0; p < 4; p++)
#pragma unroll
        for (int q = 0; q < 4; q++) acc[p][q] = 0.0;
    for (int t = 0; t < g.nt; t++)
        for (i64 zz = 0; zz < g.ZR[t]; zz++) {
            const gop &A = g.A[t], &B = g.B[t];
            /* the fastest-varying axis of each tile load: m / n where the operand is stored that way */
            const bool amaj = A.kind == GK_PLAIN ? (A.v.s0 == 1 && A.v.s1 != 1) : A.trans ? A.sc == 1 : A.sp == 1;
            const bool bmaj = B.kind == GK_PLAIN ? B.v.s1 == 1 : B.trans ? B.sp == 1 : B.sc == 1;
            const i64 klo = g.part ? split * g.kper : 0, khi = g.part && klo + g.kper < g.Kd[t] ? klo + g.kper : g.Kd[t];
            for (i64 k0 = klo; k0 < khi; k0 += GBK) {
#pragma unroll
                for (int e = 0; e < GBM * GBK / NT; e++) {
                    int idx = threadIdx.x + e * NT;
                    int mm = amaj ? idx % GBM : idx / GBK, kk = amaj ? idx / GBM : idx % GBK;
                    i64 mr = m0 + mm, kc = k0 + kk;
                    As[kk][mm] = (mr < g.M && kc < khi) ? gld(A, g.geo, z, zz, mr, kc, g.ct) : 0.0f;
                    int nn = bmaj ? idx % GBN : idx / GBK, kb = bmaj ? idx / GBN : idx % GBK;
                    i64 nc = n0 + nn, kr = k0 + kb;
                    Bs[kb][nn] = (nc < g.N && kr < khi) ? gld(B, g.geo, z, zz, kr, nc, g.ct) : 0.0f;
                }
                __syncthreads();
                float part[4][4];
#pragma unroll
                for (int p = 0; p < 4; p++)
#pragma unroll
                    for (int q = 0; q < 4; q++) part[p][q] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < GBK; kk++) {
                    float av[4], bv[4];
#pragma unroll
                    for (int p = 0; p < 4; p++) av[p] = As[kk][ty + 16 * p];
#pragma unroll
                    for (int q = 0; q < 4; q++) bv[q] = Bs[kk][tx + 16 * q];
#pragma unroll
                    for (int p = 0; p < 4; p++)
#pragma unroll
                        for (int q = 0; q < 4; q++) part[p][q] = fmaf(av[p], bv[q], part[p][q]);
                }
#pragma unroll
                for (int p = 0; p < 4; p++)
#pragma unroll
                    for (int q = 0; q < 4; q++) acc[p][q] += (double)part[p][q];
                __syncthreads();
            }
        }
#pragma unroll
    for (int p = 0; p < 4; p++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            i64 mr = m0 + ty + 16 * p, nc = n0 + tx + 16 * q;
            if (mr >= g.M || nc >= g.N) continue;
            if (g.part) g.part[((split * g.Z + z) * g.M + mr) * g.N + nc] = acc[p][q];
            else gemm_epi(g, z, mr, nc, acc[p][q]);
        }
}

/* Split-K finish: the S partials of each element summed in split order, then the epilogue. */
__global__ __launch_bounds__(NT) void k_gemm_fin(ggemm g, int S) {
    const i64 n = g.Z * g.M * g.N;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n; idx += (i64)gridDim.x * NT) {
        double acc = 0.0;
        for (int sp = 0; sp < S; sp++) acc += g.part[sp * n + idx];
        i64 nc = idx % g.N, mr = (idx / g.N) % g.M, z = idx / g.N / g.M;
        gemm_epi(g, z, mr, nc, acc);
    }
}

/* out = RN(coef·σs·src) elementwise (src fp32 scratch, same shape as out). */
__global__ __launch_bounds__(NT) void k_scale(lk_view out, lk_view src, float coef, lk_view sigma, int ct) {
    const float scale = coef * (sigma.p ? round_to(vload(sigma, 0, 0), ct) : 1.0f);
    i64 n = out.rows * out.cols;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n; idx += (i64)gridDim.x * NT) {
        i64 r = idx / out.cols, c = idx % out.cols;
        vstore(out, r, c, vload(src, r, c) * scale);
    }
}

/* out(0,0) = RN(coef·Σ_t ⟨X_t, Y_t⟩): one block, fixed per-thread strides and a fixed tree. */
__global__ __launch_bounds__(NT) void k_dot2(gop X0, gop Y0, gop X1, gop Y1, int nt, float coef, int ct, lk_view out, lk_geo G) {
    __shared__ float red[NT];
    float s = 0.0f;
    for (int t = 0; t < nt; t++) {
        const gop &X = t ? X1 : X0, &Y = t ? Y1 : Y0;
        i64 n = X.v.rows * X.v.cols;
        for (i64 idx = threadIdx.x; idx < n; idx += NT) {
            i64 r = idx / X.v.cols, c = idx % X.v.cols;
            s = fmaf(gld(X, G, 0, 0, r, c, ct), gld(Y, G, 0, 0, r, c, ct), s);
        }
    }
    red[threadIdx.x] = s;
    __syncthreads();
    for (int w = NT / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) vstore(out, 0, 0, coef * red[0]);
}

/* v = coef·σ'·Σ_q Σ_z part[z][m][c0 + q·sstride + j] for j < out.cols, q < nsum (part: Z sets of
   M × rp fp32 partials, summed z ascending per block q; σ' = RN_CT(σs) when sigma is given), stored as nparts successive parts in out's
   dtype, part q at column j + q·pstride: h_q = RN_out(v − h_0 − … − h_{q−1}) (exact residuals: the
   parts sum to v to 2^-8·nparts relative for bf16); nparts 1 = v rounded once. */
__global__ __launch_bounds__(NT) void k_sum_parts(const float *part, i64 Z, i64 M, i64 rp, i64 c0, int nsum, i64 sstride,
                                                  lk_view out, float coef, lk_view sigma, int ct, int nparts, i64 pstride) {
    const float scale = coef * (sigma.p ? round_to(vload(sigma, 0, 0), ct) : 1.0f);
    const i64 n = M * out.cols;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n; idx += (i64)gridDim.x * NT) {
        const i64 m = idx / out.cols, j = idx % out.cols;
        float acc = 0.0f;
        for (int q = 0; q < nsum; q++)   /* the column blocks of one value's parts (dy·[P's parts]) */
            for (i64 z = 0; z < Z; z++) acc += part[(z * M + m) * rp + c0 + q * sstride + j];
        float v = acc * scale;
        for (int q = 0; q < nparts; q++) {
            const float h = round_to(v, out.dt);
            vstore(out, m, j + q * pstride, h);
            v -= h;
        }
    }
}

/* The lean route's operand prologue in one launch: pcat's B1 block = RN_CT(B1) (b1.p NULL: none)
   and qcat = [RN_CT(B2) ; RN_CT(A2) repeated] (R × I, R a multiple of r). */
__global__ __launch_bounds__(NT) void k_lean_prologue(lk_view b1, lk_view B1, lk_view qcat, lk_view B2, lk_view A2, i64 r, int ct) {
    const i64 nb = b1.p ? b1.rows * b1.cols : 0, n = nb + qcat.rows * qcat.cols;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n; idx += (i64)gridDim.x * NT) {
        if (idx < nb) {
            const i64 m = idx / b1.cols, j = idx % b1.cols;
            vstore(b1, m, j, round_to(vload(B1, m, j), ct));
        } else {
            const i64 e = idx - nb, q = e / qcat.cols, c = e % qcat.cols;
            vstore(qcat, q, c, round_to(q < r ? vload(B2, q, c) : vload(A2, (q - r) % r, c), ct));
        }
    }
}

/* ---- host side ---- */

static gop op(const lk_view &v, i64 zs, i64 zr, int raw) {
    gop o;
    memset(&o, 0, sizeof o);
    o.v = v;
    o.zs = zs;
    o.zr = zr;
    o.raw = raw;
    return o;
}

static lk_view tr(const lk_view &v) {
    lk_view t = v;
    t.rows = v.cols;
    t.cols = v.rows;
    t.s0 = v.s1;
    t.s1 = v.s0;
    t.flags &= ~LK_VEC; /* its rows are no longer contiguous */
    return t;
}

/* Columns c·K (+κ through the operand's z offset v.s1) of an O×(I·K) view: O×I, column stride K. */
static lk_view kslice(const lk_view &v, i64 K) {
    lk_view t = v;
    t.cols = v.cols / K;
    t.s1 = v.s1 * K;
    return t;
}

static lk_view scr(const float *p, i64 rows, i64 cols) {
    lk_view v;
    v.p = p;
    v.s0 = cols;
    v.s1 = 1;
    v.rows = rows;
    v.cols = cols;
    v.dt = DT_F32;
    v.flags = 0;
    return v;
}

static lk_view none_view() {
    lk_view v;
    memset(&v, 0, sizeof v);
    return v;
}

static ggemm gemm1(const gop &A, const gop &B, i64 M, i64 N, i64 Kd, int ct, const gop &C) {
    ggemm g;
    memset(&g, 0, sizeof g);
    g.nt = 1;
    g.A[0] = A;
    g.B[0] = B;
    g.Kd[0] = Kd;
    g.ZR[0] = g.ZR[1] = 1;
    g.M = M;
    g.N = N;
    g.ct = ct;
    g.C = C;
    g.mode = -1;
    g.coef = 1.0f;
    g.m = 1.0f;
    return g;
}

/* Split count of a product: enough blocks to fill the GPU (≥ 512 in all) while each split keeps
   ≥ 256 reduction elements; a function of the shape only (results never depend on the device).
   Merge epilogues (mode ≥ 0) are wide products and never split. */
static i64 kd_max(const ggemm &g) { return g.nt > 1 && g.Kd[1] > g.Kd[0] ? g.Kd[1] : g.Kd[0]; }

static int split_of(const ggemm &g, i64 blocks) {
    if (g.mode >= 0) return 1;
    i64 kmax = kd_max(g);
    i64 S = cdiv(512, blocks), Smax = kmax / 256;
    if (S > Smax) S = Smax;
    if (S > 64) S = 64;
    return S < 1 ? 1 : (int)S;
}

static int run_gemm(const ggemm &g0, i64 Z, cudaStream_t s) {
    if (g0.M <= 0 || g0.N <= 0 || Z <= 0) return LYCO_OK;
    ggemm g = g0;
    g.Z = Z;
    const i64 gx = cdiv(g.M, GBM), gy = cdiv(g.N, GBN);
    const int S = split_of(g, gx * gy * Z);
    if (gx > 2147483647LL || gy > 65535 || Z * S > 65535)
        return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda glora: a %lld×%lld (×%lld) product exceeds the grid limits", (long long)g.M,
                         (long long)g.N, (long long)Z);
    if (S == 1) {
        g.part = NULL;
        k_gemm<<<dim3((unsigned)gx, (unsigned)gy, (unsigned)Z), NT, 0, s>>>(g);
        LK_LAUNCHED("glora gemm");
        return LYCO_OK;
    }
    g.kper = cdiv(cdiv(kd_max(g), S), GBK) * GBK;
    int rc = lk_scratch_alloc((void **)&g.part, (size_t)(S * Z * g.M * g.N) * sizeof(double), s);
    if (rc) return rc;
    k_gemm<<<dim3((unsigned)gx, (unsigned)gy, (unsigned)(Z * S)), NT, 0, s>>>(g);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        i64 blocks = cdiv(Z * g.M * g.N, NT);
        k_gemm_fin<<<(unsigned)(blocks > 65536 ? 65536 : blocks), NT, 0, s>>>(g, S);
        e = cudaGetLastError();
    }
    int rf = lk_scratch_free(g.part, s);
    if (e != cudaSuccess)
        return lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of glora gemm failed: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    return rf;
}

static int run_scale(const lk_view &out, const lk_view &src, float coef, const lk_view &sigma, int ct, cudaStream_t s) {
    i64 n = out.rows * out.cols;
    if (!out.p || n == 0) return LYCO_OK;
    i64 blocks = cdiv(n, NT);
    if (blocks > 65536) blocks = 65536;
    k_scale<<<(unsigned)blocks, NT, 0, s>>>(out, src, coef, sigma, ct);
    LK_LAUNCHED("glora scale");
    return LYCO_OK;
}

static int run_dot2(const gop &X0, const gop &Y0, const gop &X1, const gop &Y1, float coef, int ct, const lk_view &out, cudaStream_t s) {
    lk_geo G;
    memset(&G, 0, sizeof G);
    k_dot2<<<1, NT, 0, s>>>(X0, Y0, X1, Y1, 2, coef, ct, out, G);
    LK_LAUNCHED("glora dot");
    return LYCO_OK;
}

/* P_κ = W_κ·A1 (O×r per κ) into fp32 scratch P (K·O·r, [κ][o][j]). */
static int w_times_a1(const lk_glora_args *a, float *P, cudaStream_t s) {
    ggemm g = gemm1(op(kslice(a->W, a->K), a->W.s1, 0, 0), op(a->A1, 0, 0, 0), a->O, a->r, a->I, a->ct,
                    op(scr(P, a->O, a->r), a->O * a->r, 0, 1));
    return run_gemm(g, a->K, s);
}

static int alloc_f32(float **p, i64 n, cudaStream_t s) { return lk_scratch_alloc((void **)p, (size_t)(n > 0 ? n : 1) * 4, s); }

/* ---- linear layers at bf16 / fp32 compute: lowrank.cu's kernels (see the header) ---- */

static bool lean_linear(const lk_glora_args *a) {
    const char *e = getenv("LYCO_CUDA_GLORA_GENERIC");
    return !(e && e[0] == '1') && a->K == 1 && (a->ct == DT_BF16 || a->ct == DT_F32) && a->r >= 1 && 2 * a->r <= 128;
}

static unsigned grid_of(i64 n) {
    const i64 b = cdiv(n > 0 ? n : 1, NT);
    return (unsigned)(b < 65536 ? b : 65536);
}

/* one output of a row reduction: columns [c0, c0 + v.cols) of the rank tile into v, as parts
   successive parts pstride columns apart (k_sum_parts) */
typedef struct {
    lk_view v;
    i64 c0;
    int parts;
    i64 pstride;
    int nsum;     /* column blocks summed into one value (nsum blocks sstride apart) */
    i64 sstride;
} sum_out;

static sum_out plain_out(const lk_view &v, i64 c0) { return sum_out{v, c0, 1, 0, 1, 0}; }

static int run_sum_parts(const float *part, i64 Z, i64 M, i64 rp, const sum_out &o, float coef, const lk_view &sigma, int ct,
                         cudaStream_t s) {
    if (!o.v.p || M * o.v.cols == 0) return LYCO_OK;
    k_sum_parts<<<grid_of(M * o.v.cols), NT, 0, s>>>(part, Z, M, rp, o.c0, o.nsum, o.sstride, o.v, coef, sigma, ct, o.parts, o.pstride);
    LK_LAUNCHED("glora sum_parts");
    return LYCO_OK;
}

/* The row reduction A·Bᵀ (A M×K, B rank×K, or K×rank with b_kmajor) summed into outs; the first
   output gets coef·σ', the others are the plain sums. */
static int reduce_into(const lk_glora_args *a, const lk_view &A, const lk_view &B, int b_kmajor, i64 M, i64 K, i64 rank,
                       const sum_out *outs, int nout, float coef, const lk_view &sigma, const lk_device *dev, cudaStream_t s) {
    const i64 rp = lk_reduce_rank_tile(rank);
    float *part = NULL;
    int64_t Z = 0;
    int rc = lk_reduce_parts(a->ct, &A, &B, b_kmajor, M, K, rp, &part, &Z, dev, s);
    for (int i = 0; i < nout && !rc; i++) rc = run_sum_parts(part, Z, M, rp, outs[i], i ? 1.0f : coef, i ? none_view() : sigma, a->ct, s);
    const int rf = part ? lk_scratch_free(part, s) : LYCO_OK;
    return rc ? rc : rf;
}

/* The rank-R operands in one scratch block: pcat = [RN_CT(B1) | P's columns] (O × R) and
   qcat = [RN_CT(B2) ; RN_CT(A2) …] (R × I, CT; one A2 block per P block). P's columns are either
   `parts` CT parts of P in their own column blocks (pcat in CT, R = (1 + parts)·r: every operand of
   the expand is CT, so it can take its lean kernel; parts 1 for fp32 compute) or, parts 0, P in fp32
   (R = 2r) entering the expand as nsplit CT parts (p_split). Rows of both 16-byte multiples. */
typedef struct {
    void *mem;
    int parts;
    i64 R;
    lk_view pcat, b1, p, qcat;
} lean_ops;

/* P's layout where the expand reads pcat (merge forward, bypass): its 3 bf16 parts in their own
   columns while 4r ≤ 128 (every operand CT: the lean kernel), as is for fp32 compute (1), else 0
   (fp32 P entering as parts: the merge forward only; the bypass keeps the generic kernel) */
static int lean_parts_cols(const lk_glora_args *a) { return a->ct == DT_F32 ? 1 : 4 * a->r <= 128 ? nsplit<bf16_t>::n : 0; }

static i64 lean_rank(const lk_glora_args *a, int parts) { return parts ? (1 + parts) * a->r : 2 * a->r; }
static int lean_pdt(const lk_glora_args *a, int parts) { return parts ? a->ct : DT_F32; }

static size_t lean_pbytes(const lk_glora_args *a, int parts) {
    const size_t es = lean_pdt(a, parts) == DT_F32 ? 4 : 2;
    return ((size_t)(a->O * cdiv(lean_rank(a, parts), 8) * 8) * es + 255) / 256 * 256;
}

static size_t lean_bytes(const lk_glora_args *a, int parts) {
    return lean_pbytes(a, parts) + (size_t)(lean_rank(a, parts) * cdiv(a->I, 8) * 8) * (a->ct == DT_F32 ? 4 : 2);
}

static lean_ops lean_views(const lk_glora_args *a, int parts, void *mem) {
    const i64 r = a->r, R = lean_rank(a, parts);
    lean_ops L;
    L.mem = mem;
    L.parts = parts;
    L.R = R;
    L.pcat = lk_pitched_view(mem, a->O, R, cdiv(R, 8) * 8, lean_pdt(a, parts));
    L.b1 = lk_view_sub(L.pcat, 0, a->O, 0, r);
    L.p = lk_view_sub(L.pcat, 0, a->O, r, r);
    L.qcat = lk_pitched_view(mem ? (char *)mem + lean_pbytes(a, parts) : NULL, R, a->I, cdiv(a->I, 8) * 8, a->ct);
    return L;
}

static int lean_alloc(const lk_glora_args *a, int parts, lean_ops *L, cudaStream_t s) {
    void *mem = NULL;
    int rc = lk_scratch_alloc(&mem, lean_bytes(a, parts), s);
    if (rc) return rc;
    *L = lean_views(a, parts, mem);
    return LYCO_OK;
}

/* qcat = [RN_CT(B2) ; RN_CT(A2) per P block] and, with_b1, pcat's B1 block = RN_CT(B1): one launch */
static int lean_prologue(const lk_glora_args *a, const lean_ops &L, bool with_b1, cudaStream_t s) {
    const lk_view b1 = with_b1 ? L.b1 : none_view();
    const i64 n = (with_b1 ? a->O * a->r : 0) + L.R * a->I;
    if (n == 0) return LYCO_OK;
    k_lean_prologue<<<grid_of(n), NT, 0, s>>>(b1, a->B1, L.qcat, a->B2, a->A2, a->r, a->ct);
    LK_LAUNCHED("glora lean prologue");
    return LYCO_OK;
}

/* P = W·A1 into L.p (fp32, or as L.parts CT parts) */
static int lean_p(const lk_glora_args *a, const lean_ops &L, const lk_device *dev, cudaStream_t s) {
    const sum_out o = {L.p, 0, L.parts ? L.parts : 1, a->r, 1, 0};
    return reduce_into(a, a->W, a->A1, 1, a->O, a->I, a->r, &o, 1, 1.0f, none_view(), dev, s);
}

static lk_expand_args lean_expand_args(const lk_glora_args *a, const lean_ops &L) {
    lk_expand_args e;
    memset(&e, 0, sizeof e);
    e.ct = a->ct;
    e.M = a->O;
    e.N = a->I;
    e.r = L.R;
    e.P = L.pcat;
    e.p_split = L.parts == 0 && a->ct != DT_F32;
    e.Q = L.qcat;
    if (a->mode != 1) e.base = a->W;
    e.out = a->out;
    e.sigma = a->sigma;
    e.row_scale = a->s;
    e.sig_in_row = 1;
    e.mult = a->m;
    e.mode = a->mode;
    e.K = 1;
    return e;
}

/* merge forward: bf16 with 4r ≤ 128 puts P's 3 parts in their own columns (the expand's lean
   kernel); fp32 uses P as is; bf16 with larger r, P in fp32 through p_split */
static int lean_merge_fwd(const lk_glora_args *a, const lk_device *dev, cudaStream_t s, bool *done) {
    *done = false;
    if (!lean_linear(a)) return LYCO_OK;
    const int parts = lean_parts_cols(a);
    const lk_expand_args plan = lean_expand_args(a, lean_views(a, parts, NULL));
    if (!lk_expand_fits(&plan, dev)) return LYCO_OK;
    *done = true;
    lean_ops L;
    int rc = lean_alloc(a, parts, &L, s);
    if (rc) return rc;
    if (!(rc = lean_prologue(a, L, true, s)) && !(rc = lean_p(a, L, dev, s))) {
        const lk_expand_args e = lean_expand_args(a, L);
        rc = lk_expand(&e, dev, s);
    }
    const int rf = lk_scratch_free(L.mem, s);
    return rc ? rc : rf;
}

static bool any_f32(const lk_view *v, int n) {
    for (int i = 0; i < n; i++)
        if (v[i].p && v[i].dt == DT_F32) return true;
    return false;
}

/* merge backward; X1 = Γ·B2ᵀ (fp32 O × r) and GP = Γ·A2ᵀ (fp32 O × r) scratch for σs's dot products.
   At 16-bit compute only for 16-bit gradients: G_A1 and G_A2 chain two tensor-core reductions
   (GP then Wᵀ·GP; P then Pᵀ·Γ), and with fp32 gradients the H200 measured glora_a1 at up to 42
   fp32 ULP (glora_linear_r64, bf16+fp32adapter, 2 of 24 seeds over a 35.8 budget; the generic
   kernel: ~5) — those calls keep the generic kernel. */
static int lean_merge_bwd(const lk_glora_args *a, float *X1, float *GP, const lk_device *dev, cudaStream_t s, bool *done) {
    *done = false;
    const lk_view grads[4] = {a->gA1, a->gA2, a->gB1, a->gB2};
    if (!lean_linear(a) || (a->ct != DT_F32 && any_f32(grads, 4))) return LYCO_OK;
    *done = true;
    const i64 O = a->O, I = a->I, r = a->r;
    const float c = (float)(a->s * a->m);
    lean_ops L;
    int rc = lean_alloc(a, 0, &L, s);
    if (rc) return rc;
    const lk_view x1 = scr(X1, O, r), gp = scr(GP, O, r);
    if (a->gB1.p || a->gA1.p || a->gsigma.p) { /* [Γ·B2ᵀ | Γ·A2ᵀ] in one pass over Γ */
        const sum_out outs[3] = {plain_out(a->gB1, 0), plain_out(gp, r), plain_out(a->gsigma.p ? x1 : none_view(), 0)};
        if (!(rc = lean_prologue(a, L, false, s))) rc = reduce_into(a, a->G, L.qcat, 0, O, I, 2 * r, outs, 3, c, a->sigma, dev, s);
    }
    if (!rc && a->gB2.p) rc = lk_colreduce(a->ct, &a->G, &a->B1, 0, O, I, r, &a->gB2, 0, c, &a->sigma, dev, s);
    if (!rc && (a->gA2.p || a->gsigma.p)) rc = lean_p(a, L, dev, s);
    if (!rc && a->gA2.p) rc = lk_colreduce(a->ct, &a->G, &L.p, a->ct != DT_F32, O, I, r, &a->gA2, 0, c, &a->sigma, dev, s);
    if (!rc && a->gA1.p) rc = lk_colreduce(a->ct, &a->W, &gp, a->ct != DT_F32, O, I, r, &a->gA1, 1, c, &a->sigma, dev, s);
    if (!rc && a->gsigma.p)
        rc = run_dot2(op(a->B1, 0, 0, 0), op(x1, 0, 0, 1), op(L.p, 0, 0, 1), op(gp, 0, 0, 1), c, a->ct, a->gsigma, s);
    const int rf = lk_scratch_free(L.mem, s);
    return rc ? rc : rf;
}

/* bypass forward, linear, no rank masks: h' = RN_CT(x·qcatᵀ) = [hB | hA hA hA] (T × R, CT; with
   qcat = [B2 ; A2 ; A2 ; A2] — the rank activations rounded as the generic kernel rounds them),
   then y = y0 + s·m·σs·h'·pcatᵀ (pcat = [RN_CT(B1) | P's parts]): LoRA's bypass forward
   (lk_reduce_h, then the expand with Q transposed) over the merge forward's rank-R operands. */
static int lean_bypass_fwd(const lk_glora_args *a, const lk_device *dev, cudaStream_t s, bool *done) {
    *done = false;
    const int parts = lean_parts_cols(a);
    if (!lean_linear(a) || a->qa.p || a->qb.p || a->geo.nd != 0 || parts == 0) return LYCO_OK;
    const i64 T = a->T, R = lean_rank(a, parts), rp = lk_reduce_rank_tile(R), es = a->ct == DT_F32 ? 4 : 2;
    lk_expand_args e;
    memset(&e, 0, sizeof e);
    e.ct = a->ct;
    e.M = T;
    e.N = a->O;
    e.r = R;
    e.P = lk_pitched_view(NULL, T, R, rp, a->ct); /* h', row pitch rp (16-byte rows: rp ≥ 16) */
    e.Q = lean_views(a, parts, NULL).pcat;
    e.q_t = 1;
    e.base = lk_act_as_view(a->y0, T, a->O);
    e.out = lk_act_as_view(a->y, T, a->O);
    e.sigma = a->sigma;
    e.row_scale = 1.0;
    e.mult = a->s * a->m;
    e.sig_in_mult = 1;
    e.mode = a->y0.p ? 0 : 1;
    e.K = 1;
    if (!lk_expand_fits(&e, dev)) return LYCO_OK;
    *done = true;
    lean_ops L;
    void *h = NULL;
    int rc = lean_alloc(a, parts, &L, s);
    if (rc) return rc;
    if (!(rc = lk_scratch_alloc(&h, (size_t)(T * rp * es), s)) && !(rc = lean_prologue(a, L, true, s)) &&
        !(rc = lean_p(a, L, dev, s))) {
        const lk_view xv = lk_act_as_view(a->x, T, a->I), nomask = none_view();
        if (!(rc = lk_reduce_h(a->ct, &xv, &L.qcat, &nomask, T, a->I, R, h, rp, dev, s))) {
            e.P.p = h;
            e.Q = L.pcat;
            rc = lk_expand(&e, dev, s);
        }
    }
    const int rf = h ? lk_scratch_free(h, s) : LYCO_OK, rf2 = lk_scratch_free(L.mem, s);
    return rc ? rc : rf ? rf : rf2;
}

/* ---- merge forward ---- */

static int merge_fwd_body(const lk_glora_args *a, float *P, cudaStream_t s) {
    int rc = w_times_a1(a, P, s);
    if (rc) return rc;
    const i64 O = a->O, r = a->r, K = a->K;
    ggemm g = gemm1(op(a->B1, 0, 0, 0), op(kslice(a->B2, K), a->B2.s1, 0, 0), O, a->I, r, a->ct,
                    op(kslice(a->out, K), a->out.s1, 0, 0));
    g.nt = 2;
    g.A[1] = op(scr(P, O, r), O * r, 0, 1);
    g.B[1] = op(a->A2, 0, 0, 0);
    g.Kd[1] = r;
    g.mode = a->mode;
    g.coef = (float)a->s;
    g.m = (float)a->m;
    g.sigma = a->sigma;
    if (a->mode != 1) g.base = op(kslice(a->W, K), a->W.s1, 0, 0);
    return run_gemm(g, K, s);
}

extern "C" int lk_glora_merge_fwd(const lk_glora_args *a, const lk_device *dev, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (a->out.rows * a->out.cols == 0) return LYCO_OK;
    bool done = false;
    int rc = lean_merge_fwd(a, dev, s, &done);
    if (rc || done) return rc;
    float *P = NULL;
    rc = alloc_f32(&P, a->K * a->O * a->r, s);
    if (rc) return rc;
    rc = merge_fwd_body(a, P, s);
    int rf = lk_scratch_free(P, s);
    return rc ? rc : rf;
}

/* ---- merge backward ---- */

/* A gradient c·(A·B) (c = s·m·σs) straight into its view, κ summed by the reduction. */
static ggemm grad_gemm(const lk_glora_args *a, const gop &A, const gop &B, i64 M, i64 N, i64 Kd, i64 ZR, const lk_view &out) {
    ggemm g = gemm1(A, B, M, N, Kd, a->ct, op(out, 0, 0, 0));
    g.ZR[0] = ZR;
    g.coef = (float)(a->s * a->m);
    g.sigma = a->sigma;
    return g;
}

static int merge_bwd_body(const lk_glora_args *a, float *X1, float *P, float *GP, cudaStream_t s) {
    const i64 O = a->O, I = a->I, r = a->r, K = a->K, IK = I * K, OR = O * r;
    const int ct = a->ct;
    const gop Gk = op(kslice(a->G, K), 0, a->G.s1, 0);   /* Γ_κ, summed over κ */
    int rc;
    if (a->gB1.p || a->gsigma.p) { /* Γ·B2ᵀ */
        if (a->gsigma.p) {
            if ((rc = run_gemm(gemm1(op(a->G, 0, 0, 0), op(tr(a->B2), 0, 0, 0), O, r, IK, ct, op(scr(X1, O, r), 0, 0, 1)), 1, s))) return rc;
            if ((rc = run_scale(a->gB1, scr(X1, O, r), (float)(a->s * a->m), a->sigma, ct, s))) return rc;
        } else if ((rc = run_gemm(grad_gemm(a, op(a->G, 0, 0, 0), op(tr(a->B2), 0, 0, 0), O, r, IK, 1, a->gB1), 1, s))) {
            return rc;
        }
    }
    if (a->gB2.p && (rc = run_gemm(grad_gemm(a, op(tr(a->B1), 0, 0, 0), op(a->G, 0, 0, 0), r, IK, O, 1, a->gB2), 1, s))) return rc;
    if ((a->gA2.p || a->gsigma.p) && (rc = w_times_a1(a, P, s))) return rc;
    if (a->gA2.p && (rc = run_gemm(grad_gemm(a, op(tr(scr(P, O, r)), 0, OR, 1), Gk, r, I, O, K, a->gA2), 1, s))) return rc;
    if (a->gA1.p || a->gsigma.p) { /* GP_κ = Γ_κ·A2ᵀ */
        ggemm g = gemm1(op(kslice(a->G, K), a->G.s1, 0, 0), op(tr(a->A2), 0, 0, 0), O, r, I, ct, op(scr(GP, O, r), OR, 0, 1));
        if ((rc = run_gemm(g, K, s))) return rc;
    }
    if (a->gA1.p &&
        (rc = run_gemm(grad_gemm(a, op(tr(kslice(a->W, K)), 0, a->W.s1, 0), op(scr(GP, O, r), 0, OR, 1), I, r, O, K, a->gA1), 1, s)))
        return rc;
    if (a->gsigma.p)
        return run_dot2(op(a->B1, 0, 0, 0), op(scr(X1, O, r), 0, 0, 1), op(scr(P, K * O, r), 0, 0, 1), op(scr(GP, K * O, r), 0, 0, 1),
                        (float)(a->s * a->m), ct, a->gsigma, s);
    return LYCO_OK;
}

extern "C" int lk_glora_merge_bwd(const lk_glora_args *a, const lk_device *dev, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    const i64 OR = a->O * a->r, KOR = a->K * OR;
    float *buf = NULL;
    int rc = alloc_f32(&buf, OR + 2 * KOR, s);
    if (rc) return rc;
    bool done = false;
    rc = lean_merge_bwd(a, buf, buf + OR + KOR, dev, s, &done);
    if (!rc && !done) rc = merge_bwd_body(a, buf, buf + OR, buf + OR + KOR, s);
    int rf = lk_scratch_free(buf, s);
    return rc ? rc : rf;
}

/* ---- bypass (linear, and conv through IM2COL / GATHER operands) ---- */

/* The activation operand of a (geometry-less) lk_act; rows = (n, position) with SP positions. */
static gop act(const lk_act &x, int kind, i64 SP, int raw) {
    gop o;
    memset(&o, 0, sizeof o);
    o.v.p = x.p;
    o.v.dt = x.dt;
    o.v.flags = x.flags;
    o.raw = raw;
    o.kind = kind;
    o.sn = x.sn;
    o.sc = x.sc;
    o.sp = x.sp;
    o.SP = SP;
    return o;
}

static gop act_t(const lk_act &x, i64 SP) {
    gop o = act(x, GK_ACT, SP, 0);
    o.trans = 1;
    return o;
}

/* An fp32 scratch activation (N·SP)×ch, row-major, as an lk_act. */
static lk_act scr_act(const float *p, i64 SP, i64 ch) {
    lk_act a;
    a.p = p;
    a.sn = SP * ch;
    a.sc = 1;
    a.sp = ch;
    a.dt = DT_F32;
    a.flags = 0;
    return a;
}

/* hA = RN_CT(x·A2ᵀ) on x's grid, hB = RN_CT(Σ_κ im2col_κ(x)·B2_κᵀ) on y's grid (⊙ q when given). */
static int rank_act(const lk_glora_args *a, bool bpath, const lk_view &q, float *h, cudaStream_t s) {
    const lk_geo &G = a->geo;
    const i64 K = a->K, rows = a->T * (bpath ? G.spout : G.spin);
    ggemm g;
    if (bpath) {
        g = gemm1(act(a->x, GK_IM2COL, G.spout, 0), op(tr(kslice(a->B2, K)), 0, a->B2.s1, 0), rows, a->r, a->I, a->ct,
                  op(scr(h, rows, a->r), 0, 0, 1));
        g.ZR[0] = K;
    } else {
        g = gemm1(act(a->x, GK_ACT, G.spin, 0), op(tr(a->A2), 0, 0, 0), rows, a->r, a->I, a->ct, op(scr(h, rows, a->r), 0, 0, 1));
    }
    g.geo = G;
    g.rnd_first = 1;
    g.colq = q;
    return run_gemm(g, 1, s);
}

static int bypass_fwd_body(const lk_glora_args *a, float *P, float *hA, float *hB, cudaStream_t s) {
    const lk_geo &G = a->geo;
    const i64 O = a->O, r = a->r, K = a->K, rows = a->T * G.spout;
    int rc;
    if ((rc = w_times_a1(a, P, s)) || (rc = rank_act(a, false, a->qa, hA, s)) || (rc = rank_act(a, true, a->qb, hB, s))) return rc;
    /* y = y0 + s·m·σs·(Σ_κ im2col_κ(hA)·P_κᵀ + hB·B1ᵀ) */
    ggemm g = gemm1(act(scr_act(hA, G.spin, r), GK_IM2COL, G.spout, 1), op(tr(scr(P, O, r)), 0, O * r, 1), rows, O, r, a->ct,
                    act(a->y, GK_ACT, G.spout, 0));
    g.ZR[0] = K;
    g.nt = 2;
    g.A[1] = op(scr(hB, rows, r), 0, 0, 1);
    g.B[1] = op(tr(a->B1), 0, 0, 0);
    g.Kd[1] = r;
    g.mode = a->y0.p ? 0 : 1;
    g.base = act(a->y0, GK_ACT, G.spout, 0);
    g.coef = (float)a->s;
    g.m = (float)a->m;
    g.sigma = a->sigma;
    g.geo = G;
    return run_gemm(g, 1, s);
}

extern "C" int lk_glora_bypass_fwd(const lk_glora_args *a, const lk_device *dev, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (a->T == 0 || a->O == 0 || a->geo.spout == 0) return LYCO_OK;
    bool done = false;
    const int lrc = lean_bypass_fwd(a, dev, s, &done);
    if (lrc || done) return lrc;
    const i64 KOR = a->K * a->O * a->r, TA = a->T * a->geo.spin * a->r, TB = a->T * a->geo.spout * a->r;
    float *buf = NULL;
    int rc = alloc_f32(&buf, KOR + TA + TB, s);
    if (rc) return rc;
    rc = bypass_fwd_body(a, buf, buf + KOR, buf + KOR + TA, s);
    int rf = lk_scratch_free(buf, s);
    return rc ? rc : rf;
}

/* dst = RN(RN_CT(src)) elementwise over N×C×SP activations (src p NULL: dst = 0). */
__global__ __launch_bounds__(NT) void k_copy_act(lk_act dst, lk_act src, i64 C, i64 SP, i64 n, int ct) {
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n; idx += (i64)gridDim.x * NT) {
        i64 p = idx % SP, c = (idx / SP) % C, b = idx / SP / C;
        float v = src.p ? round_to(ld_elem((const char *)src.p + (b * src.sn + c * src.sc + p * src.sp) * (i64)dt_size(src.dt), src.dt,
                                           src.flags & LK_UNALIGNED), ct)
                        : 0.0f;
        st_elem((char *)dst.p + (b * dst.sn + c * dst.sc + p * dst.sp) * (i64)dt_size(dst.dt), dst.dt, dst.flags & LK_UNALIGNED, v);
    }
}

static int copy_act(const lk_act &dst, const lk_act &src, i64 N, i64 C, i64 SP, int ct, cudaStream_t s) {
    i64 n = N * C * SP;
    if (!dst.p || n == 0) return LYCO_OK;
    i64 blocks = cdiv(n, NT);
    if (blocks > 65536) blocks = 65536;
    k_copy_act<<<(unsigned)blocks, NT, 0, s>>>(dst, src, C, SP, n, ct);
    LK_LAUNCHED("glora copy");
    return LYCO_OK;
}

typedef struct {
    float *P, *Y, *hA, *hB, *gA, *gB;
} bwd_scratch;

/* gA = (Σ_κ gather_κ(dy)·P_κ)⊙q_a (x's grid), gB = (dy·B1)⊙q_b (y's grid). */
static int rank_grads(const lk_glora_args *a, const bwd_scratch &w, cudaStream_t s) {
    const lk_geo &G = a->geo;
    const i64 O = a->O, r = a->r, ra = a->T * G.spin, rb = a->T * G.spout;
    ggemm t = gemm1(act(a->dy, GK_GATHER, G.spin, 0), op(scr(w.P, O, r), 0, O * r, 1), ra, r, O, a->ct, op(scr(w.gA, ra, r), 0, 0, 1));
    t.ZR[0] = a->K;
    t.colq = a->qa;
    t.geo = G;
    int rc = run_gemm(t, 1, s);
    if (rc) return rc;
    t = gemm1(act(a->dy, GK_ACT, G.spout, 0), op(a->B1, 0, 0, 0), rb, r, O, a->ct, op(scr(w.gB, rb, r), 0, 0, 1));
    t.colq = a->qb;
    t.geo = G;
    return run_gemm(t, 1, s);
}

/* dx = c·(gA·A2 + Σ_κ gather_κ(gB)·B2_κ) */
static int input_grad(const lk_glora_args *a, const bwd_scratch &w, cudaStream_t s) {
    const lk_geo &G = a->geo;
    const i64 r = a->r, ra = a->T * G.spin;
    ggemm t = gemm1(op(scr(w.gA, ra, r), 0, 0, 1), op(a->A2, 0, 0, 0), ra, a->I, r, a->ct, act(a->dx, GK_ACT, G.spin, 0));
    t.nt = 2;
    t.A[1] = act(scr_act(w.gB, G.spout, r), GK_GATHER, G.spin, 1);
    t.B[1] = op(kslice(a->B2, a->K), 0, a->B2.s1, 0);
    t.Kd[1] = r;
    t.ZR[1] = a->K;
    t.coef = (float)(a->s * a->m);
    t.sigma = a->sigma;
    t.geo = G;
    return run_gemm(t, 1, s);
}

/* G_A2 = c·gAᵀ·x, G_B2_κ = c·gBᵀ·im2col_κ(x), G_B1 = c·(dyᵀ·hB)⊙q_b,
   G_A1 = c·Σ_κ W_κᵀ·Y_κ with Y_κ = (dyᵀ·im2col_κ(hA))⊙q_a. */
static int factor_grads(const lk_glora_args *a, const bwd_scratch &w, cudaStream_t s) {
    const lk_geo &G = a->geo;
    const i64 O = a->O, I = a->I, r = a->r, K = a->K, ra = a->T * G.spin, rb = a->T * G.spout;
    int rc;
    ggemm t;
    if (a->gA2.p) {
        t = grad_gemm(a, op(tr(scr(w.gA, ra, r)), 0, 0, 1), act(a->x, GK_ACT, G.spin, 0), r, I, ra, 1, a->gA2);
        t.geo = G;
        if ((rc = run_gemm(t, 1, s))) return rc;
    }
    if (a->gB2.p) {
        gop xk = act(a->x, GK_IM2COL, G.spout, 0);
        xk.kz = 1;
        t = grad_gemm(a, op(tr(scr(w.gB, rb, r)), 0, 0, 1), xk, r, I, rb, 1, kslice(a->gB2, K));
        t.C.zs = a->gB2.s1;
        t.geo = G;
        if ((rc = run_gemm(t, K, s))) return rc;
    }
    if (a->gB1.p) {
        t = grad_gemm(a, act_t(a->dy, G.spout), op(scr(w.hB, rb, r), 0, 0, 1), O, r, rb, 1, a->gB1);
        t.colq = a->qb;
        t.geo = G;
        if ((rc = run_gemm(t, 1, s))) return rc;
    }
    if (a->gA1.p) {
        gop hk = act(scr_act(w.hA, G.spin, r), GK_IM2COL, G.spout, 1);
        hk.kz = 1;
        t = gemm1(act_t(a->dy, G.spout), hk, O, r, rb, a->ct, op(scr(w.Y, O, r), O * r, 0, 1));
        t.colq = a->qa;
        t.geo = G;
        if ((rc = run_gemm(t, K, s))) return rc;
        if ((rc = run_gemm(grad_gemm(a, op(tr(kslice(a->W, K)), 0, a->W.s1, 0), op(scr(w.Y, O, r), 0, O * r, 1), I, r, O, K, a->gA1), 1, s)))
            return rc;
    }
    return LYCO_OK;
}

static int bypass_bwd_body(const lk_glora_args *a, const bwd_scratch &w, cudaStream_t s) {
    const i64 r = a->r, ra = a->T * a->geo.spin, rb = a->T * a->geo.spout;
    const lk_view none = none_view();
    int rc;
    if ((rc = w_times_a1(a, w.P, s)) || (rc = rank_grads(a, w, s))) return rc;
    if ((a->gA1.p || a->gsigma.p) && (rc = rank_act(a, false, none, w.hA, s))) return rc;
    if ((a->gB1.p || a->gsigma.p) && (rc = rank_act(a, true, none, w.hB, s))) return rc;
    if (a->dx.p && (rc = input_grad(a, w, s))) return rc;
    if ((rc = factor_grads(a, w, s))) return rc;
    if (a->gsigma.p &&
        (rc = run_dot2(op(scr(w.gA, ra, r), 0, 0, 1), op(scr(w.hA, ra, r), 0, 0, 1), op(scr(w.gB, rb, r), 0, 0, 1),
                       op(scr(w.hB, rb, r), 0, 0, 1), (float)(a->s * a->m), a->ct, a->gsigma, s)))
        return rc;
    lk_act zero;
    memset(&zero, 0, sizeof zero);
    return copy_act(a->dy0, a->dy0_zero ? zero : a->dy, a->T, a->O, a->geo.spout, a->ct, s); /* last: dy0 may be dy itself */
}

/* bypass backward, linear, no rank masks, every output 16-bit at 16-bit compute (fp32 gradients
   chain two or three tensor-core reductions: see lean_merge_bwd), over the merge forward's rank-R
   operands (pcat = [RN_CT(B1) | P's parts], qcat = [B2 ; A2 …]), g = RN_CT(dy), c = s·m·σs:
     [gB | gA] = g·pcat, P's column blocks summed (fp32, T × 2r);  h = [hB | hA] = RN_CT(x·[B2 ; A2]ᵀ);
     dx = c·[gB | gA]·[B2 ; A2] (the expand, [gB | gA] in CT parts);  G_A2 = c·gAᵀ·x, G_B2 = c·gBᵀ·x,
     G_B1 = c·gᵀ·hB, Y = gᵀ·hA (fp32), G_A1 = c·Wᵀ·Y (column reductions);  G_σs and dy0 as the
     generic path. */
static int lean_bypass_bwd(const lk_glora_args *a, const lk_device *dev, cudaStream_t s, bool *done) {
    *done = false;
    const int parts = lean_parts_cols(a);
    const lk_view outs16[5] = {a->gA1, a->gA2, a->gB1, a->gB2, a->gsigma};
    const bool dx32 = a->dx.p && a->dx.dt == DT_F32;
    if (!lean_linear(a) || a->qa.p || a->qb.p || a->geo.nd != 0 || parts == 0 ||
        (a->ct != DT_F32 && (any_f32(outs16, 5) || dx32)))
        return LYCO_OK;
    const i64 T = a->T, O = a->O, I = a->I, r = a->r, R = lean_rank(a, parts), rp2 = lk_reduce_rank_tile(2 * r);
    const i64 ldg = cdiv(2 * r, 4) * 4, es = a->ct == DT_F32 ? 4 : 2;
    const float c = (float)(a->s * a->m);
    const int split = a->ct != DT_F32;
    lk_expand_args e; /* dx = c·[gB | gA]·[B2 ; A2] */
    memset(&e, 0, sizeof e);
    e.ct = a->ct;
    e.M = T;
    e.N = I;
    e.r = 2 * r;
    e.P = lk_pitched_view(NULL, T, 2 * r, ldg, DT_F32);
    e.p_split = split;
    e.Q = lk_view_sub(lean_views(a, parts, NULL).qcat, 0, 2 * r, 0, I);
    e.out = lk_act_as_view(a->dx, T, I);
    e.sigma = a->sigma;
    e.row_scale = 1.0;
    e.mult = a->s * a->m;
    e.sig_in_mult = 1;
    e.mode = 1;
    e.K = 1;
    if (a->dx.p && !lk_expand_fits(&e, dev)) return LYCO_OK;
    *done = true;
    lean_ops L;
    void *mem = NULL;
    int rc = lean_alloc(a, parts, &L, s);
    if (rc) return rc;
    /* scratch: [gB | gA] T × ldg fp32, h T × rp2 CT, Y O × r fp32 */
    const size_t gbytes = ((size_t)(T * ldg) * 4 + 255) / 256 * 256, hbytes = ((size_t)(T * rp2) * es + 255) / 256 * 256;
    rc = lk_scratch_alloc(&mem, gbytes + hbytes + (size_t)(O * r) * 4, s);
    const lk_view gab = lk_pitched_view(mem, T, 2 * r, ldg, DT_F32), gB = lk_view_sub(gab, 0, T, 0, r), gA = lk_view_sub(gab, 0, T, r, r);
    const lk_view h = lk_pitched_view(mem ? (char *)mem + gbytes : NULL, T, 2 * r, rp2, a->ct);
    const lk_view hB = lk_view_sub(h, 0, T, 0, r), hA = lk_view_sub(h, 0, T, r, r);
    const lk_view Y = scr(mem ? (const float *)((char *)mem + gbytes + hbytes) : NULL, O, r);
    const lk_view xv = lk_act_as_view(a->x, T, I), dyv = lk_act_as_view(a->dy, T, O), q2 = lk_view_sub(L.qcat, 0, 2 * r, 0, I);
    const lk_view nomask = none_view();
    if (!rc) rc = lean_prologue(a, L, true, s);
    if (!rc) rc = lean_p(a, L, dev, s);
    if (!rc) { /* [gB | gA] = g·pcat, gA's P blocks summed */
        const sum_out o[2] = {plain_out(gB, 0), {gA, r, 1, 0, parts, r}};
        rc = reduce_into(a, dyv, L.pcat, 1, T, O, R, o, 2, 1.0f, none_view(), dev, s);
    }
    if (!rc) rc = lk_reduce_h(a->ct, &xv, &q2, &nomask, T, I, 2 * r, (void *)h.p, rp2, dev, s);
    if (!rc && a->dx.p) {
        e.P = gab;
        e.Q = q2;
        rc = lk_expand(&e, dev, s);
    }
    if (!rc && a->gA2.p) rc = lk_colreduce(a->ct, &xv, &gA, split, T, I, r, &a->gA2, 0, c, &a->sigma, dev, s);
    if (!rc && a->gB2.p) rc = lk_colreduce(a->ct, &xv, &gB, split, T, I, r, &a->gB2, 0, c, &a->sigma, dev, s);
    if (!rc && a->gB1.p) rc = lk_colreduce(a->ct, &dyv, &hB, 0, T, O, r, &a->gB1, 1, c, &a->sigma, dev, s);
    if (!rc && a->gA1.p) {
        if (!(rc = lk_colreduce(a->ct, &dyv, &hA, 0, T, O, r, &Y, 1, 1.0f, &nomask, dev, s)))
            rc = lk_colreduce(a->ct, &a->W, &Y, split, O, I, r, &a->gA1, 1, c, &a->sigma, dev, s);
    }
    if (!rc && a->gsigma.p) rc = run_dot2(op(gA, 0, 0, 1), op(hA, 0, 0, 0), op(gB, 0, 0, 1), op(hB, 0, 0, 0), c, a->ct, a->gsigma, s);
    if (!rc) {
        lk_act zero;
        memset(&zero, 0, sizeof zero);
        rc = copy_act(a->dy0, a->dy0_zero ? zero : a->dy, T, O, 1, a->ct, s); /* last: dy0 may be dy itself */
    }
    const int rf = mem ? lk_scratch_free(mem, s) : LYCO_OK, rf2 = lk_scratch_free(L.mem, s);
    return rc ? rc : rf ? rf : rf2;
}

extern "C" int lk_glora_bypass_bwd(const lk_glora_args *a, const lk_device *dev, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    bool done = false;
    const int lrc = lean_bypass_bwd(a, dev, s, &done);
    if (lrc || done) return lrc;
    const i64 KOR = a->K * a->O * a->r, TA = a->T * a->geo.spin * a->r, TB = a->T * a->geo.spout * a->r;
    float *buf = NULL;
    int rc = alloc_f32(&buf, 2 * KOR + 2 * TA + 2 * TB, s);
    if (rc) return rc;
    bwd_scratch w = {buf, buf + KOR, buf + 2 * KOR, buf + 2 * KOR + TA, buf + 2 * KOR + TA + TB, buf + 2 * KOR + 2 * TA + TB};
    rc = bypass_bwd_body(a, w, s);
    int rf = lk_scratch_free(buf, s);
    return rc ? rc : rf;
}
