"""The compiled kernels (dmlq._core through dmlq.kernels) give the NumPy references' bits.

Every test runs at each instruction-set level this CPU offers (portable C, AVX2, AVX-512, AVX-512
VNNI), so the paths a machine never takes by itself are checked here too. Inputs are adversarial:
odd sizes and vector tails, strided, transposed and broadcast (zero-stride) views, float16, NaN,
infinities, exact .5 ties, huge and tiny and negative scales, and the largest integer products.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import dmlq
from dmlq import DataType, Device, TensorDesc, _core, activations, kernels, ops, reference
from dmlq.threads import available_cores

U8, I8, F16, F32 = np.uint8, np.int8, np.float16, np.float32
BYTES = (U8, I8)
GUARD = 0xA5
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the references overflow on purpose


@pytest.fixture
def threads():
    previous = dmlq.get_num_threads()
    yield
    dmlq.set_num_threads(previous)


def bits(array: np.ndarray) -> np.ndarray:
    """The raw bits, so that NaN payloads and the sign of zero count."""
    return np.ascontiguousarray(array).view(f"u{array.dtype.itemsize}")


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    differ = bits(got) != bits(want)
    assert not differ.any(), (
        f"{differ.sum()} of {differ.size} differ: {got[differ][:5]} vs {want[differ][:5]}"
    )


def integers(rng, dtype, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def floats(rng, shape, dtype=F32, scale=100.0) -> np.ndarray:
    """Normal values with NaN, ±inf, exact .5 ties, huge, tiny and signed zeros mixed in."""
    values = rng.standard_normal(shape) * scale
    kind = rng.integers(0, 12, shape)
    values[kind == 0] = np.nan
    values[kind == 1] = np.inf
    values[kind == 2] = -np.inf
    values[kind == 3] = np.round(values[kind == 3]) + 0.5
    values[kind == 4] = rng.choice([1e30, -1e30, 1e-30, -1e-40, 0.0, -0.0], (kind == 4).sum())
    with np.errstate(over="ignore"):
        return values.astype(dtype)


def views_of(rng, shape, make, layout):
    """A view of ``shape`` laid out as 'packed', 'strided' (every other element), 'transposed'
    (reversed axis order in memory) or 'broadcast' (zero strides along all but the last axis)."""
    if layout == "strided":
        return make((*shape[:-1], 2 * shape[-1]))[..., ::2]
    if layout == "transposed":
        return np.transpose(make(shape[::-1]))
    if layout == "broadcast":
        return np.broadcast_to(make(shape[-1:]), shape)
    return make(shape)


SHAPES = [(1,), (7,), (16,), (33,), (3, 5, 17), (2, 1, 3, 1, 65), (40_000,)]
LAYOUTS = ["packed", "strided", "transposed", "broadcast"]


# -- element-wise operators ---------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_quantize(level, shape, layout):
    rng = np.random.default_rng(len(shape) * 7 + LAYOUTS.index(layout))
    cases = [(x_type, out_type, zero, reciprocal, per_axis)
             for x_type in (F32, F16, np.int32) for out_type in BYTES for zero in (True, False)
             for reciprocal in (False, True) for per_axis in (False, True)]  # fmt: skip
    for x_type, out_type, zero, reciprocal, per_axis in cases:
        if x_type == np.int32:
            x = views_of(rng, shape, lambda s: integers(rng, np.int32, s), layout)
        else:
            x = views_of(rng, shape, lambda s, t=x_type: floats(rng, s, t), layout)
        scale_type = F16 if x_type == F16 else F32
        scale_values = rng.choice([0.37, -2.0, 1e-3, 3e5, 0.5], shape[-1:] if per_axis else (1,))
        scale = np.broadcast_to(scale_values.astype(scale_type), shape)
        zero_point = np.broadcast_to(integers(rng, out_type, (1,)), shape) if zero else None
        want = reference.quantize_linear(x, scale, zero_point, out_type, reciprocal_division=reciprocal)
        got = np.empty(shape, out_type)
        kernels.quantize_linear(None, {"input": x, "scale": scale, "zero_point": zero_point}, got, reciprocal)
        assert_same(got, want)


def test_quantize_near_ties(level):
    """Values within a few ulps of (k + 0.5) * scale, where a multiply by 1 / scale would misround."""
    rng = np.random.default_rng(9)
    for scale in (F32(0.1), F32(0.37), F32(3.0), F32(1 / 3), F32(7e-3)):
        ties = ((rng.integers(-300, 300, 4096) + 0.5) * np.float64(scale)).astype(F32)
        x = np.nextafter(ties, np.where(rng.random(4096) < 0.5, np.inf, -np.inf).astype(F32))
        x = np.concatenate([ties, x, np.nextafter(x, F32(np.inf))])
        for out_type in BYTES:
            zero_point = np.broadcast_to(out_type(1), x.shape)
            scales = np.broadcast_to(scale, x.shape)
            want = reference.quantize_linear(x, scales, zero_point, out_type)
            got = np.empty(x.shape, out_type)
            kernels.quantize_linear(None, {"input": x, "scale": scales, "zero_point": zero_point}, got, False)
            assert_same(got, want)


def misrounded_by_the_reciprocal(rng, scale, size) -> np.ndarray:
    """Finite values near (k + 0.5) * scale where x * (1 / scale) rounds to the other integer than
    x / scale, and is not itself a half-integer: a kernel that trusts the product there misrounds."""
    ties = ((rng.integers(-300, 300, 100 * size) + 0.5) * np.float64(scale)).astype(F32)
    x = np.nextafter(ties, np.where(rng.random(ties.size) < 0.5, np.inf, -np.inf).astype(F32))
    product = x * (F32(1) / scale)
    misrounded = (np.rint(x / scale) != np.rint(product)) & (product % 1 != 0.5)
    return x[misrounded][:size]


@pytest.mark.parametrize("x_offset, out_offset", [(0, 0), (1, 0), (0, 1), (3, 63)])
def test_quantize_every_length_alignment_and_route(level, x_offset, out_offset):
    """Lengths 0-199 across the kernels' heads, blocks and tails, misaligned x and out; x plain
    values with values the reciprocal misrounds mixed in, or adversarial (NaN, infinities, ties,
    huge); by division, by the estimate that may skip it (scale 0.37: a normal reciprocal) and by
    reciprocal_division; nothing written past the end."""
    rng = np.random.default_rng(x_offset * 64 + out_offset)
    scale, zero = F32(0.37), U8(200)
    plain = (rng.standard_normal(200 + x_offset) * 30).astype(F32)
    picked = rng.random(plain.size) < 0.3
    plain[picked] = misrounded_by_the_reciprocal(rng, scale, picked.sum())
    adversarial = floats(rng, 200 + x_offset)
    adversarial[rng.random(adversarial.size) < 0.05] = F32(3e9)
    for x_all, scale_value, reciprocal in (
        (plain, scale, False), (adversarial, scale, False), (plain, scale, True), (adversarial, scale, True),
        (adversarial, F32(1e-45), False),  # no normal reciprocal: no estimate
    ):  # fmt: skip
        for n in range(200):
            x = x_all[x_offset : x_offset + n]
            for out_type in BYTES:
                out = np.zeros(out_offset + n + 64, out_type)[out_offset:]
                inputs = {"input": x, "scale": np.broadcast_to(scale_value, x.shape),
                          "zero_point": np.broadcast_to(zero.view(out_type), x.shape)}  # fmt: skip
                kernels.quantize_linear(None, inputs, out[:n], reciprocal)
                want = reference.quantize_linear(x, inputs["scale"], inputs["zero_point"], out_type,
                                                 reciprocal_division=reciprocal)  # fmt: skip
                assert_same(out[:n], want)
                assert not out[n:].any(), n


def test_outputs_large_enough_to_bypass_the_caches(level):
    """8 MiB outputs and more take stores that bypass the caches (elementwise.c), from an aligned head:
    quantize, dequantize, and add with relu."""
    rng = np.random.default_rng(23)
    n = (8 << 20) + 13
    x = floats(rng, n + 1)[1:]
    q = integers(rng, U8, n + 3)[3:]
    scale, zero = np.broadcast_to(F32(0.37), (n,)), np.broadcast_to(U8(128), (n,))
    quantized = np.empty(n + 5, U8)[5:]
    kernels.quantize_linear(None, {"input": x, "scale": scale, "zero_point": zero}, quantized, False)
    assert_same(quantized, reference.quantize_linear(x, scale, zero, U8))
    dequantized = np.empty(n + 1, F32)[1:]
    kernels.dequantize_linear(None, {"input": q, "scale": scale, "zero_point": zero}, dequantized, False)
    assert_same(dequantized, reference.dequantize_linear(q, scale, zero, F32))
    relu = ops.ElementWiseAdd1(fused_activation=activations.Relu())
    added = np.empty(n + 3, F32)[3:]
    kernels.add(relu, {"a": dequantized, "b": x}, added, False)
    assert_same(added, reference.add(dequantized, x, F32, relu.fused_activation))


def test_quantize_nonfinite_scales(level):
    x = np.float32([0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 1e38, 2.5])
    for scale_value in (np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45):
        scale = np.broadcast_to(np.float32(scale_value), x.shape)
        for reciprocal in (False, True):
            zero_point = np.broadcast_to(U8(9), x.shape)
            want = reference.quantize_linear(x, scale, zero_point, U8, reciprocal_division=reciprocal)
            got = np.empty(x.shape, U8)
            kernels.quantize_linear(
                None, {"input": x, "scale": scale, "zero_point": zero_point}, got, reciprocal
            )
            assert_same(got, want)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_dequantize(level, shape, layout):
    rng = np.random.default_rng(len(shape) * 5 + LAYOUTS.index(layout))
    for q_type in (U8, I8, np.uint16, np.int16, np.uint32, np.int32):
        for scale_type, zero in ((F32, True), (F16, False), (F32, False), (F16, True)):
            q = views_of(rng, shape, lambda s, t=q_type: integers(rng, t, s), layout)
            scale = views_of(rng, shape, lambda s, t=scale_type: rng.uniform(-3, 3, s).astype(t), layout)
            zero_point = (
                views_of(rng, shape, lambda s, t=q_type: integers(rng, t, s), "broadcast") if zero else None
            )
            want = reference.dequantize_linear(q, scale, zero_point, scale_type)
            got = np.empty(shape, scale_type)
            kernels.dequantize_linear(
                None, {"input": q, "scale": scale, "zero_point": zero_point}, got, False
            )
            assert_same(got, want)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_quantized_add_every_type_combination(level, shape, layout):
    rng = np.random.default_rng(len(shape) * 3 + LAYOUTS.index(layout))
    for a_type in BYTES:
        for b_type in BYTES:
            for out_type in BYTES:
                a = views_of(rng, shape, lambda s, t=a_type: integers(rng, t, s), layout)
                b = views_of(rng, shape, lambda s, t=b_type: integers(rng, t, s), "packed")
                # 0.02 / 0.02 / 0.04 puts many sums on near-ties where float32 order matters.
                scales = [F32(v) for v in rng.choice([0.02, 0.04, -0.5, 3.0, 1e-4], 3)]
                zeros = [
                    integers(rng, t, ()) if rng.random() < 0.7 else None for t in (a_type, b_type, out_type)
                ]
                for reciprocal in (False, True):
                    want = reference.quantized_linear_add(
                        a,
                        scales[0],
                        zeros[0],
                        b,
                        scales[1],
                        zeros[1],
                        scales[2],
                        zeros[2],
                        out_type,
                        reciprocal_division=reciprocal,
                    )
                    views = {
                        "a": a,
                        "b": b,
                        "a_scale": scales[0],
                        "a_zero_point": zeros[0],
                        "b_scale": scales[1],
                        "b_zero_point": zeros[1],
                        "output_scale": scales[2],
                        "output_zero_point": zeros[2],
                    }
                    views = {
                        k: v if v is None or k in "ab" else np.asarray(v).reshape(1) for k, v in views.items()
                    }
                    got = np.empty(shape, out_type)
                    kernels.quantized_linear_add(None, views, got, reciprocal)
                    assert_same(got, want)


ACTIVATIONS = [
    None,
    activations.Identity(),
    activations.Relu(),
    activations.LeakyRelu(alpha=0.1),
    activations.ThresholdedRelu(alpha=0.3),
    activations.Elu(alpha=0.7),
    activations.Celu(alpha=1.3),
    activations.ScaledElu(),
    activations.Sigmoid(),
    activations.HardSigmoid(beta=-0.0),
    activations.Tanh(),
    activations.ScaledTanh(alpha=1.5, beta=0.3),
    activations.Linear(alpha=0.3, beta=-0.2),
    activations.Softplus(steepness=2.0),
    activations.ParametricSoftplus(alpha=0.5, beta=1.5),
    activations.Softsign(),
    activations.Shrink(bias=0.1, threshold=0.3),
    activations.Gelu(),
]


def float_outputs(q, a, b) -> list[tuple[str, object, dict, np.ndarray]]:
    """(kernel, descriptor, inputs, expected) for dequantize and add, alone and with relu."""
    scale, zero = np.broadcast_to(F32(0.37), q.shape), np.broadcast_to(I8(-3), q.shape)
    relu = ops.ElementWiseAdd1(fused_activation=activations.Relu())
    return [
        ("dequantize_linear", None, {"input": q, "scale": scale, "zero_point": zero},
         reference.dequantize_linear(q, scale, zero, F32)),
        ("add", None, {"a": a, "b": b}, reference.add(a, b, F32, None)),
        ("add", relu, {"a": a, "b": b}, reference.add(a, b, F32, relu.fused_activation)),
    ]  # fmt: skip


@pytest.mark.parametrize("offsets", [(0, 0, 0), (1, 2, 3), (3, 0, 5), (0, 7, 1)], ids=str)
def test_float_outputs_at_every_length_and_alignment(level, offsets):
    """Dequantize and add (alone, with relu) at lengths 0-99 across heads, vectors and tails, with the
    inputs and the float32 output misaligned; nothing written past the end."""
    rng = np.random.default_rng(sum(offsets))
    first, second, out_offset = offsets
    q_all, a_all, b_all = integers(rng, I8, 100 + first), floats(rng, 100 + first), floats(rng, 100 + second)
    for n in range(100):
        q, a, b = q_all[first : first + n], a_all[first : first + n], b_all[second : second + n]
        for kernel, desc, inputs, want in float_outputs(q, a, b):
            out = np.zeros(out_offset + n + 16, F32)[out_offset:]
            getattr(kernels, kernel)(desc, inputs, out[:n], False)
            assert_same(out[:n], want)
            assert not out[n:].any(), (kernel, n)


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: type(a).__name__)
@pytest.mark.parametrize("dtype", [F32, F16])
def test_add_with_every_activation(level, activation, dtype):
    rng = np.random.default_rng(11)
    for shape, layout in (
        ((5_003,), "packed"),
        ((9, 33), "strided"),
        ((4, 3, 17), "transposed"),
        ((6, 40), "broadcast"),
        ((1,), "packed"),
    ):
        a = views_of(rng, shape, lambda s: floats(rng, s, dtype, scale=4.0), layout)
        b = views_of(rng, shape, lambda s: floats(rng, s, dtype, scale=4.0), "packed")
        with np.errstate(all="ignore"):
            want = reference.add(a, b, dtype, activation)
        desc = ops.ElementWiseAdd1(fused_activation=activation) if activation else None
        got = np.empty(shape, dtype)
        kernels.add(desc, {"a": a, "b": b}, got, False)
        assert_same(got, want)


def test_add_signed_zeros_and_nans(level):
    a = np.float32([-0.0, -0.0, 0.0, np.nan, -np.nan, np.inf, np.inf])
    b = np.float32([-0.0, 0.0, -0.0, 1.0, np.nan, -np.inf, np.inf])
    for activation in ACTIVATIONS:
        with np.errstate(all="ignore"):
            want = reference.add(a, b, F32, activation)
        got = np.empty(a.shape, F32)
        kernels.add(ops.ElementWiseAdd1(fused_activation=activation), {"a": a, "b": b}, got, False)
        assert_same(got, want)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"])
def test_integer_add_wraps(level, dtype):
    rng = np.random.default_rng(5)
    a, b = integers(rng, dtype, (3, 37)), integers(rng, dtype, (37,))
    got = np.empty((3, 37), dtype)
    kernels.add(None, {"a": a, "b": np.broadcast_to(b, (3, 37))}, got, False)
    assert_same(got, reference.add(a, np.broadcast_to(b, (3, 37)), dtype))


def test_add_in_place_and_overlapping(level):
    rng = np.random.default_rng(2)
    for dtype in (F32, F16):
        a = floats(rng, (1000,), dtype)
        b = floats(rng, (1000,), dtype)
        with np.errstate(all="ignore"):
            want = reference.add(a, b, dtype, activations.Relu())
        assert dmlq.add(a, b, fused_activation="relu", out=a) is a
        assert_same(a, want)
        buffer = floats(rng, (1001,), dtype)
        with np.errstate(all="ignore"):
            want = reference.add(buffer[1:], buffer[:-1], dtype)
        kernels.add(None, {"a": buffer[1:], "b": buffer[:-1]}, buffer[:-1], False)
        assert_same(buffer[:-1], want)


def test_operands_broadcast_like_numpy_operands(level):
    """The element-wise kernels read lower-rank and size-1 operands through zero strides."""
    rng = np.random.default_rng(3)
    x, scale = floats(rng, (3, 4, 5)), F32([[0.5], [2.0], [-0.25], [1e-3]])  # per-row, rank 2
    zero_point = integers(rng, U8, ())  # 0-d
    got = np.empty(x.shape, U8)
    kernels.quantize_linear(None, {"input": x, "scale": scale, "zero_point": zero_point}, got, False)
    full = {
        "input": x,
        "scale": np.broadcast_to(scale, x.shape),
        "zero_point": np.broadcast_to(zero_point, x.shape),
    }
    assert_same(got, reference.quantize_linear(*full.values(), U8))
    a, b = floats(rng, (6, 1)), floats(rng, (7,))
    got = np.empty((6, 7), F32)
    kernels.add(ops.ElementWiseAdd1(fused_activation=activations.Relu()), {"a": a, "b": b}, got, False)
    with np.errstate(all="ignore"):
        want = reference.add(np.broadcast_to(a, (6, 7)), np.broadcast_to(b, (6, 7)), F32, activations.Relu())
    assert_same(got, want)
    for operand in (floats(rng, (7, 1)), floats(rng, (2, 6, 7))):
        with pytest.raises(ValueError, match="broadcast"):
            kernels.add(None, {"a": operand, "b": b}, got, False)


def test_an_input_at_the_output_address_with_another_shape_is_not_in_place(level):
    """Same address and strides but a broadcast shape: computed on a copy, not read while written."""
    buffer = F32([1.0, 2.0, 3.0, 4.0])
    row = buffer[:1]  # (1,) at the output's address: broadcast, not the output itself
    want = reference.add(np.broadcast_to(row, (4,)), buffer.copy(), F32)
    kernels.add(None, {"a": row, "b": buffer.copy()}, buffer, False)
    assert_same(buffer, want)


def misaligned(values: np.ndarray) -> np.ndarray:
    """A copy of ``values`` at an odd address."""
    memory = np.zeros(values.nbytes + 1, U8)
    copy = np.frombuffer(memory.data, values.dtype, values.size, offset=1).reshape(values.shape)
    copy[...] = values
    return copy


def test_misaligned_and_byte_swapped_operands(level):
    rng = np.random.default_rng(12)
    x = floats(rng, (1001,))
    scale = np.broadcast_to(F32(0.3), x.shape)
    want = reference.quantize_linear(x, scale, None, I8)
    for operand in (misaligned(x), x.astype(">f4")):
        got = np.empty(x.shape, I8)
        kernels.quantize_linear(None, {"input": operand, "scale": scale, "zero_point": None}, got, False)
        assert_same(got, want)
    with np.errstate(all="ignore"):
        want = reference.add(x, x[::-1], F32, activations.Relu())
    out = misaligned(np.zeros(x.shape, F32))
    kernels.add(ops.ElementWiseAdd1(fused_activation=activations.Relu()), {"a": x, "b": x[::-1]}, out, False)
    assert_same(out, want)


# -- quantized matrix multiply ------------------------------------------------------------------


def matmul_case(rng, a, b, a_type, b_type, out_type, per_row, per_column, zeros):
    m, n = a.shape[-2], b.shape[-1]
    a_scale = rng.uniform(0.001, 0.05, (m, 1) if per_row else (1, 1)).astype(F32)
    b_scale = rng.uniform(0.001, 0.05, (1, n) if per_column else (1, 1)).astype(F32)
    out_scale = rng.uniform(0.05, 2.0, (m, 1) if per_row else (1, 1)).astype(F32)
    a_zero = integers(rng, a_type, a_scale.shape) if zeros else None
    b_zero = integers(rng, b_type, b_scale.shape) if zeros else None
    out_zero = integers(rng, out_type, out_scale.shape) if zeros else None
    return {
        "a": a,
        "a_scale": a_scale,
        "a_zero_point": a_zero,
        "b": b,
        "b_scale": b_scale,
        "b_zero_point": b_zero,
        "output_scale": out_scale,
        "output_zero_point": out_zero,
    }


def check_matmul(views, out_type, reciprocal=False):
    want = reference.quantized_linear_matrix_multiply(
        *(
            views[k]
            for k in (
                "a",
                "a_scale",
                "a_zero_point",
                "b",
                "b_scale",
                "b_zero_point",
                "output_scale",
                "output_zero_point",
            )
        ),
        out_type,
        reciprocal_division=reciprocal,
    )
    got = np.empty(want.shape, out_type)
    kernels.quantized_linear_matrix_multiply(None, views, got, reciprocal)
    assert_same(got, want)
    return got


def test_matmul_scales_with_leading_ones_are_read_as_their_last_two_dimensions():
    # DirectML's 4-D scale tensors reach the kernel as they are: {1, 1, M, 1} reads as [M, 1].
    rng = np.random.default_rng(5)
    views = matmul_case(rng, integers(rng, U8, (1, 2, 3, 5)), integers(rng, I8, (1, 2, 5, 4)), U8, I8, U8,
                        True, True, True)  # fmt: skip
    want = check_matmul(views, U8)
    four_d = {
        name: value if name in ("a", "b") else value.reshape(1, 1, *value.shape)
        for name, value in views.items()
    }
    got = np.empty(want.shape, U8)
    _core.matmul(*four_d.values(), got, False)
    assert_same(got, want)
    four_d["b_scale"] = np.ones((2, 1, 1, 4), F32)  # a leading dimension of 2: not one scale per column
    with pytest.raises(
        ValueError, match="b_scale must be a float32 array of 2 dimensions, or more of size 1"
    ):
        _core.matmul(*four_d.values(), got, False)


@pytest.mark.parametrize("a_type", BYTES)
@pytest.mark.parametrize("b_type", BYTES)
@pytest.mark.parametrize("out_type", BYTES)
def test_matmul_every_type_and_quantization(level, a_type, b_type, out_type):
    rng = np.random.default_rng((a_type is U8) * 4 + (b_type is U8) * 2 + (out_type is U8))
    for m, k, n in ((1, 1, 1), (1, 5, 1), (3, 1, 70), (9, 67, 33), (17, 4, 48), (8, 130, 96)):
        for per_row, per_column, zeros in (
            (False, False, False),
            (True, True, True),
            (True, False, True),
            (False, True, False),
            (False, True, True),
        ):
            views = matmul_case(
                rng,
                integers(rng, a_type, (m, k)),
                integers(rng, b_type, (k, n)),
                a_type,
                b_type,
                out_type,
                per_row,
                per_column,
                zeros,
            )
            check_matmul(views, out_type, reciprocal=bool(rng.integers(2)))


@pytest.mark.parametrize("layout", ["transposed", "strided", "batch-broadcast", "batched-4d"])
def test_matmul_layouts(level, layout):
    rng = np.random.default_rng(8)
    m, k, n = 13, 70, 37
    a, b = integers(rng, U8, (2, m, k)), integers(rng, I8, (2, k, n))
    if layout == "transposed":
        a = np.swapaxes(integers(rng, U8, (2, k, m)), -1, -2)
        b = np.swapaxes(integers(rng, I8, (2, n, k)), -1, -2)
    elif layout == "strided":
        a, b = integers(rng, U8, (2, m, 3 * k))[..., ::3], integers(rng, I8, (2, 2 * k, n))[:, ::2]
    elif layout == "batch-broadcast":
        b = np.broadcast_to(integers(rng, I8, (1, k, n)), (2, k, n))
    else:
        a, b = integers(rng, U8, (2, 3, m, k)), np.broadcast_to(integers(rng, I8, (3, 1, k, n)), (3, 3, k, n))
        a = np.broadcast_to(a[:1], (3, 3, m, k))
    views = matmul_case(rng, a, b, U8, I8, U8, True, True, True)
    check_matmul(views, U8)


@pytest.mark.parametrize("a_layout", ["contiguous", "strided"])
@pytest.mark.parametrize("a_type", BYTES)
def test_matmul_every_tile_row_count_and_k_tail(level, a_layout, a_type):
    """M from 1 to 13 (every row count of a partial tile; one and two tiles) and K around the
    kernels' steps of 2, 4 and 8, with A read in place or gathered, flipped or not."""
    rng = np.random.default_rng(21)
    for m in range(1, 14):
        for k in (1, 2, 3, 7, 8, 9, 16, 31):
            a = integers(rng, a_type, (m, 2 * k))
            a = a[:, ::2] if a_layout == "strided" else a[:, :k]
            views = matmul_case(rng, a, integers(rng, I8, (k, 19)), a_type, I8, U8, True, True, True)
            check_matmul(views, U8)


