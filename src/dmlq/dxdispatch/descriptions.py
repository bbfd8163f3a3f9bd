"""Dispatchables' ``desc`` objects to dmlq.ops descriptions, and validation errors back to JSON paths."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from .. import ops
from ..activations import ACTIVATIONS, Activation
from ..errors import DmlError
from ..ops import OperatorDesc
from ..tensor import TensorDesc
from ..types import MatrixTransform, QuantizationType, TensorFlags
from .reading import Node, one_of, parse_data_type, parse_flags

TENSOR_FLAGS = dict(TensorFlags.__members__)


_BUFFER_FIELDS = ("DataType", "Sizes", "Strides", "Flags", "DimensionCount", "TotalTensorSizeInBytes",
                  "GuaranteedBaseOffsetAlignment")  # fmt: skip


def operator_class(node: Node) -> type[OperatorDesc]:
    try:
        return ops.by_type_name(node.string())
    except KeyError:
        known = one_of([cls.TYPE_NAME for cls in ops.OPERATORS])
        raise node.error(f"unknown operator (dmlq runs {known})") from None


def _camel(snake: str) -> str:
    return "".join(part.capitalize() for part in snake.split("_"))


def dml_field_name(cls: type[OperatorDesc], name: str) -> str:
    """The DirectML name of a description field or of an element of an array field:
    ``a_scale`` -> ``AScaleTensor``, ``quantization_tensors[1]`` -> ``QuantizationTensors[1]``.

    >>> dml_field_name(ops.ElementWiseAdd1, "a"), dml_field_name(ops.ElementWiseAdd1, "fused_activation")
    ('ATensor', 'FusedActivation')
    >>> dml_field_name(ops.Dequantize, "quantization_tensors[1]")
    'QuantizationTensors[1]'
    """
    tensor_names = {tensor_field.name: tensor_field.dml_name for tensor_field in cls.FIELDS}
    field, bracket, index = name.partition("[")
    return tensor_names.get(field, _camel(field)) + bracket + index


def parse_operator_desc(cls: type[OperatorDesc], node: Node) -> OperatorDesc:
    """``desc``: the tensors by their DirectML names (an optional one may be left out; an array
    field such as ``QuantizationTensors`` is a JSON array of them), ``FusedActivation`` where the
    operator has one, and its other fields (``QuantizationType``, ``DimensionCount``, ``Strides``,
    ...: required, as DxDispatch requires them)."""
    tensors = {tensor_field.dml_name: tensor_field for tensor_field in cls.FIELDS}
    others = {_camel(f.name): f.name for f in dataclasses.fields(cls) if f.name in _FIELD_PARSERS}
    fields = node.fields([*tensors, *others])
    values: dict[str, object] = {}
    for dml_name, tensor_field in tensors.items():
        if dml_name in fields and tensor_field.is_array:
            values[tensor_field.name] = tuple(map(_parse_tensor_desc, fields[dml_name].elements()))
        elif dml_name in fields:
            values[tensor_field.name] = _parse_tensor_desc(fields[dml_name])
        elif not any(row.tensors[tensor_field.name].optional for row in cls.SUPPORT):
            raise node.error(f"missing field '{dml_name}'")
    for dml_name, name in others.items():
        if dml_name in fields:
            values[name] = _FIELD_PARSERS[name](fields[dml_name])
        elif name in _REQUIRED_FIELDS:
            raise node.error(f"missing field '{dml_name}'")
    return cls(**values)


def _parse_tensor_desc(node: Node) -> TensorDesc:
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
    flags = parse_flags(fields["Flags"], "DML_TENSOR_FLAG_", TENSOR_FLAGS) if "Flags" in fields else 0
    total = fields["TotalTensorSizeInBytes"].unsigned(64) if "TotalTensorSizeInBytes" in fields else 0
    alignment_node = fields.get("GuaranteedBaseOffsetAlignment")
    return TensorDesc(
        parse_data_type(fields["DataType"]), sizes,
        strides=strides or None,  # DxDispatch: no strides (or none listed) means packed
        total_tensor_size_in_bytes=total or None,  # 0 means: computed from sizes and strides
        flags=flags,
        guaranteed_base_offset_alignment=alignment_node.unsigned() if alignment_node else 0,
    )  # fmt: skip


def _parse_activation(node: Node) -> Activation:
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


def _activation_class(node: Node) -> type[Activation]:
    bare = node.string().removeprefix("DML_OPERATOR_")
    for cls in ACTIVATIONS.values():
        if cls.TYPE_NAME == bare:
            return cls
    known = one_of([cls.TYPE_NAME for cls in ACTIVATIONS.values()])
    raise node.error(f"not an activation DirectML fuses (expected one of {known})")


def _parse_quantization_type(node: Node) -> QuantizationType:
    """``QuantizationType``: ``SCALE`` or ``SCALE_ZERO_POINT``, with or without ``DML_QUANTIZATION_TYPE_``."""
    name = node.string().removeprefix("DML_QUANTIZATION_TYPE_")
    if name not in QuantizationType.__members__:
        raise node.error(f"unknown quantization type (expected {one_of(list(QuantizationType.__members__))})")
    return QuantizationType[name]


def _parse_transform(node: Node) -> MatrixTransform:
    """``TransA``/``TransB``: ``NONE`` or ``TRANSPOSE``, with or without ``DML_MATRIX_TRANSFORM_``."""
    name = node.string().removeprefix("DML_MATRIX_TRANSFORM_")
    if name not in MatrixTransform.__members__:
        raise node.error(f"unknown matrix transform (expected {one_of(list(MatrixTransform.__members__))})")
    return MatrixTransform[name]


def _parse_uints(node: Node) -> tuple[int, ...]:
    """A UINT array such as ``Strides``: its length is checked against ``DimensionCount`` on compile."""
    return tuple(item.unsigned() for item in node.elements())


def _parse_bool(node: Node) -> bool:
    """A BOOL: ``true``/``false``, or DirectML's integer 0/1."""
    return node.boolean() if isinstance(node.value, bool) else bool(node.integer(0, 1))


