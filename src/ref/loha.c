/* loha.c — fp64 oracle of loha (placeholder until written; see ref.h). */
#include "ref.h"

const ref_algo ref_loha = {0};
