/*
 * lokr_bypass.cu — LoKr bypass (ALGORITHMS.md §2.3) on the GPU, linear and conv (nd = 1..3, any
 * stride / padding / dilation, W2 full, plain or Tucker: the halves are formed first, see
 * lokr_common.cuh), activations with any strides (kern_glora.h's lk_act) and alignment.
 * ΔW is never built. Linear is the conv with no spatial dims (sp = 1, K = 1).
 * Linear layers with a plain low-rank W2 (w2_a·w2_b) take lokr_tc.cu (16-bit compute dtype: the
 * LoRA tensor-core kernels of lowrank.cu) or else lokr_lowrank.cu (per-token rank-r contractions
 * in fp64, no Z scratch) unless LYCO_CUDA_LOKR_LEGACY=1 or their limits decline
 * (LYCO_CUDA_LOKR_NO_TC=1 skips lokr_tc.cu only); this file's path is the general (and the
 * GPU-verified legacy) one.
 *
 *   Z[n, p, j, s']  = Σ_{q,κ} W2[j, q·K+κ]·X[n, p·d+q, s'·σ − π + κ·δ]    (the conv of each of the c
 *                                                                         input-channel groups with W2)
 *   y[n, i·b+j, s'] = RN_CT(y0) + Σ_p W̃1[i,p]·Z[n, p, j, s'],  W̃1 = RN_f32(s·m·σs·W1)
 * backward (dy rounded to CT):
 *   GZ[n, p, j, s'] = Σ_i W̃1[i,p]·dy[n, i·b+j, s']
 *   dx[n, p·d+q, s] = Σ_{j,κ} GZ[n, p, j, s'(s, κ)]·W2[j, q·K+κ]     (transposed conv)
 *   G_W1[i,p]       = s·m·σs·Σ_{n,j,s'} dy[n, i·b+j, s']·Z[n, p, j, s']
 *   G_W2[j, q·K+κ]  = Σ_{n,p,s'} GZ[n, p, j, s']·X[n, p·d+q, s'·σ − π + κ·δ]
 *   G_σs            = s·m·Σ (W1ᵀ·dy)·(X ⊛ W2) in fp64 from the fp64 halves (the sum cancels; as
 *                     src/cpu/lokr.c), only when asked
 *   dy0 = RN(dy) (0 when y was Δ alone), then the factor chain (lokr_common.cuh).
 *
 * Work split: every product above except the conv dx is one call of a tiled fp32 GEMM
 * (k_lokr_gemm: 64×64 tiles, k steps of 16 in shared memory, 4×4 FFMA per thread) whose operands
 * are index maps: im2col of x (implicit, never stored; 0 in the padding), dy, the Z-shaped
 * scratch in either orientation, W1/W2 — and whose epilogue writes Z, GZ, y (+ y0), dx (linear)
 * or split-K partials. G_W1 (a×c) and G_W2 (b×dK) are split over their reduction (tokens and
 * positions) into fp32 partials summed in a fixed order in fp64 (deterministic, no atomics;
 * splits depend on the shape only). Conv dx: one thread per element of dx (transposed conv).
 * Extra memory (scratch, fp32): Z N·c·b·sp_out (+ GZ the same, backward), partials
 * z₁·a·c + z₂·b·dK, G_σs partials (fp64, one per block), the halves (lokr_common.cuh).
 */
#include "cuda/lokr_common.cuh"

struct lokr_byp {
    int32_t ct;
    i64 N, a, b, c, d, K, dK, O, I;
    lk_geo g;
    const float *W2f, *W1s;
    const double *W1d, *W2d;
};


/* input position of output position so and kernel offset kap; false in the padding */
__device__ __forceinline__ bool in_pos(const lk_geo &g, i64 so, i64 kap, i64 &si) {
    i64 idx = 0, mult = 1;
    for (int dd = g.nd - 1; dd >= 0; dd--) {
        const i64 od = so % g.out[dd], kd = kap % g.k[dd];
        so /= g.out[dd];
        kap /= g.k[dd];
        const i64 ii = od * g.st[dd] - g.pad[dd] + kd * g.dil[dd];
        if (ii < 0 || ii >= g.in[dd]) return false;
        idx += ii * mult;
        mult *= g.in[dd];
    }
    si = idx;
    return true;
}

