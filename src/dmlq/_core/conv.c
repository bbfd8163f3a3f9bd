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
    IM2COL_ROWS = 16,       /* rows of the columns claimed at a time */
    DIRECT_CHUNK = 256      /* positions of an output row accumulated at a time */
};

static ptrdiff_t at_least_one(ptrdiff_t count) { return count > 0 ? count : 1; }

static ptrdiff_t taps_of(const dmlq_conv_problem *p) {
    return p->kernel[0] * p->kernel[1] * p->kernel[2];
}

static ptrdiff_t positions_of(const dmlq_conv_problem *p) { return p->out[0] * p->out[1] * p->out[2]; }

int dmlq_one_run(const ptrdiff_t *sizes, const ptrdiff_t *strides, int count, ptrdiff_t *step) {
    ptrdiff_t inner = 0;
    *step = 0;
    for (int d = count - 1; d >= 0; d--) {
        if (sizes[d] == 1) continue;
        if (inner && strides[d] != *step * inner) return 0;
        if (!inner) *step = strides[d], inner = 1;
        inner *= sizes[d];
    }
    return 1;
}

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

typedef struct {
    const dmlq_conv_problem *p;
    double divisor;
    ptrdiff_t next;
} direct_job;

/* Output row (o0, o1) of channel m of one image, positions [first, end) of it, into acc. */
static void accumulate_row(const dmlq_conv_problem *p, const char *plane, ptrdiff_t m, ptrdiff_t o0, ptrdiff_t o1,
                           ptrdiff_t first, ptrdiff_t end, int64_t *acc) {
    const ptrdiff_t taps = taps_of(p), x_col = p->x_strides[4];
    const int32_t zx = p->x_zero_point, zw = p->w_zero_point[m];
    const char *filter = p->w + m * p->w_strides[0];
    for (ptrdiff_t o = first; o < end; o++) acc[o - first] = 0;
    for (ptrdiff_t t = 0; t < taps; t++) {
        ptrdiff_t k[DMLQ_CONV_DIMS], lo, hi;
        tap_offsets(p, t, k);
        const char *row = input_row(p, plane, o0, o1, k);
        if (!row) continue;
        inside_range(p, 2, k[2], &lo, &hi);
        lo = lo > first ? lo : first;
        hi = hi < end ? hi : end;
        const char *tap = filter + t * p->w_strides[4];
        const int64_t weight = (p->w_signed ? *(const int8_t *)tap : *(const uint8_t *)tap) - zw;
        for (ptrdiff_t o = lo; o < hi; o++) {
            const char *x = row + input_at(p, 2, o, k[2]) * x_col;
            const int32_t value = p->x_signed ? *(const int8_t *)x : *(const uint8_t *)x;
            acc[o - first] += (int64_t)(value - zx) * weight;
        }
    }
}

static void store_row(const dmlq_conv_problem *p, const direct_job *job, ptrdiff_t m, const int64_t *acc,
                      ptrdiff_t count, char *out) {
    const ptrdiff_t y_col = p->y_strides[4];
    if (p->y_type == DMLQ_I32) {
        for (ptrdiff_t o = 0; o < count; o++) {
            const uint32_t wrapped = (uint32_t)acc[o];
            memcpy(out + o * y_col, &wrapped, 4);
        }
        return;
    }
    const int64_t bias = p->bias ? p->bias[m] : 0;
    const double lo = p->y_type == DMLQ_I8 ? -128.0 : 0.0, hi = p->y_type == DMLQ_I8 ? 127.0 : 255.0;
    for (ptrdiff_t o = 0; o < count; o++)
        *(uint8_t *)(out + o * y_col) = dmlq_requantize_one(acc[o] + bias, (double)p->x_scale, (double)p->w_scale[m],
                                                            job->divisor, p->reciprocal, (double)p->y_zero_point, lo, hi);
}

/* Units of work: one output row of one channel of one image. */
static void direct_task(void *context, int thread, int threads) {
    (void)thread, (void)threads;
    direct_job *job = context;
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t rows = p->out[0] * p->out[1], units = p->batches * p->out_channels * rows;
    const ptrdiff_t per_group = p->out_channels / p->groups;
    int64_t acc[DIRECT_CHUNK];
    for (ptrdiff_t unit = dmlq_claim(&job->next); unit < units; unit = dmlq_claim(&job->next)) {
        const ptrdiff_t n = unit / (p->out_channels * rows), m = unit / rows % p->out_channels, row = unit % rows;
        const ptrdiff_t o0 = row / p->out[1], o1 = row % p->out[1];
        const char *plane = p->x + n * p->x_strides[0] + m / per_group * p->x_strides[1];
        char *out = p->y + n * p->y_strides[0] + m * p->y_strides[1] + o0 * p->y_strides[2] + o1 * p->y_strides[3];
        for (ptrdiff_t first = 0; first < p->out[2]; first += DIRECT_CHUNK) {
            const ptrdiff_t end = first + DIRECT_CHUNK < p->out[2] ? first + DIRECT_CHUNK : p->out[2];
            accumulate_row(p, plane, m, o0, o1, first, end, acc);
            store_row(p, job, m, acc, end - first, out + first * p->y_strides[4]);
        }
    }
}

static int directly(const dmlq_conv_problem *p, int threads) {
    direct_job job = {p, p->reciprocal ? (double)(1.0f / p->y_scale) : (double)p->y_scale, 0};
    dmlq_parallel(direct_task, &job, threads);
    return 0;
}

int dmlq_conv(const dmlq_conv_problem *p, int threads) {
    if (p->batches == 0 || p->out_channels == 0 || positions_of(p) == 0) return 0;
    if (p->channels == p->groups) return directly(p, threads);
    return through_multiply(p, threads);
}
