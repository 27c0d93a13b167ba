/*
 * cases_locon.c — LoRA/LoCon rows of the case table and their builder (ALGORITHMS.md §2.1):
 * linear, conv1d/2d/3d (stride, padding, dilation), Tucker, DoRA both axes, σs, rank masks,
 * module dropout, odd sizes, strided and unaligned operands, empty batches.
 */
#include "check.h"

#define K1 {1, 1, 1}
const lyco_case lyco_cases_locon[] = {
    {.name = "locon_linear_r4", .algo = LYCO_ALGO_LOCON, .O = 24, .I = 20, .rank = 4, .tokens = 9, .alpha = 2},
    {.name = "locon_linear_mult_scalar_mask", .algo = LYCO_ALGO_LOCON, .O = 17, .I = 13, .rank = 5, .tokens = 6,
     .alpha = 3, .multiplier = 0.7, .opts = CASE_SCALAR | CASE_RANK_MASK},
    {.name = "locon_linear_strided_unaligned", .algo = LYCO_ALGO_LOCON, .O = 12, .I = 10, .rank = 3, .tokens = 5,
     .opts = CASE_NONCONTIG | CASE_UNALIGNED},
    {.name = "locon_linear_1000x999_r7", .algo = LYCO_ALGO_LOCON, .O = 1000, .I = 999, .rank = 7, .tokens = 77, .alpha = 4},
    /* O = 70, I·K = 171: d_up's partials split into two column ranges of 96 (fp32) — once counted
       32 columns twice on the GPU (DUP_SPLIT_STEP in src/cuda/locon.cu) */
    {.name = "locon_linear_70x171_r5_split", .algo = LYCO_ALGO_LOCON, .O = 70, .I = 171, .rank = 5, .tokens = 6, .alpha = 2,
     .opts = CASE_SCALAR | CASE_RANK_MASK},
    {.name = "locon_linear_empty_batch", .algo = LYCO_ALGO_LOCON, .O = 8, .I = 6, .rank = 2, .tokens = 0},
    {.name = "locon_linear_module_drop", .algo = LYCO_ALGO_LOCON, .O = 8, .I = 6, .rank = 2, .tokens = 3, .opts = CASE_MODULE_DROP},
    {.name = "locon_linear_module_drop_delta_only", .algo = LYCO_ALGO_LOCON, .O = 8, .I = 6, .rank = 2, .tokens = 3,
     .opts = CASE_MODULE_DROP | CASE_NO_Y0},
    {.name = "locon_conv2d_3x3_s2p1", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 8, .I = 6,
     .k = {3, 3, 1}, .stride = {2, 2, 1}, .pad = {1, 1, 0}, .dil = K1, .rank = 4, .tokens = 2, .spatial = {7, 6, 1}, .alpha = 1},
    {.name = "locon_conv2d_dilated_mask", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 5, .I = 4,
     .k = {3, 2, 1}, .stride = {1, 1, 1}, .pad = {2, 1, 0}, .dil = {2, 1, 1}, .rank = 3, .tokens = 2, .spatial = {6, 5, 1},
     .opts = CASE_RANK_MASK | CASE_SCALAR},
    {.name = "locon_conv1d", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 1, .O = 6, .I = 5,
     .k = {3, 1, 1}, .stride = {1, 1, 1}, .pad = {1, 0, 0}, .dil = K1, .rank = 2, .tokens = 3, .spatial = {9, 1, 1}},
    /* the LoCon twin of dylora_conv1d_unaligned_bs2_1of2 (conv1d, unaligned tensors, rank 4): the CUDA
       dx halo path's open bug (session 22) — does it follow the alignment or DyLoRA's rank sub-view? */
    {.name = "locon_conv1d_unaligned_r4", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 1, .O = 6, .I = 5,
     .k = {3, 1, 1}, .stride = {1, 1, 1}, .pad = {1, 0, 0}, .dil = K1, .rank = 4, .tokens = 3, .spatial = {9, 1, 1},
     .alpha = 3, .opts = CASE_UNALIGNED},
    {.name = "locon_conv1d_unaligned_r2", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 1, .O = 6, .I = 5,
     .k = {3, 1, 1}, .stride = {1, 1, 1}, .pad = {1, 0, 0}, .dil = K1, .rank = 2, .tokens = 3, .spatial = {9, 1, 1},
     .opts = CASE_UNALIGNED},
    {.name = "locon_conv1d_r4", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 1, .O = 6, .I = 5,
     .k = {3, 1, 1}, .stride = {1, 1, 1}, .pad = {1, 0, 0}, .dil = K1, .rank = 4, .tokens = 3, .spatial = {9, 1, 1},
     .alpha = 3},
    {.name = "locon_conv3d", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 3, .O = 4, .I = 3,
     .k = {2, 3, 2}, .stride = {1, 2, 1}, .pad = {0, 1, 1}, .dil = K1, .rank = 2, .tokens = 1, .spatial = {4, 5, 3}},
    {.name = "locon_conv2d_tucker", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 7, .I = 6,
     .k = {3, 3, 1}, .stride = {1, 1, 1}, .pad = {1, 1, 0}, .dil = K1, .rank = 3, .tokens = 2, .spatial = {5, 5, 1},
     .alpha = 2, .opts = CASE_TUCKER | CASE_SCALAR | CASE_RANK_MASK},
    {.name = "locon_linear_dora_out", .algo = LYCO_ALGO_LOCON, .O = 16, .I = 12, .rank = 4, .tokens = 5, .alpha = 2,
     .multiplier = 0.8, .opts = CASE_DORA_OUT},
    {.name = "locon_linear_dora_in", .algo = LYCO_ALGO_LOCON, .O = 11, .I = 14, .rank = 3, .tokens = 4,
     .opts = CASE_DORA_IN | CASE_SCALAR},
    /* DoRA in bypass (locon_dora.c, the CUDA twin): two token tiles (TB = 64), rank mask, σs, m ≠ 1,
       strided and unaligned operands; input axis with Δ alone */
    {.name = "locon_linear_dora_out_mask_strided", .algo = LYCO_ALGO_LOCON, .O = 37, .I = 29, .rank = 5, .tokens = 70,
     .alpha = 3, .multiplier = 1.3, .opts = CASE_DORA_OUT | CASE_RANK_MASK | CASE_SCALAR | CASE_NONCONTIG | CASE_UNALIGNED},
    {.name = "locon_linear_dora_in_mask_delta_only", .algo = LYCO_ALGO_LOCON, .O = 19, .I = 41, .rank = 6, .tokens = 67,
     .alpha = 2, .multiplier = 0.6, .opts = CASE_DORA_IN | CASE_RANK_MASK | CASE_SCALAR | CASE_NO_Y0},
    {.name = "locon_conv2d_dora_out", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 6, .I = 4,
     .k = {3, 3, 1}, .stride = {1, 1, 1}, .pad = {1, 1, 0}, .dil = K1, .rank = 2, .tokens = 2, .spatial = {5, 4, 1},
     .opts = CASE_DORA_OUT},
    /* DoRA in conv bypass (locon_dora.c): input axis over channels of K = 6 columns, stride and
       dilation, 88 output positions (two tiles), rank mask, σs; and Tucker with DoRA */
    {.name = "locon_conv2d_dora_in_strided_mask", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 5,
     .I = 4, .k = {3, 2, 1}, .stride = {2, 1, 1}, .pad = {1, 0, 0}, .dil = {1, 2, 1}, .rank = 3, .tokens = 2, .spatial = {16, 13, 1},
     .alpha = 2, .multiplier = 0.7, .opts = CASE_DORA_IN | CASE_RANK_MASK | CASE_SCALAR},
    {.name = "locon_conv1d_tucker_dora_out", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 1, .O = 6, .I = 5,
     .k = {3, 1, 1}, .stride = K1, .pad = {1, 0, 0}, .dil = K1, .rank = 3, .tokens = 2, .spatial = {9, 1, 1}, .alpha = 2,
     .opts = CASE_TUCKER | CASE_DORA_OUT},
    /* DoRA's one-pass merge on sm_90+ (dora_slab.cu: 16-byte rows, norm per output row): 77 rows
       (two 64-row blocks, the second partial), 1160 columns = 10 tiles of 128 (clusters of 5 CTAs
       × 2 tiles, the last tile 8 wide), rank 7 in a 16-rank tile, rank mask, σs, m ≠ 1; rank 40
       (64-rank tile) with m = 1; a conv layer (I·K = 144: two CTAs); the bench's 2048 × 4096 r32
       geometry (clusters of 8 × 4 tiles) in the full tier */
    {.name = "locon_linear_dora_out_slab", .algo = LYCO_ALGO_LOCON, .O = 77, .I = 1160, .rank = 7, .tokens = 3, .alpha = 3,
     .multiplier = 0.9, .opts = CASE_DORA_OUT | CASE_RANK_MASK | CASE_SCALAR},
    {.name = "locon_linear_dora_out_slab_r40", .algo = LYCO_ALGO_LOCON, .O = 70, .I = 256, .rank = 40, .tokens = 3, .alpha = 8,
     .opts = CASE_DORA_OUT},
    {.name = "locon_conv2d_dora_out_slab", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 66, .I = 16,
     .k = {3, 3, 1}, .stride = K1, .pad = {1, 1, 0}, .dil = K1, .rank = 5, .tokens = 2, .spatial = {6, 5, 1}, .alpha = 2,
     .multiplier = 1.2, .opts = CASE_DORA_OUT},
    /* the reductions' 128-row blocks (reduce_lean.cu, rank tiles 64 and 128): 300 tokens = two full
       blocks and a partial one, O = 200 (merge backward's Γ·Dᵀ: a full and a partial block), ranks
       104 and 56 (16-byte factor rows: the lean kernels), rank mask, σs, m ≠ 1. Their fp32 DELTA
       merges (the CPU's FMA chain over r, ΔW = m·σs·Ū·P alone) reached 0.9–1.13 of the fp32 budget
       before it counted ρ (lyco_check_budget: the sum's error follows the elements, the rank mask
       zeroes ~30% of the merge's rows; CI seed 1796239442583333: 32.9 ULP against 30.35) */
    {.name = "locon_linear_r104_t300", .algo = LYCO_ALGO_LOCON, .O = 200, .I = 520, .rank = 104, .tokens = 300, .alpha = 10,
     .multiplier = 0.8, .opts = CASE_RANK_MASK | CASE_SCALAR},
    {.name = "locon_linear_r56_t129", .algo = LYCO_ALGO_LOCON, .O = 136, .I = 1000, .rank = 56, .tokens = 129, .alpha = 8},
    {.name = "locon_linear_dora_out_2048_r32", .algo = LYCO_ALGO_LOCON, .O = 2048, .I = 4096, .rank = 32, .tokens = 16, .alpha = 16,
     .opts = CASE_DORA_OUT, .tier = 1},
    {.name = "locon_linear_4096_r32", .algo = LYCO_ALGO_LOCON, .O = 4096, .I = 4096, .rank = 32, .tokens = 64, .alpha = 16, .tier = 1},
};
const int lyco_cases_locon_count = (int)(sizeof lyco_cases_locon / sizeof lyco_cases_locon[0]);

