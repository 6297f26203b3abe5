"""What a flat function does to its inputs and how its outputs alias: ``ViewAndMutationMeta``.

The meta is filled once per input signature by ``meta.collect`` and read by
every layer. Each layer derives its inner meta from its outer meta explicitly;
nothing here is mutable, and every invariant between the parts is checked when
an object is built, so a layer that derives an inconsistent meta fails at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, Never, TypeVar, cast

import torch

from meta.indices import IntermediateBase
from meta.symbolic import resolve_sizes, symbolic_geometry
from meta.versions import inherit_creation, uncounted

__all__ = [
    "ComputedAlias",
    "InputAliasInfo",
    "OutputAliasInfo",
    "OutputType",
    "TensorSpec",
    "ViewAndMutationMeta",
    "ViewStep",
    "own_alias",
]

# The input and output index spaces of the stage a meta describes (``meta.indices``): a layer's inner meta is
# typed with its own, so an index of the outer stage used below it does not type-check.
In = TypeVar("In", bound=int, covariant=True)
Out = TypeVar("Out", bound=int, covariant=True)
In2 = TypeVar("In2", bound=int)
Out2 = TypeVar("Out2", bound=int)


class OutputType(enum.Enum):
    """How one output relates to the inputs and to the other outputs."""

    NON_ALIAS = "non_alias"  # fresh memory, computed by the graph
    IS_INPUT = "is_input"  # the very input object, returned as is
    ALIAS_OF_INPUT = "alias_of_input"  # a view of an input: regenerated from it at runtime
    IS_OUTPUT = "is_output"  # the same object as an earlier output
    ALIAS_OF_INTERMEDIATE = "alias_of_intermediate"  # a view of a graph-computed tensor


@dataclass(frozen=True)
class ViewStep:
    """One view op of a chain, replayable on another tensor.

    ``args``/``kwargs`` are the op's arguments after the viewed tensor; a
    multi-output view (``split``, ``unbind``) picks element ``item``.
    ``grad_enabled`` is the grad mode the view was taken under, so a view made
    under ``no_grad`` inside the function comes back without ``grad_fn``.
    ``key`` names the view object the step made in the traced run: chains that
    went through the same object replay into one object, so ``_base`` identities
    between outputs are eager's. ``from_geometry`` is the (size, stride, offset
    relative to the original) the viewed input had when the view was taken, if a
    metadata mutation had changed it by then.
    """

    op: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()
    item: int | None = None
    grad_enabled: bool = True
    key: int = -1
    from_geometry: tuple[tuple[int, ...], tuple[int, ...], int] | None = None
    # How many times the viewed memory had been written when eager took the view (-1: not recorded).
    version: int = -1
    # The step stands for an in-place geometry change (``t_``, ``resize_``): it keeps the tensor what it
    # was, a view of the same base, or no view (a ``detach()`` alias) at all.
    in_place: bool = False
    # The function called ``requires_grad_()`` on the view the step made (a leaf then): so does the replay.
    requires_grad_set: bool = False
    # Some arguments are sizes of the call (``meta.symbolic.RuntimeSize``), traced symbolic.
    runtime_sizes: bool = False
    # ``from_geometry`` is taken from the tensor's base: eager's record of the changed view was stale (changed
    # under no_grad), so autograd took its history again from the base by strides, reaching elements the view's
    # old geometry does not span.
    from_base: bool = False
    # The grad mode the in-place change itself ran in (a ``set_()`` under ``no_grad`` of a view made in grad
    # mode): ``grad_enabled`` is the view's, which its creation meta keeps; autograd records no change made
    # under ``no_grad`` (eager's view then takes its history again from its base by strides).
    change_grad_enabled: bool = True
    # The view was taken of a tensor needing no grad then, which the function made a leaf requiring grad later
    # (``v = x.detach(); w = v.expand(...); v.requires_grad_()``): eager's view took no history then, and keeps
    # none (it requires grad through its base, a leaf with no ``grad_fn``, as its base is).
    before_requires_grad: bool = False

    def changes_view_in_place(self, tensor: torch.Tensor, own: bool) -> bool:
        """Whether the step is replayed as eager ran it, in place (on an alias of ``tensor``, a view with history
        the replay made): a geometry change autograd records on a view requiring grad (``v.unsqueeze_(0)``)
        gives the view the change's node over its history and leaves it fresh at the version the change bumps
        to. Taken out of place at that version, the view before it is stale: autograd takes its history again
        from its base by strides, reaching elements past those of the tensor eager viewed (an ``as_strided`` of
        an input view, at an offset past the input's elements), whose gradients eager's history never reaches."""
        return (
            own
            and self.in_place
            and self.change_grad_enabled
            and self.from_geometry is None
            and tensor._base is not None
            and tensor.requires_grad
            and _in_place_view(self.op) is not None
        )

    def replay(self, tensor: torch.Tensor, own: bool = False) -> torch.Tensor:
        """The step on ``tensor``; ``own``: an object the replay made itself (no caller's or graph's tensor),
        which an in-place ``set_()`` moves itself, as eager's moved its object (views taken of it before keep it
        as their ``_base``)."""
        if self.before_requires_grad and torch.is_grad_enabled() and tensor.is_leaf and tensor.requires_grad:
            # Taken of the leaf as eager took it, before its requires_grad_(): no history recorded.
            tensor.requires_grad_(False)
            try:
                return dataclasses.replace(self, before_requires_grad=False).replay(tensor, own)
            finally:
                tensor.requires_grad_()
        args, kwargs, from_geometry = self.args, dict(self.kwargs), self.from_geometry
        if self.runtime_sizes:
            args, kwargs = resolve_sizes(args), {k: resolve_sizes(v) for k, v in kwargs.items()}
            from_geometry = resolve_sizes(from_geometry)
        if self.in_place and not own and tensor._base is None and not tensor.requires_grad:
            # Eager changed a tensor of its own in place (no view, needing no grad): so does the replay, on an
            # alias of ``tensor`` with a version counter of its own, leaving ``tensor`` (which may share the
            # caller's counter, or be the base of other outputs) as it is.
            tensor = own_alias(tensor)
        if self.changes_view_in_place(tensor, own):
            # An alias takes the change: the view the previous step made may be another chain's (``made``).
            with torch.enable_grad():
                changed: torch.Tensor = torch.ops.aten.alias.default(tensor)
                _in_place_view(self.op)(changed, *args, **kwargs)
            return changed
        in_place_view = _in_place_view(self.op) if own and self.in_place and from_geometry is None else None
        if in_place_view is not None and tensor._base is None and tensor.grad_fn is None:
            # Eager changed its own tensor that is no view (a ``detach()`` alias) in place: views taken of it before
            # keep that very object as their ``_base``, so the replay changes the object it made, not an alias of
            # it. (Its counter may be the caller's, which the layers that count eager's bumps set; a leaf has no
            # history to record the change in: one made to require grad by a chain replayed before.)
            with uncounted(tensor), torch.no_grad():
                in_place_view(tensor, *args, **kwargs)
            if self.requires_grad_set:
                tensor.requires_grad_()
            return tensor
        grad_enabled = self.grad_enabled
        counted: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if own and self.in_place:
            # The counter a moved object shares is the caller's, set to eager's by the layer that counts it; a
            # leaf requiring grad was moved under no_grad (eager refuses it otherwise).
            counted, grad_enabled = uncounted(tensor), grad_enabled and not (tensor.requires_grad and tensor.is_leaf)
        with torch.set_grad_enabled(grad_enabled), counted:
            if from_geometry is not None:
                # A detach() reads no history of its argument (eager's may be a no_grad view whose base was
                # written since, whose history autograd refuses): its geometry is taken without one too.
                with torch.set_grad_enabled(grad_enabled and self.op is not torch.ops.aten.detach.default):
                    size, stride, relative_offset = from_geometry
                    source, base = tensor, tensor._base
                    # A tensor requiring grad that is no view, in that geometry already (a leaf changed under
                    # no_grad), is the tensor eager viewed, index by index: an ``as_strided`` of it would spread
                    # the gradient of an element several indices share (an expanded leaf's) evenly over them.
                    geometries = ((*size, *stride, relative_offset), (*tensor.shape, *tensor.stride(), 0))
                    unchanged = all(type(n) is int for n in (*geometries[0], *geometries[1]))  # (no symbolic guard)
                    unchanged = unchanged and geometries[0] == geometries[1]
                    if self.from_base and base is not None and base.dtype == tensor.dtype:
                        same_memory = base.untyped_storage()._cdata == tensor.untyped_storage()._cdata
                        source = base if same_memory else tensor
                    if not (unchanged and base is None and tensor.requires_grad and not self.from_base):
                        tensor = source.as_strided(size, stride, tensor.storage_offset() + relative_offset)
            # A set_() of the tensor itself, in place (``set_within``), in the grad mode eager ran it in:
            # replayed recorded, its backward would be set_'s, which autograd does not implement.
            changes_itself = self.in_place and self.op is set_within
            with torch.set_grad_enabled(grad_enabled and (self.change_grad_enabled or not changes_itself)):
                out = self.op(tensor, *args, **kwargs)
            if own and self.in_place and not self.change_grad_enabled and _replays_by_view_ops(tensor):
                # Eager changed its view of another dtype than its base under no_grad (``t_``, an ``out=``
                # resize): autograd takes that view's history again by replaying its view ops, which know of no
                # change, a history of the old geometry (whose backward refuses the new shape). So is the
                # replay's view changed itself, in place: autograd takes its history as eager's.
                with torch.no_grad():
                    tensor.as_strided_(out.shape, out.stride(), out.storage_offset())
                out = tensor
        result: torch.Tensor = out if self.item is None else out[self.item]
        if self.in_place and result is not tensor and tensor._base is None and not result.requires_grad:
            result = own_alias(result, counted=True)  # (an out-of-place view op standing for the change)
        if self.requires_grad_set and result.is_leaf and not result.requires_grad:
            result.requires_grad_()
        return result

    def __str__(self) -> str:
        name = getattr(self.op, "__name__", str(self.op))
        args = ", ".join(map(repr, self.args))
        suffix = "" if self.item is None else f"[{self.item}]"
        return f"{name}({args}){suffix}"


def _replays_by_view_ops(view: torch.Tensor) -> bool:
    """Whether autograd takes ``view``'s history again (after a write) by replaying the view ops that made it, not
    by strides from its base: a view requiring grad of another dtype than its base (``x.real`` of complex memory)."""
    base = view._base
    return base is not None and base.dtype != view.dtype and view.requires_grad


@functools.cache  # per op: asked for every in-place step replayed
def _in_place_view(op: Any) -> Any:
    """``t`` -> ``t_``, ``unsqueeze`` -> ``unsqueeze_``: the in-place view op taking the same arguments (None if
    there is none, or ``op`` is no ATen view op)."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return None
    packet = getattr(torch.ops.aten, f"{schema.name.split('::')[-1]}_", None)
    if packet is None:
        return None
    wanted = [(arg.name, str(arg.type)) for arg in schema.arguments]
    for overload in packet.overloads():
        candidate = getattr(packet, overload)
        if (
            torch.Tag.inplace_view in candidate.tags
            and [(arg.name, str(arg.type)) for arg in candidate._schema.arguments] == wanted
        ):
            return candidate
    return None


