/*
 * cases_loha.c — LoHa rows of the case table and their builder (ALGORITHMS.md §2.2): linear,
 * conv1d/2d/3d (stride, padding, dilation), Tucker, different ranks of the two terms, the
 * output-row rank mask (merge and bypass), σs, multiplier ≠ 1, alpha ≠ rank, DoRA on both axes,
 * the upstream s² merge scale (CASE_COMPAT), odd sizes, strided and unaligned operands.
 *
 * Row fields used beyond the common ones: rank = r of the w1 term; extra[0] = r2 of the w2 term
 * (0 = same as rank); extra[1] = 1 stores the plain conv hada_w*_b as r×I×k (the functional
 * API's layout) instead of the module's r×(I·K) (the same memory either way).
 */
#include "check.h"

bool case_dora_scale(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca);
bool case_scalar(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca);

#define K1 {1, 1, 1}
#define CONV2(kh, kw) .kind = LYCO_LAYER_CONV, .conv_dims = 2, .k = {kh, kw, 1}
const lyco_case lyco_cases_loha[] = {
    {.name = "loha_linear_r4", .algo = LYCO_ALGO_LOHA, .O = 24, .I = 20, .rank = 4, .tokens = 9, .alpha = 2},
    {.name = "loha_linear_odd_mult_scalar_mask", .algo = LYCO_ALGO_LOHA, .O = 17, .I = 13, .rank = 5, .tokens = 7,
     .alpha = 3, .multiplier = 0.7, .opts = CASE_SCALAR | CASE_RANK_MASK},
    {.name = "loha_linear_ranks_3_6", .algo = LYCO_ALGO_LOHA, .O = 20, .I = 16, .rank = 3, .extra = {6}, .tokens = 5,
     .alpha = 1.5},
    /* the lean expand's Hadamard pair (16-byte rows): 77 rows = three 32-row tiles (the last
       partial), 264 columns = three 128-column tiles (the last 8 wide), σs, rank mask, m ≠ 1 */
    {.name = "loha_linear_lean_pair_mask_scalar", .algo = LYCO_ALGO_LOHA, .O = 77, .I = 264, .rank = 5, .tokens = 3,
     .alpha = 3, .multiplier = 0.8, .opts = CASE_SCALAR | CASE_RANK_MASK},
    {.name = "loha_linear_strided_unaligned", .algo = LYCO_ALGO_LOHA, .O = 12, .I = 10, .rank = 3, .tokens = 5,
     .alpha = 2, .opts = CASE_NONCONTIG | CASE_UNALIGNED | CASE_RANK_MASK},
    {.name = "loha_conv2d_3x3_s2p1", .algo = LYCO_ALGO_LOHA, CONV2(3, 3), .O = 8, .I = 6, .stride = {2, 2, 1},
     .pad = {1, 1, 0}, .dil = K1, .rank = 4, .tokens = 2, .spatial = {7, 6, 1}, .alpha = 1, .extra = {0, 1}},
    {.name = "loha_conv1d_dilated", .algo = LYCO_ALGO_LOHA, .kind = LYCO_LAYER_CONV, .conv_dims = 1, .O = 6, .I = 5,
     .k = {3, 1, 1}, .stride = {1, 1, 1}, .pad = {2, 0, 0}, .dil = {2, 1, 1}, .rank = 2, .tokens = 3, .spatial = {9, 1, 1},
     .multiplier = 1.3},
    {.name = "loha_conv3d", .algo = LYCO_ALGO_LOHA, .kind = LYCO_LAYER_CONV, .conv_dims = 3, .O = 4, .I = 3,
     .k = {2, 3, 2}, .stride = {1, 2, 1}, .pad = {0, 1, 1}, .dil = K1, .rank = 2, .tokens = 1, .spatial = {4, 5, 3},
     .extra = {3, 1}},
    {.name = "loha_conv2d_tucker_mask_scalar", .algo = LYCO_ALGO_LOHA, CONV2(3, 3), .O = 7, .I = 6, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = K1, .rank = 3, .extra = {2}, .tokens = 2, .spatial = {5, 5, 1}, .alpha = 2,
     .opts = CASE_TUCKER | CASE_SCALAR | CASE_RANK_MASK},
    {.name = "loha_conv3d_tucker_compat", .algo = LYCO_ALGO_LOHA, .kind = LYCO_LAYER_CONV, .conv_dims = 3, .O = 5, .I = 4,
     .k = {2, 2, 3}, .stride = {1, 1, 2}, .pad = {1, 0, 1}, .dil = K1, .rank = 2, .tokens = 1, .spatial = {3, 4, 5},
     .alpha = 3, .multiplier = 0.6, .opts = CASE_TUCKER | CASE_COMPAT | CASE_SCALAR},
    {.name = "loha_linear_compat_mask", .algo = LYCO_ALGO_LOHA, .O = 14, .I = 18, .rank = 4, .tokens = 6, .alpha = 6,
     .multiplier = 0.7, .opts = CASE_COMPAT | CASE_SCALAR | CASE_RANK_MASK},
    {.name = "loha_linear_dora_out", .algo = LYCO_ALGO_LOHA, .O = 16, .I = 12, .rank = 4, .tokens = 5, .alpha = 2,
     .multiplier = 0.8, .opts = CASE_DORA_OUT},
    {.name = "loha_conv2d_dora_in", .algo = LYCO_ALGO_LOHA, CONV2(3, 3), .O = 6, .I = 5, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = K1, .rank = 2, .tokens = 2, .spatial = {5, 4, 1}, .opts = CASE_DORA_IN | CASE_SCALAR},
    /* Tucker with DoRA, output axis, rank mask (bypass: the CUDA backend's compose.c, the CPU's dense_bypass.c) */
    {.name = "loha_conv2d_tucker_dora_out_mask", .algo = LYCO_ALGO_LOHA, CONV2(3, 3), .O = 7, .I = 4, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = K1, .rank = 3, .tokens = 2, .spatial = {5, 6, 1}, .alpha = 2, .multiplier = 0.9,
     .opts = CASE_TUCKER | CASE_DORA_OUT | CASE_RANK_MASK},
    /* loha_grad_onepass.cu's merge backward (16-byte rows, ranks ≤ 32): 200 rows = three full
       64-row strips and 8 rows, 392 columns = a 256-column region and a partial one (the last
       chunk 8 wide), ranks 16 and 8, σs, rank mask, m ≠ 1; then a conv layer (I·K = 144) at
       rank 24 (rank tile 32) */
    {.name = "loha_linear_onepass_mask_scalar", .algo = LYCO_ALGO_LOHA, .O = 200, .I = 392, .rank = 16, .extra = {8},
     .tokens = 3, .alpha = 6, .multiplier = 0.8, .opts = CASE_SCALAR | CASE_RANK_MASK},
    {.name = "loha_conv2d_onepass_r24", .algo = LYCO_ALGO_LOHA, CONV2(3, 3), .O = 72, .I = 16, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = K1, .rank = 24, .tokens = 2, .spatial = {6, 5, 1}, .alpha = 12},
    /* tier 1: realistic sizes */
    {.name = "loha_linear_3072_r16", .algo = LYCO_ALGO_LOHA, .O = 3072, .I = 3072, .rank = 16, .tokens = 32, .alpha = 8,
     .tier = 1},
    {.name = "loha_conv2d_320_tucker_r8", .algo = LYCO_ALGO_LOHA, CONV2(3, 3), .O = 320, .I = 320, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = K1, .rank = 8, .tokens = 2, .spatial = {8, 8, 1}, .alpha = 4, .opts = CASE_TUCKER, .tier = 1},
};
const int lyco_cases_loha_count = (int)(sizeof lyco_cases_loha / sizeof lyco_cases_loha[0]);

