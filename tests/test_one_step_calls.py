"""The one-step calls the NumPy layer tries first (``_core.matmul_per_tensor`` for the matrix multiply,
``_core.quantized_add_per_tensor`` for the quantized add, ``_core.quantize_per_tensor`` and
``_core.dequantize_per_tensor``, ``_core.add_same_shape`` for the float add) take the common calls
whole and give the reference's bits; every other call they decline (None), and the layer's general
path converts it or refuses it as before."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import dmlq
from dmlq import DmlError, _core, reference
from dmlq.kernels import matrix_b

SHAPES = [(1, 37, 19), (5, 64, 33), (17, 300, 8)]


def _bytes(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _reference(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
               out_dtype) -> np.ndarray:  # fmt: skip
    """The reference's result for per-tensor parameters given in any form (B's may be per-column)."""

    def scale(value: object) -> np.ndarray:
        return np.asarray(value, np.float64).astype(np.float32).reshape(1, -1)

    def zero_point(value: object, dtype: np.dtype) -> np.ndarray | None:
        return None if value is None else np.asarray(value).astype(dtype).reshape(1, -1)

    b_values = b.packed_b.array if isinstance(b, dmlq.PackedMatrix) else b
    if isinstance(b, dmlq.PackedMatrix):
        b_scale, b_zero_point = b.b_scale, b.b_zero_point
    return reference.quantized_linear_matrix_multiply(
        a, scale(a_scale), zero_point(a_zero_point, a.dtype), b_values, scale(b_scale),
        zero_point(b_zero_point, b_values.dtype), scale(output_scale),
        zero_point(output_zero_point, out_dtype), out_dtype,
    )  # fmt: skip


def _one_step(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
              out=None) -> np.ndarray | None:  # fmt: skip
    """What the layer's first step does with a call: its result, or None."""
    if isinstance(b, dmlq.PackedMatrix):  # as the layer passes it: the packing, and its own parameters
        b, b_scale, b_zero_point = matrix_b(b.packed_b), b.b_scale, b.b_zero_point
    return _core.matmul_per_tensor(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                                   output_zero_point, out, False)  # fmt: skip


# Common calls: (a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point) from
# a random A (M x K, uint8), B (K x N, int8) and a generator, with the output dtype they give.
COMMON: dict[str, tuple[Callable[[np.ndarray, np.ndarray, np.random.Generator], tuple], type]] = {}


def _common(out_dtype: type, registry: dict = COMMON) -> Callable:
    """Registers a common call's maker under its docstring, with the output dtype it gives."""

    def register(make: Callable) -> Callable:
        registry[make.__doc__] = (make, out_dtype)
        return make

    return register


@_common(np.uint8)
def _python_numbers(a, b, r):
    """python numbers"""
    return a, 0.02, 128, b, 0.003, 0, 0.05, 128


@_common(np.int8)
def _numpy_scalars(a, b, r):
    """numpy scalars, int8 A and output"""
    f, i = np.float32, np.int8
    return a.view(np.int8), f(0.02), i(-3), b, f(0.003), i(2), f(0.5), i(-7)


@_common(np.uint8)
def _one_element_arrays(a, b, r):
    """uint8 B, 0-d and one-element arrays, float64 ones too"""
    a_zero_point, b_zero_point = np.array([[7]], np.uint8), np.array(128, np.uint8)
    b = b.view(np.uint8)
    return a, np.array(0.02), a_zero_point, b, np.array([0.003]), b_zero_point, np.float32([[0.4]]), None


@_common(np.int8)
def _output_dtype_from_its_zero_point(a, b, r):
    """output zero point of another dtype than A"""
    return a, 0.02, None, b, 0.004, None, 0.25, np.int8(5)


@_common(np.uint8)
def _per_column_b(a, b, r):
    """per-column B (N,) and (1, N)"""
    n = b.shape[1]
    return a, 0.02, 3, b, r.uniform(0.001, 0.01, n).astype(np.float32), _bytes(r, (1, n), np.int8), 0.3, 100


@_common(np.uint8)
def _strided(a, b, r):
    """strided A and B (a column slice, a transpose)"""
    return np.repeat(a, 2, axis=1)[:, ::2], 0.02, 5, np.ascontiguousarray(b.T).T, 0.01, -4, 0.7, 9


