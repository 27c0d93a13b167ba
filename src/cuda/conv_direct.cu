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
 * sequential order in fp32, blocked by 32 terms (deterministic, no atomics, no shared memory), every operand rounded
 * to the compute dtype as loaded, grid-stride loops. No extra memory beyond the optional gp.
 * Linear layers take a shared-memory tiled kernel instead (below, k_lin). Neither is a
 * tensor-core GEMM: IA3 input-mode / Full bypass run at CUDA-core FMA rate.
 */
#include "cuda/common.cuh"
#include "cuda/kern_simple.h"

#define CV_MAX_BLOCKS 65536

static unsigned cv_blocks(i64 work) {
    i64 b = cdiv(work, NT);
    if (b < 1) b = 1;
    return (unsigned)(b > CV_MAX_BLOCKS ? CV_MAX_BLOCKS : b);
}

/* Blocked fp32 sum: terms go into `inner`, flushed into `outer` every BSUM_B terms, so the
   rounding error grows like (B + n/B)·u instead of n·u (NUMERICS.md §2.4, blocked summation). */
#define BSUM_B 32
struct bsum {
    float outer, inner;
    int n;
};
__device__ __forceinline__ void bs_init(bsum &s) {
    s.outer = 0.0f;
    s.inner = 0.0f;
    s.n = 0;
}
__device__ __forceinline__ void bs_add(bsum &s, float v) {
    s.inner += v;
    if (++s.n == BSUM_B) {
        s.outer += s.inner;
        s.inner = 0.0f;
        s.n = 0;
    }
}
__device__ __forceinline__ float bs_total(const bsum &s) { return s.outer + s.inner; }

/* the dtype E is rounded to as loaded: ct, or fp32 (as stored) for an fp32 intermediate of ours */
__device__ __forceinline__ int e_ct(const lk_conv_args &a) { return a.E_exact ? 2 : a.ct; }

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
    const int ect = e_ct(a);
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n_all; idx += (i64)gridDim.x * NT) {
        const i64 p = idx % g.spout, t = idx / g.spout, o = t % g.O, n = t / g.O, grp = o / Og;
        const i64 p0 = p / (g.out[1] * g.out[2]), p1 = (p / g.out[2]) % g.out[1], p2 = p % g.out[2];
        bsum acc;
        bs_init(acc);
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
                        const float ev = round_to(vload(a.E, o, ci * g.K + (k0 * g.k[1] + k1) * g.k[2] + k2), ect);
                        bs_add(acc, xv * (ev * f));
                    }
                }
            }
        }
        float y = m * bs_total(acc);
        if (a.bias.p) y += m * round_to(vload(a.bias, 0, o), a.ct);
        if (a.y0.p) y = round_to(act_ld(a.y0, g.nd, n, g.O, o, p), a.ct) + y;
        act_st(a.y, g.nd, n, g.O, o, p, y);
    }
}

__global__ __launch_bounds__(NT) void k_conv_dgrad(lk_conv_args a) {
    const lk_conv_geom &g = a.g;
    const i64 n_all = g.N * g.I * g.spin, Og = g.O / g.groups, Ig = g.I / g.groups;
    const float m = (float)a.m;
    const int ect = e_ct(a);
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n_all; idx += (i64)gridDim.x * NT) {
        const i64 q = idx % g.spin, t = idx / g.spin, c = t % g.I, n = t / g.I, grp = c / Ig, ci = c % Ig;
        const i64 q0 = q / (g.in[1] * g.in[2]), q1 = (q / g.in[2]) % g.in[1], q2 = q % g.in[2];
        bsum acc;
        bs_init(acc);
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
                        const float ev = round_to(vload(a.E, o, ci * g.K + (k0 * g.k[1] + k1) * g.k[2] + k2), ect);
                        bs_add(acc, dv * ev);
                    }
                }
            }
        }
        const float tot = bs_total(acc);
        if (a.gp) a.gp[idx] = tot;
        if (a.dx.p) {
            const float f = a.vec.p ? round_to(vload(a.vec, 0, c), a.ct) : 1.0f;
            act_st(a.dx, g.nd, n, g.I, c, q, m * f * tot);
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
        bsum acc;
        bs_init(acc);
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
                        bs_add(acc, dv * xv);
                    }
                }
            }
        vstore(a.gE, o, ci * g.K + kk, m * bs_total(acc));
    }
}

/* ---- linear layers (nd = 0, groups = 1): a shared-memory tiled product ------------------------
 * C[m, n] = Σ_k A(m, k)·B(n, k) over 64×64 output tiles per block, k in steps of 16 staged in
 * shared memory (8 KB, fp32, operands rounded to ct as staged); each thread owns a 4×4 block of C.
 * Each k step's 16 products are summed apart and then added to the running sum (blocked
 * summation, fixed order: deterministic). Staging reads along k when k is the contiguous axis
 * of the view, else along m/n, so global loads are coalesced for both orientations.
 *   fwd    m = token, n = output,  k = input:   A = x(t, i),   B = E(o, i)·vec[i]
 *   dgrad  m = token, n = input,   k = output:  A = dy(t, o),  B = E(o, i)
 *   wgrad  m = output, n = input,  k = token:   A = dy(t, o),  B = x(t, i)
 */
#define LT 64
#define LK 16
enum { LIN_FWD = 0, LIN_DGRAD = 1, LIN_WGRAD = 2 };

/* element (m, k) of an operand stored as v(m, k) (tr = 0) or v(k, m) (tr = 1); 0 outside */
__device__ __forceinline__ float lin_ld(const lk_view &v, bool tr, i64 m, i64 k, i64 M, i64 K) {
    if (m >= M || k >= K) return 0.0f;
    return tr ? vload(v, k, m) : vload(v, m, k);
}

