"""CompiledOperator.execute: binding buffers through descriptions, sizes, aliasing and in-place rules."""

from __future__ import annotations

import array
import mmap
import re

import numpy as np
import pytest

from conftest import element_offsets, read_strided, strided_buffer
from dmlq import DataType, Device, DmlError, TensorDesc, TensorFlags, activations, ops
from dmlq.buffers import buffer_bytes

F32, U8 = DataType.FLOAT32, DataType.UINT8
DEVICE = Device()


def add_op(n: int = 6, **output_changes) -> object:
    desc = TensorDesc(F32, [n])
    output = TensorDesc(F32, [n], **output_changes)
    return DEVICE.compile_operator(ops.ElementWiseAdd1(a=desc, b=desc, output=output))


def quantize_op(n: int = 4) -> object:
    sizes = [n]
    return DEVICE.compile_operator(
        ops.ElementWiseQuantizeLinear(
            input=TensorDesc(F32, sizes),
            scale=TensorDesc(F32, sizes, [0]),
            zero_point=None,
            output=TensorDesc(U8, sizes),
        )
    )


def test_any_buffer_protocol_object() -> None:
    op = add_op(3)
    a = array.array("f", [1.0, 2.0, 3.0])
    b = bytes(np.float32([10, 20, 30]).tobytes())  # read-only input is fine
    out = bytearray(12)
    op.execute([a, b], [out])
    assert np.frombuffer(out, np.float32).tolist() == [11.0, 22.0, 33.0]
    out_view = memoryview(bytearray(12))
    as_int32 = memoryview(np.float32([1, 2, 3]).view(np.int32))  # raw bytes, whatever its format
    op.execute([np.float32([1, 1, 1]).view(np.uint8), as_int32], [out_view])
    assert np.frombuffer(out_view, np.float32).tolist() == [2.0, 3.0, 4.0]


@pytest.mark.parametrize(
    "position, dtype",
    [("inputs[0] (input)", np.float64), ("inputs[0] (input)", np.int64), ("inputs[0] (input)", ">f4"),
     ("inputs[1] (scale)", np.float64), ("inputs[1] (scale)", np.int32), ("outputs[0] (output)", np.float64),
     ("outputs[0] (output)", np.int8)],
)  # fmt: skip
def test_ndarray_of_another_dtype_is_refused_naming_the_binding(position: str, dtype: object) -> None:
    buffers = [np.float32([0.5, 1.5, 2.5, 3.5]), np.float32([1]), np.zeros(4, np.uint8)]
    index = 2 if position.startswith("outputs") else int(position[7])
    buffers[index] = np.zeros(4, dtype)
    tensor_type = "UINT8" if index == 2 else "FLOAT32"
    binding = rf"ElementWiseQuantizeLinear.execute {re.escape(position)}: "
    expected = rf"ndarray of dtype {np.dtype(dtype)} bound to a {tensor_type} tensor; pass \w+ or raw bytes"
    with pytest.raises(DmlError, match=binding + expected):
        quantize_op().execute(buffers[:2] + [None], [buffers[2]])


def test_float64_values_are_not_reinterpreted_as_float32_bytes() -> None:
    x = np.float64([0.4, 1.0, 1.6, 2.0, 2.4, 3.0])  # as bytes these are tiny/odd float32 values
    with pytest.raises(DmlError, match=r"inputs\[0\] \(input\): ndarray of dtype float64 bound to a FLOAT32"):
        quantize_op(6).execute([x, np.float32([1]), None], [np.zeros(6, np.uint8)])


