"""Dynamic shapes (issue 13): one compile serves every size its guards admit; eager is the oracle.

Each test compiles once with some dimensions symbolic (``dynamic=True``, ``dynamic_dims=``,
``torch._dynamo.mark_dynamic``, or Dynamo's own symbolic inputs under ``torch.compile``), then
checks every size against eager with ``tests.oracle.check`` and counts backend compiles.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
import torch
from torch._dispatch.python import enable_python_dispatcher

import aot
from aot.cache import keys
from aot.compile.min_cut import min_cut_rematerialization_partition
from aot.errors import BackendCompilerError, DynamicShapesUnsupportedError
from meta import python_kernels
from tests.oracle import assert_close, check, derivatives, functional_nop


class Counting:
    """A ``nop`` backend that counts the graphs it is handed."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        self.graphs.append(gm)
        return functional_nop(gm, example_inputs)


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).log_softmax(-1)


class Attention(torch.nn.Module):
    """A pre-norm causal self-attention block: batch and sequence length may vary."""

    def __init__(self, width: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.norm = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        attended = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        return x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))


class LSTMHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(5, 8, batch_first=True)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(x)[0][:, -1])


def _check_module(module: torch.nn.Module, compiled: aot.AOTModule, make_input: Any, sizes: Any) -> None:
    """Values and gradients (inputs' and parameters') equal eager's at every size."""
    for size in sizes:
        torch.manual_seed(hash(size) % 1000)
        x = make_input(size)
        expected = module(x)
        expected.sum().backward()
        expected_grads = [p.grad.clone() for p in module.parameters()] + [x.grad.clone()]
        module.zero_grad()
        x.grad = None
        out = compiled(x)
        out.sum().backward()
        grads = [p.grad.clone() for p in module.parameters()] + [x.grad.clone()]
        module.zero_grad()
        torch.testing.assert_close(out, expected)
        for grad, expected_grad in zip(grads, expected_grads, strict=True):
            torch.testing.assert_close(grad, expected_grad)


def test_mlp_one_compile_for_batch_sizes_2_to_9() -> None:
    torch.manual_seed(0)
    module, backend = MLP(), Counting()
    compiled = aot.aot_module(module, backend, dynamic=True)
    _check_module(module, compiled, lambda b: torch.randn(b, 6, requires_grad=True), range(2, 10))
    assert len(compiled.compiled.entries) == 1
    assert len(backend.graphs) == 2  # one forward, one backward


@pytest.mark.parametrize("partition_fn", [None, min_cut_rematerialization_partition], ids=["default", "min_cut"])
def test_attention_batch_and_sequence_length_vary(partition_fn: Any) -> None:
    torch.manual_seed(0)
    module, backend = Attention(), Counting()
    compiled = aot.aot_module(module, backend, partition_fn=partition_fn, dynamic=True)
    sizes = [(2, 5), (3, 7), (2, 9), (4, 3), (3, 12)]
    _check_module(module, compiled, lambda s: torch.randn(*s, 16, requires_grad=True), sizes)
    assert len(compiled.compiled.entries) == 1
    assert len(backend.graphs) == 2
    forward, backward = compiled.compiled.entries[0].forward, compiled.compiled.entries[0].backward
    assert forward is not None and backward is not None
    # The sizes the backward needs are read in the forward and saved as symbolic ints, by both partitioners:
    # never read again off a saved input (whose geometry a metadata mutation may have changed since).
    symbolic = [n for n in backward.graph.find_nodes(op="placeholder") if isinstance(n.meta["val"], torch.SymInt)]
    assert symbolic
    reads = backward.graph.find_nodes(op="call_function", target=torch.ops.aten.sym_size.int)
    assert all(read.args[0].name.startswith("tangents") for read in reads)


def test_lstm_marked_batch_dimension() -> None:
    torch.manual_seed(0)
    module, backend = LSTMHead(), Counting()
    compiled = aot.aot_module(module, backend)

    def make_input(batch: int) -> torch.Tensor:
        x = torch.randn(batch, 4, 5, requires_grad=True)
        torch._dynamo.mark_dynamic(x, 0)
        return x

    _check_module(module, compiled, make_input, range(2, 10))
    assert len(compiled.compiled.entries) == 1
    assert len(backend.graphs) == 2


