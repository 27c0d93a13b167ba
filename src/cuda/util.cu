/*
 * util.cu — small pieces every CUDA launcher uses:
 *
 *   lk_copy_round   dst[r, c] = RN_dst(RN_ct(src[r, c])), or 0 when src is absent — the paths
 *                   where the adapter contributes nothing (module dropout: y = y0, W'' = W,
 *                   dy0 = dy, zero gradients). One thread per element, any strides/alignment.
 *   lk_scratch_*    stream-ordered scratch: cudaMallocAsync / cudaFreeAsync on the call's stream
 *                   (no host synchronisation; capturable in a CUDA graph as memory nodes). Used
 *                   only by the backward directions and DoRA for fp32 partial sums and the rank
 *                   activations (sizes in each launcher's header). Replace with the context's
 *                   workspace once the API has one (see the report / DESIGN.md §2).
 *   lk_device_query the device facts the tile choices read (queried once per device and cached:
 *                   they cannot change within a process).
 *   lk_smem_optin   a kernel's dynamic shared memory opt-in, set once per kernel, device and
 *                   size (cudaFuncSetAttribute on every call was host time in every launcher that
 *                   needs it). Set at any size, not only above 48 KB: the 48 KB default limit
 *                   counts static + dynamic shared memory, so a kernel with static arrays needs
 *                   the opt-in below 48 KB of dynamic memory (k_expand: 1.25 KB static; skipping
 *                   ≤ 48 KB made its 47.5 KB launch fail with cudaErrorInvalidValue on the H200).
 * The two caches are small tables under one mutex (a miss calls the runtime and records it; a full
 * table just calls the runtime every time).
 */
#include <pthread.h>

#include "cuda/common.cuh"

namespace {
pthread_mutex_t util_mu = PTHREAD_MUTEX_INITIALIZER;
const int DEV_MAX = 64, OPTIN_MAX = 1024;
lk_device dev_cache[DEV_MAX];
bool dev_have[DEV_MAX];
struct optin_entry {
    const void *func;
    int dev, bytes;
};
optin_entry optin_tab[OPTIN_MAX];
int optin_n = 0;
} // namespace

extern "C" int lk_smem_optin(const void *func, int bytes) {
    if (bytes <= 0) return LYCO_OK;
    int d = 0;
    LK_CHECK(cudaGetDevice(&d));
    pthread_mutex_lock(&util_mu);
    for (int i = 0; i < optin_n; i++)
        if (optin_tab[i].func == func && optin_tab[i].dev == d && optin_tab[i].bytes >= bytes) {
            pthread_mutex_unlock(&util_mu);
            return LYCO_OK;
        }
    pthread_mutex_unlock(&util_mu);
    LK_CHECK(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    pthread_mutex_lock(&util_mu);
    int i = 0;
    while (i < optin_n && !(optin_tab[i].func == func && optin_tab[i].dev == d)) i++;
    if (i < optin_n) {
        if (optin_tab[i].bytes < bytes) optin_tab[i].bytes = bytes;
    } else if (optin_n < OPTIN_MAX) {
        optin_tab[optin_n].func = func;
        optin_tab[optin_n].dev = d;
        optin_tab[optin_n].bytes = bytes;
        optin_n++;
    }
    pthread_mutex_unlock(&util_mu);
    return LYCO_OK;
}

__global__ __launch_bounds__(NT) void k_copy_round(lk_view dst, lk_view src, int ct) {
    i64 n = dst.rows * dst.cols;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n; idx += (i64)gridDim.x * NT) {
        i64 r = idx / dst.cols, c = idx % dst.cols;
        float v = src.p ? round_to(vload(src, r, c), ct) : 0.0f;
        vstore(dst, r, c, v);
    }
}

/* The same for row-major views (unit column stride), 8 columns per step: 16-byte loads and stores
   where a view has LK_VEC (vload8 / vstore8 fall back to elements at a right edge or otherwise).
   H200, dy0 = RN(dy) of 8192 × 4096 bf16: 143 µs element by element (16 % of DRAM peak). */
