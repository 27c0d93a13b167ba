/*
 * loha.cu — LoHa (ALGORITHMS.md §2.2) on the GPU: merge forward and backward (plain and Tucker,
 * linear and conv flattened to O × I·K, DoRA on both axes through merge_ep.cuh), the parameter
 * gradients of the bypass backward, and the Tucker pieces. The bypass forward and the bypass
 * backward's dx are in loha_bypass.cu.
 *
 *   ΔW̄[o, j] = ρ_o·R_1[o, j]·R_2[o, j],  R_t = Ā_t·B̄_t,  ρ_o = s'·q_o          (O × I·K)
 *   Tucker: Ā_t = A_tᵀ (a transposed view), B̄_t = P_t, P_t[i, c·K+κ] = Σ_j T_t[i,j,κ]·B_t[j,c]
 *           (k_loha_tucker_p: fp64 sums from CT-rounded operands, rounded once to fp32 scratch —
 *           what the CPU backend does; the generator uses P_t as is).
 * Every ΔW̄ element comes from loha_gen.cuh's tile generator: both r-term sums, the Hadamard
 * product and the scales in fp64, one rounding (see its header for why fp64).
 *
 * merge forward (k_loha_merge_fwd, one kernel; DoRA adds merge_ep.cuh's two statistics passes):
 *   the tile is generated in fp32 when the output is 16-bit and DoRA is off (r-long fp32 sums
 *   are ~1e-6 relative against bf16/fp16's 0.5 ULP of 2^-9 / 2^-11), else in fp64;
 *   LYCO_CUDA_LOHA_LEGACY=1: fp64 always.
 *   out = W + m·σs·ΔW̄ | m·σs·ΔW̄ | W − m·σs·ΔW̄ (merge_elem), or DoRA's V·f / W·(f−1) + dW·f.
 *   One 32×64 tile per block; W read once, out written once (in place allowed: each element is
 *   read and written by the same thread). Extra memory: none (DoRA: 2 sums + 3 statistics per
 *   row or column, fp32 scratch).
 *
 * merge backward (Γ = m·RN_CT(∂L/∂W''), or DoRA's ∂L/∂V; Γs = Γ·σs·ρ_o):
 *   G_R1 = Γs ⊙ R_2,  G_R2 = Γs ⊙ R_1,
 *   G_Ā_t = G_Rt·B̄_tᵀ (reduction over the I·K columns),  G_B̄_t = Ā_tᵀ·G_Rt (over the O rows),
 *   G_σs = Σ Γ ⊙ ΔW̄ (fp64 sum; 0 under the upstream merge scale, which drops σs),
 *   Tucker (the correct adjoint, not upstream's): G_A_t = G_Ā_tᵀ (written through the transposed
 *   view), G_P_t = G_B̄_t (fp32 scratch), G_B_t[j,c] = Σ_{i,κ} T_t[i,j,κ]·G_P_t[i,c·K+κ],
 *   G_T_t[i,j,κ] = Σ_c G_P_t[i,c·K+κ]·B_t[j,c]  (k_loha_tucker_gb, k_loha_tucker_gt).
 *   Two kernels, because the two factor gradients reduce over different axes and we want no
 *   atomics and no O·I·K-sized partials: k_loha_grad_rows (a block owns 32 rows × 64 ranks of one
 *   term and sweeps every column tile: G_Ā rows complete in registers, plus the block's σs
 *   partial), k_loha_grad_cols (a block owns 32 columns × 64 ranks of one term and sweeps every row
 *   tile: G_B̄ columns complete). Each recomputes its R_1, R_2 tiles (fp64) and Γ; ranks beyond
 *   64 are more blocks (grid y = ⌈r_1/64⌉ + ⌈r_2/64⌉), so any rank works. Contractions by FFMA
 *   from shared memory: each 64-long tile summed in fp32, the tiles in fp64 (one fp32 chain over
 *   the 2 880 columns of the full tier's 320-channel Tucker conv case reached 100–122 ULP on
 *   hada_w*_a against a 95.7 budget on the H200, session 31; the CPU's blocked sums: 27).
 *   Deterministic: fixed-order sums, σs partials summed in block order.
 *   Extra memory: σs partials (⌈O/32⌉ doubles); Tucker: P_t and G_P_t (2·(r_1 + r_2)·I·K fp32);
 *   DoRA statistics.
 *
 * bypass backward parameter gradients: the same two kernels with Γ = m·G_E, where the G_E tile
 *   (G_E = Σ_tokens dyᵀ·im2col(x), fp32, operands rounded to CT) is computed inside the tile
 *   from 32-token slices — G_E, like ΔW, is never materialised. G_σs = m·⟨G_E, ΔW̄⟩ (fp64).
 *   Cost: each gradient block recomputes its G_E tiles (2·(⌈r_1/64⌉ + ⌈r_2/64⌉) passes over
 *   tokens·O·I·K in all) — correct first; a one-pass variant is future work.
 */
