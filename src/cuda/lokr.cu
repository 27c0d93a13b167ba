/*
 * lokr.cu — LoKr (ALGORITHMS.md §2.3) on the GPU: merge forward/backward (linear and conv, W1
 * full or w1_a·w1_b, W2 full, w2_a·w2_b or Tucker, rank mask, σs, the upstream s² merge scale,
 * DoRA on both axes through merge_ep.cuh) and bypass forward/backward (lokr_bypass.cu).
 *
 *   ΔW̄[i·b+j, p·dK+n] = ρ_o·W1[i,p]·W2[j,n],  o = i·b+j,  ρ_o = s'·q_o,  dK = d·K,  IK = I·K
 *   (s' = s, or s² with the upstream merge scale, which also drops σs).
 *
 * Numerics follow the fused CPU path (src/cpu/lokr.c): every factor is rounded to the compute
 * dtype CT as it is read; the halves W1 (a×c) and W2 (b×dK) and their gradient chains are
 * formed in fp64 (they are small: a·c + b·dK elements against ΔW's a·c·b·dK) and W2 is rounded
 * once to fp32; an element of ΔW̄ is dl = RN_f32(ρ_o·W1[i,p])·W2f[j,n] (one fp32 multiply), the
 * producer's dW = σs·dl; the merge epilogue (plain or DoRA) is merge_ep.cuh's.
 *
 * Memory: the halves are built once per call in stream-ordered scratch (W1 a×c doubles, W2 b×dK
 * doubles + fp32 copy, the factors as fp64 copies, Tucker's P = t2 ×₂ w2_b r×dK doubles) —
 * ΔW itself is never built: each element is produced in registers where it is consumed.
 *
 * merge forward: one pass over W/out, 8 columns per thread (16-byte vector loads/stores where
 *   the views allow), grid-stride; the common case (16-bit views, d·K % 8 == 0, no DoRA) on the
 *   flat k_lokr_merge_fwd_vec (one chunk per thread, no grid stride), and without Tucker in one launch
 *   with the halves formed in the kernel (k_lokr_merge_fwd_fused, no scratch); DoRA: merge_ep.cuh's two-pass statistics with the LoKr
 *   producer (lokr_delta: the dW tile written into shared memory), then the same pass.
 * merge backward (Γ = m·RN_CT(G), or DoRA's ∂L/∂V; H = σs·Γ):
 *   G_W1[i,p] = Σ_{j,n} ρ_o·H[o, p·dK+n]·W2[j,n]    block per (i,p) × a split of the j range,
 *                                                      fixed-order block sums → fp32 partials
 *   G_σs      = Σ Γ·dl                                 (same blocks; partials summed in order)
 *   G_W2[j,n] = Σ_{i,p} RN_f32(ρ_o·W1[i,p])·H[o, p·dK+n]   thread per (j,n) × a split of the i
 *                                                      range → fp32 partials
 *   Default (unless LYCO_CUDA_LOKR_LEGACY=1, or c > MB_AC): both in ONE pass over G,
 *   k_lokr_mb_one — thread per (j,n) × a split of the i range (iper·c ≤ MB_AC), the G_W2 sum in a
 *   register, the G_W1[i,p] terms warp-reduced into shared memory and summed over the warps in
 *   order (fp32 partials per (j,n)-block), G_σs per block; without DoRA, with d·K % 8 == 0 and G in
 *   16-byte vectors its vector form k_lokr_mb_vec (thread per 8 elements of a row j, one 16-byte
 *   load of G per (i,p), the blocks split over (i,p) pairs rather than rows i);
 *   then the fixed-order finalisation (fp64) and the factor chain in fp64, one thread per
 *   output element, each gradient rounded once to its own dtype. Deterministic: no atomics,
 *   split counts depend on the shape only. Extra memory: the halves, z₁·a·c (×2 with σs) +
 *   z₂·b·dK fp32 partials, G_W1 / G_W2 (and Tucker's G_P) in fp64.
 */
#include "cuda/lokr_common.cuh"

/* =============================================================================================
 * the producer: a tile of dW = σs·ΔW̄ (for merge_ep.cuh's DoRA statistics)
 * =========================================================================================== */
template <typename CT, int BM, int BN, int WM> struct lokr_delta {
    typedef lokr_dev args_t;
    static const int LDC = BN + 4;
    static const int SMEM_U = 0, SMEM_IN = 0;
    static const int SMEM_C = BM * LDC * 4;
    /* Leaves Cs valid for every thread (synchronises before writing and after). */
    static __device__ void run(const lokr_dev &A, i64 o0, i64 j0, CT *, CT *, float *Cs, float *, float sig) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < BM * BN; idx += NT) {
            int rr = idx / BN, cc = idx % BN;
            i64 o = o0 + rr, j = j0 + cc;
            Cs[rr * LDC + cc] = (o < A.O && j < A.IK) ? sig * lokr_dl(A, o, j) : 0.0f;
        }
        __syncthreads();
    }
};

/* =============================================================================================
 * merge forward
 * =========================================================================================== */
/* IX: the index type — int when O·IK and the chunk count fit (the 64-bit divisions per 8-column
   chunk were a large share of the work), i64 otherwise. RN_f32(ρ_o·W1[i,p]) is formed once per
   chunk and again only where p steps (the same value as per element). */
