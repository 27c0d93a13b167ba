/*
 * merge_bwd_onepass.cu — LoRA/LoCon merge backward's two contractions from one read of Γ:
 *   part_up[zc][o][i] = Σ_{j ∈ column region zc} Γ[o, j]·D[i, j]      (→ d_up, dσs: locon.cu's k_fin_dup)
 *   part_dn[zr][j][i] = Σ_{o ∈ row region zr}    U[o, i]·Γ[o, j]      (→ d_down: lowrank.cu's colfin)
 * Γ O×N (N = I·K), U O×r, D r×N, all in the 16-bit compute dtype CT, row-major with 16-byte
 * aligned rows (LK_VEC); rank tile RP = 16 or 32 (r ≤ 32); no rank mask, no DoRA (locon.cu keeps
 * those on the two-pass kernels). Any O and N: tiles past an edge are zero-filled.
 *
 * Why: the two-pass form (reduce_lean.cu's k_reduce_wide for Γ·Dᵀ, then k_colreduce_lean for
 * Uᵀ·Γ) reads Γ twice and re-stages the factor tile from L2 with every Γ tile; H200 ncu at 4096²
 * r32 bf16 (docs/kernels.md, session 29): 19.8 + 25.9 µs at 36 % / 47 % of DRAM bandwidth against
 * an 8.2 µs floor for the one read of Γ.
 *
 * Tiling. A block owns a region of NS·64 rows × NC·128 columns of Γ. D's NC·128 columns of the
 * region stay in shared memory for the whole block (RP × (NC·128 + 8) halfwords); Γ streams as
 * 64 × 128 chunks, row strip by row strip, the strip's NC chunks in column order, through a
 * cp.async ring as deep as shared memory allows (≤ 8 stages: one block per SM); each stage also holds the strip's 64 × RP rows of U (re-read from L2, a
 * quarter of the stage's bytes). Per chunk, 8 warps:
 *   Γ·Dᵀ: 4 row groups × 2 rank halves (16 rows × RP/2 ranks, k = the chunk's 128 columns),
 *         accumulated over the strip's NC chunks, then stored as the strip's partial rows;
 *   Uᵀ·Γ: 4 column groups × 2 rank halves (32 columns × RP/2 ranks, k = the chunk's 64 rows),
 *         accumulated over the region's strips in NC register sets (one per chunk column),
 *         stored once at the end.
 * Both products read the staged Γ tile by ldmatrix (the second transposed) and sum in fp32 in
 * a fixed order: deterministic, no atomics. Partials: cdiv(N, NC·128)·O·RP + cdiv(O, NS·64)·N·RP
 * fp32 (scratch, allocated here, freed by the caller). NS is chosen so that the grid is about one
 * block per SM (more blocks → more Uᵀ·Γ partials); LYCO_CUDA_MB1_NS overrides it, and
 * LYCO_CUDA_MB1=0 turns the kernel off (locon.cu's two-pass kernels, A/B).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/kern_lowrank.h"

namespace {

const int CR = 64;  /* rows per chunk (one strip) */
const int CC = 128; /* columns per chunk */

/* KMAJ: the resident factor is given K-major (N × r, e.g. lora_up for dy·U); DN: the Uᵀ·Γ half
   (merge backward) — off, the kernel is a row reduction alone (bypass h = x·Dᵀ, g = dy·U) */
template <int RP, int NC, bool KMAJ, bool DN> struct mb1_layout {
    static const int DRES = (KMAJ ? NC * CC * (RP + 8) : RP * (NC * CC + 8)) * 2; /* resident factor */
    static const int GA = CR * (CC + 8) * 2;                                        /* Γ chunk */
    static const int STAGE = GA + (DN ? CR * (RP + 8) * 2 : 0);                     /* + the strip's U rows */
};

