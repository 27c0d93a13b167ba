/*
 * stream_probe.cu — which access pattern streams an M×N 16-bit matrix at the copy ceiling on this GPU.
 * out[m, n] = in[m, n] + 1 (bf16 bits, read once, written once), timed by CUDA events (median of
 * 20 launches after 3 warm-ups), reported as (read + write bytes) / time, beside cudaMemcpy D2D of
 * the same bytes. Each variant is an access pattern one of lyco's streaming kernels uses or could use:
 *   flat      each thread one 16-byte chunk, consecutive threads consecutive chunks (k_copy_round8)
 *   flat_gs   the same, grid-stride over 4 blocks per SM
 *   mma32     the accumulator layout of mma m16n8k16 over a warp's 32 columns: lane (g, c) loads the
 *             16-byte chunks (g, 8c) and (g + 8, 8c) — 8 rows × 64 B per warp instruction; 8 warps
 *             side by side (a block is 16 rows × 256 columns), one row group per block
 *   mma64     the same with 64 columns per warp, lane chunks (g, 16c) and (g, 16c + 8): 8 rows × 128 B
 *   mma32_gs  mma32 with persistent blocks (4 per SM) striding over row groups
 *   tileRxC   an R×C tile per block through shared memory (cp.async, barrier, 16-byte stores), one
 *             tile per block (64×128: the lean kernels' tile)
 *   psRxC     the same, persistent (3 blocks per SM), two stages — the lean kernels' structure
 *   mma32_v   mma32 with 8 warps stacked vertically (a block is 128 rows × 32 columns)
 *   smem_*    flat, through shared memory by cp.async: each lane stores its own chunk (own), a chunk of
 *             another lane of its warp (__syncwarp) or of another warp (__syncthreads)
 *   flatK*    flat with K chunks per thread, through registers or shared memory (+ barrier)
 * Build: nvcc -O3 -arch=sm_90 -o stream_probe tools/stream_probe.cu. Run: ./stream_probe [M N].
 * Every CUDA call's status is checked; the output is verified (every element) after each variant.
 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <cuda_runtime.h>

#define CK(x)                                                                                       \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));       \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

__device__ __forceinline__ unsigned add1(unsigned u) { /* two bf16 + 1, truncated (a probe, not numerics) */
    const float lo = __uint_as_float(u << 16) + 1.0f, hi = __uint_as_float(u & 0xffff0000u) + 1.0f;
    return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
}
__device__ __forceinline__ uint4 add1v(uint4 v) { return make_uint4(add1(v.x), add1(v.y), add1(v.z), add1(v.w)); }

__global__ void k_flat(const uint4 *in, uint4 *out, long n16) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n16) out[i] = add1v(in[i]);
}
__global__ void k_flat_gs(const uint4 *in, uint4 *out, long n16) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (long)gridDim.x * blockDim.x) out[i] = add1v(in[i]);
}
/* W = columns per warp (32 or 64); VERT: warps stacked vertically */
template <int W, bool VERT> __global__ void k_mma(const unsigned short *in, unsigned short *out, int M, int N) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3, w = threadIdx.x >> 5;
    const long row0 = VERT ? (long)blockIdx.y * 128 + w * 16 : (long)blockIdx.y * 16;
    const long col = VERT ? (long)blockIdx.x * W + (W / 4) * c : (long)blockIdx.x * 8 * W + w * W + (W / 4) * c;
    uint4 v[2][W / 32];
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int j = 0; j < W / 32; j++) v[h][j] = *(const uint4 *)(in + (row0 + g + 8 * h) * N + col + 8 * j);
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int j = 0; j < W / 32; j++) *(uint4 *)(out + (row0 + g + 8 * h) * N + col + 8 * j) = add1v(v[h][j]);
}
__global__ void k_mma32_gs(const unsigned short *in, unsigned short *out, int M, int N, int gy) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3, w = threadIdx.x >> 5;
    const long col = (long)blockIdx.x * 256 + w * 32 + 8 * c;
    for (long grp = blockIdx.y; grp < M / 16; grp += gy) {
        uint4 v[2];
#pragma unroll
        for (int h = 0; h < 2; h++) v[h] = *(const uint4 *)(in + (grp * 16 + g + 8 * h) * N + col);
#pragma unroll
        for (int h = 0; h < 2; h++) *(uint4 *)(out + (grp * 16 + g + 8 * h) * N + col) = add1v(v[h]);
    }
}
/* An R×C tile per block through shared memory (cp.async, barrier, 16-byte stores), one tile per block
   (PS false) or persistent over 2 stages (PS true: tile i+1's loads in flight while tile i is stored). */
