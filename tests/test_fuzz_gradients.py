"""Fuzzer classes about gradients and the backward: wrong gradients of autograd leaves, a backward that
raises where eager's runs (or runs where eager's raises), inputs an autograd.Function's backward writes.

Each test is the shrunk program of ``benchmarks/fuzz_mutation.py`` (seed 20, classes numbered as in
``benchmarks/fuzz_findings.md``), checked against eager with ``tests/oracle.py`` ``check``: values, and the
gradients of every autograd leaf behind the inputs. Several call the compiled function a second time
(``reuse``) with one argument ``detach()``ed: a tensor sharing memory, and the version counter, with the
others, but no history.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.functions import ScaledBySaved, TriplesGradOutput
from tests.oracle import check, check_in_mode


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _detached(make_args, position):
    """``make_args`` with its argument at ``position`` detached: the fuzzer's second call."""

    def again():
        args = list(make_args())
        args[position] = args[position].detach()
        return tuple(args)

    return again


# Class 2: a detach() alias and a view requiring grad overlap, one written: they are merged into one base,
# whose history the detached member's reads reached.
def _clamp_second(a0, a1):
    a1.clamp_(min=-0.5)
    return (sum(t.real.sum() for t in (a0, a1)),)


def _slices_of_nonleaf():
    s0 = torch.randn(24, generator=_gen()).requires_grad_() * 1
    return (s0[2:6], s0[7:19].view(3, 4)[:, ::2])


# Class 24: the detached member first in its cluster: the base was taken from it, and needed no grad.
def _clamp_third(a0, a1, a2):
    a2.clamp_(min=-0.5)
    return (sum(t.real.sum() for t in (a0, a1, a2)),)


def _halves_twice():
    s0 = torch.randn(10, generator=_gen()).requires_grad_() * 1
    return (s0[0:5], s0[5:10], s0[0:5])


# Class 51: a write through .data of the detached member.
def _data_fill_first(a0, a1, a2):
    v0 = a2.clone()
    v2 = a2.flip(0)
    a0.data.fill_(2.0)
    return (v0, sum(t.real.sum() for t in (a0, a1, a2, v0, v2)))


def _three_overlapping():
    s0 = torch.randn(11, generator=_gen()).requires_grad_() * 1
    return (s0[0:5], s0[3:8], s0[6:11])


# Class 15: a write through a detach() of one member, with another member detached by the caller.
def _sigmoid_through_detach(a0, a1, a2, a3):
    a3.detach().sigmoid_()
    a3.requires_grad_()
    return (a3, a0, sum(t.real.sum() for t in (a0, a1, a2, a3)))


def _four_views():
    g = _gen()
    s0 = torch.randn(24, generator=g).requires_grad_()
    s1 = torch.randn(24, generator=g).requires_grad_()
    return (s0[6:18:2], s1[6:18].view(4, 3).t(), s1[6:9].expand(2, 3), s1[6:18].view(3, 4)[:, ::2])


# Class 30: set_() onto a clone, after a write through a detach() of a view.
def _set_after_detached_scatter(a0, a1):
    v0 = a0.transpose(0, -1)
    v1 = v0 * 2
    with torch.enable_grad():
        v0.detach().scatter_(0, torch.zeros((1, 4), dtype=torch.long), 2.0)
    v2 = v0.clone()
    a0.set_(v2)
    return (sum(t.real.sum() for t in (a0, a1, v0, v1, v2)),)


def _two_blocks():
    s0 = torch.randn(48, generator=_gen()).requires_grad_()
    return (s0[0:24].view(4, 6), s0[24:48].view(4, 6))


# Class 12: resize_() of a detach() alias bumps the counter of the tensor it aliases, which a matmul
# saved: eager's backward raises, so must the compiled one (the fakes shared no counter).
def _matmul_then_resize(a0, a1):
    v0 = a1 @ a1.mT
    v2 = a1.transpose(0, -1)
    a0.resize_(6)
    return (sum(t.real.sum() for t in (a0, a1, v0, v2)),)