template <typename CT, int RP, int NC, bool KMAJ, bool DN, bool COPY>
__global__ __launch_bounds__(NT) void k_merge_bwd_onepass(lk_view G, lk_view U, lk_view D, lk_view copyG, int NS, int S,
                                                          float *part_up, float *part_dn, int dbg) {
    typedef mb1_layout<RP, NC, KMAJ, DN> L;
    const int NIU = RP / 16, NID = RP / 16, NCD = DN ? NC : 1;
    extern __shared__ __align__(16) char dsm[];
    const i64 O = G.rows, N = G.cols;
    const i64 cb = (i64)blockIdx.x * (NC * CC), rb = (i64)blockIdx.y * NS * CR;
    const i64 rows_left = O - rb;
    const int strips = rows_left < (i64)NS * CR ? (int)cdiv(rows_left, CR) : NS;
    const int nk = strips * NC;
    const int warp = threadIdx.x >> 5;
    const int m0u = (warp & 3) * 16, n0u = (warp >> 2) * (RP / 2); /* Γ·Dᵀ: 16 rows × RP/2 ranks */
    const int m0d = (warp & 3) * 32, n0d = (warp >> 2) * (RP / 2); /* Uᵀ·Γ: 32 columns × RP/2 ranks */
    const CT *Ds = (const CT *)dsm;
    char *stages = dsm + L::DRES;

    if (KMAJ) lean_issue<NC * CC, RP>(dsm, D, cb, 0); /* its own group, complete before step 0 is used */
    else lean_issue<RP, NC * CC>(dsm, D, 0, cb);
    cp_commit();

    float acc_up[1][NIU][4];
    float acc_dn[NCD][2][NID][4];
    acc_zero(acc_up);
#pragma unroll
    for (int c = 0; c < NCD; c++) acc_zero(acc_dn[c]);

    for (int s = 0; s < S - 1; s++) {
        if (s < nk) {
            char *st = stages + s * L::STAGE;
            const i64 r0 = rb + (i64)(s / NC) * CR;
            lean_issue<CR, CC>(st, G, r0, cb + (i64)(s % NC) * CC);
            if (DN) lean_issue<CR, RP>(st + L::GA, U, r0, 0);
        }
        cp_commit();
    }
    for (int s = 0; s < nk; s++) {
        cp_wait(S - 2);
        __syncthreads();
        const int n = s + S - 1;
        if (n < nk) {
            char *st = stages + (n % S) * L::STAGE;
            const i64 r0 = rb + (i64)(n / NC) * CR;
            if (NC == 4 && (dbg & 4)) lean_issue<16, 512>(st, G, rb + (i64)n * 16, cb); /* diagnostic: the load shape alone */
            else lean_issue<CR, CC>(st, G, r0, cb + (i64)((n + ((dbg & 8) ? blockIdx.y : 0)) % NC) * CC);
            if (DN) lean_issue<CR, RP>(st + L::GA, U, r0, 0);
        }
        cp_commit();
        const char *st = stages + (s % S) * L::STAGE;
        const CT *Gs = (const CT *)st;
        const int c = s % NC;
        const i64 r0 = rb + (i64)(s / NC) * CR;
        if (COPY) lean_store<CR, CC>(st, copyG, r0, cb + (i64)c * CC); /* dy0 = the staged dy chunk */
        if (dbg & 2) {}
        else if (KMAJ) warp_mma_ldm<CT, 1, NIU, false, true>::run(acc_up, Gs, CC + 8, Ds + c * CC * (RP + 8), RP + 8, m0u, n0u, CC);
        else warp_mma_ldm<CT, 1, NIU, false, false>::run(acc_up, Gs, CC + 8, Ds + c * CC, NC * CC + 8, m0u, n0u, CC);
        if (DN && !(dbg & 1)) {
            const CT *Us = (const CT *)(st + L::GA);
#pragma unroll
            for (int cc = 0; cc < NCD; cc++)
                if (cc == c) warp_mma_ldm<CT, 2, NID, true, true>::run(acc_dn[cc], Gs, CC + 8, Us, RP + 8, m0d, n0d, CR);
        }
        if (c == NC - 1) { /* the strip's Γ·Dᵀ is complete: its partial rows */
#pragma unroll
            for (int ni = 0; ni < NIU; ni++)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const i64 o = r0 + acc_row(m0u, 0, e);
                    if (o < O)
                        *(float2 *)&part_up[((i64)blockIdx.x * O + o) * RP + acc_col(n0u, ni, e)] =
                            make_float2(acc_up[0][ni][e], acc_up[0][ni][e + 1]);
                }
            acc_zero(acc_up);
        }
    }
    cp_wait(0);
