"""Where an autograd.Function's outputs are, for the higher-order backward to apply the Function again.

The trace inlines a Function's forward as plain ops. The first-order backward is right (it runs the
Function's backward), but the higher-order backward (``aot.compile.higher_order``) recomputes the
forward's saved values *with* autograd: recomputed as plain ops, a Function's output would be
differentiated through their derivative, where eager's second derivative goes through the Function's
backward (which need not be its forward's derivative). While the joint's forward is traced,
:class:`FunctionOutputs` marks each output node of an ``apply`` with the application, and functionalization
(:func:`mark_function_arguments`) the node of each argument's value at that point with its position in it:
the higher-order backward applies the Function again to the recomputed arguments (:func:`emit_reapply`).
An argument nothing reads (neither the Function's forward nor its backward) is dead in the graphs: before
functionalization removes it, :func:`record_dead_arguments` keeps how to compute it from the primals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import getitem
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot, has_proxy_slot
from torch.overrides import TorchFunctionMode

from aot.compile.descriptors import DESC, Primal
from aot.compile.history_stops import NO_HISTORY

__all__ = [
    "FUNCTION_APPLIED",
    "FUNCTION_ARGS",
    "FUNCTION_OUTPUT",
    "FunctionApply",
    "FunctionOutputs",
    "emit_reapply",
    "mark_function_arguments",
    "record_dead_arguments",
]

# Node meta: (FunctionApply, index of the output among apply's, None where apply returned one tensor).
FUNCTION_OUTPUT = "function_output"
# Node meta: the (FunctionApply, leaf position among apply's (args, kwargs)) this value was passed at.
FUNCTION_ARGS = "function_args"
# Node meta, of the traced graph before functionalization (which turns it into FUNCTION_ARGS): on the first node an
# apply made, (FunctionApply, leaf position, the node of the argument there) for each tensor argument.
FUNCTION_APPLIED = "function_applied"


@dataclass(frozen=True, eq=False)
class FunctionApply:
    """One ``cls.apply(*args, **kwargs)`` of the trace: its non-tensor arguments as they were, its tensor
    arguments by position (their nodes carry ``FUNCTION_ARGS``), and which of them it marked dirty."""

    cls: Any
    leaves: tuple[Any, ...]  # the leaves of (args, kwargs); None at the tensors' positions
    spec: pytree.TreeSpec
    tensor_positions: tuple[int, ...]
    detached_positions: frozenset[int]  # tensors that had no history: applied again without
    dirty_positions: frozenset[int]  # tensors apply returned as they are (marked dirty): cloned when applied again
    draws: bool  # its forward draws random numbers: applied again, it would draw others
    complete: bool  # every tensor argument and output was traced as a node, each output a node of its own
    # Arguments dead in the graphs, by leaf position: a graph computing each from primals (named as the joint's
    # placeholders). Filled by functionalization (``record_dead_arguments``), after the trace made the apply.
    dead_arguments: dict[int, fx.GraphModule] = field(default_factory=dict, compare=False)

    @property
    def name(self) -> str:
        return str(getattr(self.cls, "__qualname__", self.cls))


class FunctionOutputs(TorchFunctionMode):
    """While active (inside ``make_fx``, below the modes that hand a Function stand-ins), marks the nodes of
    each ``autograd.Function.apply``'s arguments and outputs (``meta.function_apply`` routes apply here)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        cls = getattr(func, "function_class", None)
        mode = get_proxy_mode()
        if cls is None or mode is None:
            return func(*args, **kwargs)
        graph = mode.tracer.graph

        def node_of(tensor: torch.Tensor) -> fx.Node | None:
            if not has_proxy_slot(tensor, mode.tracer):
                return None
            node = get_proxy_slot(tensor, mode.tracer).proxy.node
            return node if isinstance(node, fx.Node) else None

        leaves, spec = pytree.tree_flatten((args, kwargs))
        tensors = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        # (Read before apply: a written argument's node is the write's after, and it requires grad then.)
        arg_nodes = [node_of(leaves[i]) for i in tensors]
        ungraded = frozenset(i for i in tensors if not leaves[i].requires_grad)
        last = next(iter(reversed(graph.nodes)), None)  # (the nodes apply makes follow it)
        out = func(*args, **kwargs)
        outs = list(out) if isinstance(out, tuple) else [out]
        ids = {id(leaves[i]): i for i in tensors}
        made = _nodes_after(graph, last)
        out_nodes = {k: node_of(o) for k, o in enumerate(outs) if isinstance(o, torch.Tensor)}
        made_here = set(made)
        fresh = [node for node in out_nodes.values() if node in made_here]
        apply = FunctionApply(
            cls,
            tuple(None if i in tensors else leaf for i, leaf in enumerate(leaves)),
            spec,
            tuple(tensors),
            # (An argument without history, as eager's Function got it, is read without history again.)
            ungraded,
            frozenset(ids[id(o)] for o in outs if id(o) in ids),
            any(_draws(node) for node in made),
            None not in arg_nodes and len(set(fresh)) == len(out_nodes),
        )
        if made and apply.complete:
            # Functionalization tells which value each argument's node holds where the first node apply made runs.
            made[0].meta[FUNCTION_APPLIED] = (
                *made[0].meta.get(FUNCTION_APPLIED, ()),
                *((apply, i, node) for i, node in zip(tensors, arg_nodes, strict=True)),
            )
        for k, node in out_nodes.items():
            if node in fresh:  # (an incomplete apply's too: the higher-order backward refuses to recompute it)
                assert node is not None
                node.meta[FUNCTION_OUTPUT] = (apply, k if isinstance(out, tuple) else None)
        return out


