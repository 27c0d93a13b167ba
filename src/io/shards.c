/*
 * shards.c — sharded safetensors checkpoints: the `*.safetensors.index.json` reader with one
 * lookup across shards, the sharded streaming writer with the index written last, the atomic
 * text writer and the stale-temp sweep (see shards.h; FORMATS.md §1, §2.1, §2.3).
 *
 * Index reading, in order: fstat (regular file, 2 <= size <= 100,000,000, checked before the
 * buffer is allocated), pread into an owned buffer, UTF-8 check, jansson with
 * JSON_REJECT_DUPLICATES (trailing non-whitespace is jansson's own error), then the structure
 * (shards.h), shard-name safety, every distinct shard opened once (sorted by name), then the
 * cross-checks: no tensor in two shards, every weight_map entry in the shard it names, every
 * shard tensor listed. Every failure names the index file, the tensor or shard and the rule.
 *
 * Writer: the plan (tensor -> shard) is fixed at open from the caller's entry order and the size
 * cap; entries are copied (names, shapes) so the caller's arrays may die. Each shard is a
 * lyco_st_writer opened lazily at its first put and committed when its remaining byte count
 * reaches 0 (shards of empty tensors only are committed by lyco_st_shard_writer_commit). The
 * index JSON is produced by jansson exactly as transformers writes it (json.dumps(index,
 * indent=2, sort_keys=True) + "\n": ASCII-escaped, keys sorted, "metadata" then "weight_map").
 * Assumptions: POSIX.1-2008 (openat, fstatat, kill for the liveness probe), jansson >= 2.14.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "shards.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "st_util.h"

/* ============================================================================================
 * shared: names and paths
 * ========================================================================================== */

/* True when name (len bytes) is a plain file name: no '/', '\\' or NUL, not "", ".", "..",
   at most 255 bytes. Sets *why otherwise. */
static bool plain_name(const char *name, size_t len, const char **why) {
    if (len == 0) { *why = "is empty"; return false; }
    if (len > 255) { *why = "is longer than 255 bytes"; return false; }
    if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.')) {
        *why = "is \".\" or \"..\"";
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (name[i] == '/') { *why = "contains '/' (absolute path or subdirectory)"; return false; }
        if (name[i] == '\\') { *why = "contains '\\' (a Windows path separator)"; return false; }
        if (name[i] == '\0') { *why = "contains a NUL"; return false; }
    }
    return true;
}

/* malloc'ed "<dir>/<name>" (dir "" or NULL: just name); NULL when out of memory. */
static char *join_path(const char *dir, const char *name) {
    size_t dl = dir ? strlen(dir) : 0, nl = strlen(name);
    char *p = malloc(dl + nl + 2);
    if (!p) return NULL;
    if (dl) {
        memcpy(p, dir, dl);
        p[dl] = '/';
        memcpy(p + dl + 1, name, nl + 1);
    } else {
        memcpy(p, name, nl + 1);
    }
    return p;
}

/* malloc'ed directory part of path ("." when it has no '/', "/" for "/x"). */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
    char *d = malloc(dl + 1);
    if (!d) return NULL;
    if (slash) memcpy(d, path, dl);
    else d[0] = '.';
    d[dl] = '\0';
    return d;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

/* ============================================================================================
 * reader
 * ========================================================================================== */

struct lyco_st_model {
    char *path;
    bool sharded;
    int64_t n_shards;
    lyco_st_file **shards;           /* sorted by shard file name */
    int64_t n;
    const lyco_st_tensor **all;      /* shard order, then file order */
    int64_t *by_name;                /* indices into all, sorted by name */
    int64_t total_size;
    uint64_t data_bytes;
};

void lyco_st_model_close(lyco_st_model *m) {
    if (!m) return;
    for (int64_t k = 0; k < m->n_shards; k++) lyco_st_close(m->shards[k]);
    free(m->shards);
    free(m->all);
    free(m->by_name);
    free(m->path);
    free(m);
}

#define IFAIL(...) st_fail(LYCO_ERR_FORMAT, m->path, NULL, NULL, 0, __VA_ARGS__)
#define ITFAIL(name, ...)                                                                        \
    st_fail(LYCO_ERR_FORMAT, m->path, "tensor", (name), strlen(name), __VA_ARGS__)

static _Thread_local const lyco_st_tensor *const *tl_all;
static int cmp_all_names(const void *pa, const void *pb) {
    return strcmp(tl_all[*(const int64_t *)pa]->name, tl_all[*(const int64_t *)pb]->name);
}

