"""Fuzzer classes of ``set_()`` and ``resize_()`` (seed 3), each as its smallest program; eager is the oracle."""

from __future__ import annotations

import pytest
import torch

import aot
from aot.errors import UnsupportedMutationError
from tests.functions import DoublesInPlace, Identity, TriplesGradOutput
from tests.oracle import check, check_in_mode


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


# Class 4: under inference_mode autograd is off, so eager resizes an input requiring grad.
def _resize_leaf(a0):
    a0.resize_(23)
    return ()


def _resize_write_resize_as(a0, a1):
    a0.resize_(5)
    a0.mul_(2)
    a1.resize_as_(a0)
    return a0[1:], a1 + 1


def _leaf_and_non_leaf():
    g = _gen()
    return torch.randn(2, 3, generator=g).requires_grad_(), torch.randn(6, generator=g).requires_grad_() * 1


INFERENCE_MODE_ONLY = {
    "resize_leaf_requiring_grad": (_resize_leaf, lambda: (torch.randn(2, 3, 4, generator=_gen()).requires_grad_(),)),
    "resize_write_resize_as": (_resize_write_resize_as, _leaf_and_non_leaf),
}


@pytest.mark.parametrize("name", sorted(INFERENCE_MODE_ONLY))
def test_inference_mode(name):
    check_in_mode(*INFERENCE_MODE_ONLY[name], "inference_mode")


# set_() under no_grad of an input requiring grad, where nothing with a history follows it to another
# geometry: under the caller's inference_mode (nothing requires grad there, whatever enable_grad says),
# returning only leaves under no_grad, or in the same geometry.
def _leaf_onto_other_then_as_strided(a0, a1, a2):
    with torch.no_grad():
        a2.set_(a0.detach())
    a0.as_strided_((2,), (2,), 0)
    return (a0, a1, a2, sum(t.real.sum() for t in (a0, a1, a2)))


def _three_leaves():
    g = _gen()
    i0 = torch.randn(4, 1, generator=g).requires_grad_()
    i1 = torch.randn(4, 3, generator=g, dtype=torch.complex64).t().detach().requires_grad_()
    i2 = torch.randn((), generator=g).expand(2).detach().requires_grad_()
    return i0, i1, i2


# The input's working alias is no view made under no_grad (eager's input is none): an enable_grad region
# reads it after its set_() as eager reads the input (was: autograd refused the no_grad view).
def _onto_other_then_enable_grad(a0, a1):
    with torch.no_grad():
        a0.set_(a1.detach())
    with torch.enable_grad():
        v0 = a0 * 2
    return v0, a0


def _leaf_and_view_requiring_grad():
    g = _gen()
    return torch.randn(6, generator=g).requires_grad_(), (torch.randn(8, generator=g).requires_grad_() * 1)[0:6]


MOVED_NOTHING_FOLLOWS = {
    "leaf_onto_other_then_as_strided": (_leaf_onto_other_then_as_strided, _three_leaves, ("no_grad", "inference_mode")),
    "onto_other_then_enable_grad": (_onto_other_then_enable_grad, _leaf_and_view_requiring_grad, ("no_grad",)),
}


@pytest.mark.parametrize(
    ("name", "mode"), [(name, mode) for name, (_, _, modes) in sorted(MOVED_NOTHING_FOLLOWS.items()) for mode in modes]
)
def test_moved_input_nothing_follows(name, mode):
    fn, make, _ = MOVED_NOTHING_FOLLOWS[name]
    check_in_mode(fn, make, mode)


# Class 1: a view of an input taken after set_() moved the input to other memory is a view of the caller's
# tensor in its new memory (was: taken from the old memory; its new memory taken from the view).
def _onto_own_clone_then_view(a0):
    a0.set_(a0.clone())
    v0 = a0.unsqueeze(0)
    return (v0,)


def _views_before_and_after(a0):
    v = a0.t()
    a0.set_(a0.clone())
    v0 = a0.unsqueeze(0)
    return v, v0, a0


def _onto_other_input_then_view(a0, a1):
    with torch.no_grad():
        a0.set_(a1)
    v0 = a0[1:]
    return v0, a1


