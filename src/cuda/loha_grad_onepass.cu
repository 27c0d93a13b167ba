/*
 * loha_grad_onepass.cu — LoHa's merge backward (ALGORITHMS.md §2.2) for uniform 16-bit operands,
 * every parameter gradient's partials from one read of Γ = ∂L/∂W'':
 *
 *   R_t = Ā_t·B̄_t (O × N, N = I·K),  Γs[o, j] = Γ[o, j]·k_o,  k_o = m·σs·s'·q_o
 *   G_R1 = Γs ⊙ R_2,  G_R2 = Γs ⊙ R_1
 *   part_A_t[x][o][k] = Σ_{j ∈ column region x} G_Rt[o, j]·B̄_t[k, j]     (→ ∂L/∂Ā_t)
 *   part_B_t[y][k][j] = Σ_{o ∈ row region y}    Ā_t[o, k]·G_Rt[o, j]     (→ ∂L/∂B̄_t)
 *   sig[y·X + x]      = Σ_{region} Γ[o, j]·m·s'·q_o·R_1[o, j]·R_2[o, j]  (fp64; → ∂L/∂σs)
 *
 * loha_tc.cu's tc_grads sums the partials in region order (fp64, k_tc_sum) and rounds once into
 * each leaf, as for its per-tile kernel (k_loha_tc_grad), which this replaces where it applies:
 * Γ, Ā_t, B̄_t all in the compute dtype CT (bf16/fp16), row-major with 16-byte aligned rows
 * (LK_VEC), ranks r_t ≤ 32 (rank tile RP = 16 or 32), not Tucker, no DoRA. Numerics: R_t from
 * CT factors with fp32 sums (mma.sync), G_Rt in fp32 split into two exact CT parts (hi + lo: 16
 * significant bits for bf16, 22 for fp16), smallest first into fp32 accumulators. Two parts, not
 * k_loha_tc_grad's three for bf16: every leaf here is 16-bit (the factors are in CT), so a
 * relative error of 2⁻¹⁷ per G_Rt element sits 2⁸ below the leaf's own rounding, and the eager
 * chain rounds G_Rt to bf16 outright (one part).
 *
 * Why (H200, bf16, 4096² r16, docs/kernels.md): k_loha_tc_grad took 159 µs of the row's 240 µs
 * against an 8.2 µs floor: a block per 64×128 tile and term (Γ read twice, R_1 and R_2 formed
 * twice), one tile in flight per block, the G_Rt parts through 52 KB of shared memory and
 * 48 MB of per-tile partials.
 *
 * Tiling (merge_bwd_onepass.cu's skeleton). A block owns a region of NS·64 rows × NC·128 columns
 * and streams it as 64 × 128 chunks (row strip by row strip, the strip's NC chunks in column
 * order) through an S-stage cp.async ring; a stage holds the Γ chunk, the strip's 64 × RP rows of
 * Ā_1 and Ā_2, the chunk's RP × 128 columns of B̄_1 and B̄_2 (factors re-read from L2) and the
 * strip's per-row scales. Warps 0–3 serve term 1, warps 4–7 term 2 (t = warp / 4, u = the other
 * term); each warp forms the G_Rt values it needs itself, in registers, twice per chunk:
 *   ∂Ā phase: warp rows 16·(warp % 4) … +16, all 128 columns in 16-column steps: R_u (16 × 16,
 *     mma), Γ by ldmatrix in the accumulator layout, G_Rt split into parts, which are already
 *     mma A fragments (k = columns), times B̄_t's columns (ldmatrix) into the 16 × RP partial,
 *     accumulated over the strip's NC chunks, then stored;
 *   ∂B̄ phase: warp columns 32·(warp % 4) … +32, the 64 rows in 16-row steps: R_u (16 × 32),
 *     G_Rt parts transposed in registers by movmatrix into mma B fragments (k = rows), Ā_tᵀ
 *     (ldmatrix.trans) times them into the RP × 32 partial, accumulated over the region's strips
 *     (NC register sets), stored once at the end.
 *   The σs partial (when wanted) comes from the term-1 warps' ∂Ā phase, which also forms R_1.
 * Nothing goes through shared memory but the staged operands; sums in a fixed order, no atomics:
 * deterministic. Partials: X·O·r_t + Y·r_t·N floats per term (X = ⌈N / (NC·128)⌉ column
 * regions, Y = ⌈O / (NS·64)⌉ row regions; NS chosen for about one block per SM).
 * Shared parts (default, LYCO_CUDA_LOHA_MB1_SH=1): the ∂Ā phase also stores each term's two
 * parts (2 × 64 × 136 CT per term, 70 KB) and, after one more barrier, the ∂B̄ phase reads them by
 * ldmatrix.trans instead of forming R_u, Γs and the parts again and transposing them by
 * movmatrix (the description above is SH=0's). One block per SM (stages + parts), 4 stages at
 * rank tile 16, 3 at 32. Bitwise the same results as SH=0 (the same values, the same order).
 * H200, bf16 (session 31): 4096² r16 row 85–101 µs against 102–110 with SH=0 (two blocks per SM),
 * the kernel 53.8 vs 54.3 µs plus fewer partials; LoHa merge 4096² r32 forward + backward 116.6
 * vs 127.5 µs (LyCORIS's Triton kernels 115.5). SH=0: rank tile 16 at ≤ 128 registers, 3 stages,
 * two blocks per SM; 32: one block, 4 stages.
 * A/B and tuning: LYCO_CUDA_LOHA_MB1=0 (k_loha_tc_grad), LYCO_CUDA_LOHA_MB1_SH=0, _S (stages 2…6),
 * LYCO_CUDA_LOHA_MB1_OCC (SH=0: 1 or 2 blocks per SM; 2 at rank tile 32 spills a few registers),
 * LYCO_CUDA_LOHA_MB1_NS (strips per region), LYCO_CUDA_LOHA_MB1_NC (1 or 2).
 */
