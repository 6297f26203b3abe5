"""Fuzzer class: an input that is a view (of a base needing no grad), its geometry changed in place where autograd
records nothing (before its ``requires_grad_()``, or under ``no_grad``), then a leaf requiring grad, written around
autograd (``out=`` into ``.detach()``, ``.data``, ``copy_`` under ``no_grad``).

Eager's input is a leaf: its uses after ``requires_grad_()`` reach its ``.grad``. The compiled function got an
old-geometry view of the caller's tensor, whose base is the view's base, not the leaf: once the counter moved (the
epilogue sets eager's final counters before the call) autograd took the view's history again from that base, and
the compiled function's gradient for the input reached nothing (``.grad`` None).

Seed 24 programs 1037 and 829 (shrunk) and variants, checked against eager with ``tests/oracle.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.functions import TriplesGradOutput
from tests.oracle import check_in_mode, mode_params


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _transposed() -> tuple[torch.Tensor]:
    return (torch.randn(3, 3, generator=_gen()).t(),)


def _strided_columns() -> tuple[torch.Tensor]:
    return (torch.randn(3, 8, generator=_gen())[:, ::2],)


def _rows_at_offset() -> tuple[torch.Tensor]:
    return (torch.randn(4, 3, generator=_gen())[1:],)


def _contiguous() -> tuple[torch.Tensor]:
    return (torch.randn(3, 3, generator=_gen()),)


def _leaf_view() -> tuple[torch.Tensor]:
    # A view of a base needing no grad, made a leaf requiring grad by the caller.
    return (torch.randn(3, 3, generator=_gen()).t().requires_grad_(),)


# Seed 24 program 1037 (shrunk): written through an out= into .detach(), restrided, made a leaf, returned.
def _s24_1037(a0):
    torch.add(a0, 1, out=a0.detach())
    a0.as_strided_((1,), (1,), 0)
    a0.requires_grad_()
    return (a0, sum(t.real.sum() for t in (a0,)))


# Seed 24 program 829 (shrunk): .data.t_() (no change to a0), transposed, made a leaf, then written through an out=
# into .detach() that resizes the alias.
def _s24_829(a0):
    a0.data.t_()
    with torch.set_grad_enabled(False):
        v0 = a0.sin()
    a0.t_()
    a0.requires_grad_()
    v1 = v0.sin()
    torch.mul(v1, v1, out=a0.detach())
    return (sum(t.real.sum() for t in (a0, v0, v1)),)


# Geometry changes made before requires_grad_() (where autograd records none).
_CHANGES: dict[str, Callable[[torch.Tensor], Any]] = {
    "t_": lambda a: a.t_(),
    "transpose_": lambda a: a.transpose_(0, 1),
    "swapdims_": lambda a: a.swapdims_(1, 0),
    "unsqueeze_": lambda a: a.unsqueeze_(0),
    "as_strided_shrinks": lambda a: a.as_strided_((2,), (1,), 0),
    "as_strided_at_offset": lambda a: a.as_strided_((2, 2), (1, 2), 1),
}


def _write_out_detach(a: torch.Tensor) -> None:
    torch.add(a, 1, out=a.detach())


def _write_data(a: torch.Tensor) -> None:
    a.data.mul_(2)


def _write_copy_no_grad(a: torch.Tensor) -> None:
    with torch.no_grad():
        a.copy_(a * 3)


def _write_detach_in_place(a: torch.Tensor) -> None:
    a.detach().sub_(0.5)


_WRITES: dict[str, Callable[[torch.Tensor], None]] = {
    "out_detach": _write_out_detach,
    "data": _write_data,
    "copy_no_grad": _write_copy_no_grad,
    "detach_in_place": _write_detach_in_place,
}


def _written_changed_made_leaf(change: Callable[[torch.Tensor], Any], write: Callable[[torch.Tensor], None]) -> Any:
    def f(a0):
        write(a0)
        change(a0)
        a0.requires_grad_()
        return (a0, a0 * 2)

    return f


def _changed_made_leaf_written(change: Callable[[torch.Tensor], Any], write: Callable[[torch.Tensor], None]) -> Any:
    def f(a0):
        change(a0)
        a0.requires_grad_()
        v = a0.cos()
        write(a0)
        return (v, a0.sum())

    return f


def _leaf_written_changed_under_no_grad(
    change: Callable[[torch.Tensor], Any], write: Callable[[torch.Tensor], None]
) -> Any:
    # The caller's leaf: the same stand-in, without requires_grad_() inside.
    def f(a0):
        write(a0)
        with torch.no_grad():
            change(a0)
        return (a0 * 2,)

    return f


def _view_before_made_leaf_returned(
    change: Callable[[torch.Tensor], Any], write: Callable[[torch.Tensor], None]
) -> Any:
    # Seed 24 program 1037 unshrunk: a view taken before requires_grad_() follows the base, which needs no grad.
    def f(a0):
        write(a0)
        v0 = a0[1:]
        change(a0)
        a0.requires_grad_()
        return (v0, a0 * 2)

    return f


def _view_after_made_leaf_returned(change: Callable[[torch.Tensor], Any], write: Callable[[torch.Tensor], None]) -> Any:
    # A view taken after requires_grad_(): its history reaches the leaf (eager's view is one of the leaf's base).
    def f(a0):
        write(a0)
        change(a0)
        a0.requires_grad_()
        v = a0[:1]
        return (v, a0.sum())

    return f


def _view_after_made_leaf_then_written(
    change: Callable[[torch.Tensor], Any], write: Callable[[torch.Tensor], None]
) -> Any:
    # Written after the view: eager takes the view's history again from the base, which needs no grad.
    def f(a0):
        change(a0)
        a0.requires_grad_()
        v = a0[:1]
        w = v * 3
        write(a0)
        return (v, w, a0.sum())

    return f


def _leaf_view_returned_views(change: Callable[[torch.Tensor], Any], write: Callable[[torch.Tensor], None]) -> Any:
    def f(a0):
        write(a0)
        v0 = a0[1:]
        with torch.no_grad():
            change(a0)
        return (v0, a0[:1], a0 * 2)

    return f


# The caller's no_grad: the function's enable_grad region records its uses of the input made a leaf there, whose
# geometry changed (before, or in the region), written or not.
def _enable_grad_region_written(a0):
    with torch.enable_grad():
        a0.data.add_(1)
        a0.t_()
        a0.requires_grad_()
        y = a0 * 2
    return (y,)


def _enable_grad_region_view_before(a0):
    v = a0[1:]
    with torch.enable_grad():
        a0.t_()
        a0.requires_grad_()
        y = a0 * 2
    return (y, v)


def _enable_grad_region_as_strided(a0):
    with torch.enable_grad():
        a0.as_strided_((2,), (1,), 1)
        a0.requires_grad_()
        y = a0 * 2
    return (y, a0)


def _enable_grad_region_written_after(a0):
    with torch.enable_grad():
        a0.detach().add_(1)
        a0.unsqueeze_(0)
        a0.requires_grad_()
        y = a0.sin()
    a0.detach().mul_(2)
    return (y,)


def _made_leaf_before_enable_grad_region(a0):
    a0.t_()
    a0.requires_grad_()
    with torch.enable_grad():
        y = a0 * 2
    return (y, a0 * 3)


def _changed_before_region_view_in_it(a0):
    a0.t_()
    with torch.enable_grad():
        a0.requires_grad_()
        y = a0 * 2
        v = a0[1:]
    return (y, v, a0)


PROGRAMS: dict[str, tuple[Any, Any]] = {
    "s24_1037": (_s24_1037, _transposed),
    "s24_829": (_s24_829, _strided_columns),
}
for _change_name, _change in _CHANGES.items():
    for _write_name, _write in _WRITES.items():
        PROGRAMS[f"written_{_change_name}_made_leaf_{_write_name}"] = (
            _written_changed_made_leaf(_change, _write),
            _transposed,
        )
        PROGRAMS[f"{_change_name}_made_leaf_then_written_{_write_name}"] = (
            _changed_made_leaf_written(_change, _write),
            _rows_at_offset,
        )
        if _write_name != "out_detach":  # (eager refuses an out= op on an input requiring grad)
            PROGRAMS[f"leaf_view_written_{_write_name}_{_change_name}_under_no_grad"] = (
                _leaf_written_changed_under_no_grad(_change, _write),
                _leaf_view,
            )
for _change_name, _change in _CHANGES.items():
    for _write_name, _write in (("out_detach", _write_out_detach), ("data", _write_data)):
        for _kind, _program in (
            ("view_before_made_leaf_returned", _view_before_made_leaf_returned),
            ("view_after_made_leaf_returned", _view_after_made_leaf_returned),
            ("view_after_made_leaf_then_written", _view_after_made_leaf_then_written),
        ):
            PROGRAMS[f"{_kind}_{_change_name}_{_write_name}"] = (_program(_change, _write), _transposed)
    PROGRAMS[f"leaf_view_returned_views_{_change_name}"] = (
        _leaf_view_returned_views(_change, _write_detach_in_place),
        _leaf_view,
    )
for _name, _program in (
    ("enable_grad_region_written", _enable_grad_region_written),
    ("enable_grad_region_view_before", _enable_grad_region_view_before),
    ("enable_grad_region_as_strided", _enable_grad_region_as_strided),
    ("enable_grad_region_written_after", _enable_grad_region_written_after),
    ("made_leaf_before_enable_grad_region", _made_leaf_before_enable_grad_region),
    ("changed_before_region_view_in_it", _changed_before_region_view_in_it),
):
    PROGRAMS[f"{_name}_transposed"] = (_program, _transposed)
    PROGRAMS[f"{_name}_contiguous"] = (_program, _contiguous)
for _name, _make in (("strided_columns", _strided_columns), ("rows_at_offset", _rows_at_offset)):
    PROGRAMS[f"s24_1037_{_name}"] = (_s24_1037, _make)
PROGRAMS["s24_1037_contiguous"] = (_s24_1037, _contiguous)
PROGRAMS["s24_829_transposed"] = (_s24_829, _transposed)


# A view taken in the enable_grad region of an input changed before it, made a leaf in it: its history reaches the
# leaf whatever grad mode reads it (the caller's no_grad), a view of that view's too.
_REGION_VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "select": lambda a: a[0],
    "view_of_view": lambda a: a[1:][:1],
}


def _changed_before_region_view_of_it(change: Callable[[torch.Tensor], Any], view: Any) -> Any:
    def f(a0):
        change(a0)
        with torch.enable_grad():
            a0.requires_grad_()
            v = view(a0)
        return (v, a0 * 2)

    return f


# Made a leaf in the region, its view taken after it: under no_grad (eager's is a view of the leaf view's base, which
# needs no grad, in any grad mode it is read in), or in a second region (with a view of it).
def _made_leaf_in_region_view_after(change: Callable[[torch.Tensor], Any], where: str) -> Any:
    def f(a0):
        change(a0)
        with torch.enable_grad():
            a0.requires_grad_()
            y = a0 * 2
        with torch.no_grad() if where == "no_grad" else torch.enable_grad():
            v = a0[1:]
            w = v[:1]
        return (y, v, w)

    return f


for _change_name in ("t_", "unsqueeze_", "as_strided_at_offset"):
    for _where in ("no_grad", "enable_grad"):
        for _make in (_transposed, _rows_at_offset):
            PROGRAMS[f"made_leaf_in_region_view_after_{_where}_{_change_name}{_make.__name__}"] = (
                _made_leaf_in_region_view_after(_CHANGES[_change_name], _where),
                _make,
            )
for _change_name in ("t_", "unsqueeze_", "as_strided_at_offset"):
    for _view_name, _view in _REGION_VIEWS.items():
        for _make in (_transposed, _contiguous):
            PROGRAMS[f"changed_before_region_{_view_name}_in_it_{_change_name}{_make.__name__}"] = (
                _changed_before_region_view_of_it(_CHANGES[_change_name], _view),
                _make,
            )


# A caller's leaf view used in grad mode (its gradient accumulator made in that geometry), then restrided under
# no_grad and used again: eager's accumulator keeps the first geometry, to which later uses' gradients are summed
# (unsqueeze_) or by which refused in the backward (a shape no sum reaches).
def _leaf_rows_at_offset() -> tuple[torch.Tensor]:
    return (torch.randn(4, 3, generator=_gen())[1:].requires_grad_(),)


def _leaf_strided_columns() -> tuple[torch.Tensor]:
    return (torch.randn(3, 8, generator=_gen())[:, ::2].requires_grad_(),)


_GRAD_USES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "view": lambda a: a[1:],
    "op": lambda a: a.sin(),
    "view_op": lambda a: a[:1].cos(),
}


def _leaf_view_used_then_changed(change: Callable[[torch.Tensor], Any], use: Any, write: Any) -> Any:
    def f(a0):
        if write is not None:
            write(a0)
        u = use(a0)
        with torch.no_grad():
            change(a0)
        return (u, a0 * 2)

    return f


for _change_name, _make in (
    ("unsqueeze_", _leaf_rows_at_offset),
    ("as_strided_shrinks", _leaf_strided_columns),
    ("swapdims_", _leaf_strided_columns),  # (4, 3): refused, as (2,) and (2, 2) are
):
    for _use_name, _use in _GRAD_USES.items():
        for _write_name, _write in (("unwritten", None), ("data", _write_data)):
            PROGRAMS[f"leaf_view_{_use_name}_then_{_change_name}_{_write_name}"] = (
                _leaf_view_used_then_changed(_CHANGES[_change_name], _use, _write),
                _make,
            )
# Written first where autograd records nothing, through its own counter (detach(), copy_ under no_grad): the uses
# before the change reach the leaf view itself, which the stand-in the function got (a view of its base to autograd,
# its history taken again from there once written) lost, gradient None.
_GRAD_USES_NOT_SAVING: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "mul": lambda a: a * 3,
    "function": lambda a: TriplesGradOutput.apply(a),
    "view_mul": lambda a: a[:1] * 3,
}
for _change_name, _make in (
    ("t_", _leaf_view),
    ("unsqueeze_", _leaf_rows_at_offset),
    ("unsqueeze_", _leaf_strided_columns),
):
    for _use_name, _use in _GRAD_USES_NOT_SAVING.items():
        for _write_name, _write in (("detach", _write_detach_in_place), ("copy_no_grad", _write_copy_no_grad)):
            PROGRAMS[f"leaf_view_written_{_write_name}_{_use_name}_then_{_change_name}{_make.__name__}"] = (
                _leaf_view_used_then_changed(_CHANGES[_change_name], _use, _write),
                _make,
            )


KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(("name", "mode"), mode_params(PROGRAMS, KNOWN_WRONG))
def test_made_leaf_after_geometry_change(name, mode):
    check_in_mode(*PROGRAMS[name], mode)
