/* The quantized matrix multiply's driver: packing, blocking, threads, and the portable kernels.
 *
 * Per batch, B is packed into panels (unless it was packed beforehand, dmlq_gemm_pack_b: then each
 * batch reads its panels there), and A copied where it cannot be read in place (gemm_kernels.h), with
 * the row sums of A' and column sums of B' the zero-point correction needs; every MR x NR tile is
 * then a dot-product kernel over the whole K (in int32 chunks of 32768 when K is longer) followed by
 * its requantization, straight into the output (a large B a chunk of panels at a time, each packed
 * just before its tiles by the thread that computes them: packs_b_by_chunk; at AVX2, for many rows, each
 * block of B' widened to words once per thread: widens_b). A few rows of A with one
 * row-major B instead read B where it lies, in blocks of columns (compute_row_major). Threads either
 * claim whole batches (many batches) or share each batch's packing and tiles, claiming panels and tile
 * rows one at a time, or, for a few rows against fewer B panels than threads, shares of K
 * (compute_split_k); in every case the integer sums are exact and one thread requantizes each output
 * element, with the same arithmetic, so the result does not depend on the thread count.
 */
#include <float.h>
#include <stdlib.h>
#if defined(_WIN32)
#include <malloc.h>
#elif defined(__linux__)
#include <sys/mman.h>
#endif

#include "family.h"
#include "gemm_kernels.h"

/* A multiply of fewer operations (2 M N K) runs on one thread. Measured on Zen 5 (avx512_vnni, a packed B,
 * 2 otherwise idle cores, medians of 41 interleaved rounds): a second thread took 0.84-0.93 of the time
 * from 512 Ki operations on (1 x 512 x 512, 8 x 128 x 256, 32 x 128 x 128) and from 2 Mi on 0.5-0.8,
 * but 1.00-1.07 below (1 x 128 x 512, 8 x 64 x 256, 32 x 64 x 64): waking it costs about a microsecond
 * of a call of two. Packing B beforehand runs on one thread below SERIAL_PACK_BYTES bytes of B. */
enum { BLOCK_BYTES = 256 * 1024, SERIAL_OPERATIONS = 1 << 19, SERIAL_PACK_BYTES = 1 << 21 };

/* Claim counters are a cache line apart, each on a line of its own: threads that claim from their own
 * ranges then do not take one line from each other at every claim, nor from the context the threads
 * read (Zen 5, 2 threads, packed 2048 x 768 x 768: 1822 -> 1836 GOPS, medians of 4 interleaved runs). */
enum { COUNTER_SPACING = 64 / sizeof(ptrdiff_t) };

/* Blocks of HUGE_BYTES or more are aligned to huge pages and, on Linux, asked to be backed by them
 * (as NumPy does for its arrays): a packed 4096 x 11008 B otherwise takes 11 000 page faults, in
 * more time than packing it. Blocks come from malloc, aligned here: the C library then hands a block
 * freed by one packing to the next one of that size with its pages in place, as it does for NumPy's
 * arrays, where posix_memalign's larger request maps (and the kernel clears) fresh pages each time. */
#define HUGE_BYTES ((size_t)4 << 20)
#define HUGE_PAGE_BYTES ((size_t)2 << 20)

void *dmlq_allocate(size_t bytes) {
#if defined(_WIN32) /* MSVC, mingw-w64 and clang-cl alike: no posix_memalign */
    return _aligned_malloc(bytes ? bytes : 64, 64);
#else
    const size_t alignment = bytes >= HUGE_BYTES ? HUGE_PAGE_BYTES : 64;
    char *block = malloc(bytes + alignment + sizeof(void *)); /* room to align, and for block's address */
    if (!block) return NULL;
    const uintptr_t start = (uintptr_t)(block + sizeof(void *));
    char *memory = block + sizeof(void *) + (alignment - start % alignment) % alignment;
    memcpy(memory - sizeof(void *), &block, sizeof block);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= HUGE_BYTES) madvise(memory, bytes, MADV_HUGEPAGE); /* only advice: failure changes nothing */
#endif
    return memory;
#endif
}

void dmlq_release(void *memory) {
#if defined(_WIN32)
    _aligned_free(memory);
#else
    if (!memory) return;
    void *block;
    memcpy(&block, (char *)memory - sizeof(void *), sizeof block);
    free(block);
#endif
}

static ptrdiff_t min_size(ptrdiff_t a, ptrdiff_t b) { return a < b ? a : b; }

/* ---- packing ------------------------------------------------------------------------------------ */

/* rows x k bytes of A (element (0, 0) at a) into one panel of `mr` rows lda bytes apart, flipped by
 * xor, zero beyond k and below the last row. */
static void pack_a_panel(uint8_t *dst, ptrdiff_t lda, int mr, const char *a, ptrdiff_t rows, ptrdiff_t k,
                         ptrdiff_t a_row, ptrdiff_t a_col, uint8_t flip) {
    for (ptrdiff_t m = 0; m < mr; m++) {
        uint8_t *out = dst + m * lda;
        const uint8_t *row = (const uint8_t *)a + m * a_row;
        ptrdiff_t kk = 0;
        if (m < rows && a_col == 1)
            for (; kk < k; kk++) out[kk] = row[kk] ^ flip;
        else if (m < rows)
            for (; kk < k; kk++) out[kk] = row[kk * a_col] ^ flip;
        memset(out + kk, 0, (size_t)(lda - kk));
    }
}

#if DMLQ_X86
/* One group of 4 rows x 16 columns of row-major B into [16 columns][4] (SSE2, every x86-64). */
static void interleave_16_columns(uint8_t *dst, const uint8_t *const *rows, ptrdiff_t column, __m128i flip) {
    __m128i r0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(rows[0] + column)), flip);
    __m128i r1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(rows[1] + column)), flip);
    __m128i r2 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(rows[2] + column)), flip);
    __m128i r3 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(rows[3] + column)), flip);
    __m128i low01 = _mm_unpacklo_epi8(r0, r1), high01 = _mm_unpackhi_epi8(r0, r1);
    __m128i low23 = _mm_unpacklo_epi8(r2, r3), high23 = _mm_unpackhi_epi8(r2, r3);
    _mm_storeu_si128((__m128i *)dst, _mm_unpacklo_epi16(low01, low23));
    _mm_storeu_si128((__m128i *)(dst + 16), _mm_unpackhi_epi16(low01, low23));
    _mm_storeu_si128((__m128i *)(dst + 32), _mm_unpacklo_epi16(high01, high23));
    _mm_storeu_si128((__m128i *)(dst + 48), _mm_unpackhi_epi16(high01, high23));
}
#endif

/* What B's bytes are xor-ed with in B' (gemm_kernels.h): 0 for int8 B, 0x80 for uint8 B. */
static uint8_t b_flip(int b_signed) { return b_signed ? 0 : 0x80; }

/* Where element (kk, n) of a panel goes (gemm_kernels.h's two layouts). */
static ptrdiff_t packed_offset(int nr, int pair_layout, ptrdiff_t kk, ptrdiff_t n) {
    const ptrdiff_t group = kk / 4, t = kk % 4;
    return pair_layout ? (group * 2 + t / 2) * nr * 2 + n * 2 + t % 2 : (group * nr + n) * 4 + t;
}

/* Full groups of 16 columns of row-major B in the group layout, with SSE2: how many groups were
 * packed (none in the pair layout, whose kernels pack the whole groups of such panels themselves,
 * pack_b_pairs). */
static ptrdiff_t pack_b_rows(uint8_t *dst, int nr, int pair_layout, const uint8_t *b, ptrdiff_t columns, ptrdiff_t k,
                             ptrdiff_t b_row, ptrdiff_t b_col, uint8_t flip) {
#if DMLQ_X86
    if (pair_layout || b_col != 1 || columns != nr || nr % 16 != 0) return 0;
    const __m128i flip16 = _mm_set1_epi8((char)flip);
    for (ptrdiff_t g = 0; g < k / 4; g++) {
        const uint8_t *rows[4];
        for (int t = 0; t < 4; t++) rows[t] = b + (4 * g + t) * b_row;
        for (ptrdiff_t n = 0; n < nr; n += 16)
            interleave_16_columns(dst + packed_offset(nr, 0, 4 * g, n), rows, n, flip16);
    }
    return k / 4;
#else
    (void)dst, (void)nr, (void)pair_layout, (void)b, (void)columns, (void)k, (void)b_row, (void)b_col, (void)flip;
    return 0;
#endif
}

/* k x columns bytes of B (element (0, 0) at b) into one panel of `groups` groups in the kernels'
 * layout, flipped by xor. */
static void pack_b_panel(uint8_t *dst, const gemm_kernels *kernels, const char *b, ptrdiff_t columns, ptrdiff_t k,
                         ptrdiff_t groups, ptrdiff_t b_row, ptrdiff_t b_col, uint8_t flip) {
    const int nr = kernels->nr, pair_layout = kernels->b_pair_layout;
    if (columns < nr || groups * 4 != k) memset(dst, 0, (size_t)(groups * nr * 4));
    const uint8_t *base = (const uint8_t *)b;
    const ptrdiff_t full_groups = pack_b_rows(dst, nr, pair_layout, base, columns, k, b_row, b_col, flip);
    const int run = pair_layout ? 2 : 4; /* consecutive k of a column that stay consecutive */
    for (ptrdiff_t n = 0; n < columns && full_groups * 4 < k; n++) {
        const uint8_t *column = base + n * b_col;
        ptrdiff_t kk = full_groups * 4;
        for (; b_row == 1 && kk + run <= k; kk += run) {
            uint8_t *out = dst + packed_offset(nr, pair_layout, kk, n);
            for (int t = 0; t < run; t++) out[t] = column[kk + t] ^ flip;
        }
        for (; kk < k; kk++) dst[packed_offset(nr, pair_layout, kk, n)] = column[kk * b_row] ^ flip;
    }
}

/* B is packed in blocks of PACK_GROUPS groups of rows x PACK_PANELS panels: a block's rows stay in
 * the caches while each of its panels takes its share, and each share is summed while it is in L1.
 * Going panel by panel through the whole of K would instead read a few bytes of every row, one
 * page each, per panel. */
enum { PACK_GROUPS = 16, PACK_PANELS = 16 };

