/*
 * eager.h — the eager twin's internal interface: every algorithm computed op by op the way
 * PyTorch's eager chain computes upstream's code, each intermediate rounded to the call's compute
 * dtype T (NUMERICS.md §1.6; ALGORITHMS.md §1.3 lists the rounding points). Operands enter
 * rounded to T (the policy); products accumulate in fp32 and round once to T, as PyTorch's CPU
 * and cuBLAS matmuls do; `tensor × python float` is rnd_T(f32(x)·f32(c)) (ALGORITHMS.md §1.3).
 * The final values (already in T) are stored into the output dtype.
 *
 * This is the accuracy baseline of every bench row (what a user gets from eager PyTorch) and the
 * generic fallback of the fused backends. One file per algorithm (src/eager/<algo>.c) provides an
 * eg_algo; eager.c composes the verbs.
 */
#ifndef LYCO_EAGER_H
#define LYCO_EAGER_H

#include "core/call.h"

typedef struct {
    void *p[256];
    int n;
    bool failed;
} eg_arena;

typedef struct {
    const lyco_call *c;
    eg_arena *arena;
    float *t[LYCO_SLOT_COUNT];   /* slot values rounded to T (masks exact), compact row-major */
    int64_t n[LYCO_SLOT_COUNT];
    float *g[LYCO_SLOT_COUNT];   /* gradient outputs (values in T), NULL when not wanted */
    lyco_dtype T;                /* compute dtype: every intermediate is rounded to it */
    float sigma;                 /* σs value (1 when absent) */
    bool has_sigma;
    bool bypass, compat;
    int64_t O, IK;
} eg_adapter;

/* Zeroed scratch of n floats from the call's arena; NULL on failure (return at once). */
float *eg_alloc(const eg_adapter *ea, int64_t n);
static inline float eg_mask(const eg_adapter *ea, lyco_slot s, int64_t i) { return ea->t[s] ? ea->t[s][i] : 1.0f; }

typedef struct {
    /* ΔW̄ (O×I·K) in T, with s, σs and masks applied in the algorithm's own eager order;
       the multiplier is NOT applied. */
    void (*delta)(const eg_adapter *ea, const float *W, float *dW);
    /* G = ∂L/∂ΔW̄ (in T): writes the parameter gradients (and σs's) into ea->g. */
    void (*delta_bwd)(eg_adapter *ea, const float *W, const float *G);
    /* Row maps (OFT/BOFT, IA3 on outputs): Y = T(X), X is O × n; multiplier included. */
    void (*rows)(const eg_adapter *ea, const float *X, int64_t n, float *Y);
    void (*rows_bwd)(eg_adapter *ea, const float *X, const float *GY, int64_t n, float *GX);
    /* Bias delta (O) without the multiplier, and its backward (Gb already × m). */
    void (*bias_delta)(const eg_adapter *ea, float *db);
    void (*bias_delta_bwd)(eg_adapter *ea, const float *Gb);
    /* Factorised bypass (LoCon, LoKr, GLoRA, …): Δ in y's layout, multiplier included; and
       its backward: parameter gradients into ea->g, dx (x's layout, may be NULL). When absent,
       eager.c applies the materialised form op(x, rnd(rnd(ΔW·σs)·m)) like upstream LoHa. */
    void (*bypass_fwd)(const eg_adapter *ea, const float *x, const float *W, float *delta);
    void (*bypass_bwd)(eg_adapter *ea, const float *x, const float *W, const float *dy, float *dx);
} eg_algo;

extern const eg_algo eg_locon, eg_loha, eg_lokr, eg_diag_oft, eg_boft, eg_ia3, eg_glora, eg_dylora,
    eg_full, eg_norm;

/* ---- ops, each result rounded to T (eager_ops.c) ---- */
float eg_rnd(float v, lyco_dtype T);
/* C[M×N] = op(A)·op(B): fp32 accumulation, one rounding to T. */
void eg_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B, float *C, lyco_dtype T);
/* x ← rnd(x · f32(c)) (tensor × Python float) */
void eg_scale(float *x, int64_t n, double c, lyco_dtype T);
/* out ← rnd(a ⊙ b), rnd(a + b), rnd(a − b) (out may alias a or b) */
void eg_mul(const float *a, const float *b, float *out, int64_t n, lyco_dtype T);
void eg_add(const float *a, const float *b, float *out, int64_t n, lyco_dtype T);
void eg_sub(const float *a, const float *b, float *out, int64_t n, lyco_dtype T);
/* Σ a⊙b in fp32, rounded to T (a full reduction, e.g. the gradient of a scalar). */
float eg_dot(const float *a, const float *b, int64_t n, lyco_dtype T);

/* The layer's op (linear or conv with groups): y = op(x, w), dgrad, wgrad — fp32 accumulation,
   rounded to T. Geometry from the call. */
void eg_op_fwd(const lyco_call *c, const float *x, const float *w, float *y, lyco_dtype T);
void eg_op_dgrad(const lyco_call *c, const float *dy, const float *w, float *dx, lyco_dtype T);
void eg_op_wgrad(const lyco_call *c, const float *x, const float *dy, float *dw, lyco_dtype T);
/* The same op for an arbitrary conv geometry (e.g. LoCon's down conv: O = r). groups = 1. */
typedef struct {
    int64_t N, I, O, groups;
    int64_t in[3], out[3], k[3], stride[3], pad[3], dil[3];
} eg_geom;
void eg_geom_from_call(const lyco_call *c, eg_geom *g);
void eg_conv_fwd(const eg_geom *g, const float *x, const float *w, float *y, lyco_dtype T);
void eg_conv_dgrad(const eg_geom *g, const float *dy, const float *w, float *dx, lyco_dtype T);
void eg_conv_wgrad(const eg_geom *g, const float *x, const float *dy, float *dw, lyco_dtype T);

/* y layout <-> O × n rows layout (n = tokens × spatial) */
void eg_to_rows(const lyco_call *c, const float *y, float *rows);
void eg_from_rows(const lyco_call *c, const float *rows, float *y);

#endif
