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
 * 4-stage cp.async ring; each stage also holds the strip's 64 × RP rows of U (re-read from L2, a
 * quarter of the stage's bytes). Per chunk, 8 warps:
 *   Γ·Dᵀ: 4 row groups × 2 rank halves (16 rows × RP/2 ranks, k = the chunk's 128 columns),
 *         accumulated over the strip's NC chunks, then stored as the strip's partial rows;
 *   Uᵀ·Γ: 4 column groups × 2 rank halves (32 columns × RP/2 ranks, k = the chunk's 64 rows),
 *         accumulated over the region's strips in NC register sets (one per chunk column),
 *         stored once at the end.
 * Both products read the staged Γ tile by ldmatrix (the second transposed) and sum in fp32 in
 * a fixed order: deterministic, no atomics. Partials: cdiv(N, NC·128)·O·RP + cdiv(O, NS·64)·N·RP
 * fp32 (scratch, allocated here, freed by the caller). NS is chosen so that the grid is about one
 * block per SM (more blocks → more Uᵀ·Γ partials). A/B and tuning: LYCO_CUDA_MB1=0 (locon.cu's
 * two-pass kernels), LYCO_CUDA_MB1_NS, LYCO_CUDA_MB1_NC (2 or 4), LYCO_CUDA_MB1_S (2…8).
 *
 * Measured (H200, bf16, 4096² r32, session 30, docs/kernels.md): the kernel 48 µs at 27 % of DRAM
 * bandwidth; the merge backward row 58–66 µs against 67–75 with the two passes, and forward +
 * backward through lyco.merge 64.3 µs against LyCORIS's Triton kernels' 68.4. With the mma
 * switched off the same loop still took 33–35 µs (36 % of DRAM) and 16 × 512 chunks or a staggered
 * chunk order did not change that, nor did 8 stages or two blocks per SM: the streaming skeleton,
 * not the products, is what holds the kernel — the next step is there (e.g. TMA bulk copies with
 * per-stage mbarriers instead of a block barrier per 16 KB step).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/kern_lowrank.h"

namespace {

const int CR = 64;  /* rows per chunk (one strip) */
const int CC = 128; /* columns per chunk */

template <int RP, int NC> struct mb1_layout {
    static const int DRES = RP * (NC * CC + 8) * 2;  /* resident D columns of the region */
    static const int GA = CR * (CC + 8) * 2;         /* Γ chunk */
    static const int STAGE = GA + CR * (RP + 8) * 2; /* + the strip's U rows */
};

template <typename CT, int RP, int NC>
__global__ __launch_bounds__(NT) void k_merge_bwd_onepass(lk_view G, lk_view U, lk_view D, int NS, int S, float *part_up,
                                                          float *part_dn) {
    typedef mb1_layout<RP, NC> L;
    const int NI = RP / 16;
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

    lean_issue<RP, NC * CC>(dsm, D, 0, cb); /* its own group, complete before step 0 is used (the pipeline's first wait) */
    cp_commit();

    float acc_up[1][NI][4];
    float acc_dn[NC][2][NI][4];
    acc_zero(acc_up);
#pragma unroll
    for (int c = 0; c < NC; c++) acc_zero(acc_dn[c]);

    /* step s: strip s / NC, chunk column s % NC (Γ chunk and the strip's U rows, one group) */
    lean_pipeline(
        stages, L::STAGE, S, nk,
        [&](char *st, int s) {
            const i64 r0 = rb + (i64)(s / NC) * CR;
            lean_issue<CR, CC>(st, G, r0, cb + (i64)(s % NC) * CC);
            lean_issue<CR, RP>(st + L::GA, U, r0, 0);
        },
        [&](const char *st, int s) {
            const CT *Gs = (const CT *)st, *Us = (const CT *)(st + L::GA);
            const int c = s % NC;
            warp_mma_ldm<CT, 1, NI, false, false>::run(acc_up, Gs, CC + 8, Ds + c * CC, NC * CC + 8, m0u, n0u, CC);
#pragma unroll
            for (int cc = 0; cc < NC; cc++) /* static register sets: the branch picks one */
                if (cc == c) warp_mma_ldm<CT, 2, NI, true, true>::run(acc_dn[cc], Gs, CC + 8, Us, RP + 8, m0d, n0d, CR);
            if (c != NC - 1) return;
            const i64 r0 = rb + (i64)(s / NC) * CR; /* the strip's Γ·Dᵀ is complete: its partial rows */
#pragma unroll
            for (int ni = 0; ni < NI; ni++)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const i64 o = r0 + acc_row(m0u, 0, e);
                    if (o < O)
                        *(float2 *)&part_up[((i64)blockIdx.x * O + o) * RP + acc_col(n0u, ni, e)] =
                            make_float2(acc_up[0][ni][e], acc_up[0][ni][e + 1]);
                }
            acc_zero(acc_up);
        });
#pragma unroll
    for (int cc = 0; cc < NC; cc++)
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < NI; ni++)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const i64 j = cb + cc * CC + acc_row(m0d, mi, e);
                    if (j < N)
                        *(float2 *)&part_dn[((i64)blockIdx.y * N + j) * RP + acc_col(n0d, ni, e)] =
                            make_float2(acc_dn[cc][mi][ni][e], acc_dn[cc][mi][ni][e + 1]);
                }
}

