/* dmlq._core's quantized family beside the matrix multiply: the integer multiplies' int32 and float
 * outputs, the integer convolutions, dynamic quantization's range and quantized average pooling.
 * Thin bindings: arguments checked defensively (ValueError; BufferError for an array the kernels
 * cannot use in place), the work in C without the GIL (family.h, on dmlq_num_threads() threads). */
#include "py_matmul.h"

/* ---- the integer matrix multiplies ------------------------------------------------------------- */

enum { A = 0, A_SCALE, A_ZERO, B, B_SCALE, B_ZERO, OUT_SCALE, OUT_ZERO, OUT };

static PyObject *matmul_integer(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objects[9] = {NULL, Py_None, NULL, NULL, Py_None, NULL, Py_None, Py_None, NULL};
    if (!PyArg_ParseTuple(args, "OOOOO", &objects[A], &objects[A_ZERO], &objects[B], &objects[B_ZERO], &objects[OUT]))
        return NULL;
    PyArrayObject *arrays[9];
    const packed_matrix *packed;
    const unsigned optional = ~(1u << A | 1u << B | 1u << OUT);
    if (dmlq_py_matmul_operands(objects, optional, arrays, &packed) < 0) return NULL;
    if (dmlq_py_type_of(arrays[OUT]) != DMLQ_I32) {
        PyErr_SetString(PyExc_ValueError, "matmul_integer: out must be int32");
        return NULL;
    }
    const dmlq_gemm_epilogue epilogue = {.kind = DMLQ_EPILOGUE_INT32};
    if (dmlq_py_run_matmul_operands(arrays, packed, 0, &epilogue) < 0) return NULL;
    Py_RETURN_NONE;
}

static int is_float_type(int type) { return type == DMLQ_F32 || type == DMLQ_F16; }

/* A bias of the output's shape (the caller broadcasts it), float32 or float16. */
static int check_bias(PyArrayObject *bias, PyArrayObject *out) {
    const int ndim = PyArray_NDIM(out);
    if (PyArray_NDIM(bias) != ndim || memcmp(PyArray_DIMS(bias), PyArray_DIMS(out), sizeof(npy_intp) * (size_t)ndim) ||
        !is_float_type(dmlq_py_type_of(bias))) {
        PyErr_SetString(PyExc_ValueError, "matmul_integer_to_float: bias must be float32 or float16 of out's shape");
        return -1;
    }
    return dmlq_py_check_overlaps(out, &bias, 1, 0);
}

static PyObject *matmul_integer_to_float(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objects[9] = {NULL, NULL, NULL, NULL, NULL, NULL, Py_None, Py_None, NULL}, *bias_object;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &objects[A], &objects[A_SCALE], &objects[A_ZERO], &objects[B],
                          &objects[B_SCALE], &objects[B_ZERO], &bias_object, &objects[OUT]))
        return NULL;
    PyArrayObject *arrays[9];
    const packed_matrix *packed;
    const unsigned optional = 1u << A_ZERO | 1u << B_ZERO | 1u << OUT_SCALE | 1u << OUT_ZERO;
    if (dmlq_py_matmul_operands(objects, optional, arrays, &packed) < 0) return NULL;
    PyArrayObject *out = arrays[OUT], *bias = dmlq_py_as_array(bias_object, "bias", 1);
    if (PyErr_Occurred()) return NULL;
    if (!is_float_type(dmlq_py_type_of(out))) {
        PyErr_SetString(PyExc_ValueError, "matmul_integer_to_float: out must be float32 or float16");
        return NULL;
    }
    if (bias && check_bias(bias, out) < 0) return NULL;
    const int ndim = PyArray_NDIM(out);
    const ptrdiff_t batches = PyArray_MultiplyList(PyArray_DIMS(out), ndim - 2);
    ptrdiff_t *bias_offsets = PyMem_Malloc(sizeof(ptrdiff_t) * (size_t)(batches ? batches : 1));
    if (!bias_offsets) return PyErr_NoMemory();
    if (bias) dmlq_py_batch_offsets(bias, out, bias_offsets);
    const dmlq_gemm_epilogue epilogue = {
        .kind = DMLQ_EPILOGUE_FLOAT, .out_type = dmlq_py_type_of(out), .bias = bias ? PyArray_BYTES(bias) : NULL,
        .bias_type = bias ? dmlq_py_type_of(bias) : DMLQ_F32, .bias_offsets = bias_offsets,
        .bias_row = bias ? PyArray_STRIDE(bias, ndim - 2) : 0, .bias_col = bias ? PyArray_STRIDE(bias, ndim - 1) : 0};
    const int status = dmlq_py_run_matmul_operands(arrays, packed, 0, &epilogue);
    PyMem_Free(bias_offsets);
    if (status < 0) return NULL;
    Py_RETURN_NONE;
}

