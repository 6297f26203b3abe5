"""Grad-mode and inference-mode rules of eager autograd, as the mutation fuzzer found them broken.

Views taken under ``no_grad`` whose base changes in place afterwards, outputs made under
``inference_mode`` (inference tensors, ``requires_grad_()`` on them, autograd.Functions recorded
there), inference tensors used outside it. Each case is the fuzzer's shrunk program (seed 3 of
``benchmarks/fuzz_mutation.py``), run against eager with ``tests/oracle.py`` ``check`` in the
modes listed for it.
"""

from __future__ import annotations

import pytest
import torch

from tests.functions import DoublesInPlace, Identity, ScaledBySaved, ViewOf, WithSign
from tests.oracle import check_in_mode, mode_params


def _randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=dtype)


def _view_then_transpose_(a0):
    # Class 3: a view taken under no_grad, then its base transposed in place: eager's view raises on
    # .grad_fn (its base's counter moved after it was taken), the compiled one must too.
    v1 = a0.as_strided((1,), (1,), 1)
    a0.transpose_(0, -1)
    return (v1,)


def _view_then_transpose_args():
    return (_randn(2, 2).requires_grad_(),)


def _flip_under_enable_grad_then_transpose_(a0):
    # Class 20: a value computed with grad mode on from an input transposed in place later.
    with torch.enable_grad():
        v1 = a0.flip(0)
    a0.transpose_(0, -1)
    return (v1,)


def _flip_under_enable_grad_args():
    return (_randn(4, 1, dtype=torch.complex64).requires_grad_(),)


class _WithSign(torch.autograd.Function):
    """Returns 3 * x and the non-differentiable sign of x."""

    @staticmethod
    def forward(ctx, x):
        sign = x.sign()
        ctx.mark_non_differentiable(sign)
        return x * 3, sign

    @staticmethod
    def backward(ctx, grad, grad_sign):
        return grad * 3


def _function_output_requires_grad_(a0):
    # Class 5: under inference_mode the Function records nothing; requires_grad_() on its output (an
    # inference tensor) makes it a leaf requiring grad.
    v2, _ = _WithSign.apply(a0)
    v2.requires_grad_()
    return (v2,)


def _strided_slice_of_leaf():
    s1 = _randn(24).requires_grad_()
    return (s1[4:16:2],)


def _detached_write_then_made_leaf(a0):
    # Class 7: a value made under inference_mode and made to require grad, with an input written through
    # detach(): nothing is recorded, so nothing (an inference tensor) is saved for a backward.
    a0.detach().sigmoid_()
    v0 = a0 @ a0.mT
    v0.requires_grad_()
    return (v0,)


def _leaf_column():
    return (_randn(4, 1).requires_grad_(),)


def _out_resizes_data_of_inference_tensor(a0):
    # Class 8: an out= op resizes the .data alias of an inference tensor before writing it: eager allows
    # both (a write through a .data alias itself), the geometry change keeps it that alias.
    v0 = a0.unfold(0, 2, 2).clone()
    torch.neg(v0, out=a0.data)
    return ()


def _inference_tensor_input():
    with torch.inference_mode():
        return (torch.randint(-4, 5, (3, 3), generator=torch.Generator().manual_seed(0)).t(),)


def _data_written_after_a_view_of_it(a0):
    # A .data alias of an inference tensor that a view was taken from is still that alias.
    d = a0.data
    v = d[1:]
    d.mul_(2)
    return (v,)


