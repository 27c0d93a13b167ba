/*
 * test_gradcheck.c — every backward of the fp64 oracle against central differences of its own
 * forward (gradcheck-style, eps 1e-6, atol 1e-5, rtol 1e-3), for every quick-tier case of the
 * shared table, merge and bypass. Fresh random data each run; the seed is printed.
 */
#include <stdio.h>

#include "check/check.h"

int main(void) {
    uint64_t seed = lyco_seed_from_env();
    printf("test_gradcheck: seed %llu (LYCO_SEED=%llu to rerun)\n", (unsigned long long)seed, (unsigned long long)seed);
    int passed = 0, failed = 0;
    for (int i = 0; i < lyco_case_count(); i++) {
        const lyco_case *c = lyco_case_get(i);
        if (c->tier > 0 || c->O * c->I > 100000) continue;
        for (int bypass = 0; bypass < 2; bypass++) {
            char detail[300];
            int probes = 0;
            int f = lyco_check_grad(c, bypass, seed, detail, sizeof detail, &probes);
            bool ok = f == 0 && probes > 0;
            printf("%-4s %-36s %-6s %3d probes %s\n", ok ? "ok" : "FAIL", c->name, bypass ? "bypass" : "merge", probes, detail);
            if (ok) passed++; else failed++;
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
