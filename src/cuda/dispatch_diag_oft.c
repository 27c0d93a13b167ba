/*
 * dispatch_diag_oft.c — Diag-OFT (ALGORITHMS.md §2.4) on the CUDA backend: all four directions,
 * linear and conv, block sizes up to LK_OFT_MAX_BS, through dispatch_oft.c (operand views) and
 * oft.cu (Cayley transform and the block-diagonal passes). Declines, with the reason: norm
 * layers, block size > LK_OFT_MAX_BS, operands whose dims do not collapse (dispatch_oft.h).
 */
#include "cuda/dispatch_oft.h"

lyco_status lk_run_diag_oft(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    static const lk_oft_family fam = {lk_diag_oft_fwd, lk_diag_oft_bwd, "Diag-OFT", 0};
    return lk_run_oft(c, &fam, dev, st, why, why_len);
}