/* (a, b) followed by the layer's kernel dims (all ones when `ones`); linear: (a, b). */
static int with_kernel(const lyco_case *c, int64_t a, int64_t b, bool ones, int64_t *sh) {
    sh[0] = a;
    sh[1] = b;
    if (c->kind != LYCO_LAYER_CONV) return 2;
    for (int i = 0; i < c->conv_dims; i++) sh[2 + i] = ones ? 1 : c->k[i];
    return 2 + c->conv_dims;
}

static int64_t kernel_size(const lyco_case *c) {
    int64_t K = 1;
    if (c->kind == LYCO_LAYER_CONV)
        for (int i = 0; i < c->conv_dims; i++) K *= c->k[i];
    return K;
}

bool case_build_loha(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    bool tucker = c->opts & CASE_TUCKER;
    int64_t sh[5];
    int nd;
    for (int w = 0; w < 2; w++) {
        int64_t r = (w && c->extra[0] > 0) ? c->extra[0] : c->rank;
        lyco_slot sa = w ? LYCO_HADA_W2_A : LYCO_HADA_W1_A, sb = w ? LYCO_HADA_W2_B : LYCO_HADA_W1_B;
        if (tucker) {
            int64_t ash[2] = {r, c->O}, bsh[2] = {r, c->I};
            nd = with_kernel(c, r, r, false, sh);
            if (!case_slot(ca, w ? LYCO_HADA_T2 : LYCO_HADA_T1, d, nd, sh, c->opts, rng, 1.0) ||
                !case_slot(ca, sa, d, 2, ash, c->opts, rng, 1.0) || !case_slot(ca, sb, d, 2, bsh, c->opts, rng, 1.0))
                return false;
        } else {
            int64_t ash[2] = {c->O, r}, bsh[2] = {r, c->I * kernel_size(c)};
            if (!case_slot(ca, sa, d, 2, ash, c->opts, rng, 1.0)) return false;
            if (c->extra[1] && c->kind == LYCO_LAYER_CONV) {
                nd = with_kernel(c, r, c->I, false, sh);
                if (!case_slot(ca, sb, d, nd, sh, c->opts, rng, 1.0)) return false;
            } else if (!case_slot(ca, sb, d, 2, bsh, c->opts, rng, 1.0)) {
                return false;
            }
        }
    }
    /* LoHa's rank dropout masks output rows in merge and in bypass alike (ALGORITHMS.md §1.7) */
    if ((c->opts & CASE_RANK_MASK) && !case_mask(ca, LYCO_RANK_MASK, c->O, rng)) return false;
    return case_dora_scale(c, d, rng, ca) && case_scalar(c, d, rng, ca);
}
