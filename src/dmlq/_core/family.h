/* The quantized family's kernels beside the matrix multiply: its other outputs (int32, float, a row
 * bias before the requantization), the convolutions, dynamic quantization's range and the quantized
 * average pooling. Their numbers are those of dmlq.reference (docs/operators.md):
 *   - int32 outputs: the exact sum of (a - za)(b - zb), wrapped to 32 bits (two's complement);
 *   - float outputs: float32((double)acc * ((double)as * (double)bs)), then + bias in float32, then
 *     rounded once to float16 for a float16 output;
 *   - requantized outputs: dmlq_requantize_one(acc + bias) (gemm_kernels.h), the bias added exactly.
 */
#ifndef DMLQ_FAMILY_H
#define DMLQ_FAMILY_H

#include "gemm_kernels.h"

/* ---- the matrix multiply's other outputs (gemm_epilogue.c) ------------------------------------ */

enum { DMLQ_EPILOGUE_REQUANTIZE = 0, DMLQ_EPILOGUE_INT32 = 1, DMLQ_EPILOGUE_FLOAT = 2 };

typedef struct dmlq_gemm_epilogue {
    int kind;
    /* REQUANTIZE: an int32 added to every sum of row m before the requantization ([m], or NULL), and
     * the largest |row_bias[m]| (the driver combines sums in int32 only while K * 65025 + it fits). */
    const int32_t *row_bias;
    int64_t row_bias_bound;
    /* FLOAT: the output's type (DMLQ_F32 or DMLQ_F16; the problem's out, out_row and out_col are in
     * bytes of it) and an optional bias of the output's shape (DMLQ_F32 or DMLQ_F16, read as float32):
     * element (m, n) of batch b at bias + bias_offsets[b] + m * bias_row + n * bias_col (bytes). The
     * problem's a_scale and b_scale scale the sums; its output scale and zero point are unused. */
    int out_type;
    const char *bias;
    int bias_type;
    const ptrdiff_t *bias_offsets;
    ptrdiff_t bias_row, bias_col;
} dmlq_gemm_epilogue;

/* A bound on |acc + row bias| over the problem: K * 255 * 255 plus the largest bias. */
double dmlq_gemm_sum_bound(const dmlq_gemm_problem *p);
/* A tile's output from its int32 dot products (the driver's int32 route; they may be changed). */
void dmlq_gemm_epilogue_tile(int32_t *dot, const gemm_tile *tile, const gemm_quantization *q,
                             void (*requantize)(const int32_t *, const gemm_tile *, const gemm_quantization *));
/* Element (i, j) of a tile from its exact sum (the driver's int64 route). */
void dmlq_gemm_epilogue_one(int64_t acc, const gemm_tile *tile, const gemm_quantization *q, ptrdiff_t i,
                            ptrdiff_t j);

/* Requantization by the level's kernels of exact sums computed elsewhere (gemm.c): dmlq_gemm's per-row
 * and per-column vectors of a problem of p->m rows and p->n columns whose sums are bounded by
 * dmlq_gemm_sum_bound(p) (its operands and output are unused). Tiles of one to `columns` columns,
 * their sums 64-byte aligned in rows of whole 16s, the zero points 0 (row and column sums read as 0). */
typedef struct {
    gemm_quantization q;
    void (*requantize)(const int32_t *dot, const gemm_tile *tile, const gemm_quantization *q);
    int columns;
    void *memory;
} dmlq_requantizer;

int dmlq_requantizer_init(dmlq_requantizer *r, const dmlq_gemm_problem *p); /* 0, or -1: no memory */
void dmlq_requantizer_free(dmlq_requantizer *r);

/* The multiply's packing workspace, kept from call to call (fresh pages cost a fault each), for other
 * kernels' buffers: `bytes` 64-byte aligned bytes (NULL when memory runs out), and giving them back. */
void *dmlq_gemm_workspace_take(size_t bytes, int *kept);
void dmlq_gemm_workspace_give(void *memory, int kept);

