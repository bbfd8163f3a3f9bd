"""The compiled blockwise 4-bit kernels, bit for bit against the NumPy references, at every level.

Shapes cover odd column counts (rows starting mid-byte), blocks along either axis, one-element
blocks and enough rows for several threads; outputs are surrounded by guard nibbles.
"""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest

import dmlq
from dmlq import _core, kernels, pack_int4, reference, unpack_int4

INT4, UINT4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
SHAPES = [  # matrix shape, scale shape
    ((4, 64), (4, 2)), ((3, 7), (3, 1)), ((5, 33), (5, 1)), ((6, 16), (3, 16)), ((2, 5), (2, 5)),
    ((1, 1), (1, 1)), ((300, 257), (300, 1)), ((128, 384), (128, 3)), ((64, 256), (2, 8)),
    ((3, 48), (3, 2)),
]  # fmt: skip
# Scales whose products or quotients reach every edge: NaN, infinities, zeros of both signs, float16
# overflow and subnormals, and 1.0 and 0.5 that make exact ties of quarter-step inputs.
ADVERSARIAL_SCALES = [np.nan, np.inf, -np.inf, 0.0, -0.0, 65504.0, 1e-7, 6e-5, 1.0, 0.5, -0.25, 3.0e38]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(params=[1, 2])
def threads(request):
    previous = dmlq.get_num_threads()
    dmlq.set_num_threads(request.param)
    yield request.param
    dmlq.set_num_threads(previous)


def random_operands(seed: int, shape, blocks, dtype, float_type):
    rng = np.random.default_rng(seed)
    info = ml_dtypes.iinfo(dtype)
    q = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    scale = rng.choice([0.5, 0.1, 3.0, 1e-3, 7.25, -2.0, 65000.0], blocks).astype(float_type)
    zero_point = rng.integers(info.min, info.max + 1, blocks).astype(dtype)
    return q, scale, zero_point


@pytest.mark.parametrize(
    ("case", "dtype", "float_type", "with_zero_point"),
    list(itertools.product(SHAPES, (INT4, UINT4), (np.float32, np.float16), (False, True))),
)
def test_dequantize_is_bit_identical(level, threads, case, dtype, float_type, with_zero_point) -> None:
    shape, blocks = case
    q, scale, zero_point = random_operands(sum(shape), shape, blocks, dtype, float_type)
    zero_point = zero_point if with_zero_point else None
    out = np.full(shape, np.nan, float_type)
    assert kernels.dequantize_packed(pack_int4(q), dtype, scale, zero_point, out)
    expected = reference.dequantize(q, scale, zero_point, float_type)
    assert out.tobytes() == expected.tobytes()


