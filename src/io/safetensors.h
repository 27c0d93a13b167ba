/*
 * safetensors.h — strict safetensors reader and atomic writer (FORMATS.md §1, §2.1).
 *
 * Reader: lyco_st_open() opens a file read-only, validates the whole header against every
 * rejection rule of FORMATS.md §1.4 (each failure is LYCO_ERR_FORMAT with a message naming the
 * file, the tensor where there is one, and the rule), then maps the file read-only (mmap,
 * PROT_READ, MAP_PRIVATE) and exposes each tensor as a borrowed view into the mapping. The
 * header is read with pread into an owned buffer, so validation and parsing see the same bytes;
 * the tensor bytes are NOT copied: if another process truncates the file while it is mapped, a
 * later access to a tensor's bytes raises SIGBUS (FORMATS.md §1.4 rule 10; callers that must
 * survive that use lyco_st_read, which preads through the descriptor kept open until
 * lyco_st_close). Everything returned stays valid until lyco_st_close. Views without copies
 * where the data is aligned (lyco_st_tensor_view), a copy where it is not (lyco_st_tensor_load).
 *
 * Assumptions: POSIX (open/pread/mmap/fsync/rename); a little-endian host for the DLTensor views
 * (tensor bytes are little-endian on disk; on a big-endian host lyco_st_tensor_view refuses with
 * LYCO_ERR_UNSUPPORTED, raw bytes stay available). Tensor data may be unaligned (the data
 * section starts at 8 + N, which only writers that pad keep 8-byte aligned). JSON is parsed by
 * jansson (link -ljansson); no JSON parser is hand-written here.
 *
 * Writer: lyco_st_write() produces a conformant file ordered like the reference writer and
 * replaces `path` atomically and durably (temp file in the same directory, fsync, rename, fsync
 * of the directory); on failure no temp file and no partial file remain. The streaming writer
 * (lyco_st_writer_*) does the same with only the header in memory, tensor by tensor or in
 * chunks; lyco_st_write is built on it. Sharded checkpoints: shards.h.
 *
 * Errors: LYCO_ERR_NULL (a required pointer is NULL), LYCO_ERR_INVALID (writer: an entry or a
 * metadata pair that cannot be written: bad dtype, dims, duplicate or reserved name, invalid
 * UTF-8, byte-size mismatch), LYCO_ERR_FORMAT (malformed file; writer: header over the cap),
 * LYCO_ERR_IO (open/read/mmap/write/fsync/rename failures), LYCO_ERR_NOMEM, LYCO_ERR_DTYPE (a float
 * view of a non-float tensor). Detail text: lyco_last_error(). Nothing here prints or aborts.
 */
#ifndef LYCO_IO_SAFETENSORS_H
#define LYCO_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "lyco.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Hard limits (FORMATS.md §1.2, §1.4). */
#define LYCO_ST_MAX_HEADER 100000000u                 /* reference MAX_HEADER_SIZE */
#define LYCO_ST_MAX_INT ((uint64_t)281474976710655u)  /* 2^48-1, the schema's integer cap */

/* The safetensors dtypes, in the reference implementation's enum order (which is the order the
   reference writer sorts by, descending). Sub-byte dtypes (F4, F6_*) are read and written as
   raw bytes (their totals must be whole bytes); no dtype other than F16/BF16/F32 has a DLTensor
   float view. */
typedef enum {
    LYCO_ST_BOOL = 0,
    LYCO_ST_F4,
    LYCO_ST_F6_E2M3,
    LYCO_ST_F6_E3M2,
    LYCO_ST_U8,
    LYCO_ST_I8,
    LYCO_ST_F8_E5M2,
    LYCO_ST_F8_E4M3,
    LYCO_ST_F8_E8M0,
    LYCO_ST_F8_E4M3FNUZ,
    LYCO_ST_F8_E5M2FNUZ,
    LYCO_ST_I16,
    LYCO_ST_U16,
    LYCO_ST_F16,
    LYCO_ST_BF16,
    LYCO_ST_I32,
    LYCO_ST_U32,
    LYCO_ST_F32,
    LYCO_ST_C64,
    LYCO_ST_F64,
    LYCO_ST_I64,
    LYCO_ST_U64,
    LYCO_ST_DTYPE_COUNT
} lyco_st_dtype;

/* "F32", … ; NULL for an out-of-range value. */
const char *lyco_st_dtype_name(lyco_st_dtype d);
/* Bits per element (4, 6, 8, 16, 32, 64); 0 for an out-of-range value. */
int lyco_st_dtype_bits(lyco_st_dtype d);
/* Exact, case-sensitive match of `len` bytes against the dtype names; -1 (as an int) if none. */
int lyco_st_dtype_parse(const char *s, size_t len);
/* The safetensors dtype of a lyco dtype (F16, BF16, F32); LYCO_ST_DTYPE_COUNT for any other. */
lyco_st_dtype lyco_st_dtype_from_lyco(lyco_dtype d);

typedef struct lyco_st_file lyco_st_file;

