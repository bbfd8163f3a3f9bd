/* dmlq._core: the compiled kernels behind dmlq.kernels, on NumPy arrays, without the GIL.
 *
 * Callers (dmlq.kernels) pass arrays of the operators' types and shapes; the functions here check
 * them defensively (ValueError). Arrays the kernels cannot use in place raise BufferError: a
 * misaligned or byte-swapped operand, or an output overlapping an input other than exactly (the
 * caller then retries on copies).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <numpy/arrayobject.h>

#include "common.h"
#include "int4.h"

#ifdef __linux__
#include <sys/mman.h>
#endif

/* Row and column sums are int32: exact while K * 255 stays below 2**31. */
#define MATMUL_MAX_K (1 << 23)

static const char *const LEVEL_NAMES[] = {"portable", "avx2", "avx512", "avx512_vnni", "amx"};
enum { LEVEL_COUNT = sizeof(LEVEL_NAMES) / sizeof(LEVEL_NAMES[0]) };

/* ---- arrays ----------------------------------------------------------------------------------- */

static int type_of(PyArrayObject *array) {
    const char kind = PyArray_DESCR(array)->kind;
    switch (PyArray_ITEMSIZE(array)) {
    case 1: return kind == 'i' ? DMLQ_I8 : kind == 'u' ? DMLQ_U8 : -1;
    case 2: return kind == 'f' ? DMLQ_F16 : kind == 'i' ? DMLQ_I16 : kind == 'u' ? DMLQ_U16 : -1;
    case 4: return kind == 'f' ? DMLQ_F32 : kind == 'i' ? DMLQ_I32 : kind == 'u' ? DMLQ_U32 : -1;
    case 8: return kind == 'f' ? DMLQ_F64 : kind == 'i' ? DMLQ_I64 : kind == 'u' ? DMLQ_U64 : -1;
    default: return -1;
    }
}

static int is_signed_byte(PyArrayObject *array) { return type_of(array) == DMLQ_I8; }

static PyArrayObject *as_array(PyObject *object, const char *name, int allow_none) {
    if (object == Py_None && allow_none) return NULL;
    if (!PyArray_Check(object)) {
        PyErr_Format(PyExc_TypeError, "%s must be a numpy.ndarray", name);
        return NULL;
    }
    PyArrayObject *array = (PyArrayObject *)object;
    if (!PyArray_ISALIGNED(array) || !PyArray_ISNOTSWAPPED(array)) {
        PyErr_Format(PyExc_BufferError, "%s must be aligned and in native byte order", name);
        return NULL;
    }
    if (type_of(array) < 0) {
        PyErr_Format(PyExc_ValueError, "%s has an unsupported dtype", name);
        return NULL;
    }
    return array;
}

static int check_output(PyArrayObject *out) {
    if (!PyArray_ISWRITEABLE(out)) {
        PyErr_SetString(PyExc_ValueError, "out must be writable");
        return -1;
    }
    return 0;
}

/* The bytes [start, end) an array addresses (strides may be negative); empty for no elements. */
static void extent(PyArrayObject *array, uintptr_t *start, uintptr_t *end) {
    uintptr_t low = (uintptr_t)PyArray_BYTES(array), high = low + (uintptr_t)PyArray_ITEMSIZE(array);
    *start = *end = 0;
    for (int d = 0; d < PyArray_NDIM(array); d++) {
        if (PyArray_DIM(array, d) == 0) return;
        const ptrdiff_t span = (PyArray_DIM(array, d) - 1) * PyArray_STRIDE(array, d);
        if (span < 0)
            low -= (uintptr_t)-span;
        else
            high += (uintptr_t)span;
    }
    *start = low;
    *end = high;
}

/* An output may overlap an input only by being exactly it (same address, shape and strides), and only
 * where `identical_allowed` (element-wise operators, which read each element before writing it). */
static int check_overlaps(PyArrayObject *out, PyArrayObject *const *inputs, int count, int identical_allowed) {
    uintptr_t out_start, out_end;
    extent(out, &out_start, &out_end);
    for (int i = 0; i < count; i++) {
        PyArrayObject *input = inputs[i];
        uintptr_t start, end;
        if (!input) continue;
        extent(input, &start, &end);
        if (start >= out_end || out_start >= end) continue;
        if (identical_allowed && PyArray_BYTES(input) == PyArray_BYTES(out) && PyArray_NDIM(input) == PyArray_NDIM(out) &&
            !memcmp(PyArray_DIMS(input), PyArray_DIMS(out), sizeof(npy_intp) * (size_t)PyArray_NDIM(out)) &&
            !memcmp(PyArray_STRIDES(input), PyArray_STRIDES(out), sizeof(npy_intp) * (size_t)PyArray_NDIM(out)))
            continue;
        PyErr_SetString(PyExc_BufferError, "out overlaps an input");
        return -1;
    }
    return 0;
}

/* Operands of one element-wise operator (the output last, 1 to 8 dims): each has the output's shape
 * or broadcasts to it as in NumPy (aligned on the right, size-1 dimensions read with stride 0). */