/* output position that reads input position si through kernel offset kap; false if none */
__device__ __forceinline__ bool out_pos(const lk_geo &g, i64 si, i64 kap, i64 &so) {
    i64 idx = 0, mult = 1;
    for (int dd = g.nd - 1; dd >= 0; dd--) {
        const i64 id = si % g.in[dd], kd = kap % g.k[dd];
        si /= g.in[dd];
        kap /= g.k[dd];
        const i64 t = id + g.pad[dd] - kd * g.dil[dd];
        if (t < 0 || t % g.st[dd] != 0 || t / g.st[dd] >= g.out[dd]) return false;
        idx += (t / g.st[dd]) * mult;
        mult *= g.out[dd];
    }
    so = idx;
    return true;
}

#define GRID_STRIDE(e, total) for (i64 e = (i64)blockIdx.x * NT + threadIdx.x; e < (total); e += (i64)gridDim.x * NT)

/* ---- index maps of the Z-shaped scratch ([n][p][j][s'], Z and GZ) ----
   column n' = (n·b + j)·sp_out + s' of the token-side operands; row m = (n·c + p)·sp_out + s' of the
   group-side operands */
__device__ __forceinline__ i64 zt_index(const lokr_byp &B, i64 p, i64 np) {
    const i64 bs = B.b * B.g.spout, n = np / bs;
    return (n * B.c + p) * bs + np % bs;
}
__device__ __forceinline__ i64 zm_index(const lokr_byp &B, i64 j, i64 m) {
    const i64 so = B.g.spout;
    return ((m / so) * B.b + j) * so + m % so;
}

/* ---- GEMM operands: ld(r, c) of an M×K (A) or K×N (B) operand; ep: st(m, n, z, v) ---- */
struct op_mat { /* base[r·rs + c·cs] (fp32 scratch) */
    const float *p;
    i64 rs, cs;
    __device__ float ld(i64 r, i64 c) const { return p[r * rs + c * cs]; }
};
struct op_x { /* im2col of x: row (n·c + p)·sp_out + s', column q·K + κ; RN_CT; 0 in the padding */
    lokr_byp B;
    lk_act x;
    __device__ float ld(i64 m, i64 k) const {
        const i64 so = B.g.spout, ncp = m / so, n = ncp / B.c, p = ncp % B.c, q = k / B.K;
        i64 si;
        if (!in_pos(B.g, m % so, k % B.K, si)) return 0.0f;
        return round_to(act_ld(x, n, p * B.d + q, si), B.ct);
    }
};
struct op_dy { /* dy as a×(N·b·sp_out): (i, n') → RN_CT(dy[n, i·b+j, s']) */
    lokr_byp B;
    lk_act dy;
    __device__ float ld(i64 i, i64 np) const {
        const i64 so = B.g.spout, bs = B.b * so, n = np / bs, r = np % bs;
        return round_to(act_ld(dy, n, i * B.b + r / so, r % so), B.ct);
    }
};
template <bool TR> struct op_zt { /* Z as c×(N·b·sp_out) (TR: its transpose) */
    lokr_byp B;
    const float *z;
    __device__ float ld(i64 r, i64 c) const { return TR ? z[zt_index(B, c, r)] : z[zt_index(B, r, c)]; }
};
struct op_zm { /* GZ as b×(N·c·sp_out): (j, m) */
    lokr_byp B;
    const float *z;
    __device__ float ld(i64 j, i64 m) const { return z[zm_index(B, j, m)]; }
};
struct ep_zm { /* Z[(m, j)] = v */
    lokr_byp B;
    float *z;
    __device__ void st(i64 m, i64 j, i64, float v) const { z[zm_index(B, j, m)] = v; }
};
struct ep_zt { /* GZ[(p, n')] = v */
    lokr_byp B;
    float *z;
    __device__ void st(i64 p, i64 np, i64, float v) const { z[zt_index(B, p, np)] = v; }
};
struct ep_y { /* y[n, i·b+j, s'] = RN_CT(y0) + v */
    lokr_byp B;
    lk_act y0, y;
    __device__ void st(i64 i, i64 np, i64, float v) const {
        const i64 so = B.g.spout, bs = B.b * so, n = np / bs, r = np % bs, ch = i * B.b + r / so, s = r % so;
        const float base = y0.p ? round_to(act_ld(y0, n, ch, s), B.ct) : 0.0f;
        act_st(y, n, ch, s, base + v);
    }
};
struct ep_dx { /* linear: dx[t, p·d+q] = v, row m = t·c + p */
    lokr_byp B;
    lk_act dx;
    __device__ void st(i64 m, i64 q, i64, float v) const { act_st(dx, m / B.c, (m % B.c) * B.d + q, 0, v); }
};
struct ep_part { /* split-K partials part[(z·M + m)·N + n] */
    float *part;
    i64 M, N;
    __device__ void st(i64 m, i64 n, i64 z, float v) const { part[(z * M + m) * N + n] = v; }
};

