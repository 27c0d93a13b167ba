/* norm.c — eager twin of norm (placeholder until written; see eager.h). */
#include "eager.h"

const eg_algo eg_norm = {0};
