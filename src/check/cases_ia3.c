/*
 * cases_ia3.c — (IA)³ rows of the case table and their builder (ALGORITHMS.md §2.6): output and
 * input mode on linear and conv (1-d, 2-d with stride/padding/dilation), multiplier ≠ 1, module
 * dropout, strided and unaligned operands, and one realistic input-mode MLP projection.
 * The weight is (D) for linear and (1, D, 1, …) for conv, the file layout; D = I on input, else O.
 */
#include "check.h"

#define K1 {1, 1, 1}
const lyco_case lyco_cases_ia3[] = {
    {.name = "ia3_linear_out", .algo = LYCO_ALGO_IA3, .O = 24, .I = 20, .tokens = 7, .multiplier = 0.8},
    {.name = "ia3_linear_in", .algo = LYCO_ALGO_IA3, .O = 17, .I = 13, .tokens = 6, .opts = CASE_ON_INPUT},
    {.name = "ia3_conv2d_out_s2p1", .algo = LYCO_ALGO_IA3, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 8, .I = 6,
     .k = {3, 3, 1}, .stride = {2, 2, 1}, .pad = {1, 1, 0}, .dil = K1, .tokens = 2, .spatial = {7, 6, 1}, .multiplier = 1.3},
    {.name = "ia3_conv2d_in_dilated", .algo = LYCO_ALGO_IA3, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 5, .I = 4,
     .k = {3, 2, 1}, .stride = {1, 1, 1}, .pad = {2, 1, 0}, .dil = {2, 1, 1}, .tokens = 2, .spatial = {6, 5, 1},
     .multiplier = 0.6, .opts = CASE_ON_INPUT},
    {.name = "ia3_linear_out_strided", .algo = LYCO_ALGO_IA3, .O = 12, .I = 10, .tokens = 5, .opts = CASE_NONCONTIG | CASE_NO_Y0},
    {.name = "ia3_conv1d_in_unaligned", .algo = LYCO_ALGO_IA3, .kind = LYCO_LAYER_CONV, .conv_dims = 1, .O = 6, .I = 5,
     .k = {3, 1, 1}, .stride = {1, 1, 1}, .pad = {1, 0, 0}, .dil = K1, .tokens = 3, .spatial = {9, 1, 1},
     .opts = CASE_ON_INPUT | CASE_UNALIGNED},
    {.name = "ia3_linear_out_module_drop", .algo = LYCO_ALGO_IA3, .O = 8, .I = 6, .tokens = 3, .opts = CASE_MODULE_DROP},
    {.name = "ia3_linear_in_768x3072", .algo = LYCO_ALGO_IA3, .O = 768, .I = 3072, .tokens = 64, .opts = CASE_ON_INPUT, .tier = 1},
};
const int lyco_cases_ia3_count = (int)(sizeof lyco_cases_ia3 / sizeof lyco_cases_ia3[0]);

bool case_build_ia3(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    bool on_input = c->opts & CASE_ON_INPUT;
    int64_t D = on_input ? c->I : c->O, sh[5];
    int nd = 1;
    ca->a.ia3_on_input = on_input ? 1 : 0;
    if (c->kind == LYCO_LAYER_CONV) {
        sh[0] = 1;
        sh[1] = D;
        for (int i = 0; i < c->conv_dims; i++) sh[2 + i] = 1;
        nd = 2 + c->conv_dims;
    } else {
        sh[0] = D;
    }
    return case_slot(ca, LYCO_IA3_WEIGHT, d, nd, sh, c->opts, rng, 1.0);
}