def _onto_intermediate_then_view(a0, a1):
    c = a1 * 2
    with torch.no_grad():
        a0.set_(c)
    v0 = a0[1:]
    return v0, c


def _onto_clone_transposed_then_view_written(a0, a1):
    with torch.no_grad():
        a0.set_(a1.detach().clone())
        a0.t_()
    v0 = a0[1:]
    v0.mul_(2)
    return v0, a0.sum()


def _complex_strided():
    return (torch.randn(2, 8, generator=_gen(), dtype=torch.complex64)[:, 1::3],)


def _strided_and_transposed():
    g = _gen()
    return torch.randn(2, 8, generator=g)[:, 1::3], torch.randn(4, 3, generator=g).t()


VIEW_AFTER_SET = {
    "onto_own_clone_then_view": (_onto_own_clone_then_view, _complex_strided),
    "views_before_and_after": (_views_before_and_after, _complex_strided),
    "onto_other_input_then_view": (_onto_other_input_then_view, _strided_and_transposed),
    "onto_intermediate_then_view": (_onto_intermediate_then_view, _strided_and_transposed),
    "onto_clone_transposed_then_view_written": (_onto_clone_transposed_then_view_written, _strided_and_transposed),
}


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize("name", sorted(VIEW_AFTER_SET))
def test_view_after_set(name, mode):
    check_in_mode(*VIEW_AFTER_SET[name], mode)


# Class 22: set_() leaves its target's memory, so where the target sat in it does not tie it to the inputs
# sharing that storage (was: merged with an input the function made require grad, the target required grad
# too, and its set_() under grad mode left a history backward cannot pass).
def _write_set_onto_clone_requires_grad(a0, a1):
    a0.mul_(2)
    a1.set_(a0.clone())
    a0.requires_grad = True
    return (a0.sum() + a1.sum(),)


def _s22_program(a0, a1):
    a0.masked_fill_(torch.arange(24).view((4, 6)) % 2 == 0, 2.0)
    a1.set_(a0.clone())
    a0.requires_grad = True
    with torch.enable_grad():
        torch.mul(a1.detach(), 2, out=a1.detach())
    with torch.no_grad():
        a1.squeeze_()
        with torch.no_grad():
            v1 = a1.diagonal()
    return (sum(t.real.sum() for t in (a0, a1, v1)),)


def _two_views_of_one_storage():
    s0 = torch.randn(72, generator=_gen())
    return s0[24:48].view(4, 6), s0[48:72].view(4, 6)


SET_LEAVES_STORAGE = {
    "write_set_onto_clone_requires_grad": (_write_set_onto_clone_requires_grad, _two_views_of_one_storage),
    "s3_class22": (_s22_program, _two_views_of_one_storage),
}


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize("name", sorted(SET_LEAVES_STORAGE))
def test_set_leaves_storage(name, mode):
    check_in_mode(*SET_LEAVES_STORAGE[name], mode)


# The biggest refusal of seed 3: set_() under no_grad moving an input requiring grad to another geometry.
# For an input that is a view of a base requiring grad, eager takes the input's history again from the base
# in the new geometry (``base.as_strided(size, stride, offset)`` at the new memory's offsets): the function
# gets the base too, and later uses of the input read stand-ins taken from it.
def _moved_onto_own_clone(a0):
    with torch.no_grad():
        a0.set_(a0.clone())
    return (a0.sum() * 2,)


def _moved_onto_new_shape_used_before_and_after(a0):
    y = a0 * 2
    with torch.no_grad():
        a0.set_(torch.arange(6.0).view(2, 3))
    return y.sum() + (a0 * a0).sum(), a0.t()


def _view_of_leaf():
    return (torch.randn(10, generator=_gen()).requires_grad_()[5:10],)


def _view_of_non_leaf():
    return ((torch.randn(10, generator=_gen()).requires_grad_() * 1)[5:10],)


def _moved_onto_clone_of_unfold(a0, a1):
    v0 = a0.unfold(0, 2, 1)
    with torch.no_grad():
        a1.set_(v0.clone())
    v3 = a1 @ a1.mT
    return (a1, sum(t.real.sum() for t in (a0, a1, v0, v3)))