template <int R, int C> __device__ __forceinline__ void tile_issue(unsigned short *t, const unsigned short *in, long r0, long c0, int N) {
    for (int q = threadIdx.x; q < R * C / 8; q += 256) {
        const int rr = q / (C / 8), cc = (q % (C / 8)) * 8;
        unsigned s = (unsigned)__cvta_generic_to_shared(t + rr * (C + 8) + cc);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(in + (r0 + rr) * N + c0 + cc));
    }
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int R, int C> __device__ __forceinline__ void tile_store(const unsigned short *t, unsigned short *out, long r0, long c0, int N) {
    for (int q = threadIdx.x; q < R * C / 8; q += 256) {
        const int rr = q / (C / 8), cc = (q % (C / 8)) * 8;
        *(uint4 *)(out + (r0 + rr) * N + c0 + cc) = add1v(*(const uint4 *)(t + rr * (C + 8) + cc));
    }
}
template <int R, int C> __global__ void k_tile(const unsigned short *in, unsigned short *out, int M, int N) {
    extern __shared__ __align__(16) unsigned short t[];
    const long r0 = (long)blockIdx.y * R, c0 = (long)blockIdx.x * C;
    tile_issue<R, C>(t, in, r0, c0, N);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    tile_store<R, C>(t, out, r0, c0, N);
}
template <int R, int C> __global__ void k_tile_ps(const unsigned short *in, unsigned short *out, int M, int N) {
    extern __shared__ __align__(16) unsigned short t[];
    const int tn = N / C, tiles = (M / R) * tn, G = gridDim.x;
    int i = 0;
    if ((int)blockIdx.x < tiles) tile_issue<R, C>(t, in, (long)(blockIdx.x / tn) * R, (long)(blockIdx.x % tn) * C, N);
    for (int tt = blockIdx.x; tt < tiles; tt += G, i++) {
        unsigned short *cur = t + (i & 1) * R * (C + 8), *nxt = t + ((i + 1) & 1) * R * (C + 8);
        if (tt + G < tiles) tile_issue<R, C>(nxt, in, (long)((tt + G) / tn) * R, (long)((tt + G) % tn) * C, N);
        else asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group 1;\n" ::);
        __syncthreads();
        tile_store<R, C>(cur, out, (long)(tt / tn) * R, (long)(tt % tn) * C, N);
        __syncthreads();
    }
}


/* A column strip of C columns walked down by a persistent block in R-row stages through an S-deep
   cp.async ring (the shape an expand whose block keeps Q's fragments in registers would stream):
   grid (N/C, gy); block (x, y) takes row groups y, y + gy, …; stage = R×C, one chunk per thread at
   16×128. ROWWALK: the transpose — a block owns R rows and walks the columns C at a time (the row
   reductions' shape), grid (M/R / gy… ) as gy persistent row groups. */
