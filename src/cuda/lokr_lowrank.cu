/*
 * lokr_lowrank.cu — LoKr bypass forward (ALGORITHMS.md §2.3) for linear layers whose W2 is the
 * plain low-rank product w2_a·w2_b (b×r · r×d; not Tucker, not full), without forming W2 or
 * the per-token X·W2ᵀ (c×b per token). Per token t (x_t viewed as c×d, y_t as a×b):
 *   U_t[p,l] = Σ_q RN_CT(x[t, p·d+q])·w2_b[l,q]            (c×r, fp64 accumulation)
 *   S_t[i,l] = s·m·σs·Σ_p W1[i,p]·U_t[p,l]                (a×r, fp64)
 *   y[t, i·b+j] = RN_CT(y0[t, i·b+j]) + Σ_l S_t[i,l]·w2_a[j,l]   (fp64, rounded once to y's dtype
 *                                                                  through fp32)
 * i.e. c·r·d + a·c·r + a·r·b multiply-adds per token instead of c·b·d + a·c·b. W1 (fp64, full or
 * w1_a·w1_b) and the fp64 factor copies come from lokr_halves_build. Every sum is fp64 in a
 * fixed order (deterministic); the result is at least as accurate as the full-W2 path.
 *
 * Kernels: k_lr_rowdot (U: blocks of rb rows (token, p) of x staged in shared memory as fp32
 * (exact: the values are CT-rounded), each warp owns (4-row group, l) tasks, lanes stride q,
 * fixed-order shuffle reduction); k_lr_expand (one block per LR_TK tokens: w2_a staged
 * transposed in shared memory as fp32 (exact) when b·r ≤ LR_MS, S_t in shared memory, one
 * thread per output element).
 * Eligibility (lokr_lr_fwd_ok): linear, plain low-rank W2, d ≤ LR_XS/4, (a + c)·r ≤ LR_US;
 * anything else takes the general path (lokr_bypass.cu), as does everything when the caller
 * sets legacy (LYCO_CUDA_LOKR_LEGACY=1, read in dispatch_lokr.c).
 * Extra memory: U for a chunk of tokens, ≤ LR_SCR bytes (O(1) in T), plus the halves.
 */
#include "cuda/lokr_common.cuh"

#define LR_XS 8192              /* k_lr_rowdot: staged x floats per block */
#define LR_RG 4                 /* k_lr_rowdot: rows per warp task */
#define LR_US 1536              /* k_lr_expand: (P + A)·r doubles (with Ms: ≤ 44 KiB static shared) */
#define LR_MS 8192              /* k_lr_expand: staged M floats */
#define LR_TK 16                /* k_lr_expand: tokens per block */
#define LR_SCR ((i64)32 << 20)  /* U scratch bytes per chunk of tokens */

/* out[row·r + l] = Σ_q RN_CT(v[t0 + row/G, (row%G)·L + q])·M[l·ms + q·qs] (fp64), rows [0, R);
   block blockIdx.x owns rows [blockIdx.x·rb, +rb), rb a multiple of LR_RG, rb·L ≤ LR_XS */
__global__ __launch_bounds__(NT) void k_lr_rowdot(lk_act v, i64 t0, i64 R, i64 G, i64 L, i64 rb, const double *M, i64 r,
                                                   i64 ms, i64 qs, int ct, double *out) {
    __shared__ float xs[LR_XS];
    const i64 row0 = (i64)blockIdx.x * rb;
    for (i64 e = threadIdx.x; e < rb * L; e += NT) {
        const i64 row = row0 + e / L, q = e % L;
        xs[e] = row < R ? round_to(act_ld(v, t0 + row / G, (row % G) * L + q, 0), ct) : 0.0f;
    }
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const i64 tasks = (rb / LR_RG) * r;
    for (i64 tk = warp; tk < tasks; tk += NT / 32) {
        const i64 g = tk / r, l = tk % r;
        const float *xr = xs + g * LR_RG * L;
        const double *mr = M + l * ms;
        double acc[LR_RG];
#pragma unroll
        for (int u = 0; u < LR_RG; u++) acc[u] = 0.0;
        for (i64 q = lane; q < L; q += 32) {
            const double m = mr[q * qs];
#pragma unroll
            for (int u = 0; u < LR_RG; u++) acc[u] = fma((double)xr[u * L + q], m, acc[u]);
        }
#pragma unroll
        for (int u = 0; u < LR_RG; u++) {
            double t = acc[u];
            for (int off = 16; off > 0; off >>= 1) t += __shfl_down_sync(0xffffffffu, t, off);
            const i64 row = row0 + g * LR_RG + u;
            if (lane == 0 && row < R) out[row * r + l] = t;
        }
    }
}