typedef struct {
    const gemm_kernels *kernels;
    const char *b;                 /* element (0, 0) of one B */
    ptrdiff_t n, k, groups, b_row, b_col;
    uint8_t flip;
    int8_t *panels;                /* its packed panels, panel_bytes apart */
    ptrdiff_t panel_bytes;
    int32_t *column_sums;          /* of its packed panels, padding columns included */
} b_packing;

static ptrdiff_t pack_chunks(ptrdiff_t panels) { return (panels + PACK_PANELS - 1) / PACK_PANELS; }

/* Groups [first_group, groups) of panels [first, end) of one B, by blocks, adding their column sums. */
static void pack_b_groups(const b_packing *job, ptrdiff_t first, ptrdiff_t end, ptrdiff_t first_group) {
    const gemm_kernels *kernels = job->kernels;
    const int nr = kernels->nr;
    for (ptrdiff_t g0 = first_group; g0 < job->groups; g0 += PACK_GROUPS) {
        const ptrdiff_t groups = min_size(PACK_GROUPS, job->groups - g0), rows = min_size(4 * groups, job->k - 4 * g0);
        const char *block = job->b + 4 * g0 * job->b_row;
        for (ptrdiff_t panel = first; panel < end; panel++) {
            int8_t *dst = job->panels + panel * job->panel_bytes + g0 * nr * 4;
            int32_t sums[GEMM_NR];
            pack_b_panel((uint8_t *)dst, kernels, rows > 0 ? block + panel * nr * job->b_col : job->b,
                         min_size(nr, job->n - panel * nr), rows > 0 ? rows : 0, groups, job->b_row, job->b_col,
                         job->flip);
            kernels->column_sums(dst, groups, nr, sums);
            for (int j = 0; j < nr; j++) job->column_sums[panel * nr + j] += sums[j];
        }
    }
}

/* Panels [first, end) of one B (at most PACK_PANELS), and their column sums: the whole groups of
 * full panels (and of B's last, partial one, for the group layout's packer) by the kernels' own
 * packer where they have one, the rest block by block. */
static void pack_b_chunk(const b_packing *job, ptrdiff_t first, ptrdiff_t end) {
    const gemm_kernels *kernels = job->kernels;
    const int nr = kernels->nr;
    memset(job->column_sums + first * nr, 0, sizeof(int32_t) * (size_t)((end - first) * nr));
    const int direct = (kernels->pack_b_pairs || kernels->pack_b_whole_groups) && job->b_col == 1;
    const ptrdiff_t packer_end = kernels->pack_b_whole_groups ? end : min_size(end, job->n / nr);
    const ptrdiff_t full_end = direct ? packer_end : first, whole_groups = job->k / 4;
    if (full_end > first) {
        int8_t *panels = job->panels + first * job->panel_bytes;
        const uint8_t *columns = (const uint8_t *)job->b + first * nr;
        int32_t *sums = job->column_sums + first * nr;
        if (kernels->pack_b_pairs)
            kernels->pack_b_pairs(panels, job->panel_bytes, columns, job->b_row, 2 * whole_groups, full_end - first,
                                  job->flip, sums);
        else
            kernels->pack_b_whole_groups(panels, job->panel_bytes, columns, job->b_row, whole_groups, full_end - first,
                                         (int)min_size(nr, job->n - (full_end - 1) * nr), job->flip, sums);
        pack_b_groups(job, first, full_end, whole_groups);
        first = full_end;
    }
    pack_b_groups(job, first, end, 0);
}

/* ---- portable kernels ----------------------------------------------------------------------------- */

static void dot_portable(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int rows, int columns,
                         int32_t *tile) {
    (void)rows;
    (void)columns;
    for (int i = 0; i < GEMM_MR * GEMM_NR; i++) tile[i] = 0;
    for (ptrdiff_t g = 0; g < groups; g++, a += 4, b += GEMM_NR * 4)
        for (int m = 0; m < GEMM_MR; m++)
            for (int n = 0; n < GEMM_NR; n++)
                for (int t = 0; t < 4; t++) tile[m * GEMM_NR + n] += (int32_t)a[m * lda + t] * b[n * 4 + t];
}

void dmlq_gemm_row_sums_portable(const uint8_t *a, ptrdiff_t lda, ptrdiff_t k, int rows, int32_t *sums) {
    for (int m = 0; m < rows; m++) {
        int32_t sum = 0;
        for (ptrdiff_t kk = 0; kk < k; kk++) sum += a[m * lda + kk];
        sums[m] = sum;
    }
}

void dmlq_gemm_column_sums_portable(const int8_t *b, ptrdiff_t groups, int columns, int32_t *sums) {
    for (int n = 0; n < columns; n++) sums[n] = 0;
    for (ptrdiff_t g = 0; g < groups; g++, b += columns * 4)
        for (int n = 0; n < columns; n++) sums[n] += b[n * 4] + b[n * 4 + 1] + b[n * 4 + 2] + b[n * 4 + 3];
}

/* The correction in 64 bits, valid for any K below 2**23. */
static int64_t corrected(int64_t dot, const gemm_tile *tile, const gemm_quantization *q, ptrdiff_t m, ptrdiff_t n) {
    const int64_t zb = q->b_zero[n], column_term = (int64_t)tile->column_sums[n] - (int64_t)q->k * zb;
    return dot - zb * tile->row_sums[m] - (int64_t)q->a_zero[m] * column_term;
}

/* Requantize a tile of exact sums (int64), element by element. */
static void store_requantized(const int64_t *dots, const gemm_tile *tile, const gemm_quantization *q) {
    for (ptrdiff_t i = 0; i < tile->rows; i++) {
        const ptrdiff_t m = tile->m0 + i;
        for (ptrdiff_t j = 0; j < tile->columns; j++) {
            const ptrdiff_t n = tile->n0 + j;
            const int64_t acc = corrected(dots[i * tile->dot_stride + j], tile, q, m, n);
            if (q->epilogue) {
                dmlq_gemm_epilogue_one(acc, tile, q, i, j);
                continue;
            }
            *(uint8_t *)(tile->out + i * tile->out_row + j * tile->out_col) =
                dmlq_requantize_one(acc, q->a_scale[m], q->b_scale[n], q->out_divisor[m], q->reciprocal,
                                    q->out_zero_point[m], q->lo, q->hi);
        }
    }
}

void dmlq_gemm_requantize_portable(const int32_t *dot, const gemm_tile *tile, const gemm_quantization *q) {
    int64_t wide[GEMM_MAX_TILE];
    for (ptrdiff_t i = 0; i < tile->rows * tile->dot_stride; i++) wide[i] = dot[i];
    store_requantized(wide, tile, q);
}

const gemm_kernels dmlq_gemm_portable = {.mr = GEMM_MR, .nr = GEMM_NR, .group_multiple = 1, .a_group_bytes = 4,
                                         .dot = dot_portable, .requantize = dmlq_gemm_requantize_portable,
                                         .row_sums = dmlq_gemm_row_sums_portable,
                                         .column_sums = dmlq_gemm_column_sums_portable};

/* ---- driver --------------------------------------------------------------------------------------- */

typedef struct {
    uint8_t *a;            /* copied A' panels of one batch (with A in place: only the last, partial one) */
    int8_t *b;             /* packed B' */
    int32_t *row_sums, *column_sums;
    ptrdiff_t a_offset, b_offset; /* which batch's operands they hold, -1 for none */
} packed_operands;

typedef struct {
    const dmlq_gemm_problem *p;
    const gemm_kernels *kernels;
    gemm_quantization q;
    ptrdiff_t groups, m_panels, n_panels, a_panel_bytes, b_panel_bytes;
    int b_in_place; /* B is read where it lies (dot_row_major), A packed as A'' (gemm_kernels.h) */
    int int32_sums; /* the tiles' sums (and a row bias) fit in int32: the kernels combine them */
    int int32_direct; /* int32 output, contiguous columns: whole tiles by the kernels' dot_int32 */
    int requantize_direct; /* 8-bit output, contiguous columns, the estimate usable: whole tiles by dot_requantize */
    int row_sums_needed; /* some zb' is not 0 (else rowsum(A') is multiplied by 0 only: left 0) */
    int a_in_place; /* uint8 A, rows contiguous, K a multiple of 4: full panels (or all) need no copy */
    int per_thread_batches;
    int packed_ahead; /* the one batch's panels were packed by the caller before the threads started */
    int b_by_chunk;   /* each chunk of B panels is packed by the thread that computes its tiles (packs_b_by_chunk) */
    packed_operands *packed; /* one per thread, or one shared */
    ptrdiff_t k_shares;      /* > 1: each B panel's K is split into this many shares (split_k_shares) */
    int64_t *partials;       /* their sums, [panel][share][MR * NR] */
    ptrdiff_t *counters;     /* work claimed so far: batches, or per batch and range its packing and tiles,
                              * each counter COUNTER_SPACING apart */
    ptrdiff_t counter_stride; /* ranges per batch and phase (the requested thread count) */
    ptrdiff_t a_per_unit;     /* A panels in a claimed unit of work with a block of B (a_panels_per_unit) */
    int wide_b;               /* the tiles read B' blocks widened by each thread (widens_b) */
    int8_t *wide;             /* each thread's widened block, after a line that says which it is (widened_block) */
} gemm_context;

/* Where A panel `panel` of a batch starts, and its row stride: in A itself, or among the copies. */
static const uint8_t *a_panel(const gemm_context *c, const packed_operands *pk, ptrdiff_t batch, ptrdiff_t panel,
                              ptrdiff_t *lda) {
    const dmlq_gemm_problem *p = c->p;
    const int mr = c->kernels->mr;
    if (c->a_in_place && ((panel + 1) * mr <= p->m || c->kernels->real_rows_only)) {
        *lda = p->a_row;
        return (const uint8_t *)p->a + p->a_offsets[batch] + panel * mr * p->a_row;
    }
    *lda = c->groups * 4;
    return pk->a + panel * c->a_panel_bytes;
}

