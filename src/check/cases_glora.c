/*
 * cases_glora.c — GLoRA rows of the case table and their builder (ALGORITHMS.md §2.7): linear and
 * conv (1-d, 2-d with stride/padding/dilation), alpha ≠ r, σs, multiplier ≠ 1, the two bypass
 * rank masks (A path and B path, bypass only), strided and unaligned operands, and one realistic
 * size. Shapes: a1 I×r(×1…), a2 r×I(×1…), b1 O×r(×1…), b2 r×I×k.
 */
#include <math.h>

#include "check.h"

#define K1 {1, 1, 1}
const lyco_case lyco_cases_glora[] = {
    {.name = "glora_linear_r4", .algo = LYCO_ALGO_GLORA, .O = 24, .I = 20, .rank = 4, .tokens = 7, .alpha = 2},
    {.name = "glora_linear_scalar_masks_mult", .algo = LYCO_ALGO_GLORA, .O = 17, .I = 13, .rank = 5, .tokens = 6, .alpha = 3,
     .multiplier = 0.7, .opts = CASE_SCALAR | CASE_RANK_MASK},
    {.name = "glora_conv2d_3x3_s2p1_scalar", .algo = LYCO_ALGO_GLORA, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 8, .I = 6,
     .k = {3, 3, 1}, .stride = {2, 2, 1}, .pad = {1, 1, 0}, .dil = K1, .rank = 3, .tokens = 2, .spatial = {7, 6, 1},
     .alpha = 1.5, .opts = CASE_SCALAR},
    {.name = "glora_conv2d_dilated_masks", .algo = LYCO_ALGO_GLORA, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 5, .I = 4,
     .k = {3, 2, 1}, .stride = {1, 1, 1}, .pad = {2, 1, 0}, .dil = {2, 1, 1}, .rank = 2, .tokens = 2, .spatial = {6, 5, 1},
     .multiplier = 1.4, .opts = CASE_RANK_MASK},
    {.name = "glora_linear_strided", .algo = LYCO_ALGO_GLORA, .O = 12, .I = 10, .rank = 3, .tokens = 5, .opts = CASE_NONCONTIG},
    {.name = "glora_conv1d_unaligned", .algo = LYCO_ALGO_GLORA, .kind = LYCO_LAYER_CONV, .conv_dims = 1, .O = 6, .I = 5,
     .k = {3, 1, 1}, .stride = {1, 1, 1}, .pad = {1, 0, 0}, .dil = K1, .rank = 2, .tokens = 3, .spatial = {9, 1, 1},
     .alpha = 4, .opts = CASE_UNALIGNED},
    /* the CUDA merges' lean route (glora.cu: lowrank.cu's kernels for linear layers, r ≤ 64):
       odd sizes at odd addresses with σs and m ≠ 1; its upper rank; r = 65 takes the generic kernel */
    {.name = "glora_linear_unaligned_r7", .algo = LYCO_ALGO_GLORA, .O = 33, .I = 29, .rank = 7, .tokens = 5, .alpha = 5,
     .multiplier = 0.6, .opts = CASE_SCALAR | CASE_UNALIGNED | CASE_NONCONTIG},
    {.name = "glora_linear_r64", .algo = LYCO_ALGO_GLORA, .O = 72, .I = 80, .rank = 64, .tokens = 4, .alpha = 32,
     .opts = CASE_SCALAR},
    {.name = "glora_linear_r65", .algo = LYCO_ALGO_GLORA, .O = 70, .I = 66, .rank = 65, .tokens = 3, .alpha = 16},
    {.name = "glora_linear_1280_r16", .algo = LYCO_ALGO_GLORA, .O = 1280, .I = 1280, .rank = 16, .tokens = 64, .alpha = 8,
     .opts = CASE_SCALAR, .tier = 1},
};
const int lyco_cases_glora_count = (int)(sizeof lyco_cases_glora / sizeof lyco_cases_glora[0]);

bool case_scalar(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca); /* cases_locon.c */

/* (a, b) followed by the layer's kernel dims (or 1s): a×b×k, or a×b for linear */
static int glora_shape(const lyco_case *c, int64_t a, int64_t b, bool ones, int64_t *sh) {
    sh[0] = a;
    sh[1] = b;
    if (c->kind != LYCO_LAYER_CONV) return 2;
    for (int i = 0; i < c->conv_dims; i++) sh[2 + i] = ones ? 1 : c->k[i];
    return 2 + c->conv_dims;
}

/* Factors are uniform in ±1/√(length of the sum they enter), so ΔW stays O(1) at every size (W
   and x are ±1): with ±1 factors a 1280-wide layer overflows fp16 in the σs gradient. */
bool case_build_glora(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    int64_t sh[5], r = c->rank, K = 1;
    for (int i = 0; c->kind == LYCO_LAYER_CONV && i < c->conv_dims; i++) K *= c->k[i];
    double s_i = 1.0 / sqrt((double)c->I), s_r = 1.0 / sqrt((double)r), s_ik = 1.0 / sqrt((double)(c->I * K));
    int nd = glora_shape(c, c->I, r, true, sh);
    if (!case_slot(ca, LYCO_GLORA_A1, d, nd, sh, c->opts, rng, s_i)) return false;
    nd = glora_shape(c, r, c->I, true, sh);
    if (!case_slot(ca, LYCO_GLORA_A2, d, nd, sh, c->opts, rng, s_r)) return false;
    nd = glora_shape(c, c->O, r, true, sh);
    if (!case_slot(ca, LYCO_GLORA_B1, d, nd, sh, c->opts, rng, s_r)) return false;
    nd = glora_shape(c, r, c->I, false, sh);
    if (!case_slot(ca, LYCO_GLORA_B2, d, nd, sh, c->opts, rng, s_ik)) return false;
    if ((c->opts & CASE_RANK_MASK) && ca->bypass) /* GLoRA rank dropout exists in bypass only */
        if (!case_mask(ca, LYCO_RANK_MASK, r, rng) || !case_mask(ca, LYCO_RANK_MASK_B, r, rng)) return false;
    return case_scalar(c, d, rng, ca);
}
