/* Internal interface between the matrix multiply's driver (gemm.c) and its per-CPU kernels.
 *
 * Operands are packed as A' (uint8) and B' (int8): A' = A for uint8 A, A xor 0x80 (= A + 128) for
 * int8 A; B' = B for int8 B, B xor 0x80 (= B - 128) for uint8 B. With the effective zero points
 * za' = za + 128*(A int8) and zb' = zb - 128*(B uint8), (A - za)(B - zb) = (A' - za')(B' - zb'), so
 *     acc = dot(A', B') - zb' * rowsum(A') - za' * (colsum(B') - K * zb').
 * A few rows of A with a row-major B can skip packing B (dot_row_major): there A'' = A - za is
 * packed as int16 words (|A''| <= 255), B's bytes are read as they are (sign- or zero-extended),
 * and acc = dot(A'', B) - zb * rowsum(A''), which is the formula above with za' = 0, zb' = zb.
 * Each kernel set has its own tile of MR x NR outputs and its own step along K (`group_multiple`
 * groups of 4 k); K is zero-padded to whole steps.
 * A' panels are MR rows of the padded K bytes each, `lda` bytes apart: a row-major uint8 A is used
 * in place when K needs no padding; otherwise rows are copied (flipped, zero-padded).
 * Packed B: panels of NR columns, per group of 4 k the NR columns' 4 bytes ([group][column][4]),
 * which is what vpdpbusd multiplies against a broadcast dword of an A row, and the layout of an
 * AMX B tile (one group per tile row); or, for kernels with `b_pair_layout`, per group the NR
 * columns' first 2 bytes, then their last 2 ([group][pair][column][2]). Padding is zero.
 */
#ifndef DMLQ_GEMM_KERNELS_H
#define DMLQ_GEMM_KERNELS_H

#include <math.h>

#include "common.h"

enum {
    GEMM_MR = 8, /* the vector kernels' tile */
    GEMM_NR = 48,
    AMX_MR = 32, /* the AMX kernel's tile: 2 x 2 tiles of 16 x 16 */
    AMX_NR = 32,
    GEMM_MAX_TILE = AMX_MR * GEMM_NR, /* outputs of the largest tile */
    /* Groups of 4 k per exact int32 dot product: |A' B'| <= 255 * 128, so 32768 terms fit, and
     * the whole accumulator fits too while K <= 32768 (|(A - za)(B - zb)| <= 65025), so it may be
     * combined with wrapping int32 arithmetic. Longer K sums chunks in int64. */
    GEMM_CHUNK_GROUPS = 8192
};

/* The requantization of one problem: per-row and per-column vectors. */
typedef struct {
    ptrdiff_t k;
    const double *a_scale, *b_scale, *out_divisor, *out_zero_point; /* divisor: os, or 1/os (reciprocal) */
    const int32_t *a_zero, *b_zero;                                  /* za', zb' */
    /* float32 estimates of the quotient's factors (as / os per row, bs per column), usable where
     * `estimate` is set: no NaN possible, every factor within [2**-60, 2**60], and every estimate
     * below 2**20 in magnitude (from the largest factors and K). */
    const float *row_factor, *column_factor;
    int reciprocal;
    int nan_possible; /* some scale is not finite, or an output scale (or its reciprocal) is 0 or inf */
    int estimate;
    int a_zero_uniform, b_zero_uniform; /* one za' for every row, one zb' for every column */
    double lo, hi;
    const struct dmlq_gemm_epilogue *epilogue; /* the problem's (family.h), or NULL */
    int rows_uniform; /* one row factor and one output zero point for every real row */
} gemm_quantization;

/* One tile's place: rows m0.., columns n0.., how many are real, where the output goes. */
typedef struct {
    ptrdiff_t m0, n0, rows, columns;
    ptrdiff_t dot_stride;           /* int32 dot products per row of the tile (NR) */
    char *out;                      /* element (m0, n0) */
    ptrdiff_t out_row, out_col;
    const int32_t *row_sums;        /* rowsum(A') of this batch, [m] */
    const int32_t *column_sums;     /* colsum(B') of this batch, [n] */
    ptrdiff_t batch;
} gemm_tile;

