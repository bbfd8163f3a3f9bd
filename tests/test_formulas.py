"""Every formula against a reference written here with Python floats, ints and Fractions.

Where dmlq follows float32 in the formula's order (quantize's division, the quantized add), the
reference rounds each step to float32 explicitly (``conftest.f32``), and the tests also show that
float32 and float64 arithmetic disagree only at near-ties. The matrix multiply's reference
accumulates Python ints and requantizes with exact rationals.
"""

from __future__ import annotations

import operator
from fractions import Fraction

import numpy as np
import pytest

import dmlq
from conftest import (
    BYTE_RANGES,
    f16,
    f32,
    quantize_scalar,
    read_strided,
    round_even,
    saturate,
    strided_buffer,
    wrap,
)
from dmlq import DataType, Device, TensorDesc, ops

BYTES = ["uint8", "int8"]
# adversarial data overflows float32 on purpose; NumPy's warnings about it are expected
pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")


def random_floats(rng: np.random.Generator, size: int, spread: float = 8.0) -> np.ndarray:
    """float32 values of random sign over many binades."""
    return (rng.standard_normal(size) * np.exp2(rng.uniform(-spread, spread, size))).astype(np.float32)


def random_bytes(rng: np.random.Generator, dtype: str, shape) -> np.ndarray:
    low, high = BYTE_RANGES[dtype]
    return rng.integers(low, high + 1, shape).astype(dtype)


# -- QuantizeLinear ----------------------------------------------------------------------------


def quantize_reference(x, scale, zero_point, dtype: str, reciprocal: bool = False) -> np.ndarray:
    x, scale, zero_point = np.broadcast_arrays(x, scale, zero_point)
    values = [
        quantize_scalar(f32(float(v)), float(s), int(z), dtype, reciprocal=reciprocal)
        for v, s, z in zip(x.ravel(), scale.ravel(), zero_point.ravel())
    ]
    return np.array(values, dtype=dtype).reshape(x.shape)


@pytest.mark.parametrize("dtype", BYTES)
def test_quantize_random(dtype: str, rng: np.random.Generator) -> None:
    x = random_floats(rng, (40, 50))
    scale = np.float32(rng.uniform(0.01, 2.0, (40, 1)))
    zero_point = random_bytes(rng, dtype, (1, 50))
    got = dmlq.quantize_linear(x, scale, zero_point)
    assert got.dtype == dtype
    assert np.array_equal(got, quantize_reference(x, scale, zero_point, dtype))


@pytest.mark.parametrize("dtype", BYTES)
def test_quantize_exact_ties_round_half_to_even(dtype: str) -> None:
    halves = np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)
    for scale in (1.0, 0.25, 2.0**-10, 64.0):
        x = halves * np.float32(scale)
        got = dmlq.quantize_linear(x, np.float32(scale), np.array(0, dtype))
        low, high = BYTE_RANGES[dtype]
        even = [min(max(round(float(h)), low), high) for h in halves]
        assert got.tolist() == even
    ties = dmlq.quantize_linear(np.float32([0.5, 1.5, 2.5, -0.5, -1.5, -2.5]), 1.0, np.uint8(128))
    assert ties.tolist() == [128, 130, 130, 128, 126, 126]


@pytest.mark.parametrize("dtype", BYTES)
def test_quantize_saturates_at_both_ends(dtype: str) -> None:
    low, high = BYTE_RANGES[dtype]
    zero_point = np.array(low + 3, dtype)
    x = np.float32([-1e30, -1000.0, (low - (low + 3)) - 0.6, 0.0, high - low, 1000.0, 1e30])
    got = dmlq.quantize_linear(x, 1.0, zero_point)
    assert got.tolist() == [low, low, low, low + 3, high, high, high]


@pytest.mark.parametrize("dtype", BYTES)
@pytest.mark.parametrize("zero_point", [0, 17, -17])
def test_quantize_nan_is_zero_and_infinities_saturate(dtype: str, zero_point: int) -> None:
    if dtype == "uint8" and zero_point < 0:
        zero_point = 250
    low, high = BYTE_RANGES[dtype]
    x = np.float32([np.nan, -np.nan, np.inf, -np.inf])
    assert dmlq.quantize_linear(x, 0.5, np.array(zero_point, dtype)).tolist() == [0, 0, high, low]
    assert dmlq.quantize_linear(x, -0.5, np.array(zero_point, dtype)).tolist() == [0, 0, low, high]


@pytest.mark.parametrize(
    "scale",
    [-0.37, -1.0, 1e-38, 1.4e-45, 3e-39, 1e30, 3.4e38, -3.4e38, 7.0],
    ids=["neg", "minus1", "tiny", "subnormal_min", "subnormal", "huge", "max", "neg_max", "seven"],
)
def test_quantize_negative_tiny_and_huge_scales(scale: float, rng: np.random.Generator) -> None:
    x = np.concatenate([random_floats(rng, 2000, 60), np.float32([0.0, -0.0, 1.0, -1.0, 3e38, 1e-45])])
    scale32 = np.float32(scale)
    for dtype in BYTES:
        zero_point = random_bytes(rng, dtype, ())
        got = dmlq.quantize_linear(x, scale32, zero_point)
        assert np.array_equal(got, quantize_reference(x, scale32, zero_point, dtype))


