"""The autograd layer: a ``torch.autograd.Function`` around the compiled forward.

The forward runs the compiled forward graph and saves what it returns for the
backward through ``ctx.save_for_backward`` (so autograd's version-counter
checks see later in-place changes). The backward graph is compiled on the first
backward only. Run with grad mode on (``create_graph=True``), the backward is the
higher-order backward instead (``aot.compile.higher_order``): a compiled function of its
own, whose gradients carry history, so any order of derivative is eager's. Where an autograd.Function's backward wrote a
saved input or its ``grad_output`` in place, the backward graph returns their
new values too, copied into those tensors as eager's write landed in them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from aot.compile.checkpoints import check_checkpoint_valid
from aot.compile.higher_order import missing_derivative
from aot.errors import DoubleBackwardError
from meta.indices import GraphArg, GraphOut
from meta.storage import one_index_per_element
from meta.versions import as_read, version
from meta.view_and_mutation import TensorSpec, ViewAndMutationMeta
from wrappers.codegen import Source, attach

__all__ = ["BoxedFn", "HigherOrder", "fresh_outputs", "make_training_runtime", "restride"]

T = TypeVar("T")
_TENSOR_OR_NONE = (torch.Tensor, type(None))

# A compiled graph in the boxed convention: takes a list, returns a sequence.
BoxedFn = Callable[[list[Any]], Sequence[Any]]


def restride(tangent: torch.Tensor, spec: TensorSpec) -> torch.Tensor:
    """Give a runtime tangent the layout it was traced with (contiguous), copying only if needed."""
    if tangent.dtype != spec.dtype:
        tangent = tangent.to(spec.dtype)
    if not tangent.is_contiguous():
        tangent = tangent.contiguous()
    return tangent


def fresh_outputs(outputs: Sequence[Any], inputs: Sequence[Any] = ()) -> list[Any]:
    """Graph outputs as eager returns them: not autograd views of graph intermediates.

    A functional graph may compute an output as a view of an intermediate where
    eager mutated the metadata in place (``matmul``'s ``squeeze_``); its ``_base``
    would leak. ``detach()`` keeps the memory and drops the view relation.
    """
    for out in outputs:  # a loop, not any(...): this runs at every call
        if isinstance(out, torch.Tensor) and out._is_view():
            break
    else:
        return list(outputs)  # the common case: no view, the inputs' storages are not needed
    storages = {t.untyped_storage()._cdata for t in inputs if isinstance(t, torch.Tensor)}
    return [
        out.detach()
        if isinstance(out, torch.Tensor) and out._is_view() and out.untyped_storage()._cdata not in storages
        else out
        for out in outputs
    ]


def _distinct(outputs: list[Any], inputs: Sequence[Any]) -> list[Any]:
    """One graph value returned at two positions (a user output that is also an input's new value)
    becomes two tensors on its memory: autograd then routes each position's gradient to its own tangent,
    where one object would take one of them for both."""
    ids = {id(out) for out in outputs}
    if len(ids) == len(outputs) and ids.isdisjoint(map(id, inputs)):
        return outputs  # the common case: every output a distinct new value
    inputs_seen = {id(t) for t in inputs}
    seen: set[int] = set()
    distinct = []
    for out in outputs:
        if isinstance(out, torch.Tensor) and id(out) not in inputs_seen:
            out = out.detach() if id(out) in seen else out
            seen.add(id(out))
        distinct.append(out)
    return distinct


def _as_called(saved: Sequence[Any], primals: Sequence[int]) -> list[Any]:
    """``saved`` with the primals at ``primals`` as aliases: the backward graph reads them in the geometry the
    call had, and a layer above may restride the caller's tensor in place after it (eager's ``t_()``)."""
    saved = list(saved)
    for k in primals:
        saved[k] = saved[k].detach()
    return saved


def _saveable(saved: Sequence[Any]) -> Sequence[Any]:
    """What the compiled forward saves. Recorded under the caller's inference mode (an autograd.Function in
    an ``enable_grad`` region), inference tensors among them are copied outside it: autograd refuses to
    save those (eager's Function saved none, or raised)."""
    if not torch.is_inference_mode_enabled():
        return saved
    with torch.inference_mode(False):
        return [v.clone() if isinstance(v, torch.Tensor) and v.is_inference() else v for v in saved]


@dataclass(frozen=True)
class HigherOrder:
    """How a training pair's backward runs with grad mode on (``aot.compile.higher_order``).

    ``held``: the primal positions the forward keeps for it; ``written``: those among them the
    function writes (kept as copies made with history, so the values are the call's).
    ``compile`` builds, once, the compiled higher-order backward and the positions of the saved
    values passed to it as they are; it takes held primals, those saved values and the tangents.
    """

    held: Sequence[int]
    written: frozenset[int]
    compile: Callable[[], tuple[Callable[..., Any], Sequence[int]]]
    # Those a layer above restrides in place after the call: held as aliases (with history) in the call's geometry.
    restrided: frozenset[int] = frozenset()


def _hold(args: Sequence[Any], higher_order: HigherOrder) -> list[Any]:
    if not higher_order.written and not higher_order.restrided:
        return [args[p] for p in higher_order.held]  # the common case, on every call: references only
    held = []
    for p in higher_order.held:
        arg = args[p]
        if isinstance(arg, torch.Tensor) and not torch.is_inference_mode_enabled():
            with torch.enable_grad():
                if p in higher_order.written:
                    arg = arg.clone()  # the function's write lands in the caller's tensor after this call
                elif p in higher_order.restrided:
                    arg = arg.view_as(arg)  # the caller's tensor changes geometry after this call
        held.append(arg)
    return held


def _materialized(grad_outputs: Sequence[Any], like: Sequence[Any]) -> tuple[Any, ...]:
    """Zeros for the tangents no gradient reached, as autograd materializes them."""
    return tuple(
        torch.zeros(out[0], dtype=out[1], device=out[2]) if g is None and out is not None else g
        for g, out in zip(grad_outputs, like, strict=True)
    )


def _check_versions(held: Sequence[Any], versions: Sequence[int]) -> None:
    for tensor, expected in zip(held, versions, strict=True):
        if isinstance(tensor, torch.Tensor) and version(tensor) != expected:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace "
                f"operation: [{tensor.type()} {list(tensor.shape)}] is at version {tensor._version}; expected "
                f"version {expected} instead (an input of an aotfx-compiled function, which its higher-order "
                "backward recomputes from)."
            )


