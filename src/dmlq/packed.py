"""Weights packed once: the matrix multiply's B (:class:`PackedMatrix`, made by
:func:`dmlq.pack_matrix_multiply_b`), and a convolution's filter (:class:`PackedFilter`).

Weights that stay the same across many multiplies (a linear layer's B, with its scale and zero
point) are packed into the compiled kernel's panel layout once, instead of by every call, and
kept in that form alone (no second copy of B). Results are bit-identical to the unpacked call,
and later writes to the arrays the packing was made from change nothing.

>>> import numpy as np, dmlq
>>> weights = np.int8([[3, -1], [4, 2]])
>>> packed = dmlq.pack_matrix_multiply_b(weights, 0.5, np.int8(1))
>>> weights[...] = 0  # the packing holds B's bytes itself
>>> dmlq.quantized_linear_matrix_multiply(np.uint8([[1, 2]]), 1.0, None, packed, None, None, 1.0, None)
array([[4, 0]], dtype=uint8)
"""

from __future__ import annotations

import numpy as np

from . import _core

__all__ = ["PackedB", "PackedFilter", "PackedMatrix"]


def _private(array: np.ndarray) -> np.ndarray:
    """A read-only C-ordered copy of ``array`` that no caller holds."""
    copy = np.array(array, order="C")
    copy.flags.writeable = False
    return copy


class PackedB:
    """B (2 to 4 dimensions) packed for the compiled kernels, holding no other copy of it.

    A packing serves the kernel set of one CPU level; another level (``dmlq._core.set_level``)
    packs B again for its own set, once, on first use there, from the bytes of a packing it has.
    Where K is beyond the kernels (``_core.MAX_K``), a private copy of B stands in for a packing.

    >>> b = PackedB(np.int8([[1, 2], [3, 4]]))
    >>> b.shape, b.dtype
    ((2, 2), dtype('int8'))
    >>> b.array
    array([[1, 2],
           [3, 4]], dtype=int8)
    """

    def __init__(self, b: np.ndarray) -> None:
        self.shape: tuple[int, ...] = b.shape
        self.dtype: np.dtype = b.dtype
        self._packings: dict[str, object] = {}
        self._array = None  # B itself, kept only where the kernels' K (as for an unpacked B) is passed
        if b.shape[-2] < _core.MAX_K:
            self._packings[_core.gemm_kernel_set()] = _core.pack_b(b)  # B is read now, and only now
        else:
            self._array = _private(b)
        self.last_operand: object = self.as_kernel_operand()

    def __reduce__(self) -> tuple[type, tuple[np.ndarray]]:
        """Pickled as the bytes of B alone: the packings are the kernels' memory, and the process
        that unpickles it (a Dask worker, say) may run at another CPU level, so it packs again.

        >>> import pickle
        >>> pickle.loads(pickle.dumps(PackedB(np.int8([[1, 2]])))).array
        array([[1, 2]], dtype=int8)
        """
        return PackedB, (self._bytes(),)

    @property
    def array(self) -> np.ndarray:
        """B itself (read-only): unpacked from a packing on each request, which keeps nothing."""
        b = self._bytes()
        b.flags.writeable = False
        return b

    def for_shape_rules(self) -> np.ndarray:
        """An array of B's shape and dtype for the shape rules and descriptions: B itself where the
        kernels read it as an array (K beyond ``_core.MAX_K``), else one zero byte broadcast (the
        kernels take the packing, so its bytes are not unpacked for this).

        >>> PackedB(np.uint8([[7, 8, 9]])).for_shape_rules()
        array([[0, 0, 0]], dtype=uint8)
        """
        if self._array is not None:
            return self._array
        return np.broadcast_to(np.zeros((), self.dtype), self.shape)

    def _bytes(self) -> np.ndarray:
        """B: the private copy, or a new array of what a packing was packed from."""
        return self._array if self._array is not None else _core.unpack_b(next(iter(self._packings.values())))

    def for_kernels(self) -> object:
        """The packing for the current CPU level's kernel set, made on its first use."""
        kernel_set = _core.gemm_kernel_set()
        packing = self._packings.get(kernel_set)
        if packing is None:
            packing = self._packings[kernel_set] = _core.pack_b(self._bytes())
        return packing

    def as_kernel_operand(self) -> object:
        """B as the matrix multiply's kernels take it: the current level's packing, or the private
        copy where K is beyond the kernels (``_core.MAX_K``). Kept as ``last_operand`` too, which a
        call that must be quick passes as it is: the kernels decline a packing of another level.

        >>> b = PackedB(np.int8([[1, 2]]))
        >>> b.as_kernel_operand() is b.last_operand
        True
        """
        self.last_operand = self._array if self._array is not None else self.for_kernels()
        return self.last_operand


