"""dmlq's run of a model against onnxruntime's CPU provider, per graph output and per mapped step.

The reference is ONNX's numbers: onnxruntime CPU with its QDQ and quantization fusions off
(:mod:`.sessions`), the same options dmlq's other nodes run with. Per step, onnxruntime CPU
computes the model's nodes the step stands for from the very inputs dmlq's run gave them, so a
difference there belongs to that step: to DirectML's operator, or to the provider's fusion of
those nodes into one. Per graph output, onnxruntime CPU runs the whole model. Differences are
counted in elements and measured in units of the last place: integer steps for quantized outputs,
float ulps (of the larger magnitude) for float ones. Each gets its known cause (:mod:`.causes`
for a step's; for a graph output, the steps it follows from, or, where its steps all agree and
onnxruntime CPU reproduces it exactly with its graph optimizations off, onnxruntime's float-only
fusions over the whole model, :data:`.sessions.FLOAT_FUSIONS`, which dmlq's sessions, each over a
part of the graph, cannot all apply).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from ..types import FeatureLevel
from . import sessions
from .causes import UNEXPLAINED, step_cause
from .loading import Model, ModelSource
from .preparing import prepared
from .program import checked_inputs, specs
from .running import execute
from .sessions import Session
from .staging import OTHER, stages
from .steps import Step

__all__ = ["UNEXPLAINED", "Difference", "Report", "compare", "random_inputs"]


@dataclass(frozen=True)
class Difference:
    """One output compared: elements that differ from onnxruntime CPU and by how much."""

    node: str
    output: str
    operator: str
    elements: int
    differing: int | None  # None: not compared (onnxruntime CPU computed it in both runs)
    largest: float
    unit: str
    cause: str

    @property
    def largest_text(self) -> str:
        if not self.differing:
            return "-"
        return f"{self.largest:g} {self.unit}"


@dataclass
class Report:
    """The comparison: per graph output and per mapped step, and the seed that drew missing inputs."""

    seed: int
    drawn: list[str]
    outputs: list[Difference] = field(default_factory=list)
    nodes: list[Difference] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not any(d.differing for d in [*self.outputs, *self.nodes] if d.differing is not None)

    def table(self) -> str:
        """The report as text: one table per graph output, one per node."""
        header = ("NODE", "OUTPUT", "COMPUTED BY", "DIFFERING", "LARGEST", "CAUSE")
        parts = []
        if self.drawn:
            parts.append(f"inputs drawn at random with seed {self.seed}: {', '.join(self.drawn)}")
        parts.append("graph outputs vs onnxruntime CPU (whole model):")
        parts.append(_table(header, [_row(d) for d in self.outputs]))
        parts.append("")
        parts.append("nodes vs onnxruntime CPU (same inputs):")
        parts.append(_table(header, [_row(d) for d in self.nodes]))
        return "\n".join(parts)

    def __str__(self) -> str:
        return self.table()


def _row(difference: Difference) -> tuple[str, ...]:
    counted = (
        "not compared" if difference.differing is None else f"{difference.differing} of {difference.elements}"
    )
    return (
        difference.node,
        difference.output,
        difference.operator,
        counted,
        difference.largest_text,
        difference.cause if difference.differing else "-",
    )


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]
    )


def compare(
    model: ModelSource,
    inputs: Mapping[str, object] | None = None,
    seed: int = 0,
    feature_level: FeatureLevel | str | None = None,
) -> Report:
    """Run ``model`` with dmlq and with onnxruntime CPU and report where they differ, and why.

    Inputs not given are drawn at random from ``seed`` (their names are in ``report.drawn``).

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper, TensorProto
    >>> graph = helper.make_graph(
    ...     [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.UINT8, [3])],
    ...     [numpy_helper.from_array(np.float32(1), "s"), numpy_helper.from_array(np.uint8(0), "z")])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    >>> report = compare(model, seed=3)
    >>> report.drawn, report.identical, [(d.operator, d.differing) for d in report.nodes]
    (['x'], True, [('ELEMENT_WISE_QUANTIZE_LINEAR', 0)])
    """
    loaded = prepared(model)
    given = dict(inputs or {})
    drawn = [name for name in loaded.input_names if name not in given]
    feeds = {**random_inputs(loaded, seed, drawn), **given}
    values: dict[str, np.ndarray] = {}
    ours = execute(loaded, feeds, feature_level, keep=values)
    report = Report(seed, drawn)
    report.nodes = [
        difference
        for stage in stages(loaded)
        for step in stage.steps
        for difference in _compare_step(loaded, step, values)
    ]
    checked = checked_inputs(loaded, feeds)
    theirs = _ort_whole(loaded, checked)
    for name in loaded.output_names:
        matches_unfused = False
        if not _equal(ours[name], theirs[name]):
            matches_unfused = _equal(ours[name], _ort_whole(loaded, checked, optimized=False)[name])
        cause = _output_cause(loaded, name, report.nodes, matches_unfused)
        step = _quantization_step(loaded, name)
        report.outputs.append(
            _difference("(graph output)", name, "whole model", ours[name], theirs[name], cause, step)
        )
    return report


def random_inputs(model: Model, seed: int, names: list[str]) -> dict[str, np.ndarray]:
    """Inputs drawn from ``seed``: floats in [-2, 2), integers over the 8-bit range; symbolic dimensions 1."""
    rng = np.random.default_rng(seed)
    drawn = {}
    for name in names:
        found = model.types.get(name)
        dtype: np.dtype = np.dtype(np.float32) if found is None or found.dtype is None else found.dtype
        shape = tuple(1 if d is None else d for d in ((found.shape if found is not None else None) or ()))
        if dtype.kind == "f":
            drawn[name] = rng.uniform(-2, 2, shape).astype(dtype)
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            drawn[name] = rng.integers(max(info.min, -128), min(info.max, 255), shape, endpoint=True).astype(
                dtype
            )
        else:
            drawn[name] = rng.integers(0, 2, shape).astype(dtype)
    return drawn


def _ort_whole(
    model: Model, feeds: Mapping[str, np.ndarray], optimized: bool = True
) -> dict[str, np.ndarray]:
    """The whole model on onnxruntime CPU, QDQ fusions off; ``optimized=False``: no fusion at all."""
    key = ("whole", optimized)
    session = cast("Session | None", model.cache.get(key))  # the entry of a session's key
    if session is None:
        options = sessions.options(optimized=optimized)
        session = model.cache[key] = sessions.cpu_session(
            sessions.at_oldest_ir_version(model), options, "the whole model"
        )
    return dict(zip(model.output_names, session.run(model.output_names, dict(feeds))))


def _compare_step(model: Model, step: Step, values: Mapping[str, np.ndarray]) -> list[Difference]:
    """Each output of a mapped step against onnxruntime CPU's nodes on the same inputs."""
    if not step.mapped:
        return [_not_compared(step, values)]
    feeds = {}
    for node in step.covers:
        for name in node.input:
            if name and name not in model.initializers and name not in feeds and _outside(step, name):
                feeds[name] = values[name]
    outputs = list(step.outputs)
    key = ("step session", id(step), tuple((n, v.dtype) for n, v in feeds.items()))
    session = cast("Session | None", model.cache.get(key))  # the entry of a session's key
    if session is None:
        dtypes = {name: value.dtype for name, value in feeds.items()}
        session = model.cache[key] = sessions.ort_session(model, list(step.covers), dtypes, outputs)
    described = step.describe(specs(step, values))
    found = []
    for output, theirs in zip(outputs, session.run(outputs, feeds)):
        ours = values[output]
        cause = UNEXPLAINED
        if ours.shape == theirs.shape and not _equal(ours, theirs):
            cause = step_cause(step, described.warning, values, output, ours, theirs)
        found.append(_difference(step.name, output, step.operator_name, ours, theirs, cause))
    return found


