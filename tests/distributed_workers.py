"""Worker processes for the distributed tests: gloo on the loopback address, 2 ranks, eager DDP as the oracle.

``spawn(worker, world_size, tmp_path)`` runs ``worker(rank, world_size, out_dir)`` in
``world_size`` processes (``torch.multiprocessing.spawn``) rendezvousing through a file
in ``tmp_path``; every collective times out after ``TIMEOUT`` so a dead peer fails the
test with gloo's error instead of hanging it. Each worker returns its results to the
test through ``torch.save`` files: rank 0's are returned.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import pathlib
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import aot
from aot.dynamo import make_backend

TIMEOUT = datetime.timedelta(seconds=30)
STEPS = 3


def _run(rank: int, world_size: int, out_dir: str, worker: Callable[[int, int], Any]) -> None:
    torch.set_num_threads(1)  # two processes on CI's two cores
    dist.init_process_group(
        "gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank, world_size=world_size, timeout=TIMEOUT
    )
    try:
        result = worker(rank, world_size)
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawn(worker: Callable[[int, int], Any], tmp_path: pathlib.Path, world_size: int = 2) -> Any:
    """``worker(rank, world_size)`` in ``world_size`` gloo processes; rank 0's result."""
    mp.spawn(_run, args=(world_size, str(tmp_path), worker), nprocs=world_size, join=True)
    return torch.load(tmp_path / "rank0.pt", weights_only=False)


class MLP(nn.Module):
    """A user's module: Dynamo compiles its forward (it skips ``torch.nn``'s own, as ``nn.Sequential``'s)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 512), nn.Linear(512, 512), nn.Linear(512, 512), nn.Linear(512, 4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = torch.tanh(layer(x))
        return self.layers[-1](x)  # type: ignore[no-any-return]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return MLP()


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each rank its own data, so the all-reduce matters."""
    generator = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(16, 8, generator=generator), torch.randn(16, 4, generator=generator)


def _train(run: Any, ddp: DDP, params: list[nn.Parameter], rank: int, events: list[str]) -> dict[str, Any]:
    """``STEPS`` Adam steps, then ``STEPS`` more accumulating two micro-batches (the first under ``no_sync``).

    Each backward records the order of its events: each bucket handed to the all-reduce
    (DDP's comm hook), each compiled backward graph run, and the input's gradient (last).
    """

    def allreduce(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks annotations against real classes
        events.append(f"bucket {bucket.index()}")
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, allreduce)
    optimizer = torch.optim.Adam(params, lr=1e-3)
    results: dict[str, Any] = {"losses": [], "params": [], "events": []}
    for accumulate in (1, 2):
        for step in range(STEPS):
            for micro in range(accumulate):
                x, y = batch(rank, 10 * accumulate + step * accumulate + micro)
                x.requires_grad_()
                x.register_hook(lambda grad: events.append("input grad"))
                events.clear()
                with contextlib.nullcontext() if micro == accumulate - 1 else ddp.no_sync():
                    loss = nn.functional.mse_loss(run(x), y)
                    loss.backward()
                results["losses"].append(loss.detach())
                results["events"].append(list(events))
            optimizer.step()
            optimizer.zero_grad()
        results["params"].append([p.detach().clone() for p in params])
    return results


def recording_compiler(events: list[str]) -> Callable[..., Any]:
    """A backward compiler whose graphs log ``backward graph`` into ``events`` as they start."""

    def compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        def run(*args: Any) -> Any:
            events.append("backward graph")
            return gm(*args)

        return run

    return compiler


class CountingBackend:
    """aotfx, counting the graphs Dynamo hands it (the DDP optimizer's pieces)."""

    def __init__(self, events: list[str]) -> None:
        self.graphs = 0
        self.backend = make_backend(aot.nop, recording_compiler(events))

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.graphs += 1
        return self.backend(gm, example_inputs)


