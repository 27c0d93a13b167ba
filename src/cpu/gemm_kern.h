/*
 * gemm_kern.h — the kernels of the fp32 GEMMs in dense.c, written once and included there once
 * per instruction set: KN(name) gives each inclusion its own names (name_v3 under
 * `#pragma GCC target("arch=x86-64-v3")`, name_base for the portable build). Not a public header.
 *
 * Why not CPU_HOT (target_clones) as the rest of src/cpu: GCC 12 compiles the GCC vector types of
 * always_inline helpers into a target("…")/target_clones function as 128-bit halves — every
 * broadcast became vbroadcastss xmm + vinsertf128 or a vinsertps chain and accumulators spilled,
 * which held the old 4×16 kernel near 30 GFLOP/s a core (the peak here is ~100). Under a target
 * pragma the helpers themselves are compiled for the ISA and the loop is clean (one vbroadcastss
 * ymm and two FMAs per row and k).
 *
 * Summation order, identical on every path and independent of M, N and the blocking (so a
 * caller whose tile sizes follow the thread count still gets bitwise the same elements):
 *   nn, tn: acc = 0; acc += a_k·b_k for k = 0…K−1 (FMA in the v3 build);
 *             then acc + C_old when accumulating (axpy_form and the blocked micro-kernel alike)
 *   nt (dot_nt; NT_DOT_K = 1 in dense.c): 8 k-lanes chained over k < K&~7, summed in a fixed tree, plus
 *             the chained tail k ≥ K&~7, then + C_old
 *
 * Contents (all static, all names through KN):
 *   axpy_form   : nn/tn, nothing packed: 4×24 (micro4x24), mr×16 and mr×8 (micro, nv = 2, 1)
 *                 register blocks, B read in place, scalar column tails (tiny products, K < 8,
 *                 M ≤ 4, and the partial last 16 columns of the direct path)
 *   dot_nt      : nt as dot products over K (3×4 blocks of 12 accumulators; B rows in groups of
 *                 DOT_JG so they stay in L2 while every A row block passes)
 *   pack_b_panel: NR-column k-major panels, zero-padded (for nt: the transpose, 8×8 blocks in
 *                 registers in the v3 build)
 *   micro / tile: the MR×NR micro-kernel over the whole K (no K blocking: that would move the
 *                 + C_old of an accumulating call), A read in place by broadcasts; column tails
 *                 through a scratch tile
 *   blocked     : NC (from the buffer) / MC (A block in L2) / NR / MR loops
 *   gemm_part   : one range of rows × columns on the calling thread
 * Expects from dense.c: MR, NR, DOT_JG, the `mat` type, the PATH_* constants.
 */

#define AI static inline __attribute__((always_inline))

AI v8 KN(ld8)(const float *p) {
    v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}
AI void KN(st8)(float *p, v8 v) { memcpy(p, &v, sizeof v); }
AI v8 KN(zero8)(void) { return (v8){0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}; }
/* a·b + c, lane-wise and scalar: one fused multiply-add in the v3 build (GK_FMA), a product and a
   sum in the portable one, written out rather than left to contraction (which GCC applied to some
   loops and not to others, and not at all below -O2), so every path rounds alike */
AI v8 KN(vfma)(v8 a, v8 b, v8 c) {
#ifdef GK_FMA
    return _mm256_fmadd_ps(a, b, c);
#else
    return a * b + c;
#endif
}
AI float KN(fmas)(float a, float b, float c) {
#ifdef GK_FMA
    return __builtin_fmaf(a, b, c);
#else
    return a * b + c;
#endif
}
/* *p in all lanes */
AI v8 KN(bcp8)(const float *p) {
    v8 v = {*p};
#ifdef __clang__
    return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0);
#else
    return __builtin_shuffle(v, (vi8){0, 0, 0, 0, 0, 0, 0, 0});
#endif
}

/* ---- the small path (dot products) ---- */

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
        for (int q = 0; q < 4; q++) acc[p][q] = KN(zero8)();
    for (int64_t k = 0; k < K8; k += 8) {
        v8 a[3];
        for (int p = 0; p < P; p++) a[p] = KN(ld8)(A + p * lda + k);
        for (int q = 0; q < Q; q++) {
            v8 b = KN(ld8)(B + q * ldb + k);
            for (int p = 0; p < P; p++) acc[p][q] = KN(vfma)(a[p], b, acc[p][q]);
        }
    }
    for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) {
            float s = KN(hsum8)(acc[p][q]) + KN(dot_tail)(A + p * lda, B + q * ldb, K8, K);
            float *c = C + p * ldc + q;
            *c = accumulate ? *c + s : s;
        }
}

