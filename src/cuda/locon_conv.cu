/*
 * locon_conv.cu — LoCon on conv layers in bypass (forward, backward; plain and Tucker) and Tucker
 * LoCon (lora_mid) in the merge directions, on the GPU (ALGORITHMS.md §1.1, §1.4, §2.1).
 *
 * Shared precomputation (fp32 scratch, compact; every operand first rounded to the compute dtype
 * CT, NUMERICS.md §1):
 *   Ur = RN_CT(U)                                   (O × r)
 *   P  = RN_CT(D)                                   (r × I·K, plain)
 *   P[a, c·K+κ] = Σ_b RN_CT(M[a,b,κ]) · RN_CT(D[b,c])  (Tucker, fp32, not rounded:
 *        conv(conv1x1(x, D), M) = conv(x, P), and ΔW = U·P — the CPU backend's reading)
 * With c = s·m·RN_CT(σs) and q the rank mask (bypass) or the row mask (merge):
 *
 * bypass forward:  H = RN_CT(q ⊙ (P · im2col(x)))   (r × pixels per image; NUMERICS.md §1.6)
 *                  y = y0 + c·Ur·H                     (1×1 up projection)
 * bypass backward: GH = c·q ⊙ (Urᵀ · dy) (fp32), H recomputed; dy0 = RN(dy) (0 under DELTA_ONLY)
 *                  dx[n,ch,ip] = Σ_{κ, op: op·σ−π+κ·δ = ip} Σ_a GH[n,a,op] · P[a, ch·K+κ]
 *                  (col2im as a gather: one thread per input element, fixed order, no atomics)
 *                  d_up = c·Σ_t dy·Hᵀ; G_P = Σ_t GH · im2col(x)ᵀ; dσs = s·m·Σ Ur ⊙ (Σ_t dy·Hᵀ)
 *                  plain: d_down = G_P; Tucker: d_mid[a,b,κ] = Σ_c G_P[a,c·K+κ]·D[b,c],
 *                  d_down[b,c] = Σ_{a,κ} M[a,b,κ]·G_P[a,c·K+κ]
 * Tucker merge forward: out = W + m·dW | m·dW | W − m·dW with dW = (s·σs·q_o)·Ur·P
 * Tucker merge backward: Γ = RN_CT(G);  d_up = s·σs·m·q_o·Γ·Pᵀ;  G_P = s·σs·m·Σ_o q_o·Ur[o,:]ᵀ·Γ[o,:];
 *                  dσs = s·m·Σ q_o·Ur ⊙ (Γ·Pᵀ); G_P chained to d_mid, d_down as above.
 *
 * Tiling, bypass (default, "tensor-core path", second half of this file): every product is one
 * tile routine (tc_gemm): a 64×64 fp32 output tile per block of 256 threads (8 warps × 32×16),
 * k consumed 32 a step; operand tiles are rounded to CT in registers and stored in shared memory
 * ([row][k], pitch 40), multiplied with mma.sync m16n8k16 (common.cuh warp_mma) for CT = bf16 /
 * fp16, or FFMA in the same layout for CT = fp32 (fp32-level accuracy, NUMERICS.md §1.7). fp32
 * operands that are not exact in CT (Tucker P, GH) enter as 3 bf16 parts (one MMA pass per part,
 * common.cuh store_parts, as locon.cu) — for fp16 CT too (wide<CT>): fp16 parts would overflow
 * above 65504 and turn subnormal below 2^-14 (GH scales with s·m·σs), bf16 parts keep fp32's
 * range; the fp16 operand of such a product is then 2 bf16 parts (exact). Ur, plain P = RN_CT(D),
 * H and RN_CT(x / dy) are exact in CT: one part, CT's own MMA. im2col / col2im are gathers: each operand element is a function of a per-row
 * table entry (filled once per block) and a per-k table entry (filled two steps ahead by warps
 * 0/1 while the others multiply); the entries hold every division (pixel → image and coordinates,
 * j → channel and kernel offset), so an element costs adds, bound checks and one scalar load,
 * coalesced along the pixel axis (any strides, alignment, 1-3 dims, stride / padding / dilation).
 * The next step's elements are loaded into registers before the current step's products.
 *   H = P·im2col(x):       M = r, N = N·pixels (tiles may straddle images), K = I·K, split in Z
 *                          k ranges (fp32 partials, fixed-order finalise) when few tiles;
 *   y = y0 + c·Ur·H:       M = O, N = N·pixels, K = r; epilogue staged through shared memory so
 *                          y0 / y are read / written along pixels;
 *   GH = c·q⊙(Urᵀ·dy):     M = r, N = N·pixels, K = O;
 *   dx = col2im:           M = I, N = N·input pixels, K = K·r (kidx = κ·r + a), B(u, kidx) =
 *                          GH[n, a, op] where op·σ − π + κ·δ = ip, else 0 (a gathered product:
 *                          no atomics, each dx element written once);
 *   d_up, G_P partials:    K = N·pixels split in Z ranges (tc_split: ~512 blocks, ≥ 8 steps each).
 * The choice of the reading (P·im2col rather than a ΔW-then-conv) keeps the r-wide intermediate:
 * for r ≪ O the products are small and the cost is the gathers, one pass over x per rank tile.
 * Round 2 ("halo path", k_h_halo / k_gp_halo, sections before the launchers): H and the G_P
 * partials of 2-D (or 1-D) convs with stride 1, dilation 1, kernel ≤ 3×3, plain LoCon, CT bf16
 * (H: also fp16) load each block's x halo once per channel chunk (16 channels × (8+kh−1) ×
 * (16+kw−1) pixels) into shared memory and form the K shifted operand views from there (implicit
 * GEMM, k = (channel chunk, kernel offset)); everything else keeps the round-1 tile routine.
 * Round 3 (session 33): where x is 16-bit with 16-byte rows and the output width a multiple of 8
 * (≤ 256), H takes k_h_rows instead of k_h_halo: blocks of 256 consecutive output pixels at full
 * width (the halo is only the rows above and below), x transposed to pixel-major records in
 * shared memory as it is stored, fragments by ldmatrix, two buffers (see its section); and the
 * forward's y = y0 + c·Ur·H runs through lowrank.cu's expand image by image (M = O, N = pixels,
 * Q = H_n stored in CT) wherever y (and y0) have contiguous pixels, instead of k_y_tc.
 * LYCO_CUDA_CONV_HROWS=0 / LYCO_CUDA_CONV_YEXPAND=0 restore k_h_halo / k_y_tc (A/B).
 * Round 4 (session 34): the backward on the same row tiles. k_h_rows is a generic "conv of a
 * 16-bit activation with a small kernel" and now also computes GH = RN_CT(c·q ⊙ Urᵀ·dy) as a
 * 1 × 1 conv of dy (and GH's CT copy) and dx as the conv of GH's copy with the flipped kernel at
 * padding k−1−π (hr_epi picks the epilogue; gh_problem / dx_problem build the problems); the G_P
 * partials take k_gp_rows (GH's copy × x's pixel records, reduced over pixel tiles). Where they
 * apply (dy 16-bit with 16-byte rows; dx contiguous in CT; the k_h_rows geometries) they replace
 * k_gh_tc, k_dx_halo / k_dx_tc and k_gp_halo / k_red_dp_tc; LYCO_CUDA_CONV_HROWS=0 restores all
 * of those. k_gp_halo and k_dx_halo take GH in one bf16 part now (it is RN_CT: the 3-part split
 * of earlier rounds multiplied two zero parts). d_up's partials take k_gp_rows too (GH's 1 × 1
 * problem on dy, H recomputed in CT as its "GH"; partials [z][a][o], k_fin_dup's trans) instead of
 * k_red_dup_tc (session 35: bypass backward 184.7 → 160.1 µs at 3×3 640 ch 64² r32 bf16, 277.3 →
 * 228.2 at 320 ch 128² r16); LYCO_CUDA_CONV_UPROWS=0 restores k_red_dup_tc.
 * Session 37: the backward's three passes over dy (dy0 copy, GH by k_h_rows on the 1 × 1 problem,
 * d_up's partials by k_gp_rows) are one, k_dy_pass (its section below; 16-bit dy with 16-byte
 * rows, r ≤ 32): bypass backward 160.2 → 134.6 µs at 3×3 640 ch 64² n2 r32 bf16, 228.0 → 181.3 at
 * 320 ch 128² r16; LYCO_CUDA_CONV_DYPASS=0 restores the three passes (A/B).
 * Session 36: the forward (plain LoCon, row-tile path, expand) builds Pk straight from down (no
 * k_prep_p launch, no P scratch: 72.2 → 69.4 µs at 320 ch 128² r16). Tried and reverted (A/B in
 * one call, docs/kernels.md): k_h_rows's x tasks set once per block (no divisions in the chunk
 * loop) made H 21.6 → 23.6 µs and the 1 × 1 GH 13.5 → 21.1 (ncu) — the chunk loop is not bound by
 * those instructions; dx with GH resident and several rank tiles per block: 39.8 → 38.8, not
 * worth its code.
 * A/B switches (read at each call): LYCO_CUDA_CONV_TC1=1 = round 1 exactly (H and G_P through
 * tc_gemm's gathers); LYCO_CUDA_CONV_LEGACY=1 = the FFMA kernels (takes precedence);
 * LYCO_CUDA_CONV_HX_GENERIC=1 = k_h_halo's runtime-bound kernel-offset loop for 3 × 3 kernels too
 * (the default unrolls it there: same products in the same order, bitwise the same H);
 * LYCO_CUDA_CONV_DXHALO=0 = dx through k_dx_tc instead of the halo path (k_dx_halo: bf16,
 * plain, the same geometries; the default since session 23). Session 22 found it wrong for
 * unaligned tensors with a 16-bit dx (dx at 320–413 ULP on the odd-address conv1d rows) and kept
 * it opt-in; the cause was ptxas, not the kernel: `st.u8` of a 16-bit register holding a
 * cvt.rn.bf16.f32 result compiled as a float → u8 conversion (F2I.U8.F16) in st_elem's unaligned
 * store (common.cuh now converts through a 32-bit register; tools/sass-lint.sh guards it);
 * measured gain when on: 3x3 640ch 64² n2 r32 bwd 676 → 534 µs, 320ch 128² r16 832 → 694.
 *
 * Time model (H200: 132 SMs, ~1.05e12 warp-instr/s issue, 4.2 TB/s DRAM, L2 ~10 TB/s; bf16;
 * A = 3x3 640ch 64x64 n2 r32: T = 8192 pixels, I·K = 5760; B = 3x3 320ch 128x128 n2 r16: T =
 * 32768, I·K = 2880). Round 1 is bound by instruction issue in the gathers, not by bytes or MMAs:
 * an im2col / col2im element costs ~50-70 instructions (two 24-byte table entries from shared
 * memory, a 3-dim bound / offset loop in i64, a runtime-dtype scalar load, rounding or the 3-part
 * split, a shared store), and H gathers I·K·T elements of x (K = 9 times each x element) plus as
 * many P elements: A: 2·47 M elements ≈ 3.5 G thread-instr ≈ 110 µs at full issue, ~270 µs at the
 * ~40 % issue efficiency of one load step in flight and 512 blocks on 396 slots (1.3 waves) —
 * which is most of the measured 337 µs; B: twice the elements, 621 µs measured.
 * Predicted per kernel, round 2 (µs, A | B):
 *   forward:  prep U, P 2 | 2; Pk 1 | 1; k_h_halo 10-15 | 12-18 (grid 64·1·Z8 | 256·1·Z2 = 512
 *             blocks, 5 | 10 chunks each, 79 regs = 3 blocks/SM; ~0.2 G | 0.3 G thread-instr,
 *             x 10.5 | 21 MB DRAM once, ~57 | ~60 MB L2 incl. Pk and partials); k_h_fin 3 | 3;
 *             k_y_tc 10 | 15 (y0 + y streaming, 21 | 42 MB); total ≈ 30 | 40 (round 1: 337 | 621).
 *   backward: dy0 6 | 12 (streaming); k_gh_tc 30 | 40 (128 | 512 blocks, 20 | 10 steps: under-
 *             filled / latency-bound, unchanged); k_dx_tc 150-250 | 300-450 (col2im gather with 3
 *             bf16 parts of GH, unchanged: the next target, same halo remedy with GH as the
 *             source and the flipped kernel); H 15 | 20; k_red_dup_tc 40 | 60 (unchanged);
 *             k_gp_halo 25-40 | 30-50 (grid 40·2·Z7 | 20·1·Z26 blocks, 10 tiles each, 128 regs =
 *             2 blocks/SM, GH in 3 bf16 parts); finalisers 5 | 5; total ≈ 300-400 | 500-650
 *             (round 1: 1083 | 1720), dominated by k_dx_tc. With the dx halo path (default now):
 *             k_dx_halo 15-25 | 25-40 (grid 64·20 | 256·10 blocks, 2 | 1 rank chunks, 3 GH parts,
 *             96 regs = 2 blocks/SM) instead of k_dx_tc: total ≈ 150-200 | 200-300.
 * If the measured H (forward) is still > 50 µs, the model's "gather-issue-bound" reading is wrong
 * and LYCO_CUDA_CONV_TC1=1 vs default isolates the two H kernels (bench fwd with / without).
 * LYCO_CUDA_CONV_LEGACY=1 (read at each call) selects the previous FFMA kernels for the bypass
 * (verified on the H200), for A/B comparison and as a fallback. Tucker merge always uses them;
 * so does a bypass whose geometry has a coordinate term ≥ 2^28 (the gathers keep coordinates in
 * int; geom_i32), and dx when I > 65535·64 (grid.y).
 * Tiling, legacy bypass and Tucker merge: every product is one FFMA tile routine (gemm64): a 64×64
 * fp32 output tile per block of 256 threads (4×4 per thread), k consumed 16 a step through two
 * 16×64 fp32 shared tiles (8.5 KB), operands gathered element by element by small loader structs
 * (im2col on the fly, zero padding outside the image, conversions in registers). im2col and ΔW
 * never exist.
 * Reductions over N·pixels (bypass) or over the other axis (merge) are split into Z fixed ranges
 * (Z a function of the shape only) with fp32 partials, summed in a fixed order by the finalise
 * kernels: deterministic, no atomics, no host synchronisation.
 * Extra memory (fp32 scratch, stream-ordered): O·r + r·I·K, bypass + N·r·pixels (H; backward
 * also GH), backward Z·(O·r + r·I·K) partials + r·I·K + a few σs partials; tensor-core path
 * also Z_h·N·r·pixels H partials when H's k range is split (Z_h > 1; Z·cells < 2^24 floats);
 * halo path also Pk (r·K·⌈I/16⌉·16 CT elements); row tiles (backward) also GH's Pk (r·⌈O/16⌉·16
 * CT) and its partials (Z_g·N·r·pixels fp32), GH's CT copy (N·r·pixels), dx's Pk (I·K·⌈r/16⌉·16
 * CT) and partials (Z_d·N·I·in-pixels fp32, Z_d > 1 only for r > 64 on small images); k_dy_pass
 * instead of GH's row tiles: ⌈O/128⌉·N·r·pixels GH partials (O > 128) and ≤ 64 d_up partials.
 * Static shared memory ≤ 41 KB per block (tensor-core kernels), registers ≤ 80 (k_gp_halo,
 * k_dx_halo, k_h_rows, k_gp_rows: ≤ 128, __launch_bounds__(NT, 2); k_h_rows's MI = 1, NL = 2
 * instances ≤ 80, three blocks per multiprocessor, HR_MINB); dynamic shared memory of
 * the row-tile kernels ≤ 200 KB (57 KB / 73 KB at OW = 64, 3 × 3); no spills (sm_90) except
 * k_h_rows's four MI = 2, 3 × 3, NL = 4 instances (images wider than 128: 4 bytes, one register,
 * since the paired stores of session 34), and (older) k_h_halo<*, 2, 3 × 3> and k_red_dp_tc<half>.
 * Activations: any strides and alignment (lkc_act). Groups must be 1, and N, ⌈O/64⌉, ⌈r/64⌉ at most
 * 65535 (grid limits): the dispatcher declines the rest.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/kern_conv.h"
#include "cuda/kern_lowrank.h"

#define TT 64   /* output tile edge */
#define TK 16   /* k step */

/* ---------------------------------------------------------------------------------------------
 * geometry and activation access
 * ------------------------------------------------------------------------------------------- */
__device__ __forceinline__ void split3(i64 p, const int64_t (&d)[3], i64 (&o)[3]) {
    o[2] = p % d[2];
    p /= d[2];
    o[1] = p % d[1];
    o[0] = p / d[1];
}

/* input coordinates of output pixel p at kernel offset kk; false inside the zero padding */
__device__ __forceinline__ bool conv_src(const lkc_geom &g, i64 p, i64 kk, i64 (&q)[3]) {
    i64 o[3], k[3];
    split3(p, g.out, o);
    split3(kk, g.k, k);
    bool in = true;
#pragma unroll
    for (int d = 0; d < 3; d++) {
        q[d] = o[d] * g.st[d] - g.pad[d] + k[d] * g.dil[d];
        in = in && q[d] >= 0 && q[d] < g.in[d];
    }
    return in;
}

__device__ __forceinline__ const char *act_addr(const lkc_act &a, i64 n, i64 c, const i64 (&q)[3]) {
    i64 off = n * a.sn + c * a.sc + q[0] * a.ss[0] + q[1] * a.ss[1] + q[2] * a.ss[2];
    return (const char *)a.p + off * (i64)dt_size(a.dt);
}
__device__ __forceinline__ float act_load(const lkc_act &a, i64 n, i64 c, const i64 (&q)[3]) {
    return ld_elem(act_addr(a, n, c, q), a.dt, a.unal);
}
__device__ __forceinline__ void act_store(const lkc_act &a, i64 n, i64 c, const i64 (&q)[3], float v) {
    st_elem((char *)act_addr(a, n, c, q), a.dt, a.unal, v);
}

/* ---------------------------------------------------------------------------------------------
 * loaders: element (a, b) of an operand as fp32 (already in CT), 0 outside it
 * ------------------------------------------------------------------------------------------- */
struct ld_rm {          /* compact fp32 rows × cols: (a, b) = p[a·cols + b] */
    const float *p;
    i64 rows, cols;
    __device__ float operator()(i64 a, i64 b) const { return a < rows && b < cols ? p[a * cols + b] : 0.0f; }
};
struct ld_tr {          /* transposed compact fp32: (a, b) = p[b·ld + a], a < na, b < nb */
    const float *p;
    i64 na, nb, ld;
    __device__ float operator()(i64 a, i64 b) const { return a < na && b < nb ? p[b * ld + a] : 0.0f; }
};
struct ld_uq {          /* (a, o) = Ur[o·r + a] · q_o  (merge: masked rows) */
    const float *p;
    i64 r, O;
    lk_view mask;
    __device__ float operator()(i64 a, i64 o) const { return a < r && o < O ? p[o * r + a] * vget(mask, o, 1.0f) : 0.0f; }
};
template <typename CT> struct ld_view {   /* RN_CT of a 2-D view */
    lk_view v;
    __device__ float operator()(i64 a, i64 b) const { return a < v.rows && b < v.cols ? rnd_ct<CT>(vload(v, a, b)) : 0.0f; }
};
struct ld_h {           /* H/GH [n][r][sout] as (a, t), t = n·sout + p */
    const float *p;
    i64 r, sout, T;
    __device__ float operator()(i64 a, i64 t) const {
        return a < r && t < T ? p[((t / sout) * r + a) * sout + t % sout] : 0.0f;
    }
};
struct ld_ht {          /* the same as (t, a) */
    ld_h h;
    __device__ float operator()(i64 t, i64 a) const { return h(a, t); }
};
template <typename CT> struct ld_act {    /* RN_CT(act(n, c, p)) of one image as (c, p) */
    lkc_act a;
    lkc_geom g;
    i64 n, C;
    __device__ float operator()(i64 c, i64 p) const {
        if (c >= C || p >= g.sout) return 0.0f;
        i64 q[3];
        split3(p, g.out, q);
        return rnd_ct<CT>(act_load(a, n, c, q));
    }
};
template <typename CT> struct ld_act_t {  /* RN_CT(act(n, c, p)) as (c, t), t = n·S + p, over all images */
    lkc_act a;
    lkc_geom g;
    i64 C, T;
    __device__ float operator()(i64 c, i64 t) const {
        if (c >= C || t >= T) return 0.0f;
        i64 q[3];
        split3(t % g.sout, g.out, q);
        return rnd_ct<CT>(act_load(a, t / g.sout, c, q));
    }
};
template <typename CT> struct ld_x {      /* im2col of image n as (j, p), j = ch·K + κ; zero padding */
    lkc_act x;
    lkc_geom g;
    i64 n, IK, K;
    __device__ float operator()(i64 j, i64 p) const {
        if (j >= IK || p >= g.sout) return 0.0f;
        i64 q[3];
        if (!conv_src(g, p, j % K, q)) return 0.0f;
        return rnd_ct<CT>(act_load(x, n, j / K, q));
    }
};
template <typename CT> struct ld_xt {     /* im2col over all images as (t, j), t = n·sout + p */
    lkc_act x;
    lkc_geom g;
    i64 IK, K, T;
    __device__ float operator()(i64 t, i64 j) const {
        if (j >= IK || t >= T) return 0.0f;
        i64 q[3];
        if (!conv_src(g, t % g.sout, j % K, q)) return 0.0f;
        return rnd_ct<CT>(act_load(x, t / g.sout, j / K, q));
    }
};

/* ---------------------------------------------------------------------------------------------
 * the tile product: acc += Σ_{k ∈ [kb, ke)} A(m0 + m, k) · B(k, n0 + n) for the 64×64 tile;
 * thread (tx, ty) = (tid % 16, tid / 16) owns rows m0 + ty + 16·i and columns n0 + tx + 16·j.
 * Fixed k order: deterministic. Ends with a barrier.
 * ------------------------------------------------------------------------------------------- */
template <class LA, class LB>
__device__ __forceinline__ void gemm64(const LA &la, const LB &lb, i64 m0, i64 n0, i64 kb, i64 ke, float (&acc)[4][4]) {
    __shared__ float sA[TK][TT + 4], sB[TK][TT + 4];
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    for (i64 k0 = kb; k0 < ke; k0 += TK) {
        for (int e = threadIdx.x; e < TK * TT; e += NT) {
            int kk = e / TT, mm = e % TT;
            i64 k = k0 + kk;
            sA[kk][mm] = k < ke ? la(m0 + mm, k) : 0.0f;
            sB[kk][mm] = k < ke ? lb(k, n0 + mm) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TK; kk++) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                av[i] = sA[kk][ty + 16 * i];
                bv[i] = sB[kk][tx + 16 * i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
}

__device__ __forceinline__ void acc_clear(float (&acc)[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
}
__device__ __forceinline__ i64 tile_row(int i) { return (threadIdx.x >> 4) + 16 * i; }
__device__ __forceinline__ i64 tile_col(int j) { return (threadIdx.x & 15) + 16 * j; }

/* H element i = v (already RN_CT): H is fp32 (the backward's) or CT (the forward's, for the expand) */
template <typename HT> __device__ __forceinline__ void h_put(HT *H, i64 i, float v) { H[i] = ct_of<HT>::from(v); }

/* c = s·m·RN_CT(σs) */
template <typename CT> __device__ __forceinline__ float scale_c(const lk_locon &L) {
    return (float)(L.s * L.m) * sigma_ct<CT>(L.sigma);
}

/* What the row-tile product (k_h_rows, and k_h_fin after its k split) stores for an output
   element (channel a, index i) of fp32 sum v: HR_H: H = RN_CT(q_a·v); HR_GH: GH = RN_CT(c·q_a·v)
   (as k_gh_tc), and the same value in CT at H2[i] when H2 is set (dx's operand); HR_RAW: v in
   HT (dx, no mask: L.mask is NULL for that problem) */
enum { HR_H = 0, HR_GH = 1, HR_RAW = 2 };
struct hr_epi {
    int mode;
    void *H2;
    int pair;   /* H is aligned to two elements: k_h_rows stores adjacent columns as one word */
};
template <typename CT> __device__ __forceinline__ float hr_value(const lk_locon &L, const hr_epi &e, i64 a, float v) {
    if (e.mode == HR_RAW) return v;
    const float q = vget(L.mask, a, 1.0f);
    return rnd_ct<CT>((e.mode == HR_GH ? scale_c<CT>(L) * q : q) * v);
}
template <typename CT, typename HT> __device__ __forceinline__ void hr_store(const lk_locon &L, const hr_epi &e, HT *H, i64 i, i64 a, float v) {
    const float u = hr_value<CT>(L, e, a, v);
    h_put<HT>(H, i, u);
    if (e.H2) ((CT *)e.H2)[i] = ct_of<CT>::from(u);
}

/* elements i and i + 1 (i even, same channel a) at once where e.pair allows */
template <typename HT> struct pair_of;
template <> struct pair_of<float> { typedef float2 T; static __device__ float2 make(float a, float b) { return make_float2(a, b); } };
template <> struct pair_of<bf16_t> {
    typedef __nv_bfloat162 T;
    static __device__ __nv_bfloat162 make(float a, float b) { return __floats2bfloat162_rn(a, b); }
};
template <> struct pair_of<f16_t> { typedef __half2 T; static __device__ __half2 make(float a, float b) { return __floats2half2_rn(a, b); } };
template <typename CT, typename HT>
__device__ __forceinline__ void hr_store2(const lk_locon &L, const hr_epi &e, HT *H, i64 i, i64 a, float v0, float v1) {
    if (!e.pair) {
        hr_store<CT, HT>(L, e, H, i, a, v0);
        hr_store<CT, HT>(L, e, H, i + 1, a, v1);
        return;
    }
    const float u0 = hr_value<CT>(L, e, a, v0), u1 = hr_value<CT>(L, e, a, v1);
    *(typename pair_of<HT>::T *)(H + i) = pair_of<HT>::make(u0, u1);   /* exact conversions: u is RN_CT or HT = float */
    if (e.H2) *(typename pair_of<CT>::T *)((CT *)e.H2 + i) = pair_of<CT>::make(u0, u1);
}

/* ---------------------------------------------------------------------------------------------
 * precomputation
 * ------------------------------------------------------------------------------------------- */
template <typename CT> __global__ __launch_bounds__(NT) void k_prep_u(lk_locon L, float *Ur) {
    i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx < L.O * L.r) Ur[idx] = rnd_ct<CT>(vload(L.U, idx / L.r, idx % L.r));
}

template <typename CT> __global__ __launch_bounds__(NT) void k_prep_p(lkc_conv C, float *P) {
    const lk_locon &L = C.L;
    i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= L.r * L.IK) return;
    i64 a = idx / L.IK, j = idx % L.IK;
    if (!C.M.p) {
        P[idx] = rnd_ct<CT>(vload(L.D, a, j));
        return;
    }
    i64 ch = j / L.K, k = j % L.K;
    float acc = 0.0f;
    for (i64 b = 0; b < L.r; b++) acc = fmaf(rnd_ct<CT>(vload(C.M, a, b * L.K + k)), rnd_ct<CT>(vload(L.D, b, ch)), acc);
    P[idx] = acc;
}

/* ---------------------------------------------------------------------------------------------
 * bypass
 * ------------------------------------------------------------------------------------------- */
/* H[n][a][p] = RN_CT(q_a · Σ_j P[a,j]·im2col(x)[j,p]); grid (pixel tiles, rank tiles, N) */
template <typename CT> __global__ __launch_bounds__(NT) void k_h(lkc_conv C, lkc_act x, const float *P, float *H) {
    const lk_locon &L = C.L;
    const i64 p0 = (i64)blockIdx.x * TT, a0 = (i64)blockIdx.y * TT, n = blockIdx.z;
    float acc[4][4];
    acc_clear(acc);
    gemm64(ld_rm{P, L.r, L.IK}, ld_x<CT>{x, C.g, n, L.IK, L.K}, a0, p0, 0, L.IK, acc);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        i64 a = a0 + tile_row(i);
        if (a >= L.r) continue;
        float q = vget(L.mask, a, 1.0f);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            i64 p = p0 + tile_col(j);
            if (p < C.g.sout) H[(n * L.r + a) * C.g.sout + p] = rnd_ct<CT>(q * acc[i][j]);
        }
    }
}