/* Flattens the shards into m->all and m->by_name; rejects a name held by two shards. */
static lyco_status model_index(lyco_st_model *m) {
    int64_t n = 0;
    for (int64_t k = 0; k < m->n_shards; k++) n += lyco_st_count(m->shards[k]);
    m->all = calloc(n ? (size_t)n : 1, sizeof *m->all);
    m->by_name = calloc(n ? (size_t)n : 1, sizeof *m->by_name);
    if (!m->all || !m->by_name) {
        return st_fail(LYCO_ERR_NOMEM, m->path, NULL, NULL, 0, "out of memory for %" PRId64
                       " tensors", n);
    }
    for (int64_t k = 0; k < m->n_shards; k++) {
        for (int64_t i = 0; i < lyco_st_count(m->shards[k]); i++) {
            const lyco_st_tensor *t = lyco_st_get(m->shards[k], i);
            m->by_name[m->n] = m->n;
            m->all[m->n++] = t;
            m->data_bytes += t->nbytes;
        }
    }
    tl_all = m->all;
    qsort(m->by_name, (size_t)m->n, sizeof *m->by_name, cmp_all_names);
    tl_all = NULL;
    for (int64_t i = 1; i < m->n; i++) {
        const lyco_st_tensor *a = m->all[m->by_name[i - 1]], *b = m->all[m->by_name[i]];
        if (strcmp(a->name, b->name) == 0) {
            char pa[ST_NAME2_BUDGET + 8], pb[ST_NAME2_BUDGET + 8];
            st_esc(pa, sizeof pa, lyco_st_path(a->file), strlen(lyco_st_path(a->file)),
                   ST_NAME2_BUDGET);
            st_esc(pb, sizeof pb, lyco_st_path(b->file), strlen(lyco_st_path(b->file)),
                   ST_NAME2_BUDGET);
            return ITFAIL(a->name, "appears in two shards, \"%s\" and \"%s\" (index rule: a "
                          "tensor lives in exactly one shard)", pa, pb);
        }
    }
    return LYCO_OK;
}

/* Reads the whole index file into a NUL-terminated owned buffer, size checked first. */
static lyco_status index_read(lyco_st_model *m, char **text, size_t *len) {
    char eb[128];
    *text = NULL;
    int fd = open(m->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        return st_fail(LYCO_ERR_IO, m->path, NULL, NULL, 0, "cannot open the index for reading: "
                       "%s (errno %d)", st_errstr(e, eb, sizeof eb), e);
    }
    struct stat sb;
    lyco_status st = LYCO_OK;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        st = st_fail(LYCO_ERR_IO, m->path, NULL, NULL, 0, "fstat failed: %s (errno %d)",
                     st_errstr(e, eb, sizeof eb), e);
    } else if (!S_ISREG(sb.st_mode)) {
        st = st_fail(LYCO_ERR_IO, m->path, NULL, NULL, 0, "the index is not a regular file");
    } else if (sb.st_size < 2 || (uint64_t)sb.st_size > LYCO_ST_MAX_HEADER) {
        st = IFAIL("index is %lld bytes, outside [2, 100000000] (index rule: the index is a JSON "
                   "object, capped like a safetensors header)", (long long)sb.st_size);
    } else {
        *len = (size_t)sb.st_size;
        *text = malloc(*len + 1);
        if (!*text) {
            st = st_fail(LYCO_ERR_NOMEM, m->path, NULL, NULL, 0, "out of memory for the %zu-byte "
                         "index", *len);
        } else {
            int r = st_read_full(fd, *text, *len, 0);
            if (r != 0) {
                st = st_fail(LYCO_ERR_IO, m->path, NULL, NULL, 0, "reading the index failed: %s",
                             r < 0 ? "the file shrank while being read"
                                   : st_errstr(r, eb, sizeof eb));
            } else {
                (*text)[*len] = '\0';
            }
        }
    }
    close(fd);
    if (st != LYCO_OK) {
        free(*text);
        *text = NULL;
    }
    return st;
}

/* Parses and checks the index JSON; *root receives the tree (caller decrefs), *wm the
   weight_map inside it. Shard names are checked here. */
static lyco_status index_parse(lyco_st_model *m, const char *text, size_t len, json_t **root,
                               json_t **wm) {
    size_t bad;
    const char *why;
    *root = NULL;
    if (!st_utf8_valid((const uint8_t *)text, len, &bad, &why)) {
        return IFAIL("index is not valid UTF-8 at byte %zu: %s (index rule: UTF-8 JSON)", bad,
                     why);
    }
    json_error_t je;
    json_t *r = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!r) {
        char te[JSON_ERROR_TEXT_LENGTH + 8];
        st_esc(te, sizeof te, je.text, strnlen(je.text, JSON_ERROR_TEXT_LENGTH - 1), 140);
        if (json_error_code(&je) == json_error_out_of_memory) {
            return st_fail(LYCO_ERR_NOMEM, m->path, NULL, NULL, 0, "out of memory parsing the "
                           "index");
        }
        if (json_error_code(&je) == json_error_duplicate_key) {
            return IFAIL("duplicate key in the index JSON at byte %d: %s (index rule: duplicate "
                         "keys are disallowed at any level)", je.position, te);
        }
        return IFAIL("index is not valid JSON at byte %d: %s (index rule: one JSON object)",
                     je.position, te);
    }
    *root = r;
    if (!json_is_object(r)) return IFAIL("index JSON is not an object (index rule)");
    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach(r, key, klen, v) {
        bool known = (klen == 8 && memcmp(key, "metadata", 8) == 0) ||
                     (klen == 10 && memcmp(key, "weight_map", 10) == 0);
        if (!known) {
            return st_fail(LYCO_ERR_FORMAT, m->path, "key", key, klen, "unknown top-level key in "
                           "the index (index rule: only \"metadata\" and \"weight_map\")");
        }
    }
    json_t *md = json_object_get(r, "metadata");
    m->total_size = -1;
    if (md) {
        if (!json_is_object(md)) {
            return IFAIL("\"metadata\" is not an object (index rule: metadata is an object)");
        }
        json_t *ts = json_object_get(md, "total_size");
        if (ts) {
            if (!json_is_integer(ts) || json_integer_value(ts) < 0) {
                return IFAIL("\"metadata.total_size\" is not a non-negative integer (index "
                             "rule)");
            }
            m->total_size = (int64_t)json_integer_value(ts);
        }
    }
    json_t *w = json_object_get(r, "weight_map");
    if (!json_is_object(w)) {
        return IFAIL("\"weight_map\" is %s (index rule: weight_map is an object mapping tensor "
                     "names to shard file names)", w ? "not an object" : "missing");
    }
    if (json_object_size(w) == 0) {
        return IFAIL("\"weight_map\" is empty (index rule: an index lists at least one tensor)");
    }
    json_object_keylen_foreach(w, key, klen, v) {
        if (!json_is_string(v)) {
            return st_fail(LYCO_ERR_FORMAT, m->path, "tensor", key, klen, "weight_map value is "
                           "not a string (index rule: weight_map maps names to shard file "
                           "names)");
        }
        if (!plain_name(json_string_value(v), json_string_length(v), &why)) {
            char se[ST_NAME2_BUDGET + 8];
            st_esc(se, sizeof se, json_string_value(v), json_string_length(v), ST_NAME2_BUDGET);
            return st_fail(LYCO_ERR_FORMAT, m->path, "tensor", key, klen, "shard name \"%s\" %s "
                           "(index rule: shards are plain file names in the index's directory)",
                           se, why);
        }
    }
    *wm = w;
    return LYCO_OK;
}

