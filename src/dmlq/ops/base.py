"""What every operator description shares: support tables as data and the validator that reads them.

An operator module declares its fields, its ``SUPPORT`` rows (one per "DML_FEATURE_LEVEL_x and
above" table of its page, newest first) and its ``CONSTRAINTS`` (the page's "Tensor constraints");
:meth:`OperatorDesc.validate` applies them at a feature level.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import DmlError
from ..tensor import TensorDesc, tensor_problem
from ..types import DataType, FeatureLevel

__all__ = [
    "Constraint",
    "OperatorDesc",
    "Rule",
    "SupportRow",
    "TensorField",
    "TensorSupport",
    "required",
    "same_data_type",
    "same_dimension_count",
    "same_sizes",
    "support",
]


@dataclass(frozen=True)
class TensorField:
    """One ``const DML_TENSOR_DESC*`` member: its Python name, DirectML name and direction."""

    name: str
    dml_name: str
    is_output: bool = False
    is_array: bool = False  # a count and an array of descriptions (QuantizationTensors)


@dataclass(frozen=True)
class TensorSupport:
    """One line of a "Tensor support" table."""

    dims: tuple[int, int]  # inclusive range of DimensionCount
    types: tuple[DataType, ...]
    optional: bool = False

    def describe_dims(self) -> str:
        low, high = self.dims
        return str(low) if low == high else f"{low} to {high}"


@dataclass(frozen=True)
class SupportRow:
    """One "DML_FEATURE_LEVEL_x and above" table."""

    level: FeatureLevel
    tensors: Mapping[str, TensorSupport]


def support(
    level: FeatureLevel,
    dims: tuple[int, int] | Mapping[str, tuple[int, int]],
    optional: Iterable[str] = (),
    **types: Sequence[DataType],
) -> SupportRow:
    """A table row: ``dims`` for every field (or per field), data types by field name."""
    optional = set(optional)

    def dims_of(name: str) -> tuple[int, int]:
        return dims[name] if isinstance(dims, Mapping) else dims

    tensors = {
        name: TensorSupport(dims_of(name), tuple(allowed), name in optional)
        for name, allowed in types.items()
    }
    return SupportRow(level, tensors)


@dataclass(frozen=True)
class Constraint:
    """One "Tensor constraints" bullet: its text and the check that finds a violation.

    ``check(present)`` gets the present tensors by field name and returns ``(field, rule)`` for
    the first violation, or None.
    """

    text: str
    check: Callable[[Mapping[str, TensorDesc]], tuple[str, str] | None]


@dataclass(frozen=True)
class Rule:
    """A rule of the page over the whole description: its attributes (strides, group count, ...)
    and the tensor shapes they govern.

    ``check(desc)`` yields ``(field, rule)`` for each violation; it runs once the tensors pass their
    tables and constraints.
    """

    text: str
    # Its argument is the description of the operator that lists the rule: a subclass of OperatorDesc,
    # which a Callable's parameter type cannot name from here.
    check: Callable[[Any], Iterable[tuple[str, str]]]


def required(tensor: TensorDesc | None) -> TensorDesc:
    """A required tensor inside a rule's check: rules run after the tables, which reject its absence."""
    assert tensor is not None, "a rule ran on a description without a required tensor"
    return tensor


def _pairwise(fields: Sequence[str], key: Callable[[TensorDesc], object], what: str) -> Constraint:
    def check(present: Mapping[str, TensorDesc]) -> tuple[str, str] | None:
        named = [name for name in fields if name in present]
        if not named:
            return None
        first = named[0]
        for name in named[1:]:
            if key(present[name]) != key(present[first]):
                shown = key(present[name]), key(present[first])
                return name, f"{what} {_show(shown[0])} differs from {first}'s {_show(shown[1])}"
        return None

    return Constraint(f"{', '.join(fields)} must have the same {what}", check)


def _show(value: object) -> str:
    return value.name if isinstance(value, DataType) else str(value)


def same_dimension_count(*fields: str) -> Constraint:
    return _pairwise(fields, lambda desc: desc.dimension_count, "dimension count")


def same_sizes(*fields: str) -> Constraint:
    return _pairwise(fields, lambda desc: list(desc.sizes), "sizes")


def same_data_type(*fields: str) -> Constraint:
    return _pairwise(fields, lambda desc: desc.data_type, "data type")


