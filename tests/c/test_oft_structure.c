/*
 * test_oft_structure.c — structural checks of the Diag-OFT / BOFT oracle (NUMERICS.md §2.7,
 * ALGORITHMS.md §2.4–2.5), independent of the accuracy scoring:
 *
 *  1. Cayley (fp64, src/ref/cayley.h directly), for random blocks of size 2..16, small and large
 *     values, constraint off / inactive / active:
 *       ‖RᵀR − I‖_max and ‖RRᵀ − I‖_max ≤ 8·n·2⁻⁵³  (R orthogonal),
 *       ‖R(I − Q) − (I + Q)‖_max tiny            (R is the Cayley transform of the Q used),
 *       Q0 = B − Bᵀ; active: ‖Q‖_F = κc·‖Q0‖/(‖Q0‖+1e-8); inactive: Q = Q0;  B = 0 gives R = I.
 *  2. Through the public API (ref backend, fp32 tensors; W'' = T(W) so W = I_O gives T's matrix):
 *       Diag-OFT: T = blockdiag(M_kᵀ), M_k = m·R_k + (1−m)·I, built here by hand;
 *       BOFT:     T = S_{M−1}⋯S_0, S_i = P_iᵀ·blockdiag(N_{i,k})·P_i with dense permutation
 *                 matrices built from the formula π_i(t) = c·2h + 2η + γ;
 *       m = 1, no rescale: TᵀT = I, and the bypass keeps the norm of every channel vector of y0
 *       (linear and conv2d);
 *       m = 0: merge gives W exactly and bypass gives y0 exactly.
 *
 * Prints one line per check and ends with "N passed, M failed"; exit status 1 on any failure.
 * Random data from LYCO_SEED (printed) or the clock.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "lyco.h"
#include "ref/cayley.h"

static int passed, failed;

static void report(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%-4s ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) passed++;
    else failed++;
}

static double uni(lyco_rng *r, double s) { return (2.0 * lyco_rng_uniform(r) - 1.0) * s; }

/* ---------------------------------------------------------------------------------------------
 * 1. The Cayley transform in fp64
 * ------------------------------------------------------------------------------------------- */
static void check_cayley(lyco_rng *rng, int64_t nblk, int64_t n, double amp, double kc_factor) {
    int64_t nn = n * n, all = nblk * nn;
    double *B = malloc(sizeof(double) * (size_t)all);
    double *mem = malloc(sizeof(double) * (size_t)ref_cayley_size(nblk, n));
    if (!B || !mem) { report(false, "cayley: out of memory"); free(B); free(mem); return; }
    for (int64_t i = 0; i < all; i++) B[i] = uni(rng, amp);
    /* kc_factor: 0 = off, > 1 = above the norm (inactive), < 1 = below it (active) */
    double q0 = 0;
    for (int64_t k = 0; k < nblk; k++)
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++) {
                double q = B[k * nn + a * n + b] - B[k * nn + b * n + a];
                q0 += q * q;
            }
    q0 = sqrt(q0);
    double kc = kc_factor * q0;
    ref_cayley cy;
    ref_cayley_fwd(&cy, mem, nblk, n, B, kc);

    double orth = 0, orth2 = 0, defn = 0, skew = 0;
    for (int64_t k = 0; k < nblk; k++) {
        const double *R = cy.R + k * nn, *Q = cy.Q + k * nn;
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++) {
                double s1 = 0, s2 = 0, s3 = 0;
                for (int64_t c = 0; c < n; c++) {
                    s1 += R[c * n + a] * R[c * n + b];                           /* RᵀR */
                    s2 += R[a * n + c] * R[b * n + c];                           /* RRᵀ */
                    s3 += R[a * n + c] * ((c == b ? 1.0 : 0.0) - Q[c * n + b]);  /* R(I − Q) */
                }
                double eye = a == b ? 1.0 : 0.0;
                orth = fmax(orth, fabs(s1 - eye));
                orth2 = fmax(orth2, fabs(s2 - eye));
                defn = fmax(defn, fabs(s3 - (eye + Q[a * n + b])));
                skew = fmax(skew, fabs(Q[a * n + b] + Q[b * n + a]));
                double q0ab = B[k * nn + a * n + b] - B[k * nn + b * n + a];
                skew = fmax(skew, fabs(cy.Q0[k * nn + a * n + b] - q0ab));
            }
    }
    double tol = 8.0 * (double)n * ldexp(1.0, -53) * (1.0 + amp * amp * (double)n);
    report(orth <= tol && orth2 <= tol, "cayley orthogonal      nblk=%lld n=%2lld amp=%.1f kc=%.2g·‖Q0‖: ‖RᵀR−I‖=%.2g ‖RRᵀ−I‖=%.2g (tol %.2g)",
           (long long)nblk, (long long)n, amp, kc_factor, orth, orth2, tol);
    report(defn <= 4 * tol && skew == 0.0, "cayley definition      nblk=%lld n=%2lld amp=%.1f: ‖R(I−Q)−(I+Q)‖=%.2g, Q0 = B−Bᵀ skew",
           (long long)nblk, (long long)n, amp, defn);

    double qn = 0;
    for (int64_t i = 0; i < all; i++) qn += cy.Q[i] * cy.Q[i];
    qn = sqrt(qn);
    if (kc_factor == 0.0 || kc_factor > 1.0) {
        bool same = !cy.active && cy.scale == 1.0 && memcmp(cy.Q, cy.Q0, sizeof(double) * (size_t)all) == 0;
        report(same && fabs(cy.q0norm - q0) <= 1e-14 * q0, "cayley constraint off  κc=%.3g ‖Q0‖=%.3g: Q = Q0", kc, q0);
    } else {
        double want = kc * q0 / (q0 + 1e-8);
        report(cy.active && fabs(qn - want) <= 1e-13 * want, "cayley constraint on   κc=%.3g ‖Q0‖=%.3g: ‖Q‖=%.15g want %.15g",
               kc, q0, qn, want);
    }
    free(B);
    free(mem);
}

