"""Grad modes, inference tensors, autograd.Functions and out= as eager judges them (fuzz classes of
``benchmarks/fuzz_findings.md``, seed 20): each case is run against eager with ``tests/oracle.py``
``check`` in every caller mode.
"""

from __future__ import annotations

import pytest
import torch

from tests.functions import DoublesInPlace, Identity, TriplesGradOutput, ViewOf
from tests.oracle import check, check_in_mode, mode_params


def _randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=dtype)


def _inference(*shape: int) -> torch.Tensor:
    with torch.inference_mode():
        return _randn(*shape)


# Inference tensors written outside inference mode (classes 5, 20, 29, 36-41, 50): eager raises exactly
# where it bumps a version counter the tensor lacks. A view of an inference tensor has none; a detach() or
# .data of one has its own; resize_ to the size it has bumps none; set_() moves memory, not counters.


def _resize_to_own_size(a0):
    a0.resize_(2)
    return (a0 * 2,)


def _strided_inference_column():
    with torch.inference_mode():
        return (_randn(2, 8)[:, 2],)


def _function_doubles_detached_input(a0):
    return (DoublesInPlace.apply(a0),)


def _detached_inference_view():
    return (_inference(24)[:12].view(3, 4).detach(),)


def _inference_view():
    return (_inference(24)[:12].view(3, 4),)


def _write_through_view_of_detached(a0):
    a0[1:].mul_(2)
    return ()


def _write_detach_of_view(a0):
    a0[1:].detach().mul_(2)
    return (a0 + 1,)


def _index_put_(a0):
    a0.index_put_((torch.tensor([0]),), torch.tensor(2.0))
    return ()


def _unsqueeze_(a0):
    a0.unsqueeze_(0)
    return (a0,)


def _squeeze_keeping_shape(a0):
    a0.squeeze_()
    return ()


def _set_onto_inference_then_written(a0, a1):
    # a1 keeps its own version counter in the inference tensor's memory: eager writes it.
    with torch.no_grad():
        a1.set_(a0.select(0, 0))
    a1.t_()
    a1.mul_(2)
    return (a1,)


def _inference_and_plain():
    return (_inference(2, 3), _randn(3, 2))


def _out_into_detach(a0):
    torch.mul(a0, 2, out=a0.detach())
    return (a0 + 0,)


# requires_grad_() on an inference tensor outside inference mode raises in eager (class 40), on a view or
# a detach() of one too.


def _view_requires_grad_(a0):
    v0 = a0[1:]
    v0.requires_grad_()
    return (v0.sum(),)


def _detach_requires_grad_(a0):
    return (a0.detach().requires_grad_() * 2,)


def _input_requires_grad_(a0):
    return (a0.requires_grad_() * 2,)


# Views made under no_grad (class 4): eager reads a view's history, and refuses a stale one, only in ops
# autograd records; detach() records nothing.


def _function_then_detach_restrided(a0):
    v0 = TriplesGradOutput.apply(a0)
    a0.detach().as_strided_((3,), (0,), 26)
    with torch.enable_grad():
        torch.sin(v0, out=a0.detach())
        with torch.no_grad():
            v2 = a0.diagonal()
    return (v2,)


def _view_of_leaf():
    # Made in the caller's mode: under no_grad a view made there.
    s0 = _randn(48).requires_grad_()
    return (s0[24:48].view(2, 3, 4),)


# Inputs sharing memory, one written, that the caller passed requiring no grad (a detach() of one that
# does): merged into one synthetic base, they get no history inside either. Else an out= op writing one
# refused autodiff (classes 25, 45, 47, 58), or a Function's view of one was judged a view made inside a
# Function (classes 31, 32, 49).


def _mul_out_into_itself(a0, a1):
    torch.mul(a1, 2, out=a1)
    return ()


def _overlapping_rows_second_detached():
    s0 = _randn(26).requires_grad_() * 1
    return (s0[7:19].view(3, 4), s0[14:26].view(3, 4).detach())


