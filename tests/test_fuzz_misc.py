"""Small fuzzer classes of seed 20 (``benchmarks/fuzz_findings.md``): wrong values, shapes, aliasing and
crashes of programs that set_() inputs, or view them, then write memory they once shared; eager is the
oracle (``tests/oracle.py``)."""

from __future__ import annotations

import pytest
import torch

from tests.functions import Identity, ScaledBySaved, WithSign
from tests.oracle import MODES, check_in_mode


def _randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=dtype)


# Slice 2, class 5 (program 4922): a view taken of an input after set_() moved it to other memory under no_grad,
# used after a write into the input's old base. Eager takes the view's history again from that base by strides,
# but its values stay the memory it sits in now; the stand-in read the base's memory at the view's geometry.


def _view_after_set_then_base_written(a1, a2):
    with torch.no_grad():
        a1.set_(a2.clone())
    v1 = a1[1:]
    with torch.no_grad():
        a2.fill_(2.0)
    return (v1 * 1,)


def _expanded_after_set_then_base_written(a0, a1, a2):
    with torch.no_grad():
        a0.clamp_(min=-0.5)
    with torch.no_grad():
        a1.set_(a2.clone())
    v0 = a2.unfold(0, 2, 1)
    v1 = a1.expand(2, 3, 4)
    with torch.set_grad_enabled(False):
        a2.fill_(2.0)
    return (sum(t.real.sum() for t in (a0, a1, a2, v0, v1)),)


def _view_after_set_onto_input_then_written(a1, a2):
    with torch.no_grad():
        a1.set_(a2)
    v1 = a1.t()
    with torch.no_grad():
        a2.mul_(2.0)
    return (v1 * 1, a1)


def _three_overlapping_blocks():
    s0 = _randn(26).requires_grad_()
    return (s0[0:12].view(3, 4), s0[7:19].view(3, 4), s0[14:26].view(3, 4))


def _two_overlapping_blocks():
    return _three_overlapping_blocks()[1:]


VIEW_OF_MOVED_INPUT = {
    "view_after_set_then_base_written": (_view_after_set_then_base_written, _two_overlapping_blocks),
    "expanded_after_set_then_base_written": (_expanded_after_set_then_base_written, _three_overlapping_blocks),
    "view_after_set_onto_input_then_written": (_view_after_set_onto_input_then_written, _two_overlapping_blocks),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(VIEW_OF_MOVED_INPUT))
def test_view_of_moved_input_after_base_written(name, mode):
    check_in_mode(*VIEW_OF_MOVED_INPUT[name], mode)


# Slice 2, class 6 (program 4976): a view of an input set_() onto the input (or part of it), then the input set_()
# elsewhere. Eager's view sits where the input was at its set_(); the recorded step read the source's geometry at
# the end of the run (where it had moved since), and the output came back with the moved input's shape.


def _view_set_onto_input_then_input_moved(a0, a1):
    v0 = a0[1:]
    v0.set_(a0)
    a0.set_(a1.detach())
    return (v0,)


def _view_set_onto_part_then_input_transposed(a0, a1):
    v0 = a0[...]
    v0.set_(a0[1:])
    a0.t_()
    return (v0, a0 * 1)


def _function_view_set_onto_input_then_input_moved(a0, a1):
    with torch.no_grad():
        v0 = Identity.apply(a0)
    with torch.no_grad():
        v0.set_(a0)
    with torch.no_grad():
        a0.set_(a1.untyped_storage(), a1.storage_offset(), a1.shape, a1.stride())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        v2 = v0 @ v0.mT
        v0.data.transpose_(0, -1)
    return (a1, v0, sum(t.real.sum() for t in (a0, a1, v0, v2)))


def _transposed_non_leaf_and_block():
    s1 = _randn(10).requires_grad_()
    return ((_randn(3, 3).requires_grad_() * 1).t(), s1[5:9].view(2, 2))


SET_ONTO_SOURCE_MOVED_LATER = {
    "view_set_onto_input_then_input_moved": _view_set_onto_input_then_input_moved,
    "view_set_onto_part_then_input_transposed": _view_set_onto_part_then_input_transposed,
    "function_view_set_onto_input_then_input_moved": _function_view_set_onto_input_then_input_moved,
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(SET_ONTO_SOURCE_MOVED_LATER))
def test_view_set_onto_source_moved_later(name, mode):
    check_in_mode(SET_ONTO_SOURCE_MOVED_LATER[name], _transposed_non_leaf_and_block, mode)


# Slice 2, class 3 (program 4311) and flags class 21: an output's gradient reaches an autograd.Function whose
# backward writes its saved input, through a leaf the function made only. Eager's backward runs every node
# reaching a leaf; the joint trace differentiated the inputs only (none, or not through that Function), so the
# write never happened.


def _function_behind_made_leaf(a0, a1):
    _, v2 = WithSign.apply(a0)
    v2.requires_grad_()
    v4 = ScaledBySaved.apply(v2, a0)
    return (v4,)


def _function_behind_fresh_leaf(a0, a1):
    w = torch.ones(2, requires_grad=True)
    return (ScaledBySaved.apply(w, a0), a1 * 2)


def _program_4311(a0, a1):
    v0 = a1[1:]
    v1, v2 = WithSign.apply(a0)
    v3 = ScaledBySaved.apply(a1, a1)
    v1.t_()
    with torch.set_grad_enabled(False):
        v2.requires_grad_()
    with torch.set_grad_enabled(False):
        v1.index_fill_(-1, torch.tensor([0]), 2.0)
    v4 = ScaledBySaved.apply(v2, a0)
    return (v1, v4, sum(t.real.sum() for t in (a0, a1, v0, v1, v2, v3, v4)))


