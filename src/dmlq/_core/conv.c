/* The integer convolutions (family.h): through the exact integer matrix multiply, or directly where
 * each output channel reads one input channel (depthwise).
 *
 * Through the multiply, per group g: Y[g] = W[g] (Mg x K) times the input's columns (K x P), K = Cg
 * times the kernel's taps, P the output positions, so the output of NCHW comes out row by row (one
 * output channel per row, its positions along the row), with the filter's per-channel scale and zero
 * point per row and the bias as the row bias (gemm_epilogue.c). The columns are the input itself for a
 * pointwise convolution (1 x 1, stride 1, no padding); else they are gathered (im2col) for a few images
 * at a time, the padding written as the input's zero point, so that it contributes 0. Each group is one
 * multiply over those images (batches of the multiply), which runs on the threads.
 * A convolution with one input channel per group (Cg = 1, depthwise) would be a multiply with K = the
 * taps alone: it runs directly instead, each output row accumulated tap by tap over its positions.
 */
#include "family.h"

enum {
    COLUMN_BYTES = 4 << 20, /* gathered columns per multiply (at least one image's) */
    IM2COL_ROWS = 16        /* rows of the columns claimed at a time */
};

static ptrdiff_t at_least_one(ptrdiff_t count) { return count > 0 ? count : 1; }

static ptrdiff_t taps_of(const dmlq_conv_problem *p) {
    return p->kernel[0] * p->kernel[1] * p->kernel[2];
}

static ptrdiff_t positions_of(const dmlq_conv_problem *p) { return p->out[0] * p->out[1] * p->out[2]; }

/* The step of the spatial dimensions of x or y as one run (the caller checked they are). */
static ptrdiff_t spatial_step(const ptrdiff_t *strides, const ptrdiff_t *sizes) {
    ptrdiff_t step;
    dmlq_one_run(sizes, strides + 2, DMLQ_CONV_DIMS, &step);
    return step;
}

static int pointwise(const dmlq_conv_problem *p) {
    ptrdiff_t step;
    int plain = dmlq_one_run(p->in, p->x_strides + 2, DMLQ_CONV_DIMS, &step);
    for (int d = 0; d < DMLQ_CONV_DIMS; d++)
        plain &= p->kernel[d] == 1 && p->stride[d] == 1 && p->start[d] == 0 && p->out[d] == p->in[d];
    return plain;
}

/* Tap t of the kernel (row-major over kD, kH, kW) as its three offsets. */
static void tap_offsets(const dmlq_conv_problem *p, ptrdiff_t t, ptrdiff_t *offsets) {
    for (int d = DMLQ_CONV_DIMS - 1; d >= 0; d--) {
        offsets[d] = t % p->kernel[d];
        t /= p->kernel[d];
    }
}

/* The input coordinate of output coordinate o at kernel offset k along dimension d. */
static ptrdiff_t input_at(const dmlq_conv_problem *p, int d, ptrdiff_t o, ptrdiff_t k) {
    return o * p->stride[d] - p->start[d] + k * p->dilation[d];
}

/* The output coordinates [*lo, *hi) along dimension d whose input at kernel offset k is inside. */
static void inside_range(const dmlq_conv_problem *p, int d, ptrdiff_t k, ptrdiff_t *lo, ptrdiff_t *hi) {
    const ptrdiff_t s = p->stride[d], first = p->start[d] - k * p->dilation[d]; /* o * s >= first */
    const ptrdiff_t last = p->in[d] - 1 + first;                               /* o * s <= last */
    *lo = first <= 0 ? 0 : (first + s - 1) / s;
    *hi = last < 0 ? 0 : last / s + 1;
    if (*hi > p->out[d]) *hi = p->out[d];
    if (*lo > *hi) *lo = *hi;
}

/* Whether output coordinates (o0, o1) read an inside input row at offsets k; its address if so. */
static const char *input_row(const dmlq_conv_problem *p, const char *plane, ptrdiff_t o0, ptrdiff_t o1,
                             const ptrdiff_t *k) {
    const ptrdiff_t i0 = input_at(p, 0, o0, k[0]), i1 = input_at(p, 1, o1, k[1]);
    if (i0 < 0 || i0 >= p->in[0] || i1 < 0 || i1 >= p->in[1]) return NULL;
    return plane + i0 * p->x_strides[2] + i1 * p->x_strides[3];
}

/* ---- through the matrix multiply ---------------------------------------------------------------- */

typedef struct {
    const dmlq_conv_problem *p;
    ptrdiff_t first_image, images, rows, positions; /* rows: G * K per image */
    uint8_t *columns;                               /* [image][row][position] */
    ptrdiff_t next;
} im2col_job;

/* Row r (input channel and tap) of one image's columns. */
static void im2col_row(const dmlq_conv_problem *p, const char *image, ptrdiff_t r, uint8_t *dst) {
    const ptrdiff_t taps = taps_of(p), width = p->out[2], x_col = p->x_strides[4];
    const uint8_t pad = (uint8_t)p->x_zero_point;
    ptrdiff_t k[DMLQ_CONV_DIMS], lo, hi;
    tap_offsets(p, r % taps, k);
    inside_range(p, 2, k[2], &lo, &hi);
    const char *plane = image + r / taps * p->x_strides[1];
    const ptrdiff_t first = input_at(p, 2, lo, k[2]) * x_col, step = p->stride[2] * x_col;
    for (ptrdiff_t o0 = 0; o0 < p->out[0]; o0++)
        for (ptrdiff_t o1 = 0; o1 < p->out[1]; o1++, dst += width) {
            const char *row = input_row(p, plane, o0, o1, k);
            if (!row || lo == hi) {
                memset(dst, pad, (size_t)width);
                continue;
            }
            memset(dst, pad, (size_t)lo);
            if (step == 1)
                memcpy(dst + lo, row + first, (size_t)(hi - lo));
            else
                for (ptrdiff_t o = lo; o < hi; o++) dst[o] = (uint8_t)row[first + (o - lo) * step];
            memset(dst + hi, pad, (size_t)(width - hi));
        }
}

