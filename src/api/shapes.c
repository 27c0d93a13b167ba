/*
 * shapes.c — per-algorithm shape rules (ALGORITHMS.md §2, §3 loader rules): which slots an
 * algorithm needs or accepts, the shape each must have given the layer, the dimensions derived
 * from them, and the scale s (§1.2). Layouts the loader rules call interchangeable are accepted:
 * r×(I·K) or r×I×k, O×r or O×r×1…, O or O×1… .
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api.h"

/* ---- helpers ---- */

/* Shape of t with trailing size-1 dims dropped (keeping at least `keep` dims). */
static int squeeze_tail(const DLTensor *t, int keep, int64_t *out) {
    int n = t->ndim;
    while (n > keep && t->shape[n - 1] == 1) n--;
    for (int i = 0; i < n; i++) out[i] = t->shape[i];
    return n;
}

static lyco_status shape_error(lyco_slot s, const DLTensor *t, const char *expected) {
    char got[96];
    lyco_shape_str(t, got, sizeof got);
    return lyco_fail(LYCO_ERR_SHAPE, "%s has shape %s; expected %s", lyco_slot_name(s), got, expected);
}

/* t is a matrix rows×cols, possibly with trailing size-1 dims. */
static bool is_matrix(const DLTensor *t, int64_t rows, int64_t cols) {
    int64_t sh[8];
    int n = squeeze_tail(t, 2, sh);
    return n == 2 && sh[0] == rows && sh[1] == cols;
}

/* t is rows × (I·K): either 2-D rows×(I·K), or rows×I×k (full kernel dims). */
static bool is_rows_by_ik(const DLTensor *t, const lyco_layer *l, int64_t rows, int64_t K) {
    if (t->ndim == 2) return t->shape[0] == rows && t->shape[1] == l->in_features * K;
    if (l->kind != LYCO_LAYER_CONV || t->ndim != 2 + l->conv_dims) return false;
    if (t->shape[0] != rows || t->shape[1] != l->in_features) return false;
    for (int i = 0; i < l->conv_dims; i++)
        if (t->shape[2 + i] != l->kernel[i]) return false;
    return true;
}

/* t is a×b×k (full kernel dims); for linear a×b. */
static bool is_core(const DLTensor *t, const lyco_layer *l, int64_t a, int64_t b) {
    int nd = l->kind == LYCO_LAYER_CONV ? l->conv_dims : 0;
    if (t->ndim != 2 + nd || t->shape[0] != a || t->shape[1] != b) return false;
    for (int i = 0; i < nd; i++)
        if (t->shape[2 + i] != l->kernel[i]) return false;
    return true;
}

/* A vector of n elements: shape (n), or n with leading/trailing 1s ((1,n,1,…), (n,1,…)). */
static bool is_vector(const DLTensor *t, int64_t n) {
    int64_t count = 1, big = 0;
    for (int i = 0; i < t->ndim; i++) {
        count *= t->shape[i];
        if (t->shape[i] != 1) big++;
    }
    return count == n && big <= 1;
}

static lyco_status need(const lyco_adapter *a, lyco_slot s) {
    if (!a->tensor[s])
        return lyco_fail(LYCO_ERR_NULL, "adapter slot %s is NULL; algorithm %s needs it", lyco_slot_name(s), lyco_algo_name(a->algo));
    return LYCO_OK;
}

