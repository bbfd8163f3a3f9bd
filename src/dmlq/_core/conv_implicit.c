/* The 2-D integer convolutions as an implicit matrix multiply on the VNNI kernel set (family.h): the
 * GEMM's own dot-product and requantization kernels, without an im2col matrix.
 *
 * The multiply is conv.c's (A the filter, a row per output channel; B the input's columns, a column per
 * output position), with K ordered tap by tap, four input channels at a time: k = (tap, c). The input is
 * first rewritten once per image as planes of dwords, one per group of 4 channels: B' bytes (gemm.h: x
 * xor 0x80 for uint8 x) of those channels at one input position, the zero point's B' where the position
 * is padding, 0 for channels beyond C. The planes cover the padded input and are split by phase modulo
 * the strides (plane (fh, fw) holds padded rows fh, fh + sh, ... and columns fw, fw + sw, ...), so that
 * for every tap the output positions of a row read consecutive dwords of one plane, and the next output
 * row starts a few dwords on (the planes' width exceeds the output's by about the kernel's extent).
 * A B panel (NR positions, every k) is then assembled 16 positions at a time by one or two vector loads
 * and a permute per tap and group of 4 channels: the dword layout of the planes is the panels' own
 * ([group of 4 k][column][4 bytes]). The dot products, the zero-point correction and the output (int32 or
 * requantized, with the bias) are the GEMM's, straight into the NCHW output (a row per output channel).
 * The filter's rows are the kernels' A' rows: the filter reordered to (tap, c) once per call.
 */
#include "family.h"

#if DMLQ_X86

enum { LANES = 16, PLANE_SLACK = 2 * LANES, IMPLICIT_BYTES = 8 << 20 };

typedef struct {
    const dmlq_conv_problem *p;
    const gemm_kernels *kernels;
    dmlq_requantizer requantizer;
    dmlq_gemm_epilogue epilogue;
    ptrdiff_t cg, mg, cq;               /* channels and output channels per group; groups of 4 channels */
    ptrdiff_t taps, k_groups, lda;      /* k groups: taps * cq; A' rows lda bytes apart */
    ptrdiff_t sh, sw, hq, wq, plane;    /* strides, one phase plane's rows, columns and dwords */
    ptrdiff_t positions, panels, m_panels;
    const dmlq_conv_filter *filter;     /* A' of every group: [G][m_panels * MR][lda], its row sums */
    uint32_t *planes;                   /* [image][G * cq][sh * sw][plane] */
    ptrdiff_t first_image, images, next;
    uint32_t x_flip;                    /* 0x80 per byte for uint8 x */
} implicit_job;

static ptrdiff_t round_up(ptrdiff_t value, ptrdiff_t step) { return (value + step - 1) / step * step; }

/* ---- the input as phase planes of dwords ------------------------------------------------------- */

/* The B' dword of padding for group of channels cq_local: the zero point's B' for real channels. */
static uint32_t pad_dword(const implicit_job *job, ptrdiff_t cq_local) {
    uint32_t dword = 0;
    const uint8_t zero = (uint8_t)((uint8_t)job->p->x_zero_point ^ (uint8_t)job->x_flip);
    for (int j = 0; j < 4; j++)
        if (4 * cq_local + j < job->cg) dword |= (uint32_t)zero << (8 * j);
    return dword;
}

DMLQ_BEGIN_TARGET(DMLQ_VNNI_FEATURES)

/* Dwords of 4 channel rows (fewer: zero bytes) at columns first, first + step, ... (count of them),
 * B' bytes (xor flip), into out. */
