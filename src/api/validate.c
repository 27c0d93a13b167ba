/*
 * validate.c — argument checking for the four verbs. After lyco_validate succeeds a backend may
 * compute without further checks: every tensor is well-formed, on one device, of a dtype the
 * policy takes; shapes agree with the layer and the algorithm (shapes.c); outputs have the
 * policy's dtype and do not overlap inputs (except the documented in-place cases); the scale and
 * the module mask are resolved.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api.h"

#define MAX_NDIM 8

static lyco_status check_view(const DLTensor *t, const char *name, bool is_mask) {
    if (t->ndim < 0 || t->ndim > MAX_NDIM)
        return lyco_fail(LYCO_ERR_SHAPE, "%s has ndim %d; expected 0..%d", name, t->ndim, MAX_NDIM);
    if (t->ndim > 0 && !t->shape) return lyco_fail(LYCO_ERR_NULL, "%s has ndim %d but shape is NULL", name, t->ndim);
    /* every byte offset must fit: the element count times the element size, checked */
    uint64_t bytes = (uint64_t)(t->dtype.bits * t->dtype.lanes + 7) / 8;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0) return lyco_fail(LYCO_ERR_SHAPE, "%s has shape[%d] = %lld; expected ≥ 0", name, i, (long long)t->shape[i]);
        if (t->shape[i] > 0 && bytes > ((uint64_t)1 << 62) / (uint64_t)t->shape[i]) {
            char got[96];
            lyco_shape_str(t, got, sizeof got);
            return lyco_fail(LYCO_ERR_SHAPE, "%s has shape %s; its size overflows (expected fewer than 2^62 bytes)", name, got);
        }
        bytes *= (uint64_t)(t->shape[i] > 0 ? t->shape[i] : 1);
    }
    if (lyco_numel(t) > 0 && !t->data) return lyco_fail(LYCO_ERR_NULL, "%s has %lld elements but data is NULL", name, (long long)lyco_numel(t));
    if (lyco_dtype_of(t) == LYCO_DTYPE_INVALID) {
        char d[32];
        lyco_describe_dl_dtype(t->dtype, d, sizeof d);
        return lyco_fail(LYCO_ERR_DTYPE, "%s is %s; expected fp16, bf16 or fp32%s", name, d, is_mask ? " (masks too)" : "");
    }
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost && t->device.device_type != kDLCUDA)
        return lyco_fail(LYCO_ERR_DEVICE, "%s is on device type %d; expected CPU or CUDA", name, (int)t->device.device_type);
    return LYCO_OK;
}

/* Every tensor of one call must live on one device. The first seen sets it. */
typedef struct { bool set; DLDevice dev; const char *first; } device_check;

static lyco_status same_device(device_check *dc, const DLTensor *t, const char *name) {
    DLDevice d = t->device;
    if (d.device_type == kDLCUDAHost) d.device_type = kDLCPU, d.device_id = 0;
    if (!dc->set) { dc->set = true; dc->dev = d; dc->first = name; return LYCO_OK; }
    if (d.device_type != dc->dev.device_type || (d.device_type == kDLCUDA && d.device_id != dc->dev.device_id))
        return lyco_fail(LYCO_ERR_DEVICE, "%s is on %s:%d but %s is on %s:%d; expected every tensor of a call on one device",
                         name, d.device_type == kDLCUDA ? "cuda" : "cpu", (int)d.device_id, dc->first,
                         dc->dev.device_type == kDLCUDA ? "cuda" : "cpu", (int)dc->dev.device_id);
    return LYCO_OK;
}

static bool is_mask_slot(int s) { return s == LYCO_RANK_MASK || s == LYCO_RANK_MASK_B || s == LYCO_MODULE_MASK; }

