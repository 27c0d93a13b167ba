/*
 * common.cuh — device helpers shared by every CUDA kernel of lyco.
 *
 *  - dtype access: any operand (fp16, bf16, fp32; any strides; unaligned pointers) is read as an
 *    exact fp32 and rounded (RNE) to the call's compute dtype CT in registers; outputs are
 *    rounded once (RNE: __float2bfloat16_rn / __float2half_rn, bit-identical to the host's
 *    integer conversions except for NaN payloads);
 *  - tile staging: global → registers (8-element chunks, 16-byte vector loads where the view
 *    allows, zero fill outside the matrix) → shared memory in CT; loads of the next tile are
 *    issued before the current one is consumed;
 *  - warp-level products: mma.sync m16n8k16 (bf16/fp16 operands, fp32 accumulators; sm_80+)
 *    or, for fp32 compute, FFMA with the same accumulator layout, so every epilogue maps
 *    registers to (row, col) the same way. Operands are read from shared memory through
 *    (row, k) accessors, so a tile stored in its global orientation serves either operand role
 *    (TA/TB = the k axis is the tile's row axis);
 *  - deterministic reductions: fixed-order warp shuffles and fixed-order cross-warp sums.
 *
 * Every kernel uses NT = 256 threads and at most 48 KB of static shared memory unless its
 * launcher sizes dynamic shared memory from the device's opt-in limit, so no launch fails for
 * resources on sm_80…sm_120 (__launch_bounds__(NT) keeps registers ≤ 255 per thread).
 */
#ifndef LYCO_CUDA_COMMON_CUH
#define LYCO_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda/kern.h"

extern "C" {
#include "core/core.h"
}

#define NT 256
typedef long long i64;
typedef __nv_bfloat16 bf16_t;
typedef __half f16_t;

enum { DT_F16 = 0, DT_BF16 = 1, DT_F32 = 2 };

/* Host: check a CUDA call; on failure record it and return LYCO_ERR_BACKEND. */
#define LK_CHECK(call)                                                                              \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess)                                                                      \
            return lyco_fail(LYCO_ERR_BACKEND, "cuda: %s failed: %s (%s)", #call, cudaGetErrorName(e_), \
                             cudaGetErrorString(e_));                                               \
    } while (0)
#define LK_LAUNCHED(what)                                                                           \
    do {                                                                                            \
        cudaError_t e_ = cudaGetLastError();                                                        \
        if (e_ != cudaSuccess)                                                                      \
            return lyco_fail(LYCO_ERR_BACKEND, "cuda: launch of %s failed: %s (%s)", what,          \
                             cudaGetErrorName(e_), cudaGetErrorString(e_));                         \
    } while (0)

/* The kernel's dynamic shared memory opt-in (util.cu's lk_smem_optin: once per kernel, device, size);
   the kernel last, so that a template-id's commas need no parentheses */
#define LK_SMEM_OPTIN(bytes, ...)                                                                   \
    do {                                                                                            \
        const int rc_ = lk_smem_optin((const void *)(__VA_ARGS__), (int)(bytes));                   \
        if (rc_) return rc_;                                                                        \
    } while (0)

static inline __host__ __device__ i64 cdiv(i64 a, i64 b) { return (a + b - 1) / b; }

/* ---------------------------------------------------------------------------------------------
 * scalar conversions
 * ------------------------------------------------------------------------------------------- */
__device__ __forceinline__ int dt_size(int dt) { return dt == DT_F32 ? 4 : 2; }

__device__ __forceinline__ float bits16_to_f(unsigned h, int dt) {
    return dt == DT_BF16 ? __uint_as_float(h << 16) : __half2float(__ushort_as_half((unsigned short)h));
}

/* Load one element at byte address p (any alignment when unal). */
__device__ __forceinline__ float ld_elem(const char *p, int dt, bool unal) {
    if (dt == DT_F32) {
        unsigned u;
        if (unal) {
            const unsigned char *b = (const unsigned char *)p;
            u = (unsigned)b[0] | ((unsigned)b[1] << 8) | ((unsigned)b[2] << 16) | ((unsigned)b[3] << 24);
        } else {
            u = *(const unsigned *)p;
        }
        return __uint_as_float(u);
    }
    unsigned h;
    if (unal) {
        const unsigned char *b = (const unsigned char *)p;
        h = (unsigned)b[0] | ((unsigned)b[1] << 8);
    } else {
        h = *(const unsigned short *)p;
    }
    return bits16_to_f(h, dt);
}

/* Bits of RN_dt(v). */
__device__ __forceinline__ unsigned f_to_bits(float v, int dt) {
    if (dt == DT_F32) return __float_as_uint(v);
    if (dt == DT_BF16) return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(v));
    return (unsigned)__half_as_ushort(__float2half_rn(v));
}

/* Bits of RN_dt(v) for a 16-bit dt in the low half of a 32-bit register, from the packed
   conversion (cvt.rn.{bf16,f16}x2.f32, sm_80+), so no 16-bit float-typed register exists.
   Needed by the unaligned store: ptxas 13.0 compiles `st.u8 [p], %rs` of a 16-bit register that
   holds a cvt.rn.bf16.f32 / cvt.rn.f16.f32 result as F2I.U8.F16 — a numeric conversion of the
   16-bit value to an integer, not its low byte. k_dx_halo (locon_conv.cu) and k_y<bf16> were
   compiled that way and wrote wrong low bytes into unaligned 16-bit outputs (dx off by 320–413
   ULP on the case table's odd-address conv1d rows; a printf in the kernel changed the code
   generation and hid it). tools/sass-lint.sh fails the build's tests if F2I.U8 appears again. */