__global__ __launch_bounds__(NT) void k_copy_round8(lk_view dst, lk_view src, int ct) {
    const i64 cpr = (dst.cols + 7) / 8, n = dst.rows * cpr;
    for (i64 idx = (i64)blockIdx.x * NT + threadIdx.x; idx < n; idx += (i64)gridDim.x * NT) {
        const i64 r = idx / cpr, c = (idx % cpr) * 8;
        float v[8];
        if (src.p) {
            vload8(v, src, r, c);
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = round_to(v[e], ct);
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = 0.0f;
        }
        vstore8(dst, r, c, v);
    }
}

extern "C" int lk_copy_round(const lk_view *dst, const lk_view *src, int32_t ct, void *stream) {
    i64 n = dst->rows * dst->cols;
    if (!dst->p || n == 0) return LYCO_OK;
    lk_view s = src ? *src : lk_view{};
    const bool rows8 = dst->s1 == 1 && (!s.p || s.s1 == 1) && !(dst->flags & LK_UNALIGNED) && !(s.p && (s.flags & LK_UNALIGNED));
    i64 blocks = cdiv(rows8 ? cdiv(dst->cols, 8) * dst->rows : n, NT);
    if (blocks > 65536) blocks = 65536;
    if (rows8) k_copy_round8<<<(unsigned)blocks, NT, 0, (cudaStream_t)stream>>>(*dst, s, ct);
    else k_copy_round<<<(unsigned)blocks, NT, 0, (cudaStream_t)stream>>>(*dst, s, ct);
    LK_LAUNCHED("copy_round");
    return LYCO_OK;
}

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ __launch_bounds__(NT) void k_fill_uniform(char *p, int dt, i64 n, unsigned long long seed, float scale) {
    for (i64 i = (i64)blockIdx.x * NT + threadIdx.x; i < n; i += (i64)gridDim.x * NT) {
        unsigned long long h = mix64(seed ^ mix64((unsigned long long)i));
        float u = ((float)(h >> 40) + 0.5f) * (1.0f / 16777216.0f);   /* (0, 1) */
        float v = (2.0f * u - 1.0f) * scale;
        if (round_to(v, dt) == 0.0f) v = scale * 0.5f;
        st_elem(p + i * dt_size(dt), dt, false, v);
    }
}

extern "C" int lk_fill_uniform(void *p, int32_t dt, int64_t n, uint64_t seed, double scale) {
    if (n <= 0) return LYCO_OK;
    i64 blocks = cdiv(n, NT);
    if (blocks > 65536) blocks = 65536;
    k_fill_uniform<<<(unsigned)blocks, NT>>>((char *)p, dt, n, seed, (float)scale);
    LK_LAUNCHED("fill_uniform");
    LK_CHECK(cudaDeviceSynchronize());
    return LYCO_OK;
}

extern "C" int lk_scratch_alloc(void **p, size_t bytes, void *stream) {
    *p = NULL;
    if (bytes == 0) return LYCO_OK;
    LK_CHECK(cudaMallocAsync(p, bytes, (cudaStream_t)stream));
    return LYCO_OK;
}

extern "C" int lk_scratch_free(void *p, void *stream) {
    if (!p) return LYCO_OK;
    LK_CHECK(cudaFreeAsync(p, (cudaStream_t)stream));
    return LYCO_OK;
}

extern "C" int lk_device_query(lk_device *dev) {
    int d = 0, v = 0;
    LK_CHECK(cudaGetDevice(&d));
    if (d >= 0 && d < DEV_MAX) {
        pthread_mutex_lock(&util_mu);
        const bool have = dev_have[d];
        if (have) *dev = dev_cache[d];
        pthread_mutex_unlock(&util_mu);
        if (have) return LYCO_OK;
    }
    LK_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, d));
    dev->sms = v;
    LK_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, d));
    dev->smem_optin = v;
    LK_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, d));
    dev->smem_sm = v;
    LK_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, d));
    dev->cc_major = v;
    if (d >= 0 && d < DEV_MAX) {
        pthread_mutex_lock(&util_mu);
        dev_cache[d] = *dev;
        dev_have[d] = true;
        pthread_mutex_unlock(&util_mu);
    }
    return LYCO_OK;
}