template <int R, int C, int S, bool ROWWALK>
__global__ void k_strip(const unsigned short *in, unsigned short *out, int M, int N, int gy) {
    extern __shared__ __align__(16) unsigned short t[];
    const int steps_total = ROWWALK ? N / C : M / R;
    const int owners = ROWWALK ? M / R : N / C;
    for (int own = ROWWALK ? blockIdx.x : blockIdx.x; own < owners; own += gridDim.x) {
        /* ROWWALK: owner = row group, steps = column tiles; else owner = column strip, steps = row groups (strided by gy) */
        const int s0 = ROWWALK ? 0 : blockIdx.y, ds = ROWWALK ? 1 : gy;
        int issued = 0, done = 0;
        const int nsteps = (steps_total - s0 + ds - 1) / ds;
        for (; issued < S - 1 && issued < nsteps; issued++) {
            const int st = s0 + issued * ds;
            tile_issue<R, C>(t + (issued % S) * R * (C + 8), in, ROWWALK ? (long)own * R : (long)st * R, ROWWALK ? (long)st * C : (long)own * C, N);
        }
        for (; done < nsteps; done++) {
            if (issued < nsteps) {
                const int st = s0 + issued * ds;
                tile_issue<R, C>(t + (issued % S) * R * (C + 8), in, ROWWALK ? (long)own * R : (long)st * R, ROWWALK ? (long)st * C : (long)own * C, N);
                issued++;
            } else asm volatile("cp.async.commit_group;\n" ::);
            asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 1));
            __syncthreads();
            const int st = s0 + done * ds;
            tile_store<R, C>(t + (done % S) * R * (C + 8), out, ROWWALK ? (long)own * R : (long)st * R, ROWWALK ? (long)st * C : (long)own * C, N);
            __syncthreads();
        }
        if (!ROWWALK) break;
    }
}
/* R×C tile one chunk per thread straight through registers (no shared memory): the 2-D tile's
   addresses without cp.async */
template <int R, int C> __global__ void k_tile_reg(const unsigned short *in, unsigned short *out, int M, int N) {
    const long r0 = (long)blockIdx.y * R, c0 = (long)blockIdx.x * C;
    for (int q = threadIdx.x; q < R * C / 8; q += 256) {
        const int rr = q / (C / 8), cc = (q % (C / 8)) * 8;
        *(uint4 *)(out + (r0 + rr) * N + c0 + cc) = add1v(*(const uint4 *)(in + (r0 + rr) * N + c0 + cc));
    }
}


/* A row walk with the streamed tile fetched D steps ahead into registers (plain 16-byte loads), put
   into one of two shared-memory buffers at its step, one barrier per step, then stored from there
   by other threads (the row reductions' shape with lean_fetch instead of cp.async); persistent,
   grid-stride over row groups of R rows. */
template <int R, int C, int D> __global__ void k_rowreg(const unsigned short *in, unsigned short *out, int M, int N) {
    extern __shared__ __align__(16) unsigned short t[];
    const int CH = R * C / 8 / 256, cpr = C / 8, steps = N / C;
    for (int own = blockIdx.x; own < M / R; own += gridDim.x) {
        const long r0 = (long)own * R;
        uint4 reg[D][CH];
#pragma unroll
        for (int d = 0; d < D; d++)
#pragma unroll
            for (int k = 0; k < CH; k++) {
                const int q = threadIdx.x + k * 256, rr = q / cpr, cc = (q % cpr) * 8;
                if (d < steps) reg[d][k] = *(const uint4 *)(in + (r0 + rr) * N + (long)d * C + cc);
            }
        for (int s0 = 0; s0 < steps; s0 += D) {
#pragma unroll
            for (int d = 0; d < D; d++) {
                const int s = s0 + d;
                if (s >= steps) break;
                unsigned short *buf = t + (s & 1) * R * (C + 8);
#pragma unroll
                for (int k = 0; k < CH; k++) {
                    const int q = threadIdx.x + k * 256, rr = q / cpr, cc = (q % cpr) * 8;
                    *(uint4 *)(buf + rr * (C + 8) + cc) = reg[d][k];
                }
                __syncthreads();
                if (s + D < steps)
#pragma unroll
                    for (int k = 0; k < CH; k++) {
                        const int q = threadIdx.x + k * 256, rr = q / cpr, cc = (q % cpr) * 8;
                        reg[d][k] = *(const uint4 *)(in + (r0 + rr) * N + (long)(s + D) * C + cc);
                    }
#pragma unroll
                for (int k = 0; k < CH; k++) { /* a chunk of another thread (as the mma readers would) */
                    const int q = (threadIdx.x + 96 + k * 256) % (R * cpr), rr = q / cpr, cc = (q % cpr) * 8;
                    *(uint4 *)(out + (r0 + rr) * N + (long)s * C + cc) = add1v(*(const uint4 *)(buf + rr * (C + 8) + cc));
                }
            }
        }
        __syncthreads();
    }
}