/* For each token t in [blockIdx.x·LR_TK, +LR_TK) ∩ [0, nT):
     S0[i,l] = Σ_p W[i·wi + p·wp]·U[(t·P + p)·r + l]   (i < A, p < P), stored to Sout[(t·A + i)·r + l]
               when Sout is given; S = f·S0 (f = sm·σs)
     out[t0+t, i·L + j] = RN_CT(base[t0+t, i·L + j]) + Σ_l S[i,l]·M[j·ms + l·ls]   (out p NULL: skipped)
   SH: M staged transposed (l·L + j) in shared memory as fp32 (L·r ≤ LR_MS; exact for CT-rounded M) */
template <bool SH>
__global__ __launch_bounds__(NT) void k_lr_expand(const double *U, i64 nT, i64 P, i64 A, i64 r, const double *W, i64 wi, i64 wp,
                                                  double sm, lk_view sigma, const double *M, i64 L, i64 ms, i64 ls, lk_act base,
                                                  lk_act out, i64 t0, int ct, double *Sout) {
    __shared__ float Ms[SH ? LR_MS : 1];
    __shared__ double us[LR_US];
    double *ss = us + P * r;
    const double f = sm * (double)lokr_sigma(sigma, ct);
    if (SH) {
        for (i64 e = threadIdx.x; e < L * r; e += NT) {
            const i64 l = e / L, j = e % L;
            Ms[e] = (float)M[j * ms + l * ls];
        }
    }
    const i64 tb = (i64)blockIdx.x * LR_TK, te = tb + LR_TK < nT ? tb + LR_TK : nT;
    for (i64 t = tb; t < te; t++) {
        __syncthreads(); /* Ms staged; the previous token's us / ss no longer read */
        for (i64 e = threadIdx.x; e < P * r; e += NT) us[e] = U[t * P * r + e];
        __syncthreads();
        for (i64 e = threadIdx.x; e < A * r; e += NT) {
            const i64 i = e / r, l = e % r;
            double acc = 0.0;
            for (i64 p = 0; p < P; p++) acc = fma(W[i * wi + p * wp], us[p * r + l], acc);
            ss[e] = acc * f;
            if (Sout) Sout[t * A * r + e] = acc;
        }
        if (!out.p) continue;
        __syncthreads();
        for (i64 e = threadIdx.x; e < A * L; e += NT) {
            const i64 i = e / L, j = e % L;
            const double *sr = ss + i * r;
            double acc = 0.0;
            for (i64 l = 0; l < r; l++) acc = fma(sr[l], SH ? (double)Ms[l * L + j] : M[j * ms + l * ls], acc);
            const double b0 = base.p ? (double)round_to(act_ld(base, t0 + t, e, 0), ct) : 0.0;
            act_st(out, t0 + t, e, 0, (float)(b0 + acc));
        }
    }
}

/* ---- backward: fixed-order split reductions over the token axis ---- */
#define LR_RM 16   /* k_lr_red: output rows per thread */
#define LR_SIGB 256 /* k_lr_dot: blocks (G_σs partials) */

/* scratch operand: base[(k / kr)·s1 + k % kr + m·s2] */
struct lr_sc {
    const double *p;
    i64 kr, s1, s2;
    __device__ double ld(i64 k, i64 m) const { return p[(k / kr) * s1 + k % kr + m * s2]; }
};
/* activation operand: RN_CT(v[t0 + k / G, (k % G)·L + n]) */
struct lr_act {
    lk_act v;
    i64 t0, G, L;
    int ct;
    __device__ double ld(i64 k, i64 n) const { return (double)round_to(act_ld(v, t0 + k / G, (k % G) * L + n, 0), ct); }
};

