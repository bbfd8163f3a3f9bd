/* The float GEMM's driver (sgemm.h): blocking, packing, threads, the epilogue, and the portable kernels.
 *
 * The output is cut into units of MC rows x NC columns of one batch, which threads claim one at a
 * time; each output element belongs to one unit, so the thread count changes nothing in its
 * arithmetic. A unit walks K in blocks of KC: it packs its MC x KC block of A, then takes its KC x NC
 * block of B panel by panel, packing each just before use (or reading a row-major float32 B where it
 * lies, for a few rows of A), and runs the level's MR x NR tile kernel over A's panels with it: the
 * panel stays in L1 while A's panels stream from L2. The partial sums live in the output (float32, unit column stride) or in the unit's own
 * float32 buffer; the last K block's tiles then go through the epilogue (alpha, beta * C, the fused
 * activation, float16 rounding) while they are in L1.
 */
#include <math.h>

#include "family.h"
#include "sgemm.h"

enum {
    SERIAL_OPERATIONS = 1 << 20, /* multiply-adds below which one thread does all the work */
    DIRECT_B_PANELS = 2,         /* A panels per unit up to which a row-major B is read in place */
    UNITS_PER_THREAD = 2,        /* enough units for threads to even out a descheduled one */
    /* A unit's columns when they are split for threads: narrower ones would share the cache lines of
     * the partial sums they keep in the output with their neighbours' (false sharing). */
    MIN_SPLIT_COLUMNS = 64,
    L2_B_BYTES = 512 * 1024 /* a block of B that stays in L2 for the next row block */
};

static ptrdiff_t min_size(ptrdiff_t a, ptrdiff_t b) { return a < b ? a : b; }
static ptrdiff_t ceil_div(ptrdiff_t a, ptrdiff_t b) { return (a + b - 1) / b; }
static ptrdiff_t round_up(ptrdiff_t a, ptrdiff_t b) { return ceil_div(a, b) * b; }

/* ---- the portable kernels ---------------------------------------------------------------------- */

enum { PORTABLE_MR = 4, PORTABLE_NR = 16 };

static float load_float(const char *p, int type) {
    return type == DMLQ_F16 ? dmlq_half_to_float(*(const uint16_t *)p) : *(const float *)p;
}

void dmlq_sgemm_pack_a_portable(float *dst, const char *a, int rows, ptrdiff_t k, ptrdiff_t a_row, ptrdiff_t a_col,
                                int type, int mr) {
    if (a_row == (type == DMLQ_F16 ? 2 : 4)) { /* each k's rows lie side by side (TransA): copied in order */
        for (ptrdiff_t p = 0; p < k; p++)
            for (int r = 0; r < rows; r++) dst[p * mr + r] = load_float(a + r * a_row + p * a_col, type);
        return;
    }
    for (int r = 0; r < rows; r++) {
        const char *row = a + r * a_row;
        for (ptrdiff_t p = 0; p < k; p++) dst[p * mr + r] = load_float(row + p * a_col, type);
    }
}

void dmlq_sgemm_pack_b_portable(float *dst, ptrdiff_t ldd, const char *b, int columns, ptrdiff_t k, ptrdiff_t b_row,
                                ptrdiff_t b_col, int type, int nr) {
    for (ptrdiff_t p = 0; p < k; p++, dst += ldd) {
        const char *row = b + p * b_row;
        int j = 0;
        if (type == DMLQ_F32 && b_col == 4)
            for (; j < columns; j++) dst[j] = ((const float *)row)[j];
        for (; j < columns; j++) dst[j] = load_float(row + j * b_col, type);
        for (; j < nr; j++) dst[j] = 0.0f;
    }
}

static void pack_a_portable(float *dst, const char *a, int rows, ptrdiff_t k, ptrdiff_t a_row, ptrdiff_t a_col,
                            int type) {
    dmlq_sgemm_pack_a_portable(dst, a, rows, k, a_row, a_col, type, PORTABLE_MR);
}

static void pack_b_portable(float *dst, ptrdiff_t ldd, const char *b, int columns, ptrdiff_t k, ptrdiff_t b_row,
                            ptrdiff_t b_col, int type) {
    dmlq_sgemm_pack_b_portable(dst, ldd, b, columns, k, b_row, b_col, type, PORTABLE_NR);
}

