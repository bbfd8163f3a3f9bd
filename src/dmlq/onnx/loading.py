"""Reading an ONNX model: file or ``ModelProto`` in, a checked :class:`Model` out.

The model must be one ONNX itself accepts (``onnx.checker``), import the default ONNX domain
(``""`` or ``"ai.onnx"``, opset 7 up to the newest the installed ``onnx`` knows), and use only
the domains onnxruntime runs: the default one, ``ai.onnx.ml`` (run as other nodes) and
``com.microsoft`` version 1 (its quantized operators). An opset import no node uses is ignored, as
onnxruntime ignores it (``quant_pre_process`` writes ``ai.onnx.training``, ``com.microsoft.nchwc``
and others that no node of its models uses). Static types and shapes come from ONNX's shape
inference, completed through the nodes it cannot see into (``com.microsoft`` ones).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TypeAlias

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference
from onnx.helper import tensor_dtype_to_np_dtype

from ..errors import DmlError
from .kernel_args import global_kernel, kernel, output_shape
from .options import Options

__all__ = ["DEFAULT_DOMAINS", "MICROSOFT", "Model", "TensorType", "read"]

DEFAULT_DOMAINS = ("", "ai.onnx")
MICROSOFT = "com.microsoft"
LOWEST_OPSET = 7  # the oldest default-domain opset onnxruntime loads


@dataclass(frozen=True)
class TensorType:
    """A value's element type and shape as the model declares or infers them (None: unknown)."""

    dtype: np.dtype | None
    shape: tuple[int | None, ...] | None

    @property
    def static_shape(self) -> tuple[int, ...] | None:
        return static_shape(self.shape)


def static_shape(shape: tuple[int | None, ...] | None) -> tuple[int, ...] | None:
    """``shape`` where every size is known, else None."""
    if shape is None or None in shape:
        return None
    return tuple(size for size in shape if size is not None)


@dataclass
class Model:
    """A loaded, checked ONNX model with its constants as arrays and its values' static types."""

    proto: onnx.ModelProto
    opsets: dict[str, int]
    initializers: dict[str, np.ndarray]
    types: dict[str, TensorType] = field(default_factory=dict)
    options: Options = field(default_factory=Options)
    cache: dict[object, object] = field(default_factory=dict)  # plans and sessions built from it

    @property
    def graph(self) -> onnx.GraphProto:
        return self.proto.graph

    @cached_property
    def input_names(self) -> list[str]:
        """The graph inputs a caller feeds (initializers listed as inputs have defaults)."""
        return [value.name for value in self.graph.input if value.name not in self.initializers]

    @cached_property
    def output_names(self) -> list[str]:
        return [value.name for value in self.graph.output]

    def opset(self, domain: str) -> int:
        return self.opsets.get("" if domain in DEFAULT_DOMAINS else domain, 0)


# What load, check, run and compare take: a path, serialized bytes, a ModelProto or a loaded model.
ModelSource: TypeAlias = "str | os.PathLike[str] | bytes | onnx.ModelProto | Model"


def read(model: ModelSource) -> Model:
    """A :class:`Model` from a path, serialized bytes or a ``ModelProto``; DmlError if it is not one.

    >>> from onnx import helper, TensorProto
    >>> graph = helper.make_graph(
    ...     [helper.make_node("Relu", ["x"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    >>> model = read(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    >>> model.input_names, model.types["y"]
    (['x'], TensorType(dtype=dtype('float32'), shape=(2,)))
    """
    if isinstance(model, Model):
        return model
    proto = _proto(model)
    opsets = _opsets(proto)
    try:
        onnx.checker.check_model(proto)
    except (onnx.checker.ValidationError, ValueError) as error:
        raise DmlError(f"model: not a valid ONNX model ({_first_line(error)})") from None
    initializers = {tensor.name: numpy_helper.to_array(tensor) for tensor in proto.graph.initializer}
    return Model(proto, opsets, initializers, _declared_types(proto))


def _proto(model: object) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        data, where = model, "model bytes"
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        try:
            data = path.read_bytes()
        except OSError as error:
            raise DmlError(f"model: cannot read {str(path)!r}: {error.strerror or error}") from None
        where = repr(str(path))
    else:
        raise DmlError(f"model: expected a path, bytes or onnx.ModelProto, not {type(model).__name__}")
    proto: onnx.ModelProto | None
    try:
        proto = onnx.ModelProto.FromString(data)
    except Exception:  # protobuf's DecodeError and its relatives name nothing useful
        proto = None
    if proto is None or not proto.HasField("graph") or proto.ir_version == 0:
        raise DmlError(f"model: {where} is not an ONNX model")
    return proto


