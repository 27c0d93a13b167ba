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
 *   9  data is exposed as possibly unaligned bytes; float views only on little-endian hosts.
 *  10  the data section is mmap'ed PROT_READ/MAP_PRIVATE: truncation by another process while
 *      mapped means SIGBUS on access (accepted; documented in safetensors.h).
 * No count cap on tensors or dims beyond what the 100 MB header cap implies; jansson's tree for a
 * hostile 100 MB header can take a few GB, which bounds the worst case.
 *
 * Writer: validates every entry first (nothing touches the disk before the header is built),
 * sorts by dtype (reference enum order) descending then name, writes `{` … `}` compact JSON with
 * serde_json-style string escapes, pads with spaces to a multiple of 8, then: temp file
 * ".<name>.lyco-tmp.<pid>.<k>" created O_EXCL in the target's directory (relative to an open
 * directory fd, so it cannot land elsewhere), full writes (EINTR/short writes looped), fsync,
 * close, renameat, fsync of the directory. Any failure before the rename unlinks the temp file.
 * An fsync failure is final (never retried: FORMATS.md §2.1).
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

/* ============================================================================================
 * messages
 * ========================================================================================== */

/* strerror_r exists in an XSI (int) and a GNU (char *) flavour; pick whichever this libc has. */
static const char *errstr_int(int r, char *buf) { return r == 0 ? buf : "unknown error"; }
static const char *errstr_ptr(char *r, char *buf) { (void)buf; return r; }
#define ST_ERRSTR(e, buf)                                                                        \
    _Generic(strerror_r((e), (buf), sizeof(buf)), int: errstr_int, default: errstr_ptr)(       \
        strerror_r((e), (buf), sizeof(buf)), (buf))

/* Copies s[0..n) into dst escaped for a log line: printable ASCII kept, `"` and `\` backslashed,
   every other byte as \xNN. Stops before `budget` output characters with "..." appended. */
static void esc(char *dst, size_t cap, const char *s, size_t n, size_t budget) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (cap == 0) return;
    if (budget + 4 > cap) budget = cap > 4 ? cap - 4 : 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char tmp[4];
        size_t k = 0;
        if (c == '"' || c == '\\') { tmp[k++] = '\\'; tmp[k++] = (char)c; }
        else if (c >= 0x20 && c < 0x7f) tmp[k++] = (char)c;
        else { tmp[k++] = '\\'; tmp[k++] = 'x'; tmp[k++] = hex[c >> 4]; tmp[k++] = hex[c & 15]; }
        if (o + k > budget) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(dst + o, tmp, k);
        o += k;
    }
    dst[o] = '\0';
}

#define ST_PATH_BUDGET 200
#define ST_NAME_BUDGET 160
#define ST_NAME2_BUDGET 80

/* lyco_fail with the standard prefix: safetensors "<path>": <what> "<name>": <message>. */
static lyco_status st_fail(lyco_status s, const char *path, const char *what, const char *name,
                           size_t name_len, const char *fmt, ...) LYCO_PRINTF(6, 7);
static lyco_status st_fail(lyco_status s, const char *path, const char *what, const char *name,
                           size_t name_len, const char *fmt, ...) {
    char pe[ST_PATH_BUDGET + 8], ne[ST_NAME_BUDGET + 8], msg[560];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    esc(pe, sizeof pe, path ? path : "(null)", path ? strlen(path) : 6, ST_PATH_BUDGET);
    if (what && name) {
        esc(ne, sizeof ne, name, name_len, ST_NAME_BUDGET);
        return lyco_fail(s, "safetensors \"%s\": %s \"%s\": %s", pe, what, ne, msg);
    }
    return lyco_fail(s, "safetensors \"%s\": %s", pe, msg);
}

/* ============================================================================================
 * UTF-8 (RFC 3629): returns true if valid, else the offset of the offending sequence and why.
 * ========================================================================================== */

static bool utf8_valid(const uint8_t *s, size_t n, size_t *bad_at, const char **why) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c < 0xC0) { *bad_at = i; *why = "unexpected continuation byte"; return false; }
        if (c < 0xC2) { *bad_at = i; *why = "overlong encoding"; return false; }
        if (c < 0xE0) need = 1;
        else if (c < 0xF0) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c < 0xF5) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else { *bad_at = i; *why = "lead byte above U+10FFFF"; return false; }
        if (n - i - 1 < need) { *bad_at = i; *why = "truncated sequence"; return false; }
        uint8_t c1 = s[i + 1];
        if (c1 < lo || c1 > hi) {
            *bad_at = i;
            if (c1 < 0x80 || c1 > 0xBF) *why = "bad continuation byte";
            else if (c == 0xED) *why = "UTF-16 surrogate";
            else if (c == 0xF4) *why = "code point above U+10FFFF";
            else *why = "overlong encoding";
            return false;
        }
        for (size_t k = 2; k <= need; k++) {
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) {
                *bad_at = i;
                *why = "bad continuation byte";
                return false;
            }
        }
        i += need + 1;
    }
    return true;
}