/* fmaf is one rounding on every platform (a call into the C library where the CPU has no FMA). */
static void tile_portable(ptrdiff_t k, const float *a, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc,
                          int rows, int columns, int load) {
    (void)columns; /* always NR: this set does not mask */
    float acc[PORTABLE_MR][PORTABLE_NR];
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < PORTABLE_NR; j++) acc[r][j] = load ? c[r * ldc + j] : 0.0f;
    for (ptrdiff_t p = 0; p < k; p++, a += PORTABLE_MR, b += ldb)
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < PORTABLE_NR; j++) acc[r][j] = fmaf(a[r], b[j], acc[r][j]);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < PORTABLE_NR; j++) c[r * ldc + j] = acc[r][j];
}

static void store_halves_portable(uint16_t *dst, const float *src, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) dst[i] = dmlq_float_to_half(src[i]);
}

const sgemm_kernels dmlq_sgemm_portable = {PORTABLE_MR, PORTABLE_NR, 64, 256, 512, tile_portable, 0,
                                           pack_a_portable, pack_b_portable, NULL, 0, 0, store_halves_portable,
                                           &dmlq_rows_portable};

static const sgemm_kernels *kernels_for_level(void) {
#if DMLQ_X86
    if (dmlq_level() >= DMLQ_LEVEL_AVX512) return &dmlq_sgemm_avx512;
    if (dmlq_level() >= DMLQ_LEVEL_AVX2) return &dmlq_sgemm_avx2;
#endif
    return &dmlq_sgemm_portable;
}

/* ---- the plan ------------------------------------------------------------------------------------ */

typedef struct {
    const dmlq_sgemm_problem *p;
    const sgemm_kernels *kernels;
    ptrdiff_t mc, nc, kc, m_blocks, n_blocks, units;
    int few;        /* the kernel set's few_rows for all of A's rows, on panels of few_columns */
    int panel;      /* columns of a B panel: NR, or few_columns */
    int direct_b;   /* B panels read where they lie: a row-major float32 B and few rows of A */
    int direct_out; /* partial sums kept in the output (float32, unit column stride) */
    int plain;      /* the partial sums are the output: alpha 1, no C, no activation */
    char *workspace;
    size_t thread_bytes;
    ptrdiff_t next_unit;
} sgemm_plan;

/* One thread's buffers: A's packed block, one packed B panel, the partial sums, one tile, one epilogue
 * row. */
typedef struct {
    float *a, *b, *partials, *tile, *row;
} thread_buffers;

static size_t floats_bytes(ptrdiff_t count) { return (size_t)round_up(count, 16) * sizeof(float); }

static size_t thread_layout(const sgemm_plan *plan, thread_buffers *t, char *base) {
    const sgemm_kernels *k = plan->kernels;
    const ptrdiff_t mc = round_up(plan->mc, k->mr), nc = round_up(plan->nc, k->nr);
    const size_t sizes[] = {floats_bytes(mc * plan->kc), floats_bytes(plan->panel * plan->kc),
                            plan->direct_out ? 0 : floats_bytes(mc * nc), floats_bytes(k->mr * k->nr),
                            floats_bytes(nc)};
    size_t offsets[sizeof sizes / sizeof sizes[0]], total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        offsets[i] = total;
        total += sizes[i];
    }
    if (t) {
        t->a = (float *)(base + offsets[0]);
        t->b = (float *)(base + offsets[1]);
        t->partials = (float *)(base + offsets[2]);
        t->tile = (float *)(base + offsets[3]);
        t->row = (float *)(base + offsets[4]);
    }
    return total;
}

/* The block sizes: the kernel set's, made smaller where there would be too few units for the threads
 * (the blocks change which thread computes an element, never how). */