#include <stdlib.h>

#include "cuda/common.cuh"
#include "cuda/kern_loha.h"

namespace {

const int CR = 64;  /* rows per chunk (one strip) */
const int CC = 128; /* columns per chunk */
const int GP = CC + 8;

template <int RP> struct lg_layout {
    static const int A1 = CR * GP * 2;               /* after the Γ chunk */
    static const int A2 = A1 + CR * (RP + 8) * 2;
    static const int B1 = A2 + CR * (RP + 8) * 2;
    static const int B2 = B1 + RP * GP * 2;
    static const int ROWK = B2 + RP * GP * 2;        /* k_o per strip row (fp32) */
    static const int ROWC = ROWK + CR * 4;           /* s'·q_o per strip row (fp32, for σs) */
    static const int STAGE = ROWC + CR * 4;
};

/* 8×8 16-bit matrix transposed across the warp: in, the lane holds (row lane/4, cols 2·(lane%4)
   and +1); out, the same positions of the transpose */
__device__ __forceinline__ unsigned movtrans(unsigned v) {
    unsigned d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(v));
    return d;
}

/* the low / high CT value of a packed pair, as fp32 (bf: bf16, else fp16) */
__device__ __forceinline__ float lo_f(unsigned u, bool bf) {
    return bf ? __uint_as_float(u << 16) : __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
}
__device__ __forceinline__ float hi_f(unsigned u, bool bf) {
    return bf ? __uint_as_float(u & 0xffff0000u) : __half2float(__ushort_as_half((unsigned short)(u >> 16)));
}

/* two fp32 values rounded to CT (RN), packed (lo = first) */
template <typename CT> __device__ __forceinline__ unsigned pack2_rn(float v0, float v1) {
    if (ct_of<CT>::dt == DT_BF16) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
        return *(const unsigned *)&h;
    }
    const __half2 h = __floats2half2_rn(v0, v1);
    return *(const unsigned *)&h;
}

/* Two fp32 values as NP parts of CT, packed pairs (lo = first): hi = RN(v), then RN(v − hi), …;
   each difference is exact in fp32 (store_parts' split, two values per conversion). */