/* One tensor of an open file: a borrowed view, valid until lyco_st_close. */
typedef struct {
    const char *name;           /* NUL-terminated (names containing NUL are rejected) */
    size_t name_len;            /* strlen(name) */
    lyco_st_dtype dtype;
    const char *dtype_name;     /* "F32", … */
    int32_t ndim;               /* 0 for a scalar */
    const int64_t *shape;       /* ndim entries, each in [0, 2^48-1]; never NULL */
    uint64_t nbytes;            /* = bytes(shape, dtype), checked; 0 for an empty tensor */
    uint64_t begin, end;        /* data_offsets, relative to the start of the data section */
    const void *data;           /* the bytes in the read-only mapping (may be unaligned; never
                                   NULL; not dereferenceable when nbytes == 0) */
    const lyco_st_file *file;   /* the owning file (for messages) */
} lyco_st_tensor;

/* Opens and fully validates `path`. On failure *out is NULL and the status says why. */
lyco_status lyco_st_open(const char *path, lyco_st_file **out);
/* The same validation over `len` bytes in memory (the fuzz target's entry point). `label` names
   the buffer in messages (NULL: "<memory>"). Nothing is copied: the tensors' data point into
   `buf`, which must stay valid and unchanged until lyco_st_close. lyco_st_identity gives 0, 0. */
lyco_status lyco_st_open_memory(const void *buf, size_t len, const char *label,
                                lyco_st_file **out);
/* Unmaps and frees; NULL is a no-op. Every pointer obtained from f dies with it. */
void lyco_st_close(lyco_st_file *f);

/* Tensors are numbered 0..count-1 in file order: ascending data offsets (empty tensors sharing
   an offset: dtype descending, then name, the writer's order). */
int64_t lyco_st_count(const lyco_st_file *f);
const lyco_st_tensor *lyco_st_get(const lyco_st_file *f, int64_t i);         /* NULL: out of range */
const lyco_st_tensor *lyco_st_find(const lyco_st_file *f, const char *name); /* NULL: absent */

/* A compact row-major host DLTensor over the tensor's bytes, for F16/BF16/F32 only (other dtypes:
   LYCO_ERR_DTYPE; read their raw bytes through t->data). The view's shape points into the file's
   storage and its data into the read-only mapping: never write through it. */
lyco_status lyco_st_tensor_view(const lyco_st_tensor *t, DLTensor *out);

/* Views without copies where the data is aligned, safe copies where it is not: fills *out like
   lyco_st_tensor_view and sets *owned = NULL when t->data is aligned to the element size (and
   the host is little-endian); otherwise copies (byte-swapping on a big-endian host) into a
   fresh buffer, points the view at it and returns it in *owned: free() it after use. F16, BF16
   and F32 only (others: LYCO_ERR_DTYPE). lyco_st_tensor_view itself refuses misaligned data
   (LYCO_ERR_UNSUPPORTED: dereferencing it as float/uint16 would be undefined behaviour). */
lyco_status lyco_st_tensor_load(const lyco_st_tensor *t, DLTensor *out, void **owned);

/* Copies bytes [off, off + n) of the tensor's data into dst with pread on the file descriptor
   kept open by lyco_st_open (not through the mapping: a file truncated underneath gives
   LYCO_ERR_IO instead of SIGBUS, FORMATS.md §1.4 rule 10), or memcpy for lyco_st_open_memory.
   off + n must not exceed t->nbytes (LYCO_ERR_INVALID). Suits chunked copies of huge tensors. */
lyco_status lyco_st_read(const lyco_st_tensor *t, uint64_t off, void *dst, uint64_t n);

/* __metadata__ (string -> string), in file order. */
const char *lyco_st_metadata(const lyco_st_file *f, const char *key);     /* NULL if absent */
int64_t lyco_st_metadata_count(const lyco_st_file *f);
const char *lyco_st_metadata_key(const lyco_st_file *f, int64_t i);       /* NULL if out of range */
const char *lyco_st_metadata_value(const lyco_st_file *f, int64_t i);     /* NULL if out of range */

/* File facts: the path as given, sizes, and identity (st_dev/st_ino, for "output resolves to
   an input" checks, FORMATS.md §2.2). */
const char *lyco_st_path(const lyco_st_file *f);
uint64_t lyco_st_file_size(const lyco_st_file *f);
uint64_t lyco_st_header_size(const lyco_st_file *f);      /* N */
uint64_t lyco_st_data_size(const lyco_st_file *f);        /* file size - 8 - N */
void lyco_st_identity(const lyco_st_file *f, uint64_t *dev, uint64_t *ino);

/* One tensor to write. `data` holds `nbytes` little-endian, row-major bytes; nbytes must equal
   bytes(shape, dtype) (a cross-check against mis-sized buffers). data may be NULL when nbytes
   is 0. */
typedef struct {
    const char *name;           /* valid UTF-8, not "__metadata__", unique among the entries */
    lyco_st_dtype dtype;
    int32_t ndim;
    const int64_t *shape;       /* ndim entries in [0, 2^48-1]; may be NULL when ndim == 0 */
    const void *data;
    uint64_t nbytes;
} lyco_st_entry;

