/* The array checks every binding file shares (see py_arrays.h). */
#include "py_arrays.h"

int dmlq_py_type_of(PyArrayObject *array) {
    const char kind = PyArray_DESCR(array)->kind;
    switch (PyArray_ITEMSIZE(array)) {
    case 1: return kind == 'i' ? DMLQ_I8 : kind == 'u' ? DMLQ_U8 : -1;
    case 2: return kind == 'f' ? DMLQ_F16 : kind == 'i' ? DMLQ_I16 : kind == 'u' ? DMLQ_U16 : -1;
    case 4: return kind == 'f' ? DMLQ_F32 : kind == 'i' ? DMLQ_I32 : kind == 'u' ? DMLQ_U32 : -1;
    case 8: return kind == 'f' ? DMLQ_F64 : kind == 'i' ? DMLQ_I64 : kind == 'u' ? DMLQ_U64 : -1;
    default: return -1;
    }
}

int dmlq_py_is_signed_byte(PyArrayObject *array) { return dmlq_py_type_of(array) == DMLQ_I8; }

PyArrayObject *dmlq_py_as_array(PyObject *object, const char *name, int allow_none) {
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
    if (dmlq_py_type_of(array) < 0) {
        PyErr_Format(PyExc_ValueError, "%s has an unsupported dtype", name);
        return NULL;
    }
    return array;
}

int dmlq_py_check_output(PyArrayObject *out) {
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

/* Whether `out` overlaps one of the inputs (NULL ones skipped) other than by being exactly it (same
 * address, shape and strides) where `identical_allowed`. */
int dmlq_py_overlaps(PyArrayObject *out, PyArrayObject *const *inputs, int count, int identical_allowed) {
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
        return 1;
    }
    return 0;
}

int dmlq_py_check_overlaps(PyArrayObject *out, PyArrayObject *const *inputs, int count, int identical_allowed) {
    if (!dmlq_py_overlaps(out, inputs, count, identical_allowed)) return 0;
    PyErr_SetString(PyExc_BufferError, "out overlaps an input");
    return -1;
}

int dmlq_py_check_arguments(const char *function, Py_ssize_t given, Py_ssize_t expected) {
    if (given == expected) return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments, got %zd", function, expected, given);
    return -1;
}