template <typename CT, int NP> __device__ __forceinline__ void split_pair(unsigned (&out)[NP], float v0, float v1) {
    const bool bf = ct_of<CT>::dt == DT_BF16;
#pragma unroll
    for (int p = 0; p < NP; p++) {
        out[p] = pack2_rn<CT>(v0, v1);
        if (p + 1 < NP) {
            v0 -= lo_f(out[p], bf);
            v1 -= hi_f(out[p], bf);
        }
    }
}

/* the four Γ values of one 16×16 block in the accumulator layout of its two n8 tiles: g[0] = tile 0
   (row lane/4), g[1] = tile 0 (row +8), g[2] = tile 1 (row lane/4), g[3] = tile 1 (row +8) */
template <typename CT>
__device__ __forceinline__ void gamma_block(unsigned (&g)[4], const CT *Gs, int m, int k0, int lane) {
    ldm4<false>(g, ldm_a_addr<CT, false>(Gs, GP, m, k0, lane));
}

/* OCC: blocks per SM the kernel is built for (registers ≤ 65536 / (OCC·NT)). SH: the ∂Ā phase
   also stores its G_Rt parts (both terms, PARTS bytes after the stages) and the ∂B̄ phase reads
   them by ldmatrix.trans instead of forming them again (one more barrier per chunk). */
