/* The 2-D integer convolutions as an implicit matrix multiply at the VNNI level (family.h), the dot
 * products and the output in one kernel, without an im2col matrix or B panels.
 *
 * The multiply is conv.c's: a row per output channel (the filter), a column per output position (the
 * input's windows), K ordered tap by tap, four input channels at a time: k = (tap, c). The input is
 * first rewritten once per image as planes of dwords, one per group of 4 channels: the x' bytes
 * (conv_output.h) of those channels at one input position, x_zp' where the position is padding, 0 for
 * channels beyond C. The planes cover the padded input and are split by phase modulo the strides
 * (plane (fh, fw) holds padded rows fh, fh + sh, ... and columns fw, fw + sw, ...), and every plane
 * row is wq dwords, the output's width plus the kernel's extent. Output positions are then counted
 * over rows of wq ("virtual" positions v = o1 * wq + o2, whose o2 >= the output's width are computed
 * and dropped, about (wq - width) / wq of the work): for every tap and group of 4 channels, 16
 * consecutive virtual positions read 16 consecutive dwords of one plane, at the tap's own offset, so
 * the kernel loads its unsigned operand straight from the planes.
 * A tile is 8 output channels by 48 virtual positions: 24 accumulators, per group of 4 k three loads of
 * the planes and 24 vpdpbusd whose signed operand is the filter's dword broadcast from memory; the
 * filter is packed once (dmlq_conv_pack_filter, or pack_convolution_filter from Python) as the kernel
 * reads it, 8 channels' dwords per group of 4 k. The sums, exact in int32 (conv_output.h), go straight
 * to the output's rows: int32, or requantized 48 at a time, stored by masked stores per output row.
 * The work: units of a band of output rows of an image, each a band's planes in its thread's own
 * buffer, then the band's tiles (bands_task); the bands as large as BAND_BYTES and the threads allow
 * (plan_bands: at least 2 units per thread).
 */
#include "conv_output.h"

#if DMLQ_X86

enum { LANES = 16, MR = 8, VECTORS = 3, NR = VECTORS * LANES, BAND_BYTES = 1 << 20, MAX_STRIDE = 64 };

typedef struct {
    uint64_t mask;  /* lanes of a tile */
    ptrdiff_t first; /* the output position (o1 * width + o2) of the tile's lane 0 along these lanes */
} segment;

typedef struct {
    const dmlq_conv_problem *p;
    const dmlq_conv_filter *filter;
    conv_output out;
    ptrdiff_t cg, mg, cq, taps, k_groups, m_panels;
    ptrdiff_t band_rows, bands; /* output rows per band (the last may have fewer), bands per image */
    ptrdiff_t sh, sw, hq, wq, plane, phases, q_stride, group_dwords, band_dwords; /* a band's planes, in dwords */
    ptrdiff_t *tap_offsets;    /* [taps]: each tap's dword from the virtual position, in a group's planes */
    uint8_t *phase_used;       /* [phases]: planes that some tap reads */
    int rows_run;              /* one phase, whose inside rows are one run of x's bytes and of a plane's */
    uint32_t x_flip;
    ptrdiff_t y_col, y_size;   /* the output positions' step and the element's size */
    uint32_t *planes;          /* a band's for each thread */
    ptrdiff_t next;
} implicit_job;

static ptrdiff_t round_up(ptrdiff_t value, ptrdiff_t step) { return (value + step - 1) / step * step; }

static ptrdiff_t smaller(ptrdiff_t a, ptrdiff_t b) { return a < b ? a : b; }

/* ---- the input as phase planes of dwords ------------------------------------------------------- */

/* The dword of padding for group of channels q: x_zp' for real channels. */
static uint32_t pad_dword(const implicit_job *job, ptrdiff_t q) {
    uint32_t dword = 0;
    for (int j = 0; j < 4; j++)
        if (4 * q + j < job->cg) dword |= (uint32_t)job->out.x_zero << (8 * j);
    return dword;
}

/* One padded row of a group of 4 channels: `rows[j]` channel j's input row (channels beyond `channels`
 * bytes of 0), padded column u in [0, sw * length) reading input column u - start, inside [0, in); the
 * x_zp bytes outside, and everywhere for a row outside the input (`inside` 0). Its dwords (x' bytes:
 * xor `flip`) go to out[u % sw][u / sw] (a NULL out: a phase no tap reads). */
typedef struct {
    const uint8_t *rows[4];
    int channels, inside, sw;
    ptrdiff_t in, start, length;
    uint8_t zero;
    uint32_t flip, pad;
} padded_row;

DMLQ_BEGIN_TARGET(DMLQ_VNNI_FEATURES)

/* 64 bytes of each channel row from input column `column` on, those inside the row loaded (masked
 * loads touch no other byte), x_zp elsewhere (0 for channels beyond the group's). */
