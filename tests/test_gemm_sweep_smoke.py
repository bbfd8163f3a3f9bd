"""The matrix multiply sweep runs end to end at tiny sizes and writes consistent results.

Only the harness is checked here (files, keys, limits, ratios and verdicts computed from the
medians, results agreeing with dmlq's), never a speed.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SWEEP = BENCHMARKS / "gemm_sweep.py"
# K = 67: not a multiple of any kernel's step; N = 33: a column tail; M = 1 bandwidth-bound, 12 not
ARGS = ["--quick", "--m", "1,12", "--shapes", "67x33", "--no-torch"]
ORT, ORT_PREPACKED, READING = "onnxruntime", "onnxruntime (B prepacked)", "reading B"


def peak_names(result: dict) -> set[str]:
    """The multiply-peak probes among a row's contenders: one per level with a loop (none at amx)."""
    instructions = result["limits"]["peak_instruction"]
    return {
        f"multiply peak [{level}]" for level in result["meta"]["levels"] if instructions[level] is not None
    }


def sweep_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SWEEP), *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    out = tmp_path_factory.mktemp("sweep")
    finished = sweep_command(*ARGS, "--out", str(out))
    assert finished.returncode == 0, finished.stderr
    return out, json.loads((out / "gemm_sweep.json").read_text()), finished.stdout


def dmlq_names(levels: list[str]) -> set[str]:
    return {f"{name} [{level}]" for name in ("dmlq packed", "dmlq") for level in levels}


def test_every_row_has_every_contender_at_both_thread_counts(run):
    _, result, _ = run
    levels = result["meta"]["levels"]
    assert levels[-1] == "portable" and levels[0] == result["meta"]["detected_level"]
    keys = [row["key"] for row in result["rows"]]
    combinations = [(d, s, m) for d in ("u8s8", "u8u8") for s in ("tensor", "column") for m in (1, 12)]
    assert keys == [f"{d}_{s}_k67_n33_m{m}" for d, s, m in combinations]
    for row in result["rows"]:
        contenders = row["summary"]["contenders"]
        reading = {READING} if row["m"] <= 8 else set()  # the probes, among the samples
        assert set(contenders) == dmlq_names(levels) | {ORT, ORT_PREPACKED} | reading | peak_names(result)
        assert row["summary"]["skipped"]["torch"] == "--no-torch"
        for contender in contenders.values():
            assert set(contender["threads"]) == {"1", "2"}
            for measured in contender["threads"].values():
                assert len(measured["samples"]) >= 3
                assert measured["median"] == statistics.median(measured["samples"])


def test_packed_and_unpacked_dmlq_agree_at_every_level_and_onnxruntime_agrees_where_exact(run):
    from dmlq.onnx.ort_int8 import u8s8_saturates

    _, result, _ = run
    for row in result["rows"]:
        checks = row["summary"]["verification"]
        first = f"dmlq packed [{result['meta']['levels'][0]}]"
        assert set(checks) == dmlq_names(result["meta"]["levels"]) - {first} | {ORT, ORT_PREPACKED}
        for name in dmlq_names(result["meta"]["levels"]) - {first}:
            assert checks[name]["mismatches"] == 0, (row["key"], name)
        if row["dtype"] == "u8u8" or not u8s8_saturates():  # pairs saturated in int16: not exact
            assert checks[ORT]["mismatches"] == checks[ORT_PREPACKED]["mismatches"] == 0, row["key"]


def assert_measured(limits: dict, levels: list[str]) -> None:
    assert set(limits["peak"]) == set(limits["peak_instruction"]) == set(levels)
    for level, per_thread in limits["peak"].items():
        if limits["peak_instruction"][level] is None:  # AMX: no loop measures its peak
            assert per_thread == {"1": None, "2": None}
        else:
            assert per_thread["2"] >= per_thread["1"] > 0


def best_median_rate(contender: dict, threads: int) -> float:
    """A probe's median rate at the best of ``threads`` threads or fewer."""
    return max(measured["rate"] for t, measured in contender["threads"].items() if int(t) <= threads)


def test_limits_and_fractions_follow_from_the_probes_among_each_rows_samples(run):
    _, result, _ = run
    levels = result["meta"]["levels"]
    assert_measured(result["limits"], levels)  # the run's peaks, before and after its rows
    assert set(result["limits"]["peak_after"]) == set(levels)
    for row in result["rows"]:
        contenders = row["summary"]["contenders"]
        for level, analysis in row["levels"].items():
            packed = contenders[f"dmlq packed [{level}]"]["best"]
            bound = analysis["limit"]
            peak_probe = contenders[f"multiply peak [{level}]"]
            peak = best_median_rate(peak_probe, bound["threads"])
            if row["m"] == 1:  # reading B at the best of as many threads or fewer, or the peak if lower
                medians = [measured["median"] for t, measured in contenders[READING]["threads"].items()
                           if int(t) <= bound["threads"]]  # fmt: skip
                assert row["k"] * row["n"] / min(medians) > 1e9  # per pass: a call makes ~10**6 of them
                reading = best_median_rate(contenders[READING], bound["threads"])
                assert math.isclose(reading, 2 * row["m"] * row["k"] * row["n"] / min(medians) / 1e9)
                assert math.isclose(bound["gops"], min(reading, peak))
                assert bound["kind"] == ("peak" if peak < reading else "bandwidth")
            else:
                assert (bound["kind"], bound["gops"]) == ("peak", peak)
            assert math.isclose(bound["fraction"], packed["rate"] / bound["gops"])


