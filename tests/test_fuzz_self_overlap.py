"""Fuzzer classes of writes into views whose indices share memory (seed 21): an ``unfold`` or ``as_strided``
view written in part (``index_put_``, ``masked_fill_``, ``index_fill_``, which eager allows). Each program run
in training, under ``no_grad`` and under ``inference_mode``; eager is the oracle."""

from __future__ import annotations

import pytest
import torch

from tests.oracle import check_in_mode, mode_params


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _column_of_matrix():
    return ((torch.randn(3, 8, generator=_gen()).requires_grad_() * 1)[:, 2],)


def _vector():
    return ((torch.randn(6, generator=_gen()).requires_grad_() * 1),)


def _column_to_expand():
    return ((torch.randn(3, 1, generator=_gen()).requires_grad_() * 1),)


# Class 5: a partial write into an unfold (indices sharing memory): the view's new value was scattered back
# index by index, so an element written at one index took the old value again from another index reaching it.
def _index_put_into_unfold(a0):
    v0 = a0.unfold(0, 2, 1)
    v0.index_put_((torch.tensor([0]),), torch.tensor(2.0))
    return (sum(t.real.sum() for t in (a0, v0)),)


def _index_put_into_unfold_last_row(a0):
    v0 = a0.unfold(0, 2, 1)
    v0.index_put_((torch.tensor([1]),), torch.tensor(2.0))
    return (a0 * 1, v0 * 1)


def _masked_fill_into_unfold(a0):
    v0 = a0.unfold(0, 3, 1)
    v0.masked_fill_(torch.tensor([True, False, False]), -1.0)
    return (a0 * 1, v0.sum())


def _index_fill_into_unfold(a0):
    v0 = a0.unfold(0, 3, 2)
    v0.index_fill_(1, torch.tensor([0]), 5.0)
    return (a0 * 2, v0 * 1)


def _index_put_into_overlapping_as_strided(a0):
    v0 = a0.as_strided((3, 3), (1, 1), 1)
    v0.index_put_((torch.tensor([0, 2]), torch.tensor([2, 0])), torch.tensor([4.0, 7.0]))
    return (a0 * 1, v0.sum())


def _index_put_into_unfold_of_expanded(a0):
    v0 = a0.expand(3, 4).unfold(0, 2, 1)
    v0.index_put_((torch.tensor([0]), torch.tensor([1])), torch.tensor(3.0))
    return (a0 * 1, v0 * 1)


PROGRAMS = {
    "index_put_into_unfold": (_index_put_into_unfold, _column_of_matrix),
    "index_put_into_unfold_last_row": (_index_put_into_unfold_last_row, _vector),
    "masked_fill_into_unfold": (_masked_fill_into_unfold, _vector),
    "index_fill_into_unfold": (_index_fill_into_unfold, _vector),
    "index_put_into_overlapping_as_strided": (_index_put_into_overlapping_as_strided, _vector),
    "index_put_into_unfold_of_expanded": (_index_put_into_unfold_of_expanded, _column_to_expand),
}

# Strict xfails: (name, mode) -> why it still differs.
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_self_overlapping_write(name, mode):
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)