static inline __attribute__((always_inline)) void load_columns(const padded_row *row, ptrdiff_t column, __m512i *r) {
    const ptrdiff_t lo = column < 0 ? smaller(-column, 64) : 0;
    const ptrdiff_t hi = row->in - column >= 64 ? 64 : row->in - column > lo ? row->in - column : lo;
    const __mmask64 inside = !row->inside || hi == lo ? 0 : (hi - lo == 64 ? ~(__mmask64)0 : ((__mmask64)1 << (hi - lo)) - 1) << lo;
    const __m512i zero = _mm512_set1_epi8((char)row->zero);
    for (int j = 0; j < 4; j++)
        r[j] = j >= row->channels ? _mm512_setzero_si512()
                                  : _mm512_mask_loadu_epi8(zero, inside, (const void *)((uintptr_t)row->rows[j] + (uintptr_t)column));
}

static __mmask16 first_lanes(ptrdiff_t count) {
    return count >= LANES ? (__mmask16)0xffff : count > 0 ? (__mmask16)((1u << count) - 1) : 0;
}

/* A padded row with a stride of 1: 64 columns at a time, as dwords of its 4 channels' bytes. */
static inline __attribute__((always_inline)) void fill_row_stride1(const padded_row *row, uint32_t *out) {
    const __m512i flips = _mm512_set1_epi32((int)row->flip);
    for (ptrdiff_t u = 0; u < row->length; u += 4 * LANES) {
        __m512i r[4];
        load_columns(row, u - row->start, r);
        __m512i dwords[4];
        dmlq_dwords_of_rows(r, dwords);
        for (int j = 0; j < 4; j++)
            _mm512_mask_storeu_epi32(out + u + LANES * j, first_lanes(row->length - u - LANES * j),
                                     _mm512_xor_si512(dwords[j], flips));
    }
}

/* A padded row with a stride of 2: 32 pairs of columns at a time, per 128-bit lane of 16 columns the
 * even bytes then the odd ones (vpshufb), interleaved as above: lane L of a part's low and high dwords
 * holds its pairs 8 L .. 8 L + 3 and 8 L + 4 .. 8 L + 7, put in order by permuting quadwords. Whole
 * vectors are stored, up to 31 dwords past the row: into the next row of the plane, filled after this
 * one, or into the NR dwords past the plane's rows, zeroed after them (fill_planes). Masked stores made
 * the planes of 3 x 3 / 2 128 -> 128 from 56² 8 % slower (Zen 5). */
static inline __attribute__((always_inline)) void fill_row_stride2(const padded_row *row, uint32_t *even, uint32_t *odd) {
    const __m512i flips = _mm512_set1_epi32((int)row->flip);
    const __m512i split = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    const __m512i low_order = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    const __m512i high_order = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    uint32_t *outs[2] = {even, odd};
    for (ptrdiff_t v = 0; v < row->length; v += 2 * LANES) {
        __m512i r[4];
        load_columns(row, 2 * v - row->start, r);
        for (int j = 0; j < 4; j++) r[j] = _mm512_shuffle_epi8(r[j], split);
        const __m512i parts[2][2] = {{_mm512_unpacklo_epi8(r[0], r[1]), _mm512_unpacklo_epi8(r[2], r[3])},
                                     {_mm512_unpackhi_epi8(r[0], r[1]), _mm512_unpackhi_epi8(r[2], r[3])}};
        for (int part = 0; part < 2; part++) {
            if (!outs[part]) continue;
            const __m512i low = _mm512_unpacklo_epi16(parts[part][0], parts[part][1]);
            const __m512i high = _mm512_unpackhi_epi16(parts[part][0], parts[part][1]);
            const __m512i dwords[2] = {_mm512_permutex2var_epi64(low, low_order, high),
                                       _mm512_permutex2var_epi64(low, high_order, high)};
            for (int j = 0; j < 2; j++)
                _mm512_storeu_si512(outs[part] + v + LANES * j, _mm512_xor_si512(dwords[j], flips));
        }
    }
}

/* A padded row of a stride of 1, not inlined (rows_run's one call). */
static void fill_run(const padded_row *line, uint32_t *out) { fill_row_stride1(line, out); }

/* The input rows PREFETCH_ROWS plane rows on are asked for while this one is filled: the planes of a
 * stride of 2 read each input row in two passes of every other row, which the hardware prefetchers
 * left waiting on L3 (3 x 3 / 2 128 -> 128 from 56², batch 8, Zen 5, 1 thread: fill_rows_vector 9.3
 * -> 7.3 % of the call, the call 2.32 -> 2.24 ms; 8 rows ahead gained nothing more). */
enum { PREFETCH_ROWS = 4 };

static inline __attribute__((always_inline)) void prefetch_rows(const padded_row *line, ptrdiff_t ahead, ptrdiff_t width) {
    for (int j = 0; j < line->channels; j++) {
        const char *row = (const char *)line->rows[j] + ahead;
        _mm_prefetch(row, _MM_HINT_T0);
        _mm_prefetch(row + width - 1, _MM_HINT_T0);
    }
}

