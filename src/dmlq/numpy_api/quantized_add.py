"""``quantized_linear_add``: DirectML's ElementWiseQuantizedLinearAdd (per-tensor parameters)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..errors import DmlError
from ..ops import ElementWiseQuantizedLinearAdd
from . import one_step, rules
from .compiling import DEVICE, at_least_1d, delivered, run, target
from .rules import BYTE_TYPES, F32, broadcast_shape, integer_operand, output_dtype

__all__ = ["quantized_linear_add"]


def quantized_linear_add(a: ArrayLike, a_scale: ArrayLike, a_zero_point: ArrayLike | None,
                         b: ArrayLike, b_scale: ArrayLike, b_zero_point: ArrayLike | None,
                         output_scale: ArrayLike, output_zero_point: ArrayLike | None, *,
                         dtype: DTypeLike = None, out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Dequantize ``a`` and ``b``, add in float32, requantize: DirectML's QuantizedLinearAdd.

    Every scale and zero point holds one element (zero points may be None); all of them broadcast
    against each other like NumPy operands (a ``(1, 1)`` scale makes a 1-D result 2-D).

    >>> quantized_linear_add(np.uint8([10, 20]), 0.5, None, np.uint8([1, 3]), 1.0, None, 2.0, None)
    array([3, 6], dtype=uint8)
    """
    if dtype is None:  # the common call, checked and run in one C step; None when it is not that call
        parameters = (b, b_scale, b_zero_point, output_scale, output_zero_point)
        result = one_step.quantized_add(a, a_scale, a_zero_point, *parameters, out,
                                        DEVICE.reciprocal_division)  # fmt: skip
        if result is not None:
            return result
    a = integer_operand(a, "a", a_zero_point, BYTE_TYPES)
    b = integer_operand(b, "b", b_zero_point, BYTE_TYPES)
    out_dtype = output_dtype(output_zero_point, dtype, a.dtype, "output_zero_point")
    quantization = {
        "a_scale": rules.scale(a_scale, "a_scale", F32),
        "a_zero_point": rules.zero_point(a_zero_point, "a_zero_point", a.dtype),
        "b_scale": rules.scale(b_scale, "b_scale", F32),
        "b_zero_point": rules.zero_point(b_zero_point, "b_zero_point", b.dtype),
        "output_scale": rules.scale(output_scale, "output_scale", F32),
        "output_zero_point": rules.zero_point(output_zero_point, "output_zero_point", out_dtype),
    }
    for name, value in quantization.items():
        if value is not None and value.size != 1:
            raise DmlError(f"{name}: holds {value.size} elements; QuantizedLinearAdd is per-tensor")
    written = target(out, broadcast_shape(a=a, b=b, **quantization), out_dtype)
    if written.size:
        operands = {"a": a, "b": b, **quantization}
        run(ElementWiseQuantizedLinearAdd, operands, at_least_1d(written), per_tensor=tuple(quantization))
    return delivered(written, out)
