/*
 * eager_ops.c — the eager twin's ops: each result rounded to the compute dtype T, products
 * accumulated in fp32 (sequentially), like PyTorch's eager kernels with fp32 accumulation.
 */
#include <string.h>

#include "eager.h"

float eg_rnd(float v, lyco_dtype T) { return lyco_round_f32(v, T); }

void eg_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B, float *C, lyco_dtype T) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++) {
                float a = ta ? A[k * M + i] : A[i * K + k];
                float b = tb ? B[j * K + k] : B[k * N + j];
                s += a * b;
            }
            C[i * N + j] = eg_rnd(s, T);
        }
}

void eg_scale(float *x, int64_t n, double c, lyco_dtype T) {
    float cf = (float)c;
    for (int64_t i = 0; i < n; i++) x[i] = eg_rnd(x[i] * cf, T);
}

void eg_mul(const float *a, const float *b, float *out, int64_t n, lyco_dtype T) {
    for (int64_t i = 0; i < n; i++) out[i] = eg_rnd(a[i] * b[i], T);
}
void eg_add(const float *a, const float *b, float *out, int64_t n, lyco_dtype T) {
    for (int64_t i = 0; i < n; i++) out[i] = eg_rnd(a[i] + b[i], T);
}
void eg_sub(const float *a, const float *b, float *out, int64_t n, lyco_dtype T) {
    for (int64_t i = 0; i < n; i++) out[i] = eg_rnd(a[i] - b[i], T);
}

float eg_dot(const float *a, const float *b, int64_t n, lyco_dtype T) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return eg_rnd(s, T);
}

void eg_geom_from_call(const lyco_call *c, eg_geom *g) {
    const lyco_layer *l = &c->a->layer;
    memset(g, 0, sizeof *g);
    g->N = c->tokens;
    g->I = l->in_features;
    g->O = l->out_features;
    g->groups = l->kind == LYCO_LAYER_CONV ? l->groups : 1;
    for (int i = 0; i < 3; i++) {
        bool used = l->kind == LYCO_LAYER_CONV && i < l->conv_dims;
        g->in[i] = used ? c->sp_in[i] : 1;
        g->out[i] = used ? c->sp_out[i] : 1;
        g->k[i] = used ? l->kernel[i] : 1;
        g->stride[i] = used ? l->stride[i] : 1;
        g->pad[i] = used ? l->padding[i] : 0;
        g->dil[i] = used ? l->dilation[i] : 1;
    }
}

/* mode 0: y = x·w; 1: dx += dy·w; 2: dw += x·dy (fp32 accumulators; rounded by the callers) */
static void visit(const eg_geom *g, int mode, const float *a, const float *b, float *out) {
    int64_t Ig = g->I / g->groups, Og = g->O / g->groups;
    int64_t sin = g->in[0] * g->in[1] * g->in[2], sout = g->out[0] * g->out[1] * g->out[2];
    int64_t K = g->k[0] * g->k[1] * g->k[2];
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t o = 0; o < g->O; o++) {
            int64_t grp = o / Og;
            for (int64_t p = 0; p < sout; p++) {
                int64_t p0 = p / (g->out[1] * g->out[2]), p1 = (p / g->out[2]) % g->out[1], p2 = p % g->out[2];
                int64_t yi = (n * g->O + o) * sout + p;
                float acc = 0.0f;
                for (int64_t ci = 0; ci < Ig; ci++) {
                    int64_t cin = grp * Ig + ci;
                    for (int64_t kk = 0; kk < K; kk++) {
                        int64_t k0 = kk / (g->k[1] * g->k[2]), k1 = (kk / g->k[2]) % g->k[1], k2 = kk % g->k[2];
                        int64_t q0 = p0 * g->stride[0] - g->pad[0] + k0 * g->dil[0];
                        int64_t q1 = p1 * g->stride[1] - g->pad[1] + k1 * g->dil[1];
                        int64_t q2 = p2 * g->stride[2] - g->pad[2] + k2 * g->dil[2];
                        if (q0 < 0 || q0 >= g->in[0] || q1 < 0 || q1 >= g->in[1] || q2 < 0 || q2 >= g->in[2]) continue;
                        int64_t xi = (n * g->I + cin) * sin + (q0 * g->in[1] + q1) * g->in[2] + q2;
                        int64_t wi = (o * Ig + ci) * K + kk;
                        if (mode == 0) acc += a[xi] * b[wi];
                        else if (mode == 1) out[xi] += a[yi] * b[wi];
                        else out[wi] += a[xi] * b[yi];
                    }
                }
                if (mode == 0) out[yi] = acc;
            }
        }
}

