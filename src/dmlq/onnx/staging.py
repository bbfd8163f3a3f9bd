"""The plan of a model grouped for execution: one stage per mapped step, and one per run of
consecutive other nodes (which execute together, in one onnxruntime session)."""

from __future__ import annotations

from dataclasses import dataclass

from .loading import Model
from .planning import plan
from .steps import Step

__all__ = ["OTHER", "Stage", "stages"]

OTHER = "not a DirectML operator of dmlq: computed by onnxruntime CPU"


@dataclass(frozen=True)
class Stage:
    """Consecutive steps executed together: one mapped step, or other steps in one ORT session."""

    steps: tuple[Step, ...]
    outputs: tuple[str, ...]
    inputs: tuple[str, ...]  # the values it reads that are neither its own nor the model's initializers

    @property
    def mapped(self) -> bool:
        return self.steps[0].mapped


def stages(model: Model) -> list[Stage]:
    """The plan grouped for execution (kept with the model)."""
    found = model.cache.get("stages")
    if not isinstance(found, list):
        steps = plan(model, model.options)
        constants = set(model.initializers).union(*(step.constants for step in steps))
        found = model.cache["stages"] = _group(steps, set(model.output_names), constants)
    return found


def _group(steps: list[Step], graph_outputs: set[str], initializers: set[str]) -> list[Stage]:
    runs: list[list[Step]] = []
    for step in steps:
        if runs and not step.mapped and not runs[-1][0].mapped:
            runs[-1].append(step)
        else:
            runs.append([step])
    result = []
    for index, run_steps in enumerate(runs):
        later = set(graph_outputs)
        for following in runs[index + 1 :]:
            for step in following:
                later.update(step.inputs)
        produced = [name for step in run_steps for name in step.outputs]
        inputs = _outside_inputs(run_steps, initializers)
        result.append(Stage(tuple(run_steps), tuple(name for name in produced if name in later), inputs))
    return result


def _outside_inputs(steps: list[Step], initializers: set[str]) -> tuple[str, ...]:
    produced = {name for step in steps for name in step.outputs}
    names: dict[str, None] = {}
    for step in steps:
        for name in step.inputs:
            if name and name not in produced and name not in initializers:
                names[name] = None
    return tuple(names)
