"""The seam between the NumPy layer and its one-step C calls.

Each NumPy-layer function first offers its common call (per-tensor scales and zero points, arrays
the kernels read as they are) to one call of :mod:`dmlq._core` that checks and runs it in one
step. That call returns the result, or None when it does not take the call, and then the
function's general path (the rules of :mod:`dmlq.numpy_api.rules`, a compiled description)
decides. A one-step call may only *decline*: whatever it takes, it answers exactly as the general
path would, and it takes nothing the rules refuse, so every error is the general path's.

The functions are looked up here on every call, so that :func:`off` can turn the route off (tests
compare the two routes that way):

>>> import numpy as np, dmlq
>>> from dmlq.numpy_api import one_step
>>> x = np.float32([0.5, 1.5])
>>> one_step.quantize(x, 1.0, None, None, False)
array([0, 2], dtype=uint8)
>>> with one_step.off():
...     one_step.quantize(x, 1.0, None, None, False) is None, dmlq.quantize_linear(x, 1.0)
(True, array([0, 2], dtype=uint8))
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .. import _core

__all__ = ["add", "dequantize", "matrix_multiply", "off", "quantize", "quantized_add"]

# quantize(x, scale, zero_point, out, reciprocal_division)
quantize = _core.quantize_per_tensor
# dequantize(q, scale, zero_point, out)
dequantize = _core.dequantize_per_tensor
# add(a, b, relu, out)
add = _core.add_same_shape
# quantized_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
#               out, reciprocal_division)
quantized_add = _core.quantized_add_per_tensor
# matrix_multiply(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
#                 out, reciprocal_division); b an array or a packed B's kernel operand
matrix_multiply = _core.matmul_per_tensor

_CALLS = ("quantize", "dequantize", "add", "quantized_add", "matrix_multiply")


def _declined(*arguments: object) -> None:
    """What a one-step call returns for a call it does not take."""
    return None


@contextmanager
def off() -> Iterator[None]:
    """Within the ``with`` block every one-step call declines, so every call takes the general path."""
    taken = {name: globals()[name] for name in _CALLS}
    globals().update(dict.fromkeys(_CALLS, _declined))
    try:
        yield
    finally:
        globals().update(taken)
