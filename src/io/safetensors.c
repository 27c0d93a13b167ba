/*
 * safetensors.c — the strict safetensors reader and the atomic writer (FORMATS.md §1, §2.1).
 *
 * Reader, in order (each step fails closed with LYCO_ERR_FORMAT naming file, tensor and rule;
 * the numbers are the rules of FORMATS.md §1.4):
 *   1  fstat, then the 8-byte prefix N: file >= 8 bytes, 2 <= N <= 100,000,000, N <= size - 8,
 *      all checked before the header buffer is allocated; then N bytes are pread (owned copy).
 *   2  UTF-8 (overlongs, surrogates, > U+10FFFF, truncated sequences rejected), first
 *      non-whitespace byte `{` (leading JSON whitespace accepted, like the reference reader),
 *      only JSON whitespace after the object (trailing space padding is what writers add).
 *   3  jansson parses with JSON_REJECT_DUPLICATES (duplicate keys at any level), then: nesting
 *      at most 3 containers deep (header object, tensor entry, shape/data_offsets array);
 *      every entry an object with exactly dtype/shape/data_offsets (unknown fields rejected);
 *      __metadata__ an object of strings.
 *   4  dtype one of the reference list (fail closed).
 *   5  shape an array of integers in [0, 2^48-1] (fractions and exponent forms are reals in
 *      jansson and are rejected); element and byte counts by checked multiplication over the
 *      non-zero dims (so the verdict does not depend on where a 0 dim sits); bits % 8 == 0.
 *   6  data_offsets exactly 2 such integers, end >= begin, end - begin == bytes(shape, dtype).
 *   7  sorted by (begin, end), ties by dtype descending then name (the writer's order, so a file
 *      we wrote reads back in its written order): first begin 0, no holes, no overlaps, last
 *      end == the data section size (trailing bytes and truncation are told apart).
 *   8  names, metadata keys and values without NUL (they are C strings here); names are
 *      escaped in every message (printable ASCII kept, other bytes as \xNN, long ones cut).
 *   9  data is exposed as possibly unaligned bytes; lyco_st_tensor_view refuses misaligned
 *      data (and big-endian hosts), lyco_st_tensor_load copies (and byte-swaps) only then.
 *  10  the data section is mmap'ed PROT_READ/MAP_PRIVATE: truncation by another process while
 *      mapped means SIGBUS on access (accepted; documented in safetensors.h); the descriptor
 *      stays open so lyco_st_read can pread instead (an I/O error, not a signal).
 * lyco_st_open_memory runs the same steps over a caller's buffer (the fuzz target's entry).
 * No count cap on tensors or dims beyond what the 100 MB header cap implies; jansson's tree for a
 * hostile 100 MB header can take a few GB, which bounds the worst case.
 *
 * Writer: validates every entry first (nothing touches the disk before the header is built),
 * sorts by dtype (reference enum order) descending then name, writes `{` … `}` compact JSON with
 * serde_json-style string escapes, pads with spaces to a multiple of 8. The streaming writer
 * (lyco_st_writer_*) fixes every offset from that header, creates the temp file through
 * st_atomic_create (st_util.c: ".<name>.lyco-tmp.<pid>.<k>", O_EXCL, in the target's directory),
 * writes the header, then each tensor's bytes with pwrite at its offset (any tensor order,
 * chunks in order); commit = fsync, close, rename (or link for no-replace), fsync of the
 * directory. Any I/O failure removes the temp at once. lyco_st_write is the streaming writer fed
 * in file order. An fsync failure is final (never retried: FORMATS.md §2.1).
 *
 * Assumptions: POSIX.1-2008; jansson >= 2.14 (json_error_code, key lengths); C11.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "st_util.h"

/* ============================================================================================
 * dtypes
 * ========================================================================================== */

static const struct {
    const char *name;
    int bits;
} st_dtypes[LYCO_ST_DTYPE_COUNT] = {
    {"BOOL", 8},         {"F4", 4},           {"F6_E2M3", 6},      {"F6_E3M2", 6},
    {"U8", 8},           {"I8", 8},           {"F8_E5M2", 8},      {"F8_E4M3", 8},
    {"F8_E8M0", 8},      {"F8_E4M3FNUZ", 8},  {"F8_E5M2FNUZ", 8},  {"I16", 16},
    {"U16", 16},         {"F16", 16},         {"BF16", 16},        {"I32", 32},
    {"U32", 32},         {"F32", 32},         {"C64", 64},         {"F64", 64},
    {"I64", 64},         {"U64", 64},
};

const char *lyco_st_dtype_name(lyco_st_dtype d) {
    if ((int)d < 0 || d >= LYCO_ST_DTYPE_COUNT) return NULL;
    return st_dtypes[d].name;
}

int lyco_st_dtype_bits(lyco_st_dtype d) {
    if ((int)d < 0 || d >= LYCO_ST_DTYPE_COUNT) return 0;
    return st_dtypes[d].bits;
}

int lyco_st_dtype_parse(const char *s, size_t len) {
    if (!s) return -1;
    for (int i = 0; i < (int)LYCO_ST_DTYPE_COUNT; i++) {
        if (strlen(st_dtypes[i].name) == len && memcmp(st_dtypes[i].name, s, len) == 0) return i;
    }
    return -1;
}

lyco_st_dtype lyco_st_dtype_from_lyco(lyco_dtype d) {
    switch (d) {
    case LYCO_F16: return LYCO_ST_F16;
    case LYCO_BF16: return LYCO_ST_BF16;
    case LYCO_F32: return LYCO_ST_F32;
    default: return LYCO_ST_DTYPE_COUNT;
    }
}

/* Byte size of a tensor with checked arithmetic. The products are taken over the non-zero dims
   (a 0 dim makes the tensor empty, but it does not excuse an overflowing shape). */
typedef enum { SZ_OK = 0, SZ_COUNT_OVERFLOW, SZ_BYTES_OVERFLOW, SZ_PARTIAL_BYTE } st_size_result;

static st_size_result st_nbytes(const int64_t *shape, int64_t ndim, int bits, uint64_t *count,
                                uint64_t *bytes) {
    uint64_t p = 1;
    bool empty = false;
    for (int64_t i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (d == 0) { empty = true; continue; }
        if (p > UINT64_MAX / d) return SZ_COUNT_OVERFLOW;
        p *= d;
    }
    uint64_t b;
    if (bits % 8 == 0) {
        uint64_t per = (uint64_t)(bits / 8);
        if (p > UINT64_MAX / per) return SZ_BYTES_OVERFLOW;
        b = p * per;
    } else {
        if (p > UINT64_MAX / (uint64_t)bits) return SZ_BYTES_OVERFLOW;
        uint64_t total_bits = p * (uint64_t)bits;
        if (!empty && total_bits % 8 != 0) return SZ_PARTIAL_BYTE;
        b = total_bits / 8;
    }
    *count = empty ? 0 : p;
    *bytes = empty ? 0 : b;
    return SZ_OK;
}

static bool json_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* ============================================================================================
 * reader
 * ========================================================================================== */

struct lyco_st_file {
    char *path;
    uint8_t *map;            /* the read-only mapping (NULL for memory files) */
    size_t map_len;
    const uint8_t *bytes;    /* the whole file: map, or the caller's buffer */
    int fd;                  /* kept open for lyco_st_read; -1 for memory files */
    uint64_t file_size, header_size, data_size, dev, ino;
    int64_t n;
    lyco_st_tensor *t;       /* file order */
    int64_t *by_name;        /* indices into t, sorted by name */
    int64_t n_meta;
    const char **meta;       /* key0, value0, key1, … */
    char *strings;           /* names, metadata keys and values */
    int64_t *dims;           /* all shapes */
};

void lyco_st_close(lyco_st_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_len);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f->t);
    free(f->by_name);
    free(f->meta);
    free(f->strings);
    free(f->dims);
    free(f);
}

