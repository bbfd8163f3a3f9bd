"""The reference gives the same bits on every CPU, and the kernels give them at every level.

Where NumPy itself differs by platform (the sign of ``maximum(0.0, -0.0)``: -0.0 on x86-64, +0.0 on
ARM64; the NaN ``tanh`` returns: the default NaN from its AVX2+FMA3 path, the input NaN elsewhere),
``dmlq.activations`` writes its rule out instead. These tests run the reference under the other
platforms' NumPy behaviour (patched in) and check that nothing changes.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import LEVELS
from dmlq import _core, activations, kernels, ops, reference

NUMPY_MAXIMUM, NUMPY_MINIMUM, NUMPY_TANH = np.maximum, np.minimum, np.tanh

# Signed zeros, NaNs with either sign and a payload, and the edges of each activation's branches.
X = np.array([-0.0, 0.0, 1.0, -1.0, -2.5, 3.0, np.inf, -np.inf], np.float32)
NANS = np.uint32([0x7FC00001, 0xFFC00001, 0x7FC12345, 0xFFC00000]).view(np.float32)
INPUTS = np.concatenate([X, NANS])


def arm64_maximum(a, b):
    """NumPy's maximum on ARM64 (IEEE 754-2019): +0.0 beats -0.0."""
    both_zero = (np.asarray(a) == 0) & (np.asarray(b) == 0)
    return np.where(both_zero, np.where(np.signbit(a) & np.signbit(b), -0.0, 0.0), NUMPY_MAXIMUM(a, b))


def arm64_minimum(a, b):
    """NumPy's minimum on ARM64 (IEEE 754-2019): -0.0 beats +0.0."""
    both_zero = (np.asarray(a) == 0) & (np.asarray(b) == 0)
    return np.where(both_zero, np.where(np.signbit(a) | np.signbit(b), -0.0, 0.0), NUMPY_MINIMUM(a, b))


def scalar_tanh(x):
    """NumPy's tanh without its vectorised path: a NaN comes back as it went in."""
    x = np.asarray(x)
    return np.where(np.isnan(x), x, NUMPY_TANH(x))


def every_activation() -> list[activations.Activation]:
    """Each activation, with DirectMLX's defaults where it has them."""
    required = {"linear": (0.5, 0.25), "parametric_softplus": (0.5, 0.25)}
    return [cls(*required.get(name, ())) for name, cls in activations.ACTIVATIONS.items()]


def floats_from_bits(words: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(words).view(np.float32)


def bits(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values).view(f"u{values.dtype.itemsize}")


@pytest.mark.parametrize("activation", every_activation(), ids=lambda a: type(a).__name__)
def test_the_reference_is_the_same_under_arm64_and_scalar_numpy(activation, monkeypatch):
    here = activation.apply(INPUTS)
    with monkeypatch.context() as patched:
        patched.setattr(np, "maximum", arm64_maximum)
        patched.setattr(np, "minimum", arm64_minimum)
        patched.setattr(np, "tanh", scalar_tanh)
        elsewhere = activation.apply(INPUTS)
    np.testing.assert_array_equal(bits(elsewhere), bits(here))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("activation", every_activation(), ids=lambda a: type(a).__name__)
def test_kernels_give_the_reference_bits_for_signed_zeros_and_nan_payloads(level, activation):
    want = activation.apply(INPUTS).astype(np.float32)
    got = np.empty_like(INPUTS)
    operands = {"a": INPUTS, "b": np.full_like(INPUTS, -0.0)}  # x + -0.0 is x, zeros' signs included
    _core.set_level(level)
    try:
        kernels.add(ops.ElementWiseAdd1(fused_activation=activation), operands, got, False)
    finally:
        _core.set_level(_core.detected_level())
    np.testing.assert_array_equal(bits(got), bits(want))


def test_two_nans_add_to_the_first_ones_nan_quieted():
    """NumPy 1.24 and NumPy on ARM64 return b's NaN for a + b, NumPy 2 on x86-64 a's: dmlq says a's."""
    # 19 elements: NumPy's vector loops and their scalar tails pick differently (NumPy 1.24).
    a = floats_from_bits(np.tile(np.uint32([0xFFC00000, 0x7FC00001, 0xFF800001, 0x3F800000]), 5)[:19])
    b = floats_from_bits(np.tile(np.uint32([0x7FC00000, 0xFFC00002, 0x7FC00003, 0x7FC00004]), 5)[:19])
    want = np.tile(np.uint32([0xFFC00000, 0x7FC00001, 0xFFC00001, 0x7FC00004]), 5)[:19]
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(bits(reference.add(a, b, np.float32)), want)
    for level in LEVELS:
        got = np.empty_like(a)
        _core.set_level(level)
        try:
            kernels.add(None, {"a": a, "b": b}, got, False)
        finally:
            _core.set_level(_core.detected_level())
        np.testing.assert_array_equal(bits(got), want, err_msg=level)
