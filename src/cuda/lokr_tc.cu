/*
 * lokr_tc.cu — LoKr linear bypass (ALGORITHMS.md §2.3) with a plain low-rank W2 = w2_a·w2_b
 * (b×r · r×d, not Tucker, not full; W1 full or w1_a·w1_b) on the tensor cores, through the LoRA
 * streaming kernels of lowrank.cu (kern_lowrank.h: lk_reduce_parts, lk_expand, lk_colreduce).
 *
 * x (T×I, I = c·d) is viewed as X (T·c)×d (row t·c + p = x[t, p·d : (p+1)·d]), y / y0 / dy (T×O,
 * O = a·b) as (T·a)×b, dx as (T·c)×d; these views exist when the token stride is I (resp. O)
 * times the channel stride (always for row-major activations). W̃1 = RN_f32(s·m·σs·W1) a×c
 * (lokr_halves_build_w1: fp64 W1 as src/cpu/lokr.c forms it). Every big operand and the factors
 * are rounded to the compute dtype CT as the LoRA kernels load them; the small per-token
 * intermediates stay fp32 (src/cpu/lokr.c keeps H = X·W2ᵀ in fp32, never rounded to CT) and enter
 * the 16-bit products as exact CT parts (p_split / b_split).
 *   forward:  h = X·w2_bᵀ            (T·c)×r   lk_reduce_parts (fp32 partials, summed in z order
 *             g[t·a+i] = Σ_p W̃1[i,p]·h[t·c+p]   (T·a)×r   by k_tc_mix as it forms g: fp32, p ascending)
 *             Y = RN_CT(Y0) + g·w2_aᵀ  (T·a)×b   lk_expand (P = g in parts, Q = w2_aᵀ as a CT copy)
 *   backward: e = dY·w2_a (T·a)×r, h as above (k_tc_hsum sums the partials); f[t·c+p] = Σ_i W̃1[i,p]·e[t·a+i] (T·c)×r;
 *             g as above;
 *             dX = f·w2_b                                    lk_expand (P = f in parts, no base)
 *             G_w2a = dYᵀ·g (b×r), G_w2b = fᵀ·X (r×d)        lk_colreduce (B in parts)
 *             G_W1 = s·m·σs·Σ_{t,l} e[t·a+i, l]·h[t·c+p, l]  k_tc_gw1 (fp32 partials over token
 *                    ranges) then lokr_chain (fp64 sum, the w1 factor chain)
 *             dy0 = RN(RN_CT(dy)) or 0 (delta-only)          lk_copy_round (16-byte chunks)
 *   G_σs is not done here: calls that ask for it take lokr_lowrank.cu (its fp64 sum cancels).
 * Scratch (stream-ordered, one carve): h, f (T·c·RP fp32), e, g (T·a·RP fp32), as needed; w2_aᵀ
 * (r·b CT), G_W1 partials and G_W1 (fp64 a·c), W1's half (lokr_halves_build_w1), plus the LoRA
 * kernels' own partials (RP = the rank tile 16/32/64/128).
 * Eligibility (lokr_tc_fwd_ok / lokr_tc_bwd_ok): not legacy, LYCO_CUDA_LOKR_NO_TC unset, linear,
 * plain low-rank W2, r ≤ 128, 16-bit CT, the activation views above, lk_expand_fits; anything
 * else takes lokr_lowrank.cu or lokr_bypass.cu. Deterministic: no atomics; splits depend on the
 * shape (and, inside lowrank.cu, the SM count) only.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/kern_lowrank.h"
#include "cuda/lokr_common.cuh"

#define TC_GRID_CAP 65535
#define TC_GW1_BLOCKS 1024 /* k_tc_gw1: target blocks (token splits × output blocks) */

static unsigned tc_grid(i64 total) {
    i64 g = cdiv(total, NT);
    if (g > TC_GRID_CAP) g = TC_GRID_CAP;
    return (unsigned)(g > 0 ? g : 1);
}

