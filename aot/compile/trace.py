"""Trace the flat function into ATen-level FX graphs on fake tensors.

Two shapes of graph come out: the *joint* graph
``(primals..., tangents...) -> (outputs..., grad per primal...)`` when a backward
is needed, and the *inference* graph ``(primals...) -> (outputs...)`` otherwise.
Both have flat positional placeholders named ``primals_i``/``tangents_i``, no
``detach`` (graphs run without autograd, so it is a no-op there), no mutating
op (``aot.compile.functionalize``), and a typed descriptor on every placeholder and output.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx
import torch.fx._lazy_graph_module as lazy_graph_module
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import _disable_current_modes

from aot.compile.binding import bindings_held
from aot.compile.checkpoints import REENTRANT_CHECKPOINT, InlinedCheckpoints
from aot.compile.descriptors import DESC, ForwardOutput, Grad, InputWrite, Primal, Tangent
from aot.compile.function_outputs import FUNCTION_ARGS, FunctionOutputs
from aot.compile.functionalize import functionalize
from aot.compile.history_stops import HistoryStops, NoGradViewEdges, note_detached_reads
from aot.compile.partition import output_values
from aot.compile.source_lines import recording_source_lines
from aot.compile.stale_views import RegeneratedViews, needs_regenerated_views
from meta import symbolic
from meta.alias import AliasAnalysis, written_positions
from meta.eager_state import autograd_nodes, is_leaf_safely, saved_tensor_hooks_suspended
from meta.errors import UnsupportedMutationError
from meta.fresh_views import FreshViews, RequiresGradCalls
from meta.function_apply import functions_seen_by_modes
from meta.indices import GraphArg, GraphOut
from meta.out_resize import OutResize
from meta.overlap import EagerOverlapChecks, element_offsets
from meta.recorder import ABSOLUTE_OFFSET_OPS
from meta.stand_ins import collecting_stand_ins, leaf_standing_for
from meta.storage import (
    CALLER_IN_INFERENCE_MODE,
    fake_inputs,
    leaf_of_ungraded_base,
    storage_extent,
    storage_key,
    view_root,
)
from meta.storage_set import StorageSetsOntoTensors
from meta.versions import history_refused
from meta.view_and_mutation import ViewAndMutationMeta

__all__ = ["example_inputs", "fake_tangent", "identifier", "trace_inference", "trace_joint"]

FlatFn = Callable[..., Sequence[torch.Tensor]]


def identifier(name: str) -> str:
    """``name`` made a valid Python identifier for graph node names."""
    cleaned = "".join(ch if ch.isalnum() else "_" for ch in name).strip("_") or "arg"
    return f"_{cleaned}" if cleaned[0].isdigit() else cleaned


def fake_tangent(fake_mode: FakeTensorMode, output: Any) -> torch.Tensor:
    """A contiguous fake standing for the gradient of ``output``; runtime tangents are restrided to match."""
    with fake_mode:
        return torch.empty(output.spec.shape, dtype=output.spec.dtype)


_AUTOCAST_DEVICES = ("cpu", "cuda")


def _autocast_cache_as_eager(flat_fn: FlatFn) -> FlatFn:
    """``flat_fn`` with eager's autocast weight cache, which ``make_fx`` turns off.

    Eager casts a leaf that requires grad once per autocast region and reuses the cast, so
    the gradients of its uses are summed in the low precision before the cast back; a trace
    without the cache sums them after, and the gradient differs in the last bits. Only when
    no autocast region is open around the trace: the function's own regions then clear the
    cache on exit, and nothing traced outlives the trace in it.
    """
    enabled = torch.is_autocast_cache_enabled()
    if not enabled or any(torch.is_autocast_enabled(device) for device in _AUTOCAST_DEVICES):
        return flat_fn

    def with_cache(*args: torch.Tensor) -> Sequence[torch.Tensor]:
        previous = torch.is_autocast_cache_enabled()
        torch.set_autocast_cache_enabled(True)
        try:
            return flat_fn(*args)
        finally:
            torch.set_autocast_cache_enabled(previous)
            torch.clear_autocast_cache()

    return with_cache


@contextlib.contextmanager
def _geometry_changes(
    meta: ViewAndMutationMeta[GraphArg, GraphOut], fresh_views: FreshViews, inputs: Sequence[torch.Tensor]
) -> Iterator[None]:
    """Modes a program changing geometry in place is traced under (collect_meta ran it under them too):
    fresh views of tensors whose geometry changed, ``out=`` resizing as explicit ops, and ``set_()``
    onto a storage as one onto its tensor."""
    if not meta.fresh_views:
        yield
        return
    with fresh_views, OutResize(), StorageSetsOntoTensors(inputs):
        yield


_REQUIRES_GRAD = torch._C.TensorBase.__dict__["requires_grad"]
_flag_sets = threading.local()
_flag_lock = threading.Lock()
_flag_users = 0


def _set_requires_grad(tensor: torch.Tensor, flag: bool) -> None:
    if getattr(_flag_sets, "active", False) and tensor.requires_grad == bool(flag):
        return
    _REQUIRES_GRAD.__set__(tensor, flag)


class _RequiresGradProperty(property):
    # The C setter hands torch-function modes this property's ``__set__``; modes tell it by this name.
    __name__ = "requires_grad"


@contextlib.contextmanager
def _flag_sets_as_eager() -> Iterator[None]:
    """``t.requires_grad = flag`` where ``t`` already has that flag does nothing in this thread, as on eager's leaf.

    Meta collection ran the program on fakes as eager's tensors are, so eager set the flag on a leaf (on a
    non-leaf the setter raises, and collection raised it). In a trace the layers may hand the function a
    view standing for that leaf (an alias whose geometry may change, a view of a synthetic base), on
    which the setter would raise. The property is wrapped, not intercepted by a torch-function mode: a
    mode turns on library code paths made for subclasses.
    """
    global _flag_users
    with _flag_lock:
        if _flag_users == 0:
            torch.Tensor.requires_grad = _RequiresGradProperty(_REQUIRES_GRAD.__get__, _set_requires_grad)  # type: ignore[assignment]
        _flag_users += 1
    previous, _flag_sets.active = getattr(_flag_sets, "active", False), True
    try:
        yield
    finally:
        _flag_sets.active = previous
        with _flag_lock:
            _flag_users -= 1
            if _flag_users == 0:
                del torch.Tensor.requires_grad


def trace_joint(
    flat_fn: FlatFn,
    flat_args: Sequence[torch.Tensor],
    meta: ViewAndMutationMeta[GraphArg, GraphOut],
    decompositions: Mapping[Any, Callable[..., Any]],
) -> fx.GraphModule:
    """Trace forward and backward together into one graph.

    Outputs: every forward output, then one gradient per primal (``None`` for
    primals that do not require grad or do not reach a differentiable output).
    """
    tangent_outs = meta.traced_tangents
    gm, primals, tangents, backward_writes = _trace_joint_once(flat_fn, flat_args, meta, decompositions, None)
    regenerated = RegeneratedViews() if needs_regenerated_views(gm) else None
    # An input's new value the backward writes: eager's backward writes the caller's input.
    written_new_values = backward_writes.written_new_values(meta)
    if regenerated is not None or written_new_values:
        # Views whose history eager regenerates by strides after a write: traced again, following them.
        gm, primals, tangents, backward_writes = _trace_joint_once(
            flat_fn, flat_args, meta, decompositions, regenerated, written_new_values
        )
    num_primals = len(primals)
    names = [info.name for info in meta.input_info]
    # Inputs whose new values the forward returns for a layer above to write back, or that it writes itself.
    new_values = {int(out.new_value_of) for out in meta.output_info if out.new_value_of is not None}
    new_values |= {i for i, info in enumerate(meta.input_info) if info.mutates_data}
    descs: list[Any] = [Primal(GraphArg(i), info.name, i in new_values) for i, info in enumerate(meta.input_info)]
    descs += [Tangent(out) for out in tangent_outs]
    out_descs: list[Any] = [ForwardOutput(GraphOut(i)) for i in range(len(meta.output_info))]
    out_descs += [Grad(GraphArg(i), name) for i, name in enumerate(names)]
    placeholder_names = [f"primals_{i + 1}" for i in range(num_primals)]
    placeholder_names += [f"tangents_{i + 1}" for i in range(len(tangents))]
    # An autograd.Function's backward may write a saved input or its grad_output in place, as eager
    # allows: the graph returns their new values last, for the runtime to copy into those tensors.
    written = backward_writes.placeholders([*primals, *tangents])
    backward_writes.refuse_writes_into_outputs([*primals, *tangents])
    backward_writes.refuse_writes_outside_inputs(primals, names)
    # Left lazy: no backend runs the joint (the partitioner reads its graph), so its code is generated only if
    # someone reads or calls it.
    gm = _finish(gm, placeholder_names, descs, out_descs, writes_allowed=written, lazy=True)
    _reuse_forward_draws(gm, len(meta.output_info))
    gm.meta[USER_FUNCTIONS] = backward_writes.user_functions
    gm.meta[REACHED_FROM] = backward_writes.reached_from
    gm.meta[REENTRANT_CHECKPOINT] = backward_writes.reentrant_checkpoint
    return gm


def _trace_joint_once(
    flat_fn: FlatFn,
    flat_args: Sequence[torch.Tensor],
    meta: ViewAndMutationMeta[GraphArg, GraphOut],
    decompositions: Mapping[Any, Callable[..., Any]],
    regenerated: RegeneratedViews | None,
    written_new_values: Mapping[int, tuple[int, tuple[Any, Any, Any] | None]] | None = None,
) -> tuple[fx.GraphModule, list[torch.Tensor], list[torch.Tensor], _BackwardWrites]:
    """The joint graph as make_fx records it (not yet functional), on fresh fakes of the inputs.

    ``written_new_values``: outputs (by index) that are an input's new value (the input's index) which the
    backward writes in place, as eager's backward writes the caller's input: the forward returns the value
    before the backward, and the backward writes the value it leaves into the input (a backward write the
    runtime copies into the caller's tensor); a value in an input's geometry, all of the copy it sits in."""
    written_new_values = written_new_values or {}
    fake_mode = symbolic.fake_mode()
    primals = fake_inputs(fake_mode, flat_args, independent=True)
    tangent_outs = meta.traced_tangents
    tangents = [fake_tangent(fake_mode, meta.output_info[out]) for out in tangent_outs]
    wants_grad = [i for i, info in enumerate(meta.input_info) if info.requires_grad]
    num_primals = len(primals)

    # The forward runs in the caller's grad mode, as eager's did: under no_grad, only the outputs of
    # an enable_grad region inside the function have a gradient.
    grad_mode = torch.is_grad_enabled()
    flat_fn = _autocast_cache_as_eager(flat_fn)

    backward_writes = _BackwardWrites()
    checkpoints = InlinedCheckpoints()

    # Primals eager's caller has as leaf views of a base requiring none, where the fakes are independent leaves:
    # the function gets a leaf made as eager's in their place (``meta.stand_ins``).
    ungraded = [i for i, arg in enumerate(flat_args) if leaf_of_ungraded_base(arg)]

    def joint(*args: torch.Tensor) -> list[torch.Tensor | None]:
        primal_args, tangent_args = args[:num_primals], args[num_primals:]
        fresh_views = FreshViews()
        history_stops = HistoryStops()
        with collecting_stand_ins() as stand_ins:
            as_called = [leaf_standing_for(p) if i in ungraded else p for i, p in enumerate(primal_args)]
            with (
                FunctionOutputs(),  # the first mode pushed: it sees the arguments the other modes hand apply
                torch.set_grad_enabled(grad_mode),
                _flag_sets_as_eager(),
                _geometry_changes(meta, fresh_views, as_called),
                regenerated if regenerated is not None else contextlib.nullcontext(),
                history_stops,
                NoGradViewEdges(),
                checkpoints,  # (the last: a reentrant checkpoint's function inlined, its ops reach every mode)
            ):
                outs = [fresh_views.returned(out) for out in flat_fn(*as_called)]
        stand_in_leaves = [leaf for leaf, _ in stand_ins]
        made_leaves = _leaves_made_inside(history_stops.made, [*as_called, *stand_in_leaves])
        history_stops.mark()
        if regenerated is not None:
            outs = [regenerated.fresh(out) if isinstance(out, torch.Tensor) else out for out in outs]
        new_values = {i: outs[i] for i in written_new_values}
        outs = [out.clone() if i in new_values else out for i, out in enumerate(outs)]
        backward_writes.outputs = outs
        grads: list[torch.Tensor | None] = [None] * num_primals
        differentiable = [outs[i] for i in tangent_outs]
        cotangents = list(tangent_args)
        # Only outputs with a history take their tangent. Under no_grad only the enable_grad regions' outputs
        # have one; a mutated input's new value is written back without one (its tangent is unused); and, in
        # either mode, a view taken under no_grad of one requiring grad (a Function's output) has none, nor one
        # whose history autograd refuses (written since).
        kept = [
            i
            for i, out in enumerate(differentiable)
            if out.requires_grad and not history_refused(out) and out.grad_fn is not None
        ]
        differentiable, cotangents = [differentiable[i] for i in kept], [cotangents[i] for i in kept]
        backward_writes.user_functions = _reaches_user_function([out.grad_fn for out in differentiable])
        if differentiable and (wants_grad or made_leaves):
            # Eager's backward refuses some writes by geometry (into an expanded view's gradient): so does
            # the trace, and the caller makes the compiled backward raise it. It runs every node reaching a
            # leaf, the function's own too (their gradients dropped): an autograd.Function's backward there
            # may write an input.
            # With an autograd.Function's node, the graph's data flow does not tell which tangents decide a gradient.
            sent = _GradientsSent(
                {tangent_outs[k]: out for k, out in zip(kept, differentiable, strict=True)}
                if backward_writes.user_functions
                else {},
                {i: primal_args[i] for i in wants_grad},
                stand_ins,
            )
            wanted = [primal_args[i] for i in wants_grad]
            # Eager's leaves (the caller's, the function's own) take their gradient when it arrives.
            eager_leaves = [p for i, p in zip(wants_grad, wanted, strict=True) if meta.input_info[i].is_leaf]
            arrivals = _GradientArrivals([*eager_leaves, *made_leaves] if backward_writes.user_functions else [])
            with backward_writes, sent, arrivals:  # (eager's overlap checks: ``backward_writes`` makes them)
                # (The graph kept: a stand-in's gradient goes on through its value's history after.)
                everything = arrivals.as_taken(
                    [*wanted, *made_leaves, *stand_in_leaves],
                    torch.autograd.grad(
                        differentiable,
                        [*wanted, *made_leaves, *stand_in_leaves],
                        cotangents,
                        allow_unused=True,
                        retain_graph=bool(stand_ins),
                    ),
                )
                leaf_grads = everything[len(everything) - len(stand_ins) :]
                found = _through_stand_ins(list(everything[: len(wanted)]), leaf_grads, stand_ins, wanted)
                with torch.no_grad():
                    written_inputs: set[int] = set()
                    for out_idx, value in new_values.items():
                        arg_idx, geometry = written_new_values[out_idx]
                        if arg_idx in written_inputs:
                            continue
                        written_inputs.add(arg_idx)
                        target = primal_args[arg_idx]
                        if geometry is not None:
                            # The value sits in a copy of the input laid out as the input is, where the backward
                            # may have written other elements too (another member of a synthetic base it saved):
                            # all of the copy is the input's new value, not the value's elements alone.
                            offset = geometry[2]
                            value = value.as_strided(target.shape, target.stride(), value.storage_offset() - offset)
                        target.copy_(value)
            if backward_writes.user_functions:
                backward_writes.reached_from = sent.reached_from()
            for arg_idx, grad in zip(wants_grad, found[: len(wants_grad)], strict=True):
                grads[arg_idx] = grad
        return [*outs, *grads]

    # A module's parameters stay bound to the primals through the backward trace too.
    with (
        saved_tensor_hooks_suspended(),
        functions_seen_by_modes(),
        recording_source_lines(),
        fake_mode,
        bindings_held(),
    ):
        gm = _traced(joint, decompositions, *primals, *tangents)
    backward_writes.reentrant_checkpoint = checkpoints.seen
    return gm, primals, tangents, backward_writes


# Joint graph meta: whether its backward runs an autograd.Function's backward. Eager's engine materializes zeros
# for the outputs of such a node no gradient reached once another output's did: a gradient computed from tangents
# none of which arrived need not be None there.
USER_FUNCTIONS = "user_functions"
# Joint graph meta, with such a node: for each primal requiring grad, the outputs a gradient reaches it from.
REACHED_FROM = "reached_from"


def _reaches_user_function(roots: Sequence[Any]) -> bool:
    """Whether the autograd graph behind ``roots`` (``grad_fn``s) has an autograd.Function's node."""
    return any(
        isinstance(node, torch.autograd.function.BackwardCFunction) and _user_function(node)
        for node in autograd_nodes(roots)
    )


class _GradientArrivals:
    """While active, notes the gradient of each of ``leaves`` as autograd captures it, when eager's
    AccumulateGrad would run (it runs as soon as the gradient is complete), with a copy then. Eager's
    AccumulateGrad stores a copy of a gradient another node still holds (the same tensor sent along two edges)
    or laid out unlike the leaf (a ``sum``'s expanded one): an autograd.Function's backward run after it, writing
    its ``grad_output`` in place, changes the tensor captured here but not eager's ``.grad``. ``as_taken`` gives
    the copy for each gradient written since it arrived (the copies unused are dead code in the graph)."""

    def __init__(self, leaves: Sequence[torch.Tensor]) -> None:
        self._leaves = list(leaves)
        self._arrived: dict[int, tuple[torch.Tensor, int, torch.Tensor]] = {}
        self._handles: list[Any] = []

    def __enter__(self) -> _GradientArrivals:
        def noting(leaf: torch.Tensor) -> Callable[[torch.Tensor], None]:
            def note(grad: torch.Tensor | None) -> None:
                if grad is not None:  # (an autograd.Function's backward may send None)
                    self._arrived[id(leaf)] = (grad, grad._version, grad.clone())

            return note

        self._handles = [leaf.register_hook(noting(leaf)) for leaf in self._leaves]  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()

    def as_taken(
        self, leaves: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None]
    ) -> list[torch.Tensor | None]:
        """``grads`` of ``leaves``, each written after it arrived replaced by its value then."""
        taken: list[torch.Tensor | None] = []
        for leaf, grad in zip(leaves, grads, strict=True):
            arrived = self._arrived.get(id(leaf))
            if arrived is not None and grad is arrived[0] and grad._version != arrived[1]:
                grad = arrived[2]
            taken.append(grad)
        return taken


