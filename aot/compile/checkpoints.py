"""``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=True)`` in a traced joint.

The reentrant checkpoint is an autograd.Function whose backward runs ``fn`` again and differentiates it with
``torch.autograd.backward``; it refuses to run inside ``torch.autograd.grad``, which is how the joint's backward
is traced. It saves memory and changes no value: its forward's outputs are ``fn``'s, its gradients (those it
accumulates into ``fn``'s closure tensors too) are ``fn``'s, with its random numbers drawn again as they were
drawn. The trace runs ``fn`` in its place (:class:`InlinedCheckpoints`), so the graphs differentiate ``fn``
itself; the compiled backward raises eager's error where eager's checkpoint would (:func:`check_checkpoint_valid`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.checkpoint import CheckpointFunction

from aot.errors import UnsupportedOperatorError

__all__ = ["REENTRANT_CHECKPOINT", "InlinedCheckpoints", "check_checkpoint_valid"]

# Joint graph meta: the function ran a reentrant checkpoint (its ``fn`` is inlined in the graphs).
REENTRANT_CHECKPOINT = "reentrant_checkpoint"

# Eager's message (``CheckpointFunction.backward``), raised as eager raises it.
_INVALID = (
    "When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad() or passing an `inputs` parameter"
    " to .backward(). To resolve this error, you can either set use_reentrant=False, or call .backward() without"
    " passing the `inputs` argument."
)


class InlinedCheckpoints(TorchFunctionMode):
    """While active (the last mode pushed: ``fn``'s ops reach every other mode), a reentrant checkpoint's
    ``apply`` runs its function in its place; ``seen`` tells whether one did."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "function_class", None) is not CheckpointFunction:
            return func(*args, **kwargs)
        self.seen = True
        run_function, _preserve_rng_state, *inputs = args
        # Eager's Function records a history for its outputs only where an argument requires grad (its forward
        # runs fn under no_grad): a closure tensor requiring grad gets no gradient otherwise.
        graded = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)
        with torch.set_grad_enabled(graded):
            out = run_function(*inputs)
        if not graded:
            return out
        outs = [_as_function_output(o, inputs) for o in (out if isinstance(out, tuple) else (out,))]
        return tuple(outs) if isinstance(out, tuple) else outs[0]


def _as_function_output(out: Any, inputs: list[Any]) -> Any:
    """``fn``'s output as eager's checkpoint Function returns it: an input returned as it is comes back as a view of
    it; every floating output has a history (refused where ``fn``'s has none: eager's reaches no input)."""
    if not isinstance(out, torch.Tensor):
        return out
    if any(out is t for t in inputs):
        return out.view_as(out)
    if (out.is_floating_point() or out.is_complex()) and not out.requires_grad:
        raise UnsupportedOperatorError(
            "torch.utils.checkpoint.checkpoint(use_reentrant=True) inside an aotfx-compiled function returns a "
            "tensor that does not depend on any input requiring grad: eager gives it a history of the checkpoint's "
            "own, which the compiled function cannot. Use use_reentrant=False, or return it outside the checkpoint."
        )
    return out


def check_checkpoint_valid() -> None:
    """Raise eager's error where its reentrant checkpoint's backward would: run by ``torch.autograd.grad`` or
    ``backward(inputs=...)``."""
    if not torch.autograd._is_checkpoint_valid():  # type: ignore[no-untyped-call]
        raise RuntimeError(_INVALID)
