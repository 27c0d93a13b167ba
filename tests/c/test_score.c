/*
 * test_score.c — the scorer every accuracy verdict rests on (src/core/score.c, NUMERICS.md §2.2,
 * §4.2): lyco_score_f64 and lyco_score_pass on inputs whose scores are known exactly.
 *
 *   (a) correctly rounded outputs (y = RN_T(r), random r, every dtype) score max_excess = 0 and
 *       pass a zero budget — including elements many times the RMS (the hybrid rule forgives the
 *       element's own 0.5-ULP rounding and nothing more);
 *   (b) an element off by j ULP (j = 1, 2, 3) of a reference that is exactly representable and
 *       sits in the RMS's binade scores max_ulp = j and max_excess = j − 0.5 exactly; it passes a
 *       budget of j − 0.5 and fails j − 0.5 − 1/64; mean_ulp = j / n;
 *   (c) a large element (8× the RMS) off by one ULP of its own: excess = (1 − 0.5)·8 = 4 ULP of
 *       the RMS, so pure own-ULP scoring cannot hide it;
 *   (d) classes: NaN or ±Inf where the reference is finite, a finite value where it is NaN or
 *       Inf, and an Inf of the wrong sign each count one bad_class and fail any budget (even
 *       1e300); NaN against NaN and Inf against the same Inf are fine;
 *   (e) per-row normalisation (rows > 0): the same 1-ULP error is measured against its own row's
 *       RMS, not the global one.
 *
 * Prints one line per check and ends with "N passed, M failed"; exits non-zero on failure.
 * Random data from LYCO_SEED (printed) or the clock.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "lyco.h"

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

#define N 64
static const lyco_dtype dts[3] = {LYCO_F16, LYCO_BF16, LYCO_F32};

static void rounded_outputs(lyco_rng *rng) {
    double r[N], y[N];
    for (int t = 0; t < 3; t++) {
        lyco_dtype T = dts[t];
        for (int i = 0; i < N; i++) {
            r[i] = (2.0 * lyco_rng_uniform(rng) - 1.0) * (i % 8 == 0 ? 50.0 : 1.0); /* some ≫ RMS */
            y[i] = lyco_round_f64(r[i], T);
        }
        lyco_score s;
        lyco_score_f64(y, r, N, 0, T, &s);
        report(s.max_excess == 0.0 && s.bad_class == 0 && lyco_score_pass(&s, 0.0) && s.n == N,
               "%s: y = RN(r) scores max_excess %g (expected 0), bad_class %lld, passes budget 0: %d",
               lyco_dtype_name(T), s.max_excess, (long long)s.bad_class, lyco_score_pass(&s, 0.0));
    }
}

static void off_by_j(void) {
    double r[N], y[N];
    for (int t = 0; t < 3; t++) {
        lyco_dtype T = dts[t];
        for (int j = 1; j <= 3; j++) {
            for (int i = 0; i < N; i++) y[i] = r[i] = (i & 1) ? 1.25 : -1.25; /* rms 1.25, exact in every T */
            double u = lyco_ulp(1.25, T);
            y[5] = r[5] + j * u;
            lyco_score s;
            lyco_score_f64(y, r, N, 0, T, &s);
            double ex = j - 0.5;
            bool ok = s.max_ulp == j && s.max_excess == ex && fabs(s.mean_ulp - (double)j / N) < 1e-12 && s.bad_class == 0 &&
                      lyco_score_pass(&s, ex) && !lyco_score_pass(&s, ex - 1.0 / 64) && s.rms == 1.25;
            report(ok, "%s: one element off by %d ULP: max_ulp %g (expected %d), max_excess %g (expected %g), mean %g (expected %g), "
                   "passes %g: %d, fails %g: %d",
                   lyco_dtype_name(T), j, s.max_ulp, j, s.max_excess, ex, s.mean_ulp, (double)j / N, ex,
                   lyco_score_pass(&s, ex), ex - 1.0 / 64, !lyco_score_pass(&s, ex - 1.0 / 64));
        }
    }
}