def _not_compared(step: Step, values: Mapping[str, np.ndarray]) -> Difference:
    """An other step: onnxruntime CPU computed it in both runs, so there is nothing to compare."""
    output = step.outputs[0] if step.outputs else "-"
    size = int(np.size(values[output])) if output in values else 0
    return Difference(step.name, output, OTHER, size, None, 0.0, "", "-")


def _outside(step: Step, name: str) -> bool:
    return all(name not in node.output for node in step.covers)


def _equal(ours: np.ndarray, theirs: np.ndarray) -> bool:
    return ours.shape == theirs.shape and np.array_equal(ours, theirs, equal_nan=ours.dtype.kind == "f")


def _quantization_step(model: Model, output: str) -> float | None:
    """The per-tensor scale of the DequantizeLinear that produces ``output`` (through Identity nodes)."""
    producer = {name: node for node in model.graph.node for name in node.output}
    node = producer.get(output)
    while node is not None and node.op_type == "Identity":
        node = producer.get(node.input[0])
    if node is None or node.op_type != "DequantizeLinear":
        return None
    scale = model.initializers.get(node.input[1])
    return float(scale.reshape(-1)[0]) if scale is not None and scale.size == 1 else None


def _difference(
    node: str,
    output: str,
    operator: str,
    ours: np.ndarray,
    theirs: np.ndarray,
    cause: str,
    quantization_step: float | None = None,
) -> Difference:
    """Elements that differ and the largest difference: in units of the last place for quantized data
    (integers, or a float output dequantized with one scale: in steps of that scale), else in ulps."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    if ours.shape != theirs.shape:
        return Difference(
            node, output, operator, ours.size, ours.size, float("inf"), "(shapes differ)", cause
        )
    if ours.dtype.kind in "iub":
        gap = np.abs(ours.astype(np.int64) - theirs.astype(np.int64))
        unit = "units"
    elif quantization_step is not None:
        gap = np.round(np.abs(ours.astype(np.float64) - theirs.astype(np.float64)) / quantization_step)
        unit = "units"
    else:
        gap = _ulps(ours, theirs)
        unit = "ulp"
    differing = int(np.count_nonzero(gap))
    largest = float(gap.max()) if differing else 0.0
    return Difference(node, output, operator, ours.size, differing, largest, unit, cause)


def _ulps(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """The float difference in ulps of the larger magnitude; NaN against NaN is equal."""
    a, b = ours.astype(np.float64), theirs.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    with np.errstate(invalid="ignore"):
        spacing = np.spacing(np.maximum(np.abs(ours), np.abs(theirs)).astype(ours.dtype)).astype(np.float64)
        gap = np.where(a == b, 0.0, np.abs(a - b) / spacing)
    return np.where(both_nan, 0.0, np.nan_to_num(gap, nan=np.inf))


def _output_cause(model: Model, output: str, nodes: list[Difference], matches_unfused: bool) -> str:
    upstream = _ancestors(model, output)
    differing = [d.node for d in nodes if d.differing and d.output in upstream]
    if differing:
        return f"follows from node(s) {', '.join(differing)}"
    if matches_unfused:
        return (
            "onnxruntime's float-only fusions over the whole model (sessions.FLOAT_FUSIONS: LayerNormFusion, "
            "GeluFusion, ...) round differently from dmlq's sessions, each over a part of the graph: "
            "onnxruntime CPU with its graph optimizations off matches exactly"
        )
    return UNEXPLAINED


def _ancestors(model: Model, output: str) -> set[str]:
    producer = {name: node for node in model.graph.node for name in node.output}
    seen, pending = {output}, [output]
    while pending:
        node = producer.get(pending.pop())
        for name in node.input if node is not None else ():
            if name and name not in seen:
                seen.add(name)
                pending.append(name)
    return seen