static int cmp_str_ptr(const void *pa, const void *pb) {
    return strcmp(*(const char *const *)pa, *(const char *const *)pb);
}

/* Opens every distinct shard named in wm (sorted by name) into m->shards. */
static lyco_status index_open_shards(lyco_st_model *m, json_t *wm) {
    size_t nw = json_object_size(wm), nd = 0;
    const char **names = malloc(nw * sizeof *names);
    char *dir = dir_of(m->path);
    lyco_status st = LYCO_OK;
    if (!names || !dir) {
        st = st_fail(LYCO_ERR_NOMEM, m->path, NULL, NULL, 0, "out of memory");
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) names[nd++] = json_string_value(v);
    qsort(names, nd, sizeof *names, cmp_str_ptr);
    size_t u = 0;
    for (size_t i = 0; i < nd; i++) {
        if (u == 0 || strcmp(names[u - 1], names[i]) != 0) names[u++] = names[i];
    }
    m->shards = calloc(u, sizeof *m->shards);
    if (!m->shards) {
        st = st_fail(LYCO_ERR_NOMEM, m->path, NULL, NULL, 0, "out of memory");
        goto out;
    }
    for (size_t k = 0; k < u; k++) {
        char *sp = join_path(dir, names[k]);
        if (!sp) {
            st = st_fail(LYCO_ERR_NOMEM, m->path, NULL, NULL, 0, "out of memory");
            goto out;
        }
        st = lyco_st_open(sp, &m->shards[k]);
        free(sp);
        if (st != LYCO_OK) goto out;  /* the message names the shard file */
        m->n_shards++;
    }
out:
    free(names);
    free(dir);
    return st;
}

/* Every weight_map entry is in the shard it names; every shard tensor is listed. */
static lyco_status index_cross_check(lyco_st_model *m, json_t *wm) {
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        const char *shard = json_string_value(v);
        const lyco_st_tensor *t = lyco_st_model_find(m, key);
        if (!t) {
            return ITFAIL(key, "is listed in weight_map (shard \"%s\") but no shard holds it "
                          "(index rule: every weight_map entry exists in its shard)", shard);
        }
        const char *tp = lyco_st_path(t->file);
        const char *tb = strrchr(tp, '/');
        tb = tb ? tb + 1 : tp;
        if (strcmp(tb, shard) != 0) {
            char se[ST_NAME2_BUDGET + 8];
            st_esc(se, sizeof se, tb, strlen(tb), ST_NAME2_BUDGET);
            return ITFAIL(key, "is listed in weight_map under shard \"%s\" but lives in shard "
                          "\"%s\" (index rule: every weight_map entry exists in its shard)",
                          shard, se);
        }
    }
    if ((size_t)m->n != json_object_size(wm)) {
        for (int64_t i = 0; i < m->n; i++) {
            if (!json_object_get(wm, m->all[i]->name)) {
                const char *tp = lyco_st_path(m->all[i]->file);
                char se[ST_NAME2_BUDGET + 8];
                st_esc(se, sizeof se, tp, strlen(tp), ST_NAME2_BUDGET);
                return ITFAIL(m->all[i]->name, "is held by shard \"%s\" but not listed in "
                              "weight_map (index rule: every shard tensor is listed)", se);
            }
        }
    }
    return LYCO_OK;
}

