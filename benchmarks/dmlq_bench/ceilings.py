"""The machine's own limits, measured by bare loops: a level's multiply peak and memory bandwidth.

The loops are C (``ceilings.c`` beside this file), built with the C compiler Python was built with
on first use and loaded with ctypes; they are the benchmark's, not dmlq's. Each figure is the
best of ``SAMPLES`` runs of at least ``sample_seconds`` each (``SAMPLE_SECONDS`` unless given).

- ``multiply_peak(level, threads)``: GOPS (2 operations per product, per second of each thread's
  CPU time: another program's turns on a core do not lower it) of the instruction the level's
  matrix multiply kernel is built on, in a loop shaped as the kernel's tile (operands loaded from
  L1 and broadcast, one accumulator per row and vector): ``vpdpbusd`` zmm at ``avx512_vnni`` (64 u8
  x s8 products), ``vpmaddwd`` + ``vpaddd`` ymm at ``avx2`` and ``avx512`` (16 exact int16 products;
  both levels multiply with the AVX2 kernel), and SSE2 ``pmaddwd`` + ``paddd`` at ``portable`` (what
  its C loop compiles to on x86-64). None at ``amx``: its tdpbusd needs the tile state, not probed.
- ``fma_peak(level, threads)``: GFLOPS (2 per fused multiply-add) of ``vfmadd231ps``, the float GEMM's
  instruction, in the same way in its kernel's tile: zmm (14 rows x 2 vectors) at ``avx512`` and
  above, ymm (6 x 2) at ``avx2``. None at ``portable`` (its C loop calls ``fmaf``: no vector peak).
- ``memory_bandwidth(kind, size, threads)``: bytes per (wall-clock) second that ``threads`` threads
  move in passes over a buffer of ``size`` bytes, each its own share, again and again: ``read``
  (loads only), ``write`` (stores only) or ``copy`` (to a second such buffer, counting the bytes read
  and the bytes written). A buffer the size of an operand comes from L2, L3 or DRAM as the operand
  does. Writes and copies run with ordinary and with non-temporal stores, and the faster counts (the
  result names it): past the last-level cache non-temporal stores win, since they skip reading each
  line in before writing it (dmlq's element-wise kernels stream outputs of 8 MiB and more for that
  reason); in the caches ordinary stores win by far.
- ``best_of_fewer_threads(rates)``: a limit at T threads is the best of T threads or fewer (a thread
  can stay idle).

The loops are x86-64 code: elsewhere, and without a C compiler, the probes raise ``CeilingError``.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import subprocess
import sysconfig
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import NamedTuple, TypeVar

import numpy as np

SOURCE = Path(__file__).with_name("ceilings.c")
SAMPLES = 7
SAMPLE_SECONDS = 0.02
# level: (the loop's kind in ceilings.c, products per step of its loop, the instruction)
MULTIPLY_LOOPS = {
    "avx512_vnni": (2, 24 * 64, "vpdpbusd zmm"),
    "avx512": (1, 12 * 16, "vpmaddwd + vpaddd ymm"),
    "avx2": (1, 12 * 16, "vpmaddwd + vpaddd ymm"),
    "portable": (0, 12 * 8, "pmaddwd + paddd xmm (SSE2)"),
}
# level: (the loop's kind in ceilings.c, float products per step of its loop, the instruction)
FMA_LOOPS = {
    "avx512_vnni": (4, 28 * 16, "vfmadd231ps zmm"),
    "avx512": (4, 28 * 16, "vfmadd231ps zmm"),
    "avx2": (3, 12 * 8, "vfmadd231ps ymm"),
}
PASSES = {"read": 0, "write": 1, "copy": 2}  # the tasks of dmlq_probe_memory in ceilings.c
STORES = {"ordinary": 0, "non-temporal": 1}
STEP = 256  # bytes each thread moves per step of a memory pass


class CeilingError(RuntimeError):
    """The probes cannot be built or run here."""


@cache
def _library() -> ctypes.CDLL:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise CeilingError(f"the probes are x86-64 loops; this machine is {platform.machine()}")
    source = SOURCE.read_bytes()
    path = Path(tempfile.gettempdir()) / f"dmlq-bench-ceilings-{hashlib.sha256(source).hexdigest()[:16]}.so"
    if not path.exists():
        compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")[:1]
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        command = [*compiler, "-O2", "-shared", "-fPIC", "-pthread", str(SOURCE), "-o", str(partial)]
        try:
            built = subprocess.run(command, capture_output=True, text=True)
        except OSError as error:
            raise CeilingError(f"cannot run the C compiler {compiler[0]!r}: {error}") from None
        if built.returncode != 0:
            raise CeilingError(f"building {SOURCE.name} failed: {' '.join(command)}\n{built.stderr}")
        os.replace(partial, path)
    library = ctypes.CDLL(str(path))
    library.dmlq_probe_multiply.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int]
    library.dmlq_probe_memory.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                          ctypes.c_size_t, ctypes.c_long, ctypes.c_int]  # fmt: skip
    library.dmlq_probe_multiply.restype = library.dmlq_probe_memory.restype = ctypes.c_double
    return library


def _best_rate(run, work_per_round: float, sample_seconds: float) -> float:
    """Work per second: rounds doubled until a run lasts ``sample_seconds``, then the best of SAMPLES runs
    (a limit: on a shared machine other work only slows a run down)."""
    rounds = 1
    while (seconds := run(rounds)) < sample_seconds:
        if seconds < 0:
            raise CeilingError("a probe could not run: the memory passes need AVX2, every probe its threads")
        rounds *= 2
    return max(rounds * work_per_round / run(rounds) for _ in range(SAMPLES))


def multiply_instruction(level: str) -> str | None:
    """The instruction whose loop gives ``level``'s peak, or None."""
    loop = MULTIPLY_LOOPS.get(level)
    return loop[2] if loop else None