static void interleave_channels(uint32_t *out, const uint8_t *const *rows, int channels, ptrdiff_t first,
                                ptrdiff_t step, ptrdiff_t count, uint32_t flip) {
    ptrdiff_t c = 0;
    if (channels == 4 && step <= 2) {
        const __m512i gather = step == 1 ? _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
                                         : _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        const __m512i flips = _mm512_set1_epi32((int)flip);
        for (; c + LANES + (step - 1) <= count; c += LANES) { /* step 2 reads one byte past its last */
            __m512i dwords = _mm512_setzero_si512();
            for (int j = 0; j < 4; j++) { /* bytes of channel j, widened to dwords, shifted into byte j */
                const uint8_t *at = rows[j] + first + c * step;
                const __m512i bytes = step == 1 ? _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)at))
                                                : _mm512_permutexvar_epi32(gather, _mm512_cvtepu8_epi32(
                                                      _mm_loadu_si128((const __m128i *)at)));
                const __m512i high = step == 1 ? bytes
                                               : _mm512_permutexvar_epi32(gather, _mm512_cvtepu8_epi32(
                                                     _mm_loadu_si128((const __m128i *)(at + 16))));
                const __m512i values = step == 1 ? bytes : _mm512_mask_blend_epi32(0xff00, bytes, high);
                dwords = _mm512_or_si512(dwords, _mm512_slli_epi32(values, 8 * j));
            }
            _mm512_storeu_si512((void *)(out + c), _mm512_xor_si512(dwords, flips));
        }
    }
    for (; c < count; c++) {
        uint32_t dword = 0;
        for (int j = 0; j < channels; j++) dword |= (uint32_t)rows[j][first + c * step] << (8 * j);
        out[c] = dword ^ (flip & (0xffffffffu >> (32 - 8 * channels)));
    }
}

/* One group of 4 channels of one image: its sh * sw phase planes. */
static void fill_planes(const implicit_job *job, ptrdiff_t image, ptrdiff_t g, ptrdiff_t cq_local) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t c0 = g * job->cg + 4 * cq_local;
    const int channels = (int)(job->cg - 4 * cq_local < 4 ? job->cg - 4 * cq_local : 4);
    const uint32_t pad = pad_dword(job, cq_local);
    const ptrdiff_t x_col = p->x_strides[4];
    uint32_t *planes = job->planes + ((image - job->first_image) * p->groups * job->cq + g * job->cq + cq_local) *
                                         job->sh * job->sw * job->plane;
    const char *x = p->x + image * p->x_strides[0];
    for (ptrdiff_t fh = 0; fh < job->sh; fh++)
        for (ptrdiff_t r = 0; r < job->hq; r++) {
            const ptrdiff_t i1 = r * job->sh + fh - p->start[1];
            const uint8_t *rows[4];
            for (int j = 0; j < channels; j++) rows[j] = (const uint8_t *)x + (c0 + j) * p->x_strides[1] + i1 * p->x_strides[3];
            for (ptrdiff_t fw = 0; fw < job->sw; fw++) {
                uint32_t *out = planes + (fh * job->sw + fw) * job->plane + r * job->wq;
                /* plane column v reads input column v * sw + fw - start: inside for v in [lo, hi) */
                const ptrdiff_t first = p->start[2] - fw, last = p->in[2] - 1 + p->start[2] - fw;
                ptrdiff_t lo = first <= 0 ? 0 : (first + job->sw - 1) / job->sw;
                ptrdiff_t hi = last < 0 ? 0 : last / job->sw + 1;
                hi = hi < job->wq ? hi : job->wq;
                lo = lo < hi ? lo : hi;
                if (i1 < 0 || i1 >= p->in[1]) lo = hi = 0;
                for (ptrdiff_t v = 0; v < lo; v++) out[v] = pad;
                if (hi > lo && x_col == 1)
                    interleave_channels(out + lo, rows, channels, lo * job->sw + fw - p->start[2], job->sw, hi - lo,
                                        job->x_flip);
                else
                    for (ptrdiff_t v = lo; v < hi; v++) {
                        uint32_t dword = 0;
                        for (int j = 0; j < channels; j++)
                            dword |= (uint32_t)rows[j][(v * job->sw + fw - p->start[2]) * x_col] << (8 * j);
                        out[v] = dword ^ (job->x_flip & (0xffffffffu >> (32 - 8 * channels)));
                    }
                for (ptrdiff_t v = hi; v < job->wq; v++) out[v] = pad;
            }
        }
}

