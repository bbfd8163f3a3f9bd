/* Shared definitions of dmlq's compiled core: data types, operator parameters, CPU levels, threads.
 *
 * Every kernel must give the NumPy reference's bits (dmlq.reference): the build disables FMA
 * contraction and fast-math, and the code below spells out each IEEE operation in the
 * reference's order.
 */
#ifndef DMLQ_COMMON_H
#define DMLQ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* No contraction of a * b + c into one fused multiply-add: the reference rounds the product.
 * GCC ignores both pragmas and defines no macro that tells; setup.py passes -ffp-contract=off. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(_MSC_VER)
#pragma fp_contract(off)
#endif

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define DMLQ_X86 1
#include <immintrin.h>
#else
#define DMLQ_X86 0
#endif

#define DMLQ_STRINGIFY(x) #x
#if defined(__clang__)
#define DMLQ_BEGIN_TARGET(features) \
    _Pragma(DMLQ_STRINGIFY(clang attribute push(__attribute__((target(features))), apply_to = function)))
#define DMLQ_END_TARGET _Pragma("clang attribute pop")
#else
#define DMLQ_BEGIN_TARGET(features) _Pragma("GCC push_options") _Pragma(DMLQ_STRINGIFY(GCC target(features)))
#define DMLQ_END_TARGET _Pragma("GCC pop_options")
#endif

#define DMLQ_AVX2_FEATURES "avx2,f16c"
#define DMLQ_AVX512_FEATURES "avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c"
#define DMLQ_VNNI_FEATURES DMLQ_AVX512_FEATURES ",avx512vnni"
#define DMLQ_AMX_FEATURES DMLQ_VNNI_FEATURES ",amx-tile,amx-int8"

#define DMLQ_MAX_DIMS 8

/* Element types, independent of NumPy's numbering. */
typedef enum {
    DMLQ_F32, DMLQ_F16, DMLQ_F64,
    DMLQ_I8, DMLQ_U8, DMLQ_I16, DMLQ_U16, DMLQ_I32, DMLQ_U32, DMLQ_I64, DMLQ_U64
} dmlq_type;

/* CPU levels, in increasing order; each includes the ones below. */
enum { DMLQ_PORTABLE = 0, DMLQ_LEVEL_AVX2 = 1, DMLQ_LEVEL_AVX512 = 2, DMLQ_LEVEL_VNNI = 3, DMLQ_LEVEL_AMX = 4 };

int dmlq_detected_level(void);
int dmlq_gemm_amx_compiled(void);       /* whether the compiler built the AMX kernel */
int dmlq_level(void);                    /* the level in use (detected, or lowered for tests) */
int dmlq_set_level(int level);           /* 0 on success, -1 if above the detected level */

/* Threads: work is split so that each output element is computed by exactly one thread with the
 * same arithmetic, so results do not depend on the thread count. */
typedef void (*dmlq_task)(void *context, int thread, int threads);
void dmlq_threads_init(void);
int dmlq_num_threads(void);
void dmlq_set_num_threads(int threads);
void dmlq_parallel(dmlq_task task, void *context, int threads);
void dmlq_barrier(int threads); /* all `threads` threads of the running task meet here */
/* The next unit of work: atomically returns *counter and increments it. Threads claim units
 * dynamically, so a thread the OS descheduled delays only the unit it holds. */
ptrdiff_t dmlq_claim(ptrdiff_t *counter);

/* 64-byte aligned memory on every platform (huge-page aligned for large blocks on Linux; gemm.c);
 * freed by dmlq_release only. */
void *dmlq_allocate(size_t bytes);
void dmlq_release(void *memory);
/* A flag that one thread at a time holds: 1 when this call took it (it was 0), 0 when it is held. */
int dmlq_take_flag(long *flag);
void dmlq_give_flag(long *flag);

/* ---- element-wise operators ---------------------------------------------------------------- */

/* One row of an element-wise operator: operand pointers and byte strides along the row; `stream`
 * says the whole output is large enough for stores that bypass the caches. */
