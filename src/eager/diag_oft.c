/*
 * diag_oft.c — eager twin of Diag-OFT (ALGORITHMS.md §2.4, §7), following lycoris-lora 4.1.3's
 * torch bodies: R is built in fp32 (cayley_f32.h: Q0 and the constraint in T, the blocks'
 * dtype; identity, inverse and product in fp32), X (W̄ for merge, y0 as channel rows for bypass)
 * is cast to fp32, everything below is fp32 (each op rounded to fp32), and the result is rounded
 * once to T. The blocks act transposed: (OᵀX)[k·bs+μ] = Σ_ν O_k[ν, μ]·X[k·bs+ν].
 *
 * m = 1 and no rank-dropout mask (4.1.3's functional diff path, merge and bypass alike):
 *   E = (R − I)ᵀX;  ρ: E = ρ ⊙ E,  E = E + rnd_T(ρ − 1) ⊙ X;  Y = rnd_T(E + X)
 * merge with m ≠ 1 or a mask (the module's make_weight):
 *   M = ((R·m ⊙ D) − m·I) + I;  Z = MᵀX;  ρ: Z = ρ ⊙ Z;  Y = rnd_T(Z)
 * bypass with m ≠ 1 (upstream crashes there; the module's own operator, without its broken
 * extra (ρ − 1)⊙y0 term, with y0 cast to fp32 as on the m = 1 path):
 *   M = R·m + (1 − m)·I;  Z = MᵀX;  ρ: Z = ρ ⊙ Z;  Y = rnd_T(Z)
 *
 * Backward is autograd's chain of the same ops in fp32 (G_E = ρ ⊙ GY, G_op = X·G_Eᵀ per block,
 * G_R through m and D, then the Cayley adjoint); ρ's gradient is the fp32 sum cast to T (the
 * fast path's two contributions, from ρ ⊙ E and from (ρ − 1) ⊙ X, each cast to T and added in T);
 * GX = the einsum's input gradient in fp32 (plus rnd_T(ρ − 1) ⊙ GY on the fast path), cast to
 * T, and on the fast path added in T to the GY that reaches y0 through `y0 + Δ`.
 */
#include "cayley_f32.h"

typedef struct {
    eg_cayley cy;
    float *op;        /* the operator the einsum applies (nb·bs·bs, fp32): R − I or M */
    bool fast;        /* the m = 1, mask-free delta form */
} oft_state;

static float rho(const eg_adapter *ea, int64_t o) { return ea->t[LYCO_RESCALE] ? ea->t[LYCO_RESCALE][o] : 1.0f; }

static bool mask_used(const eg_adapter *ea) { return !ea->bypass && ea->t[LYCO_RANK_MASK]; }

static bool build(const eg_adapter *ea, oft_state *st) {
    const lyco_dims *d = &ea->c->dims;
    int64_t nb = d->nb, bs = d->bs, nn = bs * bs;
    double m = ea->c->m;
    float mf = (float)m, one_m = (float)(1.0 - m);
    if (!eg_cayley_fwd(ea, &st->cy, ea->t[LYCO_OFT_BLOCKS], nb, bs, ea->c->a->constraint)) return false;
    st->op = eg_alloc(ea, nb * nn);
    if (!st->op) return false;
    st->fast = m == 1.0 && !mask_used(ea);
    for (int64_t k = 0; k < nb; k++)
        for (int64_t a = 0; a < bs; a++)
            for (int64_t b = 0; b < bs; b++) {
                int64_t i = k * nn + a * bs + b;
                float eye = a == b ? 1.0f : 0.0f, R = st->cy.R[i];
                if (st->fast) st->op[i] = R - eye;
                else if (!ea->bypass) {
                    float t = R * mf;
                    if (mask_used(ea)) t = t * ea->t[LYCO_RANK_MASK][i];
                    t = t - mf * eye;
                    st->op[i] = t + eye;
                } else {
                    st->op[i] = R * mf + one_m * eye;
                }
            }
    return true;
}

/* Z = opᵀ X per block, fp32 accumulation */
static void apply_t(const eg_adapter *ea, const float *op, const float *X, int64_t n, float *Z) {
    int64_t nb = ea->c->dims.nb, bs = ea->c->dims.bs, nn = bs * bs;
    for (int64_t k = 0; k < nb; k++)
        for (int64_t mu = 0; mu < bs; mu++)
            for (int64_t j = 0; j < n; j++) {
                float s = 0.0f;
                for (int64_t nu = 0; nu < bs; nu++) s += op[k * nn + nu * bs + mu] * X[(k * bs + nu) * n + j];
                Z[(k * bs + mu) * n + j] = s;
            }
}

