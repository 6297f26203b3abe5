"""Fuzzer class "grad of autograd leaf N" (seed 28, program 5675): an expanded view of a non-leaf requiring grad,
overlapping another view of it that the function writes in grad mode, while the expanded one is written through
an alias autograd does not see (``.data``, ``detach()``, under ``no_grad``), then returned.

Eager's autograd: the recorded write through the other view puts a ``CopySlices`` on the shared base; the
hidden write changes values only. The expanded input has no history of its own in between, so its ``grad_fn``,
asked after the call, is taken again from the base's (``AsStridedBackward0`` over the ``CopySlices``), and its
gradient passes through the other view's write. The synthetic-base layer writes both members back; the expanded
one, which ``copy_`` refuses, once per memory element, through a narrowed view. That view was taken of the
expanded input, which asked it for its history at the counter set early to eager's final value: the counters put
back to that value after the write-back left the expanded input with its history from before both writes, and its
gradient skipped the other view's write. Each program runs in every mode against eager (``tests.oracle``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from tests.oracle import check_in_mode, mode_params


def _views(kind: str) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    """A (2, 3) view of elements 2..4 of a non-leaf requiring grad (``kind``: expanded along rows, along
    columns then transposed, a plain unsqueeze; or expanded from a detached leaf), and a (3, 4) transposed view of
    elements 2..13 of the non-leaf."""

    def make() -> tuple[torch.Tensor, torch.Tensor]:
        l1 = torch.randn(24, generator=torch.Generator().manual_seed(0)).requires_grad_()
        s1 = l1 * 1
        if kind == "expanded":
            a0 = s1[2:5].expand(2, 3)
        elif kind == "expanded_columns":
            a0 = s1[2:5].unsqueeze(1).expand(3, 2).t()
        elif kind == "plain":
            a0 = s1[2:5].unsqueeze(0)
        else:  # "expanded_detached_leaf": its memory shared, its history not
            a0 = l1.detach()[2:5].expand(2, 3)
        return (a0, s1[2:14].view(4, 3).t())

    return make


def _data_write(a0, a1):
    a1.mul_(2)
    a0.select(0, 0).data.neg_()
    return (a0,)


def _detach_write(a0, a1):
    a1.mul_(2)
    a0.select(0, 0).detach().neg_()
    return (a0,)


def _no_grad_write(a0, a1):
    a1.mul_(2)
    with torch.no_grad():
        a0.select(0, 0).neg_()
    return (a0,)


def _data_write_first(a0, a1):
    a0.select(0, 0).data.neg_()
    a1.mul_(2)
    return (a0, a1)


def _whole_data_write(a0, a1):
    a1.mul_(2)
    a0.data.neg_()
    return (a0,)


def _data_write_views_returned(a0, a1):
    a1.mul_(2)
    a0.select(0, 0).data.neg_()
    return (a0[1], a0.t())


def _data_write_read_after(a0, a1):
    a1.mul_(2)
    a0.select(0, 0).data.mul_(3)
    return (a0 * a0, a1.sum())


def _fuzzer_program(a0, a1):
    # seed 28, program 5675: the other view's write saved for the matmul's backward
    a1.index_fill_(-1, torch.tensor([0]), 2.0)
    v0 = a1 @ a1.mT
    v1 = a0.select(0, 0)
    v1.data.neg_()
    return (a0, sum(t.real.sum() for t in (a0, a1, v0, v1)))


_FUNCTIONS = {
    "data_write": _data_write,
    "detach_write": _detach_write,
    "no_grad_write": _no_grad_write,
    "data_write_first": _data_write_first,
    "whole_data_write": _whole_data_write,
    "data_write_views_returned": _data_write_views_returned,
    "data_write_read_after": _data_write_read_after,
    "fuzzer_program": _fuzzer_program,
}
_KINDS = ("expanded", "expanded_columns", "plain", "expanded_detached_leaf")

PROGRAMS = {f"{name}_{kind}": (fn, _views(kind)) for name, fn in _FUNCTIONS.items() for kind in _KINDS}

KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_expanded_member_written_back(name: str, mode: str) -> None:
    check_in_mode(*PROGRAMS[name], mode)
