/*
 * test_cvt_paths.c — the conversion paths that test_convert does not reach (NUMERICS.md §2.3,
 * §3.4–3.5, §4.3, §4.7), each against src/core/convert.c (itself tested against first principles
 * by test_convert) or against an exact expectation:
 *
 *   (a) the fused CPU backend's vectorised conversions (src/cpu/view.c: cpu_cvt_out, cpu_cvt_in,
 *       cpu_round), whose header promises bit-identity with convert.c: every 16-bit pattern
 *       widened; fp32 → fp16/bf16 on every high half-word combined with the low half-words that
 *       decide rounding (0, 1, the tie, tie ± 1, all ones …), on the three fp32 patterns at and
 *       around every midpoint between neighbouring fp16 and bf16 values (ties to even, the
 *       65504/65520 overflow threshold, the subnormal ties, 2^-25), on every NaN class, and on
 *       2^20 random patterns; the in-place round trip cpu_round; fp32 inputs rounded "through" a
 *       16-bit compute dtype by cpu_cvt_in. Lengths that are not a multiple of the 256-element
 *       chunk, an odd byte offset for the 16-bit buffer.
 *   (b) the oracle's output rounding lyco_store_f64 / lyco_scatter_f64: an fp64 value must be
 *       rounded once, directly to the storage dtype (never through fp32, §2.3): for every finite
 *       fp16 and bf16 value h, the fp64 values just above and just below the midpoint between h
 *       and its upper neighbour (closer than fp32 can resolve) must round up and down
 *       respectively — a double rounding through fp32 collapses both onto the tie and rounds them
 *       to even; plus §2.3's example d = 1 + 2^-11 + 2^-30 → fp16 0x3c01.
 *
 * Prints one line per check and ends with "N passed, M failed"; exits non-zero on failure.
 * Random data from LYCO_SEED (printed) or the clock.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "cpu/cpu.h"
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

static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* ---- (a) src/cpu/view.c against src/core/convert.c -------------------------------------------- */

#define MAXN (1 << 21)
static uint32_t pats[MAXN];
static float fin[MAXN], fout[MAXN];
static unsigned char raw16[2 * MAXN + 2];

/* Narrows pats[0..n) with cpu_cvt_out into an odd-offset buffer and compares every result with
   the scalar conversion; also cpu_round in place against lyco_round_f32 (bitwise, NaN included). */
static void narrow_batch(const char *what, int64_t n) {
    for (int T = 0; T < 2; T++) {
        lyco_dtype d = T ? LYCO_BF16 : LYCO_F16;
        for (int64_t i = 0; i < n; i++) fin[i] = bits_f32(pats[i]);
        unsigned char *dst = raw16 + 1; /* odd byte offset: cpu_cvt_out must not assume alignment */
        cpu_cvt_out(fin, dst, d, n);
        int64_t bad = 0, first = -1;
        uint16_t got = 0, want = 0;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h, w = d == LYCO_F16 ? lyco_f32_to_f16(fin[i]) : lyco_f32_to_bf16(fin[i]);
            memcpy(&h, dst + 2 * i, 2);
            if (h != w) {
                if (first < 0) first = i, got = h, want = w;
                bad++;
            }
        }
        if (first >= 0)
            report(false, "cpu_cvt_out fp32->%s, %s: %lld of %lld differ from convert.c (first 0x%08x -> 0x%04x, expected 0x%04x)",
                   lyco_dtype_name(d), what, (long long)bad, (long long)n, pats[first], got, want);
        else
            report(true, "cpu_cvt_out fp32->%s, %s: %lld patterns bit-identical to convert.c", lyco_dtype_name(d), what, (long long)n);

        memcpy(fout, fin, sizeof(float) * (size_t)n);
        cpu_round(fout, n, d);
        bad = 0, first = -1;
        uint32_t g32 = 0, w32 = 0;
        for (int64_t i = 0; i < n; i++) {
            uint32_t g = f32_bits(fout[i]), w = f32_bits(lyco_round_f32(fin[i], d));
            if (g != w) {
                if (first < 0) first = i, g32 = g, w32 = w;
                bad++;
            }
        }
        if (first >= 0)
            report(false, "cpu_round to %s, %s: %lld of %lld differ from lyco_round_f32 (first 0x%08x -> 0x%08x, expected 0x%08x)",
                   lyco_dtype_name(d), what, (long long)bad, (long long)n, pats[first], g32, w32);
        else
            report(true, "cpu_round to %s, %s: %lld patterns bit-identical to lyco_round_f32", lyco_dtype_name(d), what, (long long)n);

        /* fp32 data read "through" the 16-bit compute dtype (cpu_cvt_in with sd = fp32) */
        cpu_cvt_in(fin, LYCO_F32, d, fout, n);
        bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++) {
            uint32_t g = f32_bits(fout[i]), w = f32_bits(lyco_round_f32(fin[i], d));
            if (g != w) {
                if (first < 0) first = i, g32 = g, w32 = w;
                bad++;
            }
        }
        if (first >= 0)
            report(false, "cpu_cvt_in fp32 through %s, %s: %lld of %lld differ (first 0x%08x -> 0x%08x, expected 0x%08x)",
                   lyco_dtype_name(d), what, (long long)bad, (long long)n, pats[first], g32, w32);
        else
            report(true, "cpu_cvt_in fp32 through %s, %s: %lld patterns bit-identical", lyco_dtype_name(d), what, (long long)n);
    }
}