@_common(np.uint8)
def _packed_per_tensor(a, b, r):
    """packed per-tensor"""
    return a, 0.02, 128, dmlq.pack_matrix_multiply_b(b, 0.003, -1), None, None, 0.05, 128


@_common(np.uint8)
def _packed_per_column(a, b, r):
    """packed per-column"""
    n = b.shape[1]
    scale = r.uniform(0.001, 0.01, (1, n)).astype(np.float32)
    return a, 0.02, 128, dmlq.pack_matrix_multiply_b(b, scale, _bytes(r, n, np.int8)), None, None, 0.05, 128


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("call", COMMON)
def test_common_calls_take_one_step_and_give_the_reference_bits(level, call: str, shape, rng) -> None:
    m, k, n = shape
    make, out_dtype = COMMON[call]
    arguments = make(_bytes(rng, (m, k), np.uint8), _bytes(rng, (k, n), np.int8), rng)
    expected = _reference(*arguments, out_dtype)
    one_step = _one_step(*arguments)
    assert one_step is not None and one_step.dtype == out_dtype
    assert one_step.tobytes() == expected.tobytes()
    general = dmlq.quantized_linear_matrix_multiply(*arguments, dtype=out_dtype)  # dtype=: the general path
    assert general.tobytes() == expected.tobytes()
    assert dmlq.quantized_linear_matrix_multiply(*arguments).tobytes() == expected.tobytes()


def test_a_given_output_is_written_in_place_even_strided(rng: np.random.Generator) -> None:
    a, b = _bytes(rng, (6, 40), np.uint8), _bytes(rng, (40, 10), np.int8)
    arguments = (a, 0.02, 128, b, 0.003, 0, 0.05, 128)
    wide = np.zeros((6, 30), np.uint8)
    out = wide[:, ::3]
    assert _one_step(*arguments, out=out) is out
    assert out.tobytes() == _reference(*arguments, np.uint8).tobytes()
    assert not wide[:, 1::3].any() and not wide[:, 2::3].any()
    fresh = np.empty((6, 10), np.uint8)
    assert dmlq.quantized_linear_matrix_multiply(*arguments, out=fresh) is fresh
    assert fresh.tobytes() == out.tobytes()


def _declined() -> dict[str, tuple]:
    """Calls the one step leaves to the general path, each still valid there."""
    r = np.random.default_rng(7)
    a, b = _bytes(r, (4, 6), np.uint8), _bytes(r, (6, 5), np.int8)
    common = (0.02, 128, b, 0.003, 0, 0.05, 128)
    return {
        "per-row A scale": (a, r.uniform(0.01, 0.02, (4, 1)).astype(np.float32), *common[1:]),
        "3-D A": (a[None], *common),
        "list A": (a.tolist(), *common),
        "A with negative strides": (a[::-1], *common),
        "float16 scale": (a, np.float16(0.02), *common[1:]),
        "(1, 1, N) B scale (a batch)": (a, 0.02, 128, b, np.full((1, 1, 5), 0.003, np.float32), *common[4:]),
        "float64 per-column B scale": (a, 0.02, 128, b, np.full(5, 0.003), *common[4:]),
        "packed 3-D B": (a, 0.02, 128, dmlq.pack_matrix_multiply_b(b[None], 0.003), None, None, 0.05, 128),
        "K = 0": (a[:, :0], 0.02, 128, b[:0], *common[3:]),
    }


@pytest.mark.parametrize("call", _declined())
def test_other_calls_are_left_to_the_general_path(call: str) -> None:
    arguments = _declined()[call]
    assert _one_step(*arguments) is None
    result = dmlq.quantized_linear_matrix_multiply(*arguments)
    general = dmlq.quantized_linear_matrix_multiply(*arguments, dtype=result.dtype)
    assert result.shape == general.shape and result.tobytes() == general.tobytes()


def test_an_output_overlapping_an_input_is_left_to_the_general_path(rng: np.random.Generator) -> None:
    buffer = _bytes(rng, (4, 6), np.uint8)
    b = _bytes(rng, (6, 5), np.int8)
    expected = _reference(buffer.copy(), 0.02, 128, b, 0.003, 0, 0.05, 128, np.uint8)
    out = buffer[:, :5]
    assert _one_step(buffer, 0.02, 128, b, 0.003, 0, 0.05, 128, out=out) is None
    assert dmlq.quantized_linear_matrix_multiply(buffer, 0.02, 128, b, 0.003, 0, 0.05, 128, out=out) is out
    assert out.tobytes() == expected.tobytes()


