/*
 * dora_bypass.cu — LoRA/LoCon with DoRA (ALGORITHMS.md §1.6, §2.1) in bypass on linear layers:
 * ΔW and W'' are never built. The math is src/cpu/locon_dora.c's (its header has the derivation),
 * here with σs folded into Ūs = σs·Ū so that σs stays on the device:
 *
 *   x N×I, W O×I, D r×I, Ū O×r (U rounded to CT, × s × the rank mask q_i), Ūs = σs·Ū.
 *   out axis: VD = W·Dᵀ + Ūs·(D·Dᵀ) (O×r);  ‖V_o‖² = ‖W_o‖² + Σ_p Ūs[o,p]·((W·Dᵀ)[o,p] + VD[o,p])
 *   in axis : VI = Ūsᵀ·W + (ŪsᵀŪs)·D (r×I); ‖V_i‖² = ‖W_:i‖² + Σ_p D[p,i]·((Ūsᵀ·W)[p,i] + VI[p,i])
 *   n = ‖V‖ + ε, a = m·(d − n)/n, c = 1 + a (per kept index)
 *   forward  out: y = y0 + a⊙(x·Wᵀ + p) + p,  p = (x·Dᵀ)·Ūsᵀ          (= y0 + a⊙(x·Wᵀ) + c⊙p)
 *            in : y = y0 + (x⊙a)·Wᵀ + p,      p = (x·(D⊙c)ᵀ)·Ūsᵀ
 *   backward (g = dy; dc = ∂L/∂c; γ = −m·d·dc/(n²·‖V‖), 0 where ‖V‖ = 0; ∂L/∂d = m·dc/n):
 *            out: dc = colsum(g ⊙ (x·Wᵀ + p));  e = (g⊙c)·Ūs;  dx = (g⊙a)·W + e·D;
 *                 Ts = (g⊙c)ᵀ·(x·Dᵀ) + γ⊙VD;   G_D = eᵀ·x + (γ⊙Ūs)ᵀ·W + ((γ⊙Ūs)ᵀŪs)·D
 *            in : e = g·Ūs, R = e·D, QR = g·W + R;  dc = colsum(x ⊙ QR);  dx = a⊙QR + R;
 *                 Ts = gᵀ·(x·(D⊙c)ᵀ) + W·(D⊙γ)ᵀ + Ūs·(D·(D⊙γ)ᵀ);  G_D = c⊙(eᵀ·x) + γ⊙VI
 *            G_U = σs·Ts·s·q (Ts = ∂L/∂Ūs), G_σs = ⟨Ts, Ū⟩, dy0 by the dispatcher.
 *
 * Products: with bf16 compute every product with a dimension beyond r runs on the tensor cores
 * through gemm.cu's lk_gemm (x·Wᵀ, g·W, (g⊙a)·W, e·D and the thin ones: W·Dᵀ, x·Dᵀ, e, gᵀ·h, eᵀ·x). Caller tensors enter rounded to CT (NUMERICS.md §1.2);
 * no intermediate is rounded: an fp32 scratch operand (e, g⊙a, x⊙a) enters as three bf16 pieces
 * S = P1 + P2 + P3 (k_dg_split3, 24 significand bits: fp32's) and the products are chained in fp32
 * (lk_gemm's base_f32), smallest piece first — two pieces (16 bits) when the product only feeds a
 * 16-bit output (dx or y in bf16). fp16 compute: only products of two
 * caller tensors (x·Wᵀ, g·W, x·Dᵀ, W·Dᵀ) go to the tensor cores — fp16's exponent range would lose
 * the small pieces. Products of two scratch operands (K = r), the r×r ones, fp32 compute and any
 * shape lk_gemm declines run k_dg_gemm, a 64×64-tile FFMA GEMM over strided views. Scalings (g⊙a,
 * c⊙Ūs, D⊙c, x⊙a, …) are materialised by k_dg_ew, the sums of three terms (y, dx, Ts, G_D) too.
 * Column sums (‖W_:i‖², dc) are fixed chunks of 32 rows in fp64, summed in chunk order; ⟨Ts, Ū⟩
 * one block's fixed tree. Deterministic, no atomics.
 * LYCO_CUDA_DORA_FFMA=1 keeps every product on k_dg_gemm (the A/B switch), =2 only the products with
 * a scratch operand; LYCO_CUDA_DORA_VERIFY=1 checks each tensor-core product against k_dg_gemm
 * (stderr; it found the pieces of a small operand overlapping, fixed). k_dg_gemm splits a long K
 * over few output tiles (D·Dᵀ and the like: one tile, K = I) into ≤ 128 blocks, partials summed in
 * split order.
 *
 * Extra memory (fp32 unless said): forward N·(2·O + r) (+ N·I on the input axis) + 5·max(O·r, r·I)
 * + r·I + 2r² + ~8·kept (fp64 column-sum chunks: kept·⌈rows/256⌉ doubles); backward N·(2·O + 2·I + 2·r)
 * (input axis: N·(2·I + 2·r)) + 3·O·r + 3·r·I + the same small terms; during a tensor-core product
 * with a scratch operand, its three bf16 pieces (6 bytes per element; g⊙a: N·O·6), and for a thin
 * output the split-K slabs (≤ 2·SMs/tiles × M·N floats). E.g. 2048 tokens, 4096², r 32: peak
 * 186 MB backward, 75 MB forward (`lyco bench`'s extraMiB).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/kern_dora.h"
#include "cuda/kern_gemm.h"

#define DG_T 64
#define DG_K 16
#define DG_CHUNK 32

struct dg_gemm {
    i64 M, N, K;
    lk_view A, B;        /* M×K, N×K (any dtype and strides) */
    int rA, rB;          /* dtypes A, B are rounded through as staged */
    lk_view out;         /* M×N, fp32 scratch */
    i64 kchunk;          /* k per split (gridDim.z splits) */
    float *part;         /* gridDim.z > 1: the splits' M×N partials; NULL: out directly */
};