static void im2col_task(void *context, int thread, int threads) {
    (void)thread, (void)threads;
    im2col_job *job = context;
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t units = job->images * job->rows;
    for (ptrdiff_t unit = dmlq_claim(&job->next) * IM2COL_ROWS; unit < units;
         unit = dmlq_claim(&job->next) * IM2COL_ROWS) {
        for (ptrdiff_t u = unit; u < unit + IM2COL_ROWS && u < units; u++) {
            const ptrdiff_t image = u / job->rows, r = u % job->rows;
            im2col_row(p, p->x + (job->first_image + image) * p->x_strides[0], r,
                       job->columns + u * job->positions);
        }
    }
}

/* The per-row and per-column vectors of one group's multiply (gemm's dmlq_gemm_problem reads them). */
typedef struct {
    float *ones, *column_scale, *out_scale, *out_zero_point; /* [Mg], [P], [Mg], [Mg] */
    int32_t *column_zero;                                     /* [P] */
    ptrdiff_t *offsets;                                       /* a, b, out: [images] each */
} group_vectors;

static int allocate_group_vectors(group_vectors *v, const dmlq_conv_problem *p, ptrdiff_t images) {
    const ptrdiff_t mg = p->out_channels / p->groups, positions = positions_of(p);
    v->ones = malloc(sizeof(float) * (size_t)(3 * mg + positions));
    v->column_zero = malloc(sizeof(int32_t) * (size_t)positions);
    v->offsets = malloc(sizeof(ptrdiff_t) * (size_t)(3 * images));
    if (!v->ones || !v->column_zero || !v->offsets) return -1;
    v->out_scale = v->ones + mg, v->out_zero_point = v->out_scale + mg, v->column_scale = v->out_zero_point + mg;
    for (ptrdiff_t i = 0; i < mg; i++) {
        v->ones[i] = 1.0f;
        v->out_scale[i] = p->y_scale;
        v->out_zero_point[i] = p->y_zero_point;
    }
    for (ptrdiff_t n = 0; n < positions; n++) {
        v->column_scale[n] = p->x_scale;
        v->column_zero[n] = p->x_zero_point;
    }
    return 0;
}

static void free_group_vectors(group_vectors *v) {
    free(v->ones);
    free(v->column_zero);
    free(v->offsets);
}

static int64_t largest_magnitude(const int32_t *values, ptrdiff_t count) {
    int64_t largest = 0;
    for (ptrdiff_t i = 0; values && i < count; i++) {
        const int64_t magnitude = values[i] < 0 ? -(int64_t)values[i] : values[i];
        largest = magnitude > largest ? magnitude : largest;
    }
    return largest;
}

/* Group g of `images` images from first_image on, its columns at `columns` (rows of `b_row` bytes,
 * each image's `b_image` bytes apart; a column `b_col` bytes from the previous). */
static int multiply_group(const dmlq_conv_problem *p, const group_vectors *v, ptrdiff_t g, ptrdiff_t first_image,
                          ptrdiff_t images, const char *columns, ptrdiff_t b_image, ptrdiff_t b_row, ptrdiff_t b_col,
                          int threads) {
    const ptrdiff_t mg = p->out_channels / p->groups, cg = p->channels / p->groups, m0 = g * mg;
    const int requantized = p->y_type != DMLQ_I32;
    for (ptrdiff_t i = 0; i < images; i++) {
        v->offsets[i] = m0 * p->w_strides[0];
        v->offsets[images + i] = i * b_image;
        v->offsets[2 * images + i] = (first_image + i) * p->y_strides[0] + m0 * p->y_strides[1];
    }
    const dmlq_gemm_epilogue epilogue = {requantized ? DMLQ_EPILOGUE_REQUANTIZE : DMLQ_EPILOGUE_INT32,
                                         p->bias ? p->bias + m0 : NULL, largest_magnitude(p->bias ? p->bias + m0 : NULL, mg)};
    const dmlq_gemm_problem problem = {
        .batches = images, .m = mg, .n = positions_of(p), .k = cg * taps_of(p),
        .a = p->w, .b = columns, .out = p->y,
        .a_offsets = v->offsets, .b_offsets = v->offsets + images, .out_offsets = v->offsets + 2 * images,
        .a_row = p->w_strides[0], .a_col = p->w_strides[4], .b_row = b_row, .b_col = b_col,
        .out_row = p->y_strides[1], .out_col = spatial_step(p->y_strides, p->out),
        .a_signed = p->w_signed, .b_signed = p->x_signed, .out_signed = p->y_type == DMLQ_I8,
        .a_scale = requantized ? p->w_scale + m0 : v->ones, .b_scale = v->column_scale, .out_scale = v->out_scale,
        .a_zero_point = p->w_zero_point + m0, .b_zero_point = v->column_zero, .out_zero_point = v->out_zero_point,
        .reciprocal = p->reciprocal, .epilogue = &epilogue};
    return dmlq_gemm(&problem, threads);
}