def set_within(tensor: torch.Tensor, size: Any, stride: Any, delta: int) -> torch.Tensor:
    """``tensor`` itself ``set_()`` onto its own memory at ``delta`` elements from where it sits, in place."""
    return tensor.set_(tensor.untyped_storage(), tensor.storage_offset() + delta, size, stride)


def own_alias(tensor: torch.Tensor, counted: bool = False) -> torch.Tensor:
    """A tensor on ``tensor``'s memory in its geometry, no view of anything, with a version counter of its own:
    0, or 1 if the ``set_()`` making it is ``counted``. An inference tensor's alias is one too (views of it are
    then no views, as eager's)."""
    with torch.no_grad(), torch.inference_mode() if tensor.is_inference() else contextlib.nullcontext():
        geometry = (tensor.untyped_storage(), tensor.storage_offset(), tensor.shape, tensor.stride())
        alias = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
        with contextlib.nullcontext() if counted else uncounted(alias):
            return alias.set_(*geometry)


def replay_views(
    tensor: torch.Tensor,
    chain: tuple[ViewStep, ...],
    made: dict[int, torch.Tensor] | None = None,
    version_before_call: int | None = None,
) -> torch.Tensor:
    """Apply a view chain to ``tensor``: the result aliases it exactly as the traced view did.

    ``made`` memoizes the view objects of one call by step key, so two outputs
    whose traced chains shared an object share the replayed one. With
    ``version_before_call``, the memory's version counter is set, before each
    view is taken, to where eager's was when eager took it: autograd then judges
    later writes to it (and views taken under ``no_grad``) as it did in eager.
    """
    for position, step in enumerate(chain):
        if made is not None and step.key in made:
            tensor = made[step.key]
            continue
        if version_before_call is not None and step.version >= 0 and not tensor.is_inference():
            # (A change replayed in place bumps the counter itself, to the version the step was recorded at.)
            bumps = step.changes_view_in_place(tensor, own=position > 0)
            torch._C._autograd._unsafe_set_version_counter((tensor,), (version_before_call + step.version - bumps,))
        source, tensor = tensor, step.replay(tensor, own=position > 0)
        if position == 0:
            inherit_creation(tensor, source)
        if made is not None and step.key >= 0:
            made[step.key] = tensor
    return tensor


