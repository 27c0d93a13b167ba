/*
 * test_shards.c — tests of the sharded-checkpoint layer (src/io/shards.c; FORMATS.md §1, §2.1,
 * §2.3, §2.6):
 *   - the sharded writer: the plan (greedy in entry order, oversized tensors alone), tensors in
 *     random order and random chunks, each shard renamed into place when complete, the index
 *     written last; the result read back through lyco_st_model_open (one lookup across shards,
 *     bytes equal, total_size), and as a single-file model;
 *   - resume (skip a verified shard), abort (committed shards stay, temps go, no index);
 *   - ENOSPC/EIO injected on writes and fsyncs of shards and of the index: clean failure, no
 *     index, no temp;
 *   - the broken-index corpus: one index per rule (JSON, duplicates, structure, shard-name path
 *     safety, cross-checks), each asserting its status and message (index path, tensor, rule);
 *   - SIGKILL of a writing child at random points: no index, the shards present valid, the
 *     stale temp swept, a resumed run (skipping the shards present) byte-identical;
 *   - lyco_st_write_text_atomic and lyco_st_remove_stale_temps (dead vs live pids).
 * Usage: test_shards [--check-corpus DIR]  (also: the committed index seeds in DIR equal the
 *        table's) | test_shards --corpus DIR (write the index cases as DIR/<id>.json and exit:
 *        the seed corpus of tests/fuzz/fuzz_index.c).
 * Prints one line per check and "N passed, M failed"; random parts print their seed (LYCO_SEED).
 * Assumptions: POSIX (fork, waitpid, mkdtemp), a writable TMPDIR (or /tmp).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <signal.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core.h"
#include "io/shards.h"
#include "st_testlib.h"

/* ============================================================================================
 * fixtures
 * ========================================================================================== */

#define NT 9

typedef struct {
    lyco_st_entry e[NT];
    int64_t shape[NT][2];
    char name[NT][32];
    uint8_t *data[NT];
} fixture;

/* Nine tensors of mixed dtypes and sizes (one empty, one over a 1000-byte cap), random bytes. */
static void fixture_make(fixture *fx, lyco_rng *r) {
    static const struct { lyco_st_dtype dt; int64_t a, b; } k[NT] = {
        {LYCO_ST_F32, 10, 10}, {LYCO_ST_F16, 8, 8},   {LYCO_ST_BF16, 20, 3}, {LYCO_ST_U8, 0, 5},
        {LYCO_ST_F32, 30, 20}, {LYCO_ST_I64, 4, 4},   {LYCO_ST_F32, 1, 1},   {LYCO_ST_F16, 100, 2},
        {LYCO_ST_U8, 7, 9},
    };
    for (int i = 0; i < NT; i++) {
        snprintf(fx->name[i], sizeof fx->name[i], "layer.%d.%s", i, i % 2 ? "up" : "down");
        fx->shape[i][0] = k[i].a;
        fx->shape[i][1] = k[i].b;
        uint64_t nb = (uint64_t)(k[i].a * k[i].b) * (uint64_t)lyco_st_dtype_bits(k[i].dt) / 8;
        fx->data[i] = xmalloc((size_t)nb);
        for (uint64_t j = 0; j < nb; j++) fx->data[i][j] = (uint8_t)lyco_rng_next(r);
        fx->e[i] = (lyco_st_entry){fx->name[i], k[i].dt, 2, fx->shape[i], NULL, nb};
    }
}

static void fixture_free(fixture *fx) {
    for (int i = 0; i < NT; i++) free(fx->data[i]);
}

/* The greedy plan computed independently: a new shard when the tensor does not fit. */
static int64_t expected_shards(const fixture *fx, uint64_t cap, int64_t *shard_of) {
    int64_t ns = 0;
    uint64_t cur = 0;
    for (int i = 0; i < NT; i++) {
        uint64_t b = fx->e[i].nbytes;
        if (ns == 0 || cur + b > cap) { ns++; cur = 0; }
        shard_of[i] = ns - 1;
        cur += b;
    }
    return ns;
}

/* Puts every tensor in a random order, each in random chunks; stops at the first failure. */
static lyco_status put_all(lyco_st_shard_writer *w, const fixture *fx, lyco_rng *r,
                           const bool *skip_shard) {
    int ord[NT];
    for (int i = 0; i < NT; i++) ord[i] = i;
    for (int i = NT - 1; i > 0; i--) {
        int j = (int)(lyco_rng_next(r) % (uint64_t)(i + 1));
        int t = ord[i]; ord[i] = ord[j]; ord[j] = t;
    }
    for (int k = 0; k < NT; k++) {
        int i = ord[k];
        if (skip_shard && skip_shard[lyco_st_shard_writer_shard_of(w, i)]) continue;
        uint64_t nb = fx->e[i].nbytes, off = 0;
        if (lyco_rng_next(r) & 1) {
            lyco_status s = lyco_st_shard_writer_put(w, i, fx->data[i], nb);
            if (s != LYCO_OK) return s;
            continue;
        }
        while (off < nb) {
            uint64_t c = 1 + lyco_rng_next(r) % 300;
            if (c > nb - off) c = nb - off;
            lyco_status s = lyco_st_shard_writer_put_chunk(w, i, fx->data[i] + off, c);
            if (s != LYCO_OK) return s;
            off += c;
        }
    }
    return LYCO_OK;
}

