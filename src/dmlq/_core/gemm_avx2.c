/* The matrix multiply's AVX2 kernels: exact int16 dot products (vpmaddwd) and a vectorised
 * requantization.
 *
 * vpmaddubsw, the usual AVX2 u8 x s8 instruction, adds pairs of products in saturating int16 and
 * is wrong for pairs such as 255 * 127 + 255 * 127; vpmaddwd multiplies int16 pairs into int32
 * exactly, at the same number of multiply instructions per product on current cores (one
 * vpmaddwd does 16 products; vpmaddubsw's 32 need a vpmaddwd after them). So both operands are
 * 16-bit in the kernel: A' panels are packed as zero-extended words, B' panels stay bytes (half the
 * memory traffic, which is what bounds a matrix-vector product) and are sign-extended as they are
 * loaded, once per MR rows; where 16 A' panels or more meet each block of B', each thread widens the
 * block to words once instead (gemm.c's widens_b), taking the sign extensions off the tiles' loop.
 *
 * Layouts per group of 4 k, as two pairs of k:
 *   A' panel: [pair][MR rows][2 words]     (one dword per row and pair: a broadcast operand)
 *   B' panel: [pair][NR columns][2 bytes]  (8 columns' pairs sign-extend into one vector)
 * so vpmaddwd of a row's broadcast pair and 8 columns gives those 8 columns' partial sums: no
 * horizontal additions. A tile with fewer real rows runs a kernel compiled for that many rows, so
 * a matrix-vector product does no work for padding rows.
 * Up to 8 rows of A with a row-major B read it where it lies instead (gemm_kernels.h: A - za as words, B's
 * own bytes): one bounded multiply per product, no column sums and no flips to apply, so what is
 * left per pair of k is widening two rows' bytes and interleaving their words.
 */
#include "gemm_kernels.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX2_FEATURES)

enum {
    MR = 6,
    NR = 16,
    PAIR_A_BYTES = MR * 4, /* one pair of k of an A' panel: MR rows of 2 words */
    PAIR_B_BYTES = NR * 2, /* one pair of k of a B' panel: NR columns of 2 bytes */
    PREFETCH_BYTES = 16384, /* B' panels are asked for this far ahead (dot_rows), */
    PREFETCH_MIN_GROUPS = 512, /* over a K of this many groups or more */
    A_PREFETCH_BYTES = 8192, /* and a whole tile's A' panel this far */
    ROW_MAJOR_ROWS = 8,  /* rows of A with a row-major B, */
    ROW_MAJOR_GROUP = 4, /* in groups of 4 rows */
    ROW_MAJOR_WIDEST = 4 /* and up to 4 panels at a time: their accumulators stay in registers */
};

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* acc + vpmaddwd(a, b). Inline assembly because GCC 12 otherwise copies the accumulators through
 * memory and other registers, which halves the kernel's speed. */
static ALWAYS_INLINE __m256i add_products(__m256i acc, __m256i a, __m256i b) {
    __m256i products;
    __asm__("vpmaddwd %[b], %[a], %[products]\n\tvpaddd %[products], %[acc], %[acc]"
            : [acc] "+x"(acc), [products] "=&x"(products)
            : [a] "x"(a), [b] "x"(b));
    return acc;
}

/* Adds `rows` rows' products with one pair of k of B' (NR columns of 2 words) to acc. */
static ALWAYS_INLINE void dot_pair(const uint8_t *a, __m256i left, __m256i right, __m256i acc[][2], const int rows) {
    for (int m = 0; m < rows; m++) {
        int32_t words;
        memcpy(&words, a + 4 * m, 4);
        const __m256i pair = _mm256_set1_epi32(words);
        acc[m][0] = add_products(acc[m][0], pair, left);
        acc[m][1] = add_products(acc[m][1], pair, right);
    }
}

/* One pair of k of a B' panel as words: NR columns of 2 bytes, sign-extended as they are loaded, or
 * (`wide`) of 2 words, widened beforehand (widen_b_avx2). */
static ALWAYS_INLINE void b_pair(const int8_t *b, __m256i *left, __m256i *right, const int wide) {
    if (wide) {
        *left = _mm256_load_si256((const __m256i *)b);
        *right = _mm256_load_si256((const __m256i *)(b + 32));
    } else {
        *left = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b));
        *right = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 16)));
    }
}

