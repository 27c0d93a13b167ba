/*
 * rng.c — xoshiro256** seeded by splitmix64, for test and bench data (never for the library's
 * numerics: lyco owns no random state). The seed comes from LYCO_SEED or the clock.
 */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "core.h"

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void lyco_rng_seed(lyco_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t lyco_rng_next(lyco_rng *r) {
    uint64_t *s = r->s;
    uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return res;
}

double lyco_rng_uniform(lyco_rng *r) { return (double)(lyco_rng_next(r) >> 11) * 0x1p-53; }

double lyco_rng_normal(lyco_rng *r) {
    double u1 = lyco_rng_uniform(r), u2 = lyco_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t lyco_seed_from_env(void) {
    const char *s = getenv("LYCO_SEED");
    if (s && *s) return strtoull(s, NULL, 0);
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (uint64_t)ts.tv_sec * 1000003ull ^ (uint64_t)ts.tv_nsec;
}
