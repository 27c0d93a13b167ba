/*
 * locon_merge_small.cu — LoRA / LoCon merge forward for small ranks (r ≤ 16) on row-major
 * outputs: the memory-bound case (ALGORITHMS.md §2.1, NUMERICS.md §1), with FFMA instead of
 * tensor cores and no shared-memory round trip for W or the output.
 *
 *   out[o, j] = merge_elem(RN_CT(W[o, j]), c_o · Σ_k RN_CT(U[o, k]) · RN_CT(D[k, j]))
 *   c_o = s · RN_CT(σs) · q_o;  merge_elem: W + m·dW | m·dW | W − m·dW (mode); out rounded once.
 * The same formula as locon.cu's k2_merge_fwd (products exact in fp32 for 16-bit CT, fp32
 * accumulation in k order); only the summation order within the r terms differs.
 *
 * Shapes: U O×r, D r×IK (IK = I·K), W/out O×IK. Taken when: no DoRA, r ≤ 16, out row-major with
 * 16-byte rows (LK_VEC), W absent or likewise; U, D and the mask any layout (staged element-wise,
 * they are small). Anything else stays with locon.cu's kernels (lk_locon_merge_fwd).
 *
 * Tiling: a block (256 threads) owns a 128-row × 256-column tile; it stages RN_CT(D) for its
 * columns (RK × 256), RN_CT(U) for its rows (k-major, RK × 128) and the row scales c_o in shared
 * memory once. Each warp then takes 4 rows at a time: lane l owns columns l·8 … l·8+7, issues the
 * 4 raw 16-byte (fp32 W: 32-byte) W loads before any arithmetic (no branch between them), reads
 * D as two float4 and the 4 rows' U as one broadcast float4 per k, accumulates the 4×8 dW block
 * with 32·r FFMA, then widens W, merges and stores 16 bytes per row. Edge tiles (IK not a multiple
 * of 8, a partial last row group) take element-wise loads and stores. Extra memory: none. In
 * place (out = W) is safe: each element is read then written by one thread. Deterministic.
 *
 * Measured (H200, 4096², bf16, lyco bench): the first version (W loads through vload8 inside
 * per-row branches, U through shuffles, r ≤ 32) ran r 8 in 61.4 µs (3.84× the floor; locon.cu's
 * tensor-core kernel 78.2 µs) and r 32 in 113.9 µs (locon.cu: 80.5 µs), hence r ≤ 16 and this
 * layout. LYCO_CUDA_NO_SMALL_MERGE=1 switches this path off (A/B in the bench).
 */
#include <stdlib.h>

#include "cuda/common.cuh"
#include "cuda/merge_ep.cuh"

