/* The element-wise rows compiled for AVX-512 (F, BW, VL, DQ) with F16C. */
#include <math.h>

#include "common.h"
#include "narrow.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX512_FEATURES)

static void halves_to_floats(float *dst, const uint16_t *src, ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

static void floats_to_halves(uint16_t *dst, const float *src, ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = dmlq_float_to_half(src[i]);
}

/* ---- fused loops for contiguous operands with per-tensor scales ------------------------------------ */

/* Elements before out + i * size is aligned to `alignment` bytes (at most n). */
static ptrdiff_t head_count(const char *out, ptrdiff_t size, ptrdiff_t alignment, ptrdiff_t n) {
    const ptrdiff_t misalignment = (ptrdiff_t)((uintptr_t)out & (uintptr_t)(alignment - 1));
    const ptrdiff_t head = misalignment ? (alignment - misalignment) / size : 0;
    return head < n ? head : n;
}

static inline __mmask16 first(ptrdiff_t count) { return count >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << count) - 1u); }

/* float32(bytes - zero) * scale, 16 lanes. */
static inline __m512 scaled_bytes(const uint8_t *bytes, int is_signed, __mmask16 mask, __m512i zero, __m512 scale) {
    const __m128i loaded = _mm_maskz_loadu_epi8(mask, bytes);
    const __m512i wide = is_signed ? _mm512_cvtepi8_epi32(loaded) : _mm512_cvtepu8_epi32(loaded);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(wide, zero)), scale);
}

/* How a quotient is computed: x / divisor (DIVIDE), the same unless an estimate shows the division
 * unneeded (DIVIDE_WITH_ESTIMATE, quantize), x * (1 / divisor) (MULTIPLY: reciprocal_division), and for
 * the quantized add, CORRECTED: q = s * inverse + s * inverse_low in one FMA, inverse + inverse_low being
 * 1 / os to about 48 bits (dmlq_inverse_low): one rounding of a value within about 2**-47 of s / os, so q
 * is the division's float except where s / os lies that close to a rounding boundary. CORRECTED is used
 * only for parameter sets where it was verified to give the division's output for all 65,536 (a, b) pairs:
 * corrected_qadd_exact. */
enum { DIVIDE, DIVIDE_WITH_ESTIMATE, MULTIPLY, CORRECTED };

static int quotient_mode(int reciprocal, float inverse) {
    return reciprocal ? MULTIPLY : inverse != 0.0f ? DIVIDE_WITH_ESTIMATE : DIVIDE;
}

static inline void store_floats16(float *out, __m512 v, __mmask16 mask, int stream) {
    if (mask != 0xffff)
        _mm512_mask_storeu_ps(out, mask, v);
    else if (stream)
        _mm512_stream_ps(out, v);
    else
        _mm512_storeu_ps(out, v);
}

/* Inputs are read PREFETCH_BYTES ahead: the hardware prefetchers alone (seen on a virtualised Xeon)
 * left a 16M-element quantize waiting on memory as long as it computed, at half the speed. */
enum { PREFETCH_BYTES = 8192 };

static inline void prefetch_ahead(const void *p) { __builtin_prefetch((const char *)p + PREFETCH_BYTES, 0, 3); }

/* Runs BODY(i, mask, stream) over n elements in steps of 16: a masked head up to the output's
 * alignment, whole vectors (each after PREFETCH(i); the loop unrolled as the pragma UNROLL says), a
 * masked tail. With `stream` (a large output), whole vectors bypass the caches: they would only
 * evict the inputs, and skipping the read-for-ownership saves a third of an add's memory traffic. */
#define VECTOR_LOOP(out, size, alignment, n, BODY, PREFETCH, UNROLL)                      \
    do {                                                                                  \
        ptrdiff_t i = head_count((const char *)(out), size, alignment, n);                \
        if (i) BODY(0, first(i), 0);                                                      \
        _Pragma(UNROLL) for (; i + 16 <= (n); i += 16) {                                  \
            PREFETCH(i);                                                                  \
            BODY(i, (__mmask16)0xffff, stream);                                           \
        }                                                                                 \
        if (i < (n)) BODY(i, first((n) - i), 0);                                          \
        if (stream) _mm_sfence();                                                         \
    } while (0)

