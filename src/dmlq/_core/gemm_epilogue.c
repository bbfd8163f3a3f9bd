/* The matrix multiply's outputs other than its requantized bytes (family.h): the exact sums as
 * int32, the sums scaled to float32 or float16 (with a bias), and the requantization after an int32
 * row bias (the quantized convolution's bias, added to the output channel's sums).
 *
 * A tile arrives as int32 dot products of A' and B' (gemm_kernels.h); the zero-point correction
 *     acc = dot - zb' * rowsum(A') - za' * (colsum(B') - K * zb')
 * is combined in wrapping 32-bit arithmetic: exact whenever the true sum fits (the driver's int32
 * route, K <= 32768), and the true sum mod 2**32 always, which is the int32 output's definition.
 */
#include "family.h"

double dmlq_gemm_sum_bound(const dmlq_gemm_problem *p) {
    const dmlq_gemm_epilogue *e = p->epilogue;
    const int biased = e && e->kind == DMLQ_EPILOGUE_REQUANTIZE && e->row_bias;
    return (double)p->k * 65025.0 + (biased ? (double)e->row_bias_bound : 0.0);
}

/* colsum(B') - K * zb' of the tile's columns, mod 2**32. */
static void column_terms(const gemm_tile *t, const gemm_quantization *q, uint32_t *terms) {
    for (ptrdiff_t j = 0; j < t->columns; j++) {
        const ptrdiff_t n = t->n0 + j;
        terms[j] = (uint32_t)t->column_sums[n] - (uint32_t)q->k * (uint32_t)q->b_zero[n];
    }
}

/* Row i of the tile's corrected sums, mod 2**32, into sums[columns]. */
static void corrected_row(const int32_t *dot, const gemm_tile *t, const gemm_quantization *q, const uint32_t *terms,
                          ptrdiff_t i, uint32_t *restrict sums) {
    const ptrdiff_t m = t->m0 + i;
    const uint32_t row_sum = (uint32_t)t->row_sums[m], za = (uint32_t)q->a_zero[m];
    const int32_t *restrict row = dot + i * t->dot_stride;
    const int32_t *restrict zb = q->b_zero + t->n0;
    for (ptrdiff_t j = 0; j < t->columns; j++)
        sums[j] = (uint32_t)row[j] - (uint32_t)zb[j] * row_sum - za * terms[j];
}

/* One float output from its exact sum: float32(acc * (as * bs)) [+ bias], as out_type. */
static float bias_at(const dmlq_gemm_epilogue *e, ptrdiff_t batch, ptrdiff_t m, ptrdiff_t n) {
    const char *p = e->bias + e->bias_offsets[batch] + m * e->bias_row + n * e->bias_col;
    if (e->bias_type == DMLQ_F16) {
        uint16_t half;
        memcpy(&half, p, 2);
        return dmlq_half_to_float(half);
    }
    float value;
    memcpy(&value, p, 4);
    return value;
}

static void store_float(const dmlq_gemm_epilogue *e, char *out, float value) {
    if (e->out_type == DMLQ_F16) {
        const uint16_t half = dmlq_float_to_half(value);
        memcpy(out, &half, 2);
    } else {
        memcpy(out, &value, 4);
    }
}

static float scaled(double acc, const gemm_quantization *q, ptrdiff_t m, ptrdiff_t n) {
    return (float)(acc * (q->a_scale[m] * q->b_scale[n]));
}

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX512_FEATURES)
/* 16 values of a bias row (float32 or float16, elements `step` bytes apart: its own size, or 0). */
static inline __m512 bias_vector(const dmlq_gemm_epilogue *e, const char *at, ptrdiff_t step, __mmask16 mask) {
    if (step == 0) return _mm512_set1_ps(e->bias_type == DMLQ_F16 ? dmlq_half_to_float(*(const uint16_t *)at)
                                                                  : *(const float *)at);
    return e->bias_type == DMLQ_F16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, at))
                                    : _mm512_maskz_loadu_ps(mask, at);
}

/* float_tile for contiguous outputs (and a bias contiguous or broadcast along the row), 16 columns a
 * vector: the same float64 product rounded once to float32, float32 bias, float16 by vcvtps2ph (round to
 * nearest even, as NumPy; the NaNs arithmetic makes are quiet, whose payloads both keep alike). */
