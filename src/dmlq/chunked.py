"""Quantize or dequantize an array file chunk by chunk: Zarr or ``.npy`` in, Zarr or ``.npy`` out.

The job behind ``dmlq quantize`` and ``dmlq dequantize``. A path ending in ``.npy`` is a NumPy
file, any other path a Zarr array. The input is read in chunks of about ``chunk_mb`` MiB, each
chunk goes through :mod:`dmlq.dask` and is written as soon as it is done, so memory stays near
``chunk_mb`` times a few per worker thread whatever the array's size (a chunk is measured on the
larger side, input or output: a dequantized chunk of ``chunk_mb`` MiB comes from a quarter as many
int8 bytes). A Zarr input is read in
whole Zarr chunks, at least one at a time even when a Zarr chunk is bigger than ``chunk_mb``, and
a Zarr output keeps a Zarr input's chunk shape. ``scheduler`` is ``"threads"`` (Dask's threaded
scheduler in this process) or the address of a ``dask.distributed`` scheduler, whose workers
must see the same paths. A progress bar goes to stderr with ``progress=True``; ``dmlq`` draws it
when stderr is a terminal, unless ``--quiet``. The suffix ``.npy`` is matched in any case.

With a 4-bit ``dtype`` (``"int4"``/``"uint4"``) or a ``block_size`` along ``axis`` (ONNX's
blocks, opset 21), ``scale`` and ``zero_point`` hold one value or one per block along the axis
(shared by every other index), chunks are cut on block boundaries, and 4-bit data is held as
int8/uint8 values, one per byte, in ``.npy`` files and Zarr arrays alike (NumPy has no 4-bit
dtype; ``dmlq.pack_int4`` packs them as DirectML does).

Needs the ``dask`` extra; Dask is imported when a job runs (``dmlq --help`` works without it).

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> np.save(folder / "x.npy", np.float32([[0.5, 1.5], [-1.0, 4.0]]))
>>> quantize_file(folder / "x.npy", folder / "q.zarr", [1.0, 0.5], np.int8(0), axis=1, progress=False)
>>> import zarr
>>> zarr.open_array(str(folder / "q.zarr"), mode="r")[:]
array([[ 0,  3],
       [-1,  8]], dtype=int8)
>>> dequantize_file(folder / "q.zarr", folder / "y.npy", [1.0, 0.5], np.int8(0), axis=1, progress=False)
>>> np.load(folder / "y.npy")
array([[ 0. ,  1.5],
       [-1. ,  4. ]], dtype=float32)
>>> quantize_file(folder / "x.npy", folder / "q4.npy", [1.0, 0.5], dtype="int4", axis=0, block_size=1,
...               progress=False)
>>> np.load(folder / "q4.npy")  # int4 values, one per byte
array([[ 0,  2],
       [-2,  7]], dtype=int8)
"""

from __future__ import annotations

# mypy: allow-untyped-calls
# (Dask and distributed leave most of their functions untyped; every function here is typed.)
import argparse
import contextlib
import dataclasses
import importlib
import math
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, overload

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .errors import DmlError
from .int4 import four_bit_dtype
from .reference.saturate import integer_range

if TYPE_CHECKING:
    import dask.array as da
    from dask.delayed import Delayed

ZarrArray = Any  # a zarr.Array: Zarr is optional (Python >= 3.11), so its types are not named here
N = TypeVar("N", int, float)

__all__ = [
    "DEFAULT_CHUNK_MB",
    "NpyFile",
    "add_dequantize",
    "add_quantize",
    "dequantize_file",
    "quantize_file",
]

DEFAULT_CHUNK_MB = 64


