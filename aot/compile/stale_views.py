"""A view's history regenerated after a write as eager regenerates it, while the joint graph is traced.

When memory a view shares is written in place after the view was made, autograd
regenerates the view's history the next time it is used. Eager, on dense CPU and
CUDA tensors, takes it again as ``base.as_strided(view's geometry)``; fake tensors
(Python subclasses) replay the chain of view ops instead. The two differ only where
the chain holds an ``as_strided`` of a view: its gradient reaches only the
elements of the tensor it was taken from, while eager's regenerated one reaches
every element of the base. ``x[:, 1].as_strided((4,), (1,), 19)`` then a write
into ``x``: eager's gradient flows into elements 19..22, the replayed chain's does
not.

``RegeneratedViews`` follows such views (``as_strided`` of a view, and views of
those) and, once their memory was written after they were made, hands every op
using them ``base.as_strided(geometry)`` in their place: eager's regenerated
history. ``needs_regenerated_views`` tells from a traced graph whether a program
takes such a view at all, so that only those programs are traced under the mode
(a torch-function mode is seen by library code; see ``meta.fresh_views.FreshViews``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map_only

from meta.fresh_views import STANDS_FOR_NO_VIEW
from meta.storage import storage_key
from meta.storage_set import history_taken_again

__all__ = ["RegeneratedViews", "needs_regenerated_views"]

# Methods that act on the user's tensor object itself, never on a stand-in.
_OWN_OBJECT = frozenset({"requires_grad_", "retain_grad", "register_hook", "__set__", "set_", "resize_", "resize_as_"})
_OWN_OBJECT_FIRST = frozenset({"t_", "transpose_", "swapdims_", "swapaxes_", "unsqueeze_", "squeeze_", "as_strided_"})
# Properties that are views: taken from the regenerated view, as eager takes them.
_VIEW_PROPERTIES = frozenset({"real", "imag", "T", "mT", "H", "mH", "data"})


def needs_regenerated_views(gm: fx.GraphModule) -> bool:
    """Whether the traced program takes an ``as_strided`` of a view and writes memory in place."""
    as_strided_of_view = writes = False
    for node in gm.graph.nodes:
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            continue
        if target is torch.ops.aten.as_strided.default:
            source = node.args[0]
            as_strided_of_view |= isinstance(source, fx.Node) and _is_view_op(source.target)
        writes |= target._schema.is_mutable
    return as_strided_of_view and writes


def _is_view_op(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and target.is_view


class RegeneratedViews(TorchFunctionMode):
    """Uses of a followed view, after a write into its memory, get eager's regenerated view instead."""

    def __init__(self) -> None:
        super().__init__()
        # id -> (view, its version counter when made)
        self._followed: dict[int, tuple[torch.Tensor, int]] = {}

    def fresh(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor``, or, if it is a followed view written since it was made, eager's regenerated view."""
        followed = self._followed.get(id(tensor))
        if followed is None or followed[0] is not tensor or tensor._version == followed[1]:
            return tensor
        base = tensor._base
        if base is None or base.dtype != tensor.dtype:  # as_strided cannot take a view of another dtype
            return tensor
        if storage_key(base) != storage_key(tensor):
            # set_() moved it (or the view it was taken from) to other memory: eager's regenerated history
            # still reaches the base by strides, but its values stay the memory it sits in now.
            return history_taken_again(base, tensor)
        return base.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if isinstance(func, torch._ops.OpOverload):  # a mode above called it again: ``set_.source_Tensor`` is ``set_``
            name = func.overloadpacket.__name__
        if name == "__get__":
            name = getattr(getattr(func, "__self__", None), "__name__", "__get__")
            own = name not in _VIEW_PROPERTIES
        else:
            own = name in _OWN_OBJECT
        original = args[0] if args else None
        if not self._followed or own:
            out = func(*args, **kwargs)
        else:
            first = original
            if isinstance(first, torch.Tensor) and name not in _OWN_OBJECT_FIRST:
                first = self.fresh(first)
            rest, fresh_kwargs = tree_map_only(torch.Tensor, self.fresh, (tuple(args[1:]), kwargs))
            if "out" in kwargs:
                fresh_kwargs["out"] = kwargs["out"]
            out = func(*((first, *rest) if args else ()), **fresh_kwargs)
            if out is first and first is not original:
                out = original  # an in-place op returns its argument: the user's object
            original = first
        self._follow(name, original, out)
        return out

    def _follow(self, name: str, source: Any, out: Any) -> None:
        if not isinstance(out, torch.Tensor) or not isinstance(source, torch.Tensor) or out is source:
            return
        if out._base is None or not out.requires_grad or not torch.is_grad_enabled():
            return
        # (An alias standing for an input that is no view is none in eager: ``FreshViews`` follows its views.)
        taken_from_view = name == "as_strided" and source._base is not None
        taken_from_view = taken_from_view and not getattr(source, STANDS_FOR_NO_VIEW, False)
        followed = self._followed.get(id(source))
        if taken_from_view or (followed is not None and followed[0] is source and out._base is source._base):
            self._followed[id(out)] = (out, out._version)
