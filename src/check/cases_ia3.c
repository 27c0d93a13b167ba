/* cases_ia3.c — case rows and builder for ia3 (placeholder until written). */
#include "check.h"

const lyco_case lyco_cases_ia3[1];
const int lyco_cases_ia3_count = 0;

bool case_build_ia3(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    (void)c, (void)d, (void)rng, (void)ca;
    return false;
}