def test_ragged_last_batch() -> None:
    # Slices of one dataset tensor: views at growing storage offsets, the last one shorter.
    torch.manual_seed(0)
    module, backend = MLP(), Counting()
    compiled = aot.aot_module(module, backend, dynamic=True)
    data = torch.randn(50, 6)

    def batch(start: int) -> torch.Tensor:
        return data[start : start + 16].detach().requires_grad_()

    _check_module(module, compiled, batch, [0, 16, 32, 48])
    # Offset 0 is specialized as sizes 0 and 1 are: the first batch has an entry of its own.
    assert len(compiled.compiled.entries) == 2
    assert len(backend.graphs) == 4


def test_inference_graph_and_dynamic_dims_by_name() -> None:
    def f(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return (x * scale).sum(-1) + x.shape[0]

    backend = Counting()
    compiled = aot.aot_function(f, backend, dynamic_dims={"x": 0})
    with torch.no_grad():
        for batch in (3, 5, 8):
            check(f, (torch.randn(batch, 4), torch.randn(4)), compiled_fn=compiled, backward=False)
    assert len(compiled.entries) == 1 and compiled.entries[0].inference is not None
    # ``scale`` is static: a new size is a new entry.
    with torch.no_grad():
        check(f, (torch.randn(3, 6), torch.randn(6)), compiled_fn=compiled, backward=False)
    assert len(compiled.entries) == 2


def test_dynamic_dims_names_an_unknown_input() -> None:
    compiled = aot.aot_function(lambda x: x * 2, functional_nop, dynamic_dims={"y": 0})
    with pytest.raises(ValueError, match="'y'"):
        compiled(torch.randn(3))


def test_size_one_is_specialized_and_recompiles() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x + y).relu() * 2

    compiled = aot.aot_function(f, Counting(), dynamic=True)
    make = lambda b: (torch.randn(b, 3, requires_grad=True), torch.randn(b, 3, requires_grad=True))  # noqa: E731
    for batch in (3, 4, 7):
        check(f, make(batch), compiled_fn=compiled)
    assert len(compiled.entries) == 1
    check(f, make(1), compiled_fn=compiled)  # size 1 broadcasts: its own entry
    assert len(compiled.entries) == 2
    check(f, make(5), compiled_fn=compiled)
    assert len(compiled.entries) == 2


def test_guard_on_a_size_equality_the_trace_relied_on() -> None:
    # Traced with equal sizes, x and y are one symbol (duck shaping, as torch): broadcasting y of
    # size 1 over x, or sizes that differ, must not reuse that entry.
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y

    compiled = aot.aot_function(f, Counting(), dynamic=True)
    check(f, (torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)), compiled_fn=compiled)
    check(f, (torch.randn(6, requires_grad=True), torch.randn(6, requires_grad=True)), compiled_fn=compiled)
    assert len(compiled.entries) == 1
    check(f, (torch.randn(6, 5, requires_grad=True), torch.randn(5, requires_grad=True)), compiled_fn=compiled)
    assert len(compiled.entries) == 2


def test_guard_on_a_branch_taken_on_a_size() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.shape[0] > 4 else x * 3

    compiled = aot.aot_function(f, Counting(), dynamic=True)
    for batch in (5, 6, 9):
        check(f, (torch.randn(batch, requires_grad=True),), compiled_fn=compiled)
    assert len(compiled.entries) == 1
    check(f, (torch.randn(3, requires_grad=True),), compiled_fn=compiled)
    assert len(compiled.entries) == 2


def test_guard_check_cost() -> None:
    compiled = aot.aot_function(lambda x, y: x @ y, functional_nop, dynamic=True)
    x, y = torch.randn(8, 4), torch.randn(4, 3)
    compiled(x, y)
    guard = compiled.entries[0].extra["guard"]
    runs = 2000
    start = time.perf_counter()
    for _ in range(runs):
        assert guard([x, y])
    micros = (time.perf_counter() - start) / runs * 1e6
    print(f"guard check: {micros:.1f} us for two 2-d inputs")
    assert micros < 500  # a few microseconds; loose for shared CI machines


