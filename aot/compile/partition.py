"""Split a joint graph into a forward and a backward graph.

The convention matches torch's partitioners, so one written for torch plugs in:
``partition_fn(joint_module, joint_inputs, *, num_fwd_outputs)`` returns
``(forward, backward)`` where the forward returns its outputs followed by the
values saved for the backward, and the backward takes those saved values
followed by the tangents and returns one gradient per primal.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.fx as fx

from aot.compile.descriptors import DESC, Primal, Saved, Tangent

__all__ = [
    "JointParts",
    "ancestors",
    "computed_from",
    "default_partition",
    "default_saved",
    "is_random",
    "is_size",
    "is_tangent",
    "output_values",
    "reads_across",
    "saved_values",
    "split_joint",
    "written_by_forward",
]


def output_values(gm: fx.GraphModule) -> list[Any]:
    """The values a graph returns, in order."""
    return list(cast(Sequence[Any], gm.graph.output_node().args[0]))


def is_tangent(node: fx.Node) -> bool:
    desc = node.meta.get(DESC)
    return isinstance(desc, Tangent) if desc is not None else node.name.startswith("tangents")


def written_by_forward(node: fx.Node) -> bool:
    """A graph input whose data the forward writes: after the forward the caller's tensor holds the
    new values, so a backward may not recompute from it."""
    desc = node.meta.get(DESC)
    return isinstance(desc, Primal) and desc.written


def ancestors(roots: Iterable[Any], stop: set[fx.Node] | None = None) -> set[fx.Node]:
    seen: set[fx.Node] = set()
    stack = [root for root in roots if isinstance(root, fx.Node)]
    while stack:
        node = stack.pop()
        if node in seen or (stop is not None and node in stop):
            continue
        seen.add(node)
        stack.extend(node.all_input_nodes)
    return seen


def is_random(node: fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags


def computed_from(graph: fx.Graph, roots: Iterable[fx.Node]) -> set[fx.Node]:
    """``roots`` and every node computed from one of them (graphs are in topological order)."""
    found = set(roots)
    for node in graph.nodes:
        if any(arg in found for arg in node.all_input_nodes):
            found.add(node)
    return found


@dataclass(frozen=True)
class JointParts:
    """What every partitioner reads off a joint graph first."""

    graph: fx.Graph
    primals: list[fx.Node]
    tangents: list[fx.Node]
    fwd_outputs: list[Any]
    grads: list[Any]
    # Nodes computed from a tangent: they can only run in the backward.
    tangent_dependent: set[fx.Node]
    # Random ops the gradients read: they run in the forward, so the backward sees the same draw.
    random_in_backward: list[fx.Node]

    @staticmethod
    def of(joint_module: fx.GraphModule, num_fwd_outputs: int) -> JointParts:
        graph = joint_module.graph
        placeholders = [node for node in graph.nodes if node.op == "placeholder"]
        tangents = [node for node in placeholders if is_tangent(node)]
        outputs = output_values(joint_module)
        grads = outputs[num_fwd_outputs:]
        tangent_dependent = computed_from(graph, tangents)
        return JointParts(
            graph=graph,
            primals=[node for node in placeholders if not is_tangent(node)],
            tangents=tangents,
            fwd_outputs=outputs[:num_fwd_outputs],
            grads=grads,
            tangent_dependent=tangent_dependent,
            random_in_backward=[n for n in ancestors(grads) if is_random(n) and n not in tangent_dependent],
        )


def default_partition(
    joint_module: fx.GraphModule, _joint_inputs: Any = None, *, num_fwd_outputs: int
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Forward: what the outputs need. Backward: the rest. Saved: forward values the backward reads.

    The joint graph is functional (``aot.compile.functionalize``): data flow is all there is.

    A value computed from primals alone but needed only by the backward (a
    weight's transpose, say) is computed in the backward, so it is not saved:
    the backward saves its inputs instead, which the forward holds anyway.
    Random ops always stay in the forward so the backward sees the same draw.
    """
    parts = JointParts.of(joint_module, num_fwd_outputs)
    forward_nodes, backward_nodes = _default_sides(parts)
    saved = reads_across(parts, forward_nodes, backward_nodes)
    return split_joint(joint_module, parts, forward_nodes, backward_nodes, saved)