namespace {

const int MS_BN = 256;   /* columns per block */
const int MS_BM = 128;   /* rows per block */
const int MS_ROWS = 4;   /* rows per warp step */

/* One warp step's W rows, raw: 16 bytes (16-bit W) or 32 bytes (fp32 W) per lane and row. */
template <int WES> struct w_raw {
    uint4 v[MS_ROWS][WES == 4 ? 2 : 1];
};

template <int WES> __device__ __forceinline__ void w_issue(w_raw<WES> &w, const lk_view &W, i64 o0, i64 jl) {
    const char *b = (const char *)W.p;
#pragma unroll
    for (int i = 0; i < MS_ROWS; i++) {
        const uint4 *p = (const uint4 *)(b + ((o0 + i) * W.s0 + jl) * WES);
        w.v[i][0] = p[0];
        if (WES == 4) w.v[i][WES == 4 ? 1 : 0] = p[1];
    }
}

template <int WES> __device__ __forceinline__ void w_widen(const w_raw<WES> &w, int i, int dt, float (&o)[8]) {
    if (WES == 4) {
        const uint4 a = w.v[i][0], b = w.v[i][WES == 4 ? 1 : 0];
        const unsigned u[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int e = 0; e < 8; e++) o[e] = __uint_as_float(u[e]);
    } else {
        const uint4 a = w.v[i][0];
        const unsigned u[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            o[2 * e] = bits16_to_f(u[e] & 0xffffu, dt);
            o[2 * e + 1] = bits16_to_f(u[e] >> 16, dt);
        }
    }
}

/* WES: bytes per W element (0 = no W: DELTA mode). */
template <typename CT, int RK, int WES>
__global__ __launch_bounds__(NT) void k_merge_fwd_small(lk_merge_fwd_args a) {
    __shared__ __align__(16) float sD[RK][MS_BN];    /* RN_CT(D) strip, zero beyond r and IK */
    __shared__ __align__(16) float sU[RK][MS_BM];    /* RN_CT(U) rows, k-major: 4 rows in one float4 */
    __shared__ float sC[MS_BM];                      /* c_o = s·σ·q_o */
    const lk_locon &L = a.L;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const i64 j0 = (i64)blockIdx.x * MS_BN, jl = j0 + lane * 8, ob = (i64)blockIdx.y * MS_BM;
    const i64 oe = ob + MS_BM < L.O ? ob + MS_BM : L.O;
    const int r = (int)L.r;
    const float sig = sigma_ct<CT>(L.sigma), mf = (float)L.m;
    for (int q = threadIdx.x; q < RK * MS_BN; q += NT) {
        const int k = q / MS_BN, c = q % MS_BN;
        const i64 j = j0 + c;
        sD[k][c] = (k < r && j < L.IK) ? rnd_ct<CT>(vload(L.D, k, j)) : 0.0f;
    }
    for (int q = threadIdx.x; q < RK * MS_BM; q += NT) {
        const int k = q / MS_BM, i = q % MS_BM;
        const i64 o = ob + i;
        sU[k][i] = (k < r && o < oe) ? rnd_ct<CT>(vload(L.U, o, k)) : 0.0f;
    }
    for (int i = threadIdx.x; i < MS_BM; i += NT) {
        const i64 o = ob + i;
        sC[i] = o < oe ? (float)L.s * sig * vget(L.mask, o, 1.0f) : 0.0f;
    }
    __syncthreads();
    const bool full = jl + 8 <= L.IK; /* the lane's 8 columns all inside: 16-byte accesses */
    for (int i0 = warp * MS_ROWS; i0 < MS_BM && ob + i0 < oe; i0 += (NT / 32) * MS_ROWS) {
        const i64 o0 = ob + i0;
        const bool fast = full && o0 + MS_ROWS <= oe;
        w_raw<WES == 0 ? 2 : WES> wr;
        if (WES && fast) w_issue<WES == 0 ? 2 : WES>(wr, a.W, o0, jl);
        float acc[MS_ROWS][8];
#pragma unroll
        for (int i = 0; i < MS_ROWS; i++)
#pragma unroll
            for (int e = 0; e < 8; e++) acc[i][e] = 0.0f;
#pragma unroll 4
        for (int k = 0; k < RK; k++) {
            if (k >= r) break;
            const float4 d0 = *(const float4 *)&sD[k][lane * 8], d1 = *(const float4 *)&sD[k][lane * 8 + 4];
            const float4 u4 = *(const float4 *)&sU[k][i0];
            const float d[8] = {d0.x, d0.y, d0.z, d0.w, d1.x, d1.y, d1.z, d1.w}, u[4] = {u4.x, u4.y, u4.z, u4.w};
#pragma unroll
            for (int i = 0; i < MS_ROWS; i++)
#pragma unroll
                for (int e = 0; e < 8; e++) acc[i][e] = fmaf(u[i], d[e], acc[i][e]);
        }
#pragma unroll
        for (int i = 0; i < MS_ROWS; i++) {
            const i64 o = o0 + i;
            if (o >= oe) break;
            float w[8];
            if (WES && fast) {
                w_widen<WES == 0 ? 2 : WES>(wr, i, a.W.dt, w);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++) w[e] = (WES && jl + e < L.IK) ? vload(a.W, o, jl + e) : 0.0f;
            }
            const float c = sC[i0 + i];
            float v[8];
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = merge_elem(WES ? rnd_ct<CT>(w[e]) : 0.0f, acc[i][e] * c, a.mode, mf, false, NULL);
            if (full) vstore8(a.out, o, jl, v);
            else
                for (int e = 0; e < 8 && jl + e < L.IK; e++) vstore(a.out, o, jl + e, v[e]);
        }
    }
}

