/*
 * call.h — one validated request, as the api layer hands it to a backend.
 *
 * The api layer checks every argument (shapes, dtypes, devices, aliasing), resolves the dtype
 * policy and the scale, derives the algorithm's dimensions, and fills this struct; a backend
 * then computes without re-checking. Backends see only this and core.
 */
#ifndef LYCO_CALL_H
#define LYCO_CALL_H

#include "core.h"

typedef struct {
    int64_t O, I;          /* output / input features (norm: C in O) */
    int64_t K;             /* product of kernel dims; 1 for linear and norm */
    int32_t conv_dims;     /* 0 for linear/norm */
    int64_t r, r2;         /* ranks: LoCon/GLoRA/DyLoRA r; LoHa r (w1) and r2 (w2);
                              LoKr r = decomposition rank (0 if both halves full) */
    bool tucker;           /* LoCon lora_mid, LoHa hada_t*, LoKr lokr_t2 */
    bool dora;             /* dora_scale present */
    bool dora_on_out;      /* DoRA norm per output row (else per input channel) */
    int64_t lk_a, lk_b, lk_c, lk_d; /* LoKr: W1 a×c, W2 b×d×k */
    bool lk_w1_full, lk_w2_full;
    int64_t nb, bs, stages;/* OFT: nb blocks of bs; BOFT: stages × nb × bs */
    int64_t dyl_bs, dyl_blocks;     /* DyLoRA block size and active blocks (t*+1) */
} lyco_dims;

typedef struct {
    lyco_direction dir;
    const lyco_adapter *a;
    lyco_dims dims;
    lyco_dtypes dt;
    lyco_fp32_mode fp32_mode;
    double s;              /* the resolved scale (1 where the algorithm has none) */
    double m;              /* multiplier */
    bool dropped;          /* module mask says this call skips the adapter */

    /* merge */
    const lyco_merge_args *merge;
    DLTensor *out, *out_bias;
    const DLTensor *d_out, *d_out_bias;

    /* bypass */
    const lyco_bypass_args *bypass;
    DLTensor *y;
    const DLTensor *dy;
    DLTensor *dx, *dy0;
    int64_t tokens;        /* linear/norm: rows of x (product of leading dims); conv: N */
    int64_t sp_in[3], sp_out[3]; /* conv spatial sizes of x and y */
    int64_t sp_in_n, sp_out_n;   /* their products (1 for linear) */

    const lyco_grads *g;   /* merge_bwd / bypass_bwd gradient outputs (may be NULL) */
} lyco_call;

/* True when the call wants slot s's gradient. */
static inline bool lyco_call_wants(const lyco_call *c, lyco_slot s) {
    return c->g && c->g->grad[s] != NULL;
}
/* The adapter tensor in slot s, or NULL. */
static inline const DLTensor *lyco_call_t(const lyco_call *c, lyco_slot s) { return c->a->tensor[s]; }

#endif
