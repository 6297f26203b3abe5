"""Per-call overhead over eager, aotfx vs torch's AOTAutograd, with an A/A run beside for the noise floor.

Overhead = (compiled per-call time) - (eager per-call time), tiny inputs, nop compiler, one thread.
Four compiled objects per workload run interleaved (the order rotates every round): eager, ours,
a second independent compile of ours (``ours'``: the A/A pair, whose ratio shows the noise), torch.
Workloads: the MLP and transformer block of ``bench_vs_torch`` (modules: parameters are inputs), and
the synthetic-base programs (2 aliased inputs + 1 mutation; 4 aliased + 2 mutations).

``python benchmarks/bench_overhead.py [--rounds 31] [--modes step,no_grad] [--workloads mlp ...]``
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch._functorch.aot_autograd import aot_function as torch_aot_function
from torch._functorch.compilers import nop

sys.path.insert(0, str(Path(__file__).parent))

import bench_vs_torch as bench

import aot

IMPLS = ("eager", "ours", "ours'", "torch")
LONG = ("lstm", "chain")
MAIN = ("mlp", "transformer", "lstm", "chain")  # the geomean the target is over


def aliased_2_1(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    a.mul_(2)  # a and b overlap: merged into one synthetic base
    return (b * w).sum()


def aliased_4_2(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    a.add_(1)
    c.mul_(2)
    return (b * w).sum() + (d * w).sum()


class _Aliased:
    """A workload whose arguments are views of one fresh buffer per call (the mutation must not pile up)."""

    def __init__(self, name: str, fn: Any, members: int) -> None:
        self.name, self.target, self.is_module, self.members = name, fn, False, members
        self.w = torch.randn(4, requires_grad=True)

    @property
    def args(self) -> tuple[torch.Tensor, ...]:
        base = torch.randn(4 + self.members)
        return (*(base[k : k + 4] for k in range(self.members)), self.w)


def workloads() -> dict[str, Any]:
    built = bench.build_workloads(2000, 100)
    return {
        "mlp": built["mlp"],
        "transformer": built["transformer"],
        "lstm": built["lstm"],  # 100 steps
        "chain": built["chain"],  # 2000 ops
        "alias2+1": _Aliased("alias2+1", aliased_2_1, 2),
        "alias4+2": _Aliased("alias4+2", aliased_4_2, 4),
    }


def compile_with(impl: str, wl: Any) -> Any:
    if impl == "eager":
        return wl.target
    if impl in ("ours", "ours'"):
        return (aot.aot_module if wl.is_module else aot.aot_function)(wl.target, aot.nop)
    if wl.is_module:
        return bench.compile_with("torch", wl)
    return torch_aot_function(wl.target, fw_compiler=nop, bw_compiler=nop)


def measure(wl: Any, mode: str, rounds: int) -> dict[str, float]:
    run = bench.step if mode == "step" else bench.forward_only
    fns = {impl: compile_with(impl, wl) for impl in IMPLS}
    args = wl.args
    fixed = not isinstance(wl, _Aliased)
    for fn in fns.values():
        for _ in range(5):
            run(fn, args if fixed else wl.args)
    batch = 200 if wl.name not in LONG else 10  # the long programs: milliseconds a call
    samples: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    arg_sets = [args] * batch if fixed else [wl.args for _ in range(batch)]
    gc.collect()
    for r in range(rounds):
        for impl in bench.rotated(IMPLS, r):
            fn = fns[impl]
            if not fixed:
                arg_sets = [wl.args for _ in range(batch)]
            start = time.perf_counter()
            for call_args in arg_sets:
                run(fn, call_args)
            samples[impl].append((time.perf_counter() - start) / batch)
    return {impl: statistics.median(s) for impl, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--modes", default="step,no_grad")
    parser.add_argument("--workloads", nargs="*")
    options = parser.parse_args()
    torch.set_num_threads(1)
    all_workloads = workloads()
    print(
        f"torch {torch.__version__}, 1 thread, {options.rounds} rounds of 200 calls (10 for lstm, chain), medians; "
        "overhead = t - eager"
    )
    ratios: dict[str, dict[str, float]] = {}
    header = f"{'workload':<12} {'mode':<8} {'eager':>9} {'ours':>9} {'ours_aa':>9} {'torch':>9}  "
    print(header + f"{'ours/torch':>10} {'A/A':>6}")
    for name in options.workloads or list(all_workloads):
        wl = all_workloads[name]
        for mode in options.modes.split(","):
            t = measure(wl, mode, options.rounds)
            over = {impl: t[impl] - t["eager"] for impl in IMPLS if impl != "eager"}
            ratio = over["ours"] / over["torch"] if over["torch"] > 0 else float("nan")
            aa = over["ours"] / over["ours'"] if over["ours'"] > 0 else float("nan")
            if name in MAIN:
                ratios.setdefault(mode, {})[name] = ratio
            ours, again, theirs = (over[impl] * 1e6 for impl in ("ours", "ours'", "torch"))
            print(
                f"{name:<12} {mode:<8} {t['eager'] * 1e6:8.1f}u {ours:8.1f}u {again:8.1f}u {theirs:8.1f}u  "
                f"{ratio:9.2f}x {aa:5.2f}x",
                flush=True,
            )

    for mode, by_name in ratios.items():
        valid = [r for r in by_name.values() if r > 0]
        geomean = math.exp(sum(map(math.log, valid)) / len(valid)) if valid else float("nan")
        print(f"geomean ours/torch over {', '.join(by_name)} ({mode}): {geomean:.2f}x")


if __name__ == "__main__":
    main()
