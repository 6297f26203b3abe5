"""Issue 11's aliasing and autograd programs, compiled vs eager.

Metadata mutation beside a synthetic base, autograd.Functions returning their
input or a view of it, ``requires_grad_`` inside the function, ``set_`` on an
input, and mutations in an autograd.Function's backward.
"""

from __future__ import annotations

import pytest
import torch

from tests.functions import DoublesInPlace, Identity, ScalesBySavedThenDoublesIt, TriplesGradOutput
from tests.oracle import check, params_with_known_wrong


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# 1. A metadata mutation of one input beside a synthetic base of two others.
def _meta_beside_base(a, b, c):
    c.mul_(2)
    b.t_()
    tmp = a + c
    return tmp.view(-1), b.t(), tmp.view(-1).unsqueeze(0)


def _meta_beside_base_args(grad: bool):
    def make():
        base1 = torch.ones(2, 2, requires_grad=grad)
        base2 = torch.ones(2, 2, requires_grad=grad)
        x = base1.add(1)
        return x.view(-1), base2.add(1), x.view(-1)

    return make


# 2. autograd.Functions
class ViewOfInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view(-1)

    @staticmethod
    def backward(ctx, gx):
        return gx.view(2, 3) * 3


class NonDifferentiable(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        index = x.argmax().reshape(1).float()
        ctx.mark_non_differentiable(index)
        return x * 2, index

    @staticmethod
    def backward(ctx, gx, gindex):
        return gx * 2


def _leaf(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(0)).requires_grad_()


def _requires_grad_on_view(a):
    a_view = a.view(-1)
    a_view.requires_grad_(True)
    return a_view


def _requires_grad_on_intermediate(a):
    y = a * 2
    y.requires_grad_(True)
    return y * 3


def _set_under_no_grad(a):
    b = torch.arange(6.0).view(2, 3)
    with torch.no_grad():
        a.set_(b)
    return a * 1


def _set_then_write(a):
    b = torch.arange(6.0).view(2, 3)
    with torch.no_grad():
        a.set_(b)
        a.mul_(2)
    return a * 1


def _set_intermediate_onto_view(x):
    y = x * 2
    z = torch.zeros(3)
    z.set_(y[1])
    return z * 1, y


def _requires_grad_on_input(a):
    a.requires_grad_()
    return a, a * 2


def _unsqueeze_leaf_under_no_grad(a):
    with torch.no_grad():
        a.unsqueeze_(0)
    return a * 1


def _set_onto_self(a):
    with torch.no_grad():
        a.set_(a)
    return a * 1


def _set_onto_other_input(a, b):
    a.set_(b)
    return a * 2


def _set_onto_clone_of_other(a, b):
    a.set_(b.clone())
    return b


def _set_onto_own_sin(a):
    a.set_(a.sin())
    return a


def _set_onto_view_detached(a):
    v = a.select(0, 0)
    with torch.no_grad():
        a.set_(v.detach())
    return a + v


def _set_onto_returned(a):
    v = a * 2
    a.set_(v)
    return v, a


PROGRAMS = {
    "set_onto_self": (_set_onto_self, lambda: (_leaf(48)[24:48].view(4, 6),)),
    "set_onto_other_input": (_set_onto_other_input, lambda: (torch.zeros(3), torch.arange(4.0))),
    "set_onto_clone_of_other": (
        _set_onto_clone_of_other,
        lambda: (lambda s: (s[0:12].view(3, 4), s[7:19].view(3, 4)))(torch.randn(19, generator=_gen(0))),
    ),
    "set_onto_own_sin": (_set_onto_own_sin, lambda: (torch.randn(5, generator=_gen(0)),)),
    "set_onto_view_detached": (_set_onto_view_detached, lambda: (torch.randn(2, 8, generator=_gen(0))[:, ::2],)),
    "set_onto_returned": (_set_onto_returned, lambda: (torch.randn(5, generator=_gen(0)),)),
    "requires_grad_on_input": (_requires_grad_on_input, lambda: ((_leaf(2, 8) * 1)[:, 2].detach(),)),
    "metadata_mutation_of_leaf_under_no_grad": (_unsqueeze_leaf_under_no_grad, lambda: (_leaf(3, 4),)),
    "metadata_mutation_beside_synthetic_base": (_meta_beside_base, _meta_beside_base_args(False)),
    "metadata_mutation_beside_synthetic_base_grad": (_meta_beside_base, _meta_beside_base_args(True)),
    "function_returning_its_input": (lambda x: Identity.apply(x), lambda: (_leaf(3),)),
    "function_returning_its_input_of_non_leaf": (lambda x: Identity.apply(x * 1), lambda: (_leaf(3),)),
    "function_returning_a_view": (lambda x: ViewOfInput.apply(x * 1), lambda: (_leaf(2, 3),)),
    "function_marking_dirty": (lambda x: DoublesInPlace.apply(x * 1) + 1, lambda: (_leaf(3),)),
    "function_marking_dirty_input": (lambda x: DoublesInPlace.apply(x), lambda: (_leaf(3) * 1,)),
    "function_non_differentiable_output": (lambda x: NonDifferentiable.apply(x), lambda: (_leaf(4),)),
    "requires_grad_on_view_of_input": (_requires_grad_on_view, lambda: (torch.randn(2, 3, generator=_gen(0)),)),
    "requires_grad_on_intermediate": (_requires_grad_on_intermediate, lambda: (torch.randn(3, generator=_gen(0)),)),
    "set_on_input_under_no_grad": (_set_under_no_grad, lambda: (torch.zeros(2, 3),)),
    "set_on_input_then_write": (_set_then_write, lambda: (torch.zeros(2, 3),)),
    "set_intermediate_onto_view": (_set_intermediate_onto_view, lambda: (_leaf(2, 3),)),
    "backward_mutates_saved_input": (
        lambda x, s: ScalesBySavedThenDoublesIt.apply(x, s),
        lambda: (_leaf(3), torch.full((3,), 2.0)),
    ),
    "backward_mutates_grad_output": (lambda x: TriplesGradOutput.apply(x), lambda: (_leaf(3),)),
}

KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("name", params_with_known_wrong(PROGRAMS, KNOWN_WRONG, "training"))
def test_training(name):
    fn, make = PROGRAMS[name]
    check(fn, make)


@pytest.mark.parametrize("name", params_with_known_wrong(PROGRAMS, KNOWN_WRONG, "inference"))
def test_inference(name):
    fn, make = PROGRAMS[name]
    with torch.no_grad():
        check(fn, make, backward=False)