/* dot(A', B') of `rows` rows x NR columns of a packed panel over `groups` groups of 4 k (a line of
 * B' each, two when `wide`), into tile[MR * NR]. One row adds each pair of k into a set of
 * accumulators of its own (1 x 768 x 768 at 1 thread, Zen 5, level avx2: 97 -> 107 GOPS).
 * Over a long K (PREFETCH_MIN_GROUPS or more, a panel streamed from L3 or memory) the kernel asks for
 * B's line PREFETCH_BYTES ahead, once a group, which such a panel otherwise waits on: at 4 KiB ahead,
 * asked for at each pair, 1 x 4096 x 11008 read B at 30 GB/s at 1 thread and 58-62 at 2; at 16 KiB,
 * 50-51 and 98-101; 2 rows 24-25 and 51 -> 42 and 81, 4 rows 20 and 39 -> 23.5 and 43-47; 24 and 32
 * KiB were slower, 12 as fast. A shorter K's panel comes from L2, where the requests cost time: 1 x
 * 768 x 768 107 -> 118 GOPS without them, 4 x 1024 x 1024 +2.5 %; and a widened one (in L2, for the
 * next A panel) lost 4 % with both its lines asked for (2048 x 768 x 768, 205 -> 197 GOPS).
 * A whole tile asks for its A' panel A_PREFETCH_BYTES ahead too, once a group (48 bytes of A'): a
 * panel of K = 4096 is 48 KiB, read from L3 or memory when A is large, and waited on by the first of
 * the block's tiles that use it. 2048 x 4096 x 4096 went from 169 to 206 GOPS at 1 thread and 340
 * to 393 at 2 (Zen 5, level avx2, medians of 3 interleaved runs; 4 and 16 KiB ahead did as well);
 * 2048 x 768^2 and 1024^2, 128 x 4096^2, 32 x 4096 x 11008 and 8 x 1024^2 took the same time. */
static ALWAYS_INLINE void dot_rows(const uint8_t *a, const int8_t *b, ptrdiff_t groups, int32_t *tile, const int rows,
                                   const int wide) {
    const ptrdiff_t pair_bytes = wide ? 2 * PAIR_B_BYTES : PAIR_B_BYTES;
    const int sets = rows == 1 ? 2 : 1;
    __m256i acc[2][MR][2];
    for (int s = 0; s < sets; s++)
        for (int m = 0; m < rows; m++) acc[s][m][0] = acc[s][m][1] = _mm256_setzero_si256();
    const int ahead = !wide && groups >= PREFETCH_MIN_GROUPS;
    for (ptrdiff_t g = 0; g < groups; g++, a += 2 * PAIR_A_BYTES, b += 2 * pair_bytes) {
        if (ahead) _mm_prefetch((const char *)b + PREFETCH_BYTES, _MM_HINT_T0);
        if (rows == MR) _mm_prefetch((const char *)a + A_PREFETCH_BYTES, _MM_HINT_T0);
        for (int pair = 0; pair < 2; pair++) {
            __m256i left, right;
            b_pair(b + pair * pair_bytes, &left, &right, wide);
            dot_pair(a + pair * PAIR_A_BYTES, left, right, acc[sets == 2 ? pair : 0], rows);
        }
    }
    for (int m = 0; m < rows; m++) {
        __m256i l = acc[0][m][0], r = acc[0][m][1];
        if (sets == 2) l = _mm256_add_epi32(l, acc[1][m][0]), r = _mm256_add_epi32(r, acc[1][m][1]);
        _mm256_store_si256((__m256i *)(tile + m * NR), l);
        _mm256_store_si256((__m256i *)(tile + m * NR + 8), r);
    }
}

static ALWAYS_INLINE void dot_any_rows(const uint8_t *a, const int8_t *b, ptrdiff_t groups, int rows, int32_t *tile,
                                       const int wide) {
    switch (rows) {
    case 1: dot_rows(a, b, groups, tile, 1, wide); break;
    case 2: dot_rows(a, b, groups, tile, 2, wide); break;
    case 3: dot_rows(a, b, groups, tile, 3, wide); break;
    case 4: dot_rows(a, b, groups, tile, 4, wide); break;
    case 5: dot_rows(a, b, groups, tile, 5, wide); break;
    default: dot_rows(a, b, groups, tile, MR, wide); break;
    }
}

