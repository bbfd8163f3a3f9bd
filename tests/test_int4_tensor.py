"""4-bit tensors: DirectML's buffer sizes for nibbles, and the packing helpers (element 0 low)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlq
from dmlq import DataType, DmlError, TensorDesc, calc_buffer_tensor_size
from dmlq.int4 import Nibbles

I4, U4 = DataType.INT4, DataType.UINT4


@pytest.mark.parametrize(
    ("data_type", "sizes", "strides", "expected"),
    [
        (I4, [5], None, 4),  # SPEC-NOTES §1: 20 bits -> 3 bytes -> 4
        (U4, [1], None, 4),
        (I4, [8], None, 4),
        (I4, [9], None, 8),  # 36 bits -> 5 bytes -> 8
        (U4, [2, 3], None, 4),
        (I4, [4096, 11008], None, 4096 * 11008 // 2),
        (I4, [2, 3], [0, 1], 4),  # broadcast rows: 3 nibbles
        (I4, [2, 3], [1, 2], 4),  # last = 1 + 4 = 5 -> 6 nibbles
        (U4, [3, 3], [7, 1], 12),  # last = 14 + 2 = 16 -> 17 nibbles -> 9 bytes -> 12
        (U4, [1, 1, 2, 3], [0, 0, 0, 0], 4),
    ],
)
def test_buffer_size_counts_nibbles(data_type, sizes, strides, expected) -> None:
    desc = TensorDesc(data_type, sizes, strides)
    assert calc_buffer_tensor_size(desc) == desc.total_tensor_size_in_bytes == expected


@pytest.mark.parametrize(("count", "addressed"), [(1, 1), (2, 1), (3, 2), (7, 4), (8, 4)])
def test_odd_counts_address_the_last_byte_for_one_nibble(count, addressed) -> None:
    assert TensorDesc(I4, [count]).addressed_bytes == addressed


def test_element_strides_count_nibbles() -> None:
    desc = TensorDesc(U4, [2, 3, 5])
    assert desc.element_strides == (15, 5, 1)
    assert TensorDesc(U4, [2, 3], strides=[4, 1]).total_tensor_size_in_bytes == 4


def test_total_size_below_the_nibble_rule_is_refused() -> None:
    q = TensorDesc(I4, [9], total_tensor_size_in_bytes=4)
    desc = dmlq.ops.Dequantize(input=q, quantization_tensors=[TensorDesc(DataType.FLOAT32, [1])],
                               output=TensorDesc(DataType.FLOAT32, [9]))  # fmt: skip
    with pytest.raises(DmlError, match=r"Dequantize\.input: total_tensor_size_in_bytes 4 is less than the 8"):
        dmlq.Device().compile_operator(desc)


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4])
@pytest.mark.parametrize("count", [1, 2, 5, 64, 101])
def test_pack_then_unpack_is_identity(dtype, count) -> None:
    info = ml_dtypes.iinfo(dtype)
    values = np.random.default_rng(count).integers(info.min, info.max + 1, count).astype(dtype)
    packed = dmlq.pack_int4(values)
    assert packed.dtype == np.uint8 and packed.size == (count + 1) // 2
    np.testing.assert_array_equal(dmlq.unpack_int4(packed, values.shape, dtype), values)


def test_pack_puts_element_0_in_the_low_nibble_and_zeroes_an_odd_tail() -> None:
    assert dmlq.pack_int4(np.array([[1, -1], [-8, 7]], ml_dtypes.int4)).tolist() == [0xF1, 0x78]
    assert dmlq.pack_int4(np.array([15, 3, 9], ml_dtypes.uint4)).tolist() == [0x3F, 0x09]


def test_unpack_reads_twos_complement_nibbles() -> None:
    values = dmlq.unpack_int4(np.uint8([0x8F, 0x07]), (2, 2), "int4")
    assert values.dtype == np.dtype(ml_dtypes.int4)
    assert values.astype(int).tolist() == [[-1, -8], [7, 0]]
    assert dmlq.unpack_int4(np.uint8([0x8F]), 2, ml_dtypes.uint4).astype(int).tolist() == [15, 8]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: dmlq.pack_int4(np.int8([1, 2])), r"pack_int4: array: .* is not a 4-bit type"),
        (lambda: dmlq.unpack_int4(np.uint8([1]), (3,), "int4"), r"unpack_int4: packed holds 2 nibbles"),
        (lambda: dmlq.unpack_int4(np.int8([1]), (1,), "int4"), r"unpack_int4: packed must be a uint8"),
        (lambda: dmlq.unpack_int4(np.uint8([1]), (1,), "int8"), r"unpack_int4: dtype: 'int8' is not a 4-bit"),
    ],
)
def test_helpers_name_the_bad_argument(call, message) -> None:
    with pytest.raises(DmlError, match=message):
        call()


def test_strided_nibbles_store_touches_only_their_own_nibbles() -> None:
    memory = np.full(4, 0xAA, np.uint8)
    nibbles = Nibbles(memory, (2, 2), (3, 1), np.dtype(ml_dtypes.uint4))  # nibbles 0, 1, 3, 4
    nibbles.store(np.array([[1, 2], [3, 4]], ml_dtypes.uint4))
    assert [hex(b) for b in memory] == ["0x21", "0x3a", "0xa4", "0xaa"]
    assert nibbles.unpacked().astype(int).tolist() == [[1, 2], [3, 4]]


def test_zero_strides_read_one_nibble_everywhere() -> None:
    nibbles = Nibbles(np.uint8([0x5C]), (2, 3), (0, 0), np.dtype(ml_dtypes.int4))
    assert nibbles.unpacked().astype(int).tolist() == [[-4] * 3] * 2
