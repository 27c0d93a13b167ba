/*
 * gemm.cu — a tensor-core product with an additive epilogue for 16-bit compute (kern_gemm.h):
 *
 *   out[m, n] = RN_out( RN_CT(base[m, n]) + Σ_k RN_CT(A[m, k]) · RN_CT(B[n, k]) ),  fp32 sums
 *   (with base_f32, base[m, n] as loaded instead of RN_CT(base[m, n]); with ksplit > 1, K in chunks
 *   side by side along grid z, chunk z's sums into fp32 slab z of out — a thin output with a long
 *   K then fills the GPU; the caller sums the slabs)
 *
 * A M×K (or given K×M: a_t), B N×K (or given K×N: b_t), base / out M×N; any dtypes (A and B are rounded to CT in shared memory as they are
 * staged — no cast pass), any strides and alignment (common.cuh's raw_issue: cp.async for
 * row-major 16-byte-aligned views, exact element copies otherwise; zero fill outside the matrix).
 *
 * Tiling: a block owns a 128×128 tile of out; 8 warps as 2 (m) × 4 (n), each a 64×32 piece
 * (4 × 4 mma.sync m16n8k16 per 16-wide k step, fragments by ldmatrix.x4 — .trans for an operand
 * given k-major — from rows of pitch 40 or 136 halfwords: 80- and 272-byte rows put eight
 * consecutive rows in eight distinct 16-byte bank groups, conflict-free). k advances
 * in steps of 64 through a 3-stage cp.async ring (gm_issue: raw_issue per step; 2 steps in flight
 * while one is consumed; 110 KB of shared memory for 16-bit A and B, 2 blocks per SM), or with
 * LYCO_CUDA_GEMM_K=32 in steps of 32 through 4 stages (80 KB).
 * H200, 8192 × 2048 × 4096 bf16 (LoHa bypass forward's chunk), k 32: 673 µs = 204 TFLOP/s, 24%
 * warps active, 51% issue slots (Nsight Compute, fe8b53a); k 64 takes the whole bypass forward
 * from 1502 to 1281 µs (~240 TFLOP/s, b0acadc). The limiter is mma.sync itself at 16 warps per
 * SM; sm_90's wgmma (asynchronous warpgroup MMA from shared memory) is the next step.
 * The grid runs n fastest (blockIdx.x over N tiles), so the blocks resident at once share their
 * A rows and the whole B operand stays in L2 (B is the small operand here: a ΔW̄ row chunk).
 * Epilogue: the fp32 accumulators go to shared memory (reusing the ring), then each thread adds
 * 8 consecutive base values and stores 8 outputs (16-byte accesses where the views allow).
 *
 * Deterministic (fixed k order per element, no atomics). Extra memory: none.
 * Throughput on sm_90 is bounded by mma.sync (no wgmma here): expect ~50–70% of the bf16 GEMM
 * ceiling `lyco bench` measures with cuBLAS.
 */
#include <stdlib.h>

#include "cuda/kern_gemm.h"
#include "cuda/common.cuh"

