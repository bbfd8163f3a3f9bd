/* The element-wise rows compiled for AVX2 with F16C (float16 conversions in hardware, exact) and FMA
 * (the quantized add's corrected quotient; FMA is never contracted from plain expressions). */
#include "common.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX2_FEATURES ",fma")

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

/* ---- the quantized add over contiguous bytes ---------------------------------------------------- */

/* How the sum becomes the quotient: s / os (DIVIDE), s * (1 / os) (MULTIPLY: reciprocal_division),
 * or CORRECTED: q = s * (1 / os), the residual s - q * os exact in one FMA, then q + residual / os
 * by one more FMA (Markstein's correction step). CORRECTED is used only for parameter sets where it
 * was verified to give the division's output for all 65,536 (a, b) pairs: corrected_qadd_exact. */
enum { DIVIDE, MULTIPLY, CORRECTED };

typedef struct {
    __m256i a_zero, b_zero, out_zero; /* out_zero: 16 int16 lanes */
    __m256 a_scale, b_scale, divisor, inverse;
} qadd_vectors;

/* Inputs are read this far ahead: the loop is short and memory-bound. */
enum { QADD_PREFETCH_BYTES = 4096 };

static qadd_vectors qadd_setup(const dmlq_qadd_params *P) {
    return (qadd_vectors){
        _mm256_set1_epi32(P->a_zero_point), _mm256_set1_epi32(P->b_zero_point),
        _mm256_set1_epi16((int16_t)P->out_zero_point), _mm256_set1_ps(P->a_scale), _mm256_set1_ps(P->b_scale),
        _mm256_set1_ps(P->out_scale), _mm256_set1_ps(1.0f / P->out_scale)};
}

/* float32(bytes - zero) * scale for 8 bytes. */
static inline __m256 scaled_8(const uint8_t *bytes, const int is_signed, __m256i zero, __m256 scale) {
    const __m128i loaded = _mm_loadl_epi64((const __m128i *)bytes);
    const __m256i wide = is_signed ? _mm256_cvtepi8_epi32(loaded) : _mm256_cvtepu8_epi32(loaded);
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(wide, zero)), scale);
}

static inline __m256 quotient_8(__m256 sum, const qadd_vectors *v, const int mode) {
    if (mode == DIVIDE) return _mm256_div_ps(sum, v->divisor);
    const __m256 q = _mm256_mul_ps(sum, v->inverse);
    if (mode == MULTIPLY) return q;
    return _mm256_fmadd_ps(_mm256_fnmadd_ps(q, v->divisor, sum), v->inverse, q);
}

/* round(q) as int32, the conversion rounding half to even (MXCSR's default). Unverified (`guarded`),
 * q is clamped to +-2**16 first so that it converts: beyond, every output saturates anyway, and q
 * is never NaN (dmlq_qadd_simd_parameters). The
 * corrected route skips the clamp: its verification compares every output, so parameters where it
 * would matter divide instead. */
static inline __m256i rounded_8(__m256 q, const int guarded) {
    if (!guarded) return _mm256_cvtps_epi32(q);
    const __m256 bound = _mm256_set1_ps(65536.0f);
    return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(q, _mm256_sub_ps(_mm256_setzero_ps(), bound)), bound));
}

/* 32 outputs: four vectors of 8 packed to int16 with saturation, the zero point added with
 * saturation, packed to bytes with the output type's saturation (the clamp), lanes reordered. The
 * int16 steps clamp as int32 would (dmlq_qadd_simd_parameters bounds the zero point). */