def _moved_onto_other_input(a0, a1):
    v0 = a1.as_strided((4,), (0,), 23)
    a0.masked_fill_(torch.arange(3).view((3,)) % 2 == 0, 2.0)
    v1 = v0 * 2
    with torch.no_grad():
        a0.set_(a1.detach())
    return (v1, a0, sum(t.real.sum() for t in (a0, a1, v0, v1)))


def _two_strided_views_of_a_non_leaf():
    s0 = torch.randn(24, generator=_gen()).requires_grad_() * 1
    return s0[4:16].view(3, 4)[:, 1], s0[2:14].view(3, 4)[:, 3]


MOVED_HISTORY = {
    "onto_own_clone_leaf_base": (_moved_onto_own_clone, _view_of_leaf),
    "onto_own_clone_non_leaf_base": (_moved_onto_own_clone, _view_of_non_leaf),
    "new_shape_used_before_and_after": (_moved_onto_new_shape_used_before_and_after, _view_of_non_leaf),
    "onto_clone_of_unfold": (_moved_onto_clone_of_unfold, _two_strided_views_of_a_non_leaf),
    "onto_other_input": (_moved_onto_other_input, _two_strided_views_of_a_non_leaf),
}


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize("name", sorted(MOVED_HISTORY))
def test_moved_history(name, mode):
    check_in_mode(*MOVED_HISTORY[name], mode)


def test_moved_then_written_under_grad_mode_refused():
    """A write through the moved input under grad mode: eager records it into the history of the input's
    base, which the caller sees change; refused before anything is written."""

    def fn(a0):
        with torch.no_grad():
            a0.set_(a0.clone())
        a0.mul_(2)
        return (a0.sum(),)

    (a0,) = _view_of_non_leaf()
    before = (a0.clone(), a0.shape, a0.stride(), a0.storage_offset(), a0._version)
    with pytest.raises(UnsupportedMutationError, match="written in place under grad mode after set_"):
        aot.aot_function(fn, aot.nop)(a0)
    assert torch.equal(before[0], a0) and before[1:] == (a0.shape, a0.stride(), a0.storage_offset(), a0._version)


# Seed 30, program 985: a view of a non-leaf moved by set_() under no_grad onto other memory in the geometry it
# had (offset 0 of a clone), then written in grad mode. Eager takes the view's history again as it was, and
# records the write into its base's history (CopySlices on the caller's base, whose memory the write no longer
# reaches); the compiled function lost the write's derivative (``grad of autograd leaf 0``). Refused, as for a
# move to another geometry; reads alone after the move, or writes autograd does not record, stay exact.
def _moved_in_place_then(write, onto):
    def fn(a0, a1):
        with torch.no_grad():
            a0.set_(onto(a0, a1))
        write(a0)
        return (sum(t.real.sum() for t in (a0, a1)),)

    return fn


_IN_PLACE_WRITES = {
    "sigmoid_": lambda t: t.sigmoid_(),
    "mul_": lambda t: t.mul_(2),
    "zero_": lambda t: t.zero_(),
    "row_mul_": lambda t: t[0].mul_(3),
    "add_grad": lambda t: t.add_(torch.full((3, 4), 2.0, requires_grad=True) * 1),
}
_IN_PLACE_ONTO = {
    "other_clone": lambda a0, a1: a1.clone(),
    "own_clone": lambda a0, a1: a0.clone(),
    "fresh": lambda a0, a1: torch.ones(3, 4),
    "other_input": lambda a0, a1: a1,
}


def _two_views_at_offset_0(start: int = 24):
    def make():
        s0 = torch.randn(36, generator=_gen()).requires_grad_() * 1
        return s0[0:12].view(3, 4), s0[start : start + 12].view(3, 4)

    return make


