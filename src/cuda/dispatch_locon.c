/*
 * dispatch_locon.c — LoRA/LoCon (and DoRA on top) on the CUDA backend: turns a validated call into
 * the kernel argument structs of kern.h / kern_conv.h and launches locon.cu's and locon_conv.cu's
 * kernels. Linear layers in all four directions; conv layers (flattened to O×(I·K)) in the merge
 * directions (locon.cu) and in bypass (locon_conv.cu, activations with any strides); Tucker
 * (lora_mid) in all four directions (locon_conv.cu); DoRA in bypass on linear layers
 * (dora_bypass.cu). Declines, with the reason: DoRA in conv bypass, DoRA with Tucker, grouped
 * conv, batches or sizes beyond the kernels' grid limits.
 * Bypass backward with LYCO_BYPASS_DELTA_ONLY: y = Δ alone does not read y0, so dy0 = 0 (the
 * linear kernel's dy0 stream is switched off and dy0 zeroed here; the conv kernels zero it).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/backend.h"
#include "cuda/dispatch_simple.h"
#include "cuda/kern_conv.h"
#include "cuda/kern_dora.h"

/* Element stride of dim d of t (compact when t has no strides). */
static int64_t dim_stride(const DLTensor *t, int d) {
    if (t->strides) return t->strides[d];
    int64_t s = 1;
    for (int i = d + 1; i < t->ndim; i++) s *= t->shape[i];
    return s;
}

/* N × C × spatial activation t (NULL: absent) as an lkc_act. */
static void conv_act(const DLTensor *t, int conv_dims, lkc_act *a) {
    memset(a, 0, sizeof *a);
    if (!t) return;
    lyco_dtype d = lyco_dtype_of(t);
    a->p = (const char *)t->data + t->byte_offset;
    a->dt = (int32_t)d;
    a->unal = ((uintptr_t)a->p % lyco_dtype_size(d)) != 0;
    a->sn = dim_stride(t, 0);
    a->sc = dim_stride(t, 1);
    for (int i = 0; i < conv_dims && i < 3; i++) a->ss[i] = dim_stride(t, 2 + i);
}

/* The factors, scalars, Tucker core and geometry of the call into C (views requested in rq). */
static void conv_fill(const lyco_call *c, lkc_conv *C, lk_view_req *rq, int *n) {
    const lyco_layer *l = &c->a->layer;
    memset(C, 0, sizeof *C);
    lk_fill_locon(c, &C->L, rq, n);
    rq[(*n)++] = (lk_view_req){c->dims.tucker ? c->a->tensor[LYCO_LORA_MID] : NULL, "lora_mid", 1, &C->M};
    C->I = c->dims.I;
    C->N = c->tokens;
    for (int i = 0; i < 3; i++) {
        bool used = i < l->conv_dims;
        C->g.in[i] = used ? c->sp_in[i] : 1;
        C->g.out[i] = used ? c->sp_out[i] : 1;
        C->g.k[i] = used ? l->kernel[i] : 1;
        C->g.st[i] = used ? l->stride[i] : 1;
        C->g.pad[i] = used ? l->padding[i] : 0;
        C->g.dil[i] = used ? l->dilation[i] : 1;
    }
    C->g.sin = c->sp_in_n;
    C->g.sout = c->sp_out_n;
}

static const DLTensor *want(const lyco_call *c, lyco_slot s) { return lyco_call_wants(c, s) ? c->g->grad[s] : NULL; }

