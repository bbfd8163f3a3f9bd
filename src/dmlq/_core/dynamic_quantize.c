/* Dynamic quantization (family.h): the range of the values, the scale and zero point ONNX computes
 * from it, and the quantization, each pass on the threads.
 *
 * The range: the smallest and largest values, NaN when one is NaN (as NumPy's min and max). Rows are
 * split into pieces that threads claim one at a time; each thread keeps its own extremes and whether
 * it met a NaN, combined at the end. A comparison with NaN is false, so x < lo ? x : lo passes NaN
 * over, as vminps(x, lo) does (it returns its second operand when either is NaN): NaN is looked for
 * apart, by x != x.
 *
 * The quantization reads the values a second time. Each thread first quantizes the pieces it read for
 * the range, last read first: those are still in its L2 cache (1 MiB a core on Zen 5, where [1024, 768]
 * float32 is 1.5 MiB a thread), then takes any piece left, first piece first. In that order, a
 * [1024, 768] call took 61 instead of 71 us at 1 thread and 32 instead of 36.5 at 2 (Zen 5, AVX-512). */
#include <math.h>

#include "family.h"
#include "narrow.h"

enum { PIECE = 1 << 15, MAX_RANGE_THREADS = 256, MAX_PIECES = 256 };

typedef struct {
    const char *data;
    int type;
    const ptrdiff_t *offsets;
    ptrdiff_t rows, length, stride, piece, pieces_per_row, next;
    unsigned char *reader; /* NULL, or per piece the thread that read it */
    float lo[MAX_RANGE_THREADS], hi[MAX_RANGE_THREADS];
    int nan[MAX_RANGE_THREADS];
} range_job;

static void range_portable(const char *data, int type, ptrdiff_t count, ptrdiff_t stride, float *lo, float *hi,
                           int *nan) {
    float low = *lo, high = *hi;
    int seen = 0;
    for (ptrdiff_t i = 0; i < count; i++) {
        float x;
        if (type == DMLQ_F16) {
            uint16_t half;
            memcpy(&half, data + i * stride, 2);
            x = dmlq_half_to_float(half);
        } else {
            memcpy(&x, data + i * stride, 4);
        }
        low = x < low ? x : low;
        high = x > high ? x : high;
        seen |= x != x;
    }
    *lo = low, *hi = high, *nan |= seen;
}

#if DMLQ_X86
/* How many of `count` values of `size` bytes from `data` come before an `alignment`-byte boundary (at
 * most alignment / size): NumPy aligns its data to 16 bytes only, and vector loads that straddle cache
 * lines cost the memory-bound passes up to a tenth of their time. */
static ptrdiff_t unaligned_head(const void *data, ptrdiff_t size, ptrdiff_t count, ptrdiff_t alignment) {
    const ptrdiff_t head = (ptrdiff_t)((0 - (uintptr_t)data) % (uintptr_t)alignment) / size;
    return head < count ? head : count;
}

DMLQ_BEGIN_TARGET(DMLQ_AVX2_FEATURES)
/* Contiguous values, 32 at a time in four pairs of accumulators (the rest portably), float16 (`half`)
 * or float32. NaN is looked for in pairs of vectors by unordered comparisons, into two accumulators: one
 * comparison and one accumulator for every vector made a chain of dependent vorps the loop waited on. */
static inline __attribute__((always_inline)) ptrdiff_t range_avx2_of(const char *data, const int half, ptrdiff_t count,
                                                                     float *lo, float *hi, int *nan) {
    __m256 low[4], high[4], unordered[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int j = 0; j < 4; j++) low[j] = _mm256_set1_ps(*lo), high[j] = _mm256_set1_ps(*hi);
    const ptrdiff_t size = half ? 2 : 4, whole = count / 32 * 32;
    for (ptrdiff_t i = 0; i < whole; i += 32) {
        __m256 x[4];
        for (int j = 0; j < 4; j++) {
            const char *at = data + (i + 8 * j) * size;
            x[j] = half ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)at)) : _mm256_loadu_ps((const float *)at);
            low[j] = _mm256_min_ps(x[j], low[j]);
            high[j] = _mm256_max_ps(x[j], high[j]);
        }
        unordered[0] = _mm256_or_ps(unordered[0], _mm256_cmp_ps(x[0], x[1], _CMP_UNORD_Q));
        unordered[1] = _mm256_or_ps(unordered[1], _mm256_cmp_ps(x[2], x[3], _CMP_UNORD_Q));
    }
    float lows[8], highs[8];
    _mm256_storeu_ps(lows, _mm256_min_ps(_mm256_min_ps(low[0], low[1]), _mm256_min_ps(low[2], low[3])));
    _mm256_storeu_ps(highs, _mm256_max_ps(_mm256_max_ps(high[0], high[1]), _mm256_max_ps(high[2], high[3])));
    for (int j = 0; j < 8; j++) {
        *lo = lows[j] < *lo ? lows[j] : *lo;
        *hi = highs[j] > *hi ? highs[j] : *hi;
    }
    *nan |= _mm256_movemask_ps(_mm256_or_ps(unordered[0], unordered[1])) != 0;
    return whole;
}