/* ---- convolutions (conv.c) --------------------------------------------------------------------- */

enum { DMLQ_CONV_DIMS = 3 }; /* spatial dimensions, as D, H, W: fewer are given as leading ones */

/* A filter packed for the implicit multiply (conv_implicit.c): each group's output channels in panels of
 * 8 (zero rows beyond), per group of 4 k (k = (tap, c), tap-major, channels beyond Cg zero) the panel's
 * dwords of w' (conv_output.h: w, or w xor 0x80 for uint8 w); and each output channel's sum of w'. */
typedef struct dmlq_conv_filter {
    int level; /* the level it was packed for */
    ptrdiff_t out_channels, channels, groups, kernel[DMLQ_CONV_DIMS]; /* channels: per group */
    int w_signed;
    ptrdiff_t m_panels, k_groups; /* per group */
    int32_t *a;
    int32_t *weight_sums;         /* [out_channels] */
} dmlq_conv_filter;

/* A forward convolution (cross-correlation) of NC[D]H W tensors, grouped: output channel m of group
 * g = m / (M / G) reads input channels g * Cg .. g * Cg + Cg - 1 (Cg = C / G). Padding reads as the
 * input zero point (contributes 0). The output is int32 (CONVOLUTION_INTEGER) or requantized bytes
 * (QUANTIZED_LINEAR_CONVOLUTION: requantize(acc + bias[m], x_scale * w_scale[m], y_scale, ...)). */
typedef struct {
    ptrdiff_t batches, channels, out_channels, groups;
    ptrdiff_t in[DMLQ_CONV_DIMS], out[DMLQ_CONV_DIMS], kernel[DMLQ_CONV_DIMS];
    ptrdiff_t stride[DMLQ_CONV_DIMS], dilation[DMLQ_CONV_DIMS], start[DMLQ_CONV_DIMS];
    /* byte strides: x and y [N, C, D, H, W], y's spatial dimensions one run (dmlq_one_run); w [M, Cg,
     * kD, kH, kW], whose last four dimensions are one run of w_strides[4] */
    const char *x, *w;
    char *y;
    ptrdiff_t x_strides[2 + DMLQ_CONV_DIMS], w_strides[2 + DMLQ_CONV_DIMS], y_strides[2 + DMLQ_CONV_DIMS];
    int x_signed, w_signed, y_type; /* y_type: DMLQ_I32, or DMLQ_U8 / DMLQ_I8 (requantized) */
    int32_t x_zero_point;
    const int32_t *w_zero_point;    /* [M] */
    /* the requantized output's */
    float x_scale, y_scale, y_zero_point;
    const float *w_scale;           /* [M] */
    const int32_t *bias;            /* [M], or NULL */
    int reciprocal;
    const dmlq_conv_filter *packed; /* w packed beforehand, or NULL (w is read in any case by other routes) */
} dmlq_conv_problem;

/* Whether `count` dimensions (sizes, byte strides) step through memory as one run in row-major order
 * (dimensions of size 1 step anywhere); its step in *step (0 when every size is 1). */
