"""Fuzzer class "grad of autograd leaf N" (seeds 21, 22): which history eager's autograd gives a view whose
geometry changed in place, and so which elements of the base its gradient reaches.

Eager records an in-place view op in grad mode (``as_strided_``, ``squeeze_``) on the history the view has at
that moment, at the version the op bumps to: ``as_strided_``'s backward then reaches only the elements the
view spanned before. A change under no_grad (``set_()``, ``as_strided_``) leaves the record stale: the next use
takes the history again from the base, by strides, in the geometry the view has then. Each program runs in
every mode against eager (``tests.oracle``).
"""

from __future__ import annotations

import pytest
import torch

import aot
from aot.errors import UnsupportedMutationError
from tests.functions import DoublesInPlace, ScaledBySaved
from tests.oracle import check_in_mode, functional_nop, mode_params


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _slice_of_non_leaf():
    s0 = (torch.randn(24, generator=_gen()).requires_grad_()) * 1
    return (s0[7:13],)


# Seed 22 program 575: ``as_strided_`` of a view of the input, past the view's elements, recorded in grad mode:
# its backward reaches none of them. The replayed output must not look stale (taken again from the base).
def _as_strided_past_view(a0):
    v0 = a0.narrow(-1, 1, 5)
    v0.as_strided_((2,), (0,), 13)
    return (v0,)


def _as_strided_within_view(a0):
    v0 = a0.narrow(-1, 1, 5)
    v0.as_strided_((2,), (2,), 9)
    return (v0,)


def _as_strided_past_view_under_no_grad(a0):
    # Unrecorded: the next use takes the history again from the base, which reaches element 13.
    v0 = a0.narrow(-1, 1, 5)
    with torch.no_grad():
        v0.as_strided_((2,), (0,), 13)
    return (v0 * 2,)


def _as_strided_past_view_then_written(a0):
    # A write after the change leaves eager's record stale: the output's history is taken again by strides.
    v0 = a0.narrow(-1, 1, 5)
    v0.as_strided_((2,), (1,), 12)
    with torch.no_grad():
        a0.mul_(2)
    return (v0,)


def _two_slices_of_non_leaf():
    s0 = (torch.randn(24, generator=_gen()).requires_grad_()) * 1
    return (s0[2:7], s0[7:12])


# Seed 22 program 1344: an input set_() under no_grad onto another's memory (stale), then ``as_strided_`` in
# grad mode: eager takes the history again in the geometry set_() left, then records the change on it.
def _set_then_as_strided_past(a0, a1):
    with torch.no_grad():
        a1.set_(a0)
    a1.as_strided_((2, 1), (2, 2), 13)
    return (a0.sum() + a1.sum(),)


def _set_then_as_strided_within(a0, a1):
    with torch.no_grad():
        a1.set_(a0)
    a1.as_strided_((2,), (2,), 3)
    return (a0.sum() + (a1 * 3).sum(),)


def _set_then_as_strided_then_written(a0, a1):
    with torch.no_grad():
        a1.set_(a0)
    a1.as_strided_((2,), (1,), 6)
    with torch.no_grad():
        a0.mul_(2)
    return ((a1 * 3).sum(),)


def _leaf_and_view_of_non_leaf():
    g = _gen()
    i0 = torch.randn(3, 4, generator=g).requires_grad_()
    s0 = torch.randn(8, generator=g).requires_grad_() * 1
    return (i0, s0[3:7].view(2, 2))


# Seed 22 program 1368: an out= op under no_grad resizes a view input past its elements (stale), then squeeze_()
# in grad mode: eager's history is taken again by strides in the resized geometry (reaching s0[7]), then the
# squeeze_() recorded on it. One restride from the old geometry reached only the old elements.
def _resized_by_out_then_squeeze_(a0, a1):
    with torch.no_grad():
        torch.neg(a0, out=a1)
    a1.squeeze_()
    return (a1,)


def _resized_by_out_then_transpose_(a0, a1):
    with torch.no_grad():
        torch.neg(a0, out=a1)
    a1.transpose_(0, 1)
    return (a1 * 2,)


def _non_leaf_4x6():
    return (torch.randn(4, 6, generator=_gen()).requires_grad_() * 1,)


# Seed 21 program 1523, without its Function: two as_strided_() of a non-leaf input in grad mode, the input
# returned: the second's backward reaches only the element the first spans (8), not 7..9.
def _as_strided_twice(a0):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    return (a0,)


def _as_strided_twice_summed(a0):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    return (a0.sum(),)


def _slice_as_strided_twice(a0):
    a0.as_strided_((2, 2), (6, 1), 8)
    a0.as_strided_((2, 3), (6, 1), 7)
    return (a0, a0 * 3)