/* Slots each algorithm may use (the rest must be NULL). */
static bool slot_allowed(lyco_algo algo, lyco_slot s) {
    if (s == LYCO_MODULE_MASK) return true;
    switch (algo) {
    case LYCO_ALGO_LOCON:
        return s == LYCO_LORA_DOWN || s == LYCO_LORA_UP || s == LYCO_LORA_MID || s == LYCO_DORA_SCALE ||
               s == LYCO_SCALAR || s == LYCO_RANK_MASK;
    case LYCO_ALGO_LOHA:
        return (s >= LYCO_HADA_W1_A && s <= LYCO_HADA_T2) || s == LYCO_DORA_SCALE || s == LYCO_SCALAR || s == LYCO_RANK_MASK;
    case LYCO_ALGO_LOKR:
        return (s >= LYCO_LOKR_W1 && s <= LYCO_LOKR_T2) || s == LYCO_DORA_SCALE || s == LYCO_SCALAR || s == LYCO_RANK_MASK;
    case LYCO_ALGO_DIAG_OFT: return s == LYCO_OFT_BLOCKS || s == LYCO_RESCALE || s == LYCO_RANK_MASK;
    case LYCO_ALGO_BOFT: return s == LYCO_OFT_BLOCKS || s == LYCO_RESCALE;
    case LYCO_ALGO_IA3: return s == LYCO_IA3_WEIGHT;
    case LYCO_ALGO_GLORA:
        return (s >= LYCO_GLORA_A1 && s <= LYCO_GLORA_B2) || s == LYCO_SCALAR || s == LYCO_RANK_MASK || s == LYCO_RANK_MASK_B;
    case LYCO_ALGO_DYLORA: return s == LYCO_LORA_DOWN || s == LYCO_LORA_UP;
    case LYCO_ALGO_FULL: return s == LYCO_DIFF || s == LYCO_DIFF_B;
    case LYCO_ALGO_NORM: return s == LYCO_W_NORM || s == LYCO_B_NORM || s == LYCO_RANK_MASK;
    default: return false;
    }
}

static double alpha_scale(const lyco_adapter *a, int64_t r) {
    if (!isnan(a->scale)) return a->scale;
    double alpha = (isnan(a->alpha) || a->alpha == 0.0) ? (double)r : a->alpha;
    double rho = (a->flags & LYCO_FLAG_RS_LORA) ? sqrt((double)r) : (double)r;
    return r > 0 ? alpha / rho : 1.0;
}

/* ---- per-algorithm rules ---- */

static lyco_status check_locon(const lyco_adapter *a, lyco_dims *d) {
    const lyco_layer *l = &a->layer;
    const DLTensor *down = a->tensor[LYCO_LORA_DOWN], *up = a->tensor[LYCO_LORA_UP], *mid = a->tensor[LYCO_LORA_MID];
    lyco_status st;
    if ((st = need(a, LYCO_LORA_DOWN)) || (st = need(a, LYCO_LORA_UP))) return st;
    int64_t r = down->ndim >= 1 ? down->shape[0] : -1;
    d->r = r;
    d->tucker = mid != NULL;
    if (mid) {
        if (l->kind != LYCO_LAYER_CONV)
            return lyco_fail(LYCO_ERR_SHAPE, "lora_mid is given but the layer is not a conv; Tucker needs a conv layer");
        if (!is_matrix(down, r, l->in_features)) return shape_error(LYCO_LORA_DOWN, down, "r×I or r×I×1… (Tucker)");
        if (!is_core(mid, l, r, r)) return shape_error(LYCO_LORA_MID, mid, "r×r×k (Tucker core, k = the layer's kernel)");
    } else if (!is_rows_by_ik(down, l, r, d->K)) {
        return shape_error(LYCO_LORA_DOWN, down, l->kind == LYCO_LAYER_CONV ? "r×I×k or r×(I·K)" : "r×I");
    }
    if (!is_matrix(up, l->out_features, r)) return shape_error(LYCO_LORA_UP, up, "O×r (or O×r×1…) with r = lora_down's first dim");
    return LYCO_OK;
}

