"""The compile cache: canonical keys (both directions), counters, shared compiles, the persistent store."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import aot
from aot import cache
from aot.cache import keys
from aot.cache import store as cache_store
from aot.cache.keys import KeyContext, graph_key
from aot.cache.store import CacheWarning
from aot.compile.partition import default_partition

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONTEXT = KeyContext.of({}, default_partition)


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()
    yield
    cache.clear()


def _graph(fn, *inputs):
    """``fn`` traced on fakes of ``inputs`` (real tensors: shape, stride, dtype, requires_grad kept)."""
    mode = FakeTensorMode()
    fakes = [mode.from_tensor(x) for x in inputs]
    with mode:
        return make_fx(fn)(*fakes)


def _key(fn, *inputs, compiler=aot.nop, context=CONTEXT):
    return graph_key(_graph(fn, *inputs), compiler, context)


def _mlp(x, w):
    return (x @ w).relu() * 2.0


X, W = torch.randn(4, 8), torch.randn(8, 3)


def test_renamed_values_and_stack_traces_share_a_key():
    gm = _graph(_mlp, X, W)
    renamed = _graph(_mlp, X, W)
    for position, node in enumerate(renamed.graph.nodes):
        if node.op != "output":
            node._rename(f"user_value_{position}")
        node.meta["stack_trace"] = f'File "elsewhere.py", line {position}'
    renamed.recompile()
    assert gm.code != renamed.code
    assert graph_key(gm, aot.nop, CONTEXT) == graph_key(renamed, aot.nop, CONTEXT)
    assert len(graph_key(gm, aot.nop, CONTEXT)) == 64


def _with_const(value):
    return lambda x: x + torch.tensor(value)


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(lambda: _key(_mlp, torch.randn(5, 8), W), id="shape"),
        pytest.param(lambda: _key(_mlp, X.double(), W.double()), id="dtype"),
        pytest.param(lambda: _key(_mlp, torch.randn(8, 4).t(), W), id="stride"),
        pytest.param(lambda: _key(_mlp, X.requires_grad_(False), W.clone().requires_grad_()), id="requires_grad"),
        pytest.param(lambda: _key(lambda x, w: (x @ w).sigmoid() * 2.0, X, W), id="op"),
        pytest.param(lambda: _key(lambda x, w: (x @ w).relu() * 3.0, X, W), id="scalar"),
        pytest.param(lambda: _key(lambda x, w: (x @ w).relu() * 2, X, W), id="int-vs-float"),
        pytest.param(lambda: _key(_mlp, X, W, compiler=aot.boxed_nop), id="compiler"),
        pytest.param(
            lambda: _key(
                _mlp, X, W, context=KeyContext.of({torch.ops.aten.relu.default: torch.relu}, default_partition)
            ),
            id="decompositions",
        ),
    ],
)
def test_anything_that_matters_changes_the_key(other):
    assert _key(_mlp, X, W) != other()


def test_constants_are_keyed_by_content():
    x = torch.randn(3)
    assert _key(_with_const([1.0, 2.0, 3.0]), x) == _key(_with_const([1.0, 2.0, 3.0]), x)
    assert _key(_with_const([1.0, 2.0, 3.0]), x) != _key(_with_const([1.0, 2.0, 4.0]), x)
    assert _key(_with_const([0.0, 0.0, 0.0]), x) != _key(_with_const([-0.0, 0.0, 0.0]), x)


def test_closures_are_identified_by_object():
    def make():
        return lambda gm, example_inputs: gm

    first, second = make(), make()
    assert _key(_mlp, X, W, compiler=first) != _key(_mlp, X, W, compiler=second)
    assert not keys.function_identity(first).stable and keys.function_identity(aot.nop).stable

    class Declared:
        cache_key = "my-backend v1 opt=3"

        def __call__(self, gm, example_inputs):
            return gm

    assert _key(_mlp, X, W, compiler=Declared()) == _key(_mlp, X, W, compiler=Declared())


def test_graph_without_example_values_is_compiled_uncached():
    gm = torch.fx.symbolic_trace(lambda x: x.sin())  # placeholders carry no shapes: no trustworthy key
    with pytest.raises(keys.Uncacheable):
        graph_key(gm, aot.nop, CONTEXT)
    compiler = Counting()
    for _ in range(2):
        keys.compile("forward", gm, [None], compiler, CONTEXT)
    assert compiler.calls == 2 and cache.stats().uncacheable == 2


class Counting:
    """A compiler counting its calls; by object identity in keys, so in-process only."""

    def __init__(self):
        self.calls = 0

    def __call__(self, gm, example_inputs):
        self.calls += 1
        return gm


def test_hits_misses_and_counters():
    compiler = Counting()
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 3, requires_grad=True)
    for fn in (_mlp, lambda x, w: (x @ w).relu() * 2.0):  # two function objects, one graph
        out = aot.aot_function(fn, compiler)(x, w)
        out.sum().backward()
    assert compiler.calls == 2  # one forward, one backward
    stats = cache.stats()
    assert (stats.misses, stats.hits, stats.backend_compiles) == (2, 2, 2)
    torch.testing.assert_close(out, _mlp(x, w))


def test_twelve_identical_blocks_compile_once_per_graph():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.up, self.down = nn.LayerNorm(16), nn.Linear(16, 32), nn.Linear(32, 16)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    torch.manual_seed(0)
    fw, bw = Counting(), Counting()
    blocks = [Block() for _ in range(12)]
    compiled = [aot.aot_module(block, fw, bw) for block in blocks]
    x = torch.randn(2, 5, 16, requires_grad=True)
    eager, out = x, x
    for block, cblock in zip(blocks, compiled, strict=True):
        eager, out = block(eager), cblock(out)
    torch.testing.assert_close(out, eager)
    out.sum().backward()
    assert (fw.calls, bw.calls) == (1, 1)
    assert cache.stats().hits == 22


def test_same_function_compiled_twice_skips_the_trace():
    compiler = Counting()
    x = torch.randn(3, requires_grad=True)

    def f(t):
        return t.sin().sum()

    aot.aot_function(f, compiler)(x)
    second = aot.aot_function(f, compiler)
    second(x)
    assert compiler.calls == 1 and cache.stats().trace_reuses == 1
    assert len(second.entries) == 1
    with cache.disabled():
        aot.aot_function(f, compiler)(x)
    assert compiler.calls == 2


# --------------------------------------------------------------------------------------------
# The persistent cache


def _compile_to(directory, recwarn_ok=True):
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 3, requires_grad=True)
    out = aot.aot_function(lambda x, w: (x @ w).relu() * 2.0, aot.nop, cache_dir=directory)(x, w)
    out.sum().backward()
    torch.testing.assert_close(out, _mlp(x, w))
    torch.testing.assert_close(w.grad, torch.autograd.grad(_mlp(x, w).sum(), w)[0])


def _entries(directory):
    return sorted(pathlib.Path(directory).glob(f"*{cache_store.SUFFIX}"))


_SCRIPT = textwrap.dedent(
    """
    import json, torch, aot
    from aot import cache
    torch.manual_seed(0)
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 3, requires_grad=True)
    out = aot.aot_function(lambda x, w: (x @ w).relu() * 2.0, aot.nop)(x, w)
    out.sum().backward()
    print(json.dumps({**cache.stats().__dict__, "out": out.sum().item(), "grad": w.grad.sum().item()}))
    """
)


def _run_script(directory):
    env = {**os.environ, cache.ENV_DIR: str(directory)}
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_persistent_round_trip_in_fresh_processes(tmp_path):
    directory = tmp_path / "cache"
    cold = _run_script(directory)
    assert (cold["misses"], cold["disk_writes"], cold["backend_compiles"]) == (2, 2, 2)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(entry.stat().st_mode) == 0o600 for entry in _entries(directory))
    warm = _run_script(directory)
    assert (warm["disk_hits"], warm["misses"], warm["backend_compiles"]) == (2, 0, 0)
    assert (warm["out"], warm["grad"]) == (cold["out"], cold["grad"])


def _damage_truncate(path):
    path.write_bytes(path.read_bytes()[:-7])


def _damage_flip(path):
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))


def _damage_garbage(path):
    path.write_bytes(b"\x80\x04garbage")


def _damage_permissions(path):
    path.chmod(0o666)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_damage_truncate, "truncated"),
        (_damage_flip, "checksum"),
        (_damage_garbage, "not an aotfx cache entry"),
        (_damage_permissions, "writable by group or others"),
    ],
)
def test_damaged_or_unsafe_entries_are_ignored_and_recompiled(tmp_path, damage, reason):
    _compile_to(tmp_path)
    entries = _entries(tmp_path)
    assert len(entries) == 2
    for path in entries:
        damage(path)
    cache.clear()
    with pytest.warns(CacheWarning, match=reason):
        _compile_to(tmp_path)
    assert cache.stats().backend_compiles == 2 and cache.stats().disk_hits == 0
    cache.clear()
    _compile_to(tmp_path)  # rewritten whole: a clean warm hit now
    assert cache.stats().disk_hits == 2


def test_foreign_entry_and_foreign_owner_are_ignored(tmp_path, monkeypatch):
    _compile_to(tmp_path)
    first, second = _entries(tmp_path)
    second.write_bytes(first.read_bytes())  # a valid entry, stored under another key
    first.unlink()
    cache.clear()
    with pytest.warns(CacheWarning, match="another key"):
        _compile_to(tmp_path)
    cache.clear()
    monkeypatch.setattr(os, "getuid", lambda: os.geteuid() + 1)
    with pytest.warns(CacheWarning, match="another user"):
        _compile_to(tmp_path)
    assert cache.stats().disk_hits == 0 and cache.stats().backend_compiles == 2


def test_directory_open_to_others_is_not_used(tmp_path):
    tmp_path.chmod(0o777)
    with pytest.warns(CacheWarning, match="writable by group/others"):
        _compile_to(tmp_path)
    assert _entries(tmp_path) == [] and cache.stats().disk_writes == 0


_WRITER = textwrap.dedent(
    """
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("cache_store", sys.argv[1])
    store = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(store)
    for round in range(300):
        store.store(sys.argv[2], "ab" * 32, sys.argv[3].encode() * (1000 + round), 0.5)
    """
)


def test_two_processes_writing_one_key_leave_one_valid_entry(tmp_path):
    # the store needs only the standard library: load it alone so both writers start at once.
    source = str(ROOT / "aot" / "cache" / "store.py")
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, source, str(tmp_path), tag]) for tag in ("first", "second")
    ]
    assert [writer.wait(timeout=60) for writer in writers] == [0, 0]
    assert [path.name for path in tmp_path.iterdir()] == ["ab" * 32 + cache_store.SUFFIX]
    payload, seconds = cache_store.load(tmp_path, "ab" * 32)
    assert payload in (b"first" * 1299, b"second" * 1299) and seconds == 0.5


def test_cli_cache_info_and_clear(tmp_path, capsys):
    from aot.__main__ import main

    _compile_to(tmp_path)
    assert main(["cache", "info", "--dir", str(tmp_path)]) == 0
    assert "2 entries" in capsys.readouterr().out
    assert main(["cache", "clear", "--dir", str(tmp_path)]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert _entries(tmp_path) == []


def test_keys_change_with_the_package_source(tmp_path):
    # A partitioner's helper or a functionalization rule edited: persisted compiles of the old code
    # are not reused (a function's own code hash misses edits in what it calls).
    assert keys.package_source_hash() in KeyContext.of({}, default_partition).versions
    root = pathlib.Path(keys.__file__).resolve().parents[2]
    for package in ("aot", "meta", "wrappers"):
        shutil.copytree(root / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    before = keys.source_hash(tmp_path)
    assert before == keys.package_source_hash()
    edited = tmp_path / "aot" / "compile" / "min_cut.py"
    edited.write_text(edited.read_text() + "\n# edited\n")
    assert keys.source_hash(tmp_path) != before
