"""com.microsoft QLinearAveragePool 1 and QLinearGlobalAveragePool 1 (``Operators/
OperatorRegistration.cpp``: int8 or uint8), the model's or the QDQ 1DQ rule's, become
QUANTIZED_LINEAR_AVERAGE_POOLING (``Operators/DmlOperatorQLinearAveragePooling.cpp``, onnxruntime
commit c4780e65b57e8c7e3f8f184a80c25aabc5530b06).

ONNX's input order is DirectML's. Every tensor is right-aligned to at least 4 dimensions (so 1-D
pooling ``[N, C, W]`` is ``{1, N, C, W}``), and ``DimensionCount`` is that count less 2: a window of
fewer dimensions moves to the trailing ones, the leading ones window 1, stride 1, no padding. The
window is ``KernelArgs`` (:mod:`..kernel_args`; the global one spans the spatial dimensions, stride
1), ``ceil_mode`` included (DirectML's output size has no such window: the description is then
refused), auto_pad resolved as NCHW data even with ``channels_last``. ``channels_last`` data
``{N, *spatial, C}`` is read as NCHW by permuting sizes and strides, the scales and zero points
too. IncludePadding is ``count_include_pad``. A missing zero point is absent (the provider passes
an empty ``{DML_TENSOR_TYPE_INVALID, NULL}`` description, which dmlq reads as absent).
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from ...ops import QuantizedLinearAveragePooling
from ...tensor import TensorDesc
from ..descs import attribute, data_type, own_desc, padded
from ..graph import Graph
from ..kernel_args import at_least, global_kernel, kernel, output_shape
from ..loading import MICROSOFT
from ..steps import Described, Spec, described, required
from . import Mapped

__all__ = ["NODES", "rule"]

NODES = {(MICROSOFT, "QLinearAveragePool"): None, (MICROSOFT, "QLinearGlobalAveragePool"): None}
SOURCE = "DmlOperatorQLinearAveragePooling.cpp"


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped:
    return Mapped((QuantizedLinearAveragePooling,), build, tuple((list(node.input) + [""] * 5)[:5]), SOURCE)


def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    x, x_scale, x_zero_point, y_scale, y_zero_point = specs
    x = required(x)
    found = (
        global_kernel(node, x.shape) if node.op_type == "QLinearGlobalAveragePool" else kernel(node, x.shape)
    )
    shape = output_shape(x.shape, found, found.channels_last)
    count = len(padded(x.shape))
    args = at_least(found, count - 2)
    mapping = _mapping(count, found.channels_last)
    dtype = y_zero_point.dtype if y_zero_point is not None else x.dtype

    def laid(spec: Spec | None) -> TensorDesc | None:
        return None if spec is None else _permuted(own_desc(spec), mapping)

    desc = QuantizedLinearAveragePooling(
        input=laid(x),
        input_scale=laid(x_scale),
        input_zero_point=laid(x_zero_point),
        output_scale=laid(y_scale),
        output_zero_point=laid(y_zero_point),
        output=_permuted(TensorDesc(data_type(dtype), padded(shape)), mapping),
        dimension_count=args.count,
        strides=args.strides,
        window_size=args.window,
        start_padding=args.start,
        end_padding=args.end,
        dilations=args.dilations,
        include_padding=bool(attribute(node, "count_include_pad", 0)),
    )
    return described(desc, padded(shape), shape, dtype)


def _mapping(count: int, channels_last: bool) -> tuple[int, ...]:
    """``dimensionMapping``: NHWC's C moved before the spatial dimensions (``{0, 3, 1, 2}``), else NCHW."""
    if channels_last:
        return (0, count - 1, *range(1, count - 1))
    return tuple(range(count))


def _permuted(desc: TensorDesc, mapping: tuple[int, ...]) -> TensorDesc:
    """``TensorDesc::PermuteDimensions`` (left-aligned): dimension ``i`` is the old ``mapping[i]`` (size 1,
    stride 0 past the old ones). NCHW's identity keeps the packed layout."""
    sizes, strides = desc.sizes, desc.element_strides
    if mapping == tuple(range(len(sizes))):
        return desc
    new_sizes = [sizes[axis] if axis < len(sizes) else 1 for axis in mapping]
    new_strides = [strides[axis] if axis < len(sizes) else 0 for axis in mapping]
    return TensorDesc(desc.data_type, new_sizes, new_strides)
