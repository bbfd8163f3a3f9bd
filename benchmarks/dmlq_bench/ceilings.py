"""The machine's own limits, measured by bare loops: a level's multiply peak and the read bandwidth.

The loops are C (``ceilings.c`` beside this file), built with the C compiler Python was built with
on first use and loaded with ctypes; they are the benchmark's, not dmlq's. Each figure is the
best of ``SAMPLES`` runs of at least ``SAMPLE_SECONDS`` each.

- ``multiply_peak(level, threads)``: GOPS (2 operations per product, per second of each thread's
  CPU time: another program's turns on a core do not lower it) of the instruction the level's
  matrix multiply kernel is built on, in a loop shaped as the kernel's tile (operands loaded from
  L1 and broadcast, one accumulator per row and vector): ``vpdpbusd`` zmm at ``avx512_vnni`` (64 u8
  x s8 products), ``vpmaddwd`` + ``vpaddd`` ymm at ``avx2`` and ``avx512`` (16 exact int16 products;
  both levels multiply with the AVX2 kernel), and SSE2 ``pmaddwd`` + ``paddd`` at ``portable`` (what
  its C loop compiles to on x86-64). None at ``amx``: its tdpbusd needs the tile state, not probed.
- ``read_bandwidth(size, threads)``: bytes per (wall-clock) second at which ``threads`` threads read a
  buffer of ``size`` bytes, each its own share, again and again (read only: a copy would add its
  writes).
  A buffer the size of B comes from L2, L3 or DRAM as B does in a multiply that streams it.

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
from functools import cache
from pathlib import Path

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
READ_STEP = 256  # bytes each thread reads per step of the loop


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
        built = subprocess.run(command, capture_output=True, text=True)
        if built.returncode != 0:
            raise CeilingError(f"building {SOURCE.name} failed: {' '.join(command)}\n{built.stderr}")
        os.replace(partial, path)
    library = ctypes.CDLL(str(path))
    library.dmlq_probe_multiply.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int]
    library.dmlq_probe_read.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long, ctypes.c_int]
    library.dmlq_probe_multiply.restype = library.dmlq_probe_read.restype = ctypes.c_double
    return library


def _best_rate(run, work_per_round: float) -> float:
    """Work per second: rounds doubled until a run lasts SAMPLE_SECONDS, then the best of SAMPLES runs
    (a limit: on a shared machine other work only slows a run down)."""
    rounds = 1
    while (seconds := run(rounds)) < SAMPLE_SECONDS:
        if seconds < 0:
            raise CeilingError("a probe could not start its threads")
        rounds *= 2
    return max(rounds * work_per_round / run(rounds) for _ in range(SAMPLES))


def multiply_instruction(level: str) -> str | None:
    """The instruction whose loop gives ``level``'s peak, or None."""
    loop = MULTIPLY_LOOPS.get(level)
    return loop[2] if loop else None


def multiply_peak(level: str, threads: int) -> float | None:
    """GOPS of ``level``'s multiply instruction on ``threads`` threads (None: no loop for it)."""
    if level not in MULTIPLY_LOOPS:
        return None
    kind, products, _ = MULTIPLY_LOOPS[level]
    library = _library()
    operations = 2.0 * products * threads
    return _best_rate(lambda rounds: library.dmlq_probe_multiply(kind, rounds, threads), operations) / 1e9


def read_bandwidth(size: int, threads: int) -> float:
    """Bytes per second read by ``threads`` threads sharing a buffer of ``size`` bytes (rounded up)."""
    step = READ_STEP * threads
    size = max(step, -(-size // step) * step)
    memory = np.ones(size + 64, np.uint8)  # written once, so its pages are real
    start = -memory.ctypes.data % 64
    buffer = memory[start : start + size]
    library = _library()
    address = buffer.ctypes.data
    return _best_rate(lambda repeats: library.dmlq_probe_read(address, size, repeats, threads), float(size))
