/*
 * loha_fs.cu — LoHa (ALGORITHMS.md §2.2) bypass forward and backward through the rank-r₁r₂
 * face-splitting form; linear and conv (1-D/2-D/3-D, any stride/padding/dilation, groups = 1),
 * plain and Tucker (B̄_t = P_t from lk_loha_tucker_prep). R = r₁·r₂, pairs ab = a·r₂ + b.
 *
 *   ΔW̄ x = (R_1 ⊙ R_2)·x = M·(Kᵀᵀ·x):  K[ab, j] = B̄_1[a, j]·B̄_2[b, j]   (R × I·K)
 *                                       M[o, ab] = Ā_1[o, a]·Ā_2[o, b]   (O × R)
 *   w_o = RN_f32(m·σs·s'·q_o)                                            (O floats, scratch)
 *   forward : h  = im2col(x)·Kᵀ                       (T × R, fp32 scratch)
 *             y  = RN_CT(y0) + w_o·(h·Mᵀ)[t, o]
 *   backward: gh = dy·M̃, M̃[o, ab] = w_o·M[o, ab]     (T × R; dy rounded to CT)
 *             dx = gh·K (conv: the transposed conv, an index map over κ and ab)
 *             D  = dyᵀ·h (O × R),  F = ghᵀ·im2col(x) (R × I·K)   (split over tokens)
 *             G_Ā_1[o, a] = w_o·Σ_b Ā_2[o, b]·D[o, ab],  G_Ā_2[o, b] = w_o·Σ_a Ā_1[o, a]·D[o, ab]
 *             G_B̄_1[a, j] = Σ_b B̄_2[b, j]·F[ab, j],      G_B̄_2[b, j] = Σ_a B̄_1[a, j]·F[ab, j]
 *             G_σs = m·Σ_o s'·q_o·Σ_ab M[o, ab]·D[o, ab] (fp64)
 *             Tucker: G_B̄_t is G_P_t (fp32 scratch), then loha.cu's lk_loha_tucker_grads.
 * K and M are never stored: their elements are generated as the GEMM stages its operand tiles
 * (products of two CT-rounded factors: exact in fp32 for 16-bit compute).
 *
 * Rule (lk_loha_fs_wanted), FLOP counted in fp32-FMA units, T = output-grid tokens: this form
 * costs T·R·(I·K + O) FMAs (forward; the backward about three times that, as does the tile
 * path's), the tile path (loha_bypass.cu) T·O·I·K FMAs of product plus ⌈T/64⌉·O·I·K·(r₁ + r₂)
 * fp64 FMAs of ΔW generation (fp64 ≈ half the fp32 rate: counted ×2). Face-splitting when
 *   T·R·(I·K + O) ≤ T·O·I·K + 2·⌈T/64⌉·O·I·K·(r₁ + r₂)
 * — at 4096², 8192 tokens: r ≤ 45 by the product alone (r = 16: 0.06 of the tile path's cost);
 * on the case table every row except loha_conv2d_3x3_s2p1 and loha_conv3d (tiny, where both are
 * launch-bound). Measurement behind it: on the H200 the tile path took
 * 64.6 ms (bypass fwd, 8192 tokens, 4096², r = 16: 4.3 effective TFLOP/s); this form is 34 GFLOP
 * there (forward). NOT YET MEASURED on a GPU (written without device access); set
 * LYCO_CUDA_LOHA_LEGACY=1 for the tile path everywhere.
 * Numerics: the chains are I·K then R long (forward; the tile path's I·K then r) — check.c's
 * bypass-forward budget counts R for LoHa.
 *
 * GEMM (k_fs_gemm): 128×128 tiles, k steps of 8 through shared memory with the next step's
 * global loads issued before the current step's FMAs, 8×8 fp32 FFMA per thread (strided rows
 * ty + 16u, columns tx + 16v), operands as index maps (template flags choose which axis the
 * staging threads walk, for coalescing). Split-K over blockIdx.y into fp32 partials whose
 * consumers sum them in a fixed order (fp64): deterministic, no atomics; the split depends on the
 * shape only (fs_split).
 * Extra memory (fp32): w (O), h and gh (T·R each, times the split count when split) plus their
 * sums, D and F partials (z·O·R, z·R·I·K), Tucker P_t and G_P_t, G_σs partials (fp64).
 *
 * Tensor-core route (bf16 compute, linear, plain; lk_loha_fs_tc_wanted): the same products through
 * gemm.cu (mma.sync, fp32 sums) over operands materialised in bf16 — K̃ = RN(B̄_1[a, j]·B̄_2[b, j])
 * (R × I), M̃ = RN(w_o·Ā_1[o, a]·Ā_2[o, b]) (O × R) (k_fs_kt, k_fs_mt; each a product of two rounded
 * factors, exact in fp32, rounded once), h = RN(x·K̃ᵀ) and gh = RN(dy·M̃) (T × R) — so y =
 * RN(y0) + h·M̃ᵀ, dx = gh·K̃, D = dyᵀ·h, F = ghᵀ·x, then the same k_fs_ga / k_fs_gb / k_fs_gsig.
 * Thin products (x·K̃ᵀ, dy·M̃, D, F: few 128×128 tiles, long K) run as fp32 K-chunk slabs in one
 * launch (lk_gemm_split), summed in order. Numerics: three roundings to bf16 on the way (K̃ or M̃,
 * and h / gh), each ~u relative per term of sums with random signs — the eager chain's three
 * (R_1, R_2, ΔW̄); check.c counts LoHa's bypass as rounding an intermediate. fp16 keeps the dense
 * route (K̃'s products of two small factors would fall into fp16's subnormals). Cost: 2·T·R·(I + O)
 * flops per product pair against the dense route's 2·T·O·I (loha_tc.cu): at 4096², r 16, 8192
 * tokens 34 against 275 GFLOP for the forward. Extra memory: w; K̃, M̃, h, gh in bf16 (R·I, O·R,
 * T·R, T·R); the slabs (≤ 2·SMs/tiles × the thin output, fp32); G_σs partials.
 */
