"""The last step of every quantizing formula: clamp to the output type, with a NaN policy."""

import ml_dtypes
import numpy as np


def saturate(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``clamp(values, Min, Max)`` cast to the 8- or 4-bit ``dtype``: NaN gives 0, ±inf saturates.

    >>> saturate(np.array([-300.0, 3.0, np.nan, np.inf], np.float32), np.dtype(np.int8))
    array([-128,    3,    0,  127], dtype=int8)
    """
    info = ml_dtypes.iinfo(dtype)  # NumPy's iinfo knows no 4-bit types
    clamped = np.clip(values, info.min, info.max)
    return np.where(np.isnan(clamped), 0, clamped).astype(dtype)
