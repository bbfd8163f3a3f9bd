"""The 17 fused activations of ADD1 against ``math`` applied in float64 and rounded to float32.

The reference takes the float32 sum a + b, the parameters as float32 values (DirectML stores
them as FLOAT), evaluates the page's formula with Python floats and ``math`` functions, and
rounds once to float32 (then to float16 for float16 data). Formulas made of +, -, *, / only must
match exactly; those through exp, expm1, log1p, tanh or erf may differ by one float32 ulp where
libm's and NumPy's double-precision functions differ in the last bit.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections.abc import Callable

import numpy as np
import pytest

import dmlq
from conftest import f16, f32, ulp32
from dmlq import DataType, Device, DmlError, TensorDesc, activations, ops


def safe_exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def safe_expm1(x: float) -> float:
    try:
        return math.expm1(x)
    except OverflowError:
        return math.inf


def softplus(t: float) -> float:
    """ln(1 + e^t) without overflow: t + ln(1 + e^-t) for positive t."""
    if math.isnan(t):
        return t
    return t + math.log1p(safe_exp(-t)) if t > 0 else math.log1p(safe_exp(t))


def where_nan(x: float, value: float) -> float:
    return x if math.isnan(x) else value


# name: (activation, formula(x, *float32 parameters), exact?)
CASES: dict[str, tuple[activations.Activation, Callable[..., float], bool]] = {
    "identity": (activations.Identity(), lambda x: x, True),
    "relu": (activations.Relu(), lambda x: where_nan(x, max(0.0, x)), True),
    "leaky_relu": (activations.LeakyRelu(alpha=0.1), lambda x, a: x if x >= 0 else a * x, True),
    "thresholded_relu": (
        activations.ThresholdedRelu(alpha=0.75),
        lambda x, a: x if x > a else where_nan(x, 0.0),
        True,
    ),
    "elu": (activations.Elu(alpha=0.5), lambda x, a: x if x >= 0 else a * safe_expm1(x), False),
    "celu": (
        activations.Celu(alpha=1.3),
        lambda x, a: where_nan(x, max(0.0, x) + min(0.0, a * safe_expm1(x / a))),
        False,
    ),
    "scaled_elu": (
        activations.ScaledElu(),
        lambda x, a, g: g * x if x > 0 else g * a * safe_expm1(x),
        False,
    ),
    "sigmoid": (activations.Sigmoid(), lambda x: 1.0 / (1.0 + safe_exp(-x)), False),
    "hard_sigmoid": (
        activations.HardSigmoid(alpha=0.3, beta=0.4),
        lambda x, a, b: where_nan(x, max(0.0, min(a * x + b, 1.0))),
        True,
    ),
    "tanh": (activations.Tanh(), math.tanh, False),
    "scaled_tanh": (activations.ScaledTanh(alpha=1.7, beta=0.6), lambda x, a, b: a * math.tanh(b * x), False),
    "linear": (activations.Linear(alpha=-1.5, beta=0.1), lambda x, a, b: a * x + b, True),
    "softplus": (activations.Softplus(steepness=2.0), lambda x, s: softplus(s * x) / s, False),
    "softplus_below_one": (activations.Softplus(steepness=0.3), lambda x, s: softplus(s * x) / s, False),
    "parametric_softplus": (
        activations.ParametricSoftplus(alpha=0.7, beta=1.9),
        lambda x, a, b: a * softplus(b * x),
        False,
    ),
    "softsign": (activations.Softsign(), lambda x: x / (1.0 + abs(x)), True),
    "shrink": (
        activations.Shrink(bias=0.25, threshold=0.6),
        lambda x, b, t: x - b if x > t else (x + b if x < -t else where_nan(x, 0.0)),
        True,
    ),
    "gelu": (activations.Gelu(), lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))), False),
}


def parameters(activation: activations.Activation) -> list[float]:
    return [f32(float(getattr(activation, f.name))) for f in dataclasses.fields(activation)]


def operands(rng: np.random.Generator, activation: activations.Activation) -> tuple[np.ndarray, np.ndarray]:
    """Random sums over many magnitudes, plus the activation's own thresholds and special values."""
    size = 3000
    a = (rng.standard_normal(size) * np.exp(rng.uniform(-6, 4, size))).astype(np.float32)
    b = (rng.standard_normal(size) * rng.choice([0.0, 1e-3, 1.0], size)).astype(np.float32)
    edges = [0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 88.0, -88.0, 1e-30, -1e-30, 3e38, -3e38]
    edges += [
        p for value in parameters(activation) for p in (value, -value, np.nextafter(np.float32(value), 9))
    ]
    edge = np.float32(edges)
    return np.concatenate([a, edge]), np.concatenate([b, np.zeros_like(edge)])