static int build_loop(dmlq_loop *loop, PyArrayObject **arrays, int count) {
    PyArrayObject *out = arrays[count - 1];
    const int ndim = PyArray_NDIM(out);
    if (ndim > DMLQ_MAX_DIMS) {
        PyErr_SetString(PyExc_ValueError, "at most 8 dimensions");
        return -1;
    }
    loop->operands = count;
    loop->ndim = ndim;
    loop->output_size = PyArray_ITEMSIZE(out);
    for (int d = 0; d < ndim; d++) loop->shape[d] = PyArray_DIM(out, d);
    for (int op = 0; op < count; op++) {
        PyArrayObject *array = arrays[op];
        for (int d = 0; d < ndim; d++) loop->strides[op][d] = 0;
        loop->data[op] = array ? PyArray_BYTES(array) : NULL; /* NULL: an absent zero point */
        if (!array) continue;
        const int skipped = ndim - PyArray_NDIM(array);
        if (skipped < 0) {
            PyErr_SetString(PyExc_ValueError, "operands must broadcast to the output's shape");
            return -1;
        }
        for (int d = skipped; d < ndim; d++) {
            const npy_intp size = PyArray_DIM(array, d - skipped);
            if (size != loop->shape[d] && size != 1) {
                PyErr_SetString(PyExc_ValueError, "operands must broadcast to the output's shape");
                return -1;
            }
            if (size == loop->shape[d]) loop->strides[op][d] = PyArray_STRIDE(array, d - skipped);
        }
    }
    return check_overlaps(out, arrays, count - 1, 1);
}

static const dmlq_row_table *rows_for_level(void) {
#if DMLQ_X86
    if (dmlq_level() >= DMLQ_LEVEL_AVX512) return &dmlq_rows_avx512;
    if (dmlq_level() >= DMLQ_LEVEL_AVX2) return &dmlq_rows_avx2;
#endif
    return &dmlq_rows_portable;
}