@pytest.mark.parametrize("onto", sorted(_IN_PLACE_ONTO))
@pytest.mark.parametrize("write", sorted(_IN_PLACE_WRITES))
@pytest.mark.parametrize("start", [0, 6, 24])
def test_moved_in_place_then_written_under_grad_mode_refused(write, onto, start):
    if onto == "other_input" and start == 0:
        pytest.skip("set_() onto a view in its own place moves nothing (test_moved_in_place_then_read_or_added)")
    fn = _moved_in_place_then(_IN_PLACE_WRITES[write], _IN_PLACE_ONTO[onto])
    args = _two_views_at_offset_0(start)()
    before = [(a.clone(), a.shape, a.stride(), a.storage_offset(), a._version) for a in args]
    with pytest.raises(UnsupportedMutationError, match="written in place under grad mode after set_"):
        aot.aot_function(fn, aot.nop)(*args)
    after = [(a.clone(), a.shape, a.stride(), a.storage_offset(), a._version) for a in args]
    assert all(torch.equal(b[0], a[0]) and b[1:] == a[1:] for b, a in zip(before, after, strict=True))


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize("onto", sorted(_IN_PLACE_ONTO))
def test_moved_in_place_then_read_or_added(onto, mode):
    # Read after the move; written by adding a constant, whose record passes the base's gradients as they were
    # (eager's base has a CopySlices of its own, the gradients are the same); any write where autograd records
    # nothing: eager's answer, as a set_() onto a view in the input's own place, which moves nothing.
    onto_ = _IN_PLACE_ONTO[onto]
    check_in_mode(_moved_in_place_then(lambda t: t.sigmoid(), onto_), _two_views_at_offset_0(), mode)
    if onto != "other_input":  # (onto another input's place: a move to another geometry, refused before)
        check_in_mode(_moved_in_place_then(lambda t: t.add_(1.5), onto_), _two_views_at_offset_0(), mode)
    for write in ("sigmoid_", "row_mul_", "add_grad") if onto == "other_input" else ():
        check_in_mode(_moved_in_place_then(_IN_PLACE_WRITES[write], onto_), _two_views_at_offset_0(0), mode)
    if mode != "training":
        check_in_mode(_moved_in_place_then(_IN_PLACE_WRITES["sigmoid_"], onto_), _two_views_at_offset_0(), mode)


# A leaf requiring grad moved to another geometry of its shape (strides, offset): eager's AccumulateGrad
# takes the gradients of later uses element by element, as it takes those of uses before.
def _leaf_moved_onto_its_transpose(a0, a1, a2):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        v0 = a2 @ a2.mT
    v1 = a1.transpose(0, -1)
    a1.detach().clamp_(min=-0.5)
    v2 = a1.narrow(-1, 1, 1)
    with torch.no_grad():
        a1.set_(v1.detach())
    return (sum(t.real.sum() for t in (a0, a1, a2, v0, v1, v2)),)


def _int_leaf_and_strided_leaf():
    g = _gen()
    i0 = torch.randint(-4, 5, (2, 2), generator=g)
    i1 = torch.randn(2, 2, generator=g).requires_grad_()
    i2 = torch.randn(11, generator=g)[6:10].view(2, 2).detach().requires_grad_()
    return i0, i1, i2


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
def test_leaf_moved_within_its_shape(mode):
    check_in_mode(_leaf_moved_onto_its_transpose, _int_leaf_and_strided_leaf, mode)


# Seed 21 class 2 (program 1213): a leaf requiring grad changed to another shape under no_grad (transpose_,
# unsqueeze_, as_strided_), then set_() under no_grad onto other memory in that geometry. Eager differentiates
# later uses in the shape it ends in, as where the set_() itself reshapes it; the set_() kept the geometry, so
# the compiled gradient had the caller's shape (a size mismatch in the backward). Moved first, as there.
def _program_1213(a0):
    with torch.no_grad():
        a0.transpose_(0, -1)
        with torch.no_grad():
            with torch.enable_grad():
                with torch.no_grad():
                    a0.set_(a0.clone())
    return (sum(t.real.sum() for t in (a0,)),)


def _weights(shape: torch.Size) -> torch.Tensor:
    return torch.arange(float(shape.numel())).view(shape)


def _t_then_onto_own_clone(a0):
    with torch.no_grad():
        a0.t_()
        a0.set_(a0.clone())
    return (a0 * _weights(a0.shape)).sum(), a0


def _unsqueeze_then_onto_own_clone(a0):
    with torch.no_grad():
        a0.unsqueeze_(1)
        a0.set_(a0.clone())
    return ((a0 * _weights(a0.shape)).sum(),)