static void choose_blocks(sgemm_plan *plan, int threads) {
    const dmlq_sgemm_problem *p = plan->p;
    const sgemm_kernels *k = plan->kernels;
    plan->kc = min_size(k->kc, p->k);
    plan->mc = min_size(round_up(p->m, k->mr), k->mc);
    plan->nc = min_size(round_up(p->n, k->nr), k->nc);
    const ptrdiff_t wanted = threads > 1 ? (ptrdiff_t)threads * UNITS_PER_THREAD : 1;
    ptrdiff_t blocks = p->batches * ceil_div(p->m, plan->mc) * ceil_div(p->n, plan->nc);
    if (blocks < wanted) { /* columns first (each row block then still reads its A once), 64 at least */
        const ptrdiff_t widest_split = ceil_div(p->n, k->nr < MIN_SPLIT_COLUMNS ? MIN_SPLIT_COLUMNS : k->nr);
        const ptrdiff_t n_blocks = min_size(widest_split, ceil_div(wanted, p->batches * ceil_div(p->m, plan->mc)));
        plan->nc = round_up(ceil_div(p->n, n_blocks), k->nr);
        blocks = p->batches * ceil_div(p->m, plan->mc) * ceil_div(p->n, plan->nc);
    }
    /* then rows: every row block reads all of its B block again, from L2 while that fits, else once per
     * thread at most */
    const ptrdiff_t row_blocks = (ptrdiff_t)sizeof(float) * p->k * plan->nc <= L2_B_BYTES ? wanted : threads;
    if (blocks < row_blocks && !plan->few) {
        const ptrdiff_t m_blocks = min_size(p->m, ceil_div(row_blocks, p->batches * ceil_div(p->n, plan->nc)));
        plan->mc = ceil_div(p->m, m_blocks);
        if (plan->mc > k->mr) plan->mc = plan->mc / k->mr * k->mr;
    }
    const ptrdiff_t others = p->batches * ceil_div(p->n, plan->nc), m_blocks = ceil_div(p->m, plan->mc);
    if (threads > 1 && others * m_blocks < 4 * wanted && others * m_blocks % threads) {
        /* few units that do not share out evenly: as many rows blocks as make them do, where rows allow */
        const ptrdiff_t evened = ceil_div(round_up(others * m_blocks, threads), others);
        const ptrdiff_t mc = round_up(ceil_div(p->m, evened), plan->mc % k->mr ? 1 : k->mr);
        if (ceil_div(p->m, mc) * others % threads == 0) plan->mc = mc;
    }
    plan->m_blocks = ceil_div(p->m, plan->mc);
    plan->n_blocks = ceil_div(p->n, plan->nc);
    plan->units = p->batches * plan->m_blocks * plan->n_blocks;
}

/* ---- the epilogue ---------------------------------------------------------------------------------- */

static const float MINUS_ZERO = -0.0f; /* x + -0 is x for every x: the add row's activation alone */

/* x[t] += (beta *) c[t] for a row of C: float32 read in place (contiguous, or one value along the row),
 * else widened one by one. */
static void add_c(float *x, ptrdiff_t count, const char *c, ptrdiff_t c_col, int type, float beta) {
    if (type == DMLQ_F32 && c_col == 4) {
        const float *row = (const float *)c;
        if (beta == 1.0f)
            for (ptrdiff_t t = 0; t < count; t++) x[t] = x[t] + row[t];
        else
            for (ptrdiff_t t = 0; t < count; t++) x[t] = x[t] + beta * row[t];
    } else if (c_col == 0) {
        const float value = beta == 1.0f ? load_float(c, type) : beta * load_float(c, type);
        for (ptrdiff_t t = 0; t < count; t++) x[t] = x[t] + value;
    } else {
        for (ptrdiff_t t = 0; t < count; t++)
            x[t] = x[t] + (beta == 1.0f ? load_float(c + t * c_col, type) : beta * load_float(c + t * c_col, type));
    }
}

/* `count` partial sums of row i from column j on, through alpha, beta * C and the activation, into the
 * output: in place where the partial sums are the output's own float32 elements. */
static void finish_row(const sgemm_plan *plan, float *acc, ptrdiff_t count, ptrdiff_t batch, ptrdiff_t i, ptrdiff_t j,
                       float *row) {
    const dmlq_sgemm_problem *p = plan->p;
    float *x = plan->direct_out ? acc : row;
    if (p->alpha != 1.0f)
        for (ptrdiff_t t = 0; t < count; t++) x[t] = p->alpha * acc[t];
    else if (x != acc)
        memcpy(x, acc, sizeof(float) * (size_t)count);
    if (p->c) add_c(x, count, p->c + p->c_offsets[batch] + i * p->c_row + j * p->c_col, p->c_col, p->type, p->beta);
    if (p->activation == DMLQ_ACT_RELU) {
        for (ptrdiff_t t = 0; t < count; t++) x[t] = x[t] < 0.0f ? 0.0f : x[t];
    } else if (p->activation != DMLQ_ACT_NONE && p->activation != DMLQ_ACT_IDENTITY) {
        const dmlq_add_params params = {DMLQ_F32, p->activation, {p->p[0], p->p[1]}};
        char *const pointers[3] = {(char *)x, (char *)&MINUS_ZERO, (char *)x};
        const ptrdiff_t strides[3] = {4, 0, 4};
        plan->kernels->rows->add(pointers, strides, count, &params, 0);
    }
    if (x == acc) return;
    char *out = p->out + p->out_offsets[batch] + i * p->out_row + j * p->out_col;
    if (p->type == DMLQ_F16 && p->out_col == 2)
        plan->kernels->store_halves((uint16_t *)out, x, count);
    else if (p->type == DMLQ_F16)
        for (ptrdiff_t t = 0; t < count; t++) *(uint16_t *)(out + t * p->out_col) = dmlq_float_to_half(x[t]);
    else
        for (ptrdiff_t t = 0; t < count; t++) *(float *)(out + t * p->out_col) = x[t];
}

