"""Resources: byte buffers of ``sizeInBytes`` filled from their initial values (inline, constant,
sequence or file).

INT4 and UINT4 values are packed as DirectML packs them: two per byte, element 0 in the low
nibble, an odd count leaving the last high nibble 0. Their numbers must lie in -8..7 and 0..15;
a raw file holds the packed bytes, a ``.npy`` file int8/uint8 values (one per byte, as
``writeFile`` writes them: NumPy has no 4-bit dtype of its own).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DmlError
from ..int4 import four_bit_dtype, pack_int4, unpack_int4
from ..types import DataType
from .reading import Node, file_name, parse_data_type

IMAGE_SUFFIXES = (".png", ".jpg")


@dataclass(frozen=True)
class Resource:
    """A buffer of ``sizeInBytes`` bytes, the data type of its initial values and their count."""

    name: str
    data_type: DataType
    memory: np.ndarray  # uint8; dispatches write into it
    initialized_count: int

    @property
    def initialized_bytes(self) -> int:
        return self.bytes_of(self.initialized_count)

    def bytes_of(self, count: int) -> int:
        """The bytes ``count`` elements of the resource's type take (4-bit ones: two to a byte)."""
        return -(-count * self.data_type.bits // 8)

    def values(self, count: int) -> np.ndarray:
        """The first ``count`` elements from byte 0; 4-bit ones as int8/uint8 values."""
        if is_four_bit(self.data_type):
            return four_bit_values(self.memory, count, self.data_type)
        return self.memory[: self.bytes_of(count)].view(element_dtype(self.data_type))

    def initialized_values(self) -> np.ndarray:
        """As many elements as the initial values had, from byte 0 (DxDispatch's ``print`` view)."""
        return self.values(self.initialized_count)


def is_four_bit(data_type: DataType) -> bool:
    return data_type in (DataType.INT4, DataType.UINT4)


def four_bit_values(packed: np.ndarray, count: int, data_type: DataType) -> np.ndarray:
    """The first ``count`` elements of DirectML's packed 4-bit bytes as int8/uint8 values."""
    return unpack_int4(packed, count, data_type.name.lower()).astype(value_dtype(data_type))


def value_dtype(data_type: DataType) -> np.dtype | None:
    """The NumPy dtype a resource's numbers are held in: the element's, int8/uint8 for 4-bit ones.

    >>> value_dtype(DataType.INT4), value_dtype(DataType.FLOAT16)
    (dtype('int8'), dtype('float16'))
    """
    four_bit = {DataType.INT4: np.dtype(np.int8), DataType.UINT4: np.dtype(np.uint8)}
    return four_bit.get(data_type, data_type.dtype)


def element_dtype(data_type: DataType) -> np.dtype:
    """:func:`value_dtype` of a type that has one, as every parsed resource's type does."""
    dtype = value_dtype(data_type)
    assert dtype is not None, f"{data_type.name} holds no values; parse_resource refuses it"
    return dtype


def integer_limits(data_type: DataType) -> tuple[int, int]:
    """The lowest and highest number an integer type holds."""
    if is_four_bit(data_type):
        return (-8, 7) if data_type == DataType.INT4 else (0, 15)
    limits = np.iinfo(data_type.dtype)
    return int(limits.min), int(limits.max)


_RESOURCE_FIELDS = ("type", "initialValuesDataType", "initialValues", "sizeInBytes",
                    "initialValuesOffsetInBytes", "resampleSize", "resampleMode")  # fmt: skip


def parse_resource(name: str, node: Node, base: Path) -> Resource:
    fields = node.fields(_RESOURCE_FIELDS, required=("initialValues",))
    for image_field in ("resampleSize", "resampleMode"):
        if image_field in fields:
            raise fields[image_field].error("image resources are not supported by dmlq")
    if "type" in fields and fields["type"].string() != "buffer":
        raise fields["type"].error('expected "buffer", the only resource type DxDispatch\'s schema lists')
    declared = parse_data_type(fields["initialValuesDataType"]) if "initialValuesDataType" in fields else None
    data, data_type, count = _initial_values(fields["initialValues"], declared, base)
    offset_node = fields.get("initialValuesOffsetInBytes")
    offset = offset_node.unsigned(64) if offset_node else 0
    size = _buffer_size(fields.get("sizeInBytes"), offset + data.size)
    _ensure_fits(
        fields.get("sizeInBytes", node),
        size + data.size,
        f"a buffer of {size} bytes and the {data.size} bytes of initial values it is filled from",
    )
    try:
        memory = np.zeros(size, np.uint8)
    except (MemoryError, ValueError):
        raise node.error(f"cannot allocate {size} bytes") from None
    memory[offset : offset + data.size] = data
    return Resource(name, data_type, memory, count)


def _buffer_size(node: Node | None, needed: int) -> int:
    if node is None:
        return -(-needed // 4) * 4  # DxDispatch rounds a size it computes up to 4 bytes
    size = node.unsigned(64)
    if size < needed:
        raise node.error(f"{size} bytes cannot hold the {needed} bytes the initial values reach")
    return size


def _ensure_fits(node: Node, needed: int, what: str) -> None:
    """Refuse what the machine's memory cannot hold: past it, the kernel kills the process outright
    instead of failing the allocation."""
    memory = _physical_memory()
    if memory is not None and needed > memory:
        raise node.error(f"{what} need {needed} bytes, more than the {memory} bytes this machine has")


def _ensure_values_fit(node: Node, size: int, what: str) -> None:
    """Initial values about to be built: they and the buffer they are copied into must fit at once."""
    _ensure_fits(node, 2 * size, f"{what} ({size} bytes) and the buffer they fill")


def _physical_memory() -> int | None:
    """The machine's memory in bytes, where the platform tells it."""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows), or no such name
        return None
    return pages if pages > 0 else None


def _initial_values(node: Node, declared: DataType | None, base: Path) -> tuple[np.ndarray, DataType, int]:
    """The initial bytes (uint8), their data type and how many elements they hold."""
    value = node.value
    try:
        if isinstance(value, list):
            data_type = _element_type(declared, node)
            data = _encode(_inline_numbers(node, data_type), data_type)
        elif isinstance(value, dict) and "sourcePath" in value:
            data, data_type = _file_values(node, declared, base)
        elif isinstance(value, dict) and "value" in value:
            data_type = _element_type(declared, node)
            data = _constant(node, data_type)
        elif isinstance(value, dict) and "valueStart" in value:
            data_type = _element_type(declared, node)
            data = _sequence(node, data_type)
        elif value == "deferred":
            raise node.error('"deferred" resources (ONNX outputs) are not supported by dmlq')
        else:
            raise node.error("expected an array of numbers or an object with value, valueStart or sourcePath")
    except MemoryError:
        raise node.error("too large to allocate") from None
    if data.size == 0:
        raise node.error("the initial values are empty")
    if is_four_bit(data_type):
        return pack_int4(data.astype(four_bit_dtype(data_type.name.lower()))), data_type, data.size
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8), data_type, data.size


