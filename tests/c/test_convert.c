/*
 * test_convert.c — the fp32 <-> fp16/bf16 conversions (lyco_f32_to_f16, lyco_f32_to_bf16,
 * lyco_f16_to_f32, lyco_bf16_to_f32) and lyco_round_f64 (direct fp64 -> T rounding) against an
 * independent reference written here from first principles (NUMERICS.md §2.3, §3.4–3.5, §4.7):
 *
 *   decode: a 16/32-bit pattern is (implicit + mantissa) · 2^(exp − bias − mbits), built in fp64;
 *   round:  RN_T(v) = q·ulp with ulp = 2^(max(⌊log2|v|⌋, emin) − p + 1), q = the integer nearest to
 *           |v|/ulp (exact power-of-two scaling), ties to the even q; |q·ulp| > max finite → ±Inf.
 *
 * Library results are judged by decoding them with the reference decoder (injective on non-NaN
 * patterns, sign of zero checked separately), so "equal" means bit-identical to RN_T.
 *
 * Quick tier (default): 2^22 random fp32 patterns (half uniform bits, half in the exponent range
 * where fp16/bf16 round, overflow and underflow), every edge class (±0, subnormals of fp32, fp16
 * and bf16 with every tie between them, min normal, max finite, the fp16 overflow thresholds
 * 65504/65520, the 2^-25 tie, ties to even at every 16-bit value, NaN payloads — all 131,072 NaN
 * patterns that a bf16 conversion without its NaN test would carry into ±Inf/±0 — and ±Inf),
 * exact widening and the 16→32→16 round trip of all 65,536 patterns of both 16-bit types (NaN
 * stays NaN with its sign), and lyco_round_f64 on random/tie/threshold doubles for fp16, bf16 and
 * fp32, including NUMERICS §2.3's d = 1 + 2^-11 + 2^-30 → 0x1.004p+0 (directly; 0x1p+0 via float).
 *
 *   test_convert --exhaustive   (full tier) all 2^32 fp32 inputs through both conversions.
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

/* ---------------------------------------------------------------------------------------------
 * The independent reference
 * ------------------------------------------------------------------------------------------- */
typedef struct {
    const char *name;
    int p;        /* significand bits incl. the hidden bit */
    int emin;     /* exponent of the min normal */
    double max;   /* max finite */
} fmt;

static const fmt FP16 = {"fp16", 11, -14, 65504.0};
static const fmt BF16 = {"bf16", 8, -126, 0x1.fep127};
static const fmt FP32 = {"fp32", 24, -126, 0x1.fffffep127};

/* 2^e as a double, built from its bit pattern (exact for -1074 <= e <= 1023). */
static double pow2(int e) {
    uint64_t b = e >= -1022 ? (uint64_t)(e + 1023) << 52 : 1ull << (e + 1074);
    double r;
    memcpy(&r, &b, 8);
    return r;
}

/* ⌊log2 a⌋ for a finite a > 0, from the fp64 bit pattern (subnormals: the top set bit). */
static int ilog2(double a) {
    uint64_t b;
    memcpy(&b, &a, 8);
    int field = (int)((b >> 52) & 0x7ff);
    if (field) return field - 1023;
    int msb = 51;
    while (!((b >> msb) & 1)) msb--;
    return -1074 + msb;
}

/* RN_T(v), from first principles. NaN and ±Inf and ±0 pass through. */
static double ref_round(double v, const fmt *f) {
    if (v != v || v == 0.0 || v - v != 0.0) return v;
    double a = v < 0 ? -v : v;
    int e = ilog2(a);
    if (e < f->emin) e = f->emin;
    double ulp = pow2(e - f->p + 1);
    double t = a / ulp;                       /* exact: division by a power of two, t < 2^p */
    double lo = (double)(int64_t)t;           /* t ≥ 0: truncation = floor */
    double frac = t - lo;                     /* exact */
    double q = lo;
    if (frac > 0.5 || (frac == 0.5 && ((int64_t)lo & 1))) q = lo + 1.0;
    double r = q * ulp;                       /* exact: q < 2^p + 1 */
    if (r > f->max) r = INFINITY;
    return v < 0 ? -r : r;
}

