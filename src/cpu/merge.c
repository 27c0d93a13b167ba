/*
 * merge.c — the shared merge driver of the fused CPU backend, for every additive algorithm.
 *
 * An algorithm supplies a generator of ΔW̄ rows (cpu_delta.rows: s and masks applied) and their
 * backward. The driver owns what is common (ALGORITHMS.md §1.3, §1.6):
 *   W'' = W + m·σs·ΔW            WEIGHT: W'', DELTA: W'' − W, UNMERGE: W − (W'' − W)
 *   DoRA: V = W + σs·ΔW, n = ‖V‖_axis + ε, c = d/n, c ← m(c−1)+1 (m ≠ 1), W'' = V⊙c;
 *         backward: ∂L/∂V = RN_CT(g·c − γ·V) (rounded as eager stores it, NUMERICS.md §1.6; with
 *         cpu_delta.g_exact — G an fp32 intermediate, DoRA in bypass — neither G nor ∂L/∂V rounded)
 * Rows are produced in blocks of RB rows by the thread that owns them and consumed in cache
 * (ΔW is never written whole unless it is the requested output); when the generator does not read
 * W, W's rows are loaded one at a time after the product, next to their combine (L1-hot), and the
 * plain modes combine in place in the Δ block. DoRA per output row is one pass;
 * DoRA per input channel needs the column norms first: a norm pass, then the output pass
 * (ΔW rows regenerated, never stored). Everything accumulates in fp32; each output is rounded once.
 * DoRA sums: a row's ‖V‖² and ⟨G,V⟩ in double over 8 lanes + a fixed tree (row_sums); the column
 * pass's per-channel sums in COL_GROUPS fixed runs of row blocks, combined in run order. The DoRA
 * row loops and combine() also have AVX2 clones without FMA (NOFMA_HOT): the same values as the
 * baseline build; the row sums' lanes on AVX2 CPUs are intrinsics (row_lanes_avx2, target "avx2"
 * without FMA: the lanes stay in registers; the same operations per lane, bitwise the same).
 * DoRA per output row forms V = W + σs·ΔW once per row, in the row sums (stored to the output row
 * forward, to a per-thread V row backward); the row expressions read it (bitwise the same).
 * Backward: W's rows likewise one at a time next to their use when the generator does not read
 * them (DoRA: the W block was a third 32-row scratch block next to Δ and G, past L2 with P).
 * DoRA per output row on rows of contiguous columns (x86-64-v4 / v3, no σs gradient): dora_kern.h
 * instead — W and G read straight from the tensors, the sums of 4 rows at once (one row's add chains
 * are latency-bound), the output or gradient row in one pass, the next rows prefetched; the same
 * operations in the same order (bitwise the row loops' results).
 * A generator may ask for larger blocks (cpu_delta.rows_bwd_block) and for `groups`
 * fixed runs of blocks (one thread per run, the run's index passed as rows_bwd's partial index):
 * its partials, the column pass and the σs partials then do not depend on the thread count (LoCon
 * and DyLoRA do; the other generators keep per-thread partials).
 *
 * Streaming form (stream.h, stream.c: cpu_merge_fwd_stream) for elementwise generators: one pass
 * in registers with the same per-element expressions as combine() here.
 *
 * Extra memory: per thread 3 blocks of max(RB, rows_bwd_block) × I·K floats (DoRA per output row
 * backward: and one row of I·K floats); DoRA per input channel: 2·I floats per run of the column
 * pass (≤ COL_GROUPS).
 */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "isa.h"
#include "stream.h"

#define RB 4

float cpu_sigma(const lyco_call *c) {
    const DLTensor *t = c->a->tensor[LYCO_SCALAR];
    if (!t) return 1.0f;
    return lyco_round_f32(lyco_load_f32(lyco_elem_at(t, 0), lyco_dtype_of(t)), c->dt.compute);
}

static int64_t ik_of(const lyco_call *c) {
    const lyco_layer *l = &c->a->layer;
    if (l->kind == LYCO_LAYER_NORM) return 1;
    return l->kind == LYCO_LAYER_CONV ? c->dims.I / l->groups * c->dims.K : c->dims.I;
}
int64_t cpu_merge_cols(const lyco_call *c) { return ik_of(c); }

/* σs applies unless the algorithm has none or the upstream merge scale replaces it */
static bool sigma_active(const lyco_call *c, const cpu_delta *d) {
    bool compat = (c->a->flags & LYCO_FLAG_UPSTREAM_MERGE_SCALE) && (c->a->algo == LYCO_ALGO_LOHA || c->a->algo == LYCO_ALGO_LOKR);
    return d->uses_sigma && !compat;
}
static float sigma_for(const lyco_call *c, const cpu_delta *d) { return sigma_active(c, d) ? cpu_sigma(c) : 1.0f; }
float cpu_merge_sigma(const lyco_call *c, const cpu_delta *d) { return sigma_for(c, d); }

