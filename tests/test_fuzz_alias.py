"""Fuzzer classes of aliasing (seed 20): outputs' storage/_base, views regenerated after a write or a
``set_()``, each as a small program generalising the fuzzer's; eager is the oracle."""

from __future__ import annotations

import pytest
import torch

from tests.oracle import MODES, check_in_mode


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _leaf(*shape: int, dtype: torch.dtype = torch.float32):
    return lambda: (torch.randn(*shape, generator=_gen(), dtype=dtype).requires_grad_(),)


# Class 6: a view of another dtype (``.imag``, ``view_as_real``, ``view_as_complex``) of a leaf that set_()
# under no_grad then moves: eager takes the view's history again by replaying its view ops on the leaf (a
# dtype view has a view function), not by strides, which a view of the leaf's dtype cannot express.
def _imag_then_set_onto_itself(a0):
    v0 = a0.imag
    with torch.no_grad():
        a0.set_(a0.detach())
    return (sum(t.real.sum() for t in (a0, v0)),)


def _real_row_then_set_onto_itself(a0):
    v0 = torch.view_as_real(a0)[1]
    with torch.no_grad():
        a0.set_(a0.detach())
    return (a0.imag.sum() + 3 * v0.sum(),)


def _complex_of_real_then_set_onto_clone(a0):
    v0 = torch.view_as_complex(a0)
    with torch.no_grad():
        a0.set_(a0.detach().clone())
    return ((v0 * 2).real.sum() + a0.sum(),)


def _imag_then_set_returned(a0):
    v0 = a0.imag
    with torch.no_grad():
        a0.set_(a0.detach())
    return (a0, v0)


DTYPE_VIEW_OF_MOVED_LEAF = {
    "imag_then_set_onto_itself": (_imag_then_set_onto_itself, _leaf(2, 2, dtype=torch.complex64)),
    "real_row_then_set_onto_itself": (_real_row_then_set_onto_itself, _leaf(3, 2, dtype=torch.complex64)),
    "complex_of_real_then_set_onto_clone": (_complex_of_real_then_set_onto_clone, _leaf(3, 2)),
    "imag_then_set_returned": (_imag_then_set_returned, _leaf(2, 2, dtype=torch.complex64)),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(DTYPE_VIEW_OF_MOVED_LEAF))
def test_dtype_view_of_moved_leaf(name, mode):
    check_in_mode(*DTYPE_VIEW_OF_MOVED_LEAF[name], mode)
