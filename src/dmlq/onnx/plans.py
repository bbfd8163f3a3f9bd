"""A prepared model's runs for one signature of its inputs (their dtypes and shapes, at one thread
count), as plain calls on memory allocated once.

The first run of a signature goes step by step (:mod:`.program`), which tells each value's dtype
and shape; a :class:`Plan` made from it runs the later ones: each mapped operator bound to its
buffers once (every check of :meth:`dmlq.device.CompiledOperator.bind` made then) and called on
them, each session of other nodes bound to its buffers once (onnxruntime's ``IOBinding``) and run on
them. A value's memory serves a later value once nothing reads it any more. Only the model's inputs
and outputs are bound per run, and the outputs are new arrays each run, which the caller keeps while
later runs compute. The numbers are the step-by-step run's: the same operators on the same bytes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TypeAlias, cast

import numpy as np

from ..device import CompiledOperator
from ..threads import get_num_threads
from .program import NIBBLES, Program, _Kernel, _MappedCall, _OtherCall, bindable
from .steps import Source

__all__ = ["Plan", "learn", "planned"]

ALIGNMENT = 64  # bytes: a cache line, for every buffer a plan allocates
PLANS_LIMIT = 8  # signatures whose plans a program keeps (the oldest goes first)

# A value's place in a run: a name (the model's values), or (call, operator, output) for the result
# of one operator of a mapped step that only later operators of that step read.
Key: TypeAlias = "str | tuple[int, int, int]"
Fresh: TypeAlias = "dict[Key, np.ndarray]"  # what a run binds anew: the model's inputs and outputs
Call: TypeAlias = "Callable[[Fresh], None]"
# What a plan is kept for: dmlq's thread count and each input's name, dtype and shape.
Signature: TypeAlias = "tuple[int, tuple[tuple[str, str, tuple[int, ...]], ...]]"


def planned(program: Program, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """The outputs for these checked inputs by their signature's plan; None where there is none yet
    (or it is busy in another thread, or a value's shape left it: then it is not used again)."""
    key = _signature(values)
    plan = program.plans.get(key)
    if not plan:
        return None
    try:
        return plan.run(values)
    except _Replan:
        program.plans[key] = None
        return None


def learn(program: Program, values: Mapping[str, np.ndarray]) -> None:
    """After a step-by-step run, the plan of its signature from every value it computed (once)."""
    key = _signature({name: values[name] for name in program.model.input_names})
    if key in program.plans:
        return
    if len(program.plans) >= PLANS_LIMIT:
        del program.plans[next(iter(program.plans))]
    plannable = not any(value.dtype in NIBBLES or value.dtype.hasobject for value in values.values())
    program.plans[key] = Plan(program, values) if plannable else None


def _signature(inputs: Mapping[str, np.ndarray]) -> Signature:
    return get_num_threads(), tuple((name, value.dtype.str, value.shape) for name, value in inputs.items())


class _Replan(Exception):
    """A value's shape is not the one the plan was made for (an other node's output shape that
    depends on the data)."""


class Plan:
    """The calls that compute one signature's runs, and the buffers they share. 4-bit values (which
    pass between steps packed and unpacked) and Python objects have none.

    It serves one run at a time: :meth:`run` returns None while another thread runs it.
    """

    def __init__(self, program: Program, values: Mapping[str, np.ndarray]) -> None:
        model = program.model
        self.constants = program.constants
        self.output_names = model.output_names
        self.per_run = set(model.input_names) | set(model.output_names)
        self.values = values
        self.arena = _Arena()
        self.buffers: dict[Key, np.ndarray] = {}  # what runs share, allocated once
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        self.last_read = _last_reads(program)
        self._releases: dict[int, list[Key]] = {}  # per call, the buffers free after it
        for index, call in enumerate(program.calls):
            if isinstance(call, _MappedCall):
                self._plan_mapped(index, call, call.kernel(values))
            else:
                assert isinstance(call, _OtherCall)
                self._plan_other(index, call)
        del self.values, self.last_read, self._releases

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """The model's outputs for ``inputs`` (checked, of the plan's signature); None while another
        thread runs the plan."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            fresh = cast("Fresh", dict(inputs))  # the inputs' names are Keys (dict's keys are invariant)
            for call in self.calls:
                call(fresh)
        finally:
            self.lock.release()
        return {name: fresh[name] if name in fresh else self.constants[name] for name in self.output_names}

    # -- making it -----------------------------------------------------------------------------------

    def _place(self, index: int, key: Key, dtype: np.dtype, shape: tuple[int, ...]) -> Key:
        """Memory for a value call ``index`` computes: the arena's, given back after the last call
        that reads it; a model output's is allocated per run."""
        if key not in self.per_run:
            self.buffers[key] = self.arena.take(dtype, shape)
            self._releases.setdefault(max(self.last_read.get(key, index), index), []).append(key)
        return key

    def _release(self, index: int) -> None:
        for key in self._releases.pop(index, ()):
            self.arena.give(self.buffers.pop(key))

    def _plan_mapped(self, index: int, call: _MappedCall, kernel: _Kernel) -> None:
        """One call per operator of the step that runs each time; the others' results are fixed."""
        named = {
            (output.node % len(kernel.operators), output.index): (name, output.shape)
            for name, output in kernel.outputs
        }
        places: dict[tuple[int, int], Key] = {}
        for position, fixed in enumerate(kernel.results):
            for slot, result in enumerate(fixed or ()):
                places[position, slot] = (index, position, slot)
                self.buffers[index, position, slot] = result
        for position, operator in kernel.pending:
            inputs = [self._source(call.step.inputs, places, source) for source in operator.sources]
            outputs: list[Key] = []
            for slot, field in enumerate(operator.compiled.desc.output_fields()):
                tensor = getattr(operator.compiled.desc, field.name)
                dtype = tensor.data_type.dtype
                found = named.get((position, slot))
                name: Key
                shape: tuple[int, ...]
                if found is None:  # read by later operators of the step alone: their flat memory
                    name, shape = (index, position, slot), (tensor.addressed_bytes // dtype.itemsize,)
                else:
                    name, shape = found
                places[position, slot] = self._place(index, name, dtype, shape)
                outputs.append(name)
            self.calls.append(self._operator_call(operator.compiled, inputs, outputs))
        self._release(index)

    def _source(
        self, names: tuple[str, ...], places: dict[tuple[int, int], Key], source: Source
    ) -> Key | None:
        """What an operator reads for ``source``: the key of a value or of an earlier operator's
        result, or None (absent, or constant: bound once as OWNED_BY_DML)."""
        if source is None:
            return None
        if isinstance(source, tuple):
            return places[source]
        name = names[source]
        return name if name and name not in self.constants else None

    def _operator_call(
        self, compiled: CompiledOperator, inputs: list[Key | None], outputs: list[Key]
    ) -> Call:
        """The operator bound to its buffers once, or on each run where it reads or writes one of the
        model's inputs or outputs."""
        fresh_inputs = [(slot, key) for slot, key in enumerate(inputs) if key in self.per_run]
        fresh_outputs = [(slot, key) for slot, key in enumerate(outputs) if key in self.per_run]
        bound_inputs = [None if key is None else self.buffers.get(key) for key in inputs]
        bound_outputs = [self.buffers.get(key) for key in outputs]
        if not fresh_inputs and not fresh_outputs:
            views, out = compiled.bind(bound_inputs, bound_outputs)
            return lambda fresh: compiled.run_arrays(views, out)
        allocations = [
            (slot, key, self.values[key].shape, self.values[key].dtype) for slot, key in fresh_outputs
        ]

        def run_bound_now(fresh: Fresh) -> None:
            for slot, key, shape, dtype in allocations:
                fresh[key] = bound_outputs[slot] = np.empty(shape, dtype)
            for slot, key in fresh_inputs:
                bound_inputs[slot] = bindable(fresh[key])
            compiled.run_arrays(*compiled.bind(bound_inputs, bound_outputs))

        return run_bound_now

    def _plan_other(self, index: int, call: _OtherCall) -> None:
        """The session bound once to its buffers (its inputs and outputs as onnxruntime values on
        them), the model's inputs and outputs bound per run."""
        from onnxruntime import OrtValue, RunOptions  # type: ignore[import-untyped]  # no type hints

        session = call.session(self.values)
        binding = session.io_binding()
        fresh_feeds = [name for name in call.feeds if name in self.per_run]
        for name in call.feeds:
            if name not in self.per_run:
                binding.bind_ortvalue_input(name, OrtValue.ortvalue_from_numpy(self.buffers[name]))
        fresh_outputs = []
        for name in call.outputs:
            value = self.values[name]
            self._place(index, name, value.dtype, value.shape)
            if name in self.per_run:
                fresh_outputs.append((name, value.dtype, value.shape))
            else:
                binding.bind_ortvalue_output(name, OrtValue.ortvalue_from_numpy(self.buffers[name]))
        quiet = RunOptions()
        quiet.log_severity_level = 4  # a shape that is not the plan's is no error: the run goes step by step
        # onnxruntime's Python side reads this entry on each run (graph capture, which CPU sessions do not
        # do): where it is unset, a C++ exception raised and caught costs ~25 us a run
        quiet.add_run_config_entry("gpu_graph_id", "-1")

        def run_session(fresh: Fresh) -> None:
            for name in fresh_feeds:  # onnxruntime reads a contiguous array in place, else its own copy
                binding.bind_cpu_input(name, fresh[name])
            for name, dtype, shape in fresh_outputs:
                fresh[name] = np.empty(shape, dtype)
                binding.bind_ortvalue_output(name, OrtValue.ortvalue_from_numpy(fresh[name]))
            try:
                session.run_with_iobinding(binding, quiet)
            except RuntimeError:  # onnxruntime's failures: the step-by-step run raises a real one again
                raise _Replan from None

        self.calls.append(run_session)
        self._release(index)


def _last_reads(program: Program) -> dict[Key, int]:
    """Per value the calls read, the index of the last call that reads it."""
    last: dict[Key, int] = {}
    for index, call in enumerate(program.calls):
        names = [name for _, name in call.variable] if isinstance(call, _MappedCall) else call.feeds
        for name in names:
            last[name] = index
    return last


class _Arena:
    """Memory handed out by size, and taken back for later values of the same size."""

    def __init__(self) -> None:
        self.free: dict[int, list[np.ndarray]] = {}

    def take(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        pool = self.free.get(nbytes)
        memory = pool.pop() if pool else _aligned(nbytes)
        return memory.view(dtype).reshape(shape)

    def give(self, array: np.ndarray) -> None:
        memory = array.reshape(-1).view(np.uint8)
        self.free.setdefault(memory.nbytes, []).append(memory)


def _aligned(nbytes: int) -> np.ndarray:
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    offset = -raw.__array_interface__["data"][0] % ALIGNMENT
    return raw[offset : offset + nbytes]
