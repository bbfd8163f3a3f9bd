"""Every row and boundary of every tensor-support table, checked against tables written out here.

The tables below are copied by hand from the seed pages (QuantizeLinear 002, QuantizedLinearAdd
000/001, Add1 003, QuantizedLinearMatrixMultiply 004) and SPEC-NOTES §3 (DequantizeLinear), §4
(Add) and §5 (activation levels) -- not from ``dmlq.ops``. Each operator is built over a grid
of dimension counts, data types and zero-point presence (always satisfying the page's tensor
constraints), and the lowest level that accepts it must be the one these tables give; one
level below it must be refused with a message naming the level that is needed.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping

import pytest

from dmlq import DataType, Device, DmlError, FeatureLevel, TensorDesc, activations, ops

F32, F16, F64 = DataType.FLOAT32, DataType.FLOAT16, DataType.FLOAT64
I64, I32, I16, I8 = DataType.INT64, DataType.INT32, DataType.INT16, DataType.INT8
U64, U32, U16, U8 = DataType.UINT64, DataType.UINT32, DataType.UINT16, DataType.UINT8
INTS = (I32, I16, I8, U32, U16, U8)
LEVELS = sorted(FeatureLevel)
FL = FeatureLevel.parse


def row(dims, optional=(), **types) -> dict[str, tuple[tuple[int, int], frozenset, bool]]:
    """A page's table: per field (dimension range, data types, optional?)."""
    return {
        name: (dims[name] if isinstance(dims, Mapping) else dims, frozenset(allowed), name in optional)
        for name, allowed in types.items()
    }


