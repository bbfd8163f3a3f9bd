/* The matrix multiply's AVX-512 VNNI kernels: vpdpbusd dot products of 1-8 rows, a vectorised
 * requantization and the packing of B. (A few rows with a row-major B read in place: gemm_vnni_rows.c.) */
#include "gemm.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_VNNI_FEATURES)

enum { VECTORS = GEMM_NR / 16 };

/* acc += dot products of 4 bytes: unsigned `a` times signed `b`. Inline assembly because GCC 12
 * copies the accumulator around the intrinsic, which halves the kernel's speed. */
static inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* `rows` x NR accumulators in registers, in `sets` sets that take turns by group (a row's chains of
 * dependent vpdpbusd are then `sets` times shorter: one or two rows would otherwise wait on the
 * instruction's latency, not on B's bytes); per group, NR/16 vectors of B' and `rows` broadcast
 * dwords of A'. A tile of fewer real rows is computed for them alone: a matrix-vector product
 * does one vpdpbusd per 64 bytes of B, not MR. */
static ALWAYS_INLINE void dot_rows(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int32_t *tile,
                                   const int rows, const int sets) {
    __m512i acc[4][GEMM_MR][VECTORS];
    for (int s = 0; s < sets; s++)
        for (int m = 0; m < rows; m++)
            for (int j = 0; j < VECTORS; j++) acc[s][m][j] = _mm512_setzero_si512();
    ptrdiff_t g = 0;
    for (; g + sets <= groups; g += sets)
        for (int s = 0; s < sets; s++, a += 4, b += GEMM_NR * 4) {
            __m512i bv[VECTORS];
            for (int j = 0; j < VECTORS; j++) bv[j] = _mm512_load_si512((const void *)(b + 64 * j));
            for (int m = 0; m < rows; m++) {
                int32_t word;
                memcpy(&word, a + m * lda, 4);
                const __m512i av = _mm512_set1_epi32(word);
                for (int j = 0; j < VECTORS; j++) acc[s][m][j] = dpbusd(acc[s][m][j], av, bv[j]);
            }
        }
    for (; g < groups; g++, a += 4, b += GEMM_NR * 4) /* the last groups, fewer than `sets` */
        for (int m = 0; m < rows; m++) {
            int32_t word;
            memcpy(&word, a + m * lda, 4);
            const __m512i av = _mm512_set1_epi32(word);
            for (int j = 0; j < VECTORS; j++)
                acc[0][m][j] = dpbusd(acc[0][m][j], av, _mm512_load_si512((const void *)(b + 64 * j)));
        }
    for (int m = 0; m < rows; m++)
        for (int j = 0; j < VECTORS; j++) {
            __m512i sum = acc[0][m][j];
            for (int s = 1; s < sets; s++) sum = _mm512_add_epi32(sum, acc[s][m][j]);
            _mm512_store_si512((void *)(tile + m * GEMM_NR + 16 * j), sum);
        }
}

static void dot_vnni(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int rows, int32_t *tile) {
    switch (rows) {
    case 1: dot_rows(a, lda, b, groups, tile, 1, 4); break;
    case 2: dot_rows(a, lda, b, groups, tile, 2, 4); break;
    case 3: dot_rows(a, lda, b, groups, tile, 3, 2); break;
    case 4: dot_rows(a, lda, b, groups, tile, 4, 2); break;
    case 5: dot_rows(a, lda, b, groups, tile, 5, 1); break;
    case 6: dot_rows(a, lda, b, groups, tile, 6, 1); break;
    case 7: dot_rows(a, lda, b, groups, tile, 7, 1); break;
    default: dot_rows(a, lda, b, groups, tile, GEMM_MR, 1); break;
    }
}