def _neg_out_then_requires_grad_(a0, a1):
    v0 = a0.clone()
    torch.neg(v0, out=a1)
    a1.requires_grad_()
    a0.transpose_(0, -1)
    return (sum(t.real.sum() for t in (a0, a1, v0)),)


def _overlapping_strided_plain():
    s1 = _randn(24)
    return (s1[1:13].view(3, 4)[:, ::2], s1[7:19].view(3, 4)[:, ::2])


def _add_out_resizing_under_enable_grad(a0, a1, a2):
    with torch.no_grad():
        a1.data.t_()
        with torch.enable_grad():
            torch.add(a0, 1, out=a2)
    return (a2, sum(t.real.sum() for t in (a0, a1, a2)))


def _transposed_and_two_views():
    s0, s1 = _randn(24), _randn(24).requires_grad_() * 1
    return (s0[4:16].view(4, 3).t(), s1[1:4].expand(2, 3), s1[4:16].view(3, 4)[:, 1].detach())


def _identity_then_index_add_(a0, a1):
    v0 = Identity.apply(a1)
    a1.index_add_(0, torch.tensor([0]), torch.ones_like(a1[:1]))
    return (sum(t.real.sum() for t in (a0, a1, v0)),)


def _overlapping_slices_second_detached():
    s0 = _randn(11).requires_grad_()
    return (s0[3:8], s0[6:11].detach())


def _view_of_then_zero_(a0, a1):
    v0 = a1.transpose(0, -1)
    v2 = ViewOf.apply(a1)
    v0.zero_()
    return (v0, sum(t.real.sum() for t in (a0, a1, v0, v2)))


def _same_rows_one_made_leaf():
    i0 = _randn(19)[0:12].view(3, 4)
    return (i0.detach().requires_grad_()[...], i0)


# Leaves requiring grad that share memory with what eager writes (classes 28, 43): eager's write changes
# their data without autograd seeing it; the write-back must not write in place through them.


def _mul_by_leaf_of_same_memory(a0, a1):
    a0.mul_(a1)
    return ()


def _transposed_and_its_data_made_leaf():
    i2 = _randn(2, 3).t()
    return (i2, i2.data.requires_grad_())


def _set_onto_leaf_then_written(a0):
    v1 = a0 @ a0.mT
    with torch.enable_grad():
        v1.set_(a0)
    v1.add_(1)
    return (a0, v1 + 0)


def _square_leaf():
    return (_randn(2, 2).requires_grad_(),)


def _detach_restrided_then_transposed(a0):
    # Class 10: a view of an inference tensor (a detach() of one, restrided) is no view, as eager's.
    v0 = a0.detach()
    v0.as_strided_((2, 3), (3, 1), 0)
    return (v0.t(),)


def _transposed_inference_ints():
    with torch.inference_mode():
        return (torch.randint(-4, 5, (2, 3), generator=torch.Generator().manual_seed(0)).t(),)


