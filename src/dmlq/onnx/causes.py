"""Why a mapped step's output differs from onnxruntime CPU's nodes on the same inputs. Each cause
is named only where the numbers fit it (a difference of at most one unit, or within the rounding
error of float sums); any other difference is "not a known cause".

* a QDQ group the provider fuses (DQ, DQ -> MatMul -> Q as QLinearMatMul, ...): DirectML computes
  the integer operator and rounds once, where ONNX's nodes quantize a float result computed from
  dequantized values (the rule names its source);
* QuantizeLinear / DequantizeLinear 21 whose scale the provider lays along other dimensions than
  ``axis`` says: "the provider does not read axis for opset 21" (the description's warning);
* QuantizeLinear: ``x / scale`` within a float32 rounding of a .5 tie is broken differently;
* QLinearAdd (and the QDQ Add group): onnxruntime requantizes with the ratios of the scales,
  DirectML with the float32 formula, which resolve near-ties differently;
* QLinearMatMul and MatMulInteger with uint8 A and int8 B where this machine's onnxruntime
  saturates (:func:`.ort_int8.u8s8_saturates`): its AVX2 kernel saturates the int16 sum of each
  adjacent pair of products, where DirectML accumulates exactly (recomputed with
  :mod:`.ort_int8`); the rest of QLinearMatMul's differences are requantization near-ties;
* QLinearConv (one unit at most): onnxruntime CPU scales with one float32 multiplier, dmlq in
  float64 and rounds once (near-ties; ``docs/operators.md``); QLinearConv and ConvInteger with uint8
  x and int8 w where this machine's onnxruntime saturates: every differing element has two products
  ``|x * w|`` summing past int16's range;
* QLinearAveragePool (one unit at most): dmlq rounds ``avg / scale`` halves to even, then adds the
  zero point (the page's formula, ``docs/operators.md``), where onnxruntime CPU averages in float32
  and adds the zero point before rounding (an odd zero point sends exact ties the other way);
* DynamicQuantizeLinear: its scale on an all-zero input (dmlq 1 / 255 as ONNX's reference,
  onnxruntime CPU 1.0); a near-tie of ``x / scale`` (one unit);
* GEMM, MatMulNBits' DEQUANTIZE + GEMM and MATRIX_MULTIPLY_INTEGER_TO_FLOAT (float outputs within
  the rounding error of float32 sums, ``2 * gamma_K * sum |a| |b|``): the sums run in another order
  (dmlq: each sum over k in order, or the exact integer sum scaled once; onnxruntime: MLAS), which
  DirectML does not promise either; MatMulNBits with accuracy_level 4 on onnxruntime CPU quantizes A to int8
  (``contrib_ops/cpu/quantization/matmul_nbits.cc``, SQNBIT_CompInt8); MATRIX_MULTIPLY_INTEGER_TO_FLOAT
  with uint8 A and int8 B where this machine's onnxruntime saturates: within those errors once the
  recomputed saturation, scaled, is added to dmlq's result;
* DynamicQuantizeMatMul: the provider quantizes A to B's type (int8 for int8 weights), onnxruntime
  CPU to uint8 (``contrib_ops/cpu/quantization/dynamic_quantize_matmul.cc``); with uint8 weights, a
  near-tie of A's quantization (one unit of A) plus float sums.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx

from ..ops import (
    ConvolutionInteger,
    Dequantize,
    DynamicQuantizeLinear,
    ElementWiseQuantizedLinearAdd,
    ElementWiseQuantizeLinear,
    Gemm,
    MatrixMultiplyInteger,
    MatrixMultiplyIntegerToFloat,
    OperatorDesc,
    Quantize,
    QuantizedLinearAveragePooling,
    QuantizedLinearConvolution,
    QuantizedLinearMatrixMultiply,
)
from .descs import attribute
from .ort_int8 import pair_saturation, u8s8_saturates
from .rules import DML
from .steps import Spec, Step

__all__ = ["UNEXPLAINED", "step_cause"]

UNEXPLAINED = "not a known cause"
FLOAT_SUMS = (
    "float32 sums in another order (dmlq: each sum over k in order, or the exact integer sum scaled once; "
    "onnxruntime: MLAS), within their rounding error; DirectML promises no order either"
)
CONVOLUTION = (
    "requantization near-tie: onnxruntime CPU scales with one float32 multiplier XS * WS[m] / YS, dmlq "
    "evaluates (acc + B) * XS * WS[m] / YS in float64 and rounds once (docs/operators.md)"
)
POOLING = (
    "requantization: dmlq rounds avg / YS halves to even, then adds the zero point (docs/operators.md); "
    "onnxruntime CPU averages in float32 and adds the zero point before rounding (odd zero points at exact "
    "ties, near-ties)"
)
PAIR_SATURATION = (
    "onnxruntime's u8xs8 kernel without VNNI (vpmaddubsw) saturates int16 pair sums; "
    "DirectML accumulates exactly"
)
NEAR_TIE = "x / scale is a rounding tie (within a float32 rounding of .5) onnxruntime breaks differently"
LIPSCHITZ = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Dropout")  # activations that never widen a gap


def step_cause(step: Step, warning: str, values: Mapping[str, np.ndarray], output: str, ours: np.ndarray,
               theirs: np.ndarray) -> str:  # fmt: skip
    """The cause of the differences in one output of ``step`` (ours and theirs of one shape)."""
    if warning:
        return warning
    if len(step.covers) > 1 and step.node.op_type.startswith("QLinear"):
        return (
            f"the provider fuses {' -> '.join(map(_short, step.covers))} into {step.node.op_type} "
            f"({step.rule.split(';')[0]}): DirectML computes the quantized operator and rounds once, where "
            "ONNX's nodes quantize a float result computed from dequantized values"
        )
    cause = CAUSES.get(step.operators)
    return UNEXPLAINED if cause is None else cause(step, values, output, ours, theirs)


def _short(node: onnx.NodeProto) -> str:
    return {"QuantizeLinear": "Q", "DequantizeLinear": "DQ"}.get(node.op_type, node.op_type)


def _gap(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    return np.abs(ours.astype(np.float64) - theirs.astype(np.float64))


def _within_one(ours: np.ndarray, theirs: np.ndarray, cause: str) -> str:
    return cause if _gap(ours, theirs).max(initial=0) <= 1 else UNEXPLAINED


def _quantize(
    step: Step, values: Mapping[str, np.ndarray], output: str, ours: np.ndarray, theirs: np.ndarray
) -> str:
    return NEAR_TIE


def _quantized_add(
    step: Step, values: Mapping[str, np.ndarray], output: str, ours: np.ndarray, theirs: np.ndarray
) -> str:
    return "onnxruntime's QLinearAdd requantizes with ratios of scales, DirectML with the float32 formula"


def _convolution(
    step: Step, values: Mapping[str, np.ndarray], output: str, ours: np.ndarray, theirs: np.ndarray
) -> str:
    cause = _within_one(ours, theirs, CONVOLUTION)
    return cause if cause != UNEXPLAINED else _convolution_saturation(step, values, 3, ours != theirs)


def _convolution_integer(
    step: Step, values: Mapping[str, np.ndarray], output: str, ours: np.ndarray, theirs: np.ndarray
) -> str:
    return _convolution_saturation(step, values, 2, ours != theirs)


def _convolution_saturation(step: Step, values: Mapping[str, np.ndarray], filter_index: int,
                            differing: np.ndarray) -> str:  # fmt: skip
    """onnxruntime's u8 x s8 convolutions on a CPU without VNNI saturate int16 pair sums too; their pairs
    depend on its kernels' layouts, so the evidence asked is weaker than for the matrix multiply: every
    differing element has two taps whose products |x * w| sum past int16's range (else no pairing could
    saturate there)."""
    x, w = values[step.inputs[0]], values[step.inputs[filter_index]]
    if (x.dtype, w.dtype) != (np.dtype(np.uint8), np.dtype(np.int8)) or not u8s8_saturates():
        return UNEXPLAINED
    x_zero_point = values[step.inputs[filter_index - 1]] if step.inputs[filter_index - 1] else np.uint8(0)
    desc = step.describe([None if not name else Spec(values[name].dtype, values[name].shape)
                          for name in step.inputs]).desc  # fmt: skip
    assert isinstance(desc, (QuantizedLinearConvolution, ConvolutionInteger)), "a convolution's step"
    assert desc.input is not None and desc.filter is not None, "a convolution's input and filter"
    largest = _two_largest_products(x.reshape(desc.input.sizes), int(x_zero_point.reshape(-1)[0]),
                                    w.reshape(desc.filter.sizes), desc)  # fmt: skip
    if np.all(largest.reshape(differing.shape)[differing] > 32767):
        return f"{PAIR_SATURATION} (each differing element has two products past int16's range)"
    return UNEXPLAINED


def _two_largest_products(x: np.ndarray, x_zero_point: int, w: np.ndarray,
                          desc: QuantizedLinearConvolution | ConvolutionInteger) -> np.ndarray:  # fmt: skip
    """Per output element ``{N, M, outH, outW}``, the sum of its window's two largest ``|x * w|`` (the
    input padded with its zero point, as onnxruntime pads; x taken as uint8 or shifted to int8,
    whichever is larger)."""
    pads = [(0, 0), (0, 0), *zip(desc.start_padding, desc.end_padding)]
    padded = np.pad(x.astype(np.int64), pads, constant_values=x_zero_point)
    padded = np.maximum(padded, np.abs(padded - 128))  # x as the kernel reads it: u8, or shifted to s8
    assert desc.output is not None, "a convolution's output"
    (m, per_group, *window), outputs = w.shape, desc.output.sizes[2:]
    first = np.zeros(desc.output.sizes, np.int64)
    second = np.zeros_like(first)
    per_output = m // desc.group_count
    for i, j, c in np.ndindex(*window, per_group):
        rows = slice(i * desc.dilations[0], i * desc.dilations[0] + desc.strides[0] * (outputs[0] - 1) + 1,
                     desc.strides[0])  # fmt: skip
        cols = slice(j * desc.dilations[1], j * desc.dilations[1] + desc.strides[1] * (outputs[1] - 1) + 1,
                     desc.strides[1])  # fmt: skip
        channels = np.arange(desc.group_count).repeat(per_output) * per_group + c  # each output's channel c
        taps = padded[:, channels, rows, cols]
        products = np.abs(taps * w[:, c, i, j].astype(np.int64)[None, :, None, None])
        second = np.maximum(second, np.minimum(first, products))
        first = np.maximum(first, products)
    return first + second


def _pooling(
    step: Step, values: Mapping[str, np.ndarray], output: str, ours: np.ndarray, theirs: np.ndarray
) -> str:
    return _within_one(ours, theirs, POOLING)


def _qlinear_matmul(
    step: Step, values: Mapping[str, np.ndarray], output: str, ours: np.ndarray, theirs: np.ndarray
) -> str:
    near_tie = "requantization near-tie: onnxruntime multiplies by a float32 multiplier, DirectML rounds once"
    return _saturation(values[step.inputs[0]], values[step.inputs[3]], ours != theirs, near_tie)


def _matmul_integer(
    step: Step, values: Mapping[str, np.ndarray], output: str, ours: np.ndarray, theirs: np.ndarray
) -> str:
    return _saturation(values[step.inputs[0]], values[step.inputs[2]], ours != theirs, UNEXPLAINED)


def _saturation(a: np.ndarray, b: np.ndarray, differing: np.ndarray, otherwise: str) -> str:
    """The saturation of onnxruntime's u8 x s8 kernel where recomputing the node with it reaches the
    differing elements; ``otherwise`` for the rest."""
    if (
        not differing.any()
        or (a.dtype, b.dtype) != (np.dtype(np.uint8), np.dtype(np.int8))
        or not u8s8_saturates()
    ):
        return otherwise
    saturation = _pair_loss(a, b, differing.shape)
    reached = int(np.count_nonzero(saturation[differing]))
    if not reached:
        return otherwise
    total = int(np.count_nonzero(differing))
    cause = f"{PAIR_SATURATION} (recomputed: the saturation reaches {reached} of {total} differing elements)"
    if reached == total:
        return cause
    return UNEXPLAINED if otherwise == UNEXPLAINED else f"{cause}; the others: {otherwise}"


def _pair_loss(a: np.ndarray, b: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """:func:`.pair_saturation` of a MatMul's operands (either may be 1-D, as ONNX's MatMul allows), in the
    output's ``shape``."""
    return pair_saturation(np.atleast_2d(a), b.reshape(-1, 1) if b.ndim == 1 else b).reshape(shape)