def test_symbolic_graphs_share_one_compile_and_key_symbols_by_position() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sin().sum(0)

    backend = Counting()
    first = aot.aot_function(f, backend, dynamic=True)
    first(torch.randn(5, 3, requires_grad=True)).sum().backward()
    # Another function object, traced at other sizes: its symbols have other names in another ShapeEnv.
    second = aot.aot_function(lambda x: f(x), backend, dynamic=True)
    second(torch.randn(7, 9, requires_grad=True)).sum().backward()
    assert len(backend.graphs) == 2
    entry = first.entries[0]
    assert entry.forward is not None
    text = keys.canonical_graph(entry.forward)
    assert "input((c0, c1), (c1, 1)" in text and "symbols c0[2, int_oo] c1[2, int_oo]" in text


def test_backend_without_dynamic_shapes_is_named() -> None:
    def static_only(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return gm

    static_only.supports_dynamic_shapes = False  # type: ignore[attr-defined]
    compiled = aot.aot_function(lambda x: x.cos(), static_only, dynamic=True)
    with pytest.raises(BackendCompilerError, match=r"static_only.*symbolic sizes"):
        compiled(torch.randn(3, 4))
    # With static shapes it compiles.
    aot.aot_function(lambda x: x.cos(), static_only)(torch.randn(3, 4))


def _t_then_mul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.t_() * w).sum()


@pytest.mark.parametrize(
    "fn, requires_grad",
    [
        (lambda x: x.t_(), False),
        (lambda x: x.t_(), True),
        (lambda x: x.unsqueeze_(0).sum(), True),
        (lambda x: x.t_().mul_(2), False),
        (lambda x: x.t_().mul_(2), True),
        (lambda x: (x.transpose_(0, 1), x[1:]), False),
        (lambda x: x.as_strided_((x.shape[0] - 1, 5), (5, 1), 5) * 2, True),
    ],
    ids=["t_", "t_grad", "unsqueeze_grad", "t_then_write", "t_then_write_grad", "view_after", "as_strided_"],
)
@pytest.mark.parametrize("partition_fn", [None, min_cut_rematerialization_partition], ids=["default", "min_cut"])
def test_metadata_mutation_across_sizes(fn: Any, requires_grad: bool, partition_fn: Any) -> None:
    # The caller's tensor gets its final geometry with each call's sizes; the backward reads the sizes it
    # needs as ints saved by the forward, never off the input, whose geometry changed since.
    compiled = aot.aot_function(fn, functional_nop, dynamic=True, partition_fn=partition_fn)
    for batch in (3, 4, 6):
        make = _seeded(batch, lambda b: (torch.randn(b, 5, requires_grad=requires_grad) * 1,))
        check(fn, make, compiled_fn=compiled, backward=requires_grad)
    assert len(compiled.entries) == 1


def test_metadata_mutation_read_by_the_backward() -> None:
    compiled = aot.aot_function(_t_then_mul, functional_nop, dynamic_dims={"x": 0, "w": 1})
    for batch in (3, 4, 6):
        make = _seeded(
            batch, lambda b: (torch.randn(b, 5, requires_grad=True) * 1, torch.randn(5, b, requires_grad=True))
        )
        check(_t_then_mul, make, compiled_fn=compiled)
    assert len(compiled.entries) == 1


