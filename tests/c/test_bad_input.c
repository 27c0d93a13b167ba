/*
 * test_bad_input.c — the error model (DESIGN.md §2) through the public verbs, ref backend: one
 * check per status code and per kind of bad input, each asserting the status AND that
 * lyco_last_error() names the argument and what was expected (a distinctive substring):
 *
 *   LYCO_ERR_NULL     NULL ctx / adapter / args / x / required adapter slots / outputs / W where
 *                     the mode reads it / dy0 without y0; NULL data with elements; NULL shape
 *   LYCO_ERR_SHAPE    wrong ndim, factor vs factor (rank), factors vs layer, x/y/y0/W/out/dy/dx/
 *                     dy0/d_out/grad shapes, negative shapes, ndim out of range, conv geometry,
 *                     mask lengths, shapes whose element count overflows int64 (run in a forked
 *                     child so that a crash is reported as a failed check)
 *   LYCO_ERR_DTYPE    fp16 with bf16, unsupported dtypes (fp64, int32, uint8, lanes ≠ 1, fp8),
 *                     an output whose dtype differs from the policy, a gradient of the wrong dtype
 *   LYCO_ERR_ALIAS    an output partially overlapping an input / an adapter tensor / another
 *                     output, the same buffer where not allowed, a different view of W / y0;
 *                     while in-place merge (out is exactly W) and y == y0 are accepted and correct
 *   LYCO_ERR_DEVICE   one tensor on kDLCUDA, two CUDA ordinals, an unknown device type, CUDA
 *                     tensors with the ref backend (data pointers are host memory and are never
 *                     dereferenced: every such call must fail in validation)
 *   LYCO_ERR_INVALID  unknown algorithm, bad enums (merge mode, output/fp32 mode, backend, layer
 *                     kind), bad flags, slots the algorithm does not use, grads of masks or of
 *                     absent slots, non-finite hyper-parameters
 *   LYCO_ERR_UNSUPPORTED  grouped conv for LoCon
 * plus: NaN/Inf in inputs propagate to the outputs with LYCO_OK and no crash; no input buffer is
 * ever modified (checksums before/after successful and failing calls; a failing call leaves its
 * outputs untouched too); lyco_status_name for every status and out-of-range values.
 *
 * The fixture is a LoCon linear 8→6, rank 2, 3 tokens, fp32 (conv2d and DoRA variants where
 * needed), fresh random data each run.
 * Prints one line per check and ends with "N passed, M failed"; exits non-zero on failure.
 * Random data from LYCO_SEED (printed) or the clock.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core.h"
#include "lyco.h"

static int passed, failed;

static void report(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%-4s ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) passed++;
    else failed++;
}

/* status + up to three substrings of lyco_last_error() */
static void expect(const char *what, lyco_status got, lyco_status want, const char *s1, const char *s2, const char *s3) {
    const char *msg = lyco_last_error();
    bool ok = got == want;
    if (want != LYCO_OK) ok = ok && (!s1 || strstr(msg, s1)) && (!s2 || strstr(msg, s2)) && (!s3 || strstr(msg, s3));
    report(ok, "%-58s %s (expected %s)%s%s%s", what, lyco_status_name(got), lyco_status_name(want), got != LYCO_OK ? " \"" : "",
           got != LYCO_OK ? msg : "", got != LYCO_OK ? "\"" : "");
    if (!ok && want != LYCO_OK)
        printf("     expected the message to contain: %s%s%s%s%s\n", s1 ? s1 : "", s2 ? " | " : "", s2 ? s2 : "", s3 ? " | " : "", s3 ? s3 : "");
}

/* ---------------------------------------------------------------------------------------------
 * Fixture: LoCon, linear 8→6, rank 2, 3 tokens, fp32
 * ------------------------------------------------------------------------------------------- */
#define NT 3
#define NI 8
#define NO 6
#define NR 2

typedef struct {
    float data[128];
    int64_t shape[8];
    int64_t strides[8];
    DLTensor t;
} ft;

typedef struct {
    ft x, y0, y, down, up, W, out, dy, dx, dy0, gdown, gup, dout, dora, gdora, mask;
    lyco_adapter a;
    lyco_bypass_args bin;
    lyco_merge_args min;
    lyco_grads g;
} fixture;

static fixture F;
static float big[512];   /* one buffer for overlapping views */
static lyco_ctx *ctx;
static lyco_rng rng;

/* nonzero random multiples of 1/8 in [-1, 1] */
static float rnd(void) {
    float v = (float)(1 + (int)(lyco_rng_uniform(&rng) * 8.0)) / 8.0f;
    return (lyco_rng_next(&rng) & 1) ? -v : v;
}

static void ft_init(ft *T, int ndim, const int64_t *dims) {
    memset(T, 0, sizeof *T);
    for (int i = 0; i < ndim; i++) T->shape[i] = dims[i];
    T->t = lyco_host_tensor(T->data, LYCO_F32, ndim, T->shape);
    for (int i = 0; i < 128; i++) T->data[i] = rnd();
}
#define D2(a, b) 2, (const int64_t[]){a, b}

static void reset(void) {
    ft_init(&F.x, D2(NT, NI));
    ft_init(&F.y0, D2(NT, NO));
    ft_init(&F.y, D2(NT, NO));
    ft_init(&F.down, D2(NR, NI));
    ft_init(&F.up, D2(NO, NR));
    ft_init(&F.W, D2(NO, NI));
    ft_init(&F.out, D2(NO, NI));
    ft_init(&F.dy, D2(NT, NO));
    ft_init(&F.dx, D2(NT, NI));
    ft_init(&F.dy0, D2(NT, NO));
    ft_init(&F.gdown, D2(NR, NI));
    ft_init(&F.gup, D2(NO, NR));
    ft_init(&F.dout, D2(NO, NI));
    ft_init(&F.dora, D2(NO, 1));
    ft_init(&F.gdora, D2(NO, 1));
    ft_init(&F.mask, 1, (const int64_t[]){NR});
    for (int i = 0; i < NO; i++) F.dora.data[i] = 1.0f + (float)i / 8.0f; /* DoRA magnitudes > 0 */
    lyco_adapter_init(&F.a, LYCO_ALGO_LOCON);
    lyco_layer_linear(&F.a.layer, NO, NI);
    F.a.tensor[LYCO_LORA_DOWN] = &F.down.t;
    F.a.tensor[LYCO_LORA_UP] = &F.up.t;
    F.a.alpha = 1.0;
    F.bin = (lyco_bypass_args){&F.x.t, &F.y0.t, NULL, 0};
    F.min = (lyco_merge_args){&F.W.t, NULL, LYCO_MERGE_WEIGHT};
    memset(&F.g, 0, sizeof F.g);
    F.g.grad[LYCO_LORA_DOWN] = &F.gdown.t;
    F.g.grad[LYCO_LORA_UP] = &F.gup.t;
    lyco_ctx_set_backend(ctx, LYCO_BACKEND_REF);
    lyco_ctx_set_output_mode(ctx, LYCO_OUTPUT_PROMOTE);
}

static lyco_status bfwd(void) { return lyco_bypass_fwd(ctx, &F.y.t, &F.a, &F.bin); }
static lyco_status bbwd(void) { return lyco_bypass_bwd(ctx, &F.g, &F.dx.t, &F.dy0.t, &F.a, &F.bin, &F.dy.t); }
static lyco_status mfwd(void) { return lyco_merge_fwd(ctx, &F.out.t, NULL, &F.a, &F.min); }
static lyco_status mbwd(void) { return lyco_merge_bwd(ctx, &F.g, &F.a, &F.min, &F.dout.t, NULL); }

static void set_shape2(ft *T, int64_t a, int64_t b) {
    T->t.ndim = 2;
    T->shape[0] = a;
    T->shape[1] = b;
}

static DLDataType dl(uint8_t code, uint8_t bits, uint16_t lanes) {
    DLDataType d;
    d.code = code;
    d.bits = bits;
    d.lanes = lanes;
    return d;
}

/* ---------------------------------------------------------------------------------------------
 * LYCO_ERR_NULL
 * ------------------------------------------------------------------------------------------- */
