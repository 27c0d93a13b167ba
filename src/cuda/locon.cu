/*
 * locon.cu — LoRA / LoCon (ALGORITHMS.md §2.1) on the GPU: linear layers in all four
 * directions, conv layers (plain, flattened to O×(I·K)) in merge forward/backward, DoRA on top
 * of both merge directions. Operands are any mix of fp16/bf16/fp32 (NUMERICS.md §1): each is
 * rounded to the compute dtype CT in registers or shared memory as it is staged; products
 * accumulate in fp32 (mma.sync m16n8k16 for 16-bit CT; FFMA for fp32 CT — fp32 accuracy in
 * both fp32 modes); every output is rounded once to its own dtype. Scalars: c = s·m·σs (σs read
 * on the device and rounded to CT; no host synchronisation); masks q exactly as given.
 *
 * Shapes: U O×r, D r×(I·K), W/out/G O×(I·K), x T×I, y/y0/dy T×O (T = tokens, leading dims of x
 * folded). Any strides whose dims collapse to two, any alignment, any sizes (tiles are
 * zero-filled at the edges), r ≥ 1 (bypass forward: h of a 32-token tile in shared memory).
 *
 * For r ≤ 128 the common cases go to lowrank.cu's streaming kernels (merge forward with or
 * without DoRA beyond the r ≤ 16 small-rank kernel; merge backward's d_up and, unmasked without
 * DoRA, d_down; bypass forward; bypass backward's gh / h / dy0 / σs, dx, d_up and d_down); the
 * kernels below serve the rest (DoRA and masked reductions, r > 128, LYCO_CUDA_LOWRANK_LEGACY=1).
 *
 * Two kernel sets. The pipelined set (k2_*) stages both operands of every step with cp.async,
 * S deep (S from the device's shared memory: two blocks per SM where they fit), and reads each
 * staged tile directly as a tensor-core operand when it is already CT (the bf16 fast path);
 * fp32 operands are converted in shared memory. The static set (k_*: 48 KB of static shared
 * memory, register-staged) covers DoRA, masked merge backward, r > 128 merge forward and
 * bypass, and any device where a pipelined layout does not fit.
 *
 * merge forward: out = W + m·dW | m·dW | W − m·dW, dW = (s·σs·q_o)·U·D (DoRA: merge_ep.cuh).
 *   r ≤ 16 without DoRA on row-major W/out: locon_merge_small.cu (FFMA, no tensor cores).
 *   k2_merge_fwd (r ≤ 128): a block owns 64 rows; its U rows stay in shared memory; it walks its
 *   128-column tiles (grid-stride), staging W and D tiles S deep; the fp32 dW tile goes through
 *   shared memory to a coalesced elementwise epilogue (in place allowed: out may be W).
 *   k_merge_fwd (r > 128): one 64×128 tile per block, U/D in 32-rank chunks. Reads W once, writes out
 *   once (+ U, D per tile from L2). Extra memory: none (DoRA: 2 sums + 3 stats per row or
 *   column, fp32 scratch).
 *
 * merge backward (Γ = ∂L/∂W'', or ∂L/∂V under DoRA):
 *   d_up[o,i]   = s·σs·q_o·m'·Σ_j Γ[o,j]·D[i,j]        (m' = m, or 1 under DoRA)
 *   d_down[i,j] = s·σs·m'·Σ_o q_o·U[o,i]·Γ[o,j]
 *   dσs         = s·m'·Σ_o q_o Σ_i U[o,i]·(Γ·Dᵀ)[o,i]
 *   (k2_)merge_dup: 32-row strips × ≤128 ranks, split over j into fp32 partials; (k2_)kred:
 *   the reduction over o, split over o into fp32 partials; fixed-order finalise kernels apply
 *   the scalars and round (and give σs's gradient from the d_up partials). Γ is read once per
 *   reduction (twice in all: the two reductions run over different axes). DoRA's Γ (= GV) and
 *   the masked Γ enter the tensor cores split into CT parts (bf16: 3, fp16: 2; common.cuh), so
 *   nothing is rounded that the oracle keeps exact. Deterministic: no atomics; split counts are
 *   functions of the shape only. Extra memory (scratch, fp32): z_a·O·r' + z_b·r'·I·K + per-block
 *   σs partials (+ DoRA statistics), r' = r rounded up to the rank tile (32/64/128).
 *
 * bypass forward (32-token tiles):
 *   h = RN_CT(q ⊙ (x·Dᵀ))  (NUMERICS.md §1.6: rounded like eager between the two products)
 *   y = y0 + c·h·Uᵀ  (or c·h·Uᵀ alone); y may be y0 itself.
 *   Phase 1 streams x and D (64 columns a step); h stays in shared memory; phase 2 walks the
 *   output tiles (64 wide pipelined, 128 static) staging U and y0. Small token counts split the
 *   output columns over more blocks (each recomputes its h; the split is a function of the
 *   shape). ΔW is never built. Extra memory: none.
 *
 * bypass backward (c = s·m·σs):
 *   gh = RN_CT(c·q ⊙ (dy·U)) (rounded as the eager chain stores it, NUMERICS.md §1.6), h as in
 *   forward;  dx = gh·D;  dy0 = RN(dy);
 *   d_up = c·Σ_t dyᵀ·h;  d_down = Σ_t ghᵀ·x;  dσs = s·m·Σ q ⊙ (dy·U) ⊙ (x·Dᵀ)
 *   (k2_)bb_h per token tile (gh and h into scratch, dy0 written from the staged dy tiles, σs
 *   partials), k_bb_dx (2-D grid), (k2_)kred twice (reductions over tokens, split into fp32
 *   partials). The per-tile paths keep gh's CT values in fp32 storage (entering the tensor cores
 *   as CT parts, the later ones zero); lowrank.cu's path stores gh in CT. Extra memory (scratch):
 *   h T×r' (CT) + gh T×r' (fp32 storage) + partials z·r'·(O + I) (fp32) + σs partials.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kern_lowrank.h"
#include "cuda/locon_delta.cuh"
#include "cuda/merge_ep.cuh"

#define SMAX(a, b) ((a) > (b) ? (a) : (b))

/* =============================================================================================
 * merge forward
 * =========================================================================================== */
template <typename CT> __global__ __launch_bounds__(NT) void k_merge_fwd(lk_merge_fwd_args a, const float *st) {
    const int BM = 64, BN = 128;
    typedef locon_delta<CT, BM, BN, 2> P;
    typedef tile_regs<BM, BN> TR;
    __shared__ __align__(16) char smem[SMAX(P::SMEM_IN, P::SMEM_C)];
    __shared__ float rowc[BM];
    CT *sU = (CT *)smem, *sD = (CT *)(smem + P::SMEM_U);
    float *Cs = (float *)smem;
    const i64 j0 = (i64)blockIdx.x * BN, o0 = (i64)blockIdx.y * BM;
    const bool needW = a.W.p != NULL;
    const bool cm = v_colmajor(a.out);
    TR wt;
    if (needW) tile_load(wt, a.W, o0, j0, cm);
    P::run(a.L, o0, j0, sU, sD, Cs, rowc, sigma_ct<CT>(a.L.sigma));
    const float mf = (float)a.L.m;
    const bool dora = a.dora.on;
#pragma unroll
    for (int k = 0; k < TR::CH; k++) {
        int q = threadIdx.x + k * NT;
        if (q >= TR::NCH) break;
        int rr, cc;
        chunk_pos<BM, BN>(q, cm, rr, cc);
        float o8[8];
#pragma unroll
        for (int e = 0; e < 8; e++) {
            i64 o = o0 + rr, j = j0 + cc + e;
            float w = needW ? rnd_ct<CT>(wt.v[k][e]) : 0.0f;
            const float *s3 = NULL;
            if (dora) s3 = st + 3 * ((o < a.L.O && j < a.L.IK) ? dora_kept(a.dora, o, j, a.L.K) : 0);
            o8[e] = merge_elem(w, Cs[rr * P::LDC + cc + e], a.mode, mf, dora, s3);
        }
        vstore8(a.out, o0 + rr, j0 + cc, o8);
    }
}

/* =============================================================================================
 * merge backward: d_up partials (rows of Γ against D), split over columns
 * =========================================================================================== */
template <typename CT, int NR>
__global__ __launch_bounds__(NT) void k_merge_dup(lk_merge_bwd_args a, const float *st, float *part, i64 kper, i64 RP) {
    const int BM = 32, BK = sizeof(CT) == 2 ? 64 : 32, LDA = BK + 8, LDB = BK + 8;
    const int WM = 2, WN = 4, MI = 1, NI = NR / 32;
    typedef locon_delta<CT, BM, BK, 2> P;
    typedef tile_regs<BM, BK> TA;
    typedef tile_regs<NR, BK> TB;
    const int NS = nsplit<CT>::n;
    const int SA = BM * LDA * (int)sizeof(CT), SB = NR * LDB * (int)sizeof(CT);
    __shared__ __align__(16) char smem[NS * SA + SB + SMAX(P::SMEM_IN, P::SMEM_C)];
    __shared__ float rowc[BM];
    CT *sA = (CT *)smem, *sB = (CT *)(smem + NS * SA);
    CT *pa[3] = {sA, sA + BM * LDA, sA + 2 * BM * LDA};
    char *pr = smem + NS * SA + SB;
    CT *pU = (CT *)pr, *pD = (CT *)(pr + P::SMEM_U);
    float *Cs = (float *)pr;
    const bool dora = a.dora.on;
    const int np = dora ? NS : 1;
    const i64 O = a.L.O, IK = a.L.IK;
    const i64 o0 = (i64)blockIdx.x * BM, i0 = (i64)blockIdx.y * NR, jb = (i64)blockIdx.z * kper;
    const i64 je = jb + kper < IK ? jb + kper : IK;
    const int warp = threadIdx.x >> 5, m0 = (warp % WM) * 16, n0 = (warp / WM) * (NR / WN);
    const bool cmG = v_colmajor(a.G), cmD = v_colmajor(a.L.D);
    const float sig = sigma_ct<CT>(a.L.sigma);
    TA tg, tw;
    TB td;
    float acc[MI][NI][4];
    acc_zero(acc);
    if (jb < je) {
        tile_load(tg, a.G, o0, jb, cmG);
        if (dora) tile_load(tw, a.W, o0, jb, cmG);
        tile_load(td, a.L.D, i0, jb, cmD);
    }
    for (i64 j0 = jb; j0 < je; j0 += BK) {
        if (dora) P::run(a.L, o0, j0, pU, pD, Cs, rowc, sig);
        __syncthreads();
        if (!dora) {
            tile_store<CT>(tg, sA, LDA, cmG);
        } else {
#pragma unroll
            for (int k = 0; k < TA::CH; k++) {
                int q = threadIdx.x + k * NT;
                if (q >= TA::NCH) break;
                int rr, cc;
                chunk_pos<BM, BK>(q, cmG, rr, cc);
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    i64 o = o0 + rr, j = j0 + cc + e;
                    float v = 0.0f;
                    if (o < O && j < IK)
                        v = dora_gv(rnd_ct<CT>(tg.v[k][e]), rnd_ct<CT>(tw.v[k][e]), Cs[rr * P::LDC + cc + e],
                                    st + 3 * dora_kept(a.dora, o, j, a.L.K), ct_of<CT>::dt);
                    store_parts<CT>(pa, np, rr * LDA + cc + e, v);
                }
            }
        }
        tile_store<CT>(td, sB, LDB, cmD);
        __syncthreads();
        if (j0 + BK < je) {
            tile_load(tg, a.G, o0, j0 + BK, cmG);
            if (dora) tile_load(tw, a.W, o0, j0 + BK, cmG);
            tile_load(td, a.L.D, i0, j0 + BK, cmD);
        }
        for (int pp = np - 1; pp >= 0; pp--) warp_mma<CT, MI, NI, false, false>::run(acc, pa[pp], LDA, sB, LDB, m0, n0, BK);
    }
