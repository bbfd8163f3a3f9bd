"""Medians, ratios and targets of a run, and their forms: JSON, a text/Markdown table, a PNG chart.

A ratio is the peer's time over dmlq's time for the same case (above 1: dmlq is faster),
"best" comparing each side's fastest thread count, "T1" both at one thread.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cases import ELEMENTWISE, PER_TENSOR
from .timing import Case, median

DMLQ = "dmlq"


@dataclass(frozen=True)
class Target:
    case: str
    peer: str
    mode: str  # "best" or "T<threads>"
    threshold: float

    @property
    def text(self) -> str:
        return f">={self.threshold:g}x {self.mode}"


TARGETS = (
    *(Target(op, "onnxruntime", mode, threshold) for op in ELEMENTWISE
      for mode, threshold in (("best", 1.2), ("T1", 1.0))),
    *(Target(op, "numpy roofline", "best", 1.0) for op in ELEMENTWISE),
    Target("quantize_call", "onnxruntime", "best", 1.0),
    Target("gemm_u8s8", "onnxruntime", "best", 1.0),
    Target("gemm_u8u8", "onnxruntime", "best", 2.0),
    Target("gemm_per_row", PER_TENSOR, "best", 0.95),
    Target("gemm_batched", "onnxruntime", "best", 1.2),
)  # fmt: skip


def summarize(case: Case, blocks: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Raw samples, medians and rates per thread count, the best thread count, verification."""
    contenders = {}
    for contender in case.contenders:
        per_thread = {}
        for threads, block in blocks.items():
            runs = block["samples"][contender.name]
            middle = median(runs)
            per_thread[str(threads)] = {
                "samples": runs,
                "median": middle,
                "rate": case.rate(middle),
                "calls_per_sample": block["calls_per_sample"][contender.name],
            }
        best_threads = min(per_thread, key=lambda t: per_thread[t]["median"])
        best = {"threads": int(best_threads), **{k: per_thread[best_threads][k] for k in ("median", "rate")}}
        contenders[contender.name] = {"note": contender.note, "threads": per_thread, "best": best}
    first_block = next(iter(blocks.values()))
    return {
        "title": case.title, "unit": case.unit, "work": case.work,
        "contenders": contenders, "verification": first_block["verification"], "skipped": case.skipped,
    }  # fmt: skip


def _time(summary: dict[str, Any], name: str, mode: str) -> float | None:
    contender = summary["contenders"].get(name)
    if contender is None:
        return None
    if mode == "best":
        return contender["best"]["median"]
    measured = contender["threads"].get(mode.removeprefix("T"))
    return None if measured is None else measured["median"]


def ratio(summary: dict[str, Any], peer: str, mode: str, dmlq: str = DMLQ) -> float | None:
    """Peer time over the ``dmlq`` contender's time in ``mode`` ("best" or "T<n>"); None if one is missing."""
    peer_time, dmlq_time = _time(summary, peer, mode), _time(summary, dmlq, mode)
    return None if peer_time is None or dmlq_time is None else peer_time / dmlq_time


def ratios(cases: dict[str, dict[str, Any]], modes: list[str]) -> list[dict[str, Any]]:
    return [
        {"case": key, "peer": peer, **{mode: ratio(summary, peer, mode) for mode in modes}}
        for key, summary in cases.items() for peer in summary["contenders"] if peer != DMLQ
    ]  # fmt: skip


