/*
 * lokr_halves.cu — LoKr's halves and gradient chains on the GPU (ALGORITHMS.md §2.3; the
 * formulas are in lokr_common.cuh). Everything here is small next to ΔW or the activations:
 * one thread per output element, fp64 accumulation in the CPU path's summation order, so the
 * halves match src/cpu/lokr.c to fp64 rounding — except products and partial sums with few
 * outputs and long sums (warp_per_output), which take one warp per output element (32 strided
 * fp64 runs and a fixed xor tree: deterministic, the same to fp64 rounding). Shapes: W1 a×c, W2 b×dK (dK = d·K), factors
 * w1_a a×r, w1_b r×c, w2_a b×r (Tucker r×b), w2_b r×dK (Tucker r×d), t2 r×r×K.
 * Extra memory (scratch, carved by the caller): the fp64 factor copies, W1d, W2d, W2f (and for
 * bypass W1s), Tucker's P; gradients: G1 a·c, G2 b·dK, G_P r·dK doubles.
 */
#include "cuda/lokr_common.cuh"

static unsigned blocks_for(i64 n) { return (unsigned)(n > 0 ? cdiv(n, NT) : 1); }

/* One warp per output (the _warp kernels) when the outputs are too few to fill the GPU one thread
   each and every output sums a long run (≥ 64 terms); one thread per output otherwise. */
static bool warp_per_output(i64 outputs, i64 terms) { return outputs < 16384 && terms >= 64; }

/* Σ over the warp's lanes in a fixed xor-tree order */
__device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* dst[r·cols + c] = RN_CT(v[r, c]) in fp64 */
__global__ __launch_bounds__(NT) void k_lokr_load(lk_view v, i64 rows, i64 cols, int ct, double *dst) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= rows * cols) return;
    dst[idx] = (double)round_to(vload(v, idx / cols, idx % cols), ct);
}

/* C[M×N] = Σ_k A[i·ai + k·ak]·B[k·bk + j·bj] (fp64) into outd, or rounded once into the view outv */
__global__ __launch_bounds__(NT) void k_lokr_dmm(i64 M, i64 N, i64 Kd, const double *A, i64 ai, i64 ak, const double *B,
                                                 i64 bk, i64 bj, double *outd, lk_view outv) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= M * N) return;
    const i64 i = idx / N, j = idx % N;
    double acc = 0.0;
    for (i64 k = 0; k < Kd; k++) acc += A[i * ai + k * ak] * B[k * bk + j * bj];
    if (outd) outd[idx] = acc;
    else vstore(outv, i, j, (float)acc);
}

/* The same with one warp per output element, for few outputs with long sums (G_W2·w2_bᵀ at
   512×16 outputs of 512 terms took 85 µs one thread per element on the H200): lane l sums
   k ≡ l (mod 32) in order, then a fixed xor tree (deterministic; fp64 throughout). */
__global__ __launch_bounds__(NT) void k_lokr_dmm_warp(i64 M, i64 N, i64 Kd, const double *A, i64 ai, i64 ak, const double *B,
                                                      i64 bk, i64 bj, double *outd, lk_view outv) {
    const i64 w = ((i64)blockIdx.x * NT + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (w >= M * N) return; /* warp-uniform */
    const i64 i = w / N, j = w % N;
    double acc = 0.0;
    for (i64 k = lane; k < Kd; k += 32) acc += A[i * ai + k * ak] * B[k * bk + j * bj];
    acc = warp_sum_f64(acc);
    if (lane != 0) return;
    if (outd) outd[w] = acc;
    else vstore(outv, i, j, (float)acc);
}

/* Tucker: P[l, q·K+κ] = Σ_m t2[(l·r+m)·K+κ]·w2b[m·d+q] */
__global__ __launch_bounds__(NT) void k_lokr_tucker_p(i64 r, i64 d, i64 K, const double *t2, const double *w2b, double *P) {
    const i64 dK = d * K, idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= r * dK) return;
    const i64 l = idx / dK, q = (idx % dK) / K, k = idx % K;
    double acc = 0.0;
    for (i64 m = 0; m < r; m++) acc += t2[(l * r + m) * K + k] * w2b[m * d + q];
    P[idx] = acc;
}