/* part[(z·Mr + m)·Nr + n] (+)= Σ_{k ∈ [z·kper, min(kn, (z+1)·kper))} A(k, m)·B(k, n) (fp64, k ascending);
   thread: one n, LR_RM rows m from blockIdx.y·LR_RM; z = blockIdx.z. accum: add to the previous
   chunk's partial (chunks run in order on one stream: deterministic). */
template <class OB>
__global__ __launch_bounds__(NT) void k_lr_red(lr_sc A, OB B, i64 Mr, i64 Nr, i64 kn, i64 kper, int accum, double *part) {
    const i64 n = (i64)blockIdx.x * NT + threadIdx.x, m0 = (i64)blockIdx.y * LR_RM, z = blockIdx.z;
    if (n >= Nr) return;
    const i64 kb = z * kper, ke = kb + kper < kn ? kb + kper : kn;
    const i64 mu = Mr - m0 < LR_RM ? Mr - m0 : LR_RM;
    double acc[LR_RM];
#pragma unroll
    for (int u = 0; u < LR_RM; u++) acc[u] = 0.0;
    for (i64 k = kb; k < ke; k++) {
        const double bv = B.ld(k, n);
#pragma unroll
        for (int u = 0; u < LR_RM; u++)
            if (u < mu) acc[u] = fma(A.ld(k, m0 + u), bv, acc[u]);
    }
    for (int u = 0; u < mu; u++) {
        double *dst = part + (z * Mr + m0 + u) * Nr + n;
        *dst = accum ? *dst + acc[u] : acc[u];
    }
}

/* v = scale·σs^(use_sig)·Σ_z part[(z·Mr + m)·Nr + n] (z ascending); into Gd[m·Nr + n], or rounded
   once into out (m, n) (trans: out (n, m)) */
__global__ __launch_bounds__(NT) void k_lr_fin(const double *part, i64 Z, i64 Mr, i64 Nr, double scale, lk_view sigma, int ct,
                                               double *Gd, lk_view out, int trans) {
    const i64 e = (i64)blockIdx.x * NT + threadIdx.x;
    if (e >= Mr * Nr) return;
    double acc = 0.0;
    for (i64 z = 0; z < Z; z++) acc += part[z * Mr * Nr + e];
    acc *= scale * (double)lokr_sigma(sigma, ct);
    const i64 m = e / Nr, n = e % Nr;
    if (Gd) Gd[e] = acc;
    else if (trans) vstore(out, n, m, (float)acc);
    else vstore(out, m, n, (float)acc);
}

/* parts[blockIdx.x] (+)= Σ_{e < n} u[e]·v[e] (grid-stride per thread, then thread order) */
__global__ __launch_bounds__(NT) void k_lr_dot(const double *u, const double *v, i64 n, int accum, double *parts) {
    __shared__ double red[NT];
    double acc = 0.0;
    for (i64 e = (i64)blockIdx.x * NT + threadIdx.x; e < n; e += (i64)gridDim.x * NT) acc = fma(u[e], v[e], acc);
    red[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int k = 0; k < NT; k++) t += red[k];
        parts[blockIdx.x] = accum ? parts[blockIdx.x] + t : t;
    }
}

/* ---- host ---- */

bool lokr_lr_fwd_ok(const lk_lokr_args *a) {
    return !a->legacy && a->geo.nd == 0 && !a->w2_full && !a->tucker && a->r > 0 && a->d > 0 && a->d * LR_RG <= LR_XS &&
           (a->a + a->c) * a->r <= LR_US;
}

/* rows per k_lr_rowdot block: a multiple of LR_RG, ≤ 8·LR_RG, rb·L ≤ LR_XS (L ≤ LR_XS/LR_RG) */
static i64 rows_per_block(i64 L) {
    i64 g = LR_XS / (L * LR_RG);
    if (g > 8) g = 8;
    if (g < 1) g = 1;
    return g * LR_RG;
}