static void rows(const eg_adapter *ea, const float *X, int64_t n, float *Y) {
    lyco_dtype T = ea->T;
    oft_state st;
    if (!build(ea, &st)) return;
    float *Z = eg_alloc(ea, ea->O * n);
    if (!Z) return;
    apply_t(ea, st.op, X, n, Z);
    bool rs = ea->t[LYCO_RESCALE] != NULL;
    for (int64_t o = 0; o < ea->O; o++) {
        float r = rho(ea, o), rm1 = eg_rnd(r - 1.0f, T);
        for (int64_t j = 0; j < n; j++) {
            int64_t i = o * n + j;
            float z = Z[i];
            if (st.fast) {
                if (rs) {
                    z = r * z;
                    z = z + rm1 * X[i];
                }
                Y[i] = eg_rnd(z + X[i], T);
            } else {
                Y[i] = eg_rnd(rs ? r * z : z, T);
            }
        }
    }
}

static void rows_bwd(eg_adapter *ea, const float *X, const float *GY, int64_t n, float *GX) {
    const lyco_dims *d = &ea->c->dims;
    lyco_dtype T = ea->T;
    int64_t nb = d->nb, bs = d->bs, nn = bs * bs, O = ea->O;
    float mf = (float)ea->c->m;
    bool rs = ea->t[LYCO_RESCALE] != NULL;
    oft_state st;
    if (!build(ea, &st)) return;

    /* G_E = ρ ⊙ GY (the einsum output's gradient) */
    float *GE = eg_alloc(ea, O * n);
    if (!GE) return;
    for (int64_t o = 0; o < O; o++)
        for (int64_t j = 0; j < n; j++) GE[o * n + j] = rs ? GY[o * n + j] * rho(ea, o) : GY[o * n + j];

    if (ea->g[LYCO_RESCALE]) {
        float *Z = eg_alloc(ea, O * n);
        if (!Z) return;
        apply_t(ea, st.op, X, n, Z);
        for (int64_t o = 0; o < O; o++) {
            float s = 0.0f, sx = 0.0f;
            for (int64_t j = 0; j < n; j++) {
                s += GY[o * n + j] * Z[o * n + j];
                sx += GY[o * n + j] * X[o * n + j];
            }
            float g = eg_rnd(s, T);
            if (st.fast) g = eg_rnd(g + eg_rnd(sx, T), T);   /* + the (ρ − 1) ⊙ X term */
            ea->g[LYCO_RESCALE][o] = g;
        }
    }

    if (ea->g[LYCO_OFT_BLOCKS]) {
        float *GR = eg_alloc(ea, nb * nn);
        if (!GR) return;
        bool mk = mask_used(ea);
        for (int64_t k = 0; k < nb; k++)
            for (int64_t nu = 0; nu < bs; nu++)
                for (int64_t mu = 0; mu < bs; mu++) {
                    float s = 0.0f;   /* G_op_k[ν, μ] */
                    for (int64_t j = 0; j < n; j++) s += X[(k * bs + nu) * n + j] * GE[(k * bs + mu) * n + j];
                    int64_t i = k * nn + nu * bs + mu;
                    if (!st.fast) {
                        if (mk) s = s * ea->t[LYCO_RANK_MASK][i];
                        s = s * mf;
                    }
                    GR[i] = s;
                }
        if (!eg_cayley_bwd(ea, &st.cy, GR, ea->g[LYCO_OFT_BLOCKS])) return;
    }

    if (GX)
        for (int64_t k = 0; k < nb; k++)
            for (int64_t nu = 0; nu < bs; nu++) {
                int64_t o = k * bs + nu;
                float rm1 = eg_rnd(rho(ea, o) - 1.0f, T);
                for (int64_t j = 0; j < n; j++) {
                    float s = 0.0f;   /* (op · G_E)[ν] */
                    for (int64_t mu = 0; mu < bs; mu++) s += st.op[k * nn + nu * bs + mu] * GE[(k * bs + mu) * n + j];
                    if (st.fast) {
                        if (rs) s = s + GY[o * n + j] * rm1;
                        GX[o * n + j] = eg_rnd(GY[o * n + j] + eg_rnd(s, T), T);
                    } else {
                        GX[o * n + j] = eg_rnd(s, T);
                    }
                }
            }
}

const eg_algo eg_diag_oft = {.rows = rows, .rows_bwd = rows_bwd};
