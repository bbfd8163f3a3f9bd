"""``add``: DirectML's ElementWiseAdd, or ElementWiseAdd1 with a fused activation.

Both operands have one dtype of ElementWiseAdd1's table (float32 or float16; API.md's ``add``
takes floats only, though ElementWiseAdd's table lists integers from feature level 5_1).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .. import activations as _activations
from ..ops.add import ElementWiseAdd
from ..ops.add1 import ElementWiseAdd1
from . import one_step, rules
from .compiling import at_least_1d, delivered, run, supported_dtypes, target
from .rules import broadcast_shape

__all__ = ["add"]

ADD_DATA = supported_dtypes(ElementWiseAdd1, "a")


def add(a: ArrayLike, b: ArrayLike, *, fused_activation: _activations.Activation | str | None = None,
        out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``fused_activation(a + b)`` for float32 or float16 arrays of one dtype.

    float64 arrays convert to float32; Python numbers take the other operand's float dtype, else
    float32. ``fused_activation`` is None, a name (``"relu"``, ``"leaky_relu"``...) or an object of
    :mod:`dmlq.activations`. ``out`` may be ``a`` or ``b`` itself (in-place). The rules of each
    argument: :mod:`dmlq.numpy_api.rules`.

    >>> add([1.0, -3.0], [1.0, 1.0], fused_activation="relu")
    array([2., 0.], dtype=float32)
    """
    # the common call, checked and run in one C step, or None; None is tested first, as isinstance
    # against an ABC would cost the plain call ~85 ns
    relu = fused_activation is not None and (
        fused_activation == "relu" or isinstance(fused_activation, _activations.Relu)
    )
    if fused_activation is None or relu:
        result = one_step.add(a, b, relu, out)
        if result is not None:
            return result
    a, b = float_operands(a, b)
    activation = _activations.from_spec(fused_activation)
    written = target(out, broadcast_shape(a=a, b=b), a.dtype)
    if written.size:
        operands = {"a": a, "b": b}
        if activation is None:
            run(ElementWiseAdd, operands, at_least_1d(written))
        else:
            run(ElementWiseAdd1, operands, at_least_1d(written), fused_activation=activation)
    return delivered(written, out)


def float_operands(a: object, b: object) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b`` as arrays of one of ``add``'s dtypes: Python numbers take the other operand's
    float dtype when it has one, else float32; two dtypes are refused (DirectML has no mixed add).

    >>> float_operands([1.0], np.float16(2))
    (array([1.], dtype=float16), array(2., dtype=float16))
    """
    arrays = rules.float_operands({"a": a, "b": b}, ADD_DATA, "DirectML has no mixed-type add")
    a_array, b_array = arrays["a"], arrays["b"]
    assert a_array is not None and b_array is not None  # neither was None
    return a_array, b_array


def python_float_dtype(other: object) -> np.dtype:
    """The dtype Python numbers take beside ``other``: its float dtype when it has one, else float32."""
    return rules.python_float_dtype([other], ADD_DATA)