template <typename IX>
__global__ __launch_bounds__(NT) void k_lokr_merge_fwd(lokr_dev A, lk_view W, lk_view out, int mode, lk_dora dr, const float *st) {
    const IX IK = (IX)A.IK, dK = (IX)A.dK, nch = (IX)cdiv(A.IK, 8), total = (IX)A.O * nch, b = (IX)A.b, c = (IX)A.c;
    const float sig = A.sigma.p ? round_to(vload(A.sigma, 0, 0), A.ct) : 1.0f, mf = (float)A.m;
    const bool dora = dr.on != 0;
    for (IX q = (IX)blockIdx.x * NT + (IX)threadIdx.x; q < total; q += (IX)gridDim.x * NT) {
        const IX o = q / nch, c0 = (q % nch) * 8;
        float w[8], o8[8];
        if (W.p) {
            vload8(w, W, o, c0);
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) w[e] = 0.0f;
        }
        const IX i = o / b, jr = o % b;
        const double rho = lokr_rho(A, o);
        IX p = c0 / dK, n = c0 % dK; /* walked along the 8 columns */
        const float *w2row = A.W2f + (i64)jr * dK;
        float w1s = p < c ? (float)(rho * A.W1d[(i64)i * c + p]) : 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const IX col = c0 + e;
            float dw = 0.0f;
            const float *s3 = NULL;
            if (col < IK) {
                dw = sig * (w1s * w2row[n]);
                if (dora) s3 = st + 3 * dora_kept(dr, o, col, A.K);
            } else if (dora) {
                s3 = st;
            }
            if (++n == dK) {
                n = 0;
                p++;
                if (p < c) w1s = (float)(rho * A.W1d[(i64)i * c + p]);
            }
            o8[e] = merge_elem(round_to(w[e], A.ct), dw, mode, mf, dora, s3);
        }
        vstore8(out, o, c0, o8);
    }
}

/* The common case of the merge forward on its own kernel: W (if any) and out in the 16-bit compute
   dtype CT, row-major with 16-byte aligned rows, d·K a multiple of 8 (a chunk of 8 columns never
   crosses a W1 column p), no DoRA. Block (x, o): chunks x·NT + t of row o, no grid stride and no
   division per chunk beyond one (p, n) split; W2f's 8 values as two 16-byte loads; the same
   arithmetic as k_lokr_merge_fwd (dw = σ'·(RN_f32(ρ_o·W1[i,p])·W2f[j,n]), merge_elem, RN_CT).
   Why: k_lokr_merge_fwd (generic views, dtype, DoRA and 8-column p walks in the loop) streamed the
   4096² rows at 1.7 TB/s (38.5 µs, docs/kernels.md "twelfth session"); a flat 16-byte pattern with
   consecutive threads on consecutive chunks of one row is the pattern tools/stream_probe.cu
   measured at the copy rate (docs/kernels.md "seventeenth session"). H200, the bench's 4096² rows
   (ncu, same binary): 47.5 µs → 18.9 µs (3.55 TB/s, 51 % of DRAM peak); results bitwise the
   generic kernel's (check --hash). LYCO_CUDA_LOKR_MF_VEC=0 keeps the generic kernel (A/B). */
template <typename CT>
__global__ __launch_bounds__(NT) void k_lokr_merge_fwd_vec(lokr_dev A, lk_view W, lk_view out, int mode) {
    const int nch = (int)(A.IK / 8), ch = (int)blockIdx.x * NT + (int)threadIdx.x;
    if (ch >= nch) return;
    const i64 o = blockIdx.y;
    const int dK = (int)A.dK, c0 = ch * 8, p = c0 / dK, n = c0 - p * dK;
    const i64 i = o / A.b, jr = o - i * A.b;
    const float sig = A.sigma.p ? round_to(vload(A.sigma, 0, 0), A.ct) : 1.0f, mf = (float)A.m;
    const float w1s = (float)(lokr_rho(A, o) * A.W1d[i * A.c + p]);
    const float4 *w2 = (const float4 *)(A.W2f + jr * dK + n);
    const float4 v0 = w2[0], v1 = w2[1];
    const float w2v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    float w[8];
    if (W.p) unpack8_16(w, *(const uint4 *)((const char *)W.p + (o * W.s0 + c0) * 2), ct_of<CT>::dt);
    else
#pragma unroll
        for (int e = 0; e < 8; e++) w[e] = 0.0f;
    float r[8];
#pragma unroll
    for (int e = 0; e < 8; e++) r[e] = merge_elem(w[e], sig * (w1s * w2v[e]), mode, mf, false, NULL);
    *(uint4 *)((char *)out.p + (o * out.s0 + c0) * 2) = pack8_16(r, ct_of<CT>::dt);
}

static bool lokr_mf_vec_ok(const lk_lokr_args *a) {
    const char *v = getenv("LYCO_CUDA_LOKR_MF_VEC");
    if (v && v[0] == '0') return false;
    const int ct = a->ct;
    const bool vec_out = a->out.dt == ct && (a->out.flags & LK_VEC) && a->out.s1 == 1;
    const bool vec_w = !a->W.p || (a->W.dt == ct && (a->W.flags & LK_VEC) && a->W.s1 == 1);
    const i64 dK = a->d * a->K;
    return (ct == DT_BF16 || ct == DT_F16) && vec_out && vec_w && !a->dora.on && dK % 8 == 0 && a->O <= 65535 &&
           a->I * a->K / 8 < 2147483647LL / NT && a->mode >= 0 && a->mode <= 2;
}

