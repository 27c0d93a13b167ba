/*
 * dispatch_locon.c — LoRA/LoCon (and DoRA on top) on the CUDA backend: turns a validated call into
 * the kernel argument structs of kern.h and launches locon.cu's kernels. Linear layers in all four
 * directions; conv layers (flattened to O×(I·K)) in the merge directions. Declines, with the
 * reason, what has no kernel yet: Tucker (lora_mid), conv bypass, DoRA in bypass, grouped conv.
 */
#include <string.h>

#include "cuda/backend.h"

lyco_status lk_run_locon(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    const lyco_adapter *a = c->a;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    if (c->dims.tucker)
        return lk_decline(why, why_len, "Tucker LoCon (lora_mid) %s has no CUDA kernel yet", lyco_direction_name(c->dir));
    if (a->layer.kind != LYCO_LAYER_LINEAR && a->layer.kind != LYCO_LAYER_CONV)
        return lk_decline(why, why_len, "LoCon on a norm layer is not supported");
    if (bypass && a->layer.kind == LYCO_LAYER_CONV)
        return lk_decline(why, why_len, "LoCon %s on a conv layer has no CUDA kernel yet (merge directions do)", lyco_direction_name(c->dir));
    if (bypass && c->dims.dora)
        return lk_decline(why, why_len, "DoRA in %s has no CUDA kernel yet (merge directions do)", lyco_direction_name(c->dir));
    if (a->layer.kind == LYCO_LAYER_CONV && a->layer.groups != 1)
        return lk_decline(why, why_len, "LoCon on a grouped conv is not supported");
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
        b.T = c->tokens;
        return (lyco_status)lk_locon_bypass_bwd(&b, dev, st, why, why_len);
    }
    }
}
