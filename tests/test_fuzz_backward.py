"""Backward errors as eager raises them (fuzz classes 2 and 4 of ``benchmarks/fuzz_findings.md``, seed 20):
where eager's backward raises, the compiled backward raises the same type; where eager's runs, ours runs.
Each case runs against eager with ``tests/oracle.py`` ``check_in_mode`` in training mode.
"""

from __future__ import annotations

import pytest
import torch

import aot
from tests.functions import Identity, ScaledBySaved, TriplesGradOutput, WithSign
from tests.oracle import MODES, assert_close, check_in_mode, derivatives


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


# Class 2 (program 1899): a view made before requires_grad_() of its base, then an out= under no_grad resizes
# the base to the view's shape: eager's history of the base (recorded at its old shape) refuses the gradient.
def _function_then_base_resized_by_out(a0):
    v0 = a0.diagonal()
    a0.requires_grad_()
    v1, v2 = WithSign.apply(a0)
    with torch.no_grad():
        torch.clamp(v0, min=0, out=a0)
    return (a0, sum(t.real.sum() for t in (a0, v0, v1, v2)))


def _block():
    return (_randn(2, 3, 4),)


# Class 7 (program 112): a transpose_() recorded under grad mode, then set_() under no_grad onto a clone of the
# same geometry: eager's view of it differentiates through the new geometry and runs.
def _transposed_then_set_to_clone(a0):
    a0.transpose_(0, -1)
    with torch.no_grad():
        a0.set_(a0.clone())
    return (a0.transpose(0, -1),)


def _nonleaf_block():
    return (_randn(4, 6).requires_grad_() * 1,)


def test_backward_through_base_resized_under_no_grad_raises() -> None:
    check_in_mode(_function_then_base_resized_by_out, _block, "training")


# The class of program 1899: an input the function makes require grad, then writes and restrides under no_grad.
# Below, it is a leaf requiring grad (as eager's is from then on): its backward reaches the caller's tensor,
# whose .grad the oracle does not compare (it needed no grad before the call), so these tests do.
def _used_then_restrided_and_written(a0):
    a0.requires_grad_()
    y = a0 * 2
    with torch.no_grad():
        a0.t_()
        a0.mul_(2)
    return (y.sum(),)


def _restrided_and_written_then_used(a0):
    a0.requires_grad_()
    with torch.no_grad():
        a0.t_()
        a0.mul_(2)
    return ((a0 * 2).sum(),)


def _restrided_then_made_to_require_grad_and_written(a0):
    a0.t_()
    a0.requires_grad_()
    with torch.no_grad():
        a0.mul_(2)
    return ((a0 * 2).sum(), a0)


def _used_then_unsqueezed_and_written(a0):
    a0.requires_grad_()
    v = a0 * 3
    with torch.no_grad():
        a0.unsqueeze_(0)
        a0.add_(1)
    return (v, a0.exp())


def _small_block():
    return (_randn(2, 3),)


def _backward_of(fn, args):
    """The caller's tensor's ``.grad`` after the backward of ``fn``'s outputs, or the error it raised."""
    outs = fn(*args)
    try:
        torch.autograd.backward([o.sum() for o in outs if o.requires_grad])
    except RuntimeError as error:
        return error
    return args[0].grad


@pytest.mark.parametrize(
    "fn",
    [
        _used_then_restrided_and_written,
        _restrided_and_written_then_used,
        _restrided_then_made_to_require_grad_and_written,
        _used_then_unsqueezed_and_written,
    ],
)
def test_input_made_to_require_grad_then_written_and_restrided(fn) -> None:
    check_in_mode(fn, _small_block, "training")
    eager = _backward_of(fn, _small_block())
    compiled = _backward_of(aot.aot_function(fn, aot.nop), _small_block())
    if isinstance(eager, BaseException):
        assert type(compiled) is type(eager), f"eager raised {eager!r}, compiled {compiled!r}"
    else:
        assert isinstance(compiled, torch.Tensor) and isinstance(eager, torch.Tensor), (compiled, eager)
        assert_close(compiled, eager)


def test_backward_of_view_of_input_set_to_clone_runs() -> None:
    check_in_mode(_transposed_then_set_to_clone, _nonleaf_block, "training")


