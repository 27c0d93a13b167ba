/*
 * kern.h — the plain-C interface between the CUDA backend's dispatcher (backend.c) and its
 * kernels (*.cu). The dispatcher turns a validated lyco_call into the structs below (2-D strided
 * views of every operand, the resolved scalars); each launcher returns lyco_status and reports a
 * failed CUDA call as LYCO_ERR_BACKEND with the CUDA error string (lyco_fail).
 *
 * Views: every operand is seen as a rows×cols matrix with element (r, c) at byte address
 *   p + (r·s0 + c·s1)·elem_size
 * (conv weights are flattened to O×(I·K), activations to tokens×features, vectors to 1×n).
 * Views are built only when the tensor's dims collapse to two strides (backend.c declines the
 * rest). Flags: LK_UNALIGNED — p is not a multiple of the element size (byte-wise access);
 * LK_VEC — s1 == 1 and p, s0·elem_size are multiples of 16 (16-byte vector access).
 */
#ifndef LYCO_CUDA_KERN_H
#define LYCO_CUDA_KERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LK_UNALIGNED 1
#define LK_VEC 2

typedef struct {
    const void *p;       /* element (0, 0); NULL = absent */
    int64_t s0, s1;      /* strides in elements */
    int64_t rows, cols;
    int32_t dt;          /* lyco_dtype: 0 fp16, 1 bf16, 2 fp32 */
    int32_t flags;       /* LK_* */
} lk_view;

/* An activation: element (n, ch, p) at byte p + (n·sn + ch·sc + p·sp)·elem_size, p = the
   row-major spatial position (linear layers: n = token, sp unused). */
typedef struct {
    const void *p;            /* NULL = absent */
    int64_t sn, sc, sp;       /* strides in elements */
    int32_t dt, flags;        /* lyco_dtype, LK_UNALIGNED */
} lk_act;

/* Conv geometry (nd = 0 for linear): input / output spatial sizes, kernel, stride, padding,
   dilation per spatial dim (row-major positions and kernel offsets). */
typedef struct {
    int32_t nd;
    int64_t in[3], out[3], k[3], st[3], pad[3], dil[3];
    int64_t spin, spout;      /* products of in / out (1 for linear) */
} lk_geo;

/* The LoCon factors and the scalars of one call (linear, or conv flattened to I·K columns). */
typedef struct {
    int32_t ct;          /* compute dtype */
    int64_t O, IK, K, r; /* K = kernel positions per input channel (1 for linear) */
    lk_view U, D;        /* up O×r, down r×IK */
    lk_view mask;        /* rank mask: merge = q_o (1×O), bypass = q_i (1×r); p NULL = none */
    lk_view sigma;       /* σs (1×1) on the device; p NULL = 1 */
    double s, m;         /* scale and multiplier */
} lk_locon;

/* DoRA (ALGORITHMS.md §1.6) on top of an additive ΔW. */
typedef struct {
    int32_t on;          /* 0 = no DoRA */
    int32_t on_out;      /* 1 = norm per output row, 0 = per input channel (column j → j / K) */
    lk_view d;           /* dora_scale, 1×kept */
    double eps;          /* machine epsilon of dora_scale's dtype */
    lk_view grad_d;      /* ∂L/∂dora_scale (1×kept), p NULL = not wanted */
} lk_dora;

/* Device facts the tile choices read (queried once per device: lk_device_query's cache). */
typedef struct {
    int32_t sms;
    int32_t smem_optin;  /* max dynamic shared memory per block (bytes) */
    int32_t smem_sm;     /* shared memory per multiprocessor (bytes) */
    int32_t cc_major;
} lk_device;

typedef struct {
    lk_locon L;
    lk_dora dora;
    lk_view W, out;      /* W may be absent in delta mode without DoRA */
    int32_t mode;        /* lyco_merge_mode */
} lk_merge_fwd_args;

typedef struct {
    lk_locon L;
    lk_dora dora;
    lk_view W, G;        /* G = ∂L/∂W'' */
    lk_view gU, gD, gsigma;  /* gradients (p NULL = not wanted) */
} lk_merge_bwd_args;

typedef struct {
    lk_locon L;
    lk_view x, y0, y;    /* y0 p NULL = write Δ alone */
    int64_t T;           /* tokens */
} lk_bypass_fwd_args;

