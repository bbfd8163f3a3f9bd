"""DML_ELEMENT_WISE_ADD1 (seed page 003): f(a, b) = FusedActivation(a + b). In-place allowed.

The fused activation is optional, may be used only with a FLOAT16 or FLOAT32 output, and must be
one DirectML accepts (:mod:`dmlq.activations`); it needs its own feature level too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..activations import Activation
from ..tensor import TensorDesc
from ..types import DataType, FeatureLevel
from .add import ADD_CONSTRAINTS, ADD_FIELDS
from .base import OperatorDesc, support

FL = FeatureLevel
FLOATS = (DataType.FLOAT32, DataType.FLOAT16)


@dataclass(frozen=True, kw_only=True)
class ElementWiseAdd1(OperatorDesc):
    """``DML_ELEMENT_WISE_ADD1_OPERATOR_DESC``.

    >>> from dmlq import TensorDesc, DataType, activations
    >>> t = TensorDesc(DataType.FLOAT32, [3])
    >>> ElementWiseAdd1(a=t, b=t, output=t, fused_activation=activations.Gelu()).minimum_feature_level()
    <FeatureLevel.FL_5_1: 20736>
    """

    a: TensorDesc | None = None
    b: TensorDesc | None = None
    output: TensorDesc | None = None
    fused_activation: Activation | None = None

    TYPE_NAME = "ELEMENT_WISE_ADD1"
    TYPE_VALUE = 89
    INTRODUCED = FL.FL_2_0
    IN_PLACE = True
    FIELDS = ADD_FIELDS
    SUPPORT = (
        support(FL.FL_3_0, (1, 8), a=FLOATS, b=FLOATS, output=FLOATS),
        support(FL.FL_2_0, (4, 5), a=FLOATS, b=FLOATS, output=FLOATS),
    )
    CONSTRAINTS = ADD_CONSTRAINTS

    def _extra_violations(self, level: FeatureLevel) -> Iterator[tuple[str, str]]:
        return fused_activation_violations(self.fused_activation, self.output, level)


def fused_activation_violations(
    activation: object, output: object, level: FeatureLevel
) -> Iterator[tuple[str, str]]:
    """The rules of a ``FusedActivation`` (ADD1's and GEMM's): one of :mod:`dmlq.activations` (or None),
    available at ``level``, on a FLOAT16 or FLOAT32 output."""
    if activation is None:
        return
    if not isinstance(activation, Activation):
        message = f"{type(activation).__name__} is not a fusable activation (use one of dmlq.activations)"
        yield "fused_activation", message
        return
    problem = activation.problem(level)
    if problem:
        yield "fused_activation", problem
    if isinstance(output, TensorDesc) and output.data_type not in FLOATS:
        yield "fused_activation", "needs a FLOAT16 or FLOAT32 output"