# The class of program 112: a set_() under no_grad keeps the history a recorded change (of geometry, or a write)
# gave the input; only a set_() autograd records itself has set_'s history (whose derivative raises).
def _transposed_then_set_to_input(a0, a1):
    a0.transpose_(0, -1)
    with torch.no_grad():
        a0.set_(a1)
    return (a0.transpose(0, -1), a0.sum())


def _transposed_and_written_then_set_to_clone(a0):
    a0.transpose_(0, -1)
    a0.mul_(2)
    with torch.no_grad():
        a0.set_(a0.clone())
    return (a0,)


def _unsqueezed_then_set_to_new_values(a0):
    a0.unsqueeze_(0)
    with torch.no_grad():
        a0.set_(a0.clone() * 2)
    return (a0.squeeze(0).exp(),)


def _two_nonleaf_blocks():
    g = torch.Generator().manual_seed(0)
    a0, a1 = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    return (a0.requires_grad_() * 1, a1.t().requires_grad_() * 1)


# Program 4440 (slice 3,000-5,999, class 4): written in grad mode (index_put_), then set_() under no_grad onto a
# tensor the function made: eager's backward runs (the set_() was not recorded).
def _written_then_set_to_clone_of_other(a0, a1):
    a0.index_put_((torch.tensor([0]),), torch.tensor(2.0))
    a1.detach().zero_()
    a1.detach().sigmoid_()
    v0 = a1.clone()
    with torch.no_grad():
        a0.set_(v0)
    v1 = a1.data
    return (a1, v0, v1, sum(t.sum() for t in (a0, a1, v0, v1)))


def _overlapping_views():
    s0 = _randn(37).requires_grad_() * 1
    return (s0[0:24].view(2, 3, 4), s0[13:37].view(2, 3, 4))


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize(
    ("fn", "make_args"),
    [
        (_transposed_then_set_to_clone, _nonleaf_block),
        (_transposed_then_set_to_input, _two_nonleaf_blocks),
        (_transposed_and_written_then_set_to_clone, _nonleaf_block),
        (_unsqueezed_then_set_to_new_values, _nonleaf_block),
        (_written_then_set_to_clone_of_other, _overlapping_views),
    ],
)
def test_set_under_no_grad_keeps_recorded_history(fn, make_args, mode) -> None:
    check_in_mode(fn, make_args, mode)


def _set_to_clone_then_written(a0):
    with torch.no_grad():
        a0.set_(a0.clone())
    a0.mul_(3)
    return (a0.sum(),)


def test_write_after_set_to_clone_differentiated() -> None:
    check_in_mode(_set_to_clone_then_written, _nonleaf_block, "training")


# The class of program 6084 (seed 20): an autograd.Function saves an input the function restrided before the call;
# a layer above restrides the caller's tensor in place after the compiled call, so the backward must neither read
# the saved input in that final geometry nor write it there (its backward's write of the input lands in the
# geometry the call had).
def _saving_function(write):
    class WritesSavedInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale):
            ctx.save_for_backward(scale)
            return x * scale.sum()

        @staticmethod
        def backward(ctx, grad):
            (scale,) = ctx.saved_tensors
            if write == "mul_":
                scale.mul_(2)
            elif write == "add_":
                scale.add_(torch.arange(scale.numel(), dtype=scale.dtype).view(scale.shape))
            elif write == "copy_":
                scale.copy_(torch.arange(scale.numel(), dtype=scale.dtype).view(scale.shape))
            # Its first row: the geometry the backward sees counts.
            return grad * (scale[0].sum() + scale.sum()), None

    return WritesSavedInBackward


_RESTRIDES = {
    "transpose_": lambda a: a.transpose_(0, -1),
    "t_": lambda a: a.t_(),
    "unsqueeze_": lambda a: a.unsqueeze_(0),
    "as_strided_": lambda a: a.as_strided_((a.shape[1], a.shape[0]), (a.stride()[1], a.stride()[0])),
}


def _restrided_then_saved(restride, write):
    function = _saving_function(write)

    def fn(a0, a1):
        v0 = a1[..., ::2]
        _RESTRIDES[restride](a1)
        v1 = function.apply(a0, a1)
        return (a1, a0, sum(t.real.sum() for t in (a0, a1, v0, v1)))

    return fn


