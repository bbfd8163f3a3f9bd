"""Executing a model: mapped steps on dmlq's DirectML operators, every other node on onnxruntime CPU.

Mapped steps are compiled on a :class:`dmlq.Device` of the requested feature level from the
descriptions :mod:`.mapping` builds, then executed on the operand arrays themselves. Runs of
consecutive other nodes become one onnxruntime session each (CPU provider), built on first use and
kept with the model; their results are not DirectML operators of dmlq.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..device import CompiledOperator, Device
from ..errors import DmlError
from ..ops import OperatorDesc
from ..threads import get_num_threads
from ..types import FeatureLevel, TensorFlags
from .checking import refuse_invalid
from .loading import Model, ModelSource, load
from .mapping import Described, Spec, Step
from .staging import Stage, stages

__all__ = ["execute", "run"]


def run(
    model: ModelSource, inputs: Mapping[str, object], feature_level: FeatureLevel | str | None = None
) -> dict[str, np.ndarray]:
    """The model's outputs as the DirectML provider computes its mapped nodes: ``{name: array}``.

    Nodes dmlq does not map run on onnxruntime's CPU provider (see :func:`dmlq.onnx.check`). A node
    invalid at ``feature_level`` (default: the newest) is a DmlError before anything runs, as the
    provider fails to create its session.

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper, TensorProto
    >>> graph = helper.make_graph(
    ...     [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.UINT8, [3])],
    ...     [numpy_helper.from_array(np.float32(1), "s"), numpy_helper.from_array(np.uint8(0), "z")])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    >>> run(model, {"x": np.float32([0.5, 1.5, 2.5])})
    {'y': array([0, 2, 2], dtype=uint8)}
    """
    return execute(load(model), inputs, feature_level)


def execute(
    model: Model, inputs: Mapping[str, object], feature_level=None, keep: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """:func:`run` on a loaded model; every value computed goes into ``keep`` when given."""
    level = FeatureLevel.newest() if feature_level is None else FeatureLevel.parse(feature_level)
    given = checked_inputs(model, inputs)
    checked = ("checked", level, tuple((name, value.dtype.str, value.shape) for name, value in given.items()))
    values = {**model.initializers, **given}
    if checked not in model.cache:
        refuse_invalid(model, level, values)
        model.cache[checked] = True
    device = Device(level)
    for stage in stages(model):
        values.update(_execute_stage(model, stage, values, device))
    if keep is not None:
        keep.update(values)
    return {name: values[name] for name in model.output_names}


def _execute_stage(
    model: Model, stage: Stage, values: Mapping[str, np.ndarray], device: Device
) -> dict[str, np.ndarray]:
    """The stage's outputs; a stage that reads only initializers is computed once per feature level
    (as constant as the weights it dequantizes), its results read-only."""
    constant = _is_constant(model, stage)
    key = ("constant", id(stage), device.feature_level)
    if constant and key in model.cache:
        return model.cache[key]
    if stage.mapped:
        step = stage.steps[0]
        outputs = {step.outputs[0]: _execute_mapped(model, step, values, device)}
    else:
        outputs = _execute_other(model, stage, values)
    if constant:
        for value in outputs.values():
            value.flags.writeable = False
        model.cache[key] = outputs
        _constant_names(model).update(outputs)
    return outputs


def _is_constant(model: Model, stage: Stage) -> bool:
    """Whether the stage reads only initializers and constant values: settled on its first run, since
    the stages before it, which make its inputs, have all run by then."""
    key = ("constant stage", id(stage))
    constant = model.cache.get(key)
    if constant is None:
        constants = _constants(model)
        constant = model.cache[key] = all(name in constants for name in stage.inputs)
    return constant


def _constant_names(model: Model) -> set[str]:
    """Values computed from initializers alone: constants too, once computed."""
    return model.cache.setdefault("constant names", set())


def _constants(model: Model) -> set[str]:
    return _constant_names(model) | set(model.initializers)


def specs(step: Step, values: Mapping[str, np.ndarray]) -> list[Spec | None]:
    return [Spec(values[name].dtype, values[name].shape) if name else None for name in step.inputs]


def _execute_mapped(model: Model, step: Step, values: Mapping[str, np.ndarray], device: Device) -> np.ndarray:
    """The step's output. Only its variable operands are read on each run (and key its compilation):
    the constant ones were bound once, by initialize, as OWNED_BY_DML."""
    operands: list[np.ndarray | None] = [None] * len(step.inputs)
    signature = []
    for index in _variable_inputs(model, step):
        operand = operands[index] = np.ascontiguousarray(values[step.inputs[index]])
        signature.append((operand.dtype, operand.shape))
    key = ("compiled", id(step), device.feature_level, tuple(signature))
    found: tuple[Described, CompiledOperator, tuple[int, ...]] | None = model.cache.get(key)
    if found is None:
        every = [np.ascontiguousarray(values[name]) if name else None for name in step.inputs]
        found = model.cache[key] = _compiled(model, step, every, values, device)
    described, compiled, _ = found
    out = np.empty(described.sizes, described.dtype)
    compiled.execute(operands, [out])
    return out.reshape(described.shape)


def _variable_inputs(model: Model, step: Step) -> tuple[int, ...]:
    """The indices of the step's inputs that are neither absent nor constant (settled on its first
    run, as _is_constant is); the others are the ones _compiled binds as OWNED_BY_DML."""
    key = ("variable inputs", id(step))
    indices = model.cache.get(key)
    if indices is None:
        constants = _constants(model)
        variable = (index for index, name in enumerate(step.inputs) if name and name not in constants)
        indices = model.cache[key] = tuple(variable)
    return indices


def _compiled(
    model: Model, step: Step, operands: list, values: Mapping[str, np.ndarray], device: Device
) -> tuple[Described, CompiledOperator, tuple[int, ...]]:
    """The step compiled for these operands, with the indices of those bound once: its constant
    operands (initializers, and values computed from them alone) are OWNED_BY_DML, as the provider
    flags the constant inputs of the graph it builds (``GraphDescBuilder.cpp``), and initialize binds
    them (the matrix multiply packs a constant B then)."""
    described = step.describe(specs(step, values))
    constants = _constants(model)
    owned = tuple(index for index, name in enumerate(step.inputs) if name in constants)
    if not owned:
        return described, device.compile_operator(described.desc), owned
    desc = _owned_by_dml(described.desc, owned)
    compiled = device.compile_operator(desc)
    compiled.initialize([operand if index in owned else None for index, operand in enumerate(operands)])
    return dataclasses.replace(described, desc=desc), compiled, owned


def _owned_by_dml(desc: OperatorDesc, indices: tuple[int, ...]) -> OperatorDesc:
    """``desc`` with its input tensors at ``indices`` (in field order) flagged OWNED_BY_DML."""
    fields = [name for name, _ in desc.input_tensors()]
    flagged = {}
    for index in indices:
        tensor = getattr(desc, fields[index])
        flagged[fields[index]] = dataclasses.replace(tensor, flags=tensor.flags | TensorFlags.OWNED_BY_DML)
    return dataclasses.replace(desc, **flagged)


def _execute_other(model: Model, stage: Stage, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    if not stage.outputs:
        return {}
    constants = _constant_names(model)
    feeds = {name: values[name] for name in stage.inputs if name not in constants}
    frozen = {name: values[name] for name in stage.inputs if name in constants}
    session = _session(model, stage, feeds, frozen)
    return dict(zip(stage.outputs, session.run(list(stage.outputs), feeds)))


def _session(model: Model, stage: Stage, feeds: Mapping[str, np.ndarray], frozen: Mapping[str, np.ndarray]):
    """The stage's session at dmlq's thread count; values computed once from initializers (dequantized
    weights) are its initializers too, so that onnxruntime may pre-pack them as it does the model's own."""
    threads = get_num_threads()
    key = ("session", id(stage), threads, tuple((name, value.dtype) for name, value in feeds.items()))
    session = model.cache.get(key)
    if session is None:
        nodes = [node for step in stage.steps for node in step.nodes]
        session = model.cache[key] = ort_session(model, nodes, feeds, stage.outputs, frozen)
    return session


