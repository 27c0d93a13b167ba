/* cases_diag_oft.c — case rows and builder for diag_oft (placeholder until written). */
#include "check.h"

const lyco_case lyco_cases_diag_oft[1];
const int lyco_cases_diag_oft_count = 0;

bool case_build_diag_oft(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    (void)c, (void)d, (void)rng, (void)ca;
    return false;
}