static inline __m512d rounded(__m512d x) { return _mm512_roundscale_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

/* The reference's float64 requantization of 16 exact accumulators of row m, as 16 bytes. */
static __m128i requantize_16_exactly(__m512i acc, const __m512d *bs, ptrdiff_t m, const gemm_quantization *q) {
    const __m512d d[2] = {_mm512_cvtepi32_pd(_mm512_castsi512_si256(acc)),
                          _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(acc, 1))};
    const __m512d as = _mm512_set1_pd(q->a_scale[m]), divisor = _mm512_set1_pd(q->out_divisor[m]);
    const __m512d zero_point = _mm512_set1_pd(q->out_zero_point[m]);
    const __m512d lo = _mm512_set1_pd(q->lo), hi = _mm512_set1_pd(q->hi);
    __m256i out[2];
    for (int h = 0; h < 2; h++) {
        const __m512d product = _mm512_mul_pd(d[h], _mm512_mul_pd(as, bs[h]));
        const __m512d quotient = q->reciprocal ? _mm512_mul_pd(product, divisor) : _mm512_div_pd(product, divisor);
        const __m512d value = _mm512_add_pd(rounded(quotient), zero_point);
        const __mmask8 ordered = q->nan_possible ? _mm512_cmp_pd_mask(value, value, _CMP_ORD_Q) : (__mmask8)0xff;
        out[h] = _mm512_cvtpd_epi32(_mm512_maskz_mov_pd(ordered, _mm512_min_pd(_mm512_max_pd(value, lo), hi)));
    }
    return _mm512_cvtepi32_epi8(_mm512_inserti64x4(_mm512_castsi256_si512(out[0]), out[1], 1));
}

/* round(acc * (as * bs) / os) + ozp, clamped, for 16 accumulators of row m, as 16 bytes.
 *
 * The reference's float64 quotient q is needed only near a tie of an unsaturated output, so first
 * a float32 estimate y = float(acc) * (float(as / os) * bs), `factors` holding the product in
 * brackets: four float32 roundings (the factors kept within [2**-60, 2**60] stay normal), so y is
 * within about 2**-22 * |y| of q. Where |y| <= 1024 that is below 2**-12, so if y is farther than
 * 2**-11 from the nearest half-integer, q rounds to the same integer; where |y| > 1024, y and q
 * both saturate any 8-bit output whatever the zero point. As |y| < 2**20 (`estimate`), the rounded
 * estimate converts to int32 and the zero point adds in integers; saturating narrowing clamps.
 * Vectors with a lane near a tie take the float64 path. */
static inline __m128i requantize_16(__m512i acc, __m512 factors, const __m512d *bs, ptrdiff_t m,
                                    const gemm_quantization *q, __m512i zero_point) {
    if (q->estimate) {
        const __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), factors);
        const __m512 fraction = _mm512_reduce_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); /* y - round(y) */
        if (_mm512_cmp_ps_mask(_mm512_abs_ps(fraction), _mm512_set1_ps(0.5f - 0x1p-11f), _CMP_LT_OQ) == 0xffff) {
            const __m512i value = _mm512_add_epi32(
                _mm512_cvt_roundps_epi32(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zero_point);
            return q->lo < 0.0 ? _mm512_cvtsepi32_epi8(value)
                               : _mm512_cvtusepi32_epi8(_mm512_max_epi32(value, _mm512_setzero_si512()));
        }
    }
    return requantize_16_exactly(acc, bs, m, q);
}

/* What a tile's requantization needs of each block of 16 columns, kept in registers. */
typedef struct {
    __m512i zb, column_term, column_correction; /* the last: za' * column term, when za' is uniform */
    __m512 factor;
    __m512d bs[2];
    __mmask16 mask;
} column_block;

enum { MAX_COLUMN_BLOCKS = GEMM_NR / 16 };

/* acc = dot - zb' * rowsum(A') - za' * (colsum(B') - K * zb'), in wrapping int32 arithmetic: exact,
 * since the true sum fits in int32 (K <= 32768). Uniform zero points save the multiplications. */
static inline __m512i corrected_sums(__m512i dot, const column_block *column, __m512i row_correction,
                                     __m512i row_sum, __m512i za, const gemm_quantization *q) {
    const __m512i by_row = q->b_zero_uniform ? row_correction : _mm512_mullo_epi32(row_sum, column->zb);
    const __m512i by_column = q->a_zero_uniform ? column->column_correction
                                                : _mm512_mullo_epi32(za, column->column_term);
    return _mm512_sub_epi32(_mm512_sub_epi32(dot, by_row), by_column);
}