/* W2f = RN_f32(W2d) */
__global__ __launch_bounds__(NT) void k_lokr_w2f(const double *W2d, i64 n, float *W2f) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= n) return;
    W2f[idx] = (float)W2d[idx];
}

/* W1s = RN_f32(W1d·sm·σs) */
__global__ __launch_bounds__(NT) void k_lokr_w1s(const double *W1d, i64 n, double sm, lk_view sigma, int ct, float *W1s) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= n) return;
    W1s[idx] = (float)(W1d[idx] * (sm * (double)lokr_sigma(sigma, ct)));
}

/* G[idx] = scale·σs·Σ_z parts[z·n + idx] (sum in z order, fp64) */
__global__ __launch_bounds__(NT) void k_lokr_fin(const float *parts, i64 z, i64 n, double scale, lk_view sigma, int ct, double *G) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= n) return;
    double acc = 0.0;
    for (i64 k = 0; k < z; k++) acc += (double)parts[k * n + idx];
    G[idx] = acc * (scale * (double)lokr_sigma(sigma, ct));
}

/* The same with one warp per element, for few elements with many partials (the 8×8 W1 of the
   bench's LoKr merge backward: 64 threads summing thousands of partials took 27.5 µs) */
__global__ __launch_bounds__(NT) void k_lokr_fin_warp(const float *parts, i64 z, i64 n, double scale, lk_view sigma, int ct, double *G) {
    const i64 w = ((i64)blockIdx.x * NT + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (w >= n) return; /* warp-uniform */
    double acc = 0.0;
    for (i64 k = lane; k < z; k += 32) acc += (double)parts[k * n + w];
    acc = warp_sum_f64(acc);
    if (lane == 0) G[w] = acc * (scale * (double)lokr_sigma(sigma, ct));
}

/* out[i, j] = RN(G[i·cols + j]) */
__global__ __launch_bounds__(NT) void k_lokr_store(const double *G, i64 rows, i64 cols, lk_view out) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= rows * cols) return;
    vstore(out, idx / cols, idx % cols, (float)G[idx]);
}

/* G_t2[l, m·K+κ] = Σ_q GP[l·dK + q·K+κ]·w2b[m·d+q] */
__global__ __launch_bounds__(NT) void k_lokr_gt2(i64 r, i64 d, i64 K, const double *GP, const double *w2b, lk_view out) {
    const i64 dK = d * K, idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= r * r * K) return;
    const i64 l = idx / (r * K), m = (idx % (r * K)) / K, k = idx % K;
    double acc = 0.0;
    for (i64 q = 0; q < d; q++) acc += GP[l * dK + q * K + k] * w2b[m * d + q];
    vstore(out, l, m * K + k, (float)acc);
}

/* Tucker G_w2b[m, q] = Σ_{l,κ} t2[(l·r+m)·K+κ]·GP[l·dK + q·K+κ] */
__global__ __launch_bounds__(NT) void k_lokr_gw2b_t(i64 r, i64 d, i64 K, const double *t2, const double *GP, lk_view out) {
    const i64 dK = d * K, idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= r * d) return;
    const i64 m = idx / d, q = idx % d;
    double acc = 0.0;
    for (i64 l = 0; l < r; l++)
        for (i64 k = 0; k < K; k++) acc += t2[(l * r + m) * K + k] * GP[l * dK + q * K + k];
    vstore(out, m, q, (float)acc);
}

/* out = scale·Σ parts (one block: per-thread strided sums, then thread order) */
__global__ __launch_bounds__(NT) void k_lokr_sum(const double *parts, i64 n, lk_view out, double scale) {
    __shared__ double red[NT];
    double acc = 0.0;
    for (i64 i = threadIdx.x; i < n; i += NT) acc += parts[i];
    red[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double tot = 0.0;
        for (int t = 0; t < NT; t++) tot += red[t];
        vstore(out, 0, 0, (float)(tot * scale));
    }
}

