/*
 * test_conv_geometry.c — conv geometry on the axes the shared case table leaves at their defaults.
 *
 * The table's conv rows put dilation only on the first spatial dim, so an oracle (or kernel) that
 * ignored dilation on the second or third dim would pass `lyco check`. These rows put stride,
 * padding and dilation on the second and third dims (and leave the first plain), and run every
 * direction of each through the harness of `lyco check` (lyco_check_one: the backend and the
 * eager twin against the fp64 oracle, with the table's budgets) on the eager and cpu backends, for
 * the bf16 and fp32 dtype rows. Both backends compute the conv independently of the oracle
 * (src/eager/eager_ops.c, src/cpu/), so a geometry fault in any of the three shows as a failure.
 *
 * Prints one line per (case, backend, direction, dtypes) and ends with "N passed, M failed";
 * exits non-zero on failure. Random data from LYCO_SEED (printed) or the clock.
 */
#include <stdio.h>
#include <string.h>

#include "check/check.h"

static const lyco_case cases[] = {
    {.name = "locon_conv2d_dil_dim1", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 5, .I = 4,
     .k = {2, 3, 1}, .stride = {1, 2, 1}, .pad = {0, 2, 0}, .dil = {1, 2, 1}, .rank = 3, .tokens = 2, .spatial = {4, 9, 1},
     .alpha = 2},
    {.name = "locon_conv3d_dil_dim2", .algo = LYCO_ALGO_LOCON, .kind = LYCO_LAYER_CONV, .conv_dims = 3, .O = 4, .I = 3,
     .k = {1, 2, 3}, .stride = {1, 1, 2}, .pad = {0, 1, 2}, .dil = {1, 1, 2}, .rank = 2, .tokens = 1, .spatial = {2, 3, 8}},
    {.name = "full_conv2d_dil_dim1_bias", .algo = LYCO_ALGO_FULL, .kind = LYCO_LAYER_CONV, .conv_dims = 2, .O = 6, .I = 4,
     .k = {1, 3, 1}, .stride = {1, 1, 1}, .pad = {0, 3, 0}, .dil = {1, 3, 1}, .tokens = 2, .spatial = {3, 7, 1},
     .multiplier = 0.8, .opts = CASE_BIAS},
};

int main(void) {
    uint64_t seed = lyco_seed_from_env();
    printf("test_conv_geometry: seed %llu (LYCO_SEED=%llu to rerun)\n", (unsigned long long)seed, (unsigned long long)seed);
    static const lyco_backend backends[] = {LYCO_BACKEND_EAGER, LYCO_BACKEND_CPU};
    static const char *const rows[] = {"bf16", "fp32"};
    int passed = 0, failed = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (size_t b = 0; b < sizeof backends / sizeof backends[0]; b++)
            for (int d = 0; d < LYCO_DIR_COUNT; d++)
                for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
                    const lyco_dtype_row *row = NULL;
                    for (int k = 0; k < lyco_dtype_row_count; k++)
                        if (!strcmp(lyco_dtype_rows[k].name, rows[r])) row = &lyco_dtype_rows[k];
                    if (!row) {
                        printf("FAIL no dtype row %s\n", rows[r]);
                        failed++;
                        continue;
                    }
                    lyco_check_opts o;
                    memset(&o, 0, sizeof o);
                    o.backend = backends[b];
                    o.mode = LYCO_OUTPUT_PROMOTE;
                    o.seed = seed;
                    lyco_check_result res;
                    lyco_status st = lyco_check_one(&cases[ci], (lyco_direction)d, row, &o, &res);
                    bool ok = st == LYCO_OK && res.pass;
                    printf("%-4s %-28s %-6s %-10s %-5s ulp_max %9.3f budget %7.2f %s%s%s\n", ok ? "ok" : "FAIL", cases[ci].name,
                           lyco_backend_name(backends[b]), lyco_direction_name((lyco_direction)d), rows[r], res.backend.max_ulp,
                           res.budget, res.path, ok ? "" : "  ", ok ? "" : (st ? lyco_last_error() : res.detail));
                    if (ok) passed++;
                    else failed++;
                }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