static void round_all(float *v, int64_t n, lyco_dtype T) {
    for (int64_t i = 0; i < n; i++) v[i] = eg_rnd(v[i], T);
}

/* A linear layer (no spatial dims, no groups) is a plain GEMM with the same fp32 sums. */
static bool is_dense(const eg_geom *g) {
    return g->groups == 1 && g->in[0] * g->in[1] * g->in[2] == 1 && g->out[0] * g->out[1] * g->out[2] == 1 &&
           g->k[0] * g->k[1] * g->k[2] == 1 && !g->pad[0] && !g->pad[1] && !g->pad[2];
}

void eg_conv_fwd(const eg_geom *g, const float *x, const float *w, float *y, lyco_dtype T) {
    if (is_dense(g)) { eg_gemm(false, true, g->N, g->O, g->I, x, w, y, T); return; }
    visit(g, 0, x, w, y);
    round_all(y, g->N * g->O * g->out[0] * g->out[1] * g->out[2], T);
}
void eg_conv_dgrad(const eg_geom *g, const float *dy, const float *w, float *dx, lyco_dtype T) {
    if (is_dense(g)) { eg_gemm(false, false, g->N, g->I, g->O, dy, w, dx, T); return; }
    int64_t n = g->N * g->I * g->in[0] * g->in[1] * g->in[2];
    memset(dx, 0, sizeof(float) * (size_t)n);
    visit(g, 1, dy, w, dx);
    round_all(dx, n, T);
}
void eg_conv_wgrad(const eg_geom *g, const float *x, const float *dy, float *dw, lyco_dtype T) {
    if (is_dense(g)) { eg_gemm(true, false, g->O, g->I, g->N, dy, x, dw, T); return; }
    int64_t n = g->O * (g->I / g->groups) * g->k[0] * g->k[1] * g->k[2];
    memset(dw, 0, sizeof(float) * (size_t)n);
    visit(g, 2, x, dy, dw);
    round_all(dw, n, T);
}

void eg_op_fwd(const lyco_call *c, const float *x, const float *w, float *y, lyco_dtype T) {
    eg_geom g;
    eg_geom_from_call(c, &g);
    eg_conv_fwd(&g, x, w, y, T);
}
void eg_op_dgrad(const lyco_call *c, const float *dy, const float *w, float *dx, lyco_dtype T) {
    eg_geom g;
    eg_geom_from_call(c, &g);
    eg_conv_dgrad(&g, dy, w, dx, T);
}
void eg_op_wgrad(const lyco_call *c, const float *x, const float *dy, float *dw, lyco_dtype T) {
    eg_geom g;
    eg_geom_from_call(c, &g);
    eg_conv_wgrad(&g, x, dy, dw, T);
}

void eg_to_rows(const lyco_call *c, const float *y, float *rows) {
    int64_t O = c->dims.O, N = c->tokens, sp = c->sp_out_n, n = N * sp;
    for (int64_t t = 0; t < N; t++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t p = 0; p < sp; p++) rows[o * n + t * sp + p] = y[(t * O + o) * sp + p];
}
void eg_from_rows(const lyco_call *c, const float *rows, float *y) {
    int64_t O = c->dims.O, N = c->tokens, sp = c->sp_out_n, n = N * sp;
    for (int64_t t = 0; t < N; t++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t p = 0; p < sp; p++) y[(t * O + o) * sp + p] = rows[o * n + t * sp + p];
}
