/*
 * cases_lokr.c — LoKr rows of the case table and their builder (ALGORITHMS.md §2.3): linear,
 * conv1d/2d/3d (stride, padding, dilation); W1 full or w1_a·w1_b (CASE_W1_LOWRANK); W2 full,
 * w2_a·w2_b (CASE_W2_LOWRANK) or Tucker (CASE_W2_LOWRANK | CASE_TUCKER); the output-row rank
 * mask (merge only: the validator rejects a LoKr rank mask in bypass, so none is built there),
 * σs, multiplier ≠ 1, alpha ≠ rank (and alpha ignored when both halves are full), DoRA on both
 * axes, the upstream s² merge scale (CASE_COMPAT), odd sizes, strided and unaligned operands.
 *
 * Row fields used beyond the common ones: rank = the decomposition rank r (unused when both
 * halves are full); extra[0] = a, extra[1] = c (W1 is a×c, W2 is b×d×k with O = a·b, I = c·d);
 * extra[2] = 1 stores the kernel-carrying W2 tensors flattened (lokr_w2 as b×(d·K), plain
 * lokr_w2_b as r×(d·K), the module's layout) instead of b×d×k / r×d×k (the functional layout).
 */
#include "check.h"

bool case_dora_scale(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca);
bool case_scalar(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca);

