/*
 * gemm_kern.h — the kernels of the fp32 GEMMs in dense.c, written once and included there once
 * per instruction set: KN(name) gives each inclusion its own names (name_v4 under
 * `#pragma GCC target("arch=x86-64-v4")` with 16-lane vectors, name_v3 under "arch=x86-64-v3"
 * with 8-lane vectors, name_base for the portable build, 8 lanes). Not a public header.
 *
 * Why not CPU_HOT (target_clones) as the rest of src/cpu: GCC 12 compiles the GCC vector types of
 * always_inline helpers into a target("…")/target_clones function as 128-bit halves — every
 * broadcast became vbroadcastss xmm + vinsertf128 or a vinsertps chain and accumulators spilled,
 * which held the old 4×16 kernel near 30 GFLOP/s a core (the peak here is ~100). Under a target
 * pragma the helpers themselves are compiled for the ISA and the loop is clean (one vbroadcastss
 * and two FMAs per row and k).
 *
 * Summation order, independent of M, N and the blocking (so a caller whose tile sizes follow the
 * thread count still gets bitwise the same elements):
 *   nn, tn: acc = 0; acc += a_k·b_k for k = 0…K−1 (FMA in the v3 and v4 builds, a product and a
 *             sum in the portable one); then acc + C_old when accumulating (every path)
 *   nt (dot_nt; NT_DOT_K = 1 in dense.c): 8 k-lanes chained over k < K&~7, summed in a fixed
 *             tree, plus the chained tail k ≥ K&~7, then + C_old (8 lanes on v4 too)
 * so v3 and v4 give bitwise the same results (tests/sh/gemm_isa.sh compares them)
 *
 * Expects from dense.c before each inclusion: VF (the float vector type) and VI (its int32 twin)
 * of VL lanes (the v8 type of 8 lanes for the dot products), GK_FMA (v3, v4: fused multiply-adds and masked tails through intrinsics), MR,
 * DOT_JG, the `mat` type, the PATH_* constants. GNR = 2·VL is the micro-tile width.
 *
 * Contents (all static, all names through KN):
 *   axpy_form   : nn/tn, nothing packed: 4 × 3VL (micro4x3), mr × 2VL and mr × VL (micro, nv = 2,
 *                 1) register blocks, B read in place; the last < VL columns masked (micro_mask,
 *                 v3/v4) or scalar (portable). Tiny products, K < 8, M ≤ 4, and the partial last
 *                 GNR columns of the direct path.
 *   dot_nt      : nt as dot products over K (3×4 blocks of 12 accumulators; B rows in groups of
 *                 DOT_JG so they stay in L2 while every A row block passes); v4, K ≥ 64:
 *                 dot_nt_packed — each group's rows packed once as column pairs (two outputs'
 *                 8 k-lanes per zmm), 4-row × 4-pair blocks, the same chains and tree
 *   pack_b_panel: GNR-column k-major panels of a row-major B, zero-padded
 *   micro / tile: the MR×GNR micro-kernel over the whole K (no K blocking: that would move the
 *                 + C_old of an accumulating call), A read in place by broadcasts; column tails
 *                 through a scratch tile
 *   blocked     : NC (from the buffer) / MC (A block in L2) / GNR / MR loops
 *   gemm_part   : one range of rows × columns on the calling thread
 */

#define GNR (2 * VL)
#define AI static inline __attribute__((always_inline))

/* 8 lanes on every build: the dot products' vectors (below), and VF itself where VL = 8.
   a·b + c, lane-wise and scalar: one fused multiply-add in the v3 and v4 builds (GK_FMA), a
   product and a sum in the portable one, written out rather than left to contraction (which GCC
   applied to some loops and not to others, and not at all below -O2), so every path rounds alike */
AI v8 KN(ld8)(const float *p) {
    v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}
