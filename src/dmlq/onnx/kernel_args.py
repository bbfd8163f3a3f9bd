"""The window of a convolution or pooling node as onnxruntime's DirectML provider reads it: its
``KernelArgs`` (``providers/dml/OperatorAuthorHelper/OperatorHelper.{h,cpp}``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06): ``InitializeKernel`` (strides, dilations and pads from the
attributes, the window from ``kernel_shape`` or the filter), ``InitializeGlobalKernel``,
``ResolveAutoPadding``, ``InitializeKernelOutputDimensions`` and the copy padded to a minimum
dimension count with leading 1s and 0s."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

import onnx

from ..errors import DmlError
from .descs import attribute

__all__ = ["KernelArgs", "at_least", "global_kernel", "kernel", "output_shape"]

NONSPATIAL = 2  # N and C (NonspatialDimensionCount)
MOST_SPATIAL = 3  # NcdhwSpatialDimensionCount


@dataclass(frozen=True)
class KernelArgs:
    """Per spatial dimension: stride, dilation, window, padding at the start and at the end."""

    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    window: tuple[int, ...]
    start: tuple[int, ...]
    end: tuple[int, ...]
    ceil: bool = False
    channels_last: bool = False

    @property
    def count(self) -> int:
        return len(self.strides)


def _spatial(rank: int) -> int:
    if rank <= NONSPATIAL or rank - NONSPATIAL > MOST_SPATIAL:
        raise DmlError(
            f"input: {rank}-D, the provider's kernels take 3-D to 5-D data (1 to 3 spatial dimensions)"
        )
    return rank - NONSPATIAL


def _ints(node: onnx.NodeProto, name: str) -> list[int] | None:
    found = attribute(node, name, None)
    # An INTS attribute: its schema's type, which onnx.checker holds a loaded model to.
    return None if found is None else [int(value) for value in cast("list[int]", found)]


def kernel(node: onnx.NodeProto, shape: Sequence[int], filter_shape: Sequence[int] = ()) -> KernelArgs:
    """``InitializeKernel`` for data of ``shape`` (NCHW), then ``ResolveAutoPadding`` as NCHW data."""
    count = _spatial(len(shape))

    def leading(name: str, default: int) -> tuple[int, ...]:
        values = _ints(node, name)
        if values is None:
            return (default,) * count
        if len(values) < count:
            raise DmlError(f"{name}: {values} holds fewer than {count} values (ML_CHECK_VALID_ARGUMENT)")
        return tuple(values[:count])

    strides, dilations = leading("strides", 1), leading("dilations", 1)
    given = _ints(node, "kernel_shape") or list(filter_shape)
    window = tuple(given[len(given) - count :]) if given else (1,) * count
    auto_pad = str(attribute(node, "auto_pad", "NOTSET"))
    pads = _ints(node, "pads") or [0] * (2 * count)
    if len(pads) < 2 * count:
        raise DmlError(f"pads: {pads} holds fewer than {2 * count} values (ML_CHECK_VALID_ARGUMENT)")
    start, end = tuple(pads[:count]), tuple(pads[count : 2 * count])
    if auto_pad == "VALID":
        start = end = (0,) * count
    args = KernelArgs(strides, dilations, window, start, end, bool(attribute(node, "ceil_mode", 0)),
                      bool(attribute(node, "channels_last", 0)))  # fmt: skip
    return _auto_padded(args, shape, auto_pad) if auto_pad in ("SAME_UPPER", "SAME_LOWER") else args


def _auto_padded(args: KernelArgs, shape: Sequence[int], mode: str) -> KernelArgs:
    """``ResolveAutoPadding``: the padding that keeps ``ceil(in / stride)`` outputs, the odd one at the
    end for SAME_UPPER, at the start for SAME_LOWER."""
    start, end = [], []
    for length, stride, window, dilation in zip(
        shape[NONSPATIAL:], args.strides, args.window, args.dilations
    ):
        strided = (length + stride - 1) // stride
        needed = stride * (strided - 1) + 1 + (window - 1) * dilation
        padding = max(needed - length, 0)
        start.append(padding // 2 if mode == "SAME_UPPER" else (padding + 1) // 2)
        end.append(padding - start[-1])
    return replace(args, start=tuple(start), end=tuple(end))


def global_kernel(node: onnx.NodeProto, shape: Sequence[int]) -> KernelArgs:
    """``InitializeGlobalKernel``: the window is the whole spatial extent, stride 1, no padding."""
    count = _spatial(len(shape))
    channels_last = bool(attribute(node, "channels_last", 0))
    offset = 1 if channels_last else 0
    window = tuple(shape[len(shape) - count - offset : len(shape) - offset])
    ones, zeros = (1,) * count, (0,) * count
    return KernelArgs(ones, ones, window, zeros, zeros, bool(attribute(node, "ceil_mode", 0)), channels_last)


def output_shape(shape: Sequence[int], args: KernelArgs, channels_last: bool = False) -> tuple[int, ...]:
    """``InitializeKernelOutputDimensions``: each spatial length ``1 + (padded - extent) // stride``, plus
    one with ``ceil_mode`` where the division leaves a remainder; N and C as the input's."""
    offset = 1 if channels_last else len(shape) - args.count
    result = list(shape)
    for axis in range(args.count):
        padded = shape[offset + axis] + args.start[axis] + args.end[axis]
        extent = 1 + (args.window[axis] - 1) * args.dilations[axis]
        if extent > padded:
            raise DmlError(f"kernel: the window's extent {extent} exceeds the padded input's {padded} "
                           "(\"kernelLength must be < paddedLength.\")")  # fmt: skip
        if args.strides[axis] == 0:
            raise DmlError("strides: must be non-zero")
        room = padded - extent
        result[offset + axis] = (
            1 + room // args.strides[axis] + int(args.ceil and room % args.strides[axis] != 0)
        )
    return tuple(result)


def at_least(args: KernelArgs, count: int) -> KernelArgs:
    """The copy with at least ``count`` spatial dimensions, the new leading ones stride 1, dilation 1,
    window 1 and no padding (``KernelArgs(kernelArgs, minimumDimensionCount)``)."""
    fill = max(count - args.count, 0)
    return replace(
        args,
        strides=(1,) * fill + args.strides,
        dilations=(1,) * fill + args.dilations,
        window=(1,) * fill + args.window,
        start=(0,) * fill + args.start,
        end=(0,) * fill + args.end,
    )
