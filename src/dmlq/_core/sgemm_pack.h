/* The float GEMM's packing through register transposes (sgemm.h), compiled once per instruction set:
 * sgemm_avx2.c and sgemm_avx512.c include this file inside their target region, having defined MR, NR,
 * PREFETCH_BYTES and LANES (floats per vector, at least MR), the vector type VECTOR, and
 *   ZERO()                  a vector of zeros;
 *   LOAD_LANES(p, type)     LANES floats of a float32 or float16 row (widened exactly);
 *   STORE(p, v)             LANES floats stored;
 *   TRANSPOSE(r)            r[i] holds row i of a LANES x LANES block; afterwards r[j] holds column j;
 * and pack_b_halves, a float16 op(B) with contiguous columns widened into a panel.
 */

/* A row-major A: LANES k of each row at a time, transposed (rows beyond `rows` zero); each k's
 * LANES floats are stored whole, the next k's store putting its own first ones back, and the k left
 * after the last whole block (one at least) are copied one by one, so nothing is written beyond the
 * panel. */
static void pack_a_transposing(float *dst, const char *a, int rows, ptrdiff_t k, ptrdiff_t a_row, ptrdiff_t a_col, int type) {
    const ptrdiff_t size = type == DMLQ_F16 ? 2 : 4;
    if (a_col != size) {
        dmlq_sgemm_pack_a_portable(dst, a, rows, k, a_row, a_col, type, MR);
        return;
    }
    ptrdiff_t p = 0;
    for (; p + LANES < k; p += LANES) {
        VECTOR r[LANES];
        for (int j = 0; j < LANES; j++) r[j] = j < rows ? LOAD_LANES(a + j * a_row + p * size, type) : ZERO();
        TRANSPOSE(r);
        for (int i = 0; i < LANES; i++) STORE(dst + (p + i) * MR, r[i]);
    }
    dmlq_sgemm_pack_a_portable(dst + p * MR, a + p * size, rows, k - p, a_row, size, type, MR);
}

/* op(B) with contiguous k (a TransB B): LANES columns x LANES k at a time, read as rows and transposed;
 * each LANES columns' rows are read along the whole k first (LANES streams, prefetched into L2 ahead). */
static void pack_b_transposed(float *dst, ptrdiff_t ldd, const char *b, int columns, ptrdiff_t k, ptrdiff_t b_col,
                              int type) {
    const ptrdiff_t size = type == DMLQ_F16 ? 2 : 4, whole = k / LANES * LANES;
    for (int part = 0; part < NR; part += LANES) {
        const int rows = columns - part < LANES ? columns - part : LANES;
        for (ptrdiff_t p = 0; p < whole; p += LANES) {
            VECTOR r[LANES];
            for (int j = 0; j < LANES; j++) {
                const char *row = b + (part + j) * b_col + p * size;
                if (j < rows) _mm_prefetch(row + PREFETCH_BYTES, _MM_HINT_T1);
                r[j] = j < rows ? LOAD_LANES(row, type) : ZERO();
            }
            if (rows > 0) TRANSPOSE(r);
            for (int i = 0; i < LANES; i++) STORE(dst + (p + i) * ldd + part, r[i]);
        }
    }
    if (whole < k)
        dmlq_sgemm_pack_b_portable(dst + whole * ldd, ldd, b + whole * size, columns, k - whole, size, b_col, type, NR);
}

static void pack_b_transposing(float *dst, ptrdiff_t ldd, const char *b, int columns, ptrdiff_t k, ptrdiff_t b_row,
                   ptrdiff_t b_col, int type) {
    if (b_row == (type == DMLQ_F16 ? 2 : 4))
        pack_b_transposed(dst, ldd, b, columns, k, b_col, type);
    else if (type == DMLQ_F16 && b_col == 2)
        pack_b_halves(dst, ldd, b, columns, k, b_row);
    else
        dmlq_sgemm_pack_b_portable(dst, ldd, b, columns, k, b_row, b_col, type, NR);
}