def _restrided_under_no_grad(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        x.t_()
    return x * 2


@pytest.mark.parametrize(
    "fn, requires_grad, match",
    [
        (lambda x, y: x.set_(y), False, r"set_\(\)"),
        (lambda x, y: x.resize_(y.shape[0] * 2, 5), False, r"resize_\(\) growing its storage"),
        (_restrided_under_no_grad, True, "under no_grad"),
    ],
    ids=["set_", "resize_", "t_under_no_grad"],
)
def test_geometry_changes_still_refused_with_inputs_untouched(fn: Any, requires_grad: bool, match: str) -> None:
    compiled = aot.aot_function(fn, functional_nop, dynamic=True)
    x, y = torch.randn(3, 5, requires_grad=requires_grad), torch.randn(4, 5)
    before = x.detach().clone()
    with pytest.raises(DynamicShapesUnsupportedError, match=match):
        compiled(x, y)
    assert x.shape == (3, 5) and x.untyped_storage().nbytes() == 60 and torch.equal(x.detach(), before)
    assert isinstance(DynamicShapesUnsupportedError("x"), NotImplementedError)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.view(x.shape[0] * 5),
        lambda x: x.narrow(0, 0, x.shape[0] - 1),
        lambda x: (x + 1).view(x.shape[0], 5, 1),
        lambda x: (x * 2).split(x.shape[0] // 2),
        lambda x: x.sum(1, keepdim=True).expand(x.shape[0], 3),
        lambda x: (x.view(x.shape[0] * 5), (x * 3).view(-1, x.shape[0])),
    ],
    ids=["view_of_input", "narrow_of_input", "view_of_intermediate", "split_floordiv", "expand", "two"],
)
def test_views_taken_with_symbolic_sizes(fn: Any) -> None:
    # The epilogue replays them with each call's sizes (``meta.symbolic.RuntimeSize``).
    compiled = aot.aot_function(fn, functional_nop, dynamic=True)
    for batch in (4, 6, 8):  # even: split's number of chunks is guarded; 10 % 5 == 0 is guarded by view
        check(fn, (torch.randn(batch, 5, requires_grad=True),), compiled_fn=compiled)
    assert len(compiled.entries) == 1


