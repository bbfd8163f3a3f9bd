/* Blockwise 4-bit kernels: packed int4/uint4 <-> float32/float16 over a [rows, cols] matrix whose
 * scale and zero point are constant over blocks of block_rows x block_cols elements.
 *
 * Dequantization is a table lookup: within a block, every element is (q - zero_point) * scale for one
 * of 16 values of q, so the block's 16 results are computed once with the reference's arithmetic (an
 * exact integer difference, one float32 product, one rounding to float16 for float16 outputs) and the
 * elements are looked up (AVX2: permutes for float32, byte shuffles for float16).
 *
 * Quantization divides as the reference does (a true float32 division: on AVX2 the divider is not
 * the bottleneck, a product checked against ties measured slower) and spends its work on rounding,
 * saturating and packing nibbles, 32 elements per AVX2 step.
 *
 * Threads take units of rows that start on a byte boundary (two rows when cols is odd), so no two
 * threads write one byte.
 */
#include "common.h"
#include "int4.h"

enum { ROWS_PER_CLAIM_ELEMENTS = 1 << 15 };

static int nibble_at(const uint8_t *packed, ptrdiff_t index) {
    return (packed[index >> 1] >> ((index & 1) * 4)) & 0xF;
}

static int nibble_value(int nibble, int is_signed) { return is_signed && nibble >= 8 ? nibble - 16 : nibble; }

/* ---- dequantize ------------------------------------------------------------------------------ */

typedef struct {
    float f32[16];
    uint16_t f16[16];
} lookup_table;

static float read_float(const char *p, int type) {
    return type == DMLQ_F16 ? dmlq_half_to_float(*(const uint16_t *)p) : *(const float *)p;
}

static const char *block_scale_at(const dmlq_int4_problem *p, ptrdiff_t block_row, ptrdiff_t block_col) {
    return p->scale + block_row * p->scale_row + block_col * p->scale_col;
}

static float block_scale(const dmlq_int4_problem *p, ptrdiff_t block_row, ptrdiff_t block_col) {
    return read_float(block_scale_at(p, block_row, block_col), p->scale_type);
}

static int block_zero_point(const dmlq_int4_problem *p, ptrdiff_t block_row, ptrdiff_t block_col) {
    return p->zero_point ? p->zero_point[block_row * p->zero_row + block_col * p->zero_col] : 0;
}

static void fill_table(lookup_table *table, const dmlq_int4_problem *p, ptrdiff_t block_row, ptrdiff_t block_col) {
    const float scale = block_scale(p, block_row, block_col);
    const int zero_point = block_zero_point(p, block_row, block_col);
    for (int nibble = 0; nibble < 16; nibble++) {
        table->f32[nibble] = (float)(nibble_value(nibble, p->is_signed) - zero_point) * scale;
        if (p->float_type == DMLQ_F16) table->f16[nibble] = dmlq_float_to_half(table->f32[nibble]);
    }
}

static void look_up_elements(const uint8_t *packed, ptrdiff_t first, ptrdiff_t count, const lookup_table *table,
                             char *out, int out_type) {
    if (out_type == DMLQ_F16) {
        uint16_t *o = (uint16_t *)out;
        for (ptrdiff_t i = 0; i < count; i++) o[i] = table->f16[nibble_at(packed, first + i)];
    } else {
        float *o = (float *)out;
        for (ptrdiff_t i = 0; i < count; i++) o[i] = table->f32[nibble_at(packed, first + i)];
    }
}

/* One block's elements first..first + count (one block row's share of the block) into out. */
static void dequantize_block_portable(const dmlq_int4_problem *p, ptrdiff_t block_row, ptrdiff_t block_col,
                                      ptrdiff_t first, ptrdiff_t count, char *out) {
    lookup_table table;
    fill_table(&table, p, block_row, block_col);
    look_up_elements(p->packed, first, count, &table, out, p->float_type);
}

typedef void (*dequantize_block_fn)(const dmlq_int4_problem *, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, char *);