static lyco_status check_loha(const lyco_adapter *a, lyco_dims *d) {
    const lyco_layer *l = &a->layer;
    static const lyco_slot req[4] = {LYCO_HADA_W1_A, LYCO_HADA_W1_B, LYCO_HADA_W2_A, LYCO_HADA_W2_B};
    lyco_status st;
    for (int i = 0; i < 4; i++)
        if ((st = need(a, req[i]))) return st;
    const DLTensor *t1 = a->tensor[LYCO_HADA_T1], *t2 = a->tensor[LYCO_HADA_T2];
    if ((t1 == NULL) != (t2 == NULL))
        return lyco_fail(LYCO_ERR_NULL, "%s is NULL but %s is not; LoHa Tucker needs both hada_t1 and hada_t2",
                         t1 ? "hada_t2" : "hada_t1", t1 ? "hada_t1" : "hada_t2");
    d->tucker = t1 != NULL;
    for (int w = 0; w < 2; w++) {
        lyco_slot sa = w ? LYCO_HADA_W2_A : LYCO_HADA_W1_A, sb = w ? LYCO_HADA_W2_B : LYCO_HADA_W1_B;
        const DLTensor *A = a->tensor[sa], *B = a->tensor[sb];
        int64_t r;
        if (d->tucker) {
            if (l->kind != LYCO_LAYER_CONV) return lyco_fail(LYCO_ERR_SHAPE, "hada_t1/hada_t2 given but the layer is not a conv; Tucker needs a conv layer");
            r = A->ndim == 2 ? A->shape[0] : -1;
            if (!is_matrix(A, r, l->out_features)) return shape_error(sa, A, "r×O (Tucker layout)");
            if (!is_matrix(B, r, l->in_features)) return shape_error(sb, B, "r×I (Tucker layout)");
            const DLTensor *T = w ? t2 : t1;
            if (!is_core(T, l, r, r)) return shape_error(w ? LYCO_HADA_T2 : LYCO_HADA_T1, T, "r×r×k");
        } else {
            r = A->ndim >= 2 ? A->shape[1] : -1;
            if (!is_matrix(A, l->out_features, r)) return shape_error(sa, A, "O×r");
            if (!is_rows_by_ik(B, l, r, d->K)) return shape_error(sb, B, "r×(I·K) with r = the matching hada_w*_a's rank");
        }
        if (w) d->r2 = r; else d->r = r;
    }
    return LYCO_OK;
}