def test_inputs_sharing_memory_read_only_stay_symbolic() -> None:
    def read(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * 2 + b

    compiled = aot.aot_function(read, functional_nop, dynamic=True)
    for length in (4, 6):
        tokens = torch.randn(length + 1)
        check(read, (tokens[:-1], tokens[1:]), compiled_fn=compiled, backward=False)
    assert len(compiled.entries) == 1


def _write_first(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    a.add_(c.sum())
    return a * 2 + b + c.mean()


def _write_second_read_first(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    b.mul_(2)
    return a.sin().sum() * c


def _halves(n: int, m: int) -> Any:
    base = torch.randn(2 * n)
    return base[:n], base[n:], torch.randn(m)


def _overlapping_rows(n: int, m: int) -> Any:
    base = torch.randn(n, 3, requires_grad=True) * 1
    return base, base[1:], torch.randn(m, requires_grad=True)


def _transposed(n: int, m: int) -> Any:
    base = torch.randn(n, n, requires_grad=True) * 1
    return base[0], base.t()[0], torch.randn(m, requires_grad=True)


@pytest.mark.parametrize(
    ("fn", "make"),
    [(_write_first, _halves), (_write_second_read_first, _overlapping_rows), (_write_first, _transposed)],
    ids=["halves", "overlapping_rows", "row_and_column"],
)
def test_inputs_sharing_memory_one_written_are_specialized(fn: Any, make: Any) -> None:
    # Inputs sharing memory, one written, are merged into a synthetic base as on static shapes: traced with
    # their sizes as constants (guarded), while the other inputs' sizes stay symbolic.
    compiled = aot.aot_function(fn, functional_nop, dynamic=True)
    backward = make is not _halves
    for n, m in ((4, 5), (4, 7), (4, 9), (6, 5), (4, 5)):
        args = _seeded(n * 100 + m, lambda seed: make(seed // 100, seed % 100))
        check(fn, args, compiled_fn=compiled, backward=backward)
        if (n, m) == (4, 9):
            assert len(compiled.entries) == 1  # c's size is symbolic
    assert len(compiled.entries) == 2  # a new size of the shared memory compiles once more; the old one is reused


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.add_(1).sum(),
        lambda x: x.mul_(2),
        lambda x: x.view(-1),
        lambda x: x[1:],
        lambda x: (x * 2)[:, :1],
        lambda x: x.sum(1, keepdim=True).expand(-1, 3),
    ],
    ids=["mutate", "mutate_return", "view_of_input", "slice_of_input", "view_of_intermediate", "expand"],
)
def test_mutation_and_aliasing_across_sizes(fn: Any) -> None:
    compiled = aot.aot_function(fn, functional_nop, dynamic=True)
    for batch in (3, 4, 6):
        check(fn, (torch.randn(batch, 5),), compiled_fn=compiled, backward=False)
    assert len(compiled.entries) == 1


@pytest.mark.parametrize("model", ["mlp", "attention"])
def test_torch_compile_seven_sizes_compiles_as_aot_eager(model: str) -> None:
    from torch._dynamo.backends.common import aot_autograd

    from aot.dynamo import make_backend

    counts = {"aotfx": 0, "aot_eager": 0}

    def counter(name: str) -> Any:
        def compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
            counts[name] += 1
            return aot.backends.make_boxed_func(gm.forward)

        return compiler

    torch.manual_seed(0)
    module: torch.nn.Module
    if model == "mlp":
        module, sizes, width = MLP(), [(2,), (3,), (4,), (5,), (6,), (7,), (9,)], 6
    else:  # batch and sequence length vary
        module, sizes, width = Attention(), [(2, 5), (3, 7), (2, 9), (4, 3), (3, 12), (5, 6), (2, 8)], 16
    backends = {"aotfx": make_backend(counter("aotfx")), "aot_eager": aot_autograd(fw_compiler=counter("aot_eager"))}
    for backend in backends.values():
        torch._dynamo.reset()
        compiled = torch.compile(module, backend=backend)
        _check_module(module, compiled, lambda s: torch.randn(*s, width, requires_grad=True), sizes)
    torch._dynamo.reset()
    # One static pair for the first size, then one dynamic pair once Dynamo marks the batch dynamic.
    assert counts["aotfx"] == counts["aot_eager"] == 4


def test_inductor_compiles_symbolic_graphs() -> None:
    from aot.backends import inductor, inductor_decompositions

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).relu().sum(1) * x.shape[0]

    compiled = aot.aot_function(f, inductor, decompositions=inductor_decompositions(), dynamic_dims={"x": 0})
    w = torch.randn(4, 3, requires_grad=True)
    for batch in (3, 5, 9):
        check(f, (torch.randn(batch, 4, requires_grad=True), w), compiled_fn=compiled, calls=1)
    assert len(compiled.entries) == 1


def _seeded(batch: int, make: Any) -> Any:
    def factory() -> Any:
        torch.manual_seed(batch)
        return make(batch)

    return factory


def test_non_leaf_and_duplicated_inputs_and_inference_mode() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * y).sum(0)

    non_leaf = aot.aot_function(f, functional_nop, dynamic=True)
    duplicated = aot.aot_function(f, functional_nop, dynamic=True)
    for batch in (3, 4, 6):
        make = _seeded(batch, lambda b: (torch.randn(b, 5, requires_grad=True) * 2, torch.randn(b, 5)))
        check(f, make, compiled_fn=non_leaf)
        same = _seeded(batch, lambda b: (lambda t: (t, t))(torch.randn(b, 5, requires_grad=True)))
        check(f, same, compiled_fn=duplicated)
    assert len(non_leaf.entries) == len(duplicated.entries) == 1
    with torch.inference_mode():
        flat = aot.aot_function(lambda x: x.view(x.shape[0] * 5) * 2, functional_nop, dynamic=True)
        for batch in (3, 4, 6):
            x = torch.randn(batch, 5)
            torch.testing.assert_close(flat(x), x.view(-1) * 2)
    assert len(flat.entries) == 1


def test_a_branch_on_a_value_refused_as_with_static_shapes() -> None:
    # Sizes that depend on data (nonzero, a mask) compile with unbacked symbols: tests/test_data_dependent.py.
    from aot.errors import DataDependentError

    with pytest.raises(DataDependentError, match="needs the values of a tensor"):
        aot.aot_function(lambda x: x * 2 if x.sum() > 0 else x, functional_nop, dynamic=True)(torch.randn(3, 4))


_WARM_SCRIPT = textwrap.dedent(
    """
    import json, torch, aot
    from aot import cache

    def mlp(x, w):
        return (x @ w).relu().sum(1) * x.shape[0]

    torch.manual_seed(0)
    w = torch.randn(8, 3, requires_grad=True)
    compiled = aot.aot_function(mlp, aot.nop, dynamic_dims={"x": 0})
    outs = []
    for batch in (3, 5, 9):
        x = torch.randn(batch, 8, requires_grad=True)
        out = compiled(x, w)
        out.sum().backward()
        torch.testing.assert_close(out, mlp(x, w))
        outs.append(out.sum().item())
    print(json.dumps({**cache.stats().__dict__, "entries": len(compiled.entries), "outs": outs,
                      "grad": w.grad.sum().item()}))
    """
)


def test_warm_start_of_a_symbolic_entry_in_a_fresh_process(tmp_path: pathlib.Path) -> None:
    # The symbolic graphs go to the disk cache keyed with their symbols by position: a fresh process
    # traces again (the guard is not stored) but compiles nothing, and serves every size from one entry.
    env = {**os.environ, keys.ENV_DIR: str(tmp_path / "cache")}
    root = pathlib.Path(__file__).resolve().parents[1]

    def run() -> dict[str, Any]:
        result = subprocess.run(
            [sys.executable, "-c", _WARM_SCRIPT], env=env, cwd=root, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

    cold = run()
    assert (cold["entries"], cold["misses"], cold["disk_writes"], cold["backend_compiles"]) == (1, 2, 2, 2)
    warm = run()
    assert (warm["entries"], warm["disk_hits"], warm["misses"], warm["backend_compiles"]) == (1, 2, 0, 0)
    assert (warm["outs"], warm["grad"]) == (cold["outs"], cold["grad"])


def _tanh_sq(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w).pow(2).sum(1) * x.shape[0]


def test_higher_order_derivatives_across_sizes() -> None:
    # The backward, compiled as a function of its own for create_graph=True, is dynamic too (the user's
    # dynamic_dims name the forward's inputs, not the backward's).
    compiled = aot.aot_function(_tanh_sq, aot.nop, dynamic_dims={"x": 0})
    for batch in (3, 5, 9):
        torch.manual_seed(batch)
        x, w = torch.randn(batch, 6), torch.randn(6, 4)
        results = [
            derivatives(fn, [x.clone().requires_grad_(), w.clone().requires_grad_()], 3) for fn in (_tanh_sq, compiled)
        ]
        assert_close(results[1], results[0], grad=True)
    assert len(compiled.entries) == 1


def test_double_backward_of_a_module_with_every_dimension_dynamic() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2))
    compiled = aot.aot_module(copy.deepcopy(model), aot.nop, dynamic=True)
    for batch in (3, 5, 9):
        x = torch.randn(batch, 6)
        results = []
        for module in (model, compiled):
            inp = x.clone().requires_grad_()
            results.append(derivatives(module, [inp], 2, wrt=[inp, *module.parameters()]))
        assert_close(results[1], results[0], grad=True, model=True)
    assert len(compiled.compiled.entries) == 1