class _SavesItsInput(torch.autograd.Function):
    """Saves its input for the backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x


def _function_saves_under_enable_grad(a0):
    # Class 16: under inference_mode an autograd.Function still records in an enable_grad region (built-in
    # ops do not), and then refuses to save an inference tensor (here the input, made in inference mode).
    a0.requires_grad_()
    with torch.enable_grad():
        _SavesItsInput.apply(a0)
    return ()


def _slice_of_plain():
    return (_randn(8)[0:5],)


def _function_view_then_base_as_strided_(a0):
    # Class 21: a Function's view taken under no_grad, then its base's geometry changed in place with grad
    # mode on: eager refuses the view's next recorded use (its history cannot be taken again), though the
    # program is traced reading stand-ins of views whose geometry changed.
    v0 = a0 * 2
    with torch.no_grad():
        v0.set_(a0.detach())
        v1 = ViewOf.apply(v0)
    v0.as_strided_((1,), (2,), 22)
    return (sum(t.real.sum() for t in (a0, v0, v1)),)


def _non_leaf_cube():
    return (_randn(2, 3, 4).requires_grad_() * 1,)


class _Tripled(torch.autograd.Function):
    """Returns 3 * x; saves nothing."""

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * 3


def _function_under_enable_grad(a0):
    # Under no_grad and under inference_mode an autograd.Function in an enable_grad region records (under
    # inference_mode built-in ops do not): its output requires grad, with the Function's history.
    with torch.enable_grad():
        v0 = _Tripled.apply(a0)
    return (v0, v0 * 2)


def _identity_under_enable_grad(a0):
    # The same for a Function returning its input as is: eager's output aliases the caller's a0.
    with torch.enable_grad():
        v0 = Identity.apply(a0)
    return (v0,)


def _leaf_row():
    return (_randn(3).requires_grad_(),)


def _function_then_data_as_strided_(a0):
    # Seed 5 class 4: a Function's output in an enable_grad region of a no_grad caller, then the
    # input's .data restrided under no_grad.
    with torch.no_grad():
        a0.index_fill_(-1, torch.tensor([0]), 2.0)
    with torch.enable_grad():
        v0 = ScaledBySaved.apply(a0, a0)
        with torch.no_grad():
            a0.data.as_strided_((4,), (1,), 9)
    return (v0,)


def _strided_leaf():
    return (_randn(2, 8)[:, 1::3].detach().requires_grad_(),)


def _view_of_inference_leaf_requires_grad_(a0):
    # Seed 5 class 7: under inference_mode a view of an inference tensor requires no grad until the
    # function's requires_grad_() (traced on a normal stand-in of the input, whose view requires it already).
    v0 = a0.narrow(-1, 1, 1)
    v0.requires_grad_()
    return (v0,)


def _square_leaf():
    return (_randn(8)[3:7].view(2, 2).detach().requires_grad_(),)


def _set_under_enable_grad_then_data_fill_(a0, a1):
    # Seed 5 class 8: set_() in an enable_grad region of a no_grad caller, the source then written
    # through .data.
    with torch.enable_grad():
        a0.set_(a1)
    a1.data.fill_(2j)
    return (a0,)


# The class: set_() autograd records (a target or source requiring grad) inside an enable_grad() region, the
# caller's grad mode another. The caller's tensor was set_() onto its new memory in the caller's grad mode, so
# under no_grad it lost eager's record (requires_grad False, no grad_fn).
def _set_under_enable_grad(a0, a1):
    with torch.enable_grad():
        a0.set_(a1)
    return (a0,)


def _set_slice_under_enable_grad(a0, a1):
    with torch.enable_grad():
        a0.set_(a1[1:, ::2])
    return (a0, a1)


def _set_under_enable_grad_then_mul_(a0, a1):
    with torch.enable_grad():
        a0.set_(a1.detach())
        a0.mul_(2)
    return (a0.sum(),)


def _set_onto_intermediate_under_enable_grad(a0, a1):
    with torch.enable_grad():
        a0.set_(a1 * 2)
    return (a0,)


def _set_onto_detached_intermediate_under_enable_grad(a0, a1):
    with torch.enable_grad():
        a0.set_(a1.detach() * 3)
    return (a0,)


def _set_under_enable_grad_then_no_grad_mul_(a0, a1):
    with torch.enable_grad():
        a0.set_(a1)
    with torch.no_grad():
        a0.mul_(2)
    return (a0,)


def _plain_pair():
    s0 = _randn(4, 1).requires_grad_()
    s1 = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1))
    return (s0 * 1, s1.requires_grad_())


def _plain_target_pair():
    s1 = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1))
    return (_randn(4, 1), s1.requires_grad_())


def _complex_pair():
    s0 = _randn(4, 1, dtype=torch.complex64).requires_grad_()
    s1 = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.complex64)
    return (s0 * 1, s1.requires_grad_())


def _view_under_enable_grad_then_written(a0):
    # Seed 21 class 9: a view taken in grad mode of an input made under no_grad inherits its creation, so
    # eager refuses its history once the memory is written after it; the compiled view, replayed while the
    # input counted as made in grad mode, did not.
    with torch.enable_grad():
        v1 = a0.expand(2, 4)
    a0.mul_(2)
    return (v1,)


def _view_then_other_view_written(a0, a1):
    # The same with the write through another input sharing the memory (merged into one base).
    with torch.enable_grad():
        v1 = a0.expand(2, 4)
    a1.narrow(-1, 1, 3).fill_(2j)
    return (v1,)


def _complex_slices():
    s0 = _randn(24, dtype=torch.complex64).requires_grad_()
    return (s0[2:10:2], s0[7:19].view(4, 3).t())


def _dirty_function_output_set_(a0, a1):
    # Brief item (issue 10/11): an autograd.Function writing its input and marking it dirty, called with grad
    # off on an input requiring grad, returns a detached alias of it in eager; the graph's function wrote a copy
    # of the input requiring no grad, got that copy back, and moved it with the set_() meant for the alias.
    v0 = DoublesInPlace.apply(a0)
    v0.set_(a1.detach())
    return a0, v0


def _dirty_function_output_unsqueeze_(a0, a1):
    v0 = DoublesInPlace.apply(a0)
    v0.unsqueeze_(0)
    return a0, v0


def _requires_grad_read_after_write(a0, a1):
    # The same copy, read: eager's input requires grad after a write under no_grad.
    a0.mul_(2)
    return a0.requires_grad, a0 + 1


def _leaf_and_plain():
    return (_randn(12).requires_grad_(), torch.randn(12, generator=torch.Generator().manual_seed(1)))


def _slice_of_non_leaf_and_plain():
    with torch.enable_grad():  # requiring grad under the caller's no_grad too
        return ((_randn(12).requires_grad_() * 1)[2:8], torch.randn(6, generator=torch.Generator().manual_seed(1)))


def _dirty_function_then_input_set_(a0, a1):
    # Seed 22 class 5 (program 997): the same Function on an input merged into a synthetic base (its set_() makes
    # its offset matter; or it overlaps a written input), then the input itself set_() elsewhere: eager's output,
    # a detached alias, stays on the old memory. The layer's copy of the base, made under the caller's no_grad,
    # required no grad: the Function returned the member itself, and the set_() moved it too.
    v0 = DoublesInPlace.apply(a0)
    a0.set_(a1.detach())
    return (sum(t.real.sum() for t in (a0, a1, v0)),)


def _dirty_function_on_written_member(a0, a1):
    a1.add_(1)
    v0 = DoublesInPlace.apply(a0)
    return v0 * 1, v0.requires_grad, v0 is a0


def _requires_grad_read_of_written_member(a0, a1):
    a0.mul_(2)
    return (a0 * (2 if a0.requires_grad else 3)).sum(), a1


def _enable_grad_read_of_member(a0, a1):
    # A slice made under no_grad is a leaf of its own: its reads in an enable_grad region record (the merged
    # member's gradient goes to it through a Function, which recorded nothing under no_grad).
    with torch.enable_grad():
        v0 = (a0 * 2).sum()
    a1.mul_(2)
    return v0, a0.requires_grad


def _enable_grad_write_of_member(a0, a1):
    # The member written with grad mode on is no view made under no_grad, as eager's made in grad mode is not.
    with torch.enable_grad():
        a0.mul_(a1.detach())
    return a0.sum(), a1


def _two_slices_of_leaf():
    s0 = _randn(15).requires_grad_()
    return (s0[5:10], s0[10:15])


def _overlapping_slices_of_leaf():
    s0 = _randn(15).requires_grad_()
    return (s0[3:8], s0[5:10])


def _slices_of_non_leaf(lo0: int, lo1: int) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.enable_grad():  # made in grad mode under the caller's no_grad too
        s0 = _randn(15).requires_grad_() * 1
    return (s0[lo0 : lo0 + 5], s0[lo1 : lo1 + 5])


# Seed 22 (programs 2000-4999) class 4, program 2543 (no_grad): the same Function on a column view of a leaf
# requiring grad under the caller's no_grad (a member of a synthetic base: its offset matters), then an out= op
# resizing the input. Eager's output is a detached alias the resize leaves alone; the member itself was returned,
# so it changed shape and values with the input. Fixed with the class above (d054b77); these are its variants.
def _dirty_function_then_out_resize(a0, a1):
    v0 = DoublesInPlace.apply(a0)
    with torch.no_grad():
        a0.neg_()
    torch.mul(a1, a1, out=a0)
    v2 = a1 @ a1.mT
    return (v2, sum(t.real.sum() for t in (a0, a1, v0, v2)))


def _dirty_function_then_out_resize_returned(a0, a1):
    v0 = DoublesInPlace.apply(a0)
    torch.mul(a1, a1, out=a0)
    return (v0 * 1, a0 * 1)


def _dirty_function_then_add_out(a0, a1):
    v0 = DoublesInPlace.apply(a0)
    with torch.no_grad():
        a0.neg_()
    torch.add(a1, 1, out=a0)
    return (sum(t.real.sum() for t in (a0, a1, v0)),)


def _column_of_leaf_and_strided():
    l1 = torch.randn(24, generator=torch.Generator().manual_seed(1)).requires_grad_()
    return (_randn(24).requires_grad_()[4:16].view(3, 4)[:, 2], (l1 * 1)[2:14].view(3, 4)[:, ::2])


def _column_of_leaf_and_matrix():
    return (
        _randn(24).requires_grad_()[4:16].view(3, 4)[:, 2],
        torch.randn(3, 2, generator=torch.Generator().manual_seed(1)),
    )


def _view_of_detached_leaf_and_strided():
    r0 = torch.randn(30, generator=torch.Generator().manual_seed(1))
    return (r0[:6:2].detach().requires_grad_()[...], _column_of_leaf_and_strided()[1])


CASES = {
    "dirty_function_then_out_resize_of_column": (_dirty_function_then_out_resize, _column_of_leaf_and_strided),
    "dirty_function_then_out_resize_of_leaf_view": (
        _dirty_function_then_out_resize,
        _view_of_detached_leaf_and_strided,
    ),
    "dirty_function_then_out_resize_returned": (_dirty_function_then_out_resize_returned, _column_of_leaf_and_matrix),
    "dirty_function_then_add_out": (_dirty_function_then_add_out, _view_of_detached_leaf_and_strided),
    "dirty_function_then_input_set_of_slices": (_dirty_function_then_input_set_, _two_slices_of_leaf),
    "dirty_function_then_input_set_of_overlapping": (_dirty_function_then_input_set_, _overlapping_slices_of_leaf),
    "dirty_function_then_input_set_of_non_leaf": (_dirty_function_then_input_set_, lambda: _slices_of_non_leaf(3, 5)),
    "dirty_function_on_written_member": (_dirty_function_on_written_member, _overlapping_slices_of_leaf),
    "requires_grad_read_of_written_member": (_requires_grad_read_of_written_member, _overlapping_slices_of_leaf),
    "enable_grad_read_of_member": (_enable_grad_read_of_member, _overlapping_slices_of_leaf),
    "enable_grad_write_of_member": (_enable_grad_write_of_member, lambda: _slices_of_non_leaf(5, 10)),
    "dirty_function_output_set_of_leaf": (_dirty_function_output_set_, _leaf_and_plain),
    "dirty_function_output_set_of_view": (_dirty_function_output_set_, _slice_of_non_leaf_and_plain),
    "dirty_function_output_unsqueeze_of_leaf": (_dirty_function_output_unsqueeze_, _leaf_and_plain),
    "dirty_function_output_unsqueeze_of_view": (_dirty_function_output_unsqueeze_, _slice_of_non_leaf_and_plain),
    "requires_grad_read_after_write_of_leaf": (_requires_grad_read_after_write, _leaf_and_plain),
    "requires_grad_read_after_write_of_view": (_requires_grad_read_after_write, _slice_of_non_leaf_and_plain),
    "view_under_enable_grad_then_written": (_view_under_enable_grad_then_written, lambda: _complex_slices()[:1]),
    "view_then_other_view_written": (_view_then_other_view_written, _complex_slices),
    "function_then_data_as_strided_": (_function_then_data_as_strided_, _strided_leaf),
    "view_of_inference_leaf_requires_grad_": (_view_of_inference_leaf_requires_grad_, _square_leaf),
    "set_under_enable_grad_then_data_fill_": (_set_under_enable_grad_then_data_fill_, _complex_pair),
    "set_under_enable_grad": (_set_under_enable_grad, _plain_pair),
    "set_under_enable_grad_plain_target": (_set_under_enable_grad, _plain_target_pair),
    "set_slice_under_enable_grad": (_set_slice_under_enable_grad, _plain_pair),
    "set_slice_under_enable_grad_plain_target": (_set_slice_under_enable_grad, _plain_target_pair),
    "set_under_enable_grad_then_mul_": (_set_under_enable_grad_then_mul_, _plain_pair),
    "set_onto_intermediate_under_enable_grad": (_set_onto_intermediate_under_enable_grad, _plain_target_pair),
    "set_onto_detached_intermediate_under_enable_grad": (
        _set_onto_detached_intermediate_under_enable_grad,
        _plain_pair,
    ),
    "set_under_enable_grad_then_no_grad_mul_": (_set_under_enable_grad_then_no_grad_mul_, _plain_pair),
    "function_under_enable_grad": (_function_under_enable_grad, _leaf_row),
    "identity_under_enable_grad": (_identity_under_enable_grad, _leaf_row),
    "function_view_then_base_as_strided_": (_function_view_then_base_as_strided_, _non_leaf_cube),
    "function_saves_under_enable_grad": (_function_saves_under_enable_grad, _slice_of_plain),
    "out_resizes_data_of_inference_tensor": (_out_resizes_data_of_inference_tensor, _inference_tensor_input),
    "data_written_after_a_view_of_it": (_data_written_after_a_view_of_it, _inference_tensor_input),
    "function_output_requires_grad_": (_function_output_requires_grad_, _strided_slice_of_leaf),
    "detached_write_then_made_leaf": (_detached_write_then_made_leaf, _leaf_column),
    "view_then_transpose_": (_view_then_transpose_, _view_then_transpose_args),
    "flip_under_enable_grad_then_transpose_": (
        _flip_under_enable_grad_then_transpose_,
        _flip_under_enable_grad_args,
    ),
}
# Classes not fixed yet, strict so that a fix shows.
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(CASES, KNOWN_WRONG))
def test_grad_mode_class(name: str, mode: str) -> None:
    check_in_mode(*CASES[name], mode)


# Seed 22, class 6 (program 2811): an input at a nonzero storage offset written under no_grad, then given to an
# autograd.Function under enable_grad, in the caller's inference mode. The runtime epilogue's working copy of the
# input was an autograd view of scratch memory (eager's input is no view): its history, taken again after the
# write by replaying the view op inside inference mode, was none, and the Function's apply failed an assert.


def _written_then_function(fn, write):
    def f(a0):
        with torch.no_grad():
            write(a0)
        with torch.enable_grad():
            outs = fn.apply(a0)
        return outs if isinstance(outs, tuple) else (outs,)

    return f


def _written_then_function_dropped(a0):
    with torch.no_grad():
        a0.scatter_(0, torch.zeros((1, 4), dtype=torch.long), 2.0)
    with torch.enable_grad():
        WithSign.apply(a0)
    return ()


def _written_in_grad_mode_then_function(a0):
    a0.add_(1)
    with torch.enable_grad():
        return WithSign.apply(a0)


def _detached_block_at_offset():
    return (_randn(16)[2:14].view(3, 4).detach().requires_grad_(),)


def _block_of_leaf_at_offset():
    return (_randn(16).requires_grad_()[2:14].view(3, 4),)


def _block_of_non_leaf_at_offset():
    with torch.enable_grad():
        s0 = _randn(16).requires_grad_() * 1
    return (s0[2:14].view(3, 4),)


def _add_one_(a0):
    a0.add_(1)


WRITTEN_AT_OFFSET_CASES = {
    "scatter_then_with_sign_dropped": (_written_then_function_dropped, _detached_block_at_offset),
    "add_then_with_sign": (_written_then_function(WithSign, _add_one_), _detached_block_at_offset),
    "add_then_identity": (_written_then_function(Identity, _add_one_), _detached_block_at_offset),
    "add_then_scaled_by_saved": (_written_then_function(ScaledBySaved, _add_one_), _detached_block_at_offset),
    "add_then_doubles_in_place": (_written_then_function(DoublesInPlace, _add_one_), _detached_block_at_offset),
    "add_in_grad_mode_then_with_sign": (_written_in_grad_mode_then_function, _detached_block_at_offset),
    "add_then_with_sign_of_leaf_view": (_written_then_function(WithSign, _add_one_), _block_of_leaf_at_offset),
    "add_then_with_sign_of_non_leaf_view": (
        _written_then_function(WithSign, _add_one_),
        _block_of_non_leaf_at_offset,
    ),
}


@pytest.mark.parametrize(("name", "mode"), mode_params(WRITTEN_AT_OFFSET_CASES, {}))
def test_written_at_offset_then_function(name: str, mode: str) -> None:
    check_in_mode(*WRITTEN_AT_OFFSET_CASES[name], mode)


# Seed 23 program 1699: an input's geometry changed in place, a view taken of it and written, the input made to
# require grad, then the view used under enable_grad, in the caller's inference mode. Eager records nothing there
# and reads no view's history; collection (run outside inference mode, the function inside) read the history of
# the view, made in inference mode and written since, and raised eager's refusal of it.


def _changed_then_view_written(take, write, use, returned):
    def f(a0):
        a0.as_strided_((1,), (2,), 3)
        v0 = take(a0)
        write(a0, v0)
        a0.requires_grad_()
        with torch.enable_grad():
            v1 = use(v0)
        return (v1, v0[..., :1]) if returned else ()

    return f


def _as_strided_at_7(a0):
    return a0.as_strided((2,), (1,), 7)


def _masked_fill_view(a0, v0):
    v0.masked_fill_(torch.arange(v0.numel()).view(v0.shape) % 2 == 0, 2.0)


def _mul_base(a0, v0):
    a0.mul_(2)


def _plain_3x4():
    return (_randn(3, 4),)


def _plain_3x4_outside_inference_mode():
    with torch.inference_mode(False):
        return (_randn(3, 4),)


CHANGED_THEN_VIEW_WRITTEN_CASES = {
    "as_strided_written_then_unfold": (
        _changed_then_view_written(_as_strided_at_7, _masked_fill_view, lambda v: v.unfold(0, 2, 1), False),
        _plain_3x4,
    ),
    "as_strided_written_then_unfold_of_plain": (
        _changed_then_view_written(_as_strided_at_7, _masked_fill_view, lambda v: v.unfold(0, 2, 1), False),
        _plain_3x4_outside_inference_mode,
    ),
    "as_strided_base_written_then_mul_returned": (
        _changed_then_view_written(_as_strided_at_7, _mul_base, lambda v: v * 2, True),
        _plain_3x4,
    ),
    "slice_written_then_mul_returned": (
        _changed_then_view_written(lambda a: a.view(-1)[7:9], _masked_fill_view, lambda v: v * 2, True),
        _plain_3x4_outside_inference_mode,
    ),
    "unsqueezed_base_written_then_unfold_returned": (
        _changed_then_view_written(lambda a: a.unsqueeze(0), _mul_base, lambda v: v.unfold(-1, 1, 1), True),
        _plain_3x4,
    ),
}


@pytest.mark.parametrize(("name", "mode"), mode_params(CHANGED_THEN_VIEW_WRITTEN_CASES, {}))
def test_changed_then_view_written(name: str, mode: str) -> None:
    check_in_mode(*CHANGED_THEN_VIEW_WRITTEN_CASES[name], mode)


# Program 1162 of seed 25: under the caller's inference_mode, a view of an inference leaf requiring grad has no
# autograd meta (requires no grad), so a Function applied to it in an enable_grad region records nothing and
# saves its inference second argument without complaint. Collection and the trace run outside inference mode,
# where the fake view required grad: the Function recorded and raised "Inference tensors cannot be saved".
# Given the leaf itself, or a view made to require grad, eager records and raises: so must we.
def _scaled_by_saved_of(view, *, data_write: bool = False, requires_grad: bool = False):
    def fn(a0, a1):
        v2 = view(a0)
        if requires_grad:
            v2.requires_grad_()
        v3 = a0 * 2
        if data_write:
            a1.data.index_put_((torch.tensor([0]),), torch.tensor(2.0))
        with torch.enable_grad():
            v4 = ScaledBySaved.apply(v2, v3)
        return (v4,)

    return fn


def _leaf_and_block():
    g = torch.Generator().manual_seed(0)
    return torch.randn(3, 3, generator=g).t().detach().requires_grad_(), torch.randn(2, 3, 4, generator=g)


FUNCTION_OF_VIEW_OF_INFERENCE_LEAF = {
    "unfold_data_write": _scaled_by_saved_of(lambda t: t.unfold(0, 2, 1), data_write=True),
    "unfold": _scaled_by_saved_of(lambda t: t.unfold(0, 2, 1)),
    "narrow": _scaled_by_saved_of(lambda t: t.narrow(1, 1, 2)),
    "select": _scaled_by_saved_of(lambda t: t[1]),
    "transpose": _scaled_by_saved_of(lambda t: t.t()),
    "leaf_itself": _scaled_by_saved_of(lambda t: t),
    "view_made_to_require_grad": _scaled_by_saved_of(lambda t: t[1:], requires_grad=True),
}


@pytest.mark.parametrize(("name", "mode"), mode_params(FUNCTION_OF_VIEW_OF_INFERENCE_LEAF, {}))
def test_function_of_view_of_inference_leaf(name, mode):
    check_in_mode(FUNCTION_OF_VIEW_OF_INFERENCE_LEAF[name], _leaf_and_block, mode)


# Seed 25 program 1677: under the caller's inference mode, ``v.requires_grad = True`` (the attribute's setter) on a
# view of an input made the view require grad as ``v.requires_grad_()`` does; collection saw only the method call, and
# the replayed output view required none.


def _view_then_flag_set(take, base_first):
    def f(a0):
        v0 = take(a0)
        if base_first:
            a0.requires_grad_()
        v0.requires_grad = True
        return (v0,)

    return f


def _plain_2x3x4():
    return (_randn(2, 3, 4),)


FLAG_SET_CASES = {
    "slice_base_first": (_view_then_flag_set(lambda a: a[1:], True), _plain_2x3x4),
    "slice": (_view_then_flag_set(lambda a: a[1:], False), _plain_2x3x4),
    "transpose": (_view_then_flag_set(lambda a: a.transpose(0, 2), False), _plain_2x3x4),
    "as_strided_base_first": (_view_then_flag_set(lambda a: a.as_strided((3,), (2,), 5), True), _plain_2x3x4),
    "view_of_outside_tensor": (_view_then_flag_set(lambda a: a.view(4, 3), True), _plain_3x4_outside_inference_mode),
}


@pytest.mark.parametrize(("name", "mode"), mode_params(FLAG_SET_CASES, {}))
def test_view_requires_grad_set_by_attribute(name: str, mode: str) -> None:
    check_in_mode(*FLAG_SET_CASES[name], mode)


# Seed 28 program 5906: under the caller's inference mode, a view of an inference leaf requiring grad needs no grad,
# so a Function marking it dirty returns that very object (eager's outputs ``(v3, v1)`` are one tensor). Collection
# hands the Function a detach() alias standing for the view (the fake view requires grad), and took the alias it
# returned for a new tensor: the compiled outputs were two. Given the leaf itself, or in the other modes, eager's
# Function returns a detached alias of an input requiring grad.
def _function_of_view(view, function=DoublesInPlace, *, twice: bool = False):
    def fn(a0):
        v1 = view(a0)
        v3 = function.apply(v1)
        if twice:
            v4 = function.apply(v3)
            return (v4, v1, v3)
        return (v3, v1)

    return fn


def _transposed_leaf(dtype: torch.dtype = torch.float32):
    def make():
        return (_randn(2, 3, dtype=dtype).t().detach().requires_grad_(),)

    return make


FUNCTION_RETURNING_VIEW_OF_INFERENCE_LEAF = {
    "slice": (_function_of_view(lambda t: t[1:]), _transposed_leaf()),
    "slice_complex": (_function_of_view(lambda t: t[1:]), _transposed_leaf(torch.complex64)),
    "transpose": (_function_of_view(lambda t: t.t()), _transposed_leaf()),
    "diagonal_complex": (_function_of_view(lambda t: t.diagonal()), _transposed_leaf(torch.complex64)),
    "unsqueeze": (_function_of_view(lambda t: t.unsqueeze(0)), _transposed_leaf()),
    "select_twice": (_function_of_view(lambda t: t[0], twice=True), _transposed_leaf()),
    "leaf_itself": (_function_of_view(lambda t: t), _transposed_leaf()),
    "slice_identity": (_function_of_view(lambda t: t[1:], Identity), _transposed_leaf()),
    "slice_view_of": (_function_of_view(lambda t: t[1:], ViewOf), _transposed_leaf(torch.complex64)),
}


@pytest.mark.parametrize(("name", "mode"), mode_params(FUNCTION_RETURNING_VIEW_OF_INFERENCE_LEAF, {}))
def test_function_returning_view_of_inference_leaf(name: str, mode: str) -> None:
    check_in_mode(*FUNCTION_RETURNING_VIEW_OF_INFERENCE_LEAF[name], mode)
