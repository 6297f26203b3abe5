"""Fuzzer class "grad of autograd leaf N" (seed 21 program 1523's kin): an input that is no view, requiring grad,
``as_strided_()`` in grad mode past the elements it spanned, then written, while another view of it is read: an
input that is a view of it, or a view returned that was taken before its last change.

Eager's write extends the input's own history, on top of the recorded ``as_strided_()`` steps; a view of it read
after takes its history again from it by strides (the version moved), through that write and those steps. The
function gets a stand-in that is no view (a write through a view of the input would scatter by the final
geometry's strides past the steps); an input that is a view of it is taken again from that stand-in, and a view
returned is replayed on the caller's tensor in its final geometry, from the geometry eager took it in. Each
program runs in every mode against eager (``tests.oracle``).
"""

from __future__ import annotations

import pytest
import torch

from tests.functions import DoublesInPlace
from tests.oracle import check_in_mode, mode_params


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _non_leaf_4x6():
    return (torch.randn(4, 6, generator=_gen()).requires_grad_() * 1,)


def _non_leaf_and_its_rows():
    x = torch.randn(4, 6, generator=_gen()).requires_grad_() * 1
    return (x, x[1:])


def _non_leaf_and_its_transpose():
    x = torch.randn(4, 6, generator=_gen()).requires_grad_() * 1
    return (x, x.t())


def _non_leaf_and_its_diagonal():
    x = torch.randn(4, 6, generator=_gen()).requires_grad_() * 1
    return (x, x.diagonal())


def _non_leaf_and_its_unsqueeze():
    x = torch.randn(4, 6, generator=_gen()).requires_grad_() * 1
    return (x, x.unsqueeze(0))


def _non_leaf_and_two_views():
    x = torch.randn(4, 6, generator=_gen()).requires_grad_() * 1
    return (x, x[:, 1], x.view(24)[5:9])


# An input that is a view of the written one.
def _view_input_read_after(a0, a1):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    a0.mul_(2)
    return (a0.sum(), a1 * 1)


def _view_input_read_before_and_after(a0, a1):
    before = a1 * 3
    a0.as_strided_((2,), (2,), 9)
    a0.add_(1)
    return (before, a0 * 1, a1.sum())


def _view_input_written_after(a0, a1):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    a0.mul_(2)
    a1.mul_(3)
    return (a0 * 1, a1 * 1)


def _transposed_input_read_after_doubled(a0, a1):
    a0.as_strided_((2, 2), (6, 1), 7)
    DoublesInPlace.apply(a0)
    return (a0.sum(), a1[2] * 2)


def _two_view_inputs_read_after(a0, a1, a2):
    a0.as_strided_((3,), (2,), 6)
    a0.mul_(a0.detach())
    return (a1 * 1, a2 * 2, a0 * 3)


def _view_input_returned(a0, a1):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    a0.mul_(2)
    return (a0.sum(), a1)


def _view_input_doubled_after(a0, a1):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    DoublesInPlace.apply(a0)
    return (a0.sum(), a1 * 2)


def _view_input_read_after_write_under_no_grad(a0, a1):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    a0.mul_(2)
    with torch.no_grad():
        a0.add_(1)
    return (a0.sum(), a1 * 2)


def _view_input_written_first(a0, a1):
    a1.mul_(2)
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    a0.mul_(2)
    return (a0.sum(), a1 * 2)


def _view_input_after_t_(a0, a1):
    # A change of shape alone keeps the view stand-in (``_elements_reached_change``).
    a0.t_()
    a0.mul_(2)
    return (a0.sum(), a1 * 2)


def _view_input_and_view_returned(a0, a1):
    v = a0[2]
    a0.as_strided_((3,), (2,), 5)
    a0.add_(1)
    return (v, a1, a0 * 2)


# A view returned, taken before the last change (or before any).
def _view_between_changes(a0):
    a0.as_strided_((1,), (1,), 8)
    v = a0[0:]
    a0.as_strided_((3,), (1,), 7)
    a0.mul_(2)
    return (a0.sum(), v)


def _view_before_changes(a0):
    v = a0[1:3]
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    a0.mul_(2)
    return (a0.sum(), v)


def _transpose_between_changes(a0):
    a0.as_strided_((2, 3), (6, 1), 7)
    v = a0.t()
    a0.as_strided_((3,), (1,), 8)
    a0.add_(1)
    return (a0 * 2, v)


def _view_between_writes_and_changes(a0):
    a0.as_strided_((2, 2), (6, 1), 8)
    a0.mul_(2)
    v = a0[1]
    a0.as_strided_((4,), (1,), 6)
    a0.mul_(3)
    return (a0.sum(), v, v * 2)


def _views_before_and_between(a0):
    u = a0[2]
    a0.as_strided_((2,), (3,), 9)
    v = a0.unsqueeze(0)
    a0.as_strided_((3,), (1,), 8)
    a0.sub_(1)
    return (u, v, a0)


def _view_between_with_view_input(a0, a1):
    a0.as_strided_((1,), (1,), 8)
    v = a0[0:]
    a0.as_strided_((3,), (1,), 7)
    a0.mul_(2)
    return (a0.sum(), v, a1 * 1)


PROGRAMS = {
    "view_input_read_after": (_view_input_read_after, _non_leaf_and_its_rows),
    "view_input_read_before_and_after": (_view_input_read_before_and_after, _non_leaf_and_its_rows),
    "view_input_written_after": (_view_input_written_after, _non_leaf_and_its_rows),
    "transposed_input_read_after_doubled": (_transposed_input_read_after_doubled, _non_leaf_and_its_transpose),
    "two_view_inputs_read_after": (_two_view_inputs_read_after, _non_leaf_and_two_views),
    "view_input_returned": (_view_input_returned, _non_leaf_and_its_rows),
    "diagonal_input_doubled_after": (_view_input_doubled_after, _non_leaf_and_its_diagonal),
    "unsqueezed_input_read_after_write_under_no_grad": (
        _view_input_read_after_write_under_no_grad,
        _non_leaf_and_its_unsqueeze,
    ),
    "view_input_written_first": (_view_input_written_first, _non_leaf_and_its_rows),
    "diagonal_input_written_first": (_view_input_written_first, _non_leaf_and_its_diagonal),
    "view_input_after_t_": (_view_input_after_t_, _non_leaf_and_its_rows),
    "unsqueezed_input_and_view_returned": (_view_input_and_view_returned, _non_leaf_and_its_unsqueeze),
    "view_between_changes": (_view_between_changes, _non_leaf_4x6),
    "view_before_changes": (_view_before_changes, _non_leaf_4x6),
    "transpose_between_changes": (_transpose_between_changes, _non_leaf_4x6),
    "view_between_writes_and_changes": (_view_between_writes_and_changes, _non_leaf_4x6),
    "views_before_and_between": (_views_before_and_between, _non_leaf_4x6),
    "view_between_with_view_input": (_view_between_with_view_input, _non_leaf_and_its_rows),
}

KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_changed_then_written(name: str, mode: str) -> None:
    check_in_mode(*PROGRAMS[name], mode)