static ptrdiff_t range_avx2(const char *data, int type, ptrdiff_t count, float *lo, float *hi, int *nan) {
    return type == DMLQ_F16 ? range_avx2_of(data, 1, count, lo, hi, nan) : range_avx2_of(data, 0, count, lo, hi, nan);
}
DMLQ_END_TARGET

DMLQ_BEGIN_TARGET(DMLQ_AVX512_FEATURES)
/* Contiguous values, 64 at a time in four pairs of accumulators (the rest portably). */
static ptrdiff_t range_avx512(const char *data, int type, ptrdiff_t count, float *lo, float *hi, int *nan) {
    __m512 low[4], high[4];
    __mmask16 unordered = 0;
    for (int j = 0; j < 4; j++) low[j] = _mm512_set1_ps(*lo), high[j] = _mm512_set1_ps(*hi);
    const ptrdiff_t size = type == DMLQ_F16 ? 2 : 4, whole = count / 64 * 64;
    for (ptrdiff_t i = 0; i < whole; i += 64) {
        __m512 x[4];
        for (int j = 0; j < 4; j++) {
            const char *at = data + (i + 16 * j) * size;
            x[j] = type == DMLQ_F16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)at)) : _mm512_loadu_ps((const float *)at);
            low[j] = _mm512_min_ps(x[j], low[j]);
            high[j] = _mm512_max_ps(x[j], high[j]);
        }
        /* unordered pairs: one comparison looks for NaN in two vectors */
        unordered |= _mm512_cmp_ps_mask(x[0], x[1], _CMP_UNORD_Q) | _mm512_cmp_ps_mask(x[2], x[3], _CMP_UNORD_Q);
    }
    /* the reductions compare lanes that are never NaN */
    const float low_all = _mm512_reduce_min_ps(_mm512_min_ps(_mm512_min_ps(low[0], low[1]), _mm512_min_ps(low[2], low[3])));
    const float high_all = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(high[0], high[1]), _mm512_max_ps(high[2], high[3])));
    *lo = low_all < *lo ? low_all : *lo;
    *hi = high_all > *hi ? high_all : *hi;
    *nan |= unordered != 0;
    return whole;
}
DMLQ_END_TARGET
#endif

/* The extremes of `count` values `stride` bytes apart, folded into *lo and *hi (*nan set if one is NaN). */
static void range_of(const char *data, int type, ptrdiff_t count, ptrdiff_t stride, float *lo, float *hi, int *nan) {
    ptrdiff_t done = 0;
#if DMLQ_X86
    const ptrdiff_t size = type == DMLQ_F16 ? 2 : 4;
    const int level = dmlq_level();
    if (stride == size && level >= DMLQ_LEVEL_AVX2) {
        done = unaligned_head(data, size, count, level >= DMLQ_LEVEL_AVX512 ? 64 : 32);
        range_portable(data, type, done, stride, lo, hi, nan);
        done += level >= DMLQ_LEVEL_AVX512 ? range_avx512(data + done * size, type, count - done, lo, hi, nan)
                                           : range_avx2(data + done * size, type, count - done, lo, hi, nan);
    }
#endif
    range_portable(data + done * stride, type, count - done, stride, lo, hi, nan);
}

static void range_task(void *context, int thread, int threads) {
    (void)threads;
    range_job *job = context;
    float lo = INFINITY, hi = -INFINITY;
    int nan = 0;
    const ptrdiff_t units = job->rows * job->pieces_per_row;
    for (ptrdiff_t unit = dmlq_claim(&job->next); unit < units; unit = dmlq_claim(&job->next)) {
        const ptrdiff_t row = unit / job->pieces_per_row, first = unit % job->pieces_per_row * job->piece;
        const ptrdiff_t count = job->length - first < job->piece ? job->length - first : job->piece;
        if (job->reader) job->reader[unit] = (unsigned char)thread;
        range_of(job->data + job->offsets[row] + first * job->stride, job->type, count, job->stride, &lo, &hi, &nan);
    }
    job->lo[thread] = lo;
    job->hi[thread] = hi;
    job->nan[thread] = nan;
}