/* The model at path holds exactly the fixture (names, dtypes, shapes, bytes). */
static bool model_matches(const char *path, const fixture *fx, int64_t want_shards) {
    lyco_st_model *m = NULL;
    lyco_status s = lyco_st_model_open(path, &m);
    bool ok = s == LYCO_OK && lyco_st_model_count(m) == NT &&
              lyco_st_model_shard_count(m) == want_shards;
    uint64_t total = 0;
    for (int i = 0; ok && i < NT; i++) {
        const lyco_st_tensor *t = lyco_st_model_find(m, fx->name[i]);
        ok = t && t->dtype == fx->e[i].dtype && t->ndim == 2 && t->shape[0] == fx->shape[i][0] &&
             t->shape[1] == fx->shape[i][1] && t->nbytes == fx->e[i].nbytes &&
             (t->nbytes == 0 || memcmp(t->data, fx->data[i], (size_t)t->nbytes) == 0);
        total += fx->e[i].nbytes;
    }
    ok = ok && lyco_st_model_data_bytes(m) == total && lyco_st_model_find(m, "nope") == NULL;
    if (ok && lyco_st_model_is_sharded(m)) ok = lyco_st_model_total_size(m) == (int64_t)total;
    if (!ok) printf("  model %s: %s\n", path, s == LYCO_OK ? "content differs" : lyco_last_error());
    lyco_st_model_close(m);
    return ok;
}

static void shard_path(char *buf, size_t n, const lyco_st_shard_writer *w, int64_t k,
                       const char *dir) {
    path_in(buf, n, dir, lyco_st_shard_writer_shard_name(w, k));
}

/* ============================================================================================
 * writing and reading back
 * ========================================================================================== */