static lyco_status check_lokr(const lyco_adapter *a, lyco_dims *d) {
    const lyco_layer *l = &a->layer;
    const DLTensor *w1 = a->tensor[LYCO_LOKR_W1], *w1a = a->tensor[LYCO_LOKR_W1_A], *w1b = a->tensor[LYCO_LOKR_W1_B];
    const DLTensor *w2 = a->tensor[LYCO_LOKR_W2], *w2a = a->tensor[LYCO_LOKR_W2_A], *w2b = a->tensor[LYCO_LOKR_W2_B];
    const DLTensor *t2 = a->tensor[LYCO_LOKR_T2];
    int64_t r = 0;
    if (w1) {
        if (w1a || w1b) return lyco_fail(LYCO_ERR_INVALID, "lokr_w1 and lokr_w1_a/lokr_w1_b are both given; expected one form of W1");
        if (w1->ndim != 2) return shape_error(LYCO_LOKR_W1, w1, "a×c (2-D)");
        d->lk_a = w1->shape[0];
        d->lk_c = w1->shape[1];
        d->lk_w1_full = true;
    } else {
        if (!w1a || !w1b) return lyco_fail(LYCO_ERR_NULL, "lokr_w1 is NULL and %s is NULL; expected lokr_w1, or lokr_w1_a and lokr_w1_b", w1a ? "lokr_w1_b" : "lokr_w1_a");
        if (w1a->ndim != 2 || w1b->ndim != 2 || w1a->shape[1] != w1b->shape[0])
            return shape_error(LYCO_LOKR_W1_B, w1b, "r×c with lokr_w1_a a×r");
        d->lk_a = w1a->shape[0];
        d->lk_c = w1b->shape[1];
        r = w1a->shape[1];
    }
    if (d->lk_a <= 0 || d->lk_c <= 0 || l->out_features % d->lk_a || l->in_features % d->lk_c)
        return lyco_fail(LYCO_ERR_SHAPE, "LoKr W1 is %lld×%lld; expected a×c with a dividing O = %lld and c dividing I = %lld",
                         (long long)d->lk_a, (long long)d->lk_c, (long long)l->out_features, (long long)l->in_features);
    d->lk_b = l->out_features / d->lk_a;
    d->lk_d = l->in_features / d->lk_c;
    if (w2) {
        if (w2a || w2b || t2) return lyco_fail(LYCO_ERR_INVALID, "lokr_w2 and lokr_w2_a/lokr_w2_b/lokr_t2 are both given; expected one form of W2");
        if (!is_rows_by_ik(w2, &(lyco_layer){.kind = l->kind, .in_features = d->lk_d, .conv_dims = l->conv_dims,
                                              .kernel = {l->kernel[0], l->kernel[1], l->kernel[2]}}, d->lk_b, d->K))
            return shape_error(LYCO_LOKR_W2, w2, "b×d×k (or b×(d·K)) with O = a·b, I = c·d");
        d->lk_w2_full = true;
    } else {
        if (!w2a || !w2b) return lyco_fail(LYCO_ERR_NULL, "lokr_w2 is NULL and %s is NULL; expected lokr_w2, or lokr_w2_a and lokr_w2_b", w2a ? "lokr_w2_b" : "lokr_w2_a");
        d->tucker = t2 != NULL;
        int64_t r2;
        if (t2) {
            if (l->kind != LYCO_LAYER_CONV) return lyco_fail(LYCO_ERR_SHAPE, "lokr_t2 given but the layer is not a conv; Tucker needs a conv layer");
            r2 = w2a->ndim == 2 ? w2a->shape[0] : -1;
            if (!is_matrix(w2a, r2, d->lk_b)) return shape_error(LYCO_LOKR_W2_A, w2a, "r×b (Tucker layout)");
            if (!is_matrix(w2b, r2, d->lk_d)) return shape_error(LYCO_LOKR_W2_B, w2b, "r×d (Tucker layout)");
            if (!is_core(t2, l, r2, r2)) return shape_error(LYCO_LOKR_T2, t2, "r×r×k");
        } else {
            r2 = w2a->ndim == 2 ? w2a->shape[1] : -1;
            if (!is_matrix(w2a, d->lk_b, r2)) return shape_error(LYCO_LOKR_W2_A, w2a, "b×r");
            if (!is_rows_by_ik(w2b, &(lyco_layer){.kind = l->kind, .in_features = d->lk_d, .conv_dims = l->conv_dims,
                                                   .kernel = {l->kernel[0], l->kernel[1], l->kernel[2]}}, r2, d->K))
                return shape_error(LYCO_LOKR_W2_B, w2b, "r×(d·K) or r×d×k");
        }
        if (r && r2 != r) return lyco_fail(LYCO_ERR_SHAPE, "LoKr ranks differ: W1 rank %lld, W2 rank %lld; expected one rank", (long long)r, (long long)r2);
        r = r2;
    }
    d->r = r;
    return LYCO_OK;
}

static lyco_status check_rescale(const lyco_adapter *a, int64_t O) {
    const DLTensor *t = a->tensor[LYCO_RESCALE];
    if (t && !is_vector(t, O)) return shape_error(LYCO_RESCALE, t, "O or O×1…");
    return LYCO_OK;
}

static lyco_status check_oft(const lyco_adapter *a, lyco_dims *d) {
    lyco_status st;
    if ((st = need(a, LYCO_OFT_BLOCKS))) return st;
    const DLTensor *b = a->tensor[LYCO_OFT_BLOCKS];
    int64_t O = a->layer.out_features;
    if (b->ndim != 3 || b->shape[1] != b->shape[2] || b->shape[0] * b->shape[1] != O)
        return shape_error(LYCO_OFT_BLOCKS, b, "nb×bs×bs with nb·bs = O");
    d->nb = b->shape[0];
    d->bs = b->shape[1];
    d->stages = 1;
    return check_rescale(a, O);
}