static PyObject *run(dmlq_loop *loop, dmlq_row_fn row, const void *params) {
    const int threads = dmlq_num_threads();
    Py_BEGIN_ALLOW_THREADS
    dmlq_run_elementwise(loop, row, params, threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static int byte_bounds(PyArrayObject *out, float *lo, float *hi) {
    const int type = type_of(out);
    if (type != DMLQ_U8 && type != DMLQ_I8) {
        PyErr_SetString(PyExc_ValueError, "the output must be uint8 or int8");
        return -1;
    }
    *lo = type == DMLQ_I8 ? -128.0f : 0.0f;
    *hi = type == DMLQ_I8 ? 127.0f : 255.0f;
    return 0;
}

/* ---- element-wise operators ---------------------------------------------------------------------- */

static PyObject *quantize(PyObject *self, PyObject *args) {
    PyObject *x_object, *scale_object, *zero_object, *out_object;
    int reciprocal;
    if (!PyArg_ParseTuple(args, "OOOOp", &x_object, &scale_object, &zero_object, &out_object, &reciprocal)) return NULL;
    PyArrayObject *arrays[4] = {as_array(x_object, "x", 0), as_array(scale_object, "scale", 0),
                                as_array(zero_object, "zero_point", 1), as_array(out_object, "out", 0)};
    if (PyErr_Occurred() || check_output(arrays[3]) < 0) return NULL;
    dmlq_quantize_params params = {type_of(arrays[0]), type_of(arrays[1]), arrays[2] != NULL,
                                   is_signed_byte(arrays[3]), reciprocal, 0.0f, 0.0f};
    if (byte_bounds(arrays[3], &params.lo, &params.hi) < 0) return NULL;
    if ((params.x_type != DMLQ_F32 && params.x_type != DMLQ_F16 && params.x_type != DMLQ_I32) ||
        (params.scale_type != DMLQ_F32 && params.scale_type != DMLQ_F16) ||
        (arrays[2] && type_of(arrays[2]) != type_of(arrays[3]))) {
        PyErr_SetString(PyExc_ValueError, "quantize: unsupported dtypes");
        return NULL;
    }
    dmlq_loop loop;
    if (build_loop(&loop, arrays, 4) < 0) return NULL;
    return run(&loop, rows_for_level()->quantize, &params);
}

static PyObject *dequantize(PyObject *self, PyObject *args) {
    PyObject *q_object, *scale_object, *zero_object, *out_object;
    if (!PyArg_ParseTuple(args, "OOOO", &q_object, &scale_object, &zero_object, &out_object)) return NULL;
    PyArrayObject *arrays[4] = {as_array(q_object, "q", 0), as_array(scale_object, "scale", 0),
                                as_array(zero_object, "zero_point", 1), as_array(out_object, "out", 0)};
    if (PyErr_Occurred() || check_output(arrays[3]) < 0) return NULL;
    dmlq_dequantize_params params = {type_of(arrays[0]), type_of(arrays[1]), type_of(arrays[3]), arrays[2] != NULL};
    const int q = params.q_type;
    if (q == DMLQ_F16 || q == DMLQ_F32 || q == DMLQ_F64 || q == DMLQ_I64 || q == DMLQ_U64 ||
        (params.scale_type != DMLQ_F32 && params.scale_type != DMLQ_F16) || params.out_type != params.scale_type ||
        (arrays[2] && type_of(arrays[2]) != q)) {
        PyErr_SetString(PyExc_ValueError, "dequantize: unsupported dtypes");
        return NULL;
    }
    dmlq_loop loop;
    if (build_loop(&loop, arrays, 4) < 0) return NULL;
    return run(&loop, rows_for_level()->dequantize, &params);
}

/* The quantized add's operands and parameters, with the route its quotient takes; -1 on error. */
static int qadd_operands(PyObject *args, dmlq_loop *loop, dmlq_qadd_params *params) {
    PyObject *a_object, *b_object, *out_object;
    double a_scale, b_scale, out_scale;
    int a_zero, b_zero, out_zero, reciprocal;
    if (!PyArg_ParseTuple(args, "OOOdididip", &a_object, &b_object, &out_object, &a_scale, &a_zero, &b_scale,
                          &b_zero, &out_scale, &out_zero, &reciprocal))
        return -1;
    PyArrayObject *arrays[3] = {as_array(a_object, "a", 0), as_array(b_object, "b", 0), as_array(out_object, "out", 0)};
    if (PyErr_Occurred() || check_output(arrays[2]) < 0) return -1;
    for (int i = 0; i < 2; i++) {
        if (type_of(arrays[i]) != DMLQ_U8 && type_of(arrays[i]) != DMLQ_I8) {
            PyErr_SetString(PyExc_ValueError, "quantized_add: a and b must be uint8 or int8");
            return -1;
        }
    }
    *params = (dmlq_qadd_params){is_signed_byte(arrays[0]), is_signed_byte(arrays[1]), is_signed_byte(arrays[2]),
                                 a_zero, b_zero, (float)a_scale, (float)b_scale, (float)out_scale, (float)out_zero,
                                 reciprocal, 0.0f, 0.0f, 0};
    if (byte_bounds(arrays[2], &params->lo, &params->hi) < 0 || build_loop(loop, arrays, 3) < 0) return -1;
    params->corrected = dmlq_qadd_corrected(rows_for_level(), params, PyArray_SIZE(arrays[2]));
    return 0;
}

static PyObject *quantized_add(PyObject *self, PyObject *args) {
    dmlq_loop loop;
    dmlq_qadd_params params;
    if (qadd_operands(args, &loop, &params) < 0) return NULL;
    return run(&loop, rows_for_level()->quantized_add, &params);
}

/* Which quotient quantized_add(*args) would compute: "multiply", "corrected" or "divide". */
static PyObject *quantized_add_route(PyObject *self, PyObject *args) {
    dmlq_loop loop;
    dmlq_qadd_params params;
    if (qadd_operands(args, &loop, &params) < 0) return NULL;
    return PyUnicode_FromString(params.reciprocal ? "multiply" : params.corrected ? "corrected" : "divide");
}

static PyObject *add(PyObject *self, PyObject *args) {
    PyObject *a_object, *b_object, *out_object;
    int activation;
    double p0, p1;
    if (!PyArg_ParseTuple(args, "OOOi(dd)", &a_object, &b_object, &out_object, &activation, &p0, &p1)) return NULL;
    PyArrayObject *arrays[3] = {as_array(a_object, "a", 0), as_array(b_object, "b", 0), as_array(out_object, "out", 0)};
    if (PyErr_Occurred() || check_output(arrays[2]) < 0) return NULL;
    dmlq_add_params params = {type_of(arrays[2]), activation, {p0, p1}};
    if (type_of(arrays[0]) != params.type || type_of(arrays[1]) != params.type || params.type == DMLQ_F64 ||
        (activation != DMLQ_ACT_NONE && params.type != DMLQ_F32 && params.type != DMLQ_F16)) {
        PyErr_SetString(PyExc_ValueError, "add: unsupported dtypes");
        return NULL;
    }
    dmlq_loop loop;
    if (build_loop(&loop, arrays, 3) < 0) return NULL;
    return run(&loop, rows_for_level()->add, &params);
}

/* ---- matrix multiply ------------------------------------------------------------------------------ */

/* A [rows, columns] scale or zero point, broadcast along its size-1 dimensions, as a vector. */
static int read_vector(PyArrayObject *array, ptrdiff_t length, int axis, const char *name, float *floats,
                       int32_t *integers) {
    if (!array) {
        for (ptrdiff_t i = 0; i < length; i++) integers[i] = 0;
        return 0;
    }
    const int type = type_of(array);
    const int wanted_float = floats != NULL;
    if (PyArray_NDIM(array) != 2 || (wanted_float ? type != DMLQ_F32 : (type != DMLQ_U8 && type != DMLQ_I8))) {
        PyErr_Format(PyExc_ValueError, "%s must be a 2-D %s array", name, wanted_float ? "float32" : "8-bit");
        return -1;
    }
    const ptrdiff_t size = PyArray_DIM(array, axis), other = PyArray_DIM(array, 1 - axis);
    if ((size != 1 && size != length) || other != 1) {
        PyErr_Format(PyExc_ValueError, "%s has a shape that is neither per-tensor nor per-%s", name,
                     axis == 0 ? "row" : "column");
        return -1;
    }
    const char *data = PyArray_BYTES(array);
    const ptrdiff_t stride = size == 1 ? 0 : PyArray_STRIDE(array, axis);
    if (wanted_float) /* one loop per type: a long per-column vector is read on every call */
        for (ptrdiff_t i = 0; i < length; i++) floats[i] = *(const float *)(data + i * stride);
    else if (type == DMLQ_I8)
        for (ptrdiff_t i = 0; i < length; i++) integers[i] = *(const int8_t *)(data + i * stride);
    else
        for (ptrdiff_t i = 0; i < length; i++) integers[i] = *(const uint8_t *)(data + i * stride);
    return 0;
}

/* Byte offsets of every batch (the dimensions before the last two), in row-major batch order. */
static void batch_offsets(PyArrayObject *array, PyArrayObject *out, ptrdiff_t *offsets) {
    const int batch_dims = PyArray_NDIM(out) - 2;
    ptrdiff_t index[2] = {0, 0}, count = 1;
    for (int d = 0; d < batch_dims; d++) count *= PyArray_DIM(out, d);
    for (ptrdiff_t b = 0; b < count; b++) {
        ptrdiff_t offset = 0;
        for (int d = 0; d < batch_dims; d++) offset += index[d] * PyArray_STRIDE(array, d);
        offsets[b] = offset;
        for (int d = batch_dims - 1; d >= 0 && ++index[d] == PyArray_DIM(out, d); d--) index[d] = 0;
    }
}

static int check_matrices(PyArrayObject *a, PyArrayObject *b, PyArrayObject *out) {
    const int ndim = PyArray_NDIM(out);
    if (ndim < 2 || ndim > 4 || PyArray_NDIM(a) != ndim || PyArray_NDIM(b) != ndim) {
        PyErr_SetString(PyExc_ValueError, "matmul: a, b and out need the same 2 to 4 dimensions");
        return -1;
    }
    for (int d = 0; d < ndim - 2; d++) {
        if (PyArray_DIM(a, d) != PyArray_DIM(out, d) || PyArray_DIM(b, d) != PyArray_DIM(out, d)) {
            PyErr_SetString(PyExc_ValueError, "matmul: batch sizes must equal the output's");
            return -1;
        }
    }
    if (PyArray_DIM(a, ndim - 2) != PyArray_DIM(out, ndim - 2) || PyArray_DIM(b, ndim - 1) != PyArray_DIM(out, ndim - 1) ||
        PyArray_DIM(a, ndim - 1) != PyArray_DIM(b, ndim - 2)) {
        PyErr_SetString(PyExc_ValueError, "matmul: a is [..., M, K], b [..., K, N], out [..., M, N]");
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        PyArrayObject *array = i == 0 ? a : i == 1 ? b : out;
        if (type_of(array) != DMLQ_U8 && type_of(array) != DMLQ_I8) {
            PyErr_SetString(PyExc_ValueError, "matmul: a, b and out must be uint8 or int8");
            return -1;
        }
    }
    if (PyArray_DIM(a, ndim - 1) >= MATMUL_MAX_K) {
        PyErr_SetString(PyExc_ValueError, "matmul: K must be below MAX_K (8388608)");
        return -1;
    }
    return 0;
}

/* ---- B packed once --------------------------------------------------------------------------- */

#define PACKED_B_CAPSULE "dmlq._core.packed_b"

/* A packed B (a capsule's pointer) and its batch dimensions: those before its last two. */
typedef struct {
    dmlq_packed_b packed;
    int batch_dims;
    ptrdiff_t batch_shape[2];
} packed_matrix;

static void free_packed_matrix(PyObject *capsule) {
    packed_matrix *matrix = PyCapsule_GetPointer(capsule, PACKED_B_CAPSULE);
    dmlq_gemm_free_packed_b(&matrix->packed);
    PyMem_RawFree(matrix);
}

static int is_byte_matrix(PyArrayObject *array) {
    return PyArray_NDIM(array) >= 2 && PyArray_NDIM(array) <= 4 && (type_of(array) == DMLQ_U8 || type_of(array) == DMLQ_I8);
}

static PyObject *pack_b(PyObject *self, PyObject *arg) {
    PyArrayObject *b = as_array(arg, "b", 0);
    if (!b) return NULL;
    const int ndim = PyArray_NDIM(b);
    if (!is_byte_matrix(b) || PyArray_DIM(b, ndim - 2) >= MATMUL_MAX_K) {
        PyErr_SetString(PyExc_ValueError, "pack_b: b must be a 2-D to 4-D uint8 or int8 array with K below MAX_K");
        return NULL;
    }
    ptrdiff_t batches = 1;
    for (int d = 0; d < ndim - 2; d++) batches *= PyArray_DIM(b, d);
    packed_matrix *matrix = PyMem_RawCalloc(1, sizeof *matrix);
    ptrdiff_t *offsets = PyMem_RawMalloc(sizeof(ptrdiff_t) * (size_t)(batches ? batches : 1));
    if (!matrix || !offsets) {
        PyMem_RawFree(matrix);
        PyMem_RawFree(offsets);
        return PyErr_NoMemory();
    }
    matrix->batch_dims = ndim - 2;
    for (int d = 0; d < ndim - 2; d++) matrix->batch_shape[d] = PyArray_DIM(b, d);
    batch_offsets(b, b, offsets);
    const int threads = dmlq_num_threads();
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = dmlq_gemm_pack_b(&matrix->packed, PyArray_BYTES(b), offsets, batches, PyArray_DIM(b, ndim - 2),
                              PyArray_DIM(b, ndim - 1), PyArray_STRIDE(b, ndim - 2), PyArray_STRIDE(b, ndim - 1),
                              is_signed_byte(b), threads);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(offsets);
    PyObject *capsule = status ? NULL : PyCapsule_New(matrix, PACKED_B_CAPSULE, free_packed_matrix);
    if (!capsule) {
        if (!status) dmlq_gemm_free_packed_b(&matrix->packed);
        PyMem_RawFree(matrix);
        return status ? PyErr_NoMemory() : NULL;
    }
    return capsule;
}

static PyObject *gemm_kernel_set(PyObject *self, PyObject *unused) { return PyUnicode_FromString(dmlq_gemm_kernel_set()); }

/* matmul's checks of a packed b against a and out (whose own checks are check_matrices'). */
static int check_packed(const packed_matrix *matrix, PyArrayObject *a, PyArrayObject *out) {
    const int ndim = PyArray_NDIM(out), skipped = ndim - 2 - matrix->batch_dims;
    if (!is_byte_matrix(a) || !is_byte_matrix(out) || PyArray_NDIM(a) != ndim || skipped < 0) {
        PyErr_SetString(PyExc_ValueError, "matmul: a and out need the same 2 to 4 dimensions, at least b's");
        return -1;
    }
    int fits = PyArray_DIM(a, ndim - 1) == matrix->packed.k && PyArray_DIM(out, ndim - 1) == matrix->packed.n &&
               PyArray_DIM(a, ndim - 2) == PyArray_DIM(out, ndim - 2);
    for (int d = 0; d < ndim - 2; d++) fits &= PyArray_DIM(a, d) == PyArray_DIM(out, d);
    for (int d = 0; d < matrix->batch_dims; d++)
        fits &= matrix->batch_shape[d] == 1 || matrix->batch_shape[d] == PyArray_DIM(out, d + skipped);
    if (!fits) {
        PyErr_SetString(PyExc_ValueError, "matmul: a is [..., M, K], packed b [..., K, N], out [..., M, N]");
        return -1;
    }
    if (!dmlq_gemm_packed_for_current_level(&matrix->packed)) {
        PyErr_SetString(PyExc_ValueError, "matmul: b was packed for another CPU level's kernel set");
        return -1;
    }
    return 0;
}

/* Each output batch's index among the packed batches: their dimensions aligned on the right of
 * the output's, broadcast where they are 1. */
static void packed_batch_indices(const packed_matrix *matrix, PyArrayObject *out, ptrdiff_t *indices) {
    const int out_dims = PyArray_NDIM(out) - 2, skipped = out_dims - matrix->batch_dims;
    ptrdiff_t index[2] = {0, 0}, count = 1;
    for (int d = 0; d < out_dims; d++) count *= PyArray_DIM(out, d);
    for (ptrdiff_t b = 0; b < count; b++) {
        ptrdiff_t packed_index = 0;
        for (int d = 0; d < matrix->batch_dims; d++) {
            const ptrdiff_t size = matrix->batch_shape[d];
            packed_index = packed_index * size + (size == 1 ? 0 : index[d + skipped]);
        }
        indices[b] = packed_index;
        for (int d = out_dims - 1; d >= 0 && ++index[d] == PyArray_DIM(out, d); d--) index[d] = 0;
    }
}

static PyObject *matmul(PyObject *self, PyObject *args) {
    PyObject *objects[9];
    int reciprocal;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOp", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4],
                          &objects[5], &objects[6], &objects[7], &objects[8], &reciprocal))
        return NULL;
    static const char *const names[9] = {"a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point",
                                         "output_scale", "output_zero_point", "out"};
    /* b: an array, or a packed B capsule (pack_b) */
    const packed_matrix *packed = PyCapsule_IsValid(objects[3], PACKED_B_CAPSULE)
                                      ? PyCapsule_GetPointer(objects[3], PACKED_B_CAPSULE)
                                      : NULL;
    PyArrayObject *arrays[9];
    for (int i = 0; i < 9; i++)
        arrays[i] = i == 3 && packed ? NULL : as_array(objects[i], names[i], i == 2 || i == 5 || i == 7);
    if (PyErr_Occurred() || check_output(arrays[8]) < 0) return NULL;
    PyArrayObject *a = arrays[0], *b = arrays[3], *out = arrays[8];
    if ((packed ? check_packed(packed, a, out) : check_matrices(a, b, out)) < 0 || check_overlaps(out, arrays, 8, 0) < 0)
        return NULL;
    const int ndim = PyArray_NDIM(out);
    dmlq_gemm_problem p = {1, PyArray_DIM(out, ndim - 2), PyArray_DIM(out, ndim - 1), PyArray_DIM(a, ndim - 1)};
    for (int d = 0; d < ndim - 2; d++) p.batches *= PyArray_DIM(out, d);
    if (p.batches == 0 || p.m == 0 || p.n == 0) Py_RETURN_NONE;
    float *floats = PyMem_Malloc(sizeof(float) * (size_t)(3 * p.m + p.n));
    int32_t *integers = PyMem_Malloc(sizeof(int32_t) * (size_t)(2 * p.m + p.n));
    ptrdiff_t *offsets = PyMem_Malloc(sizeof(ptrdiff_t) * (size_t)(3 * p.batches));
    if (!floats || !integers || !offsets) {
        PyMem_Free(floats);
        PyMem_Free(integers);
        PyMem_Free(offsets);
        return PyErr_NoMemory();
    }
    float *a_scale = floats, *out_scale = a_scale + p.m, *out_zero_float = out_scale + p.m, *b_scale = out_zero_float + p.m;
    int32_t *a_zero = integers, *out_zero = a_zero + p.m, *b_zero = out_zero + p.m;
    int status = read_vector(arrays[1], p.m, 0, names[1], a_scale, NULL);
    if (!status) status = read_vector(arrays[2], p.m, 0, names[2], NULL, a_zero);
    if (!status) status = read_vector(arrays[4], p.n, 1, names[4], b_scale, NULL);
    if (!status) status = read_vector(arrays[5], p.n, 1, names[5], NULL, b_zero);
    if (!status) status = read_vector(arrays[6], p.m, 0, names[6], out_scale, NULL);
    if (!status) status = read_vector(arrays[7], p.m, 0, names[7], NULL, out_zero);
    for (ptrdiff_t m = 0; !status && m < p.m; m++) out_zero_float[m] = (float)out_zero[m];
    if (!status) {
        batch_offsets(a, out, offsets);
        if (packed)
            packed_batch_indices(packed, out, offsets + p.batches);
        else
            batch_offsets(b, out, offsets + p.batches);
        batch_offsets(out, out, offsets + 2 * p.batches);
        p.a = PyArray_BYTES(a);
        p.b = packed ? NULL : PyArray_BYTES(b);
        p.packed_b = packed ? &packed->packed : NULL;
        p.out = PyArray_BYTES(out);
        p.a_offsets = offsets;
        p.b_offsets = offsets + p.batches;
        p.out_offsets = offsets + 2 * p.batches;
        p.a_row = PyArray_STRIDE(a, ndim - 2);
        p.a_col = PyArray_STRIDE(a, ndim - 1);
        p.b_row = packed ? 0 : PyArray_STRIDE(b, ndim - 2);
        p.b_col = packed ? 0 : PyArray_STRIDE(b, ndim - 1);
        p.out_row = PyArray_STRIDE(out, ndim - 2);
        p.out_col = PyArray_STRIDE(out, ndim - 1);
        p.a_signed = is_signed_byte(a);
        p.b_signed = packed ? packed->packed.b_signed : is_signed_byte(b);
        p.out_signed = is_signed_byte(out);
        p.a_scale = a_scale;
        p.b_scale = b_scale;
        p.out_scale = out_scale;
        p.a_zero_point = a_zero;
        p.b_zero_point = b_zero;
        p.out_zero_point = out_zero_float;
        p.reciprocal = reciprocal;
        const int threads = dmlq_num_threads();
        Py_BEGIN_ALLOW_THREADS
        status = dmlq_gemm(&p, threads);
        Py_END_ALLOW_THREADS
        if (status) PyErr_NoMemory();
    }
    PyMem_Free(floats);
    PyMem_Free(integers);
    PyMem_Free(offsets);
    if (status) return NULL;
    Py_RETURN_NONE;
}

