"""The dispatch mode that records, per ATen call on fakes, what an op writes and which tensor each view
was taken from (with the op and arguments to take it again); also run on real tensors by the epilogue."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import guard_or_false
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from meta.alias import written_positions
from meta.eager_state import aten, geometry_of, is_leaf_safely, made_by_custom_function, records
from meta.errors import UnsupportedMutationError
from meta.out_resize import resize_outs_as_eager, restride_as_eager
from meta.overlap import (
    dispatched_argument,
    eager_overlap_error,
    order_dependent_read,
)
from meta.storage import (
    intersect,
    storage_extent,
    storage_key,
    touch_interval,
    view_root,
)
from meta.storage_set import STORAGE_SET_OPS, StorageOwners
from meta.view_and_mutation import (
    ViewStep,
    set_within,
)
from meta.write_order import refuse_order_dependent_writes, refuse_self_overlapping_writes

__all__ = ["ABSOLUTE_OFFSET_OPS", "SET_OPS", "SET_TWINS", "ViewRecorder", "Write", "base_state"]


# Ops whose result depends on where a tensor sits in its storage (absolute storage offsets),
# not only on its own geometry: a program using them on an input is specialized on its offset.
ABSOLUTE_OFFSET_OPS = frozenset(
    {
        aten.as_strided.default,
        aten.as_strided_.default,
        aten.as_strided_scatter.default,
        aten.as_strided_copy.default,
        aten.set_.source_Storage_storage_offset,
        aten.set_.source_Storage,
        # After ``t.set_(source)`` t sits at source's absolute offset: within one storage (inputs sharing
        # it) the write-back must follow it there, not stay at t's own old region.
        aten.set_.source_Tensor,
    }
)
SET_OPS = frozenset(
    {aten.set_.source_Tensor, aten.set_.source_Storage, aten.set_.source_Storage_storage_offset, aten.set_.default}
)


@dataclasses.dataclass
class Write:
    tensor: torch.Tensor
    metadata_only: bool
    grad_enabled: bool
    hidden_from_autograd: bool
    seq: int
    # The written tensor's storage extent when it was written: later metadata changes do not move it.
    storage: int = -1
    extent: tuple[int, int] = (0, 0)
    # Its version counter once autograd bumped it for the write (-1: it has none, an inference tensor), set when
    # the recorder settles the write (autograd bumps after the op returns).
    version: int = -1
    # A metadata-only write: the geometry it left the tensor in, set when the recorder settles it.
    geometry: tuple[tuple[int, ...], tuple[int, ...], int] | None = None
    # A write whose derivative is the identity of what it writes into, adding values requiring no grad (``add_``,
    # ``sub_``): autograd's record of it passes gradients as the tensor's old history does.
    identity_history: bool = False

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
    # The parent needed no grad when the step was taken (a view op's step).
    of_no_grad: bool = False


# Dtypes eager's kernel refuses and the fake kernel accepts: the op raises there, as eager's does, before the trace
# goes on to an error of its own (seed 25 program 153: the fake's sign of complex ran, and a stale no_grad view
# read after it raised a RuntimeError where eager raises sign's NotImplementedError).
_REFUSED_BY_EAGER_KERNEL: dict[str, tuple[Callable[[torch.dtype], bool], type[Exception], str]] = {
    "sign": (
        lambda dtype: dtype.is_complex,
        NotImplementedError,
        "Unlike NumPy, torch.sign is not intended to support complex numbers. Please use torch.sgn instead.",
    ),
}


def _refuse_as_eager_kernel(func: Any, args: Any) -> None:
    refused = _REFUSED_BY_EAGER_KERNEL.get(getattr(getattr(func, "overloadpacket", None), "__name__", "").rstrip("_"))
    if refused is not None and args and isinstance(args[0], torch.Tensor) and refused[0](args[0].dtype):
        raise refused[1](refused[2])


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
        self.writes: list[Write] = []
        self._keep: list[Any] = []
        # Tensors whose aliases made by non-view ops (unsafe_split ...) are recorded too, so that
        # replaying the op reproduces eager's storage sharing without autograd view tracking.
        self._alias_sources = {id(t): storage_key(t) for t in alias_sources}
        self._initial_geometry = {id(t): geometry_of(t) for t in alias_sources}
        # The tensors the inputs are (views of): the caller's memory as autograd knows it.
        self._input_roots = {id(view_root(t)) for t in alias_sources}
        # The first set_() of an input requiring grad (or a view of the caller's memory) to another geometry.
        self.set_refusal: tuple[Any, torch.Tensor] | None = None
        # Inputs whose history set_() moved (see ``_refuse_set_of_input_with_history``), by id: the clock then;
        # and leaves whose geometry changed under no_grad after a use autograd recorded (see ``_note_grad_use``).
        self.moved_history: dict[int, int] = {}
        # Inputs set_() under no_grad moved onto other memory in the geometry they had, by id: the clock then.
        # A view's later reads take its history again as it was; a write autograd records goes into its base's.
        self.moved_in_place: dict[int, int] = {}
        # Tensors (by id) a set_() autograd recorded was made on (grad mode, the target or the source requiring
        # grad): their history is set_'s, whose derivative raises.
        self.recorded_sets: set[int] = set()
        # Of those, the tensors (by id) requiring no grad before it, a set_() onto a source requiring grad gave
        # grad: the clock then (the first). What they held before was written without gradient.
        self.grad_from_set: dict[int, int] = {}
        # Leaf inputs, by id (requiring grad, or made to by the function's requires_grad_()), and those requiring
        # grad an op autograd records has read: eager made their gradient accumulator then, for the geometry they had.
        self._grad_leaves = {id(t) for t in alias_sources if t.grad_fn is None}
        self._accumulating: set[int] = set()
        # Those an op other than a view read (or read through a view), and their shape at the first: a gradient of
        # that shape then reaches them, and their accumulator keeps it; a view's own history is taken again after
        # a set_() or a geometry change (see ``reshaped_leaves``).
        self.differentiated_leaves: dict[int, tuple[int, ...]] = {}
        # Leaf inputs requiring grad that set_() under no_grad moved to another shape, by id: the clock then.
        # Eager's gradients of their later uses have the new shape (views taken before take their history
        # again from the leaf in it); ``collect_meta`` hands them to the MetadataMutation layer where an output
        # is differentiated (``InputAliasInfo.moves_to_new_shape``).
        self.reshaped_leaves: dict[int, int] = {}
        self.accumulator_kept: set[int] = set()  # those whose geometry then changed under no_grad
        # Of those, the ones whose accumulator eager made before any change of their geometry: for the one they
        # were called with.
        self.accumulated_as_called: set[int] = set()
        # Inputs whose history set_() may move: views of bases requiring grad, their history as the caller's.
        self._bases_as_called = {id(t): base_state(t) for t in alias_sources if base_state(t) is not None}
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
                    # An empty tensor touches no memory, whatever its offset (``x[1:]`` of a one-element view
                    # sits past the storage's end): counted, the base would be taken past the storage too.
                    if not guard_or_false(tensor.numel() == 0):
                        reach = storage_extent(tensor)[1] * tensor.element_size()
                        self.reach[key] = max(self.reach.get(key, 0), reach)
                    # An in-place view op is traced as an ``as_strided`` at the offset it leaves.
                    if func in ABSOLUTE_OFFSET_OPS or torch.Tag.inplace_view in func.tags:
                        self.absolute_storages.add(key)

    def settle(self) -> None:
        """Attribute the version bumps of the last write op (autograd bumps after the op returns)."""
        pending, self._pending_write = self._pending_write, None
        if pending is None:
            return
        for write in reversed(self.writes):
            if write.seq != pending[0]:
                break
            if not write.tensor.is_inference():
                write.version = write.tensor._version
            if write.metadata_only and write.tensor.layout == torch.strided:
                write.geometry = geometry_of(write.tensor)
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
        _refuse_as_eager_kernel(func, args)
        refuse_self_overlapping_writes(func, args, kwargs)
        self._check_overlap_as_eager(func, args, kwargs)
        if self._inference_inputs:
            self._check_inference_write_as_eager(func, args, kwargs)
        with self:  # eager resizes out= arguments before writing them: recorded as the resize_ it is
            resize_outs_as_eager(func, args, kwargs)
        self.settle()  # (the geometry it left: the op's own write is pending next)
        refuse_order_dependent_writes(func, args, kwargs)
        self.clock += 1
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        parent_geometry = geometry_of(first) if first is not None and first.layout == torch.strided else None
        from_geometry = self._changed_geometry(first) if first is not None else None
        version = self._version_of(first) if first is not None else -1
        nbytes_before = first.untyped_storage().nbytes() if func is aten.resize_.default and first is not None else -1
        set_from = (storage_key(first), geometry_of(first)) if func in SET_OPS and first is not None else None
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
        restride_as_eager(func, args, kwargs, out)
        if self._grad_leaves and records() and _recorded_by_autograd(func, out):
            self._note_grad_use([*args, *kwargs.values()], not func.is_view)
        self._storage_owners.note([out])
        if set_from is not None and first is not None:
            # (Below autograd: the tensors' requires_grad before the op, as autograd judged them.)
            source = args[1] if func is aten.set_.source_Tensor else None
            if records() and (first.requires_grad or (isinstance(source, torch.Tensor) and source.requires_grad)):
                self.recorded_sets.add(id(first))
                if not first.requires_grad:
                    self.grad_from_set.setdefault(id(first), self.clock)
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
        moved_at = self.reshaped_leaves.get(id(first)) if first is not None else None
        if metadata_only and first is not None and moved_at not in (None, self.clock) and self.set_refusal is None:
            self.set_refusal = (func, first)  # moved again: gradients of uses in between have another shape
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
                    write = Write(tensor, metadata_only, grad_enabled, hidden, self.clock)
                    write.identity_history = _adds_constant(func, args, kwargs)
                    self.writes.append(write)
        if writes:
            self._pending_write = (self.clock, not metadata_only)
        step_kwargs = tuple(sorted(kwargs.items()))
        if first is not None and metadata_only and id(first) not in self._alias_sources:
            # The tensor changes geometry in place: to take it again, take its old self, then the
            # out-of-place twin of the op (an input's own change is the metadata-mutation layer's).
            twin, twin_args = _out_of_place_view(func), tuple(args[1:])
            if func is aten.set_.source_Tensor:
                twin, twin_args = _set_twin(args[1], set_from)
            if resized:
                twin, twin_args, step_kwargs = aten.as_strided.default, geometry_of(first), ()
            if 0 <= nbytes_before < first.untyped_storage().nbytes() and not self._is_source(first):
                # Grown: taken again, by strides, on the whole grown memory (see ``_grown_intermediate_storages``).
                self.grown_made.add(storage_key(first))
                twin, twin_args, step_kwargs = aten.as_strided.default, geometry_of(first), ()
            if twin is not None:
                # A view keeps the grad mode it was made in (its creation meta) through in-place changes.
                made = self.node(first)
                view_grad_enabled = made.step.grad_enabled if made.step is not None else grad_enabled
                key = self.clock * 1024
                # Autograd records a change it tracks at the version it bumps to (after the op): the replay's
                # view is then no stale one, whose history autograd would take again by strides from the
                # base (reaching memory an ``as_strided_`` of a view does not). One under no_grad it leaves stale.
                recorded_at = version + 1 if version >= 0 and grad_enabled and first.requires_grad else version
                step = ViewStep(twin, twin_args, step_kwargs, None, view_grad_enabled, key, None, recorded_at, True)
                step = dataclasses.replace(step, change_grad_enabled=grad_enabled)
                self.nodes[id(first)] = _Node(first, made, step, parent_geometry)
        elif first is not None and (func.is_view or (not writes and self._aliases_source(first, out))):
            views = [(None, out)] if isinstance(out, torch.Tensor) else list(enumerate(out))
            parent = self.node(first)
            for item, view in views:
                key = self.clock * 1024 + (item or 0)
                step = ViewStep(func, tuple(args[1:]), step_kwargs, item, grad_enabled, key, from_geometry, version)
                self._keep.append(view)
                self.nodes[id(view)] = _Node(view, parent, step, parent_geometry, not first.requires_grad)
        return out

    def note_function_apply(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """An autograd.Function applied (``functions_seen_by_modes``'s callback): recorded by autograd, it takes
        the leaves among its arguments in the shape they have now, as an op differentiating them does; no op
        below autograd tells (its forward runs under no_grad)."""
        if self._grad_leaves and records():
            self._note_grad_use([*args, *kwargs.values()], differentiates=True)

    def _note_grad_use(self, values: list[Any], differentiates: bool) -> None:
        """Leaf inputs requiring grad that ``values`` (an op's arguments, autograd recording it) are, or are
        views of: their gradient accumulator exists from now on. ``differentiates``: the op is no view."""
        for value in values:
            for tensor in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                    # (A leaf input that is a view, made a leaf by the caller's requires_grad_() on a view of a base
                    # requiring none, is the leaf itself: its accumulator is its own, not its base's.)
                    root = tensor if id(tensor) in self._grad_leaves else view_root(tensor)
                    if id(root) in self._grad_leaves and root.requires_grad:
                        if id(root) not in self._accumulating and not any(
                            w.metadata_only and w.tensor is root for w in self.writes
                        ):
                            self.accumulated_as_called.add(id(root))
                        self._accumulating.add(id(root))
                        if differentiates:
                            self.differentiated_leaves.setdefault(id(root), tuple(root.shape))

    def _refuse_set_of_input_with_history(
        self, func: Any, tensor: torch.Tensor, before: tuple[int, tuple[tuple[int, ...], tuple[int, ...], int]]
    ) -> None:
        """Under no_grad, ``t.set_(source)`` keeps ``t``'s autograd history: a view's is taken again from
        its base in the new geometry (at the new storage's offsets), a leaf accumulates gradients of the
        new shape. For an input (or a view of the caller's memory) that history is the caller's, which the
        graph, where the input is a base of its own, cannot reproduce: refused unless its geometry stays, no
        output has a gradient (``collect_meta`` decides, after the run), or the input is a view of a base
        requiring grad, which the MetadataMutation layer then hands the function."""
        if records() or not tensor.requires_grad:
            return
        if before[1] == geometry_of(tensor):
            # The same geometry elsewhere: both histories are taken again as they were (values come from the
            # graph). Not so a write autograd records after: eager records it into the history of a view's base,
            # which stays in the caller's memory (see ``moved_in_place``).
            if id(tensor) in self._alias_sources and storage_key(tensor) != before[0]:
                self.moved_in_place.setdefault(id(tensor), self.clock)
            return
        root = view_root(tensor)
        # (A view's leafness is not asked: autograd on fakes may fail to take its history again.)
        leaf = tensor._base is None and is_leaf_safely(tensor)
        leaf_same_shape = leaf and before[1][0] == tuple(tensor.shape)
        reshaped = self.reshaped_leaves.get(id(tensor))
        if reshaped is not None or (leaf and not leaf_same_shape and id(tensor) in self._alias_sources):
            # Moved to another shape: exact where no gradient of another shape reaches the leaf, that is
            # where no op but a view read it before, and this is its only move.
            if reshaped is None and id(tensor) not in self.differentiated_leaves:
                self.reshaped_leaves[id(tensor)] = self.clock
            elif self.set_refusal is None:
                self.set_refusal = (func, tensor)
            return
        base = base_state(tensor)
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
        size, stride, offset = geometry_of(tensor)
        return None if (size, stride, offset) == initial else (size, stride, offset - initial[2])

    def _record_stale(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is a view whose last geometry change autograd did not record (under no_grad), or
        whose counter moved since: eager takes its history again from the base, by strides."""
        if tensor._base is None:
            return False
        last = next((w for w in reversed(self.writes) if w.metadata_only and w.tensor is tensor), None)
        return last is not None and (not last.grad_enabled or last.version not in (-1, tensor._version))

    def _version_of(self, tensor: torch.Tensor) -> int:
        """How many times ``tensor``'s memory was written (or its geometry changed) since the call started; -1
        where not known."""
        initial_version = self._initial_version.get(storage_key(tensor))
        if initial_version is None:
            initial_version = self._initial_root_version.get(id(view_root(tensor)))
        # An inference tensor (made under the caller's inference mode) set_() onto an input's memory has none.
        if initial_version is None or tensor.is_inference():
            return -1
        return tensor._version - initial_version

    def stands_for(self, fresh: torch.Tensor, tensor: torch.Tensor) -> None:
        """``fresh`` (a ``FreshViews`` stand-in) is ``tensor`` in its current geometry: views of it are views of
        ``tensor``, taken again from the geometry it has now."""
        from_geometry = self._changed_geometry(tensor)
        self.clock += 1
        step = ViewStep(aten.alias.default, (), (), None, records(), self.clock * 1024, from_geometry)
        if from_geometry is not None:
            # Eager's view in its changed geometry carries the history autograd recorded at the change's version
            # (``as_strided_``'s backward reaching only the elements the geometry before it spanned): replayed at
            # that version, its record is no stale one autograd would take again by strides from the base.
            step = dataclasses.replace(step, version=self._version_of(tensor))
        if from_geometry is not None and self._record_stale(tensor):
            step = dataclasses.replace(step, from_base=True)
        self._keep.append(fresh)
        self.nodes[id(fresh)] = _Node(fresh, self.node(tensor), step, geometry_of(tensor))

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
        return node.step.op is aten.detach.default or not self._is_inference(node)

    def refuse_requires_grad_on_inference(self, inputs: Sequence[torch.Tensor]) -> None:
        """Eager's refusal of ``requires_grad_()`` on an inference tensor outside inference mode: after the run,
        an inference input (one that required no grad) or a view or ``detach()`` of one requiring grad had it."""
        nodes = [*self.nodes.values(), *(_Node(t) for t in inputs if id(t) in self._inference_inputs)]
        for node in nodes:
            # (A leaf: one with a history got it from an op autograd recorded, which eager allows.)
            if node.tensor.requires_grad and is_leaf_safely(node.tensor) and self._is_inference(node):
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
        geometries: list[tuple[tuple[int, ...], tuple[int, ...], int] | None] = []
        later: torch.Tensor | None = None  # the tensor of the step appended last (a later one in eager)
        while node.parent is not None:
            assert node.step is not None
            if node.tensor is later:
                # The same object changed in place later (``v = a.data; v.squeeze_(); v.requires_grad_()``):
                # its requires_grad_() is the last step's, made after the change, which eager made on a tensor
                # needing no grad (kept no view, as eager's); made here, the change would replay as a view.
                steps.append(node.step)
            else:
                called = self.made_require_grad.get(id(node.tensor)) is node.tensor
                steps.append(_before_requires_grad(_with_requires_grad_set(node.step, node.tensor, called), node))
            later = node.tensor
            geometries.append(node.parent_geometry)
            node = node.parent
            if stop(node.tensor):
                break
        if node.tensor is tensor:
            return tensor, (), None  # only in-place metadata changes of a tensor that is no view
        root = node.tensor
        # The root's own geometry changes (``v.transpose_()`` before ``v.unfold()``) are no steps of the chain:
        # eager's view has the root object itself as its ``_base``, taken in the geometry the root had then.
        # (A set_() of the root stays a step: it moved the root to other memory.)
        while len(steps) > 1 and steps[-1].in_place and steps[-1].op not in SET_TWINS:
            steps.pop()
            geometries.pop()
        return root, tuple(reversed(steps)), geometries[-1]

    def made_by_custom_function(self, tensor: torch.Tensor, depth: int) -> bool:
        """Whether ``tensor``'s history goes through an autograd.Function's output among the ``depth - 1``
        views above it: replaying the views from their root would lose that Function's backward."""
        node = self.nodes.get(id(tensor))
        if node is None or node.tensor is not tensor:
            return False
        for _ in range(depth):
            if node is None or not node.tensor.requires_grad:
                return False  # no history, or one cut by no_grad
            if made_by_custom_function(node.tensor):
                return True
            if node.step is not None and node.step.op is aten.detach.default:
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
    if func is aten.detach.default:
        return False
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return any(t.is_floating_point() or t.is_complex() for t in outs)


def _resize_to_own_size(func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """A ``resize_`` to the size the tensor has (no memory format to restride to): it changes nothing, and
    autograd bumps the version only when the size changes."""
    if func is not aten.resize_.default or len(args) > 2 or kwargs.get("memory_format") is not None:
        return False
    return isinstance(args[0], torch.Tensor) and list(args[0].shape) == list(args[1])


@functools.cache  # per op: asked for every op dispatched under the recorder
def _composite_implicit(func: Any) -> bool:
    """Whether ``func`` is made of other ops (``CompositeImplicitAutograd``), which autograd's kernel calls."""
    try:
        return bool(func.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd))
    except RuntimeError:  # an op the dispatcher does not know (``prim::device``)
        return False


def _before_requires_grad(step: ViewStep, node: _Node) -> ViewStep:
    """``step``, marked as taken before its parent's ``requires_grad_()`` where the parent needed no grad then and
    is a leaf requiring grad now: eager's view recorded no history, and its replay records none."""
    parent = node.parent
    if not node.of_no_grad or parent is None or not parent.tensor.requires_grad or not is_leaf_safely(parent.tensor):
        return step
    return dataclasses.replace(step, before_requires_grad=True)


def _with_requires_grad_set(step: ViewStep, view: torch.Tensor, called: bool = False) -> ViewStep:
    """``step``, marked to call ``requires_grad_()`` when the view it made requires grad as a leaf of a base
    needing none: only the function's own ``requires_grad_()`` makes one (a view of a base requiring grad
    requires it too, with a history or, taken under no_grad, none). Under the caller's inference mode a view
    requires none whatever its base (``called``: the function's ``requires_grad_()`` on it, seen)."""
    # (An in-place step too: the call may have come after the change, which the replay may make on a tensor of its
    # own, no leaf the step before made require grad: under the caller's inference mode, say.)
    if not view.requires_grad:
        return step
    if called:
        return dataclasses.replace(step, requires_grad_set=True)
    if view._base is not None and view._base.requires_grad:
        return step
    if not is_leaf_safely(view):
        return step
    return dataclasses.replace(step, requires_grad_set=True)


def _set_twin(source: torch.Tensor, set_from: Any) -> tuple[Any, tuple[Any, ...]]:
    """The step standing for ``t.set_(source)``: within the memory ``t`` sat in (``set_from``: its storage and
    geometry then), a move by an offset from where it sat, read from ``source`` as it is now (a later set_() or
    geometry change of it leaves where eager put ``t``), which a replay on the caller's memory can take again;
    else a set_() onto the source (a tensor of the trace; ``meta.collect`` rewrites it where it can)."""
    storage, (_, _, offset) = set_from
    if storage_key(source) == storage and source.layout == torch.strided:
        return set_within, (tuple(source.shape), tuple(source.stride()), int(source.storage_offset()) - int(offset))
    return aten.set.source_Tensor, (source,)


# ``set_``'s out-of-place twins, as a recorded step of a view chain.
SET_TWINS = frozenset(
    {aten.set.source_Tensor, aten.set.source_Storage, aten.set.source_Storage_storage_offset, set_within}
)


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


def _adds_constant(func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """``func`` adds to (subtracts from) its first argument values requiring no grad: its derivative for that
    argument is the identity, and it has none for the others."""
    if func not in (aten.add_.Tensor, aten.add_.Scalar, aten.sub_.Tensor, aten.sub_.Scalar):
        return False
    others = tree_flatten((args[1:], kwargs))[0]
    return not any(isinstance(t, torch.Tensor) and t.requires_grad for t in others)


def base_state(tensor: torch.Tensor) -> int | None:
    """For a view of a base requiring grad, within the base's storage: the base. Eager takes the view's
    history again from it after ``set_()`` (``base.as_strided(size, stride, offset)``, recorded only: the
    geometry may reach past the base's storage), which a stand-in can too while it is the caller's base
    (requiring grad when the call starts; writes into it since are in its history inside the graph, the
    synthetic-base layer making both views of one base)."""
    base = tensor._base
    if base is None or not base.requires_grad or base.dtype != tensor.dtype:
        return None
    return id(base)
