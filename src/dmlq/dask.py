"""The NumPy layer's five functions on Dask arrays: lazy, block by block, bit-identical.

Needs the ``dask`` extra (``python -m pip install ".[dask]"`` in a checkout); ``import dmlq`` alone
never imports Dask.

Signatures, dtype rules and broadcasting are the NumPy layer's, without ``out=`` (Dask has no
such convention: a lazy result is never written in place; ``dask.array.store`` writes one into
an existing array). The data operands are Dask arrays (NumPy arrays and
array-likes are wrapped); scales and zero points are small NumPy arrays, scalars or lists (a Dask
array there is computed at once). Every argument is checked when the graph is built, with the
NumPy layer's own rules and messages: the data by dtype and shape, the small operands by value
too. The result's shape is the NumPy layer's: the broadcast of every operand, scales and zero
points included, so a ``(1, 1)`` scale makes a 1-D result 2-D (and the matrix multiply's scales
and zero points join its batch dimensions); a dimension that only small operands have is one
chunk. Each output block is then the NumPy layer's result on the blocks of the data and the
matching slices of the scales and zero points, which follow the data's chunks. A lone data
operand keeps its chunks; two data operands chunked differently (``add``, ``quantized_linear_add``,
and the matrix multiply along its batch dimensions, and along K where ``b`` is split along K)
are both rechunked to the common refinement of their chunks along each dimension they share; where
``b`` is one chunk along K, the matrix multiply makes ``a`` one chunk along K too.

>>> import dask.array as da
>>> x = da.from_array(np.float32([[0.5, 1.5, 2.5], [-1.0, 1.0, 4.0]]), chunks=(1, 2))
>>> q = quantize_linear(x, [[1.0], [0.5]], np.int8(0))
>>> q.dtype, q.chunks
(dtype('int8'), ((1, 1), (2, 1)))
>>> q.compute()
array([[ 0,  2,  2],
       [-2,  2,  8]], dtype=int8)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import NamedTuple, overload

import dask.array as da
import numpy as np
from dask.base import tokenize
from numpy.typing import ArrayLike, DTypeLike

from . import numpy_api
from .activations import Activation
from .errors import DmlError
from .numpy_api import quantized_add, rules
from .numpy_api.add import ADD_DATA, python_float_dtype
from .numpy_api.matrix_multiply import (
    MATRIX_DATA,
    check_matrices,
    matrix_batch,
    matrix_quantizations,
    packed_parameters,
    parameter_values,
    parameters_of,
)
from .numpy_api.quantize import DEQUANTIZE_DATA, OUTPUT_TYPES, QUANTIZE_DATA
from .numpy_api.rules import F32, I32, U8, broadcast_shape, integer_data, output_dtype
from .packed import PackedMatrix
from .reference.requantize import centred, requantize

__all__ = [
    "quantize_linear",
    "dequantize_linear",
    "add",
    "quantized_linear_add",
    "quantized_linear_matrix_multiply",
]


# -- operands ----------------------------------------------------------------------------------


@overload
def _small(value: None) -> None: ...
@overload
def _small(value: ArrayLike) -> ArrayLike: ...
def _small(value: ArrayLike | None) -> ArrayLike | None:
    """A scale or zero point, computed now if it is lazy, so that its values are checked now."""
    return value.compute() if isinstance(value, da.Array) else value


class _Known(NamedTuple):
    """A Dask array's shape as the NumPy layer's shape rules read it: every size known, so an int."""

    shape: tuple[int, ...]


def _known(array: da.Array, name: str) -> _Known:
    """``array``'s shape for the shape rules; refused where Dask does not know a size (NaN, as after
    boolean indexing), which no rule could check."""
    if any(math.isnan(size) for size in array.shape):
        raise DmlError(f"{name}: unknown chunk sizes; call compute_chunk_sizes() first")
    return _Known(tuple(int(size) for size in array.shape))


def _data(value: object, name: str, convert: Callable[[object, str], np.ndarray]) -> da.Array:
    """A data operand as a Dask array of the dtype the NumPy layer's ``convert(value, name)`` gives
    it. A Dask array's dtype is checked now on an empty stand-in; its blocks are converted lazily
    by ``convert`` itself, so that values beyond the new dtype's range raise when computed."""
    if not isinstance(value, da.Array):
        wrapped: da.Array = da.from_array(convert(value, name))
        return wrapped
    _known(value, name)
    dtype = convert(np.empty(0, value.dtype), name).dtype
    if value.dtype == dtype:
        return value
    # da.map_blocks, which Array.map_blocks calls: typeshed's functools.wraps does not bind methods.
    converted: da.Array = da.map_blocks(convert, value, name, dtype=dtype)
    return converted


