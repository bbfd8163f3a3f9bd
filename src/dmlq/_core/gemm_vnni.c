/* The matrix multiply's AVX-512 VNNI kernels: vpdpbusd dot products and a vectorised requantization. */
#include "gemm.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_VNNI_FEATURES)

enum { VECTORS = GEMM_NR / 16 };

/* acc += dot products of 4 bytes: unsigned `a` times signed `b`. Inline assembly because GCC 12
 * copies the accumulator around the intrinsic, which halves the kernel's speed. */
static inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* MR x NR accumulators in registers; per group, NR/16 vectors of B' and MR broadcast dwords of A'. */
static void dot_vnni(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int32_t *tile) {
    __m512i acc[GEMM_MR][VECTORS];
    for (int m = 0; m < GEMM_MR; m++)
        for (int j = 0; j < VECTORS; j++) acc[m][j] = _mm512_setzero_si512();
    for (ptrdiff_t g = 0; g < groups; g++, a += 4, b += GEMM_NR * 4) {
        __m512i bv[VECTORS];
        for (int j = 0; j < VECTORS; j++) bv[j] = _mm512_load_si512((const void *)(b + 64 * j));
        for (int m = 0; m < GEMM_MR; m++) {
            int32_t word;
            memcpy(&word, a + m * lda, 4);
            const __m512i av = _mm512_set1_epi32(word);
            for (int j = 0; j < VECTORS; j++) acc[m][j] = dpbusd(acc[m][j], av, bv[j]);
        }
    }
    for (int m = 0; m < GEMM_MR; m++)
        for (int j = 0; j < VECTORS; j++) _mm512_store_si512((void *)(tile + m * GEMM_NR + 16 * j), acc[m][j]);
}

static inline __m512d rounded(__m512d x) { return _mm512_roundscale_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

/* Whether some lane of the estimate y is within 2**-40 of a half-integer (or NaN, inf). */
static inline int near_tie(__m512d y, __m512d r) {
    return _mm512_cmp_pd_mask(_mm512_abs_pd(_mm512_sub_pd(y, r)), _mm512_set1_pd(0.5 - 0x1p-40), _CMP_LT_OQ) != 0xff;
}

/* The reference's float64 requantization of 16 exact accumulators of row m, as 16 bytes.
 *
 * round(acc * (as * bs) / os) needs the true float64 division only near a tie of an unsaturated
 * output. Divisions are slow, so first y = acc * ((as * (1 / os)) * bs): four roundings of 2**-53
 * against the reference's three, so y is within 7 * 2**-53 * |y| of the reference's quotient q.
 * Where |y| <= 1024 that is below 2**-40, so if y is farther than 2**-40 from the nearest
 * half-integer, q rounds to the same integer; where |y| > 1024, y and q both saturate any 8-bit
 * output whatever the zero point. Only rows with a lane near a tie (or NaN, inf) divide. */
static inline __m128i requantize_16(__m512i acc, const __m512d *bs, ptrdiff_t m, const gemm_quantization *q,
                                    __m512d lo, __m512d hi) {
    const __m512d d[2] = {_mm512_cvtepi32_pd(_mm512_castsi512_si256(acc)),
                          _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(acc, 1))};
    const __m512d as = _mm512_set1_pd(q->a_scale[m]), divisor = _mm512_set1_pd(q->out_divisor[m]);
    __m512d r[2];
    if (q->reciprocal) {
        for (int h = 0; h < 2; h++) r[h] = rounded(_mm512_mul_pd(_mm512_mul_pd(d[h], _mm512_mul_pd(as, bs[h])), divisor));
    } else {
        const __m512d factor = _mm512_set1_pd(q->estimate_factor[m]);
        __m512d y[2];
        for (int h = 0; h < 2; h++) {
            y[h] = _mm512_mul_pd(d[h], _mm512_mul_pd(factor, bs[h]));
            r[h] = rounded(y[h]);
        }
        if (near_tie(y[0], r[0]) | near_tie(y[1], r[1]))
            for (int h = 0; h < 2; h++) r[h] = rounded(_mm512_div_pd(_mm512_mul_pd(d[h], _mm512_mul_pd(as, bs[h])), divisor));
    }
    const __m512d zero_point = _mm512_set1_pd(q->out_zero_point[m]);
    __m256i out[2];
    for (int h = 0; h < 2; h++) {
        const __m512d value = _mm512_add_pd(r[h], zero_point);
        const __mmask8 ordered = q->nan_possible ? _mm512_cmp_pd_mask(value, value, _CMP_ORD_Q) : (__mmask8)0xff;
        out[h] = _mm512_cvtpd_epi32(_mm512_maskz_mov_pd(ordered, _mm512_min_pd(_mm512_max_pd(value, lo), hi)));
    }
    __m128i bytes = _mm512_cvtepi32_epi8(_mm512_inserti64x4(_mm512_castsi256_si512(out[0]), out[1], 1));
    /* Keep vpmovdb in registers: its memory form is microcoded and slow on AMD. */
    __asm__("" : "+v"(bytes));
    return bytes;
}

