/* Arrays as dmlq._core's Python functions take them: NumPy types as dmlq's, checks shared by the
 * binding files (py_*.c), and the output allocator. Every binding file includes this header, which
 * makes them share one NumPy C-API table (imported by py_module.c). */
#ifndef DMLQ_PY_ARRAYS_H
#define DMLQ_PY_ARRAYS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#define PY_ARRAY_UNIQUE_SYMBOL dmlq_core_ARRAY_API
#ifndef DMLQ_PY_IMPORTS_NUMPY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "common.h"

/* Row and column sums are int32: exact while K * 255 stays below 2**31. */
#define MATMUL_MAX_K (1 << 23)

int dmlq_py_type_of(PyArrayObject *array); /* a dmlq_type, or -1 */
int dmlq_py_is_signed_byte(PyArrayObject *array);
/* `object` as an array the kernels can read in place: TypeError if it is no ndarray, BufferError if it
 * is misaligned or byte-swapped, ValueError for an unsupported dtype; NULL for None where allowed. */
PyArrayObject *dmlq_py_as_array(PyObject *object, const char *name, int allow_none);
int dmlq_py_check_output(PyArrayObject *out); /* -1 (ValueError) unless writable */
/* -1 (TypeError) unless a METH_FASTCALL function got its `expected` number of arguments. */
int dmlq_py_check_arguments(const char *function, Py_ssize_t given, Py_ssize_t expected);
/* An output may overlap an input only by being exactly it (same address, shape and strides), and only
 * where `identical_allowed` (element-wise operators, which read each element before writing it). */
int dmlq_py_overlaps(PyArrayObject *out, PyArrayObject *const *inputs, int count, int identical_allowed);
/* -1 (BufferError) where dmlq_py_overlaps. */
int dmlq_py_check_overlaps(PyArrayObject *out, PyArrayObject *const *inputs, int count, int identical_allowed);

/* ---- per-tensor parameters of the NumPy layer's one-step calls (py_parameters.c) ---- */
/* An ndarray (not a subclass) of either type that the kernels read in place: aligned, native, no
 * negative strides (the layer copies such an array), at most DirectML's 8 dimensions. */
PyArrayObject *dmlq_py_accept_array(PyObject *object, int first_type, int second_type);
PyArrayObject *dmlq_py_accept_bytes(PyObject *object); /* uint8 or int8 */
/* A scale's rule (finite, non-zero); inline, so that a vector of scales is checked in one loop. */
static inline int dmlq_py_finite_non_zero(float value) { return isfinite(value) && value != 0.0f; }
/* A per-tensor scale: a Python float or int, a NumPy float32 or float64 scalar, or a one-element float32
 * or float64 array of at most `max_ndim` dimensions, as float32 (NumPy's conversion); finite, non-zero. */
int dmlq_py_accept_scale(PyObject *object, int max_ndim, float *value);
/* The uint8/int8 type a zero point carries (a NumPy scalar or array of that dtype), else -1. */
int dmlq_py_carried_type(PyObject *object);
/* A per-tensor zero point of a tensor of `type` (DMLQ_U8 or DMLQ_I8): None (0), a Python int in the
 * type's range, or a NumPy scalar or one-element array (at most `max_ndim` dimensions) of that type. */
int dmlq_py_accept_zero_point(PyObject *object, int type, int max_ndim, int32_t *value);
/* The output (a new reference): a new array of `shape` and `type` (uint8, int8, float32 or float16) for None,
 * else `object` itself when it is a writable, aligned, native-order array of that shape and type with
 * positive strides (zero along a size-1 dimension) that overlaps no input, or only as exactly it where
 * `identical_allowed`; else NULL (an exception set only when allocating failed). */
PyArrayObject *dmlq_py_accept_output(PyObject *object, int ndim, const npy_intp *shape, int type,
                                     PyArrayObject *const *inputs, int count, int identical_allowed);

/* ---- output allocation (py_output_cache.c) ---- */
int dmlq_py_output_cache_init(void);
/* numpy.empty(shape, dtype), large blocks from the output cache. */
PyObject *dmlq_py_new_output(int ndim, npy_intp const *shape, PyArray_Descr *descr); /* steals descr */
PyObject *dmlq_py_empty(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *dmlq_py_cached_bytes(PyObject *self, PyObject *args);

/* ---- matrix multiply (py_matmul.c) ---- */
PyObject *dmlq_py_matmul(PyObject *self, PyObject *args);
PyObject *dmlq_py_matmul_per_tensor(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *dmlq_py_pack_b(PyObject *self, PyObject *arg);
PyObject *dmlq_py_unpack_b(PyObject *self, PyObject *capsule);
PyObject *dmlq_py_gemm_kernel_set(PyObject *self, PyObject *unused);

/* ---- buffer views (py_buffers.c) ---- */
PyObject *dmlq_py_bind_view(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
