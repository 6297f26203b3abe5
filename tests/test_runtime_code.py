"""The generated runtime code (``wrappers.codegen``, ``aot.runtime_code``): what it looks like, its guard,
and the interpreted reference it is generated from (the oracle runs both on every differential test)."""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import torch

import aot
from aot import runtime_code
from tests.oracle import check

EXPECTED = pathlib.Path(__file__).parent / "expected"


def duplicated_aliased_mutated(a: torch.Tensor, b: torch.Tensor, base: torch.Tensor, view: torch.Tensor) -> tuple:
    """``a`` passed twice (``b``), ``view`` a view of ``base``, both written; outputs alias inputs."""
    a.mul_(2)
    view.add_(1)
    return a + b, base.sum(), view.t(), a


def _args() -> tuple[torch.Tensor, ...]:
    a = torch.arange(4.0)
    base = torch.arange(6.0).reshape(2, 3)
    return a, a, base, base[:, 1:]


def test_generated_source_of_duplicated_aliased_mutated_inputs() -> None:
    """The checked-in source shows a reader what one entry's call is: every layer's part inlined, the
    dedupe's and the epilogue's straight-line, the synthetic base's steps called from it."""
    compiled = check(duplicated_aliased_mutated, _args)
    (entry,) = compiled.entries
    expected = EXPECTED / "runtime_duplicated_aliased_mutated.py.txt"
    if os.environ.get("AOTFX_REGENERATE_EXPECTED"):
        expected.write_text(entry.runtime_source)
    assert entry.runtime_source == expected.read_text()


def plain(x: torch.Tensor, w: torch.Tensor) -> tuple:
    return (x @ w).relu(), x * 2


def test_guarded_source_of_flat_tensors() -> None:
    x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    compiled = aot.aot_function(plain, aot.nop)
    compiled(x, w)
    compiled(x, w)
    (entry,) = compiled.entries
    expected = EXPECTED / "runtime_plain.py.txt"
    if os.environ.get("AOTFX_REGENERATE_EXPECTED"):
        expected.write_text(entry.runtime_source)
    assert entry.runtime_source == expected.read_text()


def test_guard_misses_take_the_full_check() -> None:
    """Whatever differs from the entry's signature misses the guard: a new entry, or another entry's."""
    compiled = aot.aot_function(plain, aot.nop)
    x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    calls = [
        (x, w),
        (x, w),
        (torch.randn(2, 4), w),  # shape
        (x.t().contiguous().t(), w),  # strides
        (x.double(), w.double()),  # dtype
        (x, w.detach()),  # requires_grad
        lambda: (x, w * 1),  # not a leaf (a factory: the oracle would clone it into a leaf)
        (x, x.new_zeros(4, 5)),  # a fresh storage: the same entry
        (x, w),
    ]
    for args in calls:
        check(plain, args, compiled_fn=compiled, calls=1)
    assert len(compiled.entries) == 6
    with torch.no_grad():
        check(plain, (x, w), compiled_fn=compiled, calls=1)
    shared = torch.randn(8, 4)
    check(plain, lambda: (shared[:3], shared[3:7, :].t().contiguous().t().clone()), compiled_fn=compiled, calls=1)
    storage = torch.randn(32)
    # Two inputs in one storage: the guard checks the sharing, a new entry for it.
    check(plain, lambda: (storage[:12].view(3, 4), storage[12:32].view(4, 5)), compiled_fn=compiled, calls=2)


@pytest.mark.parametrize("tensor_guards", [True, False], ids=["tensor_guards", "attribute_reads"])
def test_guard_misses_what_the_signature_tells(monkeypatch, tensor_guards: bool) -> None:  # type: ignore[no-untyped-def]
    """The guard with torch's ``TensorGuards`` and without it (the attribute reads): each difference the full
    signature tells misses it (a new entry), each call as eager's."""
    if not tensor_guards:
        monkeypatch.setattr(runtime_code, "_tensor_guards", lambda leaves: None)
    compiled = aot.aot_function(plain, aot.nop)
    x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    ungraded = torch.zeros(3, 6)
    leaf_view = ungraded[:, :4].requires_grad_()  # a leaf view of a base requiring no grad
    big = torch.randn(4, 6)
    calls: list = [
        (x, w),
        (x, w),
        lambda: (x, torch.nn.Parameter(w.detach().clone())),  # a parameter where a tensor was: the same entry
        lambda: (big[:3, :4], w),  # a view needing no grad
        (leaf_view, w.detach()),
        (leaf_view, w.detach()),
    ]
    for args in calls:
        check(plain, args, compiled_fn=compiled, calls=1)
    assert len(compiled.entries) == 3
    compiled(leaf_view, w.detach())  # (the oracle copies its inputs: not this base's requires_grad)
    ungraded.requires_grad_()  # the same leaf view, its base now requiring grad: the signature differs
    torch.testing.assert_close(compiled(leaf_view, w.detach()), plain(leaf_view, w.detach()))
    assert len(compiled.entries) == 4
    with torch.inference_mode():
        made = torch.randn(3, 4)
    needs_none = w.detach()
    compiled(x, needs_none)
    compiled(x, needs_none)
    assert len(compiled.entries) == 5
    # An inference tensor (called directly: the oracle's copy would be none): not the entry used last.
    torch.testing.assert_close(compiled(made, needs_none), plain(made, needs_none))
    assert len(compiled.entries) == 6
    check(plain, (x, w), compiled_fn=compiled, calls=1)
    assert len(compiled.entries) == 6