void dmlq_gemm_requantize_vnni(const int32_t *dot, const gemm_tile *t, const gemm_quantization *quantization) {
    if (t->out_col != 1) {
        dmlq_gemm_requantize_portable(dot, t, quantization);
        return;
    }
    /* A copy the output's stores cannot alias (they are char stores): its flags stay in registers
     * instead of being read again for every vector. */
    const gemm_quantization local = *quantization, *q = &local;
    const __m512i k = _mm512_set1_epi32((int32_t)q->k);
    const int blocks = (int)((t->columns + 15) / 16);
    column_block column[MAX_COLUMN_BLOCKS];
    for (int j = 0; j < blocks; j++) {
        const ptrdiff_t n = t->n0 + 16 * j, left = t->columns - 16 * j;
        column[j].mask = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        column[j].zb = _mm512_loadu_si512((const void *)(q->b_zero + n));
        column[j].column_term = _mm512_sub_epi32(_mm512_loadu_si512((const void *)(t->column_sums + n)),
                                                 _mm512_mullo_epi32(k, column[j].zb));
        column[j].column_correction = _mm512_mullo_epi32(_mm512_set1_epi32(q->a_zero[0]), column[j].column_term);
        column[j].factor = _mm512_loadu_ps(q->column_factor + n);
        column[j].bs[0] = _mm512_loadu_pd(q->b_scale + n);
        column[j].bs[1] = _mm512_loadu_pd(q->b_scale + n + 8);
    }
    for (ptrdiff_t i = 0; i < t->rows; i++) {
        const ptrdiff_t m = t->m0 + i;
        const __m512i row_sum = _mm512_set1_epi32(t->row_sums[m]), za = _mm512_set1_epi32(q->a_zero[m]);
        const __m512i row_correction = _mm512_set1_epi32((int32_t)((uint32_t)t->row_sums[m] * (uint32_t)q->b_zero[0]));
        const __m512i zero_point = _mm512_set1_epi32((int32_t)q->out_zero_point[m]);
        const __m512 row_factor = _mm512_set1_ps(q->row_factor[m]);
        char *out = t->out + i * t->out_row;
        for (int j = 0; j < blocks; j++) {
            const __m512i dots = _mm512_load_si512((const void *)(dot + i * t->dot_stride + 16 * j));
            const __m512i acc = corrected_sums(dots, &column[j], row_correction, row_sum, za, q);
            const __m512 factors = _mm512_mul_ps(row_factor, column[j].factor);
            __m128i bytes = requantize_16(acc, factors, column[j].bs, m, q, zero_point);
            /* Keep vpmov*db in registers: its memory form is microcoded and slow on AMD. */
            __asm__("" : "+v"(bytes));
            if (column[j].mask == 0xffff)
                _mm_storeu_si128((__m128i *)(out + 16 * j), bytes);
            else
                _mm_mask_storeu_epi8(out + 16 * j, column[j].mask, bytes);
        }
    }
}

/* Row sums by vpsadbw (sums of 8 bytes each) over 64-byte chunks. */
static void row_sums_vnni(const uint8_t *a, ptrdiff_t lda, ptrdiff_t k, int rows, int32_t *sums) {
    for (int m = 0; m < rows; m++) {
        const uint8_t *row = a + m * lda;
        __m512i acc = _mm512_setzero_si512();
        for (ptrdiff_t kk = 0; kk < k; kk += 64) {
            const __mmask64 mask = k - kk >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (k - kk)) - 1);
            acc = _mm512_add_epi64(acc, _mm512_sad_epu8(_mm512_maskz_loadu_epi8(mask, row + kk), _mm512_setzero_si512()));
        }
        sums[m] = (int32_t)_mm512_reduce_add_epi64(acc);
    }
}

/* Column sums: sums of 4 bytes per dword by vpdpbusd against ones, 16 columns at a time. */
void dmlq_gemm_column_sums_vnni(const int8_t *b, ptrdiff_t groups, int columns, int32_t *sums) {
    const __m512i ones = _mm512_set1_epi8(1);
    for (int j = 0; j < columns; j += 16) {
        __m512i acc = _mm512_setzero_si512();
        for (ptrdiff_t g = 0; g < groups; g++)
            acc = _mm512_dpbusd_epi32(acc, ones, _mm512_load_si512((const void *)(b + g * columns * 4 + 4 * j)));
        _mm512_storeu_si512((void *)(sums + j), acc);
    }
}

/* Whole groups of whole panels of a row-major B with contiguous columns (gemm.h's
 * pack_b_whole_groups): per group, the 4 rows' 48 bytes in zmm, flipped, interleaved into columns of
 * 4 bytes within each 128-bit lane (bytes of row pairs, then words of pair pairs: lane L holds columns
 * 16L.. in four vectors of 4 columns), whose lanes are then transposed into the panel's order; the
 * column sums by vpdpbusd against ones while the bytes are in registers. A block of PACK_BLOCK_GROUPS
 * groups takes every panel in turn while its rows' lines stay in L1; rows a page or more apart escape
 * the hardware prefetchers, so each panel's pass asks for its bytes of the next block's rows. */
