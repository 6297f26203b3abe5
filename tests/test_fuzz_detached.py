"""Fuzzer classes of seed 22 (programs 2000-4999): an input that is a ``detach()`` (or ``.data``) alias of a view
of a non-leaf requiring grad, sharing storage with another input that is such a view. The alias has no ``_base``
and needs no grad, until the function writes into it, or set_()s it, from a value requiring grad: eager's alias
then requires grad, and so do its views taken before. Run in every mode; eager is the oracle."""

from __future__ import annotations

import pytest
import torch

from tests.functions import DoublesInPlace
from tests.oracle import MODES, check, check_in_mode


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def _blocks(first: slice, second: slice, alias: str = "detach", shape: tuple[int, ...] = (-1,)):
    """Two views of one non-leaf requiring grad; the first given as a ``detach()``/``.data`` alias."""

    def make():
        s0 = _randn(36).requires_grad_() * 1
        a0, a1 = s0[first].view(shape), s0[second].view(shape)
        return (a0.detach() if alias == "detach" else a0.data, a1)

    return make


DISJOINT = _blocks(slice(0, 6), slice(6, 12))
DISJOINT_AFTER = _blocks(slice(6, 12), slice(0, 6))  # the alias after the view needing grad
DISJOINT_DATA = _blocks(slice(0, 6), slice(6, 12), alias="data")
OVERLAPPING = _blocks(slice(0, 6), slice(3, 9))
OVERLAPPING_DATA = _blocks(slice(3, 9), slice(0, 6), alias="data")
SQUARE_BLOCKS = _blocks(slice(12, 24), slice(24, 36), shape=(3, 4))  # the fuzzer's geometry
SQUARE_BLOCKS_DATA = _blocks(slice(12, 24), slice(24, 36), alias="data", shape=(3, 4))
SQUARE_OVERLAPPING = _blocks(slice(12, 24), slice(16, 28), shape=(3, 4))


# Class 8 (program 4665): a view of the alias taken, then the alias written from a value requiring grad. Eager's
# view sees the write and, its base now with a history, requires grad (its own taken again from the base). The
# synthetic-base layer replayed the view before writing back, and, finding it needing no grad where eager's
# output requires it, took a copy of the old values as "made to require grad inside".


def _strided_view_then_alias_multiplied(a0, a1):
    v1 = a0[..., ::2]
    a0.mul_(a1)
    return (v1, sum(t.real.sum() for t in (a0, a1, v1)))


def _view_then_alias_added_to(a0, a1):
    v1 = a0[1:]
    a0.add_(a1 * 2)
    return (v1, a0)


def _view_then_alias_copied_into(a0, a1):
    v1 = a0.unsqueeze(0)
    a0.copy_(a1.exp())
    return (v1 * 1, v1)


def _view_then_alias_part_written(a0, a1):
    v1 = a0[..., ::2]
    a0[..., 1:].add_(a1[..., 1:])
    return (v1, a1 * 1)


def _transposed_then_alias_written_by_function(a0, a1):
    v1 = a0.t()
    a0.add_(a1)
    DoublesInPlace.apply(a0)
    return (v1, a0.sum())


def _two_views_then_alias_written(a0, a1):
    v1, v2 = a0[:2], a0[..., 1:]
    with torch.enable_grad():
        a0.mul_(a1)
    return (v1, v2, v1.sum() + v2.sum())