/* The same common case in ONE launch, without the halves (no scratch, no other kernel): block
   (x, j, z) takes W2 row j, columns n ∈ [x·8·tps, …) of every W1 column block p, and the (i, p)
   pairs [z·ppb, …) (z: about 8 blocks per SM in all with a full W2, 4 with a factored one). The
   block first forms the 8·tps values W2f[j, n…] it needs, one per thread, into shared memory — in
   fp64 in k order from the factors rounded to CT and rounded once to fp32, as lokr_halves_build's
   k_lokr_load / k_lokr_dmm / k_lokr_w2f form them (products of two 16-bit values are exact in
   fp64, so FMA or not, the sums are the same) — and, for a factored W1, its pairs' W1d[i, p]
   (≤ LOKR_W1_SMEM of them, fp64). Then thread (pair slot, lane) walks its pairs: 16-byte loads of
   W at row o = i·b + j, columns p·dK + n (LU pairs in flight), the vector kernel's arithmetic,
   16-byte stores. tps (threads per 8·tps-column segment) = the power of two ≥ dK / 8, at most 32:
   one segment is 16·tps contiguous bytes of a row. Results bitwise the vector kernel's.
   Why (H200, bf16, 4096², docs/kernels.md, nineteenth and twentieth sessions): the halves took
   3–5 launches of 2.6–7.4 µs plus their host gaps beside the 18.9 µs stream; in one launch f8 w2
   r16 takes 43 µs (65–84 with the halves) and 64×64 full 31 µs (63–79). The per-block formation
   is ~20 of those 43 µs; three other ways to form W2f measured slower (per thread: 205 µs; a
   separate fill kernel into scratch: 54 µs; the k loop unrolled in this kernel: 64 µs, its
   registers slowing the streaming loop). Needs W (if any) and out as the vector kernel does, no
   Tucker (its P chain stays in lokr_halves.cu), b and the z split within the grid.
   LYCO_CUDA_LOKR_MF_FUSED=0 keeps the halves and the vector kernel (A/B). */
struct lokr_fused_args {
    lokr_dev A; /* sizes, s', m, σs, the row mask (W1d, W2f unused) */
    lk_view w1, w1a, w1b, w2, w2a, w2b, W, out;
    i64 r;
    int32_t w1_full, w2_full, mode, tps, ppb;
};
const int LOKR_LU = 4;           /* pairs in flight per thread */
const int LOKR_W1_SMEM = 512;    /* a factored W1: the block's pairs' W1d in shared memory (fp64) */

__device__ __forceinline__ double lokr_w1d_at(const lokr_fused_args &F, i64 i, i64 p) {
    const int ct = F.A.ct;
    if (F.w1_full) return (double)round_to(vload(F.w1, i, p), ct);
    double acc = 0.0;
    for (i64 k = 0; k < F.r; k++) acc += (double)round_to(vload(F.w1a, i, k), ct) * (double)round_to(vload(F.w1b, k, p), ct);
    return acc;
}
__device__ __forceinline__ float lokr_w2f_at(const lokr_fused_args &F, i64 j, i64 n) {
    const int ct = F.A.ct;
    if (F.w2_full) return (float)(double)round_to(vload(F.w2, j, n), ct);
    double acc = 0.0;
    for (i64 k = 0; k < F.r; k++) acc += (double)round_to(vload(F.w2a, j, k), ct) * (double)round_to(vload(F.w2b, k, n), ct);
    return (float)acc;
}

template <typename CT> __global__ __launch_bounds__(NT) void k_lokr_merge_fwd_fused(lokr_fused_args F) {
    __shared__ float w2s[32 * 8]; /* W2f[j, x·8·tps …): 8·tps ≤ 256 values */
    __shared__ double w1s_all[LOKR_W1_SMEM];
    const lokr_dev &A = F.A;
    const int tps = F.tps, spb = NT / tps, slot = (int)threadIdx.x / tps;
    const i64 j = blockIdx.y, nb = (i64)blockIdx.x * tps * 8, n = nb + ((int)threadIdx.x % tps) * 8;
    const i64 npairs = A.a * A.c, q0 = (i64)blockIdx.z * F.ppb, q1 = q0 + F.ppb < npairs ? q0 + F.ppb : npairs;
    /* the block's W2f values and (factored W1) its pairs' W1d, each formed once by one thread */
    for (int t = threadIdx.x; t < tps * 8; t += NT)
        if (nb + t < A.dK) w2s[t] = lokr_w2f_at(F, j, nb + t);
    if (!F.w1_full)
        for (i64 q = q0 + threadIdx.x; q < q1; q += NT) w1s_all[q - q0] = lokr_w1d_at(F, q / A.c, q % A.c);
    __syncthreads();
    if (n >= A.dK) return; /* no barrier below; dK % 8 == 0: a chunk is whole */
    float w2v[8];
#pragma unroll
    for (int e = 0; e < 8; e++) w2v[e] = w2s[n - nb + e];
    const float sig = A.sigma.p ? round_to(vload(A.sigma, 0, 0), A.ct) : 1.0f, mf = (float)A.m;
    for (i64 qb = q0 + slot; qb < q1; qb += (i64)spb * LOKR_LU) {
        uint4 wv[LOKR_LU];
#pragma unroll
        for (int u = 0; u < LOKR_LU; u++) {
            const i64 q = qb + (i64)u * spb, i = q / A.c, p = q - i * A.c;
            wv[u] = make_uint4(0u, 0u, 0u, 0u);
            if (q < q1 && F.W.p) wv[u] = *(const uint4 *)((const char *)F.W.p + ((i * A.b + j) * F.W.s0 + p * A.dK + n) * 2);
        }
#pragma unroll
        for (int u = 0; u < LOKR_LU; u++) {
            const i64 q = qb + (i64)u * spb, i = q / A.c, p = q - i * A.c, o = i * A.b + j;
            if (q >= q1) break;
            const double w1d = F.w1_full ? lokr_w1d_at(F, i, p) : w1s_all[q - q0];
            const float w1s = (float)(lokr_rho(A, o) * w1d);
            float w[8], r[8];
            unpack8_16(w, wv[u], ct_of<CT>::dt);
#pragma unroll
            for (int e = 0; e < 8; e++) r[e] = merge_elem(w[e], sig * (w1s * w2v[e]), F.mode, mf, false, NULL);
            *(uint4 *)((char *)F.out.p + (o * F.out.s0 + p * A.dK + n) * 2) = pack8_16(r, ct_of<CT>::dt);
        }
    }
}

/* The fused launch's plan: tps, the pair split (≥ ~8 blocks per SM where the pairs allow); false
   when the call is not its own. */