/* ---- B panels -------------------------------------------------------------------------------- */

/* Panel j of group g of one image: for each tap and group of 4 channels, NR positions' dwords; and the
 * panel's column sums (of its signed bytes, by vpdpbusd against ones while each vector is at hand). */
static void fill_panel(const implicit_job *job, ptrdiff_t image, ptrdiff_t g, ptrdiff_t j, uint32_t *panel,
                       int32_t *sums) {
    const dmlq_conv_problem *p = job->p;
    const int nr = job->kernels->nr;
    const ptrdiff_t width = p->out[2], phase_plane = job->plane;
    const uint32_t *planes = job->planes + ((image - job->first_image) * p->groups + g) * job->cq * job->sh * job->sw *
                                               phase_plane;
    const ptrdiff_t group_stride = job->sh * job->sw * phase_plane;
    for (int v = 0; v < nr / LANES; v++) {
        int32_t index[LANES];
        ptrdiff_t base = 0;
        int identity = 1, near = 1;
        for (int l = 0; l < LANES; l++) {
            ptrdiff_t n = j * nr + v * LANES + l;
            n = n < job->positions ? n : job->positions - 1;
            const ptrdiff_t at = n / width * job->wq + n % width;
            if (l == 0) base = at;
            index[l] = (int32_t)(at - base);
            identity &= index[l] == l;
            near &= index[l] < 2 * LANES;
        }
        const __m512i permute = _mm512_loadu_si512((const void *)index), ones = _mm512_set1_epi8(1);
        __m512i sum = _mm512_setzero_si512();
        for (ptrdiff_t t = 0; t < job->taps; t++) {
            const ptrdiff_t k1 = t / p->kernel[2], k2 = t % p->kernel[2];
            const ptrdiff_t rows = k1 * p->dilation[1], columns = k2 * p->dilation[2];
            const ptrdiff_t phase = rows % job->sh * job->sw + columns % job->sw;
            const uint32_t *source = planes + phase * phase_plane + rows / job->sh * job->wq + columns / job->sw + base;
            uint32_t *out = panel + (t * job->cq * nr + v * LANES);
            for (ptrdiff_t q = 0; q < job->cq; q++, source += group_stride, out += nr) {
                __m512i dwords;
                if (identity) {
                    dwords = _mm512_loadu_si512((const void *)source);
                } else if (near) {
                    const __m512i low = _mm512_loadu_si512((const void *)source);
                    const __m512i high = _mm512_loadu_si512((const void *)(source + LANES));
                    dwords = _mm512_permutex2var_epi32(low, permute, high);
                } else {
                    for (int l = 0; l < LANES; l++) out[l] = source[index[l]];
                    dwords = _mm512_load_si512((const void *)out);
                }
                _mm512_store_si512((void *)out, dwords);
                sum = _mm512_dpbusd_epi32(sum, ones, dwords);
            }
        }
        _mm512_storeu_si512((void *)(sums + v * LANES), sum);
    }
}

DMLQ_END_TARGET

/* ---- the multiply ----------------------------------------------------------------------------- */

