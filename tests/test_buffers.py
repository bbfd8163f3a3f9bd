"""Binding.bind's one step for an ndarray buffer (``_core.bind_view``) makes the view the Python path
makes of the same memory, and leaves every buffer it does not take to that path, which refuses it
with its own message (test_device_execute.py) or reads it as raw bytes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from dmlq import DataType, DmlError, TensorDesc, _core
from dmlq.buffers import Binding

F32 = DataType.FLOAT32


def binding(desc: TensorDesc, writable: bool = False) -> Binding:
    return Binding.of(desc, "x", writable=writable)


def one_step(b: Binding, buffer: object) -> tuple[np.ndarray, int] | None:
    return _core.bind_view(buffer, b.dtype, b.shape, b.strides, b.addressed_bytes, b.alignment, b.writable)


def read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


DESCS = {
    "[2, 3]": TensorDesc(F32, [2, 3]),
    "[2, 3] broadcast rows": TensorDesc(F32, [2, 3], strides=[0, 1]),
    "[2, 3] strided, 64-byte aligned": TensorDesc(
        F32, [2, 3], strides=[4, 1], guaranteed_base_offset_alignment=64
    ),
}
BUFFERS = {
    "float32, C order": lambda: np.arange(8, dtype=np.float32),
    "float32, Fortran order": lambda: np.asfortranarray(np.arange(16, dtype=np.float32).reshape(4, 4)),
    "raw uint8 bytes": lambda: np.arange(64, dtype=np.uint8),
    "a contiguous slice (offset)": lambda: np.zeros(48, np.float32)[16:40],
    "read-only": lambda: read_only(np.arange(8, dtype=np.float32)),
    "2-D, larger than needed": lambda: np.ones((5, 7), np.float32),
}


@pytest.mark.parametrize("writable", [False, True], ids=["input", "output"])
@pytest.mark.parametrize("make", BUFFERS.values(), ids=list(BUFFERS))
@pytest.mark.parametrize("desc", DESCS.values(), ids=list(DESCS))
def test_the_one_step_view_is_the_python_paths_view_of_the_same_memory(desc, make, writable) -> None:
    b, buffer = binding(desc, writable), make()
    memory = memoryview(buffer.ravel(order="K").view(np.uint8))  # its bytes in memory order, as raw bytes
    try:  # the Python path, which a memoryview takes
        python_view, python_start = b.bind(memory)
    except DmlError:
        assert one_step(b, buffer) is None
        return
    view, start = one_step(b, buffer)
    assert start == python_start == buffer.__array_interface__["data"][0]
    assert (view.shape, view.strides, view.dtype) == (
        python_view.shape,
        python_view.strides,
        python_view.dtype,
    )
    assert view.__array_interface__["data"][0] == start and np.shares_memory(view, buffer)
    assert view.flags.writeable == buffer.flags.writeable == python_view.flags.writeable
    np.testing.assert_array_equal(view, python_view)
    assert b.bind(buffer)[1] == start  # and Binding.bind takes the one step's result


def test_the_view_keeps_the_buffer_alive() -> None:
    b = binding(DESCS["[2, 3]"])
    view, _ = one_step(b, np.arange(6, dtype=np.float32))  # the only reference to the buffer is the view's
    np.testing.assert_array_equal(view, np.arange(6, dtype=np.float32).reshape(2, 3))


def declined() -> dict[str, tuple[Binding, object]]:
    desc, aligned = DESCS["[2, 3]"], DESCS["[2, 3] strided, 64-byte aligned"]
    x = np.arange(12, dtype=np.float32)
    return {
        "not contiguous": (binding(desc), x[::2]),
        "float64 for a float32 tensor": (binding(desc), x.astype(np.float64)),
        "byte-swapped float32": (binding(desc), x.astype(">f4")),
        "int8 (not raw uint8) bytes": (binding(desc), x.view(np.int8)),
        "object array": (binding(desc), np.array([object()] * 6)),
        "read-only output": (binding(desc, writable=True), read_only(x.copy())),
        "too small": (binding(desc), x[:5]),
        "misaligned raw bytes": (binding(desc), x.view(np.uint8)[1:41]),
        "below the guaranteed alignment": (binding(aligned), np.zeros(40, np.float32)[1:]),
        "bytes": (binding(desc), x.tobytes()),
        "a list": (binding(desc), x.tolist()),
    }


@pytest.mark.parametrize("case", declined())
def test_other_buffers_are_left_to_the_python_path(case: str) -> None:
    b, buffer = declined()[case]
    assert one_step(b, buffer) is None
    if isinstance(buffer, bytes):
        assert b.bind(buffer)[0].shape == (2, 3)  # raw bytes: read through the Python path
    else:
        with pytest.raises(DmlError):
            b.bind(buffer)


@st.composite
def tensors_and_buffers(draw) -> tuple[Binding, np.ndarray]:
    """A tensor (1-4 dimensions, packed or with strides, broadcast ones among them, an alignment or
    none) and an ndarray buffer of its dtype or of raw bytes, in either order, starting anywhere in
    a larger allocation: large enough or not, aligned or not."""
    data_type = draw(st.sampled_from([DataType.FLOAT32, DataType.FLOAT16, DataType.UINT8, DataType.INT32]))
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    strides = draw(st.none() | st.lists(st.integers(0, 6), min_size=len(sizes), max_size=len(sizes)))
    alignment = draw(st.sampled_from([0, 0, 4, 16, 64]))
    desc = TensorDesc(data_type, sizes, strides=strides, guaranteed_base_offset_alignment=alignment)
    b = binding(desc, writable=draw(st.booleans()))
    dtype = draw(st.sampled_from([b.dtype, b.dtype, np.dtype(np.uint8), np.dtype(np.float64)]))
    needed = -(-desc.addressed_bytes // dtype.itemsize)  # elements of dtype that hold the tensor
    count = draw(st.integers(needed, needed + 3) | st.integers(0, needed))  # mostly large enough
    offset = draw(st.sampled_from([0, 0, 0, 64, dtype.itemsize, 1, 2, 3]))
    memory = np.zeros(count * dtype.itemsize + offset + 64, np.uint8)
    buffer = memory[offset : offset + count * dtype.itemsize].view(dtype)
    if draw(st.booleans()) and count % 2 == 0 and count:
        buffer = np.asfortranarray(buffer.reshape(2, count // 2))
    if draw(st.booleans()):
        buffer.flags.writeable = False
    return b, buffer


@settings(max_examples=300, deadline=None)
@given(tensors_and_buffers())
def test_the_one_step_agrees_with_the_python_path_on_random_buffers(case) -> None:
    b, buffer = case
    memory = memoryview(buffer.ravel(order="K").view(np.uint8))
    try:
        python_view, python_start = b.bind(memory)
        python_dtype_ok = buffer.dtype in (b.dtype, np.dtype(np.uint8))
    except DmlError:
        python_view, python_dtype_ok = None, False
    bound = one_step(b, buffer)
    event("served" if bound is not None else "left to the Python path")
    if python_view is None or not python_dtype_ok:
        assert bound is None
        return
    assert bound is not None
    view, start = bound
    assert start == python_start
    for attribute in ("shape", "strides", "dtype"):
        assert getattr(view, attribute) == getattr(python_view, attribute)
    assert view.flags.writeable == python_view.flags.writeable