/* Rows first_row..end_row block by block, `block` inlined into each level's own loop. */
static inline void dequantize_rows_by(dequantize_block_fn block, const dmlq_int4_problem *p, ptrdiff_t first_row,
                                      ptrdiff_t end_row) {
    const size_t size = p->float_type == DMLQ_F16 ? 2 : 4;
    for (ptrdiff_t row = first_row; row < end_row; row++) {
        const ptrdiff_t block_row = row / p->block_rows; /* one division per row, none per block */
        for (ptrdiff_t col = 0, block_col = 0; col < p->cols; col += p->block_cols, block_col++) {
            const ptrdiff_t element = row * p->cols + col;
            block(p, block_row, block_col, element, p->block_cols, p->floats + (size_t)element * size);
        }
    }
}

/* Rows of either operation, `reciprocal` being quantize's choice of division route. */
typedef void (*int4_rows_fn)(const dmlq_int4_problem *p, ptrdiff_t first_row, ptrdiff_t end_row, int reciprocal);

static void dequantize_rows_portable(const dmlq_int4_problem *p, ptrdiff_t first_row, ptrdiff_t end_row, int unused) {
    (void)unused;
    dequantize_rows_by(dequantize_block_portable, p, first_row, end_row);
}

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX2_FEATURES)

/* 16 nibbles of 8 bytes, in element order (low nibble first), one per byte. */
static __m128i sixteen_nibbles(const uint8_t *bytes) {
    const __m128i packed = _mm_loadl_epi64((const __m128i *)bytes), low_four = _mm_set1_epi8(0x0F);
    return _mm_unpacklo_epi8(_mm_and_si128(packed, low_four), _mm_and_si128(_mm_srli_epi16(packed, 4), low_four));
}

/* 32 nibbles of 16 bytes, one per byte: elements 0-15 in the low lane, 16-31 in the high lane. */
static __m256i thirty_two_nibbles(const uint8_t *bytes) {
    const __m128i packed = _mm_loadu_si128((const __m128i *)bytes), low_four = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_and_si128(packed, low_four), high = _mm_and_si128(_mm_srli_epi16(packed, 4), low_four);
    const __m256i first16 = _mm256_castsi128_si256(_mm_unpacklo_epi8(low, high));
    return _mm256_inserti128_si256(first16, _mm_unpackhi_epi8(low, high), 1);
}

/* The block's 16 results in registers (nibbles 0-7, 8-15), computed as fill_table computes them: an
 * exact integer difference converted to float32, one float32 product (a float16 scale widened by F16C,
 * exactly as dmlq_half_to_float widens it). */
static void table_avx2(const dmlq_int4_problem *p, ptrdiff_t block_row, ptrdiff_t block_col, __m256 *low,
                       __m256 *high) {
    const char *scale_at = block_scale_at(p, block_row, block_col);
    const __m256 scale = _mm256_set1_ps(p->scale_type == DMLQ_F16 ? _cvtsh_ss(*(const uint16_t *)scale_at)
                                                                  : *(const float *)scale_at);
    const __m256i zero_point = _mm256_set1_epi32(block_zero_point(p, block_row, block_col));
    const __m256i low_values = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i high_values = _mm256_add_epi32(low_values, _mm256_set1_epi32(p->is_signed ? -8 : 8));
    *low = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(low_values, zero_point)), scale);
    *high = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(high_values, zero_point)), scale);
}

/* Whole bytes of 16 elements from packed + first (even) to float32 by two permutes and a blend. */
static ptrdiff_t look_up_f32_avx2(const uint8_t *packed, ptrdiff_t first, ptrdiff_t count, __m256 low, __m256 high,
                                  float *out) {
    const uint8_t *bytes = packed + (first >> 1);
    ptrdiff_t done = 0;
    for (; done + 16 <= count; done += 16, bytes += 8) {
        const __m128i nibbles = sixteen_nibbles(bytes);
        for (int half = 0; half < 2; half++) {
            const __m256i index = _mm256_cvtepu8_epi32(half ? _mm_srli_si128(nibbles, 8) : nibbles);
            const __m256 chosen = _mm256_blendv_ps(_mm256_permutevar8x32_ps(low, index),
                                                   _mm256_permutevar8x32_ps(high, index),
                                                   _mm256_castsi256_ps(_mm256_slli_epi32(index, 28)));
            _mm256_storeu_ps(out + done + 8 * half, chosen);
        }
    }
    return done;
}