/* h[m·rp + l] = Σ_z part[(z·M + m)·rp + l]  (z ascending) */
__global__ __launch_bounds__(NT) void k_tc_hsum(const float *part, i64 Z, i64 M, i64 rp, float *h) {
    const i64 n = M * rp;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n; idx += (i64)gridDim.x * NT) {
        float s = 0.0f;
        for (i64 z = 0; z < Z; z++) s += part[z * n + idx];
        h[idx] = s;
    }
}

/* out[(t·A + i)·rp + l] = Σ_{p < P} W[i·wi + p·wp]·h(t·P + p, l)  (fp32, p ascending), with
   h(m, l) = Σ_{z < Z} in[z·zs + m·rp + l] (z ascending: the partials of lk_reduce_parts, or Z = 1) */
__global__ __launch_bounds__(NT) void k_tc_mix(const float *in, i64 Z, i64 zs, i64 T, i64 A, i64 P, i64 rp, const float *W, i64 wi,
                                                i64 wp, float *out) {
    const i64 n = T * A * rp;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n; idx += (i64)gridDim.x * NT) {
        const i64 l = idx % rp, ti = idx / rp, i = ti % A, t = ti / A;
        const float *src = in + t * P * rp + l;
        float acc = 0.0f;
        for (i64 p = 0; p < P; p++) {
            float h = 0.0f;
            for (i64 z = 0; z < Z; z++) h += src[z * zs + p * rp];
            acc = fmaf(W[i * wi + p * wp], h, acc);
        }
        out[idx] = acc;
    }
}

/* part[z·A·P + i·P + p] = Σ_{t ∈ [z·tper, (z+1)·tper) ∩ [0, T)} Σ_{l < r} e[(t·A + i)·rp + l]·h[(t·P + p)·rp + l] */
__global__ __launch_bounds__(NT) void k_tc_gw1(const float *e, const float *h, i64 T, i64 A, i64 P, i64 rp, i64 r, i64 tper,
                                                float *part) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x, z = blockIdx.y;
    if (idx >= A * P) return;
    const i64 i = idx / P, p = idx % P, t0 = z * tper, t1 = t0 + tper < T ? t0 + tper : T;
    float acc = 0.0f;
    for (i64 t = t0; t < t1; t++) {
        const float *er = e + (t * A + i) * rp, *hr = h + (t * P + p) * rp;
        for (i64 l = 0; l < r; l++) acc = fmaf(er[l], hr[l], acc);
    }
    part[z * A * P + idx] = acc;
}

/* dst (r×b, CT, row-major) = RN_CT(w2_a)ᵀ */
__global__ __launch_bounds__(NT) void k_tc_transpose(lk_view w2a, i64 b, i64 r, lk_view dst, int ct) {
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < r * b; idx += (i64)gridDim.x * NT) {
        const i64 l = idx / b, j = idx % b;
        vstore(dst, l, j, round_to(vload(w2a, j, l), ct));
    }
}

/* ---- host ---- */

static lk_view none_view() {
    lk_view v;
    memset(&v, 0, sizeof v);
    return v;
}

static void set_vec_flags(lk_view *v, int unaligned) {
    const i64 es = v->dt == DT_F32 ? 4 : 2;
    v->flags = 0;
    if (unaligned) v->flags = LK_UNALIGNED;
    else if (v->s1 == 1 && (uintptr_t)v->p % 16 == 0 && (v->rows <= 1 || (v->s0 * es) % 16 == 0)) v->flags = LK_VEC;
}

/* The activation (T × G·L, element (t, ch) at t·sn + ch·sc) as a (T·G)×L matrix; false when the
   token stride is not G·L channel strides (absent: an absent view, true). */
static bool act_view(const lk_act &v, i64 T, i64 G, i64 L, lk_view *out) {
    *out = none_view();
    if (!v.p) return true;
    if (T > 1 && v.sn != G * L * v.sc) return false;
    out->p = v.p;
    out->rows = T * G;
    out->cols = L;
    out->s1 = L > 1 ? v.sc : 1;
    out->s0 = L * v.sc;
    out->dt = v.dt;
    set_vec_flags(out, v.flags & LK_UNALIGNED);
    return true;
}

