"""The backward as a differentiable function of its own, for gradients of gradients.

A training pair's backward reads the values the forward saved. They were computed without
autograd, so a backward run with grad mode on (``create_graph=True``) would have no path from
them back to the primals. The higher-order backward instead recomputes them: it is one graph,

    grads_of(held primals..., fed saved values..., tangents...) -> one gradient per primal

made of the forward's part computing the saved values followed by the backward, and is compiled
by aotfx itself like any function (trace of its own joint, partition, backend, one entry per
input signature), so its gradients carry history back to the primals and the tangents. Its own
backward, run with grad mode on, does the same again: any order works.

*Held* primals are those the saved values are computed from: the runtime keeps them (by
reference; a copy where the function writes them, so the recomputation reads the values of the
call). *Fed* saved values are those computed from a random draw and from no primal (a dropout
mask): recomputing would draw again, so they are passed as they were saved. A saved value
recomputed from a draw the forward did not save is refused.
"""

from __future__ import annotations

import contextvars
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._decomp import decomposition_table
from torch._prims.rng_prims import run_and_save_rng_state
from torch.utils._python_dispatch import _disable_current_modes

from aot.compile.descriptors import DESC, InputWrite, Saved
from aot.compile.function_outputs import FUNCTION_ARGS, FUNCTION_OUTPUT, FunctionApply, emit_reapply
from aot.compile.history_stops import DETACHED_READS, NO_HISTORY
from aot.compile.partition import ancestors, is_random, output_values
from aot.errors import DoubleBackwardError

__all__ = [
    "DIFFERENTIATING_BACKWARD",
    "HigherOrderPlan",
    "decompose_missing_derivative",
    "held_primals",
    "missing_derivative",
    "plan_higher_order",
]


def _placeholders(gm: fx.GraphModule) -> list[fx.Node]:
    return [node for node in gm.graph.nodes if node.op == "placeholder"]


def _draws(node: fx.Node) -> bool:
    return node.op == "call_function" and (is_random(node) or node.target is run_and_save_rng_state)


def _saved_nodes(forward: fx.GraphModule, num_outputs: int) -> list[Any]:
    return output_values(forward)[num_outputs:]


_aten = torch.ops.aten
# Ops reading only the shape of their tensor arguments, not the values.
_SHAPE_ONLY = frozenset({
    _aten.empty_like.default, _aten.zeros_like.default, _aten.ones_like.default, _aten.full_like.default,
    _aten.rand_like.default, _aten.randn_like.default, _aten.new_empty.default, _aten.new_zeros.default,
    _aten.new_ones.default, _aten.new_full.default,
})  # fmt: skip


def _fed(forward: fx.GraphModule, saved: Sequence[Any]) -> set[fx.Node]:
    """Saved values passed as saved, not computed again: those computed from a random draw and from no primal's
    values (not drawn again), integer ones (indices a draw chose, say) and a draw's outputs without a
    derivative (rrelu's noise), which have no history to carry."""
    primals = set(_placeholders(forward))
    # Whether the values a node is computed from (itself included, not the nodes whose shape only it reads)
    # hold a draw, or a primal: one sweep in graph order (topological), not one walk of ancestors per saved value.
    drawn: dict[fx.Node, bool] = {}
    from_primal: dict[fx.Node, bool] = {}
    for node in forward.graph.nodes:
        read = () if node.target in _SHAPE_ONLY else node.all_input_nodes
        drawn[node] = _draws(node) or any(drawn[n] for n in read)
        from_primal[node] = node in primals or any(from_primal[n] for n in read)
    fed = set()
    for node in saved:
        if isinstance(node, fx.Node) and node not in primals:
            drawn_only = drawn[node] and not from_primal[node]
            if drawn_only or _integral(node) or _drawn_without_derivative(node):
                fed.add(node)
    return fed


