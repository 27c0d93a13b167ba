/*
 * kern_lowrank.h — lowrank.cu's streaming kernels (expand, row reduction, column reduction) as
 * plain-C launch structs and functions over kern.h's views. They serve LoRA/LoCon for r ≤ 128:
 * merge forward (with DoRA), merge backward's d_up / d_down, bypass forward and backward
 * (locon.cu decides when; LYCO_CUDA_LOWRANK_LEGACY=1 sends those calls to locon.cu's older
 * kernels instead, for A/B and as a fallback).
 *
 * expand:  out[m, n] = epi(base[m, n], rowc_m · Σ_k RN_CT(P[m, k]) · RN_CT(Q[k, n]))
 *          (with a Hadamard pair P2, Q2: rowc_m · (P·Q)[m, n] · (P2·Q2)[m, n], LoHa's ΔW̄)
 *          rowc_m = (float)row_scale · (σ if sig_in_row) · q_m        (q = rowmask, or 1)
 *          mf     = (float)mult · (σ if sig_in_mult)                  (σ = RN_CT(σs), or 1)
 *          epi    = merge_ep.cuh's merge_elem(RN_CT(base), ·, mode, mf, DoRA statistics)
 *   Q is r×N, or given transposed (q_t: Q = Qtᵀ with Qt N×r, e.g. lora_up for the bypass).
 *   stats mode (stat_part ≠ NULL): nothing is written to out; Σ V² (V = RN_CT(base) + rowc·PQ)
 *   per row (dora.on_out) or per column goes to stat_part as per-tile fp32 partials:
 *   rows: stat_part[tile_n · M + m]; columns: stat_part[tile_m · N + n].
 *   DoRA's backward (G ≠ absent; lean kernel only, everything CT): in stats mode Σ g·V goes to
 *   stat_part_g beside Σ V²; with dora.on and st, out = GV = RN_CT(g·f − γ·V) (merge_ep.cuh's
 *   dora_gv), the gradient the factors' contractions read (lk_dora_gv runs both).
 * reduce:  part[z][m][i] = Σ_{k ∈ range z} RN_CT(A[m, k]) · RN_CT(B[i, k])   (fp32 partials, i < RP;
 *          B given r×K, or K×r for dy·U), then, bypass forward, h[m][i] = RN_CT(q_i · Σ_z part[z][m][i])
 *          (hfin; q = the rank mask), or, bypass backward, gh and h from two such sets (bwd_fin).
 */
#ifndef LYCO_CUDA_KERN_LOWRANK_H
#define LYCO_CUDA_KERN_LOWRANK_H

#include "cuda/kern.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t ct;              /* compute dtype */
    int64_t M, N, r;
    lk_view P;               /* M×r */
    int32_t p_split;         /* P is fp32 data entering the products as nsplit CT parts (not with q_t) */
    lk_view Q;               /* r×N, or N×r when q_t */
    int32_t q_t;
    lk_view base, out;       /* base p NULL = none (mode 1); out row-major (s1 = 1) */
    lk_view rowmask, sigma;  /* 1×M (p NULL = 1); σs 1×1 (p NULL = 1) */
    double row_scale, mult;
    int32_t sig_in_row, sig_in_mult;
    int32_t mode;            /* lyco_merge_mode: 0 base + mf·d, 1 mf·d, 2 base − mf·d */
    lk_dora dora;            /* DoRA epilogue (dora.on) with statistics st (3 floats per kept index) */
    int64_t K;               /* kernel positions per input channel (DoRA's kept index j / K) */
    const float *st;
    float *stat_part;        /* stats mode (see above) */
    /* LoHa's Hadamard pair (P2.p NULL = none; 16-bit CT, one part, Q not transposed): the product
       becomes (Σ_k RN_CT(P[m,k])·RN_CT(Q[k,n])) · (Σ_k RN_CT(P2[m,k])·RN_CT(Q2[k,n])), both sums fp32 */
    lk_view P2, Q2;          /* M×r2, r2×N */
    int64_t r2;
    lk_view G;               /* DoRA backward: g = ∂L/∂W'' (M×N, CT; p NULL = none) */
    float *stat_part_g;      /* DoRA backward stats mode: Σ g·V partials, laid out as stat_part */
} lk_expand_args;

