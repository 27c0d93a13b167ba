/*
 * loha_tc.cu — LoHa (ALGORITHMS.md §2.2) on the tensor cores for 16-bit compute: merge forward and
 * the linear bypass forward, through lowrank.cu's expand (with its Hadamard pair) and gemm.cu.
 * Host code only: the kernels are theirs.
 *
 *   ΔW̄[o, j] = ρ_o·R_1[o, j]·R_2[o, j],  R_t = Ā_t·B̄_t,  ρ_o = s'·q_o       (O × I·K)
 *
 * merge forward: one expand launch over O × I·K with P = Ā_1, Q = B̄_1, P2 = Ā_2, Q2 = B̄_2: a block
 *   computes its 64×128 tiles of R_1 and R_2 with mma.sync (fp32 sums of CT-rounded factors), their
 *   product, ρ_o·σs and the merge epilogue (merge_ep.cuh's merge_elem: W + m·σs·ΔW̄, the delta, the
 *   unmerge, or DoRA with a statistics launch first, as LoCon's merge does). W read once, out
 *   written once. Replaces loha.cu's FFMA tile generator (245 µs at 4096², r16, on the H200).
 * bypass forward (linear): ΔW̄ is generated in row chunks of at most LYCO_LOHA_CHUNK_ELEMS (8 Mi)
 *   elements, each RN_CT(m·σs·ρ_o·R_1⊙R_2) — rounded once to the compute dtype, the intermediate
 *   the eager chain also stores in that dtype (NUMERICS.md §1.6; check.c counts it) — into
 *   stream-ordered scratch, then y[:, chunk] = RN(RN_CT(y0[:, chunk]) + x·ΔW̄_cᵀ) by gemm.cu
 *   (fp32 sums over I). ΔW̄ is never whole: one chunk (≤ 16 MB) at a time, which stays in L2 while
 *   the product streams x. Cost: 2·T·O·I flops on the tensor cores plus one chunk write and read;
 *   for bf16 the face-splitting form on the tensor cores (loha_fs.cu) costs 2·T·r₁r₂·(I + O) and
 *   is taken instead where that is at most half (lk_loha_fs_tc_wanted); fp16, and bf16 at large
 *   ranks, come here. (Its FFMA variant is ~10× slower per flop and never beats this path.)
 * merge backward (k_loha_tc_grad, no DoRA): a block owns a 64×128 tile of ∂L/∂W'' and one term
 *   (grid z = 2: half the registers and twice the blocks of doing both). It stages Ā_t
 *   rows, B̄_t columns and the Γ tile, computes R_1, R_2 there with mma.sync, forms
 *   G_R1 = Γs ⊙ R_2 and G_R2 = Γs ⊙ R_1 (Γs = m·RN_CT(∂L/∂W'')·σs·ρ_o, fp32, as loha.cu), splits
 *   each into nsplit<CT> exact CT parts in shared memory (3 for bf16, 2 for fp16: fp32-level
 *   products on the tensor cores) and contracts them: the tile's share of G_Ā_t = G_Rt·B̄_tᵀ
 *   (64 × r) and of G_B̄_t = Ā_tᵀ·G_Rt (r × 128), written as fp32 partials per column tile /
 *   row tile; k_tc_sum adds the partials in tile order (fp64) and rounds once into each leaf.
 *   G_σs = Σ Γ·ΔW̄ (per-block fp64 partials, summed in order). Replaces loha.cu's FFMA row and
 *   column sweeps (1028 + 1188 µs at 4096², r16, on the H200); extra memory: the partials,
 *   (⌈I·K/128⌉·O + ⌈O/64⌉·I·K)·(r₁ + r₂) floats (48 MB at 4096², r16). Uniform 16-bit operands
 *   with 16-byte rows and ranks ≤ 32 take loha_grad_onepass.cu instead (Γ read once, far fewer
 *   partials; 230 → 80–94 µs for the whole row at 4096², r16 on the H200, session 31); both feed
 *   one k_tc_sum launch for every partial set and σs.
 * Applies when: compute dtype bf16/fp16, not Tucker (its B̄_t = P_t is an fp32 intermediate
 *   kept exact), ranks ≤ 128, 16-bit output (merge), linear layer (bypass), not
 *   LYCO_CUDA_LOHA_LEGACY=1 or LYCO_CUDA_LOHA_NO_TC=1 (A/B). Everything else keeps loha.cu /
 *   loha_fs.cu / loha_bypass.cu.
 *   The merge backward also needs no DoRA (its ∂L/∂V chain stays in loha.cu).
 * Extra memory: merge none (DoRA: per-tile Σ V² partials + 3 floats per kept index); bypass one
 *   chunk of ΔW̄ (CT); merge backward the partials above.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/kern_gemm.h"
#include "cuda/kern_loha.h"
#include "cuda/kern_lowrank.h"
#include "cuda/merge_ep.cuh"

#define LYCO_LOHA_CHUNK_ELEMS (8LL << 20)

namespace {

const int TM = 64, TN = 128; /* gradient tile: rows of ΔW̄ × columns */

