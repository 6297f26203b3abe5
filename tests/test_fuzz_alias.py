"""Fuzzer classes of aliasing (seed 20): outputs' storage/_base, views regenerated after a write or a
``set_()``, each as a small program generalising the fuzzer's; eager is the oracle."""

from __future__ import annotations

import pytest
import torch

import aot
from aot.errors import UnsupportedMutationError
from tests.functions import DoublesInPlace, Identity, ViewOf
from tests.oracle import MODES, check_in_mode, mode_params


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _leaf(*shape: int, dtype: torch.dtype = torch.float32):
    return lambda: (torch.randn(*shape, generator=_gen(), dtype=dtype).requires_grad_(),)


# Class 6: a view of another dtype (``.imag``, ``view_as_real``, ``view_as_complex``) of a leaf that set_()
# under no_grad then moves: eager takes the view's history again by replaying its view ops on the leaf (a
# dtype view has a view function), not by strides, which a view of the leaf's dtype cannot express.
def _imag_then_set_onto_itself(a0):
    v0 = a0.imag
    with torch.no_grad():
        a0.set_(a0.detach())
    return (sum(t.real.sum() for t in (a0, v0)),)


def _real_row_then_set_onto_itself(a0):
    v0 = torch.view_as_real(a0)[1]
    with torch.no_grad():
        a0.set_(a0.detach())
    return (a0.imag.sum() + 3 * v0.sum(),)


def _complex_of_real_then_set_onto_clone(a0):
    v0 = torch.view_as_complex(a0)
    with torch.no_grad():
        a0.set_(a0.detach().clone())
    return ((v0 * 2).real.sum() + a0.sum(),)


def _imag_then_set_returned(a0):
    v0 = a0.imag
    with torch.no_grad():
        a0.set_(a0.detach())
    return (a0, v0)


DTYPE_VIEW_OF_MOVED_LEAF = {
    "imag_then_set_onto_itself": (_imag_then_set_onto_itself, _leaf(2, 2, dtype=torch.complex64)),
    "real_row_then_set_onto_itself": (_real_row_then_set_onto_itself, _leaf(3, 2, dtype=torch.complex64)),
    "complex_of_real_then_set_onto_clone": (_complex_of_real_then_set_onto_clone, _leaf(3, 2)),
    "imag_then_set_returned": (_imag_then_set_returned, _leaf(2, 2, dtype=torch.complex64)),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(DTYPE_VIEW_OF_MOVED_LEAF))
def test_dtype_view_of_moved_leaf(name, mode):
    check_in_mode(*DTYPE_VIEW_OF_MOVED_LEAF[name], mode)


# Class 3: set_() of inputs onto each other's memory, where a source is moved itself later: each input ends
# in the memory its source had when its set_() ran, not where the source went after.
def _onto_input_then_source_to_fresh(a0, a1):
    a1.set_(a0)
    with torch.no_grad():
        a0.set_(a1.clone())
    a1.data.add_(1)
    return (a0, a1 * 2)


def _swap_storages(a0, a1):
    old = a1.detach()
    a1.set_(a0.detach())
    a0.set_(old)
    return (a0 + 1, a1)


def _chain_then_source_moves(a0, a1, a2):
    a2.set_(a1.detach())
    a1.set_(a0.detach())
    a0.set_(a0.detach() * 3)
    return (a0, a1, a2)


def _view_before_moves_written_through_data(a0, a1):
    a1.set_(a0)
    v0 = a0.as_strided((2, 2), (2, 1), 0)
    with torch.no_grad():
        a0.set_(a1.clone())
    with torch.set_grad_enabled(False):
        a1.data.add_(1)
    v1 = torch.view_as_complex(v0)
    torch.mul(v1, v1, out=v1.data)
    return (a0, sum(t.real.sum() for t in (a0, a1, v0, v1)))


def _leaf_and_view():
    g = _gen()
    i0 = torch.randn(5, generator=g).requires_grad_()
    i1 = (torch.randn(3, 3, generator=g).requires_grad_() * 1).t()
    return (i0, i1)


def _plain(*shapes):
    return lambda: tuple(torch.randn(*shape, generator=_gen()) for shape in shapes)


