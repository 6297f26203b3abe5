"""Fill ``ViewAndMutationMeta`` by running the flat function once on fake tensors.

A dispatch mode under the function records two things per ATen call: which
tensors an op writes (its schema's alias annotations) and which tensor each view
was taken from, with the op and arguments to take it again. From those:

- an input is *data-mutated* when a write lands on its storage, and
  *metadata-mutated* when an ``inplace_view`` op (``t_``, ``unsqueeze_``,
  ``as_strided_`` ...) is applied to the input itself;
- an output aliases an input or an intermediate when its recorded view chain
  reaches it; the chain is kept so the epilogue can replay it on real tensors.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch._prims_common import corresponding_real_dtype
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map_only

from meta import symbolic
from meta.alias import written_positions
from meta.errors import UnsupportedMutationError, UnsupportedOperatorError
from meta.function_apply import functions_seen_by_modes
from meta.indices import IntermediateBase, UserArg, UserOut
from meta.out_resize import resize_outs_as_eager
from meta.overlap import (
    EagerOverlapChecks,
    dispatched_argument,
    eager_overlap_error,
    is_overlap_error,
    order_dependent_read,
)
from meta.storage import (
    CALLER_IN_INFERENCE_MODE,
    fake_inputs,
    has_version_counter,
    intersect,
    offset_of,
    storage_extent,
    storage_key,
    touch_interval,
    view_root,
)
from meta.storage_set import STORAGE_SET_OPS, StorageOwners, history_taken_again
from meta.view_and_mutation import (
    ComputedAlias,
    InputAliasInfo,
    OutputAliasInfo,
    OutputType,
    TensorSpec,
    ViewAndMutationMeta,
    ViewStep,
    replay_views,
)
from meta.write_order import refuse_order_dependent_writes, refuse_self_overlapping_writes

__all__ = [
    "ABSOLUTE_OFFSET_OPS",
    "CALLER_IN_INFERENCE_MODE",
    "FreshViews",
    "ViewRecorder",
    "collect_meta",
    "raised_by_eager_backward",
    "records",
    "saved_tensor_hooks_suspended",
]


def records() -> bool:
    """Whether autograd records the ops run now: grad mode on, and not inference mode (where an
    ``enable_grad`` region turns grad mode on, yet no built-in op records)."""
    return torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


@contextlib.contextmanager
def saved_tensor_hooks_suspended() -> Iterator[None]:
    """Take the caller's saved-tensor hooks off while tracing, so they are not traced into graphs.

    They still apply at runtime, to what the compiled forward saves.
    """
    autograd = torch._C._autograd
    hooks = []
    while (top := autograd._top_saved_tensors_default_hooks(True)) is not None:
        hooks.append(top)
        autograd._pop_saved_tensors_default_hooks()
    try:
        yield
    finally:
        for pack, unpack in reversed(hooks):
            autograd._push_saved_tensors_default_hooks(pack, unpack)


def _geometry(tensor: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    return tuple(tensor.shape), tuple(tensor.stride()), offset_of(tensor)


_aten = torch.ops.aten

# Ops whose result depends on where a tensor sits in its storage (absolute storage offsets),
# not only on its own geometry: a program using them on an input is specialized on its offset.
ABSOLUTE_OFFSET_OPS = frozenset(
    {
        _aten.as_strided.default,
        _aten.as_strided_.default,
        _aten.as_strided_scatter.default,
        _aten.as_strided_copy.default,
        _aten.set_.source_Storage_storage_offset,
        _aten.set_.source_Storage,
        # After ``t.set_(source)`` t sits at source's absolute offset: within one storage (inputs sharing
        # it) the write-back must follow it there, not stay at t's own old region.
        _aten.set_.source_Tensor,
    }
)

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
# Keys of the steps taking a grown storage's root tensor again (above every traced step's ``clock * 1024``).
_GROWN_ROOT_KEY = 2**50
# ``set_``'s out-of-place twins, as a recorded step of a view chain.
_SET_TWINS = frozenset({_aten.set.source_Tensor, _aten.set.source_Storage, _aten.set.source_Storage_storage_offset})
_SET_OPS = frozenset(
    {_aten.set_.source_Tensor, _aten.set_.source_Storage, _aten.set_.source_Storage_storage_offset, _aten.set_.default}
)
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


def _is_view_attribute(func: Any) -> bool:
    attribute = getattr(func, "__self__", None)
    return getattr(func, "__name__", "") == "__get__" and getattr(attribute, "__name__", "") in _VIEW_ATTRIBUTES


_CreationMeta = torch._C._autograd.CreationMeta


def _creation(view: torch.Tensor) -> Any:
    return torch._C._autograd._get_creation_meta(view)


def _reinterpretable(base: torch.dtype, dtype: torch.dtype) -> bool:
    """Whether a view of ``base``'s memory in ``dtype`` can be taken by ``_reinterpreted``."""
    if base == dtype:
        return True
    if dtype.is_complex:
        return base == corresponding_real_dtype(dtype)
    return base.is_complex and dtype == corresponding_real_dtype(base)


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


class RequiresGradCalls(TorchFunctionMode):
    """Records the tensors the function calls ``requires_grad_()`` on. Under the caller's inference mode a view
    of an input requiring grad requires none until then; collection runs outside it, where such a view
    requires grad already and the call changes nothing to see."""

    def __init__(self, called: dict[int, torch.Tensor]) -> None:
        super().__init__()
        self._called = called

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") == "requires_grad_" and args and isinstance(args[0], torch.Tensor):
            if (args[1] if len(args) > 1 else kwargs.get("requires_grad", True)) is not False:
                self._called[id(args[0])] = args[0]  # kept alive: its id names no other tensor
        return func(*args, **kwargs)


