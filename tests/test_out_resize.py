"""Programs whose ``out=`` writes or ``resize_`` change a tensor's shape, and writes that read what they write.

An ``out=`` op given a tensor of another shape resizes it first, as eager's
``resize_output`` does: ``resize_`` to the result's shape, restrided to the
inputs' layout for elementwise ops, the storage grown in place (every alias
sees the new memory) when too small. Into an input that is a metadata change
of the caller's tensor plus a data write; into an intermediate, a new value.
Also: a leaf requiring grad whose geometry changes under ``no_grad`` (its
gradient takes the new shape), histories that eager's backward rejects after
such a change, and writes whose elements are read at another index (eager's
result depends on its kernel's order: refused; or eager's overlap error).
Eager is the oracle, in training and under ``no_grad``.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from aot.errors import UnsupportedMutationError
from tests.functions import DoublesInPlace
from tests.oracle import check, check_in_mode, mode_params, params_with_known_wrong


@pytest.fixture(autouse=True)
def _quiet_resize_warnings():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="An output with one or more elements was resized")
        yield


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _add_out_second(a0, a1):
    torch.add(a0, 1, out=a1)
    return ()


def _no_grad_add_out_then_sum(a0, a1):
    with torch.no_grad():
        torch.add(a0, 1, out=a1)
    return (a0.sum() + a1.sum(),)


def _no_grad_add_out_then_return(a0, a1):
    with torch.no_grad():
        torch.add(a0, 1, out=a1)
    return a1, a0.sum() + a1.sum()


def _neg_out_first(a, b):
    torch.neg(b, out=a)
    return a * 2


def _neg_out_view(a, b):
    v = a[1:]
    torch.neg(b, out=v)
    return v + 1, a


def _neg_out_intermediate(a, b):
    v = a * 2
    w = v[1:]
    torch.neg(b, out=v)
    return v + 1, w


def _resize_input_past_its_storage(a):
    a.resize_(6)
    a[3:].fill_(1)
    return a * 2


def _add_out_detached_alias(a0):
    v = a0.detach()
    torch.add(a0, 1, out=v)
    return (v,)


def _no_grad_out_into_view_of_leaf(a0, a1):
    v = a0.t()
    with torch.no_grad():
        torch.neg(a1, out=v)
    return (v,)


def _no_grad_transpose_leaf(a0, a1):
    with torch.no_grad():
        a1.t_()
    return (a0.sum() + a1.sum(),)


def _no_grad_out_then_views_taken_before(a0, a1):
    v0 = a0[1:]
    v1 = v0[..., ::2]
    with torch.no_grad():
        torch.neg(a1, out=a0)
    return (a0.sum() + a1.sum() + v0.sum() + v1.sum(),)


def _no_grad_out_into_clone(a0, a1):
    v0 = a1.clone()
    with torch.no_grad():
        torch.neg(a0, out=v0)
    return (a0.sum() + a1.sum() + v0.sum(),)


def _interleaved_out(x):
    torch.neg(x[::2], out=x[1::2])
    return x * 1


def _out_reads_same_index(a0, a1):
    torch.add(a0, 1, out=a1)
    return a0 * 1, a1 * 1


def _out_into_detached_alias_returned(a0, a1):
    v1 = a0.detach()
    torch.neg(a1.unsqueeze(0), out=v1)
    return v1, a0


def _out_into_emptied_input(a0):
    a0.resize_(0)
    torch.neg(a0.unsqueeze(0), out=a0)
    return ()


def _no_grad_out_into_returned_history(a0):
    v = a0.unsqueeze(0).sin()
    with torch.no_grad():
        torch.neg(a0, out=v)
    return (v,)


def _transpose_complex_then_real(a0, a1):
    a1.t_()
    return a0.sum() + a1.real.sum()


def _strided_leaf_args():
    return randn(5).requires_grad_(), randn(2, 8, seed=1)[:, ::2].detach().requires_grad_()


def _views_of_one_storage(grad: bool = True):
    base = randn(24).requires_grad_(grad)
    return base[3:15].view(3, 4)[:, 0], base[6:18].view(4, 3).t()


PROGRAMS = {
    # out= resizing an input within its storage: the caller's tensor restrided, then written
    "add_out_resizes_strided_input": (_add_out_second, lambda: (randn(5), randn(2, 8, seed=1)[:, ::2])),
    "add_out_resizes_view_input": (_add_out_second, lambda: (randn(3, 4)[:, 0], randn(24)[6:18].view(4, 3).t())),
    # the resized geometry follows the input's layout, as TensorIterator allocates it
    "neg_out_of_transposed_input": (_neg_out_first, lambda: (randn(20)[3:7], randn(3, 4).t())),
    "neg_out_of_permuted_input": (_neg_out_first, lambda: (randn(30)[1:], randn(2, 3, 4).permute(2, 0, 1))),
    # growing past the storage's end: the storage grows in place, every alias sees it
    "neg_out_grows_input": (_neg_out_first, lambda: (torch.arange(3.0), torch.arange(8.0).view(2, 4))),
    "neg_out_grows_input_view": (_neg_out_view, lambda: (torch.arange(3.0), torch.arange(8.0).view(2, 4))),
    "neg_out_grows_intermediate": (_neg_out_intermediate, lambda: (torch.arange(3.0), torch.arange(8.0).view(2, 4))),
    "resize_input_past_its_storage": (_resize_input_past_its_storage, lambda: (torch.arange(3.0),)),
    # out= into an alias of the input it reads, at the same index: no view of the input is made
    "add_out_detached_alias": (_add_out_detached_alias, lambda: (randn(10)[5:10],)),
    "out_reads_same_index": (_out_reads_same_index, lambda: _views_of_one_storage(grad=False)),
    # a resized detach() alias is still no view: its _base stays None, as in eager
    "out_into_detached_alias_returned": (
        _out_into_detached_alias_returned,
        lambda: (lambda s: (s[0:24].view(4, 6), s[24:48].view(4, 6)))(randn(48)),
    ),
    # an empty result is allocated contiguously, whatever the input's layout
    "out_into_emptied_input": (_out_into_emptied_input, lambda: (randn(3, 4),)),
    # elements read and written interleave without meeting: not refused
    "interleaved_out": (_interleaved_out, lambda: (randn(10),)),
}

# Programs with a gradient: a geometry changed under no_grad, then used with grad.
GRAD_PROGRAMS = {
    "no_grad_add_out_resizes_leaf": (_no_grad_add_out_then_sum, _strided_leaf_args),
    "no_grad_add_out_resizes_view": (_no_grad_add_out_then_sum, _views_of_one_storage),
    "no_grad_add_out_grows_view": (
        _no_grad_add_out_then_sum,
        lambda: ((randn(3, 1, seed=1)).expand(3, 4), (randn(8).requires_grad_() * 1)[2:6].view(2, 2)),
    ),
    # the resized view is returned: its history is re-taken in its new geometry, as eager's is
    "no_grad_add_out_grows_returned_view": (
        _no_grad_add_out_then_return,
        lambda: ((randn(3, 1, seed=1)).expand(3, 4), (randn(8).requires_grad_() * 1)[2:6].view(2, 2)),
    ),
    "no_grad_transpose_strided_leaf": (_no_grad_transpose_leaf, _strided_leaf_args),
    "no_grad_out_into_transposed_leaf": (
        _no_grad_out_into_view_of_leaf,
        lambda: (randn(4, 1).requires_grad_(), randn(4, 1, seed=1).requires_grad_() * 1),
    ),
    # eager's backward rejects the old history's gradient of the new shape: so must the compiled one
    "no_grad_out_then_views_taken_before": (
        _no_grad_out_then_views_taken_before,
        lambda: (randn(2, 3, 4).requires_grad_() * 1, randn(2, 2, seed=1).requires_grad_()),
    ),
    "no_grad_out_into_returned_history": (
        _no_grad_out_into_returned_history,
        lambda: (randn(19).requires_grad_()[7:19].view(3, 4),),
    ),
    # a view of another dtype taken after the change is not re-taken by strides (FreshViews)
    "transpose_complex_input_then_real": (
        _transpose_complex_then_real,
        lambda: (randn(3, 4).requires_grad_(), randn(3, 4, seed=1).to(torch.complex64)),
    ),
    "no_grad_out_into_clone": (
        _no_grad_out_into_clone,
        lambda: (randn(2, 8)[:, 2], randn(2, 3, 4, seed=1).requires_grad_()),
    ),
}


def _no_grad_mul_out_then_slice(a0, a1):
    with torch.no_grad():
        torch.mul(a1, a1, out=a0)
    return (a0[1:],)


def _no_grad_mul_out_then_diagonal(a0, a1):
    with torch.no_grad():
        torch.mul(a1, a1, out=a0)
    return (a0.diagonal(),)


def _no_grad_neg_out_then_t(a0, a1):
    with torch.no_grad():
        torch.neg(a1, out=a0)
    return (a0.t(),)


def _no_grad_clamp_out_then_unsqueeze(a0, a1):
    with torch.no_grad():
        torch.clamp(a0, min=0, out=a1)
    return (a1.unsqueeze(0),)


def _doubled_then_no_grad_out_grows_it(a0, a1):
    v0 = a0.data
    v1 = DoublesInPlace.apply(a1)
    with torch.no_grad():
        torch.mul(v0, v0, out=a1)
    return (v1, sum(t.real.sum() for t in (a0, a1, v0, v1)))


def _no_grad_sin_out_grows_nonleaf(a0, a1):
    with torch.no_grad():
        torch.sin(a1, out=a0)
    v3 = a1[..., ::2]
    return (sum(t.real.sum() for t in (a0, a1, v3)),)


def _no_grad_neg_out_then_weighted_sum(a0, a1):
    with torch.no_grad():
        torch.neg(a1, out=a0)
    return ((a0 * a1).sum(),)


def _no_grad_transpose_and_write_then_weighted_sum(a0, a1):
    with torch.no_grad():
        a0.t_()
        a0.mul_(2)
    return ((a0 * a1).sum(),)


def _use_then_no_grad_out_then_weighted_sum(a0, a1):
    before = (a0 * a1[0]).sum()
    with torch.no_grad():
        torch.neg(a1, out=a0)
    return (before + (a0 * a1).sum(),)


def _no_grad_out_then_views_returned(a0, a1):
    with torch.no_grad():
        torch.neg(a1, out=a0)
    return (a0[1:] * 1, a0[0])


def _no_grad_out_then_with_its_view_input(a0, v, a1):
    with torch.no_grad():
        torch.neg(a1, out=a0)
    return ((a0 * a1).sum() + v.sum(),)


def _no_grad_out_then_written_in_grad_mode(a0, a1):
    with torch.no_grad():
        torch.neg(a1, out=a0)
    a0.mul_(a1)
    return (a0.sum(),)


def _nonleaf_and_view_of_it():
    a = randn(1, 4).requires_grad_() * 1
    return a, a[0, 1:], randn(3, 4, seed=1)


def _nonleaf_1x4():
    return randn(1, 4).requires_grad_() * 1, randn(3, 4, seed=1)


def _written_then_no_grad_out_grows_it(a0, a1):
    a1.mul_(2)
    with torch.no_grad():
        torch.neg(a0, out=a1)
    return (a1, a1.sum())


def _doubled_then_no_grad_out_grows_it_returned(a0, a1):
    v1 = DoublesInPlace.apply(a1)
    with torch.no_grad():
        torch.neg(a0, out=a1)
    return (v1 * 1,)


def _no_grad_out_grows_it_then_written(a0, a1):
    with torch.no_grad():
        torch.neg(a0, out=a1)
    a1.mul_(2)
    return (a1,)


def _viewed_then_no_grad_out_grows_it(a0, a1):
    v = a0[:1]
    with torch.no_grad():
        torch.neg(a1, out=a0)
    return (v, a0[1:])


def _used_then_no_grad_out_grows_it(a0, a1):
    before = (a0 * 2).sum()
    with torch.no_grad():
        torch.neg(a1, out=a0)
    return (before + (a0 * a1).sum(),)


def _no_grad_out_grows_twice_viewed_between(a0, a1):
    with torch.no_grad():
        torch.neg(a1[:2], out=a0)
    between = a0[1:]
    with torch.no_grad():
        torch.neg(a1, out=a0)
    return (between, a0[1:])


def _view_of_nonleaf(start, *shape):
    """out= of 3x4 grows the view, at ``start`` of an 11-element non-leaf, past the non-leaf's elements."""

    def make():
        base = randn(11, seed=1).requires_grad_() * 1
        return randn(3, 4), base[start : start + math.prod(shape)].view(*shape)

    return make


