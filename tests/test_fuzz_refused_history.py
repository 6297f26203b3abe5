"""Returned views whose history eager refuses (seed 22, class 5, program 2809 and its class).

A view made under ``no_grad`` (or inference mode, or as one of several outputs) of memory requiring grad,
then written or restrided in place: eager returns it, and refuses its history when the caller reads
``grad_fn``/``is_leaf`` or uses it (a RuntimeError). The compiled output must be refused too, not a leaf nor
a view with a fresh history; and neither meta collection nor the trace may read that history themselves.
Eager is the oracle (``tests/oracle.py``), in every mode.
"""

from __future__ import annotations

import pytest
import torch

from tests.functions import WithSign
from tests.oracle import check_in_mode, mode_params


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def _vector_leaf():
    return (_randn(5).requires_grad_(),)


def _matrix_leaf():
    return (_randn(3, 4).requires_grad_(),)


def _view_of_made_leaf_then_squeeze_(a0):
    # Program 2809: a leaf made inside, a view of it, then the leaf restrided (all under the caller's mode).
    v0 = a0.sin()
    v0.requires_grad_()
    v1 = v0.view(-1)
    v0.squeeze_()
    return (v1,)


def _under_no_grad(body):
    def f(a0):
        with torch.no_grad():
            return body(a0)

    f.__name__ = body.__name__
    return f


def _view_of_intermediate_then_t_(a0):
    v0 = a0.sin()
    v0.requires_grad_()
    v1 = v0[1:]
    v0.t_()
    return (v1,)


def _view_of_intermediate_then_written(a0):
    v0 = a0.sin()
    v1 = v0[1:]
    v0.mul_(2)
    return (v1,)


def _view_of_intermediate_then_other_view_written(a0):
    v0 = a0.sin()
    v1 = v0[1:].t()
    v0[0].zero_()
    return (v1, v0)


def _no_grad_view_then_written_in_grad_mode(a0):
    v0 = a0.sin()
    with torch.no_grad():
        v1 = v0[1:]
    v0.mul_(2)
    return (v1, v0)


def _inference_view_then_written(a0):
    v0 = a0.sin()
    with torch.inference_mode():
        v1 = v0[1:]
    with torch.no_grad():
        v0.mul_(2)
    return (v1,)


def _real_view_then_written(a0):
    v0 = torch.view_as_complex(a0.sin().view(3, 2, 2))
    with torch.no_grad():
        v1 = v0.real
        v0.mul_(2)
    return (v1,)


def _input_view_then_input_t_(a0):
    with torch.no_grad():
        v1 = a0[1:]
        a0.t_()
    return (v1,)


def _input_view_then_input_unsqueeze_(a0):
    with torch.no_grad():
        v1 = a0.view(-1)
        a0.unsqueeze_(0)
    return (v1,)


def _view_then_base_set_(a0):
    v0 = a0.sin()
    with torch.no_grad():
        v1 = v0[1:]
        v0.set_(v0.clone())
    return (v1,)


def _view_then_base_as_strided_(a0):
    v0 = a0.sin()
    with torch.no_grad():
        v1 = v0[1:]
        v0.as_strided_((2, 2), (1, 2))
    return (v1, v0)


def _unbound_then_base_written(a0):
    v0 = a0 * 2
    _, v2, _ = v0.unbind(0)
    v0.add_(1)
    return (v2,)


def _split_then_base_written_under_no_grad(a0):
    v0 = a0 * 2
    v1, v2 = v0.split(2, 1)
    with torch.no_grad():
        v0.add_(1)
    return (v2, v1)


def _view_returned_twice_then_written(a0):
    v0 = a0.sin()
    with torch.no_grad():
        v1 = v0[1:]
        v0.mul_(2)
    return (v1, v1, v0)


def _no_grad_block_of_leaf():
    s0 = _randn(16).requires_grad_()
    with torch.no_grad():
        return (s0[2:14].view(3, 4),)


def _input_written(a0):
    # The input itself a view made under no_grad: eager's caller gets it back refused.
    with torch.no_grad():
        a0.mul_(2)
    return (a0, a0[1:])


def _halves_of_leaf():
    s0 = _randn(48).requires_grad_()
    return (s0[0:24].view(2, 3, 4), s0[24:48].view(2, 3, 4))


def _other_half_set_onto_returned(a0, a1):
    # Program 2074: under the caller's no_grad both halves are views made so, sharing a counter the set_() moves:
    # eager's a0 is refused, and is the caller's object still (not a view of it).
    a1.set_(a0.untyped_storage(), a0.storage_offset(), a0.shape, a0.stride())
    return (a0,)


# Not refused: the view was not written after it was made, or was made after the write.
def _no_grad_view_not_written(a0):
    v0 = a0.sin()
    with torch.no_grad():
        v1 = v0[1:]
    return (v1,)


