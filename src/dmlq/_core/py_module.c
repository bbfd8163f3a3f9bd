/* dmlq._core: the compiled kernels behind dmlq.kernels, on NumPy arrays, without the GIL.
 *
 * Callers (dmlq.kernels) pass arrays of the operators' types and shapes; the functions here check
 * them defensively (ValueError). Arrays the kernels cannot use in place raise BufferError: a
 * misaligned or byte-swapped operand, or an output overlapping an input other than exactly (the
 * caller then retries on copies).
 */
#define DMLQ_PY_IMPORTS_NUMPY /* this file's module init imports NumPy's C API for every py_*.c */
#include "py_arrays.h"

#include "int4.h"

static const char *const LEVEL_NAMES[] = {"portable", "avx2", "avx512", "avx512_vnni", "amx"};
enum { LEVEL_COUNT = sizeof(LEVEL_NAMES) / sizeof(LEVEL_NAMES[0]) };

/* ---- element-wise loops ------------------------------------------------------------------------- */

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
    return dmlq_py_check_overlaps(out, arrays, count - 1, 1);
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
    const int type = dmlq_py_type_of(out);
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
    PyArrayObject *arrays[4] = {dmlq_py_as_array(x_object, "x", 0), dmlq_py_as_array(scale_object, "scale", 0),
                                dmlq_py_as_array(zero_object, "zero_point", 1), dmlq_py_as_array(out_object, "out", 0)};
    if (PyErr_Occurred() || dmlq_py_check_output(arrays[3]) < 0) return NULL;
    dmlq_quantize_params params = {dmlq_py_type_of(arrays[0]), dmlq_py_type_of(arrays[1]), arrays[2] != NULL,
                                   dmlq_py_is_signed_byte(arrays[3]), reciprocal, 0.0f, 0.0f};
    if (byte_bounds(arrays[3], &params.lo, &params.hi) < 0) return NULL;
    if ((params.x_type != DMLQ_F32 && params.x_type != DMLQ_F16 && params.x_type != DMLQ_I32) ||
        (params.scale_type != DMLQ_F32 && params.scale_type != DMLQ_F16) ||
        (arrays[2] && dmlq_py_type_of(arrays[2]) != dmlq_py_type_of(arrays[3]))) {
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
    PyArrayObject *arrays[4] = {dmlq_py_as_array(q_object, "q", 0), dmlq_py_as_array(scale_object, "scale", 0),
                                dmlq_py_as_array(zero_object, "zero_point", 1), dmlq_py_as_array(out_object, "out", 0)};
    if (PyErr_Occurred() || dmlq_py_check_output(arrays[3]) < 0) return NULL;
    dmlq_dequantize_params params = {dmlq_py_type_of(arrays[0]), dmlq_py_type_of(arrays[1]), dmlq_py_type_of(arrays[3]), arrays[2] != NULL};
    const int q = params.q_type;
    if (q == DMLQ_F16 || q == DMLQ_F32 || q == DMLQ_F64 || q == DMLQ_I64 || q == DMLQ_U64 ||
        (params.scale_type != DMLQ_F32 && params.scale_type != DMLQ_F16) || params.out_type != params.scale_type ||
        (arrays[2] && dmlq_py_type_of(arrays[2]) != q)) {
        PyErr_SetString(PyExc_ValueError, "dequantize: unsupported dtypes");
        return NULL;
    }
    dmlq_loop loop;
    if (build_loop(&loop, arrays, 4) < 0) return NULL;
    return run(&loop, rows_for_level()->dequantize, &params);
}

/* ---- the NumPy layer's per-tensor calls in one step (see py_parameters.c and py_matmul.c) ---- */

/* A data operand of at least one element and one dimension (a 0-d result is the layer's concern). */
static PyArrayObject *accept_data(PyObject *object, int first_type, int second_type) {
    PyArrayObject *array = dmlq_py_accept_array(object, first_type, second_type);
    return array && PyArray_NDIM(array) && PyArray_SIZE(array) ? array : NULL;
}

