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
 * Every product is one launch of k_dg_gemm, a 64×64-tile fp32 FFMA GEMM over strided views of
 * any dtype (C[m,n] = Σ_k A[m,k]·ks[k]·B[n,k]; a view is transposed by swapping its strides;
 * operands rounded to CT as they are staged when they are caller tensors, fp32 scratch as is;
 * the K loop sums 16-term partials into the accumulator, a fixed order) with the epilogue
 * out = base + scn[n]·(acc + P) + pw·P and out2 = acc + P (fp32). Column sums (‖W_:i‖², dc) are
 * fixed chunks of 256 rows in fp64, summed in chunk order; ⟨Ts, Ū⟩ one block's fixed tree.
 * Deterministic, no atomics. CUDA cores, not tensor cores: this is the correct fused path (the
 * eager twin ran on host copies before), not yet the fast one.
 *
 * Extra memory (fp32): forward N·(O + r) + 4·O·r + 2·r·I + r² + 6·kept (+ chunk sums);
 * backward adds N·(O + I + 2r) + O·r + r·I + r².
 */
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/kern_dora.h"

#define DG_T 64
#define DG_K 16
#define DG_CHUNK 256

struct dg_gemm {
    i64 M, N, K;
    lk_view A, B;        /* M×K, N×K */
    int rA, rB;          /* dtypes A, B are rounded through as staged */
    const float *ks;     /* per-k scale of the product (NULL = 1) */
    lk_view base;        /* M×N, rounded through rbase (p NULL = 0) */
    int rbase;
    lk_view P;           /* fp32 M×N (p NULL = 0) */
    const float *scn;    /* per-column scale of acc + P (NULL = 1) */
    float pw;            /* weight of the extra P term */
    lk_view out, out2;   /* out (any dtype), out2 fp32 = acc + P; p NULL = not written */
};

__device__ __forceinline__ void dg_stage(float (*S)[DG_T + 1], const lk_view &v, int rnd, i64 m0, i64 k0, i64 M, i64 K,
                                         const float *ks) {
    const bool kfast = v.s1 == 1;
    for (int e = threadIdx.x; e < DG_K * DG_T; e += NT) {
        const int kk = kfast ? e % DG_K : e / DG_T, mm = kfast ? e / DG_K : e % DG_T;
        const i64 m = m0 + mm, k = k0 + kk;
        float x = 0.0f;
        if (m < M && k < K) {
            x = round_to(vload(v, m, k), rnd);
            if (ks) x *= ks[k];
        }
        S[kk][mm] = x;
    }
}

/* grid (M tiles, N tiles): M along x (up to 2³¹ − 1 tiles), N along y */
__global__ __launch_bounds__(NT) void k_dg_gemm(dg_gemm a) {
    __shared__ float As[DG_K][DG_T + 1], Bs[DG_K][DG_T + 1];
    const i64 m0 = (i64)blockIdx.x * DG_T, n0 = (i64)blockIdx.y * DG_T;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (i64 k0 = 0; k0 < a.K; k0 += DG_K) {
        dg_stage(As, a.A, a.rA, m0, k0, a.M, a.K, a.ks);
        dg_stage(Bs, a.B, a.rB, n0, k0, a.N, a.K, nullptr);
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
            const float v = acc[i][j], p = a.P.p ? vload(a.P, m, n) : 0.0f;
            if (a.out.p) {
                float o = (a.scn ? a.scn[n] : 1.0f) * (v + p) + a.pw * p;
                if (a.base.p) o = round_to(vload(a.base, m, n), a.rbase) + o;
                vstore(a.out, m, n, o);
            }
            if (a.out2.p) vstore(a.out2, m, n, v + p);
        }
}

