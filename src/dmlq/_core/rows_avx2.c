/* The element-wise rows compiled for AVX2 with F16C (float16 conversions in hardware, exact) and FMA
 * (the quantized add's corrected quotient; FMA is never contracted from plain expressions). */
#include "common.h"
#include "narrow.h"

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

/* How a quotient is computed: x / divisor (DIVIDE), the same unless an estimate shows the division
 * unneeded (DIVIDE_WITH_ESTIMATE, quantize), x * (1 / divisor) (MULTIPLY: reciprocal_division), and for
 * the quantized add, CORRECTED: q = s * inverse + s * inverse_low in one FMA, inverse + inverse_low being
 * 1 / os to about 48 bits (dmlq_inverse_low): one rounding of a value within about 2**-47 of s / os, so q
 * is the division's float except where s / os lies that close to a rounding boundary. CORRECTED is used
 * only for parameter sets where it was verified to give the division's output for all 65,536 (a, b) pairs:
 * corrected_qadd_exact. */
enum { DIVIDE, MULTIPLY, CORRECTED, DIVIDE_WITH_ESTIMATE };

/* Inputs are read this far ahead: the loops are short and memory-bound. */
enum { QADD_PREFETCH_BYTES = 4096, QUANTIZE_PREFETCH_BYTES = 4096 };

/* round(x) as int32, the conversion rounding half to even (MXCSR's default), x clamped to +-2**16
 * first so that it converts: beyond, every 8-bit output saturates anyway. */
static inline __m256i clamped_rounded_8(__m256 x) {
    const __m256 bound = _mm256_set1_ps(65536.0f);
    return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(x, _mm256_sub_ps(_mm256_setzero_ps(), bound)), bound));
}

/* ---- quantize: contiguous float32, per-tensor scale and zero point ---------------------------------- */

typedef struct {
    __m256 factor;   /* the normal 1 / scale (DIVIDE_WITH_ESTIMATE, MULTIPLY) */
    __m256 divisor;  /* the scale (DIVIDE, DIVIDE_WITH_ESTIMATE) */
    __m256i zero;    /* 16 int16 lanes */
    __m256i nan_out; /* int32 -zero: a NaN lane's zero + nan_out is the output 0 */
} quantize_vectors;

/* round(x / scale) (x * factor for MULTIPLY) as int32, halves to even, exactly: a true division,
 * clamped, NaN giving nan_out. */
static inline __m256i exact_quotient_8(__m256 x, const quantize_vectors *v, const int mode) {
    const __m256 q = mode == MULTIPLY ? _mm256_mul_ps(x, v->factor) : _mm256_div_ps(x, v->divisor);
    return _mm256_blendv_epi8(clamped_rounded_8(q), v->nan_out, _mm256_castps_si256(_mm256_cmp_ps(q, q, _CMP_UNORD_Q)));
}

/* The same without division, clamp or NaN test; lanes where that may differ set in *inexact: y = x *
 * factor converts out of range (to 0x80000000, which stands for NaN and overflow), or, for the
 * estimate, y is within 2**-11 of a half-integer (rows_avx512.c's fast_quotient_16 says why that
 * suffices). */
static inline __m256i fast_quotient_8(__m256 x, const quantize_vectors *v, const int mode, __m256i *inexact) {
    const __m256 y = _mm256_mul_ps(x, v->factor);
    const __m256i r = _mm256_cvtps_epi32(y);
    __m256i missed = _mm256_cmpeq_epi32(r, _mm256_set1_epi32(INT32_MIN));
    if (mode == DIVIDE_WITH_ESTIMATE) {
        const __m256 distance = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(y, _mm256_cvtepi32_ps(r)));
        const __m256 near = _mm256_cmp_ps(distance, _mm256_set1_ps(0.5f - 0x1p-11f), _CMP_NLT_UQ);
        missed = _mm256_or_si256(missed, _mm256_castps_si256(near));
    }
    *inexact = _mm256_or_si256(*inexact, missed);
    return r;
}

/* 32 outputs from x: without division while that is exact for all of them, else the exact quotients. */
static inline __m256i quantized_32(const float *x, const quantize_vectors *v, const int out_signed, const int mode) {
    __m256i r[4], inexact = _mm256_setzero_si256();
    if (mode != DIVIDE)
        for (int k = 0; k < 4; k++) r[k] = fast_quotient_8(_mm256_loadu_ps(x + 8 * k), v, mode, &inexact);
    if (mode == DIVIDE || !_mm256_testz_si256(inexact, inexact))
        for (int k = 0; k < 4; k++) r[k] = exact_quotient_8(_mm256_loadu_ps(x + 8 * k), v, mode);
    return narrowed_32(r, v->zero, out_signed);
}