def _strided_and_expanded():
    s0 = torch.randn(24, generator=_gen()).requires_grad_()
    return (s0[3:15].view(3, 4)[:, ::2], s0[1:4].expand(2, 3))


# Classes 15 and 20 of seed 20: the detached argument shares memory with a view of a leaf (a member of one
# synthetic base): the leaf's gradient reached the base taken from the detached member's root.
def _set_under_no_grad(a0, a1):
    with torch.no_grad():
        a1.set_(a0)
    return (sum(t.real.sum() for t in (a0, a1)),)


def _overlapping_slices_of_nonleaf():
    s0 = torch.randn(24, generator=_gen()).requires_grad_() * 1
    return (s0[3:9].view(2, 3), s0[4:10].view(2, 3))


def _strided_and_transposed_of_leaf():
    s0 = torch.randn(24, generator=_gen()).requires_grad_()
    return (s0[7:15:2], s0[5:17].view(4, 3).t())


REUSED = {
    "set_under_no_grad": (_set_under_no_grad, _overlapping_slices_of_nonleaf, 0),
    "clamp_second": (_clamp_second, _slices_of_nonleaf, 0),
    "clamp_third": (_clamp_third, _halves_twice, 0),
    "data_fill_first": (_data_fill_first, _three_overlapping, 0),
    "sigmoid_through_detach": (_sigmoid_through_detach, _four_views, 1),
    "set_after_detached_scatter": (_set_after_detached_scatter, _two_blocks, 0),
    "matmul_then_resize": (_matmul_then_resize, _strided_and_expanded, 0),
}