A, B = np.arange(12, dtype=np.uint8).reshape(3, 4), np.arange(8, dtype=np.int8).reshape(4, 2)
INVALID = {
    "NaN scale": (A, float("nan"), 0, B, 0.5, 0, 0.5, 0),
    "zero scale": (A, 0.5, 0, B, -0.0, 0, 0.5, 0),
    "infinite float32 scale": (A, 0.5, 0, B, 0.5, 0, np.float32("inf"), 0),
    "a scale that overflows float32": (A, 1e39, 0, B, 0.5, 0, 0.5, 0),
    "a scale that underflows to 0": (A, 1e-46, 0, B, 0.5, 0, 0.5, 0),
    "a boolean scale": (A, True, 0, B, 0.5, 0, 0.5, 0),
    "zero point above uint8": (A, 0.5, 256, B, 0.5, 0, 0.5, 0),
    "zero point below int8": (A, 0.5, 0, B, 0.5, -129, 0.5, 0),
    "a boolean zero point": (A, 0.5, True, B, 0.5, 0, 0.5, 0),
    "an int8 zero point for uint8 A": (A, 0.5, np.int8(1), B, 0.5, 0, 0.5, 0),
    "an int64 zero point": (A, 0.5, np.int64(1), B, 0.5, 0, 0.5, 0),
    "an int32 per-column zero point": (A, 0.5, 0, B, 0.5, np.int32([1, 2]), 0.5, 0),
    "a zero per-column scale": (A, 0.5, 0, B, np.float32([0.5, 0.0]), 0, 0.5, 0),
    "K mismatch": (A, 0.5, 0, B[:3], 0.5, 0, 0.5, 0),
}


@pytest.mark.parametrize("call", INVALID)
def test_invalid_calls_are_declined_and_refused_by_the_general_path(call: str) -> None:
    arguments = INVALID[call]
    assert _one_step(*arguments) is None
    with pytest.raises(DmlError):
        dmlq.quantized_linear_matrix_multiply(*arguments)


# ---- the quantized add ------------------------------------------------------------------------


def _add_one_step(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
                  out=None) -> np.ndarray | None:  # fmt: skip
    return _core.quantized_add_per_tensor(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                                          output_zero_point, out, False)  # fmt: skip


def _add_reference(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
                   out_dtype) -> np.ndarray:  # fmt: skip
    def scale(value: object) -> np.float32:
        return np.float32(np.asarray(value, np.float64).item())

    def zero_point(value: object, dtype: np.dtype) -> object:
        return None if value is None else np.asarray(value).astype(dtype).reshape(())

    a_parameters = scale(a_scale), zero_point(a_zero_point, a.dtype)
    b_parameters = scale(b_scale), zero_point(b_zero_point, b.dtype)
    output_parameters = scale(output_scale), zero_point(output_zero_point, out_dtype)
    return reference.quantized_linear_add(a, *a_parameters, b, *b_parameters, *output_parameters, out_dtype)


# Common quantized adds, from two random uint8 arrays of one shape.
ADD_COMMON: dict[str, tuple[Callable[[np.ndarray, np.ndarray], tuple], type]] = {}


@_common(np.uint8, ADD_COMMON)
def _add_python_numbers(a, b):
    """python numbers"""
    return a, 0.02, 128, b, 0.03, 3, 0.04, 128


@_common(np.int8, ADD_COMMON)
def _add_numpy_scalars(a, b):
    """numpy scalars, int8 A and output"""
    f = np.float32
    return a.view(np.int8), f(0.5), np.int8(-3), b, f(0.25), np.uint8(9), f(0.7), np.int8(-7)


@_common(np.uint8, ADD_COMMON)
def _add_small_arrays(a, b):
    """0-d and (1,) arrays, float64 ones too"""
    a_parameters = np.array(0.02), np.array([7], np.uint8)
    b_parameters = np.array([0.03]), np.array(1, np.int8)
    return a, *a_parameters, b.view(np.int8), *b_parameters, np.float32([0.05]), None