def _opsets(proto: onnx.ModelProto) -> dict[str, int]:
    """The opset imports of the domains the model's nodes use (the others are ignored)."""
    newest = onnx.defs.onnx_opset_version()
    used = {"" if node.domain in DEFAULT_DOMAINS else node.domain for node in proto.graph.node} | {""}
    opsets = {}
    for opset in proto.opset_import:
        domain = "" if opset.domain in DEFAULT_DOMAINS else opset.domain
        if domain not in used:
            continue
        if domain == "":
            if not LOWEST_OPSET <= opset.version <= newest:
                raise DmlError(
                    f"model: ONNX opset {opset.version} is not one dmlq knows ({LOWEST_OPSET} to {newest})"
                )
        elif domain == MICROSOFT:
            if opset.version != 1:
                raise DmlError(
                    f"model: opset {opset.version} of domain {MICROSOFT} is not one dmlq knows (1)"
                )
        elif domain != "ai.onnx.ml":
            raise DmlError(
                f"model: opset domain {opset.domain!r} is not one dmlq knows "
                f"(ai.onnx, ai.onnx.ml, {MICROSOFT})"
            )
        opsets[domain] = opset.version
    if "" not in opsets:
        raise DmlError("model: imports no ONNX opset")
    unimported = sorted(used - set(opsets))
    if unimported:
        raise DmlError(f"model: its nodes use domain {unimported[0]!r}, which it does not import")
    return opsets


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _declared_types(proto: onnx.ModelProto) -> dict[str, TensorType]:
    """Types of the graph's values: declared, inferred by ONNX, and through the ``com.microsoft`` nodes
    ONNX's inference does not know (:data:`MICROSOFT_TYPES`), inferred again past them."""
    types: dict[str, TensorType] = {}
    model = proto
    for _ in range(1 + sum(node.domain == MICROSOFT for node in proto.graph.node)):
        types = _inferred(model)
        added = _microsoft_types(proto, types)
        if not added:
            break
        model = _copy(model)
        model.graph.value_info.extend(
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(found.dtype), found.shape)
            for name, found in added.items()
        )
    return types


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    copied = onnx.ModelProto()
    copied.CopyFrom(proto)
    return copied


def _inferred(proto: onnx.ModelProto) -> dict[str, TensorType]:
    try:
        inferred = shape_inference.infer_shapes(proto)
    except Exception:  # inference is a help, never a requirement: a model it trips on still runs
        inferred = proto
    graph = inferred.graph
    types = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        found = tensor_type(value)
        if found is not None:
            types[value.name] = found
    for tensor in graph.initializer:
        types[tensor.name] = TensorType(tensor_dtype_to_np_dtype(tensor.data_type), tuple(tensor.dims))
    return types


def _qlinear_add(node: onnx.NodeProto, types: dict[str, TensorType]) -> TensorType | None:
    a, b = types.get(node.input[0]), types.get(node.input[3])
    if a is None or b is None or a.shape is None or b.shape is None:
        return None
    zero_point = types.get(node.input[7]) if len(node.input) > 7 and node.input[7] else None
    shape = _broadcast(a.shape, b.shape)
    return None if shape is None else TensorType(zero_point.dtype if zero_point else a.dtype, shape)


def _quantize(node: onnx.NodeProto, types: dict[str, TensorType]) -> TensorType | None:
    x = types.get(node.input[0])
    zero_point = types.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    return None if x is None else TensorType(zero_point.dtype if zero_point else np.dtype(np.uint8), x.shape)


def _dequantize(node: onnx.NodeProto, types: dict[str, TensorType]) -> TensorType | None:
    x, scale = types.get(node.input[0]), types.get(node.input[1])
    return None if x is None or scale is None else TensorType(scale.dtype, x.shape)


def _same_as_input(node: onnx.NodeProto, types: dict[str, TensorType]) -> TensorType | None:
    return types.get(node.input[0])