#define K1 {1, 1, 1}
#define CONV2(kh, kw) .kind = LYCO_LAYER_CONV, .conv_dims = 2, .k = {kh, kw, 1}
#define W12 (CASE_W1_LOWRANK | CASE_W2_LOWRANK)
const lyco_case lyco_cases_lokr[] = {
    {.name = "lokr_linear_full_full", .algo = LYCO_ALGO_LOKR, .O = 24, .I = 20, .extra = {4, 4}, .tokens = 7,
     .alpha = 2 /* ignored: s = 1 */},
    {.name = "lokr_linear_w2lr_mult_scalar_mask", .algo = LYCO_ALGO_LOKR, .O = 24, .I = 18, .extra = {3, 3}, .rank = 2,
     .tokens = 6, .alpha = 1, .multiplier = 0.7, .opts = CASE_W2_LOWRANK | CASE_SCALAR | CASE_RANK_MASK},
    {.name = "lokr_linear_both_lowrank", .algo = LYCO_ALGO_LOKR, .O = 32, .I = 28, .extra = {4, 4}, .rank = 3,
     .tokens = 5, .alpha = 2, .opts = W12},
    {.name = "lokr_linear_w1lr_w2full", .algo = LYCO_ALGO_LOKR, .O = 18, .I = 20, .extra = {6, 4}, .rank = 2,
     .tokens = 4, .alpha = 3, .opts = CASE_W1_LOWRANK},
    /* d·K = 16: the CUDA merge backward's vector form (k_lokr_mb_vec), with σs and a rank mask */
    {.name = "lokr_linear_vec8_mask_scalar", .algo = LYCO_ALGO_LOKR, .O = 24, .I = 32, .extra = {3, 2}, .rank = 2,
     .tokens = 5, .alpha = 2, .multiplier = 0.6, .opts = CASE_W2_LOWRANK | CASE_SCALAR | CASE_RANK_MASK},
    /* the one-launch merge forward (k_lokr_merge_fwd_fused): both halves low-rank, d·K = 40 (8-thread
       segments, 3 of them idle), 15 (i, p) pairs over 26 W2 rows, σs, rank mask, m ≠ 1; and a conv
       layer with W2 full, d·K = 8 (one thread per segment) */
    {.name = "lokr_linear_fused_w12_mask_scalar", .algo = LYCO_ALGO_LOKR, .O = 130, .I = 120, .extra = {5, 3}, .rank = 3,
     .tokens = 3, .alpha = 2, .multiplier = 1.3, .opts = W12 | CASE_SCALAR | CASE_RANK_MASK},
    {.name = "lokr_conv2d_fused_full", .algo = LYCO_ALGO_LOKR, CONV2(2, 1), .O = 12, .I = 8, .stride = {1, 1, 1},
     .pad = {0, 0, 0}, .dil = K1, .extra = {2, 2}, .tokens = 2, .spatial = {5, 4, 1}, .multiplier = 0.8},
    {.name = "lokr_linear_odd_strided_unaligned", .algo = LYCO_ALGO_LOKR, .O = 15, .I = 21, .extra = {3, 3}, .rank = 2,
     .tokens = 5, .alpha = 1.5, .opts = W12 | CASE_NONCONTIG | CASE_UNALIGNED | CASE_RANK_MASK},
    {.name = "lokr_conv2d_full_flat_s2p1", .algo = LYCO_ALGO_LOKR, CONV2(3, 3), .O = 8, .I = 6, .stride = {2, 2, 1},
     .pad = {1, 1, 0}, .dil = K1, .extra = {2, 2, 1}, .tokens = 2, .spatial = {7, 6, 1}},
    {.name = "lokr_conv1d_w2lr_dilated", .algo = LYCO_ALGO_LOKR, .kind = LYCO_LAYER_CONV, .conv_dims = 1, .O = 10, .I = 6,
     .k = {3, 1, 1}, .stride = {1, 1, 1}, .pad = {2, 0, 0}, .dil = {2, 1, 1}, .extra = {2, 2}, .rank = 2, .tokens = 3,
     .spatial = {9, 1, 1}, .alpha = 1, .multiplier = 1.4, .opts = CASE_W2_LOWRANK},
    {.name = "lokr_conv2d_tucker_w1lr_mask_scalar", .algo = LYCO_ALGO_LOKR, CONV2(3, 3), .O = 12, .I = 8,
     .stride = {1, 1, 1}, .pad = {1, 1, 0}, .dil = K1, .extra = {3, 2}, .rank = 3, .tokens = 2, .spatial = {5, 5, 1},
     .alpha = 2, .opts = W12 | CASE_TUCKER | CASE_SCALAR | CASE_RANK_MASK},
    /* Tucker w2 with DoRA on the input axis and σs (bypass: compose.c / dense_bypass.c) */
    {.name = "lokr_conv2d_tucker_dora_in", .algo = LYCO_ALGO_LOKR, CONV2(3, 3), .O = 8, .I = 6, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = K1, .extra = {2, 3}, .rank = 2, .tokens = 2, .spatial = {5, 4, 1}, .alpha = 1,
     .opts = CASE_W2_LOWRANK | CASE_TUCKER | CASE_DORA_IN | CASE_SCALAR},
    {.name = "lokr_conv3d_tucker", .algo = LYCO_ALGO_LOKR, .kind = LYCO_LAYER_CONV, .conv_dims = 3, .O = 6, .I = 4,
     .k = {2, 3, 2}, .stride = {1, 2, 1}, .pad = {0, 1, 1}, .dil = K1, .extra = {2, 2}, .rank = 2, .tokens = 1,
     .spatial = {4, 5, 3}, .alpha = 0.5, .opts = CASE_W2_LOWRANK | CASE_TUCKER},
    {.name = "lokr_linear_compat_mask", .algo = LYCO_ALGO_LOKR, .O = 20, .I = 15, .extra = {4, 3}, .rank = 2,
     .tokens = 6, .alpha = 3, .multiplier = 0.9, .opts = CASE_W2_LOWRANK | CASE_COMPAT | CASE_SCALAR | CASE_RANK_MASK},
    {.name = "lokr_linear_dora_out", .algo = LYCO_ALGO_LOKR, .O = 16, .I = 12, .extra = {4, 3}, .rank = 2, .tokens = 5,
     .alpha = 1, .multiplier = 0.8, .opts = CASE_W2_LOWRANK | CASE_DORA_OUT},
    {.name = "lokr_conv2d_dora_in_flat", .algo = LYCO_ALGO_LOKR, CONV2(3, 3), .O = 6, .I = 6, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = K1, .extra = {2, 3, 1}, .rank = 2, .tokens = 2, .spatial = {5, 4, 1}, .alpha = 4,
     .opts = CASE_W2_LOWRANK | CASE_DORA_IN | CASE_SCALAR},
    /* tier 1: realistic sizes (factorization(3072, -1) = (48, 64), factorization(320, -1) = (16, 20)) */
    {.name = "lokr_linear_3072_w2lr_r16", .algo = LYCO_ALGO_LOKR, .O = 3072, .I = 3072, .extra = {48, 48}, .rank = 16,
     .tokens = 32, .alpha = 8, .opts = CASE_W2_LOWRANK, .tier = 1},
    {.name = "lokr_conv2d_320_tucker_r8", .algo = LYCO_ALGO_LOKR, CONV2(3, 3), .O = 320, .I = 320, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = K1, .extra = {16, 16}, .rank = 8, .tokens = 2, .spatial = {8, 8, 1}, .alpha = 4,
     .opts = CASE_W2_LOWRANK | CASE_TUCKER, .tier = 1},
};
const int lyco_cases_lokr_count = (int)(sizeof lyco_cases_lokr / sizeof lyco_cases_lokr[0]);

