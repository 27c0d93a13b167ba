/*
 * dispatch_ia3.c — (IA)³ on the CUDA backend (ALGORITHMS.md §2.6): turns a validated call into
 * kern_simple.h's argument structs and launches them (stream-ordered, no host sync).
 *
 *   merge fwd   out = W ⊕ m·(W ⊙ w)  — w along rows (output mode) or columns c·K+κ → c (input
 *               mode); one elementwise pass (lk_ew_merge), in place allowed
 *   merge bwd   G_w = m·Σ ∂L/∂W''·W per row (output) or per input channel (input): lk_chan_sum
 *   bypass, output mode (row map on y0, bias included; linear: channel = last dim, conv: dim 1)
 *               fwd y = y0 + m·(y0⊙w) (DELTA_ONLY: m·(y0⊙w));  bwd dy0 = dy ⊕ m·(dy⊙w) likewise,
 *               G_w = m·Σ dy·y0 per channel, dx = 0 (linear: dy0 and G_w in one pass, lk_chan_sum's
 *               row map)
 *   bypass, input mode  y = y0 + m·op(x, W ⊙ w) (conv_direct.cu);  bwd G' = opᵀ(dy, W),
 *               dx = m·w⊙G', G_w = m·Σ G'·x per input channel (G' in fp32 scratch, x-shaped,
 *               only when G_w is wanted), dy0 = dy (DELTA_ONLY: 0)
 */
#include <string.h>

#include "cuda/dispatch_simple.h"

static bool is_conv(const lyco_call *c) { return c->a->layer.kind == LYCO_LAYER_CONV; }

/* The elementwise row map of output mode, out = src ⊕ m·(src ⊙ w) over activation views, as
   lk_ew_merge's arguments. */
static lyco_status rowmap_args(const lyco_call *c, const DLTensor *src, const char *sname, DLTensor *dst, const char *dname,
                               lk_ew_args *e, char *why, size_t why_len) {
    memset(e, 0, sizeof *e);
    lk_view_req rq[3] = {{src, sname, lk_act_split(c, src), &e->W},
                         {dst, dname, lk_act_split(c, dst), &e->out},
                         {c->a->tensor[LYCO_IA3_WEIGHT], "ia3 weight", 0, &e->vec}};
    lyco_status rc = lk_views(rq, 3, why, why_len);
    if (rc) return rc;
    e->src_is_W = 1;
    e->vec_on_rows = is_conv(c);
    e->vec_mod = c->dims.O;
    e->K = 1;
    e->mode = (c->bypass->flags & LYCO_BYPASS_DELTA_ONLY) ? LYCO_MERGE_DELTA : LYCO_MERGE_WEIGHT;
    e->ct = (int32_t)c->dt.compute;
    e->m = c->m;
    return LYCO_OK;
}

static lyco_status rowmap(const lyco_call *c, const DLTensor *src, const char *sname, DLTensor *dst, const char *dname,
                          void *st, char *why, size_t why_len) {
    lk_ew_args e;
    lyco_status rc = rowmap_args(c, src, sname, dst, dname, &e, why, why_len);
    return rc ? rc : (lyco_status)lk_ew_merge(&e, st);
}

/* G_w = scale·Σ A·B per channel of activation-shaped A, B (channel: column, or row mod nch); with
   map (linear only: channels along columns), the same pass also writes map's row map of A. */
static lyco_status act_grad(const lyco_call *c, lk_view A, bool A_exact, const DLTensor *B, const char *bname, int64_t nch,
                            const lk_ew_args *map, void *st, char *why, size_t why_len) {
    lk_chan_args s;
    memset(&s, 0, sizeof s);
    lk_view_req rq[2] = {{B, bname, lk_act_split(c, B), &s.B}, {c->g->grad[LYCO_IA3_WEIGHT], "grad ia3 weight", 0, &s.out}};
    lyco_status rc = lk_views(rq, 2, why, why_len);
    if (rc) return rc;
    s.A = A;
    s.A_exact = A_exact;
    s.by_col = !is_conv(c);
    s.K = 1;
    s.nch = nch;
    s.scale = c->m;
    s.ct = (int32_t)c->dt.compute;
    if (map) {
        s.map_out = map->out;
        s.map_vec = map->vec;
        s.map_mode = map->mode;
        s.map_m = map->m;
    }
    return (lyco_status)lk_chan_sum(&s, st);
}