/* Decoders: pattern -> value (NaN for NaN patterns). */
static double dec16(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = (double)m * pow2(-24);
    else v = (double)(1024 + m) * pow2(e - 25);
    return (h & 0x8000) ? -v : v;
}
static double decbf(uint16_t h) {
    int e = (h >> 7) & 255, m = h & 127;
    double v;
    if (e == 255) v = m ? NAN : INFINITY;
    else if (e == 0) v = (double)m * pow2(-133);
    else v = (double)(128 + m) * pow2(e - 134);
    return (h & 0x8000) ? -v : v;
}
static double dec32(uint32_t u) {
    int e = (int)((u >> 23) & 255);
    uint32_t m = u & 0x7fffffu;
    double v;
    if (e == 255) v = m ? NAN : INFINITY;
    else if (e == 0) v = (double)m * pow2(-149);
    else v = (double)(0x800000u + m) * pow2(e - 150);
    return (u & 0x80000000u) ? -v : v;
}

static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static uint64_t f64_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

/* Tables of decoded 16-bit values (filled once by the reference decoders). */
static double tab16[65536], tabbf[65536];

static bool is_nan16(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
static bool is_nanbf(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

/* Same value and same sign (so: the same non-NaN pattern). */
static bool same(double got, double want) {
    return got == want && signbit(got) == signbit(want);
}

/* ---------------------------------------------------------------------------------------------
 * One fp32 input through both conversions; returns the number of failures (0..2) and describes
 * the first in `why`.
 * ------------------------------------------------------------------------------------------- */
static int check_one(uint32_t u, char *why, size_t n) {
    float f = bits_f32(u);
    uint16_t h = lyco_f32_to_f16(f), b = lyco_f32_to_bf16(f);
    int bad = 0;
    bool sign = (u >> 31) != 0;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        /* NaN: fp16 quiet NaN with the sign (NUMERICS §3.5); bf16 exactly (u>>16)|0x40 (§3.4) */
        if (!is_nan16(h) || !(h & 0x200) || ((h >> 15) != sign)) {
            if (!bad && why) snprintf(why, n, "f32 0x%08x (NaN) -> fp16 0x%04x; expected a quiet NaN with sign %d", u, h, sign);
            bad++;
        }
        uint16_t want = (uint16_t)((u >> 16) | 0x40u);
        if (b != want) {
            if (!bad && why) snprintf(why, n, "f32 0x%08x (NaN) -> bf16 0x%04x; expected 0x%04x (quiet NaN, sign kept)", u, b, want);
            bad++;
        }
        return bad;
    }
    double v = dec32(u);
    double r16 = ref_round(v, &FP16), rbf = ref_round(v, &BF16);
    if (!same(tab16[h], r16)) {
        if (why) snprintf(why, n, "f32 0x%08x (%a) -> fp16 0x%04x (%a); expected %a", u, v, h, tab16[h], r16);
        bad++;
    }
    if (!same(tabbf[b], rbf)) {
        if (!bad && why) snprintf(why, n, "f32 0x%08x (%a) -> bf16 0x%04x (%a); expected %a", u, v, b, tabbf[b], rbf);
        bad++;
    }
    return bad;
}

/* A batch of patterns: one report line. */
typedef struct {
    const char *what;
    int64_t n, bad;
    char first[200];
} batch;

static void batch_add(batch *bt, uint32_t u) {
    char why[200];
    bt->n++;
    if (check_one(u, why, sizeof why)) {
        if (!bt->bad) snprintf(bt->first, sizeof bt->first, "%s", why);
        bt->bad++;
    }
}
/* u and its neighbours u±1, u±2 (same sign), both signs. */
static void batch_add_near(batch *bt, uint32_t u) {
    for (int s = 0; s < 2; s++)
        for (int d = -2; d <= 2; d++) {
            uint32_t m = (u & 0x7fffffffu);
            int64_t w = (int64_t)m + d;
            if (w < 0 || w > 0x7fffffff) continue;
            batch_add(bt, (uint32_t)w | (s ? 0x80000000u : 0u));
        }
}
static void batch_report(const batch *bt) {
    report(bt->bad == 0 && bt->n > 0, "%-58s %9lld patterns, %lld wrong%s%s", bt->what, (long long)bt->n, (long long)bt->bad,
           bt->bad ? "; first: " : "", bt->bad ? bt->first : "");
}

/* An exact double value that is representable in fp32, as its fp32 pattern (via the hardware
   cast, exact here; the value is checked to survive the round trip). */
static uint32_t pat(double v) {
    float f = (float)v;
    if ((double)f != v) { printf("internal: %a is not an fp32 value\n", v); exit(2); }
    return f32_bits(f);
}

/* ---------------------------------------------------------------------------------------------
 * Single expectations (named edge cases with a stated answer)
 * ------------------------------------------------------------------------------------------- */
static void expect16(const char *what, uint32_t u, uint16_t want) {
    uint16_t h = lyco_f32_to_f16(bits_f32(u));
    report(h == want, "fp16(%-40s f32 0x%08x) = 0x%04x, expected 0x%04x", what, u, h, want);
}
static void expectbf(const char *what, uint32_t u, uint16_t want) {
    uint16_t h = lyco_f32_to_bf16(bits_f32(u));
    report(h == want, "bf16(%-40s f32 0x%08x) = 0x%04x, expected 0x%04x", what, u, h, want);
}

static void named_edges(void) {
    expect16("+0", 0x00000000u, 0x0000);
    expect16("-0", 0x80000000u, 0x8000);
    expect16("65504 (max finite)", pat(65504.0), 0x7bff);
    expect16("65519.996 (just below 65520)", 0x477fefffu, 0x7bff);
    expect16("65520 (overflow threshold)", 0x477ff000u, 0x7c00);
    expect16("-65520", 0xc77ff000u, 0xfc00);
    expect16("65536", pat(65536.0), 0x7c00);
    expect16("max finite fp32", 0x7f7fffffu, 0x7c00);
    expect16("+Inf", 0x7f800000u, 0x7c00);
    expect16("-Inf", 0xff800000u, 0xfc00);
    expect16("2^-14 (min normal)", pat(0x1p-14), 0x0400);
    expect16("2^-14 - ulp32 (rounds up to min normal)", 0x387fffffu, 0x0400);
    expect16("2^-24 (min subnormal)", pat(0x1p-24), 0x0001);
    expect16("2^-25 (tie -> +0, even)", 0x33000000u, 0x0000);
    expect16("-2^-25 (tie -> -0, even)", 0xb3000000u, 0x8000);
    expect16("2^-25 + ulp32 (-> min subnormal)", 0x33000001u, 0x0001);
    expect16("2^-25 - ulp32 (-> +0)", 0x32ffffffu, 0x0000);
    expect16("1.5*2^-24 (tie -> 2*2^-24)", pat(0x1.8p-24), 0x0002);
    expect16("2.5*2^-24 (tie -> 2*2^-24)", pat(0x1.4p-23), 0x0002);
    expect16("min subnormal fp32", 0x00000001u, 0x0000);
    expect16("-max subnormal fp32", 0x807fffffu, 0x8000);
    expect16("1 + 2^-11 (tie -> 1)", pat(1.0 + 0x1p-11), 0x3c00);
    expect16("1 + 3*2^-11 (tie -> 1 + 2^-9)", pat(1.0 + 0x3p-11), 0x3c02);
    expect16("1 + 2^-11 + 2^-23 (-> 1 + 2^-10)", pat(1.0 + 0x1p-11 + 0x1p-23), 0x3c01);
    expect16("2047.5 (tie in [1024, 2048) -> 2048, even)", pat(2047.5), 0x6800);
    expect16("qNaN", 0x7fc00000u, 0x7e00);
    expect16("-qNaN", 0xffc00000u, 0xfe00);

    expectbf("+0", 0x00000000u, 0x0000);
    expectbf("-0", 0x80000000u, 0x8000);
    expectbf("max finite bf16", 0x7f7f0000u, 0x7f7f);
    expectbf("max bf16 + half ulp (tie -> Inf)", 0x7f7f8000u, 0x7f80);
    expectbf("max bf16 + half ulp - ulp32", 0x7f7f7fffu, 0x7f7f);
    expectbf("max finite fp32 (-> Inf)", 0x7f7fffffu, 0x7f80);
    expectbf("-Inf", 0xff800000u, 0xff80);
    expectbf("min normal", 0x00800000u, 0x0080);
    expectbf("min subnormal bf16 (2^-133)", 0x00010000u, 0x0001);
    expectbf("2^-134 (tie -> +0)", 0x00008000u, 0x0000);
    expectbf("-2^-134 (tie -> -0)", 0x80008000u, 0x8000);
    expectbf("3*2^-134 (tie -> 2*2^-133)", 0x00018000u, 0x0002);
    expectbf("max subnormal + half (carries to min normal)", 0x007f8000u, 0x0080);
    expectbf("1 + 2^-8 (tie -> 1)", pat(1.0 + 0x1p-8), 0x3f80);
    expectbf("1 + 3*2^-8 (tie -> 1 + 2^-6)", pat(1.0 + 0x3p-8), 0x3f82);
    expectbf("qNaN", 0x7fc00000u, 0x7fc0);
    expectbf("NaN 0x7f800001 (payload low only)", 0x7f800001u, 0x7fc0);
    expectbf("NaN 0x7fffffff (would carry to -0)", 0x7fffffffu, 0x7fff);
    expectbf("NaN 0xffff8000 (would wrap to +0)", 0xffff8000u, 0xffff);
}

/* Every edge class, as batches against the reference. */
static void edge_batches(void) {
    batch bt = {.what = "specials: 0, fp32 subnormal/min normal/max, ±Inf (±2 ulp)"};
    static const uint32_t sp[] = {0x00000000u, 0x00000001u, 0x00000002u, 0x00400000u, 0x007fffffu, 0x00800000u,
                                  0x00800001u, 0x7f7fffffu, 0x7f7ffffeu, 0x7f800000u, 0x3f800000u};
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) batch_add_near(&bt, sp[i]);
    batch_report(&bt);

    batch th = {.what = "fp16 thresholds 65504/65520, 2^-14, 2^-24, 2^-25 (±2 ulp)"};
    static const double tv[] = {65504.0, 65520.0, 65536.0, 65488.0, 0x1p-14, 0x1p-24, 0x1p-25, 0x1.8p-25, 0x1p-26};
    for (size_t i = 0; i < sizeof tv / sizeof tv[0]; i++) batch_add_near(&th, pat(tv[i]));
    batch_report(&th);

    /* every fp16 value, and every midpoint between neighbours (the ties), ±1/±2 ulp32 */
    batch t16 = {.what = "every fp16 value and every tie between neighbours (±2 ulp)"};
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double v = tab16[h], w = tab16[h + 1];
        batch_add_near(&t16, pat(v));
        double mid = (v + w) / 2; /* exact in fp32: at most 12 significant bits */
        if (h + 1 < 0x7c00) batch_add_near(&t16, pat(mid));
    }
    batch_add_near(&t16, 0x477ff000u); /* the tie above max finite */
    batch_report(&t16);

    batch tb = {.what = "every bf16 value and every tie between neighbours (±2 ulp)"};
    for (uint32_t h = 0; h < 0x7f80; h++) {
        uint32_t u = h << 16;
        batch_add_near(&tb, u);
        batch_add_near(&tb, u | 0x8000u); /* the midpoint to the next bf16 value */
    }
    batch_report(&tb);

    /* fp16 subnormals: every value k·2^-24 and every tie (k + 1/2)·2^-24 */
    batch s16 = {.what = "fp16 subnormal range: k*2^-24 and (k+1/2)*2^-24 (±2 ulp)"};
    for (int k = 0; k <= 1024; k++) {
        batch_add_near(&s16, pat(k * 0x1p-24));
        batch_add_near(&s16, pat((k + 0.5) * 0x1p-24));
    }
    batch_report(&s16);

    /* bf16 subnormals: every value k·2^-133 and every tie */
    batch sb = {.what = "bf16 subnormal range: k*2^-133 and (k+1/2)*2^-133 (±2 ulp)"};
    for (uint32_t k = 0; k <= 128; k++) {
        batch_add_near(&sb, k << 16);
        batch_add_near(&sb, (k << 16) | 0x8000u);
    }
    batch_report(&sb);

    /* the 131,072 NaN patterns that the bf16 trick without its NaN test misconverts:
       upper 0x7f80/0xff80 with 1 <= low <= 0x8000 (-> ±Inf) and upper 0x7fff/0xffff with
       low >= 0x8000 (-> carry into the sign: -0 / wrap to +0) */
    batch nb = {.what = "NaNs the bf16 +0x7fff trick would turn into ±Inf/±0 (all)"};
    for (uint32_t s = 0; s < 2; s++) {
        uint32_t sg = s << 31;
        for (uint32_t lo = 1; lo <= 0x8000u; lo++) batch_add(&nb, sg | 0x7f800000u | lo);
        for (uint32_t lo = 0x8000u; lo <= 0xffffu; lo++) batch_add(&nb, sg | 0x7fff0000u | lo);
    }
    report(nb.n == 131072, "that NaN set has exactly 131,072 patterns (NUMERICS §3.4): %lld", (long long)nb.n);
    batch_report(&nb);

    /* further NaN payloads: the whole 0x7f80xxxx / 0x7fffxxxx blocks, payloads only in the bits
       fp16 drops (low 13), and quiet/signalling NaNs with random payloads */
    batch np = {.what = "NaN payloads: blocks 0x7f80/0x7fff/0x7fc0, low-13-bit payloads"};
    for (uint32_t s = 0; s < 2; s++) {
        uint32_t sg = s << 31;
        for (uint32_t lo = 1; lo <= 0xffffu; lo++) {
            batch_add(&np, sg | 0x7f800000u | lo);
            batch_add(&np, sg | 0x7fff0000u | lo);
            batch_add(&np, sg | 0x7fc00000u | lo);
        }
        for (uint32_t m = 1; m < 0x2000u; m++) batch_add(&np, sg | 0x7f800000u | m);
    }
    batch_report(&np);
}