/* ---- per-channel parameters and window geometry ----------------------------------------------- */

/* A scale (`type` DMLQ_F32, into floats), zero point (DMLQ_U8 or DMLQ_I8, into integers) or bias
 * (DMLQ_I32, into integers) of one or `count` elements, any shape, read in C order; None: a scale of
 * 1, a zero point or bias of 0, unless `required`. */
static int channel_vector(PyObject *object, ptrdiff_t count, int type, int required, const char *name, float *floats,
                          int32_t *integers) {
    PyArrayObject *array = dmlq_py_as_array(object, name, !required);
    if (!array) {
        for (ptrdiff_t i = 0; !PyErr_Occurred() && i < count; i++) {
            if (floats) floats[i] = 1.0f;
            else integers[i] = 0;
        }
        return PyErr_Occurred() ? -1 : 0;
    }
    const ptrdiff_t size = PyArray_SIZE(array);
    if (dmlq_py_type_of(array) != type || (size != 1 && size != count)) {
        PyErr_Format(PyExc_ValueError, "%s must be %s of 1 or %zd elements", name,
                     type == DMLQ_F32 ? "float32" : type == DMLQ_I32 ? "int32" : "of its tensor's 8-bit type", count);
        return -1;
    }
    PyArrayObject *values = (PyArrayObject *)PyArray_NewCopy(array, NPY_CORDER);
    if (!values) return -1;
    const char *data = PyArray_BYTES(values);
    for (ptrdiff_t i = 0; i < count; i++) {
        const char *element = data + (size == 1 ? 0 : i) * PyArray_ITEMSIZE(values);
        if (type == DMLQ_F32) memcpy(&floats[i], element, 4);
        else if (type == DMLQ_I32) memcpy(&integers[i], element, 4);
        else integers[i] = type == DMLQ_I8 ? *(const int8_t *)element : *(const uint8_t *)element;
    }
    Py_DECREF(values);
    return 0;
}

/* `dims` positive (or, with `zero_allowed`, non-negative) integers from a sequence into the last dims
 * of values[DMLQ_CONV_DIMS]; the leading ones are `fill`. */
static int geometry(PyObject *sequence, int dims, ptrdiff_t fill, int zero_allowed, const char *name,
                    ptrdiff_t *values) {
    PyObject *items = PySequence_Fast(sequence, name);
    if (!items) return -1;
    int status = PySequence_Fast_GET_SIZE(items) == dims ? 0 : -1;
    for (int d = 0; d < DMLQ_CONV_DIMS; d++) values[d] = fill;
    for (int d = 0; status == 0 && d < dims; d++) {
        const Py_ssize_t value = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(items, d), PyExc_OverflowError);
        if (value == -1 && PyErr_Occurred()) status = -1;
        else if (value < !zero_allowed) status = -1;
        else values[DMLQ_CONV_DIMS - dims + d] = value;
    }
    Py_DECREF(items);
    if (status < 0 && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "%s must be %d %s integers", name, dims, zero_allowed ? "non-negative" : "positive");
    return status;
}

/* An [N, C, spatial...] array's sizes and byte strides as [N, C, D, H, W] (missing ones 1 and 0). */
static void padded_shape(PyArrayObject *array, ptrdiff_t *sizes, ptrdiff_t *strides) {
    const int ndim = PyArray_NDIM(array), missing = 2 + DMLQ_CONV_DIMS - ndim;
    for (int d = 0; d < 2 + DMLQ_CONV_DIMS; d++) {
        const int source = d < 2 ? d : d - missing;
        const int present = d < 2 || d >= 2 + missing;
        sizes[d] = present ? PyArray_DIM(array, source) : 1;
        strides[d] = present ? PyArray_STRIDE(array, source) : 0;
    }
}