static lyco_status merge_fwd(const lyco_call *c, void *st, char *why, size_t why_len) {
    lk_ew_args e;
    memset(&e, 0, sizeof e);
    lk_view_req rq[3] = {{c->merge->weight, "W", 1, &e.W}, {c->out, "out", 1, &e.out}, {c->a->tensor[LYCO_IA3_WEIGHT], "ia3 weight", 0, &e.vec}};
    lyco_status rc = lk_views(rq, 3, why, why_len);
    if (rc) return rc;
    e.src_is_W = 1;
    e.vec_on_rows = !c->a->ia3_on_input;
    e.vec_mod = c->dims.O;
    e.K = c->dims.K;
    e.mode = (int32_t)c->merge->mode;
    e.ct = (int32_t)c->dt.compute;
    e.m = c->m;
    return (lyco_status)lk_ew_merge(&e, st);
}

static lyco_status merge_bwd(const lyco_call *c, void *st, char *why, size_t why_len) {
    if (!lyco_call_wants(c, LYCO_IA3_WEIGHT)) return LYCO_OK;
    DLTensor *gw = c->g->grad[LYCO_IA3_WEIGHT];
    if (!c->merge->weight) return lk_copy_or_zero(gw, "grad ia3 weight", NULL, 0, (int)c->dt.compute, st, why, why_len);
    lk_chan_args s;
    memset(&s, 0, sizeof s);
    lk_view_req rq[3] = {{c->d_out, "d_out", 1, &s.A}, {c->merge->weight, "W", 1, &s.B}, {gw, "grad ia3 weight", 0, &s.out}};
    lyco_status rc = lk_views(rq, 3, why, why_len);
    if (rc) return rc;
    bool in = c->a->ia3_on_input != 0;
    s.by_col = in;
    s.K = c->dims.K;
    s.nch = in ? c->dims.I : c->dims.O;
    s.scale = c->m;
    s.ct = (int32_t)c->dt.compute;
    return (lyco_status)lk_chan_sum(&s, st);
}

static lyco_status bypass_fwd(const lyco_call *c, void *st, char *why, size_t why_len) {
    const lyco_bypass_args *b = c->bypass;
    if (!c->a->ia3_on_input) return rowmap(c, b->y0, "y0", c->y, "y", st, why, why_len);
    lk_conv_args v;
    memset(&v, 0, sizeof v);
    const DLTensor *y0 = (b->flags & LYCO_BYPASS_DELTA_ONLY) ? NULL : b->y0;
    lk_view_req rq[5] = {{b->x, "x", lk_act_split(c, b->x), &v.x},
                         {b->weight, "W", 1, &v.E},
                         {c->a->tensor[LYCO_IA3_WEIGHT], "ia3 weight", 0, &v.vec},
                         {y0, "y0", lk_act_split(c, y0), &v.y0},
                         {c->y, "y", lk_act_split(c, c->y), &v.y}};
    lyco_status rc = lk_views(rq, 5, why, why_len);
    if (rc) return rc;
    lk_conv_geom_of(c, &v.g);
    v.m = c->m;
    v.ct = (int32_t)c->dt.compute;
    return (lyco_status)lk_conv_fwd(&v, st);
}