typedef struct {
    float *norm2;     /* Σ V² per kept index (then ‖V‖) */
    float *S;         /* Σ G⊙V per kept index (backward) */
    float *coef;      /* the applied factor c */
    float *d;         /* dora_scale */
    int64_t kept;
    float eps;
} dora_t;

static int64_t dora_index(const lyco_call *c, int64_t o, int64_t j) { return c->dims.dora_on_out ? o : j / c->dims.K; }

static bool dora_init(const lyco_call *c, dora_t *dr) {
    memset(dr, 0, sizeof *dr);
    const DLTensor *t = c->a->tensor[LYCO_DORA_SCALE];
    dr->kept = c->dims.dora_on_out ? c->dims.O : c->dims.I;
    dr->eps = (float)ldexp(1.0, 1 - lyco_dtype_precision(lyco_dtype_of(t)));
    dr->norm2 = calloc((size_t)dr->kept, sizeof(float));
    dr->S = calloc((size_t)dr->kept, sizeof(float));
    dr->coef = calloc((size_t)dr->kept, sizeof(float));
    dr->d = calloc((size_t)dr->kept, sizeof(float));
    if (!dr->norm2 || !dr->S || !dr->coef || !dr->d) return false;
    cpu_load_all(t, c->dt.compute, dr->d);
    return true;
}

static void dora_free(dora_t *dr) {
    free(dr->norm2);
    free(dr->S);
    free(dr->coef);
    free(dr->d);
}

static void dora_coef(const lyco_call *c, dora_t *dr, int64_t k) {
    float n = sqrtf(dr->norm2[k]);
    dr->norm2[k] = n; /* now ‖V‖ */
    float f = dr->d[k] / (n + dr->eps);
    if (c->m != 1.0) f = (float)c->m * (f - 1.0f) + 1.0f;
    dr->coef[k] = f;
}

/* per-thread scratch of the drivers */
typedef struct {
    float *W, *D, *O2;   /* RB×IK each: W rows, Δ rows, an output/gradient row block */
    float *V;            /* DoRA per output row, backward: one row of IK floats for V = W + σs·ΔW */
} scratch_t;

static bool scratch_alloc(scratch_t **out, int nt, int64_t rb, int64_t IK, bool v_row) {
    scratch_t *s = calloc((size_t)nt, sizeof *s);
    if (!s) return false;
    for (int t = 0; t < nt; t++) {
        /* W zeroed (a generator that reads W is handed this block even where no W was given); Δ, the
           output/gradient block and V are written before they are read, so not zeroed (calloc
           cleared ~2 MB a call at 2 threads for the backward's 32-row blocks, serially) */
        s[t].W = calloc((size_t)(rb * IK + 1), sizeof(float));
        s[t].D = malloc(sizeof(float) * (size_t)(rb * IK + 1));
        s[t].O2 = malloc(sizeof(float) * (size_t)(rb * IK + 1));
        s[t].V = v_row ? malloc(sizeof(float) * (size_t)(IK + 1)) : NULL;
        if (!s[t].W || !s[t].D || !s[t].O2 || (v_row && !s[t].V)) {
            *out = s;
            return false;
        }
    }
    *out = s;
    return true;
}

static void scratch_free(scratch_t *s, int nt) {
    if (!s) return;
    for (int t = 0; t < nt; t++) {
        free(s[t].W);
        free(s[t].D);
        free(s[t].O2);
        free(s[t].V);
    }
    free(s);
}

/* The column pass's partials: COL_GROUPS fixed runs of row blocks (fewer for few blocks), each
   summed in row order by one thread, then combined in run order — independent of the thread count */
#define COL_GROUPS 8
static int64_t col_groups(int64_t nblocks) { return nblocks < COL_GROUPS ? (nblocks > 0 ? nblocks : 1) : COL_GROUPS; }

/* Column-norm pass of DoRA per input channel: Σ V² per channel, and with G also Σ G⊙V;
   partial holds col_groups(RB blocks) × 2·kept floats, zeroed. */