/* fp32 scratch M×r with row pitch rp (p may still be NULL: sizing / eligibility) */
static lk_view f32_view(const float *p, i64 M, i64 r, i64 rp) {
    lk_view v = none_view();
    v.p = p;
    v.rows = M;
    v.cols = r;
    v.s0 = rp;
    v.s1 = 1;
    v.dt = DT_F32;
    v.flags = LK_VEC; /* scratch is 256-byte aligned, rp·4 a multiple of 16 */
    return v;
}

/* the CT copy of w2_aᵀ (r×b) */
static lk_view w2at_view(const void *p, const lk_lokr_args *a) {
    lk_view v = none_view();
    v.p = p;
    v.rows = a->r;
    v.cols = a->b;
    v.s0 = a->b;
    v.s1 = 1;
    v.dt = a->ct;
    set_vec_flags(&v, 0); /* p: 256-byte aligned scratch (NULL while sizing / checking) */
    return v;
}

/* expand: out (M×N) = RN_CT(base) + P·Q with P fp32 M×r in parts (row pitch rp), Q r×N */
static lk_expand_args expand_of(const lk_lokr_args *a, const lk_view &P, const lk_view &Q, const lk_view &base, const lk_view &out) {
    lk_expand_args e;
    memset(&e, 0, sizeof e); /* fields not named here: off */
    e.ct = a->ct;
    e.M = out.rows;
    e.N = out.cols;
    e.r = a->r;
    e.P = P;
    e.p_split = 1;
    e.Q = Q;
    e.q_t = 0;
    e.base = base;
    e.out = out;
    e.row_scale = 1.0;
    e.mult = 1.0;
    e.mode = base.p ? 0 : 1;
    e.K = 1;
    return e;
}

static bool tc_common_ok(const lk_lokr_args *a) {
    const char *off = getenv("LYCO_CUDA_LOKR_NO_TC");
    if (off && off[0] == '1') return false;
    return !a->legacy && a->geo.nd == 0 && a->K == 1 && a->ct != DT_F32 && !a->w2_full && !a->tucker && a->r >= 1 &&
           lk_reduce_rank_tile(a->r) != 0 && a->a >= 1 && a->b >= 1 && a->c >= 1 && a->d >= 1 && a->T >= 1;
}

struct tc_views {
    lk_view x, y, y0, dy, dx, dy0;
};

static bool views_of(const lk_lokr_args *a, tc_views *v) {
    const i64 T = a->T;
    return act_view(a->x, T, a->c, a->d, &v->x) && act_view(a->y, T, a->a, a->b, &v->y) &&
           act_view(a->y0, T, a->a, a->b, &v->y0) && act_view(a->dy, T, a->a, a->b, &v->dy) &&
           act_view(a->dx, T, a->c, a->d, &v->dx) && act_view(a->dy0, T, a->a, a->b, &v->dy0);
}

bool lokr_tc_fwd_ok(const lk_lokr_args *a, const lk_device *dev) {
    tc_views v;
    if (!tc_common_ok(a) || !views_of(a, &v) || !v.x.p || !v.y.p) return false;
    const i64 rp = lk_reduce_rank_tile(a->r);
    const lk_expand_args e = expand_of(a, f32_view(NULL, a->T * a->a, a->r, rp), w2at_view(NULL, a), v.y0, v.y);
    return lk_expand_fits(&e, dev) != 0;
}

bool lokr_tc_bwd_ok(const lk_lokr_args *a, const lk_device *dev) {
    tc_views v;
    if (!tc_common_ok(a) || a->gsigma.p || a->gw2.p || a->gt2.p || !views_of(a, &v) || !v.x.p || !v.dy.p) return false;
    if (a->a * a->c > 2147483647LL) return false;
    if (!v.dx.p) return true;
    const i64 rp = lk_reduce_rank_tile(a->r);
    const lk_expand_args e = expand_of(a, f32_view(NULL, a->T * a->c, a->r, rp), a->w2b, none_view(), v.dx);
    return lk_expand_fits(&e, dev) != 0;
}

/* A·Bᵀ (M×rp) through lk_reduce_parts, then either h = the fixed-order sum of its partials (W NULL)
   or straight out = W-mix of it (k_tc_mix over the partials; T tokens of P rows into TA rows each) */