@dataclass(frozen=True)
class NpyFile:
    """A ``.npy`` file read and written by regions, through a memory map opened for each access.

    It travels to worker processes as its path, and each access unmaps the file again, so the
    pages a region touched do not stay in the process.
    """

    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @classmethod
    def open(cls, path: Path) -> NpyFile:
        header = np.load(path, mmap_mode="r")
        return cls(str(path), header.shape, header.dtype, np.isfortran(header))

    @classmethod
    def create(cls, path: Path, shape: tuple[int, ...], dtype: np.dtype, fortran_order: bool) -> NpyFile:
        np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape, fortran_order=fortran_order)
        return cls(str(path), tuple(shape), np.dtype(dtype), fortran_order)

    def __getitem__(self, region: tuple[slice, ...]) -> np.ndarray:
        return np.array(np.load(self.path, mmap_mode="r")[region])

    def __setitem__(self, region: tuple[slice, ...], values: np.ndarray) -> None:
        np.load(self.path, mmap_mode="r+")[region] = values


def quantize_file(source: str | Path, target: str | Path, scale: ArrayLike,
                  zero_point: ArrayLike | None = None, *, dtype: DTypeLike | None = None,
                  axis: int | None = None, block_size: int = 0, chunk_mb: float = DEFAULT_CHUNK_MB,
                  scheduler: str = "threads", progress: bool = True) -> None:  # fmt: skip
    """Write :func:`dmlq.quantize_linear` of the array in ``source`` to ``target``.

    ``scale`` and ``zero_point`` broadcast like the NumPy layer's, to the input's shape; with
    ``axis``, each is one value or a sequence of one value per index along that axis (per-channel),
    or per block of ``block_size`` with a block size or a 4-bit ``dtype`` (see the module's notes).
    """
    if _is_four_bit(dtype) or block_size:

        def quantize_blocks(x: da.Array) -> da.Array:
            return _BlockJob.checked(x, scale, zero_point, dtype or "uint8", axis, block_size).quantized()

        _transform(Path(source), Path(target), quantize_blocks, chunk_mb, scheduler, progress,
                   output_itemsize=1, blocks=(axis, block_size or 1))  # fmt: skip
        return

    def quantize(x: da.Array) -> da.Array:
        from . import dask as dmlq_dask

        return dmlq_dask.quantize_linear(x, _along_axis(scale, "scale", axis, x.shape),
                                         _along_axis(zero_point, "zero_point", axis, x.shape),
                                         dtype=dtype)  # fmt: skip

    _transform(Path(source), Path(target), quantize, chunk_mb, scheduler, progress, output_itemsize=1)


def dequantize_file(source: str | Path, target: str | Path, scale: ArrayLike,
                    zero_point: ArrayLike | None = None, *, dtype: DTypeLike | None = None,
                    axis: int | None = None, block_size: int = 0, chunk_mb: float = DEFAULT_CHUNK_MB,
                    scheduler: str = "threads", progress: bool = True) -> None:  # fmt: skip
    """Write :func:`dmlq.dequantize_linear` of the array in ``source`` to ``target``.

    ``scale``, ``zero_point``, ``axis`` and ``block_size`` as for :func:`quantize_file`; ``dtype``
    ``"int4"``/``"uint4"`` reads the input's int8/uint8 values as 4-bit ones (each must be in range).
    """
    if _is_four_bit(dtype) or block_size:

        def dequantize_blocks(q: da.Array) -> da.Array:
            return _BlockJob.checked(q, scale, zero_point, dtype or q.dtype, axis, block_size).dequantized()

        _transform(Path(source), Path(target), dequantize_blocks, chunk_mb, scheduler, progress,
                   output_itemsize=np.dtype(np.float32).itemsize, blocks=(axis, block_size or 1))  # fmt: skip
        return

    def dequantize(q: da.Array) -> da.Array:
        from . import dask as dmlq_dask

        return dmlq_dask.dequantize_linear(q, _along_axis(scale, "scale", axis, q.shape),
                                           _along_axis(zero_point, "zero_point", axis, q.shape))  # fmt: skip

    _transform(Path(source), Path(target), dequantize, chunk_mb, scheduler, progress,
               output_itemsize=np.dtype(np.float32).itemsize)  # fmt: skip


