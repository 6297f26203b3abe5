"""Fuzzer classes in metadata mutations (``t_``, ``as_strided_``, ``out=`` resizes ...), view
regeneration, output aliasing and the inputs' geometry after the call.

One differential test per class, each the fuzzer's shrunk program (``benchmarks/fuzz_mutation.py``,
seed 3, the class number of its report in the comment), run in training, under ``no_grad`` and
under ``inference_mode`` against eager with ``tests/oracle.py`` ``check``.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

from tests.functions import ScaledBySaved
from tests.oracle import MODES, check, check_in_mode, mode_params


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


def _as_strided_of_set_alias(a0):
    # class 12: as_strided_() of a detach() alias set_() onto the input changes the alias's geometry,
    # not the input's: functionalization takes it as a view of the input.
    v0 = a0.detach()
    v0.set_(a0)
    v4 = a0[1:]
    with torch.set_grad_enabled(False):
        v0.as_strided_((2,), (0,), 0)
    return (sum(t.real.sum() for t in (a0, v0, v4)),)


def _expanded_int_args():
    return (torch.randint(-4, 5, (1, 4), generator=torch.Generator().manual_seed(0)).expand(2, 4),)


def _complex_view_of_resized(a0, a1):
    # class 15: a complex view taken before an out= resize of its base under no_grad, read after.
    v0 = torch.view_as_complex(a0.unflatten(-1, (2, 2)))
    v1 = a1.real
    with torch.no_grad():
        torch.clamp(v1, min=0, out=a0)
    return (sum(t.real.sum() for t in (a0, a1, v0, v1)),)


def _complex_view_of_resized_args():
    return (_randn(2, 3, 4, grad=True) * 1, _randn(2, 2, grad=True, dtype=torch.complex64))


def _function_output_set_onto_input(a0):
    # class 9: set_() under no_grad keeps the output's history (the Function's), its memory the input's:
    # the graph computes the history, the epilogue puts it on a tensor set_() onto the caller's input.
    v0 = ScaledBySaved.apply(a0, a0)
    with torch.no_grad():
        v0.set_(a0.detach())
    return (v0,)


def _column_of_leaf():
    s0 = _randn(24, grad=True)
    return (s0[1:13].view(3, 4)[:, 1],)


def _data_alias_set_onto_other_input(a0, a1):
    # class 11: a .data alias of one input set_() onto another of the same storage is returned: it holds
    # the caller's memory (no view), rebuilt on it, not a copy.
    v0 = a1.data
    with torch.no_grad():
        v0.set_(a0)
    v1 = torch.view_as_complex(a0.unflatten(-1, (2, 2)))
    v1.detach().masked_fill_(torch.arange(12).view((2, 3, 2)) % 2 == 0, 2j)
    return (v0,)


def _overlapping_views_of_leaf():
    s0 = _randn(37, grad=True)
    return (s0[0:24].view(2, 3, 4), s0[13:37].view(2, 3, 4))


def _expand_of_restrided_made_leaf(a0):
    # class 17: an input restrided in place, made to require grad, then expanded; a write under no_grad
    # makes the expanded view's history be taken again: from the input's new geometry.
    a0.as_strided_((3,), (2,), 16)
    a0.requires_grad = True
    v0 = a0.expand(2, 3)
    with torch.no_grad():
        a0.fill_(2j)
    return (sum(t.real.sum() for t in (a0, v0)),)


def _complex_view_of_transposed_leaf(a0):
    # seed 3 (after the fixes above): a complex view taken from the input itself is taken again, after
    # the input's transpose_(), by view_as_complex of the input as it is then: eager refuses its strides.
    v0 = torch.view_as_complex(a0)
    with torch.no_grad():
        a0.transpose_(0, -1)
    a0.requires_grad_()
    return (sum(t.real.sum() for t in (a0, v0)),)


# Class 24's kin: a view of an input the function makes a leaf (requires_grad_()), read after the input's memory
# or geometry changed since the view took its history. Eager takes the view's history again from its base when
# read: the input made a leaf (reached, even by a view taken before requires_grad_()), or the base a view input
# has, needing no grad (reached by nothing, even by a view that had a history).
def _view_before_then_written_under_no_grad(a0):
    v0 = a0[::2]
    a0.requires_grad_()
    with torch.no_grad():
        a0.mul_(2)
    return ((v0 * a0[1:2]).sum(),)


def _view_before_unchanged(a0):
    v0 = a0[::2]
    a0.requires_grad_()
    return ((v0 * a0[1:2]).sum(),)


def _view_before_then_view_written(a0):
    v0 = a0[1:]
    a0.requires_grad_()
    with torch.no_grad():
        v0.mul_(2)
    return ((v0 * 3).sum() + a0.sum(),)


def _view_after_then_written_under_no_grad(a0):
    a0.requires_grad_()
    v0 = a0.t()
    with torch.no_grad():
        a0.add_(1)
    return ((v0 * 2).sum() + a0.sum(),)


CASES = {
    "view_before_then_written_under_no_grad": (_view_before_then_written_under_no_grad, lambda: (_randn(4, 3),)),
    "view_before_unchanged": (_view_before_unchanged, lambda: (_randn(4, 3),)),
    "view_before_then_view_written": (_view_before_then_view_written, lambda: (_randn(4, 3),)),
    "view_after_then_written_under_no_grad": (_view_after_then_written_under_no_grad, lambda: (_randn(4, 3),)),
    "view_of_view_input_after_then_written": (
        _view_after_then_written_under_no_grad,
        lambda: (_randn(4, 6)[:, ::2],),
    ),
    "view_of_view_input_before_then_written": (
        _view_before_then_written_under_no_grad,
        lambda: (_randn(8, 3)[1::2],),
    ),
    "clamp_out_of_transpose": (_clamp_out_of_transpose, lambda: (_randn(4, 1),)),
    "as_strided_of_set_alias": (_as_strided_of_set_alias, _expanded_int_args),
    "complex_view_of_resized": (_complex_view_of_resized, _complex_view_of_resized_args),
    "function_output_set_onto_input": (_function_output_set_onto_input, _column_of_leaf),
    "data_alias_set_onto_other_input": (_data_alias_set_onto_other_input, _overlapping_views_of_leaf),
    "expand_of_restrided_made_leaf": (_expand_of_restrided_made_leaf, lambda: (_randn(2, 3, 4, dtype=torch.cfloat),)),
    "complex_view_of_transposed_leaf": (_complex_view_of_transposed_leaf, lambda: (_randn(2, 2, grad=True),)),
    "complex_view_then_t_": (_complex_view_then_t_, lambda: (_randn(4, 6),)),
}
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(CASES, KNOWN_WRONG))
def test_fuzz_class(name: str, mode: str) -> None:
    check_in_mode(*CASES[name], mode)


def _t_(a0):
    a0.t_()
    return ()


def _at_offset():
    with torch.inference_mode(torch.is_inference_mode_enabled()):
        return (_randn(10)[2:6].view(2, 2),)


@pytest.mark.parametrize("mode", MODES)
def test_entry_specialized_on_offsets_reused_at_another(mode: str) -> None:
    """``reuse`` (seed 7): a program specialized on storage offsets (``t_`` of an input is taken again by
    strides), called again at another offset, compiles again: outside inference mode, as every compile."""
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore")
        if mode != "training":
            stack.enter_context(torch.no_grad() if mode == "no_grad" else torch.inference_mode())
        compiled = check(_t_, lambda: (_randn(2, 2),), backward=False)
        check(_t_, _at_offset, compiled_fn=compiled, backward=False)
