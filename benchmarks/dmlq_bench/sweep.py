"""Issue "Speed"'s matrix multiply sweep: rows, their contenders, the limits, targets and reports.

A row is one matrix multiply u8 x (s8 or u8) -> u8 with B's scale per tensor or per column, at one
M, K, N. Its contenders: dmlq with B packed once and dmlq unpacked, each at every CPU level asked
for (the level set before each call), onnxruntime's QLinearMatMul with B an initializer (prepacked)
and fed as an input, and fbgemm's quantized linear with a prepacked weight.

The limit a row is held against, measured by bare loops (``ceilings``): the peak of the level's
multiply instruction (vpdpbusd at avx512_vnni, vpmaddwd at avx2) and, for M <= 8, reading B once,
whichever is lower. Both are timed among the row's contenders, their samples interleaved with theirs
and their medians taken, as dmlq's are: a shared machine's speed drifts within seconds, and a limit
measured apart from the samples it bounds measures other seconds (Zen 5, 2026-11-27: a 45 MB buffer
read at ~90-120 or ~186-208 GB/s at 2 threads, and a row's limit taken before its samples once came
out twice what its samples met; the vpdpbusd loop's best of 7 before each row spanned 1965-2155 GOPS
at 2 threads within one run, and the same rows' fractions of it moved by up to 9 points between runs
minutes apart).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from . import ceilings, data, dmlq_routes
from .cases import add_peer
from .report import markdown_table, ratio, text_table
from .timing import Case, Contender

DTYPES = {"u8s8": np.int8, "u8u8": np.uint8}
SCALES = ("tensor", "column")
MS = (1, 8, 32, 128, 512, 2048)
SHAPES = ((768, 768), (1024, 1024), (4096, 4096), (4096, 11008))
BANDWIDTH_BOUND_M = 8  # at or below: reading B once may bound the time

PACKED, UNPACKED = "dmlq packed", "dmlq"
READING = "reading B"  # the read probe over a buffer of B's size, a contender of rows with M <= 8
READ_BYTES_PER_CALL = 2 << 30  # its passes per call: starting its threads (~50 us) is then below 1 %
PEAK = "multiply peak"  # a level's multiply loop, a contender of every row (dmlq_name(PEAK, level))
PEAK_STEPS_PER_CALL = 1 << 23  # steps of its loop per call: 7-30 ms at any level and thread count on
# Zen 5 (starting its threads, ~50 us, is then below 1 %), the fewer products a step the slower
ORT, ORT_PREPACKED, TORCH = "onnxruntime", "onnxruntime (B prepacked)", "torch"
# (dmlq contender, peer): the ratios reported, peer time over dmlq time
COMPARISONS = ((PACKED, ORT_PREPACKED), (PACKED, TORCH), (UNPACKED, ORT))


@dataclass(frozen=True)
class Row:
    dtype: str  # a key of DTYPES
    scales: str  # "tensor" or "column": B's scale and zero point
    k: int
    n: int
    m: int

    @property
    def key(self) -> str:
        return f"{self.dtype}_{self.scales}_k{self.k}_n{self.n}_m{self.m}"

    @property
    def operations(self) -> int:
        return 2 * self.m * self.k * self.n

    def problem(self, rng: np.random.Generator) -> data.MatMul:
        return data.matmul((self.m, self.k), (self.k, self.n), DTYPES[self.dtype], rng,
                           per_column_b=self.scales == "column")  # fmt: skip


def rows(dtypes: list[str], scales: list[str], shapes: list[tuple[int, int]], ms: list[int]) -> list[Row]:
    """Every combination, grouped by data type, scales and shape, M ascending within a group.

    >>> [row.key for row in rows(["u8s8"], ["tensor"], [(64, 32)], [8, 1])]
    ['u8s8_tensor_k64_n32_m1', 'u8s8_tensor_k64_n32_m8']
    """
    return [Row(d, s, k, n, m) for d in dtypes for s in scales for k, n in shapes for m in sorted(ms)]


def dmlq_name(name: str, level: str) -> str:
    return f"{name} [{level}]"


def row_case(row: Row, levels: list[str], rng: np.random.Generator, onnx_routes: ModuleType | None,
             torch_routes: ModuleType | None) -> Case:  # fmt: skip
    """The row's contenders; the first, dmlq packed at the first level, gives the result checked against.
    The probes of its limits (``limit``) are contenders too; where they cannot be built, the row has none."""
    problem = row.problem(rng)
    contenders = []
    for level in levels:
        contenders.append(dmlq_routes.at_level(level, dmlq_routes.packed_matmul(problem, PACKED)))
        contenders.append(dmlq_routes.at_level(level, dmlq_routes.matmul(problem, UNPACKED)))
    skipped: dict[str, str] = {}
    try:
        contenders += [probe for level in levels if (probe := multiply_peak(row, level)) is not None]
        if row.m <= BANDWIDTH_BOUND_M:
            contenders.append(reading_b(row))
    except ceilings.CeilingError as error:
        skipped[PEAK] = str(error)
        if row.m <= BANDWIDTH_BOUND_M:
            skipped[READING] = str(error)
    add_peer(contenders, skipped, ORT, onnx_routes, "matmul", problem)
    add_peer(contenders, skipped, TORCH, torch_routes, "matmul", problem)
    title = f"{row.dtype} B per-{row.scales}, M={row.m} K={row.k} N={row.n}"
    return Case(row.key, title, "GOPS", row.operations, contenders, skipped)


def reading_b(row: Row) -> Contender:
    """Reading a buffer of B's size once per repeat, at the rate a bare loop reads it: its GOPS are
    the row's operations over that time, the most a call bound by reading B could do."""
    size = row.k * row.n
    passes = max(1, READ_BYTES_PER_CALL // size)
    return Contender(READING, ceilings.reading(size, passes), result=None,
                     note="the read probe, not a multiply", repeats=passes)  # fmt: skip


def multiply_peak(row: Row, level: str) -> Contender | None:
    """``level``'s multiply loop run for a whole number of the row's operations per call: its GOPS are
    the row's operations over that time (None: no loop for the level, as at amx)."""
    step = ceilings.multiply_step_operations(level)
    if step is None:
        return None
    repeats = max(1, round(PEAK_STEPS_PER_CALL * step / row.operations))
    prepare = ceilings.multiplying(level, repeats * row.operations)
    return Contender(dmlq_name(PEAK, level), prepare, result=None, note="the multiply probe, not a multiply",
                     repeats=repeats)  # fmt: skip


def is_probe(name: str) -> bool:
    """Whether contender ``name`` is a limit's probe rather than a multiply."""
    return name == READING or name.startswith(PEAK)


# -- limits ------------------------------------------------------------------------------------


def peaks(
    levels: list[str], thread_counts: list[int], sample_seconds: float
) -> dict[str, dict[str, float | None]]:
    """GOPS of each level's multiply instruction, per thread count (None: no loop for the level): the
    run's, before and after its rows, for the reader (a row's own limit is timed among its samples)."""
    return {
        level: ceilings.best_of_fewer_threads(
            {t: ceilings.multiply_peak(level, t, sample_seconds) for t in thread_counts}
        )
        for level in levels
    }


def limit(row: Row, level: str, threads: str, contenders: dict[str, Any]) -> tuple[str, float | None]:
    """The kind of limit and its GOPS for ``row`` at ``level`` and ``threads``: the lower of the
    multiply peak and, for M <= 8, reading B once, each its probe's median rate among the row's
    ``contenders`` at the best of ``threads`` threads or fewer ("unmeasured", None: no probes; "peak",
    None: no loop for the level and M > 8)."""
    if not any(is_probe(name) for name in contenders):
        return "unmeasured", None
    peak = _probe_rate(contenders, dmlq_name(PEAK, level), threads)
    if row.m > BANDWIDTH_BOUND_M or READING not in contenders:
        return "peak", peak
    reading = _probe_rate(contenders, READING, threads)
    if peak is not None and (reading is None or peak < reading):
        return "peak", peak
    return "bandwidth", reading


def _probe_rate(contenders: dict[str, Any], name: str, threads: str) -> float | None:
    """Probe ``name``'s median rate at the best of ``threads`` threads or fewer (None: not a contender)."""
    if name not in contenders:
        return None
    rates = {int(t): rate for t, rate in _rates(contenders[name]).items()}
    return ceilings.best_of_fewer_threads(rates)[threads]


def _rates(contender: dict[str, Any]) -> dict[str, float | None]:
    """Per thread count, a contender's median rate."""
    return {t: measured["rate"] for t, measured in contender["threads"].items()}


# -- analysis and targets ----------------------------------------------------------------------


def spread(samples: list[float]) -> dict[str, float]:
    """Quartiles and extremes of the samples (seconds per call).

    >>> spread([1.0, 2.0, 3.0, 4.0, 5.0])
    {'min': 1.0, 'q1': 2.0, 'q3': 4.0, 'max': 5.0}
    """
    if len(samples) < 2:
        return {"min": samples[0], "q1": samples[0], "q3": samples[0], "max": samples[0]}
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return {"min": min(samples), "q1": q1, "q3": q3, "max": max(samples)}


def analyse(row: Row, summary: dict[str, Any], level: str) -> dict[str, Any]:
    """One level's figures for a row: ratios to the peers, and packed dmlq's fraction of the limit."""
    modes = ["best", *(f"T{t}" for t in next(iter(summary["contenders"].values()))["threads"])]
    ratios = {
        f"{mine} vs {peer}": {mode: ratio(summary, peer, mode, dmlq_name(mine, level)) for mode in modes}
        for mine, peer in COMPARISONS
    }  # fmt: skip
    packed = summary["contenders"][dmlq_name(PACKED, level)]
    best_threads = str(packed["best"]["threads"])
    kind, gops = limit(row, level, best_threads, summary["contenders"])
    fraction = None if gops is None else packed["best"]["rate"] / gops
    return {"ratios": ratios, "limit": {"kind": kind, "gops": gops, "threads": int(best_threads),
                                        "fraction": fraction}}  # fmt: skip


@dataclass(frozen=True)
class Target:
    text: str
    threshold: float
    applies: Callable[[Row], bool]
    value: Callable[[dict[str, Any]], float | None]  # from a level's analysis


def _few(row: Row) -> bool:
    return row.m <= BANDWIDTH_BOUND_M


def _ratio(mine: str, peer: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda analysis: analysis["ratios"][f"{mine} vs {peer}"]["best"]


# Issue 23's: at most 8 rows at least even with the peers, more rows 5 % ahead; the limits' fractions.
TARGETS = (
    Target("M<=8 packed >= 1.0x onnxruntime (B prepacked)", 1.0, _few, _ratio(PACKED, ORT_PREPACKED)),
    Target("M<=8 packed >= 1.0x PyTorch", 1.0, _few, _ratio(PACKED, TORCH)),
    Target("M>8 packed >= 1.05x onnxruntime (B prepacked)", 1.05, lambda row: not _few(row),
           _ratio(PACKED, ORT_PREPACKED)),
    Target("M>8 packed >= 1.05x PyTorch", 1.05, lambda row: not _few(row), _ratio(PACKED, TORCH)),
    Target("unpacked >= 1.0x onnxruntime (B fed)", 1.0, lambda row: True, _ratio(UNPACKED, ORT)),
    Target("M<=8 packed >= 80% of the limit", 0.8, _few, lambda a: a["limit"]["fraction"]),
    Target("M>=128 packed >= 90% of the multiply peak", 0.9, lambda row: row.m >= 128,
           lambda a: a["limit"]["fraction"]),
)  # fmt: skip


def verdicts(row: Row, level: str, analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target that applies to the row at ``level``: its value and PASS, MISS or n/a (a peer missing)."""
    found = []
    for target in TARGETS:
        if target.applies(row):
            value = target.value(analysis)
            verdict = "n/a" if value is None else "PASS" if value >= target.threshold else "MISS"
            found.append({"row": row.key, "level": level, "target": target.text,
                          "threshold": target.threshold, "value": value, "verdict": verdict})  # fmt: skip
    return found


# -- the table and the chart -------------------------------------------------------------------


def _gops(contender: dict[str, Any] | None) -> str:
    if contender is None:
        return ""
    best, samples = contender["best"], contender["threads"][str(contender["best"]["threads"])]["samples"]
    quartiles = spread(samples)
    half_iqr = (quartiles["q3"] - quartiles["q1"]) / 2 / best["median"]
    return f"{best['rate']:.4g} T{best['threads']} ±{half_iqr:.0%}"


def _limit(bound: dict[str, Any]) -> str:
    return f"{bound['kind']}: n/a" if bound["gops"] is None else f"{bound['gops']:.4g} ({bound['kind']})"


def _times(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


TABLE_HEADER = ["B", "scales", "K x N", "M", "level", "dmlq packed GOPS", "dmlq GOPS", "ORT prepacked GOPS",
                "ORT GOPS", "torch GOPS", "packed x ORT prepacked", "packed x torch", "dmlq x ORT",
                "limit GOPS", "packed % of limit"]  # fmt: skip


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    """One line per row and level: best-thread GOPS (thread count, half the interquartile range), ratios."""
    lines = []
    for entry in result["rows"]:
        contenders = entry["summary"]["contenders"]
        for level, analysis in entry["levels"].items():
            ratios, bound = analysis["ratios"], analysis["limit"]
            lines.append([
                entry["dtype"], entry["scales"], f"{entry['k']} x {entry['n']}", str(entry["m"]), level,
                _gops(contenders[dmlq_name(PACKED, level)]), _gops(contenders[dmlq_name(UNPACKED, level)]),
                *(_gops(contenders.get(peer)) for peer in (ORT_PREPACKED, ORT, TORCH)),
                *(_times(ratios[f"{mine} vs {peer}"]["best"]) for mine, peer in COMPARISONS),
                _limit(bound), "" if bound["fraction"] is None else f"{bound['fraction']:.0%}",
            ])  # fmt: skip
    return lines


def limit_lines(result: dict[str, Any]) -> list[str]:
    limits = result["limits"]
    if limits["unavailable"]:
        return [f"limits not measured: {limits['unavailable']}"]
    lines = []
    for level, per_thread in limits["peak"].items():
        instruction = limits["peak_instruction"][level]
        if instruction is None:
            lines.append(f"multiply peak at {level}: no loop measures it here")
        else:
            rates = ", ".join(f"T{t} {gops:.4g} GOPS" for t, gops in per_thread.items())
            again = limits.get("peak_after", {}).get(level, {})
            after = ", ".join(f"T{t} {gops:.4g}" for t, gops in again.items() if gops is not None)
            drift = f"; again after the rows: {after}" if after else ""
            lines.append(f"multiply peak at {level} ({instruction} loop), before the rows: {rates}{drift}")
    return lines + row_limit_lines(result)


def row_limit_lines(result: dict[str, Any]) -> list[str]:
    """The range of the limits the rows were held against: the medians of the multiply peak and, for
    M <= 8, of reading B among each row's samples."""
    lines = []
    for level in result["limits"]["peak"]:
        name = dmlq_name(PEAK, level)
        peaks = [_rates(entry["summary"]["contenders"][name]) for entry in result["rows"]
                 if name in entry["summary"]["contenders"]]  # fmt: skip
        if peaks:
            among = "among the samples of each row (medians, the rows' limits)"
            lines.append(f"multiply peak at {level} {among}: {_ranges(peaks, 1)} GOPS")
    rates = [reading_rates(entry) for entry in result["rows"] if READING in entry["summary"]["contenders"]]
    if rates:
        lines.append(f"reading B among the samples of each row with M <= {BANDWIDTH_BOUND_M} (medians): "
                     f"{_ranges(rates, 1e9)} GB/s")  # fmt: skip
    return lines


def reading_rates(entry: dict[str, Any]) -> dict[str, float | None]:
    """Per thread count, the bytes per second of a row's reading-B contender (its median)."""
    threads = entry["summary"]["contenders"][READING]["threads"]
    return {t: entry["k"] * entry["n"] / measured["median"] for t, measured in threads.items()}


def _ranges(measurements: list[dict[str, float | None]], unit: float) -> str:
    """Per thread count, the lowest and highest of the measurements, in ``unit``s.

    >>> _ranges([{"1": 2e9, "2": 4e9}, {"1": 3e9, "2": None}], 1e9)
    'T1 2-3, T2 4-4'
    """
    by_threads: dict[str, list[float]] = {}
    for per_thread in measurements:
        for threads, value in per_thread.items():
            if value is not None:
                by_threads.setdefault(threads, []).append(value / unit)
    return ", ".join(f"T{t} {min(v):.4g}-{max(v):.4g}" for t, v in by_threads.items())


def mismatch_lines(result: dict[str, Any]) -> list[str]:
    return [f"{entry['key']}: {name} differs from dmlq on {check['mismatches']:,} of {check['elements']:,} "
            f"elements (at most {check['max_abs_diff']:g})"
            for entry in result["rows"] for name, check in entry["summary"]["verification"].items()
            if check["mismatches"]]  # fmt: skip


def target_lines(result: dict[str, Any]) -> list[str]:
    by_level: dict[str, dict[str, int]] = {}
    for verdict in result["targets"]:
        counts = by_level.setdefault(verdict["level"], {"PASS": 0, "MISS": 0, "n/a": 0})
        counts[verdict["verdict"]] += 1
    counted = [f"{lvl}: {c['PASS']} PASS, {c['MISS']} MISS, {c['n/a']} n/a" for lvl, c in by_level.items()]
    return counted + [
        f"{v['verdict']} {v['level']} {v['row']}: {v['target']} (measured {v['value']:.3g})"
        for v in result["targets"] if v["value"] is not None
    ]  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    meta = result["meta"]
    versions = ", ".join(f"{name} {version}" for name, version in meta["versions"].items())
    return "\n".join([
        "# dmlq matrix multiply sweep",
        "",
        f"{meta['started']}, {meta['cpu']['model']} ({meta['cpu']['cores']} cores, "
        f"{' '.join(meta['cpu']['simd'])}), {versions}.",
        f"CPU levels: {', '.join(meta['levels'])} (detected {meta['detected_level']}).",
        f"Load average (1 min) before/after: {meta['load_average']['before']:.2f}/"
        f"{meta['load_average']['after']:.2f}; run time {meta['seconds']} s. Mode: {meta['mode']}: medians "
        f"of {meta['plan']['min_runs']}+ interleaved samples per thread count, each repeating a call for at "
        f"least {meta['plan']['min_sample'] * 1000:g} ms, after a pause until the process is idle and "
        f"{meta['plan'].get('lead_in', 0) * 1000:g} ms of untimed calls.",
        "",
        "GOPS = 2·M·N·K / time at the contender's fastest thread count (T), ± half the interquartile "
        "range of its samples. Ratios: peer time / dmlq time, best against best (above 1: dmlq is faster). "
        "Limit: the peak of the level's multiply instruction and, for M <= 8, reading B, whichever is "
        "lower: each a bare loop timed among the row's contenders, its median at the best of as many "
        "threads or fewer.",
        "",
        markdown_table(TABLE_HEADER, table_rows(result)),
        "",
        "## Limits measured in this run",
        "",
        *(f"- {line}" for line in limit_lines(result)),
        "",
        "## Targets",
        "",
        *(f"- {line}" for line in target_lines(result)),
        "",
        "## Results that differ from dmlq's (checked once per row, untimed)",
        "",
        *(f"- {line}" for line in mismatch_lines(result) or ["none"]),
        *(f"- {line}" for line in meta["notes"]),
        "",
    ])  # fmt: skip


def console(result: dict[str, Any]) -> str:
    return "\n\n".join([
        text_table(TABLE_HEADER, table_rows(result)),
        "\n".join(limit_lines(result)),
        "\n".join(target_lines(result)[: len(result["meta"]["levels"])]),
        "\n".join(mismatch_lines(result)),
    ])  # fmt: skip


def chart(path: Path, result: dict[str, Any]) -> None:
    """GOPS against M (log-log), a panel per shape and data type/scales, a line per contender."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((e["dtype"], e["scales"]) for e in result["rows"]))
    shapes = list(dict.fromkeys((e["k"], e["n"]) for e in result["rows"]))
    size = (3.6 * len(shapes) + 2.6, 3.2 * len(groups) + 0.6)
    figure, axes = plt.subplots(len(groups), len(shapes), figsize=size, squeeze=False, sharey=True,
                                layout="constrained")  # fmt: skip
    for (dtype, scales), panels in zip(groups, axes):
        for (k, n), panel in zip(shapes, panels):
            panel_key = (dtype, scales, k, n)
            entries = [e for e in result["rows"] if (e["dtype"], e["scales"], e["k"], e["n"]) == panel_key]
            ms = [e["m"] for e in entries]
            for name in (n for n in entries[0]["summary"]["contenders"] if not is_probe(n)):
                rates = [e["summary"]["contenders"][name]["best"]["rate"] for e in entries]
                panel.plot(ms, rates, marker="o", markersize=3, label=name,
                           linestyle="-" if name.startswith("dmlq") else "--")  # fmt: skip
            top = result["meta"]["levels"][0]
            for kind, style in (("bandwidth", ":"), ("peak", "-.")):
                bounds = [e["levels"][top]["limit"] for e in entries]
                points = [(e["m"], b["gops"]) for e, b in zip(entries, bounds)
                          if b["kind"] == kind and b["gops"] is not None]  # fmt: skip
                panel.plot([m for m, _ in points], [gops for _, gops in points], color="black", linewidth=0.8,
                           linestyle=style, label=f"{kind} limit [{top}]")  # fmt: skip
            panel.set_xscale("log")
            panel.set_yscale("log")
            panel.set_title(f"{dtype} per-{scales}, K={k} N={n}", fontsize="medium")
            panel.set_xlabel("M")
        panels[0].set_ylabel("GOPS (best thread count)")
    figure.legend(*axes[0][0].get_legend_handles_labels(), loc="outside right upper", fontsize="small")
    meta = result["meta"]
    title = f"dmlq matrix multiply sweep: {meta['cpu']['model']}, {meta['started']}"
    figure.suptitle(title, fontsize="medium")
    figure.savefig(path, dpi=100)
    plt.close(figure)
