/*
 * st_util.c — internal helpers of the safetensors layer: message escaping and the failure
 * prefix, UTF-8 validation, full pread/pwrite loops, the fault-injection counters and the atomic,
 * durable file replacement (see st_util.h; FORMATS.md §1.4 rules 2 and 8, §2.1, §2.6).
 * Assumptions: POSIX.1-2008 (openat, renameat, linkat, unlinkat, pread, pwrite, fsync).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "st_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ============================================================================================
 * messages
 * ========================================================================================== */

/* strerror_r exists in an XSI (int) and a GNU (char *) flavour; take whichever this libc has. */
static const char *errstr_int(int r, char *buf) { return r == 0 ? buf : "unknown error"; }
static const char *errstr_ptr(char *r, char *buf) { (void)buf; return r; }

const char *st_errstr(int e, char *buf, size_t n) {
    if (n == 0) return "unknown error";
    buf[0] = '\0';
    return _Generic(strerror_r(e, buf, n), int: errstr_int, default: errstr_ptr)(
        strerror_r(e, buf, n), buf);
}

void st_esc(char *dst, size_t cap, const char *s, size_t n, size_t budget) {
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

lyco_status st_fail(lyco_status s, const char *path, const char *what, const char *name,
                    size_t name_len, const char *fmt, ...) {
    char pe[ST_PATH_BUDGET + 8], ne[ST_NAME_BUDGET + 8], msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    st_esc(pe, sizeof pe, path ? path : "(null)", path ? strlen(path) : 6, ST_PATH_BUDGET);
    if (what && name) {
        st_esc(ne, sizeof ne, name, name_len, ST_NAME_BUDGET);
        return lyco_fail(s, "safetensors \"%s\": %s \"%s\": %s", pe, what, ne, msg);
    }
    return lyco_fail(s, "safetensors \"%s\": %s", pe, msg);
}

/* ============================================================================================
 * UTF-8 (RFC 3629)
 * ========================================================================================== */

bool st_utf8_valid(const uint8_t *s, size_t n, size_t *bad_at, const char **why) {
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

/* ============================================================================================
 * full transfers and fault injection
 * ========================================================================================== */

#define ST_CHUNK ((size_t)1 << 30)

int st_read_full(int fd, void *buf, size_t n, off_t off) {
    uint8_t *p = buf;
    while (n > 0) {
        size_t chunk = n > ST_CHUNK ? ST_CHUNK : n;
        ssize_t r = pread(fd, p, chunk, off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (r == 0) return -1;
        p += r;
        n -= (size_t)r;
        off += (off_t)r;
    }
    return 0;
}

static _Thread_local struct {
    int64_t left[LYCO_ST_FAULT_COUNT];
    int err[LYCO_ST_FAULT_COUNT];
} tl_fault;

void lyco_st_fault_inject(lyco_st_fault_op op, int64_t nth, int err) {
    if ((int)op < 0 || op >= LYCO_ST_FAULT_COUNT) return;
    tl_fault.left[op] = nth > 0 ? nth : 0;
    tl_fault.err[op] = err;
}

bool st_fault_hit(lyco_st_fault_op op) {
    if (tl_fault.left[op] > 0 && --tl_fault.left[op] == 0) {
        errno = tl_fault.err[op];
        return true;
    }
    return false;
}

int st_pwrite_full(int fd, const void *buf, uint64_t n, uint64_t off) {
    const uint8_t *p = buf;
    if (off > (uint64_t)INT64_MAX || n > (uint64_t)INT64_MAX - off) return EFBIG;
    while (n > 0) {
        size_t chunk = n > ST_CHUNK ? ST_CHUNK : (size_t)n;
        if (st_fault_hit(LYCO_ST_FAULT_WRITE)) return errno;
        ssize_t w = pwrite(fd, p, chunk, (off_t)off);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (w == 0) return EIO;
        p += w;
        n -= (uint64_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

/* ============================================================================================
 * atomic, durable replacement
 * ========================================================================================== */

#define AFAIL(a, s, ...) st_fail((s), (a)->path, NULL, NULL, 0, __VA_ARGS__)

void st_temp_prefix(char *buf, size_t n, const char *base) {
    size_t bl = strlen(base);
    snprintf(buf, n, ".%.*s.lyco-tmp.", (int)(bl > 180 ? 180 : bl), base);
}

static void atomic_release(st_atomic *a) {
    if (a->fd >= 0) close(a->fd);
    if (a->tmp_exists && a->dfd >= 0) unlinkat(a->dfd, a->tmp, 0);
    if (a->dfd >= 0) close(a->dfd);
    free(a->path);
    free(a->dir);
    free(a->tmp);
    free(a->tmp_path);
    memset(a, 0, sizeof *a);
    a->fd = a->dfd = -1;
}

void st_atomic_discard(st_atomic *a) {
    if (a) atomic_release(a);
}

lyco_status st_atomic_create(st_atomic *a, const char *path) {
    char eb[128];
    memset(a, 0, sizeof *a);
    a->fd = a->dfd = -1;
    size_t pl = strlen(path);
    a->path = malloc(pl + 1);
    if (!a->path) return lyco_fail(LYCO_ERR_NOMEM, "safetensors writer: out of memory");
    memcpy(a->path, path, pl + 1);
    const char *slash = strrchr(a->path, '/');
    a->base = slash ? slash + 1 : a->path;
    if (pl == 0 || a->base[0] == '\0' || strcmp(a->base, ".") == 0 ||
        strcmp(a->base, "..") == 0) {
        lyco_status s = AFAIL(a, LYCO_ERR_INVALID, "path does not name a file (expected "
                              "\"[dir/]name\" with a file name after the last '/')");
        atomic_release(a);
        return s;
    }
    size_t dl = slash ? (slash == a->path ? 1 : (size_t)(slash - a->path)) : 1;
    size_t bl = strlen(a->base);
    a->dir = malloc(dl + 1);
    a->tmp = malloc(bl + 64 < 256 ? 256 : bl + 64);
    a->tmp_path = malloc(dl + bl + 66 < 258 ? 258 + dl : dl + bl + 66);
    if (!a->dir || !a->tmp || !a->tmp_path) {
        atomic_release(a);
        return lyco_fail(LYCO_ERR_NOMEM, "safetensors writer: out of memory");
    }
    if (slash) { memcpy(a->dir, a->path, dl); a->dir[dl] = '\0'; }
    else memcpy(a->dir, ".", 2);

    a->dfd = open(a->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (a->dfd < 0) {
        int e = errno;
        lyco_status s = AFAIL(a, LYCO_ERR_IO, "cannot open the target directory: %s (errno %d)",
                              st_errstr(e, eb, sizeof eb), e);
        atomic_release(a);
        return s;
    }
    static _Thread_local unsigned seq;
    unsigned salt = (unsigned)time(NULL) ^ (unsigned)(uintptr_t)&seq;
    char prefix[256];
    st_temp_prefix(prefix, sizeof prefix, a->base);
    size_t tcap = bl + 64 < 256 ? 256 : bl + 64;
    for (int attempt = 0; attempt < 100; attempt++) {
        snprintf(a->tmp, tcap, "%s%ld.%x", prefix, (long)getpid(), (salt + seq++) & 0xffffffu);
        /* 0666: the process umask decides the final mode, as for any new file */
        a->fd = openat(a->dfd, a->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
        if (a->fd >= 0 || errno != EEXIST) break;
    }
    if (a->fd < 0) {
        int e = errno;
        lyco_status s = AFAIL(a, LYCO_ERR_IO, "cannot create a temp file in the target directory: "
                              "%s (errno %d)", st_errstr(e, eb, sizeof eb), e);
        atomic_release(a);
        return s;
    }
    a->tmp_exists = true;
    snprintf(a->tmp_path, dl + bl + 66 < 258 ? 258 + dl : dl + bl + 66, "%s/%s", a->dir, a->tmp);
    return LYCO_OK;
}

lyco_status st_atomic_commit(st_atomic *a, unsigned flags) {
    char eb[128];
    lyco_status st = LYCO_OK;
    int e;
    if (st_fault_hit(LYCO_ST_FAULT_FSYNC) || fsync(a->fd) != 0) {
        e = errno;
        st = AFAIL(a, LYCO_ERR_IO, "fsync of the temp file failed: %s (errno %d); not retried, "
                   "nothing was written to the target", st_errstr(e, eb, sizeof eb), e);
        goto done;
    }
    {
        bool faulted = st_fault_hit(LYCO_ST_FAULT_CLOSE);
        e = errno;
        int rc = close(a->fd);
        a->fd = -1;
        if (faulted || rc != 0) {
            if (!faulted) e = errno;
            st = AFAIL(a, LYCO_ERR_IO, "close of the temp file failed: %s (errno %d); nothing "
                       "was written to the target", st_errstr(e, eb, sizeof eb), e);
            goto done;
        }
    }
    if (flags & LYCO_ST_NOREPLACE) {
        /* link fails with EEXIST when the target exists: no window where it is replaced */
        if (st_fault_hit(LYCO_ST_FAULT_RENAME) || linkat(a->dfd, a->tmp, a->dfd, a->base, 0) != 0) {
            e = errno;
            st = AFAIL(a, LYCO_ERR_IO, "linking the temp file into place failed: %s (errno %d)%s",
                       st_errstr(e, eb, sizeof eb), e,
                       e == EEXIST ? "; the target exists and replacing it was not allowed"
                                   : "; the target was not changed");
            goto done;
        }
        if (unlinkat(a->dfd, a->tmp, 0) == 0) a->tmp_exists = false;
        /* a failed unlink leaves a second name of the complete file: harmless, retried below */
    } else {
        if (st_fault_hit(LYCO_ST_FAULT_RENAME) || renameat(a->dfd, a->tmp, a->dfd, a->base) != 0) {
            e = errno;
            st = AFAIL(a, LYCO_ERR_IO, "rename of the temp file into place failed: %s (errno %d); "
                       "the target was not changed", st_errstr(e, eb, sizeof eb), e);
            goto done;
        }
        a->tmp_exists = false;
    }
    /* EINVAL: the filesystem cannot sync directories at all; nothing more can be done. */
    if (st_fault_hit(LYCO_ST_FAULT_DIRSYNC) || (fsync(a->dfd) != 0 && errno != EINVAL)) {
        e = errno;
        st = AFAIL(a, LYCO_ERR_IO, "fsync of the directory failed after the rename: %s (errno "
                   "%d); the new file is complete and in place but may not survive a crash",
                   st_errstr(e, eb, sizeof eb), e);
        goto done;
    }
done:
    atomic_release(a);
    return st;
}
