"""Load once, run many: a model's mapped steps are compiled when it is loaded where its types are
static, and the later runs of one input signature go by its plan (dmlq.onnx.plans): the bits of the
step-by-step run, new output arrays each run, and the step-by-step run wherever a plan cannot serve
(another thread running it, an other node's output shape that depends on the data)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest
from onnx import helper

import dmlq
import dmlq.onnx as dx
from dmlq.onnx.plans import Plan
from dmlq.onnx.program import program
from dmlq.onnx.running import execute
from dmlq.threads import available_cores
from onnx_oracle import model

F32, U8 = np.float32, np.uint8
SCALES = {"s": F32(0.05), "z": U8(128)}


def chain(shape=(2, 3, 8), symbolic: bool = False) -> dx.Model:
    """Mapped and other steps in turn; ``q`` (read by a later step) and ``r`` (an other node's, read by a
    later step) are graph outputs as well as ``y``; ``symbolic``: their first dimension is ``N``."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("Relu", ["d"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["d2"]),
        helper.make_node("Neg", ["d2"], ["n"]),
        helper.make_node("QuantizeLinear", ["n", "s", "z"], ["q3"]),
        helper.make_node("DequantizeLinear", ["q3", "s", "z"], ["y"]),
    ]
    made = model(nodes, {"x": np.zeros(shape, F32)}, SCALES, ["y", "q", "r"], 13)
    for value in [*made.graph.input, *made.graph.output] if symbolic else []:
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    return dx.load(made)


def step_by_step(loaded: dx.Model, feeds: dict) -> dict:
    return execute(loaded, feeds, keep={})


def assert_same(ours: dict, expected: dict) -> None:
    assert ours.keys() == expected.keys()
    for name, value in expected.items():
        assert ours[name].dtype == value.dtype
        np.testing.assert_array_equal(ours[name], value)


@pytest.mark.parametrize("symbolic", [False, True])
def test_load_compiles_the_mapped_steps_where_the_shapes_are_static(symbolic, rng) -> None:
    loaded = chain((5, 8), symbolic=symbolic)
    found = program(loaded, dmlq.FeatureLevel.newest())
    assert len(found.compiled_operators()) == (0 if symbolic else 6)
    x = rng.uniform(-8, 8, (5, 8)).astype(F32)
    dx.run(loaded, {"x": x})
    assert len(found.compiled_operators()) == 6  # the run compiled nothing more, or what it needed


def test_later_runs_go_by_the_plan_with_the_step_by_step_bits(rng) -> None:
    loaded = chain()
    for _ in range(3):
        x = rng.uniform(-8, 8, (2, 3, 8)).astype(F32)
        assert_same(dx.run(loaded, {"x": x}), step_by_step(loaded, {"x": x}))
    (plan,) = program(loaded, dmlq.FeatureLevel.newest()).plans.values()
    assert isinstance(plan, Plan)


def test_each_signature_and_thread_count_has_its_plan(rng) -> None:
    loaded = chain((1, 8), symbolic=True)
    previous = dmlq.get_num_threads()
    try:
        for threads in (1, 2, 1, 2):
            dmlq.set_num_threads(threads)
            for rows in (1, 5, 1, 5):
                x = rng.uniform(-8, 8, (rows, 8)).astype(F32)
                assert_same(dx.run(loaded, {"x": x}), step_by_step(loaded, {"x": x}))
    finally:
        dmlq.set_num_threads(previous)
    assert len(program(loaded, dmlq.FeatureLevel.newest()).plans) == 2 * min(available_cores(), 2)