typedef void (*dmlq_row_fn)(char *const *pointers, const ptrdiff_t *strides, ptrdiff_t count,
                            const void *params, int stream);

typedef struct {
    int x_type, scale_type;
    int has_zero_point;      /* the zero point's type is the output's (uint8 or int8) */
    int out_signed;
    int reciprocal;          /* x * (1 / scale) instead of x / scale */
    float lo, hi;
} dmlq_quantize_params;      /* operands: x, scale, zero point, out */

typedef struct {
    int q_type, scale_type, out_type;
    int has_zero_point;
} dmlq_dequantize_params;    /* operands: q, scale, zero point, out */

typedef struct {
    int a_signed, b_signed, out_signed;
    int32_t a_zero_point, b_zero_point;
    float a_scale, b_scale, out_scale, out_zero_point;
    int reciprocal;
    float lo, hi;
    int corrected;           /* the division-free quotient, verified for these parameters (dmlq_qadd_corrected) */
} dmlq_qadd_params;          /* operands: a, b, out */

enum {
    DMLQ_ACT_NONE = 0, DMLQ_ACT_IDENTITY = 38, DMLQ_ACT_RELU = 44, DMLQ_ACT_LEAKY_RELU = 39,
    DMLQ_ACT_THRESHOLDED_RELU = 52, DMLQ_ACT_ELU = 35, DMLQ_ACT_CELU = 128, DMLQ_ACT_SCALED_ELU = 45,
    DMLQ_ACT_SIGMOID = 47, DMLQ_ACT_HARD_SIGMOID = 37, DMLQ_ACT_TANH = 51, DMLQ_ACT_SCALED_TANH = 46,
    DMLQ_ACT_LINEAR = 40, DMLQ_ACT_SOFTPLUS = 49, DMLQ_ACT_PARAMETRIC_SOFTPLUS = 43,
    DMLQ_ACT_SOFTSIGN = 50, DMLQ_ACT_SHRINK = 90, DMLQ_ACT_GELU = 157
};

typedef struct {
    int type;                /* DMLQ_F32, DMLQ_F16, or an integer type (wrapping add) */
    int activation;          /* DMLQ_ACT_* (DirectML's operator type values) */
    double p[2];             /* the activation's float32 parameters, widened */
} dmlq_add_params;           /* operands: a, b, out */

typedef struct {
    dmlq_row_fn quantize, dequantize, quantized_add, add;
    /* Whether quantized_add with `corrected` set gives the division's outputs for every input under
     * these parameters (it checks all 65,536 (a, b) pairs); NULL where the level has no such route. */
    int (*corrected_qadd_exact)(const dmlq_qadd_params *params);
} dmlq_row_table;

static inline int dmlq_within(float x, float bound) { return x >= -bound && x <= bound; } /* NaN: 0 */

/* 1 / divisor when it is a normal float (the bound on a product by it that the SIMD kernels rely on),
 * else 0. */
static inline float dmlq_normal_inverse(float divisor) {
    const float inverse = 1.0f / divisor;
    return !dmlq_within(inverse, 0x1p-126f) && dmlq_within(inverse, 0x1.fffffep127f) ? inverse : 0.0f;
}

/* The float nearest 1 / divisor - (1.0f / divisor): with 1.0f / divisor, 1 / divisor to about 48 bits
 * (the double difference is exact: both terms are within a factor 2 of each other). */
static inline float dmlq_inverse_low(float divisor) {
    return (float)(1.0 / (double)divisor - (double)(1.0f / divisor));
}

/* Whether a quantized add's parameters suit the SIMD kernels: scales within 1e30 keep both products
 * and their sum finite, and a normal 1 / output scale keeps the quotient (or the product by
 * 1 / output scale) from being NaN; the output zero point within 2**15 - 256 lets the kernels add it
 * to int16 values with saturation and still clamp as int32 would. */
static inline int dmlq_qadd_simd_parameters(const dmlq_qadd_params *P) {
    return dmlq_within(P->a_scale, 1e30f) && dmlq_within(P->b_scale, 1e30f) &&
           dmlq_normal_inverse(P->out_scale) != 0.0f && dmlq_within(P->out_zero_point, 32512.0f);
}

