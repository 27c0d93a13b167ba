/* ia3.c — eager twin of ia3 (placeholder until written; see eager.h). */
#include "eager.h"

const eg_algo eg_ia3 = {0};
