"""``dmlq quantize`` / ``dmlq dequantize``: Zarr and .npy in and out, chunk by chunk.

Two runs go through the real command line in a subprocess (Zarr and .npy each read and written);
the other cases call the same ``main`` in this process, which spares Dask's import time. Zarr 3
needs Python 3.11: without zarr, the cases with a Zarr path are skipped and the .npy ones still run.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

import dask
import numpy as np
import pytest
from distributed import LocalCluster
from packaging.requirements import Requirement

import dmlq
from dmlq.chunked import NpyFile, _read, dequantize_file, quantize_file
from dmlq.cli import main

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

try:
    import zarr
except ImportError:
    zarr = None

SCALES = np.float32([0.5, 0.25, 1.0, 2.0, 0.75, 0.1])
ZERO_POINTS = np.int8([0, -3, 4, 100, -128, 127])
PER_CHANNEL = ["--scale", ",".join(map(str, SCALES)), f"--zero-point={','.join(map(str, ZERO_POINTS))}",
               "--dtype", "int8", "--axis", "1"]  # fmt: skip
TINY_CHUNKS = ["--chunk-mb", "0.0002"]  # 200 bytes: several chunks of the small test arrays
SMALLER_THAN_A_ZARR_CHUNK = 0.001  # 1 KiB, below the 1.5 KiB Zarr chunks of big_chunks
ROOT = Path(__file__).parents[1]
WITHOUT_ZARR = "Zarr arrays need Python >= 3.11 and zarr >= 3"


def skip_without_zarr(*paths: str) -> None:
    """Skip the test if one of ``paths`` is a Zarr array (a path not ending in .npy) and zarr is absent."""
    if any(not path.endswith(".npy") for path in paths):
        pytest.importorskip("zarr", reason=WITHOUT_ZARR)


def dmlq_cli(*args: object) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "dmlq", *(str(arg) for arg in args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def load(path) -> np.ndarray:
    return np.load(path) if str(path).endswith(".npy") else zarr.open_array(str(path), mode="r")[...]


def save_zarr(path, values: np.ndarray, chunks: tuple[int, ...]) -> None:
    zarr.open_array(str(path), mode="w-", shape=values.shape, dtype=values.dtype, chunks=chunks)[...] = values


@pytest.fixture
def terminal(capsys, monkeypatch):
    """stderr (captured) taken for a terminal, where the progress bar is drawn."""
    monkeypatch.setattr(type(sys.stderr), "isatty", lambda stream: True)  # capsys swaps its stream objects


@pytest.fixture
def data(tmp_path):
    """A float32 array with ties, NaN and infinities, saved as .npy and, with zarr, as chunked Zarr."""
    rng = np.random.default_rng(5)
    x = (rng.integers(-700, 700, size=(37, 6)) / 4).astype(np.float32)
    x[3, 2], x[5, 1], x[30, 4] = np.nan, np.inf, -np.inf
    np.save(tmp_path / "x.npy", x)
    if zarr is not None:
        save_zarr(tmp_path / "x.zarr", x, (5, 4))
    return x


def test_quantize_then_dequantize_through_the_command_line(tmp_path, data):
    skip_without_zarr("q.zarr")
    quantize = dmlq_cli("quantize", tmp_path / "x.npy", tmp_path / "q.zarr", *PER_CHANNEL, *TINY_CHUNKS)
    assert quantize.returncode == 0, quantize.stderr
    assert (quantize.stderr, quantize.stdout) == ("", "")  # stderr is not a terminal: no progress bar
    expected = dmlq.quantize_linear(data, SCALES, ZERO_POINTS)
    assert load(tmp_path / "q.zarr").dtype == np.int8
    assert np.array_equal(load(tmp_path / "q.zarr"), expected)

    dequantize = dmlq_cli("dequantize", tmp_path / "q.zarr", tmp_path / "y.npy", *PER_CHANNEL[:3],
                          "--axis", "-1", *TINY_CHUNKS)  # fmt: skip
    assert dequantize.returncode == 0, dequantize.stderr
    dequantized = dmlq.dequantize_linear(expected, SCALES, ZERO_POINTS)
    assert load(tmp_path / "y.npy").tobytes() == dequantized.tobytes()


def test_quiet_draws_no_progress_bar_even_on_a_terminal(tmp_path, data, capsys, terminal):
    assert (
        main(["quantize", str(tmp_path / "x.npy"), str(tmp_path / "q.npy"), "--scale", "1", "--quiet"]) == 0
    )
    assert capsys.readouterr().err == ""


def test_an_upper_case_npy_suffix_is_a_npy_file(tmp_path, data):
    quantize_file(tmp_path / "x.npy", tmp_path / "Q.NPY", 0.5, progress=False)
    quantized = dmlq.quantize_linear(data, 0.5)
    assert (tmp_path / "Q.NPY").is_file() and np.array_equal(np.load(tmp_path / "Q.NPY"), quantized)
    dequantize_file(tmp_path / "Q.NPY", tmp_path / "y.Npy", 0.5, progress=False)  # read as .npy too
    assert np.array_equal(np.load(tmp_path / "y.Npy"), dmlq.dequantize_linear(quantized, 0.5))


def test_dequantize_chunks_measure_the_float32_output(tmp_path):
    skip_without_zarr("y.zarr")
    np.save(tmp_path / "q.npy", np.zeros(2**20, np.int8))  # 1 MiB of int8, 4 MiB of float32 out
    dequantize_file(tmp_path / "q.npy", tmp_path / "y.zarr", 1.0, chunk_mb=1, progress=False)
    assert zarr.open_array(str(tmp_path / "y.zarr"), mode="r").chunks == (2**18,)  # 1 MiB of float32


@pytest.mark.parametrize("source, target", [("x.zarr", "q.npy"), ("x.zarr", "q.zarr"), ("x.npy", "q.npy")])
def test_quantize_per_channel_equals_the_numpy_layer(tmp_path, data, capsys, source, target, terminal):
    skip_without_zarr(source, target)
    assert main(["quantize", str(tmp_path / source), str(tmp_path / target), *PER_CHANNEL,
                 *TINY_CHUNKS]) == 0  # fmt: skip
    assert "100% Completed" in capsys.readouterr().err
    got = load(tmp_path / target)
    assert got.dtype == np.int8 and np.array_equal(got, dmlq.quantize_linear(data, SCALES, ZERO_POINTS))
    if target.endswith(".zarr"):
        assert zarr.open_array(str(tmp_path / target), mode="r").chunks == (5, 4)  # the input's chunks


@pytest.mark.parametrize("source, target", [("q.npy", "y.zarr"), ("q.zarr", "y.zarr")])
def test_dequantize_equals_the_numpy_layer(tmp_path, data, source, target):
    skip_without_zarr(source, target)
    quantized = dmlq.quantize_linear(data, 0.5, np.uint8(128))
    np.save(tmp_path / "q.npy", quantized)
    save_zarr(tmp_path / "q.zarr", quantized, (10, 3))
    assert main(["dequantize", str(tmp_path / source), str(tmp_path / target), "--scale", "0.5",
                 "--zero-point", "128", *TINY_CHUNKS]) == 0  # fmt: skip
    got = load(tmp_path / target)
    assert got.dtype == np.float32
    assert got.tobytes() == dmlq.dequantize_linear(quantized, 0.5, np.uint8(128)).tobytes()


@pytest.fixture
def big_chunks(tmp_path):
    """A float32 array saved as .npy and as a Zarr array whose chunks exceed SMALLER_THAN_A_ZARR_CHUNK."""
    skip_without_zarr("x.zarr")
    x = (np.random.default_rng(9).random((96, 80), dtype=np.float32) * 200 - 100).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    save_zarr(tmp_path / "x.zarr", x, (24, 16))
    return x


@pytest.mark.parametrize("source, target", [("x.zarr", "q.zarr"), ("x.zarr", "q.npy"), ("x.npy", "q.zarr")])
def test_chunks_larger_than_chunk_mb_are_written_whole(tmp_path, big_chunks, source, target):
    # Blocks smaller than a Zarr chunk would let threads overwrite each other's part of it.
    quantize_file(tmp_path / source, tmp_path / target, 0.8, dtype="int8",
                  chunk_mb=SMALLER_THAN_A_ZARR_CHUNK, scheduler="threads", progress=False)  # fmt: skip
    assert np.array_equal(load(tmp_path / target), dmlq.quantize_linear(big_chunks, 0.8, dtype="int8"))
    if source.endswith(".zarr") and target.endswith(".zarr"):
        assert zarr.open_array(str(tmp_path / target), mode="r").chunks == (24, 16)


def contiguous(region: tuple[slice, ...], shape: tuple[int, ...], order: str) -> bool:
    """Whether ``region`` of a file holding an array of ``shape`` in ``order`` is one byte range."""
    offsets = np.arange(np.prod(shape)).reshape(shape, order=order)[region]
    return offsets.size == 0 or offsets.max() - offsets.min() + 1 == offsets.size


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", [(40, 6, 5), (3, 40, 5)])
def test_npy_blocks_are_contiguous_byte_ranges(tmp_path, monkeypatch, order, shape):
    # Blocks cut across the trailing dimensions would touch many short pieces of the memory map.
    x = np.asfortranarray(np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 4)
    np.save(tmp_path / "x.npy", x if order == "F" else np.ascontiguousarray(x))
    regions, read = [], NpyFile.__getitem__

    def recording_read(file: NpyFile, region: tuple[slice, ...]) -> np.ndarray:
        regions.append(region)
        return read(file, region)

    monkeypatch.setattr(NpyFile, "__getitem__", recording_read)
    chunk_bytes = 400  # holds one slice along the outermost axis in C order of (40, 6, 5) only
    quantize_file(tmp_path / "x.npy", tmp_path / "q.npy", 0.5, chunk_mb=chunk_bytes / 2**20, progress=False)
    assert len(regions) > 1
    assert all(contiguous(region, shape, order) for region in regions)
    assert all(np.empty(shape)[region].size * 4 <= chunk_bytes for region in regions)
    got = np.load(tmp_path / "q.npy")
    assert np.isfortran(got) == (order == "F") and np.array_equal(got, dmlq.quantize_linear(x, 0.5))


@pytest.mark.parametrize("arguments, message", [
    (["missing.npy", "q.npy", "--scale", "1"], "missing.npy: no such file or directory"),
    (["x.npy", "x.zarr", "--scale", "1"], "x.zarr: already exists"),
    (["x.npy", "q.npy", "--scale", "0"], "scale: a scale of 0"),
    (["x.npy", "q.npy", "--scale", "1,2"], "--scale: 2 values need --axis"),
    (["x.npy", "q.npy", "--scale", "1,2", "--axis", "1"], "--scale: 2 values for axis 1 of length 6"),
    (["x.npy", "q.npy", "--scale", "1", "--axis", "2"], "--axis: 2 is out of range"),
    (["x.npy", "q.npy", "--scale", "1", "--zero-point", "300"], "--zero-point: 300 is outside"),
    (["x.npy", "q.npy", "--scale", "1", "--chunk-mb", "0"], "--chunk-mb: must be positive"),
    (["x.zarr", "q.npy", "--scale", "1", "--scheduler", "tcp://127.0.0.1:9"], "127.0.0.1:9"),
])  # fmt: skip
def test_errors_are_one_line_with_exit_status_2_and_no_output(tmp_path, data, capsys, arguments, message):
    skip_without_zarr(*arguments[:2])
    paths = [str(tmp_path / a) if a.startswith(("x.", "q.", "missing")) else a for a in arguments]
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        assert main(["quantize", *paths]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("dmlq: error: ") and message in error
    assert not (tmp_path / "q.npy").exists()


@pytest.mark.parametrize("options, message", [
    (["--scale", "1,2,3", "--axis", "1"], "--scale: 3 values for axis 1 of length 1"),
    (["--scale", "1", "--zero-point", "1,2", "--axis", "-1"],
     "--zero-point: 2 values for axis -1 of length 5"),
])  # fmt: skip
def test_per_axis_lists_need_one_value_or_one_per_index(tmp_path, capsys, options, message):
    # Broadcasting would otherwise stretch the axis: (9, 1, 5) quantized with 3 scales is (9, 3, 5).
    np.save(tmp_path / "x.npy", np.ones((9, 1, 5), np.float32))
    assert main(["quantize", str(tmp_path / "x.npy"), str(tmp_path / "q.npy"), *options]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(f"dmlq: error: {message}; ")
    assert not (tmp_path / "q.npy").exists()


def test_one_value_along_an_axis_holds_for_every_index(tmp_path):
    x = np.arange(45, dtype=np.float32).reshape(9, 1, 5)
    np.save(tmp_path / "x.npy", x)
    assert main(["quantize", str(tmp_path / "x.npy"), str(tmp_path / "q.npy"), "--scale", "0.5",
                 "--zero-point", "1,2,3,4,5", "--axis", "2", "--chunk-mb", "0.0001"]) == 0  # fmt: skip
    expected = dmlq.quantize_linear(x, 0.5, np.uint8([1, 2, 3, 4, 5]))
    assert np.array_equal(np.load(tmp_path / "q.npy"), expected)


def test_scales_that_would_change_the_output_shape_are_refused(tmp_path, data):
    message = r"^scale, zero_point: .* \(3, 37, 6\), not the input's \(37, 6\)"
    with pytest.raises(dmlq.DmlError, match=message):
        quantize_file(tmp_path / "x.npy", tmp_path / "q.npy", np.ones((3, 1, 1), np.float32), progress=False)
    assert not (tmp_path / "q.npy").exists()


def test_usage_errors_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_status:
        main(["quantize", str(tmp_path / "x.npy"), str(tmp_path / "q.npy"), "--scale", "half"])
    assert exit_status.value.code == 2
    assert "'half' is not a comma-separated list of float values" in capsys.readouterr().err


def test_without_dask_the_command_says_which_extra_to_install(tmp_path, data):
    code = ("import sys; sys.modules['dask'] = None; from dmlq.cli import main; "
            f"sys.exit(main(['quantize', {str(tmp_path / 'x.npy')!r}, {str(tmp_path / 'q.npy')!r}, "
            "'--scale', '1']))")  # fmt: skip
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "dask extra: python -m pip install '.[dask]'" in run.stderr


@pytest.mark.parametrize("source, target", [("x.zarr", "q.npy"), ("x.npy", "q.zarr")])
def test_without_zarr_a_zarr_path_is_one_clear_error(tmp_path, capsys, monkeypatch, source, target):
    np.save(tmp_path / "x.npy", np.ones(3, np.float32))
    (tmp_path / "x.zarr").mkdir()
    monkeypatch.setitem(sys.modules, "zarr", None)  # what Python 3.10 sees: zarr 3 does not install there
    with pytest.raises(dmlq.DmlError, match=f"{target if source == 'x.npy' else source}: {WITHOUT_ZARR}"):
        quantize_file(tmp_path / source, tmp_path / target, 0.5, progress=False)
    assert main(["quantize", str(tmp_path / source), str(tmp_path / target), "--scale", "0.5"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and WITHOUT_ZARR in error
    assert not (tmp_path / target).exists()


def test_without_zarr_npy_files_still_work(tmp_path, monkeypatch):
    x = np.float32([[0.5, 1.5], [-1.0, 4.0]])
    np.save(tmp_path / "x.npy", x)
    monkeypatch.setitem(sys.modules, "zarr", None)
    quantize_file(tmp_path / "x.npy", tmp_path / "q.npy", 0.5, progress=False)
    assert np.array_equal(np.load(tmp_path / "q.npy"), dmlq.quantize_linear(x, 0.5))


@pytest.fixture(scope="module")
def scheduler_address():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:  # fmt: skip
        yield cluster.scheduler_address


@pytest.mark.parametrize("source, target", [("x.npy", "q.npy"), ("x.zarr", "q.zarr")])
def test_quantize_on_a_distributed_cluster(tmp_path, data, capsys, scheduler_address, source, target,
                                           terminal):  # fmt: skip
    skip_without_zarr(source, target)
    assert main(["quantize", str(tmp_path / source), str(tmp_path / target), "--scale", "0.25",
                 "--zero-point", "7", *TINY_CHUNKS, "--scheduler", scheduler_address]) == 0  # fmt: skip
    assert "100% Completed" in capsys.readouterr().err
    assert np.array_equal(load(tmp_path / target), dmlq.quantize_linear(data, 0.25, np.uint8(7)))


def test_the_dask_extra_asks_for_the_zarr_these_tests_run_on():
    # Only zarr 3 is tested (and the benchmark uses zarr-3-only APIs): the extra must not allow zarr 2.
    skip_without_zarr("x.zarr")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra = [Requirement(line) for line in pyproject["project"]["optional-dependencies"]["dask"]]
    zarr_versions = next(requirement.specifier for requirement in extra if requirement.name == "zarr")
    assert zarr.__version__ in zarr_versions and "2.18.7" not in zarr_versions


@pytest.fixture(scope="module")
def dask_benchmark():
    skip_without_zarr("x.zarr")  # the benchmark reads and writes Zarr arrays
    spec = importlib.util.spec_from_file_location("dask_quantize", ROOT / "benchmarks" / "dask_quantize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dask_benchmark_reports_every_run_in_a_table_for_the_readme(dask_benchmark):
    runs = {dask_benchmark.DASK_ALONE: [(2.0, 2**29), (4.0, 2**29), (3.2, 2**29)],
            dask_benchmark.DMLQ: [(2.5, 2**29), (2.0, 2**30), (4.0, 2**29)]}  # fmt: skip
    text = dask_benchmark.report(runs, 8 * 10**9, argparse.Namespace(chunk_mb=64.0, repeats=3))
    dmlq_row = ("| `dmlq quantize` | 2.5 s (2.5, 2.0, 4.0) | 3.20 GB/s (3.20, 4.00, 2.00) "
                "| 1.00 GiB (0.50, 1.00, 0.50) |")  # fmt: skip
    assert dmlq_row in text.splitlines()
    assert "reaches 128% of Dask alone's median throughput (80%, 200%, 80% run by run)." in text


def test_the_dask_benchmark_makes_inputs_smaller_than_a_row_of_zarr_chunks(tmp_path, dask_benchmark):
    assert dask_benchmark.make_input(tmp_path / "x.zarr", 0.001).shape == (4, dask_benchmark.COLUMNS)


# -- 4-bit and blockwise ----------------------------------------------------------------------------------


@pytest.fixture
def weight(tmp_path):
    """A float32 weight [8, 64] with ties, saved as .npy and, with zarr, in Zarr chunks of (3, 24):
    blocks of 16 along axis 1 cross the Zarr chunks."""
    rng = np.random.default_rng(11)
    w = (rng.integers(-80, 80, size=(8, 64)) / 8).astype(np.float32)
    np.save(tmp_path / "w.npy", w)
    if zarr is not None:
        save_zarr(tmp_path / "w.zarr", w, (3, 24))
    return w


BLOCK_SCALES = np.float32([0.5, 1.0, 0.25, 2.0])  # one per block of 16 along axis 1


def blocked(values: np.ndarray, rows: int) -> np.ndarray:
    """Per-block values as ONNX's blocked layout for [rows, 64]: [rows, 4]."""
    return np.ascontiguousarray(np.broadcast_to(values, (rows, values.size)))


