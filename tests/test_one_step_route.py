"""The one-step C calls only decline (API.md: "Every route ... gives the same result or the same error").

Hypothesis draws arguments for each NumPy-layer function across every NumPy dtype (booleans, every
integer width, float16/32/64, 4-bit, byte-swapped), Python scalars and lists, NumPy scalars, 0-d,
empty and length-1 shapes, negative, zero and padded strides, misaligned and read-only arrays, an
ndarray subclass, and ``out=`` (fresh in any layout, read-only, of a wrong dtype or shape, an input
itself, or overlapping one). Each call runs twice on fresh copies, once with the one-step route and
once with it off (:func:`dmlq.numpy_api.one_step.off`): the result (dtype, shape, bits, whether it is
``out``) or the exception (type and message) must be the same, and so must every array argument
afterwards (what was written into ``out``, and that no input changed differently).

``DMLQ_ROUTE_EXAMPLES`` sets the examples per function (CI: 300); run a big sweep once with e.g.
``DMLQ_ROUTE_EXAMPLES=20000 python -m pytest tests/test_one_step_route.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import dmlq
from dmlq.numpy_api import one_step

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
EXAMPLES = int(os.environ.get("DMLQ_ROUTE_EXAMPLES", "300"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip

INTEGERS = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
FLOATS = ["float16", "float32", "float64"]
FOUR_BIT = ["int4", "uint4"]
LAYOUTS = ["c", "c", "c", "fortran", "reversed", "reversed length-1", "strided", "broadcast", "misaligned",
           "swapped", "subclass"]  # fmt: skip


class Subclass(np.ndarray):
    """An ndarray subclass (NumPy's own, such as np.matrix, are deprecated or change indexing)."""


def _dtype(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name)) if name in FOUR_BIT else np.dtype(name)


def _values(dtype: np.dtype, shape: tuple[int, ...], seed: int, role: str, wild: bool) -> np.ndarray:
    """Values of ``dtype`` for an argument's ``role`` ("data", "scale" or "zero"): typical ones (scales
    finite and non-zero, zero points in both 8-bit ranges), or ``wild`` ones (specials, out of range)."""
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind == "f":
        values = rng.uniform(0.01, 2.0, shape) if role == "scale" else rng.standard_normal(shape) * 40
        if (wild or role == "data") and seed % 3 == 0 and values.size:  # ties, NaN, infinities, -0, ...
            specials = [0.5, 2.5, np.nan, np.inf, -np.inf, -0.0, 1e39, 1e-46, 0.0, -3.0, 65520.0]
            values.reshape(-1)[: min(values.size, len(specials))] = specials[: values.size]
        return values.astype(dtype)
    four_bit = dtype in map(_dtype, FOUR_BIT)
    low, high = (-8, 15) if four_bit else (-300, 300) if wild else (0, 127) if role != "data" else (-128, 255)
    info = ml_dtypes.iinfo(dtype)
    return rng.integers(max(low, int(info.min)), min(high, int(info.max)), shape, endpoint=True).astype(dtype)


@dataclass(frozen=True)
class Array:
    """A NumPy array (or scalar) argument, built afresh for each route."""

    dtype: str
    shape: tuple[int, ...]
    seed: int
    role: str
    wild: bool = False
    layout: str = "c"
    scalar: bool = False
    read_only: bool = False

    def build(self) -> object:
        dtype = _dtype(self.dtype)
        values = _values(dtype, self.shape, self.seed, self.role, self.wild)
        if self.scalar:
            return values[()]
        array = _laid_out(values, self.layout)
        if self.read_only and array.flags.writeable:
            array.flags.writeable = False
        return array


def _laid_out(values: np.ndarray, layout: str) -> np.ndarray:
    """``values`` in a fresh array of ``layout``."""
    reverse_all = tuple(slice(None, None, -1) for _ in values.shape)
    reverse_ones = tuple(slice(None, None, -1) if n == 1 else slice(None) for n in values.shape)
    if layout == "fortran" and values.ndim:  # (NumPy makes a 0-d array 1-D in Fortran order)
        return np.asfortranarray(values)
    if layout in ("reversed", "reversed length-1") and values.ndim:
        reverse = reverse_all if layout == "reversed" else reverse_ones
        return values[reverse].copy(order="C")[reverse]  # a fresh array, every reversed stride negative
    if layout == "strided" and values.ndim:
        base = np.zeros((*values.shape[:-1], values.shape[-1] * 2), values.dtype)
        base[..., ::2] = values
        return base[..., ::2]
    if layout == "broadcast" and values.ndim and values.size:
        return np.broadcast_to(values[..., :1], values.shape)  # zero strides, read-only
    if layout == "misaligned" and values.dtype.itemsize > 1:
        memory = np.zeros(values.nbytes + 1, np.uint8)[1:]
        array = memory.view(values.dtype).reshape(values.shape)
        array[...] = values
        return array
    if layout == "swapped" and values.dtype.itemsize > 1:
        return values.astype(values.dtype.newbyteorder())
    if layout == "subclass":
        return np.array(values).view(Subclass)
    return np.array(values)