@dataclass(frozen=True)
class TensorSpec:
    """Shape, strides and dtype of a traced tensor: what a tangent must look like."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @staticmethod
    def of(tensor: torch.Tensor) -> TensorSpec:
        # A caller's tensor traced with symbolic sizes: its tangent has them too (else the trace specializes).
        geometry = symbolic_geometry(tensor)
        if geometry is not None:
            return TensorSpec(geometry[0], geometry[1], tensor.dtype)
        return TensorSpec(tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)


@dataclass(frozen=True)
class InputAliasInfo:
    """What the function does to one input, and the input's autograd state."""

    name: str
    requires_grad: bool
    is_leaf: bool
    mutates_data: bool = False
    mutates_metadata: bool = False
    # Every data mutation happened under no_grad (e.g. running stats updates).
    mutations_under_no_grad: bool = False
    # The mutation went through an alias autograd does not track (.data, detach()).
    mutations_hidden_from_autograd: bool = False
    # Some data write (not necessarily every one) ran unseen by autograd: under no_grad or through .data/detach().
    some_mutation_unrecorded: bool = False
    # A write went through this input or a view of it (not only through another input overlapping it).
    written_through: bool = False
    # After a data mutation: whether eager leaves the input requiring grad (``buf.copy_(w * 2)`` does).
    requires_grad_after: bool = False
    # How many times eager bumps the input's version counter.
    version_bumps: int = 0
    # After a metadata mutation: final size, stride, and storage offset relative to the original.
    final_metadata: tuple[tuple[int, ...], tuple[int, ...], int] | None = None
    # An op taking absolute storage offsets (``as_strided`` ...) touched this input's storage: the
    # compiled program is specialized on the input's storage offset.
    offset_sensitive: bool = False
    # One past the last byte of the input's storage anything in the program touched.
    storage_reach: int = 0
    # Every data write into the input's storage went through an input as called, or an ordinary view of one
    # (no ``as_strided`` at an absolute offset, no set_() onto it, no changed geometry): it landed within the
    # elements of the input it went through, so writing those back covers it.
    writes_within_inputs: bool = False
    # Every metadata mutation ran under no_grad (autograd records none of them).
    metadata_mutations_under_no_grad: bool = False
    # A view input: autograd recorded a metadata mutation, then the input's counter moved again (a write, a change
    # under no_grad), so eager's record is stale and its history taken again from its base, by strides, in its
    # final geometry (a gradient reaches elements of the base the geometry before the change did not span).
    metadata_record_stale: bool = False
    # Each in-place geometry change in turn, the storage kept: (size, stride, offset relative to the original,
    # whether autograd recorded it, the input's version after it relative to the call's start). Eager records each
    # on the history the one before left, taken again by strides where a bump in between made a view's stale:
    # ``as_strided_``'s backward reaches only the elements the geometry before it spanned. () where not known.
    metadata_steps: tuple[tuple[tuple[int, ...], tuple[int, ...], int, bool, int], ...] = ()
    # The function called requires_grad_() on the input itself: the caller's tensor requires grad after.
    sets_requires_grad: bool = False
    # ``set_()`` gave the input another storage: ("input", j) that of input j, ("output", k) that of
    # output k, ("fresh", -1) one the function made (its final value is returned by the graph), ("moved_with", j)
    # the one the function made that input j (an earlier one, "fresh") was set_() onto too;
    # ``final_metadata`` then holds the absolute offset in that storage.
    storage_set_to: tuple[str, int] | None = None
    # With ``storage_set_to == ("fresh", -1)``: that storage's size in bytes. The graph returns all of it
    # (eager's storage holds the made tensor's elements outside the input's final geometry too).
    fresh_storage_nbytes: int = 0
    # Autograd recorded the ``set_()`` (under grad mode, onto a tensor requiring grad): the input, and the other
    # views of its base, require grad after, with a history whose derivative raises.
    set_recorded: bool = False
    # ``resize_`` (or an ``out=`` op resizing) grew the input's storage, as eager does in place: its
    # size in bytes after the call; 0 when it keeps its size.
    storage_grown_to: int = 0
    # ``set_()`` under no_grad moved the input, a view of a base requiring grad, to another geometry: eager
    # takes its history again from the base in the new geometry, so later uses differentiate the base there.
    moves_history: bool = False
    # With ``moves_history``, of a leaf: ``set_()`` gave it another shape, which eager's gradients of its later
    # uses have (the MetadataMutation layer moves the caller's tensor before the call, see there).
    moves_to_new_shape: bool = False
    # Below the MetadataMutation layer: that layer changes the caller's tensor's geometry in place after the
    # call, so what the runtime keeps of it for the backward is an alias in the call's geometry.
    restrided_after_call: bool = False
    # Below the MetadataMutation layer, an input it restrides before the call whose final geometry starts above
    # the one it had: the function's uses before the change read memory below the input's elements, which
    # ``storage_reach`` (how far up) does not tell.
    reaches_below: bool = False
    # With ``moves_history``, of a leaf: eager made its gradient accumulator (a use autograd recorded) before any
    # change of its geometry, for the geometry it was called with, which the accumulator keeps: gradients reaching
    # the leaf are summed to that shape, or refused (see ``wrappers.metadata_mutation``).
    accumulator_as_called: bool = False
    # A write autograd records went through a view reaching past the elements of its base (a storage grown by
    # ``out=``/``resize_``): eager's backward refuses that write's history (its ``CopySlices`` reads the view out of
    # the base's gradient), so the write-back records all of it too (see ``wrappers.write_back``).
    writes_recorded_past_base: bool = False
    # A parameter or buffer (``num_params_buffers``): the caller passes the same tensor every call,
    # which a backend may rely on (its ``static_input_indices``).
    static: bool = False

    def __post_init__(self) -> None:
        if self.mutations_under_no_grad and not self.mutates_data:
            raise ValueError(f"input {self.name}: mutations_under_no_grad without a data mutation")
        if self.mutations_hidden_from_autograd and not self.mutates_data:
            raise ValueError(f"input {self.name}: mutations_hidden_from_autograd without a data mutation")
        if self.writes_recorded_past_base and not self.mutates_data:
            raise ValueError(f"input {self.name}: writes_recorded_past_base without a data mutation")
        if self.written_through and not self.mutates_data:
            raise ValueError(f"input {self.name}: written_through without a data mutation")
        if self.fresh_storage_nbytes and self.storage_set_to != ("fresh", -1):
            raise ValueError(f"input {self.name}: fresh_storage_nbytes without a set_() onto a fresh storage")
        if self.metadata_record_stale and (self.metadata_mutations_under_no_grad or not self.mutates_metadata):
            raise ValueError(f"input {self.name}: metadata_record_stale without a metadata mutation autograd recorded")
        if (self.final_metadata is not None) != self.mutates_metadata:
            raise ValueError(f"input {self.name}: final_metadata is set exactly when the metadata is mutated")
        if self.metadata_steps and self.metadata_steps[-1][:3] != self.final_metadata:
            raise ValueError(f"input {self.name}: metadata_steps must end in final_metadata")

    @property
    def mutation_visible_to_autograd(self) -> bool:
        """Whether writing the new value back must be recorded by autograd, as eager's mutation was."""
        return self.mutates_data and not (self.mutations_under_no_grad or self.mutations_hidden_from_autograd)

    @property
    def mutates(self) -> bool:
        return self.mutates_data or self.mutates_metadata or self.sets_requires_grad


