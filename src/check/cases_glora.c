/* cases_glora.c — case rows and builder for glora (placeholder until written). */
#include "check.h"

const lyco_case lyco_cases_glora[1];
const int lyco_cases_glora_count = 0;

bool case_build_glora(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    (void)c, (void)d, (void)rng, (void)ca;
    return false;
}
