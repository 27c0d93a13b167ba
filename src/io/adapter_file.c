/*
 * adapter_file.c — adapter-file loader, algorithm detection, and mapping of modules onto a base
 * checkpoint (see adapter_file.h for the contract; ALGORITHMS.md §3, §6).
 *
 * Key split: "<module>.<param>" where <param> is one of the known parameter suffixes. A module
 * name without dots (kohya, lycoris_) is split at its first dot; a plain dotted module path at
 * the longest known suffix. Dimensions come from the tensors (never from metadata); the library's
 * own shape rules (api/shapes.c) are the final word at bind time, and give the scale.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "io/adapter_file.h"

/* ---- parameter suffixes ---- */
enum { P_ALPHA = LYCO_SLOT_COUNT, P_ON_INPUT, P_IGNORED, P_NONE };
static const struct { const char *suffix; int slot; } k_params[] = {
    {"lora_down.weight", LYCO_LORA_DOWN}, {"lora_up.weight", LYCO_LORA_UP},
    {"lora_mid.weight", LYCO_LORA_MID},   {"hada_w1_a", LYCO_HADA_W1_A},
    {"hada_w1_b", LYCO_HADA_W1_B},        {"hada_w2_a", LYCO_HADA_W2_A},
    {"hada_w2_b", LYCO_HADA_W2_B},        {"hada_t1", LYCO_HADA_T1},
    {"hada_t2", LYCO_HADA_T2},            {"lokr_w1", LYCO_LOKR_W1},
    {"lokr_w1_a", LYCO_LOKR_W1_A},        {"lokr_w1_b", LYCO_LOKR_W1_B},
    {"lokr_w2", LYCO_LOKR_W2},            {"lokr_w2_a", LYCO_LOKR_W2_A},
    {"lokr_w2_b", LYCO_LOKR_W2_B},        {"lokr_t2", LYCO_LOKR_T2},
    {"oft_blocks", LYCO_OFT_BLOCKS},      {"rescale", LYCO_RESCALE},
    {"weight", LYCO_IA3_WEIGHT},          {"a1.weight", LYCO_GLORA_A1},
    {"a2.weight", LYCO_GLORA_A2},         {"b1.weight", LYCO_GLORA_B1},
    {"b2.weight", LYCO_GLORA_B2},         {"dora_scale", LYCO_DORA_SCALE},
    {"diff", LYCO_DIFF},                  {"diff_b", LYCO_DIFF_B},
    {"w_norm", LYCO_W_NORM},              {"b_norm", LYCO_B_NORM},
    {"alpha", P_ALPHA},                   {"on_input", P_ON_INPUT},
    {"bias_indices", P_IGNORED},          {"bias_values", P_IGNORED},
    {"bias_size", P_IGNORED},
};
#define N_PARAMS ((int)(sizeof k_params / sizeof k_params[0]))

/* Index into k_params of `s` as a whole parameter name, or -1. */
static int param_of(const char *s) {
    for (int i = 0; i < N_PARAMS; i++)
        if (!strcmp(s, k_params[i].suffix)) return i;
    return -1;
}

/* Splits key into module length and parameter index; -1 when no known suffix fits. */
static int split_key(const char *key, size_t *mod_len) {
    const char *dot = strchr(key, '.');
    if (dot && dot > key) {
        int p = param_of(dot + 1);
        if (p >= 0) { *mod_len = (size_t)(dot - key); return p; }
    }
    size_t n = strlen(key);
    int best = -1;
    size_t best_len = 0;
    for (int i = 0; i < N_PARAMS; i++) {
        size_t l = strlen(k_params[i].suffix);
        if (l + 2 <= n && key[n - l - 1] == '.' && !strcmp(key + n - l, k_params[i].suffix) && l > best_len) {
            best = i;
            best_len = l;
        }
    }
    if (best >= 0) *mod_len = n - best_len - 1;
    return best;
}

/* ---- the file ---- */
typedef struct {
    const char *key;
    const char *why;
} unused_key;

struct lyco_af_file {
    lyco_st_file *st;
    lyco_af_module *mods;
    int64_t n_mods;
    unused_key *unused;
    int64_t n_unused;
    char *names;          /* storage of module names */
};

static lyco_status nomem(const char *what) { return lyco_fail(LYCO_ERR_NOMEM, "adapter file: out of memory (%s)", what); }