/* kernel dims of the layer appended to (a, b): a×b×k, or a×b for linear */
static int with_kernel(const lyco_case *c, int64_t a, int64_t b, bool ones, int64_t *sh) {
    sh[0] = a;
    sh[1] = b;
    if (c->kind != LYCO_LAYER_CONV) return 2;
    for (int i = 0; i < c->conv_dims; i++) sh[2 + i] = ones ? 1 : c->k[i];
    return 2 + c->conv_dims;
}

/* DoRA magnitude: O×1… (out) or 1×I×1… (in), positive. Shared with LoHa/LoKr builders. */
bool case_dora_scale(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca);
bool case_dora_scale(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    if (!(c->opts & (CASE_DORA_OUT | CASE_DORA_IN))) return true;
    bool out = c->opts & CASE_DORA_OUT;
    int64_t sh[5];
    int nd = with_kernel(c, out ? c->O : 1, out ? 1 : c->I, true, sh);
    if (!case_slot(ca, LYCO_DORA_SCALE, d, nd, sh, 0, rng, 1.0)) return false;
    case_tensor *t = &ca->slot[LYCO_DORA_SCALE];
    for (int64_t i = 0; i < lyco_numel(&t->t); i++) /* magnitudes in [1, 3) */
        lyco_store_f64(lyco_elem_at(&t->t, i), d, 2.0 + lyco_rng_uniform(rng) * (lyco_rng_uniform(rng) < 0.5 ? -1 : 1));
    ca->a.wd_on_out = out ? 1 : 0;
    return true;
}

