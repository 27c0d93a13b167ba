/*
 * reduce_lean.cu — the common case of lowrank.cu's two split reductions with every run-time
 * decision made at compile time:
 *   row reduction    part[z][m][i] = Σ_{k ∈ range z} A[m, k]·B(i, k)      (B = r×K, or K×r "K-major")
 *                    (bypass forward / backward h = x·Dᵀ, backward g = dy·U with dy0 = dy copied
 *                    from the staged tiles, merge backward Γ·Dᵀ);
 *   column reduction part[z][n][i] = Σ_{m ∈ range z} A[m, n]·B[m, i]      (A M×N, B M×r)
 *                    (bypass backward d_up = dyᵀ·h and d_down = ghᵀ·x, merge backward d_down = Uᵀ·Γ)
 * when A, B (and the copy target) are all in the 16-bit compute dtype CT, row-major with 16-byte
 * aligned rows (LK_VEC), B in one part. Any M, N, K and rank ≤ 128: a 16-byte chunk across an
 * edge copies its in-range elements and zero-fills the rest.
 *
 * Three kernels. k_reduce_lean (64 × 64 steps; 128 × 64 for rank tiles 64 and 128) and
 * k_colreduce_lean (128 × 64, or the wide 256 × 32) keep lowrank.cu's split ranges, k order and
 * partial layout and use the same fragments (warp_mma_ldm), so their partials — and everything
 * finalised from them — are the general kernels' bit for bit. k_reduce_wide (32 × 256 steps, rank
 * tiles 16 and 32, the default) chooses
 * its own split (≤ the caller's partial sets) and adds four k slices in a fixed order: deterministic
 * and within the same budgets, but not bitwise the general kernel. lowrank.cu's finalisers run
 * unchanged on all of them.
 *
 * Why (H200 ncu, LoRA bypass backward 8192 tok × 4096² r32 bf16, docs/kernels.md "eighth
 * session"): k_reduce ran at 34–39 % of DRAM bandwidth with 40–55 % issue utilisation, the general
 * pipeline paying per chunk for run-time dtypes, strides and 64-bit indexing and two barriers per
 * step; k_colreduce read its k-major operands with two 16-bit loads per fragment register. Here a
 * step is: wait for its group, one barrier, issue the step S−1 ahead into the slot the previous
 * step used (its readers are past the barrier), ldmatrix + mma.
 *
 * Measured (H200, bf16, LoRA 8192 tokens × 4096², r 32; docs/kernels.md "tenth session"): h = x·Dᵀ
 * 36.8 µs (general kernel 40–50), gh = dy·U with the dy0 copy 73 → 54 µs wide, d_up / d_down 28 →
 * 26.5 µs wide — 1.7–2.5 TB/s, still short of the 4.1 TB/s copy ceiling (the factor tile re-read from
 * L2 every step is the next suspect).
 *
 * Shared memory (dynamic), per stage: row reduction A 64×72 + B 64×(RP+8) or RP×72 halfwords
 * (RP 32: 14 KB; wide: A 32×264 + B 256×(RP+8) or RP×264, RP 32: 33–37 KB, two blocks per SM),
 * column reduction A 64×136 + B 64×(RP+8) (RP 32: 22 KB; wide: A 32×264 + B 32×(RP+8), 19 KB);
 * S stages as lowrank.cu chooses them (three blocks per SM where they fit); rank tiles 64 and 128
 * (row reduction: 128-row blocks, A 128×72, 27–37 KB a stage) and 128 (column reduction) take the
 * deepest S ≤ 4 that leaves two blocks per SM (LYCO_CUDA_REDUCE_BIG=0: the former choice). No other memory.
 * LYCO_CUDA_REDUCE_GENERAL=1 sends every call to lowrank.cu's general kernels, LYCO_CUDA_REDUCE_WIDE=0
 * and LYCO_CUDA_COLREDUCE_WIDE=0 select the narrow tiles (A/B).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/kern_lowrank.h"

namespace {

const int RM = 64;  /* row reduction: rows per block */
const int RK = 64;  /* k (row-reduction) / row (column-reduction) step */
const int CN = 128; /* column reduction: columns per block */