static inline __mmask64 first_64(ptrdiff_t count) { return count >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << count) - 1; }

/* Stores BLOCK(i, mask), the 64 output bytes from element i (those `mask` selects), over n elements:
 * a masked head up to out's 64-byte alignment, whole blocks (each after PREFETCH(i); with `stream`,
 * whole aligned lines past the caches: they would only evict the inputs, and skipping the
 * read-for-ownership saves a third of an add's memory traffic), a masked tail. A block reads all
 * its inputs before it stores. */
#define BYTE_BLOCK_LOOP(out, n, BLOCK, PREFETCH, stream)                                                        \
    do {                                                                                                         \
        ptrdiff_t i_ = head_count((const char *)(out), 1, 64, n);                                                \
        if (i_) _mm512_mask_storeu_epi8(out, first_64(i_), BLOCK(0, first_64(i_)));                              \
        if (stream) {                                                                                            \
            for (; i_ + 64 <= (n); i_ += 64) {                                                                   \
                PREFETCH(i_);                                                                                    \
                _mm512_stream_si512((__m512i *)((out) + i_), BLOCK(i_, ~(__mmask64)0));                          \
            }                                                                                                    \
            _mm_sfence();                                                                                        \
        } else {                                                                                                 \
            for (; i_ + 64 <= (n); i_ += 64) {                                                                   \
                PREFETCH(i_);                                                                                    \
                _mm512_store_si512((__m512i *)((out) + i_), BLOCK(i_, ~(__mmask64)0));                           \
            }                                                                                                    \
        }                                                                                                        \
        if (i_ < (n)) _mm512_mask_storeu_epi8((out) + i_, first_64((n) - i_), BLOCK(i_, first_64((n) - i_)));     \
    } while (0)

/* ---- quantize: contiguous float32, per-tensor scale and zero point ---------------------------------- */

typedef struct {
    __m512 factor;   /* the normal 1 / scale (DIVIDE_WITH_ESTIMATE, MULTIPLY) */
    __m512 divisor;  /* the scale (DIVIDE, DIVIDE_WITH_ESTIMATE) */
    __m512i zero;    /* 32 int16 lanes */
    __m512i nan_out; /* int32 -zero: a NaN lane's zero + nan_out is the output 0 */
} quantize_vectors;

/* round(x / scale) (x * factor for MULTIPLY) as int32, halves to even, exactly: a true division,
 * the quotient clamped to +-2**16 so that it converts (beyond, every output saturates anyway), NaN
 * giving nan_out. */
static inline __m512i exact_quotient_16(__m512 x, const quantize_vectors *v, const int mode) {
    const __m512 q = mode == MULTIPLY ? _mm512_mul_ps(x, v->factor) : _mm512_div_ps(x, v->divisor);
    const __m512 bound = _mm512_set1_ps(65536.0f);
    const __m512 clamped = _mm512_min_ps(_mm512_max_ps(q, _mm512_sub_ps(_mm512_setzero_ps(), bound)), bound);
    const __m512i r = _mm512_cvt_roundps_epi32(clamped, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(q, q, _CMP_UNORD_Q), v->nan_out);
}

/* The same without division, clamp or NaN test, and in `*exact` whether it holds for every lane: y =
 * x * factor converts in range (not to 0x80000000, which stands for NaN and overflow), and for the
 * estimate, y is no nearer than 2**-11 to a half-integer.
 *
 * The estimate: y = x * (1 / scale) rounded twice is within |y| * 2**-22 of the float32 quotient q
 * (three roundings of 2**-24). Where |y| <= 1024 that is below 2**-12, so y farther than 2**-11 from
 * a half-integer rounds as q does; where |y| > 1024, y and q both saturate any 8-bit output whatever
 * the zero point. */