static void widen_all(void) {
    for (int T = 0; T < 2; T++) {
        lyco_dtype d = T ? LYCO_BF16 : LYCO_F16;
        const int64_t n = 65536 + 3; /* not a multiple of the chunk: the last three repeat 0, 1, 2 */
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(i & 0xffff);
            memcpy(raw16 + 1 + 2 * i, &h, 2);
        }
        cpu_cvt_in(raw16 + 1, d, LYCO_F32, fout, n);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(i & 0xffff);
            float w = d == LYCO_F16 ? lyco_f16_to_f32(h) : lyco_bf16_to_f32(h);
            if (f32_bits(fout[i]) != f32_bits(w)) {
                if (first < 0) first = i;
                bad++;
            }
        }
        report(bad == 0, "cpu_cvt_in %s->fp32, all 65,536 patterns: %lld differ from convert.c%s", lyco_dtype_name(d), (long long)bad,
               bad ? " (see the first below)" : "");
        if (bad) {
            uint16_t h = (uint16_t)(first & 0xffff);
            printf("     first: 0x%04x -> 0x%08x, expected 0x%08x\n", h, f32_bits(fout[first]),
                   f32_bits(d == LYCO_F16 ? lyco_f16_to_f32(h) : lyco_bf16_to_f32(h)));
        }
    }
}

static void narrow_all(lyco_rng *rng) {
    static const uint16_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x2000, 0x3000, 0x5fff, 0x6000,
                                    0x7fff, 0x8000, 0x8001, 0xa000, 0xefff, 0xf000, 0xffff};
    const int nl = (int)(sizeof lows / sizeof lows[0]);
    int64_t n = 0;
    for (uint32_t hi = 0; hi < 65536; hi++)
        for (int k = 0; k < nl; k++) pats[n++] = hi << 16 | lows[k];
    narrow_batch("every high half-word x 16 rounding-relevant low half-words", n);

    /* around every midpoint between neighbouring 16-bit values (both signs) */
    n = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) { /* fp16: finite, the last one's upper neighbour is Inf */
        double lo = lyco_f16_to_f32((uint16_t)h), up = h + 1 < 0x7c00 ? lyco_f16_to_f32((uint16_t)(h + 1)) : 65536.0;
        uint32_t m = f32_bits((float)((lo + up) / 2)); /* exact in fp32 */
        for (uint32_t s = 0; s < 2; s++)
            for (int dlt = -1; dlt <= 1; dlt++) pats[n++] = (m + (uint32_t)dlt) | s << 31;
    }
    narrow_batch("fp16 midpoints and their fp32 neighbours", n);
    n = 0;
    for (uint32_t h = 0; h < 0x7f80; h++) { /* bf16 finite */
        uint32_t m = h << 16 | 0x8000u;    /* the midpoint between h and h+1 */
        for (uint32_t s = 0; s < 2; s++)
            for (int dlt = -1; dlt <= 1; dlt++) pats[n++] = (m + (uint32_t)dlt) | s << 31;
    }
    narrow_batch("bf16 midpoints and their fp32 neighbours", n);

    /* NaN and Inf classes: every exponent-all-ones pattern with a sampled payload */
    n = 0;
    for (uint32_t p = 0; p < (1u << 23); p += 97) {
        pats[n++] = 0x7f800000u | p;
        pats[n++] = 0xff800000u | p;
    }
    pats[n++] = 0x7f800000u, pats[n++] = 0xff800000u, pats[n++] = 0x7fffffffu, pats[n++] = 0xffffffffu;
    pats[n++] = 0x7f800001u, pats[n++] = 0x7fc00000u, pats[n++] = 0x7f80ffffu, pats[n++] = 0x7f808000u;
    narrow_batch("Inf and NaN patterns (sampled payloads)", n);

    n = 0;
    for (int64_t i = 0; i < (1 << 20); i++) {
        uint32_t u = (uint32_t)lyco_rng_next(rng);
        /* half uniform bits, half in the exponent range where 16-bit rounding happens */
        if (i & 1) u = (u & 0x807fffffu) | (uint32_t)(100 + lyco_rng_next(rng) % 60) << 23;
        pats[n++] = u;
    }
    narrow_batch("2^20 random patterns", n);
}