# Seed 21 program 1523: then a mark_dirty Function writes it (or an in-place op does). Eager's write extends the
# input's own history, on top of the recorded as_strided_() steps; the trace's stand-in for the input must be no
# view, else autograd takes the write as one into the input below (CopySlices by the final geometry's strides,
# reaching 7..9).
def _as_strided_twice_then_doubled(a0):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    v0 = DoublesInPlace.apply(a0)
    return (a0.sum() + v0.sum(),)


def _as_strided_twice_then_mul_(a0):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    a0.mul_(2)
    return (a0.sum(),)


def _two_blocks_of_non_leaf():
    s0 = torch.randn(50, generator=_gen()).requires_grad_() * 1
    return (s0[0:24].view(4, 6), s0[26:50].view(4, 6))


# Seed 22 program 1269: a view input set_() under no_grad onto another's memory in the same storage, then a view
# of it returned. The output is rebuilt outside the graph on the caller's view, still in its old geometry: eager's
# record is stale, so its history is taken again from the base by strides (reaching 0..23), where an as_strided of
# the old view (26..49) reaches none of the output's elements.
def _set_onto_neighbour_then_transposed(a0, a1):
    with torch.no_grad():
        a1.set_(a0)
    v0 = a1.transpose(0, -1)
    return (v0,)


def _set_onto_neighbour_then_narrowed(a0, a1):
    with torch.no_grad():
        a1.set_(a0)
    return (a1.narrow(1, 2, 3), a0 * 2)


def _as_strided_under_no_grad_then_viewed(a0, a1):
    with torch.no_grad():
        a1.as_strided_((2, 6), (6, 1), 20)
    return (a1[1],)


def _t_under_no_grad_then_viewed(a0, a1):
    with torch.no_grad():
        a1.t_()
    return (a1[1:3],)


def _mul_then_as_strided_twice(a0):
    a0.mul_(2)
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    return (a0,)


def _transpose_then_add_(a0):
    a0.transpose_(0, 1)
    a0.add_(1)
    return (a0[1:3] * 2,)


def _as_strided_twice_then_written_under_no_grad(a0):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    with torch.no_grad():
        a0.mul_(2)
    return (a0.sum(),)


def _as_strided_then_written_through_view(a0):
    a0.as_strided_((2, 3), (6, 1), 7)
    a0[0].mul_(3)
    return (a0, a0.sum())


def _non_leaf_4x6_and_leaf():
    g = _gen()
    return (torch.randn(4, 6, generator=g).requires_grad_() * 1, torch.randn(3, generator=g).requires_grad_())


def _as_strided_twice_then_mul_by_leaf(a0, a1):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    a0.mul_(a1)
    return (a0.sum(),)


def _as_strided_twice_then_doubled_returned(a0):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    v0 = DoublesInPlace.apply(a0)
    return (v0, a0[1:])


def _as_strided_twice_then_view_written(a0):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    v = a0.view(3)
    v.add_(1)
    return (a0 * 2, v)


def _t_then_mul_then_row(a0):
    a0.t_()
    a0.mul_(2)
    return (a0[0],)


def _non_leaf_and_its_rows():
    x = torch.randn(4, 6, generator=_gen()).requires_grad_() * 1
    return (x, x[1:])


def _as_strided_twice_then_mul_with_view_input(a0, a1):
    a0.as_strided_((1,), (1,), 8)
    a0.as_strided_((3,), (1,), 7)
    a0.mul_(2)
    return (a0.sum(), a1 * 1)


def _view_between_as_strided_then_mul_(a0):
    a0.as_strided_((1,), (1,), 8)
    v = a0[0:]
    a0.as_strided_((3,), (1,), 7)
    a0.mul_(2)
    return (a0.sum(), v)


def _column_written_then_squeezed_after_matmul(a0):
    # Seed 22 program 4572: a change of shape alone keeps the view stand-in; with the no-view one, the matmul's
    # saved input took the squeeze_()d shape in the backward (IndexError where eager runs).
    a0.index_fill_(-1, torch.tensor([0]), 2.0)
    v0 = a0 @ a0.mT
    a0.squeeze_()
    return (a0.sum() + v0.sum(),)


def _non_leaf_column():
    return (torch.randn(4, 1, generator=torch.Generator().manual_seed(0)).requires_grad_() * 1,)


# Seed 24 program 805: a view of a non-leaf input (no view) taken, the input as_strided_() in grad mode, then the view
# viewed again: eager's record of the first view is stale by then, so its history is taken again from the input's
# new history by strides (reaching only the elements the final geometry spans: here one), and the later view is
# taken on that. Replayed on the caller's tensor before its change, the chain kept the old history (every element).
def _viewed_again_after_as_strided_(a0):
    v0 = a0[..., ::2]
    _ = v0 @ v0.mT  # (saves the view for a backward never run)
    a0.as_strided_((1,), (2,), 10)
    v2 = v0.t()
    return (v2,)


