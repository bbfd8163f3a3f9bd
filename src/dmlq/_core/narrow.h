/* Vectors of int32 narrowed to output bytes, per instruction set: the element-wise rows (rows_avx2.c,
 * rows_avx512.c) and dynamic quantization (dynamic_quantize.c) store their 8-bit outputs through these.
 * Each width is compiled for its own target, and inlines into callers of that target or a wider one. */
#ifndef DMLQ_NARROW_H
#define DMLQ_NARROW_H

#include "common.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX2_FEATURES)

/* Four vectors of int32 as 32 output bytes: packed to int16 with saturation, the zero point (16 int16
 * lanes) added with saturation, packed to bytes with the output type's saturation (the clamp). The
 * packs work per 128-bit lane: byte 16 l + 4 k + j comes from vector k, lane l, dword j. The int16
 * steps clamp as int32 would while the zero point is within 2**15 - 256. */
static inline __attribute__((always_inline)) __m256i packed_32(const __m256i *r, __m256i zero, const int out_signed) {
    const __m256i low = _mm256_adds_epi16(_mm256_packs_epi32(r[0], r[1]), zero);
    const __m256i high = _mm256_adds_epi16(_mm256_packs_epi32(r[2], r[3]), zero);
    return out_signed ? _mm256_packs_epi16(low, high) : _mm256_packus_epi16(low, high);
}

/* The same for vectors of consecutive elements (vector k holding elements 8 k ... 8 k + 7). */
static inline __attribute__((always_inline)) __m256i narrowed_32(const __m256i *r, __m256i zero, const int out_signed) {
    return _mm256_permutevar8x32_epi32(packed_32(r, zero, out_signed), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

DMLQ_END_TARGET
DMLQ_BEGIN_TARGET(DMLQ_AVX512_FEATURES)

/* Four vectors of int32 as 64 output bytes: packed to int16 with saturation, the zero point (32
 * int16 lanes) added with saturation, packed to bytes with the output type's saturation (the clamp).
 * The packs work per 128-bit lane: byte 16 l + 4 k + j comes from vector k, lane l, dword j. The
 * int16 steps clamp as int32 would while the zero point is within 2**15 - 256. */
static inline __attribute__((always_inline)) __m512i packed_64(const __m512i *r, __m512i zero, const int out_signed) {
    const __m512i low = _mm512_adds_epi16(_mm512_packs_epi32(r[0], r[1]), zero);
    const __m512i high = _mm512_adds_epi16(_mm512_packs_epi32(r[2], r[3]), zero);
    return out_signed ? _mm512_packs_epi16(low, high) : _mm512_packus_epi16(low, high);
}

/* The same for vectors of consecutive elements (vector k holding elements 16 k ... 16 k + 15). */
static inline __attribute__((always_inline)) __m512i narrowed_64(const __m512i *r, __m512i zero, const int out_signed) {
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_epi32(order, packed_64(r, zero, out_signed));
}

DMLQ_END_TARGET
#endif

#endif