/* ---- configuration ------------------------------------------------------------------------------- */

static PyObject *set_num_threads(PyObject *self, PyObject *arg) {
    const long threads = PyLong_AsLong(arg);
    if (threads == -1 && PyErr_Occurred()) return NULL;
    if (threads < 1) {
        PyErr_SetString(PyExc_ValueError, "the thread count must be at least 1");
        return NULL;
    }
    dmlq_set_num_threads(threads > 1024 ? 1024 : (int)threads);
    Py_RETURN_NONE;
}

static PyObject *get_num_threads(PyObject *self, PyObject *unused) { return PyLong_FromLong(dmlq_num_threads()); }

static PyObject *level_name(int level) { return PyUnicode_FromString(LEVEL_NAMES[level]); }

static PyObject *get_level(PyObject *self, PyObject *unused) { return level_name(dmlq_level()); }

static PyObject *detected_level(PyObject *self, PyObject *unused) { return level_name(dmlq_detected_level()); }

static PyObject *set_level(PyObject *self, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    for (int level = 0; level < LEVEL_COUNT; level++) {
        if (strcmp(name, LEVEL_NAMES[level]) == 0) {
            if (dmlq_set_level(level) < 0) break;
            Py_RETURN_NONE;
        }
    }
    PyErr_Format(PyExc_ValueError, "level %R is unknown or above this CPU's %s", arg, LEVEL_NAMES[dmlq_detected_level()]);
    return NULL;
}

