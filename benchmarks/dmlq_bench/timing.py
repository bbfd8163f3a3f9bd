"""Contenders, cases and the interleaved timing loop."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Call = Callable[[], Any]


def blas_limit(threads: int) -> AbstractContextManager[Any]:
    """Limit NumPy's BLAS threads for the block (a no-op context when threadpoolctl is absent)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return nullcontext()
    return threadpool_limits(limits=threads, user_api="blas")


@dataclass
class Contender:
    """One way to compute a case.

    ``prepare(threads)`` returns the zero-argument call to time (thread counts that a library
    sets per session, like onnxruntime's, are applied there; global ones are set per block).
    ``result`` turns the call's return value into the NumPy array compared with dmlq's; None
    marks a contender that computes something else on purpose (a traffic-only NumPy pass).
    ``repeats``: how many times a call does the case's work (a bare loop that starts its threads
    once per call repeats its pass); its samples are per repeat.
    """

    name: str
    prepare: Callable[[int], Call]
    result: Callable[[Any], np.ndarray] | None = np.asarray
    note: str = ""
    repeats: int = 1


def fixed(call: Call) -> Callable[[int], Call]:
    """``prepare`` for a call whose thread count is set globally for the block."""
    return lambda threads: call


@dataclass
class Case:
    key: str
    title: str
    unit: str  # "GB/s", "GOPS" or "us/call"
    work: float  # bytes moved or operations per call (unused for "us/call")
    contenders: list[Contender]
    skipped: dict[str, str] = field(default_factory=dict)

    def rate(self, seconds: float) -> float:
        """Throughput of one call taking ``seconds``: GB/s, GOPS, or microseconds per call."""
        if self.unit == "us/call":
            return seconds * 1e6
        return self.work / seconds / 1e9


@dataclass(frozen=True)
class Plan:
    runs: int  # timed samples per contender
    warmups: int
    budget: float  # seconds one contender may take per block; slower ones get fewer runs
    min_sample: float = 0.0  # seconds: a sample repeats the call back to back at least this long
    min_runs: int = 3
    settle_limit: float = 0.5  # seconds: the longest wait for other threads to go idle
    lead_in: float = 0.005  # seconds of untimed calls before each sample (lead_in_calls)


def settle(limit: float, window: float = 0.010) -> None:
    """Wait until no thread of this process but the caller uses CPU (at most ``limit`` seconds).

    After a call, thread pools busy-wait for more work: OpenBLAS for over 100 ms, onnxruntime and
    dmlq for tens of ms here. On two cores that spinning would slow whichever contender comes
    next. The process CPU clock advances in scheduler ticks (4 ms here), so a window is idle when
    it gained less than half its length: a spinning thread gains about all of it.
    """
    deadline = time.perf_counter() + limit
    while time.perf_counter() < deadline:
        before = time.process_time()
        time.sleep(window)
        if time.process_time() - before < window / 2:
            return


def sample(call: Call, count: int) -> tuple[float, Any]:
    """Seconds per call over ``count`` back-to-back calls, and the last call's value."""
    start = time.perf_counter_ns()
    for _ in range(count):
        value = call()
    return (time.perf_counter_ns() - start) / 1e9 / count, value


def runs_within_budget(plan: Plan, seconds_per_sample: float) -> int:
    affordable = int(plan.budget / max(seconds_per_sample, 1e-9))
    return max(plan.min_runs, min(plan.runs, affordable))


def burst_size(call: Call, plan: Plan) -> tuple[int, float]:
    """Calls per sample, doubled until back-to-back calls last ``plan.min_sample`` seconds.

    A thread pool asleep after a pause wakes slowly, and the kernel may first place its worker
    on the caller's core: a lone call measures that wake-up as much as the work. A burst
    measures the steady state, as a program calling the operator in a loop sees it.
    Returns the size and the seconds per call it measured.
    """
    count = 1
    while True:
        seconds = sample(call, count)[0]
        if seconds * count >= plan.min_sample or seconds * count * plan.min_runs > plan.budget:
            return count, seconds
        count *= 2


def lead_in_calls(plan: Plan, seconds_per_call: float) -> int:
    """Untimed calls to make before each sample, after the pause that settles the threads.

    After a pause the second core of a virtual machine can take milliseconds to run again: on the
    2-core Zen 5 of 2026-11-27, after 20 ms asleep, calls 2 to 20 of a [1024, 768] dynamic
    quantization took 60-64 us (dmlq's time on one thread) where the steady state is 34 us, and
    onnxruntime's 55-60 us against 45-48 us. Without a lead-in those milliseconds are a fifth of a
    10 ms sample, and squeeze both sides' times toward each other. A call longer than the lead-in
    gets none: the wake-up is then a small part of its sample.
    """
    return int(plan.lead_in / seconds_per_call) if seconds_per_call < plan.lead_in else 0


def warm_up(call: Call, plan: Plan) -> Any:
    """The value of the last warm-up call (one only for a contender slower than the budget)."""
    for _ in range(plan.warmups):
        seconds, value = sample(call, 1)
        settle(plan.settle_limit)
        if seconds * plan.runs > plan.budget:
            break
    return value


def compare(expected: np.ndarray, actual: np.ndarray) -> dict[str, Any]:
    """Mismatch count (exact comparison) and the largest absolute difference."""
    actual = np.asarray(actual).reshape(expected.shape)
    differ = expected != actual
    widest = np.abs(expected.astype(np.float64) - actual.astype(np.float64)).max(initial=0.0)
    return {"mismatches": int(differ.sum()), "elements": int(expected.size), "max_abs_diff": float(widest)}


def measure_block(case: Case, threads: int, plan: Plan, verify: bool) -> dict[str, Any]:
    """Warm every contender up, then time them interleaved (A B C A B C ...), rotating the order,
    each sample after a pause for the threads to settle and a lead-in of untimed calls.

    Returns per contender the raw samples (seconds per call), the calls per sample and, when
    ``verify``, how its warm-up result compares with dmlq's (the first contender).
    """
    calls = {c.name: c.prepare(threads) for c in case.contenders}
    repeats = {c.name: c.repeats for c in case.contenders}
    verification, planned, bursts, lead_ins = {}, {}, {}, {}
    expected = None
    for contender in case.contenders:
        value = warm_up(calls[contender.name], plan)
        bursts[contender.name], seconds = burst_size(calls[contender.name], plan)
        lead_ins[contender.name] = lead_in_calls(plan, seconds)
        settle(plan.settle_limit)
        planned[contender.name] = runs_within_budget(plan, seconds * bursts[contender.name])
        if verify and contender.result is not None:
            array = np.asarray(contender.result(value))
            if expected is None:
                expected = array.copy()
            else:
                verification[contender.name] = compare(expected, array)
        del value
    samples: dict[str, list[float]] = {name: [] for name in calls}
    gc.collect()
    gc.disable()
    try:
        for round_index in range(max(planned.values())):
            names = list(calls)
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                if len(samples[name]) < planned[name]:
                    if lead_ins[name]:
                        sample(calls[name], lead_ins[name])
                    samples[name].append(sample(calls[name], bursts[name])[0] / repeats[name])
                    settle(plan.settle_limit)
    finally:
        gc.enable()
    return {"samples": samples, "calls_per_sample": bursts, "verification": verification}


def median(values: list[float]) -> float:
    return statistics.median(values)
