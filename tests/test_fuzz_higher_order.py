"""Higher-order derivatives through autograd.Functions (issue 16): eager differentiates a Function's output
through the Function's backward, which need not be its forward's derivative. The higher-order backward
recomputes the forward's saved values with autograd; it applies the Function again there rather than run
its forward's ops (``aot.compile.function_outputs``). Eager is the oracle (``tests/oracle.py``)."""

from __future__ import annotations

import pytest
import torch

import aot
from tests.functions import (
    DoublesInPlace,
    DoublesScaledInBackward,
    ExpWithOtherBackward,
    Identity,
    PairWithOtherBackward,
    TimesConstant,
    ViewOf,
    WithSign,
)
from tests.oracle import MODES, assert_close, check_in_mode, derivatives


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _x_and_plain_scale():
    g = _gen()
    return (torch.randn(2, 4, generator=g).requires_grad_(), torch.randn(3, 2, generator=g))


def _x_and_graded_scale():  # a saved tensor requiring grad
    g = _gen()
    return (torch.randn(2, 4, generator=g).requires_grad_(), torch.randn(3, 2, generator=g).requires_grad_())


def _x_and_nonleaf_scale():
    g = _gen()
    return (torch.randn(2, 4, generator=g).requires_grad_(), torch.randn(3, 2, generator=g).requires_grad_() * 1)


def _x():
    return (torch.randn(2, 4, generator=_gen()).requires_grad_(),)


def _once(x, scale):
    return (DoublesScaledInBackward.apply(x, scale).sin(),)


def _chained(x, scale):
    return (DoublesScaledInBackward.apply(DoublesScaledInBackward.apply(x, scale), scale).sin(),)


def _twice_multiplied(x, scale):
    return ((DoublesScaledInBackward.apply(x, scale) * DoublesScaledInBackward.apply(x.cos(), scale)).sum(),)


def _on_intermediates(x, scale):
    return (DoublesScaledInBackward.apply(x.sin(), scale * 2).tanh(),)


def _on_detached_input(x, scale):
    return (DoublesScaledInBackward.apply(x.detach(), scale).sin() * x,)


def _under_no_grad_beside(x, scale):
    with torch.no_grad():
        y = DoublesScaledInBackward.apply(x, scale)
    return (y.sin() + x.sin(),)


def _saving_input_and_output(x):
    return (ExpWithOtherBackward.apply(x).sin(),)


def _saving_input_and_output_twice(x):
    return (ExpWithOtherBackward.apply(ExpWithOtherBackward.apply(x) * 0.5).sum(),)


def _with_number(x):
    return (TimesConstant.apply(x, 3.0).sin(),)


def _two_outputs(x):
    a, b = PairWithOtherBackward.apply(x)
    return (a.sin() * b.cos(),)


def _identity(x):
    return (Identity.apply(x * 1).sin(),)


def _view_of(x):
    return (ViewOf.apply(x * 1).sin(),)


def _with_sign(x):
    return (WithSign.apply(x)[0].sin(),)


def _doubles_in_place(x):
    return (DoublesInPlace.apply(x * 1).sin(),)


_SCALED = [_x_and_plain_scale, _x_and_graded_scale, _x_and_nonleaf_scale]
PROGRAMS = {
    "once": (_once, _SCALED),
    "chained": (_chained, _SCALED),
    "twice_multiplied": (_twice_multiplied, _SCALED),
    "on_intermediates": (_on_intermediates, _SCALED),
    "on_detached_input": (_on_detached_input, _SCALED),
    "under_no_grad_beside": (_under_no_grad_beside, [_x_and_plain_scale]),
    "saving_input_and_output": (_saving_input_and_output, [_x]),
    "saving_input_and_output_twice": (_saving_input_and_output_twice, [_x]),
    "with_number": (_with_number, [_x]),
    "two_outputs": (_two_outputs, [_x]),
    "identity": (_identity, [_x]),
    "view_of": (_view_of, [_x]),
    "with_sign": (_with_sign, [_x]),
    "doubles_in_place": (_doubles_in_place, [_x]),
}
CASES = [
    pytest.param(fn, make_args, id=f"{name}-{make_args.__name__.lstrip('_')}")
    for name, (fn, makers) in PROGRAMS.items()
    for make_args in makers
]