__device__ __forceinline__ void dg_stage(float (*S)[DG_T + 1], const lk_view &v, int rnd, i64 m0, i64 k0, i64 M, i64 K) {
    const bool kfast = v.s1 == 1;
    for (int e = threadIdx.x; e < DG_K * DG_T; e += NT) {
        const int kk = kfast ? e % DG_K : e / DG_T, mm = kfast ? e / DG_K : e % DG_T;
        const i64 m = m0 + mm, k = k0 + kk;
        S[kk][mm] = (m < M && k < K) ? round_to(vload(v, m, k), rnd) : 0.0f;
    }
}

/* out = A·Bᵀ; grid (M tiles, N tiles, K splits): M along x (up to 2³¹ − 1 tiles), N along y; with
   ksplit > 1, split z sums k in [z·kchunk, (z + 1)·kchunk) into its own M×N slice of part */
__global__ __launch_bounds__(NT) void k_dg_gemm(dg_gemm a) {
    __shared__ float As[DG_K][DG_T + 1], Bs[DG_K][DG_T + 1];
    const i64 m0 = (i64)blockIdx.x * DG_T, n0 = (i64)blockIdx.y * DG_T;
    const i64 kb = (i64)blockIdx.z * a.kchunk, ke = min(a.K, kb + a.kchunk);
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (i64 k0 = kb; k0 < ke; k0 += DG_K) {
        dg_stage(As, a.A, a.rA, m0, k0, a.M, ke);
        dg_stage(Bs, a.B, a.rB, n0, k0, a.N, ke);
        __syncthreads();
        float part[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) part[i][j] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DG_K; kk++) {
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
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const i64 m = m0 + ty * 4 + i, n = n0 + tx * 4 + j;
            if (m >= a.M || n >= a.N) continue;
            if (a.part) a.part[((i64)blockIdx.z * a.M + m) * a.N + n] = acc[i][j];
            else vstore(a.out, m, n, acc[i][j]);
        }
}

/* out[m, n] = Σ_z part[z, m, n] in split order */
__global__ __launch_bounds__(NT) void k_dg_sumz(const float *part, int nz, i64 M, i64 N, lk_view out) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= M * N) return;
    float s = 0.0f;
    for (int z = 0; z < nz; z++) s += part[(i64)z * M * N + idx];
    vstore(out, idx / N, idx % N, s);
}

/* part[ch·cols + col] = Σ_{rows of chunk ch} RN(X[row, col])·(RN(Y[row, col]) + Y2[row, col]) in fp64
   (RN through rX, rY; Y2 fp32 scratch, p NULL = 0) */
__global__ __launch_bounds__(NT) void k_dg_colred(lk_view X, int rX, lk_view Y, int rY, lk_view Y2, i64 rows, i64 cols,
                                                  double *part) {
    const i64 col = (i64)blockIdx.x * NT + threadIdx.x, nch = cdiv(rows, DG_CHUNK);
    if (col >= cols) return;
    for (i64 ch = blockIdx.y; ch < nch; ch += gridDim.y) {
        const i64 r1 = min(rows, (ch + 1) * DG_CHUNK);
        double s = 0.0;
        for (i64 r = ch * DG_CHUNK; r < r1; r++) {
            const float y = round_to(vload(Y, r, col), rY) + (Y2.p ? vload(Y2, r, col) : 0.0f);
            s += (double)round_to(vload(X, r, col), rX) * (double)y;
        }
        part[ch * cols + col] = s;
    }
}

/* w2[row] = Σ_c RN(W[row, c])² in fp64, one warp per row (lanes strided, fixed shuffle tree) */
__global__ __launch_bounds__(NT) void k_dg_rowsq(lk_view W, int rW, i64 rows, i64 cols, double *w2) {
    const i64 row = ((i64)blockIdx.x * NT + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return; /* the whole warp shares the row */
    double s = 0.0;
    for (i64 c = lane; c < cols; c += 32) {
        const double v = round_to(vload(W, row, c), rW);
        s += v * v;
    }
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) w2[row] = s;
}

struct dg_coef {
    i64 kept, r, nch;
    const double *w2;    /* Σ W² per kept index, or (NULL) the nch chunk sums in part */
    const double *part;
    lk_view X, Y1, Y2;   /* kept × r: Ūs or Dᵀ (rounded through rX), W·Dᵀ or (Ūsᵀ·W)ᵀ, VD or VIᵀ */
    int rX, ct;
    lk_view d;           /* dora_scale 1×kept */
    double eps, m;
    float *a, *c;
    double *n, *norm;
};

__global__ __launch_bounds__(NT) void k_dg_coef(dg_coef q) {
    const i64 k = (i64)blockIdx.x * NT + threadIdx.x;
    if (k >= q.kept) return;
    double n2 = 0.0;
    if (q.w2) n2 = q.w2[k];
    else
        for (i64 ch = 0; ch < q.nch; ch++) n2 += q.part[ch * q.kept + k];
    for (i64 p = 0; p < q.r; p++)
        n2 += (double)round_to(vload(q.X, k, p), q.rX) * ((double)vload(q.Y1, k, p) + (double)vload(q.Y2, k, p));
    const double nrm = sqrt(n2 > 0.0 ? n2 : 0.0), n = nrm + q.eps;
    const double a = q.m * ((double)round_to(vload(q.d, 0, k), q.ct) - n) / n;
    q.a[k] = (float)a;
    q.c[k] = (float)(1.0 + a);
    q.n[k] = n;
    q.norm[k] = nrm;
}

/* dc = Σ chunks (in order); ∂L/∂d = m·dc/n stored; γ = −m·d·dc/(n²·‖V‖) */
__global__ __launch_bounds__(NT) void k_dg_gamma(i64 kept, i64 nch, const double *part, const double *n, const double *norm,
                                                 lk_view d, int ct, double m, lk_view grad_d, float *gam) {
    const i64 k = (i64)blockIdx.x * NT + threadIdx.x;
    if (k >= kept) return;
    double dc = 0.0;
    for (i64 ch = 0; ch < nch; ch++) dc += part[ch * kept + k];
    if (grad_d.p) vstore(grad_d, 0, k, (float)(m * dc / n[k]));
    const double dk = round_to(vload(d, 0, k), ct);
    gam[k] = norm[k] > 0.0 ? (float)(-m * dk * dc / (n[k] * n[k] * norm[k])) : 0.0f;
}