static void float_tile_avx512(const int32_t *dot, const gemm_tile *t, const gemm_quantization *q) {
    const dmlq_gemm_epilogue *e = q->epilogue;
    const int blocks = (int)((t->columns + 15) / 16), half = e->out_type == DMLQ_F16;
    __m512i terms[GEMM_NR / 16 * 2], zb[GEMM_NR / 16 * 2];
    __m512d bs[GEMM_NR / 16 * 2][2];
    __mmask16 masks[GEMM_NR / 16 * 2];
    const __m512i k = _mm512_set1_epi32((int32_t)q->k);
    for (int j = 0; j < blocks; j++) {
        const ptrdiff_t n = t->n0 + 16 * j, left = t->columns - 16 * j;
        masks[j] = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        zb[j] = _mm512_maskz_loadu_epi32(masks[j], q->b_zero + n);
        terms[j] = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(masks[j], t->column_sums + n), _mm512_mullo_epi32(k, zb[j]));
        bs[j][0] = _mm512_maskz_loadu_pd((__mmask8)masks[j], q->b_scale + n);
        bs[j][1] = _mm512_maskz_loadu_pd((__mmask8)(masks[j] >> 8), q->b_scale + n + 8);
    }
    for (ptrdiff_t i = 0; i < t->rows; i++) {
        const ptrdiff_t m = t->m0 + i;
        const __m512i row_sum = _mm512_set1_epi32(t->row_sums[m]), za = _mm512_set1_epi32(q->a_zero[m]);
        const __m512d as = _mm512_set1_pd(q->a_scale[m]);
        const int32_t *row = dot + i * t->dot_stride;
        char *out = t->out + i * t->out_row;
        const char *bias = e->bias ? e->bias + e->bias_offsets[t->batch] + m * e->bias_row + t->n0 * e->bias_col : NULL;
        for (int j = 0; j < blocks; j++) {
            const __m512i sums = _mm512_maskz_loadu_epi32(masks[j], row + 16 * j);
            const __m512i acc = _mm512_sub_epi32(_mm512_sub_epi32(sums, _mm512_mullo_epi32(row_sum, zb[j])),
                                                 _mm512_mullo_epi32(za, terms[j]));
            const __m256 low = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(acc)),
                                                             _mm512_mul_pd(as, bs[j][0])));
            const __m256 high = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(acc, 1)),
                                                              _mm512_mul_pd(as, bs[j][1])));
            __m512 value = _mm512_insertf32x8(_mm512_castps256_ps512(low), high, 1);
            if (bias) value = _mm512_add_ps(value, bias_vector(e, bias + 16 * j * e->bias_col, e->bias_col, masks[j]));
            if (half)
                _mm256_mask_storeu_epi16(out + 32 * j, masks[j], _mm512_cvtps_ph(value, _MM_FROUND_TO_NEAREST_INT));
            else
                _mm512_mask_storeu_ps(out + 64 * j, masks[j], value);
        }
    }
}
DMLQ_END_TARGET
#endif

static void float_tile(const int32_t *dot, const gemm_tile *t, const gemm_quantization *q) {
    const dmlq_gemm_epilogue *e = q->epilogue;
#if DMLQ_X86
    const ptrdiff_t size = e->out_type == DMLQ_F16 ? 2 : 4, bias_size = e->bias_type == DMLQ_F16 ? 2 : 4;
    if (dmlq_level() >= DMLQ_LEVEL_AVX512 && t->out_col == size && t->columns <= 2 * GEMM_NR &&
        (!e->bias || e->bias_col == bias_size || e->bias_col == 0)) {
        float_tile_avx512(dot, t, q);
        return;
    }
#endif
    uint32_t terms[GEMM_MAX_TILE], sums[GEMM_MAX_TILE];
    column_terms(t, q, terms);
    for (ptrdiff_t i = 0; i < t->rows; i++) {
        const ptrdiff_t m = t->m0 + i;
        corrected_row(dot, t, q, terms, i, sums);
        char *out = t->out + i * t->out_row;
        for (ptrdiff_t j = 0; j < t->columns; j++) {
            float value = scaled((double)(int32_t)sums[j], q, m, t->n0 + j);
            if (e->bias) value = value + bias_at(e, t->batch, m, t->n0 + j);
            store_float(e, out + j * t->out_col, value);
        }
    }
}

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX512_FEATURES)
/* int32_tile for contiguous int32 outputs, 16 columns a vector (masked at the tile's edge). */
static void int32_tile_avx512(const int32_t *dot, const gemm_tile *t, const gemm_quantization *q) {
    __m512i terms[GEMM_NR / 16 * 2], zb[GEMM_NR / 16 * 2];
    __mmask16 masks[GEMM_NR / 16 * 2];
    const int blocks = (int)((t->columns + 15) / 16);
    const __m512i k = _mm512_set1_epi32((int32_t)q->k);
    for (int j = 0; j < blocks; j++) {
        const ptrdiff_t n = t->n0 + 16 * j, left = t->columns - 16 * j;
        masks[j] = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        zb[j] = _mm512_maskz_loadu_epi32(masks[j], q->b_zero + n);
        terms[j] = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(masks[j], t->column_sums + n), _mm512_mullo_epi32(k, zb[j]));
    }
    for (ptrdiff_t i = 0; i < t->rows; i++) {
        const ptrdiff_t m = t->m0 + i;
        const __m512i row_sum = _mm512_set1_epi32(t->row_sums[m]), za = _mm512_set1_epi32(q->a_zero[m]);
        const int32_t *row = dot + i * t->dot_stride;
        int32_t *out = (int32_t *)(t->out + i * t->out_row);
        for (int j = 0; j < blocks; j++) {
            const __m512i sums = _mm512_maskz_loadu_epi32(masks[j], row + 16 * j);
            const __m512i by_row = _mm512_mullo_epi32(row_sum, zb[j]), by_column = _mm512_mullo_epi32(za, terms[j]);
            _mm512_mask_storeu_epi32(out + 16 * j, masks[j], _mm512_sub_epi32(_mm512_sub_epi32(sums, by_row), by_column));
        }
    }
}
DMLQ_END_TARGET
#endif

