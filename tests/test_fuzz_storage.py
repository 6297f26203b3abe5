"""Fuzzer classes of storage geometry (seed 20, ``benchmarks/fuzz_findings.md``): ``set_()``, ``resize_()``,
``as_strided_()`` and writes through tensors whose elements share memory. Each class as its smallest
program, run in training, under ``no_grad`` and under ``inference_mode``; eager is the oracle."""

from __future__ import annotations

import pytest
import torch

from tests.functions import TriplesGradOutput
from tests.oracle import check_in_mode, mode_params


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


# Class 3: set_() under no_grad moves a view of a base requiring grad onto a bigger storage. Eager takes its
# history again from its base by strides, recorded only, reaching past the base's storage (no as_strided runs).
def _set_onto_bigger_storage(a0, a1):
    with torch.no_grad():
        a1.set_(a0.untyped_storage(), a0.storage_offset(), a0.shape, a0.stride())
    return (sum(t.real.sum() for t in (a0, a1)),)


def _strided_view_and_transposed_view():
    g = _gen()
    s0 = torch.randn(3, 8, generator=g).requires_grad_() * 1
    s1 = torch.randn(3, 3, generator=g).requires_grad_() * 1
    return s0[:, 1::3], s1.t()


# Classes 6, 14 and 26: set_() onto a storage the function made, then a geometry that covers part of it (or
# one element several times): eager's storage is the made one, whole, its size and its elements outside the
# input's final geometry included.
def _set_onto_clone_then_expand(a0):
    a0.set_(a0.clone())
    a0.as_strided_((2,), (0,), 4)
    return ()


def _matrix():
    return (torch.randn(4, 6, generator=_gen()),)


def _set_onto_restrided_flip(a0):
    v0 = a0.flip(0)
    v0.as_strided_((2,), (1,), 4)
    v1 = a0.as_strided((2,), (2,), 5)
    with torch.no_grad():
        v0.copy_(v1)
        a0.set_(v0)
    return ()


def _transposed_int():
    return (torch.randint(-4, 5, (4, 3), generator=_gen()).t(),)


def _set_onto_detached_slice(a0):
    v1 = a0.sign()
    a0.set_(v1[1:].detach())
    return ()


def _permuted_leaf():
    return (torch.randn(25, generator=_gen())[:12].view(4, 3).permute(1, 0).detach().requires_grad_()[...],)


# Class 18: a member of a synthetic base needing no grad, beside one that does (a .data alias of the same
# memory): eager resizes it, autograd never sees it.
def _zero_then_resize_other(a0, a1):
    with torch.no_grad():
        a0.zero_()
    a1.resize_(1)
    return ()


def _data_alias_and_view():
    s0 = torch.randn(24, generator=_gen())
    return s0.data.requires_grad_()[1:7], s0[7:19].view(3, 4)[:, ::2]


# Class 19: set_() onto another input, the same tensor passed twice before it (dedupe renumbers the input).
def _set_onto_later_input(a0, a1, a2):
    with torch.no_grad():
        a1.set_(a2)
    return (sum(t.real.sum() for t in (a0, a1, a2)),)


def _twice_then_other():
    g = _gen()
    a0 = torch.randn(2, 3, 4, generator=g).requires_grad_()
    return a0, a0, torch.randn(49, generator=g)[1:25].view(2, 3, 4).detach().requires_grad_()


# Class 21: a view taken from a view made a leaf (requires_grad on a view of memory needing none), read after
# a write under no_grad: eager takes its history again from the base, reaching nothing.
def _view_of_leaf_view_after_write(a0):
    a0.requires_grad = True
    v0 = a0[..., ::2]
    with torch.no_grad():
        a0.sigmoid_()
    return (sum(t.real.sum() for t in (a0, v0)),)


def _strided_plain_view():
    return (torch.randn(2, 8, generator=_gen())[:, ::2],)


# Class 22: index_put_ whose values share the written memory: eager refuses only overlaps it can judge (both
# tensors dense); a strided one it lets through.
def _index_put_own_values(a0):
    v0 = a0.unsqueeze(0)
    v0.data.index_put_((torch.tensor([0]),), v0.data)
    return ()


def _strided_int_view():
    return (torch.randint(-4, 5, (24,), generator=_gen())[4:16].view(3, 4)[:, ::2],)


def _index_put_dense_own_values(a0):
    a0.data.index_put_((torch.tensor([0]),), a0.data[1:2])
    return ()


def _dense_int():
    return (torch.randint(-4, 5, (6,), generator=_gen()),)


# Class 23: a returned view set_() onto the intermediate it is a view of: replayed as a set_() of the view onto
# its own memory (no traced tensor leaks into the runtime's replay).
def _view_set_onto_its_base(a0):
    v1 = a0 @ a0.mT
    v3 = v1[1:]
    v3.set_(v1)
    return (v3, sum(t.real.sum() for t in (a0, v1, v3)))


def _view_of_leaf():
    return (torch.randn(24, generator=_gen()).requires_grad_()[6:12].view(2, 3),)


# ... and onto the input it is a view of.
def _view_set_onto_its_input(a0):
    v0 = a0[1:]
    with torch.no_grad():
        v0.set_(a0[:, 1:])
    return (v0, a0 * 2)


def _plain_matrix():
    return (torch.randn(3, 4, generator=_gen()),)


# Class 33: t_() of a 3-D tensor raises eager's RuntimeError (the meta kernel's check is an AssertionError).
def _t_of_3d(a0):
    v0 = a0.flip(0)
    v0.t_()
    return ()


def _cube():
    return (torch.randn(2, 3, 4, generator=_gen()),)


