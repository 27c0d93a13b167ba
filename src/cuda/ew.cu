/*
 * ew.cu — the memory-bound building blocks of IA3, Full and Norm on the CUDA backend
 * (kern_simple.h has the exact formulas):
 *
 *   lk_ew_merge  out = W ⊕ m·(src ⊙ vec) over an R×C matrix (merge of IA3 / Full / Norm, bias
 *                deltas, merge-backward gradient copies, IA3's output-mode row map).
 *                One pass; a chunk is 8 consecutive columns of one row (16-byte vector
 *                loads/stores where the view has LK_VEC, element-wise otherwise, so strided and
 *                unaligned views work), EW_U chunks per thread and iteration with their loads
 *                issued before any use; conversions happen in registers; grid-stride loop.
 *                Measured on the H200 (lyco bench, 8192 tokens × 4096, IA3 bypass fwd bf16):
 *                93 µs = 1.95× the bench's floor with EW_U = 1, 148 µs with EW_U = 4; ncu: 91 µs,
 *                instruction-bound (issue slots 69% busy, DRAM 26%). Hence k_ew_rows for K = 1
 *                or row vectors (every IA3 bypass, Full/Norm merges): a 2-D grid (no index
 *                division), the compute dtype a template parameter. LYCO_CUDA_EW_GENERIC=1 keeps
 *                the generic kernel (A/B).
 *                Extra memory: none. In-place (out == W) is safe: same thread, same element.
 *   lk_chan_sum  per-channel Σ A·B (gradients of IA3 w, Full diff_b, Norm w_norm/b_norm).
 *                Deterministic, no float atomics:
 *                  channels along columns: S fixed row slices (S a function of the shape
 *                  only), one thread per 8-column chunk and slice, fp32 partials S×C;
 *                  channels along rows: one warp per row (fixed-order shuffle sum), partials R;
 *                then a finalise kernel sums the partials of each channel in a fixed order,
 *                scales, and rounds once into the gradient's dtype.
 *                Extra memory: S·C or R floats of stream-ordered scratch (lk_scratch_alloc).
 */
#include <stdlib.h>

#include "cuda/common.cuh"
#include "cuda/kern_simple.h"

#define EW_MAX_BLOCKS 65536
#define CS_TARGET_THREADS 32768

static unsigned ew_blocks(i64 work) {
    i64 b = cdiv(work, NT);
    if (b < 1) b = 1;
    return (unsigned)(b > EW_MAX_BLOCKS ? EW_MAX_BLOCKS : b);
}

/* ---- elementwise merge ---- */

#define EW_U 1   /* chunks per thread and iteration (4 measured slower on the H200: 148 vs 93 µs on IA3 bypass fwd 8192×4096 bf16) */

/* (row, first column) of chunk q */
__device__ __forceinline__ void ew_pos(i64 q, i64 cpr, bool small, i64 &r, i64 &c0) {
    if (small) {
        r = (unsigned)q / (unsigned)cpr;
        c0 = ((unsigned)q % (unsigned)cpr) * 8;
    } else {
        r = q / cpr;
        c0 = (q % cpr) * 8;
    }
}

