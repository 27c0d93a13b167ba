/*
 * im2col.h — the conv geometry of a LoCon layer and its im2col / col2im over one image held in fp32
 * as I × sin (channel planes): rows of Xt are output positions, columns (channel, kernel offset)
 * with the kernel offset fastest — the column order of D, W and ΔW flattened to O × I·K. Shared by
 * locon.c (conv bypass) and locon_dora.c (DoRA in conv bypass).
 */
#ifndef LYCO_CPU_IM2COL_H
#define LYCO_CPU_IM2COL_H

#include "cpu.h"

typedef struct {
    int64_t I, K, r, O, nd;
    int64_t in[3], out[3], k[3], st[3], pad[3], dil[3];
    int64_t sin, sout;
} conv_geo;

static inline void conv_geo_init(const lyco_call *c, int64_t r, conv_geo *g) {
    const lyco_layer *l = &c->a->layer;
    memset(g, 0, sizeof *g);
    g->I = c->dims.I;
    g->K = c->dims.K;
    g->r = r;
    g->O = c->dims.O;
    g->nd = l->conv_dims;
    for (int i = 0; i < 3; i++) {
        bool used = i < l->conv_dims;
        g->in[i] = used ? c->sp_in[i] : 1;
        g->out[i] = used ? c->sp_out[i] : 1;
        g->k[i] = used ? l->kernel[i] : 1;
        g->st[i] = used ? l->stride[i] : 1;
        g->pad[i] = used ? l->padding[i] : 0;
        g->dil[i] = used ? l->dilation[i] : 1;
    }
    g->sin = c->sp_in_n;
    g->sout = c->sp_out_n;
}

/* input offset (within one channel plane) of output position p and kernel offset kk, or -1 */
static inline int64_t conv_src(const conv_geo *g, int64_t p, int64_t kk) {
    int64_t p0 = p / (g->out[1] * g->out[2]), p1 = (p / g->out[2]) % g->out[1], p2 = p % g->out[2];
    int64_t k0 = kk / (g->k[1] * g->k[2]), k1 = (kk / g->k[2]) % g->k[1], k2 = kk % g->k[2];
    int64_t q0 = p0 * g->st[0] - g->pad[0] + k0 * g->dil[0];
    int64_t q1 = p1 * g->st[1] - g->pad[1] + k1 * g->dil[1];
    int64_t q2 = p2 * g->st[2] - g->pad[2] + k2 * g->dil[2];
    if (q0 < 0 || q0 >= g->in[0] || q1 < 0 || q1 >= g->in[1] || q2 < 0 || q2 >= g->in[2]) return -1;
    return (q0 * g->in[1] + q1) * g->in[2] + q2;
}

/* Xt[t][c·K + kk] for positions p0 .. p0+np of one image held as img (I × sin) */
static inline void im2col(const conv_geo *g, const float *img, int64_t p0, int64_t np, float *Xt) {
    int64_t IK = g->I * g->K;
    for (int64_t t = 0; t < np; t++)
        for (int64_t kk = 0; kk < g->K; kk++) {
            int64_t src = conv_src(g, p0 + t, kk);
            for (int64_t ch = 0; ch < g->I; ch++) Xt[t * IK + ch * g->K + kk] = src < 0 ? 0.0f : img[ch * g->sin + src];
        }
}

static inline void col2im_add(const conv_geo *g, const float *dXt, int64_t p0, int64_t np, float *img) {
    int64_t IK = g->I * g->K;
    for (int64_t t = 0; t < np; t++)
        for (int64_t kk = 0; kk < g->K; kk++) {
            int64_t src = conv_src(g, p0 + t, kk);
            if (src < 0) continue;
            for (int64_t ch = 0; ch < g->I; ch++) img[ch * g->sin + src] += dXt[t * IK + ch * g->K + kk];
        }
}

#endif