class _GradientsSent:
    """While active, records along which edges each node of the autograd graph behind ``outputs`` sent a gradient
    (an autograd.Function's backward returns None for some of its inputs): eager's engine runs a node once a
    gradient reached it, an autograd.Function's with zeros for the outputs none reached, so an input gets none
    unless some output's gradient arrives with an edge path sending one from it to the input (a built-in node
    sending none for a gradient that did not arrive makes this a bound: no gradient arrived, none is sent).

    The edges of ``outputs`` and ``inputs`` (by position), and the stand-in leaves' and their values' (a gradient
    reaching a leaf goes on through its value's history, ``_through_stand_ins``), are taken when made: before the
    backward, which may write memory an autograd.Function's view output is taken from (its history is then refused).
    """

    def __init__(
        self,
        outputs: Mapping[int, torch.Tensor],
        inputs: Mapping[int, torch.Tensor],
        stand_ins: Sequence[tuple[torch.Tensor, torch.Tensor]],
    ) -> None:
        # (Edges hold their nodes: a node's Python object, and so its id, lives as long as something holds it.)
        self._roots = {out: _edge_of(tensor) for out, tensor in outputs.items()}
        self._targets = {i: _edge_of(tensor) for i, tensor in inputs.items()} if outputs else {}
        bridged = [(_edge_of(leaf), _edge_of(value)) for leaf, value in stand_ins if outputs and value.requires_grad]
        self._bridged = bridged
        self._bridges = {_edge_key(leaf_edge): value_edge for leaf_edge, value_edge in bridged}
        self._unsent: dict[int, frozenset[int]] = {}  # node -> the edges it sent None along
        self._handles: list[Any] = []

    def __enter__(self) -> _GradientsSent:
        def recorder(node: Any) -> Callable[[Any, Any], None]:
            def record(grad_inputs: Sequence[Any], grad_outputs: Sequence[Any]) -> None:
                # A node may run more than once (the stand-ins' gradients go on through their values' histories
                # after the first backward): it sent along an edge if any run did, so a later run sending None
                # there (a stand-in's gradient none of whose elements reach that input) keeps the edge.
                unsent = frozenset(j for j, grad in enumerate(grad_inputs) if grad is None)
                self._unsent[id(node)] = self._unsent.get(id(node), unsent) & unsent

            return record

        roots = [node for node, _ in self._roots.values()]
        self._handles = [node.register_hook(recorder(node)) for node in autograd_nodes(roots) if node.next_functions]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()

    def reached_from(self) -> dict[int, frozenset[int]]:
        """For each input (by position), the positions of the outputs a gradient reaches it from."""
        reached: dict[int, set[int]] = {i: set() for i in self._targets}
        for out, root in self._roots.items():
            seen: dict[tuple[int, int], tuple[Any, int]] = {}  # (holding the nodes)
            expanded: set[int] = set()
            stack = [root]
            while stack:
                edge = stack.pop()
                node = edge[0]
                if _edge_key(edge) in seen:
                    continue
                seen[_edge_key(edge)] = edge
                if _edge_key(edge) in self._bridges:
                    stack.append(self._bridges[_edge_key(edge)])
                if id(node) in expanded:
                    continue
                expanded.add(id(node))
                unsent = self._unsent.get(id(node), frozenset())
                stack += [edge for j, edge in enumerate(node.next_functions) if edge[0] is not None and j not in unsent]
            for i, target in self._targets.items():
                if _edge_key(target) in seen:
                    reached[i].add(out)
        return {i: frozenset(outs) for i, outs in reached.items()}