static inline __m512i fast_quotient_16(__m512 x, const quantize_vectors *v, const int mode, __mmask16 *exact) {
    const __m512 y = _mm512_mul_ps(x, v->factor);
    if (mode == DIVIDE_WITH_ESTIMATE) {
        const __m512 distance = _mm512_abs_ps(_mm512_reduce_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        *exact = _mm512_mask_cmp_ps_mask(*exact, distance, _mm512_set1_ps(0.5f - 0x1p-11f), _CMP_LT_OQ);
    }
    const __m512i r = _mm512_cvt_roundps_epi32(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    *exact = _mm512_mask_cmpneq_epi32_mask(*exact, r, _mm512_set1_epi32(INT32_MIN));
    return r;
}

/* 64 outputs from x (those `mask` selects): without division while that is exact for all of them,
 * else the exact quotients. */
static inline __m512i quantized_64(const float *x, __mmask64 mask, const quantize_vectors *v, const int out_signed,
                                   const int mode) {
    __m512 values[4];
    __m512i r[4];
    for (int k = 0; k < 4; k++) values[k] = _mm512_maskz_loadu_ps((__mmask16)(mask >> (16 * k)), x + 16 * k);
    __mmask16 exact = 0xffff;
    if (mode != DIVIDE)
        for (int k = 0; k < 4; k++) r[k] = fast_quotient_16(values[k], v, mode, &exact);
    if (mode == DIVIDE || exact != 0xffff)
        for (int k = 0; k < 4; k++) r[k] = exact_quotient_16(values[k], v, mode);
    return narrowed_64(r, v->zero, out_signed);
}

static inline __attribute__((always_inline)) void quantize_loop(const float *x, uint8_t *out, ptrdiff_t n,
                                                                const quantize_vectors *v, const int out_signed,
                                                                const int mode, int stream) {
#define QUANTIZE_64(i, mask) quantized_64(x + (i), mask, v, out_signed, mode)
#define QUANTIZE_PREFETCH(i) (prefetch_ahead(x + (i)), prefetch_ahead(x + (i) + 16), prefetch_ahead(x + (i) + 32), \
                              prefetch_ahead(x + (i) + 48))
    BYTE_BLOCK_LOOP(out, n, QUANTIZE_64, QUANTIZE_PREFETCH, stream);
#undef QUANTIZE_64
#undef QUANTIZE_PREFETCH
}

static int fast_quantize(char *const *p, const ptrdiff_t *s, ptrdiff_t n, const dmlq_quantize_params *P,
                         int stream) {
    if (P->x_type != DMLQ_F32 || P->scale_type != DMLQ_F32 || s[0] != 4 || s[1] != 0 ||
        (P->has_zero_point && s[2] != 0) || s[3] != 1)
        return 0;
    const float scale = *(const float *)p[1], inverse = dmlq_normal_inverse(scale);
    const int mode = quotient_mode(P->reciprocal, inverse), zero = P->has_zero_point ? (int)dmlq_byte_value(p[2], P->out_signed) : 0;
    const quantize_vectors v = {_mm512_set1_ps(P->reciprocal ? 1.0f / scale : inverse), _mm512_set1_ps(scale),
                                _mm512_set1_epi16((int16_t)zero), _mm512_set1_epi32(-zero)};
    const float *x = (const float *)p[0];
    uint8_t *out = (uint8_t *)p[3];
    switch (P->out_signed * 3 + (mode == DIVIDE ? 0 : mode == MULTIPLY ? 1 : 2)) {
    case 0: quantize_loop(x, out, n, &v, 0, DIVIDE, stream); break;
    case 1: quantize_loop(x, out, n, &v, 0, MULTIPLY, stream); break;
    case 2: quantize_loop(x, out, n, &v, 0, DIVIDE_WITH_ESTIMATE, stream); break;
    case 3: quantize_loop(x, out, n, &v, 1, DIVIDE, stream); break;
    case 4: quantize_loop(x, out, n, &v, 1, MULTIPLY, stream); break;
    default: quantize_loop(x, out, n, &v, 1, DIVIDE_WITH_ESTIMATE, stream); break;
    }
    return 1;
}

/* float32(q - zero) * scale for contiguous 8-bit q and float32 output; the scale and the zero
 * point are per-tensor or vary along the row (contiguous), each combination compiled apart. */
static inline __attribute__((always_inline)) void dequantize_loop(const uint8_t *q, const char *scales,
                                                                  const char *zeros, float *out, ptrdiff_t n,
                                                                  const int is_signed, const int has_zero,
                                                                  const int scale_varies, const int zero_varies,
                                                                  int stream) {
    const __m512 scale = _mm512_set1_ps(*(const float *)scales);
    const __m512i zero = _mm512_set1_epi32(has_zero ? (int32_t)dmlq_byte_value(zeros, is_signed) : 0);
    const float *scale_row = (const float *)scales;
    const uint8_t *zero_row = (const uint8_t *)zeros;
#define SCALE_16(i, mask) (scale_varies ? _mm512_maskz_loadu_ps(mask, scale_row + (i)) : scale)
#define ZERO_16(i, mask)                                                                                       \
    (zero_varies ? (is_signed ? _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, zero_row + (i)))               \
                              : _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, zero_row + (i))))              \
                 : zero)