PAGES: dict[str, dict[str, dict]] = {
    "ElementWiseQuantizeLinear": {  # seed 002
        "6_2": row(
            (1, 8),
            ["zero_point"],
            input=(F32, F16, I32),
            scale=(F32, F16),
            zero_point=(I8, U8),
            output=(I8, U8),
        ),
        "6_0": row((1, 8), input=(F32, F16, I32), scale=(F32, F16), zero_point=(I8, U8), output=(I8, U8)),
        "3_0": row((1, 8), input=(F32, I32), scale=(F32,), zero_point=(I8, U8), output=(I8, U8)),
        "2_1": row((4, 4), input=(F32, I32), scale=(F32,), zero_point=(I8, U8), output=(I8, U8)),
        "1_0": row((4, 4), input=(F32,), scale=(F32,), zero_point=(U8,), output=(U8,)),
    },
    "ElementWiseDequantizeLinear": {  # SPEC-NOTES §3
        "6_2": row((1, 8), ["zero_point"], input=INTS, scale=(F32, F16), zero_point=INTS, output=(F32, F16)),
        "6_0": row((1, 8), input=INTS, scale=(F32, F16), zero_point=INTS, output=(F32, F16)),
        "3_0": row((1, 8), input=INTS, scale=(F32,), zero_point=INTS, output=(F32,)),
        "2_1": row((4, 4), input=INTS, scale=(F32,), zero_point=INTS, output=(F32,)),
        "1_0": row((4, 4), input=(U8,), scale=(F32,), zero_point=(U8,), output=(F32,)),
    },
    "ElementWiseAdd": {  # SPEC-NOTES §4
        "5_1": row(
            (1, 8),
            a=(F32, F16, I64, I32, I16, I8, U64, U32, U16, U8),
            b=(F32, F16, I64, I32, I16, I8, U64, U32, U16, U8),
            output=(F32, F16, I64, I32, I16, I8, U64, U32, U16, U8),
        ),
        "4_1": row(
            (1, 8),
            a=(F32, F16, I64, I32, U64, U32),
            b=(F32, F16, I64, I32, U64, U32),
            output=(F32, F16, I64, I32, U64, U32),
        ),
        "3_0": row((1, 8), a=(F32, F16, I32, U32), b=(F32, F16, I32, U32), output=(F32, F16, I32, U32)),
        "2_1": row((4, 5), a=(F32, F16, I32, U32), b=(F32, F16, I32, U32), output=(F32, F16, I32, U32)),
        "1_0": row((4, 5), a=(F32, F16), b=(F32, F16), output=(F32, F16)),
    },
    "ElementWiseAdd1": {  # seed 003
        "3_0": row((1, 8), a=(F32, F16), b=(F32, F16), output=(F32, F16)),
        "2_0": row((4, 5), a=(F32, F16), b=(F32, F16), output=(F32, F16)),
    },
    "ElementWiseQuantizedLinearAdd": {  # seed 000
        "4_0": row(
            (1, 8),
            ["a_zero_point", "b_zero_point", "output_zero_point"],
            a=(I8, U8),
            a_scale=(F32,),
            a_zero_point=(I8, U8),
            b=(I8, U8),
            b_scale=(F32,),
            b_zero_point=(I8, U8),
            output_scale=(F32,),
            output_zero_point=(I8, U8),
            output=(I8, U8),
        ),
    },
    "QuantizedLinearMatrixMultiply": {  # seed 004
        "4_0": row(
            {
                "a": (2, 4),
                "b": (2, 4),
                "output": (2, 4),
                "a_scale": (1, 4),
                "a_zero_point": (1, 4),
                "b_scale": (1, 4),
                "b_zero_point": (1, 4),
                "output_scale": (1, 4),
                "output_zero_point": (1, 4),
            },
            ["a_zero_point", "b_zero_point", "output_zero_point"],
            a=(I8, U8),
            a_scale=(F32,),
            a_zero_point=(I8, U8),
            b=(I8, U8),
            b_scale=(F32,),
            b_zero_point=(I8, U8),
            output_scale=(F32,),
            output_zero_point=(I8, U8),
            output=(I8, U8),
        ),
        "2_1": row(
            (4, 4),
            ["a_zero_point", "b_zero_point", "output_zero_point"],
            a=(I8, U8),
            a_scale=(F32,),
            a_zero_point=(I8, U8),
            b=(I8, U8),
            b_scale=(F32,),
            b_zero_point=(I8, U8),
            output_scale=(F32,),
            output_zero_point=(I8, U8),
            output=(I8, U8),
        ),
    },
    "ConvolutionInteger": {  # spec/QUANTIZED-FAMILY.md §2.3
        "4_0": row(
            {
                "input": (3, 4),
                "input_zero_point": (1, 4),
                "filter": (3, 4),
                "filter_zero_point": (1, 4),
                "output": (3, 4),
            },
            ["input_zero_point", "filter_zero_point"],
            input=(I8, U8),
            input_zero_point=(I8, U8),
            filter=(I8, U8),
            filter_zero_point=(I8, U8),
            output=(I32,),
        ),
        "2_1": row(
            (4, 4),
            ["input_zero_point", "filter_zero_point"],
            input=(I8, U8),
            input_zero_point=(I8, U8),
            filter=(I8, U8),
            filter_zero_point=(I8, U8),
            output=(I32,),
        ),
    },  # fmt: skip
    "QuantizedLinearConvolution": {  # spec/QUANTIZED-FAMILY.md §1.3
        level: row(
            (4, 4)
            if level == "2_1"
            else {
                "input": (3, 4),
                "input_scale": (1, 4),
                "input_zero_point": (1, 4),
                "filter": (3, 4),
                "filter_scale": filter_scale,
                "filter_zero_point": (1, 4),
                "bias": (3, 4),
                "output_scale": (1, 4),
                "output_zero_point": (1, 4),
                "output": (3, 4),
            },
            ["input_zero_point", "filter_zero_point", "bias", "output_zero_point"],
            input=(I8, U8),
            input_scale=(F32,),
            input_zero_point=(I8, U8),
            filter=(I8, U8),
            filter_scale=(F32,),
            filter_zero_point=(I8, U8),
            bias=(I32,),
            output_scale=(F32,),
            output_zero_point=(I8, U8),
            output=(I8, U8),
        )
        for level, filter_scale in (("5_2", (1, 4)), ("4_0", (3, 4)), ("2_1", None))
    },  # fmt: skip
    "MatrixMultiplyInteger": {  # spec/QUANTIZED-FAMILY.md §3.3
        level: row(
            (4, 4)
            if level == "2_1"
            else {
                "a": (2, 4),
                "a_zero_point": (1, 4),
                "b": (2, 4),
                "b_zero_point": b_zero_point,
                "output": (2, 4),
            },
            ["a_zero_point", "b_zero_point"],
            a=(I8, U8),
            a_zero_point=(I8, U8),
            b=(I8, U8),
            b_zero_point=(I8, U8),
            output=(I32,),
        )
        for level, b_zero_point in (("5_2", (1, 4)), ("4_0", (2, 4)), ("2_1", None))
    },  # fmt: skip
    "MatrixMultiplyIntegerToFloat": {  # spec/QUANTIZED-FAMILY.md §4.3
        "6_2": row(
            {
                "a": (2, 4),
                "a_scale": (1, 4),
                "a_zero_point": (1, 4),
                "b": (2, 4),
                "b_scale": (1, 4),
                "b_zero_point": (1, 4),
                "bias": (2, 4),
                "output": (2, 4),
            },
            ["a_zero_point", "b_zero_point", "bias"],
            a=INTS,
            a_scale=(F32, F16),
            a_zero_point=INTS,
            b=INTS,
            b_scale=(F32, F16),
            b_zero_point=INTS,
            bias=(F32, F16),
            output=(F32, F16),
        ),
    },  # fmt: skip
    "DynamicQuantizeLinear": {  # spec/QUANTIZED-FAMILY.md §5.3
        "4_0": row(
            (1, 8), input=(F32, F16), output=(I8, U8), output_scale=(F32,), output_zero_point=(I8, U8)
        ),
    },
    "QuantizedLinearAveragePooling": {  # spec/QUANTIZED-FAMILY.md §6.3
        "6_2": row(
            {
                "input": (4, 5),
                "input_scale": (1, 5),
                "input_zero_point": (1, 5),
                "output_scale": (1, 5),
                "output_zero_point": (1, 5),
                "output": (4, 5),
            },
            ["input_zero_point", "output_zero_point"],
            input=(I8, U8),
            input_scale=(F32,),
            input_zero_point=(I8, U8),
            output_scale=(F32,),
            output_zero_point=(I8, U8),
            output=(I8, U8),
        ),
    },  # fmt: skip
    "Gemm": {  # spec/QUANTIZED-FAMILY.md §7.3
        "4_0": row((2, 4), ["c"], a=(F32, F16), b=(F32, F16), c=(F32, F16), output=(F32, F16)),
        "1_0": row((4, 4), ["c"], a=(F32, F16), b=(F32, F16), c=(F32, F16), output=(F32, F16)),
    },
}

