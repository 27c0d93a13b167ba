/*
 * test_safetensors.c — tests of the safetensors reader/writer (src/io/safetensors.c,
 * FORMATS.md §1.4–1.5, §2.1, §2.6).
 *
 *   - round trips through the writer and the strict reader (every dtype, empty and rank-0
 *     tensors, names and metadata needing JSON escapes), parse -> write -> parse byte-identical,
 *     the reference writer's order and padding, byte-exact reference vectors;
 *   - the broken-file corpus: one file per rejection rule of FORMATS.md §1.4, each asserting
 *     its status, a distinctive substring of the message, the file path and (where there is
 *     one) the tensor name in the message; plus valid seeds that must open;
 *   - files written by the reference implementation: opened, and re-written byte for byte;
 *   - the same verdicts and messages through lyco_st_open_memory (the fuzz entry point);
 *   - views of aligned data, copies of misaligned data (lyco_st_tensor_load), pread reads
 *     (lyco_st_read) that survive a file truncated underneath;
 *   - writer argument errors, and atomic-write fault injection (write/fsync/close/rename/
 *     directory fsync): clean failure, no temp left, target untouched;
 *   - the streaming writer: any tensor order, chunks, byte-identical to lyco_st_write, umask,
 *     incomplete commits, abort, no-replace, ENOSPC/EIO on writes and fsync;
 *   - randomized round trips and a byte-mutation smoke test (run it under ASan/UBSan).
 *
 * Usage: test_safetensors                   every check in a fresh temp dir (removed on success)
 *        test_safetensors --check-corpus D  the same, plus: the committed corpus in D equals
 *                                           what the table generates (tests/CMakeLists.txt)
 *        test_safetensors --reference R     also: every file in R, written by the reference
 *                                           implementation, opens and is reproduced byte for
 *                                           byte by lyco_st_write (both options combine)
 *        test_safetensors --corpus D        write the corpus (broken files + valid seeds +
 *                                           MANIFEST.tsv) into the existing directory D, exit
 * Prints one line per check and ends with "N passed, M failed"; exits non-zero on failure.
 * The random parts print their seed (LYCO_SEED reproduces a run).
 * Assumptions: POSIX (mkdtemp, opendir), a writable TMPDIR (or /tmp), a little-endian host.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "io/safetensors.h"
#include "st_testlib.h"

/* ============================================================================================
 * the broken-file corpus (one file per rejection rule of FORMATS.md §1.4) and valid seeds.
 * Table-driven so that the fuzz target can reuse it: corpus_write_all() writes every case as
 * <dir>/<id>.safetensors.
 * ========================================================================================== */

typedef enum {
    K_HEADER = 0, /* prefix (N = header length, or n_prefix) + header + data_len bytes */
    K_RAW,        /* raw[0..raw_len) verbatim */
    K_GEN         /* header produced by gen() */
} corpus_kind;

typedef struct {
    const char *id;
    corpus_kind kind;
    const char *header; /* K_HEADER: the header bytes (may contain NUL; see header_len) */
    size_t header_len;
    bool use_prefix;    /* write n_prefix instead of the header's length */
    uint64_t n_prefix;
    uint64_t data_len;  /* data bytes appended (a repeating pattern) */
    const char *raw;
    size_t raw_len;
    char *(*gen)(size_t *len);
    lyco_status want;   /* LYCO_OK for valid seeds */
    const char *needle; /* distinctive substring of the error message */
    const char *tensor; /* the tensor name the message must quote, or NULL */
} corpus_case;

#define HDR(s) K_HEADER, s, sizeof(s) - 1
#define RAW(s) K_RAW, NULL, 0, false, 0, 0, s, sizeof(s) - 1, NULL
#define NOPFX false, 0
#define PFX(n) true, n
#define TAIL(d) d, NULL, 0, NULL

/* a 3000-deep array nest: beyond jansson's parser depth limit */
static char *gen_deep(size_t *len) {
    const size_t depth = 3000;
    const char *pre = "{\"a\":";
    size_t n = strlen(pre) + 2 * depth + 1;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    size_t o = 0;
    memcpy(s, pre, strlen(pre));
    o += strlen(pre);
    for (size_t i = 0; i < depth; i++) s[o++] = '[';
    for (size_t i = 0; i < depth; i++) s[o++] = ']';
    s[o++] = '}';
    s[o] = '\0';
    *len = o;
    return s;
}

#define T1 "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"