#pragma unroll
    for (int cc = 0; cc < (DN ? NCD : 0); cc++)
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < NID; ni++)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const i64 j = cb + cc * CC + acc_row(m0d, mi, e);
                    if (j < N)
                        *(float2 *)&part_dn[((i64)blockIdx.y * N + j) * RP + acc_col(n0d, ni, e)] =
                            make_float2(acc_dn[cc][mi][ni][e], acc_dn[cc][mi][ni][e + 1]);
                }
}

bool mb1_view_ok(const lk_view &v, int ct) { return v.p && v.dt == ct && (v.flags & LK_VEC) && v.s1 == 1; }

int mb1_env(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

struct mb1_call {
    lk_view G, U, D, copyG; /* U unused without DN, copyG p NULL = no copy */
    i64 O, N;
    float **pu, **pd;       /* pd unused without DN */
    int64_t *zu, *zd;
};

template <typename CT, int RP, int NC, bool KMAJ, bool DN, bool COPY>
int mb1_launch(const mb1_call &a, const lk_device *dev, cudaStream_t s, int *done) {
    typedef mb1_layout<RP, NC, KMAJ, DN> L;
    /* one block per SM (the grid below), so the deepest ring that fits: ≤ 8 stages, 7 chunks in flight
       (session 30: at 3–4 stages the kernel waited on DRAM latency, 28–45 % of its bandwidth) */
    int S = (dev->smem_optin - L::DRES) / L::STAGE;
    if (S > 8) S = 8;
    S = mb1_env("LYCO_CUDA_MB1_S", S);
    if (S < 2 || L::DRES + S * L::STAGE > dev->smem_optin) return LYCO_OK;
    const i64 ncr = cdiv(a.N, NC * CC), nst = cdiv(a.O, CR);
    i64 rows_per = dev->sms / ncr;
    if (rows_per < 1) rows_per = 1;
    int NS = (int)cdiv(nst, rows_per);
    NS = mb1_env(DN ? "LYCO_CUDA_MB1_NS" : "LYCO_CUDA_RR_NS", NS);
    if (NS < 1) NS = 1;
    const i64 nrr = cdiv(nst, NS);
    if (ncr > 2147483647LL || nrr > 65535) return LYCO_OK;
    const int bytes = L::DRES + S * L::STAGE;
    LK_SMEM_OPTIN(bytes, k_merge_bwd_onepass<CT, RP, NC, KMAJ, DN, COPY>);
    int rc = lk_scratch_alloc((void **)a.pu, (size_t)(ncr * a.O * RP) * 4, s);
    if (rc == LYCO_OK && DN) rc = lk_scratch_alloc((void **)a.pd, (size_t)(nrr * a.N * RP) * 4, s);
    if (rc) return rc;
    *done = 1;
    *a.zu = ncr;
    if (DN) *a.zd = nrr;
    k_merge_bwd_onepass<CT, RP, NC, KMAJ, DN, COPY><<<dim3((unsigned)ncr, (unsigned)nrr), NT, bytes, s>>>(
        a.G, a.U, a.D, a.copyG, NS, S, *a.pu, DN ? *a.pd : NULL, mb1_env("LYCO_CUDA_MB1_DBG", 0));
    LK_LAUNCHED(DN ? "merge_bwd_onepass" : "reduce_resident");
    return LYCO_OK;
}

template <typename CT, int RP, bool KMAJ, bool DN, bool COPY>
int mb1_nc(const mb1_call &a, const lk_device *dev, cudaStream_t s, int *done) {
    const int nc = mb1_env("LYCO_CUDA_MB1_NC", a.N >= 2048 ? 4 : 2);
    return nc == 4 ? mb1_launch<CT, RP, 4, KMAJ, DN, COPY>(a, dev, s, done) : mb1_launch<CT, RP, 2, KMAJ, DN, COPY>(a, dev, s, done);
}

template <typename CT, int RP> int mb1_row(const mb1_call &a, bool kmaj, const lk_device *dev, cudaStream_t s, int *done) {
    const bool copy = a.copyG.p != NULL;
    if (kmaj) return copy ? mb1_nc<CT, RP, true, false, true>(a, dev, s, done) : mb1_nc<CT, RP, true, false, false>(a, dev, s, done);
    return copy ? mb1_nc<CT, RP, false, false, true>(a, dev, s, done) : mb1_nc<CT, RP, false, false, false>(a, dev, s, done);
}

} // namespace