def _float_operand(python_dtype: np.dtype) -> Callable[[object, str], np.ndarray]:
    return partial(rules.data, allowed=ADD_DATA, python_dtype=python_dtype, floats=F32)


def _stand_in(value: ArrayLike) -> ArrayLike:
    """What the NumPy layer's dtype rules see of ``value``: an empty array of a Dask array's dtype."""
    return np.empty(0, value.dtype) if isinstance(value, da.Array) else value


def _lazy(value: da.Array | np.ndarray) -> da.Array:
    if isinstance(value, da.Array):
        return value
    # One chunk: blockwise alignment then cuts it along the data's chunks, never the reverse.
    whole: da.Array = da.from_array(value, chunks=-1)
    return whole


def _call_by_name(*blocks: np.ndarray, function: Callable[..., np.ndarray],
                  names: tuple[str, ...]) -> np.ndarray:  # fmt: skip
    return function(**dict(zip(names, blocks)))


def _map_blocks(function: Callable[..., np.ndarray], operands: Mapping[str, da.Array | np.ndarray | None],
                dtype: np.dtype) -> da.Array:  # fmt: skip
    """``function(**operands)`` block by block, the operands broadcast like NumPy's (aligned on
    their last dimension) and their chunks aligned; None operands are passed as None.

    The one place where a result's dimensions are decided: those of the NumPy broadcast of every
    operand, scales and zero points included, as in the NumPy layer. Shapes that do not broadcast
    raise its DmlError, naming the operands by their keys here (the NumPy layer's names).
    """
    present = {name: _lazy(value) for name, value in operands.items() if value is not None}
    absent = {name: None for name, value in operands.items() if value is None}
    ndim = len(broadcast_shape(**{name: _known(array, name) for name, array in present.items()}))
    indices = [tuple(range(array.ndim))[::-1] for array in present.values()]
    result: da.Array = da.blockwise(
        _call_by_name, tuple(range(ndim))[::-1], *_interleaved(list(present.values()), indices),
        function=partial(function, **absent), names=tuple(present), dtype=dtype,
        meta=np.empty((0,) * ndim, dtype), token=getattr(function, "func", function).__name__,
    )  # fmt: skip
    return result


# -- the element-wise functions ----------------------------------------------------------------


def quantize_linear(x: ArrayLike, scale: ArrayLike, zero_point: ArrayLike | None = None, *,
                    dtype: DTypeLike | None = None) -> da.Array:  # fmt: skip
    """Lazy :func:`dmlq.quantize_linear`: ``clamp(round(x / scale) + zero_point, Min, Max)``.

    >>> import dask.array as da
    >>> quantize_linear(da.from_array(np.float32([0.5, 1.5, 2.5]), chunks=2), 1.0).compute()
    array([0, 2, 2], dtype=uint8)
    """
    scale, zero_point = _small(scale), _small(zero_point)
    x = _data(x, "x", partial(rules.data, allowed=QUANTIZE_DATA, python_dtype=F32, floats=F32))
    scale = rules.scale(scale, "scale", F32 if x.dtype == I32 else x.dtype)
    out_dtype = output_dtype(zero_point, dtype, U8, "zero_point", OUTPUT_TYPES)
    zero_point = rules.zero_point(zero_point, "zero_point", out_dtype, "the output", OUTPUT_TYPES)
    function = partial(numpy_api.quantize_linear, dtype=out_dtype)
    return _map_blocks(function, {"x": x, "scale": scale, "zero_point": zero_point}, out_dtype)


