"""Fuzzer class of seed 22 (program 3270): a view of a leaf, a view taken of it, then under ``no_grad`` an
``as_strided_`` moving it to an absolute offset above the elements it had (``wrong: grad of autograd leaf``).

Eager takes the moved view's history again by strides from its base, and the view taken before keeps the
old geometry: the leaf's gradient reaches both. The compiled function differentiates the input in its final
geometry, the old one taken from memory below it (a synthetic base); that memory must start low enough for
the old geometry, which may lie below the final one. Each program and close variants (other views taken
before, other final geometries and bases), in every mode; eager is the oracle.
"""

from __future__ import annotations

import pytest
import torch

from tests.oracle import check, check_in_mode, mode_params


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _slice_of_leaf():
    s0 = torch.randn(24, generator=_gen()).requires_grad_()
    return (s0[6:16:2],)


def _view_of_small_leaf():
    # A leaf of 5 elements at offset 0 of a 29-element storage: the final geometry lies above the leaf.
    r0 = torch.randn(29, generator=_gen(1))
    return (r0[:5].view((5,)).detach().requires_grad_()[...],)


def _view_of_offset_leaf():
    # A leaf of 6 elements at offset 2 of a 29-element storage, viewed from its second element.
    r0 = torch.randn(29, generator=_gen(1))
    return (r0[2:8].detach().requires_grad_()[1:],)


def _rows_of_small_leaf():
    # A 2x3 leaf on the first 6 elements of a 29-element storage.
    r0 = torch.randn(29, generator=_gen(1))
    return (r0[:6].view(2, 3).detach().requires_grad_()[:, :],)


def _front_of_leaf():
    s0 = torch.randn(24, generator=_gen()).requires_grad_()
    return (s0[:6],)


def _rows_of_leaf():
    s0 = torch.randn(4, 6, generator=_gen()).requires_grad_()
    return (s0[:2],)


def _every_other_then_expanded(a0):
    v1 = a0[..., ::2]
    with torch.no_grad():
        a0.as_strided_((3,), (0,), 10)
    return (sum(t.real.sum() for t in (a0, v1)),)


def _every_other_then_moved_up(a0):
    v1 = a0[::2]
    with torch.no_grad():
        a0.as_strided_((2,), (1,), 12)
    return (a0 * 2, v1 * 3)


def _select_then_expanded(a0):
    v1 = a0[1]
    with torch.no_grad():
        a0.as_strided_((2, 2), (0, 1), 10)
    return ((a0.sum() + v1.sum()) * 1,)


def _narrow_then_moved_up_2d(a0):
    v1 = a0.narrow(-1, 1, 3)
    with torch.no_grad():
        a0.as_strided_((2, 2), (2, 1), 13)
    return (a0.exp().sum() + v1.sin().sum(),)


def _transposed_then_moved_up(a0):
    v1 = a0.t()
    with torch.no_grad():
        a0.as_strided_((3,), (2,), 14)
    return (a0.sum(), v1 * 1)


PROGRAMS = {
    "every_other_then_expanded_slice": (_every_other_then_expanded, _slice_of_leaf),
    "every_other_then_expanded_small_leaf": (_every_other_then_expanded, _view_of_small_leaf),
    "every_other_then_moved_up_front": (_every_other_then_moved_up, _front_of_leaf),
    "every_other_then_moved_up_small_leaf": (_every_other_then_moved_up, _view_of_small_leaf),
    "every_other_then_moved_up_offset_leaf": (_every_other_then_moved_up, _view_of_offset_leaf),
    "select_then_expanded_rows": (_select_then_expanded, _rows_of_leaf),
    "select_then_expanded_small_rows": (_select_then_expanded, _rows_of_small_leaf),
    "narrow_then_moved_up_small_rows": (_narrow_then_moved_up_2d, _rows_of_small_leaf),
    "transposed_then_moved_up_small_rows": (_transposed_then_moved_up, _rows_of_small_leaf),
    "narrow_then_moved_up_rows": (_narrow_then_moved_up_2d, _rows_of_leaf),
    "transposed_then_moved_up_rows": (_transposed_then_moved_up, _rows_of_leaf),
}


# Seed 29 program 67: a view of a leaf used, then under ``no_grad`` restrided over every other element of it
# (``as_strided_((2,), (2,), 0)``): its final geometry skips memory between its elements, which the use before
# read. The compiled function's gradient for the input covers its elements only, so the skipped elements' came back
# zero; such an input is taken from memory spanning its storage (a synthetic base), as one reaching past its end is.
def _column_of_leaf():
    return (torch.randn(3, 1, generator=_gen()).requires_grad_().expand(3, 4),)


