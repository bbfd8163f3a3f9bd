/* Element-wise row kernels, compiled once per instruction set (rows_portable.c, rows_avx2.c,
 * rows_avx512.c include this file inside their target region).
 *
 * The including file defines ROW_TABLE (the exported table's name) and two contiguous converters,
 * halves_to_floats and floats_to_halves; it may define FAST_QUANTIZE, FAST_DEQUANTIZE, FAST_QADD
 * and FAST_ADD, hand-written loops for the common contiguous cases that return 1 when they apply
 * (only they use `stream`: the generic rows store through the caches), and FAST_QADD_CORRECTS
 * where its FAST_QADD computes without a division when `corrected` is set (the table's
 * corrected_qadd_exact then verifies that route for a parameter set against the dividing loop).
 * Rows work in tiles of TILE elements: a contiguous operand of the kernel's own type is read in
 * place, any other is converted into a small stack tile first, so strided, broadcast and float16
 * operands cost one pass through L1 and nothing else. The loops are written for the compiler's
 * vectoriser (tools/portable_rows_check.c holds the portable build to the formulas on ARM64); each
 * expression is the reference's, in its order, except the saturation that dmlq_saturated_byte moves
 * before the rounding, which gives the same bytes.
 */
#include <math.h>

enum { TILE = 512 };

static float scalar_float(const char *p, int type) {
    switch (type) {
    case DMLQ_F16: return dmlq_half_to_float(*(const uint16_t *)p);
    case DMLQ_I32: return (float)*(const int32_t *)p;
    default: return *(const float *)p;
    }
}

/* n values of a float32/float16/int32 operand as float32: in place, or converted into tile. */
static const float *as_floats(float *tile, const char *src, ptrdiff_t stride, int type, ptrdiff_t n) {
    if (type == DMLQ_F32 && stride == 4) return (const float *)src;
    if (type == DMLQ_F16 && stride == 2) {
        halves_to_floats(tile, (const uint16_t *)src, n);
    } else if (type == DMLQ_I32 && stride == 4) {
        const int32_t *s = (const int32_t *)src;
        for (ptrdiff_t i = 0; i < n; i++) tile[i] = (float)s[i];
    } else {
        for (ptrdiff_t i = 0; i < n; i++) tile[i] = scalar_float(src + i * stride, type);
    }
    return tile;
}

static const uint8_t *as_bytes(uint8_t *tile, const char *src, ptrdiff_t stride, ptrdiff_t n) {
    if (stride == 1) return (const uint8_t *)src;
    for (ptrdiff_t i = 0; i < n; i++) tile[i] = *(const uint8_t *)(src + i * stride);
    return tile;
}

static void bytes_to_floats(float *dst, const uint8_t *src, int is_signed, ptrdiff_t n) {
    if (is_signed)
        for (ptrdiff_t i = 0; i < n; i++) dst[i] = (float)(int8_t)src[i];
    else
        for (ptrdiff_t i = 0; i < n; i++) dst[i] = (float)src[i];
}

static void scatter_bytes(char *dst, ptrdiff_t stride, const uint8_t *src, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) *(uint8_t *)(dst + i * stride) = src[i];
}

/* Store float32 results into a float32 or float16 output (float16: one rounding, to nearest even). */
static void store_floats(char *dst, ptrdiff_t stride, int type, const float *src, ptrdiff_t n) {
    if (type == DMLQ_F16 && stride == 2) {
        floats_to_halves((uint16_t *)dst, src, n);
    } else if (type == DMLQ_F16) {
        for (ptrdiff_t i = 0; i < n; i++) *(uint16_t *)(dst + i * stride) = dmlq_float_to_half(src[i]);
    } else {
        for (ptrdiff_t i = 0; i < n; i++) *(float *)(dst + i * stride) = src[i];
    }
}

/* ---- quantize: clamp(round(x / scale) + zero_point) ------------------------------------------ */

