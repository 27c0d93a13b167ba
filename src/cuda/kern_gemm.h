/*
 * kern_gemm.h — gemm.cu's tensor-core product with an additive epilogue, for 16-bit compute:
 *
 *   out[m, n] = RN_out( RN_CT(base[m, n]) + Σ_k RN_CT(A[m, k]) · RN_CT(B[n, k]) )    (fp32 sums)
 *   (base_f32: base[m, n] as loaded, for chains of fp32 partial products — dora_bypass.cu)
 *
 * A is M×K and B is N×K, or given transposed (a_t: K×M, b_t: K×N) (any dtype, any strides: operands not
 * already CT are rounded to CT in shared memory as they are staged, never by a separate pass);
 * base (M×N, p NULL = none) and out (M×N) any dtype and strides. Users: LoHa's bypass forward
 * (x · ΔW̄_cᵀ over row chunks of a generated ΔW̄, loha_dense.cu), DoRA in bypass (dora_bypass.cu).
 */
#ifndef LYCO_CUDA_KERN_GEMM_H
#define LYCO_CUDA_KERN_GEMM_H

#include <string.h>

#include "cuda/kern.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t ct;          /* DT_BF16 or DT_F16 */
    int64_t M, N, K;
    lk_view A, B;        /* M×K (a_t: K×M), N×K (b_t: K×N) */
    int32_t a_t, b_t;    /* a_t only together with b_t */
    lk_view base, out;   /* M×N; base p NULL = none */
    int32_t base_f32;    /* 1: base added as loaded (fp32 partial sums), not rounded to CT first */
    int32_t ksplit;      /* > 1: K in ksplit chunks of kchunk (a multiple of 64) side by side in one
                            launch (grid z), chunk z into the slab z of a compact fp32 M×N out (and of
                            base): out/base p + z·M·N floats; the caller sums the slabs */
    int64_t kchunk;
} lk_gemm_args;

/* The args of one product out = A·Bᵀ (M × N × K; a_t / b_t: given transposed) at compute ct,
   everything else off (no base, no K split; out set by the caller). */
static inline lk_gemm_args lk_gemm_product(int32_t ct, lk_view A, int32_t a_t, lk_view B, int32_t b_t, int64_t M, int64_t N,
                                           int64_t K) {
    lk_gemm_args g;
    memset(&g, 0, sizeof g);
    g.ct = ct;
    g.M = M;
    g.N = N;
    g.K = K;
    g.A = A;
    g.a_t = a_t;
    g.B = B;
    g.b_t = b_t;
    return g;
}

/* K split of a product with fewer 128×128 output tiles than 2 per SM and a long K: nz chunks of kc
   (a multiple of 64, ≥ 512) side by side (ksplit = nz, kchunk = kc), enough to fill 2 blocks per SM;
   nz = 1 (kc = K) when the tiles already fill the GPU. A function of the shape and the SM count. */
void lk_gemm_split(int64_t M, int64_t N, int64_t K, int32_t sms, int64_t *nz, int64_t *kc);

/* Whether lk_gemm runs this call (16-bit CT, grid limits, shared memory); 0 = use another path. */
int lk_gemm_fits(const lk_gemm_args *a, const lk_device *dev);
int lk_gemm(const lk_gemm_args *a, const lk_device *dev, void *stream);

#ifdef __cplusplus
}
#endif
#endif
