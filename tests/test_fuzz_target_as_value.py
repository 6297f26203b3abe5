"""Fuzzer class of seed 28 (program 4239): an in-place index op whose value is the very tensor it writes
(``a0.index_put_((i,), a0)``), after an in-place geometry change of the input (``unsqueeze_``). Eager's
``assert_no_overlap`` sees one tensor passed twice as a full overlap and raises, whatever its strides; the
trace handed the op a separate stand-in for each argument, which an expanded or strided input makes two
tensors the check cannot judge, so it ran. Each op with a value aliasing its target, on an expanded, a plain
and a strided input, with and without a geometry change first, in each mode; eager is the oracle."""

from __future__ import annotations

import pytest
import torch

from tests.oracle import check_in_mode, mode_params


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _expanded():
    return ((torch.randn(1, 4, generator=_gen()).requires_grad_() * 1).expand(2, 4),)


def _plain():
    return ((torch.randn(2, 4, generator=_gen()).requires_grad_() * 1),)


def _strided():
    return ((torch.randn(2, 8, generator=_gen()).requires_grad_() * 1)[:, ::2],)


def _rows(a0):
    return torch.arange(a0.shape[0]).flip(0)


def _index_put(a0):
    a0.index_put_((_rows(a0),), a0)


def _index_put_accumulate(a0):
    a0.index_put_((_rows(a0),), a0, accumulate=True)


def _index_copy(a0):
    a0.index_copy_(0, _rows(a0), a0)


def _index_add(a0):
    a0.index_add_(0, _rows(a0), a0)


def _put(a0):
    a0.put_(torch.arange(a0.numel()).flip(0), a0)


def _masked_scatter(a0):
    a0.masked_scatter_(torch.ones_like(a0, dtype=torch.bool), a0)


def _setitem(a0):
    a0[_rows(a0)] = a0


OPS = {
    "index_put": _index_put,
    "index_put_accumulate": _index_put_accumulate,
    "index_copy": _index_copy,
    "index_add": _index_add,
    "put": _put,
    "masked_scatter": _masked_scatter,
    "setitem": _setitem,
}
INPUTS = {"expanded": _expanded, "plain": _plain, "strided": _strided}
CHANGES = {
    "": lambda a0: None,
    "unsqueeze_then_": lambda a0: a0.unsqueeze_(0),
    "t_then_": lambda a0: a0.t_(),
    "unsqueeze_under_no_grad_then_": lambda a0: _under_no_grad(a0.unsqueeze_, 0),
}


def _under_no_grad(method, *args):
    with torch.no_grad():
        method(*args)


def _program(change, op):
    def program(a0):
        change(a0)
        op(a0)
        return (a0 * 1,)

    return program


PROGRAMS = {
    f"{change}{op}_{kind}": (_program(CHANGES[change], OPS[op]), INPUTS[kind])
    for change in CHANGES
    for op in OPS
    for kind in INPUTS
}

# Strict xfails: (name, mode) -> why it still differs.
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_value_aliasing_target(name, mode):
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)
