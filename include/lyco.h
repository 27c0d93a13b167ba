/*
 * lyco.h — the whole public API of lyco.
 *
 * lyco computes every LyCORIS adapter algorithm (LoRA/LoCon with Tucker, LoHa, LoKr, Diag-OFT,
 * BOFT, DoRA weight decomposition, IA3, GLoRA, DyLoRA, Full, Norm) in four directions:
 *
 *   lyco_merge_fwd   ΔW (as W'' − W), or the merged weight W'' = W + m·ΔW, in place or not
 *   lyco_merge_bwd   adapter gradients from ∂L/∂W''
 *   lyco_bypass_fwd  the adapter's contribution to a layer output, without building ΔW,
 *                    written alone or added to the caller's base output y0
 *   lyco_bypass_bwd  adapter gradients, and the extra gradients of x and y0
 *
 * Usage (this exact code is compiled by tests/c/test_header_example.c, as C and as C++):
 *
 *     #include <stdio.h>
 *     #include "lyco.h"
 *     // The adapter term alone, Δ = (x · downᵀ) · upᵀ · (alpha/rank), of a LoRA on a 64→32
 *     // Linear, rank 4, for 8 tokens (pass y0 in lyco_bypass_args to get y = y0 + Δ).
 *     float x[8 * 64], down[4 * 64], up[32 * 4], y[8 * 32];
 *     for (int i = 0; i < 8 * 64; i++) x[i] = 0.01f * (float)(i % 7);
 *     for (int i = 0; i < 4 * 64; i++) down[i] = 0.01f * (float)(i % 5);
 *     for (int i = 0; i < 32 * 4; i++) up[i] = 0.01f * (float)(i % 3);
 *     int64_t sx[2] = {8, 64}, sd[2] = {4, 64}, su[2] = {32, 4}, sy[2] = {8, 32};
 *     DLTensor tx = lyco_host_tensor(x, LYCO_F32, 2, sx);
 *     DLTensor td = lyco_host_tensor(down, LYCO_F32, 2, sd);
 *     DLTensor tu = lyco_host_tensor(up, LYCO_F32, 2, su);
 *     DLTensor ty = lyco_host_tensor(y, LYCO_F32, 2, sy);
 *     lyco_adapter a;
 *     lyco_adapter_init(&a, LYCO_ALGO_LOCON);
 *     lyco_layer_linear(&a.layer, 32, 64);
 *     a.tensor[LYCO_LORA_DOWN] = &td;
 *     a.tensor[LYCO_LORA_UP] = &tu;
 *     a.alpha = 2.0;
 *     lyco_ctx *ctx = NULL;
 *     if (lyco_ctx_create(&ctx) != LYCO_OK) return 1;
 *     lyco_bypass_args in = {&tx, NULL, NULL, 0};      // x, y0, base weight, flags
 *     int rc = 0;
 *     if (lyco_bypass_fwd(ctx, &ty, &a, &in) != LYCO_OK) {
 *         fprintf(stderr, "lyco: %s\n", lyco_last_error());
 *         rc = 1;
 *     }
 *     lyco_ctx_destroy(ctx);
 *     return rc;
 *
 * Shape vocabulary (ALGORITHMS.md §0): O, I = output/input features (channels); k = kernel dims
 * (K = their product, 1 for linear); r = rank. A base weight W is O×I (linear) or O×I×k (conv);
 * "ΔW̄" is W flattened to O×(I·K). Activations: linear x is (…, I), conv x is (N, I, spatial…).
 *
 * Dtype policy (NUMERICS.md §1), identical on every backend:
 *   - operands may be fp16, bf16 or fp32 in any mix, except fp16 together with bf16 (LYCO_ERR_DTYPE);
 *   - compute dtype = the 16-bit type if any operand is 16-bit, else fp32; operands are rounded
 *     (RNE) to it as they enter the products; accumulation is always fp32;
 *   - output dtype: `promote` (default) = promotion of every operand; `base` = the base tensor's
 *     dtype (W for merge; y0, else x, for bypass); the caller allocates outputs in that dtype
 *     (lyco_resolve_dtypes tells it);
 *   - every gradient has its leaf's own dtype.
 *
 * Error model: every function that can fail returns lyco_status; lyco_last_error() (thread-local)
 * names the argument, what it was and what was expected. Nothing in lyco prints, exits or aborts.
 * Inputs are never modified (except an output that the caller made alias its input on purpose:
 * in-place merge W'' into W, y into y0).
 */
