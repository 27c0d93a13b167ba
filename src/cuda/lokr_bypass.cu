/*
 * lokr_bypass.cu — LoKr bypass (ALGORITHMS.md §2.3) on the GPU, linear and conv (nd = 1..3, any
 * stride / padding / dilation, W2 full, plain or Tucker: the halves are formed first, see
 * lokr_common.cuh), activations with any strides (kern_glora.h's lk_act) and alignment.
 * ΔW is never built. Linear is the conv with no spatial dims (sp = 1, K = 1).
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
 * Work split: one thread per element of Z / y / GZ / dx (grid-stride, element index with the
 * spatial position fastest, then j), reading W2 transposed (coalesced over j on linear layers).
 * G_W1: block per (i,p) × a split of the batch; G_W2: thread per (j, q·K+κ) × a split of the
 * (n, s') range; fp32 partials summed in a fixed order (deterministic, no atomics).
 * Extra memory (scratch, fp32): Z N·c·b·sp_out (+ GZ the same, backward), partials
 * z₁·a·c + z₂·b·dK, G_σs partials (fp64, one per block), the halves (lokr_common.cuh).
 */
#include "cuda/lokr_common.cuh"

struct lokr_byp {
    int32_t ct;
    i64 N, a, b, c, d, K, dK, O, I;
    lk_geo g;
    const float *W2T, *W2f, *W1s;
    const double *W1d, *W2d;
};

__device__ __forceinline__ float act_ld(const lk_act &v, i64 n, i64 ch, i64 sp) {
    const char *p = (const char *)v.p + (n * v.sn + ch * v.sc + sp * v.sp) * (i64)dt_size(v.dt);
    return ld_elem(p, v.dt, v.flags & LK_UNALIGNED);
}
__device__ __forceinline__ void act_st(const lk_act &v, i64 n, i64 ch, i64 sp, float x) {
    char *p = (char *)v.p + (n * v.sn + ch * v.sc + sp * v.sp) * (i64)dt_size(v.dt);
    st_elem(p, v.dt, v.flags & LK_UNALIGNED, x);
}

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

/* Z (fp32, [n][p][j][s']) */
__global__ __launch_bounds__(NT) void k_lokr_bz(lokr_byp B, lk_act x, float *Z) {
    const i64 so_n = B.g.spout, total = B.N * B.c * B.b * so_n;
    GRID_STRIDE(e, total) {
        const i64 so = e % so_n, j = (e / so_n) % B.b, p = (e / (so_n * B.b)) % B.c, n = e / (so_n * B.b * B.c);
        float acc = 0.0f;
        for (i64 q = 0; q < B.d; q++)
            for (i64 k = 0; k < B.K; k++) {
                i64 si;
                if (!in_pos(B.g, so, k, si)) continue;
                acc = fmaf(B.W2T[(q * B.K + k) * B.b + j], round_to(act_ld(x, n, p * B.d + q, si), B.ct), acc);
            }
        Z[e] = acc;
    }
}

/* y = RN_CT(y0) + W̃1·Z */
__global__ __launch_bounds__(NT) void k_lokr_by(lokr_byp B, lk_act y0, lk_act y, const float *Z) {
    const i64 so_n = B.g.spout, total = B.N * B.a * B.b * so_n;
    GRID_STRIDE(e, total) {
        const i64 so = e % so_n, j = (e / so_n) % B.b, i = (e / (so_n * B.b)) % B.a, n = e / (so_n * B.b * B.a);
        float acc = 0.0f;
        for (i64 p = 0; p < B.c; p++) acc = fmaf(B.W1s[i * B.c + p], Z[((n * B.c + p) * B.b + j) * so_n + so], acc);
        const float base = y0.p ? round_to(act_ld(y0, n, i * B.b + j, so), B.ct) : 0.0f;
        act_st(y, n, i * B.b + j, so, base + acc);
    }
}

