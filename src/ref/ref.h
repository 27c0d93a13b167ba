/*
 * ref.h — the fp64 oracle's internal interface.
 *
 * The oracle converts every operand to a compact fp64 array (each value first rounded to the
 * call's compute dtype, as the policy feeds products; masks exactly), computes in fp64 (built with
 * -ffp-contract=off), and rounds each result once, directly from fp64, to its output dtype.
 *
 * An algorithm is described by a ref_algo (one per file, src/ref/<algo>.c). The generic verbs in
 * ref.c compose its pieces:
 *   additive algorithms  ΔW̄ = delta(·) (O × I·K, scale s and masks included, σs and m not);
 *                        merge W'' = W + m·σs·ΔW (or the DoRA epilogue); bypass Δ = op(x, m·σs·ΔW)
 *                        — mathematically the factorised bypass, which is what the oracle must
 *                        equal; backward chains ∂L/∂ΔW̄ through delta_bwd.
 *   row maps             Y = rows(X) for X of O rows (OFT, BOFT, IA3 on outputs): merge maps W's
 *                        rows, bypass maps y0 (channel axis as rows).
 *   custom bypass        Norm: bypass_fwd/bypass_bwd.
 */
#ifndef LYCO_REF_H
#define LYCO_REF_H

#include "core/call.h"

/* Scratch memory of one oracle call, freed when the call ends. */
typedef struct {
    void *p[256];
    int n;
    bool failed;     /* an allocation failed: the call returns LYCO_ERR_NOMEM */
} ref_arena;

/* fp64 in/out for gradient checks: values given here replace the tensors' values, and results
   are captured here (unrounded) instead of being written to the output tensors. */
typedef enum { REF_IN_W, REF_IN_BIAS, REF_IN_X, REF_IN_Y0, REF_IN_DY, REF_IN_DOUT, REF_IN_DOUT_BIAS, REF_IN_COUNT } ref_input;
typedef enum { REF_OUT_MAIN, REF_OUT_BIAS, REF_OUT_DX, REF_OUT_DY0, REF_OUT_COUNT } ref_output;
typedef struct {
    const double *slot[LYCO_SLOT_COUNT];
    const double *in[REF_IN_COUNT];
    double *out[REF_OUT_COUNT];     /* out or y; out_bias; dx; dy0 */
    double *grad[LYCO_SLOT_COUNT];
    double scalar_abs;              /* out: Σ|terms| of σs's gradient (its error scale) */
    double skew_cancel;             /* out: the largest cancellation factor of a Cayley backward's skew
                                       projection (ref_cayley_bwd; 0 when none ran) */
} ref_f64_io;

/* Runs a validated call entirely in fp64 with io's values (NULL entries: from the tensors). */
lyco_status lyco_ref_run_f64(const lyco_call *c, ref_f64_io *io);

typedef struct {
    const lyco_call *c;
    ref_arena *arena;
    ref_f64_io *io;
    double *t[LYCO_SLOT_COUNT];  /* compact fp64 copies of the present slots */
    int64_t n[LYCO_SLOT_COUNT];  /* their element counts */
    double *g[LYCO_SLOT_COUNT];  /* zeroed fp64 gradient accumulators of the wanted slots */
    double sigma;                /* σs (1 when absent) */
    bool bypass;                 /* direction is bypass (mask semantics differ, ALGORITHMS.md §1.7) */
    bool compat;                 /* LoHa/LoKr merge with LYCO_FLAG_UPSTREAM_MERGE_SCALE */
    int64_t O, IK;               /* rows and columns of ΔW̄ */
} ref_adapter;

/* Zeroed scratch of n doubles from the call's arena; NULL on failure (the caller returns at once
   and the verb reports LYCO_ERR_NOMEM). */
double *ref_alloc(const ref_adapter *ra, int64_t n);

/* Records a Cayley backward's cancellation factor (ref_cayley_bwd) for the check's budget. */
static inline void ref_note_skew_cancel(const ref_adapter *ra, double factor) {
    if (ra->io && factor > ra->io->skew_cancel) ra->io->skew_cancel = factor;
}

/* Mask value helpers: 1 when the mask is absent. */
static inline double ref_mask(const ref_adapter *ra, lyco_slot s, int64_t i) {
    return ra->t[s] ? ra->t[s][i] : 1.0;
}

typedef struct {
    /* ΔW̄ (O × I·K), s and masks included, σs and m excluded. W may be NULL when unused. */
    void (*delta)(const ref_adapter *ra, const double *W, double *dW);
    /* G = ∂L/∂ΔW̄ (same layout): accumulate parameter gradients into ra->g. */
    void (*delta_bwd)(ref_adapter *ra, const double *W, const double *G);
    /* Y = rows(X), X is O × n row-major (multiplier included). */
    void (*rows)(const ref_adapter *ra, const double *X, int64_t n, double *Y);
    /* GY = ∂L/∂Y: accumulate parameter gradients into ra->g; GX = ∂L/∂X (may be NULL). */
    void (*rows_bwd)(ref_adapter *ra, const double *X, const double *GY, int64_t n, double *GX);
    /* Bias delta (O), multiplier excluded; and its backward. */
    void (*bias_delta)(const ref_adapter *ra, double *db);
    void (*bias_delta_bwd)(ref_adapter *ra, const double *Gb);
    /* Custom bypass (Norm): Δ for x (layout of x), and its backward (GX may be NULL). */
    void (*bypass_fwd)(const ref_adapter *ra, const double *x, double *delta);
    void (*bypass_bwd)(ref_adapter *ra, const double *x, const double *gy, double *gx);
    bool uses_sigma;             /* ΔW is multiplied by σs */
} ref_algo;

extern const ref_algo ref_locon, ref_loha, ref_lokr, ref_diag_oft, ref_boft, ref_ia3, ref_glora,
    ref_dylora, ref_full, ref_norm;

/* ---- fp64 building blocks (ref_ops.c) ---- */
/* C[M×N] = op(A)·op(B) (+= when accumulate), op = transpose when the flag is set.
   A is M×K (or K×M transposed), B is K×N (or N×K transposed). */
void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double *A, const double *B,
              double *C, bool accumulate);

/* The layer's operation, linear or conv (groups allowed), in fp64.
   x: (N, I, sp_in…) — linear: (tokens, I); w: (O, I/g, k…); y: (N, O, sp_out…). */
typedef struct {
    int64_t N, I, O, groups;
    int64_t in[3], out[3], k[3], stride[3], pad[3], dil[3];
} ref_conv_geom;
void ref_conv_geom_from_call(const lyco_call *c, ref_conv_geom *g);
void ref_conv_fwd(const ref_conv_geom *g, const double *x, const double *w, double *y);
void ref_conv_dgrad(const ref_conv_geom *g, const double *dy, const double *w, double *dx);
void ref_conv_wgrad(const ref_conv_geom *g, const double *x, const double *dy, double *dw);

/* Gather/scatter between y-shaped tensors and the O × n "rows" layout (n = tokens × spatial). */
void ref_to_rows(const lyco_call *c, const double *y, double *rows);
void ref_from_rows(const lyco_call *c, const double *rows, double *y);

/* Small dense solver A X = B (used by the Cayley transform in cayley.h). */
void ref_solve(int64_t n, double *A, double *B, int64_t nrhs); /* A X = B, B overwritten by X */

#endif
