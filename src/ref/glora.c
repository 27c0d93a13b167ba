/* glora.c — fp64 oracle of glora (placeholder until written; see ref.h). */
#include "ref.h"

const ref_algo ref_glora = {0};
