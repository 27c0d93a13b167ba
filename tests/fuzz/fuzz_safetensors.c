/*
 * fuzz_safetensors.c — libFuzzer target for the safetensors reader (src/io/safetensors.c).
 *
 * Feeds the input bytes to lyco_st_open_memory, which runs exactly the validation of
 * lyco_st_open (FORMATS.md §1.4), then checks what the reader promises and aborts on any
 * violation (libFuzzer reports an abort as a crash; ASan/UBSan report memory and UB errors):
 *   - a rejection is LYCO_ERR_FORMAT (or LYCO_ERR_NOMEM), leaves *out NULL and sets a message
 *     that names the input;
 *   - an accepted file's tensors cover the data section exactly (sorted, contiguous, from 0 to
 *     size - 8 - N), each view's length == shape x dtype bytes (safetensors#857), every byte of
 *     every view lies inside the input and is read, lookups by name find the same tensor, float
 *     tensors load (view or aligned copy) and lyco_st_read copies the same bytes, metadata
 *     accessors agree, and the writer accepts the parsed entries (lyco_st_layout: validation and
 *     header building, no disk).
 * Built two ways: with clang -fsanitize=fuzzer (LYCO_FUZZ=ON, tests/fuzz/CMakeLists.txt) and,
 * with any compiler, linked to replay.c, which replays a corpus (ctest `fuzz_replay`).
 * Assumptions: a little-endian host (the float views; big-endian hosts take the copy path).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_require(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_safetensors: invariant violated: %s (last error: %s)\n", what,
                lyco_last_error());
        abort();
    }
}

/* Every promise about one accepted tensor. */
static void fuzz_tensor(const lyco_st_file *f, const lyco_st_tensor *t, const uint8_t *data,
                        size_t size, uint64_t *expect_begin) {
    uint64_t count = 1;
    int empty = 0;
    int bits = lyco_st_dtype_bits(t->dtype);
    fuzz_require(bits > 0 && t->dtype_name && strcmp(t->dtype_name,
                 lyco_st_dtype_name(t->dtype)) == 0, "dtype is known and named");
    fuzz_require(t->ndim >= 0 && t->shape != NULL, "rank >= 0, shape not NULL");
    for (int32_t d = 0; d < t->ndim; d++) {
        fuzz_require(t->shape[d] >= 0 && (uint64_t)t->shape[d] <= LYCO_ST_MAX_INT, "dim range");
        uint64_t dim = (uint64_t)t->shape[d];
        if (dim == 0) { empty = 1; continue; }
        fuzz_require(count <= UINT64_MAX / dim, "element count fits 64 bits");
        count *= dim;
    }
    if (!empty) {
        fuzz_require(count <= UINT64_MAX / (uint64_t)bits, "count x bits fits 64 bits");
        fuzz_require(count * (uint64_t)bits % 8 == 0, "whole bytes");
        fuzz_require(t->nbytes == count * (uint64_t)bits / 8, "nbytes == shape x dtype");
    } else {
        fuzz_require(t->nbytes == 0, "empty tensor has no bytes");
    }
    fuzz_require(t->end - t->begin == t->nbytes && t->begin == *expect_begin,
                 "tensors contiguous in file order");
    *expect_begin = t->end;
    fuzz_require(t->name && strlen(t->name) == t->name_len, "name is a C string of name_len");
    fuzz_require(lyco_st_find(f, t->name) == t, "lookup by name finds the tensor");
    fuzz_require(t->file == f, "owner");
    const uint8_t *p = t->data;
    fuzz_require(p >= data + 8 + lyco_st_header_size(f) && (size_t)(p - data) <= size &&
                 t->nbytes <= size - (size_t)(p - data), "view inside the input");
    volatile uint8_t sink = 0;
    for (uint64_t i = 0; i < t->nbytes; i++) sink ^= p[i];
    (void)sink;
    uint8_t head[16];
    uint64_t n = t->nbytes < sizeof head ? t->nbytes : sizeof head;
    fuzz_require(lyco_st_read(t, 0, head, n) == LYCO_OK && (n == 0 || memcmp(head, p, n) == 0),
                 "lyco_st_read copies the view's bytes");
    fuzz_require(lyco_st_read(t, t->nbytes, head, 1) == LYCO_ERR_INVALID, "read past the end");
    if (t->dtype == LYCO_ST_F16 || t->dtype == LYCO_ST_BF16 || t->dtype == LYCO_ST_F32) {
        DLTensor v;
        void *owned = NULL;
        fuzz_require(lyco_st_tensor_load(t, &v, &owned) == LYCO_OK, "float tensors load");
        fuzz_require(v.ndim == t->ndim && (t->nbytes == 0 || memcmp(v.data, p, (size_t)t->nbytes)
                     == 0), "the load holds the tensor's bytes");
        free(owned);
    }
}

