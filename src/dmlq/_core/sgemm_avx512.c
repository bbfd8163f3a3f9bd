/* The float GEMM's AVX-512 kernels (sgemm.h): a 14 x 32 tile, 28 accumulators of 16 floats, one
 * vfmadd231ps per row and half panel per k with A's element broadcast from memory. A tile with fewer
 * real rows runs a kernel compiled for that many rows. */
#include "sgemm.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX512_FEATURES)

enum { MR = 14, NR = 32, FEW_ROWS = 3, FEW_VECTORS = 8, PREFETCH_BYTES = 256 };

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* The accumulators are named variables, not an array: GCC 12 may copy an array of them to the stack on
 * every k. B is read through the columns' masks (free on AVX-512: both halves are loaded into
 * registers anyway), so a narrow panel is neither padded nor read beyond its columns. */
#define FOR_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define DECLARE_ROW(r) __m512 c##r##_0 = _mm512_setzero_ps(), c##r##_1 = _mm512_setzero_ps();
#define LOAD_ROW(r)                                                   \
    if (rows > r) {                                                   \
        c##r##_0 = _mm512_maskz_loadu_ps(first, c + r * ldc);         \
        c##r##_1 = _mm512_maskz_loadu_ps(second, c + r * ldc + 16);   \
    }
#define STEP_ROW(r)                                              \
    if (rows > r) {                                              \
        const __m512 ar = _mm512_set1_ps(a[r]);                  \
        c##r##_0 = _mm512_fmadd_ps(ar, b0, c##r##_0);            \
        c##r##_1 = _mm512_fmadd_ps(ar, b1, c##r##_1);            \
    }
#define STORE_ROW(r)                                                  \
    if (rows > r) {                                                   \
        _mm512_mask_storeu_ps(c + r * ldc, first, c##r##_0);          \
        _mm512_mask_storeu_ps(c + r * ldc + 16, second, c##r##_1);    \
    }

static __mmask16 columns_mask(int columns) {
    return (__mmask16)(columns >= 16 ? 0xFFFF : columns <= 0 ? 0 : (1u << columns) - 1);
}

static ALWAYS_INLINE void tile_rows(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c,
                                    ptrdiff_t ldc, int columns, int load, const int rows) {
    const __mmask16 first = columns_mask(columns), second = columns_mask(columns - 16);
    FOR_ROWS(DECLARE_ROW)
    if (load) {
        FOR_ROWS(LOAD_ROW)
    }
    for (ptrdiff_t p = 0; p < k; p++, a += MR, b += ldb) {
        const __m512 b0 = _mm512_maskz_loadu_ps(first, b), b1 = _mm512_maskz_loadu_ps(second, b + 16);
        FOR_ROWS(STEP_ROW)
    }
    FOR_ROWS(STORE_ROW)
}

#define ROWS(n) \
    case n: tile_rows(k, a, b, ldb, c, ldc, columns, load, n); break;

static void tile(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int rows,
                 int columns, int load) {
    switch (rows) {
        ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8) ROWS(9) ROWS(10) ROWS(11) ROWS(12) ROWS(13)
    default: tile_rows(k, a, b, ldb, c, ldc, columns, load, MR); break;
    }
}

/* A few rows (sgemm.h's few_rows): `rows` x `vectors` accumulators of 16 columns continued over k
 * terms, each k reading `vectors` consecutive vectors of one row of B (as many as the columns need, the
 * last masked to the real ones). Named variables, not arrays: GCC 12 copies an array of accumulators
 * to the stack on every k. */
#define FOR_VECTORS(X, r) X(r, 0) X(r, 1) X(r, 2) X(r, 3) X(r, 4) X(r, 5) X(r, 6) X(r, 7)
#define FOR_FEW(X) FOR_VECTORS(X, 0) FOR_VECTORS(X, 1) FOR_VECTORS(X, 2)
#define IF_USED(r, v) if (rows > r && vectors > v)
#define FEW_DECLARE(r, v) __m512 c##r##v = _mm512_setzero_ps();
#define FEW_LOAD(r, v) \
    IF_USED(r, v) c##r##v = _mm512_maskz_loadu_ps(v == vectors - 1 ? last : 0xFFFF, c + r * ldc + 16 * v);
#define FEW_B(r, v) \
    const __m512 b##v = vectors > v ? _mm512_maskz_loadu_ps(v == vectors - 1 ? last : 0xFFFF, b + 16 * v) : zero;
#define FEW_STEP(r, v) IF_USED(r, v) c##r##v = _mm512_fmadd_ps(_mm512_set1_ps(a[r]), b##v, c##r##v);
#define FEW_STORE(r, v) \
    IF_USED(r, v) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, v == vectors - 1 ? last : 0xFFFF, c##r##v);

static ALWAYS_INLINE void few_rows_fixed(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c,
                                         ptrdiff_t ldc, int columns, int load, const int rows, const int vectors) {
    const __m512 zero = _mm512_setzero_ps();
    const __mmask16 last = (__mmask16)(0xFFFFu >> (16 * vectors - columns));
    FOR_FEW(FEW_DECLARE)
    if (load) {
        FOR_FEW(FEW_LOAD)
    }
    for (ptrdiff_t p = 0; p < k; p++, a += MR, b += ldb) {
        FOR_VECTORS(FEW_B, 0)
        FOR_FEW(FEW_STEP)
    }
    FOR_FEW(FEW_STORE)
}

#define FEW(rows, vectors) \
    case (rows) * 16 + (vectors): few_rows_fixed(k, a, b, ldb, c, ldc, columns, load, rows, vectors); break;
#define FEW_ROW(rows) FEW(rows, 1) FEW(rows, 2) FEW(rows, 3) FEW(rows, 4) FEW(rows, 5) FEW(rows, 6) FEW(rows, 7) FEW(rows, 8)

static void few_rows(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int rows,
                     int columns, int load) {
    switch (rows * 16 + (columns + 15) / 16) { FEW_ROW(1) FEW_ROW(2) FEW_ROW(3) }
}


/* 16 floats of a float32 or float16 row. */
static ALWAYS_INLINE __m512 load_16(const char *p, int type) {
    return type == DMLQ_F16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)) : _mm512_loadu_ps(p);
}

