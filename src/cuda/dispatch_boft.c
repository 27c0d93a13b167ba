/*
 * dispatch_boft.c — BOFT (ALGORITHMS.md §2.5) on the CUDA backend: all four directions, linear
 * and conv, block sizes up to LK_OFT_MAX_BS, every stage count, through dispatch_oft.c (operand
 * views) and boft.cu (Cayley transform of all M·nb blocks, then the butterfly over column chunks:
 * several stages per launch in shared memory for power-of-two block sizes (boft_group.cu), one
 * launch per stage otherwise; LYCO_CUDA_BOFT_STAGEWISE=1 / LYCO_CUDA_BOFT_LEGACY=1 select the
 * stage-per-launch / all-stages-in-one-kernel paths for A/B runs). Declines, with the reason:
 * norm layers, block size > LK_OFT_MAX_BS,
 * operands whose dims do not collapse (dispatch_oft.h).
 */
#include "cuda/dispatch_oft.h"

lyco_status lk_run_boft(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    static const lk_oft_family fam = {lk_boft_fwd, lk_boft_bwd, "BOFT", 1};
    return lk_run_oft(c, &fam, dev, st, why, why_len);
}
