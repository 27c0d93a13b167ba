/* lokr.c — eager twin of lokr (placeholder until written; see eager.h). */
#include "eager.h"

const eg_algo eg_lokr = {0};