struct tg_layout {
    int a1, b1, a2, b2, ca1, cb1, ca2, cb2, g, parts, total;
};

__host__ __device__ inline tg_layout tg_plan(int RP, int ct, int a1dt, int b1dt, int a2dt, int b2dt, int gdt, int np) {
    tg_layout l;
    int off = 0;
    l.a1 = off;
    off += raw_bytes(TM, RP, a1dt);
    l.b1 = off;
    off += raw_bytes(RP, TN, b1dt);
    l.a2 = off;
    off += raw_bytes(TM, RP, a2dt);
    l.b2 = off;
    off += raw_bytes(RP, TN, b2dt);
    l.ca1 = off;
    off += conv_bytes(TM, RP, a1dt, 1, ct);
    l.cb1 = off;
    off += conv_bytes(RP, TN, b1dt, 1, ct);
    l.ca2 = off;
    off += conv_bytes(TM, RP, a2dt, 1, ct);
    l.cb2 = off;
    off += conv_bytes(RP, TN, b2dt, 1, ct);
    l.g = off;
    off += raw_bytes(TM, TN, gdt);
    l.parts = off;
    off += al128(np * TM * (TN + 8) * 2);
    l.total = off;
    return l;
}

/* One term's partials from its G_Rt parts (TM × TN, pitch TN + 8): pA[x][o][k] (G_Ā_t share of
   column tile x) and pB[y][k][j] (G_B̄_t share of row tile y); NULL = not wanted. */
template <typename CT, int RP>
__device__ __forceinline__ void tc_term(CT *const *parts, int np, const CT *As, int lda, const CT *Bs, int ldb, i64 r,
                                        const lk_loha &L, i64 mb, float *pA, float *pB) {
    const int warp = threadIdx.x >> 5;
    const i64 nb = (i64)blockIdx.x * TN, yt = mb / TM;
    if (pA) { /* (TM × RP) = G_Rt · B̄_tᵀ: warps 4 (rows) × 2 (rank halves) */
        const int NI = RP / 16, m0 = (warp & 3) * 16, n0 = (warp >> 2) * (RP / 2);
        float ac[1][NI][4];
        acc_zero(ac);
        for (int p = np - 1; p >= 0; p--) warp_mma<CT, 1, NI, false, false>::run(ac, parts[p], TN + 8, Bs, ldb, m0, n0, TN);
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const i64 o = mb + acc_row(m0, 0, e), k = acc_col(n0, ni, e);
                if (o < L.O && k < r) pA[((i64)blockIdx.x * L.O + o) * r + k] = ac[0][ni][e];
            }
    }
    if (pB) { /* (RP × TN) = Ā_tᵀ · G_Rt: warps WM (ranks) × WN (columns) */
        const int WM = RP / 16, WN = 8 / WM, NI = TN / (8 * WN), m0 = (warp % WM) * 16, n0 = (warp / WM) * (TN / WN);
        float bc[1][NI][4];
        acc_zero(bc);
        for (int p = np - 1; p >= 0; p--) warp_mma<CT, 1, NI, true, true>::run(bc, As, lda, parts[p], TN + 8, m0, n0, TM);
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const i64 k = acc_row(m0, 0, e), j = nb + acc_col(n0, ni, e);
                if (k < r && j < L.IK) pB[(yt * r + k) * L.IK + j] = bc[0][ni][e];
            }
    }
}