static lyco_status expect_shape(const DLTensor *t, const char *name, int ndim, const int64_t *shape, const char *what) {
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (ok) return LYCO_OK;
    char got[96], want[96];
    lyco_shape_str(t, got, sizeof got);
    DLTensor w = {.ndim = ndim, .shape = (int64_t *)shape};
    lyco_shape_str(&w, want, sizeof want);
    return lyco_fail(LYCO_ERR_SHAPE, "%s has shape %s; expected %s (%s)", name, got, want, what);
}

static lyco_status expect_dtype(const DLTensor *t, const char *name, lyco_dtype want, const char *why) {
    lyco_dtype d = lyco_dtype_of(t);
    if (d == want) return LYCO_OK;
    return lyco_fail(LYCO_ERR_DTYPE, "%s is %s; expected %s (%s)", name, lyco_dtype_name(d), lyco_dtype_name(want), why);
}

/* The base weight's shape for this layer: O×I (linear), O×(I/g)×k (conv), C (norm). */
static int weight_shape(const lyco_layer *l, int64_t *sh) {
    if (l->kind == LYCO_LAYER_NORM) { sh[0] = l->out_features; return 1; }
    sh[0] = l->out_features;
    sh[1] = l->in_features / (l->kind == LYCO_LAYER_CONV ? l->groups : 1);
    if (l->kind != LYCO_LAYER_CONV) return 2;
    for (int i = 0; i < l->conv_dims; i++) sh[2 + i] = l->kernel[i];
    return 2 + l->conv_dims;
}

static lyco_status check_layer(const lyco_layer *l) {
    if (l->kind != LYCO_LAYER_LINEAR && l->kind != LYCO_LAYER_CONV && l->kind != LYCO_LAYER_NORM)
        return lyco_fail(LYCO_ERR_INVALID, "layer kind is %d; expected linear, conv or norm", (int)l->kind);
    if (l->out_features <= 0 || l->in_features <= 0)
        return lyco_fail(LYCO_ERR_SHAPE, "layer is %lld×%lld (out×in); expected positive sizes", (long long)l->out_features, (long long)l->in_features);
    if (l->kind == LYCO_LAYER_CONV) {
        if (l->conv_dims < 1 || l->conv_dims > 3) return lyco_fail(LYCO_ERR_INVALID, "layer conv_dims is %d; expected 1, 2 or 3", l->conv_dims);
        if (l->groups < 1 || l->in_features % l->groups || l->out_features % l->groups)
            return lyco_fail(LYCO_ERR_INVALID, "layer groups is %lld; expected ≥ 1 dividing in (%lld) and out (%lld) channels",
                             (long long)l->groups, (long long)l->in_features, (long long)l->out_features);
        for (int i = 0; i < l->conv_dims; i++)
            if (l->kernel[i] < 1 || l->stride[i] < 1 || l->dilation[i] < 1 || l->padding[i] < 0)
                return lyco_fail(LYCO_ERR_INVALID, "layer dim %d: kernel %lld, stride %lld, dilation %lld, padding %lld; expected kernel, stride, dilation ≥ 1 and padding ≥ 0",
                                 i, (long long)l->kernel[i], (long long)l->stride[i], (long long)l->dilation[i], (long long)l->padding[i]);
    }
    if (l->kind == LYCO_LAYER_NORM) {
        if (l->norm_kind != LYCO_NORM_LAYER && l->norm_kind != LYCO_NORM_GROUP)
            return lyco_fail(LYCO_ERR_INVALID, "layer norm_kind is %d; expected layer or group", (int)l->norm_kind);
        if (l->norm_kind == LYCO_NORM_GROUP && (l->norm_groups < 1 || l->out_features % l->norm_groups))
            return lyco_fail(LYCO_ERR_INVALID, "layer norm_groups is %lld; expected ≥ 1 dividing the %lld channels", (long long)l->norm_groups, (long long)l->out_features);
        if (!(l->norm_eps >= 0)) return lyco_fail(LYCO_ERR_INVALID, "layer norm_eps is %g; expected ≥ 0", l->norm_eps);
    }
    return LYCO_OK;
}

