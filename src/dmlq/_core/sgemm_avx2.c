/* The float GEMM's AVX2 kernels (sgemm.h): a 6 x 16 tile, 12 accumulators of 8 floats, one
 * vfmadd231ps per row and half panel per k with A's element broadcast. A tile with fewer real rows
 * runs a kernel compiled for that many rows. */
#include "sgemm.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX2_FEATURES ",fma")

enum { MR = 6, NR = 16, FEW_ROWS = 3, FEW_VECTORS = 4 };

#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE void tile_rows(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c,
                                    ptrdiff_t ldc, int load, const int rows) {
    __m256 acc[MR][2];
    for (int r = 0; r < rows; r++) {
        acc[r][0] = load ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
        acc[r][1] = load ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
    }
    for (ptrdiff_t p = 0; p < k; p++, a += MR, b += ldb) {
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        for (int r = 0; r < rows; r++) {
            const __m256 ar = _mm256_broadcast_ss(a + r);
            acc[r][0] = _mm256_fmadd_ps(ar, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(ar, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < rows; r++) {
        _mm256_storeu_ps(c + r * ldc, acc[r][0]);
        _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    }
}

#define ROWS(n) \
    case n: tile_rows(k, a, b, ldb, c, ldc, load, n); break;

static void tile(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int rows,
                 int load) {
    switch (rows) {
        ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5)
    default: tile_rows(k, a, b, ldb, c, ldc, load, MR); break;
    }
}

/* A few rows (sgemm.h's few_rows): `rows` x `vectors` accumulators of 8 columns
 * continued over k terms, each k reading `vectors` consecutive vectors of one row of B (as many as
 * the columns need, the last masked to the real ones). */
static ALWAYS_INLINE void few_rows_fixed(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c,
                                         ptrdiff_t ldc, int columns, int load, const int rows, const int vectors) {
    __m256 acc[FEW_ROWS][FEW_VECTORS];
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i last = _mm256_cmpgt_epi32(_mm256_set1_epi32(columns - 8 * (vectors - 1)), lanes);
    for (int r = 0; r < rows; r++) {
        for (int v = 0; v < vectors - 1; v++) acc[r][v] = load ? _mm256_loadu_ps(c + r * ldc + 8 * v) : _mm256_setzero_ps();
        acc[r][vectors - 1] = load ? _mm256_maskload_ps(c + r * ldc + 8 * (vectors - 1), last) : _mm256_setzero_ps();
    }
    for (ptrdiff_t p = 0; p < k; p++, a += MR, b += ldb) {
        __m256 bv[FEW_VECTORS];
        for (int v = 0; v < vectors - 1; v++) bv[v] = _mm256_loadu_ps(b + 8 * v);
        bv[vectors - 1] = _mm256_maskload_ps(b + 8 * (vectors - 1), last);
        for (int r = 0; r < rows; r++) {
            const __m256 ar = _mm256_broadcast_ss(a + r);
            for (int v = 0; v < vectors; v++) acc[r][v] = _mm256_fmadd_ps(ar, bv[v], acc[r][v]);
        }
    }
    for (int r = 0; r < rows; r++) {
        for (int v = 0; v < vectors - 1; v++) _mm256_storeu_ps(c + r * ldc + 8 * v, acc[r][v]);
        _mm256_maskstore_ps(c + r * ldc + 8 * (vectors - 1), last, acc[r][vectors - 1]);
    }
}

#define FEW(rows, vectors) \
    case (rows) * 16 + (vectors): few_rows_fixed(k, a, b, ldb, c, ldc, columns, load, rows, vectors); break;
#define FEW_ROW(rows) FEW(rows, 1) FEW(rows, 2) FEW(rows, 3) FEW(rows, 4)

static void few_rows(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int rows,
                     int columns, int load) {
    switch (rows * 16 + (columns + 7) / 8) { FEW_ROW(1) FEW_ROW(2) FEW_ROW(3) }
}

static void pack_a(float *dst, const char *a, int rows, ptrdiff_t k, ptrdiff_t a_row, ptrdiff_t a_col, int type) {
    dmlq_sgemm_pack_a_portable(dst, a, rows, k, a_row, a_col, type, MR);
}

static void pack_b(float *dst, ptrdiff_t ldd, const char *b, int columns, ptrdiff_t k, ptrdiff_t b_row,
                   ptrdiff_t b_col, int type) {
    dmlq_sgemm_pack_b_portable(dst, ldd, b, columns, k, b_row, b_col, type, NR);
}

DMLQ_END_TARGET

const sgemm_kernels dmlq_sgemm_avx2 = {MR, NR, 24 * MR, 256, 1024, tile, pack_a, pack_b,
                                       few_rows, FEW_ROWS, 8 * FEW_VECTORS, &dmlq_rows_avx2};
#endif