@pytest.mark.parametrize("thread_count", [1, 2])
@pytest.mark.parametrize("b_type", BYTES)
@pytest.mark.parametrize("a_type", BYTES)
def test_matmul_a_few_rows_read_b_in_place(level, threads, thread_count, a_type, b_type):
    """Up to 4 rows (8 at avx512_vnni) with an unpacked row-major B and even K: B read where it lies
    (A - za as words), in steps of k and blocks of columns (several of each here), with a column tail
    copied; more rows with a B this small, and odd K, pack B instead."""
    dmlq.set_num_threads(thread_count)
    rng = np.random.default_rng(22)
    for m in range(1, 10):
        for k, n in ((2, 16), (130, 1043), (300, 2 * 1024 + 16), (31, 40)):
            a, b = integers(rng, a_type, (m, k)), integers(rng, b_type, (k, n))
            views = matmul_case(rng, a, b, a_type, b_type, U8, m % 2 == 1, m % 3 != 0, True)
            check_matmul(views, U8)


@pytest.mark.parametrize("b_type", BYTES)
@pytest.mark.parametrize("m", [5, 8])
def test_matmul_more_rows_read_a_large_b_in_place(threads, m, b_type):
    """5 to 8 rows read B in place once it is (m - 3) * 4 MiB or more (two groups of rows per line of B;
    at the detected level only: the portable kernels pack B at any size)."""
    dmlq.set_num_threads(2)
    rng = np.random.default_rng(m)
    k = 32
    n = (m - 3) * 4 * 2**20 // k + 19
    views = matmul_case(
        rng, integers(rng, U8, (m, k)), integers(rng, b_type, (k, n)), U8, b_type, U8, True, True, True
    )
    check_matmul(views, U8)


