/* cases_dylora.c — case rows and builder for dylora (placeholder until written). */
#include "check.h"

const lyco_case lyco_cases_dylora[1];
const int lyco_cases_dylora_count = 0;

bool case_build_dylora(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    (void)c, (void)d, (void)rng, (void)ca;
    return false;
}
