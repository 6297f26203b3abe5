"""Dynamic shapes: backend compiles and compile time over 20 sequence lengths, and the per-call cost.

The demo GPT (``aot.demo``) trains one step at each of 20 sequence lengths:

- under ``torch.compile`` with ``backend="aotfx"`` and with torch's own ``aot_eager``
  (Dynamo marks the length dynamic after it changes once);
- through ``aot_module`` with static shapes, and with the length marked dynamic.

Then the per-call overhead of a compiled call on an entry with static shapes and on one
with symbolic sizes (signature, guard), and the guard check alone.

    python benchmarks/bench_dynamic.py
"""

from __future__ import annotations

import time
import timeit
from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd

import aot
from aot.demo import GPTConfig, make_model
from aot.dynamo import make_backend

LENGTHS = list(range(4, 24))  # 20 sequence lengths


def _counting(counts: dict[str, int], name: str) -> Any:
    def compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        counts[name] = counts.get(name, 0) + 1
        return aot.backends.make_boxed_func(gm.forward)

    return compiler


def _train(model: torch.nn.Module, step: Any, mark: bool = False) -> float:
    start = time.perf_counter()
    for length in LENGTHS:
        tokens = torch.randint(0, 64, (4, length + 1))
        idx, targets = tokens[:, :-1], tokens[:, 1:]
        if mark:
            torch._dynamo.mark_dynamic(idx, 1)
            torch._dynamo.mark_dynamic(targets, 1)
        step(idx, targets).backward()
        model.zero_grad()
    return time.perf_counter() - start


def compile_counts() -> None:
    config = GPTConfig(seq_len=32)
    counts: dict[str, int] = {}
    rows = []
    for name, backend in (
        ("torch.compile aotfx", make_backend(_counting(counts, "torch.compile aotfx"))),
        ("torch.compile aot_eager", aot_autograd(fw_compiler=_counting(counts, "torch.compile aot_eager"))),
    ):
        torch._dynamo.reset()
        model = make_model(config, 0)
        seconds = _train(model, torch.compile(model, backend=backend))
        rows.append((name, counts[name], seconds))
    torch._dynamo.reset()
    for name, mark in (("aot_module static", False), ("aot_module mark_dynamic(seq)", True)):
        model = make_model(config, 0)
        compiled = aot.aot_module(model, _counting(counts, name))
        seconds = _train(model, compiled, mark)
        rows.append((name, counts[name], seconds))
    print(f"{len(LENGTHS)} sequence lengths, one training step each (demo GPT, CPU)")
    print(f"{'':32} backend compiles   total time (s)")
    for name, count, seconds in rows:
        print(f"{name:32} {count:16} {seconds:16.1f}")


def call_overhead() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x @ y

    x, y = torch.randn(8, 4), torch.randn(4, 3)

    def best(fn: Any) -> float:
        return min(timeit.repeat(fn, number=5000, repeat=5)) / 5000 * 1e6

    with torch.no_grad():
        static = aot.aot_function(f, aot.nop)
        dynamic = aot.aot_function(f, aot.nop, dynamic=True)
        static(x, y), dynamic(x, y)
        guard = dynamic.entries[0].extra["guard"]
        print("\nper call (us), x @ y on (8, 4) and (4, 3), no_grad:")
        print(f"  eager {best(lambda: f(x, y)):.1f}")
        print(f"  static entry {best(lambda: static(x, y)):.1f}")
        print(f"  dynamic entry (dynamic=True) {best(lambda: dynamic(x, y)):.1f}")
        print(f"  guard check alone {best(lambda: guard([x, y])):.1f}")


if __name__ == "__main__":
    compile_counts()
    call_overhead()