@pytest.mark.parametrize("dtype, zero_points", [("int4", [-1, 0, 3, 7]), ("uint4", [8, 0, 15, 4])])
@pytest.mark.parametrize("source, target", [("w.npy", "q.npy"), ("w.zarr", "q.zarr"), ("w.npy", "q.zarr")])
def test_blockwise_4_bit_quantize_and_dequantize_equal_the_numpy_layer(tmp_path, weight, source, target,
                                                                       dtype, zero_points):  # fmt: skip
    skip_without_zarr(source, target)
    options = ["--scale", ",".join(map(str, BLOCK_SCALES)), f"--zero-point={','.join(map(str, zero_points))}",
               "--block-size", "16", "--axis", "1", *TINY_CHUNKS]  # fmt: skip
    assert main(["quantize", str(tmp_path / source), str(tmp_path / target), "--dtype", dtype, *options]) == 0
    zero_point = blocked(np.array(zero_points), 8).astype(dtype)
    expected = dmlq.quantize_linear(weight, blocked(BLOCK_SCALES, 8), zero_point, dtype=dtype, axis=1,
                                    block_size=16)  # fmt: skip
    got = load(tmp_path / target)
    values = np.int8 if dtype == "int4" else np.uint8
    assert got.dtype == values and np.array_equal(got, expected.astype(values))  # values, one per byte

    assert (
        main(["dequantize", str(tmp_path / target), str(tmp_path / "y.npy"), "--dtype", dtype, *options]) == 0
    )
    back = dmlq.dequantize_linear(expected, blocked(BLOCK_SCALES, 8), zero_point, axis=1, block_size=16)
    assert np.load(tmp_path / "y.npy").tobytes() == back.tobytes()


