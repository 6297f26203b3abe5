"""Fill ``ViewAndMutationMeta`` by running the flat function once on fake tensors.

A dispatch mode under the function (``meta.recorder.ViewRecorder``) records two things per ATen call: which
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
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Never

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import guard_or_false
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten

from meta import symbolic
from meta.eager_state import (
    aten,
    autograd_nodes,
    geometry_of,
    history_of,
    is_leaf_safely,
    saved_tensor_hooks_suspended,
)
from meta.errors import UnsupportedMutationError
from meta.fresh_views import FreshViews, RequiresGradCalls
from meta.function_apply import functions_seen_by_modes
from meta.indices import IntermediateBase, UserArg, UserOut
from meta.overlap import (
    EagerOverlapChecks,
    is_overlap_error,
)
from meta.recorder import ABSOLUTE_OFFSET_OPS, SET_TWINS, ViewRecorder, Write
from meta.reseeds import Reseeds
from meta.storage import (
    CALLER_IN_INFERENCE_MODE,
    fake_inputs,
    has_version_counter,
    intersect,
    leaf_of_ungraded_base,
    offset_of,
    storage_extent,
    storage_key,
    touch_interval,
    view_root,
    whole_storage_in,
)
from meta.versions import history_refused, version
from meta.view_and_mutation import (
    ComputedAlias,
    InputAliasInfo,
    OutputAliasInfo,
    OutputType,
    TensorSpec,
    ViewAndMutationMeta,
    ViewStep,
    replay_views,
    set_within,
)

__all__ = ["collect_meta", "raised_by_eager_backward"]
# Keys of the steps taking a grown storage's root tensor again (above every traced step's ``clock * 1024``).
_GROWN_ROOT_KEY = 2**50
_SET_ONTO_KEY = 2**51  # (and those of tensors set_() onto an input's memory, replayed as no views)


@contextlib.contextmanager
def _unbacked_sizes_unbound(fake_mode: FakeTensorMode) -> Iterator[None]:
    """Data-dependent sizes (``nonzero``'s) are new unbacked symbols of the shape environment; no graph
    binds them here (nothing is traced), so the environment is told not to look for where they are bound."""
    shape_env = fake_mode.shape_env
    if shape_env is None:
        yield
        return
    with shape_env.ignore_fresh_unbacked_symbols():
        yield


def collect_meta(
    flat_fn: Callable[..., Sequence[torch.Tensor]],
    flat_args: Sequence[torch.Tensor],
    names: Sequence[str],
    fake_mode: FakeTensorMode | None = None,
) -> ViewAndMutationMeta[UserArg, UserOut]:
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
        initial_geometry = [geometry_of(fake) for fake in fakes]
        initial_versions = [fake._version for fake in fakes]
        initially_requiring_grad = [fake.requires_grad for fake in fakes]
        initial_history = [history_of(fake) for fake in fakes]
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
        # Outside inference mode too: a Function (or a built-in op) recording a node saves an inference input as
        # eager refuses to, and only the fakes see every save (the graph may save another value, or none).
        refusing = bool(in_inference_mode or inference_storages)
        saves = _checked_saves(inference_storages, refusing)
        fresh = fresh_views if needs_fresh_views else _nothing()
        # (A torch-function mode changes some library code paths: only where an input requires grad, before
        # the call or, seen once the function ran, after it.)
        watched = in_inference_mode and (
            watch_calls or any(isinstance(t, torch.Tensor) and t.requires_grad for t in flat_args)
        )
        calls = RequiresGradCalls(recorder.made_require_grad, frozenset(inference_storages)) if watched else _nothing()
        try:
            hooks, reseeds = saved_tensor_hooks_suspended(), Reseeds()
            functions = functions_seen_by_modes(recorder.note_function_apply)
            with hooks, functions, saves, fake_mode, recorder, calls, fresh, reseeds:
                with _unbacked_sizes_unbound(fake_mode):
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
        # A view of an input the caller made a leaf by requires_grad_() on a view of a base requiring none, once
        # the memory is written: autograd on fakes fails to take its history again (``FreshViews._of_leaf_views``).
        leaf_views_written = recorder.writes and any(leaf_of_ungraded_base(arg) for arg in flat_args)
        if not needs_fresh_views and (any(w.metadata_only for w in recorder.writes) or leaf_views_written):
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
        isinstance(o, torch.Tensor) and o.requires_grad and not is_leaf_safely(o) for o in outs
    )
    # Leaves set_() moved to another shape: differentiated, the MetadataMutation layer moves the caller's first.
    reshaped = set()
    for i, fake in enumerate(fakes):
        geometry, storage = initial_geometry[i], initial_storages[i][0]
        if initially_requiring_grad[i] and _reshaped_then_moved(recorder, fake, geometry, storage, outs):
            recorder.reshaped_leaves.setdefault(id(fake), 0)  # (its moves began before the set_())
        if not differentiated or id(fake) not in recorder.reshaped_leaves:
            continue
        # Moved within its own memory, the caller's tensor cannot be moved first beside its old self.
        if storage_key(fake) == initial_storages[i][0]:
            recorder.set_refusal = recorder.set_refusal or (aten.set_.source_Tensor, fake)
            continue
        reshaped.add(i)
        recorder.moved_history.setdefault(id(fake), recorder.reshaped_leaves[id(fake)])
    for fake, real in zip(fakes, flat_args, strict=True):
        # The fake of a non-leaf is a view of a leaf of its own: only the caller's views have bases.
        movable = real.is_leaf or (real._base is not None and real._base.requires_grad)
        if id(fake) in recorder.moved_history and not movable:
            del recorder.moved_history[id(fake)]
            recorder.set_refusal = recorder.set_refusal or (aten.set_.source_Tensor, fake)
    if recorder.set_refusal is not None and differentiated:
        _refuse_set(*recorder.set_refusal, fakes, names)
    if differentiated:
        # Views of a base requiring grad moved in place are refused alike: eager's write goes into the base's history.
        in_place = {
            id(fake): recorder.moved_in_place[id(fake)]
            for fake, real in zip(fakes, flat_args, strict=True)
            if id(fake) in recorder.moved_in_place and real._base is not None and real._base.requires_grad
        }
        _refuse_moved_then_written(recorder, fakes, names, in_place)
    fake_ids = {id(fake) for fake in fakes}
    # Each data write's root: the input it went through (its memory outside the input's elements too).
    write_roots = [
        (w, id(recorder.chain_to_root(w.tensor, lambda t: id(t) in fake_ids)[0]))
        for w in recorder.writes
        if not w.metadata_only
    ]
    written_through = {root for _, root in write_roots}
    # Storages a write may have reached outside the elements of the input it went through.
    as_called = fake_ids - {id(w.tensor) for w in recorder.writes if w.metadata_only}
    stray_writes = {w.storage for w, _ in write_roots if not _within_an_input(recorder, w.tensor, as_called)}
    # Writes into a storage through a tensor set_() moved there (no input of that memory as its root): they
    # write the memory of the inputs it belongs to, as one through a view of theirs would.
    own_memory = {id(fake): key for fake, (key, _) in zip(fakes, initial_storages, strict=True)}
    moved_in_writes = [w for w, root in write_roots if own_memory.get(root) != w.storage]
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
    # Inputs whose set_() within their own memory autograd recorded: moved too, as set_() onto another input is
    # (``_set_source_in_own_memory``).
    set_in_own_memory = {
        i: source
        for i, fake in enumerate(fakes)
        if id(fake) in recorder.recorded_sets
        and (source := _set_source_in_own_memory(i, fakes, initial_storages)) is not None
    }
    moved |= {id(fakes[i]) for i in set_in_own_memory}
    # And views of a leaf whose geometry changed under no_grad after a use in grad mode: eager's views take
    # their history again from the leaf in its final geometry (the caller's, once restrided).
    moved |= recorder.accumulator_kept
    after_set = set()
    for out in outs:
        root = recorder.chain_to_root(out, lambda t: id(t) in input_position)[0]
        if id(root) in moved and root is not out and storage_key(out) == storage_key(root):
            after_set.add(id(out))
    storage_set_to = _new_storages(fakes, initial_storages, [None if id(o) in after_set else o for o in outs])
    for i, source in set_in_own_memory.items():
        storage_set_to[i] = source
    input_info = tuple(
        _input_info(
            name,
            real,
            fake,
            geometry,
            recorder.writes,
            [w for w, root in write_roots if root == id(fake)] + moved_in_writes,
            id(fake) in written_through,
            initial_storage[0] in absolute,  # its own memory: where set_() may have moved it is not the caller's
            recorder.reach.get(initial_storage[0], 0),
            initial_storage[0] not in stray_writes,
            fake._version - version,
            fake.requires_grad and not requires_grad,
            initial_storage,
            set_to,
            # Autograd recorded the set_() itself (its history is set_'s), not only other changes before it.
            set_to is not None and id(fake) in recorder.recorded_sets,
            recorder.grad_from_set.get(id(fake), -1) if set_to is not None else -1,
            history_of(fake) is not history,
            recorder.grown.get(initial_storage[0], 0),
            id(fake) in recorder.moved_history,
            id(fake) in recorder.accumulated_as_called,
            i in reshaped,
            version,
        )
        for i, (name, real, fake, geometry, version, requires_grad, initial_storage, set_to, history) in enumerate(
            zip(
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
    )

    # The last data write that moved each input's version counter (shared by its storage's views,
    # not by a ``.data`` alias), overlapping or not: a view taken before it was modified under eager's
    # eyes, whatever region the write touched.
    last_write = {UserArg(i): recorder.last_bump.get(id(fake), -1) for i, fake in enumerate(fakes)}

    output_info: list[OutputAliasInfo[UserArg, UserOut]] = []
    intermediate_bases: list[OutputAliasInfo[Never, Never]] = []
    base_of_root: dict[int, IntermediateBase] = {}
    grown = _grown_intermediate_storages(recorder, outs)
    # The step keys of each output's chain (the objects its replay goes through).
    chain_keys = [{step.key for step in recorder.chain_to_root(o, lambda t: id(t) in input_position)[1]} for o in outs]
    base_of_storage: dict[int, IntermediateBase] = {}
    grown_roots: dict[int, int] = {}  # id(root tensor on a grown storage) -> its number
    # Tensors the function set_() onto an input's memory, no views, replayed as such: their step, by id. One key
    # per tensor: an output and the views of it returned share the replayed object (their _base), in any order.
    set_onto_steps: dict[int, ViewStep] = {}
    moved_roots: dict[int, int] = {}

    def set_onto_key(tensor: torch.Tensor) -> int:
        return _SET_ONTO_KEY + moved_roots.setdefault(id(tensor), len(moved_roots))

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

        # A view made under no_grad of memory requiring grad, written since: eager refuses its history when the
        # caller reads it, not before (a fresh view of it would take that history again here).
        refused = history_refused(out) and not of_inference_input(out)
        # (Not one made to require grad inside, requires_grad_(): eager's keeps requires_grad, seed 22 program 665.)
        refused = refused and recorder.made_require_grad.get(id(out)) is not out

        def info(
            kind: OutputType, tensor: torch.Tensor = out, refused: bool = refused, **fields: Any
        ) -> OutputAliasInfo[UserArg, UserOut]:
            if refused:
                return OutputAliasInfo(
                    kind, requires_grad=True, spec=TensorSpec.of(tensor), history_refused=True, **fields
                )
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
            made_root = ViewStep(_set_onto, geometry_of(root), grad_enabled=False, key=root_key)
            if out.requires_grad:  # no view: its history is computed by the graph, put on the memory by the epilogue
                output_info.append(info(OutputType.NON_ALIAS, on_storage=(base_k, made_root)))
                continue
            chain = (made_root, *_from_final_geometry(chain, root, root_geometry)) if chain else (made_root,)
            output_info.append(info(OutputType.ALIAS_OF_INTERMEDIATE, base_intermediate=base_k, view_chain=chain))
            continue
        root, chain, root_geometry = recorder.chain_to_root(out, lambda t: id(t) in input_position)
        # A tensor set_() onto an input's memory (no view) is that memory in its geometry, whatever it was before;
        # but the object other outputs are views of is replayed and moved itself, after them (their _base).
        set_onto = out._base is None and storage_key(out) in input_storage
        set_onto = set_onto and any(step.op in SET_TWINS for step in chain)
        if set_onto and id(root) in input_position and _viewed_before_move(chain, out_idx, chain_keys):
            replayable = not _holds_traced_tensor(_sources_as_offsets(chain, root, root_geometry))
            # (Not moved with a history, by a set_() autograd may have recorded, which no replay knows of.)
            if replayable and (not out.requires_grad or is_leaf_safely(out)):
                set_onto = False
            elif not flat_args[input_position[id(root)]].is_inference():  # (whose views have no _base)
                _refuse_moved_after_views(out_idx, _memory_of(out, input_storage, names))
        if not chain or set_onto:
            if storage_key(out) in input_storage:
                # An alias of an input made by an op that is not a view op: rebuild it by strides.
                base = input_storage[storage_key(out)]
                step = ViewStep(aten.as_strided.default, (out.shape, out.stride(), out.storage_offset()))
                if out._base is None:
                    # A tensor set_() moved onto the input's memory: no view of it; under grad mode eager's
                    # set_ leaves a history that cannot be differentiated, as the replay's does.
                    step = _set_onto_step(out, flat_args[base].dtype, set_onto_key(out))
                    if out.requires_grad and not _history_of_set(out):
                        # set_() under no_grad kept the tensor's own history: the graph computes it, the
                        # epilogue puts it on a tensor set_() onto the caller's input.
                        step = dataclasses.replace(step, grad_enabled=False, key=-1)
                        alias = ComputedAlias(base, (step,), in_place=True)
                        output_info.append(info(OutputType.NON_ALIAS, computed_alias=alias))
                        continue
                    set_onto_steps[id(out)] = step
                output_info.append(info(OutputType.ALIAS_OF_INPUT, base_input=base, view_chain=(step,)))
            else:
                output_info.append(info(OutputType.NON_ALIAS))
            continue
        holder = out._base  # (the tensor eager's view is of, a tensor set_() onto an input's memory maybe)
        holder_step = set_onto_steps.get(id(holder)) if holder is not None else None
        kept_history_on_input = False  # (a holder with its own history, set_() onto an input's memory)
        if holder is not None and holder_step is None and id(holder) not in input_position and holder._base is None:
            # (One returned later or not at all, taken as the branch above takes it; moved, in the view's chain.)
            on_input = storage_key(holder) in input_storage and any(step.op in SET_TWINS for step in chain)
            # (Not an input's alias other outputs viewed before it moved: the branch above replays it moved.)
            holder_root, holder_chain, _ = recorder.chain_to_root(holder, lambda t: id(t) in input_position)
            holder_idx = first_position.get(id(holder), out_idx)
            viewed_before = id(holder_root) in input_position and _viewed_before_move(
                holder_chain, holder_idx, chain_keys
            )
            if on_input and not viewed_before and (not holder.requires_grad or _history_of_set(holder)):
                base_dtype = flat_args[input_storage[storage_key(holder)]].dtype
                holder_step = _set_onto_step(holder, base_dtype, set_onto_key(holder))
            kept_history_on_input = on_input and not viewed_before and holder_step is None
        views_after = None
        if holder is not None and holder_step is not None:
            views_after = _views_of_moved(recorder, out, holder, fake_mode)
        if holder is not None and holder_step is not None and views_after is not None:
            # A view of a tensor set_() onto an input's memory, taken after it moved: a view of the input, as that
            # tensor is, through the same object (its _base), not of an intermediate (which the graph computes).
            set_onto_steps[id(holder)] = holder_step
            base = input_storage[storage_key(holder)]
            views_after = (holder_step, *views_after)
            output_info.append(info(OutputType.ALIAS_OF_INPUT, base_input=base, view_chain=views_after))
            continue
        if holder is not None and kept_history_on_input and (kept := _views_of_moved(recorder, out, holder, fake_mode)):
            # A view of a tensor with its own history (set_() under no_grad kept it) set_() onto an input's memory:
            # eager's _base is that tensor, no input (nor the input's base). Where it is returned too, the view is
            # of that output (which the epilogue puts on the memory); else of a new tensor set_() onto the memory
            # as it is (under no_grad), the view carrying the graph's history of it (a Function's view, so to say).
            if id(holder) in first_position:
                of_output = (first_position[id(holder)], kept)
                output_info.append(info(OutputType.NON_ALIAS, hidden_view=True, view_of_output=of_output))
                continue
            base = input_storage[storage_key(holder)]
            set_step = _set_onto_step(holder, flat_args[base].dtype, set_onto_key(holder))
            alias = ComputedAlias(base, (dataclasses.replace(set_step, grad_enabled=False), *kept))
            output_info.append(info(OutputType.NON_ALIAS, computed_alias=alias))
            continue
        by_function = recorder.made_by_custom_function(out, len(chain))
        untracked = id(root) in made_to_require_grad
        replayed_as_eagers = refused or _replay_gives_eagers_autograd(
            fresh_views.fresh(out), root, chain, fake_mode, untracked
        )
        if by_function or not replayed_as_eagers:
            # Its autograd history is not a view's (an autograd.Function returning its input, say): the
            # graph computes it, and the epilogue puts it on the alias.
            if id(root) not in input_position:
                view_of = None if refused else _view_of(recorder, out, first_position, input_storage, grown)
                output_info.append(info(OutputType.NON_ALIAS, hidden_view=True, view_of_output=view_of))
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
            # A view taken before the input moved, then set_() onto the input's new memory (``v.set_(input)``):
            # the set_() is replayed within that memory, from where the view sat (no traced tensor at runtime).
            chain = _moved_view_set_within(_sources_as_offsets(chain, root), root)
            _refuse_chain_with_traced_tensor(chain, base)
            output_info.append(info(OutputType.ALIAS_OF_INPUT, base_input=base, view_chain=chain, after_set=True))
            continue
        chain = _sources_as_offsets(chain, root, root_geometry)
        if id(root) in input_position:
            base = input_position[id(root)]
            _refuse_chain_with_traced_tensor(chain, base)
            if storage_key(out) not in (storage_key(root), initial_storages[base][0]):
                _refuse_view_on_passed_memory(out_idx, base, names)
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
        if storage_key(root) != storage_key(out):
            # A view of an intermediate set_() onto other memory since: the graph's final value of it is not the
            # memory the view sits on. The graph computes the view; eager's _base is a tensor the caller never
            # gets, or none (made under inference mode); a returned one the compiled call cannot make its base.
            # A detach()/.data alias is no view: eager's has no _base at all, nor is it tied to the returned one.
            view = out._base is not None
            if view and id(root) in first_position and not CALLER_IN_INFERENCE_MODE.get():
                _refuse_moved_after_views(first_position[id(root)], _memory_of(root, input_storage, names))
            output_info.append(info(OutputType.NON_ALIAS, hidden_view=view))
            continue
        # A view of an intermediate: replayed from the graph's final value of it, whose geometry may
        # have changed in place since the first step was taken.
        chain = _from_final_geometry(chain, root, root_geometry)
        if id(root) in first_position:
            base_out = first_position[id(root)]
            if chain[0].in_place and out._base is root and (views := _views_of_moved(recorder, out, root, fake_mode)):
                # The returned tensor was moved in place (set_()) before the view was taken: the output is that
                # tensor as it ends, so the view is taken from it as it is, without moving it again (a replay
                # of the move would move an alias of it, which eager's _base is not).
                chain = views
            output_info.append(info(OutputType.ALIAS_OF_INTERMEDIATE, base_output=base_out, view_chain=chain))
            continue
        if id(root) not in base_of_root:
            base_of_root[id(root)] = IntermediateBase(len(intermediate_bases))
            intermediate_bases.append(
                OutputAliasInfo(
                    OutputType.NON_ALIAS,
                    requires_grad=root.requires_grad,
                    spec=TensorSpec.of(root),
                    is_leaf=root.requires_grad and is_leaf_safely(root),
                )
            )
        base_k = base_of_root[id(root)]
        output_info.append(info(OutputType.ALIAS_OF_INTERMEDIATE, base_intermediate=base_k, view_chain=chain))
    backward_error = None
    if any(info.mutates_data for info in input_info) or any(w.metadata_only for w in recorder.writes):
        with saved_tensor_hooks_suspended(), fake_mode:
            # Through fresh views: autograd's record of a view whose geometry changed is stale on fakes.
            # (Not through one whose history eager refuses: using it raises already, and the caller's does too.)
            through = [fresh_views.returned(out) for out in outs if not history_refused(out)]
            backward_error = _eager_backward_error(through)
    return ViewAndMutationMeta(
        tuple(input_info),
        tuple(output_info),
        tuple(intermediate_bases),
        backward_error,
        needs_fresh_views,
        reseeds.found,
    )


def _reshaped_then_moved(
    recorder: ViewRecorder, fake: torch.Tensor, initial: Any, initial_storage: int, outs: Sequence[Any]
) -> bool:
    """A leaf input set_() under no_grad onto other memory, ending in another shape than the caller's which a
    geometry change under no_grad gave it and the set_() kept (``ViewRecorder.reshaped_leaves`` has the moves
    a set_() itself reshapes), its final shape differentiated by the outputs and no other before: eager's
    gradient has that shape, so the caller's tensor is moved first, as for those. (An autograd.Function that
    took the leaf is among the differentiating ops: ``ViewRecorder.note_function_apply``.)"""
    leaf = fake._base is None and fake.requires_grad and is_leaf_safely(fake)
    moved = storage_key(fake) != initial_storage and id(fake) not in recorder.recorded_sets
    # Eager's gradient accumulator has the shape the leaf had when an op first differentiated it: the final one.
    shape = tuple(fake.shape)
    moved = moved and shape != tuple(initial[0]) and recorder.differentiated_leaves.get(id(fake), shape) == shape
    return leaf and moved and _reaches(fake, outs)


def _reaches(leaf: torch.Tensor, outs: Sequence[Any]) -> bool:
    """Whether the outputs' history reaches ``leaf`` (an output whose history autograd on fakes fails to take
    again is judged as not reaching it)."""
    roots: list[Any] = []
    for out in outs:
        with contextlib.suppress(Exception):
            roots.append(out.grad_fn)
    return any(getattr(node, "variable", None) is leaf for node in autograd_nodes(roots))


def _refuse_moved_then_written(
    recorder: ViewRecorder, fakes: Sequence[torch.Tensor], names: Sequence[str], moved_in_place: dict[int, int]
) -> None:
    """Refuse a write under grad mode into an input after set_() moved its history (or, ``moved_in_place``, moved
    a view of a base requiring grad onto other memory in the same geometry): eager records it as a write into the
    input's base (whose history the caller sees change), which the graph cannot give the base."""
    for i, fake in enumerate(fakes):
        since = recorder.moved_history.get(id(fake))
        # Moved in place, its history as it was is the compiled function's: an identity write's record (adding a
        # constant) passes the caller's base the gradients it did, so eager's answer stands.
        in_place = since is None
        since = moved_in_place.get(id(fake)) if in_place else since
        if since is None:
            continue
        for write in recorder.writes:
            # Through the input (or a view of its base taken after): writes through other tensors, or through
            # ones autograd does not track (``.data``), leave its base's history alone, in eager too.
            through = write.tensor is fake or (write.tensor._base is not None and write.tensor._base is fake._base)
            recorded = write.grad_enabled and write.tensor.requires_grad and not write.metadata_only
            recorded = recorded and not (in_place and write.identity_history)
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
    # An input itself is named itself, not the first input sharing its root (two views of one tensor).
    itself = [f"input {i} ({name})" for i, (fake, name) in enumerate(zip(fakes, names, strict=True)) if fake is tensor]
    what = itself[0] if itself else f"a view of {' / '.join(which)}"
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