VIEW_BEFORE_WRITE = {
    "strided_view_then_alias_multiplied": (_strided_view_then_alias_multiplied, DISJOINT),
    "strided_view_then_alias_multiplied_after": (_strided_view_then_alias_multiplied, DISJOINT_AFTER),
    "strided_view_then_alias_multiplied_data": (_strided_view_then_alias_multiplied, DISJOINT_DATA),
    "strided_view_then_alias_multiplied_overlapping": (_strided_view_then_alias_multiplied, OVERLAPPING),
    "view_then_alias_added_to": (_view_then_alias_added_to, DISJOINT),
    "view_then_alias_added_to_overlapping_data": (_view_then_alias_added_to, OVERLAPPING_DATA),
    "view_then_alias_copied_into": (_view_then_alias_copied_into, DISJOINT_AFTER),
    "view_then_alias_copied_into_overlapping": (_view_then_alias_copied_into, OVERLAPPING),
    "view_then_alias_part_written": (_view_then_alias_part_written, SQUARE_BLOCKS),
    "view_then_alias_part_written_after": (_view_then_alias_part_written, DISJOINT_AFTER),
    "transposed_then_alias_written_by_function": (_transposed_then_alias_written_by_function, SQUARE_BLOCKS),
    "two_views_then_alias_written": (_two_views_then_alias_written, SQUARE_BLOCKS_DATA),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(VIEW_BEFORE_WRITE))
def test_view_of_detached_alias_taken_before_write(name, mode):
    check_in_mode(*VIEW_BEFORE_WRITE[name], mode)


# Class 7 (program 3163): the alias set_() onto the other input (or a view of it), in the same storage. Eager
# records the set_() (its source requires grad): the alias requires grad after, with set_'s history, whose
# derivative raises. The set_() kept the storage, so the metadata-mutation layer took it for a geometry change
# (as_strided_), which gives a tensor needing no grad none. So for a view requiring grad set_() there: eager's
# base gets set_'s history, the geometry change's gave a gradient where eager's backward raises.


def _alias_set_onto_other(a0, a1):
    a0.set_(a1)
    return (a0, sum(t.real.sum() for t in (a0, a1)))


def _alias_set_onto_other_gradient_elsewhere(a0, a1):
    a0.set_(a1)
    return (a0, a1 * 2)


def _alias_set_onto_view_of_other(a0, a1):
    a0.set_(a1[1:])
    return (a0.t(), a1.sum())


def _alias_set_onto_other_then_viewed(a0, a1):
    a0.set_(a1)
    v0 = a0[..., ::2]
    return (v0, a0.shape[0] * a1)


def _alias_set_under_no_grad_onto_other(a0, a1):
    with torch.no_grad():
        a0.set_(a1)
    return (a0, a1 * 2)


def _alias_set_in_enable_grad_onto_other(a0, a1):
    with torch.enable_grad():
        a0.set_(a1)
    return (a0, a1 * 2)


def _view_of_alias_then_alias_set_onto_other(a0, a1):
    v0 = a0[1:]
    a0.set_(a1)
    return (v0, a0, a1.sum())


def _alias_set_onto_other_twice(a0, a1):
    a0.set_(a1)
    a0.set_(a1[1:])
    return (a0, a1 * 1)


def _alias_set_onto_other_then_written(a0, a1):
    a0.set_(a1)
    a0.mul_(2)
    return (a0, a1 * 1)


def _other_set_onto_alias(a0, a1):
    a1.set_(a0)
    return (a1, a0 * 1)


def _other_set_onto_alias_then_viewed(a0, a1):
    a1.set_(a0)
    return (a1[1:], a0 * 1)


def _other_set_onto_part_of_itself(a0, a1):
    a1.set_(a1[1:])
    return (a1, a0 * 1)


def _second_as_alias(make):
    def swapped():
        a0, a1 = make()
        return (a1, a0)

    return swapped


