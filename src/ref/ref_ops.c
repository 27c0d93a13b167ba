/*
 * ref_ops.c — fp64 building blocks of the oracle: a plain GEMM, the layer operation (linear or
 * N-d conv with stride, padding, dilation, groups) with its data and weight gradients, the
 * rows layout used by row-map algorithms, and a small linear solver (Gaussian elimination with
 * partial pivoting). Plain loops, no SIMD, no threads; built with -ffp-contract=off.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double *A, const double *B,
              double *C, bool accumulate) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double a = ta ? A[k * M + i] : A[i * K + k];
                double b = tb ? B[j * K + k] : B[k * N + j];
                s += a * b;
            }
            C[i * N + j] = accumulate ? C[i * N + j] + s : s;
        }
}

void ref_conv_geom_from_call(const lyco_call *c, ref_conv_geom *g) {
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

/* Visits every (n, o, output position, input channel, kernel offset) whose input position is
   inside x, calling one of three accumulations. mode 0: y += x·w, 1: dx += dy·w, 2: dw += x·dy. */
static void conv_visit(const ref_conv_geom *g, int mode, const double *a, const double *b, double *out) {
    int64_t Ig = g->I / g->groups, Og = g->O / g->groups;
    int64_t sin = g->in[0] * g->in[1] * g->in[2], sout = g->out[0] * g->out[1] * g->out[2];
    int64_t K = g->k[0] * g->k[1] * g->k[2];
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t o = 0; o < g->O; o++) {
            int64_t grp = o / Og;
            for (int64_t p0 = 0; p0 < g->out[0]; p0++)
                for (int64_t p1 = 0; p1 < g->out[1]; p1++)
                    for (int64_t p2 = 0; p2 < g->out[2]; p2++) {
                        int64_t yi = (n * g->O + o) * sout + (p0 * g->out[1] + p1) * g->out[2] + p2;
                        double acc = 0.0;
                        for (int64_t ci = 0; ci < Ig; ci++) {
                            int64_t cin = grp * Ig + ci;
                            for (int64_t k0 = 0; k0 < g->k[0]; k0++) {
                                int64_t q0 = p0 * g->stride[0] - g->pad[0] + k0 * g->dil[0];
                                if (q0 < 0 || q0 >= g->in[0]) continue;
                                for (int64_t k1 = 0; k1 < g->k[1]; k1++) {
                                    int64_t q1 = p1 * g->stride[1] - g->pad[1] + k1 * g->dil[1];
                                    if (q1 < 0 || q1 >= g->in[1]) continue;
                                    for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
                                        int64_t q2 = p2 * g->stride[2] - g->pad[2] + k2 * g->dil[2];
                                        if (q2 < 0 || q2 >= g->in[2]) continue;
                                        int64_t xi = (n * g->I + cin) * sin + (q0 * g->in[1] + q1) * g->in[2] + q2;
                                        int64_t wi = (o * Ig + ci) * K + (k0 * g->k[1] + k1) * g->k[2] + k2;
                                        if (mode == 0) acc += a[xi] * b[wi];
                                        else if (mode == 1) out[xi] += a[yi] * b[wi];
                                        else out[wi] += a[xi] * b[yi];
                                    }
                                }
                            }
                        }
                        if (mode == 0) out[yi] = acc;
                    }
        }
}

/* A linear layer (no spatial dims, no groups) is a plain GEMM: the same sums, far fewer steps. */
static bool is_dense(const ref_conv_geom *g) {
    return g->groups == 1 && g->in[0] * g->in[1] * g->in[2] == 1 && g->out[0] * g->out[1] * g->out[2] == 1 &&
           g->k[0] * g->k[1] * g->k[2] == 1 && !g->pad[0] && !g->pad[1] && !g->pad[2];
}

void ref_conv_fwd(const ref_conv_geom *g, const double *x, const double *w, double *y) {
    if (is_dense(g)) ref_gemm(false, true, g->N, g->O, g->I, x, w, y, false);
    else conv_visit(g, 0, x, w, y);
}

void ref_conv_dgrad(const ref_conv_geom *g, const double *dy, const double *w, double *dx) {
    if (is_dense(g)) { ref_gemm(false, false, g->N, g->I, g->O, dy, w, dx, false); return; }
    int64_t sin = g->in[0] * g->in[1] * g->in[2];
    memset(dx, 0, sizeof(double) * (size_t)(g->N * g->I * sin));
    conv_visit(g, 1, dy, w, dx);
}

void ref_conv_wgrad(const ref_conv_geom *g, const double *x, const double *dy, double *dw) {
    if (is_dense(g)) { ref_gemm(true, false, g->O, g->I, g->N, dy, x, dw, false); return; }
    int64_t K = g->k[0] * g->k[1] * g->k[2];
    memset(dw, 0, sizeof(double) * (size_t)(g->O * (g->I / g->groups) * K));
    conv_visit(g, 2, x, dy, dw);
}

/* y layout: linear (tokens, O); conv/groupnorm (N, O, sp). rows layout: O × (N·sp). */
void ref_to_rows(const lyco_call *c, const double *y, double *rows) {
    int64_t O = c->dims.O, N = c->tokens, sp = c->sp_out_n, n = N * sp;
    for (int64_t t = 0; t < N; t++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t p = 0; p < sp; p++) rows[o * n + t * sp + p] = y[(t * O + o) * sp + p];
}

void ref_from_rows(const lyco_call *c, const double *rows, double *y) {
    int64_t O = c->dims.O, N = c->tokens, sp = c->sp_out_n, n = N * sp;
    for (int64_t t = 0; t < N; t++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t p = 0; p < sp; p++) y[(t * O + o) * sp + p] = rows[o * n + t * sp + p];
}

void ref_solve(int64_t n, double *A, double *B, int64_t nrhs) {
    for (int64_t col = 0; col < n; col++) {
        int64_t piv = col;
        for (int64_t r = col + 1; r < n; r++)
            if (fabs(A[r * n + col]) > fabs(A[piv * n + col])) piv = r;
        if (piv != col) {
            for (int64_t k = 0; k < n; k++) { double t = A[col * n + k]; A[col * n + k] = A[piv * n + k]; A[piv * n + k] = t; }
            for (int64_t k = 0; k < nrhs; k++) { double t = B[col * nrhs + k]; B[col * nrhs + k] = B[piv * nrhs + k]; B[piv * nrhs + k] = t; }
        }
        double d = A[col * n + col];
        for (int64_t r = col + 1; r < n; r++) {
            double f = A[r * n + col] / d;
            if (f == 0.0) continue;
            for (int64_t k = col; k < n; k++) A[r * n + k] -= f * A[col * n + k];
            for (int64_t k = 0; k < nrhs; k++) B[r * nrhs + k] -= f * B[col * nrhs + k];
        }
    }
    for (int64_t col = n - 1; col >= 0; col--) {
        double d = A[col * n + col];
        for (int64_t k = 0; k < nrhs; k++) {
            double s = B[col * nrhs + k];
            for (int64_t j = col + 1; j < n; j++) s -= A[col * n + j] * B[j * nrhs + k];
            B[col * nrhs + k] = s / d;
        }
    }
}