def _set_onto(tensor: torch.Tensor, size: Any, stride: Any, offset: int, dtype: Any = None) -> torch.Tensor:
    """A new tensor ``set_()`` onto ``tensor``'s memory with this geometry, as eager's was: no view;
    under grad mode (where eager's requires grad), with set_'s history (it has no derivative). A geometry
    in ``dtype``'s elements (the tensor set_() onto a view of another dtype) is taken on its memory in it."""
    if dtype is not None and dtype != tensor.dtype:
        tensor = whole_storage_in(tensor, dtype)
    source = tensor.as_strided(size, stride, offset)
    plain = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    if torch.is_grad_enabled():
        # Eager's set_() leaves set_'s history where the tensor moved required grad itself, onto a source
        # requiring none too (``(a * 2).set_(b)``): a fresh one requiring grad (no leaf, which set_() refuses).
        plain = plain.requires_grad_().clone()
    plain.set_(source)  # type: ignore[call-overload]
    return plain


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


def _checked_saves(inference_storages: set[int], refusing: bool) -> contextlib.AbstractContextManager[Any]:
    """What eager checks of the tensors autograd saves, checked by hooks on the fakes.

    Its version check, at every save: a saved tensor whose counter moved since it was saved (a write through
    any view or ``detach()`` sharing it, another input's among them) raises when a backward unpacks it. Fakes
    are tensor subclasses, whose views autograd takes again by their view function, and from a base needing
    no grad (a view the function called ``requires_grad_()`` on) that gives no history: autograd's own unpack,
    reading a moved view's history before it checks the version, fails on its assert, not eager's error. With
    hooks it reads the history recorded at the save, and the check is this one.

    ``refusing``: eager's refusal to save an inference tensor for a backward too. Under the caller's inference
    mode only an autograd.Function records (in an ``enable_grad`` region, from an input requiring grad), and
    what it saves may be a value the function made (an inference tensor here too) or an input the caller made
    in inference mode (whose stand-in here is a normal tensor on ``inference_storages``). Outside it, any op
    recording a node (an input requiring grad) refuses to save such an input or a view of it.
    """

    def pack(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
        if refusing and (
            tensor.is_inference() or (tensor.layout == torch.strided and storage_key(tensor) in inference_storages)
        ):
            raise RuntimeError(
                "Inference tensors cannot be saved for backward. Please do not use Tensors created in inference "
                "mode in computation tracked by autograd. To work around this, you can make a clone to get a "
                "normal tensor and use it in autograd, or use `torch.no_grad()` instead of `torch.inference_mode()`."
            )
        # A detach() shares the counter, and holds no history: no cycle through a saved output's node. Not of a
        # real tensor the function captured (the op saving it refuses it, naming itself, as the mode's ops do).
        held = tensor.detach() if isinstance(tensor, FakeTensor) or is_traceable_wrapper_subclass(tensor) else tensor
        return held, version(tensor)

    def unpack(packed: tuple[torch.Tensor, int]) -> torch.Tensor:
        tensor, saved_version = packed
        if version(tensor) != saved_version:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace operation: "
                f"[{tensor.dtype} {list(tensor.shape)}] is at version {version(tensor)}; expected version "
                f"{saved_version} instead."
            )
        return tensor

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


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
    if geometry is None or geometry == geometry_of(root) or chain[0].from_geometry is not None:
        return chain
    size, stride, offset = geometry
    first = dataclasses.replace(chain[0], from_geometry=(size, stride, offset - offset_of(root)))
    return (first, *chain[1:])