def test_raw_bytes_bind_to_any_tensor_type() -> None:
    values, scale = np.float32([0.5, 1.5, 2.5, 3.5]), np.float32([0.5])
    expected = [1, 3, 5, 7]
    routes = [
        lambda a: a.view(np.uint8), lambda a: a.tobytes(), lambda a: bytearray(a.tobytes()),
        lambda a: memoryview(a), lambda a: memoryview(a.astype(a.dtype).view(np.int32)),
    ]  # fmt: skip
    for route in routes:
        out = bytearray(4)
        quantize_op().execute([route(values), route(scale), None], [out])
        assert list(out) == expected
    out_u8 = np.zeros(16, np.uint8)  # a uint8 output buffer for a FLOAT32 tensor: raw bytes
    add_op(4).execute([values, values.view(np.uint8)], [out_u8])
    assert out_u8.view(np.float32).tolist() == [1.0, 3.0, 5.0, 7.0]


def test_mmap_buffers_are_raw_bytes(tmp_path) -> None:
    path = tmp_path / "values.bin"
    path.write_bytes(np.float32([0.5, 1.5, 2.5, 3.5]).tobytes())
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        out = np.zeros(4, np.uint8)
        quantize_op().execute([mapped, np.float32([0.5]), None], [out])
    assert out.tolist() == [1, 3, 5, 7]


def test_read_only_output_is_refused() -> None:
    with pytest.raises(DmlError, match=r"outputs\[0\] \(output\): output buffer is read-only"):
        add_op(3).execute([np.zeros(3, np.float32)] * 2, [bytes(12)])


def test_not_a_buffer() -> None:
    with pytest.raises(DmlError, match=r"inputs\[0\] \(a\): list is not a buffer"):
        add_op(3).execute([[1.0, 2.0, 3.0], np.zeros(3, np.float32)], [np.zeros(3, np.float32)])


def test_object_arrays_are_not_buffers() -> None:
    with pytest.raises(DmlError, match=r"inputs\[0\] \(a\): buffer is an ndarray of Python objects"):
        add_op(2).execute(
            [np.array([1.0, 2.0], dtype=object), np.zeros(2, np.float32)], [np.zeros(2, np.float32)]
        )


def test_buffer_sizes() -> None:
    op = add_op(3)  # total_tensor_size_in_bytes 12 exactly (already a multiple of 4)
    out = np.zeros(3, np.float32)
    with pytest.raises(DmlError, match=r"inputs\[1\] \(b\): buffer of 8 bytes is smaller than the 12 bytes"):
        op.execute([np.zeros(3, np.float32), np.zeros(2, np.float32)], [out])
    with pytest.raises(DmlError, match=r"outputs\[0\] \(output\): buffer of 8 bytes"):
        op.execute([np.zeros(3, np.float32)] * 2, [np.zeros(2, np.float32)])
    # DirectML's 4-byte rounding is not required of the buffer: 3 uint8 elements in 3 bytes
    q = quantize_op(3)
    y = np.zeros(3, np.uint8)
    q.execute([np.float32([1, 2, 3]), np.float32([1]), None], [y])
    assert y.tolist() == [1, 2, 3]


def test_larger_buffers_are_fine_and_extra_bytes_untouched() -> None:
    op = add_op(3, total_tensor_size_in_bytes=64)
    out = np.full(16, -1.0, np.float32)
    op.execute([np.float32([1, 2, 3, 99]), np.float32([1, 1, 1])], [out])
    assert out[:3].tolist() == [2.0, 3.0, 4.0] and np.all(out[3:] == -1)


def test_non_contiguous_ndarray_is_refused() -> None:
    with pytest.raises(DmlError, match="non-contiguous ndarray"):
        add_op(3).execute([np.zeros(6, np.float32)[::2], np.zeros(3, np.float32)], [np.zeros(3, np.float32)])


def test_fortran_ordered_buffers_are_read_and_written_in_memory_order() -> None:
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    a = np.asfortranarray(values)  # memory: 0, 3, 1, 4, 2, 5
    out = np.zeros((3, 2), np.float32, order="F")
    assert np.shares_memory(buffer_bytes(out, "out", writable=True), out)
    add_op(6).execute([a, np.full(6, 10, np.float32)], [out])
    assert out.ravel(order="K").tolist() == [10.0, 13.0, 11.0, 14.0, 12.0, 15.0]


