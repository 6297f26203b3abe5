"""Writes through a tensor moved onto an input's memory, and out= onto an input, as the mutation fuzzer found
them broken (seed 21 of ``benchmarks/fuzz_mutation.py``).

A tensor ``set_()`` onto an input, then restrided (``as_strided_``, ``resize_``) to memory outside the input's
elements and written there, writes the caller's storage: the input's memory is written though no element of it
changed (program 439 raised an internal assert). An op writing ``out=`` an input, a view of that input its
argument, returns the input, no view taken from the argument (program 1712 recursed without end). Each case runs
against eager with ``tests/oracle.py`` in training, under ``no_grad`` and under ``inference_mode``."""

from __future__ import annotations

import pytest
import torch

from tests.oracle import MODES, check, check_in_mode, mode_params


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _set_then_restrided_outside(a0, a1):
    # a1 moved onto a0's memory, restrided past a0's twelve elements (the storage holds 36) and written there.
    a1.set_(a0)
    a1.as_strided_((2,), (1,), 17)
    with torch.no_grad():
        a1.index_put_((torch.tensor([0]),), torch.tensor(2j, dtype=torch.complex64))
    return (sum(t.real.sum() for t in (a0, a1)),)


def _view_of_leaf_and_expanded_args():
    # a0 a view of a leaf whose storage reaches past it; a1 an expanded view of another tensor's memory.
    g = _gen()
    s1 = torch.randn(24, generator=g, dtype=torch.complex64).requires_grad_() * 1
    r0 = torch.randn(36, generator=g, dtype=torch.complex64)
    return (r0[:12].view(3, 4).detach().requires_grad_()[...], s1[2:5].expand(2, 3))


def _plain_slice_and_other_args():
    g = _gen()
    r0 = torch.randn(36, generator=g, dtype=torch.complex64)
    return (r0[:12].view(3, 4), torch.randn(2, 3, generator=g, dtype=torch.complex64))


def _set_then_restrided_outside_written_in_grad_mode(a0, a1):
    # The same write recorded by autograd (a0 needs no grad; a1 takes a0's history when moved onto it).
    a1.set_(a0)
    a1.as_strided_((3,), (2,), 14)
    a1.mul_(2)
    return (a0 * 1, a1 * 1)


def _intermediate_set_onto_input(a0):
    # A tensor made by the function, moved onto the input's memory and written outside its elements.
    t = torch.empty(0, dtype=a0.dtype)
    t.set_(a0)
    t.as_strided_((4,), (1,), 20)
    with torch.no_grad():
        t.fill_(3)
    return (a0 + 1,)


def _set_onto_storage_outside(a0, a1):
    # set_() onto the input's storage at an offset past its elements.
    a1.set_(a0.untyped_storage(), 20, (3,), (1,))
    with torch.no_grad():
        a1.fill_(5)
    return (a0 * 1,)


def _intermediate_set_onto_storage_outside(a0):
    t = torch.empty(0)
    t.set_(a0.untyped_storage(), 20, (3,), (2,))
    t.add_(1)
    return (a0 * 1, t * 1)


def _set_then_resized_outside(a0, a1):
    # resize_() within the storage (nothing grown) reaches past a0's elements.
    a1.set_(a0)
    a1.resize_(30)
    a1[25:].fill_(1)
    return (a0 * 1,)


def _real_slice_and_other_args():
    g = _gen()
    return (torch.randn(36, generator=g)[:12].view(3, 4), torch.randn(5, generator=g))


def _plain_slice_args():
    return (torch.randn(36, generator=_gen()).view(6, 6)[:2],)


def _program_439(a0, a1, a2, a3):
    a3.set_(a2)
    with torch.set_grad_enabled(False):
        a1.requires_grad = True
        with torch.enable_grad():
            with torch.no_grad():
                a0.index_add_(0, torch.tensor([0]), torch.ones_like(a0[:1]))
    a3.as_strided_((2,), (1,), 17)
    with torch.no_grad():
        a3.index_put_((torch.tensor([0]),), torch.tensor(2j, dtype=torch.complex64))
    return (sum(t.real.sum() for t in (a0, a1, a2, a3)),)