#include <stdio.h>

#include "cuda/loha_gen.cuh"
#include "cuda/merge_ep.cuh"

#define GR_RC 64   /* ranks per gradient block */
#define GE_TT 32   /* tokens per G_E slice */
#define LMAX(a, b) ((a) > (b) ? (a) : (b))

/* =============================================================================================
 * merge forward
 * =========================================================================================== */
/* ACC: the generator's accumulator (float only when every output is 16-bit, see merge_fwd_t) */
template <typename CT, typename ACC> __global__ __launch_bounds__(NT) void k_loha_merge_fwd(lk_loha_args a, const float *st) {
    typedef loha_gen<CT, 32, 64, ACC> G;
    __shared__ __align__(16) double sm[(G::SMEM + 7) / 8];
    const lk_loha &L = a.L;
    const i64 j0 = (i64)blockIdx.x * 64, o0 = (i64)blockIdx.y * 32;
    ACC r1[LG_TR][LG_TC], r2[LG_TR][LG_TC];
    double rho[LG_TR];
    G::gen(L, o0, j0, 1, 0, L.IK, (ACC *)sm, r1, r2, rho);
    const float sig = sigma_ct<CT>(L.sigma), mf = (float)L.m;
    const bool dora = a.dora.on != 0;
#pragma unroll
    for (int k = 0; k < LG_TR; k++)
#pragma unroll
        for (int e = 0; e < LG_TC; e++) {
            const i64 o = o0 + G::row(k), j = j0 + G::col(e);
            if (o >= L.O || j >= L.IK) continue;
            const float w = a.W.p ? rnd_ct<CT>(vload(a.W, o, j)) : 0.0f;
            const float dw = (float)(rho[k] * (double)sig * r1[k][e] * r2[k][e]);
            const float *s3 = dora ? st + 3 * dora_kept(a.dora, o, j, L.K) : NULL;
            vstore(a.out, o, j, merge_elem(w, dw, a.mode, mf, dora, s3));
        }
}

/* =============================================================================================
 * gradient tiles: the thread's G_R1, G_R2 values of one tile, and its σs partial
 * =========================================================================================== */
