/*
 * test_overlap.c — the aliasing primitives behind LYCO_ERR_ALIAS (src/core/tensor.c:
 * lyco_tensors_overlap, lyco_tensors_same_view) at their boundaries, where an off-by-one hides:
 *
 *   (a) two views sharing exactly one element overlap, and views that merely touch do not, for
 *       contiguous fp32 views, fp16 views placed by byte_offset, strided views (the extreme
 *       element of the strided box), column-major 2-D views and a negative stride — in both
 *       argument orders;
 *   (b) an empty view overlaps nothing; a CUDA view never overlaps a host one, pinned host memory
 *       (kDLCUDAHost) is the host address space;
 *   (c) same_view: the same descriptor contents are the same view, a different stride on a dim of
 *       size > 1 is not, a different stride on a size-1 dim does not matter;
 *   (d) through the public API: a bypass output y whose last element is the first element of x
 *       is rejected with LYCO_ERR_ALIAS; y ending right before x is accepted.
 *
 * Prints one line per check and ends with "N passed, M failed"; exits non-zero on failure.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

static float buf[64];
static uint16_t buf16[64];

typedef struct {
    DLTensor t;
    int64_t shape[2], strides[2];
} view;

static void mk(view *v, void *data, lyco_dtype d, int ndim, int64_t s0, int64_t s1, const int64_t *strides) {
    memset(v, 0, sizeof *v);
    v->shape[0] = s0;
    v->shape[1] = s1;
    v->t = lyco_host_tensor(data, d, ndim, v->shape);
    if (strides) {
        v->strides[0] = strides[0];
        v->strides[1] = ndim > 1 ? strides[1] : 0;
        v->t.strides = v->strides;
    }
}

static void expect_overlap(const char *what, view *a, view *b, bool want) {
    bool ab = lyco_tensors_overlap(&a->t, &b->t), ba = lyco_tensors_overlap(&b->t, &a->t);
    report(ab == want && ba == want, "%s: overlap %d/%d (both orders), expected %d", what, ab, ba, want);
}

static void boundaries(void) {
    view a, b;
    /* contiguous fp32: [0, 8) against [7, 15) and [8, 16) */
    mk(&a, buf, LYCO_F32, 1, 8, 0, NULL);
    mk(&b, buf + 7, LYCO_F32, 1, 8, 0, NULL);
    expect_overlap("fp32 [0,8) vs [7,15): one shared element", &a, &b, true);
    mk(&b, buf + 8, LYCO_F32, 1, 8, 0, NULL);
    expect_overlap("fp32 [0,8) vs [8,16): touching, no shared element", &a, &b, false);

    /* fp16 views placed by byte_offset on the same pointer */
    mk(&a, buf16, LYCO_F16, 1, 8, 0, NULL);
    mk(&b, buf16, LYCO_F16, 1, 4, 0, NULL);
    b.t.byte_offset = 14;
    expect_overlap("fp16 [0,8) vs byte_offset 14 (element 7)", &a, &b, true);
    b.t.byte_offset = 16;
    expect_overlap("fp16 [0,8) vs byte_offset 16 (element 8)", &a, &b, false);

    /* strided: elements 0, 2, 4, 6 (the box spans [0, 7)) */
    int64_t s2[1] = {2};
    mk(&a, buf, LYCO_F32, 1, 4, 0, s2);
    mk(&b, buf + 6, LYCO_F32, 1, 1, 0, NULL);
    expect_overlap("stride-2 view {0,2,4,6} vs element 6 (its last)", &a, &b, true);
    mk(&b, buf + 7, LYCO_F32, 1, 1, 0, NULL);
    expect_overlap("stride-2 view {0,2,4,6} vs element 7 (past its box)", &a, &b, false);

    /* column-major 3x4: elements 0..11, the last in memory is (2, 3) */
    int64_t cm[2] = {1, 3};
    mk(&a, buf, LYCO_F32, 2, 3, 4, cm);
    mk(&b, buf + 11, LYCO_F32, 2, 1, 2, NULL);
    expect_overlap("column-major 3x4 vs a view starting at its last element", &a, &b, true);
    mk(&b, buf + 12, LYCO_F32, 2, 1, 2, NULL);
    expect_overlap("column-major 3x4 vs a view starting right after it", &a, &b, false);

    /* negative stride: data at element 10, stride -1, 4 elements = {10, 9, 8, 7} */
    int64_t neg[1] = {-1};
    mk(&a, buf + 10, LYCO_F32, 1, 4, 0, neg);
    mk(&b, buf + 7, LYCO_F32, 1, 1, 0, NULL);
    expect_overlap("stride -1 view {10,9,8,7} vs element 7 (its last)", &a, &b, true);
    mk(&b, buf + 6, LYCO_F32, 1, 1, 0, NULL);
    expect_overlap("stride -1 view {10,9,8,7} vs element 6", &a, &b, false);
    mk(&b, buf + 11, LYCO_F32, 1, 1, 0, NULL);
    expect_overlap("stride -1 view {10,9,8,7} vs element 11", &a, &b, false);

    /* empty views and devices */
    mk(&a, buf, LYCO_F32, 1, 0, 0, NULL);
    mk(&b, buf, LYCO_F32, 1, 8, 0, NULL);
    expect_overlap("an empty view on the same pointer", &a, &b, false);
    mk(&a, buf, LYCO_F32, 1, 8, 0, NULL);
    a.t.device.device_type = kDLCUDA;
    expect_overlap("a CUDA view vs a host view on the same address", &a, &b, false);
    a.t.device.device_type = kDLCUDAHost;
    expect_overlap("a pinned-host view vs a host view on the same address", &a, &b, true);
}

