/*
 * check.c — runs one (case, direction, dtype row): builds random inputs (fresh per seed, never
 * all-zero), poisons every output with NaN, runs the backend under test and the eager twin
 * through the public API, computes the exact fp64 reference with the oracle (unrounded), and
 * scores each output tensor in its own dtype (NUMERICS.md §2, §4): the worst output decides.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "check.h"
#include "ref/ref.h"
#ifdef LYCO_HAVE_CUDA
#include "cuda/stage.h"
#endif

/* All tensors of one run. */
typedef struct {
    case_adapter ca;
    case_tensor W, bias, x, y0, dout, dout_bias;     /* inputs */
    bool has_W, has_bias, has_y0, has_dout_bias;
    case_tensor out, out_bias, dx, dy0;               /* outputs */
    bool has_out_bias, has_dy0;
    case_tensor grad[LYCO_SLOT_COUNT];
    bool has_grad[LYCO_SLOT_COUNT];
    lyco_grads g;
    lyco_merge_args margs;
    lyco_bypass_args bargs;
    lyco_dtypes dt;
} run_set;

static void run_set_free(run_set *r) {
    case_adapter_free(&r->ca);
    case_tensor *ts[] = {&r->W, &r->bias, &r->x, &r->y0, &r->dout, &r->dout_bias, &r->out, &r->out_bias, &r->dx, &r->dy0};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) case_tensor_free(ts[i]);
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) case_tensor_free(&r->grad[s]);
}

static bool is_bypass(lyco_direction d) { return d == LYCO_DIR_BYPASS_FWD || d == LYCO_DIR_BYPASS_BWD; }
static bool is_mask(int s) { return s == LYCO_RANK_MASK || s == LYCO_RANK_MASK_B || s == LYCO_MODULE_MASK; }

static int weight_shape(const lyco_case *c, const lyco_layer *l, int64_t *sh) {
    if (c->kind == LYCO_LAYER_NORM) { sh[0] = c->O; return 1; }
    sh[0] = c->O;
    sh[1] = c->I / (l->kind == LYCO_LAYER_CONV && l->groups > 1 ? l->groups : 1);
    if (c->kind != LYCO_LAYER_CONV) return 2;
    for (int i = 0; i < c->conv_dims; i++) sh[2 + i] = c->k[i] ? c->k[i] : 1;
    return 2 + c->conv_dims;
}

static int x_shape(const lyco_case *c, int64_t *sh) {
    if (c->kind == LYCO_LAYER_CONV || (c->kind == LYCO_LAYER_NORM && (c->opts & CASE_GROUPNORM))) {
        sh[0] = c->tokens;
        sh[1] = c->kind == LYCO_LAYER_NORM ? c->O : c->I;
        int nd = c->kind == LYCO_LAYER_CONV ? c->conv_dims : 2;
        for (int i = 0; i < nd; i++) sh[2 + i] = c->spatial[i] ? c->spatial[i] : 1;
        return 2 + nd;
    }
    sh[0] = c->tokens;
    sh[1] = c->kind == LYCO_LAYER_NORM ? c->O : c->I;
    return 2;
}

static int y_shape(const lyco_case *c, const lyco_layer *l, int64_t *sh) {
    int nd = x_shape(c, sh);
    if (c->kind == LYCO_LAYER_LINEAR) sh[1] = c->O;
    if (c->kind == LYCO_LAYER_CONV) {
        sh[1] = c->O;
        for (int i = 0; i < c->conv_dims; i++) {
            int64_t span = l->dilation[i] * (l->kernel[i] - 1) + 1;
            sh[2 + i] = (sh[2 + i] + 2 * l->padding[i] - span) / l->stride[i] + 1;
        }
    }
    return nd;
}

static bool needs_W(const lyco_case *c, lyco_direction dir) {
    if (!is_bypass(dir)) return true;
    return (c->opts & (CASE_DORA_OUT | CASE_DORA_IN)) || c->algo == LYCO_ALGO_GLORA ||
           (c->algo == LYCO_ALGO_IA3 && (c->opts & CASE_ON_INPUT));
}
static bool needs_y0(const lyco_case *c) {
    return c->algo == LYCO_ALGO_DIAG_OFT || c->algo == LYCO_ALGO_BOFT || (c->algo == LYCO_ALGO_IA3 && !(c->opts & CASE_ON_INPUT)) ||
           !(c->opts & CASE_NO_Y0);
}

/* Builds inputs and (poisoned) outputs; resolves the policy's dtypes through the public API. */
static lyco_status build(const lyco_case *c, lyco_direction dir, const lyco_dtype_row *row, lyco_ctx *ctx,
                         lyco_rng *rng, run_set *r) {
    memset(r, 0, sizeof *r);
    uint32_t lay = c->opts & (CASE_NONCONTIG | CASE_UNALIGNED);
    if (!case_build_adapter(c, row->adapter, is_bypass(dir), rng, &r->ca)) return lyco_fail(LYCO_ERR_NOMEM, "check: cannot build case %s", c->name);
    const lyco_layer *l = &r->ca.a.layer;
    int64_t wsh[5], xsh[5], ysh[5], one = c->O;
    int wnd = weight_shape(c, l, wsh), xnd = x_shape(c, xsh), ynd = y_shape(c, l, ysh);
    bool bias = (c->opts & CASE_BIAS) && (c->algo == LYCO_ALGO_FULL || c->algo == LYCO_ALGO_NORM);
    if (needs_W(c, dir)) {
        if (!case_tensor_make(&r->W, row->base, wnd, wsh, lay, rng, 1.0)) return LYCO_ERR_NOMEM;
        r->has_W = true;
    }
    if (is_bypass(dir)) {
        if (!case_tensor_make(&r->x, row->base, xnd, xsh, lay, rng, 1.0)) return LYCO_ERR_NOMEM;
        if (needs_y0(c)) {
            if (!case_tensor_make(&r->y0, row->base, ynd, ysh, lay, rng, 1.0)) return LYCO_ERR_NOMEM;
            r->has_y0 = true;
        }
        r->bargs = (lyco_bypass_args){&r->x.t, r->has_y0 ? &r->y0.t : NULL, r->has_W ? &r->W.t : NULL,
                                      (c->opts & CASE_NO_Y0) ? LYCO_BYPASS_DELTA_ONLY : 0};
    } else {
        if (bias) {
            if (!case_tensor_make(&r->bias, row->base, 1, &one, 0, rng, 1.0)) return LYCO_ERR_NOMEM;
            r->has_bias = true;
        }
        r->margs = (lyco_merge_args){r->has_W ? &r->W.t : NULL, r->has_bias ? &r->bias.t : NULL, LYCO_MERGE_DELTA};
        /* merge forward: the three modes take turns over the dtype rows (a fixed function of the
           case and the row, so every mode meets every algorithm on some rows) */
        if (dir == LYCO_DIR_MERGE_FWD) {
            static const lyco_merge_mode modes[3] = {LYCO_MERGE_DELTA, LYCO_MERGE_WEIGHT, LYCO_MERGE_UNMERGE};
            uint64_t h = 1469598103934665603ull;
            for (const char *p = c->name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
            r->margs.mode = modes[(h + (uint64_t)(row - lyco_dtype_rows)) % 3];
            /* unmerge exists only for additive ΔW (the API refuses it for DoRA and rotations) */
            bool additive = !(c->opts & (CASE_DORA_OUT | CASE_DORA_IN)) && c->algo != LYCO_ALGO_DIAG_OFT && c->algo != LYCO_ALGO_BOFT;
            const char *force = getenv("LYCO_CHECK_MERGE_MODE"); /* delta | weight | unmerge: one mode for every row */
            if (force && !strcmp(force, "delta")) r->margs.mode = LYCO_MERGE_DELTA;
            if (force && !strcmp(force, "weight")) r->margs.mode = LYCO_MERGE_WEIGHT;
            if (force && !strcmp(force, "unmerge")) r->margs.mode = LYCO_MERGE_UNMERGE;
            if (r->margs.mode == LYCO_MERGE_UNMERGE && !additive) r->margs.mode = LYCO_MERGE_WEIGHT;
        }
    }
    lyco_status st = lyco_resolve_dtypes(ctx, &r->ca.a, r->has_W ? &r->W.t : NULL, is_bypass(dir) ? &r->x.t : NULL,
                                         r->has_y0 ? &r->y0.t : NULL, &r->dt);
    if (st) return st;
    lyco_dtype od = r->dt.output;
    switch (dir) {
    case LYCO_DIR_MERGE_FWD:
        if (!case_tensor_make(&r->out, od, wnd, wsh, lay, rng, 1.0)) return LYCO_ERR_NOMEM;
        if (bias) {
            if (!case_tensor_make(&r->out_bias, od, 1, &one, 0, rng, 1.0)) return LYCO_ERR_NOMEM;
            r->has_out_bias = true;
        }
        break;
    case LYCO_DIR_BYPASS_FWD:
        if (!case_tensor_make(&r->out, od, ynd, ysh, lay, rng, 1.0)) return LYCO_ERR_NOMEM;
        break;
    case LYCO_DIR_MERGE_BWD:
        if (!case_tensor_make(&r->dout, od, wnd, wsh, lay, rng, 1.0)) return LYCO_ERR_NOMEM;
        if (bias) {
            if (!case_tensor_make(&r->dout_bias, od, 1, &one, 0, rng, 1.0)) return LYCO_ERR_NOMEM;
            r->has_dout_bias = true;
        }
        break;
    default:
        if (!case_tensor_make(&r->dout, od, ynd, ysh, lay, rng, 1.0)) return LYCO_ERR_NOMEM;
        if (!case_tensor_make(&r->dx, row->base, xnd, xsh, lay, rng, 1.0)) return LYCO_ERR_NOMEM;
        if (r->has_y0) {
            if (!case_tensor_make(&r->dy0, row->base, ynd, ysh, lay, rng, 1.0)) return LYCO_ERR_NOMEM;
            r->has_dy0 = true;
        }
        break;
    }
    if (dir == LYCO_DIR_MERGE_BWD || dir == LYCO_DIR_BYPASS_BWD)
        for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
            if (!r->ca.has[s] || is_mask(s)) continue;
            const DLTensor *t = &r->ca.slot[s].t;
            if (!case_tensor_make(&r->grad[s], lyco_dtype_of(t), t->ndim, t->shape, 0, rng, 1.0)) return LYCO_ERR_NOMEM;
            r->has_grad[s] = true;
            r->g.grad[s] = &r->grad[s].t;
        }
    return LYCO_OK;
}

