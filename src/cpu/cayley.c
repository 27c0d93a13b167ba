/*
 * cayley.c — the fp32 Cayley transform with the norm constraint and its adjoint, and the
 * channel-row tile I/O of the OFT family (see cayley.h for the formulas and layouts).
 *
 * Shapes: nblk blocks of n×n, compact row-major. Work: O(nblk·n³) per call, once per call; the
 * blocks are independent once the all-blocks norm is known, so they are spread over the threads
 * (each block computed by one thread exactly as before: results do not depend on the thread
 * count), when there is enough work to pay for the fork (CAYLEY_PAR_WORK n³-units). The norm and
 * the constraint's dot product stay single-threaded sums in a fixed order. The per-block work is
 * in cayley_kern.h (products a few rows per pass in vector registers, an AVX2 copy without FMA
 * contraction: the same bits as the scalar dot-product loops it replaced, on every x86-64).
 * Before that rewrite the forward took 1.1–1.3 ms single-threaded for 80 blocks of 16 (Diag-OFT
 * at 1280 channels; ~30% of a 640² 1024-token Diag-OFT bypass forward); after it, ~19% of that
 * bypass (perf, 1 thread, docs/bench-cpu.md "session 17"); several rows per pass and the ‖Q0‖²
 * sums of four blocks interleaved took 80 blocks of 16 from ~150 to ~115 µs (session 24).
 * An x86-64-v4 copy of the same kernels (the same GCC vector types and order, so the same bits;
 * 32 vector registers: 8 rows per product pass) took the products of 40 blocks of 16 from ~40 to
 * ~27 µs at 1 thread (session 26).
 * Blocks of n ≤ CAYLEY_BATCH_N run eight at a time, one per vector lane (cayley_kern.h's
 * block_fwd8: every operation of the one-block code per lane, so the same bits): BOFT's many
 * small blocks (448 of 10 for a 640-channel, 7-stage bypass) had ~27 % of its forward at 1 thread
 * in the one-block code's short loops and scalar tails; now ~18 %.
 * Extra memory: 3·nblk·n² floats (state) + 3·n² floats and 3·n² doubles per thread (forward
 * scratch; eight-block path 5·8·n² floats and 6·4·n² doubles per thread); backward
 * (nblk + 3·nthreads)·n² doubles.
 */
#include <math.h>
#include <stdlib.h>

#include "cayley.h"
#include "isa.h"
#include "rot.h"

#define CAYLEY_PAR_WORK 65536 /* Σ n³ over the blocks below which the loops stay single-threaded */
#define CAYLEY_NORM_BLK 4     /* blocks whose ‖Q0_k‖² sums run interleaved */
#define CAYLEY_BATCH_N 12     /* blocks of n ≤ this run eight at a time, one per vector lane (at 16
                                 the scratch of eight blocks, 88 KB, left L1: slower than one by one) */

void cpu_cayley_free(cpu_cayley *cy) {
    free(cy->Q0);
    free(cy->A);
    free(cy->Rm1);
    cy->Q0 = cy->A = cy->Rm1 = NULL;
}

/* ---- the per-block kernels, once per ISA (cayley_kern.h; the v3 and v4 copies without FMA
   contraction, so every copy gives the same bits) ---- */
typedef float lk8f __attribute__((vector_size(32)));
typedef double lk4d __attribute__((vector_size(32)));
/* rows per pass of the products (CK_RF fp32, CK_RD fp64): as many as keep the accumulators in
   registers (v3: 16 ymm; v4: 32; base: the 32-byte vectors are pairs of xmm, 16 in all) */
#ifdef CPU_V3
#define CK_RF 4
#define CK_RD 4
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v3")
#pragma GCC optimize("fp-contract=off")
#define KN(name) name##_v3
#include "cayley_kern.h"
#undef KN
#pragma GCC pop_options
#undef CK_RF
#undef CK_RD
#endif
#ifdef CPU_V4
#define CK_RF 8
#define CK_RD 8
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v4")
#pragma GCC optimize("fp-contract=off")
#define KN(name) name##_v4
#include "cayley_kern.h"
#undef KN
#pragma GCC pop_options
#undef CK_RF
#undef CK_RD
#endif
#define CK_RF 2
#define CK_RD 2
#define KN(name) name##_base
#include "cayley_kern.h"
#undef KN
#undef CK_RF
#undef CK_RD

static void block_fwd(int64_t n, const float *Q, float *Ak, float *Rk, float *M, float *Tm, double *dsc) {
    CPU_DISPATCH(block_fwd, n, Q, Ak, Rk, M, Tm, dsc);
}

