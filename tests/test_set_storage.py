"""``Tensor.set_()`` compiled vs eager: the fuzzer's classes (seed 1), each as its smallest program.

Eager's rules the programs pin down: after ``t.set_(source)`` the tensor ``t`` holds
``source``'s memory and geometry but keeps its own autograd history (none, if it did
not require grad; under grad mode set_'s, which has no derivative: backward raises);
it sits at ``source``'s absolute offset, so a write through it lands there, also
when both share the caller's storage. An input requiring grad that ``set_()`` moves
under no_grad takes eager's later gradients with it: a view's history is taken again
from its base in the new geometry (supported: the function gets the base); a leaf's
gradient takes the new shape (supported: the caller's tensor is moved before the call).
"""

from __future__ import annotations

import pytest
import torch

import aot
from aot.errors import UnsupportedMutationError
from tests.functions import Identity, ScaledBySaved, ViewOf, WithSign
from tests.oracle import MODES, check, check_in_mode


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


# set_ onto another input in the same storage, then a write through it: written back where it sits.
def _set_onto_input_then_write(a0, a1):
    with torch.no_grad():
        a1.set_(a0.detach())
    a1.add_(1)
    return a1, sum(t.real.sum() for t in (a0, a1))


def _overlapping_int_inputs():
    s1 = torch.randint(-4, 5, (24,), generator=_gen())
    return s1[1:13].view(4, 3).t(), s1[2:5]


# set_ onto a clone, then an in-place view op: later reads see the clone in its new geometry.
def _set_onto_clone_then_transpose(a0):
    a0.set_(a0.clone())
    a0.transpose_(0, -1)
    return (sum(t.real.sum() for t in (a0,)),)


# A view whose geometry changed in place, set_ onto a clone.
def _view_restrided_then_set(a0, a1):
    v0 = a0.transpose(0, -1)
    v0.as_strided_((2, 1), (2, 2), 21)
    v0.set_(a1.clone())
    return (sum(t.real.sum() for t in (a0, a1, v0)),)


def _int_views():
    s0 = torch.randint(-4, 5, (3, 8), generator=_gen())
    s1 = torch.randint(-4, 5, (19,), generator=_gen())
    return s0[:, ::2], s1[4:16].view(3, 4)


# A metadata change, then set_ onto another input of the same storage.
def _squeeze_then_set(a0, a1):
    a1.squeeze_()
    a1.set_(a0.detach())
    return (sum(t.real.sum() for t in (a0, a1)),)


def _two_views_of_one_storage(grad: bool):
    def make():
        l0 = torch.randn(19, generator=_gen()).requires_grad_(grad)
        s0 = l0 * 1
        return s0[0:12].view(3, 4), s0[7:19].view(3, 4)

    return make


# An as_strided_ of the input, set_ onto an inference tensor, a write through a detach() of that.
def _as_strided_then_set_onto_inference(a0, a1):
    a1.as_strided_((2, 1), (1, 1), 0)
    a1.set_(a0)
    a0.detach().mul_(a1)
    return ()


def _inference_and_expanded():
    with torch.inference_mode():
        i0 = torch.randn(3, 8, generator=_gen())[:, ::2]
    return i0, torch.randn(1, 4, generator=_gen()).expand(2, 4)


# An intermediate set_ onto the input: no view of it; its history is its own (none under no_grad).
def _intermediate_onto_input(a0):
    v0 = a0 * 2
    v0.set_(a0)
    return (v0,)


# A write, set_ onto another input requiring grad under grad mode (backward raises as eager), then
# a metadata change of a detach() alias.
def _set_under_grad_mode(a0, a1):
    a1.clamp_(min=-0.5)
    a1.set_(a0)
    a0.detach().as_strided_((2,), (1,), 2)
    return (sum(t.real.sum() for t in (a0, a1)),)


def _non_leaf_view_and_plain():
    l0 = torch.randn(12, generator=_gen()).requires_grad_()
    return (l0 * 1)[5:9].view(2, 2), torch.randn(3, 3, generator=_gen()).t()