/* fill_rows_vector's loop, for groups of `channels` channels. */
static inline __attribute__((always_inline)) void fill_rows_of(const implicit_job *job, padded_row row, ptrdiff_t i1,
                                                                ptrdiff_t rows, uint32_t *const *first, int channels,
                                                                ptrdiff_t sw) {
    /* copies of everything the loop reads: its stores could alias the job's and the line's fields */
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t sh = job->sh, row_step = sh * p->x_strides[3], wq = job->wq;
    const ptrdiff_t height = p->in[1], width = p->in[2];
    uint32_t *even = first[0], *odd = sw == 2 ? first[1] : NULL;
    row.channels = channels;
    for (ptrdiff_t r = 0; r < rows; r++, i1 += sh) {
        row.inside = i1 >= 0 && i1 < height;
        if (r + PREFETCH_ROWS < rows && i1 + PREFETCH_ROWS * sh < height) prefetch_rows(&row, PREFETCH_ROWS * row_step, width);
        if (sw == 1)
            fill_row_stride1(&row, even + r * wq);
        else
            fill_row_stride2(&row, even ? even + r * wq : NULL, odd ? odd + r * wq : NULL);
        for (int j = 0; j < channels; j++) row.rows[j] += row_step;
    }
}

/* Plane rows [0, rows) of a group of channels (channel 0's plane at `channel`) whose first reads input
 * row `i1` (then i1 + sh, ...), strides 1 and 2 of adjacent columns, into the phases' rows at
 * first[fw] (wq dwords apart; NULL: unread). A whole group of 4 channels (the usual) gets its own copies
 * of the loop, for each stride, without the tests of channels beyond the group: the planes took 9.5 %
 * less time for 3 x 3 / 2 128 -> 128 from 56², 12 % for 3 x 3 64 -> 64 at 56² (Zen 5). */
static void fill_rows_vector(const implicit_job *job, const padded_row *line, const char *channel, ptrdiff_t i1,
                             ptrdiff_t rows, uint32_t *const *first) {
    const dmlq_conv_problem *p = job->p;
    padded_row row = *line;
    for (int j = 0; j < row.channels; j++) row.rows[j] = (const uint8_t *)channel + j * p->x_strides[1] + i1 * p->x_strides[3];
    if (row.channels == 4 && job->sw == 2)
        fill_rows_of(job, row, i1, rows, first, 4, 2);
    else if (row.channels == 4)
        fill_rows_of(job, row, i1, rows, first, 4, 1);
    else
        fill_rows_of(job, row, i1, rows, first, row.channels, job->sw);
}

DMLQ_END_TARGET

/* Any stride, or x's columns apart (x_col bytes): one dword at a time. */
static void fill_row_scalar(const padded_row *row, ptrdiff_t x_col, uint32_t *const *out) {
    for (ptrdiff_t fw = 0; fw < row->sw; fw++)
        for (ptrdiff_t v = 0; out[fw] && v < row->length; v++) {
            const ptrdiff_t column = v * row->sw + fw - row->start;
            uint32_t dword = row->pad;
            if (row->inside && column >= 0 && column < row->in) {
                dword = 0;
                for (int j = 0; j < row->channels; j++) dword |= (uint32_t)row->rows[j][column * x_col] << (8 * j);
                dword ^= row->flip;
            }
            out[fw][v] = dword;
        }
}

/* The plane rows of output rows [0, rows) (rows of a phase plane from the output row's own on). */
static ptrdiff_t plane_rows(const implicit_job *job, ptrdiff_t rows) {
    const dmlq_conv_problem *p = job->p;
    return round_up((rows - 1) * job->sh + (p->kernel[1] - 1) * p->dilation[1] + 1, job->sh) / job->sh;
}

/* Whether some tap reads a phase plane of rows fh, fh + sh, ... */
static int row_phases_used(const implicit_job *job, ptrdiff_t fh) {
    for (ptrdiff_t fw = 0; fw < job->sw; fw++)
        if (job->phase_used[fh * job->sw + fw]) return 1;
    return 0;
}

/* One group of 4 channels (q, of group g) of one image, for output rows from `row` on: its phase
 * planes that some tap reads, at `planes` (the group of channels' own), `rows` plane rows each. */