typedef struct {
    int mr, nr, group_multiple;
    int a_group_bytes; /* from one group of 4 k to the next in an A' panel: 4, or more for a packed layout */
    int b_pair_layout; /* B' panels in pairs of k (see above) */
    int real_rows_only; /* `dot` reads only the real rows of an A' panel: a last, partial one is read in place too */
    /* dot(A', B') of one MR x NR tile over `groups` groups into tile[MR * NR] (row-major); only the
     * first `rows` rows and `columns` columns are real (a kernel may leave the others unwritten). */
    void (*dot)(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int rows, int columns,
                int32_t *tile);
    /* Optional: `dot` over B' panels widened beforehand by widen_b (their bytes sign-extended to words,
     * twice the panel's bytes): a large M reuses each panel over many A' panels, and one widening per
     * block and thread takes the sign extension off the kernel's loop (gemm.c's wide_b). */
    void (*dot_wide)(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int rows, int columns,
                     int32_t *tile);
    void (*widen_b)(const int8_t *panels, ptrdiff_t bytes, int8_t *wide);
    /* Optional: `dot` of a whole MR x NR tile whose sums fit in int32, corrected by the zero-point terms
     * and stored as int32 straight into the tile's output (contiguous int32 columns): the int32
     * epilogue's result (gemm_epilogue.c) without the tile's round trip through memory. */
    void (*dot_int32)(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, const gemm_tile *tile,
                      const gemm_quantization *q);
    /* Optional: `dot` of a whole MR x NR tile whose sums fit in int32, requantized into its 8-bit output
     * (contiguous bytes, no epilogue, q->estimate set) straight from the accumulators: `requantize`'s
     * result without the tile's round trip through memory. */
    void (*dot_requantize)(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, const gemm_tile *tile,
                           const gemm_quantization *q);
    /* Optional, for up to `row_major_rows` rows of A with a row-major B read where it lies (see
     * above: A'' and B itself): adds dot(A'', B) over `pairs` pairs of k into tile[rows][panels * NR]
     * (`panels` panels of NR columns side by side from b on, rows b_row apart; A'' as packed by
     * pack_a_row_major, one pair of k of row r at a[pair * a_pair_words + 2 * r]), prefetching the
     * same columns `ahead` rows of B on (0: none). The tile's columns are in the kernel's own order
     * until row_major_in_order puts them in order (`panels` runs of NR). */
    void (*dot_row_major)(const int16_t *a, ptrdiff_t a_pair_words, const char *b, ptrdiff_t b_row, ptrdiff_t pairs,
                          ptrdiff_t ahead, int rows, int panels, int b_signed, int32_t *tile);
    /* A'' of `rows` rows of an even k into [pair][rows][2 words], and its rows' sums. */
    void (*pack_a_row_major)(int16_t *dst, const char *a, ptrdiff_t rows, ptrdiff_t k, ptrdiff_t a_row,
                             ptrdiff_t a_col, int a_signed, const int32_t *zero_points, int32_t *row_sums);
    void (*row_major_in_order)(int32_t *tile, ptrdiff_t panels);
    int row_major_rows;
    int row_major_rows_always; /* up to this many rows, B is read in place at any size (gemm.c) */
    /* The tile's output from its dot products when K <= 32768 (int32 combination). */
    void (*requantize)(const int32_t *dot, const gemm_tile *tile, const gemm_quantization *q);
    /* Packs an A' panel in the kernel's own layout and sums its rows, where the kernel has one
     * (else panels are rows of `lda` bytes, read in place where possible, gemm.c). */
    void (*pack_a)(uint8_t *dst, const char *a, ptrdiff_t rows, ptrdiff_t k, ptrdiff_t groups, ptrdiff_t a_row,
                   ptrdiff_t a_col, uint8_t flip, int32_t *row_sums);
    /* `rows` sums of k bytes, rows lda bytes apart (for panels that pack_a does not pack). */
    void (*row_sums)(const uint8_t *a, ptrdiff_t lda, ptrdiff_t k, int rows, int32_t *sums);
    /* The sums of a packed B panel of `columns` columns. */
    void (*column_sums)(const int8_t *b, ptrdiff_t groups, int columns, int32_t *sums);
    /* Optional, for kernels with `b_pair_layout`: `panels` whole panels of `pairs` pairs of k of a
     * row-major B with contiguous columns (bytes xor `flip`, rows b_row apart, the first panel's
     * columns from b on) into panels panel_bytes apart from dst, each column's sum added to sums. */
    void (*pack_b_pairs)(int8_t *dst, ptrdiff_t panel_bytes, const uint8_t *b, ptrdiff_t b_row, ptrdiff_t pairs,
                         ptrdiff_t panels, uint8_t flip, int32_t *sums);
    /* Optional, for kernels with the group layout: the same for `groups` groups of 4 k, the last
     * panel of `last_columns` columns (zero beyond them). */
    void (*pack_b_whole_groups)(int8_t *dst, ptrdiff_t panel_bytes, const uint8_t *b, ptrdiff_t b_row, ptrdiff_t groups,
                                ptrdiff_t panels, int last_columns, uint8_t flip, int32_t *sums);
    /* Called by each thread before and after its share of a multiply (may be NULL). */
    void (*begin)(void);
    void (*end)(void);
} gemm_kernels;