template <typename CT, int BM, int BN, bool BYP> struct loha_grad {
    typedef loha_gen<CT, BM, BN> G;
    static const int LDY = BM + 1, LDX = BN + 1;
    static const int SMEM_GE = GE_TT * (LDY + LDX) * 4;

    /* G_E tile (bypass): Σ_t RN_CT(dy[t, o])·RN_CT(im2col(x)[t, j]) over every token, fp32. */
    static __device__ void ge(const lk_loha_args &a, i64 o0, i64 j0, float *sm, float (&g)[LG_TR][LG_TC]) {
        float *sy = sm, *sx = sm + GE_TT * LDY;
        const lk_loha &L = a.L;
        const i64 Tt = a.T * a.geo.spout;
#pragma unroll
        for (int k = 0; k < LG_TR; k++)
#pragma unroll
            for (int e = 0; e < LG_TC; e++) g[k][e] = 0.0f;
        for (i64 t0 = 0; t0 < Tt; t0 += GE_TT) {
            __syncthreads();
            for (int q = threadIdx.x; q < GE_TT * BM; q += NT) {
                const int t = q / BM, rr = q % BM;
                const i64 tk = t0 + t, o = o0 + rr;
                sy[t * LDY + rr] = (tk < Tt && o < L.O) ? rnd_ct<CT>(lg_yld(a.dy, a.geo, tk, o)) : 0.0f;
            }
            for (int q = threadIdx.x; q < GE_TT * BN; q += NT) {
                const int t = q / BN, cc = q % BN;
                const i64 tk = t0 + t, j = j0 + cc;
                sx[t * LDX + cc] = (tk < Tt && j < L.IK) ? rnd_ct<CT>(lg_xcol(a.x, a.geo, L.K, tk, j)) : 0.0f;
            }
            __syncthreads();
            for (int t = 0; t < GE_TT; t++) {
                float d[LG_TR], x[LG_TC];
#pragma unroll
                for (int k = 0; k < LG_TR; k++) d[k] = sy[t * LDY + G::row(k)];
#pragma unroll
                for (int e = 0; e < LG_TC; e++) x[e] = sx[t * LDX + G::col(e)];
#pragma unroll
                for (int k = 0; k < LG_TR; k++)
#pragma unroll
                    for (int e = 0; e < LG_TC; e++) g[k][e] = fmaf(d[k], x[e], g[k][e]);
            }
        }
    }

    /* gr1 = Γs·R_2, gr2 = Γs·R_1 at the thread's elements (0 outside the matrix); gsig += Σ Γ·ΔW̄
       (fp64). smem: LMAX(G::SMEM, SMEM_GE) bytes, free again after the caller synchronises. */
    static __device__ void tile(const lk_loha_args &a, const float *st, i64 o0, i64 j0, char *smem, float sig,
                                float (&gr1)[LG_TR][LG_TC], float (&gr2)[LG_TR][LG_TC], double &gsig) {
        const lk_loha &L = a.L;
        const bool dora = !BYP && a.dora.on;
        float g[LG_TR][LG_TC], w[LG_TR][LG_TC];
        if (BYP) {
            ge(a, o0, j0, (float *)smem, g);
            __syncthreads();
        }
#pragma unroll
        for (int k = 0; k < LG_TR; k++)
#pragma unroll
            for (int e = 0; e < LG_TC; e++) {
                const i64 o = o0 + G::row(k), j = j0 + G::col(e);
                const bool in = o < L.O && j < L.IK;
                if (!BYP) g[k][e] = in ? rnd_ct<CT>(vload(a.G, o, j)) : 0.0f;
                w[k][e] = in && dora ? rnd_ct<CT>(vload(a.W, o, j)) : 0.0f;
            }
        double r1[LG_TR][LG_TC], r2[LG_TR][LG_TC], rho[LG_TR];
        G::gen(L, o0, j0, 1, 0, L.IK, (double *)smem, r1, r2, rho);
        const float mf = (float)L.m;
#pragma unroll
        for (int k = 0; k < LG_TR; k++)
#pragma unroll
            for (int e = 0; e < LG_TC; e++) {
                const i64 o = o0 + G::row(k), j = j0 + G::col(e);
                gr1[k][e] = gr2[k][e] = 0.0f;
                if (o >= L.O || j >= L.IK) continue;
                const double d = rho[k] * r1[k][e] * r2[k][e]; /* ΔW̄ without σs */
                double gam;
                if (dora) {
                    const float dw = (float)(rho[k] * (double)sig * r1[k][e] * r2[k][e]); /* as the producer rounds it */
                    gam = dora_gv(g[k][e], w[k][e], dw, st + 3 * dora_kept(a.dora, o, j, L.K), ct_of<CT>::dt);
                } else {
                    gam = (double)mf * g[k][e];
                }
                gsig += gam * d;
                /* Γs·R_t in fp64, one rounding per term (five fp32 roundings here put an fp32 row's
                   G_B̄ at 21 ULP, over its 17.2 budget, where the sum over rows cancels) */
                const double f = gam * (double)sig * rho[k];
                gr1[k][e] = (float)(f * r2[k][e]);
                gr2[k][e] = (float)(f * r1[k][e]);
            }
    }
};

/* Block sum of a double (fixed order); valid in thread 0. */
__device__ __forceinline__ double lh_block_sum_d(double v, double *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < NT / 32; w++) s += red[w];
    return s;
}

/* Block (x = 32-row tile, y = rank chunk: y < nch1 term 1, else term 2): G_Ā_t[rows, chunk]
   over every column tile; block y = 0 also writes the tile row's σs partial (sigpart non-NULL). */
