"""The last step of every quantizing formula: clamp to the output type, with a NaN policy."""

from functools import cache

import ml_dtypes
import numpy as np


@cache
def integer_range(dtype: np.dtype) -> tuple[int, int]:
    """The smallest and largest values of the integer ``dtype``, 4-bit types included (NumPy's
    iinfo knows none; ml_dtypes' is built anew on every call, hence the cache).

    >>> integer_range(np.dtype(np.int8))
    (-128, 127)
    """
    info = ml_dtypes.iinfo(dtype)  # type: ignore[no-untyped-call]  # ml_dtypes leaves it untyped
    return int(info.min), int(info.max)


def saturate(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``clamp(values, Min, Max)`` cast to the 8- or 4-bit ``dtype``: NaN gives 0, ±inf saturates.

    >>> saturate(np.array([-300.0, 3.0, np.nan, np.inf], np.float32), np.dtype(np.int8))
    array([-128,    3,    0,  127], dtype=int8)
    """
    low, high = integer_range(dtype)
    clamped = np.clip(values, low, high)
    return np.where(np.isnan(clamped), 0, clamped).astype(dtype)