static void poison(run_set *r) {
    case_tensor *ts[] = {&r->out, &r->out_bias, &r->dx, &r->dy0};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        if (ts[i]->alloc) case_tensor_fill(ts[i], NAN);
    for (int s = 0; s < LYCO_SLOT_COUNT; s++)
        if (r->has_grad[s]) case_tensor_fill(&r->grad[s], NAN);
}

static lyco_status invoke(lyco_ctx *ctx, lyco_direction dir, run_set *r) {
    switch (dir) {
    case LYCO_DIR_MERGE_FWD: return lyco_merge_fwd(ctx, &r->out.t, r->has_out_bias ? &r->out_bias.t : NULL, &r->ca.a, &r->margs);
    case LYCO_DIR_MERGE_BWD: return lyco_merge_bwd(ctx, &r->g, &r->ca.a, &r->margs, &r->dout.t, r->has_dout_bias ? &r->dout_bias.t : NULL);
    case LYCO_DIR_BYPASS_FWD: return lyco_bypass_fwd(ctx, &r->out.t, &r->ca.a, &r->bargs);
    default: return lyco_bypass_bwd(ctx, &r->g, &r->dx.t, r->has_dy0 ? &r->dy0.t : NULL, &r->ca.a, &r->bargs, &r->dout.t);
    }
}

#ifdef LYCO_HAVE_CUDA
/* A run's device mirror: every tensor of the run (adapter slots, inputs, the poisoned outputs,
   gradients) copied to the device; the module mask stays on the host, where the API reads it.
   d is the run with every tensor pointing at its mirror. */
enum { NIO = 10 };
typedef struct {
    lyco_stage sl[LYCO_SLOT_COUNT], sg[LYCO_SLOT_COUNT], io[NIO];
    run_set d;
} dev_run;

static void io_tensors(run_set *r, case_tensor **t) {
    case_tensor *all[NIO] = {&r->W, &r->bias, &r->x, &r->y0, &r->dout, &r->dout_bias, &r->out, &r->out_bias, &r->dx, &r->dy0};
    memcpy(t, all, sizeof all);
}

static void dev_free(dev_run *dr) {
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        lyco_stage_free(&dr->sl[s]);
        lyco_stage_free(&dr->sg[s]);
    }
    for (int i = 0; i < NIO; i++) lyco_stage_free(&dr->io[i]);
}

static lyco_status dev_stage(run_set *r, dev_run *dr) {
    memset(dr, 0, sizeof *dr);
    case_tensor *hs[NIO], *ds[NIO];
    dr->d = *r;
    io_tensors(r, hs);
    io_tensors(&dr->d, ds);
    lyco_status st = LYCO_OK;
    for (int s = 0; s < LYCO_SLOT_COUNT && !st; s++) {
        if (!r->ca.has[s] || s == LYCO_MODULE_MASK) continue;
        if (!(st = lyco_stage_in(&dr->sl[s], &r->ca.slot[s].t, true))) dr->d.ca.a.tensor[s] = &dr->sl[s].t;
    }
    for (int i = 0; i < NIO && !st; i++)
        if (hs[i]->alloc && !(st = lyco_stage_in(&dr->io[i], &hs[i]->t, true))) ds[i]->t = dr->io[i].t;
    for (int s = 0; s < LYCO_SLOT_COUNT && !st; s++)
        if (r->has_grad[s] && !(st = lyco_stage_in(&dr->sg[s], &r->grad[s].t, true))) dr->d.g.grad[s] = &dr->sg[s].t;
    if (st) {
        dev_free(dr);
        return st;
    }
    run_set *d = &dr->d;
    d->margs.weight = r->has_W ? &d->W.t : NULL;
    d->margs.bias = r->has_bias ? &d->bias.t : NULL;
    d->bargs.x = &d->x.t;
    d->bargs.y0 = r->has_y0 ? &d->y0.t : NULL;
    d->bargs.weight = r->has_W ? &d->W.t : NULL;
    return LYCO_OK;
}

/* Copies the outputs (and gradients) of the device run back into r's host tensors. */
static lyco_status dev_collect(dev_run *dr) {
    lyco_status st = LYCO_OK;
    for (int i = 6; i < NIO && !st; i++) st = lyco_stage_out(&dr->io[i]);
    for (int s = 0; s < LYCO_SLOT_COUNT && !st; s++) st = lyco_stage_out(&dr->sg[s]);
    return st;
}

/* The cuda backend takes device tensors: mirror the run to the device, run the call there, copy
   the outputs back into r's host tensors. ms: wall time of the call and its completion, copies
   excluded. */
