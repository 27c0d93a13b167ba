/*
 * loha_gen.cuh — the LoHa ΔW tile generator shared by loha.cu (merge) and loha_bypass.cu, the
 * merge_ep.cuh producer built on it, and the activation gathers of the bypass kernels.
 *
 * Generator (loha_gen<CT, BM, BN>): for a BM×BN tile of ΔW̄ at rows o0…, tile columns j0… mapped
 * to ΔW̄ columns j = (j0 + cc)·jm + jo (jm = 1, jo = 0: the plain tile; jm = K, jo = κ: the
 * columns of kernel offset κ, which the conv bypass backward walks), every thread gets, in
 * registers, for its TR × TC elements (rows row(k), columns col(e)):
 *   R_1, R_2 = Σ_i Ā_t[o, i]·B̄_t[i, j]   in fp64 (operands rounded to CT as they are staged;
 *              B̄ used as is when it is the fp32 Tucker intermediate P_t), and ρ_o = s'·q_o.
 * Why fp64: ΔW̄ is a product of two sums with heavy-tailed elements; fp32 sums left the largest
 * elements 3–4 u off on the CPU (17 ULP of the RMS against a 12.7 budget on fp32 outputs); the
 * CPU backend (src/cpu/loha.c) generates in fp64 for the same reason, and these tiles match it.
 * The rank is consumed in chunks of RK = 32 staged through shared memory (any r_1, r_2 ≥ 1;
 * ranks beyond 128 are just more chunks). Cost per tile: BM·BN·(r_1 + r_2) fp64 FMAs.
 * Shared memory: (BM·(RK+1) + RK·(BN+1)) doubles (32×64 tile: 25 KB).
 * ACC (default double) is the accumulator type; loha.cu's merge forward uses float when every
 * output is 16-bit (fp32 sums of r terms are ~1e-6 relative, far below 0.5 ULP of bf16/fp16),
 * half the shared memory and twice the FMA rate.
 *
 * Thread layout (NT = 256, 8 elements each): TX = BN/4 threads along the columns, TY = BM/2
 * along the rows; row(k) = ty + k·TY (k < 2), col(e) = tx + e·TX (e < 4): consecutive threads
 * touch consecutive columns (coalesced global access, conflict-free shared reads).
 */
#ifndef LYCO_CUDA_LOHA_GEN_CUH
#define LYCO_CUDA_LOHA_GEN_CUH

#include "cuda/common.cuh"
#include "cuda/kern_loha.h"

#define LG_TR 2
#define LG_TC 4

__device__ __forceinline__ double lg_fma(double a, double b, double c) { return fma(a, b, c); }
__device__ __forceinline__ float lg_fma(float a, float b, float c) { return fmaf(a, b, c); }

template <typename CT, int BM, int BN, typename ACC = double> struct loha_gen {
    static const int RK = 32, TX = BN / LG_TC, TY = BM / LG_TR;
    static const int LDA = RK + 1, LDB = BN + 1;
    static const int SMEM = (BM * LDA + RK * LDB) * (int)sizeof(ACC);

    static __device__ __forceinline__ int row(int k) { return (int)threadIdx.x / TX + k * TY; }
    static __device__ __forceinline__ int col(int e) { return (int)threadIdx.x % TX + e * TX; }

    /* acc = Σ_i Ā[o0+row(k), i]·B̄[i, (j0+col(e))·jm + jo] over i < r (0 outside the matrix). */
    static __device__ void term(const lk_view &A, const lk_view &B, i64 r, bool bexact, i64 O, i64 o0, i64 j0, i64 jm,
                                i64 jo, i64 ncols, ACC *sm, ACC (&acc)[LG_TR][LG_TC]) {
        static_assert(TX * TY == NT, "loha_gen: tile must give 8 elements to each of NT threads");
        ACC *sA = sm, *sB = sm + BM * LDA;
#pragma unroll
        for (int k = 0; k < LG_TR; k++)
#pragma unroll
            for (int e = 0; e < LG_TC; e++) acc[k][e] = (ACC)0;
        for (i64 i0 = 0; i0 < r; i0 += RK) {
            __syncthreads();
            for (int q = threadIdx.x; q < BM * RK; q += NT) {
                const int rr = q / RK, ii = q % RK;
                const i64 o = o0 + rr, i = i0 + ii;
                sA[rr * LDA + ii] = (o < O && i < r) ? (ACC)rnd_ct<CT>(vload(A, o, i)) : (ACC)0;
            }
            for (int q = threadIdx.x; q < RK * BN; q += NT) {
                const int ii = q / BN, cc = q % BN;
                const i64 i = i0 + ii, jc = j0 + cc;
                ACC v = (ACC)0;
                if (i < r && jc < ncols) {
                    float b = vload(B, i, jc * jm + jo);
                    v = (ACC)(bexact ? b : rnd_ct<CT>(b));
                }
                sB[ii * LDB + cc] = v;
            }
            __syncthreads();
            const int kk = (int)(r - i0 < RK ? r - i0 : RK);
            for (int ii = 0; ii < kk; ii++) {
                ACC a[LG_TR], b[LG_TC];
#pragma unroll
                for (int k = 0; k < LG_TR; k++) a[k] = sA[row(k) * LDA + ii];
#pragma unroll
                for (int e = 0; e < LG_TC; e++) b[e] = sB[ii * LDB + col(e)];
#pragma unroll
                for (int k = 0; k < LG_TR; k++)
#pragma unroll
                    for (int e = 0; e < LG_TC; e++) acc[k][e] = lg_fma(a[k], b[e], acc[k][e]);
            }
        }
    }

    /* R_1, R_2 of the thread's elements and ρ of its rows (0 outside the matrix). Leaves sm in
       use: callers synchronise before reusing it. */
    static __device__ void gen(const lk_loha &L, i64 o0, i64 j0, i64 jm, i64 jo, i64 ncols, ACC *sm,
                               ACC (&r1)[LG_TR][LG_TC], ACC (&r2)[LG_TR][LG_TC], double (&rho)[LG_TR]) {
        term(L.A1, L.B1, L.r1, L.b_exact != 0, L.O, o0, j0, jm, jo, ncols, sm, r1);
        term(L.A2, L.B2, L.r2, L.b_exact != 0, L.O, o0, j0, jm, jo, ncols, sm, r2);
#pragma unroll
        for (int k = 0; k < LG_TR; k++) {
            const i64 o = o0 + row(k);
            rho[k] = o < L.O ? L.s * (double)vget(L.mask, o, 1.0f) : 0.0;
        }
    }
};