def mostly_unsaturated(rng, views):
    """A u8 x s8 case's zero points near the middle of A and B and its output scale grown with sqrt(K), so
    that the sums (~ sqrt(K)) requantize mostly to unsaturated bytes."""
    k = views["a"].shape[-1]
    views["a_zero_point"] = U8(128 + rng.integers(-3, 4, views["a_zero_point"].shape))
    views["b_zero_point"] = I8(rng.integers(-3, 4, views["b_zero_point"].shape))
    views["output_scale"] = views["output_scale"] * np.float32(np.sqrt(k) / 4)
    return views


@pytest.mark.parametrize("thread_count", [1, 2])
@pytest.mark.parametrize(
    "k, n, b_layout", [(2048, 2100, "rows"), (40_000, 60, "rows"), (2048, 2100, "columns")]
)
def test_matmul_a_large_b_packed_a_chunk_at_a_time(level, threads, thread_count, k, n, b_layout):
    """A B of 4 MiB or more packed by the call itself: each thread packs a chunk of B's panels into a
    buffer of its own just before their tiles (here with a column tail, a partial A panel, K beyond one
    int32 chunk, and B's columns contiguous instead of its rows)."""
    dmlq.set_num_threads(thread_count)
    rng = np.random.default_rng(k + n)
    b = integers(rng, I8, (k, n)) if b_layout == "rows" else integers(rng, I8, (n, k)).T
    views = mostly_unsaturated(
        rng, matmul_case(rng, integers(rng, U8, (9, k)), b, U8, I8, U8, True, True, True)
    )
    got = check_matmul(views, U8)
    assert 0.5 < np.mean((got > 0) & (got < 255))


