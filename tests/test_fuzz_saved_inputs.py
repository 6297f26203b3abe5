"""Fuzzer classes of seeds 21 and 22 around what an autograd.Function saves (``benchmarks/fuzz_findings.md``):
a saved input its backward writes in place (``tests.functions.ScaledBySaved``), and an inference tensor saved,
which eager refuses; eager is the oracle (``tests/oracle.py``)."""

from __future__ import annotations

import pytest
import torch

import aot
from tests.functions import Identity, ScaledBySaved
from tests.oracle import MODES, check_in_mode, functional_nop


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# Seed 22, class 4 (program 932): an inference tensor saved for backward by a node that records (another input
# requires grad), outside the caller's inference mode. Eager raises at the save; the compiled call raised only
# where its forward graph happened to save that very input (not where the saving op's result is unused, nor where
# the graph saves another value), so the fakes now refuse every such save, as eager does, before anything runs.


def _inference_then_leaf_view() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        i0 = torch.randn(1, 4, generator=g).expand(2, 4)
    s0 = torch.randn(24, generator=g).requires_grad_()
    return (i0, s0[3:15].view(3, 4)[:, ::2])


def _inference_then_non_leaf() -> tuple[torch.Tensor, ...]:
    i0, i1 = _inference_then_leaf_view()
    return (i0, i1 * 1)


def _inference_then_plain() -> tuple[torch.Tensor, ...]:
    i0, i1 = _inference_then_leaf_view()
    return (i0, i1.detach())


def _program_932(a0, a1):
    ScaledBySaved.apply(a1, a0)
    return ()


def _view_of_inference_saved(a0, a1):
    ScaledBySaved.apply(a1, a0[0])
    return (a1 * 2,)


def _inference_saved_by_mul(a0, a1):
    a1 * a0[0, :2]
    return (a0 + 1,)


def _made_in_inference_mode_saved(a0, a1):
    with torch.inference_mode():
        t = a0 * 2
    ScaledBySaved.apply(a1, t)
    return ()


def _written_then_inference_saved(a0, a1):
    a1.mul_(2)
    ScaledBySaved.apply(a1, a0.detach())
    return (a1,)


def _inference_scaled(a0, a1):
    return (ScaledBySaved.apply(a0, a1.detach()),)


INFERENCE_SAVED = {
    "program_932": _program_932,
    "view_of_inference_saved": _view_of_inference_saved,
    "inference_saved_by_mul": _inference_saved_by_mul,
    "made_in_inference_mode_saved": _made_in_inference_mode_saved,
    "written_then_inference_saved": _written_then_inference_saved,
    "inference_scaled": _inference_scaled,
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("make_args", [_inference_then_leaf_view, _inference_then_non_leaf, _inference_then_plain])
@pytest.mark.parametrize("name", sorted(INFERENCE_SAVED))
def test_inference_tensor_saved_for_backward(name, make_args, mode):
    check_in_mode(INFERENCE_SAVED[name], make_args, mode)


def test_inference_save_refused_before_the_call():
    """The refusal is eager's error, raised before anything runs: the caller's tensors are as they were."""
    a0, a1 = _inference_then_non_leaf()
    before = a1.detach().clone()
    compiled = aot.aot_function(_written_then_inference_saved, functional_nop)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        compiled(a0, a1)
    assert torch.equal(a1.detach(), before) and a1._version == 0


# Seed 21, class 3 (program 1483): an input saved by a Function whose backward writes it, merged by the synthetic
# base with another input the function writes. Inside, both are views of one copy of the base; the backward's write
# lands in the copy, and only the written member's elements were copied into the caller's memory, so the elements
# of the saved input outside it kept their old values. All of the copy is the base's new value.


def _non_leaf_and_two_overlapping_views() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    s1 = torch.randn(24, generator=g).requires_grad_() * 1
    s2 = torch.randn(24, generator=g)
    return (s1[3:15].view(4, 3).t(), s2[2:14].view(3, 4)[:, ::2], s2[1:13].view(4, 3).t())


def _non_leaf_and_two_overlapping_blocks() -> tuple[torch.Tensor, ...]:
    s2 = _randn(24, seed=1)
    return (_randn(12).requires_grad_().view(3, 4) * 1, s2[0:12].view(3, 4), s2[6:18].view(3, 4))


def _program_1483(a0, a1, a2):
    a1.fill_(2.0)
    v0 = a0.unfold(0, 2, 1)
    v1 = Identity.apply(a2)
    v2 = a2 * 2
    v1.detach().unsqueeze_(0)
    v3 = ScaledBySaved.apply(a0, a2)
    return (v3, v0, sum(t.real.sum() for t in (a0, a1, a2, v0, v1, v2, v3)))


def _written_member_then_other_saved(a0, a1, a2):
    a1.fill_(2.0)
    return (ScaledBySaved.apply(a0, a2),)


def _view_of_other_member_saved(a0, a1, a2):
    a1.mul_(2)
    return (ScaledBySaved.apply(a0, a2.t()[1:]),)


def _both_members_saved(a0, a1, a2):
    a1.add_(1)
    return (ScaledBySaved.apply(a0, a2) + ScaledBySaved.apply(a0, a1),)


def _other_member_saved_then_written_under_no_grad(a0, a1, a2):
    v = ScaledBySaved.apply(a0, a2)
    with torch.no_grad():
        a1.sub_(1)
    return (v, a1 * 1)


def _written_at_an_absolute_offset_then_other_saved(a0, a1, a2):
    a1.as_strided((2,), (1,), 3).fill_(1.0)
    return (ScaledBySaved.apply(a0, a2),)


def _detached_other_member_saved(a0, a1, a2):
    a1.mul_(3)
    return (ScaledBySaved.apply(a0, a2.detach()),)


MERGED_MEMBER_SAVED = {
    "program_1483": _program_1483,
    "written_member_then_other_saved": _written_member_then_other_saved,
    "view_of_other_member_saved": _view_of_other_member_saved,
    "both_members_saved": _both_members_saved,
    "other_member_saved_then_written_under_no_grad": _other_member_saved_then_written_under_no_grad,
    "written_at_an_absolute_offset_then_other_saved": _written_at_an_absolute_offset_then_other_saved,
    "detached_other_member_saved": _detached_other_member_saved,
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("make_args", [_non_leaf_and_two_overlapping_views, _non_leaf_and_two_overlapping_blocks])
@pytest.mark.parametrize("name", sorted(MERGED_MEMBER_SAVED))
def test_backward_writes_a_merged_input_it_saved(name, make_args, mode):
    check_in_mode(MERGED_MEMBER_SAVED[name], make_args, mode)