lyco_status lyco_st_model_open(const char *path, lyco_st_model **out) {
    if (!out) return lyco_fail(LYCO_ERR_NULL, "lyco_st_model_open: out is NULL");
    *out = NULL;
    if (!path) return lyco_fail(LYCO_ERR_NULL, "lyco_st_model_open: path is NULL");
    lyco_st_model *m = calloc(1, sizeof *m);
    if (m) m->path = join_path(NULL, path);
    if (!m || !m->path) {
        free(m);
        return lyco_fail(LYCO_ERR_NOMEM, "lyco_st_model_open: out of memory");
    }
    m->total_size = -1;
    lyco_status st;
    if (!ends_with(path, ".index.json")) {
        /* one safetensors file: a model of one shard */
        m->shards = calloc(1, sizeof *m->shards);
        st = m->shards ? lyco_st_open(path, &m->shards[0])
                       : lyco_fail(LYCO_ERR_NOMEM, "lyco_st_model_open: out of memory");
        if (st == LYCO_OK) {
            m->n_shards = 1;
            st = model_index(m);
        }
    } else {
        m->sharded = true;
        char *text = NULL;
        size_t len = 0;
        json_t *root = NULL, *wm = NULL;
        st = index_read(m, &text, &len);
        if (st == LYCO_OK) st = index_parse(m, text, len, &root, &wm);
        if (st == LYCO_OK) st = index_open_shards(m, wm);
        if (st == LYCO_OK) st = model_index(m);
        if (st == LYCO_OK) st = index_cross_check(m, wm);
        json_decref(root);
        free(text);
    }
    if (st != LYCO_OK) {
        lyco_st_model_close(m);
        return st;
    }
    *out = m;
    return LYCO_OK;
}

bool lyco_st_model_is_sharded(const lyco_st_model *m) { return m && m->sharded; }
const char *lyco_st_model_path(const lyco_st_model *m) { return m ? m->path : NULL; }
int64_t lyco_st_model_count(const lyco_st_model *m) { return m ? m->n : 0; }

const lyco_st_tensor *lyco_st_model_get(const lyco_st_model *m, int64_t i) {
    if (!m || i < 0 || i >= m->n) return NULL;
    return m->all[i];
}

