/*
 * dispatch_dylora.c — DyLoRA (ALGORITHMS.md §2.8, training semantics) on the CUDA backend, through
 * the LoCon launchers (locon.cu: linear bypass and merge; locon_conv.cu: conv bypass) on rank
 * sub-views of the factors.
 *
 * With bs = dims.dyl_bs, t = dims.dyl_blocks active blocks, ρ = t·bs active ranks and block t*
 * = ranks lo = ρ − bs … hi − 1 = ρ − 1 (the only block that gets gradients):
 *   merge fwd   : LoCon merge with U = lora_up[:, 0:ρ] (O×ρ), D = lora_down[0:ρ, :] (ρ×I·K), the
 *                 DyLoRA scale s (= α/t, resolved by the api layer), no σs, no masks; every merge
 *                 mode as LoCon's.
 *   merge bwd   : G_U[:, lo:hi] and G_D[lo:hi, :] depend only on block t* (G_U = s·m·Γ·D_blkᵀ,
 *                 G_D = s·m·U_blkᵀ·Γ), so LoCon's merge backward runs on U[:, lo:hi], D[lo:hi, :]
 *                 (r = bs) writing straight into the same sub-views of the gradients; every other
 *                 element of the gradients is written 0 (frozen / unused blocks).
 *   bypass fwd  : LoCon bypass on the ρ active ranks (h = RN_CT(op(x, D_ρ)), y = y0 + s·m·h·U_ρᵀ).
 *   bypass bwd  : dx needs all ρ ranks, the gradients block t* alone: one LoCon backward on the ρ
 *                 ranks for dx/dy0 (gradients not requested) and one on block t* for the
 *                 gradients (dx/dy0 not requested) — one launch when block t* is all of ρ.
 *                 dy0 = dy, or 0 when y0 was given with LYCO_BYPASS_DELTA_ONLY (the ref's rule).
 * Linear and conv layers in all four directions. Declined with the reason: DoRA in bypass, DoRA
 * in merge backward with frozen blocks (its norm involves every active rank), grouped conv, conv
 * batches beyond locon_conv.cu's grid limits. Extra memory: LoCon's.
 */
#include <string.h>

#include "cuda/backend.h"
#include "cuda/kern_conv.h"

/* v restricted to rows [r0, r0 + nr) and columns [c0, c0 + nc); vector flag recomputed. */
static lk_view sub_view(const lk_view *v, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    lk_view s = *v;
    if (!v->p) return s;
    size_t es = lyco_dtype_size((lyco_dtype)v->dt);
    s.p = (const char *)v->p + (r0 * v->s0 + c0 * v->s1) * (int64_t)es;
    s.rows = nr;
    s.cols = nc;
    s.flags &= ~LK_VEC;
    uintptr_t addr = (uintptr_t)s.p;
    if (!(s.flags & LK_UNALIGNED) && s.s1 == 1 && addr % 16 == 0 && (nr <= 1 || (s.s0 * (int64_t)es) % 16 == 0)) s.flags |= LK_VEC;
    return s;
}

/* Zeros in g outside columns (col = true) or rows [lo, hi) of its rank axis (size r). */
static lyco_status zero_outside(const lk_view *g, bool col, int64_t lo, int64_t hi, int64_t r, int ct, void *st) {
    if (!g->p) return LYCO_OK;
    lk_view parts[2];
    parts[0] = col ? sub_view(g, 0, g->rows, 0, lo) : sub_view(g, 0, lo, 0, g->cols);
    parts[1] = col ? sub_view(g, 0, g->rows, hi, r - hi) : sub_view(g, hi, r - hi, 0, g->cols);
    for (int i = 0; i < 2; i++) {
        lyco_status rc = (lyco_status)lk_copy_round(&parts[i], NULL, ct, st);
        if (rc) return rc;
    }
    return LYCO_OK;
}

/* The LoCon view of ranks [lo, hi) of the factors: U columns, D rows. */
static void rank_range(lk_locon *L, const lk_locon *full, int64_t lo, int64_t hi) {
    *L = *full;
    L->r = hi - lo;
    L->U = sub_view(&full->U, 0, full->U.rows, lo, hi - lo);
    L->D = sub_view(&full->D, lo, hi - lo, 0, full->D.cols);
}