def dequantize_linear(q: ArrayLike, scale: ArrayLike, zero_point: ArrayLike | None = None) -> da.Array:
    """Lazy :func:`dmlq.dequantize_linear`: ``(q - zero_point) * scale`` in the scale's dtype.

    >>> import dask.array as da
    >>> q = da.from_array(np.uint8([0, 128, 255]), chunks=2)
    >>> dequantize_linear(q, 0.5, np.uint8(128)).compute()
    array([-64. ,   0. ,  63.5], dtype=float32)
    """
    scale, zero_point = _small(scale), _small(zero_point)
    scale = rules.scale(scale, "scale", rules.scale_dtype(scale, "scale"))
    q = _data(q, "q", partial(integer_data, zero_point=zero_point, allowed=DEQUANTIZE_DATA))
    zero_point = rules.zero_point(zero_point, "zero_point", q.dtype, "q", DEQUANTIZE_DATA)
    operands: dict[str, da.Array | np.ndarray | None] = {"q": q, "scale": scale, "zero_point": zero_point}
    return _map_blocks(numpy_api.dequantize_linear, operands, scale.dtype)


def add(a: ArrayLike, b: ArrayLike, *,
        fused_activation: Activation | str | None = None) -> da.Array:  # fmt: skip
    """Lazy :func:`dmlq.add`: ``fused_activation(a + b)`` for float32 or float16 operands.

    >>> import dask.array as da
    >>> add(da.from_array(np.float32([1, -3]), chunks=1), 1.0, fused_activation="relu").compute()
    array([2., 0.], dtype=float32)
    """
    a = _data(a, "a", _float_operand(python_float_dtype(_stand_in(b))))
    b = _data(b, "b", _float_operand(python_float_dtype(_stand_in(a))))
    # The NumPy layer's remaining rules (one dtype, a known activation) on empty stand-ins.
    numpy_api.add(_stand_in(a), _stand_in(b), fused_activation=fused_activation)
    function = partial(numpy_api.add, fused_activation=fused_activation)
    return _map_blocks(function, {"a": a, "b": b}, a.dtype)


def quantized_linear_add(a: ArrayLike, a_scale: ArrayLike, a_zero_point: ArrayLike | None,
                         b: ArrayLike, b_scale: ArrayLike, b_zero_point: ArrayLike | None,
                         output_scale: ArrayLike, output_zero_point: ArrayLike | None, *,
                         dtype: DTypeLike | None = None) -> da.Array:  # fmt: skip
    """Lazy :func:`dmlq.quantized_linear_add` (per-tensor scales and zero points, which broadcast
    into the result's shape like NumPy operands).

    >>> import dask.array as da
    >>> a = da.from_array(np.uint8([10, 20]), chunks=1)
    >>> quantized_linear_add(a, 0.5, None, np.uint8([1, 3]), 1.0, None, 2.0, None).compute()
    array([3, 6], dtype=uint8)
    """
    small = {"a_scale": a_scale, "a_zero_point": a_zero_point, "b_scale": b_scale,
             "b_zero_point": b_zero_point, "output_scale": output_scale,
             "output_zero_point": output_zero_point}  # fmt: skip
    small = {name: _small(value) for name, value in small.items()}
    data = quantized_add.QUANTIZED_ADD_DATA
    a = _data(a, "a", partial(integer_data, zero_point=small["a_zero_point"], allowed=data))
    b = _data(b, "b", partial(integer_data, zero_point=small["b_zero_point"], allowed=data))
    # The NumPy layer's checks; the scales and zero points, converted to its dtypes, are operands of
    # every block, so that their dimensions are the result's too.
    out_dtype, quantization = quantized_add.parameters_of(a.dtype, b.dtype, **small, dtype=dtype)
    function = partial(numpy_api.quantized_linear_add, dtype=out_dtype)
    return _map_blocks(function, {"a": a, "b": b, **quantization}, out_dtype)