template <typename CT, bool BYP>
__global__ __launch_bounds__(NT) void k_loha_grad_rows(lk_loha_args a, const float *st, double *sigpart, int nch1) {
    typedef loha_grad<CT, 32, 64, BYP> GT;
    typedef typename GT::G G;
    const int LD = 64 + 1;
    __shared__ __align__(16) char smem[LMAX(LMAX(G::SMEM, GT::SMEM_GE), GR_RC * LD * 4)];
    __shared__ float sGR[32 * LD];
    __shared__ double red[NT / 32];
    const lk_loha &L = a.L;
    const int y = (int)blockIdx.y, t = y < nch1 ? 0 : 1;
    const i64 o0 = (i64)blockIdx.x * 32, c0 = (i64)(t ? y - nch1 : y) * GR_RC;
    const lk_view &gA = t ? a.gA2 : a.gA1, &B = t ? L.B2 : L.B1;
    const i64 r = t ? L.r2 : L.r1;
    const bool do_sig = sigpart != NULL && y == 0;
    if (!gA.p && !do_sig) return;
    const float sig = sigma_ct<CT>(L.sigma);
    double acc[LG_TR][LG_TC]; /* the sum over column tiles (each tile's 64 terms in fp32) */
#pragma unroll
    for (int k = 0; k < LG_TR; k++)
#pragma unroll
        for (int e = 0; e < LG_TC; e++) acc[k][e] = 0.0;
    double gsig = 0.0;
    float *sB = (float *)smem;
    for (i64 j0 = 0; j0 < L.IK; j0 += 64) {
        float gr1[LG_TR][LG_TC], gr2[LG_TR][LG_TC];
        GT::tile(a, st, o0, j0, smem, sig, gr1, gr2, gsig);
        if (!gA.p) continue;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < LG_TR; k++)
#pragma unroll
            for (int e = 0; e < LG_TC; e++) sGR[G::row(k) * LD + G::col(e)] = t ? gr2[k][e] : gr1[k][e];
        for (int q = threadIdx.x; q < GR_RC * 64; q += NT) {
            const int ii = q / 64, cc = q % 64;
            const i64 i = c0 + ii, j = j0 + cc;
            float v = 0.0f;
            if (i < r && j < L.IK) {
                v = vload(B, i, j);
                if (!L.b_exact) v = rnd_ct<CT>(v);
            }
            sB[ii * LD + cc] = v;
        }
        __syncthreads();
        float tacc[LG_TR][LG_TC];
#pragma unroll
        for (int k = 0; k < LG_TR; k++)
#pragma unroll
            for (int e = 0; e < LG_TC; e++) tacc[k][e] = 0.0f;
        for (int jj = 0; jj < 64; jj++) {
            float g[LG_TR], b[LG_TC];
#pragma unroll
            for (int k = 0; k < LG_TR; k++) g[k] = sGR[G::row(k) * LD + jj];
#pragma unroll
            for (int e = 0; e < LG_TC; e++) b[e] = sB[G::col(e) * LD + jj];
#pragma unroll
            for (int k = 0; k < LG_TR; k++)
#pragma unroll
                for (int e = 0; e < LG_TC; e++) tacc[k][e] = fmaf(g[k], b[e], tacc[k][e]);
        }
#pragma unroll
        for (int k = 0; k < LG_TR; k++)
#pragma unroll
            for (int e = 0; e < LG_TC; e++) acc[k][e] += (double)tacc[k][e];
    }
    if (gA.p)
#pragma unroll
        for (int k = 0; k < LG_TR; k++)
#pragma unroll
            for (int e = 0; e < LG_TC; e++) {
                const i64 o = o0 + G::row(k), i = c0 + G::col(e);
                if (o < L.O && i < r) vstore(gA, o, i, (float)acc[k][e]);
            }
    if (do_sig) {
        double s = lh_block_sum_d(gsig, red);
        if (threadIdx.x == 0) sigpart[blockIdx.x] = s;
    }
}

/* Block (x = 32-column tile, y = rank chunk as above): G_B̄_t[chunk, columns] over every row tile,
   into dst1 / dst2 (the gradient itself, or Tucker's G_P_t scratch; p NULL = not wanted). */