static bool json_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* ============================================================================================
 * reader
 * ========================================================================================== */

struct lyco_st_file {
    char *path;
    uint8_t *map;
    size_t map_len;
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
    free(f->path);
    free(f->t);
    free(f->by_name);
    free(f->meta);
    free(f->strings);
    free(f->dims);
    free(f);
}

/* pread exactly n bytes at off; 0 on success, else an errno (EIO-like 0-byte read: ENODATA). */
static int read_full(int fd, void *buf, size_t n, off_t off) {
    uint8_t *p = buf;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t r = pread(fd, p, chunk, off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (r == 0) return -1; /* the file shrank since fstat */
        p += r;
        n -= (size_t)r;
        off += (off_t)r;
    }
    return 0;
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
            esc(ke, sizeof ke, k, klen, ST_NAME2_BUDGET);
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
        esc(de, sizeof de, json_string_value(jd), json_string_length(jd), ST_NAME2_BUDGET);
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
    esc(te, sizeof te, e->text, strnlen(e->text, JSON_ERROR_TEXT_LENGTH - 1), 140);
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
    if (!utf8_valid(h, n, &bad, &why)) {
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
            esc(pe, sizeof pe, p->name, p->name_len, ST_NAME2_BUDGET);
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

lyco_status lyco_st_open(const char *path, lyco_st_file **out) {
    if (!out) return lyco_fail(LYCO_ERR_NULL, "lyco_st_open: out is NULL");
    *out = NULL;
    if (!path) return lyco_fail(LYCO_ERR_NULL, "lyco_st_open: path is NULL");
    char eb[128];
    lyco_st_file *f = calloc(1, sizeof *f);
    if (!f) return lyco_fail(LYCO_ERR_NOMEM, "lyco_st_open: out of memory");
    size_t pl = strlen(path);
    f->path = malloc(pl + 1);
    if (!f->path) {
        free(f);
        return lyco_fail(LYCO_ERR_NOMEM, "lyco_st_open: out of memory");
    }
    memcpy(f->path, path, pl + 1);

    lyco_status st = LYCO_OK;
    uint8_t *hdr = NULL;
    /* O_NONBLOCK: never hang opening a FIFO (refused below); no effect on regular files. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        st = st_fail(LYCO_ERR_IO, f->path, NULL, NULL, 0, "cannot open for reading: %s (errno %d)",
                     ST_ERRSTR(e, eb), e);
        goto fail;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        st = st_fail(LYCO_ERR_IO, f->path, NULL, NULL, 0, "fstat failed: %s (errno %d)",
                     ST_ERRSTR(e, eb), e);
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
        st = HFAIL("file is %" PRIu64 " bytes, shorter than the 8-byte header-length prefix "
                   "(rule 1)", f->file_size);
        goto fail;
    }
    uint8_t pre[8];
    int r = read_full(fd, pre, 8, 0);
    if (r != 0) {
        st = st_fail(LYCO_ERR_IO, f->path, NULL, NULL, 0, "reading the header-length prefix "
                     "failed: %s", r < 0 ? "the file shrank while being read" : ST_ERRSTR(r, eb));
        goto fail;
    }
    uint64_t N = 0;
    for (int k = 7; k >= 0; k--) N = (N << 8) | pre[k];
    f->header_size = N;
    if (N < 2) {
        st = HFAIL("header length %" PRIu64 " is below the minimum of 2 (rule 1: the smallest "
                   "header is {})", N);
        goto fail;
    }
    if (N > LYCO_ST_MAX_HEADER) {
        st = HFAIL("header length %" PRIu64 " exceeds the 100000000-byte cap (rule 1: reference "
                   "MAX_HEADER_SIZE)", N);
        goto fail;
    }
    if (N > f->file_size - 8) {
        st = HFAIL("header length %" PRIu64 " exceeds the %" PRIu64 " bytes that follow the "
                   "prefix (rule 1: N <= file size - 8)", N, f->file_size - 8);
        goto fail;
    }
    f->data_size = f->file_size - 8 - N;
    hdr = malloc((size_t)N);
    if (!hdr) {
        st = st_fail(LYCO_ERR_NOMEM, f->path, NULL, NULL, 0,
                     "out of memory for the %" PRIu64 "-byte header", N);
        goto fail;
    }
    r = read_full(fd, hdr, (size_t)N, 8);
    if (r != 0) {
        st = st_fail(LYCO_ERR_IO, f->path, NULL, NULL, 0,
                     "reading the %" PRIu64 "-byte header failed: %s", N,
                     r < 0 ? "the file shrank while being read" : ST_ERRSTR(r, eb));
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
    void *m = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        st = st_fail(LYCO_ERR_IO, f->path, NULL, NULL, 0, "mmap of %" PRIu64 " bytes failed: "
                     "%s (errno %d)", f->file_size, ST_ERRSTR(e, eb), e);
        goto fail;
    }
    f->map = m;
    close(fd);
    fd = -1;

    const uint8_t *data = f->map + 8 + N;
    for (int64_t k = 0; k < f->n; k++) {
        f->t[k].data = data + f->t[k].begin;
        f->by_name[k] = k;
    }
    tl_sort_base = f->t;
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_names);
    tl_sort_base = NULL;
    *out = f;
    return LYCO_OK;

fail:
    free(hdr);
    if (fd >= 0) close(fd);
    lyco_st_close(f);
    return st;
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

lyco_status lyco_st_tensor_view(const lyco_st_tensor *t, DLTensor *out) {
    if (!t || !out) return lyco_fail(LYCO_ERR_NULL, "lyco_st_tensor_view: %s is NULL",
                                     !t ? "t" : "out");
    const char *path = t->file ? t->file->path : "?";
    lyco_dtype d;
    switch (t->dtype) {
    case LYCO_ST_F16: d = LYCO_F16; break;
    case LYCO_ST_BF16: d = LYCO_BF16; break;
    case LYCO_ST_F32: d = LYCO_F32; break;
    default:
        return st_fail(LYCO_ERR_DTYPE, path, "tensor", t->name, t->name_len,
                       "dtype %s has no float view (only F16, BF16 and F32 do); read its raw "
                       "little-endian bytes through lyco_st_tensor.data", t->dtype_name);
    }
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) &&                                 \
    __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return st_fail(LYCO_ERR_UNSUPPORTED, path, "tensor", t->name, t->name_len,
                   "float views of little-endian file bytes are not provided on a big-endian "
                   "host; byte-swap t->data into a buffer of your own");
#else
    *out = lyco_host_tensor((void *)(uintptr_t)t->data, d, t->ndim, (int64_t *)(uintptr_t)t->shape);
    return LYCO_OK;
#endif
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

static _Thread_local struct {
    int64_t left[LYCO_ST_FAULT_COUNT];
    int err[LYCO_ST_FAULT_COUNT];
} tl_fault;

void lyco_st_fault_inject(lyco_st_fault_op op, int64_t nth, int err) {
    if ((int)op < 0 || op >= LYCO_ST_FAULT_COUNT) return;
    tl_fault.left[op] = nth > 0 ? nth : 0;
    tl_fault.err[op] = err;
}

/* True (with errno set) when an armed fault fires for this call of op. */
static bool fault_hit(lyco_st_fault_op op) {
    if (tl_fault.left[op] > 0 && --tl_fault.left[op] == 0) {
        errno = tl_fault.err[op];
        return true;
    }
    return false;
}

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

/* Validates entries and metadata and builds the padded header. */
static lyco_status st_build_header(const char *path, const lyco_st_entry *entries, int64_t n,
                                   const char *const *meta_kv, const lyco_st_entry **order,
                                   sbuf *hb) {
    size_t bad;
    const char *why;
    for (int64_t i = 0; i < n; i++) {
        const lyco_st_entry *e = &entries[i];
        if (!e->name) return WFAIL(LYCO_ERR_NULL, "entries[%" PRId64 "].name is NULL", i);
        size_t nl = strlen(e->name);
        if (!utf8_valid((const uint8_t *)e->name, nl, &bad, &why)) {
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
        if (bytes > 0 && !e->data) return EFAIL(LYCO_ERR_NULL, e, "data is NULL");
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
            if (!utf8_valid((const uint8_t *)k, strlen(k), &bad, &why) ||
                !utf8_valid((const uint8_t *)v, strlen(v), &bad, &why)) {
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
    if (hb->len > LYCO_ST_MAX_HEADER) {
        return WFAIL(LYCO_ERR_FORMAT, "header would be %zu bytes, over the 100000000-byte cap "
                     "(writer rule: header <= cap)", hb->len);
    }
    return LYCO_OK;
}

/* Writes n bytes; 0 or an errno. */
static int write_full(int fd, const void *buf, uint64_t n) {
    const uint8_t *p = buf;
    while (n > 0) {
        size_t chunk = n > ((uint64_t)1 << 30) ? ((size_t)1 << 30) : (size_t)n;
        if (fault_hit(LYCO_ST_FAULT_WRITE)) return errno;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (w == 0) return EIO;
        p += w;
        n -= (uint64_t)w;
    }
    return 0;
}

lyco_status lyco_st_write(const char *path, const lyco_st_entry *entries, int64_t n,
                          const char *const *meta_kv) {
    if (!path) return lyco_fail(LYCO_ERR_NULL, "lyco_st_write: path is NULL");
    if (n < 0) return WFAIL(LYCO_ERR_INVALID, "tensor count %" PRId64 " is negative", n);
    if (n > 0 && !entries) return WFAIL(LYCO_ERR_NULL, "entries is NULL with n = %" PRId64, n);
    size_t pl = strlen(path);
    if (pl == 0 || path[pl - 1] == '/') {
        return WFAIL(LYCO_ERR_INVALID, "path does not name a file");
    }
    if ((uint64_t)n > SIZE_MAX / sizeof(lyco_st_entry *)) {
        return WFAIL(LYCO_ERR_INVALID, "tensor count %" PRId64 " is too large", n);
    }

    const lyco_st_entry **order = malloc((n ? (size_t)n : 1) * sizeof *order);
    if (!order) return WFAIL(LYCO_ERR_NOMEM, "out of memory");
    sbuf hb = {NULL, 0, 0, false};
    sb_put(&hb, "\0\0\0\0\0\0\0\0", 8); /* room for the length prefix */
    lyco_status st = st_build_header(path, entries, n, meta_kv, order, &hb);
    if (st != LYCO_OK) {
        free(order);
        free(hb.p);
        return st;
    }
    uint64_t N = (uint64_t)(hb.len - 8);
    for (int k = 0; k < 8; k++) hb.p[k] = (char)(uint8_t)(N >> (8 * k));

    /* directory and base name */
    char eb[128];
    char *dir = NULL, *tmp = NULL;
    const char *base;
    const char *slash = strrchr(path, '/');
    int dfd = -1, fd = -1;
    bool tmp_exists = false;
    if (slash) {
        size_t dl = slash == path ? 1 : (size_t)(slash - path);
        dir = malloc(dl + 1);
        if (dir) { memcpy(dir, path, dl); dir[dl] = '\0'; }
        base = slash + 1;
    } else {
        dir = malloc(2);
        if (dir) memcpy(dir, ".", 2);
        base = path;
    }
    size_t bl = strlen(base);
    tmp = malloc(bl + 64);
    if (!dir || !tmp) {
        st = WFAIL(LYCO_ERR_NOMEM, "out of memory");
        goto done;
    }
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        int e = errno;
        st = WFAIL(LYCO_ERR_IO, "cannot open the target directory: %s (errno %d)",
                   ST_ERRSTR(e, eb), e);
        goto done;
    }
    {
        static _Thread_local unsigned seq;
        unsigned salt = (unsigned)time(NULL) ^ (unsigned)(uintptr_t)&seq;
        for (int attempt = 0; attempt < 100; attempt++) {
            snprintf(tmp, bl + 64, ".%.*s.lyco-tmp.%ld.%x", (int)(bl > 180 ? 180 : bl), base,
                     (long)getpid(), (salt + seq++) & 0xffffffu);
            fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
            if (fd >= 0 || errno != EEXIST) break;
        }
    }
    if (fd < 0) {
        int e = errno;
        st = WFAIL(LYCO_ERR_IO, "cannot create a temp file in the target directory: %s (errno %d)",
                   ST_ERRSTR(e, eb), e);
        goto done;
    }
    tmp_exists = true;

    int e = write_full(fd, hb.p, hb.len);
    for (int64_t i = 0; e == 0 && i < n; i++) {
        if (order[i]->nbytes > 0) e = write_full(fd, order[i]->data, order[i]->nbytes);
    }
    if (e != 0) {
        st = WFAIL(LYCO_ERR_IO, "write failed: %s (errno %d); nothing was written to the target",
                   ST_ERRSTR(e, eb), e);
        goto done;
    }
    if (fault_hit(LYCO_ST_FAULT_FSYNC) || fsync(fd) != 0) {
        e = errno;
        st = WFAIL(LYCO_ERR_IO, "fsync of the temp file failed: %s (errno %d); not retried, "
                   "nothing was written to the target", ST_ERRSTR(e, eb), e);
        goto done;
    }
    {
        bool faulted = fault_hit(LYCO_ST_FAULT_CLOSE);
        e = errno;
        int rc = close(fd);
        fd = -1;
        if (faulted || rc != 0) {
            if (!faulted) e = errno;
            st = WFAIL(LYCO_ERR_IO, "close of the temp file failed: %s (errno %d); nothing was "
                       "written to the target", ST_ERRSTR(e, eb), e);
            goto done;
        }
    }
    if (fault_hit(LYCO_ST_FAULT_RENAME) || renameat(dfd, tmp, dfd, base) != 0) {
        e = errno;
        st = WFAIL(LYCO_ERR_IO, "rename of the temp file into place failed: %s (errno %d); the "
                   "target was not changed", ST_ERRSTR(e, eb), e);
        goto done;
    }
    tmp_exists = false;
    /* EINVAL: the filesystem cannot sync directories at all; nothing more can be done. */
    if (fault_hit(LYCO_ST_FAULT_DIRSYNC) || (fsync(dfd) != 0 && errno != EINVAL)) {
        e = errno;
        st = WFAIL(LYCO_ERR_IO, "fsync of the directory failed after the rename: %s (errno %d); "
                   "the new file is complete and in place but may not survive a crash",
                   ST_ERRSTR(e, eb), e);
        goto done;
    }
    st = LYCO_OK;

done:
    if (fd >= 0) close(fd);
    if (tmp_exists) unlinkat(dfd, tmp, 0);
    if (dfd >= 0) close(dfd);
    free(dir);
    free(tmp);
    free(order);
    free(hb.p);
    return st;
}

/* ============================================================================================
 * API published ahead of its implementation (stubs: LYCO_ERR_UNSUPPORTED)
 * ========================================================================================== */

#define ST_STUB(fn) lyco_fail(LYCO_ERR_UNSUPPORTED, "%s: not implemented yet", fn)

lyco_status lyco_st_open_memory(const void *buf, size_t len, const char *label,
                                lyco_st_file **out) {
    (void)buf; (void)len; (void)label;
    if (out) *out = NULL;
    return ST_STUB("lyco_st_open_memory");
}
lyco_status lyco_st_tensor_load(const lyco_st_tensor *t, DLTensor *out, void **owned) {
    if (owned) *owned = NULL;
    return lyco_st_tensor_view(t, out);
}
lyco_status lyco_st_read(const lyco_st_tensor *t, uint64_t off, void *dst, uint64_t n) {
    (void)t; (void)off; (void)dst; (void)n;
    return ST_STUB("lyco_st_read");
}
lyco_status lyco_st_layout(const lyco_st_entry *entries, int64_t n, const char *const *meta_kv,
                           uint64_t *header_size, uint64_t *file_size) {
    (void)entries; (void)n; (void)meta_kv; (void)header_size; (void)file_size;
    return ST_STUB("lyco_st_layout");
}
lyco_status lyco_st_writer_open(lyco_st_writer **out, const char *path,
                                const lyco_st_entry *entries, int64_t n,
                                const char *const *meta_kv, unsigned flags) {
    (void)path; (void)entries; (void)n; (void)meta_kv; (void)flags;
    if (out) *out = NULL;
    return ST_STUB("lyco_st_writer_open");
}
lyco_status lyco_st_writer_put(lyco_st_writer *w, int64_t index, const void *data,
                               uint64_t nbytes) {
    (void)w; (void)index; (void)data; (void)nbytes;
    return ST_STUB("lyco_st_writer_put");
}
lyco_status lyco_st_writer_put_chunk(lyco_st_writer *w, int64_t index, const void *data,
                                     uint64_t nbytes) {
    (void)w; (void)index; (void)data; (void)nbytes;
    return ST_STUB("lyco_st_writer_put_chunk");
}
lyco_status lyco_st_writer_commit(lyco_st_writer *w) { (void)w; return ST_STUB("commit"); }
void lyco_st_writer_abort(lyco_st_writer *w) { (void)w; }
int64_t lyco_st_writer_index(const lyco_st_writer *w, const char *name) {
    (void)w; (void)name;
    return -1;
}
int64_t lyco_st_writer_done_bytes(const lyco_st_writer *w, int64_t index) {
    (void)w; (void)index;
    return -1;
}
uint64_t lyco_st_writer_file_size(const lyco_st_writer *w) { (void)w; return 0; }
const char *lyco_st_writer_temp_path(const lyco_st_writer *w) { (void)w; return NULL; }