def ort_session(
    model: Model,
    nodes: list[onnx.NodeProto],
    feeds: Mapping[str, np.ndarray],
    outputs: Sequence[str],
    constants: Mapping[str, np.ndarray] | None = None,
):
    """An onnxruntime CPU session computing ``nodes`` of ``model`` from ``feeds`` (names and dtypes)."""
    used = {name for node in nodes for name in node.input}
    graph = helper.make_graph(
        nodes,
        "dmlq_other",
        [
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), None)
            for name, value in feeds.items()
        ],
        [onnx.ValueInfoProto(name=name) for name in outputs],
        initializer=[tensor for tensor in model.graph.initializer if tensor.name in used]
        + [numpy_helper.from_array(np.asarray(value), name) for name, value in (constants or {}).items()],
    )
    sub = helper.make_model(graph, opset_imports=model.proto.opset_import, ir_version=_ir_version(model))
    sub.functions.extend(model.proto.functions)
    return cpu_session(sub, _options(), f"node(s) {', '.join(n.name or n.op_type for n in nodes)}")


def cpu_session(proto: onnx.ModelProto, options, what: str):
    """An onnxruntime CPU session of ``proto``; a DmlError naming ``what`` when onnxruntime refuses it."""
    import onnxruntime

    try:
        model = proto.SerializeToString()
        return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own exception types for a model it refuses
        raise DmlError(f"model: onnxruntime CPU cannot run {what}: {str(error).splitlines()[0]}") from None