/* ---- host ---- */
static int load_d(const lk_view &v, i64 rows, i64 cols, int ct, double *dst, cudaStream_t s) {
    k_lokr_load<<<blocks_for(rows * cols), NT, 0, s>>>(v, rows, cols, ct, dst);
    LK_LAUNCHED("lokr_load");
    return LYCO_OK;
}

static int dmm(i64 M, i64 N, i64 Kd, const double *A, i64 ai, i64 ak, const double *B, i64 bk, i64 bj, double *outd,
               const lk_view *outv, cudaStream_t s) {
    lk_view none;
    memset(&none, 0, sizeof none);
    if (warp_per_output(M * N, Kd)) {
        k_lokr_dmm_warp<<<blocks_for(M * N * 32), NT, 0, s>>>(M, N, Kd, A, ai, ak, B, bk, bj, outd, outv ? *outv : none);
        LK_LAUNCHED("lokr_dmm_warp");
        return LYCO_OK;
    }
    k_lokr_dmm<<<blocks_for(M * N), NT, 0, s>>>(M, N, Kd, A, ai, ak, B, bk, bj, outd, outv ? *outv : none);
    LK_LAUNCHED("lokr_dmm");
    return LYCO_OK;
}

static double *take_d(lk_carve &cv, i64 n) { return (double *)carve_take(cv, (size_t)(n > 0 ? n : 1) * 8); }
static float *take_f(lk_carve &cv, i64 n) { return (float *)carve_take(cv, (size_t)(n > 0 ? n : 1) * 4); }

/* W1d (and its factors' fp64 copies), and for bypass W1s = RN_f32(s·m·σs·W1d) */
static void w1_carve(const lk_lokr_args *a, lk_carve &cv, lokr_halves *h, bool bypass) {
    const i64 A_ = a->a, c = a->c, r = a->r;
    h->W1d = take_d(cv, A_ * c);
    if (bypass) h->W1s = take_f(cv, A_ * c);
    if (!a->w1_full) {
        h->w1a = take_d(cv, A_ * r);
        h->w1b = take_d(cv, r * c);
    }
}

static int w1_build(const lk_lokr_args *a, const lokr_halves *h, bool bypass, cudaStream_t s) {
    const i64 A_ = a->a, c = a->c, r = a->r;
    const int ct = a->ct;
    int rc;
    if (a->w1_full) {
        if ((rc = load_d(a->w1, A_, c, ct, h->W1d, s))) return rc;
    } else {
        if ((rc = load_d(a->w1a, A_, r, ct, h->w1a, s)) || (rc = load_d(a->w1b, r, c, ct, h->w1b, s)) ||
            (rc = dmm(A_, c, r, h->w1a, r, 1, h->w1b, c, 1, h->W1d, NULL, s)))
            return rc;
    }
    if (bypass) {
        k_lokr_w1s<<<blocks_for(A_ * c), NT, 0, s>>>(h->W1d, A_ * c, a->s * a->m, a->sigma, ct, h->W1s);
        LK_LAUNCHED("lokr_w1s");
    }
    return LYCO_OK;
}

int lokr_halves_build_w1(const lk_lokr_args *a, lk_carve &cv, lokr_halves *h, cudaStream_t s) {
    memset(h, 0, sizeof *h);
    w1_carve(a, cv, h, true);
    return cv.base ? w1_build(a, h, true, s) : LYCO_OK;
}

