/*
 * st_testlib.h — test plumbing shared by test_safetensors.c and test_shards.c: PASS/FAIL lines
 * with counters, allocation that ends the run on failure, whole-file read/write, a count of
 * leftover writer temps, recursive removal of the scratch directory. Header-only (static
 * functions; each test program includes it once). Assumptions: POSIX (opendir, lstat).
 */
#ifndef LYCO_TESTS_ST_TESTLIB_H
#define LYCO_TESTS_ST_TESTLIB_H

#include <dirent.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"

/* ============================================================================================
 * check plumbing
 * ========================================================================================== */

static int g_pass, g_fail;
static char g_dir[512];

static inline void check(bool ok, const char *fmt, ...) LYCO_PRINTF(2, 3);
static inline void check(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s: ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    va_end(ap);
    if (!ok) printf("  [last error: %s]", lyco_last_error());
    printf("\n");
    if (ok) g_pass++;
    else g_fail++;
}

/* Test-only allocation: out of memory ends the run as a failure. */
static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("FAIL: out of memory (%zu bytes)\n%d passed, %d failed\n", n, g_pass, g_fail + 1);
        exit(1);
    }
    return p;
}

static inline void *xcalloc(size_t n, size_t sz) {
    void *p = xmalloc(n * sz);
    memset(p, 0, n * sz);
    return p;
}

/* buf = dir/name; a path that does not fit ends the run as a failure. */
static inline void path_in(char *buf, size_t n, const char *dir, const char *name) {
    int k = snprintf(buf, n, "%s/%s", dir, name);
    if (k < 0 || (size_t)k >= n) {
        printf("FAIL: path too long: %s/%s\n%d passed, %d failed\n", dir, name, g_pass,
               g_fail + 1);
        exit(1);
    }
}

static inline bool write_bytes(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return false;
    bool ok = (n == 0 || fwrite(p, 1, n, fp) == n);
    return fclose(fp) == 0 && ok;
}

/* Reads a whole file into a malloc'ed buffer (NULL on failure). */
static inline uint8_t *read_bytes(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 4096, len = 0;
    uint8_t *b = malloc(cap);
    while (b) {
        size_t r = fread(b + len, 1, cap - len, fp);
        len += r;
        if (len < cap) break;
        uint8_t *nb = realloc(b, cap * 2);
        if (!nb) { free(b); b = NULL; break; }
        b = nb;
        cap *= 2;
    }
    fclose(fp);
    *n = len;
    return b;
}

static inline bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Number of leftover writer temp files in dir. */
static inline int count_temps(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strstr(e->d_name, ".lyco-tmp.")) n++;
    }
    closedir(d);
    return n;
}

static inline void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        path_in(p, sizeof p, dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* True when every file of dir a equals the same-named file of dir b (and b has no others). */
static inline bool st_dirs_equal(const char *a, const char *b) {
    DIR *d = opendir(a);
    int na = 0, nb = 0;
    bool ok = d != NULL;
    struct dirent *e;
    char pa[1024], pb[1024];
    while (ok && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        na++;
        path_in(pa, sizeof pa, a, e->d_name);
        path_in(pb, sizeof pb, b, e->d_name);
        size_t x = 0, y = 0;
        uint8_t *u = read_bytes(pa, &x), *v = read_bytes(pb, &y);
        ok = u && v && x == y && memcmp(u, v, x) == 0;
        free(u);
        free(v);
    }
    if (d) closedir(d);
    d = opendir(b);
    while (d && (e = readdir(d)) != NULL) nb += e->d_name[0] != '.';
    if (d) closedir(d);
    return ok && na == nb;
}

/* Creates the scratch directory g_dir under $TMPDIR (or /tmp), prints it and the seed
   (LYCO_SEED reproduces a run) and returns the seed; exits on failure. */
static inline uint64_t st_test_begin(const char *prog) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/lyco-st-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        printf("FAIL: cannot create a temp dir under %s\n0 passed, 1 failed\n",
               tmp && *tmp ? tmp : "/tmp");
        exit(1);
    }
    uint64_t seed = lyco_seed_from_env();
    printf("%s: temp dir %s, seed %" PRIu64 "\n", prog, g_dir, seed);
    return seed;
}

/* Removes the scratch directory when everything passed, prints the totals; the exit status. */
static inline int st_test_end(void) {
    if (g_fail == 0) remove_tree(g_dir);
    else printf("temp dir kept for inspection: %s\n", g_dir);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail == 0 ? 0 : 1;
}

#endif /* LYCO_TESTS_ST_TESTLIB_H */