def _check_derivatives(fn, make_args, order) -> None:
    """The first ``order`` derivatives of ``fn`` compiled equal eager's."""
    eager = derivatives(fn, list(make_args()), order)
    compiled = derivatives(aot.aot_function(fn, aot.nop), list(make_args()), order)
    assert_close(compiled, eager, grad=True)


def _check_hvp(fn, make_args) -> None:
    """The Hessian-vector product of ``fn``'s first output summed, compiled, equals eager's."""

    def scalar(f):
        return lambda *args: f(*args)[0].sum()

    inputs = tuple(t.detach() for t in make_args())
    v = tuple(torch.randn(t.shape, generator=_gen()) for t in inputs)
    eager = torch.autograd.functional.hvp(scalar(fn), inputs, v)
    compiled = torch.autograd.functional.hvp(scalar(aot.aot_function(fn, aot.nop)), inputs, v)
    assert_close(compiled, eager)


@pytest.mark.parametrize("order", [2, 3])
@pytest.mark.parametrize(("fn", "make_args"), CASES)
def test_function_differentiated_again(fn, make_args, order) -> None:
    _check_derivatives(fn, make_args, order)


@pytest.mark.parametrize(("fn", "make_args"), CASES)
def test_function_hvp(fn, make_args) -> None:
    _check_hvp(fn, make_args)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("fn", "make_args"), CASES)
def test_function_first_order(fn, make_args, mode) -> None:
    check_in_mode(fn, make_args, mode)


class _IgnoresSecond(torch.autograd.Function):
    """Doubles ``x``, ignoring ``other`` (nothing reads it: the graphs hold no node of it); ``backward``: a factor."""

    factor = 2

    @staticmethod
    def forward(ctx, x, other):
        return x * 2

    @classmethod
    def backward(cls, ctx, grad):
        return grad * cls.factor, None


class _IgnoresSecondOtherBackward(_IgnoresSecond):
    factor = 3


class _IgnoresSecondGradsBoth(torch.autograd.Function):
    """Doubles ``x``, ignoring ``other``; ``backward`` gives ``other`` a gradient that reads no value of it either."""

    @staticmethod
    def forward(ctx, x, other):
        ctx.shape = other.shape
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 3, grad.sum() * torch.full(ctx.shape, 0.5)


def _dead_argument(function, argument):
    def fn(x, w):
        return (function.apply(x, argument(x, w)).sin(),)

    return fn


def _tripled(x, w):
    return w * 3


def _view_of_intermediate(x, w):  # a view of a value nothing else reads
    return w.exp()[1:]


def _from_both(x, w):
    return x.sum() * w


def _detached(x, w):
    return w.detach() * 2


class _SquareWithOtherBackward(torch.autograd.Function):
    """``w * w``, saving its input only (its output is dead where nothing else reads it); backward: another."""

    @staticmethod
    def forward(ctx, w):
        ctx.save_for_backward(w)
        return w * w

    @staticmethod
    def backward(ctx, grad):
        (w,) = ctx.saved_tensors
        return grad * 5 * w.cos()


def _through_function(x, w):  # computed by another Function: applied again too
    return _SquareWithOtherBackward.apply(w * 2)


def _x_and_w():
    g = _gen()
    return (torch.randn(2, 4, generator=g).requires_grad_(), torch.randn(3, generator=g).requires_grad_())


def _x_and_nonleaf_w():
    g = _gen()
    return (torch.randn(2, 4, generator=g).requires_grad_(), torch.randn(3, generator=g).requires_grad_() * 1)


def _x_and_plain_w():
    g = _gen()
    return (torch.randn(2, 4, generator=g).requires_grad_(), torch.randn(3, generator=g))


# An argument nothing reads has no node to apply the Function to again: it is computed again from the primals.
DEAD_ARGUMENTS = [
    pytest.param(
        _dead_argument(function, argument),
        make_args,
        id=f"{function.__name__}-{argument.__name__}-{make_args.__name__.lstrip('_')}",
    )
    for function in (_IgnoresSecond, _IgnoresSecondOtherBackward, _IgnoresSecondGradsBoth)
    for argument in (
        _tripled,
        _view_of_intermediate,
        _from_both,
        _detached,
        _through_function,
    )
    for make_args in (_x_and_w, _x_and_nonleaf_w, _x_and_plain_w)
]


