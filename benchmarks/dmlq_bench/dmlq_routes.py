"""dmlq's two layers: the public NumPy functions and ``CompiledOperator.execute`` on buffers."""

from __future__ import annotations

import numpy as np

import dmlq
from dmlq import DataType, Device, TensorDesc, _core, ops

from . import data
from .timing import Contender, fixed


def _packed(array: np.ndarray) -> TensorDesc:
    return TensorDesc(DataType.from_dtype(array.dtype), list(array.shape))


def _broadcast(array: np.ndarray, sizes: tuple[int, ...]) -> TensorDesc:
    """A one-element tensor read at every position through zero strides."""
    return TensorDesc(DataType.from_dtype(array.dtype), list(sizes), strides=[0] * len(sizes))


def _execute(desc: dmlq.OperatorDesc, inputs: list[np.ndarray], out: np.ndarray) -> Contender:
    """The DirectML layer: compiled once, executed on pre-made buffers into a reused output."""
    operator = Device().compile_operator(desc)

    def call() -> np.ndarray:
        operator.execute(inputs, [out])
        return out

    return Contender("dmlq.execute", fixed(call), note="DirectML layer, output buffer reused")


def quantize(p: data.Quantize) -> list[Contender]:
    out = np.empty(p.x.shape, np.uint8)
    desc = ops.ElementWiseQuantizeLinear(
        input=_packed(p.x), scale=_broadcast(p.scale, p.x.shape),
        zero_point=_broadcast(p.zero_point, p.x.shape), output=_packed(out),
    )  # fmt: skip
    return [
        Contender("dmlq", fixed(lambda: dmlq.quantize_linear(p.x, p.scale, p.zero_point))),
        _execute(desc, [p.x, p.scale.reshape(1), p.zero_point.reshape(1)], out),
    ]


def dequantize(p: data.Dequantize) -> list[Contender]:
    out = np.empty(p.q.shape, np.float32)
    desc = ops.ElementWiseDequantizeLinear(
        input=_packed(p.q), scale=_broadcast(p.scale, p.q.shape),
        zero_point=_broadcast(p.zero_point, p.q.shape), output=_packed(out),
    )  # fmt: skip
    return [
        Contender("dmlq", fixed(lambda: dmlq.dequantize_linear(p.q, p.scale, p.zero_point))),
        _execute(desc, [p.q, p.scale.reshape(1), p.zero_point.reshape(1)], out),
    ]


QUANTIZED_ADD_FIELDS = ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point",
                        "output_scale", "output_zero_point")  # fmt: skip


def quantized_add(p: data.QuantizedAdd) -> list[Contender]:
    out = np.empty(p.a.shape, np.uint8)
    buffers = [getattr(p, name).reshape(-1) for name in QUANTIZED_ADD_FIELDS]
    descs = {name: _packed(buffer) for name, buffer in zip(QUANTIZED_ADD_FIELDS, buffers)}
    desc = ops.ElementWiseQuantizedLinearAdd(**descs, output=_packed(out))
    args = [getattr(p, name) for name in QUANTIZED_ADD_FIELDS]
    return [
        Contender("dmlq", fixed(lambda: dmlq.quantized_linear_add(*args))),
        _execute(desc, buffers, out),
    ]


def add_relu(p: data.FloatAdd) -> list[Contender]:
    out = np.empty_like(p.a)
    relu = dmlq.activations.Relu()
    desc = ops.ElementWiseAdd1(a=_packed(p.a), b=_packed(p.b), output=_packed(out), fused_activation=relu)
    return [
        Contender("dmlq", fixed(lambda: dmlq.add(p.a, p.b, fused_activation="relu"))),
        _execute(desc, [p.a, p.b], out),
    ]


def matmul(p: data.MatMul, name: str = "dmlq") -> Contender:
    args = (p.a, p.a_scale, p.a_zero_point, p.b, p.b_scale, p.b_zero_point,
            p.output_scale, p.output_zero_point)  # fmt: skip
    return Contender(name, fixed(lambda: dmlq.quantized_linear_matrix_multiply(*args)))


def packed_matmul(p: data.MatMul, name: str = "dmlq packed") -> Contender:
    """B, its scale and zero point packed once (``dmlq.pack_matrix_multiply_b``), as weights are."""
    packed = dmlq.pack_matrix_multiply_b(p.b, p.b_scale, p.b_zero_point)
    args = (p.a, p.a_scale, p.a_zero_point, packed, None, None, p.output_scale, p.output_zero_point)
    return Contender(name, fixed(lambda: dmlq.quantized_linear_matrix_multiply(*args)))


def at_level(level: str, contender: Contender) -> Contender:
    """``contender`` run on the compiled core's kernels of CPU ``level`` (set before every call).

    Setting the level is one C call; a packing keeps one copy per level's kernel set, so contenders
    of different levels can be interleaved without repacking.
    """

    def prepare(threads: int):
        call = contender.prepare(threads)

        def on_level():
            _core.set_level(level)
            return call()

        return on_level

    return Contender(f"{contender.name} [{level}]", prepare, contender.result, contender.note)