/* C = A·B (M×N, fp32 FFMA), 64×64 tiles (blockIdx.x over the tiles), k steps of 16 from
   [blockIdx.y·kper, min(Kd, (blockIdx.y+1)·kper)); each thread owns a 4×4 strided sub-tile.
   A is staged k-fastest, B n-fastest (the contiguous axis of every operand used here). */
#define GT 64
#define GK 16
template <class OA, class OB, class EP>
__global__ __launch_bounds__(NT) void k_lokr_gemm(OA A, OB Bo, EP E, i64 M, i64 N, i64 Kd, i64 kper) {
    __shared__ float As[GK][GT + 1];
    __shared__ float Bs[GK][GT];
    const i64 tn = cdiv(N, GT), m0 = ((i64)blockIdx.x / tn) * GT, n0 = ((i64)blockIdx.x % tn) * GT;
    const i64 kb = (i64)blockIdx.y * kper, ke = kb + kper < Kd ? kb + kper : Kd;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4];
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
        for (int v = 0; v < 4; v++) acc[u][v] = 0.0f;
    for (i64 k0 = kb; k0 < ke; k0 += GK) {
#pragma unroll
        for (int l = 0; l < GT * GK / NT; l++) {
            const int idx = threadIdx.x + l * NT;
            const int am = idx / GK, ak = idx % GK, bn = idx % GT, bk = idx / GT;
            const i64 m = m0 + am, ka = k0 + ak, n = n0 + bn, kbb = k0 + bk;
            As[ak][am] = (m < M && ka < ke) ? A.ld(m, ka) : 0.0f;
            Bs[bk][bn] = (n < N && kbb < ke) ? Bo.ld(kbb, n) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                a[u] = As[kk][ty + 16 * u];
                b[u] = Bs[kk][tx + 16 * u];
            }
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int v = 0; v < 4; v++) acc[u][v] = fmaf(a[u], b[v], acc[u][v]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
        for (int v = 0; v < 4; v++) {
            const i64 m = m0 + ty + 16 * u, n = n0 + tx + 16 * v;
            if (m < M && n < N) E.st(m, n, blockIdx.y, acc[u][v]);
        }
}

/* dx (transposed conv of GZ with W2) */
__global__ __launch_bounds__(NT) void k_lokr_bdx(lokr_byp B, lk_act dx, const float *GZ) {
    const i64 si_n = B.g.spin, so_n = B.g.spout, total = B.N * B.I * si_n;
    GRID_STRIDE(e, total) {
        const i64 si = e % si_n, ch = (e / si_n) % B.I, n = e / (si_n * B.I);
        const i64 p = ch / B.d, q = ch % B.d;
        float acc = 0.0f;
        for (i64 k = 0; k < B.K; k++) {
            i64 so;
            if (!out_pos(B.g, si, k, so)) continue;
            const float *gz = GZ + (n * B.c + p) * B.b * so_n + so;
            for (i64 j = 0; j < B.b; j++) acc = fmaf(gz[j * so_n], B.W2f[j * B.dK + q * B.K + k], acc);
        }
        act_st(dx, n, ch, si, acc);
    }
}

