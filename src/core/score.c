/*
 * score.c — ULP scoring against the fp64 oracle (NUMERICS.md §2.2, §4.2).
 *
 * y = kernel output widened exactly, r = exact fp64 reference. The RMS-normalised score is
 * |y−r| / ulp_T(rms(r)); the hybrid score subtracts the element's own final rounding
 * (0.5·ulp_T(r)) first, so a correctly rounded large element is not penalised. NaN/Inf in the
 * reference must be matched in class and sign; NaN/Inf anywhere else is a failure.
 */
#include <math.h>

#include "core.h"

static double rms_of(const double *r, int64_t n) {
    double s = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(r[i])) { s += r[i] * r[i]; k++; }
    return k ? sqrt(s / (double)k) : 0.0;
}

static bool same_class(double y, double r) {
    if (isnan(r)) return isnan(y);
    if (isinf(r)) return isinf(y) && signbit(y) == signbit(r);
    return isfinite(y);
}

void lyco_score_f64(const double *y, const double *r, int64_t n, int64_t rows, lyco_dtype T,
                    lyco_score *out) {
    out->max_ulp = out->mean_ulp = out->max_excess = out->peak = 0;
    out->n = n;
    out->bad_class = 0;
    out->rms = rms_of(r, n);
    int64_t nrows = rows > 0 ? rows : 1;
    int64_t cols = nrows ? n / nrows : n;
    double sum = 0;
    for (int64_t row = 0; row < nrows; row++) {
        const double *rr = r + row * cols, *yy = y + row * cols;
        double u = lyco_ulp(rows > 0 ? rms_of(rr, cols) : out->rms, T);
        for (int64_t i = 0; i < cols; i++) {
            if (!same_class(yy[i], rr[i])) { out->bad_class++; continue; }
            if (!isfinite(rr[i])) continue;
            if (fabs(rr[i]) > out->peak) out->peak = fabs(rr[i]);
            double d = fabs(yy[i] - rr[i]);
            double e = d / u;
            double ex = (d - 0.5 * lyco_ulp(rr[i], T)) / u;
            sum += e;
            if (e > out->max_ulp) out->max_ulp = e;
            if (ex > out->max_excess) out->max_excess = ex;
        }
    }
    out->mean_ulp = n ? sum / (double)n : 0;
}

bool lyco_score_pass(const lyco_score *s, double budget) {
    return s->bad_class == 0 && s->max_excess <= budget;
}
