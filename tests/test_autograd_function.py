"""Custom ``torch.autograd.Function``s inside compiled functions, and eager's overlap errors.

Two classes of programs, compiled vs eager (``tests.oracle.check``):

- autograd.Functions whose forward returns its input after the caller wrote it,
  or whose backward writes a saved input or ``grad_output``;
- writes eager refuses by memory geometry alone (``MemoryOverlap.cpp``), which fake
  kernels do not check: a read partly overlapping what a pointwise op or ``copy_``
  writes (through ``.data`` too), a write into an expanded tensor, a ``copy_`` of a
  tensor onto its very memory (eager's early exit, no check), and a write into an
  expanded view whose backward writes an expanded gradient (eager raises in the backward);
  and the reads of written memory eager lets through (a tensor not dense) whose result is
  its kernel's visiting order: refused.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import aot
from aot.errors import UnsupportedMutationError
from tests.functions import DoublesInPlace, Identity, ScalesBySavedThenDoublesIt, TriplesGradOutput
from tests.oracle import check, functional_nop


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _partly_overlapping(grad: bool):
    """Two (2, 3, 4) views of one storage sharing 11 elements."""

    def make():
        base = torch.randn(37, generator=_gen()).requires_grad_(grad)
        return base[0:24].view(2, 3, 4), base[13:37].view(2, 3, 4)

    return make


def _copy_through_data(a, b):
    b.data.copy_(a)
    return ()


def _add_through_detach(a, b):
    a.detach().add_(b)
    return (a * 1,)


def _copy_partly_overlapping(a, b):
    a.copy_(b)
    return (a * 1,)


def _exp_out_partly_overlapping(a, b):
    torch.exp(b, out=a)
    return (a * 1,)


def _where_out_partly_overlapping(a, b):
    torch.where(b > 0, b, b * 2, out=a)
    return (a * 1,)


def _index_copy_of_itself(a, b):
    a.view(-1).index_copy_(0, torch.arange(24), a.detach().view(-1))
    return (a * 1,)


def _copy_onto_its_memory(a):
    a.detach().data.copy_(a)
    return ()


def _expanded_input():
    return (torch.randn((), generator=_gen()).expand(2).detach().requires_grad_(),)


def _index_put_into_expanded(a):
    a.index_put_((torch.tensor([0]),), torch.tensor(2.0))
    return (a.sum(),)


def _expanded_non_leaf():
    return ((torch.randn(1, 4, generator=_gen()).requires_grad_() * 1).expand(2, 4),)


def _fill_expanded_view_of_intermediate(x):
    y = x * 1
    y.expand(2, 4).fill_(2.0)
    return (y.sum(),)


def _fill_expanded_view_unused_by_output(x):
    y = x * 1
    y.expand(2, 4).fill_(2.0)
    return (x * 3,)


def _leaf_1x4():
    return (torch.randn(1, 4, generator=_gen()).requires_grad_(),)


OVERLAP_PROGRAMS = {
    "copy_through_data": (_copy_through_data, _partly_overlapping(True)),
    "copy_through_data_no_grad_inputs": (_copy_through_data, _partly_overlapping(False)),
    "add_through_detach": (_add_through_detach, _partly_overlapping(False)),
    "copy_partly_overlapping": (_copy_partly_overlapping, _partly_overlapping(False)),
    "exp_out_partly_overlapping": (_exp_out_partly_overlapping, _partly_overlapping(False)),
    "where_out_partly_overlapping": (_where_out_partly_overlapping, _partly_overlapping(False)),
    "index_copy_of_itself": (_index_copy_of_itself, _partly_overlapping(False)),
    "copy_onto_its_expanded_memory": (_copy_onto_its_memory, _expanded_input),
    "index_put_into_expanded_input": (_index_put_into_expanded, _expanded_non_leaf),
    "fill_expanded_view_of_intermediate": (_fill_expanded_view_of_intermediate, _leaf_1x4),
    "fill_expanded_view_unused_by_output": (_fill_expanded_view_unused_by_output, _leaf_1x4),
}


@pytest.fixture(autouse=True)
def _quiet_expanded_writes():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Use of index_put_ on expanded tensors is deprecated")
        yield


@pytest.mark.parametrize("name", OVERLAP_PROGRAMS)
def test_overlap_training(name):
    fn, make = OVERLAP_PROGRAMS[name]
    check(fn, make)


@pytest.mark.parametrize("name", OVERLAP_PROGRAMS)
def test_overlap_no_grad(name):
    fn, make = OVERLAP_PROGRAMS[name]
    with torch.no_grad():
        check(fn, make, backward=False)


class TailView(torch.autograd.Function):
    """Returns a view of its input, with a backward of its own."""

    @staticmethod
    def forward(ctx, x):
        return x[1:]

    @staticmethod
    def backward(ctx, grad):
        return torch.cat([grad[:1] * 0, grad * 3])


def _non_leaf(*shape: int):
    return lambda: ((torch.randn(*shape, generator=_gen()).requires_grad_() * 1),)


def _leaf(*shape: int):
    return lambda: (torch.randn(*shape, generator=_gen()).requires_grad_(),)


def _plain(*shape: int):
    return lambda: (torch.randn(*shape, generator=_gen()),)


def _identity_after_write(a):
    a.add_(1)
    return (Identity.apply(a),)


def _identity_then_write_through_data(a):
    out = Identity.apply(a)
    a.data.sigmoid_()
    return (out,)


def _identity_then_write(a):
    out = Identity.apply(a)
    a.mul_(2)
    return (out * 1,)


def _identity_of_slice_after_write(a):
    a.add_(1)
    return (Identity.apply(a[1:]),)


def _tail_view_after_write(a):
    a.mul_(3)
    return (TailView.apply(a),)


def _identity_of_same_input_twice(a, b):
    a.add_(1)
    return (Identity.apply(b),)


def _slice_of_identity(a):
    return (Identity.apply(a)[0:2],)


def _slice_of_identity_after_write(a):
    a.add_(1)
    return (Identity.apply(a)[0:2],)


def _slice_of_identity_of_intermediate(a):
    return (Identity.apply(a * 2)[0:2],)


def _data_of_function_view_then_write(a):
    v = TailView.apply(a)
    d = v.data
    a.data.fill_(2.0)
    return (d,)


def _data_of_function_view_of_expanded(a):
    v = TailView.apply(a)
    d = v.data
    return (d, a.sum() + v.sum() + d.sum())


def _data_written_with_grad(a):
    v = a.data
    v.mul_(a)
    return (v,)


def _detach_written_with_grad(a):
    v = a.detach()
    v.mul_(a)
    return (v,)


def _dirty_then_return_input(a):
    DoublesInPlace.apply(a)
    return (a,)


def _dirty_then_return_output(a):
    return (DoublesInPlace.apply(a),)


def _view_of_non_leaf():
    return ((torch.randn(24, generator=_gen()).requires_grad_() * 1)[4:9],)


def _same_tensor_twice():
    x = torch.randn(4, generator=_gen()).requires_grad_() * 1
    return (x, x)


FUNCTION_PROGRAMS = {
    "identity_after_write": (_identity_after_write, _non_leaf(2, 3)),
    "identity_after_write_no_grad_input": (_identity_after_write, _plain(2, 3)),
    "identity_then_write_through_data": (_identity_then_write_through_data, _non_leaf(2, 3)),
    "identity_then_write": (_identity_then_write, _non_leaf(2, 3)),
    "identity_of_slice_after_write": (_identity_of_slice_after_write, _non_leaf(4)),
    "tail_view_after_write": (_tail_view_after_write, _non_leaf(4)),
    "identity_of_same_input_twice": (_identity_of_same_input_twice, _same_tensor_twice),
    "slice_of_identity": (_slice_of_identity, _non_leaf(4)),
    # .data of a Function's output: no history of the Function's, an alias of the input all the same.
    "data_of_function_view_then_write": (_data_of_function_view_then_write, _leaf(4, 1)),
    "data_of_function_view_of_expanded": (
        _data_of_function_view_of_expanded,
        lambda: (torch.randn((), generator=_gen()).expand(3).detach().requires_grad_(),),
    ),
    # A Function marking a view of a non-leaf dirty: the view's base takes the Function's backward.
    "dirty_view_then_return_input": (_dirty_then_return_input, _view_of_non_leaf),
    "dirty_view_then_return_output": (_dirty_then_return_output, _view_of_non_leaf),
    # Not a Function, the same class: an alias of the input whose history no view replay gives.
    "data_written_by_op_with_grad": (_data_written_with_grad, _leaf(2, 3)),
    "detach_written_by_op_with_grad": (_detach_written_with_grad, _non_leaf(2, 3)),
    "slice_of_identity_after_write": (_slice_of_identity_after_write, _non_leaf(4)),
    "slice_of_identity_of_intermediate": (_slice_of_identity_of_intermediate, _non_leaf(4)),
}


@pytest.mark.parametrize("name", FUNCTION_PROGRAMS)
def test_function_training(name):
    fn, make = FUNCTION_PROGRAMS[name]
    check(fn, make)


@pytest.mark.parametrize("name", FUNCTION_PROGRAMS)
def test_function_no_grad(name):
    fn, make = FUNCTION_PROGRAMS[name]
    with torch.no_grad():
        check(fn, make, backward=False)


class DoublesHeadOfSaved(torch.autograd.Function):
    """Writes only the first element of the saved ``scale`` in its backward."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        scale[0:1].mul_(2)
        return grad * scale, None


