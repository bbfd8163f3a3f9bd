"""ONNX's backend node tests for QuantizeLinear, DequantizeLinear, QLinearMatMul and Add, run on dmlq.

Each case is a one-node model with input and output tensors in protobuf form. They are read from
``onnx/backend/test/data/node/<case>/`` when the installed onnx ships that folder; the PyPI
wheels do not, so otherwise the same cases are generated from ``onnx.backend.test.case.node``
(the code that writes those files) and round-tripped through serialized ``ModelProto`` and
``TensorProto`` messages. What DirectML can express is mapped onto dmlq's NumPy layer (integer
``Add`` onto the DirectML layer's ELEMENT_WISE_ADD) and compared exactly; the rest is skipped with
the reason in the test id.
"""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlq
from dmlq import DataType, Device, TensorDesc, ops

OPERATORS = {
    "QuantizeLinear": "quantizelinear",
    "DequantizeLinear": "dequantizelinear",
    "QLinearMatMul": "qlinearmatmul",
    "Add": "add",
}
PREFIXES = tuple(f"test_{module}" for module in OPERATORS.values())
BYTE_OUTPUTS = {TensorProto.UINT8, TensorProto.INT8}
DEQUANTIZE_INPUTS = {
    TensorProto.UINT8,
    TensorProto.INT8,
    TensorProto.UINT16,
    TensorProto.INT16,
    TensorProto.UINT32,
    TensorProto.INT32,
}
FLOAT_ADD = {TensorProto.FLOAT, TensorProto.FLOAT16}
INTEGER_ADD = {
    TensorProto.INT8,
    TensorProto.INT16,
    TensorProto.INT32,
    TensorProto.INT64,
    TensorProto.UINT8,
    TensorProto.UINT16,
    TensorProto.UINT32,
    TensorProto.UINT64,
}


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    inputs: list[TensorProto]
    outputs: list[TensorProto]

    @property
    def node(self) -> onnx.NodeProto:
        return self.model.graph.node[0]

    def attribute(self, name: str, default: object) -> object:
        found = [a for a in self.node.attribute if a.name == name]
        return helper.get_attribute_value(found[0]) if found else default

    def elem_type(self, value_info: onnx.ValueInfoProto) -> int:
        return value_info.type.tensor_type.elem_type


def _proto(value: object) -> TensorProto:
    message = value if isinstance(value, TensorProto) else numpy_helper.from_array(np.asarray(value))
    return TensorProto.FromString(message.SerializeToString())


def _from_data_folder(root: Path) -> list[Case]:
    cases = []
    for folder in sorted(p for p in root.iterdir() if p.name.startswith(PREFIXES)):
        model = onnx.load(str(folder / "model.onnx"))
        data = folder / "test_data_set_0"
        read = [TensorProto.FromString(p.read_bytes()) for p in sorted(data.glob("input_*.pb"))]
        written = [TensorProto.FromString(p.read_bytes()) for p in sorted(data.glob("output_*.pb"))]
        cases.append(Case(folder.name, model, read, written))
    return cases


def _generated() -> list[Case]:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in OPERATORS.values():
            importlib.import_module(f"onnx.backend.test.case.node.{module}")
    cases = []
    for case in node._NodeTestCases:
        if case.name.startswith(PREFIXES) and case.model.graph.node[0].op_type in OPERATORS:
            model = onnx.load_from_string(case.model.SerializeToString())
            inputs, outputs = case.data_sets[0]
            cases.append(Case(case.name, model, [_proto(v) for v in inputs], [_proto(v) for v in outputs]))
    return cases


def load_cases() -> list[Case]:
    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
    return _from_data_folder(root) if root.is_dir() else _generated()


# -- mapping onto dmlq ----------------------------------------------------------------------------


def type_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type).lower()


def skip_reason(case: Case) -> str | None:
    op_type = case.node.op_type
    output_type = case.elem_type(case.model.graph.output[0])
    input_type = case.elem_type(case.model.graph.input[0])
    if op_type == "QuantizeLinear" and output_type not in BYTE_OUTPUTS:
        return f"{type_name(output_type)} output (DirectML quantizes to uint8/int8)"
    if op_type == "DequantizeLinear" and input_type not in DEQUANTIZE_INPUTS:
        return f"{type_name(input_type)} input (DirectML dequantizes 8/16/32-bit integers)"
    if op_type == "Add" and input_type not in FLOAT_ADD | INTEGER_ADD:
        return f"{type_name(input_type)} add"
    return None


