"""The 17 activations DirectML accepts as ``FusedActivation`` of ELEMENT_WISE_ADD1 (SPEC-NOTES §5).

Each class is the activation's ``DML_ACTIVATION_*_OPERATOR_DESC`` in fused form (no tensors):
its float parameters with DirectMLX's defaults, its operator type value, the feature level it
needs, and its formula. dmlq evaluates a fused activation in float64 on the float32 sum, with the
parameters as float32 values, and rounds once to float32.

>>> from dmlq import activations
>>> activations.LeakyRelu(alpha=0.1)
LeakyRelu(alpha=0.1)
>>> activations.from_spec("elu")
Elu(alpha=1.0)
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

from .errors import DmlError
from .reference.erf import erf
from .types import FeatureLevel

__all__ = [
    "Activation", "Identity", "Relu", "LeakyRelu", "ThresholdedRelu", "Elu", "Celu",
    "ScaledElu", "Sigmoid", "HardSigmoid", "Tanh", "ScaledTanh", "Linear", "Softplus",
    "ParametricSoftplus", "Softsign", "Shrink", "Gelu", "ACTIVATIONS", "from_spec",
]  # fmt: skip

FL = FeatureLevel
Values = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Activation(abc.ABC):
    """Base of the fused activation descriptions."""

    NAME: ClassVar[str]  # snake_case name accepted by dmlq.add(fused_activation=...)
    TYPE_NAME: ClassVar[str]  # DML_OPERATOR_<TYPE_NAME>
    TYPE_VALUE: ClassVar[int]
    INTRODUCED: ClassVar[FeatureLevel] = FL.FL_1_0
    DML_FIELDS: ClassVar[tuple[str, ...]] = ()  # DirectML names of the float fields, in order

    def parameters(self) -> tuple[np.float64, ...]:
        """The float fields as DirectML stores them (float32), widened exactly to float64."""
        return tuple(np.float64(np.float32(getattr(self, f.name))) for f in dataclasses.fields(self))

    def problem(self, level: FeatureLevel) -> str | None:
        """The first rule this activation breaks at ``level``, or None."""
        if level < self.INTRODUCED:
            return f"{self.TYPE_NAME} needs feature level {self.INTRODUCED.label}"
        return self.parameter_problem()

    def parameter_problem(self) -> str | None:
        """The first parameter that is not a finite float32 value (DirectML's FLOAT), or None."""
        for f in dataclasses.fields(self):
            rule = float32_rule(getattr(self, f.name))
            if rule:
                return f"{self.TYPE_NAME} parameter {f.name} {rule}"
        return None

    def apply(self, x: np.ndarray) -> np.ndarray:
        """The formula on a float64 array (the reference; kernels must match it)."""
        with np.errstate(all="ignore"):
            return self._formula(np.asarray(x, dtype=np.float64), *self.parameters())

    # The activation's formula on float64 values and the parameters (float64); NaN in gives NaN out.
    # Each class's own signature names its parameters, so it is declared as any callable here.
    _formula: ClassVar[Callable[..., Values]]


def _at_least_zero(x: Values) -> Values:
    """max(0, x), with NaN and a zero of either sign passing through unchanged.

    Written out rather than ``np.maximum(0.0, x)``, whose zero sign NumPy picks per CPU (-0.0 on
    x86-64, +0.0 on ARM64), so the reference gives the same bits everywhere.

    >>> _at_least_zero(np.array([-2.0, -0.0, 3.0, np.nan]))
    array([ 0., -0.,  3., nan])
    """
    return np.where(x < 0.0, 0.0, x)


def _at_most(x: Values, limit: float) -> Values:
    """min(x, limit), with NaN and a zero of either sign passing through unchanged (as ``_at_least_zero``).

    >>> _at_most(np.array([-2.0, 0.0, 3.0, np.nan]), 0.0)
    array([-2.,  0.,  0., nan])
    """
    return np.where(x > limit, limit, x)


def _tanh(x: Values) -> Values:
    """tanh, with NaN giving the default NaN (positive, no payload).

    NumPy's own tanh returns the default NaN only on CPUs with its vectorised path (AVX2 and FMA3)
    and the input NaN elsewhere; this is the same everywhere.

    >>> np.signbit(_tanh(np.array([-np.nan, -1.0])))
    array([False,  True])
    """
    return np.where(np.isnan(x), np.nan, np.tanh(x))


_Class = TypeVar("_Class", bound=type["Activation"])
_FLOAT32_OVERFLOW = 2.0**128 - 2.0**103  # halfway past float32's largest value: rounds to infinity


def float32_rule(value: object) -> str | None:
    """Why ``value`` cannot be a DirectML FLOAT parameter (a finite float32), or None when it can.

    >>> float32_rule(0.5), float32_rule(float("nan"))
    (None, 'is NaN; refused because DirectML defines no result for a NaN parameter')
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return f"must be a number, not {value!r}"
    # compared as a Python number, without NumPy's casts (float16 against 2**128 overflows)
    number: float = value.item() if isinstance(value, np.generic) else value
    if number != number:
        return "is NaN; refused because DirectML defines no result for a NaN parameter"
    if number in (math.inf, -math.inf):
        return f"is {number}; DirectML's FLOAT parameters are finite float32 values"
    if not -_FLOAT32_OVERFLOW < number < _FLOAT32_OVERFLOW:  # exact, also for huge Python ints
        return "overflows float32 (DirectML's FLOAT parameters are finite float32 values)"
    return None


def _activation(name: str, type_name: str, value: int, level: FeatureLevel = FL.FL_1_0,
                dml_fields: tuple[str, ...] = ()) -> Callable[[_Class], _Class]:  # fmt: skip
    def register(cls: _Class) -> _Class:
        cls.NAME, cls.TYPE_NAME, cls.TYPE_VALUE = name, type_name, value
        cls.INTRODUCED, cls.DML_FIELDS = level, dml_fields
        ACTIVATIONS[name] = cls
        return cls

    return register


ACTIVATIONS: dict[str, type[Activation]] = {}


@_activation("identity", "ACTIVATION_IDENTITY", 38)
@dataclass(frozen=True)
class Identity(Activation):
    def _formula(self, x: Values) -> Values:
        return x


@_activation("relu", "ACTIVATION_RELU", 44)
@dataclass(frozen=True)
class Relu(Activation):
    def _formula(self, x: Values) -> Values:
        return _at_least_zero(x)


@_activation("leaky_relu", "ACTIVATION_LEAKY_RELU", 39, dml_fields=("Alpha",))
@dataclass(frozen=True)
class LeakyRelu(Activation):
    alpha: float = 0.01

    def _formula(self, x: Values, alpha: np.float64) -> Values:
        return np.where(x >= 0, x, alpha * x)


@_activation("thresholded_relu", "ACTIVATION_THRESHOLDED_RELU", 52, dml_fields=("Alpha",))
@dataclass(frozen=True)
class ThresholdedRelu(Activation):
    alpha: float = 1.0

    def _formula(self, x: Values, alpha: np.float64) -> Values:
        return np.where(x > alpha, x, np.where(np.isnan(x), x, 0.0))


@_activation("elu", "ACTIVATION_ELU", 35, dml_fields=("Alpha",))
@dataclass(frozen=True)
class Elu(Activation):
    alpha: float = 1.0

    def _formula(self, x: Values, alpha: np.float64) -> Values:
        return np.where(x >= 0, x, alpha * np.expm1(x))


@_activation("celu", "ACTIVATION_CELU", 128, FL.FL_3_0, dml_fields=("Alpha",))
@dataclass(frozen=True)
class Celu(Activation):
    alpha: float = 1.0

    def _formula(self, x: Values, alpha: np.float64) -> Values:
        return _at_least_zero(x) + _at_most(alpha * np.expm1(x / alpha), 0.0)


@_activation("scaled_elu", "ACTIVATION_SCALED_ELU", 45, dml_fields=("Alpha", "Gamma"))
@dataclass(frozen=True)
class ScaledElu(Activation):
    alpha: float = 1.67326319217681884765625
    gamma: float = 1.05070102214813232421875

    def _formula(self, x: Values, alpha: np.float64, gamma: np.float64) -> Values:
        return np.where(x > 0, gamma * x, gamma * alpha * np.expm1(x))


@_activation("sigmoid", "ACTIVATION_SIGMOID", 47)
@dataclass(frozen=True)
class Sigmoid(Activation):
    def _formula(self, x: Values) -> Values:
        return 1.0 / (1.0 + np.exp(-x))


@_activation("hard_sigmoid", "ACTIVATION_HARD_SIGMOID", 37, dml_fields=("Alpha", "Beta"))
@dataclass(frozen=True)
class HardSigmoid(Activation):
    alpha: float = 0.2
    beta: float = 0.5

    def _formula(self, x: Values, alpha: np.float64, beta: np.float64) -> Values:
        return _at_least_zero(_at_most(alpha * x + beta, 1.0))


@_activation("tanh", "ACTIVATION_TANH", 51)
@dataclass(frozen=True)
class Tanh(Activation):
    def _formula(self, x: Values) -> Values:
        return _tanh(x)


@_activation("scaled_tanh", "ACTIVATION_SCALED_TANH", 46, dml_fields=("Alpha", "Beta"))
@dataclass(frozen=True)
class ScaledTanh(Activation):
    alpha: float = 1.0
    beta: float = 0.5

    def _formula(self, x: Values, alpha: np.float64, beta: np.float64) -> Values:
        return alpha * _tanh(beta * x)


@_activation("linear", "ACTIVATION_LINEAR", 40, dml_fields=("Alpha", "Beta"))
@dataclass(frozen=True)
class Linear(Activation):
    alpha: float
    beta: float

    def _formula(self, x: Values, alpha: np.float64, beta: np.float64) -> Values:
        return alpha * x + beta


@_activation("softplus", "ACTIVATION_SOFTPLUS", 49, dml_fields=("Steepness",))
@dataclass(frozen=True)
class Softplus(Activation):
    steepness: float = 1.0

    def problem(self, level: FeatureLevel) -> str | None:
        found = super().problem(level)
        if found:
            return found
        if not self.steepness > 0:
            return f"ACTIVATION_SOFTPLUS steepness {self.steepness} must be positive"
        if self.steepness < 1 and level < FL.FL_6_4:
            return "ACTIVATION_SOFTPLUS steepness below 1 needs feature level 6_4"
        return None

    def _formula(self, x: Values, steepness: np.float64) -> Values:
        return np.logaddexp(0.0, steepness * x) / steepness


@_activation("parametric_softplus", "ACTIVATION_PARAMETRIC_SOFTPLUS", 43,
             dml_fields=("Alpha", "Beta"))  # fmt: skip
@dataclass(frozen=True)
class ParametricSoftplus(Activation):
    alpha: float
    beta: float

    def _formula(self, x: Values, alpha: np.float64, beta: np.float64) -> Values:
        return alpha * np.logaddexp(0.0, beta * x)


@_activation("softsign", "ACTIVATION_SOFTSIGN", 50)
@dataclass(frozen=True)
class Softsign(Activation):
    def _formula(self, x: Values) -> Values:
        return x / (1.0 + np.abs(x))


@_activation("shrink", "ACTIVATION_SHRINK", 90, FL.FL_2_0, dml_fields=("Bias", "Threshold"))
@dataclass(frozen=True)
class Shrink(Activation):
    bias: float = 0.0
    threshold: float = 0.5

    def _formula(self, x: Values, bias: np.float64, threshold: np.float64) -> Values:
        inner = np.where(np.isnan(x), x, 0.0)
        return np.where(x > threshold, x - bias, np.where(x < -threshold, x + bias, inner))


@_activation("gelu", "ACTIVATION_GELU", 157, FL.FL_5_1)
@dataclass(frozen=True)
class Gelu(Activation):
    def _formula(self, x: Values) -> Values:
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def from_spec(spec: Activation | str | None) -> Activation | None:
    """An activation from ``None``, a snake_case name (DirectMLX defaults) or an instance."""
    if spec is None:
        return None
    if isinstance(spec, Activation):
        problem = spec.parameter_problem()
        if problem:
            raise DmlError(f"fused_activation: {problem}")
        return spec
    if isinstance(spec, str):
        cls = ACTIVATIONS.get(spec.strip().lower())
        if cls is None:
            known = ", ".join(ACTIVATIONS)
            raise DmlError(f"fused_activation: unknown activation {spec!r} (known: {known})")
        try:
            return cls()
        except TypeError:
            params = ", ".join(f.name for f in dataclasses.fields(cls))
            raise DmlError(
                f"fused_activation: {spec!r} has no default parameters; pass "
                f"dmlq.activations.{cls.__name__}({params}=...)"
            ) from None
    raise DmlError(
        f"fused_activation must be None, an activation name or a dmlq.activations object, "
        f"not {type(spec).__name__}"
    )
