"""Blockwise quantization tensors: each value stands for a block of the input's elements."""

import numpy as np


def expand_blocks(values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Repeat each value over its block: a dimension of size ``n`` covers ``k·n`` input elements.

    >>> expand_blocks(np.float32([[1, 2]]), (2, 4))
    array([[1., 1., 2., 2.],
           [1., 1., 2., 2.]], dtype=float32)
    """
    for axis, (size, count) in enumerate(zip(shape, values.shape)):
        values = np.repeat(values, size // count, axis=axis)
    return values