const lyco_st_tensor *lyco_st_model_find(const lyco_st_model *m, const char *name) {
    if (!m || !name) return NULL;
    int64_t lo = 0, hi = m->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->all[m->by_name[mid]]->name, name);
        if (c == 0) return m->all[m->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int64_t lyco_st_model_shard_count(const lyco_st_model *m) { return m ? m->n_shards : 0; }

const lyco_st_file *lyco_st_model_shard(const lyco_st_model *m, int64_t k) {
    if (!m || k < 0 || k >= m->n_shards) return NULL;
    return m->shards[k];
}

int64_t lyco_st_model_total_size(const lyco_st_model *m) { return m ? m->total_size : -1; }
uint64_t lyco_st_model_data_bytes(const lyco_st_model *m) { return m ? m->data_bytes : 0; }

/* ============================================================================================
 * atomic text files and the stale-temp sweep
 * ========================================================================================== */

lyco_status lyco_st_write_text_atomic(const char *path, const char *text, size_t len,
                                      unsigned flags) {
    if (!path || (!text && len > 0)) {
        return lyco_fail(LYCO_ERR_NULL, "lyco_st_write_text_atomic: %s is NULL",
                         !path ? "path" : "text");
    }
    if (flags & ~(unsigned)LYCO_ST_NOREPLACE) {
        return st_fail(LYCO_ERR_INVALID, path, NULL, NULL, 0, "flags 0x%x: unknown bits "
                       "(expected 0 or LYCO_ST_NOREPLACE)", flags);
    }
    st_atomic a;
    lyco_status st = st_atomic_create(&a, path);
    if (st != LYCO_OK) return st;
    int e = st_pwrite_full(a.fd, text, len, 0);
    if (e != 0) {
        char eb[128];
        st = st_fail(LYCO_ERR_IO, path, NULL, NULL, 0, "write failed: %s (errno %d); nothing was "
                     "written to the target", st_errstr(e, eb, sizeof eb), e);
        st_atomic_discard(&a);
        return st;
    }
    return st_atomic_commit(&a, flags);
}

/* True when s is "<digits>.<hex digits>" (the temp suffix), with the pid in *pid. */
static bool temp_suffix(const char *s, long *pid) {
    const char *p = s;
    long v = 0;
    if (*p < '0' || *p > '9') return false;
    while (*p >= '0' && *p <= '9') {
        if (v > 100000000L) return false;
        v = v * 10 + (*p++ - '0');
    }
    if (*p++ != '.') return false;
    if (!*p) return false;
    for (; *p; p++) {
        bool hex = (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f');
        if (!hex) return false;
    }
    *pid = v;
    return true;
}

lyco_status lyco_st_remove_stale_temps(const char *dir, const char *base, int64_t *removed) {
    if (removed) *removed = 0;
    if (!dir || !base) {
        return lyco_fail(LYCO_ERR_NULL, "lyco_st_remove_stale_temps: %s is NULL",
                         !dir ? "dir" : "base");
    }
    const char *why;
    if (!plain_name(base, strlen(base), &why)) {
        return st_fail(LYCO_ERR_INVALID, dir, "base", base, strlen(base), "%s (expected a plain "
                       "file name)", why);
    }
    char eb[128], prefix[256];
    st_temp_prefix(prefix, sizeof prefix, base);
    size_t pl = strlen(prefix);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        int e = errno;
        if (dfd >= 0) close(dfd);
        return st_fail(LYCO_ERR_IO, dir, NULL, NULL, 0, "cannot open the directory: %s (errno "
                       "%d)", st_errstr(e, eb, sizeof eb), e);
    }
    lyco_status st = LYCO_OK;
    struct dirent *ent;
    long self = (long)getpid();
    errno = 0;
    while ((ent = readdir(d)) != NULL) {
        long pid;
        if (strncmp(ent->d_name, prefix, pl) != 0 || !temp_suffix(ent->d_name + pl, &pid)) continue;
        if (pid == self) continue;                        /* ours: maybe still being written */
        if (pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) continue;   /* alive */
        if (unlinkat(dirfd(d), ent->d_name, 0) != 0) {
            int e = errno;
            st = st_fail(LYCO_ERR_IO, dir, "temp", ent->d_name, strlen(ent->d_name),
                         "cannot remove the stale temp: %s (errno %d)",
                         st_errstr(e, eb, sizeof eb), e);
            break;
        }
        if (removed) (*removed)++;
        errno = 0;
    }
    closedir(d);
    return st;
}

/* ============================================================================================
 * sharded writer
 * ========================================================================================== */

enum { SH_PENDING = 0, SH_OPEN, SH_DONE, SH_SKIPPED };

struct lyco_st_shard_writer {
    char *dir;
    char *index_name;
    unsigned flags;
    int64_t n;
    lyco_st_entry *ents;         /* owned copies (names, shapes); data NULL */
    char *blob;                  /* names */
    int64_t *dims;
    const char **meta;           /* owned copy of meta_kv (NULL-terminated), or NULL */
    char *meta_blob;
    int64_t *shard_of;           /* per caller index */
    int64_t *by_name;
    int64_t n_shards;
    int64_t *start;              /* shard k holds caller indices [start[k], start[k+1]) */
    char **shard_name;
    char *shard_name_blob;
    int *state;
    lyco_st_writer **w;
    uint64_t *remaining;         /* bytes not yet supplied, per shard */
    uint64_t total_size;
    bool failed;
};

static void sw_free(lyco_st_shard_writer *s) {
    if (!s) return;
    for (int64_t k = 0; s->w && k < s->n_shards; k++) lyco_st_writer_abort(s->w[k]);
    free(s->dir);
    free(s->index_name);
    free(s->ents);
    free(s->blob);
    free(s->dims);
    free(s->meta);
    free(s->meta_blob);
    free(s->shard_of);
    free(s->by_name);
    free(s->start);
    free(s->shard_name);
    free(s->shard_name_blob);
    free(s->state);
    free(s->w);
    free(s->remaining);
    free(s);
}

#define SWFAIL(s, st, ...) st_fail((st), (s)->dir, NULL, NULL, 0, __VA_ARGS__)

/* Deep copies of entries (names, shapes) and meta_kv into s. */
static lyco_status sw_copy(lyco_st_shard_writer *s, const lyco_st_entry *entries,
                           const char *const *meta_kv) {
    size_t n = (size_t)s->n, nb = 0, nd = 0, nm = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        nb += strlen(entries[i].name) + 1;
        nd += (size_t)entries[i].ndim;
    }
    while (meta_kv && meta_kv[2 * nm]) {
        mb += strlen(meta_kv[2 * nm]) + strlen(meta_kv[2 * nm + 1]) + 2;
        nm++;
    }
    s->ents = calloc(n ? n : 1, sizeof *s->ents);
    s->blob = malloc(nb ? nb : 1);
    s->dims = calloc(nd ? nd : 1, sizeof *s->dims);
    s->shard_of = calloc(n ? n : 1, sizeof *s->shard_of);
    s->by_name = calloc(n ? n : 1, sizeof *s->by_name);
    if (meta_kv) {
        s->meta = calloc(2 * nm + 1, sizeof *s->meta);
        s->meta_blob = malloc(mb ? mb : 1);
    }
    if (!s->ents || !s->blob || !s->dims || !s->shard_of || !s->by_name ||
        (meta_kv && (!s->meta || !s->meta_blob))) {
        return SWFAIL(s, LYCO_ERR_NOMEM, "out of memory for %zu tensors", n);
    }
    char *p = s->blob;
    int64_t *dp = s->dims;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(entries[i].name) + 1;
        memcpy(p, entries[i].name, l);
        s->ents[i] = entries[i];
        s->ents[i].name = p;
        s->ents[i].data = NULL;
        p += l;
        if (entries[i].ndim > 0) memcpy(dp, entries[i].shape, (size_t)entries[i].ndim * sizeof *dp);
        s->ents[i].shape = dp;
        dp += entries[i].ndim;
        s->by_name[i] = (int64_t)i;
    }
    char *q = s->meta_blob;
    for (size_t i = 0; i < 2 * nm; i++) {
        size_t l = strlen(meta_kv[i]) + 1;
        memcpy(q, meta_kv[i], l);
        s->meta[i] = q;
        q += l;
    }
    return LYCO_OK;
}