static void dora_column_pass(const lyco_call *c, const cpu_delta *d, const cpu_view *wv, const cpu_view *gv,
                             scratch_t *scr, float sig, dora_t *dr, float *partial) {
    int64_t O = c->dims.O, IK = ik_of(c), I = dr->kept, nblocks = (O + RB - 1) / RB, ng = col_groups(nblocks);
    lyco_dtype T = c->dt.compute;
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < ng; g++) {
        scratch_t *sc = &scr[cpu_thread_id()];
        float *pn = partial + (size_t)g * 2 * I, *ps = pn + I;
        for (int64_t b = nblocks * g / ng; b < nblocks * (g + 1) / ng; b++) {
            int64_t o0 = b * RB, nr = O - o0 < RB ? O - o0 : RB;
            for (int64_t r = 0; r < nr; r++) cpu_load(wv, o0 + r, 0, IK, T, sc->W + r * IK);
            d->rows(d, o0, nr, sc->W, sc->D);
            if (gv)
                for (int64_t r = 0; r < nr; r++) cpu_load(gv, o0 + r, 0, IK, d->g_exact ? LYCO_F32 : T, sc->O2 + r * IK);
            for (int64_t r = 0; r < nr; r++)
                for (int64_t j = 0; j < IK; j++) {
                    float v = sc->W[r * IK + j] + sig * sc->D[r * IK + j];
                    int64_t k = j / c->dims.K;
                    pn[k] += v * v;
                    if (gv) ps[k] += sc->O2[r * IK + j] * v;
                }
        }
    }
    for (int64_t g = 0; g < ng; g++)
        for (int64_t k = 0; k < I; k++) {
            dr->norm2[k] += partial[(size_t)g * 2 * I + k];
            dr->S[k] += partial[(size_t)g * 2 * I + I + k];
        }
}

/* The elementwise row loops (DoRA's sums and expressions, combine()) are also compiled for AVX2
   without FMA (target_clones "avx2": 256-bit lanes for the vectoriser; with no FMA in the target
   no product can fuse with a sum), so their values are the baseline's bit for bit (the sums: each
   lane is its own chain in j order either way). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define NOFMA_HOT __attribute__((target_clones("avx2", "default")))
#else
#define NOFMA_HOT
#endif

/* DoRA per output row: Σ_j V_j² and (g ≠ NULL) Σ_j g_j·V_j, V_j = w_j + σs·δ_j (float), in double
   over 8 lanes (j mod 8, each in j order) joined by a fixed tree: the order depends on n alone.
   (One serial chain of double adds per row cost ~4 cycles an element.) row_lanes sums the first
   n8 = n & ~7 elements into the lanes: portable loops (two, one per case, so that neither carries
   a branch), and on AVX2 CPUs row_lanes_avx2 — the same operations per lane with the lanes in
   four registers (GCC kept the portable loops' lane accumulators on the stack, a store-forward
   chain per add: ~2 cycles an element in merge_bwd's sums). V_j is also stored to vout (a row buffer
   apart from w and dl): the row expressions below then read it instead of recomputing it. */
static void row_lanes(const float *restrict w, const float *restrict dl, const float *restrict g, float sig, int64_t n8,
                      double *a, double *b, float *restrict vout) {
    if (g) {
        for (int64_t j = 0; j < n8; j += 8)
            for (int l = 0; l < 8; l++) {
                float v = w[j + l] + sig * dl[j + l];
                vout[j + l] = v;
                a[l] += (double)v * v;
                b[l] += (double)g[j + l] * v;
            }
    } else {
        for (int64_t j = 0; j < n8; j += 8)
            for (int l = 0; l < 8; l++) {
                float v = w[j + l] + sig * dl[j + l];
                vout[j + l] = v;
                a[l] += (double)v * v;
            }
    }
}

#ifdef CPU_V3
#pragma GCC push_options
#pragma GCC target("avx2") /* not "fma": no product can fuse with a sum */
/* row_lanes on AVX2: lanes 0–3 and 4–7 of a (and b) in two 4-double registers each; per lane
   v = w + σs·δ rounded to float, then a += v·v and b += g·v in double, in j order */
static void row_lanes_avx2(const float *restrict w, const float *restrict dl, const float *restrict g, float sig, int64_t n8,
                           double *a, double *b, float *restrict vout) {
    __m256 s = _mm256_set1_ps(sig);
    __m256d a0 = _mm256_loadu_pd(a), a1 = _mm256_loadu_pd(a + 4), b0 = _mm256_loadu_pd(b), b1 = _mm256_loadu_pd(b + 4);
    for (int64_t j = 0; j < n8; j += 8) {
        __m256 v = _mm256_add_ps(_mm256_loadu_ps(w + j), _mm256_mul_ps(s, _mm256_loadu_ps(dl + j)));
        _mm256_storeu_ps(vout + j, v);
        __m256d v0 = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), v1 = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        a0 = _mm256_add_pd(a0, _mm256_mul_pd(v0, v0));
        a1 = _mm256_add_pd(a1, _mm256_mul_pd(v1, v1));
        if (g) {
            __m256 gv = _mm256_loadu_ps(g + j);
            b0 = _mm256_add_pd(b0, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(gv)), v0));
            b1 = _mm256_add_pd(b1, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(gv, 1)), v1));
        }
    }
    _mm256_storeu_pd(a, a0);
    _mm256_storeu_pd(a + 4, a1);
    _mm256_storeu_pd(b, b0);
    _mm256_storeu_pd(b + 4, b1);
}
#pragma GCC pop_options
#endif