/* r[i] holds row i of a 16 x 16 block; afterwards r[j] holds its column j. */
static ALWAYS_INLINE void transpose_16(__m512 *r) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]); /* per 128-bit lane L: columns 4L, 4L + 1 of rows i, i + 1 */
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]); /* columns 4L + 2, 4L + 3 */
    }
    for (int i = 0; i < 16; i += 4) { /* s[i + c], lane L: column 4L + c of rows i .. i + 3 */
        const __m512d lo = _mm512_castps_pd(t[i]), lo2 = _mm512_castps_pd(t[i + 2]);
        const __m512d hi = _mm512_castps_pd(t[i + 1]), hi2 = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, lo2));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, lo2));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi, hi2));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi, hi2));
    }
    for (int c = 0; c < 4; c++) { /* column 4L + c: lane L of s[c], s[4 + c], s[8 + c], s[12 + c] */
        const __m512 low01 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44), high01 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
        const __m512 low23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
        const __m512 high23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
        t[c] = _mm512_shuffle_f32x4(low01, low23, 0x88);
        t[4 + c] = _mm512_shuffle_f32x4(low01, low23, 0xDD);
        t[8 + c] = _mm512_shuffle_f32x4(high01, high23, 0x88);
        t[12 + c] = _mm512_shuffle_f32x4(high01, high23, 0xDD);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* A float16 op(B) with contiguous columns: each k's row widened 16 at a time. */
static void pack_b_halves(float *dst, ptrdiff_t ldd, const char *b, int columns, ptrdiff_t k, ptrdiff_t b_row) {
    for (ptrdiff_t p = 0; p < k; p++, dst += ldd, b += b_row)
        for (int j = 0; j < NR; j += 16) {
            const __mmask16 real = (__mmask16)(columns - j >= 16 ? 0xFFFF : columns <= j ? 0 : (1u << (columns - j)) - 1);
            _mm512_storeu_ps(dst + j, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(real, b + 2 * j)));
        }
}

static void store_halves(uint16_t *dst, const float *src, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i += 16) {
        const __mmask16 real = (__mmask16)(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
        const __m256i halves = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(real, src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_mask_storeu_epi16(dst + i, real, halves);
    }
}

#define LANES 16
#define VECTOR __m512
#define ZERO _mm512_setzero_ps
#define LOAD_LANES load_16
#define STORE _mm512_storeu_ps
#define TRANSPOSE transpose_16
#include "sgemm_pack.h"

DMLQ_END_TARGET

const sgemm_kernels dmlq_sgemm_avx512 = {MR, NR, 16 * MR, 256, 1024, tile, 1, pack_a_transposing, pack_b_transposing,
                                         few_rows, FEW_ROWS, 16 * FEW_VECTORS, store_halves, &dmlq_rows_avx512};
#endif