static bool lokr_mf_fused_plan(const lk_lokr_args *a, const lk_device *dev, lokr_fused_args *F, dim3 *grid) {
    const char *v = getenv("LYCO_CUDA_LOKR_MF_FUSED");
    if ((v && v[0] == '0') || a->legacy || a->tucker || !lokr_mf_vec_ok(a)) return false;
    const i64 dK = a->d * a->K, npairs = a->a * a->c;
    if (a->b < 1 || a->b > 65535 || npairs < 1 || dK < 8) return false;
    int tps = 1;
    while (tps < 32 && tps * 8 < dK) tps *= 2;
    const i64 spb = NT / tps, xs = cdiv(dK, 8 * tps);
    /* blocks per SM aimed at (the pair split z): each block forms its W2f values once, so with a
       factored W2 (r products per value) fewer, longer blocks amortise that — H200, bf16, 4096²,
       2026-12-02, 5d912e0, two rounds: f8 w2 r16 at 4 / 8 blocks per SM 42.8–43.7 / 53.3–53.8 µs,
       64×64 full W2 35.8–36.3 / 31.8–31.9 µs. LYCO_CUDA_LOKR_MF_BPS overrides (A/B) */
    const char *bps_env = getenv("LYCO_CUDA_LOKR_MF_BPS");
    const i64 bps = bps_env && atoi(bps_env) > 0 ? atoi(bps_env) : (a->w2_full ? 8 : 4);
    i64 z = cdiv((i64)dev->sms * bps, xs * a->b);
    if (z > cdiv(npairs, spb)) z = cdiv(npairs, spb);
    if (z < 1) z = 1;
    if (!a->w1_full && z < cdiv(npairs, LOKR_W1_SMEM)) z = cdiv(npairs, LOKR_W1_SMEM);
    const i64 ppb = cdiv(npairs, z);
    z = cdiv(npairs, ppb);
    if (xs > 2147483647LL || z > 65535 || ppb > 2147483647LL || (!a->w1_full && ppb > LOKR_W1_SMEM)) return false;
    memset(F, 0, sizeof *F);
    lokr_halves none;
    memset(&none, 0, sizeof none);
    F->A = lokr_dev_of(a, &none, true);
    F->w1 = a->w1;
    F->w1a = a->w1a;
    F->w1b = a->w1b;
    F->w2 = a->w2;
    F->w2a = a->w2a;
    F->w2b = a->w2b;
    F->W = a->W;
    F->out = a->out;
    F->r = a->r;
    F->w1_full = a->w1_full;
    F->w2_full = a->w2_full;
    F->mode = a->mode;
    F->tps = tps;
    F->ppb = (int32_t)ppb;
    *grid = dim3((unsigned)xs, (unsigned)a->b, (unsigned)z);
    return true;
}

/* =============================================================================================
 * merge backward
 * =========================================================================================== */
/* Γ at (o, col) from G (and, under DoRA, W and the statistics); dl = ΔW̄[o, col] without σs. */
__device__ __forceinline__ float lokr_gamma(const lokr_dev &A, const lk_view &G, const lk_view &W, const lk_dora &dr,
                                            const float *st, float sig, i64 o, i64 col, float dl) {
    const float g = round_to(vload(G, o, col), A.ct);
    if (!dr.on) return (float)A.m * g;
    const float w = round_to(vload(W, o, col), A.ct);
    return dora_gv(g, w, sig * dl, st + 3 * dora_kept(dr, o, col, A.K), A.ct);
}

/* G_W1 and G_σs partials: block (ip = i·c + p, z) reduces rows j ∈ [z·jper, (z+1)·jper). */
__global__ __launch_bounds__(NT) void k_lokr_mb_w1(lokr_dev A, lk_view G, lk_view W, lk_dora dr, const float *st,
                                                   i64 jper, float *pw1, double *psig) {
    __shared__ float red[NT / 32];
    const i64 ac = A.a * A.c, ip = blockIdx.x, z = blockIdx.y;
    const i64 i = ip / A.c, p = ip % A.c;
    const i64 j0 = z * jper, j1 = j0 + jper < A.b ? j0 + jper : A.b;
    const i64 nel = (j1 > j0 ? j1 - j0 : 0) * A.dK;
    const float sig = A.sigma.p ? round_to(vload(A.sigma, 0, 0), A.ct) : 1.0f;
    const double w1 = A.W1d[ip];
    float acc = 0.0f, sacc = 0.0f;
    for (i64 e = threadIdx.x; e < nel; e += NT) {
        const i64 j = j0 + e / A.dK, n = e % A.dK, o = i * A.b + j, col = p * A.dK + n;
        const double rho = lokr_rho(A, o);
        const float w2 = A.W2f[j * A.dK + n], dl = (float)(rho * w1) * w2;
        const float gam = lokr_gamma(A, G, W, dr, st, sig, o, col, dl);
        sacc = fmaf(gam, dl, sacc);
        acc = fmaf((float)rho, (gam * sig) * w2, acc);
    }
    const float s1 = block_sum(acc, red);
    const float s2 = psig ? block_sum(sacc, red) : 0.0f;
    if (threadIdx.x == 0) {
        pw1[z * ac + ip] = s1;
        if (psig) psig[z * ac + ip] = (double)s2;
    }
}

/* G_W2 partials: thread per (j, n), block row z covers i ∈ [z·iper, (z+1)·iper). */
__global__ __launch_bounds__(NT) void k_lokr_mb_w2(lokr_dev A, lk_view G, lk_view W, lk_dora dr, const float *st,
                                                   i64 iper, float *pw2) {
    const i64 n2 = A.b * A.dK, idx = (i64)blockIdx.x * NT + threadIdx.x, z = blockIdx.y;
    if (idx >= n2) return;
    const i64 j = idx / A.dK, n = idx % A.dK;
    const i64 i0 = z * iper, i1 = i0 + iper < A.a ? i0 + iper : A.a;
    const float sig = A.sigma.p ? round_to(vload(A.sigma, 0, 0), A.ct) : 1.0f;
    const float w2 = A.W2f[idx];
    float acc = 0.0f;
    for (i64 i = i0; i < i1; i++) {
        const i64 o = i * A.b + j;
        const double rho = lokr_rho(A, o);
        for (i64 p = 0; p < A.c; p++) {
            const i64 col = p * A.dK + n;
            const float w1s = (float)(rho * A.W1d[i * A.c + p]);
            const float gam = lokr_gamma(A, G, W, dr, st, sig, o, col, w1s * w2);
            acc = fmaf(w1s, gam * sig, acc);
        }
    }
    pw2[z * n2 + idx] = acc;
}

