"""The computation behind every compiled operator: tensor views in, the output view written.

Each function receives the input tensors as ndarrays of their descriptions' sizes (broadcast
through zero strides), keyed by field name (None for an absent optional tensor), and writes the
output view in place. They run the NumPy reference formulas of :mod:`dmlq.reference`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from . import reference
from .ops import (
    ElementWiseAdd,
    ElementWiseAdd1,
    ElementWiseDequantizeLinear,
    ElementWiseQuantizedLinearAdd,
    ElementWiseQuantizeLinear,
    OperatorDesc,
    QuantizedLinearMatrixMultiply,
)

Views = Mapping[str, "np.ndarray | None"]


def quantize_linear(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    out[...] = reference.quantize_linear(
        views["input"], views["scale"], views["zero_point"], out.dtype,
        reciprocal_division=reciprocal_division,
    )  # fmt: skip


def dequantize_linear(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    out[...] = reference.dequantize_linear(
        views["input"], views["scale"], views["zero_point"], out.dtype
    )


def add(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    activation = getattr(desc, "fused_activation", None)
    out[...] = reference.add(views["a"], views["b"], out.dtype, activation)


def _scalar(view: np.ndarray | None) -> np.generic | None:
    return None if view is None else view.reshape(-1)[0]


def quantized_linear_add(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    scalars = {name: _scalar(view) for name, view in views.items() if name not in ("a", "b")}
    out[...] = reference.quantized_linear_add(
        views["a"], scalars["a_scale"], scalars["a_zero_point"],
        views["b"], scalars["b_scale"], scalars["b_zero_point"],
        scalars["output_scale"], scalars["output_zero_point"], out.dtype,
        reciprocal_division=reciprocal_division,
    )  # fmt: skip


def matrix_operand(view: np.ndarray | None) -> np.ndarray | None:
    """A scale or zero point tensor as a 2-D ``[M, 1]``, ``[1, N]`` or ``[1, 1]`` array."""
    if view is None:
        return None
    padded = view.reshape((1, 1) + view.shape)
    return padded.reshape(padded.shape[-2:])


def quantized_linear_matrix_multiply(
    desc, views: Views, out: np.ndarray, reciprocal_division: bool
) -> None:
    operands = {name: matrix_operand(view) for name, view in views.items() if name not in ("a", "b")}
    out[...] = reference.quantized_linear_matrix_multiply(
        views["a"], operands["a_scale"], operands["a_zero_point"],
        views["b"], operands["b_scale"], operands["b_zero_point"],
        operands["output_scale"], operands["output_zero_point"], out.dtype,
        reciprocal_division=reciprocal_division,
    )  # fmt: skip


Kernel = Callable[[OperatorDesc, Views, np.ndarray, bool], None]

KERNELS: dict[type[OperatorDesc], Kernel] = {
    ElementWiseQuantizeLinear: quantize_linear,
    ElementWiseDequantizeLinear: dequantize_linear,
    ElementWiseQuantizedLinearAdd: quantized_linear_add,
    ElementWiseAdd: add,
    ElementWiseAdd1: add,
    QuantizedLinearMatrixMultiply: quantized_linear_matrix_multiply,
}