static int through_multiply(const dmlq_conv_problem *p, int threads) {
    const ptrdiff_t positions = positions_of(p), rows = p->channels * taps_of(p);
    const ptrdiff_t cg = p->channels / p->groups, group_rows = cg * taps_of(p);
    const int direct_columns = pointwise(p);
    const ptrdiff_t chunk = direct_columns ? p->batches : at_least_one(COLUMN_BYTES / at_least_one(rows * positions));
    const ptrdiff_t images = chunk < p->batches ? chunk : p->batches;
    group_vectors v = {0};
    uint8_t *columns = direct_columns ? NULL : malloc((size_t)(images * rows * positions));
    int status = allocate_group_vectors(&v, p, images) < 0 || (!direct_columns && !columns) ? -1 : 0;
    for (ptrdiff_t first = 0; status == 0 && first < p->batches; first += images) {
        const ptrdiff_t count = p->batches - first < images ? p->batches - first : images;
        if (!direct_columns) {
            im2col_job job = {p, first, count, rows, positions, columns, 0};
            dmlq_parallel(im2col_task, &job, threads);
        }
        for (ptrdiff_t g = 0; status == 0 && g < p->groups; g++) {
            if (direct_columns)
                status = multiply_group(p, &v, g, first, count, p->x + first * p->x_strides[0] + g * cg * p->x_strides[1],
                                        p->x_strides[0], p->x_strides[1], spatial_step(p->x_strides, p->in), threads);
            else
                status = multiply_group(p, &v, g, first, count, (const char *)columns + g * group_rows * positions,
                                        rows * positions, positions, 1, threads);
        }
    }
    free(columns);
    free_group_vectors(&v);
    return status;
}

/* ---- one input channel per group: directly ------------------------------------------------------ */

/* Units of work: a block of output rows (the H dimension) of one channel of one image at one output
 * depth. For each tap's depth, the block's input rows are copied once into a plane of int32 x - x_zp,
 * zero where padding (so every tap reads inside it, and padding adds 0), its columns split by their
 * phase modulo the stride (so a tap reads one contiguous run per output row, whatever the stride);
 * then each output row adds tap after tap, one weight times a run of the plane, in int32: exact
 * while the window's sums (and the bias) fit, which the requantized output checks (else the scalar
 * int64 route below), and wrapping like the int32 output's definition otherwise. The rows are then
 * stored (int32) or requantized by the level's kernels (dmlq_requantizer).
 * At the VNNI level, with a horizontal stride of 1, the plane is instead of byte quads: dword o of a
 * row's quad group g holds the x' bytes (gemm_kernels.h: uint8, x xor 0x80 for int8 x) of taps 4g .. 4g + 3 of
 * output column o, and one vpdpbusd against a broadcast dword of 4 w' bytes (int8, w xor 0x80 for uint8
 * w) adds four taps of 16 outputs; padding holds x_zp', and
 *     sum of (x - x_zp)(w - w_zp) = sum x'w' - w_zp' sum x' - x_zp' sum w' + taps x_zp' w_zp'
 * (sum x' by vpdpbusd against ones, only where w_zp' is not 0), in wrapping int32 as above. */

enum { PLANE_BYTES = 64 << 10 };

typedef struct {
    const dmlq_conv_problem *p;
    dmlq_requantizer requantizer; /* the requantized output's, int32 route */
    int wide;                     /* the requantized output's sums may not fit int32: the scalar route */
    double divisor;
    ptrdiff_t block_rows, blocks, plane_rows, phase_width, acc_stride;
    int quads;                    /* the VNNI route's byte quads */
    ptrdiff_t quad_groups, quad_width, byte_row; /* per plane row: groups of 4 taps, dwords each; bytes */
    const int32_t *zeros;         /* row and column sums of 0 for the requantizer's tiles */
    ptrdiff_t next;
} direct_job;

enum { TAP_GROUP = 16 }; /* taps added per pass over an output row */

/* acc[o] += sum over t < taps of runs[t][o] * weights[t] for o < count, mod 2**32. The vector versions
 * run their last vector past count (up to 15 ints), which acc and the runs have room for. */
static void add_taps_portable(int32_t *acc, const int32_t *const *runs, const int32_t *weights, int taps,
                              ptrdiff_t count) {
    for (int t = 0; t < taps; t++) {
        const int32_t *run = runs[t];
        const uint32_t weight = (uint32_t)weights[t];
        for (ptrdiff_t o = 0; o < count; o++) acc[o] = (int32_t)((uint32_t)acc[o] + (uint32_t)run[o] * weight);
    }
}

/* dst[u] = x[u * step] - zero for u < count (bytes of `is_signed`). */
static void centre_run_portable(int32_t *dst, const uint8_t *x, ptrdiff_t step, int is_signed, int32_t zero,
                                ptrdiff_t count) {
    if (is_signed)
        for (ptrdiff_t u = 0; u < count; u++) dst[u] = (int8_t)x[u * step] - zero;
    else
        for (ptrdiff_t u = 0; u < count; u++) dst[u] = x[u * step] - zero;
}

typedef struct {
    void (*add_taps)(int32_t *acc, const int32_t *const *runs, const int32_t *weights, int taps, ptrdiff_t count);
    void (*centre_run)(int32_t *dst, const uint8_t *x, ptrdiff_t step, int is_signed, int32_t zero, ptrdiff_t count);
} stencil_kernels;