static void fill_planes(const implicit_job *job, ptrdiff_t image, ptrdiff_t row, ptrdiff_t rows, ptrdiff_t g,
                        ptrdiff_t q, uint32_t *planes) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t c0 = g * job->cg + 4 * q, x_col = p->x_strides[4], sw = job->sw, wq = job->wq;
    const char *x = p->x + image * p->x_strides[0];
    padded_row line = {.channels = (int)smaller(job->cg - 4 * q, 4), .sw = (int)sw, .in = p->in[2],
                       .start = p->start[2], .length = wq, .zero = (uint8_t)p->x_zero_point, .pad = pad_dword(job, q)};
    line.flip = job->x_flip & (0xffffffffu >> (32 - 8 * line.channels));
    for (ptrdiff_t fh = 0; fh < job->sh; fh++) {
        if (!row_phases_used(job, fh)) continue; /* e.g. a 1 x k kernel's odd rows of a stride of 2 */
        ptrdiff_t r = 0;
        if (job->rows_run) { /* the rows as one run of x's bytes and of the plane's dwords */
            line.inside = 1, line.in = p->in[1] * wq, line.start = (p->start[1] - row) * wq, line.length = rows * wq;
            for (int j = 0; j < line.channels; j++) line.rows[j] = (const uint8_t *)x + (c0 + j) * p->x_strides[1];
            fill_run(&line, planes);
            r = rows;
        }
        if (r < rows && x_col == 1 && sw <= 2) {
            uint32_t *first[2] = {NULL, NULL};
            for (ptrdiff_t fw = 0; fw < sw; fw++)
                first[fw] = job->phase_used[fh * sw + fw] ? planes + (fh * sw + fw) * job->plane : NULL;
            fill_rows_vector(job, &line, x + c0 * p->x_strides[1], row * job->sh + fh - p->start[1], rows, first);
            r = rows;
        }
        for (; r < rows; r++) {
            const ptrdiff_t i1 = (row + r) * job->sh + fh - p->start[1];
            line.inside = i1 >= 0 && i1 < p->in[1];
            for (int j = 0; j < line.channels; j++)
                line.rows[j] = (const uint8_t *)x + (c0 + j) * p->x_strides[1] + i1 * p->x_strides[3];
            uint32_t *out[MAX_STRIDE];
            for (ptrdiff_t fw = 0; fw < sw; fw++)
                out[fw] = job->phase_used[fh * sw + fw] ? planes + (fh * sw + fw) * job->plane + r * wq : NULL;
            fill_row_scalar(&line, x_col, out);
        }
        for (ptrdiff_t fw = 0; fw < sw; fw++)
            if (job->phase_used[fh * sw + fw])
                memset(planes + (fh * sw + fw) * job->plane + rows * wq, 0, sizeof(uint32_t) * (size_t)(job->plane - rows * wq));
    }
}

/* ---- tiles ----------------------------------------------------------------------------------- */

/* The output rows that tile lanes [0, NR) from virtual position v0 of a band (output rows [row, row +
 * rows)) fall in: at most NR + 1. */
static int tile_segments(const implicit_job *job, ptrdiff_t row, ptrdiff_t rows, ptrdiff_t v0, segment *segments) {
    const ptrdiff_t wq = job->wq, width = job->p->out[2];
    int count = 0;
    for (ptrdiff_t r = v0 / wq; r < rows && r * wq < v0 + NR; r++) {
        const ptrdiff_t a = r * wq - v0 > 0 ? r * wq - v0 : 0, b = smaller(r * wq + width - v0, NR);
        if (b <= a) continue;
        segments[count].mask = ((1ull << (b - a)) - 1) << a;
        segments[count].first = (row + r) * width + v0 - r * wq;
        count++;
    }
    return count;
}

/* A band's tiles: its virtual positions in tiles of NR. */
static ptrdiff_t tiles_of(const implicit_job *job, ptrdiff_t rows) {
    return ((rows - 1) * job->wq + job->p->out[2] + NR - 1) / NR;
}

/* Output position `position` of a channel's row (its address; no element is accessed through it
 * unless the position is real). */
static char *position_at(const implicit_job *job, char *channel, ptrdiff_t position) {
    return (char *)((uintptr_t)channel + (uintptr_t)(position * job->y_col));
}

DMLQ_BEGIN_TARGET(DMLQ_VNNI_FEATURES)

/* sum x' over the tile's windows (for the filters whose w_zp' is not 0). */
static void window_sums(const implicit_job *job, const uint32_t *planes, __m512i *sums) {
    const __m512i ones = _mm512_set1_epi8(1);
    for (int j = 0; j < VECTORS; j++) sums[j] = _mm512_setzero_si512();
    for (ptrdiff_t t = 0; t < job->taps; t++) {
        const uint32_t *b = planes + job->tap_offsets[t];
        for (ptrdiff_t q = 0; q < job->cq; q++, b += job->q_stride)
            for (int j = 0; j < VECTORS; j++)
                sums[j] = conv_dpbusd_vector(sums[j], _mm512_loadu_si512((const void *)(b + LANES * j)), ones);
    }
}

static void store_bytes(const implicit_job *job, char *channel, __m512i bytes, const segment *segments, int count) {
    for (int s = 0; s < count; s++) {
        char *at = position_at(job, channel, segments[s].first);
        if (job->y_col == 1) {
            _mm512_mask_storeu_epi8(at, segments[s].mask, bytes);
            continue;
        }
        _Alignas(64) uint8_t values[64];
        _mm512_store_si512((void *)values, bytes);
        for (uint64_t lanes = segments[s].mask; lanes; lanes &= lanes - 1) {
            const int lane = __builtin_ctzll(lanes);
            at[lane * job->y_col] = (char)values[lane];
        }
    }
}