#define MB_AC 256 /* (i, p) slots per block of the one-pass kernels (their shared G_W1 terms) */
/* The one-pass kernels' G_W1 slot: a warp's term summed over its lanes (fixed shuffle tree) into
   this warp's row of sw1 (NT/32 rows of MB_AC); slot = sw1 + the (i, p) index within the block. */
__device__ __forceinline__ void mb_warp_put(float g1, float *slot) {
    for (int off = 16; off > 0; off >>= 1) g1 += __shfl_down_sync(0xffffffffu, g1, off);
    if (threadIdx.x % 32 == 0) slot[(threadIdx.x / 32) * MB_AC] = g1;
}

/* The one-pass kernels' block end: G_σs = the block sum of sacc → *psig_out (when given); the n
   G_W1 slots summed over the warps in order → pw1_out[0..n) (when given). Synchronises. */
__device__ __forceinline__ void mb_block_finish(float sacc, float *red, const float *sw1, i64 n, float *pw1_out,
                                                double *psig_out) {
    const float ssum = psig_out ? block_sum(sacc, red) : 0.0f; /* synchronises */
    __syncthreads();
    if (pw1_out)
        for (i64 e = threadIdx.x; e < n; e += NT) {
            float t = 0.0f;
            for (int w = 0; w < NT / 32; w++) t += sw1[w * MB_AC + e];
            pw1_out[e] = t;
        }
    if (psig_out && threadIdx.x == 0) *psig_out = (double)ssum;
}

/* One pass over G (not LYCO_CUDA_LOKR_LEGACY): thread per MB_PT elements (j, n) = idx, block row
   blockIdx.y covers i ∈ [y·iper, (y+1)·iper) (iper·c ≤ MB_AC). Per (i, p) the thread forms the same
   element terms as k_lokr_mb_w1 / k_lokr_mb_w2: its G_W2 sum over (i, p) stays in a register
   (→ pw2[y·n2 + idx]); its G_W1[i,p] term is summed over the warp (fixed shuffle tree) into
   shared memory, then over the 8 warps in order (→ pw1[x·ac + i·c + p], z₁ = gridDim.x); G_σs:
   fp32 per thread, block sum → psig[y·gridDim.x + x]. */
#define MB_PT 4 /* (j, n) elements per thread: idx = blockIdx.x·NT·MB_PT + u·NT + threadIdx.x */
__global__ __launch_bounds__(NT) void k_lokr_mb_one(lokr_dev A, lk_view G, lk_view W, lk_dora dr, const float *st, i64 iper,
                                                    float *pw1, double *psig, float *pw2) {
    __shared__ float sw1[(NT / 32) * MB_AC];
    __shared__ float red[NT / 32];
    const i64 n2 = A.b * A.dK, ac = A.a * A.c, z = blockIdx.y;
    const i64 i0 = z * iper, i1 = i0 + iper < A.a ? i0 + iper : A.a;
    const float sig = A.sigma.p ? round_to(vload(A.sigma, 0, 0), A.ct) : 1.0f;
    i64 idx[MB_PT], j[MB_PT], n[MB_PT];
    float w2[MB_PT], acc2[MB_PT];
#pragma unroll
    for (int u = 0; u < MB_PT; u++) {
        idx[u] = (i64)blockIdx.x * NT * MB_PT + u * NT + threadIdx.x;
        const bool ok = idx[u] < n2;
        j[u] = ok ? idx[u] / A.dK : 0;
        n[u] = ok ? idx[u] % A.dK : 0;
        w2[u] = ok ? A.W2f[idx[u]] : 0.0f;
        acc2[u] = 0.0f;
    }
    float sacc = 0.0f;
    for (i64 i = i0; i < i1; i++) {
        double rho[MB_PT];
#pragma unroll
        for (int u = 0; u < MB_PT; u++) rho[u] = idx[u] < n2 ? lokr_rho(A, i * A.b + j[u]) : 0.0;
        for (i64 p = 0; p < A.c; p++) {
            const double w1 = A.W1d[i * A.c + p];
            float g1 = 0.0f;
#pragma unroll
            for (int u = 0; u < MB_PT; u++) {
                if (idx[u] >= n2) continue;
                const float w1s = (float)(rho[u] * w1), dl = w1s * w2[u];
                const float gam = lokr_gamma(A, G, W, dr, st, sig, i * A.b + j[u], p * A.dK + n[u], dl);
                acc2[u] = fmaf(w1s, gam * sig, acc2[u]);
                g1 = fmaf((float)rho[u], (gam * sig) * w2[u], g1);
                sacc = fmaf(gam, dl, sacc);
            }
            if (pw1) mb_warp_put(g1, sw1 + (i - i0) * A.c + p);
        }
    }
    if (pw2)
#pragma unroll
        for (int u = 0; u < MB_PT; u++)
            if (idx[u] < n2) pw2[z * n2 + idx[u]] = acc2[u];
    mb_block_finish(sacc, red, sw1, (i1 - i0) * A.c, pw1 ? pw1 + (i64)blockIdx.x * ac + i0 * A.c : NULL,
                    psig ? psig + z * gridDim.x + blockIdx.x : NULL);
}

