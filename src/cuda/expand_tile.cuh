/*
 * expand_tile.cuh — pieces shared by the two expand kernels (lowrank.cu's general k_expand and
 * expand_lean.cu's k_expand_lean), which both own a 64×128 tile of out with 8 warps as 2×4 of
 * 32×32 mma accumulators (acc[mi][ni][e] at acc_row / acc_col, common.cuh):
 *   ex_tile_stats — DoRA's statistics mode: per-tile partial Σ V² per row (one partial per
 *     128-column tile, wd_on_out) or per column (one per 64-row tile), V = w + acc·rowc[row] with
 *     w = RN_CT(base) from the caller's getter (and Σ g·V beside it for the backward);
 *     partials summed across warps in a fixed order (dora_slab.cu's one-pass merge sums the
 *     same way in shared memory);
 *   ex_view_lean — the views the lean kernels take.
 */
#ifndef LYCO_CUDA_EXPAND_TILE_CUH
#define LYCO_CUDA_EXPAND_TILE_CUH

#include "cuda/kern_lowrank.h"
#include "cuda/merge_ep.cuh"

const int EX_M = 64;   /* expand tile rows */
const int EX_N = 128;  /* expand tile columns */

/* A view the lean kernels read or write with 16-byte chunks: in the compute dtype ct (16-bit),
   row-major, 16-byte aligned rows (expand_lean.cu, dora_slab.cu). */
static inline bool ex_view_lean(const lk_view &v, int ct) { return v.dt == ct && (v.flags & LK_VEC) && v.s1 == 1; }

/* DoRA statistics of tile (tm, tn): Σ V² per row (one partial per column tile) or per column,
   and with WG (DoRA's backward, the lean kernel) Σ g·V beside it into stat_part_g (g from gget,
   already CT). red: 512 floats of shared memory free for this tile. */
template <bool WG, class WGET, class GGET>
__device__ __forceinline__ void ex_tile_stats(const lk_expand_args &a, const float (&acc)[2][4][4], const WGET &wget,
                                              const GGET &gget, const float *rowc, float *red, int m0, int n0, i64 tm, i64 tn) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const i64 mb = tm * EX_M, nb = tn * EX_N;
    if (a.dora.on_out) {
        float s[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}}, t[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int row = acc_row(m0, mi, e), col = acc_col(n0, ni, e);
                    const float V = wget(row, col) + acc[mi][ni][e] * rowc[row];
                    s[mi][e >> 1] = fmaf(V, V, s[mi][e >> 1]);
                    if (WG) t[mi][e >> 1] = fmaf(gget(row, col), V, t[mi][e >> 1]);
                }
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float v = s[mi][h], u = t[mi][h];
                v += __shfl_xor_sync(0xffffffffu, v, 1);
                v += __shfl_xor_sync(0xffffffffu, v, 2);
                if (WG) {
                    u += __shfl_xor_sync(0xffffffffu, u, 1);
                    u += __shfl_xor_sync(0xffffffffu, u, 2);
                }
                if ((lane & 3) == 0) {
                    red[(warp >> 1) * EX_M + acc_row(m0, mi, 2 * h)] = v;
                    if (WG) red[4 * EX_M + (warp >> 1) * EX_M + acc_row(m0, mi, 2 * h)] = u;
                }
            }
        __syncthreads();
        for (int i = threadIdx.x; i < EX_M; i += NT) {
            const i64 o = mb + i;
            if (o >= a.M) continue;
            a.stat_part[tn * a.M + o] = ((red[i] + red[EX_M + i]) + red[2 * EX_M + i]) + red[3 * EX_M + i];
            if (WG) {
                const float *r2 = red + 4 * EX_M;
                a.stat_part_g[tn * a.M + o] = ((r2[i] + r2[EX_M + i]) + r2[2 * EX_M + i]) + r2[3 * EX_M + i];
            }
        }
    } else {
        float s[4][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}};
        float t[4][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int row = acc_row(m0, mi, e), col = acc_col(n0, ni, e);
                    const float V = wget(row, col) + acc[mi][ni][e] * rowc[row];
                    s[ni][e & 1] = fmaf(V, V, s[ni][e & 1]);
                    if (WG) t[ni][e & 1] = fmaf(gget(row, col), V, t[ni][e & 1]);
                }
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                float v = s[ni][c], u = t[ni][c];
                v += __shfl_xor_sync(0xffffffffu, v, 4);
                v += __shfl_xor_sync(0xffffffffu, v, 8);
                v += __shfl_xor_sync(0xffffffffu, v, 16);
                if (WG) {
                    u += __shfl_xor_sync(0xffffffffu, u, 4);
                    u += __shfl_xor_sync(0xffffffffu, u, 8);
                    u += __shfl_xor_sync(0xffffffffu, u, 16);
                }
                if (lane < 4) {
                    red[(warp & 1) * EX_N + acc_col(n0, ni, c)] = v;
                    if (WG) red[2 * EX_N + (warp & 1) * EX_N + acc_col(n0, ni, c)] = u;
                }
            }
        __syncthreads();
        for (int i = threadIdx.x; i < EX_N; i += NT) {
            const i64 j = nb + i;
            if (j >= a.N) continue;
            a.stat_part[tm * a.N + j] = red[i] + red[EX_N + i];
            if (WG) a.stat_part_g[tm * a.N + j] = red[2 * EX_N + i] + red[3 * EX_N + i];
        }
    }
}

#endif
