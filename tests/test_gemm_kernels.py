"""The float GEMM's compiled kernel (``_core.gemm``) at every CPU level and thread count, bit for bit
against :func:`dmlq.reference.gemm` (each output's sum over k in order, one float32 fused multiply-add
per term); and the order itself on sums whose value tells it, independently of the reference.

Shapes cover the tiles' and blocks' edges (the widest tile is 14 x 32, K blocks hold 256 terms),
A and B read transposed and in place, batches broadcast through zero strides, every layout of C, and
float16. NaN results compare as NaN: which NaN a sum gives is not promised (CPUs differ).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dmlq import _core, activations, reference
from dmlq.reference.gemm import fma


def run(a, b, c, out, *, trans_a=False, trans_b=False, alpha=1.0, beta=1.0, activation=None):
    """``_core.gemm`` as dmlq.kernels calls it; returns ``out``."""
    parameters = [] if activation is None else [float(p) for p in activation.parameters()]
    kind = 0 if activation is None else activation.TYPE_VALUE
    _core.gemm(a, b, c, out, trans_a, trans_b, alpha, beta, kind, tuple(parameters + [0.0, 0.0])[:2])
    return out


def expected(a, b, c, dtype, **keywords) -> np.ndarray:
    activation = keywords.pop("activation", None)
    return reference.gemm(a, b, c, dtype, fused_activation=activation, **keywords)


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(got)
    assert np.array_equal(nan, np.isnan(want))
    assert got[~nan].tobytes() == want[~nan].tobytes()


def operands(rng, batch, m, k, n, dtype, trans_a=False, trans_b=False, spread=False):
    """Random A and B; ``spread``: magnitudes over many binades, so that rounding depends on order."""

    def values(shape):
        x = rng.standard_normal(shape)
        if spread:
            x = x * 2.0 ** rng.integers(-20, 21, shape)
        return x.astype(dtype)

    a = values((*batch, k, m) if trans_a else (*batch, m, k))
    b = values((*batch, n, k) if trans_b else (*batch, k, n))
    return a, b


@pytest.fixture(params=[1, 2, 3], ids=["1-thread", "2-threads", "3-threads"])
def threads(request):
    _core.set_num_threads(request.param)  # conftest's fresh_state restores the default
    return request.param


SHAPES = [  # (batch, M, K, N)
    ((), 1, 1, 1),
    ((), 1, 300, 33),      # a vector: B read in place, a narrow last panel
    ((), 7, 5, 16),
    ((), 14, 257, 32),     # one whole tile, K past one block
    ((), 15, 64, 31),      # a tile of one row more, a panel of one column fewer
    ((), 29, 520, 65),     # B packed (more than two A panels), three K blocks
    ((), 70, 40, 100),
    ((3,), 6, 17, 17),
    ((2, 2), 9, 33, 40),
]  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_every_level_gives_the_reference_bits(level, shape, trans_a, trans_b, dtype, rng):
    batch, m, k, n = shape
    a, b = operands(rng, batch, m, k, n, dtype, trans_a, trans_b, spread=dtype == np.float32)
    out = np.empty((*batch, m, n), dtype)
    run(a, b, None, out, trans_a=trans_a, trans_b=trans_b)
    assert_same(out, expected(a, b, None, dtype, trans_a=trans_a, trans_b=trans_b))


@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("trans_b", [False, True])
def test_a_few_rows_against_every_width(level, m, trans_b, rng):
    """A few rows run on panels of up to 128 columns (B read in place, or packed), the last vector of each
    masked, over K blocks."""
    for n in (1, 7, 15, 16, 17, 33, 47, 64, 100, 128, 129, 200):
        a, b = operands(rng, (), m, 37 if n % 2 else 300, n, np.float32, trans_b=trans_b, spread=True)
        out = np.full((m, n + 1), np.nan, np.float32)[:, :n]  # a column beyond each row, left alone
        assert_same(run(a, b, None, out, trans_b=trans_b), expected(a, b, None, np.float32, trans_b=trans_b))
        assert np.all(np.isnan(out.base[:, n]))


def test_b_read_in_place_with_its_rows_backwards(level, rng):
    """A row-major B is read where it lies by a few rows (few_rows) and by up to two tiles of rows."""
    for m in (1, 3, 8, 20):
        a = rng.standard_normal((m, 300)).astype(np.float32)
        b = rng.standard_normal((300, 45)).astype(np.float32)[::-1]
        assert_same(run(a, b, None, np.empty((m, 45), np.float32)), expected(a, b, None, np.float32))


def broadcast_c(c_layout: str, rng, shape, dtype):
    batch, (m, n) = shape[:-2], shape[-2:]
    sizes = {"full": shape, "bias": (n,), "rows": (m, 1), "scalar": (), "batch": (m, n)}[c_layout]
    return np.broadcast_to(rng.standard_normal(sizes).astype(dtype), (*batch, m, n))


@pytest.mark.parametrize("c_layout", ["full", "bias", "rows", "scalar", "batch"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("alpha, beta", [(1.0, 1.0), (0.75, -1.5), (1.0, 0.0), (-2.0, 1.0)])
def test_alpha_beta_and_every_layout_of_c(level, c_layout, dtype, alpha, beta, rng):
    a, b = operands(rng, (2,), 20, 70, 40, dtype)
    c = broadcast_c(c_layout, rng, (2, 20, 40), dtype)
    out = run(a, b, c, np.empty((2, 20, 40), dtype), alpha=alpha, beta=beta)
    assert_same(out, expected(a, b, c, dtype, alpha=alpha, beta=beta))


ACTIVATIONS = [
    activations.Relu(), activations.LeakyRelu(alpha=0.1), activations.Gelu(), activations.Sigmoid(),
    activations.Tanh(), activations.Elu(alpha=0.5), activations.HardSigmoid(alpha=0.3, beta=0.4),
    activations.Shrink(bias=0.1, threshold=0.5), activations.Identity(),
]  # fmt: skip


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: a.NAME)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_fused_activations(level, activation, dtype, rng):
    a, b = operands(rng, (), 17, 30, 45, dtype)
    c = np.broadcast_to(rng.standard_normal(45).astype(dtype), (17, 45))
    out = run(a, b, c, np.empty((17, 45), dtype), alpha=0.5, activation=activation)
    assert_same(out, expected(a, b, c, dtype, alpha=0.5, activation=activation))


@pytest.mark.parametrize("shape", [((), 3, 600, 200), ((), 100, 300, 90), ((4,), 30, 40, 50)], ids=str)
def test_the_thread_count_changes_no_bit(level, threads, shape, rng):
    batch, m, k, n = shape
    a, b = operands(rng, batch, m, k, n, np.float32, spread=True)
    c = rng.standard_normal(n).astype(np.float32)
    out = run(a, b, np.broadcast_to(c, (*batch, m, n)), np.empty((*batch, m, n), np.float32), beta=0.5)
    assert_same(out, expected(a, b, c, np.float32, beta=0.5))


def test_batches_sharing_b_and_batches_of_their_own(level, rng):
    a = rng.standard_normal((3, 4, 50, 64)).astype(np.float32)
    b = rng.standard_normal((64, 70)).astype(np.float32)
    shared = np.broadcast_to(b, (3, 4, 64, 70))  # zero batch strides: one problem of 600 rows
    own = rng.standard_normal((3, 4, 64, 70)).astype(np.float32)
    one_row = a[:, :, :1, :]  # matrices of one row: the batches' step is the row stride
    for a_, b_ in ((a, shared), (a, own), (one_row, shared)):
        got = run(a_, b_, None, np.empty((3, 4, a_.shape[-2], 70), np.float32))
        assert_same(got, expected(a_, b_, None, np.float32))


@pytest.mark.parametrize("where", ["a", "b", "c", "out"])
@pytest.mark.parametrize(
    "step", [(2, 3), (-1, 1), (1, -2)], ids=["spaced", "rows-reversed", "columns-reversed"]
)
def test_strided_operands_and_output(level, where, step, rng):
    base = {"a": (30, 40), "b": (40, 50), "c": (30, 50), "out": (30, 50)}
    rows, columns = step
    spaced = {
        name: rng.standard_normal((abs(rows) * s[0], abs(columns) * s[1])).astype(np.float32)[
            ::rows, ::columns
        ]
        for name, s in base.items()
    }
    arrays = {name: x if name == where else np.ascontiguousarray(x) for name, x in spaced.items()}
    out = run(arrays["a"], arrays["b"], arrays["c"], arrays["out"], beta=2.0)
    assert_same(out, expected(arrays["a"], arrays["b"], arrays["c"], np.float32, beta=2.0))


# -- the order, independently of the reference ---------------------------------------------------------


def test_each_sum_runs_over_k_in_order(level, threads):
    """1 + 2**-24 is a tie that rounds to even (1): added one at a time after the 1, 599 such terms leave 1
    exactly (across three K blocks); any other order, or a sum split in parts, gives more."""
    a = np.full((16, 600), 2.0**-24, np.float32)
    a[:, 0] = 1.0
    b = np.ones((600, 40), np.float32)
    assert np.array_equal(run(a, b, None, np.empty((16, 40), np.float32)), np.ones((16, 40), np.float32))
    a_late = np.roll(a, -1, axis=1)  # the 1 last: the small terms add up first
    late = run(a_late, b, None, np.empty((16, 40), np.float32))
    assert np.all(late == np.float32(1 + 599 * 2.0**-24))


def test_each_term_is_one_fused_multiply_add(level):
    """fma(float32(1/3), 3, -1) is 2**-25 exactly; a rounded product first would give 0."""
    a = np.float32([[1.0, 1 / 3]])
    b = np.float32([[-1.0] * 20, [3.0] * 20])
    assert np.all(run(a, b, None, np.empty((1, 20), np.float32)) == np.float32(2.0**-25))


def test_float16_is_widened_exactly_and_rounded_once_at_the_end(level):
    """Sums kept in float16 would overflow at 65504 + 16 and lose 2048 + 1 (a tie, to 2048) twice; in
    float32 they are 65504 and 2050, both float16 values."""
    a = np.float16([[65504, 16, -16], [2048, 1, 1]])
    b = np.ones((3, 8), np.float16)
    out = run(a, b, None, np.empty((2, 8), np.float16))
    assert np.all(out == np.float16([[65504], [2050]]))


def float32_nearest(value: Fraction) -> float:
    """``value`` rounded to the nearest float32, halves to even, infinity beyond float32's range: exactly,
    in rational arithmetic (0 for 0)."""
    magnitude = abs(value)
    if magnitude == 0:
        return 0.0
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()  # or one less
    if Fraction(2) ** exponent > magnitude:
        exponent -= 1
    quantum = Fraction(2) ** (max(exponent, -126) - 23)
    rounded = round(magnitude / quantum) * quantum  # round() of a Fraction: halves to even
    return float("inf" if rounded >= 2**128 else rounded) * (1 if value > 0 else -1)


def test_each_term_is_rounded_once_from_its_exact_value(level, rng):
    """fma(x, y, z) of the reference and of the kernel against the exact value rounded once: random
    terms over many binades, subnormal results, and sums within 2**-80 of a float32 tie, which a sum
    rounded to float64 first would break the wrong way."""
    count = 400
    x = (rng.standard_normal(count) * 2.0 ** rng.integers(-62, 62, count)).astype(np.float32)
    y = (rng.standard_normal(count) * 2.0 ** rng.integers(-62, 62, count)).astype(np.float32)
    z = (rng.standard_normal(count) * 2.0 ** rng.integers(-140, 120, count)).astype(np.float32)
    x[:4], y[:4] = np.float32(1 + 2.0**-12), np.float32(1 + 2.0**-12)  # x * y = 1 + 2**-11 + 2**-24: a tie
    z[:4] = np.float32([2.0**-80, -(2.0**-80), 2.0**-140, -(2.0**-140)])
    x[4:8] = np.float32([2.0**-70, 2.0**-70, 2.0**-75, 2.0**-75])  # subnormal sums, the last two ties
    y[4:8] = np.float32([(1 + 2.0**-20) * 2.0**-70, (1 + 2.0**-20) * 2.0**-70, 2.0**-75, 3 * 2.0**-75])
    z[4:8] = np.float32([0, 2.0**-149, 0, 0])
    want = np.float32([float32_nearest(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r)))
                       for p, q, r in zip(x, y, z)])  # fmt: skip
    assert fma(x, y, z).tobytes() == want.tobytes()
    a = np.stack([z, x], axis=1)  # row i: [z_i, x_i]; column i of b: [1, y_i]; out[i, i] = fma(x_i, y_i, z_i)
    b = np.stack([np.ones(count, np.float32), y])
    assert np.diagonal(run(a, b, None, np.empty((count, count), np.float32))).tobytes() == want.tobytes()


def test_float16_outputs_round_ties_to_even(level):
    """float32 results that are float16 ties, normal, subnormal and at the overflow threshold, each rounded
    once (half to even), in tiles of every width: sums of two float16 values, and products of two."""
    sums = np.float16([[2048, 1], [2048, 3], [-2048, -1], [65504, 16]])
    products = np.float16([[2.0**-14], [3 * 2.0**-14]])  # times 2**-11: 2**-25 and 3 * 2**-25, ties of 2**-24
    for n in (1, 17, 40):
        got = run(sums, np.ones((2, n), np.float16), None, np.empty((4, n), np.float16))
        assert np.array_equal(got, np.repeat(np.float16([[2048], [2052], [-2048], [np.inf]]), n, axis=1))
        got = run(products, np.full((1, n), 2.0**-11, np.float16), None, np.empty((2, n), np.float16))
        assert got.tobytes() == np.repeat(np.float16([[0], [2.0**-23]]), n, axis=1).tobytes()


# -- the binding's checks ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, message",
    [
        ({"b": np.zeros((4, 5), np.float32)}, "b must continue a's K"),
        ({"out": np.zeros((3, 4), np.float32)}, "out must end in [M, N]"),
        ({"b": np.zeros((2, 5), np.float16)}, "one dtype"),
        ({"c": np.zeros((1, 5), np.float32)}, "c must have out's shape"),
        ({"a": np.zeros((1, 3, 2), np.float32)}, "same 2 to 4 dimensions"),
        ({"a": np.zeros((3, 0), np.float32), "b": np.zeros((0, 5), np.float32)}, "at least 1"),
        ({"out": np.zeros((3, 5), np.float64)}, "out must be float32 or float16"),
    ],
)
def test_refusals(change, message):
    arguments = {"a": np.zeros((3, 2), np.float32), "b": np.zeros((2, 5), np.float32), "c": None,
                 "out": np.zeros((3, 5), np.float32)} | change  # fmt: skip
    with pytest.raises(ValueError, match="gemm: .*" + message.replace("[", r"\[").replace("]", r"\]")):
        run(**arguments)


def test_an_output_overlapping_an_input_is_a_buffer_error():
    a = np.ones((4, 4), np.float32)
    with pytest.raises(BufferError):
        run(a, a, None, a)
