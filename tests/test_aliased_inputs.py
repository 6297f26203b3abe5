"""Duplicate and aliased inputs through the whole stack, compiled vs eager."""

from __future__ import annotations

import pytest
import torch

import aot
from tests.oracle import check
from wrappers.synthetic_base import clusters_to_merge


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def storage(n: int = 16, requires_grad: str = "none") -> torch.Tensor:
    """A fresh base: no grad, a leaf requiring grad, or a non-leaf requiring grad."""
    base = torch.randn(n, generator=_gen(0))
    if requires_grad == "leaf":
        base.requires_grad_()
    elif requires_grad == "non_leaf":
        base = base.requires_grad_() * 1
    return base


def weight() -> torch.Tensor:
    return torch.randn(4, generator=_gen(1)).requires_grad_()


def _dup_mul(x, y, w):
    x.mul_(2)
    return (y * w).sum(), x


def _base_and_row(b, row):
    b.add_(1)
    row.mul_(3)
    return b.sum() + row.sum()


def _offset_view_returned(t0, ta):
    t0.add_(100)
    return ta[0]


def _no_grad_add(a, b):
    with torch.no_grad():
        a.add_(1)
    return b * 2


def _data_and_metadata(a, b):
    a.mul_(2)
    b.t_()
    return a + 1, b


PROGRAMS = {
    "duplicate_read_only": (lambda x, y: x * y + x, lambda: (lambda x: (x, x))(storage(4, "leaf"))),
    "duplicate_mutated_with_other_grads": (
        _dup_mul,
        lambda: (lambda x: (x, x, weight()))(storage(4)),
    ),
    "duplicate_non_leaf_mutated": (
        lambda x, y: (x.mul_(2), y.sum())[1],
        lambda: (lambda x: (x, x))(storage(4, "non_leaf")),
    ),
    "overlapping_slices_one_mutated": (
        lambda a, b: (a.mul_(2), b * 1)[1],
        lambda: (lambda s: (s[:8], s[4:12]))(storage()),
    ),
    "disjoint_slices_one_mutated": (
        lambda a, b: (a.mul_(2), b * 1)[1],
        lambda: (lambda s: (s[:8], s[8:]))(storage()),
    ),
    "base_and_row_both_mutated": (_base_and_row, lambda: (lambda s: (s.view(4, 4), s.view(4, 4)[1]))(storage())),
    "input_and_its_transpose": (
        lambda w, wt: (wt.mul_(2), w @ torch.ones(4))[1],
        lambda: (lambda s: (s.view(4, 4), s.view(4, 4).t()))(storage()),
    ),
    "offset_view_returned_after_base_mutated": (_offset_view_returned, lambda: (lambda s: (s, s[1:]))(storage())),
    "data_and_metadata_mutation": (_data_and_metadata, lambda: (lambda s: (s.view(4, 4), s.view(4, 4)))(storage())),
    "data_and_metadata_mutation_of_views": (
        _data_and_metadata,
        lambda: (lambda s: (s[:12].view(3, 4), s[4:].view(3, 4)))(storage()),
    ),
    "aliased_non_leaf_views_requiring_grad": (
        lambda a, b: (a.mul_(2), (a * b).sum())[1],
        lambda: (lambda s: (s[:8], s[4:12]))(storage(16, "non_leaf")),
    ),
    "aliased_views_of_leaf_requiring_grad_raise": (
        lambda a, b: (a.mul_(2), b.sum())[1],
        lambda: (lambda s: (s[:8], s[4:12]))(storage(16, "leaf")),
    ),
    "mutation_under_no_grad_of_alias": (_no_grad_add, lambda: (lambda s: (s[:8], s[4:12]))(storage(16, "non_leaf"))),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_training(name):
    fn, make = PROGRAMS[name]
    check(fn, make)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_inference(name):
    fn, make = PROGRAMS[name]
    with torch.no_grad():
        check(fn, make, backward=False)


def test_disjoint_slices_are_not_merged():
    s = storage()
    a, b = s[:8], s[8:]
    meta = aot.aot_function(lambda a, b: (a.mul_(2), b * 1)[1], aot.nop)
    meta(a, b)
    entry = meta.entries[0]
    assert clusters_to_merge([a, b], entry.meta) == []
    assert len(entry.core_meta.input_info) == 2  # both reach the graph, unmerged
    s2 = storage()
    assert clusters_to_merge([s2[:8], s2[4:12]], entry.meta) == [(0, 1)]


def test_overlapping_slices_are_merged_into_one_base():
    compiled = aot.aot_function(lambda a, b: (a.mul_(2), b * 1)[1], aot.nop)
    s = storage()
    compiled(s[:8], s[4:12])
    (base,) = compiled.entries[0].core_meta.input_info
    assert base.name == "base_of_a_b" and not base.mutates_data


def test_aliasing_pattern_changing_between_calls_retraces():
    def f(a, b):
        a.mul_(2)
        return b * 1

    compiled = aot.aot_function(f, aot.nop)
    for make in (
        lambda: (storage()[:8], storage()[4:12]),  # distinct storages
        lambda: (lambda s: (s[:8], s[4:12]))(storage()),  # overlapping
        lambda: (lambda s: (s[:8], s[8:]))(storage()),  # disjoint, one storage
        lambda: (lambda s: (s[:8], s[:8]))(storage()),  # same view twice, distinct objects
        lambda: (lambda x: (x, x))(storage(8)),  # duplicate object
    ):
        check(f, make, compiled_fn=compiled)
    assert len(compiled.entries) == 5


def test_write_back_touches_only_the_mutated_region():
    def f(big, small):
        small.mul_(2)
        return big.sum()

    compiled = aot.aot_function(f, aot.nop)
    s = torch.arange(1000.0)
    small = s[10:14]
    before = s.clone()
    writes = []

    class CountCopies(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            written = func._schema.arguments[0].alias_info
            if written is not None and written.is_write and args[0].untyped_storage().data_ptr() == storage_ptr:
                writes.append((func.__name__, args[0].numel()))
            return func(*args, **(kwargs or {}))

    compiled(s, small)  # compile outside the counting mode
    s.copy_(before)
    storage_ptr = s.untyped_storage().data_ptr()
    with CountCopies():
        out = compiled(s, small)
    assert writes == [("copy_.default", 4)], writes  # only the 4 mutated elements are written
    eager = before.clone()
    torch.testing.assert_close(out, f(eager, eager[10:14]))
    torch.testing.assert_close(s, eager)