# SPEC-NOTES §5: the level each fused activation needs (SOFTPLUS steepness < 1: 6_4)
ACTIVATION_LEVELS = {
    "Identity": "1_0",
    "Relu": "1_0",
    "LeakyRelu": "1_0",
    "ThresholdedRelu": "1_0",
    "Elu": "1_0",
    "ScaledElu": "1_0",
    "Sigmoid": "1_0",
    "HardSigmoid": "1_0",
    "Tanh": "1_0",
    "ScaledTanh": "1_0",
    "Linear": "1_0",
    "Softplus": "1_0",
    "ParametricSoftplus": "1_0",
    "Softsign": "1_0",
    "Shrink": "2_0",
    "Celu": "3_0",
    "Gelu": "5_1",
}


# -- the page tables against dmlq's data ------------------------------------------------------


@pytest.mark.parametrize("name", PAGES)
def test_support_table_matches_the_page(name: str) -> None:
    cls = getattr(ops, name)
    ours = {
        r.level.label: {f: (s.dims, frozenset(s.types), s.optional) for f, s in r.tensors.items()}
        for r in cls.SUPPORT
    }
    assert ours == PAGES[name]
    assert cls.INTRODUCED.label == min(PAGES[name], key=FL)
    assert [r.level for r in cls.SUPPORT] == sorted((r.level for r in cls.SUPPORT), reverse=True)


def test_activation_levels_match_the_notes() -> None:
    assert {
        cls.__name__: cls.INTRODUCED.label for cls in activations.ACTIVATIONS.values()
    } == ACTIVATION_LEVELS


# -- builders: descriptions that satisfy every tensor constraint --------------------------------


def element_sizes(ndim: int) -> list[int]:
    return ([1] * ndim + [2, 3])[-ndim:] if ndim else []


def tensor(data_type: DataType, sizes: list[int], broadcast: bool = False) -> TensorDesc:
    strides = [0] * len(sizes) if broadcast else None
    return TensorDesc(data_type, sizes, strides, total_tensor_size_in_bytes=64)


def quantize(ndim: int, x: DataType, out: DataType, zero_point: bool) -> ops.OperatorDesc:
    sizes = element_sizes(ndim)
    return ops.ElementWiseQuantizeLinear(
        input=tensor(x, sizes),
        scale=tensor(F32 if x == I32 else x, sizes, True),
        zero_point=tensor(out, sizes, True) if zero_point else None,
        output=tensor(out, sizes),
    )