#pragma unroll
    for (int ni = 0; ni < NI; ni++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            i64 o = o0 + acc_row(m0, 0, e), i = i0 + acc_col(n0, ni, e);
            if (o < O) part[((i64)blockIdx.z * O + o) * RP + i] = acc[0][ni][e];
        }
}

/* d_up = Σ_z partials × s·σs·q_o·m', and the σs-gradient partial of this block */
__global__ __launch_bounds__(NT) void k_fin_dup(lk_merge_bwd_args a, const float *part, int z, i64 RP, float *sigpart) {
    __shared__ float red[NT / 32];
    const i64 O = a.L.O, r = a.L.r;
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    const int ct = a.L.ct;
    float sp = 0.0f;
    if (idx < O * r) {
        i64 o = idx / r, i = idx % r;
        float v = 0.0f;
        for (int zz = 0; zz < z; zz++) v += part[((i64)zz * O + o) * RP + i];
        float coef = (float)a.L.s * vget(a.L.mask, o, 1.0f) * (a.dora.on ? 1.0f : (float)a.L.m);
        float sig = a.L.sigma.p ? round_to(vload(a.L.sigma, 0, 0), ct) : 1.0f;
        if (a.gU.p) vstore(a.gU, o, i, v * coef * sig);
        if (sigpart) sp = round_to(vload(a.L.U, o, i), ct) * v * coef;
    }
    if (sigpart) {
        float s = block_sum(sp, red);
        if (threadIdx.x == 0) sigpart[blockIdx.x] = s;
    }
}

/* =============================================================================================
 * reductions over the row axis of two operands: C[i][n] = Σ_k A[k][i]·B[k][n]
 * (merge d_down: A = U, B = Γ over o; bypass d_up: A = h, B = dy; d_down: A = gh, B = x, over t)
 * =========================================================================================== */
struct kred_args {
    lk_view A;      /* Kd × (≥ r): element (k, i) */
    int a_split;    /* A is fp32 data entering the products as hi+lo */
    lk_view B;      /* Kd × N */
    int b_mode;     /* 0: B as is; 1: merge Γ = RN(G)·q_o; 2: merge DoRA GV·q_o */
    i64 Kd, N, kper, RP;
    lk_locon L;
    lk_dora dora;
    lk_view W;
    const float *st;
    float *part;    /* [z][RP][N] */
};

template <typename CT, int NR> __global__ __launch_bounds__(NT) void k_kred(kred_args p) {
    const int BK = 32, BN = sizeof(CT) == 2 ? 64 : 32;
    const int WM = NR >= 64 ? 4 : 2, WN = 8 / WM, MI = NR / WM / 16, NI = BN / WN / 8;
    const int LDA = NR + 8, LDB = BN + 8;
    typedef locon_delta<CT, BK, BN, 2> P;
    typedef tile_regs<BK, NR> TA;
    typedef tile_regs<BK, BN> TB;
    const int NS = nsplit<CT>::n;
    const int SA = BK * LDA * (int)sizeof(CT), SB = BK * LDB * (int)sizeof(CT);
    const int SX = (NS - 1) * SMAX(SA, SB);   /* the extra parts of whichever operand is split (never both) */
    __shared__ __align__(16) char smem[SA + SB + SX + SMAX(P::SMEM_IN, P::SMEM_C)];
    __shared__ float rowc[BK];
    CT *sA = (CT *)smem, *sB = (CT *)(smem + SA), *sX = (CT *)(smem + SA + SB);
    CT *pa[3] = {sA, sX, sX + BK * LDA}, *pb[3] = {sB, sX, sX + BK * LDB};
    char *pr = smem + SA + SB + SX;
    CT *pU = (CT *)pr, *pD = (CT *)(pr + P::SMEM_U);
    float *Cs = (float *)pr;
    const bool has_mask = p.L.mask.p != NULL;
    const int npa = p.a_split ? NS : 1;
    const int npb = (p.b_mode == 2 || (p.b_mode == 1 && has_mask)) ? NS : 1;
    const i64 n0 = (i64)blockIdx.x * BN, i0 = (i64)blockIdx.y * NR, kb = (i64)blockIdx.z * p.kper;
    const i64 ke = kb + p.kper < p.Kd ? kb + p.kper : p.Kd;
    const int warp = threadIdx.x >> 5, m0 = (warp % WM) * (NR / WM), nw = (warp / WM) * (BN / WN);
    const bool cmA = v_colmajor(p.A), cmB = v_colmajor(p.B);
    const float sig = sigma_ct<CT>(p.L.sigma);
    TA ta;
    TB tb, tw;
    float acc[MI][NI][4];
    acc_zero(acc);
    if (kb < ke) {
        tile_load(ta, p.A, kb, i0, cmA);
        tile_load(tb, p.B, kb, n0, cmB);
        if (p.b_mode == 2) tile_load(tw, p.W, kb, n0, cmB);
    }
    for (i64 k0 = kb; k0 < ke; k0 += BK) {
        if (p.b_mode == 2) P::run(p.L, k0, n0, pU, pD, Cs, rowc, sig);
        __syncthreads();
        tile_store_parts<CT>(ta, pa, npa, LDA, cmA);
        if (p.b_mode == 0) {
            tile_store<CT>(tb, sB, LDB, cmB);
        } else {
#pragma unroll
            for (int k = 0; k < TB::CH; k++) {
                int q = threadIdx.x + k * NT;
                if (q >= TB::NCH) break;
                int rr, cc;
                chunk_pos<BK, BN>(q, cmB, rr, cc);
                i64 o = k0 + rr;
                float qo = o < p.L.O ? vget(p.L.mask, o, 1.0f) : 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    i64 j = n0 + cc + e;
                    float v = 0.0f;
                    if (o < p.L.O && j < p.L.IK) {
                        float g = rnd_ct<CT>(tb.v[k][e]);
                        v = p.b_mode == 1 ? g * qo
                                          : dora_gv(g, rnd_ct<CT>(tw.v[k][e]), Cs[rr * P::LDC + cc + e],
                                                    p.st + 3 * dora_kept(p.dora, o, j, p.L.K), ct_of<CT>::dt) * qo;
                    }
                    store_parts<CT>(pb, npb, rr * LDB + cc + e, v);
                }
            }
        }
        __syncthreads();
        if (k0 + BK < ke) {
            tile_load(ta, p.A, k0 + BK, i0, cmA);
            tile_load(tb, p.B, k0 + BK, n0, cmB);
            if (p.b_mode == 2) tile_load(tw, p.W, k0 + BK, n0, cmB);
        }
        for (int pp = npa - 1; pp >= 0; pp--) warp_mma<CT, MI, NI, true, true>::run(acc, pa[pp], LDA, sB, LDB, m0, nw, BK);
        for (int pp = npb - 1; pp >= 1; pp--) warp_mma<CT, MI, NI, true, true>::run(acc, sA, LDA, pb[pp], LDB, m0, nw, BK);
    }
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                i64 i = i0 + acc_row(m0, mi, e), n = n0 + acc_col(nw, ni, e);
                if (n < p.N) p.part[((i64)blockIdx.z * p.RP + i) * p.N + n] = acc[mi][ni][e];
            }
}

/* out(i, n) (or out(n, i)) = coef·σs'·Σ_z part[z][i][n] for i < r, n < N */
__global__ __launch_bounds__(NT) void k_fin_kred(const float *part, int z, i64 RP, i64 N, i64 r, lk_view out, int transpose,
                                                 float coef, lk_view sigma, int ct) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= r * N) return;
    i64 i = idx / N, n = idx % N;
    float v = 0.0f;
    for (int zz = 0; zz < z; zz++) v += part[((i64)zz * RP + i) * N + n];
    float sig = sigma.p ? round_to(vload(sigma, 0, 0), ct) : 1.0f;
    v = v * coef * sig;
    if (transpose) vstore(out, n, i, v);
    else vstore(out, i, n, v);
}

/* total = Σ parts (fixed order) → out (1 element) */
__global__ __launch_bounds__(NT) void k_sum(const float *parts, i64 n, lk_view out) {
    __shared__ float red[NT / 32];
    float v = 0.0f;
    for (i64 i = threadIdx.x; i < n; i += NT) v += parts[i];
    float s = block_sum(v, red);
    if (threadIdx.x == 0) vstore(out, 0, 0, s);
}

/* =============================================================================================
 * bypass forward
 * =========================================================================================== */
template <typename CT> struct bypass_tiles {
    static const int BT = 32;
    static const int BK = sizeof(CT) == 2 ? 64 : 32;    /* phase 1 step over I; phase 2 rank step */
    static const int BNO = sizeof(CT) == 2 ? 128 : 64;  /* phase 2 output tile */
    static size_t smem(int NR, i64 HP) {
        size_t h = ((size_t)BT * (size_t)(HP + 8) * sizeof(CT) + 15) / 16 * 16;
        size_t p1 = (size_t)BT * (BK + 8) * sizeof(CT) + (size_t)NR * (BK + 8) * sizeof(CT);
        size_t p2 = ((size_t)BNO * (BK + 8) * sizeof(CT) + 15) / 16 * 16 + (size_t)BT * (BNO + 4) * 4;
        return h + (p1 > p2 ? p1 : p2);
    }
};

