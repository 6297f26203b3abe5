"""An input needing no grad that the function makes a leaf (``requires_grad_()``, ``requires_grad = True``), whose
``.grad`` the backward then fills (seed 23 of ``benchmarks/fuzz_mutation.py``). Eager is the oracle
(``tests/oracle.py``).

- A view of it taken before, changed in place where autograd recorded nothing (``unsqueeze_``, a write needing
  no grad): eager's record of the view is stale, read after it takes the view's history again from the leaf. The
  compiled function's record moved with the change, its use was none of the leaf's (program 1418).
"""

from __future__ import annotations

import pytest
import torch

from tests.oracle import MODES, check_in_mode


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _total(*tensors: torch.Tensor) -> torch.Tensor:
    return sum(t.real.sum() for t in tensors)  # type: ignore[return-value]


# A view taken before requires_grad_(), changed where autograd recorded nothing.


def _expanded_then_unsqueezed(a0):  # program 1418
    v0 = a0.expand(2, 5)
    v0.unsqueeze_(0)
    a0.requires_grad_()
    return (_total(a0, v0),)


def _expanded_then_unsqueezed_attribute(a0):
    v0 = a0.expand(2, 5)
    v0.unsqueeze_(0)
    a0.requires_grad = True
    return (_total(a0, v0),)


def _sliced_then_transposed(a0):
    v0 = a0[:, 1:]
    v0.transpose_(0, 1)
    a0.requires_grad_()
    return (v0 * 2, a0.sum())


def _transposed_then_written(a0):
    v0 = a0.t()
    v0.mul_(2)
    a0.requires_grad_()
    return (_total(a0, v0 * v0),)


def _unsqueezed_under_no_grad(a0):
    v0 = a0[1:]
    with torch.no_grad():
        v0.unsqueeze_(1)
    a0.requires_grad_()
    return (v0 * 3, a0.sum())


def _unsqueezed_after(a0):
    v0 = a0.expand(2, 5)
    a0.requires_grad_()
    v0.unsqueeze_(0)
    return (_total(a0, v0),)


def _view_taken_after(a0):
    a0.requires_grad_()
    v0 = a0.expand(2, 5)
    v0.unsqueeze_(0)
    return (_total(a0, v0),)


PROGRAMS = {
    "expanded_then_unsqueezed": (_expanded_then_unsqueezed, lambda: (_randn(5),)),
    "expanded_then_unsqueezed_attribute": (_expanded_then_unsqueezed_attribute, lambda: (_randn(5),)),
    "expanded_then_unsqueezed_view_input": (_expanded_then_unsqueezed, lambda: (_randn(8)[2:7],)),
    "sliced_then_transposed": (_sliced_then_transposed, lambda: (_randn(3, 4),)),
    "transposed_then_written": (_transposed_then_written, lambda: (_randn(3, 4),)),
    "unsqueezed_under_no_grad": (_unsqueezed_under_no_grad, lambda: (_randn(5),)),
    "unsqueezed_after": (_unsqueezed_after, lambda: (_randn(5),)),
    "view_taken_after": (_view_taken_after, lambda: (_randn(5),)),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", PROGRAMS)
def test_made_leaf(name: str, mode: str) -> None:
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)
