"""Eager's rules for a write into memory that the op also reads, or that it writes twice (TensorIterator order).

The out= and order-dependence half of the overlap rules; ``meta.overlap`` holds eager's error checks
used forward and backward (two helpers wrote them side by side: to be folded into one).

Fake kernels check none of them. ``check_writes_as_eager`` raises what eager
raises (a write into an expanded tensor, TensorIterator's partial-overlap check,
``index_put_`` reading what it writes) and refuses a write target overlapping
itself; it runs before an ``out=`` argument is resized, as eager's checks do.
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
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.utils._python_dispatch import _disable_current_modes

from meta.alias import written_positions
from meta.errors import UnsupportedMutationError
from meta.overlap import same_data
from meta.storage import expanded_dims, intersect, overlaps, storage_key

__all__ = ["check_writes_as_eager", "dispatched_argument", "refuse_order_dependent_writes"]

# Writes eager allows into a tensor with several indices per memory element (an expanded one); every
# other write there raises in eager, where fake tensors do not check.
_OVERLAPPING_WRITES_ALLOWED = frozenset(
    {"fill_", "zero_", "index_put_", "_index_put_impl_", "masked_fill_", "index_fill_"}
)
# Writes eager refuses when a value read shares memory with the tensor written.
_NO_OVERLAP_WITH_VALUES = frozenset({"index_put_", "_index_put_impl_"})
_OVERLAP = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory "
    "location. Please clone() the tensor before performing the operation."
)
_INTERNAL_OVERLAP = (
    "unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
    "Please clone() the tensor before performing the operation."
)


def check_writes_as_eager(func: Any, args: Any, kwargs: dict[str, Any]) -> None:
    """Raise what eager raises for a write into memory the op also reads, or writes twice, which fake
    kernels allow; refuse one overlapping itself. Call it before the op resizes its out= arguments."""
    if torch.Tag.inplace_view in func.tags:
        return
    name = func._schema.name.split("::")[-1]
    if name == "copy_" and len(args) > 1 and same_data(args[0], args[1]):
        return  # eager's copy_ of a tensor onto its very memory returns before any check
    for position in written_positions(func, args):
        value = dispatched_argument(func, args, kwargs, position)
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            continue
        if name not in _OVERLAPPING_WRITES_ALLOWED and expanded_dims(value.shape, value.stride()):
            raise RuntimeError(_INTERNAL_OVERLAP)
        if name not in _OVERLAPPING_WRITES_ALLOWED and _may_overlap_itself(value):
            raise UnsupportedMutationError(
                f"{func} writes into a tensor whose elements share memory with each other (an unfold or "
                "as_strided view, say): eager's result depends on the order its kernel writes them in, "
                "which a compiled graph does not reproduce. Write into a tensor that does not overlap itself."
            )
        if name in _NO_OVERLAP_WITH_VALUES:
            for other in args[position + 1 :]:
                if isinstance(other, torch.Tensor) and other.layout == torch.strided and overlaps(value, other):
                    raise RuntimeError(_OVERLAP)
        if _elementwise(func):
            # TensorIterator's check, before it resizes an out= argument.
            if any(_partial_overlap(value, other) for other in _read_tensors(func, args, kwargs)):
                raise RuntimeError(_OVERLAP)


def refuse_order_dependent_writes(func: Any, args: Any, kwargs: dict[str, Any]) -> None:
    """Refuse a write into elements the op also reads through another geometry (``x.add_(x.t())`` on a
    strided ``x``, ``out=`` resized over its input): eager's result depends on the order its kernel
    visits the elements in, which a compiled graph does not reproduce."""
    name = func._schema.name.split("::")[-1]
    if torch.Tag.inplace_view in func.tags or name in _OVERLAPPING_WRITES_ALLOWED:
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
    return tuple(tensor.shape), tuple(tensor.stride()), int(tensor.storage_offset())


def _may_overlap_itself(tensor: torch.Tensor) -> bool:
    """Whether two indices of ``tensor`` may reach one memory element (stride 0 aside): each dimension,
    by increasing stride, must step past everything the smaller ones span."""
    if tensor.layout != torch.strided or tensor.numel() <= 1:
        return False
    spanned = 0
    dims = sorted(((abs(st), n) for n, st in zip(tensor.shape, tensor.stride(), strict=True) if n > 1))
    for stride, size in dims:
        if stride == 0:
            return False  # expanded: eager's own check decides
        if stride <= spanned:
            return True
        spanned += (size - 1) * stride
    return False


def _read_tensors(func: Any, args: Any, kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The strided tensors ``func`` takes and does not write."""
    written = set(written_positions(func, args))
    values = [
        dispatched_argument(func, args, kwargs, p) for p in range(len(func._schema.arguments)) if p not in written
    ]
    flat = [t for value in values for t in (value if isinstance(value, (list, tuple)) else (value,))]
    return [t for t in flat if isinstance(t, torch.Tensor) and t.layout == torch.strided]


def _partial_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """eager's ``get_overlap_status(a, b) == PARTIAL``: both dense, their memory ranges meet, not as the
    same range with the same strides (tensors that are not dense are not checked)."""
    if a is b or storage_key(a) != storage_key(b) or a.numel() == 0 or b.numel() == 0:
        return False
    if not (is_non_overlapping_and_dense_or_false(a) and is_non_overlapping_and_dense_or_false(b)):
        return False
    a_range = (int(a.storage_offset()) * a.element_size(), (int(a.storage_offset()) + a.numel()) * a.element_size())
    b_range = (int(b.storage_offset()) * b.element_size(), (int(b.storage_offset()) + b.numel()) * b.element_size())
    if a_range == b_range:
        return a.stride() != b.stride()
    return intersect(a_range, b_range)


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
        written_at = _element_offsets(written)
        if not elementwise or not _broadcasts_to(read.shape, written.shape):
            return bool(torch.isin(written_at, _element_offsets(read)).any())
        read_at = _element_offsets(read.expand(written.shape))
        ordered, writer = written_at.sort()
        slot = torch.searchsorted(ordered, read_at).clamp(max=len(ordered) - 1)
        found = ordered[slot] == read_at
        return bool((found & (writer[slot] != torch.arange(len(read_at)))).any())


def _broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    return len(shape) <= len(target) and all(
        n in (1, m) for n, m in zip(reversed(shape), reversed(target), strict=False)
    )


def _element_offsets(tensor: torch.Tensor) -> torch.Tensor:
    offsets = torch.tensor([int(tensor.storage_offset())])
    for size, stride in zip(tensor.shape, tensor.stride(), strict=True):
        offsets = (offsets.unsqueeze(-1) + torch.arange(size) * stride).flatten()
    return offsets


def dispatched_argument(func: Any, args: Any, kwargs: dict[str, Any], position: int) -> Any:
    """The value a dispatched call of ``func`` passes for schema argument ``position``."""
    argument = func._schema.arguments[position]
    return kwargs.get(argument.name) if argument.kwarg_only or position >= len(args) else args[position]
