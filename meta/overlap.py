"""Eager's memory-overlap errors, which fake kernels do not raise.

Eager refuses some writes by the geometry of the tensors alone (ATen's
``MemoryOverlap.cpp``): into a tensor with several indices per memory element
(an expanded one), or into memory that a value the op reads only partly shares
(or, for the index ops, shares at all). Fake and meta kernels skip these
checks, so a trace on fakes would run a program eager rejects; the metadata
collection and the traces apply them here, forward and backward.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.fx.experimental.symbolic_shapes import guard_or_false
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from meta.alias import written_positions
from meta.storage import expanded_dims, intersect, storage_extent, storage_key

__all__ = [
    "INTERNAL_OVERLAP",
    "INTERNAL_OVERLAP_ALLOWED",
    "OVERLAP",
    "EagerOverlapChecks",
    "dispatched_argument",
    "eager_overlap_error",
    "eager_refuses_overlap",
    "element_offsets",
    "is_overlap_error",
    "order_dependent_read",
    "same_data",
]

OVERLAP = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory "
    "location. Please clone() the tensor before performing the operation."
)
INTERNAL_OVERLAP = (
    "unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
    "Please clone() the tensor before performing the operation."
)

# Writes eager allows into a tensor with several indices per memory element (an expanded one).
INTERNAL_OVERLAP_ALLOWED = frozenset(
    {"fill_", "zero_", "index_put_", "_index_put_impl_", "masked_fill_", "index_fill_"}
)
# Ops refusing any shared memory (full or partial) between what they write and a tensor they read
# (``assert_no_overlap``).
_NO_OVERLAP = frozenset(
    {
        "index_put_",
        "_index_put_impl_",
        "index_add_",
        "index_copy_",
        "index_reduce_",
        "scatter_",
        "scatter_add_",
        "scatter_reduce_",
        "put_",
    }
)


class _Overlap(enum.Enum):
    NO = enum.auto()
    FULL = enum.auto()
    PARTIAL = enum.auto()
    TOO_HARD = enum.auto()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> _Overlap:
    """ATen's ``get_overlap_status``: only dense, non-overlapping tensors are judged."""
    if a is b:
        return _Overlap.FULL
    if guard_or_false(a.numel() == 0) or guard_or_false(b.numel() == 0):  # (a data-dependent size: maybe not)
        return _Overlap.NO
    if not is_non_overlapping_and_dense_or_false(a) or not is_non_overlapping_and_dense_or_false(b):
        return _Overlap.TOO_HARD
    if storage_key(a) != storage_key(b):
        return _Overlap.NO
    a_begin, b_begin = a.storage_offset() * a.element_size(), b.storage_offset() * b.element_size()
    a_end, b_end = a_begin + a.numel() * a.element_size(), b_begin + b.numel() * b.element_size()
    if (a_begin, a_end) == (b_begin, b_end):
        return _Overlap.FULL if a.stride() == b.stride() else _Overlap.PARTIAL
    return _Overlap.PARTIAL if a_begin < b_end and b_begin < a_end else _Overlap.NO


def eager_refuses_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """ATen's ``assert_no_overlap``: refused where ``get_overlap_status`` finds a full or partial overlap
    (never between tensors it cannot judge: either one strided with gaps, or overlapping itself)."""
    return _overlap(a, b) in (_Overlap.FULL, _Overlap.PARTIAL)


@functools.cache  # per op: asked for every op dispatched under the checks
def _is_tensor_iterator_op(func: Any) -> bool:
    """Whether ``func``'s kernel is a TensorIterator (pointwise ops and ``copy_``): it refuses a read
    that partly overlaps what it writes."""
    if torch.Tag.pointwise in func.tags or func._schema.name == "aten::copy_":
        return True
    # An in-place or out= overload is tagged less often than the functional one (where.self_out).
    packet = getattr(torch.ops.aten, func._schema.name.split("::")[-1].removesuffix("_"), None)
    return packet is not None and any(torch.Tag.pointwise in getattr(packet, o).tags for o in packet.overloads())


def same_data(a: torch.Tensor, b: Any) -> bool:
    """``copy_``'s early exit: the source is the destination's very memory, as it sees it."""
    return (
        isinstance(b, torch.Tensor)
        and b.layout == torch.strided
        and storage_key(a) == storage_key(b)
        and (a.shape, a.stride(), a.storage_offset(), a.dtype) == (b.shape, b.stride(), b.storage_offset(), b.dtype)
        and (a.is_neg(), a.is_conj()) == (b.is_neg(), b.is_conj())
    )