def _strided_view_args():
    g = torch.Generator().manual_seed(0)
    s0 = torch.randn(2, 8, generator=g)
    s1 = torch.randn(24, generator=g)
    return (s0[:, ::2].detach().requires_grad_(), s1[4:16].view(3, 4)[:, ::2])


def _nonleaf_scale_args():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 4, generator=g).requires_grad_(), torch.randn(3, 2, generator=g).requires_grad_() * 1)


@pytest.mark.parametrize("write", ["mul_", "add_", "copy_", None])
@pytest.mark.parametrize("restride", list(_RESTRIDES))
def test_function_saving_restrided_input(restride, write) -> None:
    check_in_mode(_restrided_then_saved(restride, write), _strided_view_args, "training")


@pytest.mark.parametrize("restride", list(_RESTRIDES))
def test_function_saving_restrided_nonleaf(restride) -> None:
    check_in_mode(_restrided_then_saved(restride, "mul_"), _nonleaf_scale_args, "training")


class _ReadsSavedInBackward(torch.autograd.Function):
    """Saves ``scale`` and reads it in its backward only: the graph saves the input itself, its view taken there."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(scale)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        return grad * scale[0].sum(), None


def _restrided_then_read_by_backward(restride):
    def fn(a0, a1):
        _RESTRIDES[restride](a1)
        return (_ReadsSavedInBackward.apply(a0, a1),)

    return fn


def _plain_scale_args():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 4, generator=g).requires_grad_(), torch.randn(3, 2, generator=g))


@pytest.mark.parametrize("make_args", [_plain_scale_args, _strided_view_args])
@pytest.mark.parametrize("restride", list(_RESTRIDES))
def test_function_reading_restrided_input_in_backward(restride, make_args) -> None:
    check_in_mode(_restrided_then_read_by_backward(restride), make_args, "training")


# The class of the test above: a write in grad mode after set_() under no_grad extends the input's own history
# (eager's input is no view: nothing else is written), which the caller's tensor keeps after the call.
def _set_to_clone_then_written_returned(a0):
    with torch.no_grad():
        a0.set_(a0.clone())
    a0.mul_(3)
    return (a0.t(), a0.sum())


def _set_to_clone_then_restrided_and_written(a0):
    with torch.no_grad():
        a0.set_(a0.clone())
    a0.t_()
    a0.exp_()
    return (a0.sum(),)


def _transposed_set_to_clone_then_written(a0):
    a0.t_()
    with torch.no_grad():
        a0.set_(a0.clone())
    a0.mul_(3)
    return (a0.sum(), a0)


def _view_read_after_set_and_write(a0):
    v = a0[0]
    with torch.no_grad():
        a0.set_(a0.clone() * 2)
    a0.add_(v.sum())
    return (a0.sum(), v)


@pytest.mark.parametrize(
    "fn",
    [
        _set_to_clone_then_written_returned,
        _set_to_clone_then_restrided_and_written,
        _transposed_set_to_clone_then_written,
        _view_read_after_set_and_write,
    ],
)
def test_write_after_set_under_no_grad_extends_history(fn) -> None:
    check_in_mode(fn, _nonleaf_block, "training")


def _set_to_other_input_then_written(a0, a1):
    with torch.no_grad():
        a0.set_(a1)
    a0.mul_(3)
    return (a0.sum(),)


def _set_to_other_input_then_added(a0, a1):
    with torch.no_grad():
        a0.set_(a1)
    a0.add_(a0 * 2)
    return (a0.sum(), a0)


def _set_to_other_input_then_both_read(a0, a1):
    with torch.no_grad():
        a0.set_(a1)
    a0.mul_(3)
    return (a0.sum(), a1 * 2)


def _set_to_other_input_viewed_then_written(a0, a1):
    with torch.no_grad():
        a0.set_(a1.view(4, 6))
    a0.mul_(3)
    return (a0.sum(),)


def _two_nonleaf_alike():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(4, 6, generator=g).requires_grad_() * 1, torch.randn(4, 6, generator=g).requires_grad_() * 1)


# Eager's write into the other input's memory leaves that input's history alone: its leaf gets no gradient (None)
# where nothing reads it after, not the zeros of a tangent no gradient reached.
@pytest.mark.parametrize(
    "fn",
    [
        _set_to_other_input_then_written,
        _set_to_other_input_then_added,
        _set_to_other_input_then_both_read,
        _set_to_other_input_viewed_then_written,
    ],
)
def test_write_after_set_to_other_input(fn) -> None:
    check_in_mode(fn, _two_nonleaf_alike, "training")


def _restrided_then_read_by_backward_twice(a0, a1):
    a1.t_()
    return (_ReadsSavedInBackward.apply(a0, a1).sin(),)


def test_higher_order_backward_reading_restrided_input() -> None:
    eager = derivatives(_restrided_then_read_by_backward_twice, list(_plain_scale_args()), 2)
    compiled_fn = aot.aot_function(_restrided_then_read_by_backward_twice, aot.nop)
    compiled = derivatives(compiled_fn, list(_plain_scale_args()), 2)
    assert_close(compiled, eager, grad=True)


class _ScalesBySavedRow(torch.autograd.Function):
    """Its backward is its forward's derivative: a recomputation of its forward differentiates as eager does."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(scale)
        return x * scale[0].sum()

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        return grad * scale[0].sum(), None


