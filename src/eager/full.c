/* full.c — eager twin of full (placeholder until written; see eager.h). */
#include "eager.h"

const eg_algo eg_full = {0};