/* flat global accesses with a shared-memory round trip between: each lane copies its 16-byte chunk by
   cp.async into shared memory, then stores the chunk of another lane (SCOPE 0: its own, no sync;
   1: of a lane of the same warp, __syncwarp; 2: of a lane of another warp, __syncthreads) — whether
   a transposition inside the warp, or across the block, keeps the flat pattern's rate. */
template <int SCOPE> __global__ void k_flat_smem(const uint4 *in, uint4 *out, long n16) {
    __shared__ __align__(16) uint4 t[256];
    const long b = (long)blockIdx.x * 256;
    const int tid = threadIdx.x;
    unsigned s = (unsigned)__cvta_generic_to_shared(&t[tid]);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\ncp.async.commit_group;\ncp.async.wait_group 0;\n" ::"r"(s), "l"(in + b + tid));
    int j = tid;
    if (SCOPE == 1) { __syncwarp(); j = (tid & ~31) | ((tid * 7) & 31); }
    if (SCOPE == 2) { __syncthreads(); j = (tid + 96) & 255; }
    out[b + j] = add1v(t[j]);
}

/* flat with K chunks per thread (a block covers K·4 KB contiguously): through registers (SM false) or
   through shared memory by cp.async and a block barrier (SM true) — whether several chunks per
   thread, not the tile's rows, is what slows the tile kernels. */
template <int K, bool SM> __global__ void k_flatk(const uint4 *in, uint4 *out, long n16) {
    __shared__ __align__(16) uint4 t[SM ? 256 * K : 1];
    const long b = (long)blockIdx.x * 256 * K;
    const int tid = threadIdx.x;
    if (SM) {
#pragma unroll
        for (int i = 0; i < K; i++) {
            unsigned s = (unsigned)__cvta_generic_to_shared(&t[tid + 256 * i]);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(in + b + tid + 256 * i));
        }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < K; i++) out[b + tid + 256 * i] = add1v(t[tid + 256 * i]);
    } else {
        uint4 v[K];
#pragma unroll
        for (int i = 0; i < K; i++) v[i] = in[b + tid + 256 * i];
#pragma unroll
        for (int i = 0; i < K; i++) out[b + tid + 256 * i] = add1v(v[i]);
    }
}

static float median(float *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            float t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
        }
    return v[n / 2];
}