def _row_sliced_after_as_strided_(a0):
    v0 = a0[1]
    a0.as_strided_((2, 2), (4, 1), 5)
    return (v0[1:],)


def _flat_view_diagonal_after_as_strided_(a0):
    v0 = a0.view(12)
    a0.as_strided_((3,), (3,), 1)
    return (v0.unflatten(0, (2, 6)).diagonal(),)


def _stale_view_and_view_of_it_returned(a0):
    v0 = a0[..., ::2]
    a0.as_strided_((1,), (2,), 10)
    return (v0.t(), v0, a0)


def _squeezed_then_as_strided_then_viewed(a0):
    v0 = a0[..., ::2]
    a0.squeeze_(0).unsqueeze_(0)
    a0.as_strided_((2,), (2,), 8)
    return (v0[1],)


def _written_then_as_strided_then_viewed(a0):
    v0 = a0[..., ::2]
    a0.mul_(2)
    a0.as_strided_((1,), (2,), 10)
    return (v0.t(),)


def _as_strided_then_written_then_viewed(a0):
    v0 = a0[..., ::2]
    a0.as_strided_((3,), (2,), 4)
    a0.mul_(2)
    return (v0.t(),)


def _view_between_as_strided_then_viewed(a0):
    # The first view taken in the geometry the first change left (its own ``from_geometry``).
    a0.as_strided_((2, 3), (4, 1), 1)
    v0 = a0[1]
    a0.as_strided_((2,), (1,), 5)
    return (v0[1:],)


def _as_strided_under_no_grad_then_recorded_then_viewed(a0):
    # Eager's backward raises: the history taken again has the shape the unrecorded change left.
    v0 = a0[..., ::2]
    with torch.no_grad():
        a0.as_strided_((6,), (1,), 2)
    a0.as_strided_((2,), (2,), 4)
    return (v0.t(),)


def _as_strided_recorded_then_under_no_grad_then_viewed(a0):
    v0 = a0[..., ::2]
    a0.as_strided_((2,), (2,), 4)
    with torch.no_grad():
        a0.as_strided_((1,), (1,), 6)
    return (v0.t(),)


def _unbound_row_sliced_after_as_strided_(a0):
    v0 = a0.unbind(0)[1]
    a0.as_strided_((3,), (1,), 5)
    return (v0[1:], v0[0].unsqueeze(0))


# The same class's neighbours eager and the compiled function agreed on: the stale view returned itself (its own
# record is taken again when read, on both sides), a change of shape alone (the same elements), the view used
# inside the graph.
def _stale_view_returned(a0):
    v0 = a0[..., ::2]
    a0.as_strided_((1,), (2,), 10)
    return (v0,)


def _row_sliced_after_t_(a0):
    v0 = a0[1]
    a0.t_()
    return (v0[1:],)


def _viewed_again_after_as_strided_then_computed(a0):
    v0 = a0[..., ::2]
    a0.as_strided_((1,), (2,), 10)
    return (v0.t() * 2,)


def _non_leaf_3x4():
    return (torch.randn(3, 4, generator=_gen()).requires_grad_() * 1,)


def _non_leaf_3x4_and_its_rows():
    x = torch.randn(3, 4, generator=_gen()).requires_grad_() * 1
    return (x, x[1:])


def _viewed_again_after_as_strided_with_view_input(a0, a1):
    v0 = a0[..., ::2]
    a0.as_strided_((2,), (2,), 4)
    return (v0.t(), a1 * 2)


