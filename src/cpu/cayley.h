/*
 * cayley.h — helpers of the fused CPU kernels of the OFT family (Diag-OFT, BOFT; ALGORITHMS.md
 * §2.4, §2.5): the fp32 Cayley transform with the norm constraint and its adjoint, and the
 * channel-row tile I/O both algorithms use.
 *
 * Cayley, for a stack of nblk square blocks B_k (n×n each, compact row-major, values already
 * rounded to the compute dtype):
 *
 *   Q0_k = B_k − B_kᵀ                       ν = ‖Q0‖_F + 1e-8 (ONE norm over all blocks)
 *   Q    = s·Q0, s = κc/ν when κc > 0 and ν > κc ("active"), else s = 1
 *                                            (‖Q0‖² summed in fp64 and Q = RN_f32(Q0·s) with s in
 *                                            fp64: s scales every element of R − I, so its error is
 *                                            a systematic relative error of the whole delta — a
 *                                            per-block fp32 sum gave 19.8 ULP on a Diag-OFT delta
 *                                            merge against a budget of 15.2, seed 2626817107)
 *   A_k  = (I − Q_k)^{-1}                   (fp32 Gauss–Jordan with partial pivoting;
 *                                            I − Q is well conditioned for a skew Q: ‖A‖₂ ≤ 1)
 *   R_k  = (I + Q_k)·A_k = 2·A_k − I = I + 2·A_k·Q_k
 *
 * R − I is kept as 2·A·Q (accurate relative to Q when R is near I, which the delta forms
 * W'' − W use). A and R − I each get one step of iterative refinement (residuals I − (I − Q)·A
 * and 2Q − (I − Q)·(R − I), accumulated in double, corrections applied in fp32): plain fp32
 * Gauss–Jordan leaves errors up to ~8 ulp in R, which BOFT compounds over its M stages (the
 * 1280/b10/M=8 row: 25 ulp max on the merged delta instead of 15); refined, R is within ~1.5 ulp.
 * Adjoint, from G_R:
 *
 *   G_Q_k = (I + R_k)ᵀ·G_R_k·A_kᵀ = 2·A_kᵀ·G_R_k·A_kᵀ
 *   active: G_Q0 = s·G_Q − (κc/ν²)·⟨G_Q, Q0⟩·Q0/‖Q0‖          else G_Q0 = G_Q
 *   G_B_k = G_Q0_k − G_Q0_kᵀ
 *
 * Products accumulate in fp32, except these small once-per-call computations, done in double
 * (O(nblk·n³), negligible next to the streaming pass): ‖Q0‖² (over fp32 per-block partial
 * sums), the refinement residuals, and the whole adjoint from G_R to G_B, rounded once (G_B
 * keeps only the skew part of G_Q, minus a multiple of Q0 when the constraint is active: much
 * smaller than G_Q at times, so roundings on the way are amplified — fp32 took a BOFT gradient
 * row from 15 to 23 ulp, over its budget).
 * Memory: 3·nblk·n² floats for the state, 3·n² floats and 3·n² doubles of scratch per thread;
 * (nblk + 3·threads)·n² doubles in the adjoint.
 *
 * Channel-row tiles. A row map acts on the O channel rows of X: merge X = W̄ (O × I·K), bypass
 * X = y0 seen as O × (tokens·spatial). A tile is rows [o0, o0+nr) × columns [j0, j0+w), held in
 * fp32 as nr × w (row-major, ld = w). Conv tiles never straddle two images (columns of one image
 * are one contiguous run per channel); linear-bypass tiles are transposed on load/store (tokens
 * hold channels contiguously): compact views through rot.h's register transposes, others element
 * by element.
 */
#ifndef LYCO_CPU_CAYLEY_H
#define LYCO_CPU_CAYLEY_H

#include "cpu.h"

typedef struct {
    int64_t nblk, n;
    double kc;          /* κc as given (≤ 0: no constraint) */
    double q0norm;      /* ‖Q0‖_F */
    float scale;        /* s */
    bool active;
    float *Q0;          /* B − Bᵀ               (nblk·n·n) */
    float *A;           /* (I − Q)^{-1}          (nblk·n·n) */
    float *Rm1;         /* R − I = 2·A·Q         (nblk·n·n) */
} cpu_cayley;

/* Fills cy from B (nblk·n·n floats); LYCO_ERR_NOMEM on allocation failure (cy is then freeable). */
lyco_status cpu_cayley_fwd(cpu_cayley *cy, const float *B, int64_t nblk, int64_t n, double kc);
/* GB = ∂L/∂B (assigned, nblk·n·n) from GR = ∂L/∂R. */
lyco_status cpu_cayley_bwd(const cpu_cayley *cy, const float *GR, float *GB);
void cpu_cayley_free(cpu_cayley *cy);

/* ---- channel-row tiles ---- */
typedef enum { CPU_OFT_MERGE, CPU_OFT_LINEAR, CPU_OFT_CONV } cpu_oft_kind;

typedef struct {
    cpu_view v;
    cpu_oft_kind kind;
    int64_t O;
    int64_t sp;         /* conv: positions per image; else 1 */
    int64_t n;          /* columns of the rows layout: I·K (merge), tokens (linear), N·sp (conv) */
} cpu_oft_io;

/* t is W̄-shaped (merge: W, out, d_out) or y-shaped (bypass: y0, y, dy, dy0). */
void cpu_oft_io_init(cpu_oft_io *io, const lyco_call *c, const DLTensor *t);
/* Column tiles of width ≤ tw (conv tiles stay inside one image). */
int64_t cpu_oft_ntiles(const cpu_oft_io *io, int64_t tw);
void cpu_oft_tile(const cpu_oft_io *io, int64_t tw, int64_t b, int64_t *j0, int64_t *w);
/* X (nr × w) = rows [o0, o0+nr) × columns [j0, j0+w), rounded through T. tmp: nr floats. */
void cpu_oft_load(const cpu_oft_io *io, int64_t o0, int64_t nr, int64_t j0, int64_t w, lyco_dtype T, float *X, float *tmp);
void cpu_oft_store(const cpu_oft_io *io, int64_t o0, int64_t nr, int64_t j0, int64_t w, const float *X, float *tmp);
/* The address of channel row o at column j0 when the tensor is addressed in place (merge and conv
   tiles of a compact view: a row's columns of one tile are contiguous), else NULL. */
char *cpu_oft_row(const cpu_oft_io *io, int64_t o, int64_t j0);

#endif