def test_ratios_are_peer_time_over_dmlq_time_and_verdicts_follow_the_values(run):
    _, result, _ = run
    for row in result["rows"]:
        contenders = row["summary"]["contenders"]
        for level, analysis in row["levels"].items():
            packed = contenders[f"dmlq packed [{level}]"]
            ratio = analysis["ratios"][f"dmlq packed vs {ORT_PREPACKED}"]["T1"]
            assert math.isclose(ratio, contenders[ORT_PREPACKED]["threads"]["1"]["median"]
                                / packed["threads"]["1"]["median"])  # fmt: skip
            assert analysis["ratios"]["dmlq packed vs torch"]["best"] is None
    targets = result["targets"]
    assert {t["target"] for t in targets} == {
        "M<=8 packed >= 1.0x onnxruntime (B prepacked)", "M<=8 packed >= 1.0x PyTorch",
        "M>8 packed >= 1.05x onnxruntime (B prepacked)", "M>8 packed >= 1.05x PyTorch",
        "unpacked >= 1.0x onnxruntime (B fed)", "M<=8 packed >= 80% of the limit",
    }  # fmt: skip
    assert {t["verdict"] for t in targets if "PyTorch" in t["target"]} == {"n/a"}  # --no-torch
    for target in (t for t in targets if t["value"] is not None):
        assert target["verdict"] == ("PASS" if target["value"] >= target["threshold"] else "MISS"), target


def test_table_chart_and_load_are_written(run):
    out, result, stdout = run
    assert "67 x 33" in stdout
    markdown = (out / "gemm_sweep.md").read_text()
    assert markdown.startswith("# dmlq matrix multiply sweep")
    assert "Load average" in markdown and set(result["meta"]["load_average"]) == {"before", "after"}
    assert (
        "multiply peak at portable among the samples of each row (medians, the rows' limits): T1 " in markdown
    )
    assert "reading B among the samples of each row with M <= 8 (medians): T1 " in markdown
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "gemm_sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_where_the_probes_cannot_be_built_no_row_is_held_against_a_limit(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    gemm_sweep = importlib.import_module("gemm_sweep")
    ceilings, sweep = gemm_sweep.ceilings, gemm_sweep.sweep

    def no_compiler():
        raise ceilings.CeilingError("cannot run the C compiler 'cc'")

    monkeypatch.setattr(ceilings, "_library", no_compiler)
    args = gemm_sweep.parse(["--m", "1,12", "--shapes", "67x33", "--levels", "portable"])
    limits = gemm_sweep.measure_limits(args, gemm_sweep.PLANS["quick"])
    assert limits["unavailable"] == "cannot run the C compiler 'cc'"
    for row in sweep.rows(["u8s8"], ["tensor"], [(67, 33)], [1, 12]):
        assert sweep.limit(row, "portable", "1", {}) == ("unmeasured", None)
    one_row = sweep.Row("u8s8", "tensor", 67, 33, 1)
    case = sweep.row_case(one_row, ["portable"], np.random.default_rng(0), None, None)
    assert not {READING, "multiply peak [portable]"} & {c.name for c in case.contenders}
    assert case.skipped[READING] == case.skipped["multiply peak"] == "cannot run the C compiler 'cc'"
    assert sweep.limit_lines({"limits": limits}) == ["limits not measured: cannot run the C compiler 'cc'"]


@pytest.mark.parametrize(
    "args, message",
    [(["--levels", "amx9"], "--levels: unknown amx9"), (["--shapes", "64by64"], "--shapes: expected KxN"),
     (["--m", "0"], "--m: every value must be at least 1")],
)  # fmt: skip
def test_a_bad_option_is_one_line_and_exit_2(args, message):
    finished = sweep_command(*args)
    assert finished.returncode == 2
    assert finished.stderr.count("\n") == 1 and message in finished.stderr


@pytest.mark.parametrize("module", ["dmlq_bench.sweep", "dmlq_bench.ceilings"])
def test_the_module_examples(monkeypatch, module):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    results = doctest.testmod(importlib.import_module(module))
    assert results.attempted >= 2 and results.failed == 0
