"""Fuzzer classes of storage geometry (seed 20, ``benchmarks/fuzz_findings.md``): ``set_()``, ``resize_()``,
``as_strided_()`` and writes through tensors whose elements share memory. Each class as its smallest
program, run in training, under ``no_grad`` and under ``inference_mode``; eager is the oracle."""

from __future__ import annotations

import pytest
import torch

from tests.oracle import check_in_mode, mode_params


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


# Class 3: set_() under no_grad moves a view of a base requiring grad onto a bigger storage. Eager takes its
# history again from its base by strides, recorded only, reaching past the base's storage (no as_strided runs).
def _set_onto_bigger_storage(a0, a1):
    with torch.no_grad():
        a1.set_(a0.untyped_storage(), a0.storage_offset(), a0.shape, a0.stride())
    return (sum(t.real.sum() for t in (a0, a1)),)


def _strided_view_and_transposed_view():
    g = _gen()
    s0 = torch.randn(3, 8, generator=g).requires_grad_() * 1
    s1 = torch.randn(3, 3, generator=g).requires_grad_() * 1
    return s0[:, 1::3], s1.t()


PROGRAMS = {
    "set_onto_bigger_storage": (_set_onto_bigger_storage, _strided_view_and_transposed_view),
}

# Strict xfails: (name, mode) -> why it still differs.
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_storage_class(name, mode):
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)
