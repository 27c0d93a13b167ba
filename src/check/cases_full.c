/* cases_full.c — case rows and builder for full (placeholder until written). */
#include "check.h"

const lyco_case lyco_cases_full[1];
const int lyco_cases_full_count = 0;

bool case_build_full(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    (void)c, (void)d, (void)rng, (void)ca;
    return false;
}
