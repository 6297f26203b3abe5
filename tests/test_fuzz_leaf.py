"""Fuzzer classes about the gradient accumulator of a leaf whose geometry changes under no_grad.

Eager makes a leaf's gradient accumulator at the leaf's first use in grad mode, for the geometry it has
then, and keeps it through in-place geometry changes under no_grad (``t_``, ``unsqueeze_``, ``as_strided_``):
the gradients of later uses reach it as they are (summed to its shape), element by element, not where the
elements moved; views of the leaf take their history again from it in its new geometry.

Class 1 of ``benchmarks/fuzz_mutation.py`` (seed 20, numbered as in ``benchmarks/fuzz_findings.md``) and
variants of it, checked against eager with ``tests/oracle.py`` ``check``.
"""

from __future__ import annotations

import pytest
import torch

from tests.functions import Identity
from tests.oracle import AUTOCAST_ATOL, AUTOCAST_RTOL, MODES, check, check_in_mode


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _leaf(*shape: int) -> tuple[torch.Tensor]:
    return (torch.randn(*shape, generator=_gen()).requires_grad_(),)


# Class 1 (shrunk): used under autocast, written through .data, then transposed under no_grad.
def _autocast_matmul_then_t(a0):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        v1 = a0 @ a0.mT
        a0.data.clamp_(min=-0.5)
    with torch.no_grad():
        a0.t_()
    return (sum(t.real.sum() for t in (a0, v1)),)


def _matmul_then_t(a0):
    v1 = a0 @ a0.mT * torch.arange(4.0).view(2, 2)
    with torch.no_grad():
        a0.t_()
    return (v1, a0 * torch.arange(4.0).view(2, 2))


def _used_then_unsqueezed(a0):
    v0 = a0.sin()
    with torch.no_grad():
        a0.unsqueeze_(0)
    return (v0, a0 * 2)


def _view_before_and_after(a0):
    v = a0[1:]
    with torch.no_grad():
        a0.as_strided_((3,), (1,), 3)
    w = a0[:2]
    return (a0 * 2, v, w)


def _leaf_on_larger_storage():
    return (torch.randn(6, generator=_gen()).as_strided((3,), (1,), 0).detach().requires_grad_(),)


def _sin_then_t_then_view(a0):
    v0 = a0.sin()
    with torch.no_grad():
        a0.t_()
    return (v0, a0[0] * 3, a0.exp())


# Program 13 of seed 20: ``.data`` (and ``detach()``) of a leaf under grad mode is no use autograd records, so
# eager's gradient accumulator is made at the first real use, after the restride, in the new geometry.
def _data_restrided_in_grad_mode_then_t(a0):
    with torch.enable_grad():
        a0.data.unsqueeze_(0)
        a0.detach().unsqueeze_(0)
        with torch.no_grad():
            a0.t_()
    return (a0.sum() * 2,)


