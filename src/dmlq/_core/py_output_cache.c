/* Output allocation: numpy.empty, with large blocks kept for reuse (see below). */
#include <stdlib.h>

#include "py_arrays.h"

#ifdef __linux__
#include <sys/mman.h>
#endif

/* glibc gives large blocks back to the kernel at free and maps fresh pages (page faults on first
 * touch) at the next malloc, so every large output paid its faults again. dmlq allocates its
 * outputs through this NumPy memory handler, current only inside empty(): it keeps the newest
 * CACHE_BLOCKS freed blocks of CACHE_MIN_BYTES or more (CACHE_MAX_BYTES in all) and hands one back
 * to a later output of exactly its size. Arrays remember their handler, so they are freed here from
 * any thread, whatever handler is current then. */
#define CACHE_BLOCKS 2
#define CACHE_MIN_BYTES ((size_t)1 << 20)
#define CACHE_MAX_BYTES ((size_t)256 << 20)

typedef struct {
    void *ptr;
    size_t size;
    unsigned long long age; /* when it was kept: the oldest block is evicted first */
} cached_block;

static cached_block cache[CACHE_BLOCKS];
static size_t cache_bytes;
static unsigned long long cache_clock;
static PyThread_type_lock cache_lock;
static PyObject *cache_handler_capsule;

static void *cache_take(size_t size) {
    void *ptr = NULL;
    PyThread_acquire_lock(cache_lock, WAIT_LOCK);
    for (int i = 0; i < CACHE_BLOCKS && !ptr; i++) {
        if (cache[i].ptr && cache[i].size == size) {
            ptr = cache[i].ptr;
            cache[i].ptr = NULL;
            cache_bytes -= size;
        }
    }
    PyThread_release_lock(cache_lock);
    return ptr;
}

/* Keeps the newest freed block, evicting the oldest ones while the cache would be too full. */
static int cache_keep(void *ptr, size_t size) {
    if (size > CACHE_MAX_BYTES) return 0;
    void *evicted[CACHE_BLOCKS];
    int evicted_count = 0, slot = -1;
    PyThread_acquire_lock(cache_lock, WAIT_LOCK);
    for (;;) {
        int oldest = -1;
        slot = -1;
        for (int i = 0; i < CACHE_BLOCKS; i++) {
            if (!cache[i].ptr) slot = i;
            else if (oldest < 0 || cache[i].age < cache[oldest].age) oldest = i;
        }
        if (slot >= 0 && cache_bytes + size <= CACHE_MAX_BYTES) break;
        evicted[evicted_count++] = cache[oldest].ptr;
        cache_bytes -= cache[oldest].size;
        cache[oldest].ptr = NULL;
    }
    cache[slot] = (cached_block){ptr, size, ++cache_clock};
    cache_bytes += size;
    PyThread_release_lock(cache_lock);
    for (int i = 0; i < evicted_count; i++) free(evicted[i]);
    return 1;
}

/* A fresh large block, backed by huge pages where Linux offers them on request, as NumPy's own
 * allocator does: with 4 KiB pages, TLB misses slow a pass over a large output by a fifth. */
static void *fresh_block(size_t size) {
    void *ptr = malloc(size);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (ptr && size >= ((size_t)4 << 20)) {
        const uintptr_t page = 4096, start = ((uintptr_t)ptr + page - 1) / page * page;
        madvise((void *)start, (uintptr_t)ptr + size - start, MADV_HUGEPAGE);
    }
#endif
    return ptr;
}

static void *cache_malloc(void *ctx, size_t size) {
    (void)ctx;
    void *ptr = size >= CACHE_MIN_BYTES ? cache_take(size) : NULL;
    return ptr ? ptr : fresh_block(size);
}

static void *cache_calloc(void *ctx, size_t count, size_t size) {
    (void)ctx;
    return calloc(count, size);
}

static void *cache_realloc(void *ctx, void *ptr, size_t size) {
    (void)ctx;
    return realloc(ptr, size);
}

static void cache_free(void *ctx, void *ptr, size_t size) {
    (void)ctx;
    if (ptr && (size < CACHE_MIN_BYTES || !cache_keep(ptr, size))) free(ptr);
}

static PyDataMem_Handler cache_handler = {
    "dmlq_output_cache", 1, {NULL, cache_malloc, cache_calloc, cache_realloc, cache_free}};

/* The output's byte count, or 0 when it is small, malformed or overflows (NumPy then decides). */
static size_t output_bytes(int ndim, npy_intp const *shape, const PyArray_Descr *descr) {
    size_t bytes = (size_t)PyDataType_ELSIZE(descr);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && bytes > SIZE_MAX / (size_t)shape[i])) return 0;
        bytes *= (size_t)shape[i];
    }
    return bytes;
}

PyObject *dmlq_py_new_output(int ndim, npy_intp const *shape, PyArray_Descr *descr) {
    PyObject *previous = NULL;
    if (output_bytes(ndim, shape, descr) >= CACHE_MIN_BYTES) {
        previous = PyDataMem_SetHandler(cache_handler_capsule);
        if (!previous) {
            Py_DECREF(descr);
            return NULL;
        }
    }
    PyObject *array = PyArray_Empty(ndim, (npy_intp *)shape, descr, 0); /* steals descr */
    if (previous) {
        PyObject *ours = PyDataMem_SetHandler(previous);
        Py_DECREF(previous);
        if (!ours) Py_CLEAR(array);
        Py_XDECREF(ours);
    }
    return array;
}

PyObject *dmlq_py_empty(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "empty() takes 2 arguments (shape, dtype), got %zd", nargs);
        return NULL;
    }
    PyArray_Dims shape = {NULL, 0};
    PyArray_Descr *descr = NULL;
    if (!PyArray_IntpConverter(args[0], &shape)) return NULL;
    if (!PyArray_DescrConverter(args[1], &descr)) {
        PyDimMem_FREE(shape.ptr);
        return NULL;
    }
    PyObject *array = dmlq_py_new_output(shape.len, shape.ptr, descr);
    PyDimMem_FREE(shape.ptr);
    return array;
}

PyObject *dmlq_py_cached_bytes(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    PyThread_acquire_lock(cache_lock, WAIT_LOCK);
    size_t bytes = cache_bytes;
    PyThread_release_lock(cache_lock);
    return PyLong_FromSize_t(bytes);
}

int dmlq_py_output_cache_init(void) {
    cache_lock = PyThread_allocate_lock();
    cache_handler_capsule = cache_lock ? PyCapsule_New(&cache_handler, "mem_handler", NULL) : NULL;
    if (!cache_handler_capsule) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}