/* σs: a 0-dim tensor around 0.8. Shared with the other σs algorithms. */
bool case_scalar(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca);
bool case_scalar(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    if (!(c->opts & CASE_SCALAR)) return true;
    if (!case_slot(ca, LYCO_SCALAR, d, 0, NULL, 0, rng, 1.0)) return false;
    lyco_store_f64(ca->slot[LYCO_SCALAR].t.data, d, 0.75 + 0.1 * lyco_rng_uniform(rng));
    return true;
}

bool case_build_locon(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    int64_t sh[5];
    int nd;
    bool tucker = c->opts & CASE_TUCKER;
    nd = with_kernel(c, c->rank, c->I, tucker, sh);
    if (!case_slot(ca, LYCO_LORA_DOWN, d, nd, sh, c->opts, rng, 1.0)) return false;
    if (tucker) {
        nd = with_kernel(c, c->rank, c->rank, false, sh);
        if (!case_slot(ca, LYCO_LORA_MID, d, nd, sh, c->opts, rng, 1.0)) return false;
    }
    nd = with_kernel(c, c->O, c->rank, true, sh);
    if (!case_slot(ca, LYCO_LORA_UP, d, nd, sh, c->opts, rng, 1.0)) return false;
    if (c->opts & CASE_RANK_MASK && !case_mask(ca, LYCO_RANK_MASK, ca->bypass ? c->rank : c->O, rng)) return false;
    return case_dora_scale(c, d, rng, ca) && case_scalar(c, d, rng, ca);
}
