/* The float GEMM's AVX-512 kernels (sgemm.h): a 14 x 32 tile, 28 accumulators of 16 floats, one
 * vfmadd231ps per row and half panel per k with A's element broadcast from memory. A tile with fewer
 * real rows runs a kernel compiled for that many rows. */
#include "sgemm.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX512_FEATURES)

enum { MR = 14, NR = 32 };

#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE void tile_rows(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c,
                                    ptrdiff_t ldc, int load, const int rows) {
    __m512 acc[MR][2];
    for (int r = 0; r < rows; r++) {
        acc[r][0] = load ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = load ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (ptrdiff_t p = 0; p < k; p++, a += MR, b += ldb) {
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        for (int r = 0; r < rows; r++) {
            const __m512 ar = _mm512_set1_ps(a[r]);
            acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < rows; r++) {
        _mm512_storeu_ps(c + r * ldc, acc[r][0]);
        _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
    }
}

#define ROWS(n) \
    case n: tile_rows(k, a, b, ldb, c, ldc, load, n); break;

static void tile(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int rows,
                 int load) {
    switch (rows) {
        ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8) ROWS(9) ROWS(10) ROWS(11) ROWS(12) ROWS(13)
    default: tile_rows(k, a, b, ldb, c, ldc, load, MR); break;
    }
}

static void pack_a(float *dst, const char *a, int rows, ptrdiff_t k, ptrdiff_t a_row, ptrdiff_t a_col, int type) {
    dmlq_sgemm_pack_a_portable(dst, a, rows, k, a_row, a_col, type, MR);
}

static void pack_b(float *dst, const char *b, int columns, ptrdiff_t k, ptrdiff_t b_row, ptrdiff_t b_col, int type) {
    dmlq_sgemm_pack_b_portable(dst, b, columns, k, b_row, b_col, type, NR);
}

DMLQ_END_TARGET

const sgemm_kernels dmlq_sgemm_avx512 = {MR, NR, 16 * MR, 256, 1024, tile, pack_a, pack_b,
                                         &dmlq_rows_avx512};
#endif
