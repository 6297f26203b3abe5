"""``requires_grad_()`` inside the function, and geometry changes (``t_``, ``squeeze_``, ``as_strided_`` ...)
under ``no_grad`` or of views, exactly as eager.

Each program is the smallest of a class the mutation fuzzer found differing from eager
(``benchmarks/fuzz_mutation.py``): ``requires_grad_()`` on an input (its views returned
require grad, later uses reach its ``.grad``, a hidden write keeps it a leaf), on a view
of an input (views of that view are its views), after a geometry change; a geometry change
of a leaf requiring grad under ``no_grad`` (its gradient takes the new shape). Eager is the
oracle, in training and under ``no_grad``.
"""

from __future__ import annotations

import pytest
import torch

import aot
from tests.functions import DoublesInPlace, Identity, ScalesBySavedThenDoublesIt
from tests.oracle import check, functional_nop

MODES = ["training", "no_grad"]


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _returns_input_after_requires_grad(a0):
    a0.requires_grad_()
    return (a0,)


def _requires_grad_attribute(a0):
    b = a0 * 2
    a0.requires_grad = True
    return a0 * b, b, a0[1:]


def _returns_view_after_requires_grad(a0):
    a0.requires_grad_()
    return a0.view(3), a0 * 2


def _view_of_view_requiring_grad(a0):
    v0 = a0[1:]
    v0.requires_grad_()
    return v0.view(2), v0


def _requires_grad_then_hidden_write(a0):
    a0.requires_grad_()
    a0.detach().zero_()
    return (a0,)


def _view_of_intermediate_made_to_require_grad(a0):
    v0 = a0 @ a0.mT
    v0.requires_grad_()
    return (v0[..., ::2],)


def _requires_grad_then_clone_then_hidden_write(a0):
    a0.requires_grad_()
    v0 = a0.clone()
    a0.detach().zero_()
    return (v0,)


def _requires_grad_on_two_of_three_one_written(a0, a1, a2):
    a2.requires_grad_()
    v0 = a2 @ a2.mT
    a0.requires_grad_()
    a1.data.add_(1)
    return (v0, sum(t.real.sum() for t in (a0, a1, a2, v0)))


def _as_strided_then_requires_grad(a0):
    a0.as_strided_((2, 3), (6, 2), 3)
    a0.requires_grad_()
    return ()


def _requires_grad_on_function_output(a0, a1):
    v3 = ScalesBySavedThenDoublesIt.apply(a1, a1)
    v3.requires_grad_()
    return (v3,)


def _requires_grad_on_dirty_input_then_transpose(a0, a1):
    v0 = DoublesInPlace.apply(a0)
    v0.requires_grad_()
    with torch.no_grad():
        a0.transpose_(0, -1)
    return ()


def _squeeze_under_no_grad(a0):
    with torch.set_grad_enabled(False):
        a0.squeeze_()
    return (a0, a0.sum())


def _as_strided_under_no_grad(a0):
    with torch.no_grad():
        a0.as_strided_((2,), (1,), 1)
    return (a0 * 2,)


def _transpose_then_real(a0, a1):
    a0.transpose_(0, -1)
    v0 = a1 @ a1.mT
    torch.mul(a0.detach(), 2, out=a0.detach())
    return (sum(t.real.sum() for t in (a0, a1, v0)),)


def _complex_strided_and_transposed():
    s1 = randn(2, 8, dtype=torch.complex64).requires_grad_() * 1
    return (s1[:, 1::3], randn(4, 3, seed=1).requires_grad_().t())


def _three_views_two_overlapping():
    s1 = randn(24, seed=1)
    return (randn(24)[2:14].view(3, 4)[:, 2], s1[7:19].view(4, 3).t(), s1[3:9].view(2, 3))


def _as_strided_beyond_old_elements(a0):
    with torch.no_grad():
        a0.as_strided_((3,), (1,), 3)
    return (a0 * 2, a0)


def _as_strided_beyond_old_elements_with_views(a0):
    v = a0[1:]
    with torch.no_grad():
        a0.as_strided_((3,), (1,), 3)
    w = a0[:2]
    return (a0 * 2, v, w)