#ifndef LYCO_H
#define LYCO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * DLPack tensor views (ABI-compatible with dlpack.h v0.8+; if dlpack.h was included first,
 * its definitions are used).
 * ------------------------------------------------------------------------------------------- */
#ifndef DLPACK_VERSION
typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 } DLDeviceType;
typedef struct { DLDeviceType device_type; int32_t device_id; } DLDevice;
typedef enum { kDLInt = 0U, kDLUInt = 1U, kDLFloat = 2U, kDLBfloat = 4U } DLDataTypeCode;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;          /* may be unaligned */
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;    /* in elements; NULL = compact row-major */
    uint64_t byte_offset;
} DLTensor;
#endif

/* ---------------------------------------------------------------------------------------------
 * Status and errors
 * ------------------------------------------------------------------------------------------- */
typedef enum {
    LYCO_OK = 0,
    LYCO_ERR_NULL = 1,        /* a required pointer argument is NULL */
    LYCO_ERR_INVALID = 2,     /* an argument value is out of range (enum, flag, hyper-parameter) */
    LYCO_ERR_SHAPE = 3,       /* ndim or shape disagrees with the layer / other tensors */
    LYCO_ERR_DTYPE = 4,       /* unsupported dtype, fp16 with bf16, or output dtype ≠ policy */
    LYCO_ERR_DEVICE = 5,      /* tensors on different devices, or a device the backend lacks */
    LYCO_ERR_ALIAS = 6,       /* an output overlaps an input where that is not allowed */
    LYCO_ERR_UNSUPPORTED = 7, /* a valid request no kernel takes (the goal: never returned) */
    LYCO_ERR_NOMEM = 8,       /* allocation failed */
    LYCO_ERR_BACKEND = 9,     /* a backend (e.g. CUDA) call failed */
    LYCO_ERR_IO = 10,         /* file read/write failed */
    LYCO_ERR_FORMAT = 11,     /* a file is malformed */
    LYCO_ERR_NUMERIC = 12,    /* NaN/Inf produced where the caller asked to be told */
    LYCO_STATUS_COUNT
} lyco_status;

const char *lyco_status_name(lyco_status s);   /* "LYCO_ERR_SHAPE"; "LYCO_UNKNOWN_STATUS" */
const char *lyco_last_error(void);             /* thread-local detail of the last failure */

/* ---------------------------------------------------------------------------------------------
 * Dtypes (convenience; DLTensor dtypes are what the API reads)
 * ------------------------------------------------------------------------------------------- */
typedef enum { LYCO_F16 = 0, LYCO_BF16 = 1, LYCO_F32 = 2, LYCO_DTYPE_COUNT } lyco_dtype;
const char *lyco_dtype_name(lyco_dtype d);     /* "fp16", "bf16", "fp32" */
DLDataType lyco_dl_dtype(lyco_dtype d);
/* A compact row-major host view (strides NULL). */
DLTensor lyco_host_tensor(void *data, lyco_dtype d, int32_t ndim, int64_t *shape);

/* ---------------------------------------------------------------------------------------------
 * Context
 * ------------------------------------------------------------------------------------------- */
typedef enum { LYCO_BACKEND_AUTO = 0, LYCO_BACKEND_REF, LYCO_BACKEND_EAGER, LYCO_BACKEND_CPU,
               LYCO_BACKEND_CUDA, LYCO_BACKEND_COUNT } lyco_backend;
typedef enum { LYCO_OUTPUT_PROMOTE = 0, LYCO_OUTPUT_BASE = 1 } lyco_output_mode;
typedef enum { LYCO_FP32_FULL = 0, LYCO_FP32_TF32 = 1 } lyco_fp32_mode;

typedef struct lyco_ctx lyco_ctx;
lyco_status lyco_ctx_create(lyco_ctx **out);   /* backend from LYCO_BACKEND env, else auto */
void lyco_ctx_destroy(lyco_ctx *ctx);
lyco_status lyco_ctx_set_backend(lyco_ctx *ctx, lyco_backend b);
lyco_status lyco_ctx_set_backend_name(lyco_ctx *ctx, const char *name);   /* auto|ref|eager|cpu|cuda */
lyco_backend lyco_ctx_backend(const lyco_ctx *ctx);
const char *lyco_backend_name(lyco_backend b);
lyco_status lyco_ctx_set_output_mode(lyco_ctx *ctx, lyco_output_mode m);
lyco_status lyco_ctx_set_output_mode_name(lyco_ctx *ctx, const char *name); /* promote|base */
lyco_status lyco_ctx_set_fp32_mode(lyco_ctx *ctx, lyco_fp32_mode m);
lyco_status lyco_ctx_set_fp32_mode_name(lyco_ctx *ctx, const char *name);   /* fp32|tf32 */
/* CUDA stream (a cudaStream_t) used by the cuda backend; NULL = the per-thread default. */
lyco_status lyco_ctx_set_stream(lyco_ctx *ctx, void *stream);

