"""The quantized add's division-free route gives the division's bits, and division where it would not.

With per-tensor parameters an output depends on its (a, b) pair alone, so the 65,536 pairs cover
every input. Each test runs at every instruction-set level this CPU offers; the route each call
takes is visible through ``_core.quantized_add_route`` (same arguments as ``_core.quantized_add``).
Each test starts with no verdict cached (``_core.forget_quantized_add_verdicts``), so the routes
it sees do not depend on the tests before it.
"""

from __future__ import annotations

import numpy as np
import pytest

from dmlq import _core, reference
from dmlq.kernels import available_levels

U8, I8 = np.uint8, np.int8
TYPES = [(a, b, out) for a in (U8, I8) for b in (U8, I8) for out in (U8, I8)]
NICE_SCALES = [
    (0.02, 0.03, 0.04), (0.02, 0.02, 0.04), (0.1, 0.05, 0.3), (0.003, 0.7, 0.01), (1.0, 1.0, 1.0),
    (0.5, 0.25, 3.0), (255.0, 1.0, 0.0078125),
    (1e-30, 3e-31, 7e-31), (1e-38, 2e-38, 3e-38), (4e30, 1e30, 2e30),  # tiny (subnormal sums) and huge
]  # fmt: skip
RANDOM_SCALES = [
    tuple(float(s) for s in 10.0 ** np.random.default_rng(seed).uniform(-4, 2, 3)) for seed in range(8)
]
# Near ties: division and a product by the reciprocal differ on many pairs (the corrected route's work).
NEAR_TIE_SCALES = [(0.02, 0.03, 0.04), (0.02, 0.02, 0.04), (0.1, 0.05, 0.3)]
# NaN or infinite scales and products, a zero or subnormal output scale, quotients beyond int32.
NON_FINITE_SCALES = [
    (float("nan"), 0.02, 0.04), (0.02, float("inf"), 0.04), (0.02, 0.03, 0.0), (0.02, 0.03, float("nan")),
    (0.02, 0.03, float("inf")), (0.02, 0.03, -0.04), (1e30, 1e30, 1e-8), (3e38, 0.03, 0.04),
    (0.02, 0.03, 1e-39), (1e-45, 0.03, 0.04),
]  # fmt: skip
EXTREMES = {U8: (0, 255), I8: (-128, 127)}
ROUTES = ("divide", "verified", "multiply")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reference overflows on purpose


@pytest.fixture(autouse=True)
def no_verdicts():
    _core.forget_quantized_add_verdicts()


def all_pairs(a_type, b_type) -> tuple[np.ndarray, np.ndarray]:
    """Every (a, b) pair of the two byte types once, a in the high byte of the index."""
    index = np.arange(1 << 16)
    return (index >> 8).astype(U8).view(a_type), (index & 0xFF).astype(U8).view(b_type)


def zero_points(a_type, b_type, out_type) -> tuple[int, int, int]:
    """Zero points off the centre of each type, so that the sums and the outputs both saturate."""
    return (-3 if a_type == I8 else 131), (5 if b_type == I8 else 120), (-7 if out_type == I8 else 99)


def expected(a, b, out_type, scales, zeros, reciprocal) -> np.ndarray:
    """The reference's outputs for per-tensor parameters (scalars)."""
    (a_scale, b_scale, out_scale), (a_zero, b_zero, out_zero) = scales, zeros
    return reference.quantized_linear_add(
        a, a_scale, np.array(a_zero), b, b_scale, np.array(b_zero), out_scale, np.array(out_zero), out_type,
        reciprocal_division=reciprocal,
    )  # fmt: skip


def core_arguments(a, b, out, scales, zeros, reciprocal) -> tuple:
    (a_scale, b_scale, out_scale), (a_zero, b_zero, out_zero) = scales, zeros
    return a, b, out, a_scale, a_zero, b_scale, b_zero, out_scale, out_zero, reciprocal


def computed(a, b, out_type, scales, zeros, reciprocal) -> tuple[np.ndarray, str]:
    """dmlq's outputs and the route that computed them."""
    out = np.empty(a.shape, out_type)
    arguments = core_arguments(a, b, out, scales, zeros, reciprocal)
    route = _core.quantized_add_route(*arguments)
    _core.quantized_add(*arguments)
    return out, route