def _eager_backward_error(outs: Sequence[torch.Tensor]) -> str | None:
    """Run eager's backward from ``outs`` (on the fakes): the error a mutation makes it raise, if any.

    Writes into inputs bump version counters shared with other inputs and their
    views, which the compiled graphs (working on copies) cannot see; a write into an
    expanded input leaves a history whose backward writes an expanded gradient; a
    geometry changed under no_grad leaves a history expecting the old shape.
    """
    # Also where no input requires grad: an output requiring grad then comes from a leaf the function made,
    # and eager's backward checks what was saved from it, whose counter a write through an input may move.
    differentiable = [o for o in outs if o.requires_grad and (o.is_floating_point() or o.is_complex())]
    if not differentiable:
        return None
    try:
        # All the way to the leaves, as ``loss.backward()`` goes (``autograd.grad`` to the inputs stops short).
        with EagerOverlapChecks():
            torch.autograd.backward(differentiable, [torch.ones_like(o) for o in differentiable])
    except Exception as error:  # others (autograd's stale view replay on fakes ...) are left to the trace
        if raised_by_eager_backward(error):
            return str(error)
    return None


def _within_an_input(recorder: ViewRecorder, written: torch.Tensor, inputs: set[int]) -> bool:
    """Whether ``written`` is one of ``inputs`` or an ordinary view of one, taken in its geometry as called:
    its elements are among that input's (an ``as_strided`` at an absolute offset may lie anywhere)."""
    root, steps, _ = recorder.chain_to_root(written, lambda t: id(t) in inputs)
    ordinary = all(s.op not in ABSOLUTE_OFFSET_OPS and not s.in_place and s.from_geometry is None for s in steps)
    return id(root) in inputs and ordinary