/* The vector form of k_lokr_mb_one (no DoRA, d·K % 8 == 0, G in 16-byte vectors: LK_VEC):
   thread per 8 consecutive elements (j, n..n+7) of one row j; block row blockIdx.y covers the
   flattened pairs q = i·c + p ∈ [y·qper, (y+1)·qper) (qper ≤ MB_AC: a split of p as well as of i,
   so a few wide (j, n) blocks still fill the GPU). Per (i, p) one 16-byte load of G and the same
   element terms as k_lokr_mb_one (Γ = m·RN_CT(G)); ρ_o once per i, RN_f32(ρ_o·W1[i,p]) once per 8
   elements. Sums: G_W2 per element over its pairs in order (register → pw2[y·n2 + e]);
   G_W1[i,p] over the thread's 8 elements in order, the warp (fixed shuffle tree), then the 8
   warps in order (→ pw1[x·ac + q]); G_σs per thread, then the block (→ psig[y·gridDim.x + x]).
   Deterministic. k_lokr_mb_one's generic per-element loads made it latency-bound (87–150 µs at
   0.2–0.4 TB/s, 4096² f8 bf16). */
__global__ __launch_bounds__(NT) void k_lokr_mb_vec(lokr_dev A, lk_view G, i64 qper, float *pw1, double *psig,
                                                    float *pw2) {
    __shared__ float sw1[(NT / 32) * MB_AC];
    __shared__ float red[NT / 32];
    const i64 n2 = A.b * A.dK, ac = A.a * A.c, z = blockIdx.y;
    const i64 q0 = z * qper, q1 = q0 + qper < ac ? q0 + qper : ac;
    const float sig = A.sigma.p ? round_to(vload(A.sigma, 0, 0), A.ct) : 1.0f, mf = (float)A.m;
    const i64 e0 = ((i64)blockIdx.x * NT + threadIdx.x) * 8;
    const bool ok = e0 < n2;
    const i64 j = ok ? e0 / A.dK : 0, n0 = ok ? e0 % A.dK : 0;
    float w2[8], acc2[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
        w2[u] = ok ? A.W2f[e0 + u] : 0.0f;
        acc2[u] = 0.0f;
    }
    float sacc = 0.0f;
    for (i64 i = q0 / A.c; i * A.c < q1; i++) {
        const i64 o = i * A.b + j, pb = q0 > i * A.c ? q0 - i * A.c : 0, pe = q1 - i * A.c < A.c ? q1 - i * A.c : A.c;
        const double rho = ok ? lokr_rho(A, o) : 0.0;
        const float rhof = (float)rho;
#pragma unroll 4
        for (i64 p = pb; p < pe; p++) {
            const float w1s = (float)(rho * A.W1d[i * A.c + p]);
            float g[8];
            if (ok) {
                vload8(g, G, o, p * A.dK + n0);
            } else {
#pragma unroll
                for (int u = 0; u < 8; u++) g[u] = 0.0f;
            }
            float g1 = 0.0f;
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const float gam = mf * round_to(g[u], A.ct), dl = w1s * w2[u];
                acc2[u] = fmaf(w1s, gam * sig, acc2[u]);
                g1 = fmaf(rhof, (gam * sig) * w2[u], g1);
                sacc = fmaf(gam, dl, sacc);
            }
            if (pw1) mb_warp_put(g1, sw1 + (i * A.c + p - q0));
        }
    }
    if (pw2 && ok) {
        float4 *d = (float4 *)(pw2 + z * n2 + e0);
        d[0] = make_float4(acc2[0], acc2[1], acc2[2], acc2[3]);
        d[1] = make_float4(acc2[4], acc2[5], acc2[6], acc2[7]);
    }
    mb_block_finish(sacc, red, sw1, q1 - q0, pw1 ? pw1 + (i64)blockIdx.x * ac + q0 : NULL,
                    psig ? psig + z * gridDim.x + blockIdx.x : NULL);
}

/* =============================================================================================
 * launchers
 * =========================================================================================== */
struct mb_plan {
    i64 z1, jper, z2, iper;
};

/* Splits so that about 1024 blocks run; functions of the shape only (deterministic). */
static mb_plan mb_plan_of(const lk_lokr_args *a) {
    mb_plan pl;
    const i64 ac = a->a * a->c, dK = a->d * a->K, b2 = cdiv(a->b * dK, NT);
    i64 z = cdiv(1024, ac);
    if (z > a->b) z = a->b;
    if (z > 65535) z = 65535;
    if (z < 1) z = 1;
    pl.jper = cdiv(a->b, z);
    pl.z1 = cdiv(a->b, pl.jper);
    z = cdiv(1024, b2);
    if (z > a->a) z = a->a;
    if (z > 65535) z = 65535;
    if (z < 1) z = 1;
    pl.iper = cdiv(a->a, z);
    pl.z2 = cdiv(a->a, pl.iper);
    return pl;
}

static i64 lokr_dora_ws_floats(const lk_lokr_args *a) {
    if (!a->dora.on) return 0;
    return dora_ws_floats(a->O, a->I * a->K, a->K, a->dora.on_out);
}

template <typename CT>
static int dora_stats_t(const lokr_dev &A, const lk_dora &dr, const lk_view &W, const lk_view &G, float *ws, float **st,
                        cudaStream_t s) {
    return dora_stats<CT, lokr_delta>(A, dr, W, G, ws, st, s);
}

static int dora_stats_any(const lokr_dev &A, const lk_dora &dr, const lk_view &W, const lk_view &G, float *ws, float **st,
                          cudaStream_t s) {
    switch (A.ct) {
    case DT_BF16: return dora_stats_t<bf16_t>(A, dr, W, G, ws, st, s);
    case DT_F16: return dora_stats_t<f16_t>(A, dr, W, G, ws, st, s);
    default: return dora_stats_t<float>(A, dr, W, G, ws, st, s);
    }
}

