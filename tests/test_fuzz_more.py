"""Classes the mutation fuzzer found in seed 20, programs 654 to 9,999, outside the other fuzz test files.

One differential test per class: the fuzzer's shrunk program (``benchmarks/fuzz_mutation.py --seed 20``),
run in training, under ``no_grad`` and under ``inference_mode`` against eager with ``tests/oracle.py``.
"""

from __future__ import annotations

import pytest
import torch

from tests.functions import ViewOf
from tests.oracle import MODES, check_in_mode


def _in_mode(mode: str, make):
    """``make`` as the fuzzer calls it: under the caller's mode (an inference tensor under inference_mode)."""

    def made():
        if mode == "inference_mode":
            with torch.inference_mode():
                return make()
        return make()

    return made


def _view_made_to_require_grad(a0):
    # Under inference mode a view of an input needing no grad is a leaf: requires_grad_() on it sticks,
    # whatever the function does to the input afterwards (program 654).
    v0 = a0.as_strided((3,), (0,), 17)
    v0.requires_grad_()
    a0.requires_grad_()
    return (v0,)


def _view_made_to_require_grad_args():
    leaf = torch.randn(18, generator=torch.Generator().manual_seed(0)).requires_grad_()
    return ((leaf * 1)[4:16].view(3, 4),)


@pytest.mark.parametrize("mode", MODES)
def test_requires_grad_on_a_view_before_the_input(mode):
    check_in_mode(_view_made_to_require_grad, _in_mode(mode, _view_made_to_require_grad_args), mode)


def _view_of_moved_input(a0):
    # v0 is taken before set_() moves a0 to other memory: its values stay those of a0's old memory, while
    # its history is taken again from a0 in its new place (program 2341).
    v0 = a0.t()
    a0.set_(v0.clone())
    a0.detach().clamp_(min=-0.5)
    with torch.no_grad():
        a0.masked_fill_(torch.arange(4).view(2, 2) % 2 == 0, 2.0)
    v2 = torch.view_as_complex(v0.unflatten(-1, (1, 2)))
    return (a0, v0 * 1, v2.real * 1, sum(t.real.sum() for t in (a0, v0, v2)))


def _view_of_moved_input_args():
    storage = torch.randn(8, generator=torch.Generator().manual_seed(1))
    return (storage[:4].view(2, 2).permute(1, 0).detach().requires_grad_()[...],)


@pytest.mark.parametrize("mode", MODES)
def test_view_taken_before_set_keeps_its_memory(mode):
    check_in_mode(_view_of_moved_input, _view_of_moved_input_args, mode)


def _no_grad_view_of_function_output(a0):
    # A view taken under no_grad of an autograd.Function's output requires grad with no history: eager's
    # output is a leaf, which takes no tangent in the backward (program 6186).
    v0 = ViewOf.apply(a0)
    with torch.no_grad():
        v2 = v0.view(-1)
    return (v2, a0 * 2)


def _no_grad_view_of_function_output_args():
    leaf = torch.randn(24, generator=torch.Generator().manual_seed(0)).requires_grad_()
    return ((leaf * 1)[6:10],)


@pytest.mark.parametrize("mode", MODES)
def test_view_under_no_grad_of_a_function_output_is_a_leaf(mode):
    check_in_mode(_no_grad_view_of_function_output, _no_grad_view_of_function_output_args, mode)


def _set_onto_input(a0, a1, a2):
    # v1 is a tensor of its own (a clone) set_() onto a1's memory: its views sit on a1's memory, with v1 as
    # their base and v1's version counter, never a1's (program 6253).
    v1 = a2.clone()
    v1.set_(a1)
    a0.detach().sigmoid_()
    v3 = v1.diagonal()
    return (v3, sum(t.real.sum() for t in (a0, a1, a2, v1, v3)))


def _set_onto_input_args():
    g = torch.Generator().manual_seed(0)
    s0 = torch.randn(24, generator=g).requires_grad_()
    s1 = torch.randint(-4, 5, (24,), generator=g)
    s2 = torch.randint(-4, 5, (24,), generator=g)
    return (s0[7:19].view(3, 4)[:, ::2], s1[5:17].view(4, 3).t(), s2[7:12])


@pytest.mark.parametrize("mode", MODES)
def test_views_of_a_tensor_set_onto_an_input(mode):
    check_in_mode(_set_onto_input, _set_onto_input_args, mode)


def _view_taken_after_restride(a0):
    # v0 is taken after a0's geometry changed, and before a0 requires grad: eager's v0 requires grad with no
    # history (a leaf), its record current as it was never written since (program 8755).
    a0.data.unsqueeze_(0)
    with torch.enable_grad():
        a0.t_()
        with torch.no_grad():
            a0.neg_()
    v0 = a0.unfold(0, 2, 1)
    a0.requires_grad_()
    return (v0,)


def _view_taken_after_restride_args():
    return (torch.randn(4, 6, generator=torch.Generator().manual_seed(0)),)


@pytest.mark.parametrize("mode", MODES)
def test_view_taken_after_a_restride_keeps_no_history(mode):
    check_in_mode(_view_taken_after_restride, _in_mode(mode, _view_taken_after_restride_args), mode)


def _view_of_another_dtype_of_moved_input(a0, a1):
    # v0, a float view of complex a1, is taken before set_() moves a1: it keeps a1's old memory, and no
    # as_strided of the moved leaf stands for it (program 3465).
    v0 = a1.imag
    with torch.no_grad():
        a1.set_(a0)
    v2 = a1 * 2
    return (sum(t.real.sum() for t in (a0, a1, v0, v2)),)


def _view_of_another_dtype_of_moved_input_args():
    storage = torch.randn(24, generator=torch.Generator().manual_seed(0), dtype=torch.complex64).requires_grad_()
    return (storage[4:16].view(4, 3).t(), storage[6:16:2])


@pytest.mark.parametrize("mode", MODES)
def test_view_of_another_dtype_taken_before_set(mode):
    check_in_mode(_view_of_another_dtype_of_moved_input, _view_of_another_dtype_of_moved_input_args, mode)
