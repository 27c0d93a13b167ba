/*
 * stream.c — the streaming merge forward (stream.h) of the elementwise generators (IA3, Full,
 * LoKr, Norm): W'' = W + m·σs·ΔW̄ (WEIGHT), m·σs·ΔW̄ (DELTA), W − m·σs·ΔW̄ (UNMERGE) in one
 * pass over W and the output.
 *
 * Per row o, the generator's span (stream.h) says what ΔW̄[o, :] is; the row is cut into segments
 * over which the source and the scale have one form (the whole row, or one run of `period`
 * columns), and each segment is one call of the segment kernel: W loaded and rounded to the
 * compute dtype, δ = x·s, the mode's combine and the output's rounding, one vector at a time in
 * registers (stream_kern.h; x86-64-v4 16 lanes, x86-64-v3 8 lanes), or on other CPUs
 * (LYCO_CPU_ISA=base) through 256-float stack chunks with view.c's conversions. The expressions
 * are the row-block driver's (merge.c's combine(): `w + m·σs·δ`, m·σs one float product) with
 * fp-contract off in every copy, so every ISA level gives the same bits. Rows of a strided W or
 * output are staged through fp32 row buffers (cpu_load / cpu_store); a compact row is read and
 * written in place.
 *
 * Threads: static over rows, each output element computed by one thread (results independent of
 * the thread count). Extra memory: per thread IK floats of span scratch, and 2·IK more when W or
 * the output is strided; the bias path O floats twice (merge.c).
 */
#pragma GCC optimize("fp-contract=off")

#include <stdlib.h>

#include "cpu.h"
#include "isa.h"
#include "stream.h"

/* One segment of a row for the kernels: n elements from column j0 of W, the source and the
   output (pointers already at j0). */
typedef enum { SEG_S_NONE, SEG_S_ONE, SEG_S_LANES } seg_scale;
typedef enum { SEG_WEIGHT, SEG_UNMERGE, SEG_DELTA, SEG_ZERO } seg_op;
typedef struct {
    const char *w;          /* W (read when the mode or the source needs it), else NULL */
    lyco_dtype wdt;
    int64_t wes;            /* element sizes in bytes */
    const char *x;          /* the source from memory (ROW, CYCLE), else NULL: x = W or xb */
    lyco_dtype xdt, xT;     /* its dtype and the dtype it is rounded through */
    int64_t xes;
    bool x_is_w;
    float xb;               /* the one value of x (CYCLE with period 1, a dropped module) */
    seg_scale s_kind;
    float sb;               /* SEG_S_ONE */
    const float *sv;        /* SEG_S_LANES: one scale per element */
    char *out;
    lyco_dtype odt;
    int64_t oes;
    lyco_dtype T;           /* the compute dtype W is rounded through */
    seg_op op;
    float ms;               /* m·σs */
} seg_t;

/* ---- the segment kernel, once per ISA (stream_kern.h, isa.h) ---- */
#ifdef CPU_V3
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v4")
#define KN(name) name##_v4
#define CK_V4 1
#include "stream_kern.h"
#undef CK_V4
#undef KN
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v3")
#define KN(name) name##_v3
#define CK_V3 1
#include "stream_kern.h"
#undef CK_V3
#undef KN
#pragma GCC pop_options
#endif

/* The portable copy: 256-float chunks through the stack, the conversions view.c's. */
#define CHUNK 256
static void seg_base(const seg_t *g, int64_t n) {
    float w[CHUNK], x[CHUNK], o[CHUNK];
    for (int64_t j0 = 0; j0 < n; j0 += CHUNK) {
        int64_t len = n - j0 < CHUNK ? n - j0 : CHUNK;
        if (g->w) cpu_cvt_in(g->w + j0 * g->wes, g->wdt, g->T, w, len);
        if (g->x) cpu_cvt_in(g->x + j0 * g->xes, g->xdt, g->xT, x, len);
        for (int64_t k = 0; k < len; k++) {
            float wk = g->w ? w[k] : 0.0f, xk = g->x_is_w ? wk : g->x ? x[k] : g->xb;
            float d = g->s_kind == SEG_S_NONE ? xk : xk * (g->s_kind == SEG_S_ONE ? g->sb : g->sv[j0 + k]);
            o[k] = g->op == SEG_WEIGHT ? wk + g->ms * d : g->op == SEG_UNMERGE ? wk - g->ms * d : g->op == SEG_DELTA ? g->ms * d : 0.0f;
        }
        cpu_cvt_out(o, g->out + j0 * g->oes, g->odt, len);
    }
}

typedef void (*seg_fn)(const seg_t *g, int64_t n);

static seg_fn seg_for_isa(void) {
#ifdef CPU_V3
    int isa = cpu_isa();
    if (isa >= 2) return seg_v4;
    if (isa == 1) return seg_v3;
#endif
    return seg_base;
}