@dataclass(frozen=True)
class Python:
    """A Python scalar, or a list of ``shape`` (nested lists of Python numbers)."""

    value: object

    def build(self) -> object:
        return self.value


@dataclass(frozen=True)
class Packed:
    """A :class:`dmlq.PackedMatrix` of B and its quantization (which must be valid)."""

    b: Array | Python
    b_scale: object
    b_zero_point: object

    def build(self) -> object:
        return dmlq.pack_matrix_multiply_b(self.b.build(), _build(self.b_scale), _build(self.b_zero_point))


@dataclass(frozen=True)
class Out:
    """``out=``: None; an array for the expected result's shape and dtype in a layout (or of a wrong
    dtype or shape, read-only); an argument itself; a view overlapping an argument; a list."""

    kind: str
    layout: str = "c"
    read_only: bool = False
    index: int = 0

    def build(self, shape: tuple[int, ...], dtype: np.dtype, arguments: list[object]) -> object:
        arrays = [a for a in arguments if isinstance(a, np.ndarray)]
        if self.kind == "none":
            return None
        if self.kind == "list":
            return np.zeros(shape, dtype).tolist()
        if self.kind == "argument" and arrays:
            return arrays[self.index % len(arrays)]
        if self.kind == "overlap" and arrays:
            return _overlapping(arrays[self.index % len(arrays)], shape, dtype, self.index % 2)
        if self.kind == "wrong dtype":
            dtype = np.dtype(np.float64 if dtype != np.float64 else np.int8)
        if self.kind == "wrong shape":
            shape = (*shape, 2)
        if self.kind == "zero strides":  # writable, every element at one address
            return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, (0,) * len(shape))
        array = _laid_out(np.zeros(shape, dtype), self.layout if self.layout != "broadcast" else "c")
        if self.read_only:
            array.flags.writeable = False
        return array


def _overlapping(argument: np.ndarray, shape: tuple[int, ...], dtype: np.dtype, shift: int) -> object:
    """A writable view of ``shape`` and ``dtype`` over ``argument``'s memory (``shift`` elements on),
    or a fresh array where it has too few bytes or is not writable and contiguous."""
    count = int(np.prod(shape))
    nbytes = (count + shift) * dtype.itemsize
    usable = argument.flags.c_contiguous and argument.flags.writeable and argument.nbytes >= nbytes
    if not usable or argument.ctypes.data % dtype.alignment:
        return np.zeros(shape, dtype)
    memory = argument.reshape(-1).view(np.uint8)[:nbytes]
    return memory.view(dtype)[shift : shift + count].reshape(shape)


def _build(spec: object) -> object:
    return spec.build() if isinstance(spec, (Array, Python, Packed)) else spec


# -- strategies --------------------------------------------------------------------------------------
# Most arguments are typical (a likely dtype, mostly C order, valid values), so that most calls are
# valid and many take the one-step route; one in six is wild (any dtype, layout or value).


SIZES = [1, 1, 2, 3, 4, 5, 7, 16, 1, 2, 3, 0]


@st.composite
def shapes(draw, min_dims: int = 0, max_dims: int = 3) -> tuple[int, ...]:
    """Mostly 1 to 3 dimensions (0-d one time in eight), sizes mostly from 1 to 16, sometimes 0."""
    ndim = draw(st.integers(max(min_dims, 1), max_dims)) if min_dims or draw(st.integers(0, 7)) else 0
    return tuple(draw(st.sampled_from(SIZES)) for _ in range(ndim))


def _wild(draw, tame: bool) -> bool:
    return not tame and draw(st.integers(0, 5)) == 0