template <typename CT, int NR>
__global__ __launch_bounds__(NT) void k_bypass_fwd(lk_bypass_fwd_args a, i64 HP, i64 tiles_per_split) {
    typedef bypass_tiles<CT> BTL;
    const int BT = BTL::BT, BK = BTL::BK, BNO = BTL::BNO;
    const int LDX = BK + 8, LDD = BK + 8, LDU = BK + 8, LDC = BNO + 4;
    const int NI = NR / 32, NI2 = BNO / 32;
    typedef tile_regs<BT, BK> TX;
    typedef tile_regs<NR, BK> TD;
    typedef tile_regs<BNO, BK> TU;
    typedef tile_regs<BT, BNO> TY;
    extern __shared__ __align__(16) char dsm[];
    const int LDH = (int)HP + 8;
    CT *hs = (CT *)dsm;
    char *R = dsm + ((size_t)BT * LDH * sizeof(CT) + 15) / 16 * 16;
    CT *sX = (CT *)R, *sD = sX + BT * LDX;
    CT *sU = (CT *)R;
    float *Cs = (float *)(R + ((size_t)BNO * LDU * sizeof(CT) + 15) / 16 * 16);
    const lk_locon &L = a.L;
    const i64 t0 = (i64)blockIdx.x * BT, I = L.IK;
    const int warp = threadIdx.x >> 5, m0 = (warp % 2) * 16;
    const int n0 = (warp / 2) * (NR / 4), n2 = (warp / 2) * (BNO / 4);
    const bool cmX = v_colmajor(a.x), cmD = v_colmajor(L.D), cmU = v_colmajor(L.U), cmY = v_colmajor(a.y);
    const float c = (float)(L.s * L.m) * sigma_ct<CT>(L.sigma);

    /* phase 1: h = RN_CT(q ⊙ (x·Dᵀ)) into shared memory */
    for (i64 i0 = 0; i0 < HP; i0 += NR) {
        float acc[1][NI][4];
        acc_zero(acc);
        TX tx;
        TD td;
        tile_load(tx, a.x, t0, 0, cmX);
        tile_load(td, L.D, i0, 0, cmD);
        for (i64 c0 = 0; c0 < I; c0 += BK) {
            __syncthreads();
            tile_store<CT>(tx, sX, LDX, cmX);
            tile_store<CT>(td, sD, LDD, cmD);
            __syncthreads();
            if (c0 + BK < I) {
                tile_load(tx, a.x, t0, c0 + BK, cmX);
                tile_load(td, L.D, i0, c0 + BK, cmD);
            }
            warp_mma<CT, 1, NI, false, false>::run(acc, sX, LDX, sD, LDD, m0, n0, BK);
        }
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int row = acc_row(m0, 0, e);
                i64 i = i0 + acc_col(n0, ni, e);
                float q = i < L.r ? vget(L.mask, i, 1.0f) : 0.0f;
                hs[row * LDH + i] = ct_of<CT>::from(q * acc[0][ni][e]);
            }
    }
    __syncthreads();

    /* phase 2: y = y0 + c·h·Uᵀ, 128 (64) output columns at a time */
    const i64 ntile = cdiv(L.O, BNO), ob = (i64)blockIdx.y * tiles_per_split;
    const i64 oe = ob + tiles_per_split < ntile ? ob + tiles_per_split : ntile;
    for (i64 ot = ob; ot < oe; ot++) {
        const i64 o0 = ot * BNO;
        TY ty;
        if (a.y0.p) tile_load(ty, a.y0, t0, o0, cmY);
        float acc[1][NI2][4];
        acc_zero(acc);
        for (i64 ik = 0; ik < L.r; ik += BK) {
            TU tu;
            tile_load(tu, L.U, o0, ik, cmU);
            __syncthreads();
            tile_store<CT>(tu, sU, LDU, cmU);
            __syncthreads();
            int left = (int)(L.r - ik < BK ? L.r - ik : BK);
            int kk = sizeof(CT) == 2 ? (left + 15) / 16 * 16 : left;
            warp_mma<CT, 1, NI2, false, false>::run(acc, hs + ik, LDH, sU, LDU, m0, n2, kk);
        }
        acc_to_smem(acc, Cs, LDC, m0, n2, (const float *)NULL);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TY::CH; k++) {
            int q = threadIdx.x + k * NT;
            if (q >= TY::NCH) break;
            int rr, cc;
            chunk_pos<BT, BNO>(q, cmY, rr, cc);
            float o8[8];
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float d = Cs[rr * LDC + cc + e];
                o8[e] = a.y0.p ? fmaf(c, d, rnd_ct<CT>(ty.v[k][e])) : c * d;
            }
            vstore8(a.y, t0 + rr, o0 + cc, o8);
        }
    }
}

/* =============================================================================================
 * bypass backward
 * =========================================================================================== */
/* token tiles: gh = c·q ⊙ (dy·U) (fp32) and h = RN_CT(q ⊙ (x·Dᵀ)) into scratch; dy0; σs partial */
template <typename CT, int NR>
__global__ __launch_bounds__(NT) void k_bb_h(lk_bypass_bwd_args a, CT *hsc, float *ghsc, float *sigpart, i64 RP) {
    const int BT = 32, BK = sizeof(CT) == 2 ? 64 : 32, LDA = BK + 8, LDBU = NR + 8, LDBD = BK + 8;
    const int NI = NR / 32;
    typedef tile_regs<BT, BK> TA;
    typedef tile_regs<BK, NR> TU;
    typedef tile_regs<NR, BK> TD;
    const int SA = BT * LDA * (int)sizeof(CT);
    const int SB = SMAX(BK * LDBU, NR * LDBD) * (int)sizeof(CT);
    __shared__ __align__(16) char smem[SA + SB];
    __shared__ float red[NT / 32];
    CT *sA = (CT *)smem, *sB = (CT *)(smem + SA);
    const lk_locon &L = a.L;
    const i64 t0 = (i64)blockIdx.x * BT;
    const int warp = threadIdx.x >> 5, m0 = (warp % 2) * 16, n0 = (warp / 2) * (NR / 4);
    const bool cmY = v_colmajor(a.dy), cmX = v_colmajor(a.x), cmU = v_colmajor(L.U), cmD = v_colmajor(L.D);
    const float sm = (float)(L.s * L.m), c = sm * sigma_ct<CT>(L.sigma);
    float sp = 0.0f;
    for (i64 i0 = 0; i0 < L.r; i0 += NR) {
        float accG[1][NI][4], accH[1][NI][4];
        acc_zero(accG);
        acc_zero(accH);
        {   /* gh0 = dy·U over o */
            TA ta;
            TU tu;
            tile_load(ta, a.dy, t0, 0, cmY);
            tile_load(tu, L.U, 0, i0, cmU);
            for (i64 o0 = 0; o0 < L.O; o0 += BK) {
                __syncthreads();
                tile_store<CT>(ta, sA, LDA, cmY);
                if (i0 == 0 && a.dy0.p) {
#pragma unroll
                    for (int k = 0; k < TA::CH; k++) {
                        int q = threadIdx.x + k * NT;
                        if (q >= TA::NCH) break;
                        int rr, cc;
                        chunk_pos<BT, BK>(q, cmY, rr, cc);
                        float v[8];
#pragma unroll
                        for (int e = 0; e < 8; e++) v[e] = rnd_ct<CT>(ta.v[k][e]);
                        vstore8(a.dy0, t0 + rr, o0 + cc, v);
                    }
                }
                tile_store<CT>(tu, sB, LDBU, cmU);
                __syncthreads();
                if (o0 + BK < L.O) {
                    tile_load(ta, a.dy, t0, o0 + BK, cmY);
                    tile_load(tu, L.U, o0 + BK, i0, cmU);
                }
                warp_mma<CT, 1, NI, false, true>::run(accG, sA, LDA, sB, LDBU, m0, n0, BK);
            }
        }
        {   /* h = x·Dᵀ over c */
            TA ta;
            TD td;
            tile_load(ta, a.x, t0, 0, cmX);
            tile_load(td, L.D, i0, 0, cmD);
            for (i64 c0 = 0; c0 < L.IK; c0 += BK) {
                __syncthreads();
                tile_store<CT>(ta, sA, LDA, cmX);
                tile_store<CT>(td, sB, LDBD, cmD);
                __syncthreads();
                if (c0 + BK < L.IK) {
                    tile_load(ta, a.x, t0, c0 + BK, cmX);
                    tile_load(td, L.D, i0, c0 + BK, cmD);
                }
                warp_mma<CT, 1, NI, false, false>::run(accH, sA, LDA, sB, LDBD, m0, n0, BK);
            }
        }
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                i64 t = t0 + acc_row(m0, 0, e), i = i0 + acc_col(n0, ni, e);
                float q = i < L.r ? vget(L.mask, i, 1.0f) : 0.0f;
                float g0 = accG[0][ni][e], h0 = accH[0][ni][e];
                if (t < a.T) {
                    ghsc[t * RP + i] = rnd_ct<CT>(c * q * g0); /* gh rounded as eager stores it (§1.6) */
                    hsc[t * RP + i] = ct_of<CT>::from(q * h0);
                    sp = fmaf(sm * q * g0, h0, sp);
                }
            }
    }
    if (sigpart) {
        float s = block_sum(sp, red);
        if (threadIdx.x == 0) sigpart[blockIdx.x] = s;
    }
}

/* dx = gh·D (gh split into CT parts), 32 tokens × 128 (64) input columns per block */
template <typename CT> __global__ __launch_bounds__(NT) void k_bb_dx(lk_bypass_bwd_args a, lk_view gh) {
    const int BT = 32, BNC = sizeof(CT) == 2 ? 128 : 64, RK = sizeof(CT) == 2 ? 64 : 32;
    const int LDA = RK + 8, LDB = BNC + 8, LDC = BNC + 4, NI = BNC / 32;
    typedef tile_regs<BT, RK> TA;
    typedef tile_regs<RK, BNC> TB;
    typedef tile_regs<BT, BNC> TC;
    const int NS = nsplit<CT>::n;
    const int SA = BT * LDA * (int)sizeof(CT), SB = RK * LDB * (int)sizeof(CT);
    __shared__ __align__(16) char smem[SMAX(NS * SA + SB, BT * LDC * 4)];
    CT *sA = (CT *)smem, *sB = (CT *)(smem + NS * SA);
    CT *pa[3] = {sA, sA + BT * LDA, sA + 2 * BT * LDA};
    float *Cs = (float *)smem;
    const lk_locon &L = a.L;
    const i64 t0 = (i64)blockIdx.x * BT, c0 = (i64)blockIdx.y * BNC;
    const int warp = threadIdx.x >> 5, m0 = (warp % 2) * 16, n0 = (warp / 2) * (BNC / 4);
    const bool cmD = v_colmajor(L.D), cmX = v_colmajor(a.dx);
    float acc[1][NI][4];
    acc_zero(acc);
    TA ta;
    TB tb;
    tile_load(ta, gh, t0, 0, false);
    tile_load(tb, L.D, 0, c0, cmD);
    for (i64 ik = 0; ik < L.r; ik += RK) {
        __syncthreads();
        tile_store_parts<CT>(ta, pa, NS, LDA, false);
        tile_store<CT>(tb, sB, LDB, cmD);
        __syncthreads();
        if (ik + RK < L.r) {
            tile_load(ta, gh, t0, ik + RK, false);
            tile_load(tb, L.D, ik + RK, c0, cmD);
        }
        for (int pp = NS - 1; pp >= 0; pp--) warp_mma<CT, 1, NI, false, true>::run(acc, pa[pp], LDA, sB, LDB, m0, n0, RK);
    }
    __syncthreads();
    acc_to_smem(acc, Cs, LDC, m0, n0, (const float *)NULL);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TC::CH; k++) {
        int q = threadIdx.x + k * NT;
        if (q >= TC::NCH) break;
        int rr, cc;
        chunk_pos<BT, BNC>(q, cmX, rr, cc);
        float o8[8];
#pragma unroll
        for (int e = 0; e < 8; e++) o8[e] = Cs[rr * LDC + cc + e];
        vstore8(a.dx, t0 + rr, c0 + cc, o8);
    }
}

/* =============================================================================================
 * pipelined kernels (cp.async, S stages in flight; common.cuh) for the common cases; the kernels
 * above remain for DoRA, masked merge backward and large ranks. Shared memory is dynamic, its
 * layout one function shared by host and device; S is chosen on the host from the device's
 * shared memory (two blocks per SM when they fit, else one; a launch never exceeds the opt-in
 * limit — the launcher falls back to the static kernels instead).
 * =========================================================================================== */

/* ---- merge forward, r ≤ RP ∈ {32, 64, 128}: 64 rows of U stay in shared memory; the block walks
   its column tiles (grid-stride) with W and D tiles staged S deep; epilogue as k_merge_fwd ---- */
struct mf2_layout {
    int u, c, bufd, rowc, stages, stage, total;
};
__host__ __device__ static inline mf2_layout mf2_plan(int RP, int ct, int wdt, bool hasW, int ddt, int S) {
    const int BM = 64, BN = 128, sz = ct == DT_F32 ? 4 : 2;
    mf2_layout l;
    int off = 0;
    l.u = off;
    off += al128(BM * (RP + 8) * sz);
    l.c = off;
    off += al128(BM * (BN + 4) * 4);
    l.bufd = off;
    off += conv_bytes(RP, BN, ddt, 1, ct);
    l.rowc = off;
    off += al128(BM * 4);
    l.stage = (hasW ? raw_bytes(BM, BN, wdt) : 0) + raw_bytes(RP, BN, ddt);
    l.stages = off;
    off += S * l.stage;
    l.total = off;
    return l;
}

