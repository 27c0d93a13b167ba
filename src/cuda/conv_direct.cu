/*
 * conv_direct.cu — the plain products that IA3 input mode and Full need in bypass
 * (kern_simple.h, lk_conv_args), through the base layer's own op (ALGORITHMS.md §0 op(x, E)):
 * linear (nd = 0: x tokens × I, y tokens × O, E O × I) or conv 1/2/3-d with stride, padding,
 * dilation and groups (x (N·I) × sp_in, y (N·O) × sp_out, E O × (I/g)·K, zero padding):
 *
 *   fwd    y[n,o,p]  = y0 + m·Σ_{c in o's group, κ} x[n,c,q(p,κ)]·E[o,c',κ]·vec[c] + m·bias[o]
 *   dgrad  G'[n,c,q] = Σ_{o in c's group, κ, p: q(p,κ) = q} dy[n,o,p]·E[o,c',κ]
 *          dx = m·vec[c]·G'  (rounded once to dx's dtype);  gp = G' (fp32 scratch, x-shaped)
 *   wgrad  gE[o,c',κ] = m·Σ_{n,p} dy[n,o,p]·x[n,c,q(p,κ)]
 * with q(p,κ) = p·stride − pad + κ·dil per spatial dim (skipped outside x).
 *
 * Direct kernels, correctness first: one thread per output element, the reduction in a fixed
 * sequential order in fp32 (deterministic, no atomics, no shared memory), every operand rounded
 * to the compute dtype as loaded, grid-stride loops. No extra memory beyond the optional gp.
 * These are not tensor-core GEMMs: IA3 input-mode / Full bypass run at CUDA-core FMA rate.
 */
#include "cuda/common.cuh"
#include "cuda/kern_simple.h"

#define CV_MAX_BLOCKS 65536

static unsigned cv_blocks(i64 work) {
    i64 b = cdiv(work, NT);
    if (b < 1) b = 1;
    return (unsigned)(b > CV_MAX_BLOCKS ? CV_MAX_BLOCKS : b);
}

/* activation element (n, channel c of C, spatial p) of a linear or conv view */
__device__ __forceinline__ float act_ld(const lk_view &v, int nd, i64 n, i64 C, i64 c, i64 p) {
    return nd ? vload(v, n * C + c, p) : vload(v, n, c);
}
__device__ __forceinline__ void act_st(const lk_view &v, int nd, i64 n, i64 C, i64 c, i64 p, float x) {
    if (nd) vstore(v, n * C + c, p, x);
    else vstore(v, n, c, x);
}

__global__ __launch_bounds__(NT) void k_conv_fwd(lk_conv_args a) {
    const lk_conv_geom &g = a.g;
    const i64 n_all = g.N * g.O * g.spout, Og = g.O / g.groups, Ig = g.I / g.groups;
    const float m = (float)a.m;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n_all; idx += (i64)gridDim.x * NT) {
        const i64 p = idx % g.spout, t = idx / g.spout, o = t % g.O, n = t / g.O, grp = o / Og;
        const i64 p0 = p / (g.out[1] * g.out[2]), p1 = (p / g.out[2]) % g.out[1], p2 = p % g.out[2];
        float acc = 0.0f;
        for (i64 ci = 0; ci < Ig; ci++) {
            const i64 c = grp * Ig + ci;
            const float f = a.vec.p ? round_to(vload(a.vec, 0, c), a.ct) : 1.0f;
            for (i64 k0 = 0; k0 < g.k[0]; k0++) {
                const i64 q0 = p0 * g.st[0] - g.pad[0] + k0 * g.dil[0];
                if (q0 < 0 || q0 >= g.in[0]) continue;
                for (i64 k1 = 0; k1 < g.k[1]; k1++) {
                    const i64 q1 = p1 * g.st[1] - g.pad[1] + k1 * g.dil[1];
                    if (q1 < 0 || q1 >= g.in[1]) continue;
                    for (i64 k2 = 0; k2 < g.k[2]; k2++) {
                        const i64 q2 = p2 * g.st[2] - g.pad[2] + k2 * g.dil[2];
                        if (q2 < 0 || q2 >= g.in[2]) continue;
                        const float xv = round_to(act_ld(a.x, g.nd, n, g.I, c, (q0 * g.in[1] + q1) * g.in[2] + q2), a.ct);
                        const float ev = round_to(vload(a.E, o, ci * g.K + (k0 * g.k[1] + k1) * g.k[2] + k2), a.ct);
                        acc += xv * (ev * f);
                    }
                }
            }
        }
        float y = m * acc;
        if (a.bias.p) y += m * round_to(vload(a.bias, 0, o), a.ct);
        if (a.y0.p) y = round_to(act_ld(a.y0, g.nd, n, g.O, o, p), a.ct) + y;
        act_st(a.y, g.nd, n, g.O, o, p, y);
    }
}

