"""An input made a leaf by ``requires_grad_()`` on a view of a base requiring none: eager takes its views from
that base, so those made under no_grad require no grad, nor does what is computed from them. Collection's fakes
made such an input a root of its own, whose no_grad views require grad: outputs came back requiring grad.
The trace's graph inputs, the copies of written inputs and the members of a synthetic base were values whose
views follow them: a no_grad view written then read raised autograd's 'view created in no_grad mode' error,
and a view taken in grad mode kept its history to the input after a write (eager's is taken again from the
base, none); the function now gets a leaf made as eager's in their place (``meta.stand_ins``). Returned, such a
view was described as a non-alias requiring no grad: autograd on the collection's fakes fails to take its history
again, which collection now runs under ``FreshViews`` for.

Merged with its base (the base written), the input's synthetic base was a view of it, whose history autograd
takes again from the base needing none once the counter moves (set early, before the compiled call): its
gradient came back None. Eager is the oracle (``tests/oracle.py``)."""

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


def _column_with_its_base():
    base = torch.arange(12.0)
    return base.view(3, 4)[:, 1:3].requires_grad_(), base


def _transposed_with_its_base():
    base = torch.arange(12.0).view(3, 4)
    return base.t()[1:].requires_grad_(), base


def _grad_mode_view_then_written(x, *rest):
    """Eager takes the view's history again from the base requiring none after the write: none reaches ``x``."""
    v = x[1:3]
    with torch.no_grad():
        x.mul_(2)
    return v * 1, x * 1


def _grad_mode_view_written(x, *rest):
    v = x[1:3]
    with torch.no_grad():
        v.mul_(2)
    return v * 1, x * 1


def _grad_mode_view_returned_then_written(x, *rest):
    """Eager's view requires grad, its history taken again from the base after the write (no edge)."""
    v = x[1:]
    with torch.no_grad():
        x.mul_(2)
    return v, x * 1


def _no_grad_view_written_in_grad_mode(x, *rest):
    with torch.no_grad():
        v = x[1:3]
    v.mul_(2)
    return v + 1, x * 1


def _no_grad_view_written_read_with_input(x, *rest):
    with torch.no_grad():
        v = x[1:3]
        v.add_(1)
    return (v * x[1:3],)


def _written_through_detach_then_saved(x, *rest):
    x.detach()[1:2].mul_(2)
    return (x * x,)


def _base_written(x, base):
    with torch.no_grad():
        base.add_(1)
    return (x * 2,)


def _base_written_in_grad_mode(x, base):
    base.add_(1)
    return (x * 2,)


def _read_then_base_written(x, base):
    y = x * 2
    with torch.no_grad():
        base.mul_(3)
    return y, x.sum()


def _saved_then_base_written(x, base):
    """Eager's backward refuses: ``x * x`` saved ``x``, written since."""
    y = x * x
    with torch.no_grad():
        base.add_(1)
    return (y,)


def _part_of_base_written(x, base):
    with torch.no_grad():
        base.view(-1)[3:5].mul_(2)
    return (x * x,)


def _leaf_written_base_read(x, base):
    with torch.no_grad():
        x.mul_(2)
    return x * 3, base.sum()


def _base_first_written(base, x):
    return _base_written(x, base)


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
    "grad_mode_view_then_written": _grad_mode_view_then_written,
    "grad_mode_view_written": _grad_mode_view_written,
    "grad_mode_view_returned_then_written": _grad_mode_view_returned_then_written,
    "no_grad_view_written_in_grad_mode": _no_grad_view_written_in_grad_mode,
    "no_grad_view_written_read_with_input": _no_grad_view_written_read_with_input,
    "written_through_detach_then_saved": _written_through_detach_then_saved,
}
PROGRAMS = {f"{fn}-{inputs}": (FUNCTIONS[fn], INPUTS[inputs]) for fn in FUNCTIONS for inputs in INPUTS}
WITH_BASE = {
    "with_its_base": _with_its_base,
    "column_with_its_base": _column_with_its_base,
    "transposed_with_its_base": _transposed_with_its_base,
}
ON_BASE = {
    "base_written": _base_written,
    "base_written_in_grad_mode": _base_written_in_grad_mode,
    "read_then_base_written": _read_then_base_written,
    "saved_then_base_written": _saved_then_base_written,
    "part_of_base_written": _part_of_base_written,
    "leaf_written_base_read": _leaf_written_base_read,
}
PROGRAMS.update({f"{fn}-{inputs}": (ON_BASE[fn], WITH_BASE[inputs]) for fn in ON_BASE for inputs in WITH_BASE})
PROGRAMS["base_first_written"] = (_base_first_written, lambda: tuple(reversed(_with_its_base())))

KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_leaf_view_of_ungraded_base(name: str, mode: str) -> None:
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)
