/*
 * check.h — the case table shared by `lyco check`, `lyco bench` and the tests (one table, never
 * copied), the dtype rows of NUMERICS.md §1, the builders that turn a case into random tensors,
 * and the runner that scores a backend and the eager twin against the fp64 oracle.
 *
 * Each algorithm contributes its rows and its builder in src/check/cases_<algo>.c.
 */
#ifndef LYCO_CHECK_H
#define LYCO_CHECK_H

#include <stdio.h>

#include "core/core.h"

/* ---- options a case can switch on ---- */
#define CASE_TUCKER      (1u << 0)
#define CASE_DORA_OUT    (1u << 1)   /* DoRA, norm per output row */
#define CASE_DORA_IN     (1u << 2)   /* DoRA, norm per input channel */
#define CASE_SCALAR      (1u << 3)   /* trainable σs */
#define CASE_RANK_MASK   (1u << 4)   /* rank-dropout mask(s) */
#define CASE_MODULE_DROP (1u << 5)   /* module mask = 0 */
#define CASE_RESCALE     (1u << 6)   /* OFT/BOFT rescale */
#define CASE_ON_INPUT    (1u << 7)   /* IA3 on inputs */
#define CASE_NONCONTIG   (1u << 8)   /* operands as strided (transposed-storage) views */
#define CASE_UNALIGNED   (1u << 9)   /* data pointers offset by one element */
#define CASE_W1_LOWRANK  (1u << 10)  /* LoKr: W1 = w1_a·w1_b */
#define CASE_W2_LOWRANK  (1u << 11)  /* LoKr: W2 = w2_a·w2_b (or Tucker with CASE_TUCKER) */
#define CASE_BIAS        (1u << 12)  /* Full diff_b / Norm b_norm */
#define CASE_COMPAT      (1u << 13)  /* LYCO_FLAG_UPSTREAM_MERGE_SCALE */
#define CASE_GROUPNORM   (1u << 14)  /* Norm on a GroupNorm layer */
#define CASE_NO_Y0       (1u << 15)  /* bypass writes Δ alone */

typedef struct {
    const char *name;
    lyco_algo algo;
    lyco_layer_kind kind;
    int conv_dims;
    int64_t O, I;
    int64_t k[3], stride[3], pad[3], dil[3];
    int64_t rank;        /* r; LoKr: decomposition rank; OFT/BOFT: block size */
    int64_t tokens;      /* linear/norm: tokens; conv: batch N */
    int64_t spatial[3];  /* conv input spatial sizes */
    uint32_t opts;
    double alpha;        /* 0 = absent */
    double multiplier;   /* 0 = default 1 */
    double constraint;
    int64_t extra[4];    /* LoKr: a, c (W1 a×c); BOFT: stages; DyLoRA: block size, active blocks;
                            Norm GroupNorm: groups */
    int tier;            /* 0 = quick (CI), 1 = full */
} lyco_case;

/* ---- the dtype rows of NUMERICS.md §1 ---- */
typedef struct {
    const char *name;     /* "bf16", "bf16+fp32adapter", … */
    lyco_dtype base;      /* x / W (and y0 / dy where given) */
    lyco_dtype adapter;
} lyco_dtype_row;
extern const lyco_dtype_row lyco_dtype_rows[];
extern const int lyco_dtype_row_count;

/* ---- the table ---- */
typedef struct {
    const lyco_case *cases;
    int count;
} lyco_case_list;
/* All cases, all algorithms (concatenated per algorithm). */
int lyco_case_count(void);
const lyco_case *lyco_case_get(int i);

/* ---- owned host tensors built for a case ---- */
typedef struct {
    DLTensor t;
    int64_t shape[8];
    int64_t strides[8];
    void *alloc;        /* what to free */
} case_tensor;

typedef struct {
    case_tensor slot[LYCO_SLOT_COUNT];
    bool has[LYCO_SLOT_COUNT];
    lyco_adapter a;
    bool bypass;        /* set before building: masks differ between merge and bypass */
} case_adapter;

/* Allocates a host tensor of dtype d and shape (ndim, shape) filled by fill(); honours
   CASE_NONCONTIG (reversed-stride storage for ndim ≥ 2) and CASE_UNALIGNED. */
typedef double (*case_fill_fn)(lyco_rng *r, void *arg);
bool case_tensor_make(case_tensor *ct, lyco_dtype d, int ndim, const int64_t *shape, uint32_t opts,
                      lyco_rng *rng, double scale);
void case_tensor_free(case_tensor *ct);
/* Overwrite every element with a value (e.g. NaN poison). */
void case_tensor_fill(case_tensor *ct, double v);

/* Per-algorithm builder: fills the adapter (slots, hyper-parameters, layer) of case c with random
   tensors in dtype d. Returns false on allocation failure. */
typedef bool (*case_builder)(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca);
bool case_build_adapter(const lyco_case *c, lyco_dtype d, bool bypass, lyco_rng *rng, case_adapter *ca);
void case_adapter_free(case_adapter *ca);
/* Sets the layer from the case's geometry (shared by the builders). */
void case_layer(const lyco_case *c, lyco_layer *l);
/* Adds a random slot tensor; returns false on allocation failure. */
bool case_slot(case_adapter *ca, lyco_slot s, lyco_dtype d, int ndim, const int64_t *shape,
               uint32_t opts, lyco_rng *rng, double scale);
/* Adds a 0/1 (or scaled) mask slot in fp32. */
bool case_mask(case_adapter *ca, lyco_slot s, int64_t n, lyco_rng *rng);