_HELD = "_aot_held"


def _held_lifetime(held: list[Any]) -> torch.Tensor:
    """An empty tensor carrying ``held``, to save for backward: autograd frees what it saved after the
    backward (unless ``retain_graph``), and the held primals go with it, as eager's saved tensors do."""
    with torch.inference_mode(False):
        marker = torch.empty(0)
    setattr(marker, _HELD, held)
    return marker


def _saved_tensor_hooks_active() -> bool:
    """The caller packs saved tensors (offloading, checkpointing): a packed marker may lose what it carries."""
    return torch._C._autograd._top_saved_tensors_default_hooks(True) is not None


def _release_with_saved(ctx: Any) -> None:
    """Drop ``ctx.held_strongly`` at the end of this backward if autograd freed what ctx saved (no
    ``retain_graph``): the held primals die with the saved tensors, as eager's do, not with the graph."""

    def release() -> None:
        try:
            _ = ctx._raw_saved_tensors  # raises once freed; unpacks nothing (the caller's unpack hook not run)
        except RuntimeError:
            ctx.held_strongly = None

    try:
        torch.autograd.Variable._execution_engine.queue_callback(release)
    except RuntimeError:
        pass  # not run by the engine: nothing frees the saved tensors either


class _NoDerivative(torch.autograd.Function):
    """Gradients computed without history, given the history of ``edges``; their backward raises ``error``
    again, as its type (never zeros, never a silently missing edge)."""

    @staticmethod
    def forward(ctx: Any, error: RuntimeError, grads: list[Any], *edges: torch.Tensor) -> Any:
        ctx.error = error
        return tuple(grads)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        raise type(ctx.error)(str(ctx.error))


_REENTRANT_CHECKPOINT_REFUSED = DoubleBackwardError(
    "double backward through a reentrant torch.utils.checkpoint inside an aotfx-compiled function is not supported: "
    "eager's checkpoint computes its gradients without history there. Use use_reentrant=False."
)


def _once(build: Callable[[], T]) -> Callable[[], T]:
    """``build()`` run on the first call (by one thread), its result returned on every call."""
    built: list[T] = []
    lock = threading.Lock()

    def get() -> T:
        if not built:
            with lock:
                if not built:
                    built.append(build())
        return built[0]

    return get