def _program_439_args():
    g = _gen()
    s0 = torch.randint(-4, 5, (24,), generator=g)
    s1 = torch.randn((), generator=g)
    s2 = torch.randn(24, generator=g, dtype=torch.complex64).requires_grad_() * 1
    return (s0[6:18].view(3, 4)[:, ::2], s1.expand(2), s2[2:14].view(4, 3).t(), s2[2:5].expand(2, 3))


def _program_439_args_again():
    # Input 2 no longer shares input 3's memory: a view of a leaf whose storage reaches past it.
    a = list(_program_439_args())
    r0 = torch.randn(36, generator=_gen(1), dtype=torch.complex64)
    a[2] = r0[:12].view(3, 4).detach().requires_grad_()[...]
    return tuple(a)


def _out_onto_input_from_its_view(a0):
    # out= resizes the input to the view's shape: the result is the input, no view of the argument.
    v0 = a0.as_strided((2,), (2,), 8)
    with torch.set_grad_enabled(False):
        torch.neg(v0, out=a0)
        v0.add_(1)
    return (sum(t.real.sum() for t in (a0, v0)),)


def _out_onto_input_then_transposed(a0):
    # out= of the input's own shape, then its geometry changed and both read.
    v0 = a0.t()
    with torch.no_grad():
        torch.mul(v0, 2, out=a0)
        a0.t_()
        v0.add_(1)
    return (a0 * 1, v0 * 1)


def _out_onto_input_from_view_of_view(a0):
    v0 = a0[1:].as_strided((3,), (1,), 2)
    with torch.no_grad():
        torch.add(v0, 1, out=a0)
    return (a0 + v0,)


def _leaf_args():
    return (torch.randn(3, 4, generator=_gen()).requires_grad_(),)


def _square_leaf_args():
    return (torch.randn(4, 4, generator=_gen()).requires_grad_(),)


CASES = {
    "set_then_restrided_outside": (_set_then_restrided_outside, _view_of_leaf_and_expanded_args),
    "set_then_restrided_outside_of_plain": (_set_then_restrided_outside, _plain_slice_and_other_args),
    "set_then_restrided_outside_in_grad_mode": (
        _set_then_restrided_outside_written_in_grad_mode,
        _plain_slice_and_other_args,
    ),
    "intermediate_set_onto_input": (_intermediate_set_onto_input, _plain_slice_args),
    "set_onto_storage_outside": (_set_onto_storage_outside, _real_slice_and_other_args),
    "intermediate_set_onto_storage_outside": (_intermediate_set_onto_storage_outside, _plain_slice_args),
    "set_then_resized_outside": (_set_then_resized_outside, _real_slice_and_other_args),
    "program_439": (_program_439, _program_439_args),
    "program_439_again": (_program_439, _program_439_args_again),
    "out_onto_input_from_its_view": (_out_onto_input_from_its_view, _leaf_args),
    "out_onto_input_then_transposed": (_out_onto_input_then_transposed, _square_leaf_args),
    "out_onto_input_from_view_of_view": (_out_onto_input_from_view_of_view, _leaf_args),
}
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(CASES, KNOWN_WRONG))
def test_moved_write_class(name: str, mode: str) -> None:
    check_in_mode(*CASES[name], mode)


@pytest.mark.parametrize("mode", MODES)
def test_program_439_reused_without_the_shared_memory(mode: str) -> None:
    # Compiled for inputs 2 and 3 sharing memory, called again with input 2 on a storage of its own.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grad = {"training": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}
        with grad[mode]():
            compiled = check(_program_439, _program_439_args, backward=mode == "training")
            check(_program_439, _program_439_args_again, compiled_fn=compiled, backward=mode == "training")