def _matmul(dtype_input: int) -> Callable[[onnx.NodeProto, dict[str, TensorType]], TensorType | None]:
    """A matrix multiply's output: NumPy's ``matmul`` of inputs 0 and 1, input ``dtype_input``'s dtype."""

    def infer(node: onnx.NodeProto, types: dict[str, TensorType]) -> TensorType | None:
        a, b, typed = types.get(node.input[0]), types.get(node.input[1]), types.get(node.input[dtype_input])
        if a is None or b is None or typed is None or not a.shape or not b.shape:
            return None
        a_shape = (1, *a.shape) if len(a.shape) == 1 else a.shape
        b_shape = (*b.shape, 1) if len(b.shape) == 1 else b.shape
        batch = _broadcast(a_shape[:-2], b_shape[:-2])
        if batch is None:
            return None
        shape = (*batch, a_shape[-2], b_shape[-1])
        shape = shape[:-2] + shape[-1:] if len(a.shape) == 1 else shape
        return TensorType(typed.dtype, shape[:-1] if len(b.shape) == 1 else shape)

    return infer


def _matmul_nbits(node: onnx.NodeProto, types: dict[str, TensorType]) -> TensorType | None:
    a = types.get(node.input[0])
    n = next((attribute.i for attribute in node.attribute if attribute.name == "N"), None)
    return None if a is None or a.shape is None or n is None else TensorType(a.dtype, (*a.shape[:-1], n))


def _pool(node: onnx.NodeProto, types: dict[str, TensorType]) -> TensorType | None:
    """QLinearAveragePool / QLinearGlobalAveragePool: the window's output sizes (static shapes only)."""
    x = types.get(node.input[0])
    static = None if x is None else x.static_shape
    if x is None or static is None:
        return None
    try:
        args = (
            global_kernel(node, static)
            if node.op_type == "QLinearGlobalAveragePool"
            else kernel(node, static)
        )
        shape = output_shape(static, args, args.channels_last)
    except DmlError:  # the provider refuses it: the verdict says why
        return None
    zero_point = types.get(node.input[4]) if len(node.input) > 4 and node.input[4] else None
    return TensorType(zero_point.dtype if zero_point else x.dtype, shape)


MICROSOFT_TYPES = {  # com.microsoft operators' output 0 from their inputs' types
    "QLinearAdd": _qlinear_add,
    "QuantizeLinear": _quantize,
    "DequantizeLinear": _dequantize,
    "QLinearSigmoid": _same_as_input,
    "QLinearLeakyRelu": _same_as_input,
    "MatMulIntegerToFloat": _matmul(2),
    "DynamicQuantizeMatMul": _matmul(0),
    "MatMulNBits": _matmul_nbits,
    "QLinearAveragePool": _pool,
    "QLinearGlobalAveragePool": _pool,
}


def _microsoft_types(proto: onnx.ModelProto, types: dict[str, TensorType]) -> dict[str, TensorType]:
    """Output types of com.microsoft nodes whose inputs are known and outputs are not (added to ``types``)."""
    added = {}
    for node in proto.graph.node:
        infer = MICROSOFT_TYPES.get(node.op_type) if node.domain == MICROSOFT else None
        if infer is None or node.output[0] in types:
            continue
        found = infer(node, types)
        if found is not None:
            added[node.output[0]] = types[node.output[0]] = found
    return added


def _broadcast(
    first: tuple[int | None, ...], second: tuple[int | None, ...]
) -> tuple[int | None, ...] | None:
    """NumPy's broadcasting of two static shapes (None: a symbolic dimension), or None if they clash."""
    count = max(len(first), len(second))
    result = []
    for x, y in zip((1,) * (count - len(first)) + first, (1,) * (count - len(second)) + second):
        if x == 1 or x == y:
            result.append(y)
        elif y == 1:
            result.append(x)
        elif x is None or y is None:
            result.append(x if y is None else y)
        else:
            return None
    return tuple(result)


def tensor_type(value: onnx.ValueInfoProto) -> TensorType | None:
    if not value.type.HasField("tensor_type"):
        return None
    tensor = value.type.tensor_type
    if tensor.elem_type == onnx.TensorProto.UNDEFINED:
        return None
    dtype = tensor_dtype_to_np_dtype(tensor.elem_type)
    if not tensor.HasField("shape"):
        return TensorType(dtype, None)
    shape = tuple(dim.dim_value if dim.HasField("dim_value") else None for dim in tensor.shape.dim)
    return TensorType(dtype, shape)
