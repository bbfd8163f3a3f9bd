"""DxDispatch JSON models: parse one, check its dispatchables at a feature level, run it on the CPU.

DxDispatch (microsoft/DirectML, folder ``DxDispatch/``) describes DirectML operator calls in JSON
(SPEC-NOTES §11): ``resources`` are byte buffers with initial values, ``dispatchables`` operator
descriptions, and ``commands`` (``dispatch``, ``print``, ``writeFile``) run in order on the same
buffers. dmlq reads that format for its operators, validates each description with
:class:`dmlq.Device` and executes it with :meth:`dmlq.CompiledOperator.execute`. Every problem is a
:class:`dmlq.DmlError` whose message starts with the JSON path it concerns, such as
``dispatchables.qadd.desc.ATensor.Sizes``.

>>> import io
>>> model = parse_model('''{
...   "resources": {
...     "A": { "initialValuesDataType": "FLOAT32", "initialValues": [1, 2, 3] },
...     "Out": { "initialValuesDataType": "FLOAT32", "initialValues": { "valueCount": 3, "value": 0 } },
...   },
...   "dispatchables": {
...     "twice": { "type": "ELEMENT_WISE_ADD1", "desc": {
...       "ATensor": { "DataType": "FLOAT32", "Sizes": [3] },
...       "BTensor": { "DataType": "FLOAT32", "Sizes": [3] },  // bound to A as well
...       "OutputTensor": { "DataType": "FLOAT32", "Sizes": [3] },
...       "FusedActivation": { "Type": "ACTIVATION_LINEAR", "Alpha": 2, "Beta": -1 } } },
...   },
...   "commands": [
...     { "type": "dispatch", "dispatchable": "twice",
...       "bindings": { "ATensor": "A", "BTensor": "A", "OutputTensor": "Out" } },
...     { "type": "print", "resource": "Out" },
...   ],
... }''')
>>> out = io.StringIO()
>>> run_model(model, "6_4", out)
>>> print(out.getvalue(), end="")
Resource 'Out': 3, 7, 11
>>> [verdict.lowest_level.label for verdict in check_model(model, "2_0")]
['3_0']
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TextIO

import json5
import numpy as np

from . import ops
from .activations import ACTIVATIONS, Activation
from .device import CompiledOperator, Device
from .errors import DmlError
from .ops import OperatorDesc
from .ops.base import TensorField
from .tensor import TensorDesc
from .types import DataType, FeatureLevel, TensorFlags

__all__ = [
    "Binding",
    "Command",
    "Dispatch",
    "Dispatchable",
    "Model",
    "Print",
    "Resource",
    "Verdict",
    "WriteFile",
    "check_model",
    "dml_field_name",
    "format_value",
    "load_model",
    "parse_model",
    "run_model",
]

TENSOR_FLAGS = dict(TensorFlags.__members__)
EXECUTION_FLAGS = {
    "NONE": 0,
    "ALLOW_HALF_PRECISION_COMPUTATION": 1,
    "DISABLE_META_COMMANDS": 2,
    "DESCRIPTORS_VOLATILE": 4,
}
COMPILE_TYPES = ("DmlCompileOp", "DmlCompileGraph")
FOREIGN_DISPATCHABLES = ("hlsl", "onnx", "dmlSerializedGraph")
IMAGE_SUFFIXES = (".png", ".jpg")
_FLOAT_WORDS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


# -- JSON values with their paths ------------------------------------------------------------------


@dataclass(frozen=True)
class _Node:
    """A JSON value and its path in the model (``resources.A.initialValues[2]``)."""

    value: object
    path: str

    def error(self, rule: str) -> DmlError:
        return DmlError(f"{self.path or 'top level'}: {rule}")

    def at(self, key: str | int) -> _Node:
        if isinstance(key, int):
            return _Node(self.value[key], f"{self.path}[{key}]")
        return _Node(self.value[key], f"{self.path}.{key}" if self.path else key)

    def entries(self) -> dict[str, _Node]:
        """An object's members by name."""
        if not isinstance(self.value, dict):
            raise self.error(f"expected an object, not {_kind(self.value)}")
        return {key: self.at(key) for key in self.value}

    def fields(self, known: Sequence[str], required: Sequence[str] = ()) -> dict[str, _Node]:
        """An object's members; an unknown or a missing required name is an error."""
        members = self.entries()
        for key, member in members.items():
            if key not in known:
                raise member.error(f"unknown field (expected {_one_of(known)})")
        for key in required:
            if key not in members:
                raise self.error(f"missing field '{key}'")
        return members

    def elements(self) -> list[_Node]:
        if not isinstance(self.value, list):
            raise self.error(f"expected an array, not {_kind(self.value)}")
        return [self.at(index) for index in range(len(self.value))]

    def string(self) -> str:
        if not isinstance(self.value, str):
            raise self.error(f"expected a string, not {_kind(self.value)}")
        return self.value

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            raise self.error(f"expected true or false, not {_kind(self.value)}")
        return self.value

    def integer(self, low: int, high: int) -> int:
        value = self.value
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.error(f"expected an integer from {low} to {high}, not {_show(value)}")
        return value

    def unsigned(self, bits: int = 32) -> int:
        return self.integer(0, 2**bits - 1)

    def number(self) -> float:
        """A JSON number, or one of the strings "nan", "inf", "-inf" (any case)."""
        value = self.value
        if isinstance(value, str) and value.lower() in _FLOAT_WORDS:
            return _FLOAT_WORDS[value.lower()]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f'expected a number or "nan", "inf", "-inf", not {_show(value)}')
        try:
            return float(value)
        except OverflowError:
            raise self.error(f"{_show(value)} is too large for a floating-point number") from None


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    kinds = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}
    return kinds.get(type(value), "null")


