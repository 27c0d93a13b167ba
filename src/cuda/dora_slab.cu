/*
 * dora_slab.cu — DoRA's merge forward (ALGORITHMS.md §1.6, norm per output row) in one pass over W
 * on sm_90 and newer, for the lean expand's calls (expand_lean.cu: P = lora_up M×r, Q = lora_down
 * r×N, base W and out M×N, everything in the 16-bit compute dtype CT, row-major, 16-byte aligned
 * rows; no Hadamard pair, Q not transposed; r ≤ 128):
 *
 *   V = RN_CT(W) + rowc_m·(P·Q),  s2_m = Σ_n V[m,n]²  (per-tile partials, below),
 *   {f_m, f_m − 1} = dora_f_of(s2_m)  (merge_ep.cuh, as dora.cu's k_dora_finish),
 *   out = RN_CT(merge_elem(w, rowc_m·(P·Q), mode, DoRA))     (merge_ep.cuh)
 *
 * Why (H200, 4096² r32 bf16, docs/kernels.md): the two-pass form (lk_expand_merge: a statistics
 * launch reading W, the finish, a merge launch reading W again and writing out) took 80 µs against
 * a 16 µs floor; the peer's Triton kernel makes one pass in 44 µs. A row's norm needs every column
 * of the row before any element of it can be written, so the row block has to hold its whole W row
 * until the norm is known. Here a thread-block cluster of CS ≤ 8 CTAs (portable size) shares one
 * 64-row block: CTA c holds tiles [c·TPC, (c+1)·TPC) of 128 columns — its W tiles, its Q tiles and
 * the 64 P rows — in shared memory, loaded once by cp.async (one group per tile, so the first
 * tile's product starts while the rest fly). Sweep 1: per tile the product on the tensor cores
 * (warp_mma_ldm, 8 warps as 2×4 of 32×32, the lean kernel's tile and k order) and the per-tile row
 * partials of Σ V², summed across warps as expand_tile.cuh's ex_tile_stats sums them. The cluster
 * barrier; each CTA reads the partials of all TN tiles from its peers' shared memory (DSMEM) and
 * sums them in tile order 0, 1, … (as k_dora_finish sums the two-pass form's partials), so the
 * statistics and the results are the two-pass form's, bit for bit. Sweep 2: the product again
 * from shared memory, the epilogue in place in the W tiles, 16-byte stores. W is read once from
 * DRAM, out written once; Q is read once per 64-row block (from L2).
 *
 * Shared memory per CTA: P 64×(RP+8), TPC W tiles 64×136 and TPC Q tiles RP×136 (CT):
 * RP 32, TPC 4 (N ≤ 4096): 109 KB, two CTAs per SM on the H200. TPC ≤ 8 and within the opt-in
 * limit, else the call goes to the two-pass form (lk_expand_merge). Extra memory: none (the
 * two-pass form's statistics scratch is not needed).
 * Where the time goes (H200, ncu, 4096² r32 bf16, 2026-12-02): 53.7 µs (3.4× the floor), DRAM
 * 17.6 % busy, 22 % achieved occupancy (2 CTAs per SM, 30 clusters resident: 512 CTAs in more
 * than two waves): each CTA loads, waits at the cluster barrier, computes and stores, with one
 * other CTA on its SM to cover it. Clusters of 16 or of 4 CTAs, and the partials gathered 8 loads
 * at a time, measured slower or no faster (docs/kernels.md, twentieth session). What would close
 * the gap: overlap across row blocks (a persistent cluster loading block b+1's W while block b
 * merges and stores), which needs shared memory for two row blocks per CTA.
 * sm_80–sm_89 have no clusters: the host takes this path only on compute capability ≥ 9
 * (lk_device.cc_major). LYCO_CUDA_DORA_SLAB=0 turns it off (A/B). Deterministic: fixed sums,
 * no atomics.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/expand_tile.cuh"

namespace {

const int BM = EX_M;       /* rows per cluster (64) */
const int BN = EX_N;       /* columns per tile (128) */
const int BNP = BN + 8;    /* row pitch of the W and Q tiles (halfwords) */
const int TPC_MAX = 8;     /* tiles per CTA */
const int CS_MAX = 8;      /* CTAs per cluster (the portable limit) */