def _column_of_non_leaf():
    return ((torch.randn(3, 1, generator=_gen()).requires_grad_() * 1).expand(3, 4),)


def _flat_view_of_leaf():
    return (torch.randn(3, 1, generator=_gen()).requires_grad_().view(3),)


def _rows_view_of_leaf():
    return (torch.randn(6, generator=_gen()).requires_grad_().view(2, 3),)


def _used_then_every_other(a0):
    v0 = a0 * 2
    with torch.set_grad_enabled(False):
        a0.as_strided_((2,), (2,), 0)
    return (sum(t.real.sum() for t in (a0, v0)),)


def _used_then_every_other_unused(a0):
    v0 = a0 * 2
    with torch.no_grad():
        a0.as_strided_((2,), (2,), 0)
    return (v0.sum(), a0)


def _used_then_gapped_rows(a0):
    v0 = a0.exp()
    with torch.no_grad():
        a0.as_strided_((2, 2), (3, 2), 0)
    return (a0 * 3, v0.sum())


def _used_then_every_other_above(a0):
    v0 = a0.sin()
    with torch.no_grad():
        a0.as_strided_((2,), (2,), 1)
    return (a0.sum() + v0.sum(),)


PROGRAMS |= {
    "used_then_every_other_column": (_used_then_every_other, _column_of_leaf),
    "used_then_every_other_column_non_leaf": (_used_then_every_other, _column_of_non_leaf),
    "used_then_every_other_flat": (_used_then_every_other, _flat_view_of_leaf),
    "used_then_every_other_unused_column": (_used_then_every_other_unused, _column_of_leaf),
    "used_then_every_other_unused_flat": (_used_then_every_other_unused, _flat_view_of_leaf),
    "used_then_gapped_rows": (_used_then_gapped_rows, _rows_view_of_leaf),
    "used_then_every_other_above_rows": (_used_then_every_other_above, _rows_view_of_leaf),
    "used_then_every_other_above_front": (_used_then_every_other_above, _front_of_leaf),
}


# A non-leaf requiring grad that is no view, used, then restrided under ``no_grad`` (found beside program 67): eager's
# keeps its history through the change, so uses before and after reach it index by index in the geometry it had (the
# engine sums a gradient of another shape to it, or refuses it). The compiled function differentiated it in its
# final geometry: a permuted one got a permuted gradient, a smaller one a backward error eager has not.
def _non_leaf(*shape):
    def make():
        return (torch.randn(*shape, generator=_gen()).requires_grad_() * 1,)

    make.__name__ = f"_non_leaf_{'x'.join(map(str, shape))}"
    return make


def _used_then_restrided(size, stride, returns):
    def f(a0):
        v0 = a0 * torch.arange(a0.numel()).view(a0.shape)
        with torch.no_grad():
            a0.as_strided_(size, stride, 0)
        w0 = a0.exp()
        return {"before": (v0.sum(),), "after": (w0.sum(),), "both": (v0.sum() + w0.sum(), a0)}[returns]

    return f


PROGRAMS |= {
    f"non_leaf_{geometry}_{returns}": (_used_then_restrided(size, stride, returns), _non_leaf(*shape))
    for geometry, shape, size, stride in (
        ("every_other", (3,), (2,), (2,)),
        ("front", (3,), (2,), (1,)),
        ("unsqueezed", (3,), (3, 1), (1, 1)),
        ("permuted", (2, 3), (2, 3), (1, 2)),
        ("flattened_permuted", (2, 3), (6,), (1,)),
    )
    for returns in ("before", "after", "both")
}

KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_restrided_view_class(name, mode):
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)


def test_gapped_view_entry_reused():
    """Program 67 compiled on an expanded column of a leaf, its entry reused for a flat view of one."""
    compiled = check(_used_then_every_other, _column_of_leaf)
    check(_used_then_every_other, _flat_view_of_leaf, compiled_fn=compiled)


def test_restrided_view_entry_reused():
    """Program 3270 as found: compiled on a slice of a leaf, its entry reused for a view of a small leaf."""
    compiled = check(_every_other_then_expanded, _slice_of_leaf)
    check(_every_other_then_expanded, _view_of_small_leaf, compiled_fn=compiled)
