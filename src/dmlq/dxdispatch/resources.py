"""Resources: byte buffers of ``sizeInBytes`` filled from their initial values (inline, constant,
sequence or file)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DmlError
from ..types import DataType
from .reading import Node, file_name, parse_data_type

IMAGE_SUFFIXES = (".png", ".jpg")


@dataclass(frozen=True)
class Resource:
    """A buffer of ``sizeInBytes`` bytes, the data type of its initial values and their length."""

    name: str
    data_type: DataType
    memory: np.ndarray  # uint8; dispatches write into it
    initialized_bytes: int

    @property
    def element_size(self) -> int:
        return self.data_type.dtype.itemsize

    def initialized_values(self) -> np.ndarray:
        """As many elements as the initial values had, from byte 0 (DxDispatch's ``print`` view)."""
        count = self.initialized_bytes // self.element_size
        return self.memory[: count * self.element_size].view(self.data_type.dtype)


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
    data, data_type = _initial_values(fields["initialValues"], declared, base)
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
    return Resource(name, data_type, memory, data.size)


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


def _initial_values(node: Node, declared: DataType | None, base: Path) -> tuple[np.ndarray, DataType]:
    """The initial bytes (uint8) and their data type."""
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
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8), data_type


def _element_type(declared: DataType | None, node: Node) -> DataType:
    if declared is None:
        raise node.error("this initializer needs an initialValuesDataType")
    if declared == DataType.UNKNOWN:
        raise node.error("initialValuesDataType UNKNOWN (mixed lists for HLSL) is not supported by dmlq")
    if declared.dtype is None:
        raise node.error(f"initialValuesDataType {declared.name} cannot hold initial values")
    return declared


def _inline_numbers(node: Node, data_type: DataType) -> Sequence[float | int] | np.ndarray:
    """An array's numbers: converted at once where all are plain numbers in range (a model may hold
    millions), else read one by one, which names the first that is not."""
    values = node.value
    kinds = set(map(type, values))
    if data_type.is_float and kinds <= {int, float}:
        try:
            return np.array(values, dtype=np.float64)
        except OverflowError:
            pass  # an integer beyond float64's range, named below
    elif kinds <= {int}:
        limits = np.iinfo(data_type.dtype)
        if not values or (limits.min <= min(values) and max(values) <= limits.max):
            return values
    return [_scalar(item, data_type) for item in node.elements()]


def _scalar(node: Node, data_type: DataType) -> float | int:
    if data_type.is_float:
        return node.number()
    limits = np.iinfo(data_type.dtype)
    return node.integer(int(limits.min), int(limits.max))


def _encode(values: Sequence[float | int] | np.ndarray, data_type: DataType) -> np.ndarray:
    """Numbers as elements of ``data_type``, converted as DxDispatch converts them."""
    if not data_type.is_float:
        return np.array(values, dtype=data_type.dtype)
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
    steps = np.repeat(delta, _value_count(fields["valueCount"], data_type))
    steps[:1] = start
    return np.add.accumulate(steps, out=steps)  # in place: one array of the values at a time


def _value_count(node: Node, data_type: DataType) -> int:
    count = node.unsigned()
    _ensure_values_fit(node, count * data_type.dtype.itemsize, f"{count} {data_type.name} values")
    return count


def _file_values(node: Node, declared: DataType | None, base: Path) -> tuple[np.ndarray, DataType]:
    source = node.fields(("sourcePath",), required=("sourcePath",))["sourcePath"]
    suffix = Path(source.string()).suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        raise source.error("image files are not supported by dmlq")
    path = _input_path(source, base)
    _ensure_values_fit(source, path.stat().st_size, f"the values of {path}")
    if suffix != ".npy":
        return _read_bytes(path, source), _element_type(declared, node)
    array = _read_npy(path, source)
    try:
        file_type = DataType.from_dtype(array.dtype)
    except DmlError as error:
        raise source.error(str(error)) from None
    if declared is not None and declared != file_type:
        raise source.error(f"the file holds {file_type.name}, initialValuesDataType says {declared.name}")
    return array, file_type


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