@overload
def _along_axis(values: None, name: str, axis: int | None, shape: tuple[int, ...]) -> None: ...
@overload
def _along_axis(values: ArrayLike, name: str, axis: int | None, shape: tuple[int, ...]) -> ArrayLike: ...
def _along_axis(
    values: ArrayLike | None, name: str, axis: int | None, shape: tuple[int, ...]
) -> ArrayLike | None:
    """``values`` unchanged without an axis, else laid along ``axis`` of an array of ``shape``:
    one value for every index, or one value per index.

    NumPy values keep their dtype and Python numbers stay Python numbers, as the NumPy layer's
    dtype rules tell them apart.
    """
    if values is None or axis is None:
        return values
    ndim = len(shape)
    if not -ndim <= axis < ndim:
        raise DmlError(f"axis: {axis} is out of range for an array of {ndim} dimensions")
    if np.size(values) not in (1, shape[axis]):
        raise DmlError(f"{name}: {np.size(values)} values for axis {axis} of length {shape[axis]}; "
                       "give one value, or one per index along the axis")  # fmt: skip
    laid_out = [1] * ndim
    laid_out[axis] = -1
    if isinstance(values, (np.ndarray, np.generic)):
        return np.reshape(values, laid_out)
    nested: list[Any] = np.reshape(np.array(values, dtype=object), laid_out).tolist()
    return nested


def _is_four_bit(dtype: DTypeLike | None) -> bool:
    if isinstance(dtype, str):
        return dtype in ("int4", "uint4")  # NumPy reads "int4" as int32
    return dtype is not None and np.dtype(dtype).name in ("int4", "uint4")


class _Blocking(TypedDict, total=False):
    """The NumPy layer's blockwise arguments."""

    axis: int
    block_size: int


