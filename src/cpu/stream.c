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

/* One row for the kernels: n elements of W, the source and the output (pointers at column 0),
   in runs of `period` columns from column 0. */
typedef enum { SEG_X_W, SEG_X_MEM, SEG_X_ONE } seg_x;
typedef enum { SEG_S_NONE, SEG_S_RUN, SEG_S_LANES } seg_scale;
typedef enum { SEG_WEIGHT, SEG_UNMERGE, SEG_DELTA, SEG_ZERO } seg_op;
typedef struct {
    const char *w;          /* W (read when the mode or the source needs it), else NULL */
    lyco_dtype wdt;
    seg_x xk;               /* x = W, x from memory (ROW, CYCLE), or the one value xb */
    const char *x;          /* SEG_X_MEM */
    lyco_dtype xdt, xT;     /* its dtype and the dtype it is rounded through */
    int64_t xes;            /* its element size in bytes */
    bool x_cycles;          /* x restarts at every run (CYCLE) instead of running along the row */
    float xb;               /* the one value of x (CYCLE with period 1, a dropped module) */
    seg_scale s_kind;       /* none, one per run (sr[r]) or one per element (sv[j]) */
    const float *sr, *sv;
    int64_t period;
    char *out;
    lyco_dtype odt;
    lyco_dtype T;           /* the compute dtype W is rounded through */
    seg_op op;
    float ms;               /* m·σs */
} seg_t;

/* ---- the segment kernel, once per ISA (stream_kern.h, isa.h) ---- */
#define ISA_EACH_HEADER "stream_kern.h"
#define ISA_EACH_V4 1
#include "isa_each.h"

/* The portable copy: 256-float chunks of the row through the stack, the conversions view.c's, δ
   run piece by run piece, one plain loop per step (each vectorises for the baseline ISA). */
#define CHUNK 256
static void delta_piece(seg_scale sk, const float *restrict x, float s, const float *restrict sv, int64_t len, float *restrict d) {
    if (sk == SEG_S_NONE)
        for (int64_t k = 0; k < len; k++) d[k] = x[k];
    else if (sk == SEG_S_RUN)
        for (int64_t k = 0; k < len; k++) d[k] = x[k] * s;
    else
        for (int64_t k = 0; k < len; k++) d[k] = x[k] * sv[k];
}

static void combine_chunk(seg_op op, float ms, const float *restrict w, const float *restrict d, int64_t len, float *restrict o) {
    switch (op) {
    case SEG_WEIGHT: for (int64_t k = 0; k < len; k++) o[k] = w[k] + ms * d[k]; break;
    case SEG_UNMERGE: for (int64_t k = 0; k < len; k++) o[k] = w[k] - ms * d[k]; break;
    case SEG_DELTA: for (int64_t k = 0; k < len; k++) o[k] = ms * d[k]; break;
    default: for (int64_t k = 0; k < len; k++) o[k] = 0.0f; break;
    }
}