/* A per-tensor scale and zero point as the loop's operands 1 and 2: values read with stride 0, as a
 * broadcast one-element array would be (no zero point: NULL). */
static void bind_per_tensor(dmlq_loop *loop, const float *scale, const char *zero_point) {
    loop->data[1] = (char *)scale;
    loop->data[2] = (char *)zero_point;
}

/* Two accepted operands (NULL: not accepted) of one shape. */
static int same_shape(PyArrayObject *a, PyArrayObject *b) {
    return a && b && PyArray_NDIM(a) == PyArray_NDIM(b) &&
           !memcmp(PyArray_DIMS(a), PyArray_DIMS(b), sizeof(npy_intp) * (size_t)PyArray_NDIM(a));
}

/* `out` (whose reference the caller holds) once `done`, run's result, says the loop ran; else NULL,
 * with `out` released. */
static PyObject *delivered(PyObject *done, PyArrayObject *out) {
    if (!done) {
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(done);
    return (PyObject *)out;
}

/* The result array on success, NULL with an exception, after running `row` over arrays {data, out}
 * with the per-tensor scale and zero point. */
static PyObject *run_per_tensor(PyArrayObject *data, PyArrayObject *out, const float *scale, const char *zero_point,
                                dmlq_row_fn row, const void *params) {
    PyArrayObject *arrays[4] = {data, NULL, NULL, out};
    dmlq_loop loop;
    PyObject *done = NULL;
    if (build_loop(&loop, arrays, 4) == 0) {
        bind_per_tensor(&loop, scale, zero_point);
        done = run(&loop, row, params);
    }
    return delivered(done, out);
}

/* NULL with None returned for a call the one step does not take (the exception, if any, stands). */
static PyObject *declined(void) {
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

/* quantize_per_tensor(x, scale, zero_point, out, reciprocal_division): dmlq.quantize_linear's common
 * call (float32 or int32 x, per-tensor scale and uint8/int8 zero point) in one step; else None. */
static PyObject *quantize_per_tensor(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (dmlq_py_check_arguments("quantize_per_tensor", nargs, 5) < 0) return NULL;
    const int reciprocal = PyObject_IsTrue(args[4]);
    if (reciprocal < 0) return NULL;
    PyArrayObject *x = accept_data(args[0], DMLQ_F32, DMLQ_I32);
    if (!x) Py_RETURN_NONE;
    const int ndim = PyArray_NDIM(x), carried = dmlq_py_carried_type(args[2]);
    const int out_type = carried >= 0 ? carried : DMLQ_U8;
    float scale;
    int32_t zero;
    if (!dmlq_py_accept_scale(args[1], ndim, &scale) || !dmlq_py_accept_zero_point(args[2], out_type, ndim, &zero))
        Py_RETURN_NONE;
    PyArrayObject *out = dmlq_py_accept_output(args[3], ndim, PyArray_DIMS(x), out_type, &x, 1, 0);
    if (!out) return declined();
    const char zero_byte = (char)zero;
    dmlq_quantize_params params = {dmlq_py_type_of(x), DMLQ_F32, args[2] != Py_None, out_type == DMLQ_I8, reciprocal,
                                   0.0f, 0.0f};
    byte_bounds(out, &params.lo, &params.hi);
    return run_per_tensor(x, out, &scale, args[2] != Py_None ? &zero_byte : NULL, rows_for_level()->quantize, &params);
}

/* dequantize_per_tensor(q, scale, zero_point, out): dmlq.dequantize_linear's common call (uint8 or
 * int8 q, per-tensor float32 scale and zero point) in one step; else None. */
static PyObject *dequantize_per_tensor(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (dmlq_py_check_arguments("dequantize_per_tensor", nargs, 4) < 0) return NULL;
    PyArrayObject *q = accept_data(args[0], DMLQ_U8, DMLQ_I8);
    if (!q) Py_RETURN_NONE;
    const int ndim = PyArray_NDIM(q), q_type = dmlq_py_type_of(q);
    float scale;
    int32_t zero;
    if (!dmlq_py_accept_scale(args[1], ndim, &scale) || !dmlq_py_accept_zero_point(args[2], q_type, ndim, &zero))
        Py_RETURN_NONE;
    PyArrayObject *out = dmlq_py_accept_output(args[3], ndim, PyArray_DIMS(q), DMLQ_F32, &q, 1, 0);
    if (!out) return declined();
    const char zero_byte = (char)zero;
    const dmlq_dequantize_params params = {q_type, DMLQ_F32, DMLQ_F32, args[2] != Py_None};
    return run_per_tensor(q, out, &scale, args[2] != Py_None ? &zero_byte : NULL, rows_for_level()->dequantize, &params);
}

/* The quantized add's parameters for arrays {a, b, out} (uint8 or int8, checked), scales {a, b, output} and
 * zero points likewise, in `loop` and `params` with the route its quotient takes; -1 on error. */
static int qadd_setup(dmlq_loop *loop, dmlq_qadd_params *params, PyArrayObject **arrays, const float *scales,
                      const int32_t *zeros, int reciprocal) {
    *params = (dmlq_qadd_params){dmlq_py_is_signed_byte(arrays[0]), dmlq_py_is_signed_byte(arrays[1]),
                                 dmlq_py_is_signed_byte(arrays[2]), zeros[0], zeros[1], scales[0], scales[1],
                                 scales[2], (float)zeros[2], reciprocal, 0.0f, 0.0f, 0};
    if (byte_bounds(arrays[2], &params->lo, &params->hi) < 0 || build_loop(loop, arrays, 3) < 0) return -1;
    params->corrected = dmlq_qadd_corrected(rows_for_level(), params, PyArray_SIZE(arrays[2]));
    return 0;
}

/* quantized_add's operands and parameters: qadd_setup's, from its arguments. */
static int qadd_operands(PyObject *args, dmlq_loop *loop, dmlq_qadd_params *params) {
    PyObject *a_object, *b_object, *out_object;
    double a_scale, b_scale, out_scale;
    int a_zero, b_zero, out_zero, reciprocal;
    if (!PyArg_ParseTuple(args, "OOOdididip", &a_object, &b_object, &out_object, &a_scale, &a_zero, &b_scale,
                          &b_zero, &out_scale, &out_zero, &reciprocal))
        return -1;
    PyArrayObject *arrays[3] = {dmlq_py_as_array(a_object, "a", 0), dmlq_py_as_array(b_object, "b", 0),
                                dmlq_py_as_array(out_object, "out", 0)};
    if (PyErr_Occurred() || dmlq_py_check_output(arrays[2]) < 0) return -1;
    for (int i = 0; i < 2; i++) {
        if (dmlq_py_type_of(arrays[i]) != DMLQ_U8 && dmlq_py_type_of(arrays[i]) != DMLQ_I8) {
            PyErr_SetString(PyExc_ValueError, "quantized_add: a and b must be uint8 or int8");
            return -1;
        }
    }
    const float scales[3] = {(float)a_scale, (float)b_scale, (float)out_scale};
    const int32_t zeros[3] = {a_zero, b_zero, out_zero};
    return qadd_setup(loop, params, arrays, scales, zeros, reciprocal);
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

/* Forgets every quantized-add verdict, so that the next call of 65,536 elements or more verifies. */
static PyObject *forget_quantized_add_verdicts(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    dmlq_qadd_forget_verdicts();
    Py_RETURN_NONE;
}

/* quantized_add_per_tensor(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
 * output_zero_point, out, reciprocal_division): dmlq.quantized_linear_add's common call in one step, as
 * matmul_per_tensor is the matrix multiply's: two uint8/int8 arrays of one shape and per-tensor
 * parameters that py_parameters.c accepts. The result, or None for any other call. */
static PyObject *quantized_add_per_tensor(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (dmlq_py_check_arguments("quantized_add_per_tensor", nargs, 10) < 0) return NULL;
    const int reciprocal = PyObject_IsTrue(args[9]);
    if (reciprocal < 0) return NULL;
    PyArrayObject *a = accept_data(args[0], DMLQ_U8, DMLQ_I8), *b = accept_data(args[3], DMLQ_U8, DMLQ_I8);
    if (!same_shape(a, b)) Py_RETURN_NONE;
    const int ndim = PyArray_NDIM(a), a_type = dmlq_py_type_of(a), carried = dmlq_py_carried_type(args[7]);
    const int out_type = carried >= 0 ? carried : a_type;
    float scales[3];
    int32_t zeros[3];
    if (!dmlq_py_accept_scale(args[1], ndim, &scales[0]) || !dmlq_py_accept_scale(args[4], ndim, &scales[1]) ||
        !dmlq_py_accept_scale(args[6], ndim, &scales[2]) ||
        !dmlq_py_accept_zero_point(args[2], a_type, ndim, &zeros[0]) ||
        !dmlq_py_accept_zero_point(args[5], dmlq_py_type_of(b), ndim, &zeros[1]) ||
        !dmlq_py_accept_zero_point(args[7], out_type, ndim, &zeros[2]))
        Py_RETURN_NONE;
    PyArrayObject *arrays[3] = {a, b, NULL};
    arrays[2] = dmlq_py_accept_output(args[8], ndim, PyArray_DIMS(a), out_type, arrays, 2, 1);
    if (!arrays[2]) return declined();
    dmlq_loop loop;
    dmlq_qadd_params params;
    PyObject *done = qadd_setup(&loop, &params, arrays, scales, zeros, reciprocal) < 0
                         ? NULL
                         : run(&loop, rows_for_level()->quantized_add, &params);
    return delivered(done, arrays[2]);
}

/* add_same_shape(a, b, relu, out): dmlq.add's common call in one step: two float32 or two float16
 * arrays of one shape, alone or with relu, into out (None, a new array; or an array of that shape and
 * dtype, which may be a or b itself). The result, or None for any other call. */
static PyObject *add_same_shape(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (dmlq_py_check_arguments("add_same_shape", nargs, 4) < 0) return NULL;
    const int relu = PyObject_IsTrue(args[2]);
    if (relu < 0) return NULL;
    PyArrayObject *a = accept_data(args[0], DMLQ_F32, DMLQ_F16), *b = accept_data(args[1], DMLQ_F32, DMLQ_F16);
    if (!same_shape(a, b) || dmlq_py_type_of(a) != dmlq_py_type_of(b)) Py_RETURN_NONE;
    const dmlq_add_params params = {dmlq_py_type_of(a), relu ? DMLQ_ACT_RELU : DMLQ_ACT_NONE, {0.0, 0.0}};
    PyArrayObject *arrays[3] = {a, b, NULL};
    arrays[2] = dmlq_py_accept_output(args[3], PyArray_NDIM(a), PyArray_DIMS(a), params.type, arrays, 2, 1);
    if (!arrays[2]) return declined();
    dmlq_loop loop;
    PyObject *done = build_loop(&loop, arrays, 3) < 0 ? NULL : run(&loop, rows_for_level()->add, &params);
    return delivered(done, arrays[2]);
}

static PyObject *add(PyObject *self, PyObject *args) {
    PyObject *a_object, *b_object, *out_object;
    int activation;
    double p0, p1;
    if (!PyArg_ParseTuple(args, "OOOi(dd)", &a_object, &b_object, &out_object, &activation, &p0, &p1)) return NULL;
    PyArrayObject *arrays[3] = {dmlq_py_as_array(a_object, "a", 0), dmlq_py_as_array(b_object, "b", 0), dmlq_py_as_array(out_object, "out", 0)};
    if (PyErr_Occurred() || dmlq_py_check_output(arrays[2]) < 0) return NULL;
    dmlq_add_params params = {dmlq_py_type_of(arrays[2]), activation, {p0, p1}};
    if (dmlq_py_type_of(arrays[0]) != params.type || dmlq_py_type_of(arrays[1]) != params.type || params.type == DMLQ_F64 ||
        (activation != DMLQ_ACT_NONE && params.type != DMLQ_F32 && params.type != DMLQ_F16)) {
        PyErr_SetString(PyExc_ValueError, "add: unsupported dtypes");
        return NULL;
    }
    dmlq_loop loop;
    if (build_loop(&loop, arrays, 3) < 0) return NULL;
    return run(&loop, rows_for_level()->add, &params);
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

/* ---- blockwise 4-bit ------------------------------------------------------------------------------ */

/* The problem of a [rows, cols] float matrix, packed nibbles and [rows / br, cols / bc] scales and zero points. */
static int int4_problem(dmlq_int4_problem *p, PyArrayObject *floats, PyArrayObject *packed, PyArrayObject *scale,
                        PyArrayObject *zero_point, int is_signed) {
    if (PyErr_Occurred()) return -1;
    const int float_type = dmlq_py_type_of(floats), scale_type = dmlq_py_type_of(scale);
    if (PyArray_NDIM(floats) != 2 || !PyArray_IS_C_CONTIGUOUS(floats) || (float_type != DMLQ_F32 && float_type != DMLQ_F16)) {
        PyErr_SetString(PyExc_ValueError, "int4: the float matrix must be a C-contiguous 2-D float32 or float16 array");
        return -1;
    }
    if (PyArray_NDIM(packed) != 1 || !PyArray_IS_C_CONTIGUOUS(packed) || dmlq_py_type_of(packed) != DMLQ_U8) {
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
    if (zero_point && (PyArray_NDIM(zero_point) != 2 || dmlq_py_type_of(zero_point) != DMLQ_I8 ||
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
    PyArrayObject *packed = dmlq_py_as_array(packed_object, "packed", 0), *scale = dmlq_py_as_array(scale_object, "scale", 0);
    PyArrayObject *zero_point = dmlq_py_as_array(zero_object, "zero_point", 1), *out = dmlq_py_as_array(out_object, "out", 0);
    dmlq_int4_problem problem;
    if (PyErr_Occurred() || dmlq_py_check_output(out) < 0 || int4_problem(&problem, out, packed, scale, zero_point, is_signed) < 0)
        return NULL;
    PyArrayObject *inputs[3] = {packed, scale, zero_point};
    if (dmlq_py_check_overlaps(out, inputs, 3, 0) < 0) return NULL;
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
    PyArrayObject *x = dmlq_py_as_array(x_object, "x", 0), *scale = dmlq_py_as_array(scale_object, "scale", 0);
    PyArrayObject *zero_point = dmlq_py_as_array(zero_object, "zero_point", 1), *packed = dmlq_py_as_array(packed_object, "packed", 0);
    dmlq_int4_problem problem;
    if (PyErr_Occurred() || dmlq_py_check_output(packed) < 0 || int4_problem(&problem, x, packed, scale, zero_point, is_signed) < 0)
        return NULL;
    PyArrayObject *inputs[3] = {x, scale, zero_point};
    if (dmlq_py_check_overlaps(packed, inputs, 3, 0) < 0) return NULL;
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
    {"forget_quantized_add_verdicts", forget_quantized_add_verdicts, METH_NOARGS,
     "forget_quantized_add_verdicts(): the next quantized_add of 65,536 elements or more verifies its route."},
    {"quantize_per_tensor", (PyCFunction)(void (*)(void))quantize_per_tensor, METH_FASTCALL,
     "quantize_per_tensor(x, scale, zero_point, out, reciprocal_division): the NumPy layer's per-tensor call in "
     "one step; None when the arguments need its general path."},
    {"dequantize_per_tensor", (PyCFunction)(void (*)(void))dequantize_per_tensor, METH_FASTCALL,
     "dequantize_per_tensor(q, scale, zero_point, out): the NumPy layer's per-tensor call in one step; None when "
     "the arguments need its general path."},
    {"quantized_add_per_tensor", (PyCFunction)(void (*)(void))quantized_add_per_tensor, METH_FASTCALL,
     "quantized_add_per_tensor(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, "
     "output_zero_point, out, reciprocal_division): the NumPy layer's per-tensor call in one step; None when "
     "the arguments need its general path."},
    {"add", add, METH_VARARGS, "add(a, b, out, activation_type_value, (p0, p1))"},
    {"add_same_shape", (PyCFunction)(void (*)(void))add_same_shape, METH_FASTCALL,
     "add_same_shape(a, b, relu, out): the NumPy layer's add of two float arrays of one shape and dtype, alone or "
     "with relu, in one step; None when the arguments need its general path."},
    {"matmul", dmlq_py_matmul, METH_VARARGS,
     "matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out, "
     "reciprocal_division)"},
    {"matmul_per_tensor", (PyCFunction)(void (*)(void))dmlq_py_matmul_per_tensor, METH_FASTCALL,
     "matmul_per_tensor(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out, "
     "reciprocal_division): the NumPy layer's 2-D per-tensor call in one step; None when the arguments need its "
     "general path."},
    {"dequantize_int4", dequantize_int4, METH_VARARGS,
     "dequantize_int4(packed, scale, zero_point, out, is_signed): blockwise packed 4-bit to a 2-D float array"},
    {"quantize_int4", quantize_int4, METH_VARARGS,
     "quantize_int4(x, scale, zero_point, packed, is_signed, reciprocal_division): a 2-D float array to nibbles"},
    {"bind_view", (PyCFunction)(void (*)(void))dmlq_py_bind_view, METH_FASTCALL,
     "bind_view(buffer, dtype, shape, strides, addressed_bytes, alignment, writable): dmlq.buffers.Binding.bind's "
     "(view, address) for an ndarray buffer that serves as it is; None for any other buffer."},
    {"pack_b", dmlq_py_pack_b, METH_O, "pack_b(b): a capsule of b packed for the current level's matmul kernels."},
    {"unpack_b", dmlq_py_unpack_b, METH_O, "unpack_b(packed): a new array of the bytes a pack_b capsule was packed from."},
    {"gemm_kernel_set", dmlq_py_gemm_kernel_set, METH_NOARGS, "The name of the current level's matmul kernel set."},
    {"set_num_threads", set_num_threads, METH_O, "Threads used by the kernels (at least 1)."},
    {"get_num_threads", get_num_threads, METH_NOARGS, "Threads used by the kernels."},
    {"get_level", get_level, METH_NOARGS, "The instruction-set level in use."},
    {"detected_level", detected_level, METH_NOARGS, "The best instruction-set level of this CPU."},
    {"set_level", set_level, METH_O, "Use a level at or below the detected one (for tests)."},
    {"empty", (PyCFunction)(void (*)(void))dmlq_py_empty, METH_FASTCALL, "empty(shape, dtype): numpy.empty, large blocks from dmlq's output cache."},
    {"layout_key", (PyCFunction)(void (*)(void))layout_key, METH_FASTCALL,
     "layout_key(desc_type, out, *operands): the NumPy layer's cache key, None for a strided operand."},
    {"cached_bytes", dmlq_py_cached_bytes, METH_NOARGS, "Bytes of freed outputs the cache holds for reuse."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dmlq._core", "dmlq's compiled kernels.", -1, methods};

PyMethodDef *dmlq_py_family_methods(void); /* py_family.c */
PyMethodDef *dmlq_py_sgemm_methods(void);  /* py_sgemm.c */

PyMODINIT_FUNC PyInit__core(void) {
    import_array();
    dmlq_threads_init();
    if (dmlq_py_output_cache_init() < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddFunctions(m, dmlq_py_family_methods()) < 0 || PyModule_AddFunctions(m, dmlq_py_sgemm_methods()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
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