def expected(name: str, a: np.ndarray, b: np.ndarray, out_dtype: np.dtype) -> np.ndarray:
    activation, formula, _ = CASES[name]
    params = parameters(activation)
    rounding = f16 if out_dtype == np.float16 else f32
    values = [rounding(f32(formula(f32(float(x) + float(y)), *params))) for x, y in zip(a, b)]
    return np.array(values, dtype=out_dtype)


def compare(name: str, got: np.ndarray, want: np.ndarray) -> None:
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{name}: NaN positions differ"
    got64, want64 = got[~nan].astype(np.float64), want[~nan].astype(np.float64)
    if CASES[name][2]:
        assert np.array_equal(got64, want64)
        return
    infinite = ~np.isfinite(want64)
    assert np.array_equal(got64[infinite], want64[infinite])
    ulps = np.array([ulp32(w) for w in want64[~infinite]])
    error = np.abs(got64[~infinite] - want64[~infinite]) / ulps
    assert error.max(initial=0) <= 1, f"{name}: {error.max()} ulp"
    assert np.count_nonzero(error) <= 0.01 * error.size, f"{name}: {np.count_nonzero(error)} off by 1 ulp"


@pytest.mark.parametrize("name", CASES)
def test_activation_through_numpy_add_float32(name: str, rng: np.random.Generator) -> None:
    activation = CASES[name][0]
    a, b = operands(rng, activation)
    with np.errstate(all="ignore"):
        got = dmlq.add(a, b, fused_activation=activation)
    compare(name, got, expected(name, a, b, np.dtype(np.float32)))


@pytest.mark.parametrize("name", CASES)
def test_activation_through_directml_add1_float16(name: str, rng: np.random.Generator) -> None:
    activation = CASES[name][0]
    with np.errstate(over="ignore"):
        a, b = (v.astype(np.float16) for v in operands(rng, activation))
    n = a.size
    desc = TensorDesc(DataType.FLOAT16, [1, 1, 1, n])
    op = Device("6_4").compile_operator(
        ops.ElementWiseAdd1(a=desc, b=desc, output=desc, fused_activation=activation)
    )
    out = np.zeros(n, np.float16)
    with np.errstate(all="ignore"):
        op.execute([a, b], [out])
    want = expected(name, a.astype(np.float32), b.astype(np.float32), np.dtype(np.float16))
    assert np.array_equal(np.isnan(out), np.isnan(want))
    finite = ~np.isnan(want)
    # float16 keeps 11 bits: the one-ulp float32 differences vanish except at float16 ties
    mismatch = out[finite] != want[finite]
    assert np.count_nonzero(mismatch) <= (0 if CASES[name][2] else 2)


@pytest.mark.parametrize("spec", ["relu", "elu", "gelu", "sigmoid", "celu", "softplus", "softsign", "shrink"])
def test_string_names_use_directmlx_defaults(spec: str) -> None:
    x = np.float32([-2.0, -0.25, 0.0, 0.3, 1.5])
    by_name = dmlq.add(x, np.float32(0), fused_activation=spec)
    by_object = dmlq.add(x, np.float32(0), fused_activation=activations.from_spec(spec))
    assert np.array_equal(by_name, by_object)


def test_parameters_are_rounded_to_float32() -> None:
    # alpha = 0.1 is stored as FLOAT (0.100000001490116...), the product is rounded once to float32
    x = np.float32([-3.0, -7.0, -1e-3])
    got = dmlq.add(x, np.float32(0), fused_activation=activations.LeakyRelu(alpha=0.1))
    alpha = f32(0.1)
    assert got.tolist() == [f32(alpha * float(v)) for v in x]