static lyco_status invoke_cuda(lyco_ctx *ctx, lyco_direction dir, run_set *r, double *ms) {
    dev_run *dr = malloc(sizeof *dr);
    if (!dr) return lyco_fail(LYCO_ERR_NOMEM, "check: out of memory");
    lyco_status st = dev_stage(r, dr);
    if (st) {
        free(dr);
        return st;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = invoke(ctx, dir, &dr->d);
    lyco_status sy = lyco_stage_sync();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *ms = 1e3 * (double)(t1.tv_sec - t0.tv_sec) + 1e-6 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (!st) st = sy;
    if (!st) st = dev_collect(dr);
    dev_free(dr);
    free(dr);
    return st;
}
#endif

/* The outputs of a direction, as (tensor, name) pairs, in a fixed order. */
typedef struct {
    DLTensor *t[LYCO_SLOT_COUNT + 4];
    const char *name[LYCO_SLOT_COUNT + 4];
    int ref_out[LYCO_SLOT_COUNT + 4];   /* ref_output index, or -1 - slot for gradients */
    int n;
} out_list;

static void outputs_of(lyco_direction dir, run_set *r, out_list *ol) {
    ol->n = 0;
#define ADD(tensor, nm, ro) do { ol->t[ol->n] = (tensor); ol->name[ol->n] = (nm); ol->ref_out[ol->n] = (ro); ol->n++; } while (0)
    if (dir == LYCO_DIR_MERGE_FWD || dir == LYCO_DIR_BYPASS_FWD) ADD(&r->out.t, dir == LYCO_DIR_MERGE_FWD ? "out" : "y", REF_OUT_MAIN);
    if (r->has_out_bias) ADD(&r->out_bias.t, "out_bias", REF_OUT_BIAS);
    if (dir == LYCO_DIR_BYPASS_BWD) ADD(&r->dx.t, "dx", REF_OUT_DX);
    if (r->has_dy0) ADD(&r->dy0.t, "dy0", REF_OUT_DY0);
    for (int s = 0; s < LYCO_SLOT_COUNT; s++)
        if (r->has_grad[s]) ADD(&r->grad[s].t, lyco_slot_name((lyco_slot)s), -1 - s);
#undef ADD
}

static void read_f64(const DLTensor *t, double *dst) { lyco_gather_f64(t, lyco_dtype_of(t), dst); }

/* Length of the longest fp32 reduction behind one output element of this direction. */
static double reduction_length(const lyco_case *c, lyco_direction dir) {
    double k = case_kernel_positions(c);
    double ik = (double)c->I * k, r = (double)(c->rank > 0 ? c->rank : 1);
    double sp = case_spatial_positions(c);
    double dora = (c->opts & (CASE_DORA_OUT | CASE_DORA_IN)) ? ik + (double)c->O : 0.0;
    /* GLoRA's ΔW contains W·A1, a product over the input channels */
    double glora = c->algo == LYCO_ALGO_GLORA ? (double)c->I : 0.0;
    /* Tucker's core (r × r × k) adds a contraction over r·k to every chain, twice on the backward
       ones (the core's transpose feeds both d_down and dx); without it the H200's conv test saw
       d_down at 38 ULP over a 33 budget and dx at 67 over 53 (cu_conv2d_tucker_r70) */
    double tucker = (c->opts & CASE_TUCKER) ? r * k : 0.0;
    /* BOFT chains its m butterfly stages, each a product with b × b blocks (rank = b, extra[0] =
       m): m·b more fp32 roundings deep; m = 0 in a case means the full log2(nb) + 1 (boft_linear_1280_b10_m8, fp16+fp32adapter merge: 19.8 ULP
       against a 17.6 budget that counted one stage) */
    double boft = c->algo == LYCO_ALGO_BOFT ? (double)case_boft_stages(c) * r : 0.0;
    /* each rotation block is itself built in fp32: the Cayley solve R = (I + Q)(I − Q)⁻¹ of a b × b
       block is an elimination then a substitution, two chains b deep, in every block of every
       stage (diag_oft_linear_bs32_rescale_mult merge_fwd: 21.6 ULP, fp32 output, seed
       1796075528899827 with LYCO_CPU_ISA=base, and 20.2 at seed 96 on AVX-512, against a 19.1
       budget that counted only the product with W; a 150-seed sweep put BOFT's merges at 0.96 of
       theirs) */
    double cayley = c->algo == LYCO_ALGO_DIAG_OFT ? 2.0 * r
                    : c->algo == LYCO_ALGO_BOFT  ? 2.0 * (double)case_boft_stages(c) * r : 0.0;
    double rot = boft + cayley;
    /* LoHa's CUDA bypass forward runs through the face-splitting form (src/cuda/loha_fs.cu):
       h = x·Kᵀ is I·K long, then y = h·Mᵀ sums r1·r2 pair terms instead of r */
    double r2 = (double)(c->extra[0] > 0 ? c->extra[0] : (c->rank > 0 ? c->rank : 1));
    double loha = c->algo == LYCO_ALGO_LOHA ? r * r2 : 0.0;
    switch (dir) {
    case LYCO_DIR_MERGE_FWD: return r * k + dora + glora + tucker + rot + 1;
    case LYCO_DIR_MERGE_BWD: return ik + (double)c->O + dora + 2.0 * tucker + 2.0 * rot;
    case LYCO_DIR_BYPASS_FWD: return ik + r + dora + glora + tucker + rot + loha;
    default: return (double)c->tokens * sp + ik + (double)c->O + dora + 2.0 * tucker + 2.0 * rot;
    }
}

/* Does the fused path round an intermediate to the compute dtype on purpose (NUMERICS.md §1.6)? */
static bool rounds_intermediate(const lyco_case *c, lyco_direction dir) {
    bool bypass = dir == LYCO_DIR_BYPASS_FWD || dir == LYCO_DIR_BYPASS_BWD;
    /* LoHa's CUDA bypass for 16-bit compute (src/cuda/loha_tc.cu) stores ΔW̄ in row / column
       chunks in the compute dtype before x·ΔW̄ᵀ and dy·ΔW̄, where the eager chain stores the
       whole ΔW̄ */
    if (bypass && c->algo == LYCO_ALGO_LOHA && !(c->opts & (CASE_DORA_OUT | CASE_DORA_IN))) return true;
    /* DoRA's merge backward stores ∂L/∂V in the compute dtype before the factors' contractions
       (every backend; the eager chain stores it too) */
    if (dir == LYCO_DIR_MERGE_BWD && (c->opts & (CASE_DORA_OUT | CASE_DORA_IN))) return true;
    return bypass && (c->algo == LYCO_ALGO_LOCON || c->algo == LYCO_ALGO_DYLORA || c->algo == LYCO_ALGO_GLORA) &&
           !(c->opts & (CASE_DORA_OUT | CASE_DORA_IN));
}

double lyco_check_budget(const lyco_case *c, lyco_direction dir, lyco_dtype out, lyco_dtype compute, bool eager,
                         bool full_reduction, int64_t n, double rho) {
    /* In ULP_out of the RMS, on top of each element's own 0.5-ULP rounding (NUMERICS.md §2.7, §4.2).
       fp32 accumulation adds < 0.01 ULP to 16-bit outputs; on fp32 outputs ~0.3·sqrt(K) on
       average (§2.5), plus a few fp32 roundings of scale factors (s·m·σs, the epilogue add) on
       elements up to ~4× the RMS: 8 + 2·ρ·sqrt(K) (ρ below) bounds the max. A deliberately rounded
       intermediate adds 0.5 ULP of the compute dtype times its downstream gain: up to ~6
       ULP_compute, counted in output ULPs (measured 2.2 on the case table's mixed rows, 4.87 on
       the bench's DyLoRA bypass backward, 64 tokens × 640 × 256, bf16+fp32adapter, lora_up, seed
       1796005559294120, where the eager twin reached 8.1).
       A full reduction to one value (σs's gradient) can cancel: its error is bounded by
       K·u·Σ|terms|, not by the RMS of its one output, so it gets a budget linear in K. */
    double K = reduction_length(c, dir);
    if (full_reduction) {
        double sp = case_spatial_positions(c);
        K = (dir == LYCO_DIR_BYPASS_BWD ? (double)c->tokens * sp : reduction_length(c, LYCO_DIR_MERGE_BWD)) * (double)c->O;
    }
    double per = ldexp(1.0, lyco_dtype_precision(out) - lyco_dtype_precision(compute));
    /* the max over n elements reaches further into the error's tail than the ~4096-element
       cases the constants were calibrated on (seen: 25 ULP at 4096×4096, rank 32, fp32) */
    double tail = n > 4096 ? log2((double)n) / 12.0 : 1.0;
    /* bypass backward's weight gradients reduce over tokens a product that already carries the
       recomputed h = x·Dᵀ's own fp32 error (length I·K): the two stages' errors add, so the chain
       counts as sqrt(K − I·K) + sqrt(I·K) rather than sqrt(K) (H200 conv test, cu_conv2d_r67_o70
       fp32 lora_up: 56.9 ULP against 52.5 counted as one chain) */
    double ik = (double)c->I * case_kernel_positions(c);
    /* GLoRA's merges chain two reductions the same way: P = W·A1 (length I) feeds ΔW's rank-2r
       product, and GP = Γ·A2ᵀ (length I·K) feeds G_A1 = Wᵀ·GP (length O) — with the CUDA merges on
       lowrank.cu's tensor-core reductions the H200 saw glora_a1 at 29.4 ULP against 28 counted as
       one chain (glora_linear_r64, bf16+fp32adapter merge_bwd, seed 50) */
    bool glora_merge = c->algo == LYCO_ALGO_GLORA && (dir == LYCO_DIR_MERGE_FWD || dir == LYCO_DIR_MERGE_BWD);
    double first = glora_merge && dir == LYCO_DIR_MERGE_FWD ? (double)c->I : ik;
    double chain = (dir == LYCO_DIR_BYPASS_BWD || glora_merge) && K > first ? sqrt(K - first) + sqrt(first) : sqrt(K);
    /* A sequential fp32 sum's error is relative to the element it builds: the partial sums of an
       element z× the RMS run z× larger, so are their roundings (NUMERICS.md §2.5 measured the
       average in units of u·rms, not of ulp(rms)). In ULP of the RMS that is ρ times more, ρ =
       rms_nz / 2^⌊log2 rms⌋ ≥ 1 (the caller's rho): ulp(rms) is up to 2× smaller than 2u·rms
       where the RMS sits high in its binade, and an output whose exact zeros (masked rows,
       frozen blocks) lower its RMS has nonzero elements at rms_nz = rms/sqrt(nonzero fraction).
       The max over n elements is then a max of (element/RMS) × (a Gaussian), whose tail is
       exponential, not Gaussian. locon_linear_r104_t300 merge_fwd fp32+fp16adapter (K = 104,
       n = 104000, DELTA mode, the rank mask zeroing ~30% of the merge's rows: ρ_nz 1.6–1.8) hit
       the ρ-less 8 + 1.5·sqrt(K)·tail (30.35) at seeds 54, 62, 99 of 1–100 and CI seed
       1796239442583333 (30.9 ULP; seed 62: 43.8, its peak element 5.8× the RMS, 11.4 ULP of its
       own); the CPU kernel there is the textbook FMA chain over r (an fp64 simulation of one with
       that case's s, m and mask gave the same maxima: median 28.5, worst 44.2 of 30 draws; with no
       mask the same sum reached 1.15× the ρ-less budget at ρ = 1.89, K = 128, and 0.6× at
       ρ = 1.05). Over seeds 1–100 the coefficient of ρ_nz·sqrt(K)·tail that case needed had
       median 0.58, p90 0.79, max 1.45 (seed 62): 2·ρ_nz (≥ 2, against 1.5 before) keeps that
       tail at ≤ 0.77 of the budget. */
    double acc = out != LYCO_F32 ? 0.5 + (full_reduction ? ldexp(0.5 * K, lyco_dtype_precision(out) - 24) : 0.0)
                 : full_reduction ? 8.0 + 0.5 * K : 8.0 + 2.0 * (rho > 1.0 ? rho : 1.0) * chain * tail;
    /* DoRA's epilogue adds about four fp32 roundings per element (norm, d/n, the interpolation,
       V·c) on elements up to ~4× the RMS: measured up to 21.9 ULP on fp32 outputs */
    if (out == LYCO_F32 && (c->opts & (CASE_DORA_OUT | CASE_DORA_IN))) acc += 16.0;
    /* GLoRA's bypass backward carries the rounded hA through two more products (Y = gᵀ·hA, then
       G_A1 = Wᵀ·Y): its gain reached 6.4 ULP_compute (glora_linear_r65, 3 tokens, fp16+fp32adapter
       bypass_bwd glora_a1, seed 2994519445 at LYCO_CPU_ISA=v3, CI; 0.68 of the 6-ULP budget over
       60 other seeds), so it counts 8 */
    /* DoRA's merge backward stores ∂L/∂V in the compute dtype before the factors' contractions;
       through LoKr's Tucker w2 (t2, w2_a, w2_b) one draw cancelled to a gain of 6.44
       (lokr_conv2d_tucker_dora_in fp16+fp32adapter merge_bwd lokr_w2_b, seed 382: 52777 ULP against
       49196, the H200 and the CPU with the same bits; over seeds 1–300 that row's leaves stayed ≤ 2.6,
       medians 0.5–0.8, the eager twin's median 1.3–2.4 and max 10.2), so it counts 8 too */
    bool dora_mb = dir == LYCO_DIR_MERGE_BWD && (c->opts & (CASE_DORA_OUT | CASE_DORA_IN));
    double gain = (c->algo == LYCO_ALGO_GLORA && dir == LYCO_DIR_BYPASS_BWD) || dora_mb ? 8.0 : 6.0;
    double inter = rounds_intermediate(c, dir) ? gain * per * (full_reduction ? sqrt(K) : 1.0) : 0.0;
    if (!eager) return 1.0 + acc + inter;
    /* the eager twin rounds every intermediate to the compute dtype: up to a few dozen stages of
       0.5 ULP_compute times their gain */
    double stage = full_reduction ? 2.0 * sqrt(K) : compute == LYCO_F32 ? 0.5 * sqrt(K) : 0.5;
    /* DoRA's eager chain rounds about twice the intermediates (V = W + ΔW, its norm, m/‖V‖, the
       scaled V, and each of their gradients) and divides by ‖V‖: CI, seed 1796183795472140,
       locon_conv2d_dora_out_slab merge_bwd bf16+fp32adapter lora_up and
       locon_linear_dora_in_mask_delta_only bypass_bwd fp32+bf16adapter dx at 1.02–1.12 of the
       48-stage budget; over seeds 1–60 the DoRA rows reached 1.24 of it (15 seeds over), the
       others 0.50 */
    double stages = (c->opts & (CASE_DORA_OUT | CASE_DORA_IN)) ? 96.0 : 48.0;
    return 2.0 + acc + stages * stage * per;
}

static uint64_t mix(uint64_t a, uint64_t b) { return (a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2))); }

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