static int is_byte_type(int type) { return type == DMLQ_U8 || type == DMLQ_I8; }

/* x, w and out of a convolution: [N, C, spatial...], [M, C / G, kernel...], [N, M, spatial...] with 1 to 3
 * spatial dimensions; fills the problem's sizes and strides (w a C-ordered copy where its rows do not step
 * through memory as one: *w_copy, to release). */
static int convolution_arrays(dmlq_conv_problem *p, PyArrayObject *x, PyArrayObject *w, PyArrayObject *out,
                              PyArrayObject **w_copy) {
    const int ndim = PyArray_NDIM(x);
    if (ndim < 3 || ndim > 2 + DMLQ_CONV_DIMS || PyArray_NDIM(w) != ndim || PyArray_NDIM(out) != ndim ||
        !is_byte_type(dmlq_py_type_of(x)) || !is_byte_type(dmlq_py_type_of(w))) {
        PyErr_SetString(PyExc_ValueError, "convolution: x, w and out need 3 to 5 dimensions; x and w uint8 or int8");
        return -1;
    }
    ptrdiff_t x_sizes[5], w_sizes[5], y_sizes[5];
    padded_shape(x, x_sizes, p->x_strides);
    padded_shape(w, w_sizes, p->w_strides);
    padded_shape(out, y_sizes, p->y_strides);
    p->batches = x_sizes[0], p->channels = x_sizes[1], p->out_channels = w_sizes[0];
    if (p->groups < 1 || p->channels % p->groups || p->out_channels % p->groups ||
        w_sizes[1] * p->groups != p->channels || y_sizes[0] != p->batches || y_sizes[1] != p->out_channels) {
        PyErr_SetString(PyExc_ValueError, "convolution: x [N, C, ...], w [M, C / group_count, ...] and out [N, M, ...] "
                                          "with C and M multiples of group_count");
        return -1;
    }
    ptrdiff_t step;
    if (!dmlq_one_run(y_sizes + 2, p->y_strides + 2, DMLQ_CONV_DIMS, &step)) {
        PyErr_SetString(PyExc_BufferError, "convolution: out's spatial dimensions must step through memory as one");
        return -1;
    }
    for (int d = 0; d < DMLQ_CONV_DIMS; d++) {
        p->in[d] = x_sizes[2 + d], p->out[d] = y_sizes[2 + d], p->kernel[d] = w_sizes[2 + d];
    }
    *w_copy = NULL;
    if (!dmlq_one_run(w_sizes + 1, p->w_strides + 1, 1 + DMLQ_CONV_DIMS, &step)) {
        *w_copy = (PyArrayObject *)PyArray_NewCopy(w, NPY_CORDER);
        if (!*w_copy) return -1;
        padded_shape(*w_copy, w_sizes, p->w_strides);
        dmlq_one_run(w_sizes + 1, p->w_strides + 1, 1 + DMLQ_CONV_DIMS, &step);
    }
    p->w_strides[4] = step;
    p->x = PyArray_BYTES(x), p->w = PyArray_BYTES(*w_copy ? *w_copy : w), p->y = PyArray_BYTES(out);
    p->x_signed = dmlq_py_is_signed_byte(x), p->w_signed = dmlq_py_is_signed_byte(w);
    return 0;
}

/* The window attributes of a convolution or pooling: strides, dilations, start and end padding. */
static int window_attributes(PyObject *const *objects, int dims, ptrdiff_t *stride, ptrdiff_t *dilation,
                             ptrdiff_t *start, ptrdiff_t *end) {
    if (geometry(objects[0], dims, 1, 0, "strides", stride) < 0 || geometry(objects[1], dims, 1, 0, "dilations", dilation) < 0 ||
        geometry(objects[2], dims, 0, 1, "start_padding", start) < 0 || geometry(objects[3], dims, 0, 1, "end_padding", end) < 0)
        return -1;
    return 0;
}

/* ---- convolution ----------------------------------------------------------------------------------- */

#define FILTER_CAPSULE "dmlq._core.convolution_filter"

/* A filter packed once (pack_convolution_filter): a C-ordered copy of w, its group count, and its packing
 * for the level current when it was packed (empty where that level has no implicit multiply). */