/* ---- output allocation ------------------------------------------------------------------------ */

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
static size_t output_bytes(const PyArray_Dims *shape, const PyArray_Descr *descr) {
    size_t bytes = (size_t)PyDataType_ELSIZE(descr);
    for (int i = 0; i < shape->len; i++) {
        if (shape->ptr[i] < 0 || (shape->ptr[i] && bytes > SIZE_MAX / (size_t)shape->ptr[i])) return 0;
        bytes *= (size_t)shape->ptr[i];
    }
    return bytes;
}

static PyObject *empty(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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
    PyObject *previous = NULL;
    if (output_bytes(&shape, descr) >= CACHE_MIN_BYTES) {
        previous = PyDataMem_SetHandler(cache_handler_capsule);
        if (!previous) {
            PyDimMem_FREE(shape.ptr);
            Py_DECREF(descr);
            return NULL;
        }
    }
    PyObject *array = PyArray_Empty(shape.len, shape.ptr, descr, 0); /* steals descr */
    PyDimMem_FREE(shape.ptr);
    if (previous) {
        PyObject *ours = PyDataMem_SetHandler(previous);
        Py_DECREF(previous);
        if (!ours) Py_CLEAR(array);
        Py_XDECREF(ours);
    }
    return array;
}

static PyObject *cached_bytes(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    PyThread_acquire_lock(cache_lock, WAIT_LOCK);
    size_t bytes = cache_bytes;
    PyThread_release_lock(cache_lock);
    return PyLong_FromSize_t(bytes);
}