def _edge_of(tensor: torch.Tensor) -> tuple[Any, int]:
    edge = torch.autograd.graph.get_gradient_edge(tensor)
    return edge.node, edge.output_nr


def _edge_key(edge: tuple[Any, int]) -> tuple[int, int]:
    return id(edge[0]), edge[1]


def _through_stand_ins(
    grads: list[torch.Tensor | None],
    leaf_grads: Sequence[torch.Tensor | None],
    stand_ins: Sequence[tuple[torch.Tensor, torch.Tensor]],
    inputs: Sequence[torch.Tensor],
) -> list[torch.Tensor | None]:
    """``grads`` of ``inputs`` with the gradient of each stand-in leaf (``leaf_grads``) sent on through its value's
    history, the last made first (a value is computed from leaves made before it only)."""
    pending = list(leaf_grads)
    for k in reversed(range(len(stand_ins))):
        value = stand_ins[k][1]
        earlier = [leaf for leaf, _ in stand_ins[:k]]
        if pending[k] is None or not value.requires_grad or not (inputs or earlier):
            continue
        more = torch.autograd.grad([value], [*inputs, *earlier], [pending[k]], allow_unused=True, retain_graph=True)
        grads = [_summed(g, m) for g, m in zip(grads, more[: len(inputs)], strict=True)]
        pending[:k] = [_summed(g, m) for g, m in zip(pending[:k], more[len(inputs) :], strict=True)]
    return grads