def _dynamic_quantize(
    step: Step, values: Mapping[str, np.ndarray], output: str, ours: np.ndarray, theirs: np.ndarray
) -> str:
    if output == step.node.output[1] and not np.any(values[step.inputs[0]]):
        return ("an all-zero input: dmlq's scale is 1 / 255, ONNX's reference's, onnxruntime CPU's 1.0 "
                "(docs/operators.md, DynamicQuantizeLinear); every output is the zero point either "
                "way")  # fmt: skip
    return _within_one(ours, theirs, NEAR_TIE) if output != step.node.output[1] else UNEXPLAINED


def _float_sums(
    step: Step, values: Mapping[str, np.ndarray], output: str, ours: np.ndarray, theirs: np.ndarray
) -> str:
    found = _magnitude(step, values)
    if found is None:
        return UNEXPLAINED
    magnitude, count = found
    if _within_sums(ours, theirs, magnitude, count):
        return FLOAT_SUMS
    if step.operators == (MatrixMultiplyIntegerToFloat,):
        return _integer_to_float_saturation(step, values, ours, theirs, magnitude, count)
    if step.operators == (Dequantize, Gemm) and int(attribute(step.node, "accuracy_level", 0)) == 4:
        if step.covers == (step.node,):
            return ("onnxruntime CPU's MatMulNBits with accuracy_level 4 quantizes A to int8 "
                    "(contrib_ops/cpu/quantization/matmul_nbits.cc, SQNBIT_CompInt8); DirectML dequantizes B "
                    "and multiplies in float")  # fmt: skip
    return UNEXPLAINED