/* ---------------------------------------------------------------------------------------------
 * Sampled fp32 inputs
 * ------------------------------------------------------------------------------------------- */
static void sampled(lyco_rng *rng) {
    batch all = {.what = "random fp32 bit patterns (uniform bits)"};
    batch mid = {.what = "random fp32 patterns, exponent in the 16-bit rounding range"};
    for (int i = 0; i < (1 << 21); i++) batch_add(&all, (uint32_t)lyco_rng_next(rng));
    for (int i = 0; i < (1 << 21); i++) {
        uint64_t r = lyco_rng_next(rng);
        /* exponent 0x60..0x90 covers fp16 underflow..overflow; bf16 rounds everywhere */
        uint32_t e = 0x60u + (uint32_t)((r >> 40) % 0x31u);
        uint32_t u = ((uint32_t)(r >> 63) << 31) | (e << 23) | ((uint32_t)r & 0x7fffffu);
        batch_add(&mid, u);
    }
    batch_report(&all);
    batch_report(&mid);
}

/* ---------------------------------------------------------------------------------------------
 * 16 -> 32 widening and 16 -> 32 -> 16 round trips, all 65,536 patterns of each type
 * ------------------------------------------------------------------------------------------- */
static void widening_and_round_trips(void) {
    int64_t bad_w16 = 0, bad_wbf = 0, bad_rt16 = 0, bad_rtbf = 0;
    char f_w16[160] = "", f_wbf[160] = "", f_rt16[160] = "", f_rtbf[160] = "";
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float w16 = lyco_f16_to_f32(h), wbf = lyco_bf16_to_f32(h);
        uint32_t u16 = f32_bits(w16), ubf = f32_bits(wbf);
        bool sign = (h >> 15) != 0;
        /* widening: exact; NaN keeps sign and payload (mantissa shifted up) */
        bool ok16, okbf;
        if (is_nan16(h)) ok16 = u16 == (((uint32_t)sign << 31) | 0x7f800000u | ((uint32_t)(h & 0x3ffu) << 13));
        else ok16 = same(dec32(u16), tab16[h]);
        if (is_nanbf(h)) okbf = ubf == ((uint32_t)h << 16);
        else okbf = same(dec32(ubf), tabbf[h]);
        if (!ok16 && !bad_w16++) snprintf(f_w16, sizeof f_w16, "fp16 0x%04x -> f32 0x%08x (%a), expected %a", h, u16, dec32(u16), tab16[h]);
        if (!okbf && !bad_wbf++) snprintf(f_wbf, sizeof f_wbf, "bf16 0x%04x -> f32 0x%08x (%a), expected %a", h, ubf, dec32(ubf), tabbf[h]);
        /* round trip: identity for non-NaN; NaN stays NaN with its sign (bf16: quieted exactly) */
        uint16_t r16 = lyco_f32_to_f16(w16), rbf = lyco_f32_to_bf16(wbf);
        bool okr16 = is_nan16(h) ? is_nan16(r16) && (r16 >> 15) == sign : r16 == h;
        bool okrbf = is_nanbf(h) ? is_nanbf(rbf) && (rbf >> 15) == sign && rbf == (h | 0x40) : rbf == h;
        if (!okr16 && !bad_rt16++) snprintf(f_rt16, sizeof f_rt16, "fp16 0x%04x -> 0x%04x", h, r16);
        if (!okrbf && !bad_rtbf++) snprintf(f_rtbf, sizeof f_rtbf, "bf16 0x%04x -> 0x%04x", h, rbf);
    }
    report(!bad_w16, "lyco_f16_to_f32 on all 65536 patterns: %lld wrong %s", (long long)bad_w16, f_w16);
    report(!bad_wbf, "lyco_bf16_to_f32 on all 65536 patterns: %lld wrong %s", (long long)bad_wbf, f_wbf);
    report(!bad_rt16, "fp16 -> f32 -> fp16 round trip, all 65536: %lld wrong %s", (long long)bad_rt16, f_rt16);
    report(!bad_rtbf, "bf16 -> f32 -> bf16 round trip, all 65536: %lld wrong %s", (long long)bad_rtbf, f_rtbf);
}

