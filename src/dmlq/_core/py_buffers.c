/* dmlq.buffers' common binding in one step: an ndarray that serves a tensor's buffer as it is.
 *
 * CompiledOperator.execute binds every buffer it is given (dmlq.buffers.Binding.bind); in Python
 * the checks and the view cost about 5 us a tensor, ten times a small operator's own work. This
 * call takes the common buffer, an ndarray of the tensor's dtype or of raw uint8 bytes, and does
 * what the Python path does for it; any other buffer it leaves to that path (None), which refuses it
 * with its own message or reads it through another route (bytes, bytearray, memoryview). */
#include "py_arrays.h"

/* The tuple's `count` integers (a shape or byte strides); 0 where one is not an integer. */
static int read_integers(PyObject *tuple, int count, npy_intp *values) {
    for (int i = 0; i < count; i++) {
        values[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(tuple, i));
        if (values[i] == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* Whether `array` holds the memory a tensor of elements `dtype`, `addressed` bytes from its start and
 * aligned to `alignment` bytes (0: none), reads (or with `writable`, writes) as it is: contiguous (in
 * C or Fortran order, so its first byte is its lowest address), of that dtype or raw uint8 bytes,
 * large enough, its address and the addressed bytes whole elements. */
static int serves(PyArrayObject *array, PyArray_Descr *dtype, npy_intp addressed, npy_intp alignment, int writable) {
    const uintptr_t start = (uintptr_t)PyArray_BYTES(array);
    const npy_intp itemsize = PyDataType_ELSIZE(dtype);
    const int elements = PyArray_TYPE(array) == NPY_UINT8 || PyArray_EquivTypes(PyArray_DESCR(array), dtype);
    return elements && (PyArray_IS_C_CONTIGUOUS(array) || PyArray_IS_F_CONTIGUOUS(array)) &&
           (!writable || PyArray_ISWRITEABLE(array)) && PyArray_NBYTES(array) >= addressed && itemsize > 0 &&
           start % (uintptr_t)itemsize == 0 && addressed % itemsize == 0 &&
           (alignment <= 0 || start % (uintptr_t)alignment == 0);
}

/* bind_view(buffer, dtype, shape, strides, addressed_bytes, alignment, writable): (view, address) as
 * Binding.bind returns them (the tensor's view of the buffer's memory, shape and byte strides as
 * given, writable as the buffer is), or None for a buffer this step does not take. */
PyObject *dmlq_py_bind_view(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (dmlq_py_check_arguments("bind_view", nargs, 7) < 0) return NULL;
    if (!PyArray_Check(args[0]) || !PyArray_DescrCheck(args[1]) || !PyTuple_Check(args[2]) || !PyTuple_Check(args[3]))
        Py_RETURN_NONE;
    PyArrayObject *array = (PyArrayObject *)args[0];
    PyArray_Descr *dtype = (PyArray_Descr *)args[1];
    const Py_ssize_t ndim = PyTuple_GET_SIZE(args[2]);
    npy_intp shape[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    if (ndim > NPY_MAXDIMS || PyTuple_GET_SIZE(args[3]) != ndim || !read_integers(args[2], (int)ndim, shape) ||
        !read_integers(args[3], (int)ndim, strides))
        Py_RETURN_NONE;
    const npy_intp addressed = PyLong_AsSsize_t(args[4]), alignment = PyLong_AsSsize_t(args[5]);
    const int writable = PyObject_IsTrue(args[6]);
    if (PyErr_Occurred() || writable < 0) return NULL;
    if (!serves(array, dtype, addressed, alignment, writable)) Py_RETURN_NONE;
    Py_INCREF(dtype); /* PyArray_NewFromDescr steals it */
    PyObject *view = PyArray_NewFromDescr(&PyArray_Type, dtype, (int)ndim, shape, strides, PyArray_BYTES(array),
                                          PyArray_ISWRITEABLE(array) ? NPY_ARRAY_WRITEABLE : 0, NULL);
    if (!view) return NULL;
    Py_INCREF(array); /* the view keeps the buffer's memory alive */
    if (PyArray_SetBaseObject((PyArrayObject *)view, (PyObject *)array) < 0) {
        Py_DECREF(view);
        return NULL;
    }
    return Py_BuildValue("(NK)", view, (unsigned long long)(uintptr_t)PyArray_BYTES(array));
}