def multiply_peak(level: str, threads: int, sample_seconds: float = SAMPLE_SECONDS) -> float | None:
    """GOPS of ``level``'s multiply instruction on ``threads`` threads (None: no loop for it)."""
    return _loop_peak(MULTIPLY_LOOPS.get(level), threads, sample_seconds)


def fma_instruction(level: str) -> str | None:
    """The instruction whose loop gives ``level``'s float peak, or None."""
    loop = FMA_LOOPS.get(level)
    return loop[2] if loop else None


def fma_peak(level: str, threads: int, sample_seconds: float = SAMPLE_SECONDS) -> float | None:
    """GFLOPS of ``level``'s float GEMM instruction on ``threads`` threads (None: no loop for it)."""
    return _loop_peak(FMA_LOOPS.get(level), threads, sample_seconds)


def _loop_peak(loop: tuple[int, int, str] | None, threads: int, sample_seconds: float) -> float | None:
    if loop is None:
        return None
    kind, products, _ = loop
    library = _library()
    operations = 2.0 * products * threads

    def run(rounds: int) -> float:
        return library.dmlq_probe_multiply(kind, rounds, threads)

    return _best_rate(run, operations, sample_seconds) / 1e9


class Bandwidth(NamedTuple):
    bytes_per_second: float
    stores: str | None  # write and copy: "ordinary" or "non-temporal", whichever was faster; read: None


def _buffer(size: int) -> np.ndarray:
    """``size`` bytes aligned to 64, written once so that its pages are real."""
    memory = np.ones(size + 64, np.uint8)
    start = -memory.ctypes.data % 64
    return memory[start : start + size]


def _whole_steps(size: int, threads: int) -> int:
    """``size`` rounded up to whole steps of ``threads`` threads, at least one.

    >>> _whole_steps(1000, 2), _whole_steps(0, 1)
    (1024, 256)
    """
    step = STEP * threads
    return max(step, -(-size // step) * step)


def multiply_step_operations(level: str) -> float | None:
    """Operations in one step of ``level``'s multiply loop on one thread (None: no loop for it)."""
    loop = MULTIPLY_LOOPS.get(level)
    return None if loop is None else 2.0 * loop[1]


def multiplying(level: str, operations: float) -> Callable[[int], Callable[[], float]]:
    """``prepare`` for a timed contender: ``level``'s multiply loop (``multiply_peak``'s, which the
    level must have) doing ``operations`` operations per call, shared by the block's threads and
    rounded to whole steps of each. The probe starts its threads once per call, so a call should be
    long enough to hide that."""
    kind, step = MULTIPLY_LOOPS[level][0], multiply_step_operations(level)
    assert step is not None
    library = _library()

    def prepare(threads: int) -> Callable[[], float]:
        rounds = max(1, round(operations / (step * threads)))
        return lambda: library.dmlq_probe_multiply(kind, rounds, threads)

    return prepare


def reading(size: int, passes: int) -> Callable[[int], Callable[[], float]]:
    """``prepare`` for a timed contender: ``passes`` read passes, as memory_bandwidth("read") makes, over
    a buffer of ``size`` bytes (rounded up to whole steps) on the block's threads, per call. The
    probe starts its threads once per call, so a call should make enough passes to hide that."""
    library = _library()

    def prepare(threads: int) -> Callable[[], float]:
        source = _buffer(_whole_steps(size, threads))
        return lambda: library.dmlq_probe_memory(PASSES["read"], 0, source.ctypes.data, None, source.size,
                                                 passes, threads)  # fmt: skip

    return prepare


def memory_bandwidth(kind: str, size: int, threads: int, sample_seconds: float = SAMPLE_SECONDS) -> Bandwidth:
    """Bytes per second that ``threads`` threads move in ``kind`` passes ("read", "write" or "copy")
    over a buffer of ``size`` bytes (rounded up to whole steps); a copy counts bytes read and written."""
    size = _whole_steps(size, threads)
    library = _library()
    source = None if kind == "write" else _buffer(size)
    target = None if kind == "read" else _buffer(size)
    addresses = [None if buffer is None else buffer.ctypes.data for buffer in (source, target)]
    moved = float(size * (2 if kind == "copy" else 1))

    def rate(streaming: int) -> float:
        def run(repeats: int) -> float:
            return library.dmlq_probe_memory(PASSES[kind], streaming, *addresses, size, repeats, threads)

        return _best_rate(run, moved, sample_seconds)

    if kind == "read":
        return Bandwidth(rate(0), None)
    return max(Bandwidth(rate(flag), stores) for stores, flag in STORES.items())


Rate = TypeVar("Rate", float, Bandwidth)


def best_of_fewer_threads(rates: dict[int, Rate | None]) -> dict[str, Rate | None]:
    """Per thread count, the best rate of that many threads or fewer (a thread can stay idle).

    >>> best_of_fewer_threads({1: 20.0, 2: 15.0})
    {'1': 20.0, '2': 20.0}
    >>> best_of_fewer_threads({1: None, 2: None})
    {'1': None, '2': None}
    """
    found, best = {}, None
    for threads in sorted(rates):
        rate = rates[threads]
        best = rate if best is None or (rate is not None and rate > best) else best
        found[str(threads)] = best
    return found