static void check_cayley_zero(void) {
    double B[2 * 9] = {0}, mem[5 * 18 + 18];
    if (ref_cayley_size(2, 3) > (int64_t)(sizeof mem / sizeof mem[0])) { report(false, "cayley zero: scratch too small"); return; }
    ref_cayley cy;
    ref_cayley_fwd(&cy, mem, 2, 3, B, 0.5);
    bool ok = !cy.active;
    for (int k = 0; k < 2; k++)
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) ok = ok && cy.R[k * 9 + a * 3 + b] == (a == b ? 1.0 : 0.0);
    report(ok, "cayley B = 0 gives R = I exactly");
}

/* ---------------------------------------------------------------------------------------------
 * 2. The maps through the public API
 * ------------------------------------------------------------------------------------------- */
typedef struct {
    lyco_algo algo;
    int64_t O, stages, nb, b;   /* Diag-OFT: stages = 1 */
    double m, kc;
    float *blocks;              /* stages·nb·b·b */
    int64_t bshape[4];
    DLTensor tb;
    lyco_adapter a;
} oft_setup;

static bool setup(oft_setup *s, lyco_rng *rng, lyco_algo algo, int64_t O, int64_t b, int64_t stages, double m, double kc) {
    memset(s, 0, sizeof *s);
    s->algo = algo;
    s->O = O;
    s->b = b;
    s->nb = O / b;
    s->stages = algo == LYCO_ALGO_BOFT ? stages : 1;
    s->m = m;
    s->kc = kc;
    int64_t n = s->stages * s->nb * b * b;
    s->blocks = malloc(sizeof(float) * (size_t)n);
    if (!s->blocks) return false;
    for (int64_t i = 0; i < n; i++) s->blocks[i] = (float)uni(rng, 0.3);
    int nd = 0;
    if (algo == LYCO_ALGO_BOFT) s->bshape[nd++] = s->stages;
    s->bshape[nd++] = s->nb;
    s->bshape[nd++] = b;
    s->bshape[nd++] = b;
    s->tb = lyco_host_tensor(s->blocks, LYCO_F32, nd, s->bshape);
    lyco_adapter_init(&s->a, algo);
    lyco_layer_linear(&s->a.layer, O, O);
    s->a.tensor[LYCO_OFT_BLOCKS] = &s->tb;
    s->a.multiplier = m;
    s->a.constraint = kc;
    return true;
}

static const char *algo_str(const oft_setup *s) { return s->algo == LYCO_ALGO_BOFT ? "boft" : "diag_oft"; }

