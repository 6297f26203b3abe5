"""Split a joint graph, saving the fewest bytes: a minimum cut, recomputing cheap ops in the backward.

The default partitioner saves every forward value the backward reads. Many of
those are cheap to compute again from values saved anyway (``gelu(x)`` from
``x``, a mask from a comparison, a transpose), and some are not worth keeping
at all (a 200-op pointwise chain needs only its input). This partitioner
picks the saved set as a minimum cut of the joint graph's data flow, each value
weighted by its bytes (from its fake ``meta["val"]``):

- every node ``n`` is an edge ``n_in -> n_out`` of capacity "bytes of n"
  (infinite for a tuple, which cannot be saved as one value); each use is an
  edge ``n_out -> user_in`` of infinite capacity;
- what the backward must compute (nodes reading a tangent) hangs off the sink,
  and so does each gradient output;
- what the backward may not recompute hangs off the source: the primals, random
  ops that cannot be replayed (a second draw would differ), and every op the forward
  needs that is not cheap and safe to run again (matmuls, convolutions, anything not in
  :data:`RECOMPUTABLE`, reductions that shrink their input more than 4x);
- a CPU draw can be run again from the generator state before it
  (``aot.compile.rng_replay``): its node hangs off the source through an edge of the
  state's bytes, so the cut saves the state where that is cheaper than the draw;
- a cut edge ``n_in -> n_out`` is a saved value; the backward recomputes whatever
  lies between the saved values and the gradients.

Values the forward does not need (a weight's transpose read only by the
backward) may go either way, as in the default partitioner; so the default's
saved set is always one of the cuts considered, and this one never saves more
bytes. Among the cuts of least bytes, the one closest to the backward is taken
(the least recomputation).
"""

from __future__ import annotations

import math
import operator
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from aot.compile.partition import (
    JointParts,
    ancestors,
    computed_from,
    is_random,
    is_size,
    is_tangent,
    split_joint,
    written_by_forward,
)
from aot.compile.policy import ActivationPolicy, Choice, policy_of, refuse_must_recompute
from aot.compile.rng_replay import STATE_BYTES, replay_draws, replayable

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "RECOMPUTABLE",
    "REDUCTIONS",
    "can_run_again",
    "is_recomputable",
    "min_cut_rematerialization_partition",
    "node_bytes",
    "size_hint",
]

aten = torch.ops.aten
prims = torch.ops.prims

# Reductions cheap to run again, unless they shrink their input more than 4x (then saving the result is cheap).
REDUCTIONS: frozenset[Any] = frozenset(
    {
        aten.sum, aten.mean, aten.amax, aten.amin, aten.max, aten.min, aten.var, aten.std, aten.var_mean,
        aten.any, aten.all, aten.argmax, aten.argmin, aten._grad_sum_to_size, aten.sum_to_size,
        prims.sum, prims.var,
    }
)  # fmt: skip

# Ops cheap to run again in the backward beyond the pointwise ones (``Tag.pointwise``) and views
# (``OpOverload.is_view``), by packet: every overload of one is recomputable.
RECOMPUTABLE: frozenset[Any] = frozenset(
    {
        # copies, reshapes, broadcasts, dtype casts
        aten.clone, aten._to_copy, aten.to, aten.type_as, aten.reshape, aten._unsafe_view, aten.expand,
        aten.broadcast_tensors, aten.lift_fresh_copy, aten.copy, prims.convert_element_type,
        prims.broadcast_in_dim, prims.div,
        # constants and fills
        aten.full, aten.full_like, aten.zeros, aten.zeros_like, aten.ones, aten.ones_like, aten.empty,
        aten.empty_like, aten.empty_strided, aten.new_zeros, aten.new_ones, aten.new_full, aten.new_empty,
        aten.scalar_tensor, aten.arange, prims.iota, aten.triu, aten.tril,
        # indexing
        aten.index, aten.gather,
    }
    | REDUCTIONS
)  # fmt: skip

INF = math.inf


def node_bytes(node: fx.Node) -> float:
    """Bytes of saving ``node``'s value: a tensor's ``numel * itemsize``, 1 for a symbolic
    int, infinite for what cannot be saved as one value (a tuple of tensors)."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return size_hint(val.numel()) * val.element_size()
    if isinstance(val, (torch.SymInt, torch.SymBool, torch.SymFloat, int, float, bool)):
        return 1
    if val is None and not node.users:
        return 0
    return INF


def _capacity(node: fx.Node, scale: int) -> float:
    weight = node_bytes(node)
    if weight == INF:
        return INF
    is_view = isinstance(node.target, torch._ops.OpOverload) and node.target.is_view
    return int(weight) * scale + int(is_view)


def size_hint(size: int | torch.SymInt) -> int:
    """A size's value when the graph was traced, for weights and estimates (a guess for an unbacked one)."""
    if isinstance(size, int):
        return size
    hint = size.node.hint
    if hint is None:
        try:
            hint = size.node.shape_env.size_hint(size.node.expr)
        except Exception:  # an unbacked size: any guess will do for a weight
            hint = 4096
    return int(hint)