def _mul_out_grows_own_view_then_requires_grad(a0):
    v1 = a0[..., ::2]
    torch.mul(a0, a0, out=v1)
    v1.requires_grad_()
    return (v1,)


def _no_grad_out_then_shared_views(a0, a1):
    with torch.no_grad():
        torch.mul(a1, a1, out=a0)
    w = a0[1:]
    return (w, w[:, 1], a0.sum())


def _no_grad_out_then_flat_view_and_use(a0, a1):
    with torch.no_grad():
        torch.neg(a1, out=a0)
    return (a0.view(-1)[2:7], a0 * 2)


def _no_grad_out_then_offset_views(a0, a1):
    with torch.no_grad():
        torch.neg(a1, out=a0)
    return (a0[1:, 2:], a0.t()[1])


def _leaf_on_larger_storage():
    """A 2x2 leaf on a 12-element storage: out= of 3x4 restrides it within the storage, growing nothing."""
    leaf = torch.empty(0).set_(randn(12).untyped_storage(), 0, (2, 2), (2, 1))
    return leaf.requires_grad_(), randn(3, 4, seed=1)


def _leaf_of(*shape):
    return lambda: (randn(*shape).requires_grad_(), randn(3, 4, seed=1))


# Seed 24 program 258 (fuzz_mutation, autograd_function features), shrunk, and its variants: out= under no_grad
# growing a leaf requiring grad, then a view of it returned.
GRAD_PROGRAMS.update(
    {
        "no_grad_out_grows_leaf_then_slice": (_no_grad_mul_out_then_slice, _leaf_of(2, 2)),
        "no_grad_out_grows_empty_leaf_then_slice": (_no_grad_mul_out_then_slice, _leaf_of(0)),
        "no_grad_out_grows_leaf_then_t": (_no_grad_neg_out_then_t, _leaf_of(2, 2)),
        "no_grad_out_grows_leaf_then_diagonal": (
            _no_grad_mul_out_then_diagonal,
            lambda: (randn(2, 2).requires_grad_(), randn(3, 4, seed=1).requires_grad_() * 1),
        ),
        # seed 25 program 217, shrunk
        "no_grad_clamp_out_grows_leaf_then_unsqueeze": (
            _no_grad_clamp_out_then_unsqueeze,
            lambda: (randn(3, 4), randn(4, 1, seed=1).requires_grad_()),
        ),
        # seed 26 programs 136 and 152, shrunk
        "doubled_then_no_grad_out_grows_it": (
            _doubled_then_no_grad_out_grows_it,
            lambda: (randn(3, 4), (randn(11, seed=1).requires_grad_() * 1)[6:10].view(2, 2)),
        ),
        "no_grad_sin_out_grows_nonleaf": (
            _no_grad_sin_out_grows_nonleaf,
            lambda: (randn(3, 4).requires_grad_() * 1, randn(2, 3, 4, seed=1).requires_grad_() * 1),
        ),
        # views of the leaf in its new geometry spanning elements its old one does not: shared view objects, a
        # flattened view beside another use, views at an offset, a leaf restrided within a larger storage
        "no_grad_out_grows_leaf_then_shared_views": (_no_grad_out_then_shared_views, _leaf_of(2, 2)),
        "no_grad_out_grows_leaf_then_flat_view_and_use": (_no_grad_out_then_flat_view_and_use, _leaf_of(5)),
        "no_grad_out_grows_leaf_then_offset_views": (_no_grad_out_then_offset_views, _leaf_of(2)),
        "no_grad_out_restrides_leaf_on_larger_storage": (_no_grad_mul_out_then_slice, _leaf_on_larger_storage),
        # a non-leaf (no view) keeps its history through the change: the gradient of its new geometry reaches it
        # index by index, summed to its old shape by the engine (not by the memory positions it then has)
        "no_grad_out_grows_nonleaf_weighted": (_no_grad_neg_out_then_weighted_sum, _nonleaf_1x4),
        "no_grad_out_grows_nonleaf_used_before": (_use_then_no_grad_out_then_weighted_sum, _nonleaf_1x4),
        "no_grad_out_grows_nonleaf_views_returned": (_no_grad_out_then_views_returned, _nonleaf_1x4),
        "no_grad_out_grows_nonleaf_beside_its_view": (_no_grad_out_then_with_its_view_input, _nonleaf_and_view_of_it),
        # a write autograd records after the change extends the history (a control: right before too)
        "no_grad_out_grows_nonleaf_then_written": (_no_grad_out_then_written_in_grad_mode, _nonleaf_1x4),
        "no_grad_out_grows_nonleaf_by_a_dim_weighted": (
            _no_grad_neg_out_then_weighted_sum,
            lambda: (randn(3, 4).requires_grad_() * 1, randn(2, 3, 4, seed=1)),
        ),
        "no_grad_transpose_and_write_nonleaf_weighted": (
            _no_grad_transpose_and_write_then_weighted_sum,
            lambda: (randn(3, 3).requires_grad_() * 1, randn(3, 3, seed=1)),
        ),
        # a write autograd records into a view of a non-leaf, then out= under no_grad growing the view past its
        # base's elements: the grown part is no part of the base's history (a recorded write-back there would be
        # refused by the backward); written after the growth, eager's backward refuses it, and so must ours
        "written_then_no_grad_out_grows_it": (_written_then_no_grad_out_grows_it, _view_of_nonleaf(6, 2, 2)),
        "written_then_no_grad_out_grows_flat_view": (_written_then_no_grad_out_grows_it, _view_of_nonleaf(3, 4)),
        "doubled_then_no_grad_out_grows_it_returned": (
            _doubled_then_no_grad_out_grows_it_returned,
            _view_of_nonleaf(6, 2, 2),
        ),
        "no_grad_out_grows_it_then_written": (_no_grad_out_grows_it_then_written, _view_of_nonleaf(6, 2, 2)),
        # a leaf viewed in grad mode before out= grows it: eager made its gradient accumulator then, for the shape it
        # had, which gradients of the grown leaf are summed to (1x4), or refused by (2x2)
        "viewed_then_no_grad_out_grows_leaf": (_viewed_then_no_grad_out_grows_it, _leaf_of(1, 4)),
        "viewed_then_no_grad_out_grows_leaf_2x2": (_viewed_then_no_grad_out_grows_it, _leaf_of(2, 2)),
        "used_then_no_grad_out_grows_leaf": (_used_then_no_grad_out_grows_it, _leaf_of(1, 4)),
        "no_grad_out_grows_leaf_twice_viewed_between": (_no_grad_out_grows_twice_viewed_between, _leaf_of(1, 4)),
        # controls: the same write with no growth (same shape, same number of elements) is right
        "no_grad_out_same_shape_leaf_then_slice": (_no_grad_mul_out_then_slice, _leaf_of(3, 4)),
        "no_grad_out_restrides_leaf_then_slice": (_no_grad_mul_out_then_slice, _leaf_of(12)),
    }
)