def _within_sums(ours: np.ndarray, theirs: np.ndarray, magnitude: np.ndarray, count: int,
                 slack: np.ndarray | float = 0.0) -> bool:  # fmt: skip
    """Each gap within ``slack`` and twice the error bound of a float sum of ``count`` products
    (Higham's gamma_K times the sum of their magnitudes) and a rounding of the result."""
    unit = float(np.finfo(theirs.dtype).eps) / 2
    gamma = count * unit / (1 - count * unit)
    tolerance = slack + 2 * gamma * magnitude + 2 * unit * np.abs(theirs.astype(np.float64))
    return bool(np.all(_gap(ours, theirs) <= tolerance))


def _magnitude(step: Step, values: Mapping[str, np.ndarray]) -> tuple[np.ndarray, int] | None:
    """``sum_k |a_k| |b_k|`` of each output element (what bounds a float sum's error) and K."""
    node = step.node
    if node.domain == DML and attribute(node, "fused_activation", "") not in LIPSCHITZ:
        return None
    if step.operators == (MatrixMultiplyIntegerToFloat,):
        return _integer_to_float(values, step)
    a = np.abs(values[step.inputs[0]].astype(np.float64))
    if step.operators == (Dequantize, Gemm):
        weights = np.abs(_nbits_weights(step, values))
        return a @ np.swapaxes(weights, -1, -2), a.shape[-1]
    b = np.abs(values[step.inputs[1]].astype(np.float64))
    if node.op_type.removeprefix("DmlFused") == "MatMul":
        return np.matmul(a, b), a.shape[-1]
    a = a.T if attribute(node, "transA", 0) else a
    b = b.T if attribute(node, "transB", 0) else b
    total = abs(float(attribute(node, "alpha", 1.0))) * (a @ b)
    if step.inputs[2]:
        c = np.abs(values[step.inputs[2]].astype(np.float64))
        total = total + abs(float(attribute(node, "beta", 1.0))) * c
    return total, a.shape[-1]