static void dot_avx2(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int rows, int columns,
                     int32_t *tile) {
    (void)lda; /* packed panels: pairs are PAIR_A_BYTES apart */
    (void)columns;
    dot_any_rows(a, b, groups, rows, tile, 0);
}

static void dot_wide_avx2(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int rows, int columns,
                          int32_t *tile) {
    (void)lda, (void)columns;
    dot_any_rows(a, b, groups, rows, tile, 1);
}

/* B' panels (`bytes` of them, a multiple of 16) as words, for dot_wide_avx2. */
static void widen_b_avx2(const int8_t *panels, ptrdiff_t bytes, int8_t *wide) {
    for (ptrdiff_t i = 0; i < bytes; i += 16)
        _mm256_store_si256((__m256i *)(wide + 2 * i),
                           _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(panels + i))));
}

/* ---- B read where it lies ------------------------------------------------------------------------ */

/* 16 bytes of a row of B as words. */
static ALWAYS_INLINE __m256i widened(const int8_t *bytes, const int b_signed) {
    const __m128i row = _mm_loadu_si128((const __m128i *)bytes);
    return b_signed ? _mm256_cvtepi8_epi16(row) : _mm256_cvtepu8_epi16(row);
}

/* Sums of 16 columns in the kernel's order, 0-3 | 8-11 then 4-7 | 12-15, in order 0-7 then 8-15:
 * an exchange of 128-bit halves. */
static void row_major_in_order_avx2(int32_t *tile, ptrdiff_t panels) {
    for (ptrdiff_t j = 0; j < panels; j++, tile += NR) {
        const __m256i first = _mm256_load_si256((const __m256i *)tile);
        const __m256i second = _mm256_load_si256((const __m256i *)(tile + 8));
        _mm256_store_si256((__m256i *)tile, _mm256_permute2x128_si256(first, second, 0x20));
        _mm256_store_si256((__m256i *)(tile + 8), _mm256_permute2x128_si256(first, second, 0x31));
    }
}

/* Adds dot(A'', B) of `rows` rows x `panels` panels over `pairs` pairs of k into tile[rows][stride]
 * (gemm_kernels.h), asking for the same columns of B `ahead` rows on meanwhile (0: none). Per pair and
 * panel, both rows' 16 bytes are widened straight from memory and their words interleaved within
 * each 128-bit half (no lane crossing): the products then come out for columns 0-3 | 8-11 and
 * 4-7 | 12-15, the tile's order until row_major_in_order_avx2. */
static ALWAYS_INLINE void dot_b_rows(const int16_t *a, ptrdiff_t a_pair_words, const int8_t *b, ptrdiff_t b_row,
                                     ptrdiff_t pairs, ptrdiff_t ahead, int32_t *tile, ptrdiff_t stride, const int rows,
                                     const int panels, const int b_signed) {
    __m256i acc[ROW_MAJOR_GROUP][ROW_MAJOR_WIDEST][2];
    for (int m = 0; m < rows; m++)
        for (int s = 0; s < panels; s++) {
            acc[m][s][0] = _mm256_load_si256((const __m256i *)(tile + m * stride + s * NR));
            acc[m][s][1] = _mm256_load_si256((const __m256i *)(tile + m * stride + s * NR + 8));
        }
    for (ptrdiff_t p = 0; p < pairs; p++, a += a_pair_words, b += 2 * b_row) {
        if (ahead) {
            _mm_prefetch((const char *)b + ahead * b_row, _MM_HINT_T0);
            _mm_prefetch((const char *)b + (ahead + 1) * b_row, _MM_HINT_T0);
        }
        for (int s = 0; s < panels; s++) {
            const __m256i first = widened(b + s * NR, b_signed), second = widened(b + b_row + s * NR, b_signed);
            const __m256i left = _mm256_unpacklo_epi16(first, second), right = _mm256_unpackhi_epi16(first, second);
            for (int m = 0; m < rows; m++) {
                int32_t words;
                memcpy(&words, a + 2 * m, 4);
                const __m256i pair = _mm256_set1_epi32(words);
                acc[m][s][0] = add_products(acc[m][s][0], pair, left);
                acc[m][s][1] = add_products(acc[m][s][1], pair, right);
            }
        }
    }
    for (int m = 0; m < rows; m++)
        for (int s = 0; s < panels; s++) {
            _mm256_store_si256((__m256i *)(tile + m * stride + s * NR), acc[m][s][0]);
            _mm256_store_si256((__m256i *)(tile + m * stride + s * NR + 8), acc[m][s][1]);
        }
}

