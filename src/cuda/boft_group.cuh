/*
 * boft_group.cuh — the stage-group BOFT kernels (boft_group.cu): several butterfly stages per
 * launch in shared memory. Used by boft.cu's lk_boft_fwd / lk_boft_bwd, which fall back to the
 * stage-per-launch kernels when bg_takes() is false. Same semantics, operand layouts and
 * roundings as boft.cu (see its header and kern_oft.h).
 */
#ifndef LYCO_CUDA_BOFT_GROUP_CUH
#define LYCO_CUDA_BOFT_GROUP_CUH

#include "cuda/oft.cuh"

/* True when the group kernels take the call (block size a power of two in 2..64, the launch's
   shared memory within the device's opt-in limit, at least one column). Otherwise *why (if not
   NULL) says which condition failed. */
bool bg_takes(const lk_oft_args *a, const lk_device *dev, int bwd, const char **why);
/* The forward / backward of boft.cu's contract; call only when bg_takes() is true. */
int bg_fwd(const lk_oft_args *a, const lk_device *dev, cudaStream_t st);
int bg_bwd(const lk_oft_args *a, const lk_device *dev, cudaStream_t st);

#endif