def _same_history(written: torch.Tensor, tensor: torch.Tensor) -> bool:
    """Whether autograd sees a write through ``written`` in ``tensor``'s history: it is ``tensor`` or another
    view of its base (not a tensor of its own that set_() put in the same memory, say)."""
    root = view_root(tensor)
    return written is tensor or written is root or written._base is root


def raised_by_eager_backward(error: BaseException) -> bool:
    """Whether ``error``, raised differentiating a trace, is one eager raises in its backward only (its
    forward runs): a saved tensor written in place (a view taken under no_grad, unpacked after another node's
    backward wrote it, refuses its history then); an overlap eager's backward refuses; or a tensor's
    geometry changed under no_grad, so its history computes a gradient of its old shape."""
    message = str(error)
    return isinstance(error, RuntimeError) and (
        "modified by an inplace operation" in message
        or "A view was created in no_grad mode and its base or another view of its base has been modified" in message
        or "invalid gradient at index" in message
        or "derivative for" in message  # set_() under grad mode: eager's history of it is NotImplemented
        or is_overlap_error(error)
    )


def _input_info(
    name: str,
    real: torch.Tensor,
    fake: torch.Tensor,
    initial_geometry: tuple[tuple[int, ...], tuple[int, ...], int],
    writes: list[Write],
    rooted_writes: list[Write],
    through: bool,
    offset_sensitive: bool,
    storage_reach: int,
    writes_within_inputs: bool,
    version_bumps: int,
    sets_requires_grad: bool,
    initial_storage: tuple[int, tuple[int, int]],
    storage_set_to: tuple[str, int] | None,
    set_recorded: bool,
    grad_from_set_at: int,
    history_rewritten: bool,
    storage_grown_to: int,
    moves_history: bool,
    accumulator_as_called: bool,
    moves_to_new_shape: bool,
    initial_version: int,
) -> InputAliasInfo:
    # Writes into the input's own memory (not into a storage set_() gave it later).
    key, interval = initial_storage
    # Its memory: where it was, and where a resize_ or as_strided_ moved it in that storage.
    intervals = [interval, touch_interval(fake)] if storage_key(fake) == key else [interval]
    data_writes = [
        w for w in writes if not w.metadata_only and w.storage == key and any(intersect(w.extent, i) for i in intervals)
    ]
    if not data_writes and offset_sensitive:
        # Only writes through a view of the input (or a tensor set_() onto its memory) at an absolute offset
        # (as_strided) outside its elements: they still write the caller's memory, so the input is written (its
        # storage, as far as reached).
        data_writes = [w for w in rooted_writes if w.storage == key]
    metadata_writes = [w for w in writes if w.metadata_only and w.tensor is fake]
    recorded_metadata_writes = [w for w in metadata_writes if w.grad_enabled]
    final_metadata = None
    if storage_set_to is not None:
        final_metadata = (tuple(fake.shape), tuple(fake.stride()), offset_of(fake))
    elif metadata_writes:
        # Relative to the input's own offset: a later call may pass it at another offset.
        final_metadata = (tuple(fake.shape), tuple(fake.stride()), offset_of(fake) - initial_geometry[2])
    metadata_steps: tuple[tuple[tuple[int, ...], tuple[int, ...], int, bool, int], ...] = ()
    if storage_set_to is None and final_metadata is not None:
        steps = [
            (
                w.geometry[0],
                w.geometry[1],
                w.geometry[2] - initial_geometry[2],
                w.grad_enabled,
                w.version - initial_version,
            )
            for w in metadata_writes
            if w.geometry is not None
        ]
        # Plain ints only (symbolic sizes keep the single restride to the final geometry), ending where it ends.
        if (
            len(steps) == len(metadata_writes)
            and all(type(n) is int for step in steps for n in (*step[0], *step[1], step[2]))
            and steps[-1][:3] == final_metadata
        ):
            metadata_steps = tuple(steps)
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
        some_mutation_unrecorded=any(w.hidden_from_autograd or not w.grad_enabled for w in data_writes),
        written_through=bool(data_writes) and through,
        # Not when requires_grad_() made it require grad: a leaf then, its new value has no history.
        # Nor when only a recorded set_() onto a source requiring grad made it require grad, after every write
        # of its own memory: those wrote values without gradient (eager's history there is set_'s alone).
        requires_grad_after=bool(data_writes)
        and fake.requires_grad
        and not (sets_requires_grad and is_leaf_safely(fake))
        and not (grad_from_set_at >= 0 and all(w.seq < grad_from_set_at for w in data_writes)),
        version_bumps=version_bumps,
        final_metadata=final_metadata,
        offset_sensitive=offset_sensitive,
        storage_reach=storage_reach,
        writes_within_inputs=writes_within_inputs,
        metadata_mutations_under_no_grad=bool(metadata_writes) and not recorded_metadata_writes,
        metadata_steps=metadata_steps,
        metadata_record_stale=real._base is not None
        and bool(recorded_metadata_writes)
        and recorded_metadata_writes[-1].version not in (-1, fake._version),
        # Eager leaves it a leaf requiring grad (a write of a value with history made it none).
        sets_requires_grad=sets_requires_grad and is_leaf_safely(fake),
        storage_set_to=storage_set_to,
        fresh_storage_nbytes=int(fake.untyped_storage().nbytes()) if storage_set_to == ("fresh", -1) else 0,
        set_recorded=set_recorded,
        storage_grown_to=storage_grown_to,
        moves_history=moves_history,
        accumulator_as_called=moves_history and accumulator_as_called and real.is_leaf,
        moves_to_new_shape=moves_to_new_shape,
        writes_recorded_past_base=any(
            w.grad_enabled and not w.hidden_from_autograd and _past_its_base(w) for w in data_writes
        ),
    )


