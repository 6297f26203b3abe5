"""Where eager's forward made a value without history, for the higher-order backward to read it so again.

The graphs run without autograd, so a ``detach()`` or a ``no_grad`` region changes no value there and
the trace drops or ignores it. The higher-order backward (``aot.compile.higher_order``) runs the
forward's nodes again *with* autograd: a value eager made without history (``x.detach()``, an op under
``no_grad``, a gradient an autograd.Function's forward computed and its backward reads) would get one,
and the second derivative would gain terms eager's has not. While the joint's forward is traced,
:class:`HistoryStops` marks those nodes ``NO_HISTORY``; :func:`note_detached_reads` then marks, on each
node reading one, the argument positions to read through ``detach()``.

Only Python calls are seen (a torch-function mode, and ``Tensor.detach`` itself): autograd's own
``detach`` of a saved output is not a stop, as eager's backward reads that output with its history.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot, has_proxy_slot
from torch.overrides import TorchFunctionMode

from meta.eager_state import is_leaf_safely

__all__ = ["DETACHED_READS", "NO_HISTORY", "HistoryStops", "NoGradViewEdges", "note_detached_reads"]

# Node meta: eager's forward made this value without history, though the trace may compute it from values with one.
NO_HISTORY = "no_history"
# Node meta: the positions, among the leaves of ``(args, kwargs)``, where the node reads a NO_HISTORY value.
DETACHED_READS = "detached_reads"

_ORIGINAL_DETACH = torch.Tensor.__dict__["detach"]
_lock = threading.Lock()
_users = 0
_recording = threading.local()


def _detach(self: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = _ORIGINAL_DETACH(self)
    stops = getattr(_recording, "stops", None)
    if stops is not None:
        stops.made.append(out)  # a detach inside a library call, which the torch-function mode sees not
    return out


class HistoryStops(TorchFunctionMode):
    """While active, records the tensors Python calls return; :meth:`mark` marks those left without history."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[torch.Tensor] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.made.extend(t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor))
        return out

    def __enter__(self) -> HistoryStops:
        global _users
        with _lock:
            if _users == 0:
                setattr(torch.Tensor, "detach", _detach)  # noqa: B010 (mypy: a method assigned)
            _users += 1
        self._outer = getattr(_recording, "stops", None)
        _recording.stops = self
        super().__enter__()  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, *exc: Any) -> None:
        global _users
        super().__exit__(*exc)  # type: ignore[no-untyped-call]
        _recording.stops = self._outer
        with _lock:
            _users -= 1
            if _users == 0:
                setattr(torch.Tensor, "detach", _ORIGINAL_DETACH)  # noqa: B010

    def mark(self) -> None:
        """After the forward (an autograd.Function's outputs get their history when it returns)."""
        mode = get_proxy_mode()
        if mode is not None:
            for tensor in self.made:
                if not tensor.requires_grad and has_proxy_slot(tensor, mode.tracer):
                    get_proxy_slot(tensor, mode.tracer).proxy.node.meta[NO_HISTORY] = True
        self.made.clear()


class NoGradViewEdges(TorchFunctionMode):
    """While active, gives the views taken under no_grad of a tensor requiring grad a gradient edge of their own.

    Such a view requires grad with no history and no edge: what reads it (an autograd.Function saving it, whose
    backward writes it) has no edge to it either, yet eager's backward runs every node its roots reach, those too.
    The joint trace's ``torch.autograd.grad`` runs only the nodes reaching its inputs: on the fakes, the view
    becomes a leaf of its own (``requires_grad_()``, its gradient dropped as a leaf made inside's), which they reach.
    (Views of an input eager's caller made a leaf by ``requires_grad_()`` on a view of a base requiring none follow
    that base: taken under no_grad of the leaf the function gets for it, ``meta.stand_ins``, they require none.)
    """

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        # An in-place op returns its argument: no view taken, and its history is not read. A mode below autograd
        # calls the op again (``set_()``, see ``meta.storage_set``): a fake view written since it was taken would
        # replay its view ops there, autograd excluded, and keep no history, a leaf for its next in-place op.
        arguments = {id(t) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for tensor in pytree.tree_leaves(out):
            if (
                isinstance(tensor, torch.Tensor)
                and id(tensor) not in arguments
                and tensor.requires_grad
                and tensor._is_view()
                and is_leaf_safely(tensor)
            ):
                with torch._C.DisableTorchFunction():
                    tensor.requires_grad_()
        return out


def note_detached_reads(graph: fx.Graph) -> None:
    """Mark on each node the argument positions where it reads a NO_HISTORY value (before detaches are dropped)."""
    for node in graph.nodes:
        if node.meta.get(NO_HISTORY):
            for user in node.users:
                leaves = pytree.tree_leaves((user.args, user.kwargs))
                positions = {i for i, leaf in enumerate(leaves) if leaf is node}
                user.meta[DETACHED_READS] = frozenset(user.meta.get(DETACHED_READS, frozenset()) | positions)