static void null_checks(void) {
    lyco_status st;
    reset();
    st = lyco_bypass_fwd(NULL, &F.y.t, &F.a, &F.bin);
    expect("[null] bypass_fwd ctx NULL", st, LYCO_ERR_NULL, "bypass_fwd", "ctx is NULL", NULL);
    st = lyco_bypass_bwd(NULL, &F.g, &F.dx.t, &F.dy0.t, &F.a, &F.bin, &F.dy.t);
    expect("[null] bypass_bwd ctx NULL", st, LYCO_ERR_NULL, "bypass_bwd", "ctx is NULL", NULL);
    st = lyco_merge_fwd(NULL, &F.out.t, NULL, &F.a, &F.min);
    expect("[null] merge_fwd ctx NULL", st, LYCO_ERR_NULL, "merge_fwd", "ctx is NULL", NULL);
    st = lyco_merge_bwd(NULL, &F.g, &F.a, &F.min, &F.dout.t, NULL);
    expect("[null] merge_bwd ctx NULL", st, LYCO_ERR_NULL, "merge_bwd", "ctx is NULL", NULL);

    st = lyco_bypass_fwd(ctx, &F.y.t, NULL, &F.bin);
    expect("[null] bypass_fwd adapter NULL", st, LYCO_ERR_NULL, "adapter is NULL", NULL, NULL);
    st = lyco_bypass_bwd(ctx, &F.g, &F.dx.t, &F.dy0.t, NULL, &F.bin, &F.dy.t);
    expect("[null] bypass_bwd adapter NULL", st, LYCO_ERR_NULL, "adapter is NULL", NULL, NULL);
    st = lyco_merge_fwd(ctx, &F.out.t, NULL, NULL, &F.min);
    expect("[null] merge_fwd adapter NULL", st, LYCO_ERR_NULL, "adapter is NULL", NULL, NULL);
    st = lyco_merge_bwd(ctx, &F.g, NULL, &F.min, &F.dout.t, NULL);
    expect("[null] merge_bwd adapter NULL", st, LYCO_ERR_NULL, "adapter is NULL", NULL, NULL);

    st = lyco_bypass_fwd(ctx, &F.y.t, &F.a, NULL);
    expect("[null] bypass_fwd args NULL", st, LYCO_ERR_NULL, "bypass args are NULL", NULL, NULL);
    st = lyco_bypass_bwd(ctx, &F.g, &F.dx.t, &F.dy0.t, &F.a, NULL, &F.dy.t);
    expect("[null] bypass_bwd args NULL", st, LYCO_ERR_NULL, "bypass args are NULL", NULL, NULL);
    st = lyco_merge_fwd(ctx, &F.out.t, NULL, &F.a, NULL);
    expect("[null] merge_fwd args NULL", st, LYCO_ERR_NULL, "merge args are NULL", NULL, NULL);
    st = lyco_merge_bwd(ctx, &F.g, &F.a, NULL, &F.dout.t, NULL);
    expect("[null] merge_bwd args NULL", st, LYCO_ERR_NULL, "merge args are NULL", NULL, NULL);

    reset();
    F.bin.x = NULL;
    expect("[null] bypass_fwd x NULL", bfwd(), LYCO_ERR_NULL, "x is NULL", "layer input", NULL);
    expect("[null] bypass_bwd x NULL", bbwd(), LYCO_ERR_NULL, "x is NULL", NULL, NULL);
    reset();
    F.a.tensor[LYCO_LORA_DOWN] = NULL;
    F.g.grad[LYCO_LORA_DOWN] = NULL;
    expect("[null] lora_down NULL (bypass_fwd)", bfwd(), LYCO_ERR_NULL, "lora_down is NULL", "locon needs it", NULL);
    expect("[null] lora_down NULL (merge_fwd)", mfwd(), LYCO_ERR_NULL, "lora_down is NULL", "locon needs it", NULL);
    reset();
    F.a.tensor[LYCO_LORA_UP] = NULL;
    F.g.grad[LYCO_LORA_UP] = NULL;
    expect("[null] lora_up NULL (bypass_bwd)", bbwd(), LYCO_ERR_NULL, "lora_up is NULL", "locon needs it", NULL);
    expect("[null] lora_up NULL (merge_bwd)", mbwd(), LYCO_ERR_NULL, "lora_up is NULL", "locon needs it", NULL);

    reset();
    st = lyco_bypass_fwd(ctx, NULL, &F.a, &F.bin);
    expect("[null] bypass_fwd y NULL", st, LYCO_ERR_NULL, "y is NULL", "output", NULL);
    st = lyco_merge_fwd(ctx, NULL, NULL, &F.a, &F.min);
    expect("[null] merge_fwd out NULL", st, LYCO_ERR_NULL, "out is NULL", "weight's shape", NULL);
    st = lyco_bypass_bwd(ctx, &F.g, &F.dx.t, &F.dy0.t, &F.a, &F.bin, NULL);
    expect("[null] bypass_bwd dy NULL", st, LYCO_ERR_NULL, "dy is NULL", NULL, NULL);
    st = lyco_merge_bwd(ctx, &F.g, &F.a, &F.min, NULL, NULL);
    expect("[null] merge_bwd d_out NULL", st, LYCO_ERR_NULL, "d_out is NULL", NULL, NULL);

    reset();
    F.min.weight = NULL;
    expect("[null] merge_fwd W NULL in weight mode", mfwd(), LYCO_ERR_NULL, "weight (W) is NULL", "locon", NULL);
    F.min.mode = LYCO_MERGE_UNMERGE;
    expect("[null] merge_fwd W NULL in unmerge mode", mfwd(), LYCO_ERR_NULL, "weight (W) is NULL", NULL, NULL);
    F.min.mode = LYCO_MERGE_DELTA;
    expect("[null] merge_fwd W NULL in delta mode is fine for LoCon", mfwd(), LYCO_OK, NULL, NULL, NULL);

    reset();
    F.bin.y0 = NULL;
    expect("[null] bypass_bwd dy0 requested without y0", bbwd(), LYCO_ERR_NULL, "dy0 is requested", "y0 is NULL", NULL);

    /* NULL data with elements; NULL shape */
    reset();
    F.x.t.data = NULL;
    expect("[null] x data NULL with 24 elements", bfwd(), LYCO_ERR_NULL, "x has 24 elements", "data is NULL", NULL);
    reset();
    F.up.t.data = NULL;
    expect("[null] lora_up data NULL with 12 elements", bfwd(), LYCO_ERR_NULL, "lora_up has 12 elements", "data is NULL", NULL);
    reset();
    F.y.t.data = NULL;
    expect("[null] y data NULL with 18 elements", bfwd(), LYCO_ERR_NULL, "y has 18 elements", "data is NULL", NULL);
    reset();
    F.W.t.data = NULL;
    expect("[null] W data NULL with 48 elements", mfwd(), LYCO_ERR_NULL, "W has 48 elements", "data is NULL", NULL);
    reset();
    F.gup.t.data = NULL;
    expect("[null] grad lora_up data NULL", bbwd(), LYCO_ERR_NULL, "grad lora_up has 12 elements", "data is NULL", NULL);
    reset();
    F.x.t.shape = NULL;
    expect("[null] x shape NULL with ndim 2", bfwd(), LYCO_ERR_NULL, "x has ndim 2", "shape is NULL", NULL);
    reset();
    F.down.t.shape = NULL;
    expect("[null] lora_down shape NULL with ndim 2", mfwd(), LYCO_ERR_NULL, "lora_down has ndim 2", "shape is NULL", NULL);

    /* zero elements with NULL data is not an error */
    reset();
    set_shape2(&F.x, 0, NI);
    set_shape2(&F.y, 0, NO);
    F.x.t.data = NULL;
    F.y.t.data = NULL;
    F.bin.y0 = NULL;
    expect("[null] 0 tokens with NULL data is accepted", bfwd(), LYCO_OK, NULL, NULL, NULL);

    /* context and queries */
    expect("[null] ctx_create(NULL)", lyco_ctx_create(NULL), LYCO_ERR_NULL, "out is NULL", NULL, NULL);
    lyco_dtypes dt;
    expect("[null] resolve_dtypes ctx NULL", lyco_resolve_dtypes(NULL, &F.a, NULL, &F.x.t, NULL, &dt), LYCO_ERR_NULL, "ctx is NULL", NULL, NULL);
    expect("[null] resolve_dtypes adapter NULL", lyco_resolve_dtypes(ctx, NULL, NULL, &F.x.t, NULL, &dt), LYCO_ERR_NULL, "adapter is NULL", NULL, NULL);
    expect("[null] resolve_dtypes out NULL", lyco_resolve_dtypes(ctx, &F.a, NULL, &F.x.t, NULL, NULL), LYCO_ERR_NULL, "out is NULL", NULL, NULL);
    expect("[null] ctx_set_backend ctx NULL", lyco_ctx_set_backend(NULL, LYCO_BACKEND_REF), LYCO_ERR_NULL, "ctx is NULL", NULL, NULL);
    expect("[null] ctx_set_output_mode ctx NULL", lyco_ctx_set_output_mode(NULL, LYCO_OUTPUT_BASE), LYCO_ERR_NULL, "ctx is NULL", NULL, NULL);
    lyco_path p;
    expect("[null] ctx_last_path out NULL", lyco_ctx_last_path(ctx, NULL), LYCO_ERR_NULL, "out is NULL", NULL, NULL);
    expect("[null] ctx_last_path ctx NULL", lyco_ctx_last_path(NULL, &p), LYCO_ERR_NULL, "ctx is NULL", NULL, NULL);
    lyco_algo al;
    expect("[null] algo_from_name(NULL)", lyco_algo_from_name(NULL, &al), LYCO_ERR_NULL, "name is NULL", NULL, NULL);
    expect("[null] layer_conv(NULL)", lyco_layer_conv(NULL, 2, 4, 4, NULL, NULL, NULL, NULL, 1), LYCO_ERR_NULL, "layer is NULL", NULL, NULL);

    /* a NULL grads struct or NULL dx/dy0 just means "not wanted" */
    reset();
    st = lyco_bypass_bwd(ctx, NULL, &F.dx.t, NULL, &F.a, &F.bin, &F.dy.t);
    expect("[null] bypass_bwd with grads NULL (only dx wanted)", st, LYCO_OK, NULL, NULL, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * LYCO_ERR_SHAPE
 * ------------------------------------------------------------------------------------------- */
static void shape_checks(void) {
    reset();
    F.x.t.ndim = 0;
    expect("[shape] x with ndim 0", bfwd(), LYCO_ERR_SHAPE, "x has shape []", "(…, 8)", NULL);
    reset();
    set_shape2(&F.x, NT, 7);
    expect("[shape] x last dim 7 for an 8-input layer", bfwd(), LYCO_ERR_SHAPE, "x has shape [3, 7]", "(…, 8)", NULL);
    reset();
    set_shape2(&F.y, NT, 5);
    expect("[shape] y [3, 5] for a [3, 6] output", bfwd(), LYCO_ERR_SHAPE, "y has shape [3, 5]", "expected [3, 6]", NULL);
    reset();
    F.y.t.ndim = 1;
    F.y.shape[0] = NT * NO;
    expect("[shape] y with ndim 1", bfwd(), LYCO_ERR_SHAPE, "y has shape [18]", "expected [3, 6]", NULL);
    reset();
    set_shape2(&F.y0, 2, NO);
    expect("[shape] y0 [2, 6]", bfwd(), LYCO_ERR_SHAPE, "y0 has shape [2, 6]", "expected [3, 6]", NULL);
    reset();
    F.down.t.ndim = 1;
    F.down.shape[0] = NR * NI;
    expect("[shape] lora_down with ndim 1", bfwd(), LYCO_ERR_SHAPE, "lora_down has shape [16]", "r×I", NULL);
    reset();
    set_shape2(&F.down, NR, 7);
    expect("[shape] lora_down [2, 7] vs layer I = 8", mfwd(), LYCO_ERR_SHAPE, "lora_down has shape [2, 7]", "r×I", NULL);
    reset();
    set_shape2(&F.up, NO, 3);
    F.g.grad[LYCO_LORA_UP] = NULL;
    expect("[shape] lora_up [6, 3] vs lora_down rank 2", bfwd(), LYCO_ERR_SHAPE, "lora_up has shape [6, 3]", "lora_down's first dim", NULL);
    reset();
    set_shape2(&F.up, 5, NR);
    expect("[shape] lora_up [5, 2] vs layer O = 6", mfwd(), LYCO_ERR_SHAPE, "lora_up has shape [5, 2]", "O×r", NULL);
    reset();
    F.up.t.ndim = 3;
    F.up.shape[2] = 2;
    expect("[shape] lora_up with ndim 3 [6, 2, 2]", mfwd(), LYCO_ERR_SHAPE, "lora_up has shape [6, 2, 2]", "O×r", NULL);
    reset();
    set_shape2(&F.W, NO, 7);
    expect("[shape] W [6, 7] for a 6×8 layer (merge)", mfwd(), LYCO_ERR_SHAPE, "W has shape [6, 7]", "expected [6, 8]", NULL);
    reset();
    F.W.t.ndim = 1;
    F.W.shape[0] = NO * NI;
    expect("[shape] W with ndim 1 (merge)", mfwd(), LYCO_ERR_SHAPE, "W has shape [48]", "expected [6, 8]", NULL);
    reset();
    set_shape2(&F.out, NI, NO);
    expect("[shape] out [8, 6] (transposed)", mfwd(), LYCO_ERR_SHAPE, "out has shape [8, 6]", "expected [6, 8]", NULL);
    reset();
    set_shape2(&F.dy, NT, 5);
    expect("[shape] dy [3, 5]", bbwd(), LYCO_ERR_SHAPE, "dy has shape [3, 5]", "expected [3, 6]", NULL);
    reset();
    set_shape2(&F.dx, NT, NO);
    expect("[shape] dx [3, 6] for x [3, 8]", bbwd(), LYCO_ERR_SHAPE, "dx has shape [3, 6]", "expected [3, 8]", NULL);
    reset();
    set_shape2(&F.dy0, 1, NO);
    expect("[shape] dy0 [1, 6]", bbwd(), LYCO_ERR_SHAPE, "dy0 has shape [1, 6]", "expected [3, 6]", NULL);
    reset();
    set_shape2(&F.gup, NR, NO);
    expect("[shape] grad lora_up [2, 6] for lora_up [6, 2]", bbwd(), LYCO_ERR_SHAPE, "grad lora_up has shape [2, 6]", "expected [6, 2]", NULL);
    reset();
    set_shape2(&F.gdown, NR, NI + 1);
    expect("[shape] grad lora_down [2, 9] (merge_bwd)", mbwd(), LYCO_ERR_SHAPE, "grad lora_down has shape [2, 9]", "expected [2, 8]", NULL);
    reset();
    set_shape2(&F.dout, NO, 7);
    expect("[shape] d_out [6, 7]", mbwd(), LYCO_ERR_SHAPE, "d_out has shape [6, 7]", "expected [6, 8]", NULL);

    /* negative shapes and ndim out of range */
    reset();
    set_shape2(&F.x, -3, NI);
    expect("[shape] x shape [-3, 8]", bfwd(), LYCO_ERR_SHAPE, "x has shape[0] = -3", "≥ 0", NULL);
    reset();
    set_shape2(&F.down, NR, -8);
    expect("[shape] lora_down shape [2, -8]", mfwd(), LYCO_ERR_SHAPE, "lora_down has shape[1] = -8", "≥ 0", NULL);
    reset();
    set_shape2(&F.y, NT, -6);
    expect("[shape] y shape [3, -6]", bfwd(), LYCO_ERR_SHAPE, "y has shape[1] = -6", "≥ 0", NULL);
    reset();
    set_shape2(&F.gup, -NO, NR);
    expect("[shape] grad lora_up shape [-6, 2]", bbwd(), LYCO_ERR_SHAPE, "grad lora_up has shape[0] = -6", "≥ 0", NULL);
    reset();
    F.x.t.ndim = 9;
    expect("[shape] x with ndim 9", bfwd(), LYCO_ERR_SHAPE, "x has ndim 9", "0..8", NULL);
    reset();
    F.up.t.ndim = -1;
    expect("[shape] lora_up with ndim -1", bfwd(), LYCO_ERR_SHAPE, "lora_up has ndim -1", "0..8", NULL);
    reset();
    lyco_layer_linear(&F.a.layer, 0, NI);
    expect("[shape] layer with 0 output features", mfwd(), LYCO_ERR_SHAPE, "layer is 0×8", "positive", NULL);
    reset();
    lyco_layer_linear(&F.a.layer, NO, -NI);
    expect("[shape] layer with -8 input features", bfwd(), LYCO_ERR_SHAPE, "layer is 6×-8", "positive", NULL);

    /* masks and scalar */
    reset();
    F.mask.shape[0] = 3;
    F.a.tensor[LYCO_RANK_MASK] = &F.mask.t;
    expect("[shape] rank_mask of 3 for rank 2 (bypass)", bfwd(), LYCO_ERR_SHAPE, "rank_mask has shape [3]", "2 elements", NULL);
    reset();
    F.mask.shape[0] = NR;
    F.a.tensor[LYCO_RANK_MASK] = &F.mask.t;
    expect("[shape] rank_mask of 2 in merge (needs O = 6)", mfwd(), LYCO_ERR_SHAPE, "rank_mask has shape [2]", "6 elements", NULL);
    reset();
    F.mask.shape[0] = 2;
    F.a.tensor[LYCO_MODULE_MASK] = &F.mask.t;
    expect("[shape] module_mask of 2 elements", bfwd(), LYCO_ERR_SHAPE, "module_mask has shape [2]", "one element", NULL);
    reset();
    F.mask.shape[0] = 2;
    F.a.tensor[LYCO_SCALAR] = &F.mask.t;
    expect("[shape] scalar of 2 elements", bfwd(), LYCO_ERR_SHAPE, "scalar has 2 elements", "0-dim or 1-element", NULL);
    reset();
    F.a.tensor[LYCO_LORA_MID] = &F.W.t;
    expect("[shape] lora_mid on a linear layer", mfwd(), LYCO_ERR_SHAPE, "lora_mid is given", "Tucker needs a conv layer", NULL);

    /* conv2d geometry: LoCon conv 4→4, kernel 3×3, rank 2 */
    reset();
    int64_t k[2] = {3, 3};
    lyco_layer_conv(&F.a.layer, 2, 4, 4, k, NULL, NULL, NULL, 1);
    ft_init(&F.down, 4, (const int64_t[]){NR, 4, 3, 3});
    ft_init(&F.up, D2(4, NR));
    ft_init(&F.x, 3, (const int64_t[]){1, 4, 5});
    ft_init(&F.y, 4, (const int64_t[]){1, 4, 3, 3});
    F.bin.y0 = NULL;
    expect("[shape] conv2d: x (1, 4, 5) has one spatial dim", bfwd(), LYCO_ERR_SHAPE, "x has shape [1, 4, 5]", "2 spatial dims", NULL);
    ft_init(&F.x, 4, (const int64_t[]){1, 4, 2, 2});
    expect("[shape] conv2d: x spatial 2×2 < kernel 3×3", bfwd(), LYCO_ERR_SHAPE, "x spatial dim 0 is 2", "kernel's span 3", NULL);
    ft_init(&F.x, 4, (const int64_t[]){1, 3, 5, 5});
    expect("[shape] conv2d: x with 3 channels for 4", bfwd(), LYCO_ERR_SHAPE, "x has shape [1, 3, 5, 5]", "(N, 4,", NULL);
    ft_init(&F.x, 4, (const int64_t[]){1, 4, 5, 5});
    expect("[shape] conv2d: valid x (control)", bfwd(), LYCO_OK, NULL, NULL, NULL);
    ft_init(&F.down, 4, (const int64_t[]){NR, 4, 3, 2});
    expect("[shape] conv2d: lora_down kernel 3×2 for 3×3", bfwd(), LYCO_ERR_SHAPE, "lora_down has shape [2, 4, 3, 2]", "r×I×k", NULL);
}

/* ---------------------------------------------------------------------------------------------
 * Checks that might crash the process run in a child (fork): a crash is a failed check, not the
 * end of the test. The child sends the status and lyco_last_error() back through a pipe.
 * ------------------------------------------------------------------------------------------- */
static void expect_isolated(const char *what, lyco_status (*call)(void), lyco_status want, const char *s1, const char *s2) {
    int fd[2];
    fflush(stdout);
    if (pipe(fd) != 0) { report(false, "%s: pipe failed", what); return; }
    pid_t pid = fork();
    if (pid < 0) { report(false, "%s: fork failed", what); close(fd[0]); close(fd[1]); return; }
    if (pid == 0) {
        close(fd[0]);
        char buf[1100];
        lyco_status st = call();
        int n = snprintf(buf, sizeof buf, "%d %s", (int)st, lyco_last_error());
        if (n > 0 && write(fd[1], buf, (size_t)(n < (int)sizeof buf ? n : (int)sizeof buf - 1)) < 0) _exit(3);
        _exit(0);
    }
    close(fd[1]);
    char buf[1100];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf - 1 && (r = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)r;
    buf[got] = '\0';
    close(fd[0]);
    int wst = 0;
    waitpid(pid, &wst, 0);
    if (!WIFEXITED(wst) || got == 0) {
        report(false, "%-58s CRASHED (%s %d)", what, WIFSIGNALED(wst) ? "signal" : "exit", WIFSIGNALED(wst) ? WTERMSIG(wst) : WEXITSTATUS(wst));
        return;
    }
    int code = atoi(buf);
    const char *msg = strchr(buf, ' ') ? strchr(buf, ' ') + 1 : "";
    bool ok = code == (int)want && (!s1 || strstr(msg, s1)) && (!s2 || strstr(msg, s2));
    report(ok, "%-58s %s (expected %s) \"%s\"", what, lyco_status_name((lyco_status)code), lyco_status_name(want), msg);
}

/* shapes whose element count overflows int64 */
static lyco_status huge_x(void) {
    reset();
    F.bin.y0 = NULL;
    set_shape2(&F.x, (int64_t)1 << 62, NI);
    set_shape2(&F.y, (int64_t)1 << 62, NO);
    return bfwd();
}
static lyco_status huge_rank(void) {
    reset();
    set_shape2(&F.down, (int64_t)1 << 62, NI);
    set_shape2(&F.up, NO, (int64_t)1 << 62);
    return mfwd();
}

static void overflow_checks(void) {
    expect_isolated("[shape] x [2^62, 8]: element count overflows int64", huge_x, LYCO_ERR_SHAPE, "x", NULL);
    expect_isolated("[shape] rank 2^62: lora_down [2^62, 8] element count overflows", huge_rank, LYCO_ERR_SHAPE, "lora_down", NULL);
}

/* ---------------------------------------------------------------------------------------------
 * LYCO_ERR_DTYPE
 * ------------------------------------------------------------------------------------------- */
static void dtype_checks(void) {
    reset();
    F.x.t.dtype = lyco_dl_dtype(LYCO_F16);
    F.down.t.dtype = F.up.t.dtype = lyco_dl_dtype(LYCO_BF16);
    expect("[dtype] x fp16 with a bf16 adapter", bfwd(), LYCO_ERR_DTYPE, "x is fp16", "lora_down is bf16", "no common 16-bit type");
    reset();
    F.W.t.dtype = lyco_dl_dtype(LYCO_BF16);
    F.up.t.dtype = lyco_dl_dtype(LYCO_F16);
    expect("[dtype] W bf16 with lora_up fp16 (merge)", mfwd(), LYCO_ERR_DTYPE, "W is bf16", "lora_up is fp16", "no common 16-bit type");

    reset();
    F.x.t.dtype = dl(kDLFloat, 64, 1);
    expect("[dtype] x fp64", bfwd(), LYCO_ERR_DTYPE, "x is fp64", "expected fp16, bf16 or fp32", NULL);
    reset();
    F.x.t.dtype = dl(kDLInt, 32, 1);
    expect("[dtype] x int32", bfwd(), LYCO_ERR_DTYPE, "x is int32", "expected fp16, bf16 or fp32", NULL);
    reset();
    F.x.t.dtype = dl(kDLFloat, 32, 4);
    expect("[dtype] x fp32 with 4 lanes", bfwd(), LYCO_ERR_DTYPE, "x is fp32 x4", "expected fp16, bf16 or fp32", NULL);
    reset();
    F.x.t.dtype = dl(kDLFloat, 8, 1);
    expect("[dtype] x fp8", bfwd(), LYCO_ERR_DTYPE, "x is fp8", "expected fp16, bf16 or fp32", NULL);
    reset();
    F.up.t.dtype = dl(kDLFloat, 64, 1);
    expect("[dtype] lora_up fp64", mfwd(), LYCO_ERR_DTYPE, "lora_up is fp64", "expected fp16, bf16 or fp32", NULL);
    reset();
    F.W.t.dtype = dl(kDLUInt, 8, 1);
    expect("[dtype] W uint8 (merge)", mfwd(), LYCO_ERR_DTYPE, "W is uint8", "expected fp16, bf16 or fp32", NULL);
    reset();
    F.y.t.dtype = dl(kDLFloat, 64, 1);
    expect("[dtype] y fp64", bfwd(), LYCO_ERR_DTYPE, "y is fp64", "expected fp16, bf16 or fp32", NULL);
    reset();
    F.mask.t.dtype = dl(kDLInt, 8, 1);
    F.a.tensor[LYCO_RANK_MASK] = &F.mask.t;
    expect("[dtype] rank_mask int8", bfwd(), LYCO_ERR_DTYPE, "rank_mask is int8", "(masks too)", NULL);
    reset();
    F.gup.t.dtype = dl(kDLFloat, 64, 1);
    expect("[dtype] grad lora_up fp64", bbwd(), LYCO_ERR_DTYPE, "grad lora_up is fp64", "expected", NULL);
    reset();
    F.x.t.dtype = dl(kDLFloat, 64, 1);
    lyco_dtypes dt;
    expect("[dtype] resolve_dtypes with x fp64", lyco_resolve_dtypes(ctx, &F.a, NULL, &F.x.t, NULL, &dt), LYCO_ERR_DTYPE, "x has an unsupported dtype",
           "expected fp16, bf16 or fp32", NULL);

    /* outputs against the policy (fp32 everywhere → fp32 output) */
    reset();
    F.y.t.dtype = lyco_dl_dtype(LYCO_BF16);
    expect("[dtype] y bf16 where the policy gives fp32", bfwd(), LYCO_ERR_DTYPE, "y is bf16", "expected fp32", "policy");
    reset();
    F.out.t.dtype = lyco_dl_dtype(LYCO_F16);
    expect("[dtype] merge out fp16 where the policy gives fp32", mfwd(), LYCO_ERR_DTYPE, "out is fp16", "expected fp32", "policy");
    reset();
    lyco_ctx_set_output_mode(ctx, LYCO_OUTPUT_BASE);
    F.x.t.dtype = F.y0.t.dtype = lyco_dl_dtype(LYCO_BF16);
    expect("[dtype] base mode, bf16 y0: y fp32 refused", bfwd(), LYCO_ERR_DTYPE, "y is fp32", "expected bf16", "policy");

    /* gradients in their leaf's dtype */
    reset();
    F.gup.t.dtype = lyco_dl_dtype(LYCO_BF16);
    expect("[dtype] grad lora_up bf16 for an fp32 lora_up", bbwd(), LYCO_ERR_DTYPE, "grad lora_up is bf16", "expected fp32", "leaf's dtype");
    reset();
    F.dx.t.dtype = lyco_dl_dtype(LYCO_F16);
    expect("[dtype] dx fp16 for an fp32 x", bbwd(), LYCO_ERR_DTYPE, "dx is fp16", "expected fp32", "leaf's dtype");
    reset();
    F.dy0.t.dtype = lyco_dl_dtype(LYCO_BF16);
    expect("[dtype] dy0 bf16 for an fp32 y0", bbwd(), LYCO_ERR_DTYPE, "dy0 is bf16", "expected fp32", "leaf's dtype");
    reset();
    F.gdown.t.dtype = lyco_dl_dtype(LYCO_F16);
    expect("[dtype] grad lora_down fp16 (merge_bwd)", mbwd(), LYCO_ERR_DTYPE, "grad lora_down is fp16", "expected fp32", "leaf's dtype");
}

/* ---------------------------------------------------------------------------------------------
 * LYCO_ERR_ALIAS (and the accepted in-place forms)
 * ------------------------------------------------------------------------------------------- */
static void view_on(ft *T, float *p) { T->t.data = p; }

static void alias_checks(void) {
    /* y partially overlapping x */
    reset();
    for (int i = 0; i < 512; i++) big[i] = rnd();
    view_on(&F.x, big);          /* [0, 24) */
    view_on(&F.y, big + 20);     /* [20, 38) */
    expect("[alias] y partially overlaps x", bfwd(), LYCO_ERR_ALIAS, "output y overlaps input x", "separate memory", NULL);
    reset();
    view_on(&F.y, F.x.data);
    expect("[alias] y on x's buffer", bfwd(), LYCO_ERR_ALIAS, "output y overlaps input x", NULL, NULL);
    reset();
    view_on(&F.y, F.down.data);
    expect("[alias] y on lora_down's buffer", bfwd(), LYCO_ERR_ALIAS, "output y overlaps adapter tensor lora_down", NULL, NULL);
    reset();
    /* pinned host memory (kDLCUDAHost) is the same address space as kDLCPU */
    view_on(&F.y, F.x.data);
    F.y.t.device.device_type = kDLCUDAHost;
    expect("[alias] y (kDLCUDAHost) on x's (kDLCPU) buffer", bfwd(), LYCO_ERR_ALIAS, "output y overlaps input x", NULL, NULL);
    reset();
    F.y.t.byte_offset = 0;
    view_on(&F.y0, big);
    view_on(&F.y, big + 5);      /* y0 [0, 18), y [5, 23) */
    expect("[alias] y partially overlaps y0", bfwd(), LYCO_ERR_ALIAS, "output y overlaps input y0", "very same view", NULL);
    reset();
    /* the same memory as y0 but a different view (column-major strides) */
    view_on(&F.y, F.y0.data);
    F.y.strides[0] = 1, F.y.strides[1] = NT;
    F.y.t.strides = F.y.strides;
    expect("[alias] y on y0's memory as a transposed view", bfwd(), LYCO_ERR_ALIAS, "output y overlaps input y0", NULL, NULL);

    /* merge: out partially overlapping W; the same memory as another view */
    reset();
    view_on(&F.W, big);
    view_on(&F.out, big);
    F.out.t.byte_offset = 8 * sizeof(float);
    expect("[alias] merge out partially overlaps W (byte_offset)", mfwd(), LYCO_ERR_ALIAS, "output out overlaps input W", NULL, NULL);
    reset();
    view_on(&F.out, F.W.data);
    F.out.strides[0] = 1, F.out.strides[1] = NO;
    F.out.t.strides = F.out.strides;
    expect("[alias] merge out on W's memory as a transposed view", mfwd(), LYCO_ERR_ALIAS, "output out overlaps input W", NULL, NULL);
    reset();
    view_on(&F.out, F.up.data);
    expect("[alias] merge out on lora_up's buffer", mfwd(), LYCO_ERR_ALIAS, "output out overlaps adapter tensor lora_up", NULL, NULL);

    /* accepted in-place forms, with the right result */
    reset();
    float w0[NO * NI];
    memcpy(w0, F.W.data, sizeof w0);
    lyco_status st = lyco_merge_fwd(ctx, &F.W.t, NULL, &F.a, &F.min); /* out is W */
    double err = 0;
    for (int o = 0; o < NO; o++)
        for (int i = 0; i < NI; i++) {
            double r = w0[o * NI + i];
            for (int k = 0; k < NR; k++) r += 0.5 * F.up.data[o * NR + k] * F.down.data[k * NI + i]; /* s = alpha/r = 1/2 */
            err = fmax(err, fabs(F.W.data[o * NI + i] - r));
        }
    expect("[alias] in-place merge (out is exactly W) accepted", st, LYCO_OK, NULL, NULL, NULL);
    report(st == LYCO_OK && err <= 1e-6, "[alias] in-place merge gives W + ΔW (max error %g)", err);
    reset();
    memcpy(w0, F.W.data, sizeof w0);
    DLTensor same = F.W.t; /* a second descriptor of the very same view */
    F.min.mode = LYCO_MERGE_UNMERGE;
    st = lyco_merge_fwd(ctx, &same, NULL, &F.a, &F.min);
    err = 0;
    for (int o = 0; o < NO; o++)
        for (int i = 0; i < NI; i++) {
            double r = w0[o * NI + i];
            for (int k = 0; k < NR; k++) r -= 0.5 * F.up.data[o * NR + k] * F.down.data[k * NI + i];
            err = fmax(err, fabs(F.W.data[o * NI + i] - r));
        }
    expect("[alias] in-place unmerge through a copy of W's descriptor", st, LYCO_OK, NULL, NULL, NULL);
    report(st == LYCO_OK && err <= 1e-6, "[alias] in-place unmerge gives W − ΔW (max error %g)", err);
    reset();
    float y00[NT * NO];
    memcpy(y00, F.y0.data, sizeof y00);
    st = lyco_bypass_fwd(ctx, &F.y0.t, &F.a, &F.bin); /* y is y0 */
    err = 0;
    for (int t = 0; t < NT; t++)
        for (int o = 0; o < NO; o++) {
            double r = y00[t * NO + o];
            for (int k = 0; k < NR; k++) {
                double h = 0;
                for (int i = 0; i < NI; i++) h += (double)F.x.data[t * NI + i] * F.down.data[k * NI + i];
                r += 0.5 * F.up.data[o * NR + k] * h;
            }
            err = fmax(err, fabs(F.y0.data[t * NO + o] - r));
        }
    expect("[alias] bypass y == y0 (in place) accepted", st, LYCO_OK, NULL, NULL, NULL);
    report(st == LYCO_OK && err <= 1e-5, "[alias] in-place bypass gives y0 + Δ (max error %g)", err);

    /* backward outputs */
    reset();
    view_on(&F.dy, big);
    view_on(&F.dx, big + 10);
    expect("[alias] dx partially overlaps dy", bbwd(), LYCO_ERR_ALIAS, "output dx overlaps input dy", NULL, NULL);
    reset();
    view_on(&F.dy0, F.dy.data);
    expect("[alias] dy0 on dy's buffer (same view)", bbwd(), LYCO_ERR_ALIAS, "output dy0 overlaps input dy", NULL, NULL);
    reset();
    view_on(&F.dx, F.x.data);
    expect("[alias] dx on x's buffer", bbwd(), LYCO_ERR_ALIAS, "output dx overlaps input x", NULL, NULL);
    reset();
    view_on(&F.gup, F.up.data);
    expect("[alias] grad lora_up on lora_up's buffer", bbwd(), LYCO_ERR_ALIAS, "grad lora_up", "adapter tensor lora_up", NULL);
    reset();
    view_on(&F.gdown, F.dout.data);
    expect("[alias] grad lora_down on d_out's buffer (merge_bwd)", mbwd(), LYCO_ERR_ALIAS, "grad lora_down", "input d_out", NULL);
    reset();
    view_on(&F.gdown, big);
    view_on(&F.gup, big + 8);
    expect("[alias] grad lora_down and grad lora_up overlap", bbwd(), LYCO_ERR_ALIAS, "grad lora_down", "grad lora_up", "overlap");
    reset();
    view_on(&F.gdown, F.dx.data);
    expect("[alias] grad lora_down on dx's buffer", bbwd(), LYCO_ERR_ALIAS, "dx", "grad lora_down", "overlap");

    /* five outputs (dx, dy0 and three gradients): LoCon + DoRA */
    reset();
    F.a.tensor[LYCO_DORA_SCALE] = &F.dora.t;
    F.bin.weight = &F.W.t;
    F.g.grad[LYCO_DORA_SCALE] = &F.gdora.t;
    expect("[alias] LoCon+DoRA bypass_bwd with 5 outputs (control)", bbwd(), LYCO_OK, NULL, NULL, NULL);
    view_on(&F.gdora, F.up.data);
    expect("[alias] 5th output grad dora_scale on lora_up's buffer", bbwd(), LYCO_ERR_ALIAS, "dora_scale", "lora_up", NULL);
    view_on(&F.gdora, F.gdown.data);
    expect("[alias] 5th output grad dora_scale on grad lora_down", bbwd(), LYCO_ERR_ALIAS, "dora_scale", "lora_down", NULL);
    view_on(&F.gdora, F.dx.data);
    expect("[alias] 5th output grad dora_scale on dx", bbwd(), LYCO_ERR_ALIAS, "dora_scale", "dx", NULL);
    view_on(&F.gdora, F.W.data);
    expect("[alias] 5th output grad dora_scale on W (an input)", bbwd(), LYCO_ERR_ALIAS, "dora_scale", "W", NULL);
}

/* ---------------------------------------------------------------------------------------------
 * LYCO_ERR_DEVICE
 * ------------------------------------------------------------------------------------------- */
static void all_on(DLDeviceType d) {
    ft *all[] = {&F.x, &F.y0, &F.y, &F.down, &F.up, &F.W, &F.out, &F.dy, &F.dx, &F.dy0, &F.gdown, &F.gup, &F.dout};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) all[i]->t.device.device_type = d;
}

static void device_checks(void) {
    reset();
    F.up.t.device.device_type = kDLCUDA;
    expect("[device] lora_up on cuda, the rest on cpu", bfwd(), LYCO_ERR_DEVICE, "lora_up is on cuda:0", "lora_down is on cpu:0", "one device");
    reset();
    F.x.t.device.device_type = kDLCUDA;
    expect("[device] x on cuda", bfwd(), LYCO_ERR_DEVICE, "x is on cuda:0", "cpu", "one device");
    reset();
    F.y.t.device.device_type = kDLCUDA;
    expect("[device] y on cuda", bfwd(), LYCO_ERR_DEVICE, "y is on cuda:0", "cpu", NULL);
    reset();
    F.gup.t.device.device_type = kDLCUDA;
    expect("[device] grad lora_up on cuda", bbwd(), LYCO_ERR_DEVICE, "grad lora_up is on cuda:0", "cpu", NULL);
    reset();
    F.W.t.device.device_type = kDLCUDA;
    expect("[device] W on cuda (merge)", mfwd(), LYCO_ERR_DEVICE, "W is on cuda:0", "cpu", NULL);
    reset();
    all_on(kDLCUDA);
    F.up.t.device.device_id = 1;
    expect("[device] cuda:0 and cuda:1", bfwd(), LYCO_ERR_DEVICE, "cuda:1", "cuda:0", "one device");
    reset();
    F.x.t.device.device_type = (DLDeviceType)7;
    expect("[device] x on device type 7", bfwd(), LYCO_ERR_DEVICE, "x is on device type 7", "expected CPU or CUDA", NULL);
    reset();
    all_on(kDLCUDA);
    expect("[device] everything on cuda, backend ref", bfwd(), LYCO_ERR_DEVICE, "tensors are on cuda:0", "backend is ref", NULL);
    reset();
    F.y.t.device.device_type = kDLCUDAHost;
    F.x.t.device.device_type = kDLCUDAHost;
    expect("[device] pinned host (kDLCUDAHost) with cpu is one device", bfwd(), LYCO_OK, NULL, NULL, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * LYCO_ERR_INVALID / LYCO_ERR_UNSUPPORTED
 * ------------------------------------------------------------------------------------------- */
static void invalid_checks(void) {
    reset();
    F.a.algo = (lyco_algo)99;
    expect("[invalid] algorithm 99 (bypass_fwd)", bfwd(), LYCO_ERR_INVALID, "algo is 99", "expected", NULL);
    expect("[invalid] algorithm 99 (merge_fwd)", mfwd(), LYCO_ERR_INVALID, "algo is 99", "expected", NULL);
    F.a.algo = (lyco_algo)-1;
    expect("[invalid] algorithm -1", bfwd(), LYCO_ERR_INVALID, "algo is -1", "expected", NULL);
    F.a.algo = LYCO_ALGO_COUNT;
    F.a.tensor[LYCO_LORA_DOWN] = F.a.tensor[LYCO_LORA_UP] = NULL;
    memset(&F.g, 0, sizeof F.g);
    expect("[invalid] algorithm LYCO_ALGO_COUNT, no slots", mfwd(), LYCO_ERR_INVALID, "algo is 11", "expected", NULL);
    reset();
    F.min.mode = (lyco_merge_mode)7;
    expect("[invalid] merge mode 7 (merge_fwd)", mfwd(), LYCO_ERR_INVALID, "merge mode is 7", "LYCO_MERGE_WEIGHT", NULL);
    expect("[invalid] merge mode 7 (merge_bwd)", mbwd(), LYCO_ERR_INVALID, "merge mode is 7", "LYCO_MERGE_WEIGHT", NULL);
    expect("[invalid] ctx_set_output_mode(5)", lyco_ctx_set_output_mode(ctx, (lyco_output_mode)5), LYCO_ERR_INVALID, "output mode is 5", "promote, base",
           NULL);
    expect("[invalid] ctx_set_fp32_mode(9)", lyco_ctx_set_fp32_mode(ctx, (lyco_fp32_mode)9), LYCO_ERR_INVALID, "fp32 precision mode is 9", "fp32, tf32",
           NULL);
    expect("[invalid] ctx_set_backend(42)", lyco_ctx_set_backend(ctx, (lyco_backend)42), LYCO_ERR_INVALID, "backend is 42",
           "auto, ref, eager, cpu, cuda", NULL);
    expect("[invalid] ctx_set_backend(-1)", lyco_ctx_set_backend(ctx, (lyco_backend)-1), LYCO_ERR_INVALID, "backend is -1", NULL, NULL);
    reset();
    F.bin.flags = 0x80;
    expect("[invalid] bypass flags 0x80", bfwd(), LYCO_ERR_INVALID, "bypass flags are 0x80", "LYCO_BYPASS_DELTA_ONLY", NULL);
    reset();
    F.a.tensor[LYCO_HADA_W1_A] = &F.W.t;
    expect("[invalid] hada_w1_a set on a LoCon adapter", bfwd(), LYCO_ERR_INVALID, "hada_w1_a is set", "locon does not use it", "expected NULL");
    reset();
    F.a.tensor[LYCO_OFT_BLOCKS] = &F.W.t;
    expect("[invalid] oft_blocks set on a LoCon adapter (merge)", mfwd(), LYCO_ERR_INVALID, "oft_blocks is set", "locon does not use it", NULL);
    reset();
    F.a.tensor[LYCO_RANK_MASK_B] = &F.mask.t;
    expect("[invalid] rank_mask_b set on a LoCon adapter", bfwd(), LYCO_ERR_INVALID, "rank_mask_b is set", "locon does not use it", NULL);
    reset();
    F.a.tensor[LYCO_RANK_MASK] = &F.mask.t;
    F.g.grad[LYCO_RANK_MASK] = &F.dy0.t;
    expect("[invalid] gradient asked for rank_mask", bbwd(), LYCO_ERR_INVALID, "grad slot rank_mask", "masks have no gradient", NULL);
    reset();
    F.g.grad[LYCO_LORA_MID] = &F.dy0.t;
    expect("[invalid] gradient asked for absent lora_mid", bbwd(), LYCO_ERR_INVALID, "grad slot lora_mid is set", "adapter slot lora_mid is NULL", NULL);
    reset();
    F.a.multiplier = NAN;
    expect("[invalid] multiplier NaN", bfwd(), LYCO_ERR_INVALID, "multiplier is nan", "finite", NULL);
    reset();
    F.a.alpha = INFINITY;
    expect("[invalid] alpha +Inf", mfwd(), LYCO_ERR_INVALID, "alpha is inf", "finite", NULL);
    reset();
    F.a.scale = -INFINITY;
    expect("[invalid] scale -Inf", bfwd(), LYCO_ERR_INVALID, "scale is -inf", "finite", NULL);
    reset();
    F.a.layer.kind = (lyco_layer_kind)9;
    expect("[invalid] layer kind 9", bfwd(), LYCO_ERR_INVALID, "layer kind is 9", "linear, conv or norm", NULL);
    reset();
    lyco_layer_norm(&F.a.layer, LYCO_NORM_LAYER, NO, 1, 1e-5);
    expect("[invalid] LoCon on a norm layer", mfwd(), LYCO_ERR_INVALID, "norm layer", "locon needs a linear or conv layer", NULL);
    reset();
    F.min.bias = &F.dy0.t;
    expect("[invalid] merge bias given for LoCon", mfwd(), LYCO_ERR_INVALID, "bias is given", "locon has no bias delta", NULL);
    reset();
    F.a.tensor[LYCO_DORA_SCALE] = &F.dora.t;
    F.min.mode = LYCO_MERGE_UNMERGE;
    expect("[invalid] unmerge of LoCon with DoRA", mfwd(), LYCO_ERR_INVALID, "unmerge", "not additive", NULL);
    reset();
    F.a.tensor[LYCO_DORA_SCALE] = &F.dora.t;
    F.a.wd_on_out = 5;
    expect("[invalid] wd_on_out 5", mfwd(), LYCO_ERR_INVALID, "wd_on_out is 5", "expected 1", NULL);
    reset();
    int64_t k3[3] = {3, 3, 3};
    expect("[invalid] layer_conv with dims 4", lyco_layer_conv(&F.a.layer, 4, 4, 4, k3, NULL, NULL, NULL, 1), LYCO_ERR_INVALID, "dims is 4",
           "1, 2 or 3", NULL);
    reset();
    lyco_layer_conv(&F.a.layer, 2, 4, 4, k3, NULL, NULL, NULL, 1);
    F.a.layer.stride[1] = 0;
    expect("[invalid] conv stride 0", mfwd(), LYCO_ERR_INVALID, "stride 0", "≥ 1", NULL);
    reset();
    lyco_layer_conv(&F.a.layer, 2, 4, 4, k3, NULL, NULL, NULL, 3);
    expect("[invalid] conv groups 3 for 4 channels", mfwd(), LYCO_ERR_INVALID, "groups is 3", "dividing", NULL);
    lyco_algo al;
    expect("[invalid] algo_from_name(\"lorax\")", lyco_algo_from_name("lorax", &al), LYCO_ERR_INVALID, "\"lorax\"", "locon (lora), loha", NULL);

    /* grouped conv for LoCon: a valid request no kernel takes */
    reset();
    int64_t k[2] = {3, 3};
    lyco_layer_conv(&F.a.layer, 2, 4, 4, k, NULL, NULL, NULL, 2);
    ft_init(&F.down, 4, (const int64_t[]){NR, 4, 3, 3});
    ft_init(&F.up, D2(4, NR));
    ft_init(&F.x, 4, (const int64_t[]){1, 4, 5, 5});
    ft_init(&F.y, 4, (const int64_t[]){1, 4, 3, 3});
    ft_init(&F.W, 4, (const int64_t[]){4, 2, 3, 3});
    ft_init(&F.out, 4, (const int64_t[]){4, 2, 3, 3});
    F.bin.y0 = NULL;
    expect("[unsupported] grouped conv (groups 2) LoCon bypass", bfwd(), LYCO_ERR_UNSUPPORTED, "groups is 2", "needs groups = 1", NULL);
    expect("[unsupported] grouped conv (groups 2) LoCon merge", mfwd(), LYCO_ERR_UNSUPPORTED, "groups is 2", "locon", NULL);
}

/* ---------------------------------------------------------------------------------------------
 * NaN / Inf propagation
 * ------------------------------------------------------------------------------------------- */
static int nonfinite_in(const float *p, int n) {
    int c = 0;
    for (int i = 0; i < n; i++) c += !isfinite(p[i]);
    return c;
}

static void nan_checks(void) {
    reset();
    F.bin.y0 = NULL;
    F.x.data[1 * NI + 0] = NAN;      /* token 1 */
    F.x.data[2 * NI + 3] = INFINITY; /* token 2 */
    lyco_status st = bfwd();
    int row0 = nonfinite_in(F.y.data, NO), row1 = nonfinite_in(F.y.data + NO, NO), row2 = nonfinite_in(F.y.data + 2 * NO, NO);
    bool nan1 = true;
    for (int o = 0; o < NO; o++) nan1 = nan1 && isnan(F.y.data[NO + o]);
    report(st == LYCO_OK && row0 == 0 && nan1 && row2 == NO,
           "[nan] bypass_fwd: NaN / Inf in x reach their tokens' rows only (%s; non-finite per row %d %d %d, row 1 all NaN: %d)",
           lyco_status_name(st), row0, row1, row2, nan1);
    reset();
    F.W.data[0] = NAN;
    F.up.data[1 * NR + 0] = INFINITY; /* row o = 1 of ΔW */
    st = mfwd();
    int other = 0;
    for (int o = 0; o < NO; o++)
        for (int i = 0; i < NI; i++)
            if (!(o == 0 && i == 0) && o != 1) other += !isfinite(F.out.data[o * NI + i]);
    report(st == LYCO_OK && isnan(F.out.data[0]) && nonfinite_in(F.out.data + NI, NI) == NI && other == 0,
           "[nan] merge_fwd: NaN in W and Inf in lora_up propagate to their elements/rows only (%s, %d elsewhere)", lyco_status_name(st), other);
    reset();
    F.dy.data[0] = NAN; /* token 0, output 0 */
    st = bbwd();
    report(st == LYCO_OK && nonfinite_in(F.dx.data, NI) == NI && nonfinite_in(F.dx.data + NI, 2 * NI) == 0 && isnan(F.dy0.data[0]) &&
               nonfinite_in(F.dy0.data + 1, NT * NO - 1) == 0 && nonfinite_in(F.gup.data, NR) == NR &&
               nonfinite_in(F.gup.data + NR, (NO - 1) * NR) == 0 && nonfinite_in(F.gdown.data, NR * NI) == NR * NI,
           "[nan] bypass_bwd: NaN in dy reaches dx row 0, dy0[0], grad lora_up row 0 and all of grad lora_down (%s)", lyco_status_name(st));
    reset();
    F.down.data[0] = -INFINITY;
    st = bbwd();
    report(st == LYCO_OK && nonfinite_in(F.dx.data, NT * NI) > 0, "[nan] bypass_bwd: -Inf in lora_down gives non-finite dx, no crash (%s)",
           lyco_status_name(st));
}

/* ---------------------------------------------------------------------------------------------
 * Inputs are never modified
 * ------------------------------------------------------------------------------------------- */
static uint64_t fnv(const void *p, size_t n, uint64_t h) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}
static uint64_t inputs_sum(void) {
    const ft *in[] = {&F.x, &F.y0, &F.down, &F.up, &F.W, &F.dy, &F.dout, &F.dora, &F.mask};
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) h = fnv(in[i]->data, sizeof in[i]->data, h);
    return h;
}
static uint64_t outputs_sum(void) {
    const ft *out[] = {&F.y, &F.out, &F.dx, &F.dy0, &F.gdown, &F.gup, &F.gdora};
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++) h = fnv(out[i]->data, sizeof out[i]->data, h);
    return h;
}