@pytest.mark.parametrize("thread_count", [1, 2, 3])
def test_matmul_many_a_panels_claimed_a_few_at_a_time(level, threads, thread_count):
    """Enough A panels for a unit of work to hold several of them with one block of B (gemm.c's
    a_panels_per_unit), the last group short and its last panel partial, B's last panel too."""
    dmlq.set_num_threads(thread_count)
    rng = np.random.default_rng(thread_count)
    views = matmul_case(
        rng, integers(rng, U8, (267, 200)), integers(rng, I8, (200, 100)), U8, I8, U8, True, True, True
    )
    check_matmul(views, U8)


@pytest.mark.parametrize("thread_count", [1, 2, 3])
@pytest.mark.parametrize("b_batches", [1, 4], ids=["one B", "a B per batch"])
@pytest.mark.parametrize("n", [300, 1500], ids=["a block", "blocks"])
def test_matmul_b_widened_a_block_at_a_time(level, threads, thread_count, b_batches, n):
    """At avx2 (and avx512), 16 A panels or more widen each thread's block of B to words once for all
    of them (gemm.c's widens_b): here one block or several per thread's range, batches shared by the
    threads (1 thread) or taken whole (2 or 3), with a B each or one shared B, partial last panels of A
    and B, and the same B packed beforehand."""
    dmlq.set_num_threads(thread_count)
    rng = np.random.default_rng(thread_count + b_batches)
    a, b = integers(rng, U8, (4, 100, 200)), integers(rng, I8, (b_batches, 200, n))
    views = matmul_case(rng, a, np.broadcast_to(b, (4, 200, n)), U8, I8, U8, True, True, True)
    want = check_matmul(views, U8)
    packed = dmlq.pack_matrix_multiply_b(b, views["b_scale"], views["b_zero_point"])
    arguments = [views[name] for name in ("a", "a_scale", "a_zero_point")]
    got = dmlq.quantized_linear_matrix_multiply(
        *arguments, packed, None, None, views["output_scale"], views["output_zero_point"]
    )
    assert_same(got, want)


