"""DML_BUFFER_TENSOR_DESC: DMLCalcBufferTensorSize and the description's own validity (SPEC-NOTES §1)."""

from __future__ import annotations

import numpy as np
import pytest

from dmlq import DataType, Device, DmlError, TensorDesc, TensorFlags, calc_buffer_tensor_size, ops

T = DataType
DEVICE = Device()


@pytest.mark.parametrize(
    "data_type, sizes, strides, expected",
    [
        (T.FLOAT32, [1, 1, 2, 3], None, 24),
        (T.UINT8, [1, 1, 2, 3], None, 8),
        (T.FLOAT16, [3], None, 8),
        (T.UINT8, [1, 1, 2, 3], [0, 0, 0, 0], 4),
        (T.FLOAT32, [2, 3], [1, 2], 24),
        (T.UINT8, [2, 3], [5, 1], 8),
        (T.INT4, [5], None, 4),
        # beyond the notes' examples: padding strides, 64-bit, odd nibble counts
        (T.FLOAT32, [2, 3], [4, 1], 28),
        (T.INT64, [3], None, 24),
        (T.UINT4, [9], None, 8),
        (T.INT8, [1], None, 4),
        (T.FLOAT64, [2, 2], [0, 1], 16),
    ],
)
def test_calc_buffer_tensor_size(data_type, sizes, strides, expected) -> None:
    desc = TensorDesc(data_type, sizes, strides)
    assert calc_buffer_tensor_size(desc) == expected
    assert desc.total_tensor_size_in_bytes == expected


@pytest.mark.parametrize("sizes, strides", [([0], None), ([0, 3], [5, 1]), ([2, 0], [1, 9]), ([], None)])
def test_calc_buffer_tensor_size_of_nothing_is_zero(sizes, strides) -> None:
    assert calc_buffer_tensor_size(TensorDesc(T.FLOAT32, sizes, strides)) == 0


def test_total_size_defaults_to_calc_but_keeps_a_given_value() -> None:
    assert TensorDesc(T.FLOAT32, [3], total_tensor_size_in_bytes=100).total_tensor_size_in_bytes == 100


def test_building_never_raises_for_directml_rules() -> None:
    TensorDesc(
        T.UNKNOWN,
        [0, -1],
        strides=[1],
        total_tensor_size_in_bytes=-5,
        flags=7,
        guaranteed_base_offset_alignment=3,
    )
    TensorDesc(99, [2.5], strides=["x"])


def test_numpy_integers_are_plain_ints() -> None:
    desc = TensorDesc(T.FLOAT32, np.array([2, 3]), np.array([3, 1]), np.int64(24), np.uint8(0), np.int32(16))
    assert desc == TensorDesc(T.FLOAT32, [2, 3], [3, 1], 24, 0, 16)
    compile_with(desc)


def compile_with(desc: TensorDesc, *, as_output: bool = False, level: str = "6_4") -> None:
    """Compile an ElementWiseAdd with ``desc`` as input a (or as the output)."""
    plain = TensorDesc(desc.data_type, desc.sizes)
    if as_output:
        op = ops.ElementWiseAdd(a=plain, b=plain, output=desc)
    else:
        op = ops.ElementWiseAdd(a=desc, b=plain, output=plain)
    Device(level).compile_operator(op)


def refused(desc: TensorDesc, pattern: str, *, as_output: bool = False) -> None:
    field = "output" if as_output else "a"
    with pytest.raises(DmlError, match=rf"^ElementWiseAdd\.{field}: .*{pattern}"):
        compile_with(desc, as_output=as_output)


@pytest.mark.parametrize("sizes", [[0], [2, 0, 3], [-1, 2]])
def test_sizes_must_be_at_least_one(sizes) -> None:
    refused(TensorDesc(T.FLOAT32, sizes, total_tensor_size_in_bytes=64), r"sizes\[\d\] = -?\d+ must be")


@pytest.mark.parametrize("count, ok", [(0, False), (1, True), (8, True), (9, False)])
def test_dimension_count_overall(count: int, ok: bool) -> None:
    desc = TensorDesc(T.FLOAT32, [1] * count)
    if ok:
        compile_with(desc)
    else:
        refused(desc, f"dimension count {count} is outside 1 to 8")


def test_strides_length_must_match() -> None:
    refused(TensorDesc(T.FLOAT32, [2, 3], [1], total_tensor_size_in_bytes=64), "has 1 strides for 2 sizes")
    refused(TensorDesc(T.FLOAT32, [2, 3], [3, 1, 1], total_tensor_size_in_bytes=64), "has 3 strides")


