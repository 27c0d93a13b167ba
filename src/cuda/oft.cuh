/*
 * oft.cuh — device and host pieces shared by the OFT family's CUDA kernels (oft.cu: Diag-OFT and
 * the Cayley transform; boft.cu: BOFT). See kern_oft.h for the operand layouts.
 *
 *  - rows_* : element (o, j) of an X-shaped operand (lk_rows), widened to fp32 / rounded once;
 *  - blk_*  : element (stage, block, row, col) of the blocks tensor or its gradient (lk_blk);
 *  - oft_cay: the fp32 Cayley transform of nblk = M·nb blocks of n×n (n ≤ LK_OFT_MAX_BS) with the
 *    all-blocks norm constraint, as src/cpu/cayley.c computes it (Gauss–Jordan with partial
 *    pivoting, one refinement step of A = (I − Q)^{-1} and of R − I = 2·A·Q with double
 *    residuals), one CUDA block per OFT block, in shared memory; and its adjoint (in double,
 *    rounded once into ∂L/∂B). The norm and the adjoint's ⟨G_Q, Q0⟩ are fixed-order reductions
 *    on the device (no host synchronisation; the constraint branch is taken on the device).
 *    Besides A and R − I it writes the operators the passes read (fp32, nblk·n·n each):
 *      Diag-OFT: Op1 = M = m·R (⊙ D) − m·I + I, Op2 = M − I;   BOFT: Op1 = N − I = m·(R − I).
 *  - oft_sum_parts: fixed-order sums of per-block partials (the deterministic gradient reductions).
 * Extra memory (stream-ordered, one allocation): 5·nblk·n² floats + nblk + 2 doubles; the adjoint
 * takes nblk·n² + nblk doubles more while it runs.
 */
#ifndef LYCO_CUDA_OFT_CUH
#define LYCO_CUDA_OFT_CUH

#include "cuda/common.cuh"
#include "cuda/kern_oft.h"

__device__ __forceinline__ const char *rows_addr(const lk_rows &v, i64 o, i64 j) {
    i64 off = v.SP == 1 ? o * v.sc + j * v.sn : o * v.sc + (j / v.SP) * v.sn + (j % v.SP) * v.sp;
    return (const char *)v.p + off * (i64)dt_size(v.dt);
}
__device__ __forceinline__ float rows_load(const lk_rows &v, i64 o, i64 j) {
    return ld_elem(rows_addr(v, o, j), v.dt, v.flags & LK_UNALIGNED);
}
__device__ __forceinline__ void rows_store(const lk_rows &v, i64 o, i64 j, float x) {
    st_elem((char *)rows_addr(v, o, j), v.dt, v.flags & LK_UNALIGNED, x);
}

__device__ __forceinline__ const char *blk_addr(const lk_blk &b, i64 s, i64 k, i64 r, i64 c) {
    return (const char *)b.p + (s * b.st[0] + k * b.st[1] + r * b.st[2] + c * b.st[3]) * (i64)dt_size(b.dt);
}

/* ρ[o] rounded to the compute dtype, or 1 */
__device__ __forceinline__ float rho_ct(const lk_view &rho, i64 o, int ct) {
    return rho.p ? round_to(vload(rho, 0, o), ct) : 1.0f;
}

/* Sum of v over the block in double (fixed order); every thread gets the result. red: NT doubles. */
__device__ __forceinline__ double block_sum_d(double v, double *red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = NT / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    double r = red[0];
    __syncthreads();
    return r;
}

enum { OFT_FAM_DIAG = 0, OFT_FAM_BOFT = 1 };

typedef struct {
    i64 nblk, nb, n, nn;
    double kc;
    float *Q0, *A, *Rm1, *Op1, *Op2;
    double *part;       /* nblk per-block ‖Q0_k‖² partials (fp64) */
    double *stat;       /* [0] ‖Q0‖², [1] ⟨G_Q, Q0⟩ */
    void *mem;
} oft_cay;

/* Allocates the state and runs the forward transform; on failure the state is freeable. */
int oft_cay_fwd(oft_cay *s, const lk_oft_args *a, int family, cudaStream_t st);
/* ∂L/∂B into a->gB from GR = ∂L/∂R (fp32, nblk·n·n). */
int oft_cay_bwd(const oft_cay *s, const lk_oft_args *a, const float *GR, cudaStream_t st);
int oft_cay_free(oft_cay *s, cudaStream_t st);

/* GR[i] = m·Σ_s part[s·n + i] (⊙ mask[i]), the S partials summed in order (double). */
int oft_sum_grad(const float *part, i64 S, i64 n, double m, const lk_view *mask, float *GR, cudaStream_t st);
/* grho[o] = Σ_s part[s·O + o], rounded once to grho's dtype. */
int oft_sum_rho(const float *part, i64 S, i64 O, const lk_view *grho, cudaStream_t st);

#endif