/* Ū = RN_CT(U)·s·q_i and Ūs = σs·Ū (O×r, compact) */
__global__ __launch_bounds__(NT) void k_dg_prep_u(lk_locon L, float *Ub, float *Us) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= L.O * L.r) return;
    const i64 o = idx / L.r, p = idx % L.r;
    const float sg = L.sigma.p ? round_to(vload(L.sigma, 0, 0), L.ct) : 1.0f;
    const float u = round_to(vload(L.U, o, p), L.ct) * (float)L.s * vget(L.mask, p, 1.0f);
    Ub[idx] = u;
    Us[idx] = sg * u;
}

/* out[m,n] = RN(base) + xr[m]·xc[n]·RN(X[m,n]) + yr[m]·yc[n]·RN(Y[m,n]) (any views; RN through
   rbase / rX / rY; an absent term is 0, an absent scale 1) */
struct dg_ew {
    i64 M, N;
    lk_view out, base, X, Y;
    int rbase, rX, rY;
    const float *xr, *xc, *yr, *yc;
};
/* grid (column blocks, row groups): a thread walks one column over rows blockIdx.y, + gridDim.y, … */
__global__ __launch_bounds__(NT) void k_dg_ew(dg_ew e) {
    const i64 n = (i64)blockIdx.x * NT + threadIdx.x;
    if (n >= e.N) return;
    const float xc = e.xc ? e.xc[n] : 1.0f, yc = e.yc ? e.yc[n] : 1.0f;
    for (i64 m = blockIdx.y; m < e.M; m += gridDim.y) {
        float o = e.base.p ? round_to(vload(e.base, m, n), e.rbase) : 0.0f;
        if (e.X.p) o += (e.xr ? e.xr[m] : 1.0f) * xc * round_to(vload(e.X, m, n), e.rX);
        if (e.Y.p) o += (e.yr ? e.yr[m] : 1.0f) * yc * round_to(vload(e.Y, m, n), e.rY);
        vstore(e.out, m, n, o);
    }
}

/* G_U[o,p] = σs·Ts[o,p]·s·q_p */
__global__ __launch_bounds__(NT) void k_dg_grad_u(lk_locon L, const float *Ts, lk_view gU) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= L.O * L.r) return;
    const i64 o = idx / L.r, p = idx % L.r;
    const float sg = L.sigma.p ? round_to(vload(L.sigma, 0, 0), L.ct) : 1.0f;
    vstore(gU, o, p, sg * Ts[idx] * (float)L.s * vget(L.mask, p, 1.0f));
}

/* out = ⟨a, b⟩ over n values: one block, strided fp64 sums, fixed tree */
__global__ __launch_bounds__(NT) void k_dg_dot(const float *a, const float *b, i64 n, lk_view out) {
    __shared__ double sh[NT];
    double s = 0.0;
    for (i64 i = threadIdx.x; i < n; i += NT) s += (double)a[i] * (double)b[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = NT / 2; w; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) vstore(out, 0, 0, (float)sh[0]);
}

/* An fp32 scratch matrix (n values, compact) as three bf16 pieces S = P1 + P2 + P3 (P1 = RN(S),
   P2 = RN(S − P1), P3 = RN(S − P1 − P2): 3 × 8 significand bits hold the fp32 value), so that a
   product with a caller tensor runs on the bf16 tensor cores without rounding S (3 products). */
__global__ __launch_bounds__(NT) void k_dg_split3(const float *S, i64 n, unsigned short *P1, unsigned short *P2, unsigned short *P3) {
    for (i64 i = (i64)blockIdx.x * NT + threadIdx.x; i < n; i += (i64)gridDim.x * NT) {
        const float v = S[i];
        const unsigned b1 = f_to_bits(v, DT_BF16);
        const float r1 = v - bits16_to_f(b1, DT_BF16);
        const unsigned b2 = f_to_bits(r1, DT_BF16);
        const float r2 = r1 - bits16_to_f(b2, DT_BF16);
        P1[i] = (unsigned short)b1;
        P2[i] = (unsigned short)b2;
        P3[i] = (unsigned short)f_to_bits(r2, DT_BF16);
    }
}

/* ---- host ---- */