NOFMA_HOT static void row_sums(const float *restrict w, const float *restrict dl, const float *restrict g, float sig, int64_t n,
                              double *ss, double *sg, float *restrict vout) {
    double a[8] = {0}, b[8] = {0};
    int64_t n8 = n & ~(int64_t)7;
#ifdef CPU_V3
    if (cpu_have_v3()) row_lanes_avx2(w, dl, g, sig, n8, a, b, vout);
    else row_lanes(w, dl, g, sig, n8, a, b, vout);
#else
    row_lanes(w, dl, g, sig, n8, a, b, vout);
#endif
    for (int64_t j = n8; j < n; j++) {
        float v = w[j] + sig * dl[j];
        vout[j] = v;
        a[j - n8] += (double)v * v;
        if (g) b[j - n8] += (double)g[j] * v;
    }
    *ss = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    if (sg) *sg = ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
}

/* ---- DoRA per output row in registers (dora_kern.h; x86-64-v4 / v3) ---- */

/* One row for dora_kern.h: W's row (the tensor's, or the fp32 block a W-reading generator was
   given), ΔW̄'s row (fp32, replaced by V), G's row (backward; NULL forward). */
typedef struct {
    const char *w;
    float *v;
    const char *g;
    const char *pw, *pg;   /* W's and G's rows to prefetch meanwhile (the next group's), or NULL */
} dora_row_t;

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#define ISA_EACH_HEADER "dora_kern.h"
#define ISA_EACH_V4 1
#include "isa_each.h"
#pragma GCC pop_options

typedef struct {
    void (*sums)(int nr, const dora_row_t *rw, lyco_dtype wdt, lyco_dtype gdt, lyco_dtype T, lyco_dtype gT, float sig, int64_t n,
                 double *ss, double *sg);
    void (*fwd_row)(int64_t n, const float *v, float coef, const char *w, lyco_dtype wdt, lyco_dtype T, char *out, lyco_dtype odt,
                    char *po);
    void (*bwd_row)(int64_t n, const char *g, lyco_dtype gdt, lyco_dtype gT, const float *v, float coef, float t, float nrm,
                    lyco_dtype RT, float sig, float *out);
} dora_kern;

/* this CPU's register kernels; false: the portable row loops below (portable build,
   LYCO_CPU_ISA=base) */
static bool dora_kernels(dora_kern *k) {
#ifdef CPU_V3
    int isa = cpu_isa();
    if (isa >= 2) {
        *k = (dora_kern){dora_sums_v4, dora_fwd_row_v4, dora_bwd_row_v4};
        return true;
    }
    if (isa == 1) {
        *k = (dora_kern){dora_sums_v3, dora_fwd_row_v3, dora_bwd_row_v3};
        return true;
    }
#endif
    (void)k;
    return false;
}

static const char *view_row(const cpu_view *v, int64_t r) { return v->base + r * v->rs * (int64_t)v->es; }

/* DoRA per output row, forward, in place on V (row_sums' vout): o_j = V_j·coef, minus w_j for
   DELTA (the per-input loop's expression with V and the row's coefficient hoisted: bitwise the same) */
NOFMA_HOT static void dora_row_out(float *restrict o, const float *restrict w, float coef, bool delta, int64_t n) {
    if (delta)
        for (int64_t j = 0; j < n; j++) o[j] = o[j] * coef - w[j];
    else
        for (int64_t j = 0; j < n; j++) o[j] *= coef;
}

/* o[j] of the plain (non-DoRA) modes from W's row (rounded) and ΔW̄'s: W + m·σs·ΔW, m·σs·ΔW
   (DELTA) or W − m·σs·ΔW (UNMERGE); 0 without W. o may alias dl (elementwise). Compiled for the
   baseline ISA and for AVX2, neither with FMA, so `w + m·σs·dl` is a product and a sum in every path. */
