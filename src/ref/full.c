/* full.c — fp64 oracle of full (placeholder until written; see ref.h). */
#include "ref.h"

const ref_algo ref_full = {0};
