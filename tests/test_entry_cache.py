"""Whole compiled entries persisted for GraphModule programs: a new process skips tracing, same results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import aot
from aot.cache import entries as entry_cache

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = r"""
import json
import torch
from torch.fx.experimental.proxy_tensor import make_fx
import aot

def program(x, w1, b1, w2, buf):
    h = torch.relu(x @ w1 + b1)
    buf.add_(1)
    return (h @ w2).sum(1), h.t()

g = torch.Generator().manual_seed(0)
args = [torch.randn(4, 8, generator=g), torch.randn(8, 16, generator=g).requires_grad_(),
        torch.randn(16, generator=g).requires_grad_(), torch.randn(16, 3, generator=g).requires_grad_(), torch.zeros(3)]
gm = make_fx(program)(*[a.detach().clone() for a in args])
eager_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
forward = aot.aot_module_simplified(gm, args, aot.nop)
out, ht = forward(*args)
out.sum().backward()
e_out, e_ht = program(*eager_args)
e_out.sum().backward()
ok = (torch.allclose(out, e_out) and torch.allclose(ht, e_ht) and ht._base is not None
      and all(torch.allclose(a.grad, b.grad) for a, b in zip(args[1:4], eager_args[1:4]))
      and torch.equal(args[4], eager_args[4]) and args[4]._version == eager_args[4]._version)
print(json.dumps({"restored": bool(forward.compiled.entries[0].extra.get("restored")), "ok": bool(ok)}))
"""


def _run(cache_dir: Path) -> dict[str, bool]:
    env = {**os.environ, "AOTFX_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    answer: dict[str, bool] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def test_second_process_restores_the_entry_with_eagers_results(tmp_path):
    cache_dir = tmp_path / "cache"
    assert _run(cache_dir) == {"restored": False, "ok": True}
    assert _run(cache_dir) == {"restored": True, "ok": True}


def test_damaged_entries_are_recompiled(tmp_path):
    cache_dir = tmp_path / "cache"
    _run(cache_dir)
    for entry in cache_dir.glob("*.aotc"):
        entry.write_bytes(entry.read_bytes()[:-7])  # truncate every entry
    assert _run(cache_dir) == {"restored": False, "ok": True}


def test_python_functions_are_never_persisted_whole():
    """A function's source does not pin its globals and closures: no sound cross-process key."""
    compiled = aot.aot_function(lambda x: x * 2, aot.nop, cache_dir="/nonexistent-never-used")
    assert compiled._program_key is None
    assert entry_cache.entry_key("a" * 64, ("sig",)) != entry_cache.entry_key("b" * 64, ("sig",))
