/* The element-wise loop: simplify the iteration space, split it among threads, call row kernels.
 *
 * Dimensions of size 1 are dropped, the rest ordered by the output's stride (largest outside) and
 * adjacent dimensions merged wherever every operand steps through them as through one, so a
 * contiguous tensor with per-tensor scales becomes a single row and a per-channel scale gives rows
 * along which it is constant. Threads claim contiguous chunks of elements one at a time.
 */
#include "common.h"

enum {
    PARALLEL_MINIMUM = 1 << 16,      /* elements below which one thread is faster */
    CHUNK_MINIMUM = 1 << 16,         /* elements per claimed chunk, at least */
    CHUNKS_PER_THREAD = 8,
    SPLIT_ALIGNMENT = 1024,          /* chunk boundaries, in elements (whole cache lines) */
    STREAM_MINIMUM_BYTES = 8 << 20   /* outputs this large bypass the caches */
};

static ptrdiff_t magnitude(ptrdiff_t stride) { return stride < 0 ? -stride : stride; }

static void move_dimension(dmlq_loop *loop, int to, int from) {
    loop->shape[to] = loop->shape[from];
    for (int op = 0; op < loop->operands; op++) loop->strides[op][to] = loop->strides[op][from];
}

static void drop_unit_dimensions(dmlq_loop *loop) {
    int kept = 0;
    for (int d = 0; d < loop->ndim; d++)
        if (loop->shape[d] != 1) move_dimension(loop, kept++, d);
    loop->ndim = kept;
}

/* Insertion sort, stable: the output's largest strides first. */
static void order_by_output_stride(dmlq_loop *loop) {
    int out = loop->operands - 1;
    for (int d = 1; d < loop->ndim; d++) {
        for (int e = d; e > 0 && magnitude(loop->strides[out][e - 1]) < magnitude(loop->strides[out][e]); e--) {
            for (int op = 0; op < loop->operands; op++) {
                ptrdiff_t stride = loop->strides[op][e];
                loop->strides[op][e] = loop->strides[op][e - 1];
                loop->strides[op][e - 1] = stride;
            }
            ptrdiff_t size = loop->shape[e];
            loop->shape[e] = loop->shape[e - 1];
            loop->shape[e - 1] = size;
        }
    }
}

static int mergeable(const dmlq_loop *loop, int outer, int inner) {
    for (int op = 0; op < loop->operands; op++)
        if (loop->strides[op][outer] != loop->strides[op][inner] * loop->shape[inner]) return 0;
    return 1;
}

static void merge_dimensions(dmlq_loop *loop) {
    int kept = 0;
    for (int d = 1; d < loop->ndim; d++) {
        if (mergeable(loop, kept, d)) {
            loop->shape[kept] *= loop->shape[d];
            for (int op = 0; op < loop->operands; op++) loop->strides[op][kept] = loop->strides[op][d];
        } else {
            move_dimension(loop, ++kept, d);
        }
    }
    loop->ndim = kept + 1;
}

typedef struct {
    const dmlq_loop *loop;
    dmlq_row_fn row;
    const void *params;
    ptrdiff_t total, chunk, next;
    int stream;
} run_context;

static void run_range(const run_context *c, ptrdiff_t start, ptrdiff_t end) {
    const dmlq_loop *loop = c->loop;
    int inner = loop->ndim - 1, operands = loop->operands;
    ptrdiff_t length = loop->shape[inner], index[DMLQ_MAX_DIMS], inner_strides[6];
    char *pointers[6];
    ptrdiff_t rest = start / length, column = start % length;
    for (int d = inner - 1; d >= 0; d--) {
        index[d] = rest % loop->shape[d];
        rest /= loop->shape[d];
    }
    for (int op = 0; op < operands; op++) inner_strides[op] = loop->strides[op][inner];
    for (ptrdiff_t done = start; done < end;) {
        for (int op = 0; op < operands; op++) {
            char *p = loop->data[op] + column * loop->strides[op][inner];
            for (int d = 0; d < inner; d++) p += index[d] * loop->strides[op][d];
            pointers[op] = p;
        }
        ptrdiff_t count = length - column < end - done ? length - column : end - done;
        c->row(pointers, inner_strides, count, c->params, c->stream);
        done += count;
        column = 0;
        for (int d = inner - 1; d >= 0 && ++index[d] == loop->shape[d]; d--) index[d] = 0;
    }
}

static void run_chunks(void *context, int thread, int threads) {
    run_context *c = context;
    (void)thread;
    (void)threads;
    for (ptrdiff_t chunk = dmlq_claim(&c->next); chunk * c->chunk < c->total; chunk = dmlq_claim(&c->next)) {
        const ptrdiff_t start = chunk * c->chunk;
        run_range(c, start, start + c->chunk < c->total ? start + c->chunk : c->total);
    }
}

void dmlq_run_elementwise(dmlq_loop *loop, dmlq_row_fn row, const void *params, int threads) {
    ptrdiff_t total = 1;
    for (int d = 0; d < loop->ndim; d++) total *= loop->shape[d];
    if (total == 0) return;
    drop_unit_dimensions(loop);
    if (loop->ndim == 0) {
        loop->ndim = 1;
        loop->shape[0] = 1;
        for (int op = 0; op < loop->operands; op++) loop->strides[op][0] = 0;
    }
    order_by_output_stride(loop);
    merge_dimensions(loop);
    if (total < PARALLEL_MINIMUM) threads = 1;
    ptrdiff_t chunk = total / ((ptrdiff_t)threads * CHUNKS_PER_THREAD) + 1;
    chunk = chunk < CHUNK_MINIMUM ? CHUNK_MINIMUM : (chunk + SPLIT_ALIGNMENT - 1) / SPLIT_ALIGNMENT * SPLIT_ALIGNMENT;
    const ptrdiff_t chunks = (total + chunk - 1) / chunk;
    if (threads > chunks) threads = (int)chunks; /* a thread with no chunk to claim only delays the return */
    run_context context = {loop, row, params, total, chunk, 0, total * loop->output_size >= STREAM_MINIMUM_BYTES};
    dmlq_parallel(run_chunks, &context, threads);
}