int lokr_halves_build(const lk_lokr_args *a, lk_carve &cv, lokr_halves *h, bool bypass, cudaStream_t s) {
    const i64 b = a->b, d = a->d, K = a->K, dK = d * K, r = a->r;
    const int ct = a->ct;
    memset(h, 0, sizeof *h);
    w1_carve(a, cv, h, bypass);
    h->W2d = take_d(cv, b * dK);
    h->W2f = take_f(cv, b * dK);
    if (!a->w2_full) {
        h->w2a = take_d(cv, b * r);
        h->w2b = take_d(cv, r * (a->tucker ? d : dK));
    }
    if (a->tucker) {
        h->t2 = take_d(cv, r * r * K);
        h->P = take_d(cv, r * dK);
    }
    if (!cv.base) return LYCO_OK;
    int rc = w1_build(a, h, bypass, s);
    if (rc) return rc;
    if (a->w2_full) {
        if ((rc = load_d(a->w2, b, dK, ct, h->W2d, s))) return rc;
    } else if (a->tucker) {
        if ((rc = load_d(a->w2a, r, b, ct, h->w2a, s)) || (rc = load_d(a->w2b, r, d, ct, h->w2b, s)) ||
            (rc = load_d(a->t2, r, r * K, ct, h->t2, s)))
            return rc;
        k_lokr_tucker_p<<<blocks_for(r * dK), NT, 0, s>>>(r, d, K, h->t2, h->w2b, h->P);
        LK_LAUNCHED("lokr_tucker_p");
        if ((rc = dmm(b, dK, r, h->w2a, 1, b, h->P, dK, 1, h->W2d, NULL, s))) return rc; /* W2 = w2_aᵀ·P */
    } else {
        if ((rc = load_d(a->w2a, b, r, ct, h->w2a, s)) || (rc = load_d(a->w2b, r, dK, ct, h->w2b, s)) ||
            (rc = dmm(b, dK, r, h->w2a, r, 1, h->w2b, dK, 1, h->W2d, NULL, s)))
            return rc;
    }
    k_lokr_w2f<<<blocks_for(b * dK), NT, 0, s>>>(h->W2d, b * dK, h->W2f);
    LK_LAUNCHED("lokr_w2f");
    return LYCO_OK;
}

lokr_dev lokr_dev_of(const lk_lokr_args *a, const lokr_halves *h, bool merge) {
    lokr_dev A;
    memset(&A, 0, sizeof A);
    A.ct = a->ct;
    A.O = a->O;
    A.K = a->K;
    A.IK = a->I * a->K;
    A.a = a->a;
    A.b = a->b;
    A.c = a->c;
    A.dK = a->d * a->K;
    A.m = a->m;
    A.sp = merge && a->compat ? a->s * a->s : a->s;
    A.sigma = a->sigma;
    if (merge) A.mask = a->mask;
    A.W1d = h->W1d;
    A.W2f = h->W2f;
    return A;
}

void lokr_grads_carve(const lk_lokr_args *a, lk_carve &cv, lokr_grads *g) {
    const i64 dK = a->d * a->K;
    g->G1 = take_d(cv, a->a * a->c);
    g->G2 = take_d(cv, a->b * dK);
    g->GP = a->tucker ? take_d(cv, a->r * dK) : NULL;
}

int lokr_chain_w1(const lk_lokr_args *a, const lokr_halves *h, const double *G1, cudaStream_t s) {
    const i64 A_ = a->a, c = a->c, r = a->r;
    int rc = LYCO_OK;
    if (a->w1_full) {
        if (a->gw1.p) {
            k_lokr_store<<<blocks_for(A_ * c), NT, 0, s>>>(G1, A_, c, a->gw1);
            LK_LAUNCHED("lokr_store");
        }
        return LYCO_OK;
    }
    if (a->gw1a.p && (rc = dmm(A_, r, c, G1, c, 1, h->w1b, 1, c, NULL, &a->gw1a, s))) return rc;  /* G_W1·w1_bᵀ */
    if (a->gw1b.p && (rc = dmm(r, c, A_, h->w1a, 1, r, G1, c, 1, NULL, &a->gw1b, s))) return rc;  /* w1_aᵀ·G_W1 */
    return LYCO_OK;
}

