"""What the provider's two integer convolutions build alike (``Operators/DmlOperatorQLinearConv.cpp``,
``Operators/DmlOperatorConvInteger.cpp``, both on ``ConvolutionHelperBase``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06): the input, filter and output keep N and C on the left
and take the 1s they need before the spatial dimensions (``[N, C, W]`` is ``{N, C, 1, W}``); the
window is ``KernelArgs`` (:mod:`..kernel_args`) padded to 2 spatial dimensions, ``group`` is
GroupCount; the output has the filter's M channels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import onnx

from ...tensor import TensorDesc
from ..descs import LEFT_ALIGNED, C, aligned, attribute, data_type
from ..kernel_args import at_least, kernel, output_shape
from ..steps import Spec

__all__ = ["Convolution", "convolution", "per_channel"]

NONSPATIAL = 2


class Window(TypedDict):
    """The window's fields of the convolution descriptions."""

    dimension_count: int
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    start_padding: tuple[int, ...]
    end_padding: tuple[int, ...]
    group_count: int


@dataclass(frozen=True)
class Convolution:
    """The descriptions' shared part: input and filter, the output's sizes and ONNX shape, the window."""

    input: TensorDesc
    filter: TensorDesc
    sizes: tuple[int, ...]
    shape: tuple[int, ...]
    window: Window


def convolution(node: onnx.NodeProto, x: Spec, w: Spec) -> Convolution:
    args = kernel(node, x.shape, w.shape)
    shape = output_shape(x.shape, args)
    shape = (shape[0], w.shape[0], *shape[NONSPATIAL:])
    padded = at_least(args, 2)
    window: Window = {
        "dimension_count": padded.count,
        "strides": padded.strides,
        "dilations": padded.dilations,
        "start_padding": padded.start,
        "end_padding": padded.end,
        "group_count": int(attribute(node, "group", 1)),
    }
    return Convolution(
        TensorDesc(data_type(x.dtype), aligned(x.shape, 0, NONSPATIAL)),
        TensorDesc(data_type(w.dtype), aligned(w.shape, 0, NONSPATIAL)),
        aligned(shape, 0, NONSPATIAL),
        shape,
        window,
    )


def per_channel(spec: Spec | None, count: int) -> TensorDesc | None:
    """A filter scale, zero point or bias: a 1-D one on the C axis, ``{1, M, 1, 1}``."""
    if spec is None:
        return None
    return TensorDesc(data_type(spec.dtype), aligned(spec.shape, C, LEFT_ALIGNED, count))