static void test_write_read(uint64_t seed) {
    lyco_rng r;
    lyco_rng_seed(&r, seed);
    fixture fx;
    fixture_make(&fx, &r);
    char dir[600], ip[1024], sp[1024];
    path_in(dir, sizeof dir, g_dir, "out");
    mkdir(dir, 0700);
    const char *meta[] = {"format", "pt", NULL};
    const uint64_t cap = 1000;
    int64_t want_of[NT];
    int64_t ns = expected_shards(&fx, cap, want_of);

    lyco_st_shard_writer *w = NULL;
    lyco_status s = lyco_st_shard_writer_open(&w, dir, "model", fx.e, NT, meta, cap, 0);
    check(s == LYCO_OK && lyco_st_shard_writer_shard_count(w) == ns && count_temps(dir) == 0,
          "plan: %" PRId64 " shards for a %" PRIu64 "-byte cap, nothing on disk yet (%s)", ns, cap,
          lyco_last_error());
    if (s != LYCO_OK) { fixture_free(&fx); return; }
    bool plan_ok = true;
    for (int i = 0; i < NT; i++) {
        plan_ok = plan_ok && lyco_st_shard_writer_shard_of(w, i) == want_of[i];
    }
    char want_name[64];
    snprintf(want_name, sizeof want_name, "model-00002-of-%05" PRId64 ".safetensors", ns);
    check(plan_ok && strcmp(lyco_st_shard_writer_shard_name(w, 1), want_name) == 0 &&
              strcmp(lyco_st_shard_writer_index_name(w), "model.safetensors.index.json") == 0 &&
              lyco_st_shard_writer_index(w, "layer.4.down") == 4,
          "plan: greedy in entry order, HF names (%s)", lyco_st_shard_writer_shard_name(w, 1));

    /* shard 0 complete -> committed at once, before the index exists */
    path_in(ip, sizeof ip, dir, "model.safetensors.index.json");
    for (int i = 0; s == LYCO_OK && i < NT && want_of[i] == 0; i++) {
        s = lyco_st_shard_writer_put(w, i, fx.data[i], fx.e[i].nbytes);
    }
    shard_path(sp, sizeof sp, w, 0, dir);
    check(s == LYCO_OK && lyco_st_shard_writer_shard_done(w, 0) && file_exists(sp) &&
              !file_exists(ip),
          "shards: a complete shard is renamed into place at once, index not yet written");
    s = put_all(w, &fx, &r, (bool[16]){true});
    check(s == LYCO_OK && !file_exists(ip) && count_temps(dir) == 0,
          "shards: all puts done, every shard in place, still no index (%s)", lyco_last_error());
    s = lyco_st_shard_writer_commit(w);
    check(s == LYCO_OK && file_exists(ip) && count_temps(dir) == 0, "shards: commit writes the "
          "index (%s)", lyco_last_error());
    check(model_matches(ip, &fx, ns), "read back: one lookup across %" PRId64 " shards, bytes "
          "equal, total_size right", ns);
    /* the index text: sorted keys, total_size first */
    size_t n = 0;
    char *txt = (char *)read_bytes(ip, &n);
    check(txt && n > 0 && strstr(txt, "\"metadata\"") && strstr(txt, "\"total_size\"") &&
              strstr(txt, "\"weight_map\"") &&
              strstr(txt, "\"metadata\"") < strstr(txt, "\"weight_map\""),
          "index: metadata.total_size then weight_map");
    free(txt);
    /* a single shard opens as a one-shard model */
    lyco_st_model *m = NULL;
    s = lyco_st_model_open(sp, &m);
    check(s == LYCO_OK && !lyco_st_model_is_sharded(m) && lyco_st_model_shard_count(m) == 1 &&
              lyco_st_model_total_size(m) == -1 && lyco_st_model_get(m, 0) != NULL &&
              lyco_st_model_get(m, lyco_st_model_count(m)) == NULL,
          "single file: a model of one shard");
    lyco_st_model_close(m);

    /* NOREPLACE: a second run into the same directory refuses the first shard */
    s = lyco_st_shard_writer_open(&w, dir, "model", fx.e, NT, meta, cap, LYCO_ST_NOREPLACE);
    if (s == LYCO_OK) s = put_all(w, &fx, &r, NULL);
    if (s == LYCO_OK) s = lyco_st_shard_writer_commit(w);
    else lyco_st_shard_writer_abort(w);
    check(s == LYCO_ERR_IO && strstr(lyco_last_error(), "not allowed") && count_temps(dir) == 0 &&
              model_matches(ip, &fx, ns),
          "NOREPLACE: existing shards refused, output intact (%s)", lyco_last_error());

    /* resume: shard 0 verified by the caller and skipped; the others rewritten */
    remove_tree(dir);
    mkdir(dir, 0700);
    s = lyco_st_shard_writer_open(&w, dir, "model", fx.e, NT, meta, cap, 0);
    for (int i = 0; s == LYCO_OK && i < NT && want_of[i] == 0; i++) {
        s = lyco_st_shard_writer_put(w, i, fx.data[i], fx.e[i].nbytes);
    }
    lyco_st_shard_writer_abort(w);
    check(s == LYCO_OK && file_exists(sp) && !file_exists(ip) && count_temps(dir) == 0,
          "abort: the committed shard stays, no index, no temp");
    s = lyco_st_shard_writer_open(&w, dir, "model", fx.e, NT, meta, cap, 0);
    lyco_status sk = s == LYCO_OK ? lyco_st_shard_writer_skip(w, 0) : s;
    lyco_status again = s == LYCO_OK ? lyco_st_shard_writer_skip(w, 0) : s;
    lyco_status put0 =
        s == LYCO_OK ? lyco_st_shard_writer_put(w, 0, fx.data[0], fx.e[0].nbytes) : s;
    lyco_status sk2 = s == LYCO_OK ? lyco_st_shard_writer_skip(w, 1) : s;   /* not on disk */
    check(sk == LYCO_OK && again == LYCO_ERR_INVALID && put0 == LYCO_ERR_INVALID &&
              sk2 == LYCO_ERR_INVALID && strstr(lyco_last_error(), "no such regular file"),
          "resume: skip a verified shard; double skip, puts into it, skipping a missing shard "
          "refused");
    bool skip0[16] = {true};
    if (s == LYCO_OK) s = put_all(w, &fx, &r, skip0);
    if (s == LYCO_OK) s = lyco_st_shard_writer_commit(w);
    else lyco_st_shard_writer_abort(w);
    check(s == LYCO_OK && model_matches(ip, &fx, ns), "resume: completes to the same model (%s)",
          lyco_last_error());

    /* incomplete at commit */
    remove_tree(dir);
    mkdir(dir, 0700);
    s = lyco_st_shard_writer_open(&w, dir, "model", fx.e, NT, meta, cap, 0);
    if (s == LYCO_OK) s = lyco_st_shard_writer_put_chunk(w, NT - 1, fx.data[NT - 1], 3);
    if (s == LYCO_OK) s = lyco_st_shard_writer_commit(w);
    check(s == LYCO_ERR_INVALID && strstr(lyco_last_error(), "incomplete at commit") &&
              !file_exists(ip) && count_temps(dir) == 0,
          "commit: an incomplete tensor -> LYCO_ERR_INVALID, no index, no temp (%s)",
          lyco_last_error());

    /* argument errors */
    check(lyco_st_shard_writer_open(&w, dir, "../model", fx.e, NT, NULL, cap, 0) ==
                  LYCO_ERR_INVALID && strstr(lyco_last_error(), "plain file name"),
          "open: a prefix with '/' -> LYCO_ERR_INVALID (%s)", lyco_last_error());
    check(lyco_st_shard_writer_open(&w, dir, "model", fx.e, NT, NULL, 0, 0) == LYCO_ERR_INVALID,
          "open: max_shard_bytes 0 -> LYCO_ERR_INVALID");
    check(lyco_st_shard_writer_open(&w, dir, "model", fx.e, 0, NULL, cap, 0) == LYCO_ERR_INVALID,
          "open: no tensors -> LYCO_ERR_INVALID");
    lyco_st_entry dup[2] = {fx.e[0], fx.e[0]};
    check(lyco_st_shard_writer_open(&w, dir, "model", dup, 2, NULL, cap, 0) == LYCO_ERR_INVALID &&
              strstr(lyco_last_error(), "duplicate tensor name"),
          "open: duplicate names across shards -> LYCO_ERR_INVALID");
    check(lyco_st_shard_writer_open(NULL, dir, "model", fx.e, NT, NULL, cap, 0) == LYCO_ERR_NULL,
          "open: NULL out -> LYCO_ERR_NULL");
    s = lyco_st_shard_writer_open(&w, dir, "model", fx.e, NT, NULL, cap, 0);
    check(s == LYCO_OK && lyco_st_shard_writer_put(w, NT, fx.data[0], 1) == LYCO_ERR_INVALID &&
              lyco_st_shard_writer_put(w, 0, fx.data[0], 1) == LYCO_ERR_INVALID &&
              lyco_st_shard_writer_skip(w, 99) == LYCO_ERR_INVALID,
          "put/skip: out-of-range index, wrong size -> LYCO_ERR_INVALID");
    lyco_st_shard_writer_abort(w);
    lyco_st_shard_writer_abort(NULL);
    check(count_temps(dir) == 0, "abort: nothing left");
    fixture_free(&fx);
}