static int chain_w2(const lk_lokr_args *a, const lokr_halves *h, const lokr_grads *g, cudaStream_t s) {
    const i64 b = a->b, d = a->d, K = a->K, dK = d * K, r = a->r;
    const double *G2 = g->G2;
    int rc = LYCO_OK;
    if (a->w2_full) {
        if (a->gw2.p) {
            k_lokr_store<<<blocks_for(b * dK), NT, 0, s>>>(G2, b, dK, a->gw2);
            LK_LAUNCHED("lokr_store");
        }
        return LYCO_OK;
    }
    if (!a->tucker) {
        if (a->gw2a.p && (rc = dmm(b, r, dK, G2, dK, 1, h->w2b, 1, dK, NULL, &a->gw2a, s))) return rc; /* G_W2·w2_bᵀ */
        if (a->gw2b.p && (rc = dmm(r, dK, b, h->w2a, 1, r, G2, dK, 1, NULL, &a->gw2b, s))) return rc; /* w2_aᵀ·G_W2 */
        return LYCO_OK;
    }
    if (a->gw2a.p && (rc = dmm(r, b, dK, h->P, dK, 1, G2, 1, dK, NULL, &a->gw2a, s))) return rc;     /* P·G_W2ᵀ */
    if (!a->gw2b.p && !a->gt2.p) return LYCO_OK;
    if ((rc = dmm(r, dK, b, h->w2a, b, 1, G2, dK, 1, g->GP, NULL, s))) return rc;                   /* G_P = w2_a·G_W2 */
    if (a->gt2.p) {
        k_lokr_gt2<<<blocks_for(r * r * K), NT, 0, s>>>(r, d, K, g->GP, h->w2b, a->gt2);
        LK_LAUNCHED("lokr_gt2");
    }
    if (a->gw2b.p) {
        k_lokr_gw2b_t<<<blocks_for(r * d), NT, 0, s>>>(r, d, K, h->t2, g->GP, a->gw2b);
        LK_LAUNCHED("lokr_gw2b_t");
    }
    return LYCO_OK;
}

/* G = scale·σs·Σ_z parts (k_lokr_fin or, few elements with many partials, k_lokr_fin_warp) */
static int fin(const float *parts, i64 z, i64 n, double scale, const lk_view &sigma, int ct, double *G, cudaStream_t s) {
    if (warp_per_output(n, z)) {
        k_lokr_fin_warp<<<blocks_for(n * 32), NT, 0, s>>>(parts, z, n, scale, sigma, ct, G);
        LK_LAUNCHED("lokr_fin_warp");
        return LYCO_OK;
    }
    k_lokr_fin<<<blocks_for(n), NT, 0, s>>>(parts, z, n, scale, sigma, ct, G);
    LK_LAUNCHED("lokr_fin");
    return LYCO_OK;
}

int lokr_chain(const lk_lokr_args *a, const lokr_halves *h, const lokr_grads *g, const float *pw1, i64 z1, const float *pw2,
               i64 z2, double scale1, const lk_view &sigma1, cudaStream_t s) {
    const i64 n1 = a->a * a->c, n2 = a->b * a->d * a->K;
    lk_view none;
    memset(&none, 0, sizeof none);
    int rc;
    if (pw1) {
        if ((rc = fin(pw1, z1, n1, scale1, sigma1, a->ct, g->G1, s)) || (rc = lokr_chain_w1(a, h, g->G1, s))) return rc;
    }
    if (pw2) {
        if ((rc = fin(pw2, z2, n2, 1.0, none, a->ct, g->G2, s)) || (rc = chain_w2(a, h, g, s))) return rc;
    }
    return LYCO_OK;
}

int lokr_sum_store(const double *parts, i64 n, const lk_view &out, double scale, cudaStream_t s) {
    k_lokr_sum<<<1, NT, 0, s>>>(parts, n, out, scale);
    LK_LAUNCHED("lokr_sum");
    return LYCO_OK;
}