__device__ __forceinline__ unsigned f_to_bits16_wide(float v, int dt) {
    unsigned w;
    if (dt == DT_BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(0.0f), "f"(v));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(0.0f), "f"(v));
    return w;
}

__device__ __forceinline__ void st_elem(char *p, int dt, bool unal, float v) {
    if (dt == DT_F32) {
        const unsigned u = __float_as_uint(v);
        if (unal) {
            for (int i = 0; i < 4; i++) p[i] = (char)(u >> (8 * i));
        } else {
            *(unsigned *)p = u;
        }
    } else {
        if (unal) {
            const unsigned u = f_to_bits16_wide(v, dt);
            p[0] = (char)u;
            p[1] = (char)(u >> 8);
        } else {
            *(unsigned short *)p = (unsigned short)f_to_bits(v, dt);
        }
    }
}

/* RN_dt(v) as a float */
__device__ __forceinline__ float round_to(float v, int dt) {
    if (dt == DT_F32) return v;
    if (dt == DT_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    return __half2float(__float2half_rn(v));
}

/* Compute-dtype traits: CT is bf16_t, f16_t or float. */
template <typename CT> struct ct_of;
template <> struct ct_of<bf16_t> {
    static const int dt = DT_BF16;
    static __device__ __forceinline__ bf16_t from(float v) { return __float2bfloat16_rn(v); }
    static __device__ __forceinline__ float to(bf16_t v) { return __bfloat162float(v); }
};
template <> struct ct_of<f16_t> {
    static const int dt = DT_F16;
    static __device__ __forceinline__ f16_t from(float v) { return __float2half_rn(v); }
    static __device__ __forceinline__ float to(f16_t v) { return __half2float(v); }
};
template <> struct ct_of<float> {
    static const int dt = DT_F32;
    static __device__ __forceinline__ float from(float v) { return v; }
    static __device__ __forceinline__ float to(float v) { return v; }
};
template <typename CT> __device__ __forceinline__ float rnd_ct(float v) { return ct_of<CT>::to(ct_of<CT>::from(v)); }

/* ---------------------------------------------------------------------------------------------
 * views
 * ------------------------------------------------------------------------------------------- */
__device__ __forceinline__ const char *vaddr(const lk_view &v, i64 r, i64 c) {
    return (const char *)v.p + (r * v.s0 + c * v.s1) * (i64)dt_size(v.dt);
}
/* Element (r, c) widened exactly to fp32 (no bounds check). */
__device__ __forceinline__ float vload(const lk_view &v, i64 r, i64 c) {
    return ld_elem(vaddr(v, r, c), v.dt, v.flags & LK_UNALIGNED);
}
__device__ __forceinline__ void vstore(const lk_view &v, i64 r, i64 c, float x) {
    st_elem((char *)vaddr(v, r, c), v.dt, v.flags & LK_UNALIGNED, x);
}
/* Element i of a 1×n vector view, or `dflt` when the view is absent. */
__device__ __forceinline__ float vget(const lk_view &v, i64 i, float dflt) {
    return v.p ? vload(v, 0, i) : dflt;
}
/* True when chunks along columns are better mapped with rows fastest (column-major storage). */
__device__ __forceinline__ bool v_colmajor(const lk_view &v) { return v.rows > 1 && v.s0 == 1 && v.s1 != 1; }

/* A 16-byte chunk of eight 16-bit values (dtype dt, element 0 in the low half of .x) as fp32, and
   back (each value rounded once to dt). */
__device__ __forceinline__ void unpack8_16(float (&o)[8], uint4 u, int dt) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        o[2 * i] = bits16_to_f(w[i] & 0xffffu, dt);
        o[2 * i + 1] = bits16_to_f(w[i] >> 16, dt);
    }
}
__device__ __forceinline__ uint4 pack8_16(const float (&x)[8], int dt) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) w[i] = f_to_bits(x[2 * i], dt) | (f_to_bits(x[2 * i + 1], dt) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* 8 consecutive elements (r, c..c+7) as fp32; zero outside the matrix. */
__device__ __forceinline__ void vload8(float (&o)[8], const lk_view &v, i64 r, i64 c) {
    if (r < v.rows && c + 8 <= v.cols && (v.flags & LK_VEC)) {
        const char *p = vaddr(v, r, c);
        if (v.dt == DT_F32) {
            float4 a = *(const float4 *)p, b = *(const float4 *)(p + 16);
            o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
            o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
        } else {
            unpack8_16(o, *(const uint4 *)p, v.dt);
        }
        return;
    }
#pragma unroll
    for (int e = 0; e < 8; e++) o[e] = (r < v.rows && c + e < v.cols) ? vload(v, r, c + e) : 0.0f;
}

/* Store 8 consecutive elements (r, c..c+7), each rounded once to the view's dtype; bounds kept. */
__device__ __forceinline__ void vstore8(const lk_view &v, i64 r, i64 c, const float (&x)[8]) {
    if (r >= v.rows) return;
    if (c + 8 <= v.cols && (v.flags & LK_VEC)) {
        char *p = (char *)vaddr(v, r, c);
        if (v.dt == DT_F32) {
            *(float4 *)p = make_float4(x[0], x[1], x[2], x[3]);
            *(float4 *)(p + 16) = make_float4(x[4], x[5], x[6], x[7]);
        } else {
            *(uint4 *)p = pack8_16(x, v.dt);
        }
        return;
    }
#pragma unroll
    for (int e = 0; e < 8; e++)
        if (c + e < v.cols) vstore(v, r, c + e, x[e]);
}

/* ---------------------------------------------------------------------------------------------
 * tile staging: an R×C tile of a view, in 8-column chunks spread over the NT threads.
 * Chunk q covers (rr, cc..cc+7); row-major views take columns fastest (coalesced 16-byte
 * loads), column-major views take rows fastest (coalesced scalar loads).
 * ------------------------------------------------------------------------------------------- */
template <int R, int C> struct tile_regs {
    static const int NCH = R * C / 8;
    static const int CH = (NCH + NT - 1) / NT;
    float v[CH][8];
};

template <int R, int C> __device__ __forceinline__ void chunk_pos(int q, bool colmajor, int &rr, int &cc) {
    if (colmajor) {
        rr = q % R;
        cc = (q / R) * 8;
    } else {
        rr = q / (C / 8);
        cc = (q % (C / 8)) * 8;
    }
}

template <int R, int C>
__device__ __forceinline__ void tile_load(tile_regs<R, C> &t, const lk_view &v, i64 r0, i64 c0, bool colmajor) {
#pragma unroll
    for (int k = 0; k < tile_regs<R, C>::CH; k++) {
        int q = threadIdx.x + k * NT;
        if (q < tile_regs<R, C>::NCH) {
            int rr, cc;
            chunk_pos<R, C>(q, colmajor, rr, cc);
            vload8(t.v[k], v, r0 + rr, c0 + cc);
        }
    }
}

/* Round each staged value to CT and store into s[rr*ld + cc + e]. */
template <typename CT, int R, int C>
__device__ __forceinline__ void tile_store(const tile_regs<R, C> &t, CT *s, int ld, bool colmajor) {
#pragma unroll
    for (int k = 0; k < tile_regs<R, C>::CH; k++) {
        int q = threadIdx.x + k * NT;
        if (q < tile_regs<R, C>::NCH) {
            int rr, cc;
            chunk_pos<R, C>(q, colmajor, rr, cc);
#pragma unroll
            for (int e = 0; e < 8; e++) s[rr * ld + cc + e] = ct_of<CT>::from(t.v[k][e]);
        }
    }
}

/* Split: v as a sum of NS values of CT (bf16: 3 parts, 24 significant bits; fp16: 2 parts;
   fp32: itself), each part exact in fp32, so products with a CT operand on the tensor cores
   keep fp32-level accuracy (one MMA per part). The differences v − hi and r − mid are exact. */
template <typename CT> struct nsplit { static const int n = 1; };
template <> struct nsplit<bf16_t> { static const int n = 3; };
template <> struct nsplit<f16_t> { static const int n = 2; };

template <typename CT> __device__ __forceinline__ void store_parts(CT *const *parts, int np, int idx, float v) {
    CT h = ct_of<CT>::from(v);
    parts[0][idx] = h;
    if (np > 1) {
        float r = v - ct_of<CT>::to(h);
        CT m = ct_of<CT>::from(r);
        parts[1][idx] = m;
        if (np > 2) parts[2][idx] = ct_of<CT>::from(r - ct_of<CT>::to(m));
    }
}

/* Staged tile → np parts (np = 1: plain rounding to CT). */
template <typename CT, int R, int C>
__device__ __forceinline__ void tile_store_parts(const tile_regs<R, C> &t, CT *const *parts, int np, int ld, bool colmajor) {
#pragma unroll
    for (int k = 0; k < tile_regs<R, C>::CH; k++) {
        int q = threadIdx.x + k * NT;
        if (q < tile_regs<R, C>::NCH) {
            int rr, cc;
            chunk_pos<R, C>(q, colmajor, rr, cc);
#pragma unroll
            for (int e = 0; e < 8; e++) store_parts<CT>(parts, np, rr * ld + cc + e, t.v[k][e]);
        }
    }
}

/* Zero an R×C region of a shared tile. */
template <typename CT> __device__ __forceinline__ void smem_zero(CT *s, int n) {
    for (int i = threadIdx.x; i < n; i += NT) s[i] = ct_of<CT>::from(0.0f);
}

/* ---------------------------------------------------------------------------------------------
 * asynchronous staging (cp.async, sm_80+): a raw R×C tile of a view, in the view's own dtype,
 * lands in shared memory with a row pitch of C + 16/elem_size elements (16-byte rows); chunks
 * outside the matrix are zero-filled; views without LK_VEC (strided, unaligned) and partial
 * chunks at the right edge are copied element by element (synchronously, exact bits).
 * A stage holds several such tiles; S stages keep S−1 tiles in flight while one is consumed.
 * ------------------------------------------------------------------------------------------- */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* wait until at most n groups are pending (n = 0..6; larger n waits as for 6) */
__device__ __forceinline__ void cp_wait(int n) {
    if (n <= 0) asm volatile("cp.async.wait_group 0;\n" ::);
    else if (n == 1) asm volatile("cp.async.wait_group 1;\n" ::);
    else if (n == 2) asm volatile("cp.async.wait_group 2;\n" ::);
    else if (n == 3) asm volatile("cp.async.wait_group 3;\n" ::);
    else if (n == 4) asm volatile("cp.async.wait_group 4;\n" ::);
    else if (n == 5) asm volatile("cp.async.wait_group 5;\n" ::);
    else asm volatile("cp.async.wait_group 6;\n" ::);
}

/* bytes of a raw R×C stage tile for dtype dt (worst case: fp32) */
static inline __host__ __device__ int raw_bytes(int R, int C, int dt) {
    int es = dt == DT_F32 ? 4 : 2;
    return (R * (C + 16 / es) * es + 127) / 128 * 128;
}
__device__ __forceinline__ int raw_pitch(int C, int dt) { return C + 16 / dt_size(dt); }

/* ES = element size: the chunk geometry is compile-time (no division per chunk); vector views
   take cp.async, the rest exact element copies. (An out-of-line element copy made k_expand 3x
   slower on the H200 at 7e88a0c: keep this inline.) */
template <int R, int C, int ES> __device__ __forceinline__ void raw_issue_es(char *st, const lk_view &v, i64 r0, i64 c0) {
    const int epc = 16 / ES, cpr = C / epc, pitch = C + epc;
    const bool fast = (v.flags & LK_VEC) != 0;
    for (int q = threadIdx.x; q < R * cpr; q += NT) {
        const int rr = q / cpr, cc = (q % cpr) * epc;
        const i64 r = r0 + rr, c = c0 + cc;
        char *dst = st + (rr * pitch + cc) * ES;
        if (fast && r < v.rows && c + epc <= v.cols) {
            cp_async16(dst, (const char *)v.p + (r * v.s0 + c) * ES, 16);
        } else if (fast && (r >= v.rows || c >= v.cols)) {
            cp_async16(dst, v.p, 0);
        } else {
            for (int e = 0; e < epc; e++) {
                unsigned b = (r < v.rows && c + e < v.cols) ? f_to_bits(vload(v, r, c + e), v.dt) : 0u;
                if (ES == 4) *(unsigned *)(dst + 4 * e) = b;
                else *(unsigned short *)(dst + 2 * e) = (unsigned short)b;
            }
        }
    }
}

/* An R×C tile (C a multiple of 8) of a 16-bit row-major view at (r0, c0) into shared memory with
   row pitch C + 8: one 16-byte cp.async per chunk, the part outside the view zero-filled (a chunk
   across the right edge copies its in-range elements; rows are 16-byte aligned, LK_VEC). The loop
   has a compile-time trip count and the per-chunk offsets are 32-bit from a per-tile base (the
   first version, a run-time loop with 64-bit indices, cost ~50 instructions per cp.async). Used by
   the lean kernels (expand_lean.cu, reduce_lean.cu). */
template <int R, int C> __device__ __forceinline__ void lean_issue(char *dst, const lk_view &v, i64 r0, i64 c0) {
    const int cpr = C / 8, n = R * cpr, iters = (n + NT - 1) / NT;
    const i64 rl = v.rows - r0, cl = v.cols - c0;
    const int rows_in = rl < R ? (int)rl : R, cols_in = cl < C ? (int)cl : C;
    const char *base = (const char *)v.p + (r0 * v.s0 + c0) * 2;
    const i64 pitch = v.s0 * 2;
#pragma unroll
    for (int k = 0; k < iters; k++) {
        const int q = (int)threadIdx.x + k * NT;
        if (n % NT == 0 || q < n) {
            const int rr = q / cpr, cc = (q % cpr) * 8;
            const bool in = rr < rows_in && cc < cols_in;
            const int bytes = in ? (cols_in - cc >= 8 ? 16 : (cols_in - cc) * 2) : 0;
            cp_async16(dst + (rr * (C + 8) + cc) * 2, in ? base + rr * pitch + cc * 2 : (const char *)v.p, bytes);
        }
    }
}

/* The S-stage cp.async pipeline the lean kernels run (reduce_lean.cu, merge_bwd_onepass.cu) over its nk steps: issue(stage, s)
   loads step s into a stage as one group, use(stage, s) consumes it. One barrier a step: step s
   is visible and every warp is past step s − 1, whose stage is refilled with step s + S − 1
   while step s is used. Returns with every group waited for. */
template <class ISSUE, class USE>
__device__ __forceinline__ void lean_pipeline(char *dsm, int stage_bytes, int S, int nk, const ISSUE &issue, const USE &use) {
    for (int s = 0; s < S - 1; s++) {
        if (s < nk) issue(dsm + s * stage_bytes, s);
        cp_commit();
    }
    for (int s = 0; s < nk; s++) {
        cp_wait(S - 2);
        __syncthreads();
        const int n = s + S - 1;
        if (n < nk) issue(dsm + (n % S) * stage_bytes, n);
        cp_commit();
        use((const char *)dsm + (s % S) * stage_bytes, s);
    }
    cp_wait(0);
}

/* An integer tuning / A/B knob from the environment: its value, or dflt when unset or empty. */
static inline int lk_env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* Whether a view serves the lean kernels as is: present, in dtype ct, row-major with 16-byte rows. */
static inline bool lean_view_ok(const lk_view &v, int ct) { return v.p && v.dt == ct && (v.flags & LK_VEC) && v.s1 == 1; }

/* lean_issue's tile through registers instead: lean_fetch loads the thread's chunks of the R×C tile
   (R·C/8 a multiple of NT: chunk q = thread + k·NT) by plain 16-byte global loads, the part outside
   the view zero (a chunk across the right edge: its in-range elements one by one); lean_put writes
   them into the stage (row pitch C + 8). The same bytes land where lean_issue puts them. Why: the
   H200 streams a 2-D tile at the copy rate through registers but ~15–30 % slower by cp.async
   (tools/stream_probe.cu, 16×128 tiles, 8192–11008 × 4096: 3.56–3.72 against 2.97–3.11 TB/s;
   docs/kernels.md, eighteenth session). Used by expand_lean.cu's plain merge (a block per tile,
   the base loaded before the operands' cp.async and put before the product). */
template <int R, int C> struct lean_chunks {
    static const int N = R * C / 8 / NT;
};
template <int R, int C>
__device__ __forceinline__ void lean_fetch(uint4 (&reg)[lean_chunks<R, C>::N], const lk_view &v, i64 r0, i64 c0) {
    static_assert(R * C / 8 % NT == 0, "lean_fetch: whole chunks per thread");
    const int cpr = C / 8;
    const i64 rl = v.rows - r0, cl = v.cols - c0;
    const int rows_in = rl < R ? (int)rl : R, cols_in = cl < C ? (int)cl : C;
    const char *base = (const char *)v.p + (r0 * v.s0 + c0) * 2;
    const i64 pitch = v.s0 * 2;
#pragma unroll
    for (int k = 0; k < lean_chunks<R, C>::N; k++) {
        const int q = (int)threadIdx.x + k * NT, rr = q / cpr, cc = (q % cpr) * 8;
        const char *src = base + rr * pitch + cc * 2;
        if (rr < rows_in && cc + 8 <= cols_in) {
            reg[k] = *(const uint4 *)src;
        } else {
            unsigned w[4] = {0u, 0u, 0u, 0u};
            const int n = rr < rows_in ? cols_in - cc : 0;
#pragma unroll
            for (int e = 0; e < 8; e++)
                if (e < n) w[e >> 1] |= (unsigned)((const unsigned short *)src)[e] << (16 * (e & 1));
            reg[k] = make_uint4(w[0], w[1], w[2], w[3]);
        }
    }
}
template <int R, int C> __device__ __forceinline__ void lean_put(char *dst, const uint4 (&reg)[lean_chunks<R, C>::N]) {
    const int cpr = C / 8;
#pragma unroll
    for (int k = 0; k < lean_chunks<R, C>::N; k++) {
        const int q = (int)threadIdx.x + k * NT, rr = q / cpr, cc = (q % cpr) * 8;
        *(uint4 *)(dst + (rr * (C + 8) + cc) * 2) = reg[k];
    }
}

/* The store counterpart of lean_issue: an R×C tile of 16-bit values in shared memory (row pitch
   C + 8 halfwords) to v at (r0, c0) — 16-byte stores inside v, the in-range elements of a chunk
   across its right edge one by one, nothing below or right of v. The whole block takes part. */
template <int R, int C> __device__ __forceinline__ void lean_store(const char *tile, const lk_view &v, i64 r0, i64 c0) {
    const int cpr = C / 8;
    const i64 rl = v.rows - r0, cl = v.cols - c0;
    const int rows_in = rl < R ? (int)rl : R, cols_in = cl < C ? (int)cl : C;
    char *base = (char *)v.p + (r0 * v.s0 + c0) * 2;
    const i64 pitch = v.s0 * 2;
#pragma unroll
    for (int k = 0; k < (R * cpr + NT - 1) / NT; k++) {
        const int q = (int)threadIdx.x + k * NT, rr = q / cpr, cc = (q % cpr) * 8;
        if (q >= R * cpr || rr >= rows_in || cc >= cols_in) continue;
        const char *src = tile + (rr * (C + 8) + cc) * 2;
        char *dst = base + rr * pitch + cc * 2;
        if (cc + 8 <= cols_in) *(uint4 *)dst = *(const uint4 *)src;
        else
            for (int e = 0; e < cols_in - cc; e++) ((unsigned short *)dst)[e] = ((const unsigned short *)src)[e];
    }
}

template <int R, int C> __device__ __forceinline__ void raw_issue(char *st, const lk_view &v, i64 r0, i64 c0) {
    if (v.dt == DT_F32) raw_issue_es<R, C, 4>(st, v, r0, c0);
    else raw_issue_es<R, C, 2>(st, v, r0, c0);
}

/* element (rr, cc) of a raw stage tile, widened to fp32 */
__device__ __forceinline__ float raw_get(const char *st, int pitch, int dt, int rr, int cc) {
    const char *p = st + (rr * pitch + cc) * dt_size(dt);
    return dt == DT_F32 ? *(const float *)p : bits16_to_f(*(const unsigned short *)p, dt);
}

/* The CT operand of a raw stage tile: the tile itself when it is already CT and one part is
   wanted; else np parts converted into buf (part p at buf + p·R·(C+8)). Returns the part count;
   the caller synchronises before the product reads the parts. */
template <typename CT, int R, int C>
__device__ __forceinline__ int raw_operand(const char *st, int dt, int np, CT *buf, CT **parts, int *ld) {
    if (dt == ct_of<CT>::dt && np == 1) {
        parts[0] = (CT *)st;
        *ld = C + 16 / (int)sizeof(CT);
        return 1;
    }
    const int l = C + 8, pitch = raw_pitch(C, dt);
    for (int p = 0; p < np; p++) parts[p] = buf + p * R * l;
    for (int idx = threadIdx.x; idx < R * C; idx += NT) {
        int rr = idx / C, cc = idx % C;
        store_parts<CT>(parts, np, rr * l + cc, raw_get(st, pitch, dt, rr, cc));
    }
    *ld = l;
    return np;
}

/* ---------------------------------------------------------------------------------------------
 * warp-level products. The warp owns an (MI·16) × (NI·8) block of C at (m0, n0).
 * A(m, k) = TA ? As[k*lda + m] : As[m*lda + k];   B(n, k) = TB ? Bs[k*ldb + n] : Bs[n*ldb + k].
 * Accumulator element (mi, ni, e) sits at row m0 + mi*16 + g + 8*(e>>1), col n0 + ni*8 + 2t + (e&1)
 * with g = lane/4, t = lane%4.
 * ------------------------------------------------------------------------------------------- */
template <typename CT> __device__ __forceinline__ unsigned short ct_bits(CT v);
template <> __device__ __forceinline__ unsigned short ct_bits<bf16_t>(bf16_t v) { return __bfloat16_as_ushort(v); }
template <> __device__ __forceinline__ unsigned short ct_bits<f16_t>(f16_t v) { return __half_as_ushort(v); }

/* elements (row, k) and (row, k+1) of a 16-bit operand, packed */
template <typename CT, bool TR>
__device__ __forceinline__ unsigned ld_pair(const CT *s, int ld, int row, int k) {
    if (!TR) return *(const unsigned *)(s + row * ld + k);
    return (unsigned)ct_bits<CT>(s[k * ld + row]) | ((unsigned)ct_bits<CT>(s[(k + 1) * ld + row]) << 16);
}

template <typename CT> __device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]);
template <> __device__ __forceinline__ void mma16816<bf16_t>(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ __forceinline__ void mma16816<f16_t>(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* 8×8 16-bit matrices by ldmatrix (x4: four, x2: two); TR: each transposed as it is loaded. */
template <bool TR> __device__ __forceinline__ void ldm4(unsigned (&r)[4], const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    if (TR)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
}
template <bool TR> __device__ __forceinline__ void ldm2(unsigned (&r)[2], const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    if (TR) asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
    else asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}

/* The lane's ldmatrix row address for A's fragment (mi) and for B's pair of n8 blocks starting
   at n (x4; x2 reads lanes 0–15 only, which these also serve): they put the four matrices where
   mma.m16n8k16 wants them, A a0..a3 = (m 0–7 | 8–15) × (k 0–7 | 8–15), B b0, b1 = k 0–7, 8–15
   of n block 0, then of n block 1. */
template <typename CT, bool TA>
__device__ __forceinline__ const CT *ldm_a_addr(const CT *As, int lda, int m, int k0, int lane) {
    return TA ? As + (k0 + (lane & 7) + ((lane >> 4) << 3)) * lda + m + ((lane >> 3) & 1) * 8
              : As + (m + (lane & 15)) * lda + k0 + (lane >> 4) * 8;
}
template <typename CT, bool TB>
__device__ __forceinline__ const CT *ldm_b_addr(const CT *Bs, int ldb, int n, int k0, int lane) {
    return TB ? Bs + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ldb + n + (lane >> 4) * 8
              : Bs + (n + (lane & 7) + ((lane >> 4) << 3)) * ldb + k0 + ((lane >> 3) & 1) * 8;
}

/* C += A·Bᵀ over k in [0, kk) (kk a multiple of 16), fragments by 32-bit loads (any alignment,
   shared or global operands). */
template <typename CT, int MI, int NI, bool TA, bool TB> struct warp_mma {
    static __device__ __forceinline__ void run(float (&acc)[MI][NI][4], const CT *As, int lda, const CT *Bs, int ldb,
                                               int m0, int n0, int kk) {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        for (int k0 = 0; k0 < kk; k0 += 16) {
            unsigned a[MI][4], b[NI][2];
#pragma unroll
            for (int mi = 0; mi < MI; mi++) {
                int m = m0 + mi * 16 + g;
                a[mi][0] = ld_pair<CT, TA>(As, lda, m, k0 + 2 * t);
                a[mi][1] = ld_pair<CT, TA>(As, lda, m + 8, k0 + 2 * t);
                a[mi][2] = ld_pair<CT, TA>(As, lda, m, k0 + 2 * t + 8);
                a[mi][3] = ld_pair<CT, TA>(As, lda, m + 8, k0 + 2 * t + 8);
            }
#pragma unroll
            for (int ni = 0; ni < NI; ni++) {
                int n = n0 + ni * 8 + g;
                b[ni][0] = ld_pair<CT, TB>(Bs, ldb, n, k0 + 2 * t);
                b[ni][1] = ld_pair<CT, TB>(Bs, ldb, n, k0 + 2 * t + 8);
            }
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
#pragma unroll
                for (int ni = 0; ni < NI; ni++) mma16816<CT>(acc[mi][ni], a[mi], b[ni]);
        }
    }
};

/* The same product with the fragments by ldmatrix: the same registers as warp_mma, so the same
   results bit for bit, with 1 instruction per 16×16 A fragment or pair of B fragments where
   ld_pair needs 4 (8 loads and 4 merges for an operand stored k-major). The caller guarantees
   that both operands sit in shared memory, 16-byte aligned, with lda, ldb, m0, n0 multiples of
   8 (every cp.async stage tile and conversion buffer of this project). fp32: warp_mma's FFMA. */
template <typename CT, int MI, int NI, bool TA, bool TB> struct warp_mma_ldm {
    static __device__ __forceinline__ void run(float (&acc)[MI][NI][4], const CT *As, int lda, const CT *Bs, int ldb,
                                               int m0, int n0, int kk) {
        const int lane = threadIdx.x & 31;
        for (int k0 = 0; k0 < kk; k0 += 16) {
            unsigned a[MI][4], b[NI][2];
#pragma unroll
            for (int mi = 0; mi < MI; mi++) ldm4<TA>(a[mi], ldm_a_addr<CT, TA>(As, lda, m0 + mi * 16, k0, lane));
#pragma unroll
            for (int nj = 0; nj < NI / 2; nj++) {
                unsigned q[4];
                ldm4<TB>(q, ldm_b_addr<CT, TB>(Bs, ldb, n0 + nj * 16, k0, lane));
                b[2 * nj][0] = q[0];
                b[2 * nj][1] = q[1];
                b[2 * nj + 1][0] = q[2];
                b[2 * nj + 1][1] = q[3];
            }
            if (NI & 1) ldm2<TB>(b[NI - 1], ldm_b_addr<CT, TB>(Bs, ldb, n0 + (NI - 1) * 8, k0, lane));
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
#pragma unroll
                for (int ni = 0; ni < NI; ni++) mma16816<CT>(acc[mi][ni], a[mi], b[ni]);
        }
    }
};

/* fp32 compute: FFMA in IEEE fp32 with the same accumulator layout. */
template <int MI, int NI, bool TA, bool TB> struct warp_mma<float, MI, NI, TA, TB> {
    static __device__ __forceinline__ void run(float (&acc)[MI][NI][4], const float *As, int lda, const float *Bs,
                                               int ldb, int m0, int n0, int kk) {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        for (int k = 0; k < kk; k++) {
            float a[MI][2], b[NI][2];
#pragma unroll
            for (int mi = 0; mi < MI; mi++) {
                int m = m0 + mi * 16 + g;
                a[mi][0] = TA ? As[k * lda + m] : As[m * lda + k];
                a[mi][1] = TA ? As[k * lda + m + 8] : As[(m + 8) * lda + k];
            }
#pragma unroll
            for (int ni = 0; ni < NI; ni++) {
                int n = n0 + ni * 8 + 2 * t;
                b[ni][0] = TB ? Bs[k * ldb + n] : Bs[n * ldb + k];
                b[ni][1] = TB ? Bs[k * ldb + n + 1] : Bs[(n + 1) * ldb + k];
            }
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
#pragma unroll
                for (int ni = 0; ni < NI; ni++) {
                    acc[mi][ni][0] = fmaf(a[mi][0], b[ni][0], acc[mi][ni][0]);
                    acc[mi][ni][1] = fmaf(a[mi][0], b[ni][1], acc[mi][ni][1]);
                    acc[mi][ni][2] = fmaf(a[mi][1], b[ni][0], acc[mi][ni][2]);
                    acc[mi][ni][3] = fmaf(a[mi][1], b[ni][1], acc[mi][ni][3]);
                }
        }
    }
};
template <int MI, int NI, bool TA, bool TB> struct warp_mma_ldm<float, MI, NI, TA, TB> : warp_mma<float, MI, NI, TA, TB> {};

template <int MI, int NI> __device__ __forceinline__ void acc_zero(float (&acc)[MI][NI][4]) {
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.0f;
}

/* Row / column (within the block tile) of accumulator element (mi, ni, e) of this thread. */
__device__ __forceinline__ int acc_row(int m0, int mi, int e) { return m0 + mi * 16 + ((threadIdx.x & 31) >> 2) + 8 * (e >> 1); }
__device__ __forceinline__ int acc_col(int n0, int ni, int e) { return n0 + ni * 8 + 2 * (threadIdx.x & 3) + (e & 1); }

/* Accumulators → fp32 shared tile Cs[row*ldc + col], each scaled by rowc[row] (NULL = 1). */
template <int MI, int NI>
__device__ __forceinline__ void acc_to_smem(const float (&acc)[MI][NI][4], float *Cs, int ldc, int m0, int n0, const float *rowc) {
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = acc_row(m0, mi, e), c = acc_col(n0, ni, e);
                Cs[r * ldc + c] = acc[mi][ni][e] * (rowc ? rowc[r] : 1.0f);
            }
}

/* ---------------------------------------------------------------------------------------------
 * pipelined product: acc += A·Bᵀ over nk steps; step s stages the AR×AC tile of A at
 * (r0 + s·dr, c0 + s·dc) and the BR×BC tile of B likewise, raw, S stages deep (S−1 in flight);
 * operands not already in CT (or asked for in np > 1 parts) are converted into bufA / bufB.
 * The k extent of a step is AC (A not transposed) or AR (TA). copyA (optional): each staged
 * A tile is also written (do_copy), rounded to CT then to copyA's dtype, to copyA at the same
 * coordinates (bypass backward's dy0 = RN(dy) rides on the dy stream). Ends with all
 * copies complete and a barrier (the stage memory is free again).
 * ------------------------------------------------------------------------------------------- */
struct pipe_op {
    lk_view v;
    i64 r0, c0, dr, dc;
    int np;
};

__host__ __device__ static inline int pipe_stage_bytes(int AR, int AC, int adt, int BR, int BC, int bdt) {
    return raw_bytes(AR, AC, adt) + raw_bytes(BR, BC, bdt);
}

template <int AR, int AC, int BR, int BC>
__device__ __forceinline__ void pipe_issue(char *st, const pipe_op &A, const pipe_op &B, int s) {
    raw_issue<AR, AC>(st, A.v, A.r0 + s * A.dr, A.c0 + s * A.dc);
    raw_issue<BR, BC>(st + raw_bytes(AR, AC, A.v.dt), B.v, B.r0 + s * B.dr, B.c0 + s * B.dc);
}

template <typename CT, int AR, int AC, int BR, int BC, bool TA, bool TB, int MI, int NI>
__device__ __forceinline__ void piped_mma(float (&acc)[MI][NI][4], const pipe_op &A, const pipe_op &B, int nk, int S,
                                          char *stages, CT *bufA, CT *bufB, int m0, int n0, const lk_view &copyA,
                                          bool do_copy) {
    const int SA = raw_bytes(AR, AC, A.v.dt), SS = SA + raw_bytes(BR, BC, B.v.dt);
    const int KK = TA ? AR : AC;
    for (int s = 0; s < S - 1; s++) {
        if (s < nk) pipe_issue<AR, AC, BR, BC>(stages + s * SS, A, B, s);
        cp_commit();
    }
    for (int s = 0; s < nk; s++) {
        cp_wait(S - 2);
        __syncthreads();
        char *st = stages + (s % S) * SS;
        if (do_copy) {
            /* A, CT and copyA of one dtype: the staged bits are the result (16-byte copies) */
            const int pitch = raw_pitch(AC, A.v.dt), es = dt_size(A.v.dt);
            const bool same = A.v.dt == ct_of<CT>::dt && copyA.dt == A.v.dt && (copyA.flags & LK_VEC);
            for (int q = threadIdx.x; q < AR * AC / 8; q += NT) {
                int rr = q / (AC / 8), cc = (q % (AC / 8)) * 8;
                const i64 gr = A.r0 + s * A.dr + rr, gc = A.c0 + s * A.dc + cc;
                if (same && gr < copyA.rows && gc + 8 <= copyA.cols && ((uintptr_t)vaddr(copyA, gr, gc) & 15) == 0) {
                    const char *src = st + (rr * pitch + cc) * es;
                    char *dst = (char *)vaddr(copyA, gr, gc);
                    *(uint4 *)dst = *(const uint4 *)src;
                    if (es == 4) *(uint4 *)(dst + 16) = *(const uint4 *)(src + 16);
                    continue;
                }
                float v8[8];
#pragma unroll
                for (int e = 0; e < 8; e++) v8[e] = rnd_ct<CT>(raw_get(st, pitch, A.v.dt, rr, cc + e));
                vstore8(copyA, gr, gc, v8);
            }
        }
        CT *ap[3], *bp[3];
        int lda, ldb;
        const int na = raw_operand<CT, AR, AC>(st, A.v.dt, A.np, bufA, ap, &lda);
        const int nb = raw_operand<CT, BR, BC>(st + SA, B.v.dt, B.np, bufB, bp, &ldb);
        __syncthreads();
        {
            int n = s + S - 1;
            if (n < nk) pipe_issue<AR, AC, BR, BC>(stages + (n % S) * SS, A, B, n);
            cp_commit();
        }
        for (int p = na - 1; p >= 0; p--) warp_mma_ldm<CT, MI, NI, TA, TB>::run(acc, ap[p], lda, bp[0], ldb, m0, n0, KK);
        for (int p = nb - 1; p >= 1; p--) warp_mma_ldm<CT, MI, NI, TA, TB>::run(acc, ap[0], lda, bp[p], ldb, m0, n0, KK);
    }
    cp_wait(0);
    __syncthreads();
}

/* bytes of the conversion buffer of an R×C operand in np parts of CT (0 when no conversion) */
__host__ __device__ static inline int conv_bytes(int R, int C, int dt, int np, int ct) {
    if (dt == ct && np == 1) return 0;
    int sz = ct == DT_F32 ? 4 : 2;
    return (np * R * (C + 8) * sz + 127) / 128 * 128;
}
__host__ __device__ static inline int al128(int b) { return (b + 127) / 128 * 128; }

/* ---------------------------------------------------------------------------------------------
 * deterministic block reductions
 * ------------------------------------------------------------------------------------------- */
/* Sum of v over the block (fixed order); the result is valid in thread 0. red: NT/32 floats. */
__device__ __forceinline__ float block_sum(float v, float *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
    if (threadIdx.x == 0)
        for (int w = 0; w < NT / 32; w++) s += red[w];
    __syncthreads();
    return s;
}

/* σs as the products see it: RN_CT(σs), or 1. */
template <typename CT> __device__ __forceinline__ float sigma_ct(const lk_view &sg) {
    return sg.p ? rnd_ct<CT>(vload(sg, 0, 0)) : 1.0f;
}

#endif
