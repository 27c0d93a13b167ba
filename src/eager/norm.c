/*
 * norm.c — eager twin of Norm (train_norm: LayerNorm / GroupNorm weight and bias deltas,
 * ALGORITHMS.md §2.10), following lycoris-lora 4.1.3's NormModule torch body.
 *
 * merge:  Δγ̄ = rnd(q ⊙ w_norm) (w_norm itself without a mask), bias delta rnd(q ⊙ b_norm) (0
 *         without b_norm); eager.c then applies γ'' = rnd(γ + rnd(Δγ̄ · m)), β'' likewise
 *         (upstream: `org_w + w_norm * multiplier`).
 * bypass: Δγ = rnd(rnd(q ⊙ w_norm) · f32(m)), Δβ = rnd(rnd(q ⊙ b_norm) · f32(m)), then the
 *         layer's own op with them as its affine parameters (`F.layer_norm / F.group_norm(x,
 *         weight=Δγ, bias=Δβ, eps)`, NormModule's delta form `base + delta`), which torch
 *         computes in fp32 from T inputs and rounds once:
 *           Δ = rnd((x − μ)·rstd·Δγ[c] + Δβ[c]),  μ, σ² (biased), rstd = 1/√(σ² + ε) in fp32,
 *         per row of C (LayerNorm) or per (n, group) over C/groups channels × spatial (GroupNorm);
 *         eager.c adds Δ to y0. (4.1.3's own forward calls the op once with the merged γ'', β'';
 *         lyco's bypass sees y0, not γ and β, so it takes the delta form: one rounding apart.)
 *
 * Backward is autograd's chain: the norm op's backward (fp32 inside, each output rounded once)
 *   G_Δγ[c] = rnd(Σ dy·x̂),  G_Δβ[c] = rnd(Σ dy),  dx = rnd(rstd·(h − mean(h) − x̂·mean(h·x̂))),
 *   h = dy·Δγ[c], x̂ = (x − μ)·rstd, means over the normalisation group;
 * then × m and ⊙ q in reverse: G_w_norm = rnd(rnd(G_Δγ · m) ⊙ q), G_b_norm likewise. Merge:
 * G_w_norm = rnd(G ⊙ q) with G = rnd(∂L/∂γ'' · m) from eager.c (the bias the same).
 */
#include <math.h>
#include <string.h>

#include "eager.h"

/* ---- merge ---- */

static void masked(const eg_adapter *ea, const float *v, float *out) {
    for (int64_t c = 0; c < ea->O; c++) out[c] = ea->t[LYCO_RANK_MASK] ? eg_rnd(v[c] * ea->t[LYCO_RANK_MASK][c], ea->T) : v[c];
}

static void delta(const eg_adapter *ea, const float *W, float *dW) {
    (void)W;
    masked(ea, ea->t[LYCO_W_NORM], dW);
}

static void delta_bwd(eg_adapter *ea, const float *W, const float *G) {
    (void)W;
    if (ea->g[LYCO_W_NORM]) masked(ea, G, ea->g[LYCO_W_NORM]);
}

static void bias_delta(const eg_adapter *ea, float *db) {
    if (ea->t[LYCO_B_NORM]) masked(ea, ea->t[LYCO_B_NORM], db);
    else memset(db, 0, sizeof(float) * (size_t)ea->O);
}

static void bias_delta_bwd(eg_adapter *ea, const float *Gb) {
    if (ea->g[LYCO_B_NORM]) masked(ea, Gb, ea->g[LYCO_B_NORM]);
}

/* ---- bypass: normalisation groups ---- */

typedef struct {
    bool group;
    int64_t C, groups, cg, sp, ngroups, len;
} norm_geom;

static void geom(const eg_adapter *ea, norm_geom *g) {
    const lyco_layer *l = &ea->c->a->layer;
    g->C = ea->O;
    g->group = l->norm_kind == LYCO_NORM_GROUP;
    if (g->group) {
        g->groups = l->norm_groups;
        g->cg = g->C / g->groups;
        g->sp = ea->c->sp_in_n;
        g->ngroups = ea->c->tokens * g->groups;
        g->len = g->cg * g->sp;
    } else {
        g->groups = 1;
        g->cg = g->C;
        g->sp = 1;
        g->ngroups = lyco_numel(ea->c->bypass->x) / g->C;
        g->len = g->C;
    }
}

