/*
 * st_util.h — internal helpers shared by the safetensors reader/writer (safetensors.c) and the
 * sharded-checkpoint layer (shards.c). Not part of any public API.
 *
 *   - messages: escaping of untrusted strings for log lines, errno text, the standard failure
 *     prefix `safetensors "<path>": <what> "<name>": <message>`;
 *   - RFC 3629 UTF-8 validation (overlongs, surrogates, > U+10FFFF, truncation rejected);
 *   - full pread/pwrite loops (EINTR and short transfers handled; pwrite passes the fault hook);
 *   - the fault-injection counters behind lyco_st_fault_inject (FORMATS.md §2.6);
 *   - an atomic, durable file replacement (FORMATS.md §2.1): temp file created O_EXCL in the
 *     target's directory (mode 0666 & ~umask), filled with pwrite, then fsync, close, rename
 *     (or link + unlink for no-replace), fsync of the directory; failures remove the temp.
 * Assumptions: POSIX.1-2008.
 */
#ifndef LYCO_IO_ST_UTIL_H
#define LYCO_IO_ST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core.h"
#include "safetensors.h"

/* ---- messages ---- */
#define ST_PATH_BUDGET 200
#define ST_NAME_BUDGET 160
#define ST_NAME2_BUDGET 80

/* The text of errno e (thread-safe), in buf. */
const char *st_errstr(int e, char *buf, size_t n);
/* s[0..n) escaped into dst (capacity cap) for a log line: printable ASCII kept, `"` and `\`
   backslashed, other bytes \xNN; cut with "..." before `budget` output characters. */
void st_esc(char *dst, size_t cap, const char *s, size_t n, size_t budget);
/* lyco_fail with the prefix: safetensors "<path>": <what> "<name>": <message> (what/name may
   be NULL: safetensors "<path>": <message>). name is name_len bytes, escaped. */
lyco_status st_fail(lyco_status s, const char *path, const char *what, const char *name,
                    size_t name_len, const char *fmt, ...) LYCO_PRINTF(6, 7);

/* ---- UTF-8 ---- */
/* True if s[0..n) is valid UTF-8; else *bad_at is the offending sequence's offset and *why
   says what is wrong. */
bool st_utf8_valid(const uint8_t *s, size_t n, size_t *bad_at, const char **why);

/* ---- file I/O ---- */
/* pread exactly n bytes at off: 0, an errno, or -1 when the file ended early. */
int st_read_full(int fd, void *buf, size_t n, off_t off);
/* pwrite exactly n bytes at off (each pwrite call passes the LYCO_ST_FAULT_WRITE hook):
   0 or an errno. */
int st_pwrite_full(int fd, const void *buf, uint64_t n, uint64_t off);
/* True (errno set to the armed error) when an armed fault fires for this call of op. */
bool st_fault_hit(lyco_st_fault_op op);

/* ---- atomic file replacement ---- */
typedef struct {
    char *path;        /* the target, as given (for messages) */
    char *dir;         /* its directory ("." when the path has no '/') */
    const char *base;  /* its file name, inside path */
    char *tmp;         /* the temp file's name inside dir */
    char *tmp_path;    /* dir/tmp */
    int dfd, fd;       /* -1 when closed */
    bool tmp_exists;
} st_atomic;

/* Checks that `path` names a file, opens its directory and creates the temp file. On failure
   everything is released and nothing remains on disk. */
lyco_status st_atomic_create(st_atomic *a, const char *path);
/* fsync, close, rename over the target (LYCO_ST_NOREPLACE in flags: link, failing on an
   existing target, then unlink of the temp), fsync of the directory. Always releases a; on
   failure before the rename the temp is removed and the target untouched. */
lyco_status st_atomic_commit(st_atomic *a, unsigned flags);
/* Removes the temp (if any) and releases a. Safe on a zeroed or released st_atomic. */
void st_atomic_discard(st_atomic *a);

/* The temp-name prefix ".<base, at most 180 bytes>.lyco-tmp." of a target's base name, in buf
   (capacity n >= 200). */
void st_temp_prefix(char *buf, size_t n, const char *base);

#endif /* LYCO_IO_ST_UTIL_H */
