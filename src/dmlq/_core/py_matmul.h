/* The matrix multiply's bindings shared by py_matmul.c (requantized bytes) and py_family.c (the
 * integer multiplies' int32 and float outputs): the operands' checks and the problem's setup. */
#ifndef DMLQ_PY_MATMUL_H
#define DMLQ_PY_MATMUL_H

#include "family.h"
#include "py_arrays.h"

typedef struct dmlq_py_packed_matrix packed_matrix; /* a pack_b capsule's B */

/* Byte offsets of every batch of `array` (the dimensions before the last two, as many as out's), in
 * row-major batch order of out's batch dimensions. */
void dmlq_py_batch_offsets(PyArrayObject *array, PyArrayObject *out, ptrdiff_t *offsets);
/* The nine operands of a product from Python objects, in matmul's order (a, a_scale, a_zero_point, b,
 * b_scale, b_zero_point, output_scale, output_zero_point, out; bit i of `optional` lets objects[i] be
 * None): arrays as the kernels read them, b an array or a pack_b capsule (then arrays[3] is NULL and
 * *packed set), checked as matrices of one product; out's element type is the caller's to check.
 * 0, or -1 with an exception set. */
int dmlq_py_matmul_operands(PyObject *const *objects, unsigned optional, PyArrayObject **arrays,
                            const packed_matrix **packed);
/* Runs a checked product: the per-row and per-column vectors read from the arrays ([..., M, 1],
 * [..., 1, N] or [..., 1, 1]; an absent scale is 1, an absent zero point 0), then dmlq_gemm with
 * `epilogue` (NULL: the requantized bytes), the GIL released. 0, or -1 with an exception set. */
int dmlq_py_run_matmul_operands(PyArrayObject *const *arrays, const packed_matrix *packed, int reciprocal,
                                const dmlq_gemm_epilogue *epilogue);

#endif