@pytest.mark.parametrize("thread_count", [1, 2])
def test_matmul_b_packed_a_chunk_at_a_time_and_widened(level, threads, thread_count):
    """A B of 4 MiB or more packed a chunk at a time by the call, each chunk's blocks widened (avx2, 16 A
    panels or more), the last chunk and panel partial."""
    dmlq.set_num_threads(thread_count)
    rng = np.random.default_rng(thread_count)
    a, b = integers(rng, U8, (100, 1024)), integers(rng, I8, (1024, 4200))
    views = mostly_unsaturated(rng, matmul_case(rng, a, b, U8, I8, U8, False, True, True))
    views["output_zero_point"] = U8(128)
    got = check_matmul(views, U8)
    assert 0.3 < np.mean((got > 0) & (got < 255))


@pytest.mark.parametrize("b_layout", ["4 KiB apart", "8 KiB apart, a tail", "reversed", "one row"])
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_matmul_b_in_place_row_strides(level, m, b_layout):
    """B read in place with rows a multiple of 4 KiB apart (sharing L1 sets: fewer k per step, nothing
    fetched ahead), in reverse order (a negative stride) and one row broadcast over k (stride 0)."""
    rng = np.random.default_rng(m)
    k = 36
    b = {
        "4 KiB apart": integers(rng, I8, (k, 4096)),
        "8 KiB apart, a tail": integers(rng, I8, (k, 8192))[:, :100],
        "reversed": integers(rng, I8, (k, 70))[::-1],
        "one row": np.broadcast_to(integers(rng, I8, (1, 70)), (k, 70)),
    }[b_layout]
    views = matmul_case(rng, integers(rng, U8, (m, k)), b, U8, I8, U8, True, True, True)
    check_matmul(views, U8)