static void store_int32(const implicit_job *job, char *channel, const __m512i *sums, const segment *segments,
                        int count) {
    for (int s = 0; s < count; s++)
        for (int j = 0; j < VECTORS; j++) {
            const __mmask16 lanes = (__mmask16)(segments[s].mask >> (LANES * j));
            char *at = position_at(job, channel, segments[s].first + LANES * j);
            if (!lanes) continue;
            if (job->y_col == sizeof(int32_t)) {
                _mm512_mask_storeu_epi32(at, lanes, sums[j]);
                continue;
            }
            _Alignas(64) int32_t values[LANES];
            _mm512_store_si512((void *)values, sums[j]);
            for (unsigned left = lanes; left; left &= left - 1) {
                const int lane = __builtin_ctz(left);
                memcpy(at + lane * job->y_col, &values[lane], sizeof(int32_t));
            }
        }
}

/* The rows [m0, m0 + rows) of a tile's sums (dots: MR rows of NR, constants included) as the output. */
static void store_tile(const implicit_job *job, ptrdiff_t m0, ptrdiff_t rows, const int32_t *dots,
                       const __m512i *window, const segment *segments, int count, uint64_t valid, char *y) {
    for (ptrdiff_t r = 0; r < rows; r++) {
        const ptrdiff_t m = m0 + r;
        const __m512i w_zero = _mm512_set1_epi32(job->out.channels[m].w_zero);
        __m512i sums[VECTORS];
        for (int j = 0; j < VECTORS; j++) {
            sums[j] = _mm512_load_si512((const void *)(dots + r * NR + LANES * j));
            if (job->out.channels[m].w_zero) sums[j] = _mm512_sub_epi32(sums[j], _mm512_mullo_epi32(w_zero, window[j]));
        }
        char *channel = y + m * job->p->y_strides[1];
        if (job->out.requantized)
            store_bytes(job, channel, conv_requantize(&job->out, m, sums, VECTORS, valid), segments, count);
        else
            store_int32(job, channel, sums, segments, count);
    }
}

/* The output lines of a tile's rows [m0, m0 + rows) asked for in exclusive state before its dot loop. */
static void prefetch_outputs(const implicit_job *job, ptrdiff_t m0, ptrdiff_t rows, const segment *segments, int count,
                             char *y) {
    for (ptrdiff_t r = 0; r < rows; r++) {
        char *channel = y + (m0 + r) * job->p->y_strides[1];
        for (int s = 0; s < count; s++) {
            const int first = __builtin_ctzll(segments[s].mask), last = 63 - __builtin_clzll(segments[s].mask);
            __builtin_prefetch(position_at(job, channel, segments[s].first + first), 1, 3);
            __builtin_prefetch(position_at(job, channel, segments[s].first + last), 1, 3);
        }
    }
}

/* Tile `tile` of group g of a band of an image (output rows [row, row + rows), its planes of group g
 * at `planes`, the image's output at y): every panel of MR output channels over all of K. K is not cut
 * into chunks whose planes stay in L1: the planes' 3 lines per 24 vpdpbusd (12 cycles) come from L2
 * fast enough, and the sums' round trips between chunks cost more (Zen 5, 1 thread, avx512_vnni,
 * thread CPU time, K in 1 chunk against the 3 of a 32 KiB L1 budget: 3 x 3 / 2 128 -> 128 from 56²
 * batch 8 2.23 -> 2.17 ms, batch 1 0.280 -> 0.273; against 4 chunks, 3 x 3 256 -> 256 at 28² batch 8
 * 8.69 -> 8.44; 3 x 3 512 -> 512 at 14², 221 KB of planes a tile, 9.23 -> 9.19). The sums reach
 * store_tile through `dots`: handed over as the accumulators' array instead, GCC 12's code took 4-14 %
 * longer on 1 x 1 256 -> 64 and 3 x 3 64 -> 64. */
static void compute_tile(const implicit_job *job, const uint32_t *planes, ptrdiff_t g, ptrdiff_t row, ptrdiff_t rows,
                         ptrdiff_t tile, char *y) {
    const ptrdiff_t v0 = tile * NR;
    segment segments[NR + 1];
    const int count = tile_segments(job, row, rows, v0, segments);
    uint64_t valid = 0;
    for (int s = 0; s < count; s++) valid |= segments[s].mask;
    __m512i window[VECTORS];
    if (job->out.any_w_zero) window_sums(job, planes + v0, window);
    const uint32_t *base = planes + v0;
    const ptrdiff_t cq = job->cq, q_stride = job->q_stride;
    for (ptrdiff_t mp = 0; mp < job->m_panels; mp++) {
        const ptrdiff_t m0 = g * job->mg + mp * MR, panel_rows = smaller(job->mg - mp * MR, MR);
        __m512i acc[MR][VECTORS];
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < VECTORS; j++)
                acc[r][j] = _mm512_set1_epi32(r < panel_rows ? job->out.channels[m0 + r].constant : 0);
        const int32_t *w = job->filter->a + (g * job->m_panels + mp) * job->k_groups * MR;
        prefetch_outputs(job, m0, panel_rows, segments, count, y);
        for (ptrdiff_t t = 0; t < job->taps; t++) {
            const uint32_t *b = base + job->tap_offsets[t];
            for (ptrdiff_t q = 0; q < cq; q++, b += q_stride, w += MR) {
                const __m512i x0 = _mm512_loadu_si512((const void *)b);
                const __m512i x1 = _mm512_loadu_si512((const void *)(b + LANES));
                const __m512i x2 = _mm512_loadu_si512((const void *)(b + 2 * LANES));
                for (int r = 0; r < MR; r++) {
                    const __m512i wr = _mm512_set1_epi32(w[r]); /* one load for 3 products: loads bind */
                    acc[r][0] = conv_dpbusd_vector(acc[r][0], x0, wr);
                    acc[r][1] = conv_dpbusd_vector(acc[r][1], x1, wr);
                    acc[r][2] = conv_dpbusd_vector(acc[r][2], x2, wr);
                }
            }
        }
        _Alignas(64) int32_t dots[MR * NR];
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < VECTORS; j++) _mm512_store_si512((void *)(dots + r * NR + LANES * j), acc[r][j]);
        store_tile(job, m0, panel_rows, dots, window, segments, count, valid, y);
    }
}