/* Whether the quantized add may take the level's verified division-free route for these parameters
 * (never with reciprocal_division, which divides by nothing). `rows` is the current level's table.
 * Verdicts are cached per parameter set and level (dmlq_level(), not the table: levels that share a
 * table verify apart); calls of fewer than 65,536 elements use a cached verdict but never verify.
 * Call with the GIL held: it guards the cache. */
int dmlq_qadd_corrected(const dmlq_row_table *rows, const dmlq_qadd_params *params, ptrdiff_t elements);
void dmlq_qadd_forget_verdicts(void); /* for tests: every parameter set verifies again */

extern const dmlq_row_table dmlq_rows_portable;
#if DMLQ_X86
extern const dmlq_row_table dmlq_rows_avx2;
extern const dmlq_row_table dmlq_rows_avx512;
#endif

/* The activations' float64 formulas that call libm, as dmlq.activations writes them. */
double dmlq_activation_libm(double x, int activation, const double *p);

/* An element-wise loop: operands (the output last) of one shape, with byte strides. */
typedef struct {
    int operands, ndim;
    ptrdiff_t output_size; /* bytes per output element */
    ptrdiff_t shape[DMLQ_MAX_DIMS];
    ptrdiff_t strides[6][DMLQ_MAX_DIMS];
    char *data[6];
} dmlq_loop;

void dmlq_run_elementwise(dmlq_loop *loop, dmlq_row_fn row, const void *params, int threads);

/* ---- quantized matrix multiply --------------------------------------------------------------- */

typedef struct {
    ptrdiff_t batches, m, n, k;
    const char *a, *b;
    char *out;
    const ptrdiff_t *a_offsets, *b_offsets, *out_offsets;   /* byte offsets of each batch */
    ptrdiff_t a_row, a_col, b_row, b_col, out_row, out_col; /* byte strides */
    int a_signed, b_signed, out_signed;
    const float *a_scale, *b_scale, *out_scale;             /* [m], [n], [m] */
    const int32_t *a_zero_point, *b_zero_point;             /* [m], [n] */
    const float *out_zero_point;                            /* [m] */
    int b_per_tensor;                                       /* b_scale and b_zero_point: [1], for every column */
    int reciprocal;
    /* B packed beforehand (dmlq_gemm_pack_b), or NULL: B is packed here. When set, `b` is unused
     * and b_offsets holds each batch's index among the packed batches. */
    const struct dmlq_packed_b *packed_b;
    /* NULL: the requantized bytes; else another output (int32, float, a row bias: family.h). */
    const struct dmlq_gemm_epilogue *epilogue;
} dmlq_gemm_problem;

/* 0 on success, -1 when memory runs out. */
int dmlq_gemm(const dmlq_gemm_problem *problem, int threads);

/* B packed once, for the kernel set of the level in use when it was packed: each batch's panels
 * and column sums, as dmlq_gemm would pack them itself. */
typedef struct dmlq_packed_b {
    const void *kernels; /* the kernel set */
    ptrdiff_t batches, k, n;
    ptrdiff_t n_panels, panel_bytes, sums_per_batch;
    int b_signed;
    int8_t *panels;       /* batch after batch, n_panels panels each */
    int32_t *column_sums; /* batch after batch, sums_per_batch each */
    struct dmlq_column_cache *column_cache; /* the quantization's column side of its last multiply (gemm.c) */
} dmlq_packed_b;

/* Packs `batches` matrices of k x n bytes (batch i at b + offsets[i], byte strides b_row, b_col)
 * for the current level's kernel set: 0, or -1 when memory runs out. */
int dmlq_gemm_pack_b(dmlq_packed_b *packed, const char *b, const ptrdiff_t *offsets, ptrdiff_t batches, ptrdiff_t k,
                     ptrdiff_t n, ptrdiff_t b_row, ptrdiff_t b_col, int b_signed, int threads);
