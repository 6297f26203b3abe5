"""Cold compile time, aotfx vs torch's AOTAutograd, with an A/A pair beside for the noise floor.

A cold compile is ``bench_vs_torch``'s: from creating a fresh compiled object to the end of its first
forward+backward (the lazily compiled backward included), FakeTensorMode's dispatch cache cleared
before every sample, torch's AOTAutograd cache off, one thread, nop compilers. Three implementations
run interleaved (the order rotates every round): ours, a second sample of ours (``ours_aa``: the A/A
pair, whose ratio shows the noise) and torch. Medians per workload; the geomean of ``ours/torch``.

``python benchmarks/bench_compile.py [--reps 7] [--workloads mlp ...] [--chain-ops 2000] [--lstm-steps 100]``
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch._functorch.config as functorch_config

sys.path.insert(0, str(Path(__file__).parent))

import bench_vs_torch as bench

IMPLS = ("ours", "ours_aa", "torch")


def measure(wl: bench.Workload, reps: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    for r in range(reps):
        for impl in bench.rotated(IMPLS, r):
            bench.cold_start()
            start = time.perf_counter()
            compiled = bench.compile_with("torch" if impl == "torch" else "ours", wl)
            bench.step(compiled, wl.args)
            samples[impl].append(time.perf_counter() - start)
            del compiled
    return {impl: statistics.median(s) for impl, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--workloads", nargs="*", choices=["mlp", "transformer", "lstm", "chain"])
    parser.add_argument("--chain-ops", type=int, default=2000)
    parser.add_argument("--lstm-steps", type=int, default=100)
    options = parser.parse_args()
    torch.set_num_threads(1)
    functorch_config.enable_autograd_cache = False
    functorch_config.force_autograd_cache = False
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    workloads = bench.build_workloads(options.chain_ops, options.lstm_steps)
    warm = bench.build_workloads(3, 2)["mlp"]  # process-wide one-time initialisation, untimed
    for impl in ("ours", "torch"):
        bench.step(bench.compile_with(impl, warm), warm.args)
    print(f"torch {torch.__version__}, 1 thread, {options.reps} interleaved reps, medians")
    print(f"{'workload':<12} {'ours':>9} {'ours_aa':>9} {'torch':>9}  {'ours/torch':>10} {'A/A':>6}")
    ratios = []
    for name in options.workloads or list(workloads):
        t = measure(workloads[name], options.reps)
        ratio, aa = t["ours"] / t["torch"], t["ours"] / t["ours_aa"]
        ratios.append(ratio)
        print(
            f"{name:<12} {bench.fmt_time(t['ours']):>9} {bench.fmt_time(t['ours_aa']):>9} "
            f"{bench.fmt_time(t['torch']):>9}  {ratio:9.2f}x {aa:5.2f}x",
            flush=True,
        )
    print(f"geomean ours/torch: {math.exp(statistics.fmean(math.log(r) for r in ratios)):.2f}x")


if __name__ == "__main__":
    main()