/* Depth of containers: a scalar is 0, [] or {} is 1, … */
static int json_depth(json_t *v) {
    int best = 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            int d = json_depth(x);
            if (d > best) best = d;
        }
        return best + 1;
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            int d = json_depth(x);
            if (d > best) best = d;
        }
        return best + 1;
    }
    return 0;
}

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number with a fraction or exponent";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown JSON value";
}

typedef struct {
    lyco_st_file *f;
    const char *name;
    size_t name_len;
} st_ctx;

#define TFAIL(c, ...)                                                                            \
    st_fail(LYCO_ERR_FORMAT, (c)->f->path, "tensor", (c)->name, (c)->name_len, __VA_ARGS__)

/* An integer field value in [0, 2^48-1] (rules 5 and 6). `field` is "shape" or "data_offsets". */
static lyco_status st_uint(const st_ctx *c, json_t *v, const char *field, size_t idx,
                           uint64_t *out) {
    if (!json_is_integer(v)) {
        return TFAIL(c, "%s[%zu] is %s, not an integer (rule 5/6: %s holds non-negative integers "
                        "written without fraction or exponent)",
                     field, idx, json_kind(v), field);
    }
    json_int_t x = json_integer_value(v);
    if (x < 0) {
        return TFAIL(c, "%s[%zu] = %" JSON_INTEGER_FORMAT " is negative (rule 5/6: %s values "
                        "must be >= 0)", field, idx, x, field);
    }
    if ((uint64_t)x > LYCO_ST_MAX_INT) {
        return TFAIL(c, "%s[%zu] = %" JSON_INTEGER_FORMAT " exceeds 2^48-1 = 281474976710655 "
                        "(rule 5/6: the schema caps integers at 2^48-1)", field, idx, x);
    }
    *out = (uint64_t)x;
    return LYCO_OK;
}

/* Validates one tensor entry and fills t (shape written at dims). */
static lyco_status st_entry(const st_ctx *c, json_t *e, lyco_st_tensor *t, int64_t *dims) {
    if (!json_is_object(e)) {
        return TFAIL(c, "tensor entry is %s, not an object (rule 3: each tensor maps to "
                        "{\"dtype\", \"shape\", \"data_offsets\"})", json_kind(e));
    }
    const char *k;
    size_t klen;
    json_t *x;
    json_object_keylen_foreach(e, k, klen, x) {
        bool known = (klen == 5 && memcmp(k, "dtype", 5) == 0) ||
                     (klen == 5 && memcmp(k, "shape", 5) == 0) ||
                     (klen == 12 && memcmp(k, "data_offsets", 12) == 0);
        if (!known) {
            char ke[ST_NAME2_BUDGET + 8];
            st_esc(ke, sizeof ke, k, klen, ST_NAME2_BUDGET);
            return TFAIL(c, "unknown field \"%s\" in the tensor entry (rule 3: only dtype, shape "
                            "and data_offsets are allowed)", ke);
        }
    }
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    for (int i = 0; i < 3; i++) {
        if (!json_object_get(e, fields[i])) {
            return TFAIL(c, "missing field \"%s\" in the tensor entry (rule 3: dtype, shape and "
                            "data_offsets are all required)", fields[i]);
        }
    }
    /* dtype (rule 4) */
    json_t *jd = json_object_get(e, "dtype");
    if (!json_is_string(jd)) {
        return TFAIL(c, "dtype is %s, not a string (rule 4: dtype is one of the known dtype "
                        "names)", json_kind(jd));
    }
    int dt = lyco_st_dtype_parse(json_string_value(jd), json_string_length(jd));
    if (dt < 0) {
        char de[ST_NAME2_BUDGET + 8];
        st_esc(de, sizeof de, json_string_value(jd), json_string_length(jd), ST_NAME2_BUDGET);
        return TFAIL(c, "unknown dtype \"%s\" (rule 4: dtype must be one of BOOL, F4, F6_E2M3, "
                        "F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, "
                        "I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64)", de);
    }
    /* shape (rule 5) */
    json_t *js = json_object_get(e, "shape");
    if (!json_is_array(js)) {
        return TFAIL(c, "shape is %s, not an array (rule 5: shape is an array of integers)",
                     json_kind(js));
    }
    size_t nd = json_array_size(js);
    if (nd > INT32_MAX) return TFAIL(c, "shape has %zu dims (rule 5: rank must fit int32)", nd);
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        lyco_status s = st_uint(c, json_array_get(js, i), "shape", i, &d);
        if (s != LYCO_OK) return s;
        dims[i] = (int64_t)d;
    }
    uint64_t count = 0, bytes = 0;
    int bits = st_dtypes[dt].bits;
    switch (st_nbytes(dims, (int64_t)nd, bits, &count, &bytes)) {
    case SZ_OK: break;
    case SZ_COUNT_OVERFLOW:
        return TFAIL(c, "element count of the shape overflows 64 bits (rule 5: element count "
                        "is computed with checked multiplication)");
    case SZ_BYTES_OVERFLOW:
        return TFAIL(c, "byte size of the shape overflows 64 bits for dtype %s (rule 5: byte "
                        "count is computed with checked multiplication)", st_dtypes[dt].name);
    case SZ_PARTIAL_BYTE:
        return TFAIL(c, "%s tensor holds a total that is not a multiple of 8 bits (rule 5: "
                        "sub-byte dtypes need byte-aligned totals)", st_dtypes[dt].name);
    }
    /* data_offsets (rule 6) */
    json_t *jo = json_object_get(e, "data_offsets");
    if (!json_is_array(jo) || json_array_size(jo) != 2) {
        if (json_is_array(jo)) {
            return TFAIL(c, "data_offsets has %zu elements (rule 6: data_offsets is an array of "
                            "exactly 2 integers [BEGIN, END])", json_array_size(jo));
        }
        return TFAIL(c, "data_offsets is %s (rule 6: data_offsets is an array of exactly 2 "
                        "integers [BEGIN, END])", json_kind(jo));
    }
    uint64_t b, en;
    lyco_status s = st_uint(c, json_array_get(jo, 0), "data_offsets", 0, &b);
    if (s != LYCO_OK) return s;
    s = st_uint(c, json_array_get(jo, 1), "data_offsets", 1, &en);
    if (s != LYCO_OK) return s;
    if (en < b) {
        return TFAIL(c, "data_offsets [%" PRIu64 ", %" PRIu64 "] ends before it begins "
                        "(rule 6: END >= BEGIN)", b, en);
    }
    if (en - b != bytes) {
        return TFAIL(c, "data_offsets [%" PRIu64 ", %" PRIu64 "] span %" PRIu64 " bytes but "
                        "shape x dtype %s needs %" PRIu64 " (rule 6: END - BEGIN == bytes(shape, "
                        "dtype))", b, en, en - b, st_dtypes[dt].name, bytes);
    }
    t->dtype = (lyco_st_dtype)dt;
    t->dtype_name = st_dtypes[dt].name;
    t->ndim = (int32_t)nd;
    t->shape = dims;
    t->nbytes = bytes;
    t->begin = b;
    t->end = en;
    return LYCO_OK;
}