/* BYP: Γ = m·G_E with G_E an fp32 chunk of rows [o0, o0 + a.G.rows) (bypass backward), used
   unrounded; else Γ = m·RN_CT(∂L/∂W'') (o0 = 0). */
template <typename CT, int RP, bool BYP>
__global__ __launch_bounds__(NT) void k_loha_tc_grad(lk_loha_args a, i64 o0, float *pA1, float *pA2, float *pB1, float *pB2,
                                                     double *sigpart) {
    extern __shared__ __align__(16) char dsm[];
    __shared__ float rowc[TM];
    __shared__ double red[NT / 32];
    const lk_loha &L = a.L;
    const int np = nsplit<CT>::n;
    const tg_layout ly = tg_plan(RP, ct_of<CT>::dt, L.A1.dt, L.B1.dt, L.A2.dt, L.B2.dt, a.G.dt, np);
    const i64 mb = o0 + (i64)blockIdx.y * TM, nb = (i64)blockIdx.x * TN;
    raw_issue<TM, RP>(dsm + ly.a1, L.A1, mb, 0);
    raw_issue<RP, TN>(dsm + ly.b1, L.B1, 0, nb);
    raw_issue<TM, RP>(dsm + ly.a2, L.A2, mb, 0);
    raw_issue<RP, TN>(dsm + ly.b2, L.B2, 0, nb);
    raw_issue<TM, TN>(dsm + ly.g, a.G, mb - o0, nb);
    cp_commit();
    for (int i = threadIdx.x; i < TM; i += NT) {
        const i64 o = mb + i;
        rowc[i] = o < L.O ? (float)(L.s * (double)vget(L.mask, o, 1.0f)) : 0.0f;
    }
    cp_wait(0);
    __syncthreads();
    CT *a1[3], *b1[3], *a2[3], *b2[3];
    int la1, lb1, la2, lb2;
    raw_operand<CT, TM, RP>(dsm + ly.a1, L.A1.dt, 1, (CT *)(dsm + ly.ca1), a1, &la1);
    raw_operand<CT, RP, TN>(dsm + ly.b1, L.B1.dt, 1, (CT *)(dsm + ly.cb1), b1, &lb1);
    raw_operand<CT, TM, RP>(dsm + ly.a2, L.A2.dt, 1, (CT *)(dsm + ly.ca2), a2, &la2);
    raw_operand<CT, RP, TN>(dsm + ly.b2, L.B2.dt, 1, (CT *)(dsm + ly.cb2), b2, &lb2);
    __syncthreads();
    const int warp = threadIdx.x >> 5, m0 = (warp & 1) * 32, n0 = (warp >> 1) * 32;
    float r1[2][4][4], r2[2][4][4];
    acc_zero(r1);
    acc_zero(r2);
    warp_mma<CT, 2, 4, false, true>::run(r1, a1[0], la1, b1[0], lb1, m0, n0, (int)((L.r1 + 15) / 16 * 16));
    warp_mma<CT, 2, 4, false, true>::run(r2, a2[0], la2, b2[0], lb2, m0, n0, (int)((L.r2 + 15) / 16 * 16));
    /* this block's term t = blockIdx.z: gr = G_R1 = Γs·R_2 (t = 0) or G_R2 = Γs·R_1 (t = 1), into r1;
       the σs partial Σ Γ·ρ·R_1·R_2 (fp64) from the t = 0 blocks */
    const int t = (int)blockIdx.z;
    const float sig = sigma_ct<CT>(L.sigma), mf = (float)L.m;
    const int pg = raw_pitch(TN, a.G.dt);
    const bool do_sig = sigpart != NULL && t == 0;
    double gs = 0.0;
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = acc_row(m0, mi, e), col = acc_col(n0, ni, e);
                const bool in = mb + row < L.O && nb + col < L.IK;
                const float gv = in ? raw_get(dsm + ly.g, pg, a.G.dt, row, col) : 0.0f;
                const float gam = mf * (BYP ? gv : rnd_ct<CT>(gv));
                const float v1 = r1[mi][ni][e], v2 = r2[mi][ni][e];
                if (do_sig) gs += (double)gam * ((double)rowc[row] * (double)v1 * (double)v2);
                r1[mi][ni][e] = gam * sig * rowc[row] * (t ? v1 : v2);
            }
    if (do_sig) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) gs += __shfl_xor_sync(0xffffffffu, gs, o);
        if ((threadIdx.x & 31) == 0) red[warp] = gs;
    }
    CT *parts[3];
    for (int p = 0; p < 3; p++) parts[p] = (CT *)(dsm + ly.parts) + p * TM * (TN + 8);
    float *pA = t ? pA2 : pA1, *pB = t ? pB2 : pB1;
    if (pA || pB) {
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int e = 0; e < 4; e++) store_parts<CT>(parts, np, acc_row(m0, mi, e) * (TN + 8) + acc_col(n0, ni, e), r1[mi][ni][e]);
        __syncthreads();
        if (t) tc_term<CT, RP>(parts, np, a2[0], la2, b2[0], lb2, L.r2, L, mb, pA, pB);
        else tc_term<CT, RP>(parts, np, a1[0], la1, b1[0], lb1, L.r1, L, mb, pA, pB);
    }
    if (do_sig) {
        __syncthreads();
        if (threadIdx.x == 0) {
            double s = 0.0;
            for (int w = 0; w < NT / 32; w++) s += red[w];
            sigpart[(mb / TM) * gridDim.x + blockIdx.x] = s;
        }
    }
}