def near_tie_inputs(scale: np.float32) -> np.ndarray:
    """float32 values around (k + 0.5) * scale: their quotients straddle the ties."""
    values = [((np.arange(-120, 120) + 0.5) * np.float64(scale)).astype(np.float32)]
    for direction in (np.float32(np.inf), np.float32(-np.inf)):
        current = values[0]
        for _ in range(4):
            current = np.nextafter(current, direction)
            values.append(current)
    return np.concatenate(values)


@pytest.mark.parametrize("scale", [0.0173, 0.1, 0.3, 0.0371, 1.7])
def test_quantize_float32_division_differs_from_float64_only_at_near_ties(scale: float, rng) -> None:
    scale32 = np.float32(scale)
    x = np.concatenate([near_tie_inputs(scale32), random_floats(rng, 20_000, 4)])
    got = dmlq.quantize_linear(x, scale32, np.int8(0)).astype(np.int64)
    assert np.array_equal(got, quantize_reference(x, scale32, np.int8(0), "int8"))
    quotient64 = x.astype(np.float64) / np.float64(scale32)
    exact = np.clip(np.rint(quotient64), -128, 127)
    differs = got != exact
    assert np.all(np.abs(got - exact) <= 1)
    distance_to_tie = np.abs(np.abs(quotient64[differs] % 1.0) - 0.5)
    assert np.all(distance_to_tie <= np.spacing(np.float32(np.abs(quotient64[differs]))))
    assert differs.any()  # float32 division really matters on these inputs


def test_quantize_float16_input_divides_in_float32(rng: np.random.Generator) -> None:
    x = random_floats(rng, 4096, 6).astype(np.float16)
    scale = np.float16(0.0375)
    got = dmlq.quantize_linear(x, scale, np.int8(3))
    want = [quantize_scalar(float(v), float(scale), 3, "int8") for v in x]
    assert got.tolist() == want


def test_quantize_int32_input_goes_through_float32(rng: np.random.Generator) -> None:
    x = np.concatenate(
        [rng.integers(-(2**31), 2**31, 3000), [2**24 + 1, -(2**24) - 3, 2**31 - 1, -(2**31), 0, 127, 255]]
    ).astype(np.int32)
    scale = np.float32(2.0**20)
    got = dmlq.quantize_linear(x, scale, np.uint8(128))
    want = [quantize_scalar(f32(float(v)), float(scale), 128, "uint8") for v in x]
    assert got.tolist() == want


def quantize_descs(n: int, x_type: DataType, out_type: DataType):
    sizes = [1, 1, 1, n]
    return ops.ElementWiseQuantizeLinear(
        input=TensorDesc(x_type, sizes),
        scale=TensorDesc(DataType.FLOAT32, sizes, [0, 0, 0, 0]),
        zero_point=TensorDesc(out_type, sizes, [0, 0, 0, 0]),
        output=TensorDesc(out_type, sizes),
    )


def test_reciprocal_division_reproduces_directml_near_ties() -> None:
    # onnxruntime's DML skips: 5 / 0.039215686 is 127.49999 in float32, but 1 / s is 25.5
    # exactly and 5 * 25.5 = 127.5 rounds to 128 (SPEC-NOTES §6)
    x, scale = np.float32([5.0, -5.0, 5.0, -5.0]), np.float32([0.039215686])
    zero_points = [np.int8([0]), np.int8([0]), np.int8([-23]), np.int8([23])]
    results = {}
    for reciprocal in (False, True):
        op = Device(reciprocal_division=reciprocal).compile_operator(
            quantize_descs(1, DataType.FLOAT32, DataType.INT8)
        )
        out = []
        for value, zero_point in zip(x, zero_points):
            y = np.zeros(1, np.int8)
            op.execute([np.float32([value]), scale, zero_point], [y])
            out.append(int(y[0]))
        results[reciprocal] = out
    assert results == {False: [127, -127, 104, -104], True: [127, -128, 105, -105]}


def test_reciprocal_division_random(rng: np.random.Generator) -> None:
    x = random_floats(rng, 5000, 5)
    scale, zero_point = np.float32([0.0371]), np.uint8([77])
    op = Device("6_4", reciprocal_division=True).compile_operator(
        quantize_descs(x.size, DataType.FLOAT32, DataType.UINT8)
    )
    out = np.zeros(x.size, np.uint8)
    op.execute([x, scale, zero_point], [out])
    assert np.array_equal(out, quantize_reference(x, scale, zero_point, "uint8", reciprocal=True))