/* Whole bytes of 32, then 16 elements from packed + first (even) to float16: the halves' low and high
 * bytes as two byte-shuffle tables, looked up and interleaved. */
static ptrdiff_t look_up_f16_avx2(const uint8_t *packed, ptrdiff_t first, ptrdiff_t count, __m128i halves0,
                                  __m128i halves1, uint16_t *out) {
    const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    const __m128i a = _mm_shuffle_epi8(halves0, split), b = _mm_shuffle_epi8(halves1, split);
    const __m128i low_table = _mm_unpacklo_epi64(a, b), high_table = _mm_unpackhi_epi64(a, b);
    const __m256i low_tables = _mm256_broadcastsi128_si256(low_table);
    const __m256i high_tables = _mm256_broadcastsi128_si256(high_table);
    const uint8_t *bytes = packed + (first >> 1);
    ptrdiff_t done = 0;
    for (; done + 32 <= count; done += 32, bytes += 16) {
        const __m256i nibbles = thirty_two_nibbles(bytes);
        const __m256i l = _mm256_shuffle_epi8(low_tables, nibbles), h = _mm256_shuffle_epi8(high_tables, nibbles);
        const __m256i first_eights = _mm256_unpacklo_epi8(l, h), second_eights = _mm256_unpackhi_epi8(l, h);
        _mm256_storeu_si256((__m256i *)(out + done), _mm256_permute2x128_si256(first_eights, second_eights, 0x20));
        _mm256_storeu_si256((__m256i *)(out + done + 16), _mm256_permute2x128_si256(first_eights, second_eights, 0x31));
    }
    for (; done + 16 <= count; done += 16, bytes += 8) {
        const __m128i nibbles = sixteen_nibbles(bytes);
        const __m128i l = _mm_shuffle_epi8(low_table, nibbles), h = _mm_shuffle_epi8(high_table, nibbles);
        _mm_storeu_si128((__m128i *)(out + done), _mm_unpacklo_epi8(l, h));
        _mm_storeu_si128((__m128i *)(out + done + 8), _mm_unpackhi_epi8(l, h));
    }
    return done;
}

/* As dequantize_block_portable; the table lives in registers and reaches memory only for the
 * elements outside whole 16-element steps (a first element mid-byte, a short end). */
static void dequantize_block_avx2(const dmlq_int4_problem *p, ptrdiff_t block_row, ptrdiff_t block_col,
                                  ptrdiff_t first, ptrdiff_t count, char *out) {
    __m256 low, high;
    table_avx2(p, block_row, block_col, &low, &high);
    lookup_table table;
    const int f16 = p->float_type == DMLQ_F16;
    const size_t size = f16 ? 2 : 4;
    const __m128i halves0 = _mm256_cvtps_ph(low, _MM_FROUND_TO_NEAREST_INT);
    const __m128i halves1 = _mm256_cvtps_ph(high, _MM_FROUND_TO_NEAREST_INT);
    const ptrdiff_t head = first & 1;
    const ptrdiff_t done = head + (f16 ? look_up_f16_avx2(p->packed, first + head, count - head, halves0, halves1,
                                                         (uint16_t *)(out + head * size))
                                       : look_up_f32_avx2(p->packed, first + head, count - head, low, high,
                                                         (float *)(out + head * size)));
    if (head || done < count) {
        _mm256_storeu_ps(table.f32, low);
        _mm256_storeu_ps(table.f32 + 8, high);
        _mm_storeu_si128((__m128i *)table.f16, halves0);
        _mm_storeu_si128((__m128i *)(table.f16 + 8), halves1);
        look_up_elements(p->packed, first, head, &table, out, p->float_type);
        look_up_elements(p->packed, first + done, count - done, &table, out + done * size, p->float_type);
    }
}