/* Conv bypass (plain or Tucker) and Tucker merge: locon_conv.cu. */
static lyco_status run_conv(const lyco_call *c, void *st, char *why, size_t why_len) {
    int nd = c->a->layer.conv_dims;
    if (c->tokens > 65535 || (c->dims.O + 63) / 64 > 65535 || (c->dims.r + 63) / 64 > 65535)
        return lk_decline(why, why_len, "conv LoCon with batch %lld, O %lld, rank %lld exceeds the CUDA grid limits (batch ≤ 65535)",
                          (long long)c->tokens, (long long)c->dims.O, (long long)c->dims.r);
    lyco_status rc;
    lk_view_req rq[16];
    int n = 0;
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD: {
        lkc_tmerge_fwd_args m;
        memset(&m, 0, sizeof m);
        conv_fill(c, &m.C, rq, &n);
        m.mode = (int32_t)c->merge->mode;
        rq[n++] = (lk_view_req){c->merge->mode != LYCO_MERGE_DELTA ? c->merge->weight : NULL, "W", 1, &m.W};
        rq[n++] = (lk_view_req){c->out, "out", 1, &m.out};
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        return (lyco_status)lkc_tucker_merge_fwd(&m, st);
    }
    case LYCO_DIR_MERGE_BWD: {
        lkc_tmerge_bwd_args m;
        memset(&m, 0, sizeof m);
        conv_fill(c, &m.C, rq, &n);
        rq[n++] = (lk_view_req){c->d_out, "d_out", 1, &m.G};
        rq[n++] = (lk_view_req){want(c, LYCO_LORA_UP), "grad lora_up", 1, &m.gU};
        rq[n++] = (lk_view_req){want(c, LYCO_LORA_DOWN), "grad lora_down", 1, &m.gD};
        rq[n++] = (lk_view_req){want(c, LYCO_LORA_MID), "grad lora_mid", 1, &m.gM};
        rq[n++] = (lk_view_req){want(c, LYCO_SCALAR), "grad scalar", 0, &m.gsigma};
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        if (!m.gU.p && !m.gD.p && !m.gM.p && !m.gsigma.p) return LYCO_OK;
        return (lyco_status)lkc_tucker_merge_bwd(&m, st);
    }
    case LYCO_DIR_BYPASS_FWD: {
        lkc_bypass_fwd_args b;
        memset(&b, 0, sizeof b);
        conv_fill(c, &b.C, rq, &n);
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        conv_act(c->bypass->x, nd, &b.x);
        conv_act((c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? NULL : c->bypass->y0, nd, &b.y0);
        conv_act(c->y, nd, &b.y);
        return (lyco_status)lkc_conv_bypass_fwd(&b, st);
    }
    default: {
        lkc_bypass_bwd_args b;
        memset(&b, 0, sizeof b);
        conv_fill(c, &b.C, rq, &n);
        rq[n++] = (lk_view_req){want(c, LYCO_LORA_UP), "grad lora_up", 1, &b.gU};
        rq[n++] = (lk_view_req){want(c, LYCO_LORA_DOWN), "grad lora_down", 1, &b.gD};
        rq[n++] = (lk_view_req){want(c, LYCO_LORA_MID), "grad lora_mid", 1, &b.gM};
        rq[n++] = (lk_view_req){want(c, LYCO_SCALAR), "grad scalar", 0, &b.gsigma};
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        conv_act(c->bypass->x, nd, &b.x);
        conv_act(c->dy, nd, &b.dy);
        conv_act(c->dx, nd, &b.dx);
        conv_act(c->dy0, nd, &b.dy0);
        b.dy0_zero = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? 1 : 0;
        return (lyco_status)lkc_conv_bypass_bwd(&b, st);
    }
    }
}