__host__ __device__ constexpr int slab_p_bytes(int rp) { return BM * (rp + 8) * 2; }
__host__ __device__ constexpr int slab_w_bytes() { return BM * BNP * 2; }
__host__ __device__ constexpr int slab_q_bytes(int rp) { return rp * BNP * 2; }
__host__ __device__ constexpr int slab_bytes(int rp, int tpc) { return slab_p_bytes(rp) + tpc * (slab_w_bytes() + slab_q_bytes(rp)); }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* wait until at most n (0..7) cp.async groups are pending */
__device__ __forceinline__ void cp_wait_upto(int n) {
    switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::); break;
    case 6: asm volatile("cp.async.wait_group 6;\n" ::); break;
    default: asm volatile("cp.async.wait_group 7;\n" ::); break;
    }
}

/* The cluster barrier, split: arrive (release: this CTA's shared-memory writes become visible to
   the cluster) and wait (acquire). Every thread of every CTA takes part. */
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
/* p (this CTA's shared memory) at the same offset in CTA `rank` of the cluster */
__device__ __forceinline__ float ld_cluster(const float *p, unsigned rank) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    unsigned r;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(r) : "memory");
    return v;
}
#endif

template <typename CT> __device__ __forceinline__ float slab_w(const char *wt, int row, int col) {
    return bits16_to_f(((const unsigned short *)wt)[row * BNP + col], ct_of<CT>::dt);
}

/* Sweep 1 of one tile: per-row partial Σ V² into part_t[64], summed as ex_tile_stats sums (per
   thread over the 4 column fragments, pairs of lanes, then the 4 warp columns in order). */
template <typename CT>
__device__ __forceinline__ void slab_tile_stats(const float (&acc)[2][4][4], const char *wt, const float *rowc, float *red,
                                                float *part_t, int m0, int n0) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float s[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = acc_row(m0, mi, e), col = acc_col(n0, ni, e);
                const float V = slab_w<CT>(wt, row, col) + acc[mi][ni][e] * rowc[row];
                s[mi][e >> 1] = fmaf(V, V, s[mi][e >> 1]);
            }
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float v = s[mi][h];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            if ((lane & 3) == 0) red[(warp >> 1) * BM + acc_row(m0, mi, 2 * h)] = v;
        }
    __syncthreads();
    if (threadIdx.x < BM) {
        const int i = (int)threadIdx.x;
        part_t[i] = ((red[i] + red[BM + i]) + red[2 * BM + i]) + red[3 * BM + i];
    }
}