@dataclass(frozen=True, kw_only=True)
class OperatorDesc:
    """Base of the operator descriptions in :mod:`dmlq.ops` (plain data, checked on compile)."""

    TYPE_NAME: ClassVar[str]  # DML_OPERATOR_<TYPE_NAME>
    TYPE_VALUE: ClassVar[int]
    INTRODUCED: ClassVar[FeatureLevel]
    FIELDS: ClassVar[tuple[TensorField, ...]]
    SUPPORT: ClassVar[tuple[SupportRow, ...]]  # newest level first
    CONSTRAINTS: ClassVar[tuple[Constraint, ...]]
    RULES: ClassVar[tuple[Rule, ...]] = ()  # attributes and shapes, after the tensor constraints
    DECISIONS: ClassVar[tuple[str, ...]] = ()  # where the page is silent: dmlq's choice, its evidence
    IN_PLACE: ClassVar[bool] = False

    @classmethod
    def input_fields(cls) -> tuple[TensorField, ...]:
        return tuple(f for f in cls.FIELDS if not f.is_output)

    @classmethod
    def output_fields(cls) -> tuple[TensorField, ...]:
        return tuple(f for f in cls.FIELDS if f.is_output)

    @classmethod
    def support_row(cls, level: FeatureLevel) -> SupportRow | None:
        """The table that applies at ``level``: the highest row the level reaches."""
        return next((row for row in cls.SUPPORT if row.level <= level), None)

    def tensors(self) -> Iterator[tuple[TensorField, TensorDesc | None]]:
        for tensor_field in self.FIELDS:
            yield tensor_field, getattr(self, tensor_field.name)

    def present(self) -> dict[str, TensorDesc]:
        return {name: desc for name, desc in self.bound_tensors() if isinstance(desc, TensorDesc)}

    def bound_tensors(self) -> list[tuple[str, object]]:
        """Every tensor in binding order by name, an array field's elements as ``name[i]``."""
        named: list[tuple[str, object]] = []
        for tensor_field, desc in self.tensors():
            if tensor_field.is_array and isinstance(desc, (tuple, list)):
                named += [(f"{tensor_field.name}[{index}]", item) for index, item in enumerate(desc)]
            else:
                named.append((tensor_field.name, desc))
        return named

    def input_tensors(self) -> list[tuple[str, object]]:
        """The inputs in the order ``CompiledOperator.execute`` takes their buffers."""
        outputs = {f.name for f in self.output_fields()}
        return [(name, desc) for name, desc in self.bound_tensors() if name not in outputs]

    def replace(self, **changes: object) -> OperatorDesc:
        return dataclasses.replace(self, **changes)

    # -- validation ----------------------------------------------------------------------------

    def validate(self, level: FeatureLevel | str) -> None:
        """Raise DmlError for the first rule of this operator's page broken at ``level``."""
        level = FeatureLevel.parse(level)
        name = type(self).__name__
        for where, rule in self._violations(level):
            prefix = f"{name}.{where}" if where else name
            raise DmlError(f"{prefix}: {rule} (device is {level.label})")

    def minimum_feature_level(self) -> FeatureLevel | None:
        """The lowest feature level that accepts this description, or None when none does."""
        for level in sorted(FeatureLevel):
            if level >= self.INTRODUCED and next(self._violations(level), None) is None:
                return level
        return None

    def _violations(self, level: FeatureLevel) -> Iterator[tuple[str, str]]:
        if level < self.INTRODUCED:
            yield "", f"operator needs feature level {self.INTRODUCED.label}"
            return
        row = self.support_row(level)
        assert row is not None  # every table's first row is at the level the operator came in
        for tensor_field, desc in self.tensors():
            yield from self._field_violations(tensor_field, desc, row)
        present = self.present()
        for constraint in self.CONSTRAINTS:
            found = constraint.check(present)
            if found:
                yield found
        for rule in self.RULES:
            yield from rule.check(self)
        yield from self._extra_violations(level)

    def _field_violations(
        self, tensor_field: TensorField, desc: object, row: SupportRow
    ) -> Iterator[tuple[str, str]]:
        if tensor_field.is_array:
            yield from self._array_violations(tensor_field, desc, row)
            return
        support = row.tensors[tensor_field.name]
        if desc is None:
            if not support.optional:
                yield tensor_field.name, self._absent_rule(tensor_field.name)
            return
        if not isinstance(desc, TensorDesc):
            yield tensor_field.name, f"must be a TensorDesc or None, not {type(desc).__name__}"
            return
        problem = tensor_problem(desc, is_output=tensor_field.is_output)
        if problem:
            yield tensor_field.name, problem
            return
        low, high = support.dims
        if not low <= desc.dimension_count <= high:
            yield (
                tensor_field.name,
                self._unsupported(
                    tensor_field.name,
                    f"dimension count {desc.dimension_count}",
                    lambda s: s.dims[0] <= desc.dimension_count <= s.dims[1],
                    f"supported: {support.describe_dims()}",
                ),
            )
        if desc.data_type not in support.types:
            yield (
                tensor_field.name,
                self._unsupported(
                    tensor_field.name,
                    f"data type {desc.data_type.name}",
                    lambda s: desc.data_type in s.types,
                    f"supported: {', '.join(t.name for t in support.types)}",
                ),
            )

    def _array_violations(
        self, tensor_field: TensorField, descs: object, row: SupportRow
    ) -> Iterator[tuple[str, str]]:
        if not isinstance(descs, tuple):
            yield tensor_field.name, f"must be a sequence of TensorDesc, not {type(descs).__name__}"
            return
        element = dataclasses.replace(tensor_field, is_array=False)
        for index, desc in enumerate(descs):
            for _, rule in self._field_violations(element, desc, row):
                yield f"{tensor_field.name}[{index}]", rule

    def _absent_rule(self, field_name: str) -> str:
        since = self._first_level(field_name, lambda s: s.optional)
        if since is None:
            return "tensor is required"
        return f"tensor is required before feature level {since.label}"

    def _unsupported(
        self, field_name: str, what: str, accepts: Callable[[TensorSupport], bool], here: str
    ) -> str:
        since = self._first_level(field_name, accepts)
        if since is None:
            return f"{what} is not supported ({here})"
        return f"{what} needs feature level {since.label}"

    @classmethod
    def _first_level(cls, field_name: str, accepts: Callable[[TensorSupport], bool]) -> FeatureLevel | None:
        for row in reversed(cls.SUPPORT):
            if accepts(row.tensors[field_name]):
                return row.level
        return None

    def _extra_violations(self, level: FeatureLevel) -> Iterable[tuple[str, str]]:
        """Rules of the page beyond tables and tensor constraints (none by default)."""
        return ()