/* dx = 0; dy0 = dy ⊕ m·(dy ⊙ w) and G_w = m·Σ dy·y0 — linear: in one pass over dy and y0 */
static lyco_status bypass_bwd_out(const lyco_call *c, void *st, char *why, size_t why_len) {
    int ct = (int)c->dt.compute;
    lyco_status rc = lk_copy_or_zero(c->dx, "dx", NULL, lk_act_split(c, c->dx), ct, st, why, why_len);
    if (rc) return rc;
    if (!lyco_call_wants(c, LYCO_IA3_WEIGHT)) return c->dy0 ? rowmap(c, c->dy, "dy", c->dy0, "dy0", st, why, why_len) : LYCO_OK;
    lk_view dy;
    if (!lk_mk_view(c->dy, lk_act_split(c, c->dy), &dy)) return lk_decline(why, why_len, "dy has strides whose dims do not collapse to a matrix");
    lk_ew_args map;
    memset(&map, 0, sizeof map);
    bool fuse = c->dy0 && !is_conv(c);
    if (c->dy0 && (rc = fuse ? rowmap_args(c, c->dy, "dy", c->dy0, "dy0", &map, why, why_len)
                             : rowmap(c, c->dy, "dy", c->dy0, "dy0", st, why, why_len)))
        return rc;
    return act_grad(c, dy, false, c->bypass->y0, "y0", c->dims.O, fuse ? &map : NULL, st, why, why_len);
}

static lyco_status bypass_bwd_in(const lyco_call *c, void *st, char *why, size_t why_len) {
    const lyco_bypass_args *b = c->bypass;
    int ct = (int)c->dt.compute;
    bool delta = b->flags & LYCO_BYPASS_DELTA_ONLY, want = lyco_call_wants(c, LYCO_IA3_WEIGHT);
    lyco_status rc = lk_copy_or_zero(c->dy0, "dy0", delta ? NULL : c->dy, lk_act_split(c, c->dy0), ct, st, why, why_len);
    if (rc || (!c->dx && !want)) return rc;
    lk_conv_args v;
    memset(&v, 0, sizeof v);
    lk_view_req rq[5] = {{b->x, "x", lk_act_split(c, b->x), &v.x},
                         {b->weight, "W", 1, &v.E},
                         {c->a->tensor[LYCO_IA3_WEIGHT], "ia3 weight", 0, &v.vec},
                         {c->dy, "dy", lk_act_split(c, c->dy), &v.dy},
                         {c->dx, "dx", lk_act_split(c, c->dx), &v.dx}};
    if ((rc = lk_views(rq, 5, why, why_len))) return rc;
    lk_conv_geom_of(c, &v.g);
    v.m = c->m;
    v.ct = (int32_t)ct;
    void *gp = NULL;
    if (want && (rc = (lyco_status)lk_scratch_alloc(&gp, sizeof(float) * (size_t)(v.x.rows * v.x.cols), st))) return rc;
    v.gp = gp;
    rc = (lyco_status)lk_conv_dgrad(&v, st);
    if (!rc && want) rc = act_grad(c, lk_f32_view(gp, v.x.rows, v.x.cols), true, b->x, "x", c->dims.I, NULL, st, why, why_len);
    lyco_status rf = (lyco_status)lk_scratch_free(gp, st);
    return rc ? rc : rf;
}

lyco_status lk_run_ia3(const lyco_call *c, const lk_device *dev, void *st, char *why, size_t why_len) {
    (void)dev;
    const lyco_layer *l = &c->a->layer;
    if (l->kind != LYCO_LAYER_LINEAR && l->kind != LYCO_LAYER_CONV) return lk_decline(why, why_len, "IA3 on a norm layer is not supported");
    switch (c->dir) {
    case LYCO_DIR_MERGE_FWD: return merge_fwd(c, st, why, why_len);
    case LYCO_DIR_MERGE_BWD: return merge_bwd(c, st, why, why_len);
    case LYCO_DIR_BYPASS_FWD: return bypass_fwd(c, st, why, why_len);
    default: return c->a->ia3_on_input ? bypass_bwd_in(c, st, why, why_len) : bypass_bwd_out(c, st, why, why_len);
    }
}