SOURCE_MOVED_LATER = {
    "onto_input_then_source_to_fresh": (_onto_input_then_source_to_fresh, _plain((5,), (3, 3))),
    "onto_input_then_source_to_fresh_grad": (_onto_input_then_source_to_fresh, _leaf_and_view),
    "swap_storages": (_swap_storages, _plain((5,), (2, 3))),
    "chain_then_source_moves": (_chain_then_source_moves, _plain((4,), (2, 2), (3,))),
    "view_before_moves_written_through_data": (_view_before_moves_written_through_data, _leaf_and_view),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(SOURCE_MOVED_LATER))
def test_set_source_moved_later(name, mode):
    check_in_mode(*SOURCE_MOVED_LATER[name], mode)


# Class 3 (program 6107 of seed 20): inputs set_() onto one storage the function made (a clone, say): after the
# call they share it, as eager's do, not each a copy of its own.
def _onto_clone_then_other_onto_it(a0, a1):
    a1.set_(a0.clone())
    v0 = DoublesInPlace.apply(a0)
    v1 = a1.detach()
    v0.set_(v1.detach())
    return (a0, sum(t.real.sum() for t in (a0, a1, v0, v1, a1.clone())))


def _both_onto_made_then_written(a0, a1):
    with torch.no_grad():
        a1.set_(a0.detach().clone())
        a0.set_(a1[1:3])
    a1.detach().add_(1)
    return (a1, a0 * 2)


def _both_into_one_made_tensor(a0, a1):
    with torch.no_grad():
        made = torch.zeros(30)
        a0.set_(made[:24].view(4, 6))
        a1.set_(made[6:].view(4, 6))
        made.add_(1)
    return (a0 + a1, a1)


def _overlapping_rows():
    s0 = torch.randn(37, generator=_gen())
    return (s0[0:24].view(4, 6), s0[13:37].view(4, 6))


def _leaves(*shapes):
    return lambda: tuple(torch.randn(*shape, generator=_gen()).requires_grad_() for shape in shapes)


SET_ONTO_ONE_MADE_STORAGE = {
    "onto_clone_then_other_onto_it": (_onto_clone_then_other_onto_it, _overlapping_rows),
    "both_onto_made_then_written": (_both_onto_made_then_written, _plain((4, 6), (4, 6))),
    "both_onto_made_then_written_leaves": (_both_onto_made_then_written, _leaves((4, 6), (4, 6))),
    "both_into_one_made_tensor": (_both_into_one_made_tensor, _overlapping_rows),
    "both_into_one_made_tensor_leaves": (_both_into_one_made_tensor, _leaves((4, 6), (4, 6))),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(SET_ONTO_ONE_MADE_STORAGE))
def test_set_onto_one_made_storage(name, mode):
    check_in_mode(*SET_ONTO_ONE_MADE_STORAGE[name], mode)


# Class 27: an input needing no grad that the function makes a leaf (requires_grad_()) is a leaf of its own in
# eager, not a view of the caller's memory: a view of it (of another dtype too) whose memory is written after a
# set_() takes its history again from that leaf.
def _complex_view_of_made_leaf_then_set(a0):
    a0.requires_grad_()
    v1 = torch.view_as_complex(a0.unflatten(-1, (3, 2)))
    with torch.no_grad():
        a0.set_(a0)
    v1.detach().index_add_(0, torch.tensor([0]), torch.ones_like(v1.detach()[:1]))
    return (sum(t.real.sum() for t in (a0, v1)),)


def _real_view_of_made_leaf_then_set(a0):
    a0.requires_grad_()
    v1 = torch.view_as_real(a0)[:, 1]
    with torch.no_grad():
        a0.set_(a0.detach())
    v1.detach().mul_(2)
    return (v1.sum() + a0.imag.sum(),)


def _view_of_made_leaf_then_set(a0):
    a0.requires_grad_()
    v1 = a0[1:].t()
    with torch.no_grad():
        a0.set_(a0)
    v1.detach().add_(1)
    return (v1 * 3, a0)


MADE_LEAF_VIEWS = {
    "complex_view_of_made_leaf_then_set": (
        _complex_view_of_made_leaf_then_set,
        lambda: (torch.randn(4, 6, generator=_gen()),),
    ),
    "real_view_of_made_leaf_then_set": (
        _real_view_of_made_leaf_then_set,
        lambda: (torch.randn(3, 2, generator=_gen(), dtype=torch.complex64),),
    ),
    "view_of_made_leaf_then_set": (_view_of_made_leaf_then_set, lambda: (torch.randn(3, 2, generator=_gen()),)),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(MADE_LEAF_VIEWS))