static const stencil_kernels STENCIL_PORTABLE = {add_taps_portable, centre_run_portable};

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_AVX2_FEATURES)
/* 32 sums in four registers per pass over the taps, then 8 at a time. */
static void add_taps_avx2(int32_t *acc, const int32_t *const *runs, const int32_t *weights, int taps,
                          ptrdiff_t count) {
    ptrdiff_t o = 0;
    for (; o + 32 <= count; o += 32) {
        __m256i sum[4];
        for (int j = 0; j < 4; j++) sum[j] = _mm256_loadu_si256((const __m256i *)(acc + o + 8 * j));
        for (int t = 0; t < taps; t++) {
            const __m256i weight = _mm256_set1_epi32(weights[t]);
            for (int j = 0; j < 4; j++)
                sum[j] = _mm256_add_epi32(sum[j], _mm256_mullo_epi32(_mm256_loadu_si256((const __m256i *)(runs[t] + o + 8 * j)), weight));
        }
        for (int j = 0; j < 4; j++) _mm256_storeu_si256((__m256i *)(acc + o + 8 * j), sum[j]);
    }
    for (; o < count; o += 8) {
        __m256i sum = _mm256_loadu_si256((const __m256i *)(acc + o));
        for (int t = 0; t < taps; t++)
            sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(_mm256_loadu_si256((const __m256i *)(runs[t] + o)),
                                                           _mm256_set1_epi32(weights[t])));
        _mm256_storeu_si256((__m256i *)(acc + o), sum);
    }
}

static void centre_run_avx2(int32_t *dst, const uint8_t *x, ptrdiff_t step, int is_signed, int32_t zero,
                            ptrdiff_t count) {
    ptrdiff_t u = 0;
    const __m256i zeros = _mm256_set1_epi32(zero);
    for (; step == 1 && u + 8 <= count; u += 8) {
        const __m128i bytes = _mm_loadl_epi64((const __m128i *)(x + u));
        const __m256i values = is_signed ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
        _mm256_storeu_si256((__m256i *)(dst + u), _mm256_sub_epi32(values, zeros));
    }
    centre_run_portable(dst + u, x + u * step, step, is_signed, zero, count - u);
}
DMLQ_END_TARGET
static const stencil_kernels STENCIL_AVX2 = {add_taps_avx2, centre_run_avx2};

DMLQ_BEGIN_TARGET(DMLQ_AVX512_FEATURES)
/* 64 sums in four registers per pass over the taps, then 16 at a time. */
static void add_taps_avx512(int32_t *acc, const int32_t *const *runs, const int32_t *weights, int taps,
                            ptrdiff_t count) {
    ptrdiff_t o = 0;
    for (; o + 64 <= count; o += 64) {
        __m512i sum[4];
        for (int j = 0; j < 4; j++) sum[j] = _mm512_loadu_si512((const void *)(acc + o + 16 * j));
        for (int t = 0; t < taps; t++) {
            const __m512i weight = _mm512_set1_epi32(weights[t]);
            for (int j = 0; j < 4; j++)
                sum[j] = _mm512_add_epi32(sum[j], _mm512_mullo_epi32(_mm512_loadu_si512((const void *)(runs[t] + o + 16 * j)), weight));
        }
        for (int j = 0; j < 4; j++) _mm512_storeu_si512((void *)(acc + o + 16 * j), sum[j]);
    }
    for (; o < count; o += 16) {
        __m512i sum = _mm512_loadu_si512((const void *)(acc + o));
        for (int t = 0; t < taps; t++)
            sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(_mm512_loadu_si512((const void *)(runs[t] + o)),
                                                           _mm512_set1_epi32(weights[t])));
        _mm512_storeu_si512((void *)(acc + o), sum);
    }
}

static void centre_run_avx512(int32_t *dst, const uint8_t *x, ptrdiff_t step, int is_signed, int32_t zero,
                              ptrdiff_t count) {
    ptrdiff_t u = 0;
    const __m512i zeros = _mm512_set1_epi32(zero);
    for (; step == 1 && u + 16 <= count; u += 16) {
        const __m128i bytes = _mm_loadu_si128((const __m128i *)(x + u));
        const __m512i values = is_signed ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
        _mm512_storeu_si512((void *)(dst + u), _mm512_sub_epi32(values, zeros));
    }
    centre_run_portable(dst + u, x + u * step, step, is_signed, zero, count - u);
}
DMLQ_END_TARGET
static const stencil_kernels STENCIL_AVX512 = {add_taps_avx512, centre_run_avx512};

DMLQ_BEGIN_TARGET(DMLQ_VNNI_FEATURES)
/* quads[o] = bytes[o + j * step] in byte j, for o < count (a multiple of 16) and j < 4. */
static void quad_row_vnni(uint32_t *quads, const uint8_t *bytes, ptrdiff_t step, ptrdiff_t count) {
    for (ptrdiff_t o = 0; o < count; o += 16) {
        __m512i dwords = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(bytes + o)));
        for (int j = 1; j < 4; j++)
            dwords = _mm512_or_si512(dwords, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                                                    (const __m128i *)(bytes + o + j * step))),
                                                                8 * j));
        _mm512_storeu_si512((void *)(quads + o), dwords);
    }
}

/* acc[o] += dot(runs[i][o], weights[i]) (4 unsigned by 4 signed bytes) over i < count_runs, as
 * add_taps_avx512. */
static void dot_quads_vnni(int32_t *acc, const int32_t *const *runs, const int32_t *weights, int count_runs,
                           ptrdiff_t count) {
    ptrdiff_t o = 0;
    for (; o + 64 <= count; o += 64) {
        __m512i sum[4];
        for (int j = 0; j < 4; j++) sum[j] = _mm512_loadu_si512((const void *)(acc + o + 16 * j));
        for (int t = 0; t < count_runs; t++) {
            const __m512i weight = _mm512_set1_epi32(weights[t]);
            for (int j = 0; j < 4; j++)
                sum[j] = _mm512_dpbusd_epi32(sum[j], _mm512_loadu_si512((const void *)(runs[t] + o + 16 * j)), weight);
        }
        for (int j = 0; j < 4; j++) _mm512_storeu_si512((void *)(acc + o + 16 * j), sum[j]);
    }
    for (; o < count; o += 16) {
        __m512i sum = _mm512_loadu_si512((const void *)(acc + o));
        for (int t = 0; t < count_runs; t++)
            sum = _mm512_dpbusd_epi32(sum, _mm512_loadu_si512((const void *)(runs[t] + o)), _mm512_set1_epi32(weights[t]));
        _mm512_storeu_si512((void *)(acc + o), sum);
    }
}
DMLQ_END_TARGET
#endif