/* Greedy plan in entry order; file names; per-shard tables. */
static lyco_status sw_plan(lyco_st_shard_writer *s, const char *prefix, uint64_t cap) {
    int64_t ns = 0;
    uint64_t cur = 0;
    for (int64_t i = 0; i < s->n; i++) {
        uint64_t b = s->ents[i].nbytes;
        bool fits = cur <= cap && b <= cap - cur;
        if (ns == 0 || !fits) {   /* a tensor over the cap alone still gets a shard */
            ns++;
            cur = 0;
        }
        s->shard_of[i] = ns - 1;
        cur += b;
        s->total_size += b;
    }
    s->n_shards = ns;
    s->start = calloc((size_t)ns + 1, sizeof *s->start);
    s->shard_name = calloc((size_t)ns, sizeof *s->shard_name);
    s->state = calloc((size_t)ns, sizeof *s->state);
    s->w = calloc((size_t)ns, sizeof *s->w);
    s->remaining = calloc((size_t)ns, sizeof *s->remaining);
    size_t pl = strlen(prefix), each = pl + 64;
    s->shard_name_blob = malloc((size_t)ns * each);
    s->index_name = malloc(pl + 32);
    if (!s->start || !s->shard_name || !s->state || !s->w || !s->remaining ||
        !s->shard_name_blob || !s->index_name) {
        return SWFAIL(s, LYCO_ERR_NOMEM, "out of memory for %" PRId64 " shards", ns);
    }
    for (int64_t i = s->n - 1; i >= 0; i--) s->start[s->shard_of[i]] = i;
    s->start[ns] = s->n;
    for (int64_t i = 0; i < s->n; i++) s->remaining[s->shard_of[i]] += s->ents[i].nbytes;
    for (int64_t k = 0; k < ns; k++) {
        s->shard_name[k] = s->shard_name_blob + (size_t)k * each;
        snprintf(s->shard_name[k], each, "%s-%05" PRId64 "-of-%05" PRId64 ".safetensors", prefix,
                 k + 1, ns);
    }
    snprintf(s->index_name, pl + 32, "%s.safetensors.index.json", prefix);
    return LYCO_OK;
}

static _Thread_local const lyco_st_entry *tl_ents;
static int cmp_ent_names(const void *pa, const void *pb) {
    return strcmp(tl_ents[*(const int64_t *)pa].name, tl_ents[*(const int64_t *)pb].name);
}

lyco_status lyco_st_shard_writer_open(lyco_st_shard_writer **out, const char *dir,
                                      const char *prefix, const lyco_st_entry *entries,
                                      int64_t n, const char *const *meta_kv,
                                      uint64_t max_shard_bytes, unsigned flags) {
    if (!out) return lyco_fail(LYCO_ERR_NULL, "lyco_st_shard_writer_open: out is NULL");
    *out = NULL;
    if (!dir || !prefix) {
        return lyco_fail(LYCO_ERR_NULL, "lyco_st_shard_writer_open: %s is NULL",
                         !dir ? "dir" : "prefix");
    }
    const char *why;
    if (!plain_name(prefix, strlen(prefix), &why) || strlen(prefix) > 160) {
        return st_fail(LYCO_ERR_INVALID, dir, "prefix", prefix, strlen(prefix), "%s (expected a "
                       "plain file name stem of at most 160 bytes, e.g. \"model\")",
                       strlen(prefix) > 160 ? "is longer than 160 bytes" : why);
    }
    if (n == 0) {
        return st_fail(LYCO_ERR_INVALID, dir, NULL, NULL, 0, "no tensors to shard (an index lists "
                       "at least one tensor; write a single file instead)");
    }
    if (max_shard_bytes == 0) {
        return st_fail(LYCO_ERR_INVALID, dir, NULL, NULL, 0, "max_shard_bytes is 0 (expected > "
                       "0)");
    }
    if (flags & ~(unsigned)LYCO_ST_NOREPLACE) {
        return st_fail(LYCO_ERR_INVALID, dir, NULL, NULL, 0, "flags 0x%x: unknown bits (expected "
                       "0 or LYCO_ST_NOREPLACE)", flags);
    }
    /* the whole set must be writable as one file's entries: same validation, nothing on disk */
    uint64_t hsz, fsz;
    lyco_status st = lyco_st_layout(entries, n, meta_kv, &hsz, &fsz);
    if (st != LYCO_OK) return st;
    lyco_st_shard_writer *s = calloc(1, sizeof *s);
    if (!s || !(s->dir = join_path(NULL, dir))) {
        free(s);
        return lyco_fail(LYCO_ERR_NOMEM, "lyco_st_shard_writer_open: out of memory");
    }
    s->n = n;
    s->flags = flags;
    st = sw_copy(s, entries, meta_kv);
    if (st == LYCO_OK) st = sw_plan(s, prefix, max_shard_bytes);
    if (st != LYCO_OK) {
        sw_free(s);
        return st;
    }
    tl_ents = s->ents;
    qsort(s->by_name, (size_t)s->n, sizeof *s->by_name, cmp_ent_names);
    tl_ents = NULL;
    *out = s;
    return LYCO_OK;
}

