/* cases_norm.c — case rows and builder for norm (placeholder until written). */
#include "check.h"

const lyco_case lyco_cases_norm[1];
const int lyco_cases_norm_count = 0;

bool case_build_norm(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    (void)c, (void)d, (void)rng, (void)ca;
    return false;
}