/* part[ch·cols + col] = Σ_{rows of chunk ch} RN(X[row, col])·RN(Y[row, col]) in fp64 */
__global__ __launch_bounds__(NT) void k_dg_colred(lk_view X, int rX, lk_view Y, int rY, i64 rows, i64 cols, double *part) {
    const i64 col = (i64)blockIdx.x * NT + threadIdx.x, ch = blockIdx.y;
    if (col >= cols) return;
    const i64 r1 = min(rows, (ch + 1) * DG_CHUNK);
    double s = 0.0;
    for (i64 r = ch * DG_CHUNK; r < r1; r++) s += (double)round_to(vload(X, r, col), rX) * (double)round_to(vload(Y, r, col), rY);
    part[ch * cols + col] = s;
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

/* out[m,n] = base + xr[m]·xc[n]·X[m,n] + yr[m]·yc[n]·Y[m,n] (fp32 views; absent term = 0, scale = 1) */
struct dg_ew {
    i64 M, N;
    lk_view out, base, X, Y;
    const float *xr, *xc, *yr, *yc;
};
__global__ __launch_bounds__(NT) void k_dg_ew(dg_ew e) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= e.M * e.N) return;
    const i64 m = idx / e.N, n = idx % e.N;
    float o = e.base.p ? vload(e.base, m, n) : 0.0f;
    if (e.X.p) o += (e.xr ? e.xr[m] : 1.0f) * (e.xc ? e.xc[n] : 1.0f) * vload(e.X, m, n);
    if (e.Y.p) o += (e.yr ? e.yr[m] : 1.0f) * (e.yc ? e.yc[n] : 1.0f) * vload(e.Y, m, n);
    vstore(e.out, m, n, o);
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

lk_view fview(const float *p, i64 rows, i64 cols) { return lk_pitched_view(p, rows, cols, cols, DT_F32); }

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
    float *Ub, *Us, *WD, *RR, *VX;   /* VX: VD (O×r) or VI (r×I); WD: W·Dᵀ (O×r) or Ūsᵀ·W (r×I); RR r×r */
    double *w2, *part, *n, *norm;
    float *a, *c, *gam;
    float *h, *p;                    /* N×r, N×O */
    float *e, *R, *T, *gD, *RR2;     /* backward: N×r, N×I, O×r, r×I, r×r */
};

void layout(plan &P, arena &A) {
    i64 O = P.O, I = P.I, r = P.r, N = P.N, k = P.kept;
    P.Ub = A.take<float>(O * r);
    P.Us = A.take<float>(O * r);
    P.WD = A.take<float>(O * r > r * I ? O * r : r * I);
    P.RR = A.take<float>(r * r);
    P.VX = A.take<float>(O * r > r * I ? O * r : r * I);
    P.w2 = A.take<double>(O);
    i64 nch = P.nchO > P.nchN ? P.nchO : P.nchN;
    P.part = A.take<double>(nch * k);
    P.n = A.take<double>(k);
    P.norm = A.take<double>(k);
    P.a = A.take<float>(k);
    P.c = A.take<float>(k);
    P.gam = A.take<float>(k);
    P.h = A.take<float>(N * r);
    P.p = A.take<float>(P.out_axis || !P.bwd ? N * O : 1);
    if (!P.bwd) return;
    P.e = A.take<float>(N * r);
    P.R = A.take<float>(N * I);
    P.T = A.take<float>(O * r);
    P.gD = A.take<float>(r * I);
    P.RR2 = A.take<float>(r * r);
}

dg_gemm gemm_of(i64 M, i64 N, i64 K, lk_view A, int rA, lk_view B, int rB) {
    dg_gemm g;
    memset(&g, 0, sizeof g);
    g.M = M;
    g.N = N;
    g.K = K;
    g.A = A;
    g.B = B;
    g.rA = rA;
    g.rB = rB;
    return g;
}

int run_gemm(const dg_gemm &g, cudaStream_t st) {
    if (g.M == 0 || g.N == 0) return LYCO_OK;
    dim3 grid((unsigned)cdiv(g.M, DG_T), (unsigned)cdiv(g.N, DG_T));
    k_dg_gemm<<<grid, NT, 0, st>>>(g);
    LK_LAUNCHED("dora bypass gemm");
    return LYCO_OK;
}

/* C (M×N fp32, compact) = A·Bᵀ (+ base C when acc) with the k scale ks */
int prod(float *C, i64 M, i64 N, i64 K, lk_view A, int rA, lk_view B, int rB, const float *ks, bool acc, cudaStream_t st) {
    dg_gemm g = gemm_of(M, N, K, A, rA, B, rB);
    g.ks = ks;
    g.out = fview(C, M, N);
    if (acc) {
        g.base = g.out;
        g.rbase = DT_F32;
    }
    return run_gemm(g, st);
}