typedef struct {
    lk_locon L;
    lk_view x, dy, dx, dy0;  /* dx / dy0 p NULL = not wanted */
    lk_view gU, gD, gsigma;
    int64_t T;
} lk_bypass_bwd_args;

/* Rows [r0, r0 + nr) × columns [c0, c0 + nc) of v as a view; LK_VEC is dropped when the new origin
   is not 16-byte aligned. An absent view (p NULL) stays absent. */
static inline lk_view lk_view_sub(lk_view v, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    const int64_t es = v.dt == 2 ? 4 : 2; /* lyco_dtype 2 = fp32 */
    if (!v.p) return v;
    v.p = (const char *)v.p + (r0 * v.s0 + c0 * v.s1) * es;
    v.rows = nr;
    v.cols = nc;
    if (((uintptr_t)v.p & 15) != 0) v.flags &= ~LK_VEC;
    return v;
}
/* Row-major stream-ordered scratch (rows × cols, row pitch ld elements, 16-byte rows: scratch is
   256-byte aligned and ld·elem_size a multiple of 16). */
static inline lk_view lk_pitched_view(const void *p, int64_t rows, int64_t cols, int64_t ld, int32_t dt) {
    lk_view v;
    v.p = p;
    v.s0 = ld;
    v.s1 = 1;
    v.rows = rows;
    v.cols = cols;
    v.dt = dt;
    v.flags = LK_VEC;
    return v;
}
/* A linear layer's activation (tokens × features) as a view, with LK_VEC where it holds. */
static inline lk_view lk_act_as_view(lk_act x, int64_t tokens, int64_t features) {
    const int64_t es = x.dt == 2 ? 4 : 2;
    lk_view v;
    v.p = x.p;
    v.s0 = x.sn;
    v.s1 = x.sc;
    v.rows = tokens;
    v.cols = features;
    v.dt = x.dt;
    v.flags = x.flags & LK_UNALIGNED;
    if (!v.flags && v.s1 == 1 && ((uintptr_t)x.p & 15) == 0 && (tokens <= 1 || (v.s0 * es) % 16 == 0)) v.flags |= LK_VEC;
    return v;
}
/* Launchers (locon.cu, dora.cu). stream is a cudaStream_t. */
int lk_locon_merge_fwd(const lk_merge_fwd_args *a, const lk_device *dev, void *stream);
/* The small-rank merge forward (locon_merge_small.cu): runs it and sets *done when it applies (no
   DoRA, r ≤ 16, row-major 16-byte-aligned out and W); LYCO_CUDA_NO_SMALL_MERGE=1 turns it off (A/B). */
int lk_locon_merge_fwd_small(const lk_merge_fwd_args *a, const lk_device *dev, void *stream, int *done);
int lk_locon_merge_bwd(const lk_merge_bwd_args *a, const lk_device *dev, void *stream);
int lk_locon_bypass_fwd(const lk_bypass_fwd_args *a, const lk_device *dev, void *stream, char *why, size_t why_len);
int lk_locon_bypass_bwd(const lk_bypass_bwd_args *a, const lk_device *dev, void *stream, char *why, size_t why_len);

/* Elementwise helpers (util.cu): dst = RN_dst(RN_ct(src)) (src p NULL: dst = 0), any strides. */
int lk_copy_round(const lk_view *dst, const lk_view *src, int32_t ct, void *stream);

/* Uniform values in (-scale, scale), never 0, from a counter hash of (seed, index): n elements of
   dtype dt at p, compact (util.cu; tests and bench). Synchronous. */
int lk_fill_uniform(void *p, int32_t dt, int64_t n, uint64_t seed, double scale);

/* Stream-ordered scratch (util.cu): cudaMallocAsync / cudaFreeAsync on the call's stream. */
int lk_scratch_alloc(void **p, size_t bytes, void *stream);
int lk_scratch_free(void *p, void *stream);
int lk_device_query(lk_device *dev);
/* Dynamic shared memory for kernel func on the current device: cudaFuncSetAttribute once per
   kernel, device and size (any size: static shared memory counts against the 48 KB default). */
int lk_smem_optin(const void *func, int bytes);

#ifdef __cplusplus
}
#endif
#endif