# -- the matrix multiply -----------------------------------------------------------------------


def quantized_linear_matrix_multiply(a: ArrayLike, a_scale: ArrayLike, a_zero_point: ArrayLike | None,
                                     b: ArrayLike | PackedMatrix, b_scale: ArrayLike | None,
                                     b_zero_point: ArrayLike | None,
                                     output_scale: ArrayLike, output_zero_point: ArrayLike | None, *,
                                     dtype: DTypeLike | None = None) -> da.Array:  # fmt: skip
    """Lazy :func:`dmlq.quantized_linear_matrix_multiply`, bit-identical for every chunking.

    The result is tiled like ``a``'s M chunks and ``b``'s N chunks. Two routes:

    - ``b`` in one chunk along K (a weight matrix, typically): each B block is packed once per
      graph, by one :func:`dmlq.pack_matrix_multiply_b` task with its columns' scale and zero
      point, and every A block (rechunked to one K chunk) multiplies that packing through the
      NumPy layer, which is bit-identical to the unpacked call.
    - ``b`` split along K: for each tile, the exact int64 products ``(A - AZP) @ (B - BZP)`` of
      every K chunk are summed over the K chunks, and only that exact sum is requantized, once,
      with the reference's float64 formula.

    ``b`` may also be a :class:`dmlq.PackedMatrix`, with ``b_scale`` and ``b_zero_point`` None as
    in the NumPy layer: it is one B block (``a`` is then one chunk along K and along the batch
    dimensions it shares with B).

    >>> import dask.array as da
    >>> a = da.from_array(np.uint8([[1, 2, 3]]), chunks=(1, 2))
    >>> b = da.from_array(np.int8([[3], [4], [5]]), chunks=(1, 1))
    >>> quantized_linear_matrix_multiply(a, 1.0, None, b, 1.0, None, 4.0, None).compute()
    array([[6]], dtype=uint8)
    >>> weights = da.from_array(np.int8([[3, 1], [4, 1], [5, 1]]), chunks=(3, 1))
    >>> quantized_linear_matrix_multiply(a, 1.0, None, weights, [1.0, 2.0], None, 4.0, None).compute()
    array([[6, 3]], dtype=uint8)
    """
    packed = b if isinstance(b, PackedMatrix) else None
    if packed is not None:
        b_scale, b_zero_point = packed_parameters(packed, b_scale, b_zero_point)
        b = _shape_of(packed)
    a_scale, a_zero_point, output_scale = _small(a_scale), _small(a_zero_point), _small(output_scale)
    b_scale, b_zero_point, output_zero_point = (
        _small(b_scale),
        _small(b_zero_point),
        _small(output_zero_point),
    )
    a = _data(a, "a", partial(integer_data, zero_point=a_zero_point, allowed=MATRIX_DATA))
    b = _data(b, "b", partial(integer_data, zero_point=b_zero_point, allowed=MATRIX_DATA))
    check_matrices(_known(a, "a"), _known(b, "b"))
    m, n = a.shape[-2], b.shape[-1]
    out_dtype, quantization = parameters_of(a.dtype, b.dtype, a_scale, a_zero_point, b_scale, b_zero_point,
                                            output_scale, output_zero_point, dtype, packed)  # fmt: skip
    # The NumPy layer's batch: a's and b's broadcast with the leading dimensions of every scale
    # and zero point (all ones, or refused). The requantized scales and the output zero point
    # are {1.., M, 1} / {1.., 1, N} / {1.., 1, 1} tensors of the result's dimension count, so
    # that the result has those leading dimensions too.
    values = parameter_values(quantization)
    ndim = len(matrix_batch({"a": _known(a, "a"), "b": _known(b, "b"), **values})) + 2
    operands = matrix_quantizations(quantization, m, n, ndim)
    if packed is not None or b.numblocks[-2] == 1:
        return _packed_product(a, b, packed, operands, out_dtype, ndim)
    a_zero_point, b_zero_point = (
        _two_dimensional(operands.pop(name)) for name in ("a_zero_point", "b_zero_point")
    )
    accumulated = _exact_product(a, a_zero_point, b, b_zero_point)
    function = partial(requantize, output_dtype=out_dtype)
    return _map_blocks(function, {"accumulated": accumulated, **operands}, out_dtype)


