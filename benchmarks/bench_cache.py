"""The compile cache (``aot.cache``): backend compiles and compile time, cache on vs off, in one run.

Three measurements, ratios read in one run:

- ``blocks``: 12 identical transformer blocks (``bench_vs_torch.TransformerBlock``)
  compiled separately with ``aot_module``, then one forward+backward through the
  chain; backend compiler calls and total compile time, aotfx cache on vs off, and
  torch's AOTAutograd (``torch._functorch.aot_autograd.aot_module``) on the same blocks.
- ``lstm``: an LSTM unrolled for 100 steps, each step's cell compiled by its own
  ``aot_function`` (a fresh closure per step, as separate call sites would make):
  backend calls and compile time, cache on vs off. Also the same cell *function*
  compiled 100 times (the cheap key: tracing skipped too).
- ``warm``: a fresh process compiling ``aot.demo.TinyGPT`` (forward+backward) with a
  persistent cache directory: cold (empty directory) vs warm (filled by a previous
  process). Wall time of the whole process and of the compile alone.

Run ``python benchmarks/bench_cache.py`` (``--reps`` samples each, median).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch._functorch.config as functorch_config
from torch._functorch.aot_autograd import aot_module as torch_aot_module

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_torch import TransformerBlock

import aot
from aot import cache

ROOT = Path(__file__).resolve().parents[1]


class Counting:
    """The nop compiler, counting its calls (identity-keyed: shared in this process only)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        self.calls += 1
        return gm


def _blocks(impl: str) -> tuple[int, float]:
    torch.manual_seed(0)
    blocks = [TransformerBlock() for _ in range(12)]
    compiler = Counting()
    x = torch.randn(2, 8, 32, requires_grad=True)
    cache.clear()
    start = time.perf_counter()
    make = torch_aot_module if impl == "torch" else aot.aot_module
    compiled = [make(block, compiler, compiler) for block in blocks]
    out = x
    for block in compiled:
        out = block(out)
    out.sum().backward()
    return compiler.calls, time.perf_counter() - start


def _lstm(fresh_closure: bool, steps: int = 100) -> tuple[int, float]:
    hidden, features, batch = 8, 8, 2
    torch.manual_seed(0)
    w_ih = (torch.randn(features, 4 * hidden) * 0.3).requires_grad_()
    w_hh = (torch.randn(hidden, 4 * hidden) * 0.3).requires_grad_()
    b = (torch.randn(4 * hidden) * 0.3).requires_grad_()
    xs = torch.randn(steps, batch, features)

    def make_cell() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
        def cell(
            x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor, b: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            i, f, g, o = (x @ w_ih + h @ w_hh + b).chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            return torch.sigmoid(o) * torch.tanh(c), c

        return cell

    shared = make_cell()
    compiler = Counting()
    cache.clear()
    start = time.perf_counter()
    # Initial state requiring grad: every step then has one signature (else step 1 is its own graph pair).
    h, c = torch.zeros(batch, hidden, requires_grad=True), torch.zeros(batch, hidden, requires_grad=True)
    for t in range(steps):
        h, c = aot.aot_function(make_cell() if fresh_closure else shared, compiler)(xs[t], h, c, w_ih, w_hh, b)
    (h.sum() + c.sum()).backward()
    return compiler.calls, time.perf_counter() - start


_GPT = textwrap.dedent(
    """
    import json, time
    start = time.perf_counter()
    import torch, aot
    from aot import cache
    from aot.demo import GPTConfig, make_batches, make_model
    imported = time.perf_counter()
    config = GPTConfig()
    model = aot.aot_module(make_model(config, 0), aot.nop)
    inputs, targets = next(make_batches(config, 0, 1))
    model(inputs, targets).backward()
    done = time.perf_counter()
    print(json.dumps({"process": done - start, "compile": done - imported, **cache.stats().__dict__}))
    """
)


def _gpt_process(directory: str) -> dict[str, Any]:
    env = {**os.environ, cache.ENV_DIR: directory}
    result = subprocess.run([sys.executable, "-c", _GPT], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _median(samples: list[tuple[int, float]]) -> tuple[int, float]:
    return samples[0][0], statistics.median(seconds for _, seconds in samples)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="samples per measurement (median)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="Your compiler for AOTAutograd is returning")
    functorch_config.enable_autograd_cache = False
    _blocks("on")  # process-wide one-time initialisation, for everyone

    print("12 identical transformer blocks, aot_module each, one fwd+bwd (backend calls, compile s)")
    rows = {}
    for impl in ("on", "off", "torch"):
        samples = []
        for _ in range(args.reps):
            if impl == "off":
                with cache.disabled():
                    samples.append(_blocks(impl))
            else:
                samples.append(_blocks(impl))
        rows[impl] = _median(samples)
    for impl, (calls, seconds) in rows.items():
        label = {"on": "aotfx cache on", "off": "aotfx cache off", "torch": "torch AOTAutograd"}[impl]
        print(f"  {label:<18} {calls:>3} calls  {seconds:7.3f} s")
    print(f"  time on/off {rows['on'][1] / rows['off'][1]:.2f}x, on/torch {rows['on'][1] / rows['torch'][1]:.2f}x")

    print("unrolled LSTM, 100 steps, each step's cell compiled by its own aot_function")
    lstm = {}
    for label, fresh, off in (
        ("fresh closures, cache on", True, False),
        ("fresh closures, cache off", True, True),
        ("one cell function, cache on", False, False),
    ):
        samples = []
        for _ in range(args.reps):
            if off:
                with cache.disabled():
                    samples.append(_lstm(fresh))
            else:
                samples.append(_lstm(fresh))
        lstm[label] = _median(samples)
        print(f"  {label:<28} {lstm[label][0]:>4} calls  {lstm[label][1]:7.3f} s")
    on, off = lstm["fresh closures, cache on"][1], lstm["fresh closures, cache off"][1]
    print(f"  time on/off {on / off:.2f}x; trace skipped: {lstm['one cell function, cache on'][1] / off:.2f}x of off")

    print("warm start: fresh process, TinyGPT fwd+bwd with aot.nop, persistent cache cold vs warm")
    cold_runs, warm_runs = [], []
    for _ in range(args.reps):
        with tempfile.TemporaryDirectory() as parent:
            directory = str(Path(parent) / "cache")
            cold_runs.append(_gpt_process(directory))
            warm_runs.append(_gpt_process(directory))
    for label, runs in (("cold", cold_runs), ("warm", warm_runs)):
        process = statistics.median(r["process"] for r in runs)
        compile_s = statistics.median(r["compile"] for r in runs)
        print(
            f"  {label}: process {process:6.3f} s, compile {compile_s:6.3f} s, "
            f"disk hits {runs[0]['disk_hits']}, backend compiles {runs[0]['backend_compiles']}"
        )
    cold_c = statistics.median(r["compile"] for r in cold_runs)
    warm_c = statistics.median(r["compile"] for r in warm_runs)
    print(f"  compile cold/warm {cold_c / warm_c:.2f}x")


if __name__ == "__main__":
    main()