/* The gradients from their partials, one launch for every set: out_j (R_j × C_j view) =
   RN(Σ_z part_j[z][R_j][C_j]), z in order (fp64 sums); and ∂L/∂σs = RN(Σ sigpart in order). */
struct tc_sum_job {
    const float *part;
    i64 nz, R, C;
    lk_view out;
};
struct tc_sum_jobs {
    tc_sum_job j[4];
    int n;
    const double *sig;
    i64 nsig;
    lk_view gsig;
};

__global__ __launch_bounds__(NT) void k_tc_sum(tc_sum_jobs J) {
    i64 total = 0;
    for (int q = 0; q < J.n; q++) total += J.j[q].R * J.j[q].C;
    for (i64 i = (i64)blockIdx.x * NT + threadIdx.x; i < total; i += (i64)gridDim.x * NT) {
        int q = 0;
        i64 k = i;
        while (k >= J.j[q].R * J.j[q].C) k -= J.j[q].R * J.j[q].C, q++;
        const tc_sum_job &b = J.j[q];
        const i64 n = b.R * b.C;
        double s = 0.0;
        i64 z = 0;
        for (; z + 8 <= b.nz; z += 8) { /* eight loads in flight, then the adds in order (a load at a time: 11 µs at 16 sets, H200) */
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; u++) v[u] = __ldg(b.part + (z + u) * n + k);
#pragma unroll
            for (int u = 0; u < 8; u++) s += v[u];
        }
        for (; z < b.nz; z++) s += b.part[z * n + k];
        vstore(b.out, k / b.C, k % b.C, (float)s);
    }
    if (J.sig && blockIdx.x == 0 && threadIdx.x == 0) {
        double s = 0.0;
        for (i64 i = 0; i < J.nsig; i++) s += J.sig[i];
        vstore(J.gsig, 0, 0, (float)s);
    }
}

int tc_sum_launch(const tc_sum_jobs &J, cudaStream_t s) {
    i64 n = 0;
    for (int q = 0; q < J.n; q++) n += J.j[q].R * J.j[q].C;
    if (n == 0 && !J.sig) return LYCO_OK;
    i64 blocks = cdiv(n, NT);
    if (blocks > 4096) blocks = 4096;
    if (blocks < 1) blocks = 1;
    k_tc_sum<<<(unsigned)blocks, NT, 0, s>>>(J);
    LK_LAUNCHED("loha tc_sum");
    return LYCO_OK;
}

