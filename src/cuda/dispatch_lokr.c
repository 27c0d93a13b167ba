/*
 * dispatch_lokr.c — LoKr (ALGORITHMS.md §2.3) on the CUDA backend: turns a validated call into
 * kern_lokr.h's argument struct and launches lokr.cu's (merge) and lokr_bypass.cu's (bypass)
 * kernels. Every half form (W1 full or w1_a·w1_b; W2 full, w2_a·w2_b or Tucker), linear and conv
 * layers (weights flattened to O×(I·K); the kernel-carrying W2 stored b×d×k or b×(d·K)), any
 * factor sizes, rank mask and the upstream s² merge scale (merge), DoRA in the merge directions.
 * Linear bypass with a plain low-rank W2 runs on the tensor cores through lowrank.cu's LoRA
 * kernels (lokr_tc.cu; 16-bit compute dtype, activations whose token stride collapses), else on
 * lokr_lowrank.cu's fp64 per-token kernels (also when σs's gradient is asked for), else on the
 * general lokr_bypass.cu. LYCO_CUDA_LOKR_LEGACY=1 in the environment selects the first
 * (GPU-verified) kernels only: neither low-rank bypass path, no one-pass merge backward;
 * LYCO_CUDA_LOKR_NO_TC=1 skips lokr_tc.cu alone (A/B).
 * Declines, with the reason: DoRA in bypass, grouped conv, norm layers, operands whose dims do not
 * collapse to a matrix (activations: whose spatial dims do not collapse to one stride).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/backend.h"
#include "cuda/dispatch_simple.h"
#include "cuda/kern_lokr.h"

static const DLTensor *grad_if(const lyco_call *c, lyco_slot s) { return lyco_call_wants(c, s) ? c->g->grad[s] : NULL; }

/* Sizes, scalars and the factors of the call; appends their view requests. */
static void fill_factors(const lyco_call *c, lk_lokr_args *k, lk_view_req *rq, int *n) {
    const lyco_adapter *a = c->a;
    const lyco_dims *dm = &c->dims;
    bool merge = c->dir == LYCO_DIR_MERGE_FWD || c->dir == LYCO_DIR_MERGE_BWD;
    k->ct = (int32_t)c->dt.compute;
    k->O = dm->O;
    k->I = dm->I;
    k->K = dm->K;
    k->a = dm->lk_a;
    k->b = dm->lk_b;
    k->c = dm->lk_c;
    k->d = dm->lk_d;
    k->r = dm->r;
    k->T = c->tokens;
    k->w1_full = dm->lk_w1_full;
    k->w2_full = dm->lk_w2_full;
    k->tucker = !dm->lk_w2_full && dm->tucker;
    k->compat = merge && (a->flags & LYCO_FLAG_UPSTREAM_MERGE_SCALE) ? 1 : 0;
    k->s = c->s;
    k->m = c->m;
    const char *lg = getenv("LYCO_CUDA_LOKR_LEGACY");
    k->legacy = lg && lg[0] == '1' ? 1 : 0;
    const char *ms = getenv("LYCO_CUDA_LOKR_MB_SCALAR");
    k->mb_scalar = ms && ms[0] == '1' ? 1 : 0;
    rq[(*n)++] = (lk_view_req){k->w1_full ? a->tensor[LYCO_LOKR_W1] : NULL, "lokr_w1", 1, &k->w1};
    rq[(*n)++] = (lk_view_req){k->w1_full ? NULL : a->tensor[LYCO_LOKR_W1_A], "lokr_w1_a", 1, &k->w1a};
    rq[(*n)++] = (lk_view_req){k->w1_full ? NULL : a->tensor[LYCO_LOKR_W1_B], "lokr_w1_b", 1, &k->w1b};
    rq[(*n)++] = (lk_view_req){k->w2_full ? a->tensor[LYCO_LOKR_W2] : NULL, "lokr_w2", 1, &k->w2};
    rq[(*n)++] = (lk_view_req){k->w2_full ? NULL : a->tensor[LYCO_LOKR_W2_A], "lokr_w2_a", 1, &k->w2a};
    rq[(*n)++] = (lk_view_req){k->w2_full ? NULL : a->tensor[LYCO_LOKR_W2_B], "lokr_w2_b", 1, &k->w2b};
    rq[(*n)++] = (lk_view_req){k->tucker ? a->tensor[LYCO_LOKR_T2] : NULL, "lokr_t2", 1, &k->t2};
    rq[(*n)++] = (lk_view_req){merge ? a->tensor[LYCO_RANK_MASK] : NULL, "rank_mask", 0, &k->mask};
    rq[(*n)++] = (lk_view_req){k->compat ? NULL : a->tensor[LYCO_SCALAR], "scalar", 0, &k->sigma};
}

