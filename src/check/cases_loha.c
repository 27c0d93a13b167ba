/* cases_loha.c — case rows and builder for loha (placeholder until written). */
#include "check.h"

const lyco_case lyco_cases_loha[1];
const int lyco_cases_loha_count = 0;

bool case_build_loha(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca) {
    (void)c, (void)d, (void)rng, (void)ca;
    return false;
}
