/* The element-wise rows in portable C (any CPU). */
#include "common.h"

static void halves_to_floats(float *dst, const uint16_t *src, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) dst[i] = dmlq_half_to_float(src[i]);
}

static void floats_to_halves(uint16_t *dst, const float *src, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) dst[i] = dmlq_float_to_half(src[i]);
}

#define ROW_TABLE dmlq_rows_portable
#include "rows.h"
