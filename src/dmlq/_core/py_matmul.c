/* dmlq._core's matrix multiply: B packed once (pack_b), matmul on arrays, and the NumPy layer's
 * per-tensor call in one step (matmul_per_tensor); its operands' checks and problem for the other
 * outputs of py_family.c (py_matmul.h). */
#include "py_matmul.h"

/* `length` values `stride` bytes apart from `data`, float32 into floats or uint8/int8 (`type`) into
 * integers. One loop per type: a long per-column vector is read on every call. */
static void gather(const char *data, ptrdiff_t stride, ptrdiff_t length, int type, float *floats, int32_t *integers) {
    if (type == DMLQ_F32)
        for (ptrdiff_t i = 0; i < length; i++) floats[i] = *(const float *)(data + i * stride);
    else if (type == DMLQ_I8)
        for (ptrdiff_t i = 0; i < length; i++) integers[i] = *(const int8_t *)(data + i * stride);
    else
        for (ptrdiff_t i = 0; i < length; i++) integers[i] = *(const uint8_t *)(data + i * stride);
}

/* A [..., rows, columns] scale or zero point (its dimensions before the last two of size 1),
 * broadcast along its size-1 dimensions, as a vector. */
static int read_vector(PyArrayObject *array, ptrdiff_t length, int axis, const char *name, float *floats,
                       int32_t *integers) {
    if (!array) { /* an absent scale is 1, an absent zero point 0 */
        for (ptrdiff_t i = 0; i < length; i++) {
            if (floats) floats[i] = 1.0f;
            else integers[i] = 0;
        }
        return 0;
    }
    const int type = dmlq_py_type_of(array), ndim = PyArray_NDIM(array);
    const int wanted_float = floats != NULL;
    int leading_ones = ndim >= 2;
    for (int d = 0; d < ndim - 2; d++) leading_ones &= PyArray_DIM(array, d) == 1;
    if (!leading_ones || (wanted_float ? type != DMLQ_F32 : (type != DMLQ_U8 && type != DMLQ_I8))) {
        PyErr_Format(PyExc_ValueError, "%s must be a %s array of 2 dimensions, or more of size 1 before them",
                     name, wanted_float ? "float32" : "8-bit");
        return -1;
    }
    const int rows = ndim - 2;
    const ptrdiff_t size = PyArray_DIM(array, rows + axis), other = PyArray_DIM(array, rows + 1 - axis);
    if ((size != 1 && size != length) || other != 1) {
        PyErr_Format(PyExc_ValueError, "%s has a shape that is neither per-tensor nor per-%s", name,
                     axis == 0 ? "row" : "column");
        return -1;
    }
    gather(PyArray_BYTES(array), size == 1 ? 0 : PyArray_STRIDE(array, rows + axis), length, type, floats, integers);
    return 0;
}

