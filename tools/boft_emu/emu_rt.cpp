/*
 * emu_rt.cpp — the runtime of the host emulation of src/cuda/boft_group.cu (tools/boft_emu):
 * a CUDA block = 256 std::threads sharing one shared-memory buffer (poisoned with NaN before each
 * block) and one std::barrier for __syncthreads; blocks run one after another; cp.async is a
 * plain 16-byte copy; scratch comes from aligned_alloc (poisoned). oft_cay_fwd hands out the test's
 * N − I, oft_cay_bwd / oft_sum_rho capture ∂L/∂R and the ρ-gradient sums (double) for the test.
 * Catches indexing, layout and host-logic errors; it cannot prove the absence of GPU-only races.
 */
#include "cuda/boft_group.cuh"
thread_local u3 threadIdx, blockIdx;
thread_local float *emu_smem;
static std::barrier<> *g_bar;
void __syncthreads() { g_bar->arrive_and_wait(); }
void cp_async16(void *dst, const void *src, int n) { if (n) memcpy(dst, src, 16); else memset(dst, 0, 16); }
int lyco_fail(int s, const char *fmt, ...) { va_list ap; va_start(ap, fmt); vfprintf(stderr, fmt, ap); va_end(ap); fprintf(stderr, "\n"); return s; }
float *g_Nm; std::vector<float> g_GR; std::vector<double> g_grho;
int oft_cay_fwd(oft_cay *s, const lk_oft_args *, int, cudaStream_t) { s->Op1 = g_Nm; return 0; }
int oft_cay_bwd(const oft_cay *, const lk_oft_args *a, const float *GR, cudaStream_t) { size_t n = a->M * a->nb * a->bs * a->bs; g_GR.assign(GR, GR + n); return 0; }
int oft_cay_free(oft_cay *, cudaStream_t) { return 0; }
int oft_sum_rho(const float *part, i64 S, i64 O, const lk_view *, cudaStream_t) {
    g_grho.assign(O, 0.0);
    for (i64 s = 0; s < S; s++) for (i64 o = 0; o < O; o++) g_grho[o] += part[s * O + o];
    return 0;
}
int lk_scratch_alloc(void **p, size_t bytes, cudaStream_t) {
    *p = NULL; if (!bytes) return 0;
    *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    /* poison */
    memset(*p, 0xff, bytes);
    return 0;
}
int lk_scratch_free(void *p, cudaStream_t) { free(p); return 0; }
void emu_launch(unsigned grid, size_t smem, std::function<void()> body) {
    std::vector<float> sm(smem / 4 + 16);
    std::barrier<> bar(NT);
    g_bar = &bar;
    std::vector<std::thread> th;
    for (int t = 0; t < NT; t++)
        th.emplace_back([&, t] {
            threadIdx.x = t;
            emu_smem = sm.data();
            for (unsigned b = 0; b < grid; b++) {
                blockIdx.x = b;
                if (t == 0) for (auto &v : sm) v = NAN;   /* poison (before the barrier below) */
                bar.arrive_and_wait();
                body();
                bar.arrive_and_wait();
            }
        });
    for (auto &x : th) x.join();
}