@dataclass(frozen=True)
class _BlockJob:
    """A 4-bit or blockwise job on a Dask array: one scale (and zero point) per block of ``size``
    along ``axis`` (size 1: per index; no axis: one for the whole array)."""

    data: da.Array  # a Dask array, its chunks cut on block boundaries (by _read)
    scales: np.ndarray  # float32, one per block (or one)
    zero_points: np.ndarray | None  # the integer type's values, one per block (or one)
    dtype: np.dtype  # the integer type: int8, uint8 or ml_dtypes' int4, uint4
    axis: int | None
    size: int

    @classmethod
    def checked(
        cls,
        data: da.Array,
        scale: ArrayLike,
        zero_point: ArrayLike | None,
        dtype: DTypeLike,
        axis: int | None,
        block_size: int,
    ) -> _BlockJob:
        if block_size < 0:
            raise DmlError(f"block_size: must be positive (got {block_size})")
        if block_size and axis is None:
            raise DmlError("block_size: blocks run along an axis; give one")
        dtype = four_bit_dtype(dtype) if _is_four_bit(dtype) else np.dtype(dtype)
        if axis is None:
            job = cls(data, np.array([], np.float32), None, dtype, None, 0)
        else:
            axis = _checked_axis(axis, data.ndim)
            size = block_size or 1
            if data.shape[axis] % size:
                raise DmlError(f"block_size: {size} does not divide axis {axis} of length {data.shape[axis]}")
            job = cls(data, np.array([], np.float32), None, dtype, axis, size)
        scales = job._per_block(scale, "scale").astype(np.float32)
        zero_points = None if zero_point is None else job._integers(job._per_block(zero_point, "zero_point"))
        return dataclasses.replace(job, scales=scales, zero_points=zero_points)

    @property
    def blocks(self) -> int:
        return 1 if self.axis is None else self.data.shape[self.axis] // self.size

    def _per_block(self, values: ArrayLike, name: str) -> np.ndarray:
        flat = np.asarray(values).reshape(-1)
        if flat.size not in (1, self.blocks):
            raise DmlError(f"{name}: {flat.size} values for {self.blocks} blocks of {self.size} along axis "
                           f"{self.axis}; give one value, or one per block")  # fmt: skip
        return np.broadcast_to(flat, (self.blocks,))

    def _integers(self, values: np.ndarray, name: str = "zero_point") -> np.ndarray:
        """``values`` in the job's integer type; DmlError naming ``name`` for one out of its range."""
        low, high = integer_range(self.dtype)
        wide = np.asarray(values, np.float64)
        outside = (wide < low) | (wide > high) | (wide != np.round(wide))
        if outside.any():
            first = np.asarray(values).reshape(-1)[outside.reshape(-1).argmax()]
            raise DmlError(f"{name}: {first} is not an integer from {low} to {high} "
                           f"({self.dtype.name})")  # fmt: skip
        return wide.astype(np.int64).astype(self.dtype)

    @overload
    def _for_chunk(self, per_block: None, shape: tuple[int, ...], start: int) -> None: ...
    @overload
    def _for_chunk(self, per_block: np.ndarray, shape: tuple[int, ...], start: int) -> np.ndarray: ...
    def _for_chunk(self, per_block: np.ndarray | None, shape: tuple[int, ...],
                   start: int) -> np.ndarray | None:  # fmt: skip
        """The values of a chunk of ``shape`` starting at ``start`` along the axis, in ONNX's blocked
        layout: the chunk's shape with its axis counted in blocks."""
        if per_block is None or self.axis is None:
            return None if per_block is None else per_block[0]
        count = shape[self.axis] // self.size
        laid_out = [1] * len(shape)
        laid_out[self.axis] = count
        blocked = list(shape)
        blocked[self.axis] = count
        first = start // self.size
        return np.broadcast_to(per_block[first : first + count].reshape(laid_out), blocked)

    def _map(
        self, function: Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray], dtype: np.dtype
    ) -> da.Array:
        def chunk(values: np.ndarray, block_info: dict[int, dict[str, Any]] | None = None) -> np.ndarray:
            start = 0
            if self.axis is not None:
                assert block_info is not None, "Dask passes block_info to a function that takes it"
                start = block_info[0]["array-location"][self.axis][0]
            scale = self._for_chunk(self.scales, values.shape, start)
            zero_point = self._for_chunk(self.zero_points, values.shape, start)
            return function(values, scale, zero_point)

        import dask.array as da

        # da.map_blocks is what Array.map_blocks calls; the method's own type lost its self (functools.wraps)
        mapped: da.Array = da.map_blocks(chunk, self.data, dtype=dtype)
        return mapped

    @property
    def _blocking(self) -> _Blocking:
        return {} if self.axis is None else {"axis": self.axis, "block_size": self.size}

    def quantized(self) -> da.Array:
        """The data quantized, 4-bit results as int8/uint8 values."""
        from .numpy_api import quantize_linear

        values_dtype = _values_dtype(self.dtype)

        def quantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
            q = quantize_linear(x, scale, zero_point, dtype=self.dtype, **self._blocking)
            return q.astype(values_dtype)

        return self._map(quantize, values_dtype)

    def dequantized(self) -> da.Array:
        """The data (int8/uint8 values, read as the job's type) dequantized to float32."""
        from .numpy_api import dequantize_linear

        if self.data.dtype != _values_dtype(self.dtype):
            raise DmlError(f"dtype: {self.dtype.name} data is read from {_values_dtype(self.dtype).name} "
                           f"values, not {self.data.dtype}")  # fmt: skip

        def dequantize(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
            return dequantize_linear(self._integers(q, "IN"), scale, zero_point, **self._blocking)

        return self._map(dequantize, np.dtype(np.float32))


def _checked_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise DmlError(f"axis: {axis} is out of range for an array of {ndim} dimensions")
    return axis % ndim


def _values_dtype(dtype: np.dtype) -> np.dtype:
    """How files hold an integer type: 4-bit values in int8/uint8, one per byte."""
    return np.dtype({"int4": np.int8, "uint4": np.uint8}.get(dtype.name, dtype))


def _transform(source: Path, target: Path, function: Callable[[da.Array], da.Array], chunk_mb: float,
               scheduler: str, progress: bool, *, output_itemsize: int,
               blocks: tuple[int | None, int] | None = None) -> None:  # fmt: skip
    """``function`` of the Dask array read from ``source``, stored into ``target``; ``blocks``
    (an axis, a block size) cuts the chunks on block boundaries."""
    if not chunk_mb > 0:
        raise DmlError(f"chunk_mb: must be positive (got {chunk_mb})")
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such file or directory")
    if target.exists():
        raise FileExistsError(f"{target}: already exists; remove it or write elsewhere")
    array = _open(source.resolve())
    chunk_elements = int(chunk_mb * 2**20) // max(array.dtype.itemsize, output_itemsize)
    data = _read(array, chunk_elements, blocks)
    result = function(data)  # builds the graph: argument errors raise here, before any writing
    if result.shape != data.shape:
        raise DmlError(f"scale, zero_point: they make the output {result.shape}, "
                       f"not the input's {data.shape}")  # fmt: skip
    try:  # from the output's creation on: an interrupt while the graph is built leaves a file too
        with _interrupts_held():  # Zarr creates an array on its own event loop, which Ctrl-C does not stop
            store = _write(result, target.resolve(), array)
        _run(store, scheduler, progress)
    except BaseException:
        with _interrupts_held():  # a second Ctrl-C does not leave half the output behind
            _remove(target)
        raise


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) during the block takes effect when the block is done, as it would have then."""
    if threading.current_thread() is not threading.main_thread():  # only it receives signals
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: held.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        signal.raise_signal(signal.SIGINT)


def _is_npy(path: Path) -> bool:
    return path.suffix.lower() == ".npy"


def _open(path: Path) -> NpyFile | ZarrArray:
    """The input: an :class:`NpyFile` or a Zarr array."""
    if _is_npy(path):
        return NpyFile.open(path)
    return _zarr(path).open_array(str(path), mode="r")


def _zarr(path: Path) -> ModuleType:
    """The ``zarr`` module, for reading or writing the Zarr array at ``path``."""
    try:
        zarr = importlib.import_module("zarr")  # by name: mypy need not find it where it is not installed
    except ImportError:
        raise DmlError(f"{path}: Zarr arrays need Python >= 3.11 and zarr >= 3 (pip install 'zarr>=3'); "
                       "a path ending in .npy needs neither") from None  # fmt: skip
    return zarr


def _read(
    array: NpyFile | ZarrArray, chunk_elements: int, blocks: tuple[int | None, int] | None = None
) -> da.Array:
    """The input as a Dask array of blocks of about ``chunk_elements``.

    A ``.npy`` file's blocks are contiguous byte ranges, read in few pieces through the memory
    map. A Zarr array's blocks are whole multiples of its chunks, at least one chunk each, so that
    no two blocks share a chunk of an output chunked like the input. With ``blocks`` (an axis, a
    block size), they are also whole multiples of the block size along the axis.
    """
    import dask.array as da

    npy = isinstance(array, NpyFile)
    unit = list((1,) * array.ndim if isinstance(array, NpyFile) else array.chunks)
    axis, size = blocks or (None, 1)
    if axis is not None and -array.ndim <= axis < array.ndim:  # else the job names the bad axis
        unit[axis] = math.lcm(unit[axis], size)
    if npy:
        block = _block_shape(array.shape, chunk_elements, tuple(unit), array.fortran_order)
        data: da.Array = da.from_array(array, chunks=block, lock=False)
    else:
        data = da.from_zarr(array, chunks=_block_shape(array.shape, chunk_elements, tuple(unit)))
    return data


def _block_shape(shape: tuple[int, ...], limit: int, unit: tuple[int, ...],
                 fortran_order: bool = False) -> tuple[int, ...]:  # fmt: skip
    """The largest block of whole ``unit`` multiples within ``limit`` elements (at least one unit).

    It grows along the innermost axis first (the last, or the first in Fortran order), and along
    each next axis only once the block spans the inner ones whole.
    """
    block = [max(1, min(size, length)) for size, length in zip(unit, shape)]
    axes = range(len(shape))
    for axis in axes if fortran_order else reversed(axes):
        units = max(1, limit // math.prod(block))
        block[axis] = max(1, min(shape[axis], units * block[axis]))
        if block[axis] < shape[axis]:
            break
    return tuple(block)


def _write(result: da.Array, path: Path, source: NpyFile | ZarrArray) -> Delayed:
    """A lazy store of ``result`` into a new file, lock-free: each block writes whole Zarr chunks
    (a Zarr input's, which the blocks are multiples of, or else the first block's shape) or a
    region of a ``.npy`` file laid out like a ``.npy`` input."""
    import dask.array as da

    from_npy = isinstance(source, NpyFile)
    if _is_npy(path):
        target = NpyFile.create(path, result.shape, result.dtype, from_npy and source.fortran_order)
    else:
        chunks = (
            tuple(max(sizes[0], 1) for sizes in result.chunks)
            if isinstance(source, NpyFile)
            else source.chunks
        )
        target = _zarr(path).open_array(str(path), mode="w-", shape=result.shape, dtype=result.dtype,
                                        chunks=chunks)  # fmt: skip
    # Dask types store's targets as ArrayLike; it only writes through their __setitem__, which NpyFile has
    store: Delayed = da.store(result, target, lock=False, compute=False)  # type: ignore[arg-type]
    return store


def _run(store: Delayed, scheduler: str, progress: bool) -> None:
    if scheduler == "threads":
        from dask.diagnostics.progress import ProgressBar

        with _threads() as pool, ProgressBar(out=sys.stderr) if progress else contextlib.nullcontext():
            store.compute(scheduler="threads", pool=pool)
        return
    from distributed import Client
    from distributed import progress as show_progress

    with Client(scheduler) as client:
        future = client.compute(store)
        if progress:
            with contextlib.redirect_stdout(sys.stderr):  # distributed draws its bar on stdout
                show_progress(future)
        future.result()


@contextlib.contextmanager
def _threads() -> Iterator[ThreadPoolExecutor]:
    """A thread pool for one job, as many threads as Dask's own, shut down at the end of the block
    once its running tasks are done, whatever ends it: an interrupt stops only the thread that waits
    for the tasks, and the output is removed after the last write into it, not during one."""
    import dask
    from dask.system import CPU_COUNT

    pool = ThreadPoolExecutor(dask.config.get("num_workers", None) or CPU_COUNT)
    try:
        yield pool
    finally:
        with _interrupts_held():
            pool.shutdown(wait=True, cancel_futures=True)


def _remove(path: Path) -> None:
    """Delete a partly written output."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


