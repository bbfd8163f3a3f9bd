"""``add``: DirectML's ElementWiseAdd, or ElementWiseAdd1 with a fused activation."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .. import activations as _activations
from ..errors import DmlError
from ..ops import ElementWiseAdd, ElementWiseAdd1
from . import one_step
from .compiling import at_least_1d, delivered, run, target
from .rules import F32, FLOAT_TYPES, broadcast_shape, is_numpy, native, operand

__all__ = ["add"]


def add(a: ArrayLike, b: ArrayLike, *, fused_activation: _activations.Activation | str | None = None,
        out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``fused_activation(a + b)`` for float32 or float16 arrays of one dtype.

    ``fused_activation`` is None, a name (``"relu"``, ``"leaky_relu"``...) or an object of
    :mod:`dmlq.activations`. ``out`` may be ``a`` or ``b`` itself (in-place).

    >>> add([1.0, -3.0], [1.0, 1.0], fused_activation="relu")
    array([2., 0.], dtype=float32)
    """
    relu = fused_activation == "relu" or isinstance(fused_activation, _activations.Relu)
    if fused_activation is None or relu:  # the common call, checked and run in one C step, or None
        result = one_step.add(a, b, relu, out)
        if result is not None:
            return result
    a_dtype = float_operand_dtype(a, b)
    a = operand(a, "a", FLOAT_TYPES, a_dtype, floats=F32)
    b = operand(b, "b", FLOAT_TYPES, float_operand_dtype(b, a), floats=F32)
    if a.dtype != b.dtype:
        raise DmlError(f"a, b: {a.dtype} and {b.dtype} differ (DirectML has no mixed-type add)")
    activation = _activations.from_spec(fused_activation)
    written = target(out, broadcast_shape(a=a, b=b), a.dtype)
    if written.size:
        operands = {"a": a, "b": b}
        if activation is None:
            run(ElementWiseAdd, operands, at_least_1d(written))
        else:
            run(ElementWiseAdd1, operands, at_least_1d(written), fused_activation=activation)
    return delivered(written, out)


def float_operand_dtype(value: object, other: object) -> np.dtype:
    """Python numbers take the other operand's float dtype when it has one, else float32."""
    if is_numpy(other) and native(other.dtype) in FLOAT_TYPES:
        return native(other.dtype)
    return F32
