"""What the convolutions and the pooling share: windows sliding over padded spatial dimensions.

Tensors are ``{N, C, *spatial}``; ``strides``, ``dilations``, ``start_padding`` and ``end_padding``
hold one value per spatial dimension. A tap of the window at output position ``o`` along a
dimension reads input position ``o * stride - start + k * dilation`` (cross-correlation: no flip).
"""

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np
from numpy.typing import ArrayLike


def output_size(size: int, start: int, end: int, window: int, stride: int, dilation: int) -> int:
    """``1 + (size + start + end - extent) // stride`` with ``extent = 1 + (window - 1) * dilation``:
    the output length along one dimension (below 1 when the dilated window is wider than the padded
    input), as DirectMLX and onnxruntime compute it.

    >>> output_size(56, 1, 1, 3, 2, 1), output_size(5, 0, 0, 3, 1, 3)
    (28, -1)
    """
    extent = 1 + (window - 1) * dilation
    return 1 + (size + start + end - extent) // stride


def padded(x: np.ndarray, start_padding: Sequence[int], end_padding: Sequence[int]) -> np.ndarray:
    """``x`` with zeros before and after each spatial dimension."""
    return np.pad(x, [(0, 0), (0, 0), *zip(start_padding, end_padding)])


def window_taps(
    x: np.ndarray,
    window: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    start_padding: Sequence[int],
    end_padding: Sequence[int],
) -> Iterator[np.ndarray]:
    """For each tap of the window (row-major), the view ``{N, C, *out}`` of the zero-padded ``x``
    that tap reads at every output position.

    >>> [view.tolist() for view in window_taps(np.arange(4).reshape(1, 1, 4), [2], [2], [1], [1], [0])]
    [[[[0, 1]]], [[[0, 2]]]]
    """
    spread = padded(x, start_padding, end_padding)
    dimensions = zip(x.shape[2:], start_padding, end_padding, window, strides, dilations)
    sizes = [output_size(*dimension) for dimension in dimensions]
    for tap in np.ndindex(*window):
        view = (
            slice(k * d, k * d + s * (o - 1) + 1, s) for k, d, s, o in zip(tap, dilations, strides, sizes)
        )
        yield spread[(slice(None), slice(None), *view)]


def correlate(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int],
    dilations: Sequence[int],
    start_padding: Sequence[int],
    end_padding: Sequence[int],
    group_count: int,
) -> np.ndarray:
    """The exact integer cross-correlation, int64 ``{N, M, *out}``:

        out[n, m, o] = sum over c in m's group, k of x[n, c, o * s - start + k * d] * w[m, c, k]

    ``x`` is ``{N, C, *spatial}``, ``w`` ``{M, C / group_count, *window}``; padded positions read 0.

    >>> correlate(np.ones((1, 2, 3), np.int64), np.int64([[[1, 2]], [[3, 4]]]), [1], [1], [1], [0], 2)
    array([[[2, 3, 3],
            [4, 7, 7]]])
    """
    x, w = x.astype(np.int64), w.astype(np.int64)
    groups, channels = group_count, w.shape[1]
    grouped_w = w.reshape(groups, w.shape[0] // groups, channels, -1)  # {G, M / G, C / G, taps}
    total: np.ndarray | None = None
    taps = window_taps(x, w.shape[2:], strides, dilations, start_padding, end_padding)
    for index, view in enumerate(taps):
        grouped_x = view.reshape(view.shape[0], groups, channels, -1)  # {N, G, C / G, positions}
        term = np.matmul(grouped_w[..., index], grouped_x)  # {N, G, M / G, positions}, exact in int64
        total = term if total is None else total + term
    assert total is not None, "a window has at least one tap"
    return total.reshape(x.shape[0], w.shape[0], *view.shape[2:])


def tap_total(taps: Iterator[np.ndarray]) -> np.ndarray:
    """The elementwise sum of a window's taps (a window has at least one)."""
    total = next(taps)
    for tap in taps:
        total = total + tap
    return total


@overload
def per_channel(values: None, ndim: int) -> None: ...
@overload
def per_channel(values: ArrayLike, ndim: int) -> np.ndarray: ...
def per_channel(values: ArrayLike | None, ndim: int) -> np.ndarray | None:
    """A scalar or a vector of one value per channel, shaped to broadcast over ``{N, C, *spatial}``.

    >>> per_channel(np.float32([1, 2]), 4).shape
    (1, 2, 1, 1)
    """
    return None if values is None else np.reshape(values, (1, -1) + (1,) * (ndim - 2))


@overload
def per_filter(values: None, ndim: int) -> None: ...
@overload
def per_filter(values: ArrayLike, ndim: int) -> np.ndarray: ...
def per_filter(values: ArrayLike | None, ndim: int) -> np.ndarray | None:
    """A scalar or one value per output channel, shaped to broadcast over a filter ``{M, C, *window}``."""
    return None if values is None else np.reshape(values, (-1,) + (1,) * (ndim - 1))