def test_misaligned_memory_is_refused() -> None:
    raw = np.zeros(13, np.uint8)
    with pytest.raises(DmlError, match="not aligned to its 4-byte elements"):
        add_op(3).execute([raw[1:], np.zeros(3, np.float32)], [np.zeros(3, np.float32)])


def test_guaranteed_base_offset_alignment_is_checked_at_binding() -> None:
    desc = TensorDesc(F32, [2], guaranteed_base_offset_alignment=64)
    op = DEVICE.compile_operator(
        ops.ElementWiseAdd(a=desc, b=TensorDesc(F32, [2]), output=TensorDesc(F32, [2]))
    )
    raw = np.zeros(64, np.float32)
    base = (-raw.ctypes.data % 64) // 4  # an element index whose address is a multiple of 64
    out = np.zeros(2, np.float32)
    op.execute([raw[base : base + 2], np.float32([1, 2])], [out])
    assert out.tolist() == [1.0, 2.0]
    with pytest.raises(DmlError, match="not a multiple of its 64-byte guaranteed_base_offset_alignment"):
        op.execute([raw[base + 1 : base + 3], np.float32([1, 2])], [out])


def test_buffer_counts_and_absent_tensors() -> None:
    op = quantize_op()
    x, s, y = np.float32([1, 2, 3, 4]), np.float32([0.5]), np.zeros(4, np.uint8)
    with pytest.raises(DmlError, match=r"inputs needs 3 buffer\(s\), got 2"):
        op.execute([x, s], [y])
    with pytest.raises(DmlError, match=r"outputs needs 1 buffer\(s\), got 2"):
        op.execute([x, s, None], [y, y])
    with pytest.raises(
        DmlError, match=r"inputs\[2\] \(zero_point\): the description has no zero_point tensor"
    ):
        op.execute([x, s, np.uint8([0])], [y])
    with pytest.raises(DmlError, match=r"inputs\[1\] \(scale\): a buffer is required"):
        op.execute([x, None, None], [y])
    op.execute([x, s, None], [y])
    assert y.tolist() == [2, 4, 6, 8]


def test_owned_by_dml_inputs_are_bound_by_initialize() -> None:
    owned = TensorDesc(F32, [3], flags=TensorFlags.OWNED_BY_DML)
    plain = TensorDesc(F32, [3])
    op = DEVICE.compile_operator(ops.ElementWiseAdd(a=plain, b=owned, output=plain))
    out = np.zeros(3, np.float32)
    unbound = r"ElementWiseAdd.execute: call initialize first, .* OWNED_BY_DML input\(s\) b "
    with pytest.raises(DmlError, match=unbound):
        op.execute([np.float32([1, 2, 3]), np.float32([4, 5, 6])], [out])
    op.initialize([None, np.float32([4, 5, 6])])
    op.execute([np.float32([1, 2, 3]), None], [out])
    assert out.tolist() == [5.0, 7.0, 9.0]


@pytest.mark.parametrize("cls", [ops.ElementWiseAdd, ops.ElementWiseAdd1])
def test_in_place_add_on_identical_ranges(cls, rng: np.random.Generator) -> None:
    n = 1000
    desc = TensorDesc(F32, [4, 250])
    extra = {"fused_activation": activations.Sigmoid()} if cls is ops.ElementWiseAdd1 else {}
    op = DEVICE.compile_operator(cls(a=desc, b=desc, output=desc, **extra))
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    want = np.zeros(n, np.float32)
    op.execute([a, b], [want])
    same_object = a.copy()
    op.execute([same_object, b], [same_object])
    assert np.array_equal(same_object, want)
    memory = b.copy()
    op.execute([a, memory], [memory.view(np.uint8)])  # another object over the very same bytes
    assert np.array_equal(memory, want)
    both = a.copy()
    op.execute([both, both], [both])
    op.execute([a, a], [want])
    assert np.array_equal(both, want)