static int cmp_offsets(const void *pa, const void *pb) {
    const lyco_st_tensor *a = pa, *b = pb;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    /* ties (empty tensors sharing an offset): the reference writer's order */
    if (a->dtype != b->dtype) return a->dtype > b->dtype ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* qsort has no context argument in C11; sort indices by comparing names through a
   thread-local base pointer. */
static _Thread_local const lyco_st_tensor *tl_sort_base;
static int cmp_names(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return strcmp(tl_sort_base[a].name, tl_sort_base[b].name);
}

#define HFAIL(...) st_fail(LYCO_ERR_FORMAT, f->path, NULL, NULL, 0, __VA_ARGS__)

/* Maps a jansson parse error to our rules. */
static lyco_status st_json_error(lyco_st_file *f, const json_error_t *e) {
    char te[JSON_ERROR_TEXT_LENGTH + 8];
    st_esc(te, sizeof te, e->text, strnlen(e->text, JSON_ERROR_TEXT_LENGTH - 1), 140);
    switch (json_error_code(e)) {
    case json_error_out_of_memory:
        return st_fail(LYCO_ERR_NOMEM, f->path, NULL, NULL, 0,
                       "out of memory parsing the %" PRIu64 "-byte header", f->header_size);
    case json_error_duplicate_key:
        return HFAIL("duplicate key in the header JSON at header byte %d: %s (rule 3: duplicate "
                     "keys are disallowed at any level)", e->position, te);
    case json_error_null_byte_in_key:
        return HFAIL("a key in the header JSON contains a NUL (\\u0000) at header byte %d: %s "
                     "(rule 8: tensor names and keys must not contain NUL)", e->position, te);
    case json_error_stack_overflow:
        return HFAIL("header JSON nests containers too deep at header byte %d (rule 3: at most "
                     "3 levels: header object, tensor entry, shape/data_offsets array)",
                     e->position);
    case json_error_numeric_overflow:
        return HFAIL("an integer in the header JSON does not fit 64 bits at header byte %d: %s "
                     "(rule 5/6: integers are in [0, 2^48-1])", e->position, te);
    case json_error_invalid_utf8:
        return HFAIL("header is not valid UTF-8 at header byte %d: %s (rule 2)", e->position, te);
    default:
        if (strncmp(e->text, "invalid Unicode", 15) == 0) {
            return HFAIL("header is not valid UTF-8: escaped lone UTF-16 surrogate at header byte "
                         "%d: %s (rule 2: no surrogates)", e->position, te);
        }
        return HFAIL("header is not valid JSON at header byte %d: %s (rule 3: the header is one "
                     "JSON object)", e->position, te);
    }
}

/* Validates the header bytes and fills f's tables (rules 2–8). */
static lyco_status st_parse(lyco_st_file *f, const uint8_t *h, size_t n) {
    size_t bad = 0;
    const char *why = NULL;
    if (!st_utf8_valid(h, n, &bad, &why)) {
        return HFAIL("header is not valid UTF-8 at header byte %zu (file byte %zu): %s (rule 2: "
                     "the header is UTF-8)", bad, bad + 8, why);
    }
    size_t i = 0;
    while (i < n && json_ws(h[i])) i++;
    if (i == n) return HFAIL("header is all whitespace (rule 2: the header must start with '{')");
    if (h[i] != '{') {
        return HFAIL("header does not start with '{' (first non-whitespace byte 0x%02x at "
                     "header byte %zu) (rule 2: the header is a JSON object)", h[i], i);
    }
    json_error_t je;
    const size_t flags = JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL;
    json_t *root = json_loadb((const char *)h, n, flags, &je);
    if (!root) return st_json_error(f, &je);
    lyco_status st = LYCO_OK;
    size_t pos = je.position > 0 ? (size_t)je.position : 0;
    for (size_t k = pos; k < n; k++) {
        if (!json_ws(h[k])) {
            st = HFAIL("trailing bytes after the JSON object: byte 0x%02x at header byte %zu "
                       "(rule 2: only whitespace padding may follow the header object)", h[k], k);
            goto out;
        }
    }
    if (!json_is_object(root)) { /* unreachable after the '{' check; kept fail-closed */
        st = HFAIL("header JSON is %s, not an object (rule 3)", json_kind(root));
        goto out;
    }

    /* nesting (rule 3): each top-level value at most 2 deep (entry object + its arrays) */
    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach(root, key, klen, v) {
        int d = json_depth(v);
        if (d > 2) {
            st = st_fail(LYCO_ERR_FORMAT, f->path, "key", key, klen,
                         "value nests containers %d levels below the header object (rule 3: at "
                         "most 3 levels in all: header object, tensor entry, shape/data_offsets "
                         "array)", d);
            goto out;
        }
    }

    /* sizes for the owned tables (tolerant pre-pass; validation follows) */
    size_t n_tensors = 0, n_meta = 0, str_bytes = 0, n_dims = 0;
    json_object_keylen_foreach(root, key, klen, v) {
        if (klen == 12 && memcmp(key, "__metadata__", 12) == 0) {
            const char *mk;
            size_t mklen;
            json_t *mv;
            if (!json_is_object(v)) continue;
            json_object_keylen_foreach(v, mk, mklen, mv) {
                n_meta++;
                str_bytes += mklen + 1;
                if (json_is_string(mv)) str_bytes += json_string_length(mv) + 1;
            }
        } else {
            n_tensors++;
            str_bytes += klen + 1;
            json_t *js = json_is_object(v) ? json_object_get(v, "shape") : NULL;
            if (json_is_array(js)) n_dims += json_array_size(js);
        }
    }
    f->t = calloc(n_tensors ? n_tensors : 1, sizeof *f->t);
    f->by_name = calloc(n_tensors ? n_tensors : 1, sizeof *f->by_name);
    f->meta = calloc(n_meta ? 2 * n_meta : 1, sizeof *f->meta);
    f->strings = malloc(str_bytes ? str_bytes : 1);
    f->dims = calloc(n_dims ? n_dims : 1, sizeof *f->dims);
    if (!f->t || !f->by_name || !f->meta || !f->strings || !f->dims) {
        st = st_fail(LYCO_ERR_NOMEM, f->path, NULL, NULL, 0,
                     "out of memory for the tables of %zu tensors", n_tensors);
        goto out;
    }

    char *sp = f->strings;
    int64_t *dp = f->dims;
    json_object_keylen_foreach(root, key, klen, v) {
        if (klen == 12 && memcmp(key, "__metadata__", 12) == 0) {
            if (!json_is_object(v)) {
                st = HFAIL("__metadata__ is %s, not an object (rule 3: __metadata__ maps strings "
                           "to strings)", json_kind(v));
                goto out;
            }
            const char *mk;
            size_t mklen;
            json_t *mv;
            json_object_keylen_foreach(v, mk, mklen, mv) {
                if (!json_is_string(mv)) {
                    st = st_fail(LYCO_ERR_FORMAT, f->path, "__metadata__ key", mk, mklen,
                                 "__metadata__ value is %s, not a string (rule 3: __metadata__ "
                                 "maps strings to strings)", json_kind(mv));
                    goto out;
                }
                size_t vl = json_string_length(mv);
                const char *vs = json_string_value(mv);
                if (strlen(mk) != mklen || strlen(vs) != vl) {
                    st = st_fail(LYCO_ERR_FORMAT, f->path, "__metadata__ key", mk, mklen,
                                 "__metadata__ %s contains a NUL (\\u0000) (rule 8: keys and "
                                 "values are C strings here)",
                                 strlen(mk) != mklen ? "key" : "value");
                    goto out;
                }
                memcpy(sp, mk, mklen + 1);
                f->meta[2 * f->n_meta] = sp;
                sp += mklen + 1;
                memcpy(sp, vs, vl + 1);
                f->meta[2 * f->n_meta + 1] = sp;
                sp += vl + 1;
                f->n_meta++;
            }
            continue;
        }
        st_ctx c = {f, key, klen};
        if (strlen(key) != klen) {
            st = TFAIL(&c, "tensor name contains a NUL (\\u0000) (rule 8: names are C strings "
                           "here)");
            goto out;
        }
        lyco_st_tensor *t = &f->t[f->n];
        memcpy(sp, key, klen + 1);
        t->name = sp;
        t->name_len = klen;
        sp += klen + 1;
        t->file = f;
        st = st_entry(&c, v, t, dp);
        if (st != LYCO_OK) goto out;
        dp += t->ndim;
        f->n++;
    }

    /* rule 7: contiguous cover of the data section */
    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_offsets);
    uint64_t prev_end = 0;
    for (int64_t k = 0; k < f->n; k++) {
        const lyco_st_tensor *t = &f->t[k];
        st_ctx c = {f, t->name, t->name_len};
        if (k == 0) {
            if (t->begin != 0) {
                st = TFAIL(&c, "first tensor begins at data byte %" PRIu64 ", not 0 (rule 7: the "
                               "byte buffer is indexed from 0 with no holes)", t->begin);
                goto out;
            }
        } else {
            const lyco_st_tensor *p = &f->t[k - 1];
            char pe[ST_NAME2_BUDGET + 8];
            st_esc(pe, sizeof pe, p->name, p->name_len, ST_NAME2_BUDGET);
            if (t->begin > prev_end) {
                st = TFAIL(&c, "hole of %" PRIu64 " bytes between tensor \"%s\" (ends at data "
                               "byte %" PRIu64 ") and this tensor (begins at %" PRIu64 ") "
                               "(rule 7: no holes)", t->begin - prev_end, pe, prev_end, t->begin);
                goto out;
            }
            if (t->begin < prev_end) {
                st = TFAIL(&c, "overlaps tensor \"%s\": begins at data byte %" PRIu64 " before "
                               "that tensor ends at %" PRIu64 " (rule 7: no overlaps)",
                           pe, t->begin, prev_end);
                goto out;
            }
        }
        prev_end = t->end;
    }
    if (prev_end < f->data_size) {
        st = HFAIL("%" PRIu64 " trailing bytes after the last tensor: tensors cover %" PRIu64
                   " of the %" PRIu64 " data bytes (rule 7: the byte buffer is entirely indexed)",
                   f->data_size - prev_end, prev_end, f->data_size);
        goto out;
    }
    if (prev_end > f->data_size) {
        st = HFAIL("file is truncated: tensors need %" PRIu64 " data bytes but only %" PRIu64
                   " follow the header (rule 7: last END == file size - 8 - N)",
                   prev_end, f->data_size);
        goto out;
    }
out:
    json_decref(root);
    return st;
}