#include <stdio.h>
#include <string.h>

#include "cuda/kern_gemm.h"
#include "cuda/loha_gen.cuh"

#define FB 128 /* tile rows and columns */
#define FK 8   /* k step */

/* ---- operands: ld(r, c) of an M×Kd (A) or Kd×N (B) operand ---- */
struct fs_mat { /* fp32 scratch p[r·rs + c·cs] */
    const float *p;
    i64 rs, cs;
    __device__ float ld(i64 r, i64 c) const { return p[r * rs + c * cs]; }
};
template <typename CT> struct fs_x { /* im2col(x)[t, j], RN_CT, 0 in the padding */
    lk_act x;
    lk_geo g;
    i64 K;
    __device__ float ld(i64 t, i64 j) const { return rnd_ct<CT>(lg_xcol(x, g, K, t, j)); }
};
template <typename CT> struct fs_dy { /* RN_CT(dy[t, o]) (TR: [o, t]) */
    lk_act dy;
    lk_geo g;
    bool tr;
    __device__ float ld(i64 r, i64 c) const { return rnd_ct<CT>(tr ? lg_yld(dy, g, c, r) : lg_yld(dy, g, r, c)); }
};
/* B̄_t as the operand sees it: RN_CT, or as is when it is the fp32 Tucker intermediate P_t */
template <typename CT> __device__ __forceinline__ float fs_b(const lk_loha &L, const lk_view &B, i64 i, i64 j) {
    const float v = vload(B, i, j);
    return L.b_exact ? v : rnd_ct<CT>(v);
}
template <typename CT> struct fs_k { /* K[ab, j] (TR: Kᵀ[j, ab]) */
    lk_loha L;
    bool tr;
    __device__ float ld(i64 r, i64 c) const {
        const i64 ab = tr ? c : r, j = tr ? r : c, a = ab / L.r2, b = ab % L.r2;
        return fs_b<CT>(L, L.B1, a, j) * fs_b<CT>(L, L.B2, b, j);
    }
};
template <typename CT> struct fs_kconv { /* conv dx's B: row κ·R + ab, column c → K[ab, c·K + κ] */
    lk_loha L;
    __device__ float ld(i64 r, i64 c) const {
        const i64 R = L.r1 * L.r2, kap = r / R, ab = r % R, j = c * L.K + kap, a = ab / L.r2, b = ab % L.r2;
        return fs_b<CT>(L, L.B1, a, j) * fs_b<CT>(L, L.B2, b, j);
    }
};
template <typename CT> struct fs_m { /* Mᵀ[ab, o] (W: M̃[o, ab] = w_o·M[o, ab], rows o) */
    lk_loha L;
    const float *w; /* NULL: Mᵀ */
    __device__ float ld(i64 r, i64 c) const {
        const i64 ab = w ? c : r, o = w ? r : c, a = ab / L.r2, b = ab % L.r2;
        const float v = rnd_ct<CT>(vload(L.A1, o, a)) * rnd_ct<CT>(vload(L.A2, o, b));
        return w ? w[o] * v : v;
    }
};
struct fs_ghconv { /* conv dx's A: row = input token (n, q), column κ·R + ab → gh[(n, p(q, κ)), ab] or 0 */
    const float *gh;
    lk_geo g;
    i64 R;
    __device__ float ld(i64 r, i64 c) const {
        const i64 kap = c / R, ab = c % R;
        i64 p;
        if (!lg_out_pos(g, r % g.spin, kap, p)) return 0.0f;
        return gh[((r / g.spin) * g.spout + p) * R + ab];
    }
};

/* ---- epilogues: st(m, n, z, v) ---- */
struct fs_part { /* split-K partials p[(z·M + m)·N + n] */
    float *p;
    i64 M, N;
    __device__ void st(i64 m, i64 n, i64 z, float v) const { p[(z * M + m) * N + n] = v; }
};
template <typename CT> struct fs_ey { /* y[t, o] = RN_CT(y0) + w_o·v */
    lk_act y, y0;
    lk_geo g;
    const float *w;
    __device__ void st(i64 t, i64 o, i64, float v) const {
        const float base = y0.p ? rnd_ct<CT>(lg_yld(y0, g, t, o)) : 0.0f;
        lg_yst(y, g, t, o, base + w[o] * v);
    }
};
struct fs_edx { /* dx at input token t (n, q), channel c */
    lk_act dx;
    lk_geo g;
    __device__ void st(i64 t, i64 c, i64, float v) const { lg_act_st(dx, t / g.spin, c, t % g.spin, v); }
};

/* Element l of a thread's staging share: (row, k) of A, (k, column) of B; AK / BK: k fastest. */
#define FS_NL (FB * FK / NT) /* 4 elements of each operand per thread and step */
#define FS_AM(l) (AK ? (int)(threadIdx.x + (l) * NT) / FK : (int)(threadIdx.x + (l) * NT) % FB)
#define FS_AK(l) (AK ? (int)(threadIdx.x + (l) * NT) % FK : (int)(threadIdx.x + (l) * NT) / FB)
#define FS_BN(l) (BK ? (int)(threadIdx.x + (l) * NT) / FK : (int)(threadIdx.x + (l) * NT) % FB)
#define FS_BK(l) (BK ? (int)(threadIdx.x + (l) * NT) % FK : (int)(threadIdx.x + (l) * NT) / FB)

/* The thread's share of the k step at k0 (0 outside the matrices and past ke) into registers. */
template <bool AK, bool BK, class OA, class OB>
__device__ __forceinline__ void fs_fetch(const OA &A, const OB &B, i64 M, i64 N, i64 m0, i64 n0, i64 k0, i64 ke,
                                         float (&ra)[FS_NL], float (&rb)[FS_NL]) {
#pragma unroll
    for (int l = 0; l < FS_NL; l++) {
        const i64 m = m0 + FS_AM(l), ka = k0 + FS_AK(l), n = n0 + FS_BN(l), kb = k0 + FS_BK(l);
        ra[l] = (m < M && ka < ke) ? A.ld(m, ka) : 0.0f;
        rb[l] = (n < N && kb < ke) ? B.ld(kb, n) : 0.0f;
    }
}