def _show(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _one_of(names: Sequence[str] | Mapping[str, object]) -> str:
    return ", ".join(names)


def _data_type(node: _Node) -> DataType:
    name = node.string()
    try:
        return DataType.parse(name)
    except DmlError as error:
        raise node.error(str(error)) from None


def _flags(node: _Node, prefix: str, names: Mapping[str, int]) -> int:
    """A flags field: one name or an array of names (OR-ed), each with or without ``prefix``."""
    flags = 0
    for item in node.elements() if isinstance(node.value, list) else [node]:
        name = item.string().removeprefix(prefix)
        if name not in names:
            raise item.error(f"unknown flag (expected {_one_of(names)})")
        flags |= names[name]
    return flags


def _named(node: _Node, table: Mapping[str, object], what: str) -> object:
    name = node.string()
    if name not in table:
        raise node.error(f"no {what} named '{name}' (the model has {_one_of(table) or 'none'})")
    return table[name]


# -- resources --------------------------------------------------------------------------------------


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


_RESOURCE_FIELDS = ("initialValuesDataType", "initialValues", "sizeInBytes",
                    "initialValuesOffsetInBytes", "resampleSize", "resampleMode")  # fmt: skip


def _parse_resource(name: str, node: _Node, base: Path) -> Resource:
    fields = node.fields(_RESOURCE_FIELDS, required=("initialValues",))
    for image_field in ("resampleSize", "resampleMode"):
        if image_field in fields:
            raise fields[image_field].error("image resources are not supported by dmlq")
    declared = _data_type(fields["initialValuesDataType"]) if "initialValuesDataType" in fields else None
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


def _buffer_size(node: _Node | None, needed: int) -> int:
    if node is None:
        return -(-needed // 4) * 4  # DxDispatch rounds a size it computes up to 4 bytes
    size = node.unsigned(64)
    if size < needed:
        raise node.error(f"{size} bytes cannot hold the {needed} bytes the initial values reach")
    return size


def _ensure_fits(node: _Node, needed: int, what: str) -> None:
    """Refuse what the machine's memory cannot hold: past it, the kernel kills the process outright
    instead of failing the allocation."""
    memory = _physical_memory()
    if memory is not None and needed > memory:
        raise node.error(f"{what} need {needed} bytes, more than the {memory} bytes this machine has")


def _ensure_values_fit(node: _Node, size: int, what: str) -> None:
    """Initial values about to be built: they and the buffer they are copied into must fit at once."""
    _ensure_fits(node, 2 * size, f"{what} ({size} bytes) and the buffer they fill")


def _physical_memory() -> int | None:
    """The machine's memory in bytes, where the platform tells it."""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows), or no such name
        return None
    return pages if pages > 0 else None


def _initial_values(node: _Node, declared: DataType | None, base: Path) -> tuple[np.ndarray, DataType]:
    """The initial bytes (uint8) and their data type."""
    value = node.value
    try:
        if isinstance(value, list):
            data_type = _element_type(declared, node)
            data = _encode([_scalar(item, data_type) for item in node.elements()], data_type)
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


def _element_type(declared: DataType | None, node: _Node) -> DataType:
    if declared is None:
        raise node.error("this initializer needs an initialValuesDataType")
    if declared == DataType.UNKNOWN:
        raise node.error("initialValuesDataType UNKNOWN (mixed lists for HLSL) is not supported by dmlq")
    if declared.dtype is None:
        raise node.error(f"initialValuesDataType {declared.name} cannot hold initial values")
    return declared


def _scalar(node: _Node, data_type: DataType) -> float | int:
    if data_type.is_float:
        return node.number()
    limits = np.iinfo(data_type.dtype)
    return node.integer(int(limits.min), int(limits.max))


def _encode(values: list[float | int], data_type: DataType) -> np.ndarray:
    """Numbers as elements of ``data_type``, converted as DxDispatch converts them."""
    if not data_type.is_float:
        return np.array(values, dtype=data_type.dtype)
    with np.errstate(over="ignore"):
        wide = np.array(values, dtype=np.float64)
        if data_type == DataType.FLOAT16:
            wide = wide.astype(np.float32)  # DxDispatch reads a float, then rounds it to half
        return wide.astype(data_type.dtype)


def _constant(node: _Node, data_type: DataType) -> np.ndarray:
    fields = node.fields(("value", "valueCount"), required=("value", "valueCount"))
    value = _encode([_scalar(fields["value"], data_type)], data_type)
    return np.repeat(value, _value_count(fields["valueCount"], data_type))


def _sequence(node: _Node, data_type: DataType) -> np.ndarray:
    """``valueStart``, then ``valueDelta`` added again and again in the element type (wrapping, rounding)."""
    names = ("valueStart", "valueDelta", "valueCount")
    fields = node.fields(names, required=names)
    start, delta = (_encode([_scalar(fields[name], data_type)], data_type) for name in names[:2])
    steps = np.repeat(delta, _value_count(fields["valueCount"], data_type))
    steps[:1] = start
    return np.add.accumulate(steps, out=steps)  # in place: one array of the values at a time


def _value_count(node: _Node, data_type: DataType) -> int:
    count = node.unsigned()
    _ensure_values_fit(node, count * data_type.dtype.itemsize, f"{count} {data_type.name} values")
    return count


def _file_values(node: _Node, declared: DataType | None, base: Path) -> tuple[np.ndarray, DataType]:
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


def _input_path(source: _Node, base: Path) -> Path:
    """``sourcePath`` relative to the model's folder, else to the working directory."""
    name = _file_name(source)
    for candidate in (base / name, name):
        if candidate.is_file():
            return candidate
    raise source.error(f"file not found next to the model ({base}) or in the working directory")


def _read_bytes(path: Path, source: _Node) -> np.ndarray:
    try:
        return np.fromfile(path, dtype=np.uint8)
    except OSError as error:
        raise source.error(f"cannot read {path}: {error.strerror or error}") from None


def _read_npy(path: Path, source: _Node) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise source.error(f"cannot read {path} as a .npy file: {error}") from None
    if not isinstance(array, np.ndarray):
        raise source.error(f"{path} is not a .npy file")
    if array.dtype == np.bool_:
        array = array.view(np.uint8)  # as DxDispatch reads NumPy's '?'
    return array.astype(array.dtype.newbyteorder("="), copy=False)


# -- operator descriptions ----------------------------------------------------------------------------


_BUFFER_FIELDS = ("DataType", "Sizes", "Strides", "Flags", "DimensionCount", "TotalTensorSizeInBytes",
                  "GuaranteedBaseOffsetAlignment")  # fmt: skip


def _operator_class(node: _Node) -> type[OperatorDesc]:
    try:
        return ops.by_type_name(node.string())
    except KeyError:
        known = _one_of([cls.TYPE_NAME for cls in ops.OPERATORS])
        raise node.error(f"unknown operator (dmlq runs {known})") from None


def _camel(snake: str) -> str:
    return "".join(part.capitalize() for part in snake.split("_"))


def dml_field_name(cls: type[OperatorDesc], name: str) -> str:
    """The DirectML name of a description field: ``a_scale`` -> ``AScaleTensor``.

    >>> dml_field_name(ops.ElementWiseAdd1, "a"), dml_field_name(ops.ElementWiseAdd1, "fused_activation")
    ('ATensor', 'FusedActivation')
    """
    tensor_names = {tensor_field.name: tensor_field.dml_name for tensor_field in cls.FIELDS}
    return tensor_names.get(name, _camel(name))


def _parse_operator_desc(cls: type[OperatorDesc], node: _Node) -> OperatorDesc:
    """``desc``: the tensors by their DirectML names (an optional one may be left out), and
    ``FusedActivation`` where the operator has one."""
    tensors = {tensor_field.dml_name: tensor_field for tensor_field in cls.FIELDS}
    others = {_camel(f.name): f.name for f in dataclasses.fields(cls) if f.name in _FIELD_PARSERS}
    fields = node.fields([*tensors, *others])
    values = {}
    for dml_name, tensor_field in tensors.items():
        if dml_name in fields:
            values[tensor_field.name] = _parse_tensor_desc(fields[dml_name])
        elif not any(row.tensors[tensor_field.name].optional for row in cls.SUPPORT):
            raise node.error(f"missing field '{dml_name}'")
    for dml_name, name in others.items():
        if dml_name in fields:
            values[name] = _FIELD_PARSERS[name](fields[dml_name])
    return cls(**values)


def _parse_tensor_desc(node: _Node) -> TensorDesc:
    """``DML_TENSOR_DESC``, flat or as ``{ "Type": "BUFFER", "Desc": { ... } }``."""
    nested = isinstance(node.value, dict) and "Desc" in node.value
    required = ("DataType", "Sizes")
    outer = node.fields(("Type", "Desc") if nested else ("Type", *_BUFFER_FIELDS), () if nested else required)
    if "Type" in outer and outer["Type"].string().removeprefix("DML_TENSOR_TYPE_") != "BUFFER":
        raise outer["Type"].error("expected BUFFER, DirectML's only tensor type")
    fields = outer["Desc"].fields(_BUFFER_FIELDS, required) if nested else outer
    sizes = tuple(item.unsigned() for item in fields["Sizes"].elements())
    strides = tuple(item.unsigned() for item in fields["Strides"].elements()) if "Strides" in fields else ()
    if "DimensionCount" in fields and fields["DimensionCount"].unsigned() != len(sizes):
        raise fields["DimensionCount"].error(f"differs from the {len(sizes)} Sizes")
    flags = _flags(fields["Flags"], "DML_TENSOR_FLAG_", TENSOR_FLAGS) if "Flags" in fields else 0
    total = fields["TotalTensorSizeInBytes"].unsigned(64) if "TotalTensorSizeInBytes" in fields else 0
    alignment_node = fields.get("GuaranteedBaseOffsetAlignment")
    return TensorDesc(
        _data_type(fields["DataType"]), sizes,
        strides=strides or None,  # DxDispatch: no strides (or none listed) means packed
        total_tensor_size_in_bytes=total or None,  # 0 means: computed from sizes and strides
        flags=flags,
        guaranteed_base_offset_alignment=alignment_node.unsigned() if alignment_node else 0,
    )  # fmt: skip


def _parse_activation(node: _Node) -> Activation:
    """``FusedActivation``: ``{ "Type": "ACTIVATION_ELU", "Alpha": 0.5 }`` or with ``"Desc": {...}``.

    Every parameter is required, as DxDispatch requires them.
    """
    members = node.entries()
    type_key = "Type" if "Type" in members else "type"
    if type_key not in members:
        raise node.error("missing field 'Type'")
    cls = _activation_class(members[type_key])
    desc_key = next((key for key in ("Desc", "desc") if key in members), None)
    if desc_key:
        node.fields((type_key, desc_key))
        parameters = members[desc_key].fields(cls.DML_FIELDS, required=cls.DML_FIELDS)
    else:
        parameters = node.fields((type_key, *cls.DML_FIELDS), required=cls.DML_FIELDS)
    return cls(**{
        f.name: parameters[dml_name].number()
        for f, dml_name in zip(dataclasses.fields(cls), cls.DML_FIELDS)
    })  # fmt: skip


def _activation_class(node: _Node) -> type[Activation]:
    bare = node.string().removeprefix("DML_OPERATOR_")
    for cls in ACTIVATIONS.values():
        if cls.TYPE_NAME == bare:
            return cls
    known = _one_of([cls.TYPE_NAME for cls in ACTIVATIONS.values()])
    raise node.error(f"not an activation DirectML fuses (expected one of {known})")


_FIELD_PARSERS: dict[str, Callable[[_Node], object]] = {"fused_activation": _parse_activation}


# -- bindings and dispatchables -------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """The bytes of a resource bound to one tensor, from ``elementOffset`` for ``elementCount``
    elements (else to the end of the resource)."""

    view: np.ndarray  # uint8, the resource's memory (or a copy taken at initialization)
    path: str

    def snapshot(self) -> Binding:
        return dataclasses.replace(self, view=self.view.copy())


_BINDING_FIELDS = ("name", "elementOffset", "elementCount", "elementSizeInBytes")


def _parse_binding(node: _Node, resources: Mapping[str, Resource]) -> Binding:
    entry = node
    if isinstance(entry.value, list):
        items = entry.elements()
        if len(items) != 1:
            raise entry.error(f"binds {len(items)} resources; a tensor takes exactly one")
        entry = items[0]
    fields = {"name": entry} if isinstance(entry.value, str) else entry.fields(_BINDING_FIELDS, ("name",))
    resource = _named(fields["name"], resources, "resource")
    element_size = fields["elementSizeInBytes"].unsigned(64) if "elementSizeInBytes" in fields else 0
    element_size = element_size or resource.element_size
    start = fields["elementOffset"].unsigned(64) * element_size if "elementOffset" in fields else 0
    if start > resource.memory.size:
        raise fields["elementOffset"].error(
            f"starts at byte {start}, past the end of resource '{resource.name}' "
            f"({resource.memory.size} bytes)"
        )
    count = fields["elementCount"].unsigned(64) if "elementCount" in fields else 0
    end = start + count * element_size if count else resource.memory.size
    if end > resource.memory.size:
        raise fields["elementCount"].error(
            f"reaches byte {end}, but resource '{resource.name}' has {resource.memory.size} bytes"
        )
    return Binding(resource.memory[start:end], node.path)


def _parse_bindings(node: _Node, resources: Mapping[str, Resource], desc: OperatorDesc) -> dict[str, Binding]:
    """Bindings by the DirectML names of the tensors the description declares."""
    declared = {tensor_field.dml_name for tensor_field, tensor in desc.tensors() if tensor is not None}
    bindings = {}
    for name, entry in node.entries().items():
        if name not in declared:
            raise entry.error(f"not a tensor of this desc (it declares {_one_of(sorted(declared))})")
        bindings[name] = _parse_binding(entry, resources)
    return bindings


@dataclass(frozen=True)
class Dispatchable:
    """A DirectML operator description, where it sits in the model, and its OWNED_BY_DML inputs
    (DirectML name -> binding holding the bytes copied when the operator is initialized)."""

    name: str
    desc: OperatorDesc
    desc_path: str
    initialized: Mapping[str, Binding]

    @property
    def path(self) -> str:
        return f"dispatchables.{self.name}"

    def compile(self, device: Device) -> CompiledOperator:
        try:
            return device.compile_operator(self.desc)
        except DmlError as error:
            raise self.relocated(error) from None

    def relocated(self, error: DmlError) -> DmlError:
        """A validation error naming the JSON path of the field it concerns."""
        cls = type(self.desc)
        return _relocated(error, cls, lambda name: f"{self.desc_path}.{dml_field_name(cls, name)}", self.path)


_DISPATCHABLE_FIELDS = ("type", "desc", "Desc", "bindings", "executionFlags", "dmlCompileType")


def _parse_dispatchable(name: str, node: _Node, resources: Mapping[str, Resource]) -> Dispatchable:
    members = node.entries()
    if "type" not in members:
        raise node.error("missing field 'type'")
    kind = members["type"].string()
    if kind.lower() in (foreign.lower() for foreign in FOREIGN_DISPATCHABLES):
        raise members["type"].error(f"{kind} dispatchables are not supported by dmlq (only DirectML ops)")
    fields = node.fields(_DISPATCHABLE_FIELDS)
    cls = _operator_class(fields["type"])
    desc_keys = [key for key in ("desc", "Desc") if key in fields]
    if len(desc_keys) != 1:
        raise node.error("needs one 'desc' (or 'Desc') field" if not desc_keys else "has both desc and Desc")
    desc = _parse_operator_desc(cls, fields[desc_keys[0]])
    # Accepted as DxDispatch accepts them; they do not change dmlq's results.
    if "executionFlags" in fields:
        _flags(fields["executionFlags"], "DML_EXECUTION_FLAG_", EXECUTION_FLAGS)
    if "dmlCompileType" in fields and fields["dmlCompileType"].string() not in COMPILE_TYPES:
        raise fields["dmlCompileType"].error(f"expected {_one_of(COMPILE_TYPES)}")
    initialized = _initialization_bindings(desc, fields.get("bindings"), node, resources)
    return Dispatchable(name, desc, fields[desc_keys[0]].path, initialized)


def _initialization_bindings(
    desc: OperatorDesc, node: _Node | None, dispatchable: _Node, resources: Mapping[str, Resource]
) -> dict[str, Binding]:
    """The dispatchable's own ``bindings``: exactly its OWNED_BY_DML inputs, copied now."""
    owned = [
        tensor_field.dml_name
        for tensor_field, tensor in desc.tensors()
        if not tensor_field.is_output and tensor is not None and tensor.flags & TensorFlags.OWNED_BY_DML
    ]
    bindings = _parse_bindings(node, resources, desc) if node else {}
    for name, binding in bindings.items():
        if name not in owned:
            raise DmlError(f"{binding.path}: only OWNED_BY_DML inputs are bound here; bind it in dispatches")
    for name in owned:
        if name not in bindings:
            raise (node or dispatchable).error(f"OWNED_BY_DML tensor {name} needs a binding in 'bindings'")
    return {name: binding.snapshot() for name, binding in bindings.items()}


def _relocated(
    error: DmlError, cls: type[OperatorDesc], field_path: Callable[[str], str], default_path: str
) -> DmlError:
    """``error`` with its head (``ElementWiseAdd1.a``, ``... inputs[0] (a)``) replaced by a JSON path."""
    message = str(error)
    head, separator, rule = message.partition(": ")
    if not separator or not head.startswith(cls.__name__):
        return DmlError(f"{default_path}: {message}")
    for f in dataclasses.fields(cls):
        if head == f"{cls.__name__}.{f.name}" or head.endswith(f"({f.name})"):
            return DmlError(f"{field_path(f.name)}: {_model_field_names(rule)}")
    return DmlError(f"{default_path}: {rule}")


_TENSOR_DESC_FIELD = re.compile(rf"^({'|'.join(f.name for f in dataclasses.fields(TensorDesc))})\b")


def _model_field_names(rule: str) -> str:
    """A tensor rule names a TensorDesc field (``sizes[3] = 0 ...``) by its name in the model (``Sizes``)."""
    return _TENSOR_DESC_FIELD.sub(lambda match: _camel(match[1]), rule)


# -- commands ---------------------------------------------------------------------------------------


class Command(Protocol):
    path: str

    def run(self, operators: Mapping[str, CompiledOperator], out: TextIO) -> None:
        """Execute the command on the model's resources."""


@dataclass(frozen=True)
class Dispatch:
    """``dispatch``: execute a dispatchable on bound resources."""

    dispatchable: Dispatchable
    bindings: Mapping[str, Binding]
    path: str

    def run(self, operators: Mapping[str, CompiledOperator], out: TextIO) -> None:
        desc = self.dispatchable.desc
        inputs = [self._buffer(tensor_field) for tensor_field in desc.input_fields()]
        outputs = [self._buffer(tensor_field) for tensor_field in desc.output_fields()]
        try:
            operators[self.dispatchable.name].execute(inputs, outputs)
        except DmlError as error:
            raise _relocated(error, type(desc), self._binding_path, self.path) from None

    def _binding(self, dml_name: str) -> Binding | None:
        return self.dispatchable.initialized.get(dml_name) or self.bindings.get(dml_name)

    def _buffer(self, tensor_field: TensorField) -> np.ndarray | None:
        binding = self._binding(tensor_field.dml_name)
        return None if binding is None else binding.view

    def _binding_path(self, name: str) -> str:
        binding = self._binding(dml_field_name(type(self.dispatchable.desc), name))
        return self.path if binding is None else binding.path


@dataclass(frozen=True)
class Print:
    """``print``: ``Resource 'name': v0, v1, ...`` over the initialized elements."""

    resource: Resource
    verbose: bool
    path: str

    def run(self, operators: Mapping[str, CompiledOperator], out: TextIO) -> None:
        values = self.resource.initialized_values()
        if not self.verbose:
            print(f"Resource '{self.resource.name}': {', '.join(map(format_value, values))}", file=out)
            return
        print(f"Resource '{self.resource.name}':", file=out)
        width, digits = len(str(max(values.size - 1, 0))), 2 * values.itemsize
        for index, (value, raw) in enumerate(zip(values, values.view(f"u{values.itemsize}"))):
            print(f"[{index:{width}}] {format_value(value)} (0x{int(raw):0{digits}X})", file=out)


def format_value(value: np.generic) -> str:
    """An element as ``print`` shows it: its shortest round-trip text, without a trailing ``.0``.

    >>> [format_value(v) for v in (np.float32(2), np.float16(65504), np.float32(0.1), np.uint8(200))]
    ['2', '65504', '0.1', '200']
    """
    if value.dtype == np.float16:
        value = np.float32(value)  # the exact value, not float16's shortest digits (65500)
    text = str(value)
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True)
class WriteFile:
    """``writeFile``: the whole buffer as ``.npy`` (1-D unless ``dimensions``) or as raw bytes."""

    resource: Resource
    target: Path
    dimensions: tuple[int, ...] | None
    path: str

    def run(self, operators: Mapping[str, CompiledOperator], out: TextIO) -> None:
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            if self.target.suffix.lower() == ".npy":
                np.save(self.target, self._array())
            else:
                self.resource.memory.tofile(self.target)
        except OSError as error:
            raise DmlError(
                f"{self.path}.targetPath: cannot write {self.target}: {error.strerror or error}"
            ) from None
        print(f"Resource '{self.resource.name}' written to '{self.target}'", file=out)

    def _array(self) -> np.ndarray:
        size = self.resource.element_size
        shape = self.dimensions or (self.resource.memory.size // size,)
        data = self.resource.memory[: math.prod(shape) * size]
        return data.view(self.resource.data_type.dtype).reshape(shape)


def _parse_dispatch(
    node: _Node, resources: Mapping[str, Resource], dispatchables: Mapping[str, Dispatchable]
) -> Dispatch:
    known = ("type", "dispatchable", "bindings", "threadGroupCount")  # threadGroupCount: HLSL only, ignored
    fields = node.fields(known, ("dispatchable", "bindings"))
    dispatchable = _named(fields["dispatchable"], dispatchables, "dispatchable")
    bindings = _parse_bindings(fields["bindings"], resources, dispatchable.desc)
    for name, binding in bindings.items():
        if name in dispatchable.initialized:
            raise DmlError(f"{binding.path}: OWNED_BY_DML, bound once in {dispatchable.path}.bindings")
    for tensor_field, tensor in dispatchable.desc.tensors():
        name = tensor_field.dml_name
        if tensor is not None and name not in bindings and name not in dispatchable.initialized:
            raise fields["bindings"].error(f"missing binding for {name}, which the desc declares")
    return Dispatch(dispatchable, bindings, node.path)


def _parse_print(node: _Node, resources: Mapping[str, Resource], dispatchables: object) -> Print:
    fields = node.fields(("type", "resource", "verbose"), ("resource",))
    verbose = fields["verbose"].boolean() if "verbose" in fields else False
    return Print(_named(fields["resource"], resources, "resource"), verbose, node.path)


def _parse_write_file(node: _Node, resources: Mapping[str, Resource], dispatchables: object) -> WriteFile:
    fields = node.fields(("type", "resource", "targetPath", "dimensions"), ("resource", "targetPath"))
    resource = _named(fields["resource"], resources, "resource")
    target = _file_name(fields["targetPath"])
    if target.suffix.lower() in IMAGE_SUFFIXES:
        raise fields["targetPath"].error("image files are not supported by dmlq")
    dimensions = None
    if "dimensions" in fields:
        dimensions = tuple(item.unsigned() for item in fields["dimensions"].elements()) or None
        needed = math.prod(dimensions or ()) * resource.element_size
        if needed > resource.memory.size:
            raise fields["dimensions"].error(
                f"need {needed} bytes, but resource '{resource.name}' has {resource.memory.size}"
            )
    return WriteFile(resource, target, dimensions, node.path)


def _file_name(node: _Node) -> Path:
    """A path the file system can encode (JSON lets a string hold lone surrogates such as "\\ud800")."""
    text = node.string()
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise node.error(f"{_show(text)} cannot name a file here ({sys.getfilesystemencoding()})") from None
    return Path(text)


_COMMAND_PARSERS = {"dispatch": _parse_dispatch, "print": _parse_print, "writefile": _parse_write_file}


def _parse_command(
    node: _Node, resources: Mapping[str, Resource], dispatchables: Mapping[str, Dispatchable]
) -> Command:
    members = node.entries()
    if "type" not in members:
        raise node.error("missing field 'type'")
    parser = _COMMAND_PARSERS.get(members["type"].string().lower())
    if parser is None:
        raise members["type"].error("unknown command (expected dispatch, print or writeFile)")
    return parser(node, resources, dispatchables)


# -- models -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    """A parsed DxDispatch model; running it changes its resources' bytes."""

    resources: Mapping[str, Resource]
    dispatchables: Mapping[str, Dispatchable]
    commands: Sequence[Command]


def load_model(path: str | Path) -> Model:
    """Read and parse a model file; ``sourcePath`` files resolve next to it, then in the working folder."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DmlError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise DmlError(f"{path}: not a UTF-8 text file") from None
    except OSError as error:
        raise DmlError(f"{path}: cannot read: {error.strerror or error}") from None
    return parse_model(text, base=path.parent, source=str(path))


def parse_model(text: str, base: str | Path = ".", source: str = "model") -> Model:
    """Parse a model's JSON text (comments and trailing commas allowed); ``base`` is its folder."""
    try:
        document = json5.loads(text, allow_duplicate_keys=False)
    except ValueError as error:
        raise _malformed(str(error), source) from None
    except RecursionError:  # json5 descends into nested values recursively
        raise _malformed("nested too deeply", source) from None
    root = _Node(document, "")
    fields = root.fields(("$schema", "resources", "dispatchables", "commands"),
                         ("resources", "dispatchables", "commands"))  # fmt: skip
    resources = {
        name: _parse_resource(name, node, Path(base)) for name, node in fields["resources"].entries().items()
    }
    dispatchables = {
        name: _parse_dispatchable(name, node, resources)
        for name, node in fields["dispatchables"].entries().items()
    }
    commands = [_parse_command(node, resources, dispatchables) for node in fields["commands"].elements()]
    return Model(resources, dispatchables, commands)


def _malformed(problem: str, source: str) -> DmlError:
    """json5 places a syntax error as "<string>:LINE ... at column COLUMN"; other problems have no place."""
    located = problem.replace("<string>", source) if "<string>" in problem else f"{source}: {problem}"
    return DmlError(f"malformed JSON: {located}")


@dataclass(frozen=True)
class Verdict:
    """A dispatchable checked at a feature level: the first rule it breaks there (None if valid)
    and the lowest level that accepts it (None if none does)."""

    dispatchable: Dispatchable
    problem: str | None
    lowest_level: FeatureLevel | None

    @property
    def valid(self) -> bool:
        return self.problem is None


def check_model(model: Model, feature_level: FeatureLevel | str | None = None) -> list[Verdict]:
    """Validate every dispatchable at ``feature_level`` (default: the newest)."""
    device = Device(feature_level)
    verdicts = []
    for dispatchable in model.dispatchables.values():
        try:
            dispatchable.compile(device)
            problem = None
        except DmlError as error:
            problem = str(error)
        verdicts.append(Verdict(dispatchable, problem, dispatchable.desc.minimum_feature_level()))
    return verdicts


def run_model(
    model: Model, feature_level: FeatureLevel | str | None = None, out: TextIO | None = None
) -> None:
    """Compile every dispatchable at ``feature_level``, then run the commands in order (prints to ``out``)."""
    device = Device(feature_level)
    operators = {name: dispatchable.compile(device) for name, dispatchable in model.dispatchables.items()}
    for command in model.commands:
        command.run(operators, sys.stdout if out is None else out)
