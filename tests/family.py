"""Test helpers for the quantized family: descriptions from arrays, execution on a Device, and the
independent oracles (one-node ONNX models run by onnx.reference and by onnxruntime CPU)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from dmlq import DataType, Device, TensorDesc, TensorFlags
from dmlq.reference.windows import output_size

BYTE_TYPES = ("uint8", "int8")


def tensor_of(array: np.ndarray | None, sizes: Sequence[int] | None = None) -> TensorDesc | None:
    """The packed description of ``array`` (or of its values laid out as ``sizes``)."""
    if array is None:
        return None
    return TensorDesc(DataType.from_dtype(array.dtype), array.shape if sizes is None else sizes)


def execute(desc, inputs: Sequence[np.ndarray | None], device: Device | None = None) -> list[np.ndarray]:
    """``desc`` compiled and executed on packed arrays; the outputs, shaped as their descriptions."""
    operator = (device or Device()).compile_operator(desc)
    outputs = [np.zeros(getattr(desc, f.name).sizes, getattr(desc, f.name).data_type.dtype)
               for f in desc.output_fields()]  # fmt: skip
    operator.execute([None if a is None else np.ascontiguousarray(a) for a in inputs], outputs)
    return outputs


def execute_owned(desc, inputs: Sequence[np.ndarray | None], owned: str):
    """``desc`` with input ``owned`` flagged OWNED_BY_DML: bound by ``initialize`` from a copy that is then
    overwritten (the operator keeps its own), executed on the other inputs. The outputs and the operator."""
    tensor = getattr(desc, owned)
    desc = dataclasses.replace(desc, **{owned: dataclasses.replace(tensor, flags=TensorFlags.OWNED_BY_DML)})
    operator = Device().compile_operator(desc)
    index = [name for name, _ in desc.input_tensors()].index(owned)
    bound = np.array(inputs[index])
    operator.initialize([bound if i == index else None for i in range(len(inputs))])
    bound[...] = 0
    outputs = [np.zeros(getattr(desc, f.name).sizes, getattr(desc, f.name).data_type.dtype)
               for f in desc.output_fields()]  # fmt: skip
    given = [None if i == index or a is None else np.ascontiguousarray(a) for i, a in enumerate(inputs)]
    operator.execute(given, outputs)
    return outputs, operator


def random_bytes(rng: np.random.Generator, dtype: str, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


# -- ONNX one-node models ------------------------------------------------------------------------------


def node_model(
    op_type: str,
    inputs: Sequence[tuple[str, np.ndarray | None]],
    outputs: Sequence[tuple[str, int]],
    opset: int = 13,
    domain: str = "",
    **attributes,
):
    """A model of one node; ``inputs`` as (name, array or None for an absent optional input),
    ``outputs`` as (name, TensorProto element type)."""
    names = [name if array is not None else "" for name, array in inputs]
    output_names = [name for name, _ in outputs]
    node = helper.make_node(op_type, names, output_names, domain=domain or None, **attributes)
    graph_inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)
        for name, array in inputs
        if array is not None
    ]
    graph_outputs = [helper.make_tensor_value_info(name, kind, None) for name, kind in outputs]
    graph = helper.make_graph([node], "family", graph_inputs, graph_outputs)
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def feeds(inputs: Sequence[tuple[str, np.ndarray | None]]) -> dict[str, np.ndarray]:
    return {name: array for name, array in inputs if array is not None}


def onnx_reference(model, inputs) -> list[np.ndarray]:
    return ReferenceEvaluator(model).run(None, feeds(inputs))


def onnxruntime_cpu(model, inputs) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds(inputs))


INT32, FLOAT, UINT8, INT8 = TensorProto.INT32, TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8


# -- convolutions ---------------------------------------------------------------------------------------

TYPES = list(itertools.product(BYTE_TYPES, BYTE_TYPES))
# (input sizes, filter sizes, attributes): padding on every side, strides and dilations > 1, groups,
# depthwise, 1 x 1, odd sizes, 1-D ({N, C, W}) convolutions
GEOMETRIES = {
    "3x3": ((1, 3, 7, 7), (4, 3, 3, 3), {}),
    "padded-every-side": ((2, 2, 6, 5), (3, 2, 3, 2), {"start_padding": (1, 2), "end_padding": (3, 1)}),
    "strided-dilated": ((1, 3, 11, 10), (2, 3, 3, 3), {"strides": (2, 3), "dilations": (2, 3),
                                                       "start_padding": (2, 1), "end_padding": (1, 2)}),
    "groups": ((1, 6, 6, 6), (4, 3, 3, 3), {"group_count": 2, "start_padding": (1, 1),
                                            "end_padding": (1, 1)}),
    "depthwise": ((2, 5, 8, 7), (5, 1, 3, 3), {"group_count": 5, "strides": (2, 2), "start_padding": (1, 1),
                                               "end_padding": (1, 1)}),
    "pointwise": ((1, 8, 5, 3), (6, 8, 1, 1), {}),
    "odd": ((3, 5, 9, 11), (7, 5, 5, 2), {"strides": (3, 2), "end_padding": (2, 0)}),
    "1-d": ((2, 3, 13), (4, 3, 4), {"strides": (1, 2), "dilations": (1, 2), "start_padding": (0, 3),
                                    "end_padding": (0, 1)}),
}  # fmt: skip


def attributes(given: dict) -> dict:
    return {"strides": (1, 1), "dilations": (1, 1), "start_padding": (0, 0), "end_padding": (0, 0),
            "group_count": 1} | given  # fmt: skip


def output_sizes(x_sizes, w_sizes, attrs) -> tuple[int, ...]:
    spatial = (1,) * (4 - len(x_sizes)) + tuple(x_sizes[2:])
    window = (1,) * (4 - len(w_sizes)) + tuple(w_sizes[2:])
    out = [output_size(*args) for args in zip(spatial, attrs["start_padding"], attrs["end_padding"], window,
                                              attrs["strides"], attrs["dilations"])]  # fmt: skip
    return (x_sizes[0], w_sizes[0], *out[4 - len(x_sizes) :])


def convolution_sums(x, x_zero_point, w, w_zero_point, **given) -> np.ndarray:
    """The integer convolutions' sum with Python ints and explicit bounds checks (int64; the zero
    points scalars or per-output-channel vectors)."""
    attrs = attributes(given)
    x4 = x if x.ndim == 4 else x[:, :, None]
    w4 = w if w.ndim == 4 else w[:, :, None]
    n_count, _, height, width = x4.shape
    m_count, channels, kh, kw = w4.shape
    out = np.zeros(output_sizes(x4.shape, w4.shape, attrs), np.int64)
    (sh, sw), (dh, dw), (ph, pw) = attrs["strides"], attrs["dilations"], attrs["start_padding"]
    xz = 0 if x_zero_point is None else int(np.asarray(x_zero_point).item())
    per_group = m_count // attrs["group_count"]
    for n, m, oy, ox in np.ndindex(*out.shape):
        wz = 0 if w_zero_point is None else int(np.broadcast_to(w_zero_point, (m_count,))[m])
        total = 0
        for c, ky, kx in itertools.product(range(channels), range(kh), range(kw)):
            y, xx = oy * sh - ph + ky * dh, ox * sw - pw + kx * dw
            if 0 <= y < height and 0 <= xx < width:
                total += (int(x4[n, (m // per_group) * channels + c, y, xx]) - xz) * (
                    int(w4[m, c, ky, kx]) - wz
                )
        out[n, m, oy, ox] = total
    return out.reshape(output_sizes(x.shape, w.shape, attrs))


def onnx_convolution_attributes(ndim: int, given: dict) -> dict:
    """The ONNX attributes of a geometry (a 1-D convolution drops the H values)."""
    attrs, cut = attributes(given), 4 - ndim
    return {"group": attrs["group_count"], "strides": list(attrs["strides"][cut:]),
            "dilations": list(attrs["dilations"][cut:]),
            "pads": list(attrs["start_padding"][cut:] + attrs["end_padding"][cut:])}  # fmt: skip


# -- matrix multiplies -----------------------------------------------------------------------------------


def broadcast_tensor(array: np.ndarray, sizes: Sequence[int]) -> TensorDesc:
    """A description of the packed ``array`` read as ``sizes`` (NumPy's right-aligned broadcast, through
    zero strides)."""
    own = (1,) * (len(sizes) - array.ndim) + array.shape
    packed = np.empty(own, np.int8).strides  # element strides of the packed array, in bytes of one
    strides = [0 if size == 1 and target != 1 else stride for size, target, stride in zip(own, sizes, packed)]
    return TensorDesc(DataType.from_dtype(array.dtype), list(sizes), strides)


def matrix_sizes(a: np.ndarray, b: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The sizes A, B and the output take: NumPy's broadcast batch, at least 2 dimensions."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return (*batch, *a.shape[-2:]), (*batch, *b.shape[-2:]), (*batch, a.shape[-2], b.shape[-1])