template <typename CT, int RP, int NC>
int mb1_launch(const lk_view *G, const lk_view *U, const lk_view *D, i64 O, i64 N, float **pu, int64_t *zu, float **pd,
               int64_t *zd, const lk_device *dev, cudaStream_t s, int *done) {
    typedef mb1_layout<RP, NC> L;
    /* 4 stages (3 chunks in flight); 8 measured the same (session 30), with twice the shared memory */
    int S = (dev->smem_optin - L::DRES) / L::STAGE;
    if (S > 4) S = 4;
    S = lk_env_int("LYCO_CUDA_MB1_S", S);
    if (S < 2 || S > 8 || L::DRES + S * L::STAGE > dev->smem_optin) return LYCO_OK;
    /* about one block per SM: each more row region adds N·RP partials */
    const i64 ncr = cdiv(N, NC * CC), nst = cdiv(O, CR);
    i64 rows_per = dev->sms / ncr;
    if (rows_per < 1) rows_per = 1;
    int NS = lk_env_int("LYCO_CUDA_MB1_NS", (int)cdiv(nst, rows_per));
    if (NS < 1) NS = 1;
    const i64 nrr = cdiv(nst, NS);
    if (ncr > 2147483647LL || nrr > 65535) return LYCO_OK;
    const int bytes = L::DRES + S * L::STAGE;
    LK_SMEM_OPTIN(bytes, k_merge_bwd_onepass<CT, RP, NC>);
    int rc = lk_scratch_alloc((void **)pu, (size_t)(ncr * O * RP) * 4, s);
    if (rc == LYCO_OK) rc = lk_scratch_alloc((void **)pd, (size_t)(nrr * N * RP) * 4, s);
    if (rc) return rc;
    *done = 1;
    *zu = ncr;
    *zd = nrr;
    k_merge_bwd_onepass<CT, RP, NC><<<dim3((unsigned)ncr, (unsigned)nrr), NT, bytes, s>>>(*G, *U, *D, NS, S, *pu, *pd);
    LK_LAUNCHED("merge_bwd_onepass");
    return LYCO_OK;
}

template <typename CT, int RP>
int mb1_nc(const lk_view *G, const lk_view *U, const lk_view *D, i64 O, i64 N, float **pu, int64_t *zu, float **pd,
           int64_t *zd, const lk_device *dev, cudaStream_t s, int *done) {
    const int nc = lk_env_int("LYCO_CUDA_MB1_NC", N >= 2048 ? 4 : 2);
    return nc == 4 ? mb1_launch<CT, RP, 4>(G, U, D, O, N, pu, zu, pd, zd, dev, s, done)
                   : mb1_launch<CT, RP, 2>(G, U, D, O, N, pu, zu, pd, zd, dev, s, done);
}

} // namespace

extern "C" int lk_merge_bwd_onepass(int32_t ct, const lk_view *G, const lk_view *U, const lk_view *D, int64_t O, int64_t N,
                                    int64_t r, float **part_up, int64_t *z_up, float **part_dn, int64_t *z_dn, int64_t *rp,
                                    const lk_device *dev, void *stream, int *done) {
    *done = 0;
    *part_up = *part_dn = NULL;
    if (lk_env_int("LYCO_CUDA_MB1", 1) == 0 || (ct != DT_BF16 && ct != DT_F16) || r < 1 || r > 32 || O < 1 || N < 1) return LYCO_OK;
    if (!lean_view_ok(*G, ct) || !lean_view_ok(*U, ct) || !lean_view_ok(*D, ct)) return LYCO_OK;
    if (G->rows != O || G->cols != N || U->rows != O || U->cols != r || D->rows != r || D->cols != N) return LYCO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    *rp = r <= 16 ? 16 : 32;
    if (*rp == 16)
        return ct == DT_BF16 ? mb1_nc<bf16_t, 16>(G, U, D, O, N, part_up, z_up, part_dn, z_dn, dev, s, done)
                             : mb1_nc<f16_t, 16>(G, U, D, O, N, part_up, z_up, part_dn, z_dn, dev, s, done);
    return ct == DT_BF16 ? mb1_nc<bf16_t, 32>(G, U, D, O, N, part_up, z_up, part_dn, z_dn, dev, s, done)
                         : mb1_nc<f16_t, 32>(G, U, D, O, N, part_up, z_up, part_dn, z_dn, dev, s, done);
}
