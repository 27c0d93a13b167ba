/*
 * test_cuda_locon_conv.c — the CUDA backend's conv LoCon kernels (src/cuda/locon_conv.cu: conv
 * bypass plain and Tucker, Tucker merge) on shapes the shared case table does not reach: several
 * 64-wide tiles along every axis (ranks 65…130, O > 64, more than 64 output pixels per image),
 * reductions long enough to split into several partials, stride/padding/dilation on every dim,
 * Δ-only bypass (conv, and linear: dy0 = 0), strided and unaligned operands; the linear
 * small-rank merge kernel (locon_merge_small.cu) across several column strips and row ranges; and
 * merge backward's one-pass kernel (merge_bwd_onepass.cu) over partial regions and rank tiles.
 *
 * Each (case, direction, dtype row) runs through the harness of `lyco check` (lyco_check_one: the
 * backend against the fp64 oracle with the table's budgets; --require-fused semantics: a fallback
 * to the eager twin fails, except for the strided-adapter rows: adapter factors whose dims do not
 * collapse to a matrix are declined by backend.c's views, so those rows check the path that ran),
 * then twice more on prepared device tensors whose output hashes must agree (determinism).
 * Without a CUDA build or device it prints SKIP and exits 0.
 *
 * Prints one line per run and ends with "N passed, M failed"; exits non-zero on failure. Random
 * data from LYCO_SEED (printed) or the clock; LYCO_CASES=substring runs only the cases whose name
 * contains it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check.h"
#ifdef LYCO_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#define T_CONV .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV
static const lyco_case cases[] = {
    /* two rank tiles, three pixel tiles, two output tiles; σs and rank mask */
    {.name = "cu_conv2d_r67_o70", T_CONV, .conv_dims = 2, .O = 70, .I = 19, .k = {3, 3, 1}, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = {1, 1, 1}, .rank = 67, .tokens = 3, .spatial = {13, 11, 1}, .alpha = 8,
     .opts = CASE_SCALAR | CASE_RANK_MASK},
    /* Tucker, stride 2 and dilation 2, two rank tiles */
    {.name = "cu_conv2d_tucker_r70", T_CONV, .conv_dims = 2, .O = 65, .I = 33, .k = {3, 2, 1}, .stride = {2, 1, 1},
     .pad = {1, 2, 0}, .dil = {2, 2, 1}, .rank = 70, .tokens = 2, .spatial = {17, 9, 1}, .alpha = 5, .multiplier = 0.6,
     .opts = CASE_TUCKER | CASE_SCALAR | CASE_RANK_MASK},
    /* conv1d with a long reduction (4 × 367 output pixels: several partial ranges) */
    {.name = "cu_conv1d_long", T_CONV, .conv_dims = 1, .O = 20, .I = 8, .k = {5, 1, 1}, .stride = {3, 1, 1},
     .pad = {2, 0, 0}, .dil = {2, 1, 1}, .rank = 5, .tokens = 4, .spatial = {1100, 1, 1}, .opts = CASE_SCALAR},
    /* conv3d, geometry on every dim, Δ alone */
    {.name = "cu_conv3d_delta_only", T_CONV, .conv_dims = 3, .O = 9, .I = 5, .k = {3, 1, 2}, .stride = {2, 1, 1},
     .pad = {1, 0, 1}, .dil = {1, 1, 2}, .rank = 3, .tokens = 2, .spatial = {5, 4, 6}, .opts = CASE_NO_Y0},
    /* three rank tiles */
    {.name = "cu_conv2d_r130", T_CONV, .conv_dims = 2, .O = 140, .I = 7, .k = {1, 3, 1}, .stride = {1, 1, 1},
     .pad = {0, 1, 0}, .dil = {1, 1, 1}, .rank = 130, .tokens = 1, .spatial = {9, 70, 1}, .alpha = 16},
    /* strided (reversed-stride storage) and unaligned operands, plain and Tucker */
    {.name = "cu_conv2d_strided_unaligned", T_CONV, .conv_dims = 2, .O = 11, .I = 6, .k = {3, 3, 1}, .stride = {1, 2, 1},
     .pad = {1, 1, 0}, .dil = {1, 1, 1}, .rank = 4, .tokens = 2, .spatial = {7, 8, 1}, .opts = CASE_NONCONTIG | CASE_UNALIGNED},
    {.name = "cu_conv2d_tucker_strided", T_CONV, .conv_dims = 2, .O = 10, .I = 7, .k = {2, 3, 1}, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = {1, 1, 1}, .rank = 3, .tokens = 2, .spatial = {6, 5, 1},
     .opts = CASE_TUCKER | CASE_NONCONTIG | CASE_UNALIGNED | CASE_SCALAR},
    /* linear, Δ alone: dy0 must be 0 (dispatch_locon.c zeroes it; locon.cu's kernel writes RN(dy)) */
    {.name = "cu_linear_delta_only", .algo = LYCO_ALGO_LOCON, .O = 24, .I = 20, .rank = 4, .tokens = 9, .alpha = 2,
     .opts = CASE_NO_Y0},
    /* the small-rank merge kernel (locon_merge_small.cu, r ≤ 16): three 256-column strips (the
       last partial), three 128-row tiles with a partial last row group (O = 301), r below its
       rank bound; and I = 260 (fp32 rows: a partial last 8-column chunk; 16-bit rows: not 16-byte
       rows, so locon.cu's kernels) with r at the bound */
    {.name = "cu_linear_small_merge_r13", .algo = LYCO_ALGO_LOCON, .O = 301, .I = 600, .rank = 13, .tokens = 3, .alpha = 4,
     .opts = CASE_SCALAR | CASE_RANK_MASK},
    {.name = "cu_linear_small_merge_r16_i4", .algo = LYCO_ALGO_LOCON, .O = 77, .I = 260, .rank = 16, .tokens = 2, .alpha = 8,
     .multiplier = 0.7},
    /* merge backward's one-pass kernel (merge_bwd_onepass.cu: uniform 16-bit rows, 16-byte rows,
       r ≤ 32, no rank mask): column regions of 2 × 128 with a partial last one (I = 1032), rank
       tile 32; regions of 4 × 128 (I = 2056) at rank tile 16 and at rank 24 (zero-filled to 32);
       65 row strips in regions of two (a partial last region) beside three column regions; conv
       with I·K = 72 (one partial chunk); σs and a multiplier for dσs and the scalars */
    {.name = "cu_linear_mb1_o1000_i1032", .algo = LYCO_ALGO_LOCON, .O = 1000, .I = 1032, .rank = 32, .tokens = 3, .alpha = 8,
     .multiplier = 0.8, .opts = CASE_SCALAR},
    {.name = "cu_linear_mb1_r16_i2056", .algo = LYCO_ALGO_LOCON, .O = 203, .I = 2056, .rank = 16, .tokens = 2, .alpha = 4},
    {.name = "cu_linear_mb1_r24_i2056", .algo = LYCO_ALGO_LOCON, .O = 130, .I = 2056, .rank = 24, .tokens = 2, .alpha = 4,
     .opts = CASE_SCALAR},
    {.name = "cu_linear_mb1_o4100_i520", .algo = LYCO_ALGO_LOCON, .O = 4100, .I = 520, .rank = 32, .tokens = 2, .alpha = 16},
    {.name = "cu_conv2d_mb1_ik72", T_CONV, .conv_dims = 2, .O = 70, .I = 8, .k = {3, 3, 1}, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = {1, 1, 1}, .rank = 8, .tokens = 2, .spatial = {6, 6, 1}, .alpha = 4, .opts = CASE_SCALAR},
    /* H on row tiles (locon_conv.cu k_h_rows: 16-bit x with 16-byte rows, output width a multiple
       of 8, stride 1): 64 wide — 640 pixels = two full 256-pixel blocks and a half one, 136
       channels = 8½ chunks of 16 in three Z ranges, rank 20 in a 32-rank tile, σs, rank mask, m ≠ 1;
       24 wide with a 1 × 3 kernel — blocks start mid-row (rows 10⅔ per block), rank 9 (MI = 1);
       8 wide — 32 output rows per block (34 halo rows), ranks 40 = two rank tiles, the last partial;
       a 1 × 1 kernel (no halo, the row pitch padded from 32 to 34); 256 wide (one row per block,
       four loads per thread); each also runs y = y0 + c·U·H through the expand, image by image */
    {.name = "cu_conv2d_rows_w64", T_CONV, .conv_dims = 2, .O = 24, .I = 136, .k = {3, 3, 1}, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = {1, 1, 1}, .rank = 20, .tokens = 2, .spatial = {10, 64, 1}, .alpha = 4, .multiplier = 0.8,
     .opts = CASE_SCALAR | CASE_RANK_MASK},
    {.name = "cu_conv2d_rows_w24_k1x3", T_CONV, .conv_dims = 2, .O = 17, .I = 20, .k = {1, 3, 1}, .stride = {1, 1, 1},
     .pad = {0, 1, 0}, .dil = {1, 1, 1}, .rank = 9, .tokens = 1, .spatial = {20, 24, 1}, .alpha = 3},
    {.name = "cu_conv2d_rows_w8_r40", T_CONV, .conv_dims = 2, .O = 9, .I = 17, .k = {3, 3, 1}, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = {1, 1, 1}, .rank = 40, .tokens = 2, .spatial = {40, 8, 1}, .alpha = 8, .opts = CASE_SCALAR},
    {.name = "cu_conv2d_rows_1x1", T_CONV, .conv_dims = 2, .O = 12, .I = 33, .k = {1, 1, 1}, .stride = {1, 1, 1},
     .pad = {0, 0, 0}, .dil = {1, 1, 1}, .rank = 6, .tokens = 2, .spatial = {9, 32, 1}, .alpha = 2},
    /* the backward's GH (a 1 × 1 row-tile product of dy, O = 136: three channel-chunk partials) and
       dx (the flipped kernel on GH's CT copy, r = 72: two rank-chunk partials, 24 output channels) */
    {.name = "cu_conv2d_rows_bwd_split", T_CONV, .conv_dims = 2, .O = 136, .I = 24, .k = {3, 3, 1}, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = {1, 1, 1}, .rank = 72, .tokens = 1, .spatial = {8, 16, 1}, .alpha = 8, .multiplier = 0.7,
     .opts = CASE_SCALAR | CASE_RANK_MASK},
    {.name = "cu_conv2d_rows_w256", T_CONV, .conv_dims = 2, .O = 8, .I = 16, .k = {3, 3, 1}, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = {1, 1, 1}, .rank = 4, .tokens = 1, .spatial = {3, 256, 1}, .alpha = 2, .opts = CASE_NO_Y0},
    /* dx on the row tiles with many output-channel tiles: one 64-pixel tile, I = 8470 = 265 tiles
       of 32 (the last one partial), r = 20 = two chunks of GH (session 36 tried two tiles per block) */
    {.name = "cu_conv2d_rows_dx_wide", T_CONV, .conv_dims = 2, .O = 8, .I = 8470, .k = {3, 3, 1}, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = {1, 1, 1}, .rank = 20, .tokens = 1, .spatial = {8, 8, 1}, .alpha = 4, .multiplier = 0.9,
     .opts = CASE_SCALAR},
    /* the backward's one pass over dy (k_dy_pass: dy0, GH and d_up's partials from one read; 16-bit
       dy, S % 8 == 0, r ≤ 32): O = 300 = three 128-channel groups (the last 44: GH through three
       partials and k_h_fin), rank 32 = the whole rank tile, 3 images × 3600 pixels = 29 tiles of
       128 each (the last 16 wide), 87 tiles in 44 blocks of two (d_up's accumulators carried
       across tiles, the last block one tile); O = 128 = one group (GH final in the kernel), rank
       12 in a 16-rank tile, 320 pixels (2½ tiles), Δ alone (dy0 = 0 written by the pass) */
    {.name = "cu_conv2d_rows_dypass_o300", T_CONV, .conv_dims = 2, .O = 300, .I = 12, .k = {3, 3, 1}, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = {1, 1, 1}, .rank = 32, .tokens = 3, .spatial = {50, 72, 1}, .alpha = 8, .multiplier = 0.9,
     .opts = CASE_SCALAR | CASE_RANK_MASK},
    {.name = "cu_conv2d_rows_dypass_o128_r12", T_CONV, .conv_dims = 2, .O = 128, .I = 10, .k = {3, 3, 1}, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = {1, 1, 1}, .rank = 12, .tokens = 2, .spatial = {8, 40, 1}, .alpha = 4, .opts = CASE_NO_Y0},
    /* empty batch: outputs empty, gradients zero */
    {.name = "cu_conv2d_empty_batch", T_CONV, .conv_dims = 2, .O = 6, .I = 4, .k = {3, 3, 1}, .stride = {1, 1, 1},
     .pad = {1, 1, 0}, .dil = {1, 1, 1}, .rank = 2, .tokens = 0, .spatial = {5, 5, 1}, .opts = CASE_TUCKER},
};