extern "C" int lk_merge_bwd_onepass(int32_t ct, const lk_view *G, const lk_view *U, const lk_view *D, int64_t O, int64_t N,
                                    int64_t r, float **part_up, int64_t *z_up, float **part_dn, int64_t *z_dn, int64_t *rp,
                                    const lk_device *dev, void *stream, int *done) {
    *done = 0;
    *part_up = *part_dn = NULL;
    if (mb1_env("LYCO_CUDA_MB1", 1) == 0 || (ct != DT_BF16 && ct != DT_F16) || r < 1 || r > 32 || O < 1 || N < 1) return LYCO_OK;
    if (!mb1_view_ok(*G, ct) || !mb1_view_ok(*U, ct) || !mb1_view_ok(*D, ct)) return LYCO_OK;
    if (G->rows != O || G->cols != N || U->rows != O || U->cols != r || D->rows != r || D->cols != N) return LYCO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    mb1_call a;
    memset(&a, 0, sizeof a);
    a.G = *G;
    a.U = *U;
    a.D = *D;
    a.O = O;
    a.N = N;
    a.pu = part_up;
    a.pd = part_dn;
    a.zu = z_up;
    a.zd = z_dn;
    *rp = r <= 16 ? 16 : 32;
    if (*rp == 16)
        return ct == DT_BF16 ? mb1_nc<bf16_t, 16, false, true, false>(a, dev, s, done) : mb1_nc<f16_t, 16, false, true, false>(a, dev, s, done);
    return ct == DT_BF16 ? mb1_nc<bf16_t, 32, false, true, false>(a, dev, s, done) : mb1_nc<f16_t, 32, false, true, false>(a, dev, s, done);
}

extern "C" int lk_reduce_resident(int32_t ct, const lk_view *A, const lk_view *B, int b_kmajor, const lk_view *copyA, int64_t M,
                                  int64_t K, int64_t rp, float **part, int64_t *Z, const lk_device *dev, void *stream, int *done) {
    *done = 0;
    *part = NULL;
    if (mb1_env("LYCO_CUDA_RR", 1) == 0 || (ct != DT_BF16 && ct != DT_F16) || (rp != 16 && rp != 32) || M < 1 || K < 1) return LYCO_OK;
    if (!mb1_view_ok(*A, ct) || !mb1_view_ok(*B, ct) || (copyA && !mb1_view_ok(*copyA, ct))) return LYCO_OK;
    if (A->rows != M || A->cols != K || (copyA && (copyA->rows != M || copyA->cols != K))) return LYCO_OK;
    if (b_kmajor ? (B->rows != K || B->cols > rp) : (B->cols != K || B->rows > rp)) return LYCO_OK;
    /* small grids (few tokens) stay on reduce_lean.cu's split kernels, which split K further */
    if (cdiv(M, CR) * cdiv(K, 4 * CC) < dev->sms && mb1_env("LYCO_CUDA_RR", 1) != 2) return LYCO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    mb1_call a;
    memset(&a, 0, sizeof a);
    a.G = *A;
    a.D = *B;
    if (copyA) a.copyG = *copyA;
    a.O = M;
    a.N = K;
    a.pu = part;
    a.zu = Z;
    if (rp == 16) return ct == DT_BF16 ? mb1_row<bf16_t, 16>(a, b_kmajor, dev, s, done) : mb1_row<f16_t, 16>(a, b_kmajor, dev, s, done);
    return ct == DT_BF16 ? mb1_row<bf16_t, 32>(a, b_kmajor, dev, s, done) : mb1_row<f16_t, 32>(a, b_kmajor, dev, s, done);
}