static int64_t numel_st(const lyco_st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* A 1-element tensor's value as a double, whatever its numeric dtype. */
static lyco_status scalar_value(const lyco_af_file *f, const char *mod, const lyco_st_tensor *t, double *out) {
    if (numel_st(t) != 1)
        return lyco_fail(LYCO_ERR_FORMAT, "%s: %s has %lld elements; expected a 0-dim or [1] scalar", lyco_st_path(f->st), t->name, (long long)numel_st(t));
    unsigned char b[8] = {0};
    memcpy(b, t->data, (size_t)t->nbytes);
    union { float f; double d; int32_t i32; int64_t i64; uint32_t u32; uint16_t u16; } u;
    switch (t->dtype) {
    case LYCO_ST_F16: memcpy(&u.u16, b, 2); *out = lyco_f16_to_f32(u.u16); break;
    case LYCO_ST_BF16: memcpy(&u.u16, b, 2); *out = lyco_bf16_to_f32(u.u16); break;
    case LYCO_ST_F32: memcpy(&u.f, b, 4); *out = u.f; break;
    case LYCO_ST_F64: memcpy(&u.d, b, 8); *out = u.d; break;
    case LYCO_ST_I64: memcpy(&u.i64, b, 8); *out = (double)u.i64; break;
    case LYCO_ST_I32: memcpy(&u.i32, b, 4); *out = u.i32; break;
    case LYCO_ST_U8: case LYCO_ST_BOOL: *out = b[0]; break;
    case LYCO_ST_I8: *out = (int8_t)b[0]; break;
    case LYCO_ST_I16: { int16_t v; memcpy(&v, b, 2); *out = v; break; }
    default:
        return lyco_fail(LYCO_ERR_FORMAT, "%s: module %s: %s has dtype %s; expected a float or integer scalar",
                         lyco_st_path(f->st), mod, t->name, t->dtype_name);
    }
    if (!isfinite(*out))
        return lyco_fail(LYCO_ERR_FORMAT, "%s: %s is %g; expected a finite number", lyco_st_path(f->st), t->name, *out);
    return LYCO_OK;
}

static int64_t prod_from(const lyco_st_tensor *t, int from) {
    int64_t n = 1;
    for (int i = from; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static lyco_status bad(const lyco_af_file *f, const lyco_af_module *m, const lyco_st_tensor *t, const char *expected) {
    char sh[128];
    int o = snprintf(sh, sizeof sh, "[");
    for (int i = 0; t && i < t->ndim && o < (int)sizeof sh - 24; i++)
        o += snprintf(sh + o, sizeof sh - (size_t)o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    snprintf(sh + o, sizeof sh - (size_t)o, "]");
    if (!t) return lyco_fail(LYCO_ERR_FORMAT, "%s: module %s (%s): %s", lyco_st_path(f->st), m->name, lyco_algo_name(m->algo), expected);
    return lyco_fail(LYCO_ERR_FORMAT, "%s: module %s (%s): %s has shape %s; expected %s", lyco_st_path(f->st), m->name,
                     lyco_algo_name(m->algo), t->name, sh, expected);
}

static void set_kernel(lyco_af_module *m, const lyco_st_tensor *t, int from) {
    m->kdims = t->ndim - from;
    if (m->kdims > 3) m->kdims = 3;
    for (int i = 0; i < m->kdims; i++) m->kernel[i] = t->shape[from + i];
}

/* Algorithm detection in upstream's order (ALGORITHMS.md §3). */
static lyco_algo detect(const lyco_af_module *m) {
    const lyco_st_tensor *const *s = m->slot;
    if (s[LYCO_LORA_UP]) return LYCO_ALGO_LOCON;
    if (s[LYCO_HADA_W1_A]) return LYCO_ALGO_LOHA;
    if (m->on_input_key) return LYCO_ALGO_IA3;
    if (s[LYCO_LOKR_W1] || s[LYCO_LOKR_W1_A]) return LYCO_ALGO_LOKR;
    if (s[LYCO_DIFF]) return LYCO_ALGO_FULL;
    if (s[LYCO_W_NORM]) return LYCO_ALGO_NORM;
    if (s[LYCO_OFT_BLOCKS] && s[LYCO_OFT_BLOCKS]->ndim == 3) return LYCO_ALGO_DIAG_OFT;
    if (s[LYCO_OFT_BLOCKS] && s[LYCO_OFT_BLOCKS]->ndim == 4) return LYCO_ALGO_BOFT;
    if (s[LYCO_GLORA_A1]) return LYCO_ALGO_GLORA;
    return LYCO_ALGO_NONE;
}

static bool slot_used(lyco_algo a, int s) {
    switch (a) {
    case LYCO_ALGO_LOCON: return s == LYCO_LORA_DOWN || s == LYCO_LORA_UP || s == LYCO_LORA_MID || s == LYCO_DORA_SCALE;
    case LYCO_ALGO_LOHA: return (s >= LYCO_HADA_W1_A && s <= LYCO_HADA_T2) || s == LYCO_DORA_SCALE;
    case LYCO_ALGO_LOKR: return (s >= LYCO_LOKR_W1 && s <= LYCO_LOKR_T2) || s == LYCO_DORA_SCALE;
    case LYCO_ALGO_DIAG_OFT: case LYCO_ALGO_BOFT: return s == LYCO_OFT_BLOCKS || s == LYCO_RESCALE;
    case LYCO_ALGO_IA3: return s == LYCO_IA3_WEIGHT;
    case LYCO_ALGO_GLORA: return s >= LYCO_GLORA_A1 && s <= LYCO_GLORA_B2;
    case LYCO_ALGO_FULL: return s == LYCO_DIFF || s == LYCO_DIFF_B;
    case LYCO_ALGO_NORM: return s == LYCO_W_NORM || s == LYCO_B_NORM;
    default: return false;
    }
}

static bool uses_alpha(lyco_algo a) {
    return a == LYCO_ALGO_LOCON || a == LYCO_ALGO_LOHA || a == LYCO_ALGO_LOKR || a == LYCO_ALGO_GLORA ||
           a == LYCO_ALGO_DIAG_OFT || a == LYCO_ALGO_BOFT;
}

static lyco_status need2(const lyco_af_file *f, const lyco_af_module *m, int s) {
    if (!m->slot[s] || m->slot[s]->ndim < 2) {
        char msg[160];
        snprintf(msg, sizeof msg, "key %s.%s%s", m->name, lyco_slot_name((lyco_slot)s),
                 m->slot[s] ? " with at least 2 dims" : " (missing)");
        return bad(f, m, m->slot[s], msg);
    }
    return LYCO_OK;
}

/* Reads the dimensions of a LoCon module (plain or Tucker; DyLoRA files too). */
static lyco_status dims_locon(const lyco_af_file *f, lyco_af_module *m) {
    lyco_status st;
    if ((st = need2(f, m, LYCO_LORA_DOWN)) || (st = need2(f, m, LYCO_LORA_UP))) return st;
    const lyco_st_tensor *d = m->slot[LYCO_LORA_DOWN], *u = m->slot[LYCO_LORA_UP], *mid = m->slot[LYCO_LORA_MID];
    m->rank = d->shape[0];
    if (u->shape[1] != m->rank || prod_from(u, 2) != 1) return bad(f, m, u, "O×r (or O×r×1…) with r = lora_down's first dim");
    m->out_dim = u->shape[0];
    m->in_dim = d->shape[1];
    if (mid) {
        m->tucker = true;
        if (mid->ndim < 3 || mid->shape[0] != m->rank || mid->shape[1] != m->rank) return bad(f, m, mid, "r×r×k (Tucker core)");
        if (prod_from(d, 2) != 1) return bad(f, m, d, "r×I×1… (Tucker)");
        set_kernel(m, mid, 2);
        m->cols = m->in_dim * prod_from(mid, 2);
    } else {
        if (d->ndim > 2) set_kernel(m, d, 2);
        else m->in_dim = -1;   /* r×(I·K): I and K cannot be told apart */
        m->cols = prod_from(d, 1);
    }
    return LYCO_OK;
}

static lyco_status dims_loha(const lyco_af_file *f, lyco_af_module *m) {
    lyco_status st;
    static const int req[4] = {LYCO_HADA_W1_A, LYCO_HADA_W1_B, LYCO_HADA_W2_A, LYCO_HADA_W2_B};
    for (int i = 0; i < 4; i++)
        if ((st = need2(f, m, req[i]))) return st;
    const lyco_st_tensor *t1 = m->slot[LYCO_HADA_T1], *t2 = m->slot[LYCO_HADA_T2];
    if (!t1 != !t2) return bad(f, m, NULL, "hada_t1 and hada_t2 must both be present (Tucker) or both absent");
    m->tucker = t1 != NULL;
    for (int w = 0; w < 2; w++) {
        const lyco_st_tensor *A = m->slot[w ? LYCO_HADA_W2_A : LYCO_HADA_W1_A], *B = m->slot[w ? LYCO_HADA_W2_B : LYCO_HADA_W1_B];
        int64_t r, O, cols;
        if (m->tucker) {
            const lyco_st_tensor *T = w ? t2 : t1;
            r = A->shape[0];
            O = A->shape[1];
            if (B->ndim != 2 || B->shape[0] != r) return bad(f, m, B, "r×I (Tucker layout)");
            if (T->ndim < 3 || T->shape[0] != r || T->shape[1] != r) return bad(f, m, T, "r×r×k");
            set_kernel(m, T, 2);
            m->in_dim = B->shape[1];
            cols = B->shape[1] * prod_from(T, 2);
        } else {
            O = A->shape[0];
            r = A->shape[1];
            if (B->shape[0] != r) return bad(f, m, B, "r×(I·K) with r = the matching hada_w*_a's columns");
            if (B->ndim > 2) { set_kernel(m, B, 2); m->in_dim = B->shape[1]; }
            cols = prod_from(B, 1);
        }
        if (w && (O != m->out_dim || cols != m->cols)) return bad(f, m, A, "the same O and I·K as hada_w1_a/hada_w1_b");
        m->out_dim = O;
        m->cols = cols;
        if (w) m->rank2 = r; else m->rank = r;
    }
    return LYCO_OK;
}

static lyco_status dims_lokr(const lyco_af_file *f, lyco_af_module *m) {
    const lyco_st_tensor *w1 = m->slot[LYCO_LOKR_W1], *w1a = m->slot[LYCO_LOKR_W1_A], *w1b = m->slot[LYCO_LOKR_W1_B];
    const lyco_st_tensor *w2 = m->slot[LYCO_LOKR_W2], *w2a = m->slot[LYCO_LOKR_W2_A], *w2b = m->slot[LYCO_LOKR_W2_B];
    const lyco_st_tensor *t2 = m->slot[LYCO_LOKR_T2];
    int64_t r = 0;
    if (w1) {
        if (w1a || w1b) return bad(f, m, NULL, "one form of W1: lokr_w1, or lokr_w1_a and lokr_w1_b (both forms given)");
        if (w1->ndim != 2) return bad(f, m, w1, "a×c");
        m->lk_a = w1->shape[0];
        m->lk_c = w1->shape[1];
    } else {
        if (!w1a || !w1b) return bad(f, m, NULL, "lokr_w1, or both lokr_w1_a and lokr_w1_b");
        if (w1a->ndim != 2 || w1b->ndim != 2 || w1a->shape[1] != w1b->shape[0]) return bad(f, m, w1b, "r×c with lokr_w1_a a×r");
        m->lk_a = w1a->shape[0];
        m->lk_c = w1b->shape[1];
        r = w1a->shape[1];
    }
    int64_t b, dk, d = -1;
    if (w2) {
        if (w2a || w2b || t2) return bad(f, m, NULL, "one form of W2: lokr_w2, or lokr_w2_a/lokr_w2_b[/lokr_t2] (both forms given)");
        if (w2->ndim < 2) return bad(f, m, w2, "b×d(×k)");
        b = w2->shape[0];
        dk = prod_from(w2, 1);
        if (w2->ndim > 2) { d = w2->shape[1]; set_kernel(m, w2, 2); }
    } else {
        if (!w2a || !w2b || w2a->ndim != 2 || w2b->ndim < 2) return bad(f, m, w2a ? w2b : w2a, "lokr_w2, or lokr_w2_a (2-D) and lokr_w2_b");
        if (t2) {
            m->tucker = true;
            int64_t r2 = w2a->shape[0];
            if (t2->ndim < 3 || t2->shape[0] != r2 || t2->shape[1] != r2) return bad(f, m, t2, "r×r×k");
            if (w2b->ndim != 2 || w2b->shape[0] != r2) return bad(f, m, w2b, "r×d (Tucker layout)");
            b = w2a->shape[1];
            d = w2b->shape[1];
            set_kernel(m, t2, 2);
            dk = d * prod_from(t2, 2);
            if (r && r != r2) return bad(f, m, w2a, "the rank of lokr_w1_a/lokr_w1_b");
            r = r2;
        } else {
            int64_t r2 = w2a->shape[1];
            if (w2b->shape[0] != r2) return bad(f, m, w2b, "r×(d·K) with r = lokr_w2_a's columns");
            b = w2a->shape[0];
            dk = prod_from(w2b, 1);
            if (w2b->ndim > 2) { d = w2b->shape[1]; set_kernel(m, w2b, 2); }
            if (r && r != r2) return bad(f, m, w2a, "the rank of lokr_w1_a/lokr_w1_b");
            r = r2;
        }
    }
    m->rank = r;
    m->lk_b = b;
    m->lk_dk = dk;
    m->out_dim = m->lk_a * b;
    m->cols = m->lk_c * dk;
    m->in_dim = d >= 0 ? m->lk_c * d : -1;
    return LYCO_OK;
}

static lyco_status dims_oft(const lyco_af_file *f, lyco_af_module *m) {
    const lyco_st_tensor *b = m->slot[LYCO_OFT_BLOCKS];
    if (m->algo == LYCO_ALGO_DIAG_OFT) {
        if (b->shape[1] != b->shape[2]) return bad(f, m, b, "nb×bs×bs");
        m->stages = 1;
        m->nb = b->shape[0];
        m->bs = b->shape[1];
    } else {
        if (b->shape[2] != b->shape[3]) return bad(f, m, b, "M×nb×b×b");
        m->stages = b->shape[0];
        m->nb = b->shape[1];
        m->bs = b->shape[2];
    }
    m->out_dim = m->nb * m->bs;
    const lyco_st_tensor *rs = m->slot[LYCO_RESCALE];
    if (rs && (rs->ndim < 1 || rs->shape[0] != m->out_dim || prod_from(rs, 1) != 1)) return bad(f, m, rs, "O or O×1… with O = nb·bs");
    return LYCO_OK;
}

static lyco_status dims_ia3(const lyco_af_file *f, lyco_af_module *m) {
    const lyco_st_tensor *w = m->slot[LYCO_IA3_WEIGHT];
    if (!w) return bad(f, m, NULL, "key weight (missing; IA3 is detected by on_input)");
    int64_t D = numel_st(w), big = 0;
    for (int i = 0; i < w->ndim; i++) big += w->shape[i] != 1;
    if (big > 1) return bad(f, m, w, "D or 1×D×1…");
    if (m->ia3_on_input) m->in_dim = D;
    else m->out_dim = D;
    if (w->ndim > 2) m->kdims = w->ndim - 2, m->kernel[0] = m->kernel[1] = m->kernel[2] = -1;
    return LYCO_OK;
}

static lyco_status dims_glora(const lyco_af_file *f, lyco_af_module *m) {
    lyco_status st;
    static const int req[4] = {LYCO_GLORA_A1, LYCO_GLORA_A2, LYCO_GLORA_B1, LYCO_GLORA_B2};
    for (int i = 0; i < 4; i++)
        if ((st = need2(f, m, req[i]))) return st;
    const lyco_st_tensor *a1 = m->slot[LYCO_GLORA_A1], *a2 = m->slot[LYCO_GLORA_A2], *b1 = m->slot[LYCO_GLORA_B1], *b2 = m->slot[LYCO_GLORA_B2];
    m->in_dim = a1->shape[0];
    m->rank = a1->shape[1];
    if (a2->shape[0] != m->rank || a2->shape[1] != m->in_dim) return bad(f, m, a2, "r×I");
    if (b1->shape[1] != m->rank) return bad(f, m, b1, "O×r");
    if (b2->shape[0] != m->rank || b2->shape[1] != m->in_dim) return bad(f, m, b2, "r×I(×k)");
    m->out_dim = b1->shape[0];
    if (b2->ndim > 2) set_kernel(m, b2, 2);
    m->cols = prod_from(b2, 1);
    return LYCO_OK;
}

static lyco_status dims_full(const lyco_af_file *f, lyco_af_module *m) {
    const lyco_st_tensor *d = m->slot[LYCO_DIFF], *db = m->slot[LYCO_DIFF_B];
    if (d->ndim < 1) return bad(f, m, d, "the base weight's shape");
    m->out_dim = d->shape[0];
    if (d->ndim >= 2) {
        m->in_dim = d->shape[1];
        m->cols = prod_from(d, 1);
        set_kernel(m, d, 2);
    }
    if (db && numel_st(db) != m->out_dim) return bad(f, m, db, "O = diff's first dim");
    return LYCO_OK;
}

static lyco_status dims_norm(const lyco_af_file *f, lyco_af_module *m) {
    const lyco_st_tensor *w = m->slot[LYCO_W_NORM], *b = m->slot[LYCO_B_NORM];
    m->out_dim = numel_st(w);
    if (b && numel_st(b) != m->out_dim) return bad(f, m, b, "C = w_norm's length");
    return LYCO_OK;
}

static lyco_status add_unused(lyco_af_file *f, const char *key, const char *why) {
    unused_key *u = realloc(f->unused, sizeof *u * (size_t)(f->n_unused + 1));
    if (!u) return nomem("unused keys");
    f->unused = u;
    f->unused[f->n_unused++] = (unused_key){key, why};
    return LYCO_OK;
}

/* Fills one module's fields from its keys [k0, k1) of the sorted key list. */
static lyco_status build_module(lyco_af_file *f, lyco_af_module *m, const lyco_st_tensor **keys, const int *params, int64_t n) {
    lyco_status st;
    m->alpha = NAN;
    m->out_dim = m->in_dim = m->cols = -1;
    m->kdims = -1;
    for (int64_t i = 0; i < n; i++) {
        int s = k_params[params[i]].slot;
        if (s < LYCO_SLOT_COUNT) m->slot[s] = keys[i];
        else if (s == P_ALPHA) m->alpha_key = keys[i];
        else if (s == P_ON_INPUT) m->on_input_key = keys[i];
    }
    m->algo = detect(m);
    static const char *const why_not_used[LYCO_ALGO_COUNT] = {
        "no algorithm detected for its module", "not used by locon", "not used by loha", "not used by lokr",
        "not used by diag_oft", "not used by boft", "not used by ia3", "not used by glora", "not used by dylora",
        "not used by full", "not used by norm"};
    for (int64_t i = 0; i < n; i++) {
        int s = k_params[params[i]].slot;
        bool used = s < LYCO_SLOT_COUNT ? slot_used(m->algo, s)
                    : s == P_ALPHA ? uses_alpha(m->algo)
                    : s == P_ON_INPUT ? m->algo == LYCO_ALGO_IA3 : false;
        if (!used) {
            if (s < LYCO_SLOT_COUNT) m->slot[s] = NULL;
            if ((st = add_unused(f, keys[i]->name, s == P_IGNORED ? "sparse bias residual of old extraction tools (ignored, as upstream does)"
                                                                  : why_not_used[m->algo])))
                return st;
            continue;
        }
        if (s < LYCO_SLOT_COUNT) {
            m->params += numel_st(keys[i]);
            m->dtype_mask |= 1u << keys[i]->dtype;
        }
    }
    if (m->algo == LYCO_ALGO_NONE) return LYCO_OK;
    if (m->alpha_key && (st = scalar_value(f, m->name, m->alpha_key, &m->alpha))) return st;
    if (m->on_input_key) {
        double v;
        if ((st = scalar_value(f, m->name, m->on_input_key, &v))) return st;
        m->ia3_on_input = v != 0.0;
    }
    m->dora = m->slot[LYCO_DORA_SCALE] != NULL;
    switch (m->algo) {
    case LYCO_ALGO_LOCON: return dims_locon(f, m);
    case LYCO_ALGO_LOHA: return dims_loha(f, m);
    case LYCO_ALGO_LOKR: return dims_lokr(f, m);
    case LYCO_ALGO_DIAG_OFT: case LYCO_ALGO_BOFT: return dims_oft(f, m);
    case LYCO_ALGO_IA3: return dims_ia3(f, m);
    case LYCO_ALGO_GLORA: return dims_glora(f, m);
    case LYCO_ALGO_FULL: return dims_full(f, m);
    case LYCO_ALGO_NORM: return dims_norm(f, m);
    default: return LYCO_OK;
    }
}

typedef struct {
    const lyco_st_tensor *t;
    size_t mod_len;
    int param;
    int64_t order;
} keyrec;

static int cmp_keyrec(const void *pa, const void *pb) {
    const keyrec *a = pa, *b = pb;
    size_t n = a->mod_len < b->mod_len ? a->mod_len : b->mod_len;
    int c = memcmp(a->t->name, b->t->name, n);
    if (c) return c;
    if (a->mod_len != b->mod_len) return a->mod_len < b->mod_len ? -1 : 1;
    return (a->order > b->order) - (a->order < b->order);
}

static lyco_status group_modules(lyco_af_file *f) {
    int64_t n = lyco_st_count(f->st);
    keyrec *k = calloc((size_t)(n ? n : 1), sizeof *k);
    const lyco_st_tensor **ts = calloc((size_t)(n ? n : 1), sizeof *ts);
    int *ps = calloc((size_t)(n ? n : 1), sizeof *ps);
    size_t name_bytes = 0;
    lyco_status st = LYCO_OK;
    int64_t nk = 0;
    if (!k || !ts || !ps) { st = nomem("keys"); goto done; }
    for (int64_t i = 0; i < n; i++) {
        const lyco_st_tensor *t = lyco_st_get(f->st, i);
        size_t ml = 0;
        int p = split_key(t->name, &ml);
        if (p < 0) {
            if ((st = add_unused(f, t->name, "unknown parameter suffix (not a LyCORIS key)"))) goto done;
            continue;
        }
        k[nk++] = (keyrec){t, ml, p, i};
        name_bytes += ml + 1;
    }
    qsort(k, (size_t)nk, sizeof *k, cmp_keyrec);
    f->names = malloc(name_bytes ? name_bytes : 1);
    f->mods = calloc((size_t)(nk ? nk : 1), sizeof *f->mods);
    if (!f->names || !f->mods) { st = nomem("modules"); goto done; }
    char *np = f->names;
    for (int64_t i = 0; i < nk;) {
        int64_t j = i;
        while (j < nk && k[j].mod_len == k[i].mod_len && !memcmp(k[j].t->name, k[i].t->name, k[i].mod_len)) j++;
        for (int64_t q = i; q < j; q++) {
            for (int64_t r = i; r < q; r++)
                if (k[r].param == k[q].param) {
                    st = lyco_fail(LYCO_ERR_FORMAT, "%s: module %.*s has parameter %s twice (keys %s and %s)", lyco_st_path(f->st),
                                   (int)k[i].mod_len, k[i].t->name, k_params[k[q].param].suffix, k[r].t->name, k[q].t->name);
                    goto done;
                }
            ts[q - i] = k[q].t;
            ps[q - i] = k[q].param;
        }
        lyco_af_module *m = &f->mods[f->n_mods++];
        memcpy(np, k[i].t->name, k[i].mod_len);
        np[k[i].mod_len] = '\0';
        m->name = np;
        np += k[i].mod_len + 1;
        if ((st = build_module(f, m, ts, ps, j - i))) goto done;
        i = j;
    }
done:
    free(k);
    free(ts);
    free(ps);
    return st;
}

lyco_status lyco_af_open(const char *path, lyco_af_file **out) {
    if (!out) return lyco_fail(LYCO_ERR_NULL, "adapter_open: out is NULL");
    *out = NULL;
    if (!path) return lyco_fail(LYCO_ERR_NULL, "adapter_open: path is NULL");
    lyco_af_file *f = calloc(1, sizeof *f);
    if (!f) return nomem("file");
    lyco_status st = lyco_st_open(path, &f->st);
    if (!st) st = group_modules(f);
    if (st) {
        lyco_af_close(f);
        return st;
    }
    *out = f;
    return LYCO_OK;
}

void lyco_af_close(lyco_af_file *f) {
    if (!f) return;
    lyco_st_close(f->st);
    free(f->mods);
    free(f->unused);
    free(f->names);
    free(f);
}

const lyco_st_file *lyco_af_st(const lyco_af_file *f) { return f ? f->st : NULL; }
int64_t lyco_af_count(const lyco_af_file *f) { return f ? f->n_mods : 0; }
const lyco_af_module *lyco_af_get(const lyco_af_file *f, int64_t i) {
    return f && i >= 0 && i < f->n_mods ? &f->mods[i] : NULL;
}
int64_t lyco_af_unused_count(const lyco_af_file *f) { return f ? f->n_unused : 0; }
const char *lyco_af_unused_key(const lyco_af_file *f, int64_t i) {
    return f && i >= 0 && i < f->n_unused ? f->unused[i].key : NULL;
}
const char *lyco_af_unused_why(const lyco_af_file *f, int64_t i) {
    return f && i >= 0 && i < f->n_unused ? f->unused[i].why : NULL;
}

double lyco_af_scale(const lyco_af_module *m) {
    if (!m) return NAN;
    switch (m->algo) {
    case LYCO_ALGO_LOCON: case LYCO_ALGO_LOHA: case LYCO_ALGO_GLORA: case LYCO_ALGO_LOKR: break;
    default: return NAN;
    }
    if (m->algo == LYCO_ALGO_LOKR && m->rank == 0) return 1.0;
    double r = (double)m->rank;
    double a = (isnan(m->alpha) || m->alpha == 0.0) ? r : m->alpha;
    return r > 0 ? a / r : 1.0;
}

/* ---- binding ---- */

lyco_status lyco_af_layer(int32_t ndim, const int64_t *shape, lyco_layer *out) {
    if (!shape || !out) return lyco_fail(LYCO_ERR_NULL, "adapter layer: %s is NULL", shape ? "out" : "shape");
    if (ndim == 1) {
        lyco_layer_norm(out, LYCO_NORM_LAYER, shape[0], 1, 1e-5);
        return LYCO_OK;
    }
    if (ndim == 2) {
        lyco_layer_linear(out, shape[0], shape[1]);
        return LYCO_OK;
    }
    if (ndim >= 3 && ndim <= 5) return lyco_layer_conv(out, ndim - 2, shape[0], shape[1], shape + 2, NULL, NULL, NULL, 1);
    return lyco_fail(LYCO_ERR_SHAPE, "base tensor has %d dims; expected 1 (norm), 2 (linear) or 3–5 (conv)", (int)ndim);
}

void lyco_af_unbind(lyco_af_bound *b) {
    if (!b) return;
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        free(b->owned[s]);
        b->owned[s] = NULL;
    }
}

/* Replaces view v (owned buffer *owned, may be NULL) by an exact fp32 copy. */
static lyco_status widen(DLTensor *v, void **owned) {
    if (lyco_dtype_of(v) == LYCO_F32) return LYCO_OK;
    int64_t n = lyco_numel(v);
    float *buf = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!buf) return nomem("fp32 copy of an adapter tensor");
    lyco_gather_f32(v, lyco_dtype_of(v), buf);
    free(*owned);
    *owned = buf;
    v->data = buf;
    v->dtype = lyco_dl_dtype(LYCO_F32);
    v->strides = NULL;
    v->byte_offset = 0;
    return LYCO_OK;
}

lyco_status lyco_af_bind(const lyco_af_module *m, int32_t ndim, const int64_t *shape, double mult,
                         uint32_t flags, bool widen_f32, lyco_af_bound *b) {
    if (!m || !shape || !b) return lyco_fail(LYCO_ERR_NULL, "adapter bind: %s is NULL", !m ? "module" : !shape ? "shape" : "bound");
    memset(b, 0, sizeof *b);
    if (m->algo == LYCO_ALGO_NONE) return lyco_fail(LYCO_ERR_INVALID, "module %s: no algorithm detected from its keys; nothing to merge", m->name);
    lyco_adapter_init(&b->a, m->algo);
    lyco_status st = lyco_af_layer(ndim, shape, &b->a.layer);
    if (st) return st;
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        const lyco_st_tensor *t = m->slot[s];
        if (!t) continue;
        st = lyco_st_tensor_view(t, &b->view[s]);
        if (st == LYCO_ERR_UNSUPPORTED) st = lyco_st_tensor_load(t, &b->view[s], &b->owned[s]);
        if (!st && widen_f32) st = widen(&b->view[s], &b->owned[s]);
        if (st) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", lyco_last_error());
            lyco_af_unbind(b);
            return lyco_fail(st, "module %s: tensor %s (%s): %s", m->name, t->name, t->dtype_name, msg);
        }
        b->a.tensor[s] = &b->view[s];
    }
    b->a.alpha = m->alpha;
    b->a.multiplier = mult;
    b->a.flags = flags;
    b->a.ia3_on_input = m->ia3_on_input;
    if ((m->algo == LYCO_ALGO_DIAG_OFT || m->algo == LYCO_ALGO_BOFT) && !isnan(m->alpha))
        b->a.constraint = m->alpha * (double)shape[0];   /* the module multiplies κ by O (§2.4) */
    lyco_dims d;
    double s;
    if ((st = lyco_shapes_check(&b->a, &d, &s))) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", lyco_last_error());
        lyco_af_unbind(b);
        return lyco_fail(st, "module %s (%s): %s", m->name, lyco_algo_name(m->algo), msg);
    }
    return LYCO_OK;
}