def _past_its_base(write: Write) -> bool:
    """Whether ``write`` went through a view (not empty) reaching past the elements of its base, into memory a
    storage grown by ``out=``/``resize_`` holds beyond them (maybe, where symbolic)."""
    base = write.tensor._base
    if base is None or guard_or_false(write.tensor.numel() == 0):
        return False
    return guard_or_false(write.extent[1] > storage_extent(base)[1] * base.element_size())


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


def _moved_view_set_within(chain: tuple[ViewStep, ...], root: torch.Tensor) -> tuple[ViewStep, ...]:
    """``chain`` of a view of an input that moved, ``set_()`` within the input's new memory: the steps up to the
    last such ``set_()`` become one view of the caller's moved tensor in the geometry the ``set_()`` left. Eager's
    view may have been taken on the old memory, before the move: what it was before the ``set_()`` has no place
    in the new memory (the replay would take it out of bounds); only its final geometry, its ``_base`` (the
    input) and a history by strides are left of it."""
    first = chain[0].from_geometry
    last = max((i for i, step in enumerate(chain) if step.op is set_within), default=None)
    if first is None or last is None:
        return chain
    with torch.no_grad():
        moved = replay_views(root, chain[: last + 1])
    geometry = (tuple(moved.shape), tuple(moved.stride()), offset_of(moved) - offset_of(root))
    step = ViewStep(
        torch.ops.aten.alias.default,
        grad_enabled=chain[0].grad_enabled,
        key=chain[last].key,
        from_geometry=geometry,
        version=chain[0].version,
    )
    return (step, *chain[last + 1 :])