#define QUANTIZE_LOOP(QUOTIENT, ZERO)                                               \
    for (ptrdiff_t i = 0; i < n; i++) {                                             \
        out[i] = dmlq_saturated_byte(QUOTIENT, lo, hi, ZERO);                       \
    }

/* scales: the scale (divide) or its reciprocal (multiply); vector when not NULL. */
static void quantize_core(const float *x, const float *scales, float scale, const float *zeros, float zero,
                          int multiply, uint8_t *out, ptrdiff_t n, float lo, float hi) {
    if (!scales && !multiply) {
        if (zeros) QUANTIZE_LOOP(x[i] / scale, zeros[i]) else QUANTIZE_LOOP(x[i] / scale, zero)
    } else if (!scales) {
        if (zeros) QUANTIZE_LOOP(x[i] * scale, zeros[i]) else QUANTIZE_LOOP(x[i] * scale, zero)
    } else if (!multiply) {
        if (zeros) QUANTIZE_LOOP(x[i] / scales[i], zeros[i]) else QUANTIZE_LOOP(x[i] / scales[i], zero)
    } else {
        if (zeros) QUANTIZE_LOOP(x[i] * scales[i], zeros[i]) else QUANTIZE_LOOP(x[i] * scales[i], zero)
    }
}

static void quantize_row(char *const *p, const ptrdiff_t *s, ptrdiff_t n_all, const void *params, int stream) {
    const dmlq_quantize_params *P = params;
#ifdef FAST_QUANTIZE
    if (FAST_QUANTIZE(p, s, n_all, P, stream)) return;
#endif
    float x_tile[TILE], scale_tile[TILE], zero_tile[TILE];
    uint8_t byte_tile[TILE], out_tile[TILE];
    const int scale_varies = s[1] != 0, zero_varies = P->has_zero_point && s[2] != 0;
    float scale = scale_varies ? 0.0f : scalar_float(p[1], P->scale_type);
    if (P->reciprocal) scale = 1.0f / scale;
    const float zero = P->has_zero_point && !zero_varies ? dmlq_byte_value(p[2], P->out_signed) : 0.0f;
    const float lo = P->lo, hi = P->hi;
    for (ptrdiff_t done = 0; done < n_all; done += TILE) {
        const ptrdiff_t n = n_all - done < TILE ? n_all - done : TILE;
        const float *x = as_floats(x_tile, p[0] + done * s[0], s[0], P->x_type, n);
        const float *scales = NULL, *zeros = NULL;
        if (scale_varies) {
            scales = as_floats(scale_tile, p[1] + done * s[1], s[1], P->scale_type, n);
            if (P->reciprocal) {
                for (ptrdiff_t i = 0; i < n; i++) scale_tile[i] = 1.0f / scales[i];
                scales = scale_tile;
            }
        }
        if (zero_varies) {
            bytes_to_floats(zero_tile, as_bytes(byte_tile, p[2] + done * s[2], s[2], n), P->out_signed, n);
            zeros = zero_tile;
        }
        uint8_t *out = s[3] == 1 ? (uint8_t *)p[3] + done : out_tile;
        quantize_core(x, scales, scale, zeros, zero, P->reciprocal, out, n, lo, hi);
        if (out == out_tile) scatter_bytes(p[3] + done * s[3], s[3], out_tile, n);
    }
}

/* ---- dequantize: float32(q - zero_point) * scale ---------------------------------------------- */

/* Exact differences (int64 for 32-bit types), each converted to float32 once. */
#define CENTRE_LOOP(T, WIDE)                                                                  \
    do {                                                                                      \
        if (qs == (ptrdiff_t)sizeof(T) && !zero_varies) {                                     \
            const T *qv = (const T *)q;                                                       \
            const WIDE z = has_zero ? (WIDE) * (const T *)zp : 0;                             \
            for (ptrdiff_t i = 0; i < n; i++) dst[i] = (float)((WIDE)qv[i] - z);              \
        } else if (qs == (ptrdiff_t)sizeof(T) && zs == (ptrdiff_t)sizeof(T)) {                \
            const T *qv = (const T *)q, *zv = (const T *)zp;                                  \
            for (ptrdiff_t i = 0; i < n; i++) dst[i] = (float)((WIDE)qv[i] - (WIDE)zv[i]);    \
        } else {                                                                              \
            for (ptrdiff_t i = 0; i < n; i++) {                                               \
                WIDE v = (WIDE) * (const T *)(q + i * qs);                                    \
                if (has_zero) v -= (WIDE) * (const T *)(zp + i * zs);                         \
                dst[i] = (float)v;                                                            \
            }                                                                                 \
        }                                                                                     \
    } while (0)