static lyco_status check_boft(const lyco_adapter *a, lyco_dims *d) {
    lyco_status st;
    if ((st = need(a, LYCO_OFT_BLOCKS))) return st;
    const DLTensor *b = a->tensor[LYCO_OFT_BLOCKS];
    int64_t O = a->layer.out_features;
    if (b->ndim != 4 || b->shape[2] != b->shape[3] || b->shape[1] * b->shape[2] != O)
        return shape_error(LYCO_OFT_BLOCKS, b, "M×nb×b×b with nb·b = O");
    d->stages = b->shape[0];
    d->nb = b->shape[1];
    d->bs = b->shape[2];
    int64_t log2nb = 0;
    while ((1ll << log2nb) < d->nb) log2nb++;
    if ((1ll << log2nb) != d->nb || d->bs % 2 || d->stages < 1 || d->stages > log2nb + 1)
        return lyco_fail(LYCO_ERR_SHAPE, "oft_blocks (BOFT) is %lld×%lld×%lld×%lld; expected nb a power of two, b even and 1 ≤ M ≤ log2(nb)+1",
                         (long long)d->stages, (long long)d->nb, (long long)d->bs, (long long)d->bs);
    return check_rescale(a, O);
}

static lyco_status check_ia3(const lyco_adapter *a, lyco_dims *d) {
    (void)d;
    lyco_status st;
    if ((st = need(a, LYCO_IA3_WEIGHT))) return st;
    int64_t D = a->ia3_on_input ? a->layer.in_features : a->layer.out_features;
    if (!is_vector(a->tensor[LYCO_IA3_WEIGHT], D))
        return shape_error(LYCO_IA3_WEIGHT, a->tensor[LYCO_IA3_WEIGHT], a->ia3_on_input ? "I or 1×I×1… (on input)" : "O or 1×O×1… (on output)");
    return LYCO_OK;
}

static lyco_status check_glora(const lyco_adapter *a, lyco_dims *d) {
    const lyco_layer *l = &a->layer;
    static const lyco_slot req[4] = {LYCO_GLORA_A1, LYCO_GLORA_A2, LYCO_GLORA_B1, LYCO_GLORA_B2};
    lyco_status st;
    for (int i = 0; i < 4; i++)
        if ((st = need(a, req[i]))) return st;
    const DLTensor *a1 = a->tensor[LYCO_GLORA_A1];
    int64_t r = a1->ndim >= 2 ? a1->shape[1] : -1;
    d->r = r;
    if (!is_matrix(a1, l->in_features, r)) return shape_error(LYCO_GLORA_A1, a1, "I×r");
    if (!is_matrix(a->tensor[LYCO_GLORA_A2], r, l->in_features)) return shape_error(LYCO_GLORA_A2, a->tensor[LYCO_GLORA_A2], "r×I");
    if (!is_matrix(a->tensor[LYCO_GLORA_B1], l->out_features, r)) return shape_error(LYCO_GLORA_B1, a->tensor[LYCO_GLORA_B1], "O×r");
    if (!is_rows_by_ik(a->tensor[LYCO_GLORA_B2], l, r, d->K)) return shape_error(LYCO_GLORA_B2, a->tensor[LYCO_GLORA_B2], "r×I×k (conv) or r×I");
    return LYCO_OK;
}