@pytest.mark.parametrize(
    "a_value, a_zero, b_type, b_value, b_zero", [(0, 255, U8, 255, 0), (255, 0, I8, -128, 127)]
)
def test_matmul_b_in_place_at_its_k_limit(level, a_value, a_zero, b_type, b_value, b_zero):
    """K = 32 768, the longest K read in place, with |A - za| = 255 against B's largest magnitude:
    the int32 sums of A - za times B's own bytes at their extreme."""
    m, k, n = 2, 32_768, 19
    views = {
        "a": np.full((m, k), a_value, U8),
        "a_scale": F32([[1.0]]),
        "a_zero_point": U8([[a_zero]]),
        "b": np.full((k, n), b_value, b_type),
        "b_scale": F32([[1.0]]),
        "b_zero_point": b_type([[b_zero]]),
        "output_scale": F32([[2.0**25], [2.0**26]]),
        "output_zero_point": I8([[0], [3]]),
    }
    got = np.abs(check_matmul(views, I8).astype(int))
    assert (got > 20).all() and (got < 127).all()  # exact, unsaturated


@pytest.mark.parametrize(
    "a_type, a_value, a_zero, b_type, b_value, b_zero",
    [
        (U8, 255, 0, I8, -128, 127),
        (U8, 0, 255, I8, 127, -128),
        (I8, -128, 127, U8, 255, 0),
        (U8, 255, 0, U8, 0, 255),
        (I8, 127, -128, I8, 127, -128),
    ],
)
def test_matmul_long_k_with_the_largest_products(level, a_type, a_value, a_zero, b_type, b_value, b_zero):
    """K = 70 000 with |(A - za)(B - zb)| = 255**2 everywhere: beyond int32, beyond one K chunk."""
    m, k, n = 2, 70_000, 3
    views = {
        "a": np.full((m, k), a_value, a_type),
        "a_scale": F32([[1.0]]),
        "a_zero_point": a_type([[a_zero]]),
        "b": np.full((k, n), b_value, b_type),
        "b_scale": F32([[1.0]]),
        "b_zero_point": b_type([[b_zero]]),
        "output_scale": F32([[2.0**26], [2.0**27]]),
        "output_zero_point": I8([[0], [3]]),
    }
    got = check_matmul(views, I8)
    assert (np.abs(got.astype(int)) > 30).all() and (
        np.abs(got.astype(int)) < 127
    ).all()  # exact, unsaturated


def test_matmul_long_k_random(level):
    """K beyond one int32 chunk (32 768) with random operands: every chunk lands on its own k."""
    rng = np.random.default_rng(11)
    m, k, n = 35, 33_000, 37
    views = {
        "a": integers(rng, U8, (m, k)),
        "a_scale": rng.uniform(0.5, 2.0, (m, 1)).astype(F32),
        "a_zero_point": np.full((m, 1), 128, U8),
        "b": integers(rng, I8, (k, n)),
        "b_scale": rng.uniform(0.5, 2.0, (1, n)).astype(F32),
        "b_zero_point": rng.integers(-1, 2, (1, n)).astype(I8),
        "output_scale": rng.uniform(30_000.0, 60_000.0, (m, 1)).astype(F32),
        "output_zero_point": np.full((m, 1), 128, U8),
    }
    got = check_matmul(views, U8)
    assert 0.9 < np.mean((got > 0) & (got < 255))


@pytest.mark.parametrize("b_layout", ["contiguous", "rows reversed", "rows padded"])
@pytest.mark.parametrize("b_type, b_value", [(I8, -128), (I8, 127), (U8, 0), (U8, 255)])
def test_matmul_packs_extreme_columns_exactly(level, b_type, b_value, b_layout):
    """B packed with its column sums (more than 4 rows of A): panels side by side in fours, twos
    and ones and a column tail (N = 117), K over several blocks of the packer's int16 sums and not a
    multiple of 4 (1031), every byte of B at an extreme and one away from its zero point, so that a
    column sum off by anything moves every output."""
    rng = np.random.default_rng(23)
    m, k, n = 9, 1031, 117
    wide = np.full((k, n + 40), b_value, b_type)
    layouts = {"contiguous": wide[:, :n], "rows reversed": wide[::-1, :n], "rows padded": wide[:, 3 : 3 + n]}
    b = layouts[b_layout]
    b_zero = b_value + (1 if b_value == np.iinfo(b_type).min else -1)
    views = {
        "a": integers(rng, U8, (m, k)),
        "a_scale": F32([[1.0]]),
        "a_zero_point": U8([[128]]),
        "b": b,
        "b_scale": F32([[1.0]]),
        "b_zero_point": b_type([[b_zero]]),
        "output_scale": F32([[128.0]]),
        "output_zero_point": U8([[128]]),
    }
    got = check_matmul(views, U8)
    assert ((0 < got) & (got < 255)).all() and len(np.unique(got)) > 3  # every output unclamped


@pytest.mark.parametrize("reciprocal", [False, True])
def test_matmul_exact_and_near_ties(level, reciprocal):
    """Output scales at and next to 2: every odd sum is a tie or a hair away from one."""
    rng = np.random.default_rng(12)
    m, k, n = 40, 70, 50
    a, b = integers(rng, U8, (m, k)), integers(rng, I8, (k, n))
    two = np.float32(2.0)
    for out_scale in (two, np.nextafter(two, F32(0)), np.nextafter(two, F32(4)), F32(2.0**-3), F32(3.0)):
        views = {
            "a": a,
            "a_scale": F32([[1.0]]),
            "a_zero_point": U8([[128]]),
            "b": b,
            "b_scale": F32([[2.0**-8]]),
            "b_zero_point": None,
            "output_scale": F32([[out_scale]]),
            "output_zero_point": U8([[100]]),
        }
        check_matmul(views, U8, reciprocal)


