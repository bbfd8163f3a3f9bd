"""The device: validates descriptions at its feature level, compiles them, executes them on buffers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .buffers import Binding, NibbleBinding, binding_of
from .errors import DmlError
from .int4 import Nibbles
from .kernels import KERNELS
from .ops import OperatorDesc
from .types import FeatureLevel

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
    """A validated operator, ready to execute on buffers."""

    def __init__(self, desc: OperatorDesc, device: Device) -> None:
        self._desc = desc
        self._device = device
        self._kernel = KERNELS[type(desc)]
        self._reciprocal_division = device.reciprocal_division
        where = f"{type(desc).__name__}.execute"
        self._inputs = [_binding(tensor, name, f"{where} inputs[{index}]", writable=False)
                        for index, (name, tensor) in enumerate(desc.input_tensors())]  # fmt: skip
        output_name = desc.output_fields()[0].name
        self._output = _binding(getattr(desc, output_name), output_name, f"{where} outputs[0]", writable=True)

    @property
    def desc(self) -> OperatorDesc:
        return self._desc

    @property
    def device(self) -> Device:
        return self._device

    def execute(self, inputs: Sequence[object | None], outputs: Sequence[object]) -> None:
        """Run on buffers: one per tensor field in the struct's order, None for absent tensors.

        Each buffer's bytes are read (or written) through its tensor's data type, sizes and
        strides. An output may share memory with an input only where the operator runs in place
        and both buffers start at the same address (one resource bound at one offset, whatever
        the two tensors' strides); it is then computed as if every input was read first.
        """
        views, out = self.bind(inputs, outputs)
        self.run_arrays(views, out)

    def bind(
        self, inputs: Sequence[object | None], outputs: Sequence[object]
    ) -> tuple[dict[str, np.ndarray | None], np.ndarray]:
        """Every buffer checked as :meth:`execute` checks it, without computing: the input views by
        field name and the output view."""
        try:
            return self._bind_all(inputs, outputs)
        except DmlError as error:
            raise _refusal(str(error), self._device.feature_level) from None

    def run_arrays(self, views: Mapping[str, np.ndarray | None], out: np.ndarray) -> None:
        """Compute on ndarrays shaped like the descriptions, or broadcasting to them as NumPy operands
        do (the NumPy layer's entry: it skips building zero-stride views of per-tensor operands)."""
        self._kernel(self._desc, views, out, self._reciprocal_division)

    def _bind_all(self, inputs: Sequence[object | None],
                  outputs: Sequence[object]) -> tuple[dict[str, np.ndarray | None], np.ndarray]:  # fmt: skip
        """The input views by field name and the output view, every buffer checked."""
        name = type(self._desc).__name__
        _check_count(name, "inputs", inputs, len(self._inputs))
        _check_count(name, "outputs", outputs, 1)
        views, ranges = {}, {}
        for field, buffer in zip(self._inputs, inputs):
            views[field[0]] = _bound(field, buffer, ranges)
        out = _bound(self._output, outputs[0], ranges)
        self._check_aliasing(name, ranges, self._output[0])
        return views, out

    def _check_aliasing(self, name: str, ranges: dict[str, tuple[int, int]], out_name: str) -> None:
        out_start, out_end = ranges.pop(out_name)
        for field_name, (start, end) in ranges.items():
            if start >= out_end or out_start >= end:
                continue
            if self._desc.IN_PLACE and start == out_start:
                continue  # the same buffer: identical bindings, whatever the strides address
            rule = (
                "in place, the output must start where the input does (the same buffer)"
                if self._desc.IN_PLACE
                else "this operator cannot run in place"
            )
            raise DmlError(f"{name}.execute: output overlaps input {field_name}; {rule}")


_Field = tuple[
    str, str, "Binding | NibbleBinding | None"
]  # name, how errors call it, its Binding (None: absent)


def _binding(tensor: object, field_name: str, where: str, *, writable: bool) -> _Field:
    where = f"{where} ({field_name})"
    return field_name, where, None if tensor is None else binding_of(tensor, where, writable=writable)


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


def _refusal(message: str, level: FeatureLevel) -> DmlError:
    """A DmlError ending with the device's level, like every refusal of ``OperatorDesc.validate``."""
    return DmlError(f"{message} (device is {level.label})")


def _check_count(name: str, what: str, buffers: Sequence[object], expected: int) -> None:
    if isinstance(buffers, (str, bytes)) or len(buffers) != expected:
        raise DmlError(f"{name}.execute: {what} needs {expected} buffer(s), got {len(buffers)}")
