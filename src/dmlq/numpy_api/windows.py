"""The windowed operators: ``quantized_linear_convolution`` and ``convolution_integer`` (DirectML's
QuantizedLinearConvolution and ConvolutionInteger), ``quantized_linear_average_pooling``
(QuantizedLinearAveragePooling), on arrays laid out as DirectML lays them, NCHW.

A convolution takes ``x`` ``[N, C, H, W]`` and ``w`` ``[M, C / group_count, kH, kW]`` into
``[N, M, outH, outW]``, or a 1-D convolution's ``[N, C, W]`` and ``[M, C / group_count, kW]``, which
DirectML reads with H = 1; the pooling takes ``x`` ``[N, C, H, W]`` or ``[N, C, D, H, W]``. Their
window attributes hold one value per spatial dimension of ``x``
(:func:`dmlq.numpy_api.rules.window_attributes`). Scales, zero points and the bias broadcast like
NumPy operands against their array (``x_*`` against ``x``, ``w_*`` against ``w``, ``bias`` and
``output_*`` against the result), each per-tensor or per-channel
(:func:`dmlq.numpy_api.rules.channel_parameter`); which of them may be per-channel is the operators'
rule. The data dtypes are the operators' tables':

>>> CONVOLUTION_DATA, BIAS_DATA, INTEGER_OUTPUT, POOLING_DATA
((dtype('int8'), dtype('uint8')), (dtype('int32'),), dtype('int32'), (dtype('int8'), dtype('uint8')))
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..ops.convolution_integer import ConvolutionInteger
from ..ops.quantized_linear_average_pooling import QuantizedLinearAveragePooling
from ..ops.quantized_linear_convolution import QuantizedLinearConvolution
from ..ops.windows import WindowedOperator
from . import rules
from .compiling import computed, supported_dimensions, supported_dtypes
from .rules import F32, channel_parameter, integer_data, output_dtype

__all__ = ["convolution_integer", "quantized_linear_average_pooling", "quantized_linear_convolution"]

CONVOLUTION_DATA = supported_dtypes(QuantizedLinearConvolution, "input")  # the filter's and output's too
BIAS_DATA = supported_dtypes(QuantizedLinearConvolution, "bias")
INTEGER_DATA = supported_dtypes(ConvolutionInteger, "input")  # the filter's too
(INTEGER_OUTPUT,) = supported_dtypes(ConvolutionInteger, "output")
POOLING_DATA = supported_dtypes(QuantizedLinearAveragePooling, "input")  # the output's too
# The NumPy argument of each field (the others share their names).
ARGUMENTS = {"input": "x", "input_scale": "x_scale", "input_zero_point": "x_zero_point", "filter": "w",
             "filter_scale": "w_scale", "filter_zero_point": "w_zero_point"}  # fmt: skip
Window = dict[str, tuple[object, ...]]
Arguments = dict[str, str]
Fields = dict[str, np.ndarray | None]
Attribute = Sequence[int] | None


def quantized_linear_convolution(x: ArrayLike, x_scale: ArrayLike, x_zero_point: ArrayLike | None,
                                 w: ArrayLike, w_scale: ArrayLike, w_zero_point: ArrayLike | None,
                                 bias: ArrayLike | None, output_scale: ArrayLike,
                                 output_zero_point: ArrayLike | None, *, strides: Attribute = None,
                                 dilations: Attribute = None, start_padding: Attribute = None,
                                 end_padding: Attribute = None, group_count: int = 1,
                                 dtype: DTypeLike | None = None,
                                 out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """The quantized cross-correlation of ``x`` with the filters ``w``, plus ``bias``, requantized:

        acc[n, m, o] = sum over c in m's group and the taps k of (x[n, c, o*s - start + k*d] - XZP)
                                                                 * (w[m, c, k] - WZP[m])
        out = clamp(round((acc + bias[m]) * XS * WS[m] / YS) + YZP, Min, Max)

    ``x`` and ``w`` are uint8 or int8 (lists take their zero point's dtype, else uint8); padding holds
    ``x``'s zero point (a real 0). ``x_scale``, ``x_zero_point``, ``output_scale`` and
    ``output_zero_point`` are per-tensor; ``w_scale`` and ``w_zero_point`` per-tensor or one value per
    filter, ``(M, 1, 1, 1)`` against ``w``; the int32 ``bias`` (in units of ``XS * WS[m]``, None: 0) per
    output channel, ``(M, 1, 1)`` against the result, or one value for all. ``strides``, ``dilations``,
    ``start_padding`` and ``end_padding`` hold one value per spatial dimension of ``x`` (None: ones and
    zeros). The output's dtype is ``output_zero_point``'s when it is a NumPy array or scalar, else
    ``dtype``, else ``x``'s. The rules of each argument: :mod:`dmlq.numpy_api.rules`.

    >>> x = np.uint8([[[[1, 2, 3], [4, 5, 6], [7, 8, 9]]]])             # [N, C, H, W]
    >>> w = np.int8([[[[1, 0], [0, -1]]]])                              # [M, C, kH, kW]
    >>> # each sum is x[i, j] - x[i + 1, j + 1] = -4; -4 * 0.5 * 1.0 / 0.25 = -8, + 10
    >>> quantized_linear_convolution(x, 0.5, None, w, 1.0, None, None, 0.25, np.uint8(10))
    array([[[[2, 2],
             [2, 2]]]], dtype=uint8)
    """
    desc_type = QuantizedLinearConvolution
    x = integer_data(x, "x", x_zero_point, CONVOLUTION_DATA)
    w = integer_data(w, "w", w_zero_point, CONVOLUTION_DATA)
    window, shape, arguments = convolution_geometry(desc_type, x, w, strides, dilations, start_padding,
                                                    end_padding)  # fmt: skip
    out_dtype = output_dtype(output_zero_point, dtype, x.dtype, "output_zero_point", CONVOLUTION_DATA)
    bias_array = None if bias is None else rules.data(bias, "bias", BIAS_DATA, BIAS_DATA[0])
    operands = {
        **_x_and_output(x, x_scale, x_zero_point, output_scale, output_zero_point, out_dtype, shape,
                        CONVOLUTION_DATA),
        "filter": w,
        "filter_scale": channel_parameter(rules.scale(w_scale, "w_scale", F32), "w_scale", w.shape, "w", 0),
        "filter_zero_point": _w_zero_point(w, w_zero_point, CONVOLUTION_DATA),
        "bias": _per_output_channel(channel_parameter(bias_array, "bias", shape, "the result", 1), shape[1]),
    }  # fmt: skip
    return computed(desc_type, operands, out, shape, out_dtype, arguments, group_count=group_count, **window)


def convolution_integer(x: ArrayLike, x_zero_point: ArrayLike | None, w: ArrayLike,
                        w_zero_point: ArrayLike | None, *, strides: Attribute = None,
                        dilations: Attribute = None, start_padding: Attribute = None,
                        end_padding: Attribute = None, group_count: int = 1,
                        out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """The integer cross-correlation of ``x`` with the filters ``w``, zero points subtracted, as int32:

        out[n, m, o] = sum over c in m's group and the taps k of (x[n, c, o*s - start + k*d] - XZP)
                                                                 * (w[m, c, k] - WZP[m])

    exact, then wrapped to int32 as a 32-bit accumulator would. ``x`` and ``w`` are uint8 or int8
    (lists take their zero point's dtype, else uint8); padding holds ``x``'s zero point (it adds 0).
    ``x_zero_point`` is per-tensor, ``w_zero_point`` per-tensor or one value per filter,
    ``(M, 1, 1, 1)`` against ``w``. The window attributes are :func:`quantized_linear_convolution`'s.

    >>> x = np.uint8([[[1, 2, 3, 4]]])                                   # a 1-D convolution: [N, C, W]
    >>> convolution_integer(x, np.uint8(1), np.int8([[[1, -1]], [[2, 2]]]), None, start_padding=[1])
    array([[[ 0, -1, -1, -1],
            [ 0,  2,  6, 10]]], dtype=int32)
    """
    desc_type = ConvolutionInteger
    x = integer_data(x, "x", x_zero_point, INTEGER_DATA)
    w = integer_data(w, "w", w_zero_point, INTEGER_DATA)
    window, shape, arguments = convolution_geometry(desc_type, x, w, strides, dilations, start_padding,
                                                    end_padding)  # fmt: skip
    operands = {"input": x, "input_zero_point": _x_zero_point(x, x_zero_point, INTEGER_DATA), "filter": w,
                "filter_zero_point": _w_zero_point(w, w_zero_point, INTEGER_DATA)}  # fmt: skip
    return computed(desc_type, operands, out, shape, INTEGER_OUTPUT, arguments, group_count=group_count,
                    **window)  # fmt: skip


def quantized_linear_average_pooling(x: ArrayLike, x_scale: ArrayLike, x_zero_point: ArrayLike | None,
                                     output_scale: ArrayLike, output_zero_point: ArrayLike | None, *,
                                     window_size: Sequence[int], strides: Attribute = None,
                                     dilations: Attribute = None, start_padding: Attribute = None,
                                     end_padding: Attribute = None, include_padding: bool = False,
                                     out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """The average of each window of the dequantized ``x``, requantized:

        out[n, c, o] = clamp(round(mean over the window's taps of (x - XZP[c]) * XS[c] / YS[c])
                             + YZP[c], Min, Max)

    ``x`` is uint8 or int8 (lists take ``x_zero_point``'s dtype, else uint8). The scales and zero
    points are per-tensor or per-channel, ``(C, 1, 1)`` against ``x`` or the result. ``window_size``,
    ``strides``, ``dilations``, ``start_padding`` and ``end_padding`` hold one value per spatial
    dimension (None: ones and zeros); padding counts in the mean, as the zero point (a real 0), only
    with ``include_padding``, and a window wholly in padding without it gives the output zero point.
    The output's dtype is ``output_zero_point``'s when it is a NumPy array or scalar, else ``x``'s.
    The rules of each argument: :mod:`dmlq.numpy_api.rules`.

    >>> x = np.uint8([[[[1, 2, 3, 4], [5, 6, 7, 9]]]])                 # [N, C, H, W]
    >>> # (1 + 2 + 5 + 6) / 4 = 3.5 rounds to 4 (halves to even), 23 / 4 = 5.75 to 6
    >>> quantized_linear_average_pooling(x, 1.0, None, 1.0, None, window_size=[2, 2], strides=[2, 2])
    array([[[[4, 6]]]], dtype=uint8)
    >>> two_channels = np.concatenate([x, x], axis=1)                  # per-channel: (C, 1, 1)
    >>> quantized_linear_average_pooling(two_channels, 1.0, None, np.float32([[[1.0]], [[0.5]]]), None,
    ...                                  window_size=[2, 2], strides=[2, 2])
    array([[[[ 4,  6]],
    <BLANKLINE>
            [[ 7, 12]]]], dtype=uint8)
    """
    desc_type = QuantizedLinearAveragePooling
    x = integer_data(x, "x", x_zero_point, POOLING_DATA)
    rules.dimension_count(x, "x", supported_dimensions(desc_type, "input"), desc_type.__name__)
    spatial = x.ndim - 2
    window = _window(desc_type, spatial, strides, dilations, start_padding, end_padding)
    window_sizes = rules.window_attribute(window_size, "window_size", spatial, None)
    shape = (*x.shape[:2], *rules.window_output_sizes(x.shape[2:], window_sizes, window))
    out_dtype = output_dtype(output_zero_point, None, x.dtype, "output_zero_point", POOLING_DATA)
    operands = _x_and_output(x, x_scale, x_zero_point, output_scale, output_zero_point, out_dtype, shape,
                             POOLING_DATA)  # fmt: skip
    return computed(desc_type, operands, out, shape, out_dtype, ARGUMENTS, dimension_count=spatial,
                    window_size=window_sizes, include_padding=include_padding, **window)  # fmt: skip


def convolution_geometry(desc_type: type[WindowedOperator], x: np.ndarray, w: np.ndarray,
                         strides: Attribute, dilations: Attribute, start_padding: Attribute,
                         end_padding: Attribute) -> tuple[Window, tuple[int, ...], Arguments]:  # fmt: skip
    """A convolution's window attributes as its fields, the result's shape ``[N, M, *out]``, and the
    NumPy argument of each field. ``x`` and ``w`` have a dimension count the operator's table lists
    (3 or 4); DirectML's DimensionCount is 2, so a 1-D convolution's attributes gain H's stride 1,
    dilation 1 and no padding (and DirectML's ``strides[1]`` is the caller's ``strides[0]``).

    >>> x, w = np.zeros((2, 3, 9), np.uint8), np.zeros((4, 3, 3), np.int8)
    >>> window, shape, arguments = convolution_geometry(ConvolutionInteger, x, w, [2], None, None, [1])
    >>> window["strides"], window["end_padding"], shape, arguments["strides[1]"]
    ((1, 2), (0, 1), (2, 4, 4), 'strides[0]')
    """
    counts = supported_dimensions(desc_type, "input")
    rules.dimension_count(x, "x", counts, desc_type.__name__)
    rules.dimension_count(w, "w", counts, desc_type.__name__)
    window = _window(desc_type, x.ndim - 2, strides, dilations, start_padding, end_padding)
    shape = (x.shape[0], w.shape[0], *rules.window_output_sizes(x.shape[2:], w.shape[2:], window))
    arguments = dict(ARGUMENTS)
    if x.ndim == 3:
        window = {name: (desc_type.ARRAYS[name], *values) for name, values in window.items()}
        arguments.update({f"{name}[1]": f"{name}[0]" for name in window})
    return window, shape, arguments


def _window(desc_type: type[WindowedOperator], spatial: int, strides: Attribute, dilations: Attribute,
            start_padding: Attribute, end_padding: Attribute) -> Window:  # fmt: skip
    given = dict(strides=strides, dilations=dilations, start_padding=start_padding, end_padding=end_padding)
    return rules.window_attributes(given, desc_type.ARRAYS, spatial)


def _x_and_output(x: np.ndarray, x_scale: object, x_zero_point: object, output_scale: object,
                  output_zero_point: object, out_dtype: np.dtype, shape: tuple[int, ...],
                  allowed: tuple[np.dtype, ...]) -> Fields:  # fmt: skip
    """``x`` and its scale and zero point, and the output's, as the operator's fields (the output's
    zero point of ``out_dtype``, against the result's ``shape``)."""
    x_scale_array = rules.scale(x_scale, "x_scale", F32)
    fields = {"input": x, "input_scale": channel_parameter(x_scale_array, "x_scale", x.shape, "x", 1),
              "input_zero_point": _x_zero_point(x, x_zero_point, allowed)}  # fmt: skip
    scale = rules.scale(output_scale, "output_scale", F32)
    zero_point = rules.zero_point(output_zero_point, "output_zero_point", out_dtype, "the output", allowed)
    fields["output_scale"] = channel_parameter(scale, "output_scale", shape, "the result", 1)
    fields["output_zero_point"] = channel_parameter(zero_point, "output_zero_point", shape, "the result", 1)
    return fields


def _x_zero_point(x: np.ndarray, zero_point: object, allowed: tuple[np.dtype, ...]) -> np.ndarray | None:
    """``x``'s zero point (of ``x``'s dtype) against ``x``, as the operator's field."""
    array = rules.zero_point(zero_point, "x_zero_point", x.dtype, "x", allowed)
    return channel_parameter(array, "x_zero_point", x.shape, "x", 1)


def _w_zero_point(w: np.ndarray, zero_point: object, allowed: tuple[np.dtype, ...]) -> np.ndarray | None:
    """``w``'s zero point (of ``w``'s dtype), per filter along its axis 0, as the operator's field."""
    array = rules.zero_point(zero_point, "w_zero_point", w.dtype, "w", allowed)
    return channel_parameter(array, "w_zero_point", w.shape, "w", 0)


def _per_output_channel(bias: np.ndarray | None, channels: int) -> np.ndarray | None:
    """The bias as DirectML's ``{1, M, 1, 1}``: one value for every channel through a zero stride."""
    return None if bias is None else np.broadcast_to(bias, (1, channels, *bias.shape[2:]))