#define DEQUANTIZE_16(i, mask, stream) \
    store_floats16(out + (i), scaled_bytes(q + (i), is_signed, mask, ZERO_16(i, mask), SCALE_16(i, mask)), mask, stream)
/* No prefetch: the input is a fifth of the traffic, and prefetching it measured 3-8 % slower (Zen 5,
 * 16M elements and in L2). */
#define DEQUANTIZE_PREFETCH(i) (void)0
    VECTOR_LOOP(out, 4, 64, n, DEQUANTIZE_16, DEQUANTIZE_PREFETCH, "GCC unroll 4");
}

static int fast_dequantize(char *const *p, const ptrdiff_t *s, ptrdiff_t n, const dmlq_dequantize_params *P,
                           int stream) {
    const int is_signed = P->q_type == DMLQ_I8, has_zero = P->has_zero_point;
    const int scale_varies = s[1] == 4, zero_varies = has_zero && s[2] == 1;
    if ((P->q_type != DMLQ_U8 && !is_signed) || P->out_type != DMLQ_F32 || s[0] != 1 || (s[1] != 0 && !scale_varies) ||
        (has_zero && s[2] != 0 && !zero_varies) || s[3] != 4)
        return 0;
    const uint8_t *q = (const uint8_t *)p[0];
    float *out = (float *)p[3];
    switch (is_signed * 4 + scale_varies * 2 + zero_varies) {
    case 0: dequantize_loop(q, p[1], p[2], out, n, 0, has_zero, 0, 0, stream); break;
    case 1: dequantize_loop(q, p[1], p[2], out, n, 0, has_zero, 0, 1, stream); break;
    case 2: dequantize_loop(q, p[1], p[2], out, n, 0, has_zero, 1, 0, stream); break;
    case 3: dequantize_loop(q, p[1], p[2], out, n, 0, has_zero, 1, 1, stream); break;
    case 4: dequantize_loop(q, p[1], p[2], out, n, 1, has_zero, 0, 0, stream); break;
    case 5: dequantize_loop(q, p[1], p[2], out, n, 1, has_zero, 0, 1, stream); break;
    case 6: dequantize_loop(q, p[1], p[2], out, n, 1, has_zero, 1, 0, stream); break;
    default: dequantize_loop(q, p[1], p[2], out, n, 1, has_zero, 1, 1, stream); break;
    }
    return 1;
}

/* ---- the quantized add over contiguous bytes --------------------------------------------------- */

typedef struct {
    __m512 a_offset, b_offset; /* 2**23 + the zero point (+ 128 for int8 operands): see scaled_64 */
    __m512i out_zero;          /* 32 int16 lanes */
    __m512 a_scale, b_scale, divisor, inverse, inverse_low;
} qadd_vectors;

static qadd_vectors qadd_setup(const dmlq_qadd_params *P) {
    return (qadd_vectors){
        _mm512_set1_ps(0x1p23f + (float)(P->a_zero_point + 128 * P->a_signed)),
        _mm512_set1_ps(0x1p23f + (float)(P->b_zero_point + 128 * P->b_signed)),
        _mm512_set1_epi16((int16_t)P->out_zero_point), _mm512_set1_ps(P->a_scale), _mm512_set1_ps(P->b_scale),
        _mm512_set1_ps(P->out_scale), _mm512_set1_ps(1.0f / P->out_scale),
        _mm512_set1_ps(dmlq_inverse_low(P->out_scale))};
}

