"""Shared test helpers: an independent scalar model of DirectML's arithmetic and buffer plumbing.

The scalar helpers work on Python floats and ints only (no NumPy, no dmlq), so the formulas the
tests check dmlq against are written independently of ``dmlq.reference``:

* ``f32``/``f16`` round a Python float (a double) to the nearest float32/float16, halves to even.
  A double-precision +, -, *, / of two float32 (or float16) values followed by ``f32`` is the
  correctly rounded float32 result (double rounding is innocuous because 53 >= 2 * 24 + 2).
* ``round()`` on a Python float or ``Fraction`` rounds halves to even.

``LEVELS`` are the CPU levels this machine runs, and the ``level`` fixture runs a test at each. Every
test starts from a new process's state (``fresh_state``).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence

import numpy as np
import pytest

from dmlq import _core, numpy_api
from dmlq.kernels import available_levels

BYTE_RANGES = {"uint8": (0, 255), "int8": (-128, 127)}


def _rounded(value: float, fmt: str) -> float:
    try:
        return struct.unpack(fmt, struct.pack(fmt, value))[0]
    except OverflowError:  # rounds beyond the format's largest finite value
        return math.copysign(math.inf, value)


def f32(value: float) -> float:
    """``value`` rounded to the nearest float32 (as a Python float)."""
    return _rounded(value, "<f")


def f16(value: float) -> float:
    """``value`` rounded to the nearest float16 (as a Python float)."""
    return _rounded(value, "<e")


def saturate(value: float, dtype: str) -> int:
    """DirectML's last step as dmlq specifies it: NaN gives 0, else clamp to the 8-bit range."""
    low, high = BYTE_RANGES[dtype]
    if math.isnan(value):
        return 0
    return int(min(max(value, low), high))


def round_even(value: float) -> float:
    """Round half to even, keeping infinities and NaN."""
    return value if not math.isfinite(value) else float(round(value))


def quantize_scalar(x: float, scale: float, zero_point: int, dtype: str, *,
                    reciprocal: bool = False) -> int:  # fmt: skip
    """``clamp(round(x / scale) + zero_point)`` with the quotient rounded to float32 once.

    ``reciprocal`` models the GPU's ``x * float32(1 / scale)`` instead.
    """
    quotient = f32(x * f32(1.0 / scale)) if reciprocal else f32(x / scale)
    return saturate(round_even(quotient) + zero_point, dtype)


def ulp32(value: float) -> float:
    """The float32 spacing at ``value``."""
    value = abs(value)
    if value < 2.0**-126:
        return 2.0**-149
    return 2.0 ** (math.frexp(value)[1] - 24)


def wrap(value: int, bits: int, signed: bool) -> int:
    """Two's complement wrap-around of an integer to ``bits`` bits."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if signed and value >> (bits - 1) else value


# -- buffers through element strides ------------------------------------------------------


def exact_on_onnxruntime(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two factors of a product, the int8 one halved to [-64, 63] when the other is uint8 and this
    machine's onnxruntime adds such products in saturating int16 pairs (a CPU without VNNI,
    :mod:`dmlq.onnx.ort_int8`): 2 * 255 * 64 < 32767, so onnxruntime's sums are exact, as dmlq's are.
    Imports onnxruntime: for tests that compare against it."""
    from dmlq.onnx.ort_int8 import u8s8_saturates

    if {a.dtype, b.dtype} != {np.dtype(np.uint8), np.dtype(np.int8)} or not u8s8_saturates():
        return a, b
    return (a >> 1, b) if a.dtype == np.int8 else (a, b >> 1)


def element_offsets(sizes: Sequence[int], strides: Sequence[int]) -> list[int]:
    """Element offsets of every index in row-major order (computed by plain loops)."""
    offsets = [0]
    for size, stride in zip(sizes, strides):
        offsets = [base + i * stride for base in offsets for i in range(size)]
    return offsets


def packed_strides(sizes: Sequence[int]) -> list[int]:
    strides, step = [], 1
    for size in reversed(sizes):
        strides.insert(0, step)
        step *= size
    return strides


def strided_buffer(values: Iterable[object], sizes: Sequence[int], strides: Sequence[int] | None,
                   dtype: np.dtype | str, fill: object = 0) -> np.ndarray:  # fmt: skip
    """A flat buffer holding ``values`` (row-major over ``sizes``) at the strided offsets.

    Elements addressed more than once (zero strides) must carry equal values.
    """
    strides = packed_strides(sizes) if strides is None else strides
    offsets = element_offsets(sizes, strides)
    buffer = np.full(max(offsets) + 1, fill, dtype=dtype)
    for offset, value in zip(offsets, np.asarray(values, dtype=dtype).reshape(-1)):
        buffer[offset] = value
    return buffer


def read_strided(buffer: np.ndarray, sizes: Sequence[int], strides: Sequence[int] | None) -> list:
    """The elements of a strided tensor, row-major, as Python numbers."""
    strides = packed_strides(sizes) if strides is None else strides
    return [buffer[offset].item() for offset in element_offsets(sizes, strides)]


LEVELS = available_levels()
DEFAULT_THREADS = _core.get_num_threads()  # DMLQ_NUM_THREADS's, or the cores this process may use


def start_afresh() -> None:
    """The state a new process has: the detected kernel level, the default thread count, and no
    operator compiled by the NumPy layer."""
    _core.set_level(_core.detected_level())
    _core.set_num_threads(DEFAULT_THREADS)
    numpy_api.compiling.forget_compiled()


@pytest.fixture(autouse=True)
def fresh_state():
    """Each test starts, and leaves the next one (a doctest of README.md too), in a new process's
    state, so that no result depends on which tests ran before it (the suite runs in random order)."""
    start_afresh()
    yield
    start_afresh()


@pytest.fixture(params=LEVELS)
def level(request: pytest.FixtureRequest):
    """The test runs at each CPU level this machine has (``fresh_state`` restores the detected one)."""
    _core.set_level(request.param)
    return request.param


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240611)