# -- the dmlq quantize / dequantize subcommands (registered in dmlq.cli) ---------------------------


def add_quantize(subcommands: argparse._SubParsersAction[Any]) -> None:
    parser = subcommands.add_parser(
        "quantize", help="quantize a Zarr or .npy array chunk by chunk",
        description="Quantize a Zarr array or .npy file to uint8, int8, uint4 or int4 (4-bit values "
        "written one per byte), chunk by chunk with bounded memory, into a new Zarr array or .npy file: "
        "clamp(round(x / scale) + zero_point).",
    )  # fmt: skip
    _add_job_arguments(parser, chunk_measure="input")
    parser.add_argument("--dtype", choices=("uint8", "int8", "uint4", "int4"),
                        help="output type (default: uint8); uint4 and int4 are written as uint8/int8 "
                        "values, one per byte")  # fmt: skip
    parser.set_defaults(handler=_quantize)


def add_dequantize(subcommands: argparse._SubParsersAction[Any]) -> None:
    parser = subcommands.add_parser(
        "dequantize", help="dequantize a Zarr or .npy array chunk by chunk",
        description="Dequantize a Zarr array or .npy file of integers to float32, chunk by chunk with "
        "bounded memory, into a new Zarr array or .npy file: (q - zero_point) * scale.",
    )  # fmt: skip
    _add_job_arguments(parser, chunk_measure="float32 output")
    parser.add_argument("--dtype", choices=("uint4", "int4"),
                        help="read the input's uint8/int8 values as 4-bit ones (each in range)")  # fmt: skip
    parser.set_defaults(handler=_dequantize)