static void fill_grads(const lyco_call *c, lk_lokr_args *k, lk_view_req *rq, int *n) {
    rq[(*n)++] = (lk_view_req){grad_if(c, LYCO_LOKR_W1), "grad lokr_w1", 1, &k->gw1};
    rq[(*n)++] = (lk_view_req){grad_if(c, LYCO_LOKR_W1_A), "grad lokr_w1_a", 1, &k->gw1a};
    rq[(*n)++] = (lk_view_req){grad_if(c, LYCO_LOKR_W1_B), "grad lokr_w1_b", 1, &k->gw1b};
    rq[(*n)++] = (lk_view_req){grad_if(c, LYCO_LOKR_W2), "grad lokr_w2", 1, &k->gw2};
    rq[(*n)++] = (lk_view_req){grad_if(c, LYCO_LOKR_W2_A), "grad lokr_w2_a", 1, &k->gw2a};
    rq[(*n)++] = (lk_view_req){grad_if(c, LYCO_LOKR_W2_B), "grad lokr_w2_b", 1, &k->gw2b};
    rq[(*n)++] = (lk_view_req){grad_if(c, LYCO_LOKR_T2), "grad lokr_t2", 1, &k->gt2};
    rq[(*n)++] = (lk_view_req){grad_if(c, LYCO_SCALAR), "grad scalar", 0, &k->gsigma};
}

static bool any_grad(const lk_lokr_args *k) {
    return k->gw1.p || k->gw1a.p || k->gw1b.p || k->gw2.p || k->gw2a.p || k->gw2b.p || k->gt2.p || k->gsigma.p ||
           k->dora.grad_d.p;
}

static lyco_status run_merge(const lyco_call *c, const lk_device *dev, void *st, lk_lokr_args *k, lk_view_req *rq, int n,
                             char *why, size_t why_len) {
    lyco_status rc;
    lk_fill_dora(c, &k->dora, rq, &n);
    if (c->dir == LYCO_DIR_MERGE_FWD) {
        k->mode = (int32_t)c->merge->mode;
        bool needW = c->merge->mode != LYCO_MERGE_DELTA || c->dims.dora;
        rq[n++] = (lk_view_req){needW ? c->merge->weight : NULL, "W", 1, &k->W};
        rq[n++] = (lk_view_req){c->out, "out", 1, &k->out};
        if ((rc = lk_views(rq, n, why, why_len))) return rc;
        return (lyco_status)lk_lokr_merge_fwd(k, dev, st);
    }
    rq[n++] = (lk_view_req){c->dims.dora ? c->merge->weight : NULL, "W", 1, &k->W};
    rq[n++] = (lk_view_req){c->d_out, "d_out", 1, &k->G};
    fill_grads(c, k, rq, &n);
    if ((rc = lk_views(rq, n, why, why_len))) return rc;
    if (!any_grad(k)) return LYCO_OK;
    return (lyco_status)lk_lokr_merge_bwd(k, dev, st);
}

static lyco_status run_bypass(const lyco_call *c, const lk_device *dev, void *st, lk_lokr_args *k, lk_view_req *rq, int n,
                              char *why, size_t why_len) {
    lyco_status rc;
    lk_fill_geo(c, &k->geo);
    if (c->dir == LYCO_DIR_BYPASS_FWD) {
        const DLTensor *y0 = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? NULL : c->bypass->y0;
        lk_act_req ar[] = {{c->bypass->x, "x", &k->x}, {y0, "y0", &k->y0}, {c->y, "y", &k->y}};
        if ((rc = lk_views(rq, n, why, why_len)) || (rc = lk_act_views(c, ar, 3, why, why_len))) return rc;
        return (lyco_status)lk_lokr_bypass_fwd(k, dev, st);
    }
    lk_act_req ar[] = {{c->bypass->x, "x", &k->x}, {c->dy, "dy", &k->dy}, {c->dx, "dx", &k->dx}, {c->dy0, "dy0", &k->dy0}};
    k->dy0_zero = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? 1 : 0;
    fill_grads(c, k, rq, &n);
    if ((rc = lk_views(rq, n, why, why_len)) || (rc = lk_act_views(c, ar, 4, why, why_len))) return rc;
    return (lyco_status)lk_lokr_bypass_bwd(k, dev, st);
}

lyco_status lk_run_lokr(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    const lyco_layer *l = &c->a->layer;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    if (l->kind != LYCO_LAYER_LINEAR && l->kind != LYCO_LAYER_CONV) return lk_decline(why, why_len, "LoKr on a norm layer is not supported");
    if (l->kind == LYCO_LAYER_CONV && l->groups != 1)
        return lk_decline(why, why_len, "LoKr on a grouped conv (groups = %lld) is not supported", (long long)l->groups);
    if (bypass && c->dims.dora) return lk_bypass_dense(c, dev, st, why, why_len, lk_run_lokr);
    lk_lokr_args k;
    memset(&k, 0, sizeof k);
    lk_view_req rq[32];
    int n = 0;
    fill_factors(c, &k, rq, &n);
    return bypass ? run_bypass(c, dev, st, &k, rq, n, why, why_len) : run_merge(c, dev, st, &k, rq, n, why, why_len);
}
