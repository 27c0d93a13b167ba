/*
 * cayley_f32.h — the Cayley transform of the Diag-OFT and BOFT eager twins (ALGORITHMS.md §2.4,
 * §2.5, §7), op by op as upstream's `get_r` runs in PyTorch eager, and its autograd adjoint.
 *
 * Forward (T = the call's compute dtype, standing for the dtype of oft_blocks; B in T):
 *
 *   Q0  = rnd_T(B − Bᵀ)                                  (a tensor op in the blocks' dtype)
 *   κc > 0:  qn  = rnd_T(√(Σ Q0²))                        (torch.norm: fp32 sum, result in T)
 *            qn2 = rnd_T(qn + f32(1e-8))
 *            active ⇔ qn2 > rnd_T(κc)                     (tensor > Python float compares in T)
 *            A   = rnd_T(Q0 · f32(κc)),  Q = rnd_T(A / qn2)
 *   else / inactive:  Q = Q0
 *   Ap = I + Q,  Am = I − Q                               (fp32: the identity is fp32)
 *   inv = Am^{-1}                                         (fp32 Gauss–Jordan, partial pivoting)
 *   R  = Ap · inv                                         (fp32, fp32 accumulation)
 *
 * Backward, from G_R (fp32), autograd's chain of the same ops:
 *
 *   G_Ap = G_R · invᵀ,  G_inv = Apᵀ · G_R,  G_Am = −(invᵀ · (G_inv · invᵀ))       (fp32)
 *   G_Q  = rnd_T(rnd_T(G_Ap) + rnd_T(−G_Am))              (the promotions' backward casts to T)
 *   active:  G_A   = rnd_T(G_Q / qn2)
 *            G_qn2 = rnd_T(Σ rnd_T(−G_Q · rnd_T(rnd_T(A / qn2) / qn2)))
 *            G_Q0  = rnd_T(rnd_T(G_A · f32(κc)) + rnd_T(rnd_T(Q0 / qn) · G_qn2))   (0 at qn = 0;
 *                    the norm's backward as torch computes it, matched on 4.1.3's bf16 goldens)
 *   else:    G_Q0  = G_Q
 *   G_B  = rnd_T(G_Q0 − G_Q0ᵀ)
 *
 * At T = fp32 every rnd_T is the identity and this is the plain fp32 chain.
 * Scratch comes from the call's arena (eg_alloc); on failure the functions return false at once.
 */
#ifndef LYCO_EAGER_CAYLEY_F32_H
#define LYCO_EAGER_CAYLEY_F32_H

#include "eager.h"

typedef struct {
    int64_t nblk, n;   /* blocks of n×n, compact row-major */
    lyco_dtype T;
    double kc;         /* κc as given (≤ 0: no constraint) */
    bool active;       /* the constraint branch was taken */
    float qn, qn2;     /* rnd_T(‖Q0‖), rnd_T(qn + 1e-8) */
    float *Q0;         /* rnd_T(B − Bᵀ) */
    float *A;          /* rnd_T(Q0·κc) (active only) */
    float *Q;          /* the Q used */
    float *Ap;         /* I + Q (fp32) */
    float *inv;        /* (I − Q)^{-1} (fp32) */
    float *R;          /* (I + Q)(I − Q)^{-1} (fp32) */
} eg_cayley;

/* Fills cy from the blocks B (nblk·n·n values in T) and κc; false when out of memory. */
bool eg_cayley_fwd(const eg_adapter *ea, eg_cayley *cy, const float *B, int64_t nblk, int64_t n, double kc);

/* GB = ∂L/∂B (values in T, assigned) from GR = ∂L/∂R (fp32); false when out of memory. */
bool eg_cayley_bwd(const eg_adapter *ea, const eg_cayley *cy, const float *GR, float *GB);

#endif
