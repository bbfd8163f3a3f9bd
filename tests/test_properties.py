"""Property-based tests over random descriptions, levels and buffers (hypothesis).

1. Any description either compiles or raises DmlError -- never another exception.
2. A compiled operator run on random bytes writes only the bytes of its output's elements
   (guard bytes around the buffer and gaps between strided elements stay intact), never
   modifies an input, gives the same bytes as the same operator on packed copies of its
   tensors (layouts change nothing), and the same result in place (ADD/ADD1 on an identical
   range).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import element_offsets
from dmlq import (
    DataType,
    Device,
    DmlError,
    FeatureLevel,
    QuantizationType,
    TensorDesc,
    TensorFlags,
    activations,
    ops,
)
from family_strategies import FAMILY, family

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GUARD = 16
ALIGNMENTS = [0, 1, 2, 3, 4, 8, 16, 32, 64, 256]
ALL_TYPES = list(DataType)


@st.composite
def layouts(draw, data_type: DataType, sizes: list[int], is_output: bool) -> TensorDesc:
    """A description over ``sizes``: packed, permuted, padded or (inputs) broadcasting."""
    kind = draw(st.sampled_from(["packed", "permuted", "padded", "broadcast"]))
    strides = None
    if kind in ("permuted", "padded"):
        order = draw(st.permutations(range(len(sizes)))) if kind == "permuted" else list(range(len(sizes)))
        pad = draw(st.integers(0, 2)) if kind == "padded" else 0
        strides, step = [0] * len(sizes), 1
        for axis in reversed(order):
            strides[axis] = step
            step *= sizes[axis] + pad
    elif kind == "broadcast" and not is_output and sizes:
        strides = [
            draw(st.sampled_from([0, stride])) for stride in TensorDesc(data_type, sizes).element_strides
        ]
    return TensorDesc(data_type, sizes, strides)


# Values of the wrong type for any field: descriptions are plain data, so they must construct and
# then be refused by compile_operator as a DmlError, like any other broken rule.
ILL_TYPED = st.sampled_from(
    [
        None,
        "4",
        "FLOAT32",
        4.0,
        True,
        np.float64(2.0),
        np.int64(4),
        np.array([1, 2]),
        np.array(4),
        [1],
        object(),
    ]
)
NOT_SEQUENCES = st.sampled_from([3, None, "12", b"\x01", 2.5, np.array(2), object()])


def integers_or_ill_typed(integers: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(integers, ILL_TYPED)


def sequences(elements: st.SearchStrategy, min_size: int, max_size: int) -> st.SearchStrategy:
    """Lists of ``elements`` (some ill-typed), NumPy arrays of them, or something not a sequence."""
    lists = st.lists(integers_or_ill_typed(elements), min_size=min_size, max_size=max_size)
    arrays = st.lists(elements, min_size=min_size, max_size=max_size).map(np.array)
    return st.one_of(lists, lists, arrays, NOT_SEQUENCES)


@st.composite
def mutated(draw, desc: TensorDesc | None, is_output: bool) -> TensorDesc | None:
    """``desc`` itself most of the time, else with one field broken or changed at random."""
    if desc is None:
        return None
    change = draw(
        st.sampled_from(["none"] * 8 + ["type", "sizes", "strides", "total", "alignment", "flags", "absent"])
    )
    fields = dataclasses.asdict(desc)
    if change == "absent":
        return None
    if change == "type":
        fields["data_type"] = draw(st.one_of(st.sampled_from(ALL_TYPES), ILL_TYPED, st.integers(-1, 20)))
    elif change == "sizes":
        fields["sizes"] = draw(sequences(st.integers(0, 3), min_size=0, max_size=9))
        fields["strides"] = None
    elif change == "strides":
        count = draw(st.sampled_from([len(desc.sizes), len(desc.sizes) + 1, max(len(desc.sizes) - 1, 0)]))
        fields["strides"] = draw(sequences(st.integers(-1, 6), min_size=count, max_size=count))
    elif change == "alignment":
        fields["guaranteed_base_offset_alignment"] = draw(integers_or_ill_typed(st.sampled_from(ALIGNMENTS)))
    elif change == "flags":
        fields["flags"] = draw(integers_or_ill_typed(st.integers(0, 3)))
    if change in ("type", "sizes", "strides", "total"):
        sizes = st.one_of(st.none(), integers_or_ill_typed(st.integers(0, 512)))
        fields["total_tensor_size_in_bytes"] = draw(sizes)
    return TensorDesc(**fields)


@st.composite
def activation_choices(draw) -> activations.Activation | None:
    cls = draw(st.sampled_from([None, *activations.ACTIVATIONS.values()]))
    if cls is None:
        return None
    values = st.one_of(st.floats(-4, 4, allow_nan=False), st.sampled_from([0.0, 0.5, 1.0, math.nan]))
    return cls(**{f.name: draw(values) for f in dataclasses.fields(cls)})


BYTE_TYPES = [DataType.UINT8, DataType.INT8]


@st.composite
def element_wise(draw, cls) -> ops.OperatorDesc:
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=8))
    if cls is ops.ElementWiseQuantizeLinear:
        x = draw(st.sampled_from([DataType.FLOAT32, DataType.FLOAT16, DataType.INT32]))
        scale = DataType.FLOAT32 if x == DataType.INT32 else x
        out = draw(st.sampled_from(BYTE_TYPES))
        types = {"input": x, "scale": scale, "zero_point": out, "output": out}
    elif cls is ops.ElementWiseDequantizeLinear:
        x = draw(
            st.sampled_from([DataType.UINT8, DataType.INT8, DataType.UINT16, DataType.INT16, DataType.INT32])
        )
        out = draw(st.sampled_from([DataType.FLOAT32, DataType.FLOAT16]))
        types = {"input": x, "scale": out, "zero_point": x, "output": out}
    else:
        kinds = [DataType.FLOAT32, DataType.FLOAT16] + (
            [DataType.INT32, DataType.UINT8] if cls is ops.ElementWiseAdd else []
        )
        kind = draw(st.sampled_from(kinds))
        types = {"a": kind, "b": kind, "output": kind}
    fields = {name: draw(layouts(t, sizes, name == "output")) for name, t in types.items()}
    if cls is ops.ElementWiseAdd1:
        fields["fused_activation"] = draw(activation_choices())
    return cls(**fields)


@st.composite
def quantized(draw, cls) -> ops.OperatorDesc:
    a_type, b_type, out_type = (draw(st.sampled_from(BYTE_TYPES)) for _ in range(3))
    scale = DataType.FLOAT32
    if cls is ops.ElementWiseQuantizedLinearAdd:
        sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=8))
        a_sizes = b_sizes = out_sizes = sizes
        quant = {name: [1] * len(sizes) for name in ("a", "b", "output")}
    else:
        batch = draw(st.lists(st.integers(1, 2), min_size=0, max_size=2))
        m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
        a_sizes, b_sizes, out_sizes = batch + [m, k], batch + [k, n], batch + [m, n]
        rank = draw(st.integers(2, 4))
        ones = [1] * (rank - 2)
        quant = {
            "a": draw(st.sampled_from([[1] * rank, ones + [m, 1]])),
            "b": draw(st.sampled_from([[1] * rank, ones + [1, n]])),
            "output": draw(st.sampled_from([[1] * rank, ones + [m, 1]])),
        }
        if all(sizes == [1] * rank for sizes in quant.values()) and draw(st.booleans()):
            quant = {side: [1] for side in quant}
    types = {"a": a_type, "b": b_type, "output": out_type}
    data = {"a": a_sizes, "b": b_sizes, "output": out_sizes}
    fields = {}
    for side in ("a", "b", "output"):
        fields[side] = draw(layouts(types[side], data[side], side == "output"))
        fields[f"{side}_scale"] = draw(layouts(scale, quant[side], False))
        present = draw(st.booleans())
        fields[f"{side}_zero_point"] = draw(layouts(types[side], quant[side], False)) if present else None
    return cls(**fields)


FOUR_AND_EIGHT_BITS = [DataType.INT8, DataType.UINT8, DataType.INT4, DataType.UINT4]


@st.composite
def blockwise(draw, cls) -> ops.OperatorDesc:
    """A Quantize or Dequantize: blocks of random sizes along every dimension, 8- or 4-bit."""
    counts = draw(st.lists(st.integers(1, 3), min_size=1, max_size=8))
    sizes = [count * draw(st.integers(1, 3)) for count in counts]
    float_type = draw(st.sampled_from([DataType.FLOAT32, DataType.FLOAT16]))
    integer_type = draw(st.sampled_from(FOUR_AND_EIGHT_BITS))
    sides = ("input", "output") if cls is ops.Quantize else ("output", "input")
    types = dict(zip(sides, (float_type, integer_type)))
    quantization = [draw(layouts(float_type, counts, False))]
    if draw(st.booleans()):
        quantization.append(draw(layouts(integer_type, counts, False)))
    return cls(
        input=draw(layouts(types["input"], sizes, False)),
        quantization_type=QuantizationType(len(quantization)),
        quantization_tensors=quantization,
        output=draw(layouts(types["output"], sizes, True)),
    )


@st.composite
def mutation(draw, desc: ops.OperatorDesc) -> dict[str, object]:
    """Every tensor field mutated (each element of an array field)."""
    changes = {}
    for tensor_field in desc.FIELDS:
        value = getattr(desc, tensor_field.name)
        if tensor_field.is_array:
            changes[tensor_field.name] = tuple(draw(mutated(item, False)) for item in value)
        else:
            changes[tensor_field.name] = draw(mutated(value, tensor_field.is_output))
    return changes


BYTE_ADDRESSED = tuple(cls for cls in ops.OPERATORS if cls not in (ops.Quantize, ops.Dequantize))


@st.composite
def descriptions(draw, operators=ops.OPERATORS) -> tuple[ops.OperatorDesc, FeatureLevel]:
    cls = draw(st.sampled_from(operators))
    if cls in FAMILY:
        desc = draw(family(cls, layouts))
    elif cls in (ops.ElementWiseQuantizedLinearAdd, ops.QuantizedLinearMatrixMultiply):
        desc = draw(quantized(cls))
    elif cls in (ops.Quantize, ops.Dequantize):
        desc = draw(blockwise(cls))
    else:
        desc = draw(element_wise(cls))
    if draw(st.booleans()):
        desc = desc.replace(**draw(mutation(desc)))
    level = draw(st.one_of(st.just(FeatureLevel.newest()), st.sampled_from(sorted(FeatureLevel))))
    return desc, level


def compile_or_none(desc: ops.OperatorDesc, level: FeatureLevel):
    try:
        return Device(level).compile_operator(desc)
    except DmlError:
        return None


@SETTINGS
@given(descriptions())
def test_compile_succeeds_or_raises_dml_error(case) -> None:
    desc, level = case
    try:
        Device(level).compile_operator(desc)
    except DmlError as error:
        assert str(error).startswith(type(desc).__name__)
        assert f"(device is {level.label})" in str(error)


def aligned_buffer(rng: np.random.Generator, nbytes: int, alignment: int) -> tuple[np.ndarray, np.ndarray]:
    """Random bytes: the whole allocation, and the slice handed to execute (guards on both sides)."""
    step = max(alignment, 64)
    raw = np.frombuffer(rng.bytes(nbytes + 2 * GUARD + 2 * step), np.uint8).copy()
    start = GUARD + (-(raw.ctypes.data + GUARD) % step)
    return raw, raw[start : start + nbytes]


def element_bytes(desc: TensorDesc) -> np.ndarray:
    """Byte offsets of every element of ``desc`` (relative to the buffer start)."""
    size = desc.data_type.bits // 8
    offsets = np.array(element_offsets(desc.sizes, desc.element_strides)) * size
    return (offsets[:, None] + np.arange(size)).ravel()


def logical(buffer: np.ndarray, desc: TensorDesc) -> np.ndarray:
    """The tensor's elements read through its strides, as a packed array of its sizes."""
    offsets = element_offsets(desc.sizes, desc.element_strides)
    return np.frombuffer(buffer, desc.data_type.dtype, count=max(offsets) + 1)[offsets].reshape(desc.sizes)