/* C = A·B (M×N) over k ∈ [blockIdx.y·kper, min(Kd, (blockIdx.y + 1)·kper)); blockIdx.x = the
   128×128 tile (column tiles fastest). AK / BK: the staging threads walk k fastest (else m / n). */
template <class OA, class OB, class EP, bool AK, bool BK>
__global__ __launch_bounds__(NT) void k_fs_gemm(OA A, OB B, EP E, i64 M, i64 N, i64 Kd, i64 kper) {
    __shared__ float As[FK][FB + 4]; /* +4: the k-fastest staging stores hit 32 distinct banks */
    __shared__ float Bs[FK][FB + 4];
    const i64 tn = cdiv(N, FB), m0 = ((i64)blockIdx.x / tn) * FB, n0 = ((i64)blockIdx.x % tn) * FB;
    const i64 kb = (i64)blockIdx.y * kper, ke = kb + kper < Kd ? kb + kper : Kd;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[8][8], ra[FS_NL], rb[FS_NL];
#pragma unroll
    for (int u = 0; u < 8; u++)
#pragma unroll
        for (int v = 0; v < 8; v++) acc[u][v] = 0.0f;
    if (kb < ke) fs_fetch<AK, BK>(A, B, M, N, m0, n0, kb, ke, ra, rb);
    for (i64 k0 = kb; k0 < ke; k0 += FK) {
#pragma unroll
        for (int l = 0; l < FS_NL; l++) {
            As[FS_AK(l)][FS_AM(l)] = ra[l];
            Bs[FS_BK(l)][FS_BN(l)] = rb[l];
        }
        __syncthreads();
        if (k0 + FK < ke) fs_fetch<AK, BK>(A, B, M, N, m0, n0, k0 + FK, ke, ra, rb);
#pragma unroll
        for (int kk = 0; kk < FK; kk++) {
            float a[8], b[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                a[u] = As[kk][ty + 16 * u];
                b[u] = Bs[kk][tx + 16 * u];
            }
#pragma unroll
            for (int u = 0; u < 8; u++)
#pragma unroll
                for (int v = 0; v < 8; v++) acc[u][v] = fmaf(a[u], b[v], acc[u][v]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int u = 0; u < 8; u++)
#pragma unroll
        for (int v = 0; v < 8; v++) {
            const i64 m = m0 + ty + 16 * u, n = n0 + tx + 16 * v;
            if (m < M && n < N) E.st(m, n, blockIdx.y, acc[u][v]);
        }
}

/* ---- small kernels ---- */
#define FS_GRID_STRIDE(e, total) for (i64 e = (i64)blockIdx.x * NT + threadIdx.x; e < (total); e += (i64)gridDim.x * NT)

/* w_o = RN_f32(m·σs·s'·q_o) */
template <typename CT> __global__ __launch_bounds__(NT) void k_fs_rowscale(lk_loha L, float *w) {
    const double lam = L.m * (double)sigma_ct<CT>(L.sigma) * L.s;
    FS_GRID_STRIDE(o, L.O) w[o] = (float)(lam * (double)vget(L.mask, o, 1.0f));
}

/* out[m, c] = Σ_z p[(z·M + m)·N + c] over an M × N out (fixed order, fp64, rounded to fp32, then to
   out's dtype when it is 16-bit) */
__global__ __launch_bounds__(NT) void k_fs_sumz(const float *p, i64 z, lk_view out) {
    const i64 n = out.rows * out.cols;
    FS_GRID_STRIDE(i, n) {
        double s = 0.0;
        for (i64 k = 0; k < z; k++) s += (double)p[k * n + i];
        vstore(out, i / out.cols, i % out.cols, (float)s);
    }
}

/* The tensor-core route's operands: K̃[ab, j] = RN_CT(B̄_1[a, j]·B̄_2[b, j]) (R × IK; grid y = the
   row ab) and M̃[o, ab] = RN_CT(w_o·Ā_1[o, a]·Ā_2[o, b]) (O × R; grid y = rows o, strided), each
   product of CT-rounded factors exact in fp32 and rounded once. */
template <typename CT> __global__ __launch_bounds__(NT) void k_fs_kt(lk_loha L, lk_view Kt) {
    const i64 ab = blockIdx.y, a = ab / L.r2, b = ab % L.r2;
    for (i64 j = (i64)blockIdx.x * NT + threadIdx.x; j < L.IK; j += (i64)gridDim.x * NT)
        vstore(Kt, ab, j, fs_b<CT>(L, L.B1, a, j) * fs_b<CT>(L, L.B2, b, j));
}
template <typename CT> __global__ __launch_bounds__(NT) void k_fs_mt(lk_loha L, const float *w, lk_view Mt) {
    const i64 R = L.r1 * L.r2;
    for (i64 o = blockIdx.y; o < L.O; o += gridDim.y)
        for (i64 ab = threadIdx.x; ab < R; ab += NT)
            vstore(Mt, o, ab, w[o] * (rnd_ct<CT>(vload(L.A1, o, ab / L.r2)) * rnd_ct<CT>(vload(L.A2, o, ab % L.r2))));
}

/* D[o, ab] from its z partials (O × R each) */
__device__ __forceinline__ double fs_dsum(const float *Dp, i64 z, i64 O, i64 R, i64 o, i64 ab) {
    double s = 0.0;
    for (i64 k = 0; k < z; k++) s += (double)Dp[(k * O + o) * R + ab];
    return s;
}

/* G_Ā_1 and G_Ā_2: one thread per (o, rank index) over O·(r₁ + r₂) */
template <typename CT>
__global__ __launch_bounds__(NT) void k_fs_ga(lk_loha L, const float *Dp, i64 z, const float *w, lk_view g1, lk_view g2) {
    const i64 r12 = L.r1 + L.r2, R = L.r1 * L.r2;
    FS_GRID_STRIDE(e, L.O * r12) {
        const i64 o = e / r12, i = e % r12;
        const bool first = i < L.r1;
        const lk_view &g = first ? g1 : g2;
        if (!g.p) continue;
        double acc = 0.0;
        if (first)
            for (i64 b = 0; b < L.r2; b++) acc += (double)rnd_ct<CT>(vload(L.A2, o, b)) * fs_dsum(Dp, z, L.O, R, o, i * L.r2 + b);
        else
            for (i64 a = 0; a < L.r1; a++)
                acc += (double)rnd_ct<CT>(vload(L.A1, o, a)) * fs_dsum(Dp, z, L.O, R, o, a * L.r2 + (i - L.r1));
        vstore(g, o, first ? i : i - L.r1, (float)((double)w[o] * acc));
    }
}

/* G_B̄_1 and G_B̄_2 (or Tucker's G_P_t): one thread per (rank index, j) over (r₁ + r₂)·I·K */
template <typename CT>
__global__ __launch_bounds__(NT) void k_fs_gb(lk_loha L, const float *Fp, i64 z, lk_view d1, lk_view d2) {
    const i64 R = L.r1 * L.r2, IK = L.IK;
    FS_GRID_STRIDE(e, (L.r1 + L.r2) * IK) {
        const i64 i = e / IK, j = e % IK;
        const bool first = i < L.r1;
        const lk_view &d = first ? d1 : d2;
        if (!d.p) continue;
        double acc = 0.0;
        const i64 n = first ? L.r2 : L.r1;
        for (i64 q = 0; q < n; q++) {
            const i64 ab = first ? i * L.r2 + q : q * L.r2 + (i - L.r1);
            double f = 0.0;
            for (i64 k = 0; k < z; k++) f += (double)Fp[(k * R + ab) * IK + j];
            acc += (double)(first ? fs_b<CT>(L, L.B2, q, j) : fs_b<CT>(L, L.B1, q, j)) * f;
        }
        vstore(d, first ? i : i - L.r1, j, (float)acc);
    }
}

/* G_σs partials: one per block, Σ_o s'·q_o·Σ_ab M[o, ab]·D[o, ab] over the block's rows (fp64) */
template <typename CT> __global__ __launch_bounds__(NT) void k_fs_gsig(lk_loha L, const float *Dp, i64 z, double *part) {
    __shared__ double red[NT];
    const i64 R = L.r1 * L.r2;
    double acc = 0.0;
    FS_GRID_STRIDE(o, L.O) {
        double s = 0.0;
        for (i64 a = 0; a < L.r1; a++) {
            const double va = (double)rnd_ct<CT>(vload(L.A1, o, a));
            for (i64 b = 0; b < L.r2; b++)
                s += va * (double)rnd_ct<CT>(vload(L.A2, o, b)) * fs_dsum(Dp, z, L.O, R, o, a * L.r2 + b);
        }
        acc += L.s * (double)vget(L.mask, o, 1.0f) * s;
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int k = 0; k < NT; k++) t += red[k];
        part[blockIdx.x] = t;
    }
}

__global__ void k_fs_gsig_sum(const double *part, i64 n, double m, lk_view out) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    double s = 0.0;
    for (i64 i = 0; i < n; i++) s += part[i];
    vstore(out, 0, 0, (float)(m * s));
}