def _summed(first: torch.Tensor | None, second: torch.Tensor | None) -> torch.Tensor | None:
    return second if first is None else first if second is None else first + second


def _user_function(node: Any) -> bool:
    """Whether an autograd.Function's node is the user's (or a compiled function's, which may run one), not one
    of the stand-ins the fakes and layers build eager's history with (their backwards pass gradients on)."""
    module = getattr(getattr(node, "_forward_cls", None), "__module__", "")
    return not module.startswith(("meta.", "wrappers."))


def _leaves_made_inside(made: Sequence[torch.Tensor], primals: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The leaves requiring grad the function made (``torch.ones(..., requires_grad=True)``, ``requires_grad_()``
    on a value of its own), once each: eager's backward reaches them, whoever sees their gradients."""
    leaves: dict[int, torch.Tensor] = {}
    primal_ids = {id(p) for p in primals}
    for tensor in made:
        if tensor.requires_grad and is_leaf_safely(tensor) and id(tensor) not in primal_ids:
            leaves.setdefault(id(tensor), tensor)
    return list(leaves.values())


def _is_random(node: fx.Node) -> bool:
    target = node.target
    return (
        node.op == "call_function"
        and isinstance(target, torch._ops.OpOverload)
        and torch.Tag.nondeterministic_seeded in target.tags
    )


def _reuse_forward_draws(gm: fx.GraphModule, num_fwd_outputs: int) -> None:
    """A random op the backward re-runs (activation checkpointing) reuses the forward's draw.

    Eager's checkpoint restores the RNG state before recomputing, so the recomputed
    dropout draws the forward's mask; on fake tensors nothing is restored and the
    trace has a second, independent draw. Each random op outside the forward's part
    of the joint graph is replaced by the forward random op computing the same thing
    from the same values (by value numbering), matched in order.
    """
    graph = gm.graph
    forward_outputs = [v for v in output_values(gm)[:num_fwd_outputs] if isinstance(v, fx.Node)]
    in_forward: set[fx.Node] = set()
    stack = list(forward_outputs)
    while stack:
        node = stack.pop()
        if node not in in_forward:
            in_forward.add(node)
            stack.extend(node.all_input_nodes)
    if not any(_is_random(n) for n in graph.nodes if n not in in_forward):
        return
    interned: dict[Any, int] = {}
    number: dict[fx.Node, int] = {}  # value numbers: equal when two nodes compute the same value
    unmatched: dict[Any, list[fx.Node]] = {}  # forward draws by what they compute, in order

    def value_number(key: Any) -> int:
        return interned.setdefault(key, len(interned))

    def numbered(value: Any) -> Any:
        if isinstance(value, fx.Node):
            return ("%", number[value])
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, *(numbered(v) for v in value))
        if isinstance(value, dict):
            return ("dict", *((k, numbered(v)) for k, v in value.items()))
        return repr(value)

    for node in list(graph.nodes):
        if node.op in ("placeholder", "output", "get_attr"):
            number[node] = value_number((node.op, node.name))
            continue
        key = (node.target, numbered(node.args), numbered(node.kwargs))
        if not _is_random(node):
            number[node] = value_number(key)
        elif node in in_forward:
            number[node] = value_number(("draw", node.name))
            unmatched.setdefault(key, []).append(node)
        elif unmatched.get(key):
            replacement = unmatched[key].pop(0)
            node.replace_all_uses_with(replacement)
            number[node] = number[replacement]
        else:
            number[node] = value_number(("draw", node.name))
    graph.eliminate_dead_code()
    graph.lint()
    gm.recompile()