/* C[M×N] (+)= A[M×K]·B[N×K]ᵀ as dot products over K */
AI void KN(dot_nt)(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                   bool accumulate) {
    for (int64_t jg = 0; jg < N; jg += DOT_JG) {
        int64_t je = N - jg < DOT_JG ? N : jg + DOT_JG;
        int64_t i = 0;
        for (; i + 3 <= M; i += 3) {
            int64_t j = jg;
            for (; j + 4 <= je; j += 4) KN(dot_block)(3, 4, K, A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, accumulate);
            for (; j < je; j++) KN(dot_block)(3, 1, K, A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, accumulate);
        }
        for (; i < M; i++) {
            int64_t j = jg;
            for (; j + 4 <= je; j += 4) KN(dot_block)(1, 4, K, A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, accumulate);
            for (; j < je; j++) KN(dot_block)(1, 1, K, A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, accumulate);
        }
    }
}

/* ---- the blocked path ---- */

#ifdef GK_FMA
/* d[r·ldd + c] = s[c·lds + r] for r, c < 8 (AVX: unpack, shuffle, lane permute) */
AI void KN(tr8x8)(const float *s, int64_t lds, float *d, int64_t ldd) {
    __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + lds), r2 = _mm256_loadu_ps(s + 2 * lds),
           r3 = _mm256_loadu_ps(s + 3 * lds), r4 = _mm256_loadu_ps(s + 4 * lds), r5 = _mm256_loadu_ps(s + 5 * lds),
           r6 = _mm256_loadu_ps(s + 6 * lds), r7 = _mm256_loadu_ps(s + 7 * lds);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
           t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE), u2 = _mm256_shuffle_ps(t1, t3, 0x44),
           u3 = _mm256_shuffle_ps(t1, t3, 0xEE), u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

/* one B panel: k [k0, k0+kc), columns [j0, j0+nr) (nr ≤ NR) into dst[k][jj], columns past nr
   zero */
AI void KN(pack_b_panel)(mat B, int64_t k0, int64_t kc, int64_t j0, int64_t nr, float *dst) {
    const float *b = B.p + k0 * B.rs + j0 * B.cs;
    if (B.cs == 1 && nr == NR) {    /* nn, tn: rows of 16 contiguous floats */
        for (int64_t k = 0; k < kc; k++) {
            KN(st8)(dst + k * NR, KN(ld8)(b + k * B.rs));
            KN(st8)(dst + k * NR + 8, KN(ld8)(b + k * B.rs + 8));
        }
    } else if (B.cs == 1) {
        for (int64_t k = 0; k < kc; k++)
            for (int64_t jj = 0; jj < NR; jj++) dst[k * NR + jj] = jj < nr ? b[k * B.rs + jj] : 0.0f;
    } else {                        /* nt: column jj of the panel is contiguous in k */
        int64_t k8 = 0;
#ifdef GK_FMA
        /* 8 columns × 8 k at a time through an in-register 8×8 transpose (the scalar loop below
           cost as much as the product for K = rank) */
        if (B.rs == 1 && nr == NR) {
            for (; k8 + 8 <= kc; k8 += 8)
                for (int64_t h = 0; h < NR; h += 8) KN(tr8x8)(b + h * B.cs + k8, B.cs, dst + k8 * NR + h, NR);
        }
#endif
        for (int64_t jj = 0; jj < NR; jj++)
            if (jj < nr)
                for (int64_t k = k8; k < kc; k++) dst[k * NR + jj] = b[jj * B.cs + k * B.rs];
            else
                for (int64_t k = k8; k < kc; k++) dst[k * NR + jj] = 0.0f;
    }
}

/* The micro-kernel: C[mr × 8·nv] (+)= A[mr × K]·B[K × 8·nv], nv = 2 (16 columns) or 1 (the
   8-column tail of axpy_form: the rows' FMA chains interleaved, not one chain per row, which was
   latency-bound), A read in place (broadcasts: no packing for any layout of A), B row stride ldb;
   mr ≤ MR and nv constants after inlining. acc = 0, k = 0…K−1 in order, then + C when
   accumulating: axpy_form's order. Named accumulators (arrays of vectors were kept partly on the
   stack). */
