"""A written input no output reads: eager's backward never runs the path to it, so the leaves behind it keep
``.grad`` None; the compiled backward, run for the other outputs, computed their gradients from materialized
zero tangents (``.grad`` zeros). With an autograd.Function in the program, whose node eager's engine runs with
zeros for the outputs no gradient reached once one did, the backward graph's data flow does not tell which
tangents decide a gradient: the trace tells it from eager's autograd graph instead (the outputs whose history
reaches the input along edges a gradient was sent on). Eager is the oracle (``tests/oracle.py``)."""

from __future__ import annotations

import pytest
import torch

from tests.functions import DoublesInPlace, Identity, ScaledBySaved, TriplesGradOutput, ViewOf
from tests.oracle import check_in_mode, mode_params


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _nonleaf_and_leaf():
    g = _gen()
    return torch.randn(8, generator=g).requires_grad_() * 1, torch.randn(4, generator=g).requires_grad_()


def _view_of_nonleaf_and_leaf():
    g = _gen()
    return (torch.randn(8, generator=g).requires_grad_() * 1)[1:5], torch.randn(4, generator=g).requires_grad_()


def _overlapping_views_of_nonleaf():
    """Two overlapping inputs of a non-leaf requiring grad, and a leaf."""
    g = _gen()
    base = torch.randn(8, generator=g).requires_grad_() * 1
    return base[0:4], base[2:6], torch.randn(4, generator=g).requires_grad_()


def _disjoint_views_of_nonleaf():
    g = _gen()
    base = torch.randn(8, generator=g).requires_grad_() * 1
    return base[0:4], base[4:8], torch.randn(4, generator=g).requires_grad_()


def _written_output_unread(a, c):
    a.mul_(2)
    return (c * 2,)


def _written_out_op_unread(a, c):
    torch.sin(c.detach(), out=a[:4])
    return (c * 2,)


def _written_by_function_unread(a, c):
    a.copy_(Identity.apply(a) * 3)
    return (c * 2,)


def _written_then_read_through_detach(a, c):
    a.mul_(2)
    return (c * a.detach()[:4].sum(),)


def _one_written_other_saved(a, b, c):
    """The helper's program: one overlapping input written, the other saved (and doubled by the backward)."""
    a.mul_(2)
    return (ScaledBySaved.apply(c, b),)


def _one_written_other_saved_scaled_input(a, b, c):
    b.mul_(2)
    return (ScaledBySaved.apply(c * 1, a),)


def _written_and_read(a, c):
    """Control: the written input is read by the output, so its path is run (a real gradient)."""
    a.mul_(2)
    return (c * 2, a[:4] * c)


def _written_from_other_input(a, c):
    """Control: the write reads ``c``, whose gradient comes from the output alone (the write's is zeros)."""
    a[:4].copy_(c * 3)
    return (c * 2,)


class _TwoOutputs(torch.autograd.Function):
    """``(2x, 3x)``; its backward reads the second output's gradient alone."""

    @staticmethod
    def forward(ctx, x):
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, grad_first, grad_second):
        return grad_second * 3


def _function_output_written_unread(a, c):
    """Control: eager's engine runs the Function's node for its first output and materializes zeros for the
    second, written into ``a`` and read by no output: ``c``'s gradient is zeros, not None."""
    first, second = _TwoOutputs.apply(c)
    a.copy_(second)
    return (first,)


def _function_output_detached(a, c):
    """Control: as above, the second output returned detached."""
    first, second = _TwoOutputs.apply(c)
    return (first, second.detach())


def _doubled_in_place_unread(a, c):
    DoublesInPlace.apply(a)
    return (c * 2,)


def _unrelated_function(a, c):
    a.mul_(2)
    return (Identity.apply(c) * 2,)


def _written_then_saved(a, c):
    """The written input saved by a Function whose backward sends it no gradient."""
    a.mul_(2)
    return (ScaledBySaved.apply(c, a[:4]),)


def _written_read_by_function(a, c):
    """Control: a Function reads the written input and sends it a gradient."""
    a.mul_(2)
    return (ViewOf.apply(a[:4]) * c,)


def _grad_output_tripled(a, c):
    a.mul_(2)
    return (TriplesGradOutput.apply(c * 1),)


def _function_value_written_unread(a, c):
    a[:4].copy_(ViewOf.apply(c) * 3)
    return (c * 2,)


def _function_value_written_and_read(a, c):
    """Control: the Function's output is also returned, so its node runs (``c``'s gradient from both)."""
    v = ViewOf.apply(c)
    a[:4].copy_(v * 3)
    return (v * 2,)


def _plain_and_leaf():
    g = _gen()
    return torch.randn(4, generator=g), torch.randn(4, generator=g).requires_grad_()


PROGRAMS = {
    "written_output_unread": (_written_output_unread, _nonleaf_and_leaf),
    "written_view_unread": (_written_output_unread, _view_of_nonleaf_and_leaf),
    "written_out_op_unread": (_written_out_op_unread, _nonleaf_and_leaf),
    "written_by_function_unread": (_written_by_function_unread, _nonleaf_and_leaf),
    "written_then_read_through_detach": (_written_then_read_through_detach, _nonleaf_and_leaf),
    "one_written_other_saved": (_one_written_other_saved, _overlapping_views_of_nonleaf),
    "one_written_other_saved_disjoint": (_one_written_other_saved, _disjoint_views_of_nonleaf),
    "one_written_other_saved_scaled_input": (_one_written_other_saved_scaled_input, _overlapping_views_of_nonleaf),
    "written_and_read": (_written_and_read, _nonleaf_and_leaf),
    "written_from_other_input": (_written_from_other_input, _nonleaf_and_leaf),
    "function_output_written_unread": (_function_output_written_unread, _plain_and_leaf),
    "function_output_detached": (_function_output_detached, _plain_and_leaf),
    "doubled_in_place_unread": (_doubled_in_place_unread, _nonleaf_and_leaf),
    "unrelated_function": (_unrelated_function, _nonleaf_and_leaf),
    "unrelated_function_view": (_unrelated_function, _view_of_nonleaf_and_leaf),
    "written_then_saved": (_written_then_saved, _nonleaf_and_leaf),
    "written_read_by_function": (_written_read_by_function, _nonleaf_and_leaf),
    "grad_output_tripled": (_grad_output_tripled, _nonleaf_and_leaf),
    "function_value_written_unread": (_function_value_written_unread, _nonleaf_and_leaf),
    "function_value_written_and_read": (_function_value_written_and_read, _nonleaf_and_leaf),
}

KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_unreached_written_input(name: str, mode: str) -> None:
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)
