/*
 * cases_full.c — Full ("diff") rows of the case table and their builder (ALGORITHMS.md §2.9):
 * linear and conv, with and without diff_b (CASE_BIAS), multiplier ≠ 1, module dropout, strided
 * and unaligned operands, one realistic size. diff has W's shape O×(I/g)×k; diff_b is (O).
 *
 * Grouped convs: extra[0] = groups (0/1 = none); the builder then makes the layer grouped. The
 * check runner still sizes W as O×I×k (check.c weight_shape), so the grouped row stays off until
 * it sizes W from the built layer (O×(I/g)×k) and bypass of grouped Full is either accepted by
 * validate.c or skipped by the runner — set FULL_GROUPED_ROWS to 1 then.
 */
#include "check.h"

#define FULL_GROUPED_ROWS 1

#define K1 {1, 1, 1}
const lyco_case lyco_cases_full[] = {
    {.name = "full_linear", .algo = LYCO_ALGO_FULL, .O = 24, .I = 20, .tokens = 7, .multiplier = 0.8},
    {.name = "full_linear_bias", .algo = LYCO_ALGO_FULL, .O = 17, .I = 13, .tokens = 6, .multiplier = 1.5, .opts = CASE_BIAS},
    {.name = "full_conv2d_3x3_s2p1_bias", .algo = LYCO_ALGO_FULL, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 8, .I = 6,
     .k = {3, 3, 1}, .stride = {2, 2, 1}, .pad = {1, 1, 0}, .dil = K1, .tokens = 2, .spatial = {7, 6, 1}, .opts = CASE_BIAS},
    {.name = "full_conv1d_dilated", .algo = LYCO_ALGO_FULL, .kind = LYCO_LAYER_CONV, .conv_dims = 1, .O = 6, .I = 5,
     .k = {3, 1, 1}, .stride = {1, 1, 1}, .pad = {2, 0, 0}, .dil = {2, 1, 1}, .tokens = 3, .spatial = {9, 1, 1}, .multiplier = 0.7},
    {.name = "full_linear_strided_bias", .algo = LYCO_ALGO_FULL, .O = 12, .I = 10, .tokens = 5, .opts = CASE_NONCONTIG | CASE_BIAS},
    {.name = "full_conv2d_unaligned", .algo = LYCO_ALGO_FULL, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 5, .I = 4,
     .k = {3, 2, 1}, .stride = {1, 2, 1}, .pad = {1, 0, 0}, .dil = K1, .tokens = 2, .spatial = {6, 5, 1}, .opts = CASE_UNALIGNED},
    {.name = "full_linear_bias_module_drop", .algo = LYCO_ALGO_FULL, .O = 8, .I = 6, .tokens = 3, .opts = CASE_BIAS | CASE_MODULE_DROP},
#if FULL_GROUPED_ROWS
    {.name = "full_conv2d_groups3_bias", .algo = LYCO_ALGO_FULL, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 9, .I = 6,
     .k = {3, 3, 1}, .stride = {1, 1, 1}, .pad = {1, 1, 0}, .dil = K1, .tokens = 2, .spatial = {5, 4, 1}, .multiplier = 0.9,
     .extra = {3}, .opts = CASE_BIAS},
#endif
    {.name = "full_linear_2048x1024_bias", .algo = LYCO_ALGO_FULL, .O = 2048, .I = 1024, .tokens = 32, .opts = CASE_BIAS, .tier = 1},
};
const int lyco_cases_full_count = (int)(sizeof lyco_cases_full / sizeof lyco_cases_full[0]);

bool case_build_full(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    int64_t g = c->kind == LYCO_LAYER_CONV && c->extra[0] > 1 ? c->extra[0] : 1;
    int64_t sh[5] = {c->O, c->I / g};
    int nd = 2;
    if (c->kind == LYCO_LAYER_CONV) {
        int64_t k[3], s[3], p[3], dl[3];
        for (int i = 0; i < 3; i++) {
            k[i] = c->k[i] ? c->k[i] : 1;
            s[i] = c->stride[i] ? c->stride[i] : 1;
            p[i] = c->pad[i];
            dl[i] = c->dil[i] ? c->dil[i] : 1;
        }
        if (g > 1 && lyco_layer_conv(&ca->a.layer, c->conv_dims, c->O, c->I, k, s, p, dl, g) != LYCO_OK) return false;
        for (int i = 0; i < c->conv_dims; i++) sh[2 + i] = k[i];
        nd = 2 + c->conv_dims;
    }
    if (!case_slot(ca, LYCO_DIFF, d, nd, sh, c->opts, rng, 1.0)) return false;
    if (c->opts & CASE_BIAS) {
        int64_t o = c->O;
        if (!case_slot(ca, LYCO_DIFF_B, d, 1, &o, c->opts, rng, 1.0)) return false;
    }
    return true;
}