/* The dense O×O matrix of the map, built by hand from the formulas (fp64). */
static bool expected_map(const oft_setup *s, double *T) {
    int64_t O = s->O, b = s->b, nb = s->nb, nn = b * b, nblk = s->stages * nb;
    double *B = malloc(sizeof(double) * (size_t)(nblk * nn));
    double *mem = malloc(sizeof(double) * (size_t)ref_cayley_size(nblk, b));
    double *S = calloc((size_t)(O * O), sizeof(double)), *tmp = calloc((size_t)(O * O), sizeof(double));
    double *D = calloc((size_t)(O * O), sizeof(double));
    int64_t *pi = malloc(sizeof(int64_t) * (size_t)O);
    bool ok = B && mem && S && tmp && D && pi;
    if (ok) {
        for (int64_t i = 0; i < nblk * nn; i++) B[i] = s->blocks[i];
        ref_cayley cy;
        ref_cayley_fwd(&cy, mem, nblk, b, B, s->kc);
        for (int64_t i = 0; i < O * O; i++) T[i] = (i / O == i % O) ? 1.0 : 0.0;
        for (int64_t st = 0; st < s->stages; st++) {
            /* D = blockdiag(N_k) (BOFT) or blockdiag(M_kᵀ) (Diag-OFT) */
            memset(D, 0, sizeof(double) * (size_t)(O * O));
            for (int64_t k = 0; k < nb; k++)
                for (int64_t x = 0; x < b; x++)
                    for (int64_t y = 0; y < b; y++) {
                        const double *R = cy.R + (st * nb + k) * nn;
                        double r = s->algo == LYCO_ALGO_BOFT ? R[x * b + y] : R[y * b + x];
                        D[(k * b + x) * O + k * b + y] = s->m * r + (1.0 - s->m) * (x == y ? 1.0 : 0.0);
                    }
            if (s->algo == LYCO_ALGO_BOFT) {
                /* S_i = P_iᵀ D P_i, P_i[π(t), t] = 1: S_i[t, u] = D[π(t), π(u)] */
                int64_t h = ((int64_t)1 << st) * (b / 2);
                for (int64_t t = 0; t < O; t++) {
                    int64_t c = t / (2 * h), gamma = (t % (2 * h)) / h, eta = t % h;
                    pi[t] = c * 2 * h + 2 * eta + gamma;
                }
                for (int64_t t = 0; t < O; t++)
                    for (int64_t u = 0; u < O; u++) S[t * O + u] = D[pi[t] * O + pi[u]];
            } else {
                memcpy(S, D, sizeof(double) * (size_t)(O * O));
            }
            /* T ← S_i · T */
            for (int64_t i = 0; i < O; i++)
                for (int64_t j = 0; j < O; j++) {
                    double acc = 0;
                    for (int64_t k = 0; k < O; k++) acc += S[i * O + k] * T[k * O + j];
                    tmp[i * O + j] = acc;
                }
            memcpy(T, tmp, sizeof(double) * (size_t)(O * O));
        }
    }
    free(B); free(mem); free(S); free(tmp); free(D); free(pi);
    return ok;
}

/* W'' for W = I_O through lyco_merge_fwd; compared with the hand-built map; orthogonal at m = 1. */
static void check_merge_identity(lyco_ctx *ctx, lyco_rng *rng, lyco_algo algo, int64_t O, int64_t b, int64_t stages,
                                 double m, double kc) {
    oft_setup s;
    memset(&s, 0, sizeof s);
    int64_t O2 = O * O, wsh[2] = {O, O};
    float *W = calloc((size_t)O2, sizeof(float)), *out = calloc((size_t)O2, sizeof(float));
    double *T = calloc((size_t)O2, sizeof(double));
    if (!W || !out || !T || !setup(&s, rng, algo, O, b, stages, m, kc) || !expected_map(&s, T)) {
        report(false, "merge identity: out of memory");
        goto done;
    }
    for (int64_t i = 0; i < O; i++) W[i * O + i] = 1.0f;
    DLTensor tw = lyco_host_tensor(W, LYCO_F32, 2, wsh), to = lyco_host_tensor(out, LYCO_F32, 2, wsh);
    lyco_merge_args in = {&tw, NULL, LYCO_MERGE_WEIGHT};
    lyco_status st = lyco_merge_fwd(ctx, &to, NULL, &s.a, &in);
    if (st) {
        report(false, "%s merge O=%lld b=%lld M=%lld: %s: %s", algo_str(&s), (long long)O, (long long)b, (long long)s.stages,
               lyco_status_name(st), lyco_last_error());
        goto done;
    }
    double err = 0, orth = 0;
    for (int64_t i = 0; i < O2; i++) err = fmax(err, fabs((double)out[i] - T[i]));
    for (int64_t i = 0; i < O; i++)
        for (int64_t j = 0; j < O; j++) {
            double acc = 0;
            for (int64_t k = 0; k < O; k++) acc += (double)out[k * O + i] * (double)out[k * O + j];
            orth = fmax(orth, fabs(acc - (i == j ? 1.0 : 0.0)));
        }
    report(err <= 1e-6, "%-8s merge(W=I) = hand-built map   O=%2lld b=%lld M=%lld m=%.2g κc=%.2g: max err %.2g",
           algo_str(&s), (long long)O, (long long)b, (long long)s.stages, m, kc, err);
    if (m == 1.0)
        report(orth <= 1e-5, "%-8s merge(W=I) orthogonal       O=%2lld b=%lld M=%lld κc=%.2g: ‖TᵀT−I‖=%.2g",
               algo_str(&s), (long long)O, (long long)b, (long long)s.stages, kc, orth);
done:
    free(W); free(out); free(T); free(s.blocks);
}