def _integer_to_float(values: Mapping[str, np.ndarray], step: Step) -> tuple[np.ndarray, int]:
    a, a_scale, b, b_scale = (values[step.inputs[index]].astype(np.float64) for index in (0, 1, 3, 4))
    a_zero_point, b_zero_point, bias = (
        None if not name else values[name].astype(np.float64) for name in (step.inputs[2], *step.inputs[5:7])
    )
    rows = _per_row(a_scale)
    a_real = (a - (0 if a_zero_point is None else a_zero_point.reshape(rows.shape))) * rows
    b_real = (b - (0 if b_zero_point is None else b_zero_point)) * b_scale
    total = np.abs(a_real) @ np.abs(b_real)
    return (total if bias is None else total + np.abs(bias)), a.shape[-1]


def _per_row(a_side: np.ndarray) -> np.ndarray:
    """A's scale or zero point of one value per row, as a column."""
    return a_side.reshape(-1, 1) if a_side.ndim == 1 and a_side.size > 1 else a_side


def _integer_to_float_saturation(step: Step, values: Mapping[str, np.ndarray], ours: np.ndarray,
                                 theirs: np.ndarray, magnitude: np.ndarray, count: int) -> str:  # fmt: skip
    """onnxruntime's MatMulInteger (the unfused nodes) loses :func:`.pair_saturation` before the scales
    multiply: ours with that loss scaled in must be within the float sums' error of theirs."""
    a, b = values[step.inputs[0]], values[step.inputs[3]]
    if (a.dtype, b.dtype) != (np.dtype(np.uint8), np.dtype(np.int8)) or not u8s8_saturates():
        return UNEXPLAINED
    a_scale, b_scale = (values[step.inputs[index]].astype(np.float64) for index in (1, 4))
    lost = _pair_loss(a, b, ours.shape) * _per_row(a_scale) * b_scale
    if not _within_sums(ours.astype(np.float64) + lost, theirs, magnitude + np.abs(lost), count):
        return UNEXPLAINED
    return f"{PAIR_SATURATION} (recomputed), then {FLOAT_SUMS}"