def test_batch_norm_running_stats_written_under_a_dynamic_batch() -> None:
    # The common real case of an input mutation under dynamic shapes: the running stats are buffers
    # (static), written in place by a forward whose batch varies; one compile serves every batch.
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    backend = Counting()
    compiled = aot.aot_module(copy.deepcopy(eager), backend)
    for batch in (2, 3, 5, 8):
        x = torch.randn(batch, 3, 8, 8)
        torch._dynamo.mark_dynamic(x, 0)
        for module in (eager, compiled):
            module.zero_grad()
        expected, out = eager(x), compiled(x)
        expected.sum().backward()
        out.sum().backward()
        torch.testing.assert_close(out, expected)
        for (name, b), b_eager in zip(compiled.named_buffers(), eager.buffers(), strict=True):
            torch.testing.assert_close(b, b_eager, msg=name)
        for p, p_eager in zip(compiled.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, p_eager.grad)
    assert len(compiled.compiled.entries) == 1
    assert len(backend.graphs) == 2


def _multi_margin_loss_of_a_vector(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.multi_margin_loss(x, target, reduction="none")


def _multilabel_margin_loss_of_a_vector(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.MultiLabelMarginLoss(reduction="none")(x, target)


def _dropout_in_eval(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.dropout(x, 0.5, training=False)


def _dropout_of_nothing(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.dropout(x, 0.0, training=True) * 2


# torch's Python-dispatcher kernels, which only symbolic traces run, gave a loss of shape [1] where
# eager's is 0-d, and dropout that drops nothing a copy where eager returns its input (meta.python_kernels).
@pytest.mark.parametrize(
    ("fn", "args"),
    [
        (_multi_margin_loss_of_a_vector, (torch.randn(10, requires_grad=True), torch.tensor(3))),
        (_multilabel_margin_loss_of_a_vector, (torch.randn(10, requires_grad=True), torch.randint(0, 10, (10,)))),
        (_dropout_in_eval, (torch.randn(6, 5, requires_grad=True),)),
        (_dropout_in_eval, (torch.randn(6, 5),)),
        (_dropout_of_nothing, (torch.randn(6, 5, requires_grad=True),)),
    ],
    ids=["multi_margin_loss", "multilabel_margin_loss", "dropout_eval", "dropout_eval_no_grad", "dropout_p0"],
)
def test_python_dispatcher_kernel_matches_eager(fn: Any, args: tuple[torch.Tensor, ...]) -> None:
    check(fn, args, compiled_fn=aot.aot_function(fn, aot.nop, dynamic=True))


# The fake of an empty input was given a storage of negative size (its span's end counted a size-0
# dimension as reaching one element back), and the compile failed where eager runs.
@pytest.mark.parametrize("shape", [(0, 0), (0, 0, 0), (2, 0, 3)])
def test_empty_input(shape: tuple[int, ...]) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.roll(1, 0) * 2

    check(f, (torch.randn(shape, requires_grad=True),), compiled_fn=aot.aot_function(f, aot.nop, dynamic=True))


def test_python_kernel_corrections_apply_only_inside_symbolic_traces() -> None:
    x = torch.randn(3)
    with enable_python_dispatcher(), python_kernels.eager_kernels():
        assert torch.ops.aten.dropout(x, 0.5, False) is x
    with enable_python_dispatcher():  # torch's own kernel, unchanged for everyone else
        assert torch.ops.aten.dropout(x, 0.5, False) is not x


def _slice_of_leaf(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    base = torch.randn(batch + 2, 5, requires_grad=True)
    return base, base[1:-1]


def _slice_of_non_leaf(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    base = torch.randn(batch + 2, 5, requires_grad=True)
    return base, base.clone()[1:-1]


def _slice_taken_under_no_grad(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    base = torch.randn(batch + 2, 5, requires_grad=True)
    with torch.no_grad():
        return base, base.clone().requires_grad_()[1:-1]


@pytest.mark.parametrize("make", [_slice_of_leaf, _slice_of_non_leaf, _slice_taken_under_no_grad])
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x * 2).sum(1),
        lambda x: x[1:],
        lambda x: x.mul_(2),
        lambda x: x.add_(1).sum() + x.sum(),
        lambda x: x.t_() * 1,
    ],
    ids=["read", "view_out", "write", "write_read", "t_"],
)
def test_input_of_symbolic_size_viewing_a_base_requiring_grad(fn: Any, make: Any) -> None:
    # The base's gradient (or eager's error: a leaf's view written, a no_grad view written) as eager's.
    compiled = aot.aot_function(fn, functional_nop, dynamic=True)
    for batch in (3, 4, 6):
        results: list[Any] = []
        for f in (fn, compiled):
            torch.manual_seed(batch)
            base, x = make(batch)
            try:
                out = f(x)
            except RuntimeError as error:
                results.append(type(error))
                continue
            weights = torch.arange(out.numel(), dtype=out.dtype).view(out.shape)
            (out * weights).sum().backward()
            results.append((out.detach().clone(), base.grad, x.shape, out._base is x._base))
        if not isinstance(results[0], tuple):
            assert results[1] == results[0]
            continue
        assert isinstance(results[1], tuple)
        torch.testing.assert_close(results[1][:2], results[0][:2])
        assert results[1][2:] == results[0][2:]
    assert len(compiled.entries) <= 1  # none where eager's error is raised while compiling


def test_write_into_memory_the_op_reads_specializes_its_sizes() -> None:
    # Circular padding copies between overlapping slices of one tensor: whether a read follows a write
    # depends on the sizes, so they are specialized (guarded), and each size compiles and equals eager.
    module = torch.nn.CircularPad2d(2)
    compiled = aot.aot_module(module, aot.nop, dynamic=True)
    for batch in (2, 3, 2):
        check(module, _seeded(batch, lambda b: (torch.randn(b, 3, 4, 5, requires_grad=True),)), compiled_fn=compiled)
    assert len(compiled.compiled.entries) == 2