static void block_fwd8(int64_t n, const lk8f *Q, lk8f *Ak, lk8f *Rk, lk8f *M, lk8f *Tm, lk4d *dsc) {
    CPU_DISPATCH(block_fwd8, n, Q, Ak, Rk, M, Tm, dsc);
}

static void block_bwd(int64_t n, const float *Ak, const float *Gk, double *Ok, double *T, double *At, double *Gd) {
    CPU_DISPATCH(block_bwd, n, Ak, Gk, Ok, T, At, Gd);
}

/* Q0_k = B_k − B_kᵀ for nb blocks from B (compact), and part[k] = ‖Q0_k‖² in double, each a sum
   in element order: the nb blocks' sums interleaved (independent add chains; one alone is
   latency-bound, n² adds in a row). */
static inline __attribute__((always_inline)) void q0_blocks(int64_t n, int nb, const float *B, float *Q0, double *part) {
    int64_t nn = n * n;
    for (int i = 0; i < nb; i++) part[i] = 0.0;
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++)
            for (int i = 0; i < nb; i++) {
                float q = B[i * nn + a * n + b] - B[i * nn + b * n + a];
                Q0[i * nn + a * n + b] = q;
                part[i] += (double)q * (double)q;
            }
}

/* The blocks eight at a time (block_fwd8: lane l = block 8·g + l; a short last group's spare
   lanes run Q = 0, discarded): A and R − I bitwise those of block_fwd, per block. Per thread
   5·n² lk8f and 6·n² lk4d of scratch. */
static lyco_status cayley_fwd8(cpu_cayley *cy, double sd) {
    int64_t n = cy->n, nn = n * n, nblk = cy->nblk, ngr = (nblk + 7) / 8;
    const int nt = cpu_threads();
    size_t per = sizeof(lk8f) * (size_t)(5 * nn) + sizeof(lk4d) * (size_t)(6 * nn);   /* a multiple of 32 */
    per = (per + 63) & ~(size_t)63;
    char *scratch = aligned_alloc(64, per * (size_t)nt);
    if (!scratch) return lyco_fail(LYCO_ERR_NOMEM, "cpu cayley: out of memory for %lld blocks of %lld×%lld", (long long)nblk, (long long)n, (long long)n);
#pragma omp parallel for schedule(static) if (nblk * nn * n >= CAYLEY_PAR_WORK)
    for (int64_t g = 0; g < ngr; g++) {
        lk4d *dsc = (lk4d *)(void *)(scratch + per * (size_t)cpu_thread_id());
        lk8f *Q = (lk8f *)(void *)(dsc + 6 * nn), *A = Q + nn, *R = A + nn, *M = R + nn, *Tm = M + nn;
        int64_t k0 = 8 * g, nl = nblk - k0 < 8 ? nblk - k0 : 8;
        for (int64_t i = 0; i < nn; i++) {
            lk8f q = {0};
            for (int64_t l = 0; l < nl; l++) {
                float q0 = cy->Q0[(k0 + l) * nn + i];
                q[l] = cy->active ? (float)((double)q0 * sd) : q0;
            }
            Q[i] = q;
        }
        block_fwd8(n, Q, A, R, M, Tm, dsc);
        for (int64_t l = 0; l < nl; l++)
            for (int64_t i = 0; i < nn; i++) {
                cy->A[(k0 + l) * nn + i] = A[i][l];
                cy->Rm1[(k0 + l) * nn + i] = R[i][l];
            }
    }
    free(scratch);
    return LYCO_OK;
}

