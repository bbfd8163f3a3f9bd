"""``dmlq quantize`` on a float32 Zarr array of 8 GiB on disk, against Dask alone moving the same bytes.

    python benchmarks/dask_quantize.py [--gib 8] [--dir /tmp] [--chunk-mb 64] [--repeats 3] [--out FILE]

Writes a float32 Zarr array of ``--gib`` GiB (65536 columns, uniform in [-100, 100], Zarr's
default codec, chunks of 1024 x 2048) to a temporary folder under ``--dir``, then alternates two
commands ``--repeats`` times, each in its own process on Dask's threaded scheduler:

* dmlq: ``dmlq quantize IN OUT --scale 0.8 --dtype int8`` (rint(x / 0.8), in range: no clamping);
* Dask alone: the same Zarr read in the same chunks, ``rint(x / 0.8).astype(int8)`` in plain Dask,
  written as the same Zarr output: the same bytes read and written (compressed alike), with the
  least arithmetic that produces them.

For each run: wall time, throughput (input bytes per second) and the process's peak resident
memory (its VmHWM, polled every 20 ms). The operating system's page cache is left as it is for both.
A sample of both outputs is checked against :func:`dmlq.quantize_linear`. The folder is deleted
at the end. Prints a Markdown report, every run's figures next to the median, ready to paste into
benchmarks/README.md, and writes it to ``--out`` (default: ``benchmarks/results/dask_quantize.md``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import zarr

import dmlq

HERE = Path(__file__).resolve().parent

ZARR_CHUNKS = (1024, 2048)  # 8 MiB of float32
COLUMNS = 65536
SCALE = 0.8

DASK_ALONE_CODE = """
import sys
import dask.array as da
import numpy as np
import zarr
from dmlq.chunked import _block_shape  # the blocks dmlq quantize reads, nothing else of dmlq
source, target, chunk_bytes, scale = sys.argv[1], sys.argv[2], int(sys.argv[3]), np.float32(sys.argv[4])
array = zarr.open_array(source, mode="r")
chunks = _block_shape(array.shape, array.dtype.itemsize, chunk_bytes, array.chunks)
result = da.rint(da.from_zarr(array, chunks=chunks) / scale).astype(np.int8)
output = zarr.create_array(store=target, shape=array.shape, dtype=np.int8, chunks=array.chunks)
da.store(result, output, lock=False, scheduler="threads")
"""


def make_input(path: Path, gib: float) -> zarr.Array:
    shape = (max(1, round(gib * 2**30 / 4 / COLUMNS)), COLUMNS)
    target = zarr.create_array(store=path, shape=shape, dtype=np.float32, chunks=ZARR_CHUNKS)
    source = da.zeros(shape, dtype=np.float32, chunks=(ZARR_CHUNKS[0] * 4, COLUMNS))
    da.store(source.map_blocks(_uniform, dtype=np.float32), target, lock=False, scheduler="threads")
    return target


def _uniform(block: np.ndarray, block_info=None) -> np.ndarray:
    seed = block_info[0]["chunk-location"]
    return np.random.default_rng(seed).random(block.shape, dtype=np.float32) * 200 - 100


def run(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak resident bytes of one process running ``command``.

    The peak is the child's own VmHWM, polled: ``wait4``'s ru_maxrss would count the pages a
    forked child shares with this (larger) process before its exec.
    """
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while process.poll() is None:
        peak = max(peak, _high_water_mark(process.pid))
        time.sleep(0.02)
    seconds = time.perf_counter() - start
    if process.returncode:
        raise RuntimeError(f"{command[:4]} failed: {process.stderr.read().decode()[-2000:]}")
    return seconds, peak


def _high_water_mark(pid: int) -> int:
    return _proc_kib(f"/proc/{pid}/status", "VmHWM") * 1024


def _proc_kib(path: str, key: str) -> int:
    """The ``key:  N kB`` figure of a /proc file, or 0 once the file is gone (a process ended)."""
    try:
        text = Path(path).read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    kib = [line.split()[1] for line in text.splitlines() if line.startswith(f"{key}:")]
    return int(kib[0]) if kib else 0


