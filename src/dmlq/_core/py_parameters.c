/* Operands and per-tensor parameters as the NumPy layer's one-step calls take them (quantize_,
 * dequantize_, quantized_add_ and matmul_per_tensor): each function accepts the forms that the
 * layer's rules take as they are, gives the value the layer would compute, and says 0 (NULL) for
 * anything else, valid or not (the layer's general path then converts it, or says what is wrong). */
#include <math.h>

#include "py_arrays.h"
#include <numpy/arrayscalars.h>

/* One element, at most `max_ndim` dimensions (more would add dimensions to the result). */
static int is_small_array(PyObject *object, int max_ndim) {
    if (!PyArray_Check(object)) return 0;
    PyArrayObject *array = (PyArrayObject *)object;
    return PyArray_NDIM(array) <= max_ndim && PyArray_SIZE(array) == 1 && PyArray_ISALIGNED(array) &&
           PyArray_ISNOTSWAPPED(array);
}

PyArrayObject *dmlq_py_accept_array(PyObject *object, int first_type, int second_type) {
    if (!PyArray_CheckExact(object)) return NULL;
    PyArrayObject *array = (PyArrayObject *)object;
    const int type = dmlq_py_type_of(array);
    int usable = (type == first_type || type == second_type) && PyArray_ISALIGNED(array) &&
                 PyArray_ISNOTSWAPPED(array) && PyArray_NDIM(array) <= DMLQ_MAX_DIMS;
    for (int d = 0; usable && d < PyArray_NDIM(array); d++) usable = PyArray_STRIDE(array, d) >= 0;
    return usable ? array : NULL;
}

PyArrayObject *dmlq_py_accept_bytes(PyObject *object) { return dmlq_py_accept_array(object, DMLQ_U8, DMLQ_I8); }

int dmlq_py_accept_scale(PyObject *object, int max_ndim, float *value) {
    if (PyFloat_Check(object)) { /* float and numpy.float64 */
        *value = (float)PyFloat_AS_DOUBLE(object);
    } else if (PyLong_CheckExact(object)) { /* not bool, which is no scale */
        int overflow;
        const long long integer = PyLong_AsLongLongAndOverflow(object, &overflow);
        if (overflow) return 0;
        *value = (float)integer;
    } else if (PyArray_IsScalar(object, Float)) {
        *value = PyArrayScalar_VAL(object, Float);
    } else if (is_small_array(object, max_ndim) && PyArray_TYPE((PyArrayObject *)object) == NPY_FLOAT32) {
        *value = *(const float *)PyArray_DATA((PyArrayObject *)object);
    } else if (is_small_array(object, max_ndim) && PyArray_TYPE((PyArrayObject *)object) == NPY_FLOAT64) {
        *value = (float)*(const double *)PyArray_DATA((PyArrayObject *)object);
    } else {
        return 0;
    }
    return dmlq_py_finite_non_zero(*value);
}

int dmlq_py_carried_type(PyObject *object) {
    if (PyArray_IsScalar(object, UByte)) return DMLQ_U8;
    if (PyArray_IsScalar(object, Byte)) return DMLQ_I8;
    if (!PyArray_Check(object)) return -1;
    const int type = dmlq_py_type_of((PyArrayObject *)object);
    return type == DMLQ_U8 || type == DMLQ_I8 ? type : -1;
}

int dmlq_py_accept_zero_point(PyObject *object, int type, int max_ndim, int32_t *value) {
    if (object == Py_None) {
        *value = 0;
        return 1;
    }
    if (PyLong_CheckExact(object)) { /* not bool */
        int overflow;
        const long integer = PyLong_AsLongAndOverflow(object, &overflow);
        *value = (int32_t)integer;
        return !overflow && (type == DMLQ_I8 ? -128 <= integer && integer <= 127 : 0 <= integer && integer <= 255);
    }
    if (dmlq_py_carried_type(object) != type) return 0;
    if (PyArray_IsScalar(object, UByte)) *value = PyArrayScalar_VAL(object, UByte);
    else if (PyArray_IsScalar(object, Byte)) *value = PyArrayScalar_VAL(object, Byte);
    else if (is_small_array(object, max_ndim))
        *value = dmlq_byte_value(PyArray_DATA((PyArrayObject *)object), type == DMLQ_I8);
    else return 0;
    return 1;
}

PyArrayObject *dmlq_py_accept_output(PyObject *object, int ndim, const npy_intp *shape, int type,
                                     PyArrayObject *const *inputs, int count, int identical_allowed) {
    if (object == Py_None) {
        const int typenum = type == DMLQ_F32   ? NPY_FLOAT32
                            : type == DMLQ_F16 ? NPY_FLOAT16
                            : type == DMLQ_I8  ? NPY_INT8
                                               : NPY_UINT8;
        return (PyArrayObject *)dmlq_py_new_output(ndim, shape, PyArray_DescrFromType(typenum));
    }
    if (!PyArray_Check(object)) return NULL;
    PyArrayObject *out = (PyArrayObject *)object;
    int usable = PyArray_NDIM(out) == ndim && dmlq_py_type_of(out) == type && PyArray_ISWRITEABLE(out) &&
                 PyArray_ISALIGNED(out) && PyArray_ISNOTSWAPPED(out) &&
                 !dmlq_py_overlaps(out, inputs, count, identical_allowed);
    for (int d = 0; usable && d < ndim; d++)
        usable = PyArray_DIM(out, d) == shape[d] && (PyArray_STRIDE(out, d) > 0 || shape[d] == 1);
    if (!usable) return NULL;
    Py_INCREF(out);
    return out;
}