static const stencil_kernels *stencil_for_level(void) {
#if DMLQ_X86
    if (dmlq_level() >= DMLQ_LEVEL_AVX512) return &STENCIL_AVX512;
    if (dmlq_level() >= DMLQ_LEVEL_AVX2) return &STENCIL_AVX2;
#endif
    return &STENCIL_PORTABLE;
}

/* The plane's rows of output rows [o1, o1 + block) at input depth i0 (padded rows from o1 * s1 on),
 * each row's columns by phase: phase f holds padded columns f, f + s2, ... (phase_width each). */
static void fill_plane(const direct_job *job, const stencil_kernels *k, const char *channel, ptrdiff_t i0,
                       ptrdiff_t o1, int32_t *plane) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t s2 = p->stride[2], width = job->phase_width, x_col = p->x_strides[4];
    for (ptrdiff_t r = 0; r < job->plane_rows; r++) {
        const ptrdiff_t i1 = o1 * p->stride[1] + r - p->start[1];
        int32_t *row = plane + r * s2 * width;
        if (i1 < 0 || i1 >= p->in[1]) {
            memset(row, 0, sizeof(int32_t) * (size_t)(s2 * width));
            continue;
        }
        const uint8_t *x = (const uint8_t *)channel + i0 * p->x_strides[2] + i1 * p->x_strides[3];
        for (ptrdiff_t f = 0; f < s2; f++) {
            int32_t *phase = row + f * width;
            /* padded column u = f + s2 * v reads input column u - start (inside: [0, in)) */
            const ptrdiff_t first = p->start[2] - f; /* s2 * v >= first */
            const ptrdiff_t lo = first <= 0 ? 0 : (first + s2 - 1) / s2;
            const ptrdiff_t last = p->in[2] - 1 + p->start[2] - f;
            ptrdiff_t hi = last < 0 ? 0 : last / s2 + 1;
            hi = hi < width ? hi : width;
            const ptrdiff_t inside = hi > lo ? hi - lo : 0;
            memset(phase, 0, sizeof(int32_t) * (size_t)width);
            if (inside)
                k->centre_run(phase + lo, x + (f + s2 * lo - p->start[2]) * x_col, s2 * x_col, p->x_signed,
                              p->x_zero_point, inside);
        }
    }
}

/* acc[row][o] += the taps at depth k0 of output rows [o1, o1 + rows) of channel m, from the plane. */
static void add_plane(const direct_job *job, const stencil_kernels *k, const int32_t *plane, ptrdiff_t m, ptrdiff_t k0,
                      ptrdiff_t rows, int32_t *acc) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t s2 = p->stride[2], width = job->phase_width;
    const char *filter = p->w + m * p->w_strides[0];
    const ptrdiff_t taps = p->kernel[1] * p->kernel[2];
    int32_t weights[TAP_GROUP];
    ptrdiff_t starts[TAP_GROUP]; /* each tap's run in the plane, from the block's first row */
    const int32_t *runs[TAP_GROUP];
    for (ptrdiff_t first = 0; first < taps; first += TAP_GROUP) {
        const int group = (int)(taps - first < TAP_GROUP ? taps - first : TAP_GROUP);
        for (int i = 0; i < group; i++) {
            const ptrdiff_t k1 = (first + i) / p->kernel[2], k2 = (first + i) % p->kernel[2];
            const char *tap = filter + (k0 * taps + first + i) * p->w_strides[4];
            weights[i] = (p->w_signed ? *(const int8_t *)tap : *(const uint8_t *)tap) - p->w_zero_point[m];
            const ptrdiff_t column = k2 * p->dilation[2];
            starts[i] = (k1 * p->dilation[1] * s2 + column % s2) * width + column / s2;
        }
        for (ptrdiff_t r = 0; r < rows; r++) {
            for (int i = 0; i < group; i++) runs[i] = plane + r * p->stride[1] * s2 * width + starts[i];
            k->add_taps(acc + r * job->acc_stride, runs, weights, group, p->out[2]);
        }
    }
}

/* The correction constant of depth k0's taps of channel m: taps x_zp' w_zp' - x_zp' sum w'. */
static uint32_t quad_constant(const direct_job *job, ptrdiff_t m, ptrdiff_t k0) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t taps = p->kernel[1] * p->kernel[2];
    const uint8_t flip = p->w_signed ? 0 : 0x80;
    const uint32_t x_zero = (uint8_t)((uint8_t)p->x_zero_point ^ (p->x_signed ? 0x80 : 0));
    const uint32_t w_zero = (uint32_t)(int32_t)(int8_t)(uint8_t)((uint8_t)p->w_zero_point[m] ^ flip);
    const char *filter = p->w + m * p->w_strides[0] + k0 * taps * p->w_strides[4];
    uint32_t weight_sum = 0;
    for (ptrdiff_t t = 0; t < taps; t++) weight_sum += (uint32_t)(int32_t)(int8_t)((uint8_t)filter[t * p->w_strides[4]] ^ flip);
    return (uint32_t)taps * x_zero * w_zero - x_zero * weight_sum;
}

#if DMLQ_X86
/* The byte-quad plane of output rows [o1, o1 + block) at input depth i0: per plane row, the padded row's
 * x' bytes (x_zp' outside the input), then its quad groups. */