class PackedMatrix:
    """B, its scale and its zero point, packed once by :func:`dmlq.pack_matrix_multiply_b`.

    Pass it as ``b`` to :func:`dmlq.quantized_linear_matrix_multiply` with ``b_scale`` and
    ``b_zero_point`` None. Its properties are read-only views of private copies.

    >>> import dmlq
    >>> packed = dmlq.pack_matrix_multiply_b(np.uint8([[1, 2, 3], [4, 5, 6]]), [0.5, 0.25, 1.0], np.uint8(3))
    >>> packed
    PackedMatrix(shape=(2, 3), dtype=uint8, b_scale=per-column, b_zero_point=per-tensor)
    >>> packed.b_zero_point
    array(3, dtype=uint8)
    """

    kernel_operands: tuple[object, np.ndarray, np.ndarray | None]
    """The packing's last kernel operand (``PackedB.last_operand``), the scale and the zero point: what
    a one-step C call takes for ``b``, ``b_scale`` and ``b_zero_point``. A plain attribute, as a
    property's read cost a 4 x 4 call ~115 ns of ~800 (CPython 3.11); renew_kernel_operands keeps it
    current."""

    def __init__(self, b: np.ndarray, b_scale: np.ndarray, b_zero_point: np.ndarray | None) -> None:
        self._b = PackedB(b)
        self._b_scale = _private(b_scale)
        self._b_zero_point = None if b_zero_point is None else _private(b_zero_point)
        self.renew_kernel_operands()

    def renew_kernel_operands(self) -> None:
        """Take ``packed_b``'s last kernel operand into ``kernel_operands``: after a call that may have
        packed B for another CPU level (``PackedB.as_kernel_operand``), which the one-step C call,
        holding the older packing, would decline on every call after it.

        >>> import dmlq
        >>> packed = dmlq.pack_matrix_multiply_b(np.int8([[1, 2]]), 1.0)
        >>> packed.renew_kernel_operands()
        >>> packed.kernel_operands[0] is packed.packed_b.last_operand
        True
        """
        self.kernel_operands = (self._b.last_operand, self._b_scale, self._b_zero_point)

    def __getstate__(self) -> dict[str, object]:
        """Pickled without ``kernel_operands``: its packing is the kernels' memory (``PackedB`` pickles
        as B's bytes and packs again where it is unpickled)."""
        return {name: value for name, value in self.__dict__.items() if name != "kernel_operands"}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.renew_kernel_operands()

    @property
    def shape(self) -> tuple[int, ...]:
        return self._b.shape

    @property
    def dtype(self) -> np.dtype:
        return self._b.dtype

    @property
    def b_scale(self) -> np.ndarray:
        return self._b_scale

    @property
    def b_zero_point(self) -> np.ndarray | None:
        return self._b_zero_point

    @property
    def packed_b(self) -> PackedB:
        """B's packings, as the kernels take them (and B itself, as ``packed_b.array``)."""
        return self._b

    def __repr__(self) -> str:
        def kind(value: np.ndarray | None) -> str:
            return "None" if value is None else "per-tensor" if value.size == 1 else "per-column"

        return (f"PackedMatrix(shape={self.shape}, dtype={self.dtype}, b_scale={kind(self._b_scale)}, "
                f"b_zero_point={kind(self._b_zero_point)})")  # fmt: skip


class PackedFilter:
    """A convolution's filter ``w`` (``[M, C / group_count, kernel...]``) packed once for the compiled
    kernels and its group count (``_core.pack_convolution_filter``): what a compiled
    QUANTIZED_LINEAR_CONVOLUTION or CONVOLUTION_INTEGER keeps of an OWNED_BY_DML filter, so that the
    ONNX front end's constant filters are packed once, not on every call.

    The packing holds its own copy of ``w`` (later writes to ``w`` change nothing) and serves every CPU
    level: where the level it was packed at is not the current one, the kernels read that copy. A 1-D
    convolution's filter ``[M, C / G, W]`` is kept as ``[M, C / G, 1, W]``, the 2-D form the kernels
    take 1-D convolutions in.

    >>> w = np.int8([[[1, 2, 3]], [[4, 5, 6]]])
    >>> packed = PackedFilter(w, group_count=1)
    >>> packed
    PackedFilter(shape=(2, 1, 3), dtype=int8, group_count=1)
    >>> out = np.empty((1, 2, 1, 2), np.int32)
    >>> x, window, no = np.uint8([[[[1, 1, 1, 1]]]]), ([1, 1], [1, 1], [0, 0], [0, 0]), None
    >>> _core.convolution(x, no, no, packed.for_kernels(), no, no, no, no, no, out, *window, 1, False)
    >>> out[0, :, 0]
    array([[ 6,  6],
           [15, 15]], dtype=int32)
    """

    def __init__(self, w: np.ndarray, group_count: int) -> None:
        self.shape: tuple[int, ...] = w.shape
        self.dtype: np.dtype = w.dtype
        self.group_count = group_count
        self._packing = _core.pack_convolution_filter(w[:, :, np.newaxis] if w.ndim == 3 else w, group_count)

    def for_kernels(self) -> object:
        """The packing, as ``_core.convolution`` takes it for ``w``."""
        return self._packing

    def __repr__(self) -> str:
        return f"PackedFilter(shape={self.shape}, dtype={self.dtype}, group_count={self.group_count})"
