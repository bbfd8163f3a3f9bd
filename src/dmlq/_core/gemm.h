/* Internal interface between the matrix multiply's driver (gemm.c) and its per-CPU kernels.
 *
 * Operands are packed as A' (uint8) and B' (int8): A' = A for uint8 A, A xor 0x80 (= A + 128) for
 * int8 A; B' = B for int8 B, B xor 0x80 (= B - 128) for uint8 B. With the effective zero points
 * za' = za + 128*(A int8) and zb' = zb - 128*(B uint8), (A - za)(B - zb) = (A' - za')(B' - zb'), so
 *     acc = dot(A', B') - zb' * rowsum(A') - za' * (colsum(B') - K * zb').
 * A' panels are MR rows of K bytes each, `lda` bytes apart: a row-major uint8 A is used in place
 * when K is a multiple of 4; otherwise rows are copied (flipped, zero-padded to whole groups of 4).
 * Packed B: panels of NR columns, per group of 4 k the NR columns' 4 bytes ([group][column][4]),
 * which is what vpdpbusd multiplies against a broadcast dword of an A row. Padding is zero.
 */
#ifndef DMLQ_GEMM_H
#define DMLQ_GEMM_H

#include <math.h>

#include "common.h"

enum {
    GEMM_MR = 8,
    GEMM_NR = 48,
    /* Groups of 4 k per exact int32 dot product: |A' B'| <= 255 * 128, so 32768 terms fit, and
     * the whole accumulator fits too while K <= 32768 (|(A - za)(B - zb)| <= 65025), so it may be
     * combined with wrapping int32 arithmetic. Longer K sums chunks in int64. */
    GEMM_CHUNK_GROUPS = 8192
};

/* The requantization of one problem: per-row and per-column vectors. */
typedef struct {
    ptrdiff_t k;
    const double *a_scale, *b_scale, *out_divisor, *out_zero_point; /* divisor: os, or 1/os (reciprocal) */
    const double *estimate_factor;                                   /* as * (1 / os), for estimates */
    const int32_t *a_zero, *b_zero;                                  /* za', zb' */
    int reciprocal;
    int nan_possible; /* some scale is not finite, or an output scale (or its reciprocal) is 0 or inf */
    double lo, hi;
} gemm_quantization;

/* One tile's place: rows m0.., columns n0.., how many are real, where the output goes. */
typedef struct {
    ptrdiff_t m0, n0, rows, columns;
    char *out;                      /* element (m0, n0) */
    ptrdiff_t out_row, out_col;
    const int32_t *row_sums;        /* rowsum(A') of this batch, [m] */
    const int32_t *column_sums;     /* colsum(B') of this batch, [n] */
} gemm_tile;

typedef struct {
    /* dot(A', B') of one MR x NR tile over `groups` groups into tile[MR * NR] (row-major). */
    void (*dot)(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int32_t *tile);
    /* The tile's output from its dot products when K <= 32768 (int32 combination). */
    void (*requantize)(const int32_t *dot, const gemm_tile *tile, const gemm_quantization *q);
    void (*row_sums)(const uint8_t *a, ptrdiff_t lda, ptrdiff_t k, int32_t *sums); /* MR sums of k bytes */
    void (*column_sums)(const int8_t *b, ptrdiff_t groups, int32_t *sums);  /* NR sums */
} gemm_kernels;

extern const gemm_kernels dmlq_gemm_portable;
#if DMLQ_X86
extern const gemm_kernels dmlq_gemm_avx2;
extern const gemm_kernels dmlq_gemm_vnni;
#endif

void dmlq_gemm_requantize_portable(const int32_t *dot, const gemm_tile *tile, const gemm_quantization *q);
void dmlq_gemm_row_sums_portable(const uint8_t *a, ptrdiff_t lda, ptrdiff_t k, int32_t *sums);
void dmlq_gemm_column_sums_portable(const int8_t *b, ptrdiff_t groups, int32_t *sums);

/* clamp(round(acc * (as * bs) / os) + ozp) with NaN -> 0, as the reference evaluates it. */
static inline uint8_t dmlq_requantize_one(int64_t acc, double a_scale, double b_scale, double divisor,
                                          int reciprocal, double zero_point, double lo, double hi) {
    double value = (double)acc * (a_scale * b_scale);
    value = reciprocal ? value * divisor : value / divisor;
    value = nearbyint(value) + zero_point;
    value = value < lo ? lo : value;
    value = value > hi ? hi : value;
    return (uint8_t)(int32_t)(value == value ? value : 0.0);
}

#endif