def _no_grad_clamp_out_then_step_slice(a0, a1):
    with torch.no_grad():
        torch.clamp(a0, min=0, out=a1)
    return (a1[..., ::2],)


def _no_grad_clamp_out_then_select(a0, a1):
    with torch.no_grad():
        torch.clamp(a0, min=0, out=a1)
    return (a1[1],)


def _no_grad_clamp_out_then_narrow_and_sum(a0, a1):
    with torch.no_grad():
        torch.clamp(a0, min=0, out=a1)
    v1 = a1.narrow(-1, 1, 2)
    return (sum(t.real.sum() for t in (a1, v1)),)


def _no_grad_clamp_out_then_view_of_view(a0, a1):
    with torch.no_grad():
        torch.clamp(a0, min=0, out=a1)
    return (a1.view(12)[3:11:3],)


def _clamp_out_args(*shape: int):
    # (the written leaf takes the input's 3x4 shape, on a storage grown or not)
    return lambda: (randn(15)[2:14].view(3, 4), randn(*shape, seed=1).requires_grad_())


def _clamp_out_expanded_leaf():
    return randn(15)[2:14].view(3, 4), randn((), seed=1).expand(2, 3).detach().requires_grad_()


# Seed 22 program 3886, shrunk, and its variants: a leaf requiring grad written out= under no_grad with another
# geometry, then viewed. The function gets an old-geometry view of the caller's leaf (restrided first), whose
# change under no_grad leaves its record stale: views taken after are taken again from the leaf by strides.
GRAD_PROGRAMS.update(
    {
        "no_grad_clamp_out_grows_leaf_then_step_slice": (_no_grad_clamp_out_then_step_slice, _clamp_out_args(4, 1)),
        "no_grad_clamp_out_grows_leaf_then_select": (_no_grad_clamp_out_then_select, _clamp_out_args(4, 1)),
        "no_grad_clamp_out_grows_leaf_then_narrow": (_no_grad_clamp_out_then_narrow_and_sum, _clamp_out_args(2)),
        "no_grad_clamp_out_grows_leaf_then_view_of_view": (
            _no_grad_clamp_out_then_view_of_view,
            _clamp_out_args(3, 1),
        ),
        "no_grad_clamp_out_shrinks_leaf_then_step_slice": (
            _no_grad_clamp_out_then_step_slice,
            _clamp_out_args(4, 5),
        ),
        "no_grad_clamp_out_restrides_leaf_then_select": (_no_grad_clamp_out_then_select, _clamp_out_args(12)),
        "no_grad_clamp_out_grows_expanded_leaf_then_step_slice": (
            _no_grad_clamp_out_then_step_slice,
            _clamp_out_expanded_leaf,
        ),
    }
)

