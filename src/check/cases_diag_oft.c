/*
 * cases_diag_oft.c — Diag-OFT rows of the case table and their builder (ALGORITHMS.md §2.4):
 * linear, conv1d/conv2d, block sizes 2..8, 16 and 32, rescale, multiplier ≠ 1, the norm constraint off,
 * active and inactive, the rank-dropout mask (merge only), module dropout, strided and unaligned
 * operands, and one realistic tier-1 size.
 *
 * `rank` is the block size bs (nb = O/bs); `constraint` is κc as the module passes it (already
 * × O). Blocks are uniform ±0.3, so with bs ≥ 2 the expected ‖B − Bᵀ‖_F is
 * sqrt(nb·bs·(bs−1)·0.06): the "active" rows use κc well below it, the "inactive" ones a κc above
 * its largest possible value (0.6·sqrt(nb·bs·(bs−1))).
 */
#include "check.h"

#define K1 {1, 1, 1}
const lyco_case lyco_cases_diag_oft[] = {
    /* ‖Q0‖ ≈ 1.7 */
    {.name = "diag_oft_linear_bs4", .algo = LYCO_ALGO_DIAG_OFT, .O = 16, .I = 12, .rank = 4, .tokens = 5},
    {.name = "diag_oft_linear_bs3_rescale_mult", .algo = LYCO_ALGO_DIAG_OFT, .O = 24, .I = 10, .rank = 3, .tokens = 4,
     .multiplier = 0.7, .opts = CASE_RESCALE},
    /* ‖Q0‖ ≈ 1.7 > κc = 0.5: the constraint branch is taken */
    {.name = "diag_oft_linear_constraint_active", .algo = LYCO_ALGO_DIAG_OFT, .O = 16, .I = 8, .rank = 4, .tokens = 6,
     .constraint = 0.5, .opts = CASE_RESCALE},
    /* ‖Q0‖ ≤ 0.6·sqrt(48) ≈ 4.2 < κc = 20: the branch is not taken */
    {.name = "diag_oft_linear_constraint_inactive", .algo = LYCO_ALGO_DIAG_OFT, .O = 16, .I = 8, .rank = 4, .tokens = 3,
     .constraint = 20, .multiplier = 1.3},
    {.name = "diag_oft_linear_bs2_mask_mult", .algo = LYCO_ALGO_DIAG_OFT, .O = 12, .I = 7, .rank = 2, .tokens = 4,
     .multiplier = 0.8, .opts = CASE_RANK_MASK | CASE_RESCALE},
    /* nb = 1, ‖Q0‖ ≈ 1.8 > κc = 0.4 */
    {.name = "diag_oft_conv2d_bs8_rescale_active", .algo = LYCO_ALGO_DIAG_OFT, .kind = LYCO_LAYER_CONV, .conv_dims = 2,
     .O = 8, .I = 4, .k = {3, 3, 1}, .stride = {1, 1, 1}, .pad = {1, 1, 0}, .dil = K1, .rank = 8, .tokens = 2,
     .spatial = {5, 4, 1}, .constraint = 0.4, .opts = CASE_RESCALE},
    {.name = "diag_oft_conv1d_bs3_mask", .algo = LYCO_ALGO_DIAG_OFT, .kind = LYCO_LAYER_CONV, .conv_dims = 1, .O = 6,
     .I = 3, .k = {3, 1, 1}, .stride = {2, 1, 1}, .pad = {1, 0, 0}, .dil = K1, .rank = 3, .tokens = 3, .spatial = {6, 1, 1},
     .multiplier = 1.25, .opts = CASE_RANK_MASK},
    {.name = "diag_oft_linear_strided_unaligned", .algo = LYCO_ALGO_DIAG_OFT, .O = 20, .I = 9, .rank = 5, .tokens = 3,
     .multiplier = 0.9, .opts = CASE_RESCALE | CASE_NONCONTIG | CASE_UNALIGNED},
    {.name = "diag_oft_linear_module_drop", .algo = LYCO_ALGO_DIAG_OFT, .O = 8, .I = 5, .rank = 4, .tokens = 2,
     .opts = CASE_MODULE_DROP | CASE_RESCALE},
    /* the CUDA column kernels' block sizes (16, 32): 16-byte aligned rows (W's staged kernels,
       partial tiles: 264 = 256 + 8, 1000 = 512 + 488), several column groups, strided +
       unaligned operands, the constraint active (‖Q0‖ ≈ 6.6 > 0.5) */
    {.name = "diag_oft_linear_bs32_rescale_mult", .algo = LYCO_ALGO_DIAG_OFT, .O = 64, .I = 264, .rank = 32,
     .tokens = 45, .multiplier = 0.9, .opts = CASE_RESCALE},
    {.name = "diag_oft_linear_bs16_i1000", .algo = LYCO_ALGO_DIAG_OFT, .O = 32, .I = 1000, .rank = 16, .tokens = 21,
     .opts = CASE_RESCALE},
    {.name = "diag_oft_linear_bs16_strided_unaligned_active", .algo = LYCO_ALGO_DIAG_OFT, .O = 48, .I = 19, .rank = 16,
     .tokens = 133, .constraint = 0.5, .opts = CASE_RESCALE | CASE_NONCONTIG | CASE_UNALIGNED},
    /* enough tiles for several fixed runs of the CPU backward's gradient partials (its fp32
       bypass backward once depended on the thread count here: tests check_cpu_threads_full) */
    {.name = "diag_oft_linear_640_bs16_t1024", .algo = LYCO_ALGO_DIAG_OFT, .O = 640, .I = 640, .rank = 16,
     .tokens = 1024, .opts = CASE_RESCALE, .tier = 1},
    {.name = "diag_oft_linear_4096_bs16", .algo = LYCO_ALGO_DIAG_OFT, .O = 4096, .I = 4096, .rank = 16, .tokens = 64,
     .opts = CASE_RESCALE, .tier = 1},
};
const int lyco_cases_diag_oft_count = (int)(sizeof lyco_cases_diag_oft / sizeof lyco_cases_diag_oft[0]);