/* SRCW: the delta's source is W itself (IA3), so only W is read. */
template <bool SRCW> __global__ __launch_bounds__(NT) void k_ew_merge(lk_ew_args a) {
    const i64 cpr = cdiv(a.out.cols, 8), n = a.out.rows * cpr;
    const float m = (float)a.m;
    const bool small = n <= 0x7fffffffLL && a.vec_mod <= 0x7fffffffLL;   /* 32-bit index arithmetic */
    const bool vec_cols8 = a.vec.p && !a.vec_on_rows && a.K == 1;         /* w along columns: 8 at once */
    const i64 step = (i64)gridDim.x * NT * EW_U;
    for (i64 qb = (i64)blockIdx.x * NT * EW_U + threadIdx.x; qb < n; qb += step) {
        float w[EW_U][8], d[SRCW ? 1 : EW_U][8], fv[EW_U][8];
#pragma unroll
        for (int u = 0; u < EW_U; u++) {
            const i64 q = qb + (i64)u * NT;
            if (q >= n) continue;
            i64 r, c0;
            ew_pos(q, cpr, small, r, c0);
            if (a.W.p) {
                vload8(w[u], a.W, r, c0);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++) w[u][e] = 0.0f;
            }
            if (!SRCW) {
                if (a.D.p) {
                    vload8(d[SRCW ? 0 : u], a.D, r, c0);
                } else {
#pragma unroll
                    for (int e = 0; e < 8; e++) d[SRCW ? 0 : u][e] = 0.0f;
                }
            }
            if (vec_cols8) vload8(fv[u], a.vec, 0, c0);
        }
#pragma unroll
        for (int u = 0; u < EW_U; u++) {
            const i64 q = qb + (i64)u * NT;
            if (q >= n) continue;
            i64 r, c0;
            ew_pos(q, cpr, small, r, c0);
            float frow = 1.0f, res[8];
            if (a.vec.p && a.vec_on_rows) {
                frow = vload(a.vec, 0, small ? (i64)((unsigned)r % (unsigned)a.vec_mod) : r % a.vec_mod);
                if (!a.vec_exact) frow = round_to(frow, a.ct);
            }
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float wv = round_to(w[u][e], a.ct), dv = SRCW ? wv : round_to(d[SRCW ? 0 : u][e], a.ct);
                float f = frow;
                if (vec_cols8) {
                    f = a.vec_exact ? fv[u][e] : round_to(fv[u][e], a.ct);
                } else if (a.vec.p && !a.vec_on_rows) {
                    const i64 c = c0 + e;
                    f = c < a.out.cols ? vload(a.vec, 0, c / a.K) : 0.0f;
                    if (!a.vec_exact) f = round_to(f, a.ct);
                }
                const float ev = m * (dv * f);
                res[e] = a.mode == LYCO_MERGE_DELTA ? ev : a.mode == LYCO_MERGE_UNMERGE ? wv - ev : wv + ev;
            }
            vstore8(a.out, r, c0, res);
        }
    }
}

/* The common case, without index division: K = 1 (or no vector along columns), a 2-D grid of
   8-column chunks (x) by rows (y, grid-stride), the compute dtype a template parameter so each
   element is a handful of instructions (the generic kernel above measured instruction-bound on
   the H200: 91 µs, issue slots 69% busy, DRAM 26%, for IA3 bypass fwd 8192 × 4096 bf16). Same
   formula and rounding as k_ew_merge. */
template <typename CT, bool SRCW> __global__ __launch_bounds__(NT) void k_ew_rows(lk_ew_args a) {
    const i64 c0 = ((i64)blockIdx.x * NT + threadIdx.x) * 8;
    if (c0 >= a.out.cols) return;
    const float m = (float)a.m;
    const bool cols8 = a.vec.p && !a.vec_on_rows, rows1 = a.vec.p && a.vec_on_rows;
    float fv[8];
    if (cols8) {
        vload8(fv, a.vec, 0, c0);
        if (!a.vec_exact)
#pragma unroll
            for (int e = 0; e < 8; e++) fv[e] = rnd_ct<CT>(fv[e]);
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) fv[e] = 1.0f;
    }
    for (i64 r = blockIdx.y; r < a.out.rows; r += gridDim.y) {
        float w[8], d[8], res[8];
        if (a.W.p) vload8(w, a.W, r, c0);
        else
#pragma unroll
            for (int e = 0; e < 8; e++) w[e] = 0.0f;
        if (!SRCW) {
            if (a.D.p) vload8(d, a.D, r, c0);
            else
#pragma unroll
                for (int e = 0; e < 8; e++) d[e] = 0.0f;
        }
        float frow = 1.0f;
        if (rows1) {
            frow = vload(a.vec, 0, r % a.vec_mod);
            if (!a.vec_exact) frow = rnd_ct<CT>(frow);
        }
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float wv = rnd_ct<CT>(w[e]), dv = SRCW ? wv : rnd_ct<CT>(d[e]);
            const float ev = m * (dv * (rows1 ? frow : fv[e]));
            res[e] = a.mode == LYCO_MERGE_DELTA ? ev : a.mode == LYCO_MERGE_UNMERGE ? wv - ev : wv + ev;
        }
        vstore8(a.out, r, c0, res);
    }
}