SET_ONTO_OTHER = {
    "alias_set_onto_other": (_alias_set_onto_other, SQUARE_BLOCKS),
    "alias_set_onto_other_data": (_alias_set_onto_other, SQUARE_BLOCKS_DATA),
    "alias_set_onto_other_overlapping": (_alias_set_onto_other, SQUARE_OVERLAPPING),
    "alias_set_onto_other_after": (_alias_set_onto_other, DISJOINT_AFTER),
    "alias_set_onto_other_gradient_elsewhere": (_alias_set_onto_other_gradient_elsewhere, DISJOINT),
    "alias_set_onto_view_of_other": (_alias_set_onto_view_of_other, SQUARE_BLOCKS),
    "alias_set_onto_view_of_other_overlapping": (_alias_set_onto_view_of_other, SQUARE_OVERLAPPING),
    "alias_set_onto_other_then_viewed": (_alias_set_onto_other_then_viewed, SQUARE_BLOCKS_DATA),
    "alias_set_under_no_grad_onto_other": (_alias_set_under_no_grad_onto_other, SQUARE_BLOCKS),
    "alias_set_in_enable_grad_onto_other": (_alias_set_in_enable_grad_onto_other, DISJOINT_DATA),
    "view_of_alias_then_alias_set_onto_other": (_view_of_alias_then_alias_set_onto_other, DISJOINT),
    "view_of_alias_then_alias_set_onto_other_overlapping": (_view_of_alias_then_alias_set_onto_other, OVERLAPPING),
    "alias_set_onto_other_twice": (_alias_set_onto_other_twice, DISJOINT_DATA),
    "alias_set_onto_other_then_written": (_alias_set_onto_other_then_written, DISJOINT),
    "other_set_onto_alias": (_other_set_onto_alias, _second_as_alias(DISJOINT)),
    # The alias as set_()'s source, the target a view requiring grad: eager's record gives the target's base set_'s
    # history too, whose derivative raises; a geometry change gave a gradient.
    "view_set_onto_alias": (_other_set_onto_alias, DISJOINT),
    "view_set_onto_alias_overlapping_data": (_other_set_onto_alias, OVERLAPPING_DATA),
    "view_set_onto_alias_then_viewed": (_other_set_onto_alias_then_viewed, DISJOINT),
    "view_set_onto_part_of_itself": (_other_set_onto_part_of_itself, DISJOINT_DATA),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(SET_ONTO_OTHER))
def test_detached_alias_set_onto_other_input(name, mode):
    check_in_mode(*SET_ONTO_OTHER[name], mode)


def test_detached_alias_set_onto_other_input_reusing_compiled():
    """The fuzzer's order: compiled for two views requiring grad, called again with the first a detach() alias."""

    def views():
        s0 = _randn(36).requires_grad_() * 1
        return (s0[12:24].view(3, 4), s0[24:36].view(3, 4))

    def first_detached():
        a0, a1 = views()
        return (a0.detach(), a1)

    compiled = check(_alias_set_onto_other, views)
    check(_alias_set_onto_other, first_detached, compiled_fn=compiled)


# Program 4665 again, once class 8 was fixed: the alias written from a value requiring grad, and memory of the
# other input written where the layers cannot tell which elements (after a change of its geometry, or through an
# ``as_strided`` at an absolute offset). The synthetic-base layer wrote the whole base back through a view of the
# alias reaching past its elements: its backward failed (setStorage out of bounds). The base's copy has no history
# of a write through the alias (a detached view of it inside): eager's alias has one of its own.


def _other_squeezed_alias_written_other_written_unseen(a0, a1):
    a1.squeeze_()
    a0.mul_(a1)
    a1.detach().add_(1)
    return (a0,)


def _alias_written_then_absolute_write_into_it(a0, a1):
    a0.mul_(a1)
    a1.detach().as_strided((2,), (1,), 0).add_(1)
    return (a0, a1 * 1)


def _other_unsqueezed_both_written(a0, a1):
    a1.unsqueeze_(0)
    a0.add_(a1[0])
    a1.mul_(2)
    return (a0, a1)


def _ten(first: slice, second: slice, alias: str = "detach"):
    def make():
        s0 = _randn(12).requires_grad_() * 1
        a0, a1 = s0[first], s0[second]
        return (a0.detach() if alias == "detach" else a0.data, a1)

    return make


