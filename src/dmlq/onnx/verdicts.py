"""Verdicts: per step of the plan, the DirectML operator, its validity at a feature level, the lowest
level that accepts it and the validator's reason when it is refused; for a step dmlq leaves to
onnxruntime CPU, the DirectML operator the provider would run where dmlq does not have it yet, and
why the provider would fail to create its kernel.

Shapes come from the model's static types (a symbolic dimension counts as 1) or, in ``run``, from
the actual inputs. The rules are :mod:`dmlq.ops`' own: nothing here decides validity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import DmlError
from ..ops import OperatorDesc
from ..types import FeatureLevel
from .loading import Model
from .staging import OTHER, stages
from .steps import Spec, Step, Typed, node_name

__all__ = ["Verdict", "refusals", "static_specs", "verdict"]


@dataclass(frozen=True)
class Verdict:
    """One step of the model: its nodes, what computes them, and whether DirectML accepts it.

    ``operator`` is DirectML's operator name, the names joined by " + " where the provider's kernel
    builds several (``None`` for nodes computed by onnxruntime CPU);
    ``missing`` the DirectML operator(s) the provider runs for those nodes that dmlq does not have
    yet; ``valid`` is None when the shapes are not known before running, False where the provider
    fails to create the kernel or the feature level refuses it; ``warning`` where the provider's
    description means something else than the ONNX node (dmlq computes what DirectML would).
    """

    nodes: tuple[str, ...]
    op_types: tuple[str, ...]
    operator: str | None
    valid: bool | None
    lowest_level: FeatureLevel | None
    reason: str
    rule: str
    missing: str = ""
    warning: str = ""

    @property
    def node(self) -> str:
        return ", ".join(self.nodes)


def refusals(model: Model, level: FeatureLevel, values: Mapping[str, Typed]) -> list[str]:
    """Why the provider cannot create the steps it cannot, with the inputs' shapes where they reach."""
    refused = []
    for stage in stages(model):
        for step in stage.steps:
            found = verdict(model, step, level, static_specs(model, step, values, symbolic=None))
            if found.valid is False:
                refused.append(f"node {found.node}: {found.reason}")
    return refused


def verdict(model: Model, step: Step, level: FeatureLevel, specs: list[Spec | None] | None) -> Verdict:
    names = tuple(node_name(node) for node in step.covers)
    op_types = tuple(node.op_type for node in step.covers)
    if not step.mapped:
        if step.refusal:
            reason = f"the provider fails to create its kernel: {step.refusal}"
            return Verdict(names, op_types, None, False, None, reason, step.rule, step.missing)
        return Verdict(names, op_types, None, None, None, OTHER, step.rule, step.missing)
    operator = step.operator_name
    if specs is None:
        return Verdict(names, op_types, operator, None, None, "shapes known only when run", step.rule)
    try:
        described = step.describe(specs)
    except DmlError as error:
        reason = f"the provider fails to create its kernel: {error}"
        return Verdict(names, op_types, operator, False, None, reason, step.rule)
    descs = [node.desc for node in described.nodes]
    lowest = _lowest_level(descs)
    for desc in descs:
        try:
            desc.validate(level)
        except DmlError as error:
            return Verdict(
                names, op_types, operator, False, lowest, str(error), step.rule, warning=described.warning
            )
    return Verdict(names, op_types, operator, True, lowest, "", step.rule, warning=described.warning)


def _lowest_level(descs: list[OperatorDesc]) -> FeatureLevel | None:
    """The lowest level that accepts every operator of the step (None when some level accepts none)."""
    levels = [desc.minimum_feature_level() for desc in descs]
    known = [level for level in levels if level is not None]
    return max(known) if len(known) == len(levels) else None


def static_specs(
    model: Model, step: Step, values: Mapping[str, Typed] | None = None, symbolic: int | None = 1
) -> list[Spec | None] | None:
    """The step's operand specs before running; a symbolic dimension is ``symbolic`` (None: unknown)."""
    specs: list[Spec | None] = []
    for name in step.inputs:
        if not name:
            specs.append(None)
            continue
        value = values.get(name) if values is not None else step.constants.get(name)
        if value is None:
            value = step.constants.get(name)
        if value is not None:
            specs.append(Spec(value.dtype, value.shape))
            continue
        found = model.types.get(name)
        if found is None or found.dtype is None or found.shape is None:
            return None
        shape = (
            found.static_shape
            if symbolic is None
            else tuple(symbolic if d is None else d for d in found.shape)
        )
        if shape is None:
            return None
        specs.append(Spec(found.dtype, shape))
    return specs