AI v8 KN(fma8)(v8 a, v8 b, v8 c) {
#ifdef GK_FMA
    return _mm256_fmadd_ps(a, b, c);
#else
    return a * b + c;
#endif
}
#if VL == 8
AI VF KN(ldv)(const float *p) { return KN(ld8)(p); }
AI VF KN(vfma)(VF a, VF b, VF c) { return KN(fma8)(a, b, c); }
#else /* VL = 16: the v4 build, which always has GK_FMA */
AI VF KN(ldv)(const float *p) {
    VF v;
    memcpy(&v, p, sizeof v);
    return v;
}
AI VF KN(vfma)(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
#endif
AI void KN(stv)(float *p, VF v) { memcpy(p, &v, sizeof v); }
AI VF KN(zerov)(void) { return (VF){0.0f}; }
AI float KN(fmas)(float a, float b, float c) {
#ifdef GK_FMA
    return __builtin_fmaf(a, b, c);
#else
    return a * b + c;
#endif
}
/* *p in all lanes */
AI VF KN(bcpv)(const float *p) {
    VF v = {*p};
#ifdef __clang__
    return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0);   /* clang builds the 8-lane copy only */
#else
    return __builtin_shuffle(v, (VI){0});
#endif
}
#ifdef GK_FMA
/* the first nc (< VL) lanes of p, the rest 0, and their store: the column tails (no access past
   lane nc) */
AI VF KN(ldm)(const float *p, int64_t nc) {
#if VL == 16
    return _mm512_maskz_loadu_ps((__mmask16)((1u << nc) - 1u), p);
#else
    const VI lane = {0, 1, 2, 3, 4, 5, 6, 7};
    return _mm256_maskload_ps(p, (__m256i)(lane < (VI){0} + (int32_t)nc));
#endif
}
AI void KN(stm)(float *p, int64_t nc, VF v) {
#if VL == 16
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << nc) - 1u), v);
#else
    const VI lane = {0, 1, 2, 3, 4, 5, 6, 7};
    _mm256_maskstore_ps(p, (__m256i)(lane < (VI){0} + (int32_t)nc), v);
#endif
}
#endif

/* ---- the small path (dot products) ---- */

/* The dot products run 8 k-lanes on every build (v4 too: 16 lanes measured 0.6–0.7× the v3 rate
   on the nt shapes of tools/gemm_bench.c — the wider tree and the longer scalar tail — and the
   same lanes keep v3 and v4 bitwise equal) */
/* a fixed tree ((0+1)+(2+3))+((4+5)+(6+7)) */
AI float KN(hsum8)(v8 v) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }

AI float KN(dot_tail)(const float *a, const float *b, int64_t k0, int64_t K) {
    float s = 0.0f;
    for (int64_t k = k0; k < K; k++) s = KN(fmas)(a[k], b[k], s);
    return s;
}

/* One P×Q block of dot products C[p][q] (+)= ⟨A row p, B row q⟩, P ≤ 3, Q ≤ 4 constants after
   inlining: per k-vector P + Q loads and P·Q FMAs into P·Q 8-lane accumulators (≤ 12 + 3 + 1
   registers). The per-element order does not depend on P or Q. */
AI void KN(dot_block)(const int P, const int Q, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                      int64_t ldc, bool accumulate) {
    int64_t K8 = K & ~(int64_t)7;
    v8 acc[3][4];
    for (int p = 0; p < 3; p++)
        for (int q = 0; q < 4; q++) acc[p][q] = (v8){0.0f};
    for (int64_t k = 0; k < K8; k += 8) {
        v8 a[3];
        for (int p = 0; p < P; p++) a[p] = KN(ld8)(A + p * lda + k);
        for (int q = 0; q < Q; q++) {
            v8 b = KN(ld8)(B + q * ldb + k);
            for (int p = 0; p < P; p++) acc[p][q] = KN(fma8)(a[p], b, acc[p][q]);
        }
    }
    for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) {
            float s = KN(hsum8)(acc[p][q]) + KN(dot_tail)(A + p * lda, B + q * ldb, K8, K);
            float *c = C + p * ldc + q;
            *c = accumulate ? *c + s : s;
        }
}

#if defined(GK_FMA) && VL == 16
/* dot_block with two outputs per 16-lane register: lanes 0–7 hold output (p, 2h)'s 8 k-lanes and
   lanes 8–15 output (p, 2h+1)'s (A's 8 k-values broadcast to both halves, B rows 2h and 2h+1
   side by side), so every lane is the same FMA chain as dot_block's and the result is bitwise
   dot_block's at twice the FMA width. P ≤ 3 rows, H ≤ 4 column pairs (constants after inlining). */