DMLQ_END_TARGET

/* ---- the work on threads ------------------------------------------------------------------------ */

/* Units of work: a band of an image, its planes (in the thread's own memory), then its tiles.
 * Measured slower (3 x 3 / 2 128 -> 128 from 56², Zen 5, 2 threads, avx512_vnni, 2026-11-27): an
 * image's planes shared by the threads, then its tiles claimed one at a time (batch 1 0.143 -> 0.144
 * ms, batch 8 1.056 -> 1.068 ms: the tiles read planes the other core filled); the last images
 * split into one part of their tiles per thread, a part's planes its own, the parts' tiles then
 * taken by any thread (batch 8 2 % slower, batch 1 1-3 %); an image in parts of its tiles instead of
 * bands of rows (batch 1 4-12 % slower; the bands of 5 rows already give its 17 tiles). */
static void bands_task(void *context, int thread, int threads) {
    (void)threads;
    implicit_job *job = context;
    const dmlq_conv_problem *p = job->p;
    uint32_t *planes = job->planes + thread * job->band_dwords;
    for (ptrdiff_t unit = dmlq_claim(&job->next); unit < p->batches * job->bands; unit = dmlq_claim(&job->next)) {
        const ptrdiff_t image = unit / job->bands, row = unit % job->bands * job->band_rows;
        const ptrdiff_t rows = smaller(p->out[1] - row, job->band_rows);
        for (ptrdiff_t g = 0; g < p->groups; g++)
            for (ptrdiff_t q = 0; q < job->cq; q++)
                fill_planes(job, image, row, plane_rows(job, rows), g, q, planes + g * job->group_dwords + q * job->q_stride);
        for (ptrdiff_t g = 0; g < p->groups; g++)
            for (ptrdiff_t tile = 0; tile < tiles_of(job, rows); tile++)
                compute_tile(job, planes + g * job->group_dwords, g, row, rows, tile, p->y + image * p->y_strides[0]);
    }
}

/* ---- the filter -------------------------------------------------------------------------------- */

/* Group g's output channels in panels of MR (zero rows beyond), per group of 4 k (tap-major) the
 * panel's dwords of w' (zero bytes beyond the group's channels); and each channel's sum of w'. */
static void pack_panels(dmlq_conv_filter *f, const dmlq_conv_problem *p) {
    const ptrdiff_t taps = f->kernel[0] * f->kernel[1] * f->kernel[2], mg = f->out_channels / f->groups;
    const ptrdiff_t cq = (f->channels + 3) / 4, step = p->w_strides[4];
    uint8_t *a = (uint8_t *)f->a;
    memset(a, 0, sizeof(int32_t) * (size_t)(f->groups * f->m_panels * f->k_groups * MR));
    for (ptrdiff_t m = 0; m < f->out_channels; m++) {
        const ptrdiff_t g = m / mg, mp = m % mg / MR, r = m % mg % MR;
        const uint8_t *filter = (const uint8_t *)p->w + m * p->w_strides[0];
        int32_t sum = 0;
        for (ptrdiff_t c = 0; c < f->channels; c++)
            for (ptrdiff_t t = 0; t < taps; t++) {
                const int8_t value = conv_w_prime(p, filter[(c * taps + t) * step]);
                a[(((g * f->m_panels + mp) * f->k_groups + t * cq + c / 4) * MR + r) * 4 + c % 4] = (uint8_t)value;
                sum += value;
            }
        f->weight_sums[m] = sum;
    }
}

int dmlq_conv_pack_filter(dmlq_conv_filter *f, const dmlq_conv_problem *p) {
    memset(f, 0, sizeof *f);
    if (dmlq_level() != DMLQ_LEVEL_VNNI || p->channels == p->groups || p->kernel[0] != 1) return 1; /* none */
    f->level = DMLQ_LEVEL_VNNI;
    f->out_channels = p->out_channels, f->channels = p->channels / p->groups, f->groups = p->groups;
    for (int d = 0; d < DMLQ_CONV_DIMS; d++) f->kernel[d] = p->kernel[d];
    f->w_signed = p->w_signed;
    f->m_panels = (p->out_channels / p->groups + MR - 1) / MR;
    f->k_groups = f->kernel[0] * f->kernel[1] * f->kernel[2] * ((f->channels + 3) / 4);
    f->a = malloc(sizeof(int32_t) * (size_t)(f->groups * f->m_panels * f->k_groups * MR) + 1);
    f->weight_sums = malloc(sizeof(int32_t) * (size_t)(f->out_channels ? f->out_channels : 1));
    if (!f->a || !f->weight_sums) {
        dmlq_conv_free_filter(f);
        return -1;
    }
    pack_panels(f, p);
    return 0;
}