namespace {

lk_view tview(lk_view v) {
    lk_view t = v;
    t.s0 = v.s1;
    t.s1 = v.s0;
    t.rows = v.cols;
    t.cols = v.rows;
    t.flags &= ~LK_VEC;
    return t;
}

/* compact scratch (256-byte aligned) as a view: 16-byte rows only when cols·elem_size is a multiple of 16 */
lk_view cview(const void *p, i64 rows, i64 cols, int dt) {
    lk_view v = lk_pitched_view(p, rows, cols, cols, dt);
    if ((cols * (dt == DT_F32 ? 4 : 2)) % 16 != 0) v.flags &= ~LK_VEC;
    return v;
}
lk_view fview(const float *p, i64 rows, i64 cols) { return cview(p, rows, cols, DT_F32); }

/* Bump allocation in one stream-ordered block; with base NULL it only measures. */
struct arena {
    char *base;
    size_t off;
    template <typename T> T *take(i64 n) {
        size_t o = (off + 255) & ~(size_t)255;
        off = o + (size_t)(n > 0 ? n : 1) * sizeof(T);
        return base ? (T *)(base + o) : nullptr;
    }
};

struct plan {
    i64 N, O, I, r, kept, nchO, nchN;
    bool out_axis, bwd;
    float *Ub, *Us, *WD, *VX, *RR, *RR2;  /* WD: W·Dᵀ (O×r) or Ūsᵀ·W (r×I); VX: VD or VI */
    double *w2, *part, *n, *norm;
    float *a, *c, *gam;
    float *S1, *S2, *S3, *S4;              /* max(O·r, r·I), O·r, r·I, r·I */
    float *h, *p, *z, *e, *R, *Q, *T, *gD; /* N×r, N×O, N×O, N×r, N×I, N×I, O×r, r×I */
};

void layout(plan &P, arena &A) {
    i64 O = P.O, I = P.I, r = P.r, N = P.N, k = P.kept, Or = O * r, rI = r * I, big = Or > rI ? Or : rI;
    P.Ub = A.take<float>(Or);
    P.Us = A.take<float>(Or);
    P.WD = A.take<float>(big);
    P.VX = A.take<float>(big);
    P.RR = A.take<float>(r * r);
    P.RR2 = A.take<float>(r * r);
    P.w2 = A.take<double>(O);
    P.part = A.take<double>((P.nchO > P.nchN ? P.nchO : P.nchN) * k);
    P.n = A.take<double>(k);
    P.norm = A.take<double>(k);
    P.a = A.take<float>(k);
    P.c = A.take<float>(k);
    P.gam = A.take<float>(k);
    P.S1 = A.take<float>(big);
    P.S3 = A.take<float>(rI);
    P.h = A.take<float>(N * r);
    P.p = A.take<float>(P.out_axis || !P.bwd ? N * O : 1);
    P.z = A.take<float>(P.out_axis || !P.bwd ? N * O : 1);
    P.Q = A.take<float>(P.bwd || !P.out_axis ? N * I : 1);
    if (!P.bwd) return;
    P.S2 = A.take<float>(Or);
    P.S4 = A.take<float>(rI);
    P.e = A.take<float>(N * r);
    P.R = A.take<float>(N * I);
    P.T = A.take<float>(Or);
    P.gD = A.take<float>(rI);
}

struct ctx {
    const lk_dora_bypass_args *a;
    const lk_device *dev;
    cudaStream_t st;
    int ct;
    bool tc;    /* 16-bit compute: the large products on the tensor cores (gemm.cu) */
    bool verify; /* LYCO_CUDA_DORA_VERIFY=1 */
    bool split; /* scratch operands enter the tensor cores as bf16 pieces (else their products stay on CUDA cores) */
};

#define DG_TRY(x)                                                                                   \
    do {                                                                                            \
        int rc_ = (x);                                                                              \
        if (rc_) return rc_;                                                                        \
    } while (0)

/* C (M×N fp32, compact) = A·Bᵀ with A M×K (at: given as K×M) and B N×K (bt: given as K×N).
   tc: on the tensor cores when the compute dtype is 16-bit and gemm.cu takes the shape (every
   operand rounded to CT as staged, fp32 sums); otherwise k_dg_gemm (FFMA; A, B rounded through
   rA, rB: CT for caller tensors, fp32 scratch as is). */
/* The tensor-core product g (out = g.out, fp32 compact C): split (0 none, 1 A, 2 B) says which
   operand is fp32 scratch and enters as np bf16 pieces P1 + … (smallest first, chained in fp32
   through lk_gemm's base_f32; np = 3 carries fp32's 24 bits, np = 2 16 bits — relative error
   ≤ 2⁻¹⁷ — where the product only feeds a 16-bit output, pieces_for). A thin output (fewer
   128×128 tiles than 2 per SM) with a long K runs in K chunks of ≥ 512 side by side in one launch
   (lk_gemm's ksplit) into fp32 slabs summed in chunk order (k_dg_sumz): H200, W·Dᵀ at 4096², r 32,
   took 113 µs in 32 blocks; chunks as separate launches ran one after another (no faster). */
int tc_product(const ctx &X, const lk_gemm_args &g0, int split, int np) {
    const i64 M = g0.M, N = g0.N, K = g0.K;
    int64_t nz, kc;
    lk_gemm_split(M, N, K, X.dev->sms, &nz, &kc);
    const lk_view &S = split == 1 ? g0.A : g0.B;
    const i64 n = split ? S.rows * S.cols : 0;
    const size_t stride = ((size_t)(n > 0 ? n : 1) * 2 + 255) & ~(size_t)255, pbytes = nz > 1 ? (size_t)(nz * M * N) * 4 : 0;
    void *buf = nullptr;
    if (split || nz > 1) DG_TRY(lk_scratch_alloc(&buf, (split ? 3 * stride : 0) + pbytes + 256, X.st));
    lk_view piece[3];
    int rc = LYCO_OK;
    if (split) {
        unsigned short *P[3];
        for (int j = 0; j < 3; j++) {
            P[j] = (unsigned short *)((char *)buf + (size_t)j * stride);
            piece[j] = cview(P[j], S.rows, S.cols, DT_BF16);
        }
        if (n > 0) {
            k_dg_split3<<<(unsigned)(cdiv(n, NT) < 4096 ? cdiv(n, NT) : 4096), NT, 0, X.st>>>((const float *)S.p, n, P[0], P[1], P[2]);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) rc = lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of dora bypass split failed: %s", cudaGetErrorString(e));
        }
    }
    float *part = nz > 1 ? (float *)((char *)buf + (split ? 3 * stride : 0)) : nullptr;
    const int npieces = split ? np : 1;
    for (int j = npieces - 1; j >= 0 && !rc; j--) {
        lk_gemm_args g = g0;
        if (split == 1) g.A = piece[j];
        if (split == 2) g.B = piece[j];
        if (part) {
            g.out = fview(part, M, N);
            g.ksplit = (int32_t)nz;
            g.kchunk = kc;
        }
        if (j < npieces - 1) {
            g.base = g.out;
            g.base_f32 = 1;
        }
        rc = lk_gemm(&g, X.dev, X.st);
    }
    if (!rc && part) {
        k_dg_sumz<<<(unsigned)cdiv(M * N, NT), NT, 0, X.st>>>(part, (int)nz, M, N, g0.out);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) rc = lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of dora bypass split-k sum failed: %s", cudaGetErrorString(e));
    }
    int rc2 = buf ? lk_scratch_free(buf, X.st) : LYCO_OK;
    return rc ? rc : rc2;
}