/* ---- (b) lyco_store_f64 / lyco_scatter_f64: one rounding, fp64 -> T ---------------------------- */

static uint16_t store16(double v, lyco_dtype d) {
    uint16_t h;
    lyco_store_f64(&h, d, v);
    return h;
}

static void store_f64_direct(void) {
    uint16_t h = store16(1.0 + 0x1p-11 + 0x1p-30, LYCO_F16);
    report(h == 0x3c01, "lyco_store_f64(1 + 2^-11 + 2^-30, fp16) = 0x%04x (expected 0x3c01; 0x3c00 is a double rounding through fp32)", h);
    h = store16(1.0 + 0x1p-8 + 0x1p-30, LYCO_BF16);
    report(h == 0x3f81, "lyco_store_f64(1 + 2^-8 + 2^-30, bf16) = 0x%04x (expected 0x3f81; 0x3f80 is a double rounding through fp32)", h);

    for (int T = 0; T < 2; T++) {
        lyco_dtype d = T ? LYCO_BF16 : LYCO_F16;
        uint32_t top = d == LYCO_F16 ? 0x7bff : 0x7f7f; /* the last value with a finite upper neighbour */
        int64_t bad = 0, n = 0;
        uint32_t first = 0;
        for (uint32_t s = 0; s < 2; s++)
            for (uint32_t k = 0; k < top; k++) {
                uint16_t lo = (uint16_t)(k | s << 15), up = (uint16_t)((k + 1) | s << 15);
                double a = d == LYCO_F16 ? lyco_f16_to_f32(lo) : lyco_bf16_to_f32(lo);
                double b = d == LYCO_F16 ? lyco_f16_to_f32(up) : lyco_bf16_to_f32(up);
                double mid = (a + b) / 2, eps = fabs(b - a) * 0x1p-20; /* far below fp32's resolution at mid */
                uint16_t ga = store16(mid - (b - a) / fabs(b - a) * eps, d); /* toward a: rounds to lo */
                uint16_t gb = store16(mid + (b - a) / fabs(b - a) * eps, d); /* toward b: rounds to up */
                n += 2;
                if (ga != lo || gb != up) {
                    if (!bad) first = lo;
                    bad += (ga != lo) + (gb != up);
                }
            }
        report(bad == 0, "lyco_store_f64 to %s just off every midpoint (%lld values): %lld not rounded to the nearer neighbour (first above 0x%04x)",
               lyco_dtype_name(d), (long long)n, (long long)bad, first);
    }

    /* the same through lyco_scatter_f64 into a strided 16-bit view (the oracle's output path) */
    double src[6] = {1.0 + 0x1p-11 + 0x1p-30, -(1.0 + 0x1p-11 + 0x1p-30), 1.0 + 0x1p-11 - 0x1p-30,
                     3.0 + 0x1p-10 + 0x1p-29, 65519.0, 65520.0};
    uint16_t want[6] = {0x3c01, 0xbc01, 0x3c00, 0x4201, 0x7bff, 0x7c00};
    uint16_t buf[12];
    memset(buf, 0xff, sizeof buf);
    int64_t shape[2] = {2, 3}, strides[2] = {1, 4}; /* column-major-ish: element (i, j) at i + 4j */
    DLTensor t = lyco_host_tensor(buf, LYCO_F16, 2, shape);
    t.strides = strides;
    lyco_scatter_f64(&t, src);
    int bad = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            if (buf[i + 4 * j] != want[i * 3 + j]) bad++;
    report(bad == 0, "lyco_scatter_f64 into a strided fp16 view rounds each value once (%d of 6 wrong)", bad);
}

int main(void) {
    uint64_t seed = lyco_seed_from_env();
    printf("test_cvt_paths: seed %llu (LYCO_SEED=%llu to rerun)\n", (unsigned long long)seed, (unsigned long long)seed);
    lyco_rng rng;
    lyco_rng_seed(&rng, seed);
    widen_all();
    narrow_all(&rng);
    store_f64_direct();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