# A leaf requiring grad squeezed, then (under no_grad) set_ onto a clone of its expansion.
def _leaf_squeezed_then_set(a0):
    with torch.no_grad():
        a0.squeeze_()
    v3 = a0.expand(2, 3, 3)
    with torch.no_grad():
        a0.set_(v3.clone())
    return (sum(t.real.sum() for t in (a0, v3)),)


def _complex_leaf():
    return (torch.randn(3, 8, generator=_gen(), dtype=torch.complex64)[:, 1::3].detach().requires_grad_(),)


# Under no_grad, set_ of an input requiring grad to other memory in the same geometry: gradients of
# its later uses reach the input as before (its history is taken again in the same place).
def _leaf_onto_other_same_geometry(a, b):
    with torch.no_grad():
        a.set_(b)
    return a * 2, (a * b).sum()


def _onto_own_clone_same_geometry(a):
    with torch.no_grad():
        a.set_(a.clone())
    return (a * 3).sum(), a


def _view_onto_other_after_use(a, b):
    y = a * 2
    with torch.no_grad():
        a.set_(b.detach())
    return y + a, a


# A geometry change recorded by autograd, then set_ onto its own detach() (same place): the gradient
# goes through the view's history taken again from its base.
def _as_strided_then_set_onto_own_detach(a0):
    a0.as_strided_((3,), (1,), 2)
    with torch.no_grad():
        a0.set_(a0.detach())
    return (sum(t.real.sum() for t in (a0,)),)


PROGRAMS = {
    "as_strided_then_set_onto_own_detach": (
        _as_strided_then_set_onto_own_detach,
        lambda: (torch.randn(5, generator=_gen()).requires_grad_() * 1,),
    ),
    "leaf_onto_other_same_geometry": (
        _leaf_onto_other_same_geometry,
        lambda: (torch.randn(3, generator=_gen()).requires_grad_(), torch.randn(3, generator=_gen()).requires_grad_()),
    ),
    "leaf_onto_own_clone_same_geometry": (
        _onto_own_clone_same_geometry,
        lambda: (torch.randn(2, 3, generator=_gen()).requires_grad_(),),
    ),
    "non_leaf_onto_own_clone_same_geometry": (
        _onto_own_clone_same_geometry,
        lambda: (torch.randn(2, 3, generator=_gen()).requires_grad_() * 1,),
    ),
    "view_onto_other_after_use": (
        _view_onto_other_after_use,
        lambda: (
            (torch.randn(6, generator=_gen()).requires_grad_() * 1)[0:3],
            torch.randn(3, generator=_gen()).requires_grad_(),
        ),
    ),
    "set_onto_input_then_write": (_set_onto_input_then_write, _overlapping_int_inputs),
    "set_onto_clone_then_transpose": (
        _set_onto_clone_then_transpose,
        lambda: ((torch.randn(24, generator=_gen()).requires_grad_() * 1)[3:6].expand(2, 3),),
    ),
    "view_restrided_then_set": (_view_restrided_then_set, _int_views),
    "squeeze_then_set": (_squeeze_then_set, _two_views_of_one_storage(True)),
    "as_strided_then_set_onto_inference": (_as_strided_then_set_onto_inference, _inference_and_expanded),
    "intermediate_onto_input": (
        _intermediate_onto_input,
        lambda: (torch.randn(2, 2, generator=_gen(), dtype=torch.complex64).requires_grad_(),),
    ),
    "set_under_grad_mode": (_set_under_grad_mode, _non_leaf_view_and_plain),
}
NO_GRAD_ONLY = {"leaf_squeezed_then_set": (_leaf_squeezed_then_set, _complex_leaf)}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_training(name):
    fn, make = PROGRAMS[name]
    check(fn, make)


@pytest.mark.parametrize("name", sorted(PROGRAMS | NO_GRAD_ONLY))
def test_no_grad(name):
    fn, make = (PROGRAMS | NO_GRAD_ONLY)[name]
    with torch.no_grad():
        check(fn, make, backward=False)