int colred(lk_view X, int rX, lk_view Y, int rY, i64 rows, i64 cols, double *part, cudaStream_t st) {
    i64 nch = cdiv(rows, DG_CHUNK);
    if (nch == 0 || cols == 0) return LYCO_OK;
    k_dg_colred<<<dim3((unsigned)cdiv(cols, NT), (unsigned)nch), NT, 0, st>>>(X, rX, Y, rY, rows, cols, part);
    LK_LAUNCHED("dora bypass column sums");
    return LYCO_OK;
}

int ew(const dg_ew &e, cudaStream_t st) {
    if (e.M * e.N == 0) return LYCO_OK;
    k_dg_ew<<<(unsigned)cdiv(e.M * e.N, NT), NT, 0, st>>>(e);
    LK_LAUNCHED("dora bypass elementwise");
    return LYCO_OK;
}

unsigned blocks_of(i64 n) { return (unsigned)(n > 0 ? cdiv(n, NT) : 1); }

#define DG_TRY(x)                                                                                   \
    do {                                                                                            \
        int rc_ = (x);                                                                              \
        if (rc_) return rc_;                                                                        \
    } while (0)

/* Ū, Ūs; W·Dᵀ / Ūsᵀ·W, the r×r product, VD / VI; Σ W²; a, c, n, ‖V‖ */
int stats(const lk_dora_bypass_args *a, plan &P, cudaStream_t st) {
    const lk_locon &L = a->L;
    const int ct = L.ct;
    i64 O = P.O, I = P.I, r = P.r;
    if (O * r > 0) {
        k_dg_prep_u<<<blocks_of(O * r), NT, 0, st>>>(L, P.Ub, P.Us);
        LK_LAUNCHED("dora bypass prep");
    }
    const lk_view Usv = fview(P.Us, O, r);
    dg_coef q;
    memset(&q, 0, sizeof q);
    if (P.out_axis) {
        DG_TRY(prod(P.WD, O, r, I, a->W, ct, L.D, ct, nullptr, false, st));                 /* W·Dᵀ */
        DG_TRY(prod(P.RR, r, r, I, L.D, ct, L.D, ct, nullptr, false, st));                  /* D·Dᵀ */
        dg_gemm g = gemm_of(O, r, r, Usv, DT_F32, fview(P.RR, r, r), DT_F32);               /* VD = W·Dᵀ + Ūs·D·Dᵀ */
        g.base = fview(P.WD, O, r);
        g.rbase = DT_F32;
        g.out = fview(P.VX, O, r);
        DG_TRY(run_gemm(g, st));
        if (O > 0) {
            k_dg_rowsq<<<blocks_of(O * 32), NT, 0, st>>>(a->W, ct, O, I, P.w2);
            LK_LAUNCHED("dora bypass row norms");
        }
        q.w2 = P.w2;
        q.X = Usv;
        q.rX = DT_F32;
        q.Y1 = fview(P.WD, O, r);
        q.Y2 = fview(P.VX, O, r);
    } else {
        DG_TRY(prod(P.WD, r, I, O, tview(Usv), DT_F32, tview(a->W), ct, nullptr, false, st));  /* Ūsᵀ·W */
        DG_TRY(prod(P.RR, r, r, O, tview(Usv), DT_F32, tview(Usv), DT_F32, nullptr, false, st)); /* ŪsᵀŪs */
        dg_gemm g = gemm_of(r, I, r, fview(P.RR, r, r), DT_F32, tview(L.D), ct);                /* VI = Ūsᵀ·W + ŪsᵀŪs·D */
        g.base = fview(P.WD, r, I);
        g.rbase = DT_F32;
        g.out = fview(P.VX, r, I);
        DG_TRY(run_gemm(g, st));
        DG_TRY(colred(a->W, ct, a->W, ct, O, I, P.part, st));
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
        k_dg_coef<<<blocks_of(P.kept), NT, 0, st>>>(q);
        LK_LAUNCHED("dora bypass coefficients");
    }
    return LYCO_OK;
}