static int rowdot(const lk_act &v, i64 t0, i64 R, i64 G, i64 L, const double *M, i64 r, i64 ms, i64 qs, int ct, double *out,
                  cudaStream_t s) {
    const i64 rb = rows_per_block(L), nb = cdiv(R, rb);
    if (nb <= 0) return LYCO_OK;
    if (nb > 2147483647LL) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda lokr: %lld row blocks exceed the grid limit", (long long)nb);
    k_lr_rowdot<<<(unsigned)nb, NT, 0, s>>>(v, t0, R, G, L, rb, M, r, ms, qs, ct, out);
    LK_LAUNCHED("lokr_lr_rowdot");
    return LYCO_OK;
}

static int expand(const double *U, i64 nT, i64 P, i64 A, i64 r, const double *W, i64 wi, i64 wp, double sm, const lk_view &sigma,
                  const double *M, i64 L, i64 ms, i64 ls, const lk_act &base, const lk_act &out, i64 t0, int ct, double *Sout,
                  cudaStream_t s) {
    const i64 nb = cdiv(nT, LR_TK);
    if (nb <= 0) return LYCO_OK;
    if (L * r <= LR_MS)
        k_lr_expand<true><<<(unsigned)nb, NT, 0, s>>>(U, nT, P, A, r, W, wi, wp, sm, sigma, M, L, ms, ls, base, out, t0, ct, Sout);
    else
        k_lr_expand<false><<<(unsigned)nb, NT, 0, s>>>(U, nT, P, A, r, W, wi, wp, sm, sigma, M, L, ms, ls, base, out, t0, ct, Sout);
    LK_LAUNCHED("lokr_lr_expand");
    return LYCO_OK;
}

/* tokens per chunk: U (chunk·c·r doubles) ≤ LR_SCR bytes */
static i64 chunk_tokens(const lk_lokr_args *a) {
    i64 per = a->c * a->r * 8, ch = LR_SCR / (per > 0 ? per : 1);
    if (ch < 1) ch = 1;
    if (ch > a->T) ch = a->T;
    return ch;
}

static int fwd_body(const lk_lokr_args *a, lk_carve &cv, cudaStream_t s) {
    const i64 ch = chunk_tokens(a);
    double *U = (double *)carve_take(cv, (size_t)(ch * a->c * a->r) * 8);
    lokr_halves h;
    int rc = lokr_halves_build(a, cv, &h, false, s);
    if (rc || !cv.base) return rc;
    const i64 c = a->c, d = a->d, r = a->r, b = a->b;
    for (i64 t0 = 0; t0 < a->T; t0 += ch) {
        const i64 nT = a->T - t0 < ch ? a->T - t0 : ch;
        if ((rc = rowdot(a->x, t0, nT * c, c, d, h.w2b, r, d, 1, a->ct, U, s))) return rc;                  /* U = X·w2_bᵀ */
        if ((rc = expand(U, nT, c, a->a, r, h.W1d, c, 1, a->s * a->m, a->sigma, h.w2a, b, r, 1, a->y0, a->y, t0, a->ct, NULL, s)))
            return rc;                                                                                   /* y = y0 + W̃1·U·w2_aᵀ */
    }
    return LYCO_OK;
}

bool lokr_lr_bwd_ok(const lk_lokr_args *a) {
    return lokr_lr_fwd_ok(a) && a->T > 0 && a->b * LR_RG <= LR_XS && !a->gw2.p && !a->gt2.p;
}

/* a split reduction: Mr × Nr outputs, kn-long reduction per chunk, z splits of kper */
struct lr_split {
    i64 Mr, Nr, z, kper;
};
static lr_split split_of(i64 Mr, i64 Nr, i64 kn) {
    lr_split q = {Mr, Nr, 1, kn > 0 ? kn : 1};
    const i64 blocks = cdiv(Nr, NT) * cdiv(Mr, LR_RM);
    i64 z = cdiv(1024, blocks > 0 ? blocks : 1), zmax = cdiv(kn, 256);
    if (z > zmax) z = zmax;
    if (z > 65535) z = 65535;
    if (z < 1) z = 1;
    q.kper = cdiv(kn > 0 ? kn : 1, z);
    q.z = cdiv(kn > 0 ? kn : 1, q.kper);
    return q;
}