template <typename CT, int RP, bool BYP>
int tc_grad_launch(const lk_loha_args *a, i64 o0, i64 rows, float *const *p, double *sigpart, cudaStream_t s) {
    const lk_loha &L = a->L;
    const int bytes = tg_plan(RP, ct_of<CT>::dt, L.A1.dt, L.B1.dt, L.A2.dt, L.B2.dt, a->G.dt, nsplit<CT>::n).total;
    LK_SMEM_OPTIN(bytes, k_loha_tc_grad<CT, RP, BYP>);
    const dim3 grid((unsigned)cdiv(L.IK, TN), (unsigned)cdiv(rows, TM), 2); /* z: the term */
    k_loha_tc_grad<CT, RP, BYP><<<grid, NT, bytes, s>>>(*a, o0, p[0], p[1], p[2], p[3], sigpart);
    LK_LAUNCHED("loha tc_grad");
    return LYCO_OK;
}

/* the gradient kernel over rows [o0, o0 + rows) (a->G: those rows of Γ's source) */
template <typename CT, bool BYP>
int tc_grad_rp(const lk_loha_args *a, i64 o0, i64 rows, float *const *p, double *sigpart, cudaStream_t s) {
    const i64 r = a->L.r1 > a->L.r2 ? a->L.r1 : a->L.r2;
    switch (lk_reduce_rank_tile(r)) {
    case 16: return tc_grad_launch<CT, 16, BYP>(a, o0, rows, p, sigpart, s);
    case 32: return tc_grad_launch<CT, 32, BYP>(a, o0, rows, p, sigpart, s);
    case 64: return tc_grad_launch<CT, 64, BYP>(a, o0, rows, p, sigpart, s);
    default: return tc_grad_launch<CT, 128, BYP>(a, o0, rows, p, sigpart, s);
    }
}

int tc_grad_any(const lk_loha_args *a, bool byp, i64 o0, i64 rows, float *const *p, double *sigpart, cudaStream_t s) {
    if (a->L.ct == DT_BF16) return byp ? tc_grad_rp<bf16_t, true>(a, o0, rows, p, sigpart, s) : tc_grad_rp<bf16_t, false>(a, o0, rows, p, sigpart, s);
    return byp ? tc_grad_rp<f16_t, true>(a, o0, rows, p, sigpart, s) : tc_grad_rp<f16_t, false>(a, o0, rows, p, sigpart, s);
}

} // namespace

/* LYCO_CUDA_LOHA_NO_TC=1: the FFMA kernels of loha.cu / loha_fs.cu instead (A/B) */
extern "C" int lk_loha_tc_off(void) {
    const char *e = getenv("LYCO_CUDA_LOHA_NO_TC");
    return e && e[0] == '1';
}

static bool tc_common(const lk_loha_args *a) {
    const lk_loha &L = a->L;
    const i64 r = L.r1 > L.r2 ? L.r1 : L.r2;
    return !a->legacy && !lk_loha_tc_off() && (L.ct == DT_BF16 || L.ct == DT_F16) && !L.tucker && L.r1 >= 1 && L.r2 >= 1 &&
           lk_reduce_rank_tile(r) != 0;
}

/* The expand arguments of ΔW̄'s rows [o0, o0 + n): delta of the pair, ρ_o·σs per row, m as mult. */
static lk_expand_args tc_expand(const lk_loha_args *a, i64 o0, i64 n) {
    const lk_loha &L = a->L;
    lk_expand_args e;
    memset(&e, 0, sizeof e);
    e.ct = L.ct;
    e.M = n;
    e.N = L.IK;
    e.r = L.r1;
    e.r2 = L.r2;
    e.P = lk_view_sub(L.A1, o0, n, 0, L.r1);
    e.Q = L.B1;
    e.P2 = lk_view_sub(L.A2, o0, n, 0, L.r2);
    e.Q2 = L.B2;
    e.rowmask = lk_view_sub(L.mask, 0, 1, o0, n);
    e.sigma = L.sigma;
    e.row_scale = L.s;
    e.sig_in_row = 1;
    e.mult = L.m;
    e.mode = 1;
    e.K = L.K;
    return e;
}

