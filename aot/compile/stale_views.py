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

They differ too where the base overlaps itself (an expanded leaf,
``x.expand(2, 3).detach().requires_grad_()``): ``as_strided``'s backward spreads
each memory element's gradient evenly over the base's indices reaching it, a
view op's backward puts it at the view's own indices.

``RegeneratedViews`` follows such views (``as_strided`` of a view, views of
those, and views of a base overlapping itself) and, once their memory was written after they were made, hands every op
using them ``base.as_strided(geometry)`` in their place: eager's regenerated
history. ``needs_regenerated_views`` tells from a traced graph whether a program
takes such a view at all, so that only those programs are traced under the mode
(a torch-function mode is seen by library code; see ``meta.fresh_views.FreshViews``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map_only

from meta.fresh_views import STANDS_FOR_LEAF, STANDS_FOR_NO_VIEW
from meta.storage import expanded_dims, overlaps_itself, storage_key
from meta.storage_set import history_taken_again

__all__ = ["RegeneratedViews", "needs_regenerated_views"]

# Methods that act on the user's tensor object itself, never on a stand-in.
_OWN_OBJECT = frozenset({"requires_grad_", "retain_grad", "register_hook", "__set__", "set_", "resize_", "resize_as_"})
_OWN_OBJECT_FIRST = frozenset({"t_", "transpose_", "swapdims_", "swapaxes_", "unsqueeze_", "squeeze_", "as_strided_"})
# Properties that are views: taken from the regenerated view, as eager takes them.
_VIEW_PROPERTIES = frozenset({"real", "imag", "T", "mT", "H", "mH", "data"})


def needs_regenerated_views(gm: fx.GraphModule) -> bool:
    """Whether the traced program takes an ``as_strided`` of a view, or a view of memory that overlaps itself,
    and writes memory in place."""
    regenerated_differs = writes = False
    for node in gm.graph.nodes:
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            continue
        source = node.args[0] if node.args else None
        if target is torch.ops.aten.as_strided.default:
            regenerated_differs |= isinstance(source, fx.Node) and _is_view_op(source.target)
        if _is_view_op(target) and isinstance(source, fx.Node):
            value = source.meta.get("val")
            regenerated_differs |= isinstance(value, torch.Tensor) and _overlaps_itself(value)
        writes |= target._schema.is_mutable
    return regenerated_differs and writes


def _overlaps_itself(tensor: torch.Tensor) -> bool:
    """Whether several indices of ``tensor`` reach one memory element (an expanded tensor): eager's regenerated
    history, ``as_strided``'s backward, then spreads a view's gradient evenly over the indices of its base that
    reach each element, where the view op's backward puts it at the view's own indices."""
    if tensor.layout != torch.strided:
        return False
    shape, stride = tensor.shape, tensor.stride()
    if free_unbacked_symbols((*shape, *stride)):  # a data-dependent op's dense output: no order to compare by
        return False
    return bool(expanded_dims(shape, stride)) or overlaps_itself(shape, stride)


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
        if hasattr(tensor, STANDS_FOR_LEAF) or getattr(tensor, STANDS_FOR_NO_VIEW, False):
            return tensor  # a layer's alias standing for an input that is no view in eager: never taken again
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
        changed = args[0] if args and name in _OWN_OBJECT_FIRST else None
        followed = self._followed.get(id(changed)) if isinstance(changed, torch.Tensor) else None
        if followed is not None and followed[0] is changed and torch.is_grad_enabled() and changed.requires_grad:
            # A geometry change autograd records gives the view the change's node over its history, current at
            # the version the change bumps to (eager's ``v.unsqueeze_(0)``): no write making it stale.
            self._followed[id(changed)] = (changed, changed._version)
        return out

    def _follow(self, name: str, source: Any, out: Any) -> None:
        if not isinstance(out, torch.Tensor) or not isinstance(source, torch.Tensor) or out is source:
            return
        if out._base is None or not out.requires_grad or not torch.is_grad_enabled():
            return
        # (An alias standing for an input that is no view is none in eager: ``FreshViews`` follows its views.)
        taken_from_view = name == "as_strided" and source._base is not None
        taken_from_view = taken_from_view and not getattr(source, STANDS_FOR_NO_VIEW, False)
        known = self._followed.get(id(out))
        if known is not None and known[0] is out:
            return  # (the user's view an op returned as it is, ``v.real``): followed from when it was made
        followed = self._followed.get(id(source))
        if (
            taken_from_view
            or _overlaps_itself(out._base)
            or (followed is not None and followed[0] is source and out._base is source._base)
        ):
            self._followed[id(out)] = (out, out._version)