static void centred(float *dst, const char *q, ptrdiff_t qs, int type, const char *zp, ptrdiff_t zs,
                    int has_zero, ptrdiff_t n) {
    const int zero_varies = has_zero && zs != 0;
    switch (type) {
    case DMLQ_U8: CENTRE_LOOP(uint8_t, int32_t); break;
    case DMLQ_I8: CENTRE_LOOP(int8_t, int32_t); break;
    case DMLQ_U16: CENTRE_LOOP(uint16_t, int32_t); break;
    case DMLQ_I16: CENTRE_LOOP(int16_t, int32_t); break;
    case DMLQ_U32: CENTRE_LOOP(uint32_t, int64_t); break;
    default: CENTRE_LOOP(int32_t, int64_t); break;
    }
}

static void dequantize_row(char *const *p, const ptrdiff_t *s, ptrdiff_t n_all, const void *params, int stream) {
    const dmlq_dequantize_params *P = params;
#ifdef FAST_DEQUANTIZE
    if (FAST_DEQUANTIZE(p, s, n_all, P, stream)) return;
#endif
    float value_tile[TILE], scale_tile[TILE];
    const int scale_varies = s[1] != 0;
    const float scale = scale_varies ? 0.0f : scalar_float(p[1], P->scale_type);
    const int direct = P->out_type == DMLQ_F32 && s[3] == 4;
    for (ptrdiff_t done = 0; done < n_all; done += TILE) {
        const ptrdiff_t n = n_all - done < TILE ? n_all - done : TILE;
        float *values = direct ? (float *)(p[3] + done * 4) : value_tile;
        const char *zp = P->has_zero_point ? p[2] + done * s[2] : NULL;
        centred(values, p[0] + done * s[0], s[0], P->q_type, zp, P->has_zero_point ? s[2] : 0,
                P->has_zero_point, n);
        if (scale_varies) {
            const float *scales = as_floats(scale_tile, p[1] + done * s[1], s[1], P->scale_type, n);
            for (ptrdiff_t i = 0; i < n; i++) values[i] = values[i] * scales[i];
        } else {
            for (ptrdiff_t i = 0; i < n; i++) values[i] = values[i] * scale;
        }
        if (!direct) store_floats(p[3] + done * s[3], s[3], P->out_type, values, n);
    }
}

/* ---- quantized add: clamp(round(((a - azp) * as + (b - bzp) * bs) / os) + ozp) ------------------ */

#define QADD_LOOP(TA, TB, OPERATION)                                                          \
    for (ptrdiff_t i = 0; i < n; i++) {                                                       \
        float av = (float)((int32_t)((const TA *)a)[i] - azp) * as;                           \
        float bv = (float)((int32_t)((const TB *)b)[i] - bzp) * bs;                           \
        out[i] = dmlq_saturated_byte((av + bv) OPERATION os, lo, hi, ozp);                    \
    }

#define QADD_TYPES(OPERATION)                                                                 \
    do {                                                                                      \
        if (P->a_signed && P->b_signed) QADD_LOOP(int8_t, int8_t, OPERATION)                  \
        else if (P->a_signed) QADD_LOOP(int8_t, uint8_t, OPERATION)                           \
        else if (P->b_signed) QADD_LOOP(uint8_t, int8_t, OPERATION)                           \
        else QADD_LOOP(uint8_t, uint8_t, OPERATION)                                           \
    } while (0)