namespace {

const int GM = 128, GN = 128;
const int GLDC = GN + 8; /* fp32 result tile pitch: float2 stores of a warp fall in distinct banks */

struct gm_layout {
    int sa, stage, bufa, bufb, total;
};

/* at / bt: A given K×M / B given K×N (staged k-rows × 128 columns); gk: k step, gs: stages */
__host__ __device__ inline gm_layout gm_plan(int ct, int adt, int bdt, bool at, bool bt, int gk, int gs) {
    gm_layout l;
    l.sa = at ? raw_bytes(gk, GM, adt) : raw_bytes(GM, gk, adt);
    l.stage = l.sa + (bt ? raw_bytes(gk, GN, bdt) : raw_bytes(GN, gk, bdt));
    int off = gs * l.stage;
    l.bufa = off;
    off += at ? conv_bytes(gk, GM, adt, 1, ct) : conv_bytes(GM, gk, adt, 1, ct);
    l.bufb = off;
    off += bt ? conv_bytes(gk, GN, bdt, 1, ct) : conv_bytes(GN, gk, bdt, 1, ct);
    const int cs = GM * GLDC * 4;
    l.total = off > cs ? off : cs;
    return l;
}

/* one k step of A and B into a stage (A then B, as gm_plan lays them out) */
template <bool AT, bool BT, int GK> __device__ __forceinline__ void gm_issue(char *st, const pipe_op &A, const pipe_op &B, int s) {
    if (AT) raw_issue<GK, GM>(st, A.v, A.r0 + s * A.dr, A.c0);
    else raw_issue<GM, GK>(st, A.v, A.r0, A.c0 + s * A.dc);
    char *sb = st + (AT ? raw_bytes(GK, GM, A.v.dt) : raw_bytes(GM, GK, A.v.dt));
    if (BT) raw_issue<GK, GN>(sb, B.v, B.r0 + s * B.dr, B.c0);
    else raw_issue<GN, GK>(sb, B.v, B.r0, B.c0 + s * B.dc);
}

template <typename CT, bool AT, bool BT, int GK, int GS> __global__ __launch_bounds__(NT, 2) void k_gemm(lk_gemm_args a) {
    extern __shared__ __align__(16) char dsm[];
    const gm_layout ly = gm_plan(ct_of<CT>::dt, a.A.dt, a.B.dt, AT, BT, GK, GS);
    const i64 nb = (i64)blockIdx.x * GN, mb = (i64)blockIdx.y * GM;
    const bool split = a.ksplit > 1; /* chunk blockIdx.z of K: [kb, kb + kchunk), into out slab z */
    const i64 kb = split ? (i64)blockIdx.z * (i64)a.kchunk : 0, klen = split ? min((i64)a.K - kb, (i64)a.kchunk) : (i64)a.K;
    const int nk = (int)cdiv(klen, GK);
    const bool conv = a.A.dt != ct_of<CT>::dt || a.B.dt != ct_of<CT>::dt;
    pipe_op A, B;
    A.v = a.A; A.r0 = AT ? kb : mb; A.c0 = AT ? mb : kb; A.dr = AT ? GK : 0; A.dc = AT ? 0 : GK; A.np = 1;
    B.v = a.B; B.r0 = BT ? kb : nb; B.c0 = BT ? nb : kb; B.dr = BT ? GK : 0; B.dc = BT ? 0 : GK; B.np = 1;
    if (split) {
        a.out.p = (const char *)a.out.p + blockIdx.z * a.M * a.N * 4;
        if (a.base.p) a.base.p = (const char *)a.base.p + blockIdx.z * a.M * a.N * 4;
    }
    for (int s = 0; s < GS - 1; s++) {
        if (s < nk) gm_issue<AT, BT, GK>(dsm + s * ly.stage, A, B, s);
        cp_commit();
    }
    const int warp = threadIdx.x >> 5, m0 = (warp & 1) * 64, n0 = (warp >> 1) * 32;
    float acc[4][4][4];
    acc_zero(acc);
    for (int s = 0; s < nk; s++) {
        cp_wait(GS - 2);
        __syncthreads(); /* step s has landed; every warp is done with step s − 1's stage and buffers */
        const char *st = dsm + (s % GS) * ly.stage;
        CT *ap[3], *bp[3];
        int lda, ldb;
        if (AT) raw_operand<CT, GK, GM>(st, a.A.dt, 1, (CT *)(dsm + ly.bufa), ap, &lda);
        else raw_operand<CT, GM, GK>(st, a.A.dt, 1, (CT *)(dsm + ly.bufa), ap, &lda);
        if (BT) raw_operand<CT, GK, GN>(st + ly.sa, a.B.dt, 1, (CT *)(dsm + ly.bufb), bp, &ldb);
        else raw_operand<CT, GN, GK>(st + ly.sa, a.B.dt, 1, (CT *)(dsm + ly.bufb), bp, &ldb);
        if (conv) __syncthreads();
        {
            const int n = s + GS - 1; /* refills the stage step s − 1 used */
            if (n < nk) gm_issue<AT, BT, GK>(dsm + (n % GS) * ly.stage, A, B, n);
            cp_commit();
        }
        warp_mma_ldm<CT, 4, 4, AT, BT>::run(acc, ap[0], lda, bp[0], ldb, m0, n0, GK); /* acc (64×32 at m0, n0) += A·Bᵀ */
    }
    cp_wait(0);
    __syncthreads();
    float *Cs = (float *)dsm;
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                *(float2 *)(Cs + acc_row(m0, mi, 2 * h) * GLDC + acc_col(n0, ni, 0)) =
                    make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
    __syncthreads();
    /* a thread's GM·GN/8/NT chunks in two halves: every base chunk of a half is loaded before any
       of its outputs is stored (the loads fly together instead of one DRAM round trip per chunk;
       an out that is the base still sees each element read before it is written) */
    const int NQ = GM * (GN / 8) / NT / 2;
#pragma unroll 1
    for (int half = 0; half < 2; half++) {
        float bv[NQ][8];
        if (a.base.p) {
#pragma unroll
            for (int u = 0; u < NQ; u++) {
                const int q = threadIdx.x + (half * NQ + u) * NT, rr = q / (GN / 8), cc = (q % (GN / 8)) * 8;
                vload8(bv[u], a.base, mb + rr, nb + cc);
            }
        }
#pragma unroll
        for (int u = 0; u < NQ; u++) {
            const int q = threadIdx.x + (half * NQ + u) * NT, rr = q / (GN / 8), cc = (q % (GN / 8)) * 8;
            const i64 m = mb + rr, n = nb + cc;
            if (m >= a.M || n >= a.N) continue;
            float v[8];
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = Cs[rr * GLDC + cc + e];
            if (a.base.p) {
#pragma unroll
                for (int e = 0; e < 8; e++) v[e] += a.base_f32 ? bv[u][e] : rnd_ct<CT>(bv[u][e]);
            }
            vstore8(a.out, m, n, v);
        }
    }
}

/* k steps of 64 through 3 stages by default (H200, LoHa bypass forward 4096², 8192 tokens: 1281 µs
   against 1502 with steps of 32 through 4 stages); LYCO_CUDA_GEMM_K=32 selects the latter (A/B) */
int gemm_k() {
    static int k = 0;
    if (!k) {
        const char *e = getenv("LYCO_CUDA_GEMM_K");
        k = e && atoi(e) == 32 ? 32 : 64;
    }
    return k;
}

template <typename CT, bool AT, bool BT, int GK, int GS> int gemm_launch(const lk_gemm_args *a, cudaStream_t s) {
    const int bytes = gm_plan(ct_of<CT>::dt, a->A.dt, a->B.dt, AT, BT, GK, GS).total;
    LK_SMEM_OPTIN(bytes, k_gemm<CT, AT, BT, GK, GS>);
    const dim3 grid((unsigned)cdiv(a->N, GN), (unsigned)cdiv(a->M, GM), (unsigned)(a->ksplit > 1 ? a->ksplit : 1));
    k_gemm<CT, AT, BT, GK, GS><<<grid, NT, bytes, s>>>(*a);
    LK_LAUNCHED("gemm");
    return LYCO_OK;
}

template <typename CT, bool AT, bool BT> int gemm_kk(const lk_gemm_args *a, cudaStream_t s) {
    return gemm_k() == 64 ? gemm_launch<CT, AT, BT, 64, 3>(a, s) : gemm_launch<CT, AT, BT, 32, 4>(a, s);
}

/* the three layouts LoHa uses: (A, B) both k-fastest, B k-major, both k-major */
template <typename CT> int gemm_ct(const lk_gemm_args *a, cudaStream_t s) {
    if (a->a_t) return gemm_kk<CT, true, true>(a, s);
    return a->b_t ? gemm_kk<CT, false, true>(a, s) : gemm_kk<CT, false, false>(a, s);
}

} // namespace