template <typename CT, bool BYP>
__global__ __launch_bounds__(NT) void k_loha_grad_cols(lk_loha_args a, const float *st, lk_view dst1, lk_view dst2, int nch1) {
    typedef loha_grad<CT, 64, 32, BYP> GT;
    typedef typename GT::G G;
    const int LDA = GR_RC + 1, LDG = 32 + 1;
    __shared__ __align__(16) char smem[LMAX(LMAX(G::SMEM, GT::SMEM_GE), 64 * LDA * 4)];
    __shared__ float sGR[64 * LDG];
    const lk_loha &L = a.L;
    const int y = (int)blockIdx.y, t = y < nch1 ? 0 : 1;
    const i64 j0 = (i64)blockIdx.x * 32, c0 = (i64)(t ? y - nch1 : y) * GR_RC;
    const lk_view &dst = t ? dst2 : dst1, &A = t ? L.A2 : L.A1;
    const i64 r = t ? L.r2 : L.r1;
    if (!dst.p) return;
    const float sig = sigma_ct<CT>(L.sigma);
    double acc[LG_TR][LG_TC]; /* the sum over row tiles (each tile's 64 terms in fp32) */
#pragma unroll
    for (int k = 0; k < LG_TR; k++)
#pragma unroll
        for (int e = 0; e < LG_TC; e++) acc[k][e] = 0.0;
    double gsig = 0.0;
    float *sA = (float *)smem;
    for (i64 o0 = 0; o0 < L.O; o0 += 64) {
        float gr1[LG_TR][LG_TC], gr2[LG_TR][LG_TC];
        GT::tile(a, st, o0, j0, smem, sig, gr1, gr2, gsig);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < LG_TR; k++)
#pragma unroll
            for (int e = 0; e < LG_TC; e++) sGR[G::row(k) * LDG + G::col(e)] = t ? gr2[k][e] : gr1[k][e];
        for (int q = threadIdx.x; q < 64 * GR_RC; q += NT) {
            const int rr = q / GR_RC, ii = q % GR_RC;
            const i64 o = o0 + rr, i = c0 + ii;
            sA[rr * LDA + ii] = (o < L.O && i < r) ? rnd_ct<CT>(vload(A, o, i)) : 0.0f;
        }
        __syncthreads();
        float tacc[LG_TR][LG_TC];
#pragma unroll
        for (int k = 0; k < LG_TR; k++)
#pragma unroll
            for (int e = 0; e < LG_TC; e++) tacc[k][e] = 0.0f;
        for (int rr = 0; rr < 64; rr++) {
            float av[LG_TR], g[LG_TC];
#pragma unroll
            for (int k = 0; k < LG_TR; k++) av[k] = sA[rr * LDA + G::row(k)];
#pragma unroll
            for (int e = 0; e < LG_TC; e++) g[e] = sGR[rr * LDG + G::col(e)];
#pragma unroll
            for (int k = 0; k < LG_TR; k++)
#pragma unroll
                for (int e = 0; e < LG_TC; e++) tacc[k][e] = fmaf(av[k], g[e], tacc[k][e]);
        }
#pragma unroll
        for (int k = 0; k < LG_TR; k++)
#pragma unroll
            for (int e = 0; e < LG_TC; e++) acc[k][e] += (double)tacc[k][e];
    }
#pragma unroll
    for (int k = 0; k < LG_TR; k++)
#pragma unroll
        for (int e = 0; e < LG_TC; e++) {
            const i64 i = c0 + G::row(k), j = j0 + G::col(e);
            if (i < r && j < L.IK) vstore(dst, i, j, (float)acc[k][e]);
        }
}

/* σs gradient: the partials in block order. */
__global__ void k_loha_sigma_sum(const double *part, i64 n, lk_view out) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    double s = 0.0;
    for (i64 i = 0; i < n; i++) s += part[i];
    vstore(out, 0, 0, (float)s);
}

/* =============================================================================================
 * Tucker
 * =========================================================================================== */
/* P[i, c·K+κ] = Σ_j RN_CT(T[i, j·K+κ])·RN_CT(B[j, c]) in fp64, rounded once to fp32. */
template <typename CT> __global__ __launch_bounds__(NT) void k_loha_tucker_p(lk_view T, lk_view B, i64 r, i64 I, i64 K, float *P) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x, IK = I * K;
    if (idx >= r * IK) return;
    const i64 i = idx / IK, c = (idx % IK) / K, kap = idx % K;
    double acc = 0.0;
    for (i64 j = 0; j < r; j++) acc += (double)rnd_ct<CT>(vload(T, i, j * K + kap)) * (double)rnd_ct<CT>(vload(B, j, c));
    P[idx] = (float)acc;
}

/* G_B[j, c] = Σ_i Σ_κ RN_CT(T[i, j·K+κ])·G_P[i, c·K+κ] (fp32, i then κ). */
template <typename CT> __global__ __launch_bounds__(NT) void k_loha_tucker_gb(lk_view T, const float *GP, i64 r, i64 I, i64 K, lk_view gB) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x, IK = I * K;
    if (idx >= r * I) return;
    const i64 j = idx / I, c = idx % I;
    float acc = 0.0f;
    for (i64 i = 0; i < r; i++)
        for (i64 kap = 0; kap < K; kap++) acc = fmaf(rnd_ct<CT>(vload(T, i, j * K + kap)), GP[i * IK + c * K + kap], acc);
    vstore(gB, j, c, acc);
}