/* The index is byte-identical to what transformers writes: json.dumps(index, indent=2,
   sort_keys=True) + "\n" (expected text produced by Python's json module). */
static void test_index_text(void) {
    static const unsigned char d[16] = {0};
    int64_t s1[1] = {4};
    lyco_st_entry e[5] = {{"model.layers.0.w", LYCO_ST_F32, 1, s1, d, 16},
                          {"\xc3\xa9t\xc3\xa9", LYCO_ST_F32, 1, s1, d, 16},
                          {"emoji\xf0\x9f\x98\x80", LYCO_ST_F32, 1, s1, d, 16},
                          {"q\"b\\s/\x01\t", LYCO_ST_F32, 1, s1, d, 16},
                          {"B", LYCO_ST_F32, 1, s1, d, 16}};
    static const char want[] =
        "{\n"
        "  \"metadata\": {\n"
        "    \"total_size\": 80\n"
        "  },\n"
        "  \"weight_map\": {\n"
        "    \"B\": \"model-00003-of-00003.safetensors\",\n"
        "    \"emoji\\ud83d\\ude00\": \"model-00002-of-00003.safetensors\",\n"
        "    \"model.layers.0.w\": \"model-00001-of-00003.safetensors\",\n"
        "    \"q\\\"b\\\\s/\\u0001\\t\": \"model-00002-of-00003.safetensors\",\n"
        "    \"\\u00e9t\\u00e9\": \"model-00001-of-00003.safetensors\"\n"
        "  }\n"
        "}\n";
    char dir[600], ip[1024];
    path_in(dir, sizeof dir, g_dir, "index-text");
    mkdir(dir, 0700);
    lyco_st_shard_writer *w = NULL;
    lyco_status s = lyco_st_shard_writer_open(&w, dir, "model", e, 5, NULL, 40, 0);
    for (int i = 0; s == LYCO_OK && i < 5; i++) s = lyco_st_shard_writer_put(w, i, d, 16);
    if (s == LYCO_OK) s = lyco_st_shard_writer_commit(w);
    else lyco_st_shard_writer_abort(w);
    path_in(ip, sizeof ip, dir, "model.safetensors.index.json");
    size_t n = 0;
    uint8_t *got = s == LYCO_OK ? read_bytes(ip, &n) : NULL;
    check(got && n == strlen(want) && memcmp(got, want, n) == 0,
          "index text: byte-identical to transformers' json.dumps(indent=2, sort_keys=True) "
          "(%s)", s == LYCO_OK ? "compared" : lyco_last_error());
    free(got);
}

/* ============================================================================================
 * fault injection (FORMATS.md §2.6)
 * ========================================================================================== */

static void test_faults(uint64_t seed) {
    lyco_rng r;
    lyco_rng_seed(&r, seed ^ 0x9e3779b97f4a7c15u);
    fixture fx;
    fixture_make(&fx, &r);
    char dir[600], ip[1024];
    path_in(dir, sizeof dir, g_dir, "faulty");
    path_in(ip, sizeof ip, dir, "m.safetensors.index.json");
    static const struct { lyco_st_fault_op op; int64_t nth; int err; } faults[] = {
        {LYCO_ST_FAULT_WRITE, 1, ENOSPC}, {LYCO_ST_FAULT_WRITE, 4, EIO},
        {LYCO_ST_FAULT_WRITE, 10, ENOSPC}, {LYCO_ST_FAULT_FSYNC, 1, EIO},
        {LYCO_ST_FAULT_FSYNC, 3, ENOSPC}, {LYCO_ST_FAULT_CLOSE, 2, EIO},
        {LYCO_ST_FAULT_RENAME, 2, EIO},
    };
    int64_t want_of[NT];
    int64_t ns = expected_shards(&fx, 1000, want_of);
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
        remove_tree(dir);
        mkdir(dir, 0700);
        lyco_st_fault_inject(faults[i].op, faults[i].nth, faults[i].err);
        lyco_st_shard_writer *w = NULL;
        lyco_status s = lyco_st_shard_writer_open(&w, dir, "m", fx.e, NT, NULL, 1000, 0);
        if (s == LYCO_OK) s = put_all(w, &fx, &r, NULL);
        if (s == LYCO_OK) s = lyco_st_shard_writer_commit(w);
        else lyco_st_shard_writer_abort(w);
        lyco_st_fault_inject(faults[i].op, 0, 0);
        check(s == LYCO_ERR_IO && !file_exists(ip) && count_temps(dir) == 0,
              "faults: op %d #%" PRId64 " errno %d -> LYCO_ERR_IO, no index, no temp (%s)",
              (int)faults[i].op, faults[i].nth, faults[i].err, lyco_last_error());
    }
    /* after a shard's commit failed, every later put reports the I/O failure (not a misuse) */
    remove_tree(dir);
    mkdir(dir, 0700);
    lyco_st_fault_inject(LYCO_ST_FAULT_FSYNC, 1, EIO);
    lyco_st_shard_writer *fw = NULL;
    lyco_status fs = lyco_st_shard_writer_open(&fw, dir, "m", fx.e, NT, NULL, 1000, 0);
    for (int i = 0; fs == LYCO_OK && i < NT; i++) {
        fs = lyco_st_shard_writer_put(fw, i, fx.data[i], fx.e[i].nbytes);
    }
    lyco_st_fault_inject(LYCO_ST_FAULT_FSYNC, 0, 0);
    lyco_status again = fw ? lyco_st_shard_writer_put(fw, 0, fx.data[0], fx.e[0].nbytes) : fs;
    check(fs == LYCO_ERR_IO && again == LYCO_ERR_IO && strstr(lyco_last_error(), "earlier write "
          "failed"), "faults: after a failed shard commit, puts report LYCO_ERR_IO (%s)",
          lyco_last_error());
    lyco_st_shard_writer_abort(fw);
    check(count_temps(dir) == 0 && !file_exists(ip), "faults: abort after it leaves no temp, no "
          "index");

    /* the index write itself fails: fsync number ns + 1 is the index's */
    remove_tree(dir);
    mkdir(dir, 0700);
    lyco_st_fault_inject(LYCO_ST_FAULT_FSYNC, ns + 1, EIO);
    lyco_st_shard_writer *w = NULL;
    lyco_status s = lyco_st_shard_writer_open(&w, dir, "m", fx.e, NT, NULL, 1000, 0);
    if (s == LYCO_OK) s = put_all(w, &fx, &r, NULL);
    if (s == LYCO_OK) s = lyco_st_shard_writer_commit(w);
    else lyco_st_shard_writer_abort(w);
    lyco_st_fault_inject(LYCO_ST_FAULT_FSYNC, 0, 0);
    check(s == LYCO_ERR_IO && strstr(lyco_last_error(), "index.json") && !file_exists(ip) &&
              count_temps(dir) == 0,
          "faults: fsync of the index fails -> LYCO_ERR_IO, no index, no temp (%s)",
          lyco_last_error());
    fixture_free(&fx);
}