def _restrided_then_scaled(restride):
    def fn(a0, a1):
        _RESTRIDES[restride](a1)
        return (_ScalesBySavedRow.apply(a0, a1).sin(),)

    return fn


# The higher-order backward recomputes from the primals it holds: one the metadata layer restrides in place after
# the call is held as an alias in the call's geometry (its first row there is not its first row after).
@pytest.mark.parametrize(
    ("make_args", "order"),
    [
        (_plain_scale_args, 2),
        (_plain_scale_args, 3),
        (_nonleaf_scale_args, 2),
        (_nonleaf_scale_args, 3),
    ],
)
@pytest.mark.parametrize("restride", list(_RESTRIDES))
def test_higher_order_backward_recomputing_from_restrided_input(restride, make_args, order) -> None:
    fn = _restrided_then_scaled(restride)
    eager = derivatives(fn, list(make_args()), order)
    compiled = derivatives(aot.aot_function(fn, aot.nop), list(make_args()), order)
    assert_close(compiled, eager, grad=True)


def _restrided_then_read(restride):
    def fn(a):
        _RESTRIDES[restride](a)
        return (a.sin() * 2,)

    return fn


# The class: a non-leaf requiring grad the function restrides in place where autograd records it, never written.
# Eager's input ends with the last change's node as its grad_fn; each read reaches the node the input had then
# (a view taken before a change takes its history again from the changed input, or, the input a view, from its
# base). Compared on the input itself, its base and the leaf: the leaf's .grad alone cannot tell.
def _read_before_and_after(restride):
    def fn(a):
        before = a * 2
        _RESTRIDES[restride](a)
        return (before, a * 3)

    return fn


def _restrided_twice(restride):
    def fn(a):
        _RESTRIDES[restride](a)
        between = a * 2
        a.unsqueeze_(0)
        return (between, a.cos())

    return fn


def _restrided_and_returned(restride):
    def fn(a):
        _RESTRIDES[restride](a)
        return (a, a.sin() * 2)

    return fn


def _viewed_before_read_after(restride):
    def fn(a):
        row = a[0]
        _RESTRIDES[restride](a)
        return (row * 2, a * 3)

    return fn


def _view_returned_after(restride):
    def fn(a):
        _RESTRIDES[restride](a)
        return (a[0], a * 2)

    return fn


def _viewed_between_changes(restride):
    def fn(a):
        _RESTRIDES[restride](a)
        row = a[0]
        a.unsqueeze_(1)
        return (row * 2, a.cos())

    return fn


def _read_before_only(restride):
    def fn(a):
        before = a * 2
        _RESTRIDES[restride](a)
        return (before,)

    return fn


def _nonleaf_input():
    leaf = torch.randn(3, 2, generator=torch.Generator().manual_seed(0)).requires_grad_()
    return leaf, leaf * 1, None


def _view_input():
    leaf = torch.randn(4, 2, generator=torch.Generator().manual_seed(0)).requires_grad_()
    base = leaf * 1
    return leaf, base[1:], base


def _strided_view_input():
    leaf = torch.randn(24, generator=torch.Generator().manual_seed(0)).requires_grad_()
    base = leaf * 1
    return leaf, base[1:13].view(3, 4)[:, ::2], base