template <int RP, bool KMAJ, int BR = RM> struct rl_layout {
    static const int A = BR * (RK + 8) * 2;
    static const int STAGE = A + (KMAJ ? RK * (RP + 8) : RP * (RK + 8)) * 2;
};
/* column reduction tiles: CNT columns × RKT rows a step (128 × 64, or the wide 256 × 32: 512
   contiguous bytes per row; the same k16 sequence per column, so the same partials bit for bit) */
template <int RP, int CNT = CN, int RKT = RK> struct cl_layout {
    static const int A = RKT * (CNT + 8) * 2;
    static const int STAGE = A + RKT * (RP + 8) * 2;
};



/* BR = 64 rows a block (warp tiles 16 × RP/2), or 128 (warp tiles 32 × RP/2: rank tiles 64 and
   128, where a 16-row warp tile re-read the factor tile from shared memory once per 16 rows and
   the 64-row block re-read it from L2 once per 64 rows; see rl_big_wanted). Each partial is the same
   k16 sequence through the same mma either way: the same bits. */
template <typename CT, int RP, bool KMAJ, bool COPY, int BR = RM>
__global__ __launch_bounds__(NT) void k_reduce_lean(lk_view A, lk_view B, lk_view copyA, i64 kper, int S, float *part) {
    typedef rl_layout<RP, KMAJ, BR> L;
    const int MI = BR / 64, NI = RP / 16;
    extern __shared__ __align__(16) char dsm[];
    const i64 M = A.rows, K = A.cols; /* the caller checked that these are the reduction's M and K */
    const i64 mb = (i64)blockIdx.x * BR, z = blockIdx.y, k0 = z * kper;
    const i64 ke = k0 + kper < K ? k0 + kper : K;
    const int nk = ke > k0 ? (int)cdiv(ke - k0, RK) : 0;
    const int warp = threadIdx.x >> 5, m0 = (warp & 3) * 16 * MI, n0 = (warp >> 2) * (RP / 2);
    float acc[MI][NI][4];
    acc_zero(acc);
    lean_pipeline(
        dsm, L::STAGE, S, nk,
        [&](char *st, int s) {
            lean_issue<BR, RK>(st, A, mb, k0 + (i64)s * RK);
            if (KMAJ) lean_issue<RK, RP>(st + L::A, B, k0 + (i64)s * RK, 0);
            else lean_issue<RP, RK>(st + L::A, B, 0, k0 + (i64)s * RK);
        },
        [&](const char *st, int s) {
            if (COPY) lean_store<BR, RK>(st, copyA, mb, k0 + (i64)s * RK); /* dy0 = the staged A tile */
            warp_mma_ldm<CT, MI, NI, false, KMAJ>::run(acc, (const CT *)st, RK + 8, (const CT *)(st + L::A),
                                                       KMAJ ? RP + 8 : RK + 8, m0, n0, RK);
        });
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const i64 m = mb + acc_row(m0, mi, e);
                if (m < M) part[(z * M + m) * RP + acc_col(n0, ni, e)] = acc[mi][ni][e];
            }
}

/* The wide variant of the row reduction: a block owns WR = 32 rows (LYCO_CUDA_REDUCE_WIDE=64: 64)
   and streams WK = 256 columns a step (512 contiguous bytes per row where k_reduce_lean reads 128;
   the hypothesis was that DRAM pages opened for 128 bytes held k_reduce_lean at 1.8 TB/s — it
   moved gh + dy0 from 73 to 54 µs but h not at all: docs/kernels.md "tenth session"). 8 warps as
   WR/16 row groups × 8/(WR/16) k slices; each warp accumulates its 16 × RP block over its slice of
   every step; at the end the slices are added in the fixed order 0, 1, … through shared memory.
   Deterministic, but a different summation order from k_reduce (not bitwise the general kernel).
   64 rows halve the factor tile's L2 re-reads per byte of A (the next hypothesis, opt-in). */