/* =============================================================================================
 * host
 * =========================================================================================== */
#define FS_GRID_CAP 65535
#define FS_SIG_BLOCKS 256

struct fs_carve {
    size_t off;
    char *base;
};
static void *fs_take(fs_carve &cv, i64 bytes) {
    void *p = cv.base ? cv.base + cv.off : NULL;
    cv.off += ((size_t)bytes + 255) / 256 * 256;
    return p;
}

static lk_view fs_f32_view(float *p, i64 rows, i64 cols) {
    lk_view v;
    memset(&v, 0, sizeof v);
    v.p = p;
    v.s0 = cols;
    v.s1 = 1;
    v.rows = rows;
    v.cols = cols;
    v.dt = DT_F32;
    return v;
}

static unsigned fs_blocks(i64 n) {
    i64 g = cdiv(n, NT);
    return (unsigned)(g > FS_GRID_CAP ? FS_GRID_CAP : g < 1 ? 1 : g);
}

/* Split of a Kd-long reduction so that about 256 blocks run, each split ≥ 512 long and a
   multiple of FK; a function of the shape only (deterministic). */
static void fs_split(i64 M, i64 N, i64 Kd, i64 *z, i64 *kper) {
    const i64 tiles = cdiv(M, FB) * cdiv(N, FB);
    i64 zz = cdiv(256, tiles > 0 ? tiles : 1), maxz = cdiv(Kd, 512);
    if (zz > maxz) zz = maxz;
    if (zz > FS_GRID_CAP) zz = FS_GRID_CAP;
    if (zz < 1) zz = 1;
    *kper = cdiv(cdiv(Kd > 0 ? Kd : 1, zz), FK) * FK;
    *z = cdiv(Kd > 0 ? Kd : 1, *kper);
}

template <bool AK, bool BK, class OA, class OB, class EP>
static int fs_gemm(const OA &A, const OB &B, const EP &E, i64 M, i64 N, i64 Kd, i64 z, i64 kper, cudaStream_t s, const char *what) {
    const i64 tiles = cdiv(M, FB) * cdiv(N, FB);
    if (tiles == 0) return LYCO_OK;
    if (tiles > 2147483647LL || z > FS_GRID_CAP)
        return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda loha: %s grid (%lld tiles × %lld splits) exceeds the launch limits", what,
                         (long long)tiles, (long long)z);
    k_fs_gemm<OA, OB, EP, AK, BK><<<dim3((unsigned)tiles, (unsigned)z), NT, 0, s>>>(A, B, E, M, N, Kd, kper);
    LK_LAUNCHED(what);
    return LYCO_OK;
}

