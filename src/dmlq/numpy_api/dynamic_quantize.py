"""``dynamic_quantize_linear``: DirectML's DynamicQuantizeLinear, whose three outputs (the data, its
scale and its zero point) are the function's three results.

>>> DYNAMIC_DATA, DYNAMIC_OUTPUTS
((dtype('float32'), dtype('float16')), (dtype('int8'), dtype('uint8')))
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .. import _core
from ..ops.dynamic_quantize_linear import DynamicQuantizeLinear
from ..tensor import TensorDesc
from . import rules
from .compiling import compiled, desc, supported_dtypes
from .rules import F32, U8, output_dtype

__all__ = ["dynamic_quantize_linear"]

DYNAMIC_DATA = supported_dtypes(DynamicQuantizeLinear, "input")
DYNAMIC_OUTPUTS = supported_dtypes(DynamicQuantizeLinear, "output")  # the zero point's too
(SCALE_DTYPE,) = supported_dtypes(DynamicQuantizeLinear, "output_scale")
Results = tuple[np.ndarray, np.ndarray, np.ndarray]
ARGUMENTS = {"input": "x", "output": "y", "output_scale": "scale", "output_zero_point": "zero_point"}


def dynamic_quantize_linear(x: ArrayLike, *, dtype: DTypeLike | None = None) -> Results:
    """``(y, scale, zero_point)``: ``x`` quantized with a scale and zero point from its own range,
    which includes 0 (ONNX's DynamicQuantizeLinear; ``Min``/``Max`` those of the output type):

        scale = (max(x, 0) - min(x, 0)) / (Max - Min)
        zero_point = clamp(round(Min - min(x, 0) / scale), Min, Max)
        y = clamp(round(x / scale) + zero_point, Min, Max)

    in float32, halves to even. ``x`` is float32 or float16 (float64 converts to float32; Python
    numbers become float32); ``y`` has its shape and ``dtype`` (uint8, the default, or int8), ``scale``
    (float32) and ``zero_point`` are 0-d. An empty ``x`` has the range of ``[0]``: its scale and zero
    point are those of an all-zero ``x``. The rules of each argument: :mod:`dmlq.numpy_api.rules`.

    >>> y, scale, zero_point = dynamic_quantize_linear([0.0, 2.0, -3.0, -2.5, 1.34, 0.5])
    >>> y
    array([153, 255,   0,  26, 221, 179], dtype=uint8)
    >>> scale, zero_point                                              # scale = 5 / 255
    (array(0.01960784, dtype=float32), array(153, dtype=uint8))
    """
    x = rules.data(x, "x", DYNAMIC_DATA, F32, floats=F32)
    out_dtype = output_dtype(None, dtype, U8, "zero_point", DYNAMIC_OUTPUTS)
    shape = x.shape or (1,)  # a 0-d x is DirectML's one-element 1-D tensor
    ones = (1,) * len(shape)
    read = x.reshape(shape) if x.size else np.zeros(ones, x.dtype)  # an empty x: the range of [0]
    y = _core.empty(read.shape, out_dtype)
    scale, zero_point = np.empty(ones, SCALE_DTYPE), np.empty(ones, out_dtype)
    operator, operands = compiled(DynamicQuantizeLinear, {"input": read}, y, ("input",), (), ARGUMENTS,
                                  output_scale=parameter_desc(len(ones), SCALE_DTYPE),
                                  output_zero_point=parameter_desc(len(ones), out_dtype))  # fmt: skip
    operator.run_arrays(operands, (y, scale, zero_point))
    y = y.reshape(x.shape) if x.size else np.empty(x.shape, out_dtype)
    return y, scale.reshape(()), zero_point.reshape(())


@functools.cache
def parameter_desc(dimensions: int, dtype: np.dtype) -> TensorDesc:
    """The description of a scale or zero point output of ``dimensions`` sizes of 1, built once per
    dimension count and dtype: building a TensorDesc took two thirds of a small call's 30 us.

    >>> parameter_desc(2, np.dtype(np.uint8)).sizes
    (1, 1)
    """
    return desc(np.empty((1,) * dimensions, dtype))
