/* boft.c — fp64 oracle of boft (placeholder until written; see ref.h). */
#include "ref.h"

const ref_algo ref_boft = {0};
