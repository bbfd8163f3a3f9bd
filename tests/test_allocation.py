"""Large outputs come from dmlq's output cache (``_core.empty``): ordinary, independent arrays."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import dmlq
from dmlq import _core

LARGE = 1 << 19  # float32 elements: a 2 MiB output, above the cache's 1 MiB threshold
CACHE_LIMIT = 256 << 20


def _dequantized(q: np.ndarray, scale: float) -> np.ndarray:
    return (q.astype(np.float64) * scale).astype(np.float32)


def test_large_outputs_are_ordinary_owned_writable_arrays() -> None:
    out = dmlq.dequantize_linear(np.uint8([1, 2]).repeat(LARGE // 2), 0.5)
    assert type(out) is np.ndarray and out.flags.owndata and out.flags.writeable
    out[:] = 7
    assert (out == 7).all()


def test_live_outputs_never_share_memory() -> None:
    q = np.arange(LARGE, dtype=np.int32)
    first, second = dmlq.dequantize_linear(q, 1.0), dmlq.dequantize_linear(q, 2.0)
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, _dequantized(q, 1.0))
    np.testing.assert_array_equal(second, _dequantized(q, 2.0))


def test_a_freed_output_is_reused_and_rewritten_exactly() -> None:
    rng = np.random.default_rng(1)
    size = LARGE + 4096  # a size no other test uses
    first = dmlq.add(np.ones(size, np.float32), np.ones(size, np.float32))
    address = first.ctypes.data
    del first
    a, b = rng.standard_normal(size, dtype=np.float32), rng.standard_normal(size, dtype=np.float32)
    again = dmlq.add(a, b, fused_activation="relu")
    assert again.ctypes.data == address
    np.testing.assert_array_equal(again, np.maximum(a + b, 0))


def test_user_allocations_do_not_take_cached_blocks() -> None:
    size = LARGE + 8192
    del_me = dmlq.dequantize_linear(np.zeros(size, np.uint8), 1.0)
    del del_me
    cached = _core.cached_bytes()
    mine = np.empty(size, np.float32)
    assert _core.cached_bytes() == cached
    mine[:] = 1  # an ordinary array of the default allocator, still usable


def test_small_outputs_bypass_the_cache() -> None:
    cached = _core.cached_bytes()
    for _ in range(3):
        dmlq.quantize_linear(np.float32([1.0, 2.0]), 0.5)
    assert _core.cached_bytes() == cached


def test_the_cache_stays_bounded() -> None:
    blocks = [_core.empty((96 << 20,), np.uint8) for _ in range(3)]  # untouched: no pages faulted
    del blocks
    assert _core.cached_bytes() <= CACHE_LIMIT


def test_cached_outputs_can_be_resized_and_copied() -> None:
    out = dmlq.dequantize_linear(np.full(LARGE, 3, np.uint8), 1.0)
    copy = out.copy()
    out.resize(LARGE * 2, refcheck=False)  # the handler's realloc
    np.testing.assert_array_equal(out[:LARGE], copy)
    out.resize(16, refcheck=False)
    assert (out == 3).all()


def test_outputs_are_correct_across_threads() -> None:
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            rng = np.random.default_rng(seed)
            for _ in range(10):
                q = rng.integers(0, 255, LARGE, dtype=np.uint8)
                np.testing.assert_array_equal(dmlq.dequantize_linear(q, 0.25), _dequantized(q, 0.25))
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert _core.cached_bytes() <= CACHE_LIMIT


@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (LARGE,)])
def test_empty_matches_numpy_shapes_and_dtypes(shape: tuple[int, ...]) -> None:
    for dtype in (np.uint8, np.float16, np.dtype(">f4")):
        out = _core.empty(shape, dtype)
        assert out.shape == shape and out.dtype == np.dtype(dtype)


def test_empty_rejects_what_numpy_rejects() -> None:
    with pytest.raises(ValueError, match="negative dimensions"):
        _core.empty((-1,), np.float32)
    with pytest.raises(TypeError):
        _core.empty((2,), "not a dtype")