/* Stores go through the caches, as the quantized add's below. Fewer than 32 outputs go through
 * zero-padded tiles, by the same arithmetic. */
static inline __attribute__((always_inline)) void quantize_loop(const float *x, uint8_t *out, ptrdiff_t n,
                                                                const quantize_vectors *v, const int out_signed,
                                                                const int mode) {
    ptrdiff_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(x + i + 16 * k) + QUANTIZE_PREFETCH_BYTES, _MM_HINT_T0);
        _mm256_storeu_si256((__m256i *)(out + i), quantized_32(x + i, v, out_signed, mode));
    }
    if (i < n) {
        float x_tile[32] = {0};
        uint8_t out_tile[32];
        memcpy(x_tile, x + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_si256((__m256i *)out_tile, quantized_32(x_tile, v, out_signed, mode));
        memcpy(out + i, out_tile, (size_t)(n - i));
    }
}

static int fast_quantize(char *const *p, const ptrdiff_t *s, ptrdiff_t n, const dmlq_quantize_params *P,
                         int stream) {
    (void)stream;
    if (P->x_type != DMLQ_F32 || P->scale_type != DMLQ_F32 || s[0] != 4 || s[1] != 0 ||
        (P->has_zero_point && s[2] != 0) || s[3] != 1)
        return 0;
    const float scale = *(const float *)p[1], inverse = dmlq_normal_inverse(scale);
    const int mode = P->reciprocal ? MULTIPLY : inverse != 0.0f ? DIVIDE_WITH_ESTIMATE : DIVIDE;
    const int zero = P->has_zero_point ? (int)dmlq_byte_value(p[2], P->out_signed) : 0;
    const quantize_vectors v = {_mm256_set1_ps(P->reciprocal ? 1.0f / scale : inverse), _mm256_set1_ps(scale),
                                _mm256_set1_epi16((int16_t)zero), _mm256_set1_epi32(-zero)};
    const float *x = (const float *)p[0];
    uint8_t *out = (uint8_t *)p[3];
    switch (P->out_signed * 3 + (mode == DIVIDE ? 0 : mode == MULTIPLY ? 1 : 2)) {
    case 0: quantize_loop(x, out, n, &v, 0, DIVIDE); break;
    case 1: quantize_loop(x, out, n, &v, 0, MULTIPLY); break;
    case 2: quantize_loop(x, out, n, &v, 0, DIVIDE_WITH_ESTIMATE); break;
    case 3: quantize_loop(x, out, n, &v, 1, DIVIDE); break;
    case 4: quantize_loop(x, out, n, &v, 1, MULTIPLY); break;
    default: quantize_loop(x, out, n, &v, 1, DIVIDE_WITH_ESTIMATE); break;
    }
    return 1;
}

/* ---- the quantized add over contiguous bytes ---------------------------------------------------- */

typedef struct {
    __m256 a_offset, b_offset; /* 2**23 + the zero point (+ 128 for int8 operands): see scaled_32 */
    __m256i out_zero;          /* 16 int16 lanes */
    __m256 a_scale, b_scale, divisor, inverse, inverse_low;
} qadd_vectors;

static qadd_vectors qadd_setup(const dmlq_qadd_params *P) {
    return (qadd_vectors){
        _mm256_set1_ps(0x1p23f + (float)(P->a_zero_point + 128 * P->a_signed)),
        _mm256_set1_ps(0x1p23f + (float)(P->b_zero_point + 128 * P->b_signed)),
        _mm256_set1_epi16((int16_t)P->out_zero_point), _mm256_set1_ps(P->a_scale), _mm256_set1_ps(P->b_scale),
        _mm256_set1_ps(P->out_scale), _mm256_set1_ps(1.0f / P->out_scale),
        _mm256_set1_ps(dmlq_inverse_low(P->out_scale))};
}

/* float32(bytes - zero) * scale for 32 bytes as four vectors: vector k holds element 16 l + 4 k + j
 * in lane l, dword j, the order in which packed_32's packs put them back. Unpacking each byte under
 * a zero byte and the word 0x4b00 gives the float 2**23 + byte exactly (int8 bytes flipped to
 * byte + 128 first); less `offset` (2**23 + the zero point, likewise shifted) that is byte - zero,
 * exact. */