/* GZ = W̃1ᵀ·RN_CT(dy) (fp32, laid out as Z) */
__global__ __launch_bounds__(NT) void k_lokr_bgz(lokr_byp B, lk_act dy, float *GZ) {
    const i64 so_n = B.g.spout, total = B.N * B.c * B.b * so_n;
    GRID_STRIDE(e, total) {
        const i64 so = e % so_n, j = (e / so_n) % B.b, p = (e / (so_n * B.b)) % B.c, n = e / (so_n * B.b * B.c);
        float acc = 0.0f;
        for (i64 i = 0; i < B.a; i++) acc = fmaf(B.W1s[i * B.c + p], round_to(act_ld(dy, n, i * B.b + j, so), B.ct), acc);
        GZ[e] = acc;
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

/* G_W1 partials: block (ip, z), z covering samples [z·nper, (z+1)·nper) */
__global__ __launch_bounds__(NT) void k_lokr_bgw1(lokr_byp B, lk_act dy, const float *Z, i64 nper, float *pw1) {
    __shared__ float red[NT / 32];
    const i64 ip = blockIdx.x, z = blockIdx.y, i = ip / B.c, p = ip % B.c, so_n = B.g.spout, per = B.b * so_n;
    const i64 n0 = z * nper, n1 = n0 + nper < B.N ? n0 + nper : B.N;
    const i64 nel = (n1 > n0 ? n1 - n0 : 0) * per;
    float acc = 0.0f;
    for (i64 e = threadIdx.x; e < nel; e += NT) {
        const i64 n = n0 + e / per, r = e % per, j = r / so_n, so = r % so_n;
        acc = fmaf(round_to(act_ld(dy, n, i * B.b + j, so), B.ct), Z[(n * B.c + p) * per + r], acc);
    }
    const float s = block_sum(acc, red);
    if (threadIdx.x == 0) pw1[z * B.a * B.c + ip] = s;
}

/* G_W2 partials: thread per (j, q·K+κ); block row z covers u = n·sp_out + s' ∈ [z·uper, (z+1)·uper) */
__global__ __launch_bounds__(NT) void k_lokr_bgw2(lokr_byp B, lk_act x, const float *GZ, i64 uper, float *pw2) {
    const i64 n2 = B.b * B.dK, idx = (i64)blockIdx.x * NT + threadIdx.x, z = blockIdx.y;
    if (idx >= n2) return;
    const i64 j = idx / B.dK, q = (idx % B.dK) / B.K, k = idx % B.K, so_n = B.g.spout, U = B.N * so_n;
    const i64 u0 = z * uper, u1 = u0 + uper < U ? u0 + uper : U;
    float acc = 0.0f;
    for (i64 u = u0; u < u1; u++) {
        const i64 n = u / so_n, so = u % so_n;
        i64 si;
        if (!in_pos(B.g, so, k, si)) continue;
        for (i64 p = 0; p < B.c; p++)
            acc = fmaf(GZ[((n * B.c + p) * B.b + j) * so_n + so], round_to(act_ld(x, n, p * B.d + q, si), B.ct), acc);
    }
    pw2[z * n2 + idx] = acc;
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
    B.W2T = h->W2T;
    B.W2f = h->W2f;
    B.W1s = h->W1s;
    B.W1d = h->W1d;
    B.W2d = h->W2d;
    return B;
}

static i64 z_size(const lk_lokr_args *a) { return a->T * a->c * a->b * (a->geo.nd ? a->geo.spout : 1); }

static int fwd_body(const lk_lokr_args *a, lk_carve &cv, cudaStream_t s) {
    float *Z = (float *)carve_take(cv, (size_t)z_size(a) * 4);
    lokr_halves h;
    int rc = lokr_halves_build(a, cv, &h, true, s);
    if (rc || !cv.base) return rc;
    const lokr_byp B = byp_of(a, &h);
    k_lokr_bz<<<grid_of(z_size(a)), NT, 0, s>>>(B, a->x, Z);
    LK_LAUNCHED("lokr_bz");
    k_lokr_by<<<grid_of(B.N * B.O * B.g.spout), NT, 0, s>>>(B, a->y0, a->y, Z);
    LK_LAUNCHED("lokr_by");
    return LYCO_OK;
}

struct bb_plan {
    i64 z1, nper, z2, uper;
};

/* splits so that about 1024 blocks run; functions of the shape only (deterministic) */
static bb_plan bb_plan_of(const lk_lokr_args *a) {
    bb_plan pl;
    const i64 ac = a->a * a->c, b2 = cdiv(a->b * a->d * a->K, NT);
    const i64 T = a->T > 0 ? a->T : 1, U = T * (a->geo.nd ? a->geo.spout : 1); /* T = 0: one empty split */
    i64 z = cdiv(1024, ac);
    if (z > T) z = T;
    if (z > 65535) z = 65535;
    if (z < 1) z = 1;
    pl.nper = cdiv(T, z);
    pl.z1 = cdiv(T, pl.nper);
    z = cdiv(1024, b2);
    if (z > U) z = U;
    if (z > 65535) z = 65535;
    if (z < 1) z = 1;
    pl.uper = cdiv(U, z);
    pl.z2 = cdiv(U, pl.uper);
    return pl;
}

static int bwd_body(const lk_lokr_args *a, lk_carve &cv, cudaStream_t s) {
    const bb_plan pl = bb_plan_of(a);
    const i64 ac = a->a * a->c, n2 = a->b * a->d * a->K, spo = a->geo.nd ? a->geo.spout : 1, spi = a->geo.nd ? a->geo.spin : 1;
    const bool need1 = a->gw1.p || a->gw1a.p || a->gw1b.p, need2 = a->gw2.p || a->gw2a.p || a->gw2b.p || a->gt2.p;
    const bool needZ = need1, needGZ = need2 || a->dx.p;
    float *Z = (float *)carve_take(cv, needZ ? (size_t)z_size(a) * 4 : 0);
    float *GZ = (float *)carve_take(cv, needGZ ? (size_t)z_size(a) * 4 : 0);
    float *pw1 = (float *)carve_take(cv, (size_t)(pl.z1 * ac) * 4);
    float *pw2 = (float *)carve_take(cv, (size_t)(pl.z2 * n2) * 4);
    double *psig = (double *)carve_take(cv, a->gsigma.p ? (size_t)SIG_BLOCKS * 8 : 0);
    lokr_grads gr;
    lokr_grads_carve(a, cv, &gr);
    lokr_halves h;
    int rc = lokr_halves_build(a, cv, &h, true, s);
    if (rc || !cv.base) return rc;
    const lokr_byp B = byp_of(a, &h);
    if (a->dy0.p) {
        lk_act none;
        memset(&none, 0, sizeof none);
        k_lokr_act_copy<<<grid_of(a->T * a->O * spo), NT, 0, s>>>(a->dy0, a->dy0_zero ? none : a->dy, a->T, a->O, spo, a->ct);
        LK_LAUNCHED("lokr_act_copy");
    }
    if (needZ) {
        k_lokr_bz<<<grid_of(z_size(a)), NT, 0, s>>>(B, a->x, Z);
        LK_LAUNCHED("lokr_bz");
        k_lokr_bgw1<<<dim3((unsigned)ac, (unsigned)pl.z1), NT, 0, s>>>(B, a->dy, Z, pl.nper, pw1);
        LK_LAUNCHED("lokr_bgw1");
    }
    if (needGZ) {
        k_lokr_bgz<<<grid_of(z_size(a)), NT, 0, s>>>(B, a->dy, GZ);
        LK_LAUNCHED("lokr_bgz");
    }
    if (a->dx.p) {
        k_lokr_bdx<<<grid_of(a->T * a->I * spi), NT, 0, s>>>(B, a->dx, GZ);
        LK_LAUNCHED("lokr_bdx");
    }
    if (need2) {
        k_lokr_bgw2<<<dim3((unsigned)cdiv(n2, NT), (unsigned)pl.z2), NT, 0, s>>>(B, a->x, GZ, pl.uper, pw2);
        LK_LAUNCHED("lokr_bgw2");
    }
    if (a->gsigma.p) {
        i64 nb = cdiv(z_size(a), NT);
        if (nb > SIG_BLOCKS) nb = SIG_BLOCKS;
        if (nb < 1) nb = 1;
        k_lokr_bsig<<<(unsigned)nb, NT, 0, s>>>(B, a->x, a->dy, psig);
        LK_LAUNCHED("lokr_bsig");
        if ((rc = lokr_sum_store(psig, nb, a->gsigma, a->s * a->m, s))) return rc;
    }
    return lokr_chain(a, &h, &gr, need1 ? pw1 : NULL, pl.z1, need2 ? pw2 : NULL, pl.z2, a->s * a->m, a->sigma, s);
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
    (void)dev;
    if (a->T == 0) return LYCO_OK;
    return with_scratch(a, (cudaStream_t)stream, true);
}

extern "C" int lk_lokr_bypass_bwd(const lk_lokr_args *a, const lk_device *dev, void *stream) {
    (void)dev;
    if (a->a * a->c > 2147483647LL) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda lokr: a·c exceeds the grid limit");
    return with_scratch(a, (cudaStream_t)stream, false);
}
