/*
 * cayley.c — the fp32 Cayley transform with the norm constraint and its adjoint, and the
 * channel-row tile I/O of the OFT family (see cayley.h for the formulas and layouts).
 *
 * Shapes: nblk blocks of n×n, compact row-major. Work: O(nblk·n³) per call, once per call; the
 * blocks are independent once the all-blocks norm is known, so they are spread over the threads
 * (each block computed by one thread exactly as before: results do not depend on the thread
 * count), when there is enough work to pay for the fork (CAYLEY_PAR_WORK n³-units). The norm and
 * the constraint's dot product stay single-threaded sums in a fixed order. Single-threaded the
 * forward took 1.1–1.3 ms for 80 blocks of 16 (Diag-OFT at 1280 channels) and 4.2–4.8 ms for
 * 1024 blocks of 10 (BOFT b10, 8 stages) on the dev box — a serial share of the 2155 µs and
 * 15035 µs those merges took at 16 threads on the H200 host. (On the 2-vCPU dev box two threads
 * give no gain — each block then takes ~30 µs instead of ~14 — so the 16-core effect is still to
 * be measured.)
 * Extra memory: 3·nblk·n² floats (state) + 3·n² floats and 2·n² + n doubles per thread (forward
 * scratch); backward (nblk + 3·nthreads)·n² doubles.
 */
#include <math.h>
#include <stdlib.h>

#include "cayley.h"

#define CAYLEY_PAR_WORK 65536 /* Σ n³ over the blocks below which the loops stay single-threaded */

void cpu_cayley_free(cpu_cayley *cy) {
    free(cy->Q0);
    free(cy->A);
    free(cy->Rm1);
    cy->Q0 = cy->A = cy->Rm1 = NULL;
}

/* X = (I − Q)^{-1} by Gauss–Jordan with partial pivoting on M = I − Q (overwritten). */
static void invert(int64_t n, float *M, float *X) {
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++) X[a * n + b] = a == b ? 1.0f : 0.0f;
    for (int64_t col = 0; col < n; col++) {
        int64_t piv = col;
        for (int64_t r = col + 1; r < n; r++)
            if (fabsf(M[r * n + col]) > fabsf(M[piv * n + col])) piv = r;
        if (piv != col)
            for (int64_t k = 0; k < n; k++) {
                float t = M[col * n + k];
                M[col * n + k] = M[piv * n + k];
                M[piv * n + k] = t;
                t = X[col * n + k];
                X[col * n + k] = X[piv * n + k];
                X[piv * n + k] = t;
            }
        float inv = 1.0f / M[col * n + col];
        for (int64_t k = 0; k < n; k++) {
            M[col * n + k] *= inv;
            X[col * n + k] *= inv;
        }
        for (int64_t r = 0; r < n; r++) {
            if (r == col) continue;
            float f = M[r * n + col];
            if (f == 0.0f) continue;
            for (int64_t k = 0; k < n; k++) {
                M[r * n + k] -= f * M[col * n + k];
                X[r * n + k] -= f * X[col * n + k];
            }
        }
    }
}

/* The n×n products below go row by row: for row a, t[b] starts at its initial value and takes
   the terms j = 0, 1, …, n−1 in order, so every element sees exactly the operations of the
   dot-product form (the same bits), while the inner loop runs over contiguous b, 8 columns at a
   time in registers (vectorised). The dot form was one latency-bound chain per element: ~1.2 ms
   of Cayley per call for 80 blocks of 16. No FMA can appear: this file is compiled for the
   baseline ISA (no CPU_HOT), so a·b + c rounds twice, as before. */
#define RW 8

/* t[b] += Σ_j x[j]·B[j·n + b], j in order (fp32) */
static void rowmul_f(int64_t n, const float *x, const float *B, float *restrict t) {
    int64_t b0 = 0;
    for (; b0 + RW <= n; b0 += RW) {
        float acc[RW];
        for (int l = 0; l < RW; l++) acc[l] = t[b0 + l];
        for (int64_t j = 0; j < n; j++)
            for (int l = 0; l < RW; l++) acc[l] += x[j] * B[j * n + b0 + l];
        for (int l = 0; l < RW; l++) t[b0 + l] = acc[l];
    }
    for (int64_t b = b0; b < n; b++)
        for (int64_t j = 0; j < n; j++) t[b] += x[j] * B[j * n + b];
}

/* the same in double */
static void rowmul_d(int64_t n, const double *x, const double *B, double *restrict t) {
    int64_t b0 = 0;
    for (; b0 + RW <= n; b0 += RW) {
        double acc[RW];
        for (int l = 0; l < RW; l++) acc[l] = t[b0 + l];
        for (int64_t j = 0; j < n; j++)
            for (int l = 0; l < RW; l++) acc[l] += x[j] * B[j * n + b0 + l];
        for (int l = 0; l < RW; l++) t[b0 + l] = acc[l];
    }
    for (int64_t b = b0; b < n; b++)
        for (int64_t j = 0; j < n; j++) t[b] += x[j] * B[j * n + b];
}

/* T = A·B (fp32, from 0). */
static void product(int64_t n, const float *A, const float *B, float *restrict T) {
    for (int64_t a = 0; a < n; a++) {
        for (int64_t b = 0; b < n; b++) T[a * n + b] = 0.0f;
        rowmul_f(n, A + a * n, B, T + a * n);
    }
}

