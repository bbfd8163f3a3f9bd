/* The VNNI convolutions' outputs from their 32-bit sums (conv_implicit.c, conv_depthwise.c).
 *
 * Those kernels multiply x' = x (uint8 x) or x xor 0x80 (int8 x, = x + 128) as vpdpbusd's unsigned
 * operand by w' = w (int8 w) or w xor 0x80 (uint8 w, = w - 128) as its signed one, so that with the
 * zero points moved alike (x_zp', w_zp'), (x - x_zp)(w - w_zp) = (x' - x_zp')(w' - w_zp') and over a
 * window of K products (padding read as x_zp'),
 *     acc = sum x'w' - w_zp' sum x' + constant,   constant = bias - x_zp' sum w' + K x_zp' w_zp'
 * in wrapping int32 arithmetic: the int32 output's definition, and exact for the requantized output
 * whose sums fit (K * 65025 + |bias| <= INT32_MAX: dmlq_conv_implicit_fits, conv_depthwise_fits). An
 * int8 filter with zero point 0 or a uint8 one with 128 has w_zp' = 0: no sum x' is needed.
 *
 * The requantization is dmlq_requantize_one's (gemm_kernels.h), estimated as the matrix multiply's vector kernel
 * does (gemm_vnni.c): y = float32(acc) * factor, factor = float32(x_scale w_scale / y_scale) (or times
 * the reciprocal), three float32 roundings, so |y - q| <= 3 * 2**-24 |q|, below 2**-12 where |q| <= 1024;
 * a lane whose y is within 2**-11 of a half-integer, and every lane of a channel whose factor is not
 * normal within [2**-60, 2**60] or whose sums could reach |y| >= 2**30, takes dmlq_requantize_one
 * itself. Otherwise round(y) + y_zp saturated to 8 bits is the reference's value (beyond |y| > 1024
 * both saturate whatever the zero point). Where x_scale w_scale and the divisor are powers of two
 * ("exact" channels), the reference's products and quotient are exact, and so is y for |acc| < 2**24
 * (float32(acc) exact): y is the reference's value itself, its ties rounded half to even alike, and
 * only lanes with |acc| >= 2**24 take dmlq_requantize_one (about 1 lane in 1,000 of the scalar route
 * otherwise, on exact ties: depthwise 3 x 3 over 32 channels at 112², Zen 5, 10 % of the call).
 */
#ifndef DMLQ_CONV_OUTPUT_H
#define DMLQ_CONV_OUTPUT_H

#include "family.h"
#include "narrow.h"

typedef struct {
    int32_t constant; /* added to every sum of the channel (mod 2**32) */
    int32_t w_zero;   /* w_zp': its products with sum x' are subtracted */
    float factor;     /* the requantization's float32 estimate factor */
    int estimable;    /* every sum of the channel may take the estimate */
    int exact;        /* estimable, and the estimate is the reference's value wherever |acc| < 2**24 */
    double w_scale;
} conv_channel;

typedef struct {
    conv_channel *channels; /* [out_channels] */
    int requantized, any_w_zero;
    int reciprocal;
    double x_scale, divisor, y_zero, lo, hi;
    int32_t y_zero_point;
    uint8_t x_zero;         /* x_zp' */
} conv_output;

/* The output's per-channel terms for windows of k products whose w' sums are weight_sums[m]
 * (all of a channel's taps and input channels): 0, or -1 when memory runs out. */
int conv_output_init(conv_output *o, const dmlq_conv_problem *p, const int32_t *weight_sums, ptrdiff_t k);
void conv_output_free(conv_output *o);

/* x_zp' and a w' byte. */
static inline uint8_t conv_x_zero(const dmlq_conv_problem *p) {
    return (uint8_t)((uint8_t)p->x_zero_point ^ (p->x_signed ? 0x80 : 0));
}

static inline int8_t conv_w_prime(const dmlq_conv_problem *p, uint8_t w) {
    return (int8_t)(uint8_t)(w ^ (p->w_signed ? 0 : 0x80));
}

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_VNNI_FEATURES)

/* acc += 16 dot products of x's 4 unsigned bytes with the 4 signed bytes at w, broadcast. Inline
 * assembly: GCC 12 copies the accumulator around the intrinsic (gemm_vnni.c), and this way the
 * broadcast is the instruction's memory operand. */
static inline __m512i conv_dpbusd(__m512i acc, __m512i x, const int32_t *w) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(x), "m"(*w));
    return acc;
}

static inline __m512i conv_dpbusd_vector(__m512i acc, __m512i x, __m512i w) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
    return acc;
}

/* Up to 4 vectors of channel m's sums (acc, constant included, w_zp' sum x' subtracted) as
 * requantized bytes, lane i of vector j at byte 16 j + i; lanes outside `valid` may hold anything. */
static inline __m512i conv_requantize(const conv_output *o, ptrdiff_t m, const __m512i *acc, int vectors,
                                      uint64_t valid) {
    const conv_channel *c = &o->channels[m];
    const __m512i zero_point = _mm512_set1_epi16((short)o->y_zero_point);
    const __m512 factor = _mm512_set1_ps(c->factor);
    __m512i values[4];
    __mmask16 near[4] = {0, 0, 0, 0}, any = 0;
    for (int j = 0; j < 4; j++) {
        if (j >= vectors) {
            values[j] = values[0];
            continue;
        }
        const __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[j]), factor);
        if (c->exact) { /* |INT32_MIN| stays 2**31 as unsigned */
            near[j] = _mm512_cmp_epu32_mask(_mm512_abs_epi32(acc[j]), _mm512_set1_epi32(1 << 24), _MM_CMPINT_NLT);
        } else {
            const __m512 fraction = _mm512_reduce_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            near[j] = _mm512_cmp_ps_mask(_mm512_abs_ps(fraction), _mm512_set1_ps(0.5f - 0x1p-11f), _CMP_NLT_UQ);
        }
        any |= near[j];
        values[j] = _mm512_cvt_roundps_epi32(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    __m512i ordered = narrowed_64(values, zero_point, o->lo < 0.0);
    if (c->estimable && !any) return ordered;
    uint64_t lanes = valid;
    if (c->estimable)
        lanes &= (uint64_t)near[0] | (uint64_t)near[1] << 16 | (uint64_t)near[2] << 32 | (uint64_t)near[3] << 48;
    if (!lanes) return ordered;
    _Alignas(64) int32_t sums[64];
    _Alignas(64) uint8_t out[64];
    for (int j = 0; j < vectors; j++) _mm512_store_si512((void *)(sums + 16 * j), acc[j]);
    _mm512_store_si512((void *)out, ordered);
    for (; lanes; lanes &= lanes - 1) {
        const int lane = __builtin_ctzll(lanes);
        out[lane] = dmlq_requantize_one(sums[lane], o->x_scale, c->w_scale, o->divisor, o->reciprocal, o->y_zero,
                                        o->lo, o->hi);
    }
    return _mm512_load_si512((const void *)out);
}

DMLQ_END_TARGET
#endif

#endif