# -- DequantizeLinear --------------------------------------------------------------------------


def dequantize_reference(q, scale, zero_point, out_dtype) -> np.ndarray:
    q, scale, zero_point = np.broadcast_arrays(q, scale, zero_point)
    rounding = f16 if np.dtype(out_dtype) == np.float16 else f32
    values = [
        rounding(f32(f32(float(int(v) - int(z))) * float(s)))
        for v, s, z in zip(q.ravel(), scale.ravel(), zero_point.ravel())
    ]
    return np.array(values, dtype=out_dtype).reshape(q.shape)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16", "uint32", "int32"])
@pytest.mark.parametrize("scale_dtype", ["float32", "float16"])
def test_dequantize_random(dtype: str, scale_dtype: str, rng: np.random.Generator) -> None:
    info = np.iinfo(dtype)
    q = rng.integers(info.min, info.max, (30, 40), endpoint=True).astype(dtype)
    q.ravel()[:4] = [info.min, info.max, info.min, info.max]
    zero_point = rng.integers(info.min, info.max, (30, 1), endpoint=True).astype(dtype)
    zero_point[:2] = [[info.max], [info.min]]
    scale = rng.uniform(-3, 3, (1, 40)).astype(scale_dtype)
    got = dmlq.dequantize_linear(q, scale, zero_point)
    assert got.dtype == scale_dtype
    want = dequantize_reference(q, scale, zero_point, scale_dtype)
    assert np.array_equal(got, want, equal_nan=True)


def test_dequantize_without_zero_point_and_tiny_huge_scales() -> None:
    q = np.int32([0, 1, -1, 2**31 - 1, -(2**31), 2**24 + 1])
    for scale in (1e-45, 3e38, -2.5, 1.0):
        got = dmlq.dequantize_linear(q, np.float32(scale))
        assert np.array_equal(got, dequantize_reference(q, np.float32(scale), np.int32(0), np.float32))


# -- Add ---------------------------------------------------------------------------------------


def test_add_float32_random_and_special(rng: np.random.Generator) -> None:
    a = np.concatenate(
        [random_floats(rng, 5000, 30), np.float32([np.inf, -np.inf, np.nan, 3e38, -0.0, 1e-45])]
    )
    b = np.concatenate([random_floats(rng, 5000, 30), np.float32([-np.inf, 1.0, 2.0, 3e38, 0.0, 1e-45])])
    got = dmlq.add(a, b)
    want = np.array([f32(float(x) + float(y)) for x, y in zip(a, b)], np.float32)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.signbit(got[-2]) == np.signbit(np.float32(-0.0) + np.float32(0.0))


def test_add_float16_rounds_once(rng: np.random.Generator) -> None:
    a = random_floats(rng, 5000, 10).astype(np.float16)
    b = random_floats(rng, 5000, 10).astype(np.float16)
    got = dmlq.add(a, b)
    want = np.array([f16(float(x) + float(y)) for x, y in zip(a, b)], np.float16)
    assert np.array_equal(got, want)


INTEGER_ADD_TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("dtype", INTEGER_ADD_TYPES)
def test_integer_add_wraps_around(dtype: str, rng: np.random.Generator) -> None:
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, 500, endpoint=True, dtype=dtype)
    b = rng.integers(info.min, info.max, 500, endpoint=True, dtype=dtype)
    a[:3], b[:3] = [info.max, info.min, info.max], [1, -1 if info.min else info.max, info.max]
    desc = TensorDesc(DataType[dtype.upper()], [a.size])
    op = Device().compile_operator(ops.ElementWiseAdd(a=desc, b=desc, output=desc))
    out = np.zeros_like(a)
    op.execute([a, b], [out])
    want = [wrap(int(x) + int(y), info.bits, info.min < 0) for x, y in zip(a, b)]
    assert out.tolist() == want


# -- QuantizedLinearAdd ------------------------------------------------------------------------


def quantized_add_scalar(a, a_scale, a_zp, b, b_scale, b_zp, out_scale, out_zp, dtype: str) -> int:
    """The formula in float32, step by step in its written order."""
    a_value = f32(float(a - a_zp) * a_scale)
    b_value = f32(float(b - b_zp) * b_scale)
    total = f32(a_value + b_value)
    return saturate(round_even(f32(total / out_scale)) + out_zp, dtype)


