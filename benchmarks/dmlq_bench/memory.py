"""Peak memory of one dmlq elementwise call beyond its output.

Two views: ``tracemalloc`` in this process (NumPy reports its array allocations to it), and the
peak resident set of a fresh subprocess (which also sees compiled code's own allocations; Linux).
Run as a module, this file is that subprocess: ``python -m dmlq_bench.memory OP N``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable

import numpy as np

from . import data, dmlq_routes

SMALL = 1 << 20  # bytes: what "output + small" allows beyond the output
# glibc keeps freed blocks resident and raises its mmap threshold after each large free, so a
# temporary can reuse memory that is already resident; fixed thresholds return every block of
# 128 KiB or more to the system at once, so each call's temporaries show in the peak.
EXACT_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def dmlq_call(op: str, n: int) -> Callable[[], np.ndarray]:
    """The public dmlq call of elementwise ``op`` on fresh benchmark data of ``n`` elements."""
    problem = getattr(data, op)(n, np.random.default_rng(data.SEED))
    public = getattr(dmlq_routes, op)(problem)[0]
    return public.prepare(1)


def traced_extra(call: Callable[[], np.ndarray]) -> int:
    """Bytes traced at the call's peak beyond its result (inputs were made before tracing)."""
    call()  # first-call set-up is not a per-call cost
    tracemalloc.start()
    try:
        result = call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak - result.nbytes


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    """Linux resets the peak resident set (VmHWM) when 5 is written to /proc/self/clear_refs."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def resident(op: str, n: int) -> dict[str, int]:
    """Peak resident bytes one call adds beyond its result, and the bytes still held after it.

    The call is this process's first at this size, after a small one for one-time set-up: a
    warmed-up dmlq hands a freed output block to the next output of its size (a cache that
    spares page faults), which would hide the output itself. What stays resident once the
    result is freed is that cache.
    """
    dmlq_call(op, 1024)()
    call = dmlq_call(op, n)
    _reset_peak()
    before = _status_kib("VmRSS")
    result = call()
    extra, output_bytes = (_status_kib("VmHWM") - before) * 1024 - result.nbytes, result.nbytes
    del result
    return {"extra_bytes": extra, "retained_bytes": (_status_kib("VmRSS") - before) * 1024,
            "output_bytes": output_bytes}  # fmt: skip


def measure(op: str, n: int, pythonpath: str) -> dict[str, object]:
    """Both views for ``op``; the resident one from a subprocess that imports only dmlq."""
    env = {**os.environ, "PYTHONPATH": pythonpath, **EXACT_MALLOC}
    probe = subprocess.run([sys.executable, "-m", "dmlq_bench.memory", op, str(n)], env=env,
                           capture_output=True, text=True)  # fmt: skip
    if probe.returncode:
        raise RuntimeError(f"memory probe for {op} failed:\n{probe.stderr}")
    measured = json.loads(probe.stdout)
    traced = traced_extra(dmlq_call(op, n))
    worst = max(traced, measured["extra_bytes"])
    return {
        "output_bytes": measured["output_bytes"],
        "tracemalloc_extra_bytes": traced,
        "rss_extra_bytes": measured["extra_bytes"],
        "retained_after_free_bytes": measured["retained_bytes"],
        "extra_bytes": worst,
        "threshold_bytes": SMALL,
        "verdict": "PASS" if worst <= SMALL else "MISS",
    }


if __name__ == "__main__":
    print(json.dumps(resident(sys.argv[1], int(sys.argv[2]))))