template <class OB>
static int red(const lr_sc &A, const OB &B, const lr_split &q, i64 kn, int accum, double *part, cudaStream_t s) {
    const i64 gx = cdiv(q.Nr, NT), gy = cdiv(q.Mr, LR_RM);
    if (gx <= 0 || gy <= 0) return LYCO_OK;
    if (gx > 2147483647LL || gy > 65535)
        return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda lokr: reduction grid %lld × %lld exceeds the launch limits", (long long)gx,
                         (long long)gy);
    k_lr_red<OB><<<dim3((unsigned)gx, (unsigned)gy, (unsigned)q.z), NT, 0, s>>>(A, B, q.Mr, q.Nr, kn, q.kper, accum, part);
    LK_LAUNCHED("lokr_lr_red");
    return LYCO_OK;
}

static int fin(const double *part, const lr_split &q, double scale, const lk_view &sigma, int ct, double *Gd, const lk_view &out,
               int trans, cudaStream_t s) {
    const i64 n = q.Mr * q.Nr;
    if (n <= 0) return LYCO_OK;
    k_lr_fin<<<(unsigned)cdiv(n, NT), NT, 0, s>>>(part, q.z, q.Mr, q.Nr, scale, sigma, ct, Gd, out, trans);
    LK_LAUNCHED("lokr_lr_fin");
    return LYCO_OK;
}

/* tokens per backward chunk: U, E, S0, F0 ((2a + 2c)·r doubles per token) ≤ LR_SCR bytes */
static i64 chunk_tokens_bwd(const lk_lokr_args *a) {
    i64 per = 2 * (a->a + a->c) * a->r * 8, ch = LR_SCR / (per > 0 ? per : 1);
    if (ch < 1) ch = 1;
    if (ch > a->T) ch = a->T;
    return ch;
}

/* Per chunk of tokens (dy, x rounded to CT; f = s·m·σs; W1 = W1d):
     U = X·w2_bᵀ (c×r), E = dy_t·w2_a (a×r), S0 = W1·U (a×r), F0 = W1ᵀ·E (c×r),
     dx = f·F0·w2_b, G_W1 = f·Σ_{t,l} E·Uᵀ, G_w2a = f·Σ_{t,i} dy_tᵀ·S0, G_w2b = f·Σ_{t,p} F0ᵀ·X,
     G_σs = s·m·Σ E·S0; dy0 = RN(dy) (0 with delta-only) by lokr_bypass.cu's copy. */