def test_module_modes_are_guarded() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    compiled = aot.aot_module(model, aot.nop)
    x = torch.randn(2, 4)
    model.eval()
    torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(compiled(x), model(x))
    model.train()
    compiled(x)
    assert len(compiled.compiled.entries) == 2


def test_reference_runtime_is_the_interpreted_layers() -> None:
    compiled = aot.aot_function(duplicated_aliased_mutated, aot.nop)
    compiled(*_args())
    (entry,) = compiled.entries
    assert entry.reference_runtime is not None and entry.reference_runtime is not entry.runtime
    compiled.use_reference_runtime()
    check(duplicated_aliased_mutated, _args, compiled_fn=compiled, calls=1)
    assert compiled._fast is None


def test_interpreted_mode_from_the_environment() -> None:
    script = textwrap.dedent(
        """
        import torch, aot
        compiled = aot.aot_function(lambda x: (x.sin(),), aot.nop)
        compiled(torch.randn(3)); compiled(torch.randn(3))
        (entry,) = compiled.entries
        assert entry.runtime is entry.reference_runtime and entry.runtime_source == ""
        print("ok")
        """
    )
    env = {**os.environ, runtime_code.ENV_VAR: "interpreted"}
    root = pathlib.Path(__file__).parent.parent
    result = subprocess.run([sys.executable, "-c", script], env=env, cwd=root, capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr


def test_runtime_channel_logs_the_source(caplog) -> None:  # type: ignore[no-untyped-def]
    def fresh(x: torch.Tensor, w: torch.Tensor) -> tuple:  # not a function compiled before: traced here
        return plain(x, w)

    with caplog.at_level(logging.DEBUG, logger="aot.runtime"):
        compiled = aot.aot_function(fresh, aot.nop)
        compiled(torch.randn(3, 4), torch.randn(4, 5))
        compiled(torch.randn(3, 4), torch.randn(4, 5))
    sources = [r.aot["source"] for r in caplog.records if r.name == "aot.runtime"]  # type: ignore[attr-defined]
    assert any("def aotfx_call(args):" in source for source in sources)
    assert any("def aotfx_runtime(args):" in source for source in sources)


def test_a_tensor_marked_dynamic_misses_the_guard() -> None:
    import torch._dynamo

    compiled = aot.aot_function(plain, aot.nop)
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    compiled(x, w)
    compiled(x, w)
    marked = torch.randn(3, 4)
    torch._dynamo.mark_dynamic(marked, 0)
    compiled(marked, w)
    assert any(entry.dynamic_positions for entry in compiled.entries)


# Programs whose every layer has a part to play: each runs generated (the full check, then the guarded call
# where the guard applies) and interpreted, against eager, in grad mode and under no_grad.
def dedupe_written(a: torch.Tensor, b: torch.Tensor) -> tuple:
    a.add_(1)
    return a * b, b


def dedupe_read(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple:
    return (a * b + c).sum(), a.view(-1)


def transposed_in_place(x: torch.Tensor, y: torch.Tensor) -> tuple:
    x.t_()
    return x @ y, x


def unsqueezed_and_written(x: torch.Tensor) -> tuple:
    x.unsqueeze_(0)
    x.mul_(2)
    return (x.sum(),)


def requires_grad_inside(x: torch.Tensor, w: torch.Tensor) -> tuple:
    y = x * 2
    x.requires_grad_()
    return x * w + y, y


def grown(x: torch.Tensor) -> tuple:
    x.resize_(8)
    x[4:].fill_(1.0)
    return (x * 2,)


def overlapping_one_written(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> tuple:
    a.mul_(2)
    return (b * w).sum(), a


def four_aliased_two_written(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> tuple:
    a.add_(1)
    c.mul_(2)
    return b * d, c.view(-1), a


def view_and_base_written(base: torch.Tensor, view: torch.Tensor) -> tuple:
    view.add_(1)
    return base.sum(), view.t()


def _overlapping(members: int, grad: bool) -> Callable[[], tuple]:
    def make() -> tuple:
        root = torch.randn(4 + members, requires_grad=grad)
        base = root * 1 if grad else root
        return tuple(base[k : k + 4] for k in range(members))

    return make


PROGRAMS = {
    "dedupe_written": (dedupe_written, lambda: (lambda a: (a, a))(torch.randn(3))),
    "dedupe_read": (dedupe_read, lambda: (lambda a: (a, a, torch.randn(3, requires_grad=True)))(torch.randn(3))),
    "dedupe_grad": (dedupe_read, lambda: (lambda a: (a, a, a))(torch.randn(3, requires_grad=True))),
    "transposed_in_place": (transposed_in_place, lambda: (torch.randn(2, 3), torch.randn(2, 4, requires_grad=True))),
    "unsqueezed_and_written": (unsqueezed_and_written, lambda: (torch.randn(3),)),
    "requires_grad_inside": (requires_grad_inside, lambda: (torch.randn(3), torch.randn(3, requires_grad=True))),
    "grown": (grown, lambda: (torch.randn(4),)),
    "overlapping_one_written": (
        overlapping_one_written,
        lambda: (*_overlapping(2, False)(), torch.randn(4, requires_grad=True)),
    ),
    "overlapping_with_grad": (
        overlapping_one_written,
        lambda: (*_overlapping(2, True)(), torch.randn(4, requires_grad=True)),
    ),
    "four_aliased_two_written": (four_aliased_two_written, _overlapping(4, True)),
    "view_and_base_written": (
        view_and_base_written,
        lambda: (lambda b: (b, b[:, 1:]))(torch.randn(2, 3, requires_grad=True) * 1),
    ),
}


def _seeded(make: Callable[[], tuple]) -> Callable[[], tuple]:
    """``make``, drawing the same values at every call: for eager and each compiled run."""

    def seeded() -> tuple:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return make()

    return seeded


@pytest.mark.parametrize("mode", ["training", "no_grad"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_layer_generated_equals_interpreted_and_eager(name: str, mode: str) -> None:
    fn, make_random_args = PROGRAMS[name]
    make_args = _seeded(make_random_args)
    with torch.no_grad() if mode == "no_grad" else contextlib.nullcontext():
        compiled = check(fn, make_args, backward=mode == "training", calls=3)
    for entry in compiled.entries:
        assert entry.runtime is not entry.reference_runtime
        # Every layer's part is inlined: none is called as its interpreted closure around the code below.
        assert "aotfx_below_" not in entry.runtime_source, entry.runtime_source


def test_guard_of_inputs_sharing_storage_misses_what_the_signature_tells_apart() -> None:
    """Overlapping inputs take the guarded call too: which share a storage, which are one object, their
    offsets, view-ness and shared version counters are the entry's, or the call takes the full check."""
    compiled = aot.aot_function(overlapping_one_written, aot.nop)
    w = torch.randn(4, requires_grad=True)

    def views(root: torch.Tensor, first: int, second: int) -> tuple:
        return root[first : first + 4], root[second : second + 4], w

    calls: list[Callable[[], tuple]] = [
        lambda: views(torch.randn(6), 0, 1),
        lambda: views(torch.randn(6), 0, 1),  # the guarded call
        lambda: views(torch.randn(6), 0, 2),  # another offset
        lambda: (lambda r: (r[:4], r[:4], w))(torch.randn(6)),  # two views, one place: other overlaps
        lambda: (lambda r: (r, r, w))(torch.randn(4)),  # one object twice
        lambda: (lambda r: (r[:4], r.detach()[1:5], w))(torch.randn(6)),  # a detach() shares the counter
        lambda: (lambda r: (r[:4], r.data[1:5], w))(torch.randn(6)),  # .data has a counter of its own
        lambda: (torch.randn(6)[:4], torch.randn(6)[1:5], w),  # no storage shared
        lambda: views(torch.randn(6), 0, 1),
    ]
    for make in calls:
        check(overlapping_one_written, _seeded(make), compiled_fn=compiled, calls=1)
    assert compiled._fast is not None
    keys = len(compiled._cache)
    check(overlapping_one_written, _seeded(calls[0]), compiled_fn=compiled, calls=2)
    assert len(compiled._cache) == keys