def dequantize(ndim: int, x: DataType, out: DataType, zero_point: bool) -> ops.OperatorDesc:
    sizes = element_sizes(ndim)
    return ops.ElementWiseDequantizeLinear(
        input=tensor(x, sizes),
        scale=tensor(out, sizes, True),
        zero_point=tensor(x, sizes, True) if zero_point else None,
        output=tensor(out, sizes),
    )


def add(ndim: int, data_type: DataType) -> ops.OperatorDesc:
    t = tensor(data_type, element_sizes(ndim))
    return ops.ElementWiseAdd(a=t, b=t, output=t)


def add1(ndim: int, data_type: DataType, activation: activations.Activation | None) -> ops.OperatorDesc:
    t = tensor(data_type, element_sizes(ndim))
    return ops.ElementWiseAdd1(a=t, b=t, output=t, fused_activation=activation)


def quantized_add(ndim: int, a: DataType, b: DataType, out: DataType, zero_points: bool) -> ops.OperatorDesc:
    sizes, one = element_sizes(ndim), [1] * ndim
    return ops.ElementWiseQuantizedLinearAdd(
        a=tensor(a, sizes),
        a_scale=tensor(F32, one),
        a_zero_point=tensor(a, one) if zero_points else None,
        b=tensor(b, sizes),
        b_scale=tensor(F32, one),
        b_zero_point=tensor(b, one) if zero_points else None,
        output_scale=tensor(F32, one),
        output_zero_point=tensor(out, one) if zero_points else None,
        output=tensor(out, sizes),
    )


def matmul(
    ndim: int, qdim: int, a: DataType, b: DataType, out: DataType, zero_points: bool
) -> ops.OperatorDesc:
    batch = [1] * max(ndim - 2, 0)
    a_sizes, b_sizes, out_sizes = (
        [batch + [2, 3], batch + [3, 4], batch + [2, 4]] if ndim >= 2 else [[3], [3], [4]]
    )
    one = [1] * qdim
    return ops.QuantizedLinearMatrixMultiply(
        a=tensor(a, a_sizes),
        a_scale=tensor(F32, one),
        a_zero_point=tensor(a, one) if zero_points else None,
        b=tensor(b, b_sizes),
        b_scale=tensor(F32, one),
        b_zero_point=tensor(b, one) if zero_points else None,
        output_scale=tensor(F32, one),
        output_zero_point=tensor(out, one) if zero_points else None,
        output=tensor(out, out_sizes),
    )


def spatial_tensor(data_type: DataType, ndim: int, channels: int) -> TensorDesc:
    """``{N, C, *spatial}`` of spatial sizes 2 (a 1 x 1 window keeps them)."""
    return tensor(data_type, [1, channels] + [2] * (ndim - 2)) if ndim >= 2 else tensor(data_type, [channels])


def convolution_integer(ndim: int, qdim: int, x: DataType, w: DataType, out: DataType,
                        zero_points: bool) -> ops.OperatorDesc:  # fmt: skip
    one = [1] * qdim
    return ops.ConvolutionInteger(
        input=spatial_tensor(x, ndim, 2), input_zero_point=tensor(x, one) if zero_points else None,
        filter=tensor(w, [2, 2] + [1] * (ndim - 2)),
        filter_zero_point=tensor(w, one) if zero_points else None,
        output=spatial_tensor(out, ndim, 2),
    )  # fmt: skip


def quantized_linear_convolution(ndim: int, qdim: int, x: DataType, w: DataType, out: DataType,
                                 zero_points: bool) -> ops.OperatorDesc:  # fmt: skip
    one = [1] * qdim
    per_channel = [1, 2] + [1] * (ndim - 2)
    return ops.QuantizedLinearConvolution(
        input=spatial_tensor(x, ndim, 2), input_scale=tensor(F32, one),
        input_zero_point=tensor(x, one) if zero_points else None, filter=tensor(w, [2, 2] + [1] * (ndim - 2)),
        filter_scale=tensor(F32, one), filter_zero_point=tensor(w, one) if zero_points else None,
        bias=tensor(I32, per_channel) if zero_points else None, output_scale=tensor(F32, one),
        output_zero_point=tensor(out, one) if zero_points else None, output=spatial_tensor(out, ndim, 2),
    )  # fmt: skip


