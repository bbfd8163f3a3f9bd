/* Depthwise convolutions (one input channel per group, any multiplier) at the VNNI level (family.h):
 * vpdpbusd over 4 taps of a kernel row at a time, the windows built from the input's bytes in
 * registers, the output requantized (or stored as int32) as it is computed.
 *
 * For 16 consecutive outputs of a row and a group of 4 taps of a kernel row (k2 = 4 g .. 4 g + 3), the
 * unsigned operand is 16 dwords whose bytes are the taps' x' (conv_output.h): output o reads input
 * column s o - start + d k2. One 64-byte load from the first output's column (masked at the row's
 * edges, where padding reads x_zp') holds every byte they need when 3 s + 3 d <= 15 (s, d: the
 * horizontal stride and dilation): vpermd gives 128-bit lane L the 16 bytes from 4 s L on, and vpshufb
 * picks dword j's bytes s j + d t in that lane (0 for taps beyond the kernel). The signed operand is the
 * 4 taps' w' broadcast. A kernel row outside the input reads a row of x_zp'.
 * Units of work: a block of output rows of one output channel of one image; per output row, up to 64
 * outputs at a time in 4 accumulators.
 */
#include "conv_output.h"

#if DMLQ_X86

enum { LANES = 16, VECTORS = 4, PAIR = 2, BLOCK_ROWS = 8, MAX_ROWS = 64 /* of the kernel */ };

typedef struct {
    const dmlq_conv_problem *p;
    conv_output out;
    ptrdiff_t groups;                /* of 4 taps, per kernel row */
    ptrdiff_t vectors;               /* of 16 outputs, per output row */
    int32_t *weights;                /* [M][kh][groups]: 4 taps' w' */
    int32_t *ones;                   /* [groups]: a 1 byte per tap */
    ptrdiff_t *offsets;              /* [vectors][groups]: the load's first input column */
    uint64_t *masks;                 /* [vectors][groups]: its bytes inside the row */
    uint8_t *controls;               /* [groups][64]: vpshufb's */
    uint8_t *pad_row;                /* x_zp bytes (x', once flipped) for rows outside the input */
    ptrdiff_t pad_offset;            /* the pad row's column 0: room for the loads before it */
    ptrdiff_t blocks, next;
} depthwise_job;

static ptrdiff_t smaller(ptrdiff_t a, ptrdiff_t b) { return a < b ? a : b; }

int dmlq_conv_depthwise_fits(const dmlq_conv_problem *p) {
    const int two_d = p->in[0] == 1 && p->kernel[0] == 1 && p->out[0] == 1;
    const ptrdiff_t s = p->stride[2], d = p->dilation[2], size = p->y_type == DMLQ_I32 ? 4 : 1;
    ptrdiff_t y_col;
    dmlq_one_run(p->out, p->y_strides + 2, DMLQ_CONV_DIMS, &y_col);
    int64_t largest = 0;
    for (ptrdiff_t m = 0; p->y_type != DMLQ_I32 && p->bias && m < p->out_channels; m++)
        largest = llabs((int64_t)p->bias[m]) > largest ? llabs((int64_t)p->bias[m]) : largest;
    const int exact = p->y_type == DMLQ_I32 ||
                      (double)(p->kernel[1] * p->kernel[2]) * 65025.0 + (double)largest <= INT32_MAX;
    return dmlq_level() == DMLQ_LEVEL_VNNI && p->channels == p->groups && two_d && 3 * s + 3 * d <= 15 &&
           p->kernel[1] <= MAX_ROWS &&
           p->x_strides[4] == 1 && (y_col == size || p->out[1] * p->out[2] == 1) && exact;
}

