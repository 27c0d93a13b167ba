/* ia3.c — fp64 oracle of ia3 (placeholder until written; see ref.h). */
#include "ref.h"

const ref_algo ref_ia3 = {0};