/* Row o as segments: g holds W, the output and the mode (pointers at column 0); sp the span. */
static void stream_row(seg_fn seg, seg_t g, const cpu_span *sp, int64_t IK) {
    int64_t P = sp->period;
    g.x_is_w = sp->x == CPU_SPAN_W;
    g.x = NULL;
    if (sp->x == CPU_SPAN_ROW) {
        g.x = sp->src;
        g.xdt = sp->src_dt;
        g.xT = g.T;
    } else if (sp->x == CPU_SPAN_CYCLE) {
        if (P == 1) g.xb = sp->vec[0];
        else {
            g.x = (const char *)sp->vec;
            g.xdt = g.xT = LYCO_F32;
        }
    }
    g.xes = (int64_t)lyco_dtype_size(g.xdt);
    bool runs = sp->x == CPU_SPAN_CYCLE ? P > 1 : sp->s && P > 1;   /* a source or a scale per run */
    if (!runs) {   /* one segment: no scale, scales per element, or a constant source */
        g.s_kind = !sp->s ? SEG_S_NONE : SEG_S_LANES;
        g.sv = sp->s;
        seg(&g, IK);
        return;
    }
    g.s_kind = sp->s ? SEG_S_ONE : SEG_S_NONE;
    const char *w0 = g.w;
    char *o0 = g.out;
    for (int64_t r = 0, j = 0; j < IK; r++, j += P) {
        if (sp->s) g.sb = sp->s[r];
        if (w0) g.w = w0 + j * g.wes;
        if (sp->x == CPU_SPAN_ROW) g.x = (const char *)sp->src + j * g.xes;
        g.out = o0 + j * g.oes;
        seg(&g, IK - j < P ? IK - j : P);
    }
}

static char *row_at(const cpu_view *v, int64_t o) { return v->base + o * v->rs * (int64_t)v->es; }

lyco_status cpu_merge_fwd_stream(const lyco_call *c, const cpu_delta *d, cpu_span_fn span) {
    if (c->dims.dora && !c->dropped) return cpu_merge_fwd(c, d);
    int64_t O = c->dims.O, IK = cpu_merge_cols(c);
    lyco_merge_mode mode = c->merge->mode;
    const DLTensor *Wt = c->merge->weight;
    bool need_w = Wt && (mode != LYCO_MERGE_DELTA || d->needs_w);
    cpu_view wv, ov;
    if (Wt) cpu_view_init(&wv, Wt, 1);
    cpu_view_init(&ov, c->out, 1);
    bool stage_w = need_w && !wv.fast, stage_o = !ov.fast;
    seg_t g0 = {.T = c->dt.compute, .ms = (float)c->m * cpu_merge_sigma(c, d),
                .op = mode == LYCO_MERGE_DELTA ? SEG_DELTA : !need_w ? SEG_ZERO
                      : mode == LYCO_MERGE_UNMERGE ? SEG_UNMERGE : SEG_WEIGHT};
    g0.wdt = stage_w || !need_w ? LYCO_F32 : wv.dt;
    g0.odt = stage_o ? LYCO_F32 : ov.dt;
    g0.wes = (int64_t)lyco_dtype_size(g0.wdt);
    g0.oes = (int64_t)lyco_dtype_size(g0.odt);
    if (O > 0 && IK > 0) {
        int nt = cpu_threads();
        int64_t per = IK * (1 + stage_w + stage_o) + 16;
        float *scratch = malloc(sizeof(float) * (size_t)(per * nt));
        if (!scratch) return lyco_fail(LYCO_ERR_NOMEM, "cpu merge_fwd: out of memory for %lld-column rows", (long long)IK);
        seg_fn seg = seg_for_isa();
        static const float zero = 0.0f;
#pragma omp parallel
        {
            float *sc = scratch + per * cpu_thread_id(), *wst = sc + IK, *ost = wst + (stage_w ? IK : 0);
#pragma omp for schedule(static)
            for (int64_t o = 0; o < O; o++) {
                cpu_span sp;   /* x = W without W (g.w NULL) reads zeros, as the row-block driver's */
                if (c->dropped) sp = (cpu_span){.x = CPU_SPAN_CYCLE, .vec = &zero, .period = 1};   /* δ = 0 */
                else span(d, o, sc, &sp);
                seg_t g = g0;
                if (need_w) {
                    if (stage_w) cpu_load(&wv, o, 0, IK, g.T, wst);
                    g.w = stage_w ? (const char *)wst : row_at(&wv, o);
                }
                g.out = stage_o ? (char *)ost : row_at(&ov, o);
                stream_row(seg, g, &sp, IK);
                if (stage_o) cpu_store(&ov, o, 0, IK, ost);
            }
        }
        free(scratch);
    }
    return c->out_bias ? cpu_merge_bias(c, d) : LYCO_OK;
}