static void unchanged(const char *what, lyco_status (*call)(void), lyco_status want, bool outputs_too) {
    uint64_t hi = inputs_sum(), ho = outputs_sum();
    lyco_status st = call();
    bool ok = st == want && inputs_sum() == hi && (!outputs_too || outputs_sum() == ho);
    report(ok, "[inputs] %-52s %s; inputs %s%s", what, lyco_status_name(st), inputs_sum() == hi ? "unchanged" : "MODIFIED",
           outputs_too ? (outputs_sum() == ho ? ", outputs untouched" : ", outputs WRITTEN by a failing call") : "");
}

static void input_checks(void) {
    reset();
    unchanged("bypass_fwd with y0 (success)", bfwd, LYCO_OK, false);
    reset();
    unchanged("bypass_bwd with dx, dy0, grads (success)", bbwd, LYCO_OK, false);
    reset();
    unchanged("merge_fwd out of place (success)", mfwd, LYCO_OK, false);
    reset();
    unchanged("merge_bwd (success)", mbwd, LYCO_OK, false);
    reset();
    F.a.tensor[LYCO_DORA_SCALE] = &F.dora.t;
    F.bin.weight = &F.W.t;
    F.g.grad[LYCO_DORA_SCALE] = &F.gdora.t;
    unchanged("LoCon+DoRA bypass_bwd (success)", bbwd, LYCO_OK, false);
    reset();
    F.a.tensor[LYCO_DORA_SCALE] = &F.dora.t;
    unchanged("LoCon+DoRA merge_fwd (success)", mfwd, LYCO_OK, false);
    reset();
    F.a.tensor[LYCO_RANK_MASK] = &F.mask.t;
    unchanged("bypass_fwd with a rank mask (success)", bfwd, LYCO_OK, false);
    reset();
    F.a.tensor[LYCO_DORA_SCALE] = &F.dora.t;
    F.bin.weight = &F.W.t;
    F.g.grad[LYCO_DORA_SCALE] = &F.gdora.t;
    F.gdora.t.data = F.up.data; /* a 5th output over an adapter tensor: must be refused */
    unchanged("LoCon+DoRA bypass_bwd, grad dora_scale over lora_up", bbwd, LYCO_ERR_ALIAS, false);
    reset();
    F.y.t.dtype = lyco_dl_dtype(LYCO_BF16);
    unchanged("bypass_fwd, y of the wrong dtype (failure)", bfwd, LYCO_ERR_DTYPE, true);
    reset();
    F.dx.t.dtype = lyco_dl_dtype(LYCO_F16);
    unchanged("bypass_bwd, dx of the wrong dtype (failure)", bbwd, LYCO_ERR_DTYPE, true);
    reset();
    F.out.t.byte_offset = 4;
    F.out.t.data = F.W.data;
    unchanged("merge_fwd, out overlapping W (failure)", mfwd, LYCO_ERR_ALIAS, true);
    reset();
    set_shape2(&F.dout, NO, 7);
    unchanged("merge_bwd, d_out of the wrong shape (failure)", mbwd, LYCO_ERR_SHAPE, true);
}