static void fill_quads(const direct_job *job, const char *channel, ptrdiff_t i0, ptrdiff_t o1, uint8_t *bytes,
                       uint32_t *quads) {
    const dmlq_conv_problem *p = job->p;
    const uint8_t flip = p->x_signed ? 0x80 : 0, pad = (uint8_t)((uint8_t)p->x_zero_point ^ flip);
    const ptrdiff_t d2 = p->dilation[2], x_col = p->x_strides[4];
    for (ptrdiff_t r = 0; r < job->plane_rows; r++) {
        const ptrdiff_t i1 = o1 * p->stride[1] + r - p->start[1];
        memset(bytes, pad, (size_t)job->byte_row);
        if (i1 >= 0 && i1 < p->in[1]) {
            const uint8_t *x = (const uint8_t *)channel + i0 * p->x_strides[2] + i1 * p->x_strides[3];
            const ptrdiff_t first = p->start[2], count = p->in[2] < job->byte_row - first ? p->in[2] : job->byte_row - first;
            uint8_t *restrict row = bytes + first;
            if (x_col == 1) {
                memcpy(row, x, (size_t)count);
                for (ptrdiff_t u = 0; flip && u < count; u++) row[u] ^= flip;
            } else {
                for (ptrdiff_t u = 0; u < count; u++) row[u] = x[u * x_col] ^ flip;
            }
        }
        for (ptrdiff_t g = 0; g < job->quad_groups; g++)
            quad_row_vnni(quads + (r * job->quad_groups + g) * job->quad_width, bytes + 4 * g * d2, d2,
                          job->acc_stride);
    }
}

/* acc[row] += the taps at depth k0 of output rows [o1, o1 + rows) of channel m from the quad plane, less
 * w_zp' times their x' (box: room for rows of such sums, zero); the constant is quad_constant's. */
static void add_quads(const direct_job *job, const uint32_t *quads, ptrdiff_t m, ptrdiff_t k0, ptrdiff_t rows,
                      int32_t *acc, int32_t *box) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t k1s = p->kernel[1], k2s = p->kernel[2], groups = job->quad_groups;
    const uint8_t flip = p->w_signed ? 0 : 0x80;
    const int32_t w_zero = (int8_t)(uint8_t)((uint8_t)p->w_zero_point[m] ^ flip);
    const char *filter = p->w + (m * p->w_strides[0]) + k0 * k1s * k2s * p->w_strides[4];
    int32_t weights[TAP_GROUP], ones[TAP_GROUP];
    const int32_t *runs[TAP_GROUP];
    for (ptrdiff_t first = 0; first < k1s * groups; first += TAP_GROUP) {
        const int count = (int)(k1s * groups - first < TAP_GROUP ? k1s * groups - first : TAP_GROUP);
        for (int i = 0; i < count; i++) {
            const ptrdiff_t k1 = (first + i) / groups, g = (first + i) % groups;
            uint32_t dword = 0, unit = 0;
            for (ptrdiff_t j = 0; j < 4 && 4 * g + j < k2s; j++) {
                const int8_t w = (int8_t)((uint8_t)filter[(k1 * k2s + 4 * g + j) * p->w_strides[4]] ^ flip);
                dword |= (uint32_t)(uint8_t)w << (8 * j);
                unit |= 1u << (8 * j);
            }
            weights[i] = (int32_t)dword, ones[i] = (int32_t)unit;
        }
        for (ptrdiff_t r = 0; r < rows; r++) {
            for (int i = 0; i < count; i++) {
                const ptrdiff_t k1 = (first + i) / groups, g = (first + i) % groups;
                const ptrdiff_t row = r * p->stride[1] + k1 * p->dilation[1];
                runs[i] = (const int32_t *)quads + (row * groups + g) * job->quad_width;
            }
            dot_quads_vnni(acc + r * job->acc_stride, runs, weights, count, p->out[2]);
            if (w_zero) dot_quads_vnni(box + r * job->acc_stride, runs, ones, count, p->out[2]);
        }
    }
    if (!w_zero) return;
    const ptrdiff_t values = rows * job->acc_stride;
    uint32_t *restrict sums = (uint32_t *)acc, *restrict boxes = (uint32_t *)box;
    for (ptrdiff_t i = 0; i < values; i++) sums[i] -= (uint32_t)w_zero * boxes[i];
    memset(boxes, 0, sizeof(int32_t) * (size_t)values);
}
#endif

/* A block of rows of sums as the output: int32 (wrapped), or plus the bias, requantized by tiles of
 * the block's rows (the requantizer's rows m * block_rows + r, all channel m's). */
static void store_sums(const direct_job *job, ptrdiff_t m, ptrdiff_t rows, int32_t *acc, char *out) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t width = p->out[2], y_col = p->y_strides[4], y_row = p->y_strides[3], stride = job->acc_stride;
    if (p->y_type == DMLQ_I32) {
        for (ptrdiff_t r = 0; r < rows; r++) {
            if (y_col == sizeof(int32_t))
                memcpy(out + r * y_row, acc + r * stride, sizeof(int32_t) * (size_t)width);
            else
                for (ptrdiff_t o = 0; o < width; o++) memcpy(out + r * y_row + o * y_col, &acc[r * stride + o], 4);
        }
        return;
    }
    const int32_t bias = p->bias && !job->quads ? p->bias[m] : 0; /* the quads' sums start from it */
    for (ptrdiff_t i = 0; bias && i < rows * stride; i++) acc[i] += bias; /* fits: checked (job->wide) */
    /* tiles of as many rows as a tile's room holds (the portable requantize copies rows * stride sums
     * there); rows wider than that room copied out one at a time */
    const dmlq_requantizer *r = &job->requantizer;
    const ptrdiff_t rows_per_tile = stride <= GEMM_MAX_TILE ? GEMM_MAX_TILE / stride : 1;
    _Alignas(64) int32_t row[GEMM_MAX_TILE];
    for (ptrdiff_t first = 0; first < width; first += r->columns)
        for (ptrdiff_t r0 = 0; r0 < rows; r0 += rows_per_tile) {
            const ptrdiff_t columns = width - first < r->columns ? width - first : r->columns;
            const ptrdiff_t count = rows - r0 < rows_per_tile ? rows - r0 : rows_per_tile;
            const int32_t *sums = acc + r0 * stride + first;
            if (stride > GEMM_MAX_TILE) sums = memcpy(row, sums, sizeof(int32_t) * (size_t)columns);
            const gemm_tile tile = {m * job->block_rows + r0, 0, count, columns, stride > GEMM_MAX_TILE ? 64 : stride,
                                    out + r0 * y_row + first * y_col, y_row, y_col, job->zeros, job->zeros, 0};
            r->requantize(sums, &tile, &r->q);
        }
}

