"""DML_GEMM (operator 54, feature level 1_0; spec/QUANTIZED-FAMILY.md §7): the float matrix multiply.

    Output = FusedActivation(Alpha * TransA(A) x TransB(B) + Beta * C)

A is ``{[Batch], [Channel], M, K}`` (``{..., K, M}`` with TransA TRANSPOSE), B ``{..., K, N}``
(``{..., N, K}`` with TransB), C and Output ``{..., M, N}``: 4-D only at 1_0, 2 to 4 dimensions from
4_0. Batches equal the output's (broadcast through zero strides). C is optional (zeros, Beta ignored);
FLOAT32 or FLOAT16 throughout. Not in-place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..activations import Activation, float32_rule
from ..tensor import TensorDesc
from ..types import DataType, FeatureLevel, MatrixTransform
from .add1 import fused_activation_violations
from .base import (
    OperatorDesc,
    Rule,
    TensorField,
    required,
    same_data_type,
    same_dimension_count,
    same_sizes,
    support,
)

FL = FeatureLevel
FLOATS = (DataType.FLOAT32, DataType.FLOAT16)


def _matrix_shapes(desc: Gemm) -> Iterator[tuple[str, str]]:
    a, b, out = required(desc.a).sizes, required(desc.b).sizes, required(desc.output).sizes
    m, k = (a[-1], a[-2]) if desc.trans_a == MatrixTransform.TRANSPOSE else (a[-2], a[-1])
    b_k, n = (b[-1], b[-2]) if desc.trans_b == MatrixTransform.TRANSPOSE else (b[-2], b[-1])
    if b_k != k:
        layout = "[..., N, K] (TransB)" if desc.trans_b == MatrixTransform.TRANSPOSE else "[..., K, N]"
        yield "b", f"sizes {list(b)} do not continue a's K = {k} (b is {layout})"
    elif out[-2:] != (m, n):
        yield "output", f"sizes {list(out)} must end in [M, N] = [{m}, {n}]"
    else:
        for name, sizes in (("a", a), ("b", b)):
            if sizes[:-2] != out[:-2]:
                yield name, (f"batch sizes {list(sizes[:-2])} differ from output's {list(out[:-2])} "
                             "(broadcast batches through zero strides)")  # fmt: skip


def _attributes(desc: Gemm) -> Iterator[tuple[str, str]]:
    for name in ("trans_a", "trans_b"):
        if not isinstance(getattr(desc, name), MatrixTransform):
            yield name, f"{getattr(desc, name)!r} must be MatrixTransform.NONE (0) or TRANSPOSE (1)"
    for name in ("alpha", "beta"):
        problem = float32_rule(getattr(desc, name))
        if problem:
            yield name, problem


@dataclass(frozen=True, kw_only=True)
class Gemm(OperatorDesc):
    """``DML_GEMM_OPERATOR_DESC``.

    >>> from dmlq import TensorDesc, DataType
    >>> Gemm(a=TensorDesc(DataType.FLOAT32, [1, 1, 3, 2]), b=TensorDesc(DataType.FLOAT32, [1, 1, 4, 2]),
    ...      output=TensorDesc(DataType.FLOAT32, [1, 1, 3, 4]), trans_b=True).minimum_feature_level()
    <FeatureLevel.FL_1_0: 4096>
    """

    a: TensorDesc | None = None
    b: TensorDesc | None = None
    c: TensorDesc | None = None
    output: TensorDesc | None = None
    trans_a: MatrixTransform | int = MatrixTransform.NONE
    trans_b: MatrixTransform | int = MatrixTransform.NONE
    alpha: float = 1.0
    beta: float = 1.0
    fused_activation: Activation | None = None

    def __post_init__(self) -> None:
        for name in ("trans_a", "trans_b"):
            value = getattr(self, name)
            if isinstance(value, int) and value in set(MatrixTransform):  # bools and ints: NONE / TRANSPOSE
                object.__setattr__(self, name, MatrixTransform(int(value)))

    TYPE_NAME = "GEMM"
    TYPE_VALUE = 54
    INTRODUCED = FL.FL_1_0
    FIELDS = (
        TensorField("a", "ATensor"),
        TensorField("b", "BTensor"),
        TensorField("c", "CTensor"),
        TensorField("output", "OutputTensor", is_output=True),
    )
    SUPPORT = (
        support(FL.FL_4_0, (2, 4), optional=["c"], a=FLOATS, b=FLOATS, c=FLOATS, output=FLOATS),
        support(FL.FL_1_0, (4, 4), optional=["c"], a=FLOATS, b=FLOATS, c=FLOATS, output=FLOATS),
    )
    CONSTRAINTS = (
        same_data_type("a", "b", "c", "output"),
        same_dimension_count("a", "b", "c", "output"),
        same_sizes("output", "c"),
    )
    RULES = (
        Rule("TransA and TransB are DML_MATRIX_TRANSFORM NONE or TRANSPOSE; Alpha and Beta finite FLOAT "
             "values", _attributes),
        Rule("A is [..., M, K] ([..., K, M] with TransA), B [..., K, N] ([..., N, K] with TransB), Output "
             "[..., M, N], with equal batch sizes", _matrix_shapes),
    )  # fmt: skip
    DECISIONS = (
        "**Arithmetic**: float32 (FLOAT16 operands widened exactly, the result rounded once to FLOAT16). "
        "Each element of `A x B` is a float32 sum over k in order, k = 0 to K - 1, from +0, with one fused "
        "multiply-add per term (`acc = fma(a[i, k], b[k, j], acc)`: one rounding per term); then "
        "`alpha * acc` and `beta * C` are float32 products, their sum a float32 addition, and the fused "
        "activation is evaluated in float64 on the float32 value and rounded to float32, as ElementWiseAdd1 "
        "evaluates it. The page states no order or precision, and DirectML's GPUs may round differently "
        "(DirectML 1.15 emulates the FLOAT16 GEMM in FP32 on Intel for precision, Releases.md). dmlq fixes "
        "this order because every CPU computes it alike (an IEEE fusedMultiplyAdd on AVX-512, AVX2 + FMA, "
        "ARM64 and in the C library's `fmaf`): its kernels give the same bits at every level, blocking and "
        "thread count, and `dmlq.reference.gemm` checks them bit for bit. A sum split along K (BLAS's, whose "
        "order depends on the machine and the thread count) could not be checked so; the price is that no "
        "kernel vectorises along K, so a few rows of A against a TransB B pack B first. Which NaN a NaN "
        "result is (its sign and payload) is not promised: CPUs' fused multiply-adds propagate different "
        "operands.",
        "**K = 0** cannot be described: every size is at least 1 (onnxruntime's ZeroKWithBias Gemm test "
        "excludes DirectML, `onnxruntime/test/providers/cpu/math/gemm_test.cc`).",
        "**Batches** broadcast only through zero strides, C only through zero strides to the output's sizes"
        " (the page: C and Output have the same Sizes), as onnxruntime's provider builds them.",
        "**Fused activations**: the 17 of `dmlq.activations` at their own feature levels. The page also "
        "lets GEMM fuse ELEMENT_WISE_CLIP (6_0) and ACTIVATION_SOFTMAX / SOFTMAX1 (6_1); dmlq has no "
        "description for those yet, so no GEMM can carry them.",
        "**Alpha and Beta** are DirectML FLOATs: finite float32 values (NaN, infinities and float32 "
        "overflow are refused, as for the activations' parameters). With C absent, Beta is ignored.",
    )

    def _extra_violations(self, level: FeatureLevel) -> Iterator[tuple[str, str]]:
        return fused_activation_violations(self.fused_activation, self.output, level)