static int merge_fwd_body(const lk_lokr_args *a, lk_carve &cv, const lk_device *dev, cudaStream_t s) {
    lokr_halves h;
    float *ws = (float *)carve_take(cv, (size_t)lokr_dora_ws_floats(a) * 4);
    int rc = lokr_halves_build(a, cv, &h, false, s);
    if (rc || !cv.base) return rc;
    const lokr_dev A = lokr_dev_of(a, &h, true);
    float *st = NULL;
    if (a->dora.on) {
        lk_view none;
        memset(&none, 0, sizeof none);
        if ((rc = dora_stats_any(A, a->dora, a->W, none, ws, &st, s))) return rc;
    }
    if (lokr_mf_vec_ok(a)) {
        const dim3 g((unsigned)cdiv(a->I * a->K / 8, NT), (unsigned)a->O);
        if (a->ct == DT_BF16) k_lokr_merge_fwd_vec<bf16_t><<<g, NT, 0, s>>>(A, a->W, a->out, a->mode);
        else k_lokr_merge_fwd_vec<f16_t><<<g, NT, 0, s>>>(A, a->W, a->out, a->mode);
        LK_LAUNCHED("lokr_merge_fwd_vec");
        return LYCO_OK;
    }
    const i64 total = a->O * cdiv(a->I * a->K, 8);
    i64 grid = cdiv(total, NT), cap = (i64)dev->sms * 16;
    if (grid > cap) grid = cap;
    if (grid < 1) grid = 1;
    /* int indices while every index and the grid-stride step stay below 2^31 */
    if (total + grid * NT < 2147483647LL && a->O * a->I * a->K < 2147483647LL)
        k_lokr_merge_fwd<int><<<(unsigned)grid, NT, 0, s>>>(A, a->W, a->out, a->mode, a->dora, st);
    else
        k_lokr_merge_fwd<i64><<<(unsigned)grid, NT, 0, s>>>(A, a->W, a->out, a->mode, a->dora, st);
    LK_LAUNCHED("lokr_merge_fwd");
    return LYCO_OK;
}

/* the one-pass plan: gx blocks over (j, n), z row blocks of iper rows i (iper·c ≤ MB_AC);
   false: use the two-kernel path */
static bool mb_one_plan(const lk_lokr_args *a, i64 *gx, i64 *z, i64 *iper) {
    const i64 n2 = a->b * a->d * a->K;
    if (a->legacy || a->c > MB_AC || a->a < 1 || n2 < 1) return false;
    *gx = cdiv(n2, NT * MB_PT);
    i64 zz = cdiv(1024, *gx);
    if (zz > a->a) zz = a->a;
    if (zz < 1) zz = 1;
    i64 ip = cdiv(a->a, zz);
    if (ip * a->c > MB_AC) ip = MB_AC / a->c;
    *iper = ip;
    *z = cdiv(a->a, ip);
    return *gx <= 2147483647LL && *z <= 65535 && *gx * *z <= 2147483647LL;
}

/* k_lokr_mb_vec's plan: its conditions (no DoRA, rows of 8-element groups: d·K % 8 == 0, G in
   16-byte vectors, not LYCO_CUDA_LOKR_LEGACY; LYCO_CUDA_LOKR_MB_SCALAR=1 keeps k_lokr_mb_one, the
   A/B switch of the bench), gx blocks over (j, n), z blocks over the (i, p) pairs, qper pairs each
   (8 ≤ qper ≤ MB_AC), up to about 2048 blocks (a function of the shape only: deterministic) */
static bool mb_vec_plan(const lk_lokr_args *a, i64 *gx, i64 *z, i64 *qper) {
    const i64 n2 = a->b * a->d * a->K, ac = a->a * a->c;
    if (a->mb_scalar || a->legacy || a->dora.on || (a->d * a->K) % 8 != 0 || !(a->G.flags & LK_VEC) || n2 < 1 ||
        ac < 1)
        return false;
    *gx = cdiv(n2 / 8, NT);
    i64 q = cdiv(ac, cdiv(2048, *gx));
    if (q < 8) q = 8; /* the G_W2 partials (z·b·dK fp32) stay within a quarter of G's elements */
    if (q > MB_AC) q = MB_AC;
    if (q > ac) q = ac;
    *qper = q;
    *z = cdiv(ac, q);
    return *gx <= 2147483647LL && *z <= 65535 && *gx * *z <= 2147483647LL;
}

/* vec: k_lokr_mb_vec with z blocks of iper (i, p) pairs; else k_lokr_mb_one with z blocks of iper rows i */
static int merge_bwd_one(const lk_lokr_args *a, lk_carve &cv, bool vec, i64 gx, i64 z, i64 iper, cudaStream_t s) {
    const i64 ac = a->a * a->c, n2 = a->b * a->d * a->K;
    const bool need1 = a->gw1.p || a->gw1a.p || a->gw1b.p, need2 = a->gw2.p || a->gw2a.p || a->gw2b.p || a->gt2.p;
    const bool needsig = a->gsigma.p && !a->compat;
    float *ws = (float *)carve_take(cv, (size_t)lokr_dora_ws_floats(a) * 4);
    float *pw1 = (float *)carve_take(cv, need1 ? (size_t)(gx * ac) * 4 : 0);
    double *psig = (double *)carve_take(cv, needsig ? (size_t)(gx * z) * 8 : 0);
    float *pw2 = (float *)carve_take(cv, need2 ? (size_t)(z * n2) * 4 : 0);
    lokr_grads gr;
    lokr_grads_carve(a, cv, &gr);
    lokr_halves h;
    int rc = lokr_halves_build(a, cv, &h, false, s);
    if (rc || !cv.base) return rc;
    const lokr_dev A = lokr_dev_of(a, &h, true);
    float *st = NULL;
    if (a->dora.on && (rc = dora_stats_any(A, a->dora, a->W, a->G, ws, &st, s))) return rc;
    if (need1 || need2 || needsig) {
        if (vec) {
            k_lokr_mb_vec<<<dim3((unsigned)gx, (unsigned)z), NT, 0, s>>>(A, a->G, iper, need1 ? pw1 : NULL,
                                                                         needsig ? psig : NULL, need2 ? pw2 : NULL);
            LK_LAUNCHED("lokr_mb_vec");
        } else {
            k_lokr_mb_one<<<dim3((unsigned)gx, (unsigned)z), NT, 0, s>>>(A, a->G, a->W, a->dora, st, iper, need1 ? pw1 : NULL,
                                                                         needsig ? psig : NULL, need2 ? pw2 : NULL);
            LK_LAUNCHED("lokr_mb_one");
        }
    }
    if (needsig && (rc = lokr_sum_store(psig, gx * z, a->gsigma, 1.0, s))) return rc;
    if (a->gsigma.p && a->compat && (rc = lk_copy_round(&a->gsigma, NULL, a->ct, s))) return rc;
    lk_view none;
    memset(&none, 0, sizeof none);
    return lokr_chain(a, &h, &gr, need1 ? pw1 : NULL, gx, need2 ? pw2 : NULL, z, 1.0, none, s);
}