/* Two device runs of the same prepared call give the same output bytes. */
static bool deterministic(const lyco_case *c, lyco_direction d, const lyco_dtype_row *row, uint64_t seed, char *why, size_t wn) {
#ifdef LYCO_HAVE_CUDA
    lyco_prepared *p = NULL;
    lyco_ctx *ctx = NULL;
    uint64_t h[2] = {0, 0};
    lyco_status st = lyco_prepare(c, d, row, LYCO_OUTPUT_PROMOTE, seed, &p);
    if (!st) st = lyco_prepared_to_device(p);
    if (!st) st = lyco_ctx_create(&ctx);
    if (!st) st = lyco_ctx_set_backend(ctx, LYCO_BACKEND_CUDA);
    for (int i = 0; i < 2 && !st; i++)
        if (!(st = lyco_prepared_invoke(ctx, p))) st = lyco_prepared_output_hash(p, &h[i]);
    if (st) snprintf(why, wn, "determinism run failed: %s", lyco_last_error());
    else if (h[0] != h[1]) snprintf(why, wn, "two runs differ: output hash %016llx vs %016llx", (unsigned long long)h[0], (unsigned long long)h[1]);
    lyco_ctx_destroy(ctx);
    lyco_prepared_free(p);
    return !st && h[0] == h[1];
#else
    (void)c, (void)d, (void)row, (void)seed, (void)why, (void)wn;
    return true;
#endif
}