AI void KN(dot_block2)(const int P, const int H, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                       int64_t ldc, bool accumulate) {
    int64_t K8 = K & ~(int64_t)7;
    __m512 acc[3][4];
    for (int p = 0; p < 3; p++)
        for (int h = 0; h < 4; h++) acc[p][h] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K8; k += 8) {
        __m512 a[3];
        for (int p = 0; p < P; p++) a[p] = _mm512_broadcast_f32x8(_mm256_loadu_ps(A + p * lda + k));
        for (int h = 0; h < H; h++) {
            const float *b = B + 2 * h * ldb + k;
            __m512 bb = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(b)), _mm256_loadu_ps(b + ldb), 1);
            for (int p = 0; p < P; p++) acc[p][h] = _mm512_fmadd_ps(a[p], bb, acc[p][h]);
        }
    }
    for (int p = 0; p < P; p++)
        for (int h = 0; h < H; h++)
            for (int e = 0; e < 2; e++) {
                v8 half = e ? (v8)_mm512_extractf32x8_ps(acc[p][h], 1) : (v8)_mm512_castps512_ps256(acc[p][h]);
                float s = KN(hsum8)(half) + KN(dot_tail)(A + p * lda, B + (2 * h + e) * ldb, K8, K);
                float *c = C + p * ldc + 2 * h + e;
                *c = accumulate ? *c + s : s;
            }
}
#endif

#if defined(GK_FMA) && VL == 16
/* Column pairs packed once per group of B rows (dot_nt_packed): pair h's 8-float chunk c of both
   rows side by side, [B[2h][8c..8c+7], B[2h+1][8c..8c+7]], in tiles of up to 4 pairs — tile t
   (pairs 4t … 4t+hn−1) is K8/8 chunks of hn·16 floats, one contiguous stream */
AI float *KN(pair_at)(float *pk, int64_t h, int64_t npair, int64_t K8) {
    int64_t t = h / 4;
    (void)npair;
    return pk + t * 4 * 2 * K8 + (h % 4) * 16;
}
AI int64_t KN(pair_tile_n)(int64_t h, int64_t npair) { return npair - h / 4 * 4 < 4 ? npair - h / 4 * 4 : 4; }
AI void KN(pack_pairs)(int64_t npair, int64_t K8, const float *B, int64_t ldb, float *pk) {
    for (int64_t h = 0; h < npair; h++) {
        const float *b0 = B + 2 * h * ldb, *b1 = b0 + ldb;
        float *d = KN(pair_at)(pk, h, npair, K8);
        int64_t step = 16 * KN(pair_tile_n)(h, npair);
        for (int64_t k = 0; k < K8; k += 8, d += step)
            _mm512_storeu_ps(d, _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(b0 + k)), _mm256_loadu_ps(b1 + k), 1));
    }
}

/* lane 0 ← ((x0+x1)+(x2+x3))+((x4+x5)+(x6+x7)) and lane 8 ← the same of lanes 8–15: hsum8's tree
   on both halves (each add pairs the same two values as hsum8's, a + b = b + a) */
AI __m512 KN(hsum8x2)(__m512 x) {
    x = _mm512_add_ps(x, _mm512_permute_ps(x, 0xB1));       /* (0+1) (2+3) in lanes 0, 2 */
    x = _mm512_add_ps(x, _mm512_permute_ps(x, 0x4E));       /* ((0+1)+(2+3)) in lane 0, ((4+5)+(6+7)) in lane 4 */
    return _mm512_add_ps(x, _mm512_shuffle_f32x4(x, x, 0xB1)); /* lane 0 + lane 4; lane 8 + lane 12 */
}

/* One P×(2H) block from packed pairs (P ≤ 4 rows, H ≤ 4 pairs of one tile; constants after
   inlining): per 8-float chunk P broadcasts of A and H loads of the tile, P·H FMAs into 16-lane
   accumulators — each lane dot_block's chain — then hsum8x2, the tail and C as dot_block. */
