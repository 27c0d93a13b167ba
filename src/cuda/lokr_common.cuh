/*
 * lokr_common.cuh — what LoKr's CUDA files share (lokr.cu: merge; lokr_bypass.cu: bypass;
 * lokr_halves.cu: the halves and the gradient chains). ALGORITHMS.md §2.3.
 *
 * The halves (built once per call in stream-ordered scratch by lokr_halves_build, from the
 * factors rounded to the compute dtype CT, in fp64 exactly as src/cpu/lokr.c forms them):
 *   W1d a×c (fp64)          = w1, or w1_a·w1_b
 *   W2d b×dK (fp64)         = w2, or w2_a·w2_b, or Tucker w2_aᵀ·P with P[l, q·K+κ] = Σ_m t2[l,m,κ]·w2_b[m,q]
 *   W2f b×dK (fp32)         = RN_f32(W2d)
 *   bypass only: W1s a×c    = RN_f32(s·m·σs·W1d) (σs read on the device)
 * plus fp64 copies of the factors (the chains read them). All compact row-major.
 *
 * The gradient chain (lokr_chain): fp32 partials of G_W1 (z₁ × a·c) and G_W2 (z₂ × b·dK) are
 * summed in partial order in fp64 (G_W1 then scaled by scale1·σs when sigma1 is given), then
 *   G_w1a = G_W1·w1_bᵀ, G_w1b = w1_aᵀ·G_W1;  G_w2a = G_W2·w2_bᵀ, G_w2b = w2_aᵀ·G_W2;
 *   Tucker: G_w2a = P·G_W2ᵀ, G_P = w2_a·G_W2, G_t2[l,m,κ] = Σ_q G_P[l,q·K+κ]·w2_b[m,q],
 *           G_w2b[m,q] = Σ_{l,κ} t2[l,m,κ]·G_P[l,q·K+κ]
 * one thread per output element, fp64, rounded once (through fp32, as the CPU path) to each
 * gradient's dtype. Scratch carving: lk_carve (a sizing pass with base NULL launches nothing).
 */
#ifndef LYCO_CUDA_LOKR_COMMON_CUH
#define LYCO_CUDA_LOKR_COMMON_CUH

#include <string.h>

#include "cuda/kern_lokr.h"
#include "cuda/merge_ep.cuh"

/* Scratch carved in 256-byte aligned pieces from one allocation; base NULL = sizing pass. */
struct lk_carve {
    size_t off;
    char *base;
};
static inline void *carve_take(lk_carve &cv, size_t bytes) {
    size_t at = cv.off;
    cv.off += (bytes + 255) / 256 * 256;
    return cv.base ? (void *)(cv.base + at) : NULL;
}

/* What the device code reads: sizes, scalars and the halves. Also merge_ep.cuh's producer args
   (O, IK, K, m, ct, sigma). */
struct lokr_dev {
    int32_t ct;
    i64 O, IK, K, a, b, c, dK;
    double m, sp;        /* sp = s' (merge) */
    lk_view sigma, mask; /* sigma p NULL = 1 (and with the upstream merge scale) */
    const double *W1d;
    const float *W2f;
};

struct lokr_halves {
    double *W1d, *W2d, *w1a, *w1b, *w2a, *w2b, *t2, *P;
    float *W2f, *W1s;
};

struct lokr_grads {
    double *G1, *G2, *GP;
};

/* ρ_o = s'·q_o */
__device__ __forceinline__ double lokr_rho(const lokr_dev &A, i64 o) { return A.sp * (double)vget(A.mask, o, 1.0f); }

/* ΔW̄[o, col] without σs: RN_f32(ρ_o·W1[i,p])·W2f[j,n] */
__device__ __forceinline__ float lokr_dl(const lokr_dev &A, i64 o, i64 col) {
    const i64 i = o / A.b, j = o % A.b, p = col / A.dK, n = col % A.dK;
    return (float)(lokr_rho(A, o) * A.W1d[i * A.c + p]) * A.W2f[j * A.dK + n];
}

/* activation element (n, ch, sp) of kern_glora.h's lk_act */
__device__ __forceinline__ float act_ld(const lk_act &v, i64 n, i64 ch, i64 sp) {
    const char *p = (const char *)v.p + (n * v.sn + ch * v.sc + sp * v.sp) * (i64)dt_size(v.dt);
    return ld_elem(p, v.dt, v.flags & LK_UNALIGNED);
}
__device__ __forceinline__ void act_st(const lk_act &v, i64 n, i64 ch, i64 sp, float x) {
    char *p = (char *)v.p + (n * v.sn + ch * v.sc + sp * v.sp) * (i64)dt_size(v.dt);
    st_elem(p, v.dt, v.flags & LK_UNALIGNED, x);
}

__device__ __forceinline__ float lokr_sigma(const lk_view &sg, int ct) { return sg.p ? round_to(vload(sg, 0, 0), ct) : 1.0f; }

/* lokr_halves.cu */
int lokr_halves_build(const lk_lokr_args *a, lk_carve &cv, lokr_halves *h, bool bypass, cudaStream_t s);
/* W1 only (W1d, W1s, the w1 factor copies; the W2 fields stay NULL): what lokr_tc.cu and
   lokr_chain_w1 read */
int lokr_halves_build_w1(const lk_lokr_args *a, lk_carve &cv, lokr_halves *h, cudaStream_t s);
lokr_dev lokr_dev_of(const lk_lokr_args *a, const lokr_halves *h, bool merge);
void lokr_grads_carve(const lk_lokr_args *a, lk_carve &cv, lokr_grads *g);
int lokr_chain(const lk_lokr_args *a, const lokr_halves *h, const lokr_grads *g, const float *pw1, i64 z1, const float *pw2,
               i64 z2, double scale1, const lk_view &sigma1, cudaStream_t s);
/* out (1×1) = scale·Σ parts[0..n) (one block, fixed summation order) */
int lokr_sum_store(const double *parts, i64 n, const lk_view &out, double scale, cudaStream_t s);

/* lokr_lowrank.cu: the low-rank-W2 linear bypass (false: take the general path) */
bool lokr_lr_fwd_ok(const lk_lokr_args *a);
bool lokr_lr_bwd_ok(const lk_lokr_args *a);
int lokr_lr_bypass_fwd(const lk_lokr_args *a, cudaStream_t s);
int lokr_lr_bypass_bwd(const lk_lokr_args *a, cudaStream_t s);
/* lokr_tc.cu: the same bypass (plain low-rank W2, linear, 16-bit CT) on the tensor cores through
   lowrank.cu's kernels (false: take lokr_lowrank.cu or the general path) */
bool lokr_tc_fwd_ok(const lk_lokr_args *a, const lk_device *dev);
bool lokr_tc_bwd_ok(const lk_lokr_args *a, const lk_device *dev);
int lokr_tc_bypass_fwd(const lk_lokr_args *a, const lk_device *dev, cudaStream_t s);
int lokr_tc_bypass_bwd(const lk_lokr_args *a, const lk_device *dev, cudaStream_t s);
/* lokr_halves.cu: G_W1 (fp64, scaled) → gw1, or gw1a / gw1b */
int lokr_chain_w1(const lk_lokr_args *a, const lokr_halves *h, const double *G1, cudaStream_t s);
/* lokr_bypass.cu: dy0 = RN(RN_CT(dy)), or 0 with delta-only */
int lokr_dy0_copy(const lk_lokr_args *a, cudaStream_t s);

#endif