void dmlq_conv_free_filter(dmlq_conv_filter *f) {
    free(f->a);
    free(f->weight_sums);
    f->a = NULL;
    f->weight_sums = NULL;
}

/* Whether a filter packed beforehand is the one this problem's kernel and shapes want. */
static int packed_fits(const dmlq_conv_filter *f, const dmlq_conv_problem *p) {
    int fits = f && f->a && f->level == DMLQ_LEVEL_VNNI && f->out_channels == p->out_channels &&
               f->channels * p->groups == p->channels && f->groups == p->groups && f->w_signed == p->w_signed;
    for (int d = 0; d < DMLQ_CONV_DIMS; d++) fits &= f && f->kernel[d] == p->kernel[d];
    return fits;
}

/* ---- the convolution --------------------------------------------------------------------------- */

static int64_t largest_bias(const dmlq_conv_problem *p) {
    int64_t largest = 0;
    for (ptrdiff_t m = 0; p->y_type != DMLQ_I32 && p->bias && m < p->out_channels; m++) {
        const int64_t magnitude = p->bias[m] < 0 ? -(int64_t)p->bias[m] : p->bias[m];
        largest = magnitude > largest ? magnitude : largest;
    }
    return largest;
}

int dmlq_conv_implicit_fits(const dmlq_conv_problem *p) {
    const int two_d = p->in[0] == 1 && p->kernel[0] == 1 && p->out[0] == 1;
    const ptrdiff_t k = p->channels / p->groups * p->kernel[1] * p->kernel[2];
    const int exact = p->y_type == DMLQ_I32 || (double)k * 65025.0 + (double)largest_bias(p) <= INT32_MAX;
    return dmlq_level() == DMLQ_LEVEL_VNNI && two_d && exact && p->channels != p->groups && p->stride[2] <= MAX_STRIDE;
}

/* The work of one band of `rows` output rows of an image, in cycles at the kernel's rate: its tiles'
 * lanes times their k groups and panels (8 products of 16 lanes by vpdpbusd, 2 a cycle) and its
 * planes' dwords (about a fifth of a cycle each, by fill_row_stride1). */
static double band_cost(const implicit_job *job, ptrdiff_t rows) {
    const dmlq_conv_problem *p = job->p;
    ptrdiff_t used = 0;
    for (ptrdiff_t phase = 0; phase < job->phases; phase++) used += job->phase_used[phase];
    const double groups = (double)(p->groups * job->cq);
    return (double)(tiles_of(job, rows) * NR) * (double)(job->k_groups * job->m_panels) * groups / (double)job->cq * 0.25 +
           (double)(plane_rows(job, rows) * job->wq * used) * groups * 0.2;
}

enum { PLANNED_THREADS = 64, PLANNED_UNITS_PER_THREAD = 64 };

/* The work of bands of `rows` rows over every image as `threads` threads do it, each claiming the next
 * band when it is free (bands_task): the busiest thread's, in band_cost's cycles. With few bands per
 * thread the last ones decide: for 1 x 1 256 -> 64 at 56², one image on 2 threads, bands of 18 rows
 * (18, 18, 18, 2) have the fewest tiles (66, against 68 in 4 bands of 14 rows), but one thread then
 * computes 42 of them, against 34. */
static double bands_cost(const implicit_job *job, ptrdiff_t rows, int threads) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t height = p->out[1], bands = (height + rows - 1) / rows, units = p->batches * bands;
    const double whole = band_cost(job, rows), last = band_cost(job, height - (bands - 1) * rows);
    const double total = (double)p->batches * ((double)(bands - 1) * whole + last);
    if (threads <= 1 || threads > PLANNED_THREADS || units > PLANNED_UNITS_PER_THREAD * threads)
        return total / (threads > 1 ? threads : 1); /* one thread, or so many bands that they even out */
    double finish[PLANNED_THREADS] = {0}, busiest = 0.0;
    for (ptrdiff_t unit = 0; unit < units; unit++) {
        int idle = 0; /* the thread free first */
        for (int t = 1; t < threads; t++) idle = finish[t] < finish[idle] ? t : idle;
        finish[idle] += unit % bands == bands - 1 ? last : whole;
        busiest = finish[idle] > busiest ? finish[idle] : busiest;
    }
    return busiest;
}

/* Bands of output rows: each band's planes within BAND_BYTES (unless of one row), enough bands for
 * the threads to share (2 units each), the cheapest such (bands_cost) of the largest half. */