/* A fresh file record with a copy of `label`; NULL when out of memory. */
static lyco_st_file *st_new(const char *label) {
    lyco_st_file *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->fd = -1;
    size_t pl = strlen(label);
    f->path = malloc(pl + 1);
    if (!f->path) {
        free(f);
        return NULL;
    }
    memcpy(f->path, label, pl + 1);
    return f;
}

/* Rule 1 on the 8-byte prefix, against f->file_size; sets header_size and data_size. Runs
   before anything is allocated from the header length. */
static lyco_status st_prefix(lyco_st_file *f, const uint8_t pre[8]) {
    uint64_t N = 0;
    for (int k = 7; k >= 0; k--) N = (N << 8) | pre[k];
    f->header_size = N;
    if (N < 2) {
        return HFAIL("header length %" PRIu64 " is below the minimum of 2 (rule 1: the smallest "
                     "header is {})", N);
    }
    if (N > LYCO_ST_MAX_HEADER) {
        return HFAIL("header length %" PRIu64 " exceeds the 100000000-byte cap (rule 1: "
                     "reference MAX_HEADER_SIZE)", N);
    }
    if (N > f->file_size - 8) {
        return HFAIL("header length %" PRIu64 " exceeds the %" PRIu64 " bytes that follow the "
                     "prefix (rule 1: N <= file size - 8)", N, f->file_size - 8);
    }
    f->data_size = f->file_size - 8 - N;
    return LYCO_OK;
}

static lyco_status st_too_short(lyco_st_file *f) {
    return HFAIL("file is %" PRIu64 " bytes, shorter than the 8-byte header-length prefix "
                 "(rule 1)", f->file_size);
}

/* After a successful parse: tensor data pointers into f->bytes, the by-name index. */
static void st_finish(lyco_st_file *f) {
    const uint8_t *data = f->bytes + 8 + f->header_size;
    for (int64_t k = 0; k < f->n; k++) {
        f->t[k].data = data + f->t[k].begin;
        f->by_name[k] = k;
    }
    tl_sort_base = f->t;
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_names);
    tl_sort_base = NULL;
}

lyco_status lyco_st_open(const char *path, lyco_st_file **out) {
    if (!out) return lyco_fail(LYCO_ERR_NULL, "lyco_st_open: out is NULL");
    *out = NULL;
    if (!path) return lyco_fail(LYCO_ERR_NULL, "lyco_st_open: path is NULL");
    char eb[128];
    lyco_st_file *f = st_new(path);
    if (!f) return lyco_fail(LYCO_ERR_NOMEM, "lyco_st_open: out of memory");

    lyco_status st = LYCO_OK;
    uint8_t *hdr = NULL;
    /* O_NONBLOCK: never hang opening a FIFO (refused below); no effect on regular files. */
    f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (f->fd < 0) {
        int e = errno;
        st = st_fail(LYCO_ERR_IO, f->path, NULL, NULL, 0, "cannot open for reading: %s (errno %d)",
                     st_errstr(e, eb, sizeof eb), e);
        goto fail;
    }
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) {
        int e = errno;
        st = st_fail(LYCO_ERR_IO, f->path, NULL, NULL, 0, "fstat failed: %s (errno %d)",
                     st_errstr(e, eb, sizeof eb), e);
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = st_fail(LYCO_ERR_IO, f->path, NULL, NULL, 0, "not a regular file");
        goto fail;
    }
    f->dev = (uint64_t)sb.st_dev;
    f->ino = (uint64_t)sb.st_ino;
    f->file_size = sb.st_size > 0 ? (uint64_t)sb.st_size : 0;

    /* rule 1, before any allocation sized by the file */
    if (f->file_size < 8) {
        st = st_too_short(f);
        goto fail;
    }
    uint8_t pre[8];
    int r = st_read_full(f->fd, pre, 8, 0);
    if (r != 0) {
        st = st_fail(LYCO_ERR_IO, f->path, NULL, NULL, 0, "reading the header-length prefix "
                     "failed: %s", r < 0 ? "the file shrank while being read"
                                         : st_errstr(r, eb, sizeof eb));
        goto fail;
    }
    st = st_prefix(f, pre);
    if (st != LYCO_OK) goto fail;
    uint64_t N = f->header_size;
    hdr = malloc((size_t)N);
    if (!hdr) {
        st = st_fail(LYCO_ERR_NOMEM, f->path, NULL, NULL, 0,
                     "out of memory for the %" PRIu64 "-byte header", N);
        goto fail;
    }
    r = st_read_full(f->fd, hdr, (size_t)N, 8);
    if (r != 0) {
        st = st_fail(LYCO_ERR_IO, f->path, NULL, NULL, 0,
                     "reading the %" PRIu64 "-byte header failed: %s", N,
                     r < 0 ? "the file shrank while being read" : st_errstr(r, eb, sizeof eb));
        goto fail;
    }
    st = st_parse(f, hdr, (size_t)N);
    free(hdr);
    hdr = NULL;
    if (st != LYCO_OK) goto fail;

    if (f->file_size > (uint64_t)SIZE_MAX) {
        st = st_fail(LYCO_ERR_IO, f->path, NULL, NULL, 0, "file of %" PRIu64 " bytes is too "
                     "large to map", f->file_size);
        goto fail;
    }
    f->map_len = (size_t)f->file_size;
    void *m = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, f->fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        st = st_fail(LYCO_ERR_IO, f->path, NULL, NULL, 0, "mmap of %" PRIu64 " bytes failed: "
                     "%s (errno %d)", f->file_size, st_errstr(e, eb, sizeof eb), e);
        goto fail;
    }
    f->map = m;
    f->bytes = f->map;
    st_finish(f);
    *out = f;
    return LYCO_OK;

fail:
    free(hdr);
    lyco_st_close(f);
    return st;
}