/* Shared by both directions: sizes the scratch when cv.base is NULL (nothing launched). */
struct fs_ctx {
    lk_loha_args a; /* L's B̄_t point at P_t after the Tucker prep */
    i64 Tt, R;      /* output-grid tokens, r₁·r₂ */
    float *w;
};

/* w, Tucker P_t; false: sizing pass (nothing launched) */
template <typename CT> static int fs_prep(fs_ctx &c, fs_carve &cv, cudaStream_t s) {
    lk_loha &L = c.a.L;
    float *P = (float *)fs_take(cv, lk_loha_tucker_floats(&L) * 4);
    c.w = (float *)fs_take(cv, L.O * 4);
    if (!cv.base) return LYCO_OK;
    int rc = lk_loha_tucker_prep(&L, P, s);
    if (rc) return rc;
    k_fs_rowscale<CT><<<fs_blocks(L.O), NT, 0, s>>>(L, c.w);
    LK_LAUNCHED("loha fs rowscale");
    return LYCO_OK;
}

/* out (M×N fp32) = A·B, split over Kd and summed when the shape asks for it */
template <bool AK, bool BK, class OA, class OB>
static int fs_gemm_full(const OA &A, const OB &B, i64 M, i64 N, i64 Kd, float *out, fs_carve &cv, cudaStream_t s, const char *what) {
    i64 z, kper;
    fs_split(M, N, Kd, &z, &kper);
    float *part = z > 1 ? (float *)fs_take(cv, z * M * N * 4) : out;
    if (!cv.base) return LYCO_OK;
    const fs_part ep = {part, M, N};
    int rc = fs_gemm<AK, BK>(A, B, ep, M, N, Kd, z, kper, s, what);
    if (rc || z == 1) return rc;
    k_fs_sumz<<<fs_blocks(M * N), NT, 0, s>>>(part, z, fs_f32_view(out, M, N));
    LK_LAUNCHED("loha fs sumz");
    return LYCO_OK;
}

/* h = im2col(x)·Kᵀ (T × R) */
template <typename CT> static int fs_h(const fs_ctx &c, float *h, fs_carve &cv, cudaStream_t s) {
    const lk_loha &L = c.a.L;
    const fs_x<CT> ax = {c.a.x, c.a.geo, L.K};
    const fs_k<CT> kt = {L, true};
    return fs_gemm_full<true, true>(ax, kt, c.Tt, c.R, L.IK, h, cv, s, "loha fs h");
}

template <typename CT> static int fs_fwd_body(const lk_loha_args *a0, const lk_device *, fs_carve &cv, cudaStream_t s) {
    fs_ctx c;
    c.a = *a0;
    c.Tt = a0->T * a0->geo.spout;
    c.R = a0->L.r1 * a0->L.r2;
    int rc = fs_prep<CT>(c, cv, s);
    if (rc) return rc;
    float *h = (float *)fs_take(cv, c.Tt * c.R * 4);
    if ((rc = fs_h<CT>(c, h, cv, s)) || !cv.base) return rc;
    const lk_loha &L = c.a.L;
    const fs_mat ah = {h, c.R, 1};
    const fs_m<CT> mt = {L, NULL};
    const fs_ey<CT> ey = {c.a.y, c.a.y0, c.a.geo, c.w};
    return fs_gemm<true, true>(ah, mt, ey, c.Tt, L.O, c.R, 1, c.R, s, "loha fs y");
}

/* G_Ā_t and G_σs from D = dyᵀ·h (zD partials of O × R) */
template <typename CT> static int fs_use_D(const fs_ctx &c, const float *Dp, i64 zD, double *sp, cudaStream_t s) {
    const lk_loha_args &a = c.a;
    const lk_loha &L = a.L;
    if (a.gA1.p || a.gA2.p) {
        k_fs_ga<CT><<<fs_blocks(L.O * (L.r1 + L.r2)), NT, 0, s>>>(L, Dp, zD, c.w, a.gA1, a.gA2);
        LK_LAUNCHED("loha fs ga");
    }
    if (sp) {
        k_fs_gsig<CT><<<FS_SIG_BLOCKS, NT, 0, s>>>(L, Dp, zD, sp);
        LK_LAUNCHED("loha fs gsig");
        k_fs_gsig_sum<<<1, 32, 0, s>>>(sp, FS_SIG_BLOCKS, L.m, a.gsigma);
        LK_LAUNCHED("loha fs gsig_sum");
    }
    return LYCO_OK;
}

/* G_B̄_t from F = ghᵀ·im2col(x) (zF partials of R × IK); Tucker: G_P_t into GP, then the core's
   chain into a0's gradients */
template <typename CT>
static int fs_use_F(const fs_ctx &c, const lk_loha_args *a0, const float *Fp, i64 zF, float *GP, cudaStream_t s) {
    const lk_loha_args &a = c.a;
    const lk_loha &L = a.L;
    lk_view d1 = a.gB1, d2 = a.gB2;
    if (L.tucker) {
        memset(&d1, 0, sizeof d1);
        memset(&d2, 0, sizeof d2);
        if (a.gB1.p || a.gT1.p) d1 = fs_f32_view(GP, L.r1, L.IK);
        if (a.gB2.p || a.gT2.p) d2 = fs_f32_view(GP + L.r1 * L.IK, L.r2, L.IK);
    }
    k_fs_gb<CT><<<fs_blocks((L.r1 + L.r2) * L.IK), NT, 0, s>>>(L, Fp, zF, d1, d2);
    LK_LAUNCHED("loha fs gb");
    return L.tucker ? lk_loha_tucker_grads(a0, GP, s) : LYCO_OK;
}