/* The panels one kernel takes at a time for `rows` rows: as many as its accumulators allow in the
 * 16 registers (one row reads a whole cache line of each row of B). */
static int widest_for(int rows) { return rows == 1 ? 4 : rows == 2 ? 2 : 1; }

#define DOT_B_ROWS(rows, panels) \
    dot_b_rows(a, a_pair_words, b, b_row, pairs, ahead, tile, stride, rows, panels, b_signed)

/* dot_b_rows for up to ROW_MAJOR_GROUP rows and `panels` (at most widest_for(rows)) panels. */
static ALWAYS_INLINE void dot_row_group(const int16_t *a, ptrdiff_t a_pair_words, const int8_t *b, ptrdiff_t b_row,
                                        ptrdiff_t pairs, ptrdiff_t ahead, int32_t *tile, ptrdiff_t stride, int rows,
                                        int panels, const int b_signed) {
    if (rows == 1 && panels == 4) DOT_B_ROWS(1, 4);
    else if (rows == 1 && panels == 2) DOT_B_ROWS(1, 2);
    else if (rows == 2 && panels == 2) DOT_B_ROWS(2, 2);
    else if (rows == 1) DOT_B_ROWS(1, 1);
    else if (rows == 2) DOT_B_ROWS(2, 1);
    else if (rows == 3) DOT_B_ROWS(3, 1);
    else DOT_B_ROWS(ROW_MAJOR_GROUP, 1);
}

/* A cache line of panels at a time (or what is left), and in each, the rows in groups of
 * ROW_MAJOR_GROUP, each as wide as it can be: a group after the first finds the line in L1. */
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

static void dot_row_major_avx2(const int16_t *a, ptrdiff_t a_pair_words, const char *b, ptrdiff_t b_row,
                               ptrdiff_t pairs, ptrdiff_t ahead, int rows, int panels, int b_signed, int32_t *tile) {
    const int8_t *bytes = (const int8_t *)b;
    if (b_signed)
        dot_row_major_typed(a, a_pair_words, bytes, b_row, pairs, ahead, rows, panels, tile, 1);
    else
        dot_row_major_typed(a, a_pair_words, bytes, b_row, pairs, ahead, rows, panels, tile, 0);
}

/* A'' = A - za of `rows` rows (row r at a + r * a_row, its bytes a_col apart) as words, per pair of
 * k the rows' two words side by side; the rows' sums. (The VNNI level's direct kernel takes it too.) */
void dmlq_gemm_pack_a_row_major_avx2(int16_t *dst, const char *a, ptrdiff_t rows, ptrdiff_t k, ptrdiff_t a_row,
                                     ptrdiff_t a_col, int a_signed, const int32_t *zero_points, int32_t *row_sums) {
    const ptrdiff_t pair_words = 2 * rows;
    for (ptrdiff_t r = 0; r < rows; r++) {
        const char *row = a + r * a_row;
        int16_t *out = dst + 2 * r;
        const __m128i zero_point = _mm_set1_epi16((int16_t)zero_points[r]);
        __m128i sums = _mm_setzero_si128();
        ptrdiff_t kk = 0;
        for (; a_col == 1 && kk + 8 <= k; kk += 8) { /* 8 k: 4 pairs */
            const __m128i bytes = _mm_loadl_epi64((const __m128i *)(row + kk));
            const __m128i values = a_signed ? _mm_cvtepi8_epi16(bytes) : _mm_cvtepu8_epi16(bytes);
            const __m128i words = _mm_sub_epi16(values, zero_point);
            sums = _mm_add_epi32(sums, _mm_madd_epi16(words, _mm_set1_epi16(1)));
            int16_t *pairs = out + kk / 2 * pair_words;
            _mm_storeu_si32(pairs, words);
            _mm_storeu_si32(pairs + pair_words, _mm_srli_si128(words, 4));
            _mm_storeu_si32(pairs + 2 * pair_words, _mm_srli_si128(words, 8));
            _mm_storeu_si32(pairs + 3 * pair_words, _mm_srli_si128(words, 12));
        }
        sums = _mm_hadd_epi32(sums, sums);
        int32_t sum = _mm_cvtsi128_si32(_mm_hadd_epi32(sums, sums));
        for (; kk < k; kk++) {
            const char *element = row + kk * a_col;
            const int32_t value = (a_signed ? *(const int8_t *)element : *(const uint8_t *)element) - zero_points[r];
            out[kk / 2 * pair_words + kk % 2] = (int16_t)value;
            sum += value;
        }
        row_sums[r] = sum;
    }
}