def _nodes_after(graph: fx.Graph, last: fx.Node | None) -> list[fx.Node]:
    node = next(iter(graph.nodes), None) if last is None else last.next
    made = []
    while node is not None and node.op != "root":
        made.append(node)
        node = node.next
    return made


def _draws(node: fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags


def mark_function_arguments(node: fx.Node, read: Callable[[fx.Node], Any]) -> None:
    """Turn ``node``'s ``FUNCTION_APPLIED`` into ``FUNCTION_ARGS`` on each argument's value as ``read`` gives it
    (functionalization's value of the node at this point of the graph)."""
    for apply, position, argument in node.meta.pop(FUNCTION_APPLIED, ()):
        value = read(argument)
        if isinstance(value, fx.Node):
            value.meta[FUNCTION_ARGS] = (*value.meta.get(FUNCTION_ARGS, ()), (apply, position))


def record_dead_arguments(gm: fx.GraphModule) -> None:
    """Before ``gm``'s dead code goes, record on each FunctionApply how to compute its arguments that are dead
    (nothing reads them: the Function's forward and backward ignore them) from the primals, for the higher-order
    backward to apply the Function again to them; eager's second derivative through such an argument goes
    through the Function's backward, not through the forward's ops that would recompute its output."""
    marked = [node for node in gm.graph.nodes if FUNCTION_ARGS in node.meta]
    if not marked:
        return
    live: set[fx.Node] = set()
    for node in reversed(gm.graph.nodes):  # (as ``eliminate_dead_code`` keeps them)
        if node.op in ("output", "placeholder") or node.is_impure() or any(user in live for user in node.users):
            live.add(node)
    arguments: dict[FunctionApply, dict[int, list[fx.Node]]] = {}
    for node in marked:
        for apply, position in node.meta[FUNCTION_ARGS]:
            arguments.setdefault(apply, {}).setdefault(position, []).append(node)
    for node in marked:
        if node in live:
            continue
        recipe = _computation_from_primals(gm, node, arguments)
        if recipe is not None:
            for apply, position in node.meta[FUNCTION_ARGS]:
                apply.dead_arguments.setdefault(position, recipe)


def _applied_to(node: fx.Node, arguments: dict[FunctionApply, dict[int, list[fx.Node]]]) -> list[fx.Node] | None:
    """The arguments of the Function ``node`` is an output of, one node each, where it is applied again."""
    found = node.meta.get(FUNCTION_OUTPUT)
    if found is None or node.meta.get(NO_HISTORY) or found[0].draws or not found[0].complete:
        return None
    candidates = [arguments.get(found[0], {}).get(position, []) for position in found[0].tensor_positions]
    return [nodes[0] for nodes in candidates] if all(len(nodes) == 1 for nodes in candidates) else None


def _computation_from_primals(
    gm: fx.GraphModule, value: fx.Node, arguments: dict[FunctionApply, dict[int, list[fx.Node]]]
) -> fx.GraphModule | None:
    """A graph computing ``value`` from the primals it reads (placeholders named as ``gm``'s), applying each
    Function on the way again; None where it reads another input or draws random numbers (drawn again, it would
    differ)."""
    cone = {value}
    stack = [value]
    while stack:
        node = stack.pop()
        for source in _applied_to(node, arguments) or node.all_input_nodes:
            if source not in cone:
                cone.add(source)
                stack.append(source)
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    applied: dict[FunctionApply, fx.Node] = {}
    for node in gm.graph.nodes:
        if node not in cone:
            continue
        if (node.op == "placeholder" and not isinstance(node.meta.get(DESC), Primal)) or _draws(node):
            return None
        reapplied = _applied_to(node, arguments)
        if reapplied is not None:
            apply, index = node.meta[FUNCTION_OUTPUT]
            if apply not in applied:
                applied[apply] = emit_reapply(graph, apply, [env[argument] for argument in reapplied])
            env[node] = applied[apply] if index is None else graph.call_function(getitem, (applied[apply], index))
        elif node.op == "placeholder":
            env[node] = graph.placeholder(node.name)
        else:
            env[node] = graph.node_copy(node, env.__getitem__)
    graph.output([env[value]])
    return fx.GraphModule(gm, graph, "DeadArgument")


def _reapply(apply: FunctionApply) -> Callable[..., Any]:
    def reapply(*tensors: torch.Tensor) -> Any:
        leaves = list(apply.leaves)
        for position, tensor in zip(apply.tensor_positions, tensors, strict=True):
            if position in apply.detached_positions:
                tensor = tensor.detach()
            # A Function writing its argument writes the recomputed value's copy: the one the graph holds is read
            # after (by the backward) as it was before the write, as the trace's functional graph reads it.
            leaves[position] = tensor.clone() if position in apply.dirty_positions else tensor
        args, kwargs = pytree.tree_unflatten(leaves, apply.spec)
        return apply.cls.apply(*args, **kwargs)

    reapply.__name__ = f"apply_{apply.cls.__name__}"  # (its qualname local: no graph cache names it)
    return reapply


def emit_reapply(graph: fx.Graph, apply: FunctionApply, args: list[fx.Node]) -> fx.Node:
    """Emit ``apply.cls.apply`` on ``args`` (its tensor arguments' nodes, in order); it returns what apply did."""
    return graph.call_function(_reapply(apply), tuple(args))