/* ---------------------------------------------------------------------------------------------
 * lyco_status_name
 * ------------------------------------------------------------------------------------------- */
static void status_names(void) {
    static const char *const want[] = {"LYCO_OK", "LYCO_ERR_NULL", "LYCO_ERR_INVALID", "LYCO_ERR_SHAPE", "LYCO_ERR_DTYPE",
                                       "LYCO_ERR_DEVICE", "LYCO_ERR_ALIAS", "LYCO_ERR_UNSUPPORTED", "LYCO_ERR_NOMEM",
                                       "LYCO_ERR_BACKEND", "LYCO_ERR_IO", "LYCO_ERR_FORMAT", "LYCO_ERR_NUMERIC"};
    report((int)(sizeof want / sizeof want[0]) == (int)LYCO_STATUS_COUNT, "[names] %d status codes named here, LYCO_STATUS_COUNT = %d",
           (int)(sizeof want / sizeof want[0]), (int)LYCO_STATUS_COUNT);
    for (int s = 0; s < (int)(sizeof want / sizeof want[0]); s++) {
        const char *got = lyco_status_name((lyco_status)s);
        report(got && !strcmp(got, want[s]), "[names] lyco_status_name(%d) = \"%s\"", s, got ? got : "(null)");
    }
    const int bad[] = {-1, (int)LYCO_STATUS_COUNT, 1000, -2147483647};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *got = lyco_status_name((lyco_status)bad[i]);
        report(got && !strcmp(got, "LYCO_UNKNOWN_STATUS"), "[names] lyco_status_name(%d) = \"%s\"", bad[i], got ? got : "(null)");
    }
}

