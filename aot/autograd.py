"""The autograd layer: a ``torch.autograd.Function`` around the compiled forward.

The forward runs the compiled forward graph and saves what it returns for the
backward through ``ctx.save_for_backward`` (so autograd's version-counter
checks see later in-place changes). The backward graph is compiled on the first
backward only. A second derivative raises ``DoubleBackwardError`` rather than
returning a silently wrong one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from aot.errors import DoubleBackwardError
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


class _CompiledBackward(torch.autograd.Function):
    """Runs the compiled backward when the caller asked for a graph of it (``create_graph=True``).

    Its own backward is the second derivative, which aotfx does not trace yet.
    """

    @staticmethod
    def forward(ctx: Any, run: Callable[[list[Any]], list[Any]], *tensors: Any) -> Any:
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
) -> Callable[[list[Any]], list[Any]]:
    """The runtime of a training graph pair, for the flat convention of ``meta``.

    Args:
        forward: the compiled forward, returning outputs then saved values.
        compile_backward: compiles the backward on first use; called at most once.
        meta: the core's meta; every output is graph-computed.
    """
    num_outputs = len(meta.output_info)
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
            outputs, saved = fresh_outputs(results[:num_outputs], args), results[num_outputs:]
            ctx.save_for_backward(*saved)
            ctx.mark_non_differentiable(*(outputs[i] for i in non_differentiable))
            return tuple(outputs)

        @staticmethod
        def backward(ctx: Any, *grad_outputs: torch.Tensor) -> Any:
            tangents = [
                restride(grad_outputs[out], spec) for out, spec in zip(tangent_outputs, tangent_specs, strict=True)
            ]
            args = [*ctx.saved_tensors, *tangents]
            if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
                return _CompiledBackward.apply(run_backward, *args)  # type: ignore[no-untyped-call]
            return tuple(run_backward(args))

    def run(args: list[Any]) -> list[Any]:
        return list(CompiledFunction.apply(*args))  # type: ignore[no-untyped-call]

    return run
