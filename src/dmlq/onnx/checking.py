"""Verdicts: per step of the plan, the DirectML operator, its validity at a feature level, the lowest
level that accepts it and the validator's reason when it is refused.

Shapes come from the model's static types (a symbolic dimension counts as 1) or, in ``run``, from
the actual inputs. The rules are :mod:`dmlq.ops`' own: nothing here decides validity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import DmlError
from ..types import FeatureLevel
from .loading import Model, ModelSource, load
from .mapping import Spec, Step, node_name
from .staging import OTHER, stages

__all__ = ["Verdict", "check", "refuse_invalid"]


@dataclass(frozen=True)
class Verdict:
    """One step of the model: its nodes, what computes them, and whether DirectML accepts it.

    ``operator`` is DirectML's operator name (``None`` for nodes computed by onnxruntime CPU);
    ``valid`` is None when the shapes are not known before running.
    """

    nodes: tuple[str, ...]
    op_types: tuple[str, ...]
    operator: str | None
    valid: bool | None
    lowest_level: FeatureLevel | None
    reason: str
    rule: str

    @property
    def node(self) -> str:
        return ", ".join(self.nodes)


def check(model: ModelSource, feature_level: FeatureLevel | str | None = None) -> list[Verdict]:
    """One verdict per step (a mapped node or QDQ group, or a node onnxruntime CPU computes).

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper, TensorProto
    >>> graph = helper.make_graph(
    ...     [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 3])],
    ...     [numpy_helper.from_array(np.float32(0.5), "s"), numpy_helper.from_array(np.uint8(0), "z")])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    >>> [(v.operator, v.valid, v.lowest_level.label) for v in check(model, "1_0")]
    [('ELEMENT_WISE_QUANTIZE_LINEAR', True, '1_0')]

    Without a zero point the description has none, which DirectML accepts from feature level 6_2.
    """
    loaded = load(model)
    level = FeatureLevel.newest() if feature_level is None else FeatureLevel.parse(feature_level)
    return [
        _verdict(step, level, _static_specs(loaded, step)) for stage in stages(loaded) for step in stage.steps
    ]


def refuse_invalid(model: Model, level: FeatureLevel, values: Mapping[str, np.ndarray]) -> None:
    """DmlError for the first step invalid at ``level``: with the inputs' shapes where they reach it."""
    for stage in stages(model):
        for step in stage.steps:
            if not step.mapped:
                continue
            specs = _static_specs(model, step, values, symbolic=None)
            verdict = _verdict(step, level, specs)
            if verdict.valid is False:
                raise DmlError(f"node {verdict.node}: {verdict.reason}")


def _verdict(step: Step, level: FeatureLevel, specs: list[Spec | None] | None) -> Verdict:
    names = tuple(node_name(node) for node in step.covers)
    op_types = tuple(node.op_type for node in step.covers)
    if step.operator is None:  # not mapped
        return Verdict(names, op_types, None, None, None, OTHER, step.rule)
    operator = step.operator.TYPE_NAME
    if specs is None:
        return Verdict(names, op_types, operator, None, None, "shapes known only when run", step.rule)
    try:
        desc = step.describe(specs).desc
    except DmlError as error:
        return Verdict(names, op_types, operator, False, None, f"the provider refuses it: {error}", step.rule)
    lowest = desc.minimum_feature_level()
    try:
        desc.validate(level)
    except DmlError as error:
        return Verdict(names, op_types, operator, False, lowest, str(error), step.rule)
    return Verdict(names, op_types, operator, True, lowest, "", step.rule)


def _static_specs(
    model: Model, step: Step, values: Mapping[str, np.ndarray] | None = None, symbolic: int | None = 1
) -> list[Spec | None] | None:
    """The step's operand specs before running; a symbolic dimension is ``symbolic`` (None: unknown)."""
    specs: list[Spec | None] = []
    for name in step.inputs:
        if not name:
            specs.append(None)
            continue
        if values is not None and name in values:
            specs.append(Spec(values[name].dtype, values[name].shape))
            continue
        found = model.types.get(name)
        if found is None or found.dtype is None or found.shape is None:
            return None
        shape = tuple(symbolic if d is None else d for d in found.shape)
        known = tuple(d for d in shape if d is not None)
        if len(known) < len(shape):  # a symbolic dimension, and symbolic None: unknown
            return None
        specs.append(Spec(found.dtype, known))
    return specs