static void pack_a_panels(const gemm_context *c, packed_operands *pk, ptrdiff_t batch, ptrdiff_t first, ptrdiff_t end) {
    const dmlq_gemm_problem *p = c->p;
    const char *a = p->a + p->a_offsets[batch];
    if (c->b_in_place) { /* the one panel of A'' */
        c->kernels->pack_a_row_major((int16_t *)pk->a, a, p->m, p->k, p->a_row, p->a_col, p->a_signed,
                                     p->a_zero_point, pk->row_sums);
        return;
    }
    const int mr = c->kernels->mr;
    for (ptrdiff_t panel = first; panel < end; panel++) {
        const ptrdiff_t m0 = panel * mr;
        ptrdiff_t lda;
        const uint8_t *rows = a_panel(c, pk, batch, panel, &lda);
        uint8_t *copy = pk->a + panel * c->a_panel_bytes;
        const uint8_t flip = p->a_signed ? 0x80 : 0;
        if (c->kernels->pack_a) {
            c->kernels->pack_a(copy, a + m0 * p->a_row, min_size(mr, p->m - m0), p->k, c->groups, p->a_row, p->a_col,
                               flip, pk->row_sums + m0);
            continue;
        }
        const int real = (int)min_size(mr, p->m - m0);
        if (rows == copy) pack_a_panel(copy, lda, mr, a + m0 * p->a_row, real, p->k, p->a_row, p->a_col, flip);
        if (!c->row_sums_needed) continue; /* all left 0 (dmlq_gemm) */
        c->kernels->row_sums(rows, lda, p->k, real, pk->row_sums + m0);
        for (int r = real; r < mr; r++) pk->row_sums[m0 + r] = 0; /* rows beyond A (none read in place) */
    }
}

/* The first A panel that needs packing: past those read in place (a_panel) when their row sums are not
 * needed. */
static ptrdiff_t first_a_panel_to_pack(const gemm_context *c) {
    const ptrdiff_t in_place = c->kernels->real_rows_only ? c->m_panels : c->p->m / c->kernels->mr;
    return c->a_in_place && !c->row_sums_needed ? in_place : 0;
}

/* How many chunks of a batch's B this multiply packs: the panels it does not read directly. */
static ptrdiff_t chunks_to_pack(const gemm_context *c) {
    return c->b_in_place || c->b_by_chunk ? 0 : pack_chunks(c->n_panels);
}

/* Chunks [first, end) of the panels a batch's B has packed, into the multiply's own buffers. */
static void pack_b_chunks(const gemm_context *c, packed_operands *pk, ptrdiff_t batch, ptrdiff_t first, ptrdiff_t end) {
    const dmlq_gemm_problem *p = c->p;
    const b_packing job = {c->kernels, p->b + p->b_offsets[batch], p->n, p->k, c->groups, p->b_row, p->b_col,
                           b_flip(p->b_signed), pk->b, c->b_panel_bytes, pk->column_sums};
    for (ptrdiff_t chunk = first; chunk < end; chunk++) {
        const ptrdiff_t panel = chunk * PACK_PANELS;
        pack_b_chunk(&job, panel, min_size(panel + PACK_PANELS, c->n_panels));
    }
}

/* A batch's packed B panels and column sums: packed beforehand, or by this multiply (in pk). */
static const int8_t *b_panels(const gemm_context *c, const packed_operands *pk, ptrdiff_t batch) {
    const dmlq_packed_b *packed = c->p->packed_b;
    return packed ? packed->panels + c->p->b_offsets[batch] * packed->n_panels * packed->panel_bytes : pk->b;
}

static const int32_t *b_column_sums(const gemm_context *c, const packed_operands *pk, ptrdiff_t batch) {
    const dmlq_packed_b *packed = c->p->packed_b;
    return packed ? packed->column_sums + c->p->b_offsets[batch] * packed->sums_per_batch : pk->column_sums;
}

/* A tile's output from its int32 sums: requantized by the kernels, or the problem's epilogue (which may
 * change the sums). */
static void finish_tile(const gemm_context *c, int32_t *dots, const gemm_tile *tile) {
    if (c->q.epilogue)
        dmlq_gemm_epilogue_tile(dots, tile, &c->q, c->kernels->requantize);
    else
        c->kernels->requantize(dots, tile, &c->q);
}

static void compute_tile(const gemm_context *c, const packed_operands *pk, ptrdiff_t batch, ptrdiff_t m_panel,
                         ptrdiff_t n_panel, const int8_t *b) {
    const dmlq_gemm_problem *p = c->p;
    const int mr = c->kernels->mr, nr = c->kernels->nr;
    const ptrdiff_t m0 = m_panel * mr, n0 = n_panel * nr;
    const gemm_tile tile = {m0, n0, min_size(mr, p->m - m0), min_size(nr, p->n - n0), nr,
                            p->out + p->out_offsets[batch] + m0 * p->out_row + n0 * p->out_col,
                            p->out_row, p->out_col, pk->row_sums, b_column_sums(c, pk, batch), batch};
    ptrdiff_t lda;
    const uint8_t *a = a_panel(c, pk, batch, m_panel, &lda);
    _Alignas(64) int32_t dots[GEMM_MAX_TILE];
    const int whole = tile.rows == mr && tile.columns == nr;
    if (whole && c->int32_direct) {
        c->kernels->dot_int32(a, lda, b, c->groups, &tile, &c->q);
        return;
    }
    if (whole && c->requantize_direct) {
        c->kernels->dot_requantize(a, lda, b, c->groups, &tile, &c->q);
        return;
    }
    if (c->int32_sums) {
        (c->wide_b ? c->kernels->dot_wide : c->kernels->dot)(a, lda, b, c->groups, (int)tile.rows, (int)tile.columns,
                                                              dots);
        finish_tile(c, dots, &tile);
        return;
    }
    int64_t sums[GEMM_MAX_TILE] = {0};
    for (ptrdiff_t g = 0; g < c->groups; g += GEMM_CHUNK_GROUPS) {
        c->kernels->dot(a + g * c->kernels->a_group_bytes, lda, b + g * nr * 4, min_size(GEMM_CHUNK_GROUPS, c->groups - g),
                        (int)tile.rows, nr, dots);
        for (int i = 0; i < tile.rows * nr; i++) sums[i] += dots[i];
    }
    store_requantized(sums, &tile, &c->q);
}

/* A row-major B read in place is computed in blocks of columns whose tile (ROW_MAJOR_TILE_INTS
 * sums) stays in L1, a few pairs of k at a time (their rows of the block stream through the cache
 * in order, and the next pairs' are asked for meanwhile); rows that come back to the same L1 sets
 * within a step (a stride of 4 KiB, 2 KiB, ...) are taken fewer at a time, none asked for ahead. */
enum {
    ROW_MAJOR_TILE_INTS = 4096,
    ROW_MAJOR_TILE = GEMM_MR * 32, /* a column tail's tile (NR up to 32) */
    ROW_MAJOR_PAIRS = 8,
    ALIASED_PAIRS = 4
};

/* From one B panel of a block to the next: widened, a panel takes twice its bytes. */
static ptrdiff_t panel_stride(const gemm_context *c) { return c->b_panel_bytes * (c->wide_b ? 2 : 1); }

static ptrdiff_t block_panels(const gemm_context *c) {
    const ptrdiff_t block = c->b_in_place ? ROW_MAJOR_TILE_INTS / (c->p->m * c->kernels->nr)
                                          : BLOCK_BYTES / panel_stride(c);
    return block < 1 ? 1 : block;
}

/* B's last columns, short of a whole panel, as rows of NR bytes (zero beyond N). */
static const char *copy_column_tail(const gemm_context *c, const packed_operands *pk, const char *b) {
    const dmlq_gemm_problem *p = c->p;
    const int nr = c->kernels->nr;
    const ptrdiff_t n0 = p->n / nr * nr;
    char *tail = (char *)pk->b;
    memset(tail, 0, (size_t)(p->k * nr));
    for (ptrdiff_t kk = 0; kk < p->k; kk++) memcpy(tail + kk * nr, b + kk * p->b_row + n0, (size_t)(p->n - n0));
    return tail;
}

/* Whether rows `stride` bytes apart come back to the same L1 sets (4 KiB of them) within one step
 * of ROW_MAJOR_PAIRS pairs of rows. */
static int rows_sharing_sets(ptrdiff_t stride) {
    ptrdiff_t common = 4096, rest = stride < 0 ? -stride : stride; /* gcd(stride, 4096) */
    while (rest) {
        const ptrdiff_t next = common % rest;
        common = rest;
        rest = next;
    }
    return 4096 / common < 2 * ROW_MAJOR_PAIRS;
}

/* Tiles of the A'' panel with panels [first, end) of a row-major B, read in place (and the column
 * tail, copied). */
static void compute_row_major(const gemm_context *c, const packed_operands *pk, ptrdiff_t batch, ptrdiff_t first,
                              ptrdiff_t end) {
    const dmlq_gemm_problem *p = c->p;
    const gemm_kernels *kernels = c->kernels;
    const int nr = kernels->nr, rows = (int)p->m;
    const ptrdiff_t whole = p->n / nr, a_pair_words = 2 * p->m;
    const ptrdiff_t in_place = min_size(end, whole) - first > 0 ? min_size(end, whole) - first : 0;
    const char *b = p->b + p->b_offsets[batch] + first * nr;
    const char *tail = end > whole ? copy_column_tail(c, pk, p->b + p->b_offsets[batch]) : NULL;
    const int16_t *a = (const int16_t *)pk->a;
    _Alignas(64) int32_t sums[ROW_MAJOR_TILE_INTS + ROW_MAJOR_TILE]; /* [rows][in_place * nr], the tail's [rows][nr] */
    int32_t *tail_sums = sums + rows * in_place * nr;
    memset(sums, 0, sizeof(int32_t) * (size_t)((end - first) * rows * nr));
    const int aliased = rows_sharing_sets(p->b_row);
    const ptrdiff_t step = aliased ? ALIASED_PAIRS : ROW_MAJOR_PAIRS;
    const ptrdiff_t ahead = aliased ? 0 : 2 * step; /* rows: the next step's */
    for (ptrdiff_t pair = 0; pair < p->k / 2; pair += step) {
        const ptrdiff_t pairs = min_size(step, p->k / 2 - pair);
        const int16_t *a_pairs = a + pair * a_pair_words;
        if (in_place)
            kernels->dot_row_major(a_pairs, a_pair_words, b + 2 * pair * p->b_row, p->b_row, pairs, ahead, rows,
                                   (int)in_place, p->b_signed, sums);
        if (tail)
            kernels->dot_row_major(a_pairs, a_pair_words, tail + 2 * pair * nr, nr, pairs, 0, rows, 1, p->b_signed,
                                   tail_sums);
    }
    kernels->row_major_in_order(sums, (end - first) * rows);
    for (ptrdiff_t n = first; n < end; n++) {
        const ptrdiff_t n0 = n * nr;
        const gemm_tile tile = {0, n0, rows, min_size(nr, p->n - n0), n < whole ? in_place * nr : nr,
                                p->out + p->out_offsets[batch] + n0 * p->out_col, p->out_row, p->out_col,
                                pk->row_sums, pk->column_sums, batch};
        finish_tile(c, n < whole ? sums + (n - first) * nr : tail_sums, &tile);
    }
}

