/*
 * dora.cu — DoRA weight decomposition (ALGORITHMS.md §1.6): the per-index statistics pass that
 * every additive algorithm shares (the producer-specific norm pass and the epilogue/backward
 * formulas are in merge_ep.cuh; LoCon's kernels call them from locon.cu).
 *
 *   in : ss[k·per + κ] = Σ V², sg[…] = Σ G·V (per row, or per column with per = K kernel
 *        positions of one input channel), from pass 1; or nparts per-tile partials of Σ V²
 *        (ss[t·n + k·per + κ], summed t = 0, 1, … inside κ's term; lk_dora_finish_parts)
 *   out: st[3k..3k+2] = { f_k, f_k − 1, γ_k },  ∂L/∂d_k = m·S_k / n_k  (when wanted)
 *        ‖V‖_k = sqrt(Σ_κ ss), n_k = ‖V‖_k + ε, d_k = RN_CT(dora_scale[k]),
 *        f_k = d_k / n_k, and with m ≠ 1: f_k − 1 = m·(d_k − n_k)/n_k, f_k = 1 + (f_k − 1);
 *        γ_k = m·d_k·S_k / (n_k²·‖V‖_k), S_k = Σ_κ sg.
 * One thread per kept index; the K columns of a channel are summed in index order
 * (deterministic). No extra memory beyond the caller's scratch.
 */
#include "cuda/merge_ep.cuh"

__global__ __launch_bounds__(NT) void k_dora_finish(lk_dora dr, const float *ss, const float *sg, i64 nparts, i64 np,
                                                    i64 kept, i64 per, float mf, int m_is_one, int ct, float *st) {
    i64 k = (i64)blockIdx.x * NT + threadIdx.x;
    if (k >= kept) return;
    float s2 = 0.0f, S = 0.0f;
    for (i64 q = 0; q < per; q++)
        for (i64 t = 0; t < nparts; t++) {
            s2 += ss[t * np + k * per + q];
            if (sg) S += sg[t * np + k * per + q];
        }
    const dora_fk q = dora_f_of(dr, s2, k, mf, m_is_one, ct);
    float gam = 0.0f;
    if (sg) {
        gam = mf * q.d / (q.n * q.n) * S / q.nrm;
        if (dr.grad_d.p) vstore(dr.grad_d, 0, k, mf / q.n * S);
    }
    st[3 * k] = q.f;
    st[3 * k + 1] = q.fm1;
    st[3 * k + 2] = gam;
}

extern "C" int lk_dora_finish(const lk_dora *dr, const float *ss, const float *sg, int64_t kept, int64_t per,
                              double m, int32_t ct, float *stats, void *stream) {
    if (kept == 0) return LYCO_OK;
    k_dora_finish<<<(unsigned)cdiv(kept, NT), NT, 0, (cudaStream_t)stream>>>(*dr, ss, sg, 1, 0, kept, per, (float)m, m == 1.0,
                                                                              ct, stats);
    LK_LAUNCHED("dora_finish");
    return LYCO_OK;
}

/* The same from nparts per-tile partials of Σ V² (ss[t·n + i], t in order; lowrank.cu's stats) and,
   for the backward, of Σ g·V (sg, laid out alike; NULL = forward). */
extern "C" int lk_dora_finish_parts(const lk_dora *dr, const float *ss, const float *sg, int64_t nparts, int64_t n, int64_t kept,
                                    int64_t per, double m, int32_t ct, float *stats, void *stream) {
    if (kept == 0) return LYCO_OK;
    k_dora_finish<<<(unsigned)cdiv(kept, NT), NT, 0, (cudaStream_t)stream>>>(*dr, ss, sg, nparts, n, kept, per, (float)m,
                                                                              m == 1.0, ct, stats);
    LK_LAUNCHED("dora_finish (parts)");
    return LYCO_OK;
}