def _as_strided_then_onto_own_clone(a0):
    with torch.no_grad():
        a0.as_strided_((3, 4), (4, 1), 2)
        a0.set_(a0.clone())
    return (a0 * _weights(a0.shape)).sum(), a0 * 2


def _t_then_onto_other_input(a0, a1):
    with torch.no_grad():
        a0.t_()
        a0.set_(a1.detach())
    return (a0 * _weights(a0.shape)).sum(), a1 * 1


def _t_then_onto_made_tensor(a0):
    with torch.no_grad():
        a0.t_()
        a0.set_(torch.ones(a0.shape).t().contiguous().t())
    return ((a0 * _weights(a0.shape)).sum(),)


def _t_read_then_onto_own_clone(a0):
    # Read in grad mode between the change and the set_(): eager's gradient accumulator has the new shape.
    with torch.no_grad():
        a0.t_()
    v0 = (a0 * _weights(a0.shape)).sum()
    with torch.no_grad():
        a0.set_(a0.clone())
    return (v0 + (a0 * 2).sum(),)


def _t_then_onto_own_clone_then_unsqueeze(a0):
    with torch.no_grad():
        a0.t_()
        a0.set_(a0.clone())
        a0.unsqueeze_(0)
    return ((a0 * _weights(a0.shape)).sum(),)


def _t_then_onto_own_clone_then_t(a0):
    # Back in the caller's shape: no move first (as before).
    with torch.no_grad():
        a0.t_()
        a0.set_(a0.clone())
        a0.t_()
    return ((a0 * _weights(a0.shape)).sum(),)


def _t_read_before_then_onto_own_clone(a0):
    # Read in grad mode before the change: eager's accumulator keeps the caller's shape (no move first).
    v0 = (a0 * _weights(a0.shape)).sum()
    with torch.no_grad():
        a0.t_()
        a0.set_(a0.clone())
    return (v0 + (a0 * 2).sum(),)


def _view_then_t_then_onto_own_clone(a0):
    # A view taken before the change: eager takes its history again after it, from the leaf in its new shape.
    v0 = a0[:2]
    with torch.no_grad():
        a0.t_()
        a0.set_(a0.clone())
    return ((v0 * 3).sum() + (a0 * _weights(a0.shape)).sum(),)


def _view_read_then_t_then_onto_own_clone(a0):
    # ... read before it: the accumulator keeps the caller's shape (no move first).
    y = (a0[:2] * 3).sum()
    with torch.no_grad():
        a0.t_()
        a0.set_(a0.clone())
    return (y + (a0 * _weights(a0.shape)).sum(),)


def _leaf_4x6():
    return (torch.randn(4, 6, generator=_gen()).requires_grad_(),)


def _leaf_4x6_at_offset():
    return (torch.randn(30, generator=_gen())[3:27].view(4, 6).detach().requires_grad_(),)


def _strided_leaf_4x6():
    return (torch.randn(4, 12, generator=_gen())[:, ::2].detach().requires_grad_(),)


def _leaf_4x6_and_6x4():
    g = _gen()
    return torch.randn(4, 6, generator=g).requires_grad_(), torch.randn(6, 4, generator=g).requires_grad_()