PROGRAMS = {
    "viewed_again_after_as_strided_": (_viewed_again_after_as_strided_, _non_leaf_3x4),
    "row_sliced_after_as_strided_": (_row_sliced_after_as_strided_, _non_leaf_3x4),
    "flat_view_diagonal_after_as_strided_": (_flat_view_diagonal_after_as_strided_, _non_leaf_3x4),
    "stale_view_and_view_of_it_returned": (_stale_view_and_view_of_it_returned, _non_leaf_3x4),
    "squeezed_then_as_strided_then_viewed": (_squeezed_then_as_strided_then_viewed, _non_leaf_3x4),
    "written_then_as_strided_then_viewed": (_written_then_as_strided_then_viewed, _non_leaf_3x4),
    "as_strided_then_written_then_viewed": (_as_strided_then_written_then_viewed, _non_leaf_3x4),
    "view_between_as_strided_then_viewed": (_view_between_as_strided_then_viewed, _non_leaf_3x4),
    "as_strided_under_no_grad_then_recorded_then_viewed": (
        _as_strided_under_no_grad_then_recorded_then_viewed,
        _non_leaf_3x4,
    ),
    "as_strided_recorded_then_under_no_grad_then_viewed": (
        _as_strided_recorded_then_under_no_grad_then_viewed,
        _non_leaf_3x4,
    ),
    "unbound_row_sliced_after_as_strided_": (_unbound_row_sliced_after_as_strided_, _non_leaf_3x4),
    "stale_view_returned": (_stale_view_returned, _non_leaf_3x4),
    "row_sliced_after_t_": (_row_sliced_after_t_, _non_leaf_3x4),
    "viewed_again_after_as_strided_then_computed": (_viewed_again_after_as_strided_then_computed, _non_leaf_3x4),
    "viewed_again_after_as_strided_with_view_input": (
        _viewed_again_after_as_strided_with_view_input,
        _non_leaf_3x4_and_its_rows,
    ),
    "column_written_then_squeezed_after_matmul": (_column_written_then_squeezed_after_matmul, _non_leaf_column),
    "as_strided_twice_then_mul_with_view_input": (_as_strided_twice_then_mul_with_view_input, _non_leaf_and_its_rows),
    "view_between_as_strided_then_mul_": (_view_between_as_strided_then_mul_, _non_leaf_4x6),
    "as_strided_twice_then_mul_by_leaf": (_as_strided_twice_then_mul_by_leaf, _non_leaf_4x6_and_leaf),
    "as_strided_twice_then_doubled_returned": (_as_strided_twice_then_doubled_returned, _non_leaf_4x6),
    "as_strided_twice_then_view_written": (_as_strided_twice_then_view_written, _non_leaf_4x6),
    "t_then_mul_then_row": (_t_then_mul_then_row, _non_leaf_4x6),
    "mul_then_as_strided_twice": (_mul_then_as_strided_twice, _non_leaf_4x6),
    "transpose_then_add_": (_transpose_then_add_, _non_leaf_4x6),
    "as_strided_twice_then_written_under_no_grad": (_as_strided_twice_then_written_under_no_grad, _non_leaf_4x6),
    "as_strided_then_written_through_view": (_as_strided_then_written_through_view, _non_leaf_4x6),
    "resized_by_out_then_squeeze_": (_resized_by_out_then_squeeze_, _leaf_and_view_of_non_leaf),
    "resized_by_out_then_transpose_": (_resized_by_out_then_transpose_, _leaf_and_view_of_non_leaf),
    "as_strided_twice": (_as_strided_twice, _non_leaf_4x6),
    "as_strided_twice_summed": (_as_strided_twice_summed, _non_leaf_4x6),
    "slice_as_strided_twice": (_slice_as_strided_twice, _non_leaf_4x6),
    "as_strided_twice_then_doubled": (_as_strided_twice_then_doubled, _non_leaf_4x6),
    "as_strided_twice_then_mul_": (_as_strided_twice_then_mul_, _non_leaf_4x6),
    "set_onto_neighbour_then_transposed": (_set_onto_neighbour_then_transposed, _two_blocks_of_non_leaf),
    "set_onto_neighbour_then_narrowed": (_set_onto_neighbour_then_narrowed, _two_blocks_of_non_leaf),
    "as_strided_under_no_grad_then_viewed": (_as_strided_under_no_grad_then_viewed, _two_blocks_of_non_leaf),
    "t_under_no_grad_then_viewed": (_t_under_no_grad_then_viewed, _two_blocks_of_non_leaf),
    "as_strided_past_view": (_as_strided_past_view, _slice_of_non_leaf),
    "as_strided_within_view": (_as_strided_within_view, _slice_of_non_leaf),
    "as_strided_past_view_under_no_grad": (_as_strided_past_view_under_no_grad, _slice_of_non_leaf),
    "as_strided_past_view_then_written": (_as_strided_past_view_then_written, _slice_of_non_leaf),
    "set_then_as_strided_past": (_set_then_as_strided_past, _two_slices_of_non_leaf),
    "set_then_as_strided_within": (_set_then_as_strided_within, _two_slices_of_non_leaf),
    "set_then_as_strided_then_written": (_set_then_as_strided_then_written, _two_slices_of_non_leaf),
}


# Seed 23 program 895: a view of a leaf whose elements share memory (``expand().detach().requires_grad_()``), then
# the leaf written under no_grad. Eager takes the view's history again as ``leaf.as_strided(view's geometry)``,
# whose backward spreads each memory element's gradient evenly over the leaf's indices reaching it (1.5, 1.5
# below); the view op's own backward put it at the view's indices only (2, 1). Variants: other view kinds and
# writes, a view taken after the write (not taken again), a leaf at an offset, one overlapping by ``unfold``, and
# the same programs on a leaf of its own memory (the two backwards agree).
def _step_slice_then_zero_(a0):
    v1 = a0[..., ::2]
    with torch.no_grad():
        a0.zero_()
    return (sum(t.real.sum() for t in (a0, v1)),)


