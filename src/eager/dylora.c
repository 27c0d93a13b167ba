/* dylora.c — eager twin of dylora (placeholder until written; see eager.h). */
#include "eager.h"

const eg_algo eg_dylora = {0};