struct tc_mixw {
    const float *W;
    i64 T, TA, P, wi, wp;
};
static int reduce_to(const lk_lokr_args *a, const lk_view &A, const lk_view &B, i64 M, i64 K, i64 rp, const tc_mixw &mw,
                     float *out, const lk_device *dev, cudaStream_t s) {
    float *part = NULL;
    int64_t Z = 0;
    int rc = lk_reduce_parts(a->ct, &A, &B, 0, M, K, rp, &part, &Z, dev, s);
    if (rc == LYCO_OK) {
        if (mw.W) k_tc_mix<<<tc_grid(mw.T * mw.TA * rp), NT, 0, s>>>(part, Z, M * rp, mw.T, mw.TA, mw.P, rp, mw.W, mw.wi, mw.wp, out);
        else k_tc_hsum<<<tc_grid(M * rp), NT, 0, s>>>(part, Z, M, rp, out);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) rc = lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of lokr_tc_hsum / mix failed: %s", cudaGetErrorString(e));
    }
    const int rf = part ? lk_scratch_free(part, s) : LYCO_OK;
    return rc ? rc : rf;
}

static int mix(const float *in, i64 T, i64 A, i64 P, i64 rp, const float *W, i64 wi, i64 wp, float *out, cudaStream_t s) {
    k_tc_mix<<<tc_grid(T * A * rp), NT, 0, s>>>(in, 1, 0, T, A, P, rp, W, wi, wp, out);
    LK_LAUNCHED("lokr_tc_mix");
    return LYCO_OK;
}

static int transpose_w2a(const lk_lokr_args *a, const lk_view &dst, cudaStream_t s) {
    k_tc_transpose<<<tc_grid(a->r * a->b), NT, 0, s>>>(a->w2a, a->b, a->r, dst, a->ct);
    LK_LAUNCHED("lokr_tc_transpose");
    return LYCO_OK;
}

static float *take_f(lk_carve &cv, bool need, i64 n) { return (float *)carve_take(cv, need ? (size_t)n * 4 : 0); }

static int fwd_body(const lk_lokr_args *a, const lk_device *dev, lk_carve &cv, cudaStream_t s) {
    const i64 T = a->T, c = a->c, A_ = a->a, rp = lk_reduce_rank_tile(a->r), M1 = T * c, M2 = T * A_;
    float *g = take_f(cv, true, M2 * rp);
    void *w2at = carve_take(cv, (size_t)(a->r * a->b) * 2);
    lokr_halves hv;
    int rc = lokr_halves_build_w1(a, cv, &hv, s);
    if (rc || !cv.base) return rc;
    tc_views v;
    views_of(a, &v); /* true: lokr_tc_fwd_ok */
    const lk_view qt = w2at_view(w2at, a);
    if ((rc = transpose_w2a(a, qt, s))) return rc;
    const tc_mixw mw = {hv.W1s, T, A_, c, c, 1};
    if ((rc = reduce_to(a, v.x, a->w2b, M1, a->d, rp, mw, g, dev, s))) return rc;    /* g = W̃1·h_t, h = X·w2_bᵀ */
    const lk_expand_args e = expand_of(a, f32_view(g, M2, a->r, rp), qt, v.y0, v.y);  /* Y = RN(Y0) + g·w2_aᵀ */
    return lk_expand(&e, dev, s);
}

