"""What DML_OPERATOR_QUANTIZE and DML_OPERATOR_DEQUANTIZE share: the quantization tensor array.

Sources, row by row:

* Fields, "Tensor constraints" (same DimensionCount) and the "Tensor support" tables: DirectML's
  pages for ``DML_QUANTIZE_OPERATOR_DESC`` and ``DML_DEQUANTIZE_OPERATOR_DESC`` (introduced in
  DML_FEATURE_LEVEL_6_3). The pages say "TBD" for ``QuantizationType`` and the contents of
  ``QuantizationTensors``.
* ``DML_QUANTIZATION_TYPE`` (NONE 0, SCALE 1, SCALE_ZERO_POINT 2): DirectML.h.
* Where the pages say "TBD" we take ONNX's QuantizeLinear/DequantizeLinear (opset 21) and the use
  onnxruntime's DirectML provider makes of them (``DmlOperatorMatMulNBits.cpp``): the tensors are
  the scale, then the zero point for SCALE_ZERO_POINT; the scale has the float tensor's data type,
  the zero point the integer tensor's; both have the same sizes, and each of their sizes divides
  the input's: a dimension of size ``n`` over an input dimension of size ``k·n`` is split into
  ``n`` blocks of ``k`` elements sharing one value (size 1 is the whole dimension, per-tensor;
  the provider writes a MatMulNBits weight ``{N, K}`` with scales ``{N, K / block}``). The output
  has the input's sizes.
* Without a zero point (``QuantizationType.SCALE``) an unsigned type's zero point is the midpoint of
  its range, 128 for UINT8 and 8 for UINT4, and a signed type's is 0: onnxruntime's DirectML provider
  says so where it maps ONNX's QuantizeLinear / DequantizeLinear 21, whose default zero point is 0
  for every type, onto these operators ("For unsigned quantization, DML uses the midpoint of the
  datatype when zero point isn't provided (e.g. 8 for uint4 and 128 for uint8)", so it binds a zero
  point of 0 made by FILL_VALUE_CONSTANT: ``DmlOperatorQuantization21`` in
  ``onnxruntime/core/providers/dml/DmlExecutionProvider/src/Operators/DmlOperatorElementWise.cpp``,
  ShirasawaSama/onnxruntime@c4780e65), and its MatMulNBits relies on it (SCALE only for weights
  whose default zero point is ``2^(bits - 1)``, ``DmlOperatorMatMulNBits.cpp``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import ml_dtypes
import numpy as np

from ..tensor import TensorDesc
from ..types import DataType, FeatureLevel, QuantizationType
from .base import Constraint, OperatorDesc, TensorField

F32, F16 = DataType.FLOAT32, DataType.FLOAT16
FLOATS = (F32, F16)
INTEGERS = (DataType.INT8, DataType.INT4, DataType.UINT8, DataType.UINT4)
QUANTIZATION_TYPES = (F32, F16, DataType.INT8, DataType.INT4, DataType.UINT8, DataType.UINT4)
INTRODUCED = FeatureLevel.FL_6_3

FIELDS = (
    TensorField("input", "InputTensor"),
    TensorField("quantization_tensors", "QuantizationTensors", is_array=True),
    TensorField("output", "OutputTensor", is_output=True),
)


def scale_only_zero_point(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray | None:
    """The zero point of a description without one: the midpoint of an unsigned ``dtype`` (an array of
    ``shape``), None (0) for a signed one.

    >>> scale_only_zero_point(np.dtype(np.uint8), (2,)), scale_only_zero_point(np.dtype(np.int8), (2,))
    (array([128, 128], dtype=uint8), None)
    """
    info = ml_dtypes.iinfo(dtype)  # type: ignore[no-untyped-call]  # ml_dtypes leaves it untyped
    if info.min < 0:
        return None
    return np.full(shape, (info.max + 1) // 2, np.uint8).astype(dtype)


def quantization_tensors(present: Mapping[str, TensorDesc]) -> list[tuple[str, TensorDesc]]:
    """The present quantization tensors by their names ``quantization_tensors[i]``."""
    return [(name, desc) for name, desc in present.items() if name.startswith("quantization_tensors[")]


def _same_dimension_count(present: Mapping[str, TensorDesc]) -> tuple[str, str] | None:
    named = [(name, present[name]) for name in ("input", "output") if name in present]
    named += quantization_tensors(present)
    for name, desc in named[1:]:
        if desc.dimension_count != named[0][1].dimension_count:
            return name, (f"dimension count {desc.dimension_count} differs from {named[0][0]}'s "
                          f"{named[0][1].dimension_count}")  # fmt: skip
    return None


def _output_has_input_sizes(present: Mapping[str, TensorDesc]) -> tuple[str, str] | None:
    if "input" in present and "output" in present and present["output"].sizes != present["input"].sizes:
        return (
            "output",
            f"sizes {list(present['output'].sizes)} differ from input's {list(present['input'].sizes)}",
        )
    return None


def _blocks_divide_input(present: Mapping[str, TensorDesc]) -> tuple[str, str] | None:
    if "input" not in present:
        return None
    sizes = present["input"].sizes
    for name, desc in quantization_tensors(present):
        if desc.dimension_count == len(sizes) and any(k % n for k, n in zip(sizes, desc.sizes)):
            return name, (f"sizes {list(desc.sizes)} must each divide input's {list(sizes)} "
                          "(a size n splits its dimension into n equal blocks)")  # fmt: skip
    return None


def _same_quantization_sizes(present: Mapping[str, TensorDesc]) -> tuple[str, str] | None:
    named = quantization_tensors(present)
    for name, desc in named[1:]:
        if desc.sizes != named[0][1].sizes:
            return name, f"sizes {list(desc.sizes)} differ from the scale's {list(named[0][1].sizes)}"
    return None


CONSTRAINTS = (
    Constraint("input, output and every quantization tensor must have the same dimension count",
               _same_dimension_count),
    Constraint("output must have input's sizes", _output_has_input_sizes),
    Constraint("each size of a quantization tensor must divide input's (blocks)", _blocks_divide_input),
    Constraint("the zero point must have the scale's sizes", _same_quantization_sizes),
)  # fmt: skip


DECISIONS = (
    "**Without a zero point** (QuantizationType SCALE) an unsigned type's zero point is its midpoint, 128 "
    "for UINT8 and 8 for UINT4, a signed type's 0: the page says \"TBD\"; onnxruntime's DirectML provider "
    "states it (\"For unsigned quantization, DML uses the midpoint of the datatype when zero point isn't "
    'provided (e.g. 8 for uint4 and 128 for uint8)", `DmlOperatorQuantization21` in '
    "`Ops/DmlOperatorElementWise.cpp`, ShirasawaSama/onnxruntime@c4780e65), binds a zero point of 0 for "
    "ONNX's Q/DQ-21 there, and describes MatMulNBits weights without zero points (default `2^(bits - 1)`)"
    " with SCALE alone (`Ops/DmlOperatorMatMulNBits.cpp`).",
)


@dataclass(frozen=True, kw_only=True)
class BlockwiseQuantization(OperatorDesc):
    """Fields and rules of the two 6_3 operators; subclasses name the float and integer sides."""

    input: TensorDesc | None = None
    quantization_type: QuantizationType | int = QuantizationType.SCALE
    quantization_tensors: Sequence[TensorDesc] = ()  # kept as a tuple
    output: TensorDesc | None = None

    FLOAT_SIDE: ClassVar[str]  # "input" or "output"
    INTEGER_SIDE: ClassVar[str]

    def __post_init__(self) -> None:
        tensors = self.quantization_tensors
        if isinstance(tensors, Sequence) and not isinstance(tensors, (tuple, str)):
            object.__setattr__(self, "quantization_tensors", tuple(tensors))
        if type(self.quantization_type) is int and self.quantization_type in set(QuantizationType):
            object.__setattr__(self, "quantization_type", QuantizationType(self.quantization_type))

    @property
    def scale(self) -> TensorDesc | None:
        return self.quantization_tensors[0] if self.quantization_tensors else None

    @property
    def zero_point(self) -> TensorDesc | None:
        has_zero_point = self.quantization_type == QuantizationType.SCALE_ZERO_POINT
        return self.quantization_tensors[1] if has_zero_point and len(self.quantization_tensors) > 1 else None

    def _extra_violations(self, level: FeatureLevel) -> Iterable[tuple[str, str]]:
        kind = self.quantization_type
        if not isinstance(kind, QuantizationType) or kind == QuantizationType.NONE:
            yield "quantization_type", f"{kind!r} must be QuantizationType.SCALE or SCALE_ZERO_POINT"
            return
        count = len(self.quantization_tensors) if isinstance(self.quantization_tensors, tuple) else None
        if count is not None and count != len(kind.tensor_names):
            yield ("quantization_tensors", f"{kind.name} takes {len(kind.tensor_names)} tensor(s) "
                   f"({', '.join(kind.tensor_names)}), got {count}")  # fmt: skip
            return
        yield from self._type_violations()

    def _type_violations(self) -> Iterable[tuple[str, str]]:
        present = self.present()
        roles = (("scale", self.FLOAT_SIDE), ("zero point", self.INTEGER_SIDE))
        for (role, side_name), (name, desc) in zip(roles, quantization_tensors(present)):
            side = present.get(side_name)
            if side is not None and desc.data_type != side.data_type:
                rule = (
                    f"the {role} has data type {desc.data_type.name}, not {side_name}'s {side.data_type.name}"
                )
                yield name, rule
