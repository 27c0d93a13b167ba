/*
 * kept.c — one reusable block of memory per calling thread for a call's large per-call copies
 * (cpu_kept_get / cpu_kept_put), kept between calls instead of freed. glibc gives the top of its
 * heap back to the kernel when a free leaves more than the trim threshold there (128 KB at first,
 * then set by the process's history of large frees), and the next call faults every page in again:
 * LoHa's four factor copies (4 × 164 KB at 1280², r32) made its merge forward at 2 threads grow
 * and trim the heap on every call, 129 page faults a call, ~8–10 % of the call.
 *
 * One user at a time per thread: a nested request gets malloc'd memory (released by cpu_kept_put
 * too). The block is 64-byte aligned and uninitialised, grows to the largest request the thread has made and is freed
 * at the thread's exit (pthread key destructor). Extra memory: that block, held between calls.
 */
#include <pthread.h>
#include <stdlib.h>

#include "cpu.h"

static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;
static bool kept_key_ok;
static _Thread_local float *kept_buf;
static _Thread_local size_t kept_cap;   /* floats */
static _Thread_local bool kept_busy;

static void kept_free(void *p) { free(p); }
static void kept_key_init(void) { kept_key_ok = pthread_key_create(&kept_key, kept_free) == 0; }

/* this thread's block grown to n floats (the old one freed), or NULL */
static float *kept_grow(size_t n) {
    pthread_once(&kept_once, kept_key_init);
    if (!kept_key_ok) return NULL;
    float *p = aligned_alloc(64, (sizeof(float) * n + 63) & ~(size_t)63);
    if (!p) return NULL;
    if (pthread_setspecific(kept_key, p) != 0) {
        free(p);
        return NULL;
    }
    free(kept_buf);
    kept_buf = p;
    kept_cap = n;
    return p;
}

float *cpu_kept_get(size_t n) {
    if (n == 0) n = 1;
    if (kept_busy || (kept_cap < n && !kept_grow(n))) return malloc(sizeof(float) * n);
    kept_busy = true;
    return kept_buf;
}

void cpu_kept_put(float *p) {
    if (p && p == kept_buf && kept_busy) kept_busy = false;
    else free(p);
}
