"""The quantized family's compiled kernels at every CPU level, bit for bit against small NumPy formulas
written here from the numbers they must give (exact integer sums; float64 requantization; float32
then float16 rounding), and against onnx.reference and onnxruntime CPU where those are exact.

The formulas: acc = sum of (a - za)(b - zb) in Python-sized integers (int64 here, every case below
fits); int32 outputs wrap acc to 32 bits; requantized outputs are clamp(rint(float64(acc + bias) *
(float64(s1) * float64(s2)) / float64(os)) + ozp) with NaN giving 0; float outputs are
float32(float64(acc) * (float64(as) * float64(bs))) + bias in float32.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import exact_on_onnxruntime
from dmlq import _core
from dmlq.kernels import dynamic_quantize_linear as dynamic_quantize_kernel

BYTES = (np.uint8, np.int8)


def random_bytes(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def wrapped(values: np.ndarray) -> np.ndarray:
    """int64 values wrapped to int32 (two's complement)."""
    return ((values.astype(np.int64) + 2**31) % 2**32 - 2**31).astype(np.int32)


def requantized(acc, scale, out_scale, out_zero, dtype, reciprocal=False) -> np.ndarray:
    """clamp(rint(acc * scale / out_scale) + out_zero) in float64 (scale already float64), NaN -> 0."""
    info = np.iinfo(dtype)
    with np.errstate(all="ignore"):
        value = np.asarray(acc, np.int64).astype(np.float64) * scale
        if reciprocal:
            value = value * np.float64(np.float32(1) / np.float32(out_scale))
        else:
            value = value / np.float64(np.float32(out_scale))
        value = np.rint(value) + np.float64(out_zero)
    value = np.where(np.isnan(value), 0, np.clip(value, info.min, info.max))
    return value.astype(dtype)


def centred(values, zero_point) -> np.ndarray:
    return values.astype(np.int64) - np.asarray(zero_point, np.int64)


def array(value, dtype) -> np.ndarray:
    return np.array(value, dtype)


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    previous = _core.get_num_threads()
    _core.set_num_threads(request.param)
    yield request.param
    _core.set_num_threads(previous)


# ---- MATRIX_MULTIPLY_INTEGER ----------------------------------------------------------------------


def matmul_operands(rng, a_type, b_type, batch, m, k, n, per_row, per_column):
    a = random_bytes(rng, (*batch, m, k), a_type)
    b = random_bytes(rng, (*batch, k, n), b_type)
    nd = len(batch) + 2
    za = random_bytes(rng, (1,) * (nd - 2) + ((m, 1) if per_row else (1, 1)), a_type)
    zb = random_bytes(rng, (1,) * (nd - 2) + ((1, n) if per_column else (1, 1)), b_type)
    return a, za, b, zb


@pytest.mark.parametrize("a_type", BYTES)
@pytest.mark.parametrize("b_type", BYTES)
@pytest.mark.parametrize(
    "shape",
    [
        ((), 1, 1, 1),
        ((), 7, 13, 5),
        ((2,), 9, 37, 50),
        ((2, 3), 17, 64, 49),
        ((), 3, 300, 200),
        ((), 64, 256, 96),
    ],
)
def test_matmul_integer(level, rng, a_type, b_type, shape):
    batch, m, k, n = shape
    for per_row, per_column in ((False, False), (True, True), (True, False)):
        a, za, b, zb = matmul_operands(rng, a_type, b_type, batch, m, k, n, per_row, per_column)
        out = np.empty((*batch, m, n), np.int32)
        _core.matmul_integer(a, za, b, zb, out)
        np.testing.assert_array_equal(out, wrapped(np.matmul(centred(a, za), centred(b, zb))))


@pytest.mark.parametrize("b_type", BYTES)
@pytest.mark.parametrize(
    "shape",
    [
        ((), 16, 64, 96),
        ((), 17, 70, 100),
        ((3,), 19, 256, 145),
        ((4,), 33, 256, 100),  # with 2 threads, a batch per thread
        ((), 64, 768, 144),
        ((), 9, 34_000, 20),  # K beyond the int32 route
    ],
)
@pytest.mark.parametrize("packed", [False, True], ids=["b", "packed-b"])
def test_matmul_integer_b_zero_point_of_zero_effect(level, rng, threads, b_type, shape, packed):
    """zb' = 0 (zb 0 for int8 B, 128 for uint8 B; one or per column): A's row sums are multiplied by 0
    only and not computed; whole tiles go to the output straight from the dot products, edges (17, 19
    rows; 100, 145 columns) through the epilogue; za one, per row, or 0; batches shared or one per
    thread; a K of 34 000 sums in int64."""
    batch, m, k, n = shape
    zero = 0 if b_type == np.int8 else 128
    for a_type in BYTES:
        for za_shape, zb_shape in (((1, 1), (1, 1)), ((m, 1), (1, n)), ((1, 1), (1, n))):
            a = random_bytes(rng, (*batch, m, k), a_type)
            b = random_bytes(rng, (*batch, k, n), b_type)
            za = random_bytes(rng, (1,) * len(batch) + za_shape, a_type)
            zb = np.full((1,) * len(batch) + zb_shape, zero, b_type)
            out = np.empty((*batch, m, n), np.int32)
            _core.matmul_integer(a, za, _core.pack_b(b) if packed else b, zb, out)
            np.testing.assert_array_equal(out, wrapped(np.matmul(centred(a, za), centred(b, zb))))
            _core.matmul_integer(a, np.zeros_like(za), b, zb, out)
            np.testing.assert_array_equal(out, wrapped(np.matmul(a.astype(np.int64), centred(b, zb))))


def test_matmul_integer_one_column_zero_point_not_zero(level, rng, threads):
    """Per-column zero points all 0 but one: the row sums are needed again, in every tile."""
    a = random_bytes(rng, (40, 96), np.uint8)
    b = random_bytes(rng, (96, 150), np.int8)
    za = random_bytes(rng, (40, 1), np.uint8)
    for column in (0, 47, 149):
        zb = np.zeros((1, 150), np.int8)
        zb[0, column] = -3
        out = np.empty((40, 150), np.int32)
        _core.matmul_integer(a, za, b, zb, out)
        np.testing.assert_array_equal(out, wrapped(centred(a, za) @ centred(b, zb)))


def test_matmul_integer_without_zero_points_and_with_broadcast_batches(level, rng):
    a = random_bytes(rng, (1, 5, 40), np.int8)
    b = random_bytes(rng, (3, 40, 11), np.uint8)
    a_view = np.broadcast_to(a, (3, 5, 40))  # stride 0 along the batch
    out = np.empty((3, 5, 11), np.int32)
    _core.matmul_integer(a_view, None, b, None, out)
    np.testing.assert_array_equal(out, np.matmul(a_view.astype(np.int64), b.astype(np.int64)))


@pytest.mark.parametrize(
    "values",
    [
        (255, 0, np.int8, -128, 127),
        (0, 255, np.uint8, 255, 0),
        (255, 0, np.uint8, 255, 0),
        (-128, 127, np.int8, 127, -128),
    ],
)
def test_matmul_integer_wraps_beyond_32_bits(level, values, threads):
    """K = 40000 products of magnitude 65025 sum beyond int32: the output is the exact sum mod 2**32."""
    a_value, a_zero, b_type, b_value, b_zero = values
    a_type = np.int8 if a_value < 0 else np.uint8
    k = 40_000
    a = np.full((3, k), a_value, a_type)
    b = np.full((k, 5), b_value, b_type)
    out = np.empty((3, 5), np.int32)
    _core.matmul_integer(a, array([[a_zero]], a_type), b, array([[b_zero]], b_type), out)
    exact = k * (a_value - a_zero) * (b_value - b_zero)
    assert abs(exact) > 2**31
    np.testing.assert_array_equal(out, wrapped(np.full((3, 5), exact)))


def test_matmul_integer_long_k_random(level, rng):
    a, za, b, zb = matmul_operands(rng, np.uint8, np.int8, (), 9, 34_000, 20, True, True)
    out = np.empty((9, 20), np.int32)
    _core.matmul_integer(a, za, b, zb, out)
    np.testing.assert_array_equal(out, wrapped(centred(a, za) @ centred(b, zb)))


def test_matmul_integer_packed_b_and_strided_out(level, rng):
    a, za, b, zb = matmul_operands(rng, np.int8, np.uint8, (2,), 10, 70, 33, True, True)
    packed = _core.pack_b(b)
    wide = np.zeros((2, 10, 66), np.int32)
    out = wide[:, :, ::2]  # every other int32
    _core.matmul_integer(a, za, packed, zb, out)
    np.testing.assert_array_equal(out, wrapped(np.matmul(centred(a, za), centred(b, zb))))
    assert not wide[:, :, 1::2].any()


def test_matmul_integer_rejects_other_outputs():
    a = np.zeros((2, 3), np.uint8)
    b = np.zeros((3, 4), np.uint8)
    with pytest.raises(ValueError, match="int32"):
        _core.matmul_integer(a, None, b, None, np.empty((2, 4), np.uint8))
    with pytest.raises(ValueError):
        _core.matmul_integer(a, None, b, None, np.empty((2, 5), np.int32))


# ---- MATRIX_MULTIPLY_INTEGER_TO_FLOAT -----------------------------------------------------------------


def to_float(acc, a_scale, b_scale, bias, dtype) -> np.ndarray:
    scale = np.asarray(a_scale, np.float32).astype(np.float64) * np.asarray(b_scale, np.float32).astype(
        np.float64
    )
    with np.errstate(all="ignore"):  # infinities and NaN from scales of inf and NaN, float16 overflow
        value = (np.asarray(acc, np.int64).astype(np.float64) * scale).astype(np.float32)
        if bias is not None:
            value = value + bias.astype(np.float32)
        return value.astype(dtype)


@pytest.mark.parametrize("out_type", [np.float32, np.float16])
@pytest.mark.parametrize("bias_type", [None, np.float32, np.float16])
@pytest.mark.parametrize(
    "types", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8), (np.int8, np.uint8)]
)
def test_matmul_integer_to_float(level, rng, out_type, bias_type, types):
    a, za, b, zb = matmul_operands(rng, *types, (2,), 19, 45, 37, True, True)
    a_scale = (rng.random((1, 19, 1)) * 0.1).astype(np.float32)
    b_scale = (rng.random((1, 1, 37)) * 0.1).astype(np.float32)
    bias = (
        None if bias_type is None else np.broadcast_to(rng.standard_normal(37).astype(bias_type), (2, 19, 37))
    )
    out = np.empty((2, 19, 37), out_type)
    _core.matmul_integer_to_float(a, a_scale, za, b, b_scale, zb, bias, out)
    expected = to_float(np.matmul(centred(a, za), centred(b, zb)), a_scale, b_scale, bias, out_type)
    np.testing.assert_array_equal(
        out.view(np.uint16 if out_type == np.float16 else np.uint32),
        expected.view(np.uint16 if out_type == np.float16 else np.uint32),
    )