/* Which path the last op on this context took. */
typedef enum { LYCO_PATH_NONE = 0, LYCO_PATH_REF, LYCO_PATH_EAGER, LYCO_PATH_FUSED } lyco_path_kind;
typedef struct {
    lyco_path_kind kind;
    lyco_backend backend;     /* the backend that ran */
    char why[160];            /* for LYCO_PATH_EAGER taken as a fallback: the reason */
    uint64_t fallbacks;       /* fallbacks counted on this context since creation */
} lyco_path;
lyco_status lyco_ctx_last_path(const lyco_ctx *ctx, lyco_path *out);
const char *lyco_path_name(lyco_path_kind k);  /* "ref", "eager", "fused" */

/* ---------------------------------------------------------------------------------------------
 * Layer geometry
 * ------------------------------------------------------------------------------------------- */
typedef enum { LYCO_LAYER_LINEAR = 0, LYCO_LAYER_CONV = 1, LYCO_LAYER_NORM = 2 } lyco_layer_kind;
typedef enum { LYCO_NORM_LAYER = 0, LYCO_NORM_GROUP = 1 } lyco_norm_kind;

typedef struct {
    lyco_layer_kind kind;
    int64_t out_features;     /* O (linear/conv); C (norm) */
    int64_t in_features;      /* I = in_channels for conv (not in_channels/groups) */
    int32_t conv_dims;        /* 1, 2 or 3 for conv; 0 otherwise */
    int64_t kernel[3];
    int64_t stride[3];
    int64_t padding[3];
    int64_t dilation[3];
    int64_t groups;           /* conv groups; ΔW-building algorithms require 1 */
    lyco_norm_kind norm_kind; /* norm layers: LayerNorm over the last dim, or GroupNorm */
    int64_t norm_groups;
    double norm_eps;
} lyco_layer;

void lyco_layer_linear(lyco_layer *l, int64_t out_features, int64_t in_features);
/* dims = 1..3; kernel/stride/padding/dilation arrays of length dims (NULL = 1,1,0,1 defaults) */
lyco_status lyco_layer_conv(lyco_layer *l, int32_t dims, int64_t out_ch, int64_t in_ch,
                            const int64_t *kernel, const int64_t *stride,
                            const int64_t *padding, const int64_t *dilation, int64_t groups);
void lyco_layer_norm(lyco_layer *l, lyco_norm_kind kind, int64_t channels, int64_t groups,
                     double eps);

/* ---------------------------------------------------------------------------------------------
 * Adapter: one struct for every algorithm. Tensor slots are borrowed views, NULL when unused.
 * Slot names equal the file keys of ALGORITHMS.md §3 (without ".weight").
 * ------------------------------------------------------------------------------------------- */
typedef enum {
    LYCO_ALGO_NONE = 0,
    LYCO_ALGO_LOCON,      /* LoRA / LoCon, plain or Tucker (lora_mid present) */
    LYCO_ALGO_LOHA,       /* plain or Tucker (hada_t1/t2 present) */
    LYCO_ALGO_LOKR,
    LYCO_ALGO_DIAG_OFT,
    LYCO_ALGO_BOFT,
    LYCO_ALGO_IA3,
    LYCO_ALGO_GLORA,
    LYCO_ALGO_DYLORA,
    LYCO_ALGO_FULL,
    LYCO_ALGO_NORM,
    LYCO_ALGO_COUNT
} lyco_algo;
const char *lyco_algo_name(lyco_algo a);             /* "locon", "loha", … "norm" */
lyco_status lyco_algo_from_name(const char *name, lyco_algo *out); /* accepts "lora" too */