@dataclass(frozen=True)
class ComputedAlias(Generic[In]):
    """An output that aliases input ``base_input`` (``view_chain`` from it) with a history no view
    replay gives: an autograd.Function returned (a view of) the input, or, ``in_place``, an op with a
    gradient wrote a ``.data``/``detach()`` alias of it. The graph computes that history."""

    base_input: In
    view_chain: tuple[ViewStep, ...]
    in_place: bool = False


def _renumbered_in(
    arg: Callable[[In2], Out2 | None], index: In2, geometry: tuple[Any, Any, Any]
) -> tuple[Out2, tuple[Any, Any, Any]] | None:
    """A ``new_value_in`` in another stage's input space (None: the input is not passed there)."""
    to = arg(index)
    return None if to is None else (to, geometry)


@dataclass(frozen=True)
class OutputAliasInfo(Generic[In, Out]):
    """How one output aliases, and where an aliasing output is regenerated from.

    Exactly one base field is set for an aliasing output: ``base_input`` for
    ``IS_INPUT``/``ALIAS_OF_INPUT``; ``base_output`` for ``IS_OUTPUT`` and for an
    ``ALIAS_OF_INTERMEDIATE`` whose base the user also gets back;
    ``base_intermediate`` for one whose base is returned only as a hidden
    output. ``view_chain`` rebuilds the output from its base.
    """

    output_type: OutputType
    requires_grad: bool
    spec: TensorSpec
    base_input: In | None = None
    base_output: Out | None = None
    base_intermediate: IntermediateBase | None = None
    view_chain: tuple[ViewStep, ...] = ()
    # A view of an input taken before the function's last write to it: replay it before the write-back,
    # so autograd sees the order eager saw (a no_grad view then an in-place write is an error there).
    replay_before_write_back: bool = False
    # A computed output that eager returns as a view of a tensor the caller never sees (an
    # autograd.Function returning its argument): returned as a view of the graph's value too.
    hidden_view: bool = False
    # A computed output that eager returns as an alias of an input: the graph computes its history,
    # the caller gets it on the alias of the input.
    computed_alias: ComputedAlias[In] | None = None
    # Eager's output is a leaf (no history), for outputs whose ``requires_grad`` the function set itself.
    is_leaf: bool = False
    # Eager's output is a view made under no_grad (or inference mode, or as one of several outputs) of memory
    # requiring grad, written or restrided since: autograd refuses to take its history again (reading
    # ``grad_fn`` raises), and the caller's replayed view is marked so too.
    history_refused: bool = False
    # A view of the input taken after set_() moved it to other memory: taken again from the caller's tensor
    # once it is moved (the first step's ``from_geometry`` offset relative to the input's final offset).
    after_set: bool = False
    # A computed output (with a history) eager returns on memory a resize_ of an alias grew: the graph computes
    # its history, the caller gets it on that memory (a hidden ``whole_storage`` base), taken again by the step.
    on_storage: tuple[IntermediateBase, ViewStep] | None = None
    # A computed output (an autograd.Function's view of a tensor the function made) whose eager ``_base`` the
    # caller gets too, as output ``Out`` (the chain from it): the graph computes its history, the caller gets
    # it on that view of the output (eager's ``_base``, memory shared).
    view_of_output: tuple[Out, tuple[ViewStep, ...]] | None = None
    # A hidden intermediate base that is all of its witness's storage, which a resize_ of an alias grew past
    # every tensor on it: the graph returns the whole memory, its outputs are taken again on it.
    whole_storage: bool = False
    # Below the runtime epilogue: this output is the final value of that input, for the caller to
    # write back (or the inference graph to write itself: ``keep_inference_input_mutations``).
    new_value_of: In | None = None
    # Below the runtime epilogue, on a new value whose write-back autograd records as eager's write: the input's
    # info above, by which the core may write it back itself, cutting the forward there (later reads of the
    # input then follow its new history, as eager's do: ``aot.compile.written_split``).
    written_back: InputAliasInfo | None = None
    # Below the synthetic-base layer: this output is the new value of that input (a base) in that geometry
    # (size, stride, offset from the base's), which the layer writes back into the caller's memory. It sits in a
    # copy of the base laid out as the base: an autograd.Function's backward writing that copy (through this
    # value or another member) writes the input, all of the copy.
    new_value_in: tuple[In, tuple[Any, Any, Any]] | None = None
    # Below the runtime epilogue: a hidden intermediate base each of whose outputs is a view without a history
    # (taken under no_grad): eager's backward never sends it a gradient, so the graph takes no tangent for it.
    no_tangent: bool = False

    def __post_init__(self) -> None:
        bases = {
            "base_input": self.base_input,
            "base_output": self.base_output,
            "base_intermediate": self.base_intermediate,
        }
        allowed: dict[OutputType, set[str]] = {
            OutputType.NON_ALIAS: set(),
            OutputType.IS_INPUT: {"base_input"},
            OutputType.ALIAS_OF_INPUT: {"base_input"},
            OutputType.IS_OUTPUT: {"base_output"},
            OutputType.ALIAS_OF_INTERMEDIATE: {"base_output", "base_intermediate"},
        }
        set_fields = {name for name, value in bases.items() if value is not None}
        if len(set_fields) > 1 or not set_fields <= allowed[self.output_type]:
            raise ValueError(f"{self.output_type}: inconsistent base fields {sorted(set_fields)}")
        if allowed[self.output_type] and not set_fields:
            raise ValueError(f"{self.output_type} needs a base")
        if self.computed_alias is not None and self.output_type != OutputType.NON_ALIAS:
            raise ValueError(f"{self.output_type}: only a computed output is a computed alias of an input")
        if self.on_storage is not None and self.output_type != OutputType.NON_ALIAS:
            raise ValueError(f"{self.output_type}: only a computed output is put on a grown storage")
        if self.view_of_output is not None and not (
            self.output_type == OutputType.NON_ALIAS and self.view_of_output[1]
        ):
            raise ValueError(f"{self.output_type}: only a computed output is put on a view of another output")
        if self.new_value_of is not None and self.output_type != OutputType.NON_ALIAS:
            raise ValueError(f"{self.output_type}: only a computed output is an input's new value")
        if self.after_set and self.output_type != OutputType.ALIAS_OF_INPUT:
            raise ValueError(f"{self.output_type}: only a view of an input is taken after the input's set_()")
        has_chain = self.output_type in (OutputType.ALIAS_OF_INPUT, OutputType.ALIAS_OF_INTERMEDIATE)
        if bool(self.view_chain) != has_chain:
            raise ValueError(f"{self.output_type}: a view chain is {'required' if has_chain else 'not allowed'}")

    def renumbered(self, arg: Callable[[In], In2 | None], out: Callable[[Out], Out2]) -> OutputAliasInfo[In2, Out2]:
        """This info in another stage's index spaces: each input index through ``arg`` (None: an input not
        passed there, of which a computed output is no alias), each output index through ``out``."""
        alias, base, new_value_of = self.computed_alias, self.base_input, self.new_value_of
        new_value_in, view_of = self.new_value_in, self.view_of_output
        to = None if alias is None else arg(alias.base_input)
        return dataclasses.replace(
            cast("OutputAliasInfo[In2, Out2]", self),  # every index field is replaced here
            base_input=None if base is None else arg(base),
            base_output=None if self.base_output is None else out(self.base_output),
            computed_alias=None if alias is None or to is None else ComputedAlias(to, alias.view_chain, alias.in_place),
            new_value_of=None if new_value_of is None else arg(new_value_of),
            view_of_output=None if view_of is None else (out(view_of[0]), view_of[1]),
            new_value_in=None if new_value_in is None else _renumbered_in(arg, *new_value_in),
        )

    @property
    def is_differentiable(self) -> bool:
        return self.requires_grad and (self.spec.dtype.is_floating_point or self.spec.dtype.is_complex)

    def with_requires_grad_set_inside(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor``, requiring grad if eager's output does only because the function called
        ``requires_grad_()`` on it (or on what it was computed from) without any input requiring grad."""
        if not self.is_differentiable or tensor.requires_grad:
            return tensor
        if torch.is_inference_mode_enabled():
            # No value made under inference mode has a history: only the function's requires_grad_() on one
            # (an inference tensor, which inference mode lets require grad) makes it require grad. A view of an
            # input is replayed with its own requires_grad_() (``ViewStep.requires_grad_set``).
            made_leaf = self.output_type == OutputType.NON_ALIAS and self.is_leaf and tensor.is_leaf
            return tensor.requires_grad_() if made_leaf else tensor
        if tensor.is_leaf:
            tensor.requires_grad_()
        if not self.is_leaf and torch.is_grad_enabled():
            tensor = tensor * 1  # eager's output has history back to a leaf the caller never sees
        return tensor


@dataclass(frozen=True)
class ViewAndMutationMeta(Generic[In, Out]):
    """The input/output metadata of one flat function at one layer of the stack, indexing inputs by ``In``
    and outputs by ``Out``.

    ``intermediate_bases`` holds, for each hidden intermediate base, its spec and
    whether it requires grad (it indexes nothing); the outputs that are views of it
    point at it through ``OutputAliasInfo.base_intermediate``.
    """

    input_info: tuple[InputAliasInfo, ...]
    output_info: tuple[OutputAliasInfo[In, Out], ...]
    intermediate_bases: tuple[OutputAliasInfo[Never, Never], ...] = field(default=())
    # The error eager's backward raises for this program (a tensor it saved was modified in place later,
    # through memory shared with an input); the compiled backward raises it too.
    backward_error: str | None = None
    # The program changes geometry in place: trace it under ``meta.fresh_views.FreshViews``.
    fresh_views: bool = False
    # ``(seed, restores)``: the program seeds torch's global generator (``torch.manual_seed(seed)``) before its
    # first draw and, if ``restores``, puts the caller's state back after its last (OpInfo's
    # ``wrapper_set_seed``): eager does it at every call, so the runtime does it around each call.
    reseed: tuple[int, bool] | None = None

    def __post_init__(self) -> None:
        num_inputs, num_outputs = len(self.input_info), len(self.output_info)
        used_bases: set[int] = set()
        for out_idx, info in enumerate(self.output_info):
            where = f"output {out_idx}"
            function_base = info.computed_alias.base_input if info.computed_alias is not None else None
            for base_input in (info.base_input, function_base):
                if base_input is not None and not 0 <= base_input < num_inputs:
                    raise ValueError(f"{where}: base input {base_input} out of range ({num_inputs} inputs)")
            if info.base_output is not None:
                if not 0 <= info.base_output < num_outputs or info.base_output == out_idx:
                    raise ValueError(f"{where}: base output {info.base_output} is not another output")
                if info.output_type == OutputType.IS_OUTPUT and info.base_output > out_idx:
                    raise ValueError(f"{where}: a repeated output must point at its first occurrence")
                base_type = self.output_info[info.base_output].output_type
                if info.output_type == OutputType.ALIAS_OF_INTERMEDIATE and base_type != OutputType.NON_ALIAS:
                    raise ValueError(f"{where}: base output {info.base_output} is itself an alias")
            if info.view_of_output is not None:
                of = info.view_of_output[0]
                # (Eager's ``_base`` is never a view of another tensor: it is no Function's view itself.)
                if not 0 <= of < num_outputs or of == out_idx or self.output_info[of].view_of_output is not None:
                    raise ValueError(f"{where}: output {of} is no other output to be a view of")
            if info.base_intermediate is not None:
                if not 0 <= info.base_intermediate < len(self.intermediate_bases):
                    raise ValueError(f"{where}: intermediate base {info.base_intermediate} out of range")
                used_bases.add(info.base_intermediate)
        if used_bases != set(range(len(self.intermediate_bases))):
            raise ValueError("every intermediate base must be the base of some output")
        for base in self.intermediate_bases:
            if base.output_type != OutputType.NON_ALIAS:
                raise ValueError("an intermediate base is computed by the graph: it must be NON_ALIAS")

    def inputs(self, where: Callable[[InputAliasInfo], bool]) -> tuple[In, ...]:
        """The inputs ``where`` holds for, in this stage's input space."""
        return tuple(cast(In, i) for i, info in enumerate(self.input_info) if where(info))

    def below(
        self,
        input_info: tuple[InputAliasInfo, ...],
        output_info: tuple[OutputAliasInfo[In2, Out2], ...],
        bases: tuple[OutputAliasInfo[Never, Never], ...] | None = None,
    ) -> ViewAndMutationMeta[In2, Out2]:
        """The meta of the stage below a layer, in its index spaces; the rest (``bases`` unless given) as here."""
        bases = self.intermediate_bases if bases is None else bases
        return ViewAndMutationMeta(input_info, output_info, bases, self.backward_error, self.fresh_views, self.reseed)

    @cached_property
    def traced_tangents(self) -> tuple[Out, ...]:
        """Outputs computed by the graph that take a tangent in the backward."""
        return tuple(
            cast(Out, i)
            for i, info in enumerate(self.output_info)
            if info.output_type == OutputType.NON_ALIAS and info.is_differentiable and not info.no_tangent
        )

    @cached_property
    def requires_autograd(self) -> bool:
        """Whether a backward is needed: some graph-computed output has a gradient."""
        # (A hidden base without a tangent still requires grad: eager's views of it do, without a history.)
        return (
            bool(self.traced_tangents)
            or any(b.is_differentiable for b in self.intermediate_bases)
            or any(info.no_tangent and info.is_differentiable for info in self.output_info)
        )

    def describe(self) -> str:
        """The meta in words, one line per input and output."""
        lines = []
        for i, inp in enumerate(self.input_info):
            what = []
            if inp.mutates_data:
                what.append("data mutated" + (" under no_grad" if inp.mutations_under_no_grad else ""))
            if inp.mutates_metadata:
                what.append("metadata mutated")
            grad = "requires grad" if inp.requires_grad else "no grad"
            lines.append(f"input {i} ({inp.name}): {grad}; " + (", ".join(what) or "not mutated"))
        for i, out in enumerate(self.output_info):
            base = ""
            if out.base_input is not None:
                base = f" of input {out.base_input} ({self.input_info[out.base_input].name})"
            elif out.base_output is not None:
                base = f" of output {out.base_output}"
            elif out.base_intermediate is not None:
                base = f" of hidden intermediate {out.base_intermediate}"
            elif out.view_of_output is not None:
                base = f" on a view of output {out.view_of_output[0]}"
            chain = " via " + ".".join(map(str, out.view_chain)) if out.view_chain else ""
            grad = "requires grad" if out.requires_grad else "no grad"
            lines.append(f"output {i}: {out.output_type.value}{base}{chain}; {grad}")
        return "\n".join(lines)