int forward(const lk_dora_bypass_args *a, plan &P, cudaStream_t st) {
    const lk_locon &L = a->L;
    const int ct = L.ct;
    i64 N = P.N, O = P.O, I = P.I, r = P.r;
    /* h = x·Dᵀ (out) or x·(D⊙c)ᵀ (in); p = h·Ūsᵀ */
    DG_TRY(prod(P.h, N, r, I, a->x, ct, L.D, ct, P.out_axis ? nullptr : P.c, false, st));
    DG_TRY(prod(P.p, N, O, r, fview(P.h, N, r), DT_F32, fview(P.Us, O, r), DT_F32, nullptr, false, st));
    dg_gemm g = gemm_of(N, O, I, a->x, ct, a->W, ct);
    g.ks = P.out_axis ? nullptr : P.a;   /* in: (x⊙a)·Wᵀ */
    g.P = fview(P.p, N, O);
    g.scn = P.out_axis ? P.a : nullptr;  /* out: a⊙(x·Wᵀ + p) + p */
    g.pw = P.out_axis ? 1.0f : 0.0f;
    g.base = a->y0;
    g.rbase = ct;
    g.out = a->y;
    return run_gemm(g, st);
}

/* dc chunks → ∂L/∂d (stored) and γ */
int gamma_of(const lk_dora_bypass_args *a, plan &P, i64 nch, cudaStream_t st) {
    if (P.kept == 0) return LYCO_OK;
    k_dg_gamma<<<blocks_of(P.kept), NT, 0, st>>>(P.kept, nch, P.part, P.n, P.norm, a->dora.d, a->L.ct, a->L.m, a->dora.grad_d, P.gam);
    LK_LAUNCHED("dora bypass gamma");
    return LYCO_OK;
}

int backward_out(const lk_dora_bypass_args *a, plan &P, cudaStream_t st) {
    const lk_locon &L = a->L;
    const int ct = L.ct;
    i64 N = P.N, O = P.O, I = P.I, r = P.r;
    const lk_view Usv = fview(P.Us, O, r), hv = fview(P.h, N, r), ev = fview(P.e, N, r);
    DG_TRY(prod(P.h, N, r, I, a->x, ct, L.D, ct, nullptr, false, st));                        /* h = x·Dᵀ */
    DG_TRY(prod(P.p, N, O, r, hv, DT_F32, Usv, DT_F32, nullptr, false, st));                   /* p = h·Ūsᵀ */
    dg_gemm z = gemm_of(N, O, I, a->x, ct, a->W, ct);                                          /* p ← x·Wᵀ + p */
    z.P = fview(P.p, N, O);
    z.out2 = z.P;
    DG_TRY(run_gemm(z, st));
    DG_TRY(colred(a->dy, ct, fview(P.p, N, O), DT_F32, N, O, P.part, st));                    /* dc */
    DG_TRY(gamma_of(a, P, P.nchN, st));
    DG_TRY(prod(P.e, N, r, O, a->dy, ct, tview(Usv), DT_F32, P.c, false, st));                 /* e = (g⊙c)·Ūs */
    if (a->dx.p) {
        DG_TRY(prod(P.R, N, I, r, ev, DT_F32, tview(L.D), ct, nullptr, false, st));           /* e·D */
        dg_gemm g = gemm_of(N, I, O, a->dy, ct, tview(a->W), ct);                              /* dx = (g⊙a)·W + e·D */
        g.ks = P.a;
        g.P = fview(P.R, N, I);
        g.out = a->dx;
        DG_TRY(run_gemm(g, st));
    }
    /* Ts = (g⊙c)ᵀ·h + γ⊙VD, written as its transpose hᵀ·g scaled per column o by c */
    dg_gemm t = gemm_of(r, O, N, tview(hv), DT_F32, tview(a->dy), ct);
    t.scn = P.c;
    t.out = tview(fview(P.T, O, r));
    DG_TRY(run_gemm(t, st));
    dg_ew e;
    memset(&e, 0, sizeof e);
    e.M = O;
    e.N = r;
    e.out = e.base = fview(P.T, O, r);
    e.X = fview(P.VX, O, r);
    e.xr = P.gam;
    DG_TRY(ew(e, st));
    /* G_D = eᵀ·x + (γ⊙Ūs)ᵀ·W + ((γ⊙Ūs)ᵀŪs)·D */
    DG_TRY(prod(P.gD, r, I, N, tview(ev), DT_F32, tview(a->x), ct, nullptr, false, st));
    DG_TRY(prod(P.gD, r, I, O, tview(Usv), DT_F32, tview(a->W), ct, P.gam, true, st));
    DG_TRY(prod(P.RR2, r, r, O, tview(Usv), DT_F32, tview(Usv), DT_F32, P.gam, false, st));
    return prod(P.gD, r, I, r, fview(P.RR2, r, r), DT_F32, tview(L.D), ct, nullptr, true, st);
}