typedef struct {
    PyArrayObject *w;
    Py_ssize_t groups;
    dmlq_conv_filter packed;
} packed_filter;

static void free_packed_filter(PyObject *capsule) {
    packed_filter *filter = PyCapsule_GetPointer(capsule, FILTER_CAPSULE);
    dmlq_conv_free_filter(&filter->packed);
    Py_XDECREF(filter->w);
    PyMem_RawFree(filter);
}

enum { CX = 0, CX_SCALE, CX_ZERO, CW, CW_SCALE, CW_ZERO, CBIAS, CY_SCALE, CY_ZERO, COUT, CONV_ARRAYS };

static const char *const CONV_NAMES[CONV_ARRAYS] = {"x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point",
                                                    "bias", "y_scale", "y_zero_point", "out"};

/* The per-tensor and per-channel parameters, into p and vectors[3 * M] (w_scale, w_zero_point, bias). */
static int convolution_parameters(dmlq_conv_problem *p, PyObject *const *objects, PyArrayObject *out, void *vectors) {
    const ptrdiff_t m = p->out_channels;
    float *w_scale = vectors;
    int32_t *w_zero = (int32_t *)(w_scale + m), *bias = w_zero + m;
    const int requantized = p->y_type != DMLQ_I32;
    const int x_type = p->x_signed ? DMLQ_I8 : DMLQ_U8, w_type = p->w_signed ? DMLQ_I8 : DMLQ_U8;
    int32_t y_zero = 0;
    if (!requantized && (objects[CX_SCALE] != Py_None || objects[CW_SCALE] != Py_None || objects[CBIAS] != Py_None ||
                         objects[CY_SCALE] != Py_None || objects[CY_ZERO] != Py_None)) {
        PyErr_SetString(PyExc_ValueError, "convolution: an int32 out takes no scales, bias or output zero point");
        return -1;
    }
    if (channel_vector(objects[CX_ZERO], 1, x_type, 0, CONV_NAMES[CX_ZERO], NULL, &p->x_zero_point) < 0 ||
        channel_vector(objects[CW_ZERO], m, w_type, 0, CONV_NAMES[CW_ZERO], NULL, w_zero) < 0)
        return -1;
    p->w_zero_point = w_zero;
    if (!requantized) return 0;
    if (channel_vector(objects[CX_SCALE], 1, DMLQ_F32, 1, CONV_NAMES[CX_SCALE], &p->x_scale, NULL) < 0 ||
        channel_vector(objects[CW_SCALE], m, DMLQ_F32, 1, CONV_NAMES[CW_SCALE], w_scale, NULL) < 0 ||
        channel_vector(objects[CBIAS], m, DMLQ_I32, 0, CONV_NAMES[CBIAS], NULL, bias) < 0 ||
        channel_vector(objects[CY_SCALE], 1, DMLQ_F32, 1, CONV_NAMES[CY_SCALE], &p->y_scale, NULL) < 0 ||
        channel_vector(objects[CY_ZERO], 1, p->y_type, 0, CONV_NAMES[CY_ZERO], NULL, &y_zero) < 0)
        return -1;
    p->w_scale = w_scale;
    p->bias = objects[CBIAS] == Py_None ? NULL : bias;
    p->y_zero_point = (float)y_zero;
    (void)out;
    return 0;
}