const int PARTS = 2 * 2 * CR * GP * 2; /* [term][part][64][136] CT */
template <typename CT, int RP, int NC, int OCC, bool SH>
__global__ __launch_bounds__(NT, OCC) void k_loha_grad_onepass(lk_loha_args a, int NS, int S, int want_sig, float *pA1,
                                                             float *pA2, float *pB1, float *pB2, double *sigpart) {
    typedef lg_layout<RP> L;
    const int NP = 2, NIA = RP / 8, MIB = RP / 16, KS = RP / 16;
    const bool bf = ct_of<CT>::dt == DT_BF16;
    extern __shared__ __align__(16) char dsm[];
    __shared__ double red[NT / 32];
    const lk_loha &H = a.L;
    const i64 O = H.O, N = H.IK;
    const i64 cb = (i64)blockIdx.x * (NC * CC), rb = (i64)blockIdx.y * NS * CR;
    const i64 rows_left = O - rb;
    const int strips = rows_left < (i64)NS * CR ? (int)cdiv(rows_left, CR) : NS;
    const int nk = strips * NC;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = warp >> 2, q = warp & 3;
    const i64 rt = t ? H.r2 : H.r1;
    const float sig = sigma_ct<CT>(H.sigma), mf = (float)H.m;
    const bool do_sig = want_sig && t == 0;
    /* own term's and other term's operands, as offsets into a stage */
    const int offAt = t ? L::A2 : L::A1, offBt = t ? L::B2 : L::B1;
    const int offAu = t ? L::A1 : L::A2, offBu = t ? L::B1 : L::B2;

    CT *const Ps = (CT *)(dsm + S * L::STAGE); /* SH: the G_Rt parts */
    float accA[1][NIA][4];
    float accB[NC][MIB][4][4];
    acc_zero(accA);
#pragma unroll
    for (int c = 0; c < NC; c++) acc_zero(accB[c]);
    double gs = 0.0;

    lean_pipeline(
        dsm, L::STAGE, S, nk,
        [&](char *st, int s) {
            const i64 r0 = rb + (i64)(s / NC) * CR, c0 = cb + (i64)(s % NC) * CC;
            lean_issue<CR, CC>(st, a.G, r0, c0);
            lean_issue<CR, RP>(st + L::A1, H.A1, r0, 0);
            lean_issue<CR, RP>(st + L::A2, H.A2, r0, 0);
            lean_issue<RP, CC>(st + L::B1, H.B1, 0, c0);
            lean_issue<RP, CC>(st + L::B2, H.B2, 0, c0);
            if (threadIdx.x < CR) { /* plain stores: read after at least one later barrier */
                const i64 o = r0 + threadIdx.x;
                const float rc = o < O ? (float)(H.s * (double)vget(H.mask, o, 1.0f)) : 0.0f;
                ((float *)(st + L::ROWC))[threadIdx.x] = rc;
                ((float *)(st + L::ROWK))[threadIdx.x] = mf * sig * rc;
            }
        },
        [&](const char *st, int s) {
            const CT *Gs = (const CT *)st;
            const CT *At = (const CT *)(st + offAt), *Bt = (const CT *)(st + offBt);
            const CT *Au = (const CT *)(st + offAu), *Bu = (const CT *)(st + offBu);
            const float *rowk = (const float *)(st + L::ROWK), *rowc = (const float *)(st + L::ROWC);
            const int c = s % NC;
            const int g = lane >> 2;

            /* ∂Ā phase: rows 16q … 16q + 15, 16 columns a step */
            {
                const float k_lo = rowk[16 * q + g], k_hi = rowk[16 * q + g + 8];
                unsigned au[KS][4]; /* Ā_u rows of the warp, every rank step */
#pragma unroll
                for (int ks = 0; ks < KS; ks++) ldm4<false>(au[ks], ldm_a_addr<CT, false>(Au, RP + 8, 16 * q, 16 * ks, lane));
#pragma unroll 2
                for (int kk = 0; kk < CC / 16; kk++) {
                    float R[2][4] = {};
#pragma unroll
                    for (int ks = 0; ks < KS; ks++) {
                        unsigned qq[4];
                        ldm4<true>(qq, ldm_b_addr<CT, true>(Bu, GP, 16 * kk, 16 * ks, lane));
                        const unsigned b0[2] = {qq[0], qq[1]}, b1[2] = {qq[2], qq[3]};
                        mma16816<CT>(R[0], au[ks], b0);
                        mma16816<CT>(R[1], au[ks], b1);
                    }
                    unsigned gq[4];
                    gamma_block<CT>(gq, Gs, 16 * q, 16 * kk, lane);
                    if (do_sig) { /* Σ Γ·m·s'q_o·R_1·R_2 over the tile, once (term-1 warps) */
                        float R1[1][2][4];
                        acc_zero(R1);
                        warp_mma_ldm<CT, 1, 2, false, true>::run(R1, At, RP + 8, Bt, GP, 16 * q, 16 * kk, RP);
                        const float c_lo = rowc[16 * q + g], c_hi = rowc[16 * q + g + 8];
#pragma unroll
                        for (int ni = 0; ni < 2; ni++)
#pragma unroll
                            for (int e = 0; e < 4; e++) {
                                const unsigned u = gq[2 * ni + (e >> 1)];
                                const float gam = mf * ((e & 1) ? hi_f(u, bf) : lo_f(u, bf));
                                gs += (double)gam * ((double)((e >> 1) ? c_hi : c_lo) * (double)R1[0][ni][e] * (double)R[ni][e]);
                            }
                    }
                    /* G_Rt parts as A fragments: a0 = (row g, k 0–7), a1 = (g+8, 0–7), a2 = (g, 8–15), a3 = (g+8, 8–15) */
                    unsigned af[4][NP];
#pragma unroll
                    for (int ni = 0; ni < 2; ni++)
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const unsigned u = gq[2 * ni + h];
                            const float kr = h ? k_hi : k_lo;
                            split_pair<CT, NP>(af[2 * ni + h], lo_f(u, bf) * kr * R[ni][2 * h], hi_f(u, bf) * kr * R[ni][2 * h + 1]);
                            if (SH) {
                                const int idx = (16 * q + g + 8 * h) * GP + 16 * kk + 8 * ni + 2 * (lane & 3);
#pragma unroll
                                for (int p = 0; p < NP; p++) *(unsigned *)(Ps + (t * NP + p) * CR * GP + idx) = af[2 * ni + h][p];
                            }
                        }
                    unsigned bfr[NIA][2];
#pragma unroll
                    for (int nj = 0; nj < NIA / 2; nj++) {
                        unsigned qq[4];
                        ldm4<false>(qq, ldm_b_addr<CT, false>(Bt, GP, 16 * nj, 16 * kk, lane));
                        bfr[2 * nj][0] = qq[0];
                        bfr[2 * nj][1] = qq[1];
                        bfr[2 * nj + 1][0] = qq[2];
                        bfr[2 * nj + 1][1] = qq[3];
                    }
#pragma unroll
                    for (int p = NP - 1; p >= 0; p--) {
                        const unsigned av[4] = {af[0][p], af[1][p], af[2][p], af[3][p]};
#pragma unroll
                        for (int ni = 0; ni < NIA; ni++) mma16816<CT>(accA[0][ni], av, bfr[ni]);
                    }
                }
                if (c == NC - 1) { /* the strip's ∂Ā partial rows are complete */
                    const i64 r0 = rb + (i64)(s / NC) * CR;
                    float *pA = t ? pA2 : pA1;
                    if (pA) {
#pragma unroll
                        for (int ni = 0; ni < NIA; ni++)
#pragma unroll
                            for (int e = 0; e < 4; e++) {
                                const i64 o = r0 + acc_row(16 * q, 0, e), k = acc_col(0, ni, e);
                                if (o < O && k < rt) pA[((i64)blockIdx.x * O + o) * rt + k] = accA[0][ni][e];
                            }
                    }
                    acc_zero(accA);
                }
            }

            /* ∂B̄ phase: columns 32q … 32q + 31 of the chunk, 16 rows a step */
            if (SH) { /* the parts of both terms from shared memory (B fragments, k = rows) */
                __syncthreads();
#pragma unroll 1
                for (int mm = 0; mm < CR / 16; mm++) {
                    unsigned afr[MIB][4];
#pragma unroll
                    for (int mi = 0; mi < MIB; mi++) ldm4<true>(afr[mi], ldm_a_addr<CT, true>(At, RP + 8, 16 * mi, 16 * mm, lane));
#pragma unroll
                    for (int cc = 0; cc < NC; cc++)
                        if (cc == c) {
#pragma unroll
                            for (int p = NP - 1; p >= 0; p--)
#pragma unroll
                                for (int nj = 0; nj < 2; nj++) {
                                    unsigned qq[4];
                                    ldm4<true>(qq, ldm_b_addr<CT, true>(Ps + (t * NP + p) * CR * GP, GP, 32 * q + 16 * nj, 16 * mm, lane));
                                    const unsigned b0[2] = {qq[0], qq[1]}, b1[2] = {qq[2], qq[3]};
#pragma unroll
                                    for (int mi = 0; mi < MIB; mi++) {
                                        mma16816<CT>(accB[cc][mi][2 * nj], afr[mi], b0);
                                        mma16816<CT>(accB[cc][mi][2 * nj + 1], afr[mi], b1);
                                    }
                                }
                        }
                }
            } else {
            unsigned bu[KS][4][2]; /* B̄_u columns of the warp, every rank step */
#pragma unroll
            for (int ks = 0; ks < KS; ks++)
#pragma unroll
                for (int nj = 0; nj < 2; nj++) {
                    unsigned qq[4];
                    ldm4<true>(qq, ldm_b_addr<CT, true>(Bu, GP, 32 * q + 16 * nj, 16 * ks, lane));
                    bu[ks][2 * nj][0] = qq[0];
                    bu[ks][2 * nj][1] = qq[1];
                    bu[ks][2 * nj + 1][0] = qq[2];
                    bu[ks][2 * nj + 1][1] = qq[3];
                }
#pragma unroll 1
            for (int mm = 0; mm < CR / 16; mm++) {
                float R[4][4] = {};
#pragma unroll
                for (int ks = 0; ks < KS; ks++) {
                    unsigned am[4];
                    ldm4<false>(am, ldm_a_addr<CT, false>(Au, RP + 8, 16 * mm, 16 * ks, lane));
#pragma unroll
                    for (int ni = 0; ni < 4; ni++) mma16816<CT>(R[ni], am, bu[ks][ni]);
                }
                unsigned gq[2][4];
                gamma_block<CT>(gq[0], Gs, 16 * mm, 32 * q, lane);
                gamma_block<CT>(gq[1], Gs, 16 * mm, 32 * q + 16, lane);
                const float k_lo = rowk[16 * mm + g], k_hi = rowk[16 * mm + g + 8];
                /* B fragments (k = rows, n = columns) of each n8 tile: the transposed parts */
                unsigned bq[4][2][NP];
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const unsigned u = gq[ni >> 1][2 * (ni & 1) + h];
                        const float kr = h ? k_hi : k_lo;
                        unsigned pr[NP];
                        split_pair<CT, NP>(pr, lo_f(u, bf) * kr * R[ni][2 * h], hi_f(u, bf) * kr * R[ni][2 * h + 1]);
#pragma unroll
                        for (int p = 0; p < NP; p++) bq[ni][h][p] = movtrans(pr[p]);
                    }
                unsigned afr[MIB][4];
#pragma unroll
                for (int mi = 0; mi < MIB; mi++) ldm4<true>(afr[mi], ldm_a_addr<CT, true>(At, RP + 8, 16 * mi, 16 * mm, lane));
#pragma unroll
                for (int cc = 0; cc < NC; cc++) /* static register sets: the branch picks one */
                    if (cc == c) {
#pragma unroll
                        for (int p = NP - 1; p >= 0; p--)
#pragma unroll
                            for (int mi = 0; mi < MIB; mi++)
#pragma unroll
                                for (int ni = 0; ni < 4; ni++) {
                                    const unsigned bv[2] = {bq[ni][0][p], bq[ni][1][p]};
                                    mma16816<CT>(accB[cc][mi][ni], afr[mi], bv);
                                }
                    }
            }
            }
        });

    float *pB = t ? pB2 : pB1;
    if (pB) {
#pragma unroll
        for (int cc = 0; cc < NC; cc++)
#pragma unroll
            for (int mi = 0; mi < MIB; mi++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const i64 k = acc_row(0, mi, e), j = cb + cc * CC + acc_col(32 * q, ni, e);
                        if (k < rt && j < N) pB[((i64)blockIdx.y * rt + k) * N + j] = accB[cc][mi][ni][e];
                    }
    }
    if (want_sig) { /* fixed order: lanes by the shuffle tree, then warps 0–3 in order */
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) gs += __shfl_xor_sync(0xffffffffu, gs, o);
        if (lane == 0) red[warp] = gs;
        __syncthreads();
        if (threadIdx.x == 0) {
            double sum = 0.0;
            for (int w = 0; w < 4; w++) sum += red[w];
            sigpart[(i64)blockIdx.y * gridDim.x + blockIdx.x] = sum;
        }
    }
}

