"""Torch-function modes that make Python-level calls behave as eager's while tracing: fresh views of
inputs whose geometry a program changes in place, and ``requires_grad_`` calls seen by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch._prims_common import corresponding_real_dtype
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map_only

from meta.eager_state import geometry_of, is_leaf_safely, records
from meta.errors import UnsupportedMutationError
from meta.storage import (
    CALLER_IN_INFERENCE_MODE,
    storage_key,
)
from meta.storage_set import history_taken_again
from meta.versions import history_refused

__all__ = [
    "KEEPS_OWN_HISTORY",
    "STANDS_FOR_LEAF",
    "STANDS_FOR_NO_VIEW",
    "FreshViews",
    "RequiresGradCalls",
    "Unconnected",
    "check_inplace_as_eager",
    "is_view_attribute",
]


# Set on an alias a layer hands the function in place of an input that is no view (``wrappers.metadata_mutation``):
# eager takes the views of that input again from the input itself, so views of the alias are followed as its.
STANDS_FOR_NO_VIEW = "_aot_stands_for_no_view"
# Set on the view a layer hands the function in place of a leaf it restrided first (to the leaf's final geometry):
# in that geometry again, the view is the leaf itself, index by index, not ``as_strided`` of its memory (whose
# backward spreads a gradient evenly over indices sharing an element, an expanded leaf's).
STANDS_FOR_LEAF = "_aot_stands_for_leaf"
# Set on such an alias (``STANDS_FOR_NO_VIEW``) of a non-leaf requiring grad: eager's tensor keeps its history through
# a geometry change autograd does not record (see ``FreshViews._kept_history``).
KEEPS_OWN_HISTORY = "_aot_keeps_own_history"

# In-place view methods: they change a tensor's geometry, which autograd on fake tensors
# does not carry into the view's replay function (see ``FreshViews``).
_INPLACE_VIEW_METHODS = frozenset(
    {
        "t_",
        "transpose_",
        "swapdims_",
        "swapaxes_",
        "unsqueeze_",
        "squeeze_",
        "as_strided_",
        "resize_",
        "resize_as_",
        "set_",
    }
)
_RESIZE_METHODS = frozenset({"resize_", "resize_as_"})
# Methods that must act on the user's tensor object itself, never on a stand-in.
_OWN_OBJECT_METHODS = frozenset(
    # Geometry reads too: a stand-in has the same, and taking one would trace a view op for nothing.
    {"requires_grad_", "retain_grad", "register_hook", "__set__", "__get__", "stride", "storage_offset"}
    | {"untyped_storage", "size", "dim", "numel", "_is_view"}
    # detach() records nothing: eager reads no history of its argument (a stale view's included), and a view
    # without history needs no fresh stand-in.
    | {"detach"}
)


# Tensor attributes that are views (``x.real`` is ``view_as_real`` then ``select``): read from a fresh view too.
_VIEW_ATTRIBUTES = frozenset({"real", "imag", "T", "mT", "H", "mH"})


def is_view_attribute(func: Any) -> bool:
    attribute = getattr(func, "__self__", None)
    return getattr(func, "__name__", "") == "__get__" and getattr(attribute, "__name__", "") in _VIEW_ATTRIBUTES


_CreationMeta = torch._C._autograd.CreationMeta
_Geometry = tuple[tuple[int, ...], tuple[int, ...], int]


class _History(NamedTuple):
    """A view's history as autograd took it, to take again later: that of ``parent`` (as ``parent_history``
    describes it, if it was one of changes autograd recorded, else ``parent``'s own), then ``as_strided`` by each
    of ``geometries`` in turn (the view's geometry when taken, and after each such change)."""

    parent: torch.Tensor
    parent_history: _History | None
    geometries: tuple[_Geometry, ...]


def _creation(view: torch.Tensor) -> Any:
    return torch._C._autograd._get_creation_meta(view)


def _reinterpretable(base: torch.dtype, dtype: torch.dtype) -> bool:
    """Whether a view of ``base``'s memory in ``dtype`` can be taken by ``_reinterpreted``."""
    if base == dtype:
        return True
    if dtype.is_complex:
        return base == corresponding_real_dtype(dtype)
    return base.is_complex and dtype == corresponding_real_dtype(base)


def _same_geometry(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and geometry_of(a) == geometry_of(b)


def _reinterpreted(
    base: torch.Tensor, dtype: torch.dtype, geometry: tuple[tuple[int, ...], tuple[int, ...], int]
) -> torch.Tensor:
    """A view of ``base`` in ``dtype`` (``_reinterpretable``) with ``geometry`` (in ``dtype``'s elements),
    history reaching ``base``: as_strided keeps the dtype; a complex view of real memory is
    ``view_as_complex`` of its real pairs, a real one of complex memory is taken from ``view_as_real``."""
    size, stride, offset = geometry
    if base.dtype == dtype:
        return base.as_strided(size, stride, offset)
    if dtype.is_complex:
        pairs = base.as_strided((*size, 2), (*(2 * st for st in stride), 1), 2 * offset)
        return torch.view_as_complex(pairs)
    return torch.view_as_real(base).as_strided(size, stride, offset)


def _history_taken_again_in_dtype(base: torch.Tensor, moved: torch.Tensor) -> torch.Tensor:
    """``history_taken_again`` for a view of the same dtype as its base, or a complex one of real memory taken by
    ``view_as_complex`` from a view of the base: eager's record replays that op on the base's ``as_strided`` in
    the view's real pairs. Autograd on fakes replays every view op instead (``unflatten``'s ``view``), on the
    base's new geometry, where they may not fit (a view's sizes)."""
    if base.dtype == moved.dtype:
        return history_taken_again(base, moved)
    assert moved.is_complex() and not base.is_complex()
    with torch.no_grad():
        pairs = torch.view_as_real(moved.detach())
    with torch.enable_grad():
        return torch.view_as_complex(history_taken_again(base, pairs))


class RequiresGradCalls(TorchFunctionMode):
    """Records the tensors the function calls ``requires_grad_()`` on. Under the caller's inference mode a view
    of an input requiring grad requires none until then; collection runs outside it, where such a view
    requires grad already and the call changes nothing to see."""

    def __init__(self, called: dict[int, torch.Tensor], inference_storages: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self._called = called
        self._inference_storages = inference_storages  # the storages of the inputs eager's caller made in it

    def _as_eager(self, arg: Any) -> Any:
        # A view of an inference tensor taken in inference mode has no autograd meta in eager: it requires no
        # grad (though its base does) until requires_grad_(). Collection runs outside inference mode, where
        # the fake view requires grad: a Function given it would record, and save inference tensors.
        if (
            isinstance(arg, torch.Tensor)
            and arg.requires_grad
            and arg._base is not None
            and id(arg) not in self._called
            and storage_key(arg) in self._inference_storages
            and torch._C._autograd._get_creation_meta(arg) == torch._C._autograd.CreationMeta.INFERENCE_MODE
        ):
            return arg.detach()
        return arg

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "function_class", None) is not None and self._inference_storages:
            given: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(alias) -> (alias, the tensor given)

            def as_eager(arg: torch.Tensor) -> torch.Tensor:
                alias: torch.Tensor = self._as_eager(arg)
                if alias is not arg:
                    given[id(alias)] = (alias, arg)
                return alias

            def as_given(out: torch.Tensor) -> torch.Tensor:
                alias, arg = given.get(id(out), (out, out))
                return arg if alias is out else out

            args, kwargs = tree_map_only(torch.Tensor, as_eager, (args, kwargs))
            # Eager's Function returns a dirty input needing no grad as the very object it was given (no alias):
            # where it returns the alias standing for one, the function gets its own tensor back.
            return tree_map_only(torch.Tensor, as_given, func(*args, **kwargs))
        name = getattr(func, "__name__", "")
        # ``x.requires_grad = True`` reaches modes as the attribute's ``__set__``: the same as ``requires_grad_()``.
        setter = name == "__set__" and getattr(getattr(func, "__self__", None), "__name__", "") == "requires_grad"
        if (name == "requires_grad_" or setter) and args and isinstance(args[0], torch.Tensor):
            if (args[1] if len(args) > 1 else kwargs.get("requires_grad", True)) is not False:
                self._called[id(args[0])] = args[0]  # kept alive: its id names no other tensor
        return func(*args, **kwargs)


class FreshViews(TorchFunctionMode):
    """Read a view whose geometry changed in place through a fresh view of its base.

    Autograd on fake tensors does not update a view's replay function when an
    in-place view op (``t_``, ``unsqueeze_``, ``as_strided_`` ...) changes the
    view's geometry, so a later write through it, or a gradient through it,
    uses the old geometry and fails. Real tensors have no such problem. So
    after such a change, every op on the view (while tracing or collecting
    meta) gets ``base.as_strided(view's current geometry)`` in its place:
    the same memory, with autograd history regenerated as eager regenerates it.

    A changed view made a leaf (``requires_grad_()`` on a view of memory needing
    no grad) keeps no view history: views taken from it are taken again from it
    instead (its *anchor*), not from its base.
    """

    def __init__(self, on_fresh: Callable[[torch.Tensor, torch.Tensor], None] | None = None) -> None:
        super().__init__()
        # Views whose geometry changed in place, and tensors (no views) whose geometry did: views of those.
        self._changed: dict[int, torch.Tensor] = {}
        self._changed_bases: dict[int, torch.Tensor] = {}
        # Told (fresh view, tensor it stands for): a recorder keeps chains going through the tensor.
        self._on_fresh = on_fresh
        # A view's geometries before each change autograd recorded (grad mode, the view requiring grad):
        # eager differentiates the change relative to the view as it was (``AsStridedBackward1`` on the
        # view's history), so elements the old geometry does not span get no gradient. With the view's version
        # after the last of them: once its counter moves otherwise (a write, a change under no_grad), eager's
        # record is stale, and taken again from the base by strides in the view's geometry then.
        # With the history of the tensor the view was taken from, as it was then, if the view's record was current
        # at the first of those changes (no write or change since it was taken): eager's record before them is
        # the view op's, relative to that tensor (elements past it get no gradient), not one by strides of the base.
        self._recorded: dict[int, tuple[list[_Geometry], int, _History | None]] = {}
        # Views (by id) with the history of the tensor each was taken from, as it was then (a changed view's may be
        # stale since), and the view's version then: (view, that history, version).
        self._parents: dict[int, tuple[torch.Tensor, _History, int]] = {}
        # Views set_() moved to other memory under no_grad (their history is taken again from their base).
        self._moved_under_no_grad: set[int] = set()
        # Views (by id) taken from a changed view that is a leaf of its own: (the view, that leaf).
        self._anchored: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # Views of another dtype taken from a tensor that is no view: eager takes them again by the dtype
        # view op itself on the base as it is then (which may refuse its new geometry), not by strides.
        self._dtype_of_base: dict[int, torch.Tensor] = {}
        # Views (by id) taken from an alias standing for an input that is no view: (the view, that alias, the
        # view's version then). Eager takes such a view's history again only once its counter moved since.
        self._of_stand_in: dict[int, tuple[torch.Tensor, torch.Tensor, int]] = {}
        # Views (by id) taken from a view made a leaf of its own (``requires_grad_()`` on a view of memory
        # needing no grad), and their version then: (the view, that version).
        self._of_leaf_views: dict[int, tuple[torch.Tensor, int]] = {}
        # Of those, the version each record was last taken again at (``_retake_leaf_view_records``): (view, version).
        self._leaf_view_records: dict[int, tuple[torch.Tensor, int]] = {}
        # Views (by id) taken from a tensor after its geometry changed, and their version then: autograd's
        # record of them is current until their memory or geometry changes again.
        self._taken_after: dict[int, tuple[torch.Tensor, int]] = {}
        # Views (by id) taken from a view after its geometry changed (or from such views), and their version
        # then: once their counter moves, eager takes their history again from the base by strides; autograd
        # on fakes replays their view ops, the in-place change among them (elements it did not span get none).
        self._of_changed_views: dict[int, tuple[torch.Tensor, int]] = {}
        # Views of another dtype than their base whose geometry changed under no_grad: (the view, its geometry
        # before). Eager takes their history again by replaying their view ops, which knew no such change: a
        # history of the old shape, whose backward raises.
        self._replayed_stale: dict[int, tuple[torch.Tensor, tuple[tuple[int, ...], tuple[int, ...], int]]] = {}
        # Stand-ins for non-leaves that are no view (``KEEPS_OWN_HISTORY``) whose geometry changed where autograd
        # records nothing (under no_grad), and no write recorded since: (the stand-in, its geometry before). Eager's
        # tensor keeps its history through such a change: a gradient in the new geometry reaches that history
        # index by index, the engine summing it to the old shape (or refusing it), not by memory positions.
        self._kept_history: dict[int, tuple[torch.Tensor, tuple[tuple[int, ...], tuple[int, ...], int]]] = {}
        # Of those, the ones an op since gave a history of its own without a write autograd records on the tensor
        # (an autograd.Function marking the stand-in ``fresh`` gave it dirty): (the tensor, that stand-in). Eager's
        # tensor has the Function's history then, on top of the one it kept: later uses reach it through that
        # stand-in, index by index, not the kept history alone (which dropped the Function's backward).
        self._history_since: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # The stand-ins ``fresh`` gave from a kept history during the op being run: (the tensor, the stand-in).
        self._from_kept: list[tuple[torch.Tensor, torch.Tensor]] = []

    def fresh(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor``, or a fresh view of its base with its geometry if autograd's record of it is stale."""
        of_leaf_view = self._of_leaf_views.get(id(tensor))
        if of_leaf_view is not None and of_leaf_view[0] is tensor and tensor._version != of_leaf_view[1]:
            # Eager takes its history again from its base, which needs no grad: an as_strided record reaching
            # nothing. Autograd on fakes replays the view on that base instead, and finds no history.
            with torch.no_grad():
                memory = tensor.detach()
            with torch.enable_grad():
                return Unconnected.apply(torch.empty(0, requires_grad=True), memory)  # type: ignore[no-any-return,no-untyped-call]
        anchored = self._anchored.get(id(tensor))
        if anchored is not None and anchored[0] is tensor and _reinterpretable(anchored[1].dtype, tensor.dtype):
            # Taken again as it was taken, not under the grad mode of the read: a view requiring grad has its history
            # to the anchor whatever mode reads it (the caller's no_grad after an enable_grad region), and one taken
            # under no_grad (a view of the leaf view's base, which needs none) none in grad mode.
            with torch.set_grad_enabled(tensor.requires_grad):
                fresh = _reinterpreted(anchored[1], tensor.dtype, geometry_of(tensor))
            if self._on_fresh is not None:
                self._on_fresh(fresh, tensor)
            return fresh
        stand_in = self._of_stand_in.get(id(tensor))
        # (Restrided in place, not set_() onto other memory: a view of its old memory keeps its own history.)
        if (
            stand_in is not None
            and stand_in[0] is tensor
            and id(stand_in[1]) in self._changed
            and (storage_key(stand_in[1]) == storage_key(tensor) and tensor._version != stand_in[2])
        ):
            if torch.is_grad_enabled() and tensor.requires_grad:
                # Eager's input is the view's base: its history is taken again from the input's current one,
                # then each change autograd recorded on the view since (``v.as_strided_(...)`` in grad mode: its
                # node is relative to the view's geometry before it, so elements past that get no gradient).
                taken_from = self._recorded_history(tensor)
                fresh = self._rebuilt(taken_from, stand_in[1]) if taken_from is not None else self.fresh(stand_in[1])
                for geometry in [*self._recorded_changes(tensor), geometry_of(tensor)]:
                    fresh = _reinterpreted(fresh, tensor.dtype, geometry)
                if self._on_fresh is not None:
                    self._on_fresh(fresh, tensor)
                return fresh
        base = tensor._base
        of_changed = self._of_changed_views.get(id(tensor))
        retaken = of_changed is not None and of_changed[0] is tensor and of_changed[1] != tensor._version
        if base is None or (id(tensor) not in self._changed and id(base) not in self._changed_bases and not retaken):
            return tensor
        taken_after = self._taken_after.get(id(tensor))
        if taken_after is not None and taken_after[0] is tensor and taken_after[1] == tensor._version:
            return tensor
        creation = _creation(tensor)
        if records() and tensor.requires_grad and creation != _CreationMeta.DEFAULT:
            # Eager takes the history of such a view (a Function's output, one made under no_grad) again
            # here, and refuses to after an in-place change: raise as it does. Not where autograd records
            # nothing (an enable_grad region in the caller's inference mode): eager reads no history there.
            tensor.grad_fn  # noqa: B018
        if creation == _CreationMeta.IN_CUSTOM_FUNCTION:
            return tensor  # its history is the Function's, never taken again by strides
        if not _reinterpretable(base.dtype, tensor.dtype):
            return tensor  # a dtype no view of the base reaches
        if tensor.requires_grad and not base.requires_grad:
            return tensor  # a leaf of its own (the function called requires_grad_() on it): no view history
        if storage_key(base) != storage_key(tensor):  # set_() moved it, or its base, to other memory
            moved_under_no_grad = id(tensor) in self._moved_under_no_grad and base.requires_grad
            if not (moved_under_no_grad or id(base) in self._changed_bases):
                return tensor
            if base.dtype != tensor.dtype and (
                self._dtype_of_base.get(id(tensor)) is tensor or not tensor.is_complex()
            ):
                # Taken by its dtype op from the base itself: eager's record replays that op on it, as autograd on
                # fakes does. (A real view of a complex view: left to that replay.)
                return tensor
            # Eager takes its history again from its base (wherever that is now) by strides, which autograd on
            # fakes does not. A view of the base so taken, set_() onto it, is the same memory with that history.
            fresh = _history_taken_again_in_dtype(base, tensor)
            if self._on_fresh is not None:
                self._on_fresh(fresh, tensor)
            return fresh
        as_leaf = getattr(tensor, STANDS_FOR_LEAF, False) and not self._recorded_changes(tensor)
        if as_leaf and _same_geometry(tensor, base):
            fresh = base.view_as(base)
            if self._on_fresh is not None:
                self._on_fresh(fresh, tensor)
            return fresh
        fresh = base
        # (Only when eager regenerates the view's history: in grad mode, for a view requiring grad.)
        regenerated = torch.is_grad_enabled() and tensor.requires_grad
        taken_from = self._recorded_history(tensor)
        if regenerated and taken_from is not None:
            # Autograd recorded the changes over the view's own record, relative to the tensor it was taken from.
            fresh = self._rebuilt(taken_from, base)
        if regenerated and self._dtype_of_base.get(id(tensor)) is tensor and base.dtype != tensor.dtype:
            fresh = torch.view_as_complex(base) if tensor.dtype.is_complex else torch.view_as_real(base)
        for geometry in [*self._recorded_changes(tensor), geometry_of(tensor)]:
            fresh = _reinterpreted(fresh, tensor.dtype, geometry)
        stale = self._replayed_stale.get(id(tensor))
        if regenerated and stale is not None and stale[0] is tensor:
            with torch.enable_grad():
                history = _reinterpreted(base, tensor.dtype, stale[1])
                fresh = ReplayedHistory.apply(history, fresh)  # type: ignore[no-untyped-call]
        kept = self._kept_history.get(id(tensor))
        if regenerated and kept is not None and kept[0] is tensor and not self._recorded_changes(tensor):
            since = self._history_since.get(id(tensor))
            with torch.enable_grad():
                if since is not None and since[0] is tensor:
                    history = since[1]
                else:
                    history = _reinterpreted(base, tensor.dtype, kept[1])
                fresh = ReplayedHistory.apply(history, fresh)  # type: ignore[no-untyped-call]
            self._from_kept.append((tensor, fresh))
        if self._on_fresh is not None:
            self._on_fresh(fresh, tensor)
        return fresh

    def returned(self, tensor: torch.Tensor) -> torch.Tensor:
        """``fresh(tensor)`` for a tensor the function returns, unless autograd refuses its history (a view made
        under no_grad, written since): eager's caller is refused it when reading it, not the function here."""
        return tensor if history_refused(tensor) else self.fresh(tensor)

    def _recorded_changes(self, tensor: torch.Tensor) -> list[tuple[tuple[int, ...], tuple[int, ...], int]]:
        """The geometries before each change autograd recorded on ``tensor``, while that record is current."""
        recorded = self._recorded.get(id(tensor))
        return recorded[0] if recorded is not None and recorded[1] == tensor._version else []

    def _recorded_history(self, tensor: torch.Tensor) -> _History | None:
        """The history ``tensor`` had before the changes autograd recorded on it, while that record is current
        (``_recorded``); None where it is one taken from the base by strides."""
        recorded = self._recorded.get(id(tensor))
        if recorded is None or recorded[1] != tensor._version:
            return None
        return recorded[2]

    def _history_as_taken(self, tensor: torch.Tensor) -> _History | None:
        """The history the view ``tensor`` had when taken, if its record is still the view op's (its counter has
        not moved since: eager takes a stale one again from its base by strides)."""
        taken = self._parents.get(id(tensor))
        if taken is None or taken[0] is not tensor or taken[2] != tensor._version:
            return None
        return taken[1]

    def _history_now(self, tensor: torch.Tensor) -> _History:
        """How to take ``tensor``'s history as autograd has it now, again later (its counter may move since)."""
        recorded = self._recorded.get(id(tensor))
        if recorded is None or recorded[1] != tensor._version or recorded[2] is None:
            return _History(tensor, None, ())
        geometries = (*recorded[2].geometries, *recorded[0], geometry_of(tensor))
        return _History(recorded[2].parent, recorded[2].parent_history, geometries)

    def _rebuilt(self, history: _History, base: torch.Tensor) -> torch.Tensor:
        """A stand-in with the history ``history`` describes, of ``base``'s memory: the tensor taken from (its
        stand-in as it was then, or now), viewed by strides relative to it in each geometry in turn."""
        parent = history.parent
        if history.parent_history is not None:
            fresh = self._rebuilt(history.parent_history, base)
        else:
            fresh = self.fresh(parent)
        if fresh.dtype != base.dtype or storage_key(fresh) != storage_key(base):
            fresh = base  # (another dtype, or set_() moved it: taken from the base by strides)
        for geometry in history.geometries:
            fresh = fresh.as_strided(*geometry)
        return fresh

    def _used(self, tensor: torch.Tensor) -> torch.Tensor:
        """``fresh(tensor)`` for an op about to use it. An op autograd records reads each input's history
        first, which eager refuses for a view made under no_grad (or returned by an autograd.Function)
        whose memory changed in place since: read it here, before the stand-in hides it."""
        if tensor._base is not None and records() and tensor.requires_grad:
            if torch._C._autograd._get_creation_meta(tensor) != torch._C._autograd.CreationMeta.DEFAULT:
                tensor.grad_fn  # noqa: B018 -- raises eager's error, or reads a history that is not stale
        return self.fresh(tensor)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if isinstance(func, torch._ops.OpOverload):  # a mode below called it again: ``set_.source_Tensor`` is ``set_``
            name = func.overloadpacket.__name__
        # An op writing out= a tensor of another shape resizes it (see ``meta.out_resize``): the object
        # itself, never a stand-in.
        outs = [t for t in tree_flatten(kwargs.get("out"))[0] if isinstance(t, torch.Tensor)]
        out_geometry = [geometry_of(t) if t.layout == torch.strided else None for t in outs]
        own_object = name in _OWN_OBJECT_METHODS and not is_view_attribute(func)
        recorded_change = (
            name in _INPLACE_VIEW_METHODS
            and args
            and isinstance(args[0], torch.Tensor)
            and args[0]._is_view()
            and records()
            and args[0].requires_grad
        )
        if recorded_change:
            earlier = self._recorded_changes(args[0])
            recorded = [*earlier, geometry_of(args[0])]
            history = self._recorded_history(args[0]) if earlier else self._history_as_taken(args[0])
        if name in _INPLACE_VIEW_METHODS and args and isinstance(args[0], torch.Tensor):
            self._note_replayed_stale(args[0], geometry_of(args[0]))
        in_place_view = bool(name in _INPLACE_VIEW_METHODS and args and isinstance(args[0], torch.Tensor))
        geometry_before = geometry_of(args[0]) if in_place_view else None
        if records() and name.endswith("_") and not name.endswith("__") and args and isinstance(args[0], torch.Tensor):
            # A write (or geometry change) autograd records extends the history: no longer the one kept.
            self._kept_history.pop(id(args[0]), None)
            self._history_since.pop(id(args[0]), None)
        self._from_kept = []  # (the mode is off while it runs an op: no op nests in another here)
        if name in _RESIZE_METHODS and CALLER_IN_INFERENCE_MODE.get():
            # Eager's caller ran it under inference_mode, where autograd (which refuses to resize a tensor
            # requiring grad) is off: so is it here, the collection and the trace running outside it.
            with torch.inference_mode():
                out = func(*args, **kwargs)
        elif (self._changed or self._changed_bases or self._of_leaf_views) and not own_object:
            first, rest = (args[0], args[1:]) if args else (None, ())
            # One stand-in per tensor passed: eager's overlap checks see a tensor passed twice as one
            # (``x.index_put_(i, x)`` on an expanded ``x`` is a full overlap), two stand-ins as two it cannot judge.
            taken: dict[int, torch.Tensor] = {}

            def used(tensor: torch.Tensor) -> torch.Tensor:
                if id(tensor) not in taken:
                    taken[id(tensor)] = self._used(tensor)
                return taken[id(tensor)]

            if name not in _INPLACE_VIEW_METHODS and isinstance(first, torch.Tensor):
                if name.endswith("_") and not name.endswith("__"):
                    check_inplace_as_eager(first)  # the stand-in is no view of the leaf eager refuses to write
                first = used(first)
            rest, fresh_kwargs = tree_map_only(torch.Tensor, used, (rest, kwargs))
            if "out" in kwargs:
                fresh_kwargs["out"] = kwargs["out"]
            original = args[0] if args else None
            call_args = (first, *rest) if args else ()
            out = func(*call_args, **fresh_kwargs)
            # An in-place op returns its argument: the user's object, not the stand-in.
            if out is first and first is not original:
                out = original
        else:
            out = func(*args, **kwargs)
        self._note_history_since(self._from_kept)
        self._from_kept = []
        if recorded_change:
            self._recorded[id(args[0])] = (recorded, args[0]._version, history)
        if not any(out is t for t in outs):  # an op's out= tensor is no view taken from its first argument
            self._anchor(args[0] if args else None, out)
            self._note_parent(args[0] if args else None, out)
            self._note_taken_after(args[0] if args else None, out)
        # Each tensor whose geometry changed, with its geometry before.
        changes: list[tuple[torch.Tensor, Any]] = [
            (t, g) for t, g in zip(outs, out_geometry, strict=True) if g not in (None, geometry_of(t))
        ]
        for tensor, before in changes:
            # An op resized its out= view as eager's resize_output does: a change eager's replay does not see.
            self._note_replayed_stale(tensor, before)
        if in_place_view:
            changes.append((args[0], geometry_before))
            if name == "set_":
                (self._moved_under_no_grad.discard if torch.is_grad_enabled() else self._moved_under_no_grad.add)(
                    id(args[0])
                )
        for tensor, before in changes:
            self._note_kept_history(tensor, before)
        for tensor, _ in changes:
            if tensor._is_view():
                self._changed[id(tensor)] = tensor
            else:
                self._changed_bases[id(tensor)] = tensor
        if self._of_leaf_views:
            self._retake_leaf_view_records()
        return out

    def _note_kept_history(
        self, tensor: torch.Tensor, before: tuple[tuple[int, ...], tuple[int, ...], int] | None
    ) -> None:
        """After ``tensor``'s geometry changed from ``before``: note a stand-in for an input that is no view
        changed where autograd records nothing (see ``_kept_history``)."""
        if before is None or records() or not getattr(tensor, KEEPS_OWN_HISTORY, False) or not tensor.requires_grad:
            return  # (a change autograd records dropped the note before the op)
        if not (id(tensor) in self._kept_history and self._kept_history[id(tensor)][0] is tensor):
            self._kept_history[id(tensor)] = (tensor, before)

    def _note_history_since(self, from_kept: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """After an op: note each stand-in ``fresh`` gave it from a kept history whose history the op replaced
        (an autograd.Function marked it dirty, in grad mode), as the tensor's history since (``_history_since``)."""
        for tensor, stand_in in from_kept:
            if records() and getattr(stand_in.grad_fn, "_forward_cls", None) is not ReplayedHistory:
                kept = self._kept_history[id(tensor)][1]
                if not _same_order(kept, geometry_of(tensor)):
                    raise UnsupportedMutationError(
                        f"an autograd.Function ({getattr(stand_in.grad_fn, 'name', lambda: '?')()}) marks dirty an "
                        "input that is no view, a non-leaf requiring grad, whose geometry changed under no_grad to one "
                        f"ordering its elements otherwise (size {list(tensor.shape)}, stride {list(tensor.stride())}): "
                        "eager's input then has the Function's history on the one it kept, reached index by index, "
                        "which the caller's tensor written back (by memory position) cannot have; change its geometry "
                        "in grad mode, or clone() it first"
                    )
                self._history_since[id(tensor)] = (tensor, stand_in)
                base = tensor._base
                if base is not None and base.dtype == tensor.dtype:
                    # The stand-in is no view of the base: the Function's write into that memory was recorded on
                    # neither. Eager's memory holds the Function's values there, with its history: the base's
                    # record of the region now reaches the stand-in (its value read back, its uses after).
                    with torch.enable_grad():
                        AdoptHistory.apply(base.as_strided(*geometry_of(tensor)), stand_in)  # type: ignore[no-untyped-call]

    def _retake_leaf_view_records(self) -> None:
        """Take again the record of each view of a leaf view whose memory changed since. Eager takes it from the
        view's base, which needs no grad: an ``as_strided`` record reaching nothing. Autograd on fakes replays the
        view ops on that base instead, finds no history and fails an internal assert, which ``set_()`` (never a
        torch function, so no stand-in from ``fresh``) meets reading its source's. With the base requiring grad
        for the read alone, the replay succeeds; the stand-ins ``fresh`` gives other ops stay unconnected."""
        for view, version in list(self._of_leaf_views.values()):
            base = view._base
            taken = self._leaf_view_records.get(id(view))
            if view._version == version or (taken is not None and taken[0] is view and taken[1] == view._version):
                continue
            self._leaf_view_records[id(view)] = (view, view._version)
            if base is None or base.requires_grad or not base.is_leaf or base.is_inference():
                continue
            base.requires_grad_()
            try:
                with torch.enable_grad():
                    view.grad_fn  # noqa: B018 -- takes the record again at the current version
            except RuntimeError:  # eager refuses it too (a view made under no_grad, written since)
                pass
            finally:
                base.requires_grad_(False)

    def _note_replayed_stale(
        self, view: torch.Tensor, before: tuple[tuple[int, ...], tuple[int, ...], int] | None
    ) -> None:
        """Note ``view``, of another dtype than its base, changing geometry from ``before`` (an in-place view op,
        or an ``out=`` resize) where eager's replay of its view ops does not see it (under no_grad); a change in
        grad mode is seen."""
        if before is None or view._base is None or view._base.dtype == view.dtype:
            return
        if torch.is_grad_enabled():
            self._replayed_stale.pop(id(view), None)
        elif not (id(view) in self._replayed_stale and self._replayed_stale[id(view)][0] is view):
            self._replayed_stale[id(view)] = (view, before)

    def _note_taken_after(self, first: Any, out: Any) -> None:
        """Note ``out``, a view taken by an op from ``first``, a tensor whose geometry changed (or a view of one
        taken after)."""
        if not isinstance(first, torch.Tensor) or not isinstance(out, torch.Tensor) or out is first:
            return
        # (Or from such a view, while its record is current: ``a[1:][:1]`` records two slices, not a stale one.)
        taken_after = self._taken_after.get(id(first))
        current = taken_after is not None and taken_after[0] is first and taken_after[1] == first._version
        if (id(first) in self._changed_bases and out._base is first) or (current and out._base is first._base):
            self._taken_after[id(out)] = (out, out._version)
        of_changed = self._of_changed_views.get(id(first))
        changed_view = self._changed.get(id(first)) is first or (of_changed is not None and of_changed[0] is first)
        if changed_view and out._base is not None and out._base is first._base:
            self._of_changed_views[id(out)] = (out, out._version)

    def _note_parent(self, first: Any, out: Any) -> None:
        """Note ``out``, a view taken by an op from ``first`` (the caller's object, not a stand-in ``fresh``
        gave: eager's view is relative to it), with its version then."""
        if not isinstance(first, torch.Tensor) or not isinstance(out, torch.Tensor) or out._base is None:
            return
        if out is not first and out.dtype == first.dtype and storage_key(out) == storage_key(first):
            self._parents[id(out)] = (out, self._history_now(first), out._version)

    def _anchor(self, first: Any, out: Any) -> None:
        """Note ``out``'s anchor, if it is a view of a changed leaf view, or of a view of one; and whether it
        is a view of another dtype taken from a tensor that is no view."""
        if not isinstance(first, torch.Tensor) or not isinstance(out, torch.Tensor) or out._base is None:
            return
        if out is first or storage_key(out) != storage_key(first):
            return
        if first._base is None and out.dtype != first.dtype:
            self._dtype_of_base[id(out)] = out
        of_stand_in = self._of_stand_in.get(id(first))
        stand_in = of_stand_in[1] if of_stand_in is not None and of_stand_in[0] is first else None
        if getattr(first, STANDS_FOR_NO_VIEW, False) and out.dtype == first.dtype:
            stand_in = first  # (one of another dtype is taken again by its dtype view op: not followed)
        if stand_in is not None and _reinterpretable(stand_in.dtype, out.dtype):
            self._of_stand_in[id(out)] = (out, stand_in, out._version)
        leaf_view = first._base is not None and first.requires_grad and not first._base.requires_grad
        if leaf_view and out.requires_grad and out.dtype == first.dtype:
            self._of_leaf_views[id(out)] = (out, out._version)
        anchored = self._anchored.get(id(first))
        if anchored is not None and anchored[0] is first:
            self._anchored[id(out)] = (out, anchored[1])
        elif id(first) in self._changed and first.requires_grad and is_leaf_safely(first):
            self._anchored[id(out)] = (out, first)


def check_inplace_as_eager(tensor: torch.Tensor) -> None:
    """Eager's refusal of an in-place op recorded on a leaf requiring grad, or on a view of one."""
    if not (records() and tensor.requires_grad):
        return
    base = tensor._base
    if base is not None and base.is_leaf:
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
    if base is None and tensor.is_leaf:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")


def _same_order(
    first: tuple[tuple[int, ...], tuple[int, ...], int], second: tuple[tuple[int, ...], tuple[int, ...], int]
) -> bool:
    """Whether two geometries meet memory in the same order, index by index, as far as both go: the same offset,
    and the same sizes and strides once dims of size 1 are dropped, or both dense in row-major order (one grown
    from the other)."""

    def squeezed(geometry: tuple[tuple[int, ...], tuple[int, ...], int]) -> tuple[tuple[Any, Any], ...]:
        return tuple((n, st) for n, st in zip(geometry[0], geometry[1], strict=True) if n != 1)

    def row_major(dims: tuple[tuple[Any, Any], ...]) -> bool:
        expected = 1
        for n, st in reversed(dims):
            if st != expected:
                return False
            expected *= n
        return True

    a, b = squeezed(first), squeezed(second)
    if not all(isinstance(v, int) for dims in (a, b) for dim in dims for v in dim):
        return True  # symbolic sizes (dynamic shapes): not told here
    return first[2] == second[2] and (a == b or (row_major(a) and row_major(b)))


class ReplayedHistory(torch.autograd.Function):
    """``memory`` (an alias of it) with ``history``, of the geometry it had: the gradient reaches ``history``
    index by index, as eager's replayed one does; of another shape, the engine refuses it as eager's."""

    @staticmethod
    def forward(ctx: Any, history: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        return memory.detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class AdoptHistory(torch.autograd.Function):
    """``alias`` (marked dirty, its memory unchanged) taking the history of ``value``, its values, as an in-place
    op gives it (its version moves): its gradient reaches ``value`` element by element, none its history before.
    (Also the runtime's, ``wrappers.history``.)"""

    @staticmethod
    def forward(ctx: Any, alias: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        ctx.mark_dirty(alias)
        return alias

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor]:
        return None, grad


class Unconnected(torch.autograd.Function):
    """``memory`` (an alias of it) with a history whose gradient reaches nothing."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        return memory.detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None]:
        return None, None