@pytest.mark.parametrize("out_type", [np.float32, np.float16])
def test_matmul_integer_to_float_bias_layouts_and_nonfinite_scales(level, rng, out_type):
    a, za, b, zb = matmul_operands(rng, np.int8, np.uint8, (3,), 21, 70, 50, True, False)
    a_scale = (rng.random((1, 21, 1)) * 2.0**-7).astype(np.float32)
    b_scale = (rng.random((1, 1, 50)) * 2.0**-7).astype(np.float32)
    b_scale[0, 0, :4] = [np.inf, np.nan, 0.0, 1e30]  # NaN and inf outputs, and overflowing float16
    sums = np.matmul(centred(a, za), centred(b, zb))
    for bias in (
        rng.standard_normal((3, 21, 50)).astype(np.float16),  # every element its own
        np.broadcast_to(rng.standard_normal((3, 21, 1)).astype(np.float32), (3, 21, 50)),  # one per row
        np.asfortranarray(rng.standard_normal((3, 21, 50)).astype(np.float32)),  # strided columns
    ):
        out = np.empty((3, 21, 50), out_type)
        _core.matmul_integer_to_float(a, a_scale, za, b, b_scale, zb, bias, out)
        expected = to_float(sums, a_scale, b_scale, bias, out_type)
        np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), expected.view(f"u{out.itemsize}"))


def test_matmul_integer_to_float_long_k_and_nonfinite_scales(level, rng):
    a, za, b, zb = matmul_operands(rng, np.uint8, np.int8, (), 4, 36_000, 18, False, True)
    a_scale = np.float32([[3e-7]])
    b_scale = (rng.random((1, 18)) * 1e-3).astype(np.float32)
    b_scale[0, :3] = [np.inf, np.nan, 0.0]
    out = np.empty((4, 18), np.float32)
    _core.matmul_integer_to_float(a, a_scale, za, b, b_scale, zb, None, out)
    expected = to_float(centred(a, za) @ centred(b, zb), a_scale, b_scale, None, np.float32)
    np.testing.assert_array_equal(out, expected)


# ---- the convolutions -------------------------------------------------------------------------------


def convolution_sums(x, x_zero, w, w_zero, strides, dilations, start, end, groups) -> np.ndarray:
    """The exact sums of (x - x_zero)(w - w_zero[m]) over each window, padding contributing 0."""
    n, c, *_ = x.shape
    m, cg, *kernel = w.shape
    xp = np.pad(centred(x, x_zero), [(0, 0), (0, 0)] + list(zip(start, end)))
    wc = w.astype(np.int64) - np.asarray(w_zero, np.int64).reshape((-1,) + (1,) * (w.ndim - 1))
    sizes = [
        (xp.shape[2 + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(len(kernel))
    ]
    out = np.zeros((n, m, *sizes), np.int64)
    mg = m // groups
    for g in range(groups):
        for tap in np.ndindex(*kernel):
            window = tuple(
                slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(tap, dilations, sizes, strides)
            )
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg), *window)]
            taps = wc[(slice(g * mg, (g + 1) * mg), slice(None), *tap)]
            out[:, g * mg : (g + 1) * mg] += np.einsum("nc...,mc->nm...", patch, taps)
    return out