/* G_σs partials (fp64, one per block): Σ (W1dᵀ·dy)·(X ⊛ W2d) */
__global__ __launch_bounds__(NT) void k_lokr_bsig(lokr_byp B, lk_act x, lk_act dy, double *parts) {
    __shared__ double red[NT];
    const i64 so_n = B.g.spout, total = B.N * B.c * B.b * so_n;
    double acc = 0.0;
    GRID_STRIDE(e, total) {
        const i64 so = e % so_n, j = (e / so_n) % B.b, p = (e / (so_n * B.b)) % B.c, n = e / (so_n * B.b * B.c);
        double h = 0.0, gd = 0.0;
        for (i64 q = 0; q < B.d; q++)
            for (i64 k = 0; k < B.K; k++) {
                i64 si;
                if (!in_pos(B.g, so, k, si)) continue;
                h += B.W2d[j * B.dK + q * B.K + k] * (double)round_to(act_ld(x, n, p * B.d + q, si), B.ct);
            }
        for (i64 i = 0; i < B.a; i++) gd += B.W1d[i * B.c + p] * (double)round_to(act_ld(dy, n, i * B.b + j, so), B.ct);
        acc += h * gd;
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int k = 0; k < NT; k++) t += red[k];
        parts[blockIdx.x] = t;
    }
}

/* dst = RN_dst(RN_CT(src)), or 0 (src absent) — N × C × sp activations */
__global__ __launch_bounds__(NT) void k_lokr_act_copy(lk_act dst, lk_act src, i64 N, i64 C, i64 sp, int ct) {
    const i64 total = N * C * sp;
    GRID_STRIDE(e, total) {
        const i64 s = e % sp, ch = (e / sp) % C, n = e / (sp * C);
        act_st(dst, n, ch, s, src.p ? round_to(act_ld(src, n, ch, s), ct) : 0.0f);
    }
}

/* ---- host ---- */
#define GRID_CAP 65535
#define SIG_BLOCKS 1024

static unsigned grid_of(i64 total) {
    i64 g = cdiv(total, NT);
    if (g > GRID_CAP) g = GRID_CAP;
    return (unsigned)(g < 1 ? 1 : g);
}

static lokr_byp byp_of(const lk_lokr_args *a, const lokr_halves *h) {
    lokr_byp B;
    memset(&B, 0, sizeof B);
    B.ct = a->ct;
    B.N = a->T;
    B.a = a->a;
    B.b = a->b;
    B.c = a->c;
    B.d = a->d;
    B.K = a->K;
    B.dK = a->d * a->K;
    B.O = a->O;
    B.I = a->I;
    B.g = a->geo;
    if (B.g.nd == 0) B.g.spin = B.g.spout = 1;
    B.W2f = h->W2f;
    B.W1s = h->W1s;
    B.W1d = h->W1d;
    B.W2d = h->W2d;
    return B;
}

static i64 z_size(const lk_lokr_args *a) { return a->T * a->c * a->b * (a->geo.nd ? a->geo.spout : 1); }

/* split of a K-reduction so that about 512 blocks run (each split ≥ 256 long, a multiple of GK);
   a function of the shape only (deterministic) */
static void ksplit(i64 M, i64 N, i64 Kd, i64 *z, i64 *kper) {
    if (Kd <= 0) {
        *z = 1;
        *kper = GK;
        return;
    }
    i64 zz = cdiv(512, cdiv(M, GT) * cdiv(N, GT)), maxz = cdiv(Kd, 256);
    if (zz > maxz) zz = maxz;
    if (zz > 65535) zz = 65535;
    if (zz < 1) zz = 1;
    *kper = cdiv(cdiv(Kd, zz), GK) * GK;
    *z = cdiv(Kd, *kper);
}

template <class OA, class OB, class EP>
static int gemm(const OA &A, const OB &B, const EP &E, i64 M, i64 N, i64 Kd, i64 z, i64 kper, cudaStream_t s, const char *what) {
    const i64 tiles = cdiv(M, GT) * cdiv(N, GT);
    if (tiles == 0) return LYCO_OK;
    if (tiles > 2147483647LL || z > 65535)
        return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda lokr: %s grid (%lld tiles × %lld splits) exceeds the launch limits", what,
                         (long long)tiles, (long long)z);
    k_lokr_gemm<OA, OB, EP><<<dim3((unsigned)tiles, (unsigned)z), NT, 0, s>>>(A, B, E, M, N, Kd, kper);
    LK_LAUNCHED(what);
    return LYCO_OK;
}

