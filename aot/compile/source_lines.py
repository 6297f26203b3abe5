"""The user source line of each traced op: recorded while tracing, read back for reports and errors.

:func:`recording_source_lines` wraps a ``make_fx`` call: every node it makes gets
``node.meta["stack_trace"]`` listing the frames of the traced function (not torch's, not
aotfx's) that issued the torch call it came from; :func:`source_line` reads the innermost
one back as ``file:line in function: code``.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import sysconfig
import threading
import traceback
from collections.abc import Iterator
from types import FrameType, GetSetDescriptorType, MethodDescriptorType
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx
import torch.fx.traceback as fx_traceback
from torch.overrides import TorchFunctionMode

if TYPE_CHECKING:
    pass


__all__ = ["recording_source_lines", "source_line"]


_PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Frames in these directories are never "the user's line": torch, the standard library, aotfx itself.
_LIBRARY_DIRS = tuple(
    os.path.join(directory, "")
    for directory in (
        os.path.dirname(torch.__file__),
        sysconfig.get_paths()["stdlib"],
        *(os.path.join(_PROJECT, package) for package in ("aot", "meta", "wrappers")),
    )
)
_recording = threading.local()


_USER_FILES = (os.path.join(_PROJECT, "aot", "demo.py"),)  # the demo model is user code


# Whether a file's frames are the user's, by file name: every traced torch call walks the whole stack, and
# the same few files come back each time.
_USER_BY_FILE: dict[str, bool] = {}


def _is_user(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    if filename.startswith("<"):
        # Code without a file: the user's (``python -c``, exec, IPython) runs in a module namespace;
        # make_fx's generated wrappers run with bare globals; frozen modules are the import system.
        # (Decided per frame: by its globals, not its name.)
        module = frame.f_globals.get("__name__")
        return isinstance(module, str) and not module.startswith("torch") and not filename.startswith("<frozen")
    user = _USER_BY_FILE[filename] = not filename.startswith(_LIBRARY_DIRS) or filename in _USER_FILES
    return user


# Tensor attributes whose read dispatches no op that could make a node (``device`` dispatches ``prim.device``, which
# make_fx runs without one), and methods likewise: the modes' own checks read them around every traced call, and
# the stack walk was most of their cost.
_NO_NODE_ATTRIBUTES = frozenset(
    {"requires_grad", "is_leaf", "grad_fn", "_base", "_version", "dtype", "device", "is_quantized", "is_sparse"}
)
_NO_NODE_METHODS = frozenset({"_is_view"})


def _makes_no_node(func: Any) -> bool:
    owner = getattr(func, "__self__", None)
    if type(owner) is GetSetDescriptorType:
        return (
            func.__name__ == "__get__"
            and owner.__objclass__ is torch._C.TensorBase
            and owner.__name__ in _NO_NODE_ATTRIBUTES
        )
    return (
        type(func) is MethodDescriptorType
        and func.__objclass__ is torch._C.TensorBase
        and func.__name__ in _NO_NODE_METHODS
    )


class _SourceLines(TorchFunctionMode):
    """Sets the fx stack trace to the user frames of each torch call while it is traced."""

    def __init__(self, outer: set[FrameType]) -> None:
        super().__init__()
        self.outer = outer
        # Formatted traces by their (code, line) pairs: a loop issues the same lines again and again, and
        # formatting reads (and stats) the source files.
        self.formatted: dict[tuple[tuple[Any, int], ...], list[str]] = {}

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if _makes_no_node(func):
            return func(*args, **(kwargs or {}))
        user: list[tuple[FrameType, int]] = []
        frame = sys._getframe(1)
        by_file = _USER_BY_FILE
        while frame is not None and frame not in self.outer:
            known = by_file.get(frame.f_code.co_filename)
            if known if known is not None else _is_user(frame):
                user.append((frame, frame.f_lineno))
            frame = frame.f_back  # type: ignore[assignment]
        previous = fx_traceback.get_current_meta().get("stack_trace")
        key = tuple((frame.f_code, line) for frame, line in user)
        formatted = self.formatted.get(key)
        if formatted is None:
            formatted = self.formatted[key] = traceback.StackSummary.extract(reversed(user)).format()
        fx_traceback.set_stack_trace(formatted)
        try:
            return func(*args, **(kwargs or {}))
        finally:
            fx_traceback.set_stack_trace([previous] if previous else [])


@contextlib.contextmanager
def recording_source_lines() -> Iterator[None]:
    """While active, ``make_fx`` records on each node the user code lines that produced it.

    Wrap a ``make_fx`` call in it: every node gets ``node.meta["stack_trace"]`` listing the
    frames of the traced function (not torch's, not aotfx's, not the caller's) that issued
    the torch call it came from. Nodes the autograd engine makes (the backward) get none.
    Re-entering it is a no-op.
    """
    if getattr(_recording, "active", False):
        yield
        return
    outer: set[FrameType] = set()
    frame: FrameType | None = sys._getframe(0)
    while frame is not None:
        outer.add(frame)
        frame = frame.f_back
    _recording.active = True
    try:
        with fx_traceback.preserve_node_meta(), _SourceLines(outer):
            yield
    finally:
        _recording.active = False


_FRAME = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>[^\n]+)\n(?:(?!\s*File ")(?P<code>[^\n]*))?'
)


def source_line(node: fx.Node | None) -> str | None:
    """``file:line in function: code`` of the innermost user frame in the node's stack trace, if recorded."""
    trace = None if node is None else node.meta.get("stack_trace")
    if not trace:
        return None
    frames = list(_FRAME.finditer(trace))
    if not frames:
        return None
    last = frames[-1]
    code = (last["code"] or "").strip()
    file = "cell" if "ipykernel_" in last["file"] else os.path.basename(last["file"])  # a notebook cell
    where = f"{file}:{last['line']} in {last['fn'].strip()}"
    return f"{where}: {code}" if code else where