/* ---- blockwise 4-bit ------------------------------------------------------------------------------ */

/* The problem of a [rows, cols] float matrix, packed nibbles and [rows / br, cols / bc] scales and zero points. */
static int int4_problem(dmlq_int4_problem *p, PyArrayObject *floats, PyArrayObject *packed, PyArrayObject *scale,
                        PyArrayObject *zero_point, int is_signed) {
    if (PyErr_Occurred()) return -1;
    const int float_type = type_of(floats), scale_type = type_of(scale);
    if (PyArray_NDIM(floats) != 2 || !PyArray_IS_C_CONTIGUOUS(floats) || (float_type != DMLQ_F32 && float_type != DMLQ_F16)) {
        PyErr_SetString(PyExc_ValueError, "int4: the float matrix must be a C-contiguous 2-D float32 or float16 array");
        return -1;
    }
    if (PyArray_NDIM(packed) != 1 || !PyArray_IS_C_CONTIGUOUS(packed) || type_of(packed) != DMLQ_U8) {
        PyErr_SetString(PyExc_ValueError, "int4: packed must be a contiguous 1-D uint8 array");
        return -1;
    }
    if (PyArray_NDIM(scale) != 2 || (scale_type != DMLQ_F32 && scale_type != DMLQ_F16)) {
        PyErr_SetString(PyExc_ValueError, "int4: scale must be a 2-D float32 or float16 array");
        return -1;
    }
    const ptrdiff_t rows = PyArray_DIM(floats, 0), cols = PyArray_DIM(floats, 1);
    const ptrdiff_t scale_rows = PyArray_DIM(scale, 0), scale_cols = PyArray_DIM(scale, 1);
    if (scale_rows < 1 || scale_cols < 1 || rows % scale_rows || cols % scale_cols) {
        PyErr_SetString(PyExc_ValueError, "int4: the scale's shape must divide the matrix's");
        return -1;
    }
    if (PyArray_DIM(packed, 0) * 2 < rows * cols) {
        PyErr_SetString(PyExc_ValueError, "int4: packed holds fewer nibbles than the matrix has elements");
        return -1;
    }
    if (zero_point && (PyArray_NDIM(zero_point) != 2 || type_of(zero_point) != DMLQ_I8 ||
                       PyArray_DIM(zero_point, 0) != scale_rows || PyArray_DIM(zero_point, 1) != scale_cols)) {
        PyErr_SetString(PyExc_ValueError, "int4: zero_point must be an int8 array of the scale's shape");
        return -1;
    }
    *p = (dmlq_int4_problem){rows, cols, rows / scale_rows, cols / scale_cols, is_signed, NULL, NULL,
                             PyArray_BYTES(floats), float_type, PyArray_BYTES(scale), scale_type,
                             PyArray_STRIDE(scale, 0), PyArray_STRIDE(scale, 1), NULL, 0, 0};
    if (zero_point) {
        p->zero_point = (const int8_t *)PyArray_BYTES(zero_point);
        p->zero_row = PyArray_STRIDE(zero_point, 0);
        p->zero_col = PyArray_STRIDE(zero_point, 1);
    }
    return 0;
}