def test_view_of_made_leaf_then_set(name, mode):
    check_in_mode(*MADE_LEAF_VIEWS[name], mode)


# Classes 4 and 5: an input that is a view made under no_grad or inference_mode, its history read in grad mode
# before the function writes (or set_()s) it. Eager reads that history before the write, and it has none (no
# edge: no gradient reaches its base); the compiled call's counters move before its Function reads it, which
# autograd refuses for such a view unless told otherwise, and, told otherwise, takes a history again from its
# base. The Function reads a tensor with the history the view had before the call (``meta.versions.as_read``).
def _read_then_written_under_no_grad(a0):
    y = a0 * 2
    with torch.no_grad():
        a0.mul_(2)
    return (y,)


def _read_then_set_under_no_grad(a0):
    y = a0 * 2
    with torch.no_grad():
        a0.set_(a0.detach().clone())
    return (y,)


def _read_then_written_twice(a0):
    y = a0.t() * 2
    z = a0.sum(0)
    with torch.no_grad():
        a0.add_(1)
        a0.mul_(3)
    return (y, z)


def _read_only(a0):
    return (a0 * 2,)


def _written_then_read(a0):
    with torch.no_grad():
        a0.mul_(2)
    return (a0 * 2,)


def _read_in_enable_grad_then_set(a0):
    v3 = a0[..., ::2] * 2
    with torch.enable_grad():
        x = a0 * 2
        with torch.no_grad():
            a0.set_(v3.clone())
    return (x,)


def _made_leaf_as_strided_then_index_fill(a0):
    a0.requires_grad_()
    v0 = a0.as_strided((4,), (1,), 19)
    a0.index_fill_(-1, torch.tensor([0]), 2.0)
    return (v0,)


def _read_then_written_through_detach(a0):
    y = a0 * 2
    a0.detach().mul_(2)
    return (y,)


def _read_view_then_written(a0):
    y = a0[0] * 2
    with torch.no_grad():
        a0.mul_(2)
    return (y,)


def _read_then_restrided(a0):
    y = a0 * 2
    with torch.no_grad():
        a0.t_()
    return (y,)


def _read_by_function_then_written(a0):
    y = Identity.apply(a0) * 2
    with torch.no_grad():
        a0.mul_(2)
    return (y,)


def _read_then_written_and_viewed(a0):
    y = a0 * 2
    with torch.no_grad():
        a0.mul_(2)
        v = a0[0]
    return (y, v, a0)


def _both_read_then_first_written(a0, a1):
    y = a0 * 2 + a1.sum() * 3
    with torch.no_grad():
        a0.mul_(2)
    return (y,)


def _both_read_then_second_written(a0, a1):
    y = a0 * 2 + a1.sum() * 3
    with torch.no_grad():
        a1.mul_(2)
    return (y,)


def _view_made_under(mode):
    def make_args():
        s0 = torch.randn(24, generator=_gen()).requires_grad_()
        with torch.no_grad() if mode == "no_grad" else torch.inference_mode():
            return (s0[3:9].view(2, 3),)

    return make_args


def _non_leaf():
    return ((torch.randn(2, 3, 4, generator=_gen()).requires_grad_() * 1),)


def _views_made_under(mode, second):
    """Two views made without grad of one leaf (the second at ``second``: overlapping the first, apart from it, or
    the leaf itself); a view of one taken in grad mode keeps its creation, and no history reaching the leaf."""

    def make_args():
        s0 = torch.randn(24, generator=_gen()).requires_grad_()
        with torch.no_grad() if mode == "no_grad" else torch.inference_mode():
            first, rows = s0[3:9].view(2, 3), s0[6:12].view(2, 3)
            apart = s0[12:18].view(2, 3)
        if second == "transposed":
            return (first.t(),)
        return (first, {"overlapping": rows, "apart": apart, "base": s0}[second])

    return make_args


