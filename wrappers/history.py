"""Outputs aliasing a caller's tensor with a history no view replay gives (an autograd.Function's).

Shared by the layers that rebuild such outputs on the caller's tensors: the runtime
epilogue and the synthetic-base layer.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from meta.fresh_views import AdoptHistory
from meta.versions import uncounted
from meta.view_and_mutation import OutputAliasInfo, OutputType

__all__ = [
    "AdoptHistory",
    "GradientTo",
    "ViewWithHistory",
    "adopted",
    "history_alias",
    "made_a_leaf",
    "with_history",
]


class ViewWithHistory(torch.autograd.Function):
    """``view``, returned as an autograd.Function returns its input, with ``value``'s history."""

    @staticmethod
    def forward(ctx: Any, view: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        return view

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor]:
        return None, grad


class GradientTo(torch.autograd.Function):
    """``value`` (an alias of its memory) whose gradient goes to ``target``, as it is (summed to its shape)."""

    @staticmethod
    def forward(ctx: Any, target: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        return value.detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def history_alias(arg: torch.Tensor) -> torch.Tensor:
    """An alias of ``arg`` (no view, no leaf) whose gradient goes to ``arg``: its in-place ops are its own, and a
    counter moved on it takes no history again from a base (``arg`` a leaf view of a base needing no grad)."""
    with torch.enable_grad():
        alias: torch.Tensor = GradientTo.apply(arg, arg)  # type: ignore[no-untyped-call]
    return alias


def with_history(function: type[torch.autograd.Function], alias: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``function`` (one of the above) applied to ``alias`` and the graph's ``value``: recorded whenever the value
    has a history, as eager recorded the autograd.Function where the function ran it (an ``enable_grad`` region
    of a caller under ``no_grad`` or ``inference_mode``, where autograd.Functions record too)."""
    with torch.enable_grad() if value.requires_grad else contextlib.nullcontext():
        return function.apply(alias, value)  # type: ignore[no-any-return,no-untyped-call]


def adopted(alias: torch.Tensor, value: torch.Tensor, leaf: bool) -> torch.Tensor:
    """``alias``, the replayed tensor eager set_() onto an input's memory, with the graph's ``value``'s history.
    Eager's output is a ``leaf`` requiring grad when the object it moved had no history (the function's
    requires_grad_() after): the alias itself then requires grad, as eager's object did, no history adopted."""
    if leaf and alias.is_leaf:
        return alias if alias.requires_grad else alias.requires_grad_()
    with uncounted(alias):  # eager's write was counted already (the write-back)
        return with_history(AdoptHistory, alias, value)


def made_a_leaf(info: OutputAliasInfo[Any, Any]) -> bool:
    """A computed output that eager returns as a leaf requiring grad: a value without history (computed
    under no_grad, or from tensors needing none) the function called ``requires_grad_()`` on."""
    # (Or one eager set_() onto an input's memory, ``in_place``: that object is the leaf, no view of the input.)
    plain = (info.computed_alias is None or info.computed_alias.in_place) and not info.hidden_view
    return info.output_type == OutputType.NON_ALIAS and plain and info.is_leaf and info.is_differentiable
