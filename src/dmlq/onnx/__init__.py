"""ONNX models in, DirectML's numbers out (extra ``onnx``: ``pip install dmlq[onnx]``).

:func:`load` reads and checks a model; :func:`check` names, per node, the DirectML operator
onnxruntime's DirectML provider would run, whether it is valid at a feature level and the lowest
level that accepts it; :func:`run` computes the model with dmlq's operators where the provider uses
them and onnxruntime CPU elsewhere; :func:`compare` sets that against onnxruntime's CPU provider,
per graph output and per node, with the known causes of each difference.
"""

from .checking import Verdict, check
from .comparing import Difference, Report, compare
from .loading import Model, load
from .running import OTHER, run

__all__ = ["OTHER", "Difference", "Model", "Report", "Verdict", "check", "compare", "load", "run"]