/* Whatever the reader accepts, the writer can write (its validation and header building run on
   the parsed entries, without touching the disk): same tensors, data bytes and no more. */
static void fuzz_writable(const lyco_st_file *f) {
    int64_t n = lyco_st_count(f), nm = lyco_st_metadata_count(f);
    lyco_st_entry *e = calloc((size_t)(n ? n : 1), sizeof *e);
    const char **kv = calloc((size_t)(2 * nm + 1), sizeof *kv);
    if (!e || !kv) {
        free(e);
        free(kv);
        return;
    }
    uint64_t data = 0;
    for (int64_t i = 0; i < n; i++) {
        const lyco_st_tensor *t = lyco_st_get(f, i);
        e[i] = (lyco_st_entry){t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes};
        data += t->nbytes;
    }
    for (int64_t i = 0; i < nm; i++) {
        kv[2 * i] = lyco_st_metadata_key(f, i);
        kv[2 * i + 1] = lyco_st_metadata_value(f, i);
    }
    uint64_t hs = 0, fs = 0;
    lyco_status s = lyco_st_layout(e, n, kv, &hs, &fs);
    /* (a re-serialized header may outgrow the cap only when the input's is near it) */
    bool near_cap = lyco_st_header_size(f) > LYCO_ST_MAX_HEADER / 2;
    fuzz_require(s == LYCO_OK || (s == LYCO_ERR_FORMAT && near_cap),
                 "an accepted file's entries are writable");
    if (s == LYCO_OK) {
        fuzz_require(hs % 8 == 0 && hs >= 2 && fs == 8 + hs + data, "writer layout adds up");
    }
    free(e);
    free(kv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lyco_st_file *f = (lyco_st_file *)(uintptr_t)1;
    lyco_clear_error();
    lyco_status s = lyco_st_open_memory(data, size, "fuzz-input", &f);
    if (s != LYCO_OK) {
        fuzz_require(f == NULL, "rejection leaves *out NULL");
        fuzz_require(s == LYCO_ERR_FORMAT || s == LYCO_ERR_NOMEM, "rejection is FORMAT/NOMEM");
        fuzz_require(strstr(lyco_last_error(), "fuzz-input") != NULL, "message names the input");
        return 0;
    }
    uint64_t N = lyco_st_header_size(f);
    fuzz_require(lyco_st_file_size(f) == size && N >= 2 && N <= LYCO_ST_MAX_HEADER &&
                 8 + N + lyco_st_data_size(f) == size, "sizes add up");
    fuzz_require(data[8] == '{' || data[8] == ' ' || data[8] == '\t' || data[8] == '\n' ||
                 data[8] == '\r', "header starts with '{' or whitespace");
    uint64_t at = 0;
    int64_t n = lyco_st_count(f);
    for (int64_t i = 0; i < n; i++) fuzz_tensor(f, lyco_st_get(f, i), data, size, &at);
    fuzz_require(at == lyco_st_data_size(f), "tensors cover the data section");
    fuzz_require(lyco_st_get(f, n) == NULL && lyco_st_get(f, -1) == NULL, "get range");
    int64_t nm = lyco_st_metadata_count(f);
    for (int64_t i = 0; i < nm; i++) {
        const char *k = lyco_st_metadata_key(f, i), *v = lyco_st_metadata_value(f, i);
        fuzz_require(k && v && lyco_st_metadata(f, k) == v, "metadata lookup");
    }
    fuzz_writable(f);
    lyco_st_close(f);
    return 0;
}
