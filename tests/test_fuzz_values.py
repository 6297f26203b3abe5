"""Fuzzer classes of output values and aliasing (seed 20, ``benchmarks/fuzz_findings.md``): outputs whose
values, storage or ``_base`` differed from eager's. Each class as its smallest program, run in training, under
``no_grad`` and under ``inference_mode``; eager is the oracle."""

from __future__ import annotations

import pytest
import torch

from tests.functions import Identity
from tests.oracle import check_in_mode, mode_params


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


# Class 3: a view taken before requires_grad_() on the input it views: eager's is a view of the input's base
# without history; collection judged it by a replay with history and made the graph compute it (no alias).
def _view_then_requires_grad(a0):
    v1 = a0.view(-1)
    a0.requires_grad_()
    return (v1,)


def _slice_of_plain():
    return (torch.randn(10, generator=_gen())[5:10],)


# Class 2: set_() under no_grad moves a view of a base requiring grad onto another input, in a trace that
# follows regenerated views (another input's transpose_): the mode regenerating views took aten.set_ (as
# another mode calls it again) for an op reading its input, and set_() a stand-in instead of the input.
def _transpose_then_set_onto_other(a0, a1, a2):
    a1.transpose_(0, -1)
    with torch.no_grad():
        a0.set_(a2)
    return (sum(t.real.sum() for t in (a0, a1, a2)),)


def _three_views_of_non_leaf():
    s0 = torch.randn(72, generator=_gen()).requires_grad_() * 1
    return s0[0:24].view(4, 6), s0[24:48].view(4, 6), s0[48:72].view(4, 6)


# Class 8: a view set_() onto another view of its input after the input's geometry changed in place: the
# offset of the set_() was measured from the view taken again from the input's final geometry, not from the
# one it had when the view was taken (where the replay takes it).
def _view_set_after_input_restrided(a0):
    v0 = a0.narrow(-1, 1, 2)
    a0.unsqueeze_(0)
    a0.transpose_(0, -1)
    v2 = a0.transpose(0, -1)
    v0.set_(v2)
    return (v0,)


def _column_of_matrix():
    return (torch.randn(3, 8, generator=_gen())[:, 2],)


# Class 10: an autograd.Function returning an input that set_() under no_grad moved within its storage: the
# graph computes its history, the epilogue puts it on the input's view, whose chain was not taken again from
# the input's final geometry (where the layer below sees it) and reached past the storage.
def _function_of_moved_input(a0, a1):
    with torch.no_grad():
        a0.set_(a1)
    return (Identity.apply(a0),)


def _overlapping_views_of_leaf():
    s0 = torch.randn(8, generator=_gen()).requires_grad_()
    return s0[0:5], s0[3:8]


# Class 12: a complex view of an input at an even offset whose synthetic base (merged with an overlapping input)
# starts at an odd one: the base's written copy kept its offset 0, so the member's fell odd and view_as_complex
# refused it, which eager accepts.
def _complex_view_of_written_member(a0, a1):
    v0 = torch.view_as_complex(a1.unflatten(-1, (2, 2)))
    with torch.no_grad():
        a1.index_fill_(-1, torch.tensor([0]), 2.0)
    return (v0, sum(t.real.sum() for t in (a0, a1, v0)))


def _overlapping_at_odd_and_even_offsets():
    s0 = torch.randn(24, generator=_gen()).requires_grad_()
    return s0[5:11].view(2, 3), s0[6:10]


# Class 25: a returned view of an intermediate set_() onto a clone the function made: its replay held a tensor of
# the trace. The graph computes its value; it comes back as a view (its base a tensor the caller never gets).
def _view_of_intermediate_set_onto_clone(a0):
    v1 = a0 @ a0.mT
    v2 = v1.view(-1)
    with torch.no_grad():
        v2.set_(v1.clone())
    return (v2, v1 * 2)


def _view_of_intermediate_set_onto_clone_in_grad_mode(a0):
    v1 = a0 @ a0.mT
    v2 = v1.view(-1)
    v2.set_(v1.clone())
    return (v2,)


def _strided_view_of_leaf():
    return (torch.randn(24, generator=_gen()).requires_grad_()[6:18].view(3, 4)[:, ::2],)


# Class 5: out= a .data alias of a clone, of another shape: the resize grows the clone's storage, which both
# outputs share past the clone's elements. The graph returns that whole storage, both are taken again on it
# (they were: the alias replayed by an out-of-place resize, on memory of its own, its new element uninitialized).
# An output requiring grad has its history computed by the graph, put on that memory.
def _add_out_into_data_of_clone(a0, a1):
    v0 = a1.clone()
    v2 = v0.data
    torch.add(a0.detach(), 1, out=v2)
    return (v0, v2, sum(t.real.sum() for t in (a0, a1, v0, v2)))


def _int_strided_views():
    s1 = torch.randint(-4, 5, (24,), generator=_gen())
    return s1[7:15:2], s1[3:15].view(3, 4)[:, 1]


def _resize_detached_alias_of_product(a0):
    v0 = a0 * 2
    v2 = v0.detach()
    v2.resize_(8)
    v2.fill_(1.0)
    return (v0, v2)


def _views_on_grown_storage(a0):
    v0 = a0 * 1
    v2 = v0.detach()
    v2.resize_(2, 5)
    v2.fill_(3.0)
    return (v0[1:], v2.t(), v2[1])


def _leaf_vector():
    return (torch.randn(6, generator=_gen()).requires_grad_(),)


PROGRAMS = {
    "add_out_into_data_of_clone": (_add_out_into_data_of_clone, _int_strided_views),
    "resize_detached_alias_of_product": (_resize_detached_alias_of_product, _leaf_vector),
    "views_on_grown_storage": (_views_on_grown_storage, _leaf_vector),
    "view_of_intermediate_set_onto_clone": (_view_of_intermediate_set_onto_clone, _strided_view_of_leaf),
    "view_of_intermediate_set_onto_clone_in_grad_mode": (
        _view_of_intermediate_set_onto_clone_in_grad_mode,
        _strided_view_of_leaf,
    ),
    "complex_view_of_written_member": (_complex_view_of_written_member, _overlapping_at_odd_and_even_offsets),
    "function_of_moved_input": (_function_of_moved_input, _overlapping_views_of_leaf),
    "view_set_after_input_restrided": (_view_set_after_input_restrided, _column_of_matrix),
    "transpose_then_set_onto_other": (_transpose_then_set_onto_other, _three_views_of_non_leaf),
    "view_then_requires_grad": (_view_then_requires_grad, _slice_of_plain),
}

# Strict xfails: (name, mode) -> why it still differs.
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_values_class(name, mode):
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)