AI void KN(dot_packed)(const int P, const int H, int64_t K, const float *A, int64_t lda, const float *pk, int64_t step,
                       const float *B, int64_t ldb, float *C, int64_t ldc, bool accumulate) {
    int64_t K8 = K & ~(int64_t)7;
    __m512 acc[4][4];
    for (int p = 0; p < 4; p++)
        for (int h = 0; h < 4; h++) acc[p][h] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K8; k += 8, pk += step) {
        __m512 a[4];
        for (int p = 0; p < P; p++) a[p] = _mm512_broadcast_f32x8(_mm256_loadu_ps(A + p * lda + k));
        for (int h = 0; h < H; h++) {
            __m512 bb = _mm512_loadu_ps(pk + 16 * h);
            for (int p = 0; p < P; p++) acc[p][h] = _mm512_fmadd_ps(a[p], bb, acc[p][h]);
        }
    }
    for (int p = 0; p < P; p++)
        for (int h = 0; h < H; h++) {
            __m512 t = KN(hsum8x2)(acc[p][h]);
            float hs[2] = {_mm512_cvtss_f32(t), _mm512_cvtss_f32(_mm512_castps256_ps512(_mm512_extractf32x8_ps(t, 1)))};
            for (int e = 0; e < 2; e++) {
                float s = hs[e] + KN(dot_tail)(A + p * lda, B + (2 * h + e) * ldb, K8, K);
                float *c = C + p * ldc + 2 * h + e;
                *c = accumulate ? *c + s : s;
            }
        }
}

/* dot_nt with each group's column pairs packed once (this thread's packing buffer) and 4-row ×
   4-pair blocks: loads per FMA 0.5 against dot_block2's 0.9 (no insert per B chunk). Bitwise
   dot_block's sums. false: no buffer (out of memory), nothing done. */
AI bool KN(dot_nt_packed)(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                          int64_t ldc, bool accumulate) {
    int64_t K8 = K & ~(int64_t)7, cap = 0;
    float *pk = pack_buffer(DOT_JG * K8, &cap);
    if (!pk) return false;
    for (int64_t jg = 0; jg < N; jg += DOT_JG) {
        int64_t je = N - jg < DOT_JG ? N : jg + DOT_JG, npair = (je - jg) / 2;
        const float *Bg = B + jg * ldb;
        KN(pack_pairs)(npair, K8, Bg, ldb, pk);
        for (int64_t i = 0; i < M;) {
            int64_t P = M - i >= 4 ? 4 : M - i >= 2 ? 2 : 1;
            const float *a = A + i * lda;
            float *c = C + i * ldc + jg;
            for (int64_t h = 0; h < npair;) {
                int64_t hn = KN(pair_tile_n)(h, npair), step = 16 * hn;
                const float *p0 = KN(pair_at)(pk, h, npair, K8);
                const float *b = Bg + 2 * h * ldb;
                float *cc = c + 2 * h;
                if (hn == 4) {
                    if (P == 4) KN(dot_packed)(4, 4, K, a, lda, p0, step, b, ldb, cc, ldc, accumulate);
                    else if (P == 2) KN(dot_packed)(2, 4, K, a, lda, p0, step, b, ldb, cc, ldc, accumulate);
                    else KN(dot_packed)(1, 4, K, a, lda, p0, step, b, ldb, cc, ldc, accumulate);
                    h += 4;
                } else { /* the last tile's pairs one at a time */
                    for (int64_t e = 0; e < hn; e++, h++) {
                        const float *pe = p0 + 16 * e, *be = Bg + 2 * h * ldb;
                        float *ce = c + 2 * h;
                        if (P == 4) KN(dot_packed)(4, 1, K, a, lda, pe, step, be, ldb, ce, ldc, accumulate);
                        else if (P == 2) KN(dot_packed)(2, 1, K, a, lda, pe, step, be, ldb, ce, ldc, accumulate);
                        else KN(dot_packed)(1, 1, K, a, lda, pe, step, be, ldb, ce, ldc, accumulate);
                    }
                }
            }
            if ((je - jg) & 1) /* an odd last column */
                for (int64_t q = 0; q < P; q++)
                    KN(dot_block)(1, 1, K, a + q * lda, lda, Bg + (je - jg - 1) * ldb, ldb, c + q * ldc + (je - jg - 1), ldc, accumulate);
            i += P;
        }
    }
    return true;
}
#endif

/* C[M×N] (+)= A[M×K]·B[N×K]ᵀ as dot products over K (v4: column pairs packed per group of B rows
   for K ≥ 64 (dot_nt_packed), else dot_block2's column pairs, then dot_block for an odd last
   column — the same sums) */
/* The packed path packs N·K floats per call and reuses them over the M rows: below 16 rows the
   packing outweighed the saving (session 25, 2 threads: LoHa merge_bwd 1.50–1.62 → 1.34–1.36 and
   GLoRA merge_bwd 1.59–1.78 → 1.44–1.47 t/fl with this bound, DoRA rows and the bypass forwards'
   gains unchanged; docs/bench-cpu.md). Either path gives the same bits. */