/* Tiles of A panel m with the packed B panels [first, end), panel `first` at b and the others after it. */
static void compute_tiles(const gemm_context *c, const packed_operands *pk, ptrdiff_t batch, ptrdiff_t m,
                          ptrdiff_t first, ptrdiff_t end, const int8_t *b) {
    for (ptrdiff_t n = first; n < end; n++, b += panel_stride(c)) compute_tile(c, pk, batch, m, n, b);
}

/* Tiles of A panel m with the B panels [nb, min(nb + block, n_end)): a block of B panels stays in
 * L2 while the A panels pass through it. */
static void compute_block(const gemm_context *c, const packed_operands *pk, ptrdiff_t batch, ptrdiff_t m,
                          ptrdiff_t nb, ptrdiff_t n_end) {
    const ptrdiff_t end = min_size(nb + block_panels(c), n_end);
    if (c->b_in_place)
        compute_row_major(c, pk, batch, nb, end);
    else
        compute_tiles(c, pk, batch, m, nb, end, b_panels(c, pk, batch) + nb * c->b_panel_bytes);
}

/* A thread's widened block of B panels, after a line that holds which block it is. */
enum { WIDE_HEADER_BYTES = 64 };

static ptrdiff_t wide_region_bytes(const gemm_context *c) {
    return WIDE_HEADER_BYTES + block_panels(c) * panel_stride(c);
}

/* The thread's copy of panels [nb, end) of a batch's B (their bytes at `panels`), widened (wide_b), made
 * unless it holds them already: a thread's units take each block with every A panel in turn. */
static const int8_t *widened_block(const gemm_context *c, int thread, ptrdiff_t batch, ptrdiff_t nb, ptrdiff_t end,
                                   const int8_t *panels) {
    int8_t *region = c->wide + thread * wide_region_bytes(c);
    ptrdiff_t *holds = (ptrdiff_t *)region;
    const ptrdiff_t block = batch * c->n_panels + nb;
    if (*holds != block) {
        c->kernels->widen_b(panels, (end - nb) * c->b_panel_bytes, region + WIDE_HEADER_BYTES);
        *holds = block;
    }
    return region + WIDE_HEADER_BYTES;
}

/* Tiles of A panels [first, end) with B panels [nb, end_nb) (their bytes at `panels`), widened first
 * (wide_b). */
static void compute_block_tiles(const gemm_context *c, const packed_operands *pk, int thread, ptrdiff_t batch,
                                ptrdiff_t first, ptrdiff_t end, ptrdiff_t nb, ptrdiff_t end_nb, const int8_t *panels) {
    if (c->wide_b) panels = widened_block(c, thread, batch, nb, end_nb, panels);
    for (ptrdiff_t m = first; m < end; m++) compute_tiles(c, pk, batch, m, nb, end_nb, panels);
}

/* Whether one batch's threads share out its tiles by B's panels (each thread a range of columns), rather
 * than by A's when B has fewer panels than threads. */
static int shares_columns(const gemm_context *c, int threads) { return c->n_panels >= threads; }

/* A large B packed whole before its tiles goes to memory and is read back from there; instead (one batch,
 * B's panels shared out by columns) each thread packs a chunk of panels into a buffer of its own, which
 * stays in the caches for the chunk's tiles, then the next. Zen 5, avx512_vnni, B of 4096 x 11008 and
 * M = 32: 6.1 -> 4.8 ms at 1 thread, 3.9 -> 2.6 at 2; 2048 x 4096 x 4096 at 2 threads 39.4 -> 38.2 ms.
 * Below BY_CHUNK_BYTES (B in L2, or in L3 with few chunks to share out) no difference stood out. */
enum { BY_CHUNK_BYTES = 4 << 20 };

static int packs_b_by_chunk(const gemm_context *c, int threads) {
    return !c->p->packed_b && !c->b_in_place && c->p->batches == 1 && c->k_shares == 1 &&
           shares_columns(c, threads) && c->n_panels * c->b_panel_bytes >= BY_CHUNK_BYTES;
}

/* Panels per thread's chunk buffer: a chunk lies within one thread's range of columns. */
static ptrdiff_t chunk_buffer_panels(const gemm_context *c) {
    return min_size(PACK_PANELS, (c->n_panels + c->counter_stride - 1) / c->counter_stride);
}

/* B panels [nb, end) (a chunk: up to PACK_PANELS) packed into the thread's buffer, then their tiles with
 * every A panel, a block of them at a time. */
static void pack_and_compute_chunk(const gemm_context *c, int thread, ptrdiff_t nb, ptrdiff_t end) {
    const dmlq_gemm_problem *p = c->p;
    packed_operands *pk = c->packed;
    const int nr = c->kernels->nr;
    int8_t *panels = pk->b + thread * chunk_buffer_panels(c) * c->b_panel_bytes;
    const b_packing chunk = {c->kernels, p->b + p->b_offsets[0] + nb * nr * p->b_col, p->n - nb * nr, p->k, c->groups,
                             p->b_row, p->b_col, b_flip(p->b_signed), panels, c->b_panel_bytes,
                             pk->column_sums + nb * nr};
    pack_b_chunk(&chunk, 0, end - nb);
    const ptrdiff_t block = block_panels(c);
    for (ptrdiff_t first = nb; first < end; first += block)
        compute_block_tiles(c, pk, thread, 0, 0, c->m_panels, first, min_size(first + block, end),
                            panels + (first - nb) * c->b_panel_bytes);
}

/* A few rows against fewer B panels than threads would leave threads idle: instead every panel's
 * K is split into k_shares shares, each share's exact dot products (in int32 chunks, added in
 * int64) computed apart, a (share, panel) per claim; once all are in, each panel's shares are added
 * (exact) and requantized, a panel per claim. Only one batch, A in one panel. */
static void dot_share(const gemm_context *c, ptrdiff_t unit) {
    const int mr = c->kernels->mr, nr = c->kernels->nr;
    const int step = c->kernels->group_multiple;
    const ptrdiff_t panel = unit / c->k_shares, share = unit % c->k_shares, steps = c->groups / step;
    const ptrdiff_t first = steps * share / c->k_shares * step, end = steps * (share + 1) / c->k_shares * step;
    ptrdiff_t lda;
    const uint8_t *a = a_panel(c, c->packed, 0, 0, &lda);
    const int8_t *b = b_panels(c, c->packed, 0) + panel * c->b_panel_bytes;
    int64_t *sums = c->partials + unit * GEMM_MAX_TILE;
    _Alignas(64) int32_t dots[GEMM_MAX_TILE];
    const int rows = (int)min_size(mr, c->p->m);
    for (int i = 0; i < mr * nr; i++) sums[i] = 0;
    for (ptrdiff_t g = first; g < end; g += GEMM_CHUNK_GROUPS) {
        c->kernels->dot(a + g * c->kernels->a_group_bytes, lda, b + g * nr * 4, min_size(GEMM_CHUNK_GROUPS, end - g),
                        rows, nr, dots);
        for (int i = 0; i < rows * nr; i++) sums[i] += dots[i];
    }
}

static void requantize_shares(const gemm_context *c, ptrdiff_t panel) {
    const dmlq_gemm_problem *p = c->p;
    const int mr = c->kernels->mr, nr = c->kernels->nr;
    const ptrdiff_t n0 = panel * nr;
    const gemm_tile tile = {0, n0, min_size(mr, p->m), min_size(nr, p->n - n0), nr,
                            p->out + p->out_offsets[0] + n0 * p->out_col, p->out_row, p->out_col,
                            c->packed->row_sums, b_column_sums(c, c->packed, 0)};
    int64_t sums[GEMM_MAX_TILE] = {0};
    for (ptrdiff_t share = 0; share < c->k_shares; share++) {
        const int64_t *part = c->partials + (panel * c->k_shares + share) * GEMM_MAX_TILE;
        for (int i = 0; i < tile.rows * nr; i++) sums[i] += part[i];
    }
    if (c->groups > GEMM_CHUNK_GROUPS) {
        store_requantized(sums, &tile, &c->q);
        return;
    }
    _Alignas(64) int32_t dots[GEMM_MAX_TILE]; /* the whole dot product fits in int32 (gemm_kernels.h) */
    for (int i = 0; i < tile.rows * nr; i++) dots[i] = (int32_t)sums[i];
    c->kernels->requantize(dots, &tile, &c->q);
}

static void compute_split_k(const gemm_context *c, ptrdiff_t *counters, int threads) {
    const ptrdiff_t units = c->n_panels * c->k_shares;
    ptrdiff_t *shares = &counters[0], *panels = &counters[COUNTER_SPACING];
    for (ptrdiff_t unit = dmlq_claim(shares); unit < units; unit = dmlq_claim(shares)) dot_share(c, unit);
    dmlq_barrier(threads);
    for (ptrdiff_t panel = dmlq_claim(panels); panel < c->n_panels; panel = dmlq_claim(panels))
        requantize_shares(c, panel);
}

/* Tiles of A panels [first, end) with the B block from panel nb (up to n_end). */
static void compute_a_panels(const gemm_context *c, const packed_operands *pk, int thread, ptrdiff_t batch,
                             ptrdiff_t first, ptrdiff_t end, ptrdiff_t nb, ptrdiff_t n_end) {
    if (c->b_in_place) {
        for (ptrdiff_t m = first; m < end; m++) compute_block(c, pk, batch, m, nb, n_end);
        return;
    }
    compute_block_tiles(c, pk, thread, batch, first, end, nb, min_size(nb + block_panels(c), n_end),
                        b_panels(c, pk, batch) + nb * c->b_panel_bytes);
}