# x shape, w shape, strides, dilations, start padding, end padding, groups
GEOMETRIES = [
    ((1, 1, 1, 1), (1, 1, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
    ((2, 6, 9, 11), (4, 3, 3, 2), (2, 1), (1, 2), (1, 0), (2, 1), 2),
    ((1, 8, 7, 7), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 8),  # depthwise
    ((2, 5, 10, 9), (10, 1, 3, 5), (2, 3), (2, 1), (3, 2), (1, 4), 5),  # depthwise, multiplier 2
    ((2, 16, 5, 6), (16, 2, 3, 3), (1, 2), (1, 1), (2, 0), (0, 1), 8),
    ((1, 5, 13), (3, 5, 4), (3,), (2,), (2,), (1,), 1),  # 1-D
    ((3, 4, 17), (4, 1, 5), (2,), (3,), (4,), (6,), 4),  # 1-D depthwise
    ((1, 4, 3, 4, 5), (6, 2, 2, 2, 2), (1, 1, 2), (1, 2, 1), (1, 0, 1), (0, 1, 1), 2),  # 3-D
    ((2, 32, 6, 6), (16, 32, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),  # pointwise: x read in place
    ((2, 12, 7, 5), (9, 4, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 3),  # pointwise, groups
    ((1, 24, 13, 13), (40, 24, 1, 1), (2, 2), (1, 1), (0, 0), (0, 0), 1),  # 1 x 1 stride 2
    ((1, 3, 23, 19), (13, 3, 7, 7), (2, 2), (1, 1), (3, 3), (3, 3), 1),  # a stem
    ((1, 10, 6, 6), (7, 10, 3, 3), (1, 1), (1, 1), (4, 0), (0, 5), 1),  # all padding rows
    ((1, 2, 3, 3), (3, 2, 3, 3), (1, 1), (3, 3), (3, 3), (3, 3), 1),  # windows wholly in padding
    ((1, 5, 30, 22), (3, 5, 5, 5), (1, 1), (4, 5), (0, 0), (0, 0), 1),  # 16 positions span 8 output rows
    ((2, 9, 17, 40), (18, 3, 3, 3), (2, 3), (1, 2), (1, 2), (2, 1), 3),  # strides 2 and 3, groups
    ((2, 6, 11, 13), (12, 1, 4, 5), (2, 1), (1, 2), (2, 3), (1, 4), 6),  # depthwise: 2 groups of 4 taps a row
    ((1, 3, 4, 5, 6), (3, 1, 2, 3, 3), (1, 1, 1), (2, 1, 1), (1, 1, 1), (1, 0, 1), 3),  # 3-D depthwise
]


def convolve(
    x,
    x_zero,
    w,
    w_zero,
    geometry,
    out_type,
    x_scale=None,
    w_scale=None,
    bias=None,
    y_scale=None,
    y_zero=None,
    reciprocal=False,
):
    *_, strides, dilations, start, end, groups = geometry
    zeros = [0 if zero is None else zero for zero in (x_zero, w_zero)]
    sums = convolution_sums(x, zeros[0], w, zeros[1], strides, dilations, start, end, groups)
    out = np.empty(sums.shape, out_type)
    _core.convolution(
        x,
        x_scale,
        x_zero,
        w,
        w_scale,
        w_zero,
        bias,
        y_scale,
        y_zero,
        out,
        strides,
        dilations,
        start,
        end,
        groups,
        reciprocal,
    )
    return out, sums


# Larger geometries for the VNNI kernels' tiles (8 output channels by 48 positions over rows of the
# padded width), a long K, bands of rows on the threads, both phases of a stride of 2 in one pass,
# the depthwise kernel's 64 outputs a pass and its groups of 4 taps. x shape, w shape, strides,
# dilations, start padding, end padding, groups.
WIDE_GEOMETRIES = [
    ((2, 20, 23, 61), (20, 20, 3, 3), (1, 1), (1, 1), (1, 2), (2, 0), 1),  # 20 channels: a partial panel
    ((1, 80, 9, 13), (12, 80, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),  # K of 180 groups of 4
    ((1, 14, 30, 31), (10, 7, 3, 3), (2, 2), (1, 1), (1, 1), (0, 1), 2),  # stride 2 both phases, groups
    ((2, 12, 25, 27), (16, 12, 3, 2), (3, 2), (2, 3), (3, 0), (1, 4), 1),  # strides 3 and 2, dilations
    ((2, 24, 17, 19), (10, 24, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),  # 1 x 1: rows as one run
    ((1, 24, 19, 21), (10, 24, 1, 1), (2, 2), (1, 1), (0, 0), (0, 0), 1),  # 1 x 1, stride 2: one phase
    ((1, 8, 9, 70), (4, 8, 1, 3), (2, 1), (1, 1), (0, 1), (1, 2), 1),  # a 1 x 3 kernel: odd rows unread
    ((1, 6, 11, 66), (5, 6, 3, 2), (2, 1), (2, 1), (2, 3), (1, 1), 1),  # dilated rows: odd rows unread
    ((2, 6, 21, 70), (6, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 6),  # depthwise, 70 wide
    ((1, 4, 19, 131), (8, 1, 5, 7), (2, 2), (1, 2), (2, 3), (4, 1), 4),  # depthwise x2, 2 groups of taps
    ((1, 3, 12, 50), (3, 1, 3, 3), (1, 3), (2, 2), (0, 5), (3, 0), 3),  # depthwise, stride 3 dilation 2
]


@pytest.mark.parametrize("geometry", WIDE_GEOMETRIES)
@pytest.mark.parametrize("types", [(np.uint8, np.int8, np.uint8), (np.int8, np.uint8, np.int8)])
def test_convolution_wide_geometries(level, rng, threads, geometry, types):
    x_type, w_type, y_type = types
    x, w = random_bytes(rng, geometry[0], x_type), random_bytes(rng, geometry[1], w_type)
    m = geometry[1][0]
    x_zero, y_zero = random_bytes(rng, (), x_type), random_bytes(rng, (), y_type)
    w_zero = random_bytes(rng, m, w_type)
    w_zero[::2] = 0 if w_type == np.int8 else 128  # w_zp' of 0 for half the channels, not 0 for the others
    out, sums = convolve(x, x_zero, w, w_zero, geometry, np.int32)
    np.testing.assert_array_equal(out, wrapped(sums))
    w_scale = (rng.random(m) * 0.002 + 0.0005).astype(np.float32)
    bias = rng.integers(-30_000, 30_000, m).astype(np.int32)
    x_scale, y_scale = array(0.05, np.float32), array(0.37, np.float32)
    out, sums = convolve(x, x_zero, w, w_zero, geometry, y_type, x_scale, w_scale, bias, y_scale, y_zero)
    scale = np.float64(x_scale) * per_channel(w_scale.astype(np.float64), x.ndim)
    expected = requantized(sums + per_channel(bias, x.ndim), scale, y_scale, y_zero, y_type)
    np.testing.assert_array_equal(out, expected)


def test_convolution_layouts_of_the_vnni_kernels(level, rng):
    """x with spaced columns and an out whose positions are spaced, into the implicit multiply and the
    depthwise kernel (their scalar plane fill and stores), and a single output position."""
    for geometry in (WIDE_GEOMETRIES[0], WIDE_GEOMETRIES[6]):
        x = random_bytes(rng, geometry[0], np.uint8)
        w = random_bytes(rng, geometry[1], np.int8)
        sums = convolution_sums(x, 3, w, 0, *geometry[2:])
        spaced = np.zeros((*x.shape[:3], 2 * x.shape[3]), np.uint8)
        spaced[..., ::2] = x
        holder = np.zeros((*sums.shape[:3], 2 * sums.shape[3]), np.int32)
        args = (
            None,
            array(3, np.uint8),
            w,
            None,
            None,
            None,
            None,
            None,
            holder[..., ::2],
            *geometry[2:],
            False,
        )
        _core.convolution(spaced[..., ::2], *args)
        np.testing.assert_array_equal(holder[..., ::2], wrapped(sums))
        assert not holder[..., 1::2].any()
    x, w = random_bytes(rng, (1, 8, 3, 3), np.uint8), random_bytes(rng, (5, 8, 3, 3), np.int8)
    out, sums = convolve(x, None, w, None, ((1, 8, 3, 3), (5, 8, 3, 3), (1, 1), (1, 1), (0, 0), (0, 0), 1),
                         np.int32)  # fmt: skip
    np.testing.assert_array_equal(out, wrapped(sums))


def test_convolution_requantization_of_large_values_and_ties(level, rng):
    """Factors large enough that the float32 estimate exceeds 2**20 (it saturates, its sign right), and
    power-of-two factors that put many sums on exact ties (rounded half to even)."""
    geometry = ((1, 64, 12, 50), (16, 64, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)
    x, w = random_bytes(rng, geometry[0], np.uint8), random_bytes(rng, geometry[1], np.int8)
    w_scale = np.exp2(-rng.integers(-3, 12, 16)).astype(np.float32)  # 8 down to 2**-11
    for y_type in (np.uint8, np.int8):
        zero = array(3, y_type)
        one = array(1, np.float32)
        out, sums = convolve(
            x, array(128, np.uint8), w, None, geometry, y_type, one, w_scale, None, one, zero
        )
        expected = requantized(sums, per_channel(w_scale.astype(np.float64), 4), 1, zero, y_type)
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("depthwise", [False, True])
def test_convolution_power_of_two_factors_beyond_float32_sums(level, depthwise):
    """A factor of 2**-17: the float32 estimate is exact (ties too) only while |acc| < 2**24. Sums of
    2**24 + 2**16 + 1 (float32 rounds them to a tie, 128.5) give 129, and 2**24 - 2**16 (an exact
    tie, 127.5) gives 128."""
    channels, groups = (2, 2) if depthwise else (32, 1)
    x = np.full((1, channels, 5, 6), 255, np.uint8)
    w = np.full((2, channels // groups, 3, 3), 127, np.int8)
    geometry = (x.shape, w.shape, (1, 1), (1, 1), (0, 0), (0, 0), groups)
    products = 65025 * 9 * channels // groups  # (255 - 0) (127 + 128) a product
    bias = np.array([2**24 + 2**16 + 1, 2**24 - 2**16], np.int64) - products
    one = array(1, np.float32)
    out, sums = convolve(
        x,
        array(0, np.uint8),
        w,
        array(-128, np.int8),
        geometry,
        np.uint8,
        one,
        array(2.0**-17, np.float32),
        bias.astype(np.int32),
        one,
        array(0, np.uint8),
    )
    np.testing.assert_array_equal(out[0, :, 0, 0], [129, 128])
    np.testing.assert_array_equal(out, requantized(sums + per_channel(bias, 4), 2.0**-17, 1, 0, np.uint8))


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize(
    "types", [(np.uint8, np.int8), (np.int8, np.uint8), (np.uint8, np.uint8), (np.int8, np.int8)]
)
def test_convolution_integer(level, rng, geometry, types):
    x = random_bytes(rng, geometry[0], types[0])
    w = random_bytes(rng, geometry[1], types[1])
    x_zero = random_bytes(rng, (), types[0])
    for w_zero in (random_bytes(rng, (), types[1]), random_bytes(rng, geometry[1][0], types[1]), None):
        out, sums = convolve(x, x_zero, w, w_zero, geometry, np.int32)
        np.testing.assert_array_equal(out, wrapped(sums))


def per_channel(values: np.ndarray, ndim: int) -> np.ndarray:
    return values.reshape((1, -1) + (1,) * (ndim - 2))


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize(
    "types", [(np.uint8, np.int8, np.uint8), (np.int8, np.uint8, np.int8), (np.int8, np.int8, np.uint8)]
)
@pytest.mark.parametrize("reciprocal", [False, True])
def test_quantized_convolution(level, rng, geometry, types, reciprocal):
    x_type, w_type, y_type = types
    x, w = random_bytes(rng, geometry[0], x_type), random_bytes(rng, geometry[1], w_type)
    m, ndim = geometry[1][0], x.ndim
    x_zero, y_zero = random_bytes(rng, (), x_type), random_bytes(rng, (), y_type)
    x_scale, y_scale = array(0.03, np.float32), array(rng.random() * 4 + 0.5, np.float32)
    for per_channel_filter in (False, True):
        w_zero = random_bytes(rng, m if per_channel_filter else (), w_type)
        w_scale = (rng.random(m if per_channel_filter else 1) * 0.02).astype(np.float32)
        bias = rng.integers(-30_000, 30_000, m).astype(np.int32)
        bias[0] = 2**31 - 1 if m > 1 else bias[0]  # the row bias beyond int32 sums: the exact route
        out, sums = convolve(
            x, x_zero, w, w_zero, geometry, y_type, x_scale, w_scale, bias, y_scale, y_zero, reciprocal
        )
        scale = np.float64(x_scale) * per_channel(w_scale.astype(np.float64), ndim)
        expected = requantized(sums + per_channel(bias, ndim), scale, y_scale, y_zero, y_type, reciprocal)
        np.testing.assert_array_equal(out, expected)


def test_quantized_convolution_without_bias_and_zero_points(level, rng):
    geometry = GEOMETRIES[1]
    x, w = random_bytes(rng, geometry[0], np.uint8), random_bytes(rng, geometry[1], np.int8)
    x_scale, w_scale, y_scale = array(0.5, np.float32), array([0.25], np.float32), array(2.0, np.float32)
    out, sums = convolve(x, None, w, None, geometry, np.uint8, x_scale, w_scale, None, y_scale, None)
    np.testing.assert_array_equal(out, requantized(sums, 0.125, 2.0, 0, np.uint8))


def test_convolution_near_ties_and_nonfinite_scales(level, rng):
    geometry = ((1, 16, 8, 8), (12, 16, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)
    x, w = random_bytes(rng, geometry[0], np.uint8), random_bytes(rng, geometry[1], np.int8)
    w_scale = np.full(12, 0.25, np.float32)  # acc * 0.25 / 1: every fourth sum an exact tie
    w_scale[:4] = [np.inf, np.nan, 0.0, 1e-30]
    out, sums = convolve(
        x,
        array(128, np.uint8),
        w,
        None,
        geometry,
        np.int8,
        array(1, np.float32),
        w_scale,
        None,
        array(1, np.float32),
        array(-3, np.int8),
    )
    expected = requantized(sums, per_channel(w_scale.astype(np.float64), 4), 1, -3, np.int8)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("depthwise", [False, True])
def test_convolution_beyond_int32_sums(level, depthwise):
    """Windows of more than 33,025 products of magnitude 65,025: int32 wraps, requantized stays exact."""
    if depthwise:
        x = np.full((1, 1, 190, 190), 255, np.uint8)
        w = np.full((1, 1, 190, 190), -128, np.int8)
        geometry = (x.shape, w.shape, (1, 1), (1, 1), (0, 0), (0, 0), 1)
    else:
        x = np.full((1, 4100, 3, 3), 255, np.uint8)
        w = np.full((2, 4100, 3, 3), -128, np.int8)
        geometry = (x.shape, w.shape, (1, 1), (1, 1), (1, 1), (1, 1), 1)
    w_zero = array(127, np.int8)
    out, sums = convolve(x, array(0, np.uint8), w, w_zero, geometry, np.int32)
    assert sums.min() < -(2**31)
    np.testing.assert_array_equal(out, wrapped(sums))
    scale = array(2.0**-24, np.float32)
    out, sums = convolve(
        x,
        array(0, np.uint8),
        w,
        w_zero,
        geometry,
        np.int8,
        scale,
        array(1, np.float32),
        None,
        array(1, np.float32),
        None,
    )
    np.testing.assert_array_equal(out, requantized(sums, 2.0**-24, 1, 0, np.int8))


@pytest.mark.parametrize("geometry", [GEOMETRIES[1], GEOMETRIES[3], GEOMETRIES[8]])
def test_convolution_threads_give_identical_outputs(rng, geometry, threads):
    x = random_bytes(rng, (6, *geometry[0][1:]), np.uint8)
    w = random_bytes(rng, geometry[1], np.int8)
    out, sums = convolve(x, array(3, np.uint8), w, array(-2, np.int8), geometry, np.int32)
    np.testing.assert_array_equal(out, wrapped(sums))


def test_convolution_layouts(level, rng):
    """Strided x and w, a w copied where its rows are not one run, an out whose channels are apart."""
    geometry = GEOMETRIES[4]
    x = random_bytes(rng, (2, 16, 10, 12), np.int8)[:, :, ::2, ::2]
    w = np.ascontiguousarray(random_bytes(rng, (16, 3, 3, 2), np.uint8).transpose(0, 3, 1, 2))
    w = random_bytes(rng, (16, 2, 3, 3), np.uint8).transpose(0, 1, 3, 2).copy().transpose(0, 1, 3, 2)
    x_zero, w_zero = array(-5, np.int8), array(200, np.uint8)
    sums = convolution_sums(x, x_zero, w, w_zero, *geometry[2:])
    holder = np.zeros((2, 32, *sums.shape[2:]), np.int32)
    out = holder[:, ::2]
    _core.convolution(x, None, x_zero, w, None, w_zero, None, None, None, out, *geometry[2:], False)
    np.testing.assert_array_equal(out, wrapped(sums))
    assert not holder[:, 1::2].any()


@pytest.mark.parametrize(
    "geometry", [GEOMETRIES[1], GEOMETRIES[3], GEOMETRIES[8], GEOMETRIES[11], GEOMETRIES[-1]]
)
def test_convolution_with_a_filter_packed_once(level, rng, geometry):
    """A pack_convolution_filter capsule gives the filter's bits, at the level it was packed for and at
    the detected one (where another level's packing stands for the filter it copied)."""
    x, w = random_bytes(rng, geometry[0], np.uint8), random_bytes(rng, geometry[1], np.int8)
    window, groups = geometry[2:6], geometry[6]
    x_zero, w_zero, bias = array(7, np.uint8), array(-3, np.int8), np.arange(geometry[1][0], dtype=np.int32)
    sums = convolution_sums(x, x_zero, w, w_zero, *window, groups)
    packed = _core.pack_convolution_filter(w, groups)
    w[...] = 0  # the capsule holds its own copy
    scales = (array(0.25, np.float32), np.full(geometry[1][0], 0.5, np.float32), array(3.0, np.float32))
    expected = requantized(sums + per_channel(bias, x.ndim), 0.125, 3.0, 0, np.int8)
    for current in (level, _core.detected_level()):
        _core.set_level(current)
        out = np.empty(sums.shape, np.int32)
        _core.convolution(
            x, None, x_zero, packed, None, w_zero, None, None, None, out, *window, groups, False
        )
        np.testing.assert_array_equal(out, wrapped(sums))
        out = np.empty(sums.shape, np.int8)
        _core.convolution(
            x,
            scales[0],
            x_zero,
            packed,
            scales[1],
            w_zero,
            bias,
            scales[2],
            None,
            out,
            *window,
            groups,
            False,
        )
        np.testing.assert_array_equal(out, expected)
    with pytest.raises(ValueError, match="group_count"):
        _core.convolution(
            x, None, None, packed, None, None, None, None, None, out, *window, groups + 1, False
        )


def test_convolution_rejects_inconsistent_arguments():
    x, w, out = (
        np.zeros((1, 4, 5, 5), np.uint8),
        np.zeros((6, 2, 3, 3), np.int8),
        np.zeros((1, 6, 3, 3), np.int32),
    )
    window = ((1, 1), (1, 1), (0, 0), (0, 0))
    _core.convolution(x, None, None, w, None, None, None, None, None, out, *window, 2, False)
    with pytest.raises(ValueError, match="group_count"):
        _core.convolution(x, None, None, w, None, None, None, None, None, out, *window, 3, False)
    with pytest.raises(ValueError, match="strides"):
        _core.convolution(x, None, None, w, None, None, None, None, None, out, (1,), *window[1:], 2, False)
    with pytest.raises(ValueError, match="takes no scales"):
        _core.convolution(
            x, array(1, np.float32), None, w, None, None, None, None, None, out, *window, 2, False
        )
    with pytest.raises(ValueError, match="w_zero_point"):
        _core.convolution(
            x, None, None, w, None, np.zeros(5, np.int8), None, None, None, out, *window, 2, False
        )
    with pytest.raises(BufferError):
        _core.convolution(
            x, None, None, w, None, None, None, None, None, out[:, :, ::-1, :], *window, 2, False
        )


# ---- QUANTIZED_LINEAR_AVERAGE_POOLING -----------------------------------------------------------------


def pooled(
    x,
    x_scale,
    x_zero,
    y_scale,
    y_zero,
    out_shape,
    window,
    strides,
    dilations,
    start,
    include_padding,
    y_type,
    reciprocal=False,
):
    """Each output element from its window, by loops (per-channel parameters: [C] vectors)."""
    n, c, *sizes = x.shape
    out = np.empty(out_shape, y_type)
    info = np.iinfo(y_type)
    for index in np.ndindex(*out_shape):
        b, ch, *o = index
        total, count = 0, 0
        for tap in np.ndindex(*window):
            at = [oi * s - p + t * d for oi, s, p, t, d in zip(o, strides, start, tap, dilations)]
            if all(0 <= a < size for a, size in zip(at, sizes)):
                total += int(x[(b, ch, *at)]) - int(x_zero[ch])
                count += 1
        count = int(np.prod(window)) if include_padding else count
        value = np.float64(total) * np.float64(x_scale[ch]) / np.float64(count) if count else 0.0
        divisor = np.float64(np.float32(1) / y_scale[ch]) if reciprocal else np.float64(y_scale[ch])
        with np.errstate(all="ignore"):
            value = np.rint(value * divisor if reciprocal else value / divisor) + y_zero[ch]
        out[index] = 0 if np.isnan(value) else np.clip(value, info.min, info.max)
    return out


# x shape, out spatial, window, strides, dilations, start, end
POOLS = [
    ((1, 3, 7, 7), (3, 3), (3, 3), (2, 2), (1, 1), (0, 0), (0, 0)),
    ((2, 2, 6, 9), (6, 5), (3, 2), (1, 2), (1, 1), (1, 0), (1, 1)),
    ((1, 2, 8, 8), (5, 4), (2, 3), (2, 2), (2, 2), (2, 1), (1, 2)),
    ((1, 4, 5, 5), (1, 1), (5, 5), (1, 1), (1, 1), (0, 0), (0, 0)),  # global
    ((1, 1, 3, 3), (4, 4), (1, 1), (1, 1), (1, 1), (1, 1), (0, 0)),  # windows wholly in padding
    ((1, 2, 9), (5,), (3,), (2,), (1,), (1,), (1,)),  # 1-D
    ((1, 2, 3, 4, 4), (2, 2, 3), (2, 2, 2), (1, 2, 1), (1, 1, 1), (0, 0, 0), (0, 0, 0)),  # 3-D
]


@pytest.mark.parametrize("geometry", POOLS)
@pytest.mark.parametrize("types", [(np.uint8, np.uint8), (np.int8, np.uint8), (np.int8, np.int8)])
@pytest.mark.parametrize("include_padding", [False, True])
def test_average_pool(level, rng, geometry, types, include_padding):
    shape, out_spatial, window, strides, dilations, start, end = geometry
    x_type, y_type = types
    x = random_bytes(rng, shape, x_type)
    c = shape[1]
    for per_channel_parameters in (False, True):
        count = c if per_channel_parameters else 1
        x_scale = (rng.random(count) * 0.1 + 0.01).astype(np.float32)
        y_scale = (rng.random(count) * 0.1 + 0.01).astype(np.float32)
        x_zero, y_zero = random_bytes(rng, count, x_type), random_bytes(rng, count, y_type)
        for reciprocal in (False, True):
            out = np.empty((*shape[:2], *out_spatial), y_type)
            _core.average_pool(
                x,
                x_scale,
                x_zero,
                y_scale,
                y_zero,
                out,
                window,
                strides,
                dilations,
                start,
                end,
                include_padding,
                reciprocal,
            )
            full = [np.resize(v, c) for v in (x_scale, x_zero, y_scale, y_zero)]
            expected = pooled(
                x,
                full[0],
                full[1],
                full[2],
                full[3],
                out.shape,
                window,
                strides,
                dilations,
                start,
                include_padding,
                y_type,
                reciprocal,
            )
            np.testing.assert_array_equal(out, expected)


def test_average_pool_exact_ties(level):
    """Sums whose mean is a half-integer round to even: float64 from exact integer sums."""
    x = np.arange(2 * 2 * 4 * 4, dtype=np.uint8).reshape(2, 2, 4, 4)
    ones = np.ones(1, np.float32)
    out = np.empty((2, 2, 2, 2), np.uint8)
    _core.average_pool(x, ones, None, ones, None, out, (2, 2), (2, 2), (1, 1), (0, 0), (0, 0), False, False)
    means = x.reshape(2, 2, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 2, 2, 2, 4).mean(axis=-1)
    np.testing.assert_array_equal(out, np.rint(means).astype(np.uint8))


def test_average_pool_large_global_window(level, rng, threads):
    x = random_bytes(rng, (2, 3, 150, 170), np.int8)
    out = np.empty((2, 3, 1, 1), np.int8)
    scale = array([0.01], np.float32)
    _core.average_pool(
        x, scale, None, scale, None, out, (150, 170), (1, 1), (1, 1), (0, 0), (0, 0), False, False
    )
    means = x.astype(np.int64).sum(axis=(2, 3)) * np.float64(np.float32(0.01)) / (150 * 170)
    expected = np.clip(np.rint(means / np.float64(np.float32(0.01))), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(out[:, :, 0, 0], expected)


# ---- DYNAMIC_QUANTIZE_LINEAR ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (1000,), (3, 33_333), (2, 5, 70_001)])
def test_value_range(level, rng, dtype, shape, threads):
    x = (rng.standard_normal(shape) * 100).astype(dtype)
    if x.size > 10:
        x.reshape(-1)[[3, -2]] = np.nan
        x.reshape(-1)[5] = x.dtype.type(np.inf) if dtype == np.float16 else np.float32(1e30)
    expected = (float(x.min()), float(x.max())) if x.size else (np.inf, -np.inf)
    np.testing.assert_array_equal(_core.value_range(x), expected)  # NaN when one is NaN, as NumPy's
    if x.ndim > 1:  # strided rows, with and without the NaNs
        for view in (x[..., ::3], x[..., 6:-2:3]):
            np.testing.assert_array_equal(_core.value_range(view), (float(view.min()), float(view.max())))


def test_value_range_of_nans_and_signed_zeros(level):
    np.testing.assert_array_equal(_core.value_range(np.full(100_000, np.nan, np.float32)), (np.nan, np.nan))
    x = np.zeros(300_001, np.float32)
    x[-1] = np.nan  # in the last piece of the last thread's share
    np.testing.assert_array_equal(_core.value_range(x), (np.nan, np.nan))
    assert _core.value_range(np.float32([-0.0, 1.5, -0.0])) == (0.0, 1.5)


def dynamic_quantize_linear(x: np.ndarray, out: np.ndarray, reciprocal_division: bool) -> tuple:
    """The DYNAMIC_QUANTIZE_LINEAR kernel on ``x`` into ``out``: its scale and zero point outputs."""
    scale, zero_point = np.empty(1, np.float32), np.empty(1, out.dtype)
    dynamic_quantize_kernel(None, {"input": x}, (out, scale, zero_point), reciprocal_division)
    return scale[0], zero_point[0]


def test_dynamic_quantize_linear_matches_onnx_reference(level, rng):
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero_point"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [
            helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None)
            for name in ("y", "scale", "zero_point")
        ],
    )
    evaluator = ReferenceEvaluator(helper.make_model(graph))
    cases = [
        np.float32([0, 2, -3, -2.5, 1.34, 0.5]),
        np.zeros(5, np.float32),
        np.float32([1, 2, 3]),
        np.float32([-1, -2, -3]),
        (rng.standard_normal((64, 300)) * 7).astype(np.float32),
        (rng.random((3, 4000)) * 1e-3 - 2e-4).astype(np.float32),
    ]
    for x in cases:
        y, scale, zero_point = evaluator.run(None, {"x": x})
        out = np.empty(x.shape, np.uint8)
        got_scale, got_zero = dynamic_quantize_linear(x, out, False)
        np.testing.assert_array_equal(out, y)
        assert got_scale.tobytes() == scale.tobytes() and got_zero == zero_point


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("reciprocal", [False, True])
@pytest.mark.parametrize("size", [1, 63, 64, 1000, 70_001, 300_003])
def test_dynamic_quantize_linear_against_the_reference(level, rng, threads, dtype, reciprocal, size):
    """The compiled quantization (any length, its tail, pieces on the threads) on values made of exact
    ties, near ties and the range's ends: dmlq.reference's bits, its float32 true division."""
    from dmlq.reference import dynamic_quantize_linear as reference

    # the range [-8, 127 / 16] makes the scale 1 / 16 exactly: (k + 0.5) / 16 divides to an exact tie
    x = rng.uniform(-8, 127 / 16, size).astype(np.float32)
    x[: size // 2] = (rng.integers(-128, 127, size // 2) + 0.5).astype(np.float32) / 16
    x[:: max(size // 7, 1)] = np.nextafter(x[:: max(size // 7, 1)], np.float32(0))  # just off those ties
    x[-2:] = [-8, 127 / 16] if size > 2 else x[-2:]
    out = np.empty(size, dtype)
    scale, zero_point = dynamic_quantize_linear(x, out, reciprocal)
    y, expected_scale, expected_zero = reference(x, dtype, reciprocal_division=reciprocal)
    np.testing.assert_array_equal(out, y)
    assert scale == expected_scale and zero_point == expected_zero


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("ends", [(-3.0, 7.3), (-0.001, 0.0173), (-1e30, 3e29), (0.0, 1.7)])
def test_dynamic_quantize_linear_near_ties_of_any_scale(level, rng, dtype, ends):
    """Values whose quotient lies within 2^-16 .. 2^-11 of a half-integer, and on it, for scales that are
    no power of two: where a level estimates x / scale by x * (1 / scale), the lanes it is unsure of must
    be divided, and the others round as the quotient does (dmlq.reference, its float32 true division)."""
    from dmlq.reference import dynamic_quantize_linear as reference

    rmin, rmax = np.float32(ends[0]), np.float32(ends[1])
    scale = (rmax - rmin) / np.float32(255)
    zero = np.float32(0 if dtype == np.uint8 else -128) - rmin / scale
    offsets = np.float32(2.0) ** -rng.uniform(11, 16, 4000).astype(np.float32)
    halves = rng.integers(0, 255, 4000) - np.rint(zero) + np.float32(0.5)
    signs = rng.choice(np.float32([-1, 0, 1]), 4000)
    x = np.concatenate([[rmin, rmax], ((halves + signs * offsets) * scale).astype(np.float32)])
    x = np.clip(x, rmin, rmax)
    out = np.empty(x.size, dtype)
    got_scale, got_zero = dynamic_quantize_linear(x, out, False)
    y, expected_scale, expected_zero = reference(x, dtype)
    assert got_scale == expected_scale and got_zero == expected_zero
    np.testing.assert_array_equal(out, y)


def test_dynamic_quantize_linear_in_larger_pieces(rng, threads):
    """Beyond 256 pieces of 2^15 values, the pieces grow (their count is bounded): still every value,
    each thread first quantizing the pieces it read for the range."""
    from dmlq.reference import dynamic_quantize_linear as reference

    x = rng.uniform(-8, 127 / 16, 256 * 2**15 + 4_097).astype(np.float32)
    x[-1], x[0] = -8, 127 / 16
    out = np.empty(x.size, np.int8)
    scale, zero_point = dynamic_quantize_linear(x, out, False)
    y, expected_scale, expected_zero = reference(x, np.int8)
    np.testing.assert_array_equal(out, y)
    assert scale == expected_scale and zero_point == expected_zero


@pytest.mark.parametrize("size", [1, 15, 16, 64, 79, 200])
def test_dynamic_quantize_linear_from_every_alignment(level, rng, size):
    """The passes start with the values before a 64-byte boundary: data from each 4-byte offset of one,
    with its extremes in the head, the body and the tail in turn."""
    from dmlq.reference import dynamic_quantize_linear as reference

    memory = np.empty(size + 16 + 16, np.float32)
    first = (-memory.ctypes.data % 64) // 4
    for start in range(first, first + 16):
        x = memory[start : start + size]
        x[...] = rng.uniform(-3, 5, size).astype(np.float32)
        x[(start - first) * 7 % size] = -100
        assert _core.value_range(x) == (float(x.min()), float(x.max()))
        out = np.empty(size, np.uint8)
        scale, zero_point = dynamic_quantize_linear(x, out, False)
        y, expected_scale, expected_zero = reference(x, np.uint8)
        np.testing.assert_array_equal(out, y)
        assert scale == expected_scale and zero_point == expected_zero


@pytest.mark.parametrize("values", [[1.0, np.nan, -2.0], [np.inf, 1.0], [0.0, 0.0], [1e-40, -1e-39]])
def test_dynamic_quantize_linear_where_the_compiled_pass_declines(level, values):
    """NaN, infinities, all-zero and subnormal data take the element-wise quantize: the same bits."""
    from dmlq.reference import dynamic_quantize_linear as reference

    x = np.float32(values * 50)
    out = np.empty(x.shape, np.uint8)
    scale, zero_point, quantized = _core.dynamic_quantization(x, False, out)
    assert not quantized or np.isfinite(x).all()
    dynamic_quantize_linear(x, out, False)
    np.testing.assert_array_equal(out, reference(x, np.uint8)[0])


def test_dynamic_quantization_writes_only_layouts_it_takes(level, rng):
    x = rng.standard_normal((40, 30)).astype(np.float32)
    for out in (np.zeros((30, 40), np.uint8).T, np.zeros((40, 30), np.int8), np.zeros(7, np.uint8)):
        assert _core.dynamic_quantization(x, False, out)[2] is False
        assert not out.any()
    assert _core.dynamic_quantization(x[:, ::2], False, np.zeros((40, 15), np.uint8))[2] is False


def dynamic_parameters(lo: float, hi: float, dtype) -> tuple[np.float32, int]:
    """ONNX's scale and zero point (onnx.reference's DynamicQuantizeLinear) in float32, saturated."""
    info = np.iinfo(dtype)
    rmin, rmax = np.minimum(np.float32(0), np.float32(lo)), np.maximum(np.float32(0), np.float32(hi))
    with np.errstate(all="ignore"):
        scale = (np.float32(1) if rmax == rmin else rmax - rmin) / np.float32(info.max - info.min)
        zero = np.rint(np.float32(info.min) - rmin / scale)
    return scale, 0 if np.isnan(zero) else int(np.clip(zero, info.min, info.max))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(
    "values",
    [
        [0.0],
        [1.0, 2.0],
        [-1.0, -2.0],
        [-1.0, 3.0],
        [-3.0, 2.0],
        [np.nan],
        [1e-40, -1e-38],
        [np.inf, -1.0],
        [-np.inf, 1.0],
        [-np.inf, np.inf],
        [3.4e38, -3.4e38],
        [-0.0, np.nan, 5.5],
    ],
)
def test_dynamic_quantization_parameters(values, dtype):
    x = np.float32(values)
    scale, zero, quantized = _core.dynamic_quantization(x, dtype == np.int8)
    assert not quantized  # no out
    expected_scale, expected_zero = dynamic_parameters(x.min(), x.max(), dtype)  # NaN propagates, as NumPy's
    assert np.float32(scale).tobytes() == expected_scale.tobytes() and zero == expected_zero


# ---- onnxruntime CPU, where it is exact --------------------------------------------------------------------


def ort_run(node, inputs: dict, constants: dict, opset: int = 13):
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper, numpy_helper

    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for name, v in inputs.items()
        ],
        [helper.ValueInfoProto(name=name) for name in node.output],
        [numpy_helper.from_array(np.asarray(v), name) for name, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


@pytest.mark.parametrize("types", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)])
def test_matmul_integer_against_onnxruntime(rng, types):
    from onnx import helper

    pytest.importorskip("onnxruntime")
    a, za, b, zb = matmul_operands(rng, *types, (), 33, 129, 70, False, True)
    a, b = exact_on_onnxruntime(random_bytes(rng, (2, 33, 129), types[0]), b)
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    (expected,) = ort_run(node, {"a": a, "b": b}, {"za": za.reshape(()), "zb": zb.reshape(70)})
    out = np.empty(expected.shape, np.int32)
    _core.matmul_integer(a, za[None], np.broadcast_to(b, (2, 129, 70)), zb[None], out)
    np.testing.assert_array_equal(out, expected)


def test_convolution_integer_against_onnxruntime(rng):
    from onnx import helper

    for shape, w_shape, strides, dilations, start, end, groups in GEOMETRIES[:5] + GEOMETRIES[8:11]:
        x, w = random_bytes(rng, shape, np.uint8), random_bytes(rng, w_shape, np.uint8)
        x_zero, w_zero = random_bytes(rng, (), np.uint8), random_bytes(rng, (), np.uint8)
        node = helper.make_node(
            "ConvInteger",
            ["x", "w", "xz", "wz"],
            ["y"],
            strides=strides,
            dilations=dilations,
            pads=[*start, *end],
            group=groups,
        )
        (expected,) = ort_run(node, {"x": x}, {"w": w, "xz": x_zero, "wz": w_zero}, opset=10)
        out = np.empty(expected.shape, np.int32)
        _core.convolution(
            x,
            None,
            x_zero,
            w,
            None,
            w_zero,
            None,
            None,
            None,
            out,
            strides,
            dilations,
            start,
            end,
            groups,
            False,
        )
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("types", [(np.uint8, np.int8, np.uint8), (np.int8, np.int8, np.int8)])
def test_quantized_convolution_against_onnxruntime(rng, types):
    """Power-of-two scales make onnxruntime's float32 requantization exact, and its ties go to even."""
    from onnx import helper

    pytest.importorskip("onnxruntime")
    x_type, w_type, y_type = types
    for shape, w_shape, strides, dilations, start, end, groups in GEOMETRIES[1:5] + GEOMETRIES[8:12]:
        m = w_shape[0]
        x, w = exact_on_onnxruntime(random_bytes(rng, shape, x_type), random_bytes(rng, w_shape, w_type))
        x_scale, y_scale, y_zero = (
            array(2.0**-3, np.float32),
            array(2.0**4, np.float32),
            random_bytes(rng, (), y_type),
        )
        w_scale = (2.0 ** -rng.integers(1, 4, m)).astype(np.float32)
        x_zero, w_zero = random_bytes(rng, (), x_type), array(0, w_type)
        bias = rng.integers(-3000, 3000, m).astype(np.int32)
        node = helper.make_node(
            "QLinearConv",
            ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
            ["y"],
            strides=strides,
            dilations=dilations,
            pads=[*start, *end],
            group=groups,
        )
        constants = {
            "xs": x_scale,
            "xz": x_zero,
            "w": w,
            "ws": w_scale,
            "wz": w_zero,
            "ys": y_scale,
            "yz": y_zero,
            "b": bias,
        }
        (expected,) = ort_run(node, {"x": x}, constants)
        out = np.empty(expected.shape, y_type)
        _core.convolution(
            x,
            x_scale,
            x_zero,
            w,
            w_scale,
            w_zero,
            bias,
            y_scale,
            y_zero,
            out,
            strides,
            dilations,
            start,
            end,
            groups,
            False,
        )
        np.testing.assert_array_equal(out, expected)


def test_dynamic_quantize_linear_against_onnxruntime(rng):
    from onnx import helper

    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero_point"])
    for x in (
        np.float32([0, 2, -3, -2.5, 1.34, 0.5]),
        (rng.standard_normal((128, 768)) * 3).astype(np.float32),
        (rng.random((7, 999)) + 0.5).astype(np.float32),
    ):
        y, scale, zero_point = ort_run(node, {"x": x}, {}, opset=11)
        out = np.empty(x.shape, np.uint8)
        got_scale, got_zero = dynamic_quantize_linear(x, out, False)
        np.testing.assert_array_equal(out, y)
        assert got_scale.tobytes() == scale.tobytes() and got_zero == zero_point