RESHAPED_THEN_MOVED = {
    "program_1213": (_program_1213, _leaf_4x6),
    "t_then_onto_own_clone": (_t_then_onto_own_clone, _leaf_4x6),
    "t_then_onto_own_clone_at_offset": (_t_then_onto_own_clone, _leaf_4x6_at_offset),
    "t_then_onto_own_clone_strided": (_t_then_onto_own_clone, _strided_leaf_4x6),
    "unsqueeze_then_onto_own_clone": (_unsqueeze_then_onto_own_clone, _leaf_4x6),
    "as_strided_then_onto_own_clone": (_as_strided_then_onto_own_clone, _leaf_4x6),
    "t_then_onto_other_input": (_t_then_onto_other_input, _leaf_4x6_and_6x4),
    "t_then_onto_made_tensor": (_t_then_onto_made_tensor, _leaf_4x6),
    "t_read_then_onto_own_clone": (_t_read_then_onto_own_clone, _leaf_4x6),
    "t_then_onto_own_clone_then_unsqueeze": (_t_then_onto_own_clone_then_unsqueeze, _leaf_4x6),
    "t_then_onto_own_clone_then_unsqueeze_at_offset": (_t_then_onto_own_clone_then_unsqueeze, _leaf_4x6_at_offset),
    "t_then_onto_own_clone_then_t": (_t_then_onto_own_clone_then_t, _leaf_4x6),
    "t_then_onto_own_clone_then_t_at_offset": (_t_then_onto_own_clone_then_t, _leaf_4x6_at_offset),
    "t_read_before_then_onto_own_clone": (_t_read_before_then_onto_own_clone, _leaf_4x6),
    "view_then_t_then_onto_own_clone": (_view_then_t_then_onto_own_clone, _leaf_4x6),
    "view_then_t_then_onto_own_clone_at_offset": (_view_then_t_then_onto_own_clone, _leaf_4x6_at_offset),
    "view_read_then_t_then_onto_own_clone": (_view_read_then_t_then_onto_own_clone, _leaf_4x6),
}


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize("name", sorted(RESHAPED_THEN_MOVED))
def test_leaf_reshaped_then_moved(name, mode):
    check_in_mode(*RESHAPED_THEN_MOVED[name], mode)


def _t_then_onto_own_clone_then_function(a0):
    with torch.no_grad():
        a0.t_()
        a0.set_(a0.clone())
    return ((Identity.apply(a0) * 2).sum(),)


def test_leaf_reshaped_then_moved_then_function():
    check_in_mode(_t_then_onto_own_clone_then_function, _leaf_4x6, "training")


# Seed 22 (programs 2000-4999) class 3, program 2457: an input needing no grad set_() onto other memory in grad
# mode, then made a leaf by requires_grad_(). Eager's later uses read the new memory and differentiate the
# caller's tensor, a leaf there: the compiled output's history reached a leaf the caller never sees, so an
# autograd.Function's backward on the way (writing its expanded grad_output, which eager refuses) never ran, and
# the caller's tensor got no gradient.
def _set_then_made_leaf_then_function(a0):
    v0 = DoublesInPlace.apply(a0)
    a0.set_(a0.clone())
    a0.requires_grad_()
    with torch.enable_grad():
        a0.detach().neg_()
    v1 = TriplesGradOutput.apply(v0)
    return (sum(t.real.sum() for t in (a0, v0, v1)),)


def _set_then_made_leaf_then_expanded_grad_written(a0):
    a0.set_(a0.clone())
    a0.requires_grad_()
    return (TriplesGradOutput.apply(a0).sum(),)


def _set_then_made_leaf_then_grad_written(a0):
    a0.set_(a0.clone())
    a0.requires_grad_()
    return (TriplesGradOutput.apply(a0) * 2,)


def _set_onto_made_then_made_leaf(a0):
    a0.set_(torch.linspace(0, 1, 5))
    a0.requires_grad_()
    return ((a0 * torch.arange(5.0)).sum(), a0 * 2)


def _made_leaf_then_set_under_no_grad(a0):
    a0.requires_grad_()
    with torch.no_grad():
        a0.set_(a0.clone())
        a0.mul_(2)
    return ((a0 * torch.arange(5.0)).sum(),)


def _set_then_made_leaf_then_identity(a0):
    a0.set_(a0.clone() + 1)
    a0.requires_grad_()
    return (Identity.apply(a0) * a0,)


def _slice_of_plain():
    return (torch.randn(24, generator=_gen())[1:6],)


def _plain_5():
    return (torch.randn(5, generator=_gen()),)


def _column_of_plain():
    return (torch.randn(4, 5, generator=_gen())[:, 2],)


def _set_onto_other_shape_then_made_leaf_read_under_no_grad(a0):
    a0.set_(torch.ones(6))
    a0.requires_grad_()
    with torch.no_grad():
        a0.mul_(2)
        v0 = a0 * 3
    return (v0, a0)


# The caller's tensor a view of a base needing none (the merge of h-madeleaf and h-ungraded): made a leaf first,
# it is a leaf view of that base, and so is the trace's stand-in for it (meta.stand_ins). The alias its set_()'s
# later uses send their gradient to was a view of it, whose history autograd took again from that base once set_()
# moved the counter: the caller's tensor got no gradient.
def _set_then_made_leaf_then_sin(a0):
    a0.set_(a0.clone())
    a0.requires_grad_()
    return (a0.sin(),)