def test_in_place_add_refuses_partial_overlap() -> None:
    op = add_op(4)
    memory = np.zeros(5, np.float32)
    with pytest.raises(DmlError, match="output overlaps input a; in place, the output must start where"):
        op.execute([memory[:4], np.zeros(4, np.float32)], [memory[1:]])


IN_PLACE_LAYOUTS = {
    # name: (a's sizes and strides, the output's strides): both over one buffer object
    "broadcast a": (([6], [0]), [1]),
    "row-broadcast a": (([2, 3], [0, 1]), [3, 1]),
    "packed a, padded output": (([2, 3], None), [4, 1]),
    "padded a, packed output": (([2, 3], [4, 1]), [3, 1]),
}


@pytest.mark.parametrize("cls", [ops.ElementWiseAdd, ops.ElementWiseAdd1])
@pytest.mark.parametrize("layout", IN_PLACE_LAYOUTS)
def test_in_place_add_over_the_same_buffer_with_other_strides(cls, layout: str) -> None:
    """One buffer bound as a and as the output (DirectML's identical binding) is computed as if
    a had been read completely before anything was written; gaps between outputs stay."""
    (sizes, a_strides), out_strides = IN_PLACE_LAYOUTS[layout]
    extra = {"fused_activation": activations.Relu()} if cls is ops.ElementWiseAdd1 else {}
    desc = cls(a=TensorDesc(F32, sizes, a_strides), b=TensorDesc(F32, sizes),
               output=TensorDesc(F32, sizes, out_strides), **extra)  # fmt: skip
    memory = np.float32([1, -2, 3, -4, 5, -6, 7, -8])
    a = read_strided(memory, sizes, a_strides)
    b = np.float32([-10, 20, -30, 40, -50, 60])
    want = np.float32(a).reshape(sizes) + b.reshape(sizes)
    if extra:
        want = np.maximum(want, 0)
    untouched = memory.copy()
    DEVICE.compile_operator(desc).execute([memory, b], [memory])
    written = element_offsets(sizes, out_strides)
    assert read_strided(memory, sizes, out_strides) == want.ravel().tolist()
    gaps = np.setdiff1d(np.arange(memory.size), written)
    assert np.array_equal(memory[gaps], untouched[gaps])


def test_in_place_add_over_another_object_starting_at_the_same_address() -> None:
    op = DEVICE.compile_operator(
        ops.ElementWiseAdd(a=TensorDesc(F32, [4], [0]), b=TensorDesc(F32, [4]), output=TensorDesc(F32, [4]))
    )
    memory = np.float32([2, 7, 7, 7])
    op.execute([memory.view(np.uint8), np.float32([1, 2, 3, 4])], [memory[:4]])
    assert memory.tolist() == [3.0, 4.0, 5.0, 6.0]


def test_inputs_may_overlap_each_other() -> None:
    memory = np.float32([1, 2, 3, 4])
    out = np.zeros(3, np.float32)
    add_op(3).execute([memory[:3], memory[1:]], [out])
    assert out.tolist() == [3.0, 5.0, 7.0]


def test_operators_without_in_place_refuse_any_overlap() -> None:
    op = quantize_op(4)
    memory = np.zeros(8, np.float32)
    with pytest.raises(DmlError, match="output overlaps input input; this operator cannot run in place"):
        op.execute([memory[:4], np.float32([1]), None], [memory[:1].view(np.uint8)])
    scale = np.float32([1, 0, 0, 0])
    with pytest.raises(DmlError, match="output overlaps input scale"):
        op.execute([np.float32([1, 2, 3, 4]), scale, None], [scale.view(np.uint8)])


