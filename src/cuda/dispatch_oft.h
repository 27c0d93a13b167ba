/*
 * dispatch_oft.h — what dispatch_diag_oft.c and dispatch_boft.c share (dispatch_oft.c): the
 * translation of a validated OFT-family call into kern_oft.h's lk_oft_args (views of every
 * operand, the scalars), and the run of the direction's launcher. Declines (with the reason):
 * norm layers, a block size above LK_OFT_MAX_BS, operands whose dims do not collapse to the
 * strides the kernels take.
 */
#ifndef LYCO_CUDA_DISPATCH_OFT_H
#define LYCO_CUDA_DISPATCH_OFT_H

#include "cuda/backend.h"
#include "cuda/kern_oft.h"

typedef struct {
    int (*fwd)(const lk_oft_args *a, const lk_device *dev, void *stream);
    int (*bwd)(const lk_oft_args *a, const lk_device *dev, void *stream);
    const char *family;   /* "Diag-OFT" / "BOFT", for decline messages */
    int boft;             /* 1: blocks are M×nb×b×b */
} lk_oft_family;

lyco_status lk_run_oft(const lyco_call *c, const lk_oft_family *f, const lk_device *dev, void *st, char *why, size_t why_len);

#endif