/* Whether lk_expand can run a call (row-major out/base, r ≤ 128, grid limits); 0 = use another path. */
int lk_expand_fits(const lk_expand_args *a, const lk_device *dev);
/* Number of per-tile partials of the stats mode (tiles along N for rows, along M for columns), for
   the stats-mode args (out absent; stat_part may still be NULL). */
int64_t lk_expand_stat_tiles(const lk_expand_args *a);
int lk_expand(const lk_expand_args *a, const lk_device *dev, void *stream);
/* The common case of lk_expand on a lean kernel (expand_lean.cu: everything in the 16-bit compute
   dtype, row-major 16-byte-aligned views, no DoRA / stats / split P): runs it and sets *done, or
   leaves *done 0 for the general kernel. Same results bit for bit. The DoRA backward modes (G)
   exist only here. lk_expand_lean_fits: whether it would take the call (nothing launched). */
int lk_expand_lean(const lk_expand_args *a, const lk_device *dev, void *stream, int *done);
int lk_expand_lean_fits(const lk_expand_args *a, const lk_device *dev);
/* DoRA merge backward's source on the lean kernel: the statistics launch (Σ V², Σ g·V per-tile
   partials), lk_dora_finish_parts (statistics and ∂L/∂dora_scale), then GV = RN_CT(g·f − γ·V)
   into *gv, an M×N CT matrix this call allocates (row pitch a multiple of 8; the caller frees
   gv->p with lk_scratch_free, also on failure when non-NULL). e0: the merge forward's args (base W,
   P = up, Q = down, scalars, rowmask, dora, K); out unused. *done = 0 (nothing launched, gv->p
   NULL) when the lean kernel does not take the call. */
int lk_dora_gv(const lk_expand_args *e0, const lk_view *G, lk_view *gv, const lk_device *dev, void *stream, int *done);

/* The split reductions on lean kernels (reduce_lean.cu: A, B and copyA in the 16-bit compute dtype,
   row-major, 16-byte aligned rows; rank tile rp 16…128), with lowrank.cu's split (kper / mper, Z)
   and stage count S; *done = 0 when the call is not theirs (nothing launched). Partials as
   lowrank.cu's k_reduce / k_colreduce, bit for bit — except lk_reduce_lean's wide kernel (rank
   tiles 16, 32; LYCO_CUDA_REDUCE_WIDE=0 turns it off), which chooses its own split (*Zused ≤ Z
   partial sets) and sums in a different fixed order. The column reduction's wide tiles (rank
   tiles ≤ 64; LYCO_CUDA_COLREDUCE_WIDE=0 turns them off) keep the general kernel's sums. lk_reduce_lean_stage_bytes: one stage. */
int lk_reduce_lean_stage_bytes(int64_t rp, int kmajor, int column);
int lk_reduce_lean(int32_t ct, const lk_view *A, const lk_view *B, int b_kmajor, const lk_view *copyA, int64_t M, int64_t K,
                   int64_t rp, int64_t kper, int64_t Z, int S, float *part, int64_t *Zused, const lk_device *dev, void *stream,
                   int *done);
int lk_colreduce_lean(int32_t ct, const lk_view *A, const lk_view *B, int64_t M, int64_t N, int64_t rp, int64_t mper,
                      int64_t Z, int S, float *part, const lk_device *dev, void *stream, int *done);
/* A merge forward (out set, no stat_part): lk_expand, or with DoRA (dora.on; m = mult) the
   statistics launch, the statistics and the merge, with their scratch. */
int lk_expand_merge(const lk_expand_args *a, const lk_device *dev, void *stream);
/* DoRA's merge forward in one pass (dora_slab.cu: sm_90+, dora.on_out, the lean expand's views and
   ranks, no Hadamard pair; st and stat_part unset): runs it and sets *done, or leaves *done 0
   (nothing launched). Same results as the two-pass form, bit for bit. */