static void dequantize_rows_avx2(const dmlq_int4_problem *p, ptrdiff_t first_row, ptrdiff_t end_row, int unused) {
    (void)unused;
    dequantize_rows_by(dequantize_block_avx2, p, first_row, end_row);
}

DMLQ_END_TARGET
#endif

typedef struct {
    const dmlq_int4_problem *p;
    ptrdiff_t rows_per_unit, units, next;
    int reciprocal;
    int4_rows_fn rows;
} rows_context;

static void run_units(void *context, int thread, int threads) {
    rows_context *c = context;
    (void)thread;
    (void)threads;
    for (ptrdiff_t unit = dmlq_claim(&c->next); unit < c->units; unit = dmlq_claim(&c->next)) {
        const ptrdiff_t first = unit * c->rows_per_unit, end = first + c->rows_per_unit;
        c->rows(c->p, first, end < c->p->rows ? end : c->p->rows, c->reciprocal);
    }
}

/* Rows per claimed unit: whole bytes (an even element count) and about ROWS_PER_CLAIM_ELEMENTS elements. */
static ptrdiff_t rows_per_unit(const dmlq_int4_problem *p) {
    const ptrdiff_t step = p->cols % 2 ? 2 : 1;
    ptrdiff_t rows = (ROWS_PER_CLAIM_ELEMENTS / (p->cols > 0 ? p->cols : 1)) / step * step;
    return rows < step ? step : rows;
}

/* The rows of `p` in units claimed by `threads` threads. */
static void run_rows(const dmlq_int4_problem *p, int4_rows_fn rows, int reciprocal, int threads) {
    rows_context c = {p, rows_per_unit(p), 0, 0, reciprocal, rows};
    c.units = (p->rows + c.rows_per_unit - 1) / c.rows_per_unit;
    dmlq_parallel(run_units, &c, c.units > 1 ? threads : 1);
}

void dmlq_dequantize_int4(const dmlq_int4_problem *p, int threads) {
#if DMLQ_X86
    if (dmlq_level() >= DMLQ_LEVEL_AVX2) {
        run_rows(p, dequantize_rows_avx2, 0, threads);
        return;
    }
#endif
    run_rows(p, dequantize_rows_portable, 0, threads);
}

/* ---- quantize -------------------------------------------------------------------------------- */

enum { TILE = 256 };

static void write_nibble(uint8_t *packed, ptrdiff_t index, int value) {
    const int shift = (int)(index & 1) * 4;
    uint8_t *byte = packed + (index >> 1);
    *byte = (uint8_t)((*byte & ~(0xF << shift)) | ((value & 0xF) << shift));
}

/* Nibbles of values[0..count) to elements first..: whole bytes at once, shared bytes nibble by nibble. */
static void store_nibbles(uint8_t *packed, ptrdiff_t first, const int8_t *values, ptrdiff_t count) {
    ptrdiff_t i = 0;
    if (first & 1) {
        write_nibble(packed, first, values[0]);
        i = 1;
    }
    uint8_t *bytes = packed + ((first + i) >> 1);
    const int8_t *pairs = values + i;
    const ptrdiff_t whole = (count - i) / 2;
    for (ptrdiff_t k = 0; k < whole; k++) bytes[k] = (uint8_t)((pairs[2 * k] & 0xF) | ((uint8_t)pairs[2 * k + 1] << 4));
    i += 2 * whole;
    if (i < count) write_nibble(packed, first + i, values[i]);
}

/* One block's elements: clamp(round(x / scale) + zero_point, lo, hi) as the reference computes it (a
 * float32 quotient or product by the float32 reciprocal, halves to even, NaN to 0: dmlq_saturated_byte),
 * in tiles whose loops the compiler vectorises. */