int main(int argc, char **argv) {
    const int M = argc > 2 ? atoi(argv[1]) : 4096, N = argc > 2 ? atoi(argv[2]) : 4096;
    if (M % 128 || N % 1024) { fprintf(stderr, "M must be a multiple of 128, N of 1024\n"); return 2; }
    const size_t bytes = (size_t)M * N * 2;
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    unsigned short *in, *out, *host = (unsigned short *)malloc(bytes);
    CK(cudaMalloc(&in, bytes));
    CK(cudaMalloc(&out, bytes));
    for (size_t i = 0; i < (size_t)M * N; i++) host[i] = 0x3f80; /* 1.0 */
    CK(cudaMemcpy(in, host, bytes, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const long n16 = (long)(bytes / 16);
    const char *names[] = {"memcpy", "flat", "flat_gs", "mma32", "mma64", "mma32_gs", "tile64x128", "mma32_v",
                           "tile32x256", "tile16x512", "tile8x1024", "ps64x128", "ps16x512", "ps32x512",
                           "smem_own", "smem_warp", "smem_block", "tile16x128", "tile4x512", "tile2x1024",
                           "flat4reg", "flat4smem", "flat2smem", "cs16x128s2", "cs16x128s4", "cs16x128s4b8",
                           "cs32x128s3", "rw16x128s4", "rw16x256s4", "rw32x256s3", "tile16x128r", "tile2x1024r",
                           "rr32x256d1", "rr32x256d2", "rr16x256d2", "rr16x128d4", "tile64x128r"};
    CK(cudaFuncSetAttribute(k_tile_ps<32, 512>, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * 32 * 520 * 2));
    CK(cudaFuncSetAttribute(k_rowreg<32, 256, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * 32 * 264 * 2));
    CK(cudaFuncSetAttribute(k_rowreg<32, 256, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * 32 * 264 * 2));
    CK(cudaFuncSetAttribute(k_strip<32, 128, 3, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 3 * 32 * 136 * 2));
    CK(cudaFuncSetAttribute(k_strip<16, 256, 4, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * 16 * 264 * 2));
    CK(cudaFuncSetAttribute(k_strip<32, 256, 3, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 3 * 32 * 264 * 2));
    printf("M %d N %d (%.1f MB each way), %d SMs\n", M, N, bytes / 1e6, sms);
    for (int v = 0; v < 37; v++) {
        float t[20];
        CK(cudaMemset(out, 0, bytes));
        for (int it = 0; it < 23; it++) {
            CK(cudaEventRecord(e0));
            switch (v) {
            case 0: CK(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice)); break;
            case 1: k_flat<<<(unsigned)((n16 + 255) / 256), 256>>>((const uint4 *)in, (uint4 *)out, n16); break;
            case 2: k_flat_gs<<<sms * 8, 256>>>((const uint4 *)in, (uint4 *)out, n16); break;
            case 3: k_mma<32, false><<<dim3(N / 256, M / 16), 256>>>(in, out, M, N); break;
            case 4: k_mma<64, false><<<dim3(N / 512, M / 16), 256>>>(in, out, M, N); break;
            case 5: {
                const int gy = sms * 4 / (N / 256) > 0 ? sms * 4 / (N / 256) : 1;
                k_mma32_gs<<<dim3(N / 256, gy), 256>>>(in, out, M, N, gy);
                break;
            }
            case 6: k_tile<64, 128><<<dim3(N / 128, M / 64), 256, 64 * 136 * 2>>>(in, out, M, N); break;
            case 8: k_tile<32, 256><<<dim3(N / 256, M / 32), 256, 32 * 264 * 2>>>(in, out, M, N); break;
            case 9: k_tile<16, 512><<<dim3(N / 512, M / 16), 256, 16 * 520 * 2>>>(in, out, M, N); break;
            case 10: k_tile<8, 1024><<<dim3(N / 1024, M / 8), 256, 8 * 1032 * 2>>>(in, out, M, N); break;
            case 11: k_tile_ps<64, 128><<<sms * 3, 256, 2 * 64 * 136 * 2>>>(in, out, M, N); break;
            case 12: k_tile_ps<16, 512><<<sms * 3, 256, 2 * 16 * 520 * 2>>>(in, out, M, N); break;
            case 13: k_tile_ps<32, 512><<<sms * 3, 256, 2 * 32 * 520 * 2>>>(in, out, M, N); break;
            case 14: k_flat_smem<0><<<(unsigned)(n16 / 256), 256>>>((const uint4 *)in, (uint4 *)out, n16); break;
            case 15: k_flat_smem<1><<<(unsigned)(n16 / 256), 256>>>((const uint4 *)in, (uint4 *)out, n16); break;
            case 16: k_flat_smem<2><<<(unsigned)(n16 / 256), 256>>>((const uint4 *)in, (uint4 *)out, n16); break;
            case 17: k_tile<16, 128><<<dim3(N / 128, M / 16), 256, 16 * 136 * 2>>>(in, out, M, N); break;
            case 18: k_tile<4, 512><<<dim3(N / 512, M / 4), 256, 4 * 520 * 2>>>(in, out, M, N); break;
            case 19: k_tile<2, 1024><<<dim3(N / 1024, M / 2), 256, 2 * 1032 * 2>>>(in, out, M, N); break;
            case 20: k_flatk<4, false><<<(unsigned)(n16 / 1024), 256>>>((const uint4 *)in, (uint4 *)out, n16); break;
            case 21: k_flatk<4, true><<<(unsigned)(n16 / 1024), 256>>>((const uint4 *)in, (uint4 *)out, n16); break;
            case 22: k_flatk<2, true><<<(unsigned)(n16 / 512), 256>>>((const uint4 *)in, (uint4 *)out, n16); break;
            case 23: case 24: case 25: case 26: {
                const int per_sm = v == 25 ? 8 : 4, strips = N / 128;
                const int gy = sms * per_sm / strips > 0 ? sms * per_sm / strips : 1;
                if (v == 23) k_strip<16, 128, 2, false><<<dim3(strips, gy), 256, 2 * 16 * 136 * 2>>>(in, out, M, N, gy);
                else if (v == 26) k_strip<32, 128, 3, false><<<dim3(strips, gy), 256, 3 * 32 * 136 * 2>>>(in, out, M, N, gy);
                else k_strip<16, 128, 4, false><<<dim3(strips, gy), 256, 4 * 16 * 136 * 2>>>(in, out, M, N, gy);
                break;
            }
            case 27: k_strip<16, 128, 4, true><<<sms * 4, 256, 4 * 16 * 136 * 2>>>(in, out, M, N, 1); break;
            case 28: k_strip<16, 256, 4, true><<<sms * 4, 256, 4 * 16 * 264 * 2>>>(in, out, M, N, 1); break;
            case 29: k_strip<32, 256, 3, true><<<sms * 2, 256, 3 * 32 * 264 * 2>>>(in, out, M, N, 1); break;
            case 30: k_tile_reg<16, 128><<<dim3(N / 128, M / 16), 256>>>(in, out, M, N); break;
            case 31: k_tile_reg<2, 1024><<<dim3(N / 1024, M / 2), 256>>>(in, out, M, N); break;
            case 32: k_rowreg<32, 256, 1><<<sms * 4, 256, 2 * 32 * 264 * 2>>>(in, out, M, N); break;
            case 33: k_rowreg<32, 256, 2><<<sms * 4, 256, 2 * 32 * 264 * 2>>>(in, out, M, N); break;
            case 34: k_rowreg<16, 256, 2><<<sms * 6, 256, 2 * 16 * 264 * 2>>>(in, out, M, N); break;
            case 35: k_rowreg<16, 128, 4><<<sms * 6, 256, 2 * 16 * 136 * 2>>>(in, out, M, N); break;
            case 36: k_tile_reg<64, 128><<<dim3(N / 128, M / 64), 256>>>(in, out, M, N); break;
            case 7: k_mma<32, true><<<dim3(N / 32, M / 128), 256>>>(in, out, M, N); break;
            }
            CK(cudaGetLastError());
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            if (it >= 3) CK(cudaEventElapsedTime(&t[it - 3], e0, e1));
        }
        CK(cudaMemcpy(host, out, bytes, cudaMemcpyDeviceToHost));
        const unsigned short want = v == 0 ? 0x3f80 : 0x4000; /* 1 + 1 = 2.0 */
        size_t bad = 0;
        for (size_t i = 0; i < (size_t)M * N; i++) bad += host[i] != want;
        const float ms = median(t, 20);
        printf("%-9s %8.1f us  %6.2f TB/s (read + write)%s\n", names[v], ms * 1e3, 2.0 * bytes / (ms * 1e-3) / 1e12, bad ? "  WRONG OUTPUT" : "");
    }
    CK(cudaFree(in));
    CK(cudaFree(out));
    free(host);
    return 0;
}
