"""Fuzzer class of seed 28 (program 448): an ``as_strided`` view of an input view, at an offset past the input's
own elements, then changed in place in grad mode (``unsqueeze_``), returned (``wrong: grad of autograd leaf``).

Eager's change gives the view the change's node over its history (``UnsqueezeBackward1`` over the
``AsStridedBackward0`` taken relative to the input view, which drops the gradient of elements past the input's)
and leaves the view current at the version the change bumps to. The replay of the returned output took the
change out of place at that version, the view before it stale: autograd took its history again from the base
by strides, and the elements past the input got a gradient. Variants: other in-place changes (``squeeze_``,
``t_``, ``transpose_``, ``as_strided_``), geometries within and past the input's elements, views of views,
plain inputs and views of leaves, returned and summed; in every mode, eager the oracle.
"""

from __future__ import annotations

import pytest
import torch

from tests.oracle import check, check_in_mode, mode_params


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _view_of_product():
    l1 = torch.randn(24, generator=_gen()).requires_grad_()
    return (l1.mul(1)[6:12].view(2, 3),)


def _view_of_leaf():
    l1 = torch.randn(24, generator=_gen()).requires_grad_()
    return (l1[6:12].view(2, 3),)


def _plain_leaf():
    return (torch.randn(24, generator=_gen()).requires_grad_(),)


def _plain_product():
    return (torch.randn(24, generator=_gen()).requires_grad_().mul(2),)


def _past(a0: torch.Tensor) -> int:
    """An offset past ``a0``'s elements for the 2x3 input views (at offset 6 of 24 elements), one within them for
    the plain inputs (24 elements)."""
    return 14 if a0.dim() == 2 else 1


def _unsqueezed(a0):
    v0 = a0.as_strided((2, 2), (2, 1), _past(a0))
    v0.unsqueeze_(0)
    return (v0,)


def _unsqueezed_within(a0):
    v0 = a0.as_strided((2, 2), (2, 1), 7 if a0.dim() == 2 else 3)
    v0.unsqueeze_(0)
    return (v0,)


def _unsqueezed_fuzzed(a0):  # the fuzzer's program
    v0 = a0.as_strided((2, 2), (2, 1), 14)
    v0.unsqueeze_(0)
    v3 = a0.diagonal()
    return (v0, sum(t.real.sum() for t in (a0, v0, v3)))


def _unsqueezed_summed(a0):
    v0 = a0.as_strided((2, 2), (2, 1), _past(a0))
    v0.unsqueeze_(0)
    return (v0.sum() * 2,)


def _squeezed(a0):
    v0 = a0.as_strided((1, 2, 2), (4, 2, 1), _past(a0))
    v0.squeeze_(0)
    return (v0, a0 * 1)


def _transposed_twice(a0):
    v0 = a0.as_strided((2, 2), (1, 2), _past(a0))
    v0.t_()
    v0.transpose_(0, 1)
    return (v0,)


def _restrided(a0):
    v0 = a0.as_strided((2, 2), (2, 1), _past(a0))
    v0.as_strided_((3,), (1,), v0.storage_offset() + 1)
    return (v0,)


def _sliced_then_transposed(a0):
    v0 = a0.as_strided((2, 3), (3, 1), _past(a0))[:, 1:]
    v0.t_()
    return (v0, v0.sum())


def _unsqueezed_view_and_kept(a0):
    # A view taken before the change keeps the old geometry; the changed one is returned with it.
    v0 = a0.as_strided((2, 2), (2, 1), _past(a0))
    w = v0[1]
    v0.unsqueeze_(0)
    return (w, v0)


def _unsqueezed_then_viewed(a0):
    v0 = a0.as_strided((2, 2), (2, 1), _past(a0))
    v0.unsqueeze_(0)
    return (v0[0, 1].sum(), v0.select(2, 0))


def _unsqueezed_then_written(a0):
    # The write makes eager's record stale: the view's history is taken again from the base by strides.
    v0 = a0.as_strided((2, 2), (2, 1), _past(a0))
    v0.unsqueeze_(0)
    v0.mul_(2)
    return (v0.sum(), v0)


