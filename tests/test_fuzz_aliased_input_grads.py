"""The gradient w.r.t. a view requiring grad merged with a written input into one synthetic base, where the write
went through a ``.data`` alias (its counter is its own): the view's counter stays, so eager keeps the view's own
node, and reads of it (and the caller's ``autograd.grad`` w.r.t. it after the call) go through that node. The
graph read the view from the base, taken from the root: the gradient skipped the view (``None``), and an
``as_strided`` of it reaching past its elements sent those a gradient eager's drops.

Compared with ``tests.oracle.ALIASED_INPUT_GRADS`` on, in every caller mode. Where a write moves the view's counter
(the written input a view or ``detach()`` of the same root), eager takes the view's node again after the write:
``tests/test_input_grads.py`` pins that class.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from tests import oracle
from tests.functions import Identity, ScaledBySaved
from tests.oracle import MODES, check_in_mode


@pytest.fixture(autouse=True)
def _aliased_input_grads() -> Iterator[None]:
    saved = oracle.ALIASED_INPUT_GRADS
    oracle.ALIASED_INPUT_GRADS = True
    yield
    oracle.ALIASED_INPUT_GRADS = saved


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# The written input ``a`` and the read one ``b`` of one storage: column views sharing elements or interleaved (at
# nonzero offsets), overlapping rows, a transposed block.
def _pair(storage: torch.Tensor, pair: str) -> tuple[torch.Tensor, torch.Tensor]:
    if pair == "sharing_columns":
        return storage[4:16].view(3, 4)[:, 3], storage[0:12].view(3, 4)[:, 3]
    if pair == "interleaved_columns":
        return storage[5:17].view(3, 4)[:, 3], storage[3:15].view(3, 4)[:, 3]
    if pair == "overlapping_rows":
        return storage[2:14], storage[8:20]
    return storage[0:12].view(3, 4), storage[4:16].view(3, 4).t()


PAIRS = ("sharing_columns", "interleaved_columns", "overlapping_rows", "transposed")
GRADS = ("leaf", "non_leaf")  # the storage: a leaf requiring grad, or a non-leaf made from one


def _make(pair: str, grad: str) -> Callable[[], tuple[torch.Tensor, ...]]:
    def make() -> tuple[torch.Tensor, ...]:
        storage = torch.randn(24, generator=_gen()).requires_grad_()
        if grad == "non_leaf":
            storage = storage * 1
        a, b = _pair(storage, pair)
        w = torch.randn(a.shape, generator=_gen(1)).requires_grad_()
        return a.data, b, w

    return make


WRITES: dict[str, Callable[[torch.Tensor, torch.Tensor], Any]] = {
    "add_": lambda a, w: a.add_(1),
    "copy_": lambda a, w: a.copy_(w * 2),  # a value requiring grad: the .data alias gets a history of its own
}
# ``b`` read after the write; before it; returned as a view and summed; at absolute offsets (``as_strided``)
# reaching past its elements, whose gradient eager's ``as_strided`` of a view drops.
READS = ("after", "before", "view", "as_strided")


def _program(write: str, read: str) -> Callable[..., Any]:
    def written_beside_read(a, b, w):
        before = b * 2
        WRITES[write](a, w)
        if read == "before":
            return a * 1, before
        if read == "view":
            return a * 1, b[1:], b.sum() * 3
        if read == "as_strided":
            return a * 1, b.as_strided((2,), (1,), 0) * 2, b.as_strided((3,), (2,), 17).sum()
        return a * 1, b * 2, b.sum() * a.sum()

    return written_beside_read


CASES = ["-".join(case) for case in itertools.product(PAIRS, GRADS, WRITES, READS)]


@pytest.mark.parametrize(("case", "mode"), [(case, mode) for case in CASES for mode in MODES])
def test_view_beside_data_write(case: str, mode: str) -> None:
    pair, grad, write, read = case.split("-")
    check_in_mode(_program(write, read), _make(pair, grad), mode)


# Class 20 of seed 20 (``tests/test_fuzz_gradients.py``): a ``detach()`` alias made a leaf by the program, then
# written through ``.data``, beside a transposed view of the same leaf; the view's gradient went to the leaf only.
def _requires_grad_then_data_scatter(a0, a1):
    a0.requires_grad_()
    a0.data.scatter_(0, torch.zeros((1,), dtype=torch.long), 2.0)
    return (a0, sum(t.real.sum() for t in (a0, a1)))


def _detached_and_view_of_leaf() -> tuple[torch.Tensor, torch.Tensor]:
    s0 = torch.randn(24, generator=_gen()).requires_grad_()
    return (s0[7:15:2].detach(), s0[5:17].view(4, 3).t())


def _detached_and_view_of_non_leaf() -> tuple[torch.Tensor, torch.Tensor]:
    s0 = torch.randn(24, generator=_gen()).requires_grad_() * 1
    return (s0[7:15:2].detach(), s0[5:17].view(4, 3).t())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("make", [_detached_and_view_of_leaf, _detached_and_view_of_non_leaf], ids=["leaf", "non_leaf"])
def test_view_beside_member_made_a_leaf(make: Callable[[], Any], mode: str) -> None:
    check_in_mode(_requires_grad_then_data_scatter, make, mode)


# The view ``b`` beside the written ``.data`` alias, used otherwise: written through its own ``.data`` too (its
# counter still stays); written through ``detach()`` (it moves: eager's node is taken again, not compared); returned
# itself; passed to autograd.Functions; read in a no_grad region.
def _b_data_written(a, b):
    a.add_(1)
    b.data.mul_(2)
    return a * 1, b * 3


def _b_detach_written(a, b):
    a.add_(1)
    y = b * 3
    b.detach().mul_(2)
    return a * 1, y, b * 1


def _b_returned(a, b):
    a.add_(1)
    return a, b, b * a


def _b_through_functions(a, b):
    a.add_(1)
    return a * 1, ScaledBySaved.apply(b, b.detach() * 1), Identity.apply(b)


def _b_read_under_no_grad(a, b):
    a.add_(1)
    with torch.no_grad():
        y = b * 2
    return a * 1, y, b.exp()


USES = {
    "b_data_written": _b_data_written,
    "b_detach_written": _b_detach_written,
    "b_returned": _b_returned,
    "b_through_functions": _b_through_functions,
    "b_read_under_no_grad": _b_read_under_no_grad,
}


def _overlapping_rows(grad: str) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    def make() -> tuple[torch.Tensor, torch.Tensor]:
        storage = torch.randn(24, generator=_gen()).requires_grad_()
        if grad == "non_leaf":
            storage = storage * 1
        return storage.data[0:12], storage[6:18]

    return make


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("grad", GRADS)
@pytest.mark.parametrize("name", sorted(USES))
def test_view_used_beside_data_write(name: str, grad: str, mode: str) -> None:
    check_in_mode(USES[name], _overlapping_rows(grad), mode)