def test_quantized_operators_refuse_aliasing() -> None:
    one = TensorDesc(F32, [1, 1])
    q = TensorDesc(U8, [1, 4])
    desc = ops.ElementWiseQuantizedLinearAdd(a=q, a_scale=one, b=q, b_scale=one, output_scale=one, output=q)
    op = DEVICE.compile_operator(desc)
    memory = np.uint8([1, 2, 3, 4])
    with pytest.raises(DmlError, match="output overlaps input a; this operator cannot run in place"):
        op.execute(
            [
                memory,
                np.float32([1]),
                None,
                np.uint8([0, 0, 0, 0]),
                np.float32([1]),
                None,
                np.float32([1]),
                None,
            ],
            [memory],
        )
    mm = ops.QuantizedLinearMatrixMultiply(
        a=TensorDesc(U8, [2, 2]),
        a_scale=one,
        b=TensorDesc(U8, [2, 2]),
        b_scale=one,
        output_scale=one,
        output=TensorDesc(U8, [2, 2]),
    )
    square = np.uint8([1, 2, 3, 4])
    with pytest.raises(DmlError, match="output overlaps input b; this operator cannot run in place"):
        DEVICE.compile_operator(mm).execute(
            [
                np.uint8([1, 0, 0, 1]),
                np.float32([1]),
                None,
                square,
                np.float32([1]),
                None,
                np.float32([1]),
                None,
            ],
            [square],
        )


EXECUTE_REFUSALS = {
    "buffer count": lambda x, y: ([x], [y]),
    "too small": lambda x, y: ([x[:5], x], [y]),
    "not a buffer": lambda x, y: ([x, [1.0] * 6], [y]),
    "read-only output": lambda x, y: ([x, x], [bytes(24)]),
    "partial overlap": lambda x, y: ([x[:6], x[:6]], [x[1:]]),
}


@pytest.mark.parametrize("refusal", EXECUTE_REFUSALS)
def test_execute_refusals_name_the_device_level(refusal: str) -> None:
    desc = TensorDesc(F32, [6])
    op = Device("3_0").compile_operator(ops.ElementWiseAdd(a=desc, b=desc, output=desc))
    inputs, outputs = EXECUTE_REFUSALS[refusal](np.zeros(7, np.float32), np.zeros(6, np.float32))
    with pytest.raises(DmlError) as error:
        op.execute(inputs, outputs)
    message = str(error.value)
    assert message.startswith("ElementWiseAdd.execute") and message.endswith(" (device is 3_0)")
    assert message.count("(device is") == 1


def test_execute_twice_reuses_the_compiled_operator() -> None:
    op = add_op(2)
    out = np.zeros(2, np.float32)
    for value in (1.0, 2.0):
        op.execute([np.float32([value, value]), np.float32([1, 1])], [out])
        assert out.tolist() == [value + 1] * 2


def run_packed_and_strided(desc: ops.OperatorDesc, logical_inputs: dict[str, np.ndarray]) -> tuple:
    """Run ``desc`` and its packed twin on the same logical values; return both outputs (logical)."""
    results = []
    for layout in ("strided", "packed"):
        current = desc
        if layout == "packed":
            current = desc.replace(
                **{f.name: TensorDesc(t.data_type, t.sizes) for f, t in desc.tensors() if t}
            )
        buffers = []
        for tensor_field in current.input_fields():
            tensor = getattr(current, tensor_field.name)
            if tensor is None:
                buffers.append(None)
                continue
            buffers.append(
                strided_buffer(
                    logical_inputs[tensor_field.name], tensor.sizes, tensor.strides, tensor.data_type.dtype
                )
            )
        out = np.zeros(current.output.addressed_bytes, np.uint8)
        DEVICE.compile_operator(current).execute(buffers, [out])
        values = out.view(current.output.data_type.dtype)
        offsets = element_offsets(current.output.sizes, current.output.element_strides)
        results.append(values[offsets].reshape(current.output.sizes))
    return tuple(results)