def _scale_by_saved(x, scale):
    return (ScalesBySavedThenDoublesIt.apply(x, scale),)


def _scale_by_saved_twice(x, scale):
    return (ScalesBySavedThenDoublesIt.apply(x, scale) + ScalesBySavedThenDoublesIt.apply(x * 2, scale),)


def _head_of_saved(x, scale):
    return (DoublesHeadOfSaved.apply(x, scale),)


def _triple_grad_output(x):
    return (TriplesGradOutput.apply(x),)


def _triple_grad_output_of_sum(x):
    return (TriplesGradOutput.apply(x) * 2,)


def _leaf_and_scale():
    return torch.randn(3, generator=_gen()).requires_grad_(), torch.full((3,), 2.0)


def _leaf_and_scale_view():
    return torch.randn(3, generator=_gen()).requires_grad_(), torch.arange(6.0)[2:5]


BACKWARD_WRITE_PROGRAMS = {
    "backward_doubles_saved_input": (_scale_by_saved, _leaf_and_scale),
    "backward_doubles_saved_input_twice": (_scale_by_saved_twice, _leaf_and_scale),
    "backward_doubles_saved_view_input": (_scale_by_saved, _leaf_and_scale_view),
    "backward_writes_part_of_saved_input": (_head_of_saved, _leaf_and_scale),
    "backward_writes_grad_output": (_triple_grad_output, lambda: (torch.randn(3, generator=_gen()).requires_grad_(),)),
    "backward_writes_inner_grad_output": (
        _triple_grad_output_of_sum,
        lambda: (torch.randn(3, generator=_gen()).requires_grad_(),),
    ),
}