static void compute_panel(const implicit_job *job, ptrdiff_t unit, uint32_t *panel) {
    const dmlq_conv_problem *p = job->p;
    const gemm_kernels *kernels = job->kernels;
    const int mr = kernels->mr, nr = kernels->nr;
    const ptrdiff_t j = unit % job->panels, g = unit / job->panels % p->groups;
    const ptrdiff_t image = job->first_image + unit / (job->panels * p->groups);
    int32_t sums[GEMM_NR * 2];
    fill_panel(job, image, g, j, panel, sums);
    const ptrdiff_t n0 = j * nr, columns = job->positions - n0 < nr ? job->positions - n0 : nr;
    ptrdiff_t y_col; /* the output positions' step (out's spatial dimensions are one run: py_family.c) */
    dmlq_one_run(p->out, p->y_strides + 2, DMLQ_CONV_DIMS, &y_col);
    _Alignas(64) int32_t dots[GEMM_MAX_TILE];
    for (ptrdiff_t mp = 0; mp < job->m_panels; mp++) {
        const ptrdiff_t local = mp * mr, m0 = g * job->mg + local;
        const ptrdiff_t rows = job->mg - local < mr ? job->mg - local : mr;
        const uint8_t *a = job->filter->a + (g * job->m_panels + mp) * mr * job->lda;
        kernels->dot(a, job->lda, (const int8_t *)panel, job->k_groups, (int)rows, dots);
        const gemm_tile tile = {m0, 0, rows, columns, nr,
                                p->y + image * p->y_strides[0] + m0 * p->y_strides[1] + n0 * y_col,
                                p->y_strides[1], y_col, job->filter->row_sums, sums, 0};
        if (job->epilogue.kind == DMLQ_EPILOGUE_INT32) {
            dmlq_gemm_epilogue_tile(dots, &tile, &job->requantizer.q, job->requantizer.requantize);
            continue;
        }
        for (ptrdiff_t i = 0; p->bias && i < rows; i++) { /* fits in int32: dmlq_conv_implicit_fits */
            const int32_t bias = p->bias[m0 + i];
            for (int n = 0; n < nr; n++) dots[i * nr + n] += bias;
        }
        job->requantizer.requantize(dots, &tile, &job->requantizer.q);
    }
}

static void planes_task(void *context, int thread, int threads) {
    (void)thread, (void)threads;
    implicit_job *job = context;
    const ptrdiff_t per_image = job->p->groups * job->cq, units = job->images * per_image;
    for (ptrdiff_t unit = dmlq_claim(&job->next); unit < units; unit = dmlq_claim(&job->next))
        fill_planes(job, job->first_image + unit / per_image, unit % per_image / job->cq, unit % job->cq);
}

static void panels_task(void *context, int thread, int threads) {
    (void)thread, (void)threads;
    implicit_job *job = context;
    const ptrdiff_t units = job->images * job->p->groups * job->panels;
    const size_t bytes = (size_t)(job->k_groups * job->kernels->nr * 4);
    uint32_t *panel = malloc(bytes + 64);
    if (!panel) return; /* another thread does the work; the caller checks that it was done */
    uint32_t *aligned = (uint32_t *)(((uintptr_t)panel + 63) / 64 * 64);
    for (ptrdiff_t unit = dmlq_claim(&job->next); unit < units; unit = dmlq_claim(&job->next))
        compute_panel(job, unit, aligned);
    free(panel);
}

static void pack_rows(dmlq_conv_filter *f, const dmlq_conv_problem *p) {
    const int mr = ((const gemm_kernels *)f->kernels)->mr;
    const ptrdiff_t taps = f->kernel[0] * f->kernel[1] * f->kernel[2], mg = f->out_channels / f->groups;
    const ptrdiff_t step = p->w_strides[4], tap_bytes = f->lda / taps;
    const uint8_t flip = f->w_signed ? 0x80 : 0;
    memset(f->a, 0, (size_t)(f->groups * f->m_panels * mr * f->lda));
    for (ptrdiff_t m = 0; m < f->out_channels; m++) {
        uint8_t *row = f->a + (m / mg * f->m_panels * mr + m % mg) * f->lda;
        const uint8_t *filter = (const uint8_t *)p->w + m * p->w_strides[0];
        int32_t sum = 0;
        for (ptrdiff_t c = 0; c < f->channels; c++, filter += taps * step)
            for (ptrdiff_t t = 0; t < taps; t++) {
                const uint8_t value = filter[t * step] ^ flip;
                row[t * tap_bytes + c] = value;
                sum += value;
            }
        f->row_sums[m] = sum;
    }
}

