/* Quantized average pooling (family.h): exact integer window sums, then one float64 requantization per
 * output element. Threads claim output rows (one image, channel and row of the two outer spatial
 * dimensions) one at a time. */
#include <math.h>

#include "family.h"

enum { ROW_PIECE = 1 << 23 }; /* bytes summed in int32: 2**23 * 255 < 2**31 */

typedef struct {
    const dmlq_pool_problem *p;
    ptrdiff_t next;
} pool_job;

/* The window offsets [*lo, *hi) along dimension d whose input is inside for output coordinate o. */
static void window_inside(const dmlq_pool_problem *p, int d, ptrdiff_t o, ptrdiff_t *lo, ptrdiff_t *hi) {
    const ptrdiff_t origin = o * p->stride[d] - p->start[d], step = p->dilation[d];
    const ptrdiff_t first = origin >= 0 ? 0 : (-origin + step - 1) / step;  /* origin + k * step >= 0 */
    const ptrdiff_t beyond = p->in[d] - origin;                              /* origin + k * step < in */
    const ptrdiff_t last = beyond <= 0 ? 0 : (beyond + step - 1) / step;
    *lo = first;
    *hi = last < p->window[d] ? last : p->window[d];
    if (*lo > *hi) *lo = *hi;
}

/* The sum of x over the inside taps of the window of output (o0, o1, o2) of one plane, and their count. */
static int64_t window_sum(const dmlq_pool_problem *p, const char *plane, const ptrdiff_t *o, int64_t *count) {
    ptrdiff_t lo[DMLQ_CONV_DIMS], hi[DMLQ_CONV_DIMS], origin[DMLQ_CONV_DIMS];
    for (int d = 0; d < DMLQ_CONV_DIMS; d++) {
        window_inside(p, d, o[d], &lo[d], &hi[d]);
        origin[d] = o[d] * p->stride[d] - p->start[d];
    }
    *count = (int64_t)(hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
    int64_t sum = 0;
    const ptrdiff_t step = p->dilation[2] * p->x_strides[4];
    for (ptrdiff_t k0 = lo[0]; k0 < hi[0]; k0++)
        for (ptrdiff_t k1 = lo[1]; k1 < hi[1]; k1++) {
            const char *row = plane + (origin[0] + k0 * p->dilation[0]) * p->x_strides[2] +
                              (origin[1] + k1 * p->dilation[1]) * p->x_strides[3] +
                              (origin[2] + lo[2] * p->dilation[2]) * p->x_strides[4];
            for (ptrdiff_t first = 0; first < hi[2] - lo[2]; first += ROW_PIECE) {
                const ptrdiff_t end = first + ROW_PIECE < hi[2] - lo[2] ? first + ROW_PIECE : hi[2] - lo[2];
                int32_t piece = 0; /* in int32, which the compiler vectorises */
                if (p->x_signed)
                    for (ptrdiff_t k = first; k < end; k++) piece += *(const int8_t *)(row + k * step);
                else
                    for (ptrdiff_t k = first; k < end; k++) piece += *(const uint8_t *)(row + k * step);
                sum += piece;
            }
        }
    return sum;
}

static uint8_t pooled(const dmlq_pool_problem *p, ptrdiff_t c, int64_t sum, int64_t count, double divisor) {
    const double lo = p->y_signed ? -128.0 : 0.0, hi = p->y_signed ? 127.0 : 255.0;
    double value = count ? (double)sum * (double)p->x_scale[c] / (double)count : 0.0; /* no tap: an average of 0 */
    value = p->reciprocal ? value * divisor : value / divisor;
    value = nearbyint(value) + (double)p->y_zero_point[c];
    value = value < lo ? lo : value;
    value = value > hi ? hi : value;
    return (uint8_t)(int32_t)(value == value ? value : 0.0);
}

static void pool_task(void *context, int thread, int threads) {
    (void)thread, (void)threads;
    pool_job *job = context;
    const dmlq_pool_problem *p = job->p;
    const ptrdiff_t rows = p->out[0] * p->out[1], units = p->batches * p->channels * rows;
    const int64_t window = (int64_t)p->window[0] * p->window[1] * p->window[2];
    for (ptrdiff_t unit = dmlq_claim(&job->next); unit < units; unit = dmlq_claim(&job->next)) {
        const ptrdiff_t n = unit / (p->channels * rows), c = unit / rows % p->channels, row = unit % rows;
        const char *plane = p->x + n * p->x_strides[0] + c * p->x_strides[1];
        const double divisor = p->reciprocal ? (double)(1.0f / p->y_scale[c]) : (double)p->y_scale[c];
        ptrdiff_t o[DMLQ_CONV_DIMS] = {row / p->out[1], row % p->out[1], 0};
        char *out = p->y + n * p->y_strides[0] + c * p->y_strides[1] + o[0] * p->y_strides[2] + o[1] * p->y_strides[3];
        for (; o[2] < p->out[2]; o[2]++) {
            int64_t count;
            const int64_t sum = window_sum(p, plane, o, &count) - count * p->x_zero_point[c];
            *(uint8_t *)(out + o[2] * p->y_strides[4]) =
                pooled(p, c, sum, p->include_padding ? window : count, divisor);
        }
    }
}

void dmlq_average_pool(const dmlq_pool_problem *p, int threads) {
    pool_job job = {p, 0};
    dmlq_parallel(pool_task, &job, threads);
}