def matrix_multiply_integer(ndim: int, qdim: int, a: DataType, b: DataType, out: DataType,
                            zero_points: bool) -> ops.OperatorDesc:  # fmt: skip
    batch = [1] * max(ndim - 2, 0)
    a_sizes, b_sizes, out_sizes = [batch + [2, 3], batch + [3, 4], batch + [2, 4]] if ndim >= 2 else [[3]] * 3
    one = [1] * qdim
    return ops.MatrixMultiplyInteger(
        a=tensor(a, a_sizes), a_zero_point=tensor(a, one) if zero_points else None, b=tensor(b, b_sizes),
        b_zero_point=tensor(b, one) if zero_points else None, output=tensor(out, out_sizes),
    )  # fmt: skip


def matrix_multiply_integer_to_float(ndim: int, qdim: int, integers: DataType, floats: DataType,
                                     zero_points: bool) -> ops.OperatorDesc:  # fmt: skip
    batch = [1] * max(ndim - 2, 0)
    a_sizes, b_sizes, out_sizes = [batch + [2, 3], batch + [3, 4], batch + [2, 4]] if ndim >= 2 else [[3]] * 3
    one = [1] * qdim
    return ops.MatrixMultiplyIntegerToFloat(
        a=tensor(integers, a_sizes), a_scale=tensor(floats, one),
        a_zero_point=tensor(integers, one) if zero_points else None, b=tensor(integers, b_sizes),
        b_scale=tensor(floats, one), b_zero_point=tensor(integers, one) if zero_points else None,
        bias=tensor(floats, out_sizes) if zero_points else None, output=tensor(floats, out_sizes),
    )  # fmt: skip


def dynamic_quantize_linear(ndim: int, x: DataType, out: DataType, scale: DataType) -> ops.OperatorDesc:
    sizes, one = element_sizes(ndim), [1] * ndim
    return ops.DynamicQuantizeLinear(
        input=tensor(x, sizes),
        output=tensor(out, sizes),
        output_scale=tensor(scale, one),
        output_zero_point=tensor(out, one),
    )


def quantized_linear_average_pooling(ndim: int, qdim: int, x: DataType, out: DataType,
                                     zero_points: bool) -> ops.OperatorDesc:  # fmt: skip
    spatial = max(ndim - 2, 1)
    one = [1] * qdim
    return ops.QuantizedLinearAveragePooling(
        input=spatial_tensor(x, ndim, 2), input_scale=tensor(F32, one),
        input_zero_point=tensor(x, one) if zero_points else None, output_scale=tensor(F32, one),
        output_zero_point=tensor(out, one) if zero_points else None, output=spatial_tensor(out, ndim, 2),
        dimension_count=spatial, strides=[1] * spatial, window_size=[1] * spatial,
        start_padding=[0] * spatial, end_padding=[0] * spatial, dilations=[1] * spatial,
    )  # fmt: skip


def gemm(ndim: int, data_type: DataType, with_c: bool, activation: activations.Activation | None):
    batch = [1] * max(ndim - 2, 0)
    a_sizes, b_sizes, out_sizes = [batch + [2, 3], batch + [3, 2], batch + [2, 2]] if ndim >= 2 else [[2]] * 3
    return ops.Gemm(a=tensor(data_type, a_sizes), b=tensor(data_type, b_sizes),
                    c=tensor(data_type, out_sizes) if with_c else None, output=tensor(data_type, out_sizes),
                    fused_activation=activation)  # fmt: skip


ACTIVATION_CHOICES = (
    None,
    activations.Relu(),
    activations.Shrink(),
    activations.Celu(),
    activations.Gelu(),
    activations.Softplus(steepness=1.0),
    activations.Softplus(steepness=0.5),
)