def packed_results(desc: ops.OperatorDesc, level: FeatureLevel, inputs: list[np.ndarray | None]) -> list:
    """The operator's outputs computed on packed copies of the same logical inputs."""
    packed = {f.name: TensorDesc(t.data_type, t.sizes) for f, t in desc.tensors() if t is not None}
    op = Device(level).compile_operator(desc.replace(**packed))
    tensors = [getattr(desc, f.name) for f in desc.input_fields()]
    values = [None if b is None else np.ascontiguousarray(logical(b, t)) for b, t in zip(inputs, tensors)]
    outs = [
        np.zeros(t.sizes, t.data_type.dtype) for t in (getattr(desc, f.name) for f in desc.output_fields())
    ]
    op.execute(values, outs)
    return outs


def execution_inputs(rng, desc: ops.OperatorDesc) -> list[tuple[np.ndarray, np.ndarray] | None]:
    buffers = []
    for tensor_field in desc.input_fields():
        tensor = getattr(desc, tensor_field.name)
        if tensor is None:
            buffers.append(None)
            continue
        nbytes = tensor.addressed_bytes + int(rng.integers(0, 8))
        buffers.append(aligned_buffer(rng, nbytes, tensor.guaranteed_base_offset_alignment))
    return buffers


@SETTINGS
@given(descriptions(BYTE_ADDRESSED), st.integers(0, 2**32 - 1))  # nibbles: tests/test_int4_device.py
def test_execute_writes_only_the_output_elements_and_keeps_inputs(case, seed: int) -> None:
    desc, level = case
    op = compile_or_none(desc, level)
    event(f"{type(desc).__name__} {'compiled' if op else 'refused'}")
    if op is None:
        return
    rng = np.random.default_rng(seed)
    inputs = execution_inputs(rng, desc)
    before = [None if b is None else b[0].copy() for b in inputs]
    outputs = [getattr(desc, f.name) for f in desc.output_fields()]
    allocations = [
        aligned_buffer(rng, t.addressed_bytes, t.guaranteed_base_offset_alignment) for t in outputs
    ]
    untouched = [raw.copy() for raw, _ in allocations]
    views = [view for _, view in allocations]
    owned = owned_by_dml(desc)
    buffers = [None if b is None else b[1] for b in inputs]
    if owned:  # bound once, by the operator's initializer; execute then takes None in their places
        event("OWNED_BY_DML inputs")
        op.initialize([buffer if index in owned else None for index, buffer in enumerate(buffers)])
    op.execute([None if index in owned else buffer for index, buffer in enumerate(buffers)], views)
    for buffer, copy in zip(inputs, before):
        assert buffer is None or np.array_equal(buffer[0], copy)
    packed = packed_results(desc, level, [None if b is None else b[1] for b in inputs])
    for (raw, view), output, result, kept in zip(allocations, outputs, packed, untouched):
        assert logical(view, output).tobytes() == result.tobytes()
        written = np.zeros(raw.size, bool)
        written[view.ctypes.data - raw.ctypes.data + element_bytes(output)] = True
        assert np.array_equal(raw[~written], kept[~written])
    output, view = outputs[0], views[0]
    if desc.IN_PLACE and desc.a == output and not owned:
        event("in place")
        in_place = inputs[0][1]
        op.execute([in_place, inputs[1][1]], [in_place])
        same = element_bytes(output)
        assert np.array_equal(in_place[same], view[same])


