/*
 * dylora.c — fp64 oracle of DyLoRA (ALGORITHMS.md §2.8), training semantics.
 *
 * The rank r is split into nb = r/bs blocks of bs ranks; t* + 1 = dims.dyl_blocks blocks are
 * active (blocks 0 … t*); with ρ = (t*+1)·bs the active rank:
 *
 *   ΔW̄[o, j] = s · Σ_{i<ρ} U[o,i]·D[i,j]          (j over I·K)
 *
 * s is resolved by shapes.c as α/(t*+1) (α/#active blocks, upstream's quirk), or the caller's
 * explicit scale. No σs, no masks; m is applied by ref.c.
 *
 * Gradients: blocks < t* are frozen (detached upstream) and blocks > t* unused, so only block t*
 * — ranks t*·bs … (t*+1)·bs − 1, i.e. those columns of U and rows of D — gets a gradient; every
 * other element's gradient is 0. With Γ = s·G (G = ∂L/∂ΔW̄, m already applied):
 *   G_U[o,i] = Σ_j Γ[o,j]·D[i,j],   G_D[i,j] = Σ_o U[o,i]·Γ[o,j]      for i in block t*.
 *
 * Shapes (compact): lora_down D r×(I·K) (r×I×k or r×(I·K)), lora_up U O×r (O×r or O×r×1…;
 * DyLoRA files store it 2-D even for conv). groups = 1 (shapes.c).
 */
#include "ref.h"

static void delta(const ref_adapter *ra, const double *W, double *dW) {
    (void)W;
    const lyco_dims *d = &ra->c->dims;
    int64_t r = d->r, rho = d->dyl_blocks * d->dyl_bs, IK = ra->IK;
    const double *U = ra->t[LYCO_LORA_UP], *D = ra->t[LYCO_LORA_DOWN];
    for (int64_t o = 0; o < d->O; o++)
        for (int64_t j = 0; j < IK; j++) {
            double s = 0.0;
            for (int64_t i = 0; i < rho; i++) s += U[o * r + i] * D[i * IK + j];
            dW[o * IK + j] = s * ra->c->s;
        }
}

static void delta_bwd(ref_adapter *ra, const double *W, const double *G) {
    (void)W;
    const lyco_dims *d = &ra->c->dims;
    int64_t r = d->r, IK = ra->IK, lo = (d->dyl_blocks - 1) * d->dyl_bs, hi = d->dyl_blocks * d->dyl_bs;
    const double *U = ra->t[LYCO_LORA_UP], *D = ra->t[LYCO_LORA_DOWN];
    double sc = ra->c->s;
    if (ra->g[LYCO_LORA_UP])
        for (int64_t o = 0; o < d->O; o++)
            for (int64_t i = lo; i < hi; i++) {
                double s = 0.0;
                for (int64_t j = 0; j < IK; j++) s += G[o * IK + j] * D[i * IK + j];
                ra->g[LYCO_LORA_UP][o * r + i] += sc * s;
            }
    if (ra->g[LYCO_LORA_DOWN])
        for (int64_t i = lo; i < hi; i++)
            for (int64_t j = 0; j < IK; j++) {
                double s = 0.0;
                for (int64_t o = 0; o < d->O; o++) s += U[o * r + i] * G[o * IK + j];
                ra->g[LYCO_LORA_DOWN][i * IK + j] += sc * s;
            }
}

const ref_algo ref_dylora = {.delta = delta, .delta_bwd = delta_bwd, .uses_sigma = false};