/* Bypass geometry: token count and conv spatial sizes from x; the shape y must have. */
static lyco_status bypass_geometry(lyco_call *c, int64_t *yshape, int *yndim) {
    const lyco_layer *l = &c->a->layer;
    const DLTensor *x = c->bypass->x;
    c->sp_in_n = c->sp_out_n = 1;
    if (l->kind == LYCO_LAYER_CONV) {
        int nd = l->conv_dims;
        if (x->ndim != 2 + nd || x->shape[1] != l->in_features) {
            char got[96];
            lyco_shape_str(x, got, sizeof got);
            return lyco_fail(LYCO_ERR_SHAPE, "x has shape %s; expected (N, %lld, %d spatial dims) for this conv%dd layer",
                             got, (long long)l->in_features, nd, nd);
        }
        c->tokens = x->shape[0];
        yshape[0] = x->shape[0];
        yshape[1] = l->out_features;
        for (int i = 0; i < nd; i++) {
            int64_t span = l->dilation[i] * (l->kernel[i] - 1) + 1;
            int64_t in = x->shape[2 + i] + 2 * l->padding[i];
            c->sp_in[i] = x->shape[2 + i];
            c->sp_out[i] = in >= span ? (in - span) / l->stride[i] + 1 : 0;
            if (in < span)
                return lyco_fail(LYCO_ERR_SHAPE, "x spatial dim %d is %lld; with padding %lld it is smaller than the kernel's span %lld",
                                 i, (long long)x->shape[2 + i], (long long)l->padding[i], (long long)span);
            yshape[2 + i] = c->sp_out[i];
            c->sp_in_n *= c->sp_in[i];
            c->sp_out_n *= c->sp_out[i];
        }
        *yndim = 2 + nd;
        return LYCO_OK;
    }
    if (l->kind == LYCO_LAYER_NORM && l->norm_kind == LYCO_NORM_GROUP) {
        if (x->ndim < 2 || x->shape[1] != l->out_features)
            return lyco_fail(LYCO_ERR_SHAPE, "x must be (N, C=%lld, …) for a GroupNorm layer", (long long)l->out_features);
        c->tokens = x->shape[0];
        for (int i = 2; i < x->ndim; i++) c->sp_in_n *= x->shape[i];
        c->sp_out_n = c->sp_in_n;
        *yndim = x->ndim;
        memcpy(yshape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
        return LYCO_OK;
    }
    int64_t feat = l->kind == LYCO_LAYER_NORM ? l->out_features : l->in_features;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != feat) {
        char got[96];
        lyco_shape_str(x, got, sizeof got);
        return lyco_fail(LYCO_ERR_SHAPE, "x has shape %s; expected (…, %lld): the last dim is the layer's input features", got, (long long)feat);
    }
    c->tokens = 1;
    for (int i = 0; i < x->ndim - 1; i++) c->tokens *= x->shape[i];
    *yndim = x->ndim;
    memcpy(yshape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    if (l->kind == LYCO_LAYER_LINEAR) yshape[x->ndim - 1] = l->out_features;
    return LYCO_OK;
}

/* Which algorithms read the base weight W in each direction. */
static bool merge_needs_weight(const lyco_call *c) {
    lyco_algo a = c->a->algo;
    if (c->merge->mode != LYCO_MERGE_DELTA) return true;
    return c->dims.dora || a == LYCO_ALGO_DIAG_OFT || a == LYCO_ALGO_BOFT || a == LYCO_ALGO_IA3 || a == LYCO_ALGO_GLORA;
}
static bool bypass_needs_weight(const lyco_call *c) {
    lyco_algo a = c->a->algo;
    return c->dims.dora || a == LYCO_ALGO_GLORA || (a == LYCO_ALGO_IA3 && c->a->ia3_on_input);
}
static bool bypass_needs_y0(const lyco_call *c) {
    lyco_algo a = c->a->algo;
    return a == LYCO_ALGO_DIAG_OFT || a == LYCO_ALGO_BOFT || (a == LYCO_ALGO_IA3 && !c->a->ia3_on_input);
}
static bool has_bias_delta(const lyco_adapter *a) {
    return (a->algo == LYCO_ALGO_FULL && a->tensor[LYCO_DIFF_B]) || (a->algo == LYCO_ALGO_NORM && a->tensor[LYCO_B_NORM]);
}

typedef struct {
    const DLTensor *t;
    const char *name;   /* for gradients: the slot name, printed as "grad <slot>" */
    bool grad;
} named;

static const char *named_str(const named *n, char *buf, size_t len) {
    if (!n->grad) return n->name;
    snprintf(buf, len, "grad %s", n->name);
    return buf;
}

/* Rank-dropout masks: their length depends on the algorithm and on merge vs bypass (1.7). */
static lyco_status check_masks(const lyco_call *c) {
    const lyco_adapter *a = c->a;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    for (int s = LYCO_RANK_MASK; s <= LYCO_RANK_MASK_B; s++) {
        const DLTensor *t = a->tensor[s];
        if (!t) continue;
        int64_t want = -1;
        const char *what = "";
        switch (a->algo) {
        case LYCO_ALGO_LOCON: want = bypass ? c->dims.r : c->dims.O; what = bypass ? "r (bypass masks the rank activations)" : "O (merge masks output rows)"; break;
        case LYCO_ALGO_LOHA: want = c->dims.O; what = "O (output rows)"; break;
        case LYCO_ALGO_LOKR: want = bypass ? -1 : c->dims.O; what = "O (output rows; LoKr bypass has no rank dropout)"; break;
        case LYCO_ALGO_GLORA: want = bypass ? c->dims.r : -1; what = "r (GLoRA rank dropout exists in bypass only)"; break;
        case LYCO_ALGO_DIAG_OFT: want = bypass ? -1 : c->dims.nb * c->dims.bs * c->dims.bs; what = "nb·bs·bs (merge only)"; break;
        case LYCO_ALGO_NORM: want = c->dims.O; what = "C"; break;
        default: break;
        }
        if (want < 0 || lyco_numel(t) != want) {
            char got[96];
            lyco_shape_str(t, got, sizeof got);
            if (want < 0)
                return lyco_fail(LYCO_ERR_INVALID, "%s is given but %s %s takes no rank mask here; expected NULL (%s)",
                                 lyco_slot_name((lyco_slot)s), lyco_algo_name(a->algo), lyco_direction_name(c->dir), what);
            return lyco_fail(LYCO_ERR_SHAPE, "%s has shape %s; expected %lld elements: %s", lyco_slot_name((lyco_slot)s), got, (long long)want, what);
        }
    }
    return LYCO_OK;
}

lyco_status lyco_validate(const lyco_ctx *ctx, lyco_call *c) {
    const lyco_adapter *a = c->a;
    lyco_status st;
    if (!a) return lyco_fail(LYCO_ERR_NULL, "%s: adapter is NULL", lyco_direction_name(c->dir));
    if ((st = check_layer(&a->layer))) return st;
    if (!isfinite(a->multiplier)) return lyco_fail(LYCO_ERR_INVALID, "multiplier is %g; expected a finite number", a->multiplier);
    if (!isnan(a->alpha) && !isfinite(a->alpha)) return lyco_fail(LYCO_ERR_INVALID, "alpha is %g; expected a finite number (or NaN for absent)", a->alpha);
    if (!isnan(a->scale) && !isfinite(a->scale)) return lyco_fail(LYCO_ERR_INVALID, "scale is %g; expected a finite number (or NaN to derive it)", a->scale);

    device_check dc = {0};
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        const DLTensor *t = a->tensor[s];
        if (!t) continue;
        if ((st = check_view(t, lyco_slot_name((lyco_slot)s), is_mask_slot(s)))) return st;
        /* the module mask decides which work runs: it is read on the host, whatever the device */
        if (s != LYCO_MODULE_MASK && (st = same_device(&dc, t, lyco_slot_name((lyco_slot)s)))) return st;
    }
    if ((st = lyco_shapes_check(a, &c->dims, &c->s))) return st;
    c->m = a->multiplier;
    if ((st = check_masks(c))) return st;
    if (a->tensor[LYCO_SCALAR] && lyco_numel(a->tensor[LYCO_SCALAR]) != 1)
        return lyco_fail(LYCO_ERR_SHAPE, "scalar has %lld elements; expected a 0-dim or 1-element tensor", (long long)lyco_numel(a->tensor[LYCO_SCALAR]));

    /* inputs and outputs of the direction */
    named ins[8] = {{0}};
    named outs[4 + LYCO_SLOT_COUNT] = {{0}};
    int nin = 0, nout = 0;
    int64_t wsh[5];
    int wnd = weight_shape(&a->layer, wsh);
    const DLTensor *base = NULL;
    const char *base_name = NULL;
    bool bwd = c->dir == LYCO_DIR_MERGE_BWD || c->dir == LYCO_DIR_BYPASS_BWD;

    if (c->dir == LYCO_DIR_MERGE_FWD || c->dir == LYCO_DIR_MERGE_BWD) {
        const lyco_merge_args *m = c->merge;
        if (!m) return lyco_fail(LYCO_ERR_NULL, "%s: merge args are NULL; expected a lyco_merge_args", lyco_direction_name(c->dir));
        if (m->mode != LYCO_MERGE_WEIGHT && m->mode != LYCO_MERGE_DELTA && m->mode != LYCO_MERGE_UNMERGE)
            return lyco_fail(LYCO_ERR_INVALID, "merge mode is %d; expected LYCO_MERGE_WEIGHT, LYCO_MERGE_DELTA or LYCO_MERGE_UNMERGE", (int)m->mode);
        if (m->mode == LYCO_MERGE_UNMERGE && (c->dims.dora || a->algo == LYCO_ALGO_DIAG_OFT || a->algo == LYCO_ALGO_BOFT))
            return lyco_fail(LYCO_ERR_INVALID, "merge mode is unmerge but algorithm %s%s is not additive; expected LYCO_MERGE_WEIGHT or LYCO_MERGE_DELTA",
                             lyco_algo_name(a->algo), c->dims.dora ? " with DoRA" : "");
        if (merge_needs_weight(c) && !m->weight)
            return lyco_fail(LYCO_ERR_NULL, "merge args weight (W) is NULL; algorithm %s in this mode reads the base weight", lyco_algo_name(a->algo));
        if (m->weight) {
            if ((st = check_view(m->weight, "W", false)) || (st = same_device(&dc, m->weight, "W")) ||
                (st = expect_shape(m->weight, "W", wnd, wsh, "the layer's weight shape")))
                return st;
            ins[nin++] = (named){m->weight, "W", false};
            base = m->weight;
            base_name = "W";
        }
        if (m->bias) {
            if (!has_bias_delta(a))
                return lyco_fail(LYCO_ERR_INVALID, "merge args bias is given, but %s has no bias delta; expected NULL", lyco_algo_name(a->algo));
            if ((st = check_view(m->bias, "bias", false)) || (st = same_device(&dc, m->bias, "bias")) ||
                (st = expect_shape(m->bias, "bias", 1, &a->layer.out_features, "O")))
                return st;
            ins[nin++] = (named){m->bias, "bias", false};
        }
        if (c->dir == LYCO_DIR_MERGE_FWD) {
            if (!c->out) return lyco_fail(LYCO_ERR_NULL, "merge_fwd: out is NULL; expected a tensor of the weight's shape");
            if ((st = check_view(c->out, "out", false)) || (st = same_device(&dc, c->out, "out")) ||
                (st = expect_shape(c->out, "out", wnd, wsh, "the layer's weight shape")))
                return st;
            outs[nout++] = (named){c->out, "out", false};
            if (c->out_bias) {
                if (!has_bias_delta(a))
                    return lyco_fail(LYCO_ERR_INVALID, "merge_fwd: out_bias is given, but %s has no bias delta; expected NULL", lyco_algo_name(a->algo));
                if (m->mode != LYCO_MERGE_DELTA && !m->bias)
                    return lyco_fail(LYCO_ERR_NULL, "merge_fwd: out_bias is given in a weight/unmerge mode but merge args bias is NULL");
                if ((st = check_view(c->out_bias, "out_bias", false)) || (st = same_device(&dc, c->out_bias, "out_bias")) ||
                    (st = expect_shape(c->out_bias, "out_bias", 1, &a->layer.out_features, "O")))
                    return st;
                outs[nout++] = (named){c->out_bias, "out_bias", false};
            }
        } else {
            if (!c->d_out) return lyco_fail(LYCO_ERR_NULL, "merge_bwd: d_out is NULL; expected ∂L/∂W'' of the weight's shape");
            if ((st = check_view(c->d_out, "d_out", false)) || (st = same_device(&dc, c->d_out, "d_out")) ||
                (st = expect_shape(c->d_out, "d_out", wnd, wsh, "the layer's weight shape")))
                return st;
            ins[nin++] = (named){c->d_out, "d_out", false};
            if (c->d_out_bias) {
                if ((st = check_view(c->d_out_bias, "d_out_bias", false)) || (st = same_device(&dc, c->d_out_bias, "d_out_bias")) ||
                    (st = expect_shape(c->d_out_bias, "d_out_bias", 1, &a->layer.out_features, "O")))
                    return st;
                ins[nin++] = (named){c->d_out_bias, "d_out_bias", false};
            }
        }
    } else {
        const lyco_bypass_args *b = c->bypass;
        if (!b) return lyco_fail(LYCO_ERR_NULL, "%s: bypass args are NULL; expected a lyco_bypass_args", lyco_direction_name(c->dir));
        if (b->flags & ~LYCO_BYPASS_DELTA_ONLY) return lyco_fail(LYCO_ERR_INVALID, "bypass flags are 0x%x; expected a combination of LYCO_BYPASS_DELTA_ONLY", b->flags);
        if (!b->x) return lyco_fail(LYCO_ERR_NULL, "bypass args x is NULL; expected the layer input");
        if ((st = check_view(b->x, "x", false)) || (st = same_device(&dc, b->x, "x"))) return st;
        int64_t ysh[MAX_NDIM];
        int ynd = 0;
        if ((st = bypass_geometry(c, ysh, &ynd))) return st;
        ins[nin++] = (named){b->x, "x", false};
        base = b->x;
        base_name = "x";
        if (bypass_needs_y0(c) && !b->y0)
            return lyco_fail(LYCO_ERR_NULL, "bypass args y0 is NULL; algorithm %s acts on the base output y0", lyco_algo_name(a->algo));
        if (b->y0) {
            if ((st = check_view(b->y0, "y0", false)) || (st = same_device(&dc, b->y0, "y0")) ||
                (st = expect_shape(b->y0, "y0", ynd, ysh, "the layer output's shape")))
                return st;
            ins[nin++] = (named){b->y0, "y0", false};
            base = b->y0;
            base_name = "y0";
        }
        if (bypass_needs_weight(c) && !b->weight)
            return lyco_fail(LYCO_ERR_NULL, "bypass args weight (W) is NULL; algorithm %s%s in bypass reads the base weight",
                             lyco_algo_name(a->algo), c->dims.dora ? " with DoRA" : "");
        if (b->weight) {
            if ((st = check_view(b->weight, "W", false)) || (st = same_device(&dc, b->weight, "W")) ||
                (st = expect_shape(b->weight, "W", wnd, wsh, "the layer's weight shape")))
                return st;
            ins[nin++] = (named){b->weight, "W", false};
        }
        if (c->dir == LYCO_DIR_BYPASS_FWD) {
            if (!c->y) return lyco_fail(LYCO_ERR_NULL, "bypass_fwd: y is NULL; expected the output tensor");
            if ((st = check_view(c->y, "y", false)) || (st = same_device(&dc, c->y, "y")) ||
                (st = expect_shape(c->y, "y", ynd, ysh, "the layer output's shape")))
                return st;
            outs[nout++] = (named){c->y, "y", false};
        } else {
            if (!c->dy) return lyco_fail(LYCO_ERR_NULL, "bypass_bwd: dy is NULL; expected ∂L/∂y");
            if ((st = check_view(c->dy, "dy", false)) || (st = same_device(&dc, c->dy, "dy")) ||
                (st = expect_shape(c->dy, "dy", ynd, ysh, "the layer output's shape")))
                return st;
            ins[nin++] = (named){c->dy, "dy", false};
            if (c->dx) {
                if ((st = check_view(c->dx, "dx", false)) || (st = same_device(&dc, c->dx, "dx")) ||
                    (st = expect_shape(c->dx, "dx", b->x->ndim, b->x->shape, "x's shape")) ||
                    (st = expect_dtype(c->dx, "dx", lyco_dtype_of(b->x), "a gradient has its leaf's dtype")))
                    return st;
                outs[nout++] = (named){c->dx, "dx", false};
            }
            if (c->dy0) {
                if (!b->y0) return lyco_fail(LYCO_ERR_NULL, "bypass_bwd: dy0 is requested but bypass args y0 is NULL");
                if ((st = check_view(c->dy0, "dy0", false)) || (st = same_device(&dc, c->dy0, "dy0")) ||
                    (st = expect_shape(c->dy0, "dy0", ynd, ysh, "y0's shape")) ||
                    (st = expect_dtype(c->dy0, "dy0", lyco_dtype_of(b->y0), "a gradient has its leaf's dtype")))
                    return st;
                outs[nout++] = (named){c->dy0, "dy0", false};
            }
        }
    }

    /* dtype policy: base first, then the adapter's tensors (masks excluded), then the rest */
    lyco_operand ops[LYCO_SLOT_COUNT + 8];
    int nops = 0, base_index = -1;
    if (base) { base_index = nops; ops[nops++] = (lyco_operand){base_name, lyco_dtype_of(base)}; }
    for (int i = 0; i < nin; i++)
        if (ins[i].t != base) ops[nops++] = (lyco_operand){ins[i].name, lyco_dtype_of(ins[i].t)};
    for (int s = 0; s < LYCO_SLOT_COUNT; s++)
        if (a->tensor[s] && !is_mask_slot(s)) ops[nops++] = (lyco_operand){lyco_slot_name((lyco_slot)s), lyco_dtype_of(a->tensor[s])};
    /* operands whose dtype is fixed by being an output are not policy inputs; the output is
       checked against the policy below */
    if ((st = lyco_policy_resolve(ops, nops, base_index, ctx->output_mode, &c->dt))) return st;
    c->fp32_mode = ctx->fp32_mode;
    if (c->out && (st = expect_dtype(c->out, "out", c->dt.output, "the dtype policy's output dtype"))) return st;
    if (c->out_bias && (st = expect_dtype(c->out_bias, "out_bias", c->dt.output, "the dtype policy's output dtype"))) return st;
    if (c->y && (st = expect_dtype(c->y, "y", c->dt.output, "the dtype policy's output dtype"))) return st;

    /* gradients: slot present, same shape, the leaf's dtype */
    if (bwd && c->g) {
        for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
            DLTensor *gt = c->g->grad[s];
            if (!gt) continue;
            const char *sn = lyco_slot_name((lyco_slot)s);
            const DLTensor *t = a->tensor[s];
            if (is_mask_slot(s)) return lyco_fail(LYCO_ERR_INVALID, "grad slot %s is set; masks have no gradient, expected NULL", sn);
            if (!t) return lyco_fail(LYCO_ERR_INVALID, "grad slot %s is set but adapter slot %s is NULL; expected NULL", sn, sn);
            char gname[48];
            snprintf(gname, sizeof gname, "grad %s", sn);
            if ((st = check_view(gt, gname, false)) || (st = same_device(&dc, gt, gname)) ||
                (st = expect_shape(gt, gname, t->ndim, t->shape, "the parameter's shape")) ||
                (st = expect_dtype(gt, gname, lyco_dtype_of(t), "a gradient has its leaf's dtype")))
                return st;
            outs[nout++] = (named){gt, sn, true};
        }
    }

    /* aliasing: outputs never overlap inputs or each other, except the in-place cases */
    for (int o = 0; o < nout; o++) {
        for (int i = 0; i < nin; i++) {
            if (!lyco_tensors_overlap(outs[o].t, ins[i].t)) continue;
            bool inplace = (outs[o].t == c->out && c->merge && ins[i].t == c->merge->weight && lyco_tensors_same_view(outs[o].t, ins[i].t)) ||
                           (outs[o].t == c->y && c->bypass && ins[i].t == c->bypass->y0 && lyco_tensors_same_view(outs[o].t, ins[i].t)) ||
                           (outs[o].t == c->out_bias && c->merge && ins[i].t == c->merge->bias && lyco_tensors_same_view(outs[o].t, ins[i].t));
            char nb[48];
            if (!inplace)
                return lyco_fail(LYCO_ERR_ALIAS, "output %s overlaps input %s; expected separate memory (only W→out and y0→y may be the very same view)",
                                 named_str(&outs[o], nb, sizeof nb), ins[i].name);
        }
        char nb[48], pb[48];
        for (int s = 0; s < LYCO_SLOT_COUNT; s++)
            if (a->tensor[s] && lyco_tensors_overlap(outs[o].t, a->tensor[s]))
                return lyco_fail(LYCO_ERR_ALIAS, "output %s overlaps adapter tensor %s; expected separate memory",
                                 named_str(&outs[o], nb, sizeof nb), lyco_slot_name((lyco_slot)s));
        for (int p = 0; p < o; p++)
            if (lyco_tensors_overlap(outs[o].t, outs[p].t))
                return lyco_fail(LYCO_ERR_ALIAS, "outputs %s and %s overlap; expected separate memory",
                                 named_str(&outs[p], pb, sizeof pb), named_str(&outs[o], nb, sizeof nb));
    }

    /* module mask: one element, read on the host */
    c->dropped = false;
    const DLTensor *mm = a->tensor[LYCO_MODULE_MASK];
    if (mm) {
        if (lyco_numel(mm) != 1) {
            char got[96];
            lyco_shape_str(mm, got, sizeof got);
            return lyco_fail(LYCO_ERR_SHAPE, "module_mask has shape %s; expected one element", got);
        }
        if (mm->device.device_type == kDLCUDA)
            return lyco_fail(LYCO_ERR_DEVICE, "module_mask is on a CUDA device; expected a host tensor (it decides which work runs)");
        c->dropped = lyco_load_f32(lyco_elem_at(mm, 0), lyco_dtype_of(mm)) == 0.0f;
    }
    if (dc.set && dc.dev.device_type == kDLCUDA && ctx->backend != LYCO_BACKEND_AUTO && ctx->backend != LYCO_BACKEND_CUDA)
        return lyco_fail(LYCO_ERR_DEVICE, "tensors are on cuda:%d but the context's backend is %s; expected host tensors for it",
                         (int)dc.dev.device_id, lyco_backend_name(ctx->backend));
    return LYCO_OK;
}