def test_4_bit_per_index_and_per_tensor(tmp_path, weight):
    q = tmp_path / "q.npy"
    assert main(["quantize", str(tmp_path / "w.npy"), str(q), "--dtype", "int4", "--scale", "0.5"]) == 0
    assert np.array_equal(
        np.load(q), dmlq.quantize_linear(weight, np.float32(0.5), dtype="int4").astype(np.int8)
    )
    per_row = np.float32([0.5, 1, 2, 4, 0.25, 8, 1, 1])
    assert main(["quantize", str(tmp_path / "w.npy"), str(tmp_path / "r.npy"), "--dtype", "uint4",
                 "--scale", ",".join(map(str, per_row)), "--axis", "0", *TINY_CHUNKS]) == 0  # fmt: skip
    expected = dmlq.quantize_linear(weight, per_row.reshape(8, 1) * np.ones((1, 64), np.float32),
                                    dtype="uint4", axis=0, block_size=1)  # fmt: skip
    assert np.array_equal(np.load(tmp_path / "r.npy"), expected.astype(np.uint8))


def test_8_bit_blocks(tmp_path, weight):
    scales = ",".join(map(str, BLOCK_SCALES))
    assert main(["quantize", str(tmp_path / "w.npy"), str(tmp_path / "q.npy"), "--dtype", "int8",
                 "--scale", scales, "--block-size", "16", "--axis", "-1"]) == 0  # fmt: skip
    expected = dmlq.quantize_linear(weight, blocked(BLOCK_SCALES, 8), np.zeros((8, 4), np.int8), axis=1,
                                    block_size=16)  # fmt: skip
    assert np.array_equal(np.load(tmp_path / "q.npy"), expected)