/* The job's per-call vectors: the filter's dwords and sums, the loads' columns, masks and shuffles. */
static int prepare(depthwise_job *job) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t kh = p->kernel[1], kw = p->kernel[2], s = p->stride[2], d = p->dilation[2], m_count = p->out_channels;
    job->groups = (kw + 3) / 4;
    job->vectors = (p->out[2] + LANES - 1) / LANES;
    job->blocks = (p->out[1] + BLOCK_ROWS - 1) / BLOCK_ROWS;
    const ptrdiff_t loads = job->vectors * job->groups;
    job->pad_offset = 64 + p->start[2];
    const ptrdiff_t pad_bytes = job->pad_offset + s * LANES * job->vectors + 4 * d * job->groups + 128;
    job->weights = malloc(sizeof(int32_t) * (size_t)(m_count * kh * job->groups + job->groups));
    job->offsets = malloc(sizeof(ptrdiff_t) * (size_t)loads);
    job->masks = malloc(sizeof(uint64_t) * (size_t)loads);
    job->controls = malloc((size_t)(64 * job->groups));
    job->pad_row = malloc((size_t)pad_bytes);
    int32_t *sums = malloc(sizeof(int32_t) * (size_t)(m_count ? m_count : 1));
    int status = job->weights && job->offsets && job->masks && job->controls && job->pad_row && sums ? 0 : -1;
    if (!status) {
        job->ones = job->weights + m_count * kh * job->groups;
        memset(job->pad_row, (uint8_t)p->x_zero_point, (size_t)pad_bytes);
        for (ptrdiff_t m = 0; m < m_count; m++) {
            const uint8_t *filter = (const uint8_t *)p->w + m * p->w_strides[0];
            sums[m] = 0;
            for (ptrdiff_t k1 = 0; k1 < kh; k1++)
                for (ptrdiff_t g = 0; g < job->groups; g++) {
                    uint32_t dword = 0;
                    for (ptrdiff_t t = 0; t < 4 && 4 * g + t < kw; t++) {
                        const int8_t w = conv_w_prime(p, filter[(k1 * kw + 4 * g + t) * p->w_strides[4]]);
                        dword |= (uint32_t)(uint8_t)w << (8 * t);
                        sums[m] += w;
                    }
                    job->weights[(m * kh + k1) * job->groups + g] = (int32_t)dword;
                }
        }
        for (ptrdiff_t g = 0; g < job->groups; g++) {
            uint32_t ones = 0;
            for (ptrdiff_t t = 0; t < 4 && 4 * g + t < kw; t++) ones |= 1u << (8 * t);
            job->ones[g] = (int32_t)ones;
            for (int lane = 0; lane < 4; lane++)
                for (int j = 0; j < 4; j++)
                    for (int t = 0; t < 4; t++)
                        job->controls[64 * g + 16 * lane + 4 * j + t] =
                            4 * g + t < kw ? (uint8_t)(s * j + d * t) : 0x80;
            for (ptrdiff_t v = 0; v < job->vectors; v++) { /* bytes i with 0 <= first + i < in */
                const ptrdiff_t first = s * LANES * v - p->start[2] + 4 * d * g, at = v * job->groups + g;
                const ptrdiff_t lo = first < 0 ? smaller(-first, 64) : 0;
                const ptrdiff_t hi = p->in[2] - first >= 64 ? 64 : p->in[2] - first > lo ? p->in[2] - first : lo;
                job->offsets[at] = first;
                job->masks[at] = hi == lo ? 0 : (hi - lo == 64 ? ~0ull : ((1ull << (hi - lo)) - 1)) << lo;
            }
        }
        status = conv_output_init(&job->out, p, sums, kh * kw);
    }
    free(sums);
    return status;
}

static void release(depthwise_job *job) {
    conv_output_free(&job->out);
    free(job->weights);
    free(job->offsets);
    free(job->masks);
    free(job->controls);
    free(job->pad_row);
}

DMLQ_BEGIN_TARGET(DMLQ_VNNI_FEATURES)

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* An input row a pair of output rows reads, and at which kernel row each of them (-1: not). */
typedef struct {
    const uint8_t *row;
    int kernel_row[PAIR];
} input_row;

/* `count` vectors of sums from vector v0 on (the constant included, w_zp' sum x' subtracted) of
 * `rows` (1 or 2) output rows reading `inputs`, with channel m's weights w ([kh][groups]): each input
 * row's quads built once for both output rows. Everything in locals: the accumulators stay in
 * registers. */