@st.composite
def arrays(draw, shape: tuple[int, ...], likely: list[str], role: str, tame: bool = False) -> Array:
    """An array of ``shape``: typical (a ``likely`` dtype, mostly C order), or (unless ``tame``) wild."""
    wild = _wild(draw, tame)
    dtype = draw(st.sampled_from(INTEGERS + FLOATS + likely if wild else likely))
    layout = draw(st.sampled_from(LAYOUTS)) if wild or draw(st.integers(0, 3)) == 0 else "c"
    scalar = shape == () and draw(st.booleans())
    read_only = wild and draw(st.booleans())
    return Array(dtype, shape, draw(st.integers(0, 2**16)), role, wild, layout, scalar, read_only)


@st.composite
def python_values(draw, shape: tuple[int, ...], role: str, tame: bool = False) -> Python:
    """Python numbers of ``shape`` (a scalar for ``()``): typical ones (ints for zero points and integer
    data, else floats), or (unless ``tame``) wild ones (also booleans, ints as scales, floats as zero
    points)."""
    wild = _wild(draw, tame)
    kinds = ["float", "int", "bool"] if wild else ["int"] if role in ("zero", "integers") else ["float"]
    kind = draw(st.sampled_from(kinds))
    dtype = np.dtype({"float": "float64", "int": "int64", "bool": "bool"}[kind])
    return Python(_values(dtype, shape, draw(st.integers(0, 2**16)), role, wild).tolist())


@st.composite
def operands(draw, shape: tuple[int, ...], likely: list[str], role: str, tame: bool = False) -> object:
    """A data, scale or zero point argument of ``shape``: mostly a NumPy array, else Python values."""
    if draw(st.integers(0, 7 if tame and role == "data" else 4)) == 0:
        integers = role == "data" and _dtype(likely[0]).kind != "f"
        return draw(python_values(shape, "integers" if integers else role, tame))
    return draw(arrays(shape, likely, role, tame))


@st.composite
def parameters(draw, data_shape: tuple[int, ...], likely: list[str], role: str, tame: bool = False) -> object:
    """A scale or zero point: mostly per-tensor (a Python number, a NumPy scalar, a one-element array
    of at most the data's dimensions), sometimes (unless ``tame``) of a shape that broadcasts, or not,
    against the data."""
    choice = draw(st.integers(0, 17 if tame else 19))
    if role == "zero" and choice < 3:
        return None
    if choice < 14:
        return draw(operands((), likely, role, tame))
    if choice < 18:
        return draw(operands((1,) * draw(st.integers(1, max(1, len(data_shape)))), likely, role, tame))
    per_row = tuple(n if d == 0 else 1 for d, n in enumerate(data_shape))
    return draw(operands(draw(st.sampled_from([per_row, data_shape, (2, 1), (3,)])), likely, role))


ZERO_POINT_DTYPES = ["uint8", "int8"]


OUT_KINDS = ["none"] * 6 + ["fresh"] * 4 + ["argument", "overlap", "wrong dtype", "wrong shape", "list",
                                            "zero strides"]  # fmt: skip


@st.composite
def outs(draw, tame: bool = False) -> Out:
    """``out=``: none, or (unless ``tame``, mostly) a valid one."""
    kind = draw(st.sampled_from(["none", "none", "fresh", "argument"] if tame else OUT_KINDS))
    layout = draw(st.sampled_from(LAYOUTS))
    return Out(kind, layout, not tame and draw(st.integers(0, 7)) == 0, draw(st.integers(0, 7)))


# -- running both routes --------------------------------------------------------------------------------


def _state(values: list[object]) -> tuple:
    """Every array among ``values`` as (dtype, shape, bytes): what a call left in them."""
    return tuple((v.dtype.str, v.shape, v.tobytes()) for v in values if isinstance(v, np.ndarray))


def _outcome(function: Callable[..., object], arguments: list[object], keywords: dict[str, object]) -> tuple:
    out = keywords.get("out")
    try:
        result = function(*arguments, **keywords)
    except Exception as error:  # noqa: BLE001 -- the exception itself is the outcome compared
        return "raised", type(error), str(error), _state([*arguments, out])
    if isinstance(result, dmlq.PackedMatrix):
        returned = (result.shape, result.dtype.str, result.packed_b.array.tobytes(), result.b_scale.tobytes(),
                    None if result.b_zero_point is None else result.b_zero_point.tobytes())  # fmt: skip
    else:
        returned = (type(result), result.dtype.str, result.shape, result.tobytes(), result is out)
    return "returned", returned, _state([*arguments, out])