lyco_status lyco_st_open_memory(const void *buf, size_t len, const char *label,
                                lyco_st_file **out) {
    if (!out) return lyco_fail(LYCO_ERR_NULL, "lyco_st_open_memory: out is NULL");
    *out = NULL;
    if (!buf && len > 0) {
        return lyco_fail(LYCO_ERR_NULL, "lyco_st_open_memory: buf is NULL with len %zu", len);
    }
    lyco_st_file *f = st_new(label ? label : "<memory>");
    if (!f) return lyco_fail(LYCO_ERR_NOMEM, "lyco_st_open_memory: out of memory");
    f->file_size = (uint64_t)len;
    f->bytes = buf;
    lyco_status st;
    if (f->file_size < 8) st = st_too_short(f);
    else st = st_prefix(f, f->bytes);
    /* the header bytes are parsed in place: the caller promised they do not change */
    if (st == LYCO_OK) st = st_parse(f, f->bytes + 8, (size_t)f->header_size);
    if (st != LYCO_OK) {
        lyco_st_close(f);
        return st;
    }
    st_finish(f);
    *out = f;
    return LYCO_OK;
}

int64_t lyco_st_count(const lyco_st_file *f) { return f ? f->n : 0; }

const lyco_st_tensor *lyco_st_get(const lyco_st_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->n) return NULL;
    return &f->t[i];
}

const lyco_st_tensor *lyco_st_find(const lyco_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    int64_t lo = 0, hi = f->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->t[f->by_name[mid]].name, name);
        if (c == 0) return &f->t[f->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* The lyco float dtype of a tensor, or a LYCO_ERR_DTYPE failure naming it. */
static lyco_status st_float_dtype(const lyco_st_tensor *t, const char *fn, lyco_dtype *d) {
    switch (t->dtype) {
    case LYCO_ST_F16: *d = LYCO_F16; return LYCO_OK;
    case LYCO_ST_BF16: *d = LYCO_BF16; return LYCO_OK;
    case LYCO_ST_F32: *d = LYCO_F32; return LYCO_OK;
    default:
        return st_fail(LYCO_ERR_DTYPE, t->file ? t->file->path : "?", "tensor", t->name,
                       t->name_len, "%s: dtype %s has no float view (only F16, BF16 and F32 do); "
                       "read its raw little-endian bytes through lyco_st_read or "
                       "lyco_st_tensor.data", fn, t->dtype_name);
    }
}

#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) &&                                 \
    __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define ST_HOST_LE 0
#else
#define ST_HOST_LE 1
#endif

static bool st_aligned(const lyco_st_tensor *t, size_t elem) {
    return t->nbytes == 0 || (uintptr_t)t->data % elem == 0;
}

lyco_status lyco_st_tensor_view(const lyco_st_tensor *t, DLTensor *out) {
    if (!t || !out) return lyco_fail(LYCO_ERR_NULL, "lyco_st_tensor_view: %s is NULL",
                                     !t ? "t" : "out");
    const char *path = t->file ? t->file->path : "?";
    lyco_dtype d = LYCO_F32;
    lyco_status s = st_float_dtype(t, "lyco_st_tensor_view", &d);
    if (s != LYCO_OK) return s;
    if (!ST_HOST_LE) {
        return st_fail(LYCO_ERR_UNSUPPORTED, path, "tensor", t->name, t->name_len,
                       "float views of little-endian file bytes are not provided on a big-endian "
                       "host; use lyco_st_tensor_load (it byte-swaps into a copy)");
    }
    if (!st_aligned(t, lyco_dtype_size(d))) {
        return st_fail(LYCO_ERR_UNSUPPORTED, path, "tensor", t->name, t->name_len,
                       "data at file byte %" PRIu64 " is not aligned to its %zu-byte elements "
                       "(rule 9: no view of misaligned data); use lyco_st_tensor_load (it "
                       "copies)", 8 + t->file->header_size + t->begin, lyco_dtype_size(d));
    }
    *out = lyco_host_tensor((void *)(uintptr_t)t->data, d, t->ndim, (int64_t *)(uintptr_t)t->shape);
    return LYCO_OK;
}

lyco_status lyco_st_tensor_load(const lyco_st_tensor *t, DLTensor *out, void **owned) {
    if (!t || !out || !owned) {
        return lyco_fail(LYCO_ERR_NULL, "lyco_st_tensor_load: %s is NULL",
                         !t ? "t" : !out ? "out" : "owned");
    }
    *owned = NULL;
    lyco_dtype d = LYCO_F32;
    lyco_status s = st_float_dtype(t, "lyco_st_tensor_load", &d);
    if (s != LYCO_OK) return s;
    size_t es = lyco_dtype_size(d);
    if (ST_HOST_LE && st_aligned(t, es)) return lyco_st_tensor_view(t, out);
    if (t->nbytes > (uint64_t)SIZE_MAX) {
        return st_fail(LYCO_ERR_NOMEM, t->file->path, "tensor", t->name, t->name_len,
                       "%" PRIu64 " bytes do not fit this address space", t->nbytes);
    }
    uint8_t *buf = malloc(t->nbytes ? (size_t)t->nbytes : 1);
    if (!buf) {
        return st_fail(LYCO_ERR_NOMEM, t->file->path, "tensor", t->name, t->name_len,
                       "out of memory for an aligned copy of %" PRIu64 " bytes", t->nbytes);
    }
    if (t->nbytes) memcpy(buf, t->data, (size_t)t->nbytes);
    if (!ST_HOST_LE) {
        for (size_t i = 0; i + es <= (size_t)t->nbytes; i += es) {
            for (size_t k = 0; k < es / 2; k++) {
                uint8_t x = buf[i + k];
                buf[i + k] = buf[i + es - 1 - k];
                buf[i + es - 1 - k] = x;
            }
        }
    }
    *out = lyco_host_tensor(buf, d, t->ndim, (int64_t *)(uintptr_t)t->shape);
    *owned = buf;
    return LYCO_OK;
}

lyco_status lyco_st_read(const lyco_st_tensor *t, uint64_t off, void *dst, uint64_t n) {
    if (!t || (!dst && n > 0)) {
        return lyco_fail(LYCO_ERR_NULL, "lyco_st_read: %s is NULL", !t ? "t" : "dst");
    }
    const lyco_st_file *f = t->file;
    if (off > t->nbytes || n > t->nbytes - off) {
        return st_fail(LYCO_ERR_INVALID, f->path, "tensor", t->name, t->name_len,
                       "lyco_st_read: bytes [%" PRIu64 ", %" PRIu64 " + %" PRIu64 ") are outside "
                       "the tensor's %" PRIu64 " bytes", off, off, n, t->nbytes);
    }
    if (n == 0) return LYCO_OK;
    if (n > (uint64_t)SIZE_MAX) {
        return st_fail(LYCO_ERR_INVALID, f->path, "tensor", t->name, t->name_len,
                       "lyco_st_read: %" PRIu64 " bytes do not fit size_t", n);
    }
    if (f->fd < 0) {
        memcpy(dst, (const uint8_t *)t->data + off, (size_t)n);
        return LYCO_OK;
    }
    uint64_t at = 8 + f->header_size + t->begin + off;
    if (at > (uint64_t)INT64_MAX) {
        return st_fail(LYCO_ERR_INVALID, f->path, "tensor", t->name, t->name_len,
                       "lyco_st_read: offset %" PRIu64 " does not fit off_t", at);
    }
    int r = st_read_full(f->fd, dst, (size_t)n, (off_t)at);
    if (r != 0) {
        char eb[128];
        return st_fail(LYCO_ERR_IO, f->path, "tensor", t->name, t->name_len,
                       "reading %" PRIu64 " bytes at file byte %" PRIu64 " failed: %s", n, at,
                       r < 0 ? "the file is shorter than when it was opened (changed underneath)"
                             : st_errstr(r, eb, sizeof eb));
    }
    return LYCO_OK;
}

const char *lyco_st_metadata(const lyco_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (int64_t i = 0; i < f->n_meta; i++) {
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    }
    return NULL;
}

int64_t lyco_st_metadata_count(const lyco_st_file *f) { return f ? f->n_meta : 0; }

const char *lyco_st_metadata_key(const lyco_st_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->n_meta) return NULL;
    return f->meta[2 * i];
}

