"""Commands run in order on the model's resources: ``dispatch``, ``print`` and ``writeFile``."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TextIO

import numpy as np

from ..device import CompiledOperator
from ..errors import DmlError
from ..kernels import Operand
from ..ops import MatrixMultiplyIntegerToFloat, Quantize
from .bindings import Binding, parse_bindings
from .descriptions import dml_field_name, relocated_error
from .dispatchables import Dispatchable
from .reading import Node, file_name, named
from .resources import IMAGE_SUFFIXES, Resource


class UndefinedBehaviour(UserWarning):
    """A model runs, but DirectML leaves its result undefined (a scale of 0)."""


class Command(Protocol):
    @property
    def path(self) -> str:
        """The command's JSON path in the model."""

    def run(self, operators: Mapping[str, CompiledOperator], out: TextIO) -> None:
        """Execute the command on the model's resources."""


@dataclass(frozen=True)
class Dispatch:
    """``dispatch``: execute a dispatchable on bound resources."""

    dispatchable: Dispatchable
    bindings: Mapping[str, Binding]
    path: str

    def run(self, operators: Mapping[str, CompiledOperator], out: TextIO) -> None:
        operator = operators[self.dispatchable.name]
        views, output = self.bound(operator)
        for warning in self.zero_scales(views):
            warnings.warn(warning, UndefinedBehaviour, stacklevel=2)
        operator.run_arrays(views, output)

    def bound(self, operator: CompiledOperator) -> tuple[dict[str, Operand], Operand | tuple[Operand, ...]]:
        """The operator's views of the bound resources, checked as execution checks them; a DmlError
        names the binding's JSON path."""
        desc = self.dispatchable.desc
        initialized = self.dispatchable.initialized  # bound once, by the operator's initializer
        names = self.dispatchable.input_names()
        inputs = [None if name in initialized else self._buffer(name) for name in names]
        outputs = [self._buffer(tensor_field.dml_name) for tensor_field in desc.output_fields()]
        try:
            return operator.bind(inputs, outputs)
        except DmlError as error:
            raise relocated_error(error, type(desc), self._binding_path, self.path) from None

    def zero_scales(self, views: Mapping[str, np.ndarray | None]) -> list[str]:
        """A warning for each scale tensor holding a 0 now: DirectML leaves the result undefined."""
        return [
            f"{self._binding_path(name)}: a scale of 0, which DirectML leaves undefined (here x / 0)"
            for name, view in views.items()
            if self._is_scale(name) and view is not None and bool(np.any(view == 0))
        ]

    def _is_scale(self, name: str) -> bool:
        """Whether input ``name`` is a scale whose 0 the page leaves undefined: QUANTIZE's is its first
        quantization tensor; MATRIX_MULTIPLY_INTEGER_TO_FLOAT's only multiply."""
        desc = self.dispatchable.desc
        if isinstance(desc, MatrixMultiplyIntegerToFloat):
            return False
        return name.endswith("scale") or (isinstance(desc, Quantize) and name == "quantization_tensors[0]")

    def _binding(self, dml_name: str) -> Binding | None:
        return self.dispatchable.initialized.get(dml_name) or self.bindings.get(dml_name)

    def _buffer(self, dml_name: str) -> np.ndarray | None:
        binding = self._binding(dml_name)
        return None if binding is None else binding.view

    def _binding_path(self, name: str) -> str:
        binding = self._binding(dml_field_name(type(self.dispatchable.desc), name))
        return self.path if binding is None else binding.path


@dataclass(frozen=True)
class Print:
    """``print``: ``Resource 'name': v0, v1, ...`` over the initialized elements."""

    resource: Resource
    verbose: bool
    path: str

    def run(self, operators: Mapping[str, CompiledOperator], out: TextIO) -> None:
        values = self.resource.initialized_values()
        if not self.verbose:
            print(f"Resource '{self.resource.name}': {', '.join(map(format_value, values))}", file=out)
            return
        print(f"Resource '{self.resource.name}':", file=out)
        bits = self.resource.data_type.bits
        width, digits = len(str(max(values.size - 1, 0))), bits // 4
        for index, (value, raw) in enumerate(zip(values, values.view(f"u{values.itemsize}"))):
            print(f"[{index:{width}}] {format_value(value)} (0x{int(raw) % 2**bits:0{digits}X})", file=out)