template <typename CT, int RP>
__global__ __launch_bounds__(NT) void k2_merge_fwd(lk_merge_fwd_args a, const float *st, int S) {
    const int BM = 64, BN = 128, LDU = RP + 8, LDC = BN + 4, MI = 2, NI = 4;
    extern __shared__ __align__(16) char dsm[];
    const lk_locon &L = a.L;
    const bool hasW = a.W.p != NULL, dora = a.dora.on;
    const int wdt = hasW ? a.W.dt : DT_F32;
    const mf2_layout ly = mf2_plan(RP, ct_of<CT>::dt, wdt, hasW, L.D.dt, S);
    CT *sU = (CT *)(dsm + ly.u), *bufD = (CT *)(dsm + ly.bufd);
    float *Cs = (float *)(dsm + ly.c), *rowc = (float *)(dsm + ly.rowc);
    char *stages = dsm + ly.stages;
    const int SW = hasW ? raw_bytes(BM, BN, wdt) : 0, pw = raw_pitch(BN, wdt);
    const i64 o0 = (i64)blockIdx.y * BM, nj = cdiv(L.IK, BN);
    const int nk = (int)((nj - blockIdx.x + gridDim.x - 1) / gridDim.x);
    const int warp = threadIdx.x >> 5, m0 = (warp % 2) * 32, n0 = (warp / 2) * 32;
    const float sig = sigma_ct<CT>(L.sigma), mf = (float)L.m;
    const bool cm = v_colmajor(a.out);
    {
        tile_regs<BM, RP> tu;
        const bool cmU = v_colmajor(L.U);
        tile_load(tu, L.U, o0, 0, cmU);
        tile_store<CT>(tu, sU, LDU, cmU);
    }
    for (int i = threadIdx.x; i < BM; i += NT) {
        i64 o = o0 + i;
        rowc[i] = o < L.O ? (float)L.s * sig * vget(L.mask, o, 1.0f) : 0.0f;
    }
    for (int s = 0; s < S - 1 + nk; s++) {
        /* s < S − 1: prologue issues; afterwards s − (S − 1) is the tile consumed */
        const int k = s - (S - 1);
        if (k >= 0) {
            cp_wait(S - 2);
            __syncthreads();
        }
        const int n = s;  /* tile issued now */
        if (k >= 0) {
            char *stg = stages + (k % S) * ly.stage;
            CT *dp[3];
            int ldd;
            raw_operand<CT, RP, BN>(stg + SW, L.D.dt, 1, bufD, dp, &ldd);
            __syncthreads();
            if (n < nk) {
                const i64 jn = (blockIdx.x + (i64)n * gridDim.x) * BN;
                char *sn = stages + (n % S) * ly.stage;
                if (hasW) raw_issue<BM, BN>(sn, a.W, o0, jn);
                raw_issue<RP, BN>(sn + SW, L.D, 0, jn);
            }
            cp_commit();
            float acc[MI][NI][4];
            acc_zero(acc);
            const int kk = sizeof(CT) == 2 ? (int)((L.r + 15) / 16 * 16) : (int)L.r;
            warp_mma<CT, MI, NI, false, true>::run(acc, sU, LDU, dp[0], ldd, m0, n0, kk);
            acc_to_smem(acc, Cs, LDC, m0, n0, rowc);
            __syncthreads();
            const i64 j0 = (blockIdx.x + (i64)k * gridDim.x) * BN;
            for (int q = threadIdx.x; q < BM * BN / 8; q += NT) {
                int rr, cc;
                chunk_pos<BM, BN>(q, cm, rr, cc);
                float o8[8];
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const i64 o = o0 + rr, j = j0 + cc + e;
                    const float w = hasW ? rnd_ct<CT>(raw_get(stg, pw, wdt, rr, cc + e)) : 0.0f;
                    const float *s3 = dora ? st + 3 * ((o < L.O && j < L.IK) ? dora_kept(a.dora, o, j, L.K) : 0) : NULL;
                    o8[e] = merge_elem(w, Cs[rr * LDC + cc + e], a.mode, mf, dora, s3);
                }
                vstore8(a.out, o0 + rr, j0 + cc, o8);
            }
        } else {
            if (n < nk) {
                const i64 jn = (blockIdx.x + (i64)n * gridDim.x) * BN;
                char *sn = stages + (n % S) * ly.stage;
                if (hasW) raw_issue<BM, BN>(sn, a.W, o0, jn);
                raw_issue<RP, BN>(sn + SW, L.D, 0, jn);
            }
            cp_commit();
        }
    }
    cp_wait(0);
}

/* ---- bypass forward, r ≤ RP ∈ {32, 64, 128}: phase 1 streams x and D (64 columns a step);
   phase 2 streams U and y0 per 64-column output tile ---- */
struct bf2_layout {
    int hs, cs, bufa, bufb, bufu, stages, st1, st2, total;
};
__host__ __device__ static inline bf2_layout bf2_plan(int RP, int ct, int xdt, int ddt, int udt, int ydt, int S) {
    const int sz = ct == DT_F32 ? 4 : 2;
    bf2_layout l;
    int off = 0;
    l.hs = off;
    off += al128(32 * (RP + 8) * sz);
    l.cs = off;
    off += al128(32 * 68 * 4);
    l.bufa = off;
    off += conv_bytes(32, 64, xdt, 1, ct);
    l.bufb = off;
    off += conv_bytes(RP, 64, ddt, 1, ct);
    l.bufu = off;
    off += conv_bytes(64, RP, udt, 1, ct);
    l.st1 = pipe_stage_bytes(32, 64, xdt, RP, 64, ddt);
    l.st2 = raw_bytes(64, RP, udt) + (ydt >= 0 ? raw_bytes(32, 64, ydt) : 0);
    l.stages = off;
    off += S * (l.st1 > l.st2 ? l.st1 : l.st2);
    l.total = off;
    return l;
}

template <typename CT, int RP>
__global__ __launch_bounds__(NT) void k2_bypass_fwd(lk_bypass_fwd_args a, i64 tiles_per_split, int S) {
    const int BT = 32, BNO = 64, LDH = RP + 8, LDC = 68, NI = RP / 32, NI2 = 2;
    extern __shared__ __align__(16) char dsm[];
    const lk_locon &L = a.L;
    const int ydt = a.y0.p ? a.y0.dt : -1;
    const bf2_layout ly = bf2_plan(RP, ct_of<CT>::dt, a.x.dt, L.D.dt, L.U.dt, ydt, S);
    CT *hs = (CT *)(dsm + ly.hs), *bufa = (CT *)(dsm + ly.bufa), *bufb = (CT *)(dsm + ly.bufb), *bufu = (CT *)(dsm + ly.bufu);
    float *Cs = (float *)(dsm + ly.cs);
    char *stages = dsm + ly.stages;
    const i64 t0 = (i64)blockIdx.x * BT;
    const int warp = threadIdx.x >> 5, m0 = (warp % 2) * 16, n0 = (warp / 2) * (RP / 4), n2 = (warp / 2) * 16;
    const float c = (float)(L.s * L.m) * sigma_ct<CT>(L.sigma);

    /* phase 1: h = RN_CT(q ⊙ (x·Dᵀ)) */
    {
        float acc[1][NI][4];
        acc_zero(acc);
        pipe_op A = {a.x, t0, 0, 0, 64, 1}, B = {L.D, 0, 0, 0, 64, 1};
        piped_mma<CT, 32, 64, RP, 64, false, false, 1, NI>(acc, A, B, (int)cdiv(L.IK, 64), S, stages, bufa, bufb, m0, n0,
                                                          a.x, false);
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = acc_row(m0, 0, e), i = acc_col(n0, ni, e);
                const float q = i < L.r ? vget(L.mask, i, 1.0f) : 0.0f;
                hs[row * LDH + i] = ct_of<CT>::from(q * acc[0][ni][e]);
            }
    }
    __syncthreads();

    /* phase 2: y = y0 + c·h·Uᵀ */
    const i64 ntile = cdiv(L.O, BNO), ob = (i64)blockIdx.y * tiles_per_split;
    const int nk = (int)((ob + tiles_per_split < ntile ? ob + tiles_per_split : ntile) - ob);
    const int SU = raw_bytes(64, RP, L.U.dt), py = ydt >= 0 ? raw_pitch(64, ydt) : 0;
    const int SS = ly.st1 > ly.st2 ? ly.st1 : ly.st2;
    const int kk = sizeof(CT) == 2 ? (int)((L.r + 15) / 16 * 16) : (int)L.r;
    const bool cmY = v_colmajor(a.y);
    for (int s = 0; s < S - 1 + nk; s++) {
        const int k = s - (S - 1), n = s;
        if (k >= 0) {
            cp_wait(S - 2);
            __syncthreads();
            char *stg = stages + (k % S) * SS;
            CT *up[3];
            int ldu;
            raw_operand<CT, 64, RP>(stg, L.U.dt, 1, bufu, up, &ldu);
            __syncthreads();
            if (n < nk) {
                char *sn = stages + (n % S) * SS;
                raw_issue<64, RP>(sn, L.U, (ob + n) * BNO, 0);
                if (ydt >= 0) raw_issue<32, 64>(sn + SU, a.y0, t0, (ob + n) * BNO);
            }
            cp_commit();
            float acc[1][NI2][4];
            acc_zero(acc);
            warp_mma<CT, 1, NI2, false, false>::run(acc, hs, LDH, up[0], ldu, m0, n2, kk);
            acc_to_smem(acc, Cs, LDC, m0, n2, (const float *)NULL);
            __syncthreads();
            const i64 o0 = (ob + k) * BNO;
            for (int q = threadIdx.x; q < BT * BNO / 8; q += NT) {
                int rr, cc;
                chunk_pos<BT, BNO>(q, cmY, rr, cc);
                float o8[8];
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float d = Cs[rr * LDC + cc + e];
                    o8[e] = ydt >= 0 ? fmaf(c, d, rnd_ct<CT>(raw_get(stg + SU, py, ydt, rr, cc + e))) : c * d;
                }
                vstore8(a.y, t0 + rr, o0 + cc, o8);
            }
        } else {
            if (n < nk) {
                char *sn = stages + (n % S) * SS;
                raw_issue<64, RP>(sn, L.U, (ob + n) * BNO, 0);
                if (ydt >= 0) raw_issue<32, 64>(sn + SU, a.y0, t0, (ob + n) * BNO);
            }
            cp_commit();
        }
    }
    cp_wait(0);
}

/* ---- merge backward d_up partials, plain Γ (no DoRA): G and D streamed 64 columns a step ---- */
__host__ __device__ static inline int md2_smem(int NR, int ct, int gdt, int ddt, int S, int *bufa, int *bufb, int *stages) {
    int off = 0;
    *bufa = off;
    off += conv_bytes(32, 64, gdt, 1, ct);
    *bufb = off;
    off += conv_bytes(NR, 64, ddt, 1, ct);
    *stages = off;
    off += S * pipe_stage_bytes(32, 64, gdt, NR, 64, ddt);
    return off;
}