static int merge_bwd_body(const lk_lokr_args *a, lk_carve &cv, cudaStream_t s) {
    i64 gx, z, iper;
    if (mb_vec_plan(a, &gx, &z, &iper)) return merge_bwd_one(a, cv, true, gx, z, iper, s);
    if (mb_one_plan(a, &gx, &z, &iper)) return merge_bwd_one(a, cv, false, gx, z, iper, s);
    const mb_plan pl = mb_plan_of(a);
    const i64 ac = a->a * a->c, n2 = a->b * a->d * a->K;
    const bool need1 = a->gw1.p || a->gw1a.p || a->gw1b.p, need2 = a->gw2.p || a->gw2a.p || a->gw2b.p || a->gt2.p;
    const bool needsig = a->gsigma.p && !a->compat;
    float *ws = (float *)carve_take(cv, (size_t)lokr_dora_ws_floats(a) * 4);
    float *pw1 = (float *)carve_take(cv, (size_t)(pl.z1 * ac) * 4);
    double *psig = (double *)carve_take(cv, needsig ? (size_t)(pl.z1 * ac) * 8 : 0);
    float *pw2 = (float *)carve_take(cv, need2 ? (size_t)(pl.z2 * n2) * 4 : 0);
    lokr_grads gr;
    lokr_grads_carve(a, cv, &gr);
    lokr_halves h;
    int rc = lokr_halves_build(a, cv, &h, false, s);
    if (rc || !cv.base) return rc;
    const lokr_dev A = lokr_dev_of(a, &h, true);
    float *st = NULL;
    if (a->dora.on && (rc = dora_stats_any(A, a->dora, a->W, a->G, ws, &st, s))) return rc;
    if (need1 || needsig) {
        k_lokr_mb_w1<<<dim3((unsigned)ac, (unsigned)pl.z1), NT, 0, s>>>(A, a->G, a->W, a->dora, st, pl.jper, pw1,
                                                                          needsig ? psig : NULL);
        LK_LAUNCHED("lokr_mb_w1");
    }
    if (need2) {
        k_lokr_mb_w2<<<dim3((unsigned)cdiv(n2, NT), (unsigned)pl.z2), NT, 0, s>>>(A, a->G, a->W, a->dora, st, pl.iper, pw2);
        LK_LAUNCHED("lokr_mb_w2");
    }
    if (needsig && (rc = lokr_sum_store(psig, pl.z1 * ac, a->gsigma, 1.0, s))) return rc;
    if (a->gsigma.p && a->compat && (rc = lk_copy_round(&a->gsigma, NULL, a->ct, s))) return rc;
    lk_view none;
    memset(&none, 0, sizeof none);
    return lokr_chain(a, &h, &gr, need1 ? pw1 : NULL, pl.z1, need2 ? pw2 : NULL, pl.z2, 1.0, none, s);
}

static int with_scratch(const lk_lokr_args *a, const lk_device *dev, cudaStream_t s, bool fwd) {
    lk_carve cv = {0, NULL};
    int rc = fwd ? merge_fwd_body(a, cv, dev, s) : merge_bwd_body(a, cv, s); /* sizing pass */
    if (rc) return rc;
    size_t bytes = cv.off;
    cv.off = 0;
    if ((rc = lk_scratch_alloc((void **)&cv.base, bytes, s))) return rc;
    rc = fwd ? merge_fwd_body(a, cv, dev, s) : merge_bwd_body(a, cv, s);
    int rf = lk_scratch_free(cv.base, s);
    return rc ? rc : rf;
}

extern "C" int lk_lokr_merge_fwd(const lk_lokr_args *a, const lk_device *dev, void *stream) {
    if (a->O == 0 || a->I * a->K == 0) return LYCO_OK;
    lokr_fused_args F;
    dim3 g;
    if (lokr_mf_fused_plan(a, dev, &F, &g)) {
        if (a->ct == DT_BF16) k_lokr_merge_fwd_fused<bf16_t><<<g, NT, 0, (cudaStream_t)stream>>>(F);
        else k_lokr_merge_fwd_fused<f16_t><<<g, NT, 0, (cudaStream_t)stream>>>(F);
        LK_LAUNCHED("lokr_merge_fwd_fused");
        return LYCO_OK;
    }
    return with_scratch(a, dev, (cudaStream_t)stream, true);
}

extern "C" int lk_lokr_merge_bwd(const lk_lokr_args *a, const lk_device *dev, void *stream) {
    if (a->a * a->c > 2147483647LL) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda lokr: a·c exceeds the grid limit");
    return with_scratch(a, dev, (cudaStream_t)stream, false);
}
