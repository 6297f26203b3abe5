"""Writes whose result depends on the order a kernel visits elements: refused, as no graph reproduces it.

Eager's own overlap errors (expanded targets, TensorIterator's partial overlap, the
index ops) are ``meta.overlap``'s. ``refuse_self_overlapping_writes`` refuses a write
target overlapping itself (and keeps a stricter ``index_put_`` values check); it runs
before an ``out=`` argument is resized, as eager's checks do.
``refuse_order_dependent_writes`` runs on the geometry the op writes: it refuses
a write whose elements the op also reads at another index (``x.add_(x.t())`` on
a strided ``x``, an ``out=`` resized over its input), where eager's result
depends on the order its kernel visits the elements in. Refusals raise
``UnsupportedMutationError`` before any caller tensor is touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import guard_or_false
from torch.utils._python_dispatch import _disable_current_modes

from meta.alias import written_positions
from meta.errors import UnsupportedMutationError
from meta.overlap import (
    INTERNAL_OVERLAP_ALLOWED,
    OVERLAP,
    dispatched_argument,
    eager_refuses_overlap,
    element_offsets,
    same_data,
)
from meta.storage import expanded_dims, offset_of, overlaps, overlaps_itself

__all__ = ["refuse_order_dependent_writes", "refuse_self_overlapping_writes"]

# Writes eager refuses when a value read shares memory with the tensor written.
_NO_OVERLAP_WITH_VALUES = frozenset({"index_put_", "_index_put_impl_"})


def refuse_self_overlapping_writes(func: Any, args: Any, kwargs: dict[str, Any]) -> None:
    """Refuse a write into a tensor overlapping itself (an unfold, an as_strided view); raise eager's error
    for ``index_put_`` values sharing memory with what it writes. Eager's other overlap errors are
    ``meta.overlap``'s. Call it before the op resizes its out= arguments."""
    if torch.Tag.inplace_view in func.tags:
        return
    name = func._schema.name.split("::")[-1]
    if name == "copy_" and len(args) > 1 and same_data(args[0], args[1]):
        return  # eager's copy_ of a tensor onto its very memory returns before any check
    for position in written_positions(func, args):
        value = dispatched_argument(func, args, kwargs, position)
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            continue
        if name not in INTERNAL_OVERLAP_ALLOWED and _may_overlap_itself(value):
            raise UnsupportedMutationError(
                f"{func} writes into a tensor whose elements share memory with each other (an unfold or "
                "as_strided view, say): eager's result depends on the order its kernel writes them in, "
                "which a compiled graph does not reproduce. Write into a tensor that does not overlap itself."
            )
        if name in _NO_OVERLAP_WITH_VALUES:
            for other in args[position + 1 :]:
                if (
                    isinstance(other, torch.Tensor)
                    and other.layout == torch.strided
                    and eager_refuses_overlap(value, other)
                ):
                    raise RuntimeError(OVERLAP)


def refuse_order_dependent_writes(func: Any, args: Any, kwargs: dict[str, Any]) -> None:
    """Refuse a write into elements the op also reads through another geometry (``x.add_(x.t())`` on a
    strided ``x``, ``out=`` resized over its input): eager's result depends on the order its kernel
    visits the elements in, which a compiled graph does not reproduce."""
    name = func._schema.name.split("::")[-1]
    if torch.Tag.inplace_view in func.tags or name in INTERNAL_OVERLAP_ALLOWED:
        return
    for position in written_positions(func, args):
        value = dispatched_argument(func, args, kwargs, position)
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            continue
        for other in _read_tensors(func, args, kwargs):
            if _geometry(other) != _geometry(value) and _reads_after_write(value, other, _elementwise(func)):
                raise UnsupportedMutationError(
                    f"{func} writes into memory it also reads through a view of another geometry: eager's "
                    "result depends on the order its kernel visits the elements in, which a compiled graph "
                    "does not reproduce. Read from a clone() of the input instead."
                )


def _geometry(tensor: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    return tuple(tensor.shape), tuple(tensor.stride()), offset_of(tensor)


def _may_overlap_itself(tensor: torch.Tensor) -> bool:
    """Whether two indices of ``tensor`` may reach one memory element, an expanded one aside (eager's own
    check decides for it)."""
    if tensor.layout != torch.strided or guard_or_false(tensor.numel() <= 1):
        return False
    return not expanded_dims(tensor.shape, tensor.stride()) and overlaps_itself(tensor.shape, tensor.stride())


def _read_tensors(func: Any, args: Any, kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The strided tensors ``func`` takes and does not write."""
    written = set(written_positions(func, args))
    values = [
        dispatched_argument(func, args, kwargs, p) for p in range(len(func._schema.arguments)) if p not in written
    ]
    flat = [t for value in values for t in (value if isinstance(value, (list, tuple)) else (value,))]
    return [t for t in flat if isinstance(t, torch.Tensor) and t.layout == torch.strided]


def _elementwise(func: Any) -> bool:
    return torch.Tag.pointwise in func.tags or func._schema.name == "aten::copy_"


def _reads_after_write(written: torch.Tensor, read: torch.Tensor, elementwise: bool, limit: int = 1 << 16) -> bool:
    """Whether an op writing ``written`` may read an element of ``read`` another index of ``written`` wrote:
    for an elementwise op, an element read at one index and written at another; else any shared element.
    Exact up to ``limit`` elements; beyond it, whether their extents meet."""
    if written.numel() == 0 or read.numel() == 0 or not overlaps(written, read):
        return False
    if written.dtype != read.dtype or max(written.numel(), read.numel()) > limit:
        return True
    with _disable_current_modes():  # a small real computation on the geometry alone
        written_at = element_offsets(written, written.shape)
        if not elementwise or not _broadcasts_to(read.shape, written.shape):
            return bool(torch.isin(written_at, element_offsets(read, read.shape)).any())
        read_at = element_offsets(read, written.shape)
        ordered, writer = written_at.sort()
        slot = torch.searchsorted(ordered, read_at).clamp(max=len(ordered) - 1)
        found = ordered[slot] == read_at
        return bool((found & (writer[slot] != torch.arange(len(read_at)))).any())


def _broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    return len(shape) <= len(target) and all(
        n in (1, m) for n, m in zip(reversed(shape), reversed(target), strict=False)
    )