static void quantize_span_portable(const dmlq_int4_problem *p, ptrdiff_t first, ptrdiff_t count, float scale,
                                   float zero, int reciprocal) {
    const float lo = p->is_signed ? -8.0f : 0.0f, hi = p->is_signed ? 7.0f : 15.0f, factor = 1.0f / scale;
    float x[TILE];
    int8_t values[TILE];
    for (ptrdiff_t done = 0; done < count; done += TILE) {
        const ptrdiff_t n = count - done < TILE ? count - done : TILE, start = first + done;
        if (p->float_type == DMLQ_F16)
            for (ptrdiff_t i = 0; i < n; i++) x[i] = dmlq_half_to_float(((const uint16_t *)p->floats)[start + i]);
        else
            memcpy(x, (const float *)p->floats + start, (size_t)n * sizeof(float));
        if (reciprocal)
            for (ptrdiff_t i = 0; i < n; i++) x[i] *= factor;
        else
            for (ptrdiff_t i = 0; i < n; i++) x[i] /= scale;
        for (ptrdiff_t i = 0; i < n; i++) values[i] = (int8_t)dmlq_saturated_byte(x[i], lo, hi, zero);
        store_nibbles(p->packed_out, start, values, n);
    }
}

typedef void (*quantize_span_fn)(const dmlq_int4_problem *, ptrdiff_t, ptrdiff_t, float, float, int);

/* Rows first_row..end_row, block by block through span: a constant where the per-level row functions
 * inline this, so the blocks' calls are direct (or inlined). */
static inline void quantize_rows_by(quantize_span_fn span, const dmlq_int4_problem *p, ptrdiff_t first_row,
                                    ptrdiff_t end_row, int reciprocal) {
    for (ptrdiff_t row = first_row; row < end_row; row++) {
        const ptrdiff_t block_row = row / p->block_rows;
        for (ptrdiff_t col = 0, block_col = 0; col < p->cols; col += p->block_cols, block_col++)
            span(p, row * p->cols + col, p->block_cols, block_scale(p, block_row, block_col),
                 (float)block_zero_point(p, block_row, block_col), reciprocal);
    }
}

static void quantize_rows_portable(const dmlq_int4_problem *p, ptrdiff_t first_row, ptrdiff_t end_row, int reciprocal) {
    quantize_rows_by(quantize_span_portable, p, first_row, end_row, reciprocal);
}

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX2_FEATURES)

/* The AVX2 route saturates before rounding: for integer bounds, clamp(round(q) + z, lo, hi) equals
 * clamp(q, lo - z, hi - z) rounded, plus z (rounding is monotonic and keeps integers), so the quotients
 * are clamped to [lo - z, hi - z] in float32 (NaN kept: max and min return their second operand when
 * one is NaN), rounded by the int32 conversion (in the current rounding mode, as the reference's rint),
 * and z is added to the bytes. A NaN converts to INT32_MIN and saturates to the byte -128, which no
 * clamped quotient reaches while |z| <= 16 (4-bit zero points lie in [-8, 15]): those bytes become 0. */
enum { LARGEST_BYTE_ZERO_POINT = 16 };

typedef struct {
    __m256 low, high, divisor, factor; /* low = lo - z, high = hi - z */
    __m256i zero;                      /* z in every byte */
} quantize_constants;

/* Eight elements' quotients (or products by the reciprocal), clamped to [lo - z, hi - z], NaN kept. */
static inline __m256 clamped_quotients_eight(const dmlq_int4_problem *p, ptrdiff_t element,
                                             const quantize_constants *k, const int reciprocal) {
    const __m256 x = p->float_type == DMLQ_F16
                         ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p->floats + element)))
                         : _mm256_loadu_ps((const float *)p->floats + element);
    const __m256 q = reciprocal ? _mm256_mul_ps(x, k->factor) : _mm256_div_ps(x, k->divisor);
    return _mm256_min_ps(k->high, _mm256_max_ps(k->low, q));
}

/* Thirty-two clamped quotients (v[0..3], eight each) as the sixteen bytes of their nibbles. The
 * saturating packs leave each lane four runs of four consecutive elements, so every pair (element 2k
 * low, 2k + 1 high) stays side by side for one multiply-add (low + 16 * high); a byte shuffle restores
 * the pairs' order. Bytes 0-7 depend on v[0] and v[1] only. */
