"""The computation behind every compiled operator: tensor views in, the output view written.

Each function receives the input tensors as ndarrays of their descriptions' sizes, or that
broadcast to them as NumPy operands do (element-wise operators), keyed by field name (None for an
absent optional tensor), and writes the output view in place with the compiled kernels of
``dmlq._core``: one fused pass over memory, the GIL released, on :func:`dmlq.get_num_threads`
threads. They give the bits of the NumPy reference formulas of :mod:`dmlq.reference`, which remain
the oracle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from . import _core, reference
from .ops import (
    ElementWiseAdd,
    ElementWiseAdd1,
    ElementWiseDequantizeLinear,
    ElementWiseQuantizedLinearAdd,
    ElementWiseQuantizeLinear,
    OperatorDesc,
    QuantizedLinearMatrixMultiply,
)
from .packed import PackedB

Views = Mapping[str, "np.ndarray | None"]


def _readable(view: object) -> object:
    """``view`` itself, or a packed native copy when the kernels cannot read it in place (a packed
    B, not an array, is always readable)."""
    if not isinstance(view, np.ndarray) or (view.flags.aligned and view.dtype.isnative):
        return view
    return np.array(view, view.dtype.newbyteorder("="), order="C")  # a fresh, aligned copy


def _call(function: Callable[..., None], arrays: tuple, out: np.ndarray, *scalars: object) -> None:
    """``function(*arrays, out, *scalars)``, writing ``out`` in place.

    The compiled function raises BufferError for arrays it cannot use as they are (misaligned or
    byte-swapped, or an output overlapping an input other than by being exactly it, as an in-place
    add may); then it runs on aligned copies into a temporary, copied to ``out``.
    """
    try:
        function(*arrays, out, *scalars)
    except BufferError:
        temporary = np.empty(out.shape, out.dtype)
        function(*(_readable(array) for array in arrays), temporary, *scalars)
        out[...] = temporary


def quantize_linear(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    arrays = (views["input"], views["scale"], views["zero_point"])
    _call(_core.quantize, arrays, out, reciprocal_division)


def dequantize_linear(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    _call(_core.dequantize, (views["input"], views["scale"], views["zero_point"]), out)


def _activation(desc) -> tuple[int, tuple[float, float]]:
    """The fused activation's DirectML type value (0 for none) and its two parameter slots."""
    activation = getattr(desc, "fused_activation", None)
    if activation is None:
        return 0, (0.0, 0.0)
    parameters = (*(float(p) for p in activation.parameters()), 0.0, 0.0)
    return activation.TYPE_VALUE, parameters[:2]


def add(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    activation, parameters = _activation(desc)
    _call(_core.add, (views["a"], views["b"]), out, activation, parameters)


def _scalar(view: np.ndarray | None) -> np.generic | None:
    return None if view is None else view.reshape(-1)[0]


def quantized_linear_add(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    scalars = []
    for side in ("a", "b", "output"):
        zero_point = _scalar(views[f"{side}_zero_point"])
        scalars += [float(_scalar(views[f"{side}_scale"])), 0 if zero_point is None else int(zero_point)]
    _call(_core.quantized_add, (views["a"], views["b"]), out, *scalars, reciprocal_division)


def matrix_operand(view: np.ndarray | None) -> np.ndarray | None:
    """A scale or zero point tensor as a 2-D ``[M, 1]``, ``[1, N]`` or ``[1, 1]`` array."""
    if view is None:
        return None
    padded = view.reshape((1, 1) + view.shape)
    return padded.reshape(padded.shape[-2:])


_MATRIX_FIELDS = ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point",
                  "output_scale", "output_zero_point")  # fmt: skip


def _matrix_b(b: np.ndarray | PackedB) -> object:
    """The matrix multiply's B as the kernels take it: an array, or a packed B's packing for the
    current CPU level (its private copy where the kernels do not take it)."""
    if not isinstance(b, PackedB):
        return b
    return b.for_kernels() if b.packable else b.array


def quantized_linear_matrix_multiply(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    """``views["b"]`` is an array or a :class:`PackedB` (OWNED_BY_DML, or a NumPy-layer packing)."""
    operands = tuple(
        views["a"] if name == "a" else _matrix_b(views["b"]) if name == "b" else matrix_operand(views[name])
        for name in _MATRIX_FIELDS
    )
    if views["a"].shape[-1] >= _core.MAX_K:  # beyond the kernel's int32 sums: the exact int64 formula
        out[...] = reference.quantized_linear_matrix_multiply(
            *operands, out.dtype, reciprocal_division=reciprocal_division
        )
        return
    _call(_core.matmul, operands, out, reciprocal_division)


Kernel = Callable[[OperatorDesc, Views, np.ndarray, bool], None]

KERNELS: dict[type[OperatorDesc], Kernel] = {
    ElementWiseQuantizeLinear: quantize_linear,
    ElementWiseDequantizeLinear: dequantize_linear,
    ElementWiseQuantizedLinearAdd: quantized_linear_add,
    ElementWiseAdd: add,
    ElementWiseAdd1: add,
    QuantizedLinearMatrixMultiply: quantized_linear_matrix_multiply,
}