# (a_scale, b_scale, output_scale, output_zero_point) whose float32 estimate of the quotient falls on the
# other side of a tie than the reference's for some sum in -8256..8382 whose byte is not saturated
# (found by a search over random scales): quotients below 128 in magnitude, then between 128 and 250
ESTIMATE_ON_THE_WRONG_SIDE = (
    (0.8708854913711548, 0.5457478165626526, 30.060213088989258, 128),
    (0.6902150511741638, 0.7333105802536011, 32.66273498535156, 128),
    (0.8774871826171875, 0.7033406496047974, 40.315399169921875, 128),
    (0.546601414680481, 0.6590254306793213, 21.673826217651367, 128),
    (0.6728739142417908, 0.7344540953636169, 19.443084716796875, 0),
    (0.8412182927131653, 0.5419446229934692, 15.856830596923828, 0),
    (0.865006148815155, 0.7116806507110596, 20.365455627441406, 0),
)


@pytest.mark.parametrize("output_rows", ["shared", "zero point per row", "scale per row"])
@pytest.mark.parametrize("out_type", [U8, I8])
@pytest.mark.parametrize("a_zero_per_row", [False, True])
@pytest.mark.parametrize("scales", ESTIMATE_ON_THE_WRONG_SIDE)
def test_matmul_requantization_where_the_estimate_is_wrong(
    level, scales, a_zero_per_row, out_type, output_rows
):
    """The kernels' float32 estimate of a quotient is within a few float32 roundings of the
    reference's and must defer to it near a tie. Sums of every integer in -8256..8382 (127 * x + w
    over 130 rows and 256 columns: full and partial tiles), under scales where the estimate rounds some
    of them to the other side of a tie, a hair from it: a margin narrower than the estimate's
    error gives another byte there. The same sums with A's zero point per row (A shifted with it) and
    with an int8 output (its zero point 128 less), and with rows whose output zero point or scale
    differ (every other row's scale doubled: other ties): each route of a kernel (zero points uniform
    or not, output signed or not, the rows' factors shared or not) defers too."""
    x, w = np.arange(-64, 66), np.arange(-128, 128)
    shift = np.arange(x.size)[:, None] % 101 - 50 if a_zero_per_row else np.zeros((1, 1), np.int16)
    a = np.zeros((x.size, 4), np.int16) + 128 + shift
    a[:, 0] += x
    a[:, 1] += 1
    b = np.zeros((4, w.size), np.int16)
    b[0], b[1] = 127, w
    a_scale, b_scale, out_scale, out_zero = scales
    out_zero -= 0 if out_type == U8 else 128
    rows = np.arange(x.size)[:, None]
    out_zero = out_zero + (rows % 3 - 1 if output_rows == "zero point per row" else 0 * rows[:1])
    out_scale = out_scale * (1 + rows % 2 if output_rows == "scale per row" else 1 + 0 * rows[:1])
    views = {
        "a": a.astype(U8),
        "a_scale": np.full(shift.shape, a_scale, F32),
        "a_zero_point": (128 + shift).astype(U8),
        "b": b.astype(I8),
        "b_scale": F32([[b_scale]]),
        "b_zero_point": None,
        "output_scale": F32(out_scale),
        "output_zero_point": np.array(out_zero, out_type),
    }
    check_matmul(views, out_type)


def test_matmul_nonfinite_scales_and_ties(level):
    a, b = np.arange(12, dtype=U8).reshape(3, 4), np.arange(-4, 4, dtype=I8).reshape(4, 2)
    for out_scale in (np.inf, np.nan, -0.0, 2.0, -3.0, 1e-40):
        views = {
            "a": a,
            "a_scale": F32([[1.0]]),
            "a_zero_point": None,
            "b": b,
            "b_scale": F32([[0.5]]),
            "b_zero_point": None,
            "output_scale": F32([[out_scale]]),
            "output_zero_point": U8([[7]]),
        }
        for reciprocal in (False, True):
            check_matmul(views, U8, reciprocal)


def test_matmul_rows_repeating_their_predecessors_parameters(level):
    """Per-row parameters in runs: a row whose scales and zero points are bit for bit the previous
    row's takes that row's quantization. Rows that differ from it in one field only, in a zero's sign,
    or by a NaN (never equal to itself) are computed for themselves."""
    rng = np.random.default_rng(24)
    m, k, n = 19, 40, 37
    a_scale = F32([0.02] * 3 + [0.03] * 4 + [0.03, 0.03, np.nan, np.nan, 0.0, -0.0, 0.0] + [0.02] * 5)
    out_scale = F32([0.5] * 7 + [0.7] + [0.7] * 6 + [-0.0, 0.0, 0.0, 0.5, 0.5])
    out_zero = U8([3] * 8 + [4] + [4] * 10)
    a_zero = U8([100] * 5 + [101] + [100] * 13)
    views = {
        "a": integers(rng, U8, (m, k)),
        "a_scale": a_scale.reshape(m, 1),
        "a_zero_point": a_zero.reshape(m, 1),
        "b": integers(rng, I8, (k, n)),
        "b_scale": F32([[0.01]]),
        "b_zero_point": None,
        "output_scale": out_scale.reshape(m, 1),
        "output_zero_point": out_zero.reshape(m, 1),
    }
    for reciprocal in (False, True):
        check_matmul(views, U8, reciprocal)


@pytest.mark.parametrize("odd_one", [np.nan, np.inf, -np.inf, 1e-40, 3e38, 0.0, -0.0])
def test_matmul_one_odd_column_scale(level, odd_one):
    """One column's scale not finite, denormal, huge or zero among ordinary ones: that column as the
    reference has it, and every other column's fast route undisturbed."""
    rng = np.random.default_rng(23)
    m, k, n = 5, 40, 37
    b_scale = rng.uniform(0.01, 0.02, (1, n)).astype(F32)
    b_scale[0, 21] = odd_one
    views = {
        "a": integers(rng, U8, (m, k)),
        "a_scale": F32([[0.05]]),
        "a_zero_point": U8([[128]]),
        "b": integers(rng, I8, (k, n)),
        "b_scale": b_scale,
        "b_zero_point": rng.integers(-2, 3, (1, n)).astype(I8),
        "output_scale": F32([[0.3]]),
        "output_zero_point": U8([[100]]),
    }
    check_matmul(views, U8)


# -- threads, guards, levels --------------------------------------------------------------------