/* y = y0 + c·Ur·H (or c·Ur·H); grid (pixel tiles, output-channel tiles, N) */
template <typename CT>
__global__ __launch_bounds__(NT) void k_y(lkc_conv C, const float *Ur, const float *H, lkc_act y0, lkc_act y) {
    const lk_locon &L = C.L;
    const i64 p0 = (i64)blockIdx.x * TT, o0 = (i64)blockIdx.y * TT, n = blockIdx.z, S = C.g.sout;
    float acc[4][4];
    acc_clear(acc);
    gemm64(ld_rm{Ur, L.O, L.r}, ld_rm{H + n * L.r * S, L.r, S}, o0, p0, 0, L.r, acc);
    const float c = scale_c<CT>(L);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        i64 o = o0 + tile_row(i);
        if (o >= L.O) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            i64 p = p0 + tile_col(j);
            if (p >= S) continue;
            i64 q[3];
            split3(p, C.g.out, q);
            float v = y0.p ? fmaf(c, acc[i][j], rnd_ct<CT>(act_load(y0, n, o, q))) : c * acc[i][j];
            act_store(y, n, o, q, v);
        }
    }
}

/* GH[n][a][p] = c·q_a·Σ_o Ur[o,a]·RN_CT(dy[n,o,p]); grid (pixel tiles, rank tiles, N) */
template <typename CT> __global__ __launch_bounds__(NT) void k_gh(lkc_conv C, lkc_act dy, const float *Ur, float *GH) {
    const lk_locon &L = C.L;
    const i64 p0 = (i64)blockIdx.x * TT, a0 = (i64)blockIdx.y * TT, n = blockIdx.z, S = C.g.sout;
    float acc[4][4];
    acc_clear(acc);
    gemm64(ld_tr{Ur, L.r, L.O, L.r}, ld_act<CT>{dy, C.g, n, L.O}, a0, p0, 0, L.O, acc);
    const float c = scale_c<CT>(L);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        i64 a = a0 + tile_row(i);
        if (a >= L.r) continue;
        float q = vget(L.mask, a, 1.0f);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            i64 p = p0 + tile_col(j);
            if (p < S) GH[(n * L.r + a) * S + p] = rnd_ct<CT>(c * q * acc[i][j]); /* gh rounded as eager stores it (§1.6) */
        }
    }
}

/* dy0 = RN(RN_CT(dy)), or 0 (DELTA_ONLY), elementwise over N·O·pixels */
template <typename CT> __global__ __launch_bounds__(NT) void k_dy0(lkc_conv C, lkc_act dy, lkc_act dy0, int zero) {
    const i64 S = C.g.sout, total = C.N * C.L.O * S;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < total; idx += (i64)gridDim.x * NT) {
        i64 p = idx % S, o = (idx / S) % C.L.O, n = idx / (S * C.L.O), q[3];
        split3(p, C.g.out, q);
        act_store(dy0, n, o, q, zero ? 0.0f : rnd_ct<CT>(act_load(dy, n, o, q)));
    }
}

/* dx[n,ch,ip] = Σ_κ Σ_a GH[n,a,op(ip,κ)] · P[a, ch·K+κ] over the output pixels op that read ip */
template <typename CT> __global__ __launch_bounds__(NT) void k_dx(lkc_conv C, const float *P, const float *GH, lkc_act dx) {
    const lk_locon &L = C.L;
    const lkc_geom &g = C.g;
    const i64 total = C.N * C.I * g.sin;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < total; idx += (i64)gridDim.x * NT) {
        i64 ip = idx % g.sin, ch = (idx / g.sin) % C.I, n = idx / (g.sin * C.I), q[3];
        split3(ip, g.in, q);
        float acc = 0.0f;
        for (i64 kk = 0; kk < L.K; kk++) {
            i64 k[3], op = 0;
            split3(kk, g.k, k);
            bool hit = true;
#pragma unroll
            for (int d = 0; d < 3; d++) {
                i64 t = q[d] + g.pad[d] - k[d] * g.dil[d];
                if (t < 0 || t % g.st[d] != 0 || t / g.st[d] >= g.out[d]) hit = false;
                op = op * g.out[d] + (hit ? t / g.st[d] : 0);
            }
            if (!hit) continue;
            const float *gh = GH + n * L.r * g.sout + op, *pc = P + ch * L.K + kk;
            for (i64 a = 0; a < L.r; a++) acc = fmaf(gh[a * g.sout], pc[a * L.IK], acc);
        }
        act_store(dx, n, ch, q, acc);
    }
}

/* partials of Σ_t dy[o,t]·H[a,t]: part[z][o][a]; grid (rank tiles, channel tiles, Z) */
template <typename CT>
__global__ __launch_bounds__(NT) void k_red_dup(lkc_conv C, lkc_act dy, const float *H, float *part, i64 kper) {
    const lk_locon &L = C.L;
    const i64 a0 = (i64)blockIdx.x * TT, o0 = (i64)blockIdx.y * TT, T = C.N * C.g.sout;
    const i64 kb = (i64)blockIdx.z * kper, ke = kb + kper < T ? kb + kper : T;
    float acc[4][4];
    acc_clear(acc);
    gemm64(ld_act_t<CT>{dy, C.g, L.O, T}, ld_ht{ld_h{H, L.r, C.g.sout, T}}, o0, a0, kb, ke, acc);
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            i64 o = o0 + tile_row(i), a = a0 + tile_col(j);
            if (o < L.O && a < L.r) part[((i64)blockIdx.z * L.O + o) * L.r + a] = acc[i][j];
        }
}

/* partials of G_P[a,j] = Σ_t GH[a,t]·im2col(x)[t,j]: part[z][a][j]; grid (column tiles, rank tiles, Z) */
template <typename CT>
__global__ __launch_bounds__(NT) void k_red_dp(lkc_conv C, lkc_act x, const float *GH, float *part, i64 kper) {
    const lk_locon &L = C.L;
    const i64 j0 = (i64)blockIdx.x * TT, a0 = (i64)blockIdx.y * TT, T = C.N * C.g.sout;
    const i64 kb = (i64)blockIdx.z * kper, ke = kb + kper < T ? kb + kper : T;
    float acc[4][4];
    acc_clear(acc);
    gemm64(ld_h{GH, L.r, C.g.sout, T}, ld_xt<CT>{x, C.g, L.IK, L.K, T}, a0, j0, kb, ke, acc);
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            i64 a = a0 + tile_row(i), jj = j0 + tile_col(j);
            if (a < L.r && jj < L.IK) part[((i64)blockIdx.z * L.r + a) * L.IK + jj] = acc[i][j];
        }
}

/* ---------------------------------------------------------------------------------------------
 * Tucker merge
 * ------------------------------------------------------------------------------------------- */
__device__ __forceinline__ float tm_merge_elem(float w, float dw, int mode, float mf) {
    if (mode == 0) return fmaf(mf, dw, w);
    if (mode == 1) return mf * dw;
    return fmaf(-mf, dw, w);
}

/* out = W ± m·dW (or m·dW), dW = (s·σs·q_o)·Ur·P; grid (column tiles, row tiles) */
template <typename CT>
__global__ __launch_bounds__(NT) void k_tm_fwd(lkc_conv C, const float *Ur, const float *P, lk_view W, lk_view out, int mode) {
    const lk_locon &L = C.L;
    const i64 j0 = (i64)blockIdx.x * TT, o0 = (i64)blockIdx.y * TT;
    float acc[4][4];
    acc_clear(acc);
    gemm64(ld_rm{Ur, L.O, L.r}, ld_rm{P, L.r, L.IK}, o0, j0, 0, L.r, acc);
    const float sig = sigma_ct<CT>(L.sigma), mf = (float)L.m;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        i64 o = o0 + tile_row(i);
        if (o >= L.O) continue;
        float rowc = (float)L.s * sig * vget(L.mask, o, 1.0f);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            i64 jj = j0 + tile_col(j);
            if (jj >= L.IK) continue;
            float w = W.p ? rnd_ct<CT>(vload(W, o, jj)) : 0.0f;
            vstore(out, o, jj, tm_merge_elem(w, acc[i][j] * rowc, mode, mf));
        }
    }
}

/* partials of Σ_j Γ[o,j]·P[a,j]: part[z][o][a]; grid (rank tiles, row tiles, Z over columns) */
template <typename CT> __global__ __launch_bounds__(NT) void k_tm_dup(lkc_conv C, lk_view G, const float *P, float *part, i64 kper) {
    const lk_locon &L = C.L;
    const i64 a0 = (i64)blockIdx.x * TT, o0 = (i64)blockIdx.y * TT;
    const i64 kb = (i64)blockIdx.z * kper, ke = kb + kper < L.IK ? kb + kper : L.IK;
    float acc[4][4];
    acc_clear(acc);
    gemm64(ld_view<CT>{G}, ld_tr{P, L.IK, L.r, L.IK}, o0, a0, kb, ke, acc);
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            i64 o = o0 + tile_row(i), a = a0 + tile_col(j);
            if (o < L.O && a < L.r) part[((i64)blockIdx.z * L.O + o) * L.r + a] = acc[i][j];
        }
}

/* partials of Σ_o q_o·Ur[o,a]·Γ[o,j]: part[z][a][j]; grid (column tiles, rank tiles, Z over rows) */
template <typename CT> __global__ __launch_bounds__(NT) void k_tm_dp(lkc_conv C, lk_view G, const float *Ur, float *part, i64 kper) {
    const lk_locon &L = C.L;
    const i64 j0 = (i64)blockIdx.x * TT, a0 = (i64)blockIdx.y * TT;
    const i64 kb = (i64)blockIdx.z * kper, ke = kb + kper < L.O ? kb + kper : L.O;
    float acc[4][4];
    acc_clear(acc);
    gemm64(ld_uq{Ur, L.r, L.O, L.mask}, ld_view<CT>{G}, a0, j0, kb, ke, acc);
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            i64 a = a0 + tile_row(i), jj = j0 + tile_col(j);
            if (a < L.r && jj < L.IK) part[((i64)blockIdx.z * L.r + a) * L.IK + jj] = acc[i][j];
        }
}

/* ---------------------------------------------------------------------------------------------
 * finalise (fixed order over the Z partials)
 * ------------------------------------------------------------------------------------------- */
/* d_up[o,a] = v·coef_o·σ' with v = Σ_z part; σs partial Σ Ur·v·coef_o of this block.
   bypass: coef_o = s·m (H is masked); merge: coef_o = s·q_o·m */
__global__ __launch_bounds__(NT) void k_fin_dup(lk_locon L, int merge, const float *part, int Z, const float *Ur, lk_view gU,
                                                float *sigpart, int trans) {
    __shared__ float red[NT / 32];
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    float sp = 0.0f;
    if (idx < L.O * L.r) {
        i64 o = idx / L.r, a = idx % L.r;
        float v = 0.0f;
        for (int z = 0; z < Z; z++) v += trans ? part[((i64)z * L.r + a) * L.O + o] : part[((i64)z * L.O + o) * L.r + a];
        float coef = merge ? (float)L.s * vget(L.mask, o, 1.0f) * (float)L.m : (float)(L.s * L.m);
        float sig = L.sigma.p ? round_to(vload(L.sigma, 0, 0), L.ct) : 1.0f;
        if (gU.p) vstore(gU, o, a, v * coef * sig);
        sp = Ur[idx] * v * coef;
    }
    if (sigpart) {
        float s = block_sum(sp, red);
        if (threadIdx.x == 0) sigpart[blockIdx.x] = s;
    }
}

/* Σ parts (fixed order) → out (1 element) */
__global__ __launch_bounds__(NT) void k_fin_sum(const float *parts, i64 n, lk_view out) {
    __shared__ float red[NT / 32];
    float v = 0.0f;
    for (i64 i = threadIdx.x; i < n; i += NT) v += parts[i];
    float s = block_sum(v, red);
    if (threadIdx.x == 0) vstore(out, 0, 0, s);
}

/* G_P[a,j] = coef·σ'·Σ_z part (σ' = RN_CT(σs) when use_sigma) → gD view (plain) or compact fp32 Gp */
__global__ __launch_bounds__(NT) void k_fin_dp(lk_locon L, const float *part, int Z, float coef, int use_sigma, lk_view gD, float *Gp) {
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx >= L.r * L.IK) return;
    float v = 0.0f;
    for (int z = 0; z < Z; z++) v += part[(i64)z * L.r * L.IK + idx];
    float sig = use_sigma && L.sigma.p ? round_to(vload(L.sigma, 0, 0), L.ct) : 1.0f;
    v = v * coef * sig;
    if (Gp) Gp[idx] = v;
    else vstore(gD, idx / L.IK, idx % L.IK, v);
}

/* Tucker chain of G_P: d_mid[a, b·K+κ] = Σ_c G_P[a, c·K+κ]·D[b,c] (first r·r·K threads),
   d_down[b,c] = Σ_{a,κ} M[a, b·K+κ]·G_P[a, c·K+κ] (next r·I threads) */
template <typename CT> __global__ __launch_bounds__(NT) void k_chain(lkc_conv C, const float *Gp, lk_view gD, lk_view gM) {
    const lk_locon &L = C.L;
    const i64 nm = L.r * L.r * L.K, nd = L.r * C.I;
    const i64 idx = (i64)blockIdx.x * NT + threadIdx.x;
    if (idx < nm) {
        if (!gM.p) return;
        i64 a = idx / (L.r * L.K), b = (idx / L.K) % L.r, k = idx % L.K;
        float acc = 0.0f;
        for (i64 c = 0; c < C.I; c++) acc = fmaf(Gp[a * L.IK + c * L.K + k], rnd_ct<CT>(vload(L.D, b, c)), acc);
        vstore(gM, a, b * L.K + k, acc);
    } else if (idx < nm + nd) {
        if (!gD.p) return;
        i64 b = (idx - nm) / C.I, c = (idx - nm) % C.I;
        float acc = 0.0f;
        for (i64 a = 0; a < L.r; a++)
            for (i64 k = 0; k < L.K; k++) acc = fmaf(rnd_ct<CT>(vload(C.M, a, b * L.K + k)), Gp[a * L.IK + c * L.K + k], acc);
        vstore(gD, b, c, acc);
    }
}

/* =============================================================================================
 * tensor-core path (default; LYCO_CUDA_CONV_LEGACY=1 selects the FFMA kernels above)
 *
 * One tile routine (tc_gemm): a BM×BN = 64×64 fp32 tile per block of 256 threads (8 warps of
 * 32×16, mma.sync m16n8k16 for CT = bf16/fp16 via common.cuh's warp_mma; FFMA with the same
 * layout for CT = fp32), k consumed BK = 32 a step. Operands are gathered by loaders whose
 * element (m, k) is a function of two table entries: one per tile row/column (filled once per
 * block) and one per k index (filled per step, two steps ahead, by warps 0/1 while the others
 * multiply). All index arithmetic (pixel → (n, o0, o1, o2), j → (channel, κ), divisions) lives
 * in the table fill; an element costs a few adds, bound checks and one scalar load, coalesced
 * along the operand's pixel axis. Next step's elements are loaded into registers before the
 * current step's products (one step in flight). fp32 operands that are not exact in CT (Tucker
 * P, GH) enter as nsplit<CT> parts (bf16: 3, fp16: 2; one MMA per part, common.cuh store_parts);
 * Ur, plain P, H and RN_CT(activations) are exact in CT: one part.
 * Scratch: as the FFMA path, plus the k-split partials of H (Z·r·N·pixels fp32) when Z > 1.
 * =========================================================================================== */
#define BM 64
#define BN 64
#define BK 32
#define LDS (BK + 8) /* shared row pitch (elements): conflict-light 32-bit fragment reads */

namespace {

/* MMA operand type and part counts of the products with an fp32 operand (Tucker P, GH): CT
   itself, except fp16, where bf16 parts are used (fp32's exponent range: an fp32 value beyond
   fp16's range, or so small that its fp16 parts would be subnormal, keeps its accuracy); an
   operand exact in CT is then nx parts (fp16 → 2 bf16 parts, exact), an fp32 one nf parts. */
template <typename CT> struct wide {
    typedef CT MT;
    static const int nx = 1, nf = nsplit<CT>::n;
};
template <> struct wide<f16_t> {
    typedef bf16_t MT;
    static const int nx = 2, nf = 3;
};

/* a table entry: an element offset, three coordinates (int: the launchers route geometries with
   any coordinate beyond 2^30 to the legacy kernels, geom_i32), in range or not */
struct ent {
    i64 off;
    int c[3];
    int ok;
};

/* q = a / b, r = a % b (a ≥ 0, b > 0); 32-bit division where both fit */
__device__ __forceinline__ void divmod(i64 a, i64 b, i64 &q, i64 &r) {
    if (((unsigned long long)a | (unsigned long long)b) < 0x80000000ull) {
        unsigned qq = (unsigned)a / (unsigned)b;
        q = qq;
        r = a - (i64)qq * b;
    } else {
        q = a / b;
        r = a - q * b;
    }
}
__device__ __forceinline__ void split3f(i64 p, const int64_t (&d)[3], i64 (&o)[3]) {
    i64 q;
    divmod(p, d[2], q, o[2]);
    divmod(q, d[1], o[0], o[1]);
}

/* i → (i / div)·s1 + (i % div)·s2, in range for i < ext */
struct map_lin {
    i64 ext, div, s1, s2;
    __device__ ent operator()(i64 i) const {
        ent e = {};
        e.ok = i < ext;
        if (e.ok) {
            i64 q, r;
            divmod(i, div, q, r);
            e.off = q * s1 + r * s2;
        }
        return e;
    }
};

/* compact fp32 scratch operand: p[m.off + k.off]; KF: threads run along k */
template <bool KF_> struct ld_f32 {
    static const bool KF = KF_;
    const float *p;
    map_lin mm, mk;
    __device__ ent m(i64 i) const { return mm(i); }
    __device__ ent k(i64 i) const { return mk(i); }
    __device__ float get(const ent &a, const ent &b) const { return a.ok && b.ok ? p[a.off + b.off] : 0.0f; }
};

__device__ __forceinline__ float act_at(const lkc_act &a, i64 off) {
    return ld_elem((const char *)a.p + off * (i64)dt_size(a.dt), a.dt, a.unal);
}

/* RN_CT of an activation (dy) as (channel, pixel t = n·S + p) (PK: pixel is the k axis) or
   (pixel, channel) */
template <typename CT, bool PK> struct ld_actv {
    static const bool KF = PK;
    lkc_act a;
    lkc_geom g;
    i64 C, T;
    __device__ ent chan(i64 c) const {
        ent e = {};
        e.ok = c < C;
        e.off = e.ok ? c * a.sc : 0;
        return e;
    }
    __device__ ent pix(i64 t) const {
        ent e = {};
        e.ok = t < T;
        if (e.ok) {
            i64 n, p, q[3];
            divmod(t, g.sout, n, p);
            split3f(p, g.out, q);
            e.off = n * a.sn + q[0] * a.ss[0] + q[1] * a.ss[1] + q[2] * a.ss[2];
        }
        return e;
    }
    __device__ ent m(i64 i) const { return PK ? chan(i) : pix(i); }
    __device__ ent k(i64 i) const { return PK ? pix(i) : chan(i); }
    __device__ float get(const ent &u, const ent &v) const {
        return u.ok && v.ok ? rnd_ct<CT>(act_at(a, u.off + v.off)) : 0.0f;
    }
};

/* RN_CT(im2col(x)) as (pixel t, j = ch·K + κ) or (j, t) (PK: pixel is the k axis).
   Pixel entry: off n·sn, c = o·σ − π; column entry: off ch·sc, c = κ·δ; zero padding. */
template <typename CT, bool PK> struct ld_i2c {
    static const bool KF = PK;
    lkc_act x;
    lkc_geom g;
    i64 T, IK, K;
    __device__ ent pix(i64 t) const {
        ent e = {};
        e.ok = t < T;
        if (e.ok) {
            i64 n, p, o[3];
            divmod(t, g.sout, n, p);
            split3f(p, g.out, o);
            e.off = n * x.sn;
#pragma unroll
            for (int d = 0; d < 3; d++) e.c[d] = (int)(o[d] * g.st[d] - g.pad[d]);
        }
        return e;
    }
    __device__ ent col(i64 j) const {
        ent e = {};
        e.ok = j < IK;
        if (e.ok) {
            i64 ch, kap, kk[3];
            divmod(j, K, ch, kap);
            split3f(kap, g.k, kk);
            e.off = ch * x.sc;
#pragma unroll
            for (int d = 0; d < 3; d++) e.c[d] = (int)(kk[d] * g.dil[d]);
        }
        return e;
    }
    __device__ ent m(i64 i) const { return PK ? col(i) : pix(i); }
    __device__ ent k(i64 i) const { return PK ? pix(i) : col(i); }
    __device__ float get(const ent &u, const ent &v) const {
        if (!(u.ok && v.ok)) return 0.0f;
        i64 off = u.off + v.off;
#pragma unroll
        for (int d = 0; d < 3; d++) {
            const int q = u.c[d] + v.c[d];
            if ((unsigned)q >= (unsigned)g.in[d]) return 0.0f;   /* q < 0 or q ≥ in */
            off += (i64)q * x.ss[d];
        }
        return rnd_ct<CT>(act_at(x, off));
    }
};

/* col2im gather of GH [n][a][op] as (input pixel u = n·Sin + ip, kidx = κ·r + a):
   GH[n, a, op] where op·σ − π + κ·δ = ip, else 0. Pixel entry: off n·r·S, c = ip + π;
   kidx entry: off a·S, c = κ·δ. */
struct ld_c2i {
    static const bool KF = false;
    const float *gh;
    lkc_geom g;
    i64 r, U, KR;
    __device__ ent m(i64 u) const {
        ent e = {};
        e.ok = u < U;
        if (e.ok) {
            i64 n, ip, q[3];
            divmod(u, g.sin, n, ip);
            split3f(ip, g.in, q);
            e.off = n * r * g.sout;
#pragma unroll
            for (int d = 0; d < 3; d++) e.c[d] = (int)(q[d] + g.pad[d]);
        }
        return e;
    }
    __device__ ent k(i64 kx) const {
        ent e = {};
        e.ok = kx < KR;
        if (e.ok) {
            i64 kap, a, kk[3];
            divmod(kx, r, kap, a);
            split3f(kap, g.k, kk);
            e.off = a * g.sout;
#pragma unroll
            for (int d = 0; d < 3; d++) e.c[d] = (int)(kk[d] * g.dil[d]);
        }
        return e;
    }
    __device__ float get(const ent &u, const ent &v) const {
        if (!(u.ok && v.ok)) return 0.0f;
        i64 op = 0;
#pragma unroll
        for (int d = 0; d < 3; d++) {
            const int t = u.c[d] - v.c[d];
            int o = t;
            if (t < 0) return 0.0f;
            if (g.st[d] != 1) {
                const int st = (int)g.st[d];
                o = t / st;
                if (t - o * st != 0) return 0.0f;
            }
            if (o >= (int)g.out[d]) return 0.0f;
            op = op * g.out[d] + o;
        }
        return gh[u.off + v.off + op];
    }
};

/* shared bytes of a tile product: NPA + NPB operand parts, or the fp32 output staging tile */
template <typename CT, int NPA, int NPB> struct tc_cfg {
    static const int OPB = (NPA * BM + NPB * BN) * LDS * (int)sizeof(CT);
    static const int STG = BM * (BN + 1) * 4;
    static const int BYTES = OPB > STG ? OPB : STG;
};

__device__ __forceinline__ int tc_wm() { return ((threadIdx.x >> 5) & 1) * 32; }
__device__ __forceinline__ int tc_wn() { return (threadIdx.x >> 6) * 16; }

/* element i (0..7) of this thread in a 64 × BK operand tile */
template <bool KF> __device__ __forceinline__ void tc_pos(int i, int &mm, int &kk) {
    if (KF) {
        kk = threadIdx.x & 31;
        mm = (threadIdx.x >> 5) + 8 * i;
    } else {
        mm = threadIdx.x & 63;
        kk = (threadIdx.x >> 6) + 4 * i;
    }
}

template <class LD> __device__ __forceinline__ ent k_ent(const LD &ld, i64 k, i64 ke) {
    ent e = ld.k(k);
    if (k >= ke) e.ok = 0;
    return e;
}

template <class LD> __device__ __forceinline__ void tc_fetch(const LD &ld, const ent *mt, const ent *kt, float (&v)[8]) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int mm, kk;
        tc_pos<LD::KF>(i, mm, kk);
        v[i] = ld.get(mt[mm], kt[kk]);
    }
}