/* One panel: `rows` rows of k bytes (row r at a + r * a_row, its bytes a_col apart), xor `flip`,
 * as words in the pair layout, zero beyond k and below the last row; the flipped rows' sums. */
static void pack_a_avx2(uint8_t *dst, const char *a, ptrdiff_t rows, ptrdiff_t k, ptrdiff_t groups, ptrdiff_t a_row,
                        ptrdiff_t a_col, uint8_t flip, int32_t *row_sums) {
    memset(dst, 0, (size_t)(groups * 2 * PAIR_A_BYTES));
    const __m128i flips = _mm_cvtsi64_si128((int64_t)(0x0101010101010101ull * flip)), zero = _mm_setzero_si128();
    for (ptrdiff_t r = 0; r < rows; r++) {
        const uint8_t *row = (const uint8_t *)a + r * a_row;
        uint8_t *out = dst + 4 * r;
        __m128i sum = zero;
        ptrdiff_t kk = 0;
        for (; a_col == 1 && kk + 8 <= k; kk += 8) { /* 8 bytes: 4 pairs of words */
            const __m128i bytes = _mm_xor_si128(_mm_loadl_epi64((const __m128i *)(row + kk)), flips);
            sum = _mm_add_epi64(sum, _mm_sad_epu8(bytes, zero));
            const __m128i words = _mm_cvtepu8_epi16(bytes);
            uint8_t *pairs = out + (kk / 2) * PAIR_A_BYTES;
            _mm_storeu_si32(pairs, words);
            _mm_storeu_si32(pairs + PAIR_A_BYTES, _mm_srli_si128(words, 4));
            _mm_storeu_si32(pairs + 2 * PAIR_A_BYTES, _mm_srli_si128(words, 8));
            _mm_storeu_si32(pairs + 3 * PAIR_A_BYTES, _mm_srli_si128(words, 12));
        }
        int32_t total = (int32_t)_mm_cvtsi128_si64(sum); /* the high 8 bytes are zero */
        for (; kk < k; kk++) {
            const uint16_t word = row[kk * a_col] ^ flip;
            memcpy(out + (kk / 2) * PAIR_A_BYTES + 2 * (kk % 2), &word, 2);
            total += word;
        }
        row_sums[r] = total;
    }
    for (ptrdiff_t r = rows; r < MR; r++) row_sums[r] = 0;
}

/* The sums of a packed panel's columns: per pair of k, NR columns of 2 bytes. */
static void column_sums_avx2(const int8_t *b, ptrdiff_t groups, int columns, int32_t *sums) {
    const __m256i ones = _mm256_set1_epi8(1);
    for (int j = 0; j < columns; j += NR) {
        __m256i low = _mm256_setzero_si256(), high = _mm256_setzero_si256();
        for (ptrdiff_t p = 0; p < 2 * groups; p++) {
            const __m256i bytes = _mm256_loadu_si256((const __m256i *)(b + p * columns * 2 + 2 * j));
            const __m256i pair_sums = _mm256_maddubs_epi16(ones, bytes); /* |sum| <= 256: no saturation */
            low = _mm256_add_epi32(low, _mm256_cvtepi16_epi32(_mm256_castsi256_si128(pair_sums)));
            high = _mm256_add_epi32(high, _mm256_cvtepi16_epi32(_mm256_extracti128_si256(pair_sums, 1)));
        }
        _mm256_storeu_si256((__m256i *)(sums + j), low);
        _mm256_storeu_si256((__m256i *)(sums + j + 8), high);
    }
}

/* ---- packing B ----------------------------------------------------------------------------------- */

