/*
 * cases_dylora.c — DyLoRA rows of the case table and their builder (ALGORITHMS.md §2.8): block
 * sizes 2–4, the active block count t*+1 below the total and equal to it (0 = all), linear and
 * conv, alpha, multiplier, strided and unaligned operands, one realistic size.
 * extra[0] = block size bs, extra[1] = active blocks (0 = all). Shapes: lora_down r×I×k, lora_up
 * O×r (2-D even for conv, as DyLoRA files store it).
 *
 * Rows with t* > 0 have frozen blocks (value used, gradient 0); lyco_check_grad probes only block
 * t* and asserts the frozen blocks' gradients are exactly 0.
 */
#include "check.h"

#define K1 {1, 1, 1}
const lyco_case lyco_cases_dylora[] = {
    {.name = "dylora_linear_bs2_1of3", .algo = LYCO_ALGO_DYLORA, .O = 20, .I = 16, .rank = 6, .tokens = 7, .alpha = 4,
     .extra = {2, 1}},
    {.name = "dylora_linear_bs4_all1_mult", .algo = LYCO_ALGO_DYLORA, .O = 17, .I = 13, .rank = 4, .tokens = 5,
     .multiplier = 0.6, .extra = {4, 0}},
    {.name = "dylora_conv2d_bs3_1of2", .algo = LYCO_ALGO_DYLORA, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 8, .I = 6,
     .k = {3, 3, 1}, .stride = {2, 2, 1}, .pad = {1, 1, 0}, .dil = K1, .rank = 6, .tokens = 2, .spatial = {7, 6, 1},
     .alpha = 2, .extra = {3, 1}},
    {.name = "dylora_linear_strided_bs2_1of2", .algo = LYCO_ALGO_DYLORA, .O = 12, .I = 10, .rank = 4, .tokens = 5,
     .extra = {2, 1}, .opts = CASE_NONCONTIG},
    {.name = "dylora_conv1d_unaligned_bs2_1of2", .algo = LYCO_ALGO_DYLORA, .kind = LYCO_LAYER_CONV, .conv_dims = 1, .O = 6,
     .I = 5, .k = {3, 1, 1}, .stride = {1, 1, 1}, .pad = {1, 0, 0}, .dil = K1, .rank = 4, .tokens = 3, .spatial = {9, 1, 1},
     .alpha = 3, .extra = {2, 1}, .opts = CASE_UNALIGNED},
    /* t* > 0: frozen blocks */
    {.name = "dylora_linear_bs2_2of4", .algo = LYCO_ALGO_DYLORA, .O = 20, .I = 16, .rank = 8, .tokens = 7, .alpha = 4,
     .extra = {2, 2}},
    {.name = "dylora_linear_bs4_all3", .algo = LYCO_ALGO_DYLORA, .O = 17, .I = 13, .rank = 12, .tokens = 5,
     .multiplier = 0.6, .extra = {4, 0}},
    {.name = "dylora_conv2d_bs2_all3", .algo = LYCO_ALGO_DYLORA, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 6, .I = 4,
     .k = {3, 2, 1}, .stride = {1, 1, 1}, .pad = {2, 1, 0}, .dil = {2, 1, 1}, .rank = 6, .tokens = 2, .spatial = {6, 5, 1},
     .alpha = 2, .extra = {2, 0}},
    {.name = "dylora_linear_1024x768_r16_3of4", .algo = LYCO_ALGO_DYLORA, .O = 1024, .I = 768, .rank = 16, .tokens = 64,
     .alpha = 8, .extra = {4, 3}, .tier = 1},
};
const int lyco_cases_dylora_count = (int)(sizeof lyco_cases_dylora / sizeof lyco_cases_dylora[0]);

bool case_build_dylora(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    int64_t sh[5] = {c->rank, c->I};
    int nd = 2;
    if (c->kind == LYCO_LAYER_CONV) {
        for (int i = 0; i < c->conv_dims; i++) sh[2 + i] = c->k[i];
        nd = 2 + c->conv_dims;
    }
    if (!case_slot(ca, LYCO_LORA_DOWN, d, nd, sh, c->opts, rng, 1.0)) return false;
    sh[0] = c->O;
    sh[1] = c->rank;
    if (!case_slot(ca, LYCO_LORA_UP, d, 2, sh, c->opts, rng, 1.0)) return false;
    ca->a.dylora_block_size = (int32_t)c->extra[0];
    ca->a.dylora_active_blocks = (int32_t)c->extra[1];
    return true;
}
