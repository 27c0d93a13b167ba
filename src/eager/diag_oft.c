/* diag_oft.c — eager twin of diag_oft (placeholder until written; see eager.h). */
#include "eager.h"

const eg_algo eg_diag_oft = {0};
