"""Leaves standing for a value: an input eager has as a leaf view of a base requiring none.

A caller's ``requires_grad_()`` on a view of a base requiring none makes a leaf whose
views follow that base, not the leaf: those taken under no_grad require no grad and may
be read after a write, and every view's history is taken again from that base (none)
once the memory is written. A stage handing the function a value in its place (a graph
input, a copy to write, a member of a synthetic base) has that value's views follow the
value, which requires grad. :func:`leaf_standing_for` gives the function a leaf made as
eager's (a view of a detached alias of the value's memory, made to require grad) instead;
the joint trace, which collects them (:func:`collecting_stand_ins`), sends each one's
gradient on through the value's history.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

__all__ = ["collecting_stand_ins", "leaf_standing_for"]

_COLLECTED: contextvars.ContextVar[list[tuple[torch.Tensor, torch.Tensor]] | None] = contextvars.ContextVar(
    "stand_ins", default=None
)


def leaf_standing_for(value: torch.Tensor) -> torch.Tensor:
    """A leaf requiring grad on ``value``'s memory, in its geometry, a view of a base requiring none (sharing its
    version counter), made in grad mode as eager's caller made its view; collected with ``value``, if collecting."""
    with torch.enable_grad():
        leaf = value.detach().as_strided(value.shape, value.stride(), value.storage_offset())
    leaf.requires_grad_()
    collected = _COLLECTED.get()
    if collected is not None:
        collected.append((leaf, value))
    return leaf


@contextlib.contextmanager
def collecting_stand_ins() -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
    """The (leaf, value) pairs :func:`leaf_standing_for` makes inside, in the order made (a value may be computed
    from leaves made before, never after)."""
    collected: list[tuple[torch.Tensor, torch.Tensor]] = []
    token = _COLLECTED.set(collected)
    try:
        yield collected
    finally:
        _COLLECTED.reset(token)
