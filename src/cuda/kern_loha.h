/*
 * kern_loha.h — the plain-C interface of LoHa's CUDA kernels (loha.cu, loha_bypass.cu), used by
 * dispatch_loha.c. LoHa (ALGORITHMS.md §2.2): ΔW̄ = ρ_o·(R_1 ⊙ R_2), R_t = Ā_t·B̄_t (O × I·K),
 * ρ_o = s'·q_o (s' = s, or s² under the upstream merge scale; q_o the output-row rank mask).
 *
 * Operands are kern.h's 2-D strided views:
 *   Ā_t (O × r_t): hada_w*_a (plain), or the transposed view of the Tucker r_t × O factor;
 *   B̄_t (r_t × I·K): hada_w*_b (plain; conv r×I×k collapses to r × I·K); Tucker: the raw
 *       hada_w*_b (r_t × I) — the launcher forms P_t[i, c·K+κ] = Σ_j T_t[i,j,κ]·B_t[j,c] once
 *       (fp64 sums, rounded once to fp32, into scratch) and points B̄_t at it (b_exact = 1);
 *   T_t (r_t × r_t·K): the Tucker cores hada_t* (p NULL = plain);
 *   gradients of Ā_t as O × r_t views (Tucker: the transposed view of the r_t × O gradient).
 * Bypass activations (lk_act / lk_geo of kern_glora.h): x N×I×sp_in, y / y0 / dy N×O×sp_out
 * (linear: N = tokens, geo.nd = 0). dy0 is written by the dispatcher (lk_copy_round).
 * Scalars: s' and m as doubles; σs on the device (p NULL = 1, also under the upstream merge
 * scale, which drops σs), rounded to the compute dtype as the products see it.
 */
#ifndef LYCO_CUDA_KERN_LOHA_H
#define LYCO_CUDA_KERN_LOHA_H

#include "cuda/kern.h"
#include "cuda/kern_glora.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t ct;               /* compute dtype */
    int64_t O, I, K, IK;      /* IK = I·K (K = 1 for linear) */
    int64_t r1, r2;           /* ranks of the two terms */
    lk_view A1, A2;           /* Ā_t, O × r_t */
    lk_view B1, B2;           /* B̄_t, r_t × IK (Tucker: raw B_t, r_t × I, until the launcher swaps in P_t) */
    lk_view T1, T2;           /* Tucker cores, r_t × r_t·K (p NULL = plain) */
    int32_t tucker;
    int32_t b_exact;          /* B̄_t is an fp32 intermediate: used as is, not rounded to the compute dtype */
    lk_view mask;             /* q_o (1×O); p NULL = none */
    lk_view sigma;            /* σs (1×1); p NULL = 1 */
    double s, m;              /* s' (s, or s² under the upstream merge scale) and the multiplier */
} lk_loha;

typedef struct {
    lk_loha L;
    lk_dora dora;             /* merge directions only */
    int32_t mode;             /* merge forward: lyco_merge_mode */
    lk_view W, out, G;        /* merge: base weight (may be absent in delta mode without DoRA), W'' / ΔW, ∂L/∂W'' */
    lk_view gA1, gA2;         /* ∂L/∂Ā_t (O × r_t views; p NULL = not wanted) */
    lk_view gB1, gB2;         /* ∂L/∂hada_w*_b (plain r_t × IK; Tucker r_t × I) */
    lk_view gT1, gT2;         /* ∂L/∂hada_t* (r_t × r_t·K) */
    lk_view gsigma;           /* ∂L/∂σs (1×1) */
    int32_t sigma_zero;       /* upstream merge scale: σs is not part of ΔW, its gradient is 0 */
    int64_t T;                /* bypass: tokens (linear) or batch N (conv) */
    lk_geo geo;               /* bypass conv geometry (nd = 0: linear) */
    lk_act x, y, y0, dy, dx;  /* bypass activations (y0 p NULL = write Δ alone; dx p NULL = not wanted) */
    int32_t legacy;           /* LYCO_CUDA_LOHA_LEGACY=1: the H200-verified kernels only (merge forward: fp64 tiles everywhere) */
} lk_loha_args;

