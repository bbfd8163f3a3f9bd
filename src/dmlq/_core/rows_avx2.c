/* The element-wise rows compiled for AVX2 with F16C (float16 conversions in hardware, exact). */
#include "common.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX2_FEATURES)

static void halves_to_floats(float *dst, const uint16_t *src, ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

static void floats_to_halves(uint16_t *dst, const float *src, ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = dmlq_float_to_half(src[i]);
}

#define ROW_TABLE dmlq_rows_avx2
#include "rows.h"

DMLQ_END_TARGET
#endif