void dmlq_gemm_free_packed_b(dmlq_packed_b *packed);
/* The bytes B was packed from, batch after batch of k x n row-major bytes, into b. */
void dmlq_gemm_unpack_b(const dmlq_packed_b *packed, char *b);
/* The name of the current level's kernel set, and whether `packed` was packed for it. */
const char *dmlq_gemm_kernel_set(void);
int dmlq_gemm_packed_for_current_level(const dmlq_packed_b *packed);

/* max(0, x) and min(x, limit) as dmlq.activations writes them: NaN and a zero of either sign pass
 * through unchanged (not NumPy's maximum, whose zero sign differs between x86-64 and ARM64). */
static inline double dmlq_at_least_zero(double x) { return x < 0.0 ? 0.0 : x; }
static inline double dmlq_at_most(double x, double limit) { return x > limit ? limit : x; }

/* The low byte of round(c), halves to even in the current rounding mode (nearest even unless the
 * caller changed it, as for the reference's rint), for |c| < 2**22: c + 1.5 * 2**23 lies in
 * [2**23, 2**24), where floats are the integers, so the sum rounds c as the FPU rounds and holds
 * 2**22 + round(c) in its mantissa bits. Unlike nearbyintf (a libm call on x86-64 before SSE4.1) and
 * float-to-int8 conversions, this vectorises everywhere. */
static inline uint8_t dmlq_rounded_low_byte(float c) {
    const float shifted = c + 0x1.8p23f;
    uint32_t bits;
    memcpy(&bits, &shifted, sizeof bits);
    return (uint8_t)bits;
}

/* The output byte of clamp(round(q) + z, lo, hi), NaN -> 0 (uint8 and int8 share the bits; lo, hi and z
 * integers, z within [lo, hi]), with q saturated to [lo - z, hi - z] before it is rounded: the same for
 * integer bounds (rounding is monotonic and keeps integers), and the rounding then sees |q| <= 255, as
 * dmlq_rounded_low_byte needs. One select per statement, none of a computed value, so that compilers
 * vectorise a loop of these without speculating arithmetic. */
static inline uint8_t dmlq_saturated_byte(float q, float lo, float hi, float zero) {
    const float low = lo - zero, high = hi - zero;
    float c = q < low ? low : q; /* NaN kept */
    c = c > high ? high : c;
    c = c == c ? c : -zero; /* NaN: 0 once z is added */
    return (uint8_t)(dmlq_rounded_low_byte(c) + (uint8_t)(int32_t)zero);
}

/* A uint8 or int8 value as float32. */
static inline float dmlq_byte_value(const char *p, int is_signed) {
    return is_signed ? (float)*(const int8_t *)p : (float)*(const uint8_t *)p;
}

/* ---- float16 <-> float32, exact, round to nearest even ---------------------------------------- */

static inline float dmlq_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    uint32_t bits;
    if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int shift = 0;
        while (!(mantissa & 0x400u)) {
            mantissa <<= 1;
            shift++;
        }
        bits = sign | ((uint32_t)(113 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* NumPy's npy_floatbits_to_halfbits: NaN keeps its sign and top payload bits. */
static inline uint16_t dmlq_float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t exponent = x & 0x7f800000u, mantissa = x & 0x007fffffu;
    if (exponent >= 0x47800000u) { /* overflow, inf or NaN */
        if (exponent == 0x7f800000u && mantissa) {
            uint16_t nan = (uint16_t)(0x7c00u + (mantissa >> 13));
            return (uint16_t)(sign | (nan == 0x7c00u ? 0x7c01u : nan));
        }
        return (uint16_t)(sign | 0x7c00u);
    }
    if (exponent <= 0x38000000u) { /* subnormal or zero half */
        if (exponent < 0x33000000u) return sign;
        uint32_t e = exponent >> 23;
        mantissa |= 0x00800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t half = mantissa >> shift;
        uint32_t rest = mantissa & ((1u << shift) - 1u), midpoint = 1u << (shift - 1u);
        if (rest > midpoint || (rest == midpoint && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((exponent - 0x38000000u) >> 13) | (mantissa >> 13);
    uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half++; /* may carry into inf: correct */
    return (uint16_t)(sign | half);
}

#endif
