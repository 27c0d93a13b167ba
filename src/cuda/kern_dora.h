/*
 * kern_dora.h — plain-C interface between dispatch_locon.c and dora_bypass.cu: LoRA/LoCon with
 * DoRA in bypass on linear layers (ALGORITHMS.md §1.6, §2.1), forward and backward, without ΔW.
 */
#ifndef LYCO_CUDA_KERN_DORA_H
#define LYCO_CUDA_KERN_DORA_H

#include "cuda/kern.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LoRA/LoCon + DoRA in bypass on a linear layer (dora_bypass.cu): forward writes y (y0 p NULL =
   Δ alone); backward writes dx, gU, gD, gsigma and dora.grad_d (each p NULL = not wanted; dy0 is
   the dispatcher's). Sizes: O, I (L.IK), tokens T each ≤ 65535·64 (the dispatcher checks). */
typedef struct {
    lk_locon L;
    lk_dora dora;
    lk_view W;               /* base weight O×I */
    lk_view x, y0, y;        /* forward */
    lk_view dy, dx;          /* backward */
    lk_view gU, gD, gsigma;
    int64_t T;               /* tokens */
    int32_t bwd;
    int32_t ffma;            /* LYCO_CUDA_DORA_FFMA: 1 every product on CUDA cores (the A/B switch); 2 the products
                                with an fp32 scratch operand on CUDA cores (no bf16 pieces) */
    int32_t verify;          /* LYCO_CUDA_DORA_VERIFY=1: each tensor-core product checked against CUDA cores */
} lk_dora_bypass_args;

int lk_dora_bypass(const lk_dora_bypass_args *a, const lk_device *dev, void *stream);

#ifdef __cplusplus
}
#endif
#endif
