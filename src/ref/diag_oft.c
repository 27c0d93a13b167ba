/* diag_oft.c — fp64 oracle of diag_oft (placeholder until written; see ref.h). */
#include "ref.h"

const ref_algo ref_diag_oft = {0};