def _set_onto_view_then_made_leaf_then_view_read(a0):
    a0.set_(torch.linspace(0, 1, 10)[::2])
    a0.requires_grad_()
    return ((a0[1:] * 3).sum(),)


def _written_then_set_then_made_leaf_then_identity(a0):
    with torch.no_grad():
        a0.mul_(2)
    a0.set_(a0.clone())
    a0.requires_grad_()
    return (Identity.apply(a0) * a0,)


def _set_then_made_leaf_beside_written(a0, a1):
    a0.set_(a0.clone() + 1)
    a0.requires_grad_()
    a1.mul_(2)
    return (a0.sin() + a1,)


def _overlapping_slices_of_plain():
    base = torch.randn(24, generator=_gen())
    return (base[1:6], base[3:8])


def _diagonal_of_plain():
    return (torch.randn(5, 5, generator=_gen()).diagonal(),)


def _unsqueezed_of_plain():
    return (torch.randn(5, generator=_gen()).unsqueeze(0),)


def _transposed_of_plain():
    return (torch.randn(5, 4, generator=_gen()).t(),)


SET_THEN_MADE_LEAF = {
    "onto_other_shape_used_under_no_grad": (_set_onto_other_shape_then_made_leaf_read_under_no_grad, _plain_5),
    "function_of_slice": (_set_then_made_leaf_then_function, _slice_of_plain),
    "function_of_column": (_set_then_made_leaf_then_function, _column_of_plain),
    "expanded_grad_written_of_plain": (_set_then_made_leaf_then_expanded_grad_written, _plain_5),
    "expanded_grad_written_of_slice": (_set_then_made_leaf_then_expanded_grad_written, _slice_of_plain),
    "grad_written_of_column": (_set_then_made_leaf_then_grad_written, _column_of_plain),
    "onto_made_of_slice": (_set_onto_made_then_made_leaf, _slice_of_plain),
    "onto_made_of_plain": (_set_onto_made_then_made_leaf, _plain_5),
    "made_leaf_then_set_under_no_grad": (_made_leaf_then_set_under_no_grad, _plain_5),
    "identity_of_slice": (_set_then_made_leaf_then_identity, _slice_of_plain),
    "identity_of_column": (_set_then_made_leaf_then_identity, _column_of_plain),
    # The caller's tensor a view of a base needing none, of other kinds (its own leaf view once made a leaf).
    "identity_of_diagonal": (_set_then_made_leaf_then_identity, _diagonal_of_plain),
    "sin_of_slice": (_set_then_made_leaf_then_sin, _slice_of_plain),
    "sin_of_unsqueezed": (_set_then_made_leaf_then_sin, _unsqueezed_of_plain),
    "sin_of_transposed": (_set_then_made_leaf_then_sin, _transposed_of_plain),
    "sin_of_plain": (_set_then_made_leaf_then_sin, _plain_5),
    "onto_view_of_slice": (_set_onto_view_then_made_leaf_then_view_read, _slice_of_plain),
    "onto_view_of_plain": (_set_onto_view_then_made_leaf_then_view_read, _plain_5),
    # Its memory written first (the runtime epilogue's copy), or sharing a base with a written input (a synthetic
    # base's member).
    "written_first_of_slice": (_written_then_set_then_made_leaf_then_identity, _slice_of_plain),
    "beside_written_overlapping": (_set_then_made_leaf_beside_written, _overlapping_slices_of_plain),
}


