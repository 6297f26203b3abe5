"""Refusals of the fuzzer (seed 20) where eager has an answer, each now compared with eager.

A refusal is right only where eager's own result depends on the order a kernel writes in; these are not.
"""

from __future__ import annotations

import pytest
import torch

import aot
from aot.errors import UnsupportedMutationError
from tests.functions import ScaledBySaved, WithSign
from tests.oracle import MODES, check_in_mode


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


# set_() under no_grad moves a leaf requiring grad to memory of another shape: eager's gradients of its later
# uses have the new shape (its ``.grad`` too), views taken before take their history again from it there.
def _leaf_onto_clone_of_other_shape(a0, a1):
    with torch.no_grad():
        a1.set_(a0.clone())
    v = a1 * 2
    return (a1, a0, v, sum(t.real.sum() for t in (a0, a1, v)))


def _inference_input_and_strided_leaf():
    g = _gen()
    with torch.inference_mode():
        i0 = torch.randn(4, 3, generator=g).t()
    return i0, torch.randn(3, 3, generator=g).t().detach().requires_grad_()


def _leaf_written_then_moved(a0, a1):
    with torch.no_grad():
        a1.mul_(2)
        a1.set_(a0.clone())
    return (a1.sin(),)


def _strided_input_and_strided_leaf():
    g = _gen()
    return torch.randn(4, 3, generator=g).t(), torch.randn(3, 3, generator=g).t().detach().requires_grad_()


def _view_taken_before_used_after(a0):
    v0 = a0.expand(2, 2, 2)
    with torch.no_grad():
        a0.set_(v0.clone())
    v1 = v0 * 3
    return (v1, sum(t.real.sum() for t in (a0, v0, v1)))


def _small_leaf():
    return (torch.randn(2, 2, generator=_gen()).requires_grad_(),)


MOVED_LEAVES = {
    # Program 300 of seed 20 (its set_() and uses).
    "onto_clone_of_other_shape": (_leaf_onto_clone_of_other_shape, _inference_input_and_strided_leaf),
    "written_then_moved": (_leaf_written_then_moved, _strided_input_and_strided_leaf),
    # Program 647 of seed 20.
    "view_taken_before_used_after": (_view_taken_before_used_after, _small_leaf),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(MOVED_LEAVES))
def test_leaf_moved_to_new_shape(name, mode):
    check_in_mode(*MOVED_LEAVES[name], mode)


# Program 2034 of seed 20: an autograd.Function took the leaf before its move, so eager's backward gets a gradient
# of the old shape beside those of the new (and raises): still refused, before anything is written.
def _function_took_leaf_before_move(a0):
    v0, v1 = WithSign.apply(a0)
    v2 = v1[1:]
    with torch.no_grad():
        a0.set_(v2.detach())
    return (sum(t.real.sum() for t in (a0, v0, v1, v2)),)


def test_function_took_leaf_before_move_refused():
    a0 = torch.randn(3, 4, generator=_gen()).requires_grad_()
    before = (a0.detach().clone(), a0.shape, a0._version)
    with pytest.raises(UnsupportedMutationError, match="set_"):
        aot.aot_function(_function_took_leaf_before_move, aot.nop)(a0)
    assert torch.equal(before[0], a0.detach()) and before[1:] == (a0.shape, a0._version)


# An autograd.Function's backward writes what it saved, an input the function also wrote (its new value, which
# the caller's tensor holds after the call): eager's backward writes the caller's input; so does the compiled
# one (the forward returns the value before the backward, the backward writes the one it leaves into the input).
def _saved_input_written_through_data(a0, a1):
    v0 = ScaledBySaved.apply(a1, a1)
    a1.data.scatter_(0, torch.zeros((1, 2), dtype=torch.long), 2j)
    v1 = a1.clone()
    return (v0, a0, sum(t.real.sum() for t in (a0, a1, v0, v1)))


def _expanded_and_complex_leaf():
    g = _gen()
    s0 = torch.randn((), generator=g)
    return s0.expand(2), torch.randn(2, 3, generator=g, dtype=torch.complex64).t().detach().requires_grad_()


def _saved_view_of_written_base(a0, a1, a2):
    a1.data.mul_(a2)
    with torch.no_grad():
        v0 = a2.t()
    v1 = ScaledBySaved.apply(a1, v0)
    v2 = a1 @ a1.mT
    return (a1, sum(t.real.sum() for t in (a0, a1, a2, v0, v1, v2)))


def _halves_of_a_non_leaf_second_twice():
    s0 = torch.randn(48, generator=_gen()).requires_grad_()
    i1 = s0[24:48].view(4, 6)
    return s0[0:24].view(4, 6), i1, i1


def _saved_member_written_through_data(a1, a2):
    a1.data.index_add_(0, torch.tensor([0]), torch.ones_like(a1.data[:1]))
    v2 = ScaledBySaved.apply(a2, a1)
    return (sum(t.real.sum() for t in (a1, a2, v2)),)


def _overlapping_complex_views():
    s0 = torch.randn(24, generator=_gen(), dtype=torch.complex64).requires_grad_()
    return s0[3:15].view(3, 4)[:, 1], s0[5:11].view(2, 3)


BACKWARD_WRITES = {
    # Program 1765 of seed 20 (the written input is a member of a synthetic base, not all of it).
    "saved_member_written_through_data": (_saved_member_written_through_data, _overlapping_complex_views),
    # Program 515 of seed 20.
    "saved_input_written_through_data": (_saved_input_written_through_data, _expanded_and_complex_leaf),
    # Program 802 of seed 20 (a synthetic base: the inputs share a storage).
    "saved_view_of_written_base": (_saved_view_of_written_base, _halves_of_a_non_leaf_second_twice),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(BACKWARD_WRITES))
def test_backward_writes_written_input(name, mode):
    check_in_mode(*BACKWARD_WRITES[name], mode)