def _no_grad_view_made_after_write(a0):
    v0 = a0.sin()
    with torch.no_grad():
        v0.mul_(2)
        v1 = v0[1:]
    return (v1,)


def _view_made_to_require_grad_then_base_written(a0):
    # Seed 22 program 665 (inference_mode): requires_grad_() on the view keeps eager's requires_grad, refused
    # history or not.
    v0 = a0[..., ::2]
    v0.requires_grad_()
    a0.detach().index_put_((torch.tensor([0]),), torch.tensor(2.0))
    return (v0,)


CASES = {
    "view_of_made_leaf_then_squeeze_": (_view_of_made_leaf_then_squeeze_, _vector_leaf),
    "view_of_made_leaf_then_squeeze_under_no_grad": (_under_no_grad(_view_of_made_leaf_then_squeeze_), _vector_leaf),
    "view_of_intermediate_then_t_": (_under_no_grad(_view_of_intermediate_then_t_), _matrix_leaf),
    "view_of_intermediate_then_written": (_under_no_grad(_view_of_intermediate_then_written), _matrix_leaf),
    "view_of_intermediate_then_other_view_written": (
        _under_no_grad(_view_of_intermediate_then_other_view_written),
        _matrix_leaf,
    ),
    "no_grad_view_then_written_in_grad_mode": (_no_grad_view_then_written_in_grad_mode, _matrix_leaf),
    "inference_view_then_written": (_inference_view_then_written, _matrix_leaf),
    "real_view_then_written": (_real_view_then_written, _matrix_leaf),
    "input_view_then_input_t_": (_input_view_then_input_t_, _matrix_leaf),
    "input_view_then_input_unsqueeze_": (_input_view_then_input_unsqueeze_, _matrix_leaf),
    "view_then_base_set_": (_view_then_base_set_, _matrix_leaf),
    "view_then_base_as_strided_": (_view_then_base_as_strided_, _matrix_leaf),
    "unbound_then_base_written": (_unbound_then_base_written, _matrix_leaf),
    "split_then_base_written_under_no_grad": (_split_then_base_written_under_no_grad, _matrix_leaf),
    "view_returned_twice_then_written": (_view_returned_twice_then_written, _matrix_leaf),
    "no_grad_view_input_written": (_input_written, _no_grad_block_of_leaf),
    "other_half_set_onto_returned": (_other_half_set_onto_returned, _halves_of_leaf),
    "no_grad_view_not_written": (_no_grad_view_not_written, _matrix_leaf),
    "no_grad_view_made_after_write": (_no_grad_view_made_after_write, _matrix_leaf),
    "view_made_to_require_grad_then_base_written": (_view_made_to_require_grad_then_base_written, _matrix_leaf),
}


@pytest.mark.parametrize(("name", "mode"), mode_params(CASES, {}))
def test_refused_history(name: str, mode: str) -> None:
    check_in_mode(*CASES[name], mode)


# Program 153 of seed 25: a view of an input taken under no_grad, the input scattered under no_grad, then an op eager's
# kernel refuses (sign of complex) before the view is read. Eager raises that op's NotImplementedError; the fake
# kernel accepted it, and the trace went on to read the view, raising the stale view's RuntimeError first.
def _stale_view_then_function_sign(a0):
    with torch.no_grad():
        v0 = a0.expand(2, 3, 4)
        a0.scatter_(0, torch.zeros((1, 4), dtype=torch.long), 2j)
    v2, v3 = WithSign.apply(a0)
    return (sum(t.real.sum() for t in (a0, v0, v2, v3)),)


def _stale_view_then_sign(a0):
    with torch.no_grad():
        v0 = a0[1:]
        a0.mul_(2)
    return (a0.sign() + v0.sum(),)


def _stale_view_then_sign_inplace(a0):
    with torch.no_grad():
        v0 = a0.t()
        a0.add_(1j)
    b = a0 * 1
    b.sign_()
    return (b, v0 * 2)


def _complex_leaf_t():
    return (
        (torch.randn(4, 3, dtype=torch.complex64, generator=torch.Generator().manual_seed(0)).requires_grad_() * 1).t(),
    )


SIGN_OF_COMPLEX = {
    "function_sign_expand": (_stale_view_then_function_sign, _complex_leaf_t),
    "sign_slice": (_stale_view_then_sign, _complex_leaf_t),
    "sign_inplace_t": (_stale_view_then_sign_inplace, _complex_leaf_t),
}


@pytest.mark.parametrize(("name", "mode"), mode_params(SIGN_OF_COMPLEX, {}))
def test_refused_kernel_before_stale_view(name: str, mode: str) -> None:
    check_in_mode(*SIGN_OF_COMPLEX[name], mode)