/* G_T[i, j·K+κ] = Σ_c G_P[i, c·K+κ]·RN_CT(B[j, c]) (fp32, in c order). */
template <typename CT> __global__ __launch_bounds__(NT) void k_loha_tucker_gt(lk_view B, const float *GP, i64 r, i64 I, i64 K, lk_view gT) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x, IK = I * K;
    if (idx >= r * r * K) return;
    const i64 i = idx / (r * K), j = (idx % (r * K)) / K, kap = idx % K;
    float acc = 0.0f;
    for (i64 c = 0; c < I; c++) acc = fmaf(GP[i * IK + c * K + kap], rnd_ct<CT>(vload(B, j, c)), acc);
    vstore(gT, i, j * K + kap, acc);
}

/* =============================================================================================
 * launchers
 * =========================================================================================== */
struct lh_carve {
    size_t off;
    char *base;
};
static void *carve_take(lh_carve &cv, size_t bytes) {
    void *p = cv.base ? cv.base + cv.off : NULL;
    cv.off += (bytes + 255) / 256 * 256;
    return p;
}

static lk_view f32_view(const float *p, i64 rows, i64 cols) {
    lk_view v = {};
    v.p = p;
    v.s0 = cols;
    v.s1 = 1;
    v.rows = rows;
    v.cols = cols;
    v.dt = DT_F32;
    return v;
}

static unsigned blocks_of(i64 n) { return (unsigned)cdiv(n, NT); }

extern "C" int64_t lk_loha_tucker_floats(const lk_loha *L) { return L->tucker ? (L->r1 + L->r2) * L->IK : 0; }

template <typename CT> static int tucker_prep_t(lk_loha *L, float *P, cudaStream_t s) {
    float *P2 = P + L->r1 * L->IK;
    if (L->r1 * L->IK > 0) {
        k_loha_tucker_p<CT><<<blocks_of(L->r1 * L->IK), NT, 0, s>>>(L->T1, L->B1, L->r1, L->I, L->K, P);
        LK_LAUNCHED("loha tucker_p");
    }
    if (L->r2 * L->IK > 0) {
        k_loha_tucker_p<CT><<<blocks_of(L->r2 * L->IK), NT, 0, s>>>(L->T2, L->B2, L->r2, L->I, L->K, P2);
        LK_LAUNCHED("loha tucker_p");
    }
    L->B1 = f32_view(P, L->r1, L->IK);
    L->B2 = f32_view(P2, L->r2, L->IK);
    L->b_exact = 1;
    return LYCO_OK;
}

extern "C" int lk_loha_tucker_prep(lk_loha *L, float *P, void *stream) {
    if (!L->tucker) return LYCO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    if (cdiv(LMAX(L->r1, L->r2) * L->IK, NT) > 2147483647LL) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda loha: Tucker core too large");
    switch (L->ct) {
    case DT_BF16: return tucker_prep_t<bf16_t>(L, P, s);
    case DT_F16: return tucker_prep_t<f16_t>(L, P, s);
    default: return tucker_prep_t<float>(L, P, s);
    }
}

/* Tucker's chain after G_P_t: G_B_t, G_T_t (a carries the raw B_t views). */
template <typename CT> static int tucker_grads_t(const lk_loha_args *a, const float *GP, cudaStream_t s) {
    const lk_loha &L = a->L;
    for (int t = 0; t < 2; t++) {
        const i64 r = t ? L.r2 : L.r1;
        const float *gp = GP + (t ? L.r1 * L.IK : 0);
        const lk_view &gB = t ? a->gB2 : a->gB1, &gT = t ? a->gT2 : a->gT1, &Tc = t ? L.T2 : L.T1;
        const lk_view &Braw = t ? L.B2 : L.B1;
        if (gB.p && r * L.I > 0) {
            k_loha_tucker_gb<CT><<<blocks_of(r * L.I), NT, 0, s>>>(Tc, gp, r, L.I, L.K, gB);
            LK_LAUNCHED("loha tucker_gb");
        }
        if (gT.p && r * r * L.K > 0) {
            k_loha_tucker_gt<CT><<<blocks_of(r * r * L.K), NT, 0, s>>>(Braw, gp, r, L.I, L.K, gT);
            LK_LAUNCHED("loha tucker_gt");
        }
    }
    return LYCO_OK;
}

extern "C" int lk_loha_tucker_grads(const lk_loha_args *a, const float *GP, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (cdiv(LMAX(LMAX(a->L.r1, a->L.r2) * a->L.I, LMAX(a->L.r1, a->L.r2) * LMAX(a->L.r1, a->L.r2) * a->L.K), NT) > 2147483647LL)
        return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda loha: Tucker gradient too large");
    switch (a->L.ct) {
    case DT_BF16: return tucker_grads_t<bf16_t>(a, GP, s);
    case DT_F16: return tucker_grads_t<f16_t>(a, GP, s);
    default: return tucker_grads_t<float>(a, GP, s);
    }
}