def _new_storages(
    fakes: Sequence[torch.Tensor],
    initial_storages: Sequence[tuple[int, tuple[int, int]]],
    outs: Sequence[torch.Tensor | None],
) -> list[tuple[str, int] | None]:
    """Where ``set_()`` moved each input: another input's storage, an output's, the one the function made that
    an earlier input was moved onto too (they share it after the call, as eager's), or one made inside."""
    fake_ids = {id(fake) for fake in fakes}
    found: list[tuple[str, int] | None] = []
    for fake, (initial_key, _) in zip(fakes, initial_storages, strict=True):
        key = storage_key(fake)
        # Of the inputs of that memory, one requiring grad first: a set_() autograd recorded is replayed onto it,
        # and leaves the target requiring grad only where its source (or itself) does, as eager's source did.
        on_key = [j for j, (other_key, _) in enumerate(initial_storages) if other_key == key]
        inputs = (("input", j) for j in sorted(on_key, key=lambda j: not fakes[j].requires_grad))
        # Not an input returned (itself, or another one that moved: its memory is found as that input's).
        outputs = (
            ("output", k)
            for k, out in enumerate(outs)
            if isinstance(out, torch.Tensor) and id(out) not in fake_ids and storage_key(out) == key
        )
        moved_with = (
            ("moved_with", j)
            for j, other in enumerate(fakes[: len(found)])
            if found[j] == ("fresh", -1) and storage_key(other) == key
        )
        found.append(None if key == initial_key else next(itertools.chain(inputs, outputs, moved_with), ("fresh", -1)))
    return found