static int bwd_body(const lk_lokr_args *a, const lk_device *dev, lk_carve &cv, cudaStream_t s) {
    const i64 T = a->T, c = a->c, A_ = a->a, b = a->b, d = a->d, r = a->r, rp = lk_reduce_rank_tile(r), M1 = T * c, M2 = T * A_;
    const bool need1 = a->gw1.p || a->gw1a.p || a->gw1b.p, needh = need1 || a->gw2a.p, needf = a->gw2b.p || a->dx.p;
    const bool neede = need1 || needf;
    const i64 ac = A_ * c, bx = cdiv(ac, NT);
    i64 z1 = TC_GW1_BLOCKS / bx;
    if (z1 > T) z1 = T;
    if (z1 > 65535) z1 = 65535;
    if (z1 < 1) z1 = 1;
    const i64 tper = cdiv(T, z1);
    z1 = cdiv(T, tper);
    float *h = take_f(cv, needh, M1 * rp), *e = take_f(cv, neede, M2 * rp);
    float *g = take_f(cv, a->gw2a.p != NULL, M2 * rp), *f = take_f(cv, needf, M1 * rp);
    float *pw1 = take_f(cv, need1, z1 * ac);
    void *w2at = carve_take(cv, neede ? (size_t)(r * b) * 2 : 0);
    lokr_grads gr = {(double *)carve_take(cv, need1 ? (size_t)ac * 8 : 0), NULL, NULL}; /* G_W1 only */
    lokr_halves hv;
    int rc = lokr_halves_build_w1(a, cv, &hv, s);
    if (rc || !cv.base) return rc;
    tc_views v;
    views_of(a, &v); /* true: lokr_tc_bwd_ok */
    const lk_view nv = none_view();
    if (v.dy0.p && (rc = lk_copy_round(&v.dy0, a->dy0_zero ? NULL : &v.dy, a->ct, s))) return rc;
    const tc_mixw sum = {NULL, 0, 0, 0, 0, 0};
    if (needh && (rc = reduce_to(a, v.x, a->w2b, M1, d, rp, sum, h, dev, s))) return rc; /* h = X·w2_bᵀ */
    const lk_view qt = w2at_view(w2at, a);
    if (neede && ((rc = transpose_w2a(a, qt, s)) || (rc = reduce_to(a, v.dy, qt, M2, b, rp, sum, e, dev, s))))
        return rc;                                                                     /* e = dY·w2_a */
    if (need1) {                                                                       /* G_W1 */
        k_tc_gw1<<<dim3((unsigned)bx, (unsigned)z1), NT, 0, s>>>(e, h, T, A_, c, rp, r, tper, pw1);
        LK_LAUNCHED("lokr_tc_gw1");
        if ((rc = lokr_chain(a, &hv, &gr, pw1, z1, NULL, 0, a->s * a->m, a->sigma, s))) return rc;
    }
    if (a->gw2a.p) {                                                                   /* G_w2a = dYᵀ·g */
        const lk_view gv = f32_view(g, M2, r, rp);
        if ((rc = mix(h, T, A_, c, rp, hv.W1s, c, 1, g, s)) ||
            (rc = lk_colreduce(a->ct, &v.dy, &gv, 1, M2, b, r, &a->gw2a, 1, 1.0f, &nv, dev, s)))
            return rc;
    }
    if (!needf) return LYCO_OK;
    const lk_view fv = f32_view(f, M1, r, rp);
    if ((rc = mix(e, T, c, A_, rp, hv.W1s, 1, c, f, s))) return rc;                   /* f = W̃1ᵀ·e_t */
    if (a->gw2b.p && (rc = lk_colreduce(a->ct, &v.x, &fv, 1, M1, d, r, &a->gw2b, 0, 1.0f, &nv, dev, s))) return rc; /* fᵀ·X */
    if (v.dx.p) {                                                                      /* dX = f·w2_b */
        const lk_expand_args ex = expand_of(a, fv, a->w2b, nv, v.dx);
        if ((rc = lk_expand(&ex, dev, s))) return rc;
    }
    return LYCO_OK;
}

static int with_scratch(const lk_lokr_args *a, const lk_device *dev, cudaStream_t s, bool fwd) {
    lk_carve cv = {0, NULL};
    int rc = fwd ? fwd_body(a, dev, cv, s) : bwd_body(a, dev, cv, s); /* sizing pass */
    if (rc) return rc;
    size_t bytes = cv.off;
    cv.off = 0;
    if ((rc = lk_scratch_alloc((void **)&cv.base, bytes, s))) return rc;
    rc = fwd ? fwd_body(a, dev, cv, s) : bwd_body(a, dev, cv, s);
    int rf = lk_scratch_free(cv.base, s);
    return rc ? rc : rf;
}

int lokr_tc_bypass_fwd(const lk_lokr_args *a, const lk_device *dev, cudaStream_t s) { return with_scratch(a, dev, s, true); }

int lokr_tc_bypass_bwd(const lk_lokr_args *a, const lk_device *dev, cudaStream_t s) { return with_scratch(a, dev, s, false); }