CASES = {
    "data_restrided_in_grad_mode_then_t": (_data_restrided_in_grad_mode_then_t, lambda: _leaf(3, 4)),
    "autocast_matmul_then_t": (_autocast_matmul_then_t, lambda: _leaf(2, 2)),
    "matmul_then_t": (_matmul_then_t, lambda: _leaf(2, 2)),
    "used_then_unsqueezed": (_used_then_unsqueezed, lambda: _leaf(2, 4)),
    "view_before_and_after": (_view_before_and_after, _leaf_on_larger_storage),
    "sin_then_t_then_view": (_sin_then_t_then_view, lambda: _leaf(2, 3)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_training(name: str) -> None:
    fn, make_args = CASES[name]
    if name == "autocast_matmul_then_t":
        check(fn, make_args, rtol=AUTOCAST_RTOL, atol=AUTOCAST_ATOL)
    else:
        check_in_mode(fn, make_args, "training")


# Class 1 (program 44 of seed 20): two leaves sharing memory (each a ``detach().requires_grad_()`` of a slice
# of one storage), merged into one base because an ``as_strided_`` reads absolute offsets: each keeps its
# own gradient.
def _as_strided_of_a_detached_alias(a0, a1):
    a1.detach().as_strided_((3,), (2,), 8)
    return (sum(t.real.sum() for t in (a0, a1)),)


def _two_leaves_on_one_storage():
    s0 = torch.randn(37, generator=_gen())
    return (s0[0:24].view(2, 3, 4).detach().requires_grad_()[...], s0[13:37].view(2, 3, 4).detach().requires_grad_())


def test_two_leaves_on_one_storage() -> None:
    check_in_mode(_as_strided_of_a_detached_alias, _two_leaves_on_one_storage, "training")


# Class 26 of seed 20 (shrunk): an expanded leaf's diagonal, taken before an unsqueeze_() under no_grad,
# read after it.
def _diagonal_then_unsqueezed(a0):
    v0 = a0.diagonal()
    with torch.no_grad():
        a0.unsqueeze_(0)
        with torch.enable_grad():
            a0.requires_grad_()
            with torch.no_grad():
                v3 = a0.expand(2, 2, 4)
    return (sum(t.real.sum() for t in (a0, v0, v3)),)


def _expanded_complex_leaf():
    return (torch.randn(1, 4, generator=_gen(), dtype=torch.complex64).expand(2, 4).detach().requires_grad_(),)


def _view_before_used_after(a0):
    v = a0[0]
    y = a0.sin()
    with torch.no_grad():
        a0.t_()
    return (y, v * 2, a0 * 3)


@pytest.mark.parametrize(
    "fn, make_args",
    [(_diagonal_then_unsqueezed, _expanded_complex_leaf), (_view_before_used_after, lambda: _leaf(3, 3))],
)
def test_view_taken_before_the_change(fn, make_args) -> None:
    check_in_mode(fn, make_args, "training")


# Program 342 of seed 20 (class 1): a view input as_strided_()d in grad mode beyond its elements, then its version
# counter moves (a write through a detach(), another view's t_()): eager takes its history again from its base, by
# strides, so the gradient reaches the base's element there, not only those of the record made at the change.
def _as_strided_beyond_then_bumped(a0):
    a0.as_strided_((1,), (2,), 6)
    a0.detach().mul_(1)
    return (a0 * 2,)


def _tail_of_nonleaf():
    return ((torch.randn(15, generator=_gen()).requires_grad_() * 1)[10:15],)


def test_as_strided_beyond_then_bumped() -> None:
    check_in_mode(_as_strided_beyond_then_bumped, _tail_of_nonleaf, "training")


# Program 3254 of seed 20 (class 1), shrunk: the same, written through the input itself, which is returned: the
# caller's tensor, restrided after the call, takes its history again from its base too.
def _as_strided_beyond_then_written(a0):
    a0.as_strided_((3,), (2,), 3)
    a0.add_(1)
    return (a0,)


def _as_strided_beyond_then_changed_under_no_grad(a0):
    v0 = a0 * 2
    a0.as_strided_((3,), (2,), 3)
    with torch.no_grad():
        a0.unsqueeze_(0)
    return (a0, v0)


def _middle_of_nonleaf():
    return ((torch.randn(9, generator=_gen()).requires_grad_() * 1)[2:7],)


# (Program 3822 of seed 20: with no write after, the record stays current: the gradient reaches only the elements
# both geometries span.)
def _as_strided_beyond_returned(a0):
    a0.as_strided_((4,), (1,), 3)
    return (a0,)


@pytest.mark.parametrize(
    "fn",
    [_as_strided_beyond_then_written, _as_strided_beyond_then_changed_under_no_grad, _as_strided_beyond_returned],
)
def test_as_strided_beyond_then_record_stale(fn) -> None:
    check_in_mode(fn, _middle_of_nonleaf, "training")


# Program 255 of seed 3: a member of one base restrided under no_grad after a grad-mode unfold; the base's
# source and the member's stand-in while compiling are different leaves: the member's gradient reaches its
# root over the whole span (the unfold's elements lie outside the final geometry).
def _unfold_then_restrided(a0, a1):
    v0 = a1.unfold(0, 2, 1)
    with torch.set_grad_enabled(False):
        a1.as_strided_((2, 1), (1, 1), 8)
    return (sum(t.real.sum() for t in (a0, a1, v0)),)


def _strided_and_plain_of_leaf():
    s1 = torch.randn(24, generator=_gen()).requires_grad_()
    return (s1[6:14:2], s1[2:8])


def _written_under_no_grad_then_read(a0, a1):
    with torch.no_grad():
        a0.mul_(2)
    return (a0.sin().sum() + (a1 * 3).sum(),)


def _one_leaf():
    s = torch.randn(10, generator=_gen()).requires_grad_()
    return (s[0:5], s[3:8])


def _two_leaves():
    s = torch.randn(10, generator=_gen())
    return (s[0:5].detach().requires_grad_(), s[3:8].detach().requires_grad_())


def _view_and_leaf_view():
    s = torch.randn(10, generator=_gen()).requires_grad_()
    return (s[0:5], s.detach()[3:8].requires_grad_())


def test_unfold_then_restrided() -> None:
    check_in_mode(_unfold_then_restrided, _strided_and_plain_of_leaf, "training")


@pytest.mark.parametrize(
    "first, then",
    [
        (_one_leaf, _two_leaves),
        (_two_leaves, _one_leaf),
        (_one_leaf, _view_and_leaf_view),
        (_view_and_leaf_view, _two_leaves),
    ],
)
def test_grad_roots_of_one_base_reused(first, then) -> None:
    """Overlapping inputs, one written: one leaf behind both, or one each; compiled for one, called with the other."""
    compiled = check(_written_under_no_grad_then_read, first)
    check(_written_under_no_grad_then_read, then, compiled_fn=compiled)


# Class 1 (program 1722 of seed 20, shrunk), open: a view taken from a non-leaf input that is no view, the input
# then as_strided_()d in grad mode. Eager takes the view's history again from the input in its new geometry
# (by strides), so the view's gradient reaches only the elements the input spans now; the compiled trace holds
# the input as an alias of its primal, takes the view from the primal, and never regenerates it (the gradient
# reaches all the view's elements).
def _view_then_base_restrided(a0):
    v0 = a0[0]
    a0.as_strided_((4,), (2,), 5)
    return (a0.sum() + v0.sum(),)


def _complex_view_then_base_restrided(a0):
    v0 = torch.view_as_complex(a0.unflatten(-1, (2, 2)))
    a0.as_strided_((4,), (2,), 5)
    return (sum(t.real.sum() for t in (a0, v0)),)


def _nonleaf(*shape: int) -> tuple[torch.Tensor]:
    return (torch.randn(*shape, generator=_gen()).requires_grad_() * 1,)


@pytest.mark.parametrize("fn", [_view_then_base_restrided, _complex_view_then_base_restrided])
def test_view_then_base_restrided(fn) -> None:
    check_in_mode(fn, lambda: _nonleaf(3, 4), "training")


# Program 1722 of seed 20 whole: one input passed twice, restrided both ways, written through .data and returned
# through an autograd.Function. Its second cause: views taken after the change (``.imag`` under no_grad, say) took
# their history again from the input though their counter had not moved since they were made.
def _program_1722(a0, a1):
    v0 = torch.view_as_complex(a1.unflatten(-1, (2, 2)))
    a1.unsqueeze_(0)
    with torch.set_grad_enabled(False):
        with torch.enable_grad():
            a0.as_strided_((4,), (2,), 5)
    a0.data.mul_(a1)
    v1 = Identity.apply(a1)
    v2 = a0.detach()
    return (sum(t.real.sum() for t in (a0, a1, v0, v1, v2)),)


def _one_nonleaf_twice():
    i0 = torch.randn(3, 4, generator=_gen()).requires_grad_() * 1
    return (i0, i0)


def test_program_1722() -> None:
    check_in_mode(_program_1722, _one_nonleaf_twice, "training")


# Class 1 of programs 3,000-5,999 (program 5267 of seed 20, shrunk): the same change on an input that is a view
# (an expand of a non-leaf): eager takes the view's history again from the input's base, by strides, so its
# gradient reaches every element it spans. The trace's primal is no view: whether the input is one is the caller's.
def _expanded_then_base_restrided(a0):
    v0 = a0.expand(2, 3, 4)
    a0.as_strided_((2,), (2,), 0)
    return (v0, sum(t.real.sum() for t in (a0, v0)))


def _view_then_view_input_restrided(a0):
    v0 = a0[1:]
    a0.as_strided_((2,), (3,), 1)
    return (v0 * 2, a0 * 3)


def _expanded_nonleaf():
    return ((torch.randn(3, 1, generator=_gen()).requires_grad_() * 1).expand(3, 4),)


def _sliced_nonleaf():
    return ((torch.randn(4, 3, generator=_gen()).requires_grad_() * 1)[1:],)


@pytest.mark.parametrize(
    "fn, make_args",
    [(_expanded_then_base_restrided, _expanded_nonleaf), (_view_then_view_input_restrided, _sliced_nonleaf)],
)
def test_view_of_view_input_then_restrided(fn, make_args) -> None:
    check_in_mode(fn, make_args, "training")


# Program 3067 of seed 20 (class 1), shrunk: a view taken after the input's change, under no_grad, then used in
# grad mode: its counter has not moved since it was made, so eager keeps its record (no history), and takes none
# again from the input.
def _view_under_no_grad_after_change(a0):
    a0.unsqueeze_(0)
    v1 = torch.view_as_complex(a0.unflatten(-1, (2, 2)))
    with torch.no_grad():
        v2 = v1.imag
    return (v1.real.sum() + v2.sum(), v2 * 2)


def test_view_under_no_grad_after_change() -> None:
    check_in_mode(_view_under_no_grad_after_change, lambda: _nonleaf(3, 4), "training")


# Program 3789 of seed 20 (class 1), shrunk: a view input used in grad mode, then as_strided_()d under no_grad
# onto fewer elements: the layers below see it in its final geometry, and the function's view of it in the old
# one must be taken from the memory below, not from the final geometry (the use before reaches every old element).
def _used_then_as_strided_onto_fewer(a0):
    v1 = a0.flip(0)
    with torch.no_grad():
        a0.as_strided_((4,), (0,), 6)
    return (a0 * 1, v1)


def _used_then_as_strided_to_the_end(a0):
    v1 = a0.flip(0)
    with torch.no_grad():
        a0.as_strided_((2,), (1,), 9)
    return (sum(t.real.sum() for t in (a0, v1)),)


def _rows_of_leaf():
    return (torch.randn(24, generator=_gen()).requires_grad_()[5:11].view(2, 3),)


@pytest.mark.parametrize("fn", [_used_then_as_strided_onto_fewer, _used_then_as_strided_to_the_end])
def test_used_then_as_strided_under_no_grad(fn) -> None:
    check_in_mode(fn, _rows_of_leaf, "training")


# Program 3864 of seed 20 (class 1), shrunk: a view taken from a view input after its as_strided_() in grad mode
# beyond its elements, then the memory written through a detach(): eager takes the view's history again from the
# base by strides; autograd on fakes replays its view ops, the as_strided_ among them, which reach fewer elements.
def _view_after_as_strided_beyond_then_bumped(a1):
    a1.as_strided_((4,), (1,), 15)
    v0 = a1.view(-1)
    v1 = v0[1:]
    a1.detach().mul_(2)
    return (a1 * 1, v0 * 1, v1 * 3)


def _view_after_as_strided_beyond_returned(a1):
    a1.as_strided_((4,), (1,), 15)
    v0 = a1.view(2, 2)
    a1.detach().mul_(2)
    return (v0, v0 * 2)


def _slice_of_nonleaf():
    return ((torch.randn(24, generator=_gen()).requires_grad_() * 1)[5:10],)


@pytest.mark.parametrize("fn", [_view_after_as_strided_beyond_then_bumped, _view_after_as_strided_beyond_returned])
def test_view_after_as_strided_beyond_then_bumped(fn) -> None:
    check_in_mode(fn, _slice_of_nonleaf, "training")


# Program 3986 of seed 20 (class 1), shrunk: an expanded leaf (its elements share memory) written under no_grad,
# then used: eager's gradient has one value per index, not one per element of the memory the synthetic base spans.
def _expanded_leaf_written_under_no_grad(a0):
    with torch.no_grad():
        a0.index_fill_(-1, torch.tensor([0]), 2.0)
    v0 = a0.narrow(-1, 1, 1)
    return (a0 * torch.arange(1.0, 3.0), v0 * 3)


def _expanded_leaf_written_returned(a0):
    with torch.no_grad():
        a0.index_fill_(-1, torch.tensor([0]), 2.0)
    return (a0, a0[1:] * 3)


def _expanded_leaf():
    return (torch.randn((), generator=_gen()).expand(2).detach().requires_grad_(),)


@pytest.mark.parametrize("fn", [_expanded_leaf_written_under_no_grad, _expanded_leaf_written_returned])
def test_expanded_leaf_written_under_no_grad(fn) -> None:
    check_in_mode(fn, _expanded_leaf, "training")


# Found while fixing class 1: an input that is a view of another input, no view, which the function changes the
# geometry of in grad mode. Eager takes the view input's history again from that input in its new geometry (by
# strides), so its gradient (and that of views of it returned) reaches only the elements that input spans now; the
# compiled one differentiated the view input over all its elements (the function got it as a view of memory below,
# not of the input it views).
def _view_input_of_restrided_input(a0, a1):
    a1.mul_(2)
    a0.as_strided_((4,), (2,), 5)
    return (a1 * 1,)


def _view_input_of_shifted_input_unwritten(a0, a1):
    a0.as_strided_((2, 4), (4, 1), 1)
    return (a1 * 1,)


def _view_of_view_input_of_restrided_input(a0, a1):
    a0.add_(1)
    a0.as_strided_((4,), (2,), 5)
    return (a1[0], a1.sum())


def _view_of_view_input_of_restrided_input_unwritten(a0, a1):
    a0.as_strided_((4,), (2,), 5)
    return (a1[0], a1.sum())


def _nonleaf_and_its_rows():
    x = torch.randn(3, 4, generator=_gen()).requires_grad_() * 1
    return (x, x[1:])


def _nonleaf_and_its_columns():
    x = torch.randn(3, 4, generator=_gen()).requires_grad_() * 1
    return (x, x[:, 1:3])


VIEW_INPUT_OF_RESTRIDED_INPUT = {
    "view_input_of_restrided_input": (_view_input_of_restrided_input, _nonleaf_and_its_rows),
    "view_input_of_shifted_input_unwritten": (_view_input_of_shifted_input_unwritten, _nonleaf_and_its_columns),
    "view_of_view_input_of_restrided_input": (_view_of_view_input_of_restrided_input, _nonleaf_and_its_rows),
    "view_of_view_input_of_restrided_input_unwritten": (
        _view_of_view_input_of_restrided_input_unwritten,
        _nonleaf_and_its_rows,
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(VIEW_INPUT_OF_RESTRIDED_INPUT))
def test_view_input_of_restrided_input(name, mode) -> None:
    check_in_mode(*VIEW_INPUT_OF_RESTRIDED_INPUT[name], mode)