def grid() -> Iterator[tuple[str, ops.OperatorDesc]]:
    dims = (0, 1, 3, 4, 5, 6, 8, 9)
    for n, x, out, zp in itertools.product(dims, (F32, F16, I32, U8), (U8, I8, I16), (True, False)):
        yield f"quantize-{n}d-{x.name}-{out.name}-zp{zp:d}", quantize(n, x, out, zp)
    for n, x, out, zp in itertools.product(
        dims, (U8, I8, U16, I16, U32, I32, I64, F32), (F32, F16, F64), (True, False)
    ):
        yield f"dequantize-{n}d-{x.name}-{out.name}-zp{zp:d}", dequantize(n, x, out, zp)
    for n, t in itertools.product(dims, (F32, F16, F64, I64, I32, I16, I8, U64, U32, U16, U8, DataType.INT4)):
        yield f"add-{n}d-{t.name}", add(n, t)
    for n, t, act in itertools.product(dims, (F32, F16, I32, U8), ACTIVATION_CHOICES):
        yield f"add1-{n}d-{t.name}-{act!r}", add1(n, t, act)
    for n, a, b, out, zp in itertools.product(
        (0, 1, 2, 4, 8, 9), (U8, I8, I16), (U8, I8), (U8, I8, U16), (True, False)
    ):
        yield f"qladd-{n}d-{a.name}-{b.name}-{out.name}-zp{zp:d}", quantized_add(n, a, b, out, zp)
    for n, q, a, b, out, zp in itertools.product(
        (1, 2, 3, 4, 5), (1, 2, 4, 5), (U8, I8, I32), (U8, I8), (U8, I8, F32), (True, False)
    ):
        yield f"qlmm-{n}d-q{q}d-{a.name}-{b.name}-{out.name}-zp{zp:d}", matmul(n, q, a, b, out, zp)
    for n, q, x, w, out, zp in itertools.product(
        (2, 3, 4, 5), (1, 3, 4, 5), (U8, I8, I16), (U8, I8), (I32, I16), (True, False)
    ):
        name = f"convint-{n}d-q{q}d-{x.name}-{w.name}-{out.name}-zp{zp:d}"
        yield name, convolution_integer(n, q, x, w, out, zp)
    for n, q, x, w, out, zp in itertools.product(
        (2, 3, 4, 5), (1, 2, 3, 4, 5), (U8, I8, I16), (U8, I8), (U8, I8, I32), (True, False)
    ):
        name = f"qlconv-{n}d-q{q}d-{x.name}-{w.name}-{out.name}-zp{zp:d}"
        yield name, quantized_linear_convolution(n, q, x, w, out, zp)
    for n, q, a, b, out, zp in itertools.product(
        (1, 2, 3, 4, 5), (1, 2, 4, 5), (U8, I8, I16), (U8, I8), (I32, U32), (True, False)
    ):
        name = f"mmint-{n}d-q{q}d-{a.name}-{b.name}-{out.name}-zp{zp:d}"
        yield name, matrix_multiply_integer(n, q, a, b, out, zp)
    for n, q, integers, floats, zp in itertools.product(
        (1, 2, 4, 5), (1, 4, 5), (U32, I16, U8, I64), (F32, F16, F64), (True, False)
    ):
        name = f"mmif-{n}d-q{q}d-{integers.name}-{floats.name}-zp{zp:d}"
        yield name, matrix_multiply_integer_to_float(n, q, integers, floats, zp)
    for n, q, x, out, zp in itertools.product(
        (3, 4, 5, 6), (1, 4, 5, 6), (U8, I8, I16), (U8, I8, I32), (True, False)
    ):
        name = f"qlavgpool-{n}d-q{q}d-{x.name}-{out.name}-zp{zp:d}"
        yield name, quantized_linear_average_pooling(n, q, x, out, zp)
    for n, t, with_c, act in itertools.product((1, 2, 3, 4, 5), (F32, F16, F64, I32), (True, False),
                                               ACTIVATION_CHOICES):  # fmt: skip
        yield f"gemm-{n}d-{t.name}-c{with_c:d}-{act!r}", gemm(n, t, with_c, act)
    for n, x, out, scale in itertools.product(dims, (F32, F16, F64, I32), (U8, I8, I16), (F32, F16)):
        yield f"dql-{n}d-{x.name}-{out.name}-{scale.name}", dynamic_quantize_linear(n, x, out, scale)


GRID = dict(grid())


def accepted_by_page(desc: ops.OperatorDesc, level: FeatureLevel) -> bool:
    page = PAGES[type(desc).__name__]
    reached = [label for label in page if FL(label) <= level]
    if not reached:
        return False
    table = page[max(reached, key=FL)]
    for name, (dims, types, optional) in table.items():
        tensor_desc = getattr(desc, name)
        if tensor_desc is None:
            if not optional:
                return False
        elif not (dims[0] <= len(tensor_desc.sizes) <= dims[1] and tensor_desc.data_type in types):
            return False
    activation = getattr(desc, "fused_activation", None)
    if activation is not None:
        needed = FL(ACTIVATION_LEVELS[type(activation).__name__])
        if isinstance(activation, activations.Softplus) and activation.steepness < 1:
            needed = FeatureLevel.FL_6_4
        if level < needed or desc.output.data_type not in (F32, F16):
            return False
    return True


