"""``autograd.Function.apply`` as a torch function while a program is traced.

The tracing modes hand ops stand-ins for some tensors: ``FreshViews`` a fresh view for one whose geometry
changed in place (its autograd record is stale on fakes), the metadata-mutation layer a view of the input
for an alias the function called ``requires_grad_()`` on. ``Function.apply`` is no torch function, so a
Function got the stale or untracked tensor itself: its gradient had the old geometry, or reached nothing.
Inside ``functions_seen_by_modes()`` every ``apply`` goes through the active torch-function modes first,
then is reported to the ``on_apply`` callbacks of its thread (metadata collection notes which leaves a
Function took, in which shape: no op below autograd tells, its forward runs under no_grad).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import handle_torch_function

__all__ = ["functions_seen_by_modes"]

_ORIGINAL = torch.autograd.Function.__dict__["apply"]
_lock = threading.Lock()
_users = 0
OnApply = Callable[[tuple[Any, ...], dict[str, Any]], None]  # (apply's args, kwargs)
_local = threading.local()  # .on_apply: the callbacks of this thread's functions_seen_by_modes()


def _apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
    if not torch._C._is_torch_function_mode_enabled():
        for on_apply in getattr(_local, "on_apply", ()):  # (once per apply: the modes have had it)
            on_apply(args, kwargs)
        return _ORIGINAL.__func__(cls, *args, **kwargs)

    def apply(*args: Any, **kwargs: Any) -> Any:
        return _apply(cls, *args, **kwargs)

    apply.function_class = cls  # type: ignore[attr-defined]  # (how a mode tells a Function's apply)

    return handle_torch_function(apply, args, *args, **kwargs)


@contextlib.contextmanager
def functions_seen_by_modes(on_apply: OnApply | None = None) -> Iterator[None]:
    """While active (in any thread), ``Function.apply`` calls reach the torch-function modes of their thread;
    ``on_apply`` (if given) is called with each apply's arguments in this thread, before its forward runs."""
    global _users
    with _lock:
        if _users == 0:
            torch.autograd.Function.apply = classmethod(_apply)  # type: ignore[assignment, method-assign]
        _users += 1
    callbacks = getattr(_local, "on_apply", ())
    _local.on_apply = (*callbacks, on_apply) if on_apply is not None else callbacks
    try:
        yield
    finally:
        _local.on_apply = callbacks
        with _lock:
            _users -= 1
            if _users == 0:
                torch.autograd.Function.apply = _ORIGINAL  # type: ignore[method-assign]
