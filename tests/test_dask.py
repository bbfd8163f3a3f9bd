"""dmlq.dask is bit-identical to the NumPy layer for every chunking, lazy, and checked eagerly."""

from __future__ import annotations

import inspect
import itertools
import math
import subprocess
import sys
import typing

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

import dmlq
import dmlq.dask as dd
from dmlq.activations import LeakyRelu

SEEDS = range(40)
CLUSTER_SEEDS = range(6)
BYTES = ("uint8", "int8")


# -- random operands and chunkings -------------------------------------------------------------


def partition(rng: np.random.Generator, size: int) -> tuple[int, ...]:
    """``size`` split at up to three random places (uneven chunks)."""
    if size <= 1:
        return (size,)
    cuts = np.unique(rng.integers(1, size, size=rng.integers(0, 4)))
    return tuple(np.diff([0, *cuts.tolist(), size]).tolist())


def lazy(rng: np.random.Generator, array) -> da.Array:
    array = np.asarray(array)
    return da.from_array(array, chunks=tuple(partition(rng, n) for n in array.shape))


def maybe_lazy(rng: np.random.Generator, value):
    """A small operand as given, or as a randomly chunked Dask array (computed by dmlq.dask)."""
    return lazy(rng, value) if isinstance(value, np.ndarray) and rng.random() < 0.3 else value