/* registers → shared operand tile [row][k] in NP parts of CT */
template <typename CT, int NP, bool KF> __device__ __forceinline__ void tc_put(const float (&v)[8], CT *s) {
    CT *parts[3] = {s, s + BM * LDS, s + 2 * BM * LDS};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int mm, kk;
        tc_pos<KF>(i, mm, kk);
        store_parts<CT>(parts, NP, mm * LDS + kk, v[i]);
    }
}

/* acc = Σ_{k ∈ [kb, ke)} A(m0 + m, k) · B(n0 + n, k) over the 64×64 tile (fixed k order and part
   order: deterministic). sm: tc_cfg<CT, NPA, NPB>::BYTES of shared memory, free again on return
   (the routine ends with a barrier). Accumulators in common.cuh's layout at (tc_wm(), tc_wn()). */
template <typename CT, int NPA, int NPB, class LA, class LB>
__device__ __forceinline__ void tc_gemm(const LA &la, const LB &lb, i64 m0, i64 n0, i64 kb, i64 ke, char *sm,
                                        float (&acc)[2][2][4]) {
    __shared__ ent amt[BM], bmt[BN], akt[2][BK], bkt[2][BK];
    CT *sa = (CT *)sm, *sb = sa + NPA * BM * LDS;
    const int tid = threadIdx.x, wm = tc_wm(), wn = tc_wn();
    const i64 nk = ke > kb ? cdiv(ke - kb, BK) : 0;
    acc_zero<2, 2>(acc);
    if (nk == 0) return;
    if (tid < 64) amt[tid] = la.m(m0 + tid);
    else if (tid < 128) bmt[tid - 64] = lb.m(n0 + tid - 64);
    else if (tid < 160) akt[0][tid - 128] = k_ent(la, kb + tid - 128, ke);
    else if (tid < 192) bkt[0][tid - 160] = k_ent(lb, kb + tid - 160, ke);
    else if (tid < 224) akt[1][tid - 192] = k_ent(la, kb + BK + tid - 192, ke);
    else bkt[1][tid - 224] = k_ent(lb, kb + BK + tid - 224, ke);
    __syncthreads();
    float va[8], vb[8];
    tc_fetch(la, amt, akt[0], va);
    tc_fetch(lb, bmt, bkt[0], vb);
    tc_put<CT, NPA, LA::KF>(va, sa);
    tc_put<CT, NPB, LB::KF>(vb, sb);
    for (i64 s = 0; s < nk; s++) {
        __syncthreads();
        const bool more = s + 1 < nk;
        if (more) {
            tc_fetch(la, amt, akt[(s + 1) & 1], va);
            tc_fetch(lb, bmt, bkt[(s + 1) & 1], vb);
        }
#pragma unroll
        for (int p = NPA - 1; p >= 0; p--) warp_mma<CT, 2, 2, false, false>::run(acc, sa + p * BM * LDS, LDS, sb, LDS, wm, wn, BK);
#pragma unroll
        for (int p = NPB - 1; p >= 1; p--) warp_mma<CT, 2, 2, false, false>::run(acc, sa, LDS, sb + p * BN * LDS, LDS, wm, wn, BK);
        if (s + 2 < nk && tid < 64) {   /* tables of step s + 2 (their buffer's last readers are done) */
            const i64 k = kb + (s + 2) * BK + (tid & 31);
            if (tid < 32) akt[s & 1][tid] = k_ent(la, k, ke);
            else bkt[s & 1][tid - 32] = k_ent(lb, k, ke);
        }
        __syncthreads();
        if (more) {
            tc_put<CT, NPA, LA::KF>(va, sa);
            tc_put<CT, NPB, LB::KF>(vb, sb);
        }
    }
}

/* accumulators → fp32 staging tile Cs[row·(BN+1) + col] (aliases the operand memory), barrier */
__device__ __forceinline__ float *tc_stage(const float (&acc)[2][2][4], char *sm) {
    float *Cs = (float *)sm;
    acc_to_smem<2, 2>(acc, Cs, BN + 1, tc_wm(), tc_wn(), NULL);
    __syncthreads();
    return Cs;
}

/* staging tile rows this thread writes (column threadIdx.x % 64, rows threadIdx.x / 64 + 4·i) */
__device__ __forceinline__ int st_col() { return threadIdx.x & 63; }
__device__ __forceinline__ int st_row(int i) { return (threadIdx.x >> 6) + 4 * i; }

} // namespace

/* H[n][a][p] = RN_CT(q_a · Σ_j P[a,j]·im2col(x)[j,t]) (Z = 1) or the fp32 partial of k range z
   (part[z][n][a][p]); grid (pixel tiles over all images, rank tiles, Z) */
template <typename CT, typename MT, int NPA, int NPB, typename HT>
__global__ __launch_bounds__(NT) void k_h_tc(lkc_conv C, lkc_act x, const float *P, HT *H, float *part, i64 kper) {
    __shared__ __align__(16) char sm[tc_cfg<MT, NPA, NPB>::BYTES];
    const lk_locon &L = C.L;
    const i64 S = C.g.sout, T = C.N * S, t0 = (i64)blockIdx.x * BN, a0 = (i64)blockIdx.y * BM;
    const i64 kb = (i64)blockIdx.z * kper, ke = kb + kper < L.IK ? kb + kper : L.IK;
    float acc[2][2][4];
    const ld_f32<true> la = {P, {L.r, 1, L.IK, 0}, {L.IK, 1, 1, 0}};
    const ld_i2c<CT, false> lb = {x, C.g, T, L.IK, L.K};
    tc_gemm<MT, NPA, NPB>(la, lb, a0, t0, kb, ke, sm, acc);
    const float *Cs = tc_stage(acc, sm);
    const i64 t = t0 + st_col();
    if (t >= T) return;
    i64 n, p;
    divmod(t, S, n, p);
    for (int i = 0; i < BM / 4; i++) {
        const i64 a = a0 + st_row(i);
        if (a >= L.r) break;
        const float v = Cs[st_row(i) * (BN + 1) + st_col()];
        const i64 hi = (n * L.r + a) * S + p;
        if (part) part[(i64)blockIdx.z * L.r * T + hi] = v;
        else h_put<HT>(H, hi, rnd_ct<CT>(vget(L.mask, a, 1.0f) * v));
    }
}

/* H[i] = hr_store of Σ_z part[z][i] (fixed order; HR_H: RN_CT(q_a · Σ)), i over N·r·pixels */
template <typename CT, typename HT>
__global__ __launch_bounds__(NT) void k_h_fin(lk_locon L, i64 S, i64 T, const float *part, int Z, HT *H, hr_epi e) {
    const i64 total = L.r * T;
    for (i64 i = (i64)blockIdx.x * NT + threadIdx.x; i < total; i += (i64)gridDim.x * NT) {
        float v = 0.0f;
        for (int z = 0; z < Z; z++) v += part[(i64)z * total + i];
        hr_store<CT, HT>(L, e, H, i, (i / S) % L.r, v);
    }
}

/* y = y0 + c·Ur·H (or c·Ur·H); grid (pixel tiles over all images, output-channel tiles) */
template <typename CT>
__global__ __launch_bounds__(NT) void k_y_tc(lkc_conv C, const float *Ur, const float *H, lkc_act y0, lkc_act y) {
    __shared__ __align__(16) char sm[tc_cfg<CT, 1, 1>::BYTES];
    const lk_locon &L = C.L;
    const i64 S = C.g.sout, T = C.N * S, t0 = (i64)blockIdx.x * BN, o0 = (i64)blockIdx.y * BM;
    float acc[2][2][4];
    const ld_f32<true> la = {Ur, {L.O, 1, L.r, 0}, {L.r, 1, 1, 0}};
    const ld_f32<false> lb = {H, {T, S, L.r * S, 1}, {L.r, 1, S, 0}};
    tc_gemm<CT, 1, 1>(la, lb, o0, t0, 0, L.r, sm, acc);
    const float *Cs = tc_stage(acc, sm);
    const i64 t = t0 + st_col();
    if (t >= T) return;
    i64 n, p, q[3];
    divmod(t, S, n, p);
    split3f(p, C.g.out, q);
    const i64 oy = n * y.sn + q[0] * y.ss[0] + q[1] * y.ss[1] + q[2] * y.ss[2];
    const i64 oy0 = n * y0.sn + q[0] * y0.ss[0] + q[1] * y0.ss[1] + q[2] * y0.ss[2];
    const float c = scale_c<CT>(L);
    for (int i = 0; i < BM / 4; i++) {
        const i64 o = o0 + st_row(i);
        if (o >= L.O) break;
        const float v = Cs[st_row(i) * (BN + 1) + st_col()];
        const float r = y0.p ? fmaf(c, v, rnd_ct<CT>(act_at(y0, oy0 + o * y0.sc))) : c * v;
        st_elem((char *)y.p + (oy + o * y.sc) * (i64)dt_size(y.dt), y.dt, y.unal, r);
    }
}

/* GH[n][a][p] = c·q_a·Σ_o Ur[o,a]·RN_CT(dy[n,o,p]); grid (pixel tiles over all images, rank tiles) */
template <typename CT> __global__ __launch_bounds__(NT) void k_gh_tc(lkc_conv C, lkc_act dy, const float *Ur, float *GH) {
    __shared__ __align__(16) char sm[tc_cfg<CT, 1, 1>::BYTES];
    const lk_locon &L = C.L;
    const i64 S = C.g.sout, T = C.N * S, t0 = (i64)blockIdx.x * BN, a0 = (i64)blockIdx.y * BM;
    float acc[2][2][4];
    const ld_f32<false> la = {Ur, {L.r, 1, 1, 0}, {L.O, 1, L.r, 0}};
    const ld_actv<CT, false> lb = {dy, C.g, L.O, T};
    tc_gemm<CT, 1, 1>(la, lb, a0, t0, 0, L.O, sm, acc);
    const float *Cs = tc_stage(acc, sm);
    const i64 t = t0 + st_col();
    if (t >= T) return;
    i64 n, p;
    divmod(t, S, n, p);
    const float c = scale_c<CT>(L);
    for (int i = 0; i < BM / 4; i++) {
        const i64 a = a0 + st_row(i);
        if (a >= L.r) break;
        GH[(n * L.r + a) * S + p] = rnd_ct<CT>(c * vget(L.mask, a, 1.0f) * Cs[st_row(i) * (BN + 1) + st_col()]); /* as eager (§1.6) */
    }
}

/* dx[n,ch,ip] = Σ_{κ,a} P[a, ch·K+κ]·GH[n,a,op(ip,κ)] (col2im as a gathered product, no atomics);
   grid (input-pixel tiles over all images, channel tiles) */
template <typename CT, typename MT, int NPA, int NPB>
__global__ __launch_bounds__(NT) void k_dx_tc(lkc_conv C, const float *P, const float *GH, lkc_act dx) {
    __shared__ __align__(16) char sm[tc_cfg<MT, NPA, NPB>::BYTES];
    const lk_locon &L = C.L;
    const i64 U = C.N * C.g.sin, u0 = (i64)blockIdx.x * BN, c0 = (i64)blockIdx.y * BM;
    float acc[2][2][4];
    const ld_f32<false> la = {P, {C.I, 1, L.K, 0}, {L.K * L.r, L.r, 1, L.IK}};
    const ld_c2i lb = {GH, C.g, L.r, U, L.K * L.r};
    tc_gemm<MT, NPA, NPB>(la, lb, c0, u0, 0, L.K * L.r, sm, acc);
    const float *Cs = tc_stage(acc, sm);
    const i64 u = u0 + st_col();
    if (u >= U) return;
    i64 n, ip, q[3];
    divmod(u, C.g.sin, n, ip);
    split3f(ip, C.g.in, q);
    const i64 ox = n * dx.sn + q[0] * dx.ss[0] + q[1] * dx.ss[1] + q[2] * dx.ss[2];
    for (int i = 0; i < BM / 4; i++) {
        const i64 ch = c0 + st_row(i);
        if (ch >= C.I) break;
        st_elem((char *)dx.p + (ox + ch * dx.sc) * (i64)dt_size(dx.dt), dx.dt, dx.unal, Cs[st_row(i) * (BN + 1) + st_col()]);
    }
}

/* dy0 = RN(RN_CT(dy)), or 0 (DELTA_ONLY): thread = pixel t over all images (decomposed once), a run of
   och channels each; grid (pixel blocks, channel runs) */
template <typename CT> __global__ __launch_bounds__(NT) void k_dy0_tc(lkc_conv C, lkc_act dy, lkc_act dy0, int zero, i64 och) {
    const i64 S = C.g.sout, T = C.N * S, t = (i64)blockIdx.x * NT + threadIdx.x;
    if (t >= T) return;
    i64 n, p, q[3];
    divmod(t, S, n, p);
    split3f(p, C.g.out, q);
    const i64 oa = n * dy.sn + q[0] * dy.ss[0] + q[1] * dy.ss[1] + q[2] * dy.ss[2];
    const i64 ob = n * dy0.sn + q[0] * dy0.ss[0] + q[1] * dy0.ss[1] + q[2] * dy0.ss[2];
    const i64 o0 = (i64)blockIdx.y * och, o1 = o0 + och < C.L.O ? o0 + och : C.L.O;
    for (i64 o = o0; o < o1; o++) {
        const float v = zero ? 0.0f : rnd_ct<CT>(act_at(dy, oa + o * dy.sc));
        st_elem((char *)dy0.p + (ob + o * dy0.sc) * (i64)dt_size(dy0.dt), dy0.dt, dy0.unal, v);
    }
}

/* partials of Σ_t RN_CT(dy[o,t])·H[a,t]: part[z][o][a]; grid (rank tiles, channel tiles, Z) */
template <typename CT>
__global__ __launch_bounds__(NT) void k_red_dup_tc(lkc_conv C, lkc_act dy, const float *H, float *part, i64 kper) {
    __shared__ __align__(16) char sm[tc_cfg<CT, 1, 1>::BYTES];
    const lk_locon &L = C.L;
    const i64 S = C.g.sout, T = C.N * S, a0 = (i64)blockIdx.x * BN, o0 = (i64)blockIdx.y * BM;
    const i64 kb = (i64)blockIdx.z * kper, ke = kb + kper < T ? kb + kper : T;
    float acc[2][2][4];
    const ld_actv<CT, true> la = {dy, C.g, L.O, T};
    const ld_f32<true> lb = {H, {L.r, 1, S, 0}, {T, S, L.r * S, 1}};
    tc_gemm<CT, 1, 1>(la, lb, o0, a0, kb, ke, sm, acc);
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 2; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const i64 o = o0 + acc_row(tc_wm(), mi, e), a = a0 + acc_col(tc_wn(), ni, e);
                if (o < L.O && a < L.r) part[((i64)blockIdx.z * L.O + o) * L.r + a] = acc[mi][ni][e];
            }
}

/* partials of G_P[a,j] = Σ_t GH[a,t]·im2col(x)[t,j]: part[z][a][j]; grid (column tiles, rank tiles, Z) */
template <typename CT>
__global__ __launch_bounds__(NT) void k_red_dp_tc(lkc_conv C, lkc_act x, const float *GH, float *part, i64 kper) {
    typedef typename wide<CT>::MT MT;
    const int NPA = wide<CT>::nf, NPB = wide<CT>::nx;
    __shared__ __align__(16) char sm[tc_cfg<MT, NPA, NPB>::BYTES];
    const lk_locon &L = C.L;
    const i64 S = C.g.sout, T = C.N * S, j0 = (i64)blockIdx.x * BN, a0 = (i64)blockIdx.y * BM;
    const i64 kb = (i64)blockIdx.z * kper, ke = kb + kper < T ? kb + kper : T;
    float acc[2][2][4];
    const ld_f32<true> la = {GH, {L.r, 1, S, 0}, {T, S, L.r * S, 1}};
    const ld_i2c<CT, true> lb = {x, C.g, T, L.IK, L.K};
    tc_gemm<MT, NPA, NPB>(la, lb, a0, j0, kb, ke, sm, acc);
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 2; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const i64 a = a0 + acc_row(tc_wm(), mi, e), j = j0 + acc_col(tc_wn(), ni, e);
                if (a < L.r && j < L.IK) part[((i64)blockIdx.z * L.r + a) * L.IK + j] = acc[mi][ni][e];
            }
}

/* =============================================================================================
 * halo path for H = P·im2col(x) (default where it applies; LYCO_CUDA_CONV_TC1=1 selects the
 * tile-routine gather k_h_tc above at every shape, for A/B runs).
 *
 * Applies to plain LoCon (P = RN_CT(D), exact in CT), CT = bf16 / fp16, spatial dims 0-1 only
 * (dim 2 of size 1; 1-D convs too), stride 1, dilation 1, kernel ≤ 3 × 3 (HX_KMAX), any padding,
 * any activation strides / alignment / dtype. Round 1's k_h_tc spent its time in the per-element
 * gather (table reads, bound checks, i64 offset math, a scalar load and a shared store per element
 * of the K·C × pixels operand: every x element fetched K times); here each x element of a block's
 * halo is fetched once per block.
 * Block: an output tile of HX_TH × HX_TW = 8 × 16 pixels of one image (warp w owns output row w:
 * n = 16, two n8 MMA tiles) × RT = 16·MI ranks (MI = 1 for r ≤ 16, else 2; rank tiles in grid.y),
 * k consumed as chunks of HX_CC = 16 channels (a Z range of chunks per grid.z, fp32 partials and
 * the fixed-order k_h_fin when Z > 1). Per chunk:
 *   halo  xs[hp][c] (CT, pitch HX_XP = 24): thread hp < (8+kh−1)·(16+kw−1) ≤ 180 loads its halo
 *         pixel's 16 channels (scalar loads, coalesced along the pixel row; zero outside the image
 *         and for channels ≥ I) and stores them as two 16-byte shared stores;
 *   A     as[a][κ·16 + c] (CT, pitch HX_AP = 152) = Pk[a0+a][κ][c0+c], a CT copy of P in that
 *         order (k_prep_pk, channels padded to a multiple of 16 with zeros), 16-byte loads;
 *   then for each kernel offset κ = (dh, dw) one k16 MMA step per warp: B fragment = 32-bit
 *         reads of xs at halo pixel (w+dh, col+dw), A fragment = 32-bit reads of as (both pitches
 *         ≡ 4·odd words mod 32: conflict-free). Next chunk's loads are in registers during the
 *         current chunk's MMAs.
 * Extra memory: Pk (r·K·Ipad CT) + the Z partials (Z·r·N·pixels fp32, Z > 1). Shared memory
 * 18.4 KB static.
 * =========================================================================================== */
#define HX_TH 8     /* output tile rows: one per warp */
#define HX_TW 16    /* output tile columns: one warp's n */
#define HX_CC 16    /* channels per chunk: one k16 step per kernel offset */
#define HX_KMAX 3   /* kernel extent per dim */
#define HX_HP_MAX ((HX_TH + HX_KMAX - 1) * (HX_TW + HX_KMAX - 1))   /* 180 ≤ NT */
#define HX_XP 24                                                   /* halo pitch (elements) */
#define HX_AP (HX_CC * HX_KMAX * HX_KMAX + 8)                      /* A pitch (elements): 152 */