template <typename CT, int NR>
__global__ __launch_bounds__(NT) void k2_merge_dup(lk_merge_bwd_args a, float *part, i64 kper, i64 RP, int S) {
    const int NI = NR / 32;
    extern __shared__ __align__(16) char dsm[];
    int ob, oB, os;
    md2_smem(NR, ct_of<CT>::dt, a.G.dt, a.L.D.dt, S, &ob, &oB, &os);
    const i64 O = a.L.O, IK = a.L.IK;
    const i64 o0 = (i64)blockIdx.x * 32, i0 = (i64)blockIdx.y * NR, jb = (i64)blockIdx.z * kper;
    const i64 je = jb + kper < IK ? jb + kper : IK;
    const int warp = threadIdx.x >> 5, m0 = (warp % 2) * 16, n0 = (warp / 2) * (NR / 4);
    float acc[1][NI][4];
    acc_zero(acc);
    pipe_op A = {a.G, o0, jb, 0, 64, 1}, B = {a.L.D, i0, jb, 0, 64, 1};
    const int nk = jb < je ? (int)cdiv(je - jb, 64) : 0;
    piped_mma<CT, 32, 64, NR, 64, false, false, 1, NI>(acc, A, B, nk, S, dsm + os, (CT *)(dsm + ob), (CT *)(dsm + oB), m0, n0,
                                                      a.G, false);
#pragma unroll
    for (int ni = 0; ni < NI; ni++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            i64 o = o0 + acc_row(m0, 0, e), i = i0 + acc_col(n0, ni, e);
            if (o < O) part[((i64)blockIdx.z * O + o) * RP + i] = acc[0][ni][e];
        }
}

/* ---- reductions over rows, B plain: C[i][n] = Σ_k A[k][i]·B[k][n], 32 rows a step ---- */
__host__ __device__ static inline int kr2_smem(int NR, int ct, int adt, int npa, int bdt, int S, int *bufa, int *bufb, int *stages) {
    int off = 0;
    *bufa = off;
    off += conv_bytes(32, NR, adt, npa, ct);
    *bufb = off;
    off += conv_bytes(32, 64, bdt, 1, ct);
    *stages = off;
    off += S * pipe_stage_bytes(32, NR, adt, 32, 64, bdt);
    return off;
}

template <typename CT, int NR> __global__ __launch_bounds__(NT) void k2_kred(kred_args p, int S) {
    const int BN = 64, WM = NR >= 64 ? 4 : 2, WN = 8 / WM, MI = NR / WM / 16, NI = BN / WN / 8;
    extern __shared__ __align__(16) char dsm[];
    const int npa = p.a_split ? nsplit<CT>::n : 1;
    int oa, ob, os;
    kr2_smem(NR, ct_of<CT>::dt, p.A.dt, npa, p.B.dt, S, &oa, &ob, &os);
    const i64 n0 = (i64)blockIdx.x * BN, i0 = (i64)blockIdx.y * NR, kb = (i64)blockIdx.z * p.kper;
    const i64 ke = kb + p.kper < p.Kd ? kb + p.kper : p.Kd;
    const int warp = threadIdx.x >> 5, m0 = (warp % WM) * (NR / WM), nw = (warp / WM) * (BN / WN);
    float acc[MI][NI][4];
    acc_zero(acc);
    pipe_op A = {p.A, kb, i0, 32, 0, npa}, B = {p.B, kb, n0, 32, 0, 1};
    const int nk = kb < ke ? (int)cdiv(ke - kb, 32) : 0;
    piped_mma<CT, 32, NR, 32, BN, true, true, MI, NI>(acc, A, B, nk, S, dsm + os, (CT *)(dsm + oa), (CT *)(dsm + ob), m0, nw,
                                                     p.B, false);
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                i64 i = i0 + acc_row(m0, mi, e), n = n0 + acc_col(nw, ni, e);
                if (n < p.N) p.part[((i64)blockIdx.z * p.RP + i) * p.N + n] = acc[mi][ni][e];
            }
}

/* ---- bypass backward token tiles: gh (dy and U streamed over O, dy0 written from the dy
   stages), h (x and D streamed over I) ---- */
__host__ __device__ static inline int bh2_smem(int NR, int ct, int ydt, int udt, int xdt, int ddt, int S, int *bufa, int *bufb,
                                               int *stages) {
    int ca = conv_bytes(32, 64, ydt, 1, ct), cx = conv_bytes(32, 64, xdt, 1, ct);
    int cu = conv_bytes(64, NR, udt, 1, ct), cd = conv_bytes(NR, 64, ddt, 1, ct);
    int sa = pipe_stage_bytes(32, 64, ydt, 64, NR, udt), sb = pipe_stage_bytes(32, 64, xdt, NR, 64, ddt);
    int off = 0;
    *bufa = off;
    off += ca > cx ? ca : cx;
    *bufb = off;
    off += cu > cd ? cu : cd;
    *stages = off;
    off += S * (sa > sb ? sa : sb);
    return off;
}

template <typename CT, int NR>
__global__ __launch_bounds__(NT) void k2_bb_h(lk_bypass_bwd_args a, CT *hsc, float *ghsc, float *sigpart, i64 RP, int S) {
    const int NI = NR / 32;
    extern __shared__ __align__(16) char dsm[];
    __shared__ float red[NT / 32];
    int oa, ob, os;
    const lk_locon &L = a.L;
    bh2_smem(NR, ct_of<CT>::dt, a.dy.dt, L.U.dt, a.x.dt, L.D.dt, S, &oa, &ob, &os);
    const i64 t0 = (i64)blockIdx.x * 32;
    const int warp = threadIdx.x >> 5, m0 = (warp % 2) * 16, n0 = (warp / 2) * (NR / 4);
    const float sm = (float)(L.s * L.m), c = sm * sigma_ct<CT>(L.sigma);
    float sp = 0.0f;
    for (i64 i0 = 0; i0 < L.r; i0 += NR) {
        float accG[1][NI][4], accH[1][NI][4];
        acc_zero(accG);
        acc_zero(accH);
        pipe_op A1 = {a.dy, t0, 0, 0, 64, 1}, B1 = {L.U, 0, i0, 64, 0, 1};
        piped_mma<CT, 32, 64, 64, NR, false, true, 1, NI>(accG, A1, B1, (int)cdiv(L.O, 64), S, dsm + os, (CT *)(dsm + oa),
                                                         (CT *)(dsm + ob), m0, n0, a.dy0, i0 == 0 && a.dy0.p != NULL);
        pipe_op A2 = {a.x, t0, 0, 0, 64, 1}, B2 = {L.D, i0, 0, 0, 64, 1};
        piped_mma<CT, 32, 64, NR, 64, false, false, 1, NI>(accH, A2, B2, (int)cdiv(L.IK, 64), S, dsm + os, (CT *)(dsm + oa),
                                                          (CT *)(dsm + ob), m0, n0, a.x, false);
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                i64 t = t0 + acc_row(m0, 0, e), i = i0 + acc_col(n0, ni, e);
                float q = i < L.r ? vget(L.mask, i, 1.0f) : 0.0f;
                float g0 = accG[0][ni][e], h0 = accH[0][ni][e];
                if (t < a.T) {
                    ghsc[t * RP + i] = rnd_ct<CT>(c * q * g0); /* gh rounded as eager stores it (§1.6) */
                    hsc[t * RP + i] = ct_of<CT>::from(q * h0);
                    sp = fmaf(sm * q * g0, h0, sp);
                }
            }
    }
    if (sigpart) {
        float s = block_sum(sp, red);
        if (threadIdx.x == 0) sigpart[blockIdx.x] = s;
    }
}

/* =============================================================================================
 * launchers
 * =========================================================================================== */
/* Scratch carved in 256-byte aligned pieces from one stream-ordered allocation. */
struct carve {
    size_t off;
    char *base;
};
static size_t carve_take(carve &cv, size_t bytes) {
    size_t at = cv.off;
    cv.off += (bytes + 255) / 256 * 256;
    return at;
}

static int rank_tile(i64 r) { return r <= 32 ? 32 : r <= 64 ? 64 : 128; }

/* split count over a reduction of length Kd in steps of `step`, so that ~256 blocks run;
   a function of the shape only (deterministic across devices) */
/* The column ranges d_up's partial sums are split into must be whole multiples of the column step
   of every kernel that may consume them: k2_merge_dup walks 64 columns a step whatever CT is
   (k_merge_dup 32 or 64). A step of 32 for fp32 let a range of 96 columns be walked as 128,
   counting the next range's first 32 columns twice. */
#define DUP_SPLIT_STEP 64

/* Tuning knobs read from the environment at each launch (experiments only; the defaults are the shipped
   behaviour): LYCO_CUDA_SPLIT_BLOCKS, the block count the split reductions aim for (256), and
   LYCO_CUDA_BLOCKS_PER_SM, the blocks per multiprocessor the pipelined kernels size their stages
   for (2). The H200 profile of merge backward (k2_merge_dup / k2_kred: 23% occupancy, DRAM 16%,
   ~256 blocks) asks whether more, shallower blocks help; the bench answers it. */
static int env_knob(const char *name, int dflt, int lo, int hi) {
    const char *v = getenv(name);
    int x = v && *v ? atoi(v) : dflt;
    return x < lo || x > hi ? dflt : x;
}

static void choose_split(i64 tiles, i64 Kd, i64 step, int *z, i64 *kper) {
    const int target = env_knob("LYCO_CUDA_SPLIT_BLOCKS", 256, 1, 1 << 20);
    i64 zz = cdiv(target, tiles > 0 ? tiles : 1);
    i64 maxz = cdiv(Kd > 0 ? Kd : 1, 4 * step);
    if (zz > maxz) zz = maxz;
    if (zz > 16) zz = 16;
    if (zz < 1) zz = 1;
    i64 kp = cdiv(cdiv(Kd > 0 ? Kd : 1, zz), step) * step;
    *kper = kp;
    *z = (int)cdiv(Kd > 0 ? Kd : 1, kp);
}

static lk_view scratch_view(const void *p, i64 rows, i64 cols, int dt) {
    lk_view v;
    v.p = p;
    v.s0 = cols;
    v.s1 = 1;
    v.rows = rows;
    v.cols = cols;
    v.dt = dt;
    v.flags = ((cols * (dt == DT_F32 ? 4 : 2)) % 16 == 0) ? LK_VEC : 0;
    return v;
}

/* Stages for a kernel needing fixed + S·stage bytes: the deepest S ≤ Smax that lets two blocks
   share a multiprocessor, else the deepest that fits one; 0 = does not fit (use the fallback). */
static int choose_stages(const lk_device *dev, int fixed, int stage, int Smax) {
    const int per_sm = env_knob("LYCO_CUDA_BLOCKS_PER_SM", 2, 1, 8);
    const int two = dev->smem_sm / per_sm - 2048;
    for (int S = Smax; S >= 2; S--)
        if (fixed + S * stage <= two && fixed + S * stage <= dev->smem_optin) return S;
    for (int S = Smax; S >= 2; S--)
        if (fixed + S * stage <= dev->smem_optin) return S;
    return 0;
}

template <typename CT, int RP> static int merge_fwd_fast(const lk_merge_fwd_args *a, const float *st, const lk_device *dev,
                                                          cudaStream_t s, bool *done) {
    const lk_locon &L = a->L;
    const bool hasW = a->W.p != NULL;
    const int wdt = hasW ? a->W.dt : DT_F32, ct = ct_of<CT>::dt;
    const int fixed = mf2_plan(RP, ct, wdt, hasW, L.D.dt, 0).total, stage = mf2_plan(RP, ct, wdt, hasW, L.D.dt, 1).total - fixed;
    const int S = choose_stages(dev, fixed, stage, 4);
    *done = false;
    if (S < 2) return LYCO_OK;
    const int bytes = fixed + S * stage;
    LK_SMEM_OPTIN(bytes, k2_merge_fwd<CT, RP>);
    const i64 gy = cdiv(L.O, 64), nj = cdiv(L.IK, 128);
    i64 gx = cdiv(512, gy);
    if (gx > nj) gx = nj;
    if (gx < 1) gx = 1;
    k2_merge_fwd<CT, RP><<<dim3((unsigned)gx, (unsigned)gy), NT, bytes, s>>>(*a, st, S);
    LK_LAUNCHED("merge_fwd (pipelined)");
    *done = true;
    return LYCO_OK;
}