def expected_minimum(desc: ops.OperatorDesc) -> FeatureLevel | None:
    return next((level for level in LEVELS if accepted_by_page(desc, level)), None)


NEEDS = re.compile(r"(?:needs feature level|required before feature level) (\d_\d)")


@pytest.mark.parametrize("case", GRID)
def test_lowest_accepting_level_is_the_pages(case: str) -> None:
    desc = GRID[case]
    expected = expected_minimum(desc)
    assert desc.minimum_feature_level() == expected
    if expected is None:
        with pytest.raises(DmlError, match=rf"^{type(desc).__name__}[.:]"):
            Device().compile_operator(desc)
        return
    Device(expected).compile_operator(desc)
    Device().compile_operator(desc)
    if expected == LEVELS[0]:
        return
    below = LEVELS[LEVELS.index(expected) - 1]
    with pytest.raises(DmlError) as refusal:
        Device(below).compile_operator(desc)
    message = str(refusal.value)
    assert message.startswith(type(desc).__name__) and message.endswith(f"(device is {below.label})")
    needed = NEEDS.search(message)
    assert needed, message
    assert below < FL(needed[1]) <= expected


# -- the cases the pages single out, with their exact messages ---------------------------------


def refusal(desc: ops.OperatorDesc, level: str) -> str:
    with pytest.raises(DmlError) as error:
        Device(level).compile_operator(desc)
    return str(error.value)


def test_quantize_int8_output_needs_2_1() -> None:
    sizes = [1, 1, 2, 3]
    desc = ops.ElementWiseQuantizeLinear(
        input=tensor(F32, sizes),
        scale=tensor(F32, sizes, True),
        zero_point=tensor(U8, sizes, True),
        output=tensor(I8, sizes),
    )
    assert refusal(desc, "1_0") == (
        "ElementWiseQuantizeLinear.output: data type INT8 needs feature level 2_1 (device is 1_0)"
    )


def test_quantize_float16_input_needs_6_0() -> None:
    assert refusal(quantize(4, F16, U8, True), "5_2") == (
        "ElementWiseQuantizeLinear.input: data type FLOAT16 needs feature level 6_0 (device is 5_2)"
    )
    Device("6_0").compile_operator(quantize(4, F16, U8, True))


def test_quantize_zero_point_optional_from_6_2() -> None:
    assert refusal(quantize(4, F32, U8, False), "6_1") == (
        "ElementWiseQuantizeLinear.zero_point: tensor is required before feature level 6_2 (device is 6_1)"
    )
    Device("6_2").compile_operator(quantize(4, F32, U8, False))


@pytest.mark.parametrize("ndim", [3, 5])
def test_quantize_exactly_four_dims_before_3_0(ndim: int) -> None:
    assert refusal(quantize(ndim, F32, U8, True), "2_1") == (
        f"ElementWiseQuantizeLinear.input: dimension count {ndim} needs feature level 3_0 (device is 2_1)"
    )
    Device("1_0").compile_operator(quantize(4, F32, U8, True))
    Device("3_0").compile_operator(quantize(ndim, F32, U8, True))
    Device("3_0").compile_operator(quantize(8, F32, U8, True))
    assert "dimension count 9 is outside 1 to 8" in refusal(quantize(9, F32, U8, True), "6_4")


def test_dequantize_rows() -> None:
    assert refusal(dequantize(4, I8, F32, True), "1_0") == (
        "ElementWiseDequantizeLinear.input: data type INT8 needs feature level 2_1 (device is 1_0)"
    )
    assert refusal(dequantize(4, U8, F16, True), "5_2").startswith(
        "ElementWiseDequantizeLinear.scale: data type FLOAT16 needs feature level 6_0"
    )
    assert "tensor is required before feature level 6_2" in refusal(dequantize(2, U8, F32, False), "6_1")
    assert refusal(dequantize(4, I64, F32, True), "6_4").startswith(
        "ElementWiseDequantizeLinear.input: data type INT64 is not supported (supported: "
    )


