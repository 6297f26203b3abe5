"""Fuzzer classes of geometry changes and aliasing (seed 22, ``benchmarks/fuzz_findings.md``): a view of an
intermediate taken after the intermediate's own geometry changed in place, ``set_()`` onto a view of a complex
input in its real dtype, and a geometry change of an input view whose base the call wrote. Each class as its
smallest program and close variants, run in training, under ``no_grad`` and under ``inference_mode``; eager is
the oracle."""

from __future__ import annotations

import pytest
import torch

from tests.functions import Identity, WithSign
from tests.oracle import check_in_mode, mode_params


def _randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=dtype)


# Class 3 (program 579): an intermediate changed in place (``transpose_``), then viewed. Eager's view has the
# intermediate itself as its ``_base``; the chain replayed the change on an alias of the graph's output (its
# final value), which became the view's ``_base`` instead of the output.


def _transposed_then_unfolded(a0):
    v0 = a0 @ a0.mT
    v0.transpose_(0, -1)
    v1 = v0.unfold(0, 2, 1)
    return (v0, v1)


def _viewed_before_and_after_t(a0):
    v0 = a0 * 2
    v1 = v0[1:]
    v0.t_()
    v2 = v0.unsqueeze(0)
    return (v0, v1, v2)


def _two_changes_then_viewed(a0):
    v0 = a0 * 2
    v0.t_()
    v0.unsqueeze_(0)
    v1 = v0[0, 1:]
    return (v1, v0)


def _as_strided_then_selected(a0):
    v0 = a0 * 2
    v0.as_strided_((2, 3), (1, 2), 1)
    v1 = v0.select(1, 2)
    return (v0, v1)


def _changes_between_views(a0):
    v0 = a0 + 1
    v0.t_()
    v1 = v0[:, 1:]
    v0.squeeze_()
    v0.unsqueeze_(1)
    v2 = v0.diagonal()
    return (v2, v0, v1)


def _resized_within_then_viewed(a0):
    v0 = a0 * 2
    v0.resize_(2, 5)
    v1 = v0[1]
    return (v0, v1)


def _unreturned_root_two_views(a0):
    v0 = a0 * 2
    v0.t_()
    return (v0[1:], v0.unfold(0, 2, 1))


def _function_output_t_then_viewed(a0):
    v0, _ = WithSign.apply(a0)
    v0.t_()
    return (v0, v0[1:], Identity.apply(v0).sum())


def _expanded_column():
    return (_randn(3, 1).expand(3, 4).detach().requires_grad_(),)


def _leaf():
    return (_randn(3, 4).requires_grad_(),)


# Class 6 (program 1091): ``a1.set_(a0.real)``, a0 complex, a1 a non-leaf requiring grad (eager records the
# set_()). The caller's a1 was set_() onto the complex memory by a geometry in float elements: out of bounds.


def _set_onto_real(a0, a1):
    a1.set_(a0.real)
    return ()


def _set_onto_imag(a0, a1):
    a1.set_(a0.imag)
    return ()


def _set_onto_imag_row_then_used(a0, a1):
    a1.set_(a0.imag[1])
    return (a1 * 1,)


def _set_onto_real_returned(a0, a1):
    a1.set_(a0.real)
    return (a1, a0)


def _set_onto_real_of_output(a0, a1):
    v = (a0 * 2).t()
    a1.set_(v.imag)
    return (v, a1)


def _transposed_complex_and_non_leaf():
    return (_randn(2, 3, dtype=torch.complex64).t(), _randn(2, 3, 4).requires_grad_() * 1)


def _complex_requiring_grad_and_non_leaf():
    return (_randn(2, 3, dtype=torch.complex64).requires_grad_(), _randn(2, 3, 4).requires_grad_() * 1)


# Class 7 (program 1348): an input view of a plain tensor written from one requiring grad (``copy_``), then its
# geometry changed (``t_``). The write-back went through the view's base; the view's own history, taken again
# only when asked, was not, and autograd judged the view a leaf requiring grad and refused the change.


def _copied_then_t(a0, a1):
    a0.copy_(a1)
    a0.t_()
    return (sum(t.real.sum() for t in (a0, a1)),)


def _copied_then_unsqueezed_returned(a0, a1):
    a0.copy_(a1)
    a0.unsqueeze_(0)
    return (a0, a1 * 1)


def _added_then_as_strided(a0, a1):
    a0.add_(a1)
    a0.as_strided_((2,), (1,), a0.storage_offset())
    return (a0 * 2,)


def _copied_written_then_squeezed(a0, a1):
    a0.copy_(a1)
    a0.unsqueeze_(0)
    a0.add_(1)
    a0.squeeze_(0)
    return (a0,)


def _column_and_view_requiring_grad():
    return (_randn(24)[2:14].view(3, 4)[:, 0], _randn(24).requires_grad_()[7:10])


def _slice_and_leaf():
    return (_randn(24)[2:5], _randn(3).requires_grad_())


def _strided_rows_and_non_leaf():
    return (_randn(4, 6)[1:3, ::2], _randn(2, 3).requires_grad_() * 1)


PROGRAMS = {
    # class 3
    "transposed_then_unfolded": (_transposed_then_unfolded, _expanded_column),
    "viewed_before_and_after_t": (_viewed_before_and_after_t, _leaf),
    "two_changes_then_viewed": (_two_changes_then_viewed, _expanded_column),
    "as_strided_then_selected": (_as_strided_then_selected, _leaf),
    "changes_between_views": (_changes_between_views, _leaf),
    "resized_within_then_viewed": (_resized_within_then_viewed, _expanded_column),
    "unreturned_root_two_views": (_unreturned_root_two_views, _leaf),
    "function_output_t_then_viewed": (_function_output_t_then_viewed, _leaf),
    # class 6
    "set_onto_real": (_set_onto_real, _transposed_complex_and_non_leaf),
    "set_onto_imag": (_set_onto_imag, _complex_requiring_grad_and_non_leaf),
    "set_onto_imag_row_then_used": (_set_onto_imag_row_then_used, _transposed_complex_and_non_leaf),
    "set_onto_real_returned": (_set_onto_real_returned, _complex_requiring_grad_and_non_leaf),
    "set_onto_real_of_output": (_set_onto_real_of_output, _complex_requiring_grad_and_non_leaf),
    # class 7
    "copied_then_t": (_copied_then_t, _column_and_view_requiring_grad),
    "copied_then_unsqueezed_returned": (_copied_then_unsqueezed_returned, _slice_and_leaf),
    "added_then_as_strided": (_added_then_as_strided, _column_and_view_requiring_grad),
    "copied_written_then_squeezed": (_copied_written_then_squeezed, _strided_rows_and_non_leaf),
}

# Strict xfails: (name, mode) -> why it still differs.
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_geometry_class(name, mode):
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)