def _packed_product(a: da.Array, b: da.Array, packed: PackedMatrix | None,
                    operands: dict[str, np.ndarray | None], out_dtype: np.dtype,
                    ndim: int) -> da.Array:  # fmt: skip
    """The product where B is one chunk along K: B packed once per block (or ``packed``, B's
    one block, as given), each tile the NumPy layer's multiply of an A block by a packed block.

    ``operands`` are the scales and zero points as the result's {1.., M, 1} / {1.., 1, N} /
    {1.., 1, 1} tensors, of the result's ``ndim`` dimensions.
    """
    batch = tuple(f"batch{i}" for i in range(ndim - 2))
    a_index = (*batch[len(batch) + 2 - a.ndim :], "m", "k")
    b_index = (*batch[len(batch) + 2 - b.ndim :], "k", "n")
    a = a.rechunk({a.ndim - 1: -1} | (_whole_along_batch_of(b, a.ndim) if packed is not None else {}))
    _, (a, b) = da.core.unify_chunks(a, a_index, b, b_index, warn=False)
    packings = _packings(b, b_index, operands) if packed is None else _one_block(packed, b)
    out_index = (*batch, "m", "n")
    requantization = [
        item
        for name in ("a_scale", "a_zero_point", "output_scale", "output_zero_point")
        for item in _indexed(operands[name], out_index)
    ]
    # concatenate=False: the A block and the packing come as one-element lists along K (one chunk).
    result: da.Array = da.blockwise(
        _multiply_block, out_index, a, a_index, packings, b_index, *requantization,
        concatenate=False, dtype=out_dtype, meta=np.empty((0,) * ndim, out_dtype),
        output_dtype=out_dtype, token="quantized_linear_matrix_multiply",
    )  # fmt: skip
    return result


def _whole_along_batch_of(b: da.Array, a_ndim: int) -> dict[int, int]:
    """Rechunking of ``a`` to one chunk along each batch dimension where ``b``'s is not 1."""
    shared = range(3, min(a_ndim, b.ndim) + 1)
    return {a_ndim - i: -1 for i in shared if b.shape[-i] != 1}


def _packings(b: da.Array, b_index: tuple[str, ...], operands: dict[str, np.ndarray | None]) -> da.Array:
    """One :func:`dmlq.pack_matrix_multiply_b` task per block of ``b`` (one chunk along K), with
    the block's columns of the scale and zero point: a Dask array of PackedMatrix blocks."""
    columns = [
        item
        for name in ("b_scale", "b_zero_point")
        for item in _indexed(_two_dimensional(operands[name]), ("k", "n"))
    ]
    packings: da.Array = da.blockwise(
        numpy_api.pack_matrix_multiply_b, b_index, b, b_index, *columns,
        dtype=object, meta=np.empty((0,) * b.ndim, object), token="pack_matrix_multiply_b",
    )  # fmt: skip
    return packings


def _shape_of(packed: PackedMatrix) -> da.Array:
    """B's shape and data type as one Dask chunk, for the shape rules and the blocks' alignment;
    its data is never computed (the tiles take the packing), so B is not unpacked for it."""
    empty: da.Array = da.empty(packed.shape, dtype=packed.dtype, chunks=-1)
    return empty