WRITTEN_BACK_WHOLE = {
    "other_squeezed_alias_written_other_written_unseen": (
        _other_squeezed_alias_written_other_written_unseen,
        _ten(slice(0, 5), slice(5, 10)),
    ),
    "other_squeezed_alias_written_other_written_unseen_data_after": (
        _other_squeezed_alias_written_other_written_unseen,
        _ten(slice(5, 10), slice(0, 5), alias="data"),
    ),
    "other_squeezed_alias_written_other_written_unseen_overlapping": (
        _other_squeezed_alias_written_other_written_unseen,
        _ten(slice(0, 5), slice(3, 8)),
    ),
    "alias_written_then_absolute_write_into_it": (
        _alias_written_then_absolute_write_into_it,
        _ten(slice(0, 5), slice(5, 10)),
    ),
    "other_unsqueezed_both_written": (_other_unsqueezed_both_written, _ten(slice(0, 5), slice(5, 10))),
    "other_unsqueezed_both_written_data": (
        _other_unsqueezed_both_written,
        _ten(slice(0, 5), slice(5, 10), alias="data"),
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(WRITTEN_BACK_WHOLE))
def test_detached_alias_written_with_base_written_back_whole(name, mode):
    check_in_mode(*WRITTEN_BACK_WHOLE[name], mode)


# Class 7's set_() onto a tensor the function made (another storage), as a variant: eager records it (the source
# requires grad) and the tensor needing no grad requires grad after, with set_'s history; the metadata-mutation
# layer moved the caller's tensor under no_grad, so it needed none. So for any tensor needing no grad there.


def _set_onto_made(a0, a1):
    a0.set_(a1 * 2)
    return (a0, a1 * 1)


def _set_onto_made_then_viewed(a0, a1):
    a0.set_(a1 * 2)
    return (a0[1:], a1.sum())


def _set_onto_made_then_written(a0, a1):
    a0.set_(a1 * 2)
    a0.add_(1)
    return (a0, a1 * 1)


def _needing_no_grad(kind: str):
    def make():
        a0, a1 = DISJOINT()
        if kind == "plain":
            a0 = _randn(6)
        elif kind == "view":
            a0 = _randn(8)[1:7]
        return (a0, a1)

    return make


SET_ONTO_MADE = {
    f"{name}_{kind}": (fn, _needing_no_grad(kind))
    for name, fn in (
        ("set_onto_made", _set_onto_made),
        ("set_onto_made_then_viewed", _set_onto_made_then_viewed),
        ("set_onto_made_then_written", _set_onto_made_then_written),
    )
    for kind in ("alias", "plain", "view")
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(SET_ONTO_MADE))
def test_needing_no_grad_set_onto_made_tensor(name, mode):
    check_in_mode(*SET_ONTO_MADE[name], mode)


# Seed 25, program 420: a ``.data``/``detach()`` alias of an input changed in place (``squeeze_()``, ``t_()``),
# then made a leaf by ``requires_grad_()``. Eager's alias is no view before the change nor after it: a leaf with
# no ``_base``. The recorder marked every step of the object as the one requiring grad, so the replay made the
# alias a leaf before the change, which it then replayed as a view of it.
def _data_squeezed_then_leaf(a0):
    v1 = a0.data
    v1.squeeze_()
    v1.requires_grad_()
    return (v1,)


def _detached_transposed_then_leaf(a0):
    v1 = a0.detach()
    v1.t_()
    v1.requires_grad_()
    return (v1,)


def _data_unsqueezed_twice_then_leaf(a0):
    v1 = a0.data
    v1.unsqueeze_(0)
    v1.unsqueeze_(-1)
    v1.requires_grad_()
    return (v1, v1 * 2)


def _data_leaf_then_squeezed_under_no_grad(a0):
    v1 = a0.data
    v1.requires_grad_()
    with torch.no_grad():
        v1.unsqueeze_(0)
    return (v1,)


def _square(kind: str):
    def make():
        s0 = _randn(3, 3).requires_grad_()
        return ({"transposed": s0.t(), "leaf": s0, "non_leaf": s0 * 1}[kind],)

    return make


CHANGED_THEN_LEAF = {
    f"{fn.__name__[1:]}_{kind}": (fn, _square(kind))
    for fn in (
        _data_squeezed_then_leaf,
        _detached_transposed_then_leaf,
        _data_unsqueezed_twice_then_leaf,
        _data_leaf_then_squeezed_under_no_grad,
    )
    for kind in ("transposed", "leaf", "non_leaf")
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CHANGED_THEN_LEAF))
def test_detached_alias_changed_in_place_then_made_leaf(name, mode):
    check_in_mode(*CHANGED_THEN_LEAF[name], mode)


