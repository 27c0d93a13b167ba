/*
 * norm.c — fp64 oracle of Norm (train_norm: LayerNorm / GroupNorm weight and bias deltas,
 * ALGORITHMS.md §2.10).
 *
 *   Δγ[c] = q[c]·w_norm[c],   Δβ[c] = q[c]·b_norm[c]   (Δβ = 0 without b_norm)
 *
 * q = LYCO_RANK_MASK (C values, taken as given; absent = 1) in merge and bypass alike.
 *   merge   ΔW = Δγ (O = C rows, IK = 1), bias delta Δβ: γ'' = γ + m·Δγ, β'' = β + m·Δβ
 *   bypass  (custom) y = y0 + N(x) ⊙ (m·Δγ) + m·Δβ, broadcast per channel, where N(x) is the
 *           normalised input (x − μ)/√(σ² + ε) with the biased variance σ² (as torch) and the
 *           layer's ε:
 *             LayerNorm: over the last dim, x (…, C) seen as tokens × C;
 *             GroupNorm: x (N, C, spatial…), per (n, group) over C/groups channels × spatial.
 *
 * Gradients. Merge: G_w_norm = q ⊙ G, G_b_norm = q ⊙ Gb (ref.c applies m). Bypass, with gy = ∂L/∂y
 * and x̂ = N(x) (sums over every element of a channel):
 *   G_w_norm[c] = m·q[c]·Σ gy·x̂,   G_b_norm[c] = m·q[c]·Σ gy
 *   gx = the full normalisation Jacobian of Σ gy·x̂·(m·Δγ): per group of L elements, with
 *        h = gy·m·Δγ[c], gx = rstd·(h − mean(h) − x̂·mean(h·x̂)), rstd = 1/√(σ² + ε).
 * The bias of the base layer and the base norm's own path are the caller's (y0, and its dx).
 */
#include <math.h>

#include "ref.h"

static double q(const ref_adapter *ra, int64_t c) { return ref_mask(ra, LYCO_RANK_MASK, c); }
static double bnorm(const ref_adapter *ra, int64_t c) { return ra->t[LYCO_B_NORM] ? ra->t[LYCO_B_NORM][c] : 0.0; }

/* ---- merge (additive: ref.c's generic path) ---- */

static void delta(const ref_adapter *ra, const double *W, double *dW) {
    (void)W;
    for (int64_t c = 0; c < ra->O; c++) dW[c] = q(ra, c) * ra->t[LYCO_W_NORM][c];
}

static void delta_bwd(ref_adapter *ra, const double *W, const double *G) {
    (void)W;
    if (!ra->g[LYCO_W_NORM]) return;
    for (int64_t c = 0; c < ra->O; c++) ra->g[LYCO_W_NORM][c] += q(ra, c) * G[c];
}

static void bias_delta(const ref_adapter *ra, double *db) {
    for (int64_t c = 0; c < ra->O; c++) db[c] = q(ra, c) * bnorm(ra, c);
}

static void bias_delta_bwd(ref_adapter *ra, const double *Gb) {
    if (!ra->g[LYCO_B_NORM]) return;
    for (int64_t c = 0; c < ra->O; c++) ra->g[LYCO_B_NORM][c] += q(ra, c) * Gb[c];
}

/* ---- bypass: normalisation groups ---- */

typedef struct {
    bool group;          /* GroupNorm */
    int64_t C, groups, cg, sp, ngroups, len;
} norm_geom;

static void geom(const ref_adapter *ra, norm_geom *g) {
    const lyco_layer *l = &ra->c->a->layer;
    g->C = ra->O;
    g->group = l->norm_kind == LYCO_NORM_GROUP;
    if (g->group) {
        g->groups = l->norm_groups;
        g->cg = g->C / g->groups;
        g->sp = ra->c->sp_in_n;
        g->ngroups = ra->c->tokens * g->groups;
        g->len = g->cg * g->sp;
    } else {
        g->groups = 1;
        g->cg = g->C;
        g->sp = 1;
        g->ngroups = lyco_numel(ra->c->bypass->x) / g->C;
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

/* Mean and 1/√(σ² + ε) of group k (biased variance). */
static void stats(const ref_adapter *ra, const norm_geom *g, const double *x, int64_t k, double *mu, double *rstd) {
    int64_t ch;
    double s = 0.0, v = 0.0;
    for (int64_t e = 0; e < g->len; e++) s += x[elem(g, k, e, &ch)];
    *mu = s / (double)g->len;
    for (int64_t e = 0; e < g->len; e++) {
        double d = x[elem(g, k, e, &ch)] - *mu;
        v += d * d;
    }
    *rstd = 1.0 / sqrt(v / (double)g->len + ra->c->a->layer.norm_eps);
}

static void bypass_fwd(const ref_adapter *ra, const double *x, double *out) {
    norm_geom g;
    geom(ra, &g);
    double m = ra->c->m;
    const double *w = ra->t[LYCO_W_NORM];
    for (int64_t k = 0; k < g.ngroups; k++) {
        double mu, rstd;
        stats(ra, &g, x, k, &mu, &rstd);
        for (int64_t e = 0; e < g.len; e++) {
            int64_t c, i = elem(&g, k, e, &c);
            out[i] = (x[i] - mu) * rstd * (m * (q(ra, c) * w[c])) + m * (q(ra, c) * bnorm(ra, c));
        }
    }
}

static void bypass_bwd(ref_adapter *ra, const double *x, const double *gy, double *gx) {
    norm_geom g;
    geom(ra, &g);
    double m = ra->c->m;
    const double *w = ra->t[LYCO_W_NORM];
    double *gw = ra->g[LYCO_W_NORM], *gb = ra->g[LYCO_B_NORM];
    for (int64_t k = 0; k < g.ngroups; k++) {
        double mu, rstd, mh = 0.0, mhx = 0.0;
        stats(ra, &g, x, k, &mu, &rstd);
        for (int64_t e = 0; e < g.len; e++) {
            int64_t c, i = elem(&g, k, e, &c);
            double xh = (x[i] - mu) * rstd, mq = m * q(ra, c), h = gy[i] * mq * w[c];
            if (gw) gw[c] += mq * gy[i] * xh;
            if (gb) gb[c] += mq * gy[i];
            mh += h;
            mhx += h * xh;
        }
        if (!gx) continue;
        mh /= (double)g.len;
        mhx /= (double)g.len;
        for (int64_t e = 0; e < g.len; e++) {
            int64_t c, i = elem(&g, k, e, &c);
            double xh = (x[i] - mu) * rstd, mq = m * q(ra, c), h = gy[i] * mq * w[c];
            gx[i] += rstd * (h - mh - xh * mhx);
        }
    }
}

const ref_algo ref_norm = {.delta = delta, .delta_bwd = delta_bwd, .bias_delta = bias_delta, .bias_delta_bwd = bias_delta_bwd,
                           .bypass_fwd = bypass_fwd, .bypass_bwd = bypass_bwd, .uses_sigma = false};