#ifndef GK_NT_PACKED_MIN_M
#define GK_NT_PACKED_MIN_M 16 /* the file is included once per ISA */
#endif
AI void KN(dot_nt)(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                   bool accumulate) {
#if defined(GK_FMA) && VL == 16
    if (K >= 64 && N >= 2 && M >= GK_NT_PACKED_MIN_M && KN(dot_nt_packed)(M, N, K, A, lda, B, ldb, C, ldc, accumulate)) return;
#endif
    for (int64_t jg = 0; jg < N; jg += DOT_JG) {
        int64_t je = N - jg < DOT_JG ? N : jg + DOT_JG;
        int64_t i = 0;
        for (; i + 3 <= M; i += 3) {
            int64_t j = jg;
#if defined(GK_FMA) && VL == 16
            for (; j + 8 <= je; j += 8) KN(dot_block2)(3, 4, K, A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, accumulate);
            for (; j + 2 <= je; j += 2) KN(dot_block2)(3, 1, K, A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, accumulate);
#endif
            for (; j + 4 <= je; j += 4) KN(dot_block)(3, 4, K, A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, accumulate);
            for (; j < je; j++) KN(dot_block)(3, 1, K, A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, accumulate);
        }
        for (; i < M; i++) {
            int64_t j = jg;
#if defined(GK_FMA) && VL == 16
            for (; j + 8 <= je; j += 8) KN(dot_block2)(1, 4, K, A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, accumulate);
            for (; j + 2 <= je; j += 2) KN(dot_block2)(1, 1, K, A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, accumulate);
#endif
            for (; j + 4 <= je; j += 4) KN(dot_block)(1, 4, K, A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, accumulate);
            for (; j < je; j++) KN(dot_block)(1, 1, K, A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, accumulate);
        }
    }
}

/* ---- the blocked path ---- */

/* one B panel of a row-major B (B.cs == 1: nn, tn; nt never packs, NT_DOT_K): k [k0, k0+kc),
   columns [j0, j0+nr) (nr ≤ GNR) into dst[k][jj], columns past nr zero */
AI void KN(pack_b_panel)(mat B, int64_t k0, int64_t kc, int64_t j0, int64_t nr, float *dst) {
    const float *b = B.p + k0 * B.rs + j0;
    if (nr == GNR) {
        for (int64_t k = 0; k < kc; k++) {
            KN(stv)(dst + k * GNR, KN(ldv)(b + k * B.rs));
            KN(stv)(dst + k * GNR + VL, KN(ldv)(b + k * B.rs + VL));
        }
    } else {
        for (int64_t k = 0; k < kc; k++)
            for (int64_t jj = 0; jj < GNR; jj++) dst[k * GNR + jj] = jj < nr ? b[k * B.rs + jj] : 0.0f;
    }
}

/* The micro-kernel: C[mr × VL·nv] (+)= A[mr × K]·B[K × VL·nv], nv = 2 (GNR columns) or 1 (the
   VL-column tail of axpy_form: the rows' FMA chains interleaved, not one chain per row, which was
   latency-bound), A read in place (broadcasts: no packing for any layout of A), B row stride ldb;
   mr ≤ MR and nv constants after inlining. acc = 0, k = 0…K−1 in order, then + C when
   accumulating: axpy_form's order. Named accumulators (arrays of vectors were kept partly on the
   stack). */
#define GK_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
AI void KN(micro)(const int mr, const int nv, int64_t K, const float *restrict a, int64_t ars, int64_t acs,
                  const float *restrict b, int64_t ldb, float *restrict c, int64_t ldc, bool accumulate) {
#define GK_DECL(p) VF c##p##0 = KN(zerov)(), c##p##1 = c##p##0;
    GK_ROWS(GK_DECL)
    for (int64_t k = 0; k < K; k++) {
        VF b0 = KN(ldv)(b + k * ldb), b1 = nv > 1 ? KN(ldv)(b + k * ldb + VL) : b0;
        const float *ak = a + k * acs;
#define GK_STEP(p) if (mr > p) { VF av = KN(bcpv)(ak + p * ars); c##p##0 = KN(vfma)(av, b0, c##p##0); if (nv > 1) c##p##1 = KN(vfma)(av, b1, c##p##1); }
        GK_ROWS(GK_STEP)
    }
#define GK_ADDC(p) if (mr > p) { c##p##0 += KN(ldv)(c + p * ldc); if (nv > 1) c##p##1 += KN(ldv)(c + p * ldc + VL); }
    if (accumulate) { GK_ROWS(GK_ADDC) }
#define GK_STOREC(p) if (mr > p) { KN(stv)(c + p * ldc, c##p##0); if (nv > 1) KN(stv)(c + p * ldc + VL, c##p##1); }
    GK_ROWS(GK_STOREC)
#undef GK_DECL
#undef GK_STEP
#undef GK_ADDC
#undef GK_STOREC
}