def _drawn_without_derivative(node: fx.Node) -> bool:
    """An output of a random op that has no derivative (rrelu's noise): passed as saved, its draw kept."""
    if node.target is not operator.getitem or not isinstance(source := node.args[0], fx.Node) or not _draws(source):
        return False
    op = source.target
    if not isinstance(op, torch._ops.OpOverload):
        return False

    def on_meta(value: Any) -> Any:
        if isinstance(value, fx.Node):
            value = value.meta.get("val")
        if not isinstance(value, torch.Tensor):
            return value
        meta = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
        return meta.requires_grad_(meta.is_floating_point() or meta.is_complex())

    try:
        with _disable_current_modes(), torch.enable_grad():
            args, kwargs = pytree.tree_map(on_meta, (source.args, source.kwargs))
            out = op(*args, **kwargs)
        return not out[node.args[1]].requires_grad
    except Exception:
        return False  # not judged: recomputed (or refused) as before


def _integral(node: fx.Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and not (value.is_floating_point() or value.is_complex())


# A Function's argument: its node (of the forward, or of the backward), or a graph computing a dead one from primals.
_Argument = fx.Node | fx.GraphModule


@dataclass(frozen=True)
class _Recomputation:
    saved: list[Any]
    fed: set[fx.Node]
    needed: set[fx.Node]  # the forward's nodes the higher-order backward runs again
    # Outputs of an autograd.Function among those: applied again to these arguments (nodes of the forward, or of
    # the backward where the partitioner moved an argument's view there), not recomputed by the Function's ops.
    reapplied: dict[fx.Node, list[_Argument]]


_Found = dict[FunctionApply, dict[int, list[fx.Node]]]


def _applied_arguments(gm: fx.GraphModule) -> _Found:
    found: _Found = {}
    for node in gm.graph.nodes:
        for apply, position in node.meta.get(FUNCTION_ARGS, ()):
            found.setdefault(apply, {}).setdefault(position, []).append(node)
    return found


def _function_arguments(apply: FunctionApply, forward: _Found, backward: _Found) -> list[_Argument] | None:
    """The nodes of ``apply``'s tensor arguments, in order: the forward's, else the backward's (computed there from
    saved values alone), else, for an argument dead in the graphs, its computation from the primals; None unless
    there is one each."""
    arguments: list[_Argument] = []
    for position in apply.tensor_positions:
        candidates = forward.get(apply, {}).get(position) or backward.get(apply, {}).get(position, [])
        if not candidates and position in apply.dead_arguments:
            arguments.append(apply.dead_arguments[position])
            continue
        if len(candidates) != 1:
            return None
        arguments.append(candidates[0])
    return arguments if apply.complete else None


def _saved_sources(node: fx.Node, backward: fx.GraphModule, saved: list[Any]) -> list[fx.Node] | None:
    """The forward's saved values a backward ``node`` is computed from; None if from a tangent too."""
    placeholders = _placeholders(backward)
    sources = []
    for ancestor in ancestors([node]):
        if ancestor.op == "placeholder":
            k = placeholders.index(ancestor)
            if k >= len(saved) or not isinstance(saved[k], fx.Node):
                return None
            sources.append(saved[k])
    return sources


def _recomputed(forward: fx.GraphModule, backward: fx.GraphModule, num_outputs: int) -> _Recomputation:
    """The saved values, those fed, and how the higher-order backward computes the others again.

    Eager differentiates an autograd.Function's output through the Function's backward, not through the
    ops of its forward (the first-order backward holds them both inlined): that output is recomputed by
    applying the Function again, to its arguments (``aot.compile.function_outputs``). Where the graphs do
    not hold one node of each argument (one nothing reads, dead), its forward's ops recompute it, as before:
    right where the backward is the forward's derivative. An argument nothing reads, dead in the graphs, is
    computed again from the primals (``record_dead_arguments``)."""
    saved = _saved_nodes(forward, num_outputs)
    fed = _fed(forward, saved)
    found_forward, found_backward = _applied_arguments(forward), _applied_arguments(backward)
    primals = {node.name: node for node in _placeholders(forward)}

    def reapplied_to(node: fx.Node, in_backward: bool) -> tuple[list[_Argument], list[fx.Node]] | None:
        """The arguments ``node``'s Function is applied again to, and the forward's nodes they are computed from
        (an argument of the backward, for a node of the backward, is copied before it there)."""
        # (Read without history in eager, a Function's output under no_grad: its ops give the same value.)
        # (A Function drawing random numbers would draw others: recomputed by its ops, refused below.)
        if not _custom_output(node):
            return None
        arguments = _function_arguments(node.meta[FUNCTION_OUTPUT][0], found_forward, found_backward)
        if arguments is None:
            return None
        sources: list[fx.Node] = []
        for argument in arguments:
            if isinstance(argument, fx.GraphModule):
                names = [placeholder.name for placeholder in _placeholders(argument)]
                more = [primals[name] for name in names] if set(names) <= primals.keys() else None
            elif argument.graph is backward.graph:
                more = [] if in_backward else _saved_sources(argument, backward, saved)
            else:
                more = [argument]
            if more is None:
                return None
            sources += more
        return arguments, sources

    needed: set[fx.Node] = set()
    reapplied: dict[fx.Node, list[_Argument]] = {}
    stack = [node for node in saved if isinstance(node, fx.Node) and node not in fed]
    # A Function's output the partitioner recomputes in the backward (from saved values) is applied again there too.
    for node in backward.graph.nodes:
        if (found := reapplied_to(node, True)) is not None:
            reapplied[node] = found[0]
            stack.extend(found[1])
    while stack:
        node = stack.pop()
        if node in needed or node in fed:
            continue
        needed.add(node)
        inputs = node.all_input_nodes
        if (found := reapplied_to(node, False)) is not None:
            reapplied[node], inputs = found
        stack.extend(inputs)
    return _Recomputation(saved, fed, needed, reapplied)


def _custom_output(node: fx.Node) -> bool:
    """Whether ``node`` is an autograd.Function's output with history, its random draws aside (refused apart)."""
    found = node.meta.get(FUNCTION_OUTPUT)
    return found is not None and not node.meta.get(NO_HISTORY) and not found[0].draws


def held_primals(forward: fx.GraphModule, backward: fx.GraphModule, num_outputs: int) -> list[int]:
    """The primal positions the forward's saved values are computed from."""
    needed = _recomputed(forward, backward, num_outputs).needed
    return [i for i, node in enumerate(_placeholders(forward)) if node in needed]


@dataclass(frozen=True)
class HigherOrderPlan:
    """The higher-order backward's graph and where its inputs come from."""

    graph: fx.GraphModule
    held: list[int]  # primal positions, its first inputs
    fed: list[int]  # positions among the forward's saved values, its next inputs; then the tangents


def plan_higher_order(forward: fx.GraphModule, backward: fx.GraphModule, num_outputs: int) -> HigherOrderPlan:
    """The backward of a training pair as one graph over held primals, fed saved values and tangents.

    Raises:
        DoubleBackwardError: where the backward has no derivative aotfx can give (an
            autograd.Function's backward writing its inputs; a saved value recomputed from a
            random draw the forward did not save).
    """
    if any(isinstance(desc, InputWrite) for desc in backward.graph.output_node().meta.get(DESC, [])):
        raise DoubleBackwardError(
            "double backward through an aotfx-compiled function whose autograd.Function backward writes its "
            "saved input or grad_output in place is not supported: that write has no derivative. Clone in the "
            "Function's backward instead of writing in place."
        )
    primals = _placeholders(forward)
    recomputation = _recomputed(forward, backward, num_outputs)
    saved, fed, needed = recomputation.saved, recomputation.fed, recomputation.needed
    held = [i for i, node in enumerate(primals) if node in needed]
    # An autograd.Function's output recomputed by its forward's ops, not applied again (its arguments not found
    # one node each): those ops would be differentiated where eager differentiates the Function's backward, a
    # silent wrong derivative wherever the two differ.
    unapplied = next(
        (n for n in forward.graph.nodes if n in needed and _custom_output(n) and n not in recomputation.reapplied), None
    )
    if unapplied is not None:
        raise DoubleBackwardError(
            f"double backward through an aotfx-compiled function: {unapplied.meta[FUNCTION_OUTPUT][0].cls.__name__}"
            f"'s output {unapplied.name} (an autograd.Function) is recomputed, and its arguments cannot be found"
            " to apply it again: eager's derivative goes through its backward. Differentiate once."
        )
    draw = next((node for node in forward.graph.nodes if node in needed and _draws(node)), None)
    if draw is not None:
        raise DoubleBackwardError(
            f"double backward through an aotfx-compiled function: the forward's random draw {draw.name} is needed "
            "to recompute a saved value, and drawing again would give other numbers. Differentiate once, or let "
            "the partitioner save the draw itself (the default partitioner saves a dropout mask)."
        )

    graph = fx.Graph()
    root = torch.nn.Module()
    env: dict[fx.Node, fx.Node] = {}
    for i in held:
        env[primals[i]] = _placeholder(graph, primals[i])
    fed_positions = [k for k, node in enumerate(saved) if node in fed]
    for k in fed_positions:
        env[saved[k]] = _placeholder(graph, saved[k], Saved(saved[k].name))
    detached: dict[fx.Node, fx.Node] = {}
    backward_inputs = _placeholders(backward)

    def argument(node: _Argument) -> fx.Node:
        """A reapplied Function's argument: a view the partitioner moved into the backward is copied from there, a
        dead one computed again from the held primals."""
        if isinstance(node, fx.GraphModule):
            by_name = {placeholder.name: placeholder for placeholder in primals}
            for placeholder in _placeholders(node):
                env[placeholder] = env[by_name[placeholder.name]]
            _copy_nodes(graph, root, node, set(node.graph.nodes), env, detached, "recomputed")
            return env[output_values(node)[0]]
        if node not in env:
            sources = ancestors([node])
            for k, placeholder in enumerate(backward_inputs):
                if placeholder in sources:
                    if saved[k] not in env:
                        raise DoubleBackwardError(
                            f"double backward through an aotfx-compiled function: an argument of an "
                            f"autograd.Function ({node.name}) is computed from {saved[k].name} only after it"
                        )
                    env[placeholder] = env[saved[k]]
            _copy_nodes(graph, root, backward, sources, env, detached, "backward", recomputation.reapplied, argument)
        return env[node]

    _copy_nodes(graph, root, forward, needed, env, detached, "forward", recomputation.reapplied, argument)

    for k, node in enumerate(backward_inputs):
        if k < len(saved):
            value = saved[k]
            env[node] = env[value] if isinstance(value, fx.Node) else value
        else:
            env[node] = _placeholder(graph, node)
    _copy_nodes(
        graph, root, backward, set(backward.graph.nodes), env, detached, "backward", recomputation.reapplied, argument
    )
    grads = output_values(backward)[: len(primals)]
    output = graph.output([env[g] if isinstance(g, fx.Node) else g for g in grads])
    output.meta[DESC] = list(backward.graph.output_node().meta.get(DESC, []))[: len(primals)]
    _solve_with_matrix(graph)
    _differentiable_forms(graph)
    graph.eliminate_dead_code()
    graph.lint()
    return HigherOrderPlan(fx.GraphModule(root, graph, "BackwardAsFunction"), held, fed_positions)


# Factorizations whose LU and pivots outputs have no derivative: the op, the positions of LU and pivots, and
# whether torch's kernel factors ``A.mT`` where ``A`` is contiguous and real (a copy saved; det(A.mT) = det(A)).
# tests/test_double_backward.py checks these against the kernels.
FACTORIZATIONS = {
    _aten._linalg_solve_ex.default: (1, 2, False),
    _aten._linalg_slogdet.default: (2, 3, True),
    _aten._linalg_det.default: (1, 2, True),
}


def _factorization(lu: Any) -> fx.Node | None:
    """The factorization whose LU output ``lu`` is (through ``_undetached``), if any. (Its pivots, integers,
    may be fed to the higher-order backward as saved: they have no derivative.)"""
    lu = _undetached(lu)
    if not isinstance(lu, fx.Node) or lu.target is not operator.getitem:
        return None
    source = lu.args[0]
    assert isinstance(source, fx.Node)
    found = FACTORIZATIONS.get(source.target)  # type: ignore[call-overload]
    return source if found is not None and found[0] == lu.args[1] else None


def _undetached(value: Any) -> Any:
    """``value`` read through ``detach()`` or, for an LU, perturbed where its pivots are zero (``det``'s
    backward does so to stay finite on singular matrices; a nonsingular matrix has none)."""
    while isinstance(value, fx.Node):
        if value.target is _aten.detach.default:
            value = value.args[0]
        elif value.target is _aten.add.Tensor and _computed_only_from(value.args[1], value.args[0]):
            value = value.args[0]
        else:
            return value
    return value


def _computed_only_from(value: Any, source: Any) -> bool:
    """``value`` is a node computed from ``source`` and constants only."""
    if not isinstance(value, fx.Node) or not isinstance(source, fx.Node):
        return False
    stack, seen = [value], set()
    while stack:
        node = stack.pop()
        if node is source or node in seen:
            continue
        seen.add(node)
        if node.op != "call_function":
            return False
        stack.extend(node.all_input_nodes)
    return source in {n for node in seen for n in node.all_input_nodes}


def _factored_matrix(a: torch.Tensor, transposes_contiguous: bool, adjoint: bool) -> torch.Tensor:
    """The matrix a ``linalg_lu_solve`` with ``adjoint`` solves with, given the LU a factorization made of ``a``."""
    factored = a.mT if transposes_contiguous and a.is_contiguous() and not a.is_complex() else a
    return factored.mH if adjoint else factored


def _solve_with_matrix(graph: fx.Graph) -> None:
    """A first-order backward's ``linalg_lu_solve`` with the LU of a forward factorization becomes ``linalg_solve``
    with the matrix itself, as eager's backward computes it with grad mode on (that LU has no derivative)."""
    for node in list(graph.nodes):
        if node.target is not _aten.linalg_lu_solve.default:
            continue
        lu, _, rhs = node.args
        factorization = _factorization(lu)
        if factorization is None:
            continue
        with graph.inserting_before(node):
            transposes = FACTORIZATIONS[factorization.target][2]  # type: ignore[index]
            adjoint = node.kwargs.get("adjoint", False)
            matrix = graph.call_function(_factored_matrix, (factorization.args[0], transposes, adjoint))
            left = node.kwargs.get("left", True)
            solve = graph.call_function(_aten.linalg_solve.default, (matrix, rhs), {"left": left})
        node.replace_all_uses_with(solve)
        graph.erase_node(node)


def _copy_into_clone(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """``aten.copy`` (functionalization's ``copy_``) as eager ran it: a write, here into a clone of ``dst``."""
    out: torch.Tensor = _aten.clone.default(dst)
    return out.copy_(src, non_blocking)


def _as_strided_scatter_by_copy(
    base: torch.Tensor, src: torch.Tensor, size: Any, stride: Any, storage_offset: Any = None
) -> torch.Tensor:
    """``aten.as_strided_scatter`` as its kernel computes it, and eager's write through an as_strided view."""
    out: torch.Tensor = _aten.clone.default(base)
    out.as_strided(size, stride, storage_offset).copy_(src)
    return out


# Functional ops the graphs have where eager's backward wrote in place, which autograd never differentiates in
# eager: torch has no derivative for ``copy`` and a wrong one for ``as_strided_scatter``'s base (the gradient of
# the elements it keeps goes to those it overwrites). With grad mode on, they run as eager's writes did.
_DIFFERENTIABLE_FORMS: dict[Any, Any] = {
    _aten.copy.default: _copy_into_clone,
    _aten.as_strided_scatter.default: _as_strided_scatter_by_copy,
}


def _differentiable_forms(graph: fx.Graph) -> None:
    for node in graph.nodes:
        if node.op == "call_function" and node.target in _DIFFERENTIABLE_FORMS:
            node.target = _DIFFERENTIABLE_FORMS[node.target]


def _placeholder(graph: fx.Graph, node: fx.Node, desc: Any = None) -> fx.Node:
    placeholder = graph.placeholder(node.name)
    placeholder.meta = dict(node.meta)
    if desc is not None:
        placeholder.meta[DESC] = desc
    return placeholder


def _copy_nodes(
    graph: fx.Graph,
    root: torch.nn.Module,
    gm: fx.GraphModule,
    nodes: set[fx.Node],
    env: dict[fx.Node, fx.Node],
    detached: dict[fx.Node, fx.Node],
    side: str,
    reapplied: dict[fx.Node, list[_Argument]] | None = None,
    argument: Callable[[_Argument], fx.Node] | None = None,
) -> None:
    """Copy ``nodes`` of ``gm`` in order; constants move onto ``root`` under names of their side. ``detached``:
    the values read through ``detach()`` so far, and their detached copies. ``reapplied``: outputs of an
    autograd.Function computed by applying it again to the arguments given (once per application)."""
    applied: dict[FunctionApply, fx.Node] = {}
    for node in gm.graph.nodes:
        if node not in nodes or node in env or node.op in ("placeholder", "output"):
            continue
        if reapplied is not None and node in reapplied:
            apply, index = node.meta[FUNCTION_OUTPUT]
            if apply not in applied:
                assert argument is not None
                applied[apply] = emit_reapply(graph, apply, [argument(value) for value in reapplied[node]])
            call = applied[apply]
            env[node] = call if index is None else graph.call_function(operator.getitem, (call, index))
            continue
        copied = graph.node_copy(node, lambda arg: env[arg])
        _detach_reads(graph, copied, copied.meta.pop(DETACHED_READS, frozenset()), detached)
        if node.op == "get_attr":
            name = f"{side}_{node.target}".replace(".", "_")
            setattr(root, name, operator.attrgetter(str(node.target))(gm))
            copied.target = name
        env[node] = copied


def _detach_reads(graph: fx.Graph, node: fx.Node, positions: frozenset[int], detached: dict[fx.Node, fx.Node]) -> None:
    """Read the arguments at ``positions`` (leaves of ``(args, kwargs)``) through ``detach()``, as eager did.

    A value is detached once, its readers sharing the copy, as eager's readers share the one tensor without
    history: the LU solve rewrite recognizes ``LU + perturbation(LU)`` only where both read the same node.
    """
    if not positions:
        return
    leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
    for i in positions:
        if leaves[i] not in detached:
            with graph.inserting_before(node):  # before its first reader: the later ones come after it
                detached[leaves[i]] = graph.call_function(_aten.detach.default, (leaves[i],))
        leaves[i] = detached[leaves[i]]
    node.args, node.kwargs = pytree.tree_unflatten(leaves, spec)


_MISSING_DERIVATIVE = re.compile(r"derivative for (?:aten::)?'?(\w+)'? is not implemented")


# Set while a higher-order backward compiles: an op of the first-order backward without a derivative is
# then raised at trace time (for ``decompose_missing_derivative``), not deferred to the backward as it
# is for a user's own call of such an op, which eager too refuses only when differentiated.
DIFFERENTIATING_BACKWARD: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "differentiating_backward", default=False
)


def missing_derivative(error: BaseException) -> str | None:
    """The op (``aten::silu_backward``) whose derivative ``error`` says is not implemented, if it says so."""
    found = _MISSING_DERIVATIVE.search(str(error))
    return f"aten::{found.group(1)}" if found is not None else None


def decompose_missing_derivative(error: BaseException, gm: fx.GraphModule) -> bool:
    """Decompose, in ``gm``, the op whose derivative ``error`` says is missing; False if it cannot.

    A backward op eager never differentiates (``silu_backward``, ``native_group_norm_backward``):
    with grad mode on, eager's backward computes it with differentiable ops instead. The node
    calls torch's decomposition of the op, which runs those ops when the graph is traced.
    """
    op_name = missing_derivative(error)
    nodes = [
        node
        for node in gm.graph.nodes
        if isinstance(node.target, torch._ops.OpOverload)
        and node.target._schema.name == op_name
        and node.target in decomposition_table
    ]
    for node in nodes:
        node.target = decomposition_table[node.target]
    gm.recompile()
    return bool(nodes)
