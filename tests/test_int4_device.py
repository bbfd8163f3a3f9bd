"""Quantize and Dequantize executed on buffers: packed and strided nibbles, guard bytes and nibbles.

A compiled operator run on random bytes must give the reference formula of the tensors' logical
values, write only its output elements' nibbles (the other nibble of a shared byte, the unused high
nibble of an odd last byte and the guard bytes around the buffer keep their values), and leave its
inputs unchanged.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmlq import DataType, Device, QuantizationType, TensorDesc, ops, pack_int4, reference
from dmlq.buffers import binding_of
from dmlq.int4 import Nibbles

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
GUARD = 16
FLOATS = [DataType.FLOAT32, DataType.FLOAT16]
INTEGERS = [DataType.INT4, DataType.UINT4, DataType.INT8, DataType.UINT8]


@st.composite
def layouts(draw, data_type: DataType, sizes: list[int], is_output: bool) -> TensorDesc:
    """Packed, padded (gaps of whole elements between rows) or, for inputs, broadcast."""
    kind = draw(st.sampled_from(["packed", "padded", "broadcast"] if not is_output else ["packed", "padded"]))
    if kind == "packed":
        return TensorDesc(data_type, sizes)
    strides, step = [0] * len(sizes), 1
    for axis in reversed(range(len(sizes))):
        strides[axis] = 0 if kind == "broadcast" and draw(st.booleans()) else step
        step *= sizes[axis] + (draw(st.integers(0, 3)) if kind == "padded" else 0)
    return TensorDesc(data_type, sizes, strides)


@st.composite
def operators(draw) -> ops.OperatorDesc:
    cls = draw(st.sampled_from([ops.Quantize, ops.Dequantize]))
    counts = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    sizes = [count * draw(st.integers(1, 4)) for count in counts]
    float_type, integer_type = draw(st.sampled_from(FLOATS)), draw(st.sampled_from(INTEGERS))
    x_type, y_type = (float_type, integer_type) if cls is ops.Quantize else (integer_type, float_type)
    tensors = [draw(layouts(float_type, counts, False))]
    if draw(st.booleans()):
        tensors.append(draw(layouts(integer_type, counts, False)))
    return cls(input=draw(layouts(x_type, sizes, False)), quantization_type=QuantizationType(len(tensors)),
               quantization_tensors=tensors, output=draw(layouts(y_type, sizes, True)))  # fmt: skip


def random_buffer(rng: np.random.Generator, desc: TensorDesc) -> tuple[np.ndarray, np.ndarray]:
    """Random bytes (float tensors: small values with halves) with guards; the whole and the bound part."""
    nbytes = desc.addressed_bytes
    raw = np.frombuffer(rng.bytes(nbytes + 2 * GUARD), np.uint8).copy()
    view = raw[GUARD : GUARD + nbytes]
    if desc.data_type.is_float:
        values = (rng.integers(-40, 41, nbytes // (desc.data_type.bits // 8)) * 0.25).astype(
            desc.data_type.dtype
        )
        view[:] = values.view(np.uint8)
    return raw, view


def logical(view: np.ndarray, desc: TensorDesc) -> np.ndarray:
    """The tensor's values read through its strides: ndarray or ml_dtypes array of its sizes."""
    bound, _ = binding_of(desc, "test", writable=False).bind(view)
    return bound.unpacked() if isinstance(bound, Nibbles) else bound.copy()


def nibbles_of(raw: np.ndarray) -> np.ndarray:
    return np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(-1)


def written_nibbles(desc: TensorDesc, raw_size: int) -> np.ndarray:
    """Which nibbles of the whole allocation the output's elements occupy."""
    bits = desc.data_type.bits
    per_element = bits // 4
    offsets = Nibbles(np.empty(0, np.uint8), desc.sizes, desc.element_strides, np.dtype(np.uint8)).offsets()
    starts = 2 * GUARD + offsets.reshape(-1) * per_element
    mask = np.zeros(2 * raw_size, bool)
    mask[(starts[:, None] + np.arange(per_element)).reshape(-1)] = True
    return mask


