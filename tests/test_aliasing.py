"""Outputs that are inputs, views of inputs, or views of intermediates come back as eager returns them."""

from __future__ import annotations

import pytest
import torch

import aot
from tests.oracle import check


def leaf(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).requires_grad_()


def _mutating_the_output_mutates_the_input(fn, x):
    compiled = aot.aot_function(fn, aot.nop)
    with torch.no_grad():
        outs = compiled(x)
    view = outs[0] if isinstance(outs, tuple) else outs
    with torch.no_grad():
        view.mul_(0)
    return x


ALIASING_PROGRAMS = {
    "is_input": lambda x: x,
    "is_input_and_compute": lambda x: (x, x * 2),
    "view_chain": lambda x: x.transpose(0, 2)[1:].unsqueeze(-1).expand(-1, 3, 4, 5),
    "several_views_of_one_input": lambda x: (x[0], x.view(-1), x.permute(2, 0, 1), x.sum()),
    "view_of_intermediate": lambda x: (x * 2).view(-1),
    "two_views_of_one_intermediate": lambda x: (lambda y: (y[0], y.t().unsqueeze(0)))((x * 2).flatten(1)),
    "intermediate_and_its_view": lambda x: (lambda y: (y, y[1:], y.diagonal(0, 1, 2)))(x.exp()),
    "view_before_base": lambda x: (lambda y: (y.select(2, 0), y))(x.cos()),
    "same_output_twice": lambda x: (lambda y: (y, y))(x + 1),
    "same_view_twice": lambda x: (lambda v: (v, v))(x.t() if x.dim() == 2 else x[0]),
    "detach_of_input": lambda x: (x.detach(), x * 3),
    "detach_of_intermediate": lambda x: (lambda y: (y, y.detach()[0]))(x * 3),
    "split_and_unbind": lambda x: (*x.split(1, 0), *(x * 2).unbind(1)),
    "chunk_of_intermediate": lambda x: (x.sin()).chunk(2, 2),
    "alias_and_as_strided": lambda x: (torch.ops.aten.alias(x), x.as_strided((2, 2), (1, 2), 1)),
    "view_dtype": lambda x: (x * 1).view(torch.int32),
    "unflatten_and_movedim": lambda x: (x.unflatten(2, (1, 4)), x.movedim(0, -1)),
    "real_of_complex": lambda x: torch.view_as_real(torch.complex(x, x * 2)),
}


@pytest.mark.parametrize("name", list(ALIASING_PROGRAMS))
def test_aliasing_outputs_match_eager(name):
    check(ALIASING_PROGRAMS[name], lambda: (leaf(2, 3, 4),))


@pytest.mark.parametrize("name", list(ALIASING_PROGRAMS))
def test_aliasing_outputs_without_grad(name):
    check(ALIASING_PROGRAMS[name], lambda: (leaf(2, 3, 4).detach(),))


def test_view_output_shares_the_input_storage_and_base():
    x = leaf(3, 4)
    out = aot.aot_function(lambda t: t.t()[1:], aot.nop)(x)
    assert out._base is x and out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert out.grad_fn is not None and "Slice" in type(out.grad_fn).__name__
    with torch.no_grad():
        out.zero_()
    assert (x[:, 1:] == 0).all() and (x[:, 0] != 0).all()


def test_views_of_one_intermediate_share_its_storage():
    def f(x):
        y = x * 2
        return y[0], y[1]

    a, b = aot.aot_function(f, aot.nop)(leaf(2, 3))
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert a._base is not None and a._base is b._base


def test_view_of_non_leaf_input_keeps_the_chain():
    def make():
        base = leaf(4, 4)
        return (base * 1,)

    check(lambda x: (x.t(), x[0]), make)


def test_view_made_under_no_grad_inside_the_function():
    def f(x):
        with torch.no_grad():
            v = x[0]
        return v, x * 2

    check(f, lambda: (leaf(3, 3),))


def test_view_of_input_that_is_itself_a_view():
    def make():
        base = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
        return (base[1:],)

    compiled = aot.aot_function(lambda x: x.t(), aot.nop)
    (x,) = make()
    out = compiled(x)
    assert out._base is x._base
    check(lambda x: x.t(), make)