@pytest.mark.parametrize("scales", NICE_SCALES + RANDOM_SCALES, ids=str)
def test_every_pair_equals_the_division_reference(level, scales):
    for a_type, b_type, out_type in TYPES:
        a, b = all_pairs(a_type, b_type)
        zeros = zero_points(a_type, b_type, out_type)
        for reciprocal in (False, True):
            got, route = computed(a, b, out_type, scales, zeros, reciprocal)
            assert route == "multiply" if reciprocal else route in ("corrected", "divide")
            want = expected(a, b, out_type, scales, zeros, reciprocal)
            mismatches = np.flatnonzero(got != want)
            assert mismatches.size == 0, (a_type, b_type, out_type, reciprocal, route, mismatches[:5])


def division_free(level: str) -> bool:
    """Whether a level's kernels have the division-free route (every SIMD level does)."""
    return level != "portable"


@pytest.mark.parametrize("scales", [(0.02, 0.03, 0.04), (0.1, 0.05, 0.3), (0.003, 0.7, 0.01)], ids=str)
def test_simple_scale_ratios_take_the_corrected_route_on_simd_levels(level, scales):
    a, b = all_pairs(U8, U8)
    _, route = computed(a, b, U8, scales, (128, 128, 128), False)
    assert route == ("corrected" if division_free(level) else "divide")


def test_portable_code_divides():
    _core.set_level("portable")
    try:
        a, b = all_pairs(U8, U8)
        _, route = computed(a, b, U8, (0.02, 0.03, 0.04), (128, 128, 128), False)
    finally:
        _core.set_level(_core.detected_level())
    assert route == "divide"


@pytest.mark.parametrize("out_type", [U8, I8])
def test_a_failed_verification_divides_and_still_matches(level, out_type):
    # Sums overflow to infinity, which divides to a saturated output; the SIMD kernels decline
    # such scales (dmlq_qadd_simd_parameters), so there is no division-free route to verify.
    scales, zeros = (3e38, 3e38, 1.0), zero_points(U8, U8, out_type)
    a, b = all_pairs(U8, U8)
    got, route = computed(a, b, out_type, scales, zeros, False)
    assert route == "divide"
    np.testing.assert_array_equal(got, expected(a, b, out_type, scales, zeros, False))


def test_small_calls_never_verify_but_use_a_cached_verdict(level):
    scales, zeros = (0.021, 0.033, 0.047), (128, 128, 128)
    a, b = all_pairs(U8, U8)
    small = (a[:16], b[:16])
    assert computed(*small, U8, scales, zeros, False)[1] == "divide"
    verdict = computed(a, b, U8, scales, zeros, False)[1]
    assert computed(*small, U8, scales, zeros, False)[1] == verdict
    assert verdict == ("corrected" if division_free(level) else "divide")


def test_no_level_sees_a_verdict_another_level_found():
    # avx512 and avx512_vnni run the same row table; each still verifies for itself.
    scales, zeros = (0.019, 0.029, 0.043), (128, 128, 128)
    a, b = all_pairs(U8, U8)
    small = (a[:16], b[:16])
    try:
        for verified in available_levels():
            _core.set_level(verified)
            computed(a, b, U8, scales, zeros, False)
            for unverified in available_levels()[available_levels().index(verified) + 1 :]:
                _core.set_level(unverified)
                assert computed(*small, U8, scales, zeros, False)[1] == "divide", (verified, unverified)
                _core.set_level(verified)
    finally:
        _core.set_level(_core.detected_level())


