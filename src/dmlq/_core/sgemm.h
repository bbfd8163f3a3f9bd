/* The float GEMM (DML_GEMM, float32 and float16): its problem, and the interface between its driver
 * (sgemm.c) and the per-CPU kernels (sgemm.c's portable set, sgemm_avx2.c, sgemm_avx512.c).
 *
 * The numbers (dmlq.reference.gemm; docs/operators.md, Gemm): per output element, in float32,
 *     acc = +0;  acc = fma(a[i, k], b[k, j], acc) for k = 0, 1, ..., K - 1  (one rounding per term)
 *     x = alpha * acc;  x = x + beta * c[i, j]  (each operation rounded; no C: x alone)
 *     out = activation(x)  (dmlq.activations' float64 formula, rounded to float32), then rounded once
 *     more for a float16 output.
 * float16 operands are widened exactly. The K order is the same at every level, blocking and thread
 * count, so every level and thread count gives the same bits: a sum over a K block continues from the
 * float32 partial sum of the blocks before it (kernels load it as their accumulators).
 *
 * Packed operands: an A panel holds MR rows of a block of k as [k][MR] floats (rows beyond the real
 * ones are never read); a B panel NR columns as [k][NR] floats, zero beyond the real columns. A
 * row-major float32 B may also be read where it lies, [k][NR] with its own row stride.
 */
#ifndef DMLQ_SGEMM_H
#define DMLQ_SGEMM_H

#include "common.h"

typedef struct {
    ptrdiff_t batches, m, n, k;
    int type; /* DMLQ_F32 or DMLQ_F16: A, B, C and the output alike */
    const char *a, *b, *c; /* c may be NULL: no C */
    char *out;
    const ptrdiff_t *a_offsets, *b_offsets, *c_offsets, *out_offsets; /* bytes, per batch */
    /* byte strides of op(A) [m, k], op(B) [k, n], C and the output [m, n] (TransA/TransB applied) */
    ptrdiff_t a_row, a_col, b_row, b_col, c_row, c_col, out_row, out_col;
    float alpha, beta;
    int activation;   /* DMLQ_ACT_* */
    double p[2];      /* the activation's float32 parameters, widened */
} dmlq_sgemm_problem;

/* 0, or -1 when memory runs out; k >= 1 (DirectML's sizes are at least 1). */
int dmlq_sgemm(const dmlq_sgemm_problem *p, int threads);

enum { SGEMM_MAX_MR = 16, SGEMM_MAX_NR = 32 };

typedef struct {
    int mr, nr;     /* the tile */
    int mc, kc, nc; /* the blocks: rows of A and columns of B per unit, terms per K block */
    /* `rows` (1..MR) x `columns` outputs over `k` terms: the accumulators start at +0, or with `load` at
     * c's float32 partial sums, then take fma(a[p * MR + r], b[p * ldb + j], acc) for p in order;
     * stored to c, rows ldc floats apart. `columns` is NR unless `masked_tile`: then 1..NR, and
     * neither B nor c is touched beyond them. */
    void (*tile)(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int rows,
                 int columns, int load);
    int masked_tile;
    /* `rows` rows of k elements of op(A) (element (r, p) at a + r * a_row + p * a_col bytes, float32 or
     * float16 `type`) into a panel [k][MR]. */
    void (*pack_a)(float *dst, const char *a, int rows, ptrdiff_t k, ptrdiff_t a_row, ptrdiff_t a_col, int type);
    /* `columns` (1..NR) columns of k elements of op(B) into a panel of NR columns, zero beyond them, its
     * rows ldd floats apart (NR, or more where several panels lie side by side). */
    void (*pack_b)(float *dst, ptrdiff_t ldd, const char *b, int columns, ptrdiff_t k, ptrdiff_t b_row,
                   ptrdiff_t b_col, int type);
    /* Optional (NULL): `rows` (1..few_rows_max) x `columns` (1..few_columns) outputs, as `tile` computes
     * them, on a panel of few_columns: the more accumulators, the more independent sums a few rows
     * have, and a row-major B read where it lies streams row by row. Only c's `columns` are stored. */
    void (*few_rows)(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int rows,
                     int columns, int load);
    int few_rows_max, few_columns;
    /* n float32 values rounded to float16, to nearest even, into contiguous halves (which NaN a NaN
     * becomes is not promised: the GEMM promises none). */
    void (*store_halves)(uint16_t *dst, const float *src, ptrdiff_t n);
    const dmlq_row_table *rows; /* the level's element-wise rows: the fused activation */
} sgemm_kernels;

extern const sgemm_kernels dmlq_sgemm_portable;
#if DMLQ_X86
extern const sgemm_kernels dmlq_sgemm_avx2;
extern const sgemm_kernels dmlq_sgemm_avx512;
#endif

/* The portable packing, which the level's own packing falls back to for layouts it does not handle. */
void dmlq_sgemm_pack_a_portable(float *dst, const char *a, int rows, ptrdiff_t k, ptrdiff_t a_row, ptrdiff_t a_col,
                                int type, int mr);
void dmlq_sgemm_pack_b_portable(float *dst, ptrdiff_t ldd, const char *b, int columns, ptrdiff_t k,
                                ptrdiff_t b_row, ptrdiff_t b_col, int type, int nr);

#endif
