"""ONNX models in, DirectML's numbers out (extra ``onnx``: ``python -m pip install ".[onnx]"`` in a checkout).

:func:`load` reads, checks and prepares a model once (with onnxruntime's session options
``qdq_int8_allowed`` and ``disable_quant_qdq``); :func:`check` names, per node or fused group, the
DirectML operator onnxruntime's DirectML provider would run, whether it is valid at a feature level
and the lowest level that accepts it; :func:`run` computes the model with dmlq's operators where
the provider uses them and onnxruntime CPU elsewhere; :func:`compare` sets that against onnxruntime's
CPU provider with its QDQ fusions off (ONNX's numbers), per graph output and per step, with the
known causes of each difference. :mod:`.planning` says how nodes become steps.

Its names load on first use (PEP 562), so that the command line's parser (:mod:`.cli`) can list
``dmlq compare`` without importing ``onnx``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what __getattr__ gives, as type checkers see it
    from .checking import check
    from .comparing import Difference, Report, compare
    from .loading import Model
    from .preparing import load
    from .running import run
    from .staging import OTHER
    from .verdicts import Verdict

__all__ = ["OTHER", "Difference", "Model", "Report", "Verdict", "check", "compare", "load", "run"]

_HOMES = {
    "OTHER": "staging",
    "run": "running",
    "Difference": "comparing",
    "Report": "comparing",
    "compare": "comparing",
    "Model": "loading",
    "load": "preparing",
    "Verdict": "verdicts",
    "check": "checking",
}


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
