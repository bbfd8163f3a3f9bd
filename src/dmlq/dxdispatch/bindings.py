"""Bindings: the bytes of a resource a tensor reads or writes (``elementOffset``, ``elementCount``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..ops import OperatorDesc
from .reading import Node, named, one_of
from .resources import Resource


@dataclass(frozen=True)
class Binding:
    """The bytes of a resource bound to one tensor, from ``elementOffset`` for ``elementCount``
    elements (else to the end of the resource)."""

    view: np.ndarray  # uint8, the resource's memory (or a copy taken at initialization)
    path: str

    def snapshot(self) -> Binding:
        return dataclasses.replace(self, view=self.view.copy())


_BINDING_FIELDS = ("name", "elementOffset", "elementCount", "elementSizeInBytes", "format", "counter",
                   "counterOffsetBytes", "shape")  # fmt: skip


def _parse_binding(node: Node, resources: Mapping[str, Resource]) -> Binding:
    entry = node
    if isinstance(entry.value, list):
        items = entry.elements()
        if len(items) != 1:
            raise entry.error(f"binds {len(items)} resources; a tensor takes exactly one")
        entry = items[0]
    fields = {"name": entry} if isinstance(entry.value, str) else entry.fields(_BINDING_FIELDS, ("name",))
    resource = named(fields["name"], resources, "resource")
    _check_view_fields(fields, resources)
    element_bytes = fields["elementSizeInBytes"].unsigned(64) if "elementSizeInBytes" in fields else 0
    element_bits = 8 * element_bytes or resource.data_type.bits
    start_bits = fields["elementOffset"].unsigned(64) * element_bits if "elementOffset" in fields else 0
    if start_bits % 8:
        raise fields["elementOffset"].error("starts inside a byte (bind 4-bit elements from an even offset)")
    start = start_bits // 8
    if start > resource.memory.size:
        raise fields["elementOffset"].error(
            f"starts at byte {start}, past the end of resource '{resource.name}' "
            f"({resource.memory.size} bytes)"
        )
    count = fields["elementCount"].unsigned(64) if "elementCount" in fields else 0
    end = start + -(-count * element_bits // 8) if count else resource.memory.size
    if end > resource.memory.size:
        raise fields["elementCount"].error(
            f"reaches byte {end}, but resource '{resource.name}' has {resource.memory.size} bytes"
        )
    return Binding(resource.memory[start:end], node.path)


def _check_view_fields(fields: Mapping[str, Node], resources: Mapping[str, Resource]) -> None:
    """Fields DxDispatch reads for HLSL views and ONNX tensors: well-formed, and no effect on an operator."""
    if "format" in fields:
        fields["format"].string()  # a DXGI_FORMAT name: DirectML operators read their tensors' DataType
    if "counter" in fields:
        named(fields["counter"], resources, "resource")
    if "counterOffsetBytes" in fields:
        fields["counterOffsetBytes"].unsigned(64)
    if "shape" in fields:
        for item in fields["shape"].elements():
            item.integer(-(2**63), 2**63 - 1)


def parse_bindings(node: Node, resources: Mapping[str, Resource], desc: OperatorDesc) -> dict[str, Binding]:
    """Bindings by the DirectML names of the tensors the description declares; an array field
    (``QuantizationTensors``) binds a JSON array of resources, one per tensor, as DxDispatch reads
    it, each kept under the element's name (``QuantizationTensors[1]``)."""
    declared = {field.dml_name: tensor for field, tensor in desc.tensors() if tensor is not None}
    bindings = {}
    for name, entry in node.entries().items():
        if name not in declared:
            raise entry.error(f"not a tensor of this desc (it declares {one_of(sorted(declared))})")
        tensor = declared[name]
        if isinstance(tensor, tuple):  # an array field (QuantizationTensors): one description per element
            bindings.update(_array_bindings(name, len(tensor), entry, resources))
        else:
            bindings[name] = _parse_binding(entry, resources)
    return bindings


def _array_bindings(
    name: str, count: int, node: Node, resources: Mapping[str, Resource]
) -> dict[str, Binding]:
    items = node.elements() if isinstance(node.value, list) else [node]
    if len(items) != count:
        raise node.error(f"binds {len(items)} resource(s); the desc's {name} has {count} tensor(s)")
    return {f"{name}[{index}]": _parse_binding(item, resources) for index, item in enumerate(items)}