def _select_then_fill_(a0):
    v1 = a0[1]
    with torch.no_grad():
        a0.fill_(2.0)
    return ((v1 * 3).sum() + a0.sum(),)


def _diagonal_then_masked_fill_(a0):
    v1 = a0.diagonal()
    with torch.no_grad():
        a0.masked_fill_(torch.tensor([True, False, True]), 1.0)
    return ((v1 * torch.arange(2.0)).sum(),)


def _transposed_then_index_put_(a0):
    v1 = a0.t()[1:]
    with torch.no_grad():
        a0.index_put_((torch.tensor([0]),), torch.tensor(2.0))
    return ((v1 * torch.arange(4.0).view(2, 2)).sum(),)


def _view_of_view_then_zero_(a0):
    v1 = a0[:, 1:][0]
    with torch.no_grad():
        a0.zero_()
    return (v1 * 2,)


def _slice_returned_then_zero_(a0):
    v1 = a0[..., 1:]
    with torch.no_grad():
        a0.zero_()
    return (a0, v1)


def _slice_after_zero_(a0):
    with torch.no_grad():
        a0.zero_()
    v1 = a0[..., ::2]
    return (sum(t.real.sum() for t in (a0, v1)),)


def _select_then_t_(a0):
    v1 = a0[0]
    with torch.no_grad():
        a0.t_()
    return ((v1 * torch.arange(3.0)).sum() + a0.sum(),)


def _t_then_select(a0):
    # Taken after the change: a view of the leaf itself (the layer's stand-in for it is taken again as none).
    with torch.no_grad():
        a0.t_()
    return ((a0[0] * torch.arange(2.0)).sum(),)


def _t_then_select_returned(a0):
    # The output is replayed on the caller's leaf, in the geometry it ends in: the leaf itself, not as_strided of it.
    with torch.no_grad():
        a0.t_()
    return (a0[0],)


def _unsqueeze_then_slice_returned(a0):
    with torch.no_grad():
        a0.unsqueeze_(0)
    return (a0[0, :, 1:],)


def _transpose_then_diagonal_returned(a0):
    with torch.no_grad():
        a0.transpose_(0, 1)
    return (a0.diagonal(), a0.sum())


def _expanded_leaf():
    return (torch.randn((), generator=_gen()).expand(2).detach().requires_grad_(),)


def _expanded_leaf_2x3():
    return (torch.randn(3, generator=_gen()).expand(2, 3).detach().requires_grad_(),)


def _expanded_leaf_2x3_at_offset():
    return (torch.randn(8, generator=_gen())[5:8].expand(2, 3).detach().requires_grad_(),)


def _unfolded_leaf_2x3():
    return (torch.randn(6, generator=_gen()).unfold(0, 3, 2)[:, :3].detach().requires_grad_(),)


def _leaf_2x3():
    return (torch.randn(2, 3, generator=_gen()).requires_grad_(),)


PROGRAMS.update(
    {
        "step_slice_of_expanded_leaf_then_zero_": (_step_slice_then_zero_, _expanded_leaf),
        "step_slice_of_expanded_leaf_after_zero_": (_slice_after_zero_, _expanded_leaf),
        "select_of_expanded_leaf_then_fill_": (_select_then_fill_, _expanded_leaf_2x3),
        "select_of_expanded_leaf_at_offset_then_fill_": (_select_then_fill_, _expanded_leaf_2x3_at_offset),
        "select_of_unfolded_leaf_then_fill_": (_select_then_fill_, _unfolded_leaf_2x3),
        "select_of_leaf_then_fill_": (_select_then_fill_, _leaf_2x3),
        "diagonal_of_expanded_leaf_then_masked_fill_": (_diagonal_then_masked_fill_, _expanded_leaf_2x3),
        "transposed_expanded_leaf_then_index_put_": (_transposed_then_index_put_, _expanded_leaf_2x3),
        "view_of_view_of_expanded_leaf_then_zero_": (_view_of_view_then_zero_, _expanded_leaf_2x3),
        "view_of_view_of_unfolded_leaf_then_zero_": (_view_of_view_then_zero_, _unfolded_leaf_2x3),
        "slice_of_expanded_leaf_returned_then_zero_": (_slice_returned_then_zero_, _expanded_leaf_2x3),
        "step_slice_of_leaf_then_zero_": (_step_slice_then_zero_, _leaf_2x3),
        "select_of_expanded_leaf_then_t_": (_select_then_t_, _expanded_leaf_2x3),
        "t_of_expanded_leaf_then_select": (_t_then_select, _expanded_leaf_2x3),
        "t_of_expanded_leaf_then_select_returned": (_t_then_select_returned, _expanded_leaf_2x3),
        "t_of_leaf_then_select_returned": (_t_then_select_returned, _leaf_2x3),
        "unsqueeze_of_expanded_leaf_then_slice_returned": (_unsqueeze_then_slice_returned, _expanded_leaf_2x3),
        "transpose_of_unfolded_leaf_then_diagonal_returned": (_transpose_then_diagonal_returned, _unfolded_leaf_2x3),
    }
)


