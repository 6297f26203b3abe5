"""The oracle's own checks cannot pass vacuously: a compiled function that differs from eager only where a
check looks (here, memory a backward writes outside an input's elements) fails it, naming what differs."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.oracle import check


def _writer(outside: bool) -> type[torch.autograd.Function]:
    """Doubles ``x``; its backward writes the element just past the saved ``x`` in its storage (``outside``)
    or nothing there: eager's program and a wrong compilation of it, equal everywhere else."""

    class WritesPastSaved(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            (x,) = ctx.saved_tensors
            if outside:
                with torch.no_grad():
                    x.as_strided((1,), (1,), x.storage_offset() + x.numel()).add_(1)
            return grad * 2

    return WritesPastSaved


EAGER, WRONG = _writer(True), _writer(False)


def _view_of_leaf() -> tuple[torch.Tensor]:
    return (torch.arange(6.0).requires_grad_()[1:4],)


def test_backward_write_outside_an_input_is_compared() -> None:
    def eager(x: torch.Tensor) -> torch.Tensor:
        return EAGER.apply(x)

    def wrong(x: torch.Tensor) -> torch.Tensor:
        return WRONG.apply(x)

    check(eager, _view_of_leaf, compiled_fn=wrong, calls=1)  # the shallow check does not look there
    with pytest.raises(AssertionError, match="storage of input 0 after the backward"):
        check(eager, _view_of_leaf, compiled_fn=wrong, calls=1, deep=True)
    check(eager, _view_of_leaf, compiled_fn=eager, calls=1, deep=True)


def test_backward_write_to_a_leaf_behind_an_input_is_compared() -> None:
    """A non-leaf input has storage of its own: the leaf behind it is compared after the backward too."""

    def make() -> tuple[torch.Tensor]:
        return (torch.arange(6.0).requires_grad_() * 1,)

    def writes_leaf(outside: bool) -> Any:
        class WritesLeaf(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
                ctx.leaf = x.grad_fn.next_functions[0][0].variable
                return x * 2

            @staticmethod
            def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
                if outside:
                    with torch.no_grad():
                        ctx.leaf[0] += 1
                return grad * 2

        return lambda x: WritesLeaf.apply(x)

    eager, wrong = writes_leaf(True), writes_leaf(False)
    check(eager, make, compiled_fn=wrong, calls=1)
    with pytest.raises(AssertionError, match="storage of autograd leaf 0 after the backward"):
        check(eager, make, compiled_fn=wrong, calls=1, deep=True)
    check(eager, make, compiled_fn=eager, calls=1, deep=True)
