"""Checking a model's dispatchables at a feature level, and running its commands."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO

from ..device import Device
from ..errors import DmlError
from ..types import FeatureLevel
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


def run_model(
    model: Model, feature_level: FeatureLevel | str | None = None, out: TextIO | None = None
) -> None:
    """Compile every dispatchable at ``feature_level``, then run the commands in order (prints to ``out``)."""
    device = Device(feature_level)
    operators = {name: dispatchable.compile(device) for name, dispatchable in model.dispatchables.items()}
    for command in model.commands:
        command.run(operators, sys.stdout if out is None else out)
