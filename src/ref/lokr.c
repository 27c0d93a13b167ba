/* lokr.c — fp64 oracle of lokr (placeholder until written; see ref.h). */
#include "ref.h"

const ref_algo ref_lokr = {0};
