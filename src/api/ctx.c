/*
 * ctx.c — the context: backend choice (LYCO_BACKEND env overrides the default "auto"), output
 * mode, fp32 precision mode, CUDA stream, and the path report of the last op. No global mutable
 * state: two threads with two contexts never interact.
 */
#include <stdlib.h>
#include <string.h>

#include "api.h"

lyco_status lyco_ctx_create(lyco_ctx **out) {
    if (!out) return lyco_fail(LYCO_ERR_NULL, "ctx_create: out is NULL; expected a lyco_ctx** to fill");
    *out = NULL;
    lyco_ctx *c = calloc(1, sizeof *c);
    if (!c) return lyco_fail(LYCO_ERR_NOMEM, "ctx_create: out of memory");
    c->backend = LYCO_BACKEND_AUTO;
    c->output_mode = LYCO_OUTPUT_PROMOTE;
    c->fp32_mode = LYCO_FP32_FULL;
    const char *env = getenv("LYCO_BACKEND");
    if (env && *env) {
        lyco_status st = lyco_ctx_set_backend_name(c, env);
        if (st != LYCO_OK) {
            free(c);
            return lyco_fail(st, "environment variable LYCO_BACKEND is \"%s\"; expected one of: auto, ref, eager, cpu, cuda", env);
        }
    }
    *out = c;
    return LYCO_OK;
}

void lyco_ctx_destroy(lyco_ctx *ctx) { free(ctx); }

const char *lyco_backend_name(lyco_backend b) {
    static const char *const n[LYCO_BACKEND_COUNT] = {"auto", "ref", "eager", "cpu", "cuda"};
    return (int)b >= 0 && b < LYCO_BACKEND_COUNT ? n[b] : "invalid";
}

lyco_status lyco_ctx_set_backend(lyco_ctx *ctx, lyco_backend b) {
    if (!ctx) return lyco_fail(LYCO_ERR_NULL, "ctx_set_backend: ctx is NULL");
    if ((int)b < 0 || b >= LYCO_BACKEND_COUNT)
        return lyco_fail(LYCO_ERR_INVALID, "backend is %d; expected one of: auto, ref, eager, cpu, cuda", (int)b);
    ctx->backend = b;
    return LYCO_OK;
}

lyco_status lyco_ctx_set_backend_name(lyco_ctx *ctx, const char *name) {
    if (!ctx) return lyco_fail(LYCO_ERR_NULL, "ctx_set_backend_name: ctx is NULL");
    for (int b = 0; b < LYCO_BACKEND_COUNT; b++)
        if (name && !strcmp(name, lyco_backend_name((lyco_backend)b))) return lyco_ctx_set_backend(ctx, (lyco_backend)b);
    return lyco_fail(LYCO_ERR_INVALID, "backend name is \"%s\"; expected one of: auto, ref, eager, cpu, cuda", name ? name : "(null)");
}

lyco_backend lyco_ctx_backend(const lyco_ctx *ctx) { return ctx ? ctx->backend : LYCO_BACKEND_AUTO; }

lyco_status lyco_ctx_set_output_mode(lyco_ctx *ctx, lyco_output_mode m) {
    if (!ctx) return lyco_fail(LYCO_ERR_NULL, "ctx_set_output_mode: ctx is NULL");
    if (m != LYCO_OUTPUT_PROMOTE && m != LYCO_OUTPUT_BASE)
        return lyco_fail(LYCO_ERR_INVALID, "output mode is %d; expected one of: promote, base", (int)m);
    ctx->output_mode = m;
    return LYCO_OK;
}

lyco_status lyco_ctx_set_output_mode_name(lyco_ctx *ctx, const char *name) {
    if (!ctx) return lyco_fail(LYCO_ERR_NULL, "ctx_set_output_mode_name: ctx is NULL");
    lyco_output_mode m;
    lyco_status st = lyco_output_mode_parse(name, &m);
    return st == LYCO_OK ? lyco_ctx_set_output_mode(ctx, m) : st;
}

lyco_status lyco_ctx_set_fp32_mode(lyco_ctx *ctx, lyco_fp32_mode m) {
    if (!ctx) return lyco_fail(LYCO_ERR_NULL, "ctx_set_fp32_mode: ctx is NULL");
    if (m != LYCO_FP32_FULL && m != LYCO_FP32_TF32)
        return lyco_fail(LYCO_ERR_INVALID, "fp32 precision mode is %d; expected one of: fp32, tf32", (int)m);
    ctx->fp32_mode = m;
    return LYCO_OK;
}

lyco_status lyco_ctx_set_fp32_mode_name(lyco_ctx *ctx, const char *name) {
    if (!ctx) return lyco_fail(LYCO_ERR_NULL, "ctx_set_fp32_mode_name: ctx is NULL");
    lyco_fp32_mode m;
    lyco_status st = lyco_fp32_mode_parse(name, &m);
    return st == LYCO_OK ? lyco_ctx_set_fp32_mode(ctx, m) : st;
}

lyco_status lyco_ctx_set_stream(lyco_ctx *ctx, void *stream) {
    if (!ctx) return lyco_fail(LYCO_ERR_NULL, "ctx_set_stream: ctx is NULL");
    ctx->stream = stream;
    return LYCO_OK;
}

lyco_status lyco_ctx_last_path(const lyco_ctx *ctx, lyco_path *out) {
    if (!ctx || !out) return lyco_fail(LYCO_ERR_NULL, "ctx_last_path: %s is NULL", ctx ? "out" : "ctx");
    *out = ctx->path;
    return LYCO_OK;
}

const char *lyco_path_name(lyco_path_kind k) {
    switch (k) {
    case LYCO_PATH_REF: return "ref";
    case LYCO_PATH_EAGER: return "eager";
    case LYCO_PATH_FUSED: return "fused";
    default: return "none";
    }
}