/* Z = im2col(x)·W2ᵀ */
static int run_z(const lk_lokr_args *a, const lokr_byp &B, float *Z, cudaStream_t s) {
    const op_x ax = {B, a->x};
    const op_mat w2 = {B.W2f, 1, B.dK};
    const ep_zm ez = {B, Z};
    return gemm(ax, w2, ez, B.N * B.c * B.g.spout, B.b, B.dK, 1, B.dK, s, "lokr_gemm_z");
}

static int fwd_body(const lk_lokr_args *a, lk_carve &cv, cudaStream_t s) {
    float *Z = (float *)carve_take(cv, (size_t)z_size(a) * 4);
    lokr_halves h;
    int rc = lokr_halves_build(a, cv, &h, true, s);
    if (rc || !cv.base) return rc;
    const lokr_byp B = byp_of(a, &h);
    if ((rc = run_z(a, B, Z, s))) return rc;
    const op_mat w1 = {B.W1s, B.c, 1};
    const op_zt<false> zt = {B, Z};
    const ep_y ey = {B, a->y0, a->y};
    return gemm(w1, zt, ey, B.a, B.N * B.b * B.g.spout, B.c, 1, B.c, s, "lokr_gemm_y");
}

static int bwd_body(const lk_lokr_args *a, lk_carve &cv, cudaStream_t s) {
    const i64 ac = a->a * a->c, dK = a->d * a->K, n2 = a->b * dK, spo = a->geo.nd ? a->geo.spout : 1, spi = a->geo.nd ? a->geo.spin : 1;
    const i64 Kw1 = a->T * a->b * spo, Kw2 = a->T * a->c * spo;
    i64 z1, k1, z2, k2;
    ksplit(a->a, a->c, Kw1, &z1, &k1);
    ksplit(a->b, dK, Kw2, &z2, &k2);
    const bool need1 = a->gw1.p || a->gw1a.p || a->gw1b.p, need2 = a->gw2.p || a->gw2a.p || a->gw2b.p || a->gt2.p;
    const bool needGZ = need2 || a->dx.p;
    float *Z = (float *)carve_take(cv, need1 ? (size_t)z_size(a) * 4 : 0);
    float *GZ = (float *)carve_take(cv, needGZ ? (size_t)z_size(a) * 4 : 0);
    float *pw1 = (float *)carve_take(cv, need1 ? (size_t)(z1 * ac) * 4 : 0);
    float *pw2 = (float *)carve_take(cv, need2 ? (size_t)(z2 * n2) * 4 : 0);
    double *psig = (double *)carve_take(cv, a->gsigma.p ? (size_t)SIG_BLOCKS * 8 : 0);
    lokr_grads gr;
    lokr_grads_carve(a, cv, &gr);
    lokr_halves h;
    int rc = lokr_halves_build(a, cv, &h, true, s);
    if (rc || !cv.base) return rc;
    const lokr_byp B = byp_of(a, &h);
    const op_dy gdy = {B, a->dy};
    if (a->dy0.p && (rc = lokr_dy0_copy(a, s))) return rc;
    if (need1) { /* G_W1 (unscaled) = Σ dy·Zᵀ */
        const op_zt<true> zt = {B, Z};
        const ep_part ep = {pw1, a->a, a->c};
        if ((rc = run_z(a, B, Z, s)) || (rc = gemm(gdy, zt, ep, a->a, a->c, Kw1, z1, k1, s, "lokr_gemm_gw1"))) return rc;
    }
    if (needGZ) { /* GZ = W̃1ᵀ·dy */
        const op_mat w1t = {B.W1s, 1, B.c};
        const ep_zt ep = {B, GZ};
        if ((rc = gemm(w1t, gdy, ep, B.c, B.N * B.b * spo, B.a, 1, B.a, s, "lokr_gemm_gz"))) return rc;
    }
    if (a->dx.p && a->geo.nd == 0) { /* dx = GZ·W2 */
        const op_mat gz = {GZ, B.b, 1}, w2 = {B.W2f, B.dK, 1};
        const ep_dx ep = {B, a->dx};
        if ((rc = gemm(gz, w2, ep, B.N * B.c, B.d, B.b, 1, B.b, s, "lokr_gemm_dx"))) return rc;
    } else if (a->dx.p) {
        k_lokr_bdx<<<grid_of(a->T * a->I * spi), NT, 0, s>>>(B, a->dx, GZ);
        LK_LAUNCHED("lokr_bdx");
    }
    if (need2) { /* G_W2 = GZᵀ·im2col(x) */
        const op_zm gz = {B, GZ};
        const op_x ax = {B, a->x};
        const ep_part ep = {pw2, a->b, dK};
        if ((rc = gemm(gz, ax, ep, a->b, dK, Kw2, z2, k2, s, "lokr_gemm_gw2"))) return rc;
    }
    if (a->gsigma.p) {
        i64 nb = cdiv(z_size(a), NT);
        if (nb > SIG_BLOCKS) nb = SIG_BLOCKS;
        if (nb < 1) nb = 1;
        k_lokr_bsig<<<(unsigned)nb, NT, 0, s>>>(B, a->x, a->dy, psig);
        LK_LAUNCHED("lokr_bsig");
        if ((rc = lokr_sum_store(psig, nb, a->gsigma, a->s * a->m, s))) return rc;
    }
    return lokr_chain(a, &h, &gr, need1 ? pw1 : NULL, z1, need2 ? pw2 : NULL, z2, a->s * a->m, a->sigma, s);
}