@_common(np.int8, ADD_COMMON)
def _add_output_dtype_from_its_zero_point(a, b):
    """output zero point of another dtype than A"""
    return a, 0.1, None, b, 0.2, None, 0.3, np.int8(5)


@_common(np.uint8, ADD_COMMON)
def _add_strided(a, b):
    """strided A and B"""
    return np.repeat(a, 2, axis=-1)[..., ::2], 0.02, 5, b.T.copy().T, 0.01, 4, 0.03, 9


@pytest.mark.parametrize("shape", [(16,), (3, 5), (2, 3, 70)])
@pytest.mark.parametrize("call", ADD_COMMON)
def test_common_quantized_adds_take_one_step_and_give_reference_bits(level, call: str, shape, rng) -> None:
    make, out_dtype = ADD_COMMON[call]
    arguments = make(_bytes(rng, shape, np.uint8), _bytes(rng, shape, np.uint8))
    expected = _add_reference(*arguments, out_dtype)
    one_step = _add_one_step(*arguments)
    assert one_step is not None and one_step.dtype == out_dtype
    assert one_step.tobytes() == expected.tobytes()
    general = dmlq.quantized_linear_add(*arguments, dtype=out_dtype)  # dtype=: the general path
    assert general.tobytes() == expected.tobytes()
    assert dmlq.quantized_linear_add(*arguments).tobytes() == expected.tobytes()


def test_a_quantized_add_in_place_or_into_a_strided_output(rng: np.random.Generator) -> None:
    a, b = _bytes(rng, (4, 8), np.uint8), _bytes(rng, (4, 8), np.uint8)
    arguments = (a, 0.02, 128, b, 0.03, 0, 0.05, 128)
    expected = _add_reference(*arguments, np.uint8)
    wide = np.zeros((4, 16), np.uint8)
    assert _add_one_step(*arguments, out=wide[:, ::2]) is not None
    assert wide[:, ::2].tobytes() == expected.tobytes() and not wide[:, 1::2].any()
    assert _add_one_step(*arguments, out=a) is a
    assert a.tobytes() == expected.tobytes()


def _add_declined() -> dict[str, tuple]:
    r = np.random.default_rng(11)
    a, b = _bytes(r, (4, 6), np.uint8), _bytes(r, (4, 6), np.uint8)
    common = (0.02, 128, b, 0.03, 0, 0.05, 128)
    return {
        "broadcast B": (a, 0.02, 128, b[0], *common[3:]),
        "0-d A and B": (a[0, 0], 0.02, 128, b[0, 0], *common[3:]),
        "a (1, 1, 1) scale (adds a dimension)": (a, np.ones((1, 1, 1), np.float32), *common[1:]),
        "list A": (a.tolist(), *common),
        "A with negative strides": (a[::-1], *common),
        "float16 scale": (a, np.float16(0.02), *common[1:]),
        "empty": (a[:0], 0.02, 128, b[:0], *common[3:]),
    }


@pytest.mark.parametrize("call", _add_declined())
def test_other_quantized_adds_are_left_to_the_general_path(call: str) -> None:
    arguments = _add_declined()[call]
    assert _add_one_step(*arguments) is None
    result = dmlq.quantized_linear_add(*arguments)
    general = dmlq.quantized_linear_add(*arguments, dtype=result.dtype)
    assert result.shape == general.shape and result.tobytes() == general.tobytes()


def test_a_quantized_add_into_an_output_partly_over_an_input_is_left_to_the_general_path(rng) -> None:
    buffer = _bytes(rng, 17, np.uint8)
    a, b, out = buffer[:16], _bytes(rng, 16, np.uint8), buffer[1:]
    expected = _add_reference(a.copy(), 0.02, 128, b, 0.03, 0, 0.05, 128, np.uint8)
    assert _add_one_step(a, 0.02, 128, b, 0.03, 0, 0.05, 128, out=out) is None
    assert dmlq.quantized_linear_add(a, 0.02, 128, b, 0.03, 0, 0.05, 128, out=out) is out
    assert out.tobytes() == expected.tobytes()