lyco_status cpu_cayley_fwd(cpu_cayley *cy, const float *B, int64_t nblk, int64_t n, double kc) {
    int64_t nn = n * n, all = nblk * nn;
    memset(cy, 0, sizeof *cy);
    cy->nblk = nblk;
    cy->n = n;
    cy->kc = kc;
    cy->Q0 = malloc(sizeof(float) * (size_t)(all + 1));
    cy->A = malloc(sizeof(float) * (size_t)(all + 1));
    cy->Rm1 = malloc(sizeof(float) * (size_t)(all + 1));
    const int nt = cpu_threads();
    /* per thread: 3·nn floats, then 3·nn doubles (at an even float offset: 8-byte aligned) */
    const int64_t per = (3 * nn + 1) & ~(int64_t)1, per_all = per + 2 * (3 * nn);
    float *scratch = malloc(sizeof(float) * (size_t)(per_all * nt + 1));
    if (!cy->Q0 || !cy->A || !cy->Rm1 || !scratch) {
        free(scratch);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu cayley: out of memory for %lld blocks of %lld×%lld", (long long)nblk, (long long)n, (long long)n);
    }
    double ss = 0.0, part[CAYLEY_NORM_BLK];
    int64_t k0 = 0;
    for (; k0 + CAYLEY_NORM_BLK <= nblk; k0 += CAYLEY_NORM_BLK) {
        q0_blocks(n, CAYLEY_NORM_BLK, B + k0 * nn, cy->Q0 + k0 * nn, part);
        for (int i = 0; i < CAYLEY_NORM_BLK; i++) ss += part[i];
    }
    for (; k0 < nblk; k0++) {
        q0_blocks(n, 1, B + k0 * nn, cy->Q0 + k0 * nn, part);
        ss += part[0];
    }
    cy->q0norm = sqrt(ss);
    double nu = cy->q0norm + 1e-8;
    cy->active = kc > 0.0 && nu > kc;
    cy->scale = cy->active ? (float)(kc / nu) : 1.0f;
    const double sd = cy->active ? kc / nu : 1.0;
    if (n <= CAYLEY_BATCH_N) {
        free(scratch);
        return cayley_fwd8(cy, sd);
    }
#pragma omp parallel for schedule(static) if (nblk * nn * n >= CAYLEY_PAR_WORK)
    for (int64_t k = 0; k < nblk; k++) {
        float *M = scratch + (size_t)cpu_thread_id() * (size_t)per_all, *Q = M + nn, *Tm = Q + nn;
        const float *Q0k = cy->Q0 + k * nn;
        for (int64_t i = 0; i < nn; i++) Q[i] = cy->active ? (float)((double)Q0k[i] * sd) : Q0k[i];
        block_fwd(n, Q, cy->A + k * nn, cy->Rm1 + k * nn, M, Tm, (double *)(void *)(M + per));
    }
    free(scratch);
    return LYCO_OK;
}

lyco_status cpu_cayley_bwd(const cpu_cayley *cy, const float *GR, float *GB) {
    int64_t n = cy->n, nn = n * n, all = cy->nblk * nn;
    const int nt = cpu_threads();
    /* G_Q for every block, then per thread T, Aᵀ and G_R in double (nn each) */
    const int64_t per = 3 * nn;
    double *GQ = malloc(sizeof(double) * (size_t)(all + per * nt + 1));
    if (!GQ) return lyco_fail(LYCO_ERR_NOMEM, "cpu cayley: out of memory");
    /* G_Q_k = 2·A_kᵀ·G_R_k·A_kᵀ, then the constraint and G_B = G_Q0 − G_Q0ᵀ, all in double and
       rounded once: G_B keeps only the skew part of G_Q (and the constraint subtracts a multiple
       of Q0), which can be much smaller than G_Q, so roundings on the way are amplified there
       (fp32 sums gave 23 ulp on a BOFT gradient row, 15 this way). Row by row as in the
       forward: each element's terms in the dot form's order. */
#pragma omp parallel for schedule(static) if (cy->nblk * nn * n >= CAYLEY_PAR_WORK)
    for (int64_t k = 0; k < cy->nblk; k++) {
        double *T = GQ + all + (size_t)cpu_thread_id() * (size_t)per;
        block_bwd(n, cy->A + k * nn, GR + k * nn, GQ + k * nn, T, T + nn, T + 2 * nn);
    }
    /* through the constraint Q = κc·Q0/ν, ν = ‖Q0‖ + 1e-8 */
    if (cy->active) {
        double nu = cy->q0norm + 1e-8, dot = 0.0;
        for (int64_t i = 0; i < all; i++) dot += GQ[i] * (double)cy->Q0[i];
        /* at Q0 = 0 the norm has no derivative; its term is 0 there */
        double sc = cy->kc / nu, c2 = cy->q0norm > 0.0 ? cy->kc / (nu * nu) * dot / cy->q0norm : 0.0;
        for (int64_t i = 0; i < all; i++) GQ[i] = sc * GQ[i] - c2 * (double)cy->Q0[i];
    }
    /* Q0 = B − Bᵀ */
#pragma omp parallel for schedule(static) if (cy->nblk * nn * n >= CAYLEY_PAR_WORK)
    for (int64_t k = 0; k < cy->nblk; k++) {
        const double *G = GQ + k * nn;
        float *O = GB + k * nn;
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++) O[a * n + b] = (float)(G[a * n + b] - G[b * n + a]);
    }
    free(GQ);
    return LYCO_OK;
}