static int bwd_body(const lk_lokr_args *a, lk_carve &cv, cudaStream_t s) {
    const i64 A_ = a->a, c = a->c, d = a->d, r = a->r, b = a->b, ch = chunk_tokens_bwd(a);
    const bool need1 = a->gw1.p || a->gw1a.p || a->gw1b.p, gsig = a->gsigma.p != NULL;
    const bool needS = a->gw2a.p || gsig, needF = a->gw2b.p || a->dx.p;
    const bool needU = need1 || needS, needE = need1 || needF || gsig;
    const lr_split q1 = split_of(A_, c, ch * r), qa = split_of(r, b, ch * A_), qb = split_of(r, d, ch * c);
    double *U = (double *)carve_take(cv, needU ? (size_t)(ch * c * r) * 8 : 0);
    double *E = (double *)carve_take(cv, needE ? (size_t)(ch * A_ * r) * 8 : 0);
    double *S0 = (double *)carve_take(cv, needS ? (size_t)(ch * A_ * r) * 8 : 0);
    double *F0 = (double *)carve_take(cv, needF ? (size_t)(ch * c * r) * 8 : 0);
    double *p1 = (double *)carve_take(cv, need1 ? (size_t)(q1.z * A_ * c) * 8 : 0);
    double *pa = (double *)carve_take(cv, a->gw2a.p ? (size_t)(qa.z * r * b) * 8 : 0);
    double *pb = (double *)carve_take(cv, a->gw2b.p ? (size_t)(qb.z * r * d) * 8 : 0);
    double *ps = (double *)carve_take(cv, gsig ? (size_t)LR_SIGB * 8 : 0);
    double *G1 = (double *)carve_take(cv, need1 ? (size_t)(A_ * c) * 8 : 0);
    lokr_halves h;
    int rc = lokr_halves_build(a, cv, &h, false, s);
    if (rc || !cv.base) return rc;
    lk_act none;
    memset(&none, 0, sizeof none);
    lk_view nv;
    memset(&nv, 0, sizeof nv);
    const double sm = a->s * a->m;
    if (a->dy0.p && (rc = lokr_dy0_copy(a, s))) return rc;
    for (i64 t0 = 0; t0 < a->T; t0 += ch) {
        const i64 nT = a->T - t0 < ch ? a->T - t0 : ch;
        const int acc = t0 > 0;
        if (needU && (rc = rowdot(a->x, t0, nT * c, c, d, h.w2b, r, d, 1, a->ct, U, s))) return rc;  /* U = X·w2_bᵀ */
        if (needE && (rc = rowdot(a->dy, t0, nT * A_, A_, b, h.w2a, r, 1, r, a->ct, E, s))) return rc; /* E = dy·w2_a */
        if (needS && (rc = expand(U, nT, c, A_, r, h.W1d, c, 1, 1.0, nv, NULL, 0, 1, 1, none, none, t0, a->ct, S0, s)))
            return rc;                                                                                /* S0 = W1·U */
        if (needF && (rc = expand(E, nT, A_, c, r, h.W1d, 1, c, sm, a->sigma, h.w2b, d, 1, d, none, a->dx, t0, a->ct, F0, s)))
            return rc;                                                                                /* F0, dx = f·F0·w2_b */
        if (need1) { /* G_W1[i,p] partials: k = (t, l) */
            const lr_sc ea = {E, r, A_ * r, r};
            const lr_sc ub = {U, r, c * r, r};
            if ((rc = red(ea, ub, q1, nT * r, acc, p1, s))) return rc;
        }
        if (a->gw2a.p) { /* G_w2a[j,l] as (l, j): k = (t, i) */
            const lr_sc sa = {S0, 1, r, 1};
            const lr_act db = {a->dy, t0, A_, b, a->ct};
            if ((rc = red(sa, db, qa, nT * A_, acc, pa, s))) return rc;
        }
        if (a->gw2b.p) { /* G_w2b[l,q]: k = (t, p) */
            const lr_sc fa = {F0, 1, r, 1};
            const lr_act xb = {a->x, t0, c, d, a->ct};
            if ((rc = red(fa, xb, qb, nT * c, acc, pb, s))) return rc;
        }
        if (gsig) {
            k_lr_dot<<<LR_SIGB, NT, 0, s>>>(E, S0, nT * A_ * r, acc, ps);
            LK_LAUNCHED("lokr_lr_dot");
        }
    }
    if (need1 && ((rc = fin(p1, q1, sm, a->sigma, a->ct, G1, nv, 0, s)) || (rc = lokr_chain_w1(a, &h, G1, s)))) return rc;
    if (a->gw2a.p && (rc = fin(pa, qa, sm, a->sigma, a->ct, NULL, a->gw2a, 1, s))) return rc;
    if (a->gw2b.p && (rc = fin(pb, qb, sm, a->sigma, a->ct, NULL, a->gw2b, 0, s))) return rc;
    if (gsig && (rc = lokr_sum_store(ps, LR_SIGB, a->gsigma, sm, s))) return rc;
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

int lokr_lr_bypass_fwd(const lk_lokr_args *a, cudaStream_t s) {
    if (a->T == 0) return LYCO_OK;
    return with_scratch(a, s, true);
}

int lokr_lr_bypass_bwd(const lk_lokr_args *a, cudaStream_t s) {
    return with_scratch(a, s, false); /* T > 0 (lokr_lr_bwd_ok) */
}