V = np.arange(6, dtype=np.uint8)
ADD_INVALID = {
    "NaN scale": (V, float("nan"), 0, V, 0.5, 0, 0.5, 0),
    "zero output scale": (V, 0.5, 0, V, 0.5, 0, 0.0, 0),
    "a scale that overflows float32": (V, 0.5, 0, V, 1e39, 0, 0.5, 0),
    "a boolean zero point": (V, 0.5, True, V, 0.5, 0, 0.5, 0),
    "zero point above uint8": (V, 0.5, 0, V, 0.5, 256, 0.5, 0),
    "an int8 zero point for uint8 B": (V, 0.5, 0, V, 0.5, np.int8(1), 0.5, 0),
    "an int64 zero point": (V, 0.5, np.int64(1), V, 0.5, 0, 0.5, 0),
    "a per-element zero point": (V, 0.5, np.zeros(6, np.uint8), V, 0.5, 0, 0.5, 0),
    "shapes that do not broadcast": (V, 0.5, 0, V[:4], 0.5, 0, 0.5, 0),
}


@pytest.mark.parametrize("call", ADD_INVALID)
def test_invalid_quantized_adds_are_declined_and_refused_by_the_general_path(call: str) -> None:
    arguments = ADD_INVALID[call]
    assert _add_one_step(*arguments) is None
    with pytest.raises(DmlError):
        dmlq.quantized_linear_add(*arguments)


# ---- quantize and dequantize ----------------------------------------------------------------------


def _quantize_reference(x, scale, zero_point, out_dtype) -> np.ndarray:
    zero = None if zero_point is None else np.asarray(zero_point).astype(out_dtype).reshape(())
    return reference.quantize_linear(x, np.float32(np.asarray(scale, np.float64).item()), zero, out_dtype)


def _dequantize_reference(q, scale, zero_point) -> np.ndarray:
    zero = None if zero_point is None else np.asarray(zero_point).astype(q.dtype).reshape(())
    return reference.dequantize_linear(q, np.float32(np.asarray(scale, np.float64).item()), zero, np.float32)


QUANTIZE_COMMON = {  # (x dtype, scale, zero point, output dtype)
    "float32 x, python numbers": (np.float32, 0.05, 128, np.uint8),
    "int32 x, numpy scalars, int8": (np.int32, np.float32(3.5), np.int8(-4), np.int8),
    "0-d and (1,) arrays, no zero point": (np.float32, np.array([0.25]), None, np.uint8),
    "float64 scale array": (np.float32, np.array(0.1), np.array(200, np.uint8), np.uint8),
}


@pytest.mark.parametrize("shape", [(16,), (3, 5), (2, 3, 70)])
@pytest.mark.parametrize("call", QUANTIZE_COMMON)
def test_common_quantizes_take_one_step_and_give_reference_bits(level, call: str, shape, rng) -> None:
    x_dtype, scale, zero_point, out_dtype = QUANTIZE_COMMON[call]
    x = (rng.standard_normal(shape) * 40).astype(x_dtype)
    if x_dtype is np.float32:
        x.flat[:4] = [np.nan, np.inf, -np.inf, 0.5]
    expected = _quantize_reference(x, scale, zero_point, out_dtype)
    one_step = _core.quantize_per_tensor(x, scale, zero_point, None, False)
    assert one_step is not None and one_step.tobytes() == expected.tobytes()
    assert dmlq.quantize_linear(x, scale, zero_point, dtype=out_dtype).tobytes() == expected.tobytes()


DEQUANTIZE_COMMON = {  # (q dtype, scale, zero point)
    "uint8 q, python numbers": (np.uint8, 0.05, 128),
    "int8 q, numpy scalars": (np.int8, np.float32(3.5), np.int8(-4)),
    "(1,) arrays, float64 scale": (np.uint8, np.array([0.25]), np.array([7], np.uint8)),
    "no zero point": (np.int8, 0.5, None),
}


@pytest.mark.parametrize("shape", [(16,), (3, 5), (2, 3, 70)])
@pytest.mark.parametrize("call", DEQUANTIZE_COMMON)
def test_common_dequantizes_take_one_step_and_give_reference_bits(level, call: str, shape, rng) -> None:
    q_dtype, scale, zero_point = DEQUANTIZE_COMMON[call]
    q = _bytes(rng, shape, q_dtype)
    expected = _dequantize_reference(q, scale, zero_point)
    one_step = _core.dequantize_per_tensor(q, scale, zero_point, None)
    assert one_step is not None and one_step.dtype == np.float32
    assert one_step.tobytes() == expected.tobytes()
    general = dmlq.dequantize_linear(q, [np.asarray(scale).item()], zero_point)  # a list: the general path
    assert general.tobytes() == expected.tobytes()