@pytest.mark.parametrize("stride", [-1, 2**32, 1.0, None])
def test_strides_must_be_unsigned_32_bit_integers(stride) -> None:
    refused(
        TensorDesc(T.FLOAT32, [2, 3], [3, stride], total_tensor_size_in_bytes=10**12),
        r"strides\[1\] = .* must be an integer",
    )


def test_total_size_at_least_the_computed_size() -> None:
    for strides in (None, [0, 1], [1, 2], [8, 2]):
        needed = calc_buffer_tensor_size(TensorDesc(T.FLOAT32, [2, 3], strides))
        compile_with(TensorDesc(T.FLOAT32, [2, 3], strides, total_tensor_size_in_bytes=needed))
        compile_with(TensorDesc(T.FLOAT32, [2, 3], strides, total_tensor_size_in_bytes=needed + 1000))
        refused(
            TensorDesc(T.FLOAT32, [2, 3], strides, total_tensor_size_in_bytes=needed - 1),
            f"total_tensor_size_in_bytes {needed - 1} is less than the {needed} bytes",
        )


@pytest.mark.parametrize("total", [-4, 24.0, "24"])
def test_total_size_must_be_an_integer(total) -> None:
    refused(TensorDesc(T.FLOAT32, [2, 3], total_tensor_size_in_bytes=total), "total_tensor_size_in_bytes")


@pytest.mark.parametrize(
    "data_type, alignment, ok",
    [
        (T.FLOAT32, 0, True),
        (T.FLOAT32, 4, True),
        (T.FLOAT32, 16, True),
        (T.FLOAT32, 256, True),
        (T.FLOAT32, 2, False),
        (T.FLOAT32, 1, False),
        (T.FLOAT32, 12, False),
        (T.FLOAT32, -4, False),
        (T.FLOAT32, 4.0, False),
        (T.FLOAT16, 2, True),
        (T.FLOAT16, 1, False),
        (T.FLOAT16, 6, False),
    ],
)
def test_guaranteed_base_offset_alignment(data_type, alignment, ok: bool) -> None:
    desc = TensorDesc(data_type, [4], guaranteed_base_offset_alignment=alignment)
    if ok:
        compile_with(desc)
    else:
        refused(desc, "guaranteed_base_offset_alignment .* must be 0 or a power of two of at least")


def test_alignment_for_one_byte_elements() -> None:
    plain = TensorDesc(T.UINT8, [4])
    for alignment, ok in ((1, True), (2, True), (3, False)):
        desc = TensorDesc(T.UINT8, [4], guaranteed_base_offset_alignment=alignment)
        op = ops.ElementWiseAdd(a=desc, b=plain, output=plain)
        if ok:
            DEVICE.compile_operator(op)
        else:
            with pytest.raises(DmlError, match="power of two"):
                DEVICE.compile_operator(op)


def test_element_count_limit() -> None:
    # 65535 * 65537 == 2**32 - 1: the largest count allowed; one more element is refused
    compile_with(TensorDesc(T.FLOAT32, [65535, 65537]))
    refused(TensorDesc(T.FLOAT32, [65536, 65536]), r"element count 4294967296 exceeds 2\^32 - 1")


@pytest.mark.parametrize(
    "flags, as_output, ok",
    [
        (0, False, True),
        (TensorFlags.OWNED_BY_DML, False, True),
        (0, True, True),
        (TensorFlags.OWNED_BY_DML, True, False),
        (2, False, False),
        (3, False, False),
        (True, False, False),
    ],
)
def test_flags(flags, as_output: bool, ok: bool) -> None:
    desc = TensorDesc(T.FLOAT32, [2, 3], flags=flags)
    if ok:
        compile_with(desc, as_output=as_output)
    else:
        rule = "OWNED_BY_DML is for inputs only" if as_output else "must be NONE .0. or OWNED_BY_DML .1."
        refused(desc, rule, as_output=as_output)


@pytest.mark.parametrize("data_type", [T.UNKNOWN, 99, "FLOAT8"])
def test_unknown_data_type(data_type) -> None:
    op = ops.ElementWiseAdd(
        a=TensorDesc(data_type, [4], total_tensor_size_in_bytes=16),
        b=TensorDesc(T.FLOAT32, [4]),
        output=TensorDesc(T.FLOAT32, [4]),
    )
    with pytest.raises(
        DmlError, match=r"ElementWiseAdd\.a: data type .* is not a valid DML_TENSOR_DATA_TYPE"
    ):
        DEVICE.compile_operator(op)