/* The range of job's values, its pieces claimed by `threads` threads. */
static void range_in_pieces(range_job *job, int threads, float *lo, float *hi) {
    if (threads > MAX_RANGE_THREADS) threads = MAX_RANGE_THREADS;
    if (job->rows * job->length < 4 * PIECE) threads = 1;
    for (int t = 0; t < threads; t++) job->lo[t] = INFINITY, job->hi[t] = -INFINITY, job->nan[t] = 0;
    if (job->length > 0) dmlq_parallel(range_task, job, threads);
    *lo = INFINITY, *hi = -INFINITY;
    int nan = 0;
    for (int t = 0; t < threads; t++) {
        *lo = job->lo[t] < *lo ? job->lo[t] : *lo;
        *hi = job->hi[t] > *hi ? job->hi[t] : *hi;
        nan |= job->nan[t];
    }
    if (nan) *lo = *hi = NAN;
}

void dmlq_value_range(const char *data, int type, const ptrdiff_t *offsets, ptrdiff_t rows, ptrdiff_t length,
                      ptrdiff_t stride, float *lo, float *hi, int threads) {
    range_job job = {data, type, offsets, rows, length, stride, PIECE, (length + PIECE - 1) / PIECE, 0, NULL};
    range_in_pieces(&job, threads, lo, hi);
}

void dmlq_dynamic_parameters(float lo, float hi, int is_signed, float *scale, int32_t *zero_point) {
    const float qmin = is_signed ? -128.0f : 0.0f, qmax = is_signed ? 127.0f : 255.0f;
    /* as np.minimum(0, min(x)) and np.maximum(0, max(x)): NaN stays NaN; +inf, -inf (no values) give 0, 0 */
    const float rmin = lo != lo ? lo : lo < 0.0f ? lo : 0.0f, rmax = hi != hi ? hi : hi > 0.0f ? hi : 0.0f;
    *scale = (rmax == rmin ? 1.0f : rmax - rmin) / (qmax - qmin);
    const float zero = nearbyintf(qmin - rmin / *scale);
    *zero_point = (int32_t)(zero != zero ? 0.0f : zero < qmin ? qmin : zero > qmax ? qmax : zero);
}

/* ---- the quantization, at the AVX2 and AVX-512 levels ------------------------------------------ *
 *
 * round(x / scale) + zero point, saturated, with the reference's float32 quotient p = float32(x / scale)
 * rounded half to even (x * inverse with `reciprocal`, inverse = float32(1 / scale)). The caller's x is
 * finite and |x / scale| < 256 (|x| <= rmax - rmin = 255 scale within float32's roundings), so no
 * conversion overflows and no NaN arises.
 *
 * Half the vectors are divided (vdivps) and half estimated, so that the divider and the other pipes
 * work side by side: on Zen 5 (1 thread, x in L2, ns per 16 values) the AVX-512 pass took 0.70 dividing
 * every vector, 0.74-0.90 estimating every one, 0.63-0.67 dividing one in four and 0.55-0.59 one in
 * two; the AVX2 pass 1.47, 1.20 and 1.05-1.09 (every one, estimated, one in two).
 *
 * The estimate y = float32(x * inverse): inverse is within 2^-24 relative of 1 / scale and y's rounding
 * adds 2^-24, so |y - x / scale| <= (2^-23 + 2^-48) |x / scale|, and |p - x / scale| <= 2^-24 |x / scale|.
 * With |x / scale| < 256, y lies within 2^-15 + 2^-16 < 2^-13 of p, so where y is farther than 2^-13 from
 * every half-integer, p rounds to round(y) (p itself is no half-integer there). Nearer lanes are divided. */

#define NEAR_HALF (0.5f - 0x1p-13f)
#define NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

typedef struct quantize_job quantize_job;
typedef void (*piece_quantizer)(const quantize_job *job, const float *x, uint8_t *out, ptrdiff_t count);

struct quantize_job {
    const float *x;
    uint8_t *out;
    ptrdiff_t count, piece, pieces;
    const unsigned char *reader; /* per piece the thread that read it for the range */
    long taken[MAX_PIECES];
    float scale, inverse; /* inverse: float32(1 / scale) */
    int32_t zero_point;
    int is_signed, reciprocal;
    piece_quantizer quantize_piece; /* the level's, chosen once */
};

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX512_FEATURES)

