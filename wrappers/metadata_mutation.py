"""The metadata-mutation layer: below it, no input's size, stride or offset ever changes.

Inside, each input whose metadata the function changes (``t_``, ``transpose_``,
``unsqueeze_``, ``as_strided_`` ...) is replaced by a fresh alias of it (same
memory, its own geometry), so the function changes the alias's geometry and
the layers below see only views and data writes: a write through the alias is
a write into the input's memory, read by every input sharing it.

Outside, after the layers below have written the new data back and rebuilt the
outputs (views of the input replay from the geometry the input had when eager
took them), the caller's tensor gets its final size, stride and offset, under
the caller's grad mode, as eager's in-place view op left it. An output that is
the input itself is returned here.

An input requiring grad whose geometry changes where autograd records nothing
(under ``no_grad``, or before the function's own ``requires_grad_()``) is
restrided *before* the call: eager differentiates it in its final geometry. In
grad mode, unwritten, the layers below see it in that geometry and the function
gets a view of it in the old one, whose later geometry changes take fresh views
of the input (``_restrided_inside``; so too a leaf written unrecorded whose
geometries only permute its own); written, or under the caller's ``no_grad``,
the function gets an old-geometry view from outside (``_restrided_first``).

An input the function calls ``requires_grad_()`` on requires grad before the
call; the function gets an untracked alias of it, and after its
``requires_grad_()`` every op reads a view of the input instead, so uses before
stay untracked and uses after reach the input's ``.grad``, as in eager.

An input ``set_()`` under no_grad keeps its history, as a geometry change autograd recorded before left it
and as in-place ops after extend it: the function gets an alias of it that is no view (autograd would take a
write through a view as one into the input below), the graph also returns the input as it ends, and the
caller's tensor, set_() onto its new memory, adopts that history.

A non-leaf requiring grad whose geometry changes where autograd records it, never written, is restrided before
the call, step by step in grad mode, so the caller's tensor has eager's nodes, ``autograd.grad``'s targets: the
function starts from an alias with its history before, and reads after each change reach that step's tensor
(``_changes_recorded_first``, ``_RecordedChanges``).

A storage the function grows (``resize_``, or an ``out=`` op resizing its
output, past the storage's end) is grown before the call, in place and keeping
its data, as eager grows it: below, the resize is one within the storage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import guard_or_true
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map_only

from meta.eager_state import geometry_of
from meta.errors import UnsupportedMutationError
from meta.fresh_views import KEEPS_OWN_HISTORY, STANDS_FOR_LEAF, STANDS_FOR_NO_VIEW
from meta.indices import DedupedArg, RestridedArg, RestridedOut, UserOut
from meta.storage import offset_of, storage_key, view_root, whole_storage, whole_storage_in
from meta.storage_set import base_as_strided_onto, history_taken_again
from meta.symbolic import resolve_sizes, span_end
from meta.versions import Counters, counter_groups, set_versions, uncounted
from meta.view_and_mutation import (
    InputAliasInfo,
    OutputAliasInfo,
    OutputType,
    TensorSpec,
    ViewAndMutationMeta,
    ViewStep,
    replay_views,
)
from wrappers.base import Runtime, Stage
from wrappers.codegen import Emitter, Source
from wrappers.history import AdoptHistory, GradientTo, history_alias, with_history
from wrappers.output_split import OutputSplit

__all__ = ["MetadataMutation"]

# What ``enter`` hands ``leave``: the caller's tensors to restride, their final geometries, their counters before,
# and views keeping leaves' gradient accumulators alive.
_Entered = tuple[list[torch.Tensor], list[Any], tuple[int, ...], list[torch.Tensor]]


class MetadataMutation:
    """Inputs with metadata mutations get an alias inside and are restrided outside."""

    def __init__(self) -> None:
        self._meta: ViewAndMutationMeta[DedupedArg, UserOut] | None = None
        self._mutated: tuple[DedupedArg, ...] = ()
        self._counter_groups: list[int] = []
        # Inputs the function called requires_grad_() on: the caller's tensors require grad after the call.
        self._requires_grad_set: tuple[DedupedArg, ...] = ()
        self._split: OutputSplit[UserOut, RestridedOut] | None = None
        self._fresh: tuple[DedupedArg, ...] = ()
        # Inputs whose storage the function grows (resize_), and to how many bytes.
        self._grown: tuple[tuple[DedupedArg, int], ...] = ()
        # Leaves requiring grad whose geometry changes under no_grad: restrided before the call.
        self._restrided_first: tuple[DedupedArg, ...] = ()
        # Inputs requiring grad whose geometry changes under no_grad (or before requires_grad_()), never
        # written, in grad mode: restrided before the call, the layers below see their final geometry.
        self._restrided: tuple[DedupedArg, ...] = ()
        # Inputs the function calls requires_grad_() on: they require grad before the call.
        self._grad_from_inside: tuple[DedupedArg, ...] = ()
        # Inputs whose history set_() moves (``InputAliasInfo.moves_history``): their bases are passed too.
        self._moved: tuple[DedupedArg, ...] = ()
        # Inputs set_() under no_grad keeping a history a geometry change autograd recorded gave them.
        self._kept_history: tuple[DedupedArg, ...] = ()
        # Leaves set_() moves to another shape (``InputAliasInfo.moves_to_new_shape``): moved first, their old
        # selves passed too.
        self._reshaped: tuple[DedupedArg, ...] = ()
        self._steps: tuple[Any, Any] | None = None
        # Inputs that are views of an input (no view) whose geometry the function changes.
        self._views_of_changed: frozenset[DedupedArg] = frozenset()
        # Inputs (no view) whose geometry changes, written where autograd sees it (``_written_with_changes``).
        self._written_changed: frozenset[DedupedArg] = frozenset()
        self._views_at_call: frozenset[DedupedArg] = frozenset()
        # Restrided-first leaves that are views: their geometry at the call and their final offset's negation.
        self._leaf_views: dict[DedupedArg, tuple[Any, Any, int]] = {}
        # Outputs viewed again after their base's recorded change from a view taken before it
        # (``_viewed_across_change``): replayed once the caller's tensor has its final geometry and history.
        self._across_change: frozenset[UserOut] = frozenset()
        # Their geometry when the call starts (static): views of them returned are replayed from it.
        self._started_in: dict[DedupedArg, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        # Non-leaves requiring grad whose geometry changes where autograd records it, never written
        # (``_changes_recorded_first``): restrided before the call, in grad mode, step by step; each step's
        # tensor, with its history, is passed after the inputs (and the moved ones' bases and old selves).
        self._recorded_first: tuple[DedupedArg, ...] = ()

    def pre_compile(
        self, outer: Stage[DedupedArg, UserOut]
    ) -> Stage[DedupedArg, UserOut] | Stage[RestridedArg, RestridedOut]:
        # The caller's tensors that are views (``_requiring_grad_first`` gives the layers below none of them).
        self._views_at_call = frozenset(DedupedArg(i) for i, arg in enumerate(outer.args) if arg._base is not None)
        outer = self._requiring_grad_first(outer)
        meta = outer.meta
        self._meta = meta
        self._counter_groups = counter_groups(outer.args)
        self._grown = tuple(
            (DedupedArg(i), info.storage_grown_to) for i, info in enumerate(meta.input_info) if info.storage_grown_to
        )
        # The layers below are compiled for (and traced on) the grown storages.
        _grow_storages(outer.args, self._grown)
        mutated = meta.inputs(lambda info: info.mutates_metadata)
        self._mutated = mutated
        self._requires_grad_set = meta.inputs(lambda info: info.sets_requires_grad)
        if not mutated:
            return outer
        # Told by the caller's tensors: the trace's primals are no views even where the caller's are.
        no_views = frozenset(arg_idx for arg_idx in mutated if outer.args[arg_idx]._base is None)
        # Inputs that are views of one of those: eager takes their history again from it, in its new geometry,
        # and so views of them returned, taken again here once the caller's tensor has it.
        views_of_changed = _views_of(outer.args, no_views, mutated)
        self._views_of_changed = frozenset(view_idx for view_idx, _ in views_of_changed)
        # Inputs written with their geometry changed (``_written_with_changes``): the function gets a stand-in that
        # is no view, the caller's tensor takes its history as it ended, and views of it returned are taken after.
        # (Another input that is a view of it is taken again from that stand-in: ``_view_of_alias``.)
        written_changed = frozenset(
            i
            for i in no_views
            if _written_with_changes(meta.input_info[i])
            and torch.is_grad_enabled()
            and _views_replayable_at_the_end(meta, i, outer.args[i])
            and _static_final_geometry(meta.input_info[i])
            and _elements_reached_change(meta.input_info[i], outer.args[i])
        )
        self._written_changed = written_changed
        # Not a non-leaf that is no view: eager's keeps its history through the change, which uses before and after
        # reach index by index in the geometry it had (``KEEPS_OWN_HISTORY``), none in the final one (seed 29).
        restrided = tuple(
            i
            for i in mutated
            if _restrided_inside(meta.input_info[i], outer.args[i], i in self._grad_from_inside)
            and not (i in no_views and meta.input_info[i].requires_grad and not meta.input_info[i].is_leaf)
        )
        self._restrided = restrided
        restrided_first = tuple(
            i
            for i in mutated
            if i not in restrided and _restrided_first(meta.input_info[i], outer.args[i], i in self._grad_from_inside)
        )
        self._restrided_first = restrided_first
        recorded_first = tuple(
            i
            for i in mutated
            if i not in written_changed
            and i not in restrided
            and i not in restrided_first
            and i not in self._grad_from_inside
            and i not in {base for _, base in views_of_changed}
            and _changes_recorded_first(meta, i, outer.args[i])
            # A view input whose change spans other elements (``as_strided_`` onto others, an expanded one's)
            # stays on the restride after the call: its views taken before, taken again from its base by strides,
            # gave the leaf another gradient than eager's there (test_fuzz_leaf's view-of-view-input programs).
            and (i in no_views or not _elements_reached_change(meta.input_info[i], outer.args[i]))
        )
        self._recorded_first = recorded_first
        # Of those, leaves that are views (``requires_grad_()`` on ``s.t()``): eager's views of them are views of
        # their base, whose history reaches the leaf only until the memory is written (after, autograd takes it
        # again from that base). The stand-in below is no view of that base (``_restrided_view``), so the views
        # returned are taken here, from the caller's tensor, in the geometry it had.
        leaf_views = frozenset(i for i in restrided_first if i in self._views_at_call)
        self._leaf_views = {
            i: (tuple(outer.args[i].shape), tuple(outer.args[i].stride()), -_final_offset(meta.input_info[i]))
            for i in leaf_views
        }

        def across(info: OutputAliasInfo[DedupedArg, UserOut]) -> bool:
            base = info.base_input
            return (
                info.output_type == OutputType.ALIAS_OF_INPUT
                and not info.after_set
                and base in no_views
                and base not in self._grad_from_inside
                and _viewed_across_change(info.view_chain, meta.input_info[base], outer.args[base])
            )

        across_change = frozenset(UserOut(out_idx) for out_idx, info in enumerate(meta.output_info) if across(info))
        self._across_change = across_change
        self._started_in = {
            i: (tuple(outer.args[i].shape), tuple(outer.args[i].stride()))
            for i in written_changed | set(recorded_first)
        }
        split = OutputSplit.of(
            meta,
            lambda info: (
                info.after_set
                or across(info)
                or (info.output_type == OutputType.IS_INPUT and info.base_input in mutated)
                or (
                    info.output_type == OutputType.ALIAS_OF_INPUT
                    and info.base_input in self._views_of_changed | written_changed | leaf_views | set(recorded_first)
                )
                or _taken_after_restride(info, restrided_first)
            ),
            RestridedOut,
        )
        self._split = split
        flat_fn = outer.fn
        # Inputs set_() onto a storage the function made: the graph returns their final value.
        fresh = tuple(i for i in mutated if meta.input_info[i].storage_set_to == ("fresh", -1))
        self._fresh = fresh
        # Inputs whose history eager's set_() keeps: the graph also returns each as it ends, with that history.
        kept_history = tuple(
            i for i in mutated if _history_kept_by_set(meta.input_info[i], outer.args[i]) or i in written_changed
        )
        self._kept_history = kept_history
        inner_args = list(outer.args)
        for arg_idx in restrided_first:
            inner_args[arg_idx] = _stand_in_view(outer.args[arg_idx], meta.input_info[arg_idx])
        # Each restrided input's geometry when the call starts, its offset relative to the final one.
        started: dict[DedupedArg, tuple[Any, Any, int]] = {}
        finals = {arg_idx: meta.input_info[arg_idx].final_metadata for arg_idx in restrided}
        for arg_idx in restrided:
            arg, final = outer.args[arg_idx], meta.input_info[arg_idx].final_metadata
            assert final is not None
            started[arg_idx] = (tuple(arg.shape), tuple(arg.stride()), -final[2])
            inner_args[arg_idx] = _restrided_leaf(arg, meta.input_info[arg_idx])

        # Inputs whose history set_() moves: the function also gets their bases (last), to take it again from.
        moved = tuple(i for i in mutated if meta.input_info[i].moves_history and not meta.input_info[i].is_leaf)
        self._moved = moved
        # Leaves: later uses reach the input itself, element by element (its shape stays).
        moved_leaves = tuple(i for i in mutated if meta.input_info[i].moves_history and meta.input_info[i].is_leaf)
        # Of those, leaves that are views (``requires_grad_()`` on a view of a base requiring none): the function gets
        # an alias that is no view, as eager's input is the leaf itself; a view of it (``aten.alias``) is one of that
        # base to autograd, which, once a write moves the counter, takes its history again from there (none).
        moved_leaf_views = frozenset(i for i in moved_leaves if i in self._views_at_call)
        # Of those, leaves moved to another shape: eager's gradients of later uses have it, which the compiled
        # function's gradient for the input has only where the input has it when the call starts. So the
        # caller's tensor is moved first (onto memory of its own, in its final geometry), and the function
        # gets, in its place, a leaf on its old self (last), whose views and reads before the set_() see the
        # old memory; after, later uses (views taken before too) differentiate the moved input.
        reshaped = tuple(i for i in moved_leaves if meta.input_info[i].moves_to_new_shape)
        self._reshaped = reshaped
        _refuse_views_before_move(meta, reshaped)
        num_inputs = len(outer.args)
        inner_args += [_base_of(outer.args[arg_idx]) for arg_idx in moved]
        # Of the inputs that are no views, those set_() under no_grad that carry a history, and those written with
        # their geometry changed: the function gets no view of the input.
        set_with_history = frozenset(
            i for i in no_views if _set_keeping_own_history(meta.input_info[i]) or i in kept_history
        )
        inner_args += [_old_self(outer.args[arg_idx]) for arg_idx in reshaped]
        for arg_idx in reshaped:
            inner_args[arg_idx] = _moved_first(outer.args[arg_idx], meta.input_info[arg_idx])
        num_before_steps = len(inner_args)
        for arg_idx in recorded_first:
            inner_args[arg_idx] = history_alias(outer.args[arg_idx])
            inner_args += [
                _step_stand_in(outer.args[arg_idx], step) for step in meta.input_info[arg_idx].metadata_steps
            ]

        # Of the inputs that are no views, the non-leaves requiring grad: eager's tensor keeps its history through a
        # geometry change autograd does not record (``KEEPS_OWN_HISTORY``).
        keep_history = frozenset(
            i for i in no_views if meta.input_info[i].requires_grad and not meta.input_info[i].is_leaf
        )

        def inner_fn(*all_args: torch.Tensor) -> list[torch.Tensor]:
            args, bases = all_args[:num_inputs], all_args[num_inputs : num_inputs + len(moved)]
            working = list(args)
            for arg_idx in mutated:
                working[arg_idx] = (
                    history_alias(args[arg_idx])
                    if arg_idx in set_with_history or arg_idx in moved_leaf_views
                    else _alias_as_made(args[arg_idx], arg_idx in no_views, arg_idx in keep_history)
                )
            old_selves = all_args[num_inputs + len(moved) : num_before_steps]
            for arg_idx, old in zip(reshaped, old_selves, strict=True):
                working[arg_idx] = _alias_as_made(old, arg_idx in no_views)
            changed_histories: dict[int, tuple[torch.Tensor, tuple[torch.Tensor, ...]]] = {}
            same_span: set[int] = set()
            changed_views: set[int] = set()
            position = num_before_steps
            for arg_idx in recorded_first:
                # No view of the input: its in-place geometry changes are its own, and after each it takes the
                # history of that step's tensor, which stands for it (``_RecordedChanges``).
                working[arg_idx] = history_alias(args[arg_idx])
                num_steps = len(meta.input_info[arg_idx].metadata_steps)
                changed_histories[id(working[arg_idx])] = (working[arg_idx], all_args[position : position + num_steps])
                # Of a view input, eager's views taken before a change are views of its base, whose history they
                # take again past the input's nodes: they keep the stand-in's history before (the same elements
                # of the base), never the step's. (Told by the caller's tensors: the trace's are no views.)
                if arg_idx not in no_views:
                    changed_views.add(id(working[arg_idx]))
                elif not _elements_reached_change(meta.input_info[arg_idx], args[arg_idx]):
                    same_span.add(id(working[arg_idx]))
                position += num_steps
            for arg_idx in restrided:
                # The leaf is in its final geometry; the function starts from the one it had, a view of it:
                # the geometry changes then take fresh views of the leaf, which gradients reach directly. A view
                # of memory below (a synthetic base) is taken from that memory: eager's uses before the change
                # reach every element the old geometry spans, the final one may span fewer.
                size, stride, relative_offset = started[arg_idx]
                arg = args[arg_idx]
                # Of a leaf view requiring grad of a root needing none, the gradient is the leaf's: from an alias of
                # it that is no view (a counter moved by the function's set_() would take a view's history again
                # from that root, which has none).
                root = view_root(arg)
                source = root if root.dtype == arg.dtype else arg
                if arg.requires_grad and not root.requires_grad:
                    source = history_alias(arg)
                working[arg_idx] = source.as_strided(size, stride, arg.storage_offset() + relative_offset)
                setattr(working[arg_idx], STANDS_FOR_LEAF, meta.input_info[arg_idx].is_leaf)
            for view_idx, base_idx in views_of_changed:
                working[view_idx] = _view_of_alias(args[view_idx], working[base_idx], base_idx in written_changed)
            bases_of = {id(working[i]): (working[i], base, False) for i, base in zip(moved, bases, strict=True)}
            bases_of |= {id(working[i]): (working[i], args[i], True) for i in moved_leaves}
            with contextlib.ExitStack() as stack:
                if changed_histories:
                    stack.enter_context(_RecordedChanges(changed_histories, same_span, changed_views))
                if bases_of:
                    stack.enter_context(_MovedHistories(bases_of))
                outs = list(flat_fn(*working))
            # A fresh storage whole, from its start: eager's holds elements outside the final geometry too.
            made = [whole_storage(working[arg_idx]) for arg_idx in fresh]
            ended = [working[arg_idx].clone(memory_format=torch.contiguous_format) for arg_idx in kept_history]
            return [*(outs[out] for out in split.kept), *made, *ended]

        def final_value(arg_idx: DedupedArg) -> OutputAliasInfo[RestridedArg, RestridedOut]:
            info = meta.input_info[arg_idx]
            dtype = outer.args[arg_idx].dtype
            numel = info.fresh_storage_nbytes // outer.args[arg_idx].element_size()
            return OutputAliasInfo(OutputType.NON_ALIAS, requires_grad=False, spec=TensorSpec((numel,), (1,), dtype))

        def as_ended(arg_idx: DedupedArg) -> OutputAliasInfo[RestridedArg, RestridedOut]:
            final = meta.input_info[arg_idx].final_metadata
            assert final is not None
            spec = TensorSpec(final[0], tuple(torch.empty(final[0], device="meta").stride()), outer.args[arg_idx].dtype)
            return OutputAliasInfo(OutputType.NON_ALIAS, requires_grad=True, spec=spec)

        inner_meta = meta.below(
            tuple(
                _as_below(
                    info,
                    is_leaf=info.is_leaf and DedupedArg(i) not in restrided_first,
                    reaches_below=DedupedArg(i) in started and _moved_up(info),
                )
                if DedupedArg(i) not in reshaped
                # The caller's tensor moved first: its writes are its old self's.
                else InputAliasInfo(info.name, requires_grad=True, is_leaf=True)
                for i, info in enumerate(meta.input_info)
            )
            + tuple(
                InputAliasInfo(f"{meta.input_info[i].name}_base", requires_grad=True, is_leaf=inner_args[n].is_leaf)
                for n, i in enumerate(moved, num_inputs)
            )
            + tuple(_as_below(meta.input_info[i], name=f"{meta.input_info[i].name}_before_set") for i in reshaped)
            + tuple(
                InputAliasInfo(f"{meta.input_info[i].name}_step{k}", requires_grad=True, is_leaf=False)
                for i in recorded_first
                for k in range(len(meta.input_info[i].metadata_steps))
            ),
            split.inner_output_info([_from_final(info, started, finals) for info in meta.output_info], RestridedArg)
            + tuple(final_value(i) for i in fresh)
            + tuple(as_ended(i) for i in kept_history),
        )
        return Stage(inner_fn, inner_args, inner_meta)

    def _requiring_grad_first(self, outer: Stage[DedupedArg, UserOut]) -> Stage[DedupedArg, UserOut]:
        """An input the function calls ``requires_grad_()`` on is a leaf requiring grad from then on: uses
        after the call reach it in the backward (its ``.grad``), views of it returned require grad. So the
        caller's tensor requires grad before the call, the layers below see an input requiring grad, and
        the function gets an untracked alias of it whose ``requires_grad_()`` attaches it to the input's
        history (see ``_RequiresGradInside``): uses before the call stay untracked, as in eager."""
        meta = outer.meta
        chosen = meta.inputs(
            lambda info: (
                info.sets_requires_grad
                and (
                    not info.mutates_metadata
                    or _restrided_inside_allowed(info)
                    or _written_then_restrided(info)
                    or _recorded_under_callers_no_grad(meta)
                    or _set_in_grad_mode(info)
                )
                and info.storage_grown_to == 0
            )
        )
        self._grad_from_inside = chosen
        if not chosen:
            return outer
        flat_fn = outer.fn

        # The caller's tensors that are views (of a base needing no grad: the signature tells them).
        views = {arg_idx for arg_idx in chosen if outer.args[arg_idx]._is_view()}
        set_later = {
            arg_idx: meta.input_info[arg_idx].name
            for arg_idx in chosen
            if meta.input_info[arg_idx].storage_set_to is not None
        }

        def inner_fn(*args: torch.Tensor) -> list[torch.Tensor]:
            working = list(args)
            mode = _RequiresGradInside()
            for arg_idx in chosen:
                working[arg_idx] = mode.untracked(args[arg_idx], arg_idx in views, set_later.get(arg_idx))
            with mode:
                return list(flat_fn(*working))

        def inside(info: InputAliasInfo) -> InputAliasInfo:
            # A write before requires_grad_() wrote a tensor needing no grad, one after went around autograd
            # (a leaf requiring grad is written only so): eager's writes leave no history on the input.
            hidden = info.mutates_data and not info.mutations_under_no_grad
            return dataclasses.replace(
                info, requires_grad=True, sets_requires_grad=False, mutations_hidden_from_autograd=hidden
            )

        inner_args = list(outer.args)
        for arg_idx in chosen:
            inner_args[arg_idx] = _made_leaf(outer.args[arg_idx])

        def untracked_view(info: OutputAliasInfo[DedupedArg, UserOut]) -> OutputAliasInfo[DedupedArg, UserOut]:
            # A view without history: taken under no_grad, or before requires_grad_() (it requires grad then, as
            # its base does, with no history of its own): taken again without one (then made to require grad).
            if info.output_type != OutputType.ALIAS_OF_INPUT or info.base_input not in chosen:
                return info
            if info.requires_grad and not info.is_leaf:
                return info
            chain = tuple(dataclasses.replace(step, grad_enabled=False) for step in info.view_chain)
            return dataclasses.replace(info, view_chain=chain)

        inner_meta = dataclasses.replace(
            meta,
            input_info=tuple(inside(info) if i in chosen else info for i, info in enumerate(meta.input_info)),
            output_info=tuple(untracked_view(info) for info in meta.output_info),
        )
        return Stage(inner_fn, inner_args, inner_meta)

    def post_compile(self, inner: Runtime) -> Runtime:
        return _setting_requires_grad_first(self._post_compile(inner), self._grad_from_inside)

    def _post_compile(self, inner: Runtime) -> Runtime:
        meta, mutated, split = self._meta, self._mutated, self._split
        assert meta is not None, "post_compile before pre_compile"
        if not mutated:
            inner = _growing_storages(inner, self._grown) if self._grown else inner
            return _setting_requires_grad(inner, self._requires_grad_set)
        assert split is not None
        final = [(arg_idx, meta.input_info[arg_idx]) for arg_idx in mutated]
        fresh, restrided_first, restrided, moved = self._fresh, self._restrided_first, self._restrided, self._moved
        kept_history = self._kept_history
        reshaped = self._reshaped
        views_of_changed = self._views_of_changed
        written_changed = self._written_changed
        leaf_views = self._leaf_views
        across_change = self._across_change
        across_bases = {meta.output_info[out_idx].base_input for out_idx in across_change}
        started_in = self._started_in
        recorded_first = self._recorded_first
        recorded_first_inputs = frozenset(recorded_first)
        counters = Counters([(arg_idx, info.version_bumps) for arg_idx, info in final], self._counter_groups)
        accumulators_as_called = [arg_idx for arg_idx, info in final if info.accumulator_as_called]

        def enter(args: list[torch.Tensor]) -> tuple[list[torch.Tensor], _Entered]:
            """Before the inner call: its arguments (restrided inputs, moved ones' bases), and what ``leave`` reads."""
            targets = [args[arg_idx] for arg_idx, _ in final]
            # Under dynamic shapes, this call's values of the final geometries: read before any input changes.
            geometries = [resolve_sizes(info.final_metadata) for _, info in final]
            before = counters.read(args)
            # Eager made these leaves' gradient accumulators before their geometry changed, for the geometry they
            # have now, which an accumulator keeps (gradients reaching the leaf are summed to that shape, or
            # refused): made here too, kept alive until the outputs reaching them are made.
            with torch.enable_grad():
                anchors = [args[i].view_as(args[i]) for i in accumulators_as_called if args[i].requires_grad]
            inner_args = list(args) + [_base_of(args[arg_idx]) for arg_idx in moved]
            inner_args += [_old_self(args[arg_idx]) for arg_idx in reshaped]
            for arg_idx in reshaped:
                _move_first(args[arg_idx], meta.input_info[arg_idx])
            for arg_idx in restrided_first:
                inner_args[arg_idx] = _restrided_view(args[arg_idx], meta.input_info[arg_idx])
            for arg_idx in restrided:
                _restride(args[arg_idx], meta.input_info[arg_idx])
            for arg_idx in recorded_first:
                v = counters.before_of(before, arg_idx)
                assert v is not None
                # The function starts from the tensor as it is, its history before the changes (no view: one
                # would take its history again from the changed tensor).
                inner_args[arg_idx] = history_alias(args[arg_idx])
                inner_args += _changed_in_steps(args[arg_idx], meta.input_info[arg_idx], v)
            # As in ``_restrided_view``: views the function takes before eager's change get eager's counter.
            counters.restore(args, before)
            return inner_args, (targets, geometries, before, anchors)

        def leave(args: list[torch.Tensor], inner_outs: list[Any], entered: _Entered) -> list[Any]:
            """After the inner call: the caller's tensors in their final geometry, the outputs tied to them."""
            targets, geometries, before, _ = entered
            # The geometries the caller's tensors start in, to take views eager took before a change from.
            started = {base: geometry_of(args[base]) for base in across_bases if base is not None}
            num_kept, num_fresh = len(split.kept), len(fresh)
            wholes = inner_outs[num_kept : num_kept + num_fresh]
            new_storages = {arg_idx: _storage_of(whole) for arg_idx, whole in zip(fresh, wholes, strict=True)}
            histories = dict(zip(kept_history, inner_outs[num_kept + num_fresh :], strict=True))
            inner_outs = inner_outs[:num_kept]

            def the_input(out: UserOut, info: OutputAliasInfo[DedupedArg, UserOut]) -> torch.Tensor | None:
                assert info.base_input is not None
                replayed = info.after_set or info.output_type == OutputType.ALIAS_OF_INPUT  # (in the loop below)
                return None if replayed else args[info.base_input]

            outs = split.assemble(meta, inner_outs, the_input)
            # Each set_() takes its source's memory as the call left it, though the loop below may move that
            # source first (``a1.set_(a0)`` then ``a0.set_(a0.clone())``): read them all before it runs.
            sources = [_set_source(info, args, outs) for _, info in final]
            retaken = []  # views whose history eager takes again in their final geometry
            for target, (arg_idx, info), geometry, source in zip(targets, final, geometries, sources, strict=True):
                assert geometry is not None
                size, stride, relative_offset = geometry
                if info.storage_set_to is not None:
                    storage = source.untyped_storage() if source is not None else new_storages[_made_for(info, arg_idx)]
                    if info.set_recorded:
                        # A view whose base the synthetic-base layer's write-back gave a history (a recorded write
                        # of another view of it) has its own taken again only when asked: unasked, autograd's
                        # in-place check judges it a leaf requiring grad and refuses the set_() eager made.
                        target.grad_fn  # noqa: B018
                    if info.set_recorded and source is not None:
                        # Eager's set_() of a tensor was recorded (its derivative raises): the target, and the
                        # other views of its base, require grad after, as eager's do. Replayed under grad mode:
                        # the function's set_() may sit in an enable_grad() region of a no_grad caller.
                        if source.dtype != target.dtype:  # (``t.set_(complex_input.real)``: the geometry is t's)
                            source = whole_storage_in(source, target.dtype)
                        with torch.enable_grad():
                            target.set_(source.as_strided(size, stride, relative_offset))  # type: ignore[call-overload]
                        continue
                    if info.set_recorded and source is None:
                        # Onto memory the function made (``t.set_(a * 2)``), recorded: the target requires grad
                        # after, with set_'s history as eager's. The graph's value of that memory carries no
                        # history of the made tensor, so a leaf on it stands in for the source (set_'s
                        # derivative raises: no gradient reaches it).
                        stand_in = torch.empty(0, dtype=target.dtype, device=target.device)
                        stand_in.set_(storage, relative_offset, size, stride)
                        stand_in.requires_grad_(not target.requires_grad)
                        with torch.enable_grad():
                            target.set_(stand_in)  # type: ignore[call-overload]
                        continue
                    with torch.no_grad():
                        target.set_(storage, relative_offset, size, stride)
                    if arg_idx in histories:
                        with_history(AdoptHistory, target, histories[arg_idx])
                    elif info.set_recorded and torch.is_grad_enabled() and not target.requires_grad:
                        # Eager recorded its set_() onto a source requiring grad the function made: the target
                        # requires grad after, with set_'s history, whose derivative raises whatever the source.
                        target.set_(torch.ops.aten.alias.default(target).detach().requires_grad_())
                    retaken.append(target)
                    continue
                if arg_idx in histories:
                    # Written through a stand-in that is no view (``_written_with_changes``): the caller's tensor, in
                    # its final geometry, takes the stand-in's history as it ended, eager's.
                    with torch.no_grad():
                        target.as_strided_(size, stride, target.storage_offset() + relative_offset)
                    with_history(AdoptHistory, target, histories[arg_idx])
                    continue
                if arg_idx in restrided_first or arg_idx in restrided or arg_idx in recorded_first_inputs:
                    continue
                # In eager's grad mode at the change: t_() on a tensor with history is recorded; under no_grad
                # it is not, and a leaf requiring grad may change its geometry there. A record a later write made
                # stale is taken again, as one never made.
                recorded = torch.is_grad_enabled() and not info.metadata_mutations_under_no_grad
                recorded = recorded and not info.metadata_record_stale
                if recorded and target.requires_grad and len(info.metadata_steps) > 1:
                    # Several changes: each in turn, in its grad mode, at eager's version, so autograd records each
                    # on the history the one before left (taken again by strides where eager's was stale). One
                    # restride to the final geometry would reach elements a step in between no longer spans.
                    v = counters.before_of(before, arg_idx)
                    assert v is not None
                    target.grad_fn  # noqa: B018  (its history taken again first: see the one-change case below)
                    start = target.storage_offset()
                    for step_size, step_stride, step_offset, step_recorded, step_version in info.metadata_steps:
                        if step_recorded:  # (an unrecorded one bumps the counter past the view's record: stale)
                            set_versions([target], [v + step_version - 1])
                        with torch.set_grad_enabled(step_recorded):
                            target.as_strided_(step_size, step_stride, start + step_offset)
                    continue
                if recorded and target.requires_grad and info.version_bumps:
                    # The recorded change bumps the counter to eager's final value, and autograd's record of
                    # the view is taken at it: setting the counter afterwards would make it stale.
                    v = counters.before_of(before, arg_idx)
                    assert v is not None
                    set_versions([target], [v + info.version_bumps - 1])
                if recorded and target.requires_grad:
                    # A view whose base the layers below wrote back into (eager wrote through the view) has its
                    # history taken again only when asked: unasked, autograd judges it a leaf requiring grad and
                    # refuses the change eager made.
                    target.grad_fn  # noqa: B018
                with torch.set_grad_enabled(recorded):
                    target.as_strided_(size, stride, target.storage_offset() + relative_offset)
                if not recorded and info.version_bumps:
                    # Eager's counter moved: its record of the view is taken again, in the geometry it ends in
                    # (the layers below wrote it back in the old one, where the record was taken).
                    retaken.append(target)
            counters.finish(args, before)
            # (A view input of a changed input: eager's record of it is stale once the input's geometry changed.)
            for target in retaken + [args[view_idx] for view_idx in views_of_changed]:
                _retake_view_history(target)
            made: dict[int, torch.Tensor] = {}
            after_set = [
                (out_idx, out_info)
                for out_idx, out_info in enumerate(meta.output_info)
                if out_info.after_set
                or out_idx in across_change
                or (
                    out_info.output_type == OutputType.ALIAS_OF_INPUT
                    and out_info.base_input
                    in views_of_changed | written_changed | leaf_views.keys() | recorded_first_inputs
                )
                or _taken_after_restride(out_info, restrided_first)
            ]
            for out_idx, out_info in after_set:  # taken from the caller's tensor in its new memory (or geometry)
                base = out_info.base_input
                assert base is not None
                # At eager's version when eager took it: a view taken under no_grad, then changed, refuses its
                # history as eager's does.
                at = counters.before_of(before, base)
                chain = out_info.view_chain
                if base in written_changed or base in recorded_first_inputs:  # it has its final geometry now
                    chain = (_from_final_geometry(chain[0], meta.input_info[base], started_in[base]), *chain[1:])
                elif base in leaf_views and chain[0].from_geometry is None:
                    # Taken before the change (``leaf_views``), in the geometry it had; the caller's tensor has its
                    # final one.
                    chain = _chain_from_final(chain, leaf_views[base], None)
                elif base in restrided_first:  # restrided in ``enter``: the geometry is relative to its final one
                    chain = _chain_from_restrided(chain, geometries[mutated.index(base)])
                elif out_idx in across_change:  # its first step from the geometry the caller's tensor had then
                    chain = (_from_geometry_then(chain[0], started[base], args[base]), *chain[1:])
                outs[out_idx] = replay_views(args[base], chain, made, at)
            if after_set:
                counters.finish(args, before)
            return outs

        # The call's plan, in two steps the generated code calls too (``emit_post_compile``).
        self._steps = (enter, leave)

        def run(args: list[torch.Tensor]) -> list[Any]:
            inner_args, entered = enter(args)
            return leave(args, inner(inner_args), entered)

        # After the restride: eager changed the geometry before requires_grad_() (the other order raises).
        grown = _growing_storages(run, self._grown) if self._grown else run
        return _setting_requires_grad(grown, self._requires_grad_set)

    def emit_post_compile(self, inner: Emitter) -> Emitter:
        """``post_compile``'s runtime with the layers below inlined: the same plan (inputs requiring grad
        first, storages grown, the geometry steps, inputs requiring grad after), read from the source."""
        first, grown, steps, after = self._grad_from_inside, self._grown, self._steps, self._requires_grad_set
        names = [info.name for info in self._meta.input_info] if self._meta is not None else []

        def emit(source: Source, args: str) -> str:
            if first:
                source.line("# metadata mutation: inputs the function calls requires_grad_() on require grad first")
                targets = source.fresh("requiring")
                listed = ", ".join(f"{args}[{i}]" for i in first)
                t = source.fresh("t")
                source.line(f"{targets} = [{t} for {t} in ({listed},) if not {t}.requires_grad]")
                with source.block(f"for {t} in {targets}:"):
                    source.line(f"{t}.requires_grad_()")
                with source.block("try:"):
                    outs = emit_rest(source, args)
                with source.block("except BaseException:"):
                    with source.block(f"for {t} in {targets}:"):
                        source.line(f"{t}.requires_grad_(False)")
                    source.line("raise")
                return outs
            return emit_rest(source, args)

        def emit_rest(source: Source, args: str) -> str:
            if grown:
                source.line(f"{source.const(_grow_storages, 'grow_storages')}({args}, {source.const(grown, 'grown')})")
            if steps is None:
                outs = inner(source, args)
            else:
                enter, leave = steps
                changed = ", ".join(names[i] for i in self._mutated)
                source.line(f"# metadata mutation: {changed} restrided as eager leaves them")
                inner_args, entered = source.fresh("aliased"), source.fresh("entered")
                source.line(f"{inner_args}, {entered} = {source.const(enter, 'enter_geometry')}({args})")
                inner_outs = inner(source, inner_args)
                outs = source.fresh("outs")
                source.line(f"{outs} = {source.const(leave, 'final_geometry')}({args}, {inner_outs}, {entered})")
            for i in after:
                with source.block(f"if not {args}[{i}].requires_grad:"):
                    source.line(f"{args}[{i}].requires_grad_()")
            return outs

        return emit


def _set_source(info: InputAliasInfo, args: list[torch.Tensor], outs: list[Any]) -> torch.Tensor | None:
    """An alias of the input or output whose memory ``info``'s input is set_() onto (None: a fresh storage, or
    no set_()), taken before any input moves; an alias keeps the source's memory and history."""
    if info.storage_set_to is None or info.storage_set_to[0] not in ("input", "output"):
        return None
    kind, index = info.storage_set_to
    alias: torch.Tensor = torch.ops.aten.alias.default(args[index] if kind == "input" else outs[index])
    return alias


def _made_for(info: InputAliasInfo, arg_idx: DedupedArg) -> DedupedArg:
    """The input whose storage made inside (returned by the graph) ``info``'s input is set_() onto."""
    assert info.storage_set_to is not None
    kind, index = info.storage_set_to
    return DedupedArg(index) if kind == "moved_with" else arg_idx


def _alias_as_made(arg: torch.Tensor, stands_for_no_view: bool, keeps_history: bool = False) -> torch.Tensor:
    """An alias of ``arg`` that autograd judges as ``arg``: taken in grad mode whatever the caller's (an input
    that is no view is no view made under no_grad, which an enable_grad region could not read once its
    geometry changed), then marked as made where ``arg`` was made, if a view. An input that is no view and
    needs no grad gets a detached alias: no view either, so a ``requires_grad_()`` inside makes it a leaf as it
    makes eager's, from which autograd takes views (of another dtype too) again, not from the input below.
    ``stands_for_no_view``: the caller's tensor is no view (eager takes views of it again from it, not from a
    base); the trace's ``arg`` may be none where the caller's is one. ``keeps_history``: it is a non-leaf too,
    whose history eager keeps through a geometry change under no_grad (``meta.fresh_views.KEEPS_OWN_HISTORY``)."""
    if arg._base is None and not arg.requires_grad:
        return arg.detach()
    with torch.enable_grad():
        alias: torch.Tensor = torch.ops.aten.alias.default(arg)
    _mark_as_made(alias, arg)
    if stands_for_no_view:
        setattr(alias, STANDS_FOR_NO_VIEW, True)
        setattr(alias, KEEPS_OWN_HISTORY, keeps_history)
    return alias


def _set_keeping_own_history(info: InputAliasInfo) -> bool:
    """A non-leaf requiring grad ``set_()`` under no_grad: eager's keeps its history, which in-place ops after
    extend (a write in grad mode), as they do no other tensor's. A view of the input standing for it would have
    autograd take them as writes into the input below, whose gradient is then read after them."""
    return info.storage_set_to is not None and not info.set_recorded and info.requires_grad and not info.is_leaf


def _written_with_changes(info: InputAliasInfo) -> bool:
    """A non-leaf requiring grad (no view) whose geometry changes, written where autograd sees it: eager's write
    extends its own history, before or after the recorded changes (an ``as_strided_``'s backward reaching only
    the elements the geometry before it spanned). Through a view of the input the write would be one into the
    input below, scattered by the final geometry's strides past those changes."""
    return info.requires_grad and not info.is_leaf and info.mutation_visible_to_autograd


def _static_final_geometry(info: InputAliasInfo) -> bool:
    # The no-view stand-in's ending value is specified by its final sizes; symbolic ones (dynamic shapes) keep
    # the view stand-in, as before that route existed.
    final = info.final_metadata
    return final is not None and all(isinstance(v, int) for v in (*final[0], *final[1]))


def _elements_reached_change(info: InputAliasInfo, arg: torch.Tensor) -> bool:
    """Whether a geometry change of ``arg`` spans other elements than it did (``as_strided_``, ``resize_``): a
    change of shape alone (``squeeze_``, ``t_``) reaches the same elements, its backward each of them, and the
    input keeps its view stand-in (the no-view one gave a tensor saved before a ``squeeze_`` the new shape in
    the backward: seed 22 program 4572)."""

    def span(size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> tuple[int, int, int]:
        return math.prod(size), offset, span_end(size, stride, offset)

    first = span(tuple(arg.shape), tuple(arg.stride()), 0)
    steps = info.metadata_steps or ((info.final_metadata,) if info.final_metadata is not None else ())
    return any(span(*step[:3]) != first for step in steps)


def _views_replayable_at_the_end(
    meta: ViewAndMutationMeta[DedupedArg, UserOut], arg_idx: DedupedArg, arg: torch.Tensor
) -> bool:
    """Whether every output that is a view of input ``arg_idx`` can be replayed on the caller's tensor once it is
    in its final geometry (``_from_final_geometry``): the geometry it was taken in is static."""

    def static(step: ViewStep) -> bool:
        return not step.runtime_sizes and _static(step.from_geometry or (arg.shape, arg.stride(), 0))

    final = meta.input_info[arg_idx].final_metadata
    return (
        final is not None
        and _static(final)
        and all(
            bool(info.view_chain) and static(info.view_chain[0])
            for info in meta.output_info
            if info.output_type == OutputType.ALIAS_OF_INPUT and info.base_input == arg_idx
        )
    )


def _viewed_across_change(chain: tuple[ViewStep, ...], info: InputAliasInfo, arg: torch.Tensor) -> bool:
    """Whether a view of input ``arg`` (no view, requiring grad) is taken, after the function's last change of
    its geometry, of a view taken before it (``v = a[:, ::2]; a.as_strided_(...); v.t()``), autograd recording
    a change: eager's record of the view taken before is stale then, so its history is taken again from the
    input's new history, by strides (an ``as_strided_``'s backward reaching only the elements it spans), and the
    view after is taken on that. Replayed on the caller's tensor before its change, the chain would keep the old
    history. A change of shape alone (``t_``) reaches the same elements."""
    steps = info.metadata_steps
    recorded = torch.is_grad_enabled() and not info.metadata_mutations_under_no_grad and bool(steps)
    if not (recorded and info.requires_grad and not info.is_leaf):
        return False
    if info.storage_set_to is not None or info.storage_grown_to or info.moves_history:
        return False
    last_change = steps[-1][4]
    return (
        not any(step.runtime_sizes for step in chain)
        and 0 <= chain[0].version < last_change <= chain[-1].version
        and _elements_reached_change(info, arg)
    )


def _from_geometry_then(
    step: ViewStep, started: tuple[tuple[int, ...], tuple[int, ...], int], arg: torch.Tensor
) -> ViewStep:
    """``step``, the first of a chain of views taken from ``arg`` before its geometry changed, from the geometry
    it had then (its ``from_geometry``, relative to the offset ``arg`` had when the call ``started``; none: the
    geometry it started in), now relative to the offset the caller's tensor has once changed."""
    size, stride, offset = started
    if step.from_geometry is not None:
        size, stride, relative = step.from_geometry
        offset += relative
    return dataclasses.replace(step, from_geometry=(size, stride, offset - offset_of(arg)))


def _from_final_geometry(
    step: ViewStep, info: InputAliasInfo, started_in: tuple[tuple[int, ...], tuple[int, ...]]
) -> ViewStep:
    """``step``, the first of a view's chain, replayed on its input in its final geometry: the geometry eager took
    the view in (the one the call started in, or one between two changes), its offset relative to the final
    one. Eager's record of a view taken before the last change is then stale, taken again by strides."""
    final = info.final_metadata
    assert final is not None
    taken_in = step.from_geometry or (*started_in, 0)
    if taken_in == final:
        return dataclasses.replace(step, from_geometry=None)
    return dataclasses.replace(step, from_geometry=(taken_in[0], taken_in[1], taken_in[2] - final[2]))


def _views_of(
    args: list[torch.Tensor], bases: frozenset[DedupedArg], mutated: tuple[DedupedArg, ...]
) -> tuple[tuple[DedupedArg, DedupedArg], ...]:
    """(view input, base input) for each input, its geometry unchanged, that is a view of one in ``bases``."""
    return tuple(
        (DedupedArg(view_idx), base_idx)
        for view_idx, view in enumerate(args)
        if view_idx not in mutated
        for base_idx in bases
        if view._base is args[base_idx] and view.dtype == args[base_idx].dtype
    )


def _view_of_alias(view: torch.Tensor, alias: torch.Tensor, written_changed: bool) -> torch.Tensor:
    """``view`` taken again from ``alias`` (the function's stand-in for its base): the tracing modes then take
    its history again from the alias once its counter moves, as eager takes it from the base in the base's
    geometry then. Marked as made where ``view`` was made. ``written_changed``: ``alias`` is a history alias
    (``history_alias``, no view) of an input written after its geometry changed, a base autograd itself takes
    the view's history again from, past its writes and recorded changes, as eager's from the input."""
    if not written_changed and not getattr(alias, STANDS_FOR_NO_VIEW, False):
        return view  # (a detached alias: no history to take again)
    with torch.enable_grad():
        again = alias.as_strided(view.shape, view.stride(), view.storage_offset())
    _mark_as_made(again, view)
    return again


def _mark_as_made(alias: torch.Tensor, view: torch.Tensor) -> None:
    """``alias`` (requiring grad) marked as made where ``view`` was made (under no_grad, as one output of
    several), if ``view`` is a view: autograd then refuses its history where it refuses ``view``'s."""
    if view._base is not None and alias.requires_grad and not view.is_inference():
        creation = torch._C._autograd._get_creation_meta(view)
        if creation != torch._C._autograd.CreationMeta.INFERENCE_MODE:
            torch._C._autograd._set_creation_meta(alias, creation)


def _as_below(info: InputAliasInfo, **changes: Any) -> InputAliasInfo:
    """``info`` as the layers below see the input: this layer makes its geometry changes, set_()s and moves."""
    return dataclasses.replace(
        info,
        mutates_metadata=False,
        metadata_record_stale=False,
        metadata_steps=(),
        final_metadata=None,
        storage_set_to=None,
        set_recorded=False,
        fresh_storage_nbytes=0,
        moves_history=False,
        moves_to_new_shape=False,
        restrided_after_call=info.mutates_metadata,
        **changes,
    )


def _old_self(arg: torch.Tensor) -> torch.Tensor:
    """A leaf requiring grad on ``arg``'s memory in its geometry, standing for it before its move: gradients
    reaching it are none of eager's (``collect_meta`` takes only leaves no op but a view read before)."""
    return _leaf_on(arg).requires_grad_()


def _final_placeholder(arg: torch.Tensor, info: InputAliasInfo) -> torch.Tensor:
    """Memory of its own in ``info``'s final geometry for ``arg`` (its values come with the move after the call)."""
    assert info.final_metadata is not None
    size, stride, _ = resolve_sizes(info.final_metadata)
    return torch.empty_strided(size, stride, dtype=arg.dtype, device=arg.device)


def _moved_first(arg: torch.Tensor, info: InputAliasInfo) -> torch.Tensor:
    """A leaf requiring grad in ``info``'s final geometry standing for ``arg`` moved first, while compiling."""
    return _final_placeholder(arg, info).requires_grad_()


def _move_first(target: torch.Tensor, info: InputAliasInfo) -> None:
    """Move the caller's leaf to its final geometry, on memory of its own, before the call (as set_() under
    no_grad does; its counter is restored): autograd takes its shape when the compiled function records."""
    with torch.no_grad():
        target.set_(_final_placeholder(target, info))  # type: ignore[call-overload]


def _refuse_views_before_move(meta: ViewAndMutationMeta[DedupedArg, UserOut], reshaped: tuple[DedupedArg, ...]) -> None:
    """An output that is a view of a moved leaf taken before the move: eager's keeps the old memory and takes
    its history again from the leaf in its new shape, which no replay from the moved caller's tensor gives."""
    for out_idx, info in enumerate(meta.output_info):
        alias = info.computed_alias
        bases = {info.base_input if info.output_type == OutputType.ALIAS_OF_INPUT and not info.after_set else None}
        bases.add(alias.base_input if alias is not None else None)
        hit = next((i for i in reshaped if i in bases), None)
        if hit is not None:
            raise UnsupportedMutationError(
                f"output {out_idx} is a view of input {hit} ({meta.input_info[hit].name}) taken before set_() "
                "under no_grad moved the input, which requires grad, to another shape: eager's keeps the old "
                "memory and differentiates the input in its new shape, which the compiled function cannot "
                "return; return a clone() of it"
            )


def _retake_view_history(target: torch.Tensor) -> None:
    """Make autograd take a moved view's history again from its base in its new geometry, as eager's does
    after its set_() (or a write and a geometry change autograd did not record): a record cached at the
    version its counter ends at (while the layers below set it) would hold the old geometry. Taken once at
    an unused version, then stale at the final one."""
    if target._base is None or not target.requires_grad:
        return
    final = target._version
    torch._C._autograd._unsafe_set_version_counter((target,), (final + 1,))
    with contextlib.suppress(RuntimeError):  # eager refuses to take it again (a view made under no_grad)
        _ = target.grad_fn
    torch._C._autograd._unsafe_set_version_counter((target,), (final,))


def _base_of(arg: torch.Tensor) -> torch.Tensor:
    base = arg._base
    if base is None:
        raise UnsupportedMutationError(
            "an input set_() moves under no_grad was a view of a base requiring grad when the function was "
            "compiled, and is none now: compile again for it"
        )
    return base


class _MovedHistories(TorchFunctionMode):
    """After ``set_()`` under no_grad moves an input (a view of a base requiring grad), or a leaf's geometry changes
    there after a use in grad mode (an in-place view op, an ``out=`` resizing it), every op gets, in the
    input's place, a stand-in: its base ``as_strided`` in the input's current geometry, ``set_()`` onto the
    input under no_grad. The same memory, with the history eager takes again for the moved view, so later
    uses differentiate the base where eager's do; in-place geometry changes still apply to the input."""

    def __init__(self, bases: dict[int, tuple[torch.Tensor, torch.Tensor, bool]]) -> None:
        super().__init__()
        self._bases = bases  # id(input) -> (input, its base or, a leaf, itself, whether it is a leaf)
        self._moved: dict[int, tuple[torch.Tensor, torch.Tensor, bool]] = {}
        # id(input) -> (input, its stand-in after a geometry change autograd recorded, both versions then).
        self._recorded: dict[int, tuple[torch.Tensor, torch.Tensor, tuple[int, int]]] = {}

    def _stand_in(self, value: torch.Tensor) -> torch.Tensor:
        recorded = self._recorded.get(id(value))
        if recorded is not None and recorded[0] is value and (value._version, recorded[1]._version) == recorded[2]:
            return recorded[1]
        found = self._moved.get(id(value))
        if found is None or found[0] is not value:
            return self._view_stand_in(value)
        _, base, leaf = found
        if leaf:  # a leaf accumulates the gradients of its new geometry (of its shape) element by element
            return GradientTo.apply(base, value)  # type: ignore[no-any-return,no-untyped-call]
        return history_taken_again(base, value)

    def _view_stand_in(self, value: torch.Tensor) -> torch.Tensor:
        """A view with history of a moved leaf, taken before the move: eager's takes its history again from
        the leaf in its new geometry (by strides), so its gradient reaches the elements it sits on there. Its
        values stay its own: set_() moved the leaf, never the memory of views taken before."""
        if value._base is None or not value.requires_grad:
            return value
        for alias, leaf, is_leaf in self._moved.values():
            # (A view of another dtype, ``.imag`` say, is no as_strided of the leaf: eager replays its view ops.)
            if is_leaf and value is not alias and value._base is view_root(alias) and value.dtype == alias.dtype:
                moved = GradientTo.apply(leaf, alias)  # type: ignore[no-untyped-call]
                offset = moved.storage_offset() + value.storage_offset() - alias.storage_offset()
                # (Recorded only where it reaches past the leaf's new memory, smaller than its old one.)
                return base_as_strided_onto(moved, value, (tuple(value.shape), tuple(value.stride()), offset))
        return value

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        # An op resizing a leaf passed as its ``out=`` under no_grad moves it as a geometry change does.
        resized = [] if torch.is_grad_enabled() else self._leaves_in(kwargs.get("out"))
        before = [(t.shape, t.stride(), t.storage_offset()) for t in resized]
        out = self._call(func, args, kwargs)
        for leaf, geometry in zip(resized, before, strict=True):
            if (leaf.shape, leaf.stride(), leaf.storage_offset()) != geometry:
                self._moved[id(leaf)] = self._bases[id(leaf)]
        return out

    def _leaves_in(self, outs: Any) -> list[torch.Tensor]:
        """The leaf inputs among ``outs`` (an op's ``out=``)."""
        tensors = [t for t in tree_flatten(outs)[0] if isinstance(t, torch.Tensor)]
        return [t for t in tensors if (found := self._bases.get(id(t))) is not None and found[0] is t and found[2]]

    def _call(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        name = getattr(func, "__name__", "")
        if isinstance(func, torch._ops.OpOverload):  # ``Tensor.set_`` arrives as ``aten.set_.source_Tensor``
            name = func.overloadpacket.__name__
        found = self._bases.get(id(args[0])) if args else None
        # set_(), or, of a leaf, a geometry change (``meta.collect`` marks one made after a use in grad mode).
        moves = name == "set_" or (found is not None and found[2] and name in _INPLACE_VIEW_METHODS)
        if found is not None and found[0] is args[0] and moves and not torch.is_grad_enabled():
            out = func(*args, **kwargs)
            self._moved[id(args[0])] = found
            return out
        moved = self._moved.get(id(args[0])) if args else None
        changes = moved is not None and moved[0] is args[0] and not moved[2] and name in _INPLACE_VIEW_METHODS
        if changes and torch.is_grad_enabled():
            return self._recorded_change(func, args, kwargs)
        attribute = getattr(getattr(func, "__self__", None), "__name__", "")
        own_object = name in _OWN_OBJECT_METHODS or (name == "__get__" and attribute not in _VIEW_ATTRIBUTES)
        if not self._moved or own_object:
            return func(*args, **kwargs)
        return _call_with_stand_ins(func, name, args, kwargs, self._stand_in)

    def _recorded_change(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """A geometry change in grad mode of a moved input: eager's autograd first takes the view's history again
        (by strides, in the geometry it has), then records the change on it, whose backward reaches only the
        elements that geometry spans (``as_strided_`` past them reaches none). Until the next write, later uses
        get that record: a view of the stand-in before the change."""
        target = args[0]
        before = self._stand_in(target)
        out = func(*args, **kwargs)
        view = before.as_strided(target.shape, target.stride(), target.storage_offset())
        self._recorded[id(target)] = (target, view, (target._version, view._version))
        return out


def _call_with_stand_ins(
    func: Any, name: str, args: Any, kwargs: dict[str, Any], stand_in: Callable[[torch.Tensor], torch.Tensor]
) -> Any:
    """``func`` on the stand-ins of its tensor arguments, except the object an in-place geometry change or an
    ``out=`` writes (the function's own object)."""
    first, rest = (args[0], args[1:]) if args else (None, ())
    # ``set_()`` (``aten.set_.*`` from below autograd) moves the function's own object, as the in-place geometry
    # changes do: on a stand-in the object would keep its old geometry (seed 25 program 1722, set_() onto its own
    # memory under no_grad, a restride to the layers above).
    own = name in _INPLACE_VIEW_METHODS or (
        isinstance(func, torch._ops.OpOverload) and func.overloadpacket.__name__ == "set_"
    )
    if not own and isinstance(first, torch.Tensor):
        first = stand_in(first)
    rest, kwargs_in = tree_map_only(torch.Tensor, stand_in, (rest, kwargs))
    if "out" in kwargs:
        kwargs_in["out"] = kwargs["out"]
    out = func(*((first, *rest) if args else ()), **kwargs_in)
    # An in-place op returns its argument: the function's object, not the stand-in.
    return args[0] if args and out is first and first is not args[0] else out


# What a stand-in must not replace: the input object's own state and geometry.
_OWN_OBJECT_METHODS = frozenset(
    {"requires_grad_", "retain_grad", "register_hook", "__set__", "set_", "size", "dim", "numel", "stride"}
    | {"storage_offset", "untyped_storage", "_is_view"}
)
_VIEW_ATTRIBUTES = frozenset({"real", "imag", "T", "mT", "H", "mH"})


def _storage_of(whole: torch.Tensor) -> torch.UntypedStorage:
    """A storage holding exactly ``whole`` (a fresh storage's elements, as the graph returned them)."""
    exact = whole.is_contiguous() and whole.storage_offset() == 0
    if not (exact and whole.untyped_storage().nbytes() == whole.numel() * whole.element_size()):
        whole = whole.detach().clone(memory_format=torch.contiguous_format)
    return whole.detach().untyped_storage()


def _history_kept_by_set(info: InputAliasInfo, arg: torch.Tensor) -> bool:
    """An input requiring grad (no view, no leaf) set_() under no_grad, in grad mode: eager's set_() keeps its
    history, as a geometry change autograd recorded before left it and as in-place ops recorded after extend
    it, which the caller's tensor, never changed in place by the call, lacks."""
    return _set_keeping_own_history(info) and arg._base is None and torch.is_grad_enabled()


def _restrided_first(info: InputAliasInfo, arg: torch.Tensor, grad_from_inside: bool = False) -> bool:
    """A leaf requiring grad whose geometry changes under no_grad (or before ``requires_grad_()`` inside, where
    autograd records it neither), written (else ``_restrided_inside``, in grad mode): later uses differentiate
    the leaf in its new geometry (its gradient has that shape), so it is restrided before the call and the
    function gets a view of it in the old geometry, through which gradients reach the leaf as in eager.

    Gradients reach the elements the view spans: all of the new geometry's when it is a permutation of the
    old one (``t_``), or when the input is written (the synthetic-base layer then spans its storage)."""
    unrecorded = info.metadata_mutations_under_no_grad or grad_from_inside
    if not (info.is_leaf and info.requires_grad and unrecorded) or info.moves_history:
        return False
    assert info.final_metadata is not None
    size, stride, relative_offset = info.final_metadata
    same_elements = relative_offset == 0 and sorted(zip(stride, size, strict=True)) == sorted(
        zip(arg.stride(), arg.shape, strict=True)
    )
    return info.storage_set_to is None and (info.mutates_data or same_elements)


def _taken_after_restride(info: OutputAliasInfo[DedupedArg, UserOut], restrided_first: tuple[DedupedArg, ...]) -> bool:
    """A view of a ``_restrided_first`` input taken after its geometry changed: taken here from the caller's
    tensor, which has that geometry, as eager's view of the leaf is. Below, the function's input is a view of the
    leaf in its old geometry, which may span fewer elements (``out=`` growing it): a view taken again from that
    one would be an ``as_strided`` of it, whose gradient reaches only the old geometry's elements."""
    return (
        info.output_type == OutputType.ALIAS_OF_INPUT
        and info.base_input in restrided_first
        and info.view_chain[0].from_geometry is not None
    )


def _chain_from_restrided(chain: tuple[ViewStep, ...], final: tuple[Any, Any, int]) -> tuple[ViewStep, ...]:
    """``chain`` (its first step taken in a geometry relative to the input's original one), replayed from the
    input in its ``final`` geometry (this call's values): no geometry where the view was taken in that one."""
    final_size, final_stride, final_offset = final
    size, stride, relative = resolve_sizes(chain[0].from_geometry)
    geometry = (size, stride, relative - final_offset)
    from_final = None if geometry == (final_size, final_stride, 0) else geometry
    return (dataclasses.replace(chain[0], from_geometry=from_final), *chain[1:])


def _restrided_inside(info: InputAliasInfo, arg: torch.Tensor, grad_from_inside: bool) -> bool:
    """An input requiring grad (before the call, or from ``requires_grad_()`` inside it) whose geometry
    changes where autograd records nothing, never written: its gradient has its final geometry (eager's
    leaf is first differentiated there, a view's history is taken again there), so the layers below get
    it restrided, the function a view of it in the geometry it had. Written, its writes may reach beyond
    the final geometry: ``_restrided_first`` (but see ``_permuted_leaf_written_unrecorded``)."""
    unrecorded = info.metadata_mutations_under_no_grad or grad_from_inside
    return (
        (
            _restrided_inside_allowed(info)
            or (_permuted_leaf_written_unrecorded(info, arg) and not (grad_from_inside and arg._base is not None))
        )
        and info.requires_grad
        and unrecorded
        and info.storage_set_to is None
        and not info.storage_grown_to
        and not info.moves_history
    )


def _written_then_restrided(info: InputAliasInfo) -> bool:
    """Written, in grad mode (its geometry changes where autograd records nothing: under no_grad, or before its
    ``requires_grad_()``, as eager refuses a leaf requiring grad's): below, it is a leaf requiring grad changed so
    (``_restrided_first``, or its history moved), so eager's backward, its gradients or the error its history
    raises, reaches the caller's tensor (not a leaf the caller never sees)."""
    return info.mutates_data and torch.is_grad_enabled()


def _recorded_under_callers_no_grad(meta: ViewAndMutationMeta[DedupedArg, UserOut]) -> bool:
    """Under the caller's no_grad, the function recorded in an ``enable_grad`` region (an output requires grad):
    eager's uses there of an input after its ``requires_grad_()`` reach it, also where its geometry changed, so it
    requires grad below too (else they were no uses of an input requiring grad, and recorded nothing)."""
    return not torch.is_grad_enabled() and any(info.requires_grad for info in meta.output_info)


def _restrided_inside_allowed(info: InputAliasInfo) -> bool:
    """Never written; and in grad mode (the cache keys on it): under the caller's no_grad nothing is
    differentiated, and views eager took before the change are taken again before the restride, which
    autograd tells apart (their ``grad_fn`` raises, as eager's)."""
    return not info.mutates_data and torch.is_grad_enabled()


def _permuted_leaf_written_unrecorded(info: InputAliasInfo, arg: torch.Tensor) -> bool:
    """A leaf written where autograd records nothing (under no_grad, through ``detach()``), whose every geometry
    is a permutation of the one it had, dimensions of size 1 aside (``t_``, ``transpose_``, ``unsqueeze_``): its
    writes reach no element beyond the final geometry, so it is restrided inside as if unwritten.
    ``_restrided_first``'s view of the leaf is ``as_strided``, whose backward spreads a gradient evenly over the
    indices sharing an element (an expanded leaf's); the function's view here stands for the leaf itself once in
    the final geometry (``STANDS_FOR_LEAF``), index by index as eager's gradient."""
    if not (info.is_leaf and not info.mutation_visible_to_autograd and torch.is_grad_enabled()):
        return False
    steps = info.metadata_steps or ((info.final_metadata,) if info.final_metadata is not None else ())

    def dims(size: Any, stride: Any) -> list[tuple[int, int]]:
        return sorted((st, sz) for sz, st in zip(size, stride, strict=True) if sz != 1)

    own = dims(arg.shape, arg.stride())
    return bool(steps) and all(step[2] == 0 and dims(step[0], step[1]) == own for step in steps)


def _final_offset(info: InputAliasInfo) -> int:
    assert info.final_metadata is not None
    offset: int = info.final_metadata[2]
    return offset


def _restride(target: torch.Tensor, info: InputAliasInfo) -> None:
    """Give ``target`` its final geometry in place, as eager changed it: under no_grad."""
    assert info.final_metadata is not None
    size, stride, relative_offset = info.final_metadata
    with torch.no_grad():
        target.as_strided_(size, stride, target.storage_offset() + relative_offset)


def _moved_up(info: InputAliasInfo) -> bool:
    """Whether the input's final geometry starts above the one it had (maybe, where symbolic)."""
    assert info.final_metadata is not None
    return guard_or_true(info.final_metadata[2] > 0)


def _restrided_leaf(arg: torch.Tensor, info: InputAliasInfo) -> torch.Tensor:
    """A tensor on ``arg``'s storage in its final geometry, standing for it while compiling."""
    if arg._base is not None and info.is_leaf and info.requires_grad and not arg._base.requires_grad:
        # A leaf view of a base needing none (``requires_grad_()`` on a view): at run time the layers below get the
        # caller's view, restrided in place, so they plan for a view of that base here too (a synthetic base taken
        # from the base, the leaf's gradient rerouted to it); one planned on a leaf of no base lost that gradient
        # at run time (seed 28 program 1397, as ``_made_leaf``'s seed 23 program 1160).
        # (Of a leaf on the base's memory: compiling moves no counter of the caller's.)
        with torch.no_grad():
            view = _leaf_on(arg._base).as_strided(arg.shape, arg.stride(), arg.storage_offset())
        _restride(view, info)
        return view.requires_grad_()
    leaf = _leaf_on(arg)
    _restride(leaf, info)
    leaf.requires_grad_(info.requires_grad)
    # A non-leaf stays one (the trace makes no leaf of it): writes through its views are allowed.
    return leaf if info.is_leaf or not info.requires_grad else leaf.view_as(leaf)


def _from_final(
    info: OutputAliasInfo[DedupedArg, UserOut],
    started: dict[DedupedArg, tuple[Any, Any, int]],
    finals: dict[DedupedArg, Any],
) -> OutputAliasInfo[DedupedArg, UserOut]:
    """A view of a restrided input (or a computed output put on one), taken again from the input in its
    final geometry (``finals``: each restrided input's)."""
    alias = info.computed_alias
    if alias is not None and alias.base_input in started:
        chain = _chain_from_final(alias.view_chain, started[alias.base_input], finals[alias.base_input])
        info = dataclasses.replace(info, computed_alias=dataclasses.replace(alias, view_chain=chain))
    if info.output_type != OutputType.ALIAS_OF_INPUT or info.base_input not in started:
        return info
    chain = _chain_from_final(info.view_chain, started[info.base_input], finals[info.base_input])
    return dataclasses.replace(info, view_chain=chain)


def _chain_from_final(chain: tuple[ViewStep, ...], started: tuple[Any, Any, int], final: Any) -> tuple[ViewStep, ...]:
    """``chain``, taken from the input's geometry when the call started (``started``: its offset relative to
    the final one), replayed from the input in its final geometry (``final``, relative to the original)."""
    size, stride, offset = started
    first = chain[0]
    if first.from_geometry is not None:
        if _static(first.from_geometry) and _static(final) and first.from_geometry == final:
            # Taken in the final geometry: from the input itself, as eager's (``as_strided`` of a leaf whose
            # elements share memory, an expanded one's, would spread its gradient over the indices sharing one).
            return (dataclasses.replace(first, from_geometry=None), *chain[1:])
        size, stride, relative = first.from_geometry
        offset += relative
    first = dataclasses.replace(first, from_geometry=(size, stride, offset))
    return (first, *chain[1:])


def _static(geometry: Any) -> bool:
    return all(isinstance(v, int) for v in (*geometry[0], *geometry[1], geometry[2]))


def _restrided_view(target: torch.Tensor, info: InputAliasInfo) -> torch.Tensor:
    """Give ``target`` its final geometry in place (under no_grad, as eager changed it); return a view of
    it in the geometry it had."""
    assert info.final_metadata is not None
    size, stride, relative_offset = info.final_metadata
    old = (tuple(target.shape), tuple(target.stride()), target.storage_offset())
    # The restride stands for eager's change later in the call, whose bump the caller counts at the end.
    with uncounted(target), torch.no_grad():
        target.as_strided_(size, stride, target.storage_offset() + relative_offset)
    # Taken in grad mode whatever the caller's: it stands for the input itself, which eager's function uses
    # in grad mode too after the counter moves (a view taken under no_grad would then refuse it).
    with torch.enable_grad():
        # A leaf that is a view (of a base needing no grad: ``requires_grad_()`` on ``s.t()``) is no base of its
        # views: once the counter moves (the epilogue sets eager's final counters before the call), autograd
        # takes the view's history again from that base and the edge to the leaf is gone. From an alias of the
        # leaf that is no view, as ``_stand_in_view``'s leaf is while compiling, it is taken again to the leaf.
        source = history_alias(target) if target._base is not None and target.requires_grad else target
        return source.as_strided(*old)


def _stand_in_view(arg: torch.Tensor, info: InputAliasInfo) -> torch.Tensor:
    """``_restrided_view`` of a leaf standing for ``arg`` (on its storage) while compiling."""
    leaf = torch.empty(0, dtype=arg.dtype, device=arg.device)
    with torch.no_grad():
        leaf.set_(arg.untyped_storage(), arg.storage_offset(), arg.shape, arg.stride())
    return _restrided_view(leaf.requires_grad_(arg.requires_grad), info)


def _grow_storages(args: list[torch.Tensor], grown: tuple[tuple[DedupedArg, int], ...]) -> None:
    """Grow each storage as eager's ``resize_`` grows it: in place (every tensor on it sees the new
    memory), keeping its data. Below, the function's ``resize_`` is then one within the storage."""
    for arg_idx, nbytes in grown:
        storage = args[arg_idx].untyped_storage()
        if storage.nbytes() < nbytes:
            storage.resize_(nbytes)


def _growing_storages(inner: Runtime, grown: tuple[tuple[DedupedArg, int], ...]) -> Runtime:
    def run(args: list[torch.Tensor]) -> list[Any]:
        _grow_storages(args, grown)
        return inner(args)

    return run


def _leaf_on(arg: torch.Tensor) -> torch.Tensor:
    """A leaf with ``arg``'s memory and geometry, no view of anything."""
    leaf = torch.empty(0, dtype=arg.dtype, device=arg.device)
    with torch.no_grad():
        return leaf.set_(arg.untyped_storage(), arg.storage_offset(), arg.shape, arg.stride())


def _made_leaf(arg: torch.Tensor) -> torch.Tensor:
    """What the caller's tensor is once made to require grad before the call: a leaf on ``arg``'s memory, and a
    view of ``arg``'s base where ``arg`` is a view (of a base needing no grad), so the layers below plan for the
    tensor they get at run time (a synthetic base taken from that base, the leaf's gradient rerouted to it: seed 23
    program 1160; one taken from the leaf was planned here and lost that gradient there)."""
    if not arg._is_view():
        return _leaf_on(arg).requires_grad_()
    with torch.enable_grad():
        alias: torch.Tensor = torch.ops.aten.alias.default(arg)
    return alias.requires_grad_()


def _set_in_grad_mode(info: InputAliasInfo) -> bool:
    """``set_()`` onto other memory, in grad mode: below, the input requires grad from the start, and after its
    ``requires_grad_()`` later uses reach it (``_RequiresGradInside``)."""
    return info.storage_set_to is not None and torch.is_grad_enabled()


class _RequiresGradInside(TorchFunctionMode):
    """``requires_grad_()`` on an untracked alias made by ``untracked`` attaches it to its input: from then on
    every op gets, in its place, a view of the input with the alias's current geometry (a stand-in, as
    ``meta.fresh_views.FreshViews`` makes), whose history reaches the input. The alias object itself stays
    untracked, so views taken before keep none, as in eager; no in-place op is needed to attach it."""

    def __init__(self) -> None:
        super().__init__()
        self._sources: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._attached: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._of_views: set[int] = set()
        # Aliases the function set_()s: an alias of their input as called, which their gradients reach once
        # moved (set_() is seen below autograd, too late to take one with history).
        self._grad_targets: dict[int, torch.Tensor] = {}
        self._moved: dict[int, torch.Tensor] = {}
        self._names: dict[int, str] = {}
        # Views the function took of an alias (or of such a view): the version they last took history at, and
        # the history eager took again then (``_regenerated``).
        self._views: dict[int, tuple[torch.Tensor, int, torch.Tensor | None]] = {}

    def untracked(self, source: torch.Tensor, of_view: bool = False, set_later: str | None = None) -> torch.Tensor:
        """``of_view``: the caller's tensor is a view (of a base needing no grad): a view of it taken under no_grad
        requires grad only if that base does, so there the alias itself stands for it. ``set_later``: the
        function set_()s it (the input's name)."""
        alias = source.detach()
        self._sources[id(alias)] = (alias, source)
        if set_later is not None:
            # An alias of no view: where the input is a leaf view of a base needing none (as the caller's is, and
            # the trace's stand-in for it, ``meta.stand_ins``), a view of it would take its history again from that
            # base once set_() moves the counter, and the gradient would stop there.
            self._grad_targets[id(alias)] = history_alias(source)
            self._names[id(alias)] = set_later
        if of_view:
            self._of_views.add(id(alias))
        return alias

    def _regenerated(self, value: torch.Tensor) -> torch.Tensor | None:
        """Eager takes a view's history again from its base when read after the memory changed (its version
        moved since it took one): from the input, if the function made it a leaf requiring grad (a view of it
        then reaches it, even one taken before ``requires_grad_()``), else from a base needing no grad (no
        history, even for a view that had one), and keeps that history until the next change. ``None`` where
        the view's own history stands."""
        view = self._views.get(id(value))
        if view is None or view[0] is not value or not torch.is_grad_enabled():
            return None
        if value._version == view[1]:
            return view[2]
        alias_id = next((key for key, (alias, _) in self._sources.items() if _same_storage(alias, value)), None)
        if alias_id is None:
            return None
        attached = self._attached.get(alias_id)
        if attached is None or alias_id in self._of_views:
            regenerated = value.detach()
        else:
            regenerated = _as_strided_like(view_root(attached[1]), value)
        self._views[id(value)] = (value, value._version, regenerated)
        return regenerated

    def _record_views(self, args: Any, kwargs: dict[str, Any], out: Any, in_place: bool) -> None:
        """Remember the views ``out`` holds of an alias (or of a view of one), for ``_regenerated``."""
        sources = [
            t
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor)
            and ((id(t) in self._sources and self._sources[id(t)][0] is t) or id(t) in self._views)
        ]
        if not sources:
            return
        for o in tree_flatten(out)[0]:
            if not (isinstance(o, torch.Tensor) and o._is_view() and any(_same_storage(o, t) for t in sources)):
                continue
            known = self._views.get(id(o))
            # An op returning the view itself (``.real`` of a real view) keeps the history it has; an in-place
            # op on it in grad mode gives it a history of its own (eager rebases it; under no_grad it does not).
            if known is None or known[0] is not o or in_place:
                self._views[id(o)] = (o, o._version, None)

    def _stand_in(self, value: torch.Tensor) -> torch.Tensor:
        regenerated = self._regenerated(value)
        if regenerated is not None:
            return regenerated
        found = self._attached.get(id(value))
        if found is None or found[0] is not value:
            return value
        if id(value) in self._of_views and not torch.is_grad_enabled():
            return value
        source = found[1]
        target = self._moved.get(id(value))
        if target is not None:
            # Eager's input, set_() onto other memory, is a leaf there: later uses read that memory and
            # accumulate their gradients into the input (of its shape, which the compiled one has as called).
            if not torch.is_grad_enabled():
                return value
            if value.shape != target.shape:
                raise UnsupportedMutationError(
                    f"aten.set_: input {self._names[id(value)]} ({list(target.shape)}) set_() onto memory of "
                    f"another shape ({list(value.shape)}), then requires_grad_() and used in grad mode: eager's "
                    "gradient for it has that shape, which the compiled function's cannot; set_() it onto memory "
                    "of its own shape, or clone() it instead"
                )
            return GradientTo.apply(target, value)  # type: ignore[no-any-return,no-untyped-call]
        if (value.shape, value.stride(), value.storage_offset()) == (
            source.shape,
            source.stride(),
            source.storage_offset(),
        ):
            # No absolute offset in the graph: a later call may pass the input at another offset.
            alias: torch.Tensor = torch.ops.aten.alias.default(source)
            return alias
        root = view_root(source)
        if (value.shape, value.stride(), value.storage_offset()) == (root.shape, root.stride(), root.storage_offset()):
            # The input itself, in the geometry it was restrided to first: index by index, as eager's leaf
            # (``as_strided`` of an expanded one would spread a gradient over the indices sharing an element).
            same: torch.Tensor = torch.ops.aten.alias.default(root)
            return same
        return root.as_strided(value.shape, value.stride(), value.storage_offset())

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        # ``x.requires_grad_()``, or ``x.requires_grad = True`` (the attribute's ``__set__``).
        attribute = getattr(getattr(func, "__self__", None), "__name__", "")
        setter = name == "__set__" and attribute == "requires_grad"
        # ``Tensor.set_`` arrives as ``aten.set_.source_Tensor`` (from a mode below autograd).
        is_set = isinstance(func, torch._ops.OpOverload) and func.overloadpacket.__name__ == "set_"
        found = self._sources.get(id(args[0])) if args and isinstance(args[0], torch.Tensor) else None
        if is_set and found is not None and found[0] is args[0] and id(args[0]) in self._grad_targets:
            # The alias moves, and so does its input below (the function's own object there), without history:
            # the layers above take the input's final memory from it.
            self._moved[id(args[0])] = self._grad_targets[id(args[0])]
            with torch.no_grad():
                func(found[1], *args[1:], **kwargs)
                return func(*args, **kwargs)
        if (func is torch.Tensor.requires_grad_ or setter) and args:
            found = self._sources.get(id(args[0]))
            if found is not None and found[0] is args[0]:
                wanted = kwargs.get("requires_grad", args[1] if len(args) > 1 else True)
                if not wanted and id(args[0]) in self._attached:
                    raise UnsupportedMutationError(
                        f"requires_grad_(False) on input {args[0].shape} after requires_grad_() inside the "
                        "function: not supported; detach() it instead"
                    )
                if wanted:
                    self._attached[id(args[0])] = found
                return None if setter else args[0]
        if name == "__set__" or (not self._attached and not self._views):
            out = func(*args, **kwargs)
        else:
            out = _call_with_stand_ins(func, name, args, kwargs, self._stand_in)
        in_place = name.endswith("_") and not name.startswith("__") and bool(args) and out is args[0]
        # Recorded (grad mode, and some tensor it read requires grad): eager rebases the view's history. One that
        # autograd did not record (nothing requiring grad yet) leaves the view's record where it was, so a read
        # after the alias's requires_grad_() takes its history again from the input (seed 23 program 1418).
        in_place = in_place and torch.is_grad_enabled() and out.requires_grad
        # set_() puts its target on the source's memory but makes it no view of the source: autograd keeps taking
        # the target's history from the base it had (seed 29 program 1256: a view of another input set_() onto an
        # alias, which requires_grad_() then, differentiated that base, not the alias's input).
        if not (is_set or name == "set_"):
            self._record_views(args, kwargs, out, in_place)
        return out


def _as_strided_like(root: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """A view of ``root`` with ``value``'s geometry and dtype (a complex view of real memory, or a real one of
    complex memory, as ``view_as_complex``/``view_as_real`` take them)."""
    if value.is_complex() and not root.is_complex():
        pairs = root.as_strided((*value.shape, 2), (*(2 * s for s in value.stride()), 1), 2 * value.storage_offset())
        return torch.view_as_complex(pairs)
    if root.is_complex() and not value.is_complex():
        root = torch.view_as_real(root)
    return root.as_strided(value.shape, value.stride(), value.storage_offset())


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return storage_key(a) == storage_key(b)
    except (RuntimeError, NotImplementedError):  # a tensor without storage
        return False


# In-place geometry changes: applied to the alias itself, the next stand-in takes its new geometry.
_INPLACE_VIEW_METHODS = frozenset(
    {"t_", "transpose_", "swapdims_", "swapaxes_", "unsqueeze_", "squeeze_", "as_strided_", "resize_", "resize_as_"}
)


def _setting_requires_grad_first(inner: Runtime, inputs: tuple[DedupedArg, ...]) -> Runtime:
    if not inputs:
        return inner

    def run(args: list[torch.Tensor]) -> list[Any]:
        targets = [args[arg_idx] for arg_idx in inputs if not args[arg_idx].requires_grad]
        for target in targets:
            target.requires_grad_()
        try:
            return inner(args)
        except BaseException:
            for target in targets:
                target.requires_grad_(False)
            raise

    return run


def _setting_requires_grad(inner: Runtime, inputs: tuple[DedupedArg, ...]) -> Runtime:
    if not inputs:
        return inner

    def run(args: list[torch.Tensor]) -> list[Any]:
        outs = inner(args)
        for arg_idx in inputs:
            if not args[arg_idx].requires_grad:
                args[arg_idx].requires_grad_()
        return outs

    return run


def _changes_recorded_first(
    meta: ViewAndMutationMeta[DedupedArg, UserOut], arg_idx: DedupedArg, arg: torch.Tensor
) -> bool:
    """A non-leaf requiring grad (a view too), never written, whose every geometry change autograd records (in
    grad mode): eager's tensor ends with the last change's node as its ``grad_fn``, each change's on the one before,
    and each read reaches the node the tensor had then. Restrided after the call, the caller's tensor would get
    new nodes no output's history reaches (``autograd.grad`` w.r.t. it: None). So it is restrided before the
    call, step by step, as eager's, and the function's reads after each step reach that step's node
    (``_RecordedChanges``). Outputs that are views of it are taken after the call, from the caller's tensor in its
    final geometry, as ``_written_with_changes``'s are (eager's, taken before a change, take their history again
    from it, or, the input a view, from its base)."""
    info = meta.input_info[arg_idx]
    steps = info.metadata_steps
    plain = (
        torch.is_grad_enabled()
        and info.requires_grad
        and not info.is_leaf
        and not info.mutates_data
        and not info.mutation_visible_to_autograd
        and not info.metadata_mutations_under_no_grad
        and not info.metadata_record_stale
        and info.storage_set_to is None
        and not info.storage_grown_to
        and not info.moves_history
        and not info.sets_requires_grad
    )
    return (
        plain
        and bool(steps)
        and all(step[3] for step in steps)
        and all(_static(step[:3]) for step in steps)
        and _views_replayable_at_the_end(meta, arg_idx, arg)
        and not any(
            out.after_set or (out.computed_alias is not None and out.computed_alias.base_input == arg_idx)
            for out in meta.output_info
            if out.base_input == arg_idx or out.computed_alias is not None
        )
    )


def _step_stand_in(arg: torch.Tensor, step: Any) -> torch.Tensor:
    """A non-leaf requiring grad on ``arg``'s memory in ``step``'s geometry, standing for the caller's tensor after
    that step while compiling. It shares ``arg``'s version counter, as the step's tensor at run time (a detached
    alias of the caller's) does: the layers below group counters when compiling (a synthetic base of the input
    and its steps setting one counter twice, back to the value before, staled what the forward saved)."""
    leaf = arg.detach()
    with torch.no_grad(), uncounted(leaf):
        leaf.as_strided_(step[0], step[1], leaf.storage_offset() + step[2])
    leaf.requires_grad_()
    return history_alias(leaf)


def _changed_in_steps(target: torch.Tensor, info: InputAliasInfo, version: int) -> list[torch.Tensor]:
    """Restride ``target`` in place through ``info``'s steps, each in grad mode at eager's version, as eager's
    in-place view ops: it ends with eager's history. After each step, an alias of it (no view: a view taken
    here would take its history again from the steps after) whose gradient reaches that step's node, none where
    none reached the alias (eager's engine never runs that node then)."""
    start = target.storage_offset()
    after = []
    for size, stride, offset, _, step_version in info.metadata_steps:
        set_versions([target], [version + step_version - 1])
        with torch.enable_grad():
            target.as_strided_(size, stride, start + offset)
        with torch.enable_grad():
            after.append(_AliasAfterStep.apply(target))  # type: ignore[no-untyped-call]
    return after


class _RecordedChanges(TorchFunctionMode):
    """The function's stand-in for a ``_changes_recorded_first`` input (a history alias of it as the call starts,
    no view) gets, after each change of its geometry, the history of the caller's tensor after that change (passed
    in), as eager's tensor has that change's node then: reads after reach it, reads before the old one.

    Later ops read the step's tensor in its place (the data a differentiated backward recomputes from is the
    step's, as the history). An input that is no view also takes that history in place, and its views taken before
    are read as views of the step's tensor (``same_span``): eager's take their history again from the changed
    tensor. One that is a view (``views``) keeps its own history and views: eager's views of it are views of its
    base, whose history they take again, past the input's nodes (the elements of the base the stand-in's history
    before reaches too)."""

    def __init__(
        self, tensors: dict[int, tuple[torch.Tensor, tuple[torch.Tensor, ...]]], same_span: set[int], views: set[int]
    ) -> None:
        super().__init__()
        self._tensors = tensors
        self._views = views
        # Inputs whose every step spans the elements they started on (``t_``, ``unsqueeze_``): a view
        # taken before lies within each step's tensor. (Otherwise it is left to its history taken again from the
        # input: right to first order, the differentiated backward recomputing from the input before.)
        self._same_span = same_span
        self._done = dict.fromkeys(tensors, 0)
        self._step_of = {id(step): key for key, (_, steps) in tensors.items() for step in steps}

    def _untracked(self, value: torch.Tensor) -> torch.Tensor:
        found = self._tensors.get(id(value))
        return value.detach() if found is not None and found[0] is value else value

    def _stand_in(self, value: torch.Tensor) -> torch.Tensor:
        key = id(value)
        if key in self._tensors and self._tensors[key][0] is value and self._done[key]:
            return self._tensors[key][1][self._done[key] - 1]
        # A view of an input that is no view, taken before its last change: eager's takes its history again from
        # the changed input (by strides), so it is taken again from that step's tensor, on the same memory. So too
        # one taken between two changes, made of an earlier step's tensor (``_call_with_stand_ins``): eager's is a
        # view of the input. (One made of the last step's tensor was taken after the last change: kept.)
        base = value._base
        key = self._step_of.get(id(base), id(base))
        # (One made under no_grad has no history to take again: eager's stays untracked.)
        if base is None or not value.requires_grad or key not in self._same_span or not self._done[key]:
            return value
        tensor, steps = self._tensors[key]
        made_of = base is tensor or any(base is step for step in steps[: self._done[key] - 1])
        if not made_of or value.dtype != tensor.dtype:  # (``.real``: eager replays its view op)
            return value
        step = steps[self._done[key] - 1]
        offset = step.storage_offset() + value.storage_offset() - tensor.storage_offset()
        return step.as_strided(value.shape, value.stride(), offset)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        before = {key: geometry_of(t) for key, (t, _) in self._tensors.items()}
        name = getattr(func, "__name__", "")
        if isinstance(func, torch._ops.OpOverload):
            name = func.overloadpacket.__name__
        attribute = getattr(getattr(func, "__self__", None), "__name__", "")
        own_object = name in _OWN_OBJECT_METHODS or (name == "__get__" and attribute not in _VIEW_ATTRIBUTES)
        if own_object:
            out = func(*args, **kwargs)
        elif not torch.is_grad_enabled():
            # Under no_grad eager records nothing: a view made there needs no grad (one of the stand-in, an
            # autograd.Function's output, would), so ops read the stand-in detached.
            out = _call_with_stand_ins(func, name, args, kwargs, self._untracked)
        elif not any(self._done.values()):
            out = func(*args, **kwargs)
        else:
            out = _call_with_stand_ins(func, name, args, kwargs, self._stand_in)
        for key, (tensor, steps) in self._tensors.items():
            if geometry_of(tensor) == before[key]:
                continue
            done = self._done[key]
            if done >= len(steps):
                raise UnsupportedMutationError(
                    "an input's geometry changed more often than when the function was compiled: compile again"
                )
            if key not in self._views:
                with torch.enable_grad():
                    _TakesHistory.apply(tensor, steps[done])  # type: ignore[no-untyped-call]
            self._done[key] = done + 1
        return out


class _TakesHistory(torch.autograd.Function):
    """``AdoptHistory`` passing no gradient where none reached it (none materialized as zeros): eager's changed
    tensor gets none from a read whose own backward gives none (an autograd.Function returning None)."""

    @staticmethod
    def forward(ctx: Any, alias: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        ctx.mark_dirty(alias)
        ctx.set_materialize_grads(False)
        return alias

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor | None) -> tuple[None, torch.Tensor | None]:
        return None, grad


class _AliasAfterStep(torch.autograd.Function):
    """``history_alias`` passing no gradient where none reached it: the compiled backward gives none for a step no
    read after reaches (eager's engine never runs that step's node)."""

    @staticmethod
    def forward(ctx: Any, target: torch.Tensor) -> torch.Tensor:
        ctx.set_materialize_grads(False)
        return target.detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor | None) -> torch.Tensor | None:
        return grad