def _t_then_requires_grad(a0):
    a0.t_()
    a0.requires_grad_()
    return (a0 * 2, a0[0], a0)


def _views_around_unsqueeze_and_requires_grad(a0):
    v = a0[0]
    a0.unsqueeze_(0)
    a0.requires_grad_()
    w = a0[0]
    return (a0 * 2, v, w)


def _requires_grad_then_t_under_no_grad(a0):
    a0.requires_grad_()
    y = a0 * 2
    with torch.no_grad():
        a0.t_()
    return (y, a0)


def _squeeze_under_no_grad_then_view(a0):
    with torch.no_grad():
        a0.squeeze_()
    return (a0.sum(), a0[0])


def _as_strided_then_requires_grad_then_sum(a0):
    a0.as_strided_((2, 3), (6, 2), 3)
    a0.requires_grad_()
    return (a0.sum(),)


def _t_under_no_grad_of_a_view(a0):
    with torch.no_grad():
        a0.t_()
    return (a0, sum(t.real.sum() for t in (a0,)))


def _as_strided_beyond_a_written_neighbour(a0, a1):
    a1.clamp_(min=-0.5)
    a0.as_strided_((4,), (1,), 6)
    return (sum(t.real.sum() for t in (a0, a1)),)


def _as_strided_with_grad_beyond_the_view(a0):
    a0.as_strided_((2,), (0,), 8)
    return (a0,)


def _halves_of_a_non_leaf():
    s0 = randn(10).requires_grad_() * 1
    return (s0[0:5], s0[5:10])


def _column_of_a_non_leaf():
    return (randn(24).requires_grad_()[7:19].view(3, 4)[:, 0],)


def _function_view_then_requires_grad(a0, a1):
    v2 = a0 @ a0.mT
    v3 = Identity.apply(a1)
    a1.requires_grad_()
    v5 = a1.narrow(-1, 1, 2)
    a1.data.mul_(2)
    return (sum(t.real.sum() for t in (a0, a1, v2, v3, v5)),)


def _expanded_and_strided():
    s1 = randn(24)
    return (s1[1:4].expand(2, 3), s1[1:7:2])


def _squeeze_under_no_grad_then_unsqueeze_a_view(a0):
    with torch.set_grad_enabled(False):
        a0.squeeze_()
    v0 = a0.unfold(0, 2, 2)
    v0.unsqueeze_(0)
    return ()


def _leaf_on_larger_storage():
    return (randn(6).as_strided((3,), (1,), 0).detach().requires_grad_(),)


def _expanded_scalar():
    return (randn().expand(2),)


def _strided_view():
    return (randn(2, 8)[:, 1::3],)


def _two_views():
    s0 = randn(8).requires_grad_()
    s1 = randn(9, seed=1, dtype=torch.complex64).requires_grad_() * 1
    return (s0[1:5].view(2, 2), s1[4:8].view(2, 2))


def _dirty_and_strided():
    s1 = randn(24, seed=1).requires_grad_() * 1
    return (randn(24)[3:9].view(2, 3), s1[6:18].view(3, 4)[:, ::2])