/* The estimate's quotients of 16 values, the lanes near a half-integer divided. */
static inline __attribute__((always_inline)) __m512 estimated_quotient_16(__m512 v, __m512 scale, __m512 inverse) {
    const __m512 estimate = _mm512_mul_ps(v, inverse);
    const __m512 distance = _mm512_abs_ps(_mm512_sub_ps(estimate, _mm512_roundscale_ps(estimate, NEAREST)));
    const __mmask16 near = _mm512_cmp_ps_mask(distance, _mm512_set1_ps(NEAR_HALF), _CMP_GE_OQ);
    return near ? _mm512_mask_div_ps(estimate, near, v, scale) : estimate;
}

/* Up to 64 values (`lanes` of them, all 64 when `lanes` is 64): quotients converted, then narrowed with
 * the zero point (int16 lanes) to bytes. Inlined with a constant 64, the loads and the store are whole. */
static inline __attribute__((always_inline)) void quantize_64(const float *x, uint8_t *out, ptrdiff_t lanes,
                                                              __m512 scale, __m512 inverse, __m512i zero_point,
                                                              int reciprocal, int is_signed) {
    __m512i rounded[4];
    for (int j = 0; j < 4; j++) {
        const ptrdiff_t left = lanes - 16 * j;
        const __m512 v = lanes == 64 ? _mm512_loadu_ps(x + 16 * j)
                         : _mm512_maskz_loadu_ps(left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0,
                                                 x + 16 * j);
        const __m512 quotient = reciprocal ? _mm512_mul_ps(v, inverse)
                                : j % 2 ? estimated_quotient_16(v, scale, inverse)
                                        : _mm512_div_ps(v, scale);
        rounded[j] = _mm512_cvt_roundps_epi32(quotient, NEAREST);
    }
    const __m512i bytes = narrowed_64(rounded, zero_point, is_signed);
    if (lanes == 64)
        _mm512_storeu_si512(out, bytes);
    else
        _mm512_mask_storeu_epi8(out, ((__mmask64)1 << lanes) - 1, bytes);
}

/* `count` values: the few before x's first 64-byte boundary, then 64 at a time from it, then the rest. */
static void quantize_piece_avx512(const quantize_job *job, const float *x, uint8_t *out, ptrdiff_t count) {
    const __m512 scale = _mm512_set1_ps(job->scale), inverse = _mm512_set1_ps(job->inverse);
    const __m512i zero_point = _mm512_set1_epi16((short)job->zero_point);
    const int reciprocal = job->reciprocal, is_signed = job->is_signed; /* out's stores may alias *job */
    const ptrdiff_t head = unaligned_head(x, 4, count, 64);
    if (head) quantize_64(x, out, head, scale, inverse, zero_point, reciprocal, is_signed);
    ptrdiff_t i = head;
    for (; i + 64 <= count; i += 64) quantize_64(x + i, out + i, 64, scale, inverse, zero_point, reciprocal, is_signed);
    if (i < count) quantize_64(x + i, out + i, count - i, scale, inverse, zero_point, reciprocal, is_signed);
}

DMLQ_END_TARGET

DMLQ_BEGIN_TARGET(DMLQ_AVX2_FEATURES)

/* The estimate's quotients of 8 values rounded (vroundps, whatever MXCSR holds); all 8 divided when one is
 * near a half-integer. */
static inline __attribute__((always_inline)) __m256 estimated_rounded_8(__m256 v, __m256 scale, __m256 inverse) {
    const __m256 estimate = _mm256_mul_ps(v, inverse), integer = _mm256_round_ps(estimate, NEAREST);
    const __m256 distance = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(estimate, integer));
    if (_mm256_movemask_ps(_mm256_cmp_ps(distance, _mm256_set1_ps(NEAR_HALF), _CMP_GE_OQ)))
        return _mm256_round_ps(_mm256_div_ps(v, scale), NEAREST);
    return integer;
}

/* quantize_64's arithmetic for 32 whole values, 8 to a vector. */
static inline __attribute__((always_inline)) void quantize_32(const float *x, uint8_t *out, __m256 scale,
                                                              __m256 inverse, __m256i zero_point, int reciprocal,
                                                              int is_signed) {
    __m256i rounded[4];
    for (int j = 0; j < 4; j++) {
        const __m256 v = _mm256_loadu_ps(x + 8 * j);
        const __m256 integer = reciprocal ? _mm256_round_ps(_mm256_mul_ps(v, inverse), NEAREST)
                               : j % 2    ? estimated_rounded_8(v, scale, inverse)
                                          : _mm256_round_ps(_mm256_div_ps(v, scale), NEAREST);
        rounded[j] = _mm256_cvtps_epi32(integer);
    }
    _mm256_storeu_si256((__m256i *)out, narrowed_32(rounded, zero_point, is_signed));
}

