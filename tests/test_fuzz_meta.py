"""Fuzzer classes in metadata mutations (``t_``, ``as_strided_``, ``out=`` resizes ...), view
regeneration, output aliasing and the inputs' geometry after the call.

One differential test per class, each the fuzzer's shrunk program (``benchmarks/fuzz_mutation.py``,
seed 3, the class number of its report in the comment), run in training, under ``no_grad`` and
under ``inference_mode`` against eager with ``tests/oracle.py`` ``check``.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.oracle import check


def _randn(*shape: int, grad: bool = False, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    t = torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=dtype)
    return t.requires_grad_() if grad else t


def _clamp_out_of_transpose(a0):
    # class 13: the out= resize to the transposed (1, 4) shape: TensorIterator's layout, a contiguous
    # (4, 1) stride, not the one a tie between the size-1 dimensions gives elsewhere.
    v2 = a0.transpose(0, -1)
    torch.clamp(v2, min=0, out=a0)
    return ()


def _complex_view_then_t_(a0):
    # class 24: a complex view of an input transposed in place, then made to require grad: the view's
    # history is taken again from the transposed input (view_as_complex of its real pairs).
    v0 = torch.view_as_complex(a0.unflatten(-1, (3, 2)))
    a0.t_()
    a0.requires_grad_()
    return (sum(t.real.sum() for t in (a0, v0)),)


CASES = {
    "clamp_out_of_transpose": (_clamp_out_of_transpose, lambda: (_randn(4, 1),)),
    "complex_view_then_t_": (_complex_view_then_t_, lambda: (_randn(4, 6),)),
}
KNOWN_WRONG: dict[tuple[str, str], str] = {}
MODES = ["training", "no_grad", "inference_mode"]


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        pytest.param(name, mode, marks=pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[name, mode]))
        if (name, mode) in KNOWN_WRONG
        else pytest.param(name, mode)
        for name in sorted(CASES)
        for mode in MODES
    ],
)
def test_fuzz_class(name: str, mode: str) -> None:
    fn, make_args = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "training":
            check(fn, make_args, deep=True)
        else:
            with torch.no_grad() if mode == "no_grad" else torch.inference_mode():
                check(fn, make_args, backward=False, deep=True)
