/*
 * locon_delta.cuh — the LoCon ΔW tile producer (ALGORITHMS.md §2.1, plain; linear or conv
 * flattened to O×(I·K)):
 *
 *   Cs[rr][cc] = (s · σs · q_o) · Σ_i U[o0+rr, i] · D[i, j0+cc]          (fp32, BM×BN tile)
 *
 * i.e. the oracle's dW (scale, σs and the output-row mask applied; the multiplier m not), built
 * in shared memory from the factors rounded to CT, with fp32 accumulation (tensor cores for
 * 16-bit CT, FFMA for fp32). The rank r is consumed in chunks of RK = 32; rows/columns outside
 * the matrix come out as 0.
 *
 * A producer is the only algorithm-specific part of the merge-side kernels: the merge epilogue
 * (plain or DoRA), the DoRA norm pass and the DoRA backward source all take Cs as produced here,
 * so LoHa and LoKr reach them by supplying a struct with the same `run` signature.
 *
 * Shared memory (caller-provided): sU BM×(RK+8) CT, sD RK×(BN+8) CT, Cs BM×(BN+4) fp32,
 * rowc BM fp32. Cs may alias sU/sD (the producer synchronises before writing it).
 */
#ifndef LYCO_CUDA_LOCON_DELTA_CUH
#define LYCO_CUDA_LOCON_DELTA_CUH

#include "cuda/common.cuh"

template <typename CT, int BM, int BN, int WM> struct locon_delta {
    typedef lk_locon args_t;
    static const int RK = 32;
    static const int WN = (NT / 32) / WM;
    static const int MI = BM / WM / 16;
    static const int NI = BN / WN / 8;
    static const int LDU = RK + 8, LDD = BN + 8, LDC = BN + 4;
    static const int SMEM_U = BM * LDU * (int)sizeof(CT);
    static const int SMEM_D = RK * LDD * (int)sizeof(CT);
    static const int SMEM_IN = SMEM_U + SMEM_D;
    static const int SMEM_C = BM * LDC * 4;

    /* Leaves Cs valid for every thread (ends with __syncthreads). */
    static __device__ void run(const lk_locon &L, i64 o0, i64 j0, CT *sU, CT *sD, float *Cs, float *rowc, float sig) {
        static_assert(MI >= 1 && NI >= 1 && BM % (WM * 16) == 0 && BN % (WN * 8) == 0, "producer tile");
        const int warp = threadIdx.x >> 5, wm = warp % WM, wn = warp / WM;
        const int m0 = wm * (BM / WM), n0 = wn * (BN / WN);
        const bool cmU = v_colmajor(L.U), cmD = v_colmajor(L.D);
        for (int i = threadIdx.x; i < BM; i += NT) {
            i64 o = o0 + i;
            rowc[i] = o < L.O ? (float)L.s * sig * vget(L.mask, o, 1.0f) : 0.0f;
        }
        float acc[MI][NI][4];
        acc_zero(acc);
        for (i64 i0 = 0; i0 < L.r; i0 += RK) {
            tile_regs<BM, RK> tu;
            tile_regs<RK, BN> td;
            tile_load(tu, L.U, o0, i0, cmU);
            tile_load(td, L.D, i0, j0, cmD);
            __syncthreads();
            tile_store<CT>(tu, sU, LDU, cmU);
            tile_store<CT>(td, sD, LDD, cmD);
            __syncthreads();
            int left = (int)(L.r - i0 < RK ? L.r - i0 : RK);
            int kk = sizeof(CT) == 2 ? (left + 15) / 16 * 16 : left;
            warp_mma<CT, MI, NI, false, true>::run(acc, sU, LDU, sD, LDD, m0, n0, kk);
        }
        __syncthreads();
        acc_to_smem(acc, Cs, LDC, m0, n0, rowc);
        __syncthreads();
    }
};

#endif
