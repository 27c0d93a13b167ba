/*
 * locon_merge_small.cu — LoRA / LoCon merge forward for small ranks (r ≤ 32) on row-major
 * outputs: the memory-bound case (ALGORITHMS.md §2.1, NUMERICS.md §1), with FFMA instead of
 * tensor cores and no shared-memory round trip for W or the output.
 *
 *   out[o, j] = merge_elem(RN_CT(W[o, j]), c_o · Σ_k RN_CT(U[o, k]) · RN_CT(D[k, j]))
 *   c_o = s · RN_CT(σs) · q_o;  merge_elem: W + m·dW | m·dW | W − m·dW (mode); out rounded once.
 * The same formula as locon.cu's k2_merge_fwd (products exact in fp32 for 16-bit CT, fp32
 * accumulation in k order); only the summation order within the r terms differs.
 *
 * Shapes: U O×r, D r×IK (IK = I·K), W/out O×IK. Taken when: no DoRA, r ≤ 32, out row-major with
 * 16-byte rows (LK_VEC), W absent or likewise; U, D and the mask any layout (read element-wise,
 * they are small). Anything else stays with locon.cu's kernels (lk_locon_merge_fwd).
 *
 * Tiling: a block (256 threads) owns a 256-column strip and a range of rows; the strip of D
 * (RK × 256, fp32, RN_CT applied) is staged once in shared memory. Each warp takes 4 rows at a
 * time: lane l owns columns l·8 … l·8+7 of those rows, issues the 4 (bf16: 16-byte) W loads
 * first, holds U[o+i, l] in a register and broadcasts U[o+i, k] with shuffles, accumulates the
 * 4×8 dW block with 32·r FFMA, then merges and stores 16 bytes per row. Edge columns (IK not a
 * multiple of 8 or of 256) take element-wise loads and stores. Per element: r FFMA + ~6 other
 * instructions, so r ≤ 32 stays under the memory floor (H200: 33 TFMA/s FFMA vs 4.2 TB/s).
 * Extra memory: none. In place (out = W) is safe: each element is read then written by one
 * thread. Deterministic: fixed order everywhere.
 */
#include "cuda/common.cuh"
#include "cuda/merge_ep.cuh"

