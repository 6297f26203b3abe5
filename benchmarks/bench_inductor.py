"""Training-step time of the demo GPT: aotfx + Inductor vs ``torch.compile(backend="inductor")`` vs eager.

Four implementations of one forward + backward step (``loss = model(idx, targets);
loss.backward()``), each on its own copy of the same initial model:

- ``eager``: the model as it is;
- ``inductor``: ``torch.compile(model, backend="inductor")``, torch's own AOTAutograd + Inductor;
- ``aotfx_inductor``: ``torch.compile(model, backend=aot.dynamo.aotfx_inductor)``: Dynamo
  captures the graph, aotfx traces, functionalizes and partitions it, Inductor compiles
  each graph (``aot.backends.inductor``, traced with ``inductor_decompositions()``);
- ``aot_module_inductor``: ``aot.aot_module(model, aot.backends.inductor, decompositions=...)``:
  the same without Dynamo in front.

Before timing, each compiled model's loss and gradients after one step are checked against
eager. Step times are warm (compilation excluded): the implementations are measured
interleaved, the order rotating every round, median over rounds of the mean step time in a
round. torch runs on one thread (``--threads``). Read the ratios, not the seconds.

Compile times are measured cold, each in a fresh process with an empty Inductor cache
directory (so no implementation reuses kernels another one compiled): the first step,
from the first call to the end of its backward. They include the process's one-time
Dynamo/Inductor initialisation, the same for every implementation.

Run ``python benchmarks/bench_inductor.py`` (both sizes) or ``--sizes demo --rounds 11``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

import aot
import aot.cache
from aot.backends import inductor, inductor_decompositions
from aot.demo import GPTConfig, TinyGPT, make_batches, make_model
from aot.dynamo import aotfx_inductor

IMPLS = ("eager", "inductor", "aotfx_inductor", "aot_module_inductor")
SIZES = {
    "demo": GPTConfig(),  # python -m aot's model: 2 blocks, d_model 32, seq 16, batch 4
    "small": GPTConfig(vocab_size=128, seq_len=64, d_model=128, n_heads=4, n_layers=4, batch_size=8),
}
SEED = 0
RTOL, ATOL = 1e-4, 1e-5


def build(impl: str, model: TinyGPT) -> Callable[..., torch.Tensor]:
    """The callable running ``model``'s forward under ``impl``."""
    if impl == "eager":
        return model
    if impl == "inductor":
        return torch.compile(model, backend="inductor")
    if impl == "aotfx_inductor":
        return torch.compile(model, backend=aotfx_inductor)
    if impl == "aot_module_inductor":
        return aot.aot_module(model, inductor, decompositions=inductor_decompositions())
    raise ValueError(impl)


def step(fn: Callable[..., torch.Tensor], model: TinyGPT, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    loss = fn(*batch)
    loss.backward()
    return loss


def check(models: dict[str, TinyGPT], fns: dict[str, Callable[..., Any]], batch: Any) -> None:
    """One step of each; loss and every gradient must match eager's."""
    eager_loss = step(fns["eager"], models["eager"], batch)
    eager_grads = [p.grad for p in models["eager"].parameters()]
    for impl in IMPLS[1:]:
        loss = step(fns[impl], models[impl], batch)
        torch.testing.assert_close(loss, eager_loss, rtol=RTOL, atol=ATOL)
        grads = [p.grad for p in models[impl].parameters()]
        worst = max((g - e).abs().max().item() for g, e in zip(grads, eager_grads, strict=True))
        for grad, expected in zip(grads, eager_grads, strict=True):
            torch.testing.assert_close(grad, expected, rtol=RTOL, atol=10 * ATOL)
        print(f"  {impl:<20} loss {loss.item():.6f} (eager {eager_loss.item():.6f}), max |grad diff| {worst:.1e}")


def measure(
    fns: dict[str, Callable[..., Any]], models: dict[str, TinyGPT], batch: Any, rounds: int
) -> dict[str, float]:
    """Median over rounds of the mean warm step time; the order of the implementations rotates every round."""
    for impl in IMPLS:  # warm-up, and an estimate of how many steps make a ~50 ms round
        step(fns[impl], models[impl], batch)
    start = time.perf_counter()
    step(fns["eager"], models["eager"], batch)
    steps = max(3, int(0.05 / max(time.perf_counter() - start, 1e-6)))
    samples: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    for round_index in range(rounds):
        shift = round_index % len(IMPLS)
        for impl in IMPLS[shift:] + IMPLS[:shift]:
            fn, model = fns[impl], models[impl]
            start = time.perf_counter()
            for _ in range(steps):
                step(fn, model, batch)
            samples[impl].append((time.perf_counter() - start) / steps)
    return {impl: statistics.median(times) for impl, times in samples.items()}


def cold_compile(impl: str, size: str, threads: int) -> float:
    """First-step seconds of ``impl`` in a fresh process with an empty Inductor cache."""
    with tempfile.TemporaryDirectory(prefix="aotfx_bench_inductor_") as cache_dir:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache_dir, "TORCHINDUCTOR_FX_GRAPH_CACHE": "0"}
        command = [sys.executable, __file__, "--_first-step", impl, "--sizes", size, "--threads", str(threads)]
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    seconds: float = json.loads(result.stdout.strip().splitlines()[-1])["seconds"]
    return seconds


def first_step(impl: str, size: str) -> None:
    config = SIZES[size]
    model = make_model(config, SEED)
    batch = next(make_batches(config, SEED, 1))
    fn = build(impl, model)
    start = time.perf_counter()
    step(fn, model, batch)
    print(json.dumps({"impl": impl, "seconds": time.perf_counter() - start}))


def run(size: str, rounds: int, threads: int) -> None:
    config = SIZES[size]
    params = sum(p.numel() for p in make_model(config, SEED).parameters())
    print(f"\n== {size}: {config.describe()}; {params / 1e3:.0f}k parameters; {threads} thread(s)")
    base = make_model(config, SEED)
    models = {impl: copy.deepcopy(base) for impl in IMPLS}
    batch = next(make_batches(config, SEED, 1))
    torch._dynamo.reset()
    with aot.cache.disabled():  # each aotfx variant compiles its own graphs
        fns = {impl: build(impl, models[impl]) for impl in IMPLS}
        print("correctness (one step vs eager):")
        check(models, fns, batch)
    times = measure(fns, models, batch, rounds)
    print(f"compile (cold, fresh process each; first forward+backward), {size}:")
    compile_seconds = {impl: cold_compile(impl, size, threads) for impl in IMPLS}
    print(f"\n{'':<22}{'step ms':>10}{'/eager':>9}{'/inductor':>11}{'first step s':>14}")
    for impl in IMPLS:
        ms = times[impl] * 1e3
        print(
            f"{impl:<22}{ms:>10.3f}{times[impl] / times['eager']:>9.2f}"
            f"{times[impl] / times['inductor']:>11.2f}{compile_seconds[impl]:>14.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["demo", "small"])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--_first-step", dest="first_step", choices=IMPLS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.first_step:
        first_step(args.first_step, args.sizes[0])
        return
    print(f"torch {torch.__version__}, aotfx {aot.__version__}")
    for size in args.sizes:
        run(size, args.rounds, args.threads)


if __name__ == "__main__":
    main()