@pytest.mark.parametrize(
    "data_type, level",
    [
        (I32, "2_1"),
        (U32, "2_1"),
        (I64, "4_1"),
        (U64, "4_1"),
        (I16, "5_1"),
        (I8, "5_1"),
        (U16, "5_1"),
        (U8, "5_1"),
    ],
)
def test_add_integer_types(data_type: DataType, level: str) -> None:
    below = LEVELS[LEVELS.index(FL(level)) - 1].label
    assert refusal(add(4, data_type), below) == (
        f"ElementWiseAdd.a: data type {data_type.name} needs feature level {level} (device is {below})"
    )
    Device(level).compile_operator(add(4, data_type))


def test_add_dims_four_to_five_before_3_0() -> None:
    for level in ("1_0", "2_1"):
        Device(level).compile_operator(add(4, F32))
        Device(level).compile_operator(add(5, F32))
        assert "dimension count 3 needs feature level 3_0" in refusal(add(3, F32), level)
        assert "dimension count 6 needs feature level 3_0" in refusal(add(6, F32), level)
    Device("3_0").compile_operator(add(1, F32))
    Device("3_0").compile_operator(add(8, F32))


def test_add1_rows_and_float_only() -> None:
    assert refusal(add1(4, F32, None), "1_0") == (
        "ElementWiseAdd1: operator needs feature level 2_0 (device is 1_0)"
    )
    Device("2_0").compile_operator(add1(5, F16, None))
    assert "dimension count 3 needs feature level 3_0" in refusal(add1(3, F32, None), "2_1")
    Device("3_0").compile_operator(add1(1, F32, None))
    assert refusal(add1(4, I32, None), "6_4").startswith(
        "ElementWiseAdd1.a: data type INT32 is not supported (supported: FLOAT32, FLOAT16)"
    )


@pytest.mark.parametrize(
    "activation, level",
    [
        (activations.Shrink(), "2_0"),
        (activations.Celu(), "3_0"),
        (activations.Gelu(), "5_1"),
    ],
)
def test_activation_levels(activation: activations.Activation, level: str) -> None:
    desc = add1(4, F32, activation)
    Device(level).compile_operator(desc)
    if level != "2_0":
        below = LEVELS[LEVELS.index(FL(level)) - 1].label
        assert refusal(desc, below) == (
            f"ElementWiseAdd1.fused_activation: {activation.TYPE_NAME} needs feature level {level} "
            f"(device is {below})"
        )


def test_softplus_steepness_below_one_needs_6_4() -> None:
    Device("2_0").compile_operator(add1(4, F32, activations.Softplus(steepness=1.0)))
    Device("6_4").compile_operator(add1(4, F32, activations.Softplus(steepness=0.5)))
    assert refusal(add1(4, F32, activations.Softplus(steepness=0.999)), "6_3") == (
        "ElementWiseAdd1.fused_activation: ACTIVATION_SOFTPLUS steepness below 1 needs feature level 6_4 "
        "(device is 6_3)"
    )


def test_quantized_linear_add_needs_4_0() -> None:
    desc = quantized_add(2, U8, I8, U8, False)
    Device("4_0").compile_operator(desc)
    assert refusal(desc, "3_1") == (
        "ElementWiseQuantizedLinearAdd: operator needs feature level 4_0 (device is 3_1)"
    )


def test_matrix_multiply_rows() -> None:
    assert refusal(matmul(4, 4, U8, U8, U8, True), "2_0") == (
        "QuantizedLinearMatrixMultiply: operator needs feature level 2_1 (device is 2_0)"
    )
    Device("2_1").compile_operator(matmul(4, 4, U8, I8, I8, True))
    assert refusal(matmul(3, 4, U8, I8, U8, False), "3_1") == (
        "QuantizedLinearMatrixMultiply.a: dimension count 3 needs feature level 4_0 (device is 3_1)"
    )
    assert refusal(matmul(4, 2, U8, I8, U8, False), "3_1") == (
        "QuantizedLinearMatrixMultiply.a_scale: dimension count 2 needs feature level 4_0 (device is 3_1)"
    )
    for ndim, qdim in ((2, 1), (3, 2), (4, 4), (2, 4)):
        Device("4_0").compile_operator(matmul(ndim, qdim, U8, I8, U8, True))
    assert "dimension count 5 is not supported (supported: 2 to 4)" in refusal(
        matmul(5, 4, U8, U8, U8, False), "6_4"
    )
    assert "dimension count 5 is not supported (supported: 1 to 4)" in refusal(
        matmul(4, 5, U8, U8, U8, False), "6_4"
    )