/* DoRA in bypass, linear layers: dora_bypass.cu (y = y0 + x·(W'' − W)ᵀ without ΔW); dy0 here. */
static lyco_status run_dora_bypass(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    const lyco_bypass_args *b = c->bypass;
    bool bwd = c->dir == LYCO_DIR_BYPASS_BWD, delta_only = b->flags & LYCO_BYPASS_DELTA_ONLY;
    const int64_t lim = (int64_t)65535 * 64;
    if (c->dims.O > lim || c->dims.I > lim || c->tokens > lim)
        return lk_decline(why, why_len, "DoRA bypass with O %lld, I %lld, %lld tokens exceeds the CUDA grid limits (65535·64 each)",
                          (long long)c->dims.O, (long long)c->dims.I, (long long)c->tokens);
    lk_dora_bypass_args d;
    memset(&d, 0, sizeof d);
    lk_view dy0;
    memset(&dy0, 0, sizeof dy0);
    lk_view_req rq[24];
    int n = 0;
    lk_fill_locon(c, &d.L, rq, &n);
    lk_fill_dora(c, &d.dora, rq, &n);
    rq[n++] = (lk_view_req){b->weight, "weight", 1, &d.W};
    rq[n++] = (lk_view_req){b->x, "x", lk_last_split(b->x), &d.x};
    if (!bwd) {
        const DLTensor *y0 = delta_only ? NULL : b->y0;
        rq[n++] = (lk_view_req){y0, "y0", lk_last_split(y0), &d.y0};
        rq[n++] = (lk_view_req){c->y, "y", lk_last_split(c->y), &d.y};
    } else {
        rq[n++] = (lk_view_req){c->dy, "dy", lk_last_split(c->dy), &d.dy};
        rq[n++] = (lk_view_req){c->dx, "dx", lk_last_split(c->dx), &d.dx};
        rq[n++] = (lk_view_req){c->dy0, "dy0", lk_last_split(c->dy0), &dy0};
        rq[n++] = (lk_view_req){want(c, LYCO_LORA_UP), "grad lora_up", 1, &d.gU};
        rq[n++] = (lk_view_req){want(c, LYCO_LORA_DOWN), "grad lora_down", 1, &d.gD};
        rq[n++] = (lk_view_req){want(c, LYCO_SCALAR), "grad scalar", 0, &d.gsigma};
    }
    lyco_status rc = lk_views(rq, n, why, why_len);
    if (rc) return rc;
    d.T = c->tokens;
    d.bwd = bwd;
    const char *ffma = getenv("LYCO_CUDA_DORA_FFMA");
    d.ffma = ffma ? atoi(ffma) : 0;
    d.verify = getenv("LYCO_CUDA_DORA_VERIFY") != NULL;
    if (bwd && dy0.p) /* y = y0 + Δ: dy0 = dy; Δ alone does not read y0: dy0 = 0 */
        if ((rc = (lyco_status)lk_copy_round(&dy0, delta_only ? NULL : &d.dy, d.L.ct, st))) return rc;
    return (lyco_status)lk_dora_bypass(&d, dev, st);
}