typedef enum {
    LYCO_LORA_DOWN = 0,   /* r×I (linear), r×I×k (conv plain), r×I×1… (Tucker) */
    LYCO_LORA_UP,         /* O×r (linear), O×r×1… or O×r (conv) */
    LYCO_LORA_MID,        /* r×r×k (Tucker) */
    LYCO_HADA_W1_A,       /* O×r (plain), r×O (Tucker) */
    LYCO_HADA_W1_B,       /* r×(I·K) (plain), r×I (Tucker) */
    LYCO_HADA_W2_A,
    LYCO_HADA_W2_B,
    LYCO_HADA_T1,         /* r×r×k */
    LYCO_HADA_T2,
    LYCO_LOKR_W1,         /* a×c */
    LYCO_LOKR_W1_A,       /* a×r */
    LYCO_LOKR_W1_B,       /* r×c */
    LYCO_LOKR_W2,         /* b×d(×k) */
    LYCO_LOKR_W2_A,       /* b×r (plain), r×b (Tucker) */
    LYCO_LOKR_W2_B,       /* r×(d·K) or r×d×k (plain), r×d (Tucker) */
    LYCO_LOKR_T2,         /* r×r×k */
    LYCO_OFT_BLOCKS,      /* nb×bs×bs (Diag-OFT), M×nb×b×b (BOFT) */
    LYCO_RESCALE,         /* O or O×1… (OFT/BOFT) */
    LYCO_IA3_WEIGHT,      /* D or 1×D×1… */
    LYCO_GLORA_A1,        /* I×r(×1…) */
    LYCO_GLORA_A2,        /* r×I(×1…) */
    LYCO_GLORA_B1,        /* O×r(×1…) */
    LYCO_GLORA_B2,        /* r×I(×k) */
    LYCO_DORA_SCALE,      /* O×1… (wd_on_out) or 1×I×1… (input axis) */
    LYCO_DIFF,            /* shape of W */
    LYCO_DIFF_B,          /* O */
    LYCO_W_NORM,          /* C */
    LYCO_B_NORM,          /* C */
    LYCO_SCALAR,          /* 0-dim trainable scalar σs (use_scalar); NULL = 1 */
    /* masks: caller-drawn, not trainable, any float dtype, never part of the dtype policy */
    LYCO_RANK_MASK,       /* LoCon/LoHa/LoKr merge: O (output rows); LoCon bypass: r;
                             GLoRA bypass: r (A path); Diag-OFT: nb×bs×bs (already /(1−p));
                             Norm: C */
    LYCO_RANK_MASK_B,     /* GLoRA bypass: r (B path) */
    LYCO_MODULE_MASK,     /* 1 element: 0 = adapter dropped for this call, 1 = applied */
    LYCO_SLOT_COUNT
} lyco_slot;
const char *lyco_slot_name(lyco_slot s);             /* "lora_down", …, "module_mask" */

#define LYCO_FLAG_UPSTREAM_MERGE_SCALE 1u  /* LoHa/LoKr merge: s² and no σs, like upstream */
#define LYCO_FLAG_RS_LORA              2u  /* s = α/√r instead of α/r */

typedef struct {
    lyco_algo algo;
    lyco_layer layer;
    const DLTensor *tensor[LYCO_SLOT_COUNT];
    double alpha;           /* NaN or 0 = absent (α = r); ignored by OFT/BOFT/IA3/Full/Norm */
    double scale;           /* NaN = derive s from alpha and rank (ALGORITHMS.md §1.2) */
    double multiplier;      /* m, default 1 */
    double constraint;      /* OFT/BOFT κ (already multiplied by O where the module does); ≤0 off */
    int32_t wd_on_out;      /* DoRA axis: 1 = per output row (default), 0 = per input channel;
                               -1 = infer from dora_scale's shape */
    int32_t ia3_on_input;   /* IA3: 1 = scale inputs, 0 = scale outputs */
    int32_t dylora_block_size;    /* DyLoRA bs */
    int32_t dylora_active_blocks; /* DyLoRA t*+1: blocks 0..t* used, block t* trained */
    uint32_t flags;         /* LYCO_FLAG_* */
} lyco_adapter;

/* Defaults: all slots NULL, alpha NaN, scale NaN, multiplier 1, constraint 0, wd_on_out -1,
   ia3_on_input 0, dylora_block_size 1, dylora_active_blocks 0 (= all), flags 0. */
void lyco_adapter_init(lyco_adapter *a, lyco_algo algo);

/* Gradient outputs: grad[s] mirrors tensor[s]; NULL = not wanted (its work is skipped).
   Each must have its slot's shape and dtype. */
typedef struct {
    DLTensor *grad[LYCO_SLOT_COUNT];
} lyco_grads;

/* ---------------------------------------------------------------------------------------------
 * The four verbs
 * ------------------------------------------------------------------------------------------- */
typedef enum {
    LYCO_MERGE_WEIGHT = 0,  /* out = W'' (out may be W itself: in-place merge) */
    LYCO_MERGE_DELTA = 1,   /* out = W'' − W (multiplier included; W may be NULL where the
                               algorithm does not read it) */
    LYCO_MERGE_UNMERGE = 2  /* out = W − (W'' − W): removes an additive adapter (W − m·ΔW);
                               refused for the non-additive OFT/BOFT/DoRA */
} lyco_merge_mode;