template <typename CT> static int fs_bwd_body(const lk_loha_args *a0, const lk_device *, fs_carve &cv, cudaStream_t s) {
    fs_ctx c;
    c.a = *a0;
    c.Tt = a0->T * a0->geo.spout;
    c.R = a0->L.r1 * a0->L.r2;
    const lk_loha_args &a = c.a;
    const i64 O = a.L.O, IK = a.L.IK, R = c.R, Tt = c.Tt;
    const bool conv = a.geo.nd != 0;
    const bool want_sig = a.gsigma.p && !a.sigma_zero;
    const bool needD = a.gA1.p || a.gA2.p || want_sig;
    const bool needP = a.gB1.p || a.gB2.p || a.gT1.p || a.gT2.p;
    int rc = fs_prep<CT>(c, cv, s);
    if (rc) return rc;
    const lk_loha &L = c.a.L;
    float *h = needD ? (float *)fs_take(cv, Tt * R * 4) : NULL;
    float *gh = (needP || a.dx.p) ? (float *)fs_take(cv, Tt * R * 4) : NULL;
    float *GP = L.tucker && needP ? (float *)fs_take(cv, (L.r1 + L.r2) * IK * 4) : NULL;
    i64 zD, kD, zF, kF;
    fs_split(O, R, Tt, &zD, &kD);
    fs_split(R, IK, Tt, &zF, &kF);
    float *Dp = needD ? (float *)fs_take(cv, zD * O * R * 4) : NULL;
    float *Fp = needP ? (float *)fs_take(cv, zF * R * IK * 4) : NULL;
    double *sp = want_sig ? (double *)fs_take(cv, FS_SIG_BLOCKS * 8) : NULL;
    if (needD && (rc = fs_h<CT>(c, h, cv, s))) return rc;
    if (gh) { /* gh = dy·M̃ */
        const fs_dy<CT> d = {a.dy, a.geo, false};
        const fs_m<CT> mg = {L, c.w};
        if ((rc = fs_gemm_full<true, false>(d, mg, Tt, R, O, gh, cv, s, "loha fs gh"))) return rc;
    }
    if (!cv.base) return LYCO_OK;
    if (a.dx.p && !conv) { /* dx = gh·K */
        const fs_mat g = {gh, R, 1};
        const fs_k<CT> k = {L, false};
        const fs_edx ep = {a.dx, a.geo};
        if ((rc = fs_gemm<true, false>(g, k, ep, Tt, L.I, R, 1, R, s, "loha fs dx"))) return rc;
    } else if (a.dx.p) { /* the transposed conv: rows = input tokens, reduction over (κ, ab) */
        const fs_ghconv g = {gh, a.geo, R};
        const fs_kconv<CT> k = {L};
        const fs_edx ep = {a.dx, a.geo};
        if ((rc = fs_gemm<true, false>(g, k, ep, a.T * a.geo.spin, L.I, L.K * R, 1, L.K * R, s, "loha fs dx conv"))) return rc;
    }
    if (needD) { /* D = dyᵀ·h, then G_Ā_t and G_σs */
        const fs_dy<CT> dt = {a.dy, a.geo, true};
        const fs_mat bh = {h, R, 1};
        const fs_part ep = {Dp, O, R};
        if ((rc = fs_gemm<false, false>(dt, bh, ep, O, R, Tt, zD, kD, s, "loha fs D"))) return rc;
        if ((rc = fs_use_D<CT>(c, Dp, zD, sp, s))) return rc;
    }
    if (a.gsigma.p && !want_sig && (rc = lk_copy_round(&a.gsigma, NULL, L.ct, s))) return rc;
    if (needP) { /* F = ghᵀ·im2col(x), then G_B̄_t (Tucker: G_P_t and the core's chain) */
        const fs_mat gt = {gh, 1, R};
        const fs_x<CT> bx = {a.x, a.geo, L.K};
        const fs_part ep = {Fp, R, IK};
        if ((rc = fs_gemm<false, false>(gt, bx, ep, R, IK, Tt, zF, kF, s, "loha fs F"))) return rc;
        if ((rc = fs_use_F<CT>(c, a0, Fp, zF, GP, s))) return rc;
    }
    return LYCO_OK;
}

/* =============================================================================================
 * the tensor-core route (bf16 compute, linear layers): the same products through gemm.cu, over
 * K̃, M̃ (k_fs_kt, k_fs_mt) and h, gh materialised in the compute dtype
 * =========================================================================================== */

/* Row-major CT scratch (rows × cols, 16-byte rows) carved from cv. */
static lk_view fs_ct_take(fs_carve &cv, i64 rows, i64 cols, int32_t ct) {
    const i64 ld = (cols + 7) / 8 * 8;
    return lk_pitched_view(fs_take(cv, rows * ld * 2), rows, cols, ld, ct);
}

/* g = A·Bᵀ (M × N × K) on the tensor cores. keep == NULL: into out (any view), through fp32 K-chunk
   slabs summed in order (k_fs_sumz) when the output is thin (lk_gemm_split); keep != NULL: the
   slabs themselves (*z of them, M × N fp32 each) for a consumer that sums them. */
static int fs_tc_product(lk_gemm_args g, lk_view out, float **keep, int64_t *z, const lk_device *dev, fs_carve &cv,
                         cudaStream_t s) {
    int64_t nz, kc;
    lk_gemm_split(g.M, g.N, g.K, dev->sms, &nz, &kc);
    float *slabs = (keep || nz > 1) ? (float *)fs_take(cv, nz * g.M * g.N * 4) : NULL;
    if (keep) {
        *keep = slabs;
        *z = nz;
    }
    if (!cv.base) return LYCO_OK;
    g.out = slabs ? fs_f32_view(slabs, g.M, g.N) : out;
    if (nz > 1) {
        g.ksplit = (int32_t)nz;
        g.kchunk = kc;
    }
    int rc = lk_gemm(&g, dev, s);
    if (rc || keep || nz == 1) return rc;
    k_fs_sumz<<<fs_blocks(g.M * g.N), NT, 0, s>>>(slabs, nz, out);
    LK_LAUNCHED("loha fs tc sumz");
    return LYCO_OK;
}