def test_one_and_two_threads_give_identical_outputs(threads):
    rng = np.random.default_rng(4)
    x = floats(rng, (300_001,))
    q = integers(rng, U8, (300_001,))
    a, b = integers(rng, I8, (2, 150, 300)), integers(rng, U8, (2, 300, 170))
    results = []
    for count in (1, 2):
        dmlq.set_num_threads(count)
        with np.errstate(all="ignore"):
            results.append(
                [
                    dmlq.quantize_linear(x, 0.3, U8(3)),
                    dmlq.dequantize_linear(q, 0.1, U8(9)),
                    dmlq.quantized_linear_add(q, 0.02, None, q[::-1], 0.02, U8(1), 0.04, U8(2)),
                    dmlq.add(x, x[::-1], fused_activation="tanh"),
                    dmlq.quantized_linear_matrix_multiply(a, 0.01, I8(3), b, 0.02, U8(7), 0.5, U8(1)),
                    dmlq.quantized_linear_matrix_multiply(a[0], 0.01, I8(3), b[0], 0.02, U8(7), 0.5, U8(1)),
                ]
            )
    for one, two in zip(*results):
        assert_same(two, one)


def _quantize_in_child(x, want, results):
    results.put(bool(np.array_equal(dmlq.quantize_linear(x, 0.3, U8(3)), want)))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Python 3.12+ on fork() with threads
def test_a_forked_child_runs_the_kernels_on_its_own_threads(threads):
    dmlq.set_num_threads(2)
    x = floats(np.random.default_rng(3), (300_001,))
    with np.errstate(all="ignore"):
        want = dmlq.quantize_linear(x, 0.3, U8(3))  # the parent's threads now exist
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_quantize_in_child, args=(x, want, results))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0 and results.get(timeout=1)


def test_outputs_leave_guard_bytes_and_gaps_untouched(level):
    rng = np.random.default_rng(6)
    device = Device()
    sizes, strides = [3, 70], [141, 2]  # every other byte, and a gap at each row's end
    out_desc = TensorDesc(DataType.UINT8, sizes, strides=strides)
    size = dmlq.calc_buffer_tensor_size(out_desc)
    x = floats(rng, (3, 70))
    x_desc = TensorDesc(DataType.FLOAT32, sizes)
    scalar = TensorDesc(DataType.FLOAT32, sizes, strides=[0, 0])
    op = device.compile_operator(ops.ElementWiseQuantizeLinear(input=x_desc, scale=scalar, output=out_desc))
    buffer = np.full(size + 128, GUARD, U8)
    with np.errstate(all="ignore"):
        op.execute([x, F32([0.25]), None], [buffer[64 : 64 + size]])
    written = np.zeros(size + 128, bool)
    index = 64 + np.add.outer(np.arange(3) * strides[0], np.arange(70) * strides[1])
    written[index] = True
    assert (buffer[~written] == GUARD).all()
    want = reference.quantize_linear(x, np.full(x.shape, F32(0.25)), None, U8)
    assert_same(buffer[index], want)

    a_desc, b_desc = TensorDesc(DataType.UINT8, [5, 9]), TensorDesc(DataType.INT8, [9, 66])
    one = TensorDesc(DataType.FLOAT32, [1, 1])
    mm_out = TensorDesc(DataType.UINT8, [5, 66], strides=[67, 1])
    mm_size = dmlq.calc_buffer_tensor_size(mm_out)
    op = device.compile_operator(
        ops.QuantizedLinearMatrixMultiply(
            a=a_desc, a_scale=one, b=b_desc, b_scale=one, output_scale=one, output=mm_out
        )
    )
    a, b = integers(rng, U8, (5, 9)), integers(rng, I8, (9, 66))
    buffer = np.full(mm_size + 128, GUARD, U8)
    op.execute([a, F32([0.1]), None, b, F32([0.1]), None, F32([0.3]), None], [buffer[64 : 64 + mm_size]])
    view = np.lib.stride_tricks.as_strided(buffer[64:], (5, 66), (67, 1))
    written = np.zeros(mm_size + 128, bool)
    written[64 + np.add.outer(np.arange(5) * 67, np.arange(66))] = True
    assert (buffer[~written] == GUARD).all()
    ones = F32([[1.0]])
    assert_same(
        view,
        reference.quantized_linear_matrix_multiply(
            a, ones * F32(0.1), None, b, ones * F32(0.1), None, ones * F32(0.3), None, U8
        ),
    )


def test_levels_are_reported_and_bounded():
    assert _core.get_level() in _core.LEVELS
    with pytest.raises(ValueError):
        _core.set_level("no such level")
    _core.set_level("portable")
    try:
        assert _core.get_level() == "portable"
    finally:
        _core.set_level(_core.detected_level())


def test_thread_count_rules(threads):
    dmlq.set_num_threads(3)
    assert dmlq.get_num_threads() == min(3, available_cores())
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(dmlq.DmlError, match="threads"):
            dmlq.set_num_threads(bad)


THREADS_ON_ONE_CPU = """
import os, numpy as np, dmlq
print(dmlq.get_num_threads())
before = len(os.listdir("/proc/self/task"))
dmlq.set_num_threads(8)
a = np.ones((256, 256), np.uint8)
dmlq.quantized_linear_matrix_multiply(a, 1.0, None, a, 1.0, None, 1.0, None)
print(dmlq.get_num_threads(), len(os.listdir("/proc/self/task")) - before)
"""


@pytest.mark.skipif(
    shutil.which("taskset") is None or not os.path.isdir("/proc/self/task"), reason="Linux only"
)
def test_the_thread_pool_never_outnumbers_the_cpus_it_may_run_on():
    """DMLQ_NUM_THREADS and set_num_threads are capped to the process's CPU affinity: no workers
    start on one CPU, where they could only take turns with the caller."""
    environment = {**os.environ, "DMLQ_NUM_THREADS": "4"}
    command = ["taskset", "-c", "0", sys.executable, "-c", THREADS_ON_ONE_CPU]
    result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.split() == ["1", "1", "0"]


def test_matmul_beyond_the_kernels_k_limit_stays_exact():
    """K at the compiled kernel's limit (int32 row and column sums) goes through exact int64 sums."""
    k = _core.MAX_K
    a, b = np.full((1, k), 255, np.uint8), np.full((k, 2), 127, np.int8)
    b[:, 1] = -128
    got = dmlq.quantized_linear_matrix_multiply(a, 1.0, None, b, 1.0, None, 2.0**31, np.int8(0))
    exact = [k * 255 * 127 / 2**31, -k * 255 * 128 / 2**31]
    assert got.tolist() == [[round(value) for value in exact]]