namespace {

/* Pk[a][κ][c] = CT(P[a, c·K+κ]) for c < I, 0 for I ≤ c < Ipad */
/* where Pk's (a, κ, c) comes from: src[base + a·sa + c·sc + κ·sk] (H: P itself, base 0, sa = I·K,
   sc = K, sk = 1; the backward's GH and dx read Ur and P transposed / flipped through k_h_rows);
   p = NULL: RN_CT(down[a][c·K + κ]) read from C.L.D — plain LoCon's P itself, so the forward
   skips k_prep_p (the same bits: CT(RN_CT(d)) = RN_CT(d)) */
struct pk_src {
    const float *p;
    i64 base, sa, sc, sk;
};
template <typename CT> __global__ __launch_bounds__(NT) void k_prep_pk(lkc_conv C, pk_src P, i64 Ipad, CT *Pk) {
    const lk_locon &L = C.L;
    const i64 total = L.r * L.K * Ipad;
    for (i64 i = (i64)blockIdx.x * NT + threadIdx.x; i < total; i += (i64)gridDim.x * NT) {
        const i64 c = i % Ipad, ak = i / Ipad, kap = ak % L.K, a = ak / L.K;
        const float v = c >= C.I ? 0.0f : P.p ? P.p[P.base + a * P.sa + c * P.sc + kap * P.sk] : rnd_ct<CT>(vload(L.D, a, c * L.K + kap));
        Pk[i] = ct_of<CT>::from(v);
    }
}

template <typename CT> __device__ __forceinline__ unsigned hx_pack(float lo, float hi) {
    return (unsigned)ct_bits<CT>(ct_of<CT>::from(lo)) | ((unsigned)ct_bits<CT>(ct_of<CT>::from(hi)) << 16);
}

/* what a block needs to fetch a chunk */
struct hx_src {
    lkc_act x;
    i64 xoff;       /* this thread's halo pixel (n, ih, iw) without the channel term */
    bool hin;       /* the thread has a halo pixel inside the image */
    i64 I, Ipad, r, a0;
    int K;
};

/* this thread's halo pixel of the output tile at (n, oh0, ow0): xoff / hin */
__device__ __forceinline__ void hx_pixel(hx_src &s, const lkc_geom &g, i64 n, int oh0, int ow0, int HW, int hp_n) {
    const int hr = (int)threadIdx.x / HW, hc = (int)threadIdx.x - hr * HW;
    const int ih = oh0 - (int)g.pad[0] + hr, iw = ow0 - (int)g.pad[1] + hc;
    s.hin = (int)threadIdx.x < hp_n && ih >= 0 && ih < (int)g.in[0] && iw >= 0 && iw < (int)g.in[1];
    s.xoff = n * s.x.sn + (s.hin ? (i64)ih * s.x.ss[0] + (i64)iw * s.x.ss[1] : 0);
}

/* (oh0, ow0, n) of output tile q (q over N · row tiles · column tiles, column tiles fastest) */
__device__ __forceinline__ void hx_tile(const lkc_geom &g, i64 q, i64 &n, int &oh0, int &ow0) {
    const i64 tw = cdiv(g.out[1], HX_TW), th = cdiv(g.out[0], HX_TH);
    ow0 = (int)(q % tw) * HX_TW;
    q /= tw;
    oh0 = (int)(q % th) * HX_TH;
    n = q / th;
}

/* the halo pixel's HX_CC channels from c0 (0 outside the image and for channels ≥ I) */
__device__ __forceinline__ void hx_fetch_x(const hx_src &s, i64 c0, float (&xv)[HX_CC]) {
#pragma unroll
    for (int c = 0; c < HX_CC; c++) xv[c] = s.hin && c0 + c < s.I ? act_at(s.x, s.xoff + (c0 + c) * s.x.sc) : 0.0f;
}

/* → xs[hp][0..15] (threads hp < hp_n), two 16-byte stores */
template <typename CT> __device__ __forceinline__ void hx_put_x(int hp_n, const float (&xv)[HX_CC], CT *xs) {
    if ((int)threadIdx.x >= hp_n) return;
    uint4 w0, w1;
    w0.x = hx_pack<CT>(xv[0], xv[1]);
    w0.y = hx_pack<CT>(xv[2], xv[3]);
    w0.z = hx_pack<CT>(xv[4], xv[5]);
    w0.w = hx_pack<CT>(xv[6], xv[7]);
    w1.x = hx_pack<CT>(xv[8], xv[9]);
    w1.y = hx_pack<CT>(xv[10], xv[11]);
    w1.z = hx_pack<CT>(xv[12], xv[13]);
    w1.w = hx_pack<CT>(xv[14], xv[15]);
    *(uint4 *)(xs + threadIdx.x * HX_XP) = w0;
    *(uint4 *)(xs + threadIdx.x * HX_XP + 8) = w1;
}

/* the A chunk Pk[a0 + a][κ][c0 .. c0+15] as 16-byte pieces u = (a·K + κ)·2 + half (0 for a0 + a ≥ r) */
template <typename CT, int RT, int NA>
__device__ __forceinline__ void hx_fetch_a(const hx_src &s, const CT *Pk, i64 c0, uint4 (&av)[NA]) {
    const int na = RT * s.K * 2;
#pragma unroll
    for (int i = 0; i < NA; i++) {
        const int u = (int)threadIdx.x + i * NT;
        av[i] = make_uint4(0u, 0u, 0u, 0u);
        if (u < na) {
            const int a = u / (2 * s.K), rem = u - a * 2 * s.K;
            if (s.a0 + a < s.r) av[i] = *(const uint4 *)(Pk + ((s.a0 + a) * s.K + (rem >> 1)) * s.Ipad + c0 + (rem & 1) * 8);
        }
    }
}

/* → as[a][κ·16 + c] */
template <typename CT, int RT, int NA> __device__ __forceinline__ void hx_put_a(const hx_src &s, const uint4 (&av)[NA], CT *as) {
    const int na = RT * s.K * 2;
#pragma unroll
    for (int i = 0; i < NA; i++) {
        const int u = (int)threadIdx.x + i * NT;
        if (u < na) {
            const int a = u / (2 * s.K), rem = u - a * 2 * s.K;
            *(uint4 *)(as + a * HX_AP + (rem >> 1) * HX_CC + (rem & 1) * 8) = av[i];
        }
    }
}

/* acc += the chunk in shared memory: warp w, output row w, kernel offsets (dh, dw). K3: a 3 × 3
   kernel known at compile time — the loops unroll, so the shared-memory fragments of later offsets
   are loaded while earlier offsets' MMAs run (the generic loop waits on each load: ncu, session 22) */
template <typename CT, int MI, bool K3>
__device__ __forceinline__ void hx_mma(const CT *xs, const CT *as, int kh_rt, int kw_rt, int HW, float (&acc)[MI][2][4]) {
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
    const int kh = K3 ? 3 : kh_rt, kw = K3 ? 3 : kw_rt;
#pragma unroll(K3 ? 3 : 1)
    for (int dh = 0; dh < kh; dh++)
#pragma unroll(K3 ? 3 : 1)
        for (int dw = 0; dw < kw; dw++) {
            const int kap = dh * kw + dw;
            unsigned b[2][2];
#pragma unroll
            for (int ni = 0; ni < 2; ni++) {
                const CT *bp = xs + ((w + dh) * HW + ni * 8 + gq + dw) * HX_XP + 2 * t;
                b[ni][0] = *(const unsigned *)bp;
                b[ni][1] = *(const unsigned *)(bp + 8);
            }
#pragma unroll
            for (int mi = 0; mi < MI; mi++) {
                const CT *ap = as + (mi * 16 + gq) * HX_AP + kap * HX_CC + 2 * t;
                unsigned a[4];
                a[0] = *(const unsigned *)ap;
                a[1] = *(const unsigned *)(ap + 8 * HX_AP);
                a[2] = *(const unsigned *)(ap + 8);
                a[3] = *(const unsigned *)(ap + 8 * HX_AP + 8);
#pragma unroll
                for (int ni = 0; ni < 2; ni++) mma16816<CT>(acc[mi][ni], a, b[ni]);
            }
        }
}

} // namespace

/* H (Z = 1) or the partials of channel-chunk range z (Z > 1), as k_h_tc; grid (N · row tiles ·
   column tiles, rank tiles of 16·MI, Z); kc chunks of HX_CC channels per z */
template <typename CT, int MI, bool K3, typename HT>
__global__ __launch_bounds__(NT) void k_h_halo(lkc_conv C, lkc_act x, const CT *Pk, i64 Ipad, HT *H, float *part, i64 kc) {
    const int RT = 16 * MI, NA = (RT * HX_KMAX * HX_KMAX * 2 + NT - 1) / NT;
    __shared__ __align__(16) CT xs[HX_HP_MAX * HX_XP];
    __shared__ __align__(16) CT as[RT * HX_AP];
    const lk_locon &L = C.L;
    const lkc_geom &g = C.g;
    const int kh = K3 ? 3 : (int)g.k[0], kw = K3 ? 3 : (int)g.k[1], HW = HX_TW + kw - 1, hp_n = (HX_TH + kh - 1) * HW;
    const int OH = (int)g.out[0], OW = (int)g.out[1];
    const i64 S = g.sout, T = C.N * S;
    i64 n;
    int oh0, ow0;
    hx_tile(g, blockIdx.x, n, oh0, ow0);
    const i64 NC = Ipad / HX_CC, cb = (i64)blockIdx.z * kc, ce = cb + kc < NC ? cb + kc : NC;
    hx_src s;
    s.x = x;
    s.I = C.I;
    s.Ipad = Ipad;
    s.r = L.r;
    s.a0 = (i64)blockIdx.y * RT;
    s.K = (int)L.K;
    hx_pixel(s, g, n, oh0, ow0, HW, hp_n);
    float acc[MI][2][4], xv[HX_CC];
    uint4 av[NA];
    acc_zero<MI, 2>(acc);
    if (cb < ce) {
        hx_fetch_x(s, cb * HX_CC, xv);
        hx_fetch_a<CT, RT, NA>(s, Pk, cb * HX_CC, av);
        hx_put_x<CT>(hp_n, xv, xs);
        hx_put_a<CT, RT, NA>(s, av, as);
        __syncthreads();
        for (i64 ch = cb; ch < ce; ch++) {
            const bool more = ch + 1 < ce;
            if (more) {
                hx_fetch_x(s, (ch + 1) * HX_CC, xv);
                hx_fetch_a<CT, RT, NA>(s, Pk, (ch + 1) * HX_CC, av);
            }
            hx_mma<CT, MI, K3>(xs, as, kh, kw, HW, acc);
            __syncthreads();
            if (more) {
                hx_put_x<CT>(hp_n, xv, xs);
                hx_put_a<CT, RT, NA>(s, av, as);
            }
            __syncthreads();
        }
    }
    const int oh = oh0 + (int)(threadIdx.x >> 5);
    if (oh >= OH) return;
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < 2; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const i64 a = s.a0 + acc_row(0, mi, e);
                const int ow = ow0 + acc_col(0, ni, e);
                if (a >= L.r || ow >= OW) continue;
                const i64 hi = (n * L.r + a) * S + (i64)oh * OW + ow;
                if (part) part[(i64)blockIdx.z * L.r * T + hi] = acc[mi][ni][e];
                else h_put<HT>(H, hi, rnd_ct<CT>(vget(L.mask, a, 1.0f) * acc[mi][ni][e]));
            }
}

/* =============================================================================================
 * row-tile path for H = RN_CT(q ⊙ P·im2col(x)) (default where it applies; LYCO_CUDA_CONV_HROWS=0
 * restores k_h_halo there, for A/B):
 * Geometry: 2-D conv, stride 1, dilation 1, kernel ≤ 3 × 3, output width OW a multiple of 8 and
 * at most HR_PIX, input width a multiple of 8; x in CT (16-bit), 16-byte aligned, rows contiguous
 * (ss[1] = 1; sn, sc, ss[0] multiples of 8 elements); plain LoCon (Pk as k_h_halo's).
 * Block: HR_PIX = 256 consecutive output pixels of one image in raster order (every n8 tile lies
 * in one output row since OW % 8 == 0) × a rank tile RT = 16·MI; k in chunks of HX_CC = 16
 * channels (Z ranges of chunks per grid.z as k_h_halo, fp32 partials and k_h_fin when Z > 1).
 * Per chunk, in shared memory:
 *   xs[hr][hc][c]: the block's halo rows at full width (HWP ≥ W + 2·pad columns, HWP ≡ 2 mod 4),
 *     one 48-byte record of 16 channels per pixel (HX_XP = 24 elements: ldmatrix's eight rows of
 *     consecutive pixels are conflict-free). A task = channels (c, c+1) × 8 pixels of one row:
 *     two 16-byte loads, interleaved by prmt into 8 channel pairs, 8 shared stores of 32 bits
 *     (lanes = 8 channel pairs × 4 rows: the row pitch HWP·12 words ≡ 8 or 24 mod 32 keeps them
 *     conflict-free); the padding columns are zeroed once per block (never written again), rows
 *     outside the image are left at zero, channels ≥ I stored as zeros;
 *   as[a][κ·16 + c] (pitch HX_AP) = Pk[a0+a][κ][c0+c] by cp.async.
 * Warp w owns pixels 32w … 32w+31 (four n8 tiles): per kernel offset κ = (dh, dw) one A fragment
 * per m16 tile and two B fragment pairs by ldmatrix.x4 (B rows: the pixels' records shifted by
 * dh rows and dw columns), 4·MI MMAs. Two buffers: chunk k+1's x is in registers and its A in
 * flight (cp.async) while chunk k's MMAs run; one __syncthreads per chunk.
 * The k order (chunks ascending; within a chunk κ, then 16 channels in one MMA) is k_h_halo's, so
 * H is the same bits for Z = 1 — the Z ranges differ (HR's grid has other tiles), so partial sums
 * may round differently.
 * Shared memory: 2 × (HRR·HWP·48 + RT·HX_AP·2) bytes (HRR = the most output rows 256 pixels
 * span + kh − 1): 57 KB at OW = 64, 3 × 3, RT = 32.
 * =========================================================================================== */
#define HR_PIX 256    /* output pixels per block */
/* blocks per multiprocessor an instance of k_h_rows is compiled for (its register cap: 65536 /
   (NT · blocks)): three for one rank tile (MI = 1) with two x tasks per thread (NL = 2) — 80
   registers without a spill, H 43.2 → 35.3 µs by ncu at 3×3 320 ch 128² n2 r16 (session 38) —,
   two otherwise: at three, the MI = 2 instances spill (3 × 3) or run slower (H 22.0 → 25.3 µs at
   640 ch 64² r32), and so did k_gp_rows (37.6 → 52.1), which keeps two */
#define HR_MINB(MI, NL) ((MI) == 1 && (NL) == 2 ? 3 : 2)

namespace {

/* the row-tile plan's shapes, shared by host and device */
struct hr_geo {
    int OW, OH, W, IH, kh, kw, ph, pw;
    int HWP;          /* halo row pitch in pixel records */
    int HRR;          /* halo rows a block may need */
    int tpi;          /* blocks per image */
};

/* x[n][c0 + 2cp + {0,1}][ih][8v … 8v+7] for this thread's tasks i (two uint4 each; 0 for rows
   outside the image, channels ≥ I and tasks beyond the block's) */
template <typename CT, int NL>
__device__ __forceinline__ void hr_fetch_x(const lkc_act &x, const hr_geo &g, i64 n, int ih0, int hrb, i64 c0, i64 I,
                                           uint4 (&xv)[NL][2]) {
    const int nv = g.W >> 3;
#pragma unroll
    for (int i = 0; i < NL; i++) {
        const int t = (int)threadIdx.x + i * NT, cp = t & 7, rest = t >> 5, v = rest % nv;
        const int hr = (rest / nv) * 4 + ((t >> 3) & 3), ih = ih0 + hr;
        const i64 c = c0 + 2 * cp;
        xv[i][0] = make_uint4(0u, 0u, 0u, 0u);
        xv[i][1] = make_uint4(0u, 0u, 0u, 0u);
        if (hr < hrb && ih >= 0 && ih < g.IH) {
            const CT *p = (const CT *)x.p + n * x.sn + c * x.sc + (i64)ih * x.ss[0] + 8 * v;
            if (c < I) xv[i][0] = *(const uint4 *)p;
            if (c + 1 < I) xv[i][1] = *(const uint4 *)(p + x.sc);
        }
    }
}

/* → xs: pixel 8v + j of halo row hr gets the channel pair (lo16 of a_j, lo16 of b_j) at word cp;
   rows outside the image or beyond hrb are skipped (they stay zero), or with ALL written as the
   zeros hr_fetch_x gave them (every row < HRR: the buffer held another tile's rows) */
template <int NL, bool ALL = false>
__device__ __forceinline__ void hr_put_x(const hr_geo &g, int ih0, int hrb, const uint4 (&xv)[NL][2], unsigned *xs) {
    const int nv = g.W >> 3;
#pragma unroll
    for (int i = 0; i < NL; i++) {
        const int t = (int)threadIdx.x + i * NT, cp = t & 7, rest = t >> 5, v = rest % nv;
        const int hr = (rest / nv) * 4 + ((t >> 3) & 3), ih = ih0 + hr;
        if (ALL ? hr >= g.HRR : (hr >= hrb || ih < 0 || ih >= g.IH)) continue; /* the row stays zero */
        unsigned *d = xs + (hr * g.HWP + g.pw + 8 * v) * (HX_XP / 2) + cp;
        const unsigned a[4] = {xv[i][0].x, xv[i][0].y, xv[i][0].z, xv[i][0].w};
        const unsigned b[4] = {xv[i][1].x, xv[i][1].y, xv[i][1].z, xv[i][1].w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            d[(2 * q) * (HX_XP / 2)] = __byte_perm(a[q], b[q], 0x5410);
            d[(2 * q + 1) * (HX_XP / 2)] = __byte_perm(a[q], b[q], 0x7632);
        }
    }
}

/* as[a][κ·16 + c] ← Pk[a0+a][κ][c0 .. c0+15] by cp.async (zeros for a0 + a ≥ r) */
template <typename CT, int RT>
__device__ __forceinline__ void hr_fetch_a(const CT *Pk, i64 Ipad, i64 r, i64 a0, int K, i64 c0, CT *as) {
    const int na = RT * K * 2;
    for (int u = (int)threadIdx.x; u < na; u += NT) {
        const int a = u / (2 * K), rem = u - a * 2 * K;
        const bool in = a0 + a < r;
        const CT *src = in ? Pk + ((a0 + a) * K + (rem >> 1)) * Ipad + c0 + (rem & 1) * 8 : Pk;
        cp_async16(as + a * HX_AP + (rem >> 1) * HX_CC + (rem & 1) * 8, src, in ? 16 : 0);
    }
    cp_commit();
}

/* acc += the chunk: warp w's four n8 tiles (records rec[0..1] of this lane's ldmatrix rows) */
template <typename CT, int MI, bool K3>
__device__ __forceinline__ void hr_mma(const CT *xs, const CT *as, const hr_geo &g, const int (&rec)[2], float (&acc)[MI][4][4]) {
    const int lane = threadIdx.x & 31;
    const int kh = K3 ? 3 : g.kh, kw = K3 ? 3 : g.kw;
    const int bh = ((lane >> 3) & 1) * 8;
#pragma unroll(K3 ? 3 : 1)
    for (int dh = 0; dh < kh; dh++)
#pragma unroll(K3 ? 3 : 1)
        for (int dw = 0; dw < kw; dw++) {
            const int kap = dh * kw + dw, sh = dh * g.HWP + dw;
            unsigned a[MI][4], b[4][2];
#pragma unroll
            for (int mi = 0; mi < MI; mi++) ldm4<false>(a[mi], as + (mi * 16 + (lane & 15)) * HX_AP + kap * HX_CC + (lane >> 4) * 8);
#pragma unroll
            for (int pr = 0; pr < 2; pr++) {
                unsigned q[4];
                ldm4<false>(q, xs + (rec[pr] + sh) * HX_XP + bh);
                b[2 * pr][0] = q[0];
                b[2 * pr][1] = q[1];
                b[2 * pr + 1][0] = q[2];
                b[2 * pr + 1][1] = q[3];
            }
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++) mma16816<CT>(acc[mi][ni], a[mi], b[ni]);
        }
}

} // namespace

/* H (Z = 1, HT = CT or float) or the partials of channel-chunk range z; grid (N · tpi, rank
   tiles of 16·MI, Z); kc chunks of HX_CC channels per z; dynamic shared memory as above */
template <typename CT, int MI, bool K3, int NL, typename HT>
__global__ __launch_bounds__(NT, HR_MINB(MI, NL)) void k_h_rows(lkc_conv C, lkc_act x, const CT *Pk, i64 Ipad, hr_geo g, HT *H, float *part,
                                                  i64 kc, hr_epi e) {
    const int RT = 16 * MI;
    extern __shared__ __align__(16) char hr_sm[];
    const int xs_elems = g.HRR * g.HWP * HX_XP, as_elems = RT * HX_AP;
    CT *xs0 = (CT *)hr_sm, *as0 = xs0 + 2 * xs_elems;
    const lk_locon &L = C.L;
    const i64 S = C.g.sout, T = C.N * S;
    const i64 n = blockIdx.x / g.tpi, p0 = (i64)(blockIdx.x % g.tpi) * HR_PIX;
    const i64 pl = p0 + HR_PIX - 1 < S ? p0 + HR_PIX - 1 : S - 1;
    const int oh0 = (int)(p0 / g.OW), hrb = (int)(pl / g.OW) - oh0 + g.kh, ih0 = oh0 - g.ph;
    const i64 NC = Ipad / HX_CC, cb = (i64)blockIdx.z * kc, ce = cb + kc < NC ? cb + kc : NC;
    const i64 a0 = (i64)blockIdx.y * RT;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    /* this lane's ldmatrix rows: n8 tile 2·pr + (lane >> 4) of the warp, pixel lane & 7; pixels
       past the image's end (their columns are never stored) read the last pixel's records: their
       own rows can lie past the buffer (HRR is capped at the image height), in the other buffer
       that the next chunk's stores are filling (racecheck, session 34) */
    int rec[2];
#pragma unroll
    for (int pr = 0; pr < 2; pr++) {
        int p = (int)p0 + 32 * w + 8 * (2 * pr + (lane >> 4)) + (lane & 7);
        if (p > (int)S - 1) p = (int)S - 1;
        rec[pr] = (p / g.OW - oh0) * g.HWP + p % g.OW;
    }
    /* both x buffers zeroed once: the padding columns and the rows outside the image stay so */
    for (int i = (int)threadIdx.x; i < 2 * xs_elems / 8; i += NT) ((uint4 *)xs0)[i] = make_uint4(0u, 0u, 0u, 0u);
    float acc[MI][4][4];
    acc_zero<MI, 4>(acc);
    uint4 xv[NL][2];
    __syncthreads();
    if (cb < ce) {
        hr_fetch_a<CT, RT>(Pk, Ipad, L.r, a0, (int)L.K, cb * HX_CC, as0);
        hr_fetch_x<CT, NL>(x, g, n, ih0, hrb, cb * HX_CC, C.I, xv);
        hr_put_x<NL>(g, ih0, hrb, xv, (unsigned *)xs0);
        cp_wait(0);
        __syncthreads();
        for (i64 ch = cb; ch < ce; ch++) {
            const int cur = (int)((ch - cb) & 1);
            CT *xs = xs0 + cur * xs_elems, *as = as0 + cur * as_elems;
            CT *xn = xs0 + (cur ^ 1) * xs_elems, *an = as0 + (cur ^ 1) * as_elems;
            const bool more = ch + 1 < ce;
            if (more) {
                hr_fetch_a<CT, RT>(Pk, Ipad, L.r, a0, (int)L.K, (ch + 1) * HX_CC, an);
                hr_fetch_x<CT, NL>(x, g, n, ih0, hrb, (ch + 1) * HX_CC, C.I, xv);
            }
            hr_mma<CT, MI, K3>(xs, as, g, rec, acc);
            if (more) {
                hr_put_x<NL>(g, ih0, hrb, xv, (unsigned *)xn);
                cp_wait(0);
            }
            __syncthreads();
        }
    }
    /* columns p, p + 1 of a row at once (p even; S is a multiple of 8) */
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int q = 0; q < 4; q += 2) {
                const i64 a = a0 + acc_row(0, mi, q), p = p0 + 32 * w + acc_col(0, ni, q);
                if (a >= L.r || p >= S) continue;
                const i64 hi = (n * L.r + a) * S + p;
                if (part) *(float2 *)(part + (i64)blockIdx.z * L.r * T + hi) = make_float2(acc[mi][ni][q], acc[mi][ni][q + 1]);
                else hr_store2<CT, HT>(L, e, H, hi, a, acc[mi][ni][q], acc[mi][ni][q + 1]);
            }
}

/* =============================================================================================
 * halo path for the G_P partials of the bypass backward (default where it applies;
 * LYCO_CUDA_CONV_TC1=1 selects k_red_dp_tc at every shape):
 *   part[z][a][c·K+κ] = Σ_{t in z's pixel tiles} GH[a,t]·RN_CT(x)[c, pix(t) + κ]
 * CT = bf16 only (fp16 keeps k_red_dp_tc: its x would need 2 bf16 parts), plain or Tucker (G_P
 * does not involve P), the geometries of k_h_halo. Block: rank tile RT = 16·MI (MI = 1 as launched: 128 registers, 2 blocks / SM) × a
 * chunk of HX_CC channels × all K kernel offsets; grid (channel chunks, rank tiles, Z ranges of kq output tiles of 8 × 16 pixels of one image). Per
 * pixel tile: the halo xs[hp][c] exactly as k_h_halo, GH's tile as bf16 gs[a][px] (one part:
 * k_gh_tc stores GH = RN_CT(c·q ⊙ Urᵀ·dy), exact in CT; until session 34 it went in 3 bf16 parts,
 * two of them always zero — the same sums, 3× the MMAs) (pitch HX_GP = 136 elements, ≡ 4 words mod 32: conflict-free; 0 outside the image, so the halo
 * values there, real x, never count); one k16 MMA step per tile row: A = GH parts [a][16 pixels
 * of the row], B(c, px) = channel c at halo pixels (hp, hp+1), two 16-bit shared reads (hp + dw
 * may be odd); warp w owns the kernel offsets κ = w and w + 8 (K ≤ 9). Partials as k_red_dp_tc
 * (every cell written by one block per z, zeros for an empty range); k_fin_dp sums them.
 * Shared memory 13.0 KB static (MI = 1).
 * =========================================================================================== */
#define HX_GP (HX_TH * HX_TW + 8)

namespace {

/* GH[n][a0+a][(oh0+ρ)·OW + ow0+col] for this thread's elements e = tid + i·NT (a = e / 128,
   px = e % 128 = ρ·16 + col); 0 outside the image and for a0 + a ≥ r */
template <int NG>
__device__ __forceinline__ void gp_fetch_gh(const float *GH, const lkc_conv &C, i64 n, int oh0, int ow0, i64 a0, float (&gv)[NG]) {
    const int OH = (int)C.g.out[0], OW = (int)C.g.out[1];
#pragma unroll
    for (int i = 0; i < NG; i++) {
        const int e = (int)threadIdx.x + i * NT, a = e >> 7, px = e & 127;
        const int oh = oh0 + (px >> 4), ow = ow0 + (px & 15);
        gv[i] = a0 + a < C.L.r && oh < OH && ow < OW ? GH[(n * C.L.r + a0 + a) * C.g.sout + (i64)oh * OW + ow] : 0.0f;
    }
}

template <typename CT, int NG> __device__ __forceinline__ void gp_put_gh(const float (&gv)[NG], CT *gs) {
#pragma unroll
    for (int i = 0; i < NG; i++) {
        const int e = (int)threadIdx.x + i * NT;
        gs[(e >> 7) * HX_GP + (e & 127)] = ct_of<CT>::from(gv[i]);   /* exact: GH is RN_CT already */
    }
}

/* acc[u] += the tile in shared memory for κ = w + 8u */
template <typename CT, int MI>
__device__ __forceinline__ void gp_mma(const CT *xs, const CT *gs, int kh, int kw, int HW, float (&acc)[2][MI][2][4]) {
    const int K = kh * kw;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
    const unsigned short *xu = (const unsigned short *)xs;
#pragma unroll 1
    for (int rho = 0; rho < HX_TH; rho++) {
        unsigned b[2][2][2];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int kap = w + 8 * u, dh = kap < K ? kap / kw : 0, dw = kap < K ? kap - dh * kw : 0;
#pragma unroll
            for (int ni = 0; ni < 2; ni++) {
                const int c = ni * 8 + gq, hp = (rho + dh) * HW + 2 * t + dw;
                b[u][ni][0] = (unsigned)xu[hp * HX_XP + c] | ((unsigned)xu[(hp + 1) * HX_XP + c] << 16);
                b[u][ni][1] = (unsigned)xu[(hp + 8) * HX_XP + c] | ((unsigned)xu[(hp + 9) * HX_XP + c] << 16);
            }
        }
        {
            unsigned a[MI][4];
#pragma unroll
            for (int mi = 0; mi < MI; mi++) {
                const CT *ap = gs + (mi * 16 + gq) * HX_GP + rho * HX_TW + 2 * t;
                a[mi][0] = *(const unsigned *)ap;
                a[mi][1] = *(const unsigned *)(ap + 8 * HX_GP);
                a[mi][2] = *(const unsigned *)(ap + 8);
                a[mi][3] = *(const unsigned *)(ap + 8 * HX_GP + 8);
            }
#pragma unroll
            for (int u = 0; u < 2; u++) {
                if (w + 8 * u >= K) continue;
#pragma unroll
                for (int mi = 0; mi < MI; mi++)
#pragma unroll
                    for (int ni = 0; ni < 2; ni++) mma16816<CT>(acc[u][mi][ni], a[mi], b[u][ni]);
            }
        }
    }
}

} // namespace