static inline void scaled_32(__m256 *values, const uint8_t *bytes, const int is_signed, __m256 offset, __m256 scale) {
    __m256i data = _mm256_loadu_si256((const __m256i *)bytes);
    if (is_signed) data = _mm256_xor_si256(data, _mm256_set1_epi8((char)0x80));
    const __m256i exponent = _mm256_set1_epi16(0x4b00);
    const __m256i words[2] = {_mm256_unpacklo_epi8(data, _mm256_setzero_si256()),
                              _mm256_unpackhi_epi8(data, _mm256_setzero_si256())};
    for (int k = 0; k < 4; k++) {
        const __m256i floats = k % 2 ? _mm256_unpackhi_epi16(words[k / 2], exponent)
                                     : _mm256_unpacklo_epi16(words[k / 2], exponent);
        values[k] = _mm256_mul_ps(_mm256_sub_ps(_mm256_castsi256_ps(floats), offset), scale);
    }
}

static inline __m256 quotient_8(__m256 sum, const qadd_vectors *v, const int mode) {
    if (mode == DIVIDE) return _mm256_div_ps(sum, v->divisor);
    if (mode == MULTIPLY) return _mm256_mul_ps(sum, v->inverse);
    return _mm256_fmadd_ps(sum, v->inverse, _mm256_mul_ps(sum, v->inverse_low));
}

/* round(q) as int32, halves to even. Unverified (`guarded`), q is clamped first (it is never NaN:
 * dmlq_qadd_simd_parameters); the corrected route skips the clamp: its verification compares every
 * output, so parameters where it would matter divide instead. */
static inline __m256i rounded_8(__m256 q, const int guarded) {
    return guarded ? clamped_rounded_8(q) : _mm256_cvtps_epi32(q);
}

/* 32 outputs. */
static inline __m256i qadd_32(const uint8_t *a, const uint8_t *b, const qadd_vectors *v, const int a_signed,
                              const int b_signed, const int out_signed, const int mode) {
    __m256 a_values[4], b_values[4];
    __m256i r[4];
    scaled_32(a_values, a, a_signed, v->a_offset, v->a_scale);
    scaled_32(b_values, b, b_signed, v->b_offset, v->b_scale);
    for (int k = 0; k < 4; k++)
        r[k] = rounded_8(quotient_8(_mm256_add_ps(a_values[k], b_values[k]), v, mode), mode != CORRECTED);
    return packed_32(r, v->out_zero, out_signed);
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

/* ---- float32 outputs: dequantize and add ------------------------------------------------------- */

/* The first `count` of 8 lanes (all of them from 8 on), as a mask for maskload/maskstore. */
static inline __m256i first_8(ptrdiff_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(count < 8 ? (int)count : 8), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Elements before out is 32-byte aligned (at most n). */
static inline ptrdiff_t floats_before_alignment(const float *out, ptrdiff_t n) {
    const ptrdiff_t head = (ptrdiff_t)((32 - ((uintptr_t)out & 31)) & 31) / 4;
    return head < n ? head : n;
}

/* Stores BODY(i, count), 8 float32 outputs from element i of which the first `count` are kept, over
 * n elements: a partial head up to out's 32-byte alignment, whole aligned vectors (count 8; streamed
 * past the caches with `stream`, as the AVX-512 rows do), a partial tail. */
#define FLOAT_VECTOR_LOOP(out, n, BODY, stream)                                                              \
    do {                                                                                                      \
        ptrdiff_t i_ = floats_before_alignment(out, n);                                                      \
        if (i_) _mm256_maskstore_ps(out, first_8(i_), BODY(0, i_));                                           \
        if (stream) {                                                                                         \
            for (; i_ + 8 <= (n); i_ += 8) _mm256_stream_ps((out) + i_, BODY(i_, 8));                         \
            _mm_sfence();                                                                                     \
        } else {                                                                                              \
            _Pragma("GCC unroll 4") for (; i_ + 8 <= (n); i_ += 8) _mm256_store_ps((out) + i_, BODY(i_, 8));  \
        }                                                                                                     \
        if (i_ < (n)) _mm256_maskstore_ps((out) + i_, first_8((n) - i_), BODY(i_, (n) - i_));                 \
    } while (0)

/* float32(q - zero) * scale for the first `count` of 8 bytes (the rest read as 0). */
static inline __m256 dequantized_8(const uint8_t *q, ptrdiff_t count, const int is_signed, __m256i zero,
                                   __m256 scale) {
    __m128i loaded;
    if (count == 8) {
        loaded = _mm_loadl_epi64((const __m128i *)q);
    } else {
        uint8_t tile[8] = {0};
        memcpy(tile, q, (size_t)count);
        loaded = _mm_loadl_epi64((const __m128i *)tile);
    }
    const __m256i wide = is_signed ? _mm256_cvtepi8_epi32(loaded) : _mm256_cvtepu8_epi32(loaded);
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(wide, zero)), scale);
}

