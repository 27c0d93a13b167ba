/* boft.c — eager twin of boft (placeholder until written; see eager.h). */
#include "eager.h"

const eg_algo eg_boft = {0};