# Set on an alias a layer hands the function in place of an input that is no view (``wrappers.metadata_mutation``):
# eager takes the views of that input again from the input itself, so views of the alias are followed as its.
STANDS_FOR_NO_VIEW = "_aot_stands_for_no_view"


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
        # view's history), so elements the old geometry does not span get no gradient.
        self._recorded: dict[int, list[tuple[tuple[int, ...], tuple[int, ...], int]]] = {}
        # Views set_() moved to other memory under no_grad (their history is taken again from their base).
        self._moved_under_no_grad: set[int] = set()
        # Views (by id) taken from a changed view that is a leaf of its own: (the view, that leaf).
        self._anchored: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # Views of another dtype taken from a tensor that is no view: eager takes them again by the dtype
        # view op itself on the base as it is then (which may refuse its new geometry), not by strides.
        self._dtype_of_base: dict[int, torch.Tensor] = {}
        # Views (by id) taken from an alias standing for an input that is no view: (the view, that alias).
        self._of_stand_in: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # Views (by id) taken from a view made a leaf of its own (``requires_grad_()`` on a view of memory
        # needing no grad), and their version then: (the view, that version).
        self._of_leaf_views: dict[int, tuple[torch.Tensor, int]] = {}
        # Views (by id) taken from a tensor after its geometry changed, and their version then: autograd's
        # record of them is current until their memory or geometry changes again.
        self._taken_after: dict[int, tuple[torch.Tensor, int]] = {}

    def fresh(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor``, or a fresh view of its base with its geometry if autograd's record of it is stale."""
        of_leaf_view = self._of_leaf_views.get(id(tensor))
        if of_leaf_view is not None and of_leaf_view[0] is tensor and tensor._version != of_leaf_view[1]:
            # Eager takes its history again from its base, which needs no grad: an as_strided record reaching
            # nothing. Autograd on fakes replays the view on that base instead, and finds no history.
            with torch.no_grad():
                memory = tensor.detach()
            with torch.enable_grad():
                return _Unconnected.apply(torch.empty(0, requires_grad=True), memory)  # type: ignore[no-any-return,no-untyped-call]
        anchored = self._anchored.get(id(tensor))
        if anchored is not None and anchored[0] is tensor and _reinterpretable(anchored[1].dtype, tensor.dtype):
            fresh = _reinterpreted(anchored[1], tensor.dtype, _geometry(tensor))
            if self._on_fresh is not None:
                self._on_fresh(fresh, tensor)
            return fresh
        stand_in = self._of_stand_in.get(id(tensor))
        if stand_in is not None and stand_in[0] is tensor and id(stand_in[1]) in self._changed:
            if torch.is_grad_enabled() and tensor.requires_grad:
                # Eager's input is the view's base: its history is taken again from the input's current one.
                fresh = _reinterpreted(self.fresh(stand_in[1]), tensor.dtype, _geometry(tensor))
                if self._on_fresh is not None:
                    self._on_fresh(fresh, tensor)
                return fresh
        base = tensor._base
        if base is None or (id(tensor) not in self._changed and id(base) not in self._changed_bases):
            return tensor
        taken_after = self._taken_after.get(id(tensor))
        if taken_after is not None and taken_after[0] is tensor and taken_after[1] == tensor._version:
            return tensor
        creation = _creation(tensor)
        if torch.is_grad_enabled() and tensor.requires_grad and creation != _CreationMeta.DEFAULT:
            # Eager takes the history of such a view (a Function's output, one made under no_grad) again
            # here, and refuses to after an in-place change: raise as it does.
            tensor.grad_fn  # noqa: B018
        if creation == _CreationMeta.IN_CUSTOM_FUNCTION:
            return tensor  # its history is the Function's, never taken again by strides
        if not _reinterpretable(base.dtype, tensor.dtype):
            return tensor  # a dtype no view of the base reaches
        if tensor.requires_grad and not base.requires_grad:
            return tensor  # a leaf of its own (the function called requires_grad_() on it): no view history
        if storage_key(base) != storage_key(tensor):  # set_() moved it, or its base, to other memory
            moved_under_no_grad = id(tensor) in self._moved_under_no_grad and base.requires_grad
            if not (moved_under_no_grad or id(base) in self._changed_bases) or base.dtype != tensor.dtype:
                return tensor
            # Eager takes its history again from its base (wherever that is now) by strides, which autograd on
            # fakes does not. A view of the base so taken, set_() onto it, is the same memory with that history.
            fresh = history_taken_again(base, tensor)
            if self._on_fresh is not None:
                self._on_fresh(fresh, tensor)
            return fresh
        fresh = base
        # (Only when eager regenerates the view's history: in grad mode, for a view requiring grad.)
        regenerated = torch.is_grad_enabled() and tensor.requires_grad
        if regenerated and self._dtype_of_base.get(id(tensor)) is tensor and base.dtype != tensor.dtype:
            fresh = torch.view_as_complex(base) if tensor.dtype.is_complex else torch.view_as_real(base)
        for geometry in [*self._recorded.get(id(tensor), ()), _geometry(tensor)]:
            fresh = _reinterpreted(fresh, tensor.dtype, geometry)
        if self._on_fresh is not None:
            self._on_fresh(fresh, tensor)
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
        out_geometry = [_geometry(t) if t.layout == torch.strided else None for t in outs]
        own_object = name in _OWN_OBJECT_METHODS and not _is_view_attribute(func)
        if name in _INPLACE_VIEW_METHODS and args and isinstance(args[0], torch.Tensor) and args[0]._is_view():
            if records() and args[0].requires_grad:
                self._recorded.setdefault(id(args[0]), []).append(_geometry(args[0]))
        if name in _RESIZE_METHODS and CALLER_IN_INFERENCE_MODE.get():
            # Eager's caller ran it under inference_mode, where autograd (which refuses to resize a tensor
            # requiring grad) is off: so is it here, the collection and the trace running outside it.
            with torch.inference_mode():
                out = func(*args, **kwargs)
        elif (self._changed or self._changed_bases or self._of_leaf_views) and not own_object:
            first, rest = (args[0], args[1:]) if args else (None, ())
            if name not in _INPLACE_VIEW_METHODS and isinstance(first, torch.Tensor):
                if name.endswith("_") and not name.endswith("__"):
                    _check_inplace_as_eager(first)  # the stand-in is no view of the leaf eager refuses to write
                first = self._used(first)
            rest, fresh_kwargs = tree_map_only(torch.Tensor, self._used, (rest, kwargs))
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
        self._anchor(args[0] if args else None, out)
        self._note_taken_after(args[0] if args else None, out)
        changed = [t for t, geometry in zip(outs, out_geometry, strict=True) if geometry not in (None, _geometry(t))]
        if name in _INPLACE_VIEW_METHODS and args and isinstance(args[0], torch.Tensor):
            changed.append(args[0])
            if name == "set_":
                (self._moved_under_no_grad.discard if torch.is_grad_enabled() else self._moved_under_no_grad.add)(
                    id(args[0])
                )
        for tensor in changed:
            if tensor._is_view():
                self._changed[id(tensor)] = tensor
            else:
                self._changed_bases[id(tensor)] = tensor
        return out

    def _note_taken_after(self, first: Any, out: Any) -> None:
        """Note ``out``, a view taken by an op from ``first``, a tensor (no view) whose geometry changed."""
        if not isinstance(first, torch.Tensor) or not isinstance(out, torch.Tensor) or out is first:
            return
        if id(first) in self._changed_bases and out._base is first:
            self._taken_after[id(out)] = (out, out._version)

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
            self._of_stand_in[id(out)] = (out, stand_in)
        leaf_view = first._base is not None and first.requires_grad and not first._base.requires_grad
        if leaf_view and out.requires_grad and out.dtype == first.dtype:
            self._of_leaf_views[id(out)] = (out, out._version)
        anchored = self._anchored.get(id(first))
        if anchored is not None and anchored[0] is first:
            self._anchored[id(out)] = (out, anchored[1])
        elif id(first) in self._changed and first.requires_grad and _is_leaf(first):
            self._anchored[id(out)] = (out, first)


def _check_inplace_as_eager(tensor: torch.Tensor) -> None:
    """Eager's refusal of an in-place op recorded on a leaf requiring grad, or on a view of one."""
    if not (records() and tensor.requires_grad):
        return
    base = tensor._base
    if base is not None and base.is_leaf:
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
    if base is None and tensor.is_leaf:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")


class _Unconnected(torch.autograd.Function):
    """``memory`` (an alias of it) with a history whose gradient reaches nothing."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        return memory.detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None]:
        return None, None


@dataclasses.dataclass
class _Write:
    tensor: torch.Tensor
    metadata_only: bool
    grad_enabled: bool
    hidden_from_autograd: bool
    seq: int
    # The written tensor's storage extent when it was written: later metadata changes do not move it.
    storage: int = -1
    extent: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        self.storage, self.extent = storage_key(self.tensor), touch_interval(self.tensor)

    def hits(self, tensor: torch.Tensor) -> bool:
        """Whether this write may have changed an element of ``tensor``."""
        return self.storage == storage_key(tensor) and intersect(self.extent, touch_interval(tensor))


@dataclasses.dataclass(frozen=True)
class _Node:
    """A tensor as it was at one point of the run: a root, or a step from an earlier node.

    A view's node points at its parent's node *when the view was taken*, so an
    in-place metadata change of the parent later (a new node for the parent)
    does not rewrite how the view is taken again.
    """

    tensor: torch.Tensor
    parent: _Node | None = None
    step: ViewStep | None = None
    # The parent's (size, stride, offset) when the step was taken.
    parent_geometry: tuple[tuple[int, ...], tuple[int, ...], int] | None = None


class ViewRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Records, below autograd, each view's parent, each write's target, and storage use."""

    def __init__(
        self,
        alias_sources: Sequence[torch.Tensor] = (),
        inference_inputs: dict[int, bool] | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        # The inputs that are inference tensors used outside inference mode, by id: whether the caller's
        # tensor has a version counter (is a detach()/.data of one). Eager refuses writes into the others.
        self._inference_inputs = inference_inputs or {}
        self.nodes: dict[int, _Node] = {}
        self.writes: list[_Write] = []
        self._keep: list[Any] = []
        # Tensors whose aliases made by non-view ops (unsafe_split ...) are recorded too, so that
        # replaying the op reproduces eager's storage sharing without autograd view tracking.
        self._alias_sources = {id(t): storage_key(t) for t in alias_sources}
        self._initial_geometry = {id(t): _geometry(t) for t in alias_sources}
        # The tensors the inputs are (views of): the caller's memory as autograd knows it.
        self._input_roots = {id(view_root(t)) for t in alias_sources}
        # The first set_() of an input requiring grad (or a view of the caller's memory) to another geometry.
        self.set_refusal: tuple[Any, torch.Tensor] | None = None
        # Inputs whose history set_() moved (see ``_refuse_set_of_input_with_history``), by id: the clock then;
        # and leaves whose geometry changed under no_grad after a use autograd recorded (see ``_note_grad_use``).
        self.moved_history: dict[int, int] = {}
        # Leaf inputs requiring grad, by id, and those an op autograd records has read: eager made their
        # gradient accumulator then, for the geometry they had.
        self._grad_leaves = {id(t) for t in alias_sources if t.requires_grad and t.grad_fn is None}
        self._accumulating: set[int] = set()
        self.accumulator_kept: set[int] = set()  # those whose geometry then changed under no_grad
        # Inputs whose history set_() may move: views of bases requiring grad, their history as the caller's.
        self._bases_as_called = {id(t): _base_state(t) for t in alias_sources if _base_state(t) is not None}
        self._initial_version = {storage_key(t): t._version for t in alias_sources}
        # By the base whose counter its views share: an input set_() moved to other memory keeps its counter.
        self._initial_root_version = {id(view_root(t)): t._version for t in alias_sources}
        # The sources' version counters as last seen, and, per source, the clock of the last data write
        # that moved its counter: a write through a ``.data`` alias (a counter of its own) moves none.
        self._sources = [t for t in alias_sources if t.layout == torch.strided and not t.is_inference()]
        self._seen_versions = [t._version for t in self._sources]
        self._pending_write: tuple[int, bool] | None = None  # (clock, data write) of the last write op
        self.last_bump: dict[int, int] = {}  # id(source) -> clock
        self._source_storages = set(self._alias_sources.values())
        # Storages of the sources that an absolute-offset op touched, and how far anything reached into each.
        self.absolute_storages: set[int] = set()
        self.reach: dict[int, int] = {}
        # Storages of the sources that resize_ grew, and their size in bytes after.
        self.grown: dict[int, int] = {}
        # Storages of tensors the function made that a resize_ grew (their tensors are taken again on all of it).
        self.grown_made: set[int] = set()
        self.clock = 0  # orders views and writes
        # Tensors (by id) the function called requires_grad_() on, seen under the caller's inference mode only.
        self.made_require_grad: dict[int, torch.Tensor] = {}
        self._storage_owners = StorageOwners(alias_sources)

    def node(self, tensor: torch.Tensor) -> _Node:
        found = self.nodes.get(id(tensor))
        if found is None or found.tensor is not tensor:
            found = self.nodes[id(tensor)] = _Node(tensor)
            self._keep.append(tensor)
        return found

    def _note_storage_use(self, func: Any, values: Any) -> None:
        for value in values:
            for tensor in value if isinstance(value, (list, tuple)) else (value,):
                if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
                    continue
                key = storage_key(tensor)
                if key in self._source_storages:
                    self.reach[key] = max(self.reach.get(key, 0), storage_extent(tensor)[1] * tensor.element_size())
                    # An in-place view op is traced as an ``as_strided`` at the offset it leaves.
                    if func in ABSOLUTE_OFFSET_OPS or torch.Tag.inplace_view in func.tags:
                        self.absolute_storages.add(key)

    def settle(self) -> None:
        """Attribute the version bumps of the last write op (autograd bumps after the op returns)."""
        pending, self._pending_write = self._pending_write, None
        if pending is None:
            return
        for i, source in enumerate(self._sources):
            current = source._version
            if current != self._seen_versions[i] and pending[1]:
                self.last_bump[id(source)] = pending[0]
            self._seen_versions[i] = current

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if _composite_implicit(func):
            # Reached undecomposed where autograd is off (inference mode): record the ops it is made of, as
            # autograd's kernel would call them (``view_as`` is the ``view`` it calls) and the trace records.
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        if _resize_to_own_size(func, args, kwargs):
            return args[0]  # eager's autograd neither bumps the version nor records a change: a no-op
        self.settle()
        refuse_self_overlapping_writes(func, args, kwargs)
        self._check_overlap_as_eager(func, args, kwargs)
        if self._inference_inputs:
            self._check_inference_write_as_eager(func, args, kwargs)
        with self:  # eager resizes out= arguments before writing them: recorded as the resize_ it is
            resize_outs_as_eager(func, args, kwargs)
        refuse_order_dependent_writes(func, args, kwargs)
        self.clock += 1
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        parent_geometry = _geometry(first) if first is not None and first.layout == torch.strided else None
        from_geometry = self._changed_geometry(first) if first is not None else None
        version = -1
        if first is not None:
            initial_version = self._initial_version.get(storage_key(first))
            if initial_version is None:
                initial_version = self._initial_root_version.get(id(view_root(first)))
            # An inference tensor (made under the caller's inference mode) set_() onto an input's memory has none.
            if initial_version is not None and not first.is_inference():
                version = first._version - initial_version
        nbytes_before = first.untyped_storage().nbytes() if func is _aten.resize_.default and first is not None else -1
        set_from = (storage_key(first), _geometry(first)) if func in _SET_OPS and first is not None else None
        func, args, kwargs = self._storage_owners.as_tensor_set(func, args, kwargs)
        if func in STORAGE_SET_OPS:
            raise UnsupportedMutationError(
                f"{func}: set_() onto an UntypedStorage no tensor of the function holds cannot be traced (a graph "
                "has no storage values); set_() onto a tensor instead, e.g. t.set_(source.as_strided(size, stride, "
                "offset))"
            )
        if self._source_storages:
            # A set_() leaves its target's memory: where the target sat in it no longer matters.
            used = [*args[1:], *kwargs.values()] if set_from is not None else [*args, *kwargs.values()]
            self._note_storage_use(func, used)
        out = func(*args, **kwargs)
        if self._grad_leaves and records() and _recorded_by_autograd(func, out):
            self._note_grad_use([*args, *kwargs.values()])
        self._storage_owners.note([out])
        if set_from is not None and first is not None:
            self._refuse_set_of_input_with_history(func, first, set_from)
        if self._source_storages:
            self._note_storage_use(func, [out])
        metadata_only = torch.Tag.inplace_view in func.tags
        # resize_ within its storage changes geometry only; growing an intermediate's is a write into new
        # memory, growing an input's is done before the call (by the MetadataMutation layer).
        resized = False
        if first is not None and nbytes_before >= 0:
            resized = first.untyped_storage().nbytes() == nbytes_before or self._is_source(first)
        metadata_only = metadata_only or resized
        if metadata_only and first is not None and id(first) in self._accumulating and not records():
            # Eager's accumulator keeps the geometry it was made for: later uses' gradients reach it as they
            # are (summed to its shape), which is what ``moves_history`` gives a leaf.
            self.moved_history.setdefault(id(first), self.clock)
            self.accumulator_kept.add(id(first))
        if resized and first is not None and self._is_source(first):
            self.absolute_storages.add(storage_key(first))  # taken again by strides, at an absolute offset
            if first.untyped_storage().nbytes() > nbytes_before:
                self.grown[storage_key(first)] = first.untyped_storage().nbytes()
        grad_enabled = records()
        # An op writing out= an alias of its input returns that alias: not a view it makes.
        writes = written_positions(func, args)
        for position in writes:
            value = dispatched_argument(func, args, kwargs, position)
            for tensor in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(tensor, torch.Tensor):
                    hidden = not tensor.requires_grad
                    self.writes.append(_Write(tensor, metadata_only, grad_enabled, hidden, self.clock))
        if writes:
            self._pending_write = (self.clock, not metadata_only)
        step_kwargs = tuple(sorted(kwargs.items()))
        if first is not None and metadata_only and id(first) not in self._alias_sources:
            # The tensor changes geometry in place: to take it again, take its old self, then the
            # out-of-place twin of the op (an input's own change is the metadata-mutation layer's).
            twin, twin_args = _out_of_place_view(func), tuple(args[1:])
            if resized:
                twin, twin_args, step_kwargs = _aten.as_strided.default, _geometry(first), ()
            if 0 <= nbytes_before < first.untyped_storage().nbytes() and not self._is_source(first):
                # Grown: taken again, by strides, on the whole grown memory (see ``_grown_intermediate_storages``).
                self.grown_made.add(storage_key(first))
                twin, twin_args, step_kwargs = _aten.as_strided.default, _geometry(first), ()
            if twin is not None:
                # A view keeps the grad mode it was made in (its creation meta) through in-place changes.
                made = self.node(first)
                view_grad_enabled = made.step.grad_enabled if made.step is not None else grad_enabled
                key = self.clock * 1024
                step = ViewStep(twin, twin_args, step_kwargs, None, view_grad_enabled, key, None, version, True)
                self.nodes[id(first)] = _Node(first, made, step, parent_geometry)
        elif first is not None and (func.is_view or (not writes and self._aliases_source(first, out))):
            views = [(None, out)] if isinstance(out, torch.Tensor) else list(enumerate(out))
            parent = self.node(first)
            for item, view in views:
                key = self.clock * 1024 + (item or 0)
                step = ViewStep(func, tuple(args[1:]), step_kwargs, item, grad_enabled, key, from_geometry, version)
                self._keep.append(view)
                self.nodes[id(view)] = _Node(view, parent, step, parent_geometry)
        return out

    def _note_grad_use(self, values: list[Any]) -> None:
        """Leaf inputs requiring grad that ``values`` (an op's arguments, autograd recording it) are, or are
        views of: their gradient accumulator exists from now on."""
        for value in values:
            for tensor in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                    root = view_root(tensor)
                    if id(root) in self._grad_leaves:
                        self._accumulating.add(id(root))

    def _refuse_set_of_input_with_history(
        self, func: Any, tensor: torch.Tensor, before: tuple[int, tuple[tuple[int, ...], tuple[int, ...], int]]
    ) -> None:
        """Under no_grad, ``t.set_(source)`` keeps ``t``'s autograd history: a view's is taken again from
        its base in the new geometry (at the new storage's offsets), a leaf accumulates gradients of the
        new shape. For an input (or a view of the caller's memory) that history is the caller's, which the
        graph, where the input is a base of its own, cannot reproduce: refused unless its geometry stays, no
        output has a gradient (``collect_meta`` decides, after the run), or the input is a view of a base
        requiring grad, which the MetadataMutation layer then hands the function."""
        # The same geometry elsewhere: both histories are taken again as they were (values come from the graph).
        if records() or not tensor.requires_grad or before[1] == _geometry(tensor):
            return
        root = view_root(tensor)
        # (A view's leafness is not asked: autograd on fakes may fail to take its history again.)
        leaf_same_shape = tensor._base is None and _is_leaf(tensor) and before[1][0] == tuple(tensor.shape)
        base = _base_state(tensor)
        if id(tensor) in self._alias_sources and (
            leaf_same_shape or (base is not None and self._bases_as_called.get(id(tensor)) == base)
        ):
            # An input that is a view of a base requiring grad: the MetadataMutation layer hands the function
            # that base, from which later uses take the input's history again (``InputAliasInfo.moves_history``).
            self.moved_history.setdefault(id(tensor), self.clock)
            return
        if (id(tensor) in self._alias_sources or id(root) in self._input_roots) and self.set_refusal is None:
            self.set_refusal = (func, tensor)

    def _is_source(self, tensor: torch.Tensor) -> bool:
        return storage_key(tensor) in self._source_storages

    def _changed_geometry(self, tensor: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
        """An input's current geometry (offset relative to its initial one) if it changed in place, else None."""
        initial = self._initial_geometry.get(id(tensor))
        if initial is None or tensor.layout != torch.strided:
            return None
        size, stride, offset = _geometry(tensor)
        return None if (size, stride, offset) == initial else (size, stride, offset - initial[2])

    def stands_for(self, fresh: torch.Tensor, tensor: torch.Tensor) -> None:
        """``fresh`` (a ``FreshViews`` stand-in) is ``tensor`` in its current geometry: views of it are views of
        ``tensor``, taken again from the geometry it has now."""
        from_geometry = self._changed_geometry(tensor)
        self.clock += 1
        step = ViewStep(_aten.alias.default, (), (), None, records(), self.clock * 1024, from_geometry)
        self._keep.append(fresh)
        self.nodes[id(fresh)] = _Node(fresh, self.node(tensor), step, _geometry(tensor))

    def _check_inference_write_as_eager(self, func: Any, args: Any, kwargs: dict[str, Any]) -> None:
        """Eager's refusal of in-place ops on inference tensors outside inference mode: bumping the version
        counter of one that has none raises."""
        for position in written_positions(func, args):
            value = dispatched_argument(func, args, kwargs, position)
            for tensor in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(tensor, torch.Tensor) and not self._has_version_counter(tensor):
                    raise RuntimeError(
                        f"Inplace update to inference tensor outside InferenceMode is not allowed ({func})."
                        "You can make a clone to get a normal tensor before doing inplace update."
                    )

    def _has_version_counter(self, tensor: torch.Tensor) -> bool:
        """Whether eager's ``tensor`` has a version counter: a view of an inference tensor has none, a
        ``detach()``/``.data`` of one has (a counter of its own), and set_() changes neither."""
        node = self.nodes.get(id(tensor))
        if node is None or node.tensor is not tensor:
            # An input itself, or a tensor the function made (outside inference mode: a normal one).
            return self._inference_inputs.get(id(tensor), True)
        # A geometry changed in place (t_(), an out= resize ...) leaves the tensor what it was.
        while node.step is not None and node.step.in_place:
            assert node.parent is not None
            node = node.parent
        if node.step is None:
            return self._inference_inputs.get(id(node.tensor), True)
        return node.step.op is _aten.detach.default or not self._is_inference(node)

    def refuse_requires_grad_on_inference(self, inputs: Sequence[torch.Tensor]) -> None:
        """Eager's refusal of ``requires_grad_()`` on an inference tensor outside inference mode: after the run,
        an inference input (one that required no grad) or a view or ``detach()`` of one requiring grad had it."""
        nodes = [*self.nodes.values(), *(_Node(t) for t in inputs if id(t) in self._inference_inputs)]
        for node in nodes:
            # (A leaf: one with a history got it from an op autograd recorded, which eager allows.)
            if node.tensor.requires_grad and _is_leaf(node.tensor) and self._is_inference(node):
                raise RuntimeError(
                    "Setting requires_grad=True on inference tensor outside InferenceMode is not allowed."
                )

    def _is_inference(self, node: _Node) -> bool:
        """Whether eager's tensor at ``node`` is an inference tensor: an inference input, or a view of one."""
        while node.parent is not None:
            node = node.parent
        return id(node.tensor) in self._inference_inputs

    def _check_overlap_as_eager(self, func: Any, args: Any, kwargs: dict[str, Any]) -> None:
        """Raise what eager raises for writes into memory the op also reads, which fake kernels allow."""
        message = eager_overlap_error(func, args, kwargs)
        if message is not None:
            raise RuntimeError(message)
        if order_dependent_read(func, args, kwargs) is not None:
            raise UnsupportedMutationError(
                f"{func} reads memory it also writes, at other indices, through a tensor that is not dense "
                "(an expanded or strided view of the written memory, say): eager's result depends on the order "
                "its kernel visits the elements in, which a compiled graph does not reproduce. Clone the tensor "
                "read first."
            )

    def _aliases_source(self, arg: torch.Tensor, out: Any) -> bool:
        key = self._alias_sources.get(id(arg))
        if key is None:
            return False
        outs = out if isinstance(out, (list, tuple)) else (out,)
        return any(isinstance(o, torch.Tensor) and o is not arg and storage_key(o) == key for o in outs)

    def chain_to_root(
        self, tensor: torch.Tensor, stop: Callable[[torch.Tensor], bool]
    ) -> tuple[torch.Tensor, tuple[ViewStep, ...], tuple[tuple[int, ...], tuple[int, ...], int] | None]:
        """Walk from ``tensor`` up to a node with no parent, or one whose tensor ``stop`` accepts.

        Returns that tensor, the steps taking it to ``tensor``, and the geometry the
        tensor had when the first step was taken from it.
        """
        node = self.nodes.get(id(tensor))
        if node is None or node.tensor is not tensor or stop(tensor):
            return tensor, (), None
        steps: list[ViewStep] = []
        geometry = None
        while node.parent is not None:
            assert node.step is not None
            called = self.made_require_grad.get(id(node.tensor)) is node.tensor
            steps.append(_with_requires_grad_set(node.step, node.tensor, called))
            geometry = node.parent_geometry
            node = node.parent
            if stop(node.tensor):
                break
        if node.tensor is tensor:
            return tensor, (), None  # only in-place metadata changes of a tensor that is no view
        return node.tensor, tuple(reversed(steps)), geometry

    def made_by_custom_function(self, tensor: torch.Tensor, depth: int) -> bool:
        """Whether ``tensor``'s history goes through an autograd.Function's output among the ``depth - 1``
        views above it: replaying the views from their root would lose that Function's backward."""
        node = self.nodes.get(id(tensor))
        if node is None or node.tensor is not tensor:
            return False
        for _ in range(depth):
            if node is None or not node.tensor.requires_grad:
                return False  # no history, or one cut by no_grad
            if _made_by_custom_function(node.tensor):
                return True
            if node.step is not None and node.step.op is _aten.detach.default:
                return False  # .data and detach() start a history of their own
            node = node.parent
        return False

    def root(self, tensor: torch.Tensor, depth: int) -> torch.Tensor:
        """The tensor ``depth`` view steps above ``tensor``, or the root above it if fewer (an in-place view
        op that changed nothing, ``squeeze_()`` of no size-1 dimension, leaves no step when traced again)."""
        node = self.nodes[id(tensor)]
        for _ in range(depth):
            if node.parent is None:
                break
            node = node.parent
        return node.tensor


def _recorded_by_autograd(func: Any, out: Any) -> bool:
    """Whether eager's autograd records a node for ``func`` (and so makes its inputs' gradient accumulators):
    not for ``detach`` (``.data`` too), nor for an op whose outputs cannot carry a gradient (integers, bools)."""
    if func is _aten.detach.default:
        return False
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return any(t.is_floating_point() or t.is_complex() for t in outs)


def _resize_to_own_size(func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """A ``resize_`` to the size the tensor has (no memory format to restride to): it changes nothing, and
    autograd bumps the version only when the size changes."""
    if func is not _aten.resize_.default or len(args) > 2 or kwargs.get("memory_format") is not None:
        return False
    return isinstance(args[0], torch.Tensor) and list(args[0].shape) == list(args[1])


def _composite_implicit(func: Any) -> bool:
    """Whether ``func`` is made of other ops (``CompositeImplicitAutograd``), which autograd's kernel calls."""
    try:
        return bool(func.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd))
    except RuntimeError:  # an op the dispatcher does not know (``prim::device``)
        return False


def _with_requires_grad_set(step: ViewStep, view: torch.Tensor, called: bool = False) -> ViewStep:
    """``step``, marked to call ``requires_grad_()`` when the view it made requires grad as a leaf of a base
    needing none: only the function's own ``requires_grad_()`` makes one (a view of a base requiring grad
    requires it too, with a history or, taken under no_grad, none). Under the caller's inference mode a view
    requires none whatever its base (``called``: the function's ``requires_grad_()`` on it, seen)."""
    if step.in_place or not view.requires_grad:
        return step
    if called:
        return dataclasses.replace(step, requires_grad_set=True)
    if view._base is not None and view._base.requires_grad:
        return step
    if not _is_leaf(view):
        return step
    return dataclasses.replace(step, requires_grad_set=True)


def _out_of_place_view(op: Any) -> Any:
    """``t_`` -> ``t``, ``unsqueeze_`` -> ``unsqueeze``: the view op taking the same arguments."""
    name = op._schema.name.split("::")[-1].removesuffix("_")
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return None
    wanted = [(arg.name, str(arg.type)) for arg in op._schema.arguments]
    for overload in packet.overloads():
        candidate = getattr(packet, overload)
        if [(arg.name, str(arg.type)) for arg in candidate._schema.arguments] == wanted:
            return candidate
    return None


def collect_meta(
    flat_fn: Callable[..., Sequence[torch.Tensor]],
    flat_args: Sequence[torch.Tensor],
    names: Sequence[str],
    fake_mode: FakeTensorMode | None = None,
) -> ViewAndMutationMeta:
    """Run ``flat_fn`` once on fakes of ``flat_args`` and describe its inputs and outputs.

    Args:
        flat_fn: takes the tensors positionally, returns a sequence of tensors.
        flat_args: real (or fake) tensors giving the input signature.
        names: a readable name per input, for errors and reports.
    """
    fake_mode = fake_mode or symbolic.fake_mode()
    # FreshViews is a torch-function mode, which some library code sees (TransformerEncoder leaves its
    # fast path when one is active): only programs changing geometry in place run under it.
    needs_fresh_views, watch_calls = False, False
    while True:
        fakes = fake_inputs(fake_mode, flat_args)
        initial_geometry = [_geometry(fake) for fake in fakes]
        initial_versions = [fake._version for fake in fakes]
        initially_requiring_grad = [fake.requires_grad for fake in fakes]
        initial_history = [_history(fake) for fake in fakes]
        initial_storages = [(storage_key(fake), touch_interval(fake)) for fake in fakes]
        inference_storages = {
            storage_key(fake)
            for fake, real in zip(fakes, flat_args, strict=True)
            if isinstance(real, torch.Tensor) and real.is_inference()
        }
        in_inference_mode = CALLER_IN_INFERENCE_MODE.get()
        # Outside inference mode eager refuses writes into inference tensors (and requires_grad on them);
        # inside, saving them for a backward.
        inference_inputs = {
            id(fake): has_version_counter(real)
            for fake, real in zip(fakes, flat_args, strict=True)
            if isinstance(real, torch.Tensor)
            and real.is_inference()
            and not in_inference_mode
            and not real.requires_grad
        }
        recorder = ViewRecorder(alias_sources=fakes, inference_inputs=inference_inputs)
        fresh_views = FreshViews(recorder.stands_for)
        saves = _refusing_inference_saves(inference_storages) if in_inference_mode else _nothing()
        fresh = fresh_views if needs_fresh_views else _nothing()
        # (A torch-function mode changes some library code paths: only where an input requires grad, before
        # the call or, seen once the function ran, after it.)
        watched = in_inference_mode and (
            watch_calls or any(isinstance(t, torch.Tensor) and t.requires_grad for t in flat_args)
        )
        calls = RequiresGradCalls(recorder.made_require_grad) if watched else _nothing()
        try:
            hooks, reseeds = saved_tensor_hooks_suspended(), _Reseeds()
            with hooks, functions_seen_by_modes(), saves, fake_mode, recorder, calls, fresh, reseeds:
                outs = list(flat_fn(*fakes))
            recorder.settle()
            recorder.refuse_requires_grad_on_inference(fakes)
        except Exception as error:
            # A resize_ autograd refused, which ``FreshViews`` runs as the caller's inference_mode does.
            resize_refused = CALLER_IN_INFERENCE_MODE.get() and "cannot resize variables that require" in str(error)
            # Autograd on fakes failing to take a view's history again (``FreshViews._of_leaf_views``).
            stale_view = "new_fn INTERNAL ASSERT" in str(error)
            if needs_fresh_views or not (resize_refused or stale_view or any(w.metadata_only for w in recorder.writes)):
                raise
            needs_fresh_views = True
            continue
        if not needs_fresh_views and any(w.metadata_only for w in recorder.writes):
            needs_fresh_views = True
            continue
        if in_inference_mode and not watched and any(fake.requires_grad for fake in fakes):
            watch_calls = True  # the function made an input require grad: its requires_grad_() calls matter
            continue
        break

    # Only outputs with a history differentiate the moved input (a returned leaf has none); under the
    # caller's inference_mode none has (collection runs outside it, under no_grad, where an enable_grad
    # region makes outputs with history).
    differentiated = not CALLER_IN_INFERENCE_MODE.get() and any(
        isinstance(o, torch.Tensor) and o.requires_grad and not _is_leaf(o) for o in outs
    )
    for fake, real in zip(fakes, flat_args, strict=True):
        # The fake of a non-leaf is a view of a leaf of its own: only the caller's views have bases.
        movable = real.is_leaf or (real._base is not None and real._base.requires_grad)
        if id(fake) in recorder.moved_history and not movable:
            del recorder.moved_history[id(fake)]
            recorder.set_refusal = recorder.set_refusal or (_aten.set_.source_Tensor, fake)
    if recorder.set_refusal is not None and differentiated:
        _refuse_set(*recorder.set_refusal, fakes, names)
    if differentiated:
        _refuse_moved_then_written(recorder, fakes, names)
    fake_ids = {id(fake) for fake in fakes}
    # Each data write's root: the input it went through (its memory outside the input's elements too).
    write_roots = [
        (w, id(recorder.chain_to_root(w.tensor, lambda t: id(t) in fake_ids)[0]))
        for w in recorder.writes
        if not w.metadata_only
    ]
    written_through = {root for _, root in write_roots}
    input_position: dict[int, UserArg] = {}
    input_storage: dict[int, UserArg] = {}
    for i, fake in enumerate(fakes):
        input_position.setdefault(id(fake), UserArg(i))
        # Its own memory: a storage set_() gave it later is not the caller's input.
        input_storage.setdefault(initial_storages[i][0], UserArg(i))

    # Inputs the function called requires_grad_() on: their views taken before it are replayed without history.
    made_to_require_grad = {
        id(fake)
        for fake, before in zip(fakes, initially_requiring_grad, strict=True)
        if fake.requires_grad and not before
    }
    first_position: dict[int, UserOut] = {}
    for out_idx, out in enumerate(outs):
        first_position.setdefault(id(out), UserOut(out_idx))
    absolute = set(recorder.absolute_storages)
    for out in outs:
        if id(out) not in input_position and storage_key(out) in input_storage:
            if not recorder.chain_to_root(out, lambda t: id(t) in input_position)[1]:
                absolute.add(storage_key(out))  # rebuilt by strides, at an absolute offset

    # Outputs that are views of an input taken after set_() moved it to other memory (they sit in it): taken
    # again from the caller's tensor once it is moved.
    moved = {id(fake) for fake, (key, _) in zip(fakes, initial_storages, strict=True) if storage_key(fake) != key}
    # And views of a leaf whose geometry changed under no_grad after a use in grad mode: eager's views take
    # their history again from the leaf in its final geometry (the caller's, once restrided).
    moved |= recorder.accumulator_kept
    after_set = set()
    for out in outs:
        root = recorder.chain_to_root(out, lambda t: id(t) in input_position)[0]
        if id(root) in moved and root is not out and storage_key(out) == storage_key(root):
            after_set.add(id(out))
    storage_set_to = [
        _new_storage(fake, key, initial_storages, [None if id(o) in after_set else o for o in outs])
        for fake, (key, _) in zip(fakes, initial_storages, strict=True)
    ]
    input_info = tuple(
        _input_info(
            name,
            real,
            fake,
            geometry,
            recorder.writes,
            [w for w, root in write_roots if root == id(fake)],
            id(fake) in written_through,
            initial_storage[0] in absolute,  # its own memory: where set_() may have moved it is not the caller's
            recorder.reach.get(initial_storage[0], 0),
            fake._version - version,
            fake.requires_grad and not requires_grad,
            initial_storage,
            set_to,
            _history(fake) is not history,
            recorder.grown.get(initial_storage[0], 0),
            id(fake) in recorder.moved_history,
        )
        for name, real, fake, geometry, version, requires_grad, initial_storage, set_to, history in zip(
            names,
            flat_args,
            fakes,
            initial_geometry,
            initial_versions,
            initially_requiring_grad,
            initial_storages,
            storage_set_to,
            initial_history,
            strict=True,
        )
    )

    # The last data write that moved each input's version counter (shared by its storage's views,
    # not by a ``.data`` alias), overlapping or not: a view taken before it was modified under eager's
    # eyes, whatever region the write touched.
    last_write = {UserArg(i): recorder.last_bump.get(id(fake), -1) for i, fake in enumerate(fakes)}

    output_info: list[OutputAliasInfo] = []
    intermediate_bases: list[OutputAliasInfo] = []
    base_of_root: dict[int, IntermediateBase] = {}
    grown = _grown_intermediate_storages(recorder, outs)
    base_of_storage: dict[int, IntermediateBase] = {}
    grown_roots: dict[int, int] = {}  # id(root tensor on a grown storage) -> its number
    for out_idx, out in enumerate(outs):
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"output {out_idx}: the flat function must return tensors, got {type(out).__name__}")

        def of_inference_input(tensor: torch.Tensor) -> bool:
            """Under the caller's inference mode, a view (or a view set_() elsewhere) of an inference input: eager's
            requires no grad but by the function's requires_grad_() on it (the fakes are no inference tensors)."""
            if not CALLER_IN_INFERENCE_MODE.get() or id(tensor) in input_position:
                return False
            root, chain, _ = recorder.chain_to_root(tensor, lambda t: id(t) in input_position)
            position = input_position.get(id(root))
            if root is tensor or position is None or not flat_args[position].is_inference():
                return False
            # (An autograd.Function in an enable_grad region records there, whatever its inputs.)
            by_function = recorder.made_by_custom_function(tensor, len(chain))
            return not by_function and recorder.made_require_grad.get(id(tensor)) is not tensor

        def info(kind: OutputType, tensor: torch.Tensor = out, **fields: Any) -> OutputAliasInfo:
            autograd_view = fresh_views.fresh(tensor)  # the stale record of a view would fail to regenerate
            try:
                is_leaf = autograd_view.is_leaf
            except RuntimeError:  # eager refuses to regenerate the history of this view, too
                is_leaf = False
            return OutputAliasInfo(
                kind,
                requires_grad=autograd_view.requires_grad and not of_inference_input(tensor),
                spec=TensorSpec.of(tensor),
                is_leaf=is_leaf,
                **fields,
            )

        if id(out) in input_position:
            output_info.append(info(OutputType.IS_INPUT, base_input=input_position[id(out)]))
            continue
        if first_position[id(out)] != out_idx:
            output_info.append(info(OutputType.IS_OUTPUT, base_output=first_position[id(out)]))
            continue
        if storage_key(out) in grown:
            # On memory a resize_ grew: eager's tensors on it share all of it, beyond each one's elements. The
            # graph returns it whole; the tensor the function made on it is taken again there, its views from it.
            key = storage_key(out)
            root, chain, root_geometry = recorder.chain_to_root(out, lambda t: id(t) in input_position)
            if key not in base_of_storage:
                base_of_storage[key] = IntermediateBase(len(intermediate_bases))
                numel = out.untyped_storage().nbytes() // out.element_size()
                spec = TensorSpec((numel,), (1,), out.dtype)
                intermediate_bases.append(OutputAliasInfo(OutputType.NON_ALIAS, False, spec, whole_storage=True))
            base_k = base_of_storage[key]
            # One object per root, shared by every chain from it (a key no traced step has).
            root_key = _GROWN_ROOT_KEY + grown_roots.setdefault(id(root), len(grown_roots))
            made_root = ViewStep(_set_onto, _geometry(root), grad_enabled=False, key=root_key)
            if out.requires_grad:  # no view: its history is computed by the graph, put on the memory by the epilogue
                output_info.append(info(OutputType.NON_ALIAS, on_storage=(base_k, made_root)))
                continue
            chain = (made_root, *_from_final_geometry(chain, root, root_geometry)) if chain else (made_root,)
            output_info.append(info(OutputType.ALIAS_OF_INTERMEDIATE, base_intermediate=base_k, view_chain=chain))
            continue
        root, chain, root_geometry = recorder.chain_to_root(out, lambda t: id(t) in input_position)
        # A tensor set_() onto an input's memory (no view) is that memory in its geometry, whatever it was before.
        set_onto = out._base is None and storage_key(out) in input_storage
        set_onto = set_onto and any(step.op in _SET_TWINS for step in chain)
        if not chain or set_onto:
            if storage_key(out) in input_storage:
                # An alias of an input made by an op that is not a view op: rebuild it by strides.
                base = input_storage[storage_key(out)]
                step = ViewStep(_aten.as_strided.default, (out.shape, out.stride(), out.storage_offset()))
                if out._base is None:
                    # A tensor set_() moved onto the input's memory: no view of it; under grad mode eager's
                    # set_ leaves a history that cannot be differentiated, as the replay's does.
                    step = dataclasses.replace(step, op=_set_onto, grad_enabled=out.requires_grad)
                    if out.requires_grad and not _history_of_set(out):
                        # set_() under no_grad kept the tensor's own history: the graph computes it, the
                        # epilogue puts it on a tensor set_() onto the caller's input.
                        step = dataclasses.replace(step, grad_enabled=False)
                        alias = ComputedAlias(base, (step,), in_place=True)
                        output_info.append(info(OutputType.NON_ALIAS, computed_alias=alias))
                        continue
                output_info.append(info(OutputType.ALIAS_OF_INPUT, base_input=base, view_chain=(step,)))
            else:
                output_info.append(info(OutputType.NON_ALIAS))
            continue
        by_function = recorder.made_by_custom_function(out, len(chain))
        untracked = id(root) in made_to_require_grad
        if by_function or not _replay_gives_eagers_autograd(fresh_views.fresh(out), root, chain, fake_mode, untracked):
            # Its autograd history is not a view's (an autograd.Function returning its input, say): the
            # graph computes it, and the epilogue puts it on the alias.
            if id(root) not in input_position:
                output_info.append(info(OutputType.NON_ALIAS, hidden_view=True))
            elif by_function or (out._base is None and not out.is_leaf):
                # A Function's view, or a .data/detach() alias an op with a gradient wrote in place.
                alias = ComputedAlias(input_position[id(root)], chain, in_place=not by_function)
                output_info.append(info(OutputType.NON_ALIAS, computed_alias=alias))
            else:
                output_info.append(info(OutputType.NON_ALIAS))
            continue
        if id(root) in input_position and id(out) in after_set:
            base = input_position[id(root)]
            chain = _from_moved_geometry(chain, root, initial_geometry[base], root_geometry)
            output_info.append(info(OutputType.ALIAS_OF_INPUT, base_input=base, view_chain=chain, after_set=True))
            continue
        chain = _sources_as_offsets(chain, root, root_geometry)
        if id(root) in input_position:
            base = input_position[id(root)]
            _refuse_chain_with_traced_tensor(chain, base)
            before = chain[-1].key // 1024 < last_write.get(base, -1)
            output_info.append(
                info(OutputType.ALIAS_OF_INPUT, base_input=base, view_chain=chain, replay_before_write_back=before)
            )
            continue
        if _holds_traced_tensor(chain):
            # A view of an intermediate set_() onto another tensor the function made: no replay has that memory.
            # Its _base is a tensor the caller never gets: the graph computes its value, returned as a view.
            _refuse_shared_set_source(out, outs, out_idx)
            output_info.append(info(OutputType.NON_ALIAS, hidden_view=True))
            continue
        # A view of an intermediate: replayed from the graph's final value of it, whose geometry may
        # have changed in place since the first step was taken.
        chain = _from_final_geometry(chain, root, root_geometry)
        if id(root) in first_position:
            base_out = first_position[id(root)]
            output_info.append(info(OutputType.ALIAS_OF_INTERMEDIATE, base_output=base_out, view_chain=chain))
            continue
        if id(root) not in base_of_root:
            base_of_root[id(root)] = IntermediateBase(len(intermediate_bases))
            intermediate_bases.append(
                OutputAliasInfo(
                    OutputType.NON_ALIAS,
                    requires_grad=root.requires_grad,
                    spec=TensorSpec.of(root),
                    is_leaf=root.requires_grad and _is_leaf(root),
                )
            )
        base_k = base_of_root[id(root)]
        output_info.append(info(OutputType.ALIAS_OF_INTERMEDIATE, base_intermediate=base_k, view_chain=chain))
    backward_error = None
    if any(info.mutates_data for info in input_info) or any(w.metadata_only for w in recorder.writes):
        with saved_tensor_hooks_suspended(), fake_mode:
            # Through fresh views: autograd's record of a view whose geometry changed is stale on fakes.
            backward_error = _eager_backward_error([fresh_views.fresh(out) for out in outs], fakes)
    return ViewAndMutationMeta(
        tuple(input_info),
        tuple(output_info),
        tuple(intermediate_bases),
        backward_error,
        needs_fresh_views,
        reseeds.found,
    )


def _base_state(tensor: torch.Tensor) -> int | None:
    """For a view of a base requiring grad, within the base's storage: the base. Eager takes the view's
    history again from it after ``set_()`` (``base.as_strided(size, stride, offset)``, recorded only: the
    geometry may reach past the base's storage), which a stand-in can too while it is the caller's base
    (requiring grad when the call starts; writes into it since are in its history inside the graph, the
    synthetic-base layer making both views of one base)."""
    base = tensor._base
    if base is None or not base.requires_grad or base.dtype != tensor.dtype:
        return None
    return id(base)


def _refuse_moved_then_written(recorder: ViewRecorder, fakes: Sequence[torch.Tensor], names: Sequence[str]) -> None:
    """Refuse a write under grad mode into an input after set_() moved its history: eager records it as a
    write into the input's base (whose history the caller sees change), which the graph cannot give the base."""
    for i, fake in enumerate(fakes):
        since = recorder.moved_history.get(id(fake))
        if since is None:
            continue
        for write in recorder.writes:
            # Through the input (or a view of its base taken after): writes through other tensors, or through
            # ones autograd does not track (``.data``), leave its base's history alone, in eager too.
            through = write.tensor is fake or (write.tensor._base is not None and write.tensor._base is fake._base)
            recorded = write.grad_enabled and write.tensor.requires_grad and not write.metadata_only
            if write.seq > since and recorded and through and write.hits(fake):
                raise UnsupportedMutationError(
                    f"input {i} ({names[i]}) is written in place under grad mode after set_() under no_grad moved "
                    "it: eager records the write into the history of the input's base, which the compiled function "
                    "cannot give the caller's base; clone() the input after the set_()"
                )


def _refuse_set(func: Any, tensor: torch.Tensor, fakes: Sequence[torch.Tensor], names: Sequence[str]) -> None:
    root = view_root(tensor)
    which = [
        f"input {i} ({name})"
        for i, (fake, name) in enumerate(zip(fakes, names, strict=True))
        if fake is tensor or view_root(fake) is root
    ]
    what = which[0] if id(tensor) in {id(f) for f in fakes} else f"a view of {' / '.join(which)}"
    raise UnsupportedMutationError(
        f"{func} under no_grad moves {what}, which requires grad, to another geometry (size "
        f"{list(tensor.shape)}, stride {list(tensor.stride())}, offset {tensor.storage_offset()}): eager's gradients "
        "of its later uses follow the caller's tensor into its new place, which the compiled graph cannot "
        "reproduce; set_() a tensor that does not require grad, or copy_() the values instead"
    )


def _history_of_set(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s history is the one ``set_()`` leaves under grad mode (it has no derivative)."""
    return type(tensor.grad_fn).__name__ == "NotImplemented"


def _grown_intermediate_storages(recorder: ViewRecorder, outs: Sequence[torch.Tensor]) -> set[int]:
    """Storages of outputs that a ``resize_`` grew (of a tensor the function made, or an alias of one): eager's
    tensors on one share all of it, elements no output spans included, which no replay from one output's
    memory has. Taken where each output on it requiring grad is no view (the graph computes its history, the
    epilogue puts it on the memory) beside one needing none (from which the whole memory is taken)."""
    on = [(storage_key(out), out.requires_grad, out._base is None) for out in outs if isinstance(out, torch.Tensor)]
    return {
        key
        for key in recorder.grown_made
        if all(plain for k, needs_grad, plain in on if k == key and needs_grad)
        and any(not needs_grad for k, needs_grad, _ in on if k == key)
    }


def _set_onto(tensor: torch.Tensor, size: Any, stride: Any, offset: int) -> torch.Tensor:
    """A new tensor ``set_()`` onto ``tensor``'s memory with this geometry, as eager's was: no view;
    under grad mode, from a tensor requiring grad, with set_'s history (it has no derivative)."""
    source = tensor.as_strided(size, stride, offset)
    plain = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    plain.set_(source)  # type: ignore[call-overload]
    return plain


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


_RESEEDED = (
    "the function sets torch's global random state (torch.manual_seed, torch.set_rng_state, ...) other than by "
    "one seed before all its draws: eager's draws depend on where, which a compiled graph does not keep. Seed "
    "once before the draws, or outside the compiled function."
)


def _seeded_state(seed: int) -> torch.Tensor:
    return torch.Generator().manual_seed(seed).get_state()


class _Reseeds(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """How the function sets torch's global random state: ``found`` is ``(seed, restores)`` where it seeds the
    generator once before all its draws (and puts the caller's state back after them, or not), for the runtime
    to do around each call as eager does at each; any other change is refused. Draws on fakes leave the real
    generator alone, so at each draw it holds what the function set; the caller's state is put back."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.state, self.seed = torch.random.get_rng_state(), torch.initial_seed()
        self.seen: list[tuple[int, torch.Tensor]] = []  # (seed, state) at each draw the function reseeded
        self.unseeded_draws = False
        self.found: tuple[int, bool] | None = None

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)  # type: ignore[no-untyped-call]
        with _disable_current_modes():  # the fake mode below is still active
            final, seed = torch.random.get_rng_state(), torch.initial_seed()
            torch.random.set_rng_state(self.state)
            if exc[0] is None:
                self._judge(final, seed)

    def _judge(self, final: torch.Tensor, seed: int) -> None:
        restored = torch.equal(final, self.state)
        if not self.seen:
            if not restored:  # seeded with no draw after it: the same as seeding before them, if there are none
                if self.unseeded_draws:
                    raise UnsupportedOperatorError(_RESEEDED)
                self.found = self._one_seed(seed, final, restores=False)
            return
        first_seed, first_state = self.seen[0]
        if self.unseeded_draws or any(not torch.equal(state, first_state) for _, state in self.seen):
            raise UnsupportedOperatorError(_RESEEDED)
        if not restored and not torch.equal(final, first_state):
            raise UnsupportedOperatorError(_RESEEDED)
        self.found = self._one_seed(first_seed, first_state, restores=restored)

    @staticmethod
    def _one_seed(seed: int, state: torch.Tensor, restores: bool) -> tuple[int, bool]:
        if not torch.equal(state, _seeded_state(seed)):
            raise UnsupportedOperatorError(_RESEEDED)  # a state set otherwise (set_rng_state)
        return seed, restores

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if torch.Tag.nondeterministic_seeded in func.tags and kwargs.get("generator") is None:
            with _disable_current_modes():
                state, seed = torch.random.get_rng_state(), torch.initial_seed()
                if torch.equal(state, self.state) and seed == self.seed:
                    self.unseeded_draws = True
                else:
                    self.seen.append((seed, state))
        return func(*args, **kwargs)


def _refusing_inference_saves(inference_storages: set[int]) -> contextlib.AbstractContextManager[Any]:
    """Eager's refusal to save an inference tensor for a backward. Under the caller's inference mode only an
    autograd.Function records (in an ``enable_grad`` region, from an input requiring grad), and what it saves
    may be a value the function made (an inference tensor here too) or an input the caller made in inference
    mode (whose stand-in here is a normal tensor on ``inference_storages``)."""

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.is_inference() or (tensor.layout == torch.strided and storage_key(tensor) in inference_storages):
            raise RuntimeError(
                "Inference tensors cannot be saved for backward. Please do not use Tensors created in inference "
                "mode in computation tracked by autograd. To work around this, you can make a clone to get a "
                "normal tensor and use it in autograd, or use `torch.no_grad()` instead of `torch.inference_mode()`."
            )
        return tensor

    return torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)


def _replay_gives_eagers_autograd(
    out: torch.Tensor,
    root: torch.Tensor,
    chain: tuple[ViewStep, ...],
    fake_mode: FakeTensorMode,
    untracked: bool = False,
) -> bool:
    """Whether taking ``chain`` again from ``root`` gives ``out``'s ``requires_grad`` and kind of history.

    ``untracked``: ``root`` is an input the function called ``requires_grad_()`` on, whose views without
    history (taken before it) the layers replay under no_grad (``MetadataMutation``'s ``untracked_view``)."""
    try:
        # (``is_leaf`` of a view made in inference mode whose base was written outside it raises, as eager's would.)
        if untracked and (not out.requires_grad or out.is_leaf):
            chain = tuple(dataclasses.replace(step, grad_enabled=False) for step in chain)
        with fake_mode:
            replayed = replay_views(root, chain)
    except Exception:
        return True  # judged at runtime as before
    # A leaf on both sides differs at most by a requires_grad_() the layers apply again.
    return bool(replayed.requires_grad == out.requires_grad or (replayed.is_leaf and out.is_leaf))


def _from_final_geometry(
    chain: tuple[ViewStep, ...],
    root: torch.Tensor,
    geometry: tuple[tuple[int, ...], tuple[int, ...], int] | None,
) -> tuple[ViewStep, ...]:
    """``chain`` starting from the geometry ``root`` had when the first step was taken, if it differs now."""
    if geometry is None or geometry == _geometry(root) or chain[0].from_geometry is not None:
        return chain
    size, stride, offset = geometry
    first = dataclasses.replace(chain[0], from_geometry=(size, stride, offset - offset_of(root)))
    return (first, *chain[1:])


def _eager_backward_error(outs: Sequence[torch.Tensor], fakes: Sequence[torch.Tensor]) -> str | None:
    """Run eager's backward on the fakes: the error a mutation makes it raise, if any.

    Writes into inputs bump version counters shared with other inputs and their
    views, which the compiled graphs (working on copies) cannot see; a write into an
    expanded input leaves a history whose backward writes an expanded gradient; a
    geometry changed under no_grad leaves a history expecting the old shape.
    """
    differentiable = [o for o in outs if o.requires_grad and (o.is_floating_point() or o.is_complex())]
    if not differentiable or not any(f.requires_grad for f in fakes):
        return None
    try:
        # All the way to the leaves, as ``loss.backward()`` goes (``autograd.grad`` to the inputs stops short).
        with EagerOverlapChecks():
            torch.autograd.backward(differentiable, [torch.ones_like(o) for o in differentiable])
    except Exception as error:  # others (autograd's stale view replay on fakes ...) are left to the trace
        if raised_by_eager_backward(error):
            return str(error)
    return None


def _same_history(written: torch.Tensor, tensor: torch.Tensor) -> bool:
    """Whether autograd sees a write through ``written`` in ``tensor``'s history: it is ``tensor`` or another
    view of its base (not a tensor of its own that set_() put in the same memory, say)."""
    root = view_root(tensor)
    return written is tensor or written is root or written._base is root


def raised_by_eager_backward(error: BaseException) -> bool:
    """Whether ``error``, raised differentiating a trace, is one eager raises in its backward only (its
    forward runs): a saved tensor written in place; an overlap eager's backward refuses; or a tensor's
    geometry changed under no_grad, so its history computes a gradient of its old shape."""
    message = str(error)
    return isinstance(error, RuntimeError) and (
        "modified by an inplace operation" in message
        or "invalid gradient at index" in message
        or "derivative for" in message  # set_() under grad mode: eager's history of it is NotImplemented
        or is_overlap_error(error)
    )


def _input_info(
    name: str,
    real: torch.Tensor,
    fake: torch.Tensor,
    initial_geometry: tuple[tuple[int, ...], tuple[int, ...], int],
    writes: list[_Write],
    rooted_writes: list[_Write],
    through: bool,
    offset_sensitive: bool,
    storage_reach: int,
    version_bumps: int,
    sets_requires_grad: bool,
    initial_storage: tuple[int, tuple[int, int]],
    storage_set_to: tuple[str, int] | None,
    history_rewritten: bool,
    storage_grown_to: int,
    moves_history: bool,
) -> InputAliasInfo:
    # Writes into the input's own memory (not into a storage set_() gave it later).
    key, interval = initial_storage
    # Its memory: where it was, and where a resize_ or as_strided_ moved it in that storage.
    intervals = [interval, touch_interval(fake)] if storage_key(fake) == key else [interval]
    data_writes = [
        w for w in writes if not w.metadata_only and w.storage == key and any(intersect(w.extent, i) for i in intervals)
    ]
    if not data_writes and offset_sensitive:
        # Only writes through a view of the input at an absolute offset (as_strided) outside its elements:
        # they still write the caller's memory, so the input is written (its storage, as far as reached).
        data_writes = [w for w in rooted_writes if w.storage == key]
    metadata_writes = [w for w in writes if w.metadata_only and w.tensor is fake]
    final_metadata = None
    if storage_set_to is not None:
        final_metadata = (tuple(fake.shape), tuple(fake.stride()), offset_of(fake))
    elif metadata_writes:
        # Relative to the input's own offset: a later call may pass it at another offset.
        final_metadata = (tuple(fake.shape), tuple(fake.stride()), offset_of(fake) - initial_geometry[2])
    # An autograd.Function that wrote the input and marked it dirty: its forward ran under no_grad, yet
    # eager records the write (the history of the input, or of its base, is now the Function's backward).
    marked_dirty = bool(data_writes) and history_rewritten
    return InputAliasInfo(
        name=name,
        requires_grad=real.requires_grad,
        is_leaf=real.is_leaf,
        mutates_data=bool(data_writes),
        mutates_metadata=bool(metadata_writes),
        mutations_under_no_grad=bool(data_writes) and not marked_dirty and not any(w.grad_enabled for w in data_writes),
        # Every write autograd could have seen went through an untracked alias (the rest were under no_grad).
        mutations_hidden_from_autograd=not marked_dirty
        and any(w.grad_enabled for w in data_writes)
        and real.requires_grad
        and all(w.hidden_from_autograd or not w.grad_enabled or not _same_history(w.tensor, fake) for w in data_writes),
        written_through=bool(data_writes) and through,
        # Not when requires_grad_() made it require grad: a leaf then, its new value has no history.
        requires_grad_after=bool(data_writes) and fake.requires_grad and not (sets_requires_grad and _is_leaf(fake)),
        version_bumps=version_bumps,
        final_metadata=final_metadata,
        offset_sensitive=offset_sensitive,
        storage_reach=storage_reach,
        metadata_mutations_under_no_grad=bool(metadata_writes) and not any(w.grad_enabled for w in metadata_writes),
        # Eager leaves it a leaf requiring grad (a write of a value with history made it none).
        sets_requires_grad=sets_requires_grad and _is_leaf(fake),
        storage_set_to=storage_set_to,
        fresh_storage_nbytes=int(fake.untyped_storage().nbytes()) if storage_set_to == ("fresh", -1) else 0,
        set_recorded=storage_set_to is not None and fake.requires_grad and history_rewritten,
        storage_grown_to=storage_grown_to,
        moves_history=moves_history,
    )


def _is_leaf(tensor: torch.Tensor) -> bool:
    try:
        return bool(tensor.is_leaf)
    except (RuntimeError, IndexError, ValueError):  # a view whose base changed geometry fails to regenerate its history
        return False


def _history(tensor: torch.Tensor) -> Any:
    """The autograd node of a tensor's memory: its base's for a view (a view's own is regenerated)."""
    return view_root(tensor).grad_fn


def _made_by_custom_function(tensor: torch.Tensor) -> bool:
    try:
        return isinstance(tensor.grad_fn, torch.autograd.function.BackwardCFunction)
    except (RuntimeError, IndexError, ValueError):  # a view whose base changed geometry fails to regenerate its history
        return False


def _from_moved_geometry(
    chain: tuple[ViewStep, ...],
    root: torch.Tensor,
    initial: tuple[tuple[int, ...], tuple[int, ...], int],
    geometry: tuple[tuple[int, ...], tuple[int, ...], int] | None,
) -> tuple[ViewStep, ...]:
    """``chain`` of a view of a moved input, its first step from the geometry the input had then, with the
    offset relative to the input's final one (the caller's tensor is moved before the view is taken again)."""
    size, stride, offset = geometry if geometry is not None else initial
    first = dataclasses.replace(chain[0], from_geometry=(size, stride, offset - offset_of(root)))
    return (first, *chain[1:])


def _new_storage(
    fake: torch.Tensor,
    initial_key: int,
    initial_storages: Sequence[tuple[int, tuple[int, int]]],
    outs: Sequence[torch.Tensor | None],
) -> tuple[str, int] | None:
    """Where ``set_()`` moved an input: another input's storage, an output's, or one made inside."""
    key = storage_key(fake)
    if key == initial_key:
        return None
    for j, (other_key, _) in enumerate(initial_storages):
        if other_key == key:
            return ("input", j)
    for k, out in enumerate(outs):
        # Not the input itself (it is returned as is, wherever its storage went).
        if isinstance(out, torch.Tensor) and out is not fake and storage_key(out) == key:
            return ("output", k)
    return ("fresh", -1)


def _sources_as_offsets(
    chain: tuple[ViewStep, ...],
    root: torch.Tensor,
    root_geometry: tuple[tuple[int, ...], tuple[int, ...], int] | None = None,
) -> tuple[ViewStep, ...]:
    """``chain`` with each ``set_()`` onto a traced tensor in ``root``'s memory replaced by a ``set_()`` of the
    view onto its own memory at the source's geometry (an offset relative to the view's): the replay then
    needs no traced tensor, and the view stays the object eager's is (its ``_base``, set_'s history).

    ``root_geometry``: the geometry ``root`` had when the first step was taken from it (its geometry may
    have changed in place since), where the view sat before each ``set_()`` is found from."""
    if not any(step.op in _SET_TWINS and step.args and isinstance(step.args[0], torch.Tensor) for step in chain):
        return chain
    start = root
    if root_geometry is not None and chain[0].from_geometry is None:
        with torch.no_grad():
            start = root.as_strided(*root_geometry)
    steps = list(chain)
    for i, step in enumerate(steps):
        source = step.args[0] if step.op in _SET_TWINS and step.args else None
        if not isinstance(source, torch.Tensor) or storage_key(source) != storage_key(root):
            continue
        try:
            with torch.no_grad():
                before = replay_views(start, tuple(steps[:i]))  # where the view sat before the set_(), in the trace
        except RuntimeError:
            continue  # not taken again from the root as it is now: the step stays (and is refused)
        if storage_key(before) != storage_key(root):
            continue
        delta = int(source.storage_offset()) - int(before.storage_offset())
        geometry = (tuple(source.shape), tuple(source.stride()), delta)
        steps[i] = dataclasses.replace(step, op=_set_within, args=geometry, kwargs=())
    return tuple(steps)


def _set_within(tensor: torch.Tensor, size: Any, stride: Any, delta: int) -> torch.Tensor:
    """``tensor`` itself ``set_()`` onto its own memory at ``delta`` elements from where it sits, in place."""
    return tensor.set_(tensor.untyped_storage(), tensor.storage_offset() + delta, size, stride)


def _refuse_chain_with_traced_tensor(chain: tuple[ViewStep, ...], base: int) -> None:
    """Refuse an output view of input ``base`` whose chain holds a traced tensor (``set_(source)`` onto an
    intermediate): eager returns the view of the input, sitting on the source's memory, and a replay at
    runtime has no such memory to take it from (the source is a fake of the trace)."""
    if _holds_traced_tensor(chain):
        step = next(step for step in chain if _holds_traced_tensor((step,)))
        raise UnsupportedMutationError(
            f"{getattr(step.op, '__name__', step.op)}: an output, a view of input {base}, was set_() onto "
            "a tensor the function made (argument source): eager returns the input's view holding that "
            "memory, which the compiled function cannot return; return a clone() of it"
        )


def _holds_traced_tensor(chain: tuple[ViewStep, ...]) -> bool:
    """Whether a step of ``chain`` takes a tensor of the trace (``set_(source)``), which no replay has."""
    return any(isinstance(a, torch.Tensor) for step in chain for a in tree_flatten((step.args, step.kwargs))[0])


def _refuse_shared_set_source(out: torch.Tensor, outs: Sequence[torch.Tensor], out_idx: int) -> None:
    """Refuse a view of an intermediate set_() onto memory another output holds too: the graph computes
    each output on memory of its own, where eager's share it."""
    if any(j != out_idx and storage_key(other) == storage_key(out) for j, other in enumerate(outs)):
        raise UnsupportedMutationError(
            f"output {out_idx}, a view of a tensor the function made, was set_() onto memory another output "
            "holds too: the compiled function cannot return them sharing it; return a clone() of one"
        )