namespace {

const int MS_BN = 256;  /* columns per block */
const int MS_ROWS = 4;  /* rows per warp step */

/* Row o's scale c_o = s · σ · q_o (0 outside the matrix). */
__device__ __forceinline__ float row_scale(const lk_locon &L, i64 o, float sig) {
    return o < L.O ? (float)L.s * sig * vget(L.mask, o, 1.0f) : 0.0f;
}

template <typename CT, int RK>
__global__ __launch_bounds__(NT, 2) void k_merge_fwd_small(lk_merge_fwd_args a, i64 rows_per_block) {
    __shared__ __align__(16) float sD[RK][MS_BN];
    const lk_locon &L = a.L;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const i64 j0 = (i64)blockIdx.x * MS_BN, jl = j0 + lane * 8;
    const i64 ob = (i64)blockIdx.y * rows_per_block;
    const i64 oe = ob + rows_per_block < L.O ? ob + rows_per_block : L.O;
    const int r = (int)L.r;
    const float sig = sigma_ct<CT>(L.sigma), mf = (float)L.m;
    const bool hasW = a.W.p != NULL;
    /* the D strip, RN_CT applied, zero beyond r and IK */
    for (int q = threadIdx.x; q < RK * MS_BN; q += NT) {
        const int k = q / MS_BN, c = q % MS_BN;
        const i64 j = j0 + c;
        sD[k][c] = (k < r && j < L.IK) ? rnd_ct<CT>(vload(L.D, k, j)) : 0.0f;
    }
    __syncthreads();
    /* the whole 8-column chunk of this lane lies inside the matrix (vector path) */
    const bool full = jl + 8 <= L.IK;
    for (i64 o0 = ob + (i64)warp * MS_ROWS; o0 < oe; o0 += (NT / 32) * MS_ROWS) {
        float w[MS_ROWS][8];
        if (hasW) {
#pragma unroll
            for (int i = 0; i < MS_ROWS; i++) {
                if (o0 + i < oe && full) vload8(w[i], a.W, o0 + i, jl);
                else
#pragma unroll
                    for (int e = 0; e < 8; e++) w[i][e] = (o0 + i < oe && jl + e < L.IK) ? vload(a.W, o0 + i, jl + e) : 0.0f;
            }
        }
        float u[MS_ROWS];
#pragma unroll
        for (int i = 0; i < MS_ROWS; i++) u[i] = (lane < r && o0 + i < oe) ? rnd_ct<CT>(vload(L.U, o0 + i, lane)) : 0.0f;
        float acc[MS_ROWS][8];
#pragma unroll
        for (int i = 0; i < MS_ROWS; i++)
#pragma unroll
            for (int e = 0; e < 8; e++) acc[i][e] = 0.0f;
#pragma unroll 4
        for (int k = 0; k < RK; k++) {
            if (k >= r) break;
            const float4 d0 = *(const float4 *)&sD[k][lane * 8], d1 = *(const float4 *)&sD[k][lane * 8 + 4];
            const float d[8] = {d0.x, d0.y, d0.z, d0.w, d1.x, d1.y, d1.z, d1.w};
#pragma unroll
            for (int i = 0; i < MS_ROWS; i++) {
                const float uk = __shfl_sync(0xffffffffu, u[i], k);
#pragma unroll
                for (int e = 0; e < 8; e++) acc[i][e] = fmaf(uk, d[e], acc[i][e]);
            }
        }
#pragma unroll
        for (int i = 0; i < MS_ROWS; i++) {
            const i64 o = o0 + i;
            if (o >= oe) break;
            const float c = row_scale(L, o, sig);
            float v[8];
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = merge_elem(hasW ? rnd_ct<CT>(w[i][e]) : 0.0f, acc[i][e] * c, a.mode, mf, false, NULL);
            if (full) vstore8(a.out, o, jl, v);
            else
                for (int e = 0; e < 8 && jl + e < L.IK; e++) vstore(a.out, o, jl + e, v[e]);
        }
    }
}

template <typename CT, int RK> int launch(const lk_merge_fwd_args *a, const lk_device *dev, cudaStream_t s) {
    const lk_locon &L = a->L;
    const i64 gx = cdiv(L.IK, MS_BN);
    /* about four blocks per SM in all; row ranges a multiple of one block step (32 rows) */
    i64 gy = cdiv(4LL * dev->sms, gx);
    if (gy > cdiv(L.O, 32)) gy = cdiv(L.O, 32);
    if (gy < 1) gy = 1;
    const i64 rpb = cdiv(cdiv(L.O, gy), 32) * 32;
    gy = cdiv(L.O, rpb);
    if (gx > 2147483647LL || gy > 65535) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: merge grid %lld×%lld too large", (long long)gx, (long long)gy);
    k_merge_fwd_small<CT, RK><<<dim3((unsigned)gx, (unsigned)gy), NT, 0, s>>>(*a, rpb);
    LK_LAUNCHED("merge_fwd (small rank)");
    return LYCO_OK;
}

template <typename CT> int launch_ct(const lk_merge_fwd_args *a, const lk_device *dev, cudaStream_t s) {
    if (a->L.r <= 8) return launch<CT, 8>(a, dev, s);
    if (a->L.r <= 16) return launch<CT, 16>(a, dev, s);
    return launch<CT, 32>(a, dev, s);
}

bool row_major_vec(const lk_view &v) { return v.s1 == 1 && (v.flags & LK_VEC) && !(v.flags & LK_UNALIGNED); }

} // namespace

/* Runs the small-rank merge forward when it applies (*done = 1), else leaves it to the caller. */
extern "C" int lk_locon_merge_fwd_small(const lk_merge_fwd_args *a, const lk_device *dev, void *stream, int *done) {
    *done = 0;
    const lk_locon &L = a->L;
    if (a->dora.on || L.r < 1 || L.r > 32 || !row_major_vec(a->out) || (a->W.p && !row_major_vec(a->W))) return LYCO_OK;
    if (getenv("LYCO_CUDA_NO_SMALL_MERGE")) return LYCO_OK; /* A/B switch for the bench */
    cudaStream_t s = (cudaStream_t)stream;
    int rc;
    switch (L.ct) {
    case DT_BF16: rc = launch_ct<bf16_t>(a, dev, s); break;
    case DT_F16: rc = launch_ct<f16_t>(a, dev, s); break;
    default: rc = launch_ct<float>(a, dev, s); break;
    }
    if (rc == LYCO_OK) *done = 1;
    return rc;
}
