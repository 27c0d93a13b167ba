/*
 * core.h — leaf utilities every layer of lyco may use (and that use nothing above them):
 * status + thread-local last error, dtype conversions (integer RNE, NaN-safe, subnormals kept),
 * rounding of fp64 values directly to a storage dtype, strided tensor views, the dtype policy
 * (NUMERICS.md §1) and ULP scoring (NUMERICS.md §2).
 */
#ifndef LYCO_CORE_H
#define LYCO_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lyco.h"

#if defined(__GNUC__)
#define LYCO_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define LYCO_PRINTF(a, b)
#endif

/* ---- status ---- */
/* Records the detail text (thread-local) and returns s, so callers write `return lyco_fail(...)`. */
lyco_status lyco_fail(lyco_status s, const char *fmt, ...) LYCO_PRINTF(2, 3);
void lyco_clear_error(void);

/* ---- dtypes ---- */
#define LYCO_DTYPE_INVALID ((lyco_dtype)-1)
/* The lyco dtype of a DLTensor, or LYCO_DTYPE_INVALID (fp64, ints, lanes ≠ 1, …). */
lyco_dtype lyco_dtype_of(const DLTensor *t);
size_t lyco_dtype_size(lyco_dtype d);
/* "fp64", "int32", … for error messages about dtypes lyco does not take. */
void lyco_describe_dl_dtype(DLDataType t, char *buf, size_t n);

float lyco_load_f32(const void *p, lyco_dtype d);        /* exact widening */
void lyco_store_f32(void *p, lyco_dtype d, float v);     /* one RNE rounding */
void lyco_store_f64(void *p, lyco_dtype d, double v);    /* one RNE rounding, directly from fp64 */
double lyco_round_f64(double v, lyco_dtype d);           /* RN_T(v), as a double */
float lyco_round_f32(float v, lyco_dtype d);             /* RN_T(v), as a float */

/* ---- format constants and ULP (NUMERICS.md §2.1–2.2) ---- */
int lyco_dtype_precision(lyco_dtype d);    /* p: 11, 8, 24 */
int lyco_dtype_emin(lyco_dtype d);         /* -14, -126, -126 */
double lyco_dtype_max(lyco_dtype d);
double lyco_ulp(double r, lyco_dtype d);   /* ulp of the reference value, in fp64 */

/* ---- tensors ---- */
int64_t lyco_numel(const DLTensor *t);
/* Byte address of element with multi-index idx (ndim entries). */
void *lyco_elem_addr(const DLTensor *t, const int64_t *idx);
/* The stride of dim d in elements (the compact row-major stride when t->strides is NULL). */
int64_t lyco_stride(const DLTensor *t, int d);
/* Element address by row-major linear index (handles any strides). */
void *lyco_elem_at(const DLTensor *t, int64_t linear);
bool lyco_is_compact(const DLTensor *t);
/* True when the byte ranges spanned by a and b intersect. */
bool lyco_tensors_overlap(const DLTensor *a, const DLTensor *b);
/* True when a and b are the same view (same data, dtype, shape and strides). */
bool lyco_tensors_same_view(const DLTensor *a, const DLTensor *b);
/* "[4, 64]" */
void lyco_shape_str(const DLTensor *t, char *buf, size_t n);

/* Gather into a compact row-major array, each value rounded to `through` first
   (pass the tensor's own dtype for an exact copy). */
void lyco_gather_f64(const DLTensor *t, lyco_dtype through, double *dst);
void lyco_gather_f32(const DLTensor *t, lyco_dtype through, float *dst);
/* Scatter from a compact row-major array into t, rounding once to t's dtype. */
void lyco_scatter_f64(DLTensor *t, const double *src);
void lyco_scatter_f32(DLTensor *t, const float *src);

/* ---- the dtype policy (NUMERICS.md §1) ---- */
typedef struct {
    const char *name;     /* "x", "lora_down", "W", … */
    lyco_dtype dtype;
} lyco_operand;
/* Resolves compute and output dtypes of one call. base_index names the operand whose dtype
   `base` mode outputs (-1: none; then `base` falls back to promote). Fails with LYCO_ERR_DTYPE
   for fp16 with bf16, naming the two operands. */
lyco_status lyco_policy_resolve(const lyco_operand *ops, int n, int base_index,
                                lyco_output_mode mode, lyco_dtypes *out);
/* Accepts only "promote" | "base" / "fp32" | "tf32"; errors list the valid names. */
lyco_status lyco_output_mode_parse(const char *name, lyco_output_mode *out);
lyco_status lyco_fp32_mode_parse(const char *name, lyco_fp32_mode *out);

/* ---- ULP scoring (NUMERICS.md §2.2, §4.2) ---- */
typedef struct {
    double max_ulp;       /* max |y−r| / ulp_T(rms(r))            (RMS-normalised) */
    double mean_ulp;      /* mean of the same */
    double max_excess;    /* max (|y−r| − 0.5·ulp_T(r)) / ulp_T(rms(r)): the hybrid score */
    int64_t n;            /* elements scored */
    int64_t bad_class;    /* NaN/Inf where the reference is finite, or class/sign mismatch */
    double rms;           /* rms of the reference */
    double peak;          /* largest finite |r| */
} lyco_score;
/* Scores y (the kernel output, widened exactly) against r (exact fp64) in dtype T.
   rows > 0: normalise per row of `cols` elements instead of globally. */
void lyco_score_f64(const double *y, const double *r, int64_t n, int64_t rows, lyco_dtype T,
                    lyco_score *out);
/* Hybrid pass rule: every element within 0.5·ulp_T(r_i) + budget·ulp_T(rms). */
bool lyco_score_pass(const lyco_score *s, double budget);

/* ---- deterministic RNG for tests and bench (xoshiro256**) ---- */
typedef struct { uint64_t s[4]; } lyco_rng;
void lyco_rng_seed(lyco_rng *r, uint64_t seed);
uint64_t lyco_rng_next(lyco_rng *r);
double lyco_rng_uniform(lyco_rng *r);          /* [0, 1) */
double lyco_rng_normal(lyco_rng *r);
/* A seed from LYCO_SEED if set, else from the clock; the caller prints it. */
uint64_t lyco_seed_from_env(void);

#endif