lyco_status lyco_af_bind_bias(const lyco_af_module *m, double mult, uint32_t flags, lyco_af_bound *b) {
    if (!m || !b) return lyco_fail(LYCO_ERR_NULL, "adapter bind_bias: %s is NULL", m ? "bound" : "module");
    memset(b, 0, sizeof *b);
    const lyco_st_tensor *t = m->slot[LYCO_DIFF_B] ? m->slot[LYCO_DIFF_B] : m->slot[LYCO_B_NORM];
    if (!t) return lyco_fail(LYCO_ERR_INVALID, "module %s (%s) has no bias change (diff_b or b_norm)", m->name, lyco_algo_name(m->algo));
    lyco_adapter_init(&b->a, LYCO_ALGO_FULL);
    lyco_status st = lyco_st_tensor_view(t, &b->view[LYCO_DIFF]);
    if (st == LYCO_ERR_UNSUPPORTED) st = lyco_st_tensor_load(t, &b->view[LYCO_DIFF], &b->owned[LYCO_DIFF]);
    if (!st) st = widen(&b->view[LYCO_DIFF], &b->owned[LYCO_DIFF]);
    if (st) {
        lyco_af_unbind(b);
        return st;
    }
    b->shape[0] = numel_st(t);
    b->shape[1] = 1;
    b->view[LYCO_DIFF].ndim = 2;
    b->view[LYCO_DIFF].shape = b->shape;
    lyco_layer_linear(&b->a.layer, b->shape[0], 1);
    b->a.tensor[LYCO_DIFF] = &b->view[LYCO_DIFF];
    b->a.multiplier = mult;
    b->a.flags = flags;
    return LYCO_OK;
}