/* Opens shard k's writer (its entries are a contiguous slice of s->ents). */
static lyco_status sw_open_shard(lyco_st_shard_writer *s, int64_t k) {
    char *p = join_path(s->dir, s->shard_name[k]);
    if (!p) return SWFAIL(s, LYCO_ERR_NOMEM, "out of memory");
    lyco_status st = lyco_st_writer_open(&s->w[k], p, s->ents + s->start[k],
                                         s->start[k + 1] - s->start[k], s->meta, s->flags);
    free(p);
    if (st == LYCO_OK) s->state[k] = SH_OPEN;
    return st;
}

static lyco_status sw_commit_shard(lyco_st_shard_writer *s, int64_t k) {
    lyco_status st = LYCO_OK;
    if (s->state[k] == SH_PENDING) st = sw_open_shard(s, k);
    if (st != LYCO_OK) return st;
    st = lyco_st_writer_commit(s->w[k]);
    s->w[k] = NULL;
    if (st == LYCO_OK) s->state[k] = SH_DONE;
    return st;
}

lyco_status lyco_st_shard_writer_put_chunk(lyco_st_shard_writer *s, int64_t index,
                                           const void *data, uint64_t nbytes) {
    if (!s) return lyco_fail(LYCO_ERR_NULL, "lyco_st_shard_writer_put_chunk: w is NULL");
    if (s->failed) {
        return SWFAIL(s, LYCO_ERR_IO, "an earlier write failed; the sharded writer accepts "
                      "nothing more (abort it)");
    }
    if (index < 0 || index >= s->n) {
        return SWFAIL(s, LYCO_ERR_INVALID, "tensor index %" PRId64 " is outside [0, %" PRId64 ")",
                      index, s->n);
    }
    if (!data && nbytes > 0) {
        const char *nm = s->ents[index].name;
        return st_fail(LYCO_ERR_NULL, s->dir, "tensor", nm, strlen(nm), "data is NULL");
    }
    /* nothing to write (e.g. an empty tensor of a shard already committed): a no-op */
    if (nbytes == 0) return LYCO_OK;
    int64_t k = s->shard_of[index];
    if (s->state[k] == SH_DONE || s->state[k] == SH_SKIPPED) {
        const char *nm = s->ents[index].name;
        return st_fail(LYCO_ERR_INVALID, s->dir, "tensor", nm, strlen(nm), "its shard \"%s\" is "
                       "already %s", s->shard_name[k],
                       s->state[k] == SH_DONE ? "complete and committed" : "skipped (resumed)");
    }
    lyco_status st = LYCO_OK;
    if (s->state[k] == SH_PENDING) st = sw_open_shard(s, k);
    if (st == LYCO_OK) st = lyco_st_writer_put_chunk(s->w[k], index - s->start[k], data, nbytes);
    if (st == LYCO_OK) {
        s->remaining[k] -= nbytes;
        if (s->remaining[k] == 0) st = sw_commit_shard(s, k);
        if (st != LYCO_OK) s->failed = true;
    } else if (st == LYCO_ERR_IO || st == LYCO_ERR_NOMEM) {
        s->failed = true;
    }
    return st;
}

lyco_status lyco_st_shard_writer_put(lyco_st_shard_writer *s, int64_t index, const void *data,
                                     uint64_t nbytes) {
    if (!s) return lyco_fail(LYCO_ERR_NULL, "lyco_st_shard_writer_put: w is NULL");
    if (!s->failed && index >= 0 && index < s->n && s->state[s->shard_of[index]] == SH_OPEN &&
        lyco_st_writer_done_bytes(s->w[s->shard_of[index]], index - s->start[s->shard_of[index]])
            != 0) {
        const char *nm = s->ents[index].name;
        return st_fail(LYCO_ERR_INVALID, s->dir, "tensor", nm, strlen(nm), "lyco_st_shard_writer_"
                       "put takes the whole tensor, and part of it was already written");
    }
    if (!s->failed && index >= 0 && index < s->n && nbytes != s->ents[index].nbytes) {
        const char *nm = s->ents[index].name;
        return st_fail(LYCO_ERR_INVALID, s->dir, "tensor", nm, strlen(nm), "lyco_st_shard_writer_"
                       "put takes the whole tensor: got %" PRIu64 " bytes for %" PRIu64,
                       nbytes, s->ents[index].nbytes);
    }
    return lyco_st_shard_writer_put_chunk(s, index, data, nbytes);
}

lyco_status lyco_st_shard_writer_skip(lyco_st_shard_writer *s, int64_t k) {
    if (!s) return lyco_fail(LYCO_ERR_NULL, "lyco_st_shard_writer_skip: w is NULL");
    if (k < 0 || k >= s->n_shards) {
        return SWFAIL(s, LYCO_ERR_INVALID, "shard %" PRId64 " is outside [0, %" PRId64 ")", k,
                      s->n_shards);
    }
    if (s->state[k] != SH_PENDING) {
        return SWFAIL(s, LYCO_ERR_INVALID, "shard \"%s\" cannot be skipped: it was already "
                      "written to or skipped", s->shard_name[k]);
    }
    char *p = join_path(s->dir, s->shard_name[k]);
    if (!p) return SWFAIL(s, LYCO_ERR_NOMEM, "out of memory");
    struct stat sb;
    bool ok = stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
    free(p);
    if (!ok) {
        return SWFAIL(s, LYCO_ERR_INVALID, "shard \"%s\" cannot be skipped: no such regular file "
                      "in the output directory", s->shard_name[k]);
    }
    s->state[k] = SH_SKIPPED;
    return LYCO_OK;
}