/* ---- merge forward ---- */
template <typename CT> static int merge_fwd_t(const lk_loha_args *a0, lh_carve &cv, cudaStream_t s) {
    lk_loha_args a = *a0;
    int rc;
    if ((rc = lk_loha_tucker_prep(&a.L, (float *)carve_take(cv, (size_t)lk_loha_tucker_floats(&a.L) * 4), s))) return rc;
    float *st = NULL;
    if (a.dora.on) {
        float *ws = (float *)carve_take(cv, (size_t)dora_ws_floats(a.L.O, a.L.IK, a.L.K, a.dora.on_out) * 4);
        lk_view none = {};
        if ((rc = dora_stats<CT, loha_delta>(a.L, a.dora, a.W, none, ws, &st, s))) return rc;
    }
    dim3 grid((unsigned)cdiv(a.L.IK, 64), (unsigned)cdiv(a.L.O, 32));
    /* fp32 tiles when the output is 16-bit and no DoRA statistics need the fp64 tile's bits */
    if (!a.legacy && !a.dora.on && a.out.dt != DT_F32) k_loha_merge_fwd<CT, float><<<grid, NT, 0, s>>>(a, st);
    else k_loha_merge_fwd<CT, double><<<grid, NT, 0, s>>>(a, st);
    LK_LAUNCHED("loha merge_fwd");
    return LYCO_OK;
}

static size_t merge_fwd_bytes(const lk_loha_args *a) {
    size_t b = ((size_t)lk_loha_tucker_floats(&a->L) * 4 + 255) / 256 * 256;
    if (a->dora.on) b += ((size_t)dora_ws_floats(a->L.O, a->L.IK, a->L.K, a->dora.on_out) * 4 + 255) / 256 * 256;
    return b;
}

/* ---- gradients (merge backward, bypass backward) ---- */
static bool wants_gp(const lk_loha_args *a, int t) { return t ? (a->gB2.p || a->gT2.p) : (a->gB1.p || a->gT1.p); }

static size_t grads_bytes(const lk_loha_args *a) {
    const lk_loha &L = a->L;
    size_t b = ((size_t)lk_loha_tucker_floats(&L) * 4 + 255) / 256 * 256;
    if (L.tucker) b += ((size_t)(L.r1 + L.r2) * L.IK * 4 + 255) / 256 * 256;
    if (a->dora.on) b += ((size_t)dora_ws_floats(L.O, L.IK, L.K, a->dora.on_out) * 4 + 255) / 256 * 256;
    b += ((size_t)cdiv(L.O, 32) * 8 + 255) / 256 * 256;
    return b;
}

template <typename CT, bool BYP> static int grads_t(const lk_loha_args *a0, lh_carve &cv, cudaStream_t s) {
    lk_loha_args a = *a0;
    lk_loha &L = a.L;
    int rc;
    if ((rc = lk_loha_tucker_prep(&L, (float *)carve_take(cv, (size_t)lk_loha_tucker_floats(&L) * 4), s))) return rc;
    float *GP = L.tucker ? (float *)carve_take(cv, (size_t)(L.r1 + L.r2) * L.IK * 4) : NULL;
    float *st = NULL;
    if (!BYP && a.dora.on) {
        float *ws = (float *)carve_take(cv, (size_t)dora_ws_floats(L.O, L.IK, L.K, a.dora.on_out) * 4);
        if ((rc = dora_stats<CT, loha_delta>(L, a.dora, a.W, a.G, ws, &st, s))) return rc;
    }
    const bool want_sig = a.gsigma.p && !a.sigma_zero;
    double *sigpart = want_sig ? (double *)carve_take(cv, (size_t)cdiv(L.O, 32) * 8) : NULL;
    const int nch1 = (int)cdiv(L.r1, GR_RC), nch = nch1 + (int)cdiv(L.r2, GR_RC);
    if (L.O > 0 && L.IK > 0 && (a.gA1.p || a.gA2.p || want_sig)) {
        k_loha_grad_rows<CT, BYP><<<dim3((unsigned)cdiv(L.O, 32), (unsigned)nch), NT, 0, s>>>(a, st, sigpart, nch1);
        LK_LAUNCHED("loha grad_rows");
    }
    lk_view d1 = a.gB1, d2 = a.gB2;
    if (L.tucker) {
        d1 = wants_gp(&a, 0) ? f32_view(GP, L.r1, L.IK) : lk_view{};
        d2 = wants_gp(&a, 1) ? f32_view(GP + L.r1 * L.IK, L.r2, L.IK) : lk_view{};
    }
    if (L.O > 0 && L.IK > 0 && (d1.p || d2.p)) {
        k_loha_grad_cols<CT, BYP><<<dim3((unsigned)cdiv(L.IK, 32), (unsigned)nch), NT, 0, s>>>(a, st, d1, d2, nch1);
        LK_LAUNCHED("loha grad_cols");
    }
    if (L.tucker && (rc = tucker_grads_t<CT>(a0, GP, s))) return rc;
    if (a.gsigma.p) {
        if (!want_sig || L.O == 0 || L.IK == 0) return lk_copy_round(&a.gsigma, NULL, L.ct, s);
        k_loha_sigma_sum<<<1, 32, 0, s>>>(sigpart, cdiv(L.O, 32), a.gsigma);
        LK_LAUNCHED("loha sigma_sum");
    }
    return LYCO_OK;
}