/* dispatch on mr (1…MR): every instance keeps its accumulators in registers */
AI void KN(micro_any)(int64_t mr, const int nv, int64_t K, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb,
                      float *c, int64_t ldc, bool accumulate) {
    switch (mr) {
    case 6: KN(micro)(6, nv, K, a, ars, acs, b, ldb, c, ldc, accumulate); break;
    case 5: KN(micro)(5, nv, K, a, ars, acs, b, ldb, c, ldc, accumulate); break;
    case 4: KN(micro)(4, nv, K, a, ars, acs, b, ldb, c, ldc, accumulate); break;
    case 3: KN(micro)(3, nv, K, a, ars, acs, b, ldb, c, ldc, accumulate); break;
    case 2: KN(micro)(2, nv, K, a, ars, acs, b, ldb, c, ldc, accumulate); break;
    default: KN(micro)(1, nv, K, a, ars, acs, b, ldb, c, ldc, accumulate); break;
    }
}

#ifdef GK_FMA
/* The column tail: C[mr × nc] (+)= A[mr × K]·B[K × nc], nc < VL, one masked vector per row (no
   access past column nc), micro's order. mr ≤ 4 (axpy_form's row blocks), a constant after
   inlining. */
AI void KN(micro_mask)(const int mr, int64_t nc, int64_t K, const float *restrict a, int64_t ars, int64_t acs,
                       const float *restrict b, int64_t ldb, float *restrict c, int64_t ldc, bool accumulate) {
    VF c0 = KN(zerov)(), c1 = c0, c2 = c0, c3 = c0;
    for (int64_t k = 0; k < K; k++) {
        VF bv = KN(ldm)(b + k * ldb, nc);
        const float *ak = a + k * acs;
        c0 = KN(vfma)(KN(bcpv)(ak), bv, c0);
        if (mr > 1) c1 = KN(vfma)(KN(bcpv)(ak + ars), bv, c1);
        if (mr > 2) c2 = KN(vfma)(KN(bcpv)(ak + 2 * ars), bv, c2);
        if (mr > 3) c3 = KN(vfma)(KN(bcpv)(ak + 3 * ars), bv, c3);
    }
    if (accumulate) {
        c0 += KN(ldm)(c, nc);
        if (mr > 1) c1 += KN(ldm)(c + ldc, nc);
        if (mr > 2) c2 += KN(ldm)(c + 2 * ldc, nc);
        if (mr > 3) c3 += KN(ldm)(c + 3 * ldc, nc);
    }
    KN(stm)(c, nc, c0);
    if (mr > 1) KN(stm)(c + ldc, nc, c1);
    if (mr > 2) KN(stm)(c + 2 * ldc, nc, c2);
    if (mr > 3) KN(stm)(c + 3 * ldc, nc, c3);
}
#endif

/* C tile [mr × nr]: the micro-kernel on it, through an MR×GNR scratch tile when nr < GNR */
AI void KN(tile)(int64_t mr, int64_t nr, int64_t K, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb,
                 float *c, int64_t ldc, bool accumulate) {
    if (nr == GNR) {
        KN(micro_any)(mr, 2, K, a, ars, acs, b, ldb, c, ldc, accumulate);
        return;
    }
    float t[MR * GNR];
    if (accumulate)
        for (int64_t p = 0; p < mr; p++)
            for (int64_t j = 0; j < nr; j++) t[p * GNR + j] = c[p * ldc + j];
    KN(micro_any)(mr, 2, K, a, ars, acs, b, ldb, t, GNR, accumulate);
    for (int64_t p = 0; p < mr; p++)
        for (int64_t j = 0; j < nr; j++) c[p * ldc + j] = t[p * GNR + j];
}