/* ---- a unit -------------------------------------------------------------------------------------------- */

/* Panel jr of the unit's B for the K block from k0 on (*ldb floats from one k to the next): read in
 * place, or packed into t->b just before the panel's tiles (NR columns at a time: a few-rows panel is
 * several side by side), so that the packed panel is still in L1 or L2 when they read it. */
static const float *b_panel(const sgemm_plan *plan, const thread_buffers *t, const char *b, ptrdiff_t width,
                            ptrdiff_t k0, ptrdiff_t kb, ptrdiff_t jr, ptrdiff_t *ldb) {
    const dmlq_sgemm_problem *p = plan->p;
    const int nr = plan->kernels->nr, w = plan->panel;
    const char *panel = b + k0 * p->b_row + jr * w * p->b_col;
    if (plan->direct_b && (plan->few || width == w || plan->kernels->masked_tile)) {
        *ldb = p->b_row / 4;
        return (const float *)panel;
    }
    for (ptrdiff_t j = 0; j < width; j += nr)
        plan->kernels->pack_b(t->b + j, w, panel + j * p->b_col, (int)min_size(nr, width - j), kb, p->b_row, p->b_col,
                              p->type);
    *ldb = w;
    return t->b;
}

/* One tile of rows x columns continued over kb terms of B panel `b` (ldb floats per k) into c (ldc
 * floats per row): a few-rows panel, or at most MR x NR, a tile narrower than NR through t->tile
 * unless the kernel masks its columns. */
static void run_tile(const sgemm_plan *plan, const thread_buffers *t, ptrdiff_t kb, const float *a, const float *b,
                     ptrdiff_t ldb, float *c, ptrdiff_t ldc, int rows, int columns, int load) {
    const sgemm_kernels *k = plan->kernels;
    if (plan->few) {
        k->few_rows(kb, a, b, ldb, c, ldc, rows, columns, load);
    } else if (columns == k->nr || k->masked_tile) {
        k->tile(kb, a, b, ldb, c, ldc, rows, columns, load);
    } else {
        for (int r = 0; load && r < rows; r++)
            memcpy(t->tile + r * k->nr, c + r * ldc, sizeof(float) * (size_t)columns);
        k->tile(kb, a, b, ldb, t->tile, k->nr, rows, k->nr, load);
        for (int r = 0; r < rows; r++) memcpy(c + r * ldc, t->tile + r * k->nr, sizeof(float) * (size_t)columns);
    }
}

static void compute_unit(const sgemm_plan *plan, const thread_buffers *t, ptrdiff_t unit) {
    const dmlq_sgemm_problem *p = plan->p;
    const sgemm_kernels *k = plan->kernels;
    const ptrdiff_t ib = unit % plan->m_blocks, jb = unit / plan->m_blocks % plan->n_blocks;
    const ptrdiff_t batch = unit / plan->m_blocks / plan->n_blocks;
    const ptrdiff_t i0 = ib * plan->mc, j0 = jb * plan->nc;
    const ptrdiff_t rows = min_size(plan->mc, p->m - i0), columns = min_size(plan->nc, p->n - j0);
    const char *a = p->a + p->a_offsets[batch] + i0 * p->a_row;
    const char *b = p->b + p->b_offsets[batch] + j0 * p->b_col;
    float *c = t->partials;
    ptrdiff_t ldc = round_up(plan->nc, k->nr);
    if (plan->direct_out) {
        c = (float *)(p->out + p->out_offsets[batch] + i0 * p->out_row + j0 * p->out_col);
        ldc = p->out_row / 4;
    }
    for (ptrdiff_t k0 = 0; k0 < p->k; k0 += plan->kc) {
        const ptrdiff_t kb = min_size(plan->kc, p->k - k0);
        const int load = k0 > 0, last = k0 + kb == p->k;
        for (ptrdiff_t ir = 0; ir * k->mr < rows; ir++)
            k->pack_a(t->a + ir * k->mr * kb, a + ir * k->mr * p->a_row + k0 * p->a_col,
                      (int)min_size(k->mr, rows - ir * k->mr), kb, p->a_row, p->a_col, p->type);
        for (ptrdiff_t jr = 0; jr * plan->panel < columns; jr++) {
            const int width = (int)min_size(plan->panel, columns - jr * plan->panel);
            ptrdiff_t ldb;
            const float *panel = b_panel(plan, t, b, width, k0, kb, jr, &ldb);
            for (ptrdiff_t ir = 0; ir * k->mr < rows; ir++) {
                const int height = (int)min_size(k->mr, rows - ir * k->mr);
                float *tile = c + ir * k->mr * ldc + jr * plan->panel;
                run_tile(plan, t, kb, t->a + ir * k->mr * kb, panel, ldb, tile, ldc, height, width, load);
                for (int r = 0; last && !plan->plain && r < height; r++)
                    finish_row(plan, tile + r * ldc, width, batch, i0 + ir * k->mr + r, j0 + jr * plan->panel,
                               t->row);
            }
        }
    }
}