def at_oldest_ir_version(model: Model) -> onnx.ModelProto:
    """The model as onnxruntime should read it: at :func:`_ir_version`."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    proto.ir_version = _ir_version(model)
    return proto


def _ir_version(model: Model) -> int:
    """The IR version of the models dmlq hands onnxruntime: the oldest the model's opsets allow, so an
    onnxruntime older than the onnx that wrote the model (which records its own, newer IR) still reads
    them; never newer than the model's own."""
    needed = helper.find_min_ir_version_for(list(model.proto.opset_import), ignore_unknown=True)
    return min(model.proto.ir_version, needed)


def _options():
    """dmlq's thread count; no spinning, since dmlq's kernels run between the sessions' runs."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = get_num_threads()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


# -- inputs -----------------------------------------------------------------------------------------


def checked_inputs(model: Model, inputs: Mapping[str, object]) -> dict[str, np.ndarray]:
    """The caller's inputs as arrays of the declared dtypes and shapes; DmlError naming the first wrong."""
    if not isinstance(inputs, Mapping):
        raise DmlError(f"inputs: expected a dict of input name to array, not {type(inputs).__name__}")
    expected = model.input_names
    extra = [name for name in inputs if name not in expected]
    if extra:
        raise DmlError(f"inputs: {extra[0]!r} is not an input of the model (inputs: {', '.join(expected)})")
    missing = [name for name in expected if name not in inputs]
    if missing:
        raise DmlError(f"inputs: {missing[0]!r} is missing (inputs: {', '.join(expected)})")
    return {name: _checked_input(model, name, inputs[name]) for name in expected}


def _checked_input(model: Model, name: str, value: object) -> np.ndarray:
    array = np.asarray(value)
    declared = model.types.get(name)
    if declared is None:
        return array
    if declared.dtype is not None and array.dtype != declared.dtype:
        raise DmlError(f"inputs[{name!r}]: dtype {array.dtype} is not the model's {declared.dtype}")
    shape = declared.shape
    if shape is not None and (
        len(shape) != array.ndim or any(d is not None and d != s for d, s in zip(shape, array.shape))
    ):
        shown = tuple("?" if d is None else d for d in shape)
        raise DmlError(f"inputs[{name!r}]: shape {array.shape} does not fit the model's {shown}")
    return array