extern const gemm_kernels dmlq_gemm_portable;
#if DMLQ_X86
extern const gemm_kernels dmlq_gemm_avx2;
extern const gemm_kernels dmlq_gemm_vnni;
extern const gemm_kernels dmlq_gemm_amx; /* its `dot` is NULL where the compiler has no AMX */
extern const gemm_kernels dmlq_gemm_vnni_rows; /* the VNNI level's B read in place, and nothing else */
void dmlq_gemm_pack_a_row_major_avx2(int16_t *dst, const char *a, ptrdiff_t rows, ptrdiff_t k, ptrdiff_t a_row,
                                     ptrdiff_t a_col, int a_signed, const int32_t *zero_points, int32_t *row_sums);
void dmlq_gemm_requantize_vnni(const int32_t *dot, const gemm_tile *tile, const gemm_quantization *q);
void dmlq_gemm_column_sums_vnni(const int8_t *b, ptrdiff_t groups, int columns, int32_t *sums);

DMLQ_BEGIN_TARGET(DMLQ_VNNI_FEATURES)
/* 64 bytes of each of 4 rows as 64 dwords of 4 bytes (one from each row, row 0 lowest), in column
 * order in dwords[0..3]: the bytes of rows 0 1 and 2 3 interleaved, then their words (128-bit lane L of
 * d[i] holds columns 16 L + 4 i .. 16 L + 4 i + 3), put in order by a 4 x 4 transpose of lanes. */
static inline __attribute__((always_inline)) void dmlq_dwords_of_rows(const __m512i *r, __m512i *dwords) {
    const __m512i low01 = _mm512_unpacklo_epi8(r[0], r[1]), high01 = _mm512_unpackhi_epi8(r[0], r[1]);
    const __m512i low23 = _mm512_unpacklo_epi8(r[2], r[3]), high23 = _mm512_unpackhi_epi8(r[2], r[3]);
    const __m512i d0 = _mm512_unpacklo_epi16(low01, low23), d1 = _mm512_unpackhi_epi16(low01, low23);
    const __m512i d2 = _mm512_unpacklo_epi16(high01, high23), d3 = _mm512_unpackhi_epi16(high01, high23);
    const __m512i t0 = _mm512_shuffle_i64x2(d0, d1, 0x44), t1 = _mm512_shuffle_i64x2(d2, d3, 0x44);
    const __m512i t2 = _mm512_shuffle_i64x2(d0, d1, 0xee), t3 = _mm512_shuffle_i64x2(d2, d3, 0xee);
    dwords[0] = _mm512_shuffle_i64x2(t0, t1, 0x88), dwords[1] = _mm512_shuffle_i64x2(t0, t1, 0xdd);
    dwords[2] = _mm512_shuffle_i64x2(t2, t3, 0x88), dwords[3] = _mm512_shuffle_i64x2(t2, t3, 0xdd);
}
DMLQ_END_TARGET
#endif

void dmlq_gemm_requantize_portable(const int32_t *dot, const gemm_tile *tile, const gemm_quantization *q);
void dmlq_gemm_row_sums_portable(const uint8_t *a, ptrdiff_t lda, ptrdiff_t k, int rows, int32_t *sums);
void dmlq_gemm_column_sums_portable(const int8_t *b, ptrdiff_t groups, int columns, int32_t *sums);

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