/* ---- lowrank.cu's streaming kernels (merge forward with or without DoRA; linear bypass forward).
   *done = false leaves the call to the kernels of this file (LYCO_CUDA_LOWRANK_LEGACY=1, r > 128,
   grid or shared-memory limits). ---- */
static bool lowrank_legacy() { return getenv("LYCO_CUDA_LOWRANK_LEGACY") != NULL; }

/* lowrank.cu's expand over ΔW̄ = U·D on the merge side: base W, rowc = s·σs·q_o, multiplier m,
   DoRA as given (out left for the caller) — the merge forward's and DoRA backward's shared args */
static lk_expand_args merge_expand_args(const lk_locon &L, const lk_dora &dora, const lk_view &W, int mode) {
    lk_expand_args e;
    memset(&e, 0, sizeof e);
    e.ct = L.ct;
    e.M = L.O;
    e.N = L.IK;
    e.r = L.r;
    e.P = L.U;
    e.Q = L.D;
    e.base = W;
    e.rowmask = L.mask;
    e.sigma = L.sigma;
    e.row_scale = L.s;
    e.sig_in_row = 1;
    e.mult = L.m;
    e.mode = mode;
    e.dora = dora;
    e.K = L.K;
    return e;
}

static int merge_fwd_lowrank(const lk_merge_fwd_args *a, const lk_device *dev, cudaStream_t s, bool *done) {
    const lk_locon &L = a->L;
    *done = false;
    if (lowrank_legacy()) return LYCO_OK;
    lk_expand_args e = merge_expand_args(L, a->dora, a->W, a->mode);
    e.out = a->out;
    if (!lk_expand_fits(&e, dev)) return LYCO_OK;
    *done = true;
    return lk_expand_merge(&e, dev, s);
}

static int bypass_fwd_lowrank(const lk_bypass_fwd_args *a, const lk_device *dev, cudaStream_t s, bool *done) {
    const lk_locon &L = a->L;
    *done = false;
    const i64 rp = lk_reduce_rank_tile(L.r);
    if (lowrank_legacy() || rp == 0) return LYCO_OK;
    const int es = L.ct == DT_F32 ? 4 : 2;
    lk_expand_args e;
    memset(&e, 0, sizeof e);
    e.ct = L.ct;
    e.M = a->T;
    e.N = L.O;
    e.r = L.r;
    e.P = scratch_view(NULL, a->T, L.r, L.ct); /* h, T × r with row pitch rp: filled in below */
    e.P.s0 = rp;
    e.P.flags = (rp * es) % 16 == 0 ? LK_VEC : 0;
    e.Q = L.U;
    e.q_t = 1;
    e.base = a->y0;
    e.out = a->y;
    e.sigma = L.sigma;
    e.row_scale = 1.0;
    e.mult = L.s * L.m;
    e.sig_in_mult = 1;
    e.mode = a->y0.p ? 0 : 1;
    e.K = 1;
    if (!lk_expand_fits(&e, dev)) return LYCO_OK;
    *done = true;
    void *h = NULL;
    int rc = lk_scratch_alloc(&h, (size_t)(a->T * rp * es), s);
    if (rc) return rc;
    e.P.p = h;
    rc = lk_reduce_h(L.ct, &a->x, &L.D, &L.mask, a->T, L.IK, L.r, h, rp, dev, s);
    if (rc == LYCO_OK) rc = lk_expand(&e, dev, s);
    int rf = lk_scratch_free(h, s);
    return rc ? rc : rf;
}

template <typename CT> static int merge_fwd_t(const lk_merge_fwd_args *a, const lk_device *dev, cudaStream_t s) {
    const lk_locon &L = a->L;
    float *st = NULL;
    void *ws = NULL;
    int rc = LYCO_OK;
    if (cdiv(L.O, 64) > 65535) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: O = %lld is too large for the merge grid", (long long)L.O);
    if (a->dora.on) {
        if ((rc = lk_scratch_alloc(&ws, (size_t)dora_ws_floats(L.O, L.IK, L.K, a->dora.on_out) * 4, s))) return rc;
        lk_view none = {};
        rc = dora_stats<CT, locon_delta>(L, a->dora, a->W, none, (float *)ws, &st, s);
    }
    bool done = false;
    if (rc == LYCO_OK && L.r <= 32) rc = merge_fwd_fast<CT, 32>(a, st, dev, s, &done);
    else if (rc == LYCO_OK && L.r <= 64) rc = merge_fwd_fast<CT, 64>(a, st, dev, s, &done);
    else if (rc == LYCO_OK && L.r <= 128) rc = merge_fwd_fast<CT, 128>(a, st, dev, s, &done);
    if (rc == LYCO_OK && !done) {
        dim3 grid((unsigned)cdiv(L.IK, 128), (unsigned)cdiv(L.O, 64));
        k_merge_fwd<CT><<<grid, NT, 0, s>>>(*a, st);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) rc = lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of merge_fwd failed: %s", cudaGetErrorString(e));
    }
    int rf = lk_scratch_free(ws, s);
    return rc ? rc : rf;
}

template <typename CT, int NR> static int launch_dup(const lk_merge_bwd_args *a, const float *st, float *part, int z, i64 kper,
                                              i64 RP, int nch, cudaStream_t s) {
    dim3 grid((unsigned)cdiv(a->L.O, 32), (unsigned)nch, (unsigned)z);
    k_merge_dup<CT, NR><<<grid, NT, 0, s>>>(*a, st, part, kper, RP);
    LK_LAUNCHED("merge_dup");
    return LYCO_OK;
}

template <typename CT, int NR> static int launch_dup2_nr(const lk_merge_bwd_args *a, float *part, int z, i64 kper, i64 RP, int nch,
                                                          const lk_device *dev, cudaStream_t s, bool *done) {
    int oa, ob, os;
    const int ct = ct_of<CT>::dt;
    const int fixed = md2_smem(NR, ct, a->G.dt, a->L.D.dt, 0, &oa, &ob, &os);
    const int stage = md2_smem(NR, ct, a->G.dt, a->L.D.dt, 1, &oa, &ob, &os) - fixed;
    const int S = choose_stages(dev, fixed, stage, 4);
    *done = false;
    if (S < 2) return LYCO_OK;
    const int bytes = fixed + S * stage;
    LK_SMEM_OPTIN(bytes, k2_merge_dup<CT, NR>);
    dim3 grid((unsigned)cdiv(a->L.O, 32), (unsigned)nch, (unsigned)z);
    k2_merge_dup<CT, NR><<<grid, NT, bytes, s>>>(*a, part, kper, RP, S);
    LK_LAUNCHED("merge_dup (pipelined)");
    *done = true;
    return LYCO_OK;
}

template <typename CT> static int launch_dup2(const lk_merge_bwd_args *a, float *part, int z, i64 kper, i64 RP, int nch, int NR,
                                              const lk_device *dev, cudaStream_t s, bool *done) {
    if (NR == 32) return launch_dup2_nr<CT, 32>(a, part, z, kper, RP, nch, dev, s, done);
    if (NR == 64) return launch_dup2_nr<CT, 64>(a, part, z, kper, RP, nch, dev, s, done);
    return launch_dup2_nr<CT, 128>(a, part, z, kper, RP, nch, dev, s, done);
}

template <typename CT, int NR> static int launch_kred2(const kred_args &p, int nch, int z, const lk_device *dev, cudaStream_t s,
                                                       bool *done) {
    int oa, ob, os;
    const int ct = ct_of<CT>::dt, npa = p.a_split ? nsplit<CT>::n : 1;
    const int fixed = kr2_smem(NR, ct, p.A.dt, npa, p.B.dt, 0, &oa, &ob, &os);
    const int stage = kr2_smem(NR, ct, p.A.dt, npa, p.B.dt, 1, &oa, &ob, &os) - fixed;
    const int S = choose_stages(dev, fixed, stage, 4);
    *done = false;
    if (S < 2) return LYCO_OK;
    const int bytes = fixed + S * stage;
    LK_SMEM_OPTIN(bytes, k2_kred<CT, NR>);
    dim3 grid((unsigned)cdiv(p.N, 64), (unsigned)nch, (unsigned)z);
    k2_kred<CT, NR><<<grid, NT, bytes, s>>>(p, S);
    LK_LAUNCHED("kred (pipelined)");
    *done = true;
    return LYCO_OK;
}

template <typename CT, int NR> static int launch_kred(const kred_args &p, int nch, int z, cudaStream_t s) {
    const int BN = sizeof(CT) == 2 ? 64 : 32;
    dim3 grid((unsigned)cdiv(p.N, BN), (unsigned)nch, (unsigned)z);
    k_kred<CT, NR><<<grid, NT, 0, s>>>(p);
    LK_LAUNCHED("kred");
    return LYCO_OK;
}

template <typename CT> static int kred_any(const kred_args &p, int NR, int nch, int z, cudaStream_t s) {
    if (NR == 32) return launch_kred<CT, 32>(p, nch, z, s);
    if (NR == 64) return launch_kred<CT, 64>(p, nch, z, s);
    return launch_kred<CT, 128>(p, nch, z, s);
}

/* kred + finalise into out (r × N, or N × r when transpose) */
template <typename CT>
static int reduce_rows(kred_args p, i64 Kd, i64 N, const lk_locon &L, const lk_view &out, int transpose, float coef, bool with_sigma,
                carve &cv, const lk_device *dev, cudaStream_t s) {
    const int NR = rank_tile(L.r), nch = (int)cdiv(L.r, NR), BN = sizeof(CT) == 2 ? 64 : 32;
    const bool plainB = p.b_mode == 0 || (p.b_mode == 1 && !L.mask.p);
    int z;
    i64 kper;
    choose_split(cdiv(N, plainB ? 64 : BN) * nch, Kd, 32, &z, &kper);
    p.Kd = Kd;
    p.N = N;
    p.kper = kper;
    p.RP = (i64)nch * NR;
    p.L = L;
    lk_view sg = with_sigma ? L.sigma : lk_view{};
    if (plainB && !lowrank_legacy() && lk_reduce_rank_tile(L.r) != 0) /* lowrank.cu: short-lived blocks, more of them */
        return lk_colreduce(L.ct, &p.B, &p.A, p.a_split, Kd, N, L.r, &out, transpose, coef, &sg, dev, s);
    p.part = (float *)(cv.base + carve_take(cv, (size_t)z * p.RP * N * 4));
    bool done = false;
    int rc = LYCO_OK;
    if (plainB) {
        kred_args q = p;
        if (q.b_mode == 1) q.b_mode = 0;   /* Γ = RN(G): the staged G itself */
        if (NR == 32) rc = launch_kred2<CT, 32>(q, nch, z, dev, s, &done);
        else if (NR == 64) rc = launch_kred2<CT, 64>(q, nch, z, dev, s, &done);
        else rc = launch_kred2<CT, 128>(q, nch, z, dev, s, &done);
        if (rc) return rc;
    }
    if (!done && (rc = kred_any<CT>(p, NR, nch, z, s))) return rc;
    i64 n = L.r * N;
    k_fin_kred<<<(unsigned)cdiv(n, NT), NT, 0, s>>>(p.part, z, p.RP, N, L.r, out, transpose, coef, sg, L.ct);
    LK_LAUNCHED("fin_kred");
    return LYCO_OK;
}