template <typename CT, int RK> int launch(const lk_merge_fwd_args *a, cudaStream_t s) {
    const lk_locon &L = a->L;
    const i64 gx = cdiv(L.IK, MS_BN), gy = cdiv(L.O, MS_BM);
    if (gx > 2147483647LL || gy > 65535) return lyco_fail(LYCO_ERR_UNSUPPORTED, "cuda: merge grid %lld×%lld too large", (long long)gx, (long long)gy);
    const dim3 grid((unsigned)gx, (unsigned)gy);
    if (!a->W.p) k_merge_fwd_small<CT, RK, 0><<<grid, NT, 0, s>>>(*a);
    else if (a->W.dt == DT_F32) k_merge_fwd_small<CT, RK, 4><<<grid, NT, 0, s>>>(*a);
    else k_merge_fwd_small<CT, RK, 2><<<grid, NT, 0, s>>>(*a);
    LK_LAUNCHED("merge_fwd (small rank)");
    return LYCO_OK;
}

template <typename CT> int launch_ct(const lk_merge_fwd_args *a, cudaStream_t s) {
    return a->L.r <= 8 ? launch<CT, 8>(a, s) : launch<CT, 16>(a, s);
}

bool row_major_vec(const lk_view &v) { return v.s1 == 1 && (v.flags & LK_VEC) && !(v.flags & LK_UNALIGNED); }

} // namespace

/* Calls expand_lean.cu takes (16-bit compute, every operand in it, row-major 16-byte rows; the
   same conditions as its lk_expand_lean for a LoCon merge) go there instead: H200, 0dc354d's run,
   LYCO_CUDA_NO_SMALL_MERGE A/B, DyLoRA merge 4096² at <= 16 active ranks bf16: 44.8 µs here,
   27.5 µs there. */
bool lean_takes(const lk_merge_fwd_args *a) {
    const lk_locon &L = a->L;
    if (L.ct != DT_BF16 && L.ct != DT_F16) return false;
    const lk_view *v[4] = {&L.U, &L.D, &a->out, &a->W};
    for (int i = 0; i < 4; i++)
        if (v[i]->p && (v[i]->dt != L.ct || !row_major_vec(*v[i]))) return false;
    return true;
}

/* Runs the small-rank merge forward when it applies (*done = 1), else leaves it to the caller. */
extern "C" int lk_locon_merge_fwd_small(const lk_merge_fwd_args *a, const lk_device *dev, void *stream, int *done) {
    (void)dev;
    *done = 0;
    const lk_locon &L = a->L;
    if (a->dora.on || L.r < 1 || L.r > 16 || !row_major_vec(a->out) || (a->W.p && !row_major_vec(a->W))) return LYCO_OK;
    if (getenv("LYCO_CUDA_NO_SMALL_MERGE")) return LYCO_OK; /* A/B switch for the bench */
    if (lean_takes(a) && !getenv("LYCO_CUDA_EXPAND_GENERAL")) return LYCO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    int rc;
    switch (L.ct) {
    case DT_BF16: rc = launch_ct<bf16_t>(a, s); break;
    case DT_F16: rc = launch_ct<f16_t>(a, s); break;
    default: rc = launch_ct<float>(a, s); break;
    }
    if (rc == LYCO_OK) *done = 1;
    return rc;
}