lyco_status lk_run_locon(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    const lyco_adapter *a = c->a;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    if (a->layer.kind != LYCO_LAYER_LINEAR && a->layer.kind != LYCO_LAYER_CONV)
        return lk_decline(why, why_len, "LoCon on a norm layer is not supported");
    if (a->layer.kind == LYCO_LAYER_CONV && a->layer.groups != 1)
        return lk_decline(why, why_len, "LoCon on a grouped conv is not supported");
    /* DoRA in conv bypass and with Tucker: compose.c */
    if (bypass && c->dims.dora && (a->layer.kind == LYCO_LAYER_CONV || c->dims.tucker))
        return lk_bypass_dense(c, dev, st, why, why_len, lk_run_locon);
    if (c->dims.tucker && c->dims.dora) return lk_tucker_dora_merge(c, dev, st, why, why_len);
    if (c->dims.tucker || (bypass && a->layer.kind == LYCO_LAYER_CONV)) return run_conv(c, st, why, why_len);
    if (bypass && c->dims.dora) return run_dora_bypass(c, dev, st, why, why_len);
    lyco_status rc;
    lk_view_req rq[24];
    int n = 0;
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD: {
        lk_merge_fwd_args m;
        memset(&m, 0, sizeof m);
        lk_fill_locon(c, &m.L, rq, &n);
        lk_fill_dora(c, &m.dora, rq, &n);
        m.mode = (int32_t)c->merge->mode;
        bool needW = c->merge->mode != LYCO_MERGE_DELTA || c->dims.dora;
        rq[n++] = (lk_view_req){needW ? c->merge->weight : NULL, "W", 1, &m.W};
        rq[n++] = (lk_view_req){c->out, "out", 1, &m.out};
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        if (m.out.rows * m.out.cols == 0) return LYCO_OK;
        return (lyco_status)lk_locon_merge_fwd(&m, dev, st);
    }
    case LYCO_DIR_MERGE_BWD: {
        lk_merge_bwd_args m;
        memset(&m, 0, sizeof m);
        lk_fill_locon(c, &m.L, rq, &n);
        lk_fill_dora(c, &m.dora, rq, &n);
        rq[n++] = (lk_view_req){c->dims.dora ? c->merge->weight : NULL, "W", 1, &m.W};
        rq[n++] = (lk_view_req){c->d_out, "d_out", 1, &m.G};
        rq[n++] = (lk_view_req){lyco_call_wants(c, LYCO_LORA_UP) ? c->g->grad[LYCO_LORA_UP] : NULL, "grad lora_up", 1, &m.gU};
        rq[n++] = (lk_view_req){lyco_call_wants(c, LYCO_LORA_DOWN) ? c->g->grad[LYCO_LORA_DOWN] : NULL, "grad lora_down", 1, &m.gD};
        rq[n++] = (lk_view_req){lyco_call_wants(c, LYCO_SCALAR) ? c->g->grad[LYCO_SCALAR] : NULL, "grad scalar", 0, &m.gsigma};
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        if (!m.gU.p && !m.gD.p && !m.gsigma.p && !m.dora.grad_d.p) return LYCO_OK;
        return (lyco_status)lk_locon_merge_bwd(&m, dev, st);
    }
    case LYCO_DIR_BYPASS_FWD: {
        lk_bypass_fwd_args b;
        memset(&b, 0, sizeof b);
        lk_fill_locon(c, &b.L, rq, &n);
        const DLTensor *y0 = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? NULL : c->bypass->y0;
        rq[n++] = (lk_view_req){c->bypass->x, "x", lk_last_split(c->bypass->x), &b.x};
        rq[n++] = (lk_view_req){y0, "y0", lk_last_split(y0), &b.y0};
        rq[n++] = (lk_view_req){c->y, "y", lk_last_split(c->y), &b.y};
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        b.T = c->tokens;
        return (lyco_status)lk_locon_bypass_fwd(&b, dev, st, why, why_len);
    }
    default: {
        lk_bypass_bwd_args b;
        memset(&b, 0, sizeof b);
        lk_fill_locon(c, &b.L, rq, &n);
        rq[n++] = (lk_view_req){c->bypass->x, "x", lk_last_split(c->bypass->x), &b.x};
        rq[n++] = (lk_view_req){c->dy, "dy", lk_last_split(c->dy), &b.dy};
        rq[n++] = (lk_view_req){c->dx, "dx", lk_last_split(c->dx), &b.dx};
        rq[n++] = (lk_view_req){c->dy0, "dy0", lk_last_split(c->dy0), &b.dy0};
        rq[n++] = (lk_view_req){lyco_call_wants(c, LYCO_LORA_UP) ? c->g->grad[LYCO_LORA_UP] : NULL, "grad lora_up", 1, &b.gU};
        rq[n++] = (lk_view_req){lyco_call_wants(c, LYCO_LORA_DOWN) ? c->g->grad[LYCO_LORA_DOWN] : NULL, "grad lora_down", 1, &b.gD};
        rq[n++] = (lk_view_req){lyco_call_wants(c, LYCO_SCALAR) ? c->g->grad[LYCO_SCALAR] : NULL, "grad scalar", 0, &b.gsigma};
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        if ((c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) && b.dy0.p) {
            /* y = Δ alone does not read y0: dy0 = 0 (the kernel would write RN(dy)) */
            if ((rc = (lyco_status)lk_copy_round(&b.dy0, NULL, b.L.ct, st))) return rc;
            memset(&b.dy0, 0, sizeof b.dy0);
        }
        b.T = c->tokens;
        return (lyco_status)lk_locon_bypass_bwd(&b, dev, st, why, why_len);
    }
    }
}