template <typename CT, int RP, int NC, int OCC, bool SH>
int lg_launch(const lk_loha_args *a, const lk_loha_mb1_plan *p, float *const *parts, double *sigpart, cudaStream_t s) {
    const int bytes = p->stages * lg_layout<RP>::STAGE + (SH ? PARTS : 0);
    LK_SMEM_OPTIN(bytes, k_loha_grad_onepass<CT, RP, NC, OCC, SH>);
    k_loha_grad_onepass<CT, RP, NC, OCC, SH><<<dim3((unsigned)p->x, (unsigned)p->y), NT, bytes, s>>>(
        *a, p->ns, p->stages, sigpart != NULL, parts[0], parts[1], parts[2], parts[3], sigpart);
    LK_LAUNCHED("loha grad_onepass");
    return LYCO_OK;
}

template <typename CT, int RP> int lg_nc(const lk_loha_args *a, const lk_loha_mb1_plan *p, float *const *parts, double *sigpart, cudaStream_t s) {
    if (p->occ == 2) return p->nc == 2 ? lg_launch<CT, RP, 2, 2, false>(a, p, parts, sigpart, s) : lg_launch<CT, RP, 1, 2, false>(a, p, parts, sigpart, s);
    if (p->sh) return p->nc == 2 ? lg_launch<CT, RP, 2, 1, true>(a, p, parts, sigpart, s) : lg_launch<CT, RP, 1, 1, true>(a, p, parts, sigpart, s);
    return p->nc == 2 ? lg_launch<CT, RP, 2, 1, false>(a, p, parts, sigpart, s) : lg_launch<CT, RP, 1, 1, false>(a, p, parts, sigpart, s);
}

} // namespace