def test_quantize_and_dequantize_write_a_given_output(rng: np.random.Generator) -> None:
    x = rng.standard_normal((4, 6)).astype(np.float32)
    wide = np.zeros((4, 12), np.uint8)
    assert _core.quantize_per_tensor(x, 0.1, 128, wide[:, ::2], False) is not None
    assert wide[:, ::2].tobytes() == _quantize_reference(x, 0.1, 128, np.uint8).tobytes()
    out = np.empty((4, 6), np.float32)
    assert dmlq.dequantize_linear(wide[:, ::2], 0.1, 128, out=out) is out
    assert out.tobytes() == _dequantize_reference(wide[:, ::2], 0.1, 128).tobytes()


def _element_wise_declined() -> dict[str, tuple[Callable, tuple]]:
    """Calls of quantize_per_tensor / dequantize_per_tensor the one step leaves to the general path."""
    x, q = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4), np.arange(12, dtype=np.uint8).reshape(3, 4)
    quantize, dequantize = _core.quantize_per_tensor, _core.dequantize_per_tensor
    return {
        "float16 x": (quantize, (x.astype(np.float16), 0.1, 128, None, False)),
        "float64 x": (quantize, (x.astype(np.float64), 0.1, 128, None, False)),
        "0-d x": (quantize, (x[0, 0], 0.1, 128, None, False)),
        "9-D x": (quantize, (x.reshape(3, 4, *[1] * 7), 0.1, 128, None, False)),
        "per-row scale": (quantize, (x, np.full((3, 1), 0.1, np.float32), 128, None, False)),
        "(1, 1, 1) scale": (quantize, (x, np.ones((1, 1, 1), np.float32), 128, None, False)),
        "int16 q": (dequantize, (q.astype(np.int16), 0.1, 3, None)),
        "float16 scale": (dequantize, (q, np.float16(0.1), 3, None)),
        "byte-swapped output": (dequantize, (q, 0.1, 3, np.empty((3, 4), ">f4"))),
        "output of another dtype": (dequantize, (q, 0.1, 3, np.empty((3, 4), np.float16))),
        "list q": (dequantize, (q.tolist(), 0.1, 3, None)),
    }


@pytest.mark.parametrize("call", _element_wise_declined())
def test_other_quantizes_and_dequantizes_are_left_to_the_general_path(call: str) -> None:
    function, arguments = _element_wise_declined()[call]
    assert function(*arguments) is None


@pytest.mark.parametrize(
    ("function", "arguments"),
    [
        (dmlq.quantize_linear, (np.float32([1.0]), 0.0, 0)),
        (dmlq.quantize_linear, (np.float32([1.0]), 1e39, 0)),
        (dmlq.quantize_linear, (np.float32([1.0]), 1.0, 256)),
        (dmlq.quantize_linear, (np.float32([1.0]), 1.0, True)),
        (dmlq.dequantize_linear, (np.uint8([1]), float("inf"), 0)),
        (dmlq.dequantize_linear, (np.uint8([1]), 1.0, np.int8(0))),
        (dmlq.dequantize_linear, (np.int8([1]), 1.0, 128)),
    ],
)
def test_invalid_quantizes_and_dequantizes_are_declined_and_refused(function, arguments) -> None:
    one_step = _core.quantize_per_tensor if function is dmlq.quantize_linear else _core.dequantize_per_tensor
    extra = (None, False) if function is dmlq.quantize_linear else (None,)
    assert one_step(*arguments, *extra) is None
    with pytest.raises(DmlError):
        function(*arguments)


# ---- the float add ------------------------------------------------------------------------------------