static void run_batches_per_thread(const gemm_context *c, int thread) {
    packed_operands *pk = &c->packed[thread];
    const dmlq_gemm_problem *p = c->p;
    for (ptrdiff_t batch = dmlq_claim(&c->counters[0]); batch < p->batches; batch = dmlq_claim(&c->counters[0])) {
        if (pk->a_offset != p->a_offsets[batch]) pack_a_panels(c, pk, batch, first_a_panel_to_pack(c), c->m_panels);
        if (!p->packed_b && pk->b_offset != p->b_offsets[batch]) pack_b_chunks(c, pk, batch, 0, chunks_to_pack(c));
        pk->a_offset = p->a_offsets[batch];
        pk->b_offset = p->b_offsets[batch];
        for (ptrdiff_t nb = 0; nb < c->n_panels; nb += block_panels(c))
            compute_a_panels(c, pk, thread, batch, 0, c->m_panels, nb, c->n_panels);
    }
}

/* One batch shared by all threads: its work is split into one range per thread (panels to pack,
 * tiles to compute: a range of B panels, or of A panels when B has too few). Each thread works
 * through its own range first, for locality, then helps with the others' (a descheduled thread
 * delays only the unit it holds). */
typedef struct {
    const gemm_context *c;
    ptrdiff_t batch, first_a_panel, a_panels_to_pack, b_chunks_to_pack;
    int threads;
} batch_work;

static ptrdiff_t range_start(ptrdiff_t count, int range, int ranges) { return count * range / ranges; }

static ptrdiff_t pack_units(const batch_work *w, int r) {
    return range_start(w->a_panels_to_pack, r + 1, w->threads) - range_start(w->a_panels_to_pack, r, w->threads) +
           range_start(w->b_chunks_to_pack, r + 1, w->threads) - range_start(w->b_chunks_to_pack, r, w->threads);
}

static void pack_unit(const batch_work *w, int thread, int r, ptrdiff_t unit) {
    (void)thread;
    const ptrdiff_t a_first = range_start(w->a_panels_to_pack, r, w->threads);
    const ptrdiff_t a_units = range_start(w->a_panels_to_pack, r + 1, w->threads) - a_first;
    if (unit < a_units) {
        const ptrdiff_t panel = w->first_a_panel + a_first + unit;
        pack_a_panels(w->c, w->c->packed, w->batch, panel, panel + 1);
    } else {
        const ptrdiff_t chunk = range_start(w->b_chunks_to_pack, r, w->threads) + unit - a_units;
        pack_b_chunks(w->c, w->c->packed, w->batch, chunk, chunk + 1);
    }
}

/* A claim is a lock'd instruction, which waits until the tiles before it have stored their output: one
 * claim per tile of K = 4096 cost 4 % of a 2048 x 4096 x 4096 product (Zen 5, 1 thread). A unit of work
 * is therefore a block of B panels with as many A panels as make UNIT_GROUPS groups of 4 k, at most a
 * sixteenth of them, so that the threads still share out enough units (the last one's tiles wait). */
enum { UNIT_GROUPS = 2048, MIN_A_UNITS = 16 };

static ptrdiff_t a_panels_per_unit(const gemm_context *c) {
    const ptrdiff_t block_groups = c->groups * block_panels(c);
    const ptrdiff_t most = c->m_panels / MIN_A_UNITS;
    return most < 1 ? 1 : min_size((UNIT_GROUPS + block_groups - 1) / block_groups, most);
}

static ptrdiff_t a_panel_groups(const gemm_context *c) { return (c->m_panels + c->a_per_unit - 1) / c->a_per_unit; }

/* Unit `group` of A panels (a_per_unit of them) with the B block from panel nb. */
static void compute_blocks(const gemm_context *c, int thread, ptrdiff_t group, ptrdiff_t nb, ptrdiff_t n_end,
                           ptrdiff_t batch) {
    const ptrdiff_t first = group * c->a_per_unit;
    compute_a_panels(c, c->packed, thread, batch, first, min_size(first + c->a_per_unit, c->m_panels), nb, n_end);
}

static int split_columns(const batch_work *w) { return shares_columns(w->c, w->threads); }

static ptrdiff_t compute_units(const batch_work *w, int r) {
    const gemm_context *c = w->c;
    const ptrdiff_t block = block_panels(c);
    if (split_columns(w)) {
        const ptrdiff_t columns = range_start(c->n_panels, r + 1, w->threads) - range_start(c->n_panels, r, w->threads);
        return c->b_by_chunk ? pack_chunks(columns) : (columns + block - 1) / block * a_panel_groups(c);
    }
    const ptrdiff_t rows = range_start(c->m_panels, r + 1, w->threads) - range_start(c->m_panels, r, w->threads);
    return (c->n_panels + block - 1) / block * rows;
}

static void compute_unit(const batch_work *w, int thread, int r, ptrdiff_t unit) {
    const gemm_context *c = w->c;
    const ptrdiff_t block = block_panels(c);
    if (split_columns(w)) {
        const ptrdiff_t first = range_start(c->n_panels, r, w->threads), end = range_start(c->n_panels, r + 1, w->threads);
        if (c->b_by_chunk)
            pack_and_compute_chunk(c, thread, first + unit * PACK_PANELS,
                                   min_size(first + (unit + 1) * PACK_PANELS, end));
        else
            compute_blocks(c, thread, unit % a_panel_groups(c), first + unit / a_panel_groups(c) * block, end,
                           w->batch);
    } else {
        const ptrdiff_t first = range_start(c->m_panels, r, w->threads);
        const ptrdiff_t rows = range_start(c->m_panels, r + 1, w->threads) - first;
        compute_block(c, c->packed, w->batch, first + unit % rows, unit / rows * block, c->n_panels);
    }
}

static void claim_own_range_first(const batch_work *w, ptrdiff_t *counters, int thread,
                                  ptrdiff_t (*units)(const batch_work *, int),
                                  void (*run)(const batch_work *, int, int, ptrdiff_t)) {
    for (int k = 0; k < w->threads; k++) {
        const int r = (thread + k) % w->threads;
        const ptrdiff_t count = units(w, r);
        ptrdiff_t *counter = &counters[r * COUNTER_SPACING];
        for (ptrdiff_t unit = dmlq_claim(counter); unit < count; unit = dmlq_claim(counter))
            run(w, thread, r, unit);
    }
}

/* A batch's claim counters of one phase (0: packing, 1: tiles), one per range, COUNTER_SPACING apart. */
static ptrdiff_t *batch_counters(const gemm_context *c, ptrdiff_t batch, int phase) {
    return &c->counters[(batch * 2 + phase) * c->counter_stride * COUNTER_SPACING];
}

static void run_batches_together(const gemm_context *c, int thread, int threads) {
    const dmlq_gemm_problem *p = c->p;
    ptrdiff_t a_offset = c->packed_ahead ? p->a_offsets[0] : -1, b_offset = c->packed_ahead ? p->b_offsets[0] : -1;
    for (ptrdiff_t batch = 0; batch < p->batches; batch++) {
        const int new_a = a_offset != p->a_offsets[batch];
        const int new_b = !p->packed_b && b_offset != p->b_offsets[batch];
        const ptrdiff_t first_a = first_a_panel_to_pack(c);
        const batch_work w = {c, batch, first_a, new_a ? c->m_panels - first_a : 0, new_b ? chunks_to_pack(c) : 0,
                              threads};
        if (w.a_panels_to_pack || w.b_chunks_to_pack) {
            if (batch > 0) dmlq_barrier(threads); /* the previous batch's tiles are done with the panels */
            claim_own_range_first(&w, batch_counters(c, batch, 0), thread, pack_units, pack_unit);
            dmlq_barrier(threads);
        }
        a_offset = p->a_offsets[batch];
        b_offset = p->b_offsets[batch];
        if (c->k_shares > 1)
            compute_split_k(c, batch_counters(c, batch, 1), threads);
        else
            claim_own_range_first(&w, batch_counters(c, batch, 1), thread, compute_units, compute_unit);
    }
}

static void run_task(void *context, int thread, int threads) {
    const gemm_context *c = context;
    if (c->kernels->begin) c->kernels->begin();
    if (c->per_thread_batches)
        run_batches_per_thread(c, thread);
    else
        run_batches_together(c, thread, threads);
    if (c->kernels->end) c->kernels->end();
}

static const gemm_kernels *kernels_for_level(void) {
#if DMLQ_X86
    if (dmlq_level() >= DMLQ_LEVEL_AMX) return &dmlq_gemm_amx;
    if (dmlq_level() >= DMLQ_LEVEL_VNNI) return &dmlq_gemm_vnni;
    if (dmlq_level() >= DMLQ_LEVEL_AVX2) return &dmlq_gemm_avx2;
#endif
    return &dmlq_gemm_portable;
}

const char *dmlq_gemm_kernel_set(void) {
#if DMLQ_X86
    const gemm_kernels *kernels = kernels_for_level();
    if (kernels == &dmlq_gemm_amx) return "amx";
    if (kernels == &dmlq_gemm_vnni) return "avx512_vnni";
    if (kernels == &dmlq_gemm_avx2) return "avx2";
#endif
    return "portable";
}

int dmlq_gemm_packed_for_current_level(const dmlq_packed_b *packed) { return packed->kernels == kernels_for_level(); }

/* K's groups of 4, padded to whole steps of the kernel set. */
static ptrdiff_t padded_groups(const gemm_kernels *kernels, ptrdiff_t k) {
    const int step = kernels->group_multiple;
    return ((k + 3) / 4 + step - 1) / step * step;
}

/* Rows of A with their quantization and row sums: whole panels, or A'' (one panel of any height). */
static ptrdiff_t padded_rows(const gemm_context *c) { return c->b_in_place ? c->p->m : c->m_panels * c->kernels->mr; }

static int estimable(double factor) { return fabs(factor) >= 0x1p-60 && fabs(factor) <= 0x1p60; }

/* [*low, *high] widened to the bits of |x|, which order as the magnitudes do (NaN above infinity). */
static inline void widen_range(float x, uint32_t *low, uint32_t *high) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    bits &= 0x7fffffffu;
    *low = bits < *low ? bits : *low;
    *high = bits > *high ? bits : *high;
}