@pytest.mark.parametrize("name", sorted(REUSED))
def test_reused_with_a_detached_argument(name: str) -> None:
    fn, make_args, position = REUSED[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = check(fn, make_args)
        check(fn, _detached(make_args, position), compiled_fn=compiled)
        # Compiled for the detached call first, then reused for the first.
        compiled = check(fn, _detached(make_args, position))
        check(fn, make_args, compiled_fn=compiled)


# Class 8: an out= op under no_grad resizes a view requiring grad, and writes it: eager takes the view's
# history again in its new geometry; the record taken by the write-back had the old one.
def _neg_out_resizes(a0, a1):
    with torch.set_grad_enabled(False):
        torch.neg(a0, out=a1)
        with torch.no_grad(), torch.enable_grad():
            a1.requires_grad_()
    return (a1,)


def _plain_and_transposed():
    g = _gen()
    s1 = torch.randn(12, generator=g)
    s2 = torch.randn(2, 3, generator=g).requires_grad_() * 1
    return (s1[5:9].view(2, 2), s2.t())


# Class 16: an autograd.Function's backward doubles the input it saved, an input the synthetic-base layer
# gave a base of its own (offsets matter: as_strided_): the write landed in a copy.
def _saved_input_doubled_by_backward(a0):
    a0.as_strided_((2, 2), (4, 2), 8)
    v0 = ScaledBySaved.apply(a0, a0)
    return (sum(t.real.sum() for t in (a0, v0)),)


def _strided_view_of_nonleaf():
    s0 = torch.randn(24, generator=_gen()).requires_grad_() * 1
    return (s0[1:13].view(3, 4)[:, ::2],)


# Class 48: set_() onto a clone, requires_grad_() and a transpose_ through .data of complex views.
def _complex_set_and_transpose(a0, a1):
    a1.set_(a0.clone())
    a0.requires_grad_()
    with torch.no_grad():
        a0.mul_(2)
    with torch.no_grad():
        v1 = a1.expand(2, 3, 2)
        a1.requires_grad_()
        a0.data.transpose_(0, -1)
    return (v1, sum(t.real.sum() for t in (a0, a1, v1)))


def _complex_views():
    s1 = torch.randn(24, generator=_gen(), dtype=torch.complex64).requires_grad_() * 1
    return (s1[7:19].view(3, 4)[:, ::2], s1[7:13:2])


TRAINING = {
    "neg_out_resizes": (_neg_out_resizes, _plain_and_transposed),
    "saved_input_doubled_by_backward": (_saved_input_doubled_by_backward, _strided_view_of_nonleaf),
    "complex_set_and_transpose": (_complex_set_and_transpose, _complex_views),
}


@pytest.mark.parametrize("name", sorted(TRAINING))
def test_training(name: str) -> None:
    check_in_mode(*TRAINING[name], "training")


# Class 46: under the caller's no_grad, a non-leaf input (the metadata layer's view of a restrided leaf) is
# traced: its fake, made in no_grad, needed no grad, and autograd.grad refused it.
def _restrided_leaf_written(a0):
    a0.as_strided_((3,), (2,), 2)
    with torch.set_grad_enabled(False):
        a0.requires_grad_()
        with torch.enable_grad(), torch.no_grad():
            a0.mul_(2)
    with torch.enable_grad():
        v1 = a0.sin()
    return (v1,)


def _leaf_2x3x4():
    return (torch.randn(2, 3, 4, generator=_gen()).requires_grad_(),)


# Class 57: an enable_grad result restrided under no_grad: its history expects the old shape, so eager's
# backward raises; the trace differentiating it raised at compile time.
class _TripledGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * 3


def _restrided_enable_grad_result(a0, a1):
    v0 = _TripledGrad.apply(a0)
    with torch.enable_grad():
        v1 = a1 * 2
        v2 = a1.sin()
    v2.as_strided_((2,), (2,), 3)
    v3 = a1.t()
    return (a0, v2, v0, sum(t.real.sum() for t in (a0, a1, v0, v1, v2, v3)))


def _view_and_strided_leaf():
    g = _gen()
    s0 = torch.randn(24, generator=g).requires_grad_()
    s1 = torch.randn(2, 8, generator=g)
    return (s0[4:8], s1[:, 1::3].detach().requires_grad_())


NO_GRAD = {
    "restrided_leaf_written": (_restrided_leaf_written, _leaf_2x3x4),
    "restrided_enable_grad_result": (_restrided_enable_grad_result, _view_and_strided_leaf),
}


@pytest.mark.parametrize("name", sorted(NO_GRAD))
def test_no_grad(name: str) -> None:
    fn, make_args = NO_GRAD[name]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        check(fn, make_args, backward=False)
    # And the backward eager raises in (or runs), from the enable_grad regions' outputs.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = check(fn, make_args)
        check(fn, make_args, compiled_fn=compiled)


# Classes 52 and 54: a cluster whose members have histories of their own (a leaf the caller or the function
# made with requires_grad_(), and a view of another leaf): one base carries one history, so the gradients of
# the others are lost. Eager differentiates each member's own history.
def _neg_then_requires_grad(a0, a1, a2, a3):
    a3.neg_()
    a3.requires_grad = True
    v1 = a3 @ a3.mT
    v2 = a2.narrow(-1, 1, 2)
    with torch.no_grad():
        v3 = a0[..., ::2]
    return (v3, sum(t.real.sum() for t in (a0, a1, a2, a3, v1, v2, v3)))


def _four_views_of_two():
    g = _gen()
    s0 = torch.randn(24, generator=g).requires_grad_()
    s1 = torch.randn(24, generator=g)
    return (s0[4:8], s1[7:13], s1[2:5].expand(2, 3).detach().requires_grad_()[...], s1[3:15].view(4, 3).t())


def _requires_grad_then_data_scatter(a0, a1):
    a0.requires_grad_()
    a0.data.scatter_(0, torch.zeros((1,), dtype=torch.long), 2.0)
    return (a0, sum(t.real.sum() for t in (a0, a1)))


def _detached_and_view_of_leaf():
    s0 = torch.randn(24, generator=_gen()).requires_grad_()
    return (s0[7:15:2].detach(), s0[5:17].view(4, 3).t())


# Class 60 (class 26 of seed 20): a leaf used in grad mode, then unsqueeze_()d under no_grad: eager's gradient
# accumulator was made for its first geometry, and sums the gradient of its later uses to it; the diagonal taken
# before takes its history again from the leaf in its new geometry, by strides (the leaf is expanded: eager's
# as_strided backward divides by the overlap).
def _used_then_unsqueezed(a0, a1):
    v0 = a1.diagonal()
    with torch.no_grad():
        a1.unsqueeze_(0)
        with torch.enable_grad():
            a1.requires_grad_()
            with torch.no_grad():
                v3 = a0.expand(2, 2, 4)
    return (sum(t.real.sum() for t in (a0, a1, v0, v3)),)


def _expanded_complex_leaf_twice():
    g = _gen()
    torch.randn(3, 4, generator=g)
    leaf = torch.randn(1, 4, generator=g, dtype=torch.complex64).expand(2, 4).detach().requires_grad_()
    return (leaf, leaf)


OWN_HISTORIES = {
    "neg_then_requires_grad": (_neg_then_requires_grad, _four_views_of_two),
    "requires_grad_then_data_scatter": (_requires_grad_then_data_scatter, _detached_and_view_of_leaf),
}


@pytest.mark.parametrize("name", sorted(OWN_HISTORIES))
def test_members_with_histories_of_their_own(name: str) -> None:
    check_in_mode(*OWN_HISTORIES[name], "training")


def test_reused_with_a_detached_member_of_a_leaf() -> None:
    """Class 20 of seed 20: ``requires_grad_then_data_scatter`` on two views of one leaf, called again with
    the first detached."""
    fn, make_args = _requires_grad_then_data_scatter, _strided_and_transposed_of_leaf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = check(fn, make_args)
        check(fn, _detached(make_args, 0), compiled_fn=compiled)
        compiled = check(fn, _detached(make_args, 0))
        check(fn, make_args, compiled_fn=compiled)


def test_used_then_unsqueezed() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(_used_then_unsqueezed, _expanded_complex_leaf_twice)


# Seed 28 program 6364: an autograd.Function whose backward writes its grad_output in place (``TriplesGradOutput``)
# on a view of an input that is also returned and used elsewhere. Eager's engine hands the same gradient buffer to
# several consumers (AddBackward0 passes its grad to both sides, SumBackward0 of a 0-dim tensor expands it to a
# view of itself) and a node's InputBuffer keeps the first gradient reaching it as it is, an alias, adding later
# ones out of place: whether the in-place write leaks into another branch's gradient depends on which gradient
# reached the buffer first. With a cotangent on the returned view ``v1`` too, eager's SelectBackward0 buffer holds
# that cotangent first, so ``v1.sum()``'s branch is summed before the write (x1); the compiled function replays
# ``v1`` outside the graph (a view of the input), its cotangent goes around the graph, and inside the graph the
# buffer keeps ``v1.sum()``'s alias of the shared buffer, which the write then triples (x3). Reproducing it needs
# the outputs' cotangents routed through the graph's own buffers in eager's order; refusing it needs detecting, at
# trace time, a grad_output write whose buffer another pending gradient aliases. Neither is done yet.
def _tripled_select_summed(a0):
    v1 = a0.select(0, 0)
    v2 = TriplesGradOutput.apply(v1)
    return (v1, sum(t.real.sum() for t in (a0, v1, v2)))


def _tripled_select_added(a0):
    v1 = a0.select(0, 0)
    v2 = TriplesGradOutput.apply(v1)
    return (v1, v1.sum() + v2.sum())


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="a Function's backward writes a grad_output that eager's engine shares with a gradient buffered "
    "before it; eager's result depends on the InputBuffer's arrival order, which the graph boundary changes",
)
@pytest.mark.parametrize("fn", [_tripled_select_summed, _tripled_select_added], ids=["summed", "added"])
def test_function_writes_shared_grad_output(fn) -> None:
    check(fn, lambda: (torch.randn(14, generator=_gen())[6:11].detach().requires_grad_(),))


def test_function_writes_grad_output_of_returned_sum() -> None:
    """Without the view returned, the graph holds every gradient as eager's engine does: eager's (x3) leak."""
    check(
        lambda a0: (TriplesGradOutput.apply(a0.select(0, 0)).sum() + a0.select(0, 0).sum(),),
        lambda: (torch.randn(14, generator=_gen())[6:11].detach().requires_grad_(),),
    )