VIEWS_MADE_WITHOUT_GRAD = {
    **{
        f"{fn.__name__[1:]}_{made}": (fn, _view_made_under(made))
        for fn in (
            _read_then_written_under_no_grad,
            _read_then_set_under_no_grad,
            _written_then_read,
            _read_in_enable_grad_then_set,
            _read_then_written_twice,
            _read_only,
            _read_then_written_through_detach,
            _read_view_then_written,
            _read_then_restrided,
            _read_by_function_then_written,
            _read_then_written_and_viewed,
        )
        for made in ("no_grad", "inference_mode")
    },
    **{
        f"{fn.__name__[1:]}_{second}_{made}": (fn, _views_made_under(made, second))
        for fn in (_both_read_then_first_written, _both_read_then_second_written)
        for second in ("overlapping", "apart", "base")
        for made in ("no_grad", "inference_mode")
    },
    **{
        f"transposed_read_then_written_{made}": (
            _read_then_written_under_no_grad,
            _views_made_under(made, "transposed"),
        )
        for made in ("no_grad", "inference_mode")
    },
    "made_leaf_as_strided_then_index_fill": (_made_leaf_as_strided_then_index_fill, _non_leaf),
}


@pytest.mark.parametrize(("name", "mode"), mode_params(VIEWS_MADE_WITHOUT_GRAD, {}))
def test_view_made_without_grad_read_before_write(name, mode):
    check_in_mode(*VIEWS_MADE_WITHOUT_GRAD[name], mode)


# The same reads before a write, of a view autograd cannot take again by strides: one of several outputs (a
# record ``unbind``'s second output cannot take again at all: an internal assert) or returned by an
# autograd.Function (whose backward a history taken again by strides skips). Eager's read took its own history.
def _view_made_by(kind):
    def make_args():
        leaf = torch.randn(4, 6, generator=_gen()).requires_grad_()
        if kind == "unbind_second":
            return (leaf.unbind(0)[1],)
        if kind == "unbind_first":
            return (leaf.unbind(0)[0],)
        if kind == "split_second":
            return (leaf.split(2)[1],)
        if kind == "function_view_of_leaf":
            return (ViewOf.apply(leaf),)
        if kind == "function_view_of_non_leaf":
            return (ViewOf.apply(leaf * 1),)
        return (Identity.apply(leaf),)

    return make_args


VIEWS_MADE_BY_SEVERAL_OR_A_FUNCTION = {
    f"{fn.__name__[1:]}_{kind}": (fn, _view_made_by(kind))
    for fn in (
        _read_then_written_under_no_grad,
        _read_then_written_twice,
        _read_view_then_written,
        _read_then_set_under_no_grad,
        _read_then_written_and_viewed,
    )
    for kind in (
        "unbind_second",
        "unbind_first",
        "split_second",
        "function_view_of_leaf",
        "function_view_of_non_leaf",
        "function_returning_its_input",
    )
}


def _unbind_outputs():
    leaf = torch.randn(4, 6, generator=_gen()).requires_grad_()
    return leaf.unbind(0)[1:3]


VIEWS_MADE_BY_SEVERAL_OR_A_FUNCTION.update(
    {
        f"{fn.__name__[1:]}_unbind_outputs": (fn, _unbind_outputs)
        for fn in (_both_read_then_first_written, _both_read_then_second_written)
    }
)


@pytest.mark.parametrize(("name", "mode"), mode_params(VIEWS_MADE_BY_SEVERAL_OR_A_FUNCTION, {}))
def test_view_made_by_several_or_a_function_read_before_write(name, mode):
    check_in_mode(*VIEWS_MADE_BY_SEVERAL_OR_A_FUNCTION[name], mode)


# Class 3 (program 2991 of seed 20): an output the function set_() onto an input's memory after taking views of it.
# Eager's views keep that object as their _base: the replay takes them from the object it makes, then moves it.
def _view_of_detach_then_set(a0):
    v1 = a0.detach()
    v2 = v1[1:]
    v1.set_(a0.detach())
    return (v1, v2)


def _view_of_intermediate_then_set(a0):
    v1 = a0 * 2
    v2 = v1[1:]
    v1.set_(a0.detach())
    return (v1, v2)


def _view_of_detach_then_set_onto_function_output(a0):
    with torch.no_grad():
        v0 = Identity.apply(a0)
    v1 = a0.detach()
    v2 = v1[1:]
    v1.set_(v0.detach())
    return (v1, v2, sum(t.real.sum() for t in (a0, v0, v1, v2)))


def _moved_within_then_viewed(a0):
    v1 = a0.detach()
    v2 = v1[1:]
    v1.set_(a0.detach()[:, 1])
    return (v1[:2], v1, v2)