const char *lyco_st_metadata_value(const lyco_st_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->n_meta) return NULL;
    return f->meta[2 * i + 1];
}

const char *lyco_st_path(const lyco_st_file *f) { return f ? f->path : NULL; }
uint64_t lyco_st_file_size(const lyco_st_file *f) { return f ? f->file_size : 0; }
uint64_t lyco_st_header_size(const lyco_st_file *f) { return f ? f->header_size : 0; }
uint64_t lyco_st_data_size(const lyco_st_file *f) { return f ? f->data_size : 0; }

void lyco_st_identity(const lyco_st_file *f, uint64_t *dev, uint64_t *ino) {
    if (dev) *dev = f ? f->dev : 0;
    if (ino) *ino = f ? f->ino : 0;
}

/* ============================================================================================
 * writer
 * ========================================================================================== */

typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const void *s, size_t n) {
    if (b->oom) return;
    if (b->cap - b->len < n) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc - b->len < n) {
            if (nc > SIZE_MAX / 2) { b->oom = true; return; }
            nc *= 2;
        }
        char *q = realloc(b->p, nc);
        if (!q) { b->oom = true; return; }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(sbuf *b, uint64_t v) {
    char t[24];
    int k = snprintf(t, sizeof t, "%" PRIu64, v);
    sb_put(b, t, (size_t)k);
}

/* A JSON string with serde_json's escapes: \" \\ \b \f \n \r \t, other controls \u00xx. */
static void sb_json_str(sbuf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    sb_put(b, "\"", 1);
    const char *run = s;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        const char *e = NULL;
        char u[7];
        if (c == '"') e = "\\\"";
        else if (c == '\\') e = "\\\\";
        else if (c == '\b') e = "\\b";
        else if (c == '\f') e = "\\f";
        else if (c == '\n') e = "\\n";
        else if (c == '\r') e = "\\r";
        else if (c == '\t') e = "\\t";
        else if (c < 0x20) {
            u[0] = '\\'; u[1] = 'u'; u[2] = '0'; u[3] = '0'; u[4] = hex[c >> 4]; u[5] = hex[c & 15];
            u[6] = '\0';
            e = u;
        }
        if (e) {
            sb_put(b, run, (size_t)(p - run));
            sb_str(b, e);
            run = p + 1;
        }
    }
    sb_put(b, run, strlen(run));
    sb_put(b, "\"", 1);
}

static int cmp_entry_name(const void *pa, const void *pb) {
    const lyco_st_entry *a = *(const lyco_st_entry *const *)pa;
    const lyco_st_entry *b = *(const lyco_st_entry *const *)pb;
    return strcmp(a->name, b->name);
}

/* The reference order: dtype descending (enum order), then name ascending (bytewise). */
static int cmp_entry_ref(const void *pa, const void *pb) {
    const lyco_st_entry *a = *(const lyco_st_entry *const *)pa;
    const lyco_st_entry *b = *(const lyco_st_entry *const *)pb;
    if (a->dtype != b->dtype) return a->dtype > b->dtype ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int cmp_cstr_ptr(const void *pa, const void *pb) {
    return strcmp(*(const char *const *)pa, *(const char *const *)pb);
}

#define WFAIL(s, ...) st_fail((s), path, NULL, NULL, 0, __VA_ARGS__)
#define EFAIL(s, e, ...) st_fail((s), path, "tensor", (e)->name, strlen((e)->name), __VA_ARGS__)

/* Validates entries and metadata (need_data: also that every non-empty entry has data) and
   builds the 8-byte length prefix (room for it is reserved by the caller) plus the padded
   header into hb; order[] receives the entries in file order. */
static lyco_status st_build_header(const char *path, const lyco_st_entry *entries, int64_t n,
                                   const char *const *meta_kv, bool need_data,
                                   const lyco_st_entry **order, sbuf *hb) {
    size_t bad;
    const char *why;
    sb_put(hb, "\0\0\0\0\0\0\0\0", 8); /* room for the length prefix */
    for (int64_t i = 0; i < n; i++) {
        const lyco_st_entry *e = &entries[i];
        if (!e->name) return WFAIL(LYCO_ERR_NULL, "entries[%" PRId64 "].name is NULL", i);
        size_t nl = strlen(e->name);
        if (!st_utf8_valid((const uint8_t *)e->name, nl, &bad, &why)) {
            return EFAIL(LYCO_ERR_INVALID, e, "name is not valid UTF-8 at byte %zu: %s (names "
                         "are JSON strings)", bad, why);
        }
        if (strcmp(e->name, "__metadata__") == 0) {
            return EFAIL(LYCO_ERR_INVALID, e, "\"__metadata__\" is reserved and cannot name a "
                         "tensor");
        }
        if ((int)e->dtype < 0 || e->dtype >= LYCO_ST_DTYPE_COUNT) {
            return EFAIL(LYCO_ERR_INVALID, e, "dtype %d is not a lyco_st_dtype", (int)e->dtype);
        }
        if (e->ndim < 0) return EFAIL(LYCO_ERR_INVALID, e, "ndim %d is negative", (int)e->ndim);
        if (e->ndim > 0 && !e->shape) return EFAIL(LYCO_ERR_NULL, e, "shape is NULL with ndim %d",
                                                   (int)e->ndim);
        for (int32_t d = 0; d < e->ndim; d++) {
            if (e->shape[d] < 0 || (uint64_t)e->shape[d] > LYCO_ST_MAX_INT) {
                return EFAIL(LYCO_ERR_INVALID, e, "shape[%d] = %" PRId64 " is outside [0, 2^48-1]",
                             (int)d, e->shape[d]);
            }
        }
        uint64_t count, bytes;
        switch (st_nbytes(e->shape, e->ndim, st_dtypes[e->dtype].bits, &count, &bytes)) {
        case SZ_OK: break;
        case SZ_COUNT_OVERFLOW:
            return EFAIL(LYCO_ERR_INVALID, e, "element count of the shape overflows 64 bits");
        case SZ_BYTES_OVERFLOW:
            return EFAIL(LYCO_ERR_INVALID, e, "byte size of the shape overflows 64 bits");
        case SZ_PARTIAL_BYTE:
            return EFAIL(LYCO_ERR_INVALID, e, "%s total is not a multiple of 8 bits",
                         st_dtypes[e->dtype].name);
        }
        if (bytes != e->nbytes) {
            return EFAIL(LYCO_ERR_INVALID, e, "nbytes %" PRIu64 " differs from bytes(shape, %s) = "
                         "%" PRIu64, e->nbytes, st_dtypes[e->dtype].name, bytes);
        }
        if (need_data && bytes > 0 && !e->data) return EFAIL(LYCO_ERR_NULL, e, "data is NULL");
        order[i] = e;
    }
    if (n > 1) {
        qsort(order, (size_t)n, sizeof *order, cmp_entry_name);
        for (int64_t i = 1; i < n; i++) {
            if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
                return EFAIL(LYCO_ERR_INVALID, order[i], "duplicate tensor name");
            }
        }
        qsort(order, (size_t)n, sizeof *order, cmp_entry_ref);
    }

    /* metadata pairs */
    size_t nm = 0;
    if (meta_kv) {
        while (meta_kv[2 * nm]) {
            const char *k = meta_kv[2 * nm], *v = meta_kv[2 * nm + 1];
            if (!v) {
                return st_fail(LYCO_ERR_INVALID, path, "__metadata__ key", k, strlen(k),
                               "has no value (meta_kv must hold key, value pairs then NULL)");
            }
            if (!st_utf8_valid((const uint8_t *)k, strlen(k), &bad, &why) ||
                !st_utf8_valid((const uint8_t *)v, strlen(v), &bad, &why)) {
                return st_fail(LYCO_ERR_INVALID, path, "__metadata__ key", k, strlen(k),
                               "key or value is not valid UTF-8: %s", why);
            }
            nm++;
        }
    }
    if (nm > 1) {
        const char **keys = malloc(nm * sizeof *keys);
        if (!keys) return WFAIL(LYCO_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < nm; i++) keys[i] = meta_kv[2 * i];
        qsort(keys, nm, sizeof *keys, cmp_cstr_ptr);
        for (size_t i = 1; i < nm; i++) {
            if (strcmp(keys[i - 1], keys[i]) == 0) {
                lyco_status s = st_fail(LYCO_ERR_INVALID, path, "__metadata__ key", keys[i],
                                        strlen(keys[i]), "duplicate metadata key");
                free(keys);
                return s;
            }
        }
        free(keys);
    }

    /* header JSON */
    sb_put(hb, "{", 1);
    bool first = true;
    if (nm > 0) {
        sb_str(hb, "\"__metadata__\":{");
        for (size_t i = 0; i < nm; i++) {
            if (i) sb_put(hb, ",", 1);
            sb_json_str(hb, meta_kv[2 * i]);
            sb_put(hb, ":", 1);
            sb_json_str(hb, meta_kv[2 * i + 1]);
        }
        sb_put(hb, "}", 1);
        first = false;
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        const lyco_st_entry *e = order[i];
        if (!first) sb_put(hb, ",", 1);
        first = false;
        sb_json_str(hb, e->name);
        sb_str(hb, ":{\"dtype\":\"");
        sb_str(hb, st_dtypes[e->dtype].name);
        sb_str(hb, "\",\"shape\":[");
        for (int32_t d = 0; d < e->ndim; d++) {
            if (d) sb_put(hb, ",", 1);
            sb_u64(hb, (uint64_t)e->shape[d]);
        }
        sb_str(hb, "],\"data_offsets\":[");
        sb_u64(hb, off);
        sb_put(hb, ",", 1);
        if (e->nbytes > LYCO_ST_MAX_INT - off) {
            return WFAIL(LYCO_ERR_INVALID, "total data exceeds 2^48-1 bytes at tensor %" PRId64,
                         i);
        }
        off += e->nbytes;
        sb_u64(hb, off);
        sb_str(hb, "]}");
        if (hb->oom) break;
    }
    sb_put(hb, "}", 1);
    while (!hb->oom && hb->len % 8 != 0) sb_put(hb, " ", 1);
    if (hb->oom) return WFAIL(LYCO_ERR_NOMEM, "out of memory building the header");
    uint64_t N = (uint64_t)(hb->len - 8);
    if (N > LYCO_ST_MAX_HEADER) {
        return WFAIL(LYCO_ERR_FORMAT, "header would be %" PRIu64 " bytes, over the 100000000-byte "
                     "cap (writer rule: header <= cap)", N);
    }
    for (int k = 0; k < 8; k++) hb->p[k] = (char)(uint8_t)(N >> (8 * k));
    return LYCO_OK;
}