/* Byte offsets of every batch (the dimensions before the last two), in row-major batch order. */
void dmlq_py_batch_offsets(PyArrayObject *array, PyArrayObject *out, ptrdiff_t *offsets) {
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
    for (int i = 0; i < 2; i++) {
        PyArrayObject *array = i == 0 ? a : b;
        if (dmlq_py_type_of(array) != DMLQ_U8 && dmlq_py_type_of(array) != DMLQ_I8) {
            PyErr_SetString(PyExc_ValueError, "matmul: a and b must be uint8 or int8");
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
typedef struct dmlq_py_packed_matrix {
    dmlq_packed_b packed;
    int batch_dims;
    ptrdiff_t batch_shape[2];
} packed_matrix;

static void free_packed_matrix(PyObject *capsule) {
    packed_matrix *matrix = PyCapsule_GetPointer(capsule, PACKED_B_CAPSULE);
    dmlq_gemm_free_packed_b(&matrix->packed);
    PyMem_RawFree(matrix);
}

static int is_matrix(PyArrayObject *array) { return PyArray_NDIM(array) >= 2 && PyArray_NDIM(array) <= 4; }

static int is_byte_matrix(PyArrayObject *array) {
    return is_matrix(array) && (dmlq_py_type_of(array) == DMLQ_U8 || dmlq_py_type_of(array) == DMLQ_I8);
}

PyObject *dmlq_py_pack_b(PyObject *self, PyObject *arg) {
    PyArrayObject *b = dmlq_py_as_array(arg, "b", 0);
    if (!b) return NULL;
    const int ndim = PyArray_NDIM(b);
    if (!is_byte_matrix(b) || PyArray_DIM(b, ndim - 2) >= MATMUL_MAX_K) {
        PyErr_SetString(PyExc_ValueError, "pack_b: b must be a 2-D to 4-D uint8 or int8 array with K below MAX_K");
        return NULL;
    }
    const ptrdiff_t batches = PyArray_MultiplyList(PyArray_DIMS(b), ndim - 2);
    packed_matrix *matrix = PyMem_RawCalloc(1, sizeof *matrix);
    ptrdiff_t *offsets = PyMem_RawMalloc(sizeof(ptrdiff_t) * (size_t)(batches ? batches : 1));
    if (!matrix || !offsets) {
        PyMem_RawFree(matrix);
        PyMem_RawFree(offsets);
        return PyErr_NoMemory();
    }
    matrix->batch_dims = ndim - 2;
    for (int d = 0; d < ndim - 2; d++) matrix->batch_shape[d] = PyArray_DIM(b, d);
    dmlq_py_batch_offsets(b, b, offsets);
    const int threads = dmlq_num_threads();
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = dmlq_gemm_pack_b(&matrix->packed, PyArray_BYTES(b), offsets, batches, PyArray_DIM(b, ndim - 2),
                              PyArray_DIM(b, ndim - 1), PyArray_STRIDE(b, ndim - 2), PyArray_STRIDE(b, ndim - 1),
                              dmlq_py_is_signed_byte(b), threads);
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

PyObject *dmlq_py_unpack_b(PyObject *self, PyObject *capsule) {
    const packed_matrix *matrix = PyCapsule_GetPointer(capsule, PACKED_B_CAPSULE);
    if (!matrix) return NULL;
    npy_intp shape[4];
    for (int d = 0; d < matrix->batch_dims; d++) shape[d] = matrix->batch_shape[d];
    shape[matrix->batch_dims] = matrix->packed.k;
    shape[matrix->batch_dims + 1] = matrix->packed.n;
    PyArrayObject *b = (PyArrayObject *)PyArray_SimpleNew(matrix->batch_dims + 2, shape,
                                                          matrix->packed.b_signed ? NPY_INT8 : NPY_UINT8);
    if (!b) return NULL;
    Py_BEGIN_ALLOW_THREADS
    dmlq_gemm_unpack_b(&matrix->packed, PyArray_BYTES(b));
    Py_END_ALLOW_THREADS
    return (PyObject *)b;
}

PyObject *dmlq_py_gemm_kernel_set(PyObject *self, PyObject *unused) { return PyUnicode_FromString(dmlq_gemm_kernel_set()); }

/* matmul's checks of a packed b against a and out (whose own checks are check_matrices'). */
static int check_packed(const packed_matrix *matrix, PyArrayObject *a, PyArrayObject *out) {
    const int ndim = PyArray_NDIM(out), skipped = ndim - 2 - matrix->batch_dims;
    if (!is_byte_matrix(a) || !is_matrix(out) || PyArray_NDIM(a) != ndim || skipped < 0) {
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

/* Up to this many floats and as many integers, a call's vectors live in its own stack frame. Their
 * two allocations and frees, with the offsets' third (run_matmul), took 0.1-0.2 us of a 1 x 768 x 768
 * call (Zen 5, 2 threads: 2.70-2.81 -> 2.50-2.61 us), more than malloc alone costs. */
enum { LOCAL_VECTOR_VALUES = 2048 };

/* The per-row (M) and per-column (N) quantization vectors dmlq_gemm reads: in `local_floats` and
 * `local_integers`, or in two allocations. */
typedef struct {
    float *floats, *a_scale, *out_scale, *out_zero_float, *b_scale;
    int32_t *integers, *a_zero, *out_zero, *b_zero;
    int b_per_tensor; /* b_scale and b_zero hold one value, for every column (dmlq_gemm_problem) */
    float local_floats[LOCAL_VECTOR_VALUES];
    int32_t local_integers[LOCAL_VECTOR_VALUES];
} matmul_vectors;

static void free_vectors(matmul_vectors *v) {
    if (v->floats != v->local_floats) PyMem_Free(v->floats);
    if (v->integers != v->local_integers) PyMem_Free(v->integers);
}

static int allocate_vectors(matmul_vectors *v, ptrdiff_t m, ptrdiff_t n) {
    const ptrdiff_t floats = 3 * m + n, integers = 2 * m + n;
    v->floats = floats <= LOCAL_VECTOR_VALUES ? v->local_floats : PyMem_Malloc(sizeof(float) * (size_t)floats);
    v->integers = integers <= LOCAL_VECTOR_VALUES ? v->local_integers
                                                   : PyMem_Malloc(sizeof(int32_t) * (size_t)integers);
    if (!v->floats || !v->integers) {
        free_vectors(v);
        PyErr_NoMemory();
        return -1;
    }
    v->a_scale = v->floats, v->out_scale = v->a_scale + m, v->out_zero_float = v->out_scale + m;
    v->b_scale = v->out_zero_float + m;
    v->a_zero = v->integers, v->out_zero = v->a_zero + m, v->b_zero = v->out_zero + m;
    v->b_per_tensor = 0;
    return 0;
}

/* Up to this many batches, run_matmul's offsets live in its stack frame (as matmul_vectors'). */
enum { LOCAL_BATCHES = 16 };

/* out = a @ b (b an array, or `packed`) requantized by the vectors, whose output zero points are read
 * from out_zero: 0, or -1 with an exception set. The arrays passed matmul's checks. */
static int run_matmul(PyArrayObject *a, PyArrayObject *b, const packed_matrix *packed, PyArrayObject *out,
                      const matmul_vectors *v, int reciprocal, const dmlq_gemm_epilogue *epilogue) {
    const int ndim = PyArray_NDIM(out);
    dmlq_gemm_problem p = {PyArray_MultiplyList(PyArray_DIMS(out), ndim - 2), PyArray_DIM(out, ndim - 2),
                           PyArray_DIM(out, ndim - 1), PyArray_DIM(a, ndim - 1)};
    ptrdiff_t local_offsets[3 * LOCAL_BATCHES];
    ptrdiff_t *offsets = p.batches <= LOCAL_BATCHES ? local_offsets
                                                    : PyMem_Malloc(sizeof(ptrdiff_t) * (size_t)(3 * p.batches));
    if (!offsets) {
        PyErr_NoMemory();
        return -1;
    }
    for (ptrdiff_t m = 0; m < p.m; m++) v->out_zero_float[m] = (float)v->out_zero[m];
    dmlq_py_batch_offsets(a, out, offsets);
    if (packed)
        packed_batch_indices(packed, out, offsets + p.batches);
    else
        dmlq_py_batch_offsets(b, out, offsets + p.batches);
    dmlq_py_batch_offsets(out, out, offsets + 2 * p.batches);
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
    p.a_signed = dmlq_py_is_signed_byte(a);
    p.b_signed = packed ? packed->packed.b_signed : dmlq_py_is_signed_byte(b);
    p.out_signed = dmlq_py_is_signed_byte(out);
    p.a_scale = v->a_scale;
    p.b_scale = v->b_scale;
    p.out_scale = v->out_scale;
    p.a_zero_point = v->a_zero;
    p.b_zero_point = v->b_zero;
    p.b_per_tensor = v->b_per_tensor;
    p.out_zero_point = v->out_zero_float;
    p.reciprocal = reciprocal;
    p.epilogue = epilogue;
    const int threads = dmlq_num_threads();
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = dmlq_gemm(&p, threads);
    Py_END_ALLOW_THREADS
    if (offsets != local_offsets) PyMem_Free(offsets);
    if (status) PyErr_NoMemory();
    return status;
}

/* b: an array, or a packed B capsule (pack_b). */
static const packed_matrix *packed_matrix_of(PyObject *b) {
    return PyCapsule_IsValid(b, PACKED_B_CAPSULE) ? PyCapsule_GetPointer(b, PACKED_B_CAPSULE) : NULL;
}

static const char *const MATMUL_NAMES[9] = {"a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point",
                                             "output_scale", "output_zero_point", "out"};

int dmlq_py_matmul_operands(PyObject *const *objects, unsigned optional, PyArrayObject **arrays,
                            const packed_matrix **packed) {
    *packed = packed_matrix_of(objects[3]);
    for (int i = 0; i < 9; i++)
        arrays[i] = i == 3 && *packed ? NULL : dmlq_py_as_array(objects[i], MATMUL_NAMES[i], (optional >> i) & 1);
    if (PyErr_Occurred() || dmlq_py_check_output(arrays[8]) < 0) return -1;
    PyArrayObject *a = arrays[0], *b = arrays[3], *out = arrays[8];
    if ((*packed ? check_packed(*packed, a, out) : check_matrices(a, b, out)) < 0 ||
        dmlq_py_check_overlaps(out, arrays, 8, 0) < 0)
        return -1;
    return 0;
}

int dmlq_py_run_matmul_operands(PyArrayObject *const *arrays, const packed_matrix *packed, int reciprocal,
                                const dmlq_gemm_epilogue *epilogue) {
    PyArrayObject *out = arrays[8];
    const int ndim = PyArray_NDIM(out);
    const ptrdiff_t m = PyArray_DIM(out, ndim - 2), n = PyArray_DIM(out, ndim - 1);
    if (!PyArray_SIZE(out)) return 0;
    matmul_vectors v;
    if (allocate_vectors(&v, m, n) < 0) return -1;
    int status = read_vector(arrays[1], m, 0, MATMUL_NAMES[1], v.a_scale, NULL);
    if (!status) status = read_vector(arrays[2], m, 0, MATMUL_NAMES[2], NULL, v.a_zero);
    if (!status) status = read_vector(arrays[4], n, 1, MATMUL_NAMES[4], v.b_scale, NULL);
    if (!status) status = read_vector(arrays[5], n, 1, MATMUL_NAMES[5], NULL, v.b_zero);
    if (!status) status = read_vector(arrays[6], m, 0, MATMUL_NAMES[6], v.out_scale, NULL);
    if (!status) status = read_vector(arrays[7], m, 0, MATMUL_NAMES[7], NULL, v.out_zero);
    if (!status) status = run_matmul(arrays[0], arrays[3], packed, out, &v, reciprocal, epilogue);
    free_vectors(&v);
    return status;
}

PyObject *dmlq_py_matmul(PyObject *self, PyObject *args) {
    PyObject *objects[9];
    int reciprocal;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOp", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4],
                          &objects[5], &objects[6], &objects[7], &objects[8], &reciprocal))
        return NULL;
    PyArrayObject *arrays[9];
    const packed_matrix *packed;
    const unsigned zero_points = 1u << 2 | 1u << 5 | 1u << 7;
    if (dmlq_py_matmul_operands(objects, zero_points, arrays, &packed) < 0) return NULL;
    if (!is_byte_matrix(arrays[8])) {
        PyErr_SetString(PyExc_ValueError, "matmul: out must be uint8 or int8");
        return NULL;
    }
    if (dmlq_py_run_matmul_operands(arrays, packed, reciprocal, NULL) < 0) return NULL;
    Py_RETURN_NONE;
}

/* ---- the NumPy layer's common call, checked and run in one step ------------------------------------ */

/* dmlq.quantized_linear_matrix_multiply spent most of a small call in Python, converting and checking
 * its arguments. matmul_per_tensor takes the common call whole: 2-D operands and per-tensor scalar
 * parameters (B's may be per-column), accepted as py_parameters.c says; anything else gives None. */

/* A per-column ((N,) or (1, N)) parameter array of `type`, which every vector element must then be. */
static PyArrayObject *column_array(PyObject *object, ptrdiff_t n, int type) {
    if (!PyArray_Check(object)) return NULL;
    PyArrayObject *array = (PyArrayObject *)object;
    const int ndim = PyArray_NDIM(array);
    const int shaped = (ndim == 1 || (ndim == 2 && PyArray_DIM(array, 0) == 1)) && PyArray_DIM(array, ndim - 1) == n;
    const int readable = dmlq_py_type_of(array) == type && PyArray_ISALIGNED(array) && PyArray_ISNOTSWAPPED(array);
    return shaped && readable ? array : NULL;
}

/* B's scale (`type` DMLQ_F32, into floats) or zero point (B's type, into integers), per tensor or per
 * column (N,) / (1, N): how many values were read (1 or n), or 0. */
static ptrdiff_t accept_column_vector(PyObject *object, ptrdiff_t n, int type, float *floats, int32_t *integers) {
    const int is_scale = type == DMLQ_F32;
    if (is_scale ? dmlq_py_accept_scale(object, 2, floats) : dmlq_py_accept_zero_point(object, type, 2, integers))
        return 1;
    PyArrayObject *array = column_array(object, n, type);
    if (!array) return 0;
    gather(PyArray_BYTES(array), PyArray_STRIDE(array, PyArray_NDIM(array) - 1), n, type, floats, integers);
    int usable = 1;
    for (ptrdiff_t i = 0; is_scale && i < n; i++) usable &= dmlq_py_finite_non_zero(floats[i]);
    return usable ? n : 0;
}

/* B's scale and zero point of `scales` and `zeros` values (accept_column_vector): one each, for every
 * column, or both made n (a per-tensor one repeated). */
static void column_vectors(matmul_vectors *v, ptrdiff_t n, ptrdiff_t scales, ptrdiff_t zeros) {
    v->b_per_tensor = scales == 1 && zeros == 1;
    for (ptrdiff_t i = 1; !v->b_per_tensor && scales == 1 && i < n; i++) v->b_scale[i] = v->b_scale[0];
    for (ptrdiff_t i = 1; !v->b_per_tensor && zeros == 1 && i < n; i++) v->b_zero[i] = v->b_zero[0];
}

/* A 2-D operand the kernels read in place. */
static PyArrayObject *accept_matrix(PyObject *object) {
    PyArrayObject *array = dmlq_py_accept_bytes(object);
    return array && PyArray_NDIM(array) == 2 ? array : NULL;
}

/* matmul_per_tensor(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
 * out, reciprocal_division): the result (out, or a new array), or None (see above). b: an array, or a
 * 2-D packed B capsule. */
PyObject *dmlq_py_matmul_per_tensor(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (dmlq_py_check_arguments("matmul_per_tensor", nargs, 10) < 0) return NULL;
    const int reciprocal = PyObject_IsTrue(args[9]);
    if (reciprocal < 0) return NULL;
    const packed_matrix *packed = packed_matrix_of(args[3]);
    PyArrayObject *a = accept_matrix(args[0]), *b = packed ? NULL : accept_matrix(args[3]);
    const int packed_usable = packed && !packed->batch_dims && dmlq_gemm_packed_for_current_level(&packed->packed);
    if (!a || (packed ? !packed_usable : !b)) Py_RETURN_NONE;
    const ptrdiff_t m = PyArray_DIM(a, 0), k = PyArray_DIM(a, 1);
    const ptrdiff_t n = packed ? packed->packed.n : PyArray_DIM(b, 1);
    if ((packed ? packed->packed.k : PyArray_DIM(b, 0)) != k || m == 0 || n == 0 || k == 0 || k >= MATMUL_MAX_K)
        Py_RETURN_NONE;
    const int a_type = dmlq_py_type_of(a);
    const int b_type = packed ? (packed->packed.b_signed ? DMLQ_I8 : DMLQ_U8) : dmlq_py_type_of(b);
    const int carried = dmlq_py_carried_type(args[7]), out_type = carried >= 0 ? carried : a_type;
    float a_scale, out_scale;
    int32_t a_zero, out_zero;
    if (!dmlq_py_accept_scale(args[1], 2, &a_scale) || !dmlq_py_accept_zero_point(args[2], a_type, 2, &a_zero) ||
        !dmlq_py_accept_scale(args[6], 2, &out_scale) || !dmlq_py_accept_zero_point(args[7], out_type, 2, &out_zero))
        Py_RETURN_NONE;
    matmul_vectors v;
    if (allocate_vectors(&v, m, n) < 0) return NULL;
    PyArrayObject *out = NULL;
    const ptrdiff_t b_scales = accept_column_vector(args[4], n, DMLQ_F32, v.b_scale, NULL);
    const ptrdiff_t b_zeros = b_scales ? accept_column_vector(args[5], n, b_type, NULL, v.b_zero) : 0;
    if (b_zeros) {
        column_vectors(&v, n, b_scales, b_zeros);
        PyArrayObject *inputs[2] = {a, b};
        const npy_intp shape[2] = {m, n};
        out = dmlq_py_accept_output(args[8], 2, shape, out_type, inputs, 2, 0);
    }
    if (out) {
        for (ptrdiff_t i = 0; i < m; i++) {
            v.a_scale[i] = a_scale, v.a_zero[i] = a_zero;
            v.out_scale[i] = out_scale, v.out_zero[i] = out_zero;
        }
        if (run_matmul(a, b, packed, out, &v, reciprocal, NULL) < 0) Py_CLEAR(out);
    }
    free_vectors(&v);
    if (!out && !PyErr_Occurred()) Py_RETURN_NONE;
    return (PyObject *)out;
}