def byte_values(rng: np.random.Generator, dtype: str, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def floats(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Quarter-steps (many exact ties) with a few NaN and infinities."""
    values = rng.integers(-1200, 1200, size=shape) / 4
    special = rng.random(shape) < 0.05
    values = np.where(special, rng.choice([np.nan, np.inf, -np.inf], size=shape), values)
    return np.asarray(values).astype(dtype)


def scales(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.choice([0.25, 0.5, 0.75, 1.0, 2.5, 0.1, 0.013], size=shape).astype(np.float32)


def per_axis_shape(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Per-tensor, or varying along one random axis (with ones elsewhere), maybe fewer dims."""
    if not shape or rng.random() < 0.3:
        return ()
    axis = rng.integers(len(shape))
    per_axis = tuple(n if i == axis else 1 for i, n in enumerate(shape))
    return per_axis[rng.integers(0, axis + 1) :]


def zero_point(rng: np.random.Generator, dtype: str, shape):
    """None, Python ints (taking the output's dtype) or a NumPy array carrying ``dtype``."""
    kind = rng.integers(3)
    if kind == 0:
        return None
    values = byte_values(rng, dtype, shape)
    return values.tolist() if kind == 1 and values.size else values


def broadcast_pair(rng: np.random.Generator, ndim_max: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    shape = tuple(rng.integers(0, 5, size=rng.integers(0, ndim_max + 1)).tolist())

    def operand():
        ones = [1 if rng.random() < 0.3 else n for n in shape]
        return tuple(ones[rng.integers(0, len(ones) + 1) :])

    return operand(), operand()


# -- one random case per function: (function name, positional args, keyword args) ---------------


def quantize_case(rng):
    shape = tuple(rng.integers(0, 6, size=rng.integers(0, 4)).tolist())
    x_dtype = rng.choice(["float32", "float16", "float64", "int32"])
    x = floats(rng, shape, x_dtype) if x_dtype != "int32" else rng.integers(-900, 900, shape)
    x = np.asarray(x).astype(x_dtype)
    quantization = per_axis_shape(rng, shape)
    out = str(rng.choice(BYTES))
    zp = zero_point(rng, out, quantization)
    dtype = rng.choice([None, out]) if isinstance(zp, np.ndarray) else out
    return "quantize_linear", [x, scales(rng, quantization), zp], {"dtype": dtype}


def dequantize_case(rng):
    shape = tuple(rng.integers(0, 6, size=rng.integers(0, 4)).tolist())
    q_dtype = str(rng.choice(["uint8", "int8", "int16", "uint16", "int32", "uint32"]))
    q = rng.integers(np.iinfo(q_dtype).min, np.iinfo(q_dtype).max, shape, endpoint=True)
    quantization = per_axis_shape(rng, shape)
    zp = byte_values(rng, "int8", quantization).astype(q_dtype) if rng.random() < 0.5 else None
    scale = scales(rng, quantization).astype(rng.choice(["float32", "float16"]))
    return "dequantize_linear", [q.astype(q_dtype), scale, zp], {}


def add_case(rng):
    a_shape, b_shape = broadcast_pair(rng, 3)
    dtype = rng.choice(["float32", "float16"])
    activation = [None, "relu", "sigmoid", "gelu", LeakyRelu(alpha=0.1)][rng.integers(5)]
    a, b = floats(rng, a_shape, dtype), floats(rng, b_shape, dtype)
    return "add", [a, b], {"fused_activation": activation}


def quantized_add_case(rng):
    a_shape, b_shape = broadcast_pair(rng, 3)
    a_dtype, b_dtype, out = (str(t) for t in rng.choice(BYTES, 3))
    args = [byte_values(rng, a_dtype, a_shape), np.float32(rng.uniform(0.01, 1)),
            zero_point(rng, a_dtype, ()), byte_values(rng, b_dtype, b_shape),
            np.float32(rng.uniform(0.01, 1)), zero_point(rng, b_dtype, ()),
            np.float32(rng.uniform(0.01, 1)), zero_point(rng, out, ())]  # fmt: skip
    dtype = None if isinstance(args[-1], np.ndarray) else out
    return "quantized_linear_add", args, {"dtype": dtype}


def matmul_case(rng, k_max=40):
    batch = tuple(rng.integers(1, 4, size=rng.integers(0, 3)).tolist())

    def operand_batch():
        ones = [1 if rng.random() < 0.4 else n for n in batch]
        return tuple(ones[rng.integers(0, len(ones) + 1) :])

    m, n, k = (int(v) for v in rng.integers(0, 7, 2).tolist() + [rng.integers(0, k_max)])
    a_dtype, b_dtype, out = (str(t) for t in rng.choice(BYTES, 3))
    rows = [(), (1,), (m, 1), (1, 1)][rng.integers(4)]
    columns = [(), (n,), (1, n)][rng.integers(3)]
    out_rows = [(), (m, 1)][rng.integers(2)]
    args = [byte_values(rng, a_dtype, (*operand_batch(), m, k)), scales(rng, rows) / 16,
            zero_point(rng, a_dtype, rows), byte_values(rng, b_dtype, (*operand_batch(), k, n)),
            scales(rng, columns) / 16, zero_point(rng, b_dtype, columns), scales(rng, out_rows),
            zero_point(rng, out, out_rows)]  # fmt: skip
    dtype = None if isinstance(args[-1], np.ndarray) else out
    return "quantized_linear_matrix_multiply", args, {"dtype": dtype}


CASES = [quantize_case, dequantize_case, add_case, quantized_add_case, matmul_case]
DATA = {"quantize_linear": (0,), "dequantize_linear": (0,), "add": (0, 1),
        "quantized_linear_add": (0, 3), "quantized_linear_matrix_multiply": (0, 3)}  # fmt: skip


def lazy_arguments(rng, name, args):
    """The data operands as randomly chunked Dask arrays, some small operands too."""
    return [lazy(rng, arg) if i in DATA[name] else maybe_lazy(rng, arg) for i, arg in enumerate(args)]


def check_case(case, seed: int, compute=lambda result: result.compute()) -> None:
    rng = np.random.default_rng(seed)
    name, args, kwargs = case(rng)
    expected = getattr(dmlq, name)(*args, **kwargs)
    result = getattr(dd, name)(*lazy_arguments(rng, name, args), **kwargs)
    assert isinstance(result, da.Array)
    assert (result.shape, result.dtype) == (expected.shape, expected.dtype)
    computed = compute(result)
    assert (computed.shape, computed.dtype) == (expected.shape, expected.dtype)
    assert computed.tobytes() == expected.tobytes(), (name, args, kwargs)


# -- bit identity --------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
@pytest.mark.parametrize("seed", SEEDS)
def test_bit_identical_to_the_numpy_layer_for_random_chunkings(case, seed):
    check_case(case, seed)


@pytest.mark.parametrize("a_dtype, b_dtype", [("uint8", "uint8"), ("int8", "int8"), ("uint8", "int8")])
def test_matrix_multiply_sums_exact_products_of_uneven_k_chunks_past_int32(a_dtype, b_dtype):
    # 255 * 255 * 40 000 > 2**31: a 32-bit or float32 accumulator, or a requantized partial sum,
    # would change the result.
    rng = np.random.default_rng(7)
    k = 40_000
    a = np.full((3, k), np.iinfo(a_dtype).max if a_dtype == "uint8" else np.iinfo(a_dtype).min, a_dtype)
    a[1] = byte_values(rng, a_dtype, k)
    b = np.full((k, 2), np.iinfo(b_dtype).max if b_dtype == "uint8" else np.iinfo(b_dtype).min, b_dtype)
    b[:, 1] = byte_values(rng, b_dtype, k)
    a_scale, b_scale, b_zero_point = np.float32([[0.003], [0.0071], [0.0003]]), np.float32(0.0049), [[1, 3]]
    exact = (a.astype(np.int64) @ (b.astype(np.int64) - np.int64(b_zero_point))) * a_scale * b_scale
    output_scale = (np.abs(exact).max(axis=1, keepdims=True) / 100.3).astype(np.float32)
    args = (a_scale, None, b, b_scale, b_zero_point, output_scale, None)
    expected = dmlq.quantized_linear_matrix_multiply(a, *args, dtype="int8")
    a_lazy = da.from_array(a, chunks=((2, 1), (1, 9_999, 12_345, k - 22_345)))
    b_lazy = da.from_array(b, chunks=((33_026, k - 33_026), (1, 1)))
    result = dd.quantized_linear_matrix_multiply(a_lazy, *args[:2], b_lazy, *args[3:], dtype="int8")
    assert result.chunks == ((2, 1), (1, 1))
    assert result.compute().tobytes() == expected.tobytes()
    assert np.abs(expected).max() == 100 and np.abs(expected).min() < 100  # within range, varied


def test_matrix_multiply_tiles_like_a_rows_and_b_columns():
    rng = np.random.default_rng(3)
    a = lazy(rng, byte_values(rng, "uint8", (2, 1, 9, 30)))
    b = lazy(rng, byte_values(rng, "int8", (3, 30, 8)))
    result = dd.quantized_linear_matrix_multiply(a, 0.01, 3, b, 0.02, None, 1.0, None)
    assert result.shape == (2, 3, 9, 8)
    assert result.chunks[-2:] == (a.chunks[-2], b.chunks[-1])


# -- B packed once per graph ----------------------------------------------------------------------


def weights_case(rng: np.random.Generator, packed: bool) -> tuple[list, list, dict]:
    """A random matrix multiply (NumPy arguments, keyword arguments) with lazy arguments whose ``b``
    is one chunk along K (a weight matrix, chunked elsewhere) or, if ``packed``, a PackedMatrix."""
    _, args, kwargs = matmul_case(rng)
    lazy_args = lazy_arguments(rng, "quantized_linear_matrix_multiply", args)
    if packed:
        lazy_args[3:6] = [dmlq.pack_matrix_multiply_b(*args[3:6]), None, None]
    else:
        b = args[3]
        lazy_args[3] = da.from_array(
            b, chunks=(*lazy_args[3].chunks[:-2], b.shape[-2], lazy_args[3].chunks[-1])
        )
    return lazy_args, args, kwargs


def packing_keys(result: da.Array) -> list[tuple]:
    return [key for key in dict(result.__dask_graph__()) if key[0].startswith("pack_matrix_multiply_b-")]


def b_blocks(result: da.Array, b_shape: tuple[int, ...]) -> int:
    """How many blocks B has in ``result``'s tiling: its N chunks times its batch chunks (those of
    the result where B's dimension is not a broadcast 1)."""
    batch = [len(result.chunks[-i]) for i in range(3, len(b_shape) + 1) if b_shape[-i] != 1]
    return math.prod(batch) * len(result.chunks[-1])


@pytest.mark.parametrize("seed", SEEDS)
def test_b_in_one_k_chunk_is_packed_once_per_block_and_the_result_is_bit_identical(seed, monkeypatch):
    packings = []

    def counted(*args):
        packings.append(args[0].shape)
        return pack(*args)

    pack = dmlq.numpy_api.pack_matrix_multiply_b
    monkeypatch.setattr(dmlq.numpy_api, "pack_matrix_multiply_b", counted)
    lazy_args, args, kwargs = weights_case(np.random.default_rng(seed), packed=False)
    expected = dmlq.quantized_linear_matrix_multiply(*args, **kwargs)
    result = dd.quantized_linear_matrix_multiply(*lazy_args, **kwargs)
    assert len(packing_keys(result)) == b_blocks(result, args[3].shape)
    assert result.compute(scheduler="threads").tobytes() == expected.tobytes()
    assert len(packings) == b_blocks(result, args[3].shape)


def test_a_split_along_k_is_rechunked_to_the_one_k_chunk_of_b():
    rng = np.random.default_rng(5)
    a, b = byte_values(rng, "uint8", (2, 7, 30)), byte_values(rng, "int8", (30, 9))
    b_scale, b_zero_point = scales(rng, (1, 9)), byte_values(rng, "int8", (9,))
    expected = dmlq.quantized_linear_matrix_multiply(a, 0.5, 4, b, b_scale, b_zero_point, 2.0, 7)
    lazy_a, lazy_b = da.from_array(a, chunks=(1, 3, 11)), da.from_array(b, chunks=(30, 4))
    result = dd.quantized_linear_matrix_multiply(lazy_a, 0.5, 4, lazy_b, b_scale, b_zero_point, 2.0, 7)
    assert result.chunks == ((1, 1), (3, 3, 1), (4, 4, 1))
    assert len(packing_keys(result)) == 3
    assert result.compute(scheduler="threads").tobytes() == expected.tobytes()


def test_b_split_along_k_keeps_the_exact_route_without_packing():
    b = da.from_array(QB, chunks=(2, 2))
    result = dd.quantized_linear_matrix_multiply(QA, 0.5, None, b, [0.25, 0.5, 1.0, 2.0], None, 3.0, None)
    assert not packing_keys(result)
    expected = dmlq.quantized_linear_matrix_multiply(
        QA, 0.5, None, QB, [0.25, 0.5, 1.0, 2.0], None, 3.0, None
    )
    assert result.compute(scheduler="threads").tobytes() == expected.tobytes()


@pytest.mark.parametrize("seed", SEEDS)
def test_a_packed_matrix_as_b_is_one_block_and_the_result_is_bit_identical(seed):
    lazy_args, args, kwargs = weights_case(np.random.default_rng(seed), packed=True)
    expected = dmlq.quantized_linear_matrix_multiply(*args, **kwargs)
    result = dd.quantized_linear_matrix_multiply(*lazy_args, **kwargs)
    assert len(result.chunks[-1]) == 1 and not packing_keys(result)
    assert result.compute(scheduler="threads").tobytes() == expected.tobytes()


@pytest.mark.parametrize("b_scale, b_zero_point", [(1.0, None), (None, np.int8(0)), (1.0, np.int8(0))])
def test_a_packed_matrix_with_a_scale_or_zero_point_beside_it_is_refused_like_the_numpy_layer(
    b_scale, b_zero_point
):
    packed = dmlq.pack_matrix_multiply_b(QB, 0.25)
    args = matmul_args(b=packed, b_scale=b_scale, b_zero_point=b_zero_point)
    with pytest.raises(dmlq.DmlError) as expected:
        dmlq.quantized_linear_matrix_multiply(*args)
    with pytest.raises(dmlq.DmlError) as got:
        dd.quantized_linear_matrix_multiply(da.from_array(QA, chunks=1), *args[1:])
    assert str(got.value) == str(expected.value)


# -- scales and zero points with more dimensions than the data ---------------------------------

F5 = np.float32([0.5, -1.5, 2.5, 7.0, np.nan])
Q4 = np.uint8([0, 9, 128, 255])
QA, QB = np.uint8([[1, 2, 3], [4, 5, 250]]), np.int8([[1, -1, 7, 0], [2, 3, -128, 5], [-4, 6, 1, 127]])


def matmul_args(a=QA, a_scale=0.5, a_zero_point=None, b=QB, b_scale=0.25, b_zero_point=None,
                output_scale=3.0, output_zero_point=None):  # fmt: skip
    return [a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point]


def qladd_args(a=Q4, a_scale=0.5, a_zero_point=None, b=Q4[::-1], b_scale=0.25, b_zero_point=None,
               output_scale=0.75, output_zero_point=None):  # fmt: skip
    return [a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point]


HIGHER_DIMENSIONAL = {
    # case: (function, positional arguments, keyword arguments)
    "quantize 1-D x, (1, 1) scale": ("quantize_linear", [F5, np.float32([[0.5]]), None], {}),
    "quantize 2-D x, (1, 1, 1) zero point": (
        "quantize_linear",
        [F5.reshape(1, 5) * [[1], [3]], 0.25, np.int8([[[3]]])],
        {},
    ),
    "quantize 0-d x, (1, 1) scale and zero point": (
        "quantize_linear",
        [np.float32(2.5), [[0.5]], [[7]]],
        {"dtype": "int8"},
    ),
    "quantize (1, 1, 2, 1) per-row scale": (
        "quantize_linear",
        [F5 * np.float32([[1], [-2]]), np.float32([0.5, 4]).reshape(1, 1, 2, 1)],
        {},
    ),
    "quantize empty x, (1, 1) scale": ("quantize_linear", [F5[:0], np.float32([[2]])], {}),
    "dequantize 1-D q, (1, 1, 1) scale, (1, 1) zero point": (
        "dequantize_linear",
        [Q4, np.float32([[[0.5]]]), np.uint8([[128]])],
        {},
    ),
    "dequantize 0-d q, (1, 1) float16 scale": (
        "dequantize_linear",
        [np.int16(-300), np.float16([[0.5]])],
        {},
    ),
    "dequantize (1, 1, 4) per-column zero point": (
        "dequantize_linear",
        [Q4 * np.uint8([[1], [2]]), 2.0, np.uint8([[[1, 2, 3, 4]]])],
        {},
    ),
    "add 1-D and (1, 1, 1)": ("add", [F5, np.float32([[[1.5]]])], {"fused_activation": "relu"}),
    "add (1, 1, 5) and 1-D": ("add", [F5.reshape(1, 1, 5), F5[::-1]], {}),
    "add 0-d and (1, 1) float16": ("add", [np.float16(1), np.float16([[-3]])], {}),
    "qladd 1-D data, (1, 1) a_scale": ("quantized_linear_add", qladd_args(a_scale=[[1.0]]), {}),
    "qladd (1, 1, 1) output zero point": (
        "quantized_linear_add",
        qladd_args(output_zero_point=np.uint8([[[4]]])),
        {},
    ),
    "qladd 0-d data, (1,) b_scale": (
        "quantized_linear_add",
        qladd_args(a=np.uint8(1), b=np.uint8(3), b_scale=np.float32([0.2])),
        {},
    ),
    "qladd every scale and zero point of its own rank": (
        "quantized_linear_add",
        qladd_args(
            a=np.int8([[-128, 5, 0, 127]]),
            a_scale=[[[0.5]]],
            a_zero_point=[[[[1]]]],
            b_scale=np.float32([0.25]),
            b_zero_point=np.uint8([[2]]),
            output_scale=[[0.125]],
            output_zero_point=np.int8([[[-3]]]),
        ),
        {},
    ),
    "qlmm (1, 1, 1) a_scale": ("quantized_linear_matrix_multiply", matmul_args(a_scale=[[[0.5]]]), {}),
    "qlmm (1, 1, M, 1) per-row a_scale": (
        "quantized_linear_matrix_multiply",
        matmul_args(a_scale=np.float32([0.5, 2]).reshape(1, 1, 2, 1), a_zero_point=np.uint8([[3], [7]])),
        {},
    ),
    "qlmm batch 3 and a 4-D b zero point": (
        "quantized_linear_matrix_multiply",
        matmul_args(a=np.stack([QA, QA[::-1], QA * 2]), b_zero_point=np.int8([[[[1]]]])),
        {},
    ),
    "qlmm (1, 1, N) per-column b_scale": (
        "quantized_linear_matrix_multiply",
        matmul_args(b_scale=np.float32([[[0.25, 0.5, 1, 2]]]), b_zero_point=np.int8([[-1, 0, 1, 2]])),
        {},
    ),
    "qlmm (1, 1, 1, 1) output zero point, int8": (
        "quantized_linear_matrix_multiply",
        matmul_args(output_scale=np.float32([[0.5], [2]]), output_zero_point=np.int8([[[[-5]]]])),
        {},
    ),
    "qlmm K = 0, (1, 1, 1) output zero point": (
        "quantized_linear_matrix_multiply",
        matmul_args(a=QA[:, :0], b=QB[:0], output_zero_point=np.uint8([[[9]]])),
        {},
    ),
}


@pytest.mark.parametrize("case", HIGHER_DIMENSIONAL)
@pytest.mark.parametrize("seed", range(4))
def test_scales_and_zero_points_with_more_dimensions_shape_the_result_like_the_numpy_layer(case, seed):
    name, args, kwargs = HIGHER_DIMENSIONAL[case]
    expected = getattr(dmlq, name)(*args, **kwargs)
    assert expected.ndim > min(np.ndim(args[i]) for i in DATA[name])  # more than some data operand
    rng = np.random.default_rng(seed)
    result = getattr(dd, name)(*lazy_arguments(rng, name, args), **kwargs)
    assert (result.shape, result.dtype) == (expected.shape, expected.dtype)
    # Every block is what the graph declares, so that the blocks assemble into the result.
    blocks = dask.compute(*result.to_delayed().ravel(), scheduler="threads")
    assert [(block.shape, block.dtype) for block in blocks] == [
        (shape, expected.dtype) for shape in itertools.product(*result.chunks)
    ]
    computed = result.compute(scheduler="threads")
    assert (computed.shape, computed.dtype) == (expected.shape, expected.dtype)
    assert computed.tobytes() == expected.tobytes()


# -- chunks, laziness, eager checks --------------------------------------------------------------


def test_per_axis_scales_follow_the_data_chunks_without_rechunking_it():
    x = da.from_array(np.arange(60, dtype=np.float32).reshape(6, 10), chunks=((1, 5), (3, 3, 4)))
    result = dd.quantize_linear(x, np.float32([[0.5], [1], [2], [3], [4], [5]]), np.uint8([[1]] * 6))
    assert result.chunks == x.chunks
    assert x.name in result.dask.dependencies[result.name]


def test_two_data_operands_are_rechunked_to_the_common_refinement_of_their_chunks():
    a = da.from_array(np.ones((6, 4), np.float32), chunks=((2, 4), (4,)))
    b = da.from_array(np.ones((6, 4), np.float32), chunks=((3, 3), (1, 3)))
    assert dd.add(a, b).chunks == ((2, 1, 3), (1, 3))
    assert dd.add(a, b[:1]).chunks == ((2, 4), (1, 3))  # a broadcast dimension cuts nothing
    qa, qb = a.astype(np.uint8), b.astype(np.uint8)
    assert dd.quantized_linear_add(qa, 1.0, None, qb, 1.0, None, 1.0, None).chunks == ((2, 1, 3), (1, 3))
    batch_a = da.from_array(np.ones((2, 5, 6), np.uint8), chunks=((1, 1), (5,), (2, 4)))
    batch_b = da.from_array(np.ones((2, 6, 3), np.uint8), chunks=((2,), (3, 3), (3,)))
    product = dd.quantized_linear_matrix_multiply(batch_a, 1.0, None, batch_b, 1.0, None, 1.0, None)
    assert product.chunks == ((1, 1), (5,), (3,))


BUILDS = {
    "quantize per-row": lambda x: dd.quantize_linear(x, [[1.0], [2.0], [3.0], [4.0]]),
    "quantize (1, 1, 1) scale": lambda x: dd.quantize_linear(x, [[[1.0]]], np.uint8([[[[2]]]])),
    "dequantize (1, 1, 1) scale": lambda x: dd.dequantize_linear(x.astype(np.uint8), [[[1.0]]]),
    "add (1, 1, 1, 1)": lambda x: dd.add(x, np.float32([[[[1.0]]]])),
    "qladd (1, 1, 1) scale": lambda x: dd.quantized_linear_add(
        x.astype(np.uint8), [[[0.5]]], None, x.astype(np.uint8), 1.0, [[2]], 1.0, None
    ),
    "qlmm (1, 1, 1) scale": lambda x: dd.quantized_linear_matrix_multiply(
        x.astype(np.uint8), 1.0, None, x.astype(np.int8), [[[0.5]]], None, 2.0, None
    ),
}


@pytest.mark.parametrize("build", BUILDS)
def test_data_is_not_computed_to_build_the_graph(build):
    @dask.delayed
    def unreadable():
        raise RuntimeError("the data was read")

    x = da.from_delayed(unreadable(), shape=(4, 4), dtype=np.float32)
    result = BUILDS[build](x)
    assert result.ndim >= 2
    with pytest.raises(RuntimeError, match="the data was read"):
        result.compute(scheduler="threads")


F, U, A, B = np.float32([1, 2]), np.uint8([1]), np.uint8([[1, 2]]), np.uint8([[1], [2]])
ERRORS = [
    ("quantize_linear", [np.array([True, False]), 1.0], {}),
    ("quantize_linear", [F, 0.0], {}),
    ("quantize_linear", [F, np.float32([1, np.inf])], {}),
    ("quantize_linear", [np.zeros((4, 5), np.float32), np.ones((3, 1), np.float32)], {}),
    ("quantize_linear", [F, 1.0, np.int16(300)], {}),
    ("quantize_linear", [F, 1.0, np.uint8(0)], {"dtype": "int8"}),
    ("quantize_linear", [F, 1.0, 300], {}),
    ("quantize_linear", [np.zeros((1,) * 9, np.float32), 1.0], {}),
    ("dequantize_linear", [F, 1.0], {}),
    ("dequantize_linear", [U, 1.0, np.int8(0)], {}),
    ("add", [F, np.float16([1, 2])], {}),
    ("add", [F, np.float32([1, 2, 3])], {}),
    ("add", [F, F], {"fused_activation": "swish"}),
    ("quantized_linear_add", [U, F, None, U, 1.0, None, 1.0, None], {}),
    ("quantized_linear_add", [np.float32([1]), 1.0, None, U, 1.0, None, 1.0, None], {}),
    ("quantized_linear_matrix_multiply", [U, 1.0, None, B, 1.0, None, 1.0, None], {}),
    ("quantized_linear_matrix_multiply", [A, 1.0, None, np.uint8([[1], [2], [3]]), 1.0, None, 1.0, None], {}),
    ("quantized_linear_matrix_multiply", [A, np.float32([[1, 2]]), None, B, 1.0, None, 1.0, None], {}),
    ("quantized_linear_matrix_multiply", [A, 1.0, None, B, 1.0, None, 0.0, None], {}),
    ("quantized_linear_matrix_multiply", [A, 1.0, None, B, 1.0, None, 1.0, np.int8(0)], {"dtype": "uint8"}),
    # scales and zero points take part in the result's shape
    ("quantize_linear", [F, [[0.5]], np.uint8([1, 2, 3])], {}),
    ("quantize_linear", [F, np.ones((1,) * 9, np.float32)], {}),
    ("dequantize_linear", [U, np.ones((1,) * 9, np.float32)], {}),
    ("quantized_linear_add", [U, np.ones((1,) * 9, np.float32), None, U, 1.0, None, 1.0, None], {}),
    ("quantized_linear_add", [F.astype(np.uint8), [[1.0]], None, Q4, 1.0, None, 1.0, [[[2]]]], {}),
    ("quantized_linear_add", [U, 1.0, None, U, 1.0, np.uint8([[1, 2]]), 1.0, None], {}),
    (
        "quantized_linear_matrix_multiply",
        [A, np.ones((1,) * 5, np.float32), None, B, 1.0, None, 1.0, None],
        {},
    ),
    (
        "quantized_linear_matrix_multiply",
        [A, 1.0, None, B, 1.0, None, 1.0, np.zeros((1, 1, 1, 2, 1), np.uint8)],
        {},
    ),
    (
        "quantized_linear_matrix_multiply",
        [A, np.ones((2, 1, 1), np.float32), None, B, 1.0, None, 1.0, None],
        {},
    ),
    (
        "quantized_linear_matrix_multiply",
        [
            np.zeros((2, 1, 2), np.uint8),
            np.ones((1, 1, 1), np.float32),
            None,
            np.zeros((3, 2, 1), np.uint8),
            1.0,
            None,
            1.0,
            None,
        ],
        {},
    ),
]


@pytest.mark.parametrize("name, args, kwargs", ERRORS)
def test_errors_raise_at_graph_build_with_the_numpy_layers_message(name, args, kwargs):
    with pytest.raises(ValueError) as expected:
        getattr(dmlq, name)(*args, **kwargs)
    lazy_args = [da.from_array(arg, chunks=1) if i in DATA[name] else arg for i, arg in enumerate(args)]
    with pytest.raises(dmlq.DmlError) as got:
        getattr(dd, name)(*lazy_args, **kwargs)
    assert str(got.value) == str(expected.value)


def test_integer_data_of_another_dtype_is_refused_when_the_graph_is_built():
    q = da.from_array(np.int64([[1, 2], [300, 4]]), chunks=1)
    with pytest.raises(dmlq.DmlError, match=r"^q: dtype int64 is not supported \(expected int32, "):
        dd.dequantize_linear(q, 0.5)


def test_byte_swapped_data_behaves_like_native_data():
    a = np.float16([1, -3, 2])
    lazy = dd.add(da.from_array(a.astype(">f2"), chunks=2), 1.0, fused_activation="relu")
    assert lazy.dtype == np.float16
    assert np.array_equal(lazy.compute(), dmlq.add(a, 1.0, fused_activation="relu"))


@pytest.mark.parametrize("name", dd.__all__)
def test_every_parameter_and_result_is_annotated(name):
    function = getattr(dd, name)
    hints = typing.get_type_hints(function)
    assert set(hints) == {*inspect.signature(function).parameters, "return"}
    assert hints["return"] is da.Array and "out" not in hints


def test_unknown_chunk_sizes_are_refused():
    x = da.from_array(np.float32([1, -2, 3]), chunks=1)
    with pytest.raises(dmlq.DmlError, match="^x: unknown chunk sizes"):
        dd.quantize_linear(x[x > 0], 1.0)


def test_importing_dmlq_does_not_import_dask():
    code = "import sys, dmlq; dmlq.quantize_linear([1.0], 1.0); print('dask' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"  # fmt: skip


# -- dask.distributed ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None)  # fmt: skip
    with cluster, Client(cluster, set_as_default=False) as client:
        yield client


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
@pytest.mark.parametrize("seed", CLUSTER_SEEDS)
def test_bit_identical_on_a_two_worker_local_cluster(client, case, seed):
    check_case(case, seed, compute=lambda result: client.compute(result).result(timeout=120))


def test_large_k_on_a_two_worker_local_cluster(client):
    rng = np.random.default_rng(11)
    a = byte_values(rng, "uint8", (2, 34_000))
    b = byte_values(rng, "int8", (34_000, 3))
    args = (np.float32(0.01), np.uint8(2), np.float32(0.02), np.int8(-1), np.float32(3.0), np.uint8(9))
    expected = dmlq.quantized_linear_matrix_multiply(a, *args[:2], b, *args[2:])
    lazy_a = da.from_array(a, chunks=(1, (17_000, 10_000, 7_000)))
    lazy_b = da.from_array(b, chunks=(5_000, 2))
    result = dd.quantized_linear_matrix_multiply(lazy_a, *args[:2], lazy_b, *args[2:])
    assert client.compute(result).result(timeout=120).tobytes() == expected.tobytes()


@pytest.mark.parametrize("packed", [False, True], ids=["b one K chunk", "PackedMatrix b"])
@pytest.mark.parametrize("seed", CLUSTER_SEEDS)
def test_packed_b_on_a_two_worker_local_cluster(client, packed, seed):
    lazy_args, args, kwargs = weights_case(np.random.default_rng(seed), packed)
    expected = dmlq.quantized_linear_matrix_multiply(*args, **kwargs)
    result = dd.quantized_linear_matrix_multiply(*lazy_args, **kwargs)
    assert client.compute(result).result(timeout=120).tobytes() == expected.tobytes()