/* w, K̃ and M̃ (either view may be left absent: want_k / want_m) */
template <typename CT> static int fs_tc_prep(fs_ctx &c, bool want_k, bool want_m, lk_view &Kt, lk_view &Mt, fs_carve &cv, cudaStream_t s) {
    const lk_loha &L = c.a.L;
    int rc = fs_prep<CT>(c, cv, s);
    memset(&Kt, 0, sizeof Kt);
    memset(&Mt, 0, sizeof Mt);
    if (want_k) Kt = fs_ct_take(cv, c.R, L.IK, L.ct);
    if (want_m) Mt = fs_ct_take(cv, L.O, c.R, L.ct);
    if (rc || !cv.base) return rc;
    if (want_k) {
        const i64 gx = cdiv(L.IK, NT);
        k_fs_kt<CT><<<dim3((unsigned)(gx < 64 ? gx : 64), (unsigned)c.R), NT, 0, s>>>(L, Kt);
        LK_LAUNCHED("loha fs tc K");
    }
    if (want_m) {
        k_fs_mt<CT><<<dim3(1, (unsigned)(L.O < FS_GRID_CAP ? L.O : FS_GRID_CAP)), NT, 0, s>>>(L, c.w, Mt);
        LK_LAUNCHED("loha fs tc M");
    }
    return LYCO_OK;
}

/* h = RN_CT(x·K̃ᵀ) (T × R) */
static int fs_tc_h(const fs_ctx &c, const lk_view &Kt, lk_view &h, const lk_device *dev, fs_carve &cv, cudaStream_t s) {
    const lk_loha &L = c.a.L;
    h = fs_ct_take(cv, c.Tt, c.R, L.ct);
    const lk_gemm_args g = lk_gemm_product(L.ct, lk_act_as_view(c.a.x, c.Tt, L.IK), 0, Kt, 0, c.Tt, c.R, L.IK);
    return fs_tc_product(g, h, NULL, NULL, dev, cv, s);
}

/* y = RN_CT(y0) + h·M̃ᵀ */
template <typename CT> static int fs_tc_fwd_body(const lk_loha_args *a0, const lk_device *dev, fs_carve &cv, cudaStream_t s) {
    fs_ctx c;
    c.a = *a0;
    c.Tt = a0->T;
    c.R = a0->L.r1 * a0->L.r2;
    const lk_loha &L = c.a.L;
    lk_view Kt, Mt, h;
    int rc = fs_tc_prep<CT>(c, true, true, Kt, Mt, cv, s);
    if (rc || (rc = fs_tc_h(c, Kt, h, dev, cv, s)) || !cv.base) return rc;
    lk_gemm_args g = lk_gemm_product(L.ct, h, 0, Mt, 0, c.Tt, L.O, c.R);
    g.base = c.a.y0.p ? lk_act_as_view(c.a.y0, c.Tt, L.O) : lk_view{};
    g.out = lk_act_as_view(c.a.y, c.Tt, L.O);
    return lk_gemm(&g, dev, s);
}

/* gh = RN_CT(dy·M̃), dx = gh·K̃, D = dyᵀ·h, F = ghᵀ·x, then fs_use_D / fs_use_F */
template <typename CT> static int fs_tc_bwd_body(const lk_loha_args *a0, const lk_device *dev, fs_carve &cv, cudaStream_t s) {
    fs_ctx c;
    c.a = *a0;
    c.Tt = a0->T;
    c.R = a0->L.r1 * a0->L.r2;
    const lk_loha_args &a = c.a;
    const lk_loha &L = a.L;
    const i64 T = c.Tt, R = c.R;
    const bool want_sig = a.gsigma.p && !a.sigma_zero;
    const bool needD = a.gA1.p || a.gA2.p || want_sig, needP = a.gB1.p || a.gB2.p;
    const bool needG = needP || a.dx.p;
    const lk_view dy = lk_act_as_view(a.dy, T, L.O), x = lk_act_as_view(a.x, T, L.IK);
    lk_view Kt, Mt, h, gh;
    memset(&h, 0, sizeof h);
    memset(&gh, 0, sizeof gh);
    int rc = fs_tc_prep<CT>(c, needD || a.dx.p, needG, Kt, Mt, cv, s);
    if (rc) return rc;
    double *sp = want_sig ? (double *)fs_take(cv, FS_SIG_BLOCKS * 8) : NULL;
    if (needD && (rc = fs_tc_h(c, Kt, h, dev, cv, s))) return rc;
    if (needG) {
        gh = fs_ct_take(cv, T, R, L.ct);
        if ((rc = fs_tc_product(lk_gemm_product(L.ct, dy, 0, Mt, 1, T, R, L.O), gh, NULL, NULL, dev, cv, s))) return rc;
    }
    float *Dp = NULL, *Fp = NULL;
    int64_t zD = 1, zF = 1;
    if (needD && (rc = fs_tc_product(lk_gemm_product(L.ct, dy, 1, h, 1, L.O, R, T), lk_view{}, &Dp, &zD, dev, cv, s))) return rc;
    if (needP && (rc = fs_tc_product(lk_gemm_product(L.ct, gh, 1, x, 1, R, L.IK, T), lk_view{}, &Fp, &zF, dev, cv, s))) return rc;
    if (!cv.base) return LYCO_OK;
    if (a.dx.p) {
        lk_gemm_args g = lk_gemm_product(L.ct, gh, 0, Kt, 1, T, L.IK, R);
        g.out = lk_act_as_view(a.dx, T, L.IK);
        if ((rc = lk_gemm(&g, dev, s))) return rc;
    }
    /* the slabs summed in place into the first (fixed order, fp64, rounded to fp32): the consumers
       then read one value per term instead of z (k_fs_ga / k_fs_gb took 39 / 42 µs over 4 slabs) */
    if (needD && zD > 1) {
        k_fs_sumz<<<fs_blocks(L.O * R), NT, 0, s>>>(Dp, zD, fs_f32_view(Dp, L.O, R));
        LK_LAUNCHED("loha fs tc sum D");
    }
    if (needP && zF > 1) {
        k_fs_sumz<<<fs_blocks(R * L.IK), NT, 0, s>>>(Fp, zF, fs_f32_view(Fp, R, L.IK));
        LK_LAUNCHED("loha fs tc sum F");
    }
    if (needD && (rc = fs_use_D<CT>(c, Dp, 1, sp, s))) return rc;
    if (a.gsigma.p && !want_sig && (rc = lk_copy_round(&a.gsigma, NULL, L.ct, s))) return rc;
    return needP ? fs_use_F<CT>(c, a0, Fp, 1, NULL, s) : LYCO_OK;
}