def midpoint(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray | None:
    """DirectML's zero point without one: 128 for UINT8, 8 for UINT4 (onnxruntime's DmlOperatorQuantization21
    comment), 0 for the signed types."""
    info = ml_dtypes.iinfo(dtype)
    return None if info.min < 0 else np.full(shape, (info.max + 1) // 2).astype(dtype)


def expected_output(desc: ops.OperatorDesc, values: list[np.ndarray]) -> np.ndarray:
    scale, zero_point = values[1], values[2] if len(values) > 2 else None
    if isinstance(desc, ops.Quantize):
        dtype = logical(np.zeros(desc.output.addressed_bytes, np.uint8), desc.output).dtype
        zero_point = midpoint(dtype, scale.shape) if zero_point is None else zero_point
        return reference.quantize(values[0], scale, zero_point, dtype)
    zero_point = midpoint(values[0].dtype, scale.shape) if zero_point is None else zero_point
    return reference.dequantize(values[0], scale, zero_point, desc.output.data_type.dtype)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operators(), st.integers(0, 2**32 - 1))
def test_execute_writes_exactly_the_output_nibbles(desc, seed) -> None:
    rng = np.random.default_rng(seed)
    op = Device().compile_operator(desc)
    inputs = [random_buffer(rng, tensor) for _, tensor in desc.input_tensors()]
    before = [raw.copy() for raw, _ in inputs]
    raw, view = random_buffer(rng, desc.output)
    untouched = raw.copy()
    op.execute([v for _, v in inputs], [view])
    for (input_raw, _), copy in zip(inputs, before):
        assert np.array_equal(input_raw, copy)
    values = [logical(v, tensor) for (_, v), (_, tensor) in zip(inputs, desc.input_tensors())]
    expected = expected_output(desc, values)
    got = logical(view, desc.output)
    assert got.dtype == expected.dtype
    assert got.tobytes() == expected.tobytes()
    kept = ~written_nibbles(desc.output, raw.size)
    assert np.array_equal(nibbles_of(raw)[kept], nibbles_of(untouched)[kept])


@pytest.mark.parametrize("count", [1, 3, 5, 11])
def test_odd_count_keeps_the_high_nibble_of_the_last_byte(count) -> None:
    x = TensorDesc(DataType.FLOAT32, [count])
    desc = ops.Quantize(input=x, quantization_tensors=[TensorDesc(DataType.FLOAT32, [1])],
                        output=TensorDesc(DataType.INT4, [count]))  # fmt: skip
    out = np.full(8, 0xA0, np.uint8)
    Device().compile_operator(desc).execute([np.full(count, -1.0, np.float32), np.float32([1.0])], [out])
    full, last = divmod(count, 2)
    assert out[:full].tolist() == [0xFF] * full
    assert out[full] == (0xAF if last else 0xA0)
    assert out[full + 1 :].tolist() == [0xA0] * (7 - full)


def test_matmul_nbits_weight_dequantizes_like_the_provider_builds_it() -> None:
    """onnxruntime's DirectML MatMulNBits: B {N, K} UINT4 packed, scales and zero points {N, K / 32}."""
    n, k, block = 8, 64, 32
    rng = np.random.default_rng(0)
    q = rng.integers(0, 16, (n, k)).astype(ml_dtypes.uint4)
    scale = rng.random((n, k // block), np.float32).astype(np.float16)
    zero_point = rng.integers(0, 16, (n, k // block)).astype(ml_dtypes.uint4)
    desc = ops.Dequantize(
        input=TensorDesc(DataType.UINT4, [n, k]),
        quantization_type=QuantizationType.SCALE_ZERO_POINT,
        quantization_tensors=[TensorDesc(DataType.FLOAT16, [n, k // block]),
                              TensorDesc(DataType.UINT4, [n, k // block])],
        output=TensorDesc(DataType.FLOAT16, [n, k]),
    )  # fmt: skip
    out = np.zeros((n, k), np.float16)
    Device("6_3").compile_operator(desc).execute([pack_int4(q), scale, pack_int4(zero_point)], [out])
    expected = (q.astype(np.float32) - np.repeat(zero_point.astype(np.float32), block, 1)) * np.repeat(
        scale.astype(np.float32), block, 1
    )
    np.testing.assert_array_equal(out, expected.astype(np.float16))


@pytest.mark.parametrize(("data_type", "values", "expected"), [
    (DataType.UINT4, [0, 8, 15], [-4.0, 0.0, 3.5]),
    (DataType.UINT8, [0, 128, 255], [-64.0, 0.0, 63.5]),
    (DataType.INT4, [-8, 0, 7], [-4.0, 0.0, 3.5]),
    (DataType.INT8, [-128, 0, 127], [-64.0, 0.0, 63.5]),
])  # fmt: skip
def test_without_a_zero_point_an_unsigned_type_dequantizes_about_its_midpoint(data_type, values,
                                                                             expected) -> None:  # fmt: skip
    """DEQUANTIZE with SCALE alone: "For unsigned quantization, DML uses the midpoint of the datatype when
    zero point isn't provided (e.g. 8 for uint4 and 128 for uint8)" (DmlOperatorQuantization21,
    onnxruntime/core/providers/dml/DmlExecutionProvider/src/Operators/DmlOperatorElementWise.cpp)."""
    scale = TensorDesc(DataType.FLOAT32, [1])
    desc = ops.Dequantize(input=TensorDesc(data_type, [3]), quantization_tensors=[scale],
                          output=TensorDesc(DataType.FLOAT32, [3]))  # fmt: skip
    dtype = data_type.dtype or {DataType.UINT4: ml_dtypes.uint4, DataType.INT4: ml_dtypes.int4}[data_type]
    q = np.array(values).astype(dtype)
    stored = pack_int4(q) if data_type.bits == 4 else q
    out = np.zeros(3, np.float32)
    Device().compile_operator(desc).execute([stored, np.float32([0.5])], [out])
    assert out.tolist() == expected
    back = ops.Quantize(input=desc.output, quantization_tensors=[scale], output=desc.input)
    again = np.zeros(stored.size, np.uint8)
    Device().compile_operator(back).execute([out, np.float32([0.5])], [again])
    assert again.tobytes() == stored.tobytes()


def test_an_unpacked_4_bit_array_is_refused_not_read_as_bytes() -> None:
    """An ml_dtypes int4 array holds one element per byte: binding it as a 4-bit tensor would read
    two of its elements as one byte, so it is refused; its packed bytes are accepted."""
    desc = ops.Dequantize(input=TensorDesc(DataType.INT4, [4]), quantization_type=QuantizationType.SCALE,
                          quantization_tensors=[TensorDesc(DataType.FLOAT32, [1])],
                          output=TensorDesc(DataType.FLOAT32, [4]))  # fmt: skip
    op = Device().compile_operator(desc)
    q, scale, out = np.array([1, -2, 3, 7], ml_dtypes.int4), np.float32([0.5]), np.zeros(4, np.float32)
    with pytest.raises(ValueError, match=r"inputs\[0\].*dtype int4 bound to a 4-bit tensor.*pack_int4"):
        op.execute([q, scale], [out])
    op.execute([pack_int4(q), scale], [out])
    assert out.tolist() == [0.5, -1.0, 1.5, 3.5]
