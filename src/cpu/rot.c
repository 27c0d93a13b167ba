/*
 * rot.c — the block products of the OFT family (rot.h): the ISA dispatch of rot_kern.h's copies
 * (isa.h: x86-64-v4, x86-64-v3, portable). fp-contract is off in every copy, so the epilogue's
 * products and sums round separately (the explicit FMAs of the sums stay): every copy gives the
 * bits of dense.c's GEMM followed by the fp32 epilogue that diag_oft.c and boft.c ran before.
 * The tile transposes of the linear bypass (cpu_rot_tr_in / _out) are dispatched the same way.
 * No state, no memory.
 */
#pragma GCC optimize("fp-contract=off")

#include "rot.h"

#include "isa.h"

#define CK_AI static inline __attribute__((always_inline))
#define ISA_EACH_HEADER "rot_kern.h"
#define ISA_EACH_V4 1
#define ISA_EACH_BASE 1
#include "isa_each.h"

void cpu_rot_rows(const cpu_rot *r, int64_t w) {
    if (w <= 0 || r->bs <= 0) return;
    CPU_DISPATCH(rot_rows, r, w);
}

bool cpu_rot_gn(int64_t bs, const float *const *a, const float *const *b, int64_t w, float *C) {
#ifdef CPU_V4
    if (cpu_isa() >= 2 && bs % 2 == 0 && bs >= 2 && bs <= 12) {
        rot_gn_v4(bs, a, b, w, C);
        return true;
    }
#endif
    (void)bs, (void)a, (void)b, (void)w, (void)C;
    return false;
}

int64_t cpu_rot_rows_max(void) {
#ifdef CPU_V4
    if (cpu_isa() >= 2) return rot_rows_max_v4();
#endif
#ifdef CPU_V3
    if (cpu_have_v3()) return rot_rows_max_v3();
#endif
    return rot_rows_max_base();
}

void cpu_rot_tokens(const cpu_rot_tok *q, int64_t w) {
    if (w <= 0 || q->bs <= 0) return;
    CPU_DISPATCH(rot_tokens, q, w);
}

void cpu_rot_tr_in(const char *src, int64_t ld, lyco_dtype sdt, lyco_dtype T, int64_t nt, int64_t nc, float *X, int64_t ldx) {
    if (nt <= 0 || nc <= 0) return;
    CPU_DISPATCH(rot_tr_in, src, ld, sdt, T, nt, nc, X, ldx);
}

void cpu_rot_tr_out(const float *X, int64_t ldx, int64_t nt, int64_t nc, char *dst, int64_t ld, lyco_dtype odt) {
    if (nt <= 0 || nc <= 0) return;
    CPU_DISPATCH(rot_tr_out, X, ldx, nt, nc, dst, ld, odt);
}