def _input_grads_as_eager(fn, make_args) -> None:
    """The oracle compares the gradients of the leaves behind the inputs as called; the caller's tensor made a
    leaf inside is compared here: its ``.grad`` after a backward through every output requiring grad."""
    eager_args, compiled_args = make_args(), make_args()
    results = []
    for f, args in ((fn, eager_args), (aot.aot_function(fn, aot.boxed_nop), compiled_args)):
        try:
            sum(out.sum() for out in f(*args) if out.requires_grad).backward()
            results.append(None)
        except RuntimeError as error:
            results.append(type(error))
    assert results[0] == results[1], f"backward: eager {results[0]} vs compiled {results[1]}"
    for eager, compiled in zip(eager_args, compiled_args, strict=True):
        assert (eager.grad is None) == (compiled.grad is None), f"grad {eager.grad} vs {compiled.grad}"
        if eager.grad is not None:
            torch.testing.assert_close(compiled.grad, eager.grad)


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize("name", sorted(SET_THEN_MADE_LEAF))
def test_set_then_made_leaf(name, mode):
    check_in_mode(*SET_THEN_MADE_LEAF[name], mode)
    if mode == "training":
        _input_grads_as_eager(*SET_THEN_MADE_LEAF[name])


def _set_onto_other_shape_then_made_leaf(a0):
    a0.set_(torch.ones(6))
    a0.requires_grad_()
    return ((a0 * 2).sum(),)


def test_set_onto_other_shape_then_made_leaf_refused():
    # Eager's gradient for the caller's tensor has the shape set_() gave it; the compiled input's has the one
    # it was called with. Refused, not a gradient silently lost.
    with pytest.raises(UnsupportedMutationError, match="another shape"):
        aot.aot_function(_set_onto_other_shape_then_made_leaf, aot.boxed_nop)(torch.randn(5, generator=_gen()))


# Seed 22 program 1344: a non-leaf view input written where autograd does not see it (through ``detach()``), then
# set_() under no_grad (onto itself, or onto part of itself), then changed in place in grad mode. Eager's view
# takes its history again for the in-place op; the trace's fake view had it read below autograd (in set_()'s
# call again from ``StorageSetsOntoTensors``), where replaying its view ops recorded none: a leaf, refused.
def _written_then_set_onto_itself_then_as_strided(a0):
    a0.detach().index_put_((torch.tensor([0]),), torch.tensor(2.0))
    with torch.no_grad():
        a0.set_(a0)
    a0.as_strided_((2, 1), (2, 2), 13)
    return ()


def _written_then_set_onto_itself_then_unsqueezed(a0):
    a0.detach().mul_(2)
    with torch.no_grad():
        a0.set_(a0)
    a0.unsqueeze_(0)
    return (a0 * 1,)


def _written_then_set_onto_part_then_as_strided(a0):
    a0.detach().add_(1)
    with torch.no_grad():
        a0.set_(a0[1:])
    a0.as_strided_((2,), (1,), 9)
    return (a0.sum(),)


def _product_24():
    return torch.randn(24, generator=_gen()).requires_grad_() * 1


WRITTEN_VIEW_SET_THEN_CHANGED = {
    "as_strided_of_slice": (_written_then_set_onto_itself_then_as_strided, lambda: (_product_24()[7:12],)),
    "as_strided_of_column": (_written_then_set_onto_itself_then_as_strided, lambda: (_product_24().view(4, 6)[:, 2],)),
    "unsqueezed_of_row": (_written_then_set_onto_itself_then_unsqueezed, lambda: (_product_24().view(4, 6)[1],)),
    "unsqueezed_of_strided": (
        _written_then_set_onto_itself_then_unsqueezed,
        lambda: (_product_24().as_strided((5,), (2,), 3),),
    ),
    "onto_part_of_slice": (_written_then_set_onto_part_then_as_strided, lambda: (_product_24()[7:12],)),
    "onto_part_of_column": (_written_then_set_onto_part_then_as_strided, lambda: (_product_24().view(4, 6)[:, 2],)),
}


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize("name", sorted(WRITTEN_VIEW_SET_THEN_CHANGED))
def test_written_view_set_then_changed(name, mode):
    check_in_mode(*WRITTEN_VIEW_SET_THEN_CHANGED[name], mode)


def test_written_view_set_then_changed_called_again_with_a_leaf():
    # The program's second call: a detached tensor (no view, requiring no grad) through the same compiled function.
    fn, make_args = WRITTEN_VIEW_SET_THEN_CHANGED["as_strided_of_slice"]
    compiled = check(fn, make_args)
    check(fn, lambda: (torch.randn(29, generator=torch.Generator().manual_seed(1))[:5].detach(),), compiled_fn=compiled)