bool case_build_lokr(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    int64_t a = c->extra[0], cc = c->extra[1], r = c->rank;
    if (a <= 0 || cc <= 0 || c->O % a || c->I % cc) return false;
    int64_t b = c->O / a, dd = c->I / cc, K = 1;
    bool conv = c->kind == LYCO_LAYER_CONV, flat = c->extra[2] != 0;
    if (conv)
        for (int i = 0; i < c->conv_dims; i++) K *= c->k[i];
    int64_t sh[5];
    /* W1 */
    if (c->opts & CASE_W1_LOWRANK) {
        int64_t s1[2] = {a, r}, s2[2] = {r, cc};
        if (!case_slot(ca, LYCO_LOKR_W1_A, d, 2, s1, c->opts, rng, 1.0) ||
            !case_slot(ca, LYCO_LOKR_W1_B, d, 2, s2, c->opts, rng, 1.0))
            return false;
    } else {
        int64_t s1[2] = {a, cc};
        if (!case_slot(ca, LYCO_LOKR_W1, d, 2, s1, c->opts, rng, 1.0)) return false;
    }
    /* W2 */
    int nd;
    if (!(c->opts & CASE_W2_LOWRANK)) {
        /* full: b×d×k, or flattened b×(d·K) */
        sh[0] = b;
        sh[1] = flat ? dd * K : dd;
        nd = 2;
        if (conv && !flat)
            for (int i = 0; i < c->conv_dims; i++) sh[nd++] = c->k[i];
        if (!case_slot(ca, LYCO_LOKR_W2, d, nd, sh, c->opts, rng, 1.0)) return false;
    } else if (c->opts & CASE_TUCKER) {
        /* t2 r×r×k, w2_a r×b, w2_b r×d */
        int64_t s1[2] = {r, b}, s2[2] = {r, dd};
        sh[0] = r;
        sh[1] = r;
        nd = 2;
        for (int i = 0; conv && i < c->conv_dims; i++) sh[nd++] = c->k[i];
        if (!case_slot(ca, LYCO_LOKR_T2, d, nd, sh, c->opts, rng, 1.0) ||
            !case_slot(ca, LYCO_LOKR_W2_A, d, 2, s1, c->opts, rng, 1.0) ||
            !case_slot(ca, LYCO_LOKR_W2_B, d, 2, s2, c->opts, rng, 1.0))
            return false;
    } else {
        /* plain: w2_a b×r, w2_b r×d×k or r×(d·K) */
        int64_t s1[2] = {b, r};
        if (!case_slot(ca, LYCO_LOKR_W2_A, d, 2, s1, c->opts, rng, 1.0)) return false;
        sh[0] = r;
        sh[1] = flat ? dd * K : dd;
        nd = 2;
        if (conv && !flat)
            for (int i = 0; i < c->conv_dims; i++) sh[nd++] = c->k[i];
        if (!case_slot(ca, LYCO_LOKR_W2_B, d, nd, sh, c->opts, rng, 1.0)) return false;
    }
    /* LoKr's rank dropout masks output rows in merge only (ALGORITHMS.md §1.7) */
    if ((c->opts & CASE_RANK_MASK) && !ca->bypass && !case_mask(ca, LYCO_RANK_MASK, c->O, rng)) return false;
    return case_dora_scale(c, d, rng, ca) && case_scalar(c, d, rng, ca);
}