NOFMA_HOT static void combine(lyco_merge_mode mode, bool need_w, float m, float sig, const float *w, const float *dl, float *o,
                    int64_t n) {
    if (mode == LYCO_MERGE_DELTA) {
        for (int64_t j = 0; j < n; j++) o[j] = m * sig * dl[j];
    } else if (!need_w) {
        for (int64_t j = 0; j < n; j++) o[j] = 0.0f;
    } else if (mode == LYCO_MERGE_UNMERGE) {
        for (int64_t j = 0; j < n; j++) o[j] = w[j] - m * sig * dl[j];
    } else {
        for (int64_t j = 0; j < n; j++) o[j] = w[j] + m * sig * dl[j];
    }
}

/* b'' = b + m·Δb (the modes as above; Δb from the generator's bias hook, 0 when dropped). */
lyco_status cpu_merge_bias(const lyco_call *c, const cpu_delta *d) {
    int64_t n = c->dims.O;
    lyco_merge_mode mode = c->merge->mode;
    float m = (float)c->m;
    float *b = calloc((size_t)n + 1, sizeof(float)), *db = calloc((size_t)n + 1, sizeof(float));
    if (!b || !db) {
        free(b);
        free(db);
        return lyco_fail(LYCO_ERR_NOMEM, "cpu merge_fwd: out of memory");
    }
    if (c->merge->bias) cpu_load_all(c->merge->bias, c->dt.compute, b);
    if (!c->dropped && d->bias) d->bias(d, db);
    for (int64_t o = 0; o < n; o++) {
        float e = m * db[o];
        b[o] = mode == LYCO_MERGE_DELTA ? e : mode == LYCO_MERGE_UNMERGE ? b[o] - e : b[o] + e;
    }
    cpu_store_all(c->out_bias, b);
    free(b);
    free(db);
    return LYCO_OK;
}

lyco_status cpu_merge_fwd(const lyco_call *c, const cpu_delta *d) {
    int64_t O = c->dims.O, IK = ik_of(c), nblocks = (O + RB - 1) / RB;
    lyco_dtype T = c->dt.compute;
    lyco_merge_mode mode = c->merge->mode;
    const DLTensor *Wt = c->merge->weight;
    bool dora = c->dims.dora && !c->dropped;
    bool need_w = Wt && (mode != LYCO_MERGE_DELTA || d->needs_w || dora);
    float sig = sigma_for(c, d), m = (float)c->m;
    /* W's rows are loaded one at a time next to their use (L1-hot for the combine, not evicted by
       the product's passes over its operands) unless the generator reads them */
    bool w_late = need_w && !d->needs_w;
    cpu_view wv, ov;
    if (Wt) cpu_view_init(&wv, Wt, 1);
    cpu_view_init(&ov, c->out, 1);
    int nt = cpu_threads();
    scratch_t *scr = NULL;
    dora_t dr;
    memset(&dr, 0, sizeof dr);
    float *partial = NULL;
    lyco_status st = LYCO_OK;
    if (!scratch_alloc(&scr, nt, RB, IK, false) || (dora && !dora_init(c, &dr))) {
        st = lyco_fail(LYCO_ERR_NOMEM, "cpu merge_fwd: out of memory for %lld-column row blocks", (long long)IK);
        goto done;
    }
    if (dora && !c->dims.dora_on_out) {
        partial = calloc((size_t)col_groups(nblocks) * 2 * (size_t)dr.kept, sizeof(float));
        if (!partial) {
            st = lyco_fail(LYCO_ERR_NOMEM, "cpu merge_fwd: out of memory");
            goto done;
        }
        dora_column_pass(c, d, &wv, NULL, scr, sig, &dr, partial);
        for (int64_t k = 0; k < dr.kept; k++) dora_coef(c, &dr, k);
    }
    /* DoRA per output row with rows of contiguous columns: the register kernels (dora_kern.h) read
       W and write the output rows in place, the block's 4 rows' sums together */
    dora_kern dk;
    bool dk_on = dora && c->dims.dora_on_out && Wt && wv.fast && ov.fast && dora_kernels(&dk);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblocks; b++) {
        scratch_t *sc = &scr[cpu_thread_id()];
        int64_t o0 = b * RB, nr = O - o0 < RB ? O - o0 : RB;
        if (need_w && !w_late)
            for (int64_t r = 0; r < nr; r++) cpu_load(&wv, o0 + r, 0, IK, T, sc->W + r * IK);
        if (c->dropped) memset(sc->D, 0, sizeof(float) * (size_t)(nr * IK));
        else d->rows(d, o0, nr, sc->W, sc->D);
        if (dk_on) {
            dora_row_t rw[RB];
            lyco_dtype wdt = w_late ? wv.dt : LYCO_F32; /* a generator's W block is fp32, rounded already */
            for (int64_t r = 0; r < nr; r++)
                rw[r] = (dora_row_t){w_late ? view_row(&wv, o0 + r) : (const char *)(sc->W + r * IK), sc->D + r * IK, NULL,
                                     w_late && o0 + RB + r < O ? view_row(&wv, o0 + RB + r) : NULL, NULL};
            double ss[RB];
            dk.sums((int)nr, rw, wdt, wdt, T, T, sig, IK, ss, NULL);
            for (int64_t r = 0; r < nr; r++) {
                dr.norm2[o0 + r] = (float)ss[r]; /* per-row state is owned by this thread */
                dora_coef(c, &dr, o0 + r);
                dk.fwd_row(IK, rw[r].v, dr.coef[o0 + r], mode == LYCO_MERGE_DELTA ? rw[r].w : NULL, wdt, T,
                           (char *)view_row(&ov, o0 + r), ov.dt, o0 + RB + r < O ? (char *)view_row(&ov, o0 + RB + r) : NULL);
            }
            continue;
        }
        for (int64_t r = 0; r < nr; r++) {
            float *w = sc->W + (w_late ? 0 : r * IK), *dl = sc->D + r * IK, *o = dora ? sc->O2 + r * IK : dl;
            if (w_late) cpu_load(&wv, o0 + r, 0, IK, T, w);
            if (dora) {
                if (c->dims.dora_on_out) {
                    double ss; /* the norm's sum in double: it sets the scale of the whole row */
                    row_sums(w, dl, NULL, sig, IK, &ss, NULL, o);
                    /* per-row state is owned by this thread */
                    dr.norm2[o0 + r] = (float)ss;
                    dora_coef(c, &dr, o0 + r);
                }
                if (c->dims.dora_on_out) {
                    dora_row_out(o, w, dr.coef[o0 + r], mode == LYCO_MERGE_DELTA, IK);
                } else {
                    for (int64_t j = 0; j < IK; j++) {
                        float wpp = (w[j] + sig * dl[j]) * dr.coef[dora_index(c, o0 + r, j)];
                        o[j] = mode == LYCO_MERGE_DELTA ? wpp - w[j] : wpp;
                    }
                }
            } else {
                combine(mode, need_w, m, sig, w, dl, o, IK);
            }
            cpu_store(&ov, o0 + r, 0, IK, o);
        }
    }
    if (c->out_bias) st = cpu_merge_bias(c, d);
