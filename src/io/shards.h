/*
 * shards.h — sharded safetensors checkpoints (HF layout: `<prefix>-00001-of-0000N.safetensors`
 * files plus `<prefix>.safetensors.index.json` = {"metadata": {"total_size": T, ...},
 * "weight_map": {tensor name: shard file name}}), read and written (FORMATS.md §1, §2.1, §2.3).
 *
 * Reader: lyco_st_model_open() takes either a `*.index.json` path (sharded; decided by the name,
 * never by sniffing the content, FORMATS.md §1.3) or any other path (one safetensors file, seen
 * as a model of one shard), and exposes one lookup across all shards. The index is read with the
 * same discipline as a safetensors header: size checked against fstat and capped at 100,000,000
 * bytes before any allocation, UTF-8 checked, parsed by jansson with duplicate keys rejected at
 * any level, only the keys "metadata" (an object; "total_size", when present, a non-negative
 * integer; other members are ignored) and "weight_map" (an object of strings) allowed. Every
 * shard name must be a plain file name in the index's directory (no '/', no '\\', not "", ".",
 * "..", no NUL, at most 255 bytes): paths that climb out ("../x") or are absolute are rejected.
 * Each distinct shard is opened once with lyco_st_open (fully validated); then every weight_map
 * entry must exist in the shard it names, every tensor of every shard must be listed in the
 * weight_map (an unlisted tensor would be silently ignored or ambiguous), and no tensor name may
 * appear in two shards (LYCO_ERR_FORMAT naming the index, the tensor and both shards).
 *
 * Writer: lyco_st_shard_writer_open() plans the split up front (tensors taken in the caller's
 * entry order; a new shard starts when adding a tensor would push the shard's data bytes over
 * max_shard_bytes; a tensor larger than the cap gets a shard of its own), fixing the shard
 * count and so every file name. Tensor bytes are streamed per tensor exactly like the single-file
 * streaming writer (safetensors.h): each shard is a lyco_st_writer, opened at its first put,
 * committed (temp + fsync + rename + directory fsync) as soon as its last byte arrives. The index
 * is written last, atomically (temp + fsync + rename + directory fsync), as the commit marker
 * (FORMATS.md §2.1): a directory without the index is visibly incomplete. On abort or any
 * failure, temps are removed; shards already committed stay (each is a complete, valid file;
 * a resuming caller verifies them by hash and declares them with lyco_st_shard_writer_skip).
 *
 * Errors as in safetensors.h: LYCO_ERR_NULL, LYCO_ERR_INVALID (bad arguments), LYCO_ERR_FORMAT
 * (malformed index or shards), LYCO_ERR_IO, LYCO_ERR_NOMEM; detail text in lyco_last_error().
 * Assumptions: POSIX; jansson >= 2.14.
 */
#ifndef LYCO_IO_SHARDS_H
#define LYCO_IO_SHARDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- reader ---- */
typedef struct lyco_st_model lyco_st_model;

lyco_status lyco_st_model_open(const char *path, lyco_st_model **out);
void lyco_st_model_close(lyco_st_model *m);   /* closes every shard; NULL is a no-op */

bool lyco_st_model_is_sharded(const lyco_st_model *m);
const char *lyco_st_model_path(const lyco_st_model *m);      /* as given to open */
/* All tensors of all shards: shards in the order of lyco_st_model_shard (shard file names
   sorted bytewise), each shard's tensors in file order. t->file is the owning shard. */
int64_t lyco_st_model_count(const lyco_st_model *m);
const lyco_st_tensor *lyco_st_model_get(const lyco_st_model *m, int64_t i);   /* NULL: range */
const lyco_st_tensor *lyco_st_model_find(const lyco_st_model *m, const char *name);
int64_t lyco_st_model_shard_count(const lyco_st_model *m);
const lyco_st_file *lyco_st_model_shard(const lyco_st_model *m, int64_t k);  /* NULL: range */
/* metadata.total_size of the index (-1 when absent or not sharded); not checked against the
   shards (tools disagree on what it counts). */
int64_t lyco_st_model_total_size(const lyco_st_model *m);
/* Sum of every tensor's nbytes. */
uint64_t lyco_st_model_data_bytes(const lyco_st_model *m);

/* ---- writer ---- */
typedef struct lyco_st_shard_writer lyco_st_shard_writer;

/* `dir`: an existing directory; `prefix`: a plain file name stem ("model"); entries and meta_kv
   as for lyco_st_writer_open (data ignored; meta_kv goes into every shard's __metadata__);
   max_shard_bytes > 0; flags: LYCO_ST_NOREPLACE applies to every shard and the index.
   Nothing is created on disk by open itself. */
lyco_status lyco_st_shard_writer_open(lyco_st_shard_writer **out, const char *dir,
                                      const char *prefix, const lyco_st_entry *entries,
                                      int64_t n, const char *const *meta_kv,
                                      uint64_t max_shard_bytes, unsigned flags);
/* As lyco_st_writer_put / _put_chunk; `index` is the position in the entries given to open.
   A put of 0 bytes is a no-op (an empty tensor needs no put; its shard may already be done). */
lyco_status lyco_st_shard_writer_put(lyco_st_shard_writer *w, int64_t index, const void *data,
                                     uint64_t nbytes);
lyco_status lyco_st_shard_writer_put_chunk(lyco_st_shard_writer *w, int64_t index,
                                           const void *data, uint64_t nbytes);
/* Resume: shard k already exists complete (the caller verified it); its tensors must not be
   put. Fails if a put already touched shard k. */
lyco_status lyco_st_shard_writer_skip(lyco_st_shard_writer *w, int64_t k);
/* Commits the shards still open (all must be complete), then writes the index; frees w. */
lyco_status lyco_st_shard_writer_commit(lyco_st_shard_writer *w);
/* Removes open temps, keeps committed shards, writes no index; frees w (NULL: no-op). */
void lyco_st_shard_writer_abort(lyco_st_shard_writer *w);

int64_t lyco_st_shard_writer_index(const lyco_st_shard_writer *w, const char *name); /* -1 */
int64_t lyco_st_shard_writer_shard_count(const lyco_st_shard_writer *w);
int64_t lyco_st_shard_writer_shard_of(const lyco_st_shard_writer *w, int64_t index); /* -1 */
/* "<prefix>-0000k-of-0000N.safetensors" (file name only; k is 0-based here). NULL: range. */
const char *lyco_st_shard_writer_shard_name(const lyco_st_shard_writer *w, int64_t k);
bool lyco_st_shard_writer_shard_done(const lyco_st_shard_writer *w, int64_t k);
const char *lyco_st_shard_writer_index_name(const lyco_st_shard_writer *w);

/* Writes `json_text` (len bytes) to `path` atomically and durably (temp in the same directory,
   fsync, rename or link for LYCO_ST_NOREPLACE, directory fsync; same fault hooks), e.g. an
   index or a resume manifest (FORMATS.md §2.3). The text is written as given. */
lyco_status lyco_st_write_text_atomic(const char *path, const char *text, size_t len,
                                      unsigned flags);

/* Removes stale temps ".<base>.lyco-tmp.<pid>.<k>" left in `dir` by a killed run (those whose
   pid is not a live process other than this one); *removed (may be NULL) counts them. */
lyco_status lyco_st_remove_stale_temps(const char *dir, const char *base, int64_t *removed);

#ifdef __cplusplus
}
#endif
#endif /* LYCO_IO_SHARDS_H */
