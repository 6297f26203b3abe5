"""Each layer's calling-convention rewrite, alone: no tracing, no compiler.

For one layer at a time: collect the outer meta of a small flat function on real
arguments, run ``pre_compile`` and check the inner stage (arguments, meta, index
maps), then wrap a hand-written inner runtime (the inner function run eagerly)
with ``post_compile`` and compare the wrapped call with eager ``fn`` on equal
fresh arguments: output values and geometry, which outputs are inputs or views
of inputs (``_base``, storage identity), and the inputs' values, geometry and
version counters after the call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import aot
from meta.collect import collect_meta
from meta.indices import DedupedArg, UserArg
from meta.view_and_mutation import OutputType, TensorSpec
from tests.oracle import check
from wrappers.base import Layer, Runtime, Stage, compile_through
from wrappers.dedupe import Dedupe
from wrappers.metadata_mutation import MetadataMutation
from wrappers.runtime_epilogue import RuntimeEpilogue
from wrappers.stack import default_layers
from wrappers.synthetic_base import SyntheticBase

Args = Callable[[], Sequence[torch.Tensor]]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed))


def outer_stage(fn: Callable[..., Any], args: Sequence[torch.Tensor]) -> Stage:
    args = list(args)
    return Stage(fn, args, collect_meta(fn, args, [f"a{i}" for i in range(len(args))]))


class EagerInner:
    """The hand-written inner runtime: the inner stage's function, run eagerly, never traced.

    Records the argument lists it is called with, so tests can check what the
    layer hands down.
    """

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.calls: list[list[torch.Tensor]] = []

    def __call__(self, args: list[torch.Tensor]) -> list[Any]:
        self.calls.append(list(args))
        return list(self.stage.fn(*args))


def _storage(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


def _geometry(t: torch.Tensor) -> tuple[Any, ...]:
    return tuple(t.shape), t.stride(), t.storage_offset(), t.dtype


def assert_matches_eager(fn: Callable[..., Any], make_args: Args, runtime: Runtime) -> list[Any]:
    """Run ``fn`` eagerly and ``runtime`` on equal fresh arguments (the oracle's ``check``); return ``runtime``'s
    outputs of the last call."""
    outs: list[Any] = []

    def compiled(*args: torch.Tensor) -> tuple[Any, ...]:
        outs[:] = runtime(list(args))
        return tuple(outs)

    check(lambda *args: tuple(fn(*args)), make_args, compiled_fn=compiled, backward=False, calls=1, deep=True)
    return outs


def wrap(
    layer: Layer, fn: Callable[..., Any], example_args: Sequence[torch.Tensor]
) -> tuple[Stage, Stage, EagerInner, Runtime]:
    """``pre_compile`` on the outer stage, then ``post_compile`` around an eager inner runtime."""
    outer = outer_stage(fn, example_args)
    inner_stage = layer.pre_compile(outer)
    inner = EagerInner(inner_stage)
    return outer, inner_stage, inner, layer.post_compile(inner)


# --------------------------------------------------------------------------------------------- Dedupe


def _dup(make: Callable[[], torch.Tensor], *others: Callable[[], torch.Tensor]) -> Args:
    return lambda: (lambda x: (x, x, *(o() for o in others)))(make())


def test_dedupe_read_only_duplicate_becomes_one_inner_arg():
    def fn(a, b):
        return [a * b + a]

    make = _dup(lambda: randn(4))
    args = list(make())
    layer = Dedupe()
    outer, inner_stage, inner, runtime = wrap(layer, fn, args)
    assert len(inner_stage.args) == 1 and inner_stage.args[0] is args[0]
    assert dict(layer.to_inner.items()) == {UserArg(0): DedupedArg(0), UserArg(1): DedupedArg(0)}
    assert layer.kept == (UserArg(0),)
    assert inner_stage.meta.input_info == outer.meta.input_info[:1]
    assert inner_stage.meta.output_info == outer.meta.output_info
    assert_matches_eager(fn, make, runtime)
    (call,) = inner.calls
    assert len(call) == 1


def test_dedupe_mutated_duplicate_is_one_mutation():
    def fn(a, b):
        b.mul_(2)
        return [a + b, b]

    make = _dup(lambda: randn(4))
    _outer, inner_stage, inner, runtime = wrap(Dedupe(), fn, make())
    (info,) = inner_stage.meta.input_info
    assert info.mutates_data and info.version_bumps == 1
    out_info = inner_stage.meta.output_info[1]
    assert out_info.output_type == OutputType.IS_INPUT and out_info.base_input == 0
    outs = assert_matches_eager(fn, make, runtime)
    (call,) = inner.calls
    assert outs[1] is call[0]


def test_dedupe_renumbers_base_input_past_the_duplicate():
    def fn(a, b, w):
        b.add_(w)
        return [a * w, b[1:], w, w.view(2, 2)]

    make = _dup(lambda: randn(4), lambda: randn(4, seed=1))
    args = list(make())
    outer, inner_stage, _inner, runtime = wrap(Dedupe(), fn, args)
    assert [info.base_input for info in outer.meta.output_info] == [None, 0, 2, 2]
    assert len(inner_stage.args) == 2 and inner_stage.args[0] is args[0] and inner_stage.args[1] is args[2]
    assert [info.base_input for info in inner_stage.meta.output_info] == [None, 0, 1, 1]
    assert [info.name for info in inner_stage.meta.input_info] == ["a0", "a2"]
    assert_matches_eager(fn, make, runtime)


def test_dedupe_without_duplicates_is_the_identity():
    layer = Dedupe()
    outer = outer_stage(lambda a, b: [a + b], [randn(3), randn(3, seed=1)])
    assert layer.pre_compile(outer) is outer

    def inner(args):
        return []

    assert layer.post_compile(inner) is inner


# --------------------------------------------------------------------------------- MetadataMutation


def _t_then_read(a):
    a.t_()
    return [a * 2]


def _unsqueeze_then_mul(a):
    a.unsqueeze_(0)
    a.mul_(2)
    return [a + 1]


def _view_after_unsqueeze_(a):
    a.unsqueeze_(0)
    a.mul_(2)
    return [a[0, 1], a + 1]


def _view_before_t_(a):
    early = a[1]
    a.t_()
    return [early, a * 2]


def _t_returned(a):
    return [a.t_()]


def _unsqueeze_mul_returned(a):
    a.unsqueeze_(0).mul_(2)
    return [a, a.sum()]


def _plain(*shape: int) -> Args:
    return lambda: (randn(*shape),)


def _offset_view(*shape: int) -> Args:
    """A view at a non-zero storage offset: the final offset is relative to it."""
    numel = 1
    for size in shape:
        numel *= size
    return lambda: (randn(numel + 5)[5:].view(*shape),)


METADATA_PROGRAMS = {
    "t_": (_t_then_read, _plain(3, 4)),
    "t_offset_view": (_t_then_read, _offset_view(3, 4)),
    "unsqueeze_then_mul_": (_unsqueeze_then_mul, _plain(3, 4)),
    "unsqueeze_then_mul_offset_view": (_unsqueeze_then_mul, _offset_view(3, 4)),
    "view_after_unsqueeze_": (_view_after_unsqueeze_, _offset_view(3, 4)),
    "view_before_t_": (_view_before_t_, _offset_view(3, 4)),
    "t_returned": (_t_returned, _plain(3, 4)),
    "unsqueeze_mul_returned": (_unsqueeze_mul_returned, _offset_view(2, 3)),
}


@pytest.mark.parametrize(
    "name",
    [n for n in METADATA_PROGRAMS],
)
def test_metadata_mutation(name):
    fn, make = METADATA_PROGRAMS[name]
    args = list(make())
    outer, inner_stage, inner, runtime = wrap(MetadataMutation(), fn, args)
    assert outer.meta.input_info[0].mutates_metadata
    # Below the layer: the same arguments, no metadata mutation, the returned input not an output.
    assert len(inner_stage.args) == 1 and inner_stage.args[0] is args[0]
    for info in inner_stage.meta.input_info:
        assert not info.mutates_metadata and info.final_metadata is None
    assert inner_stage.meta.input_info[0].mutates_data == outer.meta.input_info[0].mutates_data
    # Outputs not tied to the input pass down unchanged; the input itself is returned from above.
    untied = [info for info in outer.meta.output_info if info.base_input is None]
    assert [info for info in inner_stage.meta.output_info if info.base_input is None] == untied
    assert OutputType.IS_INPUT not in [info.output_type for info in inner_stage.meta.output_info]
    # The example arguments are untouched by pre_compile.
    assert _geometry(args[0]) == _geometry(make()[0]) and args[0]._version == 0
    assert_matches_eager(fn, make, runtime)
    (call,) = inner.calls
    assert len(call) == 1


def test_metadata_mutation_inner_runtime_never_sees_a_metadata_change():
    fn, make = METADATA_PROGRAMS["unsqueeze_then_mul_offset_view"]
    x = make()[0]
    before = _geometry(x)
    layer = MetadataMutation()
    inner = EagerInner(layer.pre_compile(outer_stage(fn, [x])))
    seen = []

    def spying(args):
        outs = inner(args)
        seen.append(_geometry(args[0]))
        return outs

    layer.post_compile(spying)([x])
    assert seen == [before], "the input's geometry changed below the layer"
    assert _geometry(x) == ((1, 3, 4), (12, 4, 1), 5, torch.float32)


def test_metadata_mutation_of_an_input_sharing_storage_with_another():
    def fn(a, b):
        a.t_()
        b.mul_(2)
        return [a + 1]

    def make():
        s = randn(12)
        return s[:6].view(2, 3), s[6:].view(2, 3)

    _outer, inner_stage, _inner, runtime = wrap(MetadataMutation(), fn, make())
    assert [info.mutates_metadata for info in inner_stage.meta.input_info] == [False, False]
    assert [info.mutates_data for info in inner_stage.meta.input_info] == [False, True]
    assert_matches_eager(fn, make, runtime)


# ------------------------------------------------------------------------------------- SyntheticBase


def test_synthetic_base_merges_overlapping_slices_one_mutated():
    def fn(a, b):
        a.mul_(2)
        return [a + b[:5], b, a[1:]]

    def make():
        s = randn(10)
        return s[0:5], s[3:8]

    args = list(make())
    layer = SyntheticBase()
    outer, inner_stage, inner, runtime = wrap(layer, fn, args)
    assert outer.meta.input_info[0].written_through and not outer.meta.input_info[1].written_through
    (base,) = inner_stage.args
    # The base spans both slices' elements, as a 1-D view of the caller's storage.
    assert _storage(base) == _storage(args[0]) and _geometry(base) == ((8,), (1,), 0, torch.float32)
    (base_info,) = inner_stage.meta.input_info
    assert base_info.name == "base_of_a0_a1" and not base_info.mutates_data
    # The kept output, then the new value of the one written member; the members' outputs are rebuilt above.
    assert [info.output_type for info in inner_stage.meta.output_info] == [OutputType.NON_ALIAS] * 2
    assert inner_stage.meta.output_info[1].spec.shape == (5,)
    assert_matches_eager(fn, make, runtime)
    (call,) = inner.calls
    assert len(call) == 1 and _geometry(call[0]) == ((8,), (1,), 0, torch.float32)


def test_synthetic_base_inner_function_never_writes_the_base():
    def fn(a, b):
        a.mul_(2)
        return [b * 1]

    s = randn(10)
    a, b = s[0:5], s[3:8]
    inner_stage = SyntheticBase().pre_compile(outer_stage(fn, [a, b]))
    before, version = s.clone(), s._version
    outs = inner_stage.fn(*inner_stage.args)
    assert torch.equal(s, before) and s._version == version
    # What the caller will see: b after a's write, and a's new value.
    expected = before.clone()
    expected[0:5].mul_(2)
    torch.testing.assert_close(outs[0], expected[3:8])
    torch.testing.assert_close(outs[1], expected[0:5])


def test_synthetic_base_leaves_disjoint_slices_alone():
    def fn(a, b):
        a.mul_(2)
        return [a + b]

    def make():
        s = randn(10)
        return s[0:5], s[5:10]

    args = list(make())
    layer = SyntheticBase()
    outer, inner_stage, inner, runtime = wrap(layer, fn, args)
    assert inner_stage is outer
    assert inner_stage.args[0] is args[0] and inner_stage.args[1] is args[1]
    assert runtime is inner
    assert_matches_eager(fn, make, runtime)


def _base_and_row(b, row):
    b.add_(1)
    row.mul_(3)
    return [b.sum() + row.sum(), row]


def test_synthetic_base_base_and_its_row_both_mutated():
    def make():
        b = randn(3, 4)
        return b, b[1]

    args = list(make())
    layer = SyntheticBase()
    outer, inner_stage, _inner, runtime = wrap(layer, _base_and_row, args)
    assert [info.version_bumps for info in outer.meta.input_info] == [2, 2]
    (base,) = inner_stage.args
    assert _geometry(base) == ((12,), (1,), 0, torch.float32) and _storage(base) == _storage(args[0])
    # The sum, then the new values of both written members.
    assert [info.spec.shape for info in inner_stage.meta.output_info] == [(), (3, 4), (4,)]
    assert_matches_eager(_base_and_row, make, runtime)


def test_synthetic_base_keeps_unrelated_inputs_first():
    def fn(w, a, b):
        b.add_(w[:3])
        return [a * 2, w]

    def make():
        s = randn(8)
        return randn(4, seed=1), s[0:4], s[2:5]

    args = list(make())
    layer = SyntheticBase()
    _outer, inner_stage, _inner, runtime = wrap(layer, fn, args)
    assert inner_stage.args[0] is args[0] and len(inner_stage.args) == 2
    assert inner_stage.meta.output_info[1].base_input == 0
    assert_matches_eager(fn, make, runtime)


class CountWrites(TorchDispatchMode):
    """Counts the elements each mutating op writes into one storage."""

    def __init__(self, storage: torch.UntypedStorage) -> None:
        super().__init__()
        self.ptr = storage.data_ptr()
        self.writes: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for position, argument in enumerate(func._schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = kwargs.get(argument.name) if argument.kwarg_only or position >= len(args) else args[position]
            if isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() == self.ptr:
                self.writes.append((func.__name__, value.numel()))
        return func(*args, **kwargs)


def test_synthetic_base_writes_back_only_the_mutated_region():
    def fn(big, small):
        small.mul_(2)
        return [big.sum()]

    def make():
        big = randn(64, 64)
        return big, big[3, 8:12]

    args = list(make())
    _outer, inner_stage, _inner, runtime = wrap(SyntheticBase(), fn, args)
    (base,) = inner_stage.args
    assert base.numel() == 64 * 64  # the base spans the whole storage ...
    eager_args = make()
    with CountWrites(eager_args[0].untyped_storage()) as eager_counter:
        fn(*eager_args)
    assert eager_counter.writes == [("mul_.Tensor", 4)]
    args = list(make())
    with CountWrites(args[0].untyped_storage()) as counter:
        outs = runtime(args)
    assert counter.writes == [("copy_.default", 4)], counter.writes  # ... the write-back touches 4 elements
    torch.testing.assert_close(outs[0], fn(*make())[0])
    assert_matches_eager(fn, make, runtime)


# ----------------------------------------------------------------------------------- RuntimeEpilogue


def _assert_graph_meta(stage: Stage) -> None:
    """Below the epilogue: no input is written, every output is fresh memory."""
    for info in stage.meta.input_info:
        assert not info.mutates_data and not info.written_through and info.version_bumps == 0
    for info in stage.meta.output_info:
        assert info.output_type == OutputType.NON_ALIAS
    assert stage.meta.intermediate_bases == ()


def _untouched(inner: EagerInner) -> Runtime:
    """The inner runtime, checked to leave its arguments as it found them (below the epilogue it must)."""

    def run(args: list[torch.Tensor]) -> list[Any]:
        before = [(arg.clone(), arg._version, _geometry(arg)) for arg in args]
        outs = inner(args)
        for i, (arg, (value, version, geometry)) in enumerate(zip(args, before, strict=True)):
            assert torch.equal(arg, value) and arg._version == version and _geometry(arg) == geometry, f"arg {i}"
        return outs

    return run


def _two_writes(a, b):
    a.add_(1)
    a.mul_(b)
    return [a.sum() + b.sum()]


def test_epilogue_writes_back_data_mutations_with_eager_version_counters():
    def make():
        return randn(3, 4), randn(3, 4, seed=1)

    layer = RuntimeEpilogue()
    outer = outer_stage(_two_writes, make())
    assert outer.meta.input_info[0].version_bumps == 2
    inner_stage = layer.pre_compile(outer)
    _assert_graph_meta(inner_stage)
    assert all(inner is arg for inner, arg in zip(inner_stage.args, outer.args, strict=True))
    # The user output, then the new value of the mutated input.
    assert [info.spec.shape for info in inner_stage.meta.output_info] == [(), (3, 4)]
    runtime = layer.post_compile(_untouched(EagerInner(inner_stage)))
    assert_matches_eager(_two_writes, make, runtime)


def _non_leaf_mutated(x, w):
    x.mul_(w)
    return [x.sum(), x]


def test_epilogue_write_back_is_recorded_by_autograd_like_eager():
    def make():
        return randn(4).requires_grad_() * 1, randn(4, seed=1).requires_grad_()

    layer = RuntimeEpilogue()
    inner_stage = layer.pre_compile(outer_stage(_non_leaf_mutated, make()))
    _assert_graph_meta(inner_stage)
    assert inner_stage.meta.output_info[1].requires_grad  # the new value carries the gradient
    runtime = layer.post_compile(EagerInner(inner_stage))
    eager_args, args = make(), make()
    eager_outs, outs = _non_leaf_mutated(*eager_args), runtime(list(args))
    assert outs[1] is args[0] and args[0].grad_fn is not None
    eager_grads = torch.autograd.grad(eager_outs[0] + eager_outs[1].sum(), [eager_args[1]])
    grads = torch.autograd.grad(outs[0] + outs[1].sum(), [args[1]])
    torch.testing.assert_close(grads, eager_grads)
    assert_matches_eager(_non_leaf_mutated, make, runtime)


def _returns_inputs(a, b):
    a.mul_(2)
    return [a, b * 2, a, b]


def _views_of_input(a):
    early = a[0]  # taken before the write: replayed before the write-back, sees the new values
    a.add_(1)
    return [a.t(), early, a[1:].unsqueeze(0), a.sum()]


def _view_of_read_only_input(a, b):
    return [a.view(-1)[2:], b + 1]


def _views_of_intermediate(a):
    y = a * 2
    return [y[0], y[1:], y.sum()]


def _view_of_returned_intermediate(a):
    y = a * 2
    return [y, y.t(), y[1]]


def _output_returned_twice(a):
    y = a * 2
    return [y, y[0], y, a, a]


def _intermediate_mutated_through_view(a):
    y = a * 3
    y[1:].mul_(2)
    return [y[0], y.t()]


EPILOGUE_PROGRAMS = {
    "output_is_input": (_returns_inputs, lambda: (randn(3), randn(3, seed=1))),
    "views_of_mutated_input": (_views_of_input, lambda: (randn(3, 4),)),
    "view_of_read_only_input": (_view_of_read_only_input, lambda: (randn(2, 3), randn(3, seed=1))),
    "views_of_intermediate": (_views_of_intermediate, lambda: (randn(3, 4),)),
    "view_of_returned_intermediate": (_view_of_returned_intermediate, lambda: (randn(3, 4),)),
    "output_returned_twice": (_output_returned_twice, lambda: (randn(3, 4),)),
    "intermediate_mutated_through_view": (_intermediate_mutated_through_view, lambda: (randn(3, 4),)),
}


@pytest.mark.parametrize("name", list(EPILOGUE_PROGRAMS))
def test_epilogue_aliasing(name):
    fn, make = EPILOGUE_PROGRAMS[name]
    layer = RuntimeEpilogue()
    outer = outer_stage(fn, make())
    inner_stage = layer.pre_compile(outer)
    _assert_graph_meta(inner_stage)
    # Computed user outputs, then hidden intermediate bases, then new values of mutated inputs.
    computed = [info for info in outer.meta.output_info if info.output_type == OutputType.NON_ALIAS]
    mutated = [i for i, info in enumerate(outer.meta.input_info) if info.mutates_data]
    expected = [info.spec for info in computed + list(outer.meta.intermediate_bases)]
    expected += [TensorSpec.of(outer.args[i]) for i in mutated]
    assert [info.spec for info in inner_stage.meta.output_info] == expected
    runtime = layer.post_compile(_untouched(EagerInner(inner_stage)))
    assert_matches_eager(fn, make, runtime)


def test_epilogue_hidden_intermediate_base_is_an_inner_output():
    layer = RuntimeEpilogue()
    outer = outer_stage(_views_of_intermediate, [randn(3, 4)])
    assert [info.output_type for info in outer.meta.output_info] == [
        OutputType.ALIAS_OF_INTERMEDIATE,
        OutputType.ALIAS_OF_INTERMEDIATE,
        OutputType.NON_ALIAS,
    ]
    inner_stage = layer.pre_compile(outer)
    # The sum, then the hidden base ``y``, which both views are replayed from.
    assert [info.spec.shape for info in inner_stage.meta.output_info] == [(), (3, 4)]
    assert inner_stage.meta.intermediate_bases == ()
    x = randn(3, 4)
    torch.testing.assert_close(inner_stage.fn(x)[1], x * 2)
    outs = layer.post_compile(EagerInner(inner_stage))([x])
    assert outs[0]._base is outs[1]._base and outs[0]._base is not None


def test_epilogue_with_nothing_to_do_is_the_identity():
    layer = RuntimeEpilogue()
    outer = outer_stage(lambda a: [a * 2], [randn(3)])
    inner_stage = layer.pre_compile(outer)
    assert inner_stage.meta == outer.meta

    def inner(args):
        return []

    assert layer.post_compile(inner) is inner


# ------------------------------------------------------------------------------------ the whole stack


def _everything(a, b, s1, s2, m, w):
    b.mul_(2)  # through the second position of a duplicated input
    s1.add_(w[:6])  # a slice overlapping s2
    m.t_()
    m.mul_(3)
    return [a + b.sum(), s2, s1[1:], m, (s2 * 2)[0:2], a]


def _everything_args():
    x = randn(4)
    s = randn(10, seed=1)
    return x, x, s[0:6], s[4:10], randn(2, 3, seed=2), randn(8, seed=3)


def test_default_stack_over_an_eager_core():
    def core(stage: Stage) -> Runtime:
        cores.append(stage)
        return lambda args: list(stage.fn(*args))

    cores: list[Stage] = []
    outer = outer_stage(_everything, _everything_args())
    runtime = compile_through(default_layers(), outer, core)
    (core_stage,) = cores
    # Below every layer: x once, s1 and s2 as one base, no mutation, no alias.
    assert len(core_stage.args) == 4
    assert [info.name for info in core_stage.meta.input_info] == ["a0", "a4", "a5", "base_of_a2_a3"]
    _assert_graph_meta(core_stage)
    for _ in range(2):
        assert_matches_eager(_everything, _everything_args, runtime)


def test_layer_docstring_example_runs():
    import doctest

    import wrappers.base

    result = doctest.testmod(wrappers.base)
    assert result.attempted > 0 and result.failed == 0


def test_the_stage_tells_the_core_which_inputs_the_layers_copy():
    """The epilogue copies a written input, the synthetic base a written cluster's base: each says so through
    the stage (``Stage.copied``); the core reads the inputs themselves in an inference graph, and keeps a clone
    it was not told of (the function's own)."""

    def writes(x, base_member, other_member):
        x.add_(1)
        base_member.mul_(2)
        return x * 2 + other_member

    base = torch.ones(6)
    stages: list[Stage] = []
    args = [torch.ones(4), base[:4], base[2:]]
    compile_through(default_layers(), outer_stage(writes, args), lambda s: stages.append(s) or EagerInner(s))
    (core_stage,) = stages
    assert core_stage.copied == {0, 1}  # x, then the base the two members are merged into

    def own_clone(x):
        return x.clone() * 2, x + 1

    graphs: list[torch.fx.GraphModule] = []
    compiled = aot.aot_function(own_clone, lambda gm, _: graphs.append(gm) or gm)
    with torch.no_grad():
        check(own_clone, lambda: (torch.ones(3),), compiled_fn=compiled)
    assert [node.target for node in graphs[0].graph.nodes].count(torch.ops.aten.clone.default) == 1