def along_axis(
    x: np.ndarray, parameter: np.ndarray, axis: int, block_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX's per-axis or blocked parameter made NumPy-broadcastable against ``x``.

    A block of B equal parameters becomes DirectML's extra dimension: the axis is split into
    (length / B, B) and the parameter gets size 1 on the B part.
    """
    if parameter.ndim == 0 or parameter.size == 1 and not block_size:
        return x, parameter.reshape(())
    axis %= x.ndim
    if not block_size:
        shape = [1] * x.ndim
        shape[axis] = parameter.size
        return x, parameter.reshape(shape)
    blocks = x.shape[axis] // block_size
    split = (*x.shape[:axis], blocks, block_size, *x.shape[axis + 1 :])
    return x.reshape(split), np.expand_dims(parameter, axis + 1)


def run_quantize(case: Case, x, scale, zero_point=None) -> np.ndarray:
    axis, block_size = case.attribute("axis", 1), case.attribute("block_size", 0)
    split_x, scale = along_axis(x, scale, axis, block_size)
    dtype = helper.tensor_dtype_to_np_dtype(case.elem_type(case.model.graph.output[0]))
    if zero_point is not None:
        zero_point = along_axis(x, zero_point, axis, block_size)[1]
    return dmlq.quantize_linear(split_x, scale, zero_point, dtype=dtype).reshape(x.shape)


def run_dequantize(case: Case, x, scale, zero_point=None) -> np.ndarray:
    axis, block_size = case.attribute("axis", 1), case.attribute("block_size", 0)
    split_x, scale = along_axis(x, scale, axis, block_size)
    if zero_point is not None:
        zero_point = along_axis(x, zero_point, axis, block_size)[1]
    return dmlq.dequantize_linear(split_x, scale, zero_point).reshape(x.shape)


def run_matmul(case: Case, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp) -> np.ndarray:
    # DirectML's scales are FLOAT32; float16 scales convert exactly
    a_scale, b_scale, y_scale = (s.astype(np.float32) for s in (a_scale, b_scale, y_scale))
    return dmlq.quantized_linear_matrix_multiply(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)


def run_add(case: Case, a, b) -> np.ndarray:
    if a.dtype.kind == "f":
        return dmlq.add(a, b)
    a, b = np.broadcast_arrays(a, b)
    desc = TensorDesc(DataType[a.dtype.name.upper()], a.shape)
    out = np.empty(a.shape, a.dtype)
    Device().compile_operator(ops.ElementWiseAdd(a=desc, b=desc, output=desc)).execute(
        [np.ascontiguousarray(a), np.ascontiguousarray(b)], [out]
    )
    return out


RUNNERS = {
    "QuantizeLinear": run_quantize,
    "DequantizeLinear": run_dequantize,
    "QLinearMatMul": run_matmul,
    "Add": run_add,
}

CASES = load_cases()
PARAMS = [
    pytest.param(
        case, id=case.name if skip_reason(case) is None else f"{case.name}[skipped: {skip_reason(case)}]"
    )
    for case in CASES
]


def test_the_node_cases_are_all_there() -> None:
    counts = {op: sum(c.node.op_type == op for c in CASES) for op in OPERATORS}
    assert all(count >= 2 for count in counts.values()), counts
    runnable = [c.name for c in CASES if skip_reason(c) is None]
    assert len(runnable) >= 20, runnable
    landmarks = [
        "test_quantizelinear",
        "test_quantizelinear_axis",
        "test_quantizelinear_blocked_asymmetric",
        "test_dequantizelinear_axis",
        "test_dequantizelinear_blocked",
        "test_qlinearmatmul_3D_int8_float16",
        "test_add_bcast",
        "test_add_uint64",
    ]
    assert set(landmarks) <= set(runnable)


@pytest.mark.parametrize("case", PARAMS)
def test_onnx_node_case(case: Case) -> None:
    reason = skip_reason(case)
    if reason:
        pytest.skip(reason)
    inputs = [numpy_helper.to_array(t) for t in case.inputs]
    want = numpy_helper.to_array(case.outputs[0])
    got = RUNNERS[case.node.op_type](case, *inputs)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert np.array_equal(got, want)
