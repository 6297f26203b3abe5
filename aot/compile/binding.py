"""Module parameters bound to traced values for as long as a trace can read them.

``aot_module`` binds its graph inputs in place of the module's parameters and
buffers while the module's forward runs. A joint trace reads them later too:
non-reentrant activation checkpointing re-runs part of the forward during the
backward, through the module's attributes. Inside ``bindings_held()`` a binding
is undone when the trace ends rather than when the forward returns.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

__all__ = ["bindings_held", "defer_unbinding"]

_local = threading.local()


def _scopes() -> list[list[Callable[[], None]]]:
    scopes: list[list[Callable[[], None]]] | None = getattr(_local, "scopes", None)
    if scopes is None:
        scopes = _local.scopes = []
    return scopes


@contextlib.contextmanager
def bindings_held() -> Iterator[None]:
    """Bindings made inside are undone on exit, in reverse order."""
    undos: list[Callable[[], None]] = []
    _scopes().append(undos)
    try:
        yield
    finally:
        _scopes().pop()
        for undo in reversed(undos):
            undo()


def defer_unbinding(undo: Callable[[], None]) -> bool:
    """Hand ``undo`` to the innermost ``bindings_held`` scope; False (call it yourself) if none."""
    scopes = _scopes()
    if not scopes:
        return False
    scopes[-1].append(undo)
    return True
