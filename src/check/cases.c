/*
 * cases.c — the dtype rows of NUMERICS.md §1, the concatenated case table, and the helpers the
 * per-algorithm builders share (random host tensors, strided/unaligned layouts, masks).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

const lyco_dtype_row lyco_dtype_rows[] = {
    {"bf16", LYCO_BF16, LYCO_BF16},
    {"fp16", LYCO_F16, LYCO_F16},
    {"fp32", LYCO_F32, LYCO_F32},
    {"bf16+fp32adapter", LYCO_BF16, LYCO_F32},
    {"fp16+fp32adapter", LYCO_F16, LYCO_F32},
    {"fp32+bf16adapter", LYCO_F32, LYCO_BF16},
    {"fp32+fp16adapter", LYCO_F32, LYCO_F16},
};
const int lyco_dtype_row_count = (int)(sizeof lyco_dtype_rows / sizeof lyco_dtype_rows[0]);

typedef struct {
    const lyco_case *rows;
    const int *count;
} table_part;

static const table_part parts[] = {
    {lyco_cases_locon, &lyco_cases_locon_count},       {lyco_cases_loha, &lyco_cases_loha_count},
    {lyco_cases_lokr, &lyco_cases_lokr_count},         {lyco_cases_diag_oft, &lyco_cases_diag_oft_count},
    {lyco_cases_boft, &lyco_cases_boft_count},         {lyco_cases_ia3, &lyco_cases_ia3_count},
    {lyco_cases_glora, &lyco_cases_glora_count},       {lyco_cases_dylora, &lyco_cases_dylora_count},
    {lyco_cases_full, &lyco_cases_full_count},         {lyco_cases_norm, &lyco_cases_norm_count},
};
#define NPARTS ((int)(sizeof parts / sizeof parts[0]))

int lyco_case_count(void) {
    int n = 0;
    for (int p = 0; p < NPARTS; p++) n += *parts[p].count;
    return n;
}

const lyco_case *lyco_case_get(int i) {
    for (int p = 0; p < NPARTS; p++) {
        if (i < *parts[p].count) return &parts[p].rows[i];
        i -= *parts[p].count;
    }
    return NULL;
}

bool case_build_adapter(const lyco_case *c, lyco_dtype d, bool bypass, lyco_rng *rng, case_adapter *ca) {
    static const case_builder builders[LYCO_ALGO_COUNT] = {
        NULL, case_build_locon, case_build_loha, case_build_lokr, case_build_diag_oft, case_build_boft,
        case_build_ia3, case_build_glora, case_build_dylora, case_build_full, case_build_norm,
    };
    memset(ca, 0, sizeof *ca);
    ca->bypass = bypass;
    lyco_adapter_init(&ca->a, c->algo);
    case_layer(c, &ca->a.layer);
    ca->a.alpha = c->alpha > 0 ? c->alpha : NAN;
    ca->a.multiplier = c->multiplier != 0 ? c->multiplier : 1.0;
    ca->a.constraint = c->constraint;
    if (c->opts & CASE_COMPAT) ca->a.flags |= LYCO_FLAG_UPSTREAM_MERGE_SCALE;
    if ((int)c->algo <= 0 || c->algo >= LYCO_ALGO_COUNT || !builders[c->algo]) return false;
    if (!builders[c->algo](c, d, rng, ca)) return false;
    if (c->opts & CASE_MODULE_DROP) {
        int64_t one = 1;
        if (!case_slot(ca, LYCO_MODULE_MASK, LYCO_F32, 1, &one, 0, rng, 1.0)) return false;
        case_tensor_fill(&ca->slot[LYCO_MODULE_MASK], 0.0);
    }
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) ca->a.tensor[s] = ca->has[s] ? &ca->slot[s].t : NULL;
    return true;
}

void case_adapter_free(case_adapter *ca) {
    for (int s = 0; s < LYCO_SLOT_COUNT; s++)
        if (ca->has[s]) case_tensor_free(&ca->slot[s]);
    memset(ca, 0, sizeof *ca);
}

void case_layer(const lyco_case *c, lyco_layer *l) {
    if (c->kind == LYCO_LAYER_CONV) {
        int64_t k[3], s[3], p[3], d[3];
        for (int i = 0; i < 3; i++) {
            k[i] = c->k[i] ? c->k[i] : 1;
            s[i] = c->stride[i] ? c->stride[i] : 1;
            p[i] = c->pad[i];
            d[i] = c->dil[i] ? c->dil[i] : 1;
        }
        lyco_layer_conv(l, c->conv_dims, c->O, c->I, k, s, p, d, 1);
    } else if (c->kind == LYCO_LAYER_NORM) {
        bool group = c->opts & CASE_GROUPNORM;
        lyco_layer_norm(l, group ? LYCO_NORM_GROUP : LYCO_NORM_LAYER, c->O, group ? c->extra[0] : 1, 1e-5);
    } else {
        lyco_layer_linear(l, c->O, c->I);
    }
}

bool case_tensor_make(case_tensor *ct, lyco_dtype d, int ndim, const int64_t *shape, uint32_t opts,
                      lyco_rng *rng, double scale) {
    memset(ct, 0, sizeof *ct);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        ct->shape[i] = shape[i];
        n *= shape[i];
    }
    size_t es = lyco_dtype_size(d);
    bool unaligned = opts & CASE_UNALIGNED;
    ct->alloc = malloc((size_t)(n + 2) * es);
    if (!ct->alloc) return false;
    ct->t.data = (char *)ct->alloc + (unaligned ? 1 : 0) * (es == 2 ? 1 : 2); /* odd byte offset */
    ct->t.device.device_type = kDLCPU;
    ct->t.ndim = ndim;
    ct->t.dtype = lyco_dl_dtype(d);
    ct->t.shape = ct->shape;
    ct->t.strides = NULL;
    if ((opts & CASE_NONCONTIG) && ndim >= 2) {
        /* column-major storage: strides reversed */
        int64_t st = 1;
        for (int i = 0; i < ndim; i++) {
            ct->strides[i] = st;
            st *= shape[i];
        }
        ct->t.strides = ct->strides;
    }
    /* element i of the logical order lies at i·es when the tensor is contiguous (the bench's
       large rows): no per-element stride arithmetic there */
    char *base = ct->t.data;
    for (int64_t i = 0; i < n; i++) {
        double v = 0;
        do v = (2.0 * lyco_rng_uniform(rng) - 1.0) * scale;
        while (v == 0.0 && scale != 0.0);
        /* through float: v's rounding to d may differ from a direct one only on rare double-rounding
           ties, and the oracle reads the stored value anyway; lyco_store_f64's exact rounding costs
           ~10x more per element */
        lyco_store_f32(ct->t.strides ? lyco_elem_at(&ct->t, i) : base + (size_t)i * es, d, (float)v);
    }
    return true;
}