int backward_in(const lk_dora_bypass_args *a, plan &P, cudaStream_t st) {
    const lk_locon &L = a->L;
    const int ct = L.ct;
    i64 N = P.N, O = P.O, I = P.I, r = P.r;
    const lk_view Usv = fview(P.Us, O, r), ev = fview(P.e, N, r), Rv = fview(P.R, N, I);
    DG_TRY(prod(P.e, N, r, O, a->dy, ct, tview(Usv), DT_F32, nullptr, false, st));             /* e = g·Ūs */
    DG_TRY(prod(P.R, N, I, r, ev, DT_F32, tview(L.D), ct, nullptr, false, st));                /* R = e·D */
    dg_gemm g = gemm_of(N, I, O, a->dy, ct, tview(a->W), ct);                                   /* QR = g·W + R → R; dx = a⊙QR + R */
    g.P = Rv;
    g.out2 = Rv;
    g.scn = P.a;
    g.pw = 1.0f;
    g.out = a->dx;
    DG_TRY(run_gemm(g, st));
    DG_TRY(colred(a->x, ct, Rv, DT_F32, N, I, P.part, st));                                     /* dc */
    DG_TRY(gamma_of(a, P, P.nchN, st));
    DG_TRY(prod(P.h, N, r, I, a->x, ct, L.D, ct, P.c, false, st));                              /* hc = x·(D⊙c)ᵀ */
    /* Ts = gᵀ·hc + W·(D⊙γ)ᵀ + Ūs·(D·(D⊙γ)ᵀ) */
    DG_TRY(prod(P.T, O, r, N, tview(a->dy), ct, tview(fview(P.h, N, r)), DT_F32, nullptr, false, st));
    DG_TRY(prod(P.T, O, r, I, a->W, ct, L.D, ct, P.gam, true, st));
    DG_TRY(prod(P.RR2, r, r, I, L.D, ct, L.D, ct, P.gam, false, st));
    DG_TRY(prod(P.T, O, r, r, Usv, DT_F32, fview(P.RR2, r, r), DT_F32, nullptr, true, st));
    /* G_D = c⊙(eᵀ·x) + γ⊙VI */
    DG_TRY(prod(P.gD, r, I, N, tview(ev), DT_F32, tview(a->x), ct, nullptr, false, st));
    dg_ew e;
    memset(&e, 0, sizeof e);
    e.M = r;
    e.N = I;
    e.out = fview(P.gD, r, I);
    e.X = e.out;
    e.xc = P.c;
    e.Y = fview(P.VX, r, I);
    e.yc = P.gam;
    return ew(e, st);
}

int finish_grads(const lk_dora_bypass_args *a, plan &P, cudaStream_t st) {
    const lk_locon &L = a->L;
    i64 O = P.O, r = P.r;
    if (a->gU.p && O * r > 0) {
        k_dg_grad_u<<<blocks_of(O * r), NT, 0, st>>>(L, P.T, a->gU);
        LK_LAUNCHED("dora bypass grad up");
    }
    if (a->gsigma.p) {
        k_dg_dot<<<1, NT, 0, st>>>(P.T, P.Ub, O * r, a->gsigma);
        LK_LAUNCHED("dora bypass grad scalar");
    }
    if (a->gD.p) {
        lk_view src = fview(P.gD, P.r, P.I);
        DG_TRY(lk_copy_round(&a->gD, &src, DT_F32, st));
    }
    return LYCO_OK;
}

}  // namespace

extern "C" int lk_dora_bypass(const lk_dora_bypass_args *a, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
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
    int rc = stats(a, P, st);
    if (!rc) {
        if (!P.bwd) rc = forward(a, P, st);
        else rc = P.out_axis ? backward_out(a, P, st) : backward_in(a, P, st);
    }
    if (!rc && P.bwd) rc = finish_grads(a, P, st);
    int rc2 = lk_scratch_free(blk, stream);
    return rc ? rc : rc2;
}