done:
    scratch_free(scr, nt);
    dora_free(&dr);
    free(partial);
    return st;
}

static void zero_grads(const lyco_call *c) {
    for (int s = 0; s < LYCO_SLOT_COUNT; s++) {
        DLTensor *g = c->g ? c->g->grad[s] : NULL;
        if (!g) continue;
        int64_t n = lyco_numel(g);
        for (int64_t i = 0; i < n; i++) lyco_store_f32(lyco_elem_at(g, i), lyco_dtype_of(g), 0.0f);
    }
}

/* DoRA per output row, backward: g_j ← g_j·coef − (t·V_j)/nrm with t = (m·d/(n·n))·S and V from
   row_sums' vout, the per-element expression of the per-input path with the row's scalars hoisted
   (same operations, same order: bitwise the same; a product and a sum, never contracted) */
NOFMA_HOT static void dora_row_grad(float *restrict g, const float *restrict v, float coef, float t, float nrm, int64_t n) {
    for (int64_t j = 0; j < n; j++) g[j] = g[j] * coef - t * v[j] / nrm;
}

/* what one backward row block needs (cpu_merge_bwd) */
typedef struct {
    const lyco_call *c;
    const cpu_delta *d;
    const cpu_view *wv, *gv;
    scratch_t *scr;
    dora_t *dr;
    float *gsig;            /* σs partials, indexed like the generator's */
    int64_t O, IK, rb;
    bool load_w, need_rows, want_sigma;
    float sig, m;
    const dora_kern *dk;    /* DoRA per output row through dora_kern.h, or NULL */
} bwd_job;

/* Row block b (rows [b·rb, b·rb + rb) ∩ [0, O)) on thread `tid`'s scratch; `part` indexes the
   partials (the thread, or the fixed run of blocks when the generator asked for groups). */