static void qadd_core(const uint8_t *a, const uint8_t *b, uint8_t *out, ptrdiff_t n, const dmlq_qadd_params *P) {
    const int32_t azp = P->a_zero_point, bzp = P->b_zero_point;
    const float as = P->a_scale, bs = P->b_scale, ozp = P->out_zero_point, lo = P->lo, hi = P->hi;
    if (P->reciprocal) {
        const float os = 1.0f / P->out_scale;
        QADD_TYPES(*);
    } else {
        const float os = P->out_scale;
        QADD_TYPES(/);
    }
}

static void qadd_row(char *const *p, const ptrdiff_t *s, ptrdiff_t n_all, const void *params, int stream) {
#ifdef FAST_QADD
    if (FAST_QADD(p, s, n_all, params, stream)) return;
#endif
    uint8_t a_tile[TILE], b_tile[TILE], out_tile[TILE];
    for (ptrdiff_t done = 0; done < n_all; done += TILE) {
        const ptrdiff_t n = n_all - done < TILE ? n_all - done : TILE;
        const uint8_t *a = as_bytes(a_tile, p[0] + done * s[0], s[0], n);
        const uint8_t *b = as_bytes(b_tile, p[1] + done * s[1], s[1], n);
        uint8_t *out = s[2] == 1 ? (uint8_t *)p[2] + done : out_tile;
        qadd_core(a, b, out, n, params);
        if (out == out_tile) scatter_bytes(p[2] + done * s[2], s[2], out_tile, n);
    }
}

/* ---- add with a fused activation ------------------------------------------------------------- */

/* The activation's float64 formula on float32 values, rounded back to float32, in place. Where
 * float32 arithmetic provably gives the same bits (comparisons; one product of two float32 values,
 * exact in float64) it is used directly. */
static void activate(float *v, ptrdiff_t n, const dmlq_add_params *P) {
    const double a = P->p[0], b = P->p[1];
    const float af = (float)a;
    switch (P->activation) {
    case DMLQ_ACT_NONE:
    case DMLQ_ACT_IDENTITY: return;
    case DMLQ_ACT_RELU:
        for (ptrdiff_t i = 0; i < n; i++) v[i] = v[i] < 0.0f ? 0.0f : v[i];
        return;
    case DMLQ_ACT_LEAKY_RELU:
        for (ptrdiff_t i = 0; i < n; i++) v[i] = v[i] >= 0.0f ? v[i] : af * v[i];
        return;
    case DMLQ_ACT_THRESHOLDED_RELU:
        for (ptrdiff_t i = 0; i < n; i++) v[i] = v[i] > af ? v[i] : (v[i] != v[i] ? v[i] : 0.0f);
        return;
    case DMLQ_ACT_LINEAR:
        for (ptrdiff_t i = 0; i < n; i++) v[i] = (float)(a * (double)v[i] + b);
        return;
    case DMLQ_ACT_HARD_SIGMOID:
        for (ptrdiff_t i = 0; i < n; i++) {
            v[i] = (float)dmlq_at_least_zero(dmlq_at_most(a * (double)v[i] + b, 1.0));
        }
        return;
    case DMLQ_ACT_SOFTSIGN:
        for (ptrdiff_t i = 0; i < n; i++) {
            double x = v[i];
            v[i] = (float)(x / (1.0 + fabs(x)));
        }
        return;
    case DMLQ_ACT_SHRINK:
        for (ptrdiff_t i = 0; i < n; i++) {
            double x = v[i]; /* a = bias, b = threshold */
            v[i] = (float)(x > b ? x - a : (x < -b ? x + a : (x != x ? x : 0.0)));
        }
        return;
    default:
        for (ptrdiff_t i = 0; i < n; i++) v[i] = (float)dmlq_activation_libm(v[i], P->activation, P->p);
        return;
    }
}

#define INTEGER_ADD(T)                                                                        \
    for (ptrdiff_t i = 0; i < n; i++)                                                         \
        *(T *)(p[2] + i * s[2]) = (T)(*(const T *)(p[0] + i * s[0]) + *(const T *)(p[1] + i * s[1]))

