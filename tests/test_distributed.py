"""DDP and FSDP2 through aotfx in 2 gloo processes: losses and parameters equal eager's.

DDP: ``DDP(aot_module(m))`` and ``torch.compile(DDP(m), backend="aotfx")`` (buckets small
enough that Dynamo's DDP optimizer splits the graph, each piece through aotfx), 3 Adam
steps, then 3 more accumulating two micro-batches under ``no_sync()``.

FSDP2: ``fully_shard`` per block of the demo GPT, each block compiled by ``aot_module``
(inside or outside ``fully_shard``: FSDP's hooks run around the compiled call on the real
tensors, and the compiled graph sees the unsharded plain parameters), or the sharded model
under ``torch.compile(backend="aotfx")`` (Dynamo runs FSDP's hooks eagerly and hands aotfx
each block's forward). ``aot_module`` over the whole sharded model is refused, naming the
sharded block and FSDP's hook.

One spawn runs every case (see ``tests/distributed_workers.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from filelock import FileLock
from torch.multiprocessing import ProcessRaisedException

from tests.distributed_workers import STEPS, dead_peer_worker, spawn, training_worker
from tests.oracle import assert_close

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")

SYNCED, NO_SYNC = 0, 1  # the two phases: their parameter snapshots


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # Once per session even under pytest-xdist: the workers share the base temp dir's parent.
    shared = tmp_path_factory.getbasetemp().parent / "distributed_results.pt"
    with FileLock(f"{shared}.lock"):
        if not shared.exists():
            torch.save(spawn(training_worker, tmp_path_factory.mktemp("distributed")), shared)
    return torch.load(shared, weights_only=False)  # type: ignore[no-any-return]


@pytest.fixture
def ddp_results(results: dict[str, Any]) -> dict[str, Any]:
    return results["ddp"]  # type: ignore[no-any-return]


@pytest.fixture
def fsdp_results(results: dict[str, Any]) -> dict[str, Any]:
    return results["fsdp"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", ["aot_module", "torch.compile"])
def test_ddp_losses_and_parameters_equal_eager_ddp(ddp_results: dict[str, Any], name: str) -> None:
    got, want = ddp_results[name], ddp_results["eager"]
    assert_close(torch.stack(got["losses"]), torch.stack(want["losses"]), model=True)
    for phase in (SYNCED, NO_SYNC):
        for index, (p, q) in enumerate(zip(got["params"][phase], want["params"][phase], strict=True)):
            assert_close(p, q, model=True, msg=f"phase {phase}, parameter {index}")
    assert not torch.equal(got["params"][SYNCED][0], ddp_results["initial"][0])


def test_dynamo_ddp_optimizer_hands_aotfx_one_graph_per_bucket(ddp_results: dict[str, Any]) -> None:
    assert ddp_results["torch.compile"]["graphs"] == 3
    assert ddp_results["aot_module"]["graphs"] == ddp_results["eager"]["graphs"] == 0


def _step_events(results: dict[str, Any], step: int) -> list[str]:
    return results["events"][step]  # type: ignore[no-any-return]


def test_torch_compile_ddp_all_reduce_overlaps_the_backward(ddp_results: dict[str, Any]) -> None:
    # Step 2: DDP has rebuilt its buckets in gradient order. A bucket goes to the all-reduce as soon as the
    # backward graph of its piece ran, before the next piece's backward graph: overlap.
    events = _step_events(ddp_results["torch.compile"], 2)
    assert events.index("bucket 0") < len(events) - 1 - events[::-1].index("backward graph")
    assert events == [
        "backward graph",
        "bucket 0",
        "backward graph",
        "bucket 1",
        "backward graph",
        "input grad",
        "bucket 2",
    ]


def test_aot_module_ddp_backward_is_one_graph_all_reduce_after_it(ddp_results: dict[str, Any]) -> None:
    # The whole model is one backward graph: its buckets go to the all-reduce once it has run (for overlap,
    # compile per block, or use torch.compile(DDP(m)) as above).
    events = _step_events(ddp_results["aot_module"], 2)
    assert events.count("backward graph") == 1 and events[0] == "backward graph"
    assert sorted(e for e in events if e.startswith("bucket")) == ["bucket 0", "bucket 1", "bucket 2"]


@pytest.mark.parametrize("name", ["eager", "aot_module", "torch.compile"])
def test_no_sync_micro_batch_hands_nothing_to_the_all_reduce(ddp_results: dict[str, Any], name: str) -> None:
    for step in range(STEPS):
        under_no_sync = _step_events(ddp_results[name], STEPS + 2 * step)
        synced = _step_events(ddp_results[name], STEPS + 2 * step + 1)
        assert not any(e.startswith("bucket") for e in under_no_sync)
        assert sum(e.startswith("bucket") for e in synced) == 3


@pytest.mark.parametrize("name", ["aot_module inside", "aot_module outside", "torch.compile"])
def test_fsdp2_per_block_equals_eager_fsdp2(fsdp_results: dict[str, Any], name: str) -> None:
    got, want = fsdp_results[name], fsdp_results["eager"]
    assert_close(got["losses"], want["losses"], model=True)
    assert sorted(got["params"]) == sorted(want["params"])
    for key, value in want["params"].items():
        assert_close(got["params"][key], value, model=True, msg=key)
    if name == "torch.compile":
        assert got["graphs"] >= 1  # each block's forward went through aotfx
    else:
        assert got["entries"] == [1, 1]  # each block compiled once, its graph run at every step


def test_aot_module_over_a_sharded_model_refused_naming_block_and_fsdp_hook(fsdp_results: dict[str, Any]) -> None:
    message = fsdp_results["whole model refused"]
    assert "submodule 'blocks.0' (FSDPBlock)" in message and "_pre_forward" in message
    assert "aot_module before or after fully_shard" in message


def test_dead_peer_fails_the_spawn_with_its_error(tmp_path: Any) -> None:
    # Rank 1's error, or rank 0's gloo error on the lost connection: whichever the parent sees first.
    with pytest.raises(ProcessRaisedException, match=r"rank 1 died|Connection reset|Connection closed"):
        spawn(dead_peer_worker, tmp_path)