/* The 4 × 3VL variant (12 accumulators, three B vectors, one broadcast) for few rows and wide B:
   C[4 × 3VL] (+)= A[4 × K]·B[K × 3VL], same order as micro. */
#define GK_ROWS4(X) X(0) X(1) X(2) X(3)
AI void KN(micro4x3)(int64_t K, const float *restrict a, int64_t ars, int64_t acs, const float *restrict b, int64_t ldb,
                     float *restrict c, int64_t ldc, bool accumulate) {
#define GK_DECL(p) VF c##p##0 = KN(zerov)(), c##p##1 = c##p##0, c##p##2 = c##p##0;
    GK_ROWS4(GK_DECL)
    for (int64_t k = 0; k < K; k++) {
        VF b0 = KN(ldv)(b + k * ldb), b1 = KN(ldv)(b + k * ldb + VL), b2 = KN(ldv)(b + k * ldb + 2 * VL);
        const float *ak = a + k * acs;
#define GK_STEP(p) { VF av = KN(bcpv)(ak + p * ars); c##p##0 = KN(vfma)(av, b0, c##p##0); c##p##1 = KN(vfma)(av, b1, c##p##1); \
                     c##p##2 = KN(vfma)(av, b2, c##p##2); }
        GK_ROWS4(GK_STEP)
    }
#define GK_ADDC(p) { c##p##0 += KN(ldv)(c + p * ldc); c##p##1 += KN(ldv)(c + p * ldc + VL); c##p##2 += KN(ldv)(c + p * ldc + 2 * VL); }
    if (accumulate) { GK_ROWS4(GK_ADDC) }
#define GK_STOREC(p) { KN(stv)(c + p * ldc, c##p##0); KN(stv)(c + p * ldc + VL, c##p##1); KN(stv)(c + p * ldc + 2 * VL, c##p##2); }
    GK_ROWS4(GK_STOREC)
#undef GK_DECL
#undef GK_STEP
#undef GK_ADDC
#undef GK_STOREC
}
#undef GK_ROWS4

/* The small path for nn/tn: C[M×N] (+)= op(A)·B with op(A)[i][k] = A[i·sa_i + k·sa_k], B rows
   contiguous (stride ldb), nothing packed: 4 × 3VL and 4 × 2VL register blocks (row tails:
   mr × 2VL), then an mr × VL block and the last < VL columns (masked, or scalar in the portable
   build), all in micro's order. */
AI void KN(axpy_form)(int64_t M, int64_t N, int64_t K, const float *A, int64_t sa_i, int64_t sa_k, const float *B, int64_t ldb,
                      float *C, int64_t ldc, bool accumulate) {
    for (int64_t i = 0; i < M; i += 4) {
        int64_t mr = M - i < 4 ? M - i : 4, j = 0;
        const float *a = A + i * sa_i;
        float *c = C + i * ldc;
        if (mr == 4)
            for (; j + 3 * VL <= N; j += 3 * VL) KN(micro4x3)(K, a, sa_i, sa_k, B + j, ldb, c + j, ldc, accumulate);
        for (; j + 2 * VL <= N; j += 2 * VL) KN(micro_any)(mr, 2, K, a, sa_i, sa_k, B + j, ldb, c + j, ldc, accumulate);
        if (j + VL <= N) {
            KN(micro_any)(mr, 1, K, a, sa_i, sa_k, B + j, ldb, c + j, ldc, accumulate);
            j += VL;
        }
        if (j == N) continue;
#ifdef GK_FMA
        switch (mr) {
        case 4: KN(micro_mask)(4, N - j, K, a, sa_i, sa_k, B + j, ldb, c + j, ldc, accumulate); break;
        case 3: KN(micro_mask)(3, N - j, K, a, sa_i, sa_k, B + j, ldb, c + j, ldc, accumulate); break;
        case 2: KN(micro_mask)(2, N - j, K, a, sa_i, sa_k, B + j, ldb, c + j, ldc, accumulate); break;
        default: KN(micro_mask)(1, N - j, K, a, sa_i, sa_k, B + j, ldb, c + j, ldc, accumulate); break;
        }
#else
        for (int64_t ii = 0; ii < mr; ii++)
            for (int64_t jj = j; jj < N; jj++) {
                float s = 0.0f;
                for (int64_t k = 0; k < K; k++) s = KN(fmas)(a[ii * sa_i + k * sa_k], B[k * ldb + jj], s);
                c[ii * ldc + jj] = accumulate ? c[ii * ldc + jj] + s : s;
            }
#endif
    }
}