static lyco_status check_dylora(const lyco_adapter *a, lyco_dims *d) {
    lyco_status st = check_locon(a, d);
    if (st) return st;
    if (d->tucker) return lyco_fail(LYCO_ERR_INVALID, "DyLoRA has no Tucker form; lora_mid must be NULL");
    int64_t bs = a->dylora_block_size;
    if (bs <= 0 || d->r % bs)
        return lyco_fail(LYCO_ERR_INVALID, "dylora_block_size is %lld; expected a positive divisor of the rank %lld", (long long)bs, (long long)d->r);
    int64_t nb = d->r / bs, t = a->dylora_active_blocks ? a->dylora_active_blocks : nb;
    if (t < 1 || t > nb)
        return lyco_fail(LYCO_ERR_INVALID, "dylora_active_blocks is %d; expected 1..%lld (0 = all)", a->dylora_active_blocks, (long long)nb);
    d->dyl_bs = bs;
    d->dyl_blocks = t;
    return LYCO_OK;
}

static lyco_status check_full(const lyco_adapter *a, lyco_dims *d) {
    (void)d;
    lyco_status st;
    if ((st = need(a, LYCO_DIFF))) return st;
    const lyco_layer *l = &a->layer;
    const DLTensor *t = a->tensor[LYCO_DIFF];
    int64_t g = l->kind == LYCO_LAYER_CONV ? l->groups : 1;
    if (!is_rows_by_ik(t, &(lyco_layer){.kind = l->kind, .in_features = l->in_features / g, .conv_dims = l->conv_dims,
                                          .kernel = {l->kernel[0], l->kernel[1], l->kernel[2]}}, l->out_features, d->K))
        return shape_error(LYCO_DIFF, t, "the base weight's shape O×(I/groups)×k");
    if (a->tensor[LYCO_DIFF_B] && !is_vector(a->tensor[LYCO_DIFF_B], l->out_features))
        return shape_error(LYCO_DIFF_B, a->tensor[LYCO_DIFF_B], "O");
    return LYCO_OK;
}

static lyco_status check_norm(const lyco_adapter *a, lyco_dims *d) {
    (void)d;
    lyco_status st;
    if ((st = need(a, LYCO_W_NORM))) return st;
    if (a->layer.kind != LYCO_LAYER_NORM)
        return lyco_fail(LYCO_ERR_INVALID, "algorithm norm needs a norm layer (lyco_layer_norm); the layer kind is %d", (int)a->layer.kind);
    int64_t C = a->layer.out_features;
    if (!is_vector(a->tensor[LYCO_W_NORM], C)) return shape_error(LYCO_W_NORM, a->tensor[LYCO_W_NORM], "C");
    if (a->tensor[LYCO_B_NORM] && !is_vector(a->tensor[LYCO_B_NORM], C)) return shape_error(LYCO_B_NORM, a->tensor[LYCO_B_NORM], "C");
    return LYCO_OK;
}

/* DoRA: dora_scale O×1… (per output row) or 1×I×1… (per input channel). */
static lyco_status check_dora(const lyco_adapter *a, lyco_dims *d) {
    const DLTensor *t = a->tensor[LYCO_DORA_SCALE];
    if (!t) return LYCO_OK;
    int64_t O = a->layer.out_features, I = a->layer.in_features;
    bool out_ok = t->ndim >= 1 && t->shape[0] == O && lyco_numel(t) == O;
    bool in_ok = t->ndim >= 2 && t->shape[0] == 1 && t->shape[1] == I && lyco_numel(t) == I;
    int want = a->wd_on_out;
    if (want < -1 || want > 1) return lyco_fail(LYCO_ERR_INVALID, "wd_on_out is %d; expected 1 (per output row), 0 (per input channel) or -1 (infer)", want);
    if (want == 1 && !out_ok) return shape_error(LYCO_DORA_SCALE, t, "O×1… (wd_on_out = 1)");
    if (want == 0 && !in_ok) return shape_error(LYCO_DORA_SCALE, t, "1×I×1… (wd_on_out = 0)");
    if (want == -1 && !out_ok && !in_ok) return shape_error(LYCO_DORA_SCALE, t, "O×1… or 1×I×1…");
    d->dora = true;
    d->dora_on_out = want == 1 || (want == -1 && out_ok);
    return LYCO_OK;
}