/* Stage the LK × LT tile (k0.., m0..) of an operand into S[k][m], rounded to vct (times vec[k]
   rounded to ct). */
__device__ __forceinline__ void lin_stage(float (*S)[LT], const lk_view &v, bool tr, i64 m0, i64 k0, i64 M, i64 K,
                                          const lk_view &vec, int vct, int ct) {
    const bool kfast = tr ? v.s0 == 1 : v.s1 == 1;
    for (int e = threadIdx.x; e < LK * LT; e += NT) {
        const int kk = kfast ? e % LK : e / LT, mm = kfast ? e / LK : e % LT;
        float x = round_to(lin_ld(v, tr, m0 + mm, k0 + kk, M, K), vct);
        if (vec.p && k0 + kk < K) x *= round_to(vload(vec, 0, k0 + kk), ct);
        S[kk][mm] = x;
    }
}

template <int MODE> __global__ __launch_bounds__(NT) void k_lin(lk_conv_args a, i64 M, i64 N, i64 K) {
    __shared__ float As[LK][LT], Bs[LK][LT];
    const i64 m0 = (i64)blockIdx.y * LT, n0 = (i64)blockIdx.x * LT;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const lk_view none = {};
    const lk_view &Av = MODE == LIN_FWD ? a.x : a.dy;
    const lk_view &Bv = MODE == LIN_WGRAD ? a.x : a.E;
    const bool Atr = MODE == LIN_WGRAD, Btr = MODE == LIN_DGRAD || MODE == LIN_WGRAD;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (i64 k0 = 0; k0 < K; k0 += LK) {
        lin_stage(As, Av, Atr, m0, k0, M, K, none, a.ct, a.ct);
        lin_stage(Bs, Bv, Btr, n0, k0, N, K, MODE == LIN_FWD ? a.vec : none, MODE == LIN_WGRAD ? a.ct : e_ct(a), a.ct);
        __syncthreads();
        float part[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) part[i][j] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < LK; kk++) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                av[i] = As[kk][ty * 4 + i];
                bv[i] = Bs[kk][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) part[i][j] += av[i] * bv[j];
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] += part[i][j];
        __syncthreads();
    }
    const float m = (float)a.m;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const i64 r = m0 + ty * 4 + i, c = n0 + tx * 4 + j;
            if (r >= M || c >= N) continue;
            const float v = acc[i][j];
            if (MODE == LIN_FWD) {
                float y = m * v;
                if (a.bias.p) y += m * round_to(vload(a.bias, 0, c), a.ct);
                if (a.y0.p) y = round_to(vload(a.y0, r, c), a.ct) + y;
                vstore(a.y, r, c, y);
            } else if (MODE == LIN_DGRAD) {
                if (a.gp) a.gp[r * N + c] = v;
                if (a.dx.p) vstore(a.dx, r, c, m * (a.vec.p ? round_to(vload(a.vec, 0, c), a.ct) : 1.0f) * v);
            } else {
                vstore(a.gE, r, c, m * v);
            }
        }
}

/* The tiled path takes linear layers whose tile grid fits gridDim.y. */
static bool lin_ok(const lk_conv_geom &g, i64 M) { return g.nd == 0 && g.groups == 1 && cdiv(M, LT) <= 65535; }

template <int MODE> static int lin_launch(const lk_conv_args *a, i64 M, i64 N, i64 K, void *stream, const char *what) {
    dim3 grid((unsigned)cdiv(N, LT), (unsigned)cdiv(M, LT));
    k_lin<MODE><<<grid, NT, 0, (cudaStream_t)stream>>>(*a, M, N, K);
    LK_LAUNCHED(what);
    return LYCO_OK;
}

extern "C" int lk_conv_fwd(const lk_conv_args *a, void *stream) {
    i64 n = a->g.N * a->g.O * a->g.spout;
    if (!a->y.p || n == 0) return LYCO_OK;
    if (lin_ok(a->g, a->g.N) && cdiv(a->g.O, LT) <= 0x7fffffff) return lin_launch<LIN_FWD>(a, a->g.N, a->g.O, a->g.I, stream, "linear fwd");
    k_conv_fwd<<<cv_blocks(n), NT, 0, (cudaStream_t)stream>>>(*a);
    LK_LAUNCHED("conv_fwd");
    return LYCO_OK;
}

extern "C" int lk_conv_dgrad(const lk_conv_args *a, void *stream) {
    i64 n = a->g.N * a->g.I * a->g.spin;
    if ((!a->dx.p && !a->gp) || n == 0) return LYCO_OK;
    if (lin_ok(a->g, a->g.N)) return lin_launch<LIN_DGRAD>(a, a->g.N, a->g.I, a->g.O, stream, "linear dgrad");
    k_conv_dgrad<<<cv_blocks(n), NT, 0, (cudaStream_t)stream>>>(*a);
    LK_LAUNCHED("conv_dgrad");
    return LYCO_OK;
}

extern "C" int lk_conv_wgrad(const lk_conv_args *a, void *stream) {
    i64 n = a->g.O * (a->g.I / a->g.groups) * a->g.K;
    if (!a->gE.p || n == 0) return LYCO_OK;
    if (lin_ok(a->g, a->g.O)) return lin_launch<LIN_WGRAD>(a, a->g.O, a->g.I, a->g.N, stream, "linear wgrad");
    k_conv_wgrad<<<cv_blocks(n), NT, 0, (cudaStream_t)stream>>>(*a);
    LK_LAUNCHED("conv_wgrad");
    return LYCO_OK;
}