int lk_dora_slab(const lk_expand_args *a, const lk_device *dev, void *stream, int *done);

/* h = RN_CT(q ⊙ (A·Bᵀ)) into h (M×r view of CT scratch, row pitch rp = the rank tile); A M×K,
   B r×K; mask 1×r or absent. Scratch (partials) is allocated and freed on the stream. */
int lk_reduce_h(int32_t ct, const lk_view *A, const lk_view *B, const lk_view *mask, int64_t M, int64_t K, int64_t r,
                void *h, int64_t rp, const lk_device *dev, void *stream);
/* The partials alone: *part = Z·M·rp fp32 ([z][m][i], i < rp; stream-ordered scratch the caller frees
   with lk_scratch_free, also on failure when non-NULL). A M×K, B r×K (r ≤ rp), or K×r (b_kmajor). */
int lk_reduce_parts(int32_t ct, const lk_view *A, const lk_view *B, int b_kmajor, int64_t M, int64_t K, int64_t rp, float **part,
                    int64_t *Z, const lk_device *dev, void *stream);
/* Bypass backward's per-token values: gh = RN_CT(c·q ⊙ (dy·U)) and h = RN_CT(q ⊙ (x·Dᵀ)), both
   stored in CT, into T×RPo scratch (row pitch RPo ≥ the rank tile), dy0 = RN(dy) written from the staged dy tiles (dy0 p
   NULL: none), and nblocks fixed-order partials of dσs = s·m·Σ q ⊙ (dy·U) ⊙ (x·Dᵀ) into sigpart
   (NULL: not wanted). */
int lk_reduce_bypass_bwd(const lk_locon *L, const lk_view *x, const lk_view *dy, const lk_view *dy0, int64_t T, void *gh,
                         void *h, int64_t RPo, float *sigpart, int64_t nblocks, const lk_device *dev, void *stream);
/* out(i, n) (transpose: out(n, i)) = coef·σ'·Σ_m RN_CT(A[m, n])·B[m, i] for i < r ≤ 128: A M×N (the big
   operand: Γ, dy, x), B M×r (lora_up, h, or fp32 gh with b_split: entered as CT parts), σ' = RN_CT(σs)
   when sigma is given, else 1; split over m into fixed ranges, fp32 partials, fixed-order sum. */
int lk_colreduce(int32_t ct, const lk_view *A, const lk_view *B, int b_split, int64_t M, int64_t N, int64_t r, const lk_view *out,
                 int transpose, float coef, const lk_view *sigma, const lk_device *dev, void *stream);
/* Merge backward's Γ·Dᵀ and Uᵀ·Γ from one read of Γ (merge_bwd_onepass.cu: Γ, U, D in the 16-bit
   compute dtype, LK_VEC row-major, r ≤ 32): fp32 partials *part_up [z_up][O][rp] and *part_dn
   [z_dn][N][rp] (stream-ordered scratch the caller frees, also on failure, when non-NULL). *done = 0:
   not taken (nothing launched). */
int lk_merge_bwd_onepass(int32_t ct, const lk_view *G, const lk_view *U, const lk_view *D, int64_t O, int64_t N, int64_t r,
                         float **part_up, int64_t *z_up, float **part_dn, int64_t *z_dn, int64_t *rp, const lk_device *dev,
                         void *stream, int *done);
/* out(i, n) (transpose: out(n, i)) = coef·σ'·Σ_z part[z][n][i], i < r: lk_colreduce's finaliser. */
int lk_colfin(const float *part, int64_t Z, int64_t N, int64_t RP, int64_t r, const lk_view *out, int transpose, float coef,
              const lk_view *sigma, int32_t ct, void *stream);
/* The rank tile (row pitch of h) lk_reduce_h uses for rank r: 16, 32, 64 or 128; 0 = r > 128. */
int64_t lk_reduce_rank_tile(int64_t r);

#ifdef __cplusplus
}
#endif
#endif