def _add_job_arguments(parser: argparse.ArgumentParser, chunk_measure: str) -> None:
    """The options both jobs take; ``chunk_measure`` names the larger side, which ``--chunk-mb``
    measures (see :func:`_transform`)."""
    parser.add_argument("source", type=Path, metavar="IN", help="a Zarr array, or a file ending in .npy")
    parser.add_argument("target", type=Path, metavar="OUT",
                        help="a new .npy file if it ends so (any case), else a new Zarr array")  # fmt: skip
    parser.add_argument("--scale", type=_numbers(float), required=True, metavar="S",
                        help="the scale, or comma-separated scales, one per index along --axis")  # fmt: skip
    parser.add_argument("--zero-point", type=_numbers(int), metavar="Z",
                        help="the zero point, or one per index along --axis (default: 0; "
                        "write --zero-point=-3,4 for a list starting with a minus)")  # fmt: skip
    parser.add_argument("--axis", type=int, metavar="A",
                        help="the axis along which per-channel scales and zero points run")  # fmt: skip
    parser.add_argument("--block-size", type=int, default=0, metavar="N",
                        help="blocks of N along --axis, each with its own scale and zero point "
                        "(ONNX's block_size); N must divide the axis")  # fmt: skip
    parser.add_argument("--chunk-mb", type=float, default=DEFAULT_CHUNK_MB, metavar="N",
                        help=f"MiB of {chunk_measure} per chunk (default: {DEFAULT_CHUNK_MB}); a Zarr "
                        "input is read in whole Zarr chunks, one at a time if one is bigger")  # fmt: skip
    parser.add_argument("--scheduler", default="threads", metavar="threads|ADDRESS",
                        help="Dask's threaded scheduler (default), or the address of a "
                        "dask.distributed scheduler, e.g. tcp://127.0.0.1:8786")  # fmt: skip
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress bar (drawn only when stderr is a terminal anyway)")  # fmt: skip