def trace_inference(
    flat_fn: FlatFn,
    flat_args: Sequence[torch.Tensor],
    meta: ViewAndMutationMeta[GraphArg, GraphOut],
    decompositions: Mapping[Any, Callable[..., Any]],
    copied: frozenset[int] = frozenset(),
) -> fx.GraphModule:
    """Trace the forward alone: ``(primals...) -> (outputs...)``.

    In the caller's grad mode, as eager runs it: a ``torch.autograd.grad`` inside the
    function, or an op that decomposes by grad mode, is traced as eager executes it.
    The graph itself runs without autograd; where it may, it reads the inputs ``copied`` (``Stage.copied``), not
    their copies.
    """
    fake_mode = symbolic.fake_mode()
    primals = fake_inputs(fake_mode, flat_args, independent=True)

    flat_fn = _autocast_cache_as_eager(flat_fn)

    # As in collection: a Function given a view of an input eager's caller made in inference mode sees it
    # requiring no grad (``RequiresGradCalls``).
    inference_storages = frozenset(
        storage_key(primal) for primal, arg in zip(primals, flat_args, strict=True) if arg.is_inference()
    )
    inference_views = (
        RequiresGradCalls({}, inference_storages)
        if inference_storages and CALLER_IN_INFERENCE_MODE.get()
        else contextlib.nullcontext()
    )

    def forward(*args: torch.Tensor) -> list[torch.Tensor]:
        with _flag_sets_as_eager(), _geometry_changes(meta, FreshViews(), args), inference_views:
            return list(flat_fn(*args))

    grad_mode = torch.is_grad_enabled()
    with (
        saved_tensor_hooks_suspended(),
        functions_seen_by_modes(),
        recording_source_lines(),
        fake_mode,
        torch.set_grad_enabled(grad_mode),
    ):
        gm = _traced(forward, decompositions, *primals)
    names = [info.name for info in meta.input_info]
    descs: list[Any] = [Primal(GraphArg(i), name) for i, name in enumerate(names)]
    out_descs: list[Any] = [ForwardOutput(GraphOut(i)) for i in range(len(meta.output_info))]
    return _finish(gm, [f"primals_{i + 1}" for i in range(len(primals))], descs, out_descs, copied)