@pytest.mark.parametrize("command, options, message", [
    ("quantize", ["--dtype", "int4", "--scale", "1", "--block-size", "16"],
     "--block-size: blocks run along an axis; give --axis"),
    ("quantize", ["--dtype", "int4", "--scale", "1", "--block-size", "24", "--axis", "1"],
     "--block-size: 24 does not divide axis 1 of length 64"),
    ("quantize", ["--dtype", "int4", "--scale", "1", "--block-size", "-2", "--axis", "1"],
     "--block-size: must be positive (got -2)"),
    ("quantize", ["--dtype", "uint4", "--scale", "1,2,3", "--block-size", "16", "--axis", "1"],
     "--scale: 3 values for 4 blocks of 16 along axis 1; give one value, or one per block"),
    ("quantize", ["--dtype", "int4", "--scale", "1", "--zero-point", "8", "--axis", "1"],
     "--zero-point: 8 is not an integer from -8 to 7 (int4)"),
    ("quantize", ["--dtype", "int4", "--scale", "1", "--block-size", "16", "--axis", "2"],
     "--axis: 2 is out of range for an array of 2 dimensions"),
    ("dequantize", ["--dtype", "int4", "--scale", "1"],
     "--dtype: int4 data is read from int8 values, not float32"),
])  # fmt: skip
def test_4_bit_and_block_errors_are_one_line_naming_the_option(tmp_path, weight, capsys, command, options,
                                                               message):  # fmt: skip
    assert main([command, str(tmp_path / "w.npy"), str(tmp_path / "q.npy"), *options]) == 2
    assert capsys.readouterr().err == f"dmlq: error: {message}\n"
    assert not (tmp_path / "q.npy").exists()


