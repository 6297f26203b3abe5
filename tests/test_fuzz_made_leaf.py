"""An input needing no grad that the function makes a leaf (``requires_grad_()``, ``requires_grad = True``), whose
``.grad`` the backward then fills (seed 23 of ``benchmarks/fuzz_mutation.py``). Eager is the oracle
(``tests/oracle.py``).

- A view of it taken before, changed in place where autograd recorded nothing (``unsqueeze_``, a write needing
  no grad): eager's record of the view is stale, read after it takes the view's history again from the leaf. The
  compiled function's record moved with the change, its use was none of the leaf's (program 1418).
- A view of a base needing none, overlapping a written input (or at an absolute offset of that storage): the
  synthetic base came from the leaf as a view of that base, whose history autograd took again from the base once
  the write moved the counter; the leaf's gradient came back None (programs 1160 and 1510).
"""

from __future__ import annotations

import pytest
import torch

from tests.functions import DoublesInPlace, Identity, ScaledBySaved
from tests.oracle import MODES, check, check_in_mode


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _total(*tensors: torch.Tensor) -> torch.Tensor:
    return sum(t.real.sum() for t in tensors)  # type: ignore[return-value]


# A view taken before requires_grad_(), changed where autograd recorded nothing.


def _expanded_then_unsqueezed(a0):  # program 1418
    v0 = a0.expand(2, 5)
    v0.unsqueeze_(0)
    a0.requires_grad_()
    return (_total(a0, v0),)


def _expanded_then_unsqueezed_attribute(a0):
    v0 = a0.expand(2, 5)
    v0.unsqueeze_(0)
    a0.requires_grad = True
    return (_total(a0, v0),)


def _sliced_then_transposed(a0):
    v0 = a0[:, 1:]
    v0.transpose_(0, 1)
    a0.requires_grad_()
    return (v0 * 2, a0.sum())


def _transposed_then_written(a0):
    v0 = a0.t()
    v0.mul_(2)
    a0.requires_grad_()
    return (_total(a0, v0 * v0),)


def _unsqueezed_under_no_grad(a0):
    v0 = a0[1:]
    with torch.no_grad():
        v0.unsqueeze_(1)
    a0.requires_grad_()
    return (v0 * 3, a0.sum())


def _unsqueezed_after(a0):
    v0 = a0.expand(2, 5)
    a0.requires_grad_()
    v0.unsqueeze_(0)
    return (_total(a0, v0),)


def _view_taken_after(a0):
    a0.requires_grad_()
    v0 = a0.expand(2, 5)
    v0.unsqueeze_(0)
    return (_total(a0, v0),)


# A view of a base needing no grad, made a leaf, overlapping a written input.


def _function_writes_other_under_no_grad(a0, a1):  # program 1160
    a0.requires_grad_()
    with torch.set_grad_enabled(False):
        v0 = DoublesInPlace.apply(a1)
    return (_total(a0, a1, v0),)


def _function_writes_other(a0, a1):
    a0.requires_grad = True
    v0 = DoublesInPlace.apply(a1)
    return (_total(a0, a1, v0),)


def _other_written_under_no_grad(a0, a1):
    a0.requires_grad_()
    with torch.no_grad():
        a1.mul_(2)
    return (a0 * 2, a1.sum())


def _other_written_before(a0, a1):
    a1.add_(1)
    a0.requires_grad_()
    return (_total(a0 * a0, a1),)


def _other_copied_then_read_absolute(a0, a1):  # program 1510
    a0.requires_grad = True
    a1.copy_(a1)
    v2 = a0.as_strided((4,), (1,), 50)
    return (_total(a0, a1, v2),)


def _base_written(a0, a1):
    a0.requires_grad_()
    with torch.no_grad():
        a1.add_(1)
    return (a0 * 2,)


def _written_by_caller_leaf(a0, a1):
    with torch.no_grad():
        a1.mul_(2)
    return (_total(a0, a1),)


def _overlapping_slices():
    s0 = _randn(24)
    return (s0[5:9], s0[6:11])


def _slice_in_other():
    s0 = _randn(24)
    return (s0[0:24], s0[6:11])


def _overlapping_columns():
    s0 = _randn(4, 6)
    return (s0[:, 1:4], s0[:, 2:5])


def _transposed_and_row():
    s0 = _randn(4, 6)
    return (s0.t()[1:4], s0[1])


def _slice_and_its_base():
    base = _randn(12)
    return (base[2:8], base)


def _blocks_of_one_storage():  # program 1510
    s0 = _randn(72)
    return (s0[0:24].view(2, 3, 4), s0[48:72].view(2, 3, 4))


def _caller_leaf_overlapping():
    s0 = _randn(24)
    return (s0[5:9].requires_grad_(), s0[6:11])