static lyco_status merge_fwd(const lyco_call *c, const lk_device *dev, void *st, int64_t rho, char *why, size_t why_len) {
    lk_view_req rq[12];
    int n = 0;
    lk_merge_fwd_args m;
    lk_locon full;
    memset(&m, 0, sizeof m);
    lk_fill_locon(c, &full, rq, &n);
    lk_fill_dora(c, &m.dora, rq, &n);
    m.mode = (int32_t)c->merge->mode;
    bool needW = c->merge->mode != LYCO_MERGE_DELTA || c->dims.dora;
    rq[n++] = (lk_view_req){needW ? c->merge->weight : NULL, "W", 1, &m.W};
    rq[n++] = (lk_view_req){c->out, "out", 1, &m.out};
    lyco_status rc = lk_views(rq, n, why, why_len);
    if (rc) return rc;
    if (m.out.rows * m.out.cols == 0) return LYCO_OK;
    rank_range(&m.L, &full, 0, rho);
    return (lyco_status)lk_locon_merge_fwd(&m, dev, st);
}

static lyco_status merge_bwd(const lyco_call *c, const lk_device *dev, void *st, int64_t lo, int64_t hi, char *why, size_t why_len) {
    lk_view_req rq[12];
    int n = 0;
    lk_merge_bwd_args m;
    lk_locon full;
    lk_view gU, gD;
    memset(&m, 0, sizeof m);
    lk_fill_locon(c, &full, rq, &n);
    lk_fill_dora(c, &m.dora, rq, &n);
    rq[n++] = (lk_view_req){c->dims.dora ? c->merge->weight : NULL, "W", 1, &m.W};
    rq[n++] = (lk_view_req){c->d_out, "d_out", 1, &m.G};
    rq[n++] = (lk_view_req){lyco_call_wants(c, LYCO_LORA_UP) ? c->g->grad[LYCO_LORA_UP] : NULL, "grad lora_up", 1, &gU};
    rq[n++] = (lk_view_req){lyco_call_wants(c, LYCO_LORA_DOWN) ? c->g->grad[LYCO_LORA_DOWN] : NULL, "grad lora_down", 1, &gD};
    lyco_status rc = lk_views(rq, n, why, why_len);
    if (rc) return rc;
    int ct = (int)c->dt.compute;
    if ((rc = zero_outside(&gU, true, lo, hi, full.r, ct, st)) || (rc = zero_outside(&gD, false, lo, hi, full.r, ct, st))) return rc;
    if (!gU.p && !gD.p && !m.dora.grad_d.p) return LYCO_OK;
    rank_range(&m.L, &full, lo, hi);
    m.gU = sub_view(&gU, 0, gU.rows, lo, hi - lo);
    m.gD = sub_view(&gD, lo, hi - lo, 0, gD.cols);
    return (lyco_status)lk_locon_merge_bwd(&m, dev, st);
}

/* N × C × spatial activation t (NULL: absent) as kern_conv.h's lkc_act. */
static void conv_act(const DLTensor *t, int nd, lkc_act *a) {
    memset(a, 0, sizeof *a);
    if (!t) return;
    lyco_dtype d = lyco_dtype_of(t);
    a->p = (const char *)t->data + t->byte_offset;
    a->dt = (int32_t)d;
    a->unal = ((uintptr_t)a->p % lyco_dtype_size(d)) != 0;
    for (int i = 0; i < 2 + nd && i < t->ndim; i++) {
        int64_t st = 1;
        if (t->strides) st = t->strides[i];
        else
            for (int k = i + 1; k < t->ndim; k++) st *= t->shape[k];
        if (i == 0) a->sn = st;
        else if (i == 1) a->sc = st;
        else a->ss[i - 2] = st;
    }
}

