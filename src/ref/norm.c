/* norm.c — fp64 oracle of norm (placeholder until written; see ref.h). */
#include "ref.h"

const ref_algo ref_norm = {0};