static void int32_tile(const int32_t *dot, const gemm_tile *t, const gemm_quantization *q) {
#if DMLQ_X86
    if (t->out_col == sizeof(int32_t) && dmlq_level() >= DMLQ_LEVEL_AVX512 && t->columns <= 2 * GEMM_NR) {
        int32_tile_avx512(dot, t, q);
        return;
    }
#endif
    uint32_t terms[GEMM_MAX_TILE], sums[GEMM_MAX_TILE];
    column_terms(t, q, terms);
    for (ptrdiff_t i = 0; i < t->rows; i++) {
        char *out = t->out + i * t->out_row;
        if (t->out_col == sizeof(int32_t)) {
            corrected_row(dot, t, q, terms, i, (uint32_t *)out); /* aligned int32 output (py_family.c) */
            continue;
        }
        corrected_row(dot, t, q, terms, i, sums);
        for (ptrdiff_t j = 0; j < t->columns; j++) memcpy(out + j * t->out_col, &sums[j], 4);
    }
}

/* The tile's dot products plus each row's bias, if any (int32: the driver checked the sums fit; the
 * driver's tile is ours to change), requantized by the kernels, which then see no epilogue (their
 * portable fallback would otherwise come back here). */
static void biased_requantize(int32_t *dot, const gemm_tile *t, const gemm_quantization *q,
                              void (*requantize)(const int32_t *, const gemm_tile *, const gemm_quantization *)) {
    for (ptrdiff_t i = 0; q->epilogue->row_bias && i < t->rows; i++) {
        const uint32_t bias = (uint32_t)q->epilogue->row_bias[t->m0 + i];
        uint32_t *restrict row = (uint32_t *)dot + i * t->dot_stride;
        for (ptrdiff_t j = 0; j < t->columns; j++) row[j] += bias;
    }
    gemm_quantization plain = *q;
    plain.epilogue = NULL;
    requantize(dot, t, &plain);
}

void dmlq_gemm_epilogue_tile(int32_t *dot, const gemm_tile *tile, const gemm_quantization *q,
                             void (*requantize)(const int32_t *, const gemm_tile *, const gemm_quantization *)) {
    const dmlq_gemm_epilogue *e = q->epilogue;
    if (e->kind == DMLQ_EPILOGUE_INT32)
        int32_tile(dot, tile, q);
    else if (e->kind == DMLQ_EPILOGUE_FLOAT)
        float_tile(dot, tile, q);
    else
        biased_requantize(dot, tile, q, requantize);
}

void dmlq_gemm_epilogue_one(int64_t acc, const gemm_tile *t, const gemm_quantization *q, ptrdiff_t i, ptrdiff_t j) {
    const dmlq_gemm_epilogue *e = q->epilogue;
    const ptrdiff_t m = t->m0 + i, n = t->n0 + j;
    char *out = t->out + i * t->out_row + j * t->out_col;
    if (e->kind == DMLQ_EPILOGUE_INT32) {
        const uint32_t wrapped = (uint32_t)acc;
        memcpy(out, &wrapped, 4);
    } else if (e->kind == DMLQ_EPILOGUE_FLOAT) {
        float value = scaled((double)acc, q, m, n);
        if (e->bias) value = value + bias_at(e, t->batch, m, n);
        store_float(e, out, value);
    } else {
        const int64_t biased = acc + (e->row_bias ? e->row_bias[m] : 0);
        *(uint8_t *)out = dmlq_requantize_one(biased, q->a_scale[m], q->b_scale[n], q->out_divisor[m], q->reciprocal,
                                              q->out_zero_point[m], q->lo, q->hi);
    }
}