int main(void) {
    uint64_t seed = lyco_seed_from_env();
    printf("test_cuda_locon_conv: seed %llu (LYCO_SEED=%llu to rerun)\n", (unsigned long long)seed, (unsigned long long)seed);
#ifdef LYCO_HAVE_CUDA
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device\n");
        return 0;
    }
#else
    printf("SKIP: built without the CUDA backend\n");
    return 0;
#endif
    /* LYCO_CASES=substring: only the cases whose name contains it (sanitizer subsets) */
    const char *only = getenv("LYCO_CASES");
    int passed = 0, failed = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int d = 0; d < LYCO_DIR_COUNT && !(only && !strstr(cases[ci].name, only)); d++)
            for (int r = 0; r < lyco_dtype_row_count; r++) {
                const lyco_dtype_row *row = &lyco_dtype_rows[r];
                lyco_check_opts o;
                memset(&o, 0, sizeof o);
                o.backend = LYCO_BACKEND_CUDA;
                o.mode = LYCO_OUTPUT_PROMOTE;
                o.seed = seed;
                o.require_fused = !(cases[ci].opts & CASE_NONCONTIG);
                lyco_check_result res;
                lyco_status st = lyco_check_one(&cases[ci], (lyco_direction)d, row, &o, &res);
                if (st == LYCO_OK && res.skipped) continue;
                char det[300] = "";
                bool ok = st == LYCO_OK && res.pass;
                if (!ok) snprintf(det, sizeof det, "%s", st ? lyco_last_error() : res.detail);
                else if (!deterministic(&cases[ci], (lyco_direction)d, row, seed, det, sizeof det)) ok = false;
                printf("%-4s %-28s %-10s %-17s ulp_max %11.3f budget %11.2f %s%s%s\n", ok ? "ok" : "FAIL", cases[ci].name,
                       lyco_direction_name((lyco_direction)d), row->name, res.backend.max_ulp, res.budget, res.path,
                       ok ? "" : "  ", det);
                if (ok) passed++;
                else failed++;
            }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