def _unsqueezed_then_input_written(a0):
    v0 = a0.as_strided((2, 2), (2, 1), _past(a0))
    v0.unsqueeze_(0)
    a0.add_(1)
    return (v0.sum(), a0 * 1)


def _written_then_unsqueezed(a0):
    # Stale before the change: eager records it over the history taken again from the base by strides.
    v0 = a0.as_strided((2, 2), (2, 1), _past(a0))
    a0.mul_(3)
    v0.unsqueeze_(0)
    return (v0.sum(), v0)


def _changed_view_of_changed_view(a0):
    # The second view's record is relative to the first as it was when taken, whose own record is stale by then.
    v0 = a0.as_strided((3,), (1,), 10 if a0.dim() == 2 else 2)
    v0.unsqueeze_(0)
    w = v0.as_strided((2,), (2,), v0.storage_offset())
    w.unsqueeze_(0)
    return (w.sum() * 2, v0.sum(), w)


def _of_intermediate(a0):
    # A view of an intermediate, past the elements of the view of it it was taken from.
    x = (a0.flatten() * 2)[6:12] if a0.dim() == 2 else (a0 * 2)[6:12]
    v0 = x.as_strided((2, 2), (1, 2), x.storage_offset() + 8)
    v0.t_()
    v0.unsqueeze_(1)
    return (v0, v0.sum(), x)


def _of_slice_of_input(a0):
    x = a0.flatten()[2:]
    v0 = x.as_strided((2, 2), (2, 1), x.storage_offset() + (9 if a0.dim() == 2 else 3))
    v0.transpose_(0, 1)
    return (v0, x, v0 * 3)


def _unsqueezed_under_no_grad(a0):
    v0 = a0.as_strided((2, 2), (2, 1), _past(a0))
    with torch.no_grad():
        v0.unsqueeze_(0)
    return (v0,)


INPUTS = {
    "view_of_product": _view_of_product,
    "view_of_leaf": _view_of_leaf,
    "plain_leaf": _plain_leaf,
    "plain_product": _plain_product,
}
FUNCTIONS = {
    "unsqueezed": _unsqueezed,
    "unsqueezed_within": _unsqueezed_within,
    "unsqueezed_fuzzed": _unsqueezed_fuzzed,
    "unsqueezed_summed": _unsqueezed_summed,
    "squeezed": _squeezed,
    "transposed_twice": _transposed_twice,
    "restrided": _restrided,
    "sliced_then_transposed": _sliced_then_transposed,
    "unsqueezed_view_and_kept": _unsqueezed_view_and_kept,
    "unsqueezed_under_no_grad": _unsqueezed_under_no_grad,
    "unsqueezed_then_viewed": _unsqueezed_then_viewed,
    "unsqueezed_then_written": _unsqueezed_then_written,
    "unsqueezed_then_input_written": _unsqueezed_then_input_written,
    "written_then_unsqueezed": _written_then_unsqueezed,
    "changed_view_of_changed_view": _changed_view_of_changed_view,
    "of_intermediate": _of_intermediate,
    "of_slice_of_input": _of_slice_of_input,
}
PROGRAMS = {f"{fn}-{arg}": (FUNCTIONS[fn], INPUTS[arg]) for fn in FUNCTIONS for arg in INPUTS}
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_changed_strided_view_class(name, mode):
    fn, make_args = PROGRAMS[name]
    check_in_mode(fn, make_args, mode)


def test_changed_strided_view_entry_reused():
    compiled = check(_unsqueezed, _view_of_product)
    check(_unsqueezed, _view_of_product, compiled_fn=compiled)


# Fuzzer class of seed 28 (program 1399): a view taken of an input, then the input's own geometry changed in place
# (a ``squeeze_`` changing nothing bumps its counter: the view's record is stale), then the view changed in grad
# mode by ``as_strided_`` (``wrong: grad of autograd leaf``). Eager takes the view's history again from the input by
# strides, then records ``AsStridedBackward1`` relative to that geometry: elements it does not span (offset 5 of a
# ``[..., ::2]`` view) get no gradient. The trace's stand-in for the view, of an input changed in place, was taken
# from the input's stand-in in the final geometry alone, reaching them.
def _input3_product():
    return (torch.randn(2, 3, 4, generator=_gen()).requires_grad_().mul(1),)