# Under no_grad, set_ of a leaf input requiring grad to other memory of another shape: eager's gradients of
# its later uses have the new shape (the caller's tensor is moved before the call, the function differentiates
# it there).
def _leaf_onto_other(a0, a1):
    with torch.no_grad():
        a1.set_(a0.detach())
    return (sum(t.real.sum() for t in (a0, a1)),)


def _view_onto_own_clone(a0):
    with torch.no_grad():
        a0.set_(a0.clone())
    return (a0.sum(),)


MOVED_LEAVES = {
    "leaf_onto_other_input": (
        _leaf_onto_other,
        lambda: (torch.randn(4, 1, generator=_gen()).requires_grad_(), torch.randn(3, 4).requires_grad_()),
    ),
}


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize("name", sorted(MOVED_LEAVES))
def test_moved_leaf_to_new_shape(name, mode):
    check_in_mode(*MOVED_LEAVES[name], mode)


# An input that is a view of a base requiring grad: eager takes its history again from the base in the new
# geometry (at the new storage's offsets); the function gets the base, later uses take stand-ins from it.
def _view_onto_arange(a0):
    with torch.no_grad():
        a0.set_(torch.arange(6.0).view(2, 3))
    return (a0 * a0).sum(), a0.t()


MOVED_VIEWS = {
    "offset_view_onto_own_clone": (
        _view_onto_own_clone,
        lambda: (torch.randn(10, generator=_gen()).requires_grad_()[5:10],),
    ),
    "view_of_non_leaf_onto_arange": (
        _view_onto_arange,
        lambda: ((torch.randn(10, generator=_gen()).requires_grad_() * 1)[5:10],),
    ),
}


@pytest.mark.parametrize("name", sorted(MOVED_VIEWS))
def test_moved_view_follows_its_base(name):
    check(*MOVED_VIEWS[name])


# set_() onto the storage of a tensor the function knows: traced as a set_() onto that tensor, by strides.
def _onto_input_storage(a, b):
    with torch.no_grad():
        a.set_(b.untyped_storage(), 1, (2,), (1,))
    return a * 2, b


def _onto_intermediate_storage_grad_mode(a, b):
    c = b * 3
    a.set_(c.untyped_storage(), c.storage_offset(), c.shape, c.stride())
    return a, c


def _onto_whole_storage_then_write(a, b):
    c = b[1:] * 3
    a.set_(c.untyped_storage())
    a.add_(1)
    return (a.sum() + b.sum(),)


STORAGE_FORM = {
    "onto_input_storage": (_onto_input_storage, lambda: (torch.zeros(3), torch.arange(4.0))),
    "onto_intermediate_storage_grad_mode": (
        _onto_intermediate_storage_grad_mode,
        lambda: (torch.zeros(3), torch.arange(4.0, requires_grad=True)),
    ),
    "onto_whole_storage_then_write": (
        _onto_whole_storage_then_write,
        lambda: (torch.zeros(3), torch.arange(4.0, requires_grad=True)),
    ),
}


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize("name", sorted(STORAGE_FORM))
def test_set_onto_storage_of_a_tensor(name, mode):
    fn, make = STORAGE_FORM[name]
    if mode == "training":
        check(fn, make)
        return
    with torch.inference_mode() if mode == "inference_mode" else torch.no_grad():
        check(fn, make, backward=False)


def test_set_onto_storage_of_no_tensor_refused():
    """``set_(storage, ...)`` onto a storage the function made itself: a graph has no storage values;
    refused, naming the op, before anything is written."""

    def fn(a):
        with torch.no_grad():
            a.set_(torch.UntypedStorage(16), 0, (2,), (1,))
        return a * 2

    args = (torch.zeros(3),)
    with pytest.raises(UnsupportedMutationError, match="source_Storage"):
        aot.aot_function(fn, aot.nop)(*args)
    assert args[0].shape == (3,) and args[0]._version == 0