ILL_TYPED_FIELDS = [
    # (fields of a FLOAT32 [4] description replaced, the start of the refusal's rule)
    (dict(data_type=1.0), "data type 1.0 is not"),
    (dict(data_type=True), "data type True is not"),
    (dict(data_type=np.array([1, 2])), "data type array"),
    (dict(sizes=4), "sizes 4 must be a sequence"),
    (dict(sizes=None), "sizes None must be a sequence"),
    (dict(sizes="4"), "sizes '4' must be a sequence"),
    (dict(sizes=np.array(4)), "sizes array.4. must be a sequence"),
    (dict(sizes=[4.0]), r"sizes\[0\] = 4.0 must be an integer"),
    (dict(sizes=np.array([[2, 2]])), r"sizes\[0\] = array"),
    (dict(strides=1), "strides 1 must be None or a sequence"),
    (dict(strides=[True]), r"strides\[0\] = True must be an integer"),
    (dict(strides=["1"]), r"strides\[0\] = '1' must be an integer"),
    (dict(strides=np.array([1.0])), r"strides\[0\] = np.float64.1.0. must be an integer"),
    (dict(total_tensor_size_in_bytes="16"), "total_tensor_size_in_bytes = '16' must be"),
    (dict(total_tensor_size_in_bytes=np.array([16, 16])), "total_tensor_size_in_bytes = array"),
    (dict(flags="x"), "flags 'x' must be"),
    (dict(flags=np.array([0, 1])), "flags array"),
    (dict(guaranteed_base_offset_alignment=np.array([1, 2])), "guaranteed_base_offset_alignment array"),
    (dict(guaranteed_base_offset_alignment=0.0), "guaranteed_base_offset_alignment 0.0 must be"),
]


@pytest.mark.parametrize("changes, rule", ILL_TYPED_FIELDS)
def test_ill_typed_fields_build_and_are_refused_at_compile(changes: dict, rule: str) -> None:
    desc = TensorDesc(**({"data_type": T.FLOAT32, "sizes": [4]} | changes))
    op = ops.ElementWiseAdd(a=desc, b=TensorDesc(T.FLOAT32, [4]), output=TensorDesc(T.FLOAT32, [4]))
    with pytest.raises(DmlError, match=rf"^ElementWiseAdd\.a: {rule}"):
        DEVICE.compile_operator(op)


def test_zero_strides_allowed_on_inputs_refused_on_outputs() -> None:
    compile_with(TensorDesc(T.FLOAT32, [2, 3], [0, 1]))
    compile_with(TensorDesc(T.FLOAT32, [2, 3], [0, 0]))
    refused(TensorDesc(T.FLOAT32, [2, 3], [0, 1]), r"strides\[0\] is 0 on an output", as_output=True)
    # a zero stride on a dimension of size 1 addresses nothing twice
    compile_with(TensorDesc(T.FLOAT32, [1, 3], [0, 1]), as_output=True)


@pytest.mark.parametrize(
    "sizes, strides, ok",
    [
        ([2, 3], [3, 1], True),  # packed
        ([2, 3], [1, 2], True),  # transposed
        ([2, 3], [5, 1], True),  # row padding
        ([2, 3, 4], [1, 8, 2], True),  # a permutation
        ([2, 3], [2, 1], False),  # rows overlap
        ([2, 3], [1, 1], False),  # diagonal reuse
        ([4, 4], [3, 1], False),
    ],
)
def test_overlapping_output_strides(sizes, strides, ok: bool) -> None:
    desc = TensorDesc(T.FLOAT32, sizes, strides)
    compile_with(desc)  # any layout is fine for an input
    if ok:
        compile_with(desc, as_output=True)
    else:
        refused(desc, "output strides .* overlap", as_output=True)


@pytest.mark.parametrize(
    "field, good, bad",
    [
        ("flags", 1, True),
        ("guaranteed_base_offset_alignment", 4, 4.0),
        ("total_tensor_size_in_bytes", 24, 24.0),
    ],
)
def test_compile_does_not_depend_on_what_was_compiled_before(field: str, good, bad) -> None:
    """True == 1 and 4.0 == 4: an equal but invalid description must not hit the compile cache."""
    device = Device()
    plain = TensorDesc(T.FLOAT32, [2, 3])
    device.compile_operator(
        ops.ElementWiseAdd(a=TensorDesc(T.FLOAT32, [2, 3], **{field: good}), b=plain, output=plain)
    )
    with pytest.raises(DmlError, match=field):
        device.compile_operator(
            ops.ElementWiseAdd(a=TensorDesc(T.FLOAT32, [2, 3], **{field: bad}), b=plain, output=plain)
        )


def test_element_strides_and_addressed_bytes() -> None:
    desc = TensorDesc(T.FLOAT16, [2, 3], [1, 2])
    assert desc.element_strides == (1, 2)
    assert desc.addressed_bytes == 12  # last element at 1 + 4 = 5, six halves, no 4-byte rounding
    assert TensorDesc(T.UINT8, [2, 3]).element_strides == (3, 1)
