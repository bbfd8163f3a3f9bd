"""What the provider's integer matrix multiplies lay out alike (``Operators/DmlOperatorQLinearMatMul.cpp``,
``DmlOperatorMatMulInteger.cpp``, ``DmlOperatorMatMulIntegerToFloat.cpp``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06): A and B as ``MatMulShapeMapping`` gives them; A's (and
the output's) scale and zero point "moved to the H channel" (placement H, left-aligned, A's
dimension count), so ``[M]`` is per-row ``{1, 1, M, 1}``; B's right-aligned to 4 dimensions ("already
aligned in the W dimension"), so ``[N]`` is per-column ``{1, 1, 1, N}``."""

from __future__ import annotations

from collections.abc import Mapping

from ...tensor import TensorDesc
from ..descs import LEFT_ALIGNED, H, MatMulShapes, aligned, data_type, own_desc
from ..steps import Spec

__all__ = ["matmul_fields", "per_row"]


def matmul_fields(
    shapes: MatMulShapes, rows: Mapping[str, Spec | None], columns: Mapping[str, Spec | None]
) -> dict[str, TensorDesc | None]:
    """The fields ``a`` and ``b``, the ``rows`` fields per row and the ``columns`` ones per column."""
    count = len(shapes.sizes)
    return {
        "a": shapes.a,
        "b": shapes.b,
        **{name: per_row(spec, count) for name, spec in rows.items()},
        **{name: None if spec is None else own_desc(spec) for name, spec in columns.items()},
    }


def per_row(spec: Spec | None, count: int) -> TensorDesc | None:
    if spec is None:
        return None
    return TensorDesc(data_type(spec.dtype), aligned(spec.shape, H, LEFT_ALIGNED, count))