/* ---------------------------------------------------------------------------------------------
 * lyco_round_f64: direct rounding of fp64 values
 * ------------------------------------------------------------------------------------------- */
static const fmt *const fmts[3] = {&FP16, &BF16, &FP32};
static const lyco_dtype dts[3] = {LYCO_F16, LYCO_BF16, LYCO_F32};

static void expect_round(const char *what, double v, lyco_dtype d, double want) {
    double got = lyco_round_f64(v, d);
    bool ok = (want != want) ? got != got : same(got, want);
    report(ok, "round_f64(%-44s %a, %s) = %a, expected %a", what, v, lyco_dtype_name(d), got, want);
}

static void round_f64_tests(lyco_rng *rng) {
    /* NUMERICS §2.3: direct rounding vs double rounding through fp32 */
    double d = 1.0 + 0x1p-11 + 0x1p-30;
    expect_round("1 + 2^-11 + 2^-30 (direct)", d, LYCO_F16, 0x1.004p+0);
    uint16_t via = lyco_f32_to_f16((float)d);
    report(via == 0x3c00, "the same d through fp32 first double-rounds to 0x1p+0 (fp16 0x%04x, expected 0x3c00)", via);
    double db = 1.0 + 0x1p-8 + 0x1p-30;
    expect_round("1 + 2^-8 + 2^-30 (direct)", db, LYCO_BF16, 1.0 + 0x1p-7);
    uint16_t viab = lyco_f32_to_bf16((float)db);
    report(viab == 0x3f80, "the same through fp32 first double-rounds to 1 (bf16 0x%04x, expected 0x3f80)", viab);

    for (int k = 0; k < 3; k++) {
        lyco_dtype t = dts[k];
        const fmt *f = fmts[k];
        expect_round("+0", 0.0, t, 0.0);
        expect_round("-0", -0.0, t, -0.0);
        expect_round("+Inf", INFINITY, t, INFINITY);
        expect_round("-Inf", -INFINITY, t, -INFINITY);
        expect_round("NaN", NAN, t, NAN);
        expect_round("1e300", 1e300, t, INFINITY);
        expect_round("-1e300", -1e300, t, -INFINITY);
        expect_round("min subnormal fp64", 0x1p-1074, t, 0.0);
        expect_round("-min subnormal fp64", -0x1p-1074, t, -0.0);
        double ulpmax = pow2(ilog2(f->max) - f->p + 1);
        expect_round("max finite", f->max, t, f->max);
        expect_round("max + half ulp (tie -> Inf)", f->max + ulpmax / 2, t, INFINITY);
        expect_round("-(max + half ulp)", -(f->max + ulpmax / 2), t, -INFINITY);
        expect_round("max + half ulp - tiny", f->max + ulpmax / 2 - ulpmax * 0x1p-20, t, f->max);
        double minsub = pow2(f->emin - f->p + 1);
        expect_round("min subnormal", minsub, t, minsub);
        expect_round("half min subnormal (tie -> +0)", minsub / 2, t, 0.0);
        expect_round("-half min subnormal (tie -> -0)", -minsub / 2, t, -0.0);
        expect_round("half min subnormal + tiny", minsub / 2 * (1 + 0x1p-40), t, minsub);
        expect_round("1.5 min subnormal (tie -> 2)", minsub * 1.5, t, minsub * 2);
        expect_round("2.5 min subnormal (tie -> 2)", minsub * 2.5, t, minsub * 2);
        expect_round("min normal - half min subnormal (tie -> min normal)", pow2(f->emin) - minsub / 2, t, pow2(f->emin));
        expect_round("1 + half ulp (tie -> 1)", 1.0 + pow2(-f->p), t, 1.0);
        expect_round("1 + 3 half ulp (tie -> 1 + 2 ulp)", 1.0 + 3 * pow2(-f->p), t, 1.0 + pow2(2 - f->p));
        expect_round("1 + half ulp + 2^-50", 1.0 + pow2(-f->p) + 0x1p-50, t, 1.0 + pow2(1 - f->p));
        expect_round("1 - 3/4 of the finer ulp below 1", 1.0 - 3 * pow2(-f->p - 2), t, 1.0 - pow2(-f->p));
        expect_round("1 - 1/2 of the finer ulp below 1 (tie -> 1)", 1.0 - pow2(-f->p - 1), t, 1.0);
    }
    expect_round("65519.99999 (below 65520)", 65520.0 - 0x1p-30, LYCO_F16, 65504.0);
    expect_round("65520 (overflow threshold)", 65520.0, LYCO_F16, INFINITY);
    expect_round("2^-25 (tie -> +0)", 0x1p-25, LYCO_F16, 0.0);
    expect_round("2^-25 + 2^-60", 0x1p-25 + 0x1p-60, LYCO_F16, 0x1p-24);

    /* random doubles: every exponent where T rounds, plus random ties and near-ties */
    for (int k = 0; k < 3; k++) {
        const fmt *f = fmts[k];
        lyco_dtype t = dts[k];
        int64_t n = 0, bad = 0, bad_hw = 0;
        char first[200] = "";
        for (int i = 0; i < (1 << 19); i++) {
            uint64_t r = lyco_rng_next(rng);
            int e = f->emin - f->p - 4 + (int)((r >> 32) % (uint64_t)(ilog2(f->max) - f->emin + f->p + 10));
            double v;
            switch (i & 3) {
            case 0: /* random 52-bit mantissa */
                v = (1.0 + (double)(r & 0xfffffffffffffull) * 0x1p-52) * pow2(e);
                break;
            case 1: { /* an exact tie between two T values */
                double g = ref_round((1.0 + (double)(r & 0xfffffffffffffull) * 0x1p-52) * pow2(e), f);
                if (g - g != 0.0 || g == 0.0) g = pow2(f->emin);
                int ge = ilog2(g < 0 ? -g : g);
                if (ge < f->emin) ge = f->emin;
                v = g + pow2(ge - f->p);
                break;
            }
            case 2: { /* a tie ± one fp64 ulp */
                double g = ref_round((1.0 + (double)(r & 0xfffffffffffffull) * 0x1p-52) * pow2(e), f);
                if (g - g != 0.0 || g == 0.0) g = pow2(f->emin);
                int ge = ilog2(g < 0 ? -g : g);
                if (ge < f->emin) ge = f->emin;
                v = g + pow2(ge - f->p);
                v = (r >> 31) & 1 ? nextafter(v, INFINITY) : nextafter(v, 0.0);
                break;
            }
            default: /* random fp64 bit pattern */
                memcpy(&v, &r, 8);
                if (v != v) v = 1.0;
                break;
            }
            if ((r >> 30) & 1) v = -v;
            double got = lyco_round_f64(v, t), want = ref_round(v, f);
            n++;
            if (!same(got, want)) {
                if (!bad) snprintf(first, sizeof first, "%a (0x%016llx) -> %a, expected %a", v, (unsigned long long)f64_bits(v), got, want);
                bad++;
            }
            /* fp32: the hardware's direct fp64 -> fp32 conversion (RNE) is a second reference */
            if (t == LYCO_F32 && !same(got, (double)(float)v)) bad_hw++;
        }
        report(!bad, "round_f64 to %s: %lld random/tie/near-tie doubles vs reference, %lld wrong%s%s", f->name, (long long)n,
               (long long)bad, bad ? "; first: " : "", first);
        if (t == LYCO_F32)
            report(!bad_hw, "round_f64 to fp32 agrees with the hardware fp64->fp32 cast: %lld wrong", (long long)bad_hw);
    }

    /* fp32 inputs: rounding a widened fp32 value directly equals the fp32->16 conversions */
    int64_t badc = 0;
    for (int i = 0; i < (1 << 18); i++) {
        uint32_t u = (uint32_t)lyco_rng_next(rng);
        if ((u & 0x7fffffffu) > 0x7f800000u) continue;
        double v = dec32(u);
        if (!same(lyco_round_f64(v, LYCO_F16), tab16[lyco_f32_to_f16(bits_f32(u))]) ||
            !same(lyco_round_f64(v, LYCO_BF16), tabbf[lyco_f32_to_bf16(bits_f32(u))]))
            badc++;
    }
    report(!badc, "round_f64 of fp32 values agrees with lyco_f32_to_f16/bf16: %lld wrong", (long long)badc);
}

