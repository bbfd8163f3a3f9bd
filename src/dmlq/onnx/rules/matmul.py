"""What the provider's integer matrix multiplies place alike (``Operators/DmlOperatorQLinearMatMul.cpp``,
``DmlOperatorMatMulInteger.cpp``, ``DmlOperatorMatMulIntegerToFloat.cpp``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06): A's scale and zero point "moved to the H channel"
(placement H, left-aligned, A's dimension count), so ``[M]`` is per-row ``{1, 1, M, 1}``."""

from __future__ import annotations

from ...tensor import TensorDesc
from ..descs import LEFT_ALIGNED, H, aligned, data_type
from ..steps import Spec

__all__ = ["per_row"]


def per_row(spec: Spec | None, count: int) -> TensorDesc | None:
    if spec is None:
        return None
    return TensorDesc(data_type(spec.dtype), aligned(spec.shape, H, LEFT_ALIGNED, count))