const int WK = 256;
template <int RP, bool KMAJ, int WR> struct rw_layout {
    static const int A = WR * (WK + 8) * 2;
    static const int STAGE = A + (KMAJ ? WK * (RP + 8) : RP * (WK + 8)) * 2;
    static const int RED = 8 * 16 * RP * 4; /* the slices' accumulators (aliases the stages) */
};


template <int RP, bool KMAJ, int WR>
__device__ __forceinline__ void rw_issue(char *st, const lk_view &A, const lk_view &B, i64 mb, i64 kc) {
    typedef rw_layout<RP, KMAJ, WR> L;
    lean_issue<WR, WK>(st, A, mb, kc);
    if (KMAJ) lean_issue<WK, RP>(st + L::A, B, kc, 0);
    else lean_issue<RP, WK>(st + L::A, B, 0, kc);
}

template <typename CT, int RP, bool KMAJ, bool COPY, int WR>
__global__ __launch_bounds__(NT) void k_reduce_wide(lk_view A, lk_view B, lk_view copyA, i64 kper, int S, float *part) {
    typedef rw_layout<RP, KMAJ, WR> L;
    const int NI = RP / 8, G = WR / 16, KSN = 8 / G, SW = WK / KSN; /* row groups, k slices, slice width */
    extern __shared__ __align__(16) char dsm[];
    const i64 M = A.rows, K = A.cols; /* checked by the caller */
    const i64 mb = (i64)blockIdx.x * WR, z = blockIdx.y, k0 = z * kper;
    const i64 ke = k0 + kper < K ? k0 + kper : K;
    const int nk = ke > k0 ? (int)cdiv(ke - k0, WK) : 0;
    const int warp = threadIdx.x >> 5, m0 = (warp % G) * 16, ks = warp / G;
    float acc[1][NI][4];
    acc_zero(acc);
    lean_pipeline(
        dsm, L::STAGE, S, nk, [&](char *st, int s) { rw_issue<RP, KMAJ, WR>(st, A, B, mb, k0 + (i64)s * WK); },
        [&](const char *st, int s) {
            if (COPY) lean_store<WR, WK>(st, copyA, mb, k0 + (i64)s * WK); /* dy0 = the staged A tile */
            const CT *As = (const CT *)st + ks * SW;
            const CT *Bs = KMAJ ? (const CT *)(st + L::A) + ks * SW * (RP + 8) : (const CT *)(st + L::A) + ks * SW;
            warp_mma_ldm<CT, 1, NI, false, KMAJ>::run(acc, As, WK + 8, Bs, KMAJ ? RP + 8 : WK + 8, m0, 0, SW);
        });
    __syncthreads(); /* every warp is done with the stages: they hold the slices' accumulators now */
    float *red = (float *)dsm;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int ni = 0; ni < NI; ni++)
#pragma unroll
        for (int e = 0; e < 4; e++) red[((ks * G + warp % G) * NI * 4 + ni * 4 + e) * 32 + lane] = acc[0][ni][e];
    __syncthreads();
    /* thread → (row group, ni, e, lane) entries; the slices in order */
    for (int q = threadIdx.x; q < G * NI * 4 * 32; q += NT) {
        const int g = q / (NI * 4 * 32), rest = q % (NI * 4 * 32), ni = rest / (4 * 32), e = (rest / 32) % 4, ln = rest % 32;
        float v = red[(g * NI * 4 + ni * 4 + e) * 32 + ln];
#pragma unroll
        for (int k = 1; k < KSN; k++) v += red[((k * G + g) * NI * 4 + ni * 4 + e) * 32 + ln];
        const int row = g * 16 + (ln >> 2) + 8 * (e >> 1), col = ni * 8 + 2 * (ln & 3) + (e & 1);
        const i64 m = mb + row;
        if (m < M) part[(z * M + m) * RP + col] = v;
    }
}