def _set_source_in_own_memory(
    i: int, fakes: Sequence[torch.Tensor], initial_storages: Sequence[tuple[int, tuple[int, int]]]
) -> tuple[str, int] | None:
    """For input ``i``, set_() within its own storage by a set_() autograd recorded: the input of that storage
    it is taken as set_() onto, one requiring grad if any, else itself (None: it ends needing no grad, or moved).

    A recorded set_() is more than the geometry change the layers take a set_() within the same storage for: it
    leaves the tensor (a ``detach()`` alias onto a view of its base, say) requiring grad, with set_'s history,
    and a view's base with one too, whose derivative raises. Taken as a set_() onto an input, the caller's tensor
    is set_() onto that input after the call, as eager's was; set_'s history does not depend on which."""
    fake, key = fakes[i], initial_storages[i][0]
    if not fake.requires_grad or storage_key(fake) != key:
        return None
    sources = (j for j, other in enumerate(fakes) if j != i and initial_storages[j][0] == key and other.requires_grad)
    return ("input", next(sources, i))


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
    if not any(step.op in SET_TWINS and step.args and isinstance(step.args[0], torch.Tensor) for step in chain):
        return chain
    start = root
    if root_geometry is not None and chain[0].from_geometry is None:
        with torch.no_grad():
            start = root.as_strided(*root_geometry)
    steps = list(chain)
    for i, step in enumerate(steps):
        source = step.args[0] if step.op in SET_TWINS and step.args else None
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
        steps[i] = dataclasses.replace(step, op=set_within, args=geometry, kwargs=())
    return tuple(steps)