int mm_ffma(const ctx &X, float *C, i64 M, i64 N, i64 K, lk_view A, bool at, int rA, lk_view B, bool bt, int rB) {
    if (M == 0 || N == 0) return LYCO_OK;
    dg_gemm d;
    memset(&d, 0, sizeof d);
    d.M = M;
    d.N = N;
    d.K = K;
    d.A = at ? tview(A) : A;
    d.B = bt ? tview(B) : B;
    d.rA = rA;
    d.rB = rB;
    d.out = fview(C, M, N);
    /* few output tiles and a long K (D·Dᵀ: one 64×64 tile, K = I; x·Dᵀ: N/64 tiles, K = I): K split
       into chunks of ≥ 256 so that ~2 blocks per SM run, partials summed in split order */
    const i64 tiles = cdiv(M, DG_T) * cdiv(N, DG_T), target = 2 * (i64)X.dev->sms;
    i64 nz = tiles >= target ? 1 : cdiv(K, 256);
    if (nz > cdiv(target, tiles)) nz = cdiv(target, tiles);
    if (nz < 1) nz = 1;
    d.kchunk = nz > 1 ? cdiv(cdiv(K, nz), DG_K) * DG_K : (K > 0 ? K : 1);
    nz = K > 0 ? cdiv(K, d.kchunk) : 1;
    void *part = nullptr;
    if (nz > 1) {
        DG_TRY(lk_scratch_alloc(&part, (size_t)(nz * M * N) * sizeof(float), X.st));
        d.part = (float *)part;
    }
    dim3 grid((unsigned)cdiv(M, DG_T), (unsigned)cdiv(N, DG_T), (unsigned)nz);
    k_dg_gemm<<<grid, NT, 0, X.st>>>(d);
    LK_LAUNCHED("dora bypass gemm");
    if (nz > 1) {
        k_dg_sumz<<<(unsigned)cdiv(M * N, NT), NT, 0, X.st>>>(d.part, (int)nz, M, N, d.out);
        LK_LAUNCHED("dora bypass split-k sum");
        DG_TRY(lk_scratch_free(part, X.st));
    }
    return LYCO_OK;
}

/* LYCO_CUDA_DORA_VERIFY=1 (diagnostic): a tensor-core product against k_dg_gemm on the same
   operands, the largest difference relative to the largest |value| printed to stderr */