/* The blocked product on the calling thread: C[M×N] (+)= op(A)·op(B), K ≥ 1.
   PACKED_B: B packed in blocks of nc_max columns (a multiple of GNR; K·nc_max floats of buf) into
   K × GNR panels. DIRECT_B (B.cs == 1): B read in place, its partial last GNR columns by axpy_form.
   M in blocks of mc_max rows (a multiple of MR) so the A block stays in L2 across the panels. */
AI void KN(blocked)(int64_t M, int64_t N, int64_t K, mat A, mat B, float *C, int64_t ldc, bool accumulate, bool pack_b,
                    float *buf, int64_t nc_max, int64_t mc_max) {
    for (int64_t jc = 0; jc < N; jc += nc_max) {
        int64_t nc = N - jc < nc_max ? N - jc : nc_max;
        if (pack_b)
            for (int64_t jr = 0; jr < nc; jr += GNR) KN(pack_b_panel)(B, 0, K, jc + jr, nc - jr < GNR ? nc - jr : GNR, buf + jr * K);
        for (int64_t ic = 0; ic < M; ic += mc_max) {
            int64_t mc = M - ic < mc_max ? M - ic : mc_max;
            const float *a = A.p + ic * A.rs;
            for (int64_t jr = 0; jr < nc; jr += GNR) {
                int64_t nr = nc - jr < GNR ? nc - jr : GNR;
                float *c = C + ic * ldc + jc + jr;
                if (!pack_b && nr == VL) { /* v4's 16-column blocks (a Diag-OFT block): MR chains a vector */
                    for (int64_t ir = 0; ir < mc; ir += MR)
                        KN(micro_any)(mc - ir < MR ? mc - ir : MR, 1, K, a + ir * A.rs, A.rs, A.cs, B.p + jc + jr, B.rs,
                                      c + ir * ldc, ldc, accumulate);
                    continue;
                }
                if (!pack_b && nr < GNR) {
                    KN(axpy_form)(mc, nr, K, a, A.rs, A.cs, B.p + jc + jr, B.rs, c, ldc, accumulate);
                    continue;
                }
                const float *b = pack_b ? buf + jr * K : B.p + jc + jr;
                int64_t ldb = pack_b ? GNR : B.rs;
                for (int64_t ir = 0; ir < mc; ir += MR)
                    KN(tile)(mc - ir < MR ? mc - ir : MR, nr, K, a + ir * A.rs, A.rs, A.cs, b, ldb, c + ir * ldc, ldc, accumulate);
            }
        }
    }
}

/* Rows [i0, i0+m) × columns [j0, j0+n) of C (+)= op(A)·op(B) on the calling thread; buf (NULL:
   the small path) holds buf_floats floats. */
static void KN(gemm_part)(int path, int64_t i0, int64_t m, int64_t j0, int64_t n, int64_t K, mat A, mat B, float *C,
                          int64_t ldc, bool accumulate, float *buf, int64_t buf_floats) {
    const float *a = A.p + i0 * A.rs, *b = B.p + j0 * B.cs;
    float *c = C + i0 * ldc + j0;
    bool pack_b = path == PATH_PACKED_B;
    if (path == PATH_SMALL || K < 1 || (pack_b && buf_floats < K * GNR)) {
        if (B.cs == 1) KN(axpy_form)(m, n, K, a, A.rs, A.cs, b, B.rs, c, ldc, accumulate);
        else KN(dot_nt)(m, n, K, a, A.rs, b, B.cs, c, ldc, accumulate);   /* nt: A.cs == 1, B.rs == 1 */
        return;
    }
    int64_t nc_max = pack_b ? buf_floats / K / GNR * GNR : n, mc_max = (int64_t)65536 / K / MR * MR;
    if (mc_max < MR) mc_max = MR;
    mat as = {a, A.rs, A.cs}, bs = {b, B.rs, B.cs};
    KN(blocked)(m, n, K, as, bs, c, ldc, accumulate, pack_b, buf, nc_max > 0 ? nc_max : GNR, mc_max);
}

#undef AI
#undef GK_ROWS
#undef GNR