template <typename CT, int RP, int CNT, int RKT>
__global__ __launch_bounds__(NT) void k_colreduce_lean(lk_view A, lk_view B, i64 mper, int S, float *part) {
    typedef cl_layout<RP, CNT, RKT> L;
    const int NI = RP / 16, MI = CNT / 64;
    extern __shared__ __align__(16) char dsm[];
    const i64 M = A.rows, N = A.cols; /* checked by the caller */
    const i64 nb = (i64)blockIdx.x * CNT, z = blockIdx.y, k0 = z * mper;
    const i64 ke = k0 + mper < M ? k0 + mper : M;
    const int nk = ke > k0 ? (int)cdiv(ke - k0, RKT) : 0;
    const int warp = threadIdx.x >> 5, m0 = (warp & 3) * (CNT / 4), n0 = (warp >> 2) * (RP / 2);
    float acc[MI][NI][4];
    acc_zero(acc);
    lean_pipeline(
        dsm, L::STAGE, S, nk,
        [&](char *st, int s) {
            lean_issue<RKT, CNT>(st, A, k0 + (i64)s * RKT, nb);
            lean_issue<RKT, RP>(st + L::A, B, k0 + (i64)s * RKT, 0);
        },
        [&](const char *st, int) {
            warp_mma_ldm<CT, MI, NI, true, true>::run(acc, (const CT *)st, CNT + 8, (const CT *)(st + L::A), RP + 8, m0, n0, RKT);
        });
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const i64 n = nb + acc_row(m0, mi, e);
                if (n < N) part[(z * N + n) * RP + acc_col(n0, ni, e)] = acc[mi][ni][e];
            }
}

bool rl_general_forced() {
    const char *v = getenv("LYCO_CUDA_REDUCE_GENERAL");
    return v && *v && *v != '0';
}

template <typename KERN> int rl_prepare(KERN k, int bytes) {
    LK_SMEM_OPTIN(bytes, k);
    return LYCO_OK;
}

/* Whether rank tiles 64 and 128 take the 128-row blocks with stages for two blocks per SM (rl_big;
   LYCO_CUDA_REDUCE_BIG=0: the 64-row blocks and the caller's stages, three blocks per SM — A/B).
   Why (H200 ncu, LoRA 8192 tok × 4096² r128 bf16, docs/kernels.md session 32): h = x·Dᵀ took 91 µs
   at 21 % of DRAM bandwidth and gh = dy·U 115 µs — three 55 KB blocks per SM leave two stages, one
   step in flight, and each 8 KB step of x came with a 16 KB step of D from L2. */
bool rl_big_wanted() { return lk_env_int("LYCO_CUDA_REDUCE_BIG", 1) != 0; }

/* the deepest S ≤ 4 with two blocks per SM (0: none) */
int rl_stages_two_per_sm(int stage, const lk_device *dev) {
    for (int S = 4; S >= 2; S--)
        if (S * stage <= dev->smem_optin && S * stage + 1024 <= dev->smem_sm / 2) return S;
    return 0;
}

template <typename CT, int RP, bool KMAJ, int BR>
int rl_launch_br(const lk_view *A, const lk_view *B, const lk_view *copyA, i64 kper, i64 Z, int S, float *part, cudaStream_t s) {
    const int bytes = S * rl_layout<RP, KMAJ, BR>::STAGE;
    const dim3 grid((unsigned)cdiv(A->rows, BR), (unsigned)Z);
    int rc;
    if (copyA) {
        if ((rc = rl_prepare(k_reduce_lean<CT, RP, KMAJ, true, BR>, bytes))) return rc;
        k_reduce_lean<CT, RP, KMAJ, true, BR><<<grid, NT, bytes, s>>>(*A, *B, *copyA, kper, S, part);
    } else {
        lk_view none;
        memset(&none, 0, sizeof none);
        if ((rc = rl_prepare(k_reduce_lean<CT, RP, KMAJ, false, BR>, bytes))) return rc;
        k_reduce_lean<CT, RP, KMAJ, false, BR><<<grid, NT, bytes, s>>>(*A, *B, none, kper, S, part);
    }
    LK_LAUNCHED("reduce_lean");
    return LYCO_OK;
}

