"""An entry is reused only for calls eager treats the same way.

One compiled function is called with every kind of argument in turn (leaf or not,
requiring grad or not, views, offsets, strides, aliasing, inference tensors ...), first
in one order, then in the other, each call compared with eager by the oracle. Wherever
two kinds share a signature, one of the passes reuses the entry compiled for the other:
a property the signature misses and the compiled program depends on shows up as a
difference from eager.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import aot
from tests.oracle import check


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _inference(tensor: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return tensor.clone()


def _no_grad_view() -> torch.Tensor:
    base = _randn(3, 4).requires_grad_()
    with torch.no_grad():
        return base.view(3, 4)


def _overlapping() -> tuple[torch.Tensor, torch.Tensor]:
    base = _randn(16)
    return base[:12].view(3, 4), base[4:16].view(3, 4)


# Each kind makes (x, y): x of shape (3, 4), y broadcastable with it.
KINDS: dict[str, Callable[[], tuple[torch.Tensor, torch.Tensor]]] = {
    "plain": lambda: (_randn(3, 4), _randn(3, 4, seed=1)),
    "leaf_requires_grad": lambda: (_randn(3, 4).requires_grad_(), _randn(3, 4, seed=1)),
    "non_leaf": lambda: (_randn(3, 4).requires_grad_() * 1, _randn(3, 4, seed=1)),
    "view_of_leaf": lambda: (_randn(5, 4).requires_grad_()[1:4], _randn(3, 4, seed=1)),
    "offset_view": lambda: (_randn(16)[4:16].view(3, 4), _randn(3, 4, seed=1)),
    "view_of_non_grad_non_leaf": lambda: ((_randn(5, 4) * 1)[1:4], _randn(3, 4, seed=1)),
    "detached_view": lambda: (_randn(3, 4).requires_grad_().detach(), _randn(3, 4, seed=1)),
    "no_grad_view": lambda: (_no_grad_view(), _randn(3, 4, seed=1)),
    "unbind_output": lambda: (_randn(2, 3, 4).requires_grad_().unbind(0)[0], _randn(3, 4, seed=1)),
    "unbind_output_of_non_leaf": lambda: ((_randn(2, 3, 4).requires_grad_() * 1).unbind(0)[1], _randn(3, 4, seed=1)),
    "transposed": lambda: (_randn(4, 3).t(), _randn(3, 4, seed=1)),
    "expanded": lambda: (_randn(1, 4).expand(3, 4), _randn(3, 4, seed=1)),
    "inference_tensor": lambda: (_inference(_randn(3, 4)), _randn(3, 4, seed=1)),
    "same_object": lambda: (lambda t: (t, t))(_randn(3, 4)),
    "overlapping": _overlapping,
    "y_view_of_x": lambda: (lambda t: (t, t.view(3, 4)))(_randn(3, 4)),
    "parameter": lambda: (torch.nn.Parameter(_randn(3, 4)), _randn(3, 4, seed=1)),
    "y_requires_grad": lambda: (_randn(3, 4), _randn(3, 4, seed=1).requires_grad_()),
}


def _write_then_view(x, y):
    x.mul_(2)
    return x + y, x.t()


def _transpose_in_place(x, y):
    x.t_()
    return x.sum(0) * y.sum()


def _returns_views(x, y):
    return x.view(-1), x[1:], y + 1


def _returns_written_input(x, y):
    x.add_(y)
    return x


def _no_grad_write(x, y):
    with torch.no_grad():
        x.mul_(2)
    return x * y


def _detached_write(x, y):
    x.detach().mul_(2)
    return x.sum() + y.sum()


def _absolute_offset(x, y):
    return x.as_strided((2, 2), (1, 1), 1) * y[:2, :2]


def _unsqueeze_in_place(x, y):
    x.unsqueeze_(0)
    return x, y * 2


def _writes_y(x, y):
    y.sub_(x)
    return x * 3


PROGRAMS = {
    fn.__name__.lstrip("_"): fn
    for fn in (
        _write_then_view,
        _transpose_in_place,
        _returns_views,
        _returns_written_input,
        _no_grad_write,
        _detached_write,
        _absolute_offset,
        _unsqueeze_in_place,
        _writes_y,
    )
}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_entries_are_reused_only_where_eager_agrees(program: str, order: str) -> None:
    fn = PROGRAMS[program]
    compiled = aot.aot_function(fn, aot.nop)
    kinds = list(KINDS) if order == "forward" else list(reversed(KINDS))
    for kind in kinds:
        try:
            check(fn, KINDS[kind], compiled_fn=compiled, calls=1)
        except AssertionError as error:
            seen = ", ".join(kinds[: kinds.index(kind)])
            raise AssertionError(f"{program} on {kind} (after {seen}): {error}") from error


def _cases() -> list[Any]:
    return [(program, kind) for program in sorted(PROGRAMS) for kind in KINDS]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(("program", "kind"), _cases())
def test_each_kind_alone(program: str, kind: str) -> None:
    # A fresh compile per kind: a difference here is the program's, not a reuse's.
    check(PROGRAMS[program], KINDS[kind], calls=1)
