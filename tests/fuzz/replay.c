/*
 * replay.c — replays inputs through LLVMFuzzerTestOneInput (fuzz_safetensors.c) with any
 * compiler, so the fuzz corpus runs as a regression test in plain `make test` (and under
 * ASan/UBSan in `make test-asan`), and checks a manifest of expected verdicts.
 *
 * Usage: fuzz_replay [--manifest FILE] PATH...
 *   PATH: a file, or a directory whose regular files are all replayed (sorted by name).
 *   --manifest FILE: lines "<file>\t<STATUS>\t<needle>\t<tensor>" (files relative to FILE's
 *     directory; STATUS a lyco_status_name such as LYCO_ERR_FORMAT or LYCO_OK; needle and
 *     tensor "-" when none; '#' lines are comments). Each file is opened with
 *     lyco_st_open_memory(label = file) and must give STATUS, with the needle and the quoted
 *     tensor name in the message. This is the broken-file corpus asserting its specific errors.
 * A violated invariant aborts inside the target; otherwise prints "replayed N inputs" (and the
 * manifest tally) and exits 0 only if every expectation held.
 * Assumptions: POSIX (opendir, stat).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The whole file in a malloc'ed buffer (NULL with a message on failure). */
static uint8_t *slurp(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "fuzz_replay: cannot open %s\n", path);
        return NULL;
    }
    size_t cap = 4096, len = 0;
    uint8_t *b = malloc(cap);
    while (b) {
        size_t r = fread(b + len, 1, cap - len, fp);
        len += r;
        if (len < cap) break;
        uint8_t *nb = realloc(b, cap * 2);
        if (!nb) { free(b); b = NULL; break; }
        b = nb;
        cap *= 2;
    }
    bool err = ferror(fp) != 0;
    fclose(fp);
    if (!b || err) {
        fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
        free(b);
        return NULL;
    }
    *n = len;
    return b;
}

static int replay_file(const char *path) {
    size_t n = 0;
    uint8_t *b = slurp(path, &n);
    if (!b) return -1;
    LLVMFuzzerTestOneInput(b, n);
    free(b);
    return 1;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays every regular file of dir (sorted); the count, or -1 on an I/O failure. */
static int replay_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "fuzz_replay: cannot open directory %s\n", dir);
        return -1;
    }
    char **names = NULL;
    size_t nn = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (nn == cap) {
            cap = cap ? 2 * cap : 64;
            char **q = realloc(names, cap * sizeof *names);
            if (!q) break;
            names = q;
        }
        size_t l = strlen(dir) + strlen(e->d_name) + 2;
        names[nn] = malloc(l);
        if (!names[nn]) break;
        snprintf(names[nn], l, "%s/%s", dir, e->d_name);
        nn++;
    }
    closedir(d);
    qsort(names, nn, sizeof *names, cmp_str);
    int count = 0;
    for (size_t i = 0; i < nn; i++) {
        struct stat sb;
        if (count >= 0 && stat(names[i], &sb) == 0 && S_ISREG(sb.st_mode)) {
            int r = replay_file(names[i]);
            count = r < 0 ? -1 : count + r;
        }
        free(names[i]);
    }
    free(names);
    return count;
}

/* Checks every manifest line; returns the number of failed expectations (-1: unreadable). */
static int check_manifest(const char *manifest, int *lines_out) {
    size_t n = 0;
    char *text = (char *)slurp(manifest, &n);
    if (!text) return -1;
    char *nt = realloc(text, n + 1);
    if (!nt) { free(text); return -1; }
    text = nt;
    text[n] = '\0';
    char dir[1024];
    const char *slash = strrchr(manifest, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - manifest) : 1, slash ? manifest : ".");
    int bad = 0, lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || line[0] == '\0') continue;
        char *f[4] = {line, NULL, NULL, NULL};
        for (int k = 1; k < 4; k++) {
            char *tab = f[k - 1] ? strchr(f[k - 1], '\t') : NULL;
            if (tab) { *tab = '\0'; f[k] = tab + 1; }
        }
        lines++;
        if (!f[3]) {
            printf("FAIL: manifest line %d: expected 4 tab-separated fields\n", lines);
            bad++;
            continue;
        }
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, f[0]);
        size_t len = 0;
        uint8_t *b = slurp(path, &len);
        if (!b) { bad++; continue; }
        lyco_st_file *sf = NULL;
        lyco_clear_error();
        lyco_status s = lyco_st_open_memory(b, len, f[0], &sf);
        const char *msg = lyco_last_error();
        char tq[512];
        snprintf(tq, sizeof tq, "\"%s\"", f[3]);
        bool ok = strcmp(lyco_status_name(s), f[1]) == 0;
        if (s != LYCO_OK) {
            ok = ok && strstr(msg, f[0]) && (strcmp(f[2], "-") == 0 || strstr(msg, f[2])) &&
                 (strcmp(f[3], "-") == 0 || strstr(msg, tq));
        }
        if (!ok) {
            printf("FAIL: %s: expected %s with \"%s\", got %s: %s\n", f[0], f[1], f[2],
                   lyco_status_name(s), msg);
            bad++;
        }
        lyco_st_close(sf);
        free(b);
    }
    free(text);
    *lines_out = lines;
    return bad;
}

int main(int argc, char **argv) {
    const char *manifest = NULL;
    int first = 1;
    if (argc >= 3 && strcmp(argv[1], "--manifest") == 0) {
        manifest = argv[2];
        first = 3;
    }
    if (first >= argc && !manifest) {
        fprintf(stderr, "usage: fuzz_replay [--manifest FILE] PATH...\n");
        return 2;
    }
    int total = 0;
    for (int i = first; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "fuzz_replay: no such file or directory: %s\n", argv[i]);
            return 1;
        }
        int r = S_ISDIR(sb.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]);
        if (r < 0) return 1;
        total += r;
    }
    printf("replayed %d inputs through LLVMFuzzerTestOneInput: no invariant violated\n", total);
    if (manifest) {
        int lines = 0, bad = check_manifest(manifest, &lines);
        if (bad < 0) return 1;
        printf("manifest %s: %d of %d expectations met\n", manifest, lines - bad, lines);
        if (bad > 0 || lines == 0) return 1;
    }
    return 0;
}