# Seed 24 program 924: a non-leaf input (no view) restrided under no_grad keeps its history (``FreshViews``' kept
# history), then an autograd.Function marks it dirty in grad mode: eager's tensor has the Function's history on top
# of the kept one. The stand-in the Function was given carried that history, but later uses took the kept history
# again from the input (the Function's backward dropped: gradient 2 where eager's is 4). Where the change orders the
# elements otherwise (t_), eager's input reaches its kept history index by index, the caller's tensor written back
# by memory position: refused in grad mode (REFUSED below). Variants: other geometry changes, weighted uses, the
# Function twice, a recorded write after it, a Function that only reads (a control), the tensor returned.
def _t_under_no_grad_then_doubled_in_enable_grad(a0):
    with torch.set_grad_enabled(False):
        a0.transpose_(0, -1)
        with torch.enable_grad():
            v1 = DoublesInPlace.apply(a0)
    return (sum(t.real.sum() for t in (a0, v1)),)


def _t_under_no_grad_then_doubled_weighted(a0, w):
    with torch.no_grad():
        a0.t_()
    v = DoublesInPlace.apply(a0)
    return ((a0 * w).sum() + (v * w * w).sum(),)


def _unsqueeze_under_no_grad_then_doubled_returned(a0, w):
    with torch.no_grad():
        a0.unsqueeze_(0)
    DoublesInPlace.apply(a0)
    return (a0, a0[0] * w)


def _out_grows_under_no_grad_then_doubled(a0, w):
    with torch.no_grad():
        torch.neg(w, out=a0)
    v = DoublesInPlace.apply(a0)
    return ((v * w).sum(),)


def _t_under_no_grad_then_doubled_twice(a0, w):
    with torch.no_grad():
        a0.t_()
    DoublesInPlace.apply(a0)
    v = DoublesInPlace.apply(a0)
    return ((v * w).sum(),)


def _t_under_no_grad_then_doubled_then_mul_(a0, w):
    with torch.no_grad():
        a0.t_()
    DoublesInPlace.apply(a0)
    a0.mul_(w)
    return ((a0 * w).sum(),)


def _t_under_no_grad_then_scaled_by_saved(a0, w):
    with torch.no_grad():
        a0.t_()
    v = ScaledBySaved.apply(a0, w)
    return ((v * w).sum() + (a0 * w).sum(),)


def _t_under_no_grad_then_doubled_returned(a0, w):
    with torch.no_grad():
        a0.t_()
    DoublesInPlace.apply(a0)
    return (a0,)


def _t_under_no_grad_then_doubled_views_returned(a0, w):
    with torch.no_grad():
        a0.t_()
    v = DoublesInPlace.apply(a0)
    return (v[1:] * w[1:], a0[:, 0])


def _out_grows_under_no_grad_then_doubled_returned(a0, w):
    with torch.no_grad():
        torch.neg(w, out=a0)
    DoublesInPlace.apply(a0)
    return (a0, a0[1])


def _unsqueeze_under_no_grad_then_doubled_in_enable_grad(a0):
    with torch.set_grad_enabled(False):
        a0.unsqueeze_(0)
        with torch.enable_grad():
            v1 = DoublesInPlace.apply(a0)
    return (sum(t.real.sum() for t in (a0, v1)),)


def _unsqueeze_under_no_grad_then_doubled_twice_weighted(a0, w):
    with torch.no_grad():
        a0.unsqueeze_(0)
    DoublesInPlace.apply(a0)
    v = DoublesInPlace.apply(a0)
    return ((v[0] * w).sum() + (a0[0, 1:] * w[1:]).sum(),)


def _unsqueeze_under_no_grad_then_doubled_then_mul_(a0, w):
    with torch.no_grad():
        a0.unsqueeze_(0)
    DoublesInPlace.apply(a0)
    a0.mul_(w)
    return ((a0 * w).sum(),)


def _non_leaf_2x2():
    return (torch.randn(2, 2, generator=_gen()).requires_grad_() * 1,)


def _non_leaf_3x3_and_weights():
    return (
        torch.randn(3, 3, generator=_gen()).requires_grad_() * 1,
        torch.arange(9.0).view(3, 3),
    )


