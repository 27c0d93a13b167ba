/*
 * policy.c — the dtype policy of NUMERICS.md §1, the one source of truth for every backend.
 *
 * Two 3×3 tables over {fp16, bf16, fp32} drive it: `promote` (the output dtype of a pair under
 * the default mode; fp16×bf16 is an error) and `compute` (what products take: the 16-bit type of
 * the pair if any, else fp32). A call folds every operand through both tables; the first fp16 and
 * the first bf16 operand are remembered so the error names both.
 */
#include <string.h>

#include "core.h"

#define ERR LYCO_DTYPE_INVALID
static const lyco_dtype promote_table[3][3] = {
    /*            fp16      bf16      fp32 */
    /* fp16 */ {LYCO_F16, ERR, LYCO_F32},
    /* bf16 */ {ERR, LYCO_BF16, LYCO_F32},
    /* fp32 */ {LYCO_F32, LYCO_F32, LYCO_F32},
};
static const lyco_dtype compute_table[3][3] = {
    /* fp16 */ {LYCO_F16, ERR, LYCO_F16},
    /* bf16 */ {ERR, LYCO_BF16, LYCO_BF16},
    /* fp32 */ {LYCO_F16, LYCO_BF16, LYCO_F32},
};
#undef ERR

lyco_status lyco_policy_resolve(const lyco_operand *ops, int n, int base_index,
                                lyco_output_mode mode, lyco_dtypes *out) {
    if (n <= 0) return lyco_fail(LYCO_ERR_INVALID, "policy: no operands given (expected at least one)");
    if (mode != LYCO_OUTPUT_PROMOTE && mode != LYCO_OUTPUT_BASE)
        return lyco_fail(LYCO_ERR_INVALID, "output mode is %d; expected LYCO_OUTPUT_PROMOTE or LYCO_OUTPUT_BASE", (int)mode);
    int first16[2] = {-1, -1}; /* first fp16, first bf16 operand */
    lyco_dtype promote = ops[0].dtype, compute = ops[0].dtype;
    for (int i = 0; i < n; i++) {
        lyco_dtype d = ops[i].dtype;
        if ((int)d < 0 || d >= LYCO_DTYPE_COUNT)
            return lyco_fail(LYCO_ERR_DTYPE, "%s has an unsupported dtype; expected fp16, bf16 or fp32", ops[i].name);
        if (d != LYCO_F32 && first16[d] < 0) first16[d] = i;
        if (first16[LYCO_F16] >= 0 && first16[LYCO_BF16] >= 0) {
            const lyco_operand *a = &ops[first16[LYCO_F16] < first16[LYCO_BF16] ? first16[LYCO_F16] : first16[LYCO_BF16]];
            const lyco_operand *b = &ops[i];
            return lyco_fail(LYCO_ERR_DTYPE, "%s is %s but %s is %s: fp16 and bf16 have no common 16-bit type",
                             a->name, lyco_dtype_name(a->dtype), b->name, lyco_dtype_name(b->dtype));
        }
        promote = promote_table[promote][d];
        compute = compute_table[compute][d];
    }
    out->compute = compute;
    out->output = promote;
    if (mode == LYCO_OUTPUT_BASE && base_index >= 0 && base_index < n) out->output = ops[base_index].dtype;
    return LYCO_OK;
}

lyco_status lyco_output_mode_parse(const char *name, lyco_output_mode *out) {
    if (name && !strcmp(name, "promote")) { *out = LYCO_OUTPUT_PROMOTE; return LYCO_OK; }
    if (name && !strcmp(name, "base")) { *out = LYCO_OUTPUT_BASE; return LYCO_OK; }
    return lyco_fail(LYCO_ERR_INVALID, "output mode is \"%s\"; expected one of: promote, base", name ? name : "(null)");
}

lyco_status lyco_fp32_mode_parse(const char *name, lyco_fp32_mode *out) {
    if (name && !strcmp(name, "fp32")) { *out = LYCO_FP32_FULL; return LYCO_OK; }
    if (name && !strcmp(name, "tf32")) { *out = LYCO_FP32_TF32; return LYCO_OK; }
    return lyco_fail(LYCO_ERR_INVALID, "fp32 precision mode is \"%s\"; expected one of: fp32, tf32", name ? name : "(null)");
}