static PyObject *pack_convolution_filter(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *object;
    Py_ssize_t groups;
    if (!PyArg_ParseTuple(args, "On", &object, &groups)) return NULL;
    PyArrayObject *given = dmlq_py_as_array(object, "w", 0);
    if (!given) return NULL;
    const int ndim = PyArray_NDIM(given);
    if (ndim < 3 || ndim > 2 + DMLQ_CONV_DIMS || !is_byte_type(dmlq_py_type_of(given)) || groups < 1 ||
        PyArray_DIM(given, 0) % groups) {
        PyErr_SetString(PyExc_ValueError, "pack_convolution_filter: w is a uint8 or int8 [M, C / group_count, kernel...] "
                                          "array (1 to 3 kernel dimensions), M a multiple of group_count");
        return NULL;
    }
    packed_filter *filter = PyMem_RawCalloc(1, sizeof *filter);
    if (!filter) return PyErr_NoMemory();
    filter->groups = groups;
    filter->w = (PyArrayObject *)PyArray_NewCopy(given, NPY_CORDER);
    ptrdiff_t sizes[2 + DMLQ_CONV_DIMS];
    dmlq_conv_problem p = {.groups = groups, .w_signed = dmlq_py_is_signed_byte(given)};
    int status = filter->w ? 0 : -1;
    if (!status) {
        padded_shape(filter->w, sizes, p.w_strides);
        p.out_channels = sizes[0], p.channels = sizes[1] * groups, p.w = PyArray_BYTES(filter->w);
        for (int d = 0; d < DMLQ_CONV_DIMS; d++) p.kernel[d] = sizes[2 + d];
        p.w_strides[4] = 1; /* a C-ordered copy: its rows are one run of bytes */
        status = dmlq_conv_pack_filter(&filter->packed, &p) < 0 ? -1 : 0;
        if (status) PyErr_NoMemory();
    }
    PyObject *capsule = status ? NULL : PyCapsule_New(filter, FILTER_CAPSULE, free_packed_filter);
    if (!capsule) {
        dmlq_conv_free_filter(&filter->packed);
        Py_XDECREF(filter->w);
        PyMem_RawFree(filter);
    }
    return capsule;
}

static PyObject *convolution(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objects[CONV_ARRAYS], *window[4];
    Py_ssize_t groups;
    int reciprocal;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOnp", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4],
                          &objects[5], &objects[6], &objects[7], &objects[8], &objects[9], &window[0], &window[1],
                          &window[2], &window[3], &groups, &reciprocal))
        return NULL;
    const packed_filter *filter = PyCapsule_IsValid(objects[CW], FILTER_CAPSULE)
                                      ? PyCapsule_GetPointer(objects[CW], FILTER_CAPSULE) : NULL;
    if (filter && filter->groups != groups) {
        PyErr_SetString(PyExc_ValueError, "convolution: w was packed for another group_count");
        return NULL;
    }
    PyArrayObject *x = dmlq_py_as_array(objects[CX], "x", 0), *w = NULL, *out = NULL;
    if (x) w = filter ? filter->w : dmlq_py_as_array(objects[CW], "w", 0);
    if (w) out = dmlq_py_as_array(objects[COUT], "out", 0);
    if (!out || dmlq_py_check_output(out) < 0) return NULL;
    dmlq_conv_problem p = {.groups = groups, .y_type = dmlq_py_type_of(out), .reciprocal = reciprocal,
                           .packed = filter ? &filter->packed : NULL};
    if (p.y_type != DMLQ_I32 && !is_byte_type(p.y_type)) {
        PyErr_SetString(PyExc_ValueError, "convolution: out must be int32, uint8 or int8");
        return NULL;
    }
    PyArrayObject *w_copy, *inputs[2] = {x, w};
    ptrdiff_t end[DMLQ_CONV_DIMS];
    if (convolution_arrays(&p, x, w, out, &w_copy) < 0) return NULL;
    void *vectors = NULL;
    int status = dmlq_py_check_overlaps(out, inputs, 2, 0);
    if (!status) status = window_attributes(window, PyArray_NDIM(x) - 2, p.stride, p.dilation, p.start, end);
    if (!status) status = (vectors = PyMem_Malloc(12 * (size_t)(p.out_channels ? p.out_channels : 1))) ? 0 : -1;
    if (!status) status = convolution_parameters(&p, objects, out, vectors);
    if (!status) {
        const int threads = dmlq_num_threads();
        Py_BEGIN_ALLOW_THREADS
        status = dmlq_conv(&p, threads);
        Py_END_ALLOW_THREADS
        if (status) PyErr_NoMemory();
    } else if (!vectors && !PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    PyMem_Free(vectors);
    Py_XDECREF(w_copy);
    if (status) return NULL;
    Py_RETURN_NONE;
}

/* ---- quantized average pooling ------------------------------------------------------------------- */