def _one_block(packed: PackedMatrix, b: da.Array) -> da.Array:
    """A Dask array of ``b``'s shape whose one block is ``packed``."""
    # Named by identity: a packing cannot change, and hashing B's bytes would unpack them.
    name = f"packed-matrix-{tokenize(id(packed), packed.shape, str(packed.dtype))}"
    graph = {(name, *(0,) * b.ndim): packed}
    return da.Array(graph, name, chunks=b.chunks, meta=np.empty((0,) * b.ndim, object))


def _two_dimensional(value: np.ndarray | None) -> np.ndarray | None:
    """A {1.., M, 1} / {1.., 1, N} / {1.., 1, 1} tensor without its leading ones, as the 2-D
    products (packings, exact blocks) take it."""
    return None if value is None else value.reshape(value.shape[-2:])


def _multiply_block(a_blocks: list[np.ndarray], packings: list[PackedMatrix], a_scale: np.ndarray,
                    a_zero_point: np.ndarray | None, output_scale: np.ndarray,
                    output_zero_point: np.ndarray | None, *,
                    output_dtype: np.dtype) -> np.ndarray:  # fmt: skip
    (a,), (packed,) = a_blocks, packings
    return numpy_api.quantized_linear_matrix_multiply(
        a, a_scale, a_zero_point, packed, None, None, output_scale, output_zero_point, dtype=output_dtype
    )


def _exact_product(a: da.Array, a_zero_point: np.ndarray | None, b: da.Array,
                   b_zero_point: np.ndarray | None) -> da.Array:  # fmt: skip
    """``(A - AZP) @ (B - BZP)`` as exact int64: one product per K chunk, summed over K chunks.

    The zero points are ``[M, 1]`` / ``[1, N]`` arrays (or None), indexed like ``a`` / ``b``.
    """
    batch = tuple(f"batch{i}" for i in range(max(a.ndim, b.ndim) - 2))
    a_index = (*batch[len(batch) + 2 - a.ndim :], "m", "k")
    b_index = (*batch[len(batch) + 2 - b.ndim :], "k", "n")
    arguments = (a, a_index, b, b_index, *_indexed(a_zero_point, ("m", "k")),
                 *_indexed(b_zero_point, ("k", "n")))  # fmt: skip
    # Aligned here (K chunks to their common refinement) without Dask's warning that the result
    # has more blocks than an operand: an M x K x N grid of partial products always has.
    _, aligned = da.core.unify_chunks(*arguments, warn=False)
    products = da.blockwise(
        _partial_product, (*batch, "m", "k", "n"), *_interleaved(aligned, arguments[1::2]),
        adjust_chunks={"k": 1}, align_arrays=False, dtype=np.int64,
        meta=np.empty((0,) * (len(batch) + 3), np.int64),
    )  # fmt: skip
    summed: da.Array = products.sum(axis=-2, dtype=np.int64)
    return summed


def _interleaved(arrays: Sequence[object], indices: Sequence[object]) -> list[object]:
    return [item for pair in zip(arrays, indices) for item in pair]


def _indexed(zero_point: np.ndarray | None, index: tuple[str, ...]) -> tuple[object, object]:
    """A blockwise argument pair: the zero point cut like its operand, or a constant None."""
    return (None, None) if zero_point is None else (_lazy(zero_point), index)


def _partial_product(a: np.ndarray, b: np.ndarray, a_zero_point: np.ndarray | None,
                     b_zero_point: np.ndarray | None) -> np.ndarray:  # fmt: skip
    """One K chunk's exact product, with a K axis of length 1 for the sum over K chunks.

    float64 (BLAS) is exact here: every term is an integer below 2**16 in magnitude, so every
    partial sum is an exact integer while a K chunk is shorter than 2**53 / 255**2 (~1.4e11).
    """
    product: np.ndarray = np.matmul(centred(a, a_zero_point).astype(np.float64),
                        centred(b, b_zero_point).astype(np.float64))  # fmt: skip
    return product.astype(np.int64)[..., np.newaxis, :]
