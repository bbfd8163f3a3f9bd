/* Dynamic quantization's range (family.h): the smallest and largest values, NaN when one is NaN (as
 * NumPy's min and max), in one pass on the threads. Rows are split into pieces that threads claim one
 * at a time; each thread keeps its own extremes and whether it met a NaN, combined at the end. A
 * comparison with NaN is false, so x < lo ? x : lo passes NaN over, as vminps(x, lo) does (it returns
 * its second operand when either is NaN): NaN is looked for apart, by x != x. */
#include <math.h>

#include "family.h"

enum { PIECE = 1 << 15, MAX_RANGE_THREADS = 256 };

typedef struct {
    const char *data;
    int type;
    const ptrdiff_t *offsets;
    ptrdiff_t rows, length, stride, pieces_per_row, next;
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
DMLQ_BEGIN_TARGET(DMLQ_AVX2_FEATURES)
/* Contiguous values, 32 at a time in four pairs of accumulators (the rest portably). */
static ptrdiff_t range_avx2(const char *data, int type, ptrdiff_t count, float *lo, float *hi, int *nan) {
    __m256 low[4], high[4], unordered = _mm256_setzero_ps();
    for (int j = 0; j < 4; j++) low[j] = _mm256_set1_ps(*lo), high[j] = _mm256_set1_ps(*hi);
    const ptrdiff_t size = type == DMLQ_F16 ? 2 : 4, whole = count / 32 * 32;
    for (ptrdiff_t i = 0; i < whole; i += 32)
        for (int j = 0; j < 4; j++) {
            const char *at = data + (i + 8 * j) * size;
            const __m256 x = type == DMLQ_F16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)at))
                                              : _mm256_loadu_ps((const float *)at);
            low[j] = _mm256_min_ps(x, low[j]);
            high[j] = _mm256_max_ps(x, high[j]);
            unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        }
    float lows[8], highs[8];
    _mm256_storeu_ps(lows, _mm256_min_ps(_mm256_min_ps(low[0], low[1]), _mm256_min_ps(low[2], low[3])));
    _mm256_storeu_ps(highs, _mm256_max_ps(_mm256_max_ps(high[0], high[1]), _mm256_max_ps(high[2], high[3])));
    for (int j = 0; j < 8; j++) {
        *lo = lows[j] < *lo ? lows[j] : *lo;
        *hi = highs[j] > *hi ? highs[j] : *hi;
    }
    *nan |= _mm256_movemask_ps(unordered) != 0;
    return whole;
}
DMLQ_END_TARGET

DMLQ_BEGIN_TARGET(DMLQ_AVX512_FEATURES)
/* Contiguous values, 64 at a time in four pairs of accumulators (the rest portably). */
static ptrdiff_t range_avx512(const char *data, int type, ptrdiff_t count, float *lo, float *hi, int *nan) {
    __m512 low[4], high[4];
    __mmask16 unordered = 0;
    for (int j = 0; j < 4; j++) low[j] = _mm512_set1_ps(*lo), high[j] = _mm512_set1_ps(*hi);
    const ptrdiff_t size = type == DMLQ_F16 ? 2 : 4, whole = count / 64 * 64;
    for (ptrdiff_t i = 0; i < whole; i += 64)
        for (int j = 0; j < 4; j++) {
            const char *at = data + (i + 16 * j) * size;
            const __m512 x = type == DMLQ_F16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)at))
                                              : _mm512_loadu_ps((const float *)at);
            low[j] = _mm512_min_ps(x, low[j]);
            high[j] = _mm512_max_ps(x, high[j]);
            unordered |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
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
    if (stride == size && dmlq_level() >= DMLQ_LEVEL_AVX512)
        done = range_avx512(data, type, count, lo, hi, nan);
    else if (stride == size && dmlq_level() >= DMLQ_LEVEL_AVX2)
        done = range_avx2(data, type, count, lo, hi, nan);
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
        const ptrdiff_t row = unit / job->pieces_per_row, first = unit % job->pieces_per_row * PIECE;
        const ptrdiff_t count = job->length - first < PIECE ? job->length - first : PIECE;
        range_of(job->data + job->offsets[row] + first * job->stride, job->type, count, job->stride, &lo, &hi, &nan);
    }
    job->lo[thread] = lo;
    job->hi[thread] = hi;
    job->nan[thread] = nan;
}

void dmlq_value_range(const char *data, int type, const ptrdiff_t *offsets, ptrdiff_t rows, ptrdiff_t length,
                      ptrdiff_t stride, float *lo, float *hi, int threads) {
    if (threads > MAX_RANGE_THREADS) threads = MAX_RANGE_THREADS;
    if (rows * length < 4 * PIECE) threads = 1;
    range_job job = {data, type, offsets, rows, length, stride, (length + PIECE - 1) / PIECE, 0};
    for (int t = 0; t < threads; t++) job.lo[t] = INFINITY, job.hi[t] = -INFINITY, job.nan[t] = 0;
    if (length > 0) dmlq_parallel(range_task, &job, threads);
    *lo = INFINITY, *hi = -INFINITY;
    int nan = 0;
    for (int t = 0; t < threads; t++) {
        *lo = job.lo[t] < *lo ? job.lo[t] : *lo;
        *hi = job.hi[t] > *hi ? job.hi[t] : *hi;
        nan |= job.nan[t];
    }
    if (nan) *lo = *hi = NAN;
}