static PyObject *average_pool(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objects[6], *window[5];
    int include_padding, reciprocal;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOpp", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4],
                          &objects[5], &window[0], &window[1], &window[2], &window[3], &window[4], &include_padding,
                          &reciprocal))
        return NULL;
    PyArrayObject *x = dmlq_py_as_array(objects[0], "x", 0), *out = x ? dmlq_py_as_array(objects[5], "out", 0) : NULL;
    if (!out || dmlq_py_check_output(out) < 0 || dmlq_py_check_overlaps(out, &x, 1, 0) < 0) return NULL;
    const int ndim = PyArray_NDIM(x);
    ptrdiff_t x_sizes[5], y_sizes[5], end[DMLQ_CONV_DIMS];
    dmlq_pool_problem p = {.include_padding = include_padding, .reciprocal = reciprocal};
    if (ndim < 3 || ndim > 2 + DMLQ_CONV_DIMS || PyArray_NDIM(out) != ndim || !is_byte_type(dmlq_py_type_of(x)) ||
        !is_byte_type(dmlq_py_type_of(out))) {
        PyErr_SetString(PyExc_ValueError, "average_pool: x and out need 3 to 5 dimensions and uint8 or int8");
        return NULL;
    }
    padded_shape(x, x_sizes, p.x_strides);
    padded_shape(out, y_sizes, p.y_strides);
    if (y_sizes[0] != x_sizes[0] || y_sizes[1] != x_sizes[1]) {
        PyErr_SetString(PyExc_ValueError, "average_pool: out is [N, C, ...] as x");
        return NULL;
    }
    p.batches = x_sizes[0], p.channels = x_sizes[1];
    for (int d = 0; d < DMLQ_CONV_DIMS; d++) p.in[d] = x_sizes[2 + d], p.out[d] = y_sizes[2 + d];
    if (geometry(window[0], ndim - 2, 1, 0, "window", p.window) < 0 ||
        window_attributes(window + 1, ndim - 2, p.stride, p.dilation, p.start, end) < 0)
        return NULL;
    const ptrdiff_t c = p.channels ? p.channels : 1;
    float *scales = PyMem_Malloc(sizeof(float) * (size_t)(2 * c));
    int32_t *zeros = PyMem_Malloc(sizeof(int32_t) * (size_t)(2 * c));
    int status = scales && zeros ? 0 : -1;
    if (status) PyErr_NoMemory();
    const int x_type = dmlq_py_type_of(x), y_type = dmlq_py_type_of(out);
    if (!status)
        status = channel_vector(objects[1], c, DMLQ_F32, 1, "x_scale", scales, NULL) < 0 ||
                 channel_vector(objects[2], c, x_type, 0, "x_zero_point", NULL, zeros) < 0 ||
                 channel_vector(objects[3], c, DMLQ_F32, 1, "y_scale", scales + c, NULL) < 0 ||
                 channel_vector(objects[4], c, y_type, 0, "y_zero_point", NULL, zeros + c) < 0;
    if (!status) {
        p.x = PyArray_BYTES(x), p.y = PyArray_BYTES(out);
        p.x_signed = x_type == DMLQ_I8, p.y_signed = y_type == DMLQ_I8;
        p.x_scale = scales, p.y_scale = scales + c, p.x_zero_point = zeros, p.y_zero_point = zeros + c;
        const int threads = dmlq_num_threads();
        Py_BEGIN_ALLOW_THREADS
        dmlq_average_pool(&p, threads);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(scales);
    PyMem_Free(zeros);
    if (status) return NULL;
    Py_RETURN_NONE;
}

/* ---- dynamic quantization's range ----------------------------------------------------------------- */

/* The smallest and largest values of x (NaN when one is NaN; +inf and -inf when there are none): 0, or
 * -1 with an exception set. */
