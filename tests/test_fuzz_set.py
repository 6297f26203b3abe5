"""Fuzzer classes of ``set_()`` and ``resize_()`` (seed 3), each as its smallest program; eager is the oracle."""

from __future__ import annotations

import pytest
import torch

from tests.oracle import check


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _run(fn, make, mode):
    if mode == "training":
        check(fn, make)
        return
    with torch.inference_mode() if mode == "inference_mode" else torch.no_grad():
        check(fn, make, backward=False)


# Class 4: under inference_mode autograd is off, so eager resizes an input requiring grad.
def _resize_leaf(a0):
    a0.resize_(23)
    return ()


def _resize_write_resize_as(a0, a1):
    a0.resize_(5)
    a0.mul_(2)
    a1.resize_as_(a0)
    return a0[1:], a1 + 1


def _leaf_and_non_leaf():
    g = _gen()
    return torch.randn(2, 3, generator=g).requires_grad_(), torch.randn(6, generator=g).requires_grad_() * 1


INFERENCE_MODE_ONLY = {
    "resize_leaf_requiring_grad": (_resize_leaf, lambda: (torch.randn(2, 3, 4, generator=_gen()).requires_grad_(),)),
    "resize_write_resize_as": (_resize_write_resize_as, _leaf_and_non_leaf),
}


@pytest.mark.parametrize("name", sorted(INFERENCE_MODE_ONLY))
def test_inference_mode(name):
    _run(*INFERENCE_MODE_ONLY[name], "inference_mode")