int lokr_dy0_copy(const lk_lokr_args *a, cudaStream_t s) {
    const i64 spo = a->geo.nd ? a->geo.spout : 1;
    lk_act none;
    memset(&none, 0, sizeof none);
    k_lokr_act_copy<<<grid_of(a->T * a->O * spo), NT, 0, s>>>(a->dy0, a->dy0_zero ? none : a->dy, a->T, a->O, spo, a->ct);
    LK_LAUNCHED("lokr_act_copy");
    return LYCO_OK;
}

static int with_scratch(const lk_lokr_args *a, cudaStream_t s, bool fwd) {
    lk_carve cv = {0, NULL};
    int rc = fwd ? fwd_body(a, cv, s) : bwd_body(a, cv, s); /* sizing pass */
    if (rc) return rc;
    size_t bytes = cv.off;
    cv.off = 0;
    if ((rc = lk_scratch_alloc((void **)&cv.base, bytes, s))) return rc;
    rc = fwd ? fwd_body(a, cv, s) : bwd_body(a, cv, s);
    int rf = lk_scratch_free(cv.base, s);
    return rc ? rc : rf;
}

extern "C" int lk_lokr_bypass_fwd(const lk_lokr_args *a, const lk_device *dev, void *stream) {
    if (a->T == 0) return LYCO_OK;
    if (lokr_tc_fwd_ok(a, dev)) return lokr_tc_bypass_fwd(a, dev, (cudaStream_t)stream); /* lokr_tc.cu */
    if (lokr_lr_fwd_ok(a)) return lokr_lr_bypass_fwd(a, (cudaStream_t)stream); /* lokr_lowrank.cu */
    return with_scratch(a, (cudaStream_t)stream, true);
}

extern "C" int lk_lokr_bypass_bwd(const lk_lokr_args *a, const lk_device *dev, void *stream) {
    if (a->a * a->c > 2147483647LL) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda lokr: a·c exceeds the grid limit");
    if (a->T > 0 && lokr_tc_bwd_ok(a, dev)) return lokr_tc_bypass_bwd(a, dev, (cudaStream_t)stream); /* lokr_tc.cu */
    if (lokr_lr_bwd_ok(a)) return lokr_lr_bypass_bwd(a, (cudaStream_t)stream); /* lokr_lowrank.cu */
    return with_scratch(a, (cudaStream_t)stream, false);
}
