/* The matrix multiply's AVX2 dot product: bytes widened to int16 and multiplied by vpmaddwd, which
 * is exact (vpmaddubsw would saturate). Column sums use vpmaddubsw against ones, which cannot
 * saturate; requantization and row sums use the portable code. */
#include "gemm.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX2_FEATURES)

enum { HALF_ROWS = GEMM_MR / 2 };

/* HALF_ROWS rows x 8 columns over all groups. Lanes hold pair sums: (column, k 0-1), (column, k 2-3). */
static void dot_rows_8_columns(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int32_t *tile) {
    __m256i acc[HALF_ROWS][2];
    for (int m = 0; m < HALF_ROWS; m++) acc[m][0] = acc[m][1] = _mm256_setzero_si256();
    for (ptrdiff_t g = 0; g < groups; g++, a += 4, b += GEMM_NR * 4) {
        const __m256i b_low = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b));
        const __m256i b_high = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 16)));
        for (int m = 0; m < HALF_ROWS; m++) {
            int32_t word;
            memcpy(&word, a + m * lda, 4);
            const __m256i av = _mm256_cvtepu8_epi16(_mm_set1_epi32(word));
            acc[m][0] = _mm256_add_epi32(acc[m][0], _mm256_madd_epi16(av, b_low));
            acc[m][1] = _mm256_add_epi32(acc[m][1], _mm256_madd_epi16(av, b_high));
        }
    }
    for (int m = 0; m < HALF_ROWS; m++) {
        const __m256i pairs = _mm256_hadd_epi32(acc[m][0], acc[m][1]);
        _mm256_storeu_si256((__m256i *)(tile + m * GEMM_NR), _mm256_permute4x64_epi64(pairs, _MM_SHUFFLE(3, 1, 2, 0)));
    }
}

static void dot_avx2(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int32_t *tile) {
    for (int half = 0; half < 2; half++)
        for (int column = 0; column < GEMM_NR; column += 8)
            dot_rows_8_columns(a + half * HALF_ROWS * lda, lda, b + column * 4, groups,
                               tile + half * HALF_ROWS * GEMM_NR + column);
}

/* The sums of a packed panel's columns (a multiple of 8): per column, its 4 bytes of each group. */
static void column_sums_avx2(const int8_t *b, ptrdiff_t groups, int columns, int32_t *sums) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int j = 0; j < columns; j += 8) {
        __m256i acc = _mm256_setzero_si256();
        for (ptrdiff_t g = 0; g < groups; g++) {
            const __m256i bytes = _mm256_loadu_si256((const __m256i *)(b + g * columns * 4 + 4 * j));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, bytes), ones16));
        }
        _mm256_storeu_si256((__m256i *)(sums + j), acc);
    }
}

const gemm_kernels dmlq_gemm_avx2 = {.mr = GEMM_MR, .nr = GEMM_NR, .group_multiple = 1, .a_group_bytes = 4,
                                     .dot = dot_avx2, .requantize = dmlq_gemm_requantize_portable,
                                     .row_sums = dmlq_gemm_row_sums_portable,
                                     .column_sums = column_sums_avx2};

DMLQ_END_TARGET
#endif