KNOWN_WRONG: dict[tuple[str, str], str] = {
    ("no_grad_out_grows_leaf_twice_viewed_between", "training"): (
        "a leaf grown twice by out= under no_grad, viewed in grad mode between: eager's gradient accumulator keeps "
        "the 2x4 shape it had then, and its backward refuses the 3x4 gradient; the compiled leaf's accumulator is "
        "made in another geometry (the one it was called with, InputAliasInfo.accumulator_as_called only covers "
        "an accumulator made before any change), so its backward runs"
    ),
}


def _own_view_requires_grad_then_mul_out_grows_it(a0):
    v1 = a0[..., ::2]
    v1.requires_grad_()
    with torch.no_grad():
        torch.mul(a0, a0, out=v1)
    return (v1,)


def _transposed_own_view_then_requires_grad(a0):
    v1 = a0[..., ::2]
    v1.t_()
    v1.requires_grad_()
    return (v1,)


def _unsqueezed_own_view_then_requires_grad(a0):
    v1 = a0[1]
    v1.unsqueeze_(0)
    v1.requires_grad_()
    return (v1, v1 * 2)


def _resized_own_view_then_requires_grad(a0):
    v1 = a0[0]
    v1.resize_(2, 2)
    v1.requires_grad_()
    return (v1,)