/* The index JSON: {"metadata": {"total_size": T}, "weight_map": {name: shard, ...}}. */
static lyco_status sw_index_json(lyco_st_shard_writer *s, char **text, size_t *len) {
    json_t *root = json_object(), *md = json_object(), *wm = json_object();
    bool ok = root && md && wm &&
              json_object_set_new(md, "total_size", json_integer((json_int_t)s->total_size)) == 0;
    for (int64_t i = 0; ok && i < s->n; i++) {
        ok = json_object_set_new(wm, s->ents[i].name,
                                 json_string(s->shard_name[s->shard_of[i]])) == 0;
    }
    ok = ok && json_object_set(root, "metadata", md) == 0 &&
         json_object_set(root, "weight_map", wm) == 0;
    /* as transformers writes it: json.dumps(index, indent=2, sort_keys=True) + "\n" */
    char *j = ok ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENSURE_ASCII) : NULL;
    json_decref(md);
    json_decref(wm);
    json_decref(root);
    size_t jl = j ? strlen(j) : 0;
    /* jansson writes \uXXXX in upper case, Python's json in lower case; every backslash in
       JSON text starts an escape, so walking escape by escape is exact */
    for (size_t i = 0; i + 1 < jl; i++) {
        if (j[i] != '\\') continue;
        if (j[i + 1] == 'u') {
            for (size_t k = i + 2; k < i + 6 && k < jl; k++) {
                if (j[k] >= 'A' && j[k] <= 'F') j[k] = (char)(j[k] - 'A' + 'a');
            }
        }
        i++;
    }
    *text = j ? malloc(jl + 2) : NULL;
    if (*text) {
        memcpy(*text, j, jl);
        (*text)[jl] = '\n';
        (*text)[jl + 1] = '\0';
    }
    free(j);
    if (!*text) return SWFAIL(s, LYCO_ERR_NOMEM, "out of memory building the index");
    *len = jl + 1;
    return LYCO_OK;
}

lyco_status lyco_st_shard_writer_commit(lyco_st_shard_writer *s) {
    if (!s) return lyco_fail(LYCO_ERR_NULL, "lyco_st_shard_writer_commit: w is NULL");
    lyco_status st = LYCO_OK;
    if (s->failed) st = SWFAIL(s, LYCO_ERR_IO, "commit after a failed write: no index written");
    for (int64_t k = 0; st == LYCO_OK && k < s->n_shards; k++) {
        if (s->state[k] == SH_DONE || s->state[k] == SH_SKIPPED) continue;
        if (s->remaining[k] != 0) {
            for (int64_t i = s->start[k]; i < s->start[k + 1]; i++) {
                int64_t done = s->w[k] ? lyco_st_writer_done_bytes(s->w[k], i - s->start[k]) : 0;
                if ((uint64_t)done != s->ents[i].nbytes) {
                    const char *nm = s->ents[i].name;
                    st = st_fail(LYCO_ERR_INVALID, s->dir, "tensor", nm, strlen(nm), "incomplete "
                                 "at commit: %" PRId64 " of %" PRIu64 " bytes written (shard "
                                 "\"%s\"); no index written", done, s->ents[i].nbytes,
                                 s->shard_name[k]);
                    break;
                }
            }
            break;
        }
        st = sw_commit_shard(s, k);
    }
    if (st == LYCO_OK) {
        char *text = NULL, *ip = NULL;
        size_t len = 0;
        st = sw_index_json(s, &text, &len);
        if (st == LYCO_OK) {
            ip = join_path(s->dir, s->index_name);
            st = ip ? lyco_st_write_text_atomic(ip, text, len, s->flags)
                    : SWFAIL(s, LYCO_ERR_NOMEM, "out of memory");
        }
        free(ip);
        free(text);
    }
    sw_free(s);
    return st;
}

void lyco_st_shard_writer_abort(lyco_st_shard_writer *s) { sw_free(s); }

int64_t lyco_st_shard_writer_index(const lyco_st_shard_writer *s, const char *name) {
    if (!s || !name) return -1;
    int64_t lo = 0, hi = s->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->ents[s->by_name[mid]].name, name);
        if (c == 0) return s->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

int64_t lyco_st_shard_writer_shard_count(const lyco_st_shard_writer *s) {
    return s ? s->n_shards : 0;
}

int64_t lyco_st_shard_writer_shard_of(const lyco_st_shard_writer *s, int64_t index) {
    if (!s || index < 0 || index >= s->n) return -1;
    return s->shard_of[index];
}

const char *lyco_st_shard_writer_shard_name(const lyco_st_shard_writer *s, int64_t k) {
    if (!s || k < 0 || k >= s->n_shards) return NULL;
    return s->shard_name[k];
}

bool lyco_st_shard_writer_shard_done(const lyco_st_shard_writer *s, int64_t k) {
    if (!s || k < 0 || k >= s->n_shards) return false;
    return s->state[k] == SH_DONE || s->state[k] == SH_SKIPPED;
}

const char *lyco_st_shard_writer_index_name(const lyco_st_shard_writer *s) {
    return s ? s->index_name : NULL;
}
