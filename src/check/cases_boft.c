/* cases_boft.c — case rows and builder for boft (placeholder until written). */
#include "check.h"

const lyco_case lyco_cases_boft[1];
const int lyco_cases_boft_count = 0;

bool case_build_boft(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    (void)c, (void)d, (void)rng, (void)ca;
    return false;
}