def quantized_add_float64(a, b, scales, zero_points, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """The formula in float64 (each product and the sum exact here): the result and the real quotient."""
    value = (a.astype(np.float64) - zero_points[0]) * scales[0] + (
        b.astype(np.float64) - zero_points[1]
    ) * scales[1]
    value /= scales[2]
    low, high = BYTE_RANGES[dtype]
    return np.clip(np.rint(value) + zero_points[2], low, high), value


SCALE_SETS = [
    (0.02, 0.02, 0.04),
    (0.1, 0.05, 0.3),
    (0.0123, 0.0456, 0.0789),
    (1.0, 1.0, 1.0),
    (2.5, 0.001, 1.3),
]
TYPE_SETS = [("uint8", "uint8", "uint8"), ("int8", "int8", "int8"), ("uint8", "int8", "int8")]


@pytest.mark.parametrize("types", TYPE_SETS)
@pytest.mark.parametrize("scales", SCALE_SETS)
def test_quantized_add_follows_float32_in_the_formulas_order(types, scales, rng: np.random.Generator) -> None:
    a_type, b_type, out_type = types
    a, b = random_bytes(rng, a_type, (16, 128)), random_bytes(rng, b_type, (128,))
    scales = [f32(s) for s in scales]
    zero_points = [int(random_bytes(rng, t, ())) for t in types]
    zero_point_arrays = [np.array(z, t) for z, t in zip(zero_points, types)]
    got = dmlq.quantized_linear_add(
        a,
        scales[0],
        zero_point_arrays[0],
        b,
        scales[1],
        zero_point_arrays[1],
        scales[2],
        zero_point_arrays[2],
    )
    a_all, b_all = np.broadcast_arrays(a, b)
    want = [
        quantized_add_scalar(
            int(x),
            scales[0],
            zero_points[0],
            int(y),
            scales[1],
            zero_points[1],
            scales[2],
            zero_points[2],
            out_type,
        )
        for x, y in zip(a_all.ravel(), b_all.ravel())
    ]
    assert got.dtype == out_type and got.ravel().tolist() == want
    # against float64 arithmetic: at most 1 apart, and only at near-ties
    exact, value = quantized_add_float64(a_all, b_all, scales, zero_points, out_type)
    differs = got != exact
    assert np.all(np.abs(got - exact) <= 1)
    tie_distance = np.abs(np.abs(value[differs] % 1.0) - 0.5)
    assert np.all(tie_distance <= 8 * np.spacing(np.float32(np.abs(value[differs]) + 1)))


def test_quantized_add_float32_and_float64_really_differ() -> None:
    # 0.02 / 0.02 / 0.04: 15 * 0.02 / 0.04 = 7.5 is a tie in real arithmetic (half-even: 8);
    # float32 rounds 15 * 0.02 down first, so the quotient is just below 7.5
    got = dmlq.quantized_linear_add(np.uint8([15]), 0.02, None, np.uint8([0]), 0.02, None, 0.04, None)
    want = quantized_add_scalar(15, f32(0.02), 0, 0, f32(0.02), 0, f32(0.04), 0, "uint8")
    assert got.tolist() == [want] == [7]


@pytest.mark.parametrize("out_type", BYTES)
def test_quantized_add_saturation_and_extreme_scales(out_type: str, rng: np.random.Generator) -> None:
    low, high = BYTE_RANGES[out_type]
    a = np.uint8([0, 255, 255, 0, 128])
    b = np.int8([-128, 127, 127, -128, 0])
    for scales in [
        (1.0, 1.0, 1e-3),
        (1e30, 1e30, 1.0),
        (1e-38, 1e-38, 1e-38),
        (-0.5, 0.25, 0.75),
        (3e38, 3e38, 1e-3),
    ]:
        s = [f32(v) for v in scales]
        got = dmlq.quantized_linear_add(a, s[0], None, b, s[1], None, s[2], np.array(low, out_type))
        want = [
            quantized_add_scalar(int(x), s[0], 0, int(y), s[1], 0, s[2], low, out_type) for x, y in zip(a, b)
        ]
        assert got.tolist() == want
    assert dmlq.quantized_linear_add(a, 1.0, None, b, 1.0, None, 1e-3, None, dtype=out_type).tolist()[:2] == [
        low,
        high,
    ]


def test_quantized_add_overflow_to_infinity_saturates() -> None:
    # (255 * 3e38) overflows float32 to inf; inf + (-inf) is NaN, which gives 0
    got = dmlq.quantized_linear_add(
        np.uint8([255, 255]), 3e38, None, np.int8([0, -128]), 3e38, None, 1.0, None
    )
    assert got.tolist() == [255, 0]


# -- QuantizedLinearMatrixMultiply -------------------------------------------------------------


def matmul_exact(a, a_scale, a_zp, b, b_scale, b_zp, out_scale, out_zp, dtype: str) -> np.ndarray:
    """2-D reference: Python-int sums, exact rational requantization, halves to even."""
    m, k = a.shape
    n = b.shape[1]
    per_row = [
        np.broadcast_to(np.asarray(v), (m, 1)).ravel().tolist() for v in (a_scale, a_zp, out_scale, out_zp)
    ]
    per_column = [
        np.broadcast_to(np.asarray(v).reshape(1, -1), (1, n)).ravel().tolist() for v in (b_scale, b_zp)
    ]
    (a_s, a_z, o_s, o_z), (b_s, b_z) = per_row, per_column
    rows = [[int(v) - int(a_z[i]) for v in a[i]] for i in range(m)]
    columns = [[int(b[r][j]) - int(b_z[j]) for r in range(k)] for j in range(n)]
    low, high = BYTE_RANGES[dtype]
    out = np.empty((m, n), dtype)
    for i in range(m):
        for j in range(n):
            acc = sum(map(operator.mul, rows[i], columns[j]))
            value = (
                Fraction(acc) * Fraction(float(a_s[i])) * Fraction(float(b_s[j])) / Fraction(float(o_s[i]))
            )
            out[i, j] = min(max(round(value) + int(o_z[i]), low), high)
    return out


def output_quantization(a, a_scale, a_zp, b, b_scale, b_zp, dtype: str, per_tensor: bool):
    """An output scale and zero point (per-tensor or per-row) that keep most results in range."""
    real = (a.astype(np.float64) - a_zp) @ (b.astype(np.float64) - b_zp) * a_scale * b_scale
    axis = None if per_tensor else 1
    centre, spread = real.mean(axis=axis, keepdims=True), real.std(axis=axis, keepdims=True) + 1
    scale = np.float32(spread / 40)
    low, high = BYTE_RANGES[dtype]
    zero_point = np.clip((low + high) // 2 - np.rint(centre / scale), low, high).astype(dtype)
    return (scale.reshape(()), zero_point.reshape(())) if per_tensor else (scale, zero_point)


@pytest.mark.parametrize(
    "a_type, b_type", [("uint8", "int8"), ("uint8", "uint8"), ("int8", "int8"), ("int8", "uint8")]
)
@pytest.mark.parametrize("granularity", ["tensor", "row_column"])
def test_matrix_multiply_random(a_type: str, b_type: str, granularity: str, rng: np.random.Generator) -> None:
    m, k, n = 7, 33, 9
    a = random_bytes(rng, a_type, (m, k))
    b = random_bytes(rng, b_type, (k, n))
    if granularity == "tensor":
        a_scale, b_scale = np.float32(0.02), np.float32(0.013)
        a_zp, b_zp = random_bytes(rng, a_type, ()), random_bytes(rng, b_type, ())
    else:
        a_scale, b_scale = (
            np.float32(rng.uniform(0.01, 0.03, (m, 1))),
            np.float32(rng.uniform(0.005, 0.02, n)),
        )
        a_zp, b_zp = random_bytes(rng, a_type, (m, 1)), random_bytes(rng, b_type, (1, n))
    out_scale, out_zp = output_quantization(
        a, a_scale, a_zp, b, b_scale, b_zp, a_type, granularity == "tensor"
    )
    got = dmlq.quantized_linear_matrix_multiply(a, a_scale, a_zp, b, b_scale, b_zp, out_scale, out_zp)
    want = matmul_exact(a, a_scale, a_zp, b, b_scale, b_zp, out_scale, out_zp, a_type)
    assert np.array_equal(got, want)
    low, high = BYTE_RANGES[a_type]
    assert 0.5 < np.mean((want > low) & (want < high))  # mostly unsaturated: the test sees real values


def test_matrix_multiply_exact_ties_round_half_to_even() -> None:
    a = np.uint8([[1, 2, 3, 4, 5, 6, 7]]).T  # [7, 1]
    b = np.uint8([[1, 3, 5, 7, 9]])  # [1, 5]: products are odd, / 2 is a tie
    got = dmlq.quantized_linear_matrix_multiply(a, 1.0, None, b, 1.0, None, 2.0, None)
    assert np.array_equal(got, matmul_exact(a, 1.0, 0, b, 1.0, 0, 2.0, 0, "uint8"))
    assert got[0].tolist() == [0, 2, 2, 4, 4]  # 0.5, 1.5, 2.5, 3.5, 4.5


@pytest.mark.parametrize("a_type, b_type", [("uint8", "int8"), ("uint8", "uint8"), ("int8", "int8")])
def test_matrix_multiply_k_70000_accumulates_exactly(a_type: str, b_type: str) -> None:
    k = 70_000
    a_info, b_info = np.iinfo(a_type), np.iinfo(b_type)
    a = np.full((2, k), a_info.max, a_type)
    a[1] = a_info.min
    b = np.full((k, 3), b_info.max, b_type)
    b[:, 1] = b_info.min
    b[::2, 2] = b_info.min
    sums = [[k * int(x) * int(y) for y in (b_info.max, b_info.min)] for x in (a_info.max, a_info.min)]
    assert max(abs(s) for row in sums for s in row) > 2**31 or a_type == b_type == "int8"  # wraps in 32 bits
    out_scale = np.float32(2.0**26 * 1.5)  # every product in range, and rounding matters
    got = dmlq.quantized_linear_matrix_multiply(a, 1.0, None, b, 1.0, None, out_scale, None, dtype="int8")
    want = matmul_exact(a, 1.0, 0, b, 1.0, 0, out_scale, 0, "int8")
    assert np.array_equal(got, want)
    assert np.count_nonzero((want > -128) & (want < 127)) >= 4
    # zero points make |x - zp| reach 255 on both sides
    got = dmlq.quantized_linear_matrix_multiply(
        a,
        0.5,
        np.array(a_info.min, a_type),
        b,
        0.25,
        np.array(b_info.min, b_type),
        2.0**24,
        None,
        dtype="uint8",
    )
    want = matmul_exact(a, 0.5, a_info.min, b, 0.25, b_info.min, 2.0**24, 0, "uint8")
    assert np.array_equal(got, want)
    assert k * 255 * 255 > 2**32 and want[0, 0] == round(k * 255 * 255 / 2**27)


def test_matrix_multiply_batches_broadcast_like_numpy_matmul(rng: np.random.Generator) -> None:
    a = random_bytes(rng, "uint8", (2, 1, 4, 6))
    b = random_bytes(rng, "int8", (3, 6, 5))
    got = dmlq.quantized_linear_matrix_multiply(
        a, 0.1, np.uint8(100), b, 0.05, np.int8(-3), 0.4, np.uint8(120)
    )
    assert got.shape == (2, 3, 4, 5)
    for i in range(2):
        for j in range(3):
            want = matmul_exact(a[i, 0], 0.1, 100, b[j], 0.05, -3, 0.4, 120, "uint8")
            assert np.array_equal(got[i, j], want)


def test_matrix_multiply_saturation_negative_scales_one_element() -> None:
    a, b = np.int8([[-128]]), np.int8([[-128]])
    assert dmlq.quantized_linear_matrix_multiply(a, 1.0, None, b, 1.0, None, 1.0, None).tolist() == [[127]]
    assert dmlq.quantized_linear_matrix_multiply(a, -1.0, None, b, 1.0, None, 1.0, None).tolist() == [[-128]]
    got = dmlq.quantized_linear_matrix_multiply(a, -0.5, np.int8(3), b, 0.25, None, 64.0, np.int8(-7))
    assert np.array_equal(got, matmul_exact(a, -0.5, 3, b, 0.25, 0, 64.0, -7, "int8"))
    assert dmlq.quantized_linear_matrix_multiply(a, 1e-30, None, b, 1e-30, None, 1e30, None).tolist() == [[0]]


# -- strided views through the DirectML layer -----------------------------------------------


def test_quantize_transposed_and_broadcast_buffers() -> None:
    """Input column-major, scale per column and zero point per row through zero strides, output transposed."""
    x = np.float32([[0.5, 1.5, -2.5], [3.25, -7.0, 100.0]])  # logical [2, 3]
    scale, zero_point = np.float32([0.5, 1.0, 2.0]), np.int8([-3, 5])
    sizes = [2, 3]
    desc = ops.ElementWiseQuantizeLinear(
        input=TensorDesc(DataType.FLOAT32, sizes, [1, 2]),
        scale=TensorDesc(DataType.FLOAT32, sizes, [0, 1]),
        zero_point=TensorDesc(DataType.INT8, sizes, [1, 0]),
        output=TensorDesc(DataType.INT8, sizes, [1, 3]),  # column-major with one padding element
    )
    op = Device("3_0").compile_operator(desc)
    out = np.full(8, 99, np.int8)
    op.execute([strided_buffer(x, sizes, [1, 2], np.float32), scale, zero_point], [out])
    want = [
        quantize_scalar(float(x[i, j]), float(scale[j]), int(zero_point[i]), "int8")
        for i in range(2)
        for j in range(3)
    ]
    assert read_strided(out, sizes, [1, 3]) == want
    assert out[[2, 5]].tolist() == [99, 99]  # padding untouched


def test_dequantize_padded_and_broadcast_buffers() -> None:
    q = np.uint16([[1, 65535, 300], [0, 7, 40000]])
    sizes = [2, 3]
    desc = ops.ElementWiseDequantizeLinear(
        input=TensorDesc(DataType.UINT16, sizes, [4, 1]),
        scale=TensorDesc(DataType.FLOAT16, sizes, [0, 0]),
        zero_point=TensorDesc(DataType.UINT16, sizes, [1, 0]),
        output=TensorDesc(DataType.FLOAT16, sizes, [1, 2]),
    )
    op = Device("6_0").compile_operator(desc)
    out = np.zeros(6, np.float16)
    op.execute([strided_buffer(q, sizes, [4, 1], np.uint16), np.float16([0.01]), np.uint16([100, 2])], [out])
    want = dequantize_reference(q, np.float16(0.01), np.uint16([[100], [2]]), np.float16)
    assert read_strided(out, sizes, [1, 2]) == want.ravel().tolist()


def test_add_broadcast_and_transposed_operands_eight_dimensions(rng: np.random.Generator) -> None:
    sizes = [2, 1, 2, 1, 1, 2, 1, 3]
    n = int(np.prod(sizes))
    a = random_floats(rng, 6)
    b = random_floats(rng, n)
    a_strides = [0, 0, 0, 0, 0, 3, 0, 1]  # a [2, 3] block repeated
    b_strides = [1, 1, 2, 1, 1, 4, 1, 8]  # b laid out in reverse dimension order
    desc = ops.ElementWiseAdd1(
        a=TensorDesc(DataType.FLOAT32, sizes, a_strides),
        b=TensorDesc(DataType.FLOAT32, sizes, b_strides),
        output=TensorDesc(DataType.FLOAT32, sizes),
    )
    op = Device("3_0").compile_operator(desc)
    out = np.zeros(n, np.float32)
    op.execute([a, b], [out])
    a_values, b_values = read_strided(a, sizes, a_strides), read_strided(b, sizes, b_strides)
    assert out.tolist() == [f32(x + y) for x, y in zip(a_values, b_values)]


def test_quantized_add_strided_operands() -> None:
    a = np.uint8([10, 200, 33])  # broadcast along rows
    b = np.int8([[-5, 7], [100, -128], [0, 127]])  # logical [2, 3] stored transposed
    sizes, one = [2, 3], TensorDesc(DataType.FLOAT32, [1, 1])
    desc = ops.ElementWiseQuantizedLinearAdd(
        a=TensorDesc(DataType.UINT8, sizes, [0, 1]),
        a_scale=one,
        a_zero_point=TensorDesc(DataType.UINT8, [1, 1]),
        b=TensorDesc(DataType.INT8, sizes, [1, 2]),
        b_scale=one,
        b_zero_point=None,
        output_scale=one,
        output_zero_point=None,
        output=TensorDesc(DataType.INT8, sizes, [3, 1]),
    )
    op = Device("4_0").compile_operator(desc)
    out = np.zeros(6, np.int8)
    scales = (np.float32([0.1]), np.float32([0.07]), np.float32([0.3]))
    op.execute([a, scales[0], np.uint8([20]), b.ravel(), scales[1], None, scales[2], None], [out])
    a_values, b_values = read_strided(a, sizes, [0, 1]), read_strided(b.ravel(), sizes, [1, 2])
    want = [
        quantized_add_scalar(x, f32(0.1), 20, y, f32(0.07), 0, f32(0.3), 0, "int8")
        for x, y in zip(a_values, b_values)
    ]
    assert out.tolist() == want


def test_matrix_multiply_strided_operands(rng: np.random.Generator) -> None:
    m, k, n, batch = 3, 5, 4, 2
    a = random_bytes(rng, "uint8", (m, k))
    b = random_bytes(rng, "int8", (batch, k, n))
    a_scale, out_scale, out_zp = np.float32([0.1, 0.2, 0.3]), np.float32([0.5]), np.uint8([7, 8, 9])
    b_scale = np.float32(rng.uniform(0.01, 0.05, n))
    desc = ops.QuantizedLinearMatrixMultiply(
        a=TensorDesc(DataType.UINT8, [batch, m, k], [0, 1, m]),  # one column-major A for both batches
        a_scale=TensorDesc(DataType.FLOAT32, [1, m, 1]),
        a_zero_point=None,
        b=TensorDesc(DataType.INT8, [batch, k, n]),
        b_scale=TensorDesc(DataType.FLOAT32, [1, 1, n]),
        b_zero_point=None,
        output_scale=TensorDesc(DataType.FLOAT32, [1, m, 1], [0, 0, 0]),  # per-tensor spelled per-row
        output_zero_point=TensorDesc(DataType.UINT8, [1, m, 1]),
        output=TensorDesc(DataType.UINT8, [batch, m, n], [1, batch * n, batch]),  # batches interleaved
    )
    op = Device("4_0").compile_operator(desc)
    out = np.zeros(batch * m * n, np.uint8)
    a_buffer = np.ascontiguousarray(a.T).ravel()
    op.execute([a_buffer, a_scale, None, b.ravel(), b_scale, None, out_scale, out_zp], [out])
    got = np.array(read_strided(out, [batch, m, n], [1, batch * n, batch])).reshape(batch, m, n)
    for i in range(batch):
        want = matmul_exact(
            a, a_scale.reshape(m, 1), 0, b[i], b_scale, 0, out_scale, out_zp.reshape(m, 1), "uint8"
        )
        assert np.array_equal(got[i], want)


@pytest.mark.parametrize("ndim", [1, 8])
def test_one_element_and_eight_dimension_tensors(ndim: int, rng: np.random.Generator) -> None:
    shape = (1,) * ndim if ndim == 1 else (2, 1, 3, 1, 2, 1, 1, 2)
    x = random_floats(rng, shape, 3)
    got = dmlq.quantize_linear(x, np.float32(0.1), np.int8(1))
    assert got.shape == shape
    assert np.array_equal(got, quantize_reference(x, np.float32(0.1), np.int8(1), "int8"))
    q = dmlq.dequantize_linear(got, np.float32(0.1), np.int8(1))
    assert np.array_equal(q, dequantize_reference(got, np.float32(0.1), np.int8(1), np.float32))
    s = dmlq.add(x, x)
    assert s.tolist() == (x.astype(np.float64) * 2).astype(np.float32).tolist()
    qa = dmlq.quantized_linear_add(got, 0.1, np.int8(1), got, 0.2, np.int8(1), 0.3, np.int8(0))
    want = [
        quantized_add_scalar(int(v), f32(0.1), 1, int(v), f32(0.2), 1, f32(0.3), 0, "int8")
        for v in got.ravel()
    ]
    assert qa.ravel().tolist() == want


# -- reciprocal division (the GPU's x * float32(1 / scale)) on the requantizing operators ----


def test_quantized_add_reciprocal_division(rng: np.random.Generator) -> None:
    a, b = random_bytes(rng, "uint8", (4, 64)), random_bytes(rng, "uint8", (4, 64))
    one = TensorDesc(DataType.FLOAT32, [1, 1])
    data = TensorDesc(DataType.UINT8, [4, 64])
    desc = ops.ElementWiseQuantizedLinearAdd(
        a=data, a_scale=one, b=data, b_scale=one, output_scale=one, output=data
    )
    op = Device(reciprocal_division=True).compile_operator(desc)
    scales = [f32(0.0173), f32(0.0291), f32(0.0537)]
    out = np.zeros((4, 64), np.uint8)
    buffers = [
        a,
        np.float32([scales[0]]),
        None,
        b,
        np.float32([scales[1]]),
        None,
        np.float32([scales[2]]),
        None,
    ]
    op.execute(buffers, [out])
    reciprocal = f32(1.0 / scales[2])
    want = [
        saturate(round_even(f32(f32(f32(x * scales[0]) + f32(y * scales[1])) * reciprocal)), "uint8")
        for x, y in zip(a.ravel().tolist(), b.ravel().tolist())
    ]
    assert out.ravel().tolist() == want


# -- large tensors: the kernels split work across threads and K across chunks ---------------


def test_large_element_wise_tensors(rng: np.random.Generator) -> None:
    n = 300_000
    x = random_floats(rng, n, 6)
    got = dmlq.quantize_linear(x, np.float32(0.05), np.int8(-7))
    quotient = x / np.float32(0.05)  # an IEEE float32 division, as the formula asks
    assert quotient.dtype == np.float32
    want = np.where(np.isnan(quotient), 0, np.clip(np.rint(quotient) + np.float32(-7), -128, 127)).astype(
        np.int8
    )
    assert np.array_equal(got, want)
    q = rng.integers(-(2**31), 2**31, n).astype(np.int32)
    got = dmlq.dequantize_linear(q, np.float32(3e-7), np.int32(12345))
    assert np.array_equal(got, ((q.astype(np.int64) - 12345).astype(np.float32) * np.float32(3e-7)))
    a, b = random_bytes(rng, "int8", n), random_bytes(rng, "int8", n)
    s = [np.float32(v) for v in (0.0173, 0.0291, 0.0537)]
    got = dmlq.quantized_linear_add(a, s[0], np.int8(3), b, s[1], np.int8(-9), s[2], np.int8(1))
    total = (a.astype(np.float32) - np.float32(3)) * s[0] + (b.astype(np.float32) - np.float32(-9)) * s[1]
    assert total.dtype == np.float32
    assert np.array_equal(got, np.clip(np.rint(total / s[2]) + np.float32(1), -128, 127).astype(np.int8))


def test_large_matrix_multiply(rng: np.random.Generator) -> None:
    m, k, n = 96, 40_000, 80
    a = random_bytes(rng, "uint8", (m, k))
    b = random_bytes(rng, "int8", (k, n))
    a_scale, b_scale = np.float32(0.01), np.float32(rng.uniform(0.001, 0.002, n))
    out_scale = np.float32(rng.uniform(0.5, 1.5, (m, 1)))
    got = dmlq.quantized_linear_matrix_multiply(
        a, a_scale, np.uint8(128), b, b_scale, np.int8(1), out_scale, np.uint8(128)
    )
    acc = (a.astype(np.float64) - 128) @ (b.astype(np.float64) - 1)  # integers below 2**53: exact
    value = acc * (np.float64(a_scale) * b_scale.astype(np.float64)) / out_scale.astype(np.float64)
    assert np.array_equal(got, np.clip(np.rint(value) + 128, 0, 255).astype(np.uint8))
    assert 0.9 < np.mean((got > 0) & (got < 255))
    spot = [(0, 0), (m - 1, n - 1), (m // 2, 7)]
    for i, j in spot:
        want = matmul_exact(
            a[i : i + 1], a_scale, 128, b[:, j : j + 1], b_scale[j], 1, out_scale[i], 128, "uint8"
        )
        assert got[i, j] == want[0, 0]