@pytest.mark.parametrize("op_name", ["quantize", "dequantize", "add1", "quantized_add", "matmul"])
def test_large_strided_layouts_match_packed(op_name: str, rng: np.random.Generator) -> None:
    """Past the kernels' thread split (32768 elements), with transposed, broadcast and padded layouts."""
    m, n = 300, 257
    sizes, transposed, padded, rows = [m, n], [1, m], [n + 3, 1], [1, 0]
    x = rng.standard_normal((m, n)).astype(np.float32) * 50
    q = rng.integers(0, 256, (m, n)).astype(np.uint8)
    per_row = np.repeat(rng.uniform(0.1, 2.0, (m, 1)).astype(np.float32), n, axis=1)
    one = TensorDesc(F32, [1, 1])
    if op_name == "quantize":
        zero_point = np.repeat(rng.integers(0, 256, (m, 1)).astype(np.uint8), n, axis=1)
        desc = ops.ElementWiseQuantizeLinear(
            input=TensorDesc(F32, sizes, transposed),
            scale=TensorDesc(F32, sizes, rows),
            zero_point=TensorDesc(U8, sizes, rows),
            output=TensorDesc(U8, sizes, padded),
        )
        inputs = {"input": x, "scale": per_row, "zero_point": zero_point}
    elif op_name == "dequantize":
        desc = ops.ElementWiseDequantizeLinear(
            input=TensorDesc(U8, sizes, transposed),
            scale=TensorDesc(F32, sizes, rows),
            zero_point=None,
            output=TensorDesc(F32, sizes, transposed),
        )
        inputs = {"input": q, "scale": per_row}
    elif op_name == "add1":
        desc = ops.ElementWiseAdd1(
            a=TensorDesc(F32, sizes, transposed),
            b=TensorDesc(F32, sizes, rows),
            output=TensorDesc(F32, sizes, padded),
            fused_activation=activations.Gelu(),
        )
        inputs = {"a": x, "b": per_row}
    elif op_name == "quantized_add":
        desc = ops.ElementWiseQuantizedLinearAdd(
            a=TensorDesc(U8, sizes, transposed),
            a_scale=one,
            b=TensorDesc(U8, sizes, [0, 1]),
            b_scale=one,
            output_scale=one,
            output=TensorDesc(U8, sizes, padded),
        )
        inputs = {
            "a": q,
            "a_scale": np.float32([[0.1]]),
            "b": np.repeat(q[:1], m, axis=0),
            "b_scale": np.float32([[0.2]]),
            "output_scale": np.float32([[0.3]]),
        }
    else:
        k = 40
        desc = ops.QuantizedLinearMatrixMultiply(
            a=TensorDesc(U8, [3, m, k], [0, 1, m]),
            a_scale=TensorDesc(F32, [1, m, 1]),
            b=TensorDesc(DataType.INT8, [3, k, n]),
            b_scale=TensorDesc(F32, [1, 1, n], [0, 0, 0]),
            output_scale=TensorDesc(F32, [1, 1, 1]),
            output=TensorDesc(U8, [3, m, n], [1, 3 * n, 3]),
        )
        a = np.broadcast_to(q[:, :k], (3, m, k))
        inputs = {
            "a": a,
            "a_scale": per_row[:, :1].reshape(1, m, 1) * 0.01,
            "b": rng.integers(-128, 128, (3, k, n)).astype(np.int8),
            "b_scale": np.full((1, 1, n), 0.02, np.float32),
            "output_scale": np.float32([[[0.5]]]),
        }
    strided, packed = run_packed_and_strided(desc, inputs)
    assert strided.tobytes() == packed.tobytes()


def test_in_place_with_a_different_layout_over_the_same_bytes() -> None:
    """a is the output's memory read transposed: same byte range, so DirectML allows it; the
    result must be as if a had been read completely before anything was written."""
    sizes = [3, 3]
    op = DEVICE.compile_operator(
        ops.ElementWiseAdd(
            a=TensorDesc(F32, sizes, [1, 3]), b=TensorDesc(F32, sizes), output=TensorDesc(F32, sizes)
        )
    )
    memory = np.arange(9, dtype=np.float32)
    b = np.full(9, 100, np.float32)
    want = memory.reshape(3, 3).T.ravel() + 100
    op.execute([memory, b], [memory])
    assert memory.tolist() == want.tolist()