def check_sample(source: zarr.Array, output: Path, name: str) -> None:
    quantized = zarr.open_array(output, mode="r")
    rows = slice(source.shape[0] // 2, source.shape[0] // 2 + 1500)  # across a chunk boundary
    expected = dmlq.quantize_linear(source[rows, 1000:5000], SCALE, dtype="int8")
    assert np.array_equal(quantized[rows, 1000:5000], expected), f"{name}: output differs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=8.0, help="input size in GiB (default 8)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--chunk-mb", type=float, default=64.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "dask_quantize.md")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="dmlq-dask-bench-", dir=args.dir))
    try:
        text = report(*measure(folder, args), args)
    finally:
        shutil.rmtree(folder)
    print(f"\n{text}", end="")
    args.out.write_text(text)


DMLQ, DASK_ALONE = "`dmlq quantize`", "Dask alone (read, `rint(x / 0.8)` as int8, write)"


def commands(source: Path, output: Path, chunk_mb: float) -> dict[str, list[str]]:
    dmlq_options = ["--scale", str(SCALE), "--dtype", "int8", "--chunk-mb", str(chunk_mb)]
    dask_arguments = [str(source), str(output), str(int(chunk_mb * 2**20)), str(SCALE)]
    return {
        DASK_ALONE: [sys.executable, "-c", DASK_ALONE_CODE, *dask_arguments],
        DMLQ: [sys.executable, "-m", "dmlq", "quantize", str(source), str(output), *dmlq_options],
    }


def measure(folder: Path, args: argparse.Namespace) -> tuple[dict[str, list[tuple[float, int]]], int]:
    """Each contender's runs, (wall seconds, peak resident bytes) in order, and the input's bytes."""
    start = time.perf_counter()
    source = make_input(folder / "x.zarr", args.gib)
    size = source.nbytes
    print(f"input: {source.shape} float32 = {size / 2**30:.2f} GiB, Zarr chunks {ZARR_CHUNKS}, "
          f"{source.compressors}, written in {time.perf_counter() - start:.0f} s", flush=True)  # fmt: skip
    output = folder / "out.zarr"
    results: dict[str, list[tuple[float, int]]] = {DASK_ALONE: [], DMLQ: []}
    for repeat in range(args.repeats):
        for name, command in commands(folder / "x.zarr", output, args.chunk_mb).items():
            seconds, peak = run(command)
            results[name].append((seconds, peak))
            print(f"{name}: {seconds:.1f} s, {size / seconds / 1e9:.2f} GB/s, "
                  f"peak RSS {peak / 2**30:.2f} GiB", flush=True)  # fmt: skip
            if repeat == 0:  # both write dmlq.quantize_linear's bytes
                check_sample(source, output, name)
            shutil.rmtree(output)
    return results, size


def report(results: dict[str, list[tuple[float, int]]], size: int, args: argparse.Namespace) -> str:
    """The Markdown for benchmarks/README.md: the setting, every run's figures, the throughput ratio."""
    lines = [
        f"Measured on {os.cpu_count()} cores, {_memory_gib()} GiB; dask {dask.__version__}, zarr "
        f"{zarr.__version__}, numpy {np.__version__}; {size / 2**30:.2f} GiB input, --chunk-mb "
        f"{args.chunk_mb:g}; {args.repeats} runs of each, alternated; peak RSS is the process's VmHWM:",
        "",
        "| run | wall time: median (runs) | throughput (input): median (runs) | peak RSS: max (runs) |",
        "|---|---|---|---|",
    ]  # fmt: skip
    speeds = {name: [size / seconds / 1e9 for seconds, _ in runs] for name, runs in results.items()}
    for name, runs in results.items():
        lines.append(f"| {name} | {_figures([s for s, _ in runs], statistics.median, '.1f', ' s')} "
                     f"| {_figures(speeds[name], statistics.median, '.2f', ' GB/s')} "
                     f"| {_figures([p / 2**30 for _, p in runs], max, '.2f', ' GiB')} |")  # fmt: skip
    ratio = statistics.median(speeds[DMLQ]) / statistics.median(speeds[DASK_ALONE])
    ratios = ", ".join(f"{ours / alone:.0%}" for ours, alone in zip(speeds[DMLQ], speeds[DASK_ALONE]))
    lines += ["", f"`dmlq quantize` reaches {ratio:.0%} of Dask alone's median throughput "
              f"({ratios} run by run)."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _figures(values: list[float], summary: Callable[[list[float]], float], spec: str, unit: str) -> str:
    """``summary(values)`` then every value in parentheses, e.g. ``21.5 s (26.8, 21.5, 20.3)``."""
    return f"{summary(values):{spec}}{unit} ({', '.join(f'{value:{spec}}' for value in values)})"


def _memory_gib() -> int:
    return round(_proc_kib("/proc/meminfo", "MemTotal") / 2**20)


if __name__ == "__main__":
    main()