# Fuzzer seed 1 (main at 3ca737e): classes still open, each as its shrunk program.
# Strict xfails: they pin the failure so a fix flips them to passing (and must drop the mark).
def _s1_set_onto_clone_of_transpose(a0):  # class 1: real tensor leaks into the fake trace
    v0 = a0.transpose(0, -1)
    v0.set_(a0.clone())
    return (v0,)


def _s1_int_view():
    s1 = torch.randint(-4, 5, (19,), generator=_gen())
    return (s1[4:16].view(3, 4),)


def _s1_requires_grad_then_no_grad_write(a0):  # class 3: requires_grad flag of a non-leaf
    a0.requires_grad = True
    with torch.no_grad():
        a0.index_add_(0, torch.tensor([0]), torch.ones_like(a0[:1]))
    return ()


def _s1_leaf():
    return (torch.randn(2, 2, generator=_gen()).requires_grad_(),)


# class 10 (was: Dimension out of range): a view taken before its base's set_() is taken again from the
# base by strides, as eager takes it.
def _s1_set_onto_detached_input(a0, a1):
    v2 = a1.diagonal()
    a1.set_(a0.detach())
    return (sum(t.real.sum() for t in (a0, a1, v2)),)


def _s1_strided_and_non_leaf():
    g = _gen()
    s0 = torch.randn(24, generator=g)
    s1 = torch.randn(2, 2, generator=g).requires_grad_()
    return s0[1:13].view(3, 4)[:, 3], s1 * 1


def _s1_requires_grad_on_view(a0):  # class 11: new_fn INTERNAL ASSERT
    a0.requires_grad = True
    v1 = a0.unfold(0, 2, 1)
    v2 = a0 @ a0.mT
    a0.detach().zero_()
    return (sum(t.real.sum() for t in (a0, v1, v2)),)


def _s1_strided_view():
    s1 = torch.randn(24, generator=_gen())
    return (s1[6:18].view(3, 4)[:, ::2],)


S1_OPEN = {
    "set_onto_detached_input": (_s1_set_onto_detached_input, _s1_strided_and_non_leaf),
    "requires_grad_on_view": (_s1_requires_grad_on_view, _s1_strided_view),
}


@pytest.mark.parametrize("name", sorted(S1_OPEN))
def test_fuzz_s1_open_training(name):
    f, make_args = S1_OPEN[name]
    check(f, make_args)


def test_fuzz_s1_requires_grad_then_no_grad_write():
    """Class 3: ``requires_grad = True`` on a leaf requiring grad is a no-op in eager; the trace's stand-in
    for the leaf (an alias, a view of a synthetic base) is not a leaf, and must not raise either."""
    check(_s1_requires_grad_then_no_grad_write, _s1_leaf)


# Class 1: an output view of an input set_() onto a clone: refused before anything runs (was: a fake leaked
# into the runtime's view replay, after the graph had run).
@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
def test_fuzz_s1_set_view_onto_clone_refused(mode):
    (a0,) = _s1_int_view()
    before = a0.clone()
    compiled = aot.aot_function(_s1_set_onto_clone_of_transpose, lambda gm, _: gm)
    ctx = torch.inference_mode() if mode == "inference_mode" else torch.set_grad_enabled(mode == "training")
    with ctx, pytest.raises(UnsupportedMutationError, match="set"):
        compiled(a0)
    assert torch.equal(a0, before)


# A view of an input taken while set_() had it on other memory, which a later set_() moved it off: eager's view
# keeps that middle memory (and the input as its _base); a replay from the caller's tensor read its final memory.
def _view_between_sets(source: str, write: bool, no_grad: bool):
    def fn(a0, b):
        with torch.no_grad() if no_grad else torch.enable_grad():
            a0.set_({"clone": a0.clone(), "made": torch.ones(5), "input": b}[source])
        v = a0[1:]
        with torch.no_grad() if no_grad else torch.enable_grad():
            a0.set_(torch.zeros(3))
            if write:
                v.add_(1)
        return a0, v

    return fn


