"""DDP training-step time in 2 gloo processes: eager, aotfx (``aot_module`` and ``torch.compile``), inductor.

Each rank trains ``aot.demo.TinyGPT`` (a larger config than the demo's) with Adam under
``DistributedDataParallel``; one step is forward, backward (with DDP's all-reduce) and
``optimizer.step()``. Variants:

- ``eager``: ``DDP(model)``
- ``aot_module``: ``DDP(aot_module(model, nop))``: one compiled forward and backward
- ``compile aotfx``: ``torch.compile(DDP(model), backend="aotfx")``: Dynamo's DDP optimizer
  splits the graph at bucket boundaries, each piece through aotfx
- ``compile inductor``: ``torch.compile(DDP(model))``, torch's default backend

After warm-up (compiles included there), the variants are timed interleaved: the order
rotates every round, so drifts in machine speed hit all. Read the ratios to eager. Every
variant's loss after warm-up is checked against eager's first.

Run ``python benchmarks/bench_ddp.py`` (``--quick``: fewer rounds; ``--no-inductor`` where no
C++ compiler is available). Not run in CI.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import aot
from aot.demo import GPTConfig, make_batches, make_model

CONFIG = GPTConfig(d_model=128, n_heads=4, n_layers=4, seq_len=64, batch_size=8, vocab_size=256)


def _variants(model: torch.nn.Module, inductor: bool) -> dict[str, tuple[Any, torch.nn.Module]]:
    copies = {name: copy.deepcopy(model) for name in ("eager", "aot_module", "compile aotfx", "compile inductor")}
    variants: dict[str, tuple[Any, torch.nn.Module]] = {
        "eager": (DDP(copies["eager"]), copies["eager"]),
        "aot_module": (DDP(aot.aot_module(copies["aot_module"], aot.nop)), copies["aot_module"]),
        "compile aotfx": (torch.compile(DDP(copies["compile aotfx"]), backend="aotfx"), copies["compile aotfx"]),
    }
    if inductor:
        variants["compile inductor"] = (torch.compile(DDP(copies["compile inductor"])), copies["compile inductor"])
    return variants


def _worker(rank: int, world_size: int, rendezvous: str, args: argparse.Namespace, out: str) -> None:
    torch.set_num_threads(args.threads)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{rendezvous}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=300),
    )
    batches = list(make_batches(CONFIG, seed=rank + 1, count=args.steps))
    variants = _variants(make_model(CONFIG, seed=0), not args.no_inductor)
    optimizers = {name: torch.optim.Adam(module.parameters(), lr=1e-3) for name, (_, module) in variants.items()}

    def step(name: str, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        run = variants[name][0]
        loss = run(*batch)
        loss.backward()
        optimizers[name].step()
        optimizers[name].zero_grad()
        return loss.detach()  # type: ignore[no-any-return]

    first_losses = {name: step(name, batches[0]) for name in variants}  # compiles here
    for name in variants:
        step(name, batches[1])
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for round_index in range(args.rounds):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for name in order:
            dist.barrier()
            start = time.perf_counter()
            for batch in batches:
                step(name, batch)
            samples[name].append((time.perf_counter() - start) / len(batches))
    if rank == 0:
        lines = [
            f"{'variant':18} {'ms/step':>9} {'vs eager':>9}  first loss (eager {first_losses['eager'].item():.6f})"
        ]
        eager = statistics.median(samples["eager"])
        for name in names:
            median = statistics.median(samples[name])
            lines.append(f"{name:18} {median * 1e3:9.2f} {median / eager:9.2f}  {first_losses[name].item():.6f}")
        Path(out).write_text("\n".join(lines) + "\n")
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--steps", type=int, default=5, help="steps per timed sample")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 3 steps")
    parser.add_argument("--no-inductor", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps = 3, 3
    with tempfile.TemporaryDirectory() as directory:
        out = os.path.join(directory, "result.txt")
        mp.spawn(_worker, args=(2, os.path.join(directory, "rendezvous"), args, out), nprocs=2, join=True)
        print(f"DDP, 2 gloo processes, {args.threads} thread(s) each; {CONFIG.describe()}")
        print(Path(out).read_text(), end="")


if __name__ == "__main__":
    main()