extern "C" int lk_gemm_fits(const lk_gemm_args *a, const lk_device *dev) {
    if (a->ct != DT_BF16 && a->ct != DT_F16) return 0;
    if (cdiv(a->N, GN) > 2147483647LL || cdiv(a->M, GM) > 65535) return 0;
    if (a->a_t && !a->b_t) return 0; /* not instantiated */
    const int gk = gemm_k();
    return gm_plan(a->ct, a->A.dt, a->B.dt, a->a_t != 0, a->b_t != 0, gk, gk == 64 ? 3 : 4).total <= dev->smem_optin;
}

extern "C" void lk_gemm_split(int64_t M, int64_t N, int64_t K, int32_t sms, int64_t *nz, int64_t *kc) {
    const i64 tiles = cdiv(M, GM) * cdiv(N, GN), target = 2 * (i64)sms, zmax = cdiv(K, 512);
    /* the fewest chunks that reach the least waves × chunk length, ⌈tiles·z / target⌉ / z (e.g.
       128 tiles on 264 slots: z = 2 is one full wave of K/2 — z = 3 would be two waves of K/3) */
    i64 z = 1;
    if (tiles > 0 && tiles < target)
        for (i64 c = 2; c <= zmax && c <= target; c++)
            if (cdiv(tiles * c, target) * z < cdiv(tiles * z, target) * c) z = c;
    *kc = z > 1 ? cdiv(cdiv(K, z), 64) * 64 : K;
    *nz = z > 1 ? cdiv(K, *kc) : 1;
}

extern "C" int lk_gemm(const lk_gemm_args *a, const lk_device *dev, void *stream) {
    if (!lk_gemm_fits(a, dev)) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: gemm called outside its limits");
    if (a->M == 0 || a->N == 0) return LYCO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    return a->ct == DT_BF16 ? gemm_ct<bf16_t>(a, s) : gemm_ct<f16_t>(a, s);
}