static const corpus_case corpus[] = {
    /* ---- valid seeds ---- */
    {"ok_empty", HDR("{}"), NOPFX, TAIL(0), LYCO_OK, NULL, NULL},
    {"ok_one", HDR(T1 "   "), NOPFX, TAIL(8), LYCO_OK, NULL, NULL},
    {"ok_leading_ws", HDR(" \n\t\r" T1 " \t\n"), NOPFX, TAIL(8), LYCO_OK, NULL, NULL},
    {"ok_meta", HDR("{\"__metadata__\":{\"format\":\"pt\",\"k\":\"\\u00fc\\n\"},"
                    "\"b\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[4,6]},"
                    "\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}"),
     NOPFX, TAIL(6), LYCO_OK, NULL, NULL},
    {"ok_empty_tensors_share_offset",
     HDR("{\"e1\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
         "\"e2\":{\"dtype\":\"I64\",\"shape\":[4,0],\"data_offsets\":[0,0]},"
         "\"w\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
         "\"e3\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[3,3]}}"),
     NOPFX, TAIL(3), LYCO_OK, NULL, NULL},
    {"ok_subbyte", HDR("{\"q\":{\"dtype\":\"F4\",\"shape\":[2,3],\"data_offsets\":[0,3]},"
                       "\"r\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[3,6]}}"),
     NOPFX, TAIL(6), LYCO_OK, NULL, NULL},
    {"ok_all_empty_data", HDR("{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}"),
     NOPFX, TAIL(0), LYCO_OK, NULL, NULL},

    /* ---- rule 1: sizes, before any allocation ---- */
    {"r1_empty_file", K_RAW, NULL, 0, false, 0, 0, "", 0, NULL, LYCO_ERR_FORMAT,
     "shorter than the 8-byte", NULL},
    {"r1_short_file", RAW("\x02\x00\x00"), LYCO_ERR_FORMAT, "shorter than the 8-byte", NULL},
    {"r1_n_zero", RAW("\x00\x00\x00\x00\x00\x00\x00\x00"), LYCO_ERR_FORMAT,
     "below the minimum of 2", NULL},
    {"r1_n_one", HDR("{"), NOPFX, TAIL(0), LYCO_ERR_FORMAT, "below the minimum of 2", NULL},
    {"r1_n_over_cap", HDR("{}"), PFX(100000001u), TAIL(0), LYCO_ERR_FORMAT,
     "exceeds the 100000000-byte cap", NULL},
    {"r1_n_u64_max", HDR("{}"), PFX(UINT64_MAX), TAIL(0), LYCO_ERR_FORMAT,
     "exceeds the 100000000-byte cap", NULL},
    {"r1_n_past_eof", HDR("{}"), PFX(100), TAIL(0), LYCO_ERR_FORMAT,
     "bytes that follow the prefix", NULL},
    {"r1_n_past_eof_by_one", HDR("{}  "), PFX(5), TAIL(0), LYCO_ERR_FORMAT,
     "bytes that follow the prefix", NULL},

    /* ---- rule 2: UTF-8, start, trailing bytes ---- */
    {"r2_utf8_overlong2", HDR("{\"__metadata__\":{\"k\":\"\xc0\xaf\"}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "overlong encoding", NULL},
    {"r2_utf8_overlong3", HDR("{\"__metadata__\":{\"k\":\"\xe0\x80\xaf\"}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "overlong encoding", NULL},
    {"r2_utf8_overlong4", HDR("{\"__metadata__\":{\"k\":\"\xf0\x80\x80\xaf\"}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "overlong encoding", NULL},
    {"r2_utf8_surrogate", HDR("{\"__metadata__\":{\"k\":\"\xed\xa0\x80\"}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "UTF-16 surrogate", NULL},
    {"r2_utf8_above_max", HDR("{\"__metadata__\":{\"k\":\"\xf4\x90\x80\x80\"}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "above U+10FFFF", NULL},
    {"r2_utf8_lead_f5", HDR("{\"__metadata__\":{\"k\":\"\xf5\x80\x80\x80\"}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "lead byte above U+10FFFF", NULL},
    {"r2_utf8_lone_continuation", HDR("{\"__metadata__\":{\"k\":\"\x80\"}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "unexpected continuation byte", NULL},
    {"r2_utf8_bad_continuation", HDR("{\"__metadata__\":{\"k\":\"\xc3\x28\"}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "bad continuation byte", NULL},
    {"r2_utf8_truncated", HDR("{}  \xe2\x82"), NOPFX, TAIL(0), LYCO_ERR_FORMAT,
     "truncated sequence", NULL},
    {"r2_escaped_surrogate", HDR("{\"__metadata__\":{\"k\":\"\\ud800\"}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "escaped lone UTF-16 surrogate", NULL},
    {"r2_not_brace", HDR("[]"), NOPFX, TAIL(0), LYCO_ERR_FORMAT, "does not start with '{'", NULL},
    {"r2_bom", HDR("\xef\xbb\xbf{}"), NOPFX, TAIL(0), LYCO_ERR_FORMAT, "does not start with '{'",
     NULL},
    {"r2_all_whitespace", HDR("    "), NOPFX, TAIL(0), LYCO_ERR_FORMAT, "all whitespace", NULL},
    {"r2_trailing_garbage", HDR("{}  x"), NOPFX, TAIL(0), LYCO_ERR_FORMAT,
     "trailing bytes after the JSON object", NULL},
    {"r2_trailing_object", HDR("{}{}"), NOPFX, TAIL(0), LYCO_ERR_FORMAT,
     "trailing bytes after the JSON object", NULL},
    {"r2_trailing_nul_padding", HDR("{}\0\0\0\0\0\0"), NOPFX, TAIL(0), LYCO_ERR_FORMAT,
     "trailing bytes after the JSON object", NULL},

    /* ---- rule 3: JSON structure ---- */
    {"r3_bad_json", HDR("{\"a\":}"), NOPFX, TAIL(0), LYCO_ERR_FORMAT, "not valid JSON", NULL},
    {"r3_truncated_json", HDR("{\"w\":{\"dtype\""), NOPFX, TAIL(0), LYCO_ERR_FORMAT,
     "not valid JSON", NULL},
    {"r3_dup_tensor",
     HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}"),
     NOPFX, TAIL(8), LYCO_ERR_FORMAT, "duplicate key", NULL},
    {"r3_dup_field", HDR("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[1],"
                         "\"data_offsets\":[0,4]}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "duplicate key", NULL},
    {"r3_dup_metadata", HDR("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "duplicate key", NULL},
    {"r3_dup_metadata_block", HDR("{\"__metadata__\":{},\"__metadata__\":{}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "duplicate key", NULL},
    {"r3_nesting_shape", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[[1]],\"data_offsets\":[0,4]}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "nests containers", "w"},
    {"r3_nesting_metadata", HDR("{\"__metadata__\":{\"k\":{\"x\":[]}}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "nests containers", "__metadata__"},
    {"r3_nesting_parser_limit", K_GEN, NULL, 0, false, 0, 0, NULL, 0, gen_deep, LYCO_ERR_FORMAT,
     "nests containers too deep", NULL},
    {"r3_entry_not_object", HDR("{\"w\":[0,4]}"), NOPFX, TAIL(4), LYCO_ERR_FORMAT,
     "tensor entry is an array, not an object", "w"},
    {"r3_entry_string", HDR("{\"w\":\"F32\"}"), NOPFX, TAIL(0), LYCO_ERR_FORMAT,
     "tensor entry is a string, not an object", "w"},
    {"r3_missing_dtype", HDR("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}"), NOPFX, TAIL(4),
     LYCO_ERR_FORMAT, "missing field \"dtype\"", "w"},
    {"r3_missing_shape", HDR("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}"), NOPFX, TAIL(4),
     LYCO_ERR_FORMAT, "missing field \"shape\"", "w"},
    {"r3_missing_offsets", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}"), NOPFX, TAIL(4),
     LYCO_ERR_FORMAT, "missing field \"data_offsets\"", "w"},
    {"r3_extra_field", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
                           "\"extra\":1}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "unknown field \"extra\"", "w"},
    {"r3_metadata_not_object", HDR("{\"__metadata__\":\"pt\"}"), NOPFX, TAIL(0), LYCO_ERR_FORMAT,
     "__metadata__ is a string, not an object", NULL},
    {"r3_metadata_array", HDR("{\"__metadata__\":[\"a\",\"b\"]}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "__metadata__ is an array, not an object", NULL},
    {"r3_metadata_value_int", HDR("{\"__metadata__\":{\"alpha\":8}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "__metadata__ value is an integer, not a string", "alpha"},
    {"r3_metadata_value_null", HDR("{\"__metadata__\":{\"alpha\":null}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "__metadata__ value is null, not a string", "alpha"},

    /* ---- rule 4: dtype ---- */
    {"r4_unknown_dtype", HDR("{\"w\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}"),
     NOPFX, TAIL(16), LYCO_ERR_FORMAT, "unknown dtype \"F128\"", "w"},
    {"r4_lowercase_dtype", HDR("{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "unknown dtype \"f32\"", "w"},
    {"r4_dtype_with_nul", HDR("{\"w\":{\"dtype\":\"F32\\u0000\",\"shape\":[1],"
                              "\"data_offsets\":[0,4]}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "unknown dtype \"F32\\x00\"", "w"},
    {"r4_dtype_not_string", HDR("{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "dtype is an integer, not a string", "w"},

    /* ---- rule 5: shape and sizes ---- */
    {"r5_shape_not_array", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}"),
     NOPFX, TAIL(16), LYCO_ERR_FORMAT, "shape is an integer, not an array", "w"},
    {"r5_shape_string", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"4\"],\"data_offsets\":[0,16]}}"),
     NOPFX, TAIL(16), LYCO_ERR_FORMAT, "shape[0] is a string, not an integer", "w"},
    {"r5_shape_fraction", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[4.0],\"data_offsets\":[0,16]}}"),
     NOPFX, TAIL(16), LYCO_ERR_FORMAT, "shape[0] is a number with a fraction or exponent", "w"},
    {"r5_shape_exponent", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[4e0],\"data_offsets\":[0,16]}}"),
     NOPFX, TAIL(16), LYCO_ERR_FORMAT, "shape[0] is a number with a fraction or exponent", "w"},
    {"r5_shape_negative", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-2],\"data_offsets\":[0,16]}}"),
     NOPFX, TAIL(16), LYCO_ERR_FORMAT, "shape[1] = -2 is negative", "w"},
    {"r5_shape_above_cap", HDR("{\"w\":{\"dtype\":\"U8\",\"shape\":[281474976710656],"
                               "\"data_offsets\":[0,1]}}"),
     NOPFX, TAIL(1), LYCO_ERR_FORMAT, "exceeds 2^48-1", "w"},
    {"r5_shape_not_int64", HDR("{\"w\":{\"dtype\":\"U8\",\"shape\":[18446744073709551616],"
                               "\"data_offsets\":[0,1]}}"),
     NOPFX, TAIL(1), LYCO_ERR_FORMAT, "does not fit 64 bits", NULL},
    {"r5_count_overflow", HDR("{\"w\":{\"dtype\":\"U8\",\"shape\":[281474976710655,"
                              "281474976710655],\"data_offsets\":[0,1]}}"),
     NOPFX, TAIL(1), LYCO_ERR_FORMAT, "element count of the shape overflows", "w"},
    {"r5_count_overflow_after_zero", HDR("{\"w\":{\"dtype\":\"U8\",\"shape\":[0,281474976710655,"
                                         "281474976710655],\"data_offsets\":[0,0]}}"),
     NOPFX, TAIL(0), LYCO_ERR_FORMAT, "element count of the shape overflows", "w"},
    /* LiteRT #9255: 4 * 2^32 * 2^30 wraps to exactly 0 unchecked */
    {"r5_bytes_wrap_to_zero", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,1073741824],"
                                  "\"data_offsets\":[0,0]}}"),
     NOPFX, TAIL(0), LYCO_ERR_FORMAT, "byte size of the shape overflows", "w"},
    {"r5_subbyte_partial_f4", HDR("{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}"),
     NOPFX, TAIL(1), LYCO_ERR_FORMAT, "not a multiple of 8 bits", "w"},
    {"r5_subbyte_partial_f6", HDR("{\"w\":{\"dtype\":\"F6_E3M2\",\"shape\":[2],"
                                  "\"data_offsets\":[0,1]}}"),
     NOPFX, TAIL(1), LYCO_ERR_FORMAT, "not a multiple of 8 bits", "w"},

    /* ---- rule 6: data_offsets ---- */
    {"r6_offsets_one", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "data_offsets has 1 elements", "w"},
    {"r6_offsets_three", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,4]}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "data_offsets has 3 elements", "w"},
    {"r6_offsets_not_array", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":\"0,4\"}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "data_offsets is a string", "w"},
    {"r6_offsets_negative", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "data_offsets[0] = -4 is negative", "w"},
    {"r6_offsets_fraction", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.5]}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "data_offsets[1] is a number with a fraction", "w"},
    {"r6_offsets_above_cap", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                                 "\"data_offsets\":[281474976710656,281474976710660]}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "data_offsets[0] = 281474976710656 exceeds 2^48-1", "w"},
    {"r6_end_before_begin", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}"),
     NOPFX, TAIL(8), LYCO_ERR_FORMAT, "ends before it begins", "w"},
    {"r6_span_mismatch", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "span 4 bytes but shape x dtype F32 needs 8", "w"},
    /* fastllm #712: buffer sized from shape, filled from offsets */
    {"r6_span_larger_than_shape", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                                      "\"data_offsets\":[0,64]}}"),
     NOPFX, TAIL(64), LYCO_ERR_FORMAT, "span 64 bytes but shape x dtype F32 needs 4", "w"},

    /* ---- rule 7: cover of the byte buffer ---- */
    {"r7_first_not_zero", HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}"),
     NOPFX, TAIL(8), LYCO_ERR_FORMAT, "first tensor begins at data byte 4", "w"},
    {"r7_hole", HDR("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}"),
     NOPFX, TAIL(12), LYCO_ERR_FORMAT, "hole of 4 bytes", "b"},
    {"r7_overlap", HDR("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}"),
     NOPFX, TAIL(12), LYCO_ERR_FORMAT, "overlaps tensor \"a\"", "b"},
    /* attacks README Proposal 4: many tensors aliasing one region */
    {"r7_alias", HDR("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "overlaps tensor \"a\"", "b"},
    {"r7_empty_inside_other", HDR("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                  "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}"),
     NOPFX, TAIL(8), LYCO_ERR_FORMAT, "overlaps tensor \"a\"", "e"},
    {"r7_trailing_bytes", HDR(T1), NOPFX, TAIL(12), LYCO_ERR_FORMAT,
     "4 trailing bytes after the last tensor", NULL},
    {"r7_trailing_no_tensors", HDR("{}"), NOPFX, TAIL(3), LYCO_ERR_FORMAT,
     "3 trailing bytes after the last tensor", NULL},
    {"r7_truncated", HDR(T1), NOPFX, TAIL(5), LYCO_ERR_FORMAT, "file is truncated", NULL},
    {"r7_truncated_no_data", HDR(T1), NOPFX, TAIL(0), LYCO_ERR_FORMAT, "file is truncated", NULL},

    /* ---- rule 8: NUL in names and metadata ---- */
    {"r8_nul_in_name", HDR("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],"
                           "\"data_offsets\":[0,4]}}"),
     NOPFX, TAIL(4), LYCO_ERR_FORMAT, "contains a NUL", NULL},
    {"r8_nul_in_metadata_key", HDR("{\"__metadata__\":{\"k\\u0000\":\"v\"}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "contains a NUL", NULL},
    {"r8_nul_in_metadata_value", HDR("{\"__metadata__\":{\"k\":\"v\\u0000w\"}}"), NOPFX, TAIL(0),
     LYCO_ERR_FORMAT, "__metadata__ value contains a NUL", "k"},
};
#define N_CORPUS (sizeof corpus / sizeof corpus[0])

/* Writes one corpus case to path; false on an I/O failure. */
static bool corpus_write(const corpus_case *c, const char *path) {
    if (c->kind == K_RAW) return write_bytes(path, c->raw, c->raw_len);
    char *gen = NULL;
    const char *h = c->header;
    size_t hl = c->header_len;
    if (c->kind == K_GEN) {
        gen = c->gen(&hl);
        if (!gen) return false;
        h = gen;
    }
    uint64_t n = c->use_prefix ? c->n_prefix : (uint64_t)hl;
    size_t total = 8 + hl + (size_t)c->data_len;
    uint8_t *b = xmalloc(total);
    for (int k = 0; k < 8; k++) b[k] = (uint8_t)(n >> (8 * k));
    memcpy(b + 8, h, hl);
    for (uint64_t k = 0; k < c->data_len; k++) b[8 + hl + k] = (uint8_t)(k * 37u + 11u);
    bool ok = write_bytes(path, b, total);
    free(b);
    free(gen);
    return ok;
}

/* The manifest line of one case: "<id>.safetensors\t<STATUS>\t<needle|->\t<tensor|->\n". */
static void corpus_manifest_line(FILE *fp, const corpus_case *c) {
    fprintf(fp, "%s.safetensors\t%s\t%s\t%s\n", c->id, lyco_status_name(c->want),
            c->needle ? c->needle : "-", c->tensor ? c->tensor : "-");
}

/* The reusable generator: every case as <dir>/<id>.safetensors plus <dir>/MANIFEST.tsv (the
   expected status, message substring and tensor of each file, read by tests/fuzz/replay.c).
   Returns the number of files written (cases + manifest). */
static int corpus_write_all(const char *dir) {
    int n = 0;
    char p[1024];
    for (size_t i = 0; i < N_CORPUS; i++) {
        snprintf(p, sizeof p, "%s/%s.safetensors", dir, corpus[i].id);
        if (corpus_write(&corpus[i], p)) n++;
    }
    snprintf(p, sizeof p, "%s/MANIFEST.tsv", dir);
    FILE *fp = fopen(p, "w");
    if (!fp) return n;
    fprintf(fp, "# FORMATS.md section 1.4: one file per rejection rule (r<rule>_...) plus valid "
                "seeds (ok_...).\n# Generated by `test_safetensors --corpus DIR`; checked by "
                "`test_safetensors --check-corpus DIR` and `fuzz_replay --manifest`.\n"
                "# file\tstatus\tmessage substring\ttensor named in the message\n");
    for (size_t i = 0; i < N_CORPUS; i++) corpus_manifest_line(fp, &corpus[i]);
    if (fclose(fp) == 0) n++;
    return n;
}

/* The committed corpus (tests/data/safetensors-corpus) must equal what the table generates:
   same files, same bytes, same manifest, nothing else. */
static void test_corpus_on_disk(const char *committed) {
    char gen[600], a[1024], b[1024];
    path_in(gen, sizeof gen, g_dir, "corpus-gen");
    mkdir(gen, 0700);
    int written = corpus_write_all(gen);
    int same = 0, extra = 0;
    DIR *d = opendir(committed);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        path_in(a, sizeof a, gen, e->d_name);
        if (!file_exists(a)) {
            printf("  committed corpus has a file the table does not generate: %s\n", e->d_name);
            extra++;
        }
    }
    if (d) closedir(d);
    d = opendir(gen);
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        path_in(a, sizeof a, gen, e->d_name);
        path_in(b, sizeof b, committed, e->d_name);
        size_t na = 0, nb = 0;
        uint8_t *x = read_bytes(a, &na), *y = read_bytes(b, &nb);
        if (x && y && na == nb && memcmp(x, y, na) == 0) same++;
        else printf("  committed corpus differs from the table: %s\n", e->d_name);
        free(x);
        free(y);
    }
    if (d) closedir(d);
    check(written == (int)N_CORPUS + 1 && same == written && extra == 0,
          "corpus on disk (%s): %d of %d files equal the generated ones, %d extra (regenerate "
          "with `test_safetensors --corpus DIR`)", committed, same, written, extra);
}

static void test_corpus(void) {
    char dir[600], p[1024];
    path_in(dir, sizeof dir, g_dir, "corpus");
    mkdir(dir, 0700);
    int written = corpus_write_all(dir);
    check(written == (int)N_CORPUS + 1, "corpus: %d of %zu files written", written, N_CORPUS + 1);
    for (size_t i = 0; i < N_CORPUS; i++) {
        const corpus_case *c = &corpus[i];
        snprintf(p, sizeof p, "%s/%s.safetensors", dir, c->id);
        lyco_st_file *f = (lyco_st_file *)(uintptr_t)1;
        lyco_clear_error();
        lyco_status s = lyco_st_open(p, &f);
        const char *msg = lyco_last_error();
        if (c->want == LYCO_OK) {
            bool ok = s == LYCO_OK && f != NULL;
            if (ok) {
                /* invariant (safetensors#857): every view's length == shape x dtype bytes */
                for (int64_t k = 0; k < lyco_st_count(f); k++) {
                    const lyco_st_tensor *t = lyco_st_get(f, k);
                    uint64_t cnt = 1;
                    for (int32_t d = 0; d < t->ndim; d++) cnt *= (uint64_t)t->shape[d];
                    ok = ok && t->nbytes == cnt * (uint64_t)lyco_st_dtype_bits(t->dtype) / 8 &&
                         t->end - t->begin == t->nbytes && t->end <= lyco_st_data_size(f);
                }
            }
            check(ok, "corpus %s: opens (%s)", c->id, lyco_status_name(s));
            lyco_st_close(f);
            continue;
        }
        char tq[128] = "";
        if (c->tensor) snprintf(tq, sizeof tq, "\"%s\"", c->tensor);
        bool ok = s == c->want && f == NULL && strstr(msg, c->needle) != NULL &&
                  strstr(msg, p) != NULL && (!c->tensor || strstr(msg, tq) != NULL) &&
                  strstr(msg, "rule") != NULL;
        check(ok, "corpus %s: %s with \"%s\"%s%s (got %s: %s)", c->id, lyco_status_name(c->want),
              c->needle, c->tensor ? ", naming " : "", c->tensor ? tq : "", lyco_status_name(s),
              msg);
        if (s == LYCO_OK) lyco_st_close(f);
    }
}

/* ============================================================================================
 * files written by the reference implementation (tests/data/safetensors-reference, made by its
 * make.py with safetensors 0.8.0): our reader opens each, our writer reproduces it byte for byte
 * ========================================================================================== */

static void test_reference_files(const char *dir) {
    DIR *d = opendir(dir);
    int files = 0, same = 0;
    struct dirent *de;
    char p[1024], out[1024];
    path_in(out, sizeof out, g_dir, "rewrite.safetensors");
    while (d && (de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l < 12 || strcmp(de->d_name + l - 12, ".safetensors") != 0) continue;
        files++;
        path_in(p, sizeof p, dir, de->d_name);
        lyco_st_file *f = NULL;
        lyco_status s = lyco_st_open(p, &f);
        int64_t n = lyco_st_count(f), nm = lyco_st_metadata_count(f);
        lyco_st_entry *e = xcalloc((size_t)(n ? n : 1), sizeof *e);
        const char **kv = xcalloc((size_t)(2 * nm + 1), sizeof *kv);
        for (int64_t i = 0; i < n; i++) {
            const lyco_st_tensor *t = lyco_st_get(f, i);
            e[i] = (lyco_st_entry){t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes};
        }
        for (int64_t i = 0; i < nm; i++) {
            kv[2 * i] = lyco_st_metadata_key(f, i);
            kv[2 * i + 1] = lyco_st_metadata_value(f, i);
        }
        if (s == LYCO_OK) s = lyco_st_write(out, e, n, nm ? kv : NULL);
        size_t na = 0, nb = 0;
        uint8_t *a = s == LYCO_OK ? read_bytes(p, &na) : NULL;
        uint8_t *b = s == LYCO_OK ? read_bytes(out, &nb) : NULL;
        bool ok = a && b && na == nb && memcmp(a, b, na) == 0;
        check(ok, "reference file %s: opens, and lyco_st_write reproduces its %zu bytes (%s)",
              de->d_name, na, s == LYCO_OK ? "compared" : lyco_last_error());
        same += ok;
        free(a);
        free(b);
        free(e);
        free(kv);
        lyco_st_close(f);
        unlink(out);
    }
    if (d) closedir(d);
    check(files > 0 && same == files, "reference files: %d of %d reproduced byte for byte (%s)",
          same, files, dir);
}

/* ============================================================================================
 * reader odds and ends: I/O errors, NULL arguments
 * ========================================================================================== */

static void test_open_io(void) {
    char p[1024];
    lyco_st_file *f = NULL;
    path_in(p, sizeof p, g_dir, "does-not-exist.safetensors");
    lyco_status s = lyco_st_open(p, &f);
    check(s == LYCO_ERR_IO && f == NULL && strstr(lyco_last_error(), "cannot open for reading"),
          "open: missing file -> LYCO_ERR_IO (%s)", lyco_last_error());
    s = lyco_st_open(g_dir, &f);
    check(s == LYCO_ERR_IO && f == NULL && strstr(lyco_last_error(), "not a regular file"),
          "open: a directory -> LYCO_ERR_IO (%s)", lyco_last_error());
    check(lyco_st_open(NULL, &f) == LYCO_ERR_NULL, "open: NULL path -> LYCO_ERR_NULL");
    check(lyco_st_open(p, NULL) == LYCO_ERR_NULL, "open: NULL out -> LYCO_ERR_NULL");
    lyco_st_close(NULL);
    check(lyco_st_count(NULL) == 0 && lyco_st_get(NULL, 0) == NULL &&
          lyco_st_find(NULL, "x") == NULL && lyco_st_metadata(NULL, "x") == NULL,
          "accessors: NULL file is harmless");
    /* a file name needing escapes shows up escaped in the message */
    path_in(p, sizeof p, g_dir, "bad\tname\x01.safetensors");
    write_bytes(p, "\x01\x00", 2);
    s = lyco_st_open(p, &f);
    check(s == LYCO_ERR_FORMAT && strstr(lyco_last_error(), "bad\\x09name\\x01.safetensors"),
          "open: control bytes in the path are escaped in the message (%s)", lyco_last_error());
    unlink(p);
}

/* ============================================================================================
 * writer: round trips
 * ========================================================================================== */

typedef struct {
    const char *name;
    lyco_st_dtype dtype;
    int32_t ndim;
    int64_t shape[4];
} spec;

static uint64_t spec_bytes(const spec *s) {
    uint64_t c = 1;
    for (int32_t d = 0; d < s->ndim; d++) c *= (uint64_t)s->shape[d];
    return c * (uint64_t)lyco_st_dtype_bits(s->dtype) / 8;
}

/* The reference order as the test sees it (independent of the writer's comparator). */
static bool ref_order_ok(const lyco_st_file *f) {
    for (int64_t i = 1; i < lyco_st_count(f); i++) {
        const lyco_st_tensor *a = lyco_st_get(f, i - 1), *b = lyco_st_get(f, i);
        if (a->dtype < b->dtype) return false;
        if (a->dtype == b->dtype && strcmp(a->name, b->name) >= 0) return false;
    }
    return true;
}

static bool header_layout_ok(const char *path) {
    size_t n = 0;
    uint8_t *b = read_bytes(path, &n);
    if (!b || n < 10) { free(b); return false; }
    uint64_t N = 0;
    for (int k = 7; k >= 0; k--) N = (N << 8) | b[k];
    bool ok = N % 8 == 0 && N + 8 <= n && b[8] == '{';
    /* the JSON ends with the last '}' and only spaces follow */
    size_t e = (size_t)(8 + N);
    while (ok && e > 8 && b[e - 1] == ' ') e--;
    ok = ok && e > 8 && b[e - 1] == '}' && (8 + N) - e < 8;
    free(b);
    return ok;
}

static void test_roundtrip(void) {
    static const spec specs[] = {
        {"w.f32", LYCO_ST_F32, 2, {3, 4}},
        {"b.f16", LYCO_ST_F16, 1, {5}},
        {"c.bf16", LYCO_ST_BF16, 2, {2, 3}},
        {"d.f64", LYCO_ST_F64, 1, {2}},
        {"e.i64", LYCO_ST_I64, 1, {3}},
        {"f.u8", LYCO_ST_U8, 1, {7}},
        {"g.bool", LYCO_ST_BOOL, 1, {3}},
        {"h.f4", LYCO_ST_F4, 2, {2, 3}},
        {"i.f6", LYCO_ST_F6_E3M2, 1, {4}},
        {"j.empty", LYCO_ST_F32, 2, {0, 5}},
        {"k.scalar", LYCO_ST_F32, 0, {0}},
        {"weird \"name\"\\\n\t\x01 \xc3\xbc/..", LYCO_ST_F16, 1, {1}},
        {"", LYCO_ST_I32, 1, {1}},
        {"z.c64", LYCO_ST_C64, 1, {1}},
        {"y.f8", LYCO_ST_F8_E4M3, 3, {1, 2, 3}},
        {"x.i16", LYCO_ST_I16, 1, {3}},
    };
    enum { NS = sizeof specs / sizeof specs[0] };
    lyco_st_entry ent[NS];
    uint8_t *bufs[NS];
    for (int i = 0; i < NS; i++) {
        uint64_t nb = spec_bytes(&specs[i]);
        bufs[i] = xmalloc((size_t)nb);
        for (uint64_t k = 0; k < nb; k++) bufs[i][k] = (uint8_t)(i * 31 + (int)k * 7 + 1);
        ent[i] = (lyco_st_entry){specs[i].name, specs[i].dtype, specs[i].ndim, specs[i].shape,
                                 bufs[i], nb};
    }
    /* real values for the float views */
    float *w = (float *)(void *)bufs[0];
    for (int k = 0; k < 12; k++) { float v = 0.5f * (float)k - 2.0f; memcpy(&w[k], &v, 4); }
    for (int k = 0; k < 5; k++) {
        uint16_t h = lyco_f32_to_f16(1.0f + (float)k);
        memcpy(bufs[1] + 2 * k, &h, 2);
    }
    for (int k = 0; k < 6; k++) {
        uint16_t h = lyco_f32_to_bf16(-3.0f * (float)k);
        memcpy(bufs[2] + 2 * k, &h, 2);
    }
    const char *meta[] = {"format", "pt", "ss_network_alpha", "8", "quote\"key\\",
                          "line\nvalue \xc3\xbc\x1f", NULL};
    char p1[1024], p2[1024];
    path_in(p1, sizeof p1, g_dir, "rt1.safetensors");
    path_in(p2, sizeof p2, g_dir, "rt2.safetensors");
    lyco_status s = lyco_st_write(p1, ent, NS, meta);
    check(s == LYCO_OK, "write: %d tensors of 16 dtypes + 3 metadata pairs (%s)", NS,
          lyco_status_name(s));
    check(header_layout_ok(p1), "write: header starts with '{', space-padded, N %% 8 == 0");
    lyco_st_file *f = NULL;
    s = lyco_st_open(p1, &f);
    check(s == LYCO_OK && f, "read back: opens (%s)", lyco_status_name(s));
    if (!f) goto out;
    check(lyco_st_count(f) == NS, "read back: %" PRId64 " tensors", lyco_st_count(f));
    check(ref_order_ok(f), "read back: file order = dtype descending, then name (reference)");
    check((8 + lyco_st_header_size(f)) % 8 == 0, "read back: data section starts 8-byte aligned");
    bool all = true;
    for (int i = 0; i < NS; i++) {
        const lyco_st_tensor *t = lyco_st_find(f, specs[i].name);
        bool ok = t && t->dtype == specs[i].dtype && t->ndim == specs[i].ndim &&
                  strcmp(t->dtype_name, lyco_st_dtype_name(specs[i].dtype)) == 0 &&
                  t->nbytes == ent[i].nbytes && t->name_len == strlen(specs[i].name) &&
                  (t->nbytes == 0 || memcmp(t->data, bufs[i], (size_t)t->nbytes) == 0);
        for (int32_t d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == specs[i].shape[d];
        if (!ok) {
            char e[64];
            snprintf(e, sizeof e, "%.40s", specs[i].name);
            check(false, "read back: tensor \"%s\" equal", e);
        }
        all = all && ok;
    }
    check(all, "read back: every name, dtype, shape and byte equal");
    int64_t nm = lyco_st_metadata_count(f);
    check(nm == 3 && strcmp(lyco_st_metadata_key(f, 0), "format") == 0 &&
              strcmp(lyco_st_metadata_value(f, 2), meta[5]) == 0 &&
              strcmp(lyco_st_metadata(f, "quote\"key\\"), meta[5]) == 0 &&
              strcmp(lyco_st_metadata(f, "ss_network_alpha"), "8") == 0 &&
              lyco_st_metadata(f, "absent") == NULL && lyco_st_metadata_key(f, 3) == NULL &&
              lyco_st_metadata_key(f, -1) == NULL,
          "read back: metadata lookup and iteration in written order");
    check(lyco_st_find(f, "nope") == NULL && lyco_st_get(f, -1) == NULL &&
              lyco_st_get(f, NS) == NULL && lyco_st_find(f, "") != NULL,
          "read back: absent names and out-of-range indices give NULL");

    /* float views */
    DLTensor v;
    const lyco_st_tensor *t = lyco_st_find(f, "w.f32");
    s = lyco_st_tensor_view(t, &v);
    bool vok = s == LYCO_OK && v.ndim == 2 && v.shape[0] == 3 && v.shape[1] == 4 &&
               v.dtype.code == kDLFloat && v.dtype.bits == 32 && v.strides == NULL &&
               v.device.device_type == kDLCPU;
    for (int k = 0; vok && k < 12; k++)
        vok = lyco_load_f32((const char *)v.data + 4 * k, LYCO_F32) == 0.5f * (float)k - 2.0f;
    check(vok, "view: F32 tensor as a compact host DLTensor with the written values");
    s = lyco_st_tensor_view(lyco_st_find(f, "b.f16"), &v);
    vok = s == LYCO_OK && v.dtype.code == kDLFloat && v.dtype.bits == 16;
    for (int k = 0; vok && k < 5; k++)
        vok = lyco_load_f32((const char *)v.data + 2 * k, LYCO_F16) == 1.0f + (float)k;
    check(vok, "view: F16 tensor values");
    s = lyco_st_tensor_view(lyco_st_find(f, "c.bf16"), &v);
    vok = s == LYCO_OK && v.dtype.code == kDLBfloat && v.dtype.bits == 16;
    for (int k = 0; vok && k < 6; k++)
        vok = lyco_load_f32((const char *)v.data + 2 * k, LYCO_BF16) == -3.0f * (float)k;
    check(vok, "view: BF16 tensor values");
    s = lyco_st_tensor_view(lyco_st_find(f, "k.scalar"), &v);
    check(s == LYCO_OK && v.ndim == 0 && v.shape != NULL, "view: rank-0 tensor");
    s = lyco_st_tensor_view(lyco_st_find(f, "d.f64"), &v);
    check(s == LYCO_ERR_DTYPE && strstr(lyco_last_error(), "dtype F64 has no float view") &&
              strstr(lyco_last_error(), "\"d.f64\""),
          "view: F64 -> LYCO_ERR_DTYPE naming the tensor (%s)", lyco_last_error());
    s = lyco_st_tensor_view(lyco_st_find(f, "e.i64"), &v);
    check(s == LYCO_ERR_DTYPE, "view: I64 -> LYCO_ERR_DTYPE");
    check(lyco_st_tensor_view(NULL, &v) == LYCO_ERR_NULL, "view: NULL tensor -> LYCO_ERR_NULL");
    check(lyco_st_dtype_from_lyco(LYCO_F16) == LYCO_ST_F16 &&
              lyco_st_dtype_from_lyco(LYCO_BF16) == LYCO_ST_BF16 &&
              lyco_st_dtype_from_lyco(LYCO_F32) == LYCO_ST_F32 &&
              lyco_st_dtype_from_lyco(LYCO_DTYPE_INVALID) == LYCO_ST_DTYPE_COUNT &&
              lyco_st_dtype_parse("BF16", 4) == LYCO_ST_BF16 && lyco_st_dtype_parse("BF1", 3) == -1 &&
              lyco_st_dtype_bits(LYCO_ST_F6_E2M3) == 6 && lyco_st_dtype_name(LYCO_ST_DTYPE_COUNT) == NULL,
          "dtype helpers: lyco <-> safetensors mapping, parse, bits, names");

    /* parse -> write -> parse: byte-identical */
    {
        int64_t n = lyco_st_count(f);
        lyco_st_entry *re = xcalloc((size_t)n, sizeof *re);
        for (int64_t i = 0; i < n; i++) {
            const lyco_st_tensor *x = lyco_st_get(f, i);
            re[i] = (lyco_st_entry){x->name, x->dtype, x->ndim, x->shape, x->data, x->nbytes};
        }
        const char **mk = xcalloc((size_t)(2 * nm + 1), sizeof *mk);
        for (int64_t i = 0; i < nm; i++) {
            mk[2 * i] = lyco_st_metadata_key(f, i);
            mk[2 * i + 1] = lyco_st_metadata_value(f, i);
        }
        s = lyco_st_write(p2, re, n, mk);
        size_t n1 = 0, n2 = 0;
        uint8_t *b1 = read_bytes(p1, &n1), *b2 = read_bytes(p2, &n2);
        check(s == LYCO_OK && b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0,
              "round trip: parse -> write -> parse is byte-identical (%zu bytes)", n1);
        free(b1);
        free(b2);
        free(re);
        free(mk);
    }
    /* the writer's input order does not matter */
    {
        lyco_st_entry rev[NS];
        for (int i = 0; i < NS; i++) rev[i] = ent[NS - 1 - i];
        s = lyco_st_write(p2, rev, NS, meta);
        size_t n1 = 0, n2 = 0;
        uint8_t *b1 = read_bytes(p1, &n1), *b2 = read_bytes(p2, &n2);
        check(s == LYCO_OK && b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0,
              "write: output independent of the input order");
        free(b1);
        free(b2);
    }
    check(count_temps(g_dir) == 0, "write: no temp files left behind");
    lyco_st_close(f);
out:
    for (int i = 0; i < NS; i++) free(bufs[i]);
    unlink(p1);
    unlink(p2);
}

/* Byte vectors of the reference implementation's own tests (safetensors/src/tensor.rs). */
static void test_reference_vectors(void) {
    char p[1024];
    path_in(p, sizeof p, g_dir, "ref.safetensors");
    size_t n = 0;
    uint8_t *b;

    static const uint8_t empty[] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    lyco_status s = lyco_st_write(p, NULL, 0, NULL);
    b = read_bytes(p, &n);
    check(s == LYCO_OK && b && n == sizeof empty && memcmp(b, empty, n) == 0,
          "reference vector: empty file is {} + 6 spaces");
    free(b);

    static const char meta_hdr[] = "{\"__metadata__\":{\"framework\":\"pt\"}}     ";
    const char *meta[] = {"framework", "pt", NULL};
    s = lyco_st_write(p, NULL, 0, meta);
    b = read_bytes(p, &n);
    check(s == LYCO_OK && b && n == 8 + 40 && b[0] == 40 && memcmp(b + 8, meta_hdr, 40) == 0,
          "reference vector: metadata-only file (N = 40)");
    free(b);

    float vals[6] = {0, 1, 2, 3, 4, 5};
    int64_t sh4[4] = {1, 1, 2, 3};
    lyco_st_entry e = {"attn0", LYCO_ST_F32, 4, sh4, vals, 24};
    static const char h72[] =
        "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}       ";
    s = lyco_st_write(p, &e, 1, NULL);
    b = read_bytes(p, &n);
    check(s == LYCO_OK && b && n == 8 + 72 + 24 && b[0] == 72 && memcmp(b + 8, h72, 72) == 0 &&
              memcmp(b + 80, vals, 24) == 0,
          "reference vector: forced alignment (attn0, N = 72)");
    free(b);

    int64_t sh3[3] = {1, 2, 3};
    lyco_st_entry e2 = {"attn.0", LYCO_ST_F32, 3, sh3, vals, 24};
    static const char h64[] =
        "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
    s = lyco_st_write(p, &e2, 1, NULL);
    b = read_bytes(p, &n);
    check(s == LYCO_OK && b && n == 8 + 64 + 24 && b[0] == 64 && memcmp(b + 8, h64, 64) == 0,
          "reference vector: attn.0 (N = 64, no padding needed)");
    free(b);
    unlink(p);
}

/* ============================================================================================
 * writer: argument errors (no file may appear)
 * ========================================================================================== */

static void writer_rejects(const char *what, const char *path, const lyco_st_entry *e, int64_t n,
                           const char *const *meta, lyco_status want, const char *needle) {
    lyco_clear_error();
    lyco_status s = lyco_st_write(path, e, n, meta);
    bool ok = s == want && strstr(lyco_last_error(), needle) != NULL &&
              (path == NULL || !file_exists(path)) && count_temps(g_dir) == 0;
    check(ok, "writer rejects %s: %s \"%s\" (got %s: %s)", what, lyco_status_name(want), needle,
          lyco_status_name(s), lyco_last_error());
}

static void test_writer_errors(void) {
    char p[1024], bad[1024];
    path_in(p, sizeof p, g_dir, "never.safetensors");
    uint8_t data[64] = {0};
    int64_t sh[2] = {2, 2};
    int64_t neg[1] = {-1};
    int64_t big[1] = {(int64_t)LYCO_ST_MAX_INT + 1};
    int64_t three[1] = {3};
    lyco_st_entry dup[2] = {{"a", LYCO_ST_F32, 2, sh, data, 16}, {"a", LYCO_ST_F32, 2, sh, data, 16}};
    writer_rejects("duplicate names", p, dup, 2, NULL, LYCO_ERR_INVALID, "duplicate tensor name");
    lyco_st_entry dup2[3] = {{"a", LYCO_ST_F32, 2, sh, data, 16},
                             {"m", LYCO_ST_U8, 1, three, data, 3},
                             {"a", LYCO_ST_F16, 2, sh, data, 8}};
    writer_rejects("duplicate names of different dtypes", p, dup2, 3, NULL, LYCO_ERR_INVALID,
                   "duplicate tensor name");
    lyco_st_entry res = {"__metadata__", LYCO_ST_F32, 2, sh, data, 16};
    writer_rejects("the reserved name", p, &res, 1, NULL, LYCO_ERR_INVALID, "is reserved");
    lyco_st_entry u8 = {"bad\xff", LYCO_ST_F32, 2, sh, data, 16};
    writer_rejects("a non-UTF-8 name", p, &u8, 1, NULL, LYCO_ERR_INVALID, "not valid UTF-8");
    lyco_st_entry sur = {"bad\xed\xa0\x80", LYCO_ST_F32, 2, sh, data, 16};
    writer_rejects("a surrogate in a name", p, &sur, 1, NULL, LYCO_ERR_INVALID, "UTF-16 surrogate");
    lyco_st_entry mis = {"a", LYCO_ST_F32, 2, sh, data, 15};
    writer_rejects("an nbytes mismatch", p, &mis, 1, NULL, LYCO_ERR_INVALID,
                   "nbytes 15 differs from bytes(shape, F32) = 16");
    lyco_st_entry ng = {"a", LYCO_ST_F32, 1, neg, data, 0};
    writer_rejects("a negative dim", p, &ng, 1, NULL, LYCO_ERR_INVALID, "outside [0, 2^48-1]");
    lyco_st_entry bg = {"a", LYCO_ST_U8, 1, big, data, 0};
    writer_rejects("a dim above 2^48-1", p, &bg, 1, NULL, LYCO_ERR_INVALID, "outside [0, 2^48-1]");
    lyco_st_entry dt = {"a", (lyco_st_dtype)99, 2, sh, data, 16};
    writer_rejects("an unknown dtype", p, &dt, 1, NULL, LYCO_ERR_INVALID, "is not a lyco_st_dtype");
    lyco_st_entry f4 = {"a", LYCO_ST_F4, 1, three, data, 1};
    writer_rejects("a partial byte", p, &f4, 1, NULL, LYCO_ERR_INVALID, "not a multiple of 8 bits");
    lyco_st_entry nd = {"a", LYCO_ST_F32, 2, sh, NULL, 16};
    writer_rejects("NULL data", p, &nd, 1, NULL, LYCO_ERR_NULL, "data is NULL");
    lyco_st_entry nn = {NULL, LYCO_ST_F32, 2, sh, data, 16};
    writer_rejects("a NULL name", p, &nn, 1, NULL, LYCO_ERR_NULL, "entries[0].name is NULL");
    lyco_st_entry ns = {"a", LYCO_ST_F32, 2, NULL, data, 16};
    writer_rejects("a NULL shape", p, &ns, 1, NULL, LYCO_ERR_NULL, "shape is NULL");
    lyco_st_entry ok1 = {"a", LYCO_ST_F32, 2, sh, data, 16};
    const char *odd[] = {"k", NULL};
    writer_rejects("a key without value", p, &ok1, 1, odd, LYCO_ERR_INVALID, "has no value");
    const char *dupm[] = {"k", "1", "j", "2", "k", "3", NULL};
    writer_rejects("duplicate metadata keys", p, &ok1, 1, dupm, LYCO_ERR_INVALID,
                   "duplicate metadata key");
    const char *badm[] = {"k", "\xc0\x80", NULL};
    writer_rejects("a non-UTF-8 metadata value", p, &ok1, 1, badm, LYCO_ERR_INVALID,
                   "not valid UTF-8");
    writer_rejects("a NULL path", NULL, &ok1, 1, NULL, LYCO_ERR_NULL, "path is NULL");
    writer_rejects("NULL entries", p, NULL, 1, NULL, LYCO_ERR_NULL, "entries is NULL");
    writer_rejects("a negative count", p, &ok1, -1, NULL, LYCO_ERR_INVALID, "is negative");
    path_in(bad, sizeof bad, g_dir, "dir/");
    writer_rejects("a path ending in '/'", bad, &ok1, 1, NULL, LYCO_ERR_INVALID,
                   "does not name a file");
    path_in(bad, sizeof bad, g_dir, "no/such/dir/x.safetensors");
    writer_rejects("a missing directory", bad, &ok1, 1, NULL, LYCO_ERR_IO,
                   "cannot open the target directory");
    /* the target is an existing directory: rename fails, temp removed */
    path_in(bad, sizeof bad, g_dir, "adir");
    mkdir(bad, 0700);
    lyco_status s = lyco_st_write(bad, &ok1, 1, NULL);
    check(s == LYCO_ERR_IO && strstr(lyco_last_error(), "rename") && count_temps(g_dir) == 0,
          "writer: target is a directory -> LYCO_ERR_IO, temp removed (%s)", lyco_last_error());
    rmdir(bad);
}

/* ============================================================================================
 * writer: atomicity under injected faults (FORMATS.md §2.1, §2.6)
 * ========================================================================================== */

static void test_writer_faults(void) {
    char p[1024], fresh[1024];
    path_in(p, sizeof p, g_dir, "atomic.safetensors");
    path_in(fresh, sizeof fresh, g_dir, "fresh.safetensors");
    float a[4] = {1, 2, 3, 4}, b[8] = {9, 8, 7, 6, 5, 4, 3, 2};
    int64_t sa[1] = {4}, sb[1] = {8};
    lyco_st_entry ea[2] = {{"old", LYCO_ST_F32, 1, sa, a, 16}, {"old2", LYCO_ST_F32, 1, sa, a, 16}};
    lyco_st_entry eb[2] = {{"new", LYCO_ST_F32, 1, sb, b, 32}, {"new2", LYCO_ST_F32, 1, sa, b, 16}};
    lyco_status s = lyco_st_write(p, ea, 2, NULL);
    size_t n0 = 0;
    uint8_t *orig = read_bytes(p, &n0);
    check(s == LYCO_OK && orig, "faults: original target written");
    if (!orig) return;

    static const struct {
        lyco_st_fault_op op;
        int64_t nth;
        int err;
        const char *needle;
    } faults[] = {
        {LYCO_ST_FAULT_WRITE, 1, ENOSPC, "write failed"},
        {LYCO_ST_FAULT_WRITE, 2, EIO, "write failed"},
        {LYCO_ST_FAULT_WRITE, 3, ENOSPC, "write failed"},
        {LYCO_ST_FAULT_FSYNC, 1, EIO, "fsync of the temp file failed"},
        {LYCO_ST_FAULT_CLOSE, 1, EIO, "close of the temp file failed"},
        {LYCO_ST_FAULT_RENAME, 1, EXDEV, "rename of the temp file into place failed"},
    };
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
        lyco_st_fault_inject(faults[i].op, faults[i].nth, faults[i].err);
        s = lyco_st_write(p, eb, 2, NULL);
        lyco_st_fault_inject(faults[i].op, 0, 0);
        size_t n1 = 0;
        uint8_t *now = read_bytes(p, &n1);
        bool ok = s == LYCO_ERR_IO && strstr(lyco_last_error(), faults[i].needle) &&
                  now && n1 == n0 && memcmp(now, orig, n0) == 0 && count_temps(g_dir) == 0;
        check(ok, "faults: %s #%" PRId64 " (errno %d) -> LYCO_ERR_IO, target unchanged, no temp "
                  "(%s)", faults[i].needle, faults[i].nth, faults[i].err, lyco_last_error());
        free(now);
        lyco_st_fault_inject(faults[i].op, faults[i].nth, faults[i].err);
        s = lyco_st_write(fresh, eb, 2, NULL);
        lyco_st_fault_inject(faults[i].op, 0, 0);
        check(s == LYCO_ERR_IO && !file_exists(fresh) && count_temps(g_dir) == 0,
              "faults: %s with no previous target -> no file at the path", faults[i].needle);
    }
    /* a fault fires once: the next write goes through */
    lyco_st_fault_inject(LYCO_ST_FAULT_WRITE, 1, EIO);
    s = lyco_st_write(fresh, eb, 2, NULL);
    check(s == LYCO_ERR_IO, "faults: armed write fault fires");
    s = lyco_st_write(fresh, eb, 2, NULL);
    check(s == LYCO_OK && file_exists(fresh), "faults: the following write succeeds");
    unlink(fresh);

    /* the directory fsync fails after the rename: the new file is complete and in place */
    lyco_st_fault_inject(LYCO_ST_FAULT_DIRSYNC, 1, EIO);
    s = lyco_st_write(p, eb, 2, NULL);
    lyco_st_fault_inject(LYCO_ST_FAULT_DIRSYNC, 0, 0);
    lyco_st_file *f = NULL;
    bool okd = s == LYCO_ERR_IO && strstr(lyco_last_error(), "fsync of the directory failed") &&
               lyco_st_open(p, &f) == LYCO_OK && lyco_st_find(f, "new") != NULL &&
               count_temps(g_dir) == 0;
    check(okd, "faults: directory fsync failure -> LYCO_ERR_IO, new file complete and valid");
    lyco_st_close(f);
    free(orig);
    unlink(p);
}

/* ============================================================================================
 * the same validation over memory (lyco_st_open_memory, the fuzz target's entry point)
 * ========================================================================================== */

static void test_memory(void) {
    char dir[600], p[1024];
    path_in(dir, sizeof dir, g_dir, "corpus-mem");
    mkdir(dir, 0700);
    int same = 0;
    for (size_t i = 0; i < N_CORPUS; i++) {
        const corpus_case *c = &corpus[i];
        snprintf(p, sizeof p, "%s/%s.safetensors", dir, c->id);
        size_t n = 0;
        uint8_t *b = corpus_write(c, p) ? read_bytes(p, &n) : NULL;
        if (!b) continue;
        lyco_st_file *f = NULL;
        lyco_status s = lyco_st_open_memory(b, n, c->id, &f);
        bool ok = s == c->want;
        if (c->want != LYCO_OK) {
            ok = ok && f == NULL && strstr(lyco_last_error(), c->needle) &&
                 strstr(lyco_last_error(), c->id);
        }
        if (c->want == LYCO_OK) {
            lyco_st_file *g = NULL;
            ok = ok && lyco_st_open(p, &g) == LYCO_OK && lyco_st_count(f) == lyco_st_count(g);
            for (int64_t k = 0; ok && k < lyco_st_count(f); k++) {
                const lyco_st_tensor *a = lyco_st_get(f, k), *z = lyco_st_get(g, k);
                ok = strcmp(a->name, z->name) == 0 && a->nbytes == z->nbytes &&
                     (const uint8_t *)a->data >= b &&
                     (const uint8_t *)a->data + a->nbytes <= b + n &&
                     (a->nbytes == 0 || memcmp(a->data, z->data, (size_t)a->nbytes) == 0);
            }
            lyco_st_close(g);
        }
        if (ok) same++;
        else printf("  memory open differs on %s: %s\n", c->id, lyco_last_error());
        lyco_st_close(f);
        free(b);
    }
    check(same == (int)N_CORPUS, "memory: all %d of %zu corpus cases give the same verdict and "
          "message as files (views point into the caller's buffer)", same, N_CORPUS);
    lyco_st_file *f = (lyco_st_file *)(uintptr_t)1;
    check(lyco_st_open_memory(NULL, 0, NULL, &f) == LYCO_ERR_FORMAT && f == NULL &&
              strstr(lyco_last_error(), "<memory>"),
          "memory: empty buffer -> LYCO_ERR_FORMAT naming <memory> (%s)", lyco_last_error());
    check(lyco_st_open_memory(NULL, 8, NULL, &f) == LYCO_ERR_NULL, "memory: NULL buf, len 8 -> "
          "LYCO_ERR_NULL");
    check(lyco_st_open_memory("x", 1, NULL, NULL) == LYCO_ERR_NULL, "memory: NULL out -> "
          "LYCO_ERR_NULL");
}

/* ============================================================================================
 * views, aligned copies, pread reads (FORMATS.md §1.4 rules 9 and 10)
 * ========================================================================================== */

static void test_load_read(void) {
    char p[1024];
    path_in(p, sizeof p, g_dir, "misaligned.safetensors");
    /* N = 112 keeps the data section 8-aligned; the F32 tensor starts at data byte 3 */
    const char *h = "{\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                    "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[3,11]}}";
    char hdr[113];
    memset(hdr, ' ', 112);
    memcpy(hdr, h, strlen(h));
    uint8_t file[8 + 112 + 11];
    for (int k = 0; k < 8; k++) file[k] = (uint8_t)((uint64_t)112 >> (8 * k));
    memcpy(file + 8, hdr, 112);
    const float fv[2] = {1.5f, -2.25f};
    file[120] = 7; file[121] = 8; file[122] = 9;
    memcpy(file + 123, fv, 8);
    write_bytes(p, file, sizeof file);
    lyco_st_file *f = NULL;
    lyco_status s = lyco_st_open(p, &f);
    check(s == LYCO_OK, "load: misaligned fixture opens (%s)", lyco_status_name(s));
    if (s != LYCO_OK) return;
    const lyco_st_tensor *t = lyco_st_find(f, "f");
    DLTensor v;
    void *owned = NULL;
    s = lyco_st_tensor_view(t, &v);
    check(s == LYCO_ERR_UNSUPPORTED && strstr(lyco_last_error(), "not aligned") &&
              strstr(lyco_last_error(), "\"f\""),
          "view: misaligned F32 data -> LYCO_ERR_UNSUPPORTED naming the tensor (%s)",
          lyco_last_error());
    s = lyco_st_tensor_load(t, &v, &owned);
    check(s == LYCO_OK && owned != NULL && v.data == owned && (uintptr_t)v.data % 4 == 0 &&
              memcmp(v.data, fv, 8) == 0 && v.ndim == 1 && v.shape[0] == 2,
          "load: misaligned F32 data -> an aligned copy with the right values");
    free(owned);
    lyco_st_close(f);

    /* an aligned file (our writer's): the view is the mapping itself, no copy */
    float a[6] = {1, 2, 3, 4, 5, 6};
    int64_t sh[2] = {2, 3};
    lyco_st_entry e = {"w", LYCO_ST_F32, 2, sh, a, sizeof a};
    s = lyco_st_write(p, &e, 1, NULL);
    s = s == LYCO_OK ? lyco_st_open(p, &f) : s;
    if (s != LYCO_OK) { check(false, "load: aligned fixture (%s)", lyco_last_error()); return; }
    t = lyco_st_find(f, "w");
    owned = (void *)(uintptr_t)1;
    s = lyco_st_tensor_load(t, &v, &owned);
    check(s == LYCO_OK && owned == NULL && v.data == t->data, "load: aligned data -> a view, "
          "no copy");
    check(lyco_st_tensor_load(t, &v, NULL) == LYCO_ERR_NULL, "load: NULL owned -> LYCO_ERR_NULL");

    /* lyco_st_read: pread through the kept descriptor */
    float got[6] = {0};
    s = lyco_st_read(t, 4, got, 20);
    check(s == LYCO_OK && memcmp(got, a + 1, 20) == 0, "read: bytes [4, 24) of the tensor");
    s = lyco_st_read(t, 20, got, 8);
    check(s == LYCO_ERR_INVALID && strstr(lyco_last_error(), "outside the tensor's 24 bytes"),
          "read: past the end -> LYCO_ERR_INVALID (%s)", lyco_last_error());
    s = lyco_st_read(t, UINT64_MAX, got, 2);
    check(s == LYCO_ERR_INVALID, "read: offset overflow -> LYCO_ERR_INVALID");
    /* the file is truncated under the open file: pread reports it, no SIGBUS */
    check(truncate(p, 40) == 0, "read: truncate the file under the reader");
    s = lyco_st_read(t, 0, got, 24);
    check(s == LYCO_ERR_IO && strstr(lyco_last_error(), "changed underneath"),
          "read: truncated underneath -> LYCO_ERR_IO, not SIGBUS (%s)", lyco_last_error());
    lyco_st_close(f);
    unlink(p);

    /* memory files: read is a memcpy from the caller's buffer */
    uint8_t *b = NULL;
    size_t n = 0;
    s = lyco_st_write(p, &e, 1, NULL);
    b = s == LYCO_OK ? read_bytes(p, &n) : NULL;
    s = b ? lyco_st_open_memory(b, n, "mem", &f) : LYCO_ERR_IO;
    memset(got, 0, sizeof got);
    s = s == LYCO_OK ? lyco_st_read(lyco_st_find(f, "w"), 0, got, 24) : s;
    check(s == LYCO_OK && memcmp(got, a, 24) == 0, "read: memory file");
    lyco_st_close(f);
    free(b);
    unlink(p);
}

/* ============================================================================================
 * the streaming writer
 * ========================================================================================== */

static uint8_t *pattern(size_t n, unsigned salt) {
    uint8_t *b = xmalloc(n);
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 131u + salt * 17u + (i >> 8));
    return b;
}

static void test_stream(void) {
    char p[1024], q[1024];
    path_in(p, sizeof p, g_dir, "stream.safetensors");
    path_in(q, sizeof q, g_dir, "whole.safetensors");
    int64_t s0[2] = {64, 33}, s1[1] = {7}, s2[1] = {0}, s3[3] = {3, 5, 2};
    lyco_st_entry e[4] = {{"big", LYCO_ST_F32, 2, s0, NULL, 64 * 33 * 4},
                          {"small.u8", LYCO_ST_U8, 1, s1, NULL, 7},
                          {"empty", LYCO_ST_BF16, 1, s2, NULL, 0},
                          {"mid", LYCO_ST_F16, 3, s3, NULL, 60}};
    uint8_t *d[4];
    for (int i = 0; i < 4; i++) d[i] = pattern((size_t)e[i].nbytes + 1, (unsigned)i);
    const char *meta[] = {"format", "pt", "tool", "lyco", NULL};
    uint64_t hs = 0, fs = 0;
    lyco_status s = lyco_st_layout(e, 4, meta, &hs, &fs);
    check(s == LYCO_OK && hs % 8 == 0 && fs == 8 + hs + 64 * 33 * 4 + 7 + 60,
          "layout: header %" PRIu64 " bytes (multiple of 8), file %" PRIu64 " bytes", hs, fs);

    /* the reference: lyco_st_write with the data in place */
    lyco_st_entry full[4];
    for (int i = 0; i < 4; i++) { full[i] = e[i]; full[i].data = d[i]; }
    s = lyco_st_write(q, full, 4, meta);

    lyco_st_writer *w = NULL;
    s = lyco_st_writer_open(&w, p, e, 4, meta, 0);
    check(s == LYCO_OK && w && lyco_st_writer_file_size(w) == fs && !file_exists(p) &&
              count_temps(g_dir) == 1,
          "stream: open creates only a temp (%s)", lyco_last_error());
    if (s != LYCO_OK) return;
    const char *tp = lyco_st_writer_temp_path(w);
    struct stat sb;
    mode_t um = umask(0);
    umask(um);
    check(tp && stat(tp, &sb) == 0 && (sb.st_mode & 0777) == (0666 & ~um),
          "stream: temp mode honours the umask (%o)", tp ? (unsigned)(sb.st_mode & 0777) : 0u);
    check(lyco_st_writer_index(w, "mid") == 3 && lyco_st_writer_index(w, "nope") == -1,
          "stream: name -> caller index");
    /* any tensor order; the big one in uneven chunks */
    s = lyco_st_writer_put(w, 3, d[3], 60);
    s = s == LYCO_OK ? lyco_st_writer_put(w, 1, d[1], 7) : s;
    uint64_t off = 0, chunk = 1;
    while (s == LYCO_OK && off < e[0].nbytes) {
        uint64_t c = chunk < e[0].nbytes - off ? chunk : e[0].nbytes - off;
        s = lyco_st_writer_put_chunk(w, 0, d[0] + off, c);
        off += c;
        chunk = chunk * 3 + 1;
    }
    check(s == LYCO_OK && lyco_st_writer_done_bytes(w, 0) == (int64_t)e[0].nbytes,
          "stream: puts in any order, chunks (%s)", lyco_last_error());
    /* argument errors leave the writer usable */
    s = lyco_st_writer_put_chunk(w, 1, d[1], 1);
    check(s == LYCO_ERR_INVALID && strstr(lyco_last_error(), "would overrun the tensor") &&
              strstr(lyco_last_error(), "\"small.u8\""),
          "stream: overrun -> LYCO_ERR_INVALID naming the tensor (%s)", lyco_last_error());
    s = lyco_st_writer_put(w, 3, d[3], 60);
    check(s == LYCO_ERR_INVALID && strstr(lyco_last_error(), "takes the whole tensor"),
          "stream: put of an already written tensor -> LYCO_ERR_INVALID");
    check(lyco_st_writer_put(w, 4, d[0], 1) == LYCO_ERR_INVALID &&
              lyco_st_writer_put(w, -1, d[0], 1) == LYCO_ERR_INVALID,
          "stream: index out of range -> LYCO_ERR_INVALID");
    check(lyco_st_writer_put_chunk(w, 0, NULL, 0) == LYCO_OK &&
              lyco_st_writer_put_chunk(w, 1, NULL, 0) == LYCO_OK,
          "stream: zero-byte chunks are no-ops");
    s = lyco_st_writer_commit(w);
    size_t n1 = 0, n2 = 0;
    uint8_t *b1 = read_bytes(p, &n1), *b2 = read_bytes(q, &n2);
    check(s == LYCO_OK && b1 && b2 && n1 == n2 && n1 == fs && memcmp(b1, b2, n1) == 0 &&
              count_temps(g_dir) == 0,
          "stream: committed file is byte-identical to lyco_st_write's (%zu bytes; %s)", n1,
          lyco_last_error());
    free(b1);
    free(b2);

    /* incomplete at commit: nothing at the path, temp removed */
    unlink(p);
    s = lyco_st_writer_open(&w, p, e, 4, NULL, 0);
    if (s == LYCO_OK) s = lyco_st_writer_put(w, 0, d[0], e[0].nbytes);
    if (s == LYCO_OK) s = lyco_st_writer_put_chunk(w, 3, d[3], 10);
    s = s == LYCO_OK ? lyco_st_writer_commit(w) : s;
    check(s == LYCO_ERR_INVALID && strstr(lyco_last_error(), "incomplete at commit") &&
              !file_exists(p) && count_temps(g_dir) == 0,
          "stream: incomplete commit -> LYCO_ERR_INVALID, no file, no temp (%s)",
          lyco_last_error());
    /* abort */
    s = lyco_st_writer_open(&w, p, e, 4, NULL, 0);
    if (s == LYCO_OK) lyco_st_writer_put(w, 1, d[1], 7);
    lyco_st_writer_abort(w);
    lyco_st_writer_abort(NULL);
    check(s == LYCO_OK && !file_exists(p) && count_temps(g_dir) == 0,
          "stream: abort leaves nothing");
    /* open rejects what lyco_st_write rejects, before touching the disk; data may be NULL */
    lyco_st_entry dup[2] = {e[0], e[0]};
    s = lyco_st_writer_open(&w, p, dup, 2, NULL, 0);
    check(s == LYCO_ERR_INVALID && w == NULL && count_temps(g_dir) == 0,
          "stream: open validates the entries (duplicate name)");
    check(lyco_st_writer_open(&w, p, e, 4, NULL, 8) == LYCO_ERR_INVALID &&
              strstr(lyco_last_error(), "unknown bits"),
          "stream: unknown flag bits -> LYCO_ERR_INVALID");
    check(lyco_st_writer_open(NULL, p, e, 4, NULL, 0) == LYCO_ERR_NULL &&
              lyco_st_writer_put(NULL, 0, d[0], 1) == LYCO_ERR_NULL &&
              lyco_st_writer_commit(NULL) == LYCO_ERR_NULL,
          "stream: NULL writer / out -> LYCO_ERR_NULL");

    /* writer rule: header <= the 100,000,000-byte cap, checked before anything touches disk */
    char *huge = xmalloc(100000001);
    memset(huge, 'v', 100000000);
    huge[100000000] = '\0';
    const char *bigmeta[] = {"k", huge, NULL};
    uint64_t h2 = 0, f2 = 0;
    s = lyco_st_layout(e, 1, bigmeta, &h2, &f2);
    lyco_status sw = lyco_st_writer_open(&w, p, e, 1, bigmeta, 0);
    check(s == LYCO_ERR_FORMAT && strstr(lyco_last_error(), "over the 100000000-byte cap") &&
              sw == LYCO_ERR_FORMAT && w == NULL && !file_exists(p) && count_temps(g_dir) == 0,
          "stream: a header over the cap -> LYCO_ERR_FORMAT, nothing on disk (%s)",
          lyco_last_error());
    free(huge);

    /* LYCO_ST_NOREPLACE: refuses an existing target, leaves it and no temp */
    size_t nq = 0;
    uint8_t *orig = read_bytes(q, &nq);
    s = lyco_st_writer_open(&w, q, e + 1, 1, NULL, LYCO_ST_NOREPLACE);
    if (s == LYCO_OK) s = lyco_st_writer_put(w, 0, d[1], 7);
    if (s == LYCO_OK) s = lyco_st_writer_commit(w);
    size_t nq2 = 0;
    uint8_t *now = read_bytes(q, &nq2);
    check(s == LYCO_ERR_IO && strstr(lyco_last_error(), "replacing it was not allowed") &&
              orig && now && nq == nq2 && memcmp(orig, now, nq) == 0 && count_temps(g_dir) == 0,
          "stream: NOREPLACE on an existing target -> LYCO_ERR_IO, target unchanged, no temp "
          "(%s)", lyco_last_error());
    free(orig);
    free(now);
    s = lyco_st_writer_open(&w, p, e + 1, 1, NULL, LYCO_ST_NOREPLACE);
    if (s == LYCO_OK) s = lyco_st_writer_put(w, 0, d[1], 7);
    if (s == LYCO_OK) s = lyco_st_writer_commit(w);
    lyco_st_file *f = NULL;
    check(s == LYCO_OK && lyco_st_open(p, &f) == LYCO_OK && lyco_st_count(f) == 1 &&
              count_temps(g_dir) == 0,
          "stream: NOREPLACE on a fresh path works, no temp left");
    lyco_st_close(f);
    unlink(p);
    unlink(q);
    for (int i = 0; i < 4; i++) free(d[i]);
}

/* ENOSPC / EIO on the nth write and on fsync/close/rename/dirsync of the streaming writer:
   clean failure, the temp removed at once, no partial final file (FORMATS.md §2.6). */
static void test_stream_faults(void) {
    char p[1024];
    path_in(p, sizeof p, g_dir, "sfault.safetensors");
    int64_t sa[1] = {1000}, sb[1] = {300};
    lyco_st_entry e[2] = {{"a", LYCO_ST_F32, 1, sa, NULL, 4000},
                          {"b", LYCO_ST_U8, 1, sb, NULL, 300}};
    uint8_t *da = pattern(4000, 1), *db = pattern(300, 2);
    /* writes: 1 = header, 2..5 = four chunks of a, 6 = b */
    static const struct { lyco_st_fault_op op; int64_t nth; int err; } faults[] = {
        {LYCO_ST_FAULT_WRITE, 1, ENOSPC}, {LYCO_ST_FAULT_WRITE, 3, ENOSPC},
        {LYCO_ST_FAULT_WRITE, 6, EIO},    {LYCO_ST_FAULT_FSYNC, 1, EIO},
        {LYCO_ST_FAULT_FSYNC, 1, ENOSPC}, {LYCO_ST_FAULT_CLOSE, 1, EIO},
        {LYCO_ST_FAULT_RENAME, 1, EIO},
    };
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
        lyco_st_fault_inject(faults[i].op, faults[i].nth, faults[i].err);
        lyco_st_writer *w = NULL;
        lyco_status s = lyco_st_writer_open(&w, p, e, 2, NULL, 0);
        lyco_status first = s;
        int temps_after_fail = -1;
        for (int c = 0; s == LYCO_OK && c < 4; c++) {
            s = lyco_st_writer_put_chunk(w, 0, da + 1000 * c, 1000);
        }
        if (s == LYCO_OK) s = lyco_st_writer_put(w, 1, db, 300);
        if (s != LYCO_OK) {
            temps_after_fail = count_temps(g_dir);
            /* a failed writer accepts nothing more */
            lyco_status again = w ? lyco_st_writer_put(w, 1, db, 300) : LYCO_ERR_IO;
            s = w ? lyco_st_writer_commit(w) : s;
            s = again == LYCO_ERR_IO ? s : LYCO_OK;
        } else {
            s = lyco_st_writer_commit(w);
            temps_after_fail = 0;
        }
        lyco_st_fault_inject(faults[i].op, 0, 0);
        bool ok = s == LYCO_ERR_IO && temps_after_fail == 0 && !file_exists(p) &&
                  count_temps(g_dir) == 0 && (first == LYCO_OK || w == NULL);
        check(ok, "stream faults: op %d #%" PRId64 " errno %d -> LYCO_ERR_IO, temp removed at "
                  "once, no file (%s)", (int)faults[i].op, faults[i].nth, faults[i].err,
              lyco_last_error());
    }
    free(da);
    free(db);
}

/* ============================================================================================
 * randomized round trips and byte mutation
 * ========================================================================================== */

static void test_random(uint64_t seed) {
    lyco_rng r;
    lyco_rng_seed(&r, seed);
    char p[1024];
    path_in(p, sizeof p, g_dir, "rand.safetensors");
    static const char *const alphabet[] = {"a", "b", ".", "_", "0", "\xc3\xa9", "\"", "\\", "\n",
                                           "\x7f", " ", "\xf0\x9f\x98\x80"};
    int bad = 0, iters = 300;
    for (int it = 0; it < iters; it++) {
        int n = (int)(lyco_rng_next(&r) % 7);
        lyco_st_entry e[7];
        int64_t shapes[7][3];
        char names[7][48];
        uint8_t *bufs[7] = {0};
        for (int i = 0; i < n; i++) {
            lyco_st_dtype dt = (lyco_st_dtype)(lyco_rng_next(&r) % LYCO_ST_DTYPE_COUNT);
            int32_t nd = (int32_t)(lyco_rng_next(&r) % 4);
            int bits = lyco_st_dtype_bits(dt);
            for (int d = 0; d < nd; d++) shapes[i][d] = (int64_t)(lyco_rng_next(&r) % 5);
            if (bits % 8 != 0) { nd = 1; shapes[i][0] = 4 * (int64_t)(lyco_rng_next(&r) % 4); }
            size_t o = (size_t)snprintf(names[i], sizeof names[i], "%d", i);
            int len = (int)(lyco_rng_next(&r) % 6);
            for (int k = 0; k < len; k++) {
                const char *c = alphabet[lyco_rng_next(&r) % (sizeof alphabet / sizeof *alphabet)];
                if (o + strlen(c) + 1 < sizeof names[i]) {
                    memcpy(names[i] + o, c, strlen(c));
                    o += strlen(c);
                }
            }
            names[i][o] = '\0';
            uint64_t cnt = 1;
            for (int d = 0; d < nd; d++) cnt *= (uint64_t)shapes[i][d];
            uint64_t nb = cnt * (uint64_t)bits / 8;
            bufs[i] = xmalloc((size_t)nb);
            for (uint64_t k = 0; k < nb; k++) bufs[i][k] = (uint8_t)lyco_rng_next(&r);
            e[i] = (lyco_st_entry){names[i], dt, nd, shapes[i], bufs[i], nb};
        }
        bool ok = lyco_st_write(p, e, n, NULL) == LYCO_OK;
        lyco_st_file *f = NULL;
        ok = ok && lyco_st_open(p, &f) == LYCO_OK && lyco_st_count(f) == n && ref_order_ok(f);
        for (int i = 0; ok && i < n; i++) {
            const lyco_st_tensor *t = lyco_st_find(f, names[i]);
            ok = t && t->dtype == e[i].dtype && t->ndim == e[i].ndim && t->nbytes == e[i].nbytes &&
                 (t->nbytes == 0 || memcmp(t->data, bufs[i], (size_t)t->nbytes) == 0);
            for (int d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == shapes[i][d];
        }
        lyco_st_close(f);
        for (int i = 0; i < n; i++) free(bufs[i]);
        if (!ok && bad++ == 0)
            printf("  first random failure at iteration %d: %s\n", it, lyco_last_error());
    }
    check(bad == 0, "random round trips: %d of %d failed (seed %" PRIu64 ")", bad, iters, seed);
    unlink(p);
}

static void test_mutation(uint64_t seed) {
    lyco_rng r;
    lyco_rng_seed(&r, seed ^ 0x5bd1e995u);
    char p[1024], m[1024];
    path_in(p, sizeof p, g_dir, "mut-src.safetensors");
    path_in(m, sizeof m, g_dir, "mut.safetensors");
    float a[6] = {1, 2, 3, 4, 5, 6};
    int64_t s1[2] = {2, 3}, s2[1] = {3}, s3[1] = {0};
    lyco_st_entry e[3] = {{"lora_up.weight", LYCO_ST_F32, 2, s1, a, 24},
                          {"lora_down.weight", LYCO_ST_F16, 1, s2, a, 6},
                          {"alpha", LYCO_ST_BF16, 1, s3, NULL, 0}};
    const char *meta[] = {"ss_network_dim", "4", NULL};
    lyco_st_write(p, e, 3, meta);
    size_t n = 0;
    uint8_t *src = read_bytes(p, &n);
    if (!src) { check(false, "mutation: source file"); return; }
    int iters = 3000, bad = 0, accepted = 0;
    uint8_t *buf = xmalloc(n + 16);
    for (int it = 0; it < iters; it++) {
        memcpy(buf, src, n);
        size_t len = n;
        int kind = (int)(lyco_rng_next(&r) % 8);
        if (kind == 0) len = (size_t)(lyco_rng_next(&r) % n);                /* truncate */
        else if (kind == 1) {                                                 /* pad */
            len = n + 1 + lyco_rng_next(&r) % 15;
            for (size_t k = n; k < len; k++) buf[k] = ' ';
        }
        else {
            int flips = 1 + (int)(lyco_rng_next(&r) % 4);
            for (int k = 0; k < flips; k++) {
                size_t at = (size_t)(lyco_rng_next(&r) % n);
                static const uint8_t interesting[] = {'{', '}', '[', ']', '"', ',', ':', '0', '9',
                                                      '-', '.', 'e', ' ', 0, 0x80, 0xff};
                buf[at] = (lyco_rng_next(&r) & 1) ? (uint8_t)lyco_rng_next(&r)
                                                  : interesting[lyco_rng_next(&r) % sizeof interesting];
            }
        }
        write_bytes(m, buf, len);
        lyco_st_file *f = NULL;
        lyco_status s = lyco_st_open(m, &f);
        if (s == LYCO_OK) {
            accepted++;
            volatile uint8_t sink = 0;
            uint64_t covered = 0;
            for (int64_t k = 0; k < lyco_st_count(f); k++) {
                const lyco_st_tensor *t = lyco_st_get(f, k);
                for (uint64_t j = 0; j < t->nbytes; j++) sink ^= ((const uint8_t *)t->data)[j];
                covered += t->nbytes;
            }
            (void)sink;
            if (covered != lyco_st_data_size(f) || 8 + lyco_st_header_size(f) + covered != len) bad++;
            lyco_st_close(f);
        } else if (s != LYCO_ERR_FORMAT || f != NULL || lyco_last_error()[0] == '\0') {
            bad++;
        }
    }
    check(bad == 0, "mutation: %d mutated files: only OK (with a full cover) or LYCO_ERR_FORMAT "
                    "(%d accepted, %d bad)", iters, accepted, bad);
    free(buf);
    free(src);
    unlink(p);
    unlink(m);
}

/* ============================================================================================ */

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--corpus") == 0) {
        int n = corpus_write_all(argv[2]);
        printf("wrote %d of %zu corpus files to %s\n", n, N_CORPUS + 1, argv[2]);
        return n == (int)N_CORPUS + 1 ? 0 : 1;
    }
    const char *committed = NULL, *reference = NULL;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--check-corpus") == 0) committed = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--reference") == 0) reference = argv[++i];
        else {
            fprintf(stderr, "usage: test_safetensors [--corpus DIR | [--check-corpus DIR] "
                            "[--reference DIR]]\n");
            return 2;
        }
    }
    uint64_t seed = st_test_begin("test_safetensors");

    test_corpus();
    if (committed) test_corpus_on_disk(committed);
    if (reference) test_reference_files(reference);
    test_open_io();
    test_roundtrip();
    test_reference_vectors();
    test_writer_errors();
    test_writer_faults();
    test_memory();
    test_load_read();
    test_stream();
    test_stream_faults();
    test_random(seed);
    test_mutation(seed);

    return st_test_end();
}