/* Y += A·E (n×n, fp32; Y may be A): T = A·E first (the refinement correction). */
static void refine(int64_t n, const float *A, const float *E, float *T, float *Y) {
    product(n, A, E, T);
    for (int64_t i = 0; i < n * n; i++) Y[i] += T[i];
}

/* Out = rnd_f32(base − X + Q·X) in double, base = I (two_q false) or 2Q (two_q): the refinement
   residuals I − (I − Q)·A = I − A + Q·A (X = A) and 2Q − (I − Q)·(R − I) (X = R − I).
   d: 2·nn + n doubles of scratch (X and Q in double, one row). */
static void residual(int64_t n, const float *Q, const float *X, bool two_q, double *restrict d, float *restrict Out) {
    int64_t nn = n * n;
    double *Xd = d, *Qd = d + nn, *acc = Qd + nn;
    for (int64_t i = 0; i < nn; i++) {
        Xd[i] = (double)X[i];
        Qd[i] = (double)Q[i];
    }
    for (int64_t a = 0; a < n; a++) {
        for (int64_t b = 0; b < n; b++) acc[b] = (two_q ? 2.0 * Qd[a * n + b] : (a == b ? 1.0 : 0.0)) - Xd[a * n + b];
        rowmul_d(n, Qd + a * n, Xd, acc);
        for (int64_t b = 0; b < n; b++) Out[a * n + b] = (float)acc[b];
    }
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
    /* per thread: 3·nn floats, then 2·nn + n doubles (at an even float offset: 8-byte aligned) */
    const int64_t per = (3 * nn + 1) & ~(int64_t)1, per_all = per + 2 * (2 * nn + n);
    float *scratch = malloc(sizeof(float) * (size_t)(per_all * nt + 1));
    if (!cy->Q0 || !cy->A || !cy->Rm1 || !scratch) {
        free(scratch);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu cayley: out of memory for %lld blocks of %lld×%lld", (long long)nblk, (long long)n, (long long)n);
    }
    double ss = 0.0;
    for (int64_t k = 0; k < nblk; k++) {
        const float *Bk = B + k * nn;
        float *Qk = cy->Q0 + k * nn;
        float part = 0.0f;
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++) {
                float q = Bk[a * n + b] - Bk[b * n + a];
                Qk[a * n + b] = q;
                part += q * q;
            }
        ss += (double)part;
    }
    cy->q0norm = sqrt(ss);
    double nu = cy->q0norm + 1e-8;
    cy->active = kc > 0.0 && nu > kc;
    cy->scale = cy->active ? (float)(kc / nu) : 1.0f;
#pragma omp parallel for schedule(static) if (nblk * nn * n >= CAYLEY_PAR_WORK)
    for (int64_t k = 0; k < nblk; k++) {
        float *M = scratch + (size_t)cpu_thread_id() * (size_t)per_all, *Q = M + nn, *Tm = Q + nn;
        double *dsc = (double *)(void *)(M + per);
        const float *Q0k = cy->Q0 + k * nn;
        float *Ak = cy->A + k * nn, *Rk = cy->Rm1 + k * nn;
        for (int64_t i = 0; i < nn; i++) Q[i] = cy->active ? Q0k[i] * cy->scale : Q0k[i];
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++) M[a * n + b] = (a == b ? 1.0f : 0.0f) - Q[a * n + b];
        invert(n, M, Ak);
        /* one refinement step: E = I − (I − Q)·A = I − A + Q·A, A ← A + A·E */
        residual(n, Q, Ak, false, dsc, M);
        refine(n, Ak, M, Tm, Ak);
        /* R − I = 2·A·Q, refined: r = 2Q − (I − Q)·(R − I), (R − I) ← (R − I) + A·r */
        product(n, Ak, Q, Rk);
        for (int64_t i = 0; i < nn; i++) Rk[i] *= 2.0f;
        residual(n, Q, Rk, true, dsc, M);
        refine(n, Ak, M, Tm, Rk);
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
        double *T = GQ + all + (size_t)cpu_thread_id() * (size_t)per, *At = T + nn, *Gd = At + nn;
        const float *Ak = cy->A + k * nn, *Gk = GR + k * nn;
        double *Ok = GQ + k * nn;
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++) {
                At[a * n + b] = (double)Ak[b * n + a];
                Gd[a * n + b] = (double)Gk[a * n + b];
            }
        for (int64_t a = 0; a < n; a++) {        /* T = Aᵀ·G_R */
            for (int64_t b = 0; b < n; b++) T[a * n + b] = 0.0;
            rowmul_d(n, At + a * n, Gd, T + a * n);
        }
        for (int64_t a = 0; a < n; a++) {        /* G_Q = 2·T·Aᵀ */
            double *o = Ok + a * n;
            for (int64_t b = 0; b < n; b++) o[b] = 0.0;
            rowmul_d(n, T + a * n, At, o);
            for (int64_t b = 0; b < n; b++) o[b] *= 2.0;
        }
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
        for (int64_t t = 0; t < w; t++) {
            for (int64_t r = 0; r < nr; r++) tmp[r] = X[r * w + t];
            cpu_store(&io->v, j0 + t, o0, nr, tmp);
        }
        break;
    }
}