def targets(cases: dict[str, dict[str, Any]], memory: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every target of issue "Speed" with its measured value and PASS, MISS or n/a."""
    verdicts = []
    for target in TARGETS:
        value = ratio(cases[target.case], target.peer, target.mode) if target.case in cases else None
        verdict = "n/a" if value is None else "PASS" if value >= target.threshold else "MISS"
        where = {"case": target.case, "peer": target.peer, "mode": target.mode, "rule": ">="}
        verdicts.append({**where, "threshold": target.threshold, "value": value, "verdict": verdict})
    for op, measured in memory.items():
        where = {"case": op, "peer": "memory", "mode": "extra bytes", "rule": "<="}
        verdicts.append({**where, "threshold": measured["threshold_bytes"], "value": measured["extra_bytes"],
                         "verdict": measured["verdict"]})  # fmt: skip
    return verdicts


def write_json(path: Path, result: dict[str, Any]) -> None:
    path.write_text(json.dumps(result, indent=1, sort_keys=False) + "\n")


# -- the table ---------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def _rate(value: float, unit: str) -> str:
    return f"{value:.3g} us" if unit == "us/call" else f"{value:.4g} {unit}"


def _times(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    """One row per contender and case: times per thread count, best rate, ratios, targets."""
    modes = result["meta"]["ratio_modes"]
    thread_counts = result["meta"]["threads"]
    by_peer: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for verdict in result["targets"]:
        by_peer.setdefault((verdict["case"], verdict["peer"]), []).append(verdict)
    rows = []
    for key, summary in result["cases"].items():
        for name, contender in summary["contenders"].items():
            checks = by_peer.get((key, name), [])
            rows.append([
                summary["title"] if name == DMLQ else "", name,
                *(_duration(contender["threads"][str(t)]["median"]) for t in thread_counts),
                _rate(contender["best"]["rate"], summary["unit"]),
                *("" if name == DMLQ else _times(ratio(summary, name, mode)) for mode in modes),
                "; ".join(f">={c['threshold']:g}x {c['mode']}" for c in checks),
                "; ".join(c["verdict"] for c in checks),
            ])  # fmt: skip
    return rows


def table_header(result: dict[str, Any]) -> list[str]:
    threads = [f"T{t}" for t in result["meta"]["threads"]]
    ratios_ = [f"x {mode}" for mode in result["meta"]["ratio_modes"]]
    return ["case", "contender", *threads, "best rate", *ratios_, "target", "verdict"]


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def memory_rows(result: dict[str, Any]) -> list[list[str]]:
    return [
        [op, f"{m['output_bytes']:,}", f"{m['tracemalloc_extra_bytes']:,}", f"{m['rss_extra_bytes']:,}",
         f"{m['retained_after_free_bytes']:,}", f"<= {m['threshold_bytes']:,}", m["verdict"]]
        for op, m in result["memory"].items()
    ]  # fmt: skip


def _bytes(count: int) -> str:
    return f"{count / 2**20:.3g} MiB" if count >= 2**20 else f"{count / 2**10:.3g} KiB"


def _bandwidth(measured: dict[str, Any]) -> str:
    stores = f" ({measured['stores']} stores)" if measured["stores"] else ""
    return f"{measured['bytes_per_second'] / 1e9:.3g} GB/s{stores}"


def limit_rows(result: dict[str, Any]) -> list[list[str]]:
    """The limits measured in the run: per element-wise case, read, write and copy passes over buffers
    of its footprint; the multiply peak of dmlq's level."""
    threads, limits = result["meta"]["threads"], result["limits"]
    rows = []
    for key, passes in limits["memory"].items():
        footprint = int(result["cases"][key]["work"])
        buffers = {"read": _bytes(footprint), "write": _bytes(footprint),
                   "copy": f"{_bytes(footprint // 2)} to {_bytes(footprint // 2)}"}  # fmt: skip
        for kind, per_thread in passes.items():
            rows.append([result["cases"][key]["title"] if kind == "read" else "", f"{kind} {buffers[kind]}",
                         *(_bandwidth(per_thread[str(t)]) for t in threads)])  # fmt: skip
    peak = limits["multiply_peak"]
    if peak["gops"]:
        loop = f"{peak['instruction']} loop" if peak["instruction"] else "no loop measures it"
        rows.append([f"multiply peak at {peak['level']}", loop,
                     *("n/a" if peak["gops"][str(t)] is None else f"{peak['gops'][str(t)]:.4g} GOPS"
                       for t in threads)])  # fmt: skip
    return rows


def _limit(result: dict[str, Any], key: str, threads: int) -> float | None:
    """The rate (in the case's unit) a case is held against at ``threads``: a copy of its bytes over
    buffers of its size for an element-wise case, the multiply peak for a product; None: no limit."""
    limits = result["limits"]
    if key in limits["memory"]:
        return limits["memory"][key]["copy"][str(threads)]["bytes_per_second"] / 1e9
    if result["cases"][key]["unit"] == "GOPS":
        return limits["multiply_peak"]["gops"].get(str(threads))
    return None


def against_limit_rows(result: dict[str, Any]) -> list[list[str]]:
    """Per case with a limit and per contender: its rate at each thread count, and that rate as a
    fraction of the limit at the same thread count."""
    threads = result["meta"]["threads"]
    rows = []
    for key, summary in result["cases"].items():
        limits = [_limit(result, key, t) for t in threads]
        if None in limits:
            continue
        for name, contender in summary["contenders"].items():
            rates = [contender["threads"][str(t)]["rate"] for t in threads]
            fractions = [
                f"{rate:.4g} {summary['unit']} ({rate / limit:.0%})" for rate, limit in zip(rates, limits)
            ]
            rows.append([summary["title"] if name == DMLQ else "", name, *fractions])
    return rows


def limit_header(result: dict[str, Any]) -> list[str]:
    return ["limit", "pass", *(f"T{t}" for t in result["meta"]["threads"])]


def against_limit_header(result: dict[str, Any]) -> list[str]:
    return ["case", "contender", *(f"T{t} (of the limit)" for t in result["meta"]["threads"])]


LIMITS_TEXT = (
    "Measured in this run by bare loops in C (dmlq_bench.ceilings), each the best of 7 runs, at each "
    "thread count the best of that many threads or fewer: per element-wise case, passes over buffers of "
    "its footprint (the bytes one call reads and writes; the copy from one half to the other, counting "
    "bytes read and written; writes and copies with ordinary or non-temporal stores, whichever was "
    "faster), and the multiply peak of dmlq's level (its kernel's instruction in a loop shaped as its "
    "tile, per second of CPU time)."
)
AGAINST_LIMITS_TEXT = (
    "Each contender at each thread count against the limit at that count: an element-wise case's bytes "
    "read and written per second as a fraction of the copy's (100 %: as fast as a bare copy of the same "
    "bytes over buffers of the same size); a product's GOPS as a fraction of the multiply peak (peers "
    "multiply with their own instructions, which can beat those of dmlq's level). The NumPy one-pass "
    "rows are the like-for-like peers."
)


def limit_section(result: dict[str, Any], table: Callable[[list[str], list[list[str]]], str],
                  explained: bool) -> list[str]:  # fmt: skip
    """The limits and every contender against them (each table after its explanation if ``explained``),
    ``table`` drawing the tables; where the probes could not be built, why."""
    if result["limits"]["unavailable"]:
        return [f"Limits not measured: {result['limits']['unavailable']}"]
    limits = table(limit_header(result), limit_rows(result))
    against = table(against_limit_header(result), against_limit_rows(result))
    return [LIMITS_TEXT, limits, AGAINST_LIMITS_TEXT, against] if explained else [limits, against]


MEMORY_HEADER = ["dmlq call", "output bytes", "extra (tracemalloc)", "extra (peak RSS)",
                 "held after free", "target", "verdict"]  # fmt: skip
CHECK_HEADER = ["case", "contender", "mismatches", "elements", "max |diff|"]


def verification_rows(result: dict[str, Any]) -> list[list[str]]:
    return [
        [key, name, f"{v['mismatches']:,}", f"{v['elements']:,}", f"{v['max_abs_diff']:g}"]
        for key, summary in result["cases"].items() for name, v in summary["verification"].items()
    ]  # fmt: skip


def skipped_lines(result: dict[str, Any]) -> list[str]:
    return [
        f"{key}: {name} skipped ({reason})"
        for key, summary in result["cases"].items() for name, reason in summary["skipped"].items()
    ]  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    meta = result["meta"]
    versions = ", ".join(f"{name} {version}" for name, version in meta["versions"].items())
    passed = sum(t["verdict"] == "PASS" for t in result["targets"])
    return "\n".join([
        "# dmlq benchmark",
        "",
        f"{meta['started']}, {meta['cpu']['model']} ({meta['cpu']['cores']} cores), {versions}.",
        f"Load average (1 min) before/after: {meta['load_average']['before']:.2f}/"
        f"{meta['load_average']['after']:.2f}; run time {meta['seconds']} s.",
        f"dmlq kernels: {meta['dmlq']['kernels']}. Mode: {meta['mode']}. "
        f"Medians of up to {meta['plan']['runs']} interleaved samples after warm-up, each sample "
        f"repeating a call for at least {meta['plan']['min_sample'] * 1000:g} ms after "
        f"{meta['plan'].get('lead_in', 0) * 1000:g} ms of untimed calls.",
        "",
        "Ratio = contender's time / dmlq's time (above 1: dmlq is faster); `best` compares each side's "
        "fastest thread count, `T1` both at one thread.",
        f"Targets met: {passed} of {len(result['targets'])}.",
        "",
        markdown_table(table_header(result), table_rows(result)),
        "",
        "## Against the machine's limits",
        "",
        *(line for part in limit_section(result, markdown_table, explained=True) for line in (part, "")),
        "## Memory of one dmlq call",
        "",
        "Bytes at the call's peak beyond its output; \"held after free\": what stays resident once the "
        "output is freed (dmlq keeps freed output blocks for reuse).",
        "",
        markdown_table(MEMORY_HEADER, memory_rows(result)),
        "",
        "## Same results as dmlq (checked once, untimed)",
        "",
        markdown_table(CHECK_HEADER, verification_rows(result)),
        "",
        *(f"- {line}" for line in skipped_lines(result) + meta["notes"]),
        "",
    ])  # fmt: skip


def console(result: dict[str, Any]) -> str:
    return "\n\n".join([
        text_table(table_header(result), table_rows(result)),
        *limit_section(result, text_table, explained=False),
        text_table(MEMORY_HEADER, memory_rows(result)),
        text_table(CHECK_HEADER, verification_rows(result)),
        "\n".join(skipped_lines(result) + result["meta"]["notes"]),
    ])  # fmt: skip


# -- the chart ---------------------------------------------------------------------------------


def chart(path: Path, result: dict[str, Any]) -> None:
    """Best-vs-best ratios, one group of bars per case; a black dash over a bar marks its target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = result["cases"]
    peers = sorted({p for s in cases.values() for p in s["contenders"] if p != DMLQ})
    width = 0.8 / len(peers)
    figure, axes = plt.subplots(figsize=(max(9, 1.5 * len(cases)), 5.5))
    for index, peer in enumerate(peers):
        xs = [i + (index - (len(peers) - 1) / 2) * width for i in range(len(cases))]
        values = [ratio(s, peer, "best") or float("nan") for s in cases.values()]
        axes.bar(xs, values, width, label=peer)
        for x, key in zip(xs, cases):
            for target in (t for t in TARGETS if (t.case, t.peer, t.mode) == (key, peer, "best")):
                axes.hlines(target.threshold, x - width, x + width, colors="black", linewidth=2)
    axes.axhline(1.0, color="grey", linewidth=0.6, linestyle="dotted")
    axes.set_yscale("log")
    axes.set_xticks(range(len(cases)), list(cases), rotation=30, ha="right")
    axes.set_ylabel("contender time / dmlq time (best thread count)")
    axes.set_title("dmlq vs peers (above 1: dmlq is faster; black dash: the target for that peer)")
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_results(out: Path, stem: str, result: dict[str, Any], started: float, load_before: float,
                  chart: Callable[[Path, dict[str, Any]], None], markdown: Callable[[dict[str, Any]], str],
                  console: Callable[[dict[str, Any]], str]) -> None:  # fmt: skip
    """Stamps a finished run (its duration; the 1-minute load average before and after it, since other
    processes on a shared machine skew times), then writes ``stem``.png (when matplotlib is there),
    .json and .md into ``out`` and prints the console table."""
    result["meta"]["seconds"] = round(time.perf_counter() - started, 1)
    result["meta"]["load_average"] = {"before": load_before, "after": os.getloadavg()[0]}
    out.mkdir(parents=True, exist_ok=True)
    try:
        chart(out / f"{stem}.png", result)
    except ImportError as error:
        result["meta"]["notes"].append(f"no {stem}.png: {error}")
    write_json(out / f"{stem}.json", result)
    (out / f"{stem}.md").write_text(markdown(result))
    print(console(result))