/* ---- mapping ---- */

typedef struct {
    char *key;        /* "<component>:<flat name>" */
    int64_t index;
} map_entry;

static int cmp_entry(const void *pa, const void *pb) {
    const map_entry *a = pa, *b = pb;
    int c = strcmp(a->key, b->key);
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

typedef struct {
    map_entry *e;
    int64_t n, cap;
} key_map;

static lyco_status map_add(key_map *km, const char *comp, const char *name, size_t len, bool flatten, int64_t index) {
    if (km->n == km->cap) {
        int64_t cap = km->cap ? 2 * km->cap : 1024;
        map_entry *e = realloc(km->e, sizeof *e * (size_t)cap);
        if (!e) return nomem("name map");
        km->e = e;
        km->cap = cap;
    }
    size_t cl = strlen(comp);
    char *k = malloc(cl + 1 + len + 1);
    if (!k) return nomem("name map");
    memcpy(k, comp, cl);
    k[cl] = ':';
    for (size_t i = 0; i < len; i++) k[cl + 1 + i] = flatten && name[i] == '.' ? '_' : name[i];
    k[cl + 1 + len] = '\0';
    km->e[km->n++] = (map_entry){k, index};
    return LYCO_OK;
}

/* -1: absent; -2: ambiguous (two base tensors flatten to the same name). */
static int64_t map_find(const key_map *km, const char *comp, const char *name) {
    char key[1024];
    if (snprintf(key, sizeof key, "%s:%s", comp, name) >= (int)sizeof key) return -1;
    int64_t lo = 0, hi = km->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (strcmp(km->e[mid].key, key) < 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo >= km->n || strcmp(km->e[lo].key, key)) return -1;
    if (lo + 1 < km->n && !strcmp(km->e[lo + 1].key, key) && km->e[lo + 1].index != km->e[lo].index) return -2;
    return km->e[lo].index;
}

static void map_free(key_map *km) {
    for (int64_t i = 0; i < km->n; i++) free(km->e[i].key);
    free(km->e);
}

/* Base-checkpoint prefixes and the adapter component they hold (ALGORITHMS.md §3, §6). */
static const struct { const char *prefix, *comp; } k_base_prefixes[] = {
    {"model.diffusion_model.", "unet"},
    {"cond_stage_model.transformer.", "te"},
    {"cond_stage_model.transformer.", "te1"},
    {"conditioner.embedders.0.transformer.", "te1"},
    {"conditioner.embedders.1.model.", "te2oc"},
    {"unet.", "unet"},
    {"text_encoder.", "te"},
    {"text_encoder.", "te1"},
    {"text_encoder_2.", "te2"},
};

/* Registers base tensor i under every name an adapter module could use for it. Only weights
   (".weight", OpenCLIP "in_proj_weight") are module targets. */
static lyco_status index_base(key_map *km, const char *name, int64_t i) {
    size_t n = strlen(name), mod_len;
    if (n > 7 && !strcmp(name + n - 7, ".weight")) mod_len = n - 7;
    else if (n > 15 && !strcmp(name + n - 15, ".in_proj_weight")) mod_len = n - 7;   /* keep "…in_proj" */
    else return map_add(km, "=", name, n, false, i);
    lyco_status st;
    if ((st = map_add(km, "=", name, n, false, i))) return st;
    if ((st = map_add(km, "any", name, mod_len, true, i))) return st;
    for (size_t p = 0; p < sizeof k_base_prefixes / sizeof k_base_prefixes[0]; p++) {
        size_t pl = strlen(k_base_prefixes[p].prefix);
        if (mod_len > pl && !strncmp(name, k_base_prefixes[p].prefix, pl) &&
            (st = map_add(km, k_base_prefixes[p].comp, name + pl, mod_len - pl, true, i)))
            return st;
    }
    return LYCO_OK;
}

/* Parses a decimal integer at *s; advances it. */
static bool eat_int(const char **s, int *v) {
    if (!isdigit((unsigned char)**s)) return false;
    long x = 0;
    while (isdigit((unsigned char)**s) && x < 100000) x = x * 10 + (*(*s)++ - '0');
    *v = (int)x;
    return true;
}

static bool eat(const char **s, const char *lit) {
    size_t l = strlen(lit);
    if (strncmp(*s, lit, l)) return false;
    *s += l;
    return true;
}

/* Resnet leaf renames, diffusers → SGM. */
static const char *resnet_leaf(const char *x) {
    static const struct { const char *d, *s; } t[] = {
        {"conv1", "in_layers_2"}, {"conv2", "out_layers_3"}, {"norm1", "in_layers_0"}, {"norm2", "out_layers_0"},
        {"time_emb_proj", "emb_layers_1"}, {"conv_shortcut", "skip_connection"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(x, t[i].d)) return t[i].s;
    return NULL;
}

/* diffusers UNet name → SGM name (ALGORITHMS.md §6). alt selects the upsampler's other index
   (SD1.5's first up block has no attention: its upsampler sits at _1_ rather than _2_). */
static bool sgm_name(const char *r, char *out, size_t n, int alt) {
    const char *s = r;
    int i, j;
    if (!strcmp(r, "conv_in")) return snprintf(out, n, "input_blocks_0_0") < (int)n;
    if (!strcmp(r, "conv_out")) return snprintf(out, n, "out_2") < (int)n;
    if (!strcmp(r, "conv_norm_out")) return snprintf(out, n, "out_0") < (int)n;
    if (eat(&s, "time_embedding_linear_") && eat_int(&s, &i) && !*s) return snprintf(out, n, "time_embed_%d", 2 * i - 2) < (int)n;
    s = r;
    if (eat(&s, "add_embedding_linear_") && eat_int(&s, &i) && !*s) return snprintf(out, n, "label_emb_0_%d", 2 * i - 2) < (int)n;
    s = r;
    bool down = eat(&s, "down_blocks_"), up = !down && eat(&s, "up_blocks_");
    if (down || up) {
        if (!eat_int(&s, &i)) return false;
        const char *blk = down ? "input_blocks" : "output_blocks";
        int base = down ? 1 + 3 * i : 3 * i;
        if (eat(&s, "_attentions_") && eat_int(&s, &j) && *s == '_')
            return snprintf(out, n, "%s_%d_1%s", blk, base + j, s) < (int)n;
        if (eat(&s, "_resnets_") && eat_int(&s, &j) && *s == '_') {
            const char *leaf = resnet_leaf(s + 1);
            return leaf && snprintf(out, n, "%s_%d_0_%s", blk, base + j, leaf) < (int)n;
        }
        if (down && eat(&s, "_downsamplers_0_conv") && !*s) return snprintf(out, n, "input_blocks_%d_0_op", 3 + 3 * i) < (int)n;
        if (up && eat(&s, "_upsamplers_0_conv") && !*s) return snprintf(out, n, "output_blocks_%d_%d_conv", 2 + 3 * i, alt ? 1 : 2) < (int)n;
        return false;
    }
    if (eat(&s, "mid_block_")) {
        if (eat(&s, "attentions_") && eat_int(&s, &j) && *s == '_') return snprintf(out, n, "middle_block_1%s", s) < (int)n;
        if (eat(&s, "resnets_") && eat_int(&s, &j) && *s == '_') {
            const char *leaf = resnet_leaf(s + 1);
            return leaf && snprintf(out, n, "middle_block_%d_%s", 2 * j, leaf) < (int)n;
        }
    }
    return false;
}

/* HF CLIP name → OpenCLIP name (SDXL's second text encoder); *slice = 0/1/2 for q/k/v rows of
   in_proj, -1 for a whole tensor. */
static bool openclip_name(const char *r, char *out, size_t n, int *slice) {
    const char *s = r;
    int L;
    *slice = -1;
    if (!eat(&s, "text_model_encoder_layers_") || !eat_int(&s, &L) || *s++ != '_') return false;
    static const struct { const char *hf, *oc; int slice; } t[] = {
        {"self_attn_q_proj", "attn_in_proj", 0}, {"self_attn_k_proj", "attn_in_proj", 1},
        {"self_attn_v_proj", "attn_in_proj", 2}, {"self_attn_out_proj", "attn_out_proj", -1},
        {"mlp_fc1", "mlp_c_fc", -1},             {"mlp_fc2", "mlp_c_proj", -1},
        {"layer_norm1", "ln_1", -1},             {"layer_norm2", "ln_2", -1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(s, t[i].hf)) {
            *slice = t[i].slice;
            return snprintf(out, n, "transformer_resblocks_%d_%s", L, t[i].oc) < (int)n;
        }
    return false;
}

/* Finds the base weight of one module: returns its index (-1 none, -2 ambiguous), and the row
   slice for fused q/k/v. */
static int64_t find_target(const key_map *km, const char *mod, int *slice) {
    static const struct { const char *prefix, *comp[3]; } k_adapter_prefixes[] = {
        {"lora_unet_", {"unet", "any", NULL}},
        {"lora_te1_", {"te1", "te", "any"}},
        {"lora_te2_", {"te2", "any", NULL}},
        {"lora_te_", {"te", "te1", "any"}},
        {"lycoris_", {"any", "unet", NULL}},
    };
    char flat[1024], conv[1024];
    *slice = -1;
    size_t ml = strlen(mod);
    if (ml >= sizeof flat) return -1;
    for (size_t i = 0; i <= ml; i++) flat[i] = mod[i] == '.' ? '_' : mod[i];
    int64_t hit;
    for (size_t p = 0; p < sizeof k_adapter_prefixes / sizeof k_adapter_prefixes[0]; p++) {
        size_t pl = strlen(k_adapter_prefixes[p].prefix);
        if (strncmp(flat, k_adapter_prefixes[p].prefix, pl)) continue;
        const char *rest = flat + pl;
        for (int c = 0; c < 3 && k_adapter_prefixes[p].comp[c]; c++)
            if ((hit = map_find(km, k_adapter_prefixes[p].comp[c], rest)) != -1) return hit;
        if (!strcmp(k_adapter_prefixes[p].prefix, "lora_unet_") || !strcmp(k_adapter_prefixes[p].prefix, "lycoris_"))
            for (int alt = 0; alt < 2; alt++)
                if (sgm_name(rest, conv, sizeof conv, alt) && (hit = map_find(km, "unet", conv)) != -1) return hit;
        if (!strcmp(k_adapter_prefixes[p].prefix, "lora_te2_") && openclip_name(rest, conv, sizeof conv, slice) &&
            (hit = map_find(km, "te2oc", conv)) != -1)
            return hit;
        *slice = -1;
        return -1;
    }
    return map_find(km, "any", flat);   /* a plain module path, or an unprefixed name */
}

static int64_t prod_dims(int32_t ndim, const int64_t *shape, int from) {
    int64_t n = 1;
    for (int i = from; i < ndim; i++) n *= shape[i];
    return n;
}

/* The adapter's own dimensions against the base tensor's shape (rows: the slice's rows). */
static bool shape_agrees(const lyco_af_module *m, const lyco_af_base_tensor *b, int64_t rows, char *why, size_t n) {
    int64_t O = rows ? rows : (b->ndim ? b->shape[0] : 1);
    if (m->algo == LYCO_ALGO_NORM) {
        if (b->ndim != 1 || b->shape[0] != m->out_dim) {
            snprintf(why, n, "base %s has %d dims; expected a 1-D norm weight of %lld", b->name, (int)b->ndim, (long long)m->out_dim);
            return false;
        }
        return true;
    }
    if (b->ndim < 2 || b->ndim > 5) {
        snprintf(why, n, "base %s has %d dims; expected a 2-D (linear) or 3–5-D (conv) weight", b->name, (int)b->ndim);
        return false;
    }
    int64_t cols = prod_dims(b->ndim, b->shape, 1);
    bool ok = (m->out_dim < 0 || m->out_dim == O) && (m->cols < 0 || m->cols == cols) && (m->in_dim < 0 || m->in_dim == b->shape[1]);
    if (ok && m->kdims > 0 && m->algo != LYCO_ALGO_IA3) {
        int bk = b->ndim - 2;
        int64_t mk = 1;
        for (int i = 0; i < m->kdims; i++) mk *= m->kernel[i];
        if (bk != m->kdims && !(mk == 1 && prod_dims(b->ndim, b->shape, 2) == 1)) ok = false;
        for (int i = 0; ok && i < m->kdims && i < bk; i++) ok = m->kernel[i] == b->shape[2 + i];
    }
    if (!ok) {
        int o = snprintf(why, n, "base %s has shape [", b->name);
        for (int i = 0; i < b->ndim && o < (int)n; i++) o += snprintf(why + o, n - (size_t)o, "%s%lld", i ? ", " : "", (long long)b->shape[i]);
        if (o < (int)n)
            snprintf(why + o, n - (size_t)o, "]%s; the adapter's tensors say O = %lld, I·K = %lld, I = %lld (-1: not known)",
                     rows ? " (row slice)" : "", (long long)m->out_dim, (long long)m->cols, (long long)m->in_dim);
    }
    return ok;
}

/* The base bias a Full (diff_b) or Norm (b_norm) module also changes. */
static int64_t find_bias(const key_map *km, const lyco_af_base_tensor *w) {
    char name[1024];
    size_t n = strlen(w->name);
    if (n < 6 || n >= sizeof name || strcmp(w->name + n - 6, "weight")) return -1;
    memcpy(name, w->name, n - 6);
    strcpy(name + n - 6, "bias");
    return map_find(km, "=", name);
}

lyco_status lyco_af_map(const lyco_af_file *f, const lyco_af_base_tensor *base, int64_t nbase, lyco_af_target *out) {
    if (!f || !out || (!base && nbase)) return lyco_fail(LYCO_ERR_NULL, "adapter map: %s is NULL", !f ? "file" : !out ? "out" : "base");
    key_map km = {0};
    lyco_status st = LYCO_OK;
    for (int64_t i = 0; i < nbase && !st; i++) st = index_base(&km, base[i].name, i);
    if (st) { map_free(&km); return st; }
    if (km.n) qsort(km.e, (size_t)km.n, sizeof *km.e, cmp_entry);
    for (int64_t i = 0; i < f->n_mods; i++) {
        const lyco_af_module *m = &f->mods[i];
        lyco_af_target *t = &out[i];
        memset(t, 0, sizeof *t);
        t->module = i;
        t->weight = t->bias = -1;
        if (m->algo == LYCO_ALGO_NONE) {
            t->problem = LYCO_AF_NOT_MERGEABLE;
            snprintf(t->why, sizeof t->why, "no algorithm detected from the module's keys");
            continue;
        }
        int slice;
        int64_t w = find_target(&km, m->name, &slice);
        if (w == -2) {
            t->problem = LYCO_AF_UNMATCHED;
            snprintf(t->why, sizeof t->why, "ambiguous: two base tensors flatten to this module's name");
            continue;
        }
        if (w < 0) {
            t->problem = LYCO_AF_UNMATCHED;
            snprintf(t->why, sizeof t->why, "no base tensor has this module's name");
            continue;
        }
        const lyco_af_base_tensor *b = &base[w];
        if (slice >= 0) {
            if (b->ndim != 2 || b->shape[0] % 3) {
                t->problem = LYCO_AF_SHAPE_MISMATCH;
                snprintf(t->why, sizeof t->why, "base %s is not a fused q/k/v weight (3·D rows, 2-D)", b->name);
                continue;
            }
            t->rows = b->shape[0] / 3;
            t->row0 = slice * t->rows;
        }
        if (!shape_agrees(m, b, t->rows, t->why, sizeof t->why)) {
            t->problem = LYCO_AF_SHAPE_MISMATCH;
            continue;
        }
        t->weight = w;
        if (m->slot[LYCO_DIFF_B] || m->slot[LYCO_B_NORM]) {
            t->bias = slice >= 0 ? -1 : find_bias(&km, b);
            if (t->bias < 0 || base[t->bias].ndim != 1 || base[t->bias].shape[0] != m->out_dim) {
                t->problem = LYCO_AF_SHAPE_MISMATCH;
                t->weight = t->bias = -1;
                snprintf(t->why, sizeof t->why, "the module changes a bias but the base has no 1-D bias of %lld beside %s",
                         (long long)m->out_dim, b->name);
            }
        }
    }
    map_free(&km);
    return LYCO_OK;
}
