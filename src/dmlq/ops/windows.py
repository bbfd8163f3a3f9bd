"""What the two integer convolutions and the quantized average pooling share: their window attributes
(``DimensionCount`` and the arrays it sizes), the spatial sizes those govern, and per-channel tensors.

Tensors are ``{N, C, *spatial}`` (NCHW / NCDHW). A convolution's 3-D ``{N, C, W}`` tensor has one
spatial dimension for ``DimensionCount`` 2: it is read as ``{N, C, 1, W}`` (onnxruntime inserts the
same ``H = 1`` when it builds a 1-D convolution, ``Ops/DmlOperatorQLinearConv.cpp``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..reference.windows import output_size
from ..tensor import TensorDesc, plain_int, plain_ints
from .base import OperatorDesc, Rule

UINT_MAX = 2**32 - 1


def uint_problem(value: object, least: int) -> str | None:
    """Why ``value`` is not a DirectML UINT of at least ``least``, or None."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= UINT_MAX:
        return f"{value!r} must be an integer from {least} to 2^32 - 1"
    return None


@dataclass(frozen=True, kw_only=True)
class WindowedOperator(OperatorDesc):
    """An operator with ``dimension_count`` and arrays of that many values (plain data, checked on
    compile; sequences are kept as tuples of ints)."""

    ARRAYS: ClassVar[Mapping[str, int]]  # array attribute -> its least value
    COUNTS: ClassVar[Mapping[str, int]] = {}  # other UINT attributes -> their least value
    if TYPE_CHECKING:  # every windowed operator declares these fields itself, in its own field order
        dimension_count: int
        strides: tuple[int, ...]
        dilations: tuple[int, ...]
        start_padding: tuple[int, ...]
        end_padding: tuple[int, ...]

    def __post_init__(self) -> None:
        for name in self.ARRAYS:
            object.__setattr__(self, name, plain_ints(getattr(self, name)))
        for name in ("dimension_count", *self.COUNTS):
            object.__setattr__(self, name, plain_int(getattr(self, name)))


def _attribute_violations(desc: WindowedOperator) -> Iterator[tuple[str, str]]:
    count = desc.dimension_count
    problem = uint_problem(count, 1)
    if problem:
        yield "dimension_count", problem
        return
    for name, least in desc.COUNTS.items():
        problem = uint_problem(getattr(desc, name), least)
        if problem:
            yield name, problem
    for name, least in desc.ARRAYS.items():
        values = getattr(desc, name)
        if not isinstance(values, tuple):
            yield name, f"must be a sequence of {count} integers, not {values!r}"
        elif len(values) != count:
            yield name, f"{list(values)} holds {len(values)} values; dimension_count is {count}"
        else:
            for index, value in enumerate(values):
                problem = uint_problem(value, least)
                if problem:
                    yield f"{name}[{index}]", problem


def attribute_rule(text: str) -> Rule:
    """The rule every windowed operator states first: its attributes' own validity."""
    return Rule(text, _attribute_violations)


def spatial_sizes(desc: TensorDesc, count: int) -> tuple[int, ...] | None:
    """The spatial sizes of an ``{N, C, *spatial}`` tensor, led by 1s up to ``count`` dimensions
    (``{N, C, W}`` gives ``(1, W)`` for 2); None when it has more than ``count``.

    >>> spatial_sizes(TensorDesc(1, [2, 3, 7]), 2)
    (1, 7)
    """
    own = desc.sizes[2:]
    return None if len(own) > count else (1,) * (count - len(own)) + own


def output_spatial_sizes(desc: WindowedOperator, input_sizes: tuple[int, ...],
                         window: tuple[int, ...]) -> tuple[int, ...]:  # fmt: skip
    """Each spatial dimension's output size (:func:`dmlq.reference.windows.output_size`)."""
    return tuple(
        output_size(size, start, end, k, stride, dilation)
        for size, start, end, k, stride, dilation in zip(
            input_sizes, desc.start_padding, desc.end_padding, window, desc.strides, desc.dilations
        )
    )


def window_problem(
    desc: WindowedOperator, input_sizes: tuple[int, ...], window: tuple[int, ...]
) -> str | None:
    """Why the dilated window does not fit the padded input along some dimension, or None."""
    for axis, size in enumerate(output_spatial_sizes(desc, input_sizes, window)):
        if size < 1:
            extent = 1 + (window[axis] - 1) * desc.dilations[axis]
            padded = input_sizes[axis] + desc.start_padding[axis] + desc.end_padding[axis]
            return (f"the window's extent {extent} along spatial dimension {axis} exceeds the padded "
                    f"input's {padded}")  # fmt: skip
    return None


def per_channel_problem(desc: TensorDesc, channels: int) -> str | None:
    """Why ``desc`` is neither per-tensor (every size 1) nor per-channel, or None.

    Per-channel holds ``channels`` values along one dimension, the others of size 1: dimension 1
    (C of ``{1, C, 1, 1}``) or, with fewer than 4 dimensions, dimension 0 (the pages' patterns
    such as ``{[1], C, [1], [1]}`` let the leading 1 go; onnxruntime's 1-D per-channel vectors).

    >>> per_channel_problem(TensorDesc(1, [1, 4, 1, 1]), 4), per_channel_problem(TensorDesc(1, [4]), 4)
    (None, None)
    """
    sizes = desc.sizes
    if all(size == 1 for size in sizes):
        return None
    positions = (1,) if len(sizes) >= 4 else (0, 1)
    for axis in positions:
        if (
            axis < len(sizes)
            and sizes[axis] == channels
            and all(s == 1 for i, s in enumerate(sizes) if i != axis)
        ):
            return None
    shape = "{1, C, 1, 1}" if len(sizes) >= 4 else "C along dimension 0 or 1"
    return f"sizes {list(sizes)} must be per-tensor (every size 1) or per-channel ({shape}, C = {channels})"


def one_element_problem(desc: TensorDesc) -> str | None:
    """Why ``desc`` is not per-tensor (every size 1), or None."""
    if desc.element_count != 1:
        return f"sizes {list(desc.sizes)} must be per-tensor (every size 1)"
    return None
