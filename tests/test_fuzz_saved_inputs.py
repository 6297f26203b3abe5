"""Fuzzer classes of seeds 21 and 22 around what an autograd.Function saves (``benchmarks/fuzz_findings.md``):
a saved input its backward writes in place (``tests.functions.ScaledBySaved``), and an inference tensor saved,
which eager refuses; eager is the oracle (``tests/oracle.py``)."""

from __future__ import annotations

import pytest
import torch

import aot
from tests.functions import ScaledBySaved
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
