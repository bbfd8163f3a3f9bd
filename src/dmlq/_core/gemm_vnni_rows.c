/* The VNNI level's kernel for a few rows of A with a row-major B read where it lies (gemm_kernels.h).
 *
 * As AVX2's (gemm_avx2.c): A'' = A - za as words, B's own bytes widened to words, acc = dot(A'', B)
 * - zb * rowsum(A''); no packing, no flips, no column sums. Here in zmm with vpdpwssd, which adds a
 * lane's two word products to its int32 in one instruction (never saturating: |A'' B| <= 255 * 255,
 * so a pair is below 2**17 and K <= 32768 keeps the sum in int32). Per pair of k and panel of 32
 * columns: both rows' 32 bytes widened straight from memory and their words interleaved within each
 * 128-bit lane, then one vpdpwssd per row and half: the products come out for columns 0-3 | 8-11 |
 * 16-19 | 24-27 and 4-7 | 12-15 | 20-23 | 28-31, the tile's order until row_major_in_order. B's
 * bytes are read once for all the rows of a group, several panels (cache lines) at a time.
 * vpdpbusd would multiply four k at once but needs B's bytes regrouped by column and its column
 * sums; a few rows wait on B's bytes, not on multiplies. Up to 8 rows read B in place at any size:
 * on Zen 5 (1 thread, thread CPU time) 5 and 8 rows took 51 and 71 us on 1024^2 against 74 and 79
 * packing B, 202 and 269 us on 2048^2 against 293 and 317, 8 rows 1.17 ms on 4096^2 against 2.65.
 */
#include "gemm_kernels.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_VNNI_FEATURES)

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum {
    NR = 32,
    ROW_MAJOR_ROWS = 8,  /* rows of A with a row-major B, */
    ROW_MAJOR_GROUP = 4, /* in groups of 4 rows */
    ROW_MAJOR_WIDEST = 4 /* and up to 4 panels (2 cache lines of each row of B) at a time */
};