def format_value(value: np.generic) -> str:
    """An element as ``print`` shows it: its shortest round-trip text, without a trailing ``.0``.

    >>> [format_value(v) for v in (np.float32(2), np.float16(65504), np.float32(0.1), np.uint8(200))]
    ['2', '65504', '0.1', '200']
    """
    if value.dtype == np.float16:
        value = np.float32(value)  # the exact value, not float16's shortest digits (65500)
    text = str(value)
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True)
class WriteFile:
    """``writeFile``: the whole buffer as ``.npy`` (1-D unless ``dimensions``) or as raw bytes.

    A 4-bit resource's ``.npy`` holds int8/uint8 values, one per byte (NumPy has no 4-bit dtype;
    ``ml_dtypes`` arrays would not load without it); its raw file holds the packed bytes.
    """

    resource: Resource
    target: Path
    dimensions: tuple[int, ...] | None
    path: str

    def run(self, operators: Mapping[str, CompiledOperator], out: TextIO) -> None:
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            if self.target.suffix.lower() == ".npy":
                np.save(self.target, self._array())
            else:
                self.resource.memory.tofile(self.target)
        except OSError as error:
            raise DmlError(
                f"{self.path}.targetPath: cannot write {self.target}: {error.strerror or error}"
            ) from None
        print(f"Resource '{self.resource.name}' written to '{self.target}'", file=out)

    def _array(self) -> np.ndarray:
        shape = self.dimensions or (self.resource.memory.size * 8 // self.resource.data_type.bits,)
        return self.resource.values(math.prod(shape)).reshape(shape)


def _parse_dispatch(
    node: Node, resources: Mapping[str, Resource], dispatchables: Mapping[str, Dispatchable]
) -> Dispatch:
    known = ("type", "dispatchable", "bindings", "threadGroupCount")  # threadGroupCount: HLSL only, ignored
    fields = node.fields(known, ("dispatchable", "bindings"))
    dispatchable = named(fields["dispatchable"], dispatchables, "dispatchable")
    bindings = parse_bindings(fields["bindings"], resources, dispatchable.desc)
    for name, binding in bindings.items():
        if name in dispatchable.initialized:
            raise DmlError(f"{binding.path}: OWNED_BY_DML, bound once in {dispatchable.path}.bindings")
    for tensor_name, tensor in dispatchable.desc.bound_tensors():
        name = dml_field_name(type(dispatchable.desc), tensor_name)
        if tensor is not None and name not in bindings and name not in dispatchable.initialized:
            raise fields["bindings"].error(f"missing binding for {name}, which the desc declares")
    return Dispatch(dispatchable, bindings, node.path)


def _parse_print(node: Node, resources: Mapping[str, Resource], dispatchables: object) -> Print:
    fields = node.fields(("type", "resource", "verbose"), ("resource",))
    verbose = fields["verbose"].boolean() if "verbose" in fields else False
    return Print(named(fields["resource"], resources, "resource"), verbose, node.path)


def _parse_write_file(node: Node, resources: Mapping[str, Resource], dispatchables: object) -> WriteFile:
    fields = node.fields(("type", "resource", "targetPath", "dimensions"), ("resource", "targetPath"))
    resource = named(fields["resource"], resources, "resource")
    target = file_name(fields["targetPath"])
    if target.suffix.lower() in IMAGE_SUFFIXES:
        raise fields["targetPath"].error("image files are not supported by dmlq")
    dimensions = None
    if "dimensions" in fields:
        dimensions = tuple(item.unsigned() for item in fields["dimensions"].elements()) or None
        needed = resource.bytes_of(math.prod(dimensions or ()))
        if needed > resource.memory.size:
            raise fields["dimensions"].error(
                f"need {needed} bytes, but resource '{resource.name}' has {resource.memory.size}"
            )
    return WriteFile(resource, target, dimensions, node.path)


_COMMAND_PARSERS: dict[str, Callable[[Node, Mapping[str, Resource], Mapping[str, Dispatchable]], Command]] = {
    "dispatch": _parse_dispatch,
    "print": _parse_print,
    "writefile": _parse_write_file,
}


def parse_command(
    node: Node, resources: Mapping[str, Resource], dispatchables: Mapping[str, Dispatchable]
) -> Command:
    members = node.entries()
    if "type" not in members:
        raise node.error("missing field 'type'")
    parser = _COMMAND_PARSERS.get(members["type"].string().lower())
    if parser is None:
        raise members["type"].error("unknown command (expected dispatch, print or writeFile)")
    return parser(node, resources, dispatchables)
