/*
 * cayley.h — the Cayley transform shared by the Diag-OFT and BOFT oracles (ALGORITHMS.md §2.4,
 * §2.5), in fp64, with its adjoint.
 *
 * For a stack of nblk square blocks B_k (n×n each, compact row-major, nblk·n·n values):
 *
 *   Q0_k = B_k − B_kᵀ                                  (skew-symmetric)
 *   ν    = ‖Q0‖_F + 1e-8                                (ONE Frobenius norm over all blocks)
 *   Q    = (κc/ν)·Q0  when κc > 0 and ν > κc  ("active"), else Q = Q0
 *   R_k  = (I + Q_k)(I − Q_k)^{-1}
 *
 * Adjoint, from G_R = ∂L/∂R (same layout):
 *
 *   G_Q_k  = (I + R_k)ᵀ · G_R_k · (I − Q_k)^{-ᵀ}
 *   active: G_Q0 = (κc/ν)·G_Q − (κc/ν²)·⟨G_Q, Q0⟩·Q0/‖Q0‖     (the gradient flows through ν)
 *   else:   G_Q0 = G_Q
 *   G_B_k  = G_Q0_k − G_Q0_kᵀ
 *
 * I − Q is always invertible for a skew-symmetric Q (its eigenvalues are 1 − iλ, |1 − iλ| ≥ 1),
 * so ‖(I − Q)^{-1}‖₂ ≤ 1 and the solve is well conditioned for any block values.
 *
 * Memory is the caller's (ref_cayley_size doubles), so this works inside the oracle's arena and
 * standalone (tests/c/test_oft_structure.c).
 */
#ifndef LYCO_REF_CAYLEY_H
#define LYCO_REF_CAYLEY_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int64_t nblk, n;     /* number of blocks, block size */
    double kc;           /* κc as given (≤ 0: no constraint) */
    double q0norm;       /* ‖Q0‖_F over all blocks */
    double scale;        /* Q = scale·Q0: κc/(‖Q0‖_F + 1e-8) when active, else 1 */
    bool active;         /* the constraint branch was taken */
    double *Q0;          /* B − Bᵀ                     (nblk·n·n) */
    double *Q;           /* the Q actually used        (nblk·n·n) */
    double *R;           /* the rotation               (nblk·n·n) */
    double *Ainv;        /* (I − Q)^{-1}               (nblk·n·n) */
    double *work;        /* scratch: nblk·n·n + 2·n·n */
} ref_cayley;

/* Doubles of memory ref_cayley_fwd needs for nblk blocks of n×n. */
int64_t ref_cayley_size(int64_t nblk, int64_t n);

/* Fills cy (its arrays carved from mem, ref_cayley_size(nblk, n) doubles) from the blocks B. */
void ref_cayley_fwd(ref_cayley *cy, double *mem, int64_t nblk, int64_t n, const double *B, double kc);

/* GB += ∂L/∂B given GR = ∂L/∂R (both nblk·n·n). Uses cy->work as scratch. Returns the skew
   projection's cancellation factor sqrt(Σ_{a≠b}(|G_Q0[a,b]| + |G_Q0[b,a]|)² / Σ_{a≠b}(G_B[a,b])²)
   (≥ 1; ~1.28 for independent entries; 1 when G_B is 0): G_B's rounding error scales with the
   terms, so its error in ULP of G_B's RMS grows with this factor. */
double ref_cayley_bwd(const ref_cayley *cy, const double *GR, double *GB);

#endif
