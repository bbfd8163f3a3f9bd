/* The portable element-wise rows (rows_portable.c) against their formulas written out per element,
 * as a program of its own: tools/check_builds.sh builds it for ARM64 and runs it under
 * qemu-aarch64, where no Python of that architecture is at hand. ARM64 runs the portable level, and
 * its compilers vectorise these loops differently from x86-64's.
 *
 *   cc -std=gnu11 -O3 -ffp-contract=off -Isrc/dmlq/_core tools/portable_rows_check.c \
 *      src/dmlq/_core/rows_portable.c src/dmlq/_core/activations.c -lm && ./a.out
 *
 * Quantize: 2**26 float32 bit patterns spread over all of them and values within a few ulps of
 * (k + 0.5) * scale, under per-tensor and per-element zero points, dividing and multiplying.
 * Quantized add: every (a, b) pair under random parameter sets of every signedness. Float add: NaN
 * operands keep a's payload. Prints the mismatches; exit status 1 if there are any.
 */
#include <math.h>
#include <stdio.h>

#include "common.h"

extern const dmlq_row_table dmlq_rows_portable;

enum { CHUNK = 1 << 16 };

static uint32_t random_state = 12345u;

static uint32_t next_random(void) { /* xorshift32 */
    random_state ^= random_state << 13;
    random_state ^= random_state >> 17;
    random_state ^= random_state << 5;
    return random_state;
}

static float float_of(uint32_t bits) {
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

static uint32_t bits_of(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits;
}

/* clamp(r, lo, hi) as a byte, NaN -> 0: the reference's saturation. */
static uint8_t saturated_byte(float r, float lo, float hi) {
    if (r != r) return 0;
    const float c = r < lo ? lo : (r > hi ? hi : r);
    return (uint8_t)(int32_t)c;
}

static long mismatches;

static void report(const char *what, ptrdiff_t i, double input, unsigned got, unsigned expected) {
    if (mismatches++ < 10) printf("%s: element %td (%.9g): got %u, expected %u\n", what, i, input, got, expected);
}

/* ---- quantize: clamp(round(x / scale) + zero_point) ------------------------------------------ */

typedef struct {
    float scale;
    int out_signed, reciprocal, zero_per_element;
} quantize_case;

static void check_quantize(const float *x, const quantize_case *q) {
    uint8_t zeros[CHUNK], out[CHUNK];
    for (ptrdiff_t i = 0; i < CHUNK; i++) zeros[i] = (uint8_t)next_random();
    const float lo = q->out_signed ? -128.0f : 0.0f, hi = q->out_signed ? 127.0f : 255.0f;
    const dmlq_quantize_params params = {DMLQ_F32, DMLQ_F32, 1, q->out_signed, q->reciprocal, lo, hi};
    char *const pointers[4] = {(char *)x, (char *)&q->scale, (char *)zeros, (char *)out};
    const ptrdiff_t strides[4] = {4, 0, q->zero_per_element, 1};
    dmlq_rows_portable.quantize(pointers, strides, CHUNK, &params, 0);
    const float factor = 1.0f / q->scale;
    for (ptrdiff_t i = 0; i < CHUNK; i++) {
        const uint8_t zero_byte = zeros[q->zero_per_element ? i : 0];
        const float zero = q->out_signed ? (float)(int8_t)zero_byte : (float)zero_byte;
        const float quotient = q->reciprocal ? x[i] * factor : x[i] / q->scale;
        const uint8_t expected = saturated_byte(nearbyintf(quotient) + zero, lo, hi);
        if (out[i] != expected) report("quantize", i, x[i], out[i], expected);
    }
}

static void quantize_cases(void) {
    static const quantize_case cases[] = {
        {1.0f, 0, 0, 0}, {0.37f, 0, 0, 1}, {0.37f, 1, 1, 0}, {3e-3f, 1, 0, 1}, {-2.0f, 0, 0, 0}, {5e4f, 1, 1, 1},
    };
    static float x[CHUNK];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (uint64_t start = c; start < (1ull << 32); start += (uint64_t)CHUNK * 384) {
            for (ptrdiff_t i = 0; i < CHUNK; i++) x[i] = float_of((uint32_t)(start + (uint64_t)i * 384));
            check_quantize(x, &cases[c]);
        }
        for (int round = 0; round < 64; round++) {
            for (ptrdiff_t i = 0; i < CHUNK; i++) {
                const float tie = (float)(((int)(next_random() % 1200) - 600 + 0.5) * (double)cases[c].scale);
                x[i] = float_of(bits_of(tie) + (next_random() % 7) - 3);
            }
            check_quantize(x, &cases[c]);
        }
    }
}