static void same_view(void) {
    view a, b;
    int64_t st[2] = {4, 1}, other[2] = {1, 3};
    mk(&a, buf, LYCO_F32, 2, 3, 4, NULL);
    mk(&b, buf, LYCO_F32, 2, 3, 4, st);
    report(lyco_tensors_same_view(&a.t, &b.t), "same_view: compact view vs the same with explicit row-major strides");
    mk(&b, buf, LYCO_F32, 2, 3, 4, other);
    report(!lyco_tensors_same_view(&a.t, &b.t), "same_view: row-major vs column-major on the same memory are different views");
    int64_t one[2] = {99, 1};
    mk(&a, buf, LYCO_F32, 2, 1, 4, NULL);
    mk(&b, buf, LYCO_F32, 2, 1, 4, one);
    report(lyco_tensors_same_view(&a.t, &b.t), "same_view: a different stride on a size-1 dim does not matter");
    mk(&a, buf, LYCO_F32, 1, 4, 0, NULL);
    mk(&b, buf, LYCO_F32, 1, 4, 0, NULL);
    b.t.byte_offset = 4;
    report(!lyco_tensors_same_view(&a.t, &b.t), "same_view: a view shifted by one element is not the same view");
}

/* LoCon on a linear 4 -> 3, rank 2, 2 tokens; y and x carved from one buffer */
static void api_one_element(void) {
    static float mem[32], down[2 * 4], up[3 * 2];
    for (int i = 0; i < 32; i++) mem[i] = 0.125f * (float)(i % 5) - 0.25f;
    for (int i = 0; i < 8; i++) down[i] = 0.25f * (float)(i % 3) - 0.25f;
    for (int i = 0; i < 6; i++) up[i] = 0.5f * (float)(i % 4) - 0.5f;
    int64_t sx[2] = {2, 4}, sy[2] = {2, 3}, sd[2] = {2, 4}, su[2] = {3, 2};
    DLTensor td = lyco_host_tensor(down, LYCO_F32, 2, sd), tu = lyco_host_tensor(up, LYCO_F32, 2, su);
    lyco_adapter a;
    lyco_adapter_init(&a, LYCO_ALGO_LOCON);
    lyco_layer_linear(&a.layer, 3, 4);
    a.tensor[LYCO_LORA_DOWN] = &td;
    a.tensor[LYCO_LORA_UP] = &tu;
    lyco_ctx *ctx = NULL;
    if (lyco_ctx_create(&ctx) != LYCO_OK) {
        report(false, "lyco_ctx_create: %s", lyco_last_error());
        return;
    }
    lyco_ctx_set_backend(ctx, LYCO_BACKEND_REF);
    /* y = mem[0, 6), x = mem[5, 13): y's last element is x's first */
    DLTensor ty = lyco_host_tensor(mem, LYCO_F32, 2, sy), tx = lyco_host_tensor(mem + 5, LYCO_F32, 2, sx);
    lyco_bypass_args in = {&tx, NULL, NULL, 0};
    lyco_status st = lyco_bypass_fwd(ctx, &ty, &a, &in);
    report(st == LYCO_ERR_ALIAS, "bypass_fwd with y's last element on x's first: %s (expected LYCO_ERR_ALIAS)%s%s",
           lyco_status_name(st), st ? ": " : "", st ? lyco_last_error() : "");
    /* x = mem[6, 14): y ends right before x */
    tx = lyco_host_tensor(mem + 6, LYCO_F32, 2, sx);
    st = lyco_bypass_fwd(ctx, &ty, &a, &in);
    report(st == LYCO_OK, "bypass_fwd with y ending right before x: %s (expected LYCO_OK)%s%s", lyco_status_name(st),
           st ? ": " : "", st ? lyco_last_error() : "");
    lyco_ctx_destroy(ctx);
}

int main(void) {
    boundaries();
    same_view();
    api_one_element();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
