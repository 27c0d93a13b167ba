/* loha.c — eager twin of loha (placeholder until written; see eager.h). */
#include "eager.h"

const eg_algo eg_loha = {0};
