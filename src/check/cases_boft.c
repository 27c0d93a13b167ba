/*
 * cases_boft.c — BOFT rows of the case table and their builder (ALGORITHMS.md §2.5): linear,
 * conv1d/conv2d, block sizes 2..8, 1..4 butterfly stages (up to the full log2(nb)+1), rescale,
 * multiplier ≠ 1, the norm constraint off, active and inactive (one norm over the whole
 * M×nb×b×b tensor), module dropout, strided and unaligned operands, one realistic tier-1 size.
 *
 * `rank` is the block size b (even; nb = O/b a power of two); extra[0] is the number of stages M
 * (0 = the full log2(nb)+1); `constraint` is κc as the module passes it (already × O). Blocks are
 * uniform ±0.3: the expected ‖B − Bᵀ‖_F is sqrt(M·nb·b·(b−1)·0.06), at most
 * 0.6·sqrt(M·nb·b·(b−1)).
 */
#include "check.h"

#define K1 {1, 1, 1}
const lyco_case lyco_cases_boft[] = {
    {.name = "boft_linear_b2_nb8_m1", .algo = LYCO_ALGO_BOFT, .O = 16, .I = 6, .rank = 2, .tokens = 4, .extra = {1}},
    {.name = "boft_linear_b2_nb8_m2_mult", .algo = LYCO_ALGO_BOFT, .O = 16, .I = 5, .rank = 2, .tokens = 3,
     .multiplier = 0.6, .extra = {2}},
    {.name = "boft_linear_b2_nb8_m3_rescale", .algo = LYCO_ALGO_BOFT, .O = 16, .I = 7, .rank = 2, .tokens = 5,
     .opts = CASE_RESCALE, .extra = {3}},
    /* full butterfly; ‖Q0‖ ≈ 2.0 > κc = 0.5: the constraint branch is taken */
    {.name = "boft_linear_b2_nb8_m4_active", .algo = LYCO_ALGO_BOFT, .O = 16, .I = 6, .rank = 2, .tokens = 4,
     .constraint = 0.5, .multiplier = 0.85, .opts = CASE_RESCALE, .extra = {4}},
    /* ‖Q0‖ ≤ 0.6·sqrt(144) = 7.2 < κc = 30: the branch is not taken */
    {.name = "boft_linear_b4_nb4_m3_inactive", .algo = LYCO_ALGO_BOFT, .O = 16, .I = 9, .rank = 4, .tokens = 3,
     .constraint = 30, .extra = {3}},
    {.name = "boft_linear_b8_nb1_mult", .algo = LYCO_ALGO_BOFT, .O = 8, .I = 6, .rank = 8, .tokens = 4,
     .multiplier = 1.2, .opts = CASE_RESCALE, .extra = {1}},
    /* ‖Q0‖ ≈ 2.7 > κc = 0.5 */
    {.name = "boft_conv2d_b6_nb2_active", .algo = LYCO_ALGO_BOFT, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 12,
     .I = 4, .k = {3, 3, 1}, .stride = {1, 1, 1}, .pad = {1, 1, 0}, .dil = K1, .rank = 6, .tokens = 2,
     .spatial = {5, 4, 1}, .constraint = 0.5, .opts = CASE_RESCALE, .extra = {2}},
    {.name = "boft_conv1d_b2_nb4_m3_mult", .algo = LYCO_ALGO_BOFT, .kind = LYCO_LAYER_CONV, .conv_dims = 1, .O = 8,
     .I = 3, .k = {2, 1, 1}, .stride = {1, 1, 1}, .pad = {0, 0, 0}, .dil = K1, .rank = 2, .tokens = 3, .spatial = {6, 1, 1},
     .multiplier = 0.5, .extra = {3}},
    {.name = "boft_linear_b4_nb8_strided_unaligned", .algo = LYCO_ALGO_BOFT, .O = 32, .I = 7, .rank = 4, .tokens = 3,
     .multiplier = 0.9, .opts = CASE_RESCALE | CASE_NONCONTIG | CASE_UNALIGNED, .extra = {4}},
    {.name = "boft_linear_module_drop", .algo = LYCO_ALGO_BOFT, .O = 8, .I = 4, .rank = 2, .tokens = 2,
     .opts = CASE_MODULE_DROP, .extra = {2}},
    /* O = 512, the full butterflies: more stages than one CUDA stage-group launch holds (b 16:
       4 per launch of 128 rows, 6 stages; b 8: 5 per launch, 7 stages), so the multi-launch
       forward and the backward's replay from launch boundaries run */
    {.name = "boft_linear_512_b16_m6", .algo = LYCO_ALGO_BOFT, .O = 512, .I = 40, .rank = 16, .tokens = 37,
     .multiplier = 0.9, .opts = CASE_RESCALE},
    {.name = "boft_linear_512_b8_m7", .algo = LYCO_ALGO_BOFT, .O = 512, .I = 24, .rank = 8, .tokens = 19,
     .opts = CASE_RESCALE},
    /* SD-sized: power2factorization(1280, 16) = (10, 128), the full 8 stages */
    {.name = "boft_linear_1280_b10_m8", .algo = LYCO_ALGO_BOFT, .O = 1280, .I = 1280, .rank = 10, .tokens = 64,
     .opts = CASE_RESCALE, .tier = 1},
};
const int lyco_cases_boft_count = (int)(sizeof lyco_cases_boft / sizeof lyco_cases_boft[0]);

bool case_oft_rescale(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca); /* cases_diag_oft.c */

int64_t case_boft_stages(const lyco_case *c) {
    int64_t nb = c->O / c->rank, stages = c->extra[0];
    if (stages <= 0) {   /* the full butterfly: log2(nb) + 1 */
        stages = 1;
        while (((int64_t)1 << (stages - 1)) < nb) stages++;
    }
    return stages;
}

bool case_build_boft(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    int64_t b = c->rank, nb = c->O / c->rank, stages = case_boft_stages(c);
    int64_t sh[4] = {stages, nb, b, b};
    if (!case_slot(ca, LYCO_OFT_BLOCKS, d, 4, sh, c->opts, rng, 0.3)) return false;
    return case_oft_rescale(c, d, rng, ca);
}