/* Builders, one per algorithm (src/check/cases_<algo>.c), and their rows. */
#define LYCO_DECLARE_CASES(algo) \
    extern const lyco_case lyco_cases_##algo[]; \
    extern const int lyco_cases_##algo##_count; \
    bool case_build_##algo(const lyco_case *c, lyco_dtype d, lyco_rng *rng, case_adapter *ca);
LYCO_DECLARE_CASES(locon)
LYCO_DECLARE_CASES(loha)
LYCO_DECLARE_CASES(lokr)
LYCO_DECLARE_CASES(diag_oft)
LYCO_DECLARE_CASES(boft)
LYCO_DECLARE_CASES(ia3)
LYCO_DECLARE_CASES(glora)
LYCO_DECLARE_CASES(dylora)
LYCO_DECLARE_CASES(full)
LYCO_DECLARE_CASES(norm)
/* Kernel positions K (product of the case's kernel dims, 1 for linear) and spatial positions
   (product of its input spatial dims, 1 for linear) of a case. */
double case_kernel_positions(const lyco_case *c);
double case_spatial_positions(const lyco_case *c);
/* BOFT's number of butterfly stages m of a case (extra[0], or log2(nb) + 1 when that is 0). */
int64_t case_boft_stages(const lyco_case *c);

/* ---- running one (case, direction, dtype row) ---- */
typedef struct {
    lyco_backend backend;       /* the backend under test */
    lyco_output_mode mode;
    int tier;                   /* run cases with tier ≤ this */
    uint64_t seed;
    const char *algo;           /* filter (NULL = all) */
    const char *dir;            /* filter */
    const char *dtypes;         /* filter on the dtype row name */
    bool verbose;
    bool require_fused;         /* fail when the backend took a fallback */
    bool hash;                  /* print the hash of the backend's outputs (lyco_check_result.hash) */
} lyco_check_opts;

typedef struct {
    lyco_score backend, eager;  /* worst over the call's outputs */
    double budget;
    bool pass;
    bool skipped;               /* the direction does not exist for this case */
    bool eager_ok;              /* the eager twin ran */
    char path[200];             /* path report of the backend */
    char detail[300];           /* failure detail */
    double time_ms;             /* backend time of one call */
    uint64_t hash;              /* FNV-1a over the bits of every backend output value, in order */
} lyco_check_result;

/* Runs one case × direction × dtype row. Returns LYCO_OK when it ran (pass or fail in res). */
lyco_status lyco_check_one(const lyco_case *c, lyco_direction dir, const lyco_dtype_row *row,
                           const lyco_check_opts *o, lyco_check_result *res);
/* Runs the whole filtered table, printing one row per case to `out`. Returns failures. */
int lyco_check_run(const lyco_check_opts *o, FILE *out, int *ran);

/* The accuracy budget (NUMERICS.md §2.7, §4.2) of a case, in ULP_T(rms) on top of the element's
   own 0.5-ULP rounding. eager = the budget of the eager twin's rounding chain; n = the output's element count
   (its max reaches further into the tail on larger outputs); rho = the RMS of the output's nonzero
   exact elements over 2^⌊log2 rms⌋ (fp32 outputs; ≤ 1 counts as 1): the fp32 sums' errors scale
   with the elements, the score's unit with ulp(rms). */
double lyco_check_budget(const lyco_case *c, lyco_direction dir, lyco_dtype out, lyco_dtype compute, bool eager,
                         bool full_reduction, int64_t n, double rho);



/* ---- prepared runs: one case × direction × dtype row with its tensors built once (the bench
   times the same call many times; shapes can be far larger than the oracle affords) ---- */
typedef struct lyco_prepared lyco_prepared;
/* Builds the adapter, inputs and outputs of (c, dir, row) with random data from seed; the output
   dtypes follow the policy under mode. */
lyco_status lyco_prepare(const lyco_case *c, lyco_direction dir, const lyco_dtype_row *row, lyco_output_mode mode,
                         uint64_t seed, lyco_prepared **out);
/* Bytes of every input read once and every output written once, each in its own dtype
   (BENCH.md §2's min_bytes). */
size_t lyco_prepared_min_bytes(const lyco_prepared *p);
lyco_dtypes lyco_prepared_dtypes(const lyco_prepared *p);
/* The merge mode of a merge run (built as LYCO_MERGE_DELTA). */
void lyco_prepared_set_merge_mode(lyco_prepared *p, lyco_merge_mode mode);
/* Runs the call once on ctx: on the device mirrors after lyco_prepared_to_device, else on the
   host tensors. Asynchronous on a cuda context. */
lyco_status lyco_prepared_invoke(lyco_ctx *ctx, lyco_prepared *p);
/* FNV-1a hash of every output's bytes (device runs: synchronises and copies them back first). */
lyco_status lyco_prepared_output_hash(lyco_prepared *p, uint64_t *h);
#ifdef LYCO_HAVE_CUDA
/* Mirrors every tensor to the current device (the module mask stays on the host). */
lyco_status lyco_prepared_to_device(lyco_prepared *p);
#endif
void lyco_prepared_free(lyco_prepared *p);

/* Gradient check of the oracle's backward against central differences of its forward, in fp64
   (merge or bypass). Returns the number of failed probes (-1: could not run); detail names the
   first failure; probes counts comparisons made. */
int lyco_check_grad(const lyco_case *c, bool bypass, uint64_t seed, char *detail, size_t dn, int *probes);
#endif