# Class 35: out= a tensor of another shape, the input a transpose of it: TensorIterator counts the number
# among its operands and gives the resized output the input's strides.
def _add_out_into_transposed_self(a0):
    v0 = a0.transpose(0, -1)
    torch.add(v0, 1, out=a0)
    return ()


def _column():
    return (torch.randn(4, 1, generator=_gen()),)


# Class 42: a view of an intermediate after an in-place view op that changes nothing (squeeze_ of no size-1
# dimension): the intermediate base is found all the same.
def _view_after_noop_squeeze(a0):
    v0 = TriplesGradOutput.apply(a0)
    v1 = v0.expand(2, 4, 6)
    v1.squeeze_()
    v2 = v1[..., ::2]
    return (v2, a0, v1, sum(t.real.sum() for t in (a0, v0, v1, v2)))


def _view_at_offset():
    return (torch.randn(72, generator=_gen())[48:72].view(4, 6),)


# Class 27: a written input at an odd storage offset: its working copy keeps the offset, so view_as_complex of
# a view at an even one is accepted, as eager accepts it.
def _complex_view_of_written_input(a0):
    v0 = a0.narrow(-1, 1, 4)
    v2 = torch.view_as_complex(v0.unflatten(-1, (2, 2)))
    a0.data.scatter_(0, torch.zeros((1,), dtype=torch.long), 2.0)
    v3 = a0[..., ::2]
    return (v3, sum(t.real.sum() for t in (a0, v0, v2, v3)))


def _odd_offset():
    return (torch.randn(10, generator=_gen())[3:8],)


# Class 55: fill_ through a complex view of a written input at an odd offset: functionalization's copy into
# the complex view (aten.copy clones its destination's whole storage, an odd number of floats) takes a clone.
def _fill_complex_view(a0):
    v1 = torch.view_as_complex(a0.narrow(-1, 1, 4).unflatten(-1, (2, 2)))
    v1.fill_(2j)
    return ()


def _odd_offset_view_of_grad():
    return ((torch.randn(11, generator=_gen()).requires_grad_() * 1)[3:8],)


# Seed 22 (programs 2000-4999) class 2, program 4744: an empty view of an input sitting past its storage's end
# (``a0[1:]`` of a one-element as_strided_ one, an empty as_strided at a later offset) counted as reaching memory
# up to its offset: the synthetic base was taken over that much of the storage, out of bounds (setStorage).
def _empty_view_past_end(a0):
    a0.index_fill_(-1, torch.tensor([0]), 2)
    a0.as_strided_((1,), (2,), 0)
    with torch.no_grad():
        v0 = a0[1:]
    return (v0, a0 * 1)


def _empty_narrow_past_end(a0):
    a0.mul_(2)
    a0.as_strided_((1,), (3,), a0.storage_offset())
    return (a0.narrow(0, 1, 0) * 1, a0 + 0)


def _empty_as_strided_past_end(a0):
    a0.add_(1)
    v0 = a0.as_strided((0,), (1,), a0.storage_offset() + 5)
    return (v0.sum(), a0 * 2)


def _empty_view_past_end_written(a0):
    a0.as_strided_((1,), (2,), a0.storage_offset())
    v0 = a0[1:]
    v0.mul_(2)
    a0.add_(1)
    return (v0, a0)


def _expanded_int_scalar():
    return (torch.randint(-4, 5, (), generator=_gen()).expand(2),)


def _expanded_scalar_of_grad():
    return ((torch.randn((), generator=_gen()).requires_grad_() * 1).expand(3),)


def _tail_slice():
    return (torch.randn(6, generator=_gen())[4:],)


def _tail_slice_of_grad():
    return ((torch.randn(6, generator=_gen()).requires_grad_() * 1)[4:],)


PROGRAMS = {
    "complex_view_of_written_input": (_complex_view_of_written_input, _odd_offset),
    "fill_complex_view": (_fill_complex_view, _odd_offset_view_of_grad),
    "t_of_3d": (_t_of_3d, _cube),
    "add_out_into_transposed_self": (_add_out_into_transposed_self, _column),
    "view_after_noop_squeeze": (_view_after_noop_squeeze, _view_at_offset),
    "view_set_onto_its_base": (_view_set_onto_its_base, _view_of_leaf),
    "view_set_onto_its_input": (_view_set_onto_its_input, _plain_matrix),
    "index_put_own_values": (_index_put_own_values, _strided_int_view),
    "index_put_dense_own_values": (_index_put_dense_own_values, _dense_int),
    "zero_then_resize_other": (_zero_then_resize_other, _data_alias_and_view),
    "set_onto_later_input": (_set_onto_later_input, _twice_then_other),
    "view_of_leaf_view_after_write": (_view_of_leaf_view_after_write, _strided_plain_view),
    "set_onto_bigger_storage": (_set_onto_bigger_storage, _strided_view_and_transposed_view),
    "set_onto_clone_then_expand": (_set_onto_clone_then_expand, _matrix),
    "set_onto_restrided_flip": (_set_onto_restrided_flip, _transposed_int),
    "set_onto_detached_slice": (_set_onto_detached_slice, _permuted_leaf),
    "empty_view_past_end_of_expanded_int": (_empty_view_past_end, _expanded_int_scalar),
    "empty_view_past_end_of_expanded_grad": (_empty_view_past_end, _expanded_scalar_of_grad),
    "empty_narrow_past_end": (_empty_narrow_past_end, _tail_slice_of_grad),
    "empty_as_strided_past_end": (_empty_as_strided_past_end, _tail_slice),
    "empty_view_past_end_written": (_empty_view_past_end_written, _expanded_int_scalar),
    "empty_view_past_end_written_of_grad": (_empty_view_past_end_written, _expanded_scalar_of_grad),
}

# Strict xfails: (name, mode) -> why it still differs.
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_storage_class(name, mode):
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)