/* ---------------------------------------------------------------------------------------------
 * Exhaustive: all 2^32 fp32 inputs (full tier)
 * ------------------------------------------------------------------------------------------- */
static void exhaustive(void) {
    /* one block per sign+exponent (512); within a block the reference's ulp is constant */
    static int64_t bad16[512], badbf[512];
    static uint32_t first16[512], firstbf[512];
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (int blk = 0; blk < 512; blk++) {
        uint32_t sg = (uint32_t)(blk >> 8) << 31;
        int ex = blk & 255;
        int64_t b16 = 0, bbf = 0;
        uint32_t f16 = 0, fbf = 0;
        if (ex == 255) {
            for (uint32_t m = 0; m < 0x800000u; m++) {
                uint32_t u = sg | 0x7f800000u | m;
                char why[200];
                if (check_one(u, why, sizeof why)) {
                    if (!b16++) f16 = u;
                }
            }
        } else {
            /* value = (implicit + m) · scale; the reference rounds (implicit + m)·scale/ulp_T */
            double implicit = ex ? 8388608.0 : 0.0;
            double scale = pow2((ex ? ex : 1) - 150);
            int e = ex ? ex - 127 : -127; /* ⌊log2⌋ for normals; any value < emin for subnormals */
            int e16 = e < FP16.emin ? FP16.emin : e, ebf = e < BF16.emin ? BF16.emin : e;
            double inv16 = pow2(-(e16 - FP16.p + 1)), ulp16 = pow2(e16 - FP16.p + 1);
            double invbf = pow2(-(ebf - BF16.p + 1)), ulpbf = pow2(ebf - BF16.p + 1);
            for (uint32_t m = 0; m < 0x800000u; m++) {
                uint32_t u = sg | ((uint32_t)ex << 23) | m;
                float f = bits_f32(u);
                double a = (implicit + (double)m) * scale; /* |v|, exact */
                double t = a * inv16, lo = (double)(int64_t)t, fr = t - lo;
                double q = (fr > 0.5 || (fr == 0.5 && ((int64_t)lo & 1))) ? lo + 1.0 : lo;
                double r16 = q * ulp16;
                if (r16 > FP16.max) r16 = INFINITY;
                t = a * invbf, lo = (double)(int64_t)t, fr = t - lo;
                q = (fr > 0.5 || (fr == 0.5 && ((int64_t)lo & 1))) ? lo + 1.0 : lo;
                double rbf = q * ulpbf;
                if (rbf > BF16.max) rbf = INFINITY;
                uint16_t h = lyco_f32_to_f16(f), b = lyco_f32_to_bf16(f);
                if ((uint32_t)(h >> 15) != (sg >> 31) || tab16[h & 0x7fff] != r16) { if (!b16++) f16 = u; }
                if ((uint32_t)(b >> 15) != (sg >> 31) || tabbf[b & 0x7fff] != rbf) { if (!bbf++) fbf = u; }
            }
        }
        bad16[blk] = b16, badbf[blk] = bbf, first16[blk] = f16, firstbf[blk] = fbf;
    }
    int64_t t16 = 0, tbf = 0;
    uint32_t f16 = 0, fbf = 0;
    for (int blk = 0; blk < 512; blk++) {
        if (bad16[blk] && !t16) f16 = first16[blk];
        if (badbf[blk] && !tbf) fbf = firstbf[blk];
        t16 += bad16[blk];
        tbf += badbf[blk];
    }
    char why[200] = "";
    if (t16) check_one(f16, why, sizeof why);
    report(!t16, "exhaustive: all 2^32 fp32 -> fp16 (NaN block: both types): %lld wrong%s%s", (long long)t16, t16 ? "; first: " : "", why);
    why[0] = '\0';
    if (tbf) check_one(fbf, why, sizeof why);
    report(!tbf, "exhaustive: all 2^32 fp32 -> bf16: %lld wrong%s%s", (long long)tbf, tbf ? "; first: " : "", why);
}

