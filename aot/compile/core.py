"""The core: trace, partition, hand each graph to its compiler (through the cache), wrap in autograd.

Below every layer, the flat function has no aliasing outputs; the core decides
between a training graph pair (some output needs a gradient and grad mode is on)
and a single inference graph, and records every graph on the entry for
inspection.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from aot import logs
from aot.backends import to_boxed
from aot.cache import keys
from aot.compile.autograd import HigherOrder, fresh_outputs, make_training_runtime
from aot.compile.checkpoints import REENTRANT_CHECKPOINT
from aot.compile.descriptors import DESC, Primal
from aot.compile.failures import backend_errors
from aot.compile.higher_order import (
    DIFFERENTIATING_BACKWARD,
    decompose_missing_derivative,
    held_primals,
    missing_derivative,
    plan_higher_order,
)
from aot.compile.input_writes import keep_input_writes
from aot.compile.partition import output_values, saved_values
from aot.compile.runtime_asserts import insert_runtime_asserts
from aot.compile.trace import REACHED_FROM, USER_FUNCTIONS, example_inputs, trace_inference, trace_joint
from aot.compile.written_split import reads_a_final_value, split_at_written_inputs, split_runtime
from aot.config import AOTConfig
from meta.collect import raised_by_eager_backward
from meta.indices import GraphArg, GraphOut, UserArg, UserOut
from meta.storage import CALLER_IN_INFERENCE_MODE
from meta.view_and_mutation import OutputType, ViewAndMutationMeta
from wrappers.base import CoreStage, Runtime
from wrappers.codegen import Source, attach

__all__ = ["CompileFunction", "CompiledEntry", "compile_core", "runtime_from_graphs"]


@dataclass
class CompiledEntry:
    """One compiled input signature: its meta, its graphs, its runtime."""

    meta: ViewAndMutationMeta[UserArg, UserOut]
    core_meta: ViewAndMutationMeta[GraphArg, GraphOut] | None = None
    joint: fx.GraphModule | None = None
    forward: fx.GraphModule | None = None
    backward: fx.GraphModule | None = None
    inference: fx.GraphModule | None = None
    compile_seconds: float = 0.0
    backward_compile_seconds: float = 0.0
    runtime: Runtime | None = None
    # The interpreted layer runtimes, the reference ``runtime`` is generated from (``wrappers.codegen``),
    # and the generated source (with the guard, once a call has used it: ``aot.runtime_code``).
    reference_runtime: Runtime | None = None
    runtime_source: str = ""
    emit: Any = None
    # The backward compiled as a function of its own (an ``AOTFunction``), once a backward ran with
    # grad mode on: its entries hold the second-order graphs, and theirs the third-order ones.
    higher_order: Any = None
    # (flat tensor position, storage offset) the entry is specialized on: its program reads
    # storage at absolute offsets there.
    offset_guard: tuple[tuple[int, int], ...] = ()
    # Leaf positions of the inputs traced with symbolic sizes (``meta.symbolic``), in the guard's order.
    dynamic_positions: tuple[int, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


# Compiles a function as aotfx compiles any (``AOTFunction(fn, config, leading_names)``): the core hands it
# the higher-order backward, and the API, which owns it, hands it to the core.
CompileFunction = Callable[[Callable[..., Any], AOTConfig, list[str]], Any]


def compile_core(
    stage: CoreStage, config: AOTConfig, entry: CompiledEntry, compile_function: CompileFunction
) -> Runtime:
    """Compile ``stage.fn`` for ``stage.args``; the graphs land on ``entry``.

    ``compile_function`` compiles the backward as a function of its own when a backward runs with
    grad mode on (``aot.compile.higher_order``)."""
    meta = stage.meta
    entry.core_meta = meta
    # Under the caller's inference mode only an autograd.Function in an enable_grad region records (built-in
    # ops never do, whatever the grad mode): a training graph then, run by an autograd.Function too.
    recorded = _grad_inside_no_grad(entry.meta)
    if not CALLER_IN_INFERENCE_MODE.get():
        recorded = recorded or torch.is_grad_enabled()
    if meta.requires_autograd and recorded:
        if meta.backward_error is not None:
            return _forward_only(stage, config, entry, RuntimeError(meta.backward_error))
        try:
            joint = trace_joint(stage.fn, stage.args, meta, config.decompositions)
        except RuntimeError as error:
            # Not a derivative missing (NotImplementedError): that one eager raises where it is asked for.
            if not raised_by_eager_backward(error) or isinstance(error, NotImplementedError):
                raise
            if DIFFERENTIATING_BACKWARD.get() and missing_derivative(error) is not None:
                raise  # a first-order backward's op: decomposed and traced again (compile_higher_order)
            # Eager runs this forward and fails only in backward: so do we.
            return _forward_only(stage, config, entry, error)
        entry.joint = joint
        entry.extra["backward_writes"] = tuple(joint.meta["mutated_inputs"])
        entry.extra[USER_FUNCTIONS] = joint.meta.get(USER_FUNCTIONS, True)
        entry.extra[REACHED_FROM] = joint.meta.get(REACHED_FROM)
        entry.extra[REENTRANT_CHECKPOINT] = joint.meta.get(REENTRANT_CHECKPOINT, False)
        num_outputs = len(meta.output_info)
        entry.forward, entry.backward = config.partition_fn(joint, example_inputs(joint), num_fwd_outputs=num_outputs)
        insert_runtime_asserts(entry.forward, "forward")
        insert_runtime_asserts(entry.backward, "backward")
        split = _split_at_written_inputs(stage, config, entry, compile_function)
        if split is not None:
            _mark_static_inputs(entry, meta)
            return split
    else:
        entry.inference = trace_inference(stage.fn, stage.args, meta, config.decompositions, stage.copied)
        if config.keep_inference_input_mutations:
            keep_input_writes(entry.inference, meta, stage.args)
        insert_runtime_asserts(entry.inference, "inference")
    _mark_static_inputs(entry, meta)
    return runtime_from_graphs(meta, config, entry, compile_function)


def _split_at_written_inputs(
    stage: CoreStage, config: AOTConfig, entry: CompiledEntry, compile_function: CompileFunction
) -> Runtime | None:
    """The runtime of the forward cut at the final values of written inputs later reads follow in eager
    (``aot.compile.written_split``); None where the program needs no cut, or one we do not make: an
    autograd.Function's backward, or symbolic sizes, which the stages compiled apart would not keep; an input
    restrided after the call."""
    meta = stage.meta
    if entry.joint is None or not reads_a_final_value(entry.joint, meta):
        return None
    if entry.extra.get(USER_FUNCTIONS, True) or entry.dynamic_positions or config.dynamic:
        return None
    # An input a layer above restrides in place after the call: a stage saving it would see the new geometry.
    if any(info.restrided_after_call or info.reaches_below for info in meta.input_info):
        return None
    split = split_at_written_inputs(entry.joint, meta)
    if split is None:
        return None
    entry.extra["written_split"] = split
    inner = dataclasses.replace(config, num_params_buffers=0, dynamic=False, dynamic_dims=())

    def compile_stage(gm: fx.GraphModule, stage: int) -> Callable[..., Any]:
        names = [node.name for node in gm.graph.find_nodes(op="placeholder")]
        compiled: Callable[..., Any] = compile_function(gm, inner, names)
        return compiled

    return split_runtime(split, meta, compile_stage)


def _mark_static_inputs(entry: CompiledEntry, meta: ViewAndMutationMeta[GraphArg, GraphOut]) -> None:
    """Tell backends which placeholders are parameters or buffers (inductor's ``static_input_idxs``).

    By name: the partitioner keeps a primal's name where the backward reads it as a saved value.
    """
    traced = entry.joint if entry.joint is not None else entry.inference
    assert traced is not None
    static = {
        node.name
        for node in traced.graph.nodes
        if node.op == "placeholder"
        and isinstance(desc := node.meta.get(DESC), Primal)
        and meta.input_info[desc.arg].static
    }
    for gm in (entry.forward, entry.backward, entry.inference):
        if gm is not None:
            placeholders = [node.name for node in gm.graph.nodes if node.op == "placeholder"]
            gm.meta["static_input_indices"] = [i for i, name in enumerate(placeholders) if name in static]


def _grad_inside_no_grad(user_meta: ViewAndMutationMeta[UserArg, UserOut]) -> bool:
    """Called under no_grad, the function still returns a computed value with a gradient: it made it
    in an ``enable_grad`` region (eager records that region; so must the compiled call)."""
    computed = (OutputType.NON_ALIAS, OutputType.ALIAS_OF_INTERMEDIATE)
    # A leaf the function called requires_grad_() on has no history to record.
    return (
        any(
            info.is_differentiable and not info.is_leaf and info.output_type in computed
            for info in user_meta.output_info
        )
        or any(base.is_differentiable and not base.is_leaf for base in user_meta.intermediate_bases)
        # an input written in such a region: eager records the write
        or any(info.mutation_visible_to_autograd and info.requires_grad_after for info in user_meta.input_info)
    )


def runtime_from_graphs(
    meta: ViewAndMutationMeta[GraphArg, GraphOut],
    config: AOTConfig,
    entry: CompiledEntry,
    compile_function: CompileFunction,
    restored: bool = False,
) -> Runtime:
    """Compile the entry's forward/backward pair, or its inference graph, into the core's runtime.

    ``restored``: the graphs came from a stored entry; the built-in backends, which compile
    nothing, then skip the graph cache (its keys and disk reads cost more than they save).
    """
    if entry.inference is None:
        forward_gm, backward_gm = entry.forward, entry.backward
        assert forward_gm is not None and backward_gm is not None
        compiled_forward = _compile("forward", forward_gm, config.fw_compiler, config, restored)
        forward = _with_grad_mode_for_kernels(forward_gm, compiled_forward)

        def compile_backward() -> Any:
            start = time.perf_counter()
            with logs.silenced(not config.enable_log):
                compiled = _compile("backward", backward_gm, config.bw_compiler, config, restored)
            entry.backward_compile_seconds = time.perf_counter() - start
            return compiled

        higher_order = _higher_order(meta, config, entry, forward_gm, backward_gm, compile_function)
        # Primals the forward saves as they are, of inputs a layer above restrides in place after the call: the
        # runtime saves aliases in the call's geometry.
        saved = saved_values(forward_gm, len(meta.output_info))
        saved_primals = [
            k for k, node in enumerate(saved) if isinstance(node, fx.Node) and _restrided_after_call(meta, node)
        ]
        return make_training_runtime(
            forward,
            compile_backward,
            meta,
            entry.extra.get("backward_writes", ()),
            higher_order,
            saved_primals,
            # (unknown for a stored entry: as with an autograd.Function)
            _gradient_sources(
                meta, backward_gm, len(saved), entry.extra.get(USER_FUNCTIONS, True), entry.extra.get(REACHED_FROM)
            ),
            reentrant_checkpoint=entry.extra.get(REENTRANT_CHECKPOINT, False),
        )

    compiled = _compile("inference", entry.inference, config.inference_compiler, config, restored)

    def run_inference(args: list[torch.Tensor]) -> list[Any]:
        with torch.no_grad():
            return fresh_outputs(compiled(list(args)))

    def emit(source: Source, args: str) -> str:
        graph, fresh = source.const(compiled, "inference_graph"), source.const(fresh_outputs, "fresh_outputs")
        grad_on, set_grad = (
            source.const(torch.is_grad_enabled, "grad_on"),
            source.const(torch._C._set_grad_enabled, "set_grad_enabled"),
        )
        outs, mode = source.fresh("outs"), source.fresh("grad_mode")
        if source.grad_mode is False:  # the guard checked it: no mode to set, nor to restore
            source.line(f"{outs} = {fresh}({graph}(list({args})))")
            return outs
        source.line(f"{mode} = {grad_on}()")
        source.line(f"{set_grad}(False)")
        with source.block("try:"):
            source.line(f"{outs} = {fresh}({graph}(list({args})))")
        with source.block("finally:"):
            source.line(f"{set_grad}({mode})")
        return outs

    return attach(run_inference, emit)


def _higher_order(
    meta: ViewAndMutationMeta[GraphArg, GraphOut],
    config: AOTConfig,
    entry: CompiledEntry,
    forward_gm: fx.GraphModule,
    backward_gm: fx.GraphModule,
    compile_function: CompileFunction,
) -> HigherOrder:
    """How the pair's backward runs with grad mode on: as a function aotfx compiles on first use."""
    num_outputs = len(meta.output_info)
    held = held_primals(forward_gm, backward_gm, num_outputs)
    placeholders = [node for node in forward_gm.graph.nodes if node.op == "placeholder"]
    written = frozenset(p for p in held if isinstance(desc := placeholders[p].meta.get(DESC), Primal) and desc.written)
    restrided = frozenset(p for p in held if _restrided_after_call(meta, placeholders[p]))

    def compile_higher_order() -> tuple[Callable[..., Any], Sequence[int]]:
        plan = plan_higher_order(forward_gm, backward_gm, num_outputs)
        names = [node.name for node in plan.graph.graph.nodes if node.op == "placeholder"]
        # Of a symbolic entry, every dimension of the backward's tensors varies (the names the user's
        # dynamic_dims gave are not the backward's); its size arguments are specialized by value.
        dynamic = bool(entry.dynamic_positions) or config.dynamic
        inner = dataclasses.replace(config, num_params_buffers=0, dynamic=dynamic, dynamic_dims=())
        entry.higher_order = compile_function(plan.graph, inner, names)

        def call(*args: Any) -> Any:
            while True:
                token = DIFFERENTIATING_BACKWARD.set(True)
                try:
                    return entry.higher_order(*args)
                except RuntimeError as error:
                    if not decompose_missing_derivative(error, plan.graph):
                        raise  # an op without derivative: eager's double backward raises it too
                    # Traced again with the op decomposed, as eager's backward computes it with grad mode on.
                    entry.higher_order = compile_function(plan.graph, inner, names)
                finally:
                    DIFFERENTIATING_BACKWARD.reset(token)

        return call, plan.fed

    return HigherOrder(held, written, compile_higher_order, restrided)


def _gradient_sources(
    meta: ViewAndMutationMeta[GraphArg, GraphOut],
    backward: fx.GraphModule,
    num_saved: int,
    user_functions: bool,
    reached_from: Mapping[int, frozenset[int]] | None = None,
) -> list[tuple[int, frozenset[int]]]:
    """(primal, outputs) pairs: the outputs whose tangents the backward's gradient of the primal is computed
    from, where those are some of the outputs with a tangent, not all (the output's own tangent passed through,
    the new value of a written input no output reads). When none of them gets a gradient, eager's engine never
    runs the path to that input (its leaves keep ``.grad`` None), while the compiled backward runs for the
    other outputs and would give it zeros computed from materialized tangents.

    ``user_functions``: the backward runs an autograd.Function's backward, which eager's engine runs with zeros
    for its outputs no gradient reached once one did: the graph's data flow does not tell then. ``reached_from``
    (the trace's, for each primal requiring grad: the outputs a gradient reaches it from along eager's autograd
    graph) does; without it (a stored entry), only a tangent passed through as the gradient itself is told.
    """
    placeholders = [node for node in backward.graph.nodes if node.op == "placeholder"]
    tangent_of = {node: meta.traced_tangents[k] for k, node in enumerate(placeholders[num_saved:])}
    sources: dict[fx.Node, frozenset[int]] = {}
    for node in backward.graph.nodes:
        if node in tangent_of:
            sources[node] = frozenset({tangent_of[node]})
        else:
            sources[node] = frozenset().union(*(sources[n] for n in node.all_input_nodes))
    every = frozenset(meta.traced_tangents)
    grads = output_values(backward)[: len(meta.input_info)]
    if user_functions and reached_from is not None:
        return [
            (p, reached_from[p])
            for p, g in enumerate(grads)
            if isinstance(g, fx.Node) and p in reached_from and reached_from[p] < every
        ]
    if user_functions:
        return [(p, sources[g]) for p, g in enumerate(grads) if isinstance(g, fx.Node) and g in tangent_of]
    return [(p, sources[g]) for p, g in enumerate(grads) if isinstance(g, fx.Node) and frozenset() < sources[g] < every]


def _restrided_after_call(meta: ViewAndMutationMeta[GraphArg, GraphOut], node: fx.Node) -> bool:
    """``node`` is a primal of an input whose geometry a layer above changes in place after the call."""
    desc = node.meta.get(DESC)
    return node.op == "placeholder" and isinstance(desc, Primal) and meta.input_info[desc.arg].restrided_after_call


def _compile_inference(stage: CoreStage, config: AOTConfig, entry: CompiledEntry, compiler: Any) -> Any:
    inference_gm = trace_inference(stage.fn, stage.args, stage.meta, config.decompositions, stage.copied)
    entry.inference = inference_gm
    return _compile("inference", inference_gm, compiler, config)


def _compile(kind: str, gm: fx.GraphModule, compiler: Any, config: AOTConfig, restored: bool = False) -> Any:
    """Every backend compile goes through the compile cache: equal graphs compile once."""
    logs.log_graph(kind, gm)
    with backend_errors(kind, compiler, gm):
        if restored and compiler in keys.BUILTIN_SERIALIZERS:
            return to_boxed(compiler(gm, example_inputs(gm)))
        context = keys.KeyContext.of(config.decompositions, config.partition_fn)
        return to_boxed(keys.compile(kind, gm, example_inputs(gm), compiler, context, config.cache_dir))


# Kernels that compute what the backward needs only when grad mode is on (mkldnn's LSTM workspace),
# while an autograd.Function's forward runs under no_grad.
_GRAD_MODE_KERNELS = frozenset({torch.ops.aten.mkldnn_rnn_layer.default})


def _with_grad_mode_for_kernels(gm: fx.GraphModule, forward: Any) -> Any:
    """Run the compiled forward with grad mode on (inputs detached: nothing is recorded) if it needs it."""
    if not any(node.target in _GRAD_MODE_KERNELS for node in gm.graph.nodes):
        return forward

    def run(args: list[Any]) -> Any:
        detached = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
        with torch.enable_grad():
            return forward(detached)

    return run


def _forward_only(stage: CoreStage, config: AOTConfig, entry: CompiledEntry, error: RuntimeError) -> Runtime:
    """Outputs with eager's autograd metadata whose backward raises the error eager's backward raises."""
    entry.extra["forward_only"] = True
    forward = _compile_inference(stage, config, entry, config.fw_compiler)

    def backward_raising(args: list[Any]) -> Any:
        raise RuntimeError(str(error))

    return make_training_runtime(forward, lambda: backward_raising, stage.meta, backward_raises=True)