def _non_leaf_1x4_and_weights():
    return (torch.randn(1, 4, generator=_gen()).requires_grad_() * 1, torch.arange(12.0).view(3, 4))


PROGRAMS.update(
    {
        "unsqueeze_under_no_grad_then_doubled_in_enable_grad": (
            _unsqueeze_under_no_grad_then_doubled_in_enable_grad,
            _non_leaf_2x2,
        ),
        "unsqueeze_under_no_grad_then_doubled_twice_weighted": (
            _unsqueeze_under_no_grad_then_doubled_twice_weighted,
            _non_leaf_3x3_and_weights,
        ),
        "unsqueeze_under_no_grad_then_doubled_then_mul_": (
            _unsqueeze_under_no_grad_then_doubled_then_mul_,
            _non_leaf_3x3_and_weights,
        ),
        "unsqueeze_under_no_grad_then_doubled_returned": (
            _unsqueeze_under_no_grad_then_doubled_returned,
            _non_leaf_3x3_and_weights,
        ),
        "out_grows_under_no_grad_then_doubled": (_out_grows_under_no_grad_then_doubled, _non_leaf_1x4_and_weights),
        "out_grows_under_no_grad_then_doubled_returned": (
            _out_grows_under_no_grad_then_doubled_returned,
            _non_leaf_1x4_and_weights,
        ),
        "t_under_no_grad_then_scaled_by_saved": (_t_under_no_grad_then_scaled_by_saved, _non_leaf_3x3_and_weights),
    }
)


# Seed 27 program 1563: a view of a non-leaf input written (``fill_``), then ``as_strided_`` in grad mode to an
# offset below the view's elements, then viewed again. Eager's ``as_strided_`` is recorded at the version it bumps
# to (``AsStridedBackward1`` over the view's history, the write's ``CopySlices``): its backward reaches only the
# elements the view spanned before the change, so element 2 of the base gets no gradient. The replayed output was
# taken at the write-back's version, then found stale and taken again from the base by strides (reaching 2).
# Variants: other offsets (below, inside, past the view), other writes (through a view of it, copy_, under
# no_grad, after the change: stale in eager too), no write, other views and changes after, a view of a leaf.
def _filled_then_as_strided_below(a0):
    a0.fill_(2.0)
    a0.as_strided_((2, 2), (4, 2), 0)
    return (a0.narrow(-1, 1, 1),)


def _mul_then_as_strided_below_then_row(a0):
    a0.mul_(3)
    a0.as_strided_((2, 2), (4, 2), 1)
    return (a0[0], a0[1] * 2)


def _row_written_then_as_strided_below(a0):
    a0[1:3].zero_()
    a0.as_strided_((3,), (3,), 0)
    return (a0[1:],)


def _copied_then_as_strided_below_returned(a0, w):
    a0.copy_(w * 2)
    a0.as_strided_((2, 2), (3, 2), 1)
    return (a0, a0.t()[0])


def _filled_then_as_strided_inside(a0):
    a0.fill_(2.0)
    a0.as_strided_((2, 2), (1, 2), 5)
    return (a0.narrow(-1, 1, 1),)


def _filled_then_as_strided_past(a0):
    a0.fill_(2.0)
    a0.as_strided_((2, 2), (4, 2), 6)
    return (a0[:, 1],)


def _filled_under_no_grad_then_as_strided_below(a0):
    with torch.no_grad():
        a0.fill_(2.0)
    a0.as_strided_((2, 2), (4, 2), 0)
    return (a0.narrow(-1, 1, 1),)


def _as_strided_below_then_filled(a0):
    a0.as_strided_((2, 2), (4, 2), 0)
    a0[0].fill_(2.0)
    return (a0.narrow(-1, 1, 1),)


def _as_strided_below_unwritten(a0):
    a0.as_strided_((2, 2), (4, 2), 0)
    return (a0.narrow(-1, 1, 1),)


def _filled_then_as_strided_below_then_summed(a0):
    a0.fill_(2.0)
    a0.as_strided_((2, 2), (4, 2), 0)
    return ((a0.narrow(-1, 1, 1) * 3).sum(),)


def _filled_then_as_strided_below_twice(a0):
    a0.fill_(2.0)
    a0.as_strided_((2, 2), (4, 2), 0)
    a0.as_strided_((3,), (1,), 1)
    return (a0[1:],)


def _mul_then_as_strided_below_then_transposed(a0):
    a0.mul_(2)
    a0.as_strided_((2, 2), (4, 2), 0)
    v = a0.t()
    return (v, v[0])


def _filled_then_as_strided_below_then_t_(a0):
    a0.fill_(2.0)
    a0.as_strided_((2, 2), (4, 2), 0)
    a0.t_()
    return (a0[0],)