def _set_onto_step(tensor: torch.Tensor, base_dtype: torch.dtype, key: int) -> ViewStep:
    """The step replaying ``tensor``, no view, set_() onto the memory of an input of ``base_dtype``: a new tensor
    there in its geometry; under grad mode where ``tensor`` requires grad (set_'s history, see ``_set_onto``)."""
    step = ViewStep(_set_onto, (tensor.shape, tensor.stride(), tensor.storage_offset()), key=key)
    step = dataclasses.replace(step, grad_enabled=tensor.requires_grad)
    if tensor.dtype != base_dtype:  # (``t.set_(complex_input.real)``)
        step = dataclasses.replace(step, kwargs=(("dtype", tensor.dtype),))
    return step


def _views_of_moved(
    recorder: ViewRecorder, out: torch.Tensor, holder: torch.Tensor, fake_mode: FakeTensorMode
) -> tuple[ViewStep, ...] | None:
    """The steps taking ``holder`` to ``out``, if they are views (no in-place change) which, replayed from
    ``holder`` as it ends, give ``out``'s memory and geometry (no later move of ``holder`` changed where they
    start); else None."""
    views = recorder.chain_to_root(out, lambda t: t is holder)[1]
    if not views or any(step.in_place for step in views):
        return None
    try:
        with fake_mode, torch.no_grad():
            replayed = replay_views(holder, views)
    except Exception:  # (a step no longer applies to the final geometry)
        return None
    if storage_key(replayed) != storage_key(out) or geometry_of(replayed) != geometry_of(out):
        return None
    return views


def _viewed_before_move(chain: tuple[ViewStep, ...], out_idx: int, chain_keys: Sequence[set[int]]) -> bool:
    """Whether the object ``chain`` moves in place at its end (its last steps, in place) is one another
    output's chain goes through too (a view of it taken before the move, whose ``_base`` it stays)."""
    made = [step for step in chain if not step.in_place]
    return bool(made) and any(made[-1].key in keys for j, keys in enumerate(chain_keys) if j != out_idx)


def _memory_of(tensor: torch.Tensor, input_storage: dict[int, UserArg], names: Sequence[str]) -> str:
    """Whose memory ``tensor`` sits on, in words: an input's, or one the function made."""
    position = input_storage.get(storage_key(tensor))
    return "a tensor the function made" if position is None else f"input {position} ({names[position]})"


def _refuse_moved_after_views(out_idx: int, memory: str) -> None:
    """Refuse an output set_() onto an input's memory after other outputs were taken as views of it, where the
    set_() cannot be replayed on that object (its source is another tensor's memory, or it moves a history)."""
    raise UnsupportedMutationError(
        f"aten.set_.source_Tensor: output {out_idx} was set_() onto the memory of {memory} (argument source) after "
        "other outputs were taken as views of it: eager's keep it as their _base, which the compiled function "
        "cannot rebuild; return a clone() of one"
    )


def _refuse_view_on_passed_memory(out_idx: int, base: int, names: Sequence[str]) -> None:
    """Refuse an output view of input ``base`` taken while set_() had it on memory it left by a later set_():
    eager's view keeps that memory and the input as its _base; the replay from the caller's tensor (on its
    final memory) would read the wrong elements."""
    raise UnsupportedMutationError(
        f"aten.set_: output {out_idx}, a view of input {base} ({names[base]}), was taken on memory a set_() had "
        "moved it onto, which a later set_() moved it off: eager's view keeps that memory and the input as its "
        "_base, which the compiled function cannot rebuild; return a clone() of it"
    )


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


def _view_of(
    recorder: ViewRecorder,
    out: torch.Tensor,
    first_position: dict[int, UserOut],
    input_storage: dict[int, UserArg],
    grown: set[int],
) -> tuple[UserOut, tuple[ViewStep, ...]] | None:
    """For a view with a history no replay gives (an autograd.Function's) of a tensor the function made: where
    eager's ``_base`` is an output too, its position and the chain replaying the view from it. The caller's
    view must share that output's memory and have it as its ``_base``, not the graph's own value of it."""
    holder = out._base
    if holder is None or id(holder) not in first_position:
        return None
    key = storage_key(holder)
    if key != storage_key(out) or key in input_storage or key in grown:
        return None
    root, chain, geometry = recorder.chain_to_root(out, lambda t: t is holder)
    chain = _sources_as_offsets(chain, holder, geometry)
    if root is not holder or not chain or _holds_traced_tensor(chain):
        return None
    return first_position[id(holder)], _from_final_geometry(chain, holder, geometry)


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