/* quantize_32 for the first `lanes` (below 32) values, through a zero-padded copy. */
static void quantize_few(const float *x, uint8_t *out, ptrdiff_t lanes, __m256 scale, __m256 inverse,
                         __m256i zero_point, int reciprocal, int is_signed) {
    float values[32] = {0};
    uint8_t bytes[32];
    memcpy(values, x, (size_t)lanes * sizeof *x);
    quantize_32(values, bytes, scale, inverse, zero_point, reciprocal, is_signed);
    memcpy(out, bytes, (size_t)lanes);
}

/* quantize_piece_avx512's order, 32 values at a time from x's first 32-byte boundary. */
static void quantize_piece_avx2(const quantize_job *job, const float *x, uint8_t *out, ptrdiff_t count) {
    const __m256 scale = _mm256_set1_ps(job->scale), inverse = _mm256_set1_ps(job->inverse);
    const __m256i zero_point = _mm256_set1_epi16((short)job->zero_point);
    const int reciprocal = job->reciprocal, is_signed = job->is_signed; /* out's stores may alias *job */
    const ptrdiff_t head = unaligned_head(x, 4, count, 32);
    if (head) quantize_few(x, out, head, scale, inverse, zero_point, reciprocal, is_signed);
    ptrdiff_t i = head;
    for (; i + 32 <= count; i += 32) quantize_32(x + i, out + i, scale, inverse, zero_point, reciprocal, is_signed);
    if (i < count) quantize_few(x + i, out + i, count - i, scale, inverse, zero_point, reciprocal, is_signed);
}

DMLQ_END_TARGET
#endif

/* The current level's piece_quantizer (dmlq_dynamic_quantize_linear declines below AVX2 and without x86). */
static piece_quantizer level_quantizer(void) {
#if DMLQ_X86
    return dmlq_level() >= DMLQ_LEVEL_AVX512 ? quantize_piece_avx512 : quantize_piece_avx2;
#else
    return NULL;
#endif
}

static void quantize_unit(quantize_job *job, ptrdiff_t unit) {
    const ptrdiff_t first = unit * job->piece, count = job->count - first < job->piece ? job->count - first : job->piece;
    job->quantize_piece(job, job->x + first, job->out + first, count);
}

static void quantize_task(void *context, int thread, int threads) {
    (void)threads;
    quantize_job *job = context;
    for (ptrdiff_t unit = job->pieces - 1; unit >= 0; unit--)
        if (job->reader[unit] == thread && dmlq_take_flag(&job->taken[unit])) quantize_unit(job, unit);
    for (ptrdiff_t unit = 0; unit < job->pieces; unit++)
        if (dmlq_take_flag(&job->taken[unit])) quantize_unit(job, unit);
}

static int is_normal(float value) { return fabsf(value) >= 0x1p-126f && fabsf(value) <= 0x1.fffffep127f; }

int dmlq_dynamic_quantize_linear(const float *x, ptrdiff_t count, int is_signed, int reciprocal, uint8_t *out,
                                 int threads, float *scale, int32_t *zero_point) {
    /* whole 64-value groups a piece, at most MAX_PIECES pieces */
    const ptrdiff_t least = (count + MAX_PIECES - 1) / MAX_PIECES, piece = least < PIECE ? PIECE : (least + 63) / 64 * 64;
    const ptrdiff_t pieces = (count + piece - 1) / piece, offset = 0;
    unsigned char reader[MAX_PIECES];
    range_job range = {(const char *)x, DMLQ_F32, &offset, 1, count, 4, piece, pieces, 0, reader};
    float lo, hi;
    range_in_pieces(&range, threads, &lo, &hi);
    dmlq_dynamic_parameters(lo, hi, is_signed, scale, zero_point);
    const float inverse = 1.0f / *scale;
    if (!DMLQ_X86 || dmlq_level() < DMLQ_LEVEL_AVX2 || !isfinite(lo) || !isfinite(hi) || !is_normal(*scale) ||
        !is_normal(inverse))
        return 0;
    quantize_job job = {x, out, count, piece, pieces, reader, {0}, *scale, inverse, *zero_point, is_signed, reciprocal,
                        level_quantizer()};
    dmlq_parallel(quantize_task, &job, count < 4 * PIECE ? 1 : threads);
    return 1;
}