/* The column side of the quantization (from B's scales and zero points alone): per column, padded to
 * whole panels with zeros (and factors of 1), and what the requantization needs to know of them all. */
typedef struct {
    double *b_scale;
    float *factor;
    int32_t *b_zero;
    int finite, estimable, uniform; /* no NaN or infinity; within estimable(); one zb' for every column */
    double largest;                 /* the largest |scale| */
} column_quantization;

/* How many values the problem's b_scale and b_zero_point hold. */
static ptrdiff_t column_values(const dmlq_gemm_problem *p) { return p->b_per_tensor ? 1 : p->n; }

static void fill_columns(const dmlq_gemm_problem *p, ptrdiff_t columns, int32_t zero_shift, column_quantization *out) {
    /* In simple loops over local pointers (N may be large) */
    const float *restrict scales = p->b_scale;
    const int32_t *restrict zero_points = p->b_zero_point;
    double *restrict b_scale = out->b_scale;
    float *restrict column_factor = out->factor;
    int32_t *restrict b_zero = out->b_zero;
    const ptrdiff_t values = column_values(p);
    /* The range of the scales' magnitudes as bits (widen_range): integer minima and maxima that the
     * compiler vectorises, in SCAN_LANES independent lanes (a float reduction is one long chain) */
    enum { SCAN_LANES = 16 };
    uint32_t low[SCAN_LANES], high[SCAN_LANES];
    for (int j = 0; j < SCAN_LANES; j++) low[j] = 0x7f800000u, high[j] = 0;
    ptrdiff_t scanned = 0;
    for (; scanned + SCAN_LANES <= values; scanned += SCAN_LANES)
        for (int j = 0; j < SCAN_LANES; j++) widen_range(scales[scanned + j], &low[j], &high[j]);
    for (; scanned < values; scanned++) widen_range(scales[scanned], &low[0], &high[0]); /* the last few */
    uint32_t smallest_bits = low[0], largest_bits = high[0];
    for (int j = 1; j < SCAN_LANES; j++) {
        smallest_bits = low[j] < smallest_bits ? low[j] : smallest_bits;
        largest_bits = high[j] > largest_bits ? high[j] : largest_bits;
    }
    int uniform = 1;
    for (ptrdiff_t n = 0; n < values; n++) uniform &= zero_points[n] == zero_points[0];
    float smallest, largest;
    memcpy(&smallest, &smallest_bits, 4);
    memcpy(&largest, &largest_bits, 4);
    const ptrdiff_t step = p->b_per_tensor ? 0 : 1; /* from one column's value to the next one's */
    for (ptrdiff_t n = 0; n < columns; n++) {
        const int real = n < p->n;
        b_scale[n] = real ? (double)scales[n * step] : 0.0;
        column_factor[n] = real ? scales[n * step] : 1.0f;
        b_zero[n] = real ? zero_points[n * step] - zero_shift : 0;
    }
    out->finite = largest_bits <= 0x7f7fffffu;
    out->estimable = estimable(smallest) && estimable(largest);
    out->uniform = uniform;
    out->largest = largest;
}

/* What B's zero points are shifted by in zb' (gemm_kernels.h): 128 for uint8 B, unless B is read in place. */
static int32_t zero_shift(const gemm_context *c) { return c->p->b_signed || c->b_in_place ? 0 : 128; }

/* The column side's vectors in a workspace, after the rows' (lay_out). */
static column_quantization own_columns(const gemm_context *c, double *doubles, float *floats, int32_t *zeros) {
    const ptrdiff_t rows = padded_rows(c);
    return (column_quantization){.b_scale = doubles + 3 * rows, .factor = floats + rows, .b_zero = zeros + rows};
}

/* A packed B's column side of the last problem it served, keyed by that problem's scales and zero
 * points (their bits): a packed B's are mostly the same from call to call (a layer's weights), and
 * recomputing them cost 0.5 us of a 5 us 1 x 768 x 768 call (Zen 5). One caller at a time uses it. */
struct dmlq_column_cache {
    long busy;
    int valid, per_tensor;
    float *scales;        /* the key: the problem's b_per_tensor, b_scale and b_zero_point ([n] at most) */
    int32_t *zero_points;
    column_quantization columns;
};

static size_t column_cache_bytes(ptrdiff_t n, ptrdiff_t columns) {
    return sizeof(struct dmlq_column_cache) + (sizeof(float) + sizeof(int32_t)) * (size_t)n +
           (sizeof(double) + sizeof(float) + sizeof(int32_t)) * (size_t)columns;
}

static struct dmlq_column_cache *new_column_cache(ptrdiff_t n, ptrdiff_t columns) {
    struct dmlq_column_cache *cache = dmlq_allocate(column_cache_bytes(n, columns));
    if (!cache) return NULL;
    char *memory = (char *)(cache + 1); /* the doubles first: the struct's size keeps them aligned */
    *cache = (struct dmlq_column_cache){.columns.b_scale = (double *)memory};
    memory += sizeof(double) * (size_t)columns;
    cache->columns.factor = (float *)memory;
    memory += sizeof(float) * (size_t)columns;
    cache->columns.b_zero = (int32_t *)memory;
    memory += sizeof(int32_t) * (size_t)columns;
    cache->scales = (float *)memory;
    cache->zero_points = (int32_t *)(memory + sizeof(float) * (size_t)n);
    return cache;
}

static int same_key(const struct dmlq_column_cache *cache, const dmlq_gemm_problem *p) {
    const size_t values = (size_t)column_values(p);
    return cache->valid && cache->per_tensor == p->b_per_tensor &&
           !memcmp(cache->scales, p->b_scale, sizeof(float) * values) &&
           !memcmp(cache->zero_points, p->b_zero_point, sizeof(int32_t) * values);
}

/* The problem's column side: its packed B's cache (then taken, to be given back by the caller),
 * filled unless it holds this problem's already, or else `own` filled. */
static const column_quantization *columns_of(const gemm_context *c, column_quantization *own, long **taken) {
    const dmlq_gemm_problem *p = c->p;
    const ptrdiff_t columns = c->n_panels * c->kernels->nr;
    struct dmlq_column_cache *cache = p->packed_b ? p->packed_b->column_cache : NULL;
    *taken = NULL;
    if (!cache || !dmlq_take_flag(&cache->busy)) {
        fill_columns(p, columns, zero_shift(c), own);
        return own;
    }
    *taken = &cache->busy;
    if (!same_key(cache, p)) {
        fill_columns(p, columns, zero_shift(c), &cache->columns);
        memcpy(cache->scales, p->b_scale, sizeof(float) * (size_t)column_values(p));
        memcpy(cache->zero_points, p->b_zero_point, sizeof(int32_t) * (size_t)column_values(p));
        cache->per_tensor = p->b_per_tensor;
        cache->valid = 1;
    }
    return &cache->columns;
}

static int same_bits(float x, float y) { return memcmp(&x, &y, sizeof x) == 0; }

/* Whether row m's scales and zero points are row m - 1's, bit for bit: its quantization is then the
 * same, without the divisions (11 us of a 2048 x 768 x 768 call otherwise, Zen 5). */
static int same_row_parameters(const dmlq_gemm_problem *p, ptrdiff_t m) {
    return same_bits(p->a_scale[m], p->a_scale[m - 1]) && same_bits(p->out_scale[m], p->out_scale[m - 1]) &&
           same_bits(p->out_zero_point[m], p->out_zero_point[m - 1]) && p->a_zero_point[m] == p->a_zero_point[m - 1];
}

/* The per-row vectors, padded with zeros (and factors of 1) to whole panels, with the column side. */
static void fill_quantization(gemm_context *c, double *doubles, float *floats, int32_t *zeros,
                              const column_quantization *columns) {
    const dmlq_gemm_problem *p = c->p;
    const ptrdiff_t rows = padded_rows(c);
    double *a_scale = doubles, *divisor = a_scale + rows, *zero_point = divisor + rows;
    float *row_factor = floats;
    int32_t *a_zero = zeros;
    int nan_possible = 0, estimate = 1, a_zero_uniform = 1, rows_uniform = 1;
    double largest_row_factor = 0.0;
    for (ptrdiff_t m = 0; m < rows; m++) {
        const int real = m < p->m;
        if (real && m > 0 && same_row_parameters(p, m)) { /* per-tensor ones, given for every row */
            a_scale[m] = a_scale[m - 1], divisor[m] = divisor[m - 1], zero_point[m] = zero_point[m - 1];
            row_factor[m] = row_factor[m - 1], a_zero[m] = a_zero[m - 1];
            continue;
        }
        a_scale[m] = real ? (double)p->a_scale[m] : 0.0;
        divisor[m] = !real ? 1.0 : p->reciprocal ? (double)(1.0f / p->out_scale[m]) : (double)p->out_scale[m];
        const double factor = !real ? 1.0 : a_scale[m] * (p->reciprocal ? divisor[m] : 1.0 / divisor[m]);
        row_factor[m] = (float)factor;
        zero_point[m] = real ? (double)p->out_zero_point[m] : 0.0;
        a_zero[m] = real && !c->b_in_place ? p->a_zero_point[m] + (p->a_signed ? 128 : 0) : 0;
        nan_possible |= !isfinite(a_scale[m]) || !isfinite(divisor[m]) || divisor[m] == 0.0 || !isfinite(1.0 / divisor[m]);
        estimate &= estimable(factor);
        largest_row_factor = fmax(largest_row_factor, fabs(factor));
        a_zero_uniform &= !real || a_zero[m] == a_zero[0];
        rows_uniform &= !real || (row_factor[m] == row_factor[0] && zero_point[m] == zero_point[0]);
    }
    nan_possible |= !columns->finite;
    estimate &= columns->estimable;
    /* |acc| <= K * 255 * 255: every estimate stays below 2**20, with room for its roundings */
    estimate &= largest_row_factor * columns->largest * dmlq_gemm_sum_bound(p) < 0x1p19;
    c->q = (gemm_quantization){p->k,          a_scale,          columns->b_scale,  divisor,
                               zero_point,    a_zero,           columns->b_zero,   row_factor,
                               columns->factor, p->reciprocal,  nan_possible,      estimate && !nan_possible,
                               a_zero_uniform, columns->uniform, p->out_signed ? -128.0 : 0.0,
                               p->out_signed ? 127.0 : 255.0};
    c->q.rows_uniform = rows_uniform;
}

