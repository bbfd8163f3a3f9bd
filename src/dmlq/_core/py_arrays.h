/* Arrays as dmlq._core's Python functions take them: NumPy types as dmlq's, checks shared by the
 * binding files (py_*.c), and the output allocator. Every binding file includes this header, which
 * makes them share one NumPy C-API table (imported by py_module.c). */
#ifndef DMLQ_PY_ARRAYS_H
#define DMLQ_PY_ARRAYS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
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
/* An output may overlap an input only by being exactly it (same address, shape and strides), and only
 * where `identical_allowed` (element-wise operators, which read each element before writing it). */
int dmlq_py_overlaps(PyArrayObject *out, PyArrayObject *const *inputs, int count, int identical_allowed);
/* -1 (BufferError) where dmlq_py_overlaps. */
int dmlq_py_check_overlaps(PyArrayObject *out, PyArrayObject *const *inputs, int count, int identical_allowed);

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
PyObject *dmlq_py_gemm_kernel_set(PyObject *self, PyObject *unused);

#endif