template <typename CT, int MI>
__global__ __launch_bounds__(NT, 2) void k_gp_halo(lkc_conv C, lkc_act x, const float *GH, float *part, i64 kq) {
    const int RT = 16 * MI, NG = RT * HX_TH * HX_TW / NT;
    __shared__ __align__(16) CT xs[HX_HP_MAX * HX_XP];
    __shared__ __align__(16) CT gs[RT * HX_GP];
    const lk_locon &L = C.L;
    const lkc_geom &g = C.g;
    const int kh = (int)g.k[0], kw = (int)g.k[1], K = kh * kw, HW = HX_TW + kw - 1, hp_n = (HX_TH + kh - 1) * HW;
    const i64 ntile = C.N * cdiv(g.out[0], HX_TH) * cdiv(g.out[1], HX_TW);
    const i64 c0 = (i64)blockIdx.x * HX_CC, qb = (i64)blockIdx.z * kq, qe = qb + kq < ntile ? qb + kq : ntile;
    hx_src s;
    s.x = x;
    s.I = C.I;
    s.Ipad = 0;
    s.r = L.r;
    s.a0 = (i64)blockIdx.y * RT;
    s.K = K;
    float acc[2][MI][2][4], xv[HX_CC], gv[NG];
#pragma unroll
    for (int u = 0; u < 2; u++) acc_zero<MI, 2>(acc[u]);
    if (qb < qe) {
        i64 n;
        int oh0, ow0;
        hx_tile(g, qb, n, oh0, ow0);
        hx_pixel(s, g, n, oh0, ow0, HW, hp_n);
        hx_fetch_x(s, c0, xv);
        gp_fetch_gh<NG>(GH, C, n, oh0, ow0, s.a0, gv);
        hx_put_x<CT>(hp_n, xv, xs);
        gp_put_gh<CT, NG>(gv, gs);
        __syncthreads();
        for (i64 q = qb; q < qe; q++) {
            const bool more = q + 1 < qe;
            if (more) {
                hx_tile(g, q + 1, n, oh0, ow0);
                hx_pixel(s, g, n, oh0, ow0, HW, hp_n);
                hx_fetch_x(s, c0, xv);
                gp_fetch_gh<NG>(GH, C, n, oh0, ow0, s.a0, gv);
            }
            gp_mma<CT, MI>(xs, gs, kh, kw, HW, acc);
            __syncthreads();
            if (more) {
                hx_put_x<CT>(hp_n, xv, xs);
                gp_put_gh<CT, NG>(gv, gs);
            }
            __syncthreads();
        }
    }
    const int w = threadIdx.x >> 5;
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int kap = w + 8 * u;
        if (kap >= K) continue;
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int ni = 0; ni < 2; ni++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const i64 a = s.a0 + acc_row(0, mi, e), c = c0 + acc_col(0, ni, e);
                    if (a < L.r && c < C.I) part[((i64)blockIdx.z * L.r + a) * L.IK + c * K + kap] = acc[u][mi][ni][e];
                }
    }
}

/* =============================================================================================
 * row-tile path for the G_P partials of the bypass backward (default where k_h_rows takes H and
 * GH; LYCO_CUDA_CONV_HROWS=0 restores k_gp_halo / k_red_dp_tc):
 *   part[z][a][c·K+κ] = Σ_{p in z's pixel tiles} GH[a,p]·RN_CT(x)[c, p shifted by κ]
 * The geometries of k_h_rows (x 16-bit with 16-byte rows, OW and W multiples of 8, stride 1,
 * kernel ≤ 3 × 3), plain or Tucker (G_P does not involve P), CT bf16 or fp16: GH enters as its CT
 * copy (exact: GH is RN_CT), so one MMA pass.
 * Block: a chunk of HX_CC = 16 channels (grid.x) × a rank tile of 32 (grid.y) × a Z range of kq
 * pixel tiles of HR_PIX = 256 consecutive output pixels (raster order over all images; grid.z).
 * Per tile, in shared memory (two buffers, one __syncthreads per tile): the x halo rows as
 * k_h_rows stages them (rows outside the image written as zeros: the buffer held another tile's
 * rows; HRR not capped at the image height, so pixels past the image's end read zeros) and GH's
 * tile gs[a][px] (pitch GP_PITCH = 264: ldmatrix rows conflict-free; 0 past the image's end).
 * Warps: w >> 2 picks the pixel half (128 pixels, 8 k16 steps), w & 3 the output tile (m16 rank
 * half, n8 channel half), for every kernel offset κ < K ≤ 9 (acc[9][4]): per k step one A
 * fragment (ldmatrix.x4 of gs) and the B fragments of two offsets per ldmatrix.x4.trans (lanes
 * 0-15 address the 16 pixels' records shifted by κ, lanes 16-31 by κ+1). The pixel halves' sums
 * are added once at the end through shared memory (fixed order); k_fin_dp sums the Z partials.
 * Extra memory: Z·r·I·K fp32 partials and GH's CT copy (N·r·pixels). Shared memory
 * 2 × (HRR·HWP·48 + 32·264·2) bytes: 73 KB at OW = 64, 3 × 3.
 * =========================================================================================== */
#define GP_PITCH (HR_PIX + 8)

namespace {

/* GH's tile ghc[n][a0 + a][p0 … p0+255] as uint4 (thread's e = tid + i·NT: a = e / 32, v = e % 32) */
template <typename CT>
__device__ __forceinline__ void gp_fetch_gs(const CT *ghc, i64 r, i64 S, i64 n, i64 p0, i64 a0, uint4 (&gv)[4]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int e = (int)threadIdx.x + i * NT, a = e >> 5, v = e & 31;
        gv[i] = make_uint4(0u, 0u, 0u, 0u);
        if (a0 + a < r && p0 + 8 * v < S) gv[i] = *(const uint4 *)(ghc + (n * r + a0 + a) * S + p0 + 8 * v);
    }
}
template <typename CT> __device__ __forceinline__ void gp_put_gs(const uint4 (&gv)[4], CT *gs) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int e = (int)threadIdx.x + i * NT;
        *(uint4 *)(gs + (e >> 5) * GP_PITCH + 8 * (e & 31)) = gv[i];
    }
}

/* acc[κ] += this warp's tile of the pixel tile starting at p0 (output row oh0) */
template <typename CT, bool K3>
__device__ __forceinline__ void gp_rows_mma(const CT *xs, const CT *gs, const hr_geo &g, i64 p0, int oh0, float (&acc)[9][4]) {
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int mi = (w >> 1) & 1, ni = w & 1;
    const int kw = K3 ? 3 : g.kw, K = K3 ? 9 : g.kh * g.kw;
#pragma unroll 1
    for (int j = 0; j < 8; j++) {
        const int px = (w >> 2) * 128 + 16 * j;
        unsigned a[4];
        ldm4<false>(a, gs + (mi * 16 + (lane & 15)) * GP_PITCH + px + (lane >> 4) * 8);
        const int pp = (int)p0 + px + (lane & 15);
        const CT *xb = xs + ((pp / g.OW - oh0) * g.HWP + pp % g.OW) * HX_XP + ni * 8;
#pragma unroll
        for (int u = 0; u < 5; u++) {
            const int k1 = 2 * u, k2 = k1 + 1;
            if (k1 >= K) break;
            if (k2 < K) {
                const int kl = lane < 16 ? k1 : k2, dh = kl / kw, dw = kl - dh * kw;
                unsigned b[4];
                ldm4<true>(b, xb + (dh * g.HWP + dw) * HX_XP);
                const unsigned b1[2] = {b[0], b[1]}, b2[2] = {b[2], b[3]};
                mma16816<CT>(acc[k1], a, b1);
                mma16816<CT>(acc[k2], a, b2);
            } else {
                const int dh = k1 / kw, dw = k1 - dh * kw;
                unsigned b[2];
                ldm2<true>(b, xb + (dh * g.HWP + dw) * HX_XP);
                mma16816<CT>(acc[k1], a, b);
            }
        }
    }
}

/* tile q's image, first pixel, first output row, rows needed and first input row */
__device__ __forceinline__ void gp_tile(const hr_geo &g, i64 S, i64 q, i64 &n, i64 &p0, int &oh0, int &hrb, int &ih0) {
    n = q / g.tpi;
    p0 = (q % g.tpi) * HR_PIX;
    const i64 pl = p0 + HR_PIX - 1 < S ? p0 + HR_PIX - 1 : S - 1;
    oh0 = (int)(p0 / g.OW);
    hrb = (int)(pl / g.OW) - oh0 + g.kh;
    ih0 = oh0 - g.ph;
}

} // namespace

/* partials part[z][a][c·K+κ] of G_P; grid (channel chunks, rank tiles of 32, Z ranges of kq tiles) */
template <typename CT, bool K3, int NL>
__global__ __launch_bounds__(NT, 2) void k_gp_rows(lkc_conv C, lkc_act x, const CT *ghc, hr_geo g, float *part, i64 kq) {
    extern __shared__ __align__(16) char gp_sm[];
    const int xs_elems = g.HRR * g.HWP * HX_XP, gs_elems = 32 * GP_PITCH;
    CT *xs0 = (CT *)gp_sm, *gs0 = xs0 + 2 * xs_elems;
    const lk_locon &L = C.L;
    const i64 S = C.g.sout, ntile = C.N * g.tpi, c0 = (i64)blockIdx.x * HX_CC, a0 = (i64)blockIdx.y * 32;
    const i64 qb = (i64)blockIdx.z * kq, qe = qb + kq < ntile ? qb + kq : ntile;
    const int K = K3 ? 9 : g.kh * g.kw;
    /* both x buffers zeroed once: the padding columns stay so */
    for (int i = (int)threadIdx.x; i < 2 * xs_elems / 8; i += NT) ((uint4 *)xs0)[i] = make_uint4(0u, 0u, 0u, 0u);
    float acc[9][4];
#pragma unroll
    for (int k = 0; k < 9; k++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[k][e] = 0.0f;
    uint4 xv[NL][2], gv[4];
    i64 n, p0;
    int oh0, hrb, ih0;
    __syncthreads();
    if (qb < qe) {
        gp_tile(g, S, qb, n, p0, oh0, hrb, ih0);
        hr_fetch_x<CT, NL>(x, g, n, ih0, hrb, c0, C.I, xv);
        gp_fetch_gs<CT>(ghc, L.r, S, n, p0, a0, gv);
        hr_put_x<NL, true>(g, ih0, hrb, xv, (unsigned *)xs0);
        gp_put_gs<CT>(gv, gs0);
        __syncthreads();
        for (i64 q = qb; q < qe; q++) {
            const int cur = (int)((q - qb) & 1);
            const i64 pc = p0;
            const int ohc = oh0;
            const bool more = q + 1 < qe;
            if (more) {
                gp_tile(g, S, q + 1, n, p0, oh0, hrb, ih0);
                hr_fetch_x<CT, NL>(x, g, n, ih0, hrb, c0, C.I, xv);
                gp_fetch_gs<CT>(ghc, L.r, S, n, p0, a0, gv);
            }
            gp_rows_mma<CT, K3>(xs0 + cur * xs_elems, gs0 + cur * gs_elems, g, pc, ohc, acc);
            if (more) {
                hr_put_x<NL, true>(g, ih0, hrb, xv, (unsigned *)(xs0 + (cur ^ 1) * xs_elems));
                gp_put_gs<CT>(gv, gs0 + (cur ^ 1) * gs_elems);
            }
            __syncthreads();
        }
    }
    /* the second pixel half's sums → shared memory, added to the first half's (fixed order) */
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *red = (float *)gp_sm;   /* 4 warps × 32 lanes × 36 floats ≤ the buffers */
    if (w >= 4)
#pragma unroll
        for (int k = 0; k < 9; k++)
#pragma unroll
            for (int e = 0; e < 4; e++) red[((w - 4) * 36 + k * 4 + e) * 32 + lane] = acc[k][e];
    __syncthreads();
    if (w >= 4) return;
    const int mi = (w >> 1) & 1, ni = w & 1;
#pragma unroll
    for (int k = 0; k < 9; k++) {
        if (k >= K) break;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const i64 a = a0 + acc_row(0, mi, e), c = c0 + acc_col(0, ni, e);
            if (a < L.r && c < C.I) part[((i64)blockIdx.z * L.r + a) * L.IK + c * K + k] = acc[k][e] + red[(w * 36 + k * 4 + e) * 32 + lane];
        }
    }
}


/* =============================================================================================
 * one pass over dy (session 37): dy0, GH and d_up's partials from one read of dy.
 * The backward read dy three times (dy0 = RN(dy) by a copy, GH = c·q ⊙ Urᵀ·dy by k_h_rows on the
 * 1 × 1 problem, d_up's partials Σ_p dy·Hᵀ by k_gp_rows): 51.7 µs by ncu at 3×3 640 ch 64² n2
 * r32 bf16 for 3 × 10.5 MB. Here a block owns DP_O = 128 output channels (blockIdx.y, group g)
 * and a range of kq pixel tiles of DP_P = 128 pixels (one image each, blockIdx.x); per tile it
 * loads dy[g][tile] (16-byte vectors, CT = dy's dtype) and H[:, tile] (CT, the forward's H
 * recomputed) into registers, writes dy0 from them (same dtype: a copy, or zeros), stores both
 * in shared memory and forms on the tensor cores (warp_mma_ldm, fp32 accumulators)
 *   GH tile  [a][p]  = Σ_{o ∈ g} Ur[o][a]·dy[o][p]   (M = RT ranks, N = 128 pixels, K = 128)
 *   d_up acc [o][a] += Σ_{p ∈ tile} dy[o][p]·H[a][p] (M = 128 channels, N = RT, K = 128)
 * GH's sum over o is split over the O groups: with one group it is final (hr_store2: GH and its
 * CT copy, c·q and RN_CT applied); else partials part_gh[g][n][a][p] for k_h_fin (fixed order).
 * d_up's accumulators stay in registers across the block's tiles (16 per thread at RT = 32) and
 * are written once: part_up[z][o][a] (raw sums, finish_dup scales), Z = gridDim.x ≤ 64.
 * The next tile's vectors are loaded before the current tile's products (register prefetch).
 * Shapes: 16-bit CT, dy (and a fused dy0) pixel-contiguous, 16-byte aligned rows and images,
 * S % 8 == 0, r ≤ 32 (RT = 16 or 32). Zero fill: channels ≥ O (dy, Ur), ranks ≥ r (Ur, H),
 * pixels ≥ S (dy, H). Shared memory (dynamic): (128 + RT)·136 + 128·(RT + 8) CT = 53.8 KB at RT 32.
 * Bytes at 640 ch 64² n2 r32: dy 10.5 MB read, dy0 10.5 written, GH partials 5 × 1 MB written and
 * read, d_up partials 32 × 80 KB. Predicted ~12 µs for the pass + ~4 for k_h_fin + ~2 k_fin_dup;
 * measured (H200, ncu) 16.8 + 5.2 + 5.2 µs (20.2 + 6.9 + 6.7 at 320 ch 128² r16) against 51.7 for
 * the three passes. What holds it: latency, not bytes (14 % of DRAM bandwidth; two blocks per
 * multiprocessor by registers and shared memory, 0.4 eligible warps per scheduler); one tile per
 * block (twice the blocks) was no faster (LYCO_CUDA_CONV_DYPASS_KQ=n sets the tiles per block).
 * =========================================================================================== */
enum { DP_O = 128, DP_P = 128, DP_LD = DP_P + 8 };

struct dp_args {
    const char *dy;      /* element (n, o, p) at dy + (n·dsn + o·dsc + p)·2 */
    i64 dsn, dsc;
    char *dy0;           /* NULL = not here; same dtype as dy */
    i64 zsn, zsc;
    int dy0_zero;
    const float *Ur;     /* RN_CT(U), O × r fp32 */
    const void *H;       /* CT [n][a][p]; NULL = no d_up */
    float *GH;           /* Zg == 1: GH (fp32) and e.H2 its CT copy; NULL = no GH */
    float *part_gh;      /* Zg > 1: [g][n][a][p] */
    float *part_up;      /* [z][o][a] */
    i64 S, N, kq;        /* pixels per image, images, pixel tiles per block */
    int tpi, zg;         /* tiles per image, O groups */
    hr_epi e;
};

template <int RT> struct dp_regs {
    uint4 d[DP_O * DP_P / 8 / NT];      /* 8 */
    uint4 h[RT * DP_P / 8 / NT];        /* 1 (RT 16) or 2 (RT 32) */
};

/* a pixel tile's image and first pixel (tile < 2^31: dp_plan) */
struct dp_tile {
    i64 n, p0;
};
__device__ __forceinline__ dp_tile dp_at(const dp_args &A, i64 q) {
    const unsigned t = (unsigned)q, tpi = (unsigned)A.tpi;
    dp_tile r;
    r.n = (i64)(t / tpi);
    r.p0 = (i64)(t % tpi) * DP_P;
    return r;
}

/* Chunk k of this thread: channel row (threadIdx.x / 16) + 16·k of the group, pixels
   8·(threadIdx.x % 16) … + 7 of the tile (one 256-byte row per 16 threads) */
enum { DP_RSTEP = NT / (DP_P / 8) };
__device__ __forceinline__ int dp_row() { return (int)threadIdx.x / (DP_P / 8); }
__device__ __forceinline__ int dp_col() { return ((int)threadIdx.x % (DP_P / 8)) * 8; }

/* the tile's dy and H vectors of this thread (zero outside) */
template <int RT>
__device__ __forceinline__ void dp_fetch(const dp_args &A, i64 O, i64 r, dp_tile T, i64 o0, dp_regs<RT> &v) {
    const int row = dp_row();
    const i64 p = T.p0 + dp_col();
    const bool pin = p < A.S;
    const char *src = A.dy + (T.n * A.dsn + (o0 + row) * A.dsc + p) * 2;
#pragma unroll
    for (int k = 0; k < DP_O * DP_P / 8 / NT; k++)
        v.d[k] = pin && o0 + row + k * DP_RSTEP < O ? *(const uint4 *)(src + (i64)k * DP_RSTEP * A.dsc * 2) : make_uint4(0u, 0u, 0u, 0u);
    if (!A.H) return;
    const char *hsrc = (const char *)A.H + ((T.n * r + row) * A.S + p) * 2;
#pragma unroll
    for (int k = 0; k < RT * DP_P / 8 / NT; k++)
        v.h[k] = pin && row + k * DP_RSTEP < r ? *(const uint4 *)(hsrc + (i64)k * DP_RSTEP * A.S * 2) : make_uint4(0u, 0u, 0u, 0u);
}

/* dy0 of the tile from the fetched vectors (a copy: dy0 has dy's dtype), or zeros */
__device__ __forceinline__ void dp_dy0(const dp_args &A, i64 O, dp_tile T, i64 o0, const uint4 (&d)[DP_O * DP_P / 8 / NT]) {
    const int row = dp_row();
    const i64 p = T.p0 + dp_col();
    if (p >= A.S) return;
    char *dst = A.dy0 + (T.n * A.zsn + (o0 + row) * A.zsc + p) * 2;
#pragma unroll
    for (int k = 0; k < DP_O * DP_P / 8 / NT; k++)
        if (o0 + row + k * DP_RSTEP < O)
            *(uint4 *)(dst + (i64)k * DP_RSTEP * A.zsc * 2) = A.dy0_zero ? make_uint4(0u, 0u, 0u, 0u) : d[k];
}

template <typename CT, int RT>
__global__ __launch_bounds__(NT, 2) void k_dy_pass(lk_locon L, dp_args A) {
    extern __shared__ __align__(16) char dp_sm[];
    CT *ds = (CT *)dp_sm, *hs = ds + DP_O * DP_LD, *us = hs + RT * DP_LD;
    const int UL = RT + 8;
    const i64 O = L.O, r = L.r, o0 = (i64)blockIdx.y * DP_O, ntile = A.N * A.tpi;
    const i64 qb = (i64)blockIdx.x * A.kq, qe = qb + A.kq < ntile ? qb + A.kq : ntile;
    const int w = (int)(threadIdx.x >> 5);
    dp_regs<RT> v;
    dp_tile T = dp_at(A, qb);
    if (qb < qe) dp_fetch<RT>(A, O, r, T, o0, v);   /* in flight while Ur is staged */
    /* Ur's rows of this group as us[o][a] (CT: exact, Ur is RN_CT) */
    for (int i = (int)threadIdx.x; i < DP_O * RT; i += NT) {
        const int ol = i / RT, a = i % RT;
        const i64 o = o0 + ol;
        us[ol * UL + a] = ct_of<CT>::from(o < O && a < r ? A.Ur[o * r + a] : 0.0f);
    }
    float up[1][RT / 8][4];
    acc_zero<1, RT / 8>(up);
    const int srow = dp_row(), scol = dp_col();
    for (i64 q = qb; q < qe; q++) {
        const dp_tile cur = T;
        if (A.dy0) dp_dy0(A, O, cur, o0, v.d);
        __syncthreads();   /* the previous tile's products are done with ds / hs (and us is staged) */
#pragma unroll
        for (int k = 0; k < DP_O * DP_P / 8 / NT; k++) *(uint4 *)(ds + (srow + k * DP_RSTEP) * DP_LD + scol) = v.d[k];
        if (A.H)
#pragma unroll
            for (int k = 0; k < RT * DP_P / 8 / NT; k++) *(uint4 *)(hs + (srow + k * DP_RSTEP) * DP_LD + scol) = v.h[k];
        __syncthreads();
        if (q + 1 < qe) {
            T = dp_at(A, q + 1);
            dp_fetch<RT>(A, O, r, T, o0, v);
        }
        if (A.GH || A.part_gh) {   /* GH tile: warp w owns pixels [16w, 16w + 16) */
            float gh[RT / 16][2][4];
            acc_zero<RT / 16, 2>(gh);
            warp_mma_ldm<CT, RT / 16, 2, true, true>::run(gh, us, UL, ds, DP_LD, 0, w * 16, DP_O);
            const i64 base = cur.n * r * A.S;
            float *pg = A.part_gh ? A.part_gh + (i64)blockIdx.y * A.N * r * A.S : NULL;
            /* elements e, e + 1 (e even) of each fragment: adjacent pixels of rank a */
#pragma unroll
            for (int i = 0; i < RT / 16; i++)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int a = acc_row(0, i, e);
                    if (a >= r) continue;
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        const i64 p = cur.p0 + acc_col(w * 16, j, e), idx = base + a * A.S + p;
                        if (p >= A.S) continue;
                        if (!pg) hr_store2<CT, float>(L, A.e, A.GH, idx, a, gh[i][j][e], gh[i][j][e + 1]);
                        else *(float2 *)(pg + idx) = make_float2(gh[i][j][e], gh[i][j][e + 1]);
                    }
                }
        }
        if (A.H) warp_mma_ldm<CT, 1, RT / 8, false, false>::run(up, ds, DP_LD, hs, DP_LD, w * 16, 0, DP_P);
    }
    if (!A.H) return;
#pragma unroll
    for (int j = 0; j < RT / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const i64 o = o0 + acc_row(w * 16, 0, e), a = acc_col(0, j, e);
            if (o < O && a < r) A.part_up[((i64)blockIdx.x * O + o) * r + a] = up[0][j][e];
        }
}

/* =============================================================================================
 * halo path for dx (default; LYCO_CUDA_CONV_DXHALO=0 = k_dx_tc): col2im as an implicit
 * GEMM over the input-pixel tile, dx[n,c,ih,iw] = Σ_{a,κ} P[a, c·K+κ]·GH[n, a, ih+π−dh, iw+π−dw]
 * (stride 1, dilation 1: the flipped kernel). bf16 CT, plain LoCon (P = RN_CT(D) exact), the
 * geometries of k_h_halo. Block: 8 × 16 input pixels of one image × RT = 32 channels (grid.y),
 * chunks of 16 ranks: the GH halo ((8+kh−1) × (16+kw−1) output pixels, 0 outside the output
 * image) as bf16 xs[hp][a] (one part: GH is RN_CT already; 3 bf16 parts until session 34, two
 * always zero), A = Pt[c][κ][a] (a CT copy of P in that order, ranks padded to 16, k_prep_pt)
 * with 16-byte loads; per kernel offset one k16 MMA step; each dx element written once (dx's
 * dtype), no atomics. Shared 18.3 KB static.
 * =========================================================================================== */