static size_t reduce_rows_bytes(const lk_locon &L, i64 Kd, i64 N, int ct, bool plainB) {
    if (plainB && !lowrank_legacy() && lk_reduce_rank_tile(L.r) != 0) return 0; /* lk_colreduce allocates its own */
    const int NR = rank_tile(L.r), nch = (int)cdiv(L.r, NR), BN = ct == DT_F32 && !plainB ? 32 : 64;
    int z;
    i64 kper;
    choose_split(cdiv(N, BN) * nch, Kd, 32, &z, &kper);
    return ((size_t)z * nch * NR * N * 4 + 255) / 256 * 256;
}

/* d_up = Σ_z partials × the scalars (k_fin_dup) and, when wanted, dσs from the blocks' partials
   (sigpart carved from cv, summed in block order) — the finaliser of every d_up path below */
static int fin_dup_launch(const lk_merge_bwd_args *a, const float *part, int z, i64 rp, carve &cv, cudaStream_t s) {
    const i64 nb = cdiv(a->L.O * a->L.r, NT);
    float *sigpart = a->gsigma.p ? (float *)(cv.base + carve_take(cv, (size_t)nb * 4)) : NULL;
    k_fin_dup<<<(unsigned)nb, NT, 0, s>>>(*a, part, z, rp, sigpart);
    LK_LAUNCHED("fin_dup");
    if (sigpart) {
        k_sum<<<1, NT, 0, s>>>(sigpart, nb, a->gsigma);
        LK_LAUNCHED("sum");
    }
    return LYCO_OK;
}

/* d_up (and dσs) and d_down from one read of Γ (merge_bwd_onepass.cu) when both are wanted and
   neither DoRA nor a rank mask is on; *done = false: not taken (nothing launched). The finalisers
   are the two-pass path's: k_fin_dup over the Γ·Dᵀ partials, lk_colfin over the Uᵀ·Γ partials. */
static int merge_bwd_onepass(const lk_merge_bwd_args *a, carve &cv, const lk_device *dev, cudaStream_t s, bool *done) {
    const lk_locon &L = a->L;
    *done = false;
    if (a->dora.on || L.mask.p || !a->gD.p || !(a->gU.p || a->gsigma.p) || lowrank_legacy()) return LYCO_OK;
    float *pu = NULL, *pd = NULL;
    int64_t zu = 0, zd = 0, rp = 0;
    int taken = 0;
    int rc = lk_merge_bwd_onepass(L.ct, &a->G, &L.U, &L.D, L.O, L.IK, L.r, &pu, &zu, &pd, &zd, &rp, dev, s, &taken);
    if (rc == LYCO_OK && taken) {
        *done = true;
        rc = fin_dup_launch(a, pu, (int)zu, rp, cv, s);
        if (rc == LYCO_OK)
            rc = lk_colfin(pd, zd, L.IK, rp, L.r, &a->gD, 0, (float)L.s * (float)L.m, &L.sigma, L.ct, s);
    }
    const int rf1 = pu ? lk_scratch_free(pu, s) : LYCO_OK, rf2 = pd ? lk_scratch_free(pd, s) : LYCO_OK;
    return rc ? rc : rf1 ? rf1 : rf2;
}

template <typename CT> static int merge_bwd_body(const lk_merge_bwd_args *a, carve &cv, const lk_device *dev, cudaStream_t s) {
    const lk_locon &L = a->L;
    bool done = false;
    const int NR = rank_tile(L.r), nch = (int)cdiv(L.r, NR);
    const i64 RP = (i64)nch * NR;
    const int BK = DUP_SPLIT_STEP;
    float *st = NULL;
    int rc;
    if ((rc = merge_bwd_onepass(a, cv, dev, s, &done)) || done) return rc;
    if (a->dora.on) {
        float *ws = (float *)(cv.base + carve_take(cv, (size_t)dora_ws_floats(L.O, L.IK, L.K, a->dora.on_out) * 4));
        if ((rc = dora_stats<CT, locon_delta>(L, a->dora, a->W, a->G, ws, &st, s))) return rc;
    }
    if ((a->gU.p || a->gsigma.p) && !a->dora.on && !lowrank_legacy() && lk_reduce_rank_tile(L.r) != 0) {
        /* Γ·Dᵀ through lowrank.cu's split reduction; the scalars, the row mask and σs's gradient as below */
        const i64 rp = lk_reduce_rank_tile(L.r);
        float *part = NULL;
        int64_t z = 0;
        rc = lk_reduce_parts(L.ct, &a->G, &L.D, 0, L.O, L.IK, rp, &part, &z, dev, s);
        if (rc == LYCO_OK) rc = fin_dup_launch(a, part, (int)z, rp, cv, s);
        const int rf = part ? lk_scratch_free(part, s) : LYCO_OK;
        if (rc || rf) return rc ? rc : rf;
    } else if (a->gU.p || a->gsigma.p) {
        int z;
        i64 kper;
        choose_split(cdiv(L.O, 32) * nch, L.IK, BK, &z, &kper);
        float *part = (float *)(cv.base + carve_take(cv, (size_t)z * L.O * RP * 4));
        if (!a->dora.on && (rc = launch_dup2<CT>(a, part, z, kper, RP, nch, NR, dev, s, &done))) return rc;
        if (done) rc = LYCO_OK;
        else if (NR == 32) rc = launch_dup<CT, 32>(a, st, part, z, kper, RP, nch, s);
        else if (NR == 64) rc = launch_dup<CT, 64>(a, st, part, z, kper, RP, nch, s);
        else rc = launch_dup<CT, 128>(a, st, part, z, kper, RP, nch, s);
        if (rc) return rc;
        if ((rc = fin_dup_launch(a, part, z, RP, cv, s))) return rc;
    }
    if (a->gD.p) {
        kred_args p = {};
        p.A = L.U;
        p.a_split = 0;
        p.B = a->G;
        p.b_mode = a->dora.on ? 2 : 1;
        p.dora = a->dora;
        p.W = a->W;
        p.st = st;
        float coef = (float)L.s * (a->dora.on ? 1.0f : (float)L.m);
        if ((rc = reduce_rows<CT>(p, L.O, L.IK, L, a->gD, 0, coef, true, cv, dev, s))) return rc;
    }
    return LYCO_OK;
}

static size_t merge_bwd_bytes(const lk_merge_bwd_args *a) {
    const lk_locon &L = a->L;
    const int NR = rank_tile(L.r), nch = (int)cdiv(L.r, NR);
    const i64 RP = (i64)nch * NR;
    const int BK = DUP_SPLIT_STEP;
    size_t b = 0;
    if (a->dora.on) b += ((size_t)dora_ws_floats(L.O, L.IK, L.K, a->dora.on_out) * 4 + 255) / 256 * 256;
    if (a->gU.p || a->gsigma.p) {
        int z;
        i64 kper;
        choose_split(cdiv(L.O, 32) * nch, L.IK, BK, &z, &kper);
        if (a->dora.on || lowrank_legacy() || lk_reduce_rank_tile(L.r) == 0) /* else lowrank.cu allocates its own */
            b += ((size_t)z * L.O * RP * 4 + 255) / 256 * 256;
        b += ((size_t)cdiv(L.O * L.r, NT) * 4 + 255) / 256 * 256;
    }
    if (a->gD.p) b += reduce_rows_bytes(L, L.O, L.IK, L.ct, !a->dora.on && !L.mask.p);
    return b;
}

template <typename CT, int NR> static int bypass_fwd_nr(const lk_bypass_fwd_args *a, const lk_device *dev, cudaStream_t s,
                                                 char *why, size_t why_len) {
    typedef bypass_tiles<CT> BTL;
    const i64 nch = cdiv(a->L.r, NR), HP = nch * NR;
    size_t smem = BTL::smem(NR, HP);
    if (smem > (size_t)dev->smem_optin) {
        snprintf(why, why_len, "bypass rank %lld needs %zu bytes of shared memory per block; this device allows %d",
                 (long long)a->L.r, smem, dev->smem_optin);
        return LYCO_ERR_UNSUPPORTED;
    }
    LK_SMEM_OPTIN(smem, k_bypass_fwd<CT, NR>);
    const i64 ttiles = cdiv(a->T, BTL::BT), otiles = cdiv(a->L.O, BTL::BNO);
    i64 splits = 256 / ttiles;
    if (splits < 1) splits = 1;
    if (splits > otiles) splits = otiles;
    if (splits > 65535) splits = 65535;
    const i64 per = cdiv(otiles, splits);
    splits = cdiv(otiles, per);
    dim3 grid((unsigned)ttiles, (unsigned)splits);
    k_bypass_fwd<CT, NR><<<grid, NT, smem, s>>>(*a, HP, per);
    LK_LAUNCHED("bypass_fwd");
    return LYCO_OK;
}

template <typename CT, int RP> static int bypass_fwd_fast(const lk_bypass_fwd_args *a, const lk_device *dev, cudaStream_t s, bool *done) {
    const lk_locon &L = a->L;
    const int ct = ct_of<CT>::dt, ydt = a->y0.p ? a->y0.dt : -1;
    const int fixed = bf2_plan(RP, ct, a->x.dt, L.D.dt, L.U.dt, ydt, 0).total;
    const int stage = bf2_plan(RP, ct, a->x.dt, L.D.dt, L.U.dt, ydt, 1).total - fixed;
    const int S = choose_stages(dev, fixed, stage, 4);
    *done = false;
    if (S < 2) return LYCO_OK;
    const int bytes = fixed + S * stage;
    LK_SMEM_OPTIN(bytes, k2_bypass_fwd<CT, RP>);
    const i64 ttiles = cdiv(a->T, 32), otiles = cdiv(L.O, 64);
    i64 splits = 256 / ttiles;
    if (splits < 1) splits = 1;
    if (splits > otiles) splits = otiles;
    if (splits > 65535) splits = 65535;
    const i64 per = cdiv(otiles, splits);
    splits = cdiv(otiles, per);
    k2_bypass_fwd<CT, RP><<<dim3((unsigned)ttiles, (unsigned)splits), NT, bytes, s>>>(*a, per, S);
    LK_LAUNCHED("bypass_fwd (pipelined)");
    *done = true;
    return LYCO_OK;
}

template <typename CT> static int bypass_fwd_t(const lk_bypass_fwd_args *a, const lk_device *dev, cudaStream_t s, char *why, size_t wl) {
    int NR = rank_tile(a->L.r);
    bool done = false;
    int rc = bypass_fwd_lowrank(a, dev, s, &done);
    if (rc || done) return rc;
    if (NR == 32) rc = bypass_fwd_fast<CT, 32>(a, dev, s, &done);
    else if (NR == 64) rc = bypass_fwd_fast<CT, 64>(a, dev, s, &done);
    else if (a->L.r <= 128) rc = bypass_fwd_fast<CT, 128>(a, dev, s, &done);
    if (rc || done) return rc;
    if (NR == 32) return bypass_fwd_nr<CT, 32>(a, dev, s, why, wl);
    if (NR == 64) return bypass_fwd_nr<CT, 64>(a, dev, s, why, wl);
    return bypass_fwd_nr<CT, 128>(a, dev, s, why, wl);
}