def _slice_of(grad: bool):
    return lambda: ((randn(24).requires_grad_(grad) * 1)[12:24].view(3, 4),)


# A view of an input (needing no grad) whose geometry changes in place, made to require grad by requires_grad_()
# after the change (or before it): eager's output requires grad, so must the view taken again from the input.
PROGRAMS.update(
    {
        "mul_out_grows_own_view_then_requires_grad": (_mul_out_grows_own_view_then_requires_grad, _slice_of(False)),
        "own_view_requires_grad_then_mul_out_grows_it": (
            _own_view_requires_grad_then_mul_out_grows_it,
            _slice_of(False),
        ),
    }
)
# Seed 26 program 185, shrunk, and its variants: under inference_mode (the input made there is no view).
INFERENCE_PROGRAMS = {
    "mul_out_grows_own_view_then_requires_grad": (_mul_out_grows_own_view_then_requires_grad, _slice_of(True)),
    "mul_out_grows_own_view_then_requires_grad_no_grad_base": (
        _mul_out_grows_own_view_then_requires_grad,
        _slice_of(False),
    ),
    "own_view_requires_grad_then_mul_out_grows_it": (_own_view_requires_grad_then_mul_out_grows_it, _slice_of(True)),
    "transposed_own_view_then_requires_grad": (_transposed_own_view_then_requires_grad, _slice_of(True)),
    "unsqueezed_own_view_then_requires_grad": (_unsqueezed_own_view_then_requires_grad, _slice_of(True)),
    "resized_own_view_then_requires_grad": (_resized_own_view_then_requires_grad, _slice_of(True)),
}