int dmlq_conv_pack_filter(dmlq_conv_filter *f, const dmlq_conv_problem *p) {
    memset(f, 0, sizeof *f);
    if (dmlq_level() != DMLQ_LEVEL_VNNI || p->channels == p->groups) return 1; /* no implicit multiply */
    const gemm_kernels *kernels = &dmlq_gemm_vnni;
    f->kernels = kernels;
    f->out_channels = p->out_channels, f->channels = p->channels / p->groups, f->groups = p->groups;
    for (int d = 0; d < DMLQ_CONV_DIMS; d++) f->kernel[d] = p->kernel[d];
    f->w_signed = p->w_signed;
    f->m_panels = (p->out_channels / p->groups + kernels->mr - 1) / kernels->mr;
    f->lda = f->kernel[0] * f->kernel[1] * f->kernel[2] * ((f->channels + 3) / 4) * 4;
    f->a = malloc((size_t)(f->groups * f->m_panels * kernels->mr * f->lda) + 1);
    f->row_sums = malloc(sizeof(int32_t) * (size_t)(f->out_channels ? f->out_channels : 1));
    if (!f->a || !f->row_sums) {
        dmlq_conv_free_filter(f);
        return -1;
    }
    pack_rows(f, p);
    return 0;
}

void dmlq_conv_free_filter(dmlq_conv_filter *f) {
    free(f->a);
    free(f->row_sums);
    f->a = NULL;
    f->row_sums = NULL;
}

/* Whether a filter packed beforehand is the one this problem's kernels and shapes want. */
static int packed_fits(const dmlq_conv_filter *f, const dmlq_conv_problem *p) {
    int fits = f && f->a && f->kernels == &dmlq_gemm_vnni && f->out_channels == p->out_channels &&
               f->channels * p->groups == p->channels && f->groups == p->groups && f->w_signed == p->w_signed;
    for (int d = 0; d < DMLQ_CONV_DIMS; d++) fits &= f && f->kernel[d] == p->kernel[d];
    return fits;
}

/* The requantization's (or the int32 output's) vectors, by the level's kernels. */
static int prepare_output(implicit_job *job) {
    const dmlq_conv_problem *p = job->p;
    const ptrdiff_t m = p->out_channels, columns = 2 * GEMM_NR;
    float *floats = malloc(sizeof(float) * (size_t)(3 * m + columns));
    int32_t *zeros = malloc(sizeof(int32_t) * (size_t)columns);
    int status = floats && zeros ? 0 : -1;
    if (!status) {
        float *ones = floats, *y_scale = floats + m, *y_zero = floats + 2 * m, *x_scale = floats + 3 * m;
        for (ptrdiff_t i = 0; i < m; i++) ones[i] = 1.0f, y_scale[i] = p->y_scale, y_zero[i] = p->y_zero_point;
        for (ptrdiff_t i = 0; i < columns; i++) x_scale[i] = p->x_scale, zeros[i] = p->x_zero_point;
        const int requantized = p->y_type != DMLQ_I32;
        const dmlq_gemm_problem problem = {.m = m, .n = columns, .k = job->cg * job->taps,
                                           .a_scale = requantized ? p->w_scale : ones, .b_scale = x_scale,
                                           .out_scale = y_scale, .a_zero_point = p->w_zero_point, .b_zero_point = zeros,
                                           .out_zero_point = y_zero, .a_signed = p->w_signed, .b_signed = p->x_signed,
                                           .out_signed = p->y_type == DMLQ_I8, .reciprocal = p->reciprocal,
                                           .epilogue = &job->epilogue};
        status = dmlq_requantizer_init(&job->requantizer, &problem);
    }
    free(floats);
    free(zeros);
    job->requantizer.q.epilogue = job->epilogue.kind == DMLQ_EPILOGUE_INT32 ? &job->epilogue : NULL;
    return status;
}

