"""Two column views of one storage, one of them a ``detach()`` or ``.data`` alias, one written in place (issue 10,
class 11), against eager in every caller mode.

The columns sit at nonzero storage offsets and share elements, interleave (their extents overlap, their elements do
not) or lie apart; the storage needs no grad, is a leaf requiring it, or a non-leaf made from one. Autograd's reads
of a view whose shared counter a write moved take it again by ``as_strided`` at its absolute offset: the write-back
must still cover only the written column, through the tensor eager wrote. Where a write reads, at other indices,
elements of its own column (``copy_``/``mul_`` from a column sharing elements), eager's result depends on the order
its kernel visits them: a documented refusal.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import aot
from aot.errors import UnsupportedMutationError
from tests.oracle import check_in_mode, functional_nop, mode_params

# Each column as (start, column): ``storage[start:start + 12].view(3, 4)[:, column]``.
PAIRS = {
    "sharing": ((4, 3), (0, 3)),  # elements 7, 11, 15 and 3, 7, 11
    "interleaved": ((5, 3), (3, 3)),  # 8, 12, 16 and 6, 10, 14
    "apart": ((12, 1), (1, 0)),  # 13, 17, 21 and 1, 5, 9
}
ALIASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"detach": torch.Tensor.detach, "data": lambda t: t.data}
WRITES: dict[str, Callable[[torch.Tensor, torch.Tensor], Any]] = {
    "copy_": lambda a, b: a.copy_(b),
    "mul_": lambda a, b: a.mul_(b),
    "index_fill_": lambda a, b: a.index_fill_(0, torch.tensor([1]), 2.0),
}
# Writes reading the other column elementwise: from one sharing elements, they read what they write.
READING_WRITES = ("copy_", "mul_")
GRADS = ("none", "leaf", "non_leaf")
# After the write, the columns are read; or the storage's start too, at an absolute offset (``as_strided``), which
# specializes the program on the columns' offsets in every mode (in training, autograd's reads of a column whose
# counter moved do).
READS = ("columns", "storage_start")
CASES = ["-".join(case) for case in itertools.product(PAIRS, ALIASES, ("written", "read"), WRITES, GRADS, READS)]


def _program(write: Callable[[torch.Tensor, torch.Tensor], Any], read: str) -> Callable[..., Any]:
    def written_then_read(a, b):
        write(a, b)
        start = b.as_strided((2,), (1,), 0) if read == "storage_start" else b
        return a, b * 1, sum(t.sum() for t in (a, b, start))

    return written_then_read


def _columns(pair: str, alias: str, aliased: str, grad: str) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    def make() -> tuple[torch.Tensor, torch.Tensor]:
        storage = torch.randn(24, generator=torch.Generator().manual_seed(0))
        if grad != "none":
            storage.requires_grad_()
        if grad == "non_leaf":
            storage = storage * 1
        a, b = (storage[start : start + 12].view(3, 4)[:, column] for start, column in PAIRS[pair])
        return (ALIASES[alias](a), b) if aliased == "written" else (a, ALIASES[alias](b))

    return make


@contextlib.contextmanager
def _in_mode(mode: str) -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "training":
            yield
        else:
            with torch.no_grad() if mode == "no_grad" else torch.inference_mode():
                yield


def _depends_on_visit_order(write: Callable[[torch.Tensor, torch.Tensor], Any], make: Callable[[], Any]) -> bool:
    """Whether a kernel visiting the columns' indices backwards leaves other values than one visiting forwards."""
    results = []
    for order in (range(3), reversed(range(3))):
        with torch.no_grad():
            a, b = make()
            for i in order:
                write(a[i : i + 1], b[i : i + 1])
            results.append(torch.cat([a, b]))
    return not torch.equal(*results)


@pytest.mark.parametrize(("name", "mode"), mode_params(CASES, {}))
def test_column_written_beside_aliased_column(name: str, mode: str) -> None:
    pair, alias, aliased, write, grad, read = name.split("-")
    fn, make = _program(WRITES[write], read), _columns(pair, alias, aliased, grad)
    if pair != "sharing" or write not in READING_WRITES:
        check_in_mode(fn, make, mode)
        return
    with _in_mode(mode):
        try:
            fn(*make())
        except RuntimeError:  # eager refuses first (a view of a leaf requiring grad written): so must aotfx
            check_in_mode(fn, make, mode)
            return
        assert _depends_on_visit_order(WRITES[write], make)
        with pytest.raises(UnsupportedMutationError, match="order its kernel visits"):
            aot.aot_function(fn, functional_nop)(*make())