static inline __m256i qadd_32(const uint8_t *a, const uint8_t *b, const qadd_vectors *v, const int a_signed,
                              const int b_signed, const int out_signed, const int mode) {
    __m256i r[4];
    for (int k = 0; k < 4; k++) {
        const __m256 sum = _mm256_add_ps(scaled_8(a + 8 * k, a_signed, v->a_zero, v->a_scale),
                                         scaled_8(b + 8 * k, b_signed, v->b_zero, v->b_scale));
        r[k] = rounded_8(quotient_8(sum, v, mode), mode != CORRECTED);
    }
    const __m256i low = _mm256_adds_epi16(_mm256_packs_epi32(r[0], r[1]), v->out_zero);
    const __m256i high = _mm256_adds_epi16(_mm256_packs_epi32(r[2], r[3]), v->out_zero);
    const __m256i bytes = out_signed ? _mm256_packs_epi16(low, high) : _mm256_packus_epi16(low, high);
    return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Fewer than 32 outputs, through zero-padded tiles, by the same arithmetic as whole vectors. */
static inline void qadd_partial(const uint8_t *a, const uint8_t *b, uint8_t *out, ptrdiff_t count,
                                const qadd_vectors *v, const int a_signed, const int b_signed, const int out_signed,
                                const int mode) {
    uint8_t a_tile[32] = {0}, b_tile[32] = {0}, out_tile[32];
    memcpy(a_tile, a, (size_t)count);
    memcpy(b_tile, b, (size_t)count);
    _mm256_storeu_si256((__m256i *)out_tile, qadd_32(a_tile, b_tile, v, a_signed, b_signed, out_signed, mode));
    memcpy(out, out_tile, (size_t)count);
}

/* Stores go through the caches: streaming them past the caches measured no faster on a Zen 3 (16M
 * elements), unlike the prefetch, which must survive inlining (check with gcc -S: prefetcht0). */
static inline __attribute__((always_inline)) void qadd_loop(const uint8_t *a, const uint8_t *b, uint8_t *out,
                                                            ptrdiff_t n, const qadd_vectors *v, const int a_signed,
                                                            const int b_signed, const int out_signed, const int mode) {
    ptrdiff_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(a + i) + QADD_PREFETCH_BYTES, _MM_HINT_T0);
        _mm_prefetch((const char *)(b + i) + QADD_PREFETCH_BYTES, _MM_HINT_T0);
        _mm256_storeu_si256((__m256i *)(out + i), qadd_32(a + i, b + i, v, a_signed, b_signed, out_signed, mode));
    }
    if (i < n) qadd_partial(a + i, b + i, out + i, n - i, v, a_signed, b_signed, out_signed, mode);
}

static void qadd_contiguous(const uint8_t *a, const uint8_t *b, uint8_t *out, ptrdiff_t n,
                            const dmlq_qadd_params *P, int mode) {
    const qadd_vectors v = qadd_setup(P);
#define QADD_MODES(as, bs, os)                                                                \
    case (as * 4 + bs * 2 + os) * 3 + DIVIDE: qadd_loop(a, b, out, n, &v, as, bs, os, DIVIDE); break;     \
    case (as * 4 + bs * 2 + os) * 3 + MULTIPLY: qadd_loop(a, b, out, n, &v, as, bs, os, MULTIPLY); break; \
    case (as * 4 + bs * 2 + os) * 3 + CORRECTED: qadd_loop(a, b, out, n, &v, as, bs, os, CORRECTED); break;
    switch ((P->a_signed * 4 + P->b_signed * 2 + P->out_signed) * 3 + mode) {
        QADD_MODES(0, 0, 0) QADD_MODES(0, 0, 1) QADD_MODES(0, 1, 0) QADD_MODES(0, 1, 1)
        QADD_MODES(1, 0, 0) QADD_MODES(1, 0, 1) QADD_MODES(1, 1, 0) QADD_MODES(1, 1, 1)
    }
#undef QADD_MODES
}

/* Contiguous operands and parameters that keep every quotient a number (dmlq_qadd_simd_parameters). */
static int fast_qadd(char *const *p, const ptrdiff_t *s, ptrdiff_t n, const dmlq_qadd_params *P, int stream) {
    (void)stream;
    if (s[0] != 1 || s[1] != 1 || s[2] != 1 || !dmlq_qadd_simd_parameters(P)) return 0;
    const int mode = P->reciprocal ? MULTIPLY : P->corrected ? CORRECTED : DIVIDE;
    qadd_contiguous((const uint8_t *)p[0], (const uint8_t *)p[1], (uint8_t *)p[2], n, P, mode);
    return 1;
}

#define FAST_QADD fast_qadd
#define FAST_QADD_CORRECTS 1
#define ROW_TABLE dmlq_rows_avx2
#include "rows.h"

DMLQ_END_TARGET
#endif