def _nbits_weights(step: Step, values: Mapping[str, np.ndarray]) -> np.ndarray:
    """MatMulNBits' B as ONNX's com.microsoft schema means it: ``[N, K]`` reals from the packed blocks,
    the scales and the zero points (default ``2^(bits - 1)``)."""
    node = step.node
    n, k, bits, block = (int(attribute(node, name, 0)) for name in ("N", "K", "bits", "block_size"))
    blocks = -(-k // block)
    packed = values[step.inputs[1]].reshape(n, -1)
    if bits == 4:
        packed = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(n, -1)
    q = packed[:, : blocks * block].astype(np.float64)
    zero_point = np.full((n, blocks), 2.0 ** (bits - 1))
    if len(step.inputs) > 3 and step.inputs[3]:
        stored = values[step.inputs[3]].reshape(n, -1)
        if bits == 4:
            stored = np.stack([stored & 0xF, stored >> 4], axis=-1).reshape(n, -1)
        zero_point = stored[:, :blocks].astype(np.float64)
    scale = values[step.inputs[2]].reshape(n, blocks).astype(np.float64)
    reals = (q - np.repeat(zero_point, block, axis=1)) * np.repeat(scale, block, axis=1)
    weights: np.ndarray = reals[:, :k]
    return weights


def _dynamic_quantize_matmul(
    step: Step, values: Mapping[str, np.ndarray], output: str, ours: np.ndarray, theirs: np.ndarray
) -> str:
    a, b = values[step.inputs[0]], values[step.inputs[1]]
    if b.dtype == np.int8:
        return ("the provider quantizes A to B's type (int8), onnxruntime CPU to uint8 "
                "(contrib_ops/cpu/quantization/dynamic_quantize_matmul.cc)")  # fmt: skip
    b_real = np.abs(b.astype(np.float64) - (values[step.inputs[3]] if step.inputs[3] else 0))
    b_real = b_real * values[step.inputs[2]].astype(np.float64)
    a_scale = (max(float(a.max(initial=0)), 0.0) - min(float(a.min(initial=0)), 0.0)) / 255
    one_unit = a_scale * b_real.sum(axis=-2, keepdims=True)  # one unit of A's quantization in every term
    magnitude = np.abs(a.astype(np.float64)) @ b_real + one_unit
    if _within_sums(ours, theirs, magnitude, a.shape[-1], slack=one_unit):
        return f"A's quantization at near-ties (one unit of A) and {FLOAT_SUMS}"
    return UNEXPLAINED


Cause = Callable[[Step, Mapping[str, np.ndarray], str, np.ndarray, np.ndarray], str]
CAUSES: dict[tuple[type[OperatorDesc], ...], Cause] = {
    (ElementWiseQuantizeLinear,): _quantize,
    (Quantize,): _quantize,
    (ElementWiseQuantizedLinearAdd,): _quantized_add,
    (QuantizedLinearMatrixMultiply,): _qlinear_matmul,
    (MatrixMultiplyInteger,): _matmul_integer,
    (QuantizedLinearConvolution,): _convolution,
    (ConvolutionInteger,): _convolution_integer,
    (QuantizedLinearAveragePooling,): _pooling,
    (DynamicQuantizeLinear,): _dynamic_quantize,
    (Gemm,): _float_sums,
    (Dequantize, Gemm): _float_sums,
    (MatrixMultiplyIntegerToFloat,): _float_sums,
    (DynamicQuantizeLinear, MatrixMultiplyIntegerToFloat): _dynamic_quantize_matmul,
}