def _gradients_wrt_inputs(f, make_input):
    leaf, a, base = make_input()
    outs = f(a)
    total = sum((out * (k + 1)).sum() for k, out in enumerate(outs))
    targets = [t for t in (a, base, leaf) if t is not None]
    return [o.detach() for o in outs], torch.autograd.grad(total, targets, allow_unused=True)


# A view input (contiguous or strided) takes the class's route too: eager's view ends with the change's node on its
# own; views of it taken before a change are views of its base, whose history they take again past its nodes.
def _inputs_of(programs):
    """(make_input, program) pairs for each kind of input."""
    return [
        (make_input, program)
        for program in programs
        for make_input in (_nonleaf_input, _view_input, _strided_view_input)
    ]


@pytest.mark.parametrize(
    ("make_input", "program"),
    _inputs_of(
        [
            _restrided_then_read,
            _read_before_and_after,
            _restrided_twice,
            _restrided_and_returned,
            _viewed_before_read_after,
            _view_returned_after,
            _viewed_between_changes,
            _read_before_only,
        ],
    ),
)
@pytest.mark.parametrize("restride", list(_RESTRIDES))
def test_gradient_wrt_nonleaf_restrided_in_place(restride, make_input, program) -> None:
    fn = program(restride)
    eager = _gradients_wrt_inputs(fn, make_input)
    compiled = _gradients_wrt_inputs(aot.aot_function(fn, aot.nop), make_input)
    assert_close(compiled, eager, grad=True)
    check_in_mode(fn, lambda: make_input()[1:2], "training")


# The class's route, also where an autograd.Function saves the restrided input and its backward doubles it in
# place (a strided view input: its steps' tensors, planned with counters of their own, share the input's at run
# time; the synthetic base of them all had its counter set twice, back to the value before: a version error).
def _restrided_then_saved_and_doubled(restride):
    def fn(a):
        _RESTRIDES[restride](a)
        return (a * 2, ScaledBySaved.apply(a, a))

    return fn


def _strided_view_nonleaf():
    return (
        (torch.randn(24, generator=torch.Generator().manual_seed(0)).requires_grad_() * 1)[1:13].view(3, 4)[:, ::2],
    )


@pytest.mark.parametrize("make_args", [lambda: _nonleaf_input()[1:2], _strided_view_nonleaf])
@pytest.mark.parametrize("restride", list(_RESTRIDES))
def test_restrided_nonleaf_saved_and_doubled_by_backward(restride, make_args) -> None:
    check_in_mode(_restrided_then_saved_and_doubled(restride), make_args, "training")


# A view of the restrided input made under no_grad needs no grad, as eager's (seed 32 program 112: the route's
# stand-in, an autograd.Function's output, gave its no_grad views a history).
def _viewed_under_no_grad(restride):
    def fn(a):
        _RESTRIDES[restride](a)
        with torch.no_grad():
            row = a[0]
        return (a.sum() + row.sum(),)

    return fn


def _squeezed_then_diagonal_under_no_grad(a1):
    a1.squeeze_()
    with torch.no_grad():
        v2 = a1.diagonal()
    return (sum(t.real.sum() for t in (a1, v2)),)


def _complex_nonleaf():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 2, generator=g, dtype=torch.complex64).requires_grad_() * 1,)


@pytest.mark.parametrize("restride", list(_RESTRIDES))
def test_restrided_nonleaf_viewed_under_no_grad(restride) -> None:
    check_in_mode(_viewed_under_no_grad(restride), lambda: _nonleaf_input()[1:2], "training")
    check_in_mode(_squeezed_then_diagonal_under_no_grad, _complex_nonleaf, "training")


# The second derivative w.r.t. the input: the compiled backward, differentiated, recomputes from the values the
# reads after the change read, which must be the tensors with those steps' histories, not the input before them.
@pytest.mark.parametrize(
    ("make_input", "program"),
    _inputs_of([_read_before_and_after, _restrided_twice, _viewed_before_read_after, _viewed_between_changes]),
)
@pytest.mark.parametrize("restride", list(_RESTRIDES))
def test_second_derivative_wrt_nonleaf_restrided_in_place(restride, make_input, program) -> None:
    def squared(a):
        return tuple(out * out for out in program(restride)(a))

    def second(f):
        leaf, a, base = make_input()
        targets = [t for t in (a, base, leaf) if t is not None]
        total = sum((out * (k + 1)).sum() for k, out in enumerate(f(a)))
        firsts = torch.autograd.grad(total, targets, create_graph=True, allow_unused=True)
        weighted = sum(g.sin().sum() for g in firsts if g is not None)
        return torch.autograd.grad(weighted, targets, allow_unused=True)

    assert_close(second(aot.aot_function(squared, aot.nop)), second(squared), grad=True)