extern "C" int lk_loha_mb1_plan_make(const lk_loha_args *a, const lk_device *dev, lk_loha_mb1_plan *p) {
    const lk_loha &L = a->L;
    p->on = 0;
    if (lk_env_int("LYCO_CUDA_LOHA_MB1", 1) == 0 || (L.ct != DT_BF16 && L.ct != DT_F16) || L.tucker || a->dora.on) return 0;
    if (L.r1 < 1 || L.r2 < 1 || L.r1 > 32 || L.r2 > 32 || L.O < 1 || L.IK < 1) return 0;
    if (!lean_view_ok(a->G, L.ct) || !lean_view_ok(L.A1, L.ct) || !lean_view_ok(L.A2, L.ct) || !lean_view_ok(L.B1, L.ct) ||
        !lean_view_ok(L.B2, L.ct))
        return 0;
    if (a->G.rows != L.O || a->G.cols != L.IK || L.B1.cols != L.IK || L.B2.cols != L.IK) return 0;
    p->rp = (L.r1 > L.r2 ? L.r1 : L.r2) <= 16 ? 16 : 32;
    const int stage = p->rp == 16 ? lg_layout<16>::STAGE : lg_layout<32>::STAGE;
    /* two blocks per SM at rank tile 16 (≤ 128 registers without spills); 32 needs ~180 */
    p->sh = lk_env_int("LYCO_CUDA_LOHA_MB1_SH", 1) == 1; /* measured faster at ranks 16 and 32 (session 31) */
    const int occ = p->sh ? 1 : lk_env_int("LYCO_CUDA_LOHA_MB1_OCC", p->rp == 16 ? 2 : 1) == 2 ? 2 : 1;
    p->occ = occ;
    const int room = occ == 2 ? (dev->smem_optin - 2048) / 2 : dev->smem_optin - (p->sh ? PARTS : 0); /* two blocks: one SM's shared memory halved */
    int S = room / stage;
    if (S > (occ == 2 ? 3 : 4)) S = occ == 2 ? 3 : 4;
    S = lk_env_int("LYCO_CUDA_LOHA_MB1_S", S);
    if (S < 2 || S > 6 || S * stage > room) return 0;
    p->nc = lk_env_int("LYCO_CUDA_LOHA_MB1_NC", L.IK > CC ? 2 : 1) == 1 ? 1 : 2;
    p->x = cdiv(L.IK, p->nc * CC);
    const i64 nst = cdiv(L.O, CR);
    i64 rows_per = occ * dev->sms / p->x; /* about one wave: each more row region adds r·N partials */
    if (rows_per < 1) rows_per = 1;
    int NS = lk_env_int("LYCO_CUDA_LOHA_MB1_NS", (int)cdiv(nst, rows_per));
    if (NS < 1) NS = 1;
    p->ns = NS;
    p->y = cdiv(nst, NS);
    p->stages = S;
    if (p->x > 2147483647LL || p->y > 65535) return 0;
    p->on = 1;
    return 1;
}

extern "C" int lk_loha_mb1_launch(const lk_loha_args *a, const lk_loha_mb1_plan *p, float *const *parts, double *sigpart, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (a->L.ct == DT_BF16) return p->rp == 16 ? lg_nc<bf16_t, 16>(a, p, parts, sigpart, s) : lg_nc<bf16_t, 32>(a, p, parts, sigpart, s);
    return p->rp == 16 ? lg_nc<f16_t, 16>(a, p, parts, sigpart, s) : lg_nc<f16_t, 32>(a, p, parts, sigpart, s);
}