int main(void) {
    uint64_t seed = lyco_seed_from_env();
    printf("test_bad_input: seed %llu (LYCO_SEED=%llu to rerun)\n", (unsigned long long)seed, (unsigned long long)seed);
    lyco_rng_seed(&rng, seed);
    unsetenv("LYCO_BACKEND");
    if (lyco_ctx_create(&ctx) != LYCO_OK || lyco_ctx_set_backend(ctx, LYCO_BACKEND_REF) != LYCO_OK) {
        printf("FAIL cannot create a ref context: %s\n0 passed, 1 failed\n", lyco_last_error());
        return 1;
    }
    /* an error wrapped with context keeps the inner text (lyco_fail reading lyco_last_error()
       while writing it once printed the prefix twice and lost the inner message) */
    lyco_fail(LYCO_ERR_IO, "inner reason");
    lyco_status wrapped = lyco_fail(LYCO_ERR_IO, "outer context: %s", lyco_last_error());
    expect("[status] wrapped error keeps its inner text", wrapped, LYCO_ERR_IO, "outer context: inner reason", NULL, NULL);
    null_checks();
    shape_checks();
    overflow_checks();
    dtype_checks();
    alias_checks();
    device_checks();
    invalid_checks();
    nan_checks();
    input_checks();
    status_names();
    lyco_ctx_destroy(ctx);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