static PyObject *dequantize_int4(PyObject *self, PyObject *args) {
    PyObject *packed_object, *scale_object, *zero_object, *out_object;
    int is_signed;
    if (!PyArg_ParseTuple(args, "OOOOp", &packed_object, &scale_object, &zero_object, &out_object, &is_signed)) return NULL;
    PyArrayObject *packed = as_array(packed_object, "packed", 0), *scale = as_array(scale_object, "scale", 0);
    PyArrayObject *zero_point = as_array(zero_object, "zero_point", 1), *out = as_array(out_object, "out", 0);
    dmlq_int4_problem problem;
    if (PyErr_Occurred() || check_output(out) < 0 || int4_problem(&problem, out, packed, scale, zero_point, is_signed) < 0)
        return NULL;
    PyArrayObject *inputs[3] = {packed, scale, zero_point};
    if (check_overlaps(out, inputs, 3, 0) < 0) return NULL;
    problem.packed = (const uint8_t *)PyArray_BYTES(packed);
    const int threads = dmlq_num_threads();
    Py_BEGIN_ALLOW_THREADS
    dmlq_dequantize_int4(&problem, threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *quantize_int4(PyObject *self, PyObject *args) {
    PyObject *x_object, *scale_object, *zero_object, *packed_object;
    int is_signed, reciprocal;
    if (!PyArg_ParseTuple(args, "OOOOpp", &x_object, &scale_object, &zero_object, &packed_object, &is_signed, &reciprocal))
        return NULL;
    PyArrayObject *x = as_array(x_object, "x", 0), *scale = as_array(scale_object, "scale", 0);
    PyArrayObject *zero_point = as_array(zero_object, "zero_point", 1), *packed = as_array(packed_object, "packed", 0);
    dmlq_int4_problem problem;
    if (PyErr_Occurred() || check_output(packed) < 0 || int4_problem(&problem, x, packed, scale, zero_point, is_signed) < 0)
        return NULL;
    PyArrayObject *inputs[3] = {x, scale, zero_point};
    if (check_overlaps(packed, inputs, 3, 0) < 0) return NULL;
    problem.packed_out = (uint8_t *)PyArray_BYTES(packed);
    const int threads = dmlq_num_threads();
    Py_BEGIN_ALLOW_THREADS
    dmlq_quantize_int4(&problem, reciprocal, threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* ---- the NumPy layer's cache key ----------------------------------------------------------------- */

static PyObject *intp_tuple(const npy_intp *values, int count) {
    PyObject *tuple = PyTuple_New(count);
    for (int i = 0; tuple && i < count; i++) {
        PyObject *value = PyLong_FromSsize_t(values[i]);
        if (!value) Py_CLEAR(tuple);
        else PyTuple_SET_ITEM(tuple, i, value);
    }
    return tuple;
}

/* Appends an array's (dtype.char, shape, strides) to key at index, or three Nones for None. */
static int put_layout(PyObject *key, Py_ssize_t index, PyObject *object) {
    if (object == Py_None) {
        for (int i = 0; i < 3; i++) PyTuple_SET_ITEM(key, index + i, Py_NewRef(Py_None));
        return 0;
    }
    PyArrayObject *array = (PyArrayObject *)object;
    PyObject *parts[3] = {PyUnicode_FromOrdinal(PyArray_DESCR(array)->type),
                          intp_tuple(PyArray_DIMS(array), PyArray_NDIM(array)),
                          intp_tuple(PyArray_STRIDES(array), PyArray_NDIM(array))};
    for (int i = 0; i < 3; i++) PyTuple_SET_ITEM(key, index + i, parts[i]);
    return parts[0] && parts[1] && parts[2] ? 0 : -1;
}

/* layout_key(desc_type, out, *operands): (desc_type, out's layout, each operand's layout), the key under
 * which the NumPy layer caches compiled operators; None when an operand is not None or a C-contiguous
 * native-order array (the caller then describes it, or copies it, in Python). */
static PyObject *layout_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 2 || !PyArray_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "layout_key(desc_type, out, *operands) needs an output array");
        return NULL;
    }
    for (Py_ssize_t i = 2; i < nargs; i++) {
        if (args[i] == Py_None) continue;
        if (!PyArray_Check(args[i]) || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)args[i]) ||
            !PyArray_ISNOTSWAPPED((PyArrayObject *)args[i]))
            Py_RETURN_NONE;
    }
    PyObject *key = PyTuple_New(1 + 3 * (nargs - 1));
    if (!key) return NULL;
    PyTuple_SET_ITEM(key, 0, Py_NewRef(args[0]));
    for (Py_ssize_t i = 1; i < nargs; i++) {
        if (put_layout(key, 1 + 3 * (i - 1), args[i]) < 0) {
            Py_DECREF(key);
            return NULL;
        }
    }
    return key;
}