typedef struct {
    const DLTensor *weight;   /* W: O×I (linear), O×I/g×k (conv), C (norm: γ) */
    const DLTensor *bias;     /* b (Full diff_b) or β (Norm b_norm); may be NULL */
    lyco_merge_mode mode;
} lyco_merge_args;

/* Merge forward. out: W'' (or W'' − W); out_bias: b'' (or its delta) for Full/Norm, may be NULL. */
lyco_status lyco_merge_fwd(lyco_ctx *ctx, DLTensor *out, DLTensor *out_bias,
                           const lyco_adapter *a, const lyco_merge_args *in);
/* Merge backward. d_out = ∂L/∂W''; d_out_bias = ∂L/∂b'' (Full/Norm, may be NULL). */
lyco_status lyco_merge_bwd(lyco_ctx *ctx, const lyco_grads *g, const lyco_adapter *a,
                           const lyco_merge_args *in, const DLTensor *d_out,
                           const DLTensor *d_out_bias);

#define LYCO_BYPASS_DELTA_ONLY 1u   /* write Δ alone even when y0 is given (OFT/BOFT/IA3-out
                                       need y0 as an input) */

typedef struct {
    const DLTensor *x;        /* layer input: (…, I) linear, (N, I, spatial…) conv, (…, C) or
                                 (N, C, …) norm */
    const DLTensor *y0;       /* base output y0 = base(x); NULL = write Δ alone */
    const DLTensor *weight;   /* base W: required by DoRA, GLoRA, IA3 on input */
    uint32_t flags;           /* LYCO_BYPASS_* */
} lyco_bypass_args;

/* Bypass forward: y = y0 + Δ(x) (or Δ alone). y may be y0 itself (in place). */
lyco_status lyco_bypass_fwd(lyco_ctx *ctx, DLTensor *y, const lyco_adapter *a,
                            const lyco_bypass_args *in);
/* Bypass backward. dy = ∂L/∂y. Outputs (each may be NULL):
   dx  = the adapter path's part of ∂L/∂x (the base layer's own input gradient is the caller's);
   dy0 = ∂L/∂y0 (= dy for additive algorithms; rotated/scaled for OFT/BOFT/IA3-out). */
lyco_status lyco_bypass_bwd(lyco_ctx *ctx, const lyco_grads *g, DLTensor *dx, DLTensor *dy0,
                            const lyco_adapter *a, const lyco_bypass_args *in,
                            const DLTensor *dy);

/* ---------------------------------------------------------------------------------------------
 * Policy queries
 * ------------------------------------------------------------------------------------------- */
typedef enum { LYCO_DIR_MERGE_FWD = 0, LYCO_DIR_MERGE_BWD, LYCO_DIR_BYPASS_FWD,
               LYCO_DIR_BYPASS_BWD, LYCO_DIR_COUNT } lyco_direction;
const char *lyco_direction_name(lyco_direction d);   /* "merge_fwd", … */

typedef struct {
    lyco_dtype compute;       /* what the products take */
    lyco_dtype output;        /* W'' / y / Δ */
} lyco_dtypes;
/* The dtypes the policy gives a call: the caller allocates outputs from this. */
lyco_status lyco_resolve_dtypes(const lyco_ctx *ctx, const lyco_adapter *a,
                                const DLTensor *base, const DLTensor *x, const DLTensor *y0,
                                lyco_dtypes *out);

/* fp32 <-> 16-bit conversions used throughout (integer RNE, NaN-safe, subnormals kept). */
uint16_t lyco_f32_to_f16(float f);
uint16_t lyco_f32_to_bf16(float f);
float lyco_f16_to_f32(uint16_t h);
float lyco_bf16_to_f32(uint16_t h);

const char *lyco_version(void);

/* ABI layout report, for bindings that mirror the structs above by hand (python/lyco checks its
   ctypes copy with it): lyco_abi_layout("lyco_adapter") is sizeof(lyco_adapter),
   lyco_abi_layout("lyco_adapter.alpha") is offsetof(lyco_adapter, alpha), "LYCO_SLOT_COUNT" and
   the other *_COUNT names their values; -1 for a name it does not know. lyco_abi_layout_name(i)
   lists the known names (i = 0, 1, … until it returns NULL). */
int64_t lyco_abi_layout(const char *name);
const char *lyco_abi_layout_name(int index);

#ifdef __cplusplus
}
#endif
#endif /* LYCO_H */
