# The compiled core's functions as type checkers see them (src/dmlq/_core/py_module.c lists them, with
# what each does). Arrays are NumPy arrays unless a function takes any operand the NumPy layer does.
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

_Array = npt.NDArray[Any]

LEVELS: tuple[str, ...]
MAX_K: int

def quantize(
    x: _Array, scale: _Array, zero_point: _Array | None, out: _Array, reciprocal_division: bool
) -> None: ...
def dequantize(q: _Array, scale: _Array, zero_point: _Array | None, out: _Array) -> None: ...
def quantized_add(
    a: _Array,
    b: _Array,
    out: _Array,
    a_scale: float,
    a_zero_point: int,
    b_scale: float,
    b_zero_point: int,
    output_scale: float,
    output_zero_point: int,
    reciprocal_division: bool,
) -> None: ...
def quantized_add_route(*args: object) -> str: ...
def quantize_per_tensor(
    x: object, scale: object, zero_point: object, out: object, reciprocal_division: bool
) -> _Array | None: ...
def dequantize_per_tensor(q: object, scale: object, zero_point: object, out: object) -> _Array | None: ...
def quantized_add_per_tensor(
    a: object,
    a_scale: object,
    a_zero_point: object,
    b: object,
    b_scale: object,
    b_zero_point: object,
    output_scale: object,
    output_zero_point: object,
    out: object,
    reciprocal_division: bool,
) -> _Array | None: ...
def add(
    a: _Array, b: _Array, out: _Array, activation_type_value: int, parameters: tuple[float, float]
) -> None: ...
def add_same_shape(a: object, b: object, relu: bool, out: object) -> _Array | None: ...
def matmul(
    a: _Array,
    a_scale: _Array,
    a_zero_point: _Array | None,
    b: object,
    b_scale: _Array,
    b_zero_point: _Array | None,
    output_scale: _Array,
    output_zero_point: _Array | None,
    out: _Array,
    reciprocal_division: bool,
) -> None: ...
def matmul_per_tensor(
    a: object,
    a_scale: object,
    a_zero_point: object,
    b: object,
    b_scale: object,
    b_zero_point: object,
    output_scale: object,
    output_zero_point: object,
    out: object,
    reciprocal_division: bool,
) -> _Array | None: ...
def dequantize_int4(
    packed: _Array, scale: _Array, zero_point: _Array | None, out: _Array, is_signed: bool
) -> None: ...
def quantize_int4(
    x: _Array,
    scale: _Array,
    zero_point: _Array | None,
    packed: _Array,
    is_signed: bool,
    reciprocal_division: bool,
) -> None: ...
def bind_view(
    buffer: object,
    dtype: np.dtype[Any],
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    addressed_bytes: int,
    alignment: int,
    writable: bool,
) -> tuple[_Array, int] | None: ...
def pack_b(b: _Array) -> object: ...
def unpack_b(packed: object) -> _Array: ...
def gemm_kernel_set() -> str: ...
def set_num_threads(threads: int, /) -> None: ...
def get_num_threads() -> int: ...
def get_level() -> str: ...
def detected_level() -> str: ...
def set_level(level: str, /) -> None: ...
def empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> _Array: ...
def layout_key(desc_type: type, out: _Array, *operands: _Array | None) -> tuple[object, ...] | None: ...
def cached_bytes() -> int: ...

# The quantized family (src/dmlq/_core/py_family.c)
def matmul_integer(
    a: _Array, a_zero_point: _Array | None, b: Any, b_zero_point: _Array | None, out: _Array
) -> None: ...
def matmul_integer_to_float(
    a: _Array,
    a_scale: _Array,
    a_zero_point: _Array | None,
    b: Any,
    b_scale: _Array,
    b_zero_point: _Array | None,
    bias: _Array | None,
    out: _Array,
) -> None: ...
def convolution(
    x: _Array,
    x_scale: _Array | None,
    x_zero_point: _Array | None,
    w: Any,
    w_scale: _Array | None,
    w_zero_point: _Array | None,
    bias: _Array | None,
    y_scale: _Array | None,
    y_zero_point: _Array | None,
    out: _Array,
    strides: Sequence[int],
    dilations: Sequence[int],
    start_padding: Sequence[int],
    end_padding: Sequence[int],
    group_count: int,
    reciprocal_division: bool,
) -> None: ...
def pack_convolution_filter(w: _Array, group_count: int) -> Any: ...
def average_pool(
    x: _Array,
    x_scale: _Array,
    x_zero_point: _Array | None,
    y_scale: _Array,
    y_zero_point: _Array | None,
    out: _Array,
    window: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    start_padding: Sequence[int],
    end_padding: Sequence[int],
    include_padding: bool,
    reciprocal_division: bool,
) -> None: ...
def dynamic_quantization(
    x: _Array, is_signed: bool, out: _Array | None = ..., reciprocal_division: bool = ...
) -> tuple[float, int, bool]: ...
def value_range(x: _Array) -> tuple[float, float]: ...

# The float GEMM (src/dmlq/_core/py_sgemm.c)
def gemm(
    a: _Array,
    b: _Array,
    c: _Array | None,
    out: _Array,
    trans_a: bool,
    trans_b: bool,
    alpha: float,
    beta: float,
    activation_type_value: int,
    parameters: tuple[float, float],
) -> None: ...