def _element_type(declared: DataType | None, node: Node) -> DataType:
    if declared is None:
        raise node.error("this initializer needs an initialValuesDataType")
    if declared == DataType.UNKNOWN:
        raise node.error("initialValuesDataType UNKNOWN (mixed lists for HLSL) is not supported by dmlq")
    if value_dtype(declared) is None:
        raise node.error(f"initialValuesDataType {declared.name} cannot hold initial values")
    return declared


def _inline_numbers(node: Node, data_type: DataType) -> Sequence[float | int] | np.ndarray:
    """An array's numbers: converted at once where all are plain numbers in range (a model may hold
    millions), else read one by one, which names the first that is not."""
    values = node.value
    assert isinstance(values, list), "called for an initialValues array"
    kinds = set(map(type, values))
    if data_type.is_float and kinds <= {int, float}:
        try:
            return np.array(values, dtype=np.float64)
        except OverflowError:
            pass  # an integer beyond float64's range, named below
    elif kinds <= {int}:
        low, high = integer_limits(data_type)
        if not values or (low <= min(values) and max(values) <= high):
            return values
    return [_scalar(item, data_type) for item in node.elements()]


def _scalar(node: Node, data_type: DataType) -> float | int:
    if data_type.is_float:
        return node.number()
    return node.integer(*integer_limits(data_type))


def _encode(values: Sequence[float | int] | np.ndarray, data_type: DataType) -> np.ndarray:
    """Numbers as elements of ``data_type``, converted as DxDispatch converts them."""
    if not data_type.is_float:
        return np.array(values, dtype=value_dtype(data_type))
    with np.errstate(over="ignore"):
        wide = np.array(values, dtype=np.float64)
        if data_type == DataType.FLOAT16:
            wide = wide.astype(np.float32)  # DxDispatch reads a float, then rounds it to half
        return wide.astype(data_type.dtype)