/* FNV-1a over the bit patterns of n values (every backend output is exact in double) */
static uint64_t hash_f64(uint64_t h, const double *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint64_t b;
        memcpy(&b, &y[i], sizeof b);
        for (int k = 0; k < 8; k++) {
            h ^= (b >> (8 * k)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

lyco_status lyco_check_one(const lyco_case *c, lyco_direction dir, const lyco_dtype_row *row,
                           const lyco_check_opts *o, lyco_check_result *res) {
    memset(res, 0, sizeof *res);
    lyco_ctx *ctx = NULL, *ectx = NULL;
    lyco_status st = lyco_ctx_create(&ctx);
    if (st == LYCO_OK) st = lyco_ctx_create(&ectx);
    if (st) { lyco_ctx_destroy(ctx); return st; }
    lyco_ctx_set_backend(ctx, o->backend);
    lyco_ctx_set_output_mode(ctx, o->mode);
    lyco_ctx_set_backend(ectx, LYCO_BACKEND_EAGER);
    lyco_ctx_set_output_mode(ectx, o->mode);

    lyco_rng rng;
    lyco_rng_seed(&rng, mix(mix(o->seed, name_hash(c->name)), (uint64_t)dir * 131 + (uint64_t)(row - lyco_dtype_rows)));
    run_set r;
    double *y = NULL, *ref = NULL;
    st = build(c, dir, row, ctx, &rng, &r);
    if (st) goto done;

    /* exact reference: the oracle in fp64, outputs captured unrounded */
    out_list ol;
    outputs_of(dir, &r, &ol);
    int64_t maxn = 1;
    for (int i = 0; i < ol.n; i++) if (lyco_numel(ol.t[i]) > maxn) maxn = lyco_numel(ol.t[i]);
    double *refs[LYCO_SLOT_COUNT + 4] = {0};
    ref_f64_io io;
    memset(&io, 0, sizeof io);
    for (int i = 0; i < ol.n; i++) {
        refs[i] = calloc((size_t)lyco_numel(ol.t[i]) + 1, sizeof(double));
        if (!refs[i]) { st = LYCO_ERR_NOMEM; goto free_refs; }
        if (ol.ref_out[i] >= 0) io.out[ol.ref_out[i]] = refs[i];
        else io.grad[-1 - ol.ref_out[i]] = refs[i];
    }
    {
        lyco_call call = {.dir = dir, .a = &r.ca.a};
        if (is_bypass(dir)) {
            call.bypass = &r.bargs;
            call.y = dir == LYCO_DIR_BYPASS_FWD ? &r.out.t : NULL;
            call.dy = dir == LYCO_DIR_BYPASS_BWD ? &r.dout.t : NULL;
            call.dx = dir == LYCO_DIR_BYPASS_BWD ? &r.dx.t : NULL;
            call.dy0 = r.has_dy0 ? &r.dy0.t : NULL;
        } else {
            call.merge = &r.margs;
            call.out = dir == LYCO_DIR_MERGE_FWD ? &r.out.t : NULL;
            call.out_bias = r.has_out_bias ? &r.out_bias.t : NULL;
            call.d_out = dir == LYCO_DIR_MERGE_BWD ? &r.dout.t : NULL;
            call.d_out_bias = r.has_dout_bias ? &r.dout_bias.t : NULL;
        }
        call.g = &r.g;
        if ((st = lyco_validate(ctx, &call)) || (st = lyco_ref_run_f64(&call, &io))) {
            snprintf(res->detail, sizeof res->detail, "oracle: %s", lyco_last_error());
            goto free_refs;
        }
    }

    y = malloc(sizeof(double) * (size_t)maxn);
    if (!y) { st = LYCO_ERR_NOMEM; goto free_refs; }
    res->budget = 0;
    for (int pass = 0; pass < 2; pass++) {
        lyco_ctx *cx = pass == 0 ? ctx : ectx;
        lyco_score *worst = pass == 0 ? &res->backend : &res->eager;
        poison(&r);
        clock_t t0 = clock();
#ifdef LYCO_HAVE_CUDA
        double dev_ms = -1;
        if (pass == 0 && o->backend == LYCO_BACKEND_CUDA) st = invoke_cuda(cx, dir, &r, &dev_ms);
        else
#endif
            st = invoke(cx, dir, &r);
        if (pass == 0) res->time_ms = 1000.0 * (double)(clock() - t0) / CLOCKS_PER_SEC;
#ifdef LYCO_HAVE_CUDA
        if (pass == 0 && dev_ms >= 0) res->time_ms = dev_ms;
#endif
        if (st) {
            if (pass == 1) { res->eager_ok = false; st = LYCO_OK; break; }
            snprintf(res->detail, sizeof res->detail, "%s: %s", lyco_status_name(st), lyco_last_error());
            st = LYCO_OK;
            res->pass = false;
            goto free_refs;
        }
        bool eager_path = pass == 1 || o->backend == LYCO_BACKEND_EAGER;
        if (pass == 0) {
            lyco_path p;
            lyco_ctx_last_path(cx, &p);
            snprintf(res->path, sizeof res->path, "%s%s%s", lyco_path_name(p.kind), p.why[0] ? ": " : "", p.why);
            /* a fallback is judged by the budget of the path that ran (and --require-fused fails it) */
            if (p.kind == LYCO_PATH_EAGER) eager_path = true;
        } else {
            res->eager_ok = true;
        }
        if (pass == 0) res->hash = 0xcbf29ce484222325ull;
        for (int i = 0; i < ol.n; i++) {
            int64_t n = lyco_numel(ol.t[i]);
            read_f64(ol.t[i], y);
            if (pass == 0) res->hash = hash_f64(res->hash, y, n);
            lyco_score sc;
            lyco_score_f64(y, refs[i], n, 0, lyco_dtype_of(ol.t[i]), &sc);
            /* ρ of lyco_check_budget: the RMS of the nonzero exact elements over 2^⌊log2 rms⌋ */
            double rho = 1.0;
            if (lyco_dtype_of(ol.t[i]) == LYCO_F32 && sc.rms > 0) {
                int64_t fin = 0, nz = 0;
                for (int64_t k = 0; k < n; k++)
                    if (isfinite(refs[i][k])) { fin++; nz += refs[i][k] != 0.0; }
                rho = sc.rms * sqrt((double)fin / (double)(nz > 0 ? nz : 1)) / (lyco_ulp(sc.rms, LYCO_F32) * 0x1p23);
            }
            double b = lyco_check_budget(c, dir, lyco_dtype_of(ol.t[i]), r.dt.compute, eager_path, ol.ref_out[i] == -1 - LYCO_SCALAR, n, rho);
            /* σs's gradient is one sum over every element: under cancellation its error is bounded by
               K·u·Σ|terms| (Higham §3.1), not by its own magnitude; the oracle reports Σ|terms| */
            if (ol.ref_out[i] == -1 - LYCO_SCALAR && io.scalar_abs > 0) {
                double K = (double)lyco_numel(r.has_W ? &r.W.t : ol.t[i]) + (double)(c->tokens * c->O);
                double u = eager_path ? ldexp(1.0, -lyco_dtype_precision(r.dt.compute)) : 0x1p-24 +
                           (rounds_intermediate(c, dir) ? ldexp(1.0, -lyco_dtype_precision(r.dt.compute)) : 0.0);
                double bound = K * u * io.scalar_abs / lyco_ulp(sc.rms, lyco_dtype_of(ol.t[i]));
                if (bound > b) b = bound;
            }
            /* a rotation's block gradient is a skew projection G_Q0 − G_Q0ᵀ: its error follows the
               terms, not the difference, so a draw that cancels further than the constants were
               calibrated on (factor ≤ 2, the 99th percentile over Diag-OFT's and BOFT's backward
               rows at seeds 1–200; 1.28 for independent terms) widens the budget in proportion.
               CI, seed 3649593759: diag_oft_linear_bs2_mask_mult merge_bwd fp32 oft_blocks at 18.6
               ULP (eager 17.5) against 16.8, with a factor 3.25; seed 2716: 17.0 (eager 33.0) */
            if (ol.ref_out[i] == -1 - LYCO_OFT_BLOCKS && io.skew_cancel > 2.0) b *= io.skew_cancel / 2.0;
            /* fp32 outputs: lyco_check_budget's constant 8 counts ~2 ULP of elements up to ~4× the
               RMS (their own fp32 roundings); an output whose largest element reaches further keeps
               those roundings at its own scale. LoKr's merge forward rounds twice more per element
               (W2 and ρ·W1 to fp32 before their product), so 3. CI, seed 1796181286386423:
               lokr_linear_fused_w12_mask_scalar fp16+fp32adapter merge_fwd at 17.0 ULP against
               12.5; seed 10: 23.1 ULP at an element 7.3× the RMS (the Kronecker product of two
               low-rank halves has long tails), 2.9 ULP of that element */
            if (lyco_dtype_of(ol.t[i]) == LYCO_F32 && ol.ref_out[i] != -1 - LYCO_SCALAR && sc.rms > 0) {
                double elem = c->algo == LYCO_ALGO_LOKR && dir == LYCO_DIR_MERGE_FWD ? 3.0 : 2.0;
                double own = elem * lyco_ulp(sc.peak, LYCO_F32) / lyco_ulp(sc.rms, LYCO_F32);
                if (own > 8.0) b += own - 8.0;
            }
            /* the eager chain forms W'' = rnd(W + ΔW) and then W'' − W (ALGORITHMS.md §1.3): its
               delta carries the rounding of W, i.e. rms(W)/rms(ΔW) times more ULP of the delta */
            if (eager_path && dir == LYCO_DIR_MERGE_FWD && r.has_W && ol.ref_out[i] == REF_OUT_MAIN && sc.rms > 0) {
                double *w = malloc(sizeof(double) * (size_t)(lyco_numel(&r.W.t) + 1));
                if (w) {
                    read_f64(&r.W.t, w);
                    lyco_score ws;
                    lyco_score_f64(w, w, lyco_numel(&r.W.t), 0, lyco_dtype_of(ol.t[i]), &ws);
                    double ratio = lyco_ulp(ws.rms, lyco_dtype_of(ol.t[i])) / lyco_ulp(sc.rms, lyco_dtype_of(ol.t[i]));
                    if (ratio > 1) b *= ratio;
                    free(w);
                }
            }
            bool ok = lyco_score_pass(&sc, b);
            if (pass == 0) {
                if (b > res->budget) res->budget = b;
                if (!ok && !res->detail[0])
                    snprintf(res->detail, sizeof res->detail, "%s: excess %.3g ULP > budget %.3g, %lld non-finite mismatches",
                             ol.name[i], sc.max_excess, b, (long long)sc.bad_class);
            }
            if (sc.max_ulp > worst->max_ulp || i == 0) {
                double ex = worst->max_excess;
                int64_t bad = worst->bad_class;
                *worst = sc;
                if (ex > worst->max_excess) worst->max_excess = ex;
                worst->bad_class += bad;
            } else {
                if (sc.max_excess > worst->max_excess) worst->max_excess = sc.max_excess;
                worst->bad_class += sc.bad_class;
            }
        }
    }
    res->pass = !res->detail[0];
    if (res->pass && o->require_fused && strncmp(res->path, "fused", 5) != 0 && o->backend != LYCO_BACKEND_REF &&
        o->backend != LYCO_BACKEND_EAGER) {
        res->pass = false;
        snprintf(res->detail, sizeof res->detail, "expected the fused path, got %s", res->path);
    }
free_refs:
    for (int i = 0; i < LYCO_SLOT_COUNT + 4; i++) free(refs[i]);
done:
    free(y);
    free(ref);
    run_set_free(&r);
    lyco_ctx_destroy(ctx);
    lyco_ctx_destroy(ectx);
    return st;
}

static bool matches(const char *filter, const char *name) {
    if (!filter || !*filter) return true;
    /* comma-separated list of exact names or prefixes ending in '*' */
    const char *p = filter;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n && p[n - 1] == '*' ? !strncmp(p, name, n - 1) : (strlen(name) == n && !strncmp(p, name, n))) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

int lyco_check_run(const lyco_check_opts *o, FILE *out, int *ran) {
    int fails = 0, count = 0;
    fprintf(out, "%-36s %-10s %-17s %9s %9s %9s %7s %9s  %-6s %s\n", "case", "dir", "dtypes", "ulp_max", "ulp_mean", "eager_max", "budget", "ms", "result", "path");
    for (int i = 0; i < lyco_case_count(); i++) {
        const lyco_case *c = lyco_case_get(i);
        if (c->tier > o->tier || !matches(o->algo, lyco_algo_name(c->algo))) continue;
        for (int d = 0; d < LYCO_DIR_COUNT; d++) {
            if (!matches(o->dir, lyco_direction_name((lyco_direction)d))) continue;
            for (int k = 0; k < lyco_dtype_row_count; k++) {
                const lyco_dtype_row *row = &lyco_dtype_rows[k];
                if (!matches(o->dtypes, row->name)) continue;
                lyco_check_result res;
                lyco_status st = lyco_check_one(c, (lyco_direction)d, row, o, &res);
                count++;
                if (st) {
                    fails++;
                    fprintf(out, "%-36s %-10s %-17s %s: %s %s\n", c->name, lyco_direction_name((lyco_direction)d), row->name,
                            lyco_status_name(st), lyco_last_error(), res.detail);
                    continue;
                }
                if (!res.pass) fails++;
                char eag[16];
                if (res.eager_ok) snprintf(eag, sizeof eag, "%9.3f", res.eager.max_ulp);
                else snprintf(eag, sizeof eag, "%9s", "-");
                char hs[24] = "";
                if (o->hash) snprintf(hs, sizeof hs, "  h=%016llx", (unsigned long long)res.hash);
                fprintf(out, "%-36s %-10s %-17s %9.3f %9.4f %s %7.2f %9.3f  %-6s %s%s%s%s\n", c->name, lyco_direction_name((lyco_direction)d),
                        row->name, res.backend.max_ulp, res.backend.mean_ulp, eag, res.budget, res.time_ms, res.pass ? "PASS" : "FAIL", res.path,
                        res.pass ? "" : "  ", res.pass ? "" : res.detail, hs);
            }
        }
    }
    if (ran) *ran = count;
    return fails;
}

/* ---- gradient check of the oracle (NUMERICS.md §2.7: central differences in fp64) ---- */

typedef struct {
    lyco_call fwd, bwd;
    ref_f64_io fio, bio;
    double *G, *Gb;          /* weights of the scalar L = Σ G·out (+ Σ Gb·out_bias) */
    double *out, *outb;
    int64_t nout, noutb;
} grad_ctx;

static double loss(grad_ctx *gc) {
    if (lyco_ref_run_f64(&gc->fwd, &gc->fio)) return NAN;
    double L = 0;
    for (int64_t i = 0; i < gc->nout; i++) L += gc->G[i] * gc->out[i];
    for (int64_t i = 0; i < gc->noutb; i++) L += gc->Gb[i] * gc->outb[i];
    return L;
}

/* One numeric-vs-analytic comparison on parameter array p (element i); analytic value a. */
static bool probe(grad_ctx *gc, double *p, int64_t i, double a, const char *what, char *detail, size_t dn) {
    double v = p[i], h = 1e-6 * (fabs(v) > 1 ? fabs(v) : 1.0);
    p[i] = v + h;
    double lp = loss(gc);
    p[i] = v - h;
    double lm = loss(gc);
    p[i] = v;
    double num = (lp - lm) / (2 * h);
    if (fabs(num - a) <= 1e-5 + 1e-3 * fabs(num)) return true;
    snprintf(detail, dn, "%s[%lld]: analytic %.9g, numeric %.9g", what, (long long)i, a, num);
    return false;
}

/* DyLoRA block t* (ranks lo … lo+bs−1): lora_up columns, lora_down rows. */
static bool dylora_in_block(const lyco_call *c, lyco_slot s, int64_t i) {
    int64_t r = c->dims.r, bs = c->dims.dyl_bs, lo = (c->dims.dyl_blocks - 1) * bs;
    int64_t rank = s == LYCO_LORA_UP ? i % r : i / (lyco_numel(c->a->tensor[s]) / r);
    return rank >= lo && rank < lo + bs;
}
static int64_t dylora_block_index(const lyco_call *c, lyco_slot s, uint64_t rnd) {
    int64_t r = c->dims.r, bs = c->dims.dyl_bs, lo = (c->dims.dyl_blocks - 1) * bs;
    int64_t other = lyco_numel(c->a->tensor[s]) / r, rank = lo + (int64_t)(rnd % (uint64_t)bs);
    int64_t j = (int64_t)((rnd / (uint64_t)bs) % (uint64_t)other);
    return s == LYCO_LORA_UP ? j * r + rank : rank * other + j;
}

int lyco_check_grad(const lyco_case *c, bool bypass, uint64_t seed, char *detail, size_t dn, int *probes) {
    const lyco_dtype_row *row = &lyco_dtype_rows[2]; /* fp32 tensors carry the shapes */
    lyco_direction fd = bypass ? LYCO_DIR_BYPASS_FWD : LYCO_DIR_MERGE_FWD, bd = bypass ? LYCO_DIR_BYPASS_BWD : LYCO_DIR_MERGE_BWD;
    lyco_ctx *ctx = NULL;
    if (lyco_ctx_create(&ctx)) return -1;
    lyco_rng rng;
    lyco_rng_seed(&rng, mix(seed, name_hash(c->name) + bypass));
    run_set rf, rb;
    int fails = 0;
    *probes = 0;
    detail[0] = 0;
    grad_ctx gc;
    memset(&gc, 0, sizeof gc);
    double *vals[LYCO_SLOT_COUNT] = {0}, *grads[LYCO_SLOT_COUNT] = {0}, *inx = NULL, *iny0 = NULL, *inW = NULL, *inb = NULL;
    double *dx = NULL, *dy0 = NULL;
    memset(&rf, 0, sizeof rf);
    memset(&rb, 0, sizeof rb);
    if (build(c, fd, row, ctx, &rng, &rf) || build(c, bd, row, ctx, &rng, &rb)) { fails = -1; goto done; }
    rf.margs.mode = LYCO_MERGE_DELTA; /* the derivative of the delta is what the backward gives */
    /* fp64 values, unrounded, shared by both calls */
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        if (!rf.ca.has[s]) continue;
        int64_t n = lyco_numel(&rf.ca.slot[s].t);
        vals[s] = malloc(sizeof(double) * (size_t)(n + 1));
        grads[s] = calloc((size_t)n + 1, sizeof(double));
        if (!vals[s] || !grads[s]) { fails = -1; goto done; }
        lyco_gather_f64(&rf.ca.slot[s].t, LYCO_F32, vals[s]);
        if (!is_mask(s))
            for (int64_t i = 0; i < n; i++) vals[s][i] += 1e-3 * (lyco_rng_uniform(&rng) - 0.5) * (vals[s][i] != 0);
        gc.fio.slot[s] = gc.bio.slot[s] = vals[s];
        if (!is_mask(s)) gc.bio.grad[s] = grads[s];
    }
    const DLTensor *Wt = bypass ? rf.bargs.weight : rf.margs.weight;
    if (Wt) {
        inW = malloc(sizeof(double) * (size_t)(lyco_numel(Wt) + 1));
        if (!inW) { fails = -1; goto done; }
        lyco_gather_f64(Wt, LYCO_F32, inW);
        gc.fio.in[REF_IN_W] = gc.bio.in[REF_IN_W] = inW;
    }
    if (!bypass && rf.has_bias) {
        inb = malloc(sizeof(double) * (size_t)(c->O + 1));
        if (!inb) { fails = -1; goto done; }
        lyco_gather_f64(&rf.bias.t, LYCO_F32, inb);
        gc.fio.in[REF_IN_BIAS] = gc.bio.in[REF_IN_BIAS] = inb;
    }
    if (bypass) {
        int64_t nx = lyco_numel(&rf.x.t);
        inx = malloc(sizeof(double) * (size_t)(nx + 1));
        dx = calloc((size_t)nx + 1, sizeof(double));
        if (!inx || !dx) { fails = -1; goto done; }
        lyco_gather_f64(&rf.x.t, LYCO_F32, inx);
        gc.fio.in[REF_IN_X] = gc.bio.in[REF_IN_X] = inx;
        gc.bio.out[REF_OUT_DX] = dx;
        if (rf.has_y0) {
            int64_t ny = lyco_numel(&rf.y0.t);
            iny0 = malloc(sizeof(double) * (size_t)(ny + 1));
            dy0 = calloc((size_t)ny + 1, sizeof(double));
            if (!iny0 || !dy0) { fails = -1; goto done; }
            lyco_gather_f64(&rf.y0.t, LYCO_F32, iny0);
            gc.fio.in[REF_IN_Y0] = gc.bio.in[REF_IN_Y0] = iny0;
            gc.bio.out[REF_OUT_DY0] = dy0;
        }
    }
    gc.nout = lyco_numel(&rf.out.t);
    gc.out = malloc(sizeof(double) * (size_t)(gc.nout + 1));
    gc.G = malloc(sizeof(double) * (size_t)(gc.nout + 1));
    if (!gc.out || !gc.G) { fails = -1; goto done; }
    lyco_gather_f64(&rb.dout.t, LYCO_F32, gc.G);
    gc.fio.out[REF_OUT_MAIN] = gc.out;
    gc.bio.in[bypass ? REF_IN_DY : REF_IN_DOUT] = gc.G;
    if (rf.has_out_bias) {
        gc.noutb = c->O;
        gc.outb = malloc(sizeof(double) * (size_t)(c->O + 1));
        gc.Gb = malloc(sizeof(double) * (size_t)(c->O + 1));
        if (!gc.outb || !gc.Gb) { fails = -1; goto done; }
        lyco_gather_f64(&rb.dout_bias.t, LYCO_F32, gc.Gb);
        gc.fio.out[REF_OUT_BIAS] = gc.outb;
        gc.bio.in[REF_IN_DOUT_BIAS] = gc.Gb;
    }
    gc.fwd = (lyco_call){.dir = fd, .a = &rf.ca.a};
    gc.bwd = (lyco_call){.dir = bd, .a = &rf.ca.a, .g = &rb.g};
    if (bypass) {
        gc.fwd.bypass = gc.bwd.bypass = &rf.bargs;
        gc.fwd.y = &rf.out.t;
        gc.bwd.dy = &rb.dout.t;
        gc.bwd.dx = &rb.dx.t;
        gc.bwd.dy0 = rb.has_dy0 ? &rb.dy0.t : NULL;
    } else {
        gc.fwd.merge = gc.bwd.merge = &rf.margs;
        gc.fwd.out = &rf.out.t;
        gc.fwd.out_bias = rf.has_out_bias ? &rf.out_bias.t : NULL;
        gc.bwd.d_out = &rb.dout.t;
        gc.bwd.d_out_bias = rb.has_dout_bias ? &rb.dout_bias.t : NULL;
    }
    /* the bwd call borrows the forward run's adapter (same shapes); its grads come from rb */
    if (lyco_validate(ctx, &gc.fwd) || lyco_validate(ctx, &gc.bwd) || lyco_ref_run_f64(&gc.bwd, &gc.bio)) {
        snprintf(detail, dn, "oracle failed: %s", lyco_last_error());
        fails = -1;
        goto done;
    }
    for (int s = 0; s < LYCO_SLOT_COUNT && fails < 3; s++) {
        if (!grads[s] || is_mask(s)) continue;
        int64_t n = lyco_numel(&rf.ca.slot[s].t);
        bool dyl = c->algo == LYCO_ALGO_DYLORA;
        if (dyl) { /* DyLoRA: only block t* trains; every other element's gradient must be exactly 0 */
            for (int64_t i = 0; i < n; i++)
                if (!dylora_in_block(&gc.fwd, (lyco_slot)s, i) && grads[s][i] != 0.0 && fails < 3) {
                    snprintf(detail, dn, "%s[%lld]: analytic %.9g outside the trained block t*; expected 0",
                             lyco_slot_name((lyco_slot)s), (long long)i, grads[s][i]);
                    fails++;
                }
        }
        for (int k = 0; k < 6 && k < n; k++) {
            int64_t i = k == 0 ? 0 : (int64_t)(lyco_rng_next(&rng) % (uint64_t)n);
            if (dyl) i = dylora_block_index(&gc.fwd, (lyco_slot)s, lyco_rng_next(&rng));
            (*probes)++;
            if (!probe(&gc, vals[s], i, grads[s][i], lyco_slot_name((lyco_slot)s), detail, dn)) fails++;
        }
    }
    if (bypass) {
        int64_t nx = lyco_numel(&rf.x.t);
        for (int k = 0; k < 6 && k < nx; k++) {
            int64_t i = (int64_t)(lyco_rng_next(&rng) % (uint64_t)nx);
            (*probes)++;
            if (!probe(&gc, inx, i, dx[i], "x", detail, dn)) fails++;
        }
        if (iny0) {
            int64_t ny = lyco_numel(&rf.y0.t);
            for (int k = 0; k < 6 && k < ny; k++) {
                int64_t i = (int64_t)(lyco_rng_next(&rng) % (uint64_t)ny);
                (*probes)++;
                if (!probe(&gc, iny0, i, dy0[i], "y0", detail, dn)) fails++;
            }
        }
    }
done:
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) { free(vals[s]); free(grads[s]); }
    free(inx); free(iny0); free(inW); free(inb); free(dx); free(dy0);
    free(gc.out); free(gc.G); free(gc.outb); free(gc.Gb);
    run_set_free(&rf);
    run_set_free(&rb);
    lyco_ctx_destroy(ctx);
    return fails;
}

/* ---- prepared runs (the bench) ---- */
struct lyco_prepared {
    lyco_direction dir;
    run_set r;
    bool built;
#ifdef LYCO_HAVE_CUDA
    dev_run *dr;
#endif
};

lyco_status lyco_prepare(const lyco_case *c, lyco_direction dir, const lyco_dtype_row *row, lyco_output_mode mode,
                         uint64_t seed, lyco_prepared **out) {
    *out = NULL;
    lyco_prepared *p = calloc(1, sizeof *p);
    lyco_ctx *ctx = NULL;
    if (!p) return lyco_fail(LYCO_ERR_NOMEM, "prepare: out of memory");
    lyco_status st = lyco_ctx_create(&ctx);
    if (!st) st = lyco_ctx_set_output_mode(ctx, mode);
    lyco_rng rng;
    lyco_rng_seed(&rng, mix(mix(seed, name_hash(c->name)), (uint64_t)dir * 131 + (uint64_t)(row - lyco_dtype_rows)));
    p->dir = dir;
    if (!st) st = build(c, dir, row, ctx, &rng, &p->r);
    p->built = true;
    lyco_ctx_destroy(ctx);
    if (st) {
        lyco_prepared_free(p);
        return st;
    }
    *out = p;
    return LYCO_OK;
}

static size_t tbytes(const case_tensor *t) { return t->alloc ? (size_t)lyco_numel(&t->t) * lyco_dtype_size(lyco_dtype_of(&t->t)) : 0; }

/* Does the direction read W / y0? (built for every merge, and for every bypass with a y0, but
   only some algorithms read them in the backward directions) */
static bool reads_W(const run_set *r, lyco_direction dir) {
    if (dir == LYCO_DIR_MERGE_FWD) return r->margs.mode != LYCO_MERGE_DELTA || r->ca.a.tensor[LYCO_DORA_SCALE];
    lyco_algo a = r->ca.a.algo;
    return r->ca.a.tensor[LYCO_DORA_SCALE] || a == LYCO_ALGO_GLORA || a == LYCO_ALGO_IA3 || a == LYCO_ALGO_DIAG_OFT ||
           a == LYCO_ALGO_BOFT || dir == LYCO_DIR_BYPASS_FWD;
}
static bool reads_y0(const run_set *r, lyco_direction dir) {
    lyco_algo a = r->ca.a.algo;
    return dir == LYCO_DIR_BYPASS_FWD || a == LYCO_ALGO_DIAG_OFT || a == LYCO_ALGO_BOFT || (a == LYCO_ALGO_IA3 && !r->ca.a.ia3_on_input);
}

void lyco_prepared_set_merge_mode(lyco_prepared *p, lyco_merge_mode mode) {
    p->r.margs.mode = mode;
#ifdef LYCO_HAVE_CUDA
    if (p->dr) p->dr->d.margs.mode = mode;
#endif
}

size_t lyco_prepared_min_bytes(const lyco_prepared *p) {
    const run_set *r = &p->r;
    size_t b = 0;
    if (r->has_W && !reads_W(r, p->dir)) b -= tbytes(&r->W);
    if (r->has_y0 && !reads_y0(r, p->dir)) b -= tbytes(&r->y0);
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        if (r->ca.has[s] && s != LYCO_MODULE_MASK) b += tbytes(&r->ca.slot[s]);
        if (r->has_grad[s]) b += tbytes(&r->grad[s]);
    }
    const case_tensor *io[] = {&r->W, &r->bias, &r->x, &r->y0, &r->dout, &r->dout_bias, &r->out, &r->out_bias, &r->dx, &r->dy0};
    for (size_t i = 0; i < sizeof io / sizeof io[0]; i++) b += tbytes(io[i]);
    return b;
}