extern "C" int lk_loha_tc_merge_fwd(const lk_loha_args *a, const lk_device *dev, void *stream, int *done) {
    *done = 0;
    if (!tc_common(a) || a->out.dt == DT_F32) return LYCO_OK;
    const lk_loha &L = a->L;
    lk_expand_args e = tc_expand(a, 0, L.O);
    e.base = a->W;
    e.out = a->out;
    e.mode = a->mode;
    e.dora = a->dora;
    if (!lk_expand_fits(&e, dev)) return LYCO_OK;
    *done = 1;
    return lk_expand_merge(&e, dev, stream);
}

extern "C" int lk_loha_tc_bypass_fwd(const lk_loha_args *a, const lk_device *dev, void *stream, int *done) {
    *done = 0;
    const lk_loha &L = a->L;
    if (!tc_common(a) || a->geo.nd != 0) return LYCO_OK;
    const i64 T = a->T, ld = (L.IK + 7) / 8 * 8; /* chunk row pitch: 16-byte rows */
    const i64 nch = cdiv(L.O * ld, LYCO_LOHA_CHUNK_ELEMS);
    i64 oc = cdiv(cdiv(L.O, nch), 128) * 128;
    if (oc > L.O) oc = L.O;
    lk_expand_args e = tc_expand(a, 0, oc);
    const lk_view dw = lk_pitched_view(NULL, oc, L.IK, ld, L.ct);
    e.out = dw;
    lk_gemm_args g = lk_gemm_product(L.ct, lk_act_as_view(a->x, T, L.IK), 0, dw, 0, T, oc, L.IK);
    g.out = lk_act_as_view(a->y, T, L.O);
    if (!lk_expand_fits(&e, dev) || !lk_gemm_fits(&g, dev)) return LYCO_OK;
    *done = 1;
    if (T == 0 || L.O == 0) return LYCO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    void *chunk = NULL;
    int rc = lk_scratch_alloc(&chunk, (size_t)(oc * ld * 2), s);
    if (rc) return rc;
    const lk_view y = lk_act_as_view(a->y, T, L.O), y0 = a->y0.p ? lk_act_as_view(a->y0, T, L.O) : lk_view{};
    for (i64 o0 = 0; o0 < L.O && rc == LYCO_OK; o0 += oc) {
        const i64 n = L.O - o0 < oc ? L.O - o0 : oc;
        e = tc_expand(a, o0, n);
        e.out = dw;
        e.out.p = chunk;
        e.out.rows = n;
        rc = lk_expand(&e, dev, s);
        if (rc) break;
        g.N = n;
        g.B = e.out;
        g.base = lk_view_sub(y0, 0, T, o0, n);
        g.out = lk_view_sub(y, 0, T, o0, n);
        rc = lk_gemm(&g, dev, s);
    }
    const int rf = lk_scratch_free(chunk, s);
    return rc ? rc : rf;
}

/* Whether the gradient kernel takes this call (Γ of dtype gdt). */
static bool tc_grad_fits(const lk_loha_args *a, int gdt, const lk_device *dev) {
    const lk_loha &L = a->L;
    const i64 r = L.r1 > L.r2 ? L.r1 : L.r2, rp = lk_reduce_rank_tile(r);
    const int np = L.ct == DT_BF16 ? 3 : 2;
    if (cdiv(L.O, TM) > 65535 || cdiv(L.IK, TN) > 2147483647LL) return false;
    return tg_plan((int)rp, L.ct, L.A1.dt, L.B1.dt, L.A2.dt, L.B2.dt, gdt, np).total <= dev->smem_optin;
}

/* G_E = dyᵀ·x for rows [o0, o0 + n) into an fp32 chunk (n × IK, pitch ld): gemm.cu with both
   operands given k-major (k = tokens). */
static lk_gemm_args tc_ge_gemm(const lk_loha_args *a, i64 o0, i64 n, float *chunk, i64 ld) {
    const lk_loha &L = a->L;
    lk_gemm_args g = lk_gemm_product(L.ct, lk_view_sub(lk_act_as_view(a->dy, a->T, L.O), 0, a->T, o0, n), 1,
                                     lk_act_as_view(a->x, a->T, L.IK), 1, n, L.IK, a->T);
    g.out = lk_pitched_view(chunk, n, L.IK, ld, DT_F32);
    return g;
}

