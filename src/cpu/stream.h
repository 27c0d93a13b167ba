/*
 * stream.h — the streaming form of the shared merge driver (merge.c) for generators whose ΔW̄ is
 * elementwise in W or read from memory (IA3, Full, LoKr, Norm): the merge is memory-bound, so it
 * is one pass over W and the output in L1-sized pieces, with no row buffers in L2.
 *
 * A span generator writes out[0..n) = ΔW̄[o, j0 .. j0+n) — exactly the values the generator's
 * rows() gives for those elements (s and masks applied; m, σs not) — from Wseg = W[o, j0 .. j0+n)
 * rounded to the compute dtype (valid when the delta's needs_w is set, zeros otherwise).
 *
 * cpu_merge_fwd_stream: W'' (any mode, module dropout, the bias hooks) as cpu_merge_fwd, bitwise
 * the same values (the same per-element expressions); DoRA (which needs whole rows or columns)
 * goes to cpu_merge_fwd. One parallel region, static over fixed blocks of rows (each output
 * element computed by one thread in a fixed order: independent of the thread count).
 * Extra memory: 2 pieces of 1024 floats on each thread's stack; the bias path O floats twice.
 */
#ifndef LYCO_CPU_STREAM_H
#define LYCO_CPU_STREAM_H

#include "cpu.h"

typedef void (*cpu_span_fn)(const cpu_delta *d, int64_t o, int64_t j0, int64_t n, const float *Wseg, float *out);

lyco_status cpu_merge_fwd_stream(const lyco_call *c, const cpu_delta *d, cpu_span_fn span);

#endif