def is_recomputable(node: fx.Node) -> bool:
    """Cheap and safe to run again: pointwise, a view, or in :data:`RECOMPUTABLE`; never random or mutating."""
    if not can_run_again(node):
        return False
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return True  # a module constant, a projection of a tuple, symbolic-shape arithmetic: free
    if target.is_view or torch.Tag.pointwise in target.tags or target.overloadpacket in RECOMPUTABLE:
        return True
    return target is aten.sym_size.int or target is aten.sym_numel.default or target is aten.sym_stride.int


def _policy_choice(policy: ActivationPolicy | None, node: fx.Node) -> Choice | None:
    """The policy's word on ``node`` where it can be followed (a must that cannot is an error)."""
    decided = None if policy is None or node.op != "call_function" else policy.choice(node)
    if decided is None:
        return None
    choice, must = decided
    if choice is Choice.RECOMPUTE and not (replayable(node) or can_run_again(node)):
        if must:
            refuse_must_recompute(node)
        return None
    return choice


def can_run_again(node: fx.Node) -> bool:
    """Deterministic, writes nothing, makes no data-dependent size: the backward may run it again
    (at a cost: a matmul is not *cheap* to run again, see :func:`is_recomputable`)."""
    if node.op == "get_attr":
        return True  # a constant of the module: reading it again is free
    if node.op != "call_function":
        return False
    target = node.target
    if target is operator.getitem:
        return True  # its tuple's op is judged on its own
    if not isinstance(target, torch._ops.OpOverload):
        # symbolic-shape arithmetic (operator.mul on SymInts, sym_size): recomputing is free
        return isinstance(node.meta.get("val"), (torch.SymInt, torch.SymBool, int, bool))
    if torch.Tag.nondeterministic_seeded in target.tags or target._schema.is_mutable:
        return False
    # a data-dependent size (nonzero, a boolean mask's index): run again, it is a new size
    return not free_unbacked_symbols(node.meta.get("val"))


def _shrinks(node: fx.Node) -> bool:
    """A reduction whose result is more than 4x smaller than its inputs: cheap to save, costly to recompute."""
    if not isinstance(node.target, torch._ops.OpOverload) or node.target.overloadpacket not in REDUCTIONS:
        return False
    inputs = sum(node_bytes(arg) for arg in node.all_input_nodes)
    return 4 * node_bytes(node) < inputs


