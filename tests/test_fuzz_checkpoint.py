"""``torch.utils.checkpoint.checkpoint(fn, ..., use_reentrant=True)`` inside a compiled function (issue 16).

The reentrant checkpoint refuses to run inside ``torch.autograd.grad``, which traces the joint's backward: the
trace runs ``fn`` in its place (``aot.compile.checkpoints``). Values and first-order gradients are eager's; the
compiled backward raises eager's error where eager's checkpoint does (``autograd.grad``, ``backward(inputs=)``),
and refuses to be differentiated (eager's checkpoint gives gradients without history there). Eager is the
oracle (``tests/oracle.py``)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import aot
from aot.errors import DoubleBackwardError
from tests.oracle import MODES, check_in_mode, derivatives


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _reentrant(fn, *args):
    return checkpoint(fn, *args, use_reentrant=True)


def _sin_doubled(t):
    return t.sin() * 2


def _once(x, w):
    return (_reentrant(_sin_doubled, x).cos(),)


def _on_intermediate(x, w):
    return ((_reentrant(_sin_doubled, x.exp()) * w.sum()).tanh(),)


def _closure_weight(x, w):  # w reaches fn as a closure tensor: eager's checkpoint accumulates its gradient
    return (_reentrant(lambda t: (t * w[:1]).tanh(), x) + x,)


def _two_inputs_two_outputs(x, w):
    a, b = _reentrant(lambda s, t: (s * t[:1], s.sum() + t), x, w)
    return (a.sin(), b.cos())


def _chained(x, w):
    return (_reentrant(_sin_doubled, _reentrant(lambda t: t * w[:1], x)).sum(),)


def _view_inside(x, w):
    return (_reentrant(lambda t: t.t()[1:].exp(), x),)


def _returns_input(x, w):  # eager's Function returns it as a view of the input
    return (_reentrant(lambda t: t, x),)


def _returns_view_of_input(x, w):
    return (_reentrant(lambda t: t[1:], x * 1).exp(),)


def _returns_one_input(x, w):
    a, b = _reentrant(lambda s, t: (s, t * 2), x, w.exp())
    return (a * b,)


def _x_and_w():
    g = _gen()
    return (torch.randn(2, 3, generator=g).requires_grad_(), torch.randn(3, generator=g).requires_grad_())


def _nonleaf_x():
    g = _gen()
    return (torch.randn(2, 3, generator=g).requires_grad_() * 1, torch.randn(3, generator=g).requires_grad_())


def _plain_x():  # no argument of the checkpoint requires grad: eager's gives its outputs no history
    g = _gen()
    return (torch.randn(2, 3, generator=g), torch.randn(3, generator=g).requires_grad_())


PROGRAMS = [
    _once,
    _on_intermediate,
    _closure_weight,
    _two_inputs_two_outputs,
    _chained,
    _view_inside,
    _returns_input,
    _returns_view_of_input,
    _returns_one_input,
]
CASES = [
    pytest.param(fn, make_args, id=f"{fn.__name__.lstrip('_')}-{make_args.__name__.lstrip('_')}")
    for fn in PROGRAMS
    for make_args in (_x_and_w, _nonleaf_x, _plain_x)
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("fn", "make_args"), CASES)
def test_reentrant_checkpoint(fn, make_args, mode) -> None:
    check_in_mode(fn, make_args, mode)


def _error(run) -> BaseException | None:
    try:
        run()
    except RuntimeError as error:
        return error
    return None


def _eager_error(run) -> BaseException:
    error = _error(run)
    assert error is not None
    return error


@pytest.mark.parametrize(("fn", "make_args"), CASES[:2] + CASES[6:8])
def test_reentrant_checkpoint_grad_raises_as_eager(fn, make_args) -> None:
    """``torch.autograd.grad`` through the checkpoint: eager's raises, at first order and so at higher ones."""
    compiled = aot.aot_function(fn, aot.nop)
    for order in (2, 3):
        eager_error = _eager_error(lambda order=order: derivatives(fn, list(make_args()), order))
        compiled_error = _error(lambda order=order: derivatives(compiled, list(make_args()), order))
        assert type(compiled_error) is type(eager_error) and str(compiled_error) == str(eager_error)


def test_reentrant_checkpoint_backward_with_inputs_raises_as_eager() -> None:
    def run(f):
        x, w = _x_and_w()
        f(x, w)[0].sum().backward(inputs=[x])

    eager_error = _eager_error(lambda: run(_once))
    compiled_error = _error(lambda: run(aot.aot_function(_once, aot.nop)))
    assert type(compiled_error) is type(eager_error) and str(compiled_error) == str(eager_error)


def test_reentrant_checkpoint_differentiated_again_refused() -> None:
    """``backward(create_graph=True)``: eager's checkpoint gives gradients without history; the compiled
    function's first-order gradients are eager's, and differentiating them again is refused."""
    x, w = _x_and_w()
    _closure_weight(x, w)[0].sum().backward(create_graph=True)
    cx, cw = _x_and_w()
    aot.aot_function(_closure_weight, aot.nop)(cx, cw)[0].sum().backward(create_graph=True)
    torch.testing.assert_close(cx.grad, x.grad)
    torch.testing.assert_close(cw.grad, w.grad)
    with pytest.raises(DoubleBackwardError, match="reentrant"):
        (cx.grad * cx.grad).sum().backward()


def test_reentrant_checkpoint_with_dropout() -> None:
    """Eager's checkpoint draws the mask in its forward and replays that draw in its backward: the compiled
    function draws it once, and the random state after the backward is eager's too."""

    def fn(x):
        return (_reentrant(lambda t: torch.nn.functional.dropout(t.sin(), 0.5, True) * 2, x).cos(),)

    found = []
    for f in (fn, aot.aot_function(fn, aot.nop)):
        x = torch.randn(16, generator=_gen()).requires_grad_()
        torch.manual_seed(3)
        out = f(x)[0]
        out.sum().backward()
        found.append((out.detach(), x.grad, torch.rand(2)))
    torch.testing.assert_close(found[1], found[0])


def test_reentrant_checkpoint_output_without_history_refused() -> None:
    """An output ``fn`` computes from no input requiring grad: eager's Function gives it a history of its own."""

    def fn(x):
        return checkpoint(lambda t: (t * 2, torch.ones(3)), x, use_reentrant=True)

    with pytest.raises(aot.errors.UnsupportedOperatorError, match="does not depend on any input"):
        aot.aot_function(fn, aot.nop)(torch.randn(3, requires_grad=True))