enum {
    /* Panels packed side by side: 2 whole cache lines of each row, and 8 streams of output (panels
     * are often a multiple of 4 KiB apart: the lines of one cache set, which has 8 ways) */
    STRIP_PANELS = 8,
    STRIP_BYTES = STRIP_PANELS * NR, /* one row's bytes of a strip */
    SUM_PAIRS = 128                  /* pairs of k summed in int16 before widening: |sum| <= 128 * 256 */
};

/* 16 (`wide` = 0) or 32 columns of a pair of rows, xor flip, in the pair layout: one panel's pair of
 * k per vector. */
static ALWAYS_INLINE void interleave_pair(const uint8_t *row, ptrdiff_t b_row, __m256i flip, int wide,
                                          __m256i *panel) {
    if (!wide) {
        const __m128i flip16 = _mm256_castsi256_si128(flip);
        const __m128i first = _mm_xor_si128(_mm_loadu_si128((const __m128i *)row), flip16);
        const __m128i second = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(row + b_row)), flip16);
        panel[0] = _mm256_set_m128i(_mm_unpackhi_epi8(first, second), _mm_unpacklo_epi8(first, second));
        return;
    }
    const __m256i first = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)row), flip);
    const __m256i second = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(row + b_row)), flip);
    const __m256i low = _mm256_unpacklo_epi8(first, second);  /* columns 0-7 | 16-23 */
    const __m256i high = _mm256_unpackhi_epi8(first, second); /* columns 8-15 | 24-31 */
    panel[0] = _mm256_permute2x128_si256(low, high, 0x20);
    panel[1] = _mm256_permute2x128_si256(low, high, 0x31);
}

/* Pairs [first, end) (at most SUM_PAIRS) of `panels` (1, 2 or STRIP_PANELS) side-by-side panels,
 * their column sums added to sums while the bytes are in registers. Rows a page or more apart are
 * not followed by the hardware prefetchers: each row's lines two strips on are asked for meanwhile
 * (measured a little faster than one strip on; a strip of 4 panels was slower than 8). */
static ALWAYS_INLINE void pack_strip(int8_t *dst, ptrdiff_t panel_bytes, const uint8_t *b, ptrdiff_t b_row,
                                     ptrdiff_t first, ptrdiff_t end, __m256i flip, int32_t *sums, const int panels) {
    const __m256i ones = _mm256_set1_epi8(1);
    __m256i acc[STRIP_PANELS];
    for (int s = 0; s < panels; s++) acc[s] = _mm256_setzero_si256();
    for (ptrdiff_t p = first; p < end; p++) {
        const uint8_t *rows = b + 2 * p * b_row;
        for (int line = 0; line < STRIP_BYTES; line += 64) {
            _mm_prefetch((const char *)rows + 2 * STRIP_BYTES + line, _MM_HINT_T0);
            _mm_prefetch((const char *)rows + b_row + 2 * STRIP_BYTES + line, _MM_HINT_T0);
        }
        __m256i panel[STRIP_PANELS];
        for (int s = 0; s < panels; s += 2) interleave_pair(rows + s * NR, b_row, flip, panels > 1, panel + s);
        for (int s = 0; s < panels; s++) {
            _mm256_storeu_si256((__m256i *)(dst + s * panel_bytes + p * PAIR_B_BYTES), panel[s]);
            acc[s] = _mm256_add_epi16(acc[s], _mm256_maddubs_epi16(ones, panel[s])); /* per column */
        }
    }
    for (int s = 0; s < panels; s++) {
        int32_t *column = sums + s * NR;
        const __m256i low = _mm256_cvtepi16_epi32(_mm256_castsi256_si128(acc[s]));
        const __m256i high = _mm256_cvtepi16_epi32(_mm256_extracti128_si256(acc[s], 1));
        _mm256_storeu_si256((__m256i *)column, _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)column), low));
        _mm256_storeu_si256((__m256i *)(column + 8),
                            _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(column + 8)), high));
    }
}

/* Strips of STRIP_PANELS panels (then 2, then 1) through SUM_PAIRS pairs at a time: the rows of
 * those pairs stay in the caches while the strips take their lines. */