/* float32(bytes - zero) * scale for 64 bytes (those `mask` selects), as four vectors: vector k holds
 * element 16 l + 4 k + j in lane l, dword j, the order in which packed_64's packs put them back. Each
 * byte is shuffled into the low byte of the float 2**23 (bits 0x4b000000), giving 2**23 + byte
 * exactly (int8 bytes flipped to byte + 128 first); less `offset` (2**23 + the zero point, likewise
 * shifted) that is byte - zero, exact. */
static inline void scaled_64(__m512 *values, const uint8_t *bytes, __mmask64 mask, const int is_signed, __m512 offset,
                             __m512 scale) {
    __m512i data = _mm512_maskz_loadu_epi8(mask, bytes);
    if (is_signed) data = _mm512_xor_si512(data, _mm512_set1_epi8((char)0x80));
    for (int k = 0; k < 4; k++) {
        const __m512i low_bytes = _mm512_set4_epi32(4 * k + 3, 4 * k + 2, 4 * k + 1, 4 * k);
        const __m512i floats = _mm512_mask_shuffle_epi8(_mm512_set1_epi32(0x4b000000), 0x1111111111111111ull, data,
                                                        low_bytes);
        values[k] = _mm512_mul_ps(_mm512_sub_ps(_mm512_castsi512_ps(floats), offset), scale);
    }
}

/* round(sum / out_scale) as int32, halves to even. The unverified modes clamp the quotient to
 * +-2**16 first, so that it converts: beyond, every output saturates anyway, and the quotient is
 * never NaN (dmlq_qadd_simd_parameters). The corrected route skips
 * the clamp: its verification compares every output, so parameters where it would matter divide. */