/* Argument checks shared by the whole-file and the streaming writer. */
static lyco_status st_write_args(const char *fn, const char *path, const lyco_st_entry *entries,
                                 int64_t n) {
    if (!path) return lyco_fail(LYCO_ERR_NULL, "%s: path is NULL", fn);
    if (n < 0) return WFAIL(LYCO_ERR_INVALID, "tensor count %" PRId64 " is negative", n);
    if (n > 0 && !entries) return WFAIL(LYCO_ERR_NULL, "entries is NULL with n = %" PRId64, n);
    if ((uint64_t)n > SIZE_MAX / (4 * sizeof(uint64_t))) {
        return WFAIL(LYCO_ERR_INVALID, "tensor count %" PRId64 " is too large", n);
    }
    return LYCO_OK;
}

lyco_status lyco_st_layout(const lyco_st_entry *entries, int64_t n, const char *const *meta_kv,
                           uint64_t *header_size, uint64_t *file_size) {
    const char *path = "<layout>";
    if (!header_size || !file_size) {
        return lyco_fail(LYCO_ERR_NULL, "lyco_st_layout: %s is NULL",
                         !header_size ? "header_size" : "file_size");
    }
    lyco_status st = st_write_args("lyco_st_layout", path, entries, n);
    if (st != LYCO_OK) return st;
    const lyco_st_entry **order = malloc((n ? (size_t)n : 1) * sizeof *order);
    if (!order) return WFAIL(LYCO_ERR_NOMEM, "out of memory");
    sbuf hb = {NULL, 0, 0, false};
    st = st_build_header(path, entries, n, meta_kv, false, order, &hb);
    if (st == LYCO_OK) {
        uint64_t data = 0;
        for (int64_t i = 0; i < n; i++) data += order[i]->nbytes; /* <= 2^48-1, checked */
        *header_size = (uint64_t)(hb.len - 8);
        *file_size = (uint64_t)hb.len + data;
    }
    free(order);
    free(hb.p);
    return st;
}

/* ---- the streaming writer ---- */

struct lyco_st_writer {
    st_atomic a;
    int64_t n;
    uint64_t *off;        /* per caller index: absolute file offset of the tensor's bytes */
    uint64_t *size;       /* per caller index: its byte count */
    uint64_t *done;       /* per caller index: bytes supplied so far */
    int64_t *by_name;     /* caller indices sorted by name */
    char **name;          /* per caller index, into names */
    char *names;
    uint64_t file_size;
    unsigned flags;
    bool failed;          /* an I/O error happened: the temp is gone, only abort/commit remain */
};

static void writer_free(lyco_st_writer *w) {
    st_atomic_discard(&w->a);
    free(w->off);
    free(w->size);
    free(w->done);
    free(w->by_name);
    free(w->name);
    free(w->names);
    free(w);
}

static _Thread_local const uint64_t *tl_off_base;
static int cmp_writer_offsets(const void *pa, const void *pb) {
    uint64_t a = tl_off_base[*(const int64_t *)pa], b = tl_off_base[*(const int64_t *)pb];
    return a < b ? -1 : a > b;
}

static _Thread_local char *const *tl_name_base;
static int cmp_writer_names(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return strcmp(tl_name_base[a], tl_name_base[b]);
}

/* The writer's tables from validated entries and their file order; LYCO_ERR_NOMEM or OK. */
static lyco_status writer_tables(lyco_st_writer *w, const lyco_st_entry *entries,
                                 const lyco_st_entry *const *order, uint64_t data_start) {
    size_t n = (size_t)w->n, nb = 0;
    for (size_t i = 0; i < n; i++) nb += strlen(entries[i].name) + 1;
    w->off = calloc(n ? n : 1, sizeof *w->off);
    w->size = calloc(n ? n : 1, sizeof *w->size);
    w->done = calloc(n ? n : 1, sizeof *w->done);
    w->by_name = calloc(n ? n : 1, sizeof *w->by_name);
    w->name = calloc(n ? n : 1, sizeof *w->name);
    w->names = malloc(nb ? nb : 1);
    if (!w->off || !w->size || !w->done || !w->by_name || !w->name || !w->names) {
        return lyco_fail(LYCO_ERR_NOMEM, "safetensors writer: out of memory for %zu tensors", n);
    }
    char *p = w->names;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(entries[i].name) + 1;
        memcpy(p, entries[i].name, l);
        w->name[i] = p;
        p += l;
        w->size[i] = entries[i].nbytes;
        w->by_name[i] = (int64_t)i;
    }
    uint64_t at = data_start;
    for (size_t k = 0; k < n; k++) {
        size_t i = (size_t)(order[k] - entries);
        w->off[i] = at;
        at += w->size[i];
    }
    w->file_size = at;
    tl_name_base = w->name;
    qsort(w->by_name, n, sizeof *w->by_name, cmp_writer_names);
    tl_name_base = NULL;
    return LYCO_OK;
}

