/* cases_lokr.c — case rows and builder for lokr (placeholder until written). */
#include "check.h"

const lyco_case lyco_cases_lokr[1];
const int lyco_cases_lokr_count = 0;

bool case_build_lokr(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    (void)c, (void)d, (void)rng, (void)ca;
    return false;
}
