/*
 * boft_group.cuh (emulation shim, tools/boft_emu) — stands in for src/cuda/boft_group.cuh when
 * src/cuda/boft_group.cu is compiled as host C++: CUDA keywords, threadIdx/blockIdx, float4,
 * the common.cuh / oft.cuh helpers the file uses (exact fp16/bf16 RNE conversions), and the
 * declarations the emulated launches and Cayley/ρ hooks need. Not part of the library.
 */
#pragma once
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <cstdint>
#include <cstdarg>
#include <thread>
#include <barrier>
#include <functional>
#include <vector>
extern "C" {
#include "cuda/kern_oft.h"
}
typedef long long i64;
#define NT 256
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
enum { DT_F16 = 0, DT_BF16 = 1, DT_F32 = 2 };
enum { LYCO_OK = 0, LYCO_ERR_BACKEND = 9 };
struct u3 { unsigned x; };
extern thread_local u3 threadIdx, blockIdx;
extern thread_local float *emu_smem;
void __syncthreads();
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
typedef void *cudaStream_t;
typedef int cudaError_t;
#define cudaSuccess 0
#define cudaFuncAttributeMaxDynamicSharedMemorySize 0
template <class F> int cudaFuncSetAttribute(F, int, int) { return 0; }
inline int cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { memset(p, v, n); return 0; }
inline int cudaGetLastError() { return 0; }
inline const char *cudaGetErrorName(int) { return "e"; }
inline const char *cudaGetErrorString(int) { return "e"; }
int lyco_fail(int s, const char *fmt, ...);
#define LK_CHECK(call) do { if ((call) != 0) return LYCO_ERR_BACKEND; } while (0)
#define LK_LAUNCHED(what) do { } while (0)
static inline i64 cdiv(i64 a, i64 b) { return (a + b - 1) / b; }
inline int dt_size(int dt) { return dt == DT_F32 ? 4 : 2; }
inline float bits_to_f(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned f_bits(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float bits16_to_f(unsigned h, int dt) {
    if (dt == DT_BF16) return bits_to_f(h << 16);
    _Float16 x; unsigned short s = (unsigned short)h; memcpy(&x, &s, 2); return (float)x;
}
inline unsigned f_to_bits(float v, int dt) {
    if (dt == DT_F32) return f_bits(v);
    if (dt == DT_BF16) { unsigned u = f_bits(v); if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40; return (u + 0x7fffu + ((u >> 16) & 1)) >> 16; }
    _Float16 x = (_Float16)v; unsigned short s; memcpy(&s, &x, 2); return s;
}
inline float ld_elem(const char *p, int dt, bool) {
    if (dt == DT_F32) { float f; memcpy(&f, p, 4); return f; }
    unsigned short h; memcpy(&h, p, 2); return bits16_to_f(h, dt);
}
inline void st_elem(char *p, int dt, bool, float v) {
    unsigned u = f_to_bits(v, dt);
    if (dt == DT_F32) memcpy(p, &u, 4); else { unsigned short s = (unsigned short)u; memcpy(p, &s, 2); }
}
inline float round_to(float v, int dt) { return dt == DT_F32 ? v : bits16_to_f(f_to_bits(v, dt), dt); }
inline const char *vaddr(const lk_view &v, i64 r, i64 c) { return (const char *)v.p + (r * v.s0 + c * v.s1) * (i64)dt_size(v.dt); }
inline float vload(const lk_view &v, i64 r, i64 c) { return ld_elem(vaddr(v, r, c), v.dt, false); }
inline const char *rows_addr(const lk_rows &v, i64 o, i64 j) {
    i64 off = v.SP == 1 ? o * v.sc + j * v.sn : o * v.sc + (j / v.SP) * v.sn + (j % v.SP) * v.sp;
    return (const char *)v.p + off * (i64)dt_size(v.dt);
}
inline float rows_load(const lk_rows &v, i64 o, i64 j) { return ld_elem(rows_addr(v, o, j), v.dt, false); }
inline void rows_store(const lk_rows &v, i64 o, i64 j, float x) { st_elem((char *)rows_addr(v, o, j), v.dt, false, x); }
inline float rho_ct(const lk_view &rho, i64 o, int ct) { return rho.p ? round_to(vload(rho, 0, o), ct) : 1.0f; }
void cp_async16(void *dst, const void *src, int n);
inline void cp_commit() {}
inline void cp_wait(int) {}
enum { OFT_FAM_DIAG = 0, OFT_FAM_BOFT = 1 };
typedef struct { float *Op1; } oft_cay;
int oft_cay_fwd(oft_cay *s, const lk_oft_args *a, int family, cudaStream_t st);
int oft_cay_bwd(const oft_cay *s, const lk_oft_args *a, const float *GR, cudaStream_t st);
int oft_cay_free(oft_cay *s, cudaStream_t st);
int oft_sum_rho(const float *part, i64 S, i64 O, const lk_view *grho, cudaStream_t st);
int lk_scratch_alloc(void **p, size_t bytes, cudaStream_t st);
int lk_scratch_free(void *p, cudaStream_t st);
void emu_launch(unsigned grid, size_t smem, std::function<void()> body);
bool bg_takes(const lk_oft_args *a, const lk_device *dev, int bwd, const char **why);
int bg_fwd(const lk_oft_args *a, const lk_device *dev, cudaStream_t st);
int bg_bwd(const lk_oft_args *a, const lk_device *dev, cudaStream_t st);