/* The scalar route, for requantized sums that may not fit in int32: output row (o0, o1) of channel m. */
static void wide_row(const direct_job *job, const char *plane, ptrdiff_t m, ptrdiff_t o0, ptrdiff_t o1, char *out) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t taps = taps_of(p), x_col = p->x_strides[4];
    const double lo = p->y_type == DMLQ_I8 ? -128.0 : 0.0, hi = p->y_type == DMLQ_I8 ? 127.0 : 255.0;
    const char *filter = p->w + m * p->w_strides[0];
    for (ptrdiff_t o = 0; o < p->out[2]; o++) {
        int64_t acc = p->bias ? p->bias[m] : 0;
        for (ptrdiff_t t = 0; t < taps; t++) {
            ptrdiff_t k[DMLQ_CONV_DIMS], lo_o, hi_o;
            tap_offsets(p, t, k);
            const char *row = input_row(p, plane, o0, o1, k);
            inside_range(p, 2, k[2], &lo_o, &hi_o);
            if (!row || o < lo_o || o >= hi_o) continue;
            const char *x = row + input_at(p, 2, o, k[2]) * x_col, *tap = filter + t * p->w_strides[4];
            const int64_t value = (p->x_signed ? *(const int8_t *)x : *(const uint8_t *)x) - p->x_zero_point;
            acc += value * ((p->w_signed ? *(const int8_t *)tap : *(const uint8_t *)tap) - p->w_zero_point[m]);
        }
        *(uint8_t *)(out + o * p->y_strides[4]) = dmlq_requantize_one(acc, (double)p->x_scale, (double)p->w_scale[m],
                                                                      job->divisor, p->reciprocal,
                                                                      (double)p->y_zero_point, lo, hi);
    }
}

static void direct_unit(const direct_job *job, const stencil_kernels *k, ptrdiff_t unit, int32_t *plane,
                        int32_t *acc, int32_t *box) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t per_group = p->out_channels / p->groups, block = unit % job->blocks;
    const ptrdiff_t o0 = unit / job->blocks % p->out[0], m = unit / (job->blocks * p->out[0]) % p->out_channels;
    const ptrdiff_t n = unit / (job->blocks * p->out[0] * p->out_channels);
    const ptrdiff_t o1 = block * job->block_rows, rows = p->out[1] - o1 < job->block_rows ? p->out[1] - o1 : job->block_rows;
    const char *channel = p->x + n * p->x_strides[0] + m / per_group * p->x_strides[1];
    char *out = p->y + n * p->y_strides[0] + m * p->y_strides[1] + o0 * p->y_strides[2] + o1 * p->y_strides[3];
    if (job->wide) {
        for (ptrdiff_t r = 0; r < rows; r++) wide_row(job, channel, m, o0, o1 + r, out + r * p->y_strides[3]);
        return;
    }
    uint32_t start = job->quads && p->y_type != DMLQ_I32 && p->bias ? (uint32_t)p->bias[m] : 0;
    for (ptrdiff_t k0 = 0; job->quads && k0 < p->kernel[0]; k0++) {
        const ptrdiff_t i0 = input_at(p, 0, o0, k0);
        if (i0 >= 0 && i0 < p->in[0]) start += quad_constant(job, m, k0);
    }
    for (ptrdiff_t i = 0; i < rows * job->acc_stride; i++) acc[i] = (int32_t)start;
    for (ptrdiff_t k0 = 0; k0 < p->kernel[0]; k0++) {
        const ptrdiff_t i0 = input_at(p, 0, o0, k0);
        if (i0 < 0 || i0 >= p->in[0]) continue;
#if DMLQ_X86
        if (job->quads) {
            uint8_t *bytes = (uint8_t *)(box + job->block_rows * job->acc_stride);
            fill_quads(job, channel, i0, o1, bytes, (uint32_t *)plane);
            add_quads(job, (const uint32_t *)plane, m, k0, rows, acc, box);
            continue;
        }
#endif
        fill_plane(job, k, channel, i0, o1, plane);
        add_plane(job, k, plane, m, k0, rows, acc);
    }
    store_sums(job, m, rows, acc, out);
}

