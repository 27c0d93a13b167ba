/*
 * names.c — names of algorithms, slots and directions; adapter and layer initialisers.
 */
#include <math.h>
#include <string.h>

#include "api.h"

static const char *const algo_names[LYCO_ALGO_COUNT] = {
    "none", "locon", "loha", "lokr", "diag_oft", "boft", "ia3", "glora", "dylora", "full", "norm",
};

const char *lyco_algo_name(lyco_algo a) {
    return (int)a >= 0 && a < LYCO_ALGO_COUNT ? algo_names[a] : "invalid";
}

lyco_status lyco_algo_from_name(const char *name, lyco_algo *out) {
    if (!name || !out) return lyco_fail(LYCO_ERR_NULL, "algo_from_name: %s is NULL", name ? "out" : "name");
    static const struct { const char *alias; lyco_algo a; } aliases[] = {
        {"lora", LYCO_ALGO_LOCON}, {"diag-oft", LYCO_ALGO_DIAG_OFT}, {"oft", LYCO_ALGO_DIAG_OFT},
    };
    for (int a = 1; a < LYCO_ALGO_COUNT; a++)
        if (!strcmp(name, algo_names[a])) { *out = (lyco_algo)a; return LYCO_OK; }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(name, aliases[i].alias)) { *out = aliases[i].a; return LYCO_OK; }
    return lyco_fail(LYCO_ERR_INVALID, "algorithm name is \"%s\"; expected one of: locon (lora), loha, lokr, diag_oft, boft, ia3, glora, dylora, full, norm", name);
}

const char *lyco_slot_name(lyco_slot s) {
    static const char *const n[LYCO_SLOT_COUNT] = {
        "lora_down", "lora_up", "lora_mid", "hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b",
        "hada_t1", "hada_t2", "lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a",
        "lokr_w2_b", "lokr_t2", "oft_blocks", "rescale", "ia3_weight", "glora_a1", "glora_a2",
        "glora_b1", "glora_b2", "dora_scale", "diff", "diff_b", "w_norm", "b_norm", "scalar",
        "rank_mask", "rank_mask_b", "module_mask",
    };
    return (int)s >= 0 && s < LYCO_SLOT_COUNT ? n[s] : "invalid";
}

const char *lyco_direction_name(lyco_direction d) {
    static const char *const n[LYCO_DIR_COUNT] = {"merge_fwd", "merge_bwd", "bypass_fwd", "bypass_bwd"};
    return (int)d >= 0 && d < LYCO_DIR_COUNT ? n[d] : "invalid";
}

void lyco_adapter_init(lyco_adapter *a, lyco_algo algo) {
    if (!a) return;
    memset(a, 0, sizeof *a);
    a->algo = algo;
    a->alpha = NAN;
    a->scale = NAN;
    a->multiplier = 1.0;
    a->constraint = 0.0;
    a->wd_on_out = -1;
    a->ia3_on_input = 0;
    a->dylora_block_size = 1;
    a->dylora_active_blocks = 0;
    a->flags = 0;
    lyco_layer_linear(&a->layer, 0, 0);
}

void lyco_layer_linear(lyco_layer *l, int64_t out_features, int64_t in_features) {
    if (!l) return;
    memset(l, 0, sizeof *l);
    l->kind = LYCO_LAYER_LINEAR;
    l->out_features = out_features;
    l->in_features = in_features;
    l->groups = 1;
    for (int i = 0; i < 3; i++) l->kernel[i] = l->stride[i] = l->dilation[i] = 1;
}

lyco_status lyco_layer_conv(lyco_layer *l, int32_t dims, int64_t out_ch, int64_t in_ch,
                            const int64_t *kernel, const int64_t *stride,
                            const int64_t *padding, const int64_t *dilation, int64_t groups) {
    if (!l) return lyco_fail(LYCO_ERR_NULL, "layer_conv: layer is NULL");
    if (dims < 1 || dims > 3) return lyco_fail(LYCO_ERR_INVALID, "layer_conv: dims is %d; expected 1, 2 or 3", dims);
    lyco_layer_linear(l, out_ch, in_ch);
    l->kind = LYCO_LAYER_CONV;
    l->conv_dims = dims;
    l->groups = groups;
    for (int i = 0; i < dims; i++) {
        l->kernel[i] = kernel ? kernel[i] : 1;
        l->stride[i] = stride ? stride[i] : 1;
        l->padding[i] = padding ? padding[i] : 0;
        l->dilation[i] = dilation ? dilation[i] : 1;
    }
    return LYCO_OK;
}

void lyco_layer_norm(lyco_layer *l, lyco_norm_kind kind, int64_t channels, int64_t groups, double eps) {
    if (!l) return;
    lyco_layer_linear(l, channels, channels);
    l->kind = LYCO_LAYER_NORM;
    l->norm_kind = kind;
    l->norm_groups = groups;
    l->norm_eps = eps;
}
