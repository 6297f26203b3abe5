"""Classes the mutation fuzzer found in seed 20, programs 654 to 9,999, outside the other fuzz test files.

One differential test per class: the fuzzer's shrunk program (``benchmarks/fuzz_mutation.py --seed 20``),
run in training, under ``no_grad`` and under ``inference_mode`` against eager with ``tests/oracle.py``.
"""

from __future__ import annotations

import pytest
import torch

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