lyco_dtypes lyco_prepared_dtypes(const lyco_prepared *p) { return p->r.dt; }

lyco_status lyco_prepared_invoke(lyco_ctx *ctx, lyco_prepared *p) {
#ifdef LYCO_HAVE_CUDA
    if (p->dr) return invoke(ctx, p->dir, &p->dr->d);
#endif
    return invoke(ctx, p->dir, &p->r);
}

lyco_status lyco_prepared_output_hash(lyco_prepared *p, uint64_t *h) {
#ifdef LYCO_HAVE_CUDA
    if (p->dr) {
        lyco_status st = lyco_stage_sync();
        if (!st) st = dev_collect(p->dr);
        if (st) return st;
    }
#endif
    out_list ol;
    outputs_of(p->dir, &p->r, &ol);
    *h = 1469598103934665603ull;
    for (int i = 0; i < ol.n; i++) {
        const DLTensor *t = ol.t[i];
        size_t es = lyco_dtype_size(lyco_dtype_of(t));
        int64_t n = lyco_numel(t);
        for (int64_t k = 0; k < n; k++) {
            const unsigned char *e = t->strides ? lyco_elem_at(t, k) : (const unsigned char *)t->data + t->byte_offset + (size_t)k * es;
            for (size_t b = 0; b < es; b++) *h = (*h ^ e[b]) * 1099511628211ull;
        }
    }
    return LYCO_OK;
}

#ifdef LYCO_HAVE_CUDA
lyco_status lyco_prepared_to_device(lyco_prepared *p) {
    if (p->dr) return LYCO_OK;
    p->dr = malloc(sizeof *p->dr);
    if (!p->dr) return lyco_fail(LYCO_ERR_NOMEM, "prepare: out of memory");
    lyco_status st = dev_stage(&p->r, p->dr);
    if (st) {
        free(p->dr);
        p->dr = NULL;
    }
    return st;
}
#endif

void lyco_prepared_free(lyco_prepared *p) {
    if (!p) return;
#ifdef LYCO_HAVE_CUDA
    if (p->dr) {
        dev_free(p->dr);
        free(p->dr);
    }
#endif
    if (p->built) run_set_free(&p->r);
    free(p);
}
