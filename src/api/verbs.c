/*
 * verbs.c — the four public verbs and lyco_resolve_dtypes: validate, choose a backend, run it,
 * record the path. A fused backend that declines a case runs the eager twin (never silently the
 * oracle); each fallback is counted and its reason kept in the path report. On the CUDA backend
 * the eager twin runs on host copies of the device tensors (src/cuda/eager_staged.c) until a
 * GPU-resident twin exists; the path report says so.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"

/* The path report; why truncated to fit. A plain copy, not snprintf: every call records its path
   twice, and two formatted prints were ~10 % of a small call's cost (a Norm merge of C1280). */
static void set_path(lyco_ctx *ctx, lyco_path_kind k, lyco_backend b, const char *why) {
    ctx->path.kind = k;
    ctx->path.backend = b;
    size_t n = why ? strnlen(why, sizeof ctx->path.why - 1) : 0;
    memcpy(ctx->path.why, why ? why : "", n);
    ctx->path.why[n] = '\0';
}

/* auto: cuda for device tensors, cpu for host tensors (the base operand decides; validation
   has already required every tensor of the call on one device). */
static lyco_backend choose(const lyco_ctx *ctx, const lyco_call *c) {
    if (ctx->backend != LYCO_BACKEND_AUTO) return ctx->backend;
    const DLTensor *base = c->merge ? (c->merge->weight ? c->merge->weight : c->out) : c->bypass->x;
    if (!base) base = c->d_out;
    return base && base->device.device_type == kDLCUDA ? LYCO_BACKEND_CUDA : LYCO_BACKEND_CPU;
}

static lyco_status run(lyco_ctx *ctx, lyco_call *c) {
    if (!ctx) return lyco_fail(LYCO_ERR_NULL, "%s: ctx is NULL; expected a context from lyco_ctx_create", lyco_direction_name(c->dir));
    lyco_clear_error();
    set_path(ctx, LYCO_PATH_NONE, LYCO_BACKEND_AUTO, NULL);
    lyco_status st = lyco_validate(ctx, c);
    if (st) return st;
    lyco_backend b = choose(ctx, c);
    switch (b) {
    case LYCO_BACKEND_REF:
        st = lyco_ref_run(c);
        if (st == LYCO_OK) set_path(ctx, LYCO_PATH_REF, b, NULL);
        return st;
    case LYCO_BACKEND_EAGER:
        st = lyco_eager_run(c);
        if (st == LYCO_OK) set_path(ctx, LYCO_PATH_EAGER, b, NULL);
        return st;
    case LYCO_BACKEND_CPU: {
        char why[160] = "";
        st = lyco_cpu_run(c, why, sizeof why);
        if (st == LYCO_OK) { set_path(ctx, LYCO_PATH_FUSED, b, NULL); return st; }
        if (st != LYCO_ERR_UNSUPPORTED) return st;
        st = lyco_eager_run(c);
        if (st == LYCO_OK) {
            set_path(ctx, LYCO_PATH_EAGER, LYCO_BACKEND_EAGER, why);
            ctx->path.fallbacks++;
        }
        return st;
    }
    case LYCO_BACKEND_CUDA: {
#ifdef LYCO_HAVE_CUDA
        char why[160] = "";
        st = lyco_cuda_run(c, ctx->stream, why, sizeof why);
        if (st == LYCO_OK) { set_path(ctx, LYCO_PATH_FUSED, b, NULL); return st; }
        if (st != LYCO_ERR_UNSUPPORTED) return st;
        if (!why[0]) snprintf(why, sizeof why, "%s", lyco_last_error());
        lyco_clear_error();
        st = lyco_cuda_eager_staged(c, ctx->stream);
        if (st == LYCO_OK) {
            char staged[sizeof why + 40];
            snprintf(staged, sizeof staged, "eager via host copies: %s", why);
            set_path(ctx, LYCO_PATH_EAGER, LYCO_BACKEND_EAGER, staged);
            ctx->path.fallbacks++;
        }
        return st;
#else
        return lyco_fail(LYCO_ERR_UNSUPPORTED, "backend cuda is not built into this library (no nvcc at build time); expected ref, eager or cpu");
#endif
    }
    default:
        return lyco_fail(LYCO_ERR_UNSUPPORTED, "backend %s is not built into this library; expected ref, eager or cpu", lyco_backend_name(b));
    }
}

