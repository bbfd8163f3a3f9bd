"""The per-call fast paths (per-tensor parameters, the compiled-operator cache key) change no result
and no error: every way of passing a per-tensor scale or zero point gives the same bits, or the same
DmlError."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import dmlq
from dmlq import DmlError, _core, activations
from dmlq.numpy_api.compiling import layout_key
from dmlq.ops import ElementWiseAdd

X = np.linspace(-3.0, 3.0, 16, dtype=np.float32)
Q8 = np.arange(0, 256, 16, dtype=np.uint8)
A = np.arange(16, dtype=np.uint8).reshape(4, 4)
B = (np.arange(16, dtype=np.int8) - 8).reshape(4, 4)

SCALE_FORMS: dict[str, Callable[[float], object]] = {
    "python float": float,
    "0-d float32": lambda v: np.array(v, np.float32),
    "float32 scalar": np.float32,
    "(1,) float32": lambda v: np.array([v], np.float32),
    "0-d float64": lambda v: np.array(v, np.float64),
    "list": lambda v: [v],
}
ZERO_POINT_FORMS: dict[str, Callable[[int], object]] = {
    "python int": int,
    "0-d uint8": lambda v: np.array(v, np.uint8),
    "uint8 scalar": np.uint8,
    "(1,) uint8": lambda v: np.array([v], np.uint8),
    "list": lambda v: [v],
}

# Each function with its per-tensor parameters as (scale, zero point) in one form.
CALLS: dict[str, Callable[[object, object], np.ndarray]] = {
    "quantize_linear": lambda s, z: dmlq.quantize_linear(X, s, z),
    "dequantize_linear": lambda s, z: dmlq.dequantize_linear(Q8, s, z),
    "quantized_linear_add": lambda s, z: dmlq.quantized_linear_add(Q8, s, z, Q8[::-1], s, z, s, z),
    "quantized_linear_matrix_multiply": lambda s, z: dmlq.quantized_linear_matrix_multiply(
        A, s, z, B, s, None, s, z
    ),
}


def _outcome(call: Callable[..., np.ndarray], *args: object) -> tuple[str, object]:
    try:
        result = call(*args)
    except DmlError as error:
        return "error", str(error)
    return "result", (result.dtype, result.shape, result.tobytes())


@pytest.mark.parametrize("function", CALLS)
@pytest.mark.parametrize(("scale", "zero_point"), [(0.05, 128), (0.3, 3), (1e-3, 255)])
def test_every_per_tensor_form_gives_the_same_bits(function: str, scale: float, zero_point: int) -> None:
    call = CALLS[function]
    expected = _outcome(call, np.float32(scale), np.uint8(zero_point))
    assert expected[0] == "result"
    for scale_form in SCALE_FORMS.values():
        for zero_point_form in ZERO_POINT_FORMS.values():
            assert _outcome(call, scale_form(scale), zero_point_form(zero_point)) == expected


@pytest.mark.parametrize("function", CALLS)
@pytest.mark.parametrize("scale", [0.0, float("nan"), float("inf"), -float("inf")])
def test_every_per_tensor_form_gives_the_same_scale_error(function: str, scale: float) -> None:
    outcomes = {_outcome(CALLS[function], form(scale), 0) for form in SCALE_FORMS.values()}
    assert len(outcomes) == 1 and outcomes.pop()[0] == "error"


@pytest.mark.parametrize("function", CALLS)
@pytest.mark.parametrize("zero_point", [-1, 256])
def test_every_per_tensor_form_gives_the_same_zero_point_error(function: str, zero_point: int) -> None:
    forms = [int, lambda v: [v]]
    outcomes = {_outcome(CALLS[function], 0.5, form(zero_point)) for form in forms}
    assert len(outcomes) == 1 and outcomes.pop()[0] == "error"


def test_float16_and_scale_of_another_float_type_keep_their_rules() -> None:
    half = X.astype(np.float16)
    assert dmlq.quantize_linear(half, np.float16(0.5)).tobytes() == dmlq.quantize_linear(half, 0.5).tobytes()
    assert dmlq.dequantize_linear(Q8, np.float16(0.5)).dtype == np.float16
    with pytest.raises(DmlError, match="scale: dtype int32 is not a float type"):
        dmlq.quantize_linear(X, np.int32(1))


@pytest.mark.parametrize(
    "arrays",
    [
        [np.zeros(16, np.uint8), None, np.zeros((), np.float32)],
        [np.zeros((2, 3), np.float16), np.zeros((1, 1), np.int8), np.zeros((3, 0), np.int32)],
        [np.zeros((4, 4), np.uint8)[:, ::2], np.zeros(3, np.float32)],  # a strided output
    ],
)
def test_the_compiled_key_built_in_c_equals_the_python_one(arrays: list) -> None:
    out, *operands = arrays
    assert _core.layout_key(ElementWiseAdd, out, *operands) == layout_key(ElementWiseAdd, out, operands)


def test_the_compiled_key_is_left_to_python_for_strided_or_byte_swapped_operands() -> None:
    out = np.zeros(2, np.uint8)
    assert _core.layout_key(ElementWiseAdd, out, np.zeros(4, np.uint8)[::2]) is None
    assert _core.layout_key(ElementWiseAdd, out, np.zeros(2, ">f4")) is None


def test_equal_activations_of_different_bits_keep_their_own_parameters() -> None:
    x = np.float32([-2.0, 3.0])
    zero = np.float32([0.0, 0.0])
    for alpha in (0.0, -0.0, 0.0, 0.5):
        result = dmlq.add(x, zero, fused_activation=activations.LeakyRelu(alpha=alpha))
        expected = activations.LeakyRelu(alpha=alpha).apply(x)
        assert result.tobytes() == np.asarray(expected, np.float32).tobytes(), alpha