def _constant(node: Node, data_type: DataType) -> np.ndarray:
    fields = node.fields(("value", "valueCount"), required=("value", "valueCount"))
    value = _encode([_scalar(fields["value"], data_type)], data_type)
    return np.repeat(value, _value_count(fields["valueCount"], data_type))


def _sequence(node: Node, data_type: DataType) -> np.ndarray:
    """``valueStart``, then ``valueDelta`` added again and again in the element type (wrapping, rounding)."""
    names = ("valueStart", "valueDelta", "valueCount")
    fields = node.fields(names, required=names)
    start, delta = (_encode([_scalar(fields[name], data_type)], data_type) for name in names[:2])
    count = _value_count(fields["valueCount"], data_type)
    if is_four_bit(data_type):
        _check_four_bit_sequence(node, int(start[0]), int(delta[0]), count, data_type)
    steps = np.repeat(delta, count)
    steps[:1] = start
    return np.add.accumulate(steps, out=steps)  # in place: one array of the values at a time


def _check_four_bit_sequence(node: Node, start: int, delta: int, count: int, data_type: DataType) -> None:
    """A 4-bit sequence must stay in its type's range: it has no bits to wrap in as wider ones do."""
    low, high = integer_limits(data_type)
    last = start + delta * max(count - 1, 0)
    if not low <= last <= high:
        raise node.error(f"the sequence reaches {last}, outside {data_type.name}'s range {low} to {high}")


def _value_count(node: Node, data_type: DataType) -> int:
    count = node.unsigned()
    _ensure_values_fit(node, count * element_dtype(data_type).itemsize, f"{count} {data_type.name} values")
    return count


def _file_values(node: Node, declared: DataType | None, base: Path) -> tuple[np.ndarray, DataType]:
    source = node.fields(("sourcePath",), required=("sourcePath",))["sourcePath"]
    suffix = Path(source.string()).suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        raise source.error("image files are not supported by dmlq")
    path = _input_path(source, base)
    _ensure_values_fit(source, path.stat().st_size, f"the values of {path}")
    if suffix != ".npy":
        data_type = _element_type(declared, node)
        data = _read_bytes(path, source)
        if is_four_bit(data_type):  # packed bytes: back to values, packed again with the others
            data = four_bit_values(data, 2 * data.size, data_type)
        return data, data_type
    array = _read_npy(path, source)
    if declared is not None and is_four_bit(declared) and array.dtype == value_dtype(declared):
        return _four_bit_values(array, declared, source), declared
    try:
        file_type = DataType.from_dtype(array.dtype)
    except DmlError as error:
        raise source.error(str(error)) from None
    if declared is not None and declared != file_type:
        raise source.error(f"the file holds {file_type.name}, initialValuesDataType says {declared.name}")
    return array, file_type


def _four_bit_values(array: np.ndarray, data_type: DataType, source: Node) -> np.ndarray:
    """A .npy file's int8/uint8 values for a 4-bit resource, each in the type's range."""
    low, high = integer_limits(data_type)
    outside = np.flatnonzero((array < low) | (array > high))
    if outside.size:
        index = outside[0]
        value = array.reshape(-1)[index]
        raise source.error(f"element {index} is {value}, outside {data_type.name}'s range {low} to {high}")
    return array


def _input_path(source: Node, base: Path) -> Path:
    """``sourcePath`` relative to the model's folder, else to the working directory."""
    name = file_name(source)
    for candidate in (base / name, name):
        if candidate.is_file():
            return candidate
    raise source.error(f"file not found next to the model ({base}) or in the working directory")


def _read_bytes(path: Path, source: Node) -> np.ndarray:
    try:
        return np.fromfile(path, dtype=np.uint8)
    except OSError as error:
        raise source.error(f"cannot read {path}: {error.strerror or error}") from None


def _read_npy(path: Path, source: Node) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise source.error(f"cannot read {path} as a .npy file: {error}") from None
    if not isinstance(array, np.ndarray):
        raise source.error(f"{path} is not a .npy file")
    if array.dtype == np.bool_:
        array = array.view(np.uint8)  # as DxDispatch reads NumPy's '?'
    return array.astype(array.dtype.newbyteorder("="), copy=False)