def min_cut_rematerialization_partition(
    joint_module: fx.GraphModule,
    _joint_inputs: Any = None,
    *,
    num_fwd_outputs: int,
    **_ignored: Any,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Forward and backward graphs of ``joint_module`` saving a minimum-byte set of values.

    torch's name and signature (extra keyword arguments such as ``compiler`` are accepted and
    ignored), so a partitioner call written for torch's ports unchanged. Returns
    ``(forward, backward)`` as :func:`~aot.compile.partition.default_partition` does: the
    forward returns its outputs then the saved values, the backward takes the saved values
    then the tangents. Random ops stay in the forward (the backward reads their draw).
    """
    graph = joint_module.graph
    parts = JointParts.of(joint_module, num_fwd_outputs)
    tangent_dependent = parts.tangent_dependent
    required_forward = ancestors([*parts.fwd_outputs, *parts.random_in_backward])
    policy = policy_of(joint_module)

    # Bytes scaled so that a unit added to each view's weight only breaks ties: of two equal cuts,
    # the one saving a base rather than its view (the backward rebuilds the view for free).
    scale = len(graph.nodes) + 1
    import networkx as nx  # here: importing it costs more than the rest of ``import aot``

    flow = nx.DiGraph()
    for node in graph.nodes:
        if node.op == "output":
            continue
        if node in tangent_dependent:
            flow.add_edge(_in(node), "sink", capacity=INF)
            continue
        choice = _policy_choice(policy, node)
        cheap = is_recomputable(node) and not _shrinks(node)
        replay = replayable(node) and choice is not Choice.SAVE
        pinned = (
            node.op == "placeholder"
            or is_size(node)  # see ``default_partition``: a size read in the backward off an input may be stale
            or (is_random(node) and not replay)
            or (node in required_forward and (choice is Choice.SAVE or (not cheap and choice is None and not replay)))
        )
        if pinned:
            flow.add_edge("source", _in(node), capacity=INF)
        if replay:  # run again in the backward from its generator state, saved by the forward
            flow.add_edge("source", _in(node) + "_state", capacity=INF)
            flow.add_edge(_in(node) + "_state", _in(node), capacity=STATE_BYTES * scale)
        # An input the forward writes holds new values by the backward: saved only where the backward
        # reads it itself (as eager's does), never to recompute from. A value the policy recomputes: never saved.
        unreadable = written_by_forward(node) and not any(user in tangent_dependent for user in node.users)
        unsaved = unreadable or (choice is Choice.RECOMPUTE and not pinned)
        flow.add_edge(_in(node), _out(node), capacity=INF if unsaved else _capacity(node, scale))
        for user in node.users:
            if user.op != "output":
                flow.add_edge(_out(node), _in(user), capacity=INF)
    for grad in parts.grads:
        if isinstance(grad, fx.Node) and grad not in tangent_dependent:
            flow.add_edge(_out(grad), "sink", capacity=INF)  # a gradient computed without tangents
    flow.add_nodes_from(["source", "sink"])

    reaches_sink = _closest_to_sink_cut(flow)
    saved = [
        node
        for node in graph.nodes
        if node.op != "output"
        and node not in tangent_dependent
        and _in(node) not in reaches_sink
        and _out(node) in reaches_sink
    ]
    forward_nodes = ancestors([*parts.fwd_outputs, *saved, *parts.random_in_backward]) | set(parts.primals)
    backward_nodes = ancestors(parts.grads, stop=set(saved)) | set(parts.tangents)
    forward, backward = split_joint(joint_module, parts, forward_nodes, backward_nodes, saved)
    replay_draws(forward, backward, [node.name for node in backward_nodes if is_random(node)])
    _recompute_where_used(backward)
    return forward, backward


def _recompute_where_used(backward: fx.GraphModule) -> None:
    """Move each recomputed value (one not computed from a tangent) to just before its first use,
    so that recomputed values live while the gradient needing them is computed, not all at once
    from the start of the backward."""
    graph = backward.graph
    from_tangents = computed_from(
        graph, (node for node in graph.nodes if node.op == "placeholder" and is_tangent(node))
    )
    placed: set[fx.Node] = {node for node in graph.nodes if node.op == "placeholder"}
    order: list[fx.Node] = []
    for anchor in graph.nodes:
        if anchor not in from_tangents and anchor.op != "output":
            continue
        stack = [(anchor, False)]
        while stack:  # inputs before users, each node once
            node, inputs_placed = stack.pop()
            if node in placed:
                continue
            if inputs_placed:
                placed.add(node)
                order.append(node)
                continue
            stack.append((node, True))
            stack.extend((arg, False) for arg in reversed(node.all_input_nodes) if arg not in placed)
    output = graph.output_node()
    order.remove(output)
    order += [node for node in graph.nodes if node not in placed]  # an effect nothing reads: kept, last
    if order == [node for node in graph.nodes if node.op not in ("placeholder", "output")]:
        return
    for node in order:  # the same nodes, each moved before the output in its new place
        output.prepend(node)
    graph.lint()
    backward.recompile()


def _in(node: fx.Node) -> str:
    return node.name + "_in"


def _out(node: fx.Node) -> str:
    return node.name + "_out"


def _closest_to_sink_cut(flow: nx.DiGraph) -> set[str]:
    """The sink side of the minimum cut with the smallest sink side: the vertices that still reach
    the sink in the residual graph of a maximum flow. (``nx.minimum_cut`` returns the other extreme,
    the one that recomputes the most.)"""
    from networkx.algorithms.flow import preflow_push

    residual = preflow_push(flow, "source", "sink")
    if residual.graph["flow_value"] >= residual.graph["inf"]:
        raise RuntimeError("min-cut partition: no finite cut (a value the backward needs cannot be saved)")
    reaches = {"sink"}
    queue = deque(["sink"])
    while queue:
        vertex = queue.popleft()
        for pred, _, attrs in _edges_into(residual, vertex):
            if pred not in reaches and attrs["capacity"] - attrs["flow"] > 0:
                reaches.add(pred)
                queue.append(pred)
    return reaches


def _edges_into(residual: nx.DiGraph, vertex: str) -> Iterable[tuple[str, str, dict[str, Any]]]:
    return residual.in_edges(vertex, data=True)  # type: ignore[no-any-return]