/* Element e of normalisation group k: its index in x and its channel. */
static int64_t elem(const norm_geom *g, int64_t k, int64_t e, int64_t *ch) {
    if (!g->group) {
        *ch = e;
        return k * g->C + e;
    }
    int64_t n = k / g->groups, gi = k % g->groups, c = gi * g->cg + e / g->sp, p = e % g->sp;
    *ch = c;
    return (n * g->C + c) * g->sp + p;
}

/* fp32 mean and 1/√(σ² + ε) of group k (biased variance, two passes) */
static void stats(const eg_adapter *ea, const norm_geom *g, const float *x, int64_t k, float *mu, float *rstd) {
    int64_t ch;
    float s = 0.0f, v = 0.0f;
    for (int64_t e = 0; e < g->len; e++) s += x[elem(g, k, e, &ch)];
    *mu = s / (float)g->len;
    for (int64_t e = 0; e < g->len; e++) {
        float d = x[elem(g, k, e, &ch)] - *mu;
        v += d * d;
    }
    *rstd = 1.0f / sqrtf(v / (float)g->len + (float)ea->c->a->layer.norm_eps);
}

/* Δγ, Δβ (C each, in T): rnd(rnd(q ⊙ v) · m) */
static void affine(const eg_adapter *ea, float *dg, float *db) {
    masked(ea, ea->t[LYCO_W_NORM], dg);
    eg_scale(dg, ea->O, ea->c->m, ea->T);
    if (ea->t[LYCO_B_NORM]) {
        masked(ea, ea->t[LYCO_B_NORM], db);
        eg_scale(db, ea->O, ea->c->m, ea->T);
    }
}

static void bypass_fwd(const eg_adapter *ea, const float *x, const float *W, float *delta_out) {
    (void)W;
    norm_geom g;
    geom(ea, &g);
    float *dg = eg_alloc(ea, g.C), *db = eg_alloc(ea, g.C);
    if (!dg || !db) return;
    affine(ea, dg, db);
    for (int64_t k = 0; k < g.ngroups; k++) {
        float mu, rstd;
        stats(ea, &g, x, k, &mu, &rstd);
        for (int64_t e = 0; e < g.len; e++) {
            int64_t c, i = elem(&g, k, e, &c);
            delta_out[i] = eg_rnd((x[i] - mu) * rstd * dg[c] + db[c], ea->T);
        }
    }
}

static void bypass_bwd(eg_adapter *ea, const float *x, const float *W, const float *dy, float *dx) {
    (void)W;
    lyco_dtype T = ea->T;
    norm_geom g;
    geom(ea, &g);
    float *dg = eg_alloc(ea, g.C), *db = eg_alloc(ea, g.C), *sg = eg_alloc(ea, g.C), *sb = eg_alloc(ea, g.C);
    if (!dg || !db || !sg || !sb) return;
    affine(ea, dg, db);
    for (int64_t k = 0; k < g.ngroups; k++) {
        float mu, rstd, mh = 0.0f, mhx = 0.0f;
        stats(ea, &g, x, k, &mu, &rstd);
        for (int64_t e = 0; e < g.len; e++) {
            int64_t c, i = elem(&g, k, e, &c);
            float xh = (x[i] - mu) * rstd, h = dy[i] * dg[c];
            sg[c] += dy[i] * xh;
            sb[c] += dy[i];
            mh += h;
            mhx += h * xh;
        }
        if (!dx) continue;
        mh /= (float)g.len;
        mhx /= (float)g.len;
        for (int64_t e = 0; e < g.len; e++) {
            int64_t c, i = elem(&g, k, e, &c);
            float xh = (x[i] - mu) * rstd;
            dx[i] = eg_rnd(rstd * (dy[i] * dg[c] - mh - xh * mhx), T);
        }
    }
    /* through × m, then ⊙ q */
    for (int64_t c = 0; c < g.C; c++) {
        sg[c] = eg_rnd(eg_rnd(sg[c], T) * (float)ea->c->m, T);
        sb[c] = eg_rnd(eg_rnd(sb[c], T) * (float)ea->c->m, T);
    }
    if (ea->g[LYCO_W_NORM]) masked(ea, sg, ea->g[LYCO_W_NORM]);
    if (ea->g[LYCO_B_NORM]) masked(ea, sb, ea->g[LYCO_B_NORM]);
}

const eg_algo eg_norm = {.delta = delta, .delta_bwd = delta_bwd, .bias_delta = bias_delta, .bias_delta_bwd = bias_delta_bwd,
                         .bypass_fwd = bypass_fwd, .bypass_bwd = bypass_bwd};