def _set_under_autocast_after_transpose_(a0, a1, a2):
    # Class 7: set_() of an input onto another's memory under autocast, in a program changing geometry in place
    # (the trace's RegeneratedViews took aten.set_ for an op reading the input, and set_() a stand-in).
    a1.transpose_(0, -1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        v0 = a2 @ a2.mT
        with torch.no_grad():
            a0.set_(a2)
    return (sum(t.float().sum() for t in (a0, a1, a2, v0)),)


def _three_rows_of_a_non_leaf():
    s0 = _randn(72).requires_grad_() * 1
    return (s0[0:24].view(4, 6), s0[24:48].view(4, 6), s0[48:72].view(4, 6))


def _out_grows_data_of_clone(a0, a1):
    # Class 34: out= grows a .data alias of an intermediate, whose storage the intermediate shares (both are
    # taken again on the whole grown storage, which the graph returns).
    v0 = a1.clone()
    v2 = v0.data
    with torch.no_grad():
        torch.add(a0.detach(), 1, out=v2)
    return (a1, v0, v2)


def _two_strided_int_views():
    s1 = torch.randint(-4, 5, (24,), generator=torch.Generator().manual_seed(0))
    return (s1[7:15:2], s1[3:15].view(3, 4)[:, 1])


CASES = {
    "set_under_autocast_after_transpose_": (_set_under_autocast_after_transpose_, _three_rows_of_a_non_leaf),
    "out_grows_data_of_clone": (_out_grows_data_of_clone, _two_strided_int_views),
    "detach_restrided_then_transposed": (_detach_restrided_then_transposed, _transposed_inference_ints),
    "mul_by_leaf_of_same_memory": (_mul_by_leaf_of_same_memory, _transposed_and_its_data_made_leaf),
    "set_onto_leaf_then_written": (_set_onto_leaf_then_written, _square_leaf),
    "mul_out_into_itself": (_mul_out_into_itself, _overlapping_rows_second_detached),
    "add_out_resizing_under_enable_grad": (_add_out_resizing_under_enable_grad, _transposed_and_two_views),
    "identity_then_index_add_": (_identity_then_index_add_, _overlapping_slices_second_detached),
    "view_of_then_zero_": (_view_of_then_zero_, _same_rows_one_made_leaf),
    "function_then_detach_restrided": (_function_then_detach_restrided, _view_of_leaf),
    "resize_to_own_size": (_resize_to_own_size, _strided_inference_column),
    "function_doubles_detached_input": (_function_doubles_detached_input, _detached_inference_view),
    "function_doubles_inference_view": (_function_doubles_detached_input, _inference_view),
    "write_through_view_of_detached": (_write_through_view_of_detached, _detached_inference_view),
    "write_detach_of_view": (_write_detach_of_view, _inference_view),
    "index_put_detached": (_index_put_, _detached_inference_view),
    "index_put_inference_view": (_index_put_, _inference_view),
    "unsqueeze_detached": (_unsqueeze_, _detached_inference_view),
    "unsqueeze_inference_view": (_unsqueeze_, _inference_view),
    "squeeze_keeping_shape": (_squeeze_keeping_shape, _inference_view),
    "set_onto_inference_then_written": (_set_onto_inference_then_written, _inference_and_plain),
    "out_into_detach": (_out_into_detach, _inference_view),
    "view_requires_grad_": (_view_requires_grad_, _inference_view),
    "detach_requires_grad_": (_detach_requires_grad_, _detached_inference_view),
    "input_requires_grad_": (_input_requires_grad_, _inference_view),
}

# Classes not fixed yet, strict so that a fix shows.
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(CASES, KNOWN_WRONG))
def test_mode_class(name: str, mode: str) -> None:
    check_in_mode(*CASES[name], mode)


def _input_requires_grad_then_summed(a0):
    a0.requires_grad_()
    return (a0.sum(),)


def _plain_square():
    return (_randn(2, 2),)


def _square_at_offset():
    return (torch.arange(11.0)[3:7].view(2, 2),)


def test_requires_grad_on_input_at_another_offset() -> None:
    # Class 11: the function's requires_grad_() on its input read the input at the offset of the first call.
    compiled = check(_input_requires_grad_then_summed, _plain_square)
    check(_input_requires_grad_then_summed, _square_at_offset, compiled_fn=compiled)


def test_out_into_member_made_leaf_called_twice() -> None:
    # Class 45: the second call of one compiled entry, whose members a requires_grad_() of the first call
    # must not leave requiring grad.
    check(_neg_out_then_requires_grad_, _overlapping_strided_plain, calls=2)


def _requires_grad_then_row(a0):
    a0.requires_grad_()
    return (a0.select(0, 0),)


def _column():
    return (_randn(4, 1),)


def _column_view():
    return (_randn(10)[2:6].view(4, 1),)


def test_requires_grad_on_view_input_reused() -> None:
    # Class 53 (class 19 of seed 20): the entry of a plain input was reused for a view, whose views eager's
    # requires_grad_() leaves without grad (the signature now tells views).
    with torch.no_grad():
        compiled = check(_requires_grad_then_row, _column, backward=False)
        check(_requires_grad_then_row, _column_view, compiled_fn=compiled, backward=False)