template <typename CT, int NR> static int launch_bbh2(const lk_bypass_bwd_args *a, CT *hsc, float *ghsc, float *sigpart, i64 RP,
                                                      i64 tt, const lk_device *dev, cudaStream_t s, bool *done) {
    int oa, ob, os;
    const int ct = ct_of<CT>::dt;
    const int fixed = bh2_smem(NR, ct, a->dy.dt, a->L.U.dt, a->x.dt, a->L.D.dt, 0, &oa, &ob, &os);
    const int stage = bh2_smem(NR, ct, a->dy.dt, a->L.U.dt, a->x.dt, a->L.D.dt, 1, &oa, &ob, &os) - fixed;
    const int S = choose_stages(dev, fixed, stage, 4);
    *done = false;
    if (S < 2) return LYCO_OK;
    const int bytes = fixed + S * stage;
    LK_SMEM_OPTIN(bytes, k2_bb_h<CT, NR>);
    k2_bb_h<CT, NR><<<(unsigned)tt, NT, bytes, s>>>(*a, hsc, ghsc, sigpart, RP, S);
    LK_LAUNCHED("bb_h (pipelined)");
    *done = true;
    return LYCO_OK;
}

template <typename CT> static int bypass_bwd_body(const lk_bypass_bwd_args *a, carve &cv, const lk_device *dev, cudaStream_t s) {
    const lk_locon &L = a->L;
    const int NR = rank_tile(L.r), nch = (int)cdiv(L.r, NR);
    const i64 RP = (i64)nch * NR, T = a->T;
    const int ct = ct_of<CT>::dt;
    CT *hsc = (CT *)(cv.base + carve_take(cv, (size_t)T * RP * sizeof(CT)));
    /* gh = RN_CT(c·q ⊙ (dy·U)) (NUMERICS.md §1.6: the eager chain stores it in CT): fp32 storage of
       those values on the per-tile paths, CT storage (gh_dt = ct) on lowrank.cu's, where dx and
       d_down then take gh as one CT operand instead of CT parts */
    float *ghsc = (float *)(cv.base + carve_take(cv, (size_t)T * RP * 4));
    int gh_dt = DT_F32;
    const i64 tt = cdiv(T, 32);
    float *sigpart = a->gsigma.p ? (float *)(cv.base + carve_take(cv, (size_t)(tt > 0 ? tt : 1) * 4)) : NULL;
    if (T > 0) {
        /* gh, h, dy0 and the σs partials: lowrank.cu's split reductions (r ≤ 128), else per token tile */
        bool done = false;
        int rc0 = LYCO_OK;
        if (!lowrank_legacy() && lk_reduce_rank_tile(L.r) != 0 && tt <= 65535) {
            rc0 = lk_reduce_bypass_bwd(&L, &a->x, &a->dy, &a->dy0, T, ghsc, hsc, RP, sigpart, tt, dev, s);
            done = true;
            gh_dt = ct; /* gh written in CT (the values every path rounds to) */
        } else if (NR == 32) rc0 = launch_bbh2<CT, 32>(a, hsc, ghsc, sigpart, RP, tt, dev, s, &done);
        else if (NR == 64) rc0 = launch_bbh2<CT, 64>(a, hsc, ghsc, sigpart, RP, tt, dev, s, &done);
        else rc0 = launch_bbh2<CT, 128>(a, hsc, ghsc, sigpart, RP, tt, dev, s, &done);
        if (rc0) return rc0;
        if (!done) {
            if (NR == 32) k_bb_h<CT, 32><<<(unsigned)tt, NT, 0, s>>>(*a, hsc, ghsc, sigpart, RP);
            else if (NR == 64) k_bb_h<CT, 64><<<(unsigned)tt, NT, 0, s>>>(*a, hsc, ghsc, sigpart, RP);
            else k_bb_h<CT, 128><<<(unsigned)tt, NT, 0, s>>>(*a, hsc, ghsc, sigpart, RP);
            LK_LAUNCHED("bb_h");
        }
        if (a->dx.p) {
            /* dx = gh·D: lowrank.cu's expand with gh entering as CT parts (r ≤ 128), else k_bb_dx */
            lk_expand_args e;
            memset(&e, 0, sizeof e);
            e.ct = L.ct;
            e.M = T;
            e.N = L.IK;
            e.r = L.r;
            e.P = scratch_view(ghsc, T, RP, gh_dt);
            e.p_split = gh_dt == DT_F32;
            e.Q = L.D;
            e.out = a->dx;
            e.row_scale = 1.0;
            e.mult = 1.0;
            e.mode = 1; /* delta: out = 1·(gh·D) */
            e.K = 1;
            if (!lowrank_legacy() && lk_expand_fits(&e, dev)) {
                if ((rc0 = lk_expand(&e, dev, s))) return rc0;
            } else {
                const int BNC = sizeof(CT) == 2 ? 128 : 64;
                dim3 grid((unsigned)tt, (unsigned)cdiv(L.IK, BNC));
                k_bb_dx<CT><<<grid, NT, 0, s>>>(*a, scratch_view(ghsc, T, RP, DT_F32));
                LK_LAUNCHED("bb_dx");
            }
        }
    }
    if (a->gsigma.p) {
        k_sum<<<1, NT, 0, s>>>(sigpart, T > 0 ? tt : 0, a->gsigma);
        LK_LAUNCHED("sum");
    }
    int rc;
    if (a->gU.p) {
        kred_args p = {};
        p.A = scratch_view(hsc, T, RP, ct);
        p.B = a->dy;
        p.b_mode = 0;
        if ((rc = reduce_rows<CT>(p, T, L.O, L, a->gU, 1, (float)(L.s * L.m), true, cv, dev, s))) return rc;
    }
    if (a->gD.p) {
        kred_args p = {};
        p.A = scratch_view(ghsc, T, RP, gh_dt);
        p.a_split = gh_dt == DT_F32;
        p.B = a->x;
        p.b_mode = 0;
        if ((rc = reduce_rows<CT>(p, T, L.IK, L, a->gD, 0, 1.0f, false, cv, dev, s))) return rc;
    }
    return LYCO_OK;
}

static size_t bypass_bwd_bytes(const lk_bypass_bwd_args *a) {
    const lk_locon &L = a->L;
    const int NR = rank_tile(L.r), nch = (int)cdiv(L.r, NR);
    const i64 RP = (i64)nch * NR, T = a->T;
    size_t cts = L.ct == DT_F32 ? 4 : 2, b = 0;
    b += ((size_t)T * RP * cts + 255) / 256 * 256;
    b += ((size_t)T * RP * 4 + 255) / 256 * 256;
    if (a->gsigma.p) b += ((size_t)(cdiv(T, 32) > 0 ? cdiv(T, 32) : 1) * 4 + 255) / 256 * 256;
    if (a->gU.p) b += reduce_rows_bytes(L, T, L.O, L.ct, true);
    if (a->gD.p) b += reduce_rows_bytes(L, T, L.IK, L.ct, true);
    return b;
}


extern "C" int lk_locon_merge_fwd(const lk_merge_fwd_args *a, const lk_device *dev, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    /* r ≤ 16 without DoRA on row-major W/out: locon_merge_small.cu (FFMA, 38 vs 57 µs for lowrank.cu's
       general expand at 4096² r 8 on the H200) unless expand_lean.cu takes the call (everything in the
       16-bit compute dtype: 27.5 vs 44.8 µs); r ≤ 128 otherwise: lowrank.cu (lean or general); the
       rest: this file's kernels */
    int done = 0;
    int rc = lk_locon_merge_fwd_small(a, dev, stream, &done);
    if (rc || done) return rc;
    bool expanded = false;
    rc = merge_fwd_lowrank(a, dev, s, &expanded);
    if (rc || expanded) return rc;
    switch (a->L.ct) {
    case DT_BF16: return merge_fwd_t<bf16_t>(a, dev, s);
    case DT_F16: return merge_fwd_t<f16_t>(a, dev, s);
    default: return merge_fwd_t<float>(a, dev, s);
    }
}

/* DoRA's merge backward on the lean kernels: GV = ∂L/∂V = RN_CT(g·f − γ·V) written once to a CT
   scratch matrix (lowrank.cu's lk_dora_gv: the statistics launch, the statistics with
   ∂L/∂dora_scale, the GV launch), then the plain backward with Γ = GV and m' = 1 (its lean
   reductions). Before (H200, 4096² r32 bf16): ΔW recomputed and W, G read three times by the
   general kernels, 560 µs. *done = false (nothing launched): the kernels above take the call. */
static int merge_bwd_dora_lean(const lk_merge_bwd_args *a, const lk_device *dev, cudaStream_t s, bool *done) {
    const lk_locon &L = a->L;
    *done = false;
    if (lowrank_legacy() || L.ct == DT_F32 || lk_reduce_rank_tile(L.r) == 0) return LYCO_OK;
    const lk_expand_args e = merge_expand_args(L, a->dora, a->W, 0);
    lk_view gv = {};
    int lean = 0;
    int rc = lk_dora_gv(&e, &a->G, &gv, dev, s, &lean);
    if (lean) {
        *done = true;
        lk_merge_bwd_args b = *a;
        b.dora.on = 0;
        b.L.m = 1.0;
        b.G = gv;
        if (rc == LYCO_OK && (b.gU.p || b.gD.p || b.gsigma.p)) rc = lk_locon_merge_bwd(&b, dev, s);
    }
    const int rf = gv.p ? lk_scratch_free((void *)gv.p, s) : LYCO_OK;
    return rc ? rc : rf;
}

extern "C" int lk_locon_merge_bwd(const lk_merge_bwd_args *a, const lk_device *dev, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (cdiv(a->L.r, 128) > 65535 || cdiv(a->L.O, 32) > 2147483647LL)
        return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: merge backward grid too large");
    if (a->dora.on) {
        bool done = false;
        const int rd = merge_bwd_dora_lean(a, dev, s, &done);
        if (rd || done) return rd;
    }
    carve cv = {0, NULL};
    int rc = lk_scratch_alloc((void **)&cv.base, merge_bwd_bytes(a), s);
    if (rc) return rc;
    switch (a->L.ct) {
    case DT_BF16: rc = merge_bwd_body<bf16_t>(a, cv, dev, s); break;
    case DT_F16: rc = merge_bwd_body<f16_t>(a, cv, dev, s); break;
    default: rc = merge_bwd_body<float>(a, cv, dev, s); break;
    }
    int rf = lk_scratch_free(cv.base, s);
    return rc ? rc : rf;
}

extern "C" int lk_locon_bypass_fwd(const lk_bypass_fwd_args *a, const lk_device *dev, void *stream, char *why, size_t why_len) {
    cudaStream_t s = (cudaStream_t)stream;
    if (a->T == 0) return LYCO_OK;
    switch (a->L.ct) {
    case DT_BF16: return bypass_fwd_t<bf16_t>(a, dev, s, why, why_len);
    case DT_F16: return bypass_fwd_t<f16_t>(a, dev, s, why, why_len);
    default: return bypass_fwd_t<float>(a, dev, s, why, why_len);
    }
}

extern "C" int lk_locon_bypass_bwd(const lk_bypass_bwd_args *a, const lk_device *dev, void *stream, char *why, size_t why_len) {
    (void)why;
    (void)why_len;
    cudaStream_t s = (cudaStream_t)stream;
    carve cv = {0, NULL};
    int rc = lk_scratch_alloc((void **)&cv.base, bypass_bwd_bytes(a), s);
    if (rc) return rc;
    switch (a->L.ct) {
    case DT_BF16: rc = bypass_bwd_body<bf16_t>(a, cv, dev, s); break;
    case DT_F16: rc = bypass_bwd_body<f16_t>(a, cv, dev, s); break;
    default: rc = bypass_bwd_body<float>(a, cv, dev, s); break;
    }
    int rf = lk_scratch_free(cv.base, s);
    return rc ? rc : rf;
}
