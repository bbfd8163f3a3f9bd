"""The benchmark cases of issue "Speed", each with its contenders from every library at hand."""

from __future__ import annotations

from types import ModuleType

import numpy as np

from . import data, dmlq_routes, numpy_routes
from .data import Sizes
from .timing import Case, Contender

ELEMENTWISE = ("quantize", "dequantize", "quantized_add", "add_relu")
# bytes read and written per element: the GB/s numerator
BYTES_PER_ELEMENT = {"quantize": 4 + 1, "dequantize": 1 + 4, "quantized_add": 3 * 1, "add_relu": 3 * 4}
TITLES = {
    "quantize": "quantize f32->u8",
    "dequantize": "dequantize u8->f32",
    "quantized_add": "quantized add u8",
    "add_relu": "add + relu f32",
}
PER_TENSOR = "dmlq per-tensor"
PER_ROW_SKIPS = {
    "onnxruntime": "QLinearMatMul on the CPU rejects a per-row output scale (SPEC-NOTES §12)",
    "torch": "torch.ops.quantized.linear has a per-tensor output scale only",
}


def add_peer(contenders: list[Contender], skipped: dict[str, str], name: str, module: ModuleType | None,
             route: str, problem: object) -> None:  # fmt: skip
    """Add the contenders of ``module.route(problem)``, or record why that route is missing."""
    if module is None:  # the caller records the import error
        return
    try:
        built = getattr(module, route)(problem)
    except Exception as error:  # a route missing from the installed build: recorded, not fatal
        skipped[name] = f"{type(error).__name__}: {error}"
        return
    contenders.extend(built)


def _count(n: int) -> str:
    return f"{n >> 20}M" if n >= 1 << 20 else f"{n >> 10}K" if n >= 1 << 10 else str(n)


def elementwise_cases(sizes: Sizes, rng: np.random.Generator, onnx_routes: ModuleType | None,
                      torch_routes: ModuleType | None) -> list[Case]:  # fmt: skip
    cases = []
    for op in ELEMENTWISE:
        problem = getattr(data, op)(sizes.elements, rng)
        contenders = getattr(dmlq_routes, op)(problem) + getattr(numpy_routes, op)(problem)
        skipped: dict[str, str] = {}
        add_peer(contenders, skipped, "onnxruntime", onnx_routes, op, problem)
        add_peer(contenders, skipped, "torch", torch_routes, op, problem)
        cases.append(Case(op, f"{TITLES[op]}, {_count(sizes.elements)} elements",
                          "GB/s", BYTES_PER_ELEMENT[op] * sizes.elements, contenders, skipped))  # fmt: skip
    return cases


def call_case(sizes: Sizes, rng: np.random.Generator, onnx_routes: ModuleType | None,
              torch_routes: ModuleType | None) -> Case:  # fmt: skip
    """Per-call overhead: quantize a handful of elements."""
    problem = data.quantize(sizes.call, rng)
    contenders = dmlq_routes.quantize(problem) + [numpy_routes.quantize_formula(problem)]
    skipped: dict[str, str] = {}
    add_peer(contenders, skipped, "onnxruntime", onnx_routes, "quantize", problem)
    add_peer(contenders, skipped, "torch", torch_routes, "quantize", problem)
    return Case("quantize_call", f"quantize f32->u8, {sizes.call} elements per call",
                "us/call", 0.0, contenders, skipped)  # fmt: skip


def _matmul_case(key: str, title: str, problem: data.MatMul, onnx_routes: ModuleType | None,
                 torch_routes: ModuleType | None, blas_threads: bool) -> Case:  # fmt: skip
    contenders = [dmlq_routes.matmul(problem)]
    skipped: dict[str, str] = {}
    add_peer(contenders, skipped, "onnxruntime", onnx_routes, "matmul", problem)
    add_peer(contenders, skipped, "torch", torch_routes, "matmul", problem)
    if torch_routes is not None:
        skipped["torch._int_mm"] = torch_routes.INT_MM_SKIP
    if blas_threads:
        contenders.append(numpy_routes.matmul(problem))
    else:
        skipped["numpy float64"] = "threadpoolctl is not importable: NumPy's BLAS threads cannot be set"
    return Case(key, title, "GOPS", problem.operations, contenders, skipped)


def matmul_cases(sizes: Sizes, rng: np.random.Generator, onnx_routes: ModuleType | None,
                 torch_routes: ModuleType | None, blas_threads: bool) -> list[Case]:  # fmt: skip
    n = sizes.gemm
    square, batched = (n, n), sizes.batched
    u8s8 = data.matmul(square, square, np.int8, rng)
    u8u8 = data.matmul(square, square, np.uint8, rng)
    shapes = "x".join(map(str, batched))
    cases = [
        _matmul_case("gemm_u8s8", f"int8 GEMM {n}^3 u8 x s8 -> u8", u8s8, onnx_routes, torch_routes,
                     blas_threads),
        _matmul_case("gemm_u8u8", f"int8 GEMM {n}^3 u8 x u8 -> u8", u8u8, onnx_routes, torch_routes,
                     blas_threads),
        _matmul_case("gemm_batched", f"batched GEMM [{shapes}] x [{shapes}] u8 x s8 -> u8",
                     data.matmul(batched, batched, np.int8, rng), onnx_routes, torch_routes, blas_threads),
    ]  # fmt: skip
    per_row = data.matmul(square, square, np.int8, rng, per_row_output=True)
    per_tensor = dmlq_routes.matmul(data.MatMul(**{**vars(per_row), "output_scale": u8s8.output_scale}),
                                    PER_TENSOR)  # fmt: skip
    per_tensor.result = None  # another output scale: a different result on purpose
    cases.append(
        Case(
            "gemm_per_row",
            f"int8 GEMM {n}^3 u8 x s8, per-row output scale (dmlq only)",
            "GOPS",
            per_row.operations,
            [dmlq_routes.matmul(per_row), per_tensor],
            dict(PER_ROW_SKIPS),
        )
    )
    return cases