@pytest.mark.parametrize(
    "activation, x, want",
    [
        (activations.Relu(), [-1.0, -0.0, 2.0], [0.0, 0.0, 2.0]),
        (activations.ThresholdedRelu(), [1.0, 1.0000001, 0.5], [0.0, 1.0000001, 0.0]),
        (activations.Shrink(), [0.5, -0.5, 0.75, -0.75], [0.0, 0.0, 0.75, -0.75]),
        (activations.Shrink(bias=0.25, threshold=0.5), [0.75, -0.75], [0.5, -0.5]),
        (activations.HardSigmoid(), [10.0, -10.0, 0.0], [1.0, 0.0, 0.5]),
        (activations.Elu(alpha=2.0), [-np.inf, 3.0], [-2.0, 3.0]),
        (activations.Sigmoid(), [-np.inf, np.inf, 0.0], [0.0, 1.0, 0.5]),
        (activations.Tanh(), [-np.inf, np.inf], [-1.0, 1.0]),
        (activations.Softplus(), [-np.inf, np.inf, 0.0], [0.0, np.inf, f32(math.log(2.0))]),
        (activations.Gelu(), [0.0, np.inf, 1.0], [0.0, np.inf, f32(0.5 * (1 + math.erf(1 / math.sqrt(2))))]),
        (activations.Linear(alpha=2.0, beta=1.0), [np.inf, -1.0], [np.inf, -1.0]),
    ],
)
def test_activation_landmarks(activation: activations.Activation, x: list[float], want: list[float]) -> None:
    got = dmlq.add(np.float32(x), np.float32(0), fused_activation=activation)
    assert got.tolist() == np.float32(want).tolist()


@pytest.mark.parametrize("name", CASES)
def test_nan_stays_nan(name: str) -> None:
    got = dmlq.add(np.float32([np.nan]), np.float32([0]), fused_activation=CASES[name][0])
    assert np.isnan(got[0])


FLOAT32_MAX = float(np.finfo(np.float32).max)
NOT_FLOAT32 = {
    "huge int": (2**2000, "overflows float32"),
    "beyond float32": (1e300, "overflows float32"),
    "just past the rounding to float32's largest": (2.0**128 - 2.0**103, "overflows float32"),
    "infinity": (-math.inf, "is -inf"),
    "NaN": (math.nan, "is NaN; refused because DirectML defines no result"),
    "text": ("0.5", "must be a number"),
}


@pytest.mark.parametrize("case", NOT_FLOAT32)
def test_parameters_that_are_not_finite_float32_are_refused_at_compile(case: str) -> None:
    value, rule = NOT_FLOAT32[case]
    desc = TensorDesc(DataType.FLOAT32, [2])
    add1 = ops.ElementWiseAdd1(a=desc, b=desc, output=desc, fused_activation=activations.Linear(1.0, value))
    with pytest.raises(DmlError) as error:
        Device().compile_operator(add1)
    message = str(error.value)
    assert message.startswith("ElementWiseAdd1.fused_activation: ACTIVATION_LINEAR parameter beta ")
    assert rule in message


@pytest.mark.parametrize("case", NOT_FLOAT32)
@pytest.mark.parametrize("size", [2, 0])
def test_numpy_add_refuses_them_naming_fused_activation(case: str, size: int) -> None:
    value, rule = NOT_FLOAT32[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning on the way to the refusal
        with pytest.raises(
            ValueError, match=rf"^fused_activation: ACTIVATION_LEAKY_RELU parameter alpha .*{re.escape(rule)}"
        ):
            dmlq.add(np.ones(size, np.float32), 1.0, fused_activation=activations.LeakyRelu(alpha=value))


def test_parameters_that_round_to_a_finite_float32_are_accepted() -> None:
    below_overflow = float(np.nextafter(2.0**128 - 2.0**103, 0))  # rounds down to float32's largest
    got = dmlq.add(np.float32([-1, 2]), 0.0, fused_activation=activations.LeakyRelu(alpha=below_overflow))
    assert got.tolist() == [-FLOAT32_MAX, 2.0]
    huge_int = activations.LeakyRelu(alpha=2**127)
    assert dmlq.add(np.float32([-1]), 0.0, fused_activation=huge_int).tolist() == [-(2.0**127)]
