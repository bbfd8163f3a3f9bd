/* The float GEMM's AVX2 kernels (sgemm.h): a 6 x 16 tile, 12 accumulators of 8 floats, one
 * vfmadd231ps per row and half panel per k with A's element broadcast. A tile with fewer real rows
 * runs a kernel compiled for that many rows. */
#include "sgemm.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX2_FEATURES ",fma")

enum { MR = 6, NR = 16, FEW_ROWS = 3, FEW_VECTORS = 8, PREFETCH_BYTES = 256 };

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* The accumulators are named variables, not an array: GCC 12 copies an array of them to the stack on
 * every k, which halves the kernel's speed. */
#define FOR_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define LOAD_ROW(r) \
    if (rows > r) c##r##0 = _mm256_loadu_ps(c + r * ldc), c##r##1 = _mm256_loadu_ps(c + r * ldc + 8);
#define STEP_ROW(r)                                              \
    if (rows > r) {                                              \
        const __m256 ar = _mm256_broadcast_ss(a + r);            \
        c##r##0 = _mm256_fmadd_ps(ar, b0, c##r##0);              \
        c##r##1 = _mm256_fmadd_ps(ar, b1, c##r##1);              \
    }
#define STORE_ROW(r) \
    if (rows > r) _mm256_storeu_ps(c + r * ldc, c##r##0), _mm256_storeu_ps(c + r * ldc + 8, c##r##1);

static ALWAYS_INLINE void tile_rows(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c,
                                    ptrdiff_t ldc, int load, const int rows) {
    const __m256 zero = _mm256_setzero_ps();
    __m256 c00 = zero, c01 = zero, c10 = zero, c11 = zero, c20 = zero, c21 = zero, c30 = zero, c31 = zero,
           c40 = zero, c41 = zero, c50 = zero, c51 = zero;
    if (load) {
        FOR_ROWS(LOAD_ROW)
    }
    for (ptrdiff_t p = 0; p < k; p++, a += MR, b += ldb) {
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        FOR_ROWS(STEP_ROW)
    }
    FOR_ROWS(STORE_ROW)
}

#define ROWS(n) \
    case n: tile_rows(k, a, b, ldb, c, ldc, load, n); break;

static void tile(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int rows,
                 int columns, int load) {
    (void)columns; /* always NR: this set does not mask */
    switch (rows) {
        ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5)
    default: tile_rows(k, a, b, ldb, c, ldc, load, MR); break;
    }
}

/* A few rows (sgemm.h's few_rows): `rows` x `vectors` accumulators of 8 columns continued over k
 * terms, each k reading `vectors` consecutive vectors of one row of B (as many as the columns need, the
 * last masked to the real ones). Named variables, as tile_rows'. */
#define FOR_VECTORS(X, r) X(r, 0) X(r, 1) X(r, 2) X(r, 3) X(r, 4) X(r, 5) X(r, 6) X(r, 7)
#define FOR_FEW(X) FOR_VECTORS(X, 0) FOR_VECTORS(X, 1) FOR_VECTORS(X, 2)
#define IF_USED(r, v) if (rows > r && vectors > v)
#define FEW_DECLARE(r, v) __m256 c##r##v = _mm256_setzero_ps();
#define FEW_READ(p, v) (v == vectors - 1 ? _mm256_maskload_ps(p, last) : _mm256_loadu_ps(p))
#define FEW_LOAD(r, v) IF_USED(r, v) c##r##v = FEW_READ(c + r * ldc + 8 * v, v);
#define FEW_B(r, v) const __m256 b##v = vectors > v ? FEW_READ(b + 8 * v, v) : zero;
#define FEW_STEP(r, v) IF_USED(r, v) c##r##v = _mm256_fmadd_ps(_mm256_broadcast_ss(a + r), b##v, c##r##v);
#define FEW_STORE(r, v)                                                                      \
    IF_USED(r, v) {                                                                          \
        if (v == vectors - 1) _mm256_maskstore_ps(c + r * ldc + 8 * v, last, c##r##v);       \
        else _mm256_storeu_ps(c + r * ldc + 8 * v, c##r##v);                                 \
    }

static ALWAYS_INLINE void few_rows_fixed(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c,
                                         ptrdiff_t ldc, int columns, int load, const int rows, const int vectors) {
    const __m256 zero = _mm256_setzero_ps();
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i last = _mm256_cmpgt_epi32(_mm256_set1_epi32(columns - 8 * (vectors - 1)), lanes);
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
    case (rows) * 16 + (vectors): few_rows_fixed(k, a, b, ldb, c, ldc, width, load, rows, vectors); break;
#define FEW_ROW(rows) FEW(rows, 1) FEW(rows, 2) FEW(rows, 3) FEW(rows, 4)

/* One row takes up to 8 vectors (B straight from memory into the FMAs: 9 registers); two or three rows
 * take 4 at a time (12 accumulators). */
static void few_rows(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int rows,
                     int columns, int load) {
    const int step = rows == 1 ? 64 : 32;
    for (int j = 0; j < columns; j += step, b += step, c += step) {
        const int width = columns - j < step ? columns - j : step;
        switch (rows * 16 + (width + 7) / 8) { FEW_ROW(1) FEW(1, 5) FEW(1, 6) FEW(1, 7) FEW(1, 8) FEW_ROW(2) FEW_ROW(3) }
    }
}

/* 8 floats of a float32 or float16 row. */
static ALWAYS_INLINE __m256 load_8(const char *p, int type) {
    return type == DMLQ_F16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)) : _mm256_loadu_ps((const float *)p);
}

/* r[i] holds row i of an 8 x 8 block; afterwards r[j] holds its column j. */
static ALWAYS_INLINE void transpose_8(__m256 *r) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]); /* per 128-bit lane L: columns 4L, 4L + 1 of rows i, i + 1 */
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]); /* columns 4L + 2, 4L + 3 */
    }
    for (int i = 0; i < 8; i += 4) { /* u[i + c], lane L: column 4L + c of rows i .. i + 3 */
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) { /* column c: lane 0 of u[c], u[4 + c]; column 4 + c: their lane 1 */
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}

/* A float16 op(B) with contiguous columns: each k's row widened 8 at a time (the last 8 through a copy). */
static void pack_b_halves(float *dst, ptrdiff_t ldd, const char *b, int columns, ptrdiff_t k, ptrdiff_t b_row) {
    for (ptrdiff_t p = 0; p < k; p++, dst += ldd, b += b_row)
        for (int j = 0; j < NR; j += 8) {
            uint16_t halves[8] = {0};
            const int real = columns - j >= 8 ? 8 : columns <= j ? 0 : columns - j;
            memcpy(halves, b + 2 * j, sizeof(uint16_t) * (size_t)real);
            _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)halves)));
        }
}

static void store_halves(uint16_t *dst, const float *src, ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = dmlq_float_to_half(src[i]);
}

#define LANES 8
#define VECTOR __m256
#define ZERO _mm256_setzero_ps
#define LOAD_LANES load_8
#define STORE _mm256_storeu_ps
#define TRANSPOSE transpose_8
#include "sgemm_pack.h"

DMLQ_END_TARGET

const sgemm_kernels dmlq_sgemm_avx2 = {MR, NR, 24 * MR, 256, 1024, tile, 0, pack_a_transposing, pack_b_transposing,
                                       few_rows, FEW_ROWS, 8 * FEW_VECTORS, store_halves, &dmlq_rows_avx2};
#endif
