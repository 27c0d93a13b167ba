/*
 * dispatch_simple.c — host helpers shared by the IA3, Full and Norm dispatchers (see
 * dispatch_simple.h): activation splits, conv geometry, scratch views, copies and zero fills.
 */
#include <string.h>

#include "cuda/dispatch_simple.h"

int lk_act_split(const lyco_call *c, const DLTensor *t) {
    if (!t) return 0;
    const lyco_layer *l = &c->a->layer;
    bool chan_first = l->kind == LYCO_LAYER_CONV || (l->kind == LYCO_LAYER_NORM && l->norm_kind == LYCO_NORM_GROUP);
    return chan_first ? (t->ndim < 2 ? t->ndim : 2) : t->ndim - 1;
}

void lk_conv_geom_of(const lyco_call *c, lk_conv_geom *g) {
    const lyco_layer *l = &c->a->layer;
    bool conv = l->kind == LYCO_LAYER_CONV;
    memset(g, 0, sizeof *g);
    g->nd = conv ? l->conv_dims : 0;
    g->N = c->tokens;
    g->I = l->in_features;
    g->O = l->out_features;
    g->groups = conv && l->groups > 0 ? l->groups : 1;
    g->spin = g->spout = g->K = 1;
    for (int i = 0; i < 3; i++) {
        bool used = conv && i < l->conv_dims;
        g->in[i] = used ? c->sp_in[i] : 1;
        g->out[i] = used ? c->sp_out[i] : 1;
        g->k[i] = used ? l->kernel[i] : 1;
        g->st[i] = used ? l->stride[i] : 1;
        g->pad[i] = used ? l->padding[i] : 0;
        g->dil[i] = used ? l->dilation[i] : 1;
        g->spin *= g->in[i];
        g->spout *= g->out[i];
        g->K *= g->k[i];
    }
}

lk_view lk_compact_view(void *p, int64_t rows, int64_t cols, lyco_dtype dt) {
    lk_view v;
    memset(&v, 0, sizeof v);
    v.p = p;
    v.rows = rows;
    v.cols = cols;
    v.s0 = cols;
    v.s1 = 1;
    v.dt = (int32_t)dt;
    if ((uintptr_t)p % 16 == 0 && (rows <= 1 || cols * (int64_t)lyco_dtype_size(dt) % 16 == 0)) v.flags = LK_VEC;
    return v;
}

lk_view lk_f32_view(float *p, int64_t rows, int64_t cols) { return lk_compact_view(p, rows, cols, LYCO_F32); }

lyco_status lk_copy_or_zero(const DLTensor *dst, const char *name, const DLTensor *src, int split, int ct, void *st,
                            char *why, size_t why_len) {
    lk_view d, s;
    if (!dst) return LYCO_OK;
    if (!lk_mk_view(dst, split, &d) || !lk_mk_view(src, split, &s))
        return lk_decline(why, why_len, "%s (or its source) has strides whose dims do not collapse to a matrix", name);
    lk_ew_args e;   /* out = 1·RN_ct(src) in delta mode: a vectorised copy (signs of zeros kept), or 0 */
    memset(&e, 0, sizeof e);
    e.D = s;
    e.out = d;
    e.K = 1;
    e.mode = LYCO_MERGE_DELTA;
    e.ct = (int32_t)ct;
    e.m = 1.0;
    return (lyco_status)lk_ew_merge(&e, st);
}
