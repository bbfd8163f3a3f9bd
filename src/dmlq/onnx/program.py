"""Executing a prepared model: mapped steps on dmlq's DirectML operators, every other node on
onnxruntime CPU.

A :class:`Program` holds what one feature level needs: the constants (the initializers, the
provider's own constants and every value computed from them alone, computed once), one call per
remaining stage, each mapped step compiled on a :class:`dmlq.Device` of that level from the
descriptions :mod:`.rules` builds with its constant operands bound once as OWNED_BY_DML (as the
provider flags the constant inputs of the graph it builds, ``GraphDescBuilder.cpp``), and one
onnxruntime session per run of consecutive other nodes (:mod:`.sessions`). A run binds the inputs
and executes those calls.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, TypeAlias

import ml_dtypes
import numpy as np

from ..device import CompiledOperator, Device
from ..errors import DmlError
from ..int4 import pack_int4, unpack_int4
from ..ops import OperatorDesc
from ..tensor import TensorDesc
from ..threads import get_num_threads
from ..types import FeatureLevel, TensorFlags
from . import sessions
from .loading import Model
from .sessions import Session
from .staging import Stage, stages
from .steps import Output, Source, Spec, Step, Typed
from .verdicts import refusals, static_specs

if TYPE_CHECKING:
    from .plans import Plan, Signature

__all__ = ["Program", "checked_inputs", "program", "specs"]

NIBBLES = (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4))
# A signature of a step's variable operands: each one's dtype and shape.
KernelKey: TypeAlias = "tuple[tuple[np.dtype, tuple[int, ...]], ...]"


def program(model: Model, level: FeatureLevel) -> Program:
    """The model's program at ``level`` (made once)."""
    key = ("program", level)
    found = model.cache.get(key)
    if not isinstance(found, Program):
        found = model.cache[key] = Program(model, level)
    return found


class Program:
    """The calls that compute a model at one feature level, and its constants."""

    def __init__(self, model: Model, level: FeatureLevel) -> None:
        self.model = model
        self.device = Device(level)
        self.constants: dict[str, np.ndarray] = dict(model.initializers)
        self.refusals: list[str] = []
        self.calls: list[_MappedCall | _OtherCall] = []
        self.plans: dict[Signature, Plan | None] = {}  # per signature of the inputs, its plan or None
        self._checked: set[tuple[tuple[str, str, tuple[int, ...]], ...]] = set()
        for stage in stages(model):
            for step in stage.steps:
                self.constants.update(step.constants)
        for stage in stages(model):
            self._add(stage)
        self._compile_static()

    def compiled_operators(self) -> list[CompiledOperator]:
        """The operators compiled so far (for a constant step: none, its result is a constant)."""
        return [
            compiled
            for call in self.calls
            if isinstance(call, _MappedCall)
            for kernel in call.compiled.values()
            for compiled in kernel.operators
        ]

    def sessions(self) -> list[Session]:
        """The onnxruntime sessions created so far, newest last per stage."""
        return [
            session
            for call in self.calls
            if isinstance(call, _OtherCall)
            for session in call.sessions.values()
        ]

    def check(self, values: Mapping[str, Typed]) -> None:
        """DmlError for a step the provider cannot create, with these inputs' shapes (once per signature)."""
        if self.refusals:
            raise DmlError(self.refusals[0])
        signature = tuple((name, value.dtype.str, value.shape) for name, value in values.items())
        if signature in self._checked:
            return
        known: dict[str, Typed] = {**self.constants, **values}
        found = refusals(self.model, self.device.feature_level, known)
        if found:
            raise DmlError(found[0])
        self._checked.add(signature)

    def _compile_static(self) -> None:
        """Each mapped step compiled for its operands' static types, and the model's inputs checked,
        where the model's types give them: a run of those dtypes and shapes then only executes. A
        step or input the provider refuses is left for a run to refuse."""
        for call in self.calls:
            if isinstance(call, _MappedCall):
                found = static_specs(self.model, call.step, self.constants, symbolic=None)
                if found is not None:
                    with contextlib.suppress(DmlError):
                        call.kernel(
                            {name: spec for name, spec in zip(call.step.inputs, found) if spec is not None}
                        )
        inputs = _static_inputs(self.model)
        if inputs is not None:
            with contextlib.suppress(DmlError):
                self.check(inputs)

    def _add(self, stage: Stage) -> None:
        for step in stage.steps:
            if step.refusal:
                self.refusals.append(
                    f"node {step.name}: the provider fails to create its kernel: {step.refusal}"
                )
        if stage.outputs and all(name in self.constants for name in stage.inputs):
            scratch: dict[str, np.ndarray] = {}
            try:
                self._call(stage)(scratch)
            except DmlError as error:  # the provider cannot create it: a run refuses the model
                self.refusals.append(f"node {stage.steps[0].name}: {error}")
                return
            for value in scratch.values():
                value.flags.writeable = False
            self.constants.update(scratch)
        elif stage.outputs:
            self.calls.append(self._call(stage))

    def _call(self, stage: Stage) -> _MappedCall | _OtherCall:
        if stage.mapped:
            return _MappedCall(self, stage.steps[0])
        return _OtherCall(self, stage)