class _BackwardWrites(EagerOverlapChecks):
    """Records the storages written while the backward is traced, and raises eager's overlap errors there
    (one mode, not two stacked: every op of the backward trace passes each mode on the stack)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.storages: dict[int, str] = {}  # storage -> the first op writing it
        self.written: list[tuple[torch.Tensor, str]] = []  # each tensor written, and the op writing it
        self.outputs: Sequence[Any] = ()  # the forward's outputs, as traced
        self.user_functions = False  # whether the backward runs an autograd.Function's backward
        self.reentrant_checkpoint = False  # whether the function ran one (inlined: ``aot.compile.checkpoints``)
        # With one: for each primal requiring grad, the outputs a gradient reaches it from (``_GradientsSent``).
        self.reached_from: dict[int, frozenset[int]] | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        for position in written_positions(func, args):
            written = args[position] if position < len(args) else None
            if isinstance(written, torch.Tensor) and torch.Tag.inplace_view not in func.tags:
                self.storages.setdefault(storage_key(written), str(func))
                self.written.append((written, str(func)))
        return super().__torch_dispatch__(func, types, args, kwargs)

    def refuse_writes_outside_inputs(self, primals: Sequence[torch.Tensor], names: Sequence[str]) -> None:
        """Refuse a backward write into an input's memory outside its elements (through an ``as_strided`` at an
        absolute storage offset): the compiled backward writes the new values of an input's own elements back,
        so eager's write there (into another input sharing the memory, say) would be lost."""
        position = {id(primal): i for i, primal in enumerate(primals)}
        on_storage: dict[int, list[int]] = {}
        for i, primal in enumerate(primals):
            on_storage.setdefault(storage_key(primal), []).append(i)
        for written, op in self.written:
            root = position.get(id(view_root(written)))
            candidates = [root] if root is not None else on_storage.get(storage_key(written), [])
            if candidates and not any(_elements_within(written, primals[i]) for i in candidates):
                name = names[candidates[0]]
                raise UnsupportedMutationError(
                    f"an autograd.Function's backward writes ({op}) memory of input {name!r} outside its elements "
                    "(an as_strided at an absolute storage offset): the compiled backward writes back an input's "
                    "own elements only, so eager's write there would be lost. Have the Function save a tensor "
                    "within the input, or write a clone in its backward."
                )

    def placeholders(self, inputs: Sequence[torch.Tensor]) -> frozenset[int]:
        """The positions of ``inputs`` whose memory the backward wrote."""
        return frozenset(i for i, tensor in enumerate(inputs) if storage_key(tensor) in self.storages)

    def written_new_values(
        self, meta: ViewAndMutationMeta[GraphArg, GraphOut]
    ) -> dict[int, tuple[int, tuple[Any, Any, Any] | None]]:
        """The outputs (by index) that are an input's new value whose memory the backward wrote: the input's
        index, and where in it the value sits (None: all of it)."""
        found: dict[int, tuple[int, tuple[Any, Any, Any] | None]] = {}
        for i, (out, info) in enumerate(zip(self.outputs, meta.output_info, strict=False)):
            if not (isinstance(out, torch.Tensor) and storage_key(out) in self.storages):
                continue
            if info.new_value_of is not None:
                found[i] = (int(info.new_value_of), None)
            elif info.new_value_in is not None:
                found[i] = (int(info.new_value_in[0]), info.new_value_in[1])
        return found

    def refuse_writes_into_outputs(self, inputs: Sequence[torch.Tensor]) -> None:
        """Refuse a backward write into memory the forward returned (not an input's): eager's caller sees
        it change after the backward, a compiled call's outputs are graph values computed before it."""
        own = {storage_key(tensor) for tensor in inputs}
        for out in self.outputs:
            key = storage_key(out) if isinstance(out, torch.Tensor) else None
            if key in self.storages and key not in own:
                raise UnsupportedMutationError(
                    f"an autograd.Function's backward writes ({self.storages[key]}) into a tensor the compiled "
                    "function returns, or into an input the function also wrote: the write would have to "
                    "change a tensor the caller already holds. Clone what the Function saves, or write it "
                    "outside the backward."
                )