template <typename CT, int RP, bool KMAJ>
int rl_launch(const lk_view *A, const lk_view *B, const lk_view *copyA, i64 kper, i64 Z, int S, float *part,
              const lk_device *dev, cudaStream_t s) {
    const int BIG = RP >= 64 ? 2 * RM : RM; /* rank tiles 16, 32: no 128-row instance */
    if (BIG != RM && rl_big_wanted()) {
        const int Sb = rl_stages_two_per_sm(rl_layout<RP, KMAJ, BIG>::STAGE, dev);
        if (Sb >= 3) return rl_launch_br<CT, RP, KMAJ, BIG>(A, B, copyA, kper, Z, Sb, part, s);
    }
    return rl_launch_br<CT, RP, KMAJ, RM>(A, B, copyA, kper, Z, S, part, s);
}

/* LYCO_CUDA_REDUCE_WIDE: 0 = off, 64 = 64-row tiles (two k slices of 128), else 32 rows (four of 64) */
int rw_rows() {
    const char *v = getenv("LYCO_CUDA_REDUCE_WIDE");
    return v && *v == '0' ? 0 : v && atoi(v) == 64 ? 64 : 32;
}

/* stages and blocks per SM of the wide kernel: the deepest S ≤ 4 with two blocks per SM, else one */
void rw_stages(int stage, const lk_device *dev, int *S, int *per) {
    *S = 0;
    *per = 0;
    for (int p = 2; p >= 1; p--)
        for (int s = 4; s >= 2; s--)
            if (s * stage <= dev->smem_optin && s * stage + 1024 <= dev->smem_sm / p) {
                *S = s;
                *per = p;
                return;
            }
}

template <typename CT, int RP, bool KMAJ, int WR>
int rw_launch(const lk_view *A, const lk_view *B, const lk_view *copyA, i64 M, i64 K, i64 Zmax, float *part, int64_t *Zused,
              const lk_device *dev, cudaStream_t s, int *done) {
    typedef rw_layout<RP, KMAJ, WR> L;
    int S, per;
    rw_stages(L::STAGE, dev, &S, &per);
    if (S < 2 || S * L::STAGE < L::RED) return LYCO_OK;
    /* one wave: the k split fills the resident slots the row tiles leave (≥ 1, ≤ the caller's Z) */
    const i64 mt = cdiv(M, WR), slots = (i64)per * dev->sms;
    i64 z = slots / mt, zmax = cdiv(K, 2 * WK);
    if (z > zmax) z = zmax;
    if (z > Zmax) z = Zmax;
    if (z < 1) z = 1;
    const i64 kper = cdiv(cdiv(K, z), WK) * WK;
    z = cdiv(K, kper);
    if (mt > 2147483647LL || z > 65535) return LYCO_OK;
    const int bytes = S * L::STAGE;
    int rc;
    const dim3 grid((unsigned)mt, (unsigned)z);
    if (copyA) {
        if ((rc = rl_prepare(k_reduce_wide<CT, RP, KMAJ, true, WR>, bytes))) return rc;
        k_reduce_wide<CT, RP, KMAJ, true, WR><<<grid, NT, bytes, s>>>(*A, *B, *copyA, kper, S, part);
    } else {
        lk_view none;
        memset(&none, 0, sizeof none);
        if ((rc = rl_prepare(k_reduce_wide<CT, RP, KMAJ, false, WR>, bytes))) return rc;
        k_reduce_wide<CT, RP, KMAJ, false, WR><<<grid, NT, bytes, s>>>(*A, *B, none, kper, S, part);
    }
    LK_LAUNCHED("reduce_wide");
    *Zused = z;
    *done = 1;
    return LYCO_OK;
}

template <typename CT, int WR>
int rw_rp(const lk_view *A, const lk_view *B, int kmaj, const lk_view *copyA, i64 M, i64 K, i64 rp, i64 Zmax, float *part,
          int64_t *Zused, const lk_device *dev, cudaStream_t s, int *done) {
    switch (rp) {
    case 16: return kmaj ? rw_launch<CT, 16, true, WR>(A, B, copyA, M, K, Zmax, part, Zused, dev, s, done)
                         : rw_launch<CT, 16, false, WR>(A, B, copyA, M, K, Zmax, part, Zused, dev, s, done);
    case 32: return kmaj ? rw_launch<CT, 32, true, WR>(A, B, copyA, M, K, Zmax, part, Zused, dev, s, done)
                         : rw_launch<CT, 32, false, WR>(A, B, copyA, M, K, Zmax, part, Zused, dev, s, done);
    default: return LYCO_OK; /* rank tiles 64, 128: the B tile would crowd out the stages */
    }
}