@pytest.fixture(scope="module")
def sixteen_million() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Misaligned operands of 16M + 7 elements (a tail shorter than any vector) and their outputs."""
    rng = np.random.default_rng(12)
    n = 16 * 1024 * 1024 + 7
    a = rng.integers(0, 256, n + 1, dtype=U8)[1:]
    b = rng.integers(-128, 128, n + 3, dtype=I8)[3:]
    return a, b, expected(a, b, U8, NEAR_TIE_SCALES[0], (128, 3, 128), False)


def test_sixteen_million_elements_equal_the_reference(level, sixteen_million):
    # Split among threads, an output large enough for stores that bypass the caches, misaligned.
    a, b, want = sixteen_million
    out = np.empty(a.size + 5, U8)[5:]
    arguments = core_arguments(a, b, out, NEAR_TIE_SCALES[0], (128, 3, 128), False)
    route = _core.quantized_add_route(*arguments)
    assert route == ("corrected" if division_free(level) else "divide")
    _core.quantized_add(*arguments)
    np.testing.assert_array_equal(out, want)


def by_route(a, b, out, scales, zeros, route) -> str:
    """Computes into ``out`` by ``route`` and returns the route taken: "divide" (calls below 65,536
    elements, no verdict cached), "verified" (one call; the verdict decides) or "multiply"."""
    if route == "divide":
        _core.forget_quantized_add_verdicts()
        taken = set()
        for part in range(0, a.size, 1 << 15):
            piece = slice(part, part + (1 << 15))
            arguments = core_arguments(a[piece], b[piece], out[piece], scales, zeros, False)
            taken.add(_core.quantized_add_route(*arguments))
            _core.quantized_add(*arguments)
        return taken.pop() if len(taken) == 1 else str(taken)
    arguments = core_arguments(a, b, out, scales, zeros, route == "multiply")
    taken = _core.quantized_add_route(*arguments)
    _core.quantized_add(*arguments)
    return taken


def check_every_route(a, b, out_type, scales, zeros, in_place=None) -> None:
    """Every route's outputs equal the reference's, out a new array or (in_place "a"/"b") that operand."""
    for route in ROUTES:
        want = expected(a, b, out_type, scales, zeros, route == "multiply")
        a_copy, b_copy = a.copy(), b.copy()
        out = {"a": a_copy, "b": b_copy}.get(in_place, np.empty(a.shape, out_type))
        taken = by_route(a_copy, b_copy, out, scales, zeros, route)
        assert taken in (("corrected", "divide") if route == "verified" else (route,))
        mismatches = np.flatnonzero(out != want)
        assert mismatches.size == 0, (route, taken, a.dtype, b.dtype, out_type, scales, zeros, mismatches[:5])


@pytest.mark.parametrize("scales", NEAR_TIE_SCALES + RANDOM_SCALES[:2], ids=str)
@pytest.mark.parametrize("extremes", [(0, 0, 0), (1, 1, 1), (0, 1, 0), (1, 0, 1)], ids=str)
def test_every_pair_and_route_at_extreme_zero_points(level, scales, extremes):
    for a_type, b_type, out_type in TYPES:
        zeros = tuple(int(EXTREMES[t][e]) for t, e in zip((a_type, b_type, out_type), extremes))
        check_every_route(*all_pairs(a_type, b_type), out_type, scales, zeros)


@pytest.mark.parametrize("scales", NON_FINITE_SCALES, ids=str)
def test_every_pair_and_route_with_non_finite_values(level, scales):
    for a_type, b_type, out_type in TYPES:
        check_every_route(*all_pairs(a_type, b_type), out_type, scales, zero_points(a_type, b_type, out_type))


@pytest.mark.parametrize("in_place", ["a", "b"])
def test_every_pair_and_route_in_place(level, in_place):
    a, b = all_pairs(U8, U8)
    check_every_route(a, b, U8, NEAR_TIE_SCALES[0], (128, 3, 120), in_place)


@pytest.mark.parametrize("offsets", [(0, 0, 0), (1, 3, 1), (5, 0, 17), (0, 7, 63)], ids=str)
@pytest.mark.parametrize("route", ROUTES)
def test_every_length_and_alignment(level, offsets, route):
    # Lengths across heads, whole vectors and tails of each kernel's step (16, 32, 64 elements), at
    # offsets from the arrays' start for a, b and out. Calls this short never verify: the verified
    # route is the verdict a call over every pair left.
    scales, zeros = NEAR_TIE_SCALES[0], (100, 140, 120)
    rng = np.random.default_rng(sum(offsets))
    a_all, b_all = (rng.integers(0, 256, 300, dtype=U8) for _ in range(2))
    if route == "verified":
        _core.quantized_add(*core_arguments(*all_pairs(U8, U8), np.empty(1 << 16, U8), scales, zeros, False))
    taken = {"verified": "corrected" if division_free(level) else "divide"}.get(route, route)
    a_offset, b_offset, out_offset = offsets
    for n in range(0, 200):
        a, b = a_all[a_offset : a_offset + n], b_all[b_offset : b_offset + n]
        out = np.zeros(out_offset + n + 64, U8)[out_offset:]
        arguments = core_arguments(a, b, out[:n], scales, zeros, route == "multiply")
        assert _core.quantized_add_route(*arguments) == taken
        _core.quantized_add(*arguments)
        want = expected(a, b, U8, scales, zeros, route == "multiply")
        np.testing.assert_array_equal(out[:n], want, err_msg=str(n))
        assert not out[n:].any(), n  # nothing written past the end