static void plan_bands(implicit_job *job, int threads) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t height = p->out[1];
    ptrdiff_t largest = 1;
    for (ptrdiff_t rows = height; rows > 1; rows--) {
        const ptrdiff_t bands = (height + rows - 1) / rows;
        const double bytes = 4.0 * (double)(p->groups * job->cq * job->phases) * (double)(plane_rows(job, rows) * job->wq + NR);
        if (bytes <= BAND_BYTES && (threads == 1 || p->batches * bands >= 2 * threads)) {
            largest = rows;
            break;
        }
    }
    job->band_rows = largest;
    double best = bands_cost(job, largest, threads);
    for (ptrdiff_t rows = largest - 1; rows >= (largest + 1) / 2; rows--) {
        const double cost = bands_cost(job, rows, threads);
        if (cost < best * (1.0 - 1e-9)) best = cost, job->band_rows = rows; /* ties: the larger bands */
    }
    job->bands = (height + job->band_rows - 1) / job->band_rows;
}

/* The planes' and tiles' geometry; the taps' offsets and the phases they read (tap_offsets and
 * phase_used allocated by the caller). */
static void plan(implicit_job *job, int threads) {
    const dmlq_conv_problem *p = job->p;
    job->cg = p->channels / p->groups, job->mg = p->out_channels / p->groups, job->cq = (job->cg + 3) / 4;
    job->taps = p->kernel[1] * p->kernel[2], job->k_groups = job->taps * job->cq;
    job->m_panels = (job->mg + MR - 1) / MR;
    job->sh = p->stride[1], job->sw = p->stride[2], job->phases = job->sh * job->sw;
    job->wq = round_up((p->out[2] - 1) * job->sw + (p->kernel[2] - 1) * p->dilation[2] + 1, job->sw) / job->sw;
    for (ptrdiff_t t = 0; t < job->taps; t++) {
        const ptrdiff_t rows = t / p->kernel[2] * p->dilation[1], columns = t % p->kernel[2] * p->dilation[2];
        job->phase_used[rows % job->sh * job->sw + columns % job->sw] = 1;
    }
    plan_bands(job, threads);
    job->hq = plane_rows(job, job->band_rows);
    job->plane = round_up(job->hq * job->wq + NR, LANES); /* the last tile reads up to NR past the rows */
    job->q_stride = job->phases * job->plane, job->group_dwords = job->cq * job->q_stride;
    job->band_dwords = p->groups * job->group_dwords;
    for (ptrdiff_t t = 0; t < job->taps; t++) {
        const ptrdiff_t rows = t / p->kernel[2] * p->dilation[1], columns = t % p->kernel[2] * p->dilation[2];
        const ptrdiff_t phase = rows % job->sh * job->sw + columns % job->sw;
        job->tap_offsets[t] = phase * job->plane + rows / job->sh * job->wq + columns / job->sw;
    }
    job->x_flip = p->x_signed ? 0x80808080u : 0;
    job->rows_run = job->phases == 1 && p->start[2] == 0 && p->in[2] == job->wq && p->x_strides[4] == 1 &&
                    p->x_strides[3] == job->wq;
    dmlq_one_run(p->out, p->y_strides + 2, DMLQ_CONV_DIMS, &job->y_col);
    job->y_size = p->y_type == DMLQ_I32 ? 4 : 1;
    if (job->y_col == 0) job->y_col = job->y_size; /* one position: any step */
}

int dmlq_conv_implicit(const dmlq_conv_problem *p, int threads) {
    implicit_job job = {.p = p};
    job.tap_offsets = malloc(sizeof(ptrdiff_t) * (size_t)(p->kernel[1] * p->kernel[2]));
    job.phase_used = calloc((size_t)(p->stride[1] * p->stride[2]), 1);
    int kept = 0, status = job.tap_offsets && job.phase_used ? 0 : -1;
    dmlq_conv_filter own = {0};
    if (!status) {
        plan(&job, threads);
        job.filter = packed_fits(p->packed, p) ? p->packed : dmlq_conv_pack_filter(&own, p) ? NULL : &own;
        status = job.filter ? conv_output_init(&job.out, p, job.filter->weight_sums, job.cg * job.taps) : -1;
    }
    if (!status) job.planes = dmlq_gemm_workspace_take(sizeof(uint32_t) * (size_t)(threads * job.band_dwords), &kept);
    if (!status && !job.planes) status = -1;
    if (!status) dmlq_parallel(bands_task, &job, threads);
    conv_output_free(&job.out);
    dmlq_conv_free_filter(&own);
    if (job.planes) dmlq_gemm_workspace_give(job.planes, kept);
    free(job.tap_offsets);
    free(job.phase_used);
    return status;
}

#else

int dmlq_conv_implicit_fits(const dmlq_conv_problem *p) {
    (void)p;
    return 0;
}

int dmlq_conv_implicit(const dmlq_conv_problem *p, int threads) {
    (void)p, (void)threads;
    return -1;
}

int dmlq_conv_pack_filter(dmlq_conv_filter *f, const dmlq_conv_problem *p) {
    (void)p;
    memset(f, 0, sizeof *f);
    return 1;
}

void dmlq_conv_free_filter(dmlq_conv_filter *f) { (void)f; }

#endif