@contextmanager
def _counted(taken: list[bool]) -> Iterator[None]:
    """The one-step calls, each noting in ``taken`` whether it took the call (returned a result)."""
    calls = {name: getattr(one_step, name) for name in ("quantize", "dequantize", "add", "quantized_add",
                                                        "matrix_multiply")}  # fmt: skip

    def counting(call: Callable[..., object]) -> Callable[..., object]:
        def counted(*arguments: object) -> object:
            result = call(*arguments)
            taken.append(result is not None)
            return result

        return counted

    for name, call in calls.items():
        setattr(one_step, name, counting(call))
    try:
        yield
    finally:
        for name, call in calls.items():
            setattr(one_step, name, call)


def _same_either_route(name: str, specs: list[object], keywords: dict[str, object], out: Out) -> None:
    """``dmlq.<name>`` gives the same outcome with the one-step route on and off."""
    function = getattr(dmlq, name)
    with one_step.off():
        plain = _outcome(function, [_build(s) for s in specs], keywords)
    shape, dtype = (2,), np.dtype(np.uint8)  # where the call fails: an out= of some shape and dtype
    if plain[0] == "returned" and name != "pack_matrix_multiply_b":
        shape, dtype = plain[1][2], np.dtype(plain[1][1])
    outcomes, taken = [], []
    for route in (_counted(taken), one_step.off()):
        arguments = [_build(s) for s in specs]
        given = {**keywords, "out": out.build(shape, dtype, arguments)} if out.kind != "none" else keywords
        with route:
            outcomes.append(_outcome(function, arguments, given))
    event(f"{name}: {outcomes[1][0]}, {'taken by the one-step call' if any(taken) else 'general path'}")
    assert outcomes[0] == outcomes[1]


# -- one test per function -------------------------------------------------------------------------------
# Two examples in three draw a common call (tame arguments of the dtypes, shapes and keywords the one-step
# calls take, in any layout), one any call.


def _common(data) -> bool:
    return data.draw(st.integers(0, 2)) > 0


def _keywords(data, common: bool, others: list[dict[str, object]]) -> dict[str, object]:
    return {} if common else data.draw(st.sampled_from([{}] * 8 + others))


@SETTINGS
@given(st.data())
def test_quantize_linear(data) -> None:
    common, shape = _common(data), data.draw(shapes())
    likely = ["float32", "int32"] if common else ["float32", "int32", "float16", "float64"]
    x = data.draw(operands(shape, likely, "data"))
    scale = data.draw(parameters(shape, ["float32", "float64"] if common else [*FLOATS], "scale"))
    zero_point = data.draw(
        parameters(shape, ZERO_POINT_DTYPES if common else ZERO_POINT_DTYPES + FOUR_BIT, "zero")
    )
    others = [{"dtype": "int8"}, {"dtype": np.uint8}, {"dtype": "int4"}, {"dtype": "int16"}, {"axis": 0},
              {"block_size": 1}]  # fmt: skip
    keywords = _keywords(data, common, others)
    _same_either_route("quantize_linear", [x, scale, zero_point], keywords, data.draw(outs(common)))


@SETTINGS
@given(st.data())
def test_dequantize_linear(data) -> None:
    common, shape = _common(data), data.draw(shapes())
    likely = ZERO_POINT_DTYPES if common else ["uint8", "int8", "int32", "int16", "int4"]
    q = data.draw(operands(shape, likely, "data", common))
    scale = data.draw(parameters(shape, ["float32", "float64"] if common else [*FLOATS], "scale", common))
    zero_points = [q.dtype] if isinstance(q, Array) else ZERO_POINT_DTYPES
    zero_point = data.draw(parameters(shape, zero_points, "zero", common))
    keywords = _keywords(data, common, [{"axis": 0}, {"block_size": 1}])
    _same_either_route("dequantize_linear", [q, scale, zero_point], keywords, data.draw(outs(common)))


@SETTINGS
@given(st.data())
def test_add(data) -> None:
    common, shape = _common(data), data.draw(shapes())
    b_shape = shape if common or data.draw(st.booleans()) else data.draw(shapes())
    likely = data.draw(st.sampled_from([["float32"], ["float16"]])) if common else [*FLOATS]
    a, b = (data.draw(operands(each, likely, "data", common)) for each in (shape, b_shape))
    activations = [None, "relu", dmlq.activations.Relu()]
    if not common:
        activations += ["leaky_relu", dmlq.activations.LeakyRelu(alpha=0.5), "bogus"]
    activation = data.draw(st.sampled_from(activations))
    _same_either_route("add", [a, b], {"fused_activation": activation}, data.draw(outs(common)))