/* grid (CS, ⌈M/64⌉), cluster (CS, 1, 1): CTA (c, b) owns rows [64b, 64b + 64) × tiles [c·tpc, …). */
template <typename CT, int RP>
__global__ __launch_bounds__(NT) void k_dora_slab(lk_expand_args a, int tpc, int tn, float mdora, int m_is_one) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(16) char dsm[];
    __shared__ float part[TPC_MAX][BM]; /* this CTA's per-tile row partials (read by the cluster) */
    __shared__ float red[4 * BM];
    __shared__ float rowc[BM];
    __shared__ float sd[2][BM];         /* f, f − 1 per row */
    char *sP = dsm, *sW = dsm + slab_p_bytes(RP), *sQ = sW + tpc * slab_w_bytes();
    const int c = (int)blockIdx.x, t0 = c * tpc, nt = tn - t0 < tpc ? tn - t0 : tpc; /* nt ≥ 1 (host) */
    const i64 mb = (i64)blockIdx.y * BM;
    const int dt = ct_of<CT>::dt;
    const int warp = threadIdx.x >> 5, m0 = (warp & 1) * 32, n0 = (warp >> 1) * 32;
    const int kk = (int)((a.r + 15) / 16 * 16);

    for (int t = 0; t < nt; t++) { /* group t: tile t's W and Q (and P with the first) */
        if (t == 0) lean_issue<BM, RP>(sP, a.P, mb, 0);
        lean_issue<BM, BN>(sW + t * slab_w_bytes(), a.base, mb, (i64)(t0 + t) * BN);
        lean_issue<RP, BN>(sQ + t * slab_q_bytes(RP), a.Q, 0, (i64)(t0 + t) * BN);
        cp_commit();
    }
    if (threadIdx.x < BM) {
        const float sig = sigma_ct<CT>(a.sigma);
        const float rs = (float)a.row_scale * (a.sig_in_row ? sig : 1.0f);
        const i64 m = mb + threadIdx.x;
        rowc[threadIdx.x] = m < a.M ? rs * vget(a.rowmask, m, 1.0f) : 0.0f;
    }

    for (int t = 0; t < nt; t++) { /* sweep 1: the row partials of Σ V² */
        cp_wait_upto(nt - 1 - t);
        __syncthreads(); /* tile t (and rowc) visible; red free */
        float acc[2][4][4];
        acc_zero(acc);
        warp_mma_ldm<CT, 2, 4, false, true>::run(acc, (const CT *)sP, RP + 8, (const CT *)(sQ + t * slab_q_bytes(RP)), BNP, m0, n0, kk);
        slab_tile_stats<CT>(acc, sW + t * slab_w_bytes(), rowc, red, part[t], m0, n0);
    }
    cluster_arrive();
    cluster_wait(); /* every CTA's partials visible */
    if (threadIdx.x < BM) {
        const int i = (int)threadIdx.x;
        float s2 = 0.0f;
        for (int g = 0; g < tn; g++) s2 += ld_cluster(&part[g % tpc][i], (unsigned)(g / tpc));
        const i64 m = mb + i;
        float f = 0.0f, fm1 = 0.0f;
        if (m < a.M) {
            const dora_fk q = dora_f_of(a.dora, s2, m, mdora, m_is_one, dt);
            f = q.f;
            fm1 = q.fm1;
        }
        sd[0][i] = f;
        sd[1][i] = fm1;
    }
    cluster_arrive(); /* done reading the peers' partials (they may exit after cluster_wait below) */
    __syncthreads();  /* sd visible */

    for (int t = 0; t < nt; t++) { /* sweep 2: the merge, in place in the W tiles */
        char *wt = sW + t * slab_w_bytes();
        float acc[2][4][4];
        acc_zero(acc);
        warp_mma_ldm<CT, 2, 4, false, true>::run(acc, (const CT *)sP, RP + 8, (const CT *)(sQ + t * slab_q_bytes(RP)), BNP, m0, n0, kk);
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = acc_row(m0, mi, 2 * h);
                const float rc = rowc[row];
                const float s3[3] = {sd[0][row], sd[1][row], 0.0f};
#pragma unroll
                for (int ni = 0; ni < 4; ni++) {
                    const int col = acc_col(n0, ni, 0);
                    unsigned *p = (unsigned *)(wt + (row * BNP + col) * 2);
                    const unsigned u = *p;
                    const float d0 = acc[mi][ni][2 * h] * rc, d1 = acc[mi][ni][2 * h + 1] * rc;
                    const float v0 = merge_elem(bits16_to_f(u & 0xffffu, dt), d0, a.mode, 0.0f, true, s3);
                    const float v1 = merge_elem(bits16_to_f(u >> 16, dt), d1, a.mode, 0.0f, true, s3);
                    *p = f_to_bits(v0, dt) | (f_to_bits(v1, dt) << 16);
                }
            }
    }
    __syncthreads();
    for (int t = 0; t < nt; t++) lean_store<BM, BN>(sW + t * slab_w_bytes(), a.out, mb, (i64)(t0 + t) * BN);
    cluster_wait(); /* no CTA leaves while a peer may still read its partials */
#else
    __trap(); /* the host launches this only on sm_90 and newer */
#endif
}

bool slab_off() {
    const char *v = getenv("LYCO_CUDA_DORA_SLAB");
    return v && *v == '0';
}

