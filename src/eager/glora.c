/* glora.c — eager twin of glora (placeholder until written; see eager.h). */
#include "eager.h"

const eg_algo eg_glora = {0};