/* Geometry and sizes of a conv call (factors filled by the caller). */
static void conv_geom(const lyco_call *c, lkc_conv *C) {
    const lyco_layer *l = &c->a->layer;
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

static bool is_conv(const lyco_call *c) { return c->a->layer.kind == LYCO_LAYER_CONV; }

/* y = y0 + Δ over ranks [0, rho): linear (locon.cu) or conv (locon_conv.cu). */
static lyco_status bypass_fwd(const lyco_call *c, const lk_device *dev, void *st, int64_t rho, char *why, size_t why_len) {
    lk_view_req rq[12];
    int n = 0;
    lk_locon full;
    lk_fill_locon(c, &full, rq, &n);
    const DLTensor *y0 = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? NULL : c->bypass->y0;
    if (is_conv(c)) {
        lkc_bypass_fwd_args b;
        memset(&b, 0, sizeof b);
        lyco_status rc = lk_views(rq, n, why, why_len);
        if (rc) return rc;
        rank_range(&b.C.L, &full, 0, rho);
        conv_geom(c, &b.C);
        int nd = c->a->layer.conv_dims;
        conv_act(c->bypass->x, nd, &b.x);
        conv_act(y0, nd, &b.y0);
        conv_act(c->y, nd, &b.y);
        return (lyco_status)lkc_conv_bypass_fwd(&b, st);
    }
    lk_bypass_fwd_args b;
    memset(&b, 0, sizeof b);
    rq[n++] = (lk_view_req){c->bypass->x, "x", lk_last_split(c->bypass->x), &b.x};
    rq[n++] = (lk_view_req){y0, "y0", lk_last_split(y0), &b.y0};
    rq[n++] = (lk_view_req){c->y, "y", lk_last_split(c->y), &b.y};
    lyco_status rc = lk_views(rq, n, why, why_len);
    if (rc) return rc;
    rank_range(&b.L, &full, 0, rho);
    b.T = c->tokens;
    return (lyco_status)lk_locon_bypass_fwd(&b, dev, st, why, why_len);
}

/* One bypass backward launch: linear or conv arguments prepared once, factors per pass. */
typedef struct {
    bool conv;
    lk_bypass_bwd_args lin;
    lkc_bypass_bwd_args cv;
} bwd_job;

/* A pass over the ranks of L: dx / dy0 when with_dx, the gradients gU / gD when given. */
static lyco_status bwd_pass(const bwd_job *j, const lk_locon *L, bool with_dx, const lk_view *gU, const lk_view *gD,
                            const lk_device *dev, void *st, char *why, size_t why_len) {
    if (j->conv) {
        lkc_bypass_bwd_args a = j->cv;
        a.C.L = *L;
        a.gU = *gU;
        a.gD = *gD;
        if (!with_dx) {
            memset(&a.dx, 0, sizeof a.dx);
            memset(&a.dy0, 0, sizeof a.dy0);
            a.dy0_zero = 0;
        }
        return (lyco_status)lkc_conv_bypass_bwd(&a, st);
    }
    lk_bypass_bwd_args a = j->lin;
    a.L = *L;
    a.gU = *gU;
    a.gD = *gD;
    if (!with_dx) {
        memset(&a.dx, 0, sizeof a.dx);
        memset(&a.dy0, 0, sizeof a.dy0);
    }
    return (lyco_status)lk_locon_bypass_bwd(&a, dev, st, why, why_len);
}

/* dy0 = 0 when y = Δ alone although y0 was given (ALGORITHMS.md §1.4; the ref's rule). */
static bool dy0_is_zero(const lyco_call *c) { return c->bypass->y0 && (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY); }

static lyco_status bypass_bwd(const lyco_call *c, const lk_device *dev, void *st, int64_t lo, int64_t hi, char *why, size_t why_len) {
    lk_view_req rq[12];
    int n = 0;
    bwd_job j;
    lk_locon full;
    lk_view gU, gD, dy0z;
    memset(&j, 0, sizeof j);
    memset(&dy0z, 0, sizeof dy0z);
    j.conv = is_conv(c);
    lk_fill_locon(c, &full, rq, &n);
    const DLTensor *dy0 = dy0_is_zero(c) ? NULL : c->dy0;
    if (j.conv) {
        int nd = c->a->layer.conv_dims;
        conv_geom(c, &j.cv.C);
        conv_act(c->bypass->x, nd, &j.cv.x);
        conv_act(c->dy, nd, &j.cv.dy);
        conv_act(c->dx, nd, &j.cv.dx);
        conv_act(c->dy0, nd, &j.cv.dy0);
        j.cv.dy0_zero = dy0_is_zero(c) ? 1 : 0;
    } else {
        rq[n++] = (lk_view_req){c->bypass->x, "x", lk_last_split(c->bypass->x), &j.lin.x};
        rq[n++] = (lk_view_req){c->dy, "dy", lk_last_split(c->dy), &j.lin.dy};
        rq[n++] = (lk_view_req){c->dx, "dx", lk_last_split(c->dx), &j.lin.dx};
        rq[n++] = (lk_view_req){dy0, "dy0", lk_last_split(dy0), &j.lin.dy0};
        rq[n++] = (lk_view_req){dy0 ? NULL : c->dy0, "dy0", lk_last_split(c->dy0), &dy0z};
        j.lin.T = c->tokens;
    }
    rq[n++] = (lk_view_req){lyco_call_wants(c, LYCO_LORA_UP) ? c->g->grad[LYCO_LORA_UP] : NULL, "grad lora_up", 1, &gU};
    rq[n++] = (lk_view_req){lyco_call_wants(c, LYCO_LORA_DOWN) ? c->g->grad[LYCO_LORA_DOWN] : NULL, "grad lora_down", 1, &gD};
    lyco_status rc = lk_views(rq, n, why, why_len);
    if (rc) return rc;
    int ct = (int)c->dt.compute;
    if ((rc = (lyco_status)lk_copy_round(&dy0z, NULL, ct, st))) return rc; /* linear, y = Δ alone: dy0 = 0 */
    if ((rc = zero_outside(&gU, true, lo, hi, full.r, ct, st)) || (rc = zero_outside(&gD, false, lo, hi, full.r, ct, st))) return rc;
    lk_view gUb = sub_view(&gU, 0, gU.rows, lo, hi - lo), gDb = sub_view(&gD, lo, hi - lo, 0, gD.cols), none;
    memset(&none, 0, sizeof none);
    lk_locon L;
    if (lo == 0) { /* block t* is every active rank: one pass */
        rank_range(&L, &full, 0, hi);
        return bwd_pass(&j, &L, true, &gUb, &gDb, dev, st, why, why_len);
    }
    if (c->dx || c->dy0) { /* dx (and dy0) through all ρ active ranks, no gradients */
        rank_range(&L, &full, 0, hi);
        if ((rc = bwd_pass(&j, &L, true, &none, &none, dev, st, why, why_len))) return rc;
    }
    if (!gU.p && !gD.p) return LYCO_OK;
    rank_range(&L, &full, lo, hi); /* the gradients of block t* */
    return bwd_pass(&j, &L, false, &gUb, &gDb, dev, st, why, why_len);
}

lyco_status lk_run_dylora(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    const lyco_layer *l = &c->a->layer;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    if (l->kind != LYCO_LAYER_LINEAR && l->kind != LYCO_LAYER_CONV) return lk_decline(why, why_len, "DyLoRA on a norm layer is not supported");
    if (l->kind == LYCO_LAYER_CONV && l->groups != 1) return lk_decline(why, why_len, "DyLoRA on a grouped conv is not supported");
    if (bypass && l->kind == LYCO_LAYER_CONV && (c->tokens > 65535 || (c->dims.O + 63) / 64 > 65535 || (c->dims.r + 63) / 64 > 65535))
        return lk_decline(why, why_len, "conv DyLoRA with batch %lld, O %lld, rank %lld exceeds the CUDA grid limits (batch ≤ 65535)",
                          (long long)c->tokens, (long long)c->dims.O, (long long)c->dims.r);
    if (bypass && c->dims.dora)
        return lk_decline(why, why_len, "DoRA in %s has no CUDA kernel yet (merge directions do)", lyco_direction_name(c->dir));
    int64_t hi = c->dims.dyl_blocks * c->dims.dyl_bs, lo = hi - c->dims.dyl_bs;
    if (c->dir == LYCO_DIR_MERGE_BWD && c->dims.dora && lo > 0)
        return lk_decline(why, why_len, "DyLoRA with DoRA in merge_bwd and %lld frozen blocks has no CUDA kernel (the norm spans every active rank)",
                          (long long)c->dims.dyl_blocks - 1);
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD: return merge_fwd(c, dev, st, hi, why, why_len);
    case LYCO_DIR_MERGE_BWD: return merge_bwd(c, dev, st, lo, hi, why, why_len);
    case LYCO_DIR_BYPASS_FWD: return bypass_fwd(c, dev, st, hi, why, why_len);
    default: return bypass_bwd(c, dev, st, lo, hi, why, why_len);
    }
}