#define GK_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
AI void KN(micro)(const int mr, const int nv, int64_t K, const float *restrict a, int64_t ars, int64_t acs,
                  const float *restrict b, int64_t ldb, float *restrict c, int64_t ldc, bool accumulate) {
#define GK_DECL(p) v8 c##p##0 = KN(zero8)(), c##p##1 = c##p##0;
    GK_ROWS(GK_DECL)
    for (int64_t k = 0; k < K; k++) {
        v8 b0 = KN(ld8)(b + k * ldb), b1 = nv > 1 ? KN(ld8)(b + k * ldb + 8) : b0;
        const float *ak = a + k * acs;
#define GK_STEP(p) if (mr > p) { v8 av = KN(bcp8)(ak + p * ars); c##p##0 = KN(vfma)(av, b0, c##p##0); if (nv > 1) c##p##1 = KN(vfma)(av, b1, c##p##1); }
        GK_ROWS(GK_STEP)
    }
#define GK_ADDC(p) if (mr > p) { c##p##0 += KN(ld8)(c + p * ldc); if (nv > 1) c##p##1 += KN(ld8)(c + p * ldc + 8); }
    if (accumulate) { GK_ROWS(GK_ADDC) }
#define GK_STOREC(p) if (mr > p) { KN(st8)(c + p * ldc, c##p##0); if (nv > 1) KN(st8)(c + p * ldc + 8, c##p##1); }
    GK_ROWS(GK_STOREC)
#undef GK_DECL
#undef GK_STEP
#undef GK_ADDC
#undef GK_STOREC
}
#undef GK_ROWS

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

/* C tile [mr × nr]: the micro-kernel on it, through an MR×NR scratch tile when nr < NR */
AI void KN(tile)(int64_t mr, int64_t nr, int64_t K, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb,
                 float *c, int64_t ldc, bool accumulate) {
    if (nr == NR) {
        KN(micro_any)(mr, 2, K, a, ars, acs, b, ldb, c, ldc, accumulate);
        return;
    }
    float t[MR * NR];
    if (accumulate)
        for (int64_t p = 0; p < mr; p++)
            for (int64_t j = 0; j < nr; j++) t[p * NR + j] = c[p * ldc + j];
    KN(micro_any)(mr, 2, K, a, ars, acs, b, ldb, t, NR, accumulate);
    for (int64_t p = 0; p < mr; p++)
        for (int64_t j = 0; j < nr; j++) c[p * ldc + j] = t[p * NR + j];
}

/* The 4×24 variant (12 accumulators, three B vectors, one broadcast) for few rows and wide B:
   C[4×24] (+)= A[4 × K]·B[K × 24], same order as micro. */
#define GK_ROWS4(X) X(0) X(1) X(2) X(3)
AI void KN(micro4x24)(int64_t K, const float *restrict a, int64_t ars, int64_t acs, const float *restrict b, int64_t ldb,
                      float *restrict c, int64_t ldc, bool accumulate) {
#define GK_DECL(p) v8 c##p##0 = KN(zero8)(), c##p##1 = c##p##0, c##p##2 = c##p##0;
    GK_ROWS4(GK_DECL)
    for (int64_t k = 0; k < K; k++) {
        v8 b0 = KN(ld8)(b + k * ldb), b1 = KN(ld8)(b + k * ldb + 8), b2 = KN(ld8)(b + k * ldb + 16);
        const float *ak = a + k * acs;
#define GK_STEP(p) { v8 av = KN(bcp8)(ak + p * ars); c##p##0 = KN(vfma)(av, b0, c##p##0); c##p##1 = KN(vfma)(av, b1, c##p##1); \
                     c##p##2 = KN(vfma)(av, b2, c##p##2); }
        GK_ROWS4(GK_STEP)
    }
#define GK_ADDC(p) { c##p##0 += KN(ld8)(c + p * ldc); c##p##1 += KN(ld8)(c + p * ldc + 8); c##p##2 += KN(ld8)(c + p * ldc + 16); }
    if (accumulate) { GK_ROWS4(GK_ADDC) }
#define GK_STOREC(p) { KN(st8)(c + p * ldc, c##p##0); KN(st8)(c + p * ldc + 8, c##p##1); KN(st8)(c + p * ldc + 16, c##p##2); }
    GK_ROWS4(GK_STOREC)
#undef GK_DECL
#undef GK_STEP
#undef GK_ADDC
#undef GK_STOREC
}
#undef GK_ROWS4