static void run_task(void *context, int thread, int threads) {
    (void)threads;
    sgemm_plan *plan = context;
    thread_buffers t;
    thread_layout(plan, &t, plan->workspace + (size_t)thread * plan->thread_bytes);
    for (ptrdiff_t unit = dmlq_claim(&plan->next_unit); unit < plan->units; unit = dmlq_claim(&plan->next_unit))
        compute_unit(plan, &t, unit);
}

/* ---- batches as rows ----------------------------------------------------------------------------------- */

/* Whether batch b of `offsets` starts where row b * m would, with rows `*row` bytes apart; a single-row
 * matrix takes the batches' own step as its row stride. */
static int batches_are_rows(const ptrdiff_t *offsets, ptrdiff_t batches, ptrdiff_t m, ptrdiff_t *row) {
    if (m == 1 && batches > 1) *row = offsets[1] - offsets[0];
    for (ptrdiff_t b = 1; b < batches; b++)
        if (offsets[b] != offsets[0] + b * m * *row) return 0;
    return 1;
}

/* Batches that share B and follow one another in A, C and the output as rows do are one problem of
 * batches * m rows (B packed once, blocks across batch boundaries): into *merged, 1; else 0. */
static int merge_batches(const dmlq_sgemm_problem *p, dmlq_sgemm_problem *merged) {
    if (p->batches < 2) return 0;
    for (ptrdiff_t b = 1; b < p->batches; b++)
        if (p->b_offsets[b] != p->b_offsets[0]) return 0;
    *merged = *p;
    if (!batches_are_rows(p->a_offsets, p->batches, p->m, &merged->a_row) ||
        !batches_are_rows(p->out_offsets, p->batches, p->m, &merged->out_row) ||
        (p->c && !batches_are_rows(p->c_offsets, p->batches, p->m, &merged->c_row)))
        return 0;
    merged->m = p->batches * p->m;
    merged->batches = 1;
    return 1;
}

int dmlq_sgemm(const dmlq_sgemm_problem *problem, int threads) {
    dmlq_sgemm_problem merged;
    const dmlq_sgemm_problem *p = merge_batches(problem, &merged) ? &merged : problem;
    if (p->batches == 0 || p->m == 0 || p->n == 0) return 0;
    if ((double)p->batches * (double)p->m * (double)p->n * (double)p->k < SERIAL_OPERATIONS) threads = 1;
    sgemm_plan plan = {.p = p, .kernels = kernels_for_level()};
    const sgemm_kernels *k = plan.kernels;
    plan.direct_out = p->type == DMLQ_F32 && p->out_col == 4 && p->out_row % 4 == 0;
    const int b_row_major = p->type == DMLQ_F32 && p->b_col == 4 && p->b_row % 4 == 0;
    plan.few = k->few_rows && p->m <= k->few_rows_max;
    plan.panel = plan.few ? k->few_columns : k->nr;
    plan.plain = plan.direct_out && p->alpha == 1.0f && !p->c &&
                 (p->activation == DMLQ_ACT_NONE || p->activation == DMLQ_ACT_IDENTITY);
    choose_blocks(&plan, threads);
    plan.direct_b = b_row_major && ceil_div(plan.mc, k->mr) <= DIRECT_B_PANELS;
    if (plan.units < threads) threads = (int)plan.units;
    plan.thread_bytes = thread_layout(&plan, NULL, NULL);
    int kept = 0;
    plan.workspace = dmlq_gemm_workspace_take(plan.thread_bytes * (size_t)threads, &kept);
    if (!plan.workspace) return -1;
    dmlq_parallel(run_task, &plan, threads);
    dmlq_gemm_workspace_give(plan.workspace, kept);
    return 0;
}