VIEW_BETWEEN_SETS = {
    f"{source}{'_write' if write else ''}{'_no_grad' if no_grad else ''}": _view_between_sets(source, write, no_grad)
    for source in ("clone", "made", "input")
    for write in (False, True)
    for no_grad in (False, True)
}
SET_INPUT_KINDS = {
    "leaf": lambda rg: (torch.arange(3.0) + 1).requires_grad_(rg),
    "view": lambda rg: ((torch.arange(4.0) + 1).requires_grad_(rg) * 1)[1:],
    "non_leaf": lambda rg: (torch.arange(3.0) + 1).requires_grad_(rg) * 1,
}


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("kind", sorted(SET_INPUT_KINDS))
@pytest.mark.parametrize("name", sorted(VIEW_BETWEEN_SETS))
def test_view_between_two_sets_is_refused(name, kind, requires_grad, mode):
    fn = VIEW_BETWEEN_SETS[name]
    if kind == "leaf" and requires_grad and not name.endswith("no_grad") and mode == "training":
        pytest.skip("eager refuses set_() on a leaf requiring grad in grad mode")

    def make():
        return [SET_INPUT_KINDS[kind](requires_grad), torch.arange(3.0) + 5]

    try:
        check_in_mode(fn, make, mode)
    except UnsupportedMutationError as error:
        assert "aten.set_" in str(error)
        return
    # Only eager's own error (the compiled call raising the same) may pass the check without the refusal.
    eager_error = None
    with torch.no_grad() if mode == "no_grad" else torch.inference_mode(mode == "inference_mode"):
        try:
            fn(*make())
        except RuntimeError as error:
            eager_error = error
    assert eager_error is not None, "compiled agreed with eager: the refusal is not needed here"


# A view taken before the first set_() sits on the caller's memory: still returned as eager's.
def test_view_before_two_sets_is_kept():
    def fn(a0):
        v = a0[1:]
        with torch.no_grad():
            a0.set_(a0.clone() * 2)
            a0.set_(torch.zeros(3))
        return a0, v

    for mode in ("training", "no_grad", "inference_mode"):
        check_in_mode(fn, lambda: [torch.arange(3.0) + 1], mode)


# A view input requiring grad set_() under no_grad onto a made tensor larger than its base's storage, then viewed:
# eager's history of the view is its base's, taken again by strides (AsStridedBackward0, recorded only). The fakes'
# stand-in for that record (the geometry reaches past the base's storage) counted as an autograd.Function's output,
# so the view was computed by the graph and put back on the caller's tensor by a real as_strided out of its
# storage ('setStorage ... out of bounds'). Taken again after a second set_(), the view is refused as in the
# geometries that fit.
LARGER_VIEWS = {
    "slice": lambda t: t[1:],
    "unsqueeze": lambda t: t.unsqueeze(0),
    "diagonal": lambda t: t[:4].view(2, 2).diagonal(),
    "as_strided": lambda t: t.as_strided((2,), (2,), 1),
}
VIEW_INPUTS = {
    "at_offset": lambda: ((torch.arange(4.0) + 1).requires_grad_() * 1)[1:],
    "at_zero": lambda: ((torch.arange(4.0) + 1).requires_grad_() * 1)[:3],
}


def _moved_onto_larger_then_viewed(view: str, write: bool, second: bool):
    def fn(a0, b):
        with torch.no_grad():
            a0.set_(torch.ones(5) * 3)
        v = LARGER_VIEWS[view](a0)
        with torch.no_grad():
            if second:
                a0.set_(torch.zeros(3))
            if write:
                v.add_(1)
        return a0, v, v * b.sum()

    return fn