/* The small path for nn/tn: C[M×N] (+)= op(A)·B with op(A)[i][k] = A[i·sa_i + k·sa_k], B rows
   contiguous (stride ldb), nothing packed: 4×24 and 4×16 register blocks (row tails: mr×16),
   then an mr×8 block and scalar column tails, all in micro's order. */
AI void KN(axpy_form)(int64_t M, int64_t N, int64_t K, const float *A, int64_t sa_i, int64_t sa_k, const float *B, int64_t ldb,
                      float *C, int64_t ldc, bool accumulate) {
    for (int64_t i = 0; i < M; i += 4) {
        int64_t mr = M - i < 4 ? M - i : 4, j = 0;
        const float *a = A + i * sa_i;
        float *c = C + i * ldc;
        if (mr == 4)
            for (; j + 24 <= N; j += 24) KN(micro4x24)(K, a, sa_i, sa_k, B + j, ldb, c + j, ldc, accumulate);
        for (; j + 16 <= N; j += 16) KN(micro_any)(mr, 2, K, a, sa_i, sa_k, B + j, ldb, c + j, ldc, accumulate);
        if (j + 8 <= N) {
            KN(micro_any)(mr, 1, K, a, sa_i, sa_k, B + j, ldb, c + j, ldc, accumulate);
            j += 8;
        }
        for (int64_t ii = 0; ii < mr; ii++) {
            int64_t jj = j;
            for (; jj < N; jj++) {
                float s = 0.0f;
                for (int64_t k = 0; k < K; k++) s = KN(fmas)(a[ii * sa_i + k * sa_k], B[k * ldb + jj], s);
                c[ii * ldc + jj] = accumulate ? c[ii * ldc + jj] + s : s;
            }
        }
    }
}

/* The blocked product on the calling thread: C[M×N] (+)= op(A)·op(B), K ≥ 1.
   PACKED_B: B packed in blocks of nc_max columns (a multiple of NR; K·nc_max floats of buf) into
   K × NR panels. DIRECT_B (B.cs == 1): B read in place, its partial last 16 columns by axpy_form.
   M in blocks of mc_max rows (a multiple of MR) so the A block stays in L2 across the panels. */
AI void KN(blocked)(int64_t M, int64_t N, int64_t K, mat A, mat B, float *C, int64_t ldc, bool accumulate, bool pack_b,
                    float *buf, int64_t nc_max, int64_t mc_max) {
    for (int64_t jc = 0; jc < N; jc += nc_max) {
        int64_t nc = N - jc < nc_max ? N - jc : nc_max;
        if (pack_b)
            for (int64_t jr = 0; jr < nc; jr += NR) KN(pack_b_panel)(B, 0, K, jc + jr, nc - jr < NR ? nc - jr : NR, buf + jr * K);
        for (int64_t ic = 0; ic < M; ic += mc_max) {
            int64_t mc = M - ic < mc_max ? M - ic : mc_max;
            const float *a = A.p + ic * A.rs;
            for (int64_t jr = 0; jr < nc; jr += NR) {
                int64_t nr = nc - jr < NR ? nc - jr : NR;
                float *c = C + ic * ldc + jc + jr;
                if (!pack_b && nr < NR) {
                    KN(axpy_form)(mc, nr, K, a, A.rs, A.cs, B.p + jc + jr, B.rs, c, ldc, accumulate);
                    continue;
                }
                const float *b = pack_b ? buf + jr * K : B.p + jc + jr;
                int64_t ldb = pack_b ? NR : B.rs;
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
    if (path == PATH_SMALL || K < 1 || (pack_b && buf_floats < K * NR)) {
        if (B.cs == 1) KN(axpy_form)(m, n, K, a, A.rs, A.cs, b, B.rs, c, ldc, accumulate);
        else KN(dot_nt)(m, n, K, a, A.rs, b, B.cs, c, ldc, accumulate);   /* nt: A.cs == 1, B.rs == 1 */
        return;
    }
    int64_t nc_max = pack_b ? buf_floats / K / NR * NR : n, mc_max = (int64_t)65536 / K / MR * MR;
    if (mc_max < MR) mc_max = MR;
    mat as = {a, A.rs, A.cs}, bs = {b, B.rs, B.cs};
    KN(blocked)(m, n, K, as, bs, c, ldc, accumulate, pack_b, buf, nc_max > 0 ? nc_max : NR, mc_max);
}

#undef AI