static int range_of(PyObject *arg, float *lo, float *hi) {
    PyArrayObject *x = dmlq_py_as_array(arg, "x", 0);
    if (!x) return -1;
    const int type = dmlq_py_type_of(x), ndim = PyArray_NDIM(x);
    if (!is_float_type(type)) {
        PyErr_SetString(PyExc_ValueError, "value_range: x must be float32 or float16");
        return -1;
    }
    const int contiguous = PyArray_IS_C_CONTIGUOUS(x) || ndim == 0;
    const ptrdiff_t length = contiguous ? PyArray_SIZE(x) : PyArray_DIM(x, ndim - 1);
    const ptrdiff_t rows = contiguous || !length ? 1 : PyArray_SIZE(x) / length;
    ptrdiff_t *offsets = PyMem_Malloc(sizeof(ptrdiff_t) * (size_t)rows);
    if (!offsets) {
        PyErr_NoMemory();
        return -1;
    }
    ptrdiff_t index[DMLQ_MAX_DIMS] = {0};
    for (ptrdiff_t r = 0; r < rows; r++) { /* row-major over the dimensions before the last */
        ptrdiff_t offset = 0;
        for (int d = 0; d < ndim - 1 && !contiguous; d++) offset += index[d] * PyArray_STRIDE(x, d);
        offsets[r] = offset;
        for (int d = ndim - 2; d >= 0 && !contiguous && ++index[d] == PyArray_DIM(x, d); d--) index[d] = 0;
    }
    const ptrdiff_t stride = contiguous ? PyArray_ITEMSIZE(x) : PyArray_STRIDE(x, ndim - 1);
    const int threads = dmlq_num_threads();
    Py_BEGIN_ALLOW_THREADS
    dmlq_value_range(PyArray_BYTES(x), type, offsets, rows, length, stride, lo, hi, threads);
    Py_END_ALLOW_THREADS
    PyMem_Free(offsets);
    return 0;
}

static PyObject *value_range(PyObject *self, PyObject *arg) {
    (void)self;
    float lo, hi;
    if (range_of(arg, &lo, &hi) < 0) return NULL;
    return Py_BuildValue("dd", (double)lo, (double)hi);
}

/* Whether dmlq_dynamic_quantize_linear can write the quantization of x into out: float32 x and uint8 (int8
 * when is_signed) out, both C-contiguous, of one size, apart. 0 or 1, or -1 with an exception set. */
static int quantizable(PyObject *x_object, PyObject *out_object, int is_signed) {
    PyArrayObject *x = dmlq_py_as_array(x_object, "x", 0), *out = x ? dmlq_py_as_array(out_object, "out", 0) : NULL;
    if (!out || dmlq_py_check_output(out) < 0) return -1;
    if (dmlq_py_type_of(x) != DMLQ_F32 || dmlq_py_type_of(out) != (is_signed ? DMLQ_I8 : DMLQ_U8) ||
        !PyArray_IS_C_CONTIGUOUS(x) || !PyArray_IS_C_CONTIGUOUS(out) || PyArray_SIZE(x) != PyArray_SIZE(out))
        return 0;
    const int overlap = dmlq_py_check_overlaps(out, &x, 1, 0);
    if (overlap < 0) PyErr_Clear();
    return overlap == 0;
}

/* DYNAMIC_QUANTIZE_LINEAR's scale and zero point (dmlq_dynamic_parameters); with `out`, the quantization
 * of x into it where dmlq_dynamic_quantize_linear takes them (quantizable, x finite). */
static PyObject *dynamic_quantization(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *x, *out = Py_None;
    int is_signed, reciprocal = 0, quantized = 0;
    float scale;
    int32_t zero_point;
    if (!PyArg_ParseTuple(args, "Op|Op", &x, &is_signed, &out, &reciprocal)) return NULL;
    const int fits = out == Py_None ? 0 : quantizable(x, out, is_signed);
    if (fits < 0) return NULL;
    if (fits) {
        PyArrayObject *data = (PyArrayObject *)x, *bytes = (PyArrayObject *)out;
        const int threads = dmlq_num_threads();
        Py_BEGIN_ALLOW_THREADS
        quantized = dmlq_dynamic_quantize_linear((const float *)PyArray_DATA(data), PyArray_SIZE(data), is_signed,
                                                 reciprocal, (uint8_t *)PyArray_DATA(bytes), threads, &scale, &zero_point);
        Py_END_ALLOW_THREADS
    } else {
        float lo, hi;
        if (range_of(x, &lo, &hi) < 0) return NULL;
        dmlq_dynamic_parameters(lo, hi, is_signed, &scale, &zero_point);
    }
    return Py_BuildValue("diO", (double)scale, (int)zero_point, quantized ? Py_True : Py_False);
}

