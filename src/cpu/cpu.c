/*
 * cpu.c — entry of the fused CPU backend: dispatches to the algorithm's file (src/cpu/<algo>.c).
 * A case without a fused kernel is declined with its reason; the api layer then runs the eager
 * twin and the path report records the fallback.
 */
#include <stdio.h>

#include "api/api.h"
#include "cpu.h"

lyco_status lyco_cpu_run(const lyco_call *c, char *why, size_t why_len) {
    cpu_entry e = NULL;
    switch (c->a->algo) {
    case LYCO_ALGO_LOCON:
    case LYCO_ALGO_DYLORA: e = cpu_locon; break;
    case LYCO_ALGO_GLORA: e = cpu_glora; break;
    case LYCO_ALGO_LOHA: e = cpu_loha; break;
    case LYCO_ALGO_LOKR: e = cpu_lokr; break;
    case LYCO_ALGO_DIAG_OFT: e = cpu_diag_oft; break;
    case LYCO_ALGO_BOFT: e = cpu_boft; break;
    case LYCO_ALGO_IA3: e = cpu_ia3; break;
    case LYCO_ALGO_FULL: e = cpu_full; break;
    case LYCO_ALGO_NORM: e = cpu_norm; break;
    default: break;
    }
    if (!e) {
        snprintf(why, why_len, "cpu: no fused kernel for %s yet", lyco_algo_name(c->a->algo));
        return LYCO_ERR_UNSUPPORTED;
    }
    return e(c, why, why_len);
}
