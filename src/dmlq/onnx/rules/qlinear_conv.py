"""QLinearConv 10 (``Operators/OperatorRegistration.cpp``: x, w and y int8 or uint8, B int32), the
model's or the QDQ Conv rule's (its bias DQ absorbed as B), becomes QUANTIZED_LINEAR_CONVOLUTION
(``Operators/DmlOperatorQLinearConv.cpp``, onnxruntime commit c4780e65b57e8c7e3f8f184a80c25aabc5530b06).

Fields in DirectML's order from ONNX's inputs ``{0, 1, 2, 3, 4, 5, 8, 6, 7}`` (B to BiasTensor, y's
scale and zero point after it); 3-D or 4-D input only ("Input can only be used with 3D/4D
tensors."), laid out as :mod:`.convolution` says; w's scale and zero point and B on the C axis
(``{1, M, 1, 1}`` from ``[M]``); x's and y's scale and zero point right-aligned to 4 dimensions; a
missing zero point stays absent. (``TryConvertTensorToBroadcastScalar`` gives a constant per-channel
tensor whose values are all equal zero strides: the same values, so dmlq keeps its packed layout.)
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from ...errors import DmlError
from ...ops import QuantizedLinearConvolution
from ...tensor import TensorDesc
from ..descs import data_type, own_desc
from ..graph import Graph
from ..steps import Described, Spec, described, required
from . import Mapped
from .convolution import convolution, per_channel

__all__ = ["NODES", "rule"]

NODES = {("", "QLinearConv"): None}
SOURCE = "DmlOperatorQLinearConv.cpp"
ORDER = (0, 1, 2, 3, 4, 5, 8, 6, 7)  # kernelInputIndices


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped:
    inputs = (list(node.input) + [""] * 9)[:9]
    return Mapped((QuantizedLinearConvolution,), build, tuple(inputs[index] for index in ORDER), SOURCE)


def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    x, x_scale, x_zero_point, w, w_scale, w_zero_point, bias, y_scale, y_zero_point = specs
    x, w = required(x), required(w)
    if len(x.shape) not in (3, 4):
        raise DmlError(f'x: {len(x.shape)}-D; "Input can only be used with 3D/4D tensors." ({SOURCE})')
    shapes = convolution(node, x, w)
    count = len(shapes.input.sizes)
    dtype = y_zero_point.dtype if y_zero_point is not None else x.dtype

    def own(spec: Spec | None) -> TensorDesc | None:
        return None if spec is None else own_desc(spec)

    desc = QuantizedLinearConvolution(
        input=shapes.input,
        input_scale=own(x_scale),
        input_zero_point=own(x_zero_point),
        filter=shapes.filter,
        filter_scale=per_channel(w_scale, count),
        filter_zero_point=per_channel(w_zero_point, count),
        bias=per_channel(bias, count),
        output_scale=own(y_scale),
        output_zero_point=own(y_zero_point),
        output=TensorDesc(data_type(dtype), shapes.sizes),
        **shapes.window,
    )
    return described(desc, shapes.sizes, shapes.shape, dtype)
