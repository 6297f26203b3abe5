"""Hessian-vector products on the demo GPT: aotfx-compiled vs eager, and the compile time of the second-order graphs.

Usage::

    python benchmarks/bench_hvp.py [--rounds 21] [--layers 2] [--d-model 32]

The HVP is w.r.t. all parameters of ``aot.demo.TinyGPT`` (loss on one batch): the gradient with
``create_graph=True``, its dot product with a fixed random vector, and the gradient of that. Eager runs
the module; compiled runs ``aot.aot_module`` of a copy with ``aot.nop``. One thread
(``torch.set_num_threads(1)``); eager and compiled are measured interleaved, and the table gives the
median per HVP and the ratio. The first compiled HVP compiles the forward, then the higher-order
backward's own pair: their times are reported separately. The HVPs are checked equal first.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import aot
from aot.demo import GPTConfig, make_batches, make_model


def hvp(
    model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor], vector: list[torch.Tensor]
) -> list[torch.Tensor]:
    params = list(model.parameters())
    grads = torch.autograd.grad(model(*batch), params, create_graph=True)
    dot = sum((g * v).sum() for g, v in zip(grads, vector, strict=True))
    return list(torch.autograd.grad(dot, params))  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=32)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    config = GPTConfig(n_layers=args.layers, d_model=args.d_model)
    eager = make_model(config, seed=0)
    compiled = aot.aot_module(copy.deepcopy(eager), aot.nop)
    batch = next(iter(make_batches(config, seed=1, count=1)))
    generator = torch.Generator().manual_seed(2)
    vector = [torch.randn(p.shape, generator=generator) for p in eager.parameters()]

    start = time.perf_counter()
    first = hvp(compiled, batch, vector)
    first_seconds = time.perf_counter() - start
    entry = aot.inspect.entries(compiled)[-1]
    second = entry.higher_order.entries[-1]
    expected = hvp(eager, batch, vector)
    torch.testing.assert_close(first, expected, rtol=1e-4, atol=1e-5)

    times: dict[str, list[float]] = {"eager": [], "aotfx": []}
    for round_ in range(args.rounds):
        order = [("eager", eager), ("aotfx", compiled)]
        for name, model in order if round_ % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            hvp(model, batch, vector)
            times[name].append(time.perf_counter() - start)
    eager_ms, ours_ms = (statistics.median(times[name]) * 1e3 for name in ("eager", "aotfx"))
    print(config.describe())
    print(f"HVP w.r.t. {sum(p.numel() for p in eager.parameters())} parameters, median of {args.rounds}, 1 thread")
    print(f"  eager            {eager_ms:8.2f} ms")
    print(f"  aotfx            {ours_ms:8.2f} ms   (aotfx/eager {ours_ms / eager_ms:.2f})")
    print("compile (first compiled HVP, cold):")
    print(f"  first-order forward          {entry.compile_seconds * 1e3:8.1f} ms")
    print(f"  second-order trace+forward   {second.compile_seconds * 1e3:8.1f} ms")
    print(f"  second-order backward        {second.backward_compile_seconds * 1e3:8.1f} ms")
    print(f"  whole first HVP              {first_seconds * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