static void direct_task(void *context, int thread, int threads) {
    (void)thread, (void)threads;
    direct_job *job = context;
    const dmlq_conv_problem *p = job->p;
    const stencil_kernels *k = stencil_for_level();
    const ptrdiff_t units = p->batches * p->out_channels * p->out[0] * job->blocks;
    const ptrdiff_t plane_ints = job->quads ? job->plane_rows * job->quad_groups * job->quad_width
                                            : job->plane_rows * p->stride[2] * job->phase_width;
    const ptrdiff_t acc_ints = job->block_rows * job->acc_stride, box_ints = job->quads ? acc_ints : 0;
    const size_t bytes = sizeof(int32_t) * (size_t)(plane_ints + 16 + 2 * acc_ints + box_ints) + (size_t)job->byte_row + 128;
    int32_t *plane = job->wide ? NULL : malloc(bytes); /* 16 more ints to read past the plane */
    if (!job->wide && !plane) return; /* the caller's thread found no memory either: reported there */
    int32_t *acc = plane ? (int32_t *)(((uintptr_t)(plane + plane_ints + 16) + 63) / 64 * 64) : NULL;
    int32_t *box = acc ? acc + acc_ints : NULL; /* then the bytes of a padded row */
    if (box) memset(box, 0, sizeof(int32_t) * (size_t)box_ints);
    for (ptrdiff_t unit = dmlq_claim(&job->next); unit < units; unit = dmlq_claim(&job->next))
        direct_unit(job, k, unit, plane, acc, box);
    free(plane);
}

/* The direct route's geometry: blocks of output rows whose plane takes about PLANE_BYTES. */
static void plan_direct(direct_job *job) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t s1 = p->stride[1], s2 = p->stride[2], extent1 = (p->kernel[1] - 1) * p->dilation[1] + 1;
    const ptrdiff_t padded_width = (p->out[2] - 1) * s2 + (p->kernel[2] - 1) * p->dilation[2] + 1;
    job->phase_width = (padded_width + s2 - 1) / s2;
    const ptrdiff_t row_bytes = (ptrdiff_t)sizeof(int32_t) * s2 * job->phase_width;
    const ptrdiff_t fitting = (PLANE_BYTES / row_bytes - extent1) / s1 + 1;
    job->block_rows = fitting < 1 ? 1 : fitting > p->out[1] ? p->out[1] : fitting;
    job->blocks = (p->out[1] + job->block_rows - 1) / job->block_rows;
    job->plane_rows = (job->block_rows - 1) * s1 + extent1;
    job->acc_stride = (p->out[2] + 15) / 16 * 16;
    job->quads = DMLQ_X86 && dmlq_level() == DMLQ_LEVEL_VNNI && s2 == 1;
    job->quad_groups = (p->kernel[2] + 3) / 4;
    job->quad_width = job->acc_stride + 16;
    job->byte_row = job->acc_stride + 4 * job->quad_groups * p->dilation[2] + 64; /* every quad's bytes */
}

/* The requantized output's vectors for the level's kernels: a row per output row of a block of each
 * channel (m * block_rows + r), as many columns as one tile's. */
static int prepare_requantizer(direct_job *job, int32_t *zeros) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t m = p->out_channels * job->block_rows, columns = 64;
    float *floats = malloc(sizeof(float) * (size_t)(3 * m + columns));
    if (!floats) return -1;
    float *y_scale = floats, *y_zero = floats + m, *w_scale = floats + 2 * m, *x_scale = floats + 3 * m;
    for (ptrdiff_t i = 0; i < m; i++)
        y_scale[i] = p->y_scale, y_zero[i] = p->y_zero_point, w_scale[i] = p->w_scale[i / job->block_rows];
    for (ptrdiff_t i = 0; i < columns; i++) x_scale[i] = p->x_scale;
    const dmlq_gemm_epilogue bias = {DMLQ_EPILOGUE_REQUANTIZE, p->bias, largest_magnitude(p->bias, p->out_channels)};
    const dmlq_gemm_problem problem = {.m = m, .n = columns, .k = taps_of(p), .a_scale = w_scale,
                                       .b_scale = x_scale, .out_scale = y_scale, .a_zero_point = zeros,
                                       .b_zero_point = zeros, .out_zero_point = y_zero, .b_signed = 1,
                                       .out_signed = p->y_type == DMLQ_I8, .reciprocal = p->reciprocal,
                                       .epilogue = &bias};
    job->wide = dmlq_gemm_sum_bound(&problem) > INT32_MAX;
    const int status = job->wide ? 0 : dmlq_requantizer_init(&job->requantizer, &problem);
    free(floats);
    return status;
}

static int directly(const dmlq_conv_problem *p, int threads) {
    direct_job job = {.p = p, .divisor = p->reciprocal ? (double)(1.0f / p->y_scale) : (double)p->y_scale};
    plan_direct(&job);
    const ptrdiff_t rows = p->out_channels * job.block_rows, zero_count = rows > 64 ? rows : 64;
    int32_t *zeros = calloc((size_t)zero_count, sizeof(int32_t));
    int status = zeros ? 0 : -1;
    job.zeros = zeros;
    const int requantized = p->y_type != DMLQ_I32;
    if (!status && requantized) status = prepare_requantizer(&job, zeros);
    if (!status) {
        dmlq_parallel(direct_task, &job, threads);
        if (!job.wide && job.next < p->batches * p->out_channels * p->out[0] * job.blocks) status = -1;
    }
    if (requantized && !job.wide && job.requantizer.memory) dmlq_requantizer_free(&job.requantizer);
    free(zeros);
    return status;
}

int dmlq_conv(const dmlq_conv_problem *p, int threads) {
    if (p->batches == 0 || p->out_channels == 0 || positions_of(p) == 0) return 0;
    if (p->channels == p->groups) return dmlq_conv_depthwise_fits(p) ? dmlq_conv_depthwise(p, threads) : directly(p, threads);
    /* a pointwise convolution's columns are its input: the multiply packs them in one pass */
    if (dmlq_conv_implicit_fits(p)) return dmlq_conv_implicit(p, threads);
    return through_multiply(p, threads);
}