/* Integers wrap around in two's complement: unsigned arithmetic of the same width. */
static void integer_add_row(char *const *p, const ptrdiff_t *s, ptrdiff_t n, int type) {
    switch (type) {
    case DMLQ_I8: case DMLQ_U8: INTEGER_ADD(uint8_t); break;
    case DMLQ_I16: case DMLQ_U16: INTEGER_ADD(uint16_t); break;
    case DMLQ_I32: case DMLQ_U32: INTEGER_ADD(uint32_t); break;
    default: INTEGER_ADD(uint64_t); break;
    }
}

static void add_row(char *const *p, const ptrdiff_t *s, ptrdiff_t n_all, const void *params, int stream) {
    const dmlq_add_params *P = params;
#ifdef FAST_ADD
    if (FAST_ADD(p, s, n_all, P, stream)) return;
#endif
    if (P->type != DMLQ_F32 && P->type != DMLQ_F16) {
        integer_add_row(p, s, n_all, P->type);
        return;
    }
    float a_tile[TILE], b_tile[TILE], sum_tile[TILE];
    const int direct = P->type == DMLQ_F32 && s[2] == 4;
    for (ptrdiff_t done = 0; done < n_all; done += TILE) {
        const ptrdiff_t n = n_all - done < TILE ? n_all - done : TILE;
        const float *a = as_floats(a_tile, p[0] + done * s[0], s[0], P->type, n);
        const float *b = as_floats(b_tile, p[1] + done * s[1], s[1], P->type, n);
        /* In place, out is exactly a or b: each element is read before it is written. */
        float *sum = direct ? (float *)(p[2] + done * 4) : sum_tile;
        /* Two NaNs give a's, whichever order the compiler adds in (dmlq.reference.add): a NaN a is
         * added to itself. Both operands loaded, then one selected (not a sum: the compiler would not
         * speculate it), so that the loop vectorises. */
        for (ptrdiff_t i = 0; i < n; i++) {
            const float x = a[i], y = b[i];
            const float addend = x != x ? x : y;
            sum[i] = x + addend;
        }
        activate(sum, n, P);
        if (!direct) store_floats(p[2] + done * s[2], s[2], P->type, sum, n);
    }
}

#ifdef FAST_QADD_CORRECTS
/* FAST_QADD's division-free route over contiguous bytes; 0 where FAST_QADD would not take these
 * parameters. */
static int corrected_qadd(const uint8_t *a, const uint8_t *b, uint8_t *out, ptrdiff_t n, const dmlq_qadd_params *P) {
    char *const p[3] = {(char *)a, (char *)b, (char *)out};
    const ptrdiff_t strides[3] = {1, 1, 1};
    dmlq_qadd_params corrected = *P;
    corrected.corrected = 1;
    return !P->reciprocal && FAST_QADD(p, strides, n, &corrected, 0);
}

/* Whether the division-free route gives qadd_core's bytes for every (a, b) pair, and so for every
 * input: an output depends on its pair alone. */
static int corrected_qadd_exact(const dmlq_qadd_params *P) {
    enum { PAIRS = 1 << 16 };
    uint8_t *memory = malloc(4 * PAIRS);
    if (!memory) return 0;
    uint8_t *a = memory, *b = a + PAIRS, *divided = b + PAIRS, *corrected = divided + PAIRS;
    for (ptrdiff_t i = 0; i < PAIRS; i++) {
        a[i] = (uint8_t)(i >> 8);
        b[i] = (uint8_t)i;
    }
    qadd_core(a, b, divided, PAIRS, P);
    const int exact = corrected_qadd(a, b, corrected, PAIRS, P) && memcmp(divided, corrected, PAIRS) == 0;
    free(memory);
    return exact;
}
#define CORRECTED_QADD_EXACT corrected_qadd_exact
#else
#define CORRECTED_QADD_EXACT NULL
#endif

const dmlq_row_table ROW_TABLE = {quantize_row, dequantize_row, qadd_row, add_row, CORRECTED_QADD_EXACT};