static inline __m512i rounded_quotient_16(__m512 sum, const qadd_vectors *v, const int mode) {
    __m512 q;
    if (mode == DIVIDE)
        q = _mm512_div_ps(sum, v->divisor);
    else if (mode == MULTIPLY)
        q = _mm512_mul_ps(sum, v->inverse);
    else
        q = _mm512_fmadd_ps(sum, v->inverse, _mm512_mul_ps(sum, v->inverse_low));
    if (mode != CORRECTED) {
        const __m512 bound = _mm512_set1_ps(65536.0f);
        q = _mm512_min_ps(_mm512_max_ps(q, _mm512_sub_ps(_mm512_setzero_ps(), bound)), bound);
    }
    return _mm512_cvt_roundps_epi32(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* 64 outputs (those `mask` selects). */
static inline __m512i qadd_64(const uint8_t *a, const uint8_t *b, __mmask64 mask, const qadd_vectors *v,
                              const int a_signed, const int b_signed, const int out_signed, const int mode) {
    __m512 a_values[4], b_values[4];
    __m512i r[4];
    scaled_64(a_values, a, mask, a_signed, v->a_offset, v->a_scale);
    scaled_64(b_values, b, mask, b_signed, v->b_offset, v->b_scale);
    for (int k = 0; k < 4; k++) r[k] = rounded_quotient_16(_mm512_add_ps(a_values[k], b_values[k]), v, mode);
    return packed_64(r, v->out_zero, out_signed);
}

static inline __attribute__((always_inline)) void qadd_loop(const uint8_t *a, const uint8_t *b, uint8_t *out,
                                                            ptrdiff_t n, const qadd_vectors *v, const int a_signed,
                                                            const int b_signed, const int out_signed, const int mode,
                                                            const int stream) {
#define QADD_64(i, mask) qadd_64(a + (i), b + (i), mask, v, a_signed, b_signed, out_signed, mode)
#define QADD_PREFETCH(i) (prefetch_ahead(a + (i)), prefetch_ahead(b + (i)))
    BYTE_BLOCK_LOOP(out, n, QADD_64, QADD_PREFETCH, stream);
#undef QADD_64
#undef QADD_PREFETCH
}

/* The quantized add of contiguous bytes with each combination of types and quotient compiled apart. */
static void qadd_contiguous(const uint8_t *a, const uint8_t *b, uint8_t *out, ptrdiff_t n, const dmlq_qadd_params *P,
                            int mode, int stream) {
    const qadd_vectors v = qadd_setup(P);
#define QADD_MODES(as, bs, os)                                                          \
    case (as * 4 + bs * 2 + os) * 3 + 0: qadd_loop(a, b, out, n, &v, as, bs, os, DIVIDE, stream); break;   \
    case (as * 4 + bs * 2 + os) * 3 + 1: qadd_loop(a, b, out, n, &v, as, bs, os, MULTIPLY, stream); break; \
    case (as * 4 + bs * 2 + os) * 3 + 2: qadd_loop(a, b, out, n, &v, as, bs, os, CORRECTED, stream); break;
    switch ((P->a_signed * 4 + P->b_signed * 2 + P->out_signed) * 3 + (mode == DIVIDE ? 0 : mode == MULTIPLY ? 1 : 2)) {
        QADD_MODES(0, 0, 0) QADD_MODES(0, 0, 1) QADD_MODES(0, 1, 0) QADD_MODES(0, 1, 1)
        QADD_MODES(1, 0, 0) QADD_MODES(1, 0, 1) QADD_MODES(1, 1, 0) QADD_MODES(1, 1, 1)
    }
#undef QADD_MODES
}

/* Contiguous operands and parameters that keep every quotient a number (dmlq_qadd_simd_parameters).
 * Without a verified correction step the sums divide without an estimate: they lie on a lattice,
 * often on ties, where an estimate would divide anyway. */
static int fast_qadd(char *const *p, const ptrdiff_t *s, ptrdiff_t n, const dmlq_qadd_params *P, int stream) {
    if (s[0] != 1 || s[1] != 1 || s[2] != 1 || !dmlq_qadd_simd_parameters(P)) return 0;
    const int mode = P->reciprocal ? MULTIPLY : P->corrected ? CORRECTED : DIVIDE;
    qadd_contiguous((const uint8_t *)p[0], (const uint8_t *)p[1], (uint8_t *)p[2], n, P, mode, stream);
    return 1;
}

/* a + b keeping the operand order, which picks the NaN that survives when both are NaN (a's, as
 * dmlq.reference.add says); the compiler may swap the operands of _mm512_add_ps. */
static inline __m512 ordered_add(__m512 a, __m512 b) {
    __m512 sum;
    __asm__("vaddps %2, %1, %0" : "=v"(sum) : "v"(a), "v"(b));
    return sum;
}

/* float32 add, alone or with relu (x < 0 ? 0 : x keeps NaN and -0). */
static int fast_add(char *const *p, const ptrdiff_t *s, ptrdiff_t n, const dmlq_add_params *P, int stream) {
    const int relu = P->activation == DMLQ_ACT_RELU;
    if (P->type != DMLQ_F32 || s[0] != 4 || s[1] != 4 || s[2] != 4 ||
        !(relu || P->activation == DMLQ_ACT_NONE || P->activation == DMLQ_ACT_IDENTITY))
        return 0;
    const float *a = (const float *)p[0], *b = (const float *)p[1];
    float *out = (float *)p[2];
    const __m512 zero = _mm512_setzero_ps();
#define ADD_16(i, mask, stream)                                                                       \
    do {                                                                                              \
        __m512 sum = ordered_add(_mm512_maskz_loadu_ps(mask, a + (i)), _mm512_maskz_loadu_ps(mask, b + (i))); \
        if (relu) sum = _mm512_mask_mov_ps(sum, _mm512_cmp_ps_mask(sum, zero, _CMP_LT_OQ), zero);    \
        store_floats16(out + (i), sum, mask, stream);                                                 \
    } while (0)
#define ADD_PREFETCH(i) (prefetch_ahead(a + (i)), prefetch_ahead(b + (i)))
    VECTOR_LOOP(out, 4, 64, n, ADD_16, ADD_PREFETCH, "GCC unroll 4");
    return 1;
}

#define FAST_QUANTIZE fast_quantize
#define FAST_DEQUANTIZE fast_dequantize
#define FAST_QADD fast_qadd
#define FAST_QADD_CORRECTS 1
#define FAST_ADD fast_add
#define ROW_TABLE dmlq_rows_avx512
#include "rows.h"

DMLQ_END_TARGET
#endif