PROGRAMS = {
    "expanded_then_unsqueezed": (_expanded_then_unsqueezed, lambda: (_randn(5),)),
    "expanded_then_unsqueezed_attribute": (_expanded_then_unsqueezed_attribute, lambda: (_randn(5),)),
    "expanded_then_unsqueezed_view_input": (_expanded_then_unsqueezed, lambda: (_randn(8)[2:7],)),
    "sliced_then_transposed": (_sliced_then_transposed, lambda: (_randn(3, 4),)),
    "transposed_then_written": (_transposed_then_written, lambda: (_randn(3, 4),)),
    "unsqueezed_under_no_grad": (_unsqueezed_under_no_grad, lambda: (_randn(5),)),
    "unsqueezed_after": (_unsqueezed_after, lambda: (_randn(5),)),
    "view_taken_after": (_view_taken_after, lambda: (_randn(5),)),
    "function_writes_other_under_no_grad": (_function_writes_other_under_no_grad, _overlapping_slices),
    "function_writes_other_under_no_grad-slice_in_other": (_function_writes_other_under_no_grad, _slice_in_other),
    "function_writes_other": (_function_writes_other, _overlapping_slices),
    "other_written_under_no_grad": (_other_written_under_no_grad, _overlapping_slices),
    "other_written_under_no_grad-columns": (_other_written_under_no_grad, _overlapping_columns),
    "other_written_under_no_grad-transposed": (_other_written_under_no_grad, _transposed_and_row),
    "other_written_before": (_other_written_before, _overlapping_slices),
    "other_written_before-columns": (_other_written_before, _overlapping_columns),
    "other_copied_then_read_absolute": (_other_copied_then_read_absolute, _blocks_of_one_storage),
    "base_written": (_base_written, _slice_and_its_base),
    "written_by_caller_leaf": (_written_by_caller_leaf, _caller_leaf_overlapping),
}


# A view taken of a tensor needing no grad (a detach(), ``.data``, a fresh tensor) before the function made that
# tensor a leaf requiring grad (seed 28 program 6598): eager's view recorded no history then and keeps none, a leaf
# requiring grad through its base; the replay took it of the leaf, recording ExpandBackward0.

_VIEWS = {
    "expand": lambda x: x.expand(2, 3, 3),
    "t": lambda x: x.t(),
    "select": lambda x: x.select(0, 1),
    "slice": lambda x: x[1:],
    "unsqueeze": lambda x: x.unsqueeze(0),
}
_OF = {"detach": lambda a: a.detach(), "data": lambda a: a.data, "fresh": lambda a: torch.zeros(3, 3)}


def _view_before_leaf(of: str, view: str, after: bool, attribute: bool, returns: str):
    def f(a0):
        v0 = _OF[of](a0)
        if after:
            v0.requires_grad_()
        v1 = _VIEWS[view](v0)
        if not after:
            if attribute:
                v0.requires_grad = True
            else:
                v0.requires_grad_()
        return {"view": (v1,), "both": (v1, v0), "used": (v1, (v1 * 2).sum())}[returns]

    return f


def _transposed_leaf():
    return (_randn(3, 3).t().detach().requires_grad_(),)


for _of in _OF:
    for _view in _VIEWS:
        PROGRAMS[f"{_of}_{_view}_before_leaf"] = (_view_before_leaf(_of, _view, False, True, "view"), _transposed_leaf)
    PROGRAMS[f"{_of}_expand_before_leaf_call-both"] = (
        _view_before_leaf(_of, "expand", False, False, "both"),
        lambda: (_randn(3, 3),),
    )
    PROGRAMS[f"{_of}_t_before_leaf-used"] = (_view_before_leaf(_of, "t", False, False, "used"), _transposed_leaf)
    PROGRAMS[f"{_of}_expand_after_leaf"] = (_view_before_leaf(_of, "expand", True, False, "view"), _transposed_leaf)


def _view_of_view_before_leaf(a0):
    v0 = a0.detach()
    v1 = v0.t()
    v0.requires_grad_()
    v2 = v1[1:]
    return (v1, v2, (v2 * 2).sum())


def _unbound_before_leaf(a0):
    v0 = a0.detach()
    v1 = v0.unbind(0)
    v0.requires_grad = True
    return (v1[0], v1[2])


def _used_with_leaf(a0):
    v0 = a0.detach()
    v1 = v0.t()
    v0.requires_grad_()
    return (v1, (v1 * v0).sum())


PROGRAMS["view_of_view_before_leaf"] = (_view_of_view_before_leaf, _transposed_leaf)
PROGRAMS["unbound_before_leaf"] = (_unbound_before_leaf, lambda: (_randn(3, 3),))
PROGRAMS["used_with_leaf"] = (_used_with_leaf, _transposed_leaf)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", PROGRAMS)
def test_made_leaf(name: str, mode: str) -> None:
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)


def test_absolute_offset_then_other_storage() -> None:
    """Program 1510's second call: the same signature on another storage, the written input elsewhere in it."""

    def again():
        a0, _ = _blocks_of_one_storage()
        return (a0, _randn(96, seed=1)[:24].view(2, 3, 4))

    compiled = check(_other_copied_then_read_absolute, _blocks_of_one_storage)
    check(_other_copied_then_read_absolute, again, compiled_fn=compiled)


