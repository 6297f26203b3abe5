"""``t.set_(storage, offset, size, stride)`` as a ``set_()`` onto a tensor.

A graph has tensor values, never storage values. But the storage a program sets
a tensor onto is nearly always one it took from a tensor (``x.untyped_storage()``),
and then the storage form is ``t.set_(x.detach().as_strided(size, stride, offset))``:
the same memory and geometry, and no history from ``x`` (the storage form takes
none). Below autograd, where the rewrite happens, autograd has already recorded
the storage form as eager does. A storage no tensor the program saw holds (one
it made itself) stays a ``set_()`` onto a storage, which metadata collection refuses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from meta.storage import storage_extent
from meta.symbolic import span_end
from meta.versions import uncounted

__all__ = [
    "STORAGE_SET_OPS",
    "StorageOwners",
    "StorageSetsOntoTensors",
    "base_as_strided_onto",
    "history_taken_again",
    "is_recorded_as_strided",
]

_aten = torch.ops.aten
STORAGE_SET_OPS = frozenset({_aten.set_.source_Storage, _aten.set_.source_Storage_storage_offset})


class StorageOwners:
    """The tensors a program saw, by (storage, dtype): who a storage set_() onto is taken from."""

    def __init__(self, tensors: Iterable[Any] = ()) -> None:
        self._owners: dict[tuple[int, torch.dtype], torch.Tensor] = {}
        self.note(tensors)

    def note(self, values: Iterable[Any]) -> None:
        for value in tree_flatten(list(values))[0]:
            if isinstance(value, torch.Tensor) and value.layout == torch.strided:
                self._owners[(int(value.untyped_storage()._cdata), value.dtype)] = value

    def as_tensor_set(self, func: Any, args: Any, kwargs: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
        """``func(*args, **kwargs)``, a ``set_()`` onto a storage of a known tensor, as ``set_.source_Tensor``;
        anything else unchanged."""
        if func not in STORAGE_SET_OPS:
            return func, args, kwargs
        target, storage = args[0], args[1]
        owner = self._owners.get((int(storage._cdata), target.dtype))
        if owner is None:
            return func, args, kwargs
        bound = dict(zip(("storage_offset", "size", "stride"), args[2:], strict=False)) | kwargs
        if func is _aten.set_.source_Storage:  # all of it, in one dimension
            bound = {"storage_offset": 0, "size": [int(storage.nbytes()) // target.element_size()]}
        size = list(bound["size"])
        stride = bound.get("stride") or list(torch.empty(size, device="meta").stride())
        source = _aten.as_strided.default(_aten.detach.default(owner), size, stride, int(bound["storage_offset"]))
        return _aten.set_.source_Tensor, (target, source), {}


class StorageSetsOntoTensors(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Traces each ``set_()`` onto a known tensor's storage as one onto the tensor (see ``StorageOwners``)."""

    def __init__(self, inputs: Iterable[torch.Tensor]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.owners = StorageOwners(inputs)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        func, args, kwargs = self.owners.as_tensor_set(func, args, kwargs or {})
        out = func(*args, **kwargs)
        self.owners.note([out])
        return out


def history_taken_again(base: torch.Tensor, moved: torch.Tensor) -> torch.Tensor:
    """``moved``'s memory and geometry with the history eager's autograd takes again for a view that
    ``set_()`` under no_grad moved: ``base.as_strided`` in the view's new geometry, recorded only
    (``AsStridedBackward0`` on the base), so the geometry may reach past the base's storage, where a real
    ``as_strided`` refuses it (it sits in another storage now)."""
    with torch.enable_grad():
        return base_as_strided_onto(base, moved, (tuple(moved.shape), tuple(moved.stride()), moved.storage_offset()))


def base_as_strided_onto(base: torch.Tensor, memory: torch.Tensor, geometry: tuple[Any, Any, Any]) -> torch.Tensor:
    """``memory``'s values with the history of ``base.as_strided(*geometry)`` (in the grad mode it is called in),
    recorded only where the geometry reaches past the base's storage, where a real ``as_strided`` refuses it."""
    size, stride, offset = geometry
    if _reach(geometry) * base.element_size() > base.untyped_storage().nbytes():
        with torch.no_grad():
            alias = memory.detach()  # its own history, which autograd may refuse to take again, plays no part
        out: torch.Tensor = _RecordedAsStrided.apply(base, alias, geometry)  # type: ignore[no-untyped-call]
        return out
    fresh = base.as_strided(size, stride, offset)
    with uncounted(fresh), torch.no_grad():  # it writes nothing
        fresh.set_(memory)  # type: ignore[call-overload]
    return fresh


def is_recorded_as_strided(node: Any) -> bool:
    """Whether the autograd node ``node`` is the one :func:`base_as_strided_onto` records in place of eager's
    ``AsStridedBackward0``: a view's history, though an autograd.Function's node."""
    return getattr(node, "_forward_cls", None) is _RecordedAsStrided


class _RecordedAsStrided(torch.autograd.Function):
    """``moved`` (an alias of its memory) differentiated as ``base.as_strided(moved's geometry)`` is: the
    gradient scattered by the view's strides into a zero storage spanning both geometries (overlapping
    elements summed), read back in the base's geometry (what ``as_strided``'s backward computes)."""

    @staticmethod
    def forward(ctx: Any, base: torch.Tensor, moved: torch.Tensor, geometry: Any) -> torch.Tensor:
        ctx.base_geometry = (tuple(base.shape), tuple(base.stride()), base.storage_offset())
        ctx.geometry = geometry
        ctx.numel = max(storage_extent(base)[1], _reach(geometry))
        return moved.detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        positions = torch.arange(ctx.numel, device=grad.device).as_strided(*ctx.geometry)
        storage = grad.new_zeros(ctx.numel).index_add_(0, positions.reshape(-1), grad.reshape(-1))
        return storage.as_strided(*ctx.base_geometry), None, None


def _reach(geometry: tuple[Any, Any, Any]) -> int:
    """The end of the storage interval a tensor of ``geometry`` (size, stride, offset) spans, in elements."""
    end: int = span_end(*geometry)
    return end
