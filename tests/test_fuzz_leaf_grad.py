"""Fuzzer classes about autograd.Function, ``requires_grad_()``, leaf-variable rules and the gradients of leaves.

One differential test per class, each the shrunk program of ``benchmarks/fuzz_mutation.py`` (seed 3),
against eager with ``tests/oracle.py`` ``check``, in the grad mode the fuzzer found it in.
"""

from __future__ import annotations

import pytest
import torch

from tests.functions import Identity, ViewOf
from tests.oracle import check_in_mode


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


# Class 10: an input unsqueeze_()d in an enable_grad region of an inference_mode call. Eager's inference mode
# skips autograd's kernels whatever the grad mode, so a leaf requiring grad may change in place; the trace
# (outside inference mode, for its version counters) skips them as well.
def _unsqueeze_leaf_under_enable_grad(a0):
    with torch.enable_grad():
        a0.unsqueeze_(0)
    return ()


def _leaf_3x4():
    return (torch.randn(3, 4, generator=_gen()).requires_grad_(),)


# Class 23: an out= op with an argument requiring grad, in an enable_grad region of an inference_mode call.
def _sin_out_under_enable_grad(a0, a1):
    with torch.enable_grad():
        torch.sin(a0, out=a1)
    return ()


def _leaf_and_strided_view():
    g = _gen()
    s0 = torch.randn(10, generator=g)
    s2 = torch.randn(2, 8, generator=g).requires_grad_()
    return (s0[5:9].view(2, 2).detach().requires_grad_(), s2[:, 1::3])


# Seed 5 class 12: a leaf written in an enable_grad region of an inference_mode call: eager records nothing, so
# the compiled call is no training call (which would save inference tensors for a backward).
def _index_put_leaf_under_enable_grad(a0):
    with torch.enable_grad():
        a0.index_put_((torch.tensor([0]),), torch.tensor(2.0))
    return ()


INFERENCE_MODE = {
    "index_put_leaf_under_enable_grad": (_index_put_leaf_under_enable_grad, _leaf_3x4),
    "unsqueeze_leaf_under_enable_grad": (_unsqueeze_leaf_under_enable_grad, _leaf_3x4),
    "sin_out_under_enable_grad": (_sin_out_under_enable_grad, _leaf_and_strided_view),
}


@pytest.mark.parametrize("name", sorted(INFERENCE_MODE))
def test_inference_mode(name: str) -> None:
    check_in_mode(*INFERENCE_MODE[name], "inference_mode")


# Class 19: ``requires_grad = True`` on a leaf already requiring grad (a no-op in eager), whose geometry
# changes later: the trace hands the function an alias of the leaf, on which the setter raised.
def _requires_grad_set_again_then_transposed(a0):
    a0.requires_grad = True
    v0 = a0 * 2
    v1 = v0.select(0, 0)
    with torch.no_grad():
        a0.transpose_(0, -1)
        with torch.enable_grad():
            v1.view(-1)
    return ()


def _leaf_4x1():
    return (torch.randn(4, 1, generator=_gen()).requires_grad_(),)


# Class 2: an as_strided view reaching beyond its input, then an in-place view op through a detach() alias:
# the version counter moves, so eager takes the view's history again by strides from the storage's base,
# and its gradient reaches the storage element outside the input.
def _as_strided_beyond_then_detached_squeeze_(a0):
    v0 = a0.as_strided((1,), (1,), 9)
    a0.detach().squeeze_()
    return (sum(t.real.sum() for t in (a0, v0)),)


def _complex_offset_view():
    s0 = torch.randn(10, generator=_gen(), dtype=torch.complex64).requires_grad_()
    return (s0[4:8].view(2, 2),)


# Class 6: an input written through detach() while nothing required grad, then another input overlapping it
# made to require grad: the write-back into the merged base (a view of that input now) records nothing.
def _detached_write_then_neighbour_requires_grad(a0, a1):
    a0.detach().scatter_(0, torch.zeros((1, 3, 4), dtype=torch.long), 2.0)
    a0.data.squeeze_()
    a1.requires_grad_()
    return ()


def _overlapping_views():
    s0 = torch.randn(50, generator=_gen())
    return (s0[0:24].view(2, 3, 4), s0[13:37].view(2, 3, 4))


# Class 14: a Function's returned input resized by an out= write under no_grad, then used in grad mode: eager
# refuses to take such a view's history again; so does the trace's stand-in for the changed view.
def _function_output_resized_by_out(a0, a1):
    v1 = Identity.apply(a1)
    with torch.no_grad():
        torch.sin(a0, out=v1)
    return (sum(t.real.sum() for t in (a0, a1, v1)),)


def _leaf_view_and_leaf():
    g = _gen()
    i0 = torch.randn(8, generator=g)[2:6].view(2, 2).detach().requires_grad_()
    return (i0, torch.randn(5, generator=g).requires_grad_())


# Class 18: a Function applied to an input after the function's requires_grad_() on it: the trace hands the
# Function (as every op) the view of the input standing for it, so the output has the input's history.
def _function_after_requires_grad_(a0):
    a0.requires_grad_()
    return (ViewOf.apply(a0),)


def _strided_offset_view():
    return (torch.randn(24, generator=_gen())[2:8],)


TRAINING = {
    "function_after_requires_grad_": (_function_after_requires_grad_, _strided_offset_view),
    "function_output_resized_by_out": (_function_output_resized_by_out, _leaf_view_and_leaf),
    "detached_write_then_neighbour_requires_grad": (
        _detached_write_then_neighbour_requires_grad,
        _overlapping_views,
    ),
    "as_strided_beyond_then_detached_squeeze_": (_as_strided_beyond_then_detached_squeeze_, _complex_offset_view),
    "requires_grad_set_again_then_transposed": (_requires_grad_set_again_then_transposed, _leaf_4x1),
}


@pytest.mark.parametrize("name", sorted(TRAINING))
def test_training(name: str) -> None:
    check_in_mode(*TRAINING[name], "training")