namespace {

/* Pt[c][κ][a] = CT(P[a, c·K+κ]) for a < r, 0 for r ≤ a < rpad */
template <typename CT> __global__ __launch_bounds__(NT) void k_prep_pt(lkc_conv C, const float *P, i64 rpad, CT *Pt) {
    const lk_locon &L = C.L;
    const i64 total = C.I * L.K * rpad;
    for (i64 i = (i64)blockIdx.x * NT + threadIdx.x; i < total; i += (i64)gridDim.x * NT) {
        const i64 a = i % rpad, ck = i / rpad, kap = ck % L.K, c = ck / L.K;
        Pt[i] = ct_of<CT>::from(a < L.r ? P[a * L.IK + c * L.K + kap] : 0.0f);
    }
}


} // namespace

template <typename CT>
__global__ __launch_bounds__(NT, 2) void k_dx_halo(lkc_conv C, const float *GH, const CT *Pt, i64 rpad, lkc_act dx) {
    const int MI = 2, RT = 16 * MI, NA = (RT * HX_KMAX * HX_KMAX * 2 + NT - 1) / NT;
    __shared__ __align__(16) CT xs[HX_HP_MAX * HX_XP];
    __shared__ __align__(16) CT as[RT * HX_AP];
    const lk_locon &L = C.L;
    const lkc_geom &g = C.g;
    const int kh = (int)g.k[0], kw = (int)g.k[1], HW = HX_TW + kw - 1, hp_n = (HX_TH + kh - 1) * HW;
    const int IH = (int)g.in[0], IW = (int)g.in[1], OH = (int)g.out[0], OW = (int)g.out[1];
    const i64 S = g.sout, tw = cdiv(g.in[1], HX_TW), th = cdiv(g.in[0], HX_TH);
    i64 q = blockIdx.x;
    const int iw0 = (int)(q % tw) * HX_TW;
    q /= tw;
    const int ih0 = (int)(q % th) * HX_TH;
    const i64 n = q / th;
    hx_src s;   /* A operand: rows c < I, row length K·rpad */
    s.I = C.I;
    s.Ipad = rpad;
    s.r = C.I;
    s.a0 = (i64)blockIdx.y * RT;
    s.K = (int)L.K;
    /* this thread's halo pixel: output pixel (ih0 + π − (kh−1) + hr, iw0 + π − (kw−1) + hc) */
    const int hr = (int)threadIdx.x / HW, hc = (int)threadIdx.x - hr * HW;
    const int opr = ih0 + (int)g.pad[0] - (kh - 1) + hr, opc = iw0 + (int)g.pad[1] - (kw - 1) + hc;
    const bool hin = (int)threadIdx.x < hp_n && opr >= 0 && opr < OH && opc >= 0 && opc < OW;
    const i64 goff = n * L.r * S + (hin ? (i64)opr * OW + opc : 0);
    float acc[MI][2][4], gv[HX_CC];
    uint4 av[NA];
    acc_zero<MI, 2>(acc);
    const i64 nch = rpad / HX_CC;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
    for (i64 ch = 0; ch < nch; ch++) {
        __syncthreads();   /* the previous chunk's readers are done */
#pragma unroll
        for (int j = 0; j < HX_CC; j++) {
            const i64 a = ch * HX_CC + j;
            gv[j] = hin && a < L.r ? GH[goff + a * S] : 0.0f;
        }
        hx_fetch_a<CT, RT, NA>(s, Pt, ch * HX_CC, av);
        hx_put_x<CT>(hp_n, gv, xs);   /* GH is RN_CT: exact in CT */
        hx_put_a<CT, RT, NA>(s, av, as);
        __syncthreads();
        for (int dh = 0; dh < kh; dh++)
            for (int dw = 0; dw < kw; dw++) {
                const int kap = dh * kw + dw, hb = (w + kh - 1 - dh) * HW + (kw - 1 - dw);
                unsigned a[MI][4];
#pragma unroll
                for (int mi = 0; mi < MI; mi++) {
                    const CT *ap = as + (mi * 16 + gq) * HX_AP + kap * HX_CC + 2 * t;
                    a[mi][0] = *(const unsigned *)ap;
                    a[mi][1] = *(const unsigned *)(ap + 8 * HX_AP);
                    a[mi][2] = *(const unsigned *)(ap + 8);
                    a[mi][3] = *(const unsigned *)(ap + 8 * HX_AP + 8);
                }
                {
                    unsigned b[2][2];
#pragma unroll
                    for (int ni = 0; ni < 2; ni++) {
                        const CT *bp = xs + (hb + ni * 8 + gq) * HX_XP + 2 * t;
                        b[ni][0] = *(const unsigned *)bp;
                        b[ni][1] = *(const unsigned *)(bp + 8);
                    }
#pragma unroll
                    for (int mi = 0; mi < MI; mi++)
#pragma unroll
                        for (int ni = 0; ni < 2; ni++) mma16816<CT>(acc[mi][ni], a[mi], b[ni]);
                }
            }
    }
    const int ih = ih0 + w;
    if (ih >= IH) return;
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < 2; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const i64 c = s.a0 + acc_row(0, mi, e);
                const int iw = iw0 + acc_col(0, ni, e);
                if (c >= C.I || iw >= IW) continue;
                const i64 o = n * dx.sn + c * dx.sc + (i64)ih * dx.ss[0] + (i64)iw * dx.ss[1];
                st_elem((char *)dx.p + o * (i64)dt_size(dx.dt), dx.dt, dx.unal, acc[mi][ni][e]);
            }
}

/* =============================================================================================
 * launchers
 * =========================================================================================== */
static unsigned nblk(i64 n) { return (unsigned)cdiv(n > 0 ? n : 1, NT); }
static unsigned nblk_grid(i64 n) {  /* grid-stride kernels: capped */
    i64 b = cdiv(n > 0 ? n : 1, NT);
    return (unsigned)(b < 65536 ? b : 65536);
}

/* Split of a reduction of length len into Z ranges of kper (a multiple of TK): a function of the
   shape only; the partials (Z·cells floats) stay under 2^24 floats where Z > 1. */
static void red_split(i64 len, i64 cells, int *Z, i64 *kper) {
    i64 z = cdiv(len, 512);
    i64 zmax = ((i64)1 << 24) / (cells > 0 ? cells : 1);
    if (z > 64) z = 64;
    if (z > zmax) z = zmax;
    if (z < 1) z = 1;
    i64 k = cdiv(cdiv(len > 0 ? len : 1, z), TK) * TK;
    *kper = k;
    *Z = (int)cdiv(len > 0 ? len : 1, k);
}

/* scratch carve: consecutive fp32 arrays from one allocation */
typedef struct {
    char *base;
    size_t off;
} lkc_carve;
static float *carve_f(lkc_carve *cv, i64 n) {
    float *p = (float *)(cv->base + cv->off);
    cv->off += ((size_t)(n > 0 ? n : 1) * sizeof(float) + 255) / 256 * 256;
    return p;
}
static size_t carve_bytes(i64 n) { return ((size_t)(n > 0 ? n : 1) * sizeof(float) + 255) / 256 * 256; }

template <typename CT> static int prep(const lkc_conv &C, float *Ur, float *P, cudaStream_t s) {
    k_prep_u<CT><<<nblk(C.L.O * C.L.r), NT, 0, s>>>(C.L, Ur);
    LK_LAUNCHED("conv locon prep U");
    k_prep_p<CT><<<nblk(C.L.r * C.L.IK), NT, 0, s>>>(C, P);
    LK_LAUNCHED("conv locon prep P");
    return LYCO_OK;
}

template <typename CT> static int launch_h(const lkc_conv &C, const lkc_act &x, const float *P, float *H, cudaStream_t s) {
    dim3 grid((unsigned)cdiv(C.g.sout, TT), (unsigned)cdiv(C.L.r, TT), (unsigned)C.N);
    k_h<CT><<<grid, NT, 0, s>>>(C, x, P, H);
    LK_LAUNCHED("conv locon h");
    return LYCO_OK;
}

template <typename CT> static int bypass_fwd_t(const lkc_bypass_fwd_args *a, cudaStream_t s) {
    const lkc_conv &C = a->C;
    int rc = LYCO_OK;
    if (C.N == 0 || C.g.sout == 0 || C.L.O == 0) return rc;
    void *mem = NULL;
    size_t bytes = carve_bytes(C.L.O * C.L.r) + carve_bytes(C.L.r * C.L.IK) + carve_bytes(C.N * C.L.r * C.g.sout);
    if ((rc = lk_scratch_alloc(&mem, bytes, s))) return rc;
    lkc_carve cv = {(char *)mem, 0};
    float *Ur = carve_f(&cv, C.L.O * C.L.r), *P = carve_f(&cv, C.L.r * C.L.IK), *H = carve_f(&cv, C.N * C.L.r * C.g.sout);
    if (!(rc = prep<CT>(C, Ur, P, s)) && !(rc = launch_h<CT>(C, a->x, P, H, s))) {
        dim3 grid((unsigned)cdiv(C.g.sout, TT), (unsigned)cdiv(C.L.O, TT), (unsigned)C.N);
        k_y<CT><<<grid, NT, 0, s>>>(C, Ur, H, a->y0, a->y);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) rc = lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of conv locon y failed: %s", cudaGetErrorString(e));
    }
    int rf = lk_scratch_free(mem, s);
    return rc ? rc : rf;
}

/* G_P (r × I·K, fp32 partial sums in part) → d_down (plain) or d_mid / d_down (Tucker, via Gp) */
template <typename CT>
static int finish_gp(const lkc_conv &C, const float *part, int Z, float coef, int use_sigma, lk_view gD, lk_view gM, float *Gp,
                     cudaStream_t s) {
    const bool tucker = C.M.p != NULL;
    if (!gD.p && !gM.p) return LYCO_OK;
    k_fin_dp<<<nblk(C.L.r * C.L.IK), NT, 0, s>>>(C.L, part, Z, coef, use_sigma, gD, tucker ? Gp : NULL);
    LK_LAUNCHED("conv locon d_down finalise");
    if (!tucker) return LYCO_OK;
    k_chain<CT><<<nblk(C.L.r * C.L.r * C.L.K + C.L.r * C.I), NT, 0, s>>>(C, Gp, gD, gM);
    LK_LAUNCHED("tucker locon chain");
    return LYCO_OK;
}

/* d_up and dσs from partials part[z][o][a] */
/* d_up and dσs from partials part[z][o][a] (trans: part[z][a][o], k_gp_rows's layout) */
static int finish_dup(const lk_locon &L, int merge, const float *part, int Z, const float *Ur, lk_view gU, lk_view gsig,
                      float *sigpart, cudaStream_t s, int trans = 0) {
    if (!gU.p && !gsig.p) return LYCO_OK;
    unsigned nb = nblk(L.O * L.r);
    k_fin_dup<<<nb, NT, 0, s>>>(L, merge, part, Z, Ur, gU, gsig.p ? sigpart : NULL, trans);
    LK_LAUNCHED("locon d_up finalise");
    if (!gsig.p) return LYCO_OK;
    k_fin_sum<<<1, NT, 0, s>>>(sigpart, (i64)nb, gsig);
    LK_LAUNCHED("locon dσs finalise");
    return LYCO_OK;
}

template <typename CT> static int bypass_bwd_body(const lkc_bypass_bwd_args *a, lkc_carve *cv, cudaStream_t s) {
    const lkc_conv &C = a->C;
    const lk_locon &L = C.L;
    const i64 S = C.g.sout, T = C.N * S;
    const bool want_up = a->gU.p || a->gsigma.p, want_p = a->gD.p || a->gM.p;
    int Zu, Zp;
    i64 ku, kp;
    red_split(T, L.O * L.r, &Zu, &ku);
    red_split(T, L.r * L.IK, &Zp, &kp);
    float *Ur = carve_f(cv, L.O * L.r), *P = carve_f(cv, L.r * L.IK), *H = carve_f(cv, T * L.r), *GH = carve_f(cv, T * L.r);
    float *pu = carve_f(cv, (i64)Zu * L.O * L.r), *pp = carve_f(cv, (i64)Zp * L.r * L.IK), *Gp = carve_f(cv, L.r * L.IK);
    float *sigpart = carve_f(cv, (i64)nblk(L.O * L.r));
    int rc;
    if ((rc = prep<CT>(C, Ur, P, s))) return rc;
    if (a->dy0.p && T > 0) {
        k_dy0<CT><<<nblk_grid(T * L.O), NT, 0, s>>>(C, a->dy, a->dy0, a->dy0_zero);
        LK_LAUNCHED("conv locon dy0");
    }
    if (T > 0 && (a->dx.p || want_p)) {
        dim3 grid((unsigned)cdiv(S, TT), (unsigned)cdiv(L.r, TT), (unsigned)C.N);
        k_gh<CT><<<grid, NT, 0, s>>>(C, a->dy, Ur, GH);
        LK_LAUNCHED("conv locon gh");
    }
    if (a->dx.p && C.N * C.I * C.g.sin > 0) {
        k_dx<CT><<<nblk_grid(C.N * C.I * C.g.sin), NT, 0, s>>>(C, P, GH, a->dx);
        LK_LAUNCHED("conv locon dx");
    }
    if (want_up) {
        if (T > 0 && (rc = launch_h<CT>(C, a->x, P, H, s))) return rc;
        dim3 grid((unsigned)cdiv(L.r, TT), (unsigned)cdiv(L.O, TT), (unsigned)Zu);
        k_red_dup<CT><<<grid, NT, 0, s>>>(C, a->dy, H, pu, ku);
        LK_LAUNCHED("conv locon d_up partials");
        if ((rc = finish_dup(L, 0, pu, Zu, Ur, a->gU, a->gsigma, sigpart, s))) return rc;
    }
    if (want_p) {
        dim3 grid((unsigned)cdiv(L.IK, TT), (unsigned)cdiv(L.r, TT), (unsigned)Zp);
        k_red_dp<CT><<<grid, NT, 0, s>>>(C, a->x, GH, pp, kp);
        LK_LAUNCHED("conv locon d_down partials");
        if ((rc = finish_gp<CT>(C, pp, Zp, 1.0f, 0, a->gD, a->gM, Gp, s))) return rc;
    }
    return LYCO_OK;
}

template <typename CT> static int bypass_bwd_t(const lkc_bypass_bwd_args *a, cudaStream_t s) {
    const lkc_conv &C = a->C;
    const lk_locon &L = C.L;
    int rc;
    const i64 T = C.N * C.g.sout;
    int Zu, Zp;
    i64 ku, kp;
    red_split(T, L.O * L.r, &Zu, &ku);
    red_split(T, L.r * L.IK, &Zp, &kp);
    size_t bytes = carve_bytes(L.O * L.r) + 2 * carve_bytes(L.r * L.IK) + 2 * carve_bytes(T * L.r) +
                   carve_bytes((i64)Zu * L.O * L.r) + carve_bytes((i64)Zp * L.r * L.IK) + carve_bytes((i64)nblk(L.O * L.r));
    void *mem = NULL;
    if ((rc = lk_scratch_alloc(&mem, bytes, s))) return rc;
    lkc_carve cv = {(char *)mem, 0};
    rc = bypass_bwd_body<CT>(a, &cv, s);
    int rf = lk_scratch_free(mem, s);
    return rc ? rc : rf;
}

template <typename CT> static int tmerge_fwd_t(const lkc_tmerge_fwd_args *a, cudaStream_t s) {
    const lkc_conv &C = a->C;
    int rc = LYCO_OK;
    if (C.L.O * C.L.IK == 0) return rc;
    void *mem = NULL;
    if ((rc = lk_scratch_alloc(&mem, carve_bytes(C.L.O * C.L.r) + carve_bytes(C.L.r * C.L.IK), s))) return rc;
    lkc_carve cv = {(char *)mem, 0};
    float *Ur = carve_f(&cv, C.L.O * C.L.r), *P = carve_f(&cv, C.L.r * C.L.IK);
    if (!(rc = prep<CT>(C, Ur, P, s))) {
        dim3 grid((unsigned)cdiv(C.L.IK, TT), (unsigned)cdiv(C.L.O, TT));
        k_tm_fwd<CT><<<grid, NT, 0, s>>>(C, Ur, P, a->W, a->out, a->mode);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) rc = lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of tucker merge failed: %s", cudaGetErrorString(e));
    }
    int rf = lk_scratch_free(mem, s);
    return rc ? rc : rf;
}

template <typename CT> static int tmerge_bwd_body(const lkc_tmerge_bwd_args *a, lkc_carve *cv, cudaStream_t s) {
    const lkc_conv &C = a->C;
    const lk_locon &L = C.L;
    int Zu, Zp;
    i64 ku, kp;
    red_split(L.IK, L.O * L.r, &Zu, &ku);
    red_split(L.O, L.r * L.IK, &Zp, &kp);
    float *Ur = carve_f(cv, L.O * L.r), *P = carve_f(cv, L.r * L.IK);
    float *pu = carve_f(cv, (i64)Zu * L.O * L.r), *pp = carve_f(cv, (i64)Zp * L.r * L.IK), *Gp = carve_f(cv, L.r * L.IK);
    float *sigpart = carve_f(cv, (i64)nblk(L.O * L.r));
    int rc;
    if ((rc = prep<CT>(C, Ur, P, s))) return rc;
    if (a->gU.p || a->gsigma.p) {
        dim3 grid((unsigned)cdiv(L.r, TT), (unsigned)cdiv(L.O, TT), (unsigned)Zu);
        k_tm_dup<CT><<<grid, NT, 0, s>>>(C, a->G, P, pu, ku);
        LK_LAUNCHED("tucker merge d_up partials");
        if ((rc = finish_dup(L, 1, pu, Zu, Ur, a->gU, a->gsigma, sigpart, s))) return rc;
    }
    if (a->gD.p || a->gM.p) {
        dim3 grid((unsigned)cdiv(L.IK, TT), (unsigned)cdiv(L.r, TT), (unsigned)Zp);
        k_tm_dp<CT><<<grid, NT, 0, s>>>(C, a->G, Ur, pp, kp);
        LK_LAUNCHED("tucker merge G_P partials");
        if ((rc = finish_gp<CT>(C, pp, Zp, (float)(L.s * L.m), 1, a->gD, a->gM, Gp, s))) return rc;
    }
    return LYCO_OK;
}

template <typename CT> static int tmerge_bwd_t(const lkc_tmerge_bwd_args *a, cudaStream_t s) {
    const lkc_conv &C = a->C;
    const lk_locon &L = C.L;
    int rc;
    int Zu, Zp;
    i64 ku, kp;
    red_split(L.IK, L.O * L.r, &Zu, &ku);
    red_split(L.O, L.r * L.IK, &Zp, &kp);
    size_t bytes = carve_bytes(L.O * L.r) + 2 * carve_bytes(L.r * L.IK) + carve_bytes((i64)Zu * L.O * L.r) +
                   carve_bytes((i64)Zp * L.r * L.IK) + carve_bytes((i64)nblk(L.O * L.r));
    void *mem = NULL;
    if ((rc = lk_scratch_alloc(&mem, bytes, s))) return rc;
    lkc_carve cv = {(char *)mem, 0};
    rc = tmerge_bwd_body<CT>(a, &cv, s);
    int rf = lk_scratch_free(mem, s);
    return rc ? rc : rf;
}

template <typename CT> static int tucker_p_t(const lkc_tucker_p_args *a, cudaStream_t s) {
    if (a->C.L.r * a->C.L.IK == 0) return LYCO_OK;
    k_prep_p<CT><<<nblk(a->C.L.r * a->C.L.IK), NT, 0, s>>>(a->C, a->P);
    LK_LAUNCHED("tucker P");
    return LYCO_OK;
}

template <typename CT> static int tucker_chain_t(const lkc_tucker_chain_args *a, cudaStream_t s) {
    const lkc_conv &C = a->C;
    if ((!a->gD.p && !a->gM.p) || C.L.r * C.L.r * C.L.K + C.L.r * C.I == 0) return LYCO_OK;
    k_chain<CT><<<nblk(C.L.r * C.L.r * C.L.K + C.L.r * C.I), NT, 0, s>>>(C, a->Gp, a->gD, a->gM);
    LK_LAUNCHED("tucker chain");
    return LYCO_OK;
}

/* ---------------------------------------------------------------------------------------------
 * tensor-core launchers
 * ------------------------------------------------------------------------------------------- */
/* LYCO_CUDA_CONV_LEGACY=1: the bypass takes the FFMA kernels (gemm64) at every shape. */
static bool conv_legacy(void) {
    const char *e = getenv("LYCO_CUDA_CONV_LEGACY");
    return e && e[0] == '1';
}

/* The tensor-core gathers keep coordinates in int: every sum they form (o·σ − π + κ·δ,
   ip + π − κ·δ) stays below 2^31 when each term is below 2^28. Else the legacy kernels run. */
static bool geom_i32(const lkc_geom &g) {
    const i64 lim = (i64)1 << 28;
    for (int d = 0; d < 3; d++) {
        if (g.in[d] >= lim || g.out[d] >= lim || g.k[d] >= lim || g.st[d] >= lim || g.pad[d] >= lim || g.dil[d] >= lim) return false;
        if (g.out[d] * g.st[d] >= lim || g.k[d] * g.dil[d] >= lim) return false;
    }
    return true;
}

/* Split of a length-len reduction over `tiles` output tiles into Z ranges of kper (a multiple of
   BK, at least 8 steps): aims at ~512 blocks (≈ 4 per H200 multiprocessor, so one block's load
   latency hides behind the others' products); a function of the shape only; Z·cells < 2^24. */
static void tc_split(i64 len, i64 cells, i64 tiles, int *Z, i64 *kper) {
    const i64 l = len > 0 ? len : 1;
    i64 z = cdiv(512, tiles > 0 ? tiles : 1), zl = cdiv(l, 8 * BK), zmax = ((i64)1 << 24) / (cells > 0 ? cells : 1);
    if (z > zl) z = zl;
    if (z > 64) z = 64;
    if (z > zmax) z = zmax;
    if (z < 1) z = 1;
    *kper = cdiv(cdiv(l, z), BK) * BK;
    *Z = (int)cdiv(l, *kper);
}

/* LYCO_CUDA_CONV_TC1=1 (read at each call): H takes round 1's tile-routine gather (k_h_tc) at
   every shape instead of the halo path (k_h_halo), for A/B runs. */
static bool conv_tc1(void) {
    const char *e = getenv("LYCO_CUDA_CONV_TC1");
    return e && e[0] == '1';
}

/* the plan of H = P·im2col(x): halo path or k_h_tc, its k split (Z ranges of kper: k indices for
   k_h_tc, channel chunks of HX_CC for the halo path) and its grid; a function of the shape, CT
   and the environment */
typedef struct {
    int halo, MI, Z;
    i64 kper, Ipad;
    unsigned gx, gy;
    int rows, NL;   /* k_h_rows (halo set too: it shares Pk and the chunk split) and its tasks per thread */
    hr_geo rg;
    int smem;       /* k_h_rows's dynamic shared memory */
} lkc_hplan;

/* the geometries of the halo paths: dims 0-1 (dim 2 of size 1), stride 1, dilation 1, kernel
   ≤ HX_KMAX per dim, output tiles within grid.x; not under LYCO_CUDA_CONV_TC1=1 */
static bool halo_geom(const lkc_conv &C) {
    const lkc_geom &g = C.g;
    const i64 tiles = C.N * cdiv(g.out[0], HX_TH) * cdiv(g.out[1], HX_TW);
    return !conv_tc1() && g.in[2] == 1 && g.out[2] == 1 && g.k[2] == 1 && g.k[0] <= HX_KMAX && g.k[1] <= HX_KMAX &&
           g.st[0] == 1 && g.st[1] == 1 && g.dil[0] == 1 && g.dil[1] == 1 && tiles <= 0x7fffffff && C.L.r > 0 && C.I > 0;
}

/* LYCO_CUDA_CONV_HROWS=0 (read at each call): H takes k_h_halo where k_h_rows would (A/B) */
static bool conv_hrows(void) {
    const char *e = getenv("LYCO_CUDA_CONV_HROWS");
    return !(e && e[0] == '0');
}

/* k_h_rows's geometry (see its section) for a halo-path call with x, its tasks per thread and
   shared memory; false when the call is not its own */