def _column_and_expanded_scalar():
    return (_randn(2, 8)[:, 2], _randn(()).expand(2))


def _column_and_leaf():
    return (_randn(2, 8)[:, 2], _randn(2).requires_grad_())


BACKWARD_WRITES_BEHIND_MADE_LEAF = {
    "function_behind_made_leaf": (_function_behind_made_leaf, _column_and_expanded_scalar),
    "function_behind_fresh_leaf": (_function_behind_fresh_leaf, _column_and_expanded_scalar),
    "function_behind_fresh_leaf_other_input_requiring_grad": (_function_behind_fresh_leaf, _column_and_leaf),
    "program_4311": (_program_4311, _column_and_expanded_scalar),
}


@pytest.mark.parametrize("name", sorted(BACKWARD_WRITES_BEHIND_MADE_LEAF))
def test_function_backward_writes_input_behind_made_leaf(name):
    check_in_mode(*BACKWARD_WRITES_BEHIND_MADE_LEAF[name], "training")


# Slice 2, class 2 (program 4486): under the caller's no_grad, a view of an input taken before set_() moved the
# input (a leaf there: a view made under no_grad) to smaller memory. The stand-in giving that view the history eager
# takes again (the leaf as_strided in the view's geometry, on its new memory) reached past that memory, which a real
# as_strided refuses (setStorage out of bounds): it is recorded only there now.


def _view_then_input_moved_to_smaller(a1):
    v0 = a1[1:]
    with torch.no_grad():
        a1.set_(torch.ones(2))
    return (v0 * 1,)


def _view_then_input_moved_then_enable_grad(a1):
    v0 = a1[1:]
    with torch.no_grad():
        a1.set_(torch.ones(2))
    with torch.enable_grad():
        return (v0 * 1,)


def _program_4486(a0, a1):
    a1.detach().transpose_(0, -1)
    a0.data.t_()
    v0 = a1.transpose(0, -1)
    v0.data.resize_(11)
    v1 = a0.flip(0)
    with torch.no_grad():
        a1.set_(v1)
    return (a0, a1, sum(t.real.sum() for t in (a0, a1, v0, v1)))


def _strided_columns():
    return (_randn(3, 8).requires_grad_()[:, 1::3],)


def _strided_columns_twice():
    (i0,) = _strided_columns()
    return (i0, i0)


VIEW_OF_INPUT_MOVED_UNDER_NO_GRAD = {
    "view_then_input_moved_to_smaller": (_view_then_input_moved_to_smaller, _strided_columns),
    "view_then_input_moved_then_enable_grad": (_view_then_input_moved_then_enable_grad, _strided_columns),
    "program_4486": (_program_4486, _strided_columns_twice),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(VIEW_OF_INPUT_MOVED_UNDER_NO_GRAD))
def test_view_of_input_moved_under_no_grad(name, mode):
    check_in_mode(*VIEW_OF_INPUT_MOVED_UNDER_NO_GRAD[name], mode)


# Slice 3, class 6 (program 8009): under the caller's no_grad, an input that is a view made there (of a leaf
# requiring grad) set_() onto other memory, then a detach() (or .data) of it taken in an enable_grad region and
# returned (resized, expanded). Eager's detach() reads no history of the input, which autograd refuses for a view
# made under no_grad whose memory changed since; the replay took the input's geometry then by an as_strided in
# grad mode, which reads it, and raised.


def _program_8009(a0):
    with torch.no_grad():
        a0.set_(a0.clone())
    with torch.enable_grad():
        v0 = a0.detach()
    v0.resize_(5)
    v2 = v0.expand(2, 5)
    return (v2, sum(t.sum() for t in (a0, v0, v2)))


def _data_after_set_onto_smaller(a0):
    with torch.no_grad():
        a0.set_(torch.ones(4))
    with torch.enable_grad():
        v0 = a0.data
    return (v0, a0.sum() + v0.sum())


def _detach_after_set_then_written(a0):
    with torch.no_grad():
        a0.set_(a0.clone())
    with torch.enable_grad():
        v0 = a0.detach()
    with torch.no_grad():
        a0.mul_(2)
    return (v0, a0.sum() + v0.sum())


def _data_after_set_onto_other_shape(a0):
    with torch.no_grad():
        a0.set_(torch.ones(2, 3))
    with torch.enable_grad():
        v0 = a0.data
    return (v0.resize_(2).expand(2, 2), v0.sum())


def _slice_of_leaf():
    return (_randn(24).requires_grad_()[2:8],)


def _rows_of_leaf():
    return (_randn(4, 3).requires_grad_()[1:3],)


DETACH_OF_MOVED_INPUT = {
    "program_8009": (_program_8009, _slice_of_leaf),
    "data_after_set_onto_smaller": (_data_after_set_onto_smaller, _slice_of_leaf),
    "detach_after_set_then_written": (_detach_after_set_then_written, _slice_of_leaf),
    "data_after_set_onto_other_shape": (_data_after_set_onto_other_shape, _rows_of_leaf),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(DETACH_OF_MOVED_INPUT))
def test_detach_in_enable_grad_of_moved_input(name, mode):
    check_in_mode(*DETACH_OF_MOVED_INPUT[name], mode)