# The third derivative of the test above w.r.t. a0 alone: the second-order backward's as_strided gradient writes
# through copy.default, which the third-order backward differentiates as eager's write.
@pytest.mark.parametrize("restride", list(_RESTRIDES))
def test_third_derivative_through_restrided_input_gradient(restride) -> None:
    fn = _restrided_then_scaled(restride)
    eager_args, compiled_args = list(_nonleaf_scale_args()), list(_nonleaf_scale_args())
    eager = derivatives(fn, eager_args, 3, wrt=eager_args[:1])
    compiled = derivatives(aot.aot_function(fn, aot.nop), compiled_args, 3, wrt=compiled_args[:1])
    assert_close(compiled, eager, grad=True)


# Seed 28, program 4944: an autograd.Function's output, returned only through a view taken under no_grad (it
# requires grad without a history: a leaf), and summed. Eager's backward sends the Function's output the sum's
# expanded gradient alone, which a backward writing its grad_output in place may not write (internal overlap).
# The view's hidden base had a tangent in the graph, added to that gradient: the write ran on the sum.
def _no_grad_view_of_function_output(view, fn=TriplesGradOutput, grad_mode=False):
    def f(a0):
        v2 = fn.apply(a0.t())
        with torch.set_grad_enabled(grad_mode):
            v3 = view(v2)
        return (v3, v2.sum())

    return f


def _leaf_2x4():
    return (_randn(2, 4).requires_grad_(),)


def _strided_leaf():
    return (_randn(2, 8)[:, ::2].detach().requires_grad_(),)


def _expand(t):
    return t.expand(2, 4, 2)


def _no_grad_view_of_scaled_by_saved(a0):
    v2 = ScaledBySaved.apply(a0.t(), torch.ones(3))
    with torch.no_grad():
        v3 = v2.expand(2, 4, 2)
    return (v3, v2.sum())


def _function_output_plain_op(a0):
    v2 = a0.t() * 3
    with torch.no_grad():
        v3 = v2.expand(2, 4, 2)
    return (v3, v2.sum())


NO_GRAD_VIEW_OF_FUNCTION_OUTPUT = {
    "expand_strided_leaf": (_no_grad_view_of_function_output(_expand), _strided_leaf),
    "expand": (_no_grad_view_of_function_output(_expand), _leaf_2x4),
    "unsqueeze": (_no_grad_view_of_function_output(lambda t: t.unsqueeze(0)), _leaf_2x4),
    "slice": (_no_grad_view_of_function_output(lambda t: t[1:]), _leaf_2x4),
    "two_views": (
        lambda a0: (*_no_grad_view_of_function_output(lambda t: t[1:])(a0), TriplesGradOutput.apply(a0)[None]),
        _leaf_2x4,
    ),
    # The view alone: the Function's output has no gradient, yet requires grad (a graph of its own).
    "expand_alone": (lambda a0: _no_grad_view_of_function_output(_expand)(a0)[:1], _leaf_2x4),
    # Controls: the view taken in grad mode has a history (the gradient reaching the Function is a fresh sum);
    # a Function not writing its grad_output; a plain op.
    "expand_in_grad_mode": (_no_grad_view_of_function_output(_expand, grad_mode=True), _leaf_2x4),
    "expand_of_scaled_by_saved": (_no_grad_view_of_scaled_by_saved, _leaf_2x4),
    "expand_of_identity": (_no_grad_view_of_function_output(_expand, Identity), _leaf_2x4),
    "expand_of_plain_op": (_function_output_plain_op, _leaf_2x4),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(NO_GRAD_VIEW_OF_FUNCTION_OUTPUT))
def test_no_grad_view_of_function_output_writing_grad(name, mode):
    check_in_mode(*NO_GRAD_VIEW_OF_FUNCTION_OUTPUT[name], mode)
