"""Random valid descriptions of the quantized family's operators for tests/test_properties.py: the
geometry drawn, the tensors laid out by its ``layouts`` strategy (packed, permuted, padded, broadcast)."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from dmlq import DataType, activations, ops
from dmlq.reference.windows import output_size

F32, F16, I32, U8, I8 = DataType.FLOAT32, DataType.FLOAT16, DataType.INT32, DataType.UINT8, DataType.INT8
BYTES = [U8, I8]
FAMILY = (ops.ConvolutionInteger, ops.QuantizedLinearConvolution, ops.MatrixMultiplyInteger,
          ops.MatrixMultiplyIntegerToFloat, ops.DynamicQuantizeLinear, ops.QuantizedLinearAveragePooling,
          ops.Gemm)  # fmt: skip


@st.composite
def window_geometry(draw, spatial: int) -> tuple[list[int], dict]:
    """Input spatial sizes and window attributes whose windows fit the padded input."""
    window = [draw(st.integers(1, 3)) for _ in range(spatial)]
    attrs = {"strides": [draw(st.integers(1, 2)) for _ in range(spatial)],
             "dilations": [draw(st.integers(1, 2)) for _ in range(spatial)],
             "start_padding": [draw(st.integers(0, 1)) for _ in range(spatial)],
             "end_padding": [draw(st.integers(0, 1)) for _ in range(spatial)]}  # fmt: skip
    sizes = [draw(st.integers(max(1 + (k - 1) * d - start - end, 1), 5)) for k, d, start, end in
             zip(window, attrs["dilations"], attrs["start_padding"], attrs["end_padding"])]  # fmt: skip
    return sizes, window, attrs


def out_sizes(sizes, window, attrs) -> list[int]:
    columns = zip(
        sizes, attrs["start_padding"], attrs["end_padding"], window, attrs["strides"], attrs["dilations"]
    )
    return [output_size(*values) for values in columns]


def per_channel(draw, channels: int, ndim: int) -> list[int]:
    return draw(st.sampled_from([[1] * ndim, [1, channels] + [1] * (ndim - 2)]))


@st.composite
def convolution(draw, cls, layouts: Callable) -> ops.OperatorDesc:
    ndim = draw(st.sampled_from([3, 4]))  # {N, C, W} is read as {N, C, 1, W}
    sizes, window, attrs = draw(window_geometry(ndim - 2))
    if ndim == 3:  # the H of 1 takes no padding and a window of 1
        attrs = {
            name: [1 if name in ("strides", "dilations") else 0] + values for name, values in attrs.items()
        }
    else:
        attrs = dict(attrs)
    groups, per_group_in, per_group_out = (draw(st.integers(1, 2)) for _ in range(3))
    batch = draw(st.integers(1, 2))
    channels, filters = groups * per_group_in, groups * per_group_out
    spatial_out = out_sizes(([1] if ndim == 3 else []) + sizes, ([1] if ndim == 3 else []) + window, attrs)
    x, w = draw(st.sampled_from(BYTES)), draw(st.sampled_from(BYTES))
    tensors = {"input": (x, [batch, channels, *sizes]), "filter": (w, [filters, per_group_in, *window]),
               "filter_zero_point": (w, per_channel(draw, filters, ndim)),
               "input_zero_point": (x, [1] * ndim)}  # fmt: skip
    if cls is ops.ConvolutionInteger:
        tensors["output"] = (I32, [batch, filters, *spatial_out[4 - ndim :]])
    else:
        out = draw(st.sampled_from(BYTES))
        tensors |= {"output": (out, [batch, filters, *spatial_out[4 - ndim :]]),
                    "input_scale": (F32, [1] * ndim), "filter_scale": (F32, per_channel(draw, filters, ndim)),
                    "bias": (I32, [1, filters] + [1] * (ndim - 2)), "output_scale": (F32, [1] * ndim),
                    "output_zero_point": (out, [1] * ndim)}  # fmt: skip
    fields = optional_tensors(draw, cls, tensors, layouts)
    return cls(**fields, group_count=groups, **attrs)


def optional_tensors(draw, cls, tensors: dict, layouts: Callable) -> dict:
    """Each tensor laid out; an optional one (every row of its table says so) sometimes left out."""
    fields = {}
    for name, (data_type, sizes) in tensors.items():
        optional = all(row.tensors[name].optional for row in cls.SUPPORT)
        is_output = any(f.name == name and f.is_output for f in cls.FIELDS)
        fields[name] = (
            None if optional and draw(st.booleans()) else draw(layouts(data_type, sizes, is_output))
        )
    return fields


@st.composite
def matrix_multiply(draw, cls, layouts: Callable) -> ops.OperatorDesc:
    batch = draw(st.lists(st.integers(1, 2), min_size=0, max_size=2))
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    rank = len(batch) + 2
    ones = [1] * (rank - 2)
    rows, columns = draw(st.sampled_from([[1, 1], [m, 1]])), draw(st.sampled_from([[1, 1], [1, n]]))
    if cls is ops.Gemm:
        trans_a, trans_b = draw(st.booleans()), draw(st.booleans())
        kind = draw(st.sampled_from([F32, F16]))
        tensors = {"a": (kind, batch + ([k, m] if trans_a else [m, k])),
                   "b": (kind, batch + ([n, k] if trans_b else [k, n])),
                   "c": (kind, batch + [m, n]), "output": (kind, batch + [m, n])}  # fmt: skip
        finite = st.floats(-4, 4, allow_nan=False)
        activation = draw(
            st.sampled_from([None, activations.Relu(), activations.Sigmoid(), activations.Gelu()])
        )
        return cls(**optional_tensors(draw, cls, tensors, layouts), trans_a=trans_a, trans_b=trans_b,
                   alpha=draw(finite), beta=draw(finite), fused_activation=activation)  # fmt: skip
    if cls is ops.MatrixMultiplyInteger:
        a, b = draw(st.sampled_from(BYTES)), draw(st.sampled_from(BYTES))
        tensors = {"a": (a, batch + [m, k]), "a_zero_point": (a, ones + rows), "b": (b, batch + [k, n]),
                   "b_zero_point": (b, ones + columns), "output": (I32, batch + [m, n])}  # fmt: skip
        return cls(**optional_tensors(draw, cls, tensors, layouts))
    integer = draw(
        st.sampled_from([DataType.INT32, DataType.INT16, I8, DataType.UINT32, DataType.UINT16, U8])
    )
    kind = draw(st.sampled_from([F32, F16]))
    tensors = {"a": (integer, batch + [m, k]), "a_scale": (kind, ones + rows),
               "a_zero_point": (integer, ones + rows), "b": (integer, batch + [k, n]),
               "b_scale": (kind, ones + columns), "b_zero_point": (integer, ones + columns),
               "bias": (kind, batch + [m, n]), "output": (kind, batch + [m, n])}  # fmt: skip
    return cls(**optional_tensors(draw, cls, tensors, layouts))


@st.composite
def dynamic_quantize_linear(draw, cls, layouts: Callable) -> ops.OperatorDesc:
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=8))
    out = draw(st.sampled_from(BYTES))
    one = [1] * len(sizes)
    tensors = {"input": (draw(st.sampled_from([F32, F16])), sizes), "output": (out, sizes),
               "output_scale": (F32, one), "output_zero_point": (out, one)}  # fmt: skip
    return cls(**optional_tensors(draw, cls, tensors, layouts))


@st.composite
def average_pooling(draw, cls, layouts: Callable) -> ops.OperatorDesc:
    spatial = draw(st.sampled_from([2, 3]))
    sizes, window, attrs = draw(window_geometry(spatial))
    batch, channels = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    x, out = draw(st.sampled_from(BYTES)), draw(st.sampled_from(BYTES))
    ndim = spatial + 2
    tensors = {"input": (x, [batch, channels, *sizes]),
               "input_scale": (F32, per_channel(draw, channels, ndim)),
               "input_zero_point": (x, per_channel(draw, channels, ndim)),
               "output_scale": (F32, per_channel(draw, channels, ndim)),
               "output_zero_point": (out, per_channel(draw, channels, ndim)),
               "output": (out, [batch, channels, *out_sizes(sizes, window, attrs)])}  # fmt: skip
    return cls(**optional_tensors(draw, cls, tensors, layouts), dimension_count=spatial, window_size=window,
               include_padding=draw(st.booleans()), **attrs)  # fmt: skip


def family(cls, layouts: Callable) -> st.SearchStrategy:
    """A strategy of valid ``cls`` descriptions."""
    if cls in (ops.ConvolutionInteger, ops.QuantizedLinearConvolution):
        return convolution(cls, layouts)
    if cls is ops.DynamicQuantizeLinear:
        return dynamic_quantize_linear(cls, layouts)
    if cls is ops.QuantizedLinearAveragePooling:
        return average_pooling(cls, layouts)
    return matrix_multiply(cls, layouts)