/* Bypass at m = 1 without rescale keeps every channel vector's norm; at m = 0 it gives y0. */
static void check_bypass(lyco_ctx *ctx, lyco_rng *rng, lyco_algo algo, int64_t O, int64_t b, int64_t stages, double m,
                         double kc, bool conv) {
    oft_setup s;
    memset(&s, 0, sizeof s);
    int64_t N = 3, I = 4, H = 4, Wd = 3;
    int64_t xsh[4] = {N, I, H, Wd}, ysh[4] = {N, O, H, Wd};   /* conv 1×1: spatial kept */
    int nd = conv ? 4 : 2;   /* linear: x (N, I), y (N, O) */
    int64_t sp = conv ? H * Wd : 1, nx = N * I * sp, ny = N * O * sp;
    float *x = malloc(sizeof(float) * (size_t)nx), *y0 = malloc(sizeof(float) * (size_t)ny), *y = malloc(sizeof(float) * (size_t)ny);
    if (!x || !y0 || !y || !setup(&s, rng, algo, O, b, stages, m, kc)) {
        report(false, "bypass: out of memory");
        goto done;
    }
    if (conv) {
        int64_t k[2] = {1, 1};
        lyco_layer_conv(&s.a.layer, 2, O, I, k, NULL, NULL, NULL, 1);
    } else {
        lyco_layer_linear(&s.a.layer, O, I);
    }
    for (int64_t i = 0; i < nx; i++) x[i] = (float)uni(rng, 1.0);
    for (int64_t i = 0; i < ny; i++) y0[i] = (float)uni(rng, 1.0);
    DLTensor tx = lyco_host_tensor(x, LYCO_F32, nd, xsh), ty0 = lyco_host_tensor(y0, LYCO_F32, nd, ysh),
             ty = lyco_host_tensor(y, LYCO_F32, nd, ysh);
    lyco_bypass_args in = {&tx, &ty0, NULL, 0};
    lyco_status st = lyco_bypass_fwd(ctx, &ty, &s.a, &in);
    if (st) {
        report(false, "%s bypass: %s: %s", algo_str(&s), lyco_status_name(st), lyco_last_error());
        goto done;
    }
    if (m == 0.0) {
        report(memcmp(y, y0, sizeof(float) * (size_t)ny) == 0, "%-8s bypass m=0 gives y0 exactly  O=%2lld b=%lld M=%lld %s",
               algo_str(&s), (long long)O, (long long)b, (long long)s.stages, conv ? "conv2d" : "linear");
        goto done;
    }
    double worst = 0;   /* relative change of ‖y[n, :, p]‖ against ‖y0[n, :, p]‖ */
    for (int64_t t = 0; t < N; t++)
        for (int64_t p = 0; p < sp; p++) {
            double a2 = 0, b2 = 0;
            for (int64_t o = 0; o < O; o++) {
                double u = y0[(t * O + o) * sp + p], v = y[(t * O + o) * sp + p];
                a2 += u * u;
                b2 += v * v;
            }
            worst = fmax(worst, fabs(sqrt(b2) - sqrt(a2)) / sqrt(a2));
        }
    report(worst <= 1e-6, "%-8s bypass m=1 keeps norms      O=%2lld b=%lld M=%lld κc=%.2g %s: worst rel %.2g", algo_str(&s),
           (long long)O, (long long)b, (long long)s.stages, kc, conv ? "conv2d" : "linear", worst);
done:
    free(x); free(y0); free(y); free(s.blocks);
}

