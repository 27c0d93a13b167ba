/*
 * stream.h — the streaming form of the shared merge driver (stream.c) for generators whose ΔW̄ is
 * elementwise in W or read from memory (IA3, Full, LoKr, Norm): the merge is memory-bound, so it
 * is one pass over W and the output, each element loaded, combined and stored in registers.
 *
 * A generator describes ΔW̄'s row o (s and masks applied; m, σs not) by a span: the row is cut
 * into runs of `period` columns from column 0 (period = IK: one run) and
 *     ΔW̄[o, j] = x_j · s[⌊j / period⌋]        (x_j alone when s is NULL)
 * where x_j is, by `x`:
 *     CPU_SPAN_W      RN_T(W[o, j]), W's element rounded to the compute dtype T   (IA3)
 *     CPU_SPAN_ROW    RN_T(src[j]), a compact row of another tensor in its dtype  (Full's diff;
 *                     Norm's fp32 w_norm with src_T = fp32: no rounding)
 *     CPU_SPAN_CYCLE  vec[j mod period], fp32 values already in T                 (LoKr's W2 row)
 * (period 1 with CYCLE: one value vec[0] for the whole row; with s: s elementwise). A generator
 * whose source is not compact loads it into `scratch` (IK floats of the calling thread, also
 * free for per-run scales) and describes it as CYCLE with period IK.
 *
 * cpu_merge_fwd_stream: W'' (any mode, module dropout, the bias hooks) as cpu_merge_fwd, bitwise
 * the same values (the same per-element expressions: x·s, then W + (m·σs)·δ, never contracted);
 * DoRA (which needs whole rows or columns) goes to cpu_merge_fwd. One parallel region, static over
 * rows (each output element computed by one thread: independent of the thread count).
 * Extra memory: IK floats per thread; the bias path O floats twice.
 */
#ifndef LYCO_CPU_STREAM_H
#define LYCO_CPU_STREAM_H

#include "cpu.h"

typedef enum { CPU_SPAN_W, CPU_SPAN_ROW, CPU_SPAN_CYCLE } cpu_span_x;

typedef struct {
    cpu_span_x x;
    const void *src;      /* ROW: element 0 of the row */
    lyco_dtype src_dt;    /* ROW: its dtype */
    lyco_dtype src_T;     /* ROW: the dtype it is rounded through (T; fp32 for values already in T) */
    const float *vec;     /* CYCLE: `period` values */
    const float *s;       /* one scale per run, or NULL */
    int64_t period;       /* ≥ 1 */
} cpu_span;

typedef void (*cpu_span_fn)(const cpu_delta *d, int64_t o, float *scratch, cpu_span *sp);

lyco_status cpu_merge_fwd_stream(const lyco_call *c, const cpu_delta *d, cpu_span_fn span);
/* The same for a merge whose W is a vector (Norm's γ, C × 1): W and the output viewed as one row of
   all their elements, described by one span (its per-element sources and scales indexed by the
   element), on the calling thread — a row, and a span call, per element was most of the call. */
lyco_status cpu_merge_fwd_stream_flat(const lyco_call *c, const cpu_delta *d, const cpu_span *sp);

/* merge.c's pieces the streaming driver shares: σs as the merge applies it (1 when the algorithm
   has none or the upstream merge scale replaces it), the columns of ΔW̄ (I/g·K; 1 for Norm), and
   the bias merge b'' = b + m·Δb */
float cpu_merge_sigma(const lyco_call *c, const cpu_delta *d);
int64_t cpu_merge_cols(const lyco_call *c);
lyco_status cpu_merge_bias(const lyco_call *c, const cpu_delta *d);

#endif