lyco_status lyco_shapes_check(const lyco_adapter *a, lyco_dims *d, double *scale) {
    const lyco_layer *l = &a->layer;
    memset(d, 0, sizeof *d);
    d->O = l->out_features;
    d->I = l->in_features;
    d->K = 1;
    d->conv_dims = l->kind == LYCO_LAYER_CONV ? l->conv_dims : 0;
    for (int i = 0; i < d->conv_dims; i++) d->K *= l->kernel[i];
    if ((int)a->algo <= LYCO_ALGO_NONE || a->algo >= LYCO_ALGO_COUNT)
        return lyco_fail(LYCO_ERR_INVALID, "adapter algo is %d; expected a lyco_algo value from LYCO_ALGO_LOCON to LYCO_ALGO_NORM", (int)a->algo);
    for (int s = 0; s < LYCO_SLOT_COUNT; s++)
        if (a->tensor[s] && !slot_allowed(a->algo, (lyco_slot)s))
            return lyco_fail(LYCO_ERR_INVALID, "adapter slot %s is set, but algorithm %s does not use it; expected NULL",
                             lyco_slot_name((lyco_slot)s), lyco_algo_name(a->algo));
    bool builds_dw = a->algo != LYCO_ALGO_FULL && a->algo != LYCO_ALGO_NORM &&
                     !(a->algo == LYCO_ALGO_IA3 && !a->ia3_on_input);
    if (l->kind == LYCO_LAYER_CONV && l->groups != 1 && builds_dw)
        return lyco_fail(LYCO_ERR_UNSUPPORTED, "layer groups is %lld; algorithm %s builds a full ΔW and needs groups = 1 (ALGORITHMS.md §8 #12)",
                         (long long)l->groups, lyco_algo_name(a->algo));
    if (a->algo != LYCO_ALGO_NORM && l->kind == LYCO_LAYER_NORM)
        return lyco_fail(LYCO_ERR_INVALID, "layer is a norm layer; algorithm %s needs a linear or conv layer", lyco_algo_name(a->algo));
    lyco_status st;
    switch (a->algo) {
    case LYCO_ALGO_LOCON: st = check_locon(a, d); break;
    case LYCO_ALGO_LOHA: st = check_loha(a, d); break;
    case LYCO_ALGO_LOKR: st = check_lokr(a, d); break;
    case LYCO_ALGO_DIAG_OFT: st = check_oft(a, d); break;
    case LYCO_ALGO_BOFT: st = check_boft(a, d); break;
    case LYCO_ALGO_IA3: st = check_ia3(a, d); break;
    case LYCO_ALGO_GLORA: st = check_glora(a, d); break;
    case LYCO_ALGO_DYLORA: st = check_dylora(a, d); break;
    case LYCO_ALGO_FULL: st = check_full(a, d); break;
    case LYCO_ALGO_NORM: st = check_norm(a, d); break;
    default:
        return lyco_fail(LYCO_ERR_INVALID, "adapter algo is %d; expected a lyco_algo value from LYCO_ALGO_LOCON to LYCO_ALGO_NORM", (int)a->algo);
    }
    if (st) return st;
    if ((st = check_dora(a, d))) return st;
    switch (a->algo) {
    case LYCO_ALGO_LOCON:
    case LYCO_ALGO_LOHA:
    case LYCO_ALGO_GLORA: *scale = alpha_scale(a, d->r); break;
    case LYCO_ALGO_LOKR: *scale = d->r ? alpha_scale(a, d->r) : (isnan(a->scale) ? 1.0 : a->scale); break;
    case LYCO_ALGO_DYLORA: {
        double alpha = (isnan(a->alpha) || a->alpha == 0.0) ? (double)d->r : a->alpha;
        *scale = isnan(a->scale) ? alpha / (double)d->dyl_blocks : a->scale;
        break;
    }
    default: *scale = 1.0; break;
    }
    return LYCO_OK;
}