int main(int argc, char **argv) {
    bool full = argc > 1 && !strcmp(argv[1], "--exhaustive");
    if (argc > 1 && !full) {
        fprintf(stderr, "usage: %s [--exhaustive]\n", argv[0]);
        return 2;
    }
    uint64_t seed = lyco_seed_from_env();
    printf("test_convert%s: seed %llu (LYCO_SEED=%llu to rerun)\n", full ? " --exhaustive" : "", (unsigned long long)seed,
           (unsigned long long)seed);
    lyco_rng rng;
    lyco_rng_seed(&rng, seed);
    for (uint32_t i = 0; i < 65536; i++) {
        tab16[i] = dec16((uint16_t)i);
        tabbf[i] = decbf((uint16_t)i);
    }
    /* the reference itself, on values whose answer is known by construction */
    report(ref_round(1.0 + 0x1p-11 + 0x1p-30, &FP16) == 0x1.004p+0 && ref_round(65520.0, &FP16) == INFINITY &&
               ref_round(0x1p-25, &FP16) == 0.0 && ref_round(0x1.8p-24, &FP16) == 0x1p-23 && dec16(0x7bff) == 65504.0 &&
               decbf(0x7f7f) == 0x1.fep127 && dec16(0x0001) == 0x1p-24 && decbf(0x0001) == 0x1p-133,
           "reference self-check (known answers)");
    if (full) {
        exhaustive();
    } else {
        named_edges();
        edge_batches();
        sampled(&rng);
        widening_and_round_trips();
        round_f64_tests(&rng);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
