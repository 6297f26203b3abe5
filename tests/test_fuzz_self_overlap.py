"""Fuzzer classes of tensors whose indices share memory (seed 21): an ``unfold`` or ``as_strided`` view written
in part (``index_put_``, ``masked_fill_``, ``index_fill_``, which eager allows), an expanded leaf whose geometry
changes in place; and a view of another dtype (``.real`` of an expanded complex view) whose geometry changes
under no_grad. Each program run in training, under ``no_grad`` and under ``inference_mode``; eager is the
oracle."""

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


def _expanded_leaf():
    return (torch.randn(3, 1, generator=_gen()).expand(3, 4).detach().requires_grad_(),)


def _plain_leaf():
    return (torch.randn(3, 4, generator=_gen()).requires_grad_(),)


def _expanded_leaf_3d():
    return (torch.randn(2, 1, 3, generator=_gen()).expand(2, 4, 3).detach().requires_grad_(),)


def _view_and_expanded_leaf():
    s0 = torch.randn(11, generator=_gen()).requires_grad_() * 1
    return s0[4:9], torch.randn(3, 1, generator=_gen()).expand(3, 4).detach().requires_grad_()


# Class 4: an expanded leaf requiring grad, t_() under no_grad, then used: the function got it as as_strided of
# the leaf (restrided first), and its uses after as as_strided again, whose backward spreads a gradient evenly
# over the indices sharing an element, where eager's gradient has one value per index.
def _t_expanded_leaf_then_matmul_under_autocast(a0, a1):
    with torch.set_grad_enabled(False):
        a1.t_()
        with torch.no_grad():
            a0.add_(1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        v0 = a1 @ a1.mT
        a1.detach().t_()
    return (v0, sum(t.real.sum() for t in (a0, a1, v0)))


def _t_expanded_leaf_then_matmul(a0):
    with torch.no_grad():
        a0.t_()
    return (a0 @ a0.mT,)


def _transpose_expanded_leaf_then_mul(a0):
    with torch.no_grad():
        a0.transpose_(0, 2)
    return (a0 * torch.arange(24.0).view(3, 4, 2),)


def _unsqueeze_expanded_leaf_then_mul(a0):
    with torch.no_grad():
        a0.unsqueeze_(1)
    return (a0 * torch.arange(12.0).view(3, 1, 4),)


# Written too (under no_grad), its geometries all permutations of the one it had: the leaf is restrided inside, as
# unwritten, and the function's view stands for it once in the final geometry (its gradient one value per index).
def _t_and_fill_expanded_leaf_then_mul(a0):
    with torch.no_grad():
        a0.t_()
        a0.fill_(2.0)
    return (a0 * torch.arange(12.0).view(4, 3),)


def _fill_and_t_expanded_leaf_then_mul(a0):
    with torch.no_grad():
        a0.fill_(2.0)
        a0.t_()
    return (a0 * torch.arange(12.0).view(4, 3),)


def _t_fill_t_expanded_leaf_then_mul(a0):
    with torch.no_grad():
        a0.t_()
        a0.fill_(2.0)
        a0.t_()
    return (a0 * torch.arange(12.0).view(3, 4),)


def _transpose_and_mul_expanded_leaf_then_mul(a0):
    with torch.no_grad():
        a0.transpose_(0, 2)
        a0.mul_(3)
    return (a0 * torch.arange(24.0).view(3, 4, 2),)


def _unsqueeze_and_fill_expanded_leaf_then_mul(a0):
    with torch.no_grad():
        a0.unsqueeze_(1)
        a0.fill_(2.0)
    return (a0 * torch.arange(12.0).view(3, 1, 4),)


def _t_and_fill_leaf_then_rows(a0):
    with torch.no_grad():
        a0.t_()
        a0.fill_(2.0)
    return (a0[1:] * torch.arange(9.0).view(3, 3),)


def _read_then_t_and_fill_leaf(a0):
    before = a0 * torch.arange(12.0).view(3, 4)
    with torch.no_grad():
        a0.t_()
        a0.fill_(2.0)
    return (before, a0 * torch.arange(12.0).view(4, 3))


def _t_and_fill_leaf_then_returned(a0):
    with torch.no_grad():
        a0.t_()
        a0.fill_(2.0)
    return (a0 * torch.arange(12.0).view(4, 3), a0)


def _t_and_fill_expanded_leaf_view_taken_before(a0):
    v0 = a0[:, 1:]
    with torch.no_grad():
        a0.t_()
        a0.fill_(2.0)
    return (v0 * torch.arange(9.0).view(3, 3), a0[0])


def _t_expanded_leaf_then_written_through_detach(a0):
    with torch.no_grad():
        a0.t_()
    a0.detach().fill_(2.0)
    return (a0 * torch.arange(12.0).view(4, 3),)


# The function makes it a leaf (``requires_grad_()``), its geometry permuted under no_grad before or after: the
# stand-in for it once in the geometry it was restrided to first is the input itself, not as_strided of it.
def _t_then_requires_grad(a0):
    with torch.no_grad():
        a0.t_()
    a0.requires_grad_()
    return (a0 * torch.arange(12.0).view(4, 3),)


def _requires_grad_then_t(a0):
    a0.requires_grad_()
    with torch.no_grad():
        a0.t_()
    return (a0 * torch.arange(12.0).view(4, 3),)


def _t_and_fill_then_requires_grad(a0):
    a0.t_()
    a0.fill_(2.0)
    a0.requires_grad_()
    return (a0 * torch.arange(12.0).view(4, 3), a0[1])


def _requires_grad_then_t_and_fill(a0):
    a0.requires_grad_()
    with torch.no_grad():
        a0.t_()
        a0.fill_(2.0)
    return (a0 * torch.arange(12.0).view(4, 3),)


def _expanded():
    return (torch.randn(3, 1, generator=_gen()).expand(3, 4).detach(),)


# A view of the leaf returned, taken in its final geometry: replayed on the restrided leaf itself, not on as_strided
# of it in that geometry (which spread its gradient over the indices sharing an element).
def _t_expanded_leaf_then_row_returned(a0):
    with torch.no_grad():
        a0.t_()
    return (a0 * torch.arange(12.0).view(4, 3), a0[1])


def _t_and_fill_expanded_leaf_then_row_returned(a0):
    with torch.no_grad():
        a0.t_()
        a0.fill_(2.0)
    return (a0 * torch.arange(12.0).view(4, 3), a0[1])


def _expanded_complex_view():
    s1 = torch.randn(24, generator=_gen(), dtype=torch.complex64).requires_grad_() * 1
    return (s1[7:10].expand(2, 3),)


def _complex_matrix_view():
    s1 = torch.randn(24, generator=_gen(), dtype=torch.complex64).requires_grad_() * 1
    return (s1[7:13].view(2, 3),)


# Class 8: a view of another dtype than its base whose geometry changes under no_grad, then used: eager takes
# its history again by replaying its view ops, which knew nothing of the change, so its backward raises (a
# gradient of the new shape for a history of the old one); the trace took it by strides in the new geometry.
def _real_as_strided_under_no_grad(a0):
    v1 = a0.real
    with torch.no_grad():
        v1.as_strided_((2, 2), (4, 2), 4)
    return (sum(t.real.sum() for t in (a0, v1)),)


def _imag_unsqueeze_under_no_grad(a0):
    v1 = a0.imag
    with torch.no_grad():
        v1.unsqueeze_(0)
    return (v1 * 2,)


def _real_as_strided_same_shape_under_no_grad(a0):
    v1 = a0.real
    with torch.no_grad():
        v1.as_strided_((2, 3), (2, 4), 0)
    return (v1 * torch.arange(6.0).view(2, 3),)


PROGRAMS = {
    "real_as_strided_under_no_grad": (_real_as_strided_under_no_grad, _expanded_complex_view),
    "real_as_strided_under_no_grad_of_matrix": (_real_as_strided_under_no_grad, _complex_matrix_view),
    "imag_unsqueeze_under_no_grad": (_imag_unsqueeze_under_no_grad, _complex_matrix_view),
    "real_as_strided_same_shape_under_no_grad": (_real_as_strided_same_shape_under_no_grad, _complex_matrix_view),
    "t_and_fill_expanded_leaf_then_mul": (_t_and_fill_expanded_leaf_then_mul, _expanded_leaf),
    "fill_and_t_expanded_leaf_then_mul": (_fill_and_t_expanded_leaf_then_mul, _expanded_leaf),
    "t_fill_t_expanded_leaf_then_mul": (_t_fill_t_expanded_leaf_then_mul, _expanded_leaf),
    "transpose_and_mul_expanded_leaf_then_mul": (_transpose_and_mul_expanded_leaf_then_mul, _expanded_leaf_3d),
    "unsqueeze_and_fill_expanded_leaf_then_mul": (_unsqueeze_and_fill_expanded_leaf_then_mul, _expanded_leaf),
    "t_and_fill_expanded_leaf_then_rows": (_t_and_fill_leaf_then_rows, _expanded_leaf),
    "t_and_fill_plain_leaf_then_rows": (_t_and_fill_leaf_then_rows, _plain_leaf),
    "read_then_t_and_fill_expanded_leaf": (_read_then_t_and_fill_leaf, _expanded_leaf),
    "read_then_t_and_fill_plain_leaf": (_read_then_t_and_fill_leaf, _plain_leaf),
    "t_and_fill_expanded_leaf_then_returned": (_t_and_fill_leaf_then_returned, _expanded_leaf),
    "t_expanded_leaf_then_row_returned": (_t_expanded_leaf_then_row_returned, _expanded_leaf),
    "t_and_fill_expanded_leaf_view_taken_before": (_t_and_fill_expanded_leaf_view_taken_before, _expanded_leaf),
    "t_expanded_leaf_then_written_through_detach": (_t_expanded_leaf_then_written_through_detach, _expanded_leaf),
    "t_then_requires_grad_expanded": (_t_then_requires_grad, _expanded),
    "requires_grad_then_t_expanded": (_requires_grad_then_t, _expanded),
    "t_and_fill_then_requires_grad_expanded": (_t_and_fill_then_requires_grad, _expanded),
    "requires_grad_then_t_and_fill_expanded": (_requires_grad_then_t_and_fill, _expanded),
    "t_and_fill_expanded_leaf_then_row_returned": (_t_and_fill_expanded_leaf_then_row_returned, _expanded_leaf),
    "t_expanded_leaf_then_matmul_under_autocast": (
        _t_expanded_leaf_then_matmul_under_autocast,
        _view_and_expanded_leaf,
    ),
    "t_expanded_leaf_then_matmul": (_t_expanded_leaf_then_matmul, _expanded_leaf),
    "transpose_expanded_leaf_then_mul": (_transpose_expanded_leaf_then_mul, _expanded_leaf_3d),
    "unsqueeze_expanded_leaf_then_mul": (_unsqueeze_expanded_leaf_then_mul, _expanded_leaf),
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