static PyMethodDef family_methods[] = {
    {"matmul_integer", matmul_integer, METH_VARARGS,
     "matmul_integer(a, a_zero_point, b, b_zero_point, out): out = sum over k of (a - a_zero_point) * (b - "
     "b_zero_point), exact and wrapped to int32. a [..., M, K] and b [..., K, N] (or a pack_b capsule) uint8 or int8, "
     "out int32 [..., M, N] (2 to 4 dimensions, batch dimensions equal to out's: broadcast them through strides); "
     "the zero points None, per tensor or per row of a ([..., M, 1]) and per column of b ([..., 1, N])."},
    {"matmul_integer_to_float", matmul_integer_to_float, METH_VARARGS,
     "matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out): out = float32(acc * "
     "(float64(a_scale) * float64(b_scale))) + bias (a float32 addition), acc the exact integer sum of "
     "matmul_integer; a float16 out gets that float32 rounded once. Scales float32, per tensor or per row / "
     "column as the zero points; bias None or float32/float16 of out's shape; out float32 or float16."},
    {"convolution", convolution, METH_VARARGS,
     "convolution(x, x_scale, x_zero_point, w, w_scale, w_zero_point, bias, y_scale, y_zero_point, out, strides, "
     "dilations, start_padding, end_padding, group_count, reciprocal_division): the forward convolution "
     "(cross-correlation) of x [N, C, spatial...] (1 to 3 spatial dimensions) with w [M, C / group_count, "
     "kernel...] (or a pack_convolution_filter capsule), both uint8 or int8, padding read as x_zero_point. An int32 out [N, M, spatial...] gets the exact "
     "sums wrapped to int32 (CONVOLUTION_INTEGER; the scales, bias and y's parameters None); a uint8/int8 out gets "
     "requantize(acc + bias[m], x_scale * w_scale[m], y_scale, y_zero_point) (QUANTIZED_LINEAR_CONVOLUTION). "
     "x_scale, y_scale, x_zero_point, y_zero_point: one element; w_scale, w_zero_point, bias (int32): one or M. "
     "The window attributes are sequences of one integer per spatial dimension; out's spatial sizes are the "
     "caller's (positions beyond the padding read as padding)."},
    {"pack_convolution_filter", pack_convolution_filter, METH_VARARGS,
     "pack_convolution_filter(w, group_count): a capsule of the filter w (a copy) packed once for the current level's "
     "convolution kernels, which convolution takes as its w (for that group count)."},
    {"average_pool", average_pool, METH_VARARGS,
     "average_pool(x, x_scale, x_zero_point, y_scale, y_zero_point, out, window, strides, dilations, "
     "start_padding, end_padding, include_padding, reciprocal_division): QUANTIZED_LINEAR_AVERAGE_POOLING of x "
     "[N, C, spatial...] (1 to 3 spatial dimensions) into out [N, C, spatial...], both uint8 or int8: the exact sum "
     "of x - x_zero_point over the window's taps inside x, divided (float64) by their count, or by the whole window's "
     "with include_padding, then requantized; no tap inside and a count of 0 average 0. Scales float32 and "
     "zero points of one or C elements; out's spatial sizes are the caller's."},
    {"dynamic_quantization", dynamic_quantization, METH_VARARGS,
     "dynamic_quantization(x, is_signed, out=None, reciprocal_division=False): DYNAMIC_QUANTIZE_LINEAR's (scale, "
     "zero_point, quantized) for the float32 or float16 array x and an int8 (is_signed) or uint8 output: scale and "
     "zero_point as Python numbers, ONNX's float32 arithmetic on x's range widened to include 0 (scale 1 / (qmax - "
     "qmin) when it is empty or all 0; a NaN in x gives scale NaN, zero point 0), as "
     "dmlq.reference.dynamic_quantize_linear. With out (uint8 or int8), quantized says whether out now holds x "
     "quantized by them (as quantize would: float32 x and out C-contiguous of one size, x finite, the level's "
     "kernel); False leaves out as it was."},
    {"value_range", value_range, METH_O,
     "value_range(x): (min, max) of the float32 or float16 array x's elements as Python floats: (nan, nan) when one "
     "is NaN, (inf, -inf) when there are none."},
    {NULL, NULL, 0, NULL}};

PyMethodDef *dmlq_py_family_methods(void) { return family_methods; }