static __m128i thirty_two_nibbles_of(const __m256 v[4], __m256i zero) {
    const __m256i words01 = _mm256_packs_epi32(_mm256_cvtps_epi32(v[0]), _mm256_cvtps_epi32(v[1]));
    const __m256i words23 = _mm256_packs_epi32(_mm256_cvtps_epi32(v[2]), _mm256_cvtps_epi32(v[3]));
    const __m256i rounded = _mm256_packs_epi16(words01, words23);
    const __m256i nan = _mm256_cmpeq_epi8(rounded, _mm256_set1_epi8(-128));
    const __m256i values = _mm256_andnot_si256(nan, _mm256_add_epi8(rounded, zero));
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_and_si256(values, _mm256_set1_epi8(0x0F)),
                                               _mm256_set1_epi16(0x1001));
    const __m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
    return _mm_shuffle_epi8(bytes, _mm_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15));
}

/* Elements first (even) .. first + count: 32 per step, then 16; returns how many were done. */
static inline ptrdiff_t quantize_whole_bytes(const dmlq_int4_problem *p, ptrdiff_t first, ptrdiff_t count,
                                             const quantize_constants *k, const int reciprocal) {
    uint8_t *bytes = p->packed_out + (first >> 1);
    ptrdiff_t done = 0;
    for (; done + 32 <= count; done += 32, bytes += 16) {
        const ptrdiff_t e = first + done;
        const __m256 v[4] = {
            clamped_quotients_eight(p, e, k, reciprocal), clamped_quotients_eight(p, e + 8, k, reciprocal),
            clamped_quotients_eight(p, e + 16, k, reciprocal), clamped_quotients_eight(p, e + 24, k, reciprocal)};
        _mm_storeu_si128((__m128i *)bytes, thirty_two_nibbles_of(v, k->zero));
    }
    if (done + 16 <= count) {
        const ptrdiff_t e = first + done;
        const __m256 low = clamped_quotients_eight(p, e, k, reciprocal);
        const __m256 high = clamped_quotients_eight(p, e + 8, k, reciprocal);
        const __m256 v[4] = {low, high, low, high};
        _mm_storel_epi64((__m128i *)bytes, thirty_two_nibbles_of(v, k->zero));
        done += 16;
    }
    return done;
}

static inline void quantize_span_avx2(const dmlq_int4_problem *p, ptrdiff_t first, ptrdiff_t count, float scale,
                                      float zero, int reciprocal) {
    ptrdiff_t done = first & 1; /* an element sharing its byte with the one before */
    if (done) quantize_span_portable(p, first, 1, scale, zero, reciprocal);
    if (zero >= -LARGEST_BYTE_ZERO_POINT && zero <= LARGEST_BYTE_ZERO_POINT) {
        const float lo = p->is_signed ? -8.0f : 0.0f, hi = p->is_signed ? 7.0f : 15.0f;
        const quantize_constants k = {_mm256_set1_ps(lo - zero), _mm256_set1_ps(hi - zero), _mm256_set1_ps(scale),
                                      _mm256_set1_ps(1.0f / scale), _mm256_set1_epi8((char)zero)};
        done += reciprocal ? quantize_whole_bytes(p, first + done, count - done, &k, 1)
                           : quantize_whole_bytes(p, first + done, count - done, &k, 0);
    }
    if (done < count) quantize_span_portable(p, first + done, count - done, scale, zero, reciprocal);
}

static void quantize_rows_avx2(const dmlq_int4_problem *p, ptrdiff_t first_row, ptrdiff_t end_row, int reciprocal) {
    quantize_rows_by(quantize_span_avx2, p, first_row, end_row, reciprocal);
}

DMLQ_END_TARGET
#endif

void dmlq_quantize_int4(const dmlq_int4_problem *p, int reciprocal, int threads) {
#if DMLQ_X86
    if (dmlq_level() >= DMLQ_LEVEL_AVX2) {
        run_rows(p, quantize_rows_avx2, reciprocal, threads);
        return;
    }
#endif
    run_rows(p, quantize_rows_portable, reciprocal, threads);
}
