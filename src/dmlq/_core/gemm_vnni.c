/* The matrix multiply's AVX-512 VNNI kernels: vpdpbusd dot products of 1-8 rows, a vectorised
 * requantization and the packing of B. (A few rows with a row-major B read in place: gemm_vnni_rows.c.) */
#include "gemm_kernels.h"
#include "narrow.h"

#if DMLQ_X86
DMLQ_BEGIN_TARGET(DMLQ_VNNI_FEATURES)

enum { VECTORS = GEMM_NR / 16 };

/* acc += dot products of 4 bytes: unsigned `a` times signed `b`. Inline assembly because GCC 12
 * copies the accumulator around the intrinsic, which halves the kernel's speed. */
static inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* dpbusd reading `b` itself: a matrix-vector product's one use of each vector of B. */
static inline __m512i dpbusd_from(__m512i acc, __m512i a, const int8_t *b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "m"(*(const __m512i *)b));
    return acc;
}

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Over a long K (PREFETCH_MIN_GROUPS groups or more, whose panels are streamed from L3 or memory),
 * two or more rows ask for B's bytes 96 groups (18 KiB) ahead: the hardware prefetchers alone leave
 * such a panel at two thirds of the read bandwidth (Zen 5, 1 thread, a 4096 x 11008 B from memory:
 * 1190 -> 660 us for 7 rows, 850 -> 765 for 2, 1295 -> 690 for 8; whole calls 8 x 4096 x 11008
 * 1219 -> 792 us, 8 x 4096 x 4096 297 -> 270, 128 x 4096 x 11008 11.7 -> 11.3 ms). One row loses
 * (dot_rows); panels of a shorter K are read again from L2 by the next tiles, where the prefetches
 * cost 1 % (128 x 1024 x 1024, batched [8,1,512,512]). */
enum { PREFETCH_BYTES = 96 * GEMM_NR * 4, PREFETCH_MIN_GROUPS = 512 };

static ALWAYS_INLINE void prefetch_b(const int8_t *b) {
    for (int j = 0; j < GEMM_NR * 4; j += 64) _mm_prefetch((const char *)b + PREFETCH_BYTES + j, _MM_HINT_T0);
}

/* `rows` x 16 `vectors` accumulators in registers, in `sets` sets that take turns by group (a row's chains
 * of dependent vpdpbusd are then `sets` times shorter: one or two rows would otherwise wait on the
 * instruction's latency, not on B's bytes); per group, `vectors` vectors of B' and `rows` broadcast
 * dwords of A'. One row's vpdpbusd reads B' itself: a load of its own for each vector left that row
 * below the read bandwidth with B streamed from memory (Zen 5, 1 x 4096 x 11008: 54-56 GB/s at 1
 * thread and 99-100 at 2, against 62-66 and 108-109; a bare loop of each kind 63 and 76 at 1 thread,
 * where reading alone did 72-76), and asking for B's bytes ahead as well lost again (48-55 at 1
 * thread). A tile of fewer real rows is computed for them alone: a matrix-vector product
 * does one vpdpbusd per 64 bytes of B, not MR; and a tile of fewer real columns (B's last panel)
 * for their vectors alone. */
static ALWAYS_INLINE void dot_rows(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int32_t *tile,
                                   const int rows, const int sets, const int vectors) {
    __m512i acc[4][GEMM_MR][VECTORS];
    for (int s = 0; s < sets; s++)
        for (int m = 0; m < rows; m++)
            for (int j = 0; j < vectors; j++) acc[s][m][j] = _mm512_setzero_si512();
    const int ahead = rows > 1 && groups >= PREFETCH_MIN_GROUPS;
    ptrdiff_t g = 0;
    for (; g + sets <= groups; g += sets)
        for (int s = 0; s < sets; s++, a += 4, b += GEMM_NR * 4) {
            if (ahead) prefetch_b(b);
            __m512i bv[VECTORS];
            if (rows > 1)
                for (int j = 0; j < vectors; j++) bv[j] = _mm512_load_si512((const void *)(b + 64 * j));
            for (int m = 0; m < rows; m++) {
                int32_t word;
                memcpy(&word, a + m * lda, 4);
                const __m512i av = _mm512_set1_epi32(word);
                for (int j = 0; j < vectors; j++)
                    acc[s][m][j] = rows == 1 ? dpbusd_from(acc[s][m][j], av, b + 64 * j) : dpbusd(acc[s][m][j], av, bv[j]);
            }
        }
    for (; g < groups; g++, a += 4, b += GEMM_NR * 4) /* the last groups, fewer than `sets` */
        for (int m = 0; m < rows; m++) {
            int32_t word;
            memcpy(&word, a + m * lda, 4);
            const __m512i av = _mm512_set1_epi32(word);
            for (int j = 0; j < vectors; j++)
                acc[0][m][j] = dpbusd(acc[0][m][j], av, _mm512_load_si512((const void *)(b + 64 * j)));
        }
    for (int m = 0; m < rows; m++)
        for (int j = 0; j < vectors; j++) {
            __m512i sum = acc[0][m][j];
            for (int s = 1; s < sets; s++) sum = _mm512_add_epi32(sum, acc[s][m][j]);
            _mm512_store_si512((void *)(tile + m * GEMM_NR + 16 * j), sum);
        }
}

