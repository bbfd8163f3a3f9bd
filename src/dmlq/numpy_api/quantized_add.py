"""``quantized_linear_add``: DirectML's ElementWiseQuantizedLinearAdd (per-tensor parameters)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..errors import DmlError
from ..ops.quantized_linear_add import ElementWiseQuantizedLinearAdd
from . import one_step, rules
from .compiling import RECIPROCAL_DIVISION, at_least_1d, delivered, run, supported_dtypes, target
from .rules import F32, broadcast_shape, integer_data, output_dtype

__all__ = ["quantized_linear_add"]

QUANTIZED_ADD_DATA = supported_dtypes(ElementWiseQuantizedLinearAdd, "a")  # b's and the output's too


def quantized_linear_add(a: ArrayLike, a_scale: ArrayLike, a_zero_point: ArrayLike | None,
                         b: ArrayLike, b_scale: ArrayLike, b_zero_point: ArrayLike | None,
                         output_scale: ArrayLike, output_zero_point: ArrayLike | None, *,
                         dtype: DTypeLike | None = None,
                         out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Dequantize ``a`` and ``b``, add in float32, requantize: DirectML's QuantizedLinearAdd.

    ``a`` and ``b`` are uint8 or int8 (lists take their zero point's dtype, else uint8); every scale
    and zero point holds one element (zero points may be None); all of them broadcast against each
    other like NumPy operands (a ``(1, 1)`` scale makes a 1-D result 2-D). The output's dtype is
    ``output_zero_point``'s when it is a NumPy array or scalar, else ``dtype``, else ``a``'s. The rules
    of each argument: :mod:`dmlq.numpy_api.rules`.

    >>> quantized_linear_add(np.uint8([10, 20]), 0.5, None, np.uint8([1, 3]), 1.0, None, 2.0, None)
    array([3, 6], dtype=uint8)
    """
    if dtype is None:  # the common call, checked and run in one C step; None when it is not that call
        result = one_step.quantized_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                                        output_zero_point, out, RECIPROCAL_DIVISION)  # fmt: skip
        if result is not None:
            return result
    a = integer_data(a, "a", a_zero_point, QUANTIZED_ADD_DATA)
    b = integer_data(b, "b", b_zero_point, QUANTIZED_ADD_DATA)
    out_dtype, quantization = parameters_of(a.dtype, b.dtype, a_scale, a_zero_point, b_scale, b_zero_point,
                                            output_scale, output_zero_point, dtype)  # fmt: skip
    written = target(out, broadcast_shape(a=a, b=b, **quantization), out_dtype)
    if written.size:
        operands = {"a": a, "b": b, **quantization}
        run(ElementWiseQuantizedLinearAdd, operands, at_least_1d(written), per_tensor=tuple(quantization))
    return delivered(written, out)


def parameters_of(a_dtype: np.dtype, b_dtype: np.dtype, a_scale: object, a_zero_point: object,
                  b_scale: object, b_zero_point: object, output_scale: object, output_zero_point: object,
                  dtype: object) -> tuple[np.dtype, dict[str, np.ndarray | None]]:  # fmt: skip
    """The output's dtype and the six scales and zero points by field name, checked: each holds one
    element (QuantizedLinearAdd is per-tensor).

    >>> u8 = np.dtype(np.uint8)
    >>> out_dtype, parameters = parameters_of(u8, u8, 0.5, None, 1.0, 3, 2.0, np.int8(1), None)
    >>> out_dtype, parameters["b_zero_point"], parameters["output_zero_point"]
    (dtype('int8'), array(3, dtype=uint8), array(1, dtype=int8))
    """
    out_dtype = output_dtype(output_zero_point, dtype, a_dtype, "output_zero_point", QUANTIZED_ADD_DATA)
    parameters = {
        "a_scale": rules.scale(a_scale, "a_scale", F32),
        "a_zero_point": rules.zero_point(a_zero_point, "a_zero_point", a_dtype, "a", QUANTIZED_ADD_DATA),
        "b_scale": rules.scale(b_scale, "b_scale", F32),
        "b_zero_point": rules.zero_point(b_zero_point, "b_zero_point", b_dtype, "b", QUANTIZED_ADD_DATA),
        "output_scale": rules.scale(output_scale, "output_scale", F32),
        "output_zero_point": rules.zero_point(output_zero_point, "output_zero_point", out_dtype, "the output",
                                              QUANTIZED_ADD_DATA),
    }  # fmt: skip
    for name, value in parameters.items():
        if value is not None and value.size != 1:
            raise DmlError(f"{name}: holds {value.size} elements; QuantizedLinearAdd is per-tensor")
    return out_dtype, parameters