@pytest.mark.parametrize("name", sorted(INFERENCE_PROGRAMS))
def test_inference_mode(name):
    fn, make = INFERENCE_PROGRAMS[name]
    with torch.inference_mode():
        check(fn, make, backward=False, deep=True)


@pytest.mark.parametrize("name", params_with_known_wrong([*PROGRAMS, *GRAD_PROGRAMS], KNOWN_WRONG, "training"))
def test_training(name):
    fn, make = {**PROGRAMS, **GRAD_PROGRAMS}[name]
    check(fn, make, deep=True)


@pytest.mark.parametrize("name", [*PROGRAMS, *GRAD_PROGRAMS])
def test_inference(name):
    fn, make = {**PROGRAMS, **GRAD_PROGRAMS}[name]
    with torch.no_grad():
        check(fn, make, backward=False, deep=True)


def _neg_out_over_expanded_input(a0, a1):
    torch.neg(a0, out=a1)
    return ()


def _add_transposed_out(a0):
    v0 = a0.t()
    torch.add(v0, 1, out=a0)
    return (a0.sum() + v0.sum(),)


ORDER_DEPENDENT = {
    # the resized output covers the expanded input's memory: later indices read what earlier ones wrote
    "neg_out_over_expanded_input": (
        _neg_out_over_expanded_input,
        lambda: (lambda s: (s[1:4].expand(2, 3), s[1:7:2]))(torch.randint(-4, 5, (24,))),
    ),
    # out= its own transpose, not dense (eager does not check): element (i, j) reads what (j, i) wrote
    "add_transposed_out": (_add_transposed_out, lambda: (randn(3, 8)[:, 1::3].requires_grad_(False),)),
}


