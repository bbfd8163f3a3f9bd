"""Checking a model's dispatchables at a feature level, and running its commands."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import TextIO

from ..device import Device
from ..errors import DmlError
from ..types import FeatureLevel
from .commands import Dispatch
from .dispatchables import Dispatchable
from .model import Model


@dataclass(frozen=True)
class Verdict:
    """A dispatchable checked at a feature level: the first rule it breaks there (None if valid)
    and the lowest level that accepts it (None if none does)."""

    dispatchable: Dispatchable
    problem: str | None
    lowest_level: FeatureLevel | None

    @property
    def valid(self) -> bool:
        return self.problem is None


def check_model(model: Model, feature_level: FeatureLevel | str | None = None) -> list[Verdict]:
    """Validate every dispatchable at ``feature_level`` (default: the newest)."""
    device = Device(feature_level)
    verdicts = []
    for dispatchable in model.dispatchables.values():
        try:
            dispatchable.compile(device)
            problem = None
        except DmlError as error:
            problem = str(error)
        verdicts.append(Verdict(dispatchable, problem, dispatchable.desc.minimum_feature_level()))
    return verdicts


@dataclass(frozen=True)
class BindingReport:
    """The dispatch commands checked against their bindings, with the model's initial values."""

    problems: list[str]  # what stops ``run_model``: buffers too small, misaligned, overlapping
    warnings: list[str]  # what runs but DirectML leaves undefined: a scale of 0

    @property
    def valid(self) -> bool:
        return not self.problems


def check_bindings(model: Model, feature_level: FeatureLevel | str | None = None) -> BindingReport:
    """Bind every dispatch command's resources as ``run_model`` does, without computing; dispatchables
    that do not compile at ``feature_level`` are left to :func:`check_model`."""
    device = Device(feature_level)
    operators = {}
    for name, dispatchable in model.dispatchables.items():
        with contextlib.suppress(DmlError):
            operators[name] = dispatchable.compile(device)
    report = BindingReport([], [])
    for command in model.commands:
        if isinstance(command, Dispatch) and command.dispatchable.name in operators:
            try:
                views, _ = command.bound(operators[command.dispatchable.name])
            except DmlError as error:
                report.problems.append(str(error))
                continue
            report.warnings.extend(command.zero_scales(views))
    return report


def run_model(
    model: Model, feature_level: FeatureLevel | str | None = None, out: TextIO | None = None
) -> None:
    """Compile every dispatchable at ``feature_level``, then run the commands in order (prints to ``out``)."""
    device = Device(feature_level)
    operators = {name: dispatchable.compile(device) for name, dispatchable in model.dispatchables.items()}
    for command in model.commands:
        command.run(operators, sys.stdout if out is None else out)