def default_saved(parts: JointParts) -> list[fx.Node]:
    """The values :func:`default_partition` saves."""
    return reads_across(parts, *_default_sides(parts))


def _default_sides(parts: JointParts) -> tuple[set[fx.Node], set[fx.Node]]:
    # Sizes of the primals (symbolic shapes) are read in the forward and saved as ints: read in the backward,
    # they would keep a whole input alive, and one whose geometry the call changes (t_) would read wrong.
    sizes = [n for n in parts.graph.nodes if is_size(n) and n not in parts.tangent_dependent]
    forward_nodes = ancestors([*parts.fwd_outputs, *parts.random_in_backward, *sizes]) | set(parts.primals)
    backward_nodes = ancestors(parts.grads, stop=forward_nodes) | set(parts.tangents)
    # A multi-output op cannot be saved as a tuple: its projections run in the forward instead.
    projections = {n for n in backward_nodes if n.target is operator.getitem and n.args[0] in forward_nodes}
    return forward_nodes | projections, backward_nodes - projections


def is_size(node: fx.Node) -> bool:
    """A symbolic size (``sym_size``, arithmetic on sizes): read in the forward, saved as an int."""
    return node.op == "call_function" and isinstance(node.meta.get("val"), torch.SymInt | torch.SymBool)


def reads_across(parts: JointParts, forward_nodes: set[fx.Node], backward_nodes: set[fx.Node]) -> list[fx.Node]:
    """Forward values the backward reads, or returns as a gradient (one computed without tangents), in graph order."""
    returned_by_backward = {grad for grad in parts.grads if isinstance(grad, fx.Node)}
    return [
        node
        for node in parts.graph.nodes
        if node in forward_nodes
        and (node in returned_by_backward or any(user in backward_nodes for user in node.users))
    ]


def split_joint(
    joint_module: fx.GraphModule,
    parts: JointParts,
    forward_nodes: set[fx.Node],
    backward_nodes: set[fx.Node],
    saved: list[fx.Node],
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """The forward (``forward_nodes``, returning the outputs then ``saved``) and the backward
    (``backward_nodes``, taking ``saved`` then the tangents), with their descriptors set.

    A node in both sets is computed in both graphs (recomputed in the backward).
    """
    graph = joint_module.graph
    num_fwd_outputs = len(parts.fwd_outputs)
    forward = _extract(joint_module, parts.primals, forward_nodes, [*parts.fwd_outputs, *saved])
    backward = _extract(joint_module, [*saved, *parts.tangents], backward_nodes, parts.grads)
    forward_output = forward.graph.output_node()
    output_descs = list(graph.output_node().meta.get(DESC, []))[:num_fwd_outputs]
    forward_output.meta[DESC] = output_descs + [Saved(node.name) for node in saved]
    saved_names = {node.name for node in saved}
    for node in backward.graph.nodes:
        if node.op == "placeholder" and node.name in saved_names:
            node.meta[DESC] = Saved(node.name)
    backward.graph.output_node().meta[DESC] = list(graph.output_node().meta.get(DESC, []))[num_fwd_outputs:]
    return forward, backward


def _extract(
    joint_module: fx.GraphModule, inputs: list[fx.Node], nodes: set[fx.Node], outputs: list[Any]
) -> fx.GraphModule:
    """A new graph taking ``inputs`` as placeholders, copying ``nodes`` in order, returning ``outputs``."""
    new_graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in inputs:
        placeholder = new_graph.placeholder(node.name)
        placeholder.meta = dict(node.meta)
        env[node] = placeholder
    for node in joint_module.graph.nodes:
        if node in nodes and node not in env and node.op != "placeholder" and node.op != "output":
            env[node] = new_graph.node_copy(node, lambda arg: env[arg])
    new_graph.output([env[out] if isinstance(out, fx.Node) else out for out in outputs])
    new_graph.eliminate_dead_code()
    return fx.GraphModule(joint_module, new_graph)


def saved_values(forward: fx.GraphModule, num_fwd_outputs: int) -> list[fx.Node]:
    """The nodes a partitioned forward returns for the backward."""
    return output_values(forward)[num_fwd_outputs:]