def _elements_within(tensor: torch.Tensor, container: torch.Tensor) -> bool:
    """Whether every element of ``tensor`` is one of ``container``'s (one storage); True where not decided (symbolic
    sizes, another layout or element size): no refusal there."""
    if tensor is container or tensor.numel() == 0:
        return True
    pair = (tensor, container)
    geometry = [n for t in pair for n in (*t.shape, *t.stride(), t.storage_offset())]
    plain = all(t.layout == torch.strided for t in pair) and tensor.element_size() == container.element_size()
    if not plain or not all(isinstance(n, int) for n in geometry):
        return True
    (start, end), (outer_start, outer_end) = storage_extent(tensor), storage_extent(container)
    if start < outer_start or end > outer_end:
        return False
    if is_non_overlapping_and_dense_or_false(container):
        return True
    with _disable_current_modes():  # a small real computation, neither faked nor traced
        elements, among = element_offsets(tensor, tensor.shape), element_offsets(container, container.shape)
        return bool(torch.isin(elements, among).all())


_lazy = threading.local()
_lazy_lock = threading.Lock()
_lazy_users = 0
_GRAPH_MODULE_CLS = lazy_graph_module._get_graph_module_cls


def _graph_module_cls() -> type[fx.GraphModule]:
    return lazy_graph_module._LazyGraphModule if getattr(_lazy, "active", False) else _GRAPH_MODULE_CLS()


def _traced(fn: Callable[..., Any], decompositions: Mapping[Any, Callable[..., Any]], *args: Any) -> fx.GraphModule:
    """``make_fx(fn)(*args)``, its code not generated: ``_finish`` rewrites the graph, then generates it once.

    make_fx generates a module's code when it makes it (a good part of a large graph's compile time), and
    ``_finish`` would again. Its module class is chosen by torch's ``_get_graph_module_cls``, read per call: it
    is wrapped while a trace runs to choose the lazy module in this thread (torch's own switch for that is
    one flag for every thread).
    """
    global _lazy_users
    with _lazy_lock:
        if _lazy_users == 0:
            lazy_graph_module._get_graph_module_cls = _graph_module_cls
        _lazy_users += 1
    previous, _lazy.active = getattr(_lazy, "active", False), True
    try:
        return make_fx(fn, decomposition_table=dict(decompositions))(*args)
    finally:
        _lazy.active = previous
        with _lazy_lock:
            _lazy_users -= 1
            if _lazy_users == 0:
                lazy_graph_module._get_graph_module_cls = _GRAPH_MODULE_CLS