def _numbers(kind: type[N]) -> Callable[[str], list[N]]:
    def parse(text: str) -> list[N]:
        try:
            return [kind(item) for item in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of "
                                             f"{kind.__name__} values") from None  # fmt: skip

    return parse


def _quantize(args: argparse.Namespace) -> int:
    return _run_job(quantize_file, args, dtype=args.dtype)


def _dequantize(args: argparse.Namespace) -> int:
    return _run_job(dequantize_file, args, dtype=args.dtype)


def _run_job(job: Callable[..., None], args: argparse.Namespace, **options: object) -> int:
    if args.block_size and args.axis is None:
        _fail("--block-size: blocks run along an axis; give --axis")
        return 2
    try:
        job(args.source, args.target, _per_axis(args.scale, args.axis, "--scale"),
            _per_axis(args.zero_point, args.axis, "--zero-point"), axis=args.axis,
            block_size=args.block_size, chunk_mb=args.chunk_mb, scheduler=args.scheduler,
            progress=not args.quiet and sys.stderr.isatty(), **options)  # fmt: skip
    except ImportError as error:
        if (error.name or "").partition(".")[0] not in ("dask", "distributed"):
            raise
        _fail(f"{error}; the quantize and dequantize commands need dmlq's dask extra: "
              "python -m pip install '.[dask]' in dmlq's checkout")  # fmt: skip
    except (OSError, ValueError) as error:  # files, an existing output, a refused argument
        _fail(_naming_options(str(error)))
    else:
        return 0
    return 2


def _per_axis(values: Sequence[float] | None, axis: int | None, option: str) -> object:
    """One value is per-tensor; several are one per index along ``--axis``."""
    if values is None or axis is not None:
        return values
    if len(values) > 1:
        raise DmlError(f"{option}: {len(values)} values need --axis")
    return values[0]


_OPTIONS = {"scale": "--scale", "zero_point": "--zero-point", "axis": "--axis", "chunk_mb": "--chunk-mb",
            "block_size": "--block-size", "dtype": "--dtype"}  # fmt: skip


def _naming_options(message: str) -> str:
    """An error about a parameter, naming the option that sets it."""
    name, colon, rest = message.partition(":")
    return _OPTIONS.get(name, name) + colon + rest


def _fail(message: str) -> None:
    print(f"dmlq: error: {message}", file=sys.stderr)
