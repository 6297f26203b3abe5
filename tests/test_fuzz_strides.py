"""Fuzzer classes of strides and dtypes (seed 21, ``benchmarks/fuzz_findings.md``): an ``out=`` resize
restriding by the strides of an intermediate at its size-1 dimensions, and ``set_()`` onto a view of an input
in another dtype. Each class as its smallest program and close variants, run in training, under ``no_grad``
and under ``inference_mode``; eager is the oracle."""

from __future__ import annotations

import pytest
import torch

from tests.oracle import check_in_mode, mode_params


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


# Class 1 (program 53): ``a * 2`` of a (1, 4) transpose has eager's strides (1, 1) (TensorIterator breaks the
# tie at the size-1 dimension by size), fake kernels' (4, 1); an out= resize into the input then restrides it
# by them: its size-1 dimension's stride was the fake's.
def _neg_out_of_expanded_double(a0):
    a0.t_()
    v0 = a0 * 2
    torch.neg(v0.expand(2, 1, 4), out=a0)
    return ()


def _add_out_of_expanded_double(a0):
    a0.t_()
    v0 = a0 * 2
    torch.add(v0.expand(2, 1, 4), 1, out=a0)
    return ()


def _mul_out_of_unsqueezed_sum(a0):
    a0.t_()
    v0 = a0 + 1
    torch.mul(v0.unsqueeze(0).expand(3, 1, 4), 2, out=a0)
    return (v0,)


def _neg_out_of_expanded_clone(a0):
    a0.t_()
    v0 = a0.clone()  # (keeps the input's strides, in eager as in fake kernels)
    torch.neg(v0.expand(2, 1, 4), out=a0)
    return (v0,)


def _int_column():
    return (torch.randint(-4, 5, (4, 1), generator=_gen()),)


def _float_column():
    return (torch.randn(4, 1, generator=_gen()),)


# Class 3 (program 944): a tensor set_() onto a view of an input in another dtype (the real part of a complex
# input) is replayed on the input's memory: its geometry is in the view's elements, not the input's.
def _set_onto_real_of_input(a0, a1):
    v0 = a1.clone()
    v2 = v0.sin()
    v4 = a0.real
    v2.set_(v4.detach())
    return (v2, sum(t.real.sum() for t in (a0, a1, v0, v2, v4)))


def _complex_transpose_and_expand():
    g = _gen()
    s0 = torch.randn(24, generator=g, dtype=torch.complex64).requires_grad_() * 1
    s1 = torch.randn(24, generator=g).requires_grad_() * 1
    return (s0[3:15].view(4, 3).t(), s1[3:6].expand(2, 3))


def _set_onto_imag_of_input(a0):
    v0 = torch.empty(0)
    v0.set_(a0.imag.detach())
    return (v0,)


def _set_onto_view_as_real_of_input(a0):
    v0 = a0.abs()
    v0.set_(torch.view_as_real(a0).detach())
    return (v0, v0.sum())


def _complex_transpose():
    return (torch.randn(12, generator=_gen(), dtype=torch.complex64)[2:].view(2, 5).t(),)


def _set_onto_int_view_of_input(a0):
    v0 = torch.empty(0, dtype=torch.int32)
    v0.set_(a0.view(torch.int32)[1:])
    return (v0,)


def _float_slice():
    return (torch.randn(10, generator=_gen())[2:8],)


PROGRAMS = {
    "neg_out_of_expanded_double": (_neg_out_of_expanded_double, _int_column),
    "neg_out_of_expanded_clone": (_neg_out_of_expanded_clone, _float_column),
    "add_out_of_expanded_double": (_add_out_of_expanded_double, _float_column),
    "mul_out_of_unsqueezed_sum": (_mul_out_of_unsqueezed_sum, _float_column),
    "set_onto_real_of_input": (_set_onto_real_of_input, _complex_transpose_and_expand),
    "set_onto_imag_of_input": (_set_onto_imag_of_input, _complex_transpose),
    "set_onto_view_as_real_of_input": (_set_onto_view_as_real_of_input, _complex_transpose),
    "set_onto_int_view_of_input": (_set_onto_int_view_of_input, _float_slice),
}

# Strict xfails: (name, mode) -> why it still differs.
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_strides_class(name, mode):
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)