static inline int dmlq_one_run(const ptrdiff_t *sizes, const ptrdiff_t *strides, int count, ptrdiff_t *step) {
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

/* 0, or -1 when memory runs out. */
int dmlq_conv(const dmlq_conv_problem *p, int threads);
/* The implicit multiply at the VNNI level (conv_implicit.c): whether it takes the problem (2-D, Cg > 1,
 * requantized sums within int32), and running it (0, or -1 when memory runs out). */
int dmlq_conv_implicit_fits(const dmlq_conv_problem *p);
int dmlq_conv_implicit(const dmlq_conv_problem *p, int threads);
/* Depthwise convolutions at the VNNI level (conv_depthwise.c): whether it takes the problem (2-D, one
 * input channel per group, a horizontal stride and dilation whose windows fit a 16-byte lane, up to 64
 * kernel rows, x's and out's columns adjacent, requantized sums within int32), and running it (0, or
 * -1 when memory runs out). */
int dmlq_conv_depthwise_fits(const dmlq_conv_problem *p);
int dmlq_conv_depthwise(const dmlq_conv_problem *p, int threads);

/* Packs p's filter (its w, shapes and groups) for the current level's implicit multiply: 0, 1 when the
 * level, a depthwise or a 3-D filter has none (f is then empty), -1 when memory runs out. Freed by
 * dmlq_conv_free_filter. */
int dmlq_conv_pack_filter(dmlq_conv_filter *f, const dmlq_conv_problem *p);
void dmlq_conv_free_filter(dmlq_conv_filter *f);

/* ---- quantized average pooling (pooling.c) -------------------------------------------------------- */

/* Per output element of channel c: s = the exact sum of (x - x_zero_point[c]) over the window's taps
 * inside the input, count = those taps (or every tap of the window with include_padding, a padded one
 * adding 0 to s); in float64, value = s * x_scale[c] / count, then y = clamp(nearbyint(value /
 * y_scale[c]) + y_zero_point[c]) (value * (1 / y_scale[c]), that reciprocal in float32, with
 * `reciprocal`), NaN giving 0; a window with no tap inside and count 0 averages 0 (y_zero_point[c] for a
 * finite non-zero y_scale), as dmlq.reference's quantize_real of 0. */
typedef struct {
    ptrdiff_t batches, channels;
    ptrdiff_t in[DMLQ_CONV_DIMS], out[DMLQ_CONV_DIMS], window[DMLQ_CONV_DIMS];
    ptrdiff_t stride[DMLQ_CONV_DIMS], dilation[DMLQ_CONV_DIMS], start[DMLQ_CONV_DIMS];
    const char *x;
    char *y;
    ptrdiff_t x_strides[2 + DMLQ_CONV_DIMS], y_strides[2 + DMLQ_CONV_DIMS]; /* bytes, [N, C, D, H, W] */
    int x_signed, y_signed;
    const float *x_scale, *y_scale;                /* [C] */
    const int32_t *x_zero_point, *y_zero_point;    /* [C] */
    int include_padding, reciprocal;
} dmlq_pool_problem;

void dmlq_average_pool(const dmlq_pool_problem *p, int threads);

/* ---- dynamic quantization (dynamic_quantize.c) ------------------------------------------------- */

/* The smallest and largest of float32 or float16 (`type`) values, rows of `length` values `stride` bytes
 * apart (row r at data + offsets[r]): NaN and NaN when one is NaN (as NumPy's min and max); +inf and
 * -inf when there are none. */
void dmlq_value_range(const char *data, int type, const ptrdiff_t *offsets, ptrdiff_t rows, ptrdiff_t length,
                      ptrdiff_t stride, float *lo, float *hi, int threads);

/* DYNAMIC_QUANTIZE_LINEAR's scale and zero point from the values' range [lo, hi], in float32 as ONNX
 * defines them (dmlq.reference.dynamic_quantize_linear): the range widened to include 0, scale =
 * (rmax - rmin) / (qmax - qmin) (1 / (qmax - qmin) for an empty or all-0 range), the zero point
 * qmin - rmin / scale rounded half to even and saturated; NaN in the range gives scale NaN, zero point 0. */
void dmlq_dynamic_parameters(float lo, float hi, int is_signed, float *scale, int32_t *zero_point);

/* DYNAMIC_QUANTIZE_LINEAR of `count` contiguous float32 values x: *scale and *zero_point from their
 * range, always; and 1 when it also wrote their quantization into `count` bytes, clamp(round(x / scale)
 * + zero_point) (x * (1 / scale) with `reciprocal`) as the element-wise quantize gives it. 0 where the
 * level, a value that is not finite or a scale that is not normal leaves that to the element-wise
 * quantize. */
int dmlq_dynamic_quantize_linear(const float *x, ptrdiff_t count, int is_signed, int reciprocal, uint8_t *out,
                                 int threads, float *scale, int32_t *zero_point);

#endif
