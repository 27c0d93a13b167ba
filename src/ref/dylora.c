/* dylora.c — fp64 oracle of dylora (placeholder until written; see ref.h). */
#include "ref.h"

const ref_algo ref_dylora = {0};
