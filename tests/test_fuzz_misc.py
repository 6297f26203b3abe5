"""Small fuzzer classes of seed 20 (``benchmarks/fuzz_findings.md``): wrong values, shapes, aliasing and
crashes of programs that set_() inputs, or view them, then write memory they once shared; eager is the
oracle (``tests/oracle.py``)."""

from __future__ import annotations

import pytest
import torch

from tests.oracle import MODES, check_in_mode


def _randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=dtype)


# Slice 2, class 5 (program 4922): a view taken of an input after set_() moved it to other memory under no_grad,
# used after a write into the input's old base. Eager takes the view's history again from that base by strides,
# but its values stay the memory it sits in now; the stand-in read the base's memory at the view's geometry.


def _view_after_set_then_base_written(a1, a2):
    with torch.no_grad():
        a1.set_(a2.clone())
    v1 = a1[1:]
    with torch.no_grad():
        a2.fill_(2.0)
    return (v1 * 1,)


def _expanded_after_set_then_base_written(a0, a1, a2):
    with torch.no_grad():
        a0.clamp_(min=-0.5)
    with torch.no_grad():
        a1.set_(a2.clone())
    v0 = a2.unfold(0, 2, 1)
    v1 = a1.expand(2, 3, 4)
    with torch.set_grad_enabled(False):
        a2.fill_(2.0)
    return (sum(t.real.sum() for t in (a0, a1, a2, v0, v1)),)


def _view_after_set_onto_input_then_written(a1, a2):
    with torch.no_grad():
        a1.set_(a2)
    v1 = a1.t()
    with torch.no_grad():
        a2.mul_(2.0)
    return (v1 * 1, a1)


def _three_overlapping_blocks():
    s0 = _randn(26).requires_grad_()
    return (s0[0:12].view(3, 4), s0[7:19].view(3, 4), s0[14:26].view(3, 4))


def _two_overlapping_blocks():
    return _three_overlapping_blocks()[1:]


VIEW_OF_MOVED_INPUT = {
    "view_after_set_then_base_written": (_view_after_set_then_base_written, _two_overlapping_blocks),
    "expanded_after_set_then_base_written": (_expanded_after_set_then_base_written, _three_overlapping_blocks),
    "view_after_set_onto_input_then_written": (_view_after_set_onto_input_then_written, _two_overlapping_blocks),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(VIEW_OF_MOVED_INPUT))
def test_view_of_moved_input_after_base_written(name, mode):
    check_in_mode(*VIEW_OF_MOVED_INPUT[name], mode)