static void seg_base(const seg_t *g, int64_t n) {
    float w[CHUNK] = {0}, x[CHUNK], d[CHUNK], o[CHUNK];
    int64_t wes = (int64_t)lyco_dtype_size(g->wdt), oes = (int64_t)lyco_dtype_size(g->odt), P = g->period;
    for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {
        int64_t len = n - c0 < CHUNK ? n - c0 : CHUNK;
        if (g->w) cpu_cvt_in(g->w + c0 * wes, g->wdt, g->T, w, len);
        const float *xs = w;   /* the chunk's x (SEG_X_W) */
        if (g->xk == SEG_X_ONE) {
            for (int64_t k = 0; k < len; k++) x[k] = g->xb;
            xs = x;
        } else if (g->xk == SEG_X_MEM && !g->x_cycles) {
            cpu_cvt_in(g->x + c0 * g->xes, g->xdt, g->xT, x, len);
            xs = x;
        }
        for (int64_t q = 0, r = c0 / P; q < len; r++) {   /* the pieces of runs in the chunk */
            int64_t end = (r + 1) * P - c0 < len ? (r + 1) * P - c0 : len;
            const float *xp = g->x_cycles ? (const float *)g->x + (c0 + q - r * P) : xs + q;
            delta_piece(g->s_kind, xp, g->s_kind == SEG_S_RUN ? g->sr[r] : 0.0f, g->s_kind == SEG_S_LANES ? g->sv + c0 + q : NULL,
                        end - q, d + q);
            q = end;
        }
        combine_chunk(g->op, g->ms, w, d, len, o);
        cpu_cvt_out(o, g->out + c0 * oes, g->odt, len);
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

/* The span of a row (stream.h) in the kernels' terms: runs only where the source or the scale
   changes per run. */
static void span_to_seg(const cpu_span *sp, int64_t IK, seg_t *g) {
    int64_t P = sp->period;
    g->xk = sp->x == CPU_SPAN_W ? SEG_X_W : SEG_X_ONE;
    g->x = NULL;
    g->x_cycles = false;
    g->xdt = g->xT = LYCO_F32;
    if (sp->x == CPU_SPAN_ROW) {
        g->xk = SEG_X_MEM;
        g->x = sp->src;
        g->xdt = sp->src_dt;
        g->xT = sp->src_T;
    } else if (sp->x == CPU_SPAN_CYCLE) {
        if (P == 1) g->xb = sp->vec[0];
        else {
            g->xk = SEG_X_MEM;
            g->x = (const char *)sp->vec;
            g->x_cycles = true;
        }
    }
    g->xes = (int64_t)lyco_dtype_size(g->xdt);
    bool runs = g->x_cycles || (sp->s && P > 1);
    g->period = runs ? P : IK;
    g->s_kind = !sp->s ? SEG_S_NONE : runs ? SEG_S_RUN : SEG_S_LANES;
    g->sr = g->sv = sp->s;
}

/* What every row of a call shares: the views of W and the output (rows × cols), whether rows are
   staged, and the row's kernel arguments without the span. */
typedef struct {
    cpu_view wv, ov;
    int64_t cols;
    bool need_w, stage_w, stage_o;
    seg_t g0;
    seg_fn seg;
} stream_t;

static void stream_init(const lyco_call *c, const cpu_delta *d, int split, stream_t *st) {
    lyco_merge_mode mode = c->merge->mode;
    const DLTensor *Wt = c->merge->weight;
    memset(st, 0, sizeof *st);
    st->need_w = Wt && (mode != LYCO_MERGE_DELTA || d->needs_w);
    if (Wt) cpu_view_init(&st->wv, Wt, split);
    cpu_view_init(&st->ov, c->out, split);
    st->cols = st->ov.cols;
    st->stage_w = st->need_w && !st->wv.fast;
    st->stage_o = !st->ov.fast;
    st->g0 = (seg_t){.T = c->dt.compute, .ms = (float)c->m * cpu_merge_sigma(c, d),
                     .op = mode == LYCO_MERGE_DELTA ? SEG_DELTA : !st->need_w ? SEG_ZERO
                           : mode == LYCO_MERGE_UNMERGE ? SEG_UNMERGE : SEG_WEIGHT,
                     .wdt = st->stage_w || !st->need_w ? LYCO_F32 : st->wv.dt, .odt = st->stage_o ? LYCO_F32 : st->ov.dt};
    st->seg = seg_for_isa();
}

static char *row_at(const cpu_view *v, int64_t o) { return v->base + o * v->rs * (int64_t)v->es; }

/* Row o of the output from its span; wst / ost: cols floats each where W / the output are staged.
   A dropped module's δ is 0; x = W without W (g.w NULL) reads zeros, as the row-block driver's. */
static void stream_row(const stream_t *st, const lyco_call *c, int64_t o, const cpu_span *sp, float *wst, float *ost) {
    static const float zero = 0.0f;
    const cpu_span dropped = {.x = CPU_SPAN_CYCLE, .vec = &zero, .period = 1};
    seg_t g = st->g0;
    if (st->need_w) {
        if (st->stage_w) cpu_load(&st->wv, o, 0, st->cols, g.T, wst);
        g.w = st->stage_w ? (const char *)wst : row_at(&st->wv, o);
    }
    g.out = st->stage_o ? (char *)ost : row_at(&st->ov, o);
    span_to_seg(c->dropped ? &dropped : sp, st->cols, &g);
    st->seg(&g, st->cols);
    if (st->stage_o) cpu_store(&st->ov, o, 0, st->cols, ost);
}

lyco_status cpu_merge_fwd_stream(const lyco_call *c, const cpu_delta *d, cpu_span_fn span) {
    if (c->dims.dora && !c->dropped) return cpu_merge_fwd(c, d);
    stream_t st;
    stream_init(c, d, 1, &st);
    int64_t O = c->dims.O, IK = st.cols;
    if (O > 0 && IK > 0) {
        int nt = cpu_threads();
        int64_t per = IK * (1 + st.stage_w + st.stage_o) + 16;
        float *scratch = malloc(sizeof(float) * (size_t)(per * nt));
        if (!scratch) return lyco_fail(LYCO_ERR_NOMEM, "cpu merge_fwd: out of memory for %lld-column rows", (long long)IK);
#pragma omp parallel
        {
            float *sc = scratch + per * cpu_thread_id(), *wst = sc + IK, *ost = wst + (st.stage_w ? IK : 0);
#pragma omp for schedule(static)
            for (int64_t o = 0; o < O; o++) {
                cpu_span sp = {.period = 1};
                if (!c->dropped) span(d, o, sc, &sp);
                stream_row(&st, c, o, &sp, wst, ost);
            }
        }
        free(scratch);
    }
    return c->out_bias ? cpu_merge_bias(c, d) : LYCO_OK;
}

lyco_status cpu_merge_fwd_stream_flat(const lyco_call *c, const cpu_delta *d, const cpu_span *sp) {
    stream_t st;
    stream_init(c, d, 0, &st);
    int64_t n = st.cols;
    if (n > 0) {
        float *stage = NULL;
        if (st.stage_w || st.stage_o) {
            stage = malloc(sizeof(float) * (size_t)(2 * n));
            if (!stage) return lyco_fail(LYCO_ERR_NOMEM, "cpu merge_fwd: out of memory for %lld values", (long long)n);
        }
        stream_row(&st, c, 0, sp, stage, stage ? stage + n : NULL);
        free(stage);
    }
    return c->out_bias ? cpu_merge_bias(c, d) : LYCO_OK;
}