def _run_backward(fn, make):
    """Call ``fn``, back-propagate explicit gradients: the inputs, those gradients and the leaves' grads."""
    args = make()
    outs = [out for out in fn(*args) if out.requires_grad]
    grads = [torch.randn(out.shape, generator=_gen()) for out in outs]
    versions = [t._version for t in (*args, *grads)]
    try:
        torch.autograd.backward(outs, grads)
    except RuntimeError as error:  # a saved tensor written by an earlier backward, say
        return [], [], type(error)
    after = [t._version - v for t, v in zip((*args, *grads), versions, strict=True)]
    return [*args, *grads], [a.grad for a in args if a.is_leaf and a.requires_grad], after


@pytest.mark.parametrize("name", BACKWARD_WRITE_PROGRAMS)
def test_backward_write_training(name):
    fn, make = BACKWARD_WRITE_PROGRAMS[name]
    compiled = check(fn, make)
    # The backward's writes land where eager's did: in the caller's tensors, once.
    eager_tensors, eager_grads, eager_bumps = _run_backward(fn, make)
    tensors, grads, bumps = _run_backward(compiled, make)
    for c, e in zip([*tensors, *grads], [*eager_tensors, *eager_grads], strict=True):
        torch.testing.assert_close(c.detach(), e.detach())
    assert bumps == eager_bumps


@pytest.mark.parametrize("name", BACKWARD_WRITE_PROGRAMS)
def test_backward_write_no_grad(name):
    fn, make = BACKWARD_WRITE_PROGRAMS[name]
    with torch.no_grad():
        check(fn, make, backward=False)


def _write_then_scale_by_saved(x, scale):
    scale.add_(1)
    return (ScalesBySavedThenDoublesIt.apply(x, scale),)


class DoublesSavedOutput(torch.autograd.Function):
    """Saves its output and doubles it in its backward: the caller's output changes."""

    @staticmethod
    def forward(ctx, x):
        out = x * 3
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        out.mul_(2)
        return grad * 3


def test_backward_writes_input_written_by_forward():
    # Eager's backward writes the caller's input (the forward wrote its new value there): so does the compiled
    # backward, into the same tensor.
    check(_write_then_scale_by_saved, _leaf_and_scale)


@pytest.mark.parametrize(
    "fn, make",
    [
        (lambda x: (DoublesSavedOutput.apply(x),), lambda: (torch.randn(3, generator=_gen()).requires_grad_(),)),
    ],
    ids=["backward_writes_saved_output"],
)
def test_backward_write_refused(fn, make):
    # The write would land on a tensor the caller already holds: refused, before any input is touched.
    args = make()
    before = [a.detach().clone() for a in args]
    with pytest.raises(UnsupportedMutationError, match="backward writes"):
        aot.aot_function(fn, functional_nop)(*args)
    for a, b in zip(args, before, strict=True):
        torch.testing.assert_close(a.detach(), b)


def _expanded_head_and_tail():
    base = torch.randn(24, generator=_gen())
    return base[0:3].expand(2, 3), base[1:7].view(2, 3)


def _strided_pair(start: int):
    def make():
        base = torch.randn(24, generator=_gen())
        return base[0:12:2], base[start : start + 12 : 2]

    return make


def _mul_through_data(a, b):
    b.data.mul_(a)
    return (a,)


def _copy_into_second(a, b):
    b.copy_(a)
    return (b,)


@pytest.mark.parametrize("fn", [_mul_through_data, _copy_into_second], ids=["mul_through_data", "copy_"])
def test_order_dependent_overlap_refused(fn):
    # Eager's checks let a read of other indices of the written memory through when a tensor is not
    # dense: its result is the kernel's visiting order. Refused, before any input is touched.
    args = _expanded_head_and_tail()
    before = [a.clone() for a in args]
    with pytest.raises(UnsupportedMutationError, match="order its kernel visits"):
        aot.aot_function(fn, functional_nop)(*args)
    for a, b in zip(args, before, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("start", [1, 0], ids=["interleaved", "same_elements"])
def test_strided_overlap_without_order_dependence(start):
    # Reads of exactly the element written at the same index, or of no written element, are well defined.
    check(_copy_into_second, _strided_pair(start))