/* ============================================================================================
 * SIGKILL at random points (FORMATS.md §2.6): the output is either absent or complete, the
 * leftover temp is swept as stale, and a resumed run produces identical bytes
 * ========================================================================================== */

/* Writes the fixture in entry order, whole tensors; in a child, SIGKILLs itself after `kill_after`
   puts (-1: never). Returns the status (the parent's runs). */
static lyco_status write_in_order(const char *dir, const fixture *fx, int kill_after,
                                  const bool *skip) {
    lyco_st_shard_writer *w = NULL;
    lyco_status s = lyco_st_shard_writer_open(&w, dir, "m", fx->e, NT, NULL, 1000, 0);
    for (int k = 0; skip && s == LYCO_OK && k < lyco_st_shard_writer_shard_count(w); k++) {
        if (skip[k]) s = lyco_st_shard_writer_skip(w, k);
    }
    for (int i = 0; s == LYCO_OK && i < NT; i++) {
        if (kill_after == i) raise(SIGKILL);
        if (skip && skip[lyco_st_shard_writer_shard_of(w, i)]) continue;
        s = lyco_st_shard_writer_put(w, i, fx->data[i], fx->e[i].nbytes);
    }
    if (s == LYCO_OK) return lyco_st_shard_writer_commit(w);
    lyco_st_shard_writer_abort(w);
    return s;
}

static void test_kill(uint64_t seed) {
    lyco_rng r;
    lyco_rng_seed(&r, seed ^ 0x2545f4914f6cdd1du);
    fixture fx;
    fixture_make(&fx, &r);
    char ref[600], dir[600], ip[1024];
    path_in(ref, sizeof ref, g_dir, "kill-ref");
    path_in(dir, sizeof dir, g_dir, "kill");
    mkdir(ref, 0700);
    check(write_in_order(ref, &fx, -1, NULL) == LYCO_OK, "kill: reference output written");
    path_in(ip, sizeof ip, dir, "m.safetensors.index.json");
    int64_t want_of[NT];
    int64_t ns = expected_shards(&fx, 1000, want_of);
    for (int round = 0; round < 4; round++) {
        int kill_after = 1 + (int)(lyco_rng_next(&r) % (NT - 1));
        remove_tree(dir);
        mkdir(dir, 0700);
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            write_in_order(dir, &fx, kill_after, NULL);
            _exit(3);   /* not reached: killed */
        }
        int status = 0;
        bool killed = child > 0 && waitpid(child, &status, 0) == child && WIFSIGNALED(status) &&
                      WTERMSIG(status) == SIGKILL;
        /* every final shard present is complete and valid; the index is absent */
        bool skip[16] = {false}, valid = !file_exists(ip);
        char sp[1024], name[128];
        for (int64_t k = 0; k < ns; k++) {
            snprintf(name, sizeof name, "m-%05" PRId64 "-of-%05" PRId64 ".safetensors", k + 1, ns);
            path_in(sp, sizeof sp, dir, name);
            if (!file_exists(sp)) continue;
            lyco_st_file *f = NULL;
            valid = valid && lyco_st_open(sp, &f) == LYCO_OK;
            lyco_st_close(f);
            skip[k] = true;
        }
        int left = count_temps(dir);
        int64_t swept = 0;
        for (int64_t k = 0; k < ns; k++) {
            int64_t one = 0;
            snprintf(name, sizeof name, "m-%05" PRId64 "-of-%05" PRId64 ".safetensors", k + 1, ns);
            if (lyco_st_remove_stale_temps(dir, name, &one) == LYCO_OK) swept += one;
        }
        lyco_status s = write_in_order(dir, &fx, -1, skip);
        check(killed && valid && swept == left && count_temps(dir) == 0 && s == LYCO_OK &&
                  st_dirs_equal(dir, ref),
              "kill after %d puts: no index, shards present are valid, %d stale temp(s) swept, "
              "resume gives byte-identical output", kill_after, left);
    }
    fixture_free(&fx);
}