template <typename CT>
int rw_ct(const lk_view *A, const lk_view *B, int kmaj, const lk_view *copyA, i64 M, i64 K, i64 rp, i64 Zmax, float *part,
          int64_t *Zused, const lk_device *dev, cudaStream_t s, int *done) {
    return rw_rows() == 64 ? rw_rp<CT, 64>(A, B, kmaj, copyA, M, K, rp, Zmax, part, Zused, dev, s, done)
                           : rw_rp<CT, 32>(A, B, kmaj, copyA, M, K, rp, Zmax, part, Zused, dev, s, done);
}

bool cl_wide_wanted() {
    const char *v = getenv("LYCO_CUDA_COLREDUCE_WIDE");
    return !(v && *v == '0');
}

template <typename CT, int RP, int CNT, int RKT>
int cl_launch_t(const lk_view *A, const lk_view *B, i64 mper, i64 Z, int S, float *part, cudaStream_t s) {
    const int bytes = S * cl_layout<RP, CNT, RKT>::STAGE;
    int rc = rl_prepare(k_colreduce_lean<CT, RP, CNT, RKT>, bytes);
    if (rc) return rc;
    k_colreduce_lean<CT, RP, CNT, RKT><<<dim3((unsigned)cdiv(A->cols, CNT), (unsigned)Z), NT, bytes, s>>>(*A, *B, mper, S, part);
    LK_LAUNCHED("colreduce_lean");
    return LYCO_OK;
}

/* rank tiles ≤ 64 (128 goes to cl_launch_t directly): the wide tiles (256 × 32; stages for three
   blocks per SM, else two) unless LYCO_CUDA_COLREDUCE_WIDE=0; else 128 × 64 with the caller's stages */
template <typename CT, int RP>
int cl_launch(const lk_view *A, const lk_view *B, i64 mper, i64 Z, int S, float *part, const lk_device *dev, cudaStream_t s) {
    if (cl_wide_wanted()) {
        const int st = cl_layout<RP, 256, 32>::STAGE;
        for (int per = 3; per >= 2; per--)
            for (int Sw = 4; Sw >= 2; Sw--)
                if (Sw * st <= dev->smem_optin && Sw * st + 1024 <= dev->smem_sm / per)
                    return cl_launch_t<CT, RP, 256, 32>(A, B, mper, Z, Sw, part, s);
    }
    return cl_launch_t<CT, RP, CN, RK>(A, B, mper, Z, S, part, s);
}

template <typename CT, int RP>
int rl_kmaj(const lk_view *A, const lk_view *B, int kmaj, const lk_view *copyA, i64 kper, i64 Z, int S, float *part,
            const lk_device *dev, cudaStream_t s) {
    return kmaj ? rl_launch<CT, RP, true>(A, B, copyA, kper, Z, S, part, dev, s)
                : rl_launch<CT, RP, false>(A, B, copyA, kper, Z, S, part, dev, s);
}

template <typename CT>
int rl_ct(const lk_view *A, const lk_view *B, int kmaj, const lk_view *copyA, i64 rp, i64 kper, i64 Z, int S, float *part,
          const lk_device *dev, cudaStream_t s) {
    switch (rp) {
    case 16: return rl_kmaj<CT, 16>(A, B, kmaj, copyA, kper, Z, S, part, dev, s);
    case 32: return rl_kmaj<CT, 32>(A, B, kmaj, copyA, kper, Z, S, part, dev, s);
    case 64: return rl_kmaj<CT, 64>(A, B, kmaj, copyA, kper, Z, S, part, dev, s);
    default: return rl_kmaj<CT, 128>(A, B, kmaj, copyA, kper, Z, S, part, dev, s);
    }
}