@pytest.mark.parametrize("order", [2, 3])
@pytest.mark.parametrize(("fn", "make_args"), DEAD_ARGUMENTS)
def test_function_with_dead_argument(fn, make_args, order) -> None:
    _check_derivatives(fn, make_args, order)


@pytest.mark.parametrize(("fn", "make_args"), DEAD_ARGUMENTS)
def test_function_with_dead_argument_hvp(fn, make_args) -> None:
    _check_hvp(fn, make_args)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("fn", "make_args"), DEAD_ARGUMENTS)
def test_function_with_dead_argument_first_order(fn, make_args, mode) -> None:
    check_in_mode(fn, make_args, mode)


# A Function's output that is another Function's argument and saved: the partitioner recomputes it in the backward,
# where the higher-order backward applies the Function again too.
def _saved_function_output(x, w):
    return ExpWithOtherBackward.apply(w)


def _saved_function_output_of_intermediate(x, w):
    return ExpWithOtherBackward.apply(w * 2)[1:]


RECOMPUTED_IN_BACKWARD = [
    pytest.param(
        _dead_argument(function, argument),
        make_args,
        id=f"{function.__name__}-{argument.__name__}-{make_args.__name__.lstrip('_')}",
    )
    for function in (_IgnoresSecondOtherBackward, _IgnoresSecondGradsBoth)
    for argument in (_saved_function_output, _saved_function_output_of_intermediate)
    for make_args in (_x_and_w, _x_and_nonleaf_w)
]


@pytest.mark.parametrize("order", [2, 3])
@pytest.mark.parametrize(("fn", "make_args"), RECOMPUTED_IN_BACKWARD)
def test_function_output_recomputed_in_backward(fn, make_args, order) -> None:
    _check_derivatives(fn, make_args, order)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("fn", "make_args"), RECOMPUTED_IN_BACKWARD)
def test_function_output_recomputed_in_backward_first_order(fn, make_args, mode) -> None:
    check_in_mode(fn, make_args, mode)


# Writes the graphs hold functionalized, as aten.copy (no derivative in torch) and as_strided_scatter (torch's
# derivative for its base sends the kept elements' gradient to the overwritten ones): the higher-order backward
# recomputes them, or differentiates a backward holding them (an as_strided view's gradient), with grad mode on.
def _leaf():
    return (torch.randn(3, 2, generator=_gen()).requires_grad_(),)


def _nonleaf():
    return (torch.randn(3, 2, generator=_gen()).requires_grad_() * 1,)


def _as_strided_read(a):
    return (a.as_strided((2, 3), (1, 2)).sin() * a.sum(),)


def _selected_row_written(a):
    b = a * 1
    b[0] = a[1] * 2
    return (b.sin(),)


def _slice_copied_into(a):
    b = a * 3
    b[:, :1].copy_(a[:, 1:].tanh())
    return (b.sin().sum(),)


def _copied_into_other_dtype(a):
    b = torch.zeros(3, 2, dtype=torch.float64)
    b.copy_(a.sin())
    return ((b * b).sum(),)


def _as_strided_view_written(a):
    b = a * 2
    b.as_strided((2,), (3,)).copy_(a[0] * a[1])
    return (b.cos(),)


def _function_after_as_strided_write(a):
    b = a * 2
    b.as_strided((2,), (3,)).mul_(3)
    return (DoublesScaledInBackward.apply(b, a).sin(),)


WRITES = [
    pytest.param(fn, make_args, id=f"{fn.__name__.lstrip('_')}-{make_args.__name__.lstrip('_')}")
    for fn in (
        _as_strided_read,
        _selected_row_written,
        _slice_copied_into,
        _copied_into_other_dtype,
        _as_strided_view_written,
        _function_after_as_strided_write,
    )
    for make_args in (_leaf, _nonleaf)
]


@pytest.mark.parametrize("order", [2, 3, 4])
@pytest.mark.parametrize(("fn", "make_args"), WRITES)
def test_write_differentiated_again(fn, make_args, order) -> None:
    _check_derivatives(fn, make_args, order)


@pytest.mark.parametrize(("fn", "make_args"), WRITES)
def test_write_hvp(fn, make_args) -> None:
    _check_hvp(fn, make_args)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("fn", "make_args"), WRITES)
def test_write_first_order(fn, make_args, mode) -> None:
    check_in_mode(fn, make_args, mode)
