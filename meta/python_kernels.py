"""torch's Python-dispatcher kernels that disagree with eager, corrected for symbolic traces.

A symbolic trace runs with the Python dispatcher on (``meta.symbolic``), and torch
registers there, at the ``Autograd`` and ``CompositeImplicitAutograd`` keys,
decompositions of a few ops which eager never runs (its C++ kernels do). Where one
of them gives another answer than eager's kernel (the shape of an output, an output
that is eager's input itself), the compiled program would silently differ from
eager. :data:`CORRECTIONS` lists each such kernel with what restores eager's answer;
:func:`eager_kernels` applies them for the duration of a symbolic trace.

The corrections are installed once in torch's kernel table, each behind a dispatch
that runs torch's own kernel unchanged outside :func:`eager_kernels` (other threads,
``torch.compile``, aotfx's static traces never see a difference). :data:`FAKE_CORRECTIONS` does the
same for FakeTensorMode's own kernels of ops with data-dependent sizes, which only traces on a shape
environment (symbolic, or with unbacked sizes) run.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import torch
from torch._C import DispatchKey
from torch._subclasses import fake_impls

__all__ = ["CORRECTIONS", "FAKE_CORRECTIONS", "eager_kernels"]

aten = torch.ops.aten
_NO_REDUCTION = 0  # torch.nn._reduction: 'none'

# A correction receives torch's kernel and the op's arguments and returns eager's answer.
Correction = Callable[..., Any]


def _scalar(loss: torch.Tensor) -> torch.Tensor:
    # A copy, not a view: eager's loss is a tensor of its own (no ``_base``).
    return torch.view_copy(loss, ())


def _multi_margin_loss(torch_kernel: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    # Eager's kernel returns a 0-d loss for a 0-d target with reduction='none'; torch's
    # decomposition works on atleast_1d(target) and returns shape [1].
    loss = torch_kernel(*args, **kwargs)
    reduction = kwargs.get("reduction", args[5] if len(args) > 5 else None)
    target = kwargs.get("target", args[1])
    return _scalar(loss) if reduction == _NO_REDUCTION and target.dim() == 0 else loss


def _multilabel_margin_loss_forward(torch_kernel: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    # Eager's kernel returns a 0-d loss for a target of at most one dimension with
    # reduction='none'; torch's decomposition works on atleast_2d inputs and returns shape [1].
    loss, is_target = torch_kernel(*args, **kwargs)
    reduction = kwargs.get("reduction", args[2] if len(args) > 2 else None)
    target = kwargs.get("target", args[1])
    if reduction == _NO_REDUCTION and target.dim() <= 1:
        loss = _scalar(loss)
    return loss, is_target


def _dropout(torch_kernel: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    # Eager returns the input itself when nothing is dropped (eval, p=0, empty input);
    # torch's decomposition returns a clone, so the output would no longer alias the
    # input. Eager's own C++ kernel is symbolic-size safe: run it.
    return aten.dropout.default._op_dk(DispatchKey.CompositeImplicitAutograd, *args, **kwargs)


# (op, dispatch key of torch's Python kernel, correction): checked against eager by
# tests/test_dynamic_shapes.py::test_python_dispatcher_kernel_matches_eager.
CORRECTIONS: tuple[tuple[torch._ops.OpOverload, DispatchKey, Correction], ...] = (
    (aten.multi_margin_loss.default, DispatchKey.Autograd, _multi_margin_loss),
    (aten.multilabel_margin_loss_forward.default, DispatchKey.Autograd, _multilabel_margin_loss_forward),
    (aten.dropout.default, DispatchKey.Autograd, _dropout),
    (aten.dropout.default, DispatchKey.CompositeImplicitAutograd, _dropout),
)


def _masked_select_fake(
    torch_impl: Callable[..., Any], fake_mode: Any, func: Any, self: torch.Tensor, mask: torch.Tensor
) -> Any:
    # Eager selects from self and mask broadcast to one shape; torch's fake kernel bounds the count of
    # selected elements by self's numel alone, so the trace's runtime assert (count <= numel) failed on a
    # mask that broadcast self to more elements, where eager runs. Broadcast first, as eager's kernel does.
    self, mask = torch.broadcast_tensors(self, mask)  # type: ignore[no-untyped-call]
    return torch_impl(fake_mode, func, self, mask)


# (op, correction) of FakeTensorMode's own op implementations (``fake_impls.op_implementations_dict``),
# applied like CORRECTIONS; a correction receives torch's implementation, then its arguments.
FAKE_CORRECTIONS: tuple[tuple[torch._ops.OpOverload, Callable[..., Any]], ...] = (
    (aten.masked_select.default, _masked_select_fake),
)

_ACTIVE: ContextVar[bool] = ContextVar("aotfx_eager_kernels", default=False)
_INSTALL_LOCK = threading.Lock()
_installed = False


def _dispatching(torch_kernel: Callable[..., Any], correction: Correction) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        if _ACTIVE.get():
            return correction(torch_kernel, *args, **kwargs)
        return torch_kernel(*args, **kwargs)

    return kernel


def _install() -> None:
    global _installed
    with _INSTALL_LOCK:
        if _installed:
            return
        for op, key, correction in CORRECTIONS:
            torch_kernel = op.py_kernels.get(key)
            if torch_kernel is None:  # a torch without this Python kernel runs eager's
                continue
            op.py_kernels[key] = _dispatching(torch_kernel, correction)
            op._dispatch_cache.clear()  # the Python dispatcher caches the kernel it resolved per key
        for op, correction in FAKE_CORRECTIONS:
            torch_impl = fake_impls.op_implementations_dict.get(op)
            if torch_impl is not None:
                fake_impls.op_implementations_dict[op] = _dispatching(torch_impl, correction)
        _installed = True


@contextlib.contextmanager
def eager_kernels() -> Iterator[None]:
    """Within, the Python-dispatcher kernels of :data:`CORRECTIONS` give eager's answers."""
    _install()
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