typedef int (*fs_body)(const lk_loha_args *a, const lk_device *dev, fs_carve &cv, cudaStream_t s);

/* sizing pass, one stream-ordered allocation, the real pass */
static int fs_run(const lk_loha_args *a, const lk_device *dev, cudaStream_t s, fs_body body) {
    fs_carve cv = {0, NULL};
    int rc = body(a, dev, cv, s);
    if (rc) return rc;
    const size_t bytes = cv.off;
    cv.off = 0;
    if ((rc = lk_scratch_alloc((void **)&cv.base, bytes, s))) return rc;
    rc = body(a, dev, cv, s);
    int rf = lk_scratch_free(cv.base, s);
    return rc ? rc : rf;
}

extern "C" int lk_loha_fs_wanted(const lk_loha_args *a) {
    const lk_loha *L = &a->L;
    const double R = (double)L->r1 * (double)L->r2, IK = (double)L->IK, O = (double)L->O;
    const double T = (double)a->T * (double)a->geo.spout, tiles = (double)cdiv(a->T * a->geo.spout, 64);
    return T * R * (IK + O) <= T * O * IK + 2.0 * tiles * O * IK * (double)(L->r1 + L->r2);
}

extern "C" int lk_loha_fs_bypass_fwd(const lk_loha_args *a, void *stream) {
    const lk_loha &L = a->L;
    if (a->T * a->geo.spout == 0 || L.O == 0) return LYCO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    switch (L.ct) {
    case DT_BF16: return fs_run(a, NULL, s, fs_fwd_body<bf16_t>);
    case DT_F16: return fs_run(a, NULL, s, fs_fwd_body<f16_t>);
    default: return fs_run(a, NULL, s, fs_fwd_body<float>);
    }
}

extern "C" int lk_loha_fs_bypass_bwd(const lk_loha_args *a, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    switch (a->L.ct) {
    case DT_BF16: return fs_run(a, NULL, s, fs_bwd_body<bf16_t>);
    case DT_F16: return fs_run(a, NULL, s, fs_bwd_body<f16_t>);
    default: return fs_run(a, NULL, s, fs_bwd_body<float>);
    }
}

/* LYCO_CUDA_LOHA_FS_TC: 0 = never, 1 = wherever it applies (the tests' way to pin it), unset = by
   lk_loha_fs_tc_wanted's rule. */
static int fs_tc_env() {
    const char *e = getenv("LYCO_CUDA_LOHA_FS_TC");
    return e && e[0] == '0' ? 0 : e && e[0] == '1' ? 1 : -1;
}

/* The tensor-core route applies: bf16 compute (fp16's range would underflow K̃ and M̃ — its rows
   keep the dense route), a linear layer, plain LoHa, tokens, rows and columns present, every
   product within gemm.cu's limits, not forced off. */
static bool fs_tc_applies(const lk_loha_args *a, const lk_device *dev) {
    const lk_loha &L = a->L;
    if (a->legacy || lk_loha_tc_off() || fs_tc_env() == 0 || L.ct != DT_BF16 || a->geo.nd != 0 || L.tucker) return false;
    if (L.r1 < 1 || L.r2 < 1 || a->T < 1 || L.O < 1 || L.IK < 1) return false;
    const i64 R = L.r1 * L.r2;
    if (R > 65535) return false; /* k_fs_kt's grid y */
    const lk_view x = lk_act_as_view(a->x, a->T, L.IK), Kt = lk_pitched_view(NULL, R, L.IK, L.IK, L.ct);
    const lk_view Mt = lk_pitched_view(NULL, L.O, R, R, L.ct), h = lk_pitched_view(NULL, a->T, R, R, L.ct);
    const lk_gemm_args g[] = {lk_gemm_product(L.ct, x, 0, Kt, 0, a->T, R, L.IK), lk_gemm_product(L.ct, h, 0, Mt, 0, a->T, L.O, R),
                              lk_gemm_product(L.ct, h, 0, Mt, 1, a->T, R, L.O), lk_gemm_product(L.ct, h, 1, h, 1, L.O, R, a->T)};
    for (int i = 0; i < 4; i++)
        if (!lk_gemm_fits(&g[i], dev)) return false;
    return true;
}

/* Rule: both routes run on the tensor cores; this one costs 2·T·R·(I + O) flops per product pair
   against the dense route's 2·T·O·I (loha_tc.cu), plus its thin products' K splits and the
   materialised h: taken when it is at least 2× fewer flops, R·(I + O)·2 ≤ O·I (4096², r₁ = r₂ = 16:
   R = 256 ≤ 1024). */
extern "C" int lk_loha_fs_tc_wanted(const lk_loha_args *a, const lk_device *dev) {
    if (!fs_tc_applies(a, dev)) return 0;
    const lk_loha &L = a->L;
    const double R = (double)L.r1 * (double)L.r2;
    return fs_tc_env() == 1 || 2.0 * R * ((double)L.IK + (double)L.O) <= (double)L.O * (double)L.IK;
}

extern "C" int lk_loha_fs_tc_bypass_fwd(const lk_loha_args *a, const lk_device *dev, void *stream) {
    return fs_run(a, dev, (cudaStream_t)stream, fs_tc_fwd_body<bf16_t>);
}

extern "C" int lk_loha_fs_tc_bypass_bwd(const lk_loha_args *a, const lk_device *dev, void *stream) {
    return fs_run(a, dev, (cudaStream_t)stream, fs_tc_bwd_body<bf16_t>);
}