template <typename CT> static bool hr_fits(const lkc_conv &C, const lkc_act &x, hr_geo *hg, int *NL, int *smem, int MI) {
    const lkc_geom &g = C.g;
    if (!conv_hrows() || x.dt != ct_of<CT>::dt || x.unal || x.ss[1] != 1 || ((uintptr_t)x.p & 15) != 0 || (x.sn & 7) != 0 ||
        (x.sc & 7) != 0 || (x.ss[0] & 7) != 0)
        return false;
    const i64 OW = g.out[1], W = g.in[1];
    if (OW < 8 || OW > HR_PIX || OW % 8 != 0 || W % 8 != 0 || g.out[0] < 1 || g.sout > 0x7fffffff - HR_PIX) return false;
    hr_geo h;
    h.OW = (int)OW;
    h.OH = (int)g.out[0];
    h.W = (int)W;
    h.IH = (int)g.in[0];
    h.kh = (int)g.k[0];
    h.kw = (int)g.k[1];
    h.ph = (int)g.pad[0];
    h.pw = (int)g.pad[1];
    h.HWP = h.OW + h.kw - 1; /* = W + 2·pw at stride 1 */
    while (h.HWP % 4 != 2) h.HWP++;
    i64 rows = HR_PIX % OW == 0 ? HR_PIX / OW : (HR_PIX - 1) / OW + 2;
    if (rows > g.out[0]) rows = g.out[0];
    h.HRR = (int)rows + h.kh - 1;
    h.tpi = (int)cdiv(g.sout, HR_PIX);
    const i64 tasks = 32 * cdiv(h.HRR, 4) * (W / 8);
    if (tasks > 4 * NT || C.N * h.tpi > 0x7fffffff) return false;
    *NL = tasks <= 2 * NT ? 2 : 4;
    *smem = 2 * (h.HRR * h.HWP * HX_XP + 16 * MI * HX_AP) * (int)sizeof(CT);
    if (*smem > 200 * 1024) return false;
    *hg = h;
    return true;
}

/* the blocks per H200 multiprocessor k_h_rows's grid is sized for: three where the instance is
   compiled for three (HR_MINB) and the shared memory holds three (228 KB per multiprocessor, 1 KB
   of it reserved per block), else two (as before session 38) */
static int hr_blocks_per_sm(const lkc_hplan &h) {
    return HR_MINB(h.MI, h.NL) == 3 && 3 * (h.smem + 1024) <= 228 * 1024 ? 3 : 2;
}

template <typename CT> static lkc_hplan h_plan(const lkc_conv &C, const lkc_act &x) {
    const lkc_geom &g = C.g;
    const i64 T = C.N * g.sout, r = C.L.r;
    lkc_hplan h = {};
    h.MI = r <= 16 ? 1 : 2;
    i64 tiles = C.N * cdiv(g.out[0], HX_TH) * cdiv(g.out[1], HX_TW);
    const i64 rt = cdiv(r, 16 * h.MI);
    h.halo = sizeof(CT) == 2 && !C.M.p && halo_geom(C) && rt <= 65535;
    h.rows = h.halo && hr_fits<CT>(C, x, &h.rg, &h.NL, &h.smem, h.MI);
    if (h.rows) tiles = C.N * h.rg.tpi;
    if (!h.halo) {
        tc_split(C.L.IK, r * T, cdiv(T, BN) * cdiv(r, BM), &h.Z, &h.kper);
        h.gx = (unsigned)cdiv(T, BN);
        h.gy = (unsigned)cdiv(r, BM);
        return h;
    }
    h.Ipad = cdiv(C.I, HX_CC) * HX_CC;
    /* ~512 blocks (≈ 4 per H200 multiprocessor; k_h_rows: one wave of the blocks per multiprocessor
       its instance and shared memory allow), at least 4 chunks each, Z·r·T < 2^24 */
    const i64 nc = h.Ipad / HX_CC, zmax = ((i64)1 << 24) / (r * T > 0 ? r * T : 1);
    i64 z = cdiv(h.rows ? 132 * hr_blocks_per_sm(h) : 512, tiles * rt);
    if (z > cdiv(nc, 4)) z = cdiv(nc, 4);
    if (z > 64) z = 64;
    if (z > zmax) z = zmax;
    if (z < 1) z = 1;
    h.kper = cdiv(nc, z);
    h.Z = (int)cdiv(nc, h.kper);
    h.gx = (unsigned)tiles;
    h.gy = (unsigned)rt;
    return h;
}

/* floats of the halo path's Pk (r·K·Ipad 16-bit elements) */
static i64 pk_floats(const lkc_conv &C, const lkc_hplan &h) { return h.halo ? cdiv(C.L.r * C.L.K * h.Ipad * 2, 4) : 0; }

/* scratch bytes of H beyond H itself: Pk (halo path) and the k-split partials (Z > 1) */
static size_t h_scratch_bytes(const lkc_conv &C, const lkc_hplan &h) {
    size_t b = h.halo ? carve_bytes(pk_floats(C, h)) : 0;
    if (h.Z > 1) b += carve_bytes((i64)h.Z * C.L.r * C.N * C.g.sout);
    return b;
}

/* k_h_rows's instance for (MI, 3 × 3 or not, NL) */
template <typename CT, int MI, bool K3, int NL, typename HT>
static int hr_run(const lkc_conv &C, const lkc_act &x, const lkc_hplan &h, const CT *Pk, HT *H, float *part, hr_epi e,
                  cudaStream_t s) {
    LK_SMEM_OPTIN(h.smem, k_h_rows<CT, MI, K3, NL, HT>);
    dim3 grid(h.gx, h.gy, (unsigned)h.Z);
    k_h_rows<CT, MI, K3, NL, HT><<<grid, NT, h.smem, s>>>(C, x, Pk, h.Ipad, h.rg, H, part, h.kper, e);
    LK_LAUNCHED("conv locon row-tile product (h, gh or dx)");
    return LYCO_OK;
}
template <typename CT, int MI, bool K3, typename HT>
static int hr_run_nl(const lkc_conv &C, const lkc_act &x, const lkc_hplan &h, const CT *Pk, HT *H, float *part, hr_epi e,
                     cudaStream_t s) {
    return h.NL == 2 ? hr_run<CT, MI, K3, 2, HT>(C, x, h, Pk, H, part, e, s) : hr_run<CT, MI, K3, 4, HT>(C, x, h, Pk, H, part, e, s);
}

/* the halo path's launches: Pk from src, then k_h_rows (any hr_epi; k_h_fin after a k split) or
   k_h_halo (H only); CT = float never takes it (h_plan) */
template <typename CT, typename HT> struct hx_launch {
    static int run(const lkc_conv &C, const lkc_act &x, pk_src src, const lkc_hplan &h, CT *Pk, HT *H, float *part, hr_epi e,
                   cudaStream_t s) {
        k_prep_pk<CT><<<nblk_grid(C.L.r * C.L.K * h.Ipad), NT, 0, s>>>(C, src, h.Ipad, Pk);
        LK_LAUNCHED("conv locon row-tile / halo operand");
        /* 3 × 3 kernels (most conv layers of the diffusion UNets) take the unrolled instances;
           LYCO_CUDA_CONV_HX_GENERIC=1 (read at each call): the runtime-bound loop (A/B) */
        const char *gen = getenv("LYCO_CUDA_CONV_HX_GENERIC");
        const bool k3 = C.g.k[0] == 3 && C.g.k[1] == 3 && !(gen && gen[0] == '1');
        int rc = LYCO_OK;
        if (h.rows) {
            if (h.MI == 1) rc = k3 ? hr_run_nl<CT, 1, true>(C, x, h, Pk, H, part, e, s) : hr_run_nl<CT, 1, false>(C, x, h, Pk, H, part, e, s);
            else rc = k3 ? hr_run_nl<CT, 2, true>(C, x, h, Pk, H, part, e, s) : hr_run_nl<CT, 2, false>(C, x, h, Pk, H, part, e, s);
        } else {
            if (e.mode != HR_H) return lyco_fail(LYCO_ERR_BACKEND, "cuda: conv locon gh / dx planned on the halo kernel (internal error)");
            dim3 grid(h.gx, h.gy, (unsigned)h.Z);
            if (h.MI == 1 && k3) k_h_halo<CT, 1, true><<<grid, NT, 0, s>>>(C, x, Pk, h.Ipad, H, part, h.kper);
            else if (h.MI == 1) k_h_halo<CT, 1, false><<<grid, NT, 0, s>>>(C, x, Pk, h.Ipad, H, part, h.kper);
            else if (k3) k_h_halo<CT, 2, true><<<grid, NT, 0, s>>>(C, x, Pk, h.Ipad, H, part, h.kper);
            else k_h_halo<CT, 2, false><<<grid, NT, 0, s>>>(C, x, Pk, h.Ipad, H, part, h.kper);
            LK_LAUNCHED("conv locon h (halo path)");
        }
        if (rc || h.Z <= 1) return rc;
        k_h_fin<CT, HT><<<nblk_grid(C.L.r * C.N * C.g.sout), NT, 0, s>>>(C.L, C.g.sout, C.N * C.g.sout, part, h.Z, H, e);
        LK_LAUNCHED("conv locon row-tile / halo finalise");
        return LYCO_OK;
    }
};
template <typename HT> struct hx_launch<float, HT> {
    static int run(const lkc_conv &, const lkc_act &, pk_src, const lkc_hplan &, float *, HT *, float *, hr_epi, cudaStream_t) {
        return lyco_fail(LYCO_ERR_BACKEND, "cuda: conv locon halo path planned for fp32 compute (internal error)");
    }
};

/* H = RN_CT(q ⊙ P·im2col(x)) in HT (fp32, or CT for the forward's expand); P = NULL: plain LoCon on
   the halo path only, Pk from down (pk_src); h = h_plan<CT>(C, x); hs: h_scratch_bytes(C, h) of
   scratch (or NULL when that is 0) */
template <typename CT, typename HT>
static int launch_h_tc(const lkc_conv &C, const lkc_act &x, const lkc_hplan &h, const float *P, HT *H, float *hs,
                       cudaStream_t s) {
    const i64 T = C.N * C.g.sout;
    lkc_carve cv = {(char *)hs, 0};
    CT *Pk = h.halo ? (CT *)carve_f(&cv, pk_floats(C, h)) : NULL;
    float *part = h.Z > 1 ? carve_f(&cv, (i64)h.Z * C.L.r * T) : NULL;
    const hr_epi e = {HR_H, NULL, 1};   /* H is scratch */
    if (h.halo) {
        const pk_src src = {P, 0, C.L.IK, C.L.K, 1};
        return hx_launch<CT, HT>::run(C, x, src, h, Pk, H, part, e, s);
    }
    dim3 grid(h.gx, h.gy, (unsigned)h.Z);
    typedef wide<CT> W;
    if (C.M.p) k_h_tc<CT, typename W::MT, W::nf, W::nx, HT><<<grid, NT, 0, s>>>(C, x, P, H, part, h.kper);
    else k_h_tc<CT, CT, 1, 1, HT><<<grid, NT, 0, s>>>(C, x, P, H, part, h.kper);
    LK_LAUNCHED("conv locon h (tensor cores)");
    if (h.Z > 1) {
        k_h_fin<CT, HT><<<nblk_grid(C.L.r * T), NT, 0, s>>>(C.L, C.g.sout, T, part, h.Z, H, e);
        LK_LAUNCHED("conv locon h finalise");
    }
    return LYCO_OK;
}

/* LYCO_CUDA_CONV_YEXPAND=0 (read at each call): y through k_y_tc where the expand would take it (A/B) */
static bool conv_yexpand(void) {
    const char *e = getenv("LYCO_CUDA_CONV_YEXPAND");
    return !(e && e[0] == '0');
}

/* image n of an activation as an O × S row-major view (pixels contiguous), else p NULL */
static lk_view act_image_view(const lkc_act &a, const lkc_geom &g, i64 n, i64 O) {
    lk_view v;
    memset(&v, 0, sizeof v);
    i64 e = 1;
    for (int d = 2; d >= 0; d--) {
        if (g.out[d] > 1 && a.ss[d] != e) return v;
        e *= g.out[d];
    }
    if (!a.p) return v;
    const i64 es = a.dt == DT_F32 ? 4 : 2;
    v.p = (const char *)a.p + n * a.sn * es;
    v.s0 = a.sc;
    v.s1 = 1;
    v.rows = O;
    v.cols = g.sout;
    v.dt = a.dt;
    v.flags = a.unal ? LK_UNALIGNED : 0;
    if (!a.unal && ((uintptr_t)v.p & 15) == 0 && (v.s0 * es) % 16 == 0) v.flags |= LK_VEC;
    return v;
}

/* every image of an activation as one (N·Ch) × S row-major view (pixels contiguous, sn = Ch·sc),
   else false */
static bool act_rows_view(const lkc_act &a, const lkc_conv &C, i64 Ch, lk_view *v) {
    *v = act_image_view(a, C.g, 0, Ch);
    if (!v->p || (C.N > 1 && a.sn != Ch * a.sc)) return false;
    v->rows = C.N * Ch;
    return true;
}

/* y_n = y0_n + c·Ur·H_n through lowrank.cu's expand: M = O output channels, N = S pixels, P = U,
   Q = H_n (r × S, CT; H may be NULL for the fit test), out / base the images of y / y0 — the
   products of k_y_tc, fmaf(c, Σ_a RN_CT(U[o,a])·H[a,p], RN_CT(y0)), c = s·m·RN_CT(σs). False when
   y or y0 has no such view. */
template <typename CT> static bool y_expand_args(const lkc_bypass_fwd_args *a, const CT *H, i64 n, lk_expand_args *e) {
    const lkc_conv &C = a->C;
    const lk_locon &L = C.L;
    const i64 S = C.g.sout, es = (i64)sizeof(CT);
    memset(e, 0, sizeof *e);
    e->ct = L.ct;
    e->M = L.O;
    e->N = S;
    e->r = L.r;
    e->P = L.U;
    e->Q = lk_pitched_view(H + n * L.r * S, L.r, S, S, L.ct);
    if ((S * es) % 16 != 0) e->Q.flags = 0;
    e->out = act_image_view(a->y, C.g, n, L.O);
    e->base = act_image_view(a->y0, C.g, n, L.O);
    e->sigma = L.sigma;
    e->row_scale = 1.0;
    e->mult = L.s * L.m;
    e->sig_in_mult = 1;
    e->mode = a->y0.p ? 0 : 1;
    e->K = 1;
    return e->out.p && (!a->y0.p || e->base.p);
}

template <typename CT> static int bypass_fwd_tc(const lkc_bypass_fwd_args *a, cudaStream_t s) {
    const lkc_conv &C = a->C;
    const i64 T = C.N * C.g.sout;
    int rc = LYCO_OK;
    if (T == 0 || C.L.O == 0) return rc;
    lk_device dev;
    if ((rc = lk_device_query(&dev))) return rc;
    lk_expand_args e;
    const bool ex = conv_yexpand() && y_expand_args<CT>(a, NULL, 0, &e) && lk_expand_fits(&e, &dev);
    /* plain LoCon on the halo / row-tile path with the expand: Pk straight from down, no P */
    const lkc_hplan hx = h_plan<CT>(C, a->x);
    const bool pk_from_d = ex && hx.halo;   /* the halo path is plain LoCon's */
    void *mem = NULL;
    const size_t hpb = h_scratch_bytes(C, hx);
    const i64 hfl = ex ? cdiv(T * C.L.r * (i64)sizeof(CT), 4) : T * C.L.r; /* H: CT for the expand, else fp32 */
    size_t bytes = (ex ? 0 : carve_bytes(C.L.O * C.L.r)) + (pk_from_d ? 0 : carve_bytes(C.L.r * C.L.IK)) + carve_bytes(hfl) + hpb;
    if ((rc = lk_scratch_alloc(&mem, bytes, s))) return rc;
    lkc_carve cv = {(char *)mem, 0};
    float *Ur = ex ? NULL : carve_f(&cv, C.L.O * C.L.r), *P = pk_from_d ? NULL : carve_f(&cv, C.L.r * C.L.IK);
    float *H = carve_f(&cv, hfl), *hp = hpb ? carve_f(&cv, (i64)(hpb / sizeof(float))) : NULL;
    if (ex) {
        if (!pk_from_d) {
            k_prep_p<CT><<<nblk(C.L.r * C.L.IK), NT, 0, s>>>(C, P);
            cudaError_t le = cudaGetLastError();
            if (le != cudaSuccess) rc = lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of conv locon prep P failed: %s", cudaGetErrorString(le));
        }
        if (!rc) rc = launch_h_tc<CT, CT>(C, a->x, hx, P, (CT *)H, hp, s);
        for (i64 n = 0; n < C.N && !rc; n++) {
            y_expand_args<CT>(a, (const CT *)H, n, &e);
            rc = lk_expand(&e, &dev, s);
        }
    } else if (!(rc = prep<CT>(C, Ur, P, s)) && !(rc = launch_h_tc<CT, float>(C, a->x, hx, P, H, hp, s))) {
        dim3 grid((unsigned)cdiv(T, BN), (unsigned)cdiv(C.L.O, BM));
        k_y_tc<CT><<<grid, NT, 0, s>>>(C, Ur, H, a->y0, a->y);
        cudaError_t le = cudaGetLastError();
        if (le != cudaSuccess) rc = lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of conv locon y failed: %s", cudaGetErrorString(le));
    }
    int rf = lk_scratch_free(mem, s);
    return rc ? rc : rf;
}

/* the plan of the G_P partials: halo path (k_gp_halo, bf16 CT, the geometries of h_plan's halo
   path; Z ranges of kper output tiles) or k_red_dp_tc (Z ranges of kper pixels); its grid */
typedef struct {
    int halo, MI, Z;
    i64 kper;
    unsigned gx, gy;
} lkc_gplan;

template <typename CT> struct is_bf16 { static const bool v = false; };
template <> struct is_bf16<bf16_t> { static const bool v = true; };

template <typename CT> static lkc_gplan gp_plan(const lkc_conv &C) {
    const lk_locon &L = C.L;
    const lkc_geom &g = C.g;
    const i64 T = C.N * g.sout;
    lkc_gplan p = {};
    p.MI = 1;   /* RT = 16: MI = 2 needs > 128 registers (spills at 2 blocks / SM) */
    const i64 nc = cdiv(C.I, HX_CC), rt = cdiv(L.r, 16 * p.MI), ntile = C.N * cdiv(g.out[0], HX_TH) * cdiv(g.out[1], HX_TW);
    p.halo = is_bf16<CT>::v && halo_geom(C) && nc <= 0x7fffffff && rt <= 65535;   /* plain or Tucker */
    if (!p.halo) {
        tc_split(T, L.r * L.IK, cdiv(L.IK, BN) * cdiv(L.r, BM), &p.Z, &p.kper);
        p.gx = (unsigned)cdiv(L.IK, BN);
        p.gy = (unsigned)cdiv(L.r, BM);
        return p;
    }
    /* ~512 blocks, at least 2 tiles each, Z·r·I·K < 2^24 */
    const i64 zmax = ((i64)1 << 24) / (L.r * L.IK > 0 ? L.r * L.IK : 1);
    i64 z = cdiv(512, nc * rt);
    if (z > cdiv(ntile, 2)) z = cdiv(ntile, 2);
    if (z > 64) z = 64;
    if (z > zmax) z = zmax;
    if (z < 1) z = 1;
    p.kper = cdiv(ntile > 0 ? ntile : 1, z);
    p.Z = (int)cdiv(ntile > 0 ? ntile : 1, p.kper);
    p.gx = (unsigned)nc;
    p.gy = (unsigned)rt;
    return p;
}

/* k_gp_halo's launch; only bf16 CT takes it (gp_plan) */
template <typename CT> struct gp_launch {
    static int run(const lkc_conv &, const lkc_act &, const float *, const lkc_gplan &, float *, cudaStream_t) {
        return lyco_fail(LYCO_ERR_BACKEND, "cuda: conv locon G_P halo path planned for a non-bf16 compute dtype (internal error)");
    }
};
template <> struct gp_launch<bf16_t> {
    static int run(const lkc_conv &C, const lkc_act &x, const float *GH, const lkc_gplan &p, float *part, cudaStream_t s) {
        dim3 grid(p.gx, p.gy, (unsigned)p.Z);
        k_gp_halo<bf16_t, 1><<<grid, NT, 0, s>>>(C, x, GH, part, p.kper);
        LK_LAUNCHED("conv locon d_down partials (halo path)");
        return LYCO_OK;
    }
};

/* backward reduction splits (tensor-core path): d_up over pixels (k_red_dup_tc), G_P (gp_plan) */
typedef struct {
    int Zu, Zp;
    i64 ku;
} lkc_bwd_split;
template <typename CT> static lkc_bwd_split bwd_split_tc(const lkc_conv &C) {
    const lk_locon &L = C.L;
    const i64 T = C.N * C.g.sout;
    lkc_bwd_split b;
    tc_split(T, L.O * L.r, cdiv(L.r, BN) * cdiv(L.O, BM), &b.Zu, &b.ku);
    b.Zp = gp_plan<CT>(C).Z;
    return b;
}

/* dx through k_dx_halo where it applies (LYCO_CUDA_CONV_DXHALO=0, read at each call, opts out)
   (bf16 CT, plain, halo_geom, input tiles within grid.x, ⌈I/32⌉ ≤ 65535). Its ranks padded to 16
   (rpad) or 0 when dx takes k_dx_tc. */
template <typename CT> static i64 dx_halo_rpad(const lkc_conv &C) {
    const char *e = getenv("LYCO_CUDA_CONV_DXHALO");
    if ((e && e[0] == '0') || !is_bf16<CT>::v || C.M.p || !halo_geom(C)) return 0;
    const i64 tiles = C.N * cdiv(C.g.in[0], HX_TH) * cdiv(C.g.in[1], HX_TW);
    if (tiles > 0x7fffffff || cdiv(C.I, 32) > 65535) return 0;
    return cdiv(C.L.r, HX_CC) * HX_CC;
}
/* scratch bytes of dx (Pt of the halo path) */
template <typename CT> static size_t dx_scratch_bytes(const lkc_conv &C) {
    const i64 rpad = dx_halo_rpad<CT>(C);
    return rpad ? carve_bytes(cdiv(C.I * C.L.K * rpad * 2, 4)) : 0;
}

template <typename CT> struct dx_launch {
    static int run(const lkc_conv &, const float *, const float *, i64, float *, const lkc_act &, cudaStream_t) {
        return lyco_fail(LYCO_ERR_BACKEND, "cuda: conv locon dx halo path planned for a non-bf16 compute dtype (internal error)");
    }
};
template <> struct dx_launch<bf16_t> {
    static int run(const lkc_conv &C, const float *P, const float *GH, i64 rpad, float *ws, const lkc_act &dx, cudaStream_t s) {
        bf16_t *Pt = (bf16_t *)ws;
        k_prep_pt<bf16_t><<<nblk_grid(C.I * C.L.K * rpad), NT, 0, s>>>(C, P, rpad, Pt);
        LK_LAUNCHED("conv locon dx operand (halo path)");
        dim3 grid((unsigned)(C.N * cdiv(C.g.in[0], HX_TH) * cdiv(C.g.in[1], HX_TW)), (unsigned)cdiv(C.I, 32));
        k_dx_halo<bf16_t><<<grid, NT, 0, s>>>(C, GH, Pt, rpad, dx);
        LK_LAUNCHED("conv locon dx (halo path)");
        return LYCO_OK;
    }
};

/* dx; ws: dx_scratch_bytes<CT>(C) of scratch (NULL when 0) */
template <typename CT>
static int launch_dx_tc(const lkc_conv &C, const float *P, const float *GH, const lkc_act &dx, float *ws, cudaStream_t s) {
    const i64 U = C.N * C.g.sin, rpad = dx_halo_rpad<CT>(C);
    if (rpad) return dx_launch<CT>::run(C, P, GH, rpad, ws, dx, s);
    if (cdiv(C.I, BM) > 65535) {   /* channel tiles beyond grid.y: the gather kernel */
        k_dx<CT><<<nblk_grid(U * C.I), NT, 0, s>>>(C, P, GH, dx);
        LK_LAUNCHED("conv locon dx");
        return LYCO_OK;
    }
    dim3 grid((unsigned)cdiv(U, BN), (unsigned)cdiv(C.I, BM));
    typedef wide<CT> W;
    if (C.M.p) k_dx_tc<CT, typename W::MT, W::nf, W::nf><<<grid, NT, 0, s>>>(C, P, GH, dx);
    else k_dx_tc<CT, typename W::MT, W::nx, W::nf><<<grid, NT, 0, s>>>(C, P, GH, dx);
    LK_LAUNCHED("conv locon dx (tensor cores)");
    return LYCO_OK;
}

/* The backward's other row-tile products, through k_h_rows (LYCO_CUDA_CONV_HROWS=0 restores
   k_gh_tc and the dx kernels): GH = RN_CT(c·q ⊙ Urᵀ·dy) is a 1 × 1 conv of dy (O channels in, r
   out, Pk = Urᵀ); dx = conv(GH, P flipped) at stride 1 with padding k−1−π (r channels in, I out,
   Pk[c][κ'][a] = P[a, c·K + K−1−κ']), its input GH's CT copy (GH is RN_CT, so exact) and its
   output written raw (fp32 sum → RN_CT) into a contiguous dx of dtype CT (dy is CT there too). */
static lkc_conv gh_problem(const lkc_conv &C) {
    lkc_conv G = C;
    G.I = C.L.O;
    G.L.K = 1;
    G.L.IK = C.L.O;
    G.M.p = NULL;
    for (int d = 0; d < 3; d++) {
        G.g.in[d] = C.g.out[d];
        G.g.k[d] = G.g.st[d] = G.g.dil[d] = 1;
        G.g.pad[d] = 0;
    }
    G.g.sin = C.g.sout;
    return G;
}
static lkc_conv dx_problem(const lkc_conv &C) {
    lkc_conv D = C;
    D.I = C.L.r;
    D.L.r = C.I;
    D.L.IK = C.L.r * C.L.K;
    D.L.mask.p = NULL;   /* q is in GH already */
    D.M.p = NULL;
    for (int d = 0; d < 3; d++) {
        D.g.in[d] = C.g.out[d];
        D.g.out[d] = C.g.in[d];
        D.g.pad[d] = C.g.k[d] - 1 - C.g.pad[d];
    }
    D.g.sin = C.g.sout;
    D.g.sout = C.g.sin;
    return D;
}