static ALWAYS_INLINE void rows_sums(const depthwise_job *job, const input_row *inputs, ptrdiff_t input_count,
                                    const int32_t *w, const conv_channel *c, ptrdiff_t v0, const int rows,
                                    const int count, __m512i (*sums)[VECTORS]) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t groups = job->groups;
    const int x_signed = p->x_signed, w_zero = c->w_zero;
    const ptrdiff_t *offsets = job->offsets + v0 * groups;
    const uint64_t *masks = job->masks + v0 * groups;
    const __m512i index = _mm512_setr_epi32(0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6);
    const __m512i lane_step = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i gather = _mm512_add_epi32(index, _mm512_mullo_epi32(lane_step, _mm512_set1_epi32((int)(p->stride[2] - 1))));
    const __m512i zero_point = _mm512_set1_epi8((char)p->x_zero_point), flip = _mm512_set1_epi8((char)0x80);
    __m512i acc[PAIR][VECTORS], window[PAIR][VECTORS];
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < count; j++) acc[r][j] = _mm512_set1_epi32(c->constant), window[r][j] = _mm512_setzero_si512();
    for (ptrdiff_t e = 0; e < input_count; e++) {
        const uint8_t *row = inputs[e].row;
        for (ptrdiff_t g = 0; g < groups; g++) {
            const __m512i control = _mm512_loadu_si512((const void *)(job->controls + 64 * g));
            for (int j = 0; j < count; j++) {
                __m512i bytes = _mm512_mask_loadu_epi8(zero_point, masks[j * groups + g], row + offsets[j * groups + g]);
                if (x_signed) bytes = _mm512_xor_si512(bytes, flip);
                const __m512i quads = _mm512_shuffle_epi8(_mm512_permutexvar_epi32(gather, bytes), control);
                for (int r = 0; r < rows; r++) {
                    const int k1 = inputs[e].kernel_row[r];
                    if (k1 < 0) continue;
                    acc[r][j] = conv_dpbusd(acc[r][j], quads, w + k1 * groups + g);
                    if (w_zero) window[r][j] = conv_dpbusd(window[r][j], quads, &job->ones[g]);
                }
            }
        }
    }
    const __m512i w_zeros = _mm512_set1_epi32(w_zero);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < count; j++)
            sums[r][j] = w_zero ? _mm512_sub_epi32(acc[r][j], _mm512_mullo_epi32(w_zeros, window[r][j])) : acc[r][j];
}

/* The input rows output rows o1 .. o1 + rows - 1 (rows: 1 or 2) of a channel (its plane `channel`)
 * read, each once, in order: `inputs`, their count returned. */
static ptrdiff_t input_rows(const depthwise_job *job, const char *channel, ptrdiff_t o1, int rows, input_row *inputs) {
    const dmlq_conv_problem *p = job->p;
    ptrdiff_t count = 0, last = PTRDIFF_MIN;
    /* input row o s - start + k1 d of output row o: rows of both merged in increasing order */
    ptrdiff_t next[PAIR] = {0, 0};
    for (;;) {
        ptrdiff_t smallest = PTRDIFF_MAX;
        for (int r = 0; r < rows; r++)
            if (next[r] < p->kernel[1])
                smallest = smaller(smallest, (o1 + r) * p->stride[1] - p->start[1] + next[r] * p->dilation[1]);
        if (smallest == PTRDIFF_MAX) return count;
        if (smallest != last) {
            inputs[count].row = smallest >= 0 && smallest < p->in[1] ? (const uint8_t *)channel + smallest * p->x_strides[3]
                                                                     : job->pad_row + job->pad_offset;
            inputs[count].kernel_row[0] = inputs[count].kernel_row[1] = -1;
            count++, last = smallest;
        }
        for (int r = 0; r < rows; r++)
            if (next[r] < p->kernel[1] && (o1 + r) * p->stride[1] - p->start[1] + next[r] * p->dilation[1] == smallest)
                inputs[count - 1].kernel_row[r] = (int)next[r]++;
    }
}

