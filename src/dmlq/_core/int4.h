/* Blockwise 4-bit kernels (int4.c). */
#ifndef DMLQ_INT4_H
#define DMLQ_INT4_H

#include "common.h"

/* A [rows, cols] matrix of packed nibbles (row-major, element 0 in the low nibble of byte 0) and its
 * float side, with one scale and zero point per block of block_rows x block_cols elements. */
typedef struct {
    ptrdiff_t rows, cols, block_rows, block_cols; /* the blocks divide rows and cols */
    int is_signed;                                /* int4 (two's complement nibbles) or uint4 */
    const uint8_t *packed;                        /* dequantize: the input */
    uint8_t *packed_out;                          /* quantize: the output (other nibbles kept) */
    char *floats;                                 /* contiguous float32 or float16: output or input */
    int float_type;
    const char *scale;                            /* [rows / block_rows, cols / block_cols] */
    int scale_type;
    ptrdiff_t scale_row, scale_col;               /* byte strides */
    const int8_t *zero_point;                     /* values, or NULL for none */
    ptrdiff_t zero_row, zero_col;                 /* element strides */
} dmlq_int4_problem;

void dmlq_dequantize_int4(const dmlq_int4_problem *problem, int threads);
void dmlq_quantize_int4(const dmlq_int4_problem *problem, int reciprocal, int threads);

#endif