static inline __attribute__((always_inline)) void dequantize_loop(const uint8_t *q, float *out, ptrdiff_t n,
                                                                  const int is_signed, __m256i zero, __m256 scale,
                                                                  int stream) {
#define DEQUANTIZE_8(i, count) dequantized_8(q + (i), count, is_signed, zero, scale)
    FLOAT_VECTOR_LOOP(out, n, DEQUANTIZE_8, stream);
#undef DEQUANTIZE_8
}

/* float32(q - zero) * scale for contiguous 8-bit q, a per-tensor scale and zero point, float32 out. */
static int fast_dequantize(char *const *p, const ptrdiff_t *s, ptrdiff_t n, const dmlq_dequantize_params *P,
                           int stream) {
    const int is_signed = P->q_type == DMLQ_I8;
    if ((P->q_type != DMLQ_U8 && !is_signed) || P->scale_type != DMLQ_F32 || P->out_type != DMLQ_F32 || s[0] != 1 ||
        s[1] != 0 || (P->has_zero_point && s[2] != 0) || s[3] != 4)
        return 0;
    const __m256i zero = _mm256_set1_epi32(P->has_zero_point ? (int32_t)dmlq_byte_value(p[2], is_signed) : 0);
    const __m256 scale = _mm256_set1_ps(*(const float *)p[1]);
    if (is_signed)
        dequantize_loop((const uint8_t *)p[0], (float *)p[3], n, 1, zero, scale, stream);
    else
        dequantize_loop((const uint8_t *)p[0], (float *)p[3], n, 0, zero, scale, stream);
    return 1;
}

/* a + b keeping the operand order, which picks the NaN that survives when both are NaN (a's, as
 * dmlq.reference.add says); the compiler may swap the operands of _mm256_add_ps. */
static inline __m256 ordered_add(__m256 a, __m256 b) {
    __m256 sum;
    __asm__("vaddps %2, %1, %0" : "=x"(sum) : "x"(a), "x"(b));
    return sum;
}

/* a + b for the first `count` of 8 lanes, with relu (x < 0 ? 0 : x keeps NaN and -0) when asked. */
static inline __m256 added_8(const float *a, const float *b, ptrdiff_t count, const int relu) {
    const __m256i mask = first_8(count);
    const __m256 sum = count == 8 ? ordered_add(_mm256_loadu_ps(a), _mm256_loadu_ps(b))
                                  : ordered_add(_mm256_maskload_ps(a, mask), _mm256_maskload_ps(b, mask));
    return relu ? _mm256_andnot_ps(_mm256_cmp_ps(sum, _mm256_setzero_ps(), _CMP_LT_OQ), sum) : sum;
}

/* float32 add, alone or with relu. */
static int fast_add(char *const *p, const ptrdiff_t *s, ptrdiff_t n, const dmlq_add_params *P, int stream) {
    const int relu = P->activation == DMLQ_ACT_RELU;
    if (P->type != DMLQ_F32 || s[0] != 4 || s[1] != 4 || s[2] != 4 ||
        !(relu || P->activation == DMLQ_ACT_NONE || P->activation == DMLQ_ACT_IDENTITY))
        return 0;
    const float *a = (const float *)p[0], *b = (const float *)p[1];
    float *out = (float *)p[2];
#define ADD_8(i, count) added_8(a + (i), b + (i), count, 0)
#define ADD_RELU_8(i, count) added_8(a + (i), b + (i), count, 1)
    if (relu)
        FLOAT_VECTOR_LOOP(out, n, ADD_RELU_8, stream);
    else
        FLOAT_VECTOR_LOOP(out, n, ADD_8, stream);
#undef ADD_8
#undef ADD_RELU_8
    return 1;
}

#define FAST_DEQUANTIZE fast_dequantize
#define FAST_ADD fast_add
#define FAST_QUANTIZE fast_quantize
#define FAST_QADD fast_qadd
#define FAST_QADD_CORRECTS 1
#define ROW_TABLE dmlq_rows_avx2
#include "rows.h"

DMLQ_END_TARGET
#endif