PROGRAMS = {
    "returns_input_after_requires_grad": (_returns_input_after_requires_grad, lambda: (randn(3),)),
    "requires_grad_attribute": (_requires_grad_attribute, lambda: (randn(3),)),
    "returns_view_after_requires_grad": (_returns_view_after_requires_grad, lambda: (randn(3),)),
    "view_of_view_requiring_grad": (_view_of_view_requiring_grad, lambda: (randn(3),)),
    "requires_grad_then_hidden_write": (_requires_grad_then_hidden_write, _expanded_scalar),
    "view_of_intermediate_made_to_require_grad": (_view_of_intermediate_made_to_require_grad, lambda: (randn(2, 2),)),
    "requires_grad_then_clone_then_hidden_write": (_requires_grad_then_clone_then_hidden_write, _expanded_scalar),
    "requires_grad_on_two_of_three_one_written": (
        _requires_grad_on_two_of_three_one_written,
        _three_views_two_overlapping,
    ),
    "as_strided_then_requires_grad": (_as_strided_then_requires_grad, _strided_view),
    "requires_grad_on_function_output": (_requires_grad_on_function_output, _two_views),
    "requires_grad_on_dirty_input_then_transpose": (_requires_grad_on_dirty_input_then_transpose, _dirty_and_strided),
    "transpose_then_real": (_transpose_then_real, _complex_strided_and_transposed),
    "as_strided_beyond_old_elements": (_as_strided_beyond_old_elements, _leaf_on_larger_storage),
    "as_strided_beyond_old_elements_with_views": (
        _as_strided_beyond_old_elements_with_views,
        _leaf_on_larger_storage,
    ),
    "t_then_requires_grad": (_t_then_requires_grad, lambda: (randn(2, 3),)),
    "views_around_unsqueeze_and_requires_grad": (
        _views_around_unsqueeze_and_requires_grad,
        lambda: (randn(2, 3)[:, 1:],),
    ),
    "requires_grad_then_t_under_no_grad": (_requires_grad_then_t_under_no_grad, lambda: (randn(2, 3),)),
    "squeeze_under_no_grad_then_view": (_squeeze_under_no_grad_then_view, lambda: (randn(4, 1).requires_grad_(),)),
    "as_strided_then_requires_grad_then_sum": (_as_strided_then_requires_grad_then_sum, _strided_view),
    "t_under_no_grad_of_a_view": (
        _t_under_no_grad_of_a_view,
        lambda: (randn(18).requires_grad_()[5:17].view(3, 4),),
    ),
    "as_strided_beyond_a_written_neighbour": (_as_strided_beyond_a_written_neighbour, _halves_of_a_non_leaf),
    "as_strided_with_grad_beyond_the_view": (_as_strided_with_grad_beyond_the_view, _column_of_a_non_leaf),
    "function_view_then_requires_grad": (_function_view_then_requires_grad, _expanded_and_strided),
    "squeeze_under_no_grad_then_unsqueeze_a_view": (
        _squeeze_under_no_grad_then_unsqueeze_a_view,
        lambda: ((randn(12).requires_grad_() * 1)[6:11],),
    ),
    "squeeze_under_no_grad": (_squeeze_under_no_grad, lambda: (randn(4, 1).requires_grad_(),)),
    "as_strided_under_no_grad": (_as_strided_under_no_grad, lambda: (randn(3).requires_grad_(),)),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_as_eager(name: str, mode: str) -> None:
    fn, make_args = PROGRAMS[name]
    if mode == "no_grad":
        with torch.no_grad():
            check(fn, make_args, deep=True)
    else:
        check(fn, make_args, deep=True)


def _grads(fn, make_args, compiled: bool) -> list[torch.Tensor | None]:
    args = make_args()
    outs = (aot.aot_function(fn, functional_nop) if compiled else fn)(*args)
    loss = sum((out * 1).sum() for out in outs if out.requires_grad)
    assert isinstance(loss, torch.Tensor)
    loss.backward()
    return [arg.grad for arg in args]


def _uses_before_and_after_requires_grad(a0):
    b = a0 * 2
    a0.requires_grad_()
    return a0 * b, b


def _hidden_write_after_requires_grad(a0, a1):
    a1.mul_(3)
    a0.requires_grad_()
    a0.detach().add_(1)
    return a0 * a1, a0[1:]


@pytest.mark.parametrize(
    "fn", [_uses_before_and_after_requires_grad, _hidden_write_after_requires_grad, _requires_grad_attribute]
)
def test_requires_grad_inside_reaches_the_inputs_grad(fn) -> None:
    """The oracle compares the grads of inputs requiring grad before the call; these require it after."""

    def make_args():
        return (torch.arange(3.0), torch.ones(3))[: fn.__code__.co_argcount]

    eager, compiled = _grads(fn, make_args, False), _grads(fn, make_args, True)
    assert len(eager) == len(compiled)
    for e, c in zip(eager, compiled, strict=True):
        assert (e is None) == (c is None)
        if e is not None:
            torch.testing.assert_close(c, e)