__global__ __launch_bounds__(NT) void k_conv_dgrad(lk_conv_args a) {
    const lk_conv_geom &g = a.g;
    const i64 n_all = g.N * g.I * g.spin, Og = g.O / g.groups, Ig = g.I / g.groups;
    const float m = (float)a.m;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n_all; idx += (i64)gridDim.x * NT) {
        const i64 q = idx % g.spin, t = idx / g.spin, c = t % g.I, n = t / g.I, grp = c / Ig, ci = c % Ig;
        const i64 q0 = q / (g.in[1] * g.in[2]), q1 = (q / g.in[2]) % g.in[1], q2 = q % g.in[2];
        float acc = 0.0f;
        for (i64 ol = 0; ol < Og; ol++) {
            const i64 o = grp * Og + ol;
            for (i64 k0 = 0; k0 < g.k[0]; k0++) {
                const i64 t0 = q0 + g.pad[0] - k0 * g.dil[0];
                if (t0 < 0 || t0 % g.st[0]) continue;
                const i64 p0 = t0 / g.st[0];
                if (p0 >= g.out[0]) continue;
                for (i64 k1 = 0; k1 < g.k[1]; k1++) {
                    const i64 t1 = q1 + g.pad[1] - k1 * g.dil[1];
                    if (t1 < 0 || t1 % g.st[1]) continue;
                    const i64 p1 = t1 / g.st[1];
                    if (p1 >= g.out[1]) continue;
                    for (i64 k2 = 0; k2 < g.k[2]; k2++) {
                        const i64 t2 = q2 + g.pad[2] - k2 * g.dil[2];
                        if (t2 < 0 || t2 % g.st[2]) continue;
                        const i64 p2 = t2 / g.st[2];
                        if (p2 >= g.out[2]) continue;
                        const float dv = round_to(act_ld(a.dy, g.nd, n, g.O, o, (p0 * g.out[1] + p1) * g.out[2] + p2), a.ct);
                        const float ev = round_to(vload(a.E, o, ci * g.K + (k0 * g.k[1] + k1) * g.k[2] + k2), a.ct);
                        acc += dv * ev;
                    }
                }
            }
        }
        if (a.gp) a.gp[idx] = acc;
        if (a.dx.p) {
            const float f = a.vec.p ? round_to(vload(a.vec, 0, c), a.ct) : 1.0f;
            act_st(a.dx, g.nd, n, g.I, c, q, m * f * acc);
        }
    }
}

__global__ __launch_bounds__(NT) void k_conv_wgrad(lk_conv_args a) {
    const lk_conv_geom &g = a.g;
    const i64 Og = g.O / g.groups, Ig = g.I / g.groups, n_all = g.O * Ig * g.K;
    const float m = (float)a.m;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n_all; idx += (i64)gridDim.x * NT) {
        const i64 kk = idx % g.K, ci = (idx / g.K) % Ig, o = idx / (g.K * Ig), c = (o / Og) * Ig + ci;
        const i64 k0 = kk / (g.k[1] * g.k[2]), k1 = (kk / g.k[2]) % g.k[1], k2 = kk % g.k[2];
        float acc = 0.0f;
        for (i64 n = 0; n < g.N; n++)
            for (i64 p0 = 0; p0 < g.out[0]; p0++) {
                const i64 q0 = p0 * g.st[0] - g.pad[0] + k0 * g.dil[0];
                if (q0 < 0 || q0 >= g.in[0]) continue;
                for (i64 p1 = 0; p1 < g.out[1]; p1++) {
                    const i64 q1 = p1 * g.st[1] - g.pad[1] + k1 * g.dil[1];
                    if (q1 < 0 || q1 >= g.in[1]) continue;
                    for (i64 p2 = 0; p2 < g.out[2]; p2++) {
                        const i64 q2 = p2 * g.st[2] - g.pad[2] + k2 * g.dil[2];
                        if (q2 < 0 || q2 >= g.in[2]) continue;
                        const float dv = round_to(act_ld(a.dy, g.nd, n, g.O, o, (p0 * g.out[1] + p1) * g.out[2] + p2), a.ct);
                        const float xv = round_to(act_ld(a.x, g.nd, n, g.I, c, (q0 * g.in[1] + q1) * g.in[2] + q2), a.ct);
                        acc += dv * xv;
                    }
                }
            }
        vstore(a.gE, o, ci * g.K + kk, m * acc);
    }
}

extern "C" int lk_conv_fwd(const lk_conv_args *a, void *stream) {
    i64 n = a->g.N * a->g.O * a->g.spout;
    if (!a->y.p || n == 0) return LYCO_OK;
    k_conv_fwd<<<cv_blocks(n), NT, 0, (cudaStream_t)stream>>>(*a);
    LK_LAUNCHED("conv_fwd");
    return LYCO_OK;
}

extern "C" int lk_conv_dgrad(const lk_conv_args *a, void *stream) {
    i64 n = a->g.N * a->g.I * a->g.spin;
    if ((!a->dx.p && !a->gp) || n == 0) return LYCO_OK;
    k_conv_dgrad<<<cv_blocks(n), NT, 0, (cudaStream_t)stream>>>(*a);
    LK_LAUNCHED("conv_dgrad");
    return LYCO_OK;
}

extern "C" int lk_conv_wgrad(const lk_conv_args *a, void *stream) {
    i64 n = a->g.O * (a->g.I / a->g.groups) * a->g.K;
    if (!a->gE.p || n == 0) return LYCO_OK;
    k_conv_wgrad<<<cv_blocks(n), NT, 0, (cudaStream_t)stream>>>(*a);
    LK_LAUNCHED("conv_wgrad");
    return LYCO_OK;
}