/* The call's tiles per CTA and cluster size, or 0 when the slab does not take it. */
struct slab_plan {
    int rp, tpc, cs, tn, bytes;
};
slab_plan slab_plan_of(const lk_expand_args *a, const lk_device *dev) {
    slab_plan p = {0, 0, 0, 0, 0};
    const int ct = a->ct;
    if (dev->cc_major < 9 || slab_off() || (ct != DT_BF16 && ct != DT_F16)) return p;
    if (!a->dora.on || !a->dora.on_out || a->st || a->stat_part || a->G.p || a->P2.p || a->q_t || a->p_split) return p;
    if (a->M <= 0 || a->N <= 0 || a->r < 1 || !a->base.p || a->mode < 0 || a->mode > 2) return p;
    if (!ex_view_lean(a->P, ct) || !ex_view_lean(a->Q, ct) || !ex_view_lean(a->base, ct) || !ex_view_lean(a->out, ct)) return p;
    if (a->out.rows != a->M || a->out.cols != a->N || cdiv(a->M, BM) > 65535) return p;
    const i64 rp = lk_reduce_rank_tile(a->r), tn = cdiv(a->N, BN);
    if (rp == 0) return p;
    const i64 cs0 = tn < CS_MAX ? tn : CS_MAX, tpc = cdiv(tn, cs0);
    if (tpc > TPC_MAX || slab_bytes((int)rp, (int)tpc) > dev->smem_optin) return p;
    p.rp = (int)rp;
    p.tpc = (int)tpc;
    p.cs = (int)cdiv(tn, tpc); /* every CTA owns at least one tile */
    p.tn = (int)tn;
    p.bytes = slab_bytes((int)rp, (int)tpc);
    return p;
}

template <typename CT, int RP>
void k_dora_slab_launch(const cudaLaunchConfig_t &cfg, const lk_expand_args &a, int tpc, int tn, float mdora, int m_is_one) {
    (void)cudaLaunchKernelEx(&cfg, k_dora_slab<CT, RP>, a, tpc, tn, mdora, m_is_one); /* status: LK_LAUNCHED */
}

/* Launch with the cluster size; a configuration with no room for one cluster on the device
   (cudaOccupancyMaxActiveClusters, asked once per configuration) leaves *done 0, for the
   two-pass form. */
template <typename CT, int RP> int slab_launch(const lk_expand_args *a, const slab_plan &p, cudaStream_t s, int *done) {
    LK_SMEM_OPTIN(p.bytes, k_dora_slab<CT, RP>);
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)p.cs;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3((unsigned)p.cs, (unsigned)cdiv(a->M, BM), 1);
    cfg.blockDim = dim3(NT, 1, 1);
    cfg.dynamicSmemBytes = (size_t)p.bytes;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    const float mdora = (float)a->mult;
    const int m_is_one = a->mult == 1.0;
    static signed char fits[TPC_MAX + 1][CS_MAX + 1]; /* 0 unknown, 1 a cluster fits, −1 not */
    signed char &f = fits[p.tpc][p.cs];
    if (f == 0) {
        int n = 0;
        f = cudaOccupancyMaxActiveClusters(&n, k_dora_slab<CT, RP>, &cfg) == cudaSuccess && n >= 1 ? 1 : -1;
        (void)cudaGetLastError();
    }
    if (f < 0) return LYCO_OK;
    *done = 1;
    k_dora_slab_launch<CT, RP>(cfg, *a, p.tpc, p.tn, mdora, m_is_one);
    LK_LAUNCHED("dora_slab");
    return LYCO_OK;
}

template <typename CT> int slab_ct(const lk_expand_args *a, const slab_plan &p, cudaStream_t s, int *done) {
    switch (p.rp) {
    case 16: return slab_launch<CT, 16>(a, p, s, done);
    case 32: return slab_launch<CT, 32>(a, p, s, done);
    case 64: return slab_launch<CT, 64>(a, p, s, done);
    default: return slab_launch<CT, 128>(a, p, s, done);
    }
}

} // namespace

extern "C" int lk_dora_slab(const lk_expand_args *a, const lk_device *dev, void *stream, int *done) {
    *done = 0;
    const slab_plan p = slab_plan_of(a, dev);
    if (p.rp == 0) return LYCO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    return a->ct == DT_BF16 ? slab_ct<bf16_t>(a, p, s, done) : slab_ct<f16_t>(a, p, s, done);
}