def owned_by_dml(desc: ops.OperatorDesc) -> set[int]:
    """The positions of the inputs flagged OWNED_BY_DML (bound by ``initialize``, not ``execute``)."""
    tensors = [getattr(desc, field.name) for field in desc.input_fields()]
    return {i for i, tensor in enumerate(tensors) if tensor and tensor.flags & TensorFlags.OWNED_BY_DML}


WRONG_DTYPES = ["float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint16", ">f4", "bool"]


@SETTINGS
@given(descriptions(BYTE_ADDRESSED), st.sampled_from(WRONG_DTYPES), st.data())  # 4-bit: test_int4_device.py
def test_an_ndarray_of_another_dtype_is_refused_naming_its_binding(case, dtype: str, data) -> None:
    """Typed ndarrays bind only to their own data type (uint8 ones are raw bytes for any tensor)."""
    desc, level = case
    op = compile_or_none(desc, level)
    if op is None:
        return
    owned = owned_by_dml(desc)
    tensors = [(i, f.name, t) for i, (f, t) in enumerate(desc.tensors()) if t and i not in owned]
    wrong = [entry for entry in tensors if entry[2].data_type.dtype != np.dtype(dtype)]
    if not wrong:
        return
    index, name, tensor = data.draw(st.sampled_from(wrong))
    rng = np.random.default_rng(0)
    buffers = [t and aligned_buffer(rng, t.addressed_bytes, t.guaranteed_base_offset_alignment)[1]
               for _, t in desc.tensors()]  # fmt: skip
    buffers[index] = np.zeros(tensor.addressed_bytes // np.dtype(dtype).itemsize + 1, dtype)
    inputs, outputs = buffers[: len(desc.input_fields())], buffers[len(desc.input_fields()) :]
    if owned:  # their buffers go to initialize, None to execute
        op.initialize([buffer if i in owned else None for i, buffer in enumerate(inputs)])
        inputs = [None if i in owned else buffer for i, buffer in enumerate(inputs)]
    position = f"outputs[{index - len(inputs)}]" if index >= len(inputs) else f"inputs[{index}]"
    with pytest.raises(DmlError) as refusal:
        op.execute(inputs, outputs)
    assert f"{position} ({name}): " in str(refusal.value)