static void requantize_vnni(const int32_t *dot, const gemm_tile *t, const gemm_quantization *q) {
    if (t->out_col != 1) {
        dmlq_gemm_requantize_portable(dot, t, q);
        return;
    }
    const __m512d lo = _mm512_set1_pd(q->lo), hi = _mm512_set1_pd(q->hi);
    const __m512i k = _mm512_set1_epi32((int32_t)q->k);
    for (ptrdiff_t j = 0; j < t->columns; j += 16) {
        const ptrdiff_t n = t->n0 + j, left = t->columns - j;
        const __mmask16 mask = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        const __m512i zb = _mm512_loadu_si512((const void *)(q->b_zero + n));
        const __m512i column_term = _mm512_sub_epi32(_mm512_loadu_si512((const void *)(t->column_sums + n)),
                                                     _mm512_mullo_epi32(k, zb));
        const __m512d bs[2] = {_mm512_loadu_pd(q->b_scale + n), _mm512_loadu_pd(q->b_scale + n + 8)};
        for (ptrdiff_t i = 0; i < t->rows; i++) {
            const ptrdiff_t m = t->m0 + i;
            /* Wrapping int32 arithmetic: exact, since the true sum fits in int32 (K <= 32768). */
            __m512i acc = _mm512_load_si512((const void *)(dot + i * GEMM_NR + j));
            acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(_mm512_set1_epi32(t->row_sums[m]), zb));
            acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(_mm512_set1_epi32(q->a_zero[m]), column_term));
            const __m128i bytes = requantize_16(acc, bs, m, q, lo, hi);
            if (mask == 0xffff)
                _mm_storeu_si128((__m128i *)(t->out + i * t->out_row + j), bytes);
            else
                _mm_mask_storeu_epi8(t->out + i * t->out_row + j, mask, bytes);
        }
    }
}

/* Row sums by vpsadbw (sums of 8 bytes each) over 64-byte chunks. */
static void row_sums_vnni(const uint8_t *a, ptrdiff_t lda, ptrdiff_t k, int32_t *sums) {
    for (int m = 0; m < GEMM_MR; m++) {
        const uint8_t *row = a + m * lda;
        __m512i acc = _mm512_setzero_si512();
        for (ptrdiff_t kk = 0; kk < k; kk += 64) {
            const __mmask64 mask = k - kk >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (k - kk)) - 1);
            acc = _mm512_add_epi64(acc, _mm512_sad_epu8(_mm512_maskz_loadu_epi8(mask, row + kk), _mm512_setzero_si512()));
        }
        sums[m] = (int32_t)_mm512_reduce_add_epi64(acc);
    }
}

/* Column sums: sums of 4 bytes per dword by vpdpbusd against ones. */
static void column_sums_vnni(const int8_t *b, ptrdiff_t groups, int32_t *sums) {
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i acc[VECTORS];
    for (int j = 0; j < VECTORS; j++) acc[j] = _mm512_setzero_si512();
    for (ptrdiff_t g = 0; g < groups; g++, b += GEMM_NR * 4)
        for (int j = 0; j < VECTORS; j++)
            acc[j] = _mm512_dpbusd_epi32(acc[j], ones, _mm512_load_si512((const void *)(b + 64 * j)));
    for (int j = 0; j < VECTORS; j++) _mm512_storeu_si512((void *)(sums + 16 * j), acc[j]);
}

const gemm_kernels dmlq_gemm_vnni = {dot_vnni, requantize_vnni, row_sums_vnni, column_sums_vnni};

DMLQ_END_TARGET
#endif
