"""Fuzzer class of seed 29 program 165 (aliasing, storage/_base of outputs): an autograd.Function returns a view
of a tensor the function made, and the function returns that tensor too. Eager's Function output is a view of
it (``_base``, memory shared) with the Function's history; the compiled one was a view of the graph's own value
of it, whose ``_base`` was no output. Each program in every mode, on a leaf, a view of a leaf, a non-leaf and a
tensor needing no grad; eager is the oracle."""

from __future__ import annotations

import pytest
import torch

from tests.functions import ViewOf
from tests.oracle import MODES, check_in_mode


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


class SelectOf(torch.autograd.Function):
    """``x[1]``; its backward doubles the gradient."""

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.select(0, 1)

    @staticmethod
    def backward(ctx, grad):
        out = grad.new_zeros(ctx.shape)
        out[1] = grad * 2
        return out


class FlatOf(torch.autograd.Function):
    """``x.view(-1)``; its backward doubles the gradient."""

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.view(-1)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(ctx.shape) * 2


class TransposeOf(torch.autograd.Function):
    """``x.t()``; its backward doubles the gradient."""

    @staticmethod
    def forward(ctx, x):
        return x.t()

    @staticmethod
    def backward(ctx, grad):
        return grad.t() * 2


class EveryOtherOf(torch.autograd.Function):
    """``x.as_strided`` over elements 1 and 3 of ``x`` (contiguous); its backward doubles the gradient."""

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.as_strided((2,), (2,), x.storage_offset() + 1)

    @staticmethod
    def backward(ctx, grad):
        out = grad.new_zeros(ctx.shape).reshape(-1)
        out[1], out[3] = grad[0], grad[1]
        return out.reshape(ctx.shape) * 2


def _shrunk(a0):  # seed 29 program 165, shrunk
    v0 = a0.flip(0)
    v1 = ViewOf.apply(v0)
    return (v1, v0)


def _made(a, how):
    return {"flip": a[:12].flip(0), "mul": a[:12] * 2, "matrix": a[:12].reshape(3, 4).clone()}[how]


FUNCTIONS = {
    "view_as": ViewOf,
    "select": SelectOf,
    "view": FlatOf,
    "transpose": TransposeOf,
    "as_strided": EveryOtherOf,
}


def _program(function, made, returns):
    def f(a):
        v = _made(a, made)
        if returns == "with_base":
            return function.apply(v), v
        if returns == "base_first":
            return v, function.apply(v)
        if returns == "of_a_view_with_base":  # eager's _base is still v, the chain goes through v[1:]
            return function.apply(v[1:]), v
        if returns == "with_base_and_view":
            return function.apply(v), v, v[0]
        if returns == "repeated_before_base":
            w = function.apply(v)
            return w, w, v
        assert returns == "nested", returns
        return ViewOf.apply(function.apply(v)), v

    return f


def _made_leaf_base(a):
    # Eager's _base is a detach() alias made a leaf: an output no view of another (the recorder's root is above).
    v = (a[:12] * 2).detach().requires_grad_()
    w = ViewOf.apply(v)
    return w, w, v, v[1:]


def _written_under_no_grad(a):
    v = a[:12] * 2
    w = ViewOf.apply(v)
    with torch.no_grad():
        v.add_(1)
    return w, v


PROGRAMS = {"shrunk": _shrunk, "made_leaf_base": _made_leaf_base, "written_under_no_grad": _written_under_no_grad}
for _fname, _function in FUNCTIONS.items():
    for _how in ("flip", "mul", "matrix"):
        if (_fname == "transpose") != (_how == "matrix"):
            continue  # (a 2-d tensor for t(); the others on the 1-d ones)
        for _returns in ("with_base", "base_first", "of_a_view_with_base", "with_base_and_view"):
            PROGRAMS[f"{_fname}_{_how}_{_returns}"] = _program(_function, _how, _returns)
for _returns in ("repeated_before_base", "nested"):
    PROGRAMS[f"view_as_mul_{_returns}"] = _program(ViewOf, "mul", _returns)

INPUTS = {
    "leaf": lambda: (torch.randn(24, generator=_gen()).requires_grad_(),),
    "leaf_view": lambda: (torch.randn(24, generator=_gen()).requires_grad_()[2:14],),
    "non_leaf": lambda: (torch.randn(24, generator=_gen()).requires_grad_() * 2,),
    "plain": lambda: (torch.randn(24, generator=_gen()),),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("inputs", sorted(INPUTS))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_function_view_of_returned_tensor(name, inputs, mode):
    check_in_mode(PROGRAMS[name], INPUTS[inputs], mode)
