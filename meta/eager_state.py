"""What eager's autograd state says about a tensor or a call, read alike by meta collection and tracing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from meta.storage import (
    offset_of,
    view_root,
)
from meta.storage_set import stands_for_as_strided

__all__ = [
    "aten",
    "autograd_nodes",
    "geometry_of",
    "history_of",
    "is_leaf_safely",
    "made_by_custom_function",
    "records",
    "saved_tensor_hooks_suspended",
]


def records() -> bool:
    """Whether autograd records the ops run now: grad mode on, and not inference mode (where an
    ``enable_grad`` region turns grad mode on, yet no built-in op records)."""
    return torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


@contextlib.contextmanager
def saved_tensor_hooks_suspended() -> Iterator[None]:
    """Take the caller's saved-tensor hooks off while tracing, so they are not traced into graphs.

    They still apply at runtime, to what the compiled forward saves.
    """
    autograd = torch._C._autograd
    hooks = []
    while (top := autograd._top_saved_tensors_default_hooks(True)) is not None:
        hooks.append(top)
        autograd._pop_saved_tensors_default_hooks()
    try:
        yield
    finally:
        for pack, unpack in reversed(hooks):
            autograd._push_saved_tensors_default_hooks(pack, unpack)


def geometry_of(tensor: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    return tuple(tensor.shape), tuple(tensor.stride()), offset_of(tensor)


aten = torch.ops.aten


def is_leaf_safely(tensor: torch.Tensor) -> bool:
    try:
        return bool(tensor.is_leaf)
    except (RuntimeError, IndexError, ValueError):  # a view whose base changed geometry fails to regenerate its history
        return False


def history_of(tensor: torch.Tensor) -> Any:
    """The autograd node of a tensor's memory: its base's for a view (a view's own is regenerated)."""
    return view_root(tensor).grad_fn


def made_by_custom_function(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s history is an autograd.Function's output. Not the stand-in the fakes record a view's
    history taken again with where a real ``as_strided`` refuses the geometry: eager's is ``AsStridedBackward0``,
    a view's, as in the geometries it accepts (a view input set_() under no_grad onto a larger tensor)."""
    try:
        grad_fn = tensor.grad_fn
        return isinstance(grad_fn, torch.autograd.function.BackwardCFunction) and not stands_for_as_strided(grad_fn)
    except (RuntimeError, IndexError, ValueError):  # a view whose base changed geometry fails to regenerate its history
        return False


def autograd_nodes(roots: Iterable[Any]) -> Iterator[Any]:
    """Every node of the autograd graph behind ``roots`` (``grad_fn``s; ``None`` skipped), once each."""
    seen: set[int] = set()
    stack = [root for root in roots if root is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(next_node for next_node, _ in node.next_functions if next_node is not None)
