"""Refusals of the fuzzer (seed 20) where eager has an answer, each now compared with eager.

A refusal is right only where eager's own result depends on the order a kernel writes in; these are not.
"""

from __future__ import annotations

import pytest
import torch

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