@pytest.mark.parametrize("mode", ["training", "no_grad", "inference_mode"])
@pytest.mark.parametrize("write", [False, True])
@pytest.mark.parametrize("kind", sorted(VIEW_INPUTS))
@pytest.mark.parametrize("view", sorted(LARGER_VIEWS))
def test_view_input_moved_onto_larger_then_viewed(view, kind, write, mode):
    check_in_mode(
        _moved_onto_larger_then_viewed(view, write, False), lambda: [VIEW_INPUTS[kind](), torch.arange(3.0)], mode
    )


@pytest.mark.parametrize("view", sorted(LARGER_VIEWS))
def test_view_input_moved_onto_larger_viewed_then_moved_again_is_refused(view):
    fn = _moved_onto_larger_then_viewed(view, False, True)
    with pytest.raises(UnsupportedMutationError, match=r"aten\.set_: output 1"):
        check(fn, lambda: [VIEW_INPUTS["at_offset"](), torch.arange(3.0)])


# A leaf input requiring grad reshaped under no_grad, set_() onto other memory, then taken by an autograd.Function:
# the Function's gradient has the new shape, as eager's accumulator does (the caller's tensor is moved first). Its
# forward runs under no_grad, so no op collection saw told when it took the leaf: an apply before the move (a
# gradient of the old shape) could not be told from one after, and the leaf was left unmoved (the backward raised
# a size mismatch where eager runs). Taken before, after, or both: as eager.
RESHAPES = {"t": lambda a: a.t_(), "as_strided": lambda a: a.as_strided_((6, 4), (1, 6)), "none": lambda a: a}
SOURCES = {
    "clone": lambda a, b: a.clone(),
    "made": lambda a, b: torch.ones(a.shape) * 2,
    "other": lambda a, b: b.detach(),
    "made_6x4": lambda a, b: torch.ones(6, 4) * 2,
}
FUNCTIONS = {
    "identity": lambda a, b: Identity.apply(a) * 2,
    "view_of": lambda a, b: ViewOf.apply(a) * 3,
    "scaled_by_saved": lambda a, b: ScaledBySaved.apply(a, b.detach()),
    "with_sign": lambda a, b: WithSign.apply(a)[0],
    "identity_of_row": lambda a, b: Identity.apply(a[0]) * 2,
}


def _reshaped_moved_function(reshape: str, source: str, function: str, when: str):
    def fn(a0, a1):
        total = a1.sum()
        if when in ("before", "both"):
            total = total + FUNCTIONS[function](a0, a1).sum()
        with torch.no_grad():
            RESHAPES[reshape](a0)
            a0.set_(SOURCES[source](a0, a1))
        if when in ("after", "both"):
            total = total + FUNCTIONS[function](a0, a1).sum()
        return (total,)

    return fn


def _leaf_4x6_and_6x4():
    g = _gen()
    return [torch.randn(4, 6, generator=g).requires_grad_(), torch.randn(6, 4, generator=g).requires_grad_()]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("reshape", "source"),
    [(r, s) for r in sorted(RESHAPES) for s in sorted(SOURCES) if r != "none" or s in ("other", "made_6x4")],
)
def test_leaf_reshaped_moved_then_function(reshape, source, mode):
    check_in_mode(_reshaped_moved_function(reshape, source, "identity", "after"), _leaf_4x6_and_6x4, mode)


# set_() itself reshaping the leaf, after a Function took it in its old shape: refused as after a built-in op (the
# gradients of both shapes reach one accumulator); it was refused where the Function took it after the move too.
@pytest.mark.parametrize("when", ["before", "both"])
@pytest.mark.parametrize("function", ["identity", "identity_of_row"])
def test_leaf_moved_to_new_shape_after_function_is_refused(function, when):
    fn = _reshaped_moved_function("none", "other", function, when)
    with pytest.raises(UnsupportedMutationError, match=r"aten\.set_\.source_Tensor under no_grad moves input 0"):
        check(fn, _leaf_4x6_and_6x4)


@pytest.mark.parametrize("when", ["after", "before", "both"])
@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_leaf_reshaped_moved_function_before_or_after(function, when):
    check_in_mode(_reshaped_moved_function("t", "clone", function, when), _leaf_4x6_and_6x4, "training")