static void bwd_block(const bwd_job *jb, int64_t b, int tid, int part) {
    const lyco_call *c = jb->c;
    const cpu_delta *d = jb->d;
    dora_t *dr = jb->dr;
    lyco_dtype T = c->dt.compute;
    int64_t IK = jb->IK, o0 = b * jb->rb, nr = jb->O - o0 < jb->rb ? jb->O - o0 : jb->rb;
    float sig = jb->sig, m = jb->m;
    bool dora = c->dims.dora;
    scratch_t *sc = &jb->scr[tid];
    /* as in the forward: W's rows one at a time next to their use unless the generator reads them */
    bool w_late = jb->load_w && !d->needs_w;
    if (jb->load_w && !w_late)
        for (int64_t r = 0; r < nr; r++) cpu_load(jb->wv, o0 + r, 0, IK, T, sc->W + r * IK);
    if (jb->need_rows) d->rows(d, o0, nr, sc->W, sc->D);
    if (jb->dk) { /* DoRA per output row, register kernels: 4 rows' sums at a time, W and G read in place */
        const dora_kern *dk = jb->dk;
        lyco_dtype wdt = w_late ? jb->wv->dt : LYCO_F32, gdt = jb->gv->dt, gT = d->g_exact ? LYCO_F32 : T;
        for (int64_t r0 = 0; r0 < nr; r0 += 4) {
            int q = nr - r0 < 4 ? (int)(nr - r0) : 4;
            dora_row_t rw[4];
            for (int i = 0; i < q; i++) {
                int64_t o = o0 + r0 + i, on = o + 4 < o0 + nr ? o + 4 : o + jb->rb;   /* the next group's row */
                bool pf = on < jb->O;
                rw[i] = (dora_row_t){w_late ? view_row(jb->wv, o) : (const char *)(sc->W + (r0 + i) * IK), sc->D + (r0 + i) * IK,
                                     view_row(jb->gv, o), pf && w_late ? view_row(jb->wv, on) : NULL, pf ? view_row(jb->gv, on) : NULL};
            }
            double ss[4], sgv[4];
            dk->sums(q, rw, wdt, gdt, T, gT, sig, IK, ss, sgv);
            for (int i = 0; i < q; i++) {
                int64_t o = o0 + r0 + i;
                dr->norm2[o] = (float)ss[i];
                dr->S[o] = (float)sgv[i];
                dora_coef(c, dr, o);
                float n = dr->norm2[o] + dr->eps;
                dk->bwd_row(IK, rw[i].g, gdt, gT, rw[i].v, dr->coef[o], (m * dr->d[o] / (n * n)) * dr->S[o], dr->norm2[o], gT, sig,
                            sc->O2 + (r0 + i) * IK);
            }
        }
        d->rows_bwd(d, o0, nr, sc->W, sc->O2, part);
        return;
    }
    for (int64_t r = 0; r < nr; r++) {
        float *g = sc->O2 + r * IK, *w = sc->W + (w_late ? 0 : r * IK), *dl = sc->D + r * IK;
        if (w_late) cpu_load(jb->wv, o0 + r, 0, IK, T, w);
        cpu_load(jb->gv, o0 + r, 0, IK, d->g_exact ? LYCO_F32 : T, g);
        if (dora) {
            int64_t o = o0 + r;
            if (c->dims.dora_on_out) {
                double ss, sgv;
                row_sums(w, dl, g, sig, IK, &ss, &sgv, sc->V);
                dr->norm2[o] = (float)ss;
                dr->S[o] = (float)sgv;
                dora_coef(c, dr, o);
                float n = dr->norm2[o] + dr->eps;
                dora_row_grad(g, sc->V, dr->coef[o], (m * dr->d[o] / (n * n)) * dr->S[o], dr->norm2[o], IK);
            } else {
                for (int64_t j = 0; j < IK; j++) {
                    int64_t k = dora_index(c, o, j);
                    float n = dr->norm2[k] + dr->eps, v = w[j] + sig * dl[j];
                    g[j] = g[j] * dr->coef[k] - (m * dr->d[k] / (n * n)) * dr->S[k] * v / dr->norm2[k];
                }
            }
            /* ∂L/∂V rounded to the compute dtype, as the eager chain stores it (NUMERICS.md §1.6) */
            if (!d->g_exact) cpu_round(g, IK, T);
        } else if (m != 1.0f) { /* m = 1 (the common case) leaves g as it is: skip the pass */
            for (int64_t j = 0; j < IK; j++) g[j] *= m;
        }
        /* g = ∂L/∂(σs·ΔW); σs's gradient, then ∂L/∂ΔW */
        if (jb->want_sigma) {
            float acc = 0.0f;
            for (int64_t j = 0; j < IK; j++) acc += g[j] * dl[j];
            jb->gsig[part] += acc;
        }
        if (sig != 1.0f)
            for (int64_t j = 0; j < IK; j++) g[j] *= sig;
    }
    d->rows_bwd(d, o0, nr, sc->W, sc->O2, part);
}