# Seed 25 program 1461: a view of a base needing none, restrided over a sibling view made to require grad, written,
# then made a leaf, with an autograd.Function in the backward. The trace's record of the edges each node sent a
# gradient along kept only the last run of a node: the stand-ins' gradients, sent on after the first backward through
# their values' histories, ran the synthetic base's clone again with none for the base, so the base counted as
# reached from no output and the runtime cleared the leaf's gradient.


def _restrided_written_then_made_leaf(function, write, restride=True):
    def f(a0, a1, a2):
        a1.requires_grad_()
        if restride:
            a2.as_strided_((4,), (1,), 6)
        write(a2)
        v0 = function.apply(a0 @ a0.mT)
        a2.requires_grad_()
        return (v0, _total(a1, a2, v0))

    return f


def _leaf_and_overlapping_views():
    s0 = _randn(24, seed=1)
    return (_randn(2, 3).t().detach().requires_grad_(), s0[6:18].view(4, 3).t(), s0[7:19].view(3, 4)[:, 3])


def _leaf_and_overlapping_rows():
    s0 = _randn(24, seed=1)
    return (_randn(2, 3).t().detach().requires_grad_(), s0[6:18].view(3, 4), s0[4:16].view(3, 4)[1])


FUNCTION_AFTER_MADE_LEAF_CASES = {
    "identity-zero": (_restrided_written_then_made_leaf(Identity, torch.Tensor.zero_), _leaf_and_overlapping_views),
    "scaled_by_saved-zero": (
        _restrided_written_then_made_leaf(ScaledBySaved, torch.Tensor.zero_),
        _leaf_and_overlapping_views,
    ),
    "identity-mul": (
        _restrided_written_then_made_leaf(Identity, lambda t: t.mul_(2)),
        _leaf_and_overlapping_views,
    ),
    "identity-zero-rows": (
        _restrided_written_then_made_leaf(Identity, torch.Tensor.zero_, restride=False),
        _leaf_and_overlapping_rows,
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", FUNCTION_AFTER_MADE_LEAF_CASES)
def test_function_in_backward_of_made_leaf(name: str, mode: str) -> None:
    check_in_mode(*FUNCTION_AFTER_MADE_LEAF_CASES[name], mode)


# Seed 29 program 1256: another input (a view of a base requiring grad, or a leaf) set_() under no_grad onto an input
# the function makes a leaf, before or after its requires_grad_(). set_() makes it no view of that input: eager
# takes its history again from its own base (or keeps the leaf's), and the made leaf's gradient is its own uses'.
# The compiled function took the moved input for a view of the made leaf, whose gradient got the moved one's uses
# too, and its own base none.
def _set_onto_made_leaf(onto, leaf_first=False):
    def f(a0, a1):
        if leaf_first:
            a1.requires_grad_()
        with torch.no_grad():
            a0.set_(onto(a1))
        a1.requires_grad_()
        return (a0, _total(a0, a1))

    return f


def _set_onto_made_leaf_in_enable_grad(a0, a1):
    with torch.no_grad():
        a0.set_(a1)
    with torch.enable_grad():
        a1.requires_grad_()
        return (a0 * a1).sum()


def _set_onto_made_leaf_views_out(a0, a1):
    with torch.no_grad():
        a0.set_(a1)
    a1.requires_grad_()
    return (a0[1:3], a1[::2], a0.exp().sum())


def _view_of_made_leaf_set_within(a0, a1):
    v = a1[:2]
    with torch.no_grad():
        v.set_(a1[2:4])  # a view of the input set_() onto its memory: eager's history is taken again from it
    a1.requires_grad_()
    return (v, v.sum() * 2 + a0.sum())


def _view_of_grad_base_and_plain():
    s0 = _randn(7).requires_grad_() * 1
    return (s0[1:5].view(2, 2), _randn(5, seed=1))


def _view_of_leaf_and_plain():
    return (_randn(7).requires_grad_()[1:5].view(2, 2), _randn(5, seed=1))


def _leaf_and_plain():
    return (_randn(2, 2).requires_grad_(), _randn(5, seed=1))


def _plain_view_and_plain():
    return (_randn(7)[1:5].view(2, 2), _randn(5, seed=1))


SET_ONTO_MADE_LEAF = {
    f"{how}-{args.__name__[1:]}": (fn, args)
    for how, fn in {
        "onto": _set_onto_made_leaf(lambda t: t),
        "onto_after_leaf": _set_onto_made_leaf(lambda t: t, leaf_first=True),
        "onto_view": _set_onto_made_leaf(lambda t: t[1:4]),
        "onto_then_enable_grad": _set_onto_made_leaf_in_enable_grad,
        "views_out": _set_onto_made_leaf_views_out,
        "view_of_made_leaf": _view_of_made_leaf_set_within,
    }.items()
    for args in (_view_of_grad_base_and_plain, _view_of_leaf_and_plain, _leaf_and_plain, _plain_view_and_plain)
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", SET_ONTO_MADE_LEAF)
def test_set_onto_input_made_leaf(name: str, mode: str) -> None:
    check_in_mode(*SET_ONTO_MADE_LEAF[name], mode)
