"""The autograd layer: a ``torch.autograd.Function`` around the compiled forward.

The forward runs the compiled forward graph and saves what it returns for the
backward through ``ctx.save_for_backward`` (so autograd's version-counter
checks see later in-place changes). The backward graph is compiled on the first
backward only. A second derivative raises ``DoubleBackwardError`` rather than
returning a silently wrong one. Where an autograd.Function's backward wrote a
saved input or its ``grad_output`` in place, the backward graph returns their
new values too, copied into those tensors as eager's write landed in them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from aot.errors import DoubleBackwardError
from meta.storage import one_index_per_element
from meta.view_and_mutation import TensorSpec, ViewAndMutationMeta

__all__ = ["BoxedFn", "fresh_outputs", "make_training_runtime", "restride"]

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
    inputs_seen = {id(t) for t in inputs}
    seen: set[int] = set()
    distinct = []
    for out in outputs:
        if isinstance(out, torch.Tensor) and id(out) not in inputs_seen:
            out = out.detach() if id(out) in seen else out
            seen.add(id(out))
        distinct.append(out)
    return distinct


def _saveable(saved: Sequence[Any]) -> tuple[Sequence[Any], torch.Tensor]:
    """What the compiled forward saves, and an empty anchor tensor to save with it. Recorded under the
    caller's inference mode (an autograd.Function in an ``enable_grad`` region), inference tensors among them
    are copied outside it: autograd refuses to save those (eager's Function saved none, or raised)."""
    if not torch.is_inference_mode_enabled():
        return saved, torch.empty(0)
    with torch.inference_mode(False):
        normal = [v.clone() if isinstance(v, torch.Tensor) and v.is_inference() else v for v in saved]
        return normal, torch.empty(0)


class _CompiledBackward(torch.autograd.Function):
    """Runs the compiled backward when the caller asked for a graph of it (``create_graph=True``).

    Its own backward is the second derivative, which aotfx does not trace yet.
    """

    @staticmethod
    def forward(ctx: Any, run: Callable[[list[Any]], list[Any]], anchor: torch.Tensor, *tensors: Any) -> Any:
        return tuple(run(list(tensors)))

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        raise DoubleBackwardError(
            "double backward through an aotfx-compiled function is not supported: the compiled backward "
            "has no derivative of its own. Compute the second derivative eagerly, or compile only the "
            "part of the program that is differentiated once."
        )


def make_training_runtime(
    forward: BoxedFn,
    compile_backward: Callable[[], BoxedFn],
    meta: ViewAndMutationMeta,
    backward_writes: Sequence[int] = (),
) -> Callable[[list[Any]], list[Any]]:
    """The runtime of a training graph pair, for the flat convention of ``meta``.

    Args:
        forward: the compiled forward, returning outputs then saved values.
        compile_backward: compiles the backward on first use; called at most once.
        meta: the core's meta; every output is graph-computed.
        backward_writes: the backward graph's placeholders (primals, then tangents) that an
            autograd.Function's backward wrote in place; the backward returns their new values
            after the gradients, and they are copied into the tensors passed there.
    """
    num_outputs = len(meta.output_info)
    num_primals = len(meta.input_info)
    written_primals = [p for p in backward_writes if p < num_primals]
    non_differentiable = [i for i, info in enumerate(meta.output_info) if not info.is_differentiable]
    tangent_outputs = meta.traced_tangents
    tangent_specs = [meta.output_info[i].spec for i in tangent_outputs]
    compiled_backward: list[BoxedFn] = []
    lock = threading.Lock()

    def backward_fn() -> BoxedFn:
        if not compiled_backward:
            with lock:
                if not compiled_backward:
                    compiled_backward.append(compile_backward())
        return compiled_backward[0]

    def run_backward(args: list[Any]) -> list[Any]:
        return list(backward_fn()(args))

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *args: torch.Tensor) -> Any:
            results = forward(list(args))
            outputs, saved = _distinct(fresh_outputs(results[:num_outputs], args), args), results[num_outputs:]
            # An empty extra output: saved (as an output, so it holds no memory and no cycle), it comes
            # back in the backward with this node as its grad_fn, the edge to the primals' history.
            saved, anchor = _saveable(saved)
            # Sizes the backward needs (symbolic in the graphs) come back as ints: held, not saved.
            ctx.saved_sizes = [(i, v) for i, v in enumerate(saved) if not isinstance(v, torch.Tensor | None)]
            ctx.save_for_backward(*(v for v in saved if isinstance(v, torch.Tensor | None)), anchor)
            # Held, not saved: eager checks the versions of what the Function saved, and the compiled
            # forward saves those; these are only where the backward's writes land.
            ctx.written_primals = [args[p] for p in written_primals]
            ctx.mark_non_differentiable(*(outputs[i] for i in non_differentiable))
            return (*outputs, anchor)

        @staticmethod
        def backward(ctx: Any, *grad_outputs: torch.Tensor) -> Any:
            tangents = [
                restride(grad_outputs[out], spec) for out, spec in zip(tangent_outputs, tangent_specs, strict=True)
            ]
            *saved, anchor = ctx.saved_tensors
            for position, size in ctx.saved_sizes:
                saved.insert(position, size)
            args = [*saved, *tangents]
            if torch.is_grad_enabled():
                # create_graph=True: every gradient gets a history, through the anchor back to the
                # primals, whose backward raises. Without it a gradient computed from saved values
                # (which carry no history) would look constant: zeros, or a silently missing edge.
                results = _CompiledBackward.apply(run_backward, anchor, *args)  # type: ignore[no-untyped-call]
            else:
                # Detached: the graph runs without autograd, and some kernels refuse inputs requiring grad
                # whatever the grad mode (as_strided_scatter of a non-contiguous one).
                results = tuple(run_backward([arg.detach() if isinstance(arg, torch.Tensor) else arg for arg in args]))
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
            return results[:num_primals]

    def run(args: list[Any]) -> list[Any]:
        if not torch.is_grad_enabled():
            # Called under no_grad, the function made outputs with a gradient in an enable_grad region:
            # record the call (the outputs eager made without one are marked non-differentiable).
            with torch.enable_grad():
                return list(CompiledFunction.apply(*args)[:-1])  # type: ignore[no-untyped-call]
        return list(CompiledFunction.apply(*args)[:-1])  # type: ignore[no-untyped-call]

    return run