/* ---- channel-row tiles ---- */

void cpu_oft_io_init(cpu_oft_io *io, const lyco_call *c, const DLTensor *t) {
    memset(io, 0, sizeof *io);
    io->O = c->dims.O;
    io->sp = 1;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    if (!bypass) {
        io->kind = CPU_OFT_MERGE;
        cpu_view_init(&io->v, t, 1);
        io->n = io->v.cols;
    } else if (c->a->layer.kind == LYCO_LAYER_CONV) {
        io->kind = CPU_OFT_CONV;
        io->sp = c->sp_out_n;
        cpu_view_init(&io->v, t, 2);          /* rows (n, o), cols positions */
        io->n = c->tokens * io->sp;
    } else {
        io->kind = CPU_OFT_LINEAR;
        cpu_view_init(&io->v, t, t->ndim - 1);  /* rows tokens, cols channels */
        io->n = c->tokens;
    }
}

int64_t cpu_oft_ntiles(const cpu_oft_io *io, int64_t tw) {
    if (io->kind == CPU_OFT_CONV) {
        if (io->sp <= 0) return 0;
        return (io->n / io->sp) * ((io->sp + tw - 1) / tw);
    }
    return (io->n + tw - 1) / tw;
}

void cpu_oft_tile(const cpu_oft_io *io, int64_t tw, int64_t b, int64_t *j0, int64_t *w) {
    if (io->kind == CPU_OFT_CONV) {
        int64_t per = (io->sp + tw - 1) / tw, img = b / per, p0 = (b % per) * tw;
        *j0 = img * io->sp + p0;
        *w = io->sp - p0 < tw ? io->sp - p0 : tw;
        return;
    }
    *j0 = b * tw;
    *w = io->n - *j0 < tw ? io->n - *j0 : tw;
}

void cpu_oft_load(const cpu_oft_io *io, int64_t o0, int64_t nr, int64_t j0, int64_t w, lyco_dtype T, float *X, float *tmp) {
    switch (io->kind) {
    case CPU_OFT_MERGE:
        for (int64_t r = 0; r < nr; r++) cpu_load(&io->v, o0 + r, j0, w, T, X + r * w);
        break;
    case CPU_OFT_CONV: {
        int64_t img = j0 / io->sp, p0 = j0 % io->sp;
        for (int64_t r = 0; r < nr; r++) cpu_load(&io->v, img * io->O + o0 + r, p0, w, T, X + r * w);
        break;
    }
    default:
        if (io->v.fast) {   /* register transposes (rot.h) */
            cpu_rot_tr_in(io->v.base + (j0 * io->v.rs + o0) * (int64_t)io->v.es, io->v.rs, io->v.dt, T, w, nr, X, w);
            break;
        }
        for (int64_t t = 0; t < w; t++) {
            cpu_load(&io->v, j0 + t, o0, nr, T, tmp);
            for (int64_t r = 0; r < nr; r++) X[r * w + t] = tmp[r];
        }
        break;
    }
}

void cpu_oft_store(const cpu_oft_io *io, int64_t o0, int64_t nr, int64_t j0, int64_t w, const float *X, float *tmp) {
    switch (io->kind) {
    case CPU_OFT_MERGE:
        for (int64_t r = 0; r < nr; r++) cpu_store(&io->v, o0 + r, j0, w, X + r * w);
        break;
    case CPU_OFT_CONV: {
        int64_t img = j0 / io->sp, p0 = j0 % io->sp;
        for (int64_t r = 0; r < nr; r++) cpu_store(&io->v, img * io->O + o0 + r, p0, w, X + r * w);
        break;
    }
    default:
        if (io->v.fast) {
            cpu_rot_tr_out(X, w, w, nr, io->v.base + (j0 * io->v.rs + o0) * (int64_t)io->v.es, io->v.rs, io->v.dt);
            break;
        }
        for (int64_t t = 0; t < w; t++) {
            for (int64_t r = 0; r < nr; r++) tmp[r] = X[r * w + t];
            cpu_store(&io->v, j0 + t, o0, nr, tmp);
        }
        break;
    }
}

char *cpu_oft_row(const cpu_oft_io *io, int64_t o, int64_t j0) {
    if (!io->v.fast || io->kind == CPU_OFT_LINEAR) return NULL;
    int64_t r = o, c = j0;
    if (io->kind == CPU_OFT_CONV) {
        r = (j0 / io->sp) * io->O + o;
        c = j0 % io->sp;
    }
    return io->v.base + (r * io->v.rs + c) * (int64_t)io->v.es;
}