def _view_filled_then_as_strided_below(a0):
    v = a0[1:]
    v.fill_(2.0)
    v.as_strided_((2, 2), (4, 2), 0)
    return (v.narrow(-1, 1, 1), a0)


def _slice_of_non_leaf_at_5():
    s0 = torch.randn(16, generator=_gen()).requires_grad_() * 1
    return (s0[5:10],)


def _slice_of_non_leaf_at_5_and_leaf():
    g = _gen()
    s0 = torch.randn(16, generator=g).requires_grad_() * 1
    return (s0[5:10], torch.randn(5, generator=g).requires_grad_())


def _rows_of_non_leaf():
    s0 = torch.randn(4, 4, generator=_gen()).requires_grad_() * 1
    return (s0[1:3],)


def _slice_of_leaf_at_5():
    return (torch.randn(16, generator=_gen()).requires_grad_()[5:10],)


PROGRAMS.update(
    {
        "filled_then_as_strided_below": (_filled_then_as_strided_below, _slice_of_non_leaf_at_5),
        "mul_then_as_strided_below_then_row": (_mul_then_as_strided_below_then_row, _slice_of_non_leaf_at_5),
        "row_written_then_as_strided_below": (_row_written_then_as_strided_below, _rows_of_non_leaf),
        "copied_then_as_strided_below_returned": (
            _copied_then_as_strided_below_returned,
            _slice_of_non_leaf_at_5_and_leaf,
        ),
        "filled_then_as_strided_inside": (_filled_then_as_strided_inside, _slice_of_non_leaf_at_5),
        "filled_then_as_strided_past": (_filled_then_as_strided_past, _slice_of_non_leaf_at_5),
        "filled_under_no_grad_then_as_strided_below": (
            _filled_under_no_grad_then_as_strided_below,
            _slice_of_non_leaf_at_5,
        ),
        "as_strided_below_then_filled": (_as_strided_below_then_filled, _slice_of_non_leaf_at_5),
        "as_strided_below_unwritten": (_as_strided_below_unwritten, _slice_of_non_leaf_at_5),
        "filled_then_as_strided_below_then_summed": (
            _filled_then_as_strided_below_then_summed,
            _slice_of_non_leaf_at_5,
        ),
        "filled_under_no_grad_then_as_strided_below_of_leaf": (
            _filled_under_no_grad_then_as_strided_below,
            _slice_of_leaf_at_5,
        ),
        "filled_then_as_strided_below_of_leaf": (_filled_then_as_strided_below, _slice_of_leaf_at_5),
        "filled_then_as_strided_below_twice": (_filled_then_as_strided_below_twice, _slice_of_non_leaf_at_5),
        "mul_then_as_strided_below_then_transposed": (
            _mul_then_as_strided_below_then_transposed,
            _slice_of_non_leaf_at_5,
        ),
        "filled_then_as_strided_below_then_t_": (_filled_then_as_strided_below_then_t_, _slice_of_non_leaf_at_5),
        "view_filled_then_as_strided_below": (_view_filled_then_as_strided_below, _slice_of_non_leaf_at_5),
    }
)


# The t_ variants: refused in training; under no_grad and inference_mode nothing records, and they run.
REFUSED = {
    "t_under_no_grad_then_doubled_in_enable_grad": (_t_under_no_grad_then_doubled_in_enable_grad, _non_leaf_2x2),
    "t_under_no_grad_then_doubled_weighted": (_t_under_no_grad_then_doubled_weighted, _non_leaf_3x3_and_weights),
    "t_under_no_grad_then_doubled_twice": (_t_under_no_grad_then_doubled_twice, _non_leaf_3x3_and_weights),
    "t_under_no_grad_then_doubled_then_mul_": (_t_under_no_grad_then_doubled_then_mul_, _non_leaf_3x3_and_weights),
    "t_under_no_grad_then_doubled_returned": (_t_under_no_grad_then_doubled_returned, _non_leaf_3x3_and_weights),
    "t_under_no_grad_then_doubled_views_returned": (
        _t_under_no_grad_then_doubled_views_returned,
        _non_leaf_3x3_and_weights,
    ),
}


KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_regenerated_history(name: str, mode: str) -> None:
    check_in_mode(*PROGRAMS[name], mode)


@pytest.mark.parametrize(("name", "mode"), mode_params(REFUSED, {}))
def test_function_dirtied_after_permuting_change(name: str, mode: str) -> None:
    fn, make_args = REFUSED[name]
    if mode != "training":
        check_in_mode(fn, make_args, mode)
        return
    with pytest.raises(UnsupportedMutationError, match="marks dirty an input"):
        aot.aot_function(fn, functional_nop)(*make_args())