int lk_loha_merge_fwd(const lk_loha_args *a, const lk_device *dev, void *stream);
int lk_loha_merge_bwd(const lk_loha_args *a, const lk_device *dev, void *stream);
int lk_loha_bypass_fwd(const lk_loha_args *a, const lk_device *dev, void *stream);
int lk_loha_bypass_bwd(const lk_loha_args *a, const lk_device *dev, void *stream);

/* Internal, shared by loha.cu and loha_bypass.cu. Tucker: forms P_t (r_t × IK fp32, fp64 sums) at
   P1, P2 (sizes lk_loha_tucker_floats) and points L's B̄_t at them (b_exact = 1); plain: no-op. */
int64_t lk_loha_tucker_floats(const lk_loha *L);
int lk_loha_tucker_prep(lk_loha *L, float *P, void *stream);
/* Bypass backward's dx = dy·E (conv: the transposed conv with E), E = m·σs·ΔW̄ generated per tile. */
int lk_loha_bypass_dx(const lk_loha_args *a, void *stream);
/* Tucker's chain after G_P_t (r_t × IK fp32 at GP, G_P_2 after G_P_1): G_B_t and G_T_t into a's
   gradients; a carries the raw (unprepped) B_t views. */
int lk_loha_tucker_grads(const lk_loha_args *a, const float *GP, void *stream);

/* loha_fs.cu: the bypass through the rank-r1·r2 face-splitting form (see its header). wanted:
   the rule that picks it over the tile path (loha_bypass.cu) at this shape; bwd: dx and every
   parameter gradient (dy0 is the dispatcher's). */
int lk_loha_fs_wanted(const lk_loha_args *a);
int lk_loha_fs_bypass_fwd(const lk_loha_args *a, void *stream);
int lk_loha_fs_bypass_bwd(const lk_loha_args *a, void *stream);
/* The same form on the tensor cores (bf16 compute, linear layers; gemm.cu's products over K̃, M̃, h
   and gh materialised in bf16): wanted = applies here and the rule favours it over loha_tc.cu's
   dense route (or LYCO_CUDA_LOHA_FS_TC=1 pins it wherever it applies; =0 turns it off). */
int lk_loha_fs_tc_wanted(const lk_loha_args *a, const lk_device *dev);
int lk_loha_fs_tc_bypass_fwd(const lk_loha_args *a, const lk_device *dev, void *stream);
int lk_loha_fs_tc_bypass_bwd(const lk_loha_args *a, const lk_device *dev, void *stream);
/* LYCO_CUDA_LOHA_NO_TC=1: no tensor-core LoHa path (A/B against the FFMA kernels). */
int lk_loha_tc_off(void);

/* loha_tc.cu: the tensor-core paths for 16-bit compute (see its header for when they apply): run the
   call and set *done, or leave *done = 0 for the kernels above. */
int lk_loha_tc_merge_fwd(const lk_loha_args *a, const lk_device *dev, void *stream, int *done);
int lk_loha_tc_bypass_fwd(const lk_loha_args *a, const lk_device *dev, void *stream, int *done);
int lk_loha_tc_merge_bwd(const lk_loha_args *a, const lk_device *dev, void *stream, int *done);
int lk_loha_tc_bypass_bwd(const lk_loha_args *a, const lk_device *dev, void *stream, int *done);

/* loha_grad_onepass.cu: the merge backward's partials from one read of Γ (see its header for when
   it applies). plan_make fills p (p->on = 1 when the kernel takes the call): x column regions and
   y row regions of partials (part_A_t: x·O·r_t floats, part_B_t: y·r_t·IK, σs: x·y doubles);
   launch writes them (parts: ∂Ā_1, ∂Ā_2, ∂B̄_1, ∂B̄_2, NULL = not wanted; sigpart NULL = no σs). */
typedef struct {
    int32_t on, rp, nc, ns, stages, occ, sh;
    int64_t x, y;
} lk_loha_mb1_plan;
int lk_loha_mb1_plan_make(const lk_loha_args *a, const lk_device *dev, lk_loha_mb1_plan *p);
int lk_loha_mb1_launch(const lk_loha_args *a, const lk_loha_mb1_plan *p, float *const *parts, double *sigpart, void *stream);

#ifdef __cplusplus
}
#endif
#endif