/* A workspace being laid out: pieces of whole cache lines from `base` on (NULL: only measuring). */
typedef struct {
    char *base;
    size_t used;
} layout;

static void *carve(layout *l, size_t bytes) {
    void *piece = l->base ? l->base + l->used : NULL;
    l->used += (bytes + 63) / 64 * 64;
    return piece;
}

/* The workspace's pieces: the quantization vectors, the split K's sums, the threads' widened blocks of B,
 * then each thread's packed operands. */
static void lay_out(layout *l, const gemm_context *c, packed_operands *packed, int buffers, double **doubles,
                    float **floats, int32_t **zeros, int64_t **partials, int8_t **wide) {
    const ptrdiff_t rows = padded_rows(c), columns = c->n_panels * c->kernels->nr;
    *doubles = carve(l, sizeof(double) * (size_t)(3 * rows + columns));
    *floats = carve(l, sizeof(float) * (size_t)(rows + columns));
    *zeros = carve(l, sizeof(int32_t) * (size_t)(rows + columns));
    *partials = carve(l, sizeof(int64_t) * GEMM_MAX_TILE * (size_t)(c->k_shares > 1 ? c->n_panels * c->k_shares : 0));
    *wide = carve(l, c->wide_b ? (size_t)(c->counter_stride * wide_region_bytes(c)) : 0);
    for (int i = 0; i < buffers; i++) {
        packed_operands *pk = &packed[i];
        pk->a = carve(l, (size_t)(c->m_panels * c->a_panel_bytes));
        const int own_b = !c->p->packed_b; /* else the panels packed beforehand are read */
        /* B read in place: only a column tail is copied, as rows of NR bytes; B by chunk: a chunk per thread */
        const ptrdiff_t packed_panels = c->b_by_chunk ? c->counter_stride * chunk_buffer_panels(c)
                                        : !c->b_in_place ? c->n_panels
                                                         : c->p->n % c->kernels->nr != 0;
        pk->b = carve(l, own_b ? (size_t)(packed_panels * c->b_panel_bytes) : 0);
        pk->row_sums = carve(l, sizeof(int32_t) * (size_t)rows);
        pk->column_sums = carve(l, own_b ? sizeof(int32_t) * (size_t)columns : 0);
        pk->a_offset = pk->b_offset = -1;
    }
}

/* The packing buffers of the last multiply are kept for the next one (up to WORKSPACE_MAX_BYTES):
 * fresh pages cost a fault each, as much time as packing them. One caller at a time uses them. */
enum { WORKSPACE_MAX_BYTES = 64 << 20 };
static struct {
    char *memory;
    size_t bytes;
    long busy;
} workspace;

static char *workspace_take(size_t bytes, int *kept) {
    *kept = 0;
    if (!dmlq_take_flag(&workspace.busy)) return dmlq_allocate(bytes);
    if (workspace.bytes < bytes) {
        dmlq_release(workspace.memory);
        workspace.memory = bytes <= WORKSPACE_MAX_BYTES ? dmlq_allocate(bytes) : NULL;
        workspace.bytes = workspace.memory ? bytes : 0;
    }
    if (workspace.memory) {
        *kept = 1;
        return workspace.memory;
    }
    dmlq_give_flag(&workspace.busy);
    return dmlq_allocate(bytes);
}

static void workspace_give(char *memory, int kept) {
    if (kept)
        dmlq_give_flag(&workspace.busy);
    else
        dmlq_release(memory);
}

/* A matrix-vector product or a few rows: reading B once, straight from a row-major B, beats packing
 * it first (which reads and writes it all, then reads it again). Up to the kernels'
 * row_major_rows_always rows always; beyond (up to row_major_rows) the packed kernels' taller tiles
 * may win back the packing while B stays in the caches, the more so the more rows, so B is read in
 * place only from DIRECT_BYTES_PER_ROW bytes per row beyond 3 on (AVX2's, measured on Zen 3: 8 MiB
 * for 5 rows, 20 MiB for 8). */
enum { DIRECT_BYTES_PER_ROW = 4 << 20 };

static int reads_b_directly(const dmlq_gemm_problem *p, const gemm_kernels *kernels, ptrdiff_t groups) {
    const int large = p->k * p->n >= (p->m - 3) * (ptrdiff_t)DIRECT_BYTES_PER_ROW;
    const int rows_fit = p->m <= kernels->row_major_rows_always || (p->m <= kernels->row_major_rows && large);
    return kernels->dot_row_major && !p->packed_b && p->batches == 1 && p->b_col == 1 && rows_fit &&
           p->m * kernels->nr <= ROW_MAJOR_TILE && p->k % 2 == 0 && groups <= GEMM_CHUNK_GROUPS &&
           dmlq_gemm_sum_bound(p) <= INT32_MAX;
}

/* Packing a few panels in the caller beats packing them on every thread between two barriers: a
 * barrier waits for the slowest thread to be scheduled, which on a busy machine is a scheduler turn. */
enum { PACK_AHEAD_BYTES = 256 * 1024 };

static int packs_ahead(const gemm_context *c, int threads) {
    const ptrdiff_t b_bytes = c->p->packed_b ? 0 : chunks_to_pack(c) * PACK_PANELS * c->b_panel_bytes;
    return threads > 1 && !c->per_thread_batches && c->p->batches == 1 &&
           (c->m_panels - first_a_panel_to_pack(c)) * c->a_panel_bytes + b_bytes <= PACK_AHEAD_BYTES;
}

/* The kernels of one multiply: its packed B's, else the level's. The VNNI level reads a row-major B
 * in place with its own direct kernel (dmlq_gemm_vnni_rows), which has no packed one. The AMX set
 * has no direct kernel; up to row_major_rows_always rows, AVX2's (which every such CPU runs) reads B once
 * where packing it would read it twice and write it once, and a product of so few rows waits on
 * B's bytes, not on multiplies. Not measured on such a CPU: more rows stay with their own tiles. */
static const gemm_kernels *kernels_for(const dmlq_gemm_problem *p) {
    if (p->packed_b) return p->packed_b->kernels;
    const gemm_kernels *level = kernels_for_level();
#if DMLQ_X86
    const gemm_kernels *direct = level == &dmlq_gemm_vnni ? &dmlq_gemm_vnni_rows : &dmlq_gemm_avx2;
    if (level == &dmlq_gemm_vnni && reads_b_directly(p, direct, padded_groups(direct, p->k))) return direct;
    if (level == &dmlq_gemm_amx && p->m <= direct->row_major_rows_always &&
        reads_b_directly(p, direct, padded_groups(direct, p->k)))
        return direct;
#endif
    return level;
}

/* K's shares per B panel (1: K is not split): one per thread where a few rows (one A panel) meet
 * fewer B panels than threads and at least SPLIT_K_BYTES of them, so that waking a thread pays.
 * Not for the AMX kernel, which keeps its own course. */
enum { SPLIT_K_BYTES = 256 * 1024 };

static ptrdiff_t split_k_shares(const gemm_context *c, int threads) {
    const int few_panels = c->m_panels == 1 && c->n_panels < threads && c->p->batches == 1 && !c->b_in_place;
    const int worth_it =
        c->n_panels * c->b_panel_bytes >= SPLIT_K_BYTES && c->groups >= threads * c->kernels->group_multiple;
#if DMLQ_X86
    if (c->kernels == &dmlq_gemm_amx) return 1;
#endif
    return threads > 1 && few_panels && worth_it ? threads : 1;
}

/* AVX2's kernel sign-extends B's bytes to words as it loads them: one shuffle per 6 multiply-adds (and as
 * many additions), on the pipes they use. Where each B panel meets WIDE_MIN_A_PANELS A panels or more, each
 * thread instead widens each of its blocks of B once into a buffer of its own (twice the bytes, half the
 * panels, so that it stays in L2). Zen 5, level avx2, medians of 3-4 interleaved runs: 2048 x 768 x 768
 * u8 x s8 190-194 -> 204-206 GOPS at 1 thread; u8 x u8 376-383 -> 399-404 at 2; 2048 x 4096 x 4096
 * 404-405 -> 426-427 at 2; 64 x 768 x 768 +3.5 %, 128 x 4096 x 4096 +1 %; but 32 x 4096 x 4096 (6 A
 * panels, B from L3) lost 10 % and 16 x 1024 x 1024 4 %. A doubled block gained nothing. A B packed by the
 * call a chunk at a time is widened block by block after each chunk's packing: unpacked 2048 x 4096 x 4096
 * 395-398 -> 417-419 GOPS, 128 x 4096 x 11008 373-383 -> 392-402 at 2 threads; batches taken whole by
 * the threads too: packed [4, 256, 768, 768] 381-384 -> 404-407. Only where threads share B by columns
 * in one K chunk, or take whole batches (compute_a_panels, pack_and_compute_chunk). */
enum { WIDE_MIN_A_PANELS = 16 };

static int widens_b(const gemm_context *c, int threads) {
    return c->kernels->dot_wide && c->int32_sums && !c->b_in_place && c->k_shares == 1 &&
           (c->per_thread_batches || shares_columns(c, threads)) && c->m_panels >= WIDE_MIN_A_PANELS;
}

/* A multiply's claim counters and packed operands up to these counts live on its caller's stack (one
 * batch on two threads needs 4 and 1): calloc and free were 4 % of a 1 x 64 x 48 call. Only the
 * counters in use are zeroed, and the operands are left to lay_out, which sets each in use: zeroing
 * both arrays whole took two `rep stos` of ~10 ns each (Zen 5), 4 % of a 4 x 4 x 4 call. */
enum { LOCAL_COUNTERS = 16, LOCAL_BUFFERS = 4 };