/* ---- quantized add: clamp(round(((a - azp) * as + (b - bzp) * bs) / os) + ozp) ------------------ */

static float random_scale(void) {
    static const float scales[] = {0.02f, 0.03f, 0.045f, -0.5f, 3.0f, 1e-4f, 1e-30f, 7e4f, 0.1f, 1.0f / 3.0f};
    return scales[next_random() % 10] * (0.5f + (float)(next_random() % 1024) / 683.0f);
}

static int32_t zero_point(int is_signed) { return is_signed ? (int8_t)next_random() : (uint8_t)next_random(); }

static void check_quantized_add(int parameter_sets) {
    static uint8_t a[CHUNK], b[CHUNK], out[CHUNK];
    for (ptrdiff_t i = 0; i < CHUNK; i++) {
        a[i] = (uint8_t)(i >> 8);
        b[i] = (uint8_t)i;
    }
    for (int set = 0; set < parameter_sets; set++) {
        const int a_signed = set & 1, b_signed = (set >> 1) & 1, out_signed = (set >> 2) & 1;
        dmlq_qadd_params P = {a_signed, b_signed, out_signed, zero_point(a_signed), zero_point(b_signed),
                              random_scale(), random_scale(), random_scale(), (float)zero_point(out_signed),
                              set % 5 == 0, out_signed ? -128.0f : 0.0f, out_signed ? 127.0f : 255.0f, 0};
        char *const pointers[3] = {(char *)a, (char *)b, (char *)out};
        const ptrdiff_t strides[3] = {1, 1, 1};
        dmlq_rows_portable.quantized_add(pointers, strides, CHUNK, &P, 0);
        const float divisor = P.reciprocal ? 1.0f / P.out_scale : P.out_scale;
        for (ptrdiff_t i = 0; i < CHUNK; i++) {
            const int32_t av = a_signed ? (int8_t)a[i] : a[i], bv = b_signed ? (int8_t)b[i] : b[i];
            const float sum = (float)(av - P.a_zero_point) * P.a_scale + (float)(bv - P.b_zero_point) * P.b_scale;
            const float quotient = P.reciprocal ? sum * divisor : sum / divisor;
            const uint8_t expected = saturated_byte(nearbyintf(quotient) + P.out_zero_point, P.lo, P.hi);
            if (out[i] != expected) report("quantized add", i, sum, out[i], expected);
        }
    }
}

/* ---- float add: a NaN a gives a's NaN, a NaN b b's -------------------------------------------- */

static void check_add_nans(void) {
    static const uint32_t values[] = {0x7fc00001u, 0xffc12345u, 0x7f800000u, 0xff800000u, 0x3f800000u, 0x80000000u};
    enum { COUNT = sizeof values / sizeof values[0] };
    float a[COUNT * COUNT], b[COUNT * COUNT], sum[COUNT * COUNT];
    for (int i = 0; i < COUNT * COUNT; i++) {
        a[i] = float_of(values[i / COUNT]);
        b[i] = float_of(values[i % COUNT]);
    }
    const dmlq_add_params params = {DMLQ_F32, DMLQ_ACT_NONE, {0.0, 0.0}};
    char *const pointers[3] = {(char *)a, (char *)b, (char *)sum};
    const ptrdiff_t strides[3] = {4, 4, 4};
    dmlq_rows_portable.add(pointers, strides, COUNT * COUNT, &params, 0);
    for (int i = 0; i < COUNT * COUNT; i++) {
        const float expected = a[i] != a[i] ? a[i] + a[i] : a[i] + b[i];
        if (bits_of(sum[i]) != bits_of(expected)) report("add", i, a[i], bits_of(sum[i]), bits_of(expected));
    }
}

int main(void) {
    quantize_cases();
    check_quantized_add(2000);
    check_add_nans();
    printf("portable rows: %ld mismatches\n", mismatches);
    return mismatches != 0;
}
