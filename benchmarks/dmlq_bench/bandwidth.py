"""The memory bandwidth that bounds the element-wise cases, measured in the run that compares them.

Three NumPy passes over buffers far larger than the last-level cache (data.Sizes.bandwidth_bytes),
at each thread count of the run (Python threads on equal parts of the buffers; NumPy releases the
GIL in these loops):

* read: the maximum of a uint64 view (one load per 8 bytes, nothing written);
* write: a fill with a nonzero byte;
* copy: ``np.copyto``, counting the bytes read and the bytes written.

An element-wise case moves ``cases.BYTES_PER_ELEMENT`` bytes per element (read plus written, as the
copy counts them), so its GB/s over the copy's is the fraction of the memory roofline it reaches.
Samples of the three alternate (A B C A B C ...) and the median is kept, as for the cases.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from .timing import Plan, median, sample, settle

KINDS = ("read", "write", "copy")
BYTES_PER_BYTE = {"read": 1, "write": 1, "copy": 2}  # bytes moved per byte of buffer


def in_threads(part: Callable[[int, int], object], size: int, threads: int) -> Callable[[], None]:
    """A call running ``part(start, stop)`` on ``threads`` equal ranges of ``size`` bytes at once."""
    bounds = [size * k // threads // 64 * 64 for k in range(threads)] + [size]

    def call() -> None:
        workers = [threading.Thread(target=part, args=(bounds[k], bounds[k + 1])) for k in range(1, threads)]
        for worker in workers:
            worker.start()
        part(bounds[0], bounds[1])
        for worker in workers:
            worker.join()

    return call


def probes(source: np.ndarray, target: np.ndarray, threads: int) -> dict[str, Callable[[], None]]:
    words = source.view(np.uint64)
    return {
        "read": in_threads(lambda start, stop: words[start // 8 : stop // 8].max(), source.size, threads),
        "write": in_threads(lambda start, stop: target[start:stop].fill(0x5A), source.size, threads),
        "copy": in_threads(
            lambda start, stop: np.copyto(target[start:stop], source[start:stop]), source.size, threads
        ),
    }


def measure(thread_counts: list[int], plan: Plan, size: int) -> dict[str, dict[str, float]]:
    """GB/s of each kind of pass over ``size``-byte buffers per thread count: ``{"read": {"1": 35.1,
    "2": 48.0}, ...}``."""
    source = np.full(size, 1, np.uint8)
    target = np.zeros(size, np.uint8)  # both touched: no page faults in the timed passes
    found: dict[str, dict[str, float]] = {kind: {} for kind in KINDS}
    for threads in thread_counts:
        calls = probes(source, target, threads)
        seconds: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for _ in range(plan.warmups):
            for call in calls.values():
                call()
        for _ in range(max(plan.min_runs, plan.runs // 3)):
            for kind, call in calls.items():
                seconds[kind].append(sample(call, 1)[0])
                settle(plan.settle_limit)
        for kind in KINDS:
            found[kind][str(threads)] = BYTES_PER_BYTE[kind] * size / median(seconds[kind]) / 1e9
    return found