def test_a_values_memory_serves_later_values_once_nothing_reads_it(rng) -> None:
    """Eight rounds of DequantizeLinear, Neg, QuantizeLinear: the plan holds a few values' memory."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"])]
    for index in range(8):
        nodes += [
            helper.make_node("DequantizeLinear", [f"q{index}", "s", "z"], [f"d{index}"]),
            helper.make_node("Neg", [f"d{index}"], [f"n{index}"]),
            helper.make_node("QuantizeLinear", [f"n{index}", "s", "z"], [f"q{index + 1}"]),
        ]
    loaded = dx.load(model(nodes, {"x": np.zeros((64, 256), F32)}, SCALES, ["q8"], 13))
    x = rng.uniform(-8, 8, (64, 256)).astype(F32)
    expected = step_by_step(loaded, {"x": x})
    for _ in range(2):
        assert_same(dx.run(loaded, {"x": x}), expected)
    (plan,) = program(loaded, dmlq.FeatureLevel.newest()).plans.values()
    held = sum(memory.nbytes for pool in plan.arena.free.values() for memory in pool)
    assert held <= 2 * x.nbytes + 2 * x.size  # two float values and two uint8 ones, of 16 and 8


def test_a_runs_outputs_are_its_own_while_later_runs_compute(rng) -> None:
    loaded = chain()
    runs = [rng.uniform(-8, 8, (2, 3, 8)).astype(F32) for _ in range(4)]
    outputs = [dx.run(loaded, {"x": x}) for x in runs]
    for x, found in zip(runs, outputs):
        assert_same(found, step_by_step(loaded, {"x": x}))
    for name in ("y", "q", "r"):
        assert not np.shares_memory(outputs[-1][name], outputs[-2][name])


@pytest.mark.parametrize("first", ["QuantizeLinear", "Relu"])
def test_inputs_of_any_layout_and_left_as_they_were(first, rng) -> None:
    """x read by a mapped operator, or by a session of other nodes."""
    nodes = [
        helper.make_node(first, ["x", "s", "z"] if first == "QuantizeLinear" else ["x"], ["a"]),
        helper.make_node("Identity", ["a"], ["y"]),
    ]
    loaded = dx.load(model(nodes, {"x": np.zeros((2, 3, 8), F32)}, SCALES, ["y"], 13))
    strided = rng.uniform(-8, 8, (2, 3, 16)).astype(F32)[:, :, ::2]
    kept = strided.copy()
    expected = step_by_step(loaded, {"x": kept})
    for _ in range(3):
        assert_same(dx.run(loaded, {"x": strided}), expected)
        assert_same(dx.run(loaded, {"x": kept}), expected)
    np.testing.assert_array_equal(strided, kept)


def test_an_output_shape_that_follows_the_data_goes_step_by_step(capfd) -> None:
    """NonZero's output shape is the data's: the plan made for one count cannot hold another."""
    nodes = [
        helper.make_node("NonZero", ["x"], ["i"]),
        helper.make_node("Cast", ["i"], ["f"], to=1),
        helper.make_node("QuantizeLinear", ["f", "s", "z"], ["y"]),
    ]
    loaded = dx.load(model(nodes, {"x": np.zeros(6, F32)}, SCALES, ["y"], 13))
    for count in (2, 2, 3, 4, 3, 3):
        x = np.zeros(6, F32)
        x[:count] = 1
        found = dx.run(loaded, {"x": x})["y"]
        np.testing.assert_array_equal(found, step_by_step(loaded, {"x": x})["y"])
        assert found.shape == (1, count)
    assert list(program(loaded, dmlq.FeatureLevel.newest()).plans.values()) == [None]
    assert "onnxruntime" not in capfd.readouterr().err  # no error logged for a run that succeeds


def test_runs_in_several_threads_at_once_each_get_their_own_results(rng) -> None:
    loaded = chain((64, 256))
    runs = [rng.uniform(-8, 8, (64, 256)).astype(F32) for _ in range(24)]
    expected = [step_by_step(loaded, {"x": x}) for x in runs]
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda x: dx.run(loaded, {"x": x}), runs * 3))
    for index, outputs in enumerate(found):
        assert_same(outputs, expected[index % len(runs)])


def test_4bit_values_pass_between_steps_without_a_plan(rng) -> None:
    """4-bit values pass between steps packed and unpacked: their runs go step by step."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
    ]
    constants = {"s": F32(0.5), "z": np.array(1, ml_dtypes.int4)}
    loaded = dx.load(model(nodes, {"x": np.zeros((3, 4), F32)}, constants, ["y"], 21))
    for _ in range(3):
        x = rng.uniform(-4, 4, (3, 4)).astype(F32)
        assert_same(dx.run(loaded, {"x": x}), step_by_step(loaded, {"x": x}))
    assert list(program(loaded, dmlq.FeatureLevel.newest()).plans.values()) == [None]