/* Grid limits every launcher shares; a violation is reported, not launched. */
static int check_grid(const lk_loha &L) {
    if (cdiv(L.O, 32) > 65535 || cdiv(L.IK, 32) > 2147483647LL || cdiv(L.r1, GR_RC) + cdiv(L.r2, GR_RC) > 65535 ||
        cdiv(L.O, 32) > 2147483647LL)
        return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda loha: O = %lld, I·K = %lld, ranks %lld/%lld exceed the grid limits (O ≤ 2097120)",
                         (long long)L.O, (long long)L.IK, (long long)L.r1, (long long)L.r2);
    return LYCO_OK;
}

typedef int (*body_fn)(const lk_loha_args *a, lh_carve &cv, cudaStream_t s);

/* One stream-ordered scratch allocation around body. */
static int with_scratch(size_t bytes, const lk_loha_args *a, cudaStream_t s, body_fn body) {
    lh_carve cv = {0, NULL};
    int rc = lk_scratch_alloc((void **)&cv.base, bytes, s);
    if (rc) return rc;
    rc = body(a, cv, s);
    int rf = lk_scratch_free(cv.base, s);
    return rc ? rc : rf;
}

static int merge_fwd_any(const lk_loha_args *a, lh_carve &cv, cudaStream_t s) {
    switch (a->L.ct) {
    case DT_BF16: return merge_fwd_t<bf16_t>(a, cv, s);
    case DT_F16: return merge_fwd_t<f16_t>(a, cv, s);
    default: return merge_fwd_t<float>(a, cv, s);
    }
}

template <bool BYP> static int grads_any(const lk_loha_args *a, lh_carve &cv, cudaStream_t s) {
    switch (a->L.ct) {
    case DT_BF16: return grads_t<bf16_t, BYP>(a, cv, s);
    case DT_F16: return grads_t<f16_t, BYP>(a, cv, s);
    default: return grads_t<float, BYP>(a, cv, s);
    }
}

extern "C" int lk_loha_merge_fwd(const lk_loha_args *a, const lk_device *dev, void *stream) {
    int rc = check_grid(a->L);
    if (rc || a->L.O == 0 || a->L.IK == 0) return rc;
    int done = 0;
    if ((rc = lk_loha_tc_merge_fwd(a, dev, stream, &done)) || done) return rc;
    return with_scratch(merge_fwd_bytes(a), a, (cudaStream_t)stream, merge_fwd_any);
}

extern "C" int lk_loha_merge_bwd(const lk_loha_args *a, const lk_device *dev, void *stream) {
    int rc = check_grid(a->L);
    if (rc) return rc;
    int done = 0;
    if ((rc = lk_loha_tc_merge_bwd(a, dev, stream, &done)) || done) return rc;
    return with_scratch(grads_bytes(a), a, (cudaStream_t)stream, grads_any<false>);
}

extern "C" int lk_loha_bypass_bwd(const lk_loha_args *a, const lk_device *dev, void *stream) {
    (void)dev;
    int rc = check_grid(a->L);
    if (rc) return rc;
    if (a->dx.p && (rc = lk_loha_bypass_dx(a, stream))) return rc;
    if (!a->gA1.p && !a->gA2.p && !a->gB1.p && !a->gB2.p && !a->gT1.p && !a->gT2.p && !a->gsigma.p) return LYCO_OK;
    return with_scratch(grads_bytes(a), a, (cudaStream_t)stream, grads_any<true>);
}
