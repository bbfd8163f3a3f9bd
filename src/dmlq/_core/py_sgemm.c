/* dmlq._core.gemm: DML_GEMM in float32 or float16 (sgemm.h), a thin binding: arguments checked
 * defensively (ValueError; BufferError for an array the kernel cannot use in place), the work in C
 * without the GIL on dmlq_num_threads() threads. */
#include "py_matmul.h"
#include "sgemm.h"

enum { A = 0, B, C, OUT, OPERANDS };

static int fail(const char *message) {
    PyErr_Format(PyExc_ValueError, "gemm: %s", message);
    return -1;
}

/* a [..., M, K] ([..., K, M] transposed), b [..., K, N] ([..., N, K]), c None or out's shape, out
 * [..., M, N]: one float type, 2 to 4 dimensions, equal batch sizes, K at least 1. */
static int check_operands(PyArrayObject *const *arrays, int trans_a, int trans_b) {
    PyArrayObject *out = arrays[OUT];
    const int ndim = PyArray_NDIM(out), type = dmlq_py_type_of(out);
    if (type != DMLQ_F32 && type != DMLQ_F16) return fail("out must be float32 or float16");
    for (int i = 0; i < OPERANDS; i++) {
        if (!arrays[i]) continue;
        if (dmlq_py_type_of(arrays[i]) != type) return fail("a, b, c and out must have one dtype");
        if (PyArray_NDIM(arrays[i]) != ndim || ndim < 2 || ndim > 4)
            return fail("a, b, c and out need the same 2 to 4 dimensions");
        for (int d = 0; d < ndim - 2; d++)
            if (PyArray_DIM(arrays[i], d) != PyArray_DIM(out, d)) return fail("batch sizes must equal out's");
    }
    const npy_intp *a = PyArray_DIMS(arrays[A]) + ndim - 2, *b = PyArray_DIMS(arrays[B]) + ndim - 2;
    const npy_intp m = a[trans_a ? 1 : 0], k = a[trans_a ? 0 : 1], b_k = b[trans_b ? 1 : 0], n = b[trans_b ? 0 : 1];
    if (k < 1 || b_k != k) return fail("b must continue a's K (at least 1)");
    if (PyArray_DIM(out, ndim - 2) != m || PyArray_DIM(out, ndim - 1) != n) return fail("out must end in [M, N]");
    if (arrays[C] && memcmp(PyArray_DIMS(arrays[C]), PyArray_DIMS(out), sizeof(npy_intp) * (size_t)ndim))
        return fail("c must have out's shape (broadcast it through zero strides)");
    if (dmlq_py_check_output(out) < 0) return -1;
    return dmlq_py_check_overlaps(out, arrays, OUT, 0);
}

/* op(x)'s row and column byte strides: the last two dimensions', swapped when transposed. */
static void matrix_strides(PyArrayObject *x, int transposed, ptrdiff_t *row, ptrdiff_t *col) {
    const int ndim = PyArray_NDIM(x);
    *row = PyArray_STRIDE(x, transposed ? ndim - 1 : ndim - 2);
    *col = PyArray_STRIDE(x, transposed ? ndim - 2 : ndim - 1);
}

static PyObject *gemm(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objects[OPERANDS];
    int trans_a, trans_b, activation;
    double alpha, beta, p0, p1;
    if (!PyArg_ParseTuple(args, "OOOOppddi(dd)", &objects[A], &objects[B], &objects[C], &objects[OUT], &trans_a,
                          &trans_b, &alpha, &beta, &activation, &p0, &p1))
        return NULL;
    static const char *const names[OPERANDS] = {"a", "b", "c", "out"};
    PyArrayObject *arrays[OPERANDS];
    for (int i = 0; i < OPERANDS; i++) arrays[i] = dmlq_py_as_array(objects[i], names[i], i == C);
    if (PyErr_Occurred() || check_operands(arrays, trans_a, trans_b) < 0) return NULL;
    PyArrayObject *out = arrays[OUT];
    const int ndim = PyArray_NDIM(out);
    const ptrdiff_t batches = PyArray_MultiplyList(PyArray_DIMS(out), ndim - 2);
    ptrdiff_t *offsets = PyMem_Malloc(sizeof(ptrdiff_t) * (size_t)(OPERANDS * (batches ? batches : 1)));
    if (!offsets) return PyErr_NoMemory();
    for (int i = 0; i < OPERANDS; i++)
        if (arrays[i]) dmlq_py_batch_offsets(arrays[i], out, offsets + i * batches);
    dmlq_sgemm_problem p = {
        .batches = batches, .m = PyArray_DIM(out, ndim - 2), .n = PyArray_DIM(out, ndim - 1),
        .k = PyArray_DIM(arrays[A], trans_a ? ndim - 2 : ndim - 1), .type = dmlq_py_type_of(out),
        .a = PyArray_BYTES(arrays[A]), .b = PyArray_BYTES(arrays[B]), .c = arrays[C] ? PyArray_BYTES(arrays[C]) : NULL,
        .out = PyArray_BYTES(out), .a_offsets = offsets, .b_offsets = offsets + batches,
        .c_offsets = offsets + 2 * batches, .out_offsets = offsets + 3 * batches,
        .out_row = PyArray_STRIDE(out, ndim - 2), .out_col = PyArray_STRIDE(out, ndim - 1),
        .alpha = (float)alpha, .beta = (float)beta, .activation = activation, .p = {p0, p1}};
    matrix_strides(arrays[A], trans_a, &p.a_row, &p.a_col);
    matrix_strides(arrays[B], trans_b, &p.b_row, &p.b_col);
    if (arrays[C]) matrix_strides(arrays[C], 0, &p.c_row, &p.c_col);
    const int threads = dmlq_num_threads();
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = dmlq_sgemm(&p, threads);
    Py_END_ALLOW_THREADS
    PyMem_Free(offsets);
    if (status < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyMethodDef sgemm_methods[] = {
    {"gemm", gemm, METH_VARARGS,
     "gemm(a, b, c, out, trans_a, trans_b, alpha, beta, activation_type_value, (p0, p1)): DML_GEMM, out = "
     "activation(alpha * op(a) @ op(b) + beta * c) (c None: no C). a [..., M, K] ([..., K, M] with trans_a), b "
     "[..., K, N] ([..., N, K] with trans_b), c None or of out's shape, out [..., M, N]: one dtype, float32 or "
     "float16, 2 to 4 dimensions, batch sizes equal to out's (broadcast them through zero strides), K >= 1. Each "
     "output's sum runs over k in order, one float32 fused multiply-add per term from +0; alpha * sum and "
     "beta * c are float32 products, their sum a float32 addition; the activation is dmlq.activations' (float64, "
     "rounded to float32); a float16 out is rounded once from float32."},
    {NULL, NULL, 0, NULL}};

PyMethodDef *dmlq_py_sgemm_methods(void) { return sgemm_methods; }