/* k_gp_rows's plan: geometry (HRR not capped at the image height), tasks per thread, dynamic
   shared memory, Z ranges of gkq pixel tiles, grid (channel chunks, rank tiles of 32) */
typedef struct {
    hr_geo gg;
    int gnl, gsmem, gz;
    i64 gkq;
    unsigned ggx, ggy;
} lkc_gpplan;

/* k_dy_pass's plan: rank tile, O groups, pixel tiles (per image, per block), blocks along x,
   whether dy0 is written there, its shared memory */
typedef struct {
    int gh, up;          /* GH wanted (dx, d_down / d_mid), d_up wanted (d_up, dσs) */
    int rt, zg, zp, tpi, dy0, smem;
    i64 kq;
} lkc_dpplan;

/* a 16-bit activation as k_dy_pass reads / writes it: dtype CT, pixels contiguous, 16-byte
   aligned rows and images, S % 8 == 0 */
template <typename CT> static bool dp_act_ok(const lkc_act &v, const lkc_conv &C, i64 Ch) {
    const lk_view iv = act_image_view(v, C.g, 0, Ch);
    return iv.p && v.dt == ct_of<CT>::dt && (iv.flags & LK_VEC) && C.g.sout % 8 == 0 && (C.N <= 1 || (v.sn * 2) % 16 == 0);
}

/* LYCO_CUDA_CONV_DYPASS=0 (read at each call): GH and d_up's partials by k_h_rows / k_gp_rows and
   dy0 by a copy, as before session 37 (A/B). After rows_plan's own conditions (16-bit CT, pixels,
   ranks and channels). */
template <typename CT> static bool dp_plan(const lkc_bypass_bwd_args *a, lkc_dpplan *p) {
    const char *env = getenv("LYCO_CUDA_CONV_DYPASS");
    const lkc_conv &C = a->C;
    const i64 O = C.L.O, r = C.L.r, S = C.g.sout;
    p->gh = a->dx.p || a->gD.p || a->gM.p;
    p->up = a->gU.p || a->gsigma.p;
    if ((env && env[0] == '0') || r > 32 || (!p->gh && !p->up) || !dp_act_ok<CT>(a->dy, C, O)) return false;
    p->rt = r <= 16 ? 16 : 32;
    p->zg = (int)cdiv(O, DP_O);
    p->tpi = (int)cdiv(S, DP_P);
    const i64 tiles = C.N * p->tpi;
    if (p->zg > 65535 || tiles > 0x7fffffff) return false;
    /* about one wave at two blocks per H200 multiprocessor; ≤ 64 d_up partials */
    i64 z = 264 / p->zg;
    if (z > 64) z = 64;
    if (z > tiles) z = tiles;
    if (z < 1) z = 1;
    p->kq = cdiv(tiles, z);
    /* LYCO_CUDA_CONV_DYPASS_KQ=n (read at each call): n pixel tiles per block (A/B) */
    const char *kq = getenv("LYCO_CUDA_CONV_DYPASS_KQ");
    if (kq && atoi(kq) > 0) p->kq = atoi(kq) < tiles ? atoi(kq) : tiles;
    p->zp = (int)cdiv(tiles, p->kq);
    p->dy0 = a->dy0.p && dp_act_ok<CT>(a->dy0, C, O);
    p->smem = (int)(((DP_O + p->rt) * DP_LD + DP_O * (p->rt + 8)) * sizeof(CT));
    return true;
}

typedef struct {
    int gh, dx;          /* GH / dx through k_h_rows */
    lkc_conv G, D;       /* their problems */
    lkc_hplan hg, hd;
    lkc_act ghc;         /* dx's input: GH's CT copy [n][a][pixel] (p set when carved) */
    int gp;              /* G_P's partials through k_gp_rows (x with GH's CT copy) */
    lkc_gpplan gpp;
    int up;              /* d_up's partials through k_gp_rows (dy with H in CT, as a 1 × 1 conv) */
    lkc_gpplan upp;
    int dp;              /* dy0, GH and d_up's partials by k_dy_pass (replaces gh / up when set) */
    lkc_dpplan dpp;
} lkc_rplan;

/* k_gp_rows's plan for the problem C with activation x (false when the call is not its own) */
template <typename CT> static bool gpr_plan(const lkc_conv &C, const lkc_act &x, lkc_gpplan *p) {
    hr_geo h;
    int nl, smem;
    if (!halo_geom(C) || !hr_fits<CT>(C, x, &h, &nl, &smem, 2)) return false;
    const i64 rows = HR_PIX % h.OW == 0 ? HR_PIX / h.OW : (HR_PIX - 1) / h.OW + 2;
    h.HRR = (int)rows + h.kh - 1;
    const i64 tasks = 32 * cdiv(h.HRR, 4) * (h.W / 8);
    const i64 bytes = 2 * ((i64)h.HRR * h.HWP * HX_XP + 32 * GP_PITCH) * (i64)sizeof(CT);
    const i64 nc = cdiv(C.I, HX_CC), rt = cdiv(C.L.r, 32), tiles = C.N * h.tpi;
    if (tasks > 4 * NT || bytes > 200 * 1024 || rt > 65535 || nc > 0x7fffffff) return false;
    /* one wave of ≤ 264 blocks (2 per H200 multiprocessor), ≥ 2 tiles each, Z·r·I·K < 2^24 */
    const i64 zmax = ((i64)1 << 24) / (C.L.r * C.L.IK);
    i64 z = 264 / (nc * rt);
    if (z > cdiv(tiles, 2)) z = cdiv(tiles, 2);
    if (z > 64) z = 64;
    if (z > zmax) z = zmax;
    if (z < 1) z = 1;
    p->gg = h;
    p->gnl = tasks <= 2 * NT ? 2 : 4;
    p->gsmem = (int)bytes;
    p->gkq = cdiv(tiles, z);
    p->gz = (int)cdiv(tiles, p->gkq);
    p->ggx = (unsigned)nc;
    p->ggy = (unsigned)rt;
    return true;
}

template <typename CT> static lkc_rplan rows_plan(const lkc_bypass_bwd_args *a) {
    lkc_rplan p;
    memset(&p, 0, sizeof p);
    const lkc_conv &C = a->C;
    const lkc_geom &g = C.g;
    if (sizeof(CT) != 2 || !conv_hrows() || C.N * g.sout <= 0 || C.L.r <= 0 || C.L.O <= 0) return p;
    p.G = gh_problem(C);
    p.hg = h_plan<CT>(p.G, a->dy);
    p.gh = p.hg.rows;
    p.dp = dp_plan<CT>(a, &p.dpp);
    p.gp = (p.gh || p.dp) && (a->gD.p || a->gM.p) && gpr_plan<CT>(C, a->x, &p.gpp);
    /* d_up = c·Σ dy·Hᵀ: k_gp_rows on GH's problem (dy, 1 × 1) with H (RN_CT, so CT) for GH;
       LYCO_CUDA_CONV_UPROWS=0 (read at each call): k_red_dup_tc instead (A/B) */
    const char *up = getenv("LYCO_CUDA_CONV_UPROWS");
    p.up = !(up && up[0] == '0') && p.gh && (a->gU.p || a->gsigma.p) && gpr_plan<CT>(p.G, a->dy, &p.upp);
    const lkc_act &dx = a->dx;
    if (!(p.gh || p.dp) || !dx.p || C.M.p || !halo_geom(C) || g.pad[0] > g.k[0] - 1 || g.pad[1] > g.k[1] - 1 || dx.unal ||
        dx.dt != ct_of<CT>::dt || dx.sc != g.sin || dx.sn != C.I * g.sin || dx.ss[1] != 1 ||
        (g.in[0] > 1 && dx.ss[0] != g.in[1]))
        return p;
    p.D = dx_problem(C);
    p.ghc.p = (const void *)(uintptr_t)256;   /* carved: 256-byte aligned */
    p.ghc.sn = C.L.r * g.sout;
    p.ghc.sc = g.sout;
    p.ghc.ss[0] = g.out[1];
    p.ghc.ss[1] = 1;
    p.ghc.ss[2] = 1;
    p.ghc.dt = ct_of<CT>::dt;
    p.hd = h_plan<CT>(p.D, p.ghc);
    p.dx = p.hd.rows;
    return p;
}

/* scratch bytes of the row-tile GH (Pk, partials), GH's CT copy (dx, G_P) and dx (Pk, partials) */
static size_t rows_scratch_bytes(const lkc_conv &C, const lkc_rplan &p) {
    size_t b = 0;
    if (p.dp) b += p.dpp.zg > 1 ? carve_bytes((i64)p.dpp.zg * C.L.r * C.N * C.g.sout) : 0;
    else if (p.gh) b += carve_bytes(pk_floats(p.G, p.hg)) + (p.hg.Z > 1 ? carve_bytes((i64)p.hg.Z * C.L.r * C.N * C.g.sout) : 0);
    if (p.dx || p.gp) b += carve_bytes(cdiv(C.N * C.L.r * C.g.sout, 2));
    if (p.dx) b += carve_bytes(pk_floats(p.D, p.hd)) + (p.hd.Z > 1 ? carve_bytes((i64)p.hd.Z * C.I * C.N * C.g.sin) : 0);
    return b;
}

/* dx by k_h_rows from GH's CT copy ghc */
template <typename CT>
static int rows_dx(const lkc_bypass_bwd_args *a, lkc_rplan p, const float *P, CT *ghc, lkc_carve *cv, cudaStream_t s) {
    const lkc_conv &C = a->C;
    CT *Pd = (CT *)carve_f(cv, pk_floats(p.D, p.hd));
    float *pd = p.hd.Z > 1 ? carve_f(cv, (i64)p.hd.Z * C.I * C.N * C.g.sin) : NULL;
    p.ghc.p = ghc;
    const pk_src sd = {P, C.L.K - 1, C.L.K, C.L.IK, -1};
    const hr_epi ed = {HR_RAW, NULL, ((uintptr_t)a->dx.p & 3) == 0};   /* dx: the caller's */
    return hx_launch<CT, CT>::run(p.D, p.ghc, sd, p.hd, Pd, (CT *)a->dx.p, pd, ed, s);
}

/* GH (fp32, and its CT copy ghc when dx or G_P takes the rows) and dx by k_h_rows */
template <typename CT>
static int rows_gh_dx(const lkc_bypass_bwd_args *a, lkc_rplan p, const float *Ur, const float *P, float *GH, CT *ghc,
                      lkc_carve *cv, cudaStream_t s) {
    const lkc_conv &C = a->C;
    CT *Pg = (CT *)carve_f(cv, pk_floats(p.G, p.hg));
    float *pg = p.hg.Z > 1 ? carve_f(cv, (i64)p.hg.Z * C.L.r * C.N * C.g.sout) : NULL;
    const pk_src sg = {Ur, 0, 1, C.L.r, 0};
    const hr_epi eg = {HR_GH, ghc, 1};   /* GH, ghc: scratch */
    int rc = hx_launch<CT, float>::run(p.G, a->dy, sg, p.hg, Pg, GH, pg, eg, s);
    if (rc || !p.dx) return rc;
    return rows_dx<CT>(a, p, P, ghc, cv, s);
}

/* k_dy_pass (H in CT first when d_up is wanted), then k_h_fin over its GH partials (O > 128) */
template <typename CT> struct dp_launch {
    static int run(const lkc_bypass_bwd_args *a, const lkc_dpplan &p, const lkc_hplan &hx, const float *Ur, const float *P,
                   float *GH, CT *ghc, CT *Hc, float *pu, float *hp, lkc_carve *cv, cudaStream_t s) {
        const lkc_conv &C = a->C;
        const lk_locon &L = C.L;
        const i64 S = C.g.sout, T = C.N * S;
        int rc;
        if (p.up && (rc = launch_h_tc<CT, CT>(C, a->x, hx, P, Hc, hp, s))) return rc;
        dp_args A;
        memset(&A, 0, sizeof A);
        A.dy = (const char *)a->dy.p;
        A.dsn = a->dy.sn;
        A.dsc = a->dy.sc;
        if (p.dy0) {
            A.dy0 = (char *)a->dy0.p;
            A.zsn = a->dy0.sn;
            A.zsc = a->dy0.sc;
            A.dy0_zero = a->dy0_zero;
        }
        A.Ur = Ur;
        A.H = p.up ? Hc : NULL;
        A.GH = p.gh && p.zg == 1 ? GH : NULL;
        A.part_gh = p.gh && p.zg > 1 ? carve_f(cv, (i64)p.zg * L.r * T) : NULL;
        A.part_up = pu;
        A.S = S;
        A.N = C.N;
        A.kq = p.kq;
        A.tpi = p.tpi;
        A.zg = p.zg;
        A.e.mode = HR_GH;
        A.e.H2 = ghc;
        A.e.pair = 1;
        dim3 grid((unsigned)p.zp, (unsigned)p.zg);
        if (p.rt == 16) {
            LK_SMEM_OPTIN(p.smem, k_dy_pass<CT, 16>);
            k_dy_pass<CT, 16><<<grid, NT, p.smem, s>>>(L, A);
        } else {
            LK_SMEM_OPTIN(p.smem, k_dy_pass<CT, 32>);
            k_dy_pass<CT, 32><<<grid, NT, p.smem, s>>>(L, A);
        }
        LK_LAUNCHED("conv locon one pass over dy (dy0, gh, d_up partials)");
        if (!A.part_gh) return LYCO_OK;
        k_h_fin<CT, float><<<nblk_grid(L.r * T), NT, 0, s>>>(L, S, T, A.part_gh, p.zg, GH, A.e);
        LK_LAUNCHED("conv locon gh finalise (one pass over dy)");
        return LYCO_OK;
    }
};
template <> struct dp_launch<float> {
    static int run(const lkc_bypass_bwd_args *, const lkc_dpplan &, const lkc_hplan &, const float *, const float *, float *,
                   float *, float *, float *, float *, lkc_carve *, cudaStream_t) {
        return lyco_fail(LYCO_ERR_BACKEND, "cuda: conv locon one pass over dy planned for fp32 compute (internal error)");
    }
};

/* k_gp_rows's launch (16-bit CT only: rows_plan) */
template <typename CT, bool K3, int NL>
static int gpr_run(const lkc_conv &C, const lkc_act &x, const CT *ghc, const lkc_gpplan &p, float *part, cudaStream_t s) {
    LK_SMEM_OPTIN(p.gsmem, k_gp_rows<CT, K3, NL>);
    k_gp_rows<CT, K3, NL><<<dim3(p.ggx, p.ggy, (unsigned)p.gz), NT, p.gsmem, s>>>(C, x, ghc, p.gg, part, p.gkq);
    LK_LAUNCHED("conv locon d_down / d_up partials (row tiles)");
    return LYCO_OK;
}
template <typename CT> struct gpr_launch {
    static int run(const lkc_conv &C, const lkc_act &x, const CT *ghc, const lkc_gpplan &p, float *part, cudaStream_t s) {
        if (C.g.k[0] == 3 && C.g.k[1] == 3) return p.gnl == 2 ? gpr_run<CT, true, 2>(C, x, ghc, p, part, s) : gpr_run<CT, true, 4>(C, x, ghc, p, part, s);
        return p.gnl == 2 ? gpr_run<CT, false, 2>(C, x, ghc, p, part, s) : gpr_run<CT, false, 4>(C, x, ghc, p, part, s);
    }
};
template <> struct gpr_launch<float> {
    static int run(const lkc_conv &, const lkc_act &, const float *, const lkc_gpplan &, float *, cudaStream_t) {
        return lyco_fail(LYCO_ERR_BACKEND, "cuda: conv locon G_P row tiles planned for fp32 compute (internal error)");
    }
};

template <typename CT>
static int bypass_bwd_tc_body(const lkc_bypass_bwd_args *a, const lkc_rplan &rp, const lkc_bwd_split &b, const lkc_hplan &hx,
                              lkc_carve *cv, cudaStream_t s) {
    const lkc_conv &C = a->C;
    const lk_locon &L = C.L;
    const i64 S = C.g.sout, T = C.N * S;
    const bool want_up = a->gU.p || a->gsigma.p, want_p = a->gD.p || a->gM.p;
    const size_t hpb = h_scratch_bytes(C, hx);
    float *Ur = carve_f(cv, L.O * L.r), *P = carve_f(cv, L.r * L.IK), *H = carve_f(cv, T * L.r), *GH = carve_f(cv, T * L.r);
    float *pu = carve_f(cv, (i64)b.Zu * L.O * L.r), *pp = carve_f(cv, (i64)b.Zp * L.r * L.IK), *Gp = carve_f(cv, L.r * L.IK);
    float *sigpart = carve_f(cv, (i64)nblk(L.O * L.r));
    float *hp = hpb ? carve_f(cv, (i64)(hpb / sizeof(float))) : NULL;
    const size_t dxb = a->dx.p && !rp.dx ? dx_scratch_bytes<CT>(C) : 0;
    float *ws = dxb ? carve_f(cv, (i64)(dxb / sizeof(float))) : NULL;
    CT *ghc = rp.dx || rp.gp ? (CT *)carve_f(cv, cdiv(C.N * L.r * S, 2)) : NULL;
    int rc;
    if ((rc = prep<CT>(C, Ur, P, s))) return rc;
    lk_view dv, sv;
    if (rp.dp && rp.dpp.dy0) {
        /* written by k_dy_pass below */
    } else if (a->dy0.p && T > 0 && L.O > 0 && act_rows_view(a->dy0, C, L.O, &dv) && act_rows_view(a->dy, C, L.O, &sv)) {
        if ((rc = lk_copy_round(&dv, a->dy0_zero ? NULL : &sv, L.ct, s))) return rc; /* 16-byte rows */
    } else if (a->dy0.p && T > 0 && L.O > 0) {
        i64 ny = cdiv(L.O, 16);
        if (ny > 65535) ny = 65535;
        const i64 och = cdiv(L.O, ny);
        k_dy0_tc<CT><<<dim3((unsigned)cdiv(T, NT), (unsigned)cdiv(L.O, och)), NT, 0, s>>>(C, a->dy, a->dy0, a->dy0_zero, och);
        LK_LAUNCHED("conv locon dy0");
    }
    if (rp.dp) {
        if ((rc = dp_launch<CT>::run(a, rp.dpp, hx, Ur, P, GH, ghc, (CT *)H, pu, hp, cv, s))) return rc;
        if (rp.dx && (rc = rows_dx<CT>(a, rp, P, ghc, cv, s))) return rc;
    } else if (rp.gh && (a->dx.p || want_p)) {
        if ((rc = rows_gh_dx<CT>(a, rp, Ur, P, GH, ghc, cv, s))) return rc;
    } else if (T > 0 && (a->dx.p || want_p)) {
        dim3 grid((unsigned)cdiv(T, BN), (unsigned)cdiv(L.r, BM));
        k_gh_tc<CT><<<grid, NT, 0, s>>>(C, a->dy, Ur, GH);
        LK_LAUNCHED("conv locon gh (tensor cores)");
    }
    if (a->dx.p && !rp.dx && C.N * C.I * C.g.sin > 0 && (rc = launch_dx_tc<CT>(C, P, GH, a->dx, ws, s))) return rc;
    if (want_up && rp.dp) {   /* k_dy_pass's partials [z][o][a] */
        if ((rc = finish_dup(L, 0, pu, b.Zu, Ur, a->gU, a->gsigma, sigpart, s))) return rc;
    } else if (want_up && rp.up) {   /* H in CT (H's buffer), then k_gp_rows: partials [z][a][o] */
        if ((rc = launch_h_tc<CT, CT>(C, a->x, hx, P, (CT *)H, hp, s))) return rc;
        if ((rc = gpr_launch<CT>::run(rp.G, a->dy, (const CT *)H, rp.upp, pu, s))) return rc;
        if ((rc = finish_dup(L, 0, pu, b.Zu, Ur, a->gU, a->gsigma, sigpart, s, 1))) return rc;
    } else if (want_up) {
        if (T > 0 && (rc = launch_h_tc<CT, float>(C, a->x, hx, P, H, hp, s))) return rc;
        dim3 grid((unsigned)cdiv(L.r, BN), (unsigned)cdiv(L.O, BM), (unsigned)b.Zu);
        k_red_dup_tc<CT><<<grid, NT, 0, s>>>(C, a->dy, H, pu, b.ku);
        LK_LAUNCHED("conv locon d_up partials (tensor cores)");
        if ((rc = finish_dup(L, 0, pu, b.Zu, Ur, a->gU, a->gsigma, sigpart, s))) return rc;
    }
    if (want_p) {
        const lkc_gplan gp = gp_plan<CT>(C);
        if (rp.gp) {
            if ((rc = gpr_launch<CT>::run(C, a->x, ghc, rp.gpp, pp, s))) return rc;
        } else if (gp.halo) {
            if ((rc = gp_launch<CT>::run(C, a->x, GH, gp, pp, s))) return rc;
        } else {
            dim3 grid(gp.gx, gp.gy, (unsigned)gp.Z);
            k_red_dp_tc<CT><<<grid, NT, 0, s>>>(C, a->x, GH, pp, gp.kper);
            LK_LAUNCHED("conv locon d_down partials (tensor cores)");
        }
        if ((rc = finish_gp<CT>(C, pp, rp.gp ? rp.gpp.gz : gp.Z, 1.0f, 0, a->gD, a->gM, Gp, s))) return rc;
    }
    return LYCO_OK;
}

template <typename CT> static int bypass_bwd_tc(const lkc_bypass_bwd_args *a, cudaStream_t s) {
    const lkc_conv &C = a->C;
    const lk_locon &L = C.L;
    const i64 T = C.N * C.g.sout;
    const lkc_rplan rp = rows_plan<CT>(a);
    const lkc_hplan hx = h_plan<CT>(C, a->x);
    lkc_bwd_split b = bwd_split_tc<CT>(C);
    if (rp.gp) b.Zp = rp.gpp.gz;
    if (rp.up) b.Zu = rp.upp.gz;
    if (rp.dp) b.Zu = rp.dpp.zp;
    size_t bytes = carve_bytes(L.O * L.r) + 2 * carve_bytes(L.r * L.IK) + 2 * carve_bytes(T * L.r) +
                   carve_bytes((i64)b.Zu * L.O * L.r) + carve_bytes((i64)b.Zp * L.r * L.IK) + carve_bytes((i64)nblk(L.O * L.r)) +
                   h_scratch_bytes(C, hx) + rows_scratch_bytes(C, rp) + (a->dx.p && !rp.dx ? dx_scratch_bytes<CT>(C) : 0);
    void *mem = NULL;
    int rc;
    if ((rc = lk_scratch_alloc(&mem, bytes, s))) return rc;
    lkc_carve cv = {(char *)mem, 0};
    rc = bypass_bwd_tc_body<CT>(a, rp, b, hx, &cv, s);
    int rf = lk_scratch_free(mem, s);
    return rc ? rc : rf;
}

template <typename CT> static int bypass_fwd_any(const lkc_bypass_fwd_args *a, cudaStream_t s) {
    return conv_legacy() || !geom_i32(a->C.g) ? bypass_fwd_t<CT>(a, s) : bypass_fwd_tc<CT>(a, s);
}
template <typename CT> static int bypass_bwd_any(const lkc_bypass_bwd_args *a, cudaStream_t s) {
    return conv_legacy() || !geom_i32(a->C.g) ? bypass_bwd_t<CT>(a, s) : bypass_bwd_tc<CT>(a, s);
}

#define LKC_DISPATCH(fn, a, s)                                   \
    switch ((a)->C.L.ct) {                                       \
    case DT_BF16: return fn<bf16_t>(a, (cudaStream_t)(s));       \
    case DT_F16: return fn<f16_t>(a, (cudaStream_t)(s));         \
    default: return fn<float>(a, (cudaStream_t)(s));             \
    }

extern "C" int lkc_conv_bypass_fwd(const lkc_bypass_fwd_args *a, void *stream) { LKC_DISPATCH(bypass_fwd_any, a, stream) }
extern "C" int lkc_conv_bypass_bwd(const lkc_bypass_bwd_args *a, void *stream) { LKC_DISPATCH(bypass_bwd_any, a, stream) }
extern "C" int lkc_tucker_merge_fwd(const lkc_tmerge_fwd_args *a, void *stream) { LKC_DISPATCH(tmerge_fwd_t, a, stream) }
extern "C" int lkc_tucker_merge_bwd(const lkc_tmerge_bwd_args *a, void *stream) { LKC_DISPATCH(tmerge_bwd_t, a, stream) }
extern "C" int lkc_tucker_p(const lkc_tucker_p_args *a, void *stream) { LKC_DISPATCH(tucker_p_t, a, stream) }
extern "C" int lkc_tucker_chain(const lkc_tucker_chain_args *a, void *stream) { LKC_DISPATCH(tucker_chain_t, a, stream) }