class _MappedCall:
    """One mapped step: its variable operands bound per run, its constant ones bound once."""

    def __init__(self, program: Program, step: Step) -> None:
        self.program = program
        self.step = step
        self.variable = tuple(
            (index, name) for index, name in enumerate(step.inputs) if name and name not in program.constants
        )
        self.compiled: dict[KernelKey, _Kernel] = {}

    def __call__(self, values: dict[str, np.ndarray]) -> None:
        operands: list[np.ndarray | None] = [None] * len(self.step.inputs)
        for index, name in self.variable:
            operands[index] = bindable(values[name])
        kernel = self.kernel(values)
        results = kernel.execute(operands)
        for name, output in kernel.outputs:
            values[name] = _value(_result(results, (output.node, output.index)), output)

    def kernel(self, values: Mapping[str, Typed]) -> _Kernel:
        """The step's operators compiled for the dtypes and shapes of its variable operands in ``values``."""
        key = tuple((values[name].dtype, values[name].shape) for _, name in self.variable)
        kernel = self.compiled.get(key)
        if kernel is None:
            kernel = self.compiled[key] = _Kernel(self.program, self.step, values)
        return kernel


@dataclass(frozen=True)
class _Operator:
    """What a run does for one operator: call it on its sources into new output buffers."""

    compiled: CompiledOperator
    sources: tuple[Source, ...]
    allocations: tuple[Callable[[], np.ndarray], ...]


class _Kernel:
    """A mapped step's operators compiled for one signature of its operands, as the provider's kernel
    builds them: constant operands flagged OWNED_BY_DML and bound once (``GraphDescBuilder.cpp``),
    and the results of operators that read constants alone computed once (the same bits each run)."""

    def __init__(self, program: Program, step: Step, values: Mapping[str, Typed]) -> None:
        constants = program.constants
        known: dict[str, Typed] = {**constants, **values}
        described = step.describe(specs(step, known))
        constant = {index for index, name in enumerate(step.inputs) if name and name in constants}
        self.operators: list[CompiledOperator] = []
        self.results: list[tuple[np.ndarray, ...] | None] = []  # each run starts from the fixed results
        self.pending: list[tuple[int, _Operator]] = []
        for position, node in enumerate(described.nodes):
            owned = tuple(index for index, source in enumerate(node.sources) if source in constant)
            desc = _owned_by_dml(node.desc, owned)
            compiled = program.device.compile_operator(desc)
            if owned:
                compiled.initialize(
                    [bindable(constants[step.inputs[source]]) if index in owned and isinstance(source, int)
                     else None for index, source in enumerate(node.sources)]
                )  # fmt: skip
            self.operators.append(compiled)
            allocations = tuple(_allocation(getattr(desc, field.name)) for field in desc.output_fields())
            operator = _Operator(compiled, node.sources, allocations)
            if all(self._is_fixed(source, constant) for source in node.sources):
                fixed = _run(operator, [None] * len(step.inputs), self.results)
                for result in fixed:
                    result.flags.writeable = False
                self.results.append(fixed)
            else:
                self.results.append(None)
                self.pending.append((position, operator))
        self.outputs = [(name, output) for name, output in zip(step.node.output, described.outputs) if name]

    def _is_fixed(self, source: Source, constant: set[int]) -> bool:
        """Whether a source's value is the same every run: absent, constant, or a fixed result."""
        return (
            source is None
            or source in constant
            or isinstance(source, tuple)
            and self.results[source[0]] is not None
        )

    def execute(self, operands: list[np.ndarray | None]) -> list[tuple[np.ndarray, ...] | None]:
        """Each operator's outputs (its buffers, in its output fields' order): none is None."""
        results = self.results.copy()
        for position, operator in self.pending:
            results[position] = _run(operator, operands, results)
        return results


def _run(operator: _Operator, operands: list[np.ndarray | None],
         results: list[tuple[np.ndarray, ...] | None]) -> tuple[np.ndarray, ...]:  # fmt: skip
    """The operator on the step's operands (None where bound once) and earlier operators' results."""
    inputs = [
        None
        if source is None
        else _result(results, source)
        if isinstance(source, tuple)
        else operands[source]
        for source in operator.sources
    ]
    buffers = tuple(allocate() for allocate in operator.allocations)
    operator.compiled.execute(inputs, buffers)
    return buffers