def test_4_bit_input_out_of_range_is_refused_and_leaves_no_output(tmp_path, capsys):
    np.save(tmp_path / "q.npy", np.int8([[1, 2], [9, 0]]))
    assert main(["dequantize", str(tmp_path / "q.npy"), str(tmp_path / "y.npy"), "--dtype", "int4",
                 "--scale", "1"]) == 2  # fmt: skip
    assert capsys.readouterr().err == "dmlq: error: IN: 9 is not an integer from -8 to 7 (int4)\n"
    assert not (tmp_path / "y.npy").exists()


@pytest.mark.parametrize("source, axis, step", [("w.npy", 1, 16), ("w.npy", 0, 2), ("w.zarr", 1, 48)])
def test_chunks_hold_whole_blocks_and_whole_zarr_chunks(tmp_path, weight, source, axis, step):
    skip_without_zarr(source)
    path = tmp_path / source
    array = NpyFile.open(path) if source.endswith(".npy") else zarr.open_array(str(path), mode="r")
    block = step if source.endswith(".npy") else 16
    chunks = _read(array, 16, (axis, block)).chunks[axis]
    assert all(size % step == 0 for size in chunks[:-1])  # 48: blocks of 16 and Zarr chunks of 24
    assert chunks[-1] % block == 0 and max(chunks) == step  # no bigger than it must be: 16 elements asked