enum { PACK_BLOCK_GROUPS = 32 };

static void pack_b_whole_groups_vnni(int8_t *dst, ptrdiff_t panel_bytes, const uint8_t *b, ptrdiff_t b_row,
                                     ptrdiff_t groups, ptrdiff_t panels, uint8_t flip, int32_t *sums) {
    const __m512i flips = _mm512_set1_epi8((char)flip), ones = _mm512_set1_epi8(1);
    const __mmask64 row_bytes = ((__mmask64)1 << GEMM_NR) - 1;
    for (ptrdiff_t g0 = 0; g0 < groups; g0 += PACK_BLOCK_GROUPS) {
        const ptrdiff_t end = g0 + PACK_BLOCK_GROUPS < groups ? g0 + PACK_BLOCK_GROUPS : groups;
        for (ptrdiff_t panel = 0; panel < panels; panel++) {
            const uint8_t *columns = b + panel * GEMM_NR;
            int8_t *out = dst + panel * panel_bytes;
            __m512i acc[VECTORS];
            for (int j = 0; j < VECTORS; j++) acc[j] = _mm512_setzero_si512();
            for (ptrdiff_t g = g0; g < end; g++) {
                if (g + PACK_BLOCK_GROUPS < groups) /* this panel's bytes of the next block's rows */
                    for (int t = 0; t < 4; t++) {
                        const char *ahead = (const char *)columns + (4 * (g + PACK_BLOCK_GROUPS) + t) * b_row;
                        _mm_prefetch(ahead, _MM_HINT_T0);
                        _mm_prefetch(ahead + GEMM_NR - 1, _MM_HINT_T0);
                    }
                __m512i r[4];
                for (int t = 0; t < 4; t++)
                    r[t] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(row_bytes, columns + (4 * g + t) * b_row), flips);
                const __m512i low01 = _mm512_unpacklo_epi8(r[0], r[1]), high01 = _mm512_unpackhi_epi8(r[0], r[1]);
                const __m512i low23 = _mm512_unpacklo_epi8(r[2], r[3]), high23 = _mm512_unpackhi_epi8(r[2], r[3]);
                const __m512i v0 = _mm512_unpacklo_epi16(low01, low23), v1 = _mm512_unpackhi_epi16(low01, low23);
                const __m512i v2 = _mm512_unpacklo_epi16(high01, high23), v3 = _mm512_unpackhi_epi16(high01, high23);
                const __m512i t0 = _mm512_shuffle_i64x2(v0, v1, 0x44), t1 = _mm512_shuffle_i64x2(v2, v3, 0x44);
                const __m512i t2 = _mm512_shuffle_i64x2(v0, v1, 0xee), t3 = _mm512_shuffle_i64x2(v2, v3, 0xee);
                const __m512i packed[VECTORS] = {_mm512_shuffle_i64x2(t0, t1, 0x88), _mm512_shuffle_i64x2(t0, t1, 0xdd),
                                                 _mm512_shuffle_i64x2(t2, t3, 0x88)};
                for (int j = 0; j < VECTORS; j++) {
                    _mm512_store_si512((void *)(out + g * GEMM_NR * 4 + 64 * j), packed[j]);
                    acc[j] = _mm512_dpbusd_epi32(acc[j], ones, packed[j]);
                }
            }
            for (int j = 0; j < VECTORS; j++) {
                int32_t *column = sums + panel * GEMM_NR + 16 * j;
                _mm512_storeu_si512((void *)column, _mm512_add_epi32(_mm512_loadu_si512((const void *)column), acc[j]));
            }
        }
    }
}

const gemm_kernels dmlq_gemm_vnni = {.mr = GEMM_MR, .nr = GEMM_NR, .group_multiple = 1, .a_group_bytes = 4,
                                     .dot = dot_vnni, .requantize = dmlq_gemm_requantize_vnni,
                                     .row_sums = row_sums_vnni,
                                     .column_sums = dmlq_gemm_column_sums_vnni,
                                     .pack_b_whole_groups = pack_b_whole_groups_vnni};

DMLQ_END_TARGET
#endif