template <typename CT>
int cl_ct(const lk_view *A, const lk_view *B, i64 rp, i64 mper, i64 Z, int S, float *part, const lk_device *dev, cudaStream_t s) {
    switch (rp) {
    case 16: return cl_launch<CT, 16>(A, B, mper, Z, S, part, dev, s);
    case 32: return cl_launch<CT, 32>(A, B, mper, Z, S, part, dev, s);
    case 64: return cl_launch<CT, 64>(A, B, mper, Z, S, part, dev, s);
    default: {
        /* rank tile 128: stages for two blocks per SM (three in flight each) instead of the caller's
           three blocks of two stages, unless LYCO_CUDA_REDUCE_BIG=0 (the same partials) */
        const int Sb = rl_big_wanted() ? rl_stages_two_per_sm(cl_layout<128>::STAGE, dev) : 0;
        return cl_launch_t<CT, 128, CN, RK>(A, B, mper, Z, Sb >= 3 ? Sb : S, part, s);
    }
    }
}

bool lean_rp_ok(i64 rp) { return rp == 16 || rp == 32 || rp == 64 || rp == 128; }

} // namespace

extern "C" int lk_reduce_lean_stage_bytes(int64_t rp, int kmajor, int column) {
    if (column) return (int)(RK * (CN + 8) * 2 + RK * (rp + 8) * 2);
    return (int)(RM * (RK + 8) * 2 + (kmajor ? RK * (rp + 8) : rp * (RK + 8)) * 2);
}

extern "C" int lk_reduce_lean(int32_t ct, const lk_view *A, const lk_view *B, int b_kmajor, const lk_view *copyA, int64_t M,
                              int64_t K, int64_t rp, int64_t kper, int64_t Z, int S, float *part, int64_t *Zused,
                              const lk_device *dev, void *stream, int *done) {
    *done = 0;
    if ((ct != DT_BF16 && ct != DT_F16) || rl_general_forced() || !lean_rp_ok(rp) || S < 2) return LYCO_OK;
    if (!lean_view_ok(*A, ct) || !lean_view_ok(*B, ct) || (copyA && !lean_view_ok(*copyA, ct))) return LYCO_OK;
    if (A->rows != M || A->cols != K || (copyA && (copyA->rows != M || copyA->cols != K))) return LYCO_OK;
    /* B's extent along k must be K (zero-filled beyond it, as raw_issue does); rank columns / rows
       beyond rp are not read, missing ones are zero-filled, as in the general kernel */
    if (b_kmajor ? B->rows != K : B->cols != K) return LYCO_OK;
    if (cdiv(M, RM) > 2147483647LL || Z > 65535) return LYCO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    if (rw_rows()) {
        const int rc = ct == DT_BF16 ? rw_ct<bf16_t>(A, B, b_kmajor, copyA, M, K, rp, Z, part, Zused, dev, s, done)
                                     : rw_ct<f16_t>(A, B, b_kmajor, copyA, M, K, rp, Z, part, Zused, dev, s, done);
        if (rc || *done) return rc;
    }
    *done = 1;
    *Zused = Z;
    return ct == DT_BF16 ? rl_ct<bf16_t>(A, B, b_kmajor, copyA, rp, kper, Z, S, part, dev, s)
                         : rl_ct<f16_t>(A, B, b_kmajor, copyA, rp, kper, Z, S, part, dev, s);
}

extern "C" int lk_colreduce_lean(int32_t ct, const lk_view *A, const lk_view *B, int64_t M, int64_t N, int64_t rp, int64_t mper,
                                 int64_t Z, int S, float *part, const lk_device *dev, void *stream, int *done) {
    *done = 0;
    if ((ct != DT_BF16 && ct != DT_F16) || rl_general_forced() || !lean_rp_ok(rp) || S < 2) return LYCO_OK;
    if (!lean_view_ok(*A, ct) || !lean_view_ok(*B, ct) || A->rows != M || A->cols != N || B->rows != M) return LYCO_OK;
    if (cdiv(N, CN) > 2147483647LL || Z > 65535) return LYCO_OK;
    *done = 1;
    cudaStream_t s = (cudaStream_t)stream;
    return ct == DT_BF16 ? cl_ct<bf16_t>(A, B, rp, mper, Z, S, part, dev, s) : cl_ct<f16_t>(A, B, rp, mper, Z, S, part, dev, s);
}