/* dot_rows for a whole tile, its 24 accumulators named: as dot_rows' array GCC 12 copied them through
 * the stack before and after the loop, 7 % of a tile of K = 256, 3 % of K = 512 (Zen 5, 1 thread: 1004
 * -> 1074 and 1031 -> 1066 GOPS with B in L2). */
#define TILE_ROW(m) __m512i c##m##0 = _mm512_setzero_si512(), c##m##1 = c##m##0, c##m##2 = c##m##0;
#define TILE_ROW_DOT(m)                                                   \
    {                                                                     \
        int32_t word;                                                     \
        memcpy(&word, a + (m) * lda, 4);                                  \
        const __m512i av = _mm512_set1_epi32(word);                       \
        c##m##0 = dpbusd(c##m##0, av, b0);                                \
        c##m##1 = dpbusd(c##m##1, av, b1);                                \
        c##m##2 = dpbusd(c##m##2, av, b2);                                \
    }
#define TILE_ROW_STORE(m)                                                 \
    _mm512_store_si512((void *)(tile + (m) * GEMM_NR), c##m##0);          \
    _mm512_store_si512((void *)(tile + (m) * GEMM_NR + 16), c##m##1);     \
    _mm512_store_si512((void *)(tile + (m) * GEMM_NR + 32), c##m##2);
#define EVERY_TILE_ROW(step) step(0) step(1) step(2) step(3) step(4) step(5) step(6) step(7)

#define TILE_LOOP                                                                                        \
    const int ahead = groups >= PREFETCH_MIN_GROUPS;                                                     \
    for (ptrdiff_t g = 0; g < groups; g++, a += 4, b += GEMM_NR * 4) {                                   \
        if (ahead) prefetch_b(b);                                                                        \
        const __m512i b0 = _mm512_load_si512((const void *)b), b1 = _mm512_load_si512((const void *)(b + 64)); \
        const __m512i b2 = _mm512_load_si512((const void *)(b + 128));                                   \
        EVERY_TILE_ROW(TILE_ROW_DOT)                                                                     \
    }

static void dot_tile(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int32_t *tile) {
    EVERY_TILE_ROW(TILE_ROW)
    TILE_LOOP
    EVERY_TILE_ROW(TILE_ROW_STORE)
}

/* Sets per row count: as many as keep each row's chains of vpdpbusd off its latency, where GCC 12 keeps the
 * accumulators in registers. 4 rows in 2 sets (24 accumulators) it spilled, a stack store and reload in
 * every group: 1 set is 25 % faster (Zen 5, 1 thread, 4 x 768^2 7.9-8.0 -> 5.9-6.1 us, 4 x 4096^2 217-219
 * -> 188 us), where 2 and 3 rows in fewer sets than these lose 15-20 %. */
static void dot_vnni(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int rows, int columns,
                     int32_t *tile) {
    switch (rows) {
    case 1: dot_rows(a, lda, b, groups, tile, 1, 4, VECTORS); break;
    case 2: dot_rows(a, lda, b, groups, tile, 2, 4, VECTORS); break;
    case 3: dot_rows(a, lda, b, groups, tile, 3, 2, VECTORS); break;
    case 4: dot_rows(a, lda, b, groups, tile, 4, 1, VECTORS); break;
    case 5: dot_rows(a, lda, b, groups, tile, 5, 1, VECTORS); break;
    case 6: dot_rows(a, lda, b, groups, tile, 6, 1, VECTORS); break;
    case 7: dot_rows(a, lda, b, groups, tile, 7, 1, VECTORS); break;
    default:
        if (columns <= 16)
            dot_rows(a, lda, b, groups, tile, GEMM_MR, 1, 1);
        else if (columns <= 32)
            dot_rows(a, lda, b, groups, tile, GEMM_MR, 1, 2);
        else
            dot_tile(a, lda, b, groups, tile);
        break;
    }
}

static inline __m512d rounded(__m512d x) { return _mm512_roundscale_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

/* The reference's float64 requantization of 16 exact accumulators of row m, as 16 bytes. */
static __m128i requantize_16_exactly(__m512i acc, const __m512d *bs, ptrdiff_t m, const gemm_quantization *q) {
    const __m512d d[2] = {_mm512_cvtepi32_pd(_mm512_castsi512_si256(acc)),
                          _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(acc, 1))};
    const __m512d as = _mm512_set1_pd(q->a_scale[m]), divisor = _mm512_set1_pd(q->out_divisor[m]);
    const __m512d zero_point = _mm512_set1_pd(q->out_zero_point[m]);
    const __m512d lo = _mm512_set1_pd(q->lo), hi = _mm512_set1_pd(q->hi);
    __m256i out[2];
    for (int h = 0; h < 2; h++) {
        const __m512d product = _mm512_mul_pd(d[h], _mm512_mul_pd(as, bs[h]));
        const __m512d quotient = q->reciprocal ? _mm512_mul_pd(product, divisor) : _mm512_div_pd(product, divisor);
        const __m512d value = _mm512_add_pd(rounded(quotient), zero_point);
        const __mmask8 ordered = q->nan_possible ? _mm512_cmp_pd_mask(value, value, _CMP_ORD_Q) : (__mmask8)0xff;
        out[h] = _mm512_cvtpd_epi32(_mm512_maskz_mov_pd(ordered, _mm512_min_pd(_mm512_max_pd(value, lo), hi)));
    }
    return _mm512_cvtepi32_epi8(_mm512_inserti64x4(_mm512_castsi256_si512(out[0]), out[1], 1));
}

/* 1.5 * 2**23: adding it to a float32 below 2**22 in magnitude rounds that to an integer (half to
 * even), which the sum's low bits then hold. */
#define ROUNDING_MAGIC 0x1.8p23f
#define ROUNDING_MAGIC_BITS 0x4B400000

/* The estimate of round(acc * (as * bs) / os) for 16 accumulators into *rounded (as int32) and *integer
 * (as float32), and y - round(y).
 *
 * The reference's float64 quotient q is needed only near a tie of an unsaturated output, so first a
 * float32 estimate: y = float(acc) * f, f = float(as / os) * bs (`factors`) rounded to float32, y
 * exact inside fused multiply-adds. Three float32 roundings (float(acc), the row factor, f; the
 * factors kept within [2**-60, 2**60] stay normal) and the reference's own three float64 ones put y
 * within 3.1 * 2**-24 * |y| of q. As |y| < 2**20 (`estimate`), t = fma(float(acc), f, M) is
 * M + round(y) (ROUNDING_MAGIC; ties to even, as M is even) and t's bits less M's are round(y);
 * y - round(y) comes from one more fused multiply-add, within 2**-25 of its exact value. */
static ALWAYS_INLINE __m512 estimate_16(__m512i acc, __m512 factors, __m512i *rounded, __m512 *integer) {
    const __m512 magic = _mm512_set1_ps(ROUNDING_MAGIC), sums = _mm512_cvtepi32_ps(acc);
    const __m512 t = _mm512_fmadd_round_ps(sums, factors, magic, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    *integer = _mm512_sub_ps(t, magic); /* exact */
    *rounded = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(ROUNDING_MAGIC_BITS));
    return _mm512_fmsub_round_ps(sums, factors, *integer, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* Per lane, over a row's blocks, the largest |y - round(y)| and the largest |round(y)|. */
typedef struct {
    __m512 fraction, magnitude;
} tie_distance;

static ALWAYS_INLINE tie_distance farther(tie_distance d, __mmask16 mask, __m512 fraction, __m512 integer) {
    /* vrangeps 0x0b: the larger magnitude, sign cleared; the lanes beyond `mask` unchanged */
    d.fraction = _mm512_mask_range_ps(d.fraction, mask, d.fraction, fraction, 0x0b);
    d.magnitude = _mm512_mask_range_ps(d.magnitude, mask, d.magnitude, integer, 0x0b);
    return d;
}

/* The lanes where round(y) may not be round(q) (estimate_16), from the estimate's error bound: with
 * F >= |y - round(y)| and R >= |round(y)| (tie_distance), a lane is sure when
 * g = F + min(R, 1024) * 2**-21 < 0.5 - 2**-20. For |round(y)| <= 1024: g's rounding adds at most
 * 2**-25, the fraction's 2**-25, and the error 3.1 * 2**-24 * (|round(y)| + 0.5) is below
 * 0.39 * 2**-21 * |round(y)| + 2**-23.3: in all |y - round(y)| + |q - y| < 0.5 - 2**-20 + 2**-22.6
 * < 0.5, so q rounds to round(y). Beyond, |round(y)| >= 1025, |y| >= 1024.5 and |q| > 1024.4: both
 * saturate any 8-bit output, on the same side, whatever the zero point. The margin shrinks with |y| (2**-15.7 at 40 where a constant 2**-11
 * served), which sends ~25 times fewer lanes to the float64 route at one vrangeps more per vector:
 * measured on Zen 5 that paid where a margin of 2**-20 * min(|y|, 1024) computed per vector (three
 * more instructions) did not. */
static ALWAYS_INLINE __mmask16 near_a_tie(tie_distance d) {
    const __m512 g = _mm512_fmadd_ps(_mm512_min_ps(d.magnitude, _mm512_set1_ps(1024.0f)), _mm512_set1_ps(0x1p-21f),
                                     d.fraction);
    return _mm512_cmp_ps_mask(g, _mm512_set1_ps(0.5f - 0x1p-20f), _CMP_GE_OQ);
}

/* A row's bytes from estimate_16 with the zero point (int16 lanes) through narrowed_64 (a value beyond
 * int16 saturates the byte either way; the fourth vector is a filler), and whether a lane is too near
 * a tie. */
static ALWAYS_INLINE __mmask16 estimate_row(const __m512i *acc, const __m512 *factors, const __mmask16 *masks,
                                            __m512i zero_point, const int blocks, const int out_signed,
                                            __m512i *bytes) {
    __m512i rounded[4];
    tie_distance farthest = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int j = 0; j < blocks; j++) {
        __m512 integer;
        const __m512 fraction = estimate_16(acc[j], factors[j], &rounded[j], &integer);
        farthest = farther(farthest, masks[j], fraction, integer);
    }
    for (int j = blocks; j < 4; j++) rounded[j] = rounded[0];
    *bytes = narrowed_64(rounded, zero_point, out_signed);
    return near_a_tie(farthest);
}

/* What a tile's requantization needs of each block of 16 columns. */
typedef struct {
    __m512i zb, column_term, column_correction; /* the last: za' * column term, when za' is uniform */
    __m512 factor;
    __mmask16 mask;
} column_block;

enum { MAX_COLUMN_BLOCKS = GEMM_NR / 16 };

/* acc = dot - zb' * rowsum(A') - za' * (colsum(B') - K * zb'), in wrapping int32 arithmetic: exact,
 * since the true sum fits in int32 (K <= 32768). Uniform zero points save the multiplications. */
static ALWAYS_INLINE __m512i corrected_sums(__m512i dot, const column_block *column, __m512i row_correction,
                                            __m512i row_sum, __m512i za, const int uniform) {
    const __m512i by_row = uniform ? row_correction : _mm512_mullo_epi32(row_sum, column->zb);
    const __m512i by_column = uniform ? column->column_correction : _mm512_mullo_epi32(za, column->column_term);
    return _mm512_sub_epi32(_mm512_sub_epi32(dot, by_row), by_column);
}

/* Row m's zero-point terms in block j, negated (corrected_sums of 0): a whole tile's accumulators start
 * from them, so that its dot loop leaves the corrected sums. Before the loop they cost 24 subtractions
 * less than after it, and registers are free. */
static ALWAYS_INLINE __m512i corrections(const column_block *column, int32_t row_sum, int32_t a_zero, uint32_t b_zero,
                                         const int uniform) {
    return corrected_sums(_mm512_setzero_si512(), column, _mm512_set1_epi32((int32_t)((uint32_t)row_sum * b_zero)),
                          _mm512_set1_epi32(row_sum), _mm512_set1_epi32(a_zero), uniform);
}

#define TILE_ROW_CORRECTED(m)                                                                             \
    __m512i c##m##0 = corrections(&column[0], row_sums[m], a_zero[m], b_zero, uniform),                  \
            c##m##1 = corrections(&column[1], row_sums[m], a_zero[m], b_zero, uniform),                  \
            c##m##2 = corrections(&column[2], row_sums[m], a_zero[m], b_zero, uniform);

/* The tile's first `blocks` blocks of columns (the vectors are read whole: q's and the tile's column
 * vectors are padded to whole panels). */
static ALWAYS_INLINE void column_blocks(const gemm_tile *t, const gemm_quantization *q, int blocks, column_block *column) {
    const __m512i k = _mm512_set1_epi32((int32_t)q->k);
    for (int j = 0; j < blocks; j++) {
        const ptrdiff_t n = t->n0 + 16 * j, left = t->columns - 16 * j;
        column[j].mask = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        column[j].zb = _mm512_loadu_si512((const void *)(q->b_zero + n));
        column[j].column_term = _mm512_sub_epi32(_mm512_loadu_si512((const void *)(t->column_sums + n)),
                                                 _mm512_mullo_epi32(k, column[j].zb));
        column[j].column_correction = _mm512_mullo_epi32(_mm512_set1_epi32(q->a_zero[0]), column[j].column_term);
        column[j].factor = _mm512_loadu_ps(q->column_factor + n);
    }
}

/* The tile's output lines asked for in exclusive state before its dot loop (`bytes` per row). */
static ALWAYS_INLINE void prefetch_output(const gemm_tile *t, const int bytes) {
    for (int m = 0; m < GEMM_MR; m++) {
        const char *row = t->out + m * t->out_row;
        for (int j = 0; j < bytes; j += 64) __builtin_prefetch(row + j, 1, 3);
        __builtin_prefetch(row + bytes - 1, 1, 3);
    }
}

/* Row m of a whole tile's corrected sums (TILE_ROW_CORRECTED's accumulators) into its int32 output row. */
#define TILE_ROW_OUT(m)                                                                                   \
    {                                                                                                     \
        int32_t *row = (int32_t *)(t->out + (m) * t->out_row);                                            \
        _mm512_storeu_si512((void *)row, c##m##0);                                                        \
        _mm512_storeu_si512((void *)(row + 16), c##m##1);                                                 \
        _mm512_storeu_si512((void *)(row + 32), c##m##2);                                                 \
    }

/* gemm_kernels.h's dot_int32: dot_tile's loop from the zero-point terms (TILE_ROW_CORRECTED), its sums
 * stored straight to the output, rather than stored to a tile that the int32 epilogue reads back and
 * corrects (4 % of a 1024 x 768 x 768 MatMulInteger on Zen 5). */
static ALWAYS_INLINE void dot_int32_rows(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups,
                                         const gemm_tile *t, const gemm_quantization *q, const int uniform) {
    prefetch_output(t, GEMM_NR * 4);
    const int32_t *row_sums = t->row_sums + t->m0, *a_zero = q->a_zero + t->m0;
    const uint32_t b_zero = (uint32_t)q->b_zero[0];
    column_block column[MAX_COLUMN_BLOCKS];
    column_blocks(t, q, MAX_COLUMN_BLOCKS, column);
    EVERY_TILE_ROW(TILE_ROW_CORRECTED)
    TILE_LOOP
    EVERY_TILE_ROW(TILE_ROW_OUT)
}

static void dot_int32_vnni(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, const gemm_tile *t,
                           const gemm_quantization *q) {
    if (q->a_zero_uniform && q->b_zero_uniform)
        dot_int32_rows(a, lda, b, groups, t, q, 1);
    else
        dot_int32_rows(a, lda, b, groups, t, q, 0);
}

/* The reference's bytes of row i of the tile (its sums at `dot`) through requantize_16_exactly: every
 * block, or (`near_only`) those of its blocks with a lane too near a tie for the estimate (the others
 * are stored already). A whole tile's sums come `corrected` (TILE_ROW_CORRECTED); others are corrected
 * here again, so that the estimate's loop keeps its corrected sums in registers. Rare where the
 * estimate serves. */
static __attribute__((noinline)) void store_row_exactly(const int32_t *dot, const column_block *column, int blocks,
                                                        const gemm_tile *t, ptrdiff_t i, const gemm_quantization *q,
                                                        int corrected, int near_only) {
    const ptrdiff_t m = t->m0 + i;
    const __m512i row_sum = _mm512_set1_epi32(t->row_sums[m]), za = _mm512_set1_epi32(q->a_zero[m]);
    const __m512 row_factor = _mm512_set1_ps(q->row_factor[m]);
    for (int j = 0; j < blocks; j++) {
        const ptrdiff_t n = t->n0 + 16 * j;
        const __m512i dot_sums = _mm512_load_si512((const void *)(dot + 16 * j));
        const __m512i acc = corrected ? dot_sums : corrected_sums(dot_sums, &column[j], row_sum, row_sum, za, 0);
        __m512i rounded;
        __m512 integer;
        const __m512 fraction = estimate_16(acc, _mm512_mul_ps(row_factor, column[j].factor), &rounded, &integer);
        const tie_distance none = {_mm512_setzero_ps(), _mm512_setzero_ps()};
        if (near_only && !near_a_tie(farther(none, column[j].mask, fraction, integer))) continue;
        const __m512d bs[2] = {_mm512_loadu_pd(q->b_scale + n), _mm512_loadu_pd(q->b_scale + n + 8)};
        __m128i bytes = requantize_16_exactly(acc, bs, m, q);
        __asm__("" : "+v"(bytes)); /* keep vpmov*db in registers: its memory form is microcoded and slow on AMD */
        _mm_mask_storeu_epi8(t->out + i * t->out_row + 16 * j, column[j].mask, bytes);
    }
}

/* A row's factors (its row factor times the column factors, the caller's copies: the char stores could
 * alias q) and its output zero point in int16 lanes (narrowed_64's). */
typedef struct {
    __m512 factors[3];
    __m512i zero_point;
} row_terms;

static ALWAYS_INLINE row_terms terms_of_row(const __m512 *column_factor, float row_factor, double zero_point,
                                            const int blocks) {
    row_terms terms;
    for (int j = 0; j < blocks; j++) terms.factors[j] = _mm512_mul_ps(_mm512_set1_ps(row_factor), column_factor[j]);
    terms.zero_point = _mm512_set1_epi16((short)zero_point);
    return terms;
}

/* Row i of a tile, its `blocks` vectors of corrected sums, requantized by the estimate (estimate_row)
 * into its output row (`out`); whether a lane is too near a tie. */
static ALWAYS_INLINE __mmask16 requantize_row(const __m512i *acc, const row_terms *terms, const __mmask16 *masks,
                                              __mmask64 row_mask, const int blocks, const int out_signed, char *out) {
    __m512i bytes;
    const __mmask16 near = estimate_row(acc, terms->factors, masks, terms->zero_point, blocks, out_signed, &bytes);
    _mm512_mask_storeu_epi8(out, row_mask, bytes);
    return near;
}

/* Rows [first, end) (at most 64) of a tile of `blocks` blocks of columns, its zero points uniform or
 * not and its output signed or not: the flags constant here and what it reads of t and q in locals
 * (the output's char stores could alias them), so the per-vector work is the arithmetic alone. Rows
 * with a lane near a tie are redone exactly once the loop is over: a call in the loop would cost
 * every row the registers it clobbers. */
static ALWAYS_INLINE void requantize_rows(const int32_t *dot, const gemm_tile *t, const gemm_quantization *q,
                                          const column_block *column, ptrdiff_t first, ptrdiff_t end, const int blocks,
                                          const int uniform, const int out_signed) {
    __m512 column_factor[3];
    __mmask16 masks[3];
    __mmask64 row_mask = 0;
    for (int j = 0; j < blocks; j++) {
        column_factor[j] = column[j].factor;
        masks[j] = column[j].mask;
        row_mask |= (__mmask64)masks[j] << (16 * j);
    }
    const ptrdiff_t dot_stride = t->dot_stride, out_row = t->out_row;
    const int32_t *row_sums = t->row_sums + t->m0, *a_zero = q->a_zero + t->m0;
    const float *row_factors = q->row_factor + t->m0;
    const double *zero_points = q->out_zero_point + t->m0;
    const uint32_t b_zero = (uint32_t)q->b_zero[0];
    char *const out = t->out;
    __mmask16 near[64]; /* per row, kept apart: a mask's way to a general register is slow */
    for (ptrdiff_t i = first; i < end; i++) {
        const __m512i row_correction = _mm512_set1_epi32((int32_t)((uint32_t)row_sums[i] * b_zero));
        const __m512i sum = _mm512_set1_epi32(row_sums[i]), za = _mm512_set1_epi32(a_zero[i]);
        __m512i acc[3];
        for (int j = 0; j < blocks; j++)
            acc[j] = corrected_sums(_mm512_load_si512((const void *)(dot + i * dot_stride + 16 * j)), &column[j],
                                    row_correction, sum, za, uniform);
        const row_terms terms = terms_of_row(column_factor, row_factors[i], zero_points[i], blocks);
        near[i - first] = requantize_row(acc, &terms, masks, row_mask, blocks, out_signed, out + i * out_row);
    }
    for (ptrdiff_t i = first; i < end; i++)
        if (near[i - first]) store_row_exactly(dot + i * dot_stride, column, blocks, t, i, q, 0, 1);
}

static ALWAYS_INLINE void requantize_blocks(const int32_t *dot, const gemm_tile *t, const gemm_quantization *q,
                                            const column_block *column, const int blocks, const int uniform,
                                            const int out_signed) {
    for (ptrdiff_t first = 0; first < t->rows; first += 64) {
        const ptrdiff_t end = t->rows - first < 64 ? t->rows : first + 64;
        requantize_rows(dot, t, q, column, first, end, blocks, uniform, out_signed);
    }
}

#define REQUANTIZE_BLOCKS(blocks) \
    (uniform ? (out_signed ? requantize_blocks(dot, t, q, column, blocks, 1, 1) \
                           : requantize_blocks(dot, t, q, column, blocks, 1, 0)) \
             : (out_signed ? requantize_blocks(dot, t, q, column, blocks, 0, 1) \
                           : requantize_blocks(dot, t, q, column, blocks, 0, 0)))

void dmlq_gemm_requantize_vnni(const int32_t *dot, const gemm_tile *t, const gemm_quantization *q) {
    if (t->out_col != 1) {
        dmlq_gemm_requantize_portable(dot, t, q);
        return;
    }
    const int blocks = (int)((t->columns + 15) / 16);
    column_block column[MAX_COLUMN_BLOCKS];
    column_blocks(t, q, blocks, column);
    if (!q->estimate) {
        for (ptrdiff_t i = 0; i < t->rows; i++) store_row_exactly(dot + i * t->dot_stride, column, blocks, t, i, q, 0, 0);
        return;
    }
    const int uniform = q->a_zero_uniform && q->b_zero_uniform, out_signed = q->lo < 0.0;
    if (blocks == 3)
        REQUANTIZE_BLOCKS(3);
    else if (blocks == 2)
        REQUANTIZE_BLOCKS(2);
    else
        REQUANTIZE_BLOCKS(1);
}

/* Row m of a whole tile's corrected sums (TILE_ROW_CORRECTED's accumulators) through requantize_row, as
 * requantize_rows does with a row read back, with the tile's row terms when its rows share them;
 * `near` marks a row with a lane near a tie. */
#define TILE_ROW_ESTIMATE(m)                                                                              \
    {                                                                                                     \
        const __m512i acc[3] = {c##m##0, c##m##1, c##m##2};                                              \
        const row_terms own = rows_uniform ? shared : terms_of_row(column_factor, row_factors[m], zero_points[m], 3); \
        if (requantize_row(acc, &own, masks, row_mask, 3, out_signed, out + (m) * out_row)) near |= 1u << (m); \
    }

/* The rows of a whole tile marked in `near`, exactly (store_row_exactly), from its corrected sums. Apart,
 * with column blocks of its own: a call in dot_requantize_rows, or its column blocks' address taken,
 * costs every tile. */
static __attribute__((noinline)) void store_near_rows_exactly(const int32_t *sums, const gemm_tile *t,
                                                              const gemm_quantization *q, unsigned near) {
    column_block column[MAX_COLUMN_BLOCKS];
    column_blocks(t, q, MAX_COLUMN_BLOCKS, column);
    for (int m = 0; m < GEMM_MR; m++)
        if (near >> m & 1) store_row_exactly(sums + m * GEMM_NR, column, MAX_COLUMN_BLOCKS, t, m, q, 1, 1);
}

/* gemm_kernels.h's dot_requantize: dot_tile's loop from the zero-point terms (TILE_ROW_CORRECTED), then
 * each row's bytes from its accumulators (the estimate route of requantize_rows) rather than from the
 * sums read back. The sums are still stored, for rows near a tie: stored only for those rows (behind
 * the estimate's branch), the tile took twice as long (Zen 5, 2048 x 768 x 768 tiles in a C harness:
 * 1600 -> 3000 TSC cycles a tile; stored always, 1590). */
static ALWAYS_INLINE void dot_requantize_rows(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups,
                                              const gemm_tile *t, const gemm_quantization *q, const int uniform,
                                              const int rows_uniform, const int out_signed) {
    prefetch_output(t, GEMM_NR);
    const int32_t *row_sums = t->row_sums + t->m0, *a_zero = q->a_zero + t->m0;
    const uint32_t b_zero = (uint32_t)q->b_zero[0];
    column_block column[MAX_COLUMN_BLOCKS];
    column_blocks(t, q, MAX_COLUMN_BLOCKS, column);
    EVERY_TILE_ROW(TILE_ROW_CORRECTED)
    TILE_LOOP
    _Alignas(64) int32_t tile[GEMM_MR * GEMM_NR];
    EVERY_TILE_ROW(TILE_ROW_STORE)
    const __mmask16 masks[3] = {0xffff, 0xffff, 0xffff};
    const __m512 column_factor[3] = {column[0].factor, column[1].factor, column[2].factor};
    const __mmask64 row_mask = ((__mmask64)1 << GEMM_NR) - 1;
    const float *row_factors = q->row_factor + t->m0;
    const double *zero_points = q->out_zero_point + t->m0;
    const row_terms shared = terms_of_row(column_factor, row_factors[0], zero_points[0], 3); /* dead unless rows_uniform */
    const ptrdiff_t out_row = t->out_row;
    char *const out = t->out;
    unsigned near = 0;
    EVERY_TILE_ROW(TILE_ROW_ESTIMATE)
    if (near) store_near_rows_exactly(tile, t, q, near);
}

#define DOT_REQUANTIZE_ROWS(rows_uniform, out_signed)                                                     \
    (uniform ? dot_requantize_rows(a, lda, b, groups, t, q, 1, rows_uniform, out_signed)                 \
             : dot_requantize_rows(a, lda, b, groups, t, q, 0, rows_uniform, out_signed))

static void dot_requantize_vnni(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, const gemm_tile *t,
                                const gemm_quantization *q) {
    const int uniform = q->a_zero_uniform && q->b_zero_uniform;
    if (q->lo < 0.0)
        q->rows_uniform ? DOT_REQUANTIZE_ROWS(1, 1) : DOT_REQUANTIZE_ROWS(0, 1);
    else
        q->rows_uniform ? DOT_REQUANTIZE_ROWS(1, 0) : DOT_REQUANTIZE_ROWS(0, 0);
}

/* Row sums by vpsadbw (sums of 8 bytes each) over 64-byte chunks. */
static void row_sums_vnni(const uint8_t *a, ptrdiff_t lda, ptrdiff_t k, int rows, int32_t *sums) {
    for (int m = 0; m < rows; m++) {
        const uint8_t *row = a + m * lda;
        __m512i acc = _mm512_setzero_si512();
        for (ptrdiff_t kk = 0; kk < k; kk += 64) {
            const __mmask64 mask = k - kk >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (k - kk)) - 1);
            acc = _mm512_add_epi64(acc, _mm512_sad_epu8(_mm512_maskz_loadu_epi8(mask, row + kk), _mm512_setzero_si512()));
        }
        sums[m] = (int32_t)_mm512_reduce_add_epi64(acc);
    }
}

/* Column sums: sums of 4 bytes per dword by vpdpbusd against ones, 16 columns at a time. */
void dmlq_gemm_column_sums_vnni(const int8_t *b, ptrdiff_t groups, int columns, int32_t *sums) {
    const __m512i ones = _mm512_set1_epi8(1);
    for (int j = 0; j < columns; j += 16) {
        __m512i acc = _mm512_setzero_si512();
        for (ptrdiff_t g = 0; g < groups; g++)
            acc = _mm512_dpbusd_epi32(acc, ones, _mm512_load_si512((const void *)(b + g * columns * 4 + 4 * j)));
        _mm512_storeu_si512((void *)(sums + j), acc);
    }
}

/* Whole groups of panels of a row-major B with contiguous columns (gemm_kernels.h's pack_b_whole_groups; the
 * last panel's columns beyond last_columns zero): per group, the 4 rows' 48 bytes in zmm, flipped,
 * made columns of 4 bytes in the panel's order (dmlq_dwords_of_rows); the column sums by vpdpbusd against ones while the bytes are in registers. A block of PACK_BLOCK_GROUPS
 * groups takes every panel in turn while its rows' lines stay in L1; rows a page or more apart escape
 * the hardware prefetchers, so each panel's pass asks for its bytes of the next block's rows. */
enum { PACK_BLOCK_GROUPS = 32 };

static void pack_b_whole_groups_vnni(int8_t *dst, ptrdiff_t panel_bytes, const uint8_t *b, ptrdiff_t b_row,
                                     ptrdiff_t groups, ptrdiff_t panels, int last_columns, uint8_t flip,
                                     int32_t *sums) {
    const __m512i ones = _mm512_set1_epi8(1);
    for (ptrdiff_t g0 = 0; g0 < groups; g0 += PACK_BLOCK_GROUPS) {
        const ptrdiff_t end = g0 + PACK_BLOCK_GROUPS < groups ? g0 + PACK_BLOCK_GROUPS : groups;
        for (ptrdiff_t panel = 0; panel < panels; panel++) {
            const __mmask64 row_bytes = ((__mmask64)1 << (panel + 1 < panels ? GEMM_NR : last_columns)) - 1;
            const __m512i flips = _mm512_maskz_set1_epi8(row_bytes, (char)flip); /* padding stays 0 */
            const uint8_t *columns = b + panel * GEMM_NR;
            int8_t *out = dst + panel * panel_bytes;
            __m512i acc[VECTORS];
            for (int j = 0; j < VECTORS; j++) acc[j] = _mm512_setzero_si512();
            for (ptrdiff_t g = g0; g < end; g++) {
                if (g + PACK_BLOCK_GROUPS < groups) /* this panel's bytes of the next block's rows */
                    for (int t = 0; t < 4; t++) {
                        const char *ahead = (const char *)columns + (4 * (g + PACK_BLOCK_GROUPS) + t) * b_row;
                        _mm_prefetch(ahead, _MM_HINT_T0);
                        _mm_prefetch(ahead + GEMM_NR - 1, _MM_HINT_T0);
                    }
                __m512i r[4];
                for (int t = 0; t < 4; t++)
                    r[t] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(row_bytes, columns + (4 * g + t) * b_row), flips);
                __m512i packed[4]; /* the first VECTORS: a panel's GEMM_NR columns */
                dmlq_dwords_of_rows(r, packed);
                for (int j = 0; j < VECTORS; j++) {
                    _mm512_store_si512((void *)(out + g * GEMM_NR * 4 + 64 * j), packed[j]);
                    acc[j] = _mm512_dpbusd_epi32(acc[j], ones, packed[j]);
                }
            }
            for (int j = 0; j < VECTORS; j++) {
                int32_t *column = sums + panel * GEMM_NR + 16 * j;
                _mm512_storeu_si512((void *)column, _mm512_add_epi32(_mm512_loadu_si512((const void *)column), acc[j]));
            }
        }
    }
}

const gemm_kernels dmlq_gemm_vnni = {.mr = GEMM_MR, .nr = GEMM_NR, .group_multiple = 1, .a_group_bytes = 4,
                                     .real_rows_only = 1, .dot = dot_vnni, .dot_int32 = dot_int32_vnni,
                                     .dot_requantize = dot_requantize_vnni,
                                     .requantize = dmlq_gemm_requantize_vnni,
                                     .row_sums = row_sums_vnni,
                                     .column_sums = dmlq_gemm_column_sums_vnni,
                                     .pack_b_whole_groups = pack_b_whole_groups_vnni};

DMLQ_END_TARGET
#endif
