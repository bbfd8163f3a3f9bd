"""Dispatchables: an operator description with its OWNED_BY_DML inputs, compiled on a device."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..device import CompiledOperator, Device
from ..errors import DmlError
from ..ops import OperatorDesc
from ..tensor import TensorDesc
from ..types import TensorFlags
from .bindings import Binding, parse_bindings
from .descriptions import dml_field_name, operator_class, parse_operator_desc, relocated_error
from .reading import Node, one_of, parse_flags
from .resources import Resource

EXECUTION_FLAGS = {
    "NONE": 0,
    "ALLOW_HALF_PRECISION_COMPUTATION": 1,
    "DISABLE_META_COMMANDS": 2,
    "DESCRIPTORS_VOLATILE": 4,
}
COMPILE_TYPES = ("DmlCompileOp", "DmlCompileGraph")
FOREIGN_DISPATCHABLES = ("hlsl", "onnx", "dmlSerializedGraph")


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
        """The compiled operator, its OWNED_BY_DML inputs bound by ``initialize`` as DirectML's
        operator initializer binds them (the matrix multiply packs B then)."""
        try:
            operator = device.compile_operator(self.desc)
            if self.initialized:
                owned = [self.initialized.get(name) for name in self.input_names()]
                operator.initialize([None if binding is None else binding.view for binding in owned])
        except DmlError as error:
            raise self.relocated(error) from None
        return operator

    def input_names(self) -> list[str]:
        """The DirectML names of the inputs, in the order ``initialize`` and ``execute`` take them."""
        return [dml_field_name(type(self.desc), name) for name, _ in self.desc.input_tensors()]

    def relocated(self, error: DmlError) -> DmlError:
        """A validation error naming the JSON path of the field it concerns."""
        cls = type(self.desc)
        return relocated_error(
            error, cls, lambda name: f"{self.desc_path}.{dml_field_name(cls, name)}", self.path
        )


_DISPATCHABLE_FIELDS = ("type", "desc", "Desc", "bindings", "executionFlags", "dmlCompileType")


def parse_dispatchable(name: str, node: Node, resources: Mapping[str, Resource]) -> Dispatchable:
    members = node.entries()
    if "type" not in members:
        raise node.error("missing field 'type'")
    kind = members["type"].string()
    if kind.lower() in (foreign.lower() for foreign in FOREIGN_DISPATCHABLES):
        raise members["type"].error(f"{kind} dispatchables are not supported by dmlq (only DirectML ops)")
    fields = node.fields(_DISPATCHABLE_FIELDS)
    cls = operator_class(fields["type"])
    desc_keys = [key for key in ("desc", "Desc") if key in fields]
    if len(desc_keys) != 1:
        raise node.error("needs one 'desc' (or 'Desc') field" if not desc_keys else "has both desc and Desc")
    desc = parse_operator_desc(cls, fields[desc_keys[0]])
    # Accepted as DxDispatch accepts them; they do not change dmlq's results.
    if "executionFlags" in fields:
        parse_flags(fields["executionFlags"], "DML_EXECUTION_FLAG_", EXECUTION_FLAGS)
    if "dmlCompileType" in fields and fields["dmlCompileType"].string() not in COMPILE_TYPES:
        raise fields["dmlCompileType"].error(f"expected {one_of(COMPILE_TYPES)}")
    initialized = _initialization_bindings(desc, fields.get("bindings"), node, resources)
    return Dispatchable(name, desc, fields[desc_keys[0]].path, initialized)


def _initialization_bindings(
    desc: OperatorDesc, node: Node | None, dispatchable: Node, resources: Mapping[str, Resource]
) -> dict[str, Binding]:
    """The dispatchable's own ``bindings``: exactly its OWNED_BY_DML inputs, copied now."""
    owned = [
        dml_field_name(type(desc), name)
        for name, tensor in desc.input_tensors()
        if isinstance(tensor, TensorDesc) and tensor.flags & TensorFlags.OWNED_BY_DML
    ]
    bindings = parse_bindings(node, resources, desc) if node else {}
    for name, binding in bindings.items():
        if name not in owned:
            raise DmlError(f"{binding.path}: only OWNED_BY_DML inputs are bound here; bind it in dispatches")
    for name in owned:
        if name not in bindings:
            raise (node or dispatchable).error(f"OWNED_BY_DML tensor {name} needs a binding in 'bindings'")
    return {name: binding.snapshot() for name, binding in bindings.items()}
