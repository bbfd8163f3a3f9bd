"""The device: validates descriptions at its feature level, compiles them, executes them on buffers."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .buffers import Binding, NibbleBinding, binding_of
from .errors import DmlError
from .int4 import Nibbles
from .kernels import KERNELS, Operand, Views
from .ops import ConvolutionInteger, OperatorDesc, QuantizedLinearConvolution, QuantizedLinearMatrixMultiply
from .packed import PackedB, PackedFilter
from .tensor import TensorDesc
from .types import FeatureLevel, TensorFlags

__all__ = ["Device", "CompiledOperator"]


class Device:
    """A CPU stand-in for a DirectML device of a given feature level.

    ``reciprocal_division=True`` reproduces the GPU's ``x * float32(1 / scale)`` in place of the
    IEEE division ``x / scale`` (they differ at near-ties, SPEC-NOTES §6).

    >>> import numpy as np
    >>> from dmlq import DataType, TensorDesc, ops
    >>> x = TensorDesc(DataType.FLOAT32, [1, 1, 1, 3])
    >>> s = TensorDesc(DataType.FLOAT32, [1, 1, 1, 3], strides=[0, 0, 0, 0])
    >>> zp = TensorDesc(DataType.UINT8, [1, 1, 1, 3], strides=[0, 0, 0, 0])
    >>> y = TensorDesc(DataType.UINT8, [1, 1, 1, 3])
    >>> op = Device("1_0").compile_operator(
    ...     ops.ElementWiseQuantizeLinear(input=x, scale=s, zero_point=zp, output=y))
    >>> out = np.zeros(3, np.uint8)
    >>> op.execute([np.float32([0.5, 1.5, 2.5]), np.float32([1]), np.uint8([10])], [out])
    >>> out
    array([10, 12, 12], dtype=uint8)
    """

    def __init__(
        self, feature_level: FeatureLevel | str | int | None = None, *,
        reciprocal_division: bool = False,
    ) -> None:  # fmt: skip
        self._feature_level = (
            FeatureLevel.newest() if feature_level is None else FeatureLevel.parse(feature_level)
        )
        self._reciprocal_division = bool(reciprocal_division)

    @property
    def feature_level(self) -> FeatureLevel:
        return self._feature_level

    @property
    def reciprocal_division(self) -> bool:
        return self._reciprocal_division

    def __repr__(self) -> str:
        extra = ", reciprocal_division=True" if self._reciprocal_division else ""
        return f"Device(feature_level={self._feature_level.label!r}{extra})"

    def compile_operator(self, desc: OperatorDesc) -> CompiledOperator:
        """Check every rule of ``desc``'s page at this device's level; DmlError on a violation."""
        if not isinstance(desc, OperatorDesc):
            message = f"compile_operator needs a dmlq.ops description, not {type(desc).__name__}"
            raise _refusal(message, self._feature_level)
        desc.validate(self._feature_level)
        return CompiledOperator(desc, self)


class CompiledOperator:
    """A validated operator, ready to execute on buffers.

    Inputs flagged OWNED_BY_DML are bound once, by :meth:`initialize`, before any execution.
    """

    def __init__(self, desc: OperatorDesc, device: Device) -> None:
        self._desc = desc
        self._device = device
        self._kernel = KERNELS[type(desc)]
        self._reciprocal_division = device.reciprocal_division
        where = f"{type(desc).__name__}.execute"
        self._inputs = [_binding(tensor, name, f"{where} inputs[{index}]", writable=False)
                        for index, (name, tensor) in enumerate(desc.input_tensors())]  # fmt: skip
        self._outputs = [_binding(getattr(desc, f.name), f.name, f"{where} outputs[{index}]", writable=True)
                         for index, f in enumerate(desc.output_fields())]  # fmt: skip
        self._owned_fields = tuple(
            name
            for name, tensor in desc.input_tensors()
            if isinstance(tensor, TensorDesc) and tensor.flags & TensorFlags.OWNED_BY_DML
        )
        self._owned: dict[str, Operand] | None = None  # their private copies, once initialized

    @property
    def desc(self) -> OperatorDesc:
        return self._desc

    @property
    def device(self) -> Device:
        return self._device

    def initialize(self, inputs: Sequence[object | None]) -> None:
        """Bind the OWNED_BY_DML inputs: DirectML's operator initializer.

        One buffer per input field in the struct's order: the OWNED_BY_DML ones given, the others
        None. The operator keeps private copies (the matrix multiply packs B then), so later
        writes to these buffers change nothing; :meth:`execute` then takes None in their places.
        As in DirectML, initializing again replaces what the last initialize bound.

        >>> import numpy as np
        >>> from dmlq import DataType, Device, TensorDesc, TensorFlags, ops
        >>> one = TensorDesc(DataType.FLOAT32, [1, 1])
        >>> weights = TensorDesc(DataType.INT8, [2, 1], flags=TensorFlags.OWNED_BY_DML)
        >>> op = Device().compile_operator(ops.QuantizedLinearMatrixMultiply(
        ...     a=TensorDesc(DataType.UINT8, [1, 2]), a_scale=one, b=weights, b_scale=one,
        ...     output_scale=one, output=TensorDesc(DataType.UINT8, [1, 1])))
        >>> b = np.int8([[3], [4]])
        >>> op.initialize([None, None, None, b, None, None, None, None])
        >>> b[...] = 0  # the operator holds its own (packed) copy
        >>> out = np.zeros((1, 1), np.uint8)
        >>> ones = np.float32([1])
        >>> op.execute([np.uint8([[1, 2]]), ones, None, None, ones, None, ones, None], [out])
        >>> out
        array([[11]], dtype=uint8)
        """
        name = type(self._desc).__name__
        try:
            _check_count(f"{name}.initialize", "inputs", inputs, len(self._inputs))
            views = {}
            for field, buffer in zip(self._inputs, inputs):
                if field[0] in self._owned_fields:
                    views[field[0]] = _owned_view(field, buffer)
                elif buffer is not None:
                    raise DmlError(f"{name}.initialize: {field[0]} is not OWNED_BY_DML; pass None "
                                   "and bind it in execute")  # fmt: skip
        except DmlError as error:
            raise _refusal(str(error), self._device.feature_level) from None
        self._owned = {name: self._private_copy(name, view) for name, view in views.items()}

    def _private_copy(self, name: str, view: np.ndarray | Nibbles) -> Operand:
        """The operator's own copy of an OWNED_BY_DML input: the matrix multiply's B and the
        convolutions' filter packed, others as their distinct elements broadcast (zero strides stay
        zero, without copies)."""
        if isinstance(view, Nibbles):  # 4-bit: its bytes, read through the same strides
            return dataclasses.replace(view, memory=view.memory.copy())
        if name == "b" and isinstance(self._desc, QuantizedLinearMatrixMultiply):
            return PackedB(_without_repeats(view, view.ndim - 2))  # each distinct batch, once
        if name == "filter" and isinstance(self._desc, (QuantizedLinearConvolution, ConvolutionInteger)):
            return PackedFilter(view, self._desc.group_count)
        return np.broadcast_to(np.array(_without_repeats(view, view.ndim)), view.shape)

    def execute(self, inputs: Sequence[object | None], outputs: Sequence[object]) -> None:
        """Run on buffers: one per tensor field in the struct's order, None for absent tensors (the
        outputs likewise, most operators having one).

        Each buffer's bytes are read (or written) through its tensor's data type, sizes and
        strides. An output may share memory with an input only where the operator runs in place
        and both buffers start at the same address (one resource bound at one offset, whatever
        the two tensors' strides); it is then computed as if every input was read first.
        OWNED_BY_DML inputs take None: :meth:`initialize` bound them.
        """
        views, out = self.bind(inputs, outputs)
        self.run_arrays(views, out)

    def bind(
        self, inputs: Sequence[object | None], outputs: Sequence[object]
    ) -> tuple[dict[str, Operand], Operand | tuple[Operand, ...]]:
        """Every buffer checked as :meth:`execute` checks it, without computing: the input views by
        field name and the output view (a tuple of them, in the struct's order, for an operator
        with several outputs)."""
        try:
            return self._bind_all(inputs, outputs)
        except DmlError as error:
            raise _refusal(str(error), self._device.feature_level) from None

    def run_arrays(self, views: Views, out: Operand | tuple[Operand, ...]) -> None:
        """Compute on ndarrays shaped like the descriptions, or broadcasting to them as NumPy operands
        do (the NumPy layer's entry: it skips building zero-stride views of per-tensor operands)."""
        self._kernel(self._desc, views, out, self._reciprocal_division)

    def _bind_all(self, inputs: Sequence[object | None],
                  outputs: Sequence[object]) -> tuple[dict[str, Operand], object]:  # fmt: skip
        """The input views by field name and the output view(s), every buffer checked."""
        name = type(self._desc).__name__
        _check_count(f"{name}.execute", "inputs", inputs, len(self._inputs))
        _check_count(f"{name}.execute", "outputs", outputs, len(self._outputs))
        if self._owned_fields and self._owned is None:
            raise DmlError(f"{name}.execute: call initialize first, to bind the OWNED_BY_DML input(s) "
                           f"{', '.join(self._owned_fields)}")  # fmt: skip
        views: dict[str, Operand] = {}
        ranges: dict[str, tuple[int, int]] = {}
        for field, buffer in zip(self._inputs, inputs):
            if field[0] in self._owned_fields:
                assert self._owned is not None  # refused above
                if buffer is not None:
                    raise DmlError(f"{field[1]}: OWNED_BY_DML, bound by initialize; pass None")
                views[field[0]] = self._owned[field[0]]
            else:
                views[field[0]] = _bound(field, buffer, ranges)
        outs = tuple(_bound(field, buffer, ranges) for field, buffer in zip(self._outputs, outputs))
        for field in self._outputs:
            self._check_aliasing(name, ranges, field[0])
        return views, outs[0] if len(outs) == 1 else outs

    def _check_aliasing(self, name: str, ranges: dict[str, tuple[int, int]], out_name: str) -> None:
        """``out_name``'s bytes against every input's and every output's bound before it."""
        out_start, out_end = ranges.pop(out_name)
        for field_name, (start, end) in ranges.items():
            if start >= out_end or out_start >= end:
                continue
            if field_name in self._output_names:
                raise DmlError(f"{name}.execute: outputs {out_name} and {field_name} overlap")
            if self._desc.IN_PLACE and start == out_start:
                continue  # the same buffer: identical bindings, whatever the strides address
            rule = (
                "in place, the output must start where the input does (the same buffer)"
                if self._desc.IN_PLACE
                else "this operator cannot run in place"
            )
            raise DmlError(f"{name}.execute: output overlaps input {field_name}; {rule}")

    @property
    def _output_names(self) -> set[str]:
        return {field[0] for field in self._outputs}


_Field = tuple[
    str, str, "Binding | NibbleBinding | None"
]  # name, how errors call it, its Binding (None: absent)


def _binding(tensor: object, field_name: str, where: str, *, writable: bool) -> _Field:
    where = f"{where} ({field_name})"
    if tensor is None:
        return field_name, where, None
    assert isinstance(tensor, TensorDesc)  # compile_operator checked every field
    return field_name, where, binding_of(tensor, where, writable=writable)


def _bound(field: _Field, buffer: object, ranges: dict[str, tuple[int, int]]) -> np.ndarray | Nibbles | None:
    """The view of ``buffer`` for one field; its byte range goes into ``ranges``."""
    field_name, where, binding = field
    if binding is None:
        if buffer is not None:
            raise DmlError(f"{where}: the description has no {field_name} tensor; pass None")
        return None
    if buffer is None:
        raise DmlError(f"{where}: a buffer is required for the {field_name} tensor")
    view, start = binding.bind(buffer)
    ranges[field_name] = start, start + binding.addressed_bytes
    return view


def _owned_view(field: _Field, buffer: object) -> np.ndarray | Nibbles:
    """The view of an OWNED_BY_DML input's buffer, checked as execute checks buffers."""
    field_name, where, binding = field
    assert binding is not None  # an OWNED_BY_DML tensor is present
    binding = dataclasses.replace(binding, where=where.replace(".execute", ".initialize"))
    if buffer is None:
        raise DmlError(f"{binding.where}: a buffer is required for the OWNED_BY_DML {field_name} tensor")
    return binding.bind(buffer)[0]


def _without_repeats(view: np.ndarray, dimensions: int) -> np.ndarray:
    """``view`` cut to one element along each of its first ``dimensions`` dimensions that are
    broadcast (stride 0)."""
    return view[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in view.strides[:dimensions])]


def _refusal(message: str, level: FeatureLevel) -> DmlError:
    """A DmlError ending with the device's level, like every refusal of ``OperatorDesc.validate``."""
    return DmlError(f"{message} (device is {level.label})")


def _check_count(where: str, what: str, buffers: Sequence[object], expected: int) -> None:
    if isinstance(buffers, (str, bytes)) or len(buffers) != expected:
        raise DmlError(f"{where}: {what} needs {expected} buffer(s), got {len(buffers)}")