static PyMethodDef methods[] = {
    {"quantize", quantize, METH_VARARGS, "quantize(x, scale, zero_point, out, reciprocal_division)"},
    {"dequantize", dequantize, METH_VARARGS, "dequantize(q, scale, zero_point, out)"},
    {"quantized_add", quantized_add, METH_VARARGS,
     "quantized_add(a, b, out, a_scale, a_zero_point, b_scale, b_zero_point, output_scale, output_zero_point, "
     "reciprocal_division)"},
    {"quantized_add_route", quantized_add_route, METH_VARARGS,
     "quantized_add_route(...): the quotient quantized_add(...) computes: 'multiply', 'corrected' or 'divide'."},
    {"add", add, METH_VARARGS, "add(a, b, out, activation_type_value, (p0, p1))"},
    {"matmul", matmul, METH_VARARGS,
     "matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out, "
     "reciprocal_division)"},
    {"dequantize_int4", dequantize_int4, METH_VARARGS,
     "dequantize_int4(packed, scale, zero_point, out, is_signed): blockwise packed 4-bit to a 2-D float array"},
    {"quantize_int4", quantize_int4, METH_VARARGS,
     "quantize_int4(x, scale, zero_point, packed, is_signed, reciprocal_division): a 2-D float array to nibbles"},
    {"pack_b", pack_b, METH_O, "pack_b(b): a capsule of b packed for the current level's matmul kernels."},
    {"gemm_kernel_set", gemm_kernel_set, METH_NOARGS, "The name of the current level's matmul kernel set."},
    {"set_num_threads", set_num_threads, METH_O, "Threads used by the kernels (at least 1)."},
    {"get_num_threads", get_num_threads, METH_NOARGS, "Threads used by the kernels."},
    {"get_level", get_level, METH_NOARGS, "The instruction-set level in use."},
    {"detected_level", detected_level, METH_NOARGS, "The best instruction-set level of this CPU."},
    {"set_level", set_level, METH_O, "Use a level at or below the detected one (for tests)."},
    {"empty", (PyCFunction)(void (*)(void))empty, METH_FASTCALL, "empty(shape, dtype): numpy.empty, large blocks from dmlq's output cache."},
    {"layout_key", (PyCFunction)(void (*)(void))layout_key, METH_FASTCALL,
     "layout_key(desc_type, out, *operands): the NumPy layer's cache key, None for a strided operand."},
    {"cached_bytes", cached_bytes, METH_NOARGS, "Bytes of freed outputs the cache holds for reuse."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dmlq._core", "dmlq's compiled kernels.", -1, methods};

PyMODINIT_FUNC PyInit__core(void) {
    import_array();
    dmlq_threads_init();
    cache_lock = PyThread_allocate_lock();
    cache_handler_capsule = cache_lock ? PyCapsule_New(&cache_handler, "mem_handler", NULL) : NULL;
    if (!cache_handler_capsule) return PyErr_NoMemory();
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyObject *levels = PyTuple_New(LEVEL_COUNT);
    for (int level = 0; levels && level < LEVEL_COUNT; level++) {
        PyObject *name = PyUnicode_FromString(LEVEL_NAMES[level]);
        if (!name) Py_CLEAR(levels);
        else PyTuple_SET_ITEM(levels, level, name);
    }
    if (!levels || PyModule_AddObject(m, "LEVELS", levels) < 0) {
        Py_XDECREF(levels);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "MAX_K", MATMUL_MAX_K) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