lyco_status lyco_merge_fwd(lyco_ctx *ctx, DLTensor *out, DLTensor *out_bias, const lyco_adapter *a,
                           const lyco_merge_args *in) {
    lyco_call c = {.dir = LYCO_DIR_MERGE_FWD, .a = a, .merge = in, .out = out, .out_bias = out_bias};
    return run(ctx, &c);
}

lyco_status lyco_merge_bwd(lyco_ctx *ctx, const lyco_grads *g, const lyco_adapter *a,
                           const lyco_merge_args *in, const DLTensor *d_out, const DLTensor *d_out_bias) {
    lyco_call c = {.dir = LYCO_DIR_MERGE_BWD, .a = a, .merge = in, .d_out = d_out, .d_out_bias = d_out_bias, .g = g};
    return run(ctx, &c);
}

lyco_status lyco_bypass_fwd(lyco_ctx *ctx, DLTensor *y, const lyco_adapter *a, const lyco_bypass_args *in) {
    lyco_call c = {.dir = LYCO_DIR_BYPASS_FWD, .a = a, .bypass = in, .y = y};
    return run(ctx, &c);
}

lyco_status lyco_bypass_bwd(lyco_ctx *ctx, const lyco_grads *g, DLTensor *dx, DLTensor *dy0,
                            const lyco_adapter *a, const lyco_bypass_args *in, const DLTensor *dy) {
    lyco_call c = {.dir = LYCO_DIR_BYPASS_BWD, .a = a, .bypass = in, .dy = dy, .dx = dx, .dy0 = dy0, .g = g};
    return run(ctx, &c);
}

lyco_status lyco_resolve_dtypes(const lyco_ctx *ctx, const lyco_adapter *a, const DLTensor *base,
                                const DLTensor *x, const DLTensor *y0, lyco_dtypes *out) {
    if (!ctx || !a || !out) return lyco_fail(LYCO_ERR_NULL, "resolve_dtypes: %s is NULL", !ctx ? "ctx" : !a ? "adapter" : "out");
    lyco_operand ops[LYCO_SLOT_COUNT + 3];
    int n = 0, base_index = -1;
    const DLTensor *first = y0 ? y0 : x ? x : base;
    const char *first_name = y0 ? "y0" : x ? "x" : "W";
    if (first) {
        if (lyco_dtype_of(first) == LYCO_DTYPE_INVALID) return lyco_fail(LYCO_ERR_DTYPE, "%s has an unsupported dtype; expected fp16, bf16 or fp32", first_name);
        base_index = n;
        ops[n++] = (lyco_operand){first_name, lyco_dtype_of(first)};
    }
    const DLTensor *rest[3] = {x, base, NULL};
    const char *rest_names[3] = {"x", "W", NULL};
    for (int i = 0; i < 2; i++) {
        if (!rest[i] || rest[i] == first) continue;
        if (lyco_dtype_of(rest[i]) == LYCO_DTYPE_INVALID) return lyco_fail(LYCO_ERR_DTYPE, "%s has an unsupported dtype; expected fp16, bf16 or fp32", rest_names[i]);
        ops[n++] = (lyco_operand){rest_names[i], lyco_dtype_of(rest[i])};
    }
    for (int s = 0; s < LYCO_RANK_MASK; s++) {
        const DLTensor *t = a->tensor[s];
        if (!t) continue;
        if (lyco_dtype_of(t) == LYCO_DTYPE_INVALID)
            return lyco_fail(LYCO_ERR_DTYPE, "%s has an unsupported dtype; expected fp16, bf16 or fp32", lyco_slot_name((lyco_slot)s));
        ops[n++] = (lyco_operand){lyco_slot_name((lyco_slot)s), lyco_dtype_of(t)};
    }
    return lyco_policy_resolve(ops, n, base_index, ctx->output_mode, out);
}
