"""Cutting the forward at written inputs' final values, so later reads follow the inputs' new histories.

In eager, ``x.mul_(2); return x + y`` on a non-leaf ``x`` gives ``x`` a history at the write, and ``x + y``
reads that new version: the gradient w.r.t. ``x`` after the call (``retain_grad()``, ``autograd.grad``) flows
through ``x + y``. One compiled autograd node taking ``x`` as it was before the write cannot give that: the
write-back's history reaches ``x + y`` only through the node's input. So where a new value's write-back is
recorded (``OutputAliasInfo.written_back``) and some output reads that final value, the joint graph's forward is
cut there: the first stage computes the new values (and what later stages need from before the write), the new
values are written into the caller's tensors, then the next stage (every node reading a final value) runs as
another autograd node taking the written inputs themselves; a stage reading a final value another write reads
(``y.add_(x)``) comes before that write. Each stage is compiled as a function of its own; the core returns
``None`` for each value it wrote (as ``keep_inference_input_mutations`` does), which the epilogue skips.
Programs that need no cut are compiled as before; where a cut would differentiate something eager's autograd
did not (see :func:`split_at_written_inputs`), the forward stays one node, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from aot.compile.function_outputs import FUNCTION_ARGS, FUNCTION_OUTPUT
from aot.compile.history_stops import NO_HISTORY
from aot.compile.partition import ancestors, output_values
from meta.alias import AliasAnalysis
from meta.indices import GraphArg, GraphOut
from meta.recorder import ABSOLUTE_OFFSET_OPS
from meta.storage import overlaps_itself
from meta.view_and_mutation import ViewAndMutationMeta
from wrappers.write_back import write_back

__all__ = ["SplitStage", "WrittenSplit", "reads_a_final_value", "split_at_written_inputs", "split_runtime"]


@dataclass(frozen=True)
class SplitStage:
    """One stage of a cut forward: its graph, where each of its placeholders comes from (("arg", i): graph input
    ``i``, written already where a stage before cut at its final value; ("value", name): a value an earlier stage
    returned), the names of the values it returns, and the inputs written after it ((graph input, value name))."""

    graph: fx.GraphModule
    reads: tuple[tuple[str, Any], ...]
    returns: tuple[str, ...]
    writes: tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class WrittenSplit:
    """The forward cut at written inputs' final values, stage by stage (a stage reads the final values the stages
    before it cut at), and for each graph output the value holding it (None: an input's new value, written)."""

    stages: tuple[SplitStage, ...]
    outputs: tuple[str | None, ...]


def _is_random(node: fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags


aten = torch.ops.aten
# Functional variants of in-place ops autograd has no derivative for: each stage is differentiated as a function
# of its own (the one graph was differentiated before functionalization, through the in-place op).
_NO_DERIVATIVE = frozenset({"aten::resize", "aten::set"})


def _derivative_missing(nodes: Iterable[fx.Node]) -> bool:
    return any(
        isinstance(node.target, torch._ops.OpOverload) and node.target._schema.name in _NO_DERIVATIVE for node in nodes
    )


def _differentiable(graph: fx.Graph) -> None:
    """Make a stage's graph differentiable where its functional ops are not: ``copy(dst, src)`` becomes
    ``ones_like(dst) * src`` in ``dst``'s dtype (the same values, NaN and -0.0 included, laid out as ``dst``)."""
    for node in list(graph.find_nodes(op="call_function", target=aten.copy.default)):
        dst, src = node.args[0], node.args[1]
        assert isinstance(dst, fx.Node) and isinstance(src, fx.Node)
        dst_val, src_val = dst.meta["val"], src.meta["val"]
        with graph.inserting_before(node):
            ones = graph.call_function(aten.ones_like.default, (dst,))
            if src_val.dtype != dst_val.dtype:
                src = graph.call_function(aten._to_copy.default, (src,), {"dtype": dst_val.dtype})
            value = graph.call_function(aten.mul.Tensor, (ones, src))
        value.meta = dict(node.meta)
        node.replace_all_uses_with(value)
        graph.erase_node(node)


def _copies_differentiable(nodes: Iterable[fx.Node]) -> bool:
    """Every ``copy`` among ``nodes`` can be rewritten by :func:`_differentiable` (fake values, one device)."""
    for node in nodes:
        if node.target is aten.copy.default:
            dst, src = node.args[0], node.args[1]
            if not isinstance(dst, fx.Node) or not isinstance(src, fx.Node):
                return False
            dst_val, src_val = dst.meta.get("val"), src.meta.get("val")
            if not isinstance(dst_val, torch.Tensor) or not isinstance(src_val, torch.Tensor):
                return False
            if dst_val.device != src_val.device:
                return False
    return True


def _cut_positions(meta: ViewAndMutationMeta[GraphArg, GraphOut]) -> list[int]:
    """The graph outputs holding final values of inputs whose write-back autograd records (requiring grad)."""
    return [
        position
        for position, info in enumerate(meta.output_info)
        if info.new_value_of is not None and info.written_back is not None and info.requires_grad
    ]


def reads_a_final_value(joint: fx.GraphModule, meta: ViewAndMutationMeta[GraphArg, GraphOut]) -> bool:
    """Whether an output of the joint graph's forward (its first outputs) is computed from the final value of a
    written input whose write-back autograd records: only then is the forward cut."""
    positions = _cut_positions(meta)
    if not positions:
        return False
    values = output_values(joint)[: len(meta.output_info)]
    cuts = {values[p] for p in positions if isinstance(values[p], fx.Node)}
    later: set[fx.Node] = set()
    for node in joint.graph.nodes:
        if node.op == "call_function" and any(n in cuts or n in later for n in node.all_input_nodes):
            later.add(node)
    return any(value in later for p, value in enumerate(values) if p not in positions)


def split_at_written_inputs(
    joint: fx.GraphModule, meta: ViewAndMutationMeta[GraphArg, GraphOut]
) -> WrittenSplit | None:
    """Cut the forward of ``joint`` (the joint graph of ``meta``: its first outputs the forward's, its first
    placeholders the primals) at the final values of the inputs whose write-back autograd records: a node's stage
    is the number of such cuts on its longest path from the inputs. None where no output reads such a value
    (nothing to split), or where the cut is not clean: an input requiring grad written unseen by autograd, a random
    op (two graphs would not draw as one), an op without derivative, a value eager made without history from one
    with, a value that may share memory with an input or another value (stages compiled apart would return views),
    a read of a written input as it was before the write after the stage writing it."""
    positions = _cut_positions(meta)
    if not positions:
        return None
    values = output_values(joint)[: len(meta.output_info)]
    cuts: dict[fx.Node, int] = {}  # the final value -> its graph input
    for position in positions:
        value, arg = values[position], meta.output_info[position].new_value_of
        if not isinstance(value, fx.Node) or value in cuts or arg is None:
            return None
        cuts[value] = int(arg)
    if not all(isinstance(value, fx.Node) and not value.meta.get(NO_HISTORY) for value in values):
        return None
    # An input requiring grad written where autograd does not see it (under ``no_grad``, through ``detach()``):
    # eager's new value keeps the input's history, the gradient passing to it unchanged. The functional graph
    # computes that value from the input without that derivative (``fill``: none), and a stage differentiated
    # apart would send no gradient to the input; the one graph was traced with eager's history.
    if any(
        info.new_value_of is not None and info.written_back is None and meta.input_info[info.new_value_of].requires_grad
        for info in meta.output_info
    ):
        return None
    # The same for a cut input some of whose writes autograd did not see before a recorded one: the stage would
    # differentiate the unseen write's functional op (``fill``: no derivative) where eager's history passes it.
    if any(
        meta.input_info[arg].requires_grad and meta.input_info[arg].some_mutation_unrecorded for arg in cuts.values()
    ):
        return None
    graph = joint.graph
    forward = ancestors(values)
    nodes = [node for node in graph.nodes if node in forward]
    if any(_is_random(node) for node in nodes) or _derivative_missing(nodes) or not _copies_differentiable(nodes):
        return None
    placeholders = list(graph.find_nodes(op="placeholder"))[: len(meta.input_info)]
    if any(node.op == "placeholder" and node not in placeholders for node in nodes):
        return None  # (a tangent read by the forward: none is)
    # A value eager made without history from one with (``detach()``, ``no_grad``): a stage compiled apart would
    # differentiate it, or send zeros where eager's backward reaches nothing (``aot.compile.history_stops``).
    # What functionalization rewrote with another derivative than eager's ops: an autograd.Function's, a write
    # through a view overlapping itself (emulated by gathers), memory read at absolute offsets. Differentiated
    # again stage by stage, its gradient would not be eager's; the one graph's was traced before the rewrite.
    if any(FUNCTION_OUTPUT in node.meta or FUNCTION_ARGS in node.meta for node in nodes):
        return None
    if any(node.target in ABSOLUTE_OFFSET_OPS for node in nodes):
        return None
    for node in ancestors(cuts):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and overlaps_itself(val.shape, val.stride()):
            return None
    graded = {placeholders[i] for i, info in enumerate(meta.input_info) if info.requires_grad} | set(cuts)
    for node in nodes:
        if node not in graded and any(n in graded for n in node.all_input_nodes):
            if node.meta.get(NO_HISTORY):
                return None
            graded.add(node)
    level: dict[fx.Node, int] = {}
    for node in placeholders:
        level[node] = 0
    for node in nodes:
        level[node] = max((level[n] + (n in cuts) for n in node.all_input_nodes), default=0)
    written_at = {placeholders[arg]: level[cut] for cut, arg in cuts.items()}
    written_outputs = {position for position, value in enumerate(values) if value in cuts}
    if not any(level[value] for position, value in enumerate(values) if position not in written_outputs):
        return None  # no output reads a final value: eager's history and ours agree
    # What each stage reads: inputs (written ones after their write), and values of stages before it.
    reads: list[dict[fx.Node, tuple[str, Any]]] = [{} for _ in range(max(level.values()) + 1)]
    for node in nodes:
        if node.op != "call_function":
            continue
        stage = level[node]
        for source in node.all_input_nodes:
            if source.op == "get_attr" or (level[source] == stage and source not in cuts):
                continue
            if source in cuts:
                reads[stage][source] = ("arg", cuts[source])
            elif source.op == "placeholder":
                if written_at.get(source, stage) < stage:
                    return None  # the value before the write, read after it
                reads[stage][source] = ("arg", placeholders.index(source))
            else:
                reads[stage][source] = ("value", source.name)
    boundary = {source for stage_reads in reads for source, (kind, _) in stage_reads.items() if kind == "value"}
    # The core returns fresh memory, and a value a later stage reads must not change with a write before it.
    analysis = AliasAnalysis(graph)  # (over the joint: a forward value's aliases are forward values)
    shared = [*placeholders, *cuts]
    for position, value in enumerate(values):
        if position not in written_outputs and any(
            other is not value and analysis.may_alias(value, other) for other in (*shared, *values)
        ):
            return None
    written = [*(placeholders[arg] for arg in cuts.values()), *cuts]
    if any(analysis.may_alias(value, other) for value in boundary for other in written):
        return None
    stages = []
    for stage, stage_reads in enumerate(reads):
        returned = list(
            dict.fromkeys([*(v for v in values if level[v] == stage), *(b for b in boundary if level[b] == stage)])
        )
        part = fx.Graph()
        env: dict[fx.Node, fx.Node] = {}
        # The first stage takes every input, as the graph does; a later one what it reads.
        sources = placeholders if stage == 0 else list(stage_reads)
        for source in sources:
            name = f"written_{placeholders[cuts[source]].name}" if source in cuts else source.name
            env[source] = part.placeholder(name)
            env[source].meta = dict(source.meta)
        for node in nodes:
            if node.op == "get_attr" or (node.op == "call_function" and level[node] == stage and node not in env):
                env[node] = part.node_copy(node, env.__getitem__)
        part.output([env[v] for v in returned])
        _differentiable(part)
        part.eliminate_dead_code()
        read_from = tuple(("arg", i) for i in range(len(placeholders))) if stage == 0 else tuple(stage_reads.values())
        writes = tuple((arg, cut.name) for cut, arg in cuts.items() if level[cut] == stage)
        stages.append(SplitStage(fx.GraphModule(joint, part), read_from, tuple(v.name for v in returned), writes))
    outputs = tuple(None if position in written_outputs else value.name for position, value in enumerate(values))
    return WrittenSplit(tuple(stages), outputs)


def split_runtime(
    split: WrittenSplit,
    meta: ViewAndMutationMeta[GraphArg, GraphOut],
    compile_stage: Callable[[fx.GraphModule, int], Callable[..., Any]],
) -> Callable[[list[torch.Tensor]], list[Any]]:
    """The core's runtime for a cut forward: each stage, then the write-backs cut after it (leaving the version
    counters where the layers above set them). ``compile_stage`` compiles a stage's graph as a function of its own
    (on its first call)."""
    compiled: dict[int, Callable[..., Any]] = {}
    infos: Mapping[int, Any] = {
        int(info.new_value_of): info.written_back
        for info in meta.output_info
        if info.new_value_of is not None and info.written_back is not None
    }

    written = {arg for stage in split.stages for arg, _ in stage.writes}

    def run(args: list[torch.Tensor]) -> list[Any]:
        env: dict[str, Any] = {}
        for k, stage in enumerate(split.stages):
            if k not in compiled:
                compiled[k] = compile_stage(stage.graph, k)
            inputs = [args[where] if kind == "arg" else env[where] for kind, where in stage.reads]
            if k == 0:
                # The first stage reads a copy of each input written after it: what it keeps for its backward
                # (a higher-order one re-runs it from its inputs) must not be the memory the write-back overwrites.
                inputs = [inputs[i].clone() if i in written else inputs[i] for i in range(len(inputs))]
            returned: Sequence[Any] = compiled[k](*inputs)
            env.update(zip(stage.returns, returned, strict=True))
            for arg, name in stage.writes:
                target, info = args[arg], infos[arg]
                version = target._version
                write_back([target], [env[name]], [info])
                # The layers above set the counter (to eager's final value, before the call): the stages after
                # save the written input at it.
                torch._C._autograd._unsafe_set_version_counter((target,), (version,))
        return [None if name is None else env[name] for name in split.outputs]

    return run
