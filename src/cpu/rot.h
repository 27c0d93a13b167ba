/*
 * rot.h — the block products of the OFT family on the CPU (Diag-OFT, BOFT: diag_oft.c, boft.c):
 * a bs×bs block applied to bs rows, a small-K GEMM with the block's scalars broadcast and the
 * rows streamed once, conversions and the epilogue in registers (rot.c, rot_kern.h); the
 * register transposes of the linear bypass's channel-row tiles; and BOFT's backward G_N dot
 * products (cpu_rot_gn).
 *
 * Channel-major (cpu_rot_rows): nk input rows in_k (nk = bs unless set) and bs output rows out_i,
 * each w columns:
 *   acc_i[j] = Σ_{k<nk} A[i·ai + k·ak]·in_k[j]          in_k = src_k (dtype sdt, rounded through
 *                                                       T) [+ add_k, fp32: BOFT's X0 + Δ]
 *   SET    out_i = acc_i, or ρ_i·acc_i                  (stored as odt)
 *   DELTA  out_i = ρ_i·acc_i + (ρ_i − 1)·in_i            (ρ_i = 1 without ρ; Diag-OFT, where the
 *                                                       input rows are the output rows)
 *   ADD    out_i = base_i + acc_i                        (fp32 rows; BOFT's stage updates)
 * (nk ≠ bs: SET and ADD only — Diag-OFT's linear backward takes G_M_k += X_kᵀ·G''_k this way,
 * one input row per token, A(i, t) = X[t, i]: cpu_gemm_tn's bits.)
 * Token-major (cpu_rot_tokens, Diag-OFT's linear bypass, channels contiguous in a token row):
 *   out[t, c] = Σ_{k<bs} x[t, k]·Op[k, c] per block, with the same epilogues (ρ per channel);
 *   with kc set, the sum runs as chains of kc terms, each from 0, each added to the chains before
 *   (the bits of cpu_gemm_nn called per chunk of kc terms, accumulating after the first).
 *
 * Summation order: acc = 0, then one fused multiply-add per k, k = 0…bs−1 (a product and a sum in
 * the portable copy) — dense.c's nn/tn order, so the results are bitwise those of cpu_gemm_tn/nn
 * followed by the same epilogue in fp32, at every ISA level (v3 and v4 give the same bits; the
 * epilogue's products and sums are separate roundings: fp-contract off). Nothing depends on w,
 * the column split or the thread count.
 *
 * In place: out rows may be the input rows when bs ≤ cpu_rot_rows_max() (every input vector of a
 * column range is loaded before its outputs are stored); callers stage the input otherwise.
 * Row pointers address column 0 of the range (bytes for src/dst, floats for add/base).
 * Extra memory: none (registers and a few stack vectors).
 */
#ifndef LYCO_CPU_ROT_H
#define LYCO_CPU_ROT_H

#include "cpu.h"

typedef enum { CPU_ROT_SET, CPU_ROT_DELTA, CPU_ROT_ADD } cpu_rot_mode;

typedef struct {
    int64_t bs;
    const float *A;             /* element (i, k) at A[i·ai + k·ak] */
    int64_t ai, ak;
    const char *const *src;     /* bs input rows */
    lyco_dtype sdt, T;
    const float *const *add;    /* NULL, or bs fp32 rows added to the input */
    char *const *dst;           /* bs output rows */
    lyco_dtype odt;             /* SET, DELTA; ADD writes fp32 */
    const float *const *base;   /* ADD: bs fp32 rows (may be dst's) */
    const float *rho;           /* SET, DELTA: bs scales, or NULL */
    cpu_rot_mode mode;
    int64_t nk;                 /* input rows (terms), 0: bs; ≠ bs only with SET or ADD */
} cpu_rot;

/* The rows of r over columns [0, w). */
void cpu_rot_rows(const cpu_rot *r, int64_t w);
/* The largest bs that cpu_rot_rows takes in one register block (in place allowed). */
int64_t cpu_rot_rows_max(void);

typedef struct {
    int64_t bs, nb;             /* block size, blocks of the range */
    const float *Op;            /* nb blocks of bs×bs, row-major: out = x·Op per block */
    const float *X;             /* w tokens × nb·bs channels, fp32 (rounded), ld = nb·bs */
    char *dst;                  /* token t's first channel at dst + t·dstride bytes */
    int64_t dstride;
    lyco_dtype odt;
    const float *rho;           /* nb·bs scales, or NULL */
    cpu_rot_mode mode;          /* SET or DELTA (in = X) */
    int64_t kc;                 /* terms per chain; 0: one chain of bs */
} cpu_rot_tok;

/* Tokens [0, w) of q. */
void cpu_rot_tokens(const cpu_rot_tok *q, int64_t w);

/* BOFT's backward G_N product: C[p·bs + q] += ⟨a_p, b_q⟩ over w columns (p, q < bs; a_p, b_q fp32
   rows by pointer, C compact bs × bs) — the bits of cpu_gemm_nt accumulating (dense.c: 8 k-lanes
   chained, the fixed tree, the chained tail, then + C), without gathering the b rows. x86-64-v4
   and bs even ≤ 12 only: returns false otherwise (nothing done; the caller gathers and calls
   cpu_gemm_nt). */
bool cpu_rot_gn(int64_t bs, const float *const *a, const float *const *b, int64_t w, float *C);

/* Tile transposes of the linear bypass (cayley.c's cpu_oft_load / cpu_oft_store; a token's
   channels contiguous in the tensor, a channel's tokens contiguous in the fp32 tile), element
   values as cpu_load / cpu_store give them:
   cpu_rot_tr_in:  X[c·ldx + t] = RN_T(src[t·ld + c])     (src of dtype sdt, ld in elements)
   cpu_rot_tr_out: dst[t·ld + c] = X[c·ldx + t] as odt   (RNE)
   for t < nt, c < nc. */
void cpu_rot_tr_in(const char *src, int64_t ld, lyco_dtype sdt, lyco_dtype T, int64_t nt, int64_t nc, float *X, int64_t ldx);
void cpu_rot_tr_out(const float *X, int64_t ldx, int64_t nt, int64_t nc, char *dst, int64_t ld, lyco_dtype odt);

#endif