def _view_of_view_then_moved_twice(a0):
    v1 = a0.detach()
    v2 = v1[1:]
    v1.set_(a0.detach()[0])
    v3 = v1[1:]
    v1.set_(a0.detach()[2])
    return (v2[0], v1, v3)


def _moved_then_written(a0):
    v1 = a0.data
    v2 = v1[1:]
    v1.set_(a0.detach()[0])
    v1.add_(1)
    return (v1, v2, a0 * 2)


def _view_of_hidden_intermediate_then_set(a0):
    v1 = a0 * 2
    v2 = v1[1:]
    v1.set_(a0.detach())
    return (v2,)


def _view_of_hidden_intermediate_then_moved_under_no_grad(a0):
    v1 = a0 * 2
    v2 = v1[1:]
    with torch.no_grad():
        v1.set_(a0.detach()[0])
    return (v2, v1 * 1)


def _made_leaf_viewed_then_moved(a0):
    v1 = a0.detach().requires_grad_()
    v2 = v1[1:]
    with torch.no_grad():
        v1.set_(a0.detach().t())
    return (v1, v2)


VIEWED_THEN_SET = {
    "view_of_detach_then_set": (_view_of_detach_then_set, _leaf(2, 3)),
    "view_of_detach_then_set_onto_function_output": (
        _view_of_detach_then_set_onto_function_output,
        lambda: (torch.randn(2, 8, generator=_gen(), dtype=torch.complex64)[:, 2].detach().requires_grad_(),),
    ),
    "moved_within_then_viewed": (_moved_within_then_viewed, _leaf(3, 4)),
    "view_of_view_then_moved_twice": (_view_of_view_then_moved_twice, _plain((3, 4))),
    "moved_then_written": (_moved_then_written, _leaf(3, 4)),
    "made_leaf_viewed_then_moved": (_made_leaf_viewed_then_moved, _plain((3, 4))),
    # (Its values were the input's: the graph's final value of the moved intermediate.)
    "view_of_hidden_intermediate_then_set": (_view_of_hidden_intermediate_then_set, _leaf(3, 4)),
    "view_of_hidden_intermediate_then_moved_under_no_grad": (
        _view_of_hidden_intermediate_then_moved_under_no_grad,
        _leaf(3, 4),
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(VIEWED_THEN_SET))
def test_viewed_then_set(name, mode):
    check_in_mode(*VIEWED_THEN_SET[name], mode)


def _viewed_then_set_onto_other_input(a0, a1):
    v1 = a0.detach()
    v2 = v1[1:]
    v1.set_(a1.detach())
    return (v1, v2)


@pytest.mark.parametrize("mode", ["training", "no_grad"])
@pytest.mark.parametrize(
    ("fn", "num_inputs", "moved", "onto"),
    [
        # The set_() onto another input's memory takes no replay from input 0.
        (_viewed_then_set_onto_other_input, 2, 0, "input 1 \\(a1\\)"),
        # The view sits on the memory the graph computed, its base on the input's: no object the replay makes.
        (_view_of_intermediate_then_set, 1, 0, "input 0 \\(a0\\)"),
    ],
)
def test_viewed_then_set_refused(fn, num_inputs, moved, onto, mode):
    """Refused, not returned with another _base (or, before, failing the meta's invariant)."""
    compiled = aot.aot_function(fn, aot.nop)
    args = (torch.randn(3, 4).requires_grad_(), torch.randn(3, 4))[:num_inputs]
    with torch.no_grad() if mode == "no_grad" else torch.enable_grad():
        with pytest.raises(UnsupportedMutationError, match=rf"set_.*output {moved} .*{onto}.*source"):
            compiled(*args)


def test_view_of_intermediate_then_set_in_inference_mode():
    """Under inference mode eager's view has no _base: the graph computes it."""
    check_in_mode(_view_of_intermediate_then_set, _leaf(2, 3), "inference_mode")


@pytest.mark.filterwarnings("ignore")
def test_view_made_under_no_grad_refuses_its_history_after_the_call():
    """Judged as made in grad mode only during the call: after it, a read in grad mode raises as eager's does."""
    compiled = aot.aot_function(_read_then_written_under_no_grad, aot.nop)
    for fn in (_read_then_written_under_no_grad, compiled, compiled):
        (a0,) = _view_made_under("no_grad")()
        fn(a0)
        with pytest.raises(RuntimeError, match="no_grad mode"):
            a0 * 2