def _float_operands(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: type
) -> tuple[np.ndarray, np.ndarray]:
    """Two random float arrays whose first elements are the cases an add must keep: NaNs of two
    payloads (a's must survive), infinities of both signs, -0 + -0, and sums that relu turns to 0."""
    a, b = ((rng.standard_normal(shape) * 3).astype(dtype) for _ in range(2))
    nan_a, nan_b = np.float32(np.nan), -np.float32(np.nan)  # two NaNs with different sign bits
    special = [
        (nan_a, 1.0),
        (1.0, nan_b),
        (nan_a, nan_b),
        (np.inf, -np.inf),
        (np.inf, 1.0),
        (-0.0, -0.0),
        (-2.0, 1.0),
    ]
    for index, (x, y) in enumerate(special[: a.size]):
        a.flat[index], b.flat[index] = x, y
    return a, b


def _float_add_reference(a, b, relu: bool) -> np.ndarray:
    return reference.add(a, b, a.dtype, dmlq.activations.Relu() if relu else None)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # inf + -inf in the reference
@pytest.mark.parametrize(
    "activation", [None, "relu", dmlq.activations.Relu()], ids=["none", "'relu'", "Relu()"]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(16,), (3, 5), (2, 3, 70)])
def test_common_float_adds_take_one_step_and_give_reference_bits(
    level, shape, dtype, activation, rng
) -> None:
    a, b = _float_operands(rng, shape, dtype)
    relu = activation is not None
    expected = _float_add_reference(a, b, relu)
    one_step = _core.add_same_shape(a, b, relu, None)
    assert one_step is not None and one_step.dtype == dtype
    assert one_step.tobytes() == expected.tobytes()
    assert dmlq.add(a, b, fused_activation=activation).tobytes() == expected.tobytes()
    reversed_ = dmlq.add(a[::-1], b[::-1], fused_activation=activation)  # negative strides: the general path
    assert reversed_.tobytes() == expected[::-1].tobytes()


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_a_float_add_in_place_or_into_a_strided_output(rng: np.random.Generator) -> None:
    a, b = _float_operands(rng, (4, 8), np.float32)
    expected = _float_add_reference(a, b, True)
    wide = np.zeros((4, 16), np.float32)
    assert _core.add_same_shape(a, b, True, wide[:, ::2]) is not None
    assert wide[:, ::2].tobytes() == expected.tobytes() and not wide[:, 1::2].any()
    assert dmlq.add(a, b, fused_activation="relu", out=b) is b
    assert b.tobytes() == expected.tobytes()


def _float_add_declined() -> dict[str, tuple]:
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    return {
        "broadcast b": (x, x[0], False, None),
        "mixed float32 and float16": (x, x.astype(np.float16), False, None),
        "float64": (x.astype(np.float64), x.astype(np.float64), False, None),
        "0-d operands": (x[0, 0], x[1, 1], False, None),
        "list a": (x.tolist(), x, False, None),
        "a with negative strides": (x[::-1], x, False, None),
        "byte-swapped b": (x, x.astype(">f4"), False, None),
        "empty": (x[:0], x[:0], False, None),
        "an output of another dtype": (x, x, False, np.empty((3, 4), np.float16)),
    }


@pytest.mark.parametrize("call", _float_add_declined())
def test_other_float_adds_are_left_to_the_general_path(call: str) -> None:
    arguments = _float_add_declined()[call]
    assert _core.add_same_shape(*arguments) is None


def test_an_output_partly_over_an_input_gives_the_general_paths_result(rng: np.random.Generator) -> None:
    buffer = rng.standard_normal(17).astype(np.float32)
    a, b, out = buffer[:16], rng.standard_normal(16).astype(np.float32), buffer[1:]
    expected = _float_add_reference(a.copy(), b, False)
    assert _core.add_same_shape(a, b, False, out) is None
    assert dmlq.add(a, b, out=out) is out
    assert out.tobytes() == expected.tobytes()


@pytest.mark.parametrize(
    "arguments",
    [(np.float32([1.0]), np.float16([1.0])), (np.float32([1.0, 2.0]), np.float32([1.0, 2.0, 3.0])),
     (np.int32([1]), np.int32([1]))],
    ids=["mixed dtypes", "shapes that do not broadcast", "integers"],
)  # fmt: skip
def test_invalid_float_adds_are_declined_and_refused_by_the_general_path(arguments) -> None:
    assert _core.add_same_shape(*arguments, False, None) is None
    with pytest.raises(DmlError):
        dmlq.add(*arguments)