lyco_status cpu_merge_bwd(const lyco_call *c, const cpu_delta *d) {
    if (c->dropped) {
        zero_grads(c);
        return LYCO_OK;
    }
    int64_t O = c->dims.O, IK = ik_of(c), rb = d->rows_bwd_block > 0 ? d->rows_bwd_block : RB, nblocks = (O + rb - 1) / rb;
    lyco_dtype T = c->dt.compute;
    const DLTensor *Wt = c->merge->weight;
    bool dora = c->dims.dora;
    float sig = sigma_for(c, d), m = (float)c->m;
    cpu_view wv, gv;
    if (Wt) cpu_view_init(&wv, Wt, 1);
    cpu_view_init(&gv, c->d_out, 1);
    int nt = cpu_threads(), ng = d->groups;
    int nparts = ng > nt ? ng : nt;
    scratch_t *scr = NULL;
    dora_t dr;
    memset(&dr, 0, sizeof dr);
    float *partial = NULL, *gsig = calloc((size_t)nparts, sizeof(float));
    bwd_job jb = {.c = c, .d = d, .wv = &wv, .gv = &gv, .dr = &dr, .gsig = gsig, .O = O, .IK = IK, .rb = rb,
                  .load_w = Wt && (d->needs_w || dora), .want_sigma = sigma_active(c, d) && c->g && c->g->grad[LYCO_SCALAR],
                  .sig = sig, .m = m};
    jb.need_rows = dora || jb.want_sigma;
    lyco_status st = LYCO_OK;
    if (!gsig || !scratch_alloc(&scr, nt, rb > RB ? rb : RB, IK, dora && c->dims.dora_on_out) || (dora && !dora_init(c, &dr))) {
        st = lyco_fail(LYCO_ERR_NOMEM, "cpu merge_bwd: out of memory for %lld-column row blocks", (long long)IK);
        goto done;
    }
    jb.scr = scr;
    /* the register kernels: rows of contiguous columns; σs's own gradient takes the row loops */
    dora_kern dk;
    if (dora && c->dims.dora_on_out && Wt && !jb.want_sigma && wv.fast && gv.fast && dora_kernels(&dk)) jb.dk = &dk;
    if (dora && !c->dims.dora_on_out) {
        partial = calloc((size_t)col_groups((O + RB - 1) / RB) * 2 * (size_t)dr.kept, sizeof(float));
        if (!partial) {
            st = lyco_fail(LYCO_ERR_NOMEM, "cpu merge_bwd: out of memory");
            goto done;
        }
        dora_column_pass(c, d, &wv, &gv, scr, sig, &dr, partial);
        for (int64_t k = 0; k < dr.kept; k++) dora_coef(c, &dr, k);
    }
    if (ng > 0) {
#pragma omp parallel for schedule(static)
        for (int g = 0; g < ng; g++)
            for (int64_t b = nblocks * g / ng; b < nblocks * (g + 1) / ng; b++) bwd_block(&jb, b, cpu_thread_id(), g);
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < nblocks; b++) {
            int tid = cpu_thread_id();
            bwd_block(&jb, b, tid, tid);
        }
    }
    if ((st = d->finish_bwd(d))) goto done;
    if (dora && c->g->grad[LYCO_DORA_SCALE]) {
        for (int64_t k = 0; k < dr.kept; k++) dr.S[k] = m / (dr.norm2[k] + dr.eps) * dr.S[k];
        cpu_store_all(c->g->grad[LYCO_DORA_SCALE], dr.S);
    }
    if (d->uses_sigma && c->g && c->g->grad[LYCO_SCALAR]) {
        float tot = 0.0f;
        for (int t = 0; t < nparts; t++) tot += gsig[t];
        cpu_store_all(c->g->grad[LYCO_SCALAR], &tot);
    }
    if (c->d_out_bias && d->bias_bwd) {
        float *gb = calloc((size_t)O + 1, sizeof(float));
        if (!gb) {
            st = lyco_fail(LYCO_ERR_NOMEM, "cpu merge_bwd: out of memory");
            goto done;
        }
        cpu_load_all(c->d_out_bias, T, gb);
        for (int64_t o = 0; o < O; o++) gb[o] *= m;
        st = d->bias_bwd(d, gb);
        free(gb);
    }
done:
    scratch_free(scr, nt);
    dora_free(&dr);
    free(partial);
    free(gsig);
    return st;
}
