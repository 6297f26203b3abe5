"""Fuzzer class of seed 28 (program 5047): an autograd.Function whose backward writes its ``grad_output`` in
place (``TriplesGradOutput``), where that gradient is also a leaf's (``sum``'s expanded gradient of a leaf input,
the same tensor ``add`` sends along two edges) (``wrong: grad of autograd leaf``). The fuzzer's program reached it
through a leaf made of an input's memory restrided under ``no_grad``; the restriding plays no part.

Eager's AccumulateGrad runs as soon as a leaf's gradient is complete, and stores a copy of a gradient another
node still holds or laid out unlike the leaf: a Function's backward run after it (created before the leaf's
last use) does not change ``.grad``. The trace captured the gradient as the tensor itself, and the write landed
in it. Variants: leaf and non-leaf inputs, views of leaves, leaves the function made, the Function before and
after the leaf's use; in every mode, eager the oracle.
"""

from __future__ import annotations

import pytest
import torch

from tests.functions import TriplesGradOutput
from tests.oracle import check, check_in_mode, mode_params


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _fuzzed_args():
    g = _gen()
    i0 = torch.randn(2, 2, generator=g).requires_grad_()
    s1 = torch.randn(24, generator=g)
    return (i0, s1[1:7].view(2, 3))


def _fuzzed(a0, a1):
    v0 = a1.narrow(-1, 1, 2)
    with torch.no_grad():
        a1.as_strided_((1,), (1,), 18)
        v1 = a1.select(0, 0)
    v1.requires_grad_()
    v2 = TriplesGradOutput.apply(v1)
    return (sum(t.real.sum() for t in (a0, a1, v0, v1, v2)),)


def _leaves():
    g = _gen()
    return (torch.randn(2, 2, generator=g).requires_grad_(), torch.randn(2, 2, generator=g).requires_grad_())


def _products():
    a0, a1 = _leaves()
    return (a0.mul(1), a1)


def _views_of_leaves():
    a0, a1 = _leaves()
    return (a0.view(4), a1)


def _leaf_and_ungraded():
    g = _gen()
    return (torch.randn(2, 2, generator=g).requires_grad_(), torch.randn(2, 2, generator=g))


def _summed(a0, a1):
    return (sum(t.sum() for t in (a0, TriplesGradOutput.apply(a1))),)


def _summed_after(a0, a1):
    s = a0.sum()
    return (s + TriplesGradOutput.apply(a1).sum(),)


def _made_leaf_summed(a0, a1):
    v1 = torch.tensor(3.0).requires_grad_()
    t = TriplesGradOutput.apply(v1).sum()
    return (a0.sum() + t,)


def _made_leaf_of_input(a0, a1):
    with torch.no_grad():
        v1 = a1.select(0, 0)
    v1.requires_grad_()
    return (sum(t.sum() for t in (a0, TriplesGradOutput.apply(v1))),)


def _added(a0, a1):
    return (a0 + TriplesGradOutput.apply(a1).view(a0.shape),)


def _added_first(a0, a1):
    return (TriplesGradOutput.apply(a1).view(a0.shape) + a0,)


def _added_made_leaf(a0, a1):
    v = torch.ones(a0.shape).requires_grad_()
    return (a0 + TriplesGradOutput.apply(v),)


def _scaled(a0, a1):
    return (a0 * 2 + TriplesGradOutput.apply(a1).view(a0.shape),)


INPUTS = {
    "leaves": _leaves,
    "products": _products,
    "views_of_leaves": _views_of_leaves,
    "leaf_and_ungraded": _leaf_and_ungraded,
}
FUNCTIONS = {
    "summed": _summed,
    "summed_after": _summed_after,
    "made_leaf_summed": _made_leaf_summed,
    "made_leaf_of_input": _made_leaf_of_input,
    "added": _added,
    "added_first": _added_first,
    "added_made_leaf": _added_made_leaf,
    "scaled": _scaled,
}
PROGRAMS = {f"{fn}-{arg}": (FUNCTIONS[fn], INPUTS[arg]) for fn in FUNCTIONS for arg in INPUTS}
PROGRAMS["fuzzed"] = (_fuzzed, _fuzzed_args)
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_grad_output_written_class(name, mode):
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)


def test_grad_output_written_entry_reused():
    compiled = check(_added, _leaves)
    check(_added, _leaves, compiled_fn=compiled)