/* ============================================================================================
 * the broken-index corpus: one index per rule
 * ========================================================================================== */

typedef struct {
    const char *id;
    const char *index;      /* the index text; shards a.safetensors / b.safetensors exist */
    lyco_status want;
    const char *needle;
    const char *tensor;     /* quoted in the message, or NULL */
} index_case;

#define WM(x) "{\"metadata\":{\"total_size\":12},\"weight_map\":{" x "}}"
#define OKWM "\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"b.safetensors\""

static const index_case index_corpus[] = {
    {"ok", WM(OKWM), LYCO_OK, NULL, NULL},
    {"ok_no_metadata", "{\"weight_map\":{" OKWM "}}", LYCO_OK, NULL, NULL},
    {"ok_extra_metadata", "{\"metadata\":{\"total_size\":12,\"total_parameters\":3},"
                          "\"weight_map\":{" OKWM "}}", LYCO_OK, NULL, NULL},
    {"json_invalid", "{\"weight_map\":{", LYCO_ERR_FORMAT, "not valid JSON", NULL},
    {"json_trailing", WM(OKWM) "x", LYCO_ERR_FORMAT, "not valid JSON", NULL},
    {"json_not_object", "[1,2]", LYCO_ERR_FORMAT, "is not an object", NULL},
    {"utf8_invalid", "{\"weight_map\":{\"\xc0\xaf\":\"a.safetensors\"}}", LYCO_ERR_FORMAT,
     "not valid UTF-8", NULL},
    {"dup_tensor", WM(OKWM ",\"x\":\"b.safetensors\""), LYCO_ERR_FORMAT, "duplicate key", NULL},
    {"dup_top", "{\"weight_map\":{" OKWM "},\"weight_map\":{}}", LYCO_ERR_FORMAT,
     "duplicate key", NULL},
    {"unknown_key", "{\"weight_map\":{" OKWM "},\"extra\":1}", LYCO_ERR_FORMAT,
     "unknown top-level key", "extra"},
    {"metadata_not_object", "{\"metadata\":[],\"weight_map\":{" OKWM "}}", LYCO_ERR_FORMAT,
     "\"metadata\" is not an object", NULL},
    {"total_size_negative", "{\"metadata\":{\"total_size\":-1},\"weight_map\":{" OKWM "}}",
     LYCO_ERR_FORMAT, "total_size\" is not a non-negative integer", NULL},
    {"total_size_string", "{\"metadata\":{\"total_size\":\"12\"},\"weight_map\":{" OKWM "}}",
     LYCO_ERR_FORMAT, "total_size\" is not a non-negative integer", NULL},
    {"weight_map_missing", "{\"metadata\":{}}", LYCO_ERR_FORMAT, "\"weight_map\" is missing", NULL},
    {"weight_map_array", "{\"weight_map\":[]}", LYCO_ERR_FORMAT, "\"weight_map\" is not an object",
     NULL},
    {"weight_map_empty", "{\"weight_map\":{}}", LYCO_ERR_FORMAT, "\"weight_map\" is empty", NULL},
    {"value_not_string", WM(OKWM ",\"w\":1"), LYCO_ERR_FORMAT, "weight_map value is not a string",
     "w"},
    {"path_parent", WM(OKWM ",\"w\":\"../a.safetensors\""), LYCO_ERR_FORMAT, "contains '/'", "w"},
    {"path_absolute", WM(OKWM ",\"w\":\"/etc/passwd\""), LYCO_ERR_FORMAT, "contains '/'", "w"},
    {"path_subdir", WM(OKWM ",\"w\":\"sub/a.safetensors\""), LYCO_ERR_FORMAT, "contains '/'",
     "w"},
    {"path_dotdot", WM(OKWM ",\"w\":\"..\""), LYCO_ERR_FORMAT, "is \".\" or \"..\"", "w"},
    {"path_empty", WM(OKWM ",\"w\":\"\""), LYCO_ERR_FORMAT, "is empty", "w"},
    {"path_backslash", WM(OKWM ",\"w\":\"..\\\\a.safetensors\""), LYCO_ERR_FORMAT,
     "contains '\\'", "w"},
    {"path_nul", WM(OKWM ",\"w\":\"a\\u0000\""), LYCO_ERR_FORMAT, "not valid JSON", NULL},
    {"shard_missing", WM(OKWM ",\"w\":\"c.safetensors\""), LYCO_ERR_IO, "cannot open for reading",
     NULL},
    {"shard_broken", WM(OKWM ",\"w\":\"broken.safetensors\""), LYCO_ERR_FORMAT,
     "below the minimum of 2", NULL},
    {"entry_not_in_shard", WM(OKWM ",\"w\":\"a.safetensors\""), LYCO_ERR_FORMAT,
     "no shard holds it", "w"},
    {"entry_wrong_shard", WM("\"x\":\"b.safetensors\",\"y\":\"a.safetensors\","
                             "\"z\":\"b.safetensors\""), LYCO_ERR_FORMAT,
     "lives in shard \"a.safetensors\"", "x"},
    {"tensor_unlisted", WM("\"x\":\"a.safetensors\",\"z\":\"b.safetensors\""), LYCO_ERR_FORMAT,
     "not listed in weight_map", "y"},
    {"tensor_in_two_shards", WM(OKWM ",\"q\":\"dup.safetensors\""), LYCO_ERR_FORMAT,
     "appears in two shards", "x"},
};
#define N_INDEX (sizeof index_corpus / sizeof index_corpus[0])