template <typename CT> static void launch_rows(const lk_ew_args *a, cudaStream_t s) {
    const i64 gx = cdiv(cdiv(a->out.cols, 8), NT), gy = a->out.rows < 65535 ? a->out.rows : 65535;
    const dim3 grid((unsigned)gx, (unsigned)gy);
    if (a->src_is_W) k_ew_rows<CT, true><<<grid, NT, 0, s>>>(*a);
    else k_ew_rows<CT, false><<<grid, NT, 0, s>>>(*a);
}

extern "C" int lk_ew_merge(const lk_ew_args *a, void *stream) {
    i64 n = a->out.rows * cdiv(a->out.cols, 8);
    if (!a->out.p || n == 0) return LYCO_OK;
    /* the row kernel: a vector along columns only when K = 1; columns within one x-grid */
    const bool rows_ok = !(a->vec.p && !a->vec_on_rows && a->K != 1) && cdiv(cdiv(a->out.cols, 8), NT) <= 2147483647LL &&
                         !getenv("LYCO_CUDA_EW_GENERIC");
    if (rows_ok) {
        cudaStream_t s = (cudaStream_t)stream;
        if (a->ct == DT_BF16) launch_rows<bf16_t>(a, s);
        else if (a->ct == DT_F16) launch_rows<f16_t>(a, s);
        else launch_rows<float>(a, s);
        LK_LAUNCHED("ew_merge (rows)");
        return LYCO_OK;
    }
    const unsigned blocks = ew_blocks(cdiv(n, EW_U));
    if (a->src_is_W) k_ew_merge<true><<<blocks, NT, 0, (cudaStream_t)stream>>>(*a);
    else k_ew_merge<false><<<blocks, NT, 0, (cudaStream_t)stream>>>(*a);
    LK_LAUNCHED("ew_merge");
    return LYCO_OK;
}

/* ---- per-channel sums ---- */

/* A(r, c..c+7)·B(r, c..c+7) as 8 fp32 products (zero outside the matrix). */
__device__ __forceinline__ void prod8(float (&p)[8], const lk_chan_args &a, i64 r, i64 c0) {
    float x[8], y[8];
    vload8(x, a.A, r, c0);
    if (a.B.p) vload8(y, a.B, r, c0);
    float mu = 0.0f, rs = 1.0f;
    if (a.stats) {
        i64 g = r / a.rows_per_stat;
        mu = a.stats[2 * g];
        rs = a.stats[2 * g + 1];
    }
#pragma unroll
    for (int e = 0; e < 8; e++) {
        float av = a.A_exact ? x[e] : round_to(x[e], a.ct);
        float bv = 1.0f;
        if (a.B.p) {
            bv = round_to(y[e], a.ct);
            if (a.stats) bv = (bv - mu) * rs;
        }
        p[e] = (c0 + e < a.A.cols) ? av * bv : 0.0f;
    }
}

/* channels along columns: part[s·C + c] = Σ_{r in slice s} A·B */
__global__ __launch_bounds__(NT) void k_chan_cols(lk_chan_args a, i64 rows_per_slice, float *part) {
    const i64 C = a.A.cols, cpr = cdiv(C, 8), j = (i64)blockIdx.x * NT + threadIdx.x, s = blockIdx.y;
    if (j >= cpr) return;
    const i64 c0 = j * 8, r0 = s * rows_per_slice;
    i64 r1 = r0 + rows_per_slice;
    if (r1 > a.A.rows) r1 = a.A.rows;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    i64 r = r0;
    for (; r + 4 <= r1; r += 4) {   /* four rows' loads in flight */
        float p[4][8];
#pragma unroll
        for (int u = 0; u < 4; u++) prod8(p[u], a, r + u, c0);
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] += p[u][e];
    }
    for (; r < r1; r++) {
        float p[8];
        prod8(p, a, r, c0);
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] += p[e];
    }