_FIELD_PARSERS: dict[str, Callable[[Node], object]] = {
    "fused_activation": _parse_activation,
    "quantization_type": _parse_quantization_type,
    "dimension_count": Node.unsigned,
    "strides": _parse_uints,
    "dilations": _parse_uints,
    "start_padding": _parse_uints,
    "end_padding": _parse_uints,
    "window_size": _parse_uints,
    "group_count": Node.unsigned,
    "include_padding": _parse_bool,
    "trans_a": _parse_transform,
    "trans_b": _parse_transform,
    "alpha": Node.number,
    "beta": Node.number,
}
# DirectML gives them no default (DxDispatch requires every field that is not optional)
_REQUIRED_FIELDS = ("quantization_type", "dimension_count", "strides", "dilations", "start_padding",
                    "end_padding", "window_size", "group_count", "include_padding", "trans_a", "trans_b",
                    "alpha", "beta")  # fmt: skip


def relocated_error(
    error: DmlError, cls: type[OperatorDesc], field_path: Callable[[str], str], default_path: str
) -> DmlError:
    """``error`` with its head (``ElementWiseAdd1.a``, ``... inputs[0] (a)``) replaced by a JSON path."""
    message = str(error)
    head, separator, rule = message.partition(": ")
    if not separator or not head.startswith(cls.__name__):
        return DmlError(f"{default_path}: {message}")
    name = head[head.index("(") + 1 : -1] if head.endswith(")") else head.removeprefix(f"{cls.__name__}.")
    if name.partition("[")[0] in {f.name for f in dataclasses.fields(cls)}:
        return DmlError(f"{field_path(name)}: {_model_field_names(rule)}")
    return DmlError(f"{default_path}: {rule}")


_TENSOR_DESC_FIELD = re.compile(rf"^({'|'.join(f.name for f in dataclasses.fields(TensorDesc))})\b")


def _model_field_names(rule: str) -> str:
    """A tensor rule names a TensorDesc field (``sizes[3] = 0 ...``) by its name in the model (``Sizes``)."""
    return _TENSOR_DESC_FIELD.sub(lambda match: _camel(match[1]), rule)