/* Seeds for the index fuzz target: every case's text as <dir>/<id>.json; files written. */
static int index_corpus_write_all(const char *dir) {
    int n = 0;
    char p[1024], name[128];
    for (size_t i = 0; i < N_INDEX; i++) {
        snprintf(name, sizeof name, "%s.json", index_corpus[i].id);
        path_in(p, sizeof p, dir, name);
        n += write_bytes(p, index_corpus[i].index, strlen(index_corpus[i].index));
    }
    return n;
}

/* The committed seeds (tests/data/index-corpus) equal what the table generates. */
static void test_index_corpus_on_disk(const char *committed) {
    char gen[600];
    path_in(gen, sizeof gen, g_dir, "index-corpus-gen");
    mkdir(gen, 0700);
    int n = index_corpus_write_all(gen);
    check(n == (int)N_INDEX && st_dirs_equal(gen, committed),
          "index corpus on disk (%s) equals the table (regenerate with `test_shards --corpus "
          "DIR`)", committed);
}

static void test_index_corpus(void) {
    char dir[600], p[1024];
    path_in(dir, sizeof dir, g_dir, "idx");
    mkdir(dir, 0700);
    uint8_t bytes[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    int64_t s1[1] = {1}, s2[1] = {2};
    lyco_st_entry a[2] = {{"x", LYCO_ST_F32, 1, s1, bytes, 4}, {"y", LYCO_ST_F32, 1, s1, bytes, 4}};
    lyco_st_entry b[1] = {{"z", LYCO_ST_F16, 1, s2, bytes, 4}};
    lyco_st_entry dup[2] = {{"x", LYCO_ST_U8, 1, s1, bytes, 1}, {"q", LYCO_ST_U8, 1, s1, bytes, 1}};
    bool ok = true;
    path_in(p, sizeof p, dir, "a.safetensors");
    ok = ok && lyco_st_write(p, a, 2, NULL) == LYCO_OK;
    path_in(p, sizeof p, dir, "b.safetensors");
    ok = ok && lyco_st_write(p, b, 1, NULL) == LYCO_OK;
    path_in(p, sizeof p, dir, "dup.safetensors");
    ok = ok && lyco_st_write(p, dup, 2, NULL) == LYCO_OK;
    path_in(p, sizeof p, dir, "broken.safetensors");
    ok = ok && write_bytes(p, "\x01\0\0\0\0\0\0\0{", 9);
    check(ok, "index corpus: shard fixtures written");
    for (size_t i = 0; i < N_INDEX; i++) {
        const index_case *c = &index_corpus[i];
        char name[128];
        snprintf(name, sizeof name, "%s.safetensors.index.json", c->id);
        path_in(p, sizeof p, dir, name);
        write_bytes(p, c->index, strlen(c->index));
        lyco_st_model *m = (lyco_st_model *)(uintptr_t)1;
        lyco_clear_error();
        lyco_status s = lyco_st_model_open(p, &m);
        if (c->want == LYCO_OK) {
            check(s == LYCO_OK && m && lyco_st_model_count(m) == 3 && lyco_st_model_is_sharded(m) &&
                      lyco_st_model_shard_count(m) == 2 && lyco_st_model_find(m, "z") &&
                      lyco_st_model_total_size(m) == (strcmp(c->id, "ok_no_metadata") ? 12 : -1),
                  "index %s: opens (%s)", c->id, lyco_last_error());
            lyco_st_model_close(m);
            continue;
        }
        const char *msg = lyco_last_error();
        char tq[64] = "";
        if (c->tensor) snprintf(tq, sizeof tq, "\"%s\"", c->tensor);
        /* shard-level failures name the shard file, index-level ones the index */
        bool names_file = strstr(msg, name) || strstr(msg, ".safetensors\"");
        check(s == c->want && m == NULL && strstr(msg, c->needle) && names_file &&
                  (!c->tensor || strstr(msg, tq)),
              "index %s: %s with \"%s\" (got %s: %s)", c->id, lyco_status_name(c->want), c->needle,
              lyco_status_name(s), msg);
        unlink(p);
    }
    /* size rules: an empty index, a directory */
    path_in(p, sizeof p, dir, "empty.safetensors.index.json");
    write_bytes(p, "", 0);
    lyco_st_model *m = NULL;
    check(lyco_st_model_open(p, &m) == LYCO_ERR_FORMAT && strstr(lyco_last_error(), "outside [2, "),
          "index: empty file -> LYCO_ERR_FORMAT (%s)", lyco_last_error());
    path_in(p, sizeof p, dir, "d.safetensors.index.json");
    mkdir(p, 0700);
    check(lyco_st_model_open(p, &m) == LYCO_ERR_IO && strstr(lyco_last_error(), "not a regular"),
          "index: a directory -> LYCO_ERR_IO");
    check(lyco_st_model_open(NULL, &m) == LYCO_ERR_NULL && lyco_st_model_open(p, NULL) ==
              LYCO_ERR_NULL, "index: NULL arguments -> LYCO_ERR_NULL");
    check(lyco_st_model_count(NULL) == 0 && lyco_st_model_find(NULL, "x") == NULL &&
              lyco_st_model_shard(NULL, 0) == NULL && lyco_st_model_total_size(NULL) == -1,
          "model accessors: NULL is harmless");
}

/* ============================================================================================
 * atomic text files, stale temps
 * ========================================================================================== */

static void test_text_and_stale(void) {
    char dir[600], p[1024], t[1024];
    path_in(dir, sizeof dir, g_dir, "misc");
    mkdir(dir, 0700);
    path_in(p, sizeof p, dir, "manifest.json");
    const char *txt = "{\"version\":1}\n";
    lyco_status s = lyco_st_write_text_atomic(p, txt, strlen(txt), 0);
    size_t n = 0;
    uint8_t *b = read_bytes(p, &n);
    check(s == LYCO_OK && b && n == strlen(txt) && memcmp(b, txt, n) == 0 && count_temps(dir) == 0,
          "text: written atomically");
    free(b);
    s = lyco_st_write_text_atomic(p, "x", 1, LYCO_ST_NOREPLACE);
    check(s == LYCO_ERR_IO && count_temps(dir) == 0, "text: NOREPLACE on an existing file refused");
    lyco_st_fault_inject(LYCO_ST_FAULT_WRITE, 1, ENOSPC);
    s = lyco_st_write_text_atomic(p, "yy", 2, 0);
    lyco_st_fault_inject(LYCO_ST_FAULT_WRITE, 0, 0);
    b = read_bytes(p, &n);
    check(s == LYCO_ERR_IO && b && n == strlen(txt) && count_temps(dir) == 0,
          "text: ENOSPC -> LYCO_ERR_IO, old content kept, no temp");
    free(b);

    /* stale temps: a dead pid's is removed, a live pid's and ours are kept, others ignored */
    pid_t child = fork();
    if (child == 0) _exit(0);
    int status = 0;
    bool reaped = child > 0 && waitpid(child, &status, 0) == child;
    char dead[256], live[256], mine[256];
    snprintf(dead, sizeof dead, ".model.safetensors.lyco-tmp.%ld.1a2b", (long)child);
    snprintf(live, sizeof live, ".model.safetensors.lyco-tmp.%ld.3c", (long)getppid());
    snprintf(mine, sizeof mine, ".model.safetensors.lyco-tmp.%ld.ff", (long)getpid());
    const char *others[] = {".model.safetensors.lyco-tmp.x.1", ".other.lyco-tmp.1.1",
                            "model.safetensors"};
    bool made = reaped;
    path_in(t, sizeof t, dir, dead);
    made = made && write_bytes(t, "d", 1);
    path_in(t, sizeof t, dir, live);
    made = made && write_bytes(t, "l", 1);
    path_in(t, sizeof t, dir, mine);
    made = made && write_bytes(t, "m", 1);
    for (int i = 0; i < 3; i++) {
        path_in(t, sizeof t, dir, others[i]);
        made = made && write_bytes(t, "o", 1);
    }
    int64_t removed = -1;
    s = lyco_st_remove_stale_temps(dir, "model.safetensors", &removed);
    path_in(t, sizeof t, dir, dead);
    bool dead_gone = !file_exists(t);
    path_in(t, sizeof t, dir, live);
    bool live_kept = file_exists(t);
    path_in(t, sizeof t, dir, mine);
    bool mine_kept = file_exists(t);
    bool others_kept = true;
    for (int i = 0; i < 3; i++) {
        path_in(t, sizeof t, dir, others[i]);
        others_kept = others_kept && file_exists(t);
    }
    check(made && s == LYCO_OK && removed == 1 && dead_gone && live_kept && mine_kept &&
              others_kept,
          "stale temps: only the dead process's temp removed (removed %" PRId64 ")", removed);
    check(lyco_st_remove_stale_temps(dir, "../x", NULL) == LYCO_ERR_INVALID,
          "stale temps: a base with '/' -> LYCO_ERR_INVALID");
    path_in(t, sizeof t, dir, "nonexistent");
    check(lyco_st_remove_stale_temps(t, "x", NULL) == LYCO_ERR_IO,
          "stale temps: a missing directory -> LYCO_ERR_IO");
}

/* ============================================================================================ */

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--corpus") == 0) {
        int n = index_corpus_write_all(argv[2]);
        printf("wrote %d of %zu index corpus files to %s\n", n, N_INDEX, argv[2]);
        return n == (int)N_INDEX ? 0 : 1;
    }
    const char *committed = NULL;
    if (argc == 3 && strcmp(argv[1], "--check-corpus") == 0) committed = argv[2];
    else if (argc != 1) {
        fprintf(stderr, "usage: test_shards [--corpus DIR | --check-corpus DIR]\n");
        return 2;
    }
    uint64_t seed = st_test_begin("test_shards");
    test_write_read(seed);
    test_index_text();
    test_faults(seed);
    test_kill(seed);
    test_index_corpus();
    if (committed) test_index_corpus_on_disk(committed);
    test_text_and_stale();
    return st_test_end();
}