def _tensors(values: Any) -> Iterator[torch.Tensor]:
    for value in values:
        if isinstance(value, (list, tuple)):
            yield from _tensors(value)
        elif isinstance(value, torch.Tensor) and value.layout == torch.strided:
            yield value


def dispatched_argument(func: Any, args: Any, kwargs: dict[str, Any], position: int) -> Any:
    """The value a dispatched call of ``func`` passes for schema argument ``position``."""
    argument = func._schema.arguments[position]
    return kwargs.get(argument.name) if argument.kwarg_only or position >= len(args) else args[position]


def _written_and_read(func: Any, args: Any, kwargs: dict[str, Any]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The strided tensors a call writes, and those it reads; none for ``copy_``'s early exit (the source
    is the destination's very memory) and for metadata changes."""
    if torch.Tag.inplace_view in func.tags:
        return [], []
    positions = written_positions(func, args)
    if not positions:
        return [], []  # most ops write nothing: no need to gather what they read
    targets = list(_tensors(dispatched_argument(func, args, kwargs, p) for p in positions))
    if func._schema.name == "aten::copy_" and targets and same_data(targets[0], args[1] if len(args) > 1 else None):
        return [], []
    others = range(len(func._schema.arguments))
    return targets, list(_tensors(dispatched_argument(func, args, kwargs, p) for p in others if p not in positions))


def eager_overlap_error(func: Any, args: Any, kwargs: dict[str, Any]) -> str | None:
    """The message of the overlap error eager raises for this call, or ``None`` if it raises none."""
    name = func._schema.name.split("::")[-1]
    targets, reads = _written_and_read(func, args, kwargs)
    check_partial = _is_tensor_iterator_op(func)
    for target in targets:
        if name not in INTERNAL_OVERLAP_ALLOWED and expanded_dims(target.shape, target.stride()):
            return INTERNAL_OVERLAP
        for read in reads:
            status = _overlap(target, read)
            # A TensorIterator allows a read of exactly the memory it writes; the index ops allow none.
            if status is _Overlap.PARTIAL and (check_partial or name in _NO_OVERLAP):
                return OVERLAP
            if status is _Overlap.FULL and name in _NO_OVERLAP:
                return OVERLAP
    return None


def element_offsets(tensor: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The storage offset of each element of ``tensor`` broadcast to ``shape``, flat (a real tensor; call
    it with fake tensors unset)."""
    # Symbolic sizes are specialized (``int`` guards them): which elements meet depends on the sizes.
    size, stride = [int(n) for n in tensor.shape], [int(n) for n in tensor.stride()]
    extent = int(storage_extent(tensor)[1])
    positions = torch.arange(extent).as_strided(size, stride, int(tensor.storage_offset()))
    return positions.expand([int(n) for n in shape]).reshape(-1)


def order_dependent_read(func: Any, args: Any, kwargs: dict[str, Any]) -> torch.Tensor | None:
    """A tensor that a pointwise op or ``copy_`` reads at one index from memory it writes at another,
    where eager's checks let it through (neither tensor dense): eager's result then depends on the order
    its kernel visits the elements in, which a compiled graph does not reproduce."""
    if not _is_tensor_iterator_op(func):
        return None
    targets, reads = _written_and_read(func, args, kwargs)
    for target in targets:
        for read in reads:
            if _overlap(target, read) is not _Overlap.TOO_HARD or storage_key(target) != storage_key(read):
                continue
            if not intersect(storage_extent(target), storage_extent(read)):
                continue
            if target.element_size() != read.element_size():
                return read  # elements of different widths on one memory: not worth telling apart
            with _disable_current_modes():  # a small real computation, neither faked nor traced
                try:
                    written, read_at = element_offsets(target, target.shape), element_offsets(read, target.shape)
                except RuntimeError:
                    continue  # not broadcastable: the op itself raises
                if bool((torch.isin(read_at, written) & (read_at != written)).any()):
                    return read
    return None


def is_overlap_error(error: BaseException) -> bool:
    """Whether ``error`` is one of eager's overlap errors (raised by eager or by these checks)."""
    return isinstance(error, RuntimeError) and str(error) in (OVERLAP, INTERNAL_OVERLAP)


class EagerOverlapChecks(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Raise eager's overlap errors for the ops run under it (a backward run on fakes, say)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        message = eager_overlap_error(func, args, kwargs)
        if message is not None:
            raise RuntimeError(message)
        return func(*args, **kwargs)
