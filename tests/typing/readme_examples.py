"""README's examples as a typed module: tests/test_typing.py runs ``mypy --strict`` on it, so that a
user's type checker accepts what the README shows (the NumPy layer, the DirectML layer with list
sizes, dmlq.onnx and dmlq.dask). It is type-checked, not run. NumPy's own stubs refuse README's
``np.uint8([0, 128, 255])`` (a scalar type called on a list), so arrays are made with ``np.array``."""

from __future__ import annotations

import dask.array as da
import numpy as np
import numpy.typing as npt

import dmlq
import dmlq.dask
import dmlq.onnx
from dmlq import DataType, Device, DmlError, FeatureLevel, TensorDesc, TensorFlags, ops


def numpy_layer() -> list[npt.NDArray[np.generic]]:
    a = np.array([[1, 2], [3, 4]], np.uint8)
    b = np.array([[1, -1], [2, 5]], np.int8)
    return [
        dmlq.quantize_linear([0.5, 1.5, 2.5], 1.0),
        dmlq.quantize_linear([[-1.0, 1.0], [-1.0, 1.0]], [[0.5], [0.25]], np.int8(0)),
        dmlq.dequantize_linear(np.array([0, 128, 255], np.uint8), 0.5, np.uint8(128)),
        dmlq.add([1.0, -3.0], [1.0, 1.0], fused_activation="relu"),
        dmlq.add([1.0, -3.0], [1.0, 1.0], fused_activation=dmlq.activations.LeakyRelu(alpha=0.1)),
        dmlq.quantized_linear_add(
            np.array([10, 20], np.uint8), 0.5, None, np.array([1, 3], np.uint8), 1.0, None, 2.0, None
        ),
        dmlq.quantized_linear_matrix_multiply(
            a, 0.5, None, b, 1.0, None, np.array([[0.5], [1.0]], np.float32), None
        ),
    ]


def four_bit() -> npt.NDArray[np.generic]:
    scale = np.array([[1, 0.5]], np.float32)
    q = dmlq.quantize_linear(
        np.array([[0.5, -3, 9, 2]], np.float32), scale, dtype="int4", axis=1, block_size=2
    )
    packed = dmlq.pack_int4(q)
    unpacked = dmlq.unpack_int4(packed, q.shape, q.dtype)
    weight = TensorDesc(DataType.INT4, [4, 64])
    desc = ops.Dequantize(input=weight, quantization_tensors=[TensorDesc(DataType.FLOAT16, [4, 2])],
                          output=TensorDesc(DataType.FLOAT16, [4, 64]))  # fmt: skip
    level = desc.minimum_feature_level()
    assert level is not None and level >= FeatureLevel.FL_6_3
    return dmlq.dequantize_linear(unpacked, scale, axis=1, block_size=2)


def directml_layer() -> npt.NDArray[np.uint8]:
    x = TensorDesc(DataType.FLOAT32, sizes=[1, 1, 2, 3])
    s = TensorDesc(DataType.FLOAT32, sizes=[1, 1, 2, 3], strides=[0, 0, 0, 0])
    desc = ops.ElementWiseQuantizeLinear(input=x, scale=s, zero_point=None,
                                         output=TensorDesc(DataType.UINT8, sizes=[1, 1, 2, 3]))  # fmt: skip
    try:
        Device(feature_level="6_0").compile_operator(desc)
    except DmlError as error:
        print(error)
    op = Device().compile_operator(desc)
    y = np.zeros(6, np.uint8)
    op.execute(
        inputs=[np.array([0, 1, 2, 3, 4, 5], np.float32), np.array([2], np.float32), None], outputs=[y]
    )
    print(dmlq.calc_buffer_tensor_size(x), op.desc, op.device.feature_level)
    return y


def packed_matrix() -> npt.NDArray[np.uint8]:
    weights = np.array([[1, -1], [2, 5]], np.int8)
    packed = dmlq.pack_matrix_multiply_b(weights, [1.0, 0.5], np.int8(0))
    dmlq.quantized_linear_matrix_multiply(
        np.array([[1, 2], [3, 4]], np.uint8), 0.5, None, packed, None, None, 1.0, None
    )
    one = TensorDesc(DataType.FLOAT32, sizes=[1, 1])
    op = Device().compile_operator(ops.QuantizedLinearMatrixMultiply(
        a=TensorDesc(DataType.UINT8, [2, 2]), a_scale=one, output_scale=one, b_scale=one,
        b=TensorDesc(DataType.INT8, [2, 2], flags=TensorFlags.OWNED_BY_DML),
        output=TensorDesc(DataType.UINT8, [2, 2])))  # fmt: skip
    op.initialize([None, None, None, np.array([[1, -1], [2, 5]], np.int8), None, None, None, None])
    y = np.zeros((2, 2), np.uint8)
    one_value = np.array([1], np.float32)
    a = np.array([[1, 2], [3, 4]], np.uint8)
    op.execute([a, np.array([0.5], np.float32), None, None, one_value, None, one_value, None], [y])
    dmlq.set_num_threads(dmlq.get_num_threads())
    return y


def onnx_models(x: npt.NDArray[np.float32]) -> dict[str, npt.NDArray[np.generic]]:
    model = dmlq.onnx.load("examples/onnx/mlp_qdq.onnx")
    verdicts = dmlq.onnx.check(model, feature_level="4_0")
    print([verdict.valid for verdict in verdicts])
    outputs = dmlq.onnx.run(model, {"x": x}, feature_level="4_0")
    report = dmlq.onnx.compare(model, {"x": x}, seed=0)
    print(report)
    return outputs


def dask_arrays() -> npt.NDArray[np.int8]:
    x = da.random.default_rng(0).standard_normal((4096, 3072), chunks=(1024, 1024)).astype(np.float32)
    scale = np.array([[0.02], [0.03], [0.05], [0.04]], np.float32).repeat(1024, axis=0)
    q = dmlq.dask.quantize_linear(x, scale, np.int8(0))
    w = da.random.default_rng(1).integers(-128, 128, (3072, 512), chunks=(700, 256)).astype(np.int8)
    y = dmlq.dask.quantized_linear_matrix_multiply(q, scale, None, w, 0.01, None, 0.5, np.int8(0))
    result: npt.NDArray[np.int8] = y.compute()
    return result