@pytest.mark.parametrize("grad", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize("name", ORDER_DEPENDENT)
def test_order_dependent_write_is_refused_before_touching_inputs(name, grad):
    import aot

    fn, make = ORDER_DEPENDENT[name]
    args = make()
    before = [(a.clone(), tuple(a.shape), a.stride(), a._version) for a in args]
    with torch.set_grad_enabled(grad), pytest.raises(UnsupportedMutationError, match="order its kernel visits"):
        aot.aot_function(fn, aot.nop)(*args)
    for arg, (values, shape, stride, version) in zip(args, before, strict=True):
        assert (tuple(arg.shape), arg.stride(), arg._version) == (shape, stride, version)
        torch.testing.assert_close(arg, values)


def test_partial_overlap_raises_as_eager():
    """TensorIterator's overlap check, on the out= argument before it is resized."""

    def f(a0, a1):
        torch.neg(a0, out=a1)
        return ()

    def make():
        base = randn(19)
        return base[0:12].view(3, 4), base[7:19].view(3, 4)

    check(f, make)


# An ``out=`` into a detached ``.imag``/``.real`` of a complex input grows its storage by float elements (program
# 620 of seed 25): grown to a size no view of complex elements spans (52 bytes), refused; where the storage
# already holds the reach, the write lands in the complex input's elements, as in eager.
def _neg_out_detached_part(part: str):
    def fn(a0, a1):
        torch.neg(a0, out=getattr(a1, part).detach())
        return ()

    return fn


def _float_and_complex(rows: int, complex_rows: int):
    def make_args():
        g = torch.Generator().manual_seed(0)
        return torch.randn(rows, 4, generator=g), torch.randn(complex_rows, 1, generator=g, dtype=torch.complex64)

    return make_args


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize("part", ["imag", "real"])
def test_out_into_detached_part_of_complex_growing_storage_by_part_of_an_element_is_refused(part, mode):
    from tests.oracle import check_in_mode

    fn, make_args = _neg_out_detached_part(part), _float_and_complex(3, 4)
    if part == "real":  # 12 floats from offset 0: 48 bytes, six whole complex elements, matched as eager
        check_in_mode(fn, make_args, mode)
        return
    with pytest.raises(UnsupportedMutationError, match=r"not a whole number of its torch\.complex64 elements"):
        check_in_mode(fn, make_args, mode)


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize("part", ["imag", "real"])
def test_out_into_detached_part_of_complex_with_room_matches_eager(part, mode):
    from tests.oracle import check_in_mode

    check_in_mode(_neg_out_detached_part(part), _float_and_complex(3, 8), mode)


# Seed 28 program 1987, shrunk, and its variants: a view of another dtype than its base (``.real``/``.imag`` of
# complex memory requiring grad, ``view_as_real``) changed under no_grad (an ``out=`` resize, ``t_``), then used or
# returned. Autograd takes such a view's history again by replaying its view ops, which know of no change: a
# history of the old geometry, whose backward refuses a gradient of the new shape (or sums one it expands to,
# reaching the elements the old geometry spans).
def _complex_view(numel: int = 24, *shape: int):
    def make_args():
        g = torch.Generator().manual_seed(0)
        part = (torch.randn(numel, generator=g, dtype=torch.complex64).requires_grad_() * 1)[3:15:2]
        return part.view(*shape) if shape else part, torch.randn(6, generator=g).view(3, 2)

    return make_args


def _complex_leaf():
    g = torch.Generator().manual_seed(0)
    return torch.randn(6, generator=g, dtype=torch.complex64).requires_grad_(), torch.randn(6, generator=g).view(3, 2)


def _fuzz_s28_1987(a0, a1):
    v1 = a0.real
    a1.t_()
    with torch.no_grad():
        torch.sin(a1, out=v1)
    return (v1, sum(t.real.sum() for t in (a0, a1, v1)))


def _fuzz_s28_1987_args():
    g = torch.Generator().manual_seed(0)
    part = (torch.randn(24, generator=g, dtype=torch.complex64).requires_grad_() * 1)[3:15:2]
    return part, torch.randn(24, generator=g)[1:7].view(2, 3)


def _no_grad_out_into_part(part: str, use: str):
    def fn(a0, a1):
        v = getattr(a0, part) if part in ("real", "imag") else torch.view_as_real(a0)
        with torch.no_grad():
            torch.sin(a1 if part != "pairs" else a1.reshape(-1), out=v)
        if use == "returned":
            return (v,)
        if use == "summed":
            return ((v * 2).sum(),)
        if use == "viewed":
            w = v[1]
            return (w, (w * 2).sum())
        if use == "written":
            v.mul_(2)
            return (v.sum(),)
        return (v, v.sum())

    return fn


def _no_grad_t_of_real(a0, a1):
    v = a0.real
    with torch.no_grad():
        v.t_()
    return (v,)


def _no_grad_out_grows_real_by_a_dim(a0, a1):
    v = a0.real
    with torch.no_grad():
        torch.sin(a1.reshape(1, 6), out=v)
    return (v, v.sum())


def _no_grad_out_into_real_base_used(a0, a1):
    v = a0.real
    with torch.no_grad():
        torch.sin(a1, out=v)
    return (a0.real.sum() + a0.imag.sum(),)


def _no_grad_out_into_real_viewed_before(a0, a1):
    v = a0.real
    w = v[1:4]
    with torch.no_grad():
        torch.sin(a1, out=v)
    return (w, v, v.t())


def _no_grad_t_of_view_of_real(a0, a1):
    v = a0.real.view(2, 3)
    with torch.no_grad():
        v.t_()
    return (a0.real, v)


STALE_DTYPE_VIEW_PROGRAMS = {
    "no_grad_sin_out_resizes_real_viewed_before": (_no_grad_out_into_real_viewed_before, _complex_view()),
    "no_grad_t_of_view_of_real_returned": (_no_grad_t_of_view_of_real, _complex_view()),
    "fuzz_s28_1987": (_fuzz_s28_1987, _fuzz_s28_1987_args),
    "no_grad_sin_out_resizes_real_returned_and_summed": (_no_grad_out_into_part("real", "both"), _complex_view()),
    "no_grad_sin_out_resizes_2d_real": (_no_grad_out_into_part("real", "both"), _complex_view(24, 2, 3)),
    "no_grad_sin_out_resizes_real_returned": (_no_grad_out_into_part("real", "returned"), _complex_view()),
    "no_grad_sin_out_resizes_real_of_leaf_returned": (_no_grad_out_into_part("real", "returned"), _complex_leaf),
    "no_grad_sin_out_resizes_real_of_leaf": (_no_grad_out_into_part("real", "both"), _complex_leaf),
    "no_grad_sin_out_resizes_real_summed": (_no_grad_out_into_part("real", "summed"), _complex_view()),
    "no_grad_sin_out_resizes_real_then_select": (_no_grad_out_into_part("real", "viewed"), _complex_view()),
    "no_grad_sin_out_resizes_real_then_mul_": (_no_grad_out_into_part("real", "written"), _complex_view()),
    "no_grad_sin_out_resizes_imag": (_no_grad_out_into_part("imag", "both"), _complex_view()),
    "no_grad_sin_out_resizes_view_as_real": (_no_grad_out_into_part("pairs", "both"), _complex_view()),
    "no_grad_sin_out_grows_real_by_a_dim": (_no_grad_out_grows_real_by_a_dim, _complex_view()),
    "no_grad_sin_out_resizes_real_base_used": (_no_grad_out_into_real_base_used, _complex_view()),
    "no_grad_t_of_real_returned": (_no_grad_t_of_real, _complex_view(24, 2, 3)),
}


@pytest.mark.parametrize(("name", "mode"), mode_params(STALE_DTYPE_VIEW_PROGRAMS, {}))
def test_stale_history_of_dtype_view_changed_under_no_grad(name, mode):
    fn, make_args = STALE_DTYPE_VIEW_PROGRAMS[name]
    check_in_mode(fn, make_args, mode)