static int64_t largest_bias(const dmlq_conv_problem *p) {
    int64_t largest = 0;
    for (ptrdiff_t m = 0; p->y_type != DMLQ_I32 && p->bias && m < p->out_channels; m++) {
        const int64_t magnitude = p->bias[m] < 0 ? -(int64_t)p->bias[m] : p->bias[m];
        largest = magnitude > largest ? magnitude : largest;
    }
    return largest;
}

int dmlq_conv_implicit_fits(const dmlq_conv_problem *p) {
    const gemm_kernels *kernels = &dmlq_gemm_vnni;
    const int two_d = p->in[0] == 1 && p->kernel[0] == 1 && p->out[0] == 1;
    const int layout = !kernels->b_pair_layout && kernels->group_multiple == 1 && kernels->nr % LANES == 0 &&
                       kernels->nr <= 2 * GEMM_NR && !kernels->pack_a;
    const ptrdiff_t k = p->channels / p->groups * p->kernel[1] * p->kernel[2];
    return dmlq_level() == DMLQ_LEVEL_VNNI && two_d && layout && (double)k * 65025.0 + (double)largest_bias(p) <= INT32_MAX &&
           p->channels != p->groups;
}

int dmlq_conv_implicit(const dmlq_conv_problem *p, int threads) {
    implicit_job job = {.p = p, .kernels = &dmlq_gemm_vnni};
    const int mr = job.kernels->mr, nr = job.kernels->nr;
    job.cg = p->channels / p->groups, job.mg = p->out_channels / p->groups, job.cq = (job.cg + 3) / 4;
    job.taps = p->kernel[1] * p->kernel[2], job.k_groups = job.taps * job.cq, job.lda = job.k_groups * 4;
    job.sh = p->stride[1], job.sw = p->stride[2];
    job.hq = round_up((p->out[1] - 1) * job.sh + (p->kernel[1] - 1) * p->dilation[1] + 1, job.sh) / job.sh;
    job.wq = round_up((p->out[2] - 1) * job.sw + (p->kernel[2] - 1) * p->dilation[2] + 1, job.sw) / job.sw;
    job.plane = job.hq * job.wq + PLANE_SLACK;
    job.positions = p->out[1] * p->out[2], job.panels = (job.positions + nr - 1) / nr;
    job.m_panels = (job.mg + mr - 1) / mr;
    job.x_flip = p->x_signed ? 0 : 0x80808080u;
    job.epilogue = (dmlq_gemm_epilogue){p->y_type == DMLQ_I32 ? DMLQ_EPILOGUE_INT32 : DMLQ_EPILOGUE_REQUANTIZE,
                                        p->y_type == DMLQ_I32 ? NULL : p->bias, largest_bias(p)};
    const ptrdiff_t image_dwords = p->groups * job.cq * job.sh * job.sw * job.plane;
    const ptrdiff_t chunk = IMPLICIT_BYTES / (4 * image_dwords) > 0 ? IMPLICIT_BYTES / (4 * image_dwords) : 1;
    const ptrdiff_t images = chunk < p->batches ? chunk : p->batches;
    dmlq_conv_filter own = {0};
    job.filter = packed_fits(p->packed, p) ? p->packed : dmlq_conv_pack_filter(&own, p) ? NULL : &own;
    int kept;
    job.planes = dmlq_gemm_workspace_take(sizeof(uint32_t) * (size_t)(images * image_dwords), &kept);
    int status = job.filter && job.planes ? prepare_output(&job) : -1;
    for (ptrdiff_t first = 0; !status && first < p->batches; first += images) {
        job.first_image = first;
        job.images = p->batches - first < images ? p->batches - first : images;
        job.next = 0;
        dmlq_parallel(planes_task, &job, threads);
        job.next = 0;
        dmlq_parallel(panels_task, &job, threads);
        if (job.next < job.images * p->groups * job.panels) status = -1; /* no thread found memory */
    }
    dmlq_requantizer_free(&job.requantizer);
    dmlq_conv_free_filter(&own);
    if (job.planes) dmlq_gemm_workspace_give(job.planes, kept);
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