@pytest.mark.parametrize(
    ("case", "dtype", "float_type", "with_zero_point", "reciprocal"),
    [(case, dtype, float_type, zp, False) for case, dtype, float_type, zp in
     itertools.product(SHAPES, (INT4, UINT4), (np.float32, np.float16), (False, True))]
    + [(SHAPES[0], INT4, np.float32, True, True), (SHAPES[2], UINT4, np.float16, False, True)],
)  # fmt: skip
def test_quantize_is_bit_identical_and_keeps_other_nibbles(
    level, threads, case, dtype, float_type, with_zero_point, reciprocal
) -> None:
    shape, blocks = case
    rng = np.random.default_rng(sum(shape))
    _, scale, zero_point = random_operands(sum(shape) + 1, shape, blocks, dtype, np.float32)
    scale = np.abs(scale).astype(float_type)
    zero_point = zero_point if with_zero_point else None
    x = (rng.integers(-200, 201, shape) * 0.25).astype(float_type)
    x.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, 0.5][: x.size]
    count = x.size
    guards = np.frombuffer(rng.bytes((count + 1) // 2 + 8), np.uint8).copy()
    packed, before = guards[:-8], guards.copy()
    assert kernels.quantize_packed(x, scale, zero_point, packed, dtype, reciprocal)
    expected = reference.quantize(x, scale, zero_point, dtype, reciprocal_division=reciprocal)
    np.testing.assert_array_equal(unpack_int4(packed, shape, dtype).astype(int), expected.astype(int))
    assert np.array_equal(guards[-8:], before[-8:])
    if count % 2:
        assert packed[-1] >> 4 == before[count // 2] >> 4  # the unused high nibble of the last byte


def test_blocks_merge_over_leading_dimensions() -> None:
    assert kernels._as_matrix((2, 3, 8), (2, 3, 2)) == (6, 8, 6, 2)
    assert kernels._as_matrix((2, 6, 8), (2, 3, 1)) == (12, 8, 6, 1)
    assert kernels._as_matrix((4, 6, 8), (2, 1, 4)) == (24, 8, 2, 4)
    assert kernels._as_matrix((4, 6, 8), (1, 6, 4)) is None  # blocks along 6 repeat for every index of 4
    assert kernels._as_matrix((9,), (3,)) == (1, 9, 1, 3)


def test_kernel_declines_what_it_cannot_take() -> None:
    q = np.zeros(8, ml_dtypes.int4)
    out = np.zeros((2, 8), np.float32)[:, ::2]  # not contiguous
    assert not kernels.dequantize_packed(pack_int4(q), INT4, np.float32([[1.0]]), None, out)
    with pytest.raises(ValueError, match="the scale's shape must divide"):
        _core.dequantize_int4(
            pack_int4(q), np.float32([[1.0, 2.0, 3.0]]), None, np.zeros((1, 8), np.float32), True
        )
    with pytest.raises(ValueError, match="packed holds fewer nibbles"):
        _core.dequantize_int4(
            np.zeros(2, np.uint8), np.float32([[1.0]]), None, np.zeros((1, 8), np.float32), True
        )


# [rows, cols] and block columns: blocks of 20 (a 16-element step and a 4-element end); blocks of 15
# on 45 columns, so every other row starts mid-byte and the last byte holds one nibble.
ADVERSARIAL_LAYOUTS = [((12, 40), 20), ((11, 45), 15)]


def adversarial_operands(sizes, block_cols, dtype, float_type):
    """Every nibble, one adversarial scale per block, and inputs that are exact ties (quarter steps),
    NaN, the infinities, huge, tiny and negative zero."""
    info = ml_dtypes.iinfo(dtype)
    blocks = (sizes[0], sizes[1] // block_cols)
    q = np.resize(np.arange(info.min, info.max + 1), sizes).astype(dtype)
    scale = np.resize(np.array(ADVERSARIAL_SCALES, np.float32), blocks).astype(float_type)
    zero_point = np.resize(np.arange(info.max, info.min - 1, -1), blocks).astype(dtype)
    specials = [np.nan, np.inf, -np.inf, 1e30, -1e30, 1e-30, -0.0, 65504.0, -65504.0]
    x = np.resize(np.arange(-40, 41) * 0.25, math.prod(sizes))
    x[::7] = np.resize(specials, x[::7].size)
    return q, scale, zero_point, x.reshape(sizes).astype(float_type)


@pytest.mark.parametrize(
    ("layout", "dtype", "float_type", "with_zero_point"),
    list(itertools.product(ADVERSARIAL_LAYOUTS, (INT4, UINT4), (np.float32, np.float16), (False, True))),
)
def test_dequantize_matches_on_adversarial_scales(level, layout, dtype, float_type, with_zero_point) -> None:
    q, scale, zero_point, _ = adversarial_operands(*layout, dtype, float_type)
    zero_point = zero_point if with_zero_point else None
    out = np.full(q.shape, 1.0, float_type)
    assert kernels.dequantize_packed(pack_int4(q), dtype, scale, zero_point, out)
    expected = reference.dequantize(q, scale, zero_point, float_type)
    assert out.tobytes() == expected.tobytes()  # NaN payloads and signs too


@pytest.mark.parametrize(
    ("layout", "dtype", "float_type", "with_zero_point", "reciprocal"),
    list(
        itertools.product(
            ADVERSARIAL_LAYOUTS, (INT4, UINT4), (np.float32, np.float16), (False, True), (False, True)
        )
    ),
)
def test_quantize_matches_on_adversarial_inputs(
    level, layout, dtype, float_type, with_zero_point, reciprocal
) -> None:
    _, scale, zero_point, x = adversarial_operands(*layout, dtype, float_type)
    zero_point = zero_point if with_zero_point else None
    packed = np.full((x.size + 1) // 2, 0x5A, np.uint8)
    assert kernels.quantize_packed(x, scale, zero_point, packed, dtype, reciprocal)
    expected = reference.quantize(x, scale, zero_point, dtype, reciprocal_division=reciprocal)
    np.testing.assert_array_equal(unpack_int4(packed, x.shape, dtype).astype(int), expected.astype(int))
    if x.size % 2:
        assert packed[-1] >> 4 == 0x5  # the last byte's free nibble kept


# Block sizes around the compiled steps of 32 and 16 elements: 1, 2, 3 (portable only), 16, 32, 128,
# 37 (a 32-element step and a 5-element end), 48 (a 32-element step and a 16-element step). Three
# blocks per row: odd sizes make every other row start mid-byte and the last byte hold one nibble.
TIE_BLOCK_SIZES = [1, 2, 3, 16, 32, 37, 48, 128]
TIE_SCALES = [1.0, 0.5, 0.25, 2.0, 3.0, 0.1]  # exact ties for powers of two, near ties otherwise
SPECIALS = [np.nan, np.inf, -np.inf, -np.nan, 1e30, -1e30, 4194304.5, -4194304.5, 8388607.5, -12582912.0]


def tie_operands(block: int, dtype, float_type):
    """Halfway inputs (k + 1/2) * scale at every position of every vector, NaN, the infinities and
    magnitudes past 2**22 scattered and at the end of every block."""
    info = ml_dtypes.iinfo(dtype)
    rows, cols = 5, 3 * block
    blocks = (rows, 3)
    scale = np.resize(np.array(TIE_SCALES, np.float32), blocks)
    zero_point = np.resize(np.arange(info.min, info.max + 1), blocks).astype(dtype)
    halves = np.resize(np.arange(-26, 26) + 0.5, rows * cols).reshape(rows, 3, block)
    x = (halves * scale[:, :, None]).reshape(-1)
    x[(np.arange(x.size) * 7) % 11 == 0] = np.resize(SPECIALS, x[(np.arange(x.size) * 7) % 11 == 0].size)
    x.reshape(rows, 3, block)[:, :, -1] = np.resize(SPECIALS, blocks)
    return x.reshape(rows, cols).astype(float_type), scale.astype(float_type), zero_point


@pytest.mark.parametrize(
    ("block", "dtype", "float_type", "with_zero_point", "reciprocal"),
    list(
        itertools.product(
            TIE_BLOCK_SIZES, (INT4, UINT4), (np.float32, np.float16), (False, True), (False, True)
        )
    ),
)
def test_quantize_matches_on_ties_and_specials_at_every_position(
    level, block, dtype, float_type, with_zero_point, reciprocal
) -> None:
    x, scale, zero_point = tie_operands(block, dtype, float_type)
    zero_point = zero_point if with_zero_point else None
    packed = np.full((x.size + 1) // 2 + 4, 0xA5, np.uint8)
    assert kernels.quantize_packed(x, scale, zero_point, packed[:-4], dtype, reciprocal)
    expected = reference.quantize(x, scale, zero_point, dtype, reciprocal_division=reciprocal)
    np.testing.assert_array_equal(unpack_int4(packed, x.shape, dtype).astype(int), expected.astype(int))
    assert packed[-4:].tolist() == [0xA5] * 4
    if x.size % 2:
        assert packed[x.size // 2] >> 4 == 0xA  # the last byte's free nibble kept


@pytest.mark.parametrize("zero", [-128, -100, -17, 17, 100, 127])
def test_quantize_takes_any_int8_zero_point(level, zero) -> None:
    """Zero points beyond the 4-bit range (the compiled core accepts any int8) still saturate as the
    reference does, not as NaN: the AVX2 route's byte arithmetic covers |zero point| <= 16 only."""
    x = np.float32([np.nan, -1e3, -20.5, -3.5, 0.0, 2.5, 20.5, 1e3] * 8).reshape(2, 32)
    scale, zero_point = np.float32([[1.0], [0.5]]), np.full((2, 1), zero, np.int8)
    packed = np.zeros(32, np.uint8)
    _core.quantize_int4(x, scale, zero_point, packed, True, False)
    expected = reference.quantize(x, scale, zero_point, INT4)
    np.testing.assert_array_equal(unpack_int4(packed, x.shape, INT4).astype(int), expected.astype(int))
