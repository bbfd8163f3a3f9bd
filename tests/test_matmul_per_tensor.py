"""The matrix multiply's one-step call (``_core.matmul_per_tensor``, which the NumPy layer tries first)
takes the common calls whole and gives the reference's bits; every other call it declines (None), and
the layer's general path converts it or refuses it as before."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import dmlq
from dmlq import DmlError, _core, reference
from dmlq.kernels import matrix_b

LEVELS = _core.LEVELS[: _core.LEVELS.index(_core.detected_level()) + 1]
SHAPES = [(1, 37, 19), (5, 64, 33), (17, 300, 8)]


@pytest.fixture(params=LEVELS)
def level(request: pytest.FixtureRequest):
    _core.set_level(request.param)
    yield request.param
    _core.set_level(_core.detected_level())


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


def _common(out_dtype: type) -> Callable:
    def register(make: Callable) -> Callable:
        COMMON[make.__doc__] = (make, out_dtype)
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
        "int64 zero point": (a, 0.02, np.int64(128), *common[2:]),
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
    "a zero per-column scale": (A, 0.5, 0, B, np.float32([0.5, 0.0]), 0, 0.5, 0),
    "K mismatch": (A, 0.5, 0, B[:3], 0.5, 0, 0.5, 0),
}


@pytest.mark.parametrize("call", INVALID)
def test_invalid_calls_are_declined_and_refused_by_the_general_path(call: str) -> None:
    arguments = INVALID[call]
    assert _one_step(*arguments) is None
    with pytest.raises(DmlError):
        dmlq.quantized_linear_matrix_multiply(*arguments)