void case_tensor_free(case_tensor *ct) {
    free(ct->alloc);
    memset(ct, 0, sizeof *ct);
}

void case_tensor_fill(case_tensor *ct, double v) {
    lyco_dtype d = lyco_dtype_of(&ct->t);
    int64_t n = lyco_numel(&ct->t);
    for (int64_t i = 0; i < n; i++) lyco_store_f64(lyco_elem_at(&ct->t, i), d, v);
}

bool case_slot(case_adapter *ca, lyco_slot s, lyco_dtype d, int ndim, const int64_t *shape,
               uint32_t opts, lyco_rng *rng, double scale) {
    if (!case_tensor_make(&ca->slot[s], d, ndim, shape, opts & (CASE_NONCONTIG | CASE_UNALIGNED), rng, scale)) return false;
    ca->has[s] = true;
    return true;
}

bool case_mask(case_adapter *ca, lyco_slot s, int64_t n, lyco_rng *rng) {
    if (!case_tensor_make(&ca->slot[s], LYCO_F32, 1, &n, 0, rng, 1.0)) return false;
    ca->has[s] = true;
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        float v = lyco_rng_uniform(rng) < 0.7 ? 1.0f : 0.0f;
        if (i == 0) v = 1.0f; /* never all dropped */
        kept += v != 0.0f;
        lyco_store_f32(lyco_elem_at(&ca->slot[s].t, i), LYCO_F32, v);
    }
    (void)kept;
    return true;
}

double case_kernel_positions(const lyco_case *c) {
    return (double)(c->k[0] ? c->k[0] : 1) * (double)(c->k[1] ? c->k[1] : 1) * (double)(c->k[2] ? c->k[2] : 1);
}

double case_spatial_positions(const lyco_case *c) {
    return (double)(c->spatial[0] ? c->spatial[0] : 1) * (double)(c->spatial[1] ? c->spatial[1] : 1) *
           (double)(c->spatial[2] ? c->spatial[2] : 1);
}