/* m = 0: merge gives W exactly (random W). */
static void check_merge_m0(lyco_ctx *ctx, lyco_rng *rng, lyco_algo algo, int64_t O, int64_t b, int64_t stages) {
    oft_setup s;
    memset(&s, 0, sizeof s);
    int64_t I = 5, wsh[2] = {O, I};
    float *W = malloc(sizeof(float) * (size_t)(O * I)), *out = malloc(sizeof(float) * (size_t)(O * I));
    if (!W || !out || !setup(&s, rng, algo, O, b, stages, 0.0, 0.0)) {
        report(false, "merge m=0: out of memory");
        goto done;
    }
    lyco_layer_linear(&s.a.layer, O, I);
    for (int64_t i = 0; i < O * I; i++) W[i] = (float)uni(rng, 1.0);
    DLTensor tw = lyco_host_tensor(W, LYCO_F32, 2, wsh), to = lyco_host_tensor(out, LYCO_F32, 2, wsh);
    lyco_merge_args in = {&tw, NULL, LYCO_MERGE_WEIGHT};
    lyco_status st = lyco_merge_fwd(ctx, &to, NULL, &s.a, &in);
    if (st) {
        report(false, "%s merge m=0: %s: %s", algo_str(&s), lyco_status_name(st), lyco_last_error());
        goto done;
    }
    report(memcmp(W, out, sizeof(float) * (size_t)(O * I)) == 0, "%-8s merge m=0 gives W exactly   O=%2lld b=%lld M=%lld",
           algo_str(&s), (long long)O, (long long)b, (long long)s.stages);
done:
    free(W); free(out); free(s.blocks);
}

int main(void) {
    uint64_t seed = lyco_seed_from_env();
    printf("test_oft_structure: seed %llu (LYCO_SEED=%llu to rerun)\n", (unsigned long long)seed, (unsigned long long)seed);
    lyco_rng rng;
    lyco_rng_seed(&rng, seed);

    /* 1. Cayley */
    static const int64_t sizes[] = {2, 3, 4, 5, 8, 16};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        check_cayley(&rng, 3, sizes[i], 0.3, 0.0);
        check_cayley(&rng, 3, sizes[i], 2.0, 0.0);   /* large Q: still orthogonal */
        check_cayley(&rng, 3, sizes[i], 0.3, 0.4);   /* constraint active */
        check_cayley(&rng, 3, sizes[i], 0.3, 3.0);   /* constraint given but inactive */
    }
    check_cayley_zero();

    /* 2. the maps */
    lyco_ctx *ctx = NULL;
    if (lyco_ctx_create(&ctx) || lyco_ctx_set_backend(ctx, LYCO_BACKEND_REF)) {
        report(false, "context with the ref backend: %s", lyco_last_error());
    } else {
        for (int mi = 0; mi < 2; mi++) {
            double m = mi == 0 ? 1.0 : 0.6;
            check_merge_identity(ctx, &rng, LYCO_ALGO_DIAG_OFT, 12, 4, 1, m, 0.0);
            check_merge_identity(ctx, &rng, LYCO_ALGO_DIAG_OFT, 16, 8, 1, m, 0.5);
            check_merge_identity(ctx, &rng, LYCO_ALGO_BOFT, 8, 8, 1, m, 0.0);
            check_merge_identity(ctx, &rng, LYCO_ALGO_BOFT, 16, 2, 1, m, 0.0);
            check_merge_identity(ctx, &rng, LYCO_ALGO_BOFT, 16, 2, 4, m, 0.0);
            check_merge_identity(ctx, &rng, LYCO_ALGO_BOFT, 24, 6, 3, m, 0.5);
            check_merge_identity(ctx, &rng, LYCO_ALGO_BOFT, 32, 4, 2, m, 0.0);
        }
        for (int conv = 0; conv < 2; conv++) {
            check_bypass(ctx, &rng, LYCO_ALGO_DIAG_OFT, 12, 3, 1, 1.0, 0.0, conv);
            check_bypass(ctx, &rng, LYCO_ALGO_DIAG_OFT, 16, 4, 1, 1.0, 0.5, conv);
            check_bypass(ctx, &rng, LYCO_ALGO_BOFT, 16, 2, 4, 1.0, 0.0, conv);
            check_bypass(ctx, &rng, LYCO_ALGO_BOFT, 16, 4, 3, 1.0, 0.5, conv);
            check_bypass(ctx, &rng, LYCO_ALGO_DIAG_OFT, 12, 3, 1, 0.0, 0.0, conv);
            check_bypass(ctx, &rng, LYCO_ALGO_BOFT, 16, 2, 4, 0.0, 0.5, conv);
        }
        check_merge_m0(ctx, &rng, LYCO_ALGO_DIAG_OFT, 12, 4, 1);
        check_merge_m0(ctx, &rng, LYCO_ALGO_BOFT, 16, 2, 4);
        check_merge_m0(ctx, &rng, LYCO_ALGO_BOFT, 16, 4, 2);
    }
    lyco_ctx_destroy(ctx);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