static void pack_b_pairs_avx2(int8_t *dst, ptrdiff_t panel_bytes, const uint8_t *b, ptrdiff_t b_row, ptrdiff_t pairs,
                              ptrdiff_t panels, uint8_t flip, int32_t *sums) {
    const __m256i flips = _mm256_set1_epi8((char)flip);
    for (ptrdiff_t first = 0; first < pairs; first += SUM_PAIRS) {
        const ptrdiff_t end = first + SUM_PAIRS < pairs ? first + SUM_PAIRS : pairs;
        for (ptrdiff_t j = 0; j < panels;) {
            int8_t *strip = dst + j * panel_bytes;
            const uint8_t *columns = b + j * NR;
            if (j + STRIP_PANELS <= panels) {
                pack_strip(strip, panel_bytes, columns, b_row, first, end, flips, sums + j * NR, STRIP_PANELS);
                j += STRIP_PANELS;
            } else if (j + 2 <= panels) {
                pack_strip(strip, panel_bytes, columns, b_row, first, end, flips, sums + j * NR, 2);
                j += 2;
            } else {
                pack_strip(strip, panel_bytes, columns, b_row, first, end, flips, sums + j * NR, 1);
                j += 1;
            }
        }
    }
}

/* ---- requantization ---------------------------------------------------------------------------- */

/* 8 int32 as 8 saturated bytes (int8 when `is_signed`, else uint8), in the low half. */
static inline __m128i saturated_bytes(__m256i values, int is_signed) {
    const __m256i words = _mm256_packs_epi32(values, values);
    const __m256i bytes = is_signed ? _mm256_packs_epi16(words, words) : _mm256_packus_epi16(words, words);
    return _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1));
}

/* The reference's float64 requantization of 8 exact accumulators of row m (dmlq_requantize_one). */
static __m128i requantize_8_exactly(__m256i acc, const double *bs, ptrdiff_t m, const gemm_quantization *q) {
    const __m256d as = _mm256_set1_pd(q->a_scale[m]), divisor = _mm256_set1_pd(q->out_divisor[m]);
    const __m256d zero_point = _mm256_set1_pd(q->out_zero_point[m]);
    const __m256d lo = _mm256_set1_pd(q->lo), hi = _mm256_set1_pd(q->hi);
    __m128i integers[2];
    for (int h = 0; h < 2; h++) {
        const __m256d sums = _mm256_cvtepi32_pd(h ? _mm256_extracti128_si256(acc, 1) : _mm256_castsi256_si128(acc));
        const __m256d product = _mm256_mul_pd(sums, _mm256_mul_pd(as, _mm256_loadu_pd(bs + 4 * h)));
        const __m256d quotient = q->reciprocal ? _mm256_mul_pd(product, divisor) : _mm256_div_pd(product, divisor);
        const __m256d value = _mm256_add_pd(_mm256_round_pd(quotient, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                                            zero_point);
        const __m256d clamped = _mm256_min_pd(_mm256_max_pd(value, lo), hi); /* NaN becomes lo here... */
        const __m256d ordered = _mm256_cmp_pd(value, value, _CMP_ORD_Q);     /* ...and 0 here */
        integers[h] = _mm256_cvtpd_epi32(_mm256_and_pd(clamped, ordered));
    }
    return saturated_bytes(_mm256_set_m128i(integers[1], integers[0]), q->lo < 0.0);
}

/* round(acc * (as * bs) / os) + ozp, clamped, for 8 accumulators of row m: the float32 estimate
 * where no lane is near a tie, the float64 reference otherwise (why this is exact: gemm_vnni.c). */
static inline __m128i requantize_8(__m256i acc, __m256 factors, const double *bs, ptrdiff_t m,
                                   const gemm_quantization *q, __m256i zero_point) {
    if (q->estimate) {
        const __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), factors);
        const __m256 nearest = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256 distance = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(y, nearest));
        if (_mm256_movemask_ps(_mm256_cmp_ps(distance, _mm256_set1_ps(0.5f - 0x1p-11f), _CMP_LT_OQ)) == 0xff)
            return saturated_bytes(_mm256_add_epi32(_mm256_cvttps_epi32(nearest), zero_point), q->lo < 0.0);
    }
    return requantize_8_exactly(acc, bs, m, q);
}