static void large_element(void) {
    for (int t = 0; t < 3; t++) {
        lyco_dtype T = dts[t];
        double r[N], y[N];
        for (int i = 0; i < N; i++) r[i] = (i & 1) ? 1.0 : -1.0;
        r[0] = 8.0; /* rms = sqrt((64 + 63) / 64) in [1, 2): ulp(rms) = ulp(1) */
        memcpy(y, r, sizeof y);
        y[0] = 8.0 + lyco_ulp(8.0, T);
        lyco_score s;
        lyco_score_f64(y, r, N, 0, T, &s);
        report(s.max_excess == 4.0 && s.max_ulp == 8.0 && !lyco_score_pass(&s, 3.99),
               "%s: an element 8x the RMS off by one of its own ULPs: max_excess %g (expected 4), max_ulp %g (expected 8)",
               lyco_dtype_name(T), s.max_excess, s.max_ulp);
    }
}

static void classes(void) {
    const double inf = INFINITY, nan = NAN;
    struct { double y, r; bool bad; const char *what; } k[] = {
        {nan, 1.0, true, "NaN where the reference is finite"},
        {inf, 1.0, true, "+Inf where the reference is finite"},
        {-inf, -1.0, true, "-Inf where the reference is finite"},
        {1.0, nan, true, "a finite value where the reference is NaN"},
        {1.0, inf, true, "a finite value where the reference is +Inf"},
        {-inf, inf, true, "-Inf where the reference is +Inf"},
        {nan, inf, true, "NaN where the reference is +Inf"},
        {nan, nan, false, "NaN where the reference is NaN"},
        {-inf, -inf, false, "-Inf where the reference is -Inf"},
    };
    for (size_t c = 0; c < sizeof k / sizeof k[0]; c++)
        for (int t = 0; t < 3; t++) {
            double r[8] = {0.5, -0.5, 0.25, 1.0, -1.0, 0.75, 0.5, 0.125}, y[8];
            memcpy(y, r, sizeof y);
            r[3] = k[c].r;
            y[3] = k[c].y;
            lyco_score s;
            lyco_score_f64(y, r, 8, 0, dts[t], &s);
            bool pass = lyco_score_pass(&s, 1e300);
            bool ok = k[c].bad ? (s.bad_class == 1 && !pass) : (s.bad_class == 0 && pass && s.max_excess == 0.0);
            report(ok, "%s: %s: bad_class %lld, passes budget 1e300: %d (expected %d)", lyco_dtype_name(dts[t]), k[c].what,
                   (long long)s.bad_class, pass, !k[c].bad);
        }
}

static void per_row(void) {
    for (int t = 0; t < 3; t++) {
        lyco_dtype T = dts[t];
        double r[2 * 16], y[2 * 16];
        for (int i = 0; i < 16; i++) {
            r[i] = (i & 1) ? 1.0 : -1.0;               /* row 0: rms 1 */
            r[16 + i] = (i & 1) ? 1024.0 : -1024.0;    /* row 1: rms 1024 */
        }
        memcpy(y, r, sizeof y);
        y[3] += lyco_ulp(1.0, T); /* 1 ULP in row 0 */
        lyco_score s, g;
        lyco_score_f64(y, r, 32, 2, T, &s);
        lyco_score_f64(y, r, 32, 0, T, &g);
        double global = 0.5 * lyco_ulp(1.0, T) / lyco_ulp(g.rms, T);
        report(s.max_excess == 0.5 && g.max_excess == global,
               "%s: rows = 2 scores a 1-ULP error in the small row against that row's RMS: %g (expected 0.5); globally %g (expected %g)",
               lyco_dtype_name(T), s.max_excess, g.max_excess, global);
    }
}

int main(void) {
    uint64_t seed = lyco_seed_from_env();
    printf("test_score: seed %llu (LYCO_SEED=%llu to rerun)\n", (unsigned long long)seed, (unsigned long long)seed);
    lyco_rng rng;
    lyco_rng_seed(&rng, seed);
    rounded_outputs(&rng);
    off_by_j();
    large_element();
    classes();
    per_row();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