def _zero_point_dtypes(operand: object) -> list[str]:
    """Typical zero point dtypes beside ``operand``: its own when it is an 8-bit array."""
    own = isinstance(operand, Array) and operand.dtype in ZERO_POINT_DTYPES
    return [operand.dtype] if own else ZERO_POINT_DTYPES  # type: ignore[union-attr]


def _quantization(data, shape: tuple[int, ...], operands: list[object], tame: bool) -> list[object]:
    """A (scale, zero point) pair for data of ``shape`` beside each of ``operands``."""
    pairs = []
    for operand in operands:
        pairs.append(data.draw(parameters(shape, ["float32", "float64"], "scale", tame)))
        pairs.append(data.draw(parameters(shape, _zero_point_dtypes(operand), "zero", tame)))
    return pairs


@SETTINGS
@given(st.data())
def test_quantized_linear_add(data) -> None:
    common, shape = _common(data), data.draw(shapes())
    b_shape = shape if common or data.draw(st.booleans()) else data.draw(shapes())
    a = data.draw(operands(shape, ZERO_POINT_DTYPES, "data", common))
    b = data.draw(operands(b_shape, ZERO_POINT_DTYPES, "data", common))
    a_scale, a_zero, b_scale, b_zero, out_scale, out_zero = _quantization(data, shape, [a, b, None], common)
    keywords = _keywords(data, common, [{"dtype": "int8"}, {"dtype": "uint8"}])
    specs = [a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero]
    _same_either_route("quantized_linear_add", specs, keywords, data.draw(outs(common)))


@st.composite
def matrices(draw, common: bool = False) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shapes of A ``[..., M, K]`` and B ``[..., K, N]``: mostly 2-D and matching, sometimes not."""
    m, k, n = (draw(st.sampled_from(SIZES)) for _ in range(3))
    a_shape, b_shape = (m, k), (k, n)
    if not common and draw(st.integers(0, 2)) == 0:
        a_shape = (*draw(shapes(0, 2)), *a_shape)
    if not common and draw(st.integers(0, 4)) == 0:
        b_shape = (draw(st.sampled_from([1, 2, 3])), n)
    return a_shape, b_shape


def _column(data, n: int, likely: list[str], role: str, tame: bool = False) -> object:
    """A per-column B parameter ``(N,)`` or ``(1, N)``, or a per-tensor one."""
    if data.draw(st.integers(0, 2)) == 0:
        return data.draw(operands(data.draw(st.sampled_from([(n,), (1, n)])), likely, role, tame))
    return data.draw(parameters((1, n), likely, role, tame))


@SETTINGS
@given(st.data())
def test_quantized_linear_matrix_multiply(data) -> None:
    common = _common(data)
    a_shape, b_shape = data.draw(matrices(common))
    a = data.draw(operands(a_shape, ZERO_POINT_DTYPES, "data", common))
    b = data.draw(operands(b_shape, ZERO_POINT_DTYPES, "data", common))
    a_scale, a_zero, out_scale, out_zero = _quantization(data, a_shape, [a, None], common)
    b_scale = _column(data, b_shape[-1], ["float32", "float64"], "scale", common)
    b_zero = _column(data, b_shape[-1], _zero_point_dtypes(b), "zero", common)
    if data.draw(st.integers(0, 3)) == 0:  # B packed (only a valid packing is one)
        try:
            Packed(b, b_scale, b_zero).build()
        except ValueError:
            pass
        else:
            b, b_scale, b_zero = Packed(b, b_scale, b_zero), None, None
    keywords = _keywords(data, common, [{"dtype": "int8"}, {"dtype": "uint8"}])
    specs = [a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero]
    _same_either_route("quantized_linear_matrix_multiply", specs, keywords, data.draw(outs(common)))


@SETTINGS
@given(st.data())
def test_pack_matrix_multiply_b(data) -> None:
    _, b_shape = data.draw(matrices())
    b = data.draw(operands(b_shape, ZERO_POINT_DTYPES, "data"))
    b_scale = _column(data, b_shape[-1], ["float32", "float64"], "scale")
    b_zero = _column(data, b_shape[-1], _zero_point_dtypes(b), "zero")
    _same_either_route("pack_matrix_multiply_b", [b, b_scale, b_zero], {}, Out("none"))