/* What a tile's requantization needs of each block of 8 columns. */
typedef struct {
    __m256i zb, column_term, column_correction; /* the last: za' * column term, when za' is uniform */
    __m256 factor;
    const double *bs;
} column_block;

/* acc = dot - zb' * rowsum(A') - za' * (colsum(B') - K * zb'), in wrapping int32 arithmetic: exact,
 * since the true sum fits in int32 (K <= 32768). Uniform zero points save the multiplications. */
static inline __m256i corrected_sums(__m256i dot, const column_block *column, __m256i row_correction,
                                     __m256i row_sum, __m256i za, const gemm_quantization *q) {
    const __m256i by_row = q->b_zero_uniform ? row_correction : _mm256_mullo_epi32(row_sum, column->zb);
    const __m256i by_column = q->a_zero_uniform ? column->column_correction
                                                : _mm256_mullo_epi32(za, column->column_term);
    return _mm256_sub_epi32(_mm256_sub_epi32(dot, by_row), by_column);
}

static void requantize_avx2(const int32_t *dot, const gemm_tile *t, const gemm_quantization *q) {
    if (t->out_col != 1) {
        dmlq_gemm_requantize_portable(dot, t, q);
        return;
    }
    const __m256i k = _mm256_set1_epi32((int32_t)q->k);
    const int blocks = (int)((t->columns + 7) / 8);
    column_block column[NR / 8];
    for (int j = 0; j < blocks; j++) {
        const ptrdiff_t n = t->n0 + 8 * j;
        column[j].zb = _mm256_loadu_si256((const __m256i *)(q->b_zero + n));
        column[j].column_term = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(t->column_sums + n)),
                                                 _mm256_mullo_epi32(k, column[j].zb));
        column[j].column_correction = _mm256_mullo_epi32(_mm256_set1_epi32(q->a_zero[0]), column[j].column_term);
        column[j].factor = _mm256_loadu_ps(q->column_factor + n);
        column[j].bs = q->b_scale + n;
    }
    for (ptrdiff_t i = 0; i < t->rows; i++) {
        const ptrdiff_t m = t->m0 + i;
        const __m256i row_sum = _mm256_set1_epi32(t->row_sums[m]), za = _mm256_set1_epi32(q->a_zero[m]);
        const __m256i row_correction = _mm256_set1_epi32((int32_t)((uint32_t)t->row_sums[m] * (uint32_t)q->b_zero[0]));
        const __m256i zero_point = _mm256_set1_epi32((int32_t)q->out_zero_point[m]);
        const __m256 row_factor = _mm256_set1_ps(q->row_factor[m]);
        char *out = t->out + i * t->out_row;
        for (int j = 0; j < blocks; j++) {
            const __m256i dots = _mm256_load_si256((const __m256i *)(dot + i * t->dot_stride + 8 * j));
            const __m256i acc = corrected_sums(dots, &column[j], row_correction, row_sum, za, q);
            const __m256 factors = _mm256_mul_ps(row_factor, column[j].factor);
            const __m128i bytes = requantize_8(acc, factors, column[j].bs, m, q, zero_point);
            const ptrdiff_t left = t->columns - 8 * j;
            if (left >= 8) {
                _mm_storel_epi64((__m128i *)(out + 8 * j), bytes);
            } else {
                uint8_t eight[8];
                _mm_storel_epi64((__m128i *)eight, bytes);
                memcpy(out + 8 * j, eight, (size_t)left);
            }
        }
    }
}

const gemm_kernels dmlq_gemm_avx2 = {.mr = MR, .nr = NR, .group_multiple = 1, .a_group_bytes = 2 * PAIR_A_BYTES,
                                     .b_pair_layout = 1, .dot = dot_avx2, .dot_wide = dot_wide_avx2,
                                     .widen_b = widen_b_avx2, .dot_row_major = dot_row_major_avx2,
                                     .pack_a_row_major = dmlq_gemm_pack_a_row_major_avx2,
                                     .row_major_in_order = row_major_in_order_avx2,
                                     .row_major_rows = ROW_MAJOR_ROWS, .row_major_rows_always = 4,
                                     .requantize = requantize_avx2,
                                     .pack_a = pack_a_avx2, .column_sums = column_sums_avx2,
                                     .pack_b_pairs = pack_b_pairs_avx2};

DMLQ_END_TARGET
#endif