/* The sums of `rows` output rows for `count` vectors from v0 on, the accumulators' counts compiled. */
static ALWAYS_INLINE void sums_of(const depthwise_job *job, const input_row *inputs, ptrdiff_t input_count,
                                  const int32_t *w, const conv_channel *c, ptrdiff_t v0, int rows, int count,
                                  __m512i (*sums)[VECTORS]) {
    switch (rows * 8 + count) {
    case 20: rows_sums(job, inputs, input_count, w, c, v0, 2, 4, sums); break;
    case 19: rows_sums(job, inputs, input_count, w, c, v0, 2, 3, sums); break;
    case 18: rows_sums(job, inputs, input_count, w, c, v0, 2, 2, sums); break;
    case 17: rows_sums(job, inputs, input_count, w, c, v0, 2, 1, sums); break;
    case 12: rows_sums(job, inputs, input_count, w, c, v0, 1, 4, sums); break;
    case 11: rows_sums(job, inputs, input_count, w, c, v0, 1, 3, sums); break;
    case 10: rows_sums(job, inputs, input_count, w, c, v0, 1, 2, sums); break;
    default: rows_sums(job, inputs, input_count, w, c, v0, 1, 1, sums); break;
    }
}

/* Output rows o1 .. o1 + rows - 1 (rows: 1 or 2) of channel m (row o1 at out), VECTORS vectors at a
 * time; `channel` the input channel's plane. */
static void output_rows(const depthwise_job *job, const char *channel, ptrdiff_t m, ptrdiff_t o1, int rows, char *out) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t width = p->out[2];
    const conv_channel *c = &job->out.channels[m];
    const int32_t *w = job->weights + m * p->kernel[1] * job->groups;
    input_row inputs[PAIR * MAX_ROWS];
    const ptrdiff_t input_count = input_rows(job, channel, o1, rows, inputs);
    for (ptrdiff_t v0 = 0; v0 < job->vectors; v0 += VECTORS) {
        const int count = (int)smaller(job->vectors - v0, VECTORS);
        const ptrdiff_t left = width - LANES * v0; /* outputs of these vectors: up to 64 */
        const uint64_t valid = left >= 64 ? ~0ull : (1ull << left) - 1;
        __m512i sums[PAIR][VECTORS];
        sums_of(job, inputs, input_count, w, c, v0, rows, count, sums);
        for (int r = 0; r < rows; r++) {
            char *row_out = out + r * p->y_strides[3];
            if (job->out.requantized) {
                _mm512_mask_storeu_epi8(row_out + LANES * v0, valid, conv_requantize(&job->out, m, sums[r], count, valid));
                continue;
            }
            for (int j = 0; j < count; j++)
                _mm512_mask_storeu_epi32(row_out + 4 * LANES * (v0 + j), (__mmask16)(valid >> (LANES * j)), sums[r][j]);
        }
    }
}

DMLQ_END_TARGET

static void depthwise_task(void *context, int thread, int threads) {
    (void)thread, (void)threads;
    depthwise_job *job = context;
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t multiplier = p->out_channels / p->channels, units = p->batches * p->out_channels * job->blocks;
    for (ptrdiff_t unit = dmlq_claim(&job->next); unit < units; unit = dmlq_claim(&job->next)) {
        const ptrdiff_t n = unit / (p->out_channels * job->blocks), m = unit / job->blocks % p->out_channels;
        const ptrdiff_t first = unit % job->blocks * BLOCK_ROWS, last = smaller(first + BLOCK_ROWS, p->out[1]);
        const char *channel = p->x + n * p->x_strides[0] + m / multiplier * p->x_strides[1];
        char *out = p->y + n * p->y_strides[0] + m * p->y_strides[1];
        for (ptrdiff_t o1 = first; o1 < last; o1 += PAIR)
            output_rows(job, channel, m, o1, (int)smaller(last - o1, PAIR), out + o1 * p->y_strides[3]);
    }
}

int dmlq_conv_depthwise(const dmlq_conv_problem *p, int threads) {
    depthwise_job job = {.p = p};
    int status = prepare(&job);
    if (!status) dmlq_parallel(depthwise_task, &job, threads);
    release(&job);
    return status;
}

#else

int dmlq_conv_depthwise_fits(const dmlq_conv_problem *p) {
    (void)p;
    return 0;
}

int dmlq_conv_depthwise(const dmlq_conv_problem *p, int threads) {
    (void)p, (void)threads;
    return -1;
}

#endif