# Seed 28 program 5964: a view taken of a ``detach()`` (or ``.data``) alias of an input, then the alias's geometry
# changed in place (``squeeze_``, ``unsqueeze_``, ``t_``, ``as_strided_``). Eager's alias is no view, so the view's
# ``_base`` is that very object, changed since. The replay took the change out of place on an alias of the object it
# had made (one with no view of it, as for a change of the caller's own tensor): the view's ``_base`` was another
# tensor than the returned alias. Inputs of either dtype, transposed or not, a view of a leaf or a leaf.
def _view_then_alias_changed(alias, view, change, *, returned=("alias", "view"), then=None):
    def fn(a0):
        v1 = alias(a0)
        v2 = view(v1)
        change(v1)
        if then is not None:
            then(v1)
        outs = {"alias": v1, "view": v2, "input": a0}
        return tuple(outs[name] for name in returned)

    return fn


def _matrix(transposed: bool, leaf: bool, dtype: torch.dtype):
    def make():
        s0 = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=dtype)
        if leaf:
            return ((s0.t() if transposed else s0).detach().requires_grad_(),)
        s0.requires_grad_()
        return (s0.t() if transposed else s0[...],)

    return make


_detach, _data, _t = (lambda t: t.detach()), (lambda t: t.data), (lambda t: t.t())
VIEW_THEN_ALIAS_CHANGED_PROGRAMS = {
    "squeeze": _view_then_alias_changed(_detach, _t, lambda t: t.squeeze_()),
    "unsqueeze_view_first": _view_then_alias_changed(
        _detach, _t, lambda t: t.unsqueeze_(0), returned=("view", "alias")
    ),
    "data_swapdims": _view_then_alias_changed(_data, _t, lambda t: t.swapdims_(0, 1)),
    "t_of_slice": _view_then_alias_changed(_detach, lambda t: t[1:], lambda t: t.t_()),
    "as_strided_of_select": _view_then_alias_changed(_detach, lambda t: t[1], lambda t: t.as_strided_((2, 2), (1, 2))),
    "then_written": _view_then_alias_changed(_detach, _t, lambda t: t.unsqueeze_(0), then=lambda t: t.mul_(2)),
    "then_leaf": _view_then_alias_changed(_detach, _t, lambda t: t.unsqueeze_(0), then=lambda t: t.requires_grad_()),
    "of_intermediate": _view_then_alias_changed(
        lambda t: (t * 2).detach(), _t, lambda t: t.unsqueeze_(0), returned=("view", "alias", "input")
    ),
}
VIEW_THEN_ALIAS_CHANGED = {
    f"{name}_{dtype}_{'transposed' if transposed else 'plain'}_{'leaf' if leaf else 'view'}": (
        fn,
        _matrix(transposed, leaf, getattr(torch, dtype)),
    )
    for name, fn in VIEW_THEN_ALIAS_CHANGED_PROGRAMS.items()
    for dtype in ("float32", "complex64")
    for transposed in (True, False)
    for leaf in (True, False)
    if name == "squeeze" or (dtype, transposed, leaf) in (("complex64", True, False), ("float32", False, True))
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(VIEW_THEN_ALIAS_CHANGED))
def test_view_of_detached_alias_then_alias_changed(name, mode):
    check_in_mode(*VIEW_THEN_ALIAS_CHANGED[name], mode)
