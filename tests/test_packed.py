"""B packed once: dmlq.pack_matrix_multiply_b and CompiledOperator.initialize (OWNED_BY_DML).

A packed B must give the unpacked call's bits at every CPU level and shape class, hold its own
copy of everything it was made from, and keep B in packed form alone.
"""

from __future__ import annotations

import numpy as np
import pytest

import dmlq
from conftest import LEVELS
from dmlq import DataType, DmlError, TensorDesc, TensorFlags, _core, ops, reference

DEVICE = dmlq.Device()
OWNED = TensorFlags.OWNED_BY_DML


def random_bytes(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def operands(rng: np.random.Generator, a_shape, b_shape, b_dtype: str, per_column: bool) -> dict:
    """Random operands whose results spread over the output range (not clamped to its ends)."""
    k, n = b_shape[-2:]
    b_columns = (n,) if per_column else ()
    return {
        "a": random_bytes(rng, a_shape, "uint8"),
        "a_scale": np.float32(0.05),
        "a_zero_point": np.uint8(128),
        "b": random_bytes(rng, b_shape, b_dtype),
        "b_scale": rng.uniform(0.01, 0.03, b_columns).astype(np.float32),
        "b_zero_point": (rng.integers(-3, 4, b_columns) + (128 if b_dtype == "uint8" else 0)).astype(b_dtype),
        "output_scale": np.float32(0.2 * np.sqrt(k)),
        "output_zero_point": np.uint8(128),
    }


def multiply(arguments: dict, b: object = None) -> np.ndarray:
    """The NumPy layer's multiply of ``arguments``, or of ``b`` packed in place of their B."""
    if b is None:
        return dmlq.quantized_linear_matrix_multiply(**arguments)
    packed_arguments = {**arguments, "b": b, "b_scale": None, "b_zero_point": None}
    return dmlq.quantized_linear_matrix_multiply(**packed_arguments)


def pack(arguments: dict) -> dmlq.PackedMatrix:
    return dmlq.pack_matrix_multiply_b(arguments["b"], arguments["b_scale"], arguments["b_zero_point"])


SHAPES = {  # a's shape, b's shape
    "matrix-vector": ((1, 64), (64, 96)),
    "row and column tails": ((9, 20), (20, 49)),
    "K not a multiple of the step": ((8, 7), (7, 48)),
    "K longer than one int32 chunk": ((3, 33031), (33031, 5)),
    "batched B": ((2, 5, 30), (2, 30, 50)),
    "B broadcast over a's batches": ((3, 2, 4, 9), (3, 1, 9, 11)),
    "2-D B for 3-D A": ((2, 3, 16), (16, 100)),
}


@pytest.mark.parametrize("per_column", [False, True], ids=["per-tensor", "per-column"])
@pytest.mark.parametrize("b_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("shapes", list(SHAPES.values()), ids=list(SHAPES))
def test_packed_b_gives_the_unpacked_bits(level, shapes, b_dtype, per_column, rng) -> None:
    arguments = operands(rng, *shapes, b_dtype, per_column)
    want = multiply(arguments)
    assert np.any((0 < want) & (want < 255)) and len(np.unique(want)) > 1  # not all clamped
    assert np.array_equal(multiply(arguments, pack(arguments)), want)


def centred_zero_points(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Zero points near the middle of the type's range (results spread over the output's)."""
    return (rng.integers(-3, 4, shape) + (128 if dtype == "uint8" else 0)).astype(dtype)


FEW_ROWS_SHAPES = [  # K, N: groups of 4 k around the accumulator sets' turns (of up to 4), column tails
    (4, 48),
    (21, 97),
    (52, 50),
    (63, 1),
]
SPLIT_K_SHAPES = [  # one or two B panels of 256 KiB or more: two threads split K (VNNI panels: 48 columns,
    (20_006, 12),
    (8_198, 40),
    (40_003, 7),  # AVX2's: 16); beyond 32 768 k the shares add up in int64
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "a_dtype, b_dtype", [("uint8", "int8"), ("int8", "uint8"), ("uint8", "uint8"), ("int8", "int8")]
)
def test_a_few_rows_with_a_packed_b_give_the_reference(level, threads, a_dtype, b_dtype, rng) -> None:
    """1 to 7 rows against a packed B: the kernels' few-row tiles (no padding rows), K split across
    threads where B has fewer panels than threads, per-column parameters, both signs on both sides."""
    previous = dmlq.get_num_threads()
    dmlq.set_num_threads(threads)
    try:
        for m in range(1, 8):
            for k, n in FEW_ROWS_SHAPES + (SPLIT_K_SHAPES if m in (1, 4, 7) else []):
                a, b = random_bytes(rng, (m, k), a_dtype), random_bytes(rng, (k, n), b_dtype)
                b_scale = rng.uniform(0.01, 0.03, n).astype(np.float32)
                b_zero = centred_zero_points(rng, (n,), b_dtype)
                a_zero = centred_zero_points(rng, (), a_dtype)
                out_scale = np.float32(
                    0.05 * 0.02 * 74**2 / 40 * np.sqrt(k)
                )  # (A - za)(B - zb): 74**2 sqrt(K)
                want = reference.quantized_linear_matrix_multiply(
                    a, np.float32(0.05), a_zero, b, b_scale, b_zero, out_scale, np.uint8(128), np.uint8
                )
                packed = dmlq.pack_matrix_multiply_b(b, b_scale, b_zero)
                got = dmlq.quantized_linear_matrix_multiply(a, np.float32(0.05), a_zero, packed, None, None,
                                                            out_scale, np.uint8(128))  # fmt: skip
                assert np.array_equal(got, want), (m, k, n)
                assert want.size < 8 or np.mean((0 < want) & (want < 255)) > 0.5, (m, k, n)  # not clamped
    finally:
        dmlq.set_num_threads(previous)


@pytest.mark.parametrize("view", ["rows of a wider array", "reversed rows", "the last rows of an array"])
def test_a_few_rows_read_where_they_lie(level, view, rng) -> None:
    """1 to 7 uint8 rows whose K needs no padding are read in place where the kernels read only real
    rows (a panel short of its height), from views whose rows are not K bytes apart, or end the array."""
    k, n = 64, 100
    b = random_bytes(rng, (k, n), "int8")
    packed = dmlq.pack_matrix_multiply_b(b, np.float32(0.02), None)
    for m in range(1, 8):
        whole = random_bytes(rng, (m + 3, 2 * k), "uint8")
        a = {"rows of a wider array": whole[:m, k:], "reversed rows": whole[m - 1 :: -1, :k],
             "the last rows of an array": whole[3:, k:]}[view]  # fmt: skip
        out_scale = np.float32(0.05 * 0.02 * 74**2 / 40 * np.sqrt(k))
        want = reference.quantized_linear_matrix_multiply(
            a, np.float32(0.05), np.uint8(128), b, np.float32(0.02), None, out_scale, np.uint8(128), np.uint8
        )
        got = dmlq.quantized_linear_matrix_multiply(a, np.float32(0.05), np.uint8(128), packed, None, None,
                                                    out_scale, np.uint8(128))  # fmt: skip
        assert np.array_equal(got, want), m


@pytest.mark.parametrize("scale_shape", [(1, 96), (1, 1, 96)], ids=["[1, N]", "[1, 1, N]"])
def test_packed_per_column_parameters_of_any_shape_give_the_unpacked_result(scale_shape, rng) -> None:
    """A packed B's per-column scale and zero point as [1, N] (a 2-D product) or [1, 1, N] (which
    makes the result 3-D, as for unpacked operands)."""
    arguments = operands(rng, (2, 64), (64, 96), "int8", per_column=True)
    arguments["b_scale"] = arguments["b_scale"].reshape(scale_shape)
    arguments["b_zero_point"] = arguments["b_zero_point"].reshape(scale_shape)
    want = multiply(arguments)
    got = multiply(arguments, pack(arguments))
    assert got.shape == want.shape == (1,) * (len(scale_shape) - 2) + (2, 96)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "shapes",
    [((64, 300), (300, 500)), ((4, 64, 300), (4, 300, 200)), ((4, 64, 300), (1, 300, 200))],
    ids=["one batch shared by the threads", "a batch per thread", "one B for every batch"],
)
def test_packed_b_is_the_same_on_every_thread_count(threads: int, shapes, rng: np.random.Generator) -> None:
    arguments = operands(rng, *shapes, "int8", per_column=True)
    previous = dmlq.get_num_threads()
    dmlq.set_num_threads(threads)
    try:
        packed = pack(arguments)
        assert np.array_equal(multiply(arguments, packed), multiply(arguments))
    finally:
        dmlq.set_num_threads(previous)


def test_packed_b_ignores_later_writes_to_its_arrays(rng: np.random.Generator) -> None:
    arguments = operands(rng, (4, 40), (40, 60), "int8", per_column=True)
    want = multiply(arguments)
    packed = pack(arguments)
    for name in ("b", "b_scale", "b_zero_point"):
        arguments[name][...] = arguments[name][::-1].copy()
    assert np.array_equal(multiply(arguments, packed), want)


def column_variants(arguments: dict) -> list[tuple[np.ndarray, np.ndarray]]:
    """B's per-column scale and zero point, then each changed in one column only (a scale by one bit),
    per tensor, and the first again."""
    scale, zero_point = arguments["b_scale"].reshape(1, -1), arguments["b_zero_point"].reshape(1, -1)
    nudged_scale = scale.copy()
    nudged_scale[0, -1] = np.nextafter(nudged_scale[0, -1], np.float32(1))
    moved_zero_point = zero_point.copy()
    moved_zero_point[0, 0] += 1
    per_tensor = (scale[:, :1].copy(), zero_point[:, :1].copy())
    return [(scale, zero_point), (nudged_scale, zero_point), (scale, moved_zero_point), per_tensor,
            (scale, zero_point)]  # fmt: skip


def core_multiply(arguments: dict, b: object, b_scale: np.ndarray, b_zero_point: np.ndarray) -> np.ndarray:
    """The compiled core's multiply of ``arguments`` with ``b`` (an array or a packing) and B's parameters."""
    a = arguments["a"]
    out = np.empty((a.shape[0], arguments["b"].shape[1]), np.uint8)
    two_d = {name: np.reshape(arguments[name], (1, 1)) for name in
             ("a_scale", "a_zero_point", "output_scale", "output_zero_point")}  # fmt: skip
    _core.matmul(a, two_d["a_scale"], two_d["a_zero_point"], b, b_scale, b_zero_point, two_d["output_scale"],
                 two_d["output_zero_point"], out, False)  # fmt: skip
    return out


@pytest.mark.parametrize("b_dtype", ["uint8", "int8"])
def test_one_packing_serves_other_scales_and_zero_points_in_turn(level, b_dtype, rng) -> None:
    # a packing keeps the column side of its last multiply's quantization (gemm.c): a multiply with
    # parameters that differ in one column, or by one bit, must not reuse it
    arguments = operands(rng, (3, 40), (40, 100), b_dtype, per_column=True)
    packing = _core.pack_b(arguments["b"])
    for b_scale, b_zero_point in column_variants(arguments):
        want = core_multiply(arguments, arguments["b"], b_scale, b_zero_point)
        assert np.array_equal(core_multiply(arguments, packing, b_scale, b_zero_point), want)


def test_one_packing_used_by_two_threads_at_once(rng) -> None:
    import threading

    arguments = operands(rng, (1, 64), (64, 4000), "int8", per_column=True)
    packing = _core.pack_b(arguments["b"])
    variants = column_variants(arguments)
    wants = [core_multiply(arguments, arguments["b"], *variant) for variant in variants]
    wrong = []

    def run(offset: int) -> None:
        for turn in range(200):
            index = (turn + offset) % len(variants)
            if not np.array_equal(core_multiply(arguments, packing, *variants[index]), wants[index]):
                wrong.append(index)

    threads = [threading.Thread(target=run, args=(offset,)) for offset in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong


@pytest.mark.skipif(len(LEVELS) < 2, reason="one CPU level only")
def test_packed_at_one_level_used_at_another(rng: np.random.Generator) -> None:
    arguments = operands(rng, (5, 70), (70, 50), "uint8", per_column=False)
    packed = pack(arguments)  # at the detected level
    try:
        for other in LEVELS:
            _core.set_level(other)
            assert np.array_equal(multiply(arguments, packed), multiply(arguments)), other
    finally:
        _core.set_level(_core.detected_level())


@pytest.mark.skipif(len(LEVELS) < 2, reason="one CPU level only")
def test_after_a_level_change_the_one_step_call_takes_the_new_packing(rng: np.random.Generator) -> None:
    """The first call at another level packs B for it (the general path); the calls after it hand
    that packing to the one-step C call, which takes them rather than declining each one."""
    from dmlq.numpy_api import one_step

    arguments = operands(rng, (5, 70), (70, 50), "uint8", per_column=False)
    packed = pack(arguments)
    try:
        for other in LEVELS:
            _core.set_level(other)
            want = multiply(arguments, packed)
            operand, scale, zero_point = packed.kernel_operands
            assert operand is packed.packed_b.for_kernels(), other
            a, a_scale, a_zero_point = (arguments[name] for name in ("a", "a_scale", "a_zero_point"))
            output = (arguments["output_scale"], arguments["output_zero_point"])
            b = (operand, scale, zero_point)
            got = one_step.matrix_multiply(a, a_scale, a_zero_point, *b, *output, None, False)
            assert got is not None and np.array_equal(got, want), other
    finally:
        _core.set_level(_core.detected_level())


def test_a_packed_matrix_pickles_and_packs_again(rng: np.random.Generator) -> None:
    import pickle

    arguments = operands(rng, (3, 40), (40, 20), "int8", per_column=True)
    packed = pack(arguments)
    copy = pickle.loads(pickle.dumps(packed))
    assert copy.kernel_operands[0] is copy.packed_b.last_operand
    assert copy.kernel_operands[0] is not packed.kernel_operands[0]  # packed again, not shared
    assert np.array_equal(multiply(arguments, copy), multiply(arguments, packed))


@pytest.mark.skipif(len(LEVELS) < 2, reason="one CPU level only")
def test_the_core_refuses_a_packing_of_another_level() -> None:
    packing = _core.pack_b(np.int8([[1, 2], [3, 4]]))
    one = np.float32([[1.0]])
    try:
        _core.set_level("portable")
        with pytest.raises(ValueError, match="packed for another CPU level"):
            out = np.empty((1, 2), np.uint8)
            _core.matmul(np.uint8([[1, 1]]), one, None, packing, one, None, one, None, out, False)
    finally:
        _core.set_level(_core.detected_level())


UNPACK_SHAPES = [(1, 1), (7, 49), (64, 96), (33031, 5), (2, 30, 50), (3, 1, 9, 11), (0, 4), (4, 0), (2, 0, 3)]


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("shape", UNPACK_SHAPES, ids=str)
def test_a_packing_gives_back_the_bytes_it_was_packed_from(level, shape, dtype, rng) -> None:
    b = random_bytes(rng, shape, dtype)
    for source in (b, np.asfortranarray(b)):
        unpacked = _core.unpack_b(_core.pack_b(source))
        assert unpacked.dtype == b.dtype and unpacked.flags.c_contiguous
        assert np.array_equal(unpacked, b)


def test_packing_keeps_no_second_copy_of_b(rng: np.random.Generator) -> None:
    """The packing is the only copy of B, and multiplies, batched ones included, unpack none
    (NumPy's allocations are traced; the kernels' are not)."""
    import tracemalloc

    arguments = operands(rng, (2, 3, 1024), (1024, 2048), "int8", per_column=True)
    want = multiply(arguments)
    tracemalloc.start()
    try:
        packed = pack(arguments)
        got = multiply(arguments, packed)  # 3-D A: the NumPy layer's general route
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < arguments["b"].nbytes // 8
    assert np.array_equal(got, want)
    assert np.array_equal(packed.packed_b.array, arguments["b"])  # its bytes, unpacked on request


def test_packed_matrix_is_read_only() -> None:
    packed = dmlq.pack_matrix_multiply_b(np.uint8([[1, 2, 3]]), [0.5, 0.25, 1.0], np.uint8(3))
    assert packed.shape == (1, 3) and packed.dtype == np.uint8
    assert packed.b_scale.tolist() == [0.5, 0.25, 1.0] and packed.b_zero_point == 3
    assert not packed.b_scale.flags.writeable and not packed.packed_b.array.flags.writeable
    with pytest.raises(AttributeError):
        packed.shape = (3, 1)
    want = "PackedMatrix(shape=(1, 3), dtype=uint8, b_scale=per-column, b_zero_point=per-tensor)"
    assert repr(packed) == want


def test_a_packed_b_carries_its_own_quantization() -> None:
    packed = dmlq.pack_matrix_multiply_b(np.int8([[1]]), 1.0)
    a = np.uint8([[1]])
    with pytest.raises(DmlError, match=r"^b_scale: must be None when b is a PackedMatrix"):
        dmlq.quantized_linear_matrix_multiply(a, 1.0, None, packed, 1.0, None, 1.0, None)
    with pytest.raises(DmlError, match=r"^b_scale, b_zero_point: must be None"):
        dmlq.quantized_linear_matrix_multiply(a, 1.0, None, packed, 1.0, np.int8(0), 1.0, None)


@pytest.mark.parametrize(
    ("b", "b_scale", "b_zero_point", "message"),
    [
        (np.int8([1, 2]), 1.0, None, r"^b: 1 dimensions"),
        (np.int8([[1, 2]]), [[1.0], [2.0]], None, r"^b_scale: shape \(2, 1\) is not supported"),
        (np.int8([[1, 2]]), 0.0, None, r"^b_scale: a scale of 0"),
        (np.int8([[1, 2]]), 1.0, np.uint8(0), r"^b_zero_point: dtype uint8 differs"),
        (np.int8([[1, 2]]), 1.0, np.int8([1, 2, 3]), r"^b_zero_point: shape \(3,\) is not supported"),
    ],
)
def test_packing_checks_its_arguments(b, b_scale, b_zero_point, message: str) -> None:
    with pytest.raises(DmlError, match=message):
        dmlq.pack_matrix_multiply_b(b, b_scale, b_zero_point)


# -- the DirectML layer: initialize ------------------------------------------------------------


def matrix_multiply(owned: tuple[str, ...], b_strides: list[int] | None = None) -> dmlq.CompiledOperator:
    """A [1, 2, 2, 3] x [1, 2, 3, 4] multiply whose fields named in ``owned`` are OWNED_BY_DML."""

    def desc(name: str, data_type: DataType, sizes: list[int], strides: list[int] | None = None):
        return TensorDesc(data_type, sizes, strides, flags=OWNED if name in owned else 0)

    per_tensor = [1, 1, 1, 1]
    return DEVICE.compile_operator(ops.QuantizedLinearMatrixMultiply(
        a=desc("a", DataType.UINT8, [1, 2, 2, 3]), a_scale=desc("a_scale", DataType.FLOAT32, per_tensor),
        b=desc("b", DataType.INT8, [1, 2, 3, 4], b_strides),
        b_scale=desc("b_scale", DataType.FLOAT32, [1, 1, 1, 4]),
        b_zero_point=desc("b_zero_point", DataType.INT8, per_tensor),
        output_scale=desc("output_scale", DataType.FLOAT32, per_tensor),
        output=TensorDesc(DataType.UINT8, [1, 2, 2, 4]),
    ))  # fmt: skip


def matrix_buffers(rng: np.random.Generator, b_batches: int = 2) -> list[np.ndarray]:
    return [
        random_bytes(rng, (1, 2, 2, 3), "uint8"), np.float32([0.5]), None,
        random_bytes(rng, (b_batches, 3, 4), "int8"), np.float32([0.1, 0.2, 0.3, 0.4]), np.int8([-3]),
        np.float32([2.0]), None,
    ]  # fmt: skip


def executed(op: dmlq.CompiledOperator, inputs: list) -> np.ndarray:
    out = np.zeros((1, 2, 2, 4), np.uint8)
    op.execute(inputs, [out])
    return out


def only(names: tuple[str, ...], buffers: list) -> list:
    fields = [f.name for f in ops.QuantizedLinearMatrixMultiply.input_fields()]
    return [buffer if name in names else None for name, buffer in zip(fields, buffers)]


def others(names: tuple[str, ...], buffers: list) -> list:
    fields = [f.name for f in ops.QuantizedLinearMatrixMultiply.input_fields()]
    return [None if name in names else buffer for name, buffer in zip(fields, buffers)]


@pytest.mark.parametrize("owned", [("b",), ("b", "b_scale", "b_zero_point"), ("a_scale", "output_scale")])
def test_initialize_binds_owned_inputs_once(owned: tuple[str, ...], rng: np.random.Generator) -> None:
    buffers = matrix_buffers(rng)
    want = executed(matrix_multiply(()), buffers)
    op = matrix_multiply(owned)
    op.initialize(only(owned, buffers))
    for buffer in only(owned, buffers):
        if buffer is not None:
            buffer[...] = 1  # the operator keeps its own copies
    assert np.array_equal(executed(op, others(owned, buffers)), want)


def test_initialize_packs_a_broadcast_b_once(rng: np.random.Generator) -> None:
    buffers = matrix_buffers(rng, b_batches=1)
    broadcast = [0, 0, 4, 1]  # one B for both batches
    want = executed(matrix_multiply((), broadcast), buffers)
    op = matrix_multiply(("b",), broadcast)
    op.initialize(only(("b",), buffers))
    assert op._owned["b"].array.shape == (1, 1, 3, 4)  # one batch packed, read by both
    assert np.array_equal(executed(op, others(("b",), buffers)), want)


def test_initialize_again_replaces_the_owned_inputs(rng: np.random.Generator) -> None:
    first, second = matrix_buffers(rng), matrix_buffers(rng)
    op = matrix_multiply(("b",))
    op.initialize(only(("b",), first))
    op.initialize(only(("b",), second))
    want = executed(matrix_multiply(()), [*first[:3], second[3], *first[4:]])
    assert np.array_equal(executed(op, others(("b",), first)), want)


def test_initialize_refusals(rng: np.random.Generator) -> None:
    buffers = matrix_buffers(rng)
    op = matrix_multiply(("b",))
    unbound = r"^QuantizedLinearMatrixMultiply.execute: call initialize first, .* OWNED_BY_DML input\(s\) b "
    with pytest.raises(DmlError, match=unbound):
        executed(op, others(("b",), buffers))
    with pytest.raises(DmlError, match=r"^QuantizedLinearMatrixMultiply.initialize: a is not OWNED_BY_DML"):
        op.initialize(only(("a", "b"), buffers))
    with pytest.raises(DmlError, match=r"initialize inputs\[3\] \(b\): a buffer is required for the OWNED"):
        op.initialize(only((), buffers))
    with pytest.raises(DmlError, match=r"initialize inputs\[3\] \(b\): buffer of 12 bytes is smaller"):
        op.initialize(only(("b",), [*buffers[:3], buffers[3][:1], *buffers[4:]]))
    with pytest.raises(DmlError, match=r"^QuantizedLinearMatrixMultiply.initialize: inputs needs 8 buffer"):
        op.initialize([None])
    op.initialize(only(("b",), buffers))
    with pytest.raises(DmlError, match=r"execute inputs\[3\] \(b\): OWNED_BY_DML, bound by initialize"):
        executed(op, buffers)


def test_an_operator_without_owned_inputs_initializes_with_nothing(rng: np.random.Generator) -> None:
    op = matrix_multiply(())
    op.initialize([None] * 8)
    buffers = matrix_buffers(rng)
    assert np.array_equal(executed(op, buffers), executed(matrix_multiply(()), buffers))


def test_element_wise_owned_inputs_are_copied() -> None:
    plain = TensorDesc(DataType.FLOAT32, [3])
    op = DEVICE.compile_operator(
        ops.ElementWiseAdd(a=plain, b=TensorDesc(DataType.FLOAT32, [3], [0], flags=OWNED), output=plain)
    )
    b = bytearray(np.float32([10]).tobytes())
    op.initialize([None, b])
    b[:] = np.float32([-1]).tobytes()
    out = np.zeros(3, np.float32)
    op.execute([np.float32([1, 2, 3]), None], [out])
    assert out.tolist() == [11.0, 12.0, 13.0]