def _input3_leaf():
    return (torch.randn(2, 3, 4, generator=_gen()).requires_grad_(),)


def _input3_view_of_product():
    return (torch.randn(30, generator=_gen()).requires_grad_().mul(1)[6:30].view(2, 3, 4),)


def _input3_ungraded():
    return (torch.randn(2, 3, 4, generator=_gen()),)


def _restrided_after_base(base_change, size, stride, offset, grad=True, take=lambda a: a[..., ::2]):
    def fn(a0):
        v0 = take(a0)
        base_change(a0)
        with torch.set_grad_enabled(grad):
            v0.as_strided_(size, stride, offset)
        return (sum(t.real.sum() for t in (a0, v0)),)

    return fn


def _restrided_after_base_returned(a0):
    v0 = a0[..., ::2]
    a0.squeeze_()
    v0.as_strided_((2, 2), (1, 2), 3)
    return (a0, v0)


def _restrided_twice_after_base(a0):
    v0 = a0[..., ::2]
    a0.squeeze_()
    v0.as_strided_((3, 2), (4, 2), 0)
    v0.as_strided_((2,), (0,), 5)
    return (v0 * 2, a0.sum())


AFTER_BASE_INPUTS = {
    "product": _input3_product,
    "leaf": _input3_leaf,
    "view_of_product": _input3_view_of_product,
    "ungraded": _input3_ungraded,
}
AFTER_BASE_FUNCTIONS = {
    "fuzzed": _restrided_after_base(lambda a: a.squeeze_(), (2,), (0,), 5),
    "stride_1_past": _restrided_after_base(lambda a: a.squeeze_(), (2,), (1,), 5),
    "stride_2_within": _restrided_after_base(lambda a: a.squeeze_(), (3,), (2,), 4),
    "stride_2_odd": _restrided_after_base(lambda a: a.squeeze_(), (3,), (2,), 7),
    "unsqueezed_base": _restrided_after_base(lambda a: a.unsqueeze_(0), (2,), (0,), 5),
    "transposed_base": _restrided_after_base(lambda a: a.transpose_(0, 1), (2, 2), (1, 4), 1),
    "under_no_grad": _restrided_after_base(lambda a: a.squeeze_(), (2,), (0,), 5, grad=False),
    "of_select": _restrided_after_base(lambda a: a.squeeze_(), (2,), (1,), 13, take=lambda a: a[1, :, 1:3]),
    "returned": _restrided_after_base_returned,
    "twice": _restrided_twice_after_base,
}
AFTER_BASE_PROGRAMS = {
    f"{fn}-{arg}": (AFTER_BASE_FUNCTIONS[fn], AFTER_BASE_INPUTS[arg])
    for fn in AFTER_BASE_FUNCTIONS
    for arg in AFTER_BASE_INPUTS
}
AFTER_BASE_KNOWN_WRONG: dict[tuple[str, str], str] = {
    ("under_no_grad-view_of_product", "training"): (
        "as_strided_ under no_grad of a view of an input view to an absolute offset below the input's elements "
        "(5 < 6): eager takes the view's history again from the base by strides, reaching element 5 of the "
        "product; the compiled function's gradient stops at the input's memory (fails without the squeeze_ too)"
    ),
    # Since merged beside the recorded-first route (metadata_mutation._changes_recorded_first, h-rg): a non-leaf
    # input that is no view, restrided in place in grad mode, reaches the layers as one alias per step; the view
    # taken before the change, then as_strided_, is rebuilt on that route without the recorded change.
    **{
        (f"{change}-product", "training"): (
            "a view of a non-leaf input taken before the input's recorded transpose_/unsqueeze_, then as_strided_ "
            "in grad mode: on the recorded-first route its history skips the recorded change (leaf's gradient)"
        )
        for change in ("transposed_base", "unsqueezed_base")
    },
}


@pytest.mark.parametrize(("name", "mode"), mode_params(AFTER_BASE_PROGRAMS, AFTER_BASE_KNOWN_WRONG))
def test_restrided_after_base_changed_class(name, mode):
    fn, make_args = AFTER_BASE_PROGRAMS[name]
    check_in_mode(fn, make_args, mode)
