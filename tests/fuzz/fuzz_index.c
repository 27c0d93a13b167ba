/*
 * fuzz_index.c — libFuzzer target for the sharded-checkpoint index reader (src/io/shards.c).
 *
 * The first call creates a scratch directory (removed at exit) holding the shard fixtures the
 * index corpus refers to (tests/c/test_shards.c): a.safetensors {x, y}, b.safetensors {z},
 * dup.safetensors {x, q} and broken.safetensors (a bad prefix). Each input is written there as
 * in.safetensors.index.json and opened with lyco_st_model_open; the target aborts if a promise
 * breaks:
 *   - a rejection is LYCO_ERR_FORMAT, LYCO_ERR_IO or LYCO_ERR_NOMEM, leaves *out NULL and sets a
 *     message;
 *   - an accepted model is sharded, every shard is a plain file of the scratch directory (no
 *     path escaped it), every tensor is found by name in the shard that holds it, no name twice,
 *     and the tensor count equals the shards' total.
 * Built like fuzz_safetensors (tests/fuzz/CMakeLists.txt): with clang -fsanitize=fuzzer when
 * LYCO_FUZZ=ON, and linked to replay.c for the ctest `fuzz_index_replay` with any compiler.
 * Assumptions: POSIX (mkdtemp), a writable TMPDIR (or /tmp).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "io/shards.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_fdir[512], g_index[600];
static const char *const g_files[] = {"a.safetensors", "b.safetensors", "dup.safetensors",
                                      "broken.safetensors", "in.safetensors.index.json"};

static void fuzz_require(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_index: invariant violated: %s (last error: %s)\n", what,
                lyco_last_error());
        abort();
    }
}

static void cleanup(void) {
    char p[700];
    for (size_t i = 0; i < sizeof g_files / sizeof *g_files; i++) {
        snprintf(p, sizeof p, "%s/%s", g_fdir, g_files[i]);
        unlink(p);
    }
    rmdir(g_fdir);
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return 0;
    int ok = n == 0 || fwrite(p, 1, n, fp) == n;
    return (fclose(fp) == 0) && ok;
}

/* The shard fixtures, once per process. */
static void setup(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_fdir, sizeof g_fdir, "%s/lyco-fuzz-index-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    fuzz_require(mkdtemp(g_fdir) != NULL, "scratch directory created");
    atexit(cleanup);
    static const uint8_t bytes[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    int64_t s1[1] = {1}, s2[1] = {2};
    lyco_st_entry a[2] = {{"x", LYCO_ST_F32, 1, s1, bytes, 4}, {"y", LYCO_ST_F32, 1, s1, bytes, 4}};
    lyco_st_entry b[1] = {{"z", LYCO_ST_F16, 1, s2, bytes, 4}};
    lyco_st_entry d[2] = {{"x", LYCO_ST_U8, 1, s1, bytes, 1}, {"q", LYCO_ST_U8, 1, s1, bytes, 1}};
    char p[700];
    snprintf(p, sizeof p, "%s/a.safetensors", g_fdir);
    fuzz_require(lyco_st_write(p, a, 2, NULL) == LYCO_OK, "fixture a");
    snprintf(p, sizeof p, "%s/b.safetensors", g_fdir);
    fuzz_require(lyco_st_write(p, b, 1, NULL) == LYCO_OK, "fixture b");
    snprintf(p, sizeof p, "%s/dup.safetensors", g_fdir);
    fuzz_require(lyco_st_write(p, d, 2, NULL) == LYCO_OK, "fixture dup");
    snprintf(p, sizeof p, "%s/broken.safetensors", g_fdir);
    fuzz_require(write_file(p, "\x01\0\0\0\0\0\0\0{", 9), "fixture broken");
    snprintf(g_index, sizeof g_index, "%s/in.safetensors.index.json", g_fdir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_index[0]) setup();
    fuzz_require(write_file(g_index, data, size), "input written");
    lyco_st_model *m = (lyco_st_model *)(uintptr_t)1;
    lyco_clear_error();
    lyco_status s = lyco_st_model_open(g_index, &m);
    if (s != LYCO_OK) {
        fuzz_require(m == NULL, "rejection leaves *out NULL");
        fuzz_require(s == LYCO_ERR_FORMAT || s == LYCO_ERR_IO || s == LYCO_ERR_NOMEM,
                     "rejection is FORMAT/IO/NOMEM");
        fuzz_require(lyco_last_error()[0] != '\0', "rejection has a message");
        return 0;
    }
    fuzz_require(lyco_st_model_is_sharded(m), "an index gives a sharded model");
    size_t dl = strlen(g_fdir);
    int64_t total = 0;
    for (int64_t k = 0; k < lyco_st_model_shard_count(m); k++) {
        const lyco_st_file *f = lyco_st_model_shard(m, k);
        const char *p = lyco_st_path(f);
        fuzz_require(strncmp(p, g_fdir, dl) == 0 && p[dl] == '/' && !strchr(p + dl + 1, '/'),
                     "every shard is a plain file of the index's directory");
        total += lyco_st_count(f);
    }
    fuzz_require(total == lyco_st_model_count(m), "model count = shards' total");
    for (int64_t i = 0; i < lyco_st_model_count(m); i++) {
        const lyco_st_tensor *t = lyco_st_model_get(m, i);
        fuzz_require(t && lyco_st_model_find(m, t->name) == t, "lookup finds the tensor");
        fuzz_require(lyco_st_find(t->file, t->name) == t, "the tensor is in its shard");
        fuzz_require(i == 0 || t != lyco_st_model_get(m, i - 1), "no tensor twice");
    }
    lyco_st_model_close(m);
    return 0;
}