/* ρ: O×1 (linear) or O×1×1… (conv), values in [0.8, 1.2]. Shared with the BOFT builder. */
bool case_oft_rescale(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca);
bool case_oft_rescale(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    if (!(c->opts & CASE_RESCALE)) return true;
    int64_t sh[5] = {c->O, 1, 1, 1, 1};
    int nd = c->kind == LYCO_LAYER_CONV ? 2 + c->conv_dims : 2;
    if (!case_slot(ca, LYCO_RESCALE, d, nd, sh, c->opts, rng, 1.0)) return false;
    case_tensor *t = &ca->slot[LYCO_RESCALE];
    for (int64_t i = 0; i < lyco_numel(&t->t); i++)
        lyco_store_f64(lyco_elem_at(&t->t, i), d, 1.0 + 0.2 * (2.0 * lyco_rng_uniform(rng) - 1.0));
    return true;
}

bool case_build_diag_oft(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    int64_t bs = c->rank, nb = c->O / c->rank;
    int64_t sh[3] = {nb, bs, bs};
    if (!case_slot(ca, LYCO_OFT_BLOCKS, d, 3, sh, c->opts, rng, 0.3)) return false;
    if (!case_oft_rescale(c, d, rng, ca)) return false;
    /* Dropout(p) on the entries of m·R, merge only: 0 or 1/(1−p), p = 0.3 */
    if ((c->opts & CASE_RANK_MASK) && !ca->bypass) {
        int64_t n = nb * bs * bs;
        if (!case_mask(ca, LYCO_RANK_MASK, n, rng)) return false;
        case_tensor *t = &ca->slot[LYCO_RANK_MASK];
        for (int64_t i = 0; i < n; i++) {
            void *p = lyco_elem_at(&t->t, i);
            if (lyco_load_f32(p, LYCO_F32) != 0.0f) lyco_store_f64(p, LYCO_F32, 1.0 / 0.7);
        }
    }
    return true;
}