def _made_eager(gm: fx.GraphModule, children_only: bool = False) -> fx.GraphModule:
    """``gm``, and the graph modules it holds (a higher-order op's subgraphs, traced lazily too), as plain
    GraphModules with their code generated: what backends get (a lazy module generates its code on first
    use, which TorchScript, say, refuses). ``children_only``: ``gm`` itself stays as it is (the joint graph,
    which the partitioner copies its subgraphs from into the graphs backends get)."""
    for name, child in list(gm.named_children()):
        if isinstance(child, fx.GraphModule):
            setattr(gm, name, _made_eager(child))
    if children_only or not isinstance(gm, lazy_graph_module._LazyGraphModule):
        return gm
    plain = fx.GraphModule(gm, gm.graph, type(gm).__name__)
    plain.meta.update(gm.meta)
    return plain


def _finish(
    gm: fx.GraphModule,
    names: list[str],
    descs: list[Any],
    out_descs: list[Any],
    copied: frozenset[int] = frozenset(),
    writes_allowed: frozenset[int] = frozenset(),
    lazy: bool = False,
) -> fx.GraphModule:
    """``gm`` renamed, described, functional, without detach; its code generated unless ``lazy`` (then on first
    use: a lazy module made by ``_traced`` stays lazy)."""
    graph = gm.graph
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    for node, name, desc in zip(placeholders, names, descs, strict=True):
        node._rename(name)
        # torch's partitioners (and ones ported from them) find primals and tangents by target.
        node.target = node.name
        node.meta[DESC] = desc
    # Every graph a backend sees is functional; the layers above guarantee no input is written.
    functionalize(gm, recompile=False)  # linted and recompiled below, after the rewrites that follow
    if not set(gm.meta["mutated_inputs"]) <= writes_allowed:
        raise AssertionError(f"the traced function writes graph inputs {gm.meta['mutated_inputs']}")
    out_descs = out_descs + [InputWrite(i, names[i]) for i in gm.meta["mutated_inputs"]]
    graph = gm.graph
    # After functionalization: before it, a detached alias is another tensor whose geometry may change.
    note_detached_reads(graph)
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten.detach.default:
            if FUNCTION_ARGS in node.meta:  # (the Function applied again reads it without history: it knows)
                source = node.args[0]
                source.meta[FUNCTION_ARGS] = (*source.meta.get(FUNCTION_ARGS, ()), *node.meta[FUNCTION_ARGS])
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
    if copied:
        _drop_input_copies(gm, copied)
    graph = gm.graph
    output = graph.output_node()
    output.meta[DESC] = out_descs
    for value, desc in zip(output_values(gm), out_descs, strict=True):
        if isinstance(desc, Grad) and isinstance(value, fx.Node) and value.op == "call_function":
            if len(value.users) == 1:
                value._rename(f"grad_{identifier(desc.name)}")
    graph.eliminate_dead_code()
    graph.lint()
    # make_fx left its module lazy (``_traced``): its code is generated here, once.
    finished = _made_eager(gm, children_only=lazy)
    if finished is gm:  # (a lazy module only notes that its code is stale)
        gm.recompile()
    return finished


def _drop_input_copies(gm: fx.GraphModule, copied: frozenset[int]) -> None:
    """Read the inputs the stage says its function copies (``Stage.copied``) directly, not their copies.

    Once the graph is functional, nothing writes the copy, so reading the input
    is the same, and saves a copy per call (of a whole synthetic base, say);
    kept where an output would then alias the input's memory. Inference graphs
    only: a training forward could save the input for a backward that runs
    after the layers wrote the input's new value into it.
    """
    graph = gm.graph
    analysis = AliasAnalysis(graph)
    inputs = {node for i, node in enumerate(graph.find_nodes(op="placeholder")) if i in copied}
    outputs = [value for value in output_values(gm) if isinstance(value, fx.Node)]
    # What ops reading storage at absolute offsets read (found once; the loop only drops nodes).
    absolute_reads = [
        node.args[0]
        for node in graph.nodes
        if node.target in ABSOLUTE_OFFSET_OPS and node.args and isinstance(node.args[0], fx.Node)
    ]
    for node in list(graph.nodes):
        if node.target is not torch.ops.aten.clone.default or node.kwargs.get("memory_format") is not None:
            continue
        if (source := node.args[0]) not in inputs or any(analysis.may_alias(out, node) for out in outputs):
            continue
        if not _same_layout(node, source) or any(analysis.may_alias(read, node) for read in absolute_reads):
            # A read at an absolute storage offset sees where the copy sits, not where the input does.
            continue
        node.replace_all_uses_with(source)
        graph.erase_node(node)


def _same_layout(copy: fx.Node, source: fx.Node) -> bool:
    copy_val, source_val = copy.meta.get("val"), source.meta.get("val")
    if not isinstance(copy_val, torch.Tensor) or not isinstance(source_val, torch.Tensor):
        return False
    return bool(copy_val.stride() == source_val.stride() and copy_val.storage_offset() == source_val.storage_offset())


def example_inputs(gm: fx.GraphModule) -> list[Any]:
    """The fake values of a graph's placeholders: what a backend compiler is shown."""
    return [node.meta.get("val") for node in gm.graph.nodes if node.op == "placeholder"]