def _result(results: list[tuple[np.ndarray, ...] | None], source: tuple[int, int]) -> np.ndarray:
    """Output ``source[1]`` of the step's operator ``source[0]``, an earlier one: run already."""
    produced = results[source[0]]
    assert produced is not None, f"operator {source[0]} read before it ran"
    return produced[source[1]]


def _allocation(tensor: TensorDesc) -> Callable[[], np.ndarray]:
    """How to make memory for an output tensor: its elements, or its packed bytes for a 4-bit type."""
    dtype = tensor.data_type.dtype
    if dtype is None:  # the 4-bit types
        return partial(np.zeros, tensor.addressed_bytes, np.uint8)
    return partial(np.empty, tensor.addressed_bytes // dtype.itemsize, dtype)


def _value(buffer: np.ndarray, output: Output) -> np.ndarray:
    """A step output as ONNX has it: the description addresses the ONNX output's packed memory."""
    if output.dtype in NIBBLES:
        return unpack_int4(buffer, output.shape, output.dtype)
    return buffer.reshape(output.shape)


class _OtherCall:
    """A run of other steps: one onnxruntime CPU session (per thread count) over their nodes."""

    def __init__(self, program: Program, stage: Stage) -> None:
        self.program = program
        self.stage = stage
        self.nodes = [node for step in stage.steps for node in step.runs]
        self.feeds = tuple(name for name in stage.inputs if name not in program.constants)
        self.frozen = {
            name: program.constants[name]
            for name in stage.inputs
            if name in program.constants and name not in program.model.initializers
        }
        self.outputs = list(stage.outputs)
        self.sessions: dict[tuple[int, tuple[np.dtype, ...]], Session] = {}
        types = [program.model.types.get(name) for name in self.feeds]
        dtypes = [None if found is None else found.dtype for found in types]
        if all(dtype is not None for dtype in dtypes):
            self._session({name: dtype for name, dtype in zip(self.feeds, dtypes) if dtype is not None})

    def __call__(self, values: dict[str, np.ndarray]) -> None:
        feeds = {name: values[name] for name in self.feeds}
        values.update(zip(self.outputs, self.session(values).run(self.outputs, feeds)))

    def session(self, values: Mapping[str, np.ndarray]) -> Session:
        """The session for the dtypes of the feeds in ``values``, at dmlq's thread count."""
        return self._session({name: values[name].dtype for name in self.feeds})

    def _session(self, dtypes: dict[str, np.dtype]) -> Session:
        key = (get_num_threads(), tuple(dtypes.values()))
        found = self.sessions.get(key)
        if found is None:
            found = self.sessions[key] = sessions.ort_session(
                self.program.model, self.nodes, dtypes, self.outputs, self.frozen
            )
        return found


def _static_inputs(model: Model) -> dict[str, Spec] | None:
    """The model's inputs as its types declare them, where every dtype and dimension is known."""
    declared = {}
    for name in model.input_names:
        found = model.types.get(name)
        shape = None if found is None else found.static_shape
        if found is None or found.dtype is None or shape is None:
            return None
        declared[name] = Spec(found.dtype, shape)
    return declared


def specs(step: Step, values: Mapping[str, Typed]) -> list[Spec | None]:
    return [Spec(values[name].dtype, values[name].shape) if name else None for name in step.inputs]


def bindable(value: np.ndarray) -> np.ndarray:
    """An operand as :meth:`CompiledOperator.execute` binds it: contiguous; 4-bit data packed."""
    if value.dtype in NIBBLES:
        return pack_int4(value)
    return np.ascontiguousarray(value)


def _owned_by_dml(desc: OperatorDesc, indices: tuple[int, ...]) -> OperatorDesc:
    """``desc`` with its input tensors at ``indices`` (in field order) flagged OWNED_BY_DML."""
    if not indices:
        return desc
    fields = [name for name, _ in desc.input_tensors()]
    flagged: dict[str, object] = {}
    arrays: dict[str, list[TensorDesc]] = {}
    for index in indices:
        name, _, element = fields[index].partition("[")
        if element:  # an element of an array field (QuantizationTensors)
            array = arrays.setdefault(name, list(getattr(desc, name)))
            position = int(element.rstrip("]"))
            array[position] = _owned(array[position])
            flagged[name] = tuple(array)
        else:
            flagged[name] = _owned(getattr(desc, name))
    return dataclasses.replace(desc, **flagged)


def _owned(tensor: TensorDesc) -> TensorDesc:
    return dataclasses.replace(tensor, flags=tensor.flags | TensorFlags.OWNED_BY_DML)


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
