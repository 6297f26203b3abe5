"""The gradient w.r.t. a written non-leaf input after the call (``retain_grad()`` / ``autograd.grad``), against
eager: it flows through every value the program computed from the input's final value, so the compiled forward is
cut there (``aot.compile.written_split``). Each program in every mode, the oracle comparing written inputs'
gradients (``tests.oracle.WRITTEN_INPUT_GRADS``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from tests import oracle
from tests.functions import Identity
from tests.oracle import check_in_mode, mode_params


def _leaf(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).requires_grad_()


def _two() -> tuple[torch.Tensor, torch.Tensor]:
    return _leaf(2, 3) * 1, _leaf(2, 3, seed=1) * 2


def _view_input() -> tuple[torch.Tensor, torch.Tensor]:
    return (_leaf(4, 3) * 1)[1:3], _leaf(2, 3, seed=1) * 2


def _transposed_input() -> tuple[torch.Tensor, torch.Tensor]:
    return (_leaf(3, 2) * 1).t(), _leaf(2, 3, seed=1) * 2


def _plain_and_weight() -> tuple[torch.Tensor, torch.Tensor]:
    # x requires no grad: the write with w requiring grad gives it a history.
    return torch.randn(2, 3, generator=torch.Generator().manual_seed(2)), _leaf(2, 3, seed=1) * 2


def _through_view(x: torch.Tensor, y: torch.Tensor) -> Any:
    x[0].mul_(3)
    return x + y


def _index_put(x: torch.Tensor, y: torch.Tensor) -> Any:
    x.index_put_((torch.tensor([1]),), y[0] * 2)
    return x * y, x.sum()


def _read_before_and_after(x: torch.Tensor, y: torch.Tensor) -> Any:
    before = x * 3
    x.add_(y)
    return before + x, x.exp()


def _several_writes(x: torch.Tensor, y: torch.Tensor) -> Any:
    x.mul_(2)
    middle = x + 1
    x.add_(y)
    return middle, x * y


def _data_write_under_no_grad(x: torch.Tensor, y: torch.Tensor) -> Any:
    with torch.no_grad():
        x.mul_(2)
    return x + y


def _data_attribute_write(x: torch.Tensor, y: torch.Tensor) -> Any:
    x.data.mul_(2)
    return x * y


def _both_written(x: torch.Tensor, y: torch.Tensor) -> Any:
    x.mul_(2)
    y.add_(1)
    return x * y, y.t()


def _saved_then_written(x: torch.Tensor, y: torch.Tensor) -> Any:
    saved = x * x  # eager's backward raises: x was saved, then written
    x.mul_(2)
    return saved + x


def _write_reads_other_written(x: torch.Tensor, y: torch.Tensor) -> Any:
    x.mul_(2)
    y.add_(x)  # reads x's final value: a stage after x's write, before y's
    return x * y


def _views_of_a_value_read_after(x: torch.Tensor, y: torch.Tensor) -> Any:
    x.mul_(2)
    z = x + y
    return z, z.view(-1), z[0]


def _diagonal_written(x: torch.Tensor, y: torch.Tensor) -> Any:
    x.diagonal().add_(1)
    return x @ y.t()


# name -> (program, inputs)
PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[], Any]]] = {
    "mul_": (lambda x, y: (x.mul_(2), x + y, x.t())[1:], _two),
    "copy_": (lambda x, y: (x.copy_(y * 2), x.sin())[1], _two),
    "index_put_": (_index_put, _two),
    "through_a_view": (_through_view, _two),
    "read_before_and_after": (_read_before_and_after, _two),
    "several_writes": (_several_writes, _two),
    "no_view_output": (lambda x, y: (x.mul_(2), x * y)[1], _two),
    "returned_input": (lambda x, y: (x.mul_(2), x, x * y)[1:], _two),
    "view_input": (lambda x, y: (x.mul_(2), x + y, x.t())[1:], _view_input),
    "transposed_input": (lambda x, y: (x.add_(1), x * y)[1], _transposed_input),
    "made_to_require_grad": (lambda x, w: (x.mul_(w), x * 2 + w)[1], _plain_and_weight),
    "under_no_grad": (_data_write_under_no_grad, _two),
    "data_attribute": (_data_attribute_write, _two),
    "both_written": (_both_written, _two),
    "saved_then_written": (_saved_then_written, _two),
    "write_reads_other_written": (_write_reads_other_written, _two),
    "views_of_a_value_read_after": (_views_of_a_value_read_after, _two),
    "expanded_read_after": (lambda x, y: (x.mul_(2), x.unsqueeze(0).expand(2, 2, 3) * 1, y)[1:], _two),
    "copy_other_dtype": (lambda x, y: (x.copy_(y.double()), x * 2)[1], _two),
    "zero_": (lambda x, y: (x.zero_(), x + y)[1], _two),
    "fill_": (lambda x, y: (x.fill_(3.0), x * y)[1], _two),
    "clamp_": (lambda x, y: (x.clamp_(min=0), x * y, x.relu())[1:], _two),
    "diagonal_written": (_diagonal_written, _two),
    "detach_alias_written": (lambda x, y: (x.detach().mul_(2), x * y)[1], _two),
    "function_reads_after": (lambda x, y: (x.mul_(2), Identity.apply(x * 1) + y)[1], _two),
}


@pytest.fixture
def written_input_grads() -> Iterator[None]:
    saved = oracle.WRITTEN_INPUT_GRADS
    oracle.WRITTEN_INPUT_GRADS = True
    yield
    oracle.WRITTEN_INPUT_GRADS = saved


_NOT_YET = {
    ("view_input", "training"): "a written view input is merged into a synthetic base, whose layer writes the new "
    "value back into the caller's view after the call: the second stage would have to take that view object (the "
    "aliased-input class of tests/test_input_grads.py), so the forward is not cut and x + y reads the view before "
    "the write",
    ("function_reads_after", "training"): "a program with an autograd.Function is not cut: each stage is "
    "differentiated as a graph of its own, which would lose the Function's backward",
}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, _NOT_YET))
def test_written_input_grads(name: str, mode: str, written_input_grads: None) -> None:
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)


# Seed 31, program 982: an input requiring grad written where autograd does not see it (under no_grad, through
# detach()) keeps its history in eager, the gradient passing through the write unchanged; with another input's
# recorded write read after it, the forward was cut and the stage, differentiated apart from eager's history,
# gave the first input's leaf no gradient (None).
def _hidden_and_recorded_writes(hide: str) -> Callable[..., Any]:
    def program(x: torch.Tensor, y: torch.Tensor) -> Any:
        y.index_fill_(-1, torch.tensor([0]), 2.0)
        if hide == "no_grad":
            with torch.no_grad():
                x.fill_(2.0)
        elif hide == "detach":
            x.detach().sigmoid_()
        else:
            x.data.mul_(3)
        return (x @ x.mT, sum(t.sum() for t in (x, y, x[..., ::2], x @ x.mT)))

    return program


def _transposed_leaf_and_non_leaf() -> tuple[torch.Tensor, torch.Tensor]:
    return _leaf(3, 3).t(), _leaf(2, 2, seed=1) * 1


def _mixed_writes(x: torch.Tensor) -> Any:
    with torch.no_grad():
        x.fill_(2.0)
    x.mul_(3)
    return x * x


HIDDEN_WRITE_PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[], Any]]] = {
    **{
        f"hidden_{h}": (_hidden_and_recorded_writes(h), _transposed_leaf_and_non_leaf)
        for h in ("no_grad", "detach", "data")
    },
    **{f"hidden_{h}_non_leaf": (_hidden_and_recorded_writes(h), _two) for h in ("no_grad", "detach")},
    "hidden_then_recorded_same_input": (_mixed_writes, lambda: (_leaf(2, 3) * 1,)),
}

# (The same input written unseen, then recorded: written_split does not cut there, ``some_mutation_unrecorded``.)
_HIDDEN_NOT_YET: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(HIDDEN_WRITE_PROGRAMS, _HIDDEN_NOT_YET))
def test_hidden_write_then_other_input_written(name: str, mode: str) -> None:
    fn, make_args = HIDDEN_WRITE_PROGRAMS[name]
    check_in_mode(fn, make_args, mode)


_HIDDEN_WRITE_CUT_REFUSED = (
    "the forward is not cut where an input requiring grad is written unseen by autograd (its stage would lose "
    "eager's history through that write, giving its leaf no gradient), so the other input's gradient after the "
    "call does not flow through what read its final value: cutting needs the unseen write's new value to keep "
    "the input's derivative in the stage (a straight-through value), not done yet"
)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=_HIDDEN_WRITE_CUT_REFUSED))
        for name in sorted(HIDDEN_WRITE_PROGRAMS)
        if name != "hidden_then_recorded_same_input"
    ],
)
def test_hidden_write_then_other_input_written_grads(name: str, written_input_grads: None) -> None:
    fn, make_args = HIDDEN_WRITE_PROGRAMS[name]
    check_in_mode(fn, make_args, "training")