def make_training_runtime(
    forward: BoxedFn,
    compile_backward: Callable[[], BoxedFn],
    meta: ViewAndMutationMeta[GraphArg, GraphOut],
    backward_writes: Sequence[int] = (),
    higher_order: HigherOrder | None = None,
    saved_primals: Sequence[int] = (),
    gradient_sources: Sequence[tuple[int, frozenset[int]]] = (),
    backward_raises: bool = False,
    reentrant_checkpoint: bool = False,
) -> Callable[[list[Any]], list[Any]]:
    """The runtime of a training graph pair, for the flat convention of ``meta``.

    Args:
        forward: the compiled forward, returning outputs then saved values.
        compile_backward: compiles the backward on first use; called at most once.
        meta: the core's meta; every output is graph-computed.
        backward_writes: the backward graph's placeholders (primals, then tangents) that an
            autograd.Function's backward wrote in place; the backward returns their new values
            after the gradients, and they are copied into the tensors passed there.
        higher_order: how the backward runs with grad mode on; None: as with it off.
        saved_primals: the positions among the saved values where the forward saves a primal itself.
        gradient_sources: (primal, outputs) pairs where the backward computes the primal's gradient from the
            tangents of those outputs alone: no tangent reaching any of them (eager's engine never runs that
            path), none.
        backward_raises: the backward raises the error eager's does (a tensor it saved was written later).
        reentrant_checkpoint: the graphs inline a reentrant checkpoint's function: the backward refuses to run
            where eager's checkpoint does, and to be differentiated (eager's gives gradients without history).
    """
    num_outputs = len(meta.output_info)
    num_primals = len(meta.input_info)
    written_primals = [p for p in backward_writes if p < num_primals]
    tangent_outputs = meta.traced_tangents
    tangent_specs = [meta.output_info[i].spec for i in tangent_outputs]
    backward_fn = _once(compile_backward)
    # No input requires grad, yet the backward writes one (an autograd.Function's backward reached through a
    # leaf the function made) or raises (a tensor saved from such a leaf was written later, through an input
    # or not): eager's backward runs it, so the call gets an edge of its own to be run by.
    own_edge = (bool(backward_writes) or backward_raises) and not any(info.requires_grad for info in meta.input_info)
    # With an edge of its own, a leaf the function made and returns comes out of the call without a history
    # (the epilogue makes it require grad, as eager's): only the outputs computed from it get the call's.
    non_differentiable = [
        i for i, info in enumerate(meta.output_info) if not info.is_differentiable or (own_edge and info.is_leaf)
    ]
    # Tangents materialized here, not by autograd: which ones were None decides those gradients.
    materialize_here = bool(gradient_sources)

    def compile_higher_order() -> tuple[Callable[..., Any], Sequence[int]] | DoubleBackwardError:
        assert higher_order is not None
        try:
            return higher_order.compile()
        except DoubleBackwardError as error:
            return error  # raised again at every backward that needs it

    higher_order_fn = _once(compile_higher_order)

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *args: torch.Tensor) -> Any:
            if own_edge:
                args = args[:-1]
            results = forward(list(args))
            outputs, saved = _distinct(fresh_outputs(results[:num_outputs], args), args), results[num_outputs:]
            saved = _saveable(_as_called(saved, saved_primals) if saved_primals else saved)
            lifetime: list[torch.Tensor] = []
            if higher_order is not None:
                # Held, not saved: the first-order backward does not read them, so it checks no versions. They
                # live as long as what the Function saved (a marker saved carries them), not as long as the graph.
                held = _hold(args, higher_order)
                # (An inference tensor has no counter: eager's saved one is never checked either.)
                ctx.held_versions = [version(t) if isinstance(t, torch.Tensor) else 0 for t in held]
                ctx.held_strongly = held if _saved_tensor_hooks_active() else None
                lifetime.append(_held_lifetime(held))
            # Sizes the backward needs (symbolic in the graphs) come back as ints: held, not saved.
            if all(isinstance(v, _TENSOR_OR_NONE) for v in saved):
                ctx.saved_sizes = ()
                ctx.save_for_backward(*saved, *lifetime)
            else:
                ctx.saved_sizes = [(i, v) for i, v in enumerate(saved) if not isinstance(v, _TENSOR_OR_NONE)]
                ctx.save_for_backward(*(v for v in saved if isinstance(v, _TENSOR_OR_NONE)), *lifetime)
            # Held, not saved: eager checks the versions of what the Function saved, and the compiled
            # forward saves those; these are only where the backward's writes land. Aliases in the geometry
            # the graph wrote them in: a layer above may restride the caller's tensor in place after the call.
            ctx.written_primals = [args[p].detach() for p in written_primals] if written_primals else ()
            if non_differentiable:
                ctx.mark_non_differentiable(*(outputs[i] for i in non_differentiable))
            if materialize_here:
                ctx.set_materialize_grads(False)
                ctx.output_like = [
                    (o.shape, o.dtype, o.device) if isinstance(o, torch.Tensor) else None for o in outputs
                ]
            return tuple(outputs)

        @staticmethod
        def backward(ctx: Any, *grad_outputs: torch.Tensor) -> Any:
            if reentrant_checkpoint:
                check_checkpoint_valid()
            if materialize_here:
                unreached = {out for out, g in enumerate(grad_outputs) if g is None}
                grad_outputs = _materialized(grad_outputs, ctx.output_like)
                return _unreached_none(backward_of(ctx, *grad_outputs), unreached)
            return backward_of(ctx, *grad_outputs)

        @staticmethod
        def backward_of(ctx: Any, *grad_outputs: torch.Tensor) -> Any:
            tangents = [
                restride(grad_outputs[out], spec) for out, spec in zip(tangent_outputs, tangent_specs, strict=True)
            ]
            saved = ctx.saved_tensors
            held: list[Any] = []
            if higher_order is not None:
                *saved, marker = saved
                if ctx.held_strongly is not None:
                    held = ctx.held_strongly
                    _release_with_saved(ctx)
                else:
                    held = getattr(marker, _HELD)
            if ctx.saved_sizes:
                saved = list(saved)
            for position, size in ctx.saved_sizes:
                saved.insert(position, size)
            args = [*saved, *tangents]
            refused: RuntimeError | None = None
            if (
                higher_order is not None
                and torch.is_grad_enabled()
                and any(isinstance(t, torch.Tensor) and t.requires_grad for t in [*held, *tangents])
            ):
                # create_graph=True: gradients with history, back to the primals and the tangents.
                _check_versions(held, ctx.held_versions)
                compiled = _REENTRANT_CHECKPOINT_REFUSED if reentrant_checkpoint else higher_order_fn()
                if isinstance(compiled, DoubleBackwardError):
                    refused = compiled
                else:
                    fn, fed = compiled
                    try:
                        return _edged(tuple(fn(*held, *(saved[k] for k in fed), *tangents)))
                    except RuntimeError as error:
                        if missing_derivative(error) is None:
                            raise
                        refused = error  # eager's double backward raises it, its first-order one does not
            # Detached: the graph runs without autograd, and some kernels refuse inputs requiring grad
            # whatever the grad mode (as_strided_scatter of a non-contiguous one). Only those: a detach() per
            # saved value was most of a long graph's backward prologue (the saved values rarely require grad).
            detached = [arg.detach() if isinstance(arg, torch.Tensor) and arg.requires_grad else arg for arg in args]
            if torch.is_grad_enabled():
                with torch.no_grad():
                    results = backward_fn()(detached)
            else:
                results = backward_fn()(detached)  # the engine runs a first-order backward without grad mode
            if backward_writes:
                tangent_inputs = [grad_outputs[out] for out in tangent_outputs]
                targets = [
                    *ctx.written_primals,
                    *(tangent_inputs[p - num_primals] for p in backward_writes[len(written_primals) :]),
                ]
                with torch.no_grad():
                    for target, value in zip(targets, results[num_primals:], strict=True):
                        target, value = one_index_per_element(target, value)  # an expanded input: once each
                        target.copy_(value)
            grads = tuple(results[:num_primals])
            if refused is not None:
                # No derivative to give: the first-order gradients, whose own backward raises why.
                edges = [t for t in [*held, *tangents] if isinstance(t, torch.Tensor) and t.requires_grad]
                return _edged(_NoDerivative.apply(refused, list(grads), *edges))  # type: ignore[no-untyped-call]
            return _edged(grads)

    backward_of = CompiledFunction.backward_of

    def _unreached_none(grads: tuple[Any, ...], unreached: set[int]) -> tuple[Any, ...]:
        if not unreached:
            return grads
        cleared = list(grads)
        for primal, outs in gradient_sources:
            if outs <= unreached:
                cleared[primal] = None
        return tuple(cleared)

    def _edged(grads: tuple[Any, ...]) -> tuple[Any, ...]:
        return (*grads, None) if own_edge else grads

    def edged(args: list[Any]) -> list[Any]:
        return [*args, torch.empty(0, requires_grad=True)] if own_edge else args

    def run(args: list[Any]) -> list[Any]:
        # Called under no_grad, the function made outputs with a gradient in an enable_grad region:
        # record the call (the outputs eager made without one are marked non-differentiable).
        with torch.enable_grad():
            return list(CompiledFunction.apply(*edged(as_read(args))))  # type: ignore[no-untyped-call]

    def emit(source: Source, args: str) -> str:
        apply = source.const(CompiledFunction.apply, "compiled_function")
        if source.relaxing:  # the histories eager's reads took, of views whose counters moved before this call
            args = f"{source.const(as_read, 'as_read')}({args})"
        if own_edge:
            source.line("# an edge of the call's own: its backward writes an input or raises though none requires grad")
            args = f"{source.const(edged, 'edged')}({args})"
        grad_on, enable = source.const(torch.is_grad_enabled, "grad_on"), source.const(torch.enable_grad, "enable_grad")
        outs = source.fresh("outs")
        if source.grad_mode is True:  # the guard checked it
            source.line(f"{outs} = list({apply}(*{args}))")
            return outs
        with source.block(f"if {grad_on}():"):
            source.line(f"{outs} = list({apply}(*{args}))")
        with source.block("else:"):
            source.line("# called under no_grad: recorded as the function's enable_grad region was")
            with source.block(f"with {enable}():"):
                source.line(f"{outs} = list({apply}(*{args}))")
        return outs

    return attach(run, emit)