/* The merge_ep.cuh producer: Cs = fp32 dW tile = RN_f32(ρ_o·σs·R_1·R_2) (m not applied), 0 outside
   the matrix. sU is the generator's staging memory (SMEM_IN bytes); sD, rowc unused. */
template <typename CT, int BM, int BN, int WM> struct loha_delta {
    typedef lk_loha args_t;
    typedef loha_gen<CT, BM, BN> G;
    static const int LDC = BN + 4;
    static const int SMEM_U = G::SMEM;
    static const int SMEM_IN = G::SMEM;
    static const int SMEM_C = BM * LDC * 4;

    static __device__ void run(const lk_loha &L, i64 o0, i64 j0, CT *sU, CT *sD, float *Cs, float *rowc, float sig) {
        (void)sD;
        (void)rowc;
        double r1[LG_TR][LG_TC], r2[LG_TR][LG_TC], rho[LG_TR];
        G::gen(L, o0, j0, 1, 0, L.IK, (double *)sU, r1, r2, rho);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < LG_TR; k++)
#pragma unroll
            for (int e = 0; e < LG_TC; e++) Cs[G::row(k) * LDC + G::col(e)] = (float)(rho[k] * (double)sig * r1[k][e] * r2[k][e]);
        __syncthreads();
    }
};

/* ---- activations (lk_act) ---- */
__device__ __forceinline__ float lg_act_ld(const lk_act &a, i64 n, i64 c, i64 p) {
    return ld_elem((const char *)a.p + (n * a.sn + c * a.sc + p * a.sp) * (i64)dt_size(a.dt), a.dt, (a.flags & LK_UNALIGNED) != 0);
}
__device__ __forceinline__ void lg_act_st(const lk_act &a, i64 n, i64 c, i64 p, float v) {
    st_elem((char *)a.p + (n * a.sn + c * a.sc + p * a.sp) * (i64)dt_size(a.dt), a.dt, (a.flags & LK_UNALIGNED) != 0, v);
}

/* Input position read by output position p through kernel offset kap (im2col); false: padding. */
__device__ __forceinline__ bool lg_in_pos(const lk_geo &G, i64 p, i64 kap, i64 &q) {
    i64 c[3] = {0, 0, 0}, kk[3] = {0, 0, 0};
    for (int d = G.nd - 1; d >= 0; d--) {
        c[d] = p % G.out[d];
        p /= G.out[d];
        kk[d] = kap % G.k[d];
        kap /= G.k[d];
    }
    q = 0;
    for (int d = 0; d < G.nd; d++) {
        const i64 t = c[d] * G.st[d] - G.pad[d] + kk[d] * G.dil[d];
        if (t < 0 || t >= G.in[d]) return false;
        q = q * G.in[d] + t;
    }
    return true;
}

/* Output position that reads input position q through kernel offset kap; false: none. */
__device__ __forceinline__ bool lg_out_pos(const lk_geo &G, i64 q, i64 kap, i64 &p) {
    i64 c[3] = {0, 0, 0}, kk[3] = {0, 0, 0};
    for (int d = G.nd - 1; d >= 0; d--) {
        c[d] = q % G.in[d];
        q /= G.in[d];
        kk[d] = kap % G.k[d];
        kap /= G.k[d];
    }
    p = 0;
    for (int d = 0; d < G.nd; d++) {
        const i64 u = c[d] + G.pad[d] - kk[d] * G.dil[d];
        if (u < 0 || u % G.st[d]) return false;
        const i64 t = u / G.st[d];
        if (t >= G.out[d]) return false;
        p = p * G.out[d] + t;
    }
    return true;
}

/* im2col(x)[t, j]: token t = (n, output position), column j = c·K + κ (linear: x[t, j]). */
__device__ __forceinline__ float lg_xcol(const lk_act &x, const lk_geo &G, i64 K, i64 t, i64 j) {
    if (G.nd == 0) return lg_act_ld(x, t, j, 0);
    const i64 n = t / G.spout, p = t % G.spout, c = j / K;
    i64 q;
    if (!lg_in_pos(G, p, j % K, q)) return 0.0f;
    return lg_act_ld(x, n, c, q);
}

/* The output-grid activation a (y, y0, dy) at token t = (n, output position), channel o. */
__device__ __forceinline__ float lg_yld(const lk_act &a, const lk_geo &G, i64 t, i64 o) {
    if (G.nd == 0) return lg_act_ld(a, t, o, 0);
    return lg_act_ld(a, t / G.spout, o, t % G.spout);
}
__device__ __forceinline__ void lg_yst(const lk_act &a, const lk_geo &G, i64 t, i64 o, float v) {
    if (G.nd == 0) lg_act_st(a, t, o, 0, v);
    else lg_act_st(a, t / G.spout, o, t % G.spout, v);
}

#endif