# The MLP's 512x512 layers (1 MiB each) fill a bucket each: Dynamo's DDP optimizer splits the graph there.
# (It takes DDP's default first bucket, 1 MiB, and refuses a smaller cap for the others.)
BUCKET_CAP_MB = 1


def ddp_worker(rank: int, world_size: int) -> dict[str, Any]:
    """Eager DDP, DDP over ``aot_module``, and ``torch.compile(DDP)`` through aotfx, trained alike."""
    torch._dynamo.reset()
    results: dict[str, Any] = {"initial": [p.detach().clone() for p in mlp().parameters()]}
    for name in ("eager", "aot_module", "torch.compile"):
        model, events = mlp(), []
        compiled = aot.aot_module(model, aot.nop, recording_compiler(events))
        ddp = DDP(compiled if name == "aot_module" else model, bucket_cap_mb=BUCKET_CAP_MB)
        backend = CountingBackend(events)
        run = torch.compile(ddp, backend=backend) if name == "torch.compile" else ddp
        results[name] = _train(run, ddp, list(model.parameters()), rank, events)
        results[name]["graphs"] = backend.graphs
    return results


def dead_peer_worker(rank: int, world_size: int) -> None:
    """Rank 1 dies before the all-reduce rank 0 waits in."""
    if rank == 1:
        raise RuntimeError("rank 1 died")
    dist.all_reduce(torch.ones(1))


def fsdp_worker(rank: int, world_size: int) -> dict[str, Any]:
    """FSDP2 (``fully_shard``) per block of the demo GPT: eager, each block ``aot_module``-compiled inside,
    and the whole sharded model under ``torch.compile(backend="aotfx")``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from aot.demo import GPTConfig, make_batches, make_model

    torch._dynamo.reset()
    mesh = init_device_mesh("cpu", (world_size,))
    config = GPTConfig()
    results: dict[str, Any] = {}
    for name in ("eager", "aot_module inside", "aot_module outside", "torch.compile"):
        model = make_model(config, seed=0)
        for index, block in enumerate(model.blocks):
            if name == "aot_module inside":  # FSDP's hooks on the compiled block
                block = model.blocks[index] = aot.aot_module(block, aot.nop)
            fully_shard(block, mesh=mesh)
            if name == "aot_module outside":  # the sharded block compiled: aot_module runs FSDP's hooks around
                model.blocks[index] = aot.aot_module(block, aot.nop)
        fully_shard(model, mesh=mesh)
        backend = CountingBackend([])
        run = torch.compile(model, backend=backend) if name == "torch.compile" else model
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = []
        for inputs, targets in make_batches(config, seed=rank + 1, count=STEPS):
            loss = run(inputs, targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.detach())
        results[name] = {
            "graphs": backend.graphs,
            "entries": [len(block.compiled.entries) for block in model.blocks if isinstance(block, aot.AOTModule)],
            "losses": torch.stack(losses),
            "params": {key.replace("orig_module.", ""): _full(value) for key, value in model.state_dict().items()},
        }
    # aot_module over the whole sharded model: the blocks' FSDP hooks would run on fake tensors. Refused.
    model = make_model(config, seed=0)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    inputs, targets = next(make_batches(config, seed=rank + 1, count=1))
    try:
        aot.aot_module(model, aot.nop)(inputs, targets)
    except aot.errors.UnsupportedHookError as error:
        results["whole model refused"] = str(error)
    return results


def _full(value: torch.Tensor) -> torch.Tensor:
    """A sharded parameter's whole value (a DTensor's ``full_tensor``); a buffer as it is."""
    full = getattr(value, "full_tensor", None)
    return full() if full is not None else value


def training_worker(rank: int, world_size: int) -> dict[str, Any]:
    """Everything the distributed tests check, in one spawn (process start-up dominates their time)."""
    return {"ddp": ddp_worker(rank, world_size), "fsdp": fsdp_worker(rank, world_size)}
