/*
 * dispatch_dylora.c — DyLoRA (ALGORITHMS.md §2.8, training semantics) on the CUDA backend, through
 * the LoCon launchers (locon.cu) on sub-views of the factors.
 *
 * With bs = dims.dyl_bs, t = dims.dyl_blocks active blocks, ρ = t·bs active ranks and block t*
 * = ranks lo = ρ − bs … hi − 1 = ρ − 1 (the only block that gets gradients):
 *   merge fwd   : LoCon merge with U = lora_up[:, 0:ρ] (O×ρ), D = lora_down[0:ρ, :] (ρ×I·K), the
 *                 DyLoRA scale s (= α/t, resolved by the api layer), no σs, no masks; DoRA and
 *                 every merge mode as LoCon's.
 *   merge bwd   : G_U[:, lo:hi] and G_D[lo:hi, :] depend only on block t* (G_U = s·m·Γ·D_blkᵀ,
 *                 G_D = s·m·U_blkᵀ·Γ), so LoCon's merge backward runs on U[:, lo:hi], D[lo:hi, :]
 *                 (r = bs) writing straight into the same sub-views of the gradients; every other
 *                 element of the gradients is written 0 (frozen / unused blocks).
 *   bypass fwd  : LoCon bypass on the ρ active ranks (h = RN_CT(x·D_ρᵀ), y = y0 + s·m·h·U_ρᵀ).
 *   bypass bwd  : dx needs all ρ ranks, the gradients block t* alone: one LoCon backward on the ρ
 *                 ranks for dx/dy0 (gradients not requested) and one on block t* for the
 *                 gradients (dx/dy0 not requested) — one launch when block t* is all of ρ.
 * Linear and conv (flattened O×(I·K)) in the merge directions, linear in bypass (LoCon has no conv
 * bypass kernel here). Declined with the reason: conv bypass, DoRA in merge backward with frozen
 * blocks (its norm involves every active rank), grouped conv. Extra memory: LoCon's.
 */
#include <string.h>

#include "cuda/backend.h"

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

static lyco_status bypass_fwd(const lyco_call *c, const lk_device *dev, void *st, int64_t rho, char *why, size_t why_len) {
    lk_view_req rq[12];
    int n = 0;
    lk_bypass_fwd_args b;
    lk_locon full;
    memset(&b, 0, sizeof b);
    lk_fill_locon(c, &full, rq, &n);
    const DLTensor *y0 = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? NULL : c->bypass->y0;
    rq[n++] = (lk_view_req){c->bypass->x, "x", lk_last_split(c->bypass->x), &b.x};
    rq[n++] = (lk_view_req){y0, "y0", lk_last_split(y0), &b.y0};
    rq[n++] = (lk_view_req){c->y, "y", lk_last_split(c->y), &b.y};
    lyco_status rc = lk_views(rq, n, why, why_len);
    if (rc) return rc;
    rank_range(&b.L, &full, 0, rho);
    b.T = c->tokens;
    return (lyco_status)lk_locon_bypass_fwd(&b, dev, st, why, why_len);
}

static lyco_status bypass_bwd(const lyco_call *c, const lk_device *dev, void *st, int64_t lo, int64_t hi, char *why, size_t why_len) {
    lk_view_req rq[12];
    int n = 0;
    lk_bypass_bwd_args b;
    lk_locon full;
    lk_view gU, gD;
    memset(&b, 0, sizeof b);
    lk_fill_locon(c, &full, rq, &n);
    rq[n++] = (lk_view_req){c->bypass->x, "x", lk_last_split(c->bypass->x), &b.x};
    rq[n++] = (lk_view_req){c->dy, "dy", lk_last_split(c->dy), &b.dy};
    rq[n++] = (lk_view_req){c->dx, "dx", lk_last_split(c->dx), &b.dx};
    rq[n++] = (lk_view_req){c->dy0, "dy0", lk_last_split(c->dy0), &b.dy0};
    rq[n++] = (lk_view_req){lyco_call_wants(c, LYCO_LORA_UP) ? c->g->grad[LYCO_LORA_UP] : NULL, "grad lora_up", 1, &gU};
    rq[n++] = (lk_view_req){lyco_call_wants(c, LYCO_LORA_DOWN) ? c->g->grad[LYCO_LORA_DOWN] : NULL, "grad lora_down", 1, &gD};
    lyco_status rc = lk_views(rq, n, why, why_len);
    if (rc) return rc;
    b.T = c->tokens;
    int ct = (int)c->dt.compute;
    if ((rc = zero_outside(&gU, true, lo, hi, full.r, ct, st)) || (rc = zero_outside(&gD, false, lo, hi, full.r, ct, st))) return rc;
    lk_view gUb = sub_view(&gU, 0, gU.rows, lo, hi - lo), gDb = sub_view(&gD, lo, hi - lo, 0, gD.cols);
    if (lo == 0) { /* block t* is every active rank: one pass */
        rank_range(&b.L, &full, 0, hi);
        b.gU = gUb;
        b.gD = gDb;
        return (lyco_status)lk_locon_bypass_bwd(&b, dev, st, why, why_len);
    }
    if (b.dx.p || b.dy0.p) { /* dx (and dy0) through all ρ active ranks, no gradients */
        rank_range(&b.L, &full, 0, hi);
        if ((rc = (lyco_status)lk_locon_bypass_bwd(&b, dev, st, why, why_len))) return rc;
    }
    if (!gU.p && !gD.p) return LYCO_OK;
    rank_range(&b.L, &full, lo, hi); /* the gradients of block t* */
    memset(&b.dx, 0, sizeof b.dx);
    memset(&b.dy0, 0, sizeof b.dy0);
    b.gU = gUb;
    b.gD = gDb;
    return (lyco_status)lk_locon_bypass_bwd(&b, dev, st, why, why_len);
}

lyco_status lk_run_dylora(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    const lyco_layer *l = &c->a->layer;
    bool bypass = c->dir == LYCO_DIR_BYPASS_FWD || c->dir == LYCO_DIR_BYPASS_BWD;
    if (l->kind != LYCO_LAYER_LINEAR && l->kind != LYCO_LAYER_CONV) return lk_decline(why, why_len, "DyLoRA on a norm layer is not supported");
    if (l->kind == LYCO_LAYER_CONV && l->groups != 1) return lk_decline(why, why_len, "DyLoRA on a grouped conv is not supported");
    if (bypass && l->kind == LYCO_LAYER_CONV)
        return lk_decline(why, why_len, "DyLoRA %s on a conv layer has no CUDA kernel yet (merge directions do)", lyco_direction_name(c->dir));
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
