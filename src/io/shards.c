/*
 * shards.c — sharded safetensors checkpoints: index reader, one lookup across shards, sharded
 * streaming writer with the index written last (see shards.h; FORMATS.md §1, §2.1, §2.3).
 * STUB: the API is published; the implementation follows.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "shards.h"

#include "core.h"

#define SH_STUB(fn) lyco_fail(LYCO_ERR_UNSUPPORTED, "%s: not implemented yet", fn)

lyco_status lyco_st_model_open(const char *path, lyco_st_model **out) {
    (void)path;
    if (out) *out = NULL;
    return SH_STUB("lyco_st_model_open");
}
void lyco_st_model_close(lyco_st_model *m) { (void)m; }
bool lyco_st_model_is_sharded(const lyco_st_model *m) { (void)m; return false; }
const char *lyco_st_model_path(const lyco_st_model *m) { (void)m; return NULL; }
int64_t lyco_st_model_count(const lyco_st_model *m) { (void)m; return 0; }
const lyco_st_tensor *lyco_st_model_get(const lyco_st_model *m, int64_t i) {
    (void)m; (void)i;
    return NULL;
}
const lyco_st_tensor *lyco_st_model_find(const lyco_st_model *m, const char *name) {
    (void)m; (void)name;
    return NULL;
}
int64_t lyco_st_model_shard_count(const lyco_st_model *m) { (void)m; return 0; }
const lyco_st_file *lyco_st_model_shard(const lyco_st_model *m, int64_t k) {
    (void)m; (void)k;
    return NULL;
}
int64_t lyco_st_model_total_size(const lyco_st_model *m) { (void)m; return -1; }
uint64_t lyco_st_model_data_bytes(const lyco_st_model *m) { (void)m; return 0; }

lyco_status lyco_st_shard_writer_open(lyco_st_shard_writer **out, const char *dir,
                                      const char *prefix, const lyco_st_entry *entries,
                                      int64_t n, const char *const *meta_kv,
                                      uint64_t max_shard_bytes, unsigned flags) {
    (void)dir; (void)prefix; (void)entries; (void)n; (void)meta_kv; (void)max_shard_bytes;
    (void)flags;
    if (out) *out = NULL;
    return SH_STUB("lyco_st_shard_writer_open");
}
lyco_status lyco_st_shard_writer_put(lyco_st_shard_writer *w, int64_t index, const void *data,
                                     uint64_t nbytes) {
    (void)w; (void)index; (void)data; (void)nbytes;
    return SH_STUB("lyco_st_shard_writer_put");
}
lyco_status lyco_st_shard_writer_put_chunk(lyco_st_shard_writer *w, int64_t index,
                                           const void *data, uint64_t nbytes) {
    (void)w; (void)index; (void)data; (void)nbytes;
    return SH_STUB("lyco_st_shard_writer_put_chunk");
}
lyco_status lyco_st_shard_writer_skip(lyco_st_shard_writer *w, int64_t k) {
    (void)w; (void)k;
    return SH_STUB("lyco_st_shard_writer_skip");
}
lyco_status lyco_st_shard_writer_commit(lyco_st_shard_writer *w) {
    (void)w;
    return SH_STUB("lyco_st_shard_writer_commit");
}
void lyco_st_shard_writer_abort(lyco_st_shard_writer *w) { (void)w; }
int64_t lyco_st_shard_writer_index(const lyco_st_shard_writer *w, const char *name) {
    (void)w; (void)name;
    return -1;
}
int64_t lyco_st_shard_writer_shard_count(const lyco_st_shard_writer *w) { (void)w; return 0; }
int64_t lyco_st_shard_writer_shard_of(const lyco_st_shard_writer *w, int64_t index) {
    (void)w; (void)index;
    return -1;
}
const char *lyco_st_shard_writer_shard_name(const lyco_st_shard_writer *w, int64_t k) {
    (void)w; (void)k;
    return NULL;
}
bool lyco_st_shard_writer_shard_done(const lyco_st_shard_writer *w, int64_t k) {
    (void)w; (void)k;
    return false;
}
const char *lyco_st_shard_writer_index_name(const lyco_st_shard_writer *w) {
    (void)w;
    return NULL;
}
lyco_status lyco_st_write_text_atomic(const char *path, const char *text, size_t len,
                                      unsigned flags) {
    (void)path; (void)text; (void)len; (void)flags;
    return SH_STUB("lyco_st_write_text_atomic");
}
lyco_status lyco_st_remove_stale_temps(const char *dir, const char *base, int64_t *removed) {
    (void)dir; (void)base;
    if (removed) *removed = 0;
    return SH_STUB("lyco_st_remove_stale_temps");
}