int dmlq_gemm(const dmlq_gemm_problem *p, int threads) {
    gemm_context c = {.p = p, .kernels = kernels_for(p)};
    const int mr = c.kernels->mr, nr = c.kernels->nr;
    c.groups = padded_groups(c.kernels, p->k);
    c.b_in_place = reads_b_directly(p, c.kernels, c.groups);
    c.m_panels = c.b_in_place ? 1 : (p->m + mr - 1) / mr;
    c.n_panels = (p->n + nr - 1) / nr;
    c.a_panel_bytes = c.b_in_place ? (ptrdiff_t)sizeof(int16_t) * p->k * p->m
                                   : c.groups * (c.kernels->pack_a ? c.kernels->a_group_bytes : mr * 4);
    c.a_in_place = !c.b_in_place && !c.kernels->pack_a && !p->a_signed && p->a_col == 1 && p->k == c.groups * 4;
    c.b_panel_bytes = c.groups * nr * 4;
    c.int32_sums = c.groups <= GEMM_CHUNK_GROUPS && dmlq_gemm_sum_bound(p) <= INT32_MAX;
    if ((double)p->batches * p->m * p->n * p->k * 2.0 < SERIAL_OPERATIONS) threads = 1;
    c.per_thread_batches = threads > 1 && p->batches > 1 && (p->batches % threads == 0 || p->batches >= 4 * threads);
    c.k_shares = split_k_shares(&c, threads);
    c.b_by_chunk = packs_b_by_chunk(&c, threads);
    c.counter_stride = threads;
    c.wide_b = widens_b(&c, threads);
    c.a_per_unit = a_panels_per_unit(&c);
    const int buffers = c.per_thread_batches ? threads : 1;
    const ptrdiff_t counters = 2 * p->batches * threads;
    packed_operands local_packed[LOCAL_BUFFERS];
    _Alignas(64) ptrdiff_t local_counters[LOCAL_COUNTERS * COUNTER_SPACING];
    packed_operands *packed = buffers <= LOCAL_BUFFERS ? local_packed : calloc((size_t)buffers, sizeof(packed_operands));
    double *doubles;
    float *floats;
    int32_t *zeros;
    layout measured = {NULL, 0};
    if (packed) lay_out(&measured, &c, packed, buffers, &doubles, &floats, &zeros, &c.partials, &c.wide);
    int kept = 0;
    layout l = {packed ? workspace_take(measured.used, &kept) : NULL, 0};
    const size_t counter_bytes = sizeof(ptrdiff_t) * (size_t)(counters * COUNTER_SPACING);
    c.counters = counters <= LOCAL_COUNTERS ? local_counters : dmlq_allocate(counter_bytes);
    if (c.counters) memset(c.counters, 0, counter_bytes);
    const int status = l.base && c.counters ? 0 : -1;
    long *cache_taken = NULL;
    if (status == 0) {
        lay_out(&l, &c, packed, buffers, &doubles, &floats, &zeros, &c.partials, &c.wide);
        for (ptrdiff_t t = 0; c.wide_b && t < c.counter_stride; t++) /* no block widened yet */
            *(ptrdiff_t *)(c.wide + t * wide_region_bytes(&c)) = -1;
        column_quantization own = own_columns(&c, doubles, floats, zeros);
        fill_quantization(&c, doubles, floats, zeros, columns_of(&c, &own, &cache_taken));
        c.q.epilogue = p->epilogue;
        if (c.b_in_place) /* multiplied by za' = 0: any value would do, but not an unset one */
            memset(packed->column_sums, 0, sizeof(int32_t) * (size_t)(c.n_panels * nr));
        c.row_sums_needed = c.b_in_place || !c.q.b_zero_uniform || (p->n > 0 && c.q.b_zero[0] != 0);
        for (int i = 0; i < buffers && !c.row_sums_needed; i++)
            memset(packed[i].row_sums, 0, sizeof(int32_t) * (size_t)padded_rows(&c));
        c.int32_direct = !c.wide_b && c.int32_sums && c.kernels->dot_int32 && p->epilogue &&
                         p->epilogue->kind == DMLQ_EPILOGUE_INT32 &&
                         p->out_col == (ptrdiff_t)sizeof(int32_t);
        c.requantize_direct =
            !c.wide_b && c.int32_sums && c.kernels->dot_requantize && !p->epilogue && p->out_col == 1 && c.q.estimate;
        c.packed = packed;
        c.packed_ahead = packs_ahead(&c, threads);
        if (c.packed_ahead) {
            pack_a_panels(&c, packed, 0, first_a_panel_to_pack(&c), c.m_panels);
            pack_b_chunks(&c, packed, 0, 0, p->packed_b ? 0 : chunks_to_pack(&c));
        }
        dmlq_parallel(run_task, &c, threads);
        if (cache_taken) dmlq_give_flag(cache_taken);
    }
    if (c.counters != local_counters) dmlq_release(c.counters);
    if (packed != local_packed) free(packed);
    if (l.base) workspace_give(l.base, kept);
    return status;
}

void *dmlq_gemm_workspace_take(size_t bytes, int *kept) { return workspace_take(bytes, kept); }

void dmlq_gemm_workspace_give(void *memory, int kept) { workspace_give(memory, kept); }

/* ---- sums computed elsewhere ------------------------------------------------------------------- */

int dmlq_requantizer_init(dmlq_requantizer *r, const dmlq_gemm_problem *p) {
    gemm_context c = {.p = p, .kernels = kernels_for_level()};
    c.m_panels = (p->m + c.kernels->mr - 1) / c.kernels->mr;
    c.n_panels = (p->n + c.kernels->nr - 1) / c.kernels->nr;
    double *doubles;
    float *floats;
    int32_t *zeros;
    int64_t *partials; /* none: no split K here */
    int8_t *wide;      /* none: no tiles here */
    layout l = {NULL, 0};
    lay_out(&l, &c, NULL, 0, &doubles, &floats, &zeros, &partials, &wide);
    l.base = r->memory = dmlq_allocate(l.used);
    if (!r->memory) return -1;
    l.used = 0;
    lay_out(&l, &c, NULL, 0, &doubles, &floats, &zeros, &partials, &wide);
    column_quantization columns = own_columns(&c, doubles, floats, zeros);
    fill_columns(p, c.n_panels * c.kernels->nr, zero_shift(&c), &columns);
    fill_quantization(&c, doubles, floats, zeros, &columns);
    r->q = c.q;
    r->requantize = c.kernels->requantize;
    r->columns = c.kernels->nr;
    return 0;
}

void dmlq_requantizer_free(dmlq_requantizer *r) { dmlq_release(r->memory); }

/* ---- B packed beforehand ---------------------------------------------------------------------- */

typedef struct {
    const dmlq_packed_b *packed;
    const char *b;
    const ptrdiff_t *offsets;
    ptrdiff_t groups, b_row, b_col;
    ptrdiff_t next_unit; /* the next chunk to claim, counted over every batch */
} pack_job;

static void pack_beforehand(void *context, int thread, int threads) {
    (void)thread, (void)threads;
    pack_job *job = context;
    const dmlq_packed_b *packed = job->packed;
    const ptrdiff_t chunks = pack_chunks(packed->n_panels);
    for (ptrdiff_t unit = dmlq_claim(&job->next_unit); unit < packed->batches * chunks;
         unit = dmlq_claim(&job->next_unit)) {
        const ptrdiff_t batch = unit / chunks, first = unit % chunks * PACK_PANELS;
        int8_t *panels = packed->panels + batch * packed->n_panels * packed->panel_bytes;
        const b_packing chunk = {packed->kernels, job->b + job->offsets[batch], packed->n, packed->k, job->groups,
                                 job->b_row, job->b_col, b_flip(packed->b_signed), panels, packed->panel_bytes,
                                 packed->column_sums + batch * packed->sums_per_batch};
        pack_b_chunk(&chunk, first, min_size(first + PACK_PANELS, packed->n_panels));
    }
}

int dmlq_gemm_pack_b(dmlq_packed_b *packed, const char *b, const ptrdiff_t *offsets, ptrdiff_t batches, ptrdiff_t k,
                     ptrdiff_t n, ptrdiff_t b_row, ptrdiff_t b_col, int b_signed, int threads) {
    const gemm_kernels *kernels = kernels_for_level();
    const ptrdiff_t groups = padded_groups(kernels, k), n_panels = (n + kernels->nr - 1) / kernels->nr;
    *packed = (dmlq_packed_b){kernels, batches, k, n, n_panels, groups * kernels->nr * 4, n_panels * kernels->nr, b_signed};
    packed->panels = dmlq_allocate((size_t)(batches * n_panels * packed->panel_bytes));
    packed->column_sums = dmlq_allocate(sizeof(int32_t) * (size_t)(batches * packed->sums_per_batch));
    packed->column_cache = new_column_cache(n, packed->sums_per_batch);
    if (!packed->panels || !packed->column_sums || !packed->column_cache) {
        dmlq_gemm_free_packed_b(packed);
        return -1;
    }
    pack_job job = {packed, b, offsets, groups, b_row, b_col, 0};
    if ((double)batches * k * n < SERIAL_PACK_BYTES) threads = 1;
    dmlq_parallel(pack_beforehand, &job, threads);
    return 0;
}

void dmlq_gemm_unpack_b(const dmlq_packed_b *packed, char *b) {
    const gemm_kernels *kernels = packed->kernels;
    const int nr = kernels->nr;
    const uint8_t flip = b_flip(packed->b_signed);
    for (ptrdiff_t batch = 0; batch < packed->batches; batch++) {
        const uint8_t *panels = (const uint8_t *)packed->panels + batch * packed->n_panels * packed->panel_bytes;
        uint8_t *matrix = (uint8_t *)b + batch * packed->k * packed->n;
        for (ptrdiff_t panel = 0; panel < packed->n_panels; panel++) {
            const uint8_t *source = panels + panel * packed->panel_bytes;
            const ptrdiff_t n0 = panel * nr, columns = min_size(nr, packed->n - n0);
            for (ptrdiff_t kk = 0; kk < packed->k; kk++)
                for (ptrdiff_t j = 0; j < columns; j++)
                    matrix[kk * packed->n + n0 + j] = source[packed_offset(nr, kernels->b_pair_layout, kk, j)] ^ flip;
        }
    }
}

void dmlq_gemm_free_packed_b(dmlq_packed_b *packed) {
    dmlq_release(packed->panels);
    dmlq_release(packed->column_sums);
    dmlq_release(packed->column_cache);
    packed->panels = NULL;
    packed->column_sums = NULL;
    packed->column_cache = NULL;
}
