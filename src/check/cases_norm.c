/*
 * cases_norm.c — Norm rows of the case table and their builder (ALGORITHMS.md §2.10): LayerNorm
 * (x tokens×C) and GroupNorm (x N×C×spatial, groups in extra[0]; 1 group and C groups included),
 * with and without b_norm (CASE_BIAS), a channel mask (CASE_RANK_MASK, merge and bypass),
 * multiplier ≠ 1, strided and unaligned operands, realistic sizes. O = I = C; ε = 1e-5
 * (case_layer). Shapes: w_norm (C), b_norm (C), mask (C).
 */
#include "check.h"

const lyco_case lyco_cases_norm[] = {
    {.name = "norm_layernorm", .algo = LYCO_ALGO_NORM, .kind = LYCO_LAYER_NORM, .O = 24, .I = 24, .tokens = 7, .multiplier = 0.8},
    {.name = "norm_layernorm_bias_mask", .algo = LYCO_ALGO_NORM, .kind = LYCO_LAYER_NORM, .O = 20, .I = 20, .tokens = 6,
     .opts = CASE_BIAS | CASE_RANK_MASK},
    {.name = "norm_groupnorm_g4_bias", .algo = LYCO_ALGO_NORM, .kind = LYCO_LAYER_NORM, .O = 12, .I = 12, .tokens = 2,
     .spatial = {5, 3, 1}, .extra = {4}, .opts = CASE_GROUPNORM | CASE_BIAS},
    {.name = "norm_groupnorm_g2_mask_mult", .algo = LYCO_ALGO_NORM, .kind = LYCO_LAYER_NORM, .O = 16, .I = 16, .tokens = 3,
     .spatial = {4, 4, 1}, .extra = {2}, .multiplier = 1.3, .opts = CASE_GROUPNORM | CASE_RANK_MASK},
    {.name = "norm_groupnorm_g1_bias_mult", .algo = LYCO_ALGO_NORM, .kind = LYCO_LAYER_NORM, .O = 6, .I = 6, .tokens = 2,
     .spatial = {3, 5, 1}, .extra = {1}, .multiplier = 0.5, .opts = CASE_GROUPNORM | CASE_BIAS},
    {.name = "norm_layernorm_strided_bias", .algo = LYCO_ALGO_NORM, .kind = LYCO_LAYER_NORM, .O = 10, .I = 10, .tokens = 5,
     .opts = CASE_NONCONTIG | CASE_BIAS},
    {.name = "norm_groupnorm_instance_unaligned", .algo = LYCO_ALGO_NORM, .kind = LYCO_LAYER_NORM, .O = 6, .I = 6, .tokens = 2,
     .spatial = {4, 3, 1}, .extra = {6}, .opts = CASE_GROUPNORM | CASE_UNALIGNED | CASE_BIAS},
    /* y = Δ alone (LYCO_BYPASS_DELTA_ONLY): dy0 = 0, but dx still reads dy (the CUDA kernel read 0 for
       the mean terms: caught by these rows) */
    {.name = "norm_layernorm_delta_only", .algo = LYCO_ALGO_NORM, .kind = LYCO_LAYER_NORM, .O = 16, .I = 16, .tokens = 5,
     .multiplier = 0.9, .opts = CASE_NO_Y0 | CASE_BIAS},
    {.name = "norm_groupnorm_g2_delta_only", .algo = LYCO_ALGO_NORM, .kind = LYCO_LAYER_NORM, .O = 8, .I = 8, .tokens = 2,
     .spatial = {3, 4, 1}, .extra = {2}, .opts = CASE_GROUPNORM | CASE_NO_Y0},
    {.name = "norm_groupnorm_320_g32", .algo = LYCO_ALGO_NORM, .kind = LYCO_LAYER_NORM, .O = 320, .I = 320, .tokens = 2,
     .spatial = {32, 32, 1}, .extra = {32}, .opts = CASE_GROUPNORM | CASE_BIAS, .tier = 1},
    {.name = "norm_layernorm_768_77tok", .algo = LYCO_ALGO_NORM, .kind = LYCO_LAYER_NORM, .O = 768, .I = 768, .tokens = 77,
     .opts = CASE_BIAS, .tier = 1},
};
const int lyco_cases_norm_count = (int)(sizeof lyco_cases_norm / sizeof lyco_cases_norm[0]);

bool case_build_norm(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    int64_t C = c->O;
    if (!case_slot(ca, LYCO_W_NORM, d, 1, &C, c->opts, rng, 1.0)) return false;
    if ((c->opts & CASE_BIAS) && !case_slot(ca, LYCO_B_NORM, d, 1, &C, c->opts, rng, 1.0)) return false;
    if ((c->opts & CASE_RANK_MASK) && !case_mask(ca, LYCO_RANK_MASK, C, rng)) return false;
    return true;
}