/* Writes `n` entries and the metadata pairs meta_kv = {key0, value0, key1, value1, …, NULL}
   (NULL or {NULL}: no __metadata__; keys unique; keys and values valid UTF-8) to `path`.
   Layout: tensors sorted by dtype (reference enum order) descending, then by name (bytewise);
   contiguous from offset 0; header `{…}` compact JSON, space-padded so that 8 + N is a multiple
   of 8; "__metadata__" first. Replaces an existing `path` atomically (rename): on any failure
   the temp file is removed and `path` is untouched, except when only the final fsync of the
   directory fails: the complete new file is then already in place (LYCO_ERR_IO says so). */
lyco_status lyco_st_write(const char *path, const lyco_st_entry *entries, int64_t n,
                          const char *const *meta_kv);

/* The layout lyco_st_write / lyco_st_writer_open would produce for these entries (data
   ignored), without touching the disk: header length N (padded) and the total file size
   8 + N + data bytes. For planning shards and free-space checks (FORMATS.md §2.2). */
lyco_status lyco_st_layout(const lyco_st_entry *entries, int64_t n, const char *const *meta_kv,
                           uint64_t *header_size, uint64_t *file_size);

/* ---- streaming writer (bounded memory: only the header is held) ----
   lyco_st_writer_open validates the entries exactly like lyco_st_write (their `data` is
   ignored and may be NULL; `nbytes` must still equal bytes(shape, dtype)), fixes the header and
   every tensor's offset (the reference order, as lyco_st_write), creates the temp file
   ".<base>.lyco-tmp.<pid>.<k>" in the target's directory (O_CREAT|O_EXCL, mode 0666 & ~umask)
   and writes the header. Names, shapes and metadata are copied: the caller's arrays may die.
   Tensor bytes are then supplied per tensor, identified by its index in the caller's `entries`
   array (lyco_st_writer_index maps a name to it); tensors may come in ANY order (each goes to
   its fixed offset with pwrite), a tensor's chunks in order (put_chunk appends to that tensor).
   lyco_st_writer_commit checks that every tensor was supplied completely, then fsync, close,
   rename (or, with LYCO_ST_NOREPLACE, link + unlink: fails with LYCO_ERR_IO naming EEXIST if
   `path` exists), fsync of the directory; it frees the writer whatever it returns. On any
   failure of open/put/commit the writer is poisoned: every later put fails, commit fails and
   removes the temp. lyco_st_writer_abort removes the temp and frees (NULL: no-op). Writers are
   independent of each other; one writer is not safe for concurrent use. */
typedef struct lyco_st_writer lyco_st_writer;

enum { LYCO_ST_NOREPLACE = 1u };   /* flags for lyco_st_writer_open */

lyco_status lyco_st_writer_open(lyco_st_writer **out, const char *path,
                                const lyco_st_entry *entries, int64_t n,
                                const char *const *meta_kv, unsigned flags);
/* Whole tensor: nbytes must equal the entry's nbytes, and nothing of it may have been put. */
lyco_status lyco_st_writer_put(lyco_st_writer *w, int64_t index, const void *data,
                               uint64_t nbytes);
/* The next nbytes of tensor `index` (its bytes so far + nbytes must not exceed its size). */
lyco_status lyco_st_writer_put_chunk(lyco_st_writer *w, int64_t index, const void *data,
                                     uint64_t nbytes);
lyco_status lyco_st_writer_commit(lyco_st_writer *w);
void lyco_st_writer_abort(lyco_st_writer *w);
/* Index (into the entries given to open) of the tensor named `name`; -1 if none. */
int64_t lyco_st_writer_index(const lyco_st_writer *w, const char *name);
/* Bytes of tensor `index` supplied so far (-1: bad index); the final file size; the temp path. */
int64_t lyco_st_writer_done_bytes(const lyco_st_writer *w, int64_t index);
uint64_t lyco_st_writer_file_size(const lyco_st_writer *w);
const char *lyco_st_writer_temp_path(const lyco_st_writer *w);

/* ---- test hook (fault injection, FORMATS.md §2.6) ----
   Makes the nth (1-based) call of `op` made by the writers (lyco_st_write, lyco_st_writer_*,
   the sharded writer and the index write) on this thread fail with errno `err`; nth = 0
   disarms. The counter counts from the arming call; a fault fires once. */
typedef enum {
    LYCO_ST_FAULT_WRITE = 0,    /* each write(2)/pwrite(2) of a temp file */
    LYCO_ST_FAULT_FSYNC,        /* fsync of the temp file */
    LYCO_ST_FAULT_CLOSE,        /* close of the temp file */
    LYCO_ST_FAULT_RENAME,       /* the rename into place */
    LYCO_ST_FAULT_DIRSYNC,      /* fsync of the directory after the rename */
    LYCO_ST_FAULT_COUNT
} lyco_st_fault_op;
void lyco_st_fault_inject(lyco_st_fault_op op, int64_t nth, int err);

#ifdef __cplusplus
}
#endif
#endif /* LYCO_IO_SAFETENSORS_H */