/* Every parameter gradient of a merge backward (Γ from a->G) or a bypass backward (Γ = m·G_E,
   G_E generated in row chunks by tc_ge_gemm): per-tile partials, then their ordered sums. */
static int tc_grads(const lk_loha_args *a, bool byp, const lk_device *dev, cudaStream_t s) {
    const lk_loha &L = a->L;
    lk_loha_mb1_plan mp;
    mp.on = 0;
    if (!byp) lk_loha_mb1_plan_make(a, dev, &mp);
    const i64 zA = mp.on ? mp.x : cdiv(L.IK, TN), zB = mp.on ? mp.y : cdiv(L.O, TM);
    const bool want_sig = a->gsigma.p && !a->sigma_zero;
    const i64 fA1 = a->gA1.p ? zA * L.O * L.r1 : 0, fA2 = a->gA2.p ? zA * L.O * L.r2 : 0;
    const i64 fB1 = a->gB1.p ? zB * L.r1 * L.IK : 0, fB2 = a->gB2.p ? zB * L.r2 * L.IK : 0;
    const i64 nsig = want_sig ? zA * zB : 0;
    const i64 ld = (L.IK + 3) / 4 * 4; /* G_E chunk pitch: 16-byte rows */
    i64 oc = L.O;
    if (byp) { /* G_E row chunks of ≤ 4 Mi fp32, a multiple of the 64-row tile */
        const i64 nch = cdiv(L.O * ld, LYCO_LOHA_CHUNK_ELEMS / 2);
        oc = cdiv(cdiv(L.O, nch), 128) * 128;
        if (oc > L.O) oc = L.O;
    }
    const i64 fGE = byp ? oc * ld : 0;
    const i64 floats = (2 * nsig + 3) / 4 * 4 + fGE + fA1 + fA2 + fB1 + fB2;
    if (fA1 + fA2 + fB1 + fB2 + nsig == 0 || L.O == 0 || L.IK == 0)
        return a->gsigma.p ? lk_copy_round(&a->gsigma, NULL, L.ct, s) : LYCO_OK;
    float *ws = NULL;
    int rc = lk_scratch_alloc((void **)&ws, (size_t)floats * sizeof(float), s);
    if (rc) return rc;
    /* layout: σs partials (doubles, first: 8-byte aligned), the G_E chunk (16-byte aligned: its
       rows are read by cp.async and written by float4 stores), the four partial sets */
    double *sigpart = want_sig ? (double *)ws : NULL;
    float *ge = ws + (2 * nsig + 3) / 4 * 4, *q = ge + fGE;
    float *p[4];
    p[0] = fA1 ? q : NULL;
    q += fA1;
    p[1] = fA2 ? q : NULL;
    q += fA2;
    p[2] = fB1 ? q : NULL;
    q += fB1;
    p[3] = fB2 ? q : NULL;
    if (!byp) {
        rc = mp.on ? lk_loha_mb1_launch(a, &mp, p, sigpart, s) : tc_grad_any(a, false, 0, L.O, p, sigpart, s);
    } else {
        lk_loha_args c = *a;
        for (i64 o0 = 0; o0 < L.O && rc == LYCO_OK; o0 += oc) {
            const i64 n = L.O - o0 < oc ? L.O - o0 : oc;
            const lk_gemm_args g = tc_ge_gemm(a, o0, n, ge, ld);
            if ((rc = lk_gemm(&g, dev, s))) break;
            c.G = g.out;
            rc = tc_grad_any(&c, true, o0, n, p, sigpart, s);
        }
    }
    tc_sum_jobs J;
    memset(&J, 0, sizeof J);
    const tc_sum_job jobs[4] = {{p[0], zA, L.O, L.r1, a->gA1}, {p[1], zA, L.O, L.r2, a->gA2}, {p[2], zB, L.r1, L.IK, a->gB1},
                                {p[3], zB, L.r2, L.IK, a->gB2}};
    for (int q = 0; q < 4; q++)
        if (jobs[q].part) J.j[J.n++] = jobs[q];
    if (want_sig) {
        J.sig = sigpart;
        J.nsig = nsig;
        J.gsig = a->gsigma;
    }
    if (rc == LYCO_OK) rc = tc_sum_launch(J, s);
    if (rc == LYCO_OK && a->gsigma.p && !want_sig) rc = lk_copy_round(&a->gsigma, NULL, L.ct, s);
    const int rf = lk_scratch_free(ws, s);
    return rc ? rc : rf;
}