static lyco_status writer_open(const char *fn, lyco_st_writer **out, const char *path,
                               const lyco_st_entry *entries, int64_t n,
                               const char *const *meta_kv, unsigned flags, bool need_data) {
    if (!out) return lyco_fail(LYCO_ERR_NULL, "%s: out is NULL", fn);
    *out = NULL;
    lyco_status st = st_write_args(fn, path, entries, n);
    if (st != LYCO_OK) return st;
    if (flags & ~(unsigned)LYCO_ST_NOREPLACE) {
        return WFAIL(LYCO_ERR_INVALID, "flags 0x%x: unknown bits (expected 0 or "
                     "LYCO_ST_NOREPLACE)", flags);
    }
    const lyco_st_entry **order = malloc((n ? (size_t)n : 1) * sizeof *order);
    lyco_st_writer *w = calloc(1, sizeof *w);
    sbuf hb = {NULL, 0, 0, false};
    if (!order || !w) {
        free(order);
        free(w);
        return WFAIL(LYCO_ERR_NOMEM, "out of memory");
    }
    w->a.fd = w->a.dfd = -1;
    w->n = n;
    w->flags = flags;
    st = st_build_header(path, entries, n, meta_kv, need_data, order, &hb);
    if (st == LYCO_OK) st = writer_tables(w, entries, order, (uint64_t)hb.len);
    if (st == LYCO_OK) st = st_atomic_create(&w->a, path);
    if (st == LYCO_OK) {
        int e = st_pwrite_full(w->a.fd, hb.p, hb.len, 0);
        if (e != 0) {
            char eb[128];
            st = WFAIL(LYCO_ERR_IO, "write failed (the header, into the temp file): %s (errno %d); "
                       "nothing was written to the target", st_errstr(e, eb, sizeof eb), e);
        }
    }
    free(order);
    free(hb.p);
    if (st != LYCO_OK) {
        writer_free(w);
        return st;
    }
    *out = w;
    return LYCO_OK;
}

lyco_status lyco_st_writer_open(lyco_st_writer **out, const char *path,
                                const lyco_st_entry *entries, int64_t n,
                                const char *const *meta_kv, unsigned flags) {
    return writer_open("lyco_st_writer_open", out, path, entries, n, meta_kv, flags, false);
}

#define WWFAIL(w, s, ...) st_fail((s), (w)->a.path, NULL, NULL, 0, __VA_ARGS__)
#define WTFAIL(w, i, s, ...)                                                                       \
    st_fail((s), (w)->a.path, "tensor", (w)->name[i], strlen((w)->name[i]), __VA_ARGS__)

lyco_status lyco_st_writer_put_chunk(lyco_st_writer *w, int64_t index, const void *data,
                                     uint64_t nbytes) {
    if (!w) return lyco_fail(LYCO_ERR_NULL, "lyco_st_writer_put_chunk: w is NULL");
    if (w->failed) {
        return WWFAIL(w, LYCO_ERR_IO, "an earlier write failed; the writer accepts nothing more "
                      "(commit or abort it)");
    }
    if (index < 0 || index >= w->n) {
        return WWFAIL(w, LYCO_ERR_INVALID, "tensor index %" PRId64 " is outside [0, %" PRId64 ")",
                      index, w->n);
    }
    if (!data && nbytes > 0) return WTFAIL(w, index, LYCO_ERR_NULL, "data is NULL");
    uint64_t left = w->size[index] - w->done[index];
    if (nbytes > left) {
        return WTFAIL(w, index, LYCO_ERR_INVALID, "%" PRIu64 " more bytes would overrun the "
                      "tensor: %" PRIu64 " of its %" PRIu64 " bytes are already written",
                      nbytes, w->done[index], w->size[index]);
    }
    if (nbytes == 0) return LYCO_OK;
    int e = st_pwrite_full(w->a.fd, data, nbytes, w->off[index] + w->done[index]);
    if (e != 0) {
        char eb[128];
        lyco_status st = WTFAIL(w, index, LYCO_ERR_IO, "write failed: %s (errno %d); the temp "
                                "file was removed, nothing was written to the target",
                                st_errstr(e, eb, sizeof eb), e);
        w->failed = true;
        st_atomic_discard(&w->a);
        return st;
    }
    w->done[index] += nbytes;
    return LYCO_OK;
}

lyco_status lyco_st_writer_put(lyco_st_writer *w, int64_t index, const void *data,
                               uint64_t nbytes) {
    if (!w) return lyco_fail(LYCO_ERR_NULL, "lyco_st_writer_put: w is NULL");
    if (index >= 0 && index < w->n && (w->done[index] != 0 || nbytes != w->size[index])) {
        return WTFAIL(w, index, LYCO_ERR_INVALID, "lyco_st_writer_put takes the whole tensor: "
                      "got %" PRIu64 " bytes for a tensor of %" PRIu64 " with %" PRIu64 " already "
                      "written (use lyco_st_writer_put_chunk for pieces)",
                      nbytes, w->size[index], w->done[index]);
    }
    return lyco_st_writer_put_chunk(w, index, data, nbytes);
}

lyco_status lyco_st_writer_commit(lyco_st_writer *w) {
    if (!w) return lyco_fail(LYCO_ERR_NULL, "lyco_st_writer_commit: w is NULL");
    lyco_status st = LYCO_OK;
    if (w->failed) {
        st = WWFAIL(w, LYCO_ERR_IO, "commit after a failed write: nothing was written to the "
                    "target");
    }
    for (int64_t k = 0; st == LYCO_OK && k < w->n; k++) {
        int64_t i = w->by_name[k];
        if (w->done[i] != w->size[i]) {
            st = WTFAIL(w, i, LYCO_ERR_INVALID, "incomplete at commit: %" PRIu64 " of %" PRIu64
                        " bytes written; the temp file was removed, nothing was written to the "
                        "target", w->done[i], w->size[i]);
        }
    }
    if (st == LYCO_OK) st = st_atomic_commit(&w->a, w->flags);
    writer_free(w);
    return st;
}

void lyco_st_writer_abort(lyco_st_writer *w) {
    if (w) writer_free(w);
}

int64_t lyco_st_writer_index(const lyco_st_writer *w, const char *name) {
    if (!w || !name) return -1;
    int64_t lo = 0, hi = w->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(w->name[w->by_name[mid]], name);
        if (c == 0) return w->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

int64_t lyco_st_writer_done_bytes(const lyco_st_writer *w, int64_t index) {
    if (!w || index < 0 || index >= w->n) return -1;
    return (int64_t)w->done[index];
}

uint64_t lyco_st_writer_file_size(const lyco_st_writer *w) { return w ? w->file_size : 0; }

const char *lyco_st_writer_temp_path(const lyco_st_writer *w) {
    return w && w->a.tmp_exists ? w->a.tmp_path : NULL;
}

/* ---- the whole-file writer, on top of the streaming one ---- */

lyco_status lyco_st_write(const char *path, const lyco_st_entry *entries, int64_t n,
                          const char *const *meta_kv) {
    lyco_st_writer *w = NULL;
    lyco_status st = writer_open("lyco_st_write", &w, path, entries, n, meta_kv, 0, true);
    if (st != LYCO_OK) return st;
    /* file order, so the temp file grows sequentially */
    int64_t *ord = malloc((n ? (size_t)n : 1) * sizeof *ord);
    if (!ord) {
        lyco_st_writer_abort(w);
        return WFAIL(LYCO_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n; i++) ord[i] = i;
    tl_off_base = w->off;
    qsort(ord, (size_t)n, sizeof *ord, cmp_writer_offsets);
    tl_off_base = NULL;
    for (int64_t k = 0; st == LYCO_OK && k < n; k++) {
        st = lyco_st_writer_put(w, ord[k], entries[ord[k]].data, entries[ord[k]].nbytes);
    }
    free(ord);
    if (st != LYCO_OK) {
        lyco_st_writer_abort(w);
        return st;
    }
    return lyco_st_writer_commit(w);
}