int mm_verify(const ctx &X, const float *C, i64 M, i64 N, i64 K, lk_view A, bool at, int rA, lk_view B, bool bt, int rB, int line) {
    float *ref = nullptr;
    size_t n = (size_t)(M * N);
    LK_CHECK(cudaMalloc((void **)&ref, n * sizeof(float) + 16));
    int rc = mm_ffma(X, ref, M, N, K, A, at, rA, B, bt, rB);
    float *h1 = (float *)malloc(n * sizeof(float) + 16), *h2 = (float *)malloc(n * sizeof(float) + 16);
    if (!rc && h1 && h2 && cudaStreamSynchronize(X.st) == cudaSuccess && cudaMemcpy(h1, C, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
        cudaMemcpy(h2, ref, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess) {
        double mx = 0, dmax = 0;
        for (size_t i = 0; i < n; i++) {
            double v = fabs((double)h2[i]), d = fabs((double)h1[i] - (double)h2[i]);
            if (v > mx) mx = v;
            if (d > dmax) dmax = d;
        }
        fprintf(stderr, "dora-verify line %d: M %lld N %lld K %lld at %d bt %d A %s B %s dt %d/%d: max|diff| / max|ref| = %.3g\n", line,
                (long long)M, (long long)N, (long long)K, (int)at, (int)bt, rA == DT_F32 ? "scratch" : "caller", rB == DT_F32 ? "scratch" : "caller",
                A.dt, B.dt, mx > 0 ? dmax / mx : dmax);
    }
    free(h1);
    free(h2);
    cudaFree(ref);
    return rc;
}

/* pieces of a scratch operand whose product ends in the output view v: 2 for a 16-bit output, 3 for fp32 */
int pieces_for(const lk_view &v) { return v.dt == DT_F32 ? 3 : 2; }

/* tc: 0 = CUDA cores (the r×r-sized products); 2 or 3 = the tensor cores may run it (tc_product),
   with that many pieces of a scratch operand. Thin outputs (a rank-r dimension) stay on the tensor
   cores with K split: H200, 4096², 2048 tokens, r 32 (ncu): W·Dᵀ took 234 µs on k_dg_gemm with K
   split over 320 blocks, 113 µs as one tensor-core product in 32 blocks. */
int mm_at(const ctx &X, float *C, i64 M, i64 N, i64 K, lk_view A, bool at, int rA, lk_view B, bool bt, int rB, int tc, int line) {
    if (M == 0 || N == 0) return LYCO_OK;
    /* caller tensors enter rounded to CT (rA, rB = CT), fp32 scratch must not be (rA, rB = fp32):
       two caller operands → one tensor-core product; one scratch operand → its three bf16 pieces
       (bf16 compute only: fp16's exponent range would lose the small pieces); two → CUDA cores */
    const bool sa = rA == DT_F32, sb = rB == DT_F32;
    if (tc && X.tc && (!at || bt) && !(sa && sb) && (!(sa || sb) || (X.ct == DT_BF16 && X.split))) {
        lk_gemm_args g = lk_gemm_product(X.ct, A, at, B, bt, M, N, K);
        g.out = fview(C, M, N);
        if (lk_gemm_fits(&g, X.dev)) {
            DG_TRY(tc_product(X, g, sa ? 1 : sb ? 2 : 0, tc));
            return X.verify ? mm_verify(X, C, M, N, K, A, at, rA, B, bt, rB, line) : LYCO_OK;
        }
    }
    return mm_ffma(X, C, M, N, K, A, at, rA, B, bt, rB);
}
#define mm(...) mm_at(__VA_ARGS__, __LINE__)

/* out = RN(base) + xr·xc·RN(Xv) + yr·yc·RN(Yv) over M×N (k_dg_ew) */
struct ew_term {
    lk_view v;
    int rnd;
    const float *row, *col;
};
int ew(const ctx &X, lk_view out, i64 M, i64 N, lk_view base, int rbase, ew_term x, ew_term y) {
    if (M * N == 0) return LYCO_OK;
    dg_ew e;
    memset(&e, 0, sizeof e);
    e.M = M;
    e.N = N;
    e.out = out;
    e.base = base;
    e.rbase = rbase;
    e.X = x.v;
    e.rX = x.rnd;
    e.xr = x.row;
    e.xc = x.col;
    e.Y = y.v;
    e.rY = y.rnd;
    e.yr = y.row;
    e.yc = y.col;
    const i64 rowgroups = cdiv(4096, cdiv(N, NT)); /* ~4096 blocks in all */
    k_dg_ew<<<dim3((unsigned)cdiv(N, NT), (unsigned)(M < rowgroups ? M : rowgroups)), NT, 0, X.st>>>(e);
    LK_LAUNCHED("dora bypass elementwise");
    return LYCO_OK;
}
const lk_view NOV = {};
const ew_term NOT = {};
ew_term term(lk_view v, int rnd, const float *row, const float *col) { return ew_term{v, rnd, row, col}; }

int colred(const ctx &X, lk_view Xv, int rX, lk_view Y, int rY, lk_view Y2, i64 rows, i64 cols, double *part) {
    i64 nch = cdiv(rows, DG_CHUNK);
    if (nch == 0 || cols == 0) return LYCO_OK;
    k_dg_colred<<<dim3((unsigned)cdiv(cols, NT), (unsigned)(nch < 65535 ? nch : 65535)), NT, 0, X.st>>>(Xv, rX, Y, rY, Y2, rows, cols, part);
    LK_LAUNCHED("dora bypass column sums");
    return LYCO_OK;
}

unsigned blocks_of(i64 n) { return (unsigned)(n > 0 ? cdiv(n, NT) : 1); }

/* Ū, Ūs; W·Dᵀ or Ūsᵀ·W; D·Dᵀ or ŪsᵀŪs; VD or VI; Σ W²; a, c, n, ‖V‖ per kept index */
int stats(const ctx &X, plan &P) {
    const lk_dora_bypass_args *a = X.a;
    const lk_locon &L = a->L;
    const int ct = X.ct;
    i64 O = P.O, I = P.I, r = P.r;
    if (O * r > 0) {
        k_dg_prep_u<<<blocks_of(O * r), NT, 0, X.st>>>(L, P.Ub, P.Us);
        LK_LAUNCHED("dora bypass prep");
    }
    const lk_view Usv = fview(P.Us, O, r);
    dg_coef q;
    memset(&q, 0, sizeof q);
    if (P.out_axis) {
        DG_TRY(mm(X, P.WD, O, r, I, a->W, false, ct, L.D, false, ct, 3));                 /* W·Dᵀ */
        DG_TRY(mm(X, P.RR, r, r, I, L.D, false, ct, L.D, false, ct, 0));                 /* D·Dᵀ */
        DG_TRY(mm(X, P.S1, O, r, r, Usv, false, DT_F32, fview(P.RR, r, r), false, DT_F32, 0));
        DG_TRY(ew(X, fview(P.VX, O, r), O, r, fview(P.WD, O, r), DT_F32, term(fview(P.S1, O, r), DT_F32, nullptr, nullptr), NOT));
        if (O > 0) {
            k_dg_rowsq<<<blocks_of(O * 32), NT, 0, X.st>>>(a->W, ct, O, I, P.w2);
            LK_LAUNCHED("dora bypass row norms");
        }
        q.w2 = P.w2;
        q.X = Usv;
        q.rX = DT_F32;
        q.Y1 = fview(P.WD, O, r);
        q.Y2 = fview(P.VX, O, r);
    } else {
        DG_TRY(mm(X, P.WD, r, I, O, Usv, true, DT_F32, a->W, true, ct, 3));               /* Ūsᵀ·W */
        DG_TRY(mm(X, P.RR, r, r, O, Usv, true, DT_F32, Usv, true, DT_F32, 0));           /* ŪsᵀŪs */
        DG_TRY(mm(X, P.S1, r, I, r, fview(P.RR, r, r), false, DT_F32, L.D, true, ct, 0)); /* ŪsᵀŪs·D */
        DG_TRY(ew(X, fview(P.VX, r, I), r, I, fview(P.WD, r, I), DT_F32, term(fview(P.S1, r, I), DT_F32, nullptr, nullptr), NOT));
        DG_TRY(colred(X, a->W, ct, a->W, ct, NOV, O, I, P.part));                           /* Σ_o W² per column */
        q.part = P.part;
        q.nch = P.nchO;
        q.X = tview(L.D);
        q.rX = ct;
        q.Y1 = tview(fview(P.WD, r, I));
        q.Y2 = tview(fview(P.VX, r, I));
    }
    q.kept = P.kept;
    q.r = r;
    q.ct = ct;
    q.d = a->dora.d;
    q.eps = a->dora.eps;
    q.m = L.m;
    q.a = P.a;
    q.c = P.c;
    q.n = P.n;
    q.norm = P.norm;
    if (P.kept > 0) {
        k_dg_coef<<<blocks_of(P.kept), NT, 0, X.st>>>(q);
        LK_LAUNCHED("dora bypass coefficients");
    }
    return LYCO_OK;
}

int forward(const ctx &X, plan &P) {
    const lk_dora_bypass_args *a = X.a;
    const int ct = X.ct;
    i64 N = P.N, O = P.O, I = P.I, r = P.r;
    const lk_view Dv = a->L.D, hv = fview(P.h, N, r), zv = fview(P.z, N, O), pv = fview(P.p, N, O);
    if (P.out_axis) {
        DG_TRY(mm(X, P.h, N, r, I, a->x, false, ct, Dv, false, ct, 3));                 /* h = x·Dᵀ */
        DG_TRY(mm(X, P.p, N, O, r, hv, false, DT_F32, fview(P.Us, O, r), false, DT_F32, 3)); /* p = h·Ūsᵀ */
        DG_TRY(mm(X, P.z, N, O, I, a->x, false, ct, a->W, false, ct, 3));               /* z = x·Wᵀ */
        return ew(X, a->y, N, O, a->y0, ct, term(zv, DT_F32, nullptr, P.a), term(pv, DT_F32, nullptr, P.c));
    }
    const lk_view Dcv = fview(P.S3, r, I), xav = fview(P.Q, N, I);
    DG_TRY(ew(X, Dcv, r, I, NOV, 0, term(Dv, ct, nullptr, P.c), NOT));                     /* D⊙c */
    DG_TRY(mm(X, P.h, N, r, I, a->x, false, ct, Dcv, false, DT_F32, 3));                /* hc = x·(D⊙c)ᵀ */
    DG_TRY(mm(X, P.p, N, O, r, hv, false, DT_F32, fview(P.Us, O, r), false, DT_F32, 3)); /* p = hc·Ūsᵀ */
    DG_TRY(ew(X, xav, N, I, NOV, 0, term(a->x, ct, nullptr, P.a), NOT));                   /* x⊙a */
    DG_TRY(mm(X, P.z, N, O, I, xav, false, DT_F32, a->W, false, ct, pieces_for(a->y))); /* z = (x⊙a)·Wᵀ */
    return ew(X, a->y, N, O, a->y0, ct, term(zv, DT_F32, nullptr, nullptr), term(pv, DT_F32, nullptr, nullptr));
}

/* dc chunks → ∂L/∂d (stored) and γ */
int gamma_of(const ctx &X, plan &P) {
    if (P.kept == 0) return LYCO_OK;
    const lk_dora_bypass_args *a = X.a;
    k_dg_gamma<<<blocks_of(P.kept), NT, 0, X.st>>>(P.kept, P.nchN, P.part, P.n, P.norm, a->dora.d, X.ct, a->L.m, a->dora.grad_d, P.gam);
    LK_LAUNCHED("dora bypass gamma");
    return LYCO_OK;
}

int backward_out(const ctx &X, plan &P) {
    const lk_dora_bypass_args *a = X.a;
    const int ct = X.ct;
    i64 N = P.N, O = P.O, I = P.I, r = P.r;
    const lk_view Dv = a->L.D, Usv = fview(P.Us, O, r), hv = fview(P.h, N, r), ev = fview(P.e, N, r);
    const lk_view zv = fview(P.z, N, O), pv = fview(P.p, N, O), Rv = fview(P.R, N, I), Qv = fview(P.Q, N, I);
    DG_TRY(mm(X, P.h, N, r, I, a->x, false, ct, Dv, false, ct, 3));                     /* h = x·Dᵀ */
    DG_TRY(mm(X, P.p, N, O, r, hv, false, DT_F32, Usv, false, DT_F32, 3));              /* p = h·Ūsᵀ */
    DG_TRY(mm(X, P.z, N, O, I, a->x, false, ct, a->W, false, ct, 3));                   /* z = x·Wᵀ */
    DG_TRY(colred(X, a->dy, ct, zv, DT_F32, pv, N, O, P.part));                                      /* dc = colsum(g⊙(z + p)) */
    DG_TRY(gamma_of(X, P));
    DG_TRY(ew(X, zv, N, O, NOV, 0, term(a->dy, ct, nullptr, P.a), NOT));                   /* g⊙a (over z) */
    DG_TRY(ew(X, fview(P.S1, O, r), O, r, NOV, 0, term(Usv, DT_F32, P.c, nullptr), NOT));  /* c⊙Ūs */
    DG_TRY(mm(X, P.e, N, r, O, a->dy, false, ct, fview(P.S1, O, r), true, DT_F32, 3));  /* e = (g⊙c)·Ūs */
    if (a->dx.p) {
        DG_TRY(mm(X, P.R, N, I, r, ev, false, DT_F32, Dv, true, ct, 3));                /* e·D */
        DG_TRY(mm(X, P.Q, N, I, O, zv, false, DT_F32, a->W, true, ct, pieces_for(a->dx))); /* (g⊙a)·W */
        DG_TRY(ew(X, a->dx, N, I, NOV, 0, term(Qv, DT_F32, nullptr, nullptr), term(Rv, DT_F32, nullptr, nullptr)));
    }
    /* Ts = c⊙(gᵀ·h) + γ⊙VD */
    DG_TRY(mm(X, P.S1, O, r, N, a->dy, true, ct, hv, true, DT_F32, 3));
    DG_TRY(ew(X, fview(P.T, O, r), O, r, NOV, 0, term(fview(P.S1, O, r), DT_F32, P.c, nullptr),
              term(fview(P.VX, O, r), DT_F32, P.gam, nullptr)));
    /* G_D = eᵀ·x + (γ⊙Ūs)ᵀ·W + ((γ⊙Ūs)ᵀŪs)·D */
    const lk_view Ugv = fview(P.S1, O, r);
    DG_TRY(mm(X, P.gD, r, I, N, ev, true, DT_F32, a->x, true, ct, 3));
    DG_TRY(ew(X, Ugv, O, r, NOV, 0, term(Usv, DT_F32, P.gam, nullptr), NOT));
    DG_TRY(mm(X, P.S3, r, I, O, Ugv, true, DT_F32, a->W, true, ct, 3));
    DG_TRY(mm(X, P.RR2, r, r, O, Ugv, true, DT_F32, Usv, true, DT_F32, 0));
    DG_TRY(mm(X, P.S4, r, I, r, fview(P.RR2, r, r), false, DT_F32, Dv, true, ct, 0));
    return ew(X, fview(P.gD, r, I), r, I, fview(P.gD, r, I), DT_F32, term(fview(P.S3, r, I), DT_F32, nullptr, nullptr),
              term(fview(P.S4, r, I), DT_F32, nullptr, nullptr));
}

int backward_in(const ctx &X, plan &P) {
    const lk_dora_bypass_args *a = X.a;
    const int ct = X.ct;
    i64 N = P.N, O = P.O, I = P.I, r = P.r;
    const lk_view Dv = a->L.D, Usv = fview(P.Us, O, r), ev = fview(P.e, N, r), Rv = fview(P.R, N, I), Qv = fview(P.Q, N, I);
    DG_TRY(mm(X, P.e, N, r, O, a->dy, false, ct, Usv, true, DT_F32, 3));                /* e = g·Ūs */
    DG_TRY(mm(X, P.R, N, I, r, ev, false, DT_F32, Dv, true, ct, 3));                    /* R = e·D */
    DG_TRY(mm(X, P.Q, N, I, O, a->dy, false, ct, a->W, true, ct, 3));                   /* Q = g·W */
    DG_TRY(colred(X, a->x, ct, Qv, DT_F32, Rv, N, I, P.part));                                       /* dc = colsum(x⊙(Q + R)) */
    DG_TRY(gamma_of(X, P));
    if (a->dx.p)                                                                              /* dx = a⊙Q + c⊙R */
        DG_TRY(ew(X, a->dx, N, I, NOV, 0, term(Qv, DT_F32, nullptr, P.a), term(Rv, DT_F32, nullptr, P.c)));
    /* Ts = gᵀ·(x·(D⊙c)ᵀ) + W·(D⊙γ)ᵀ + Ūs·(D·(D⊙γ)ᵀ) */
    const lk_view S3v = fview(P.S3, r, I);
    DG_TRY(ew(X, S3v, r, I, NOV, 0, term(Dv, ct, nullptr, P.c), NOT));                     /* D⊙c */
    DG_TRY(mm(X, P.h, N, r, I, a->x, false, ct, S3v, false, DT_F32, 3));                /* hc */
    DG_TRY(mm(X, P.T, O, r, N, a->dy, true, ct, fview(P.h, N, r), true, DT_F32, 3));    /* gᵀ·hc */
    DG_TRY(ew(X, S3v, r, I, NOV, 0, term(Dv, ct, nullptr, P.gam), NOT));                   /* D⊙γ */
    DG_TRY(mm(X, P.S1, O, r, I, a->W, false, ct, S3v, false, DT_F32, 3));               /* W·(D⊙γ)ᵀ */
    DG_TRY(mm(X, P.RR2, r, r, I, Dv, false, ct, S3v, false, DT_F32, 0));               /* D·(D⊙γ)ᵀ */
    DG_TRY(mm(X, P.S2, O, r, r, Usv, false, DT_F32, fview(P.RR2, r, r), false, DT_F32, 0));
    DG_TRY(ew(X, fview(P.T, O, r), O, r, fview(P.T, O, r), DT_F32, term(fview(P.S1, O, r), DT_F32, nullptr, nullptr),
              term(fview(P.S2, O, r), DT_F32, nullptr, nullptr)));
    /* G_D = c⊙(eᵀ·x) + γ⊙VI */
    DG_TRY(mm(X, P.gD, r, I, N, ev, true, DT_F32, a->x, true, ct, 3));
    return ew(X, fview(P.gD, r, I), r, I, NOV, 0, term(fview(P.gD, r, I), DT_F32, nullptr, P.c),
              term(fview(P.VX, r, I), DT_F32, nullptr, P.gam));
}

int finish_grads(const ctx &X, plan &P) {
    const lk_dora_bypass_args *a = X.a;
    i64 O = P.O, r = P.r;
    if (a->gU.p && O * r > 0) {
        k_dg_grad_u<<<blocks_of(O * r), NT, 0, X.st>>>(a->L, P.T, a->gU);
        LK_LAUNCHED("dora bypass grad up");
    }
    if (a->gsigma.p) {
        k_dg_dot<<<1, NT, 0, X.st>>>(P.T, P.Ub, O * r, a->gsigma);
        LK_LAUNCHED("dora bypass grad scalar");
    }
    if (a->gD.p) {
        lk_view src = fview(P.gD, P.r, P.I);
        DG_TRY(lk_copy_round(&a->gD, &src, DT_F32, X.st));
    }
    return LYCO_OK;
}

}  // namespace

extern "C" int lk_dora_bypass(const lk_dora_bypass_args *a, const lk_device *dev, void *stream) {
    ctx X;
    X.a = a;
    X.dev = dev;
    X.st = (cudaStream_t)stream;
    X.ct = a->L.ct;
    X.tc = (X.ct == DT_BF16 || X.ct == DT_F16) && a->ffma != 1;
    X.split = a->ffma != 2;
    X.verify = a->verify != 0;
    plan P;
    memset(&P, 0, sizeof P);
    P.N = a->T;
    P.O = a->L.O;
    P.I = a->L.IK;
    P.r = a->L.r;
    P.out_axis = a->dora.on_out != 0;
    P.bwd = a->bwd != 0;
    P.kept = P.out_axis ? P.O : P.I;
    P.nchO = cdiv(P.O, DG_CHUNK);
    P.nchN = cdiv(P.N, DG_CHUNK);
    arena A = {nullptr, 0};
    layout(P, A);
    void *blk = nullptr;
    DG_TRY(lk_scratch_alloc(&blk, A.off, stream));
    A = {(char *)blk, 0};
    layout(P, A);
    int rc = stats(X, P);
    if (!rc) {
        if (!P.bwd) rc = forward(X, P);
        else rc = P.out_axis ? backward_out(X, P) : backward_in(X, P);
    }
    if (!rc && P.bwd) rc = finish_grads(X, P);
    int rc2 = lk_scratch_free(blk, stream);
    return rc ? rc : rc2;
}
