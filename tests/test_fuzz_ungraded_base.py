"""An input made a leaf by ``requires_grad_()`` on a view of a base requiring none: eager takes its views from
that base, so those made under no_grad require no grad, nor does what is computed from them. Collection's fakes
made such an input a root of its own, whose no_grad views require grad: outputs came back requiring grad.
Eager is the oracle (``tests/oracle.py``)."""

from __future__ import annotations

import pytest
import torch

from tests.functions import Identity, ScaledBySaved
from tests.oracle import check_in_mode, mode_params


def _slice():
    return (torch.arange(12.0)[1:5].requires_grad_(),)


def _column_view():
    return (torch.arange(12.0).view(3, 4)[:, 1:3].requires_grad_(),)


def _transposed_view():
    return (torch.arange(12.0).view(3, 4).t()[1:].requires_grad_(),)


def _with_its_base():
    base = torch.arange(12.0)
    return base[2:8].requires_grad_(), base


def _two_overlapping():
    base = torch.arange(12.0)
    return base[0:4].requires_grad_(), base[2:6].requires_grad_()


def _computed_from_no_grad_view(x, *rest):
    with torch.no_grad():
        v = x[1:3]
    return v * 2, x * 3


def _no_grad_view_returned(x, *rest):
    with torch.no_grad():
        v = x[1:]
    return v, x.sum()


def _no_grad_view_saved(x, *rest):
    with torch.no_grad():
        v = x[1:3]
    return (ScaledBySaved.apply(x * 1, v),)


def _detached_view(x, *rest):
    return x.detach()[1:] * 2, Identity.apply(x)


def _no_grad_view_written(x, *rest):
    with torch.no_grad():
        v = x[1:3]
        v.mul_(2)
    return v + 1, x * 1


def _base_written(x, base):
    with torch.no_grad():
        base.add_(1)
    return (x * 2,)


INPUTS = {
    "slice": _slice,
    "column_view": _column_view,
    "transposed_view": _transposed_view,
    "with_its_base": _with_its_base,
    "two_overlapping": _two_overlapping,
}
FUNCTIONS = {
    "computed_from_no_grad_view": _computed_from_no_grad_view,
    "no_grad_view_returned": _no_grad_view_returned,
    "no_grad_view_saved": _no_grad_view_saved,
    "detached_view": _detached_view,
    "no_grad_view_written": _no_grad_view_written,
}
PROGRAMS = {f"{fn}-{inputs}": (FUNCTIONS[fn], INPUTS[inputs]) for fn in FUNCTIONS for inputs in INPUTS}
PROGRAMS["base_written-with_its_base"] = (_base_written, _with_its_base)

_WRITTEN_NO_GRAD_VIEW = (
    "the trace's fakes of graph inputs are independent roots (a leaf stays a leaf): the input's no_grad view "
    "requires grad there, unlike eager's, and the trace refuses reading it after the in-place write (autograd's "
    "'view created in no_grad mode ... modified inplace' error) where eager computes"
)
KNOWN_WRONG = {
    **{(f"no_grad_view_written-{inputs}", "training"): _WRITTEN_NO_GRAD_VIEW for inputs in INPUTS},
}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_leaf_view_of_ungraded_base(name: str, mode: str) -> None:
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)