extern "C" int lk_loha_tc_merge_bwd(const lk_loha_args *a, const lk_device *dev, void *stream, int *done) {
    *done = 0;
    if (!tc_common(a) || a->dora.on || !tc_grad_fits(a, a->G.dt, dev)) return LYCO_OK;
    *done = 1;
    return tc_grads(a, false, dev, (cudaStream_t)stream);
}

/* dx = dy·(m·σs·ΔW̄): ΔW̄ in column chunks (O × ≤ 8 Mi/O columns, CT) times dy through gemm.cu
   (the chunk given k-major: k = the O rows). */
static int tc_dx(const lk_loha_args *a, const lk_device *dev, cudaStream_t s) {
    const lk_loha &L = a->L;
    const i64 T = a->T, nch = cdiv(L.O * ((L.IK + 7) / 8 * 8), LYCO_LOHA_CHUNK_ELEMS);
    i64 ic = cdiv(cdiv(L.IK, nch), 128) * 128;
    if (ic > L.IK) ic = L.IK;
    const i64 ld = (ic + 7) / 8 * 8;
    const lk_view dx = lk_act_as_view(a->dx, T, L.IK);
    if (T == 0 || L.IK == 0) return LYCO_OK;
    if (L.O == 0) return lk_copy_round(&dx, NULL, L.ct, s);
    void *chunk = NULL;
    int rc = lk_scratch_alloc(&chunk, (size_t)(L.O * ld * 2), s);
    if (rc) return rc;
    for (i64 i0 = 0; i0 < L.IK && rc == LYCO_OK; i0 += ic) {
        const i64 n = L.IK - i0 < ic ? L.IK - i0 : ic;
        lk_expand_args e = tc_expand(a, 0, L.O);
        e.N = n;
        e.Q = lk_view_sub(L.B1, 0, L.r1, i0, n);
        e.Q2 = lk_view_sub(L.B2, 0, L.r2, i0, n);
        e.out = lk_pitched_view(chunk, L.O, n, ld, L.ct);
        if ((rc = lk_expand(&e, dev, s))) break;
        lk_gemm_args g = lk_gemm_product(L.ct, lk_act_as_view(a->dy, T, L.O), 0, e.out, 1, T, n, L.O);
        g.out = lk_view_sub(dx, 0, T, i0, n);
        rc = lk_gemm(&g, dev, s);
    }
    const int rf = lk_scratch_free(chunk, s);
    return rc ? rc : rf;
}

extern "C" int lk_loha_tc_bypass_bwd(const lk_loha_args *a, const lk_device *dev, void *stream, int *done) {
    *done = 0;
    const lk_loha &L = a->L;
    if (!tc_common(a) || a->geo.nd != 0 || !tc_grad_fits(a, DT_F32, dev)) return LYCO_OK;
    lk_gemm_args g = tc_ge_gemm(a, 0, L.O, NULL, L.IK), d = g;
    d.a_t = 0;
    d.A = lk_act_as_view(a->dy, a->T, L.O);
    if (!lk_gemm_fits(&g, dev) || !lk_gemm_fits(&d, dev)) return LYCO_OK;
    lk_expand_args e = tc_expand(a, 0, L.O);
    e.out.dt = L.ct;
    if (!lk_expand_fits(&e, dev)) return LYCO_OK;
    *done = 1;
    cudaStream_t s = (cudaStream_t)stream;
    int rc = a->dx.p ? tc_dx(a, dev, s) : LYCO_OK;
    if (rc == LYCO_OK) rc = tc_grads(a, true, dev, s);
    return rc;
}