/* acc + the lanes' pairs of word products. Inline assembly, as for vpdpbusd (gemm_vnni.c). */
static ALWAYS_INLINE __m512i add_pair_products(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* 32 bytes of a row of B as words. */
static ALWAYS_INLINE __m512i widened(const int8_t *bytes, const int b_signed) {
    const __m256i row = _mm256_loadu_si256((const __m256i *)bytes);
    return b_signed ? _mm512_cvtepi8_epi16(row) : _mm512_cvtepu8_epi16(row);
}

/* Adds dot(A'', B) of `rows` rows x `panels` panels over `pairs` pairs of k into tile[rows][stride],
 * asking for the same columns of B `ahead` rows on meanwhile (0: none). */
static ALWAYS_INLINE void dot_b_rows(const int16_t *a, ptrdiff_t a_pair_words, const int8_t *b, ptrdiff_t b_row,
                                     ptrdiff_t pairs, ptrdiff_t ahead, int32_t *tile, ptrdiff_t stride, const int rows,
                                     const int panels, const int b_signed) {
    __m512i acc[ROW_MAJOR_GROUP][ROW_MAJOR_WIDEST][2];
    for (int m = 0; m < rows; m++)
        for (int s = 0; s < panels; s++) {
            acc[m][s][0] = _mm512_load_si512((const void *)(tile + m * stride + s * NR));
            acc[m][s][1] = _mm512_load_si512((const void *)(tile + m * stride + s * NR + 16));
        }
    for (ptrdiff_t p = 0; p < pairs; p++, a += a_pair_words, b += 2 * b_row) {
        if (ahead)
            for (int line = 0; line < panels * NR; line += 64) {
                _mm_prefetch((const char *)b + ahead * b_row + line, _MM_HINT_T0);
                _mm_prefetch((const char *)b + (ahead + 1) * b_row + line, _MM_HINT_T0);
            }
        for (int s = 0; s < panels; s++) {
            const __m512i first = widened(b + s * NR, b_signed), second = widened(b + b_row + s * NR, b_signed);
            const __m512i low = _mm512_unpacklo_epi16(first, second), high = _mm512_unpackhi_epi16(first, second);
            for (int m = 0; m < rows; m++) {
                int32_t words;
                memcpy(&words, a + 2 * m, 4);
                const __m512i pair = _mm512_set1_epi32(words);
                acc[m][s][0] = add_pair_products(acc[m][s][0], pair, low);
                acc[m][s][1] = add_pair_products(acc[m][s][1], pair, high);
            }
        }
    }
    for (int m = 0; m < rows; m++)
        for (int s = 0; s < panels; s++) {
            _mm512_store_si512((void *)(tile + m * stride + s * NR), acc[m][s][0]);
            _mm512_store_si512((void *)(tile + m * stride + s * NR + 16), acc[m][s][1]);
        }
}

/* The panels one kernel takes at a time for `rows` rows, their accumulators within the registers. */
static int widest_for(int rows) { return rows <= 2 ? 4 : 2; }

#define DOT_B_ROWS(rows, panels) \
    dot_b_rows(a, a_pair_words, b, b_row, pairs, ahead, tile, stride, rows, panels, b_signed)

/* dot_b_rows for up to ROW_MAJOR_GROUP rows and `panels` (at most widest_for(rows)) panels. */
static ALWAYS_INLINE void dot_row_group(const int16_t *a, ptrdiff_t a_pair_words, const int8_t *b, ptrdiff_t b_row,
                                        ptrdiff_t pairs, ptrdiff_t ahead, int32_t *tile, ptrdiff_t stride, int rows,
                                        int panels, const int b_signed) {
    if (rows == 1 && panels == 4) DOT_B_ROWS(1, 4);
    else if (rows == 1 && panels == 2) DOT_B_ROWS(1, 2);
    else if (rows == 1) DOT_B_ROWS(1, 1);
    else if (rows == 2 && panels == 4) DOT_B_ROWS(2, 4);
    else if (rows == 2 && panels == 2) DOT_B_ROWS(2, 2);
    else if (rows == 2) DOT_B_ROWS(2, 1);
    else if (rows == 3 && panels == 2) DOT_B_ROWS(3, 2);
    else if (rows == 3) DOT_B_ROWS(3, 1);
    else if (panels == 2) DOT_B_ROWS(ROW_MAJOR_GROUP, 2);
    else DOT_B_ROWS(ROW_MAJOR_GROUP, 1);
}

/* Up to ROW_MAJOR_WIDEST panels at a time (2 cache lines of each row of B, or what is left), and in
 * them the rows in groups of ROW_MAJOR_GROUP, each as wide as it can be: a group after the first
 * finds the lines in L1. */
static ALWAYS_INLINE void dot_row_major_typed(const int16_t *a, ptrdiff_t a_pair_words, const int8_t *b,
                                              ptrdiff_t b_row, ptrdiff_t pairs, ptrdiff_t ahead, int rows, int panels,
                                              int32_t *tile, const int b_signed) {
    const ptrdiff_t stride = (ptrdiff_t)panels * NR;
    for (int line = 0; line < panels; line += ROW_MAJOR_WIDEST) {
        const int line_panels = panels - line < ROW_MAJOR_WIDEST ? panels - line : ROW_MAJOR_WIDEST;
        for (int r = 0; r < rows; r += ROW_MAJOR_GROUP) {
            const int group = rows - r < ROW_MAJOR_GROUP ? rows - r : ROW_MAJOR_GROUP, widest = widest_for(group);
            for (int s = line, run; s < line + line_panels; s += run) {
                const int left = line + line_panels - s;
                run = widest < left ? widest : left == 3 ? 2 : left;
                dot_row_group(a + 2 * r, a_pair_words, b + s * NR, b_row, pairs, ahead, tile + r * stride + s * NR,
                              stride, group, run, b_signed);
            }
        }
    }
}

static void dot_row_major_vnni(const int16_t *a, ptrdiff_t a_pair_words, const char *b, ptrdiff_t b_row,
                               ptrdiff_t pairs, ptrdiff_t ahead, int rows, int panels, int b_signed, int32_t *tile) {
    const int8_t *bytes = (const int8_t *)b;
    if (b_signed)
        dot_row_major_typed(a, a_pair_words, bytes, b_row, pairs, ahead, rows, panels, tile, 1);
    else
        dot_row_major_typed(a, a_pair_words, bytes, b_row, pairs, ahead, rows, panels, tile, 0);
}

/* Sums of 32 columns in the kernel's order (above) put in order: per 128-bit lane, 4 columns of the
 * first half, then 4 of the second. */
static void row_major_in_order_vnni(int32_t *tile, ptrdiff_t panels) {
    const __m512i first_columns = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i last_columns = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for (ptrdiff_t j = 0; j < panels; j++, tile += NR) {
        const __m512i low = _mm512_load_si512((const void *)tile), high = _mm512_load_si512((const void *)(tile + 16));
        _mm512_store_si512((void *)tile, _mm512_permutex2var_epi64(low, first_columns, high));
        _mm512_store_si512((void *)(tile + 16), _mm512_permutex2var_epi64(low, last_columns, high));
    }
}

/* Only for B read in place: no packed kernel (`dot`), so gemm.c takes it for nothing else. */
const gemm_kernels dmlq_gemm_vnni_rows = {.mr = GEMM_MR, .nr = NR, .group_multiple = 1, .a_group_bytes = 4,
                                          .dot_row_major = dot_row_major_vnni,
                                          .pack_a_row_major = dmlq_gemm_pack_a_row_major_avx2,
                                          .row_major_in_order = row_major_in_order_vnni,
                                          .row_major_rows = ROW_MAJOR_ROWS, .row_major_rows_always = ROW_MAJOR_ROWS,
                                          .requantize = dmlq_gemm_requantize_vnni};

DMLQ_END_TARGET
#endif