#pragma unroll
    for (int e = 0; e < 8; e++)
        if (c0 + e < C) part[s * C + c0 + e] = acc[e];
}

/* channels along rows: part[r] = Σ_c A·B, one warp per row */
__global__ __launch_bounds__(NT) void k_chan_rows(lk_chan_args a, float *part) {
    const int lane = threadIdx.x & 31;
    const i64 cpr = cdiv(a.A.cols, 8), warps = (i64)gridDim.x * (NT / 32);
    for (i64 r = (i64)blockIdx.x * (NT / 32) + (threadIdx.x >> 5); r < a.A.rows; r += warps) {
        float acc = 0.0f;
        for (i64 j = lane; j < cpr; j += 32) {
            float p[8];
            prod8(p, a, r, j * 8);
#pragma unroll
            for (int e = 0; e < 8; e++) acc += p[e];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) part[r] = acc;
    }
}

/* out[ch] = scale · vec[ch] · Σ partials of ch (fixed order) */
__global__ __launch_bounds__(NT) void k_chan_final(lk_chan_args a, const float *part, i64 S) {
    for (i64 ch = (i64)blockIdx.x * NT + threadIdx.x; ch < a.nch; ch += (i64)gridDim.x * NT) {
        float s = 0.0f;
        if (a.by_col) {
            const i64 C = a.A.cols;
            for (i64 sl = 0; sl < S; sl++)
                for (i64 k = 0; k < a.K; k++) s += part[sl * C + ch * a.K + k];
        } else {
            for (i64 r = ch; r < a.A.rows; r += a.nch) s += part[r];
        }
        float v = (float)a.scale * s;
        if (a.vec.p) v *= vload(a.vec, 0, ch);
        vstore(a.out, 0, ch, v);
    }
}

extern "C" int lk_chan_sum(const lk_chan_args *a, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    if (!a->out.p || a->nch == 0) return LYCO_OK;
    const i64 R = a->A.rows, C = a->A.cols;
    if (R * C == 0) {   /* nothing to sum: zero gradient */
        lk_view none = {};
        return lk_copy_round(&a->out, &none, a->ct, stream);
    }
    i64 S = 1, rps = R, nparts = R;
    if (a->by_col) {
        const i64 cpr = cdiv(C, 8);
        S = cdiv(CS_TARGET_THREADS, cpr);
        if (S > R) S = R;
        if (S > 65535) S = 65535;
        if (S < 1) S = 1;
        rps = cdiv(R, S);
        S = cdiv(R, rps);
        nparts = S * C;
    }
    void *part = NULL;
    int rc = lk_scratch_alloc(&part, sizeof(float) * (size_t)nparts, stream);
    if (rc) return rc;
    if (a->by_col) {
        dim3 grid((unsigned)cdiv(cdiv(C, 8), NT), (unsigned)S);
        k_chan_cols<<<grid, NT, 0, st>>>(*a, rps, (float *)part);
    } else {
        k_chan_rows<<<ew_blocks(R * 32), NT, 0, st>>>(*a, (float *)part);
    }
    cudaError_t e1 = cudaGetLastError();
    if (e1 == cudaSuccess) {
        k_chan_final<<<ew_blocks(a->nch), NT, 0, st>>>(*a, (const float *)part, S);
        e1 = cudaGetLastError();
    }
    rc = lk_scratch_free(part, stream);
    if (e1 != cudaSuccess)
        return lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of chan_sum failed: %s (%s)", cudaGetErrorName(e1), cudaGetErrorString(e1));
    return rc;
}
